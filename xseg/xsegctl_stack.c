/* SPDX-License-Identifier: MIT */
/*
 * xsegctl stack: start, stop and inspect a whole stack
 *   vlmc (NBD) -> [cached, write-back, plugged] -> store (blocker)
 * from a key = value config file or the embedded default.
 *
 * Layout of a stack's directory DIR (default ./archcache-data):
 *   DIR/store/          the blocker's store
 *   DIR/run/stack.conf  the resolved configuration of the running stack
 *                       (stop, status, plug and unplug read it)
 *   DIR/run/NAME.log    each peer's stderr;  DIR/run/NAME.pid  its pid
 *   DIR/run/nbd.sock    NBD socket;  DIR/run/vlmc.ctl  vlmc control socket
 * Ports: store 1, cached 2, vlmc 3 (static). The segment name defaults to
 * archcache-XXXXXXXX, a hash of DIR's absolute path, so stacks in
 * different directories do not collide.
 *
 * Peers are started detached (own session, stdin /dev/null, stderr to
 * their log) from the directory of this xsegctl binary (or $AC_BIN_DIR),
 * and a start waits until each peer's port is bound by a live process.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "peer_util.h"
#include "xseg.h"
#include "xsegctl_cmds.h"
#include "xsegctl_stack.h"

/* usage errors name the subcommand, so that their hint points at its
 * --help ("Try 'xsegctl stack --help'"), which lists its commands */
#define STACK_PROG "xsegctl stack"
#include "volume.h" /* VLMC_TABLE_MAX */

_Static_assert(STACK_MIN_OBJECT_SIZE >= VLMC_TABLE_MAX,
	       "the smallest stack object_size must hold vlmc's table");

int stack_read_file(const char *path, char **text)
{
	FILE *f = fopen(path, "r");
	size_t cap = 0;
	ssize_t n;
	char *buf = NULL;

	if (!f)
		return -errno;
	n = getdelim(&buf, &cap, 0, f);
	fclose(f);
	if (n < 0) {
		free(buf);
		buf = strdup("");
		if (!buf)
			return -ENOMEM;
	}
	*text = buf;
	return 0;
}

static uint32_t stack_hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* Fill in what depends on the directory. */
static int stack_resolve(struct stack *st)
{
	char abs[PATH_MAX];
	int r;

	/* before anything is made: run/stack.conf must name the directory
	 * (stop, status, plug and unplug read it back) */
	if (!stack_conf_value_ok(st->dir)) {
		stack_err("the stack directory '%s' holds a '#', a line break "
			  "or white space at an end, which run/stack.conf "
			  "cannot hold: choose another directory",
			  st->dir);
		return -EINVAL;
	}
	if (mkdir(st->dir, 0700) && errno != EEXIST) {
		r = -errno;
		stack_err("cannot make the stack directory '%s': %s", st->dir,
			  strerror(-r));
		return r;
	}
	if (!realpath(st->dir, abs)) {
		r = -errno;
		stack_err("the stack directory '%s': %s", st->dir,
			  strerror(-r));
		return r;
	}
	if (!stack_conf_value_ok(abs)) {
		/* a parent's name (the current directory's, or a symbolic
		 * link's target) */
		stack_err("the stack directory '%s' is '%s', which holds a "
			  "'#', a line break or white space at an end, which "
			  "run/stack.conf cannot hold: choose another "
			  "directory",
			  st->dir, abs);
		return -EINVAL;
	}
	/* also when it existed: whoever made it may not have synced its
	 * entry, and the store below it relies on the entry (as
	 * blocker_create does for its own directory) */
	if ((r = peer_fsync_parent(abs))) {
		stack_err("%s: syncing its parent directory: %s", abs,
			  strerror(-r));
		return r;
	}
	strcpy(st->dir, abs);
	if (!st->segment[0])
		snprintf(st->segment, sizeof(st->segment), "archcache-%08x",
			 stack_hash(abs));
	if (!st->nbd_socket[0] &&
	    snprintf(st->nbd_socket, sizeof(st->nbd_socket), "%s/run/nbd.sock",
		     abs) >= (int)sizeof(st->nbd_socket))
		return -ENAMETOOLONG;
	if (!st->ctl_socket[0] &&
	    snprintf(st->ctl_socket, sizeof(st->ctl_socket), "%s/run/vlmc.ctl",
		     abs) >= (int)sizeof(st->ctl_socket))
		return -ENAMETOOLONG;
	if (strlen(st->nbd_socket) >= 108 || strlen(st->ctl_socket) >= 108) {
		stack_err("socket paths under %s are too long for a Unix "
			  "socket; set nbd_socket and ctl_socket",
			  abs);
		return -ENAMETOOLONG;
	}
	return 0;
}

static void stack_path(char *out, size_t cap, const struct stack *st,
		       const char *name)
{
	snprintf(out, cap, "%s/%s", st->dir, name);
}

/* Directory of the peer binaries: $AC_BIN_DIR, else this binary's. */
static void stack_bin(char *out, size_t cap, const char *prog)
{
	char self[PATH_MAX];
	const char *env = getenv("AC_BIN_DIR");
	ssize_t n;

	if (env && *env) {
		if (snprintf(out, cap, "%s/%s", env, prog) >= (int)cap)
			out[0] = 0;
		return;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0) {
		snprintf(out, cap, "%s", prog);
		return;
	}
	self[n] = 0;
	*strrchr(self, '/') = 0;
	if (snprintf(out, cap, "%s/%s", self, prog) >= (int)cap)
		out[0] = 0;
}

static const char *stack_store_prog(const struct stack *st)
{
	char path[PATH_MAX];

	if (strcmp(st->store, "auto"))
		return st->store;
	stack_bin(path, sizeof(path), "blocker");
	return access(path, X_OK) ? "noop" : "blocker";
}

static int stack_write_state(const struct stack *st)
{
	char path[PATH_MAX + 32];
	FILE *f;
	int rc;

	stack_path(path, sizeof(path), st, "run/stack.conf");
	f = fopen(path, "w");
	if (!f)
		return -errno;
	rc = stack_print_conf(f, st, stack_store_prog(st));
	if (fclose(f) && !rc)
		rc = -errno;
	return rc;
}

/* Load the running stack's state from dir. -ENOENT (said only if
 * !quiet) when no stack was ever started there. */
static int stack_load_state(struct stack *st, const char *dir, bool quiet)
{
	char path[PATH_MAX + 32], *text;
	int rc;

	snprintf(path, sizeof(path), "%s/run/stack.conf", dir);
	rc = stack_read_file(path, &text);
	if (rc == -ENOENT && !quiet)
		stack_err("no stack is running in %s (no stack was started "
			  "there: %s is missing)",
			  dir, path);
	else if (rc && rc != -ENOENT)
		stack_err("%s: %s", path, strerror(-rc));
	if (rc)
		return rc;
	rc = stack_parse(st, text, path);
	free(text);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Peers                                                               */
/* ------------------------------------------------------------------ */

void stack_sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Written to every peer's log (and the supervisor's) by start once the
 * segment is made: lines after the last one belong to this stack's life. */
#define STACK_START_MARK "xsegctl stack start: "

/* Size of DIR/run/NAME.log now (0 if none): where the lines of a peer
 * about to be started will begin. */
static off_t stack_log_size(const struct stack *st, const char *name)
{
	char path[PATH_MAX + 32];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/run/%s.log", st->dir, name);
	return stat(path, &sb) ? 0 : sb.st_size;
}

/*
 * Print the end of DIR/run/NAME.log written since byte from (the size
 * before this start: earlier starts' lines would mislead, review11 N-I),
 * or, for from < 0, since the stack's start mark. At most the last
 * 1500 bytes, from a line start.
 */
static void stack_log_tail(const struct stack *st, const char *name, off_t from)
{
	char path[PATH_MAX + 32], *text, *p, *m;
	size_t n;

	snprintf(path, sizeof(path), "%s/run/%s.log", st->dir, name);
	if (stack_read_file(path, &text))
		return;
	n = strlen(text);
	p = text;
	if (from >= 0) {
		p = (size_t)from <= n ? text + from : text + n;
	} else {
		for (m = strstr(text, STACK_START_MARK); m;
		     m = strstr(m + 1, STACK_START_MARK))
			p = m;
	}
	if (text + n - p > 1500) {
		p = text + n - 1500;
		m = strchr(p, '\n');
		if (m && m[1])
			p = m + 1;
	}
	if (*p)
		fprintf(stderr, "--- %s's lines from this start (%s) ---\n%s%s",
			name, path, p, text[n - 1] == '\n' ? "" : "\n");
	else
		fprintf(stderr, "--- %s wrote nothing to %s ---\n", name, path);
	free(text);
}

/* read() all of len bytes unless EOF or an error comes first. */
static ssize_t stack_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return got ? (ssize_t)got : n;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int stack_spawn_detached(const char *bin, char *const argv[], const char *log,
			 pid_t *pidp)
{
	int status, p[2], e;
	pid_t pid, peer;
	ssize_t n;

	/* the peer sends its pid, then its exec's errno if the exec
	 * fails; close-on-exec, so a successful exec reads as EOF */
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	pid = fork();
	if (pid < 0) {
		e = -errno;
		close(p[0]);
		close(p[1]);
		return e;
	}
	if (pid == 0) {
		int fd;

		close(p[0]);
		setsid();
		/* double fork: the child is not ours, nobody has to reap it
		 * when this xsegctl exits */
		pid = fork();
		if (pid)
			_exit(pid < 0);
		peer = getpid();
		if (write(p[1], &peer, sizeof(peer)) != sizeof(peer))
			_exit(127);
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0)
			dup2(fd, 0);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(bin, argv);
		e = errno;
		if (write(p[1], &e, sizeof(e)) != sizeof(e))
			_exit(127);
		_exit(127);
	}
	close(p[1]);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) ||
	    stack_read_full(p[0], &peer, sizeof(peer)) != sizeof(peer)) {
		close(p[0]);
		return -ECHILD;
	}
	n = stack_read_full(p[0], &e, sizeof(e));
	close(p[0]);
	if (n == sizeof(e))
		return e > 0 ? -e : -ECHILD;
	if (pidp)
		*pidp = peer;
	return 0;
}

/* Start prog detached with its stderr in DIR/run/NAME.log. */
static int stack_spawn(const struct stack *st, const char *name,
		       char *const argv[], pid_t *pidp)
{
	char log[PATH_MAX + 32], bin[PATH_MAX];

	stack_bin(bin, sizeof(bin), argv[0]);
	if (access(bin, X_OK)) {
		stack_err("%s: %s (not built?)", bin, strerror(errno));
		return -ENOENT;
	}
	snprintf(log, sizeof(log), "%s/run/%s.log", st->dir, name);
	return stack_spawn_detached(bin, argv, log, pidp);
}

pid_t stack_pidfile(const struct stack *st, const char *name)
{
	char path[PATH_MAX + 32], *text;
	long pid;

	snprintf(path, sizeof(path), "%s/run/%s.pid", st->dir, name);
	if (stack_read_file(path, &text))
		return 0;
	pid = strtol(text, NULL, 10);
	free(text);
	return pid > 0 ? (pid_t)pid : 0;
}

/*
 * Is the peer on port up? Bound by a live process is not enough: the peer
 * framework binds its port before the peer's init, which is where the
 * blocker opens (and may refuse) its store, vlmc loads its table and
 * starts NBD, cached plugs (review11 N-B, N-H: a peer that failed there
 * was reported up, and the failure blamed on the next one). The framework
 * publishes the port's statistics first right after init succeeded
 * (peers/peer.c, "readable from the start"): up = published by the
 * port's live owner in its current generation.
 */
