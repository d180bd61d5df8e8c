/* SPDX-License-Identifier: MIT */
/*
 * xsegctl volume: volume operations, sent to vlmc's control socket as one
 * text line per connection (docs/vlmc.md, "Control protocol"):
 *   create NAME SIZE [OBJSIZE] | remove NAME | resize NAME SIZE |
 *   info NAME | list | snapshot VOLUME SNAPSHOT | clone SNAPSHOT NAME
 * vlmc answers with data lines, then "ok" or "error ERRNO MESSAGE".
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "peer_util.h"
#include "xseg.h"
#include "xsegctl_cmds.h"

/* usage errors name the subcommand, so that their hint points at its
 * --help ("Try 'xsegctl volume --help'"), which lists its commands */
#define VOLUME_PROG "xsegctl volume"

#define PROG "xsegctl volume"

/* How long a volume command keeps trying a control socket nobody listens
 * on yet (volume_vlmc_absent), and how often. vlmc makes the socket a
 * moment before it listens on it, and a restart of vlmc (the
 * supervisor's, restart-peer) removes it until the new vlmc is up: a
 * command sent then used to fail at once. Long enough for a restart
 * under load, short enough that a command where no stack runs at all
 * still fails soon. */
#define VOLUME_CONNECT_WAIT_MS	5000
#define VOLUME_CONNECT_RETRY_MS 50

/* xsegctl_vlmc_command's rc says nobody listens at the control socket
 * (yet): no socket file there, or nobody accepting on it. The one rule
 * for both the retry and the hint that no stack may be running. */
static bool volume_vlmc_absent(int rc)
{
	return rc == -ENOENT || rc == -ECONNREFUSED;
}