static bool stack_port_ready(struct xseg *seg, uint32_t port)
{
	struct xseg_port_stats *ps;
	struct xseg_port_info pi;
	bool ready;

	if (xseg_port_info(seg, port, &pi) || !pi.alive)
		return false;
	ps = calloc(1, sizeof(*ps));
	ready = ps && !xseg_port_stats_read(seg, port, ps) &&
		ps->pid == pi.owner_pid && ps->generation == pi.generation;
	free(ps);
	return ready;
}

/*
 * How a start waits for a peer: as long as the peer's process makes
 * progress, failing only after start_timeout (default 120 s) without.
 * Fixed bounds (30 s to bind, 120 s to finish) failed legitimate slow
 * starts: cached pre-faulting a 5G cache on a loaded machine, a blocker
 * replaying a large journal. Progress is what a working start cannot
 * help showing: CPU time (utime + stime of all its threads) at a rate of
 * at least a tenth of a CPU (STACK_WAIT_MIN_CPU_PCT) between two
 * readings, or block I/O (read_bytes of /proc/PID/io, which also count
 * the page faults of a replay reading its log through mmap, or
 * write_bytes growing by at least STACK_WAIT_MIN_WRITE). Not less CPU,
 * not rchar/wchar and not a few written bytes: a peer that only polls for
 * something else (peer_bind waiting for a draining port: about 1 % of a
 * CPU, and a log line every 5 s, whose page re-dirtied after writeback
 * adds 4 KiB to write_bytes) is waiting, not starting (review16,
 * review16b). No overall
 * bound, as stack stop's wait for cached's flush has none: any fixed one
 * cuts off some legitimate start, which is what this replaces. A peer
 * spinning in a bug would hold the wait as long as it spins; the line
 * printed every 10 s shows the operator what it waits for, with its pid
 * and CPU time: `kill -KILL` that pid (a peer acts on SIGTERM only once
 * its init is done), and the wait fails at once (the peer exited) and
 * start stops what it started. The supervisor's restarts wait
 * the same way: a peer that hangs without dying was never detected there
 * (docs/operations.md).
 */
#define STACK_WAIT_SAMPLE_NS   1000000000ULL  /* progress read once a second */
#define STACK_WAIT_SAY_NS      10000000000ULL /* what it waits for, each 10 s */
#define STACK_WAIT_MIN_CPU_PCT 10	      /* CPU that counts as progress */
#define STACK_WAIT_MIN_WRITE   (64u << 10)    /* so do written bytes */

/* A whole-seconds key (start_timeout, exiting_timeout) in ns; dflt_s
 * when unset (the parser refused anything else: stack_set) */
static uint64_t stack_seconds_ns(const char *v, unsigned dflt_s)
{
	uint64_t ns;

	if (!v[0] || peer_parse_duration(v, 1000000000ULL, &ns))
		return dflt_s * 1000000000ULL;
	return ns;
}

uint64_t stack_start_timeout_ns(const struct stack *st)
{
	return stack_seconds_ns(st->start_timeout, STACK_START_TIMEOUT_S);
}

/* pid's CPU time (utime + stime of all its threads, clock ticks) and block
 * I/O (bytes read, written); false when it cannot be read (no such
 * process). The I/O is 0 when /proc/PID/io is not readable (another
 * user's process). */
static bool stack_proc_usage(pid_t pid, uint64_t *cpu_ticks, uint64_t *rd,
			     uint64_t *wr)
{
	char path[64], line[512];
	struct xseg_proc_stat ps;
	unsigned long long v;
	FILE *f;

	*rd = *wr = 0;
	if (xseg_proc_stat_read(pid, &ps))
		return false;
	*cpu_ticks = ps.utime + ps.stime;
	snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "read_bytes: %llu", &v) == 1)
			*rd = v;
		else if (sscanf(line, "write_bytes: %llu", &v) == 1)
			*wr = v;
	}
	fclose(f);
	return true;
}

void stack_progress_sample(struct stack_progress *pg, const pid_t *pids,
			   unsigned npids)
{
	uint64_t now = xseg_now_ns(), cpu, rd, wr, span;
	struct stack_progress old = *pg;
	double tck = (double)sysconf(_SC_CLK_TCK);

	if (!pg->start_ns)
		pg->start_ns = pg->progress_ns = pg->said_ns = now;
	if (pg->sampled_ns && now - pg->sampled_ns < STACK_WAIT_SAMPLE_NS)
		return;
	span = old.sampled_ns ? now - old.sampled_ns : 0;
	pg->sampled_ns = now;
	pg->npids = npids;
	for (unsigned i = 0; i < npids; i++) {
		pg->pid[i] = pids[i];
		pg->known[i] =
		    pids[i] > 0 && stack_proc_usage(pids[i], &cpu, &rd, &wr);
		if (!pg->known[i])
			continue;
		pg->cpu_ticks[i] = cpu;
		pg->read_bytes[i] = rd;
		pg->write_bytes[i] = wr;
		for (unsigned j = 0; j < old.npids; j++) {
			double cpu_ns;

			if (!old.known[j] || old.pid[j] != pids[i])
				continue;
			cpu_ns = (double)(cpu - old.cpu_ticks[j]) / tck * 1e9;
			if (cpu_ns * 100 >=
				(double)span * STACK_WAIT_MIN_CPU_PCT ||
			    rd > old.read_bytes[j] ||
			    wr - old.write_bytes[j] >= STACK_WAIT_MIN_WRITE)
				pg->progress_ns = now;
		}
	}
	pg->cpu_s = npids && pg->known[0] ? (double)pg->cpu_ticks[0] / tck : 0;
}

static unsigned stack_ns_s(uint64_t ns)
{
	return (unsigned)(ns / 1000000000ULL);
}

bool stack_progress_stalled(const struct stack_progress *pg, uint64_t limit_ns)
{
	return pg->sampled_ns && pg->sampled_ns - pg->progress_ns >= limit_ns;
}

void stack_progress_say(struct stack_progress *pg, const char *what)
{
	uint64_t idle = pg->sampled_ns - pg->progress_ns;

	if (pg->sampled_ns - pg->said_ns < STACK_WAIT_SAY_NS)
		return;
	pg->said_ns = pg->sampled_ns;
	printf("xsegctl: waiting for %s: %u s, ", what,
	       stack_ns_s(pg->sampled_ns - pg->start_ns));
	if (idle < 2 * STACK_WAIT_SAMPLE_NS)
		printf("still progressing (CPU %.1f s)\n", pg->cpu_s);
	else
		printf("no progress for %u s (CPU %.1f s)\n", stack_ns_s(idle),
		       pg->cpu_s);
	fflush(stdout);
}

/* pid has exited (it no longer exists, or is a zombie). Unlike
 * stack_pid_runs it does not check the process name: for a pid this
 * xsegctl spawned a moment ago, the name may still be xsegctl's. */
static bool stack_pid_gone(pid_t pid)
{
	struct xseg_proc_stat ps;
	int rc;

	if (kill(pid, 0) && errno == ESRCH)
		return true;
	rc = xseg_proc_stat_read(pid, &ps);
	if (rc)
		return rc == -ESRCH;
	return xseg_proc_exited(&ps);
}

/*
 * A spawned peer whose start made no progress for start_timeout: SIGKILL
 * it, so that no half-started process is left behind (the supervisor
 * would take one still running for a peer still starting, and leave it
 * be). Its whole process group when that is the session
 * stack_spawn_detached made for it alone (a wrapper's children too),
 * never our own. SIGKILL, not SIGTERM: a peer stuck in its start-up
 * does not get to where it would act on a SIGTERM. Waits (up to 5 s)
 * until it is gone.
 */
static void stack_kill_stalled(pid_t pid)
{
	pid_t pgid = getpgid(pid);

	if (pgid > 0 && pgid == getsid(pid) && pgid != getpgid(0))
		kill(-pgid, SIGKILL);
	else
		kill(pid, SIGKILL);
	for (int i = 0; i < 250 && !stack_pid_gone(pid); i++)
		stack_sleep_ms(20);
}

/*
 * Wait for the peer on port to be up (stack_port_ready; and for cond_fn
 * if given); fail early once its process is gone. spawned is the pid of
 * the peer to watch (0: none known yet, e.g. a start someone else
 * began): its exit fails the wait at once, also before it wrote its pid
 * file (a peer refusing its options used to cost a fixed 30 s wait,
 * review11 N-I); otherwise it lasts as long as the peer progresses
 * (above). ours: spawned was started by this command, so a stall kills
 * it; a process someone else started is only given up on. The log tail
 * printed on failure starts at log_from (stack_log_tail).
 */
static int stack_wait_port(const struct stack *st, struct xseg *seg,
			   uint32_t port, const char *name, pid_t spawned,
			   bool ours, off_t log_from,
			   bool (*cond_fn)(struct xseg *seg))
{
	uint64_t limit_ns = stack_start_timeout_ns(st);
	struct stack_progress pg = {0};
	pid_t seen = 0, watched = 0;
	bool bound = false;
	char what[128];

	for (int i = 0;; i++) {
		pid_t pid;

		if (stack_port_ready(seg, port) && (!cond_fn || cond_fn(seg)))
			return 0;
		bound = xseg_port_alive(seg, port) == 1;
		/* a zombie counts as exited: it is reparented, nobody here
		 * reaps it. Not stack_pid_runs: its name check fails for a
		 * moment after the spawn returns (the exec closes the spawn's
		 * pipe before it renames the process), which failed a start
		 * under load */
		if (spawned && stack_pid_gone(spawned)) {
			stack_err("%s did not come up on port %u: it (pid "
				  "%d) exited during its start-up",
				  name, port, (int)spawned);
			stack_log_tail(st, name, log_from);
			return -ECHILD;
		}
		/* the peer exited: its pid file names a dead process, or
		 * is gone (a peer removes it when it exits; a failed start
		 * used to cost the whole wait, per supervisor restart) */
		pid = stack_pidfile(st, name);
		/* a pid file naming a process that is not this stack's
		 * NAME (its pid reused) names a peer that is gone */
		if (pid && !stack_pid_is_peer(st, pid, name))
			pid = 0;
		if (pid)
			seen = pid;
		if (i > 25 && seen &&
		    (!pid || (kill(pid, 0) && errno == ESRCH))) {
			if (bound)
				stack_err("%s bound port %u but did not finish "
					  "starting: its process exited",
					  name, port);
			else
				stack_err("%s did not come up on port %u", name,
					  port);
			stack_log_tail(st, name, log_from);
			return -ETIMEDOUT;
		}
		/* the spawned pid, not the pid file's: the file may be
		 * an earlier peer's until this one writes it */
		watched = spawned ? spawned : seen;
		stack_progress_sample(&pg, &watched, 1);
		if (stack_progress_stalled(&pg, limit_ns))
			break;
		snprintf(what, sizeof(what), "%s (pid %d) to %s", name,
			 (int)watched,
			 bound ? "finish starting" : "bind its port");
		stack_progress_say(&pg, what);
		stack_sleep_ms(20);
	}
	if (watched)
		snprintf(what, sizeof(what),
			 "it (pid %d) made no progress "
			 "(under a tenth of a CPU, no block I/O)",
			 (int)watched);
	else
		snprintf(what, sizeof(what), "no process of it was seen");
	stack_err("%s %s port %u%s: %s for %u s, after %u s in all%s "
		  "(start_timeout)",
		  name, bound ? "bound" : "did not come up on", port,
		  bound ? " but did not finish starting" : "", what,
		  stack_ns_s(limit_ns), stack_ns_s(pg.sampled_ns - pg.start_ns),
		  ours && spawned ? "; killed it" : "");
	if (ours && spawned)
		stack_kill_stalled(spawned);
	stack_log_tail(st, name, log_from);
	return -ETIMEDOUT;
}

bool stack_plugged(struct xseg *seg)
{
	return xseg_get_path_next(seg, STACK_STORE_PORT) == STACK_CACHED_PORT;
}

static int stack_ctl_up(const struct stack *st)
{
	for (int i = 0; i < 500; i++) {
		if (!access(st->ctl_socket, F_OK))
			return 0;
		stack_sleep_ms(20);
	}
	return -ETIMEDOUT;
}

#define ARGV_MAX 32
struct stack_argv {
	char *v[ARGV_MAX];
	char buf[ARGV_MAX][PATH_MAX + 32];
	int n;
};

static void stack_arg(struct stack_argv *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void stack_arg(struct stack_argv *a, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(a->buf[a->n], sizeof(a->buf[0]), fmt, ap);
	va_end(ap);
	a->v[a->n] = a->buf[a->n];
	a->n++;
	a->v[a->n] = NULL;
}

static void stack_common_args(struct stack_argv *a, const struct stack *st,
			      const char *prog, const char *name, uint32_t port,
			      uint64_t threads, const char *spin)
{
	a->n = 0;
	stack_arg(a, "%s", prog);
	stack_arg(a, "--segment=%s", st->segment);
	stack_arg(a, "--port=%u", port);
	stack_arg(a, "--threads=%" PRIu64, threads ? threads : 1);
	stack_arg(a, "--pidfile=%s/run/%s.pid", st->dir, name);
	if (spin[0])
		stack_arg(a, "--spin=%s", spin);
	if (st->spin_policy[0])
		stack_arg(a, "--spin-policy=%s", st->spin_policy);
	if (st->cpus[0])
		stack_arg(a, "--cpus=%s", st->cpus);
}

static const struct {
	const char *name;
	uint32_t port;
} stack_roles[STACK_NR_ROLES] = {
    [STACK_ROLE_STORE] = {"store", STACK_STORE_PORT},
    [STACK_ROLE_CACHED] = {"cached", STACK_CACHED_PORT},
    [STACK_ROLE_VLMC] = {"vlmc", STACK_VLMC_PORT},
};

const char *stack_role_name(enum stack_role r)
{
	return stack_roles[r].name;
}

uint32_t stack_role_port(enum stack_role r)
{
	return stack_roles[r].port;
}

int stack_role_by_name(const char *name)
{
	for (int r = 0; r < STACK_NR_ROLES; r++)
		if (!strcmp(stack_roles[r].name, name))
			return r;
	return -1;
}

const char *stack_role_prog(const struct stack *st, enum stack_role r)
{
	return r == STACK_ROLE_STORE ? stack_store_prog(st)
				     : stack_roles[r].name;
}

/* The command line of role r's peer. */
static void stack_peer_args(struct stack_argv *a, const struct stack *st,
			    enum stack_role r)
{
	static const uint32_t next = STACK_STORE_PORT;
	const char *prog = stack_role_prog(st, r);
	uint64_t threads = r == STACK_ROLE_STORE    ? st->store_threads
			   : r == STACK_ROLE_CACHED ? st->cached_threads
						    : st->vlmc_threads;

	stack_common_args(a, st, prog, stack_roles[r].name, stack_roles[r].port,
			  threads, stack_role_spin(st, r));
	switch (r) {
	case STACK_ROLE_STORE:
		if (!strcmp(prog, "blocker")) {
			stack_arg(a, "--store=%s/store", st->dir);
			stack_arg(a, "--create");
			if (!st->verify_reads)
				stack_arg(a, "--no-verify");
			if (st->gc_threshold[0])
				stack_arg(a, "--gc-threshold=%s",
					  st->gc_threshold);
			if (st->store_segment_size[0])
				stack_arg(a, "--segment-size=%s",
					  st->store_segment_size);
			if (st->store_reserve[0])
				stack_arg(a, "--reserve=%s", st->store_reserve);
		} else {
			stack_arg(a, "--store");
			stack_arg(a, "--store-max=%" PRIu64,
				  st->segment_size * 4);
		}
		break;
	case STACK_ROLE_CACHED:
		stack_arg(a, "--next-port=%u", next);
		stack_arg(a, "--cache-size=%s", st->cache_size);
		stack_arg(a, "--write-policy=%s", st->write_policy);
		stack_arg(a, "--object-size=%s", st->object_size);
		stack_arg(a, "--max-inflight=%u", STACK_CACHED_MAX_INFLIGHT);
		stack_arg(a, "--max-req-size=%llu",
			  (unsigned long long)STACK_CACHED_MAX_REQ_SIZE);
		if (st->cache_max_objects[0])
			stack_arg(a, "--max-objects=%s", st->cache_max_objects);
		stack_arg(a, "--plug");
		break;
	case STACK_ROLE_VLMC:
		/* the store's port: routing sends it to cached if plugged */
		stack_arg(a, "--next-port=%u", next);
		stack_arg(a, "--object-size=%s", st->object_size);
		/* cached fails requests past its object size (review9
		 * R9-10): vlmc refuses volumes with larger objects */
		stack_arg(a, "--max-object-size=%s", st->object_size);
		stack_arg(a, "--nbd-socket=%s", st->nbd_socket);
		stack_arg(a, "--ctl-socket=%s", st->ctl_socket);
		if (st->nbd_tcp)
			stack_arg(a, "--nbd-tcp=%" PRIu64, st->nbd_tcp);
		if (st->nbd_max_conns[0])
			stack_arg(a, "--nbd-max-conns=%s", st->nbd_max_conns);
		if (st->nbd_inflight_bytes[0])
			stack_arg(a, "--nbd-inflight-bytes=%s",
				  st->nbd_inflight_bytes);
		if (st->nbd_total_inflight[0])
			stack_arg(a, "--nbd-total-inflight-bytes=%s",
				  st->nbd_total_inflight);
		if (st->nbd_spin[0])
			stack_arg(a, "--nbd-spin=%s", st->nbd_spin);
		if (st->dead_peer_wait[0])
			stack_arg(a, "--dead-peer-wait=%s", st->dead_peer_wait);
		if (st->snapshot_drain_wait[0])
			stack_arg(a, "--snapshot-drain-wait=%s",
				  st->snapshot_drain_wait);
		break;
	}
}

int stack_start_peer(const struct stack *st, struct xseg *seg,
		     enum stack_role r)
{
	struct stack_argv *a = calloc(1, sizeof(*a));
	off_t log_from = stack_log_size(st, stack_roles[r].name);
	pid_t pid = 0;
	int rc;

	if (!a)
		return -ENOMEM;
	stack_peer_args(a, st, r);
	rc = stack_spawn(st, stack_roles[r].name, a->v, &pid);
	free(a);
	if (rc && rc != -ENOENT)
		stack_err("%s: cannot start it: %s", stack_roles[r].name,
			  strerror(-rc));
	if (!rc)
		rc = stack_wait_port(st, seg, stack_roles[r].port,
				     stack_roles[r].name, pid, true, log_from,
				     r == STACK_ROLE_CACHED ? stack_plugged
							    : NULL);
	if (!rc && r == STACK_ROLE_VLMC && stack_ctl_up(st)) {
		stack_err("vlmc: no control socket at %s", st->ctl_socket);
		rc = -ETIMEDOUT;
	}
	return rc;
}

/* Why a port is exiting, for every command that meets one: see
 * xsegctl_stack.h. */
void stack_exiting_why(char *out, size_t cap, const struct xseg_port_info *pi,
		       const char *then)
{
	snprintf(out, cap,
		 "its process (pid %d) has exited, but threads of it are left "
		 "(finishing, stuck in the kernel or stopped by a tracer): "
		 "port %u stays its own and requests to it wait until they "
		 "end; %s. If it stays: ls /proc/%d/task (docs/operations.md, "
		 "section 4)",
		 (int)pi->owner_pid, pi->port, then, (int)pi->owner_pid);
}

static bool stack_stop_revive_store(const struct stack *st, struct xseg *seg,
				    bool *failed);
static void stack_report(const struct stack *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* How stack_stop_port watches cached flushing (its progress: its port's
 * unflushed count reaching a new low) */
struct stack_stop_watch {
	/* when set, the store is restarted if it dies meanwhile (stack
	 * stop: the supervisor is gone, and cached's flush needs it) */
	const struct stack *st;
	bool *revive_failed;
	unsigned revived;    /* at most STACK_STOP_REVIVALS */
	pid_t store_exiting; /* the exiting store last reported, or 0 */
};

/* a store that dies again and again on cached's flush writes is not
 * restarted forever (review-s14b 1a): cached then gives up by itself */
#define STACK_STOP_REVIVALS 3

/* cached: its acknowledged write-back data not yet at the store, in bytes
 * (its port's unflushed count, in the stack's 4 KiB buckets); UINT64_MAX
 * when unknown */
static uint64_t stack_cached_flush_left(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	if (xseg_port_info(seg, port, &pi))
		return UINT64_MAX;
	return pi.unflushed * STACK_CACHED_BUCKET_SIZE;
}

/* How long stop and unplug-cached wait for an exiting peer (its leader
 * gone, threads of it left: xseg_port_info's exiting) while none of its
 * threads ends (key exiting_timeout, default STACK_EXITING_TIMEOUT_S).
 * Its own bound, shorter than a live peer's: nobody is left to act on
 * the SIGTERM (a peer's handler only sets a flag its leader would read),
 * and its threads are finishing a system call or stuck (in the kernel,
 * under a tracer), which the waits for a live peer's drain or flush do
 * not shorten; each thread that ends starts the bound again. */
uint64_t stack_exiting_timeout_ns(const struct stack *st)
{
	return stack_seconds_ns(st->exiting_timeout, STACK_EXITING_TIMEOUT_S);
}

/* Threads of pid left besides its zombie leader (which num_threads still
 * counts until the last one ends); -1 when unreadable. */
static int stack_threads_left(pid_t pid)
{
	struct xseg_proc_stat ps;

	return xseg_proc_stat_read(pid, &ps) ? -1 : ps.num_threads - 1;
}

/* Says once per store process that the store is exiting during cached's
 * flush: stop neither restarts it (its port is still its own, no store
 * could bind it) nor gives up on it then, and cached's flush waits
 * without a word in between; the operator sees why, and what ends it
 * (review-stack24 R2). */
static void stack_stop_note_store_exiting(struct xseg *seg,
					  struct stack_stop_watch *watch)
{
	struct xseg_port_info pi;

	if (xseg_port_info(seg, STACK_STORE_PORT, &pi) || !pi.exiting ||
	    pi.owner_pid == watch->store_exiting)
		return;
	watch->store_exiting = pi.owner_pid;
	stack_report(watch->st,
		     "the store is exiting (pid %d, %d thread(s) of it left); "
		     "cached's flush waits for it, and it is restarted once "
		     "its last thread ends",
		     (int)pi.owner_pid, stack_threads_left(pi.owner_pid));
}

/*
 * SIGTERM the live owner of port and wait for it to exit: up to timeout_s,
 * or, with watch (cached), up to timeout_s without progress (what is left
 * to flush falling to a new low), saying every 10 s how much is left. 0 also
 * when nothing was running there. A cached flushing gigabytes of small objects
 * at its store's pace needs longer than any fixed bound, and was cut off
 * by one (session 13); it gives up by itself when its flush stalls
 * (--flush-timeout), before this timeout. An owner that is exiting, or
 * becomes so, is waited for exiting_ns (stack_exiting_timeout_ns) without
 * a thread of it ending, then given up on with -EBUSY, saying so (pid,
 * threads left): it used to be waited for as a live peer, timeout_s, and
 * reported as one that "did not exit" (ops22). That bound is a deadline on
 * the monotonic clock, not a count of this loop's 20 ms sleeps: under load
 * each pass (its /proc reads, the store's revival) takes longer than its
 * sleep, and a count of passes stretched the bound (review23h F8).
 * Every failure is said here, after fail_prefix (unplug-cached's "unplug
 * failed: "), so that the caller adds nothing.
 */
static int stack_stop_port(struct xseg *seg, uint32_t port, const char *name,
			   unsigned timeout_s, uint64_t exiting_ns,
			   struct stack_stop_watch *watch,
			   const char *fail_prefix)
{
	struct xseg_port_info pi;
	uint64_t lowest = UINT64_MAX;
	unsigned ticks = 0, idle = 0; /* 20 ms each */
	/* while it is exiting: when a thread of it last ended (or it was
	 * first seen exiting), xseg_now_ns */
	uint64_t exiting_since = 0;
	int threads = -1; /* its threads left when last counted */
	char why[512];
	pid_t pid;

	if (xseg_port_info(seg, port, &pi) || !pi.alive)
		return 0;
	pid = pi.owner_pid;
	if (kill(pid, SIGTERM)) {
		int e = errno;

		if (e == ESRCH)
			return 0;
		/* said here, so that every failure of this call is */
		stack_err("%scannot signal %s (pid %d): %s", fail_prefix, name,
			  (int)pid, strerror(e));
		return -e;
	}
	/* A stopped peer (SIGSTOP, a debugger let go) would never act on
	 * it: a live cache can leave the path only by its own stop
	 * (review20) */
	kill(pid, SIGCONT);
	for (; idle < timeout_s * 50; ticks++, idle++) {
		/* gone once reaped (init reaps a peer the stack spawned),
		 * so that whoever looks next (kill -0 in a script) finds
		 * it gone; an exiting owner is not (below) */
		if (kill(pid, 0) && errno == ESRCH)
			return 0;
		if (xseg_port_alive(seg, port) != 1) {
			/* port released; give the process a moment */
			stack_sleep_ms(20);
			if (kill(pid, 0) && errno == ESRCH)
				return 0;
		}
		if (!xseg_port_info(seg, port, &pi) && pi.exiting &&
		    pi.owner_pid == pid) {
			int left = stack_threads_left(pid);
			uint64_t now = xseg_now_ns();

			/* the exiting deadline governs now, not timeout_s:
			 * counting these passes against it cut an
			 * exiting_timeout above it (up to 1 h) to 60 s for
			 * vlmc, 120 s for the store, 300 s for cached, and
			 * reported the peer as one that "did not exit"
			 * (review-stack24 R1) */
			idle = 0;
			if (!exiting_since || left != threads) {
				threads = left;
				exiting_since = now;
			} else if (now - exiting_since >= exiting_ns) {
				stack_exiting_why(
				    why, sizeof(why), &pi,
				    "then it is dead, and the same command "
				    "run again finishes");
				stack_err(
				    "%s%s is exiting, %d thread(s) of it "
				    "left, none ended within %" PRIu64
				    " s; not waiting for it any longer: "
				    "%s",
				    fail_prefix, name, threads,
				    (uint64_t)(exiting_ns / 1000000000ULL),
				    why);
				return -EBUSY;
			}
		}
		if (watch && watch->st)
			stack_stop_note_store_exiting(seg, watch);
		if (watch && watch->st && ticks % 50 == 0 &&
		    watch->revived < STACK_STOP_REVIVALS &&
		    stack_stop_revive_store(watch->st, seg,
					    watch->revive_failed) &&
		    ++watch->revived == STACK_STOP_REVIVALS)
			stack_report(watch->st,
				     "the store died %u times during cached's "
				     "flush; not restarting it again",
				     STACK_STOP_REVIVALS);
		if (watch) {
			uint64_t left = stack_cached_flush_left(seg, port);

			if (left < lowest) {
				lowest = left;
				idle = 0;
			}
			if (ticks && ticks % 500 == 0 && left &&
			    left != UINT64_MAX) {
				printf(
				    "%s: %.1f MiB left to flush after %u s\n",
				    name, left / 1048576.0, ticks / 50);
				fflush(stdout);
			}
		}
		stack_sleep_ms(20);
	}
	if (watch)
		stack_err("%s%s (pid %d) made no progress for %u s; not "
			  "waiting for it any longer",
			  fail_prefix, name, (int)pid, timeout_s);
	else
		stack_err("%s%s (pid %d) did not exit within %u s", fail_prefix,
			  name, (int)pid, timeout_s);
	return -ETIMEDOUT;
}

/* ------------------------------------------------------------------ */
/* Commands                                                            */
/* ------------------------------------------------------------------ */

/*
 * The NBD URI of the stack's socket, for people to paste into nbdinfo or
 * qemu-img: the socket path is a query value, so everything but RFC 3986
 * unreserved characters and '/' is percent-encoded (a dir with a space
 * printed no URI at all, review11 N-I).
 */
static void stack_print_nbd_uri(FILE *f, const char *socket)
{
	fputs("nbd+unix:///VOLUME?socket=", f);
	for (const unsigned char *p = (const unsigned char *)socket; *p; p++) {
		if (isalnum(*p) || strchr("-._~/", *p))
			fputc(*p, f);
		else
			fprintf(f, "%%%02X", *p);
	}
}

/* s as one shell word: as is when it needs no quoting, else in single
 * quotes (a ' inside as '\''). */
static void stack_print_shell_word(FILE *f, const char *s)
{
	if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
			    "XYZ0123456789-._/=:,+@%") == strlen(s)) {
		fputs(s, f);
		return;
	}
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	}
	fputc('\'', f);
}