int xsegctl_vlmc_command(const char *path, const char *line, FILE *out,
			 char *err, size_t errlen, unsigned timeout_s)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char buf[1024];
	FILE *f;
	int fd, rc = -EPROTO;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "control socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		rc = -errno;
		snprintf(err, errlen, "cannot reach vlmc at %s: %s", path,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	if (timeout_s) {
		struct timeval tv = {.tv_sec = timeout_s};

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	f = fdopen(fd, "r+");
	if (!f) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	fprintf(f, "%s\n", line);
	fflush(f);
	snprintf(err, errlen,
		 "vlmc at %s closed the connection without an "
		 "answer",
		 path);
	while (fgets(buf, sizeof(buf), f)) {
		if (!strcmp(buf, "ok\n")) {
			rc = 0;
			break;
		}
		if (!strncmp(buf, "error ", 6)) {
			char *msg;
			long e = strtol(buf + 6, &msg, 10);

			if (*msg == ' ')
				msg++;
			msg[strcspn(msg, "\n")] = 0;
			snprintf(err, errlen, "%s", msg);
			rc = e > 0 && e < 4096 ? (int)e : EIO;
			break;
		}
		if (out)
			fputs(buf, out);
	}
	if (rc == -EPROTO && ferror(f) &&
	    (errno == EAGAIN || errno == EWOULDBLOCK)) {
		snprintf(err, errlen,
			 "vlmc at %s did not answer within %u s (busy with a "
			 "long command?)",
			 path, timeout_s);
		rc = -ETIMEDOUT;
	}
	fclose(f);
	return rc;
}

/* Does the pid file NAME next to the control socket at path name a live
 * process? */
static bool volume_pidfile_live(const char *path, const char *name)
{
	char pf[PATH_MAX + 64];
	const char *slash = strrchr(path, '/');
	int dirlen = slash ? (int)(slash - path) : 1;
	long pid = 0;
	FILE *f;

	snprintf(pf, sizeof(pf), "%.*s/%s", dirlen, slash ? path : ".", name);
	f = fopen(pf, "re");
	if (!f)
		return false;
	if (fscanf(f, "%ld", &pid) != 1)
		pid = 0;
	fclose(f);
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* A stack lives where the socket is: its vlmc or its supervisor (which
 * restarts vlmc) runs, by their pid files in the socket's directory
 * (DIR/run/vlmc.pid, DIR/run/supervisor.pid). Without either nobody will
 * listen there soon: a command fails at once rather than after the wait. */
static bool volume_stack_lives(const char *path)
{
	return volume_pidfile_live(path, "vlmc.pid") ||
	       volume_pidfile_live(path, "supervisor.pid");
}

/*
 * xsegctl_vlmc_command, retried while vlmc is absent
 * (volume_vlmc_absent) but its stack lives (volume_stack_lives), for up
 * to VOLUME_CONNECT_WAIT_MS. The retry cannot run a command twice: the
 * connect failed, so nothing was sent. Any other failure, and vlmc's own
 * answer, returns at once. When vlmc stays absent, err says so and for
 * how long it was tried.
 */
static int volume_command(const char *path, const char *line, char *err,
			  size_t errlen)
{
	uint64_t until =
	    xseg_now_ns() + VOLUME_CONNECT_WAIT_MS * (uint64_t)1000000;
	const struct timespec pause = {.tv_nsec =
					   VOLUME_CONNECT_RETRY_MS * 1000000L};
	bool tried = false;
	size_t len;
	int rc;

	while (
	    (rc = xsegctl_vlmc_command(path, line, stdout, err, errlen, 0)) &&
	    volume_vlmc_absent(rc) && xseg_now_ns() < until &&
	    volume_stack_lives(path)) {
		tried = true;
		nanosleep(&pause, NULL);
	}
	if (volume_vlmc_absent(rc) && tried) {
		len = strlen(err);
		snprintf(
		    err + len, errlen - len, " (tried every %d ms for %d s)",
		    VOLUME_CONNECT_RETRY_MS, VOLUME_CONNECT_WAIT_MS / 1000);
	}
	return rc;
}

static void volume_usage(void)
{
	printf("Usage: xsegctl volume [--ctl PATH | --dir DIR | -g SEGMENT] "
	       "COMMAND ARGS\n"
	       "Volume operations, served by vlmc.\n\n"
	       "Commands:\n"
	       "  create NAME SIZE [OBJSIZE]   new empty volume (object size "
	       "default 4M)\n"
	       "  remove NAME                  delete a volume (answers at "
	       "once; its objects\n"
	       "                               are deleted in the "
	       "background)\n"
	       "  resize NAME SIZE             grow a volume\n"
	       "  info NAME                    one volume, key=value\n"
	       "  list                         all volumes: name size "
	       "object_size ro|rw parent;\n"
	       "                               then '# removing ...' / "
	       "'# reclaiming ...' for\n"
	       "                               volumes being removed\n"
	       "  snapshot VOLUME SNAPSHOT     read-only point-in-time copy\n"
	       "  clone SNAPSHOT NAME          writable copy of a snapshot\n\n"
	       "Where vlmc listens (first that applies):\n"
	       "      --ctl PATH      vlmc's control socket\n"
	       "      --dir DIR       the stack in DIR (DIR/run/vlmc.ctl)\n"
	       "  -g, --segment SEG   vlmc's default /tmp/vlmc-SEG.ctl\n"
	       "  (none)              the stack in " XSEGCTL_STACK_DIR "\n");
}

static const struct {
	const char *name;
	int min, max; /* arguments after the command */
} volume_cmds[] = {
    {"create", 2, 3}, {"remove", 1, 1},	  {"resize", 2, 2}, {"info", 1, 1},
    {"list", 0, 0},   {"snapshot", 2, 2}, {"clone", 2, 2},
};

int xsegctl_volume_main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"ctl", required_argument, NULL, 'c'},
	    {"dir", required_argument, NULL, 'D'},
	    {"segment", required_argument, NULL, 'g'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *ctl = NULL, *dir = NULL, *segment = NULL;
	char path[512], line[1024], err[512];
	size_t k, pos;
	int c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+g:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			ctl = optarg;
			break;
		case 'D':
			dir = optarg;
			break;
		case 'g':
			segment = optarg;
			break;
		case 'h':
			volume_usage();
			return 0;
		default:
			return 2;
		}
	}
	if (optind >= argc) {
		peer_usage_error(VOLUME_PROG, "no command");
		return 2;
	}
	for (k = 0; k < sizeof(volume_cmds) / sizeof(volume_cmds[0]); k++)
		if (!strcmp(argv[optind], volume_cmds[k].name))
			break;
	if (k == sizeof(volume_cmds) / sizeof(volume_cmds[0])) {
		peer_usage_error(VOLUME_PROG, "unknown command '%s'",
				 argv[optind]);
		return 2;
	}
	if (argc - optind - 1 < volume_cmds[k].min ||
	    argc - optind - 1 > volume_cmds[k].max) {
		peer_usage_error(VOLUME_PROG, "%s: wrong number of arguments",
				 volume_cmds[k].name);
		return 2;
	}
	pos = 0;
	for (int i = optind; i < argc; i++) {
		/* the line protocol splits on blanks: refuse them here */
		if (strpbrk(argv[i], " \t\r\n") || !argv[i][0] ||
		    strlen(argv[i]) + 1 >= sizeof(line) - pos) {
			peer_usage_error(VOLUME_PROG,
					 "%s: bad argument '%.64s' (empty, "
					 "with a blank, or too long)",
					 volume_cmds[k].name, argv[i]);
			return 2;
		}
		pos += (size_t)sprintf(line + pos, "%s%s", pos ? " " : "",
				       argv[i]);
	}
	if (ctl)
		snprintf(path, sizeof(path), "%s", ctl);
	else if (segment)
		snprintf(path, sizeof(path), "/tmp/vlmc-%s.ctl",
			 segment + (segment[0] == '/'));
	else
		snprintf(path, sizeof(path), "%s/run/vlmc.ctl",
			 dir ? dir : XSEGCTL_STACK_DIR);
	rc = volume_command(path, line, err, sizeof(err));
	if (rc) {
		/* nobody listens there: most likely no stack runs (review11
		 * N-I), so say what starts one */
		fprintf(stderr, "xsegctl: volume %s: %s%s\n",
			volume_cmds[k].name, err,
			volume_vlmc_absent(rc)
			    ? "; is the stack running? (xsegctl stack start)"
			    : "");
		return 1;
	}
	return 0;
}