/* Nobody listens on the Unix socket at path: a connect is refused. */
static bool stack_socket_dead(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, e;

	if (strlen(path) >= sizeof(sa.sun_path))
		return false;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	e = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0;
	close(fd);
	return e == ECONNREFUSED;
}

/*
 * A vlmc that was killed, or failed in a way that skipped its cleanup,
 * leaves its NBD and control sockets behind (review11 N-I: after a failed
 * start and a stop, both stayed in DIR/run). Remove them once no vlmc of
 * this stack runs: only sockets, and only ones nobody listens on.
 */
static void stack_remove_stale_sockets(const struct stack *st)
{
	const char *paths[] = {st->nbd_socket, st->ctl_socket};
	struct stat sb;

	if (stack_pid_runs(stack_pidfile(st, "vlmc"), "vlmc"))
		return;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (paths[i][0] && !lstat(paths[i], &sb) &&
		    S_ISSOCK(sb.st_mode) && stack_socket_dead(paths[i]))
			unlink(paths[i]);
}

/*
 * Join the running stack's segment. -ENOENT when it does not exist: "no
 * stack is running in DIR" (not the shm_open error, review11 N-I); other
 * errors are said as they are.
 */
static int stack_join(const struct stack *st, struct xseg **segp)
{
	char err[XSEG_ERRBUF_LEN];
	int rc = xseg_join(st->segment, segp, err, sizeof(err));

	if (rc == -ENOENT)
		stack_err("no stack is running in %s (its segment %s does not "
			  "exist)",
			  st->dir, st->segment);
	else if (rc)
		stack_err("%s", err);
	return rc;
}

static int stack_any_alive(struct xseg *seg)
{
	for (uint32_t p = STACK_STORE_PORT; p <= STACK_VLMC_PORT; p++)
		if (xseg_port_alive(seg, p) == 1)
			return 1;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Write-back losses at stop and start                                 */
/* ------------------------------------------------------------------ */

static void stack_when(char *out, size_t cap)
{
	time_t now = time(NULL);
	struct tm tm;

	strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
}

/* Append one line to DIR/run/NAME.log; best effort (a report must not
 * fail because its log cannot be written). */
static void stack_append(const struct stack *st, const char *name,
			 const char *line)
{
	char path[PATH_MAX + 32], when[32];
	FILE *f;

	snprintf(path, sizeof(path), "%s/run/%s.log", st->dir, name);
	f = fopen(path, "ae");
	if (!f)
		return;
	stack_when(when, sizeof(when));
	fprintf(f, "%s %s\n", when, line);
	fclose(f);
}

/* Say something about lost data: on stderr and in DIR/run/stack.log,
 * which outlives the segment (the only other record of a loss). */
static void stack_report(const struct stack *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void stack_report(const struct stack *st, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "xsegctl: stack: %s\n", line);
	stack_append(st, "stack", line);
}

/* The lines of DIR/run/NAME.log since the stack's start that tell of a
 * write-back loss (cached's flush timeout and kept redirect, a reclaim's
 * count, the supervisor's note), at most max of the last ones, reported
 * with the file they are in. */
static void stack_report_log_lines(const struct stack *st, const char *name,
				   int max)
{
	static const char *const what[] = {"write-back loss", "flush timeout",
					   "stays redirected"};
	char path[PATH_MAX + 32], *text, *from, *p, *lines[8];
	int n = 0;

	snprintf(path, sizeof(path), "%s/run/%s.log", st->dir, name);
	if (stack_read_file(path, &text))
		return;
	from = text;
	for (p = strstr(text, STACK_START_MARK); p;
	     p = strstr(p + 1, STACK_START_MARK))
		from = p;
	if (max > 8)
		max = 8;
	for (p = strtok(from, "\n"); p; p = strtok(NULL, "\n")) {
		for (size_t i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
			if (!strstr(p, what[i]))
				continue;
			if (n == max) {
				memmove(lines, lines + 1,
					(max - 1) * sizeof(lines[0]));
				n--;
			}
			lines[n++] = p;
			break;
		}
	}
	for (int i = 0; i < n; i++)
		stack_report(st, "  %s: %.900s", path, lines[i]);
	free(text);
}

/*
 * What the segment records of acknowledged write-back data lost, once no
 * peer of the stack runs: dead ports still holding an unflushed count
 * (reaped here, so they are counted), the segment's loss counter (any
 * nonzero value is a loss since the segment was created), and the
 * store's redirect (cached unplugs itself when it stops cleanly; it keeps
 * the redirect when it gave up flushing, and a dead cached leaves it).
 * Reports what it finds; true when anything was.
 */
static bool stack_report_losses(const struct stack *st, struct xseg *seg,
				bool at_start)
{
	struct xseg_reap_stats rs = {0};
	struct xseg_port_info pi;
	uint64_t losses;
	uint32_t next;
	int rc;

	for (uint32_t p = 0; p < xseg_nr_ports(seg); p++) {
		if (xseg_port_info(seg, p, &pi) || !pi.bound || pi.alive ||
		    !pi.unflushed)
			continue;
		stack_report(st,
			     "port %" PRIu32
			     " (%s, pid %d) died holding %" PRIu64
			     " unflushed write-back units: acknowledged writes "
			     "that never reached the store",
			     p, pi.peer_type, (int)pi.owner_pid, pi.unflushed);
	}
	/* counts those (one loss per port) before the counter is read */
	rc = xseg_reap(seg, &rs);
	if (rc < 0)
		stack_report(st,
			     "cannot reap segment %s: %s (the losses "
			     "below may be missing dead ports)",
			     st->segment, strerror(-rc));
	losses = xseg_writeback_losses(seg);
	next = xseg_get_path_next(seg, STACK_STORE_PORT);
	if (!losses && next == XSEG_NOPORT)
		return false;
	if (losses)
		stack_report(st,
			     "segment %s records %" PRIu64 " write-back "
			     "loss(es) since %s: a write-back cached lost "
			     "acknowledged writes it had not flushed; they "
			     "are not in %s/store",
			     st->segment, losses,
			     at_start ? "it was created (an earlier stack)"
				      : "this stack started",
			     st->dir);
	if (next != XSEG_NOPORT)
		stack_report(st,
			     "port %u (store) is still redirected to port "
			     "%" PRIu32 "%s: cached did not unplug itself (it "
			     "died; or gave up flushing and kept the redirect "
			     "so that nobody reads the stale store; or, with "
			     "nothing lost, kept it because the store did not "
			     "answer requests it had in flight: its log line "
			     "below says which)",
			     STACK_STORE_PORT, next,
			     next == STACK_CACHED_PORT ? " (cached)" : "");
	for (int r = 0; r < STACK_NR_ROLES; r++)
		stack_report_log_lines(st, stack_role_name(r), 4);
	stack_report_log_lines(st, "supervisor", 2);
	return true;
}

/*
 * stop, before vlmc and cached are stopped: cached flushes what it holds
 * to the store, and vlmc's last requests may need it. The supervisor,
 * stopped first, would have restarted a dead store; without one cached's
 * shutdown would time out and drop acknowledged writes. So start it
 * again here. A store still starting (a restart the supervisor began) is
 * waited for instead. Failing that, the stop goes on: the loss is
 * reported at its end. True when it started a store.
 */
static bool stack_stop_revive_store(const struct stack *st, struct xseg *seg,
				    bool *failed)
{
	enum stack_role r = STACK_ROLE_STORE;
	char path[PATH_MAX + 32];
	int rc;

	/* once is enough: a store that did not come back will not now */
	if (*failed || xseg_port_alive(seg, STACK_STORE_PORT) == 1 ||
	    (xseg_port_alive(seg, STACK_CACHED_PORT) != 1 &&
	     xseg_port_alive(seg, STACK_VLMC_PORT) != 1))
		return false;
	if (stack_role_pid_runs(st, stack_pidfile(st, "store"), r)) {
		stack_report(st, "the store is starting; waiting for it "
				 "before cached flushes");
		if (!stack_wait_port(st, seg, STACK_STORE_PORT, "store", 0,
				     false, -1, NULL)) {
			stack_report(st, "the store is up (pid %d)",
				     (int)stack_pidfile(st, "store"));
			return false;
		}
	}
	stack_report(st,
		     "the store (port %u) is down; restarting it so that "
		     "cached can flush to it",
		     STACK_STORE_PORT);
	/* its dead predecessor's pid file would end the wait */
	snprintf(path, sizeof(path), "%s/run/store.pid", st->dir);
	unlink(path);
	rc = stack_start_peer(st, seg, r);
	*failed = rc != 0;
	if (rc)
		stack_report(st,
			     "the store did not come back (%s): cached cannot "
			     "flush what it holds; stopping anyway",
			     strerror(-rc));
	else
		stack_report(st, "the store is back (pid %d)",
			     (int)stack_pidfile(st, "store"));
	return !rc;
}

static int stack_stop(struct stack *st);
static void stack_warn_store_degraded(const struct stack *st, struct xseg *seg);

/* Mark where this stack's life begins in every log a loss report reads. */
static void stack_mark_logs(const struct stack *st)
{
	char line[256];

	snprintf(line, sizeof(line), STACK_START_MARK "segment %s",
		 st->segment);
	for (int r = 0; r < STACK_NR_ROLES; r++)
		stack_append(st, stack_role_name(r), line);
	stack_append(st, "supervisor", line);
	stack_append(st, "stack", line);
}

/*
 * Is a stack already running in st's directory, maybe under another
 * segment name (a config naming the same dir and another segment, review11
 * N-A)? Its run/stack.conf names its segment: live peers there, or a live
 * supervisor of the directory, mean yes. Checked before start writes or
 * starts anything: a start that went on would overwrite the running
 * stack's state file and, failing, stop its supervisor.
 */
static bool stack_running_in_dir(const struct stack *st)
{
	char path[PATH_MAX + 32], err[XSEG_ERRBUF_LEN];
	struct stack *prev;
	struct xseg *seg;
	bool running = false;
	pid_t sup = stack_pidfile(st, "supervisor");

	if (stack_pid_runs(sup, "xsegctl")) {
		stack_err("a stack is already running in %s (its supervisor "
			  "is pid %d): stop it first (xsegctl stack stop "
			  "--dir %s)",
			  st->dir, (int)sup, st->dir);
		return true;
	}
	stack_path(path, sizeof(path), st, "run/stack.conf");
	if (access(path, F_OK))
		return false;
	prev = calloc(1, sizeof(*prev));
	if (!prev || stack_load_state(prev, st->dir, true) ||
	    !prev->segment[0] || !strcmp(prev->segment, st->segment)) {
		/* unreadable: nothing to protect; the same segment: the
		 * caller's own check */
		free(prev);
		return false;
	}
	if (!xseg_join(prev->segment, &seg, err, sizeof(err))) {
		running = stack_any_alive(seg);
		xseg_leave(seg);
	}
	if (running)
		stack_err("a stack is already running in %s on segment %s: "
			  "stop it first (xsegctl stack stop --dir %s)",
			  st->dir, prev->segment, st->dir);
	free(prev);
	return running;
}

static int stack_start(struct stack *st)
{
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	char path[PATH_MAX + 32], err[XSEG_ERRBUF_LEN];
	int rc;

	if (stack_resolve(st))
		return 1;
	stack_path(path, sizeof(path), st, "run");
	if (mkdir(path, 0700) && errno != EEXIST)
		goto sys_err;
	stack_path(path, sizeof(path), st, "store");
	if (mkdir(path, 0700) && errno != EEXIST)
		goto sys_err;
	if (stack_running_in_dir(st))
		return 1;
	stack_xseg_config(st, &cfg);
	if (!xseg_join(st->segment, &seg, err, sizeof(err))) {
		struct xseg_config old;
		char differs[256];

		/* the segment's geometry is fixed when it is created: a
		 * config that asks another one takes effect only through
		 * a new segment, which an operator should not have to
		 * guess from `xsegctl info` */
		xseg_get_config(seg, &old);
		differs[0] = '\0';
		if (old.size != cfg.size || old.nr_requests != cfg.nr_requests)
			snprintf(differs, sizeof(differs),
				 "segment_size %" PRIu64 " and requests %u, "
				 "not this config's segment_size %" PRIu64
				 " and requests %u",
				 (uint64_t)old.size, old.nr_requests,
				 (uint64_t)cfg.size, cfg.nr_requests);
		if (stack_any_alive(seg)) {
			stack_err("a stack is already running on segment %s "
				  "(xsegctl stack stop --dir %s)%s%s%s",
				  st->segment, st->dir,
				  differs[0] ? "; its segment has " : "",
				  differs,
				  differs[0] ? " (a stop and a start make the "
					       "segment anew)"
					     : "");
			xseg_leave(seg);
			return 1;
		}
		/* left over from a crash, or kept by a stop that found a
		 * loss: the last chance to tell of what it records */
		if (stack_report_losses(st, seg, true))
			stack_report(st,
				     "removing segment %s (left by an "
				     "earlier stack) and starting afresh",
				     st->segment);
		if (differs[0])
			stack_report(st,
				     "segment %s left by an earlier stack has "
				     "%s: removing it and creating it with "
				     "the config's",
				     st->segment, differs);
		xseg_leave(seg);
		xseg_destroy(st->segment);
		seg = NULL;
	}
	rc = xseg_create(st->segment, &cfg, &seg, err, sizeof(err));
	if (rc) {
		stack_err("%s", err);
		return 1;
	}
	/* only now: a start refused before this point (a bad segment name
	 * or size) is not a stack's life, and used to write its mark into
	 * every log (review11 N-I) */
	stack_mark_logs(st);
	rc = stack_write_state(st);
	if (rc) {
		stack_err("%s/run/stack.conf: %s", st->dir, strerror(-rc));
		goto fail;
	}
	stack_set_cached_off(st, false);
	for (int r = 0; r < STACK_NR_ROLES; r++) {
		if (r == STACK_ROLE_CACHED && !st->cached)
			continue;
		if (stack_start_peer(st, seg, r))
			goto fail;
	}
	stack_warn_store_degraded(st, seg);
	xseg_leave(seg);
	seg = NULL;
	if (st->supervise && stack_start_supervisor(st))
		goto fail;
	printf("stack started: segment %s, store %s%s, vlmc on port %u\n"
	       "  NBD: ",
	       st->segment, stack_store_prog(st),
	       st->cached ? " behind cached" : "", STACK_VLMC_PORT);
	stack_print_nbd_uri(stdout, st->nbd_socket);
	printf("\n  volumes: xsegctl volume --dir ");
	stack_print_shell_word(stdout, st->dir);
	printf(" create NAME SIZE\n");
	return 0;
sys_err:
	stack_err("%s: %s", path, strerror(errno));
	return 1;
fail:
	if (seg)
		xseg_leave(seg);
	stack_err("start failed; stopping what was started");
	stack_stop(st);
	return 1;
}

/*
 * stop when the stack's segment does not exist: nothing of the stack runs
 * (its peers leave when the segment goes; the supervisor was stopped
 * first). The goal of stop holds: exit 0, saying so (review11 N-I: it
 * said "join: shm_open: No such file or directory", exit 1). What a
 * failed start or a killed vlmc left is cleaned up.
 */
static int stack_stop_not_running(const struct stack *st)
{
	stack_remove_stale_sockets(st);
	printf("no stack is running in %s (segment %s does not exist)\n",
	       st->dir, st->segment);
	return 0;
}

/*
 * Whether cached must not be stopped now (SIGTERM: its flush and unplug)
 * because the store is exiting while cached runs plugged: cached could
 * not flush to it (requests to an exiting port wait, and nothing can
 * restart the store before its threads end), and would give up after its
 * --flush-timeout, dropping its write-back data (a loss). When so, says
 * it (after prefix, with the store's pid; then: what to do once the
 * store is dead) and returns true; the caller leaves cached running and
 * plugged, its data kept. Shared by stop and unplug-cached (review23h
 * F5: unplug SIGTERMed such a cached).
 */
static bool stack_cached_cannot_flush(struct xseg *seg, const char *prefix,
				      const char *then)
{
	struct xseg_port_info store, cached;
	char why[512];

	if (xseg_port_info(seg, STACK_STORE_PORT, &store) || !store.exiting ||
	    xseg_port_info(seg, STACK_CACHED_PORT, &cached) || !cached.alive ||
	    cached.exiting || !stack_plugged(seg))
		return false;
	stack_exiting_why(why, sizeof(why), &store, then);
	stack_err("%sthe store is exiting: %s; cached (pid %d, %.1f MiB "
		  "unflushed) cannot flush to it and is left running, "
		  "plugged, its data kept",
		  prefix, why, (int)cached.owner_pid,
		  cached.unflushed * STACK_CACHED_BUCKET_SIZE / 1048576.0);
	return true;
}

/*
 * stop's step for cached: its flush and unplug (stack_stop_port, with the
 * store revived should it die meanwhile). Not while the store is exiting
 * and cached is plugged (stack_cached_cannot_flush): cached is left
 * running and plugged, its data kept, and the stop fails (-EAGAIN,
 * *exiting set: the store is not stopped either): run once the store is
 * gone, stop revives it and cached flushes. Otherwise 0, -EBUSY (cached
 * is exiting, *exiting set: the store is stopped all the same), or
 * another failure (said).
 */
static int stack_stop_cached(const struct stack *st, struct xseg *seg,
			     bool *revive_failed, bool *exiting)
{
	struct stack_stop_watch flush = {.st = st,
					 .revive_failed = revive_failed};
	int rc;

	if (stack_cached_cannot_flush(
		seg, "",
		"then it is dead, and 'xsegctl stack stop' run again "
		"restarts it for cached's flush")) {
		*exiting = true;
		return -EAGAIN;
	}
	rc = stack_stop_port(seg, STACK_CACHED_PORT, "cached", 300,
			     stack_exiting_timeout_ns(st), &flush, "");
	if (rc == -EBUSY)
		*exiting = true;
	return rc;
}

static int stack_stop(struct stack *st)
{
	struct xseg *seg;
	char err[XSEG_ERRBUF_LEN];
	bool lost, revive_failed = false, exiting = false;
	uint64_t counted;
	int rc = 0;

	/* first the supervisor, or it would restart what we stop */
	if (stack_stop_supervisor(st))
		return 1;
	rc = xseg_join(st->segment, &seg, err, sizeof(err));
	if (rc == -ENOENT)
		return stack_stop_not_running(st);
	if (rc) {
		stack_err("%s", err);
		return 1;
	}
	/* top down: vlmc drains NBD, cached flushes and unplugs, the store
	 * checkpoints; the store must be up while the others stop (checked
	 * again before cached: it may have died while vlmc drained). A
	 * peer that is exiting and stays so (-EBUSY: its leader gone, a
	 * thread stuck) does not hold up the others' stop: it sends
	 * nothing more (its threads are ending), and cached's flush and
	 * the store's checkpoint still run in their order. That rests on
	 * no peer leaving its main through pthread_exit (none calls it;
	 * review23h F7): "exiting" then only arises from a group exit
	 * (exit, a fatal signal, SIGKILL), whose remaining threads are in
	 * the kernel and die on their way back to user space, so they can
	 * finish the system call in progress but never enqueue an xseg
	 * request. A peer whose leader called pthread_exit would look the
	 * same while its other threads still run and send. A live peer
	 * that does not exit still ends the stop where it is: it may still
	 * send requests down the stack. */
	stack_stop_revive_store(st, seg, &revive_failed);
	rc = stack_stop_port(seg, STACK_VLMC_PORT, "vlmc", 60,
			     stack_exiting_timeout_ns(st), NULL, "");
	if (rc == -EBUSY) {
		exiting = true;
		rc = 0;
	}
	if (!rc) {
		stack_stop_revive_store(st, seg, &revive_failed);
		rc = stack_stop_cached(st, seg, &revive_failed, &exiting);
		if (rc == -EBUSY)
			rc = 0;
	}
	if (!rc) {
		rc = stack_stop_port(seg, STACK_STORE_PORT, "store", 120,
				     stack_exiting_timeout_ns(st), NULL, "");
		if (rc == -EBUSY) {
			exiting = true;
			rc = 0;
		}
	}
	if (rc || stack_any_alive(seg)) {
		xseg_leave(seg);
		/* -EAGAIN: cached left running for an exiting store */
		if (exiting && (!rc || rc == -EAGAIN))
			stack_err(
			    "segment %s kept: a peer is still exiting "
			    "(above); run 'xsegctl stack stop' again once "
			    "it is gone",
			    st->segment);
		else
			stack_err("some peers are still running; segment %s "
				  "kept",
				  st->segment);
		return 1;
	}
	stack_remove_stale_sockets(st);
	/* Destroying the segment would drop the only record of a loss
	 * (its counter, a dead cached's count, cached's kept redirect):
	 * keep it, say what was lost, and fail. */
	lost = stack_report_losses(st, seg, false);
	/* read after the report's reap, which counts a dead cached's
	 * unflushed data: none counted with the redirect still there is a
	 * cached that kept it with nothing lost (its requests in flight at
	 * a store that did not answer), or a write-through one that died */
	counted = xseg_writeback_losses(seg);
	xseg_leave(seg);
	if (lost) {
		stack_report(st,
			     "stack stopped %s: segment %s kept "
			     "as the record ('xsegctl info %s', 'xsegctl "
			     "stack status --dir %s'); remove it with "
			     "'xsegctl destroy %s' (the next 'xsegctl stack "
			     "start' reports it again and replaces it)",
			     counted ? "WITH DATA LOSS"
				     : "WITH THE STORE STILL REDIRECTED (no "
				       "write-back loss counted)",
			     st->segment, st->segment, st->dir, st->segment);
		return 1;
	}
	xseg_destroy(st->segment);
	printf("stack stopped: segment %s removed, data kept in %s/store\n",
	       st->segment, st->dir);
	return 0;
}

/* cached's statistics, as it last published them in its port's statistics
 * area (every second): no signal to cached, no waiting. Returns false when
 * nothing was published (cached never ran on this segment). */
static bool stack_cached_stats(struct xseg *seg, struct xseg_port_stats *ps)
{
	return !xseg_port_stats_read(seg, STACK_CACHED_PORT, ps) && ps->nr > 0;
}

static uint64_t stack_stat(const struct xseg_port_stats *ps, const char *name)
{
	for (uint32_t i = 0; i < ps->nr; i++)
		if (!strcmp(ps->stats[i].name, name))
			return ps->stats[i].value;
	return 0;
}

static double stack_age_s(const struct xseg_port_stats *ps)
{
	uint64_t now = xseg_now_ns();

	return now > ps->published_ns ? (now - ps->published_ns) / 1e9 : 0;
}

static void stack_print_cache(const struct xseg_port_stats *ps)
{
	uint64_t hits = stack_stat(ps, "hits"), miss = stack_stat(ps, "misses");
	uint64_t part = stack_stat(ps, "partial_hits");
	uint64_t all = hits + miss + part;

	printf("cache: %s, %" PRIu64 " of %" PRIu64 " MiB free, %" PRIu64
	       " MiB dirty, %" PRIu64 " objects; reads: %" PRIu64
	       " hits, %" PRIu64 " partial, %" PRIu64 " misses (%.1f%% hits); "
	       "%" PRIu64 " evictions, %" PRIu64 " flushes, %" PRIu64
	       " errors from the store (published %.1f s ago)\n",
	       stack_stat(ps, "writeback") ? "write-back" : "write-through",
	       stack_stat(ps, "free_bytes") >> 20,
	       stack_stat(ps, "cache_bytes") >> 20,
	       stack_stat(ps, "dirty_bytes") >> 20,
	       stack_stat(ps, "objects_active"), hits, part, miss,
	       all ? 100.0 * hits / all : 0.0, stack_stat(ps, "evictions"),
	       stack_stat(ps, "flushes"), stack_stat(ps, "next_errors"),
	       stack_age_s(ps));
	/* published by cached since session 9: absent (0) from older ones */
	if (stack_stat(ps, "flush_failing"))
		printf("cache: FLUSH WRITES FAILING: the last write of dirty "
		       "data to the store failed; the data stays dirty in the "
		       "cache (see the store's state above and cached's "
		       "log)\n");
	/* since session 10: requests needing a bucket or an object slot
	 * fail with the store's errno instead of waiting */
	if (stack_stat(ps, "space_refused"))
		printf("cache: REQUESTS NEEDING CACHE SPACE FAIL with %s "
		       "(%" PRIu64 " so far): the store refuses writes\n",
		       strerror((int)stack_stat(ps, "space_refused")),
		       stack_stat(ps, "space_failed"));
}

/* The store's degraded errno (a blocker that refuses writes: full disk,
 * a failed write or fsync; docs/blocker.md), 0 when it serves writes, does
 * not say (noop) or has not published its statistics yet. */
static int stack_store_degraded(struct xseg *seg)
{
	struct xseg_port_stats *ps = calloc(1, sizeof(*ps));
	int e = 0;

	if (ps && !xseg_port_stats_read(seg, STACK_STORE_PORT, ps) &&
	    ps->nr > 0)
		e = (int)stack_stat(ps, "degraded_errno");
	free(ps);
	return e;
}

/* The last line of DIR/run/NAME.log since this stack's start that
 * contains needle, into buf; false if none. */
static bool stack_last_log_line(const struct stack *st, const char *name,
				const char *needle, char *buf, size_t cap)
{
	char path[PATH_MAX + 32], *text, *from, *p;
	bool found = false;

	snprintf(path, sizeof(path), "%s/run/%s.log", st->dir, name);
	if (stack_read_file(path, &text))
		return false;
	from = text;
	for (p = strstr(text, STACK_START_MARK); p;
	     p = strstr(p + 1, STACK_START_MARK))
		from = p;
	for (p = strtok(from, "\n"); p; p = strtok(NULL, "\n"))
		if (strstr(p, needle)) {
			snprintf(buf, cap, "%s", p);
			found = true;
		}
	free(text);
	return found;
}

/*
 * Tell the operator at once when the store came up refusing writes (review11
 * N-F: on a small disk the space reserve cannot be allocated, and the first
 * sign used to be an ENOSPC at the first volume create on an empty disk).
 * The store publishes its statistics within a second of binding: wait for
 * them up to 3 s. Not a failure: reads are served, and space freed (or the
 * file system grown) lets writes back in.
 */
static void stack_warn_store_degraded(const struct stack *st, struct xseg *seg)
{
	struct xseg_port_stats *ps = calloc(1, sizeof(*ps));
	char line[1024];
	int e;

	e = 0;
	for (int i = 0; ps && i < 150; i++) {
		if (!xseg_port_stats_read(seg, STACK_STORE_PORT, ps) &&
		    ps->nr > 0) {
			e = (int)stack_stat(ps, "degraded_errno");
			break;
		}
		stack_sleep_ms(20);
	}
	free(ps);
	if (!e)
		return;
	stack_err("warning: the store refuses writes (%s); reads are served",
		  strerror(e));
	if (stack_last_log_line(st, "store", "degraded", line, sizeof(line)))
		stack_err("  %s/run/store.log: %.900s", st->dir, line);
	if (e == ENOSPC)
		stack_err("  free space, or lower the store's space reserve "
			  "(store_reserve; store_segment_size for a new "
			  "store): docs/operations.md, docs/blocker.md "
			  "\"Full disk\"");
	else
		stack_err("  see docs/blocker.md, \"Full disk\"");
}

static void stack_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if (*s == '\n')
			fputs("\\n", stdout);
		else if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
	putchar('"');
}

static void stack_print_exiting(const char *role,
				const struct xseg_port_info *pi)
{
	char why[512];

	stack_exiting_why(why, sizeof(why), pi,
			  "then it is dead, and restarted as any dead peer");
	printf("%s: EXITING: %s\n", role, why);
}

/* The port's owner lives and serves: alive and ready (xseg_port_alive:
 * not in the middle of a bind or a reclaim, whose pid pi.alive would
 * report: a restarted store is not serving before its bind completes,
 * review22s F3), and not only through threads its leader left. */
static bool stack_port_serving(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	return xseg_port_alive(seg, port) == 1 &&
	       !xseg_port_info(seg, port, &pi) && !pi.exiting;
}

static int stack_status(struct stack *st)
{
	static const struct {
		uint32_t port;
		const char *role;
	} roles[] = {{STACK_STORE_PORT, "store"},
		     {STACK_CACHED_PORT, "cached"},
		     {STACK_VLMC_PORT, "vlmc"}};
	struct xseg *seg;
	char *vols = NULL, verr[256];
	struct xseg_port_stats *ps = calloc(1, sizeof(*ps));
	bool have_stats;
	size_t vlen = 0;
	FILE *vf;
	uint32_t next;
	bool healthy;
	int degraded;

	if (stack_join(st, &seg)) {
		free(ps);
		return 1;
	}
	next = xseg_get_path_next(seg, STACK_STORE_PORT);
	degraded = stack_store_degraded(seg);
	/* only while cached runs: an old table would mislead */
	have_stats = ps && xseg_port_alive(seg, STACK_CACHED_PORT) == 1 &&
		     stack_cached_stats(seg, ps);
	vf = open_memstream(&vols, &vlen);
	if (vf) {
		/* bounded: status must answer while vlmc is busy with a
		 * long control command (a remove of a huge volume) */
		if (xsegctl_vlmc_command(st->ctl_socket, "list", vf, verr,
					 sizeof(verr), 5))
			fprintf(vf, "(%s)\n", verr);
		fclose(vf);
	}
	if (st->json) {
		printf("{\"segment\":");
		stack_json_str(st->segment);
		printf(",\"dir\":");
		stack_json_str(st->dir);
		printf(",\"cached_plugged\":%s,\"writeback_losses\":%" PRIu64
		       ",\"store_degraded_errno\":%d,\"peers\":[",
		       next == STACK_CACHED_PORT ? "true" : "false",
		       xseg_writeback_losses(seg), degraded);
	} else {
		printf("stack in %s, segment %s\n", st->dir, st->segment);
		printf("write-back losses: %" PRIu64 "%s\n",
		       xseg_writeback_losses(seg),
		       xseg_writeback_losses(seg)
			   ? " (a write-back cached died holding acknowledged "
			     "writes; see docs/operations.md)"
			   : "");
		printf("%-7s %-5s %-8s %-8s %-7s %12s %12s %8s %6s %9s\n",
		       "role", "port", "type", "pid", "alive", "accepted",
		       "served", "failed", "queue", "unflushed");
	}
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
		struct xseg_port_info pi;

		if (xseg_port_info(seg, roles[i].port, &pi))
			continue;
		if (st->json) {
			printf("%s{\"role\":\"%s\",\"port\":%u,\"type\":",
			       i ? "," : "", roles[i].role, roles[i].port);
			stack_json_str(pi.bound ? pi.peer_type : "");
			printf(",\"pid\":%d,\"alive\":%s,\"exiting\":%s,"
			       "\"accepted\":%" PRIu64 ",\"served\":%" PRIu64
			       ",\"failed\":%" PRIu64
			       ",\"request_depth\":%" PRIu64
			       ",\"unflushed\":%" PRIu64 "}",
			       pi.bound ? (int)pi.owner_pid : 0,
			       pi.alive ? "true" : "false",
			       pi.exiting ? "true" : "false", pi.accepted,
			       pi.served, pi.failed, pi.request_depth,
			       pi.unflushed);
		} else {
			printf("%-7s %-5u %-8s %-8d %-7s %12" PRIu64
			       " %12" PRIu64 " %8" PRIu64 " %6" PRIu64
			       " %9" PRIu64 "\n",
			       roles[i].role, roles[i].port,
			       pi.bound ? pi.peer_type : "-",
			       pi.bound ? (int)pi.owner_pid : 0,
			       pi.exiting ? "exiting"
			       : pi.alive ? "yes"
					  : "no",
			       pi.accepted, pi.served, pi.failed,
			       pi.request_depth, pi.unflushed);
		}
	}
	for (size_t i = 0; !st->json && i < sizeof(roles) / sizeof(roles[0]);
	     i++) {
		struct xseg_port_info pi;

		if (!xseg_port_info(seg, roles[i].port, &pi) && pi.exiting)
			stack_print_exiting(roles[i].role, &pi);
	}
	if (st->json) {
		printf("],\"supervisor\":");
		stack_print_supervisor_json(st);
		printf(",\"cache_stats\":");
		if (have_stats) {
			printf("{\"age_s\":%.1f", stack_age_s(ps));
			/* names are checked by xseg_port_stats_read:
			 * [A-Za-z0-9_.-] only, no escaping needed */
			for (uint32_t i = 0; i < ps->nr; i++)
				printf(",\"%s\":%" PRIu64, ps->stats[i].name,
				       ps->stats[i].value);
			printf("}");
		} else {
			printf("null");
		}
		printf(",\"volumes\":");
		stack_json_str(vols ? vols : "");
		printf("}\n");
	} else {
		printf("redirect: port %u -> %s\n", STACK_STORE_PORT,
		       next == STACK_CACHED_PORT ? "2 (cached plugged)"
						 : "none (cached unplugged)");
		if (degraded)
			printf("store: DEGRADED, writes refused (%s), reads "
			       "served; see %s/run/store.log\n",
			       strerror(degraded), st->dir);
		if (have_stats)
			stack_print_cache(ps);
		printf("volumes (name size object_size ro|rw parent):\n%s",
		       vols ? vols : "");
		printf("NBD: ");
		stack_print_nbd_uri(stdout, st->nbd_socket);
		putchar('\n');
		stack_print_supervisor(st);
	}
	free(vols);
	free(ps);
	/* healthy: the store and vlmc live and serve (cached is optional:
	 * it may be unplugged); one exiting is on its way out */
	healthy = stack_port_serving(seg, STACK_STORE_PORT) &&
		  stack_port_serving(seg, STACK_VLMC_PORT);
	xseg_leave(seg);
	return healthy ? 0 : 1;
}

/*
 * unplug-cached of a cached that is not running (killed, or the supervisor
 * gave up on it) but still plugged: remove the redirect so the store
 * serves directly. What that cached held dirty was never flushed, so its
 * death had already lost it; nothing flushed is lost. The loss is counted
 * (xseg_clear_path_next reclaims the dead cached's port first), so vlmc
 * fails the next FLUSH instead of reporting it durable.
 */
/* Attempts, about a second each, of the unplug of a dead cached while
 * the store still runs requests it sent. */
#define STACK_UNPLUG_DEAD_TRIES 30

static int stack_unplug_dead(struct xseg *seg)
{
	uint64_t before = xseg_writeback_losses(seg), after;
	int rc = -EAGAIN;

	fprintf(stderr, "xsegctl: stack: cached is not running; removing its "
			"redirect\n");
	/* -EAGAIN: requests the dead cached sent still run at the store,
	 * and the redirect stays until they are answered (review14 F1);
	 * each call waits a second for them */
	for (int tries = 0; tries < STACK_UNPLUG_DEAD_TRIES; tries++) {
		rc = xseg_clear_path_next(seg, STACK_STORE_PORT);
		if (rc != -EAGAIN)
			break;
		if (!tries)
			fprintf(stderr,
				"xsegctl: stack: waiting for the store to "
				"answer requests the dead cached sent\n");
	}
	if (rc == -EAGAIN)
		stack_err("unplug failed: the store has not answered requests "
			  "the dead cached sent for %d s: cached stays "
			  "plugged (its port fails requests) until they are "
			  "answered; retry unplug-cached",
			  STACK_UNPLUG_DEAD_TRIES);
	else if (rc == -EPERM || rc == -EBUSY) {
		/* the port came alive after the check above: a cached
		 * restarted meanwhile (-EPERM: only its own stop takes it
		 * out), or a process binding or reclaiming it (-EBUSY,
		 * its owner word under change); named, so that what
		 * holds it can be found */
		struct xseg_port_info pi;
		int pid = 0;

		if (!xseg_port_info(seg, STACK_CACHED_PORT, &pi) && pi.alive)
			pid = (int)pi.owner_pid;

		if (rc == -EPERM)
			stack_err("unplug failed: a cached runs on port %u "
				  "again (pid %d, restarted meanwhile): it "
				  "leaves the path by its own stop; run "
				  "unplug-cached again",
				  STACK_CACHED_PORT, pid);
		else
			stack_err("unplug failed: port %u is being bound or "
				  "reclaimed by another process (pid %d): "
				  "cached stays plugged; retry unplug-cached "
				  "once that is done",
				  STACK_CACHED_PORT, pid);
	} else if (rc)
		stack_err("unplug failed: cannot remove cached's redirect: %s",
			  strerror(-rc));
	if (rc)
		return rc;
	after = xseg_writeback_losses(seg);
	if (after != before)
		fprintf(stderr,
			"xsegctl: stack: the dead cached held acknowledged "
			"writes it had not flushed: write-back loss counted "
			"(%" PRIu64 " in all); vlmc fails the next FLUSH of "
			"the volumes written since their last one\n",
			after);
	return 0;
}

static int stack_plug(struct stack *st, bool plug)
{
	struct xseg *seg;
	int rc;

	if (stack_join(st, &seg))
		return 1;
	if (plug) {
		if (xseg_port_alive(seg, STACK_CACHED_PORT) == 1) {
			stack_err("cached is already running on port %u",
				  STACK_CACHED_PORT);
			xseg_leave(seg);
			return 1;
		}
		stack_set_cached_off(st, false);
		rc = stack_start_peer(st, seg, STACK_ROLE_CACHED);
	} else {
		/* before anything changes: refused, cached.off is not
		 * written (the supervisor keeps restarting cached) and
		 * cached is not signalled */
		if (stack_cached_cannot_flush(
			seg, "unplug failed: ",
			"then it is dead, the supervisor (or 'xsegctl stack "
			"restart-peer store') starts it again, and "
			"'xsegctl stack unplug-cached' run again lets cached "
			"flush")) {
			xseg_leave(seg);
			return 1;
		}
		/* tell the supervisor first: an unplugged cached is not
		 * restarted */
		stack_set_cached_off(st, true);
		if (xseg_port_alive(seg, STACK_CACHED_PORT) != 1 &&
		    !stack_plugged(seg)) {
			/* what unplug wants already holds: a second unplug
			 * is not an error (review11 N-I) */
			xseg_leave(seg);
			printf("cached is not plugged\n");
			return 0;
		}
		if (xseg_port_alive(seg, STACK_CACHED_PORT) != 1) {
			rc = stack_unplug_dead(seg);
		} else {
			/* cached's shutdown is the unplug sequence:
			 * write-through, flush every dirty bucket, remove the
			 * redirect, pass on what is still queued, exit
			 * (docs/cached.md) */
			struct stack_stop_watch flush = {0};

			rc = stack_stop_port(seg, STACK_CACHED_PORT, "cached",
					     300, stack_exiting_timeout_ns(st),
					     &flush, "unplug failed: ");
			if (!rc && stack_plugged(seg)) {
				/* it exited (killed?) before its unplug
				 * removed the redirect */
				stack_err(
				    "unplug failed: cached exited during "
				    "its unplug without taking itself out "
				    "of the path (killed, or it kept the "
				    "redirect on purpose: its log says "
				    "why); run "
				    "unplug-cached again: it takes the "
				    "dead cached out and says whether a "
				    "write-back loss was counted");
				xseg_leave(seg);
				return 1;
			}
		}
		if (rc) {
			/* both said "unplug failed: ", why and what to do:
			 * one message, not a second "unplug failed: <errno>"
			 * (review20b A5) */
			xseg_leave(seg);
			return 1;
		}
	}
	xseg_leave(seg);
	if (rc == -ECHILD && plug) {
		/* why was said above (stack_wait_port, with its log tail) */
		stack_err("plug failed: cached did not start (see above and "
			  "%s/run/cached.log); run plug-cached again",
			  st->dir);
		return 1;
	}
	if (rc) {
		stack_err("%s failed: %s", plug ? "plug" : "unplug",
			  strerror(-rc));
		return 1;
	}
	printf("cached %s\n", plug ? "plugged" : "unplugged");
	return 0;
}

/* The live owner of port, 0 if none. */
static pid_t stack_port_pid(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	return xseg_port_info(seg, port, &pi) || !pi.alive ? 0 : pi.owner_pid;
}

/* Up as start means it (stack_wait_port): cached also plugged. */
static bool stack_role_ready(struct xseg *seg, enum stack_role r)
{
	return stack_port_ready(seg, stack_role_port(r)) &&
	       (r != STACK_ROLE_CACHED || stack_plugged(seg));
}

unsigned stack_starting_pids(const struct stack *st, struct xseg *seg,
			     pid_t *pids)
{
	unsigned n = 0;

	for (int r = 0; r < STACK_NR_ROLES; r++) {
		pid_t pid = stack_pidfile(st, stack_role_name(r));

		if (!stack_role_ready(seg, r) &&
		    stack_role_pid_runs(st, pid, r))
			pids[n++] = pid;
	}
	return n;
}

/*
 * restart-peer with a supervisor: ask it (stack_request_restart) and
 * follow what happens until the peer is up or given up on again.
 * log_from: the peer's log size before, for the tail of a failure.
 * The supervisor waits for a starting peer as long as it progresses
 * (stack_wait_port), so this follows the same rule: it gives up once
 * what it waits for made no progress for start_timeout (and a slack)
 * until the supervisor took the request; then for as long as the
 * supervisor's run of failed starts before it gives up lasts
 * (STACK_SUP_FAILED_STARTS stalls of start_timeout each), so that a
 * peer whose starts stall is reported as given up on, with its log,
 * rather than left to a supervisor still trying.
 */
static int stack_restart_supervised(const struct stack *st, struct xseg *seg,
				    enum stack_role r, pid_t sup)
{
	uint64_t limit_ns = stack_start_timeout_ns(st) + STACK_RESTART_SLACK_NS;
	uint64_t run_ns = STACK_SUP_FAILED_STARTS * stack_start_timeout_ns(st) +
			  STACK_RESTART_SLACK_NS;
	const char *name = stack_role_name(r);
	off_t log_from = stack_log_size(st, name);
	struct stack_progress pg = {0};
	pid_t pids[STACK_NR_ROLES];
	char path[PATH_MAX + 64], what[128];
	unsigned n;
	int rc;

	rc = stack_request_restart(st, r, path, sizeof(path));
	if (rc) {
		stack_err("%s: %s", path, strerror(-rc));
		return 1;
	}
	/* the supervisor takes it within its poll, or after a restart it
	 * is waiting for: as long as a peer that is not up progresses */
	while (!access(path, F_OK)) {
		n = stack_starting_pids(st, seg, pids);
		stack_progress_sample(&pg, pids, n);
		if (!stack_pid_runs(sup, "xsegctl") ||
		    stack_progress_stalled(&pg, limit_ns)) {
			unlink(path);
			stack_err("the supervisor (pid %d) did not take the "
				  "request (see %s/run/supervisor.log)",
				  (int)sup, st->dir);
			return 1;
		}
		snprintf(what, sizeof(what),
			 "the supervisor (pid %d) to take the request",
			 (int)sup);
		stack_progress_say(&pg, what);
		stack_sleep_ms(20);
	}
	printf("the supervisor is restarting %s\n", name);
	fflush(stdout);
	memset(&pg, 0, sizeof(pg));
	for (;;) {
		if (stack_role_ready(seg, r)) {
			printf("%s is back (pid %d)\n", name,
			       (int)stack_port_pid(seg, stack_role_port(r)));
			return 0;
		}
		if (stack_supervisor_gave_up(st, r) == 1) {
			stack_err("%s failed again and the supervisor gave up "
				  "on it (see %s/run/supervisor.log); fix "
				  "what its log says, then restart-peer again",
				  name, st->dir);
			stack_log_tail(st, name, log_from);
			return 1;
		}
		pids[0] = stack_pidfile(st, name);
		if (!stack_pid_is_peer(st, pids[0], name))
			pids[0] = 0;
		stack_progress_sample(&pg, pids, 1);
		if (!stack_pid_runs(sup, "xsegctl") ||
		    stack_progress_stalled(&pg, run_ns)) {
			stack_err("%s did not come back (see %s/run/"
				  "supervisor.log)",
				  name, st->dir);
			stack_log_tail(st, name, log_from);
			return 1;
		}
		if (pids[0])
			snprintf(what, sizeof(what),
				 "%s (pid %d) to finish starting", name,
				 (int)pids[0]);
		else
			snprintf(what, sizeof(what),
				 "%s to start (it wrote no pid file yet)",
				 name);
		stack_progress_say(&pg, what);
		stack_sleep_ms(20);
	}
}

/*
 * `xsegctl stack restart-peer NAME`: bring back a peer that is down, also
 * one the supervisor gave up on (review11 N-I: "store died 5 times within
 * 60 s: giving up on it" left stop and start as the only way back). With
 * a supervisor it is the supervisor that restarts it, its give-up count
 * reset, so that it keeps it running afterwards; without one the peer is
 * started here. cached comes back plugged (it is what a give-up undid).
 * A running peer is left alone; an exiting one is refused, saying why.
 */
static int stack_restart_peer(struct stack *st, const char *role)
{
	enum stack_role r = (enum stack_role)stack_role_by_name(role);
	const char *name = stack_role_name(r);
	struct xseg_port_info pi;
	struct xseg *seg;
	pid_t sup, pid;
	char path[PATH_MAX + 32], why[512];
	int rc;

	if (stack_join(st, &seg))
		return 1;
	/* before the ready check: an exiting peer's statistics still match
	 * its pid and generation, so it looked ready ("nothing to
	 * restart"), and nothing can be started on its port until its
	 * threads end (not even through the supervisor, which waits for
	 * them too) */
	if (!xseg_port_info(seg, stack_role_port(r), &pi) && pi.exiting) {
		stack_exiting_why(why, sizeof(why), &pi,
				  "then it is dead, and restarted as any dead "
				  "peer (by the supervisor, or restart-peer "
				  "again)");
		stack_err("%s is exiting, not restarted: %s", name, why);
		xseg_leave(seg);
		return 1;
	}
	if (stack_role_ready(seg, r)) {
		printf("%s is running (pid %d): nothing to restart\n", name,
		       (int)stack_port_pid(seg, stack_role_port(r)));
		xseg_leave(seg);
		return 0;
	}
	if (r == STACK_ROLE_CACHED)
		stack_set_cached_off(st, false);
	sup = stack_pidfile(st, "supervisor");
	if (stack_pid_runs(sup, "xsegctl")) {
		rc = stack_restart_supervised(st, seg, r, sup);
		xseg_leave(seg);
		return rc;
	}
	pid = stack_pidfile(st, name);
	if (stack_role_pid_runs(st, pid, r)) {
		/* still starting (or stopping): not ours to start twice,
		 * nor to kill should it stall */
		printf("%s (pid %d) is starting; waiting for it\n", name,
		       (int)pid);
		rc = stack_wait_port(
		    st, seg, stack_role_port(r), name, pid, false, -1,
		    r == STACK_ROLE_CACHED ? stack_plugged : NULL);
	} else {
		/* the dead peer's pid file and control socket would end
		 * the start-up wait at once */
		snprintf(path, sizeof(path), "%s/run/%s.pid", st->dir, name);
		unlink(path);
		if (r == STACK_ROLE_VLMC)
			stack_remove_stale_sockets(st);
		rc = stack_start_peer(st, seg, r);
	}
	if (!rc)
		printf("%s is back (pid %d; no supervisor runs)\n", name,
		       (int)stack_port_pid(seg, stack_role_port(r)));
	xseg_leave(seg);
	return rc ? 1 : 0;
}

static void stack_usage(void)
{
	printf("Usage: xsegctl stack COMMAND [--dir DIR] [--json] [CONFIG]\n"
	       "Run a whole stack: vlmc (NBD) -> cached -> blocker.\n\n"
	       "Commands:\n"
	       "  start [CONFIG]   start the stack of CONFIG (key = value "
	       "file), or the\n"
	       "                   embedded default (print it with "
	       "'default-config')\n"
	       "  stop             stop every peer (top down), remove the "
	       "segment; if a\n"
	       "                   write-back cache lost acknowledged "
	       "writes, keep the\n"
	       "                   segment, say what was lost, exit 1; "
	       "exit 0 if no stack\n"
	       "                   runs there\n"
	       "  status           peers, ports, liveness, redirect, cache "
	       "statistics, volumes\n"
	       "  plug-cached      start cached and redirect the store's "
	       "port to it (online)\n"
	       "  unplug-cached    flush cached, remove the redirect, stop "
	       "it (online)\n"
	       "  restart-peer store|cached|vlmc\n"
	       "                   bring back a peer that is down, also one "
	       "the supervisor\n"
	       "                   gave up on (it tries it afresh); "
	       "cached is plugged again\n"
	       "  default-config   print the embedded default "
	       "configuration\n"
	       "  supervise        run the stack's supervisor in the "
	       "foreground (start\n"
	       "                   runs one in the background when "
	       "'supervise = on')\n\n"
	       "      --dir DIR    the stack's directory "
	       "(default " XSEGCTL_STACK_DIR "; a CONFIG's\n"
	       "                   'dir' wins)\n"
	       "      --json       status as JSON\n");
}

int xsegctl_stack_main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"dir", required_argument, NULL, 'D'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct stack *st = calloc(1, sizeof(*st));
	const char *dir = NULL, *cmd, *config = NULL, *role = NULL;
	char *text = NULL;
	int c, rc = 2;

	if (!st)
		return 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'D':
			dir = optarg;
			break;
		case 'j':
			st->json = true;
			break;
		case 'h':
			stack_usage();
			free(st);
			return 0;
		default:
			free(st);
			return 2;
		}
	}
	if (optind >= argc) {
		peer_usage_error(STACK_PROG, "no command");
		goto out;
	}
	cmd = argv[optind++];
	if (optind < argc)
		config = argv[optind++];
	if (optind < argc) {
		peer_usage_error(STACK_PROG, "%s: too many arguments", cmd);
		goto out;
	}
	if (!strcmp(cmd, "default-config")) {
		fputs(stack_default_conf, stdout);
		rc = 0;
		goto out;
	}
	if (strcmp(cmd, "start") && strcmp(cmd, "stop") &&
	    strcmp(cmd, "status") && strcmp(cmd, "plug-cached") &&
	    strcmp(cmd, "unplug-cached") && strcmp(cmd, "supervise") &&
	    strcmp(cmd, "restart-peer")) {
		peer_usage_error(STACK_PROG, "unknown command '%s'", cmd);
		goto out;
	}
	if (!strcmp(cmd, "restart-peer")) {
		/* its argument is the peer, not a CONFIG */
		role = config;
		config = NULL;
		if (!role || stack_role_by_name(role) < 0) {
			peer_usage_error(STACK_PROG,
					 "restart-peer: %s%s%s (expected "
					 "store, cached or vlmc)",
					 role ? "unknown peer '" : "no peer",
					 role ? role : "", role ? "'" : "");
			goto out;
		}
	}
	if (stack_parse(st, stack_default_conf, "default"))
		goto out;
	if (dir && !*dir) {
		peer_usage_error(STACK_PROG, "--dir: empty directory name");
		goto out;
	}
	if (dir && stack_str(st->dir, sizeof(st->dir), dir)) {
		peer_usage_error(STACK_PROG, "--dir too long");
		goto out;
	}
	if (config) {
		rc = stack_read_file(config, &text);
		if (rc) {
			stack_err("%s: %s", config, strerror(-rc));
			rc = 1;
			goto out;
		}
		rc = 2;
		if (stack_parse(st, text, config))
			goto out;
	}
	if (!strcmp(cmd, "start")) {
		if (stack_check(st, config ? config : "default")) {
			rc = 2;
			goto out;
		}
		rc = stack_start(st);
		goto out;
	}
	/* the other commands act on the running stack in that dir */
	{
		char d[PATH_MAX];
		bool json = st->json;
		uint64_t conf_size = st->segment_size;
		uint64_t conf_requests = st->requests;

		strcpy(d, st->dir);
		memset(st, 0, sizeof(*st));
		st->json = json;
		/* stop: nothing was ever started there is "not running" too,
		 * and stop's goal holds (stack_stop_not_running) */
		rc = stack_load_state(st, d, !strcmp(cmd, "stop"));
		if (rc == -ENOENT && !strcmp(cmd, "stop")) {
			printf("no stack is running in %s (no stack was "
			       "started there)\n",
			       d);
			rc = 0;
			goto out;
		}
		if (rc) {
			rc = 1;
			goto out;
		}
		/* CONFIG only names the directory here: its geometry was
		 * silently ignored, and an operator who changed it may
		 * think a plug-cached or a restart applied it */
		if (config && (conf_size != st->segment_size ||
			       conf_requests != st->requests))
			stack_err(
			    "warning: %s: segment_size %" PRIu64
			    " and requests %" PRIu64
			    " differ from the stack's in %s (segment_size "
			    "%" PRIu64 " and requests %" PRIu64
			    ", run/stack.conf): the running segment "
			    "keeps them; a start after a stop makes it "
			    "anew with the config's",
			    config, conf_size, conf_requests, d,
			    st->segment_size, st->requests);
	}
	if (!strcmp(cmd, "stop"))
		rc = stack_stop(st);
	else if (!strcmp(cmd, "status"))
		rc = stack_status(st);
	else if (!strcmp(cmd, "supervise"))
		rc = stack_supervise(st) ? 1 : 0;
	else if (!strcmp(cmd, "restart-peer"))
		rc = stack_restart_peer(st, role);
	else
		rc = stack_plug(st, !strcmp(cmd, "plug-cached"));
out:
	free(text);
	free(st);
	return rc;
}
