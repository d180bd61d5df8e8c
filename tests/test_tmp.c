/* SPDX-License-Identifier: MIT */
/*
 * Scratch files of a test program under one root that the runner removes:
 * see test_tmp.h.
 */
#include "test_tmp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define TTMP_PREFIX "actest-"
/* The longest TMPDIR used: the root (TMPDIR/actest-<pid>-XXXXXX), a
 * test's directory in it (<tag>-XXXXXX) and a socket name must fit the
 * 108 bytes of sun_path (review-s13 F2: with a 78-byte TMPDIR every vlmc
 * test waited 30 s for a socket it could not make) */
#define TTMP_TMPDIR_MAX 48

static char ttmp_root_path[256];
static pid_t ttmp_runner;  /* the process that made the root */
static int ttmp_lock = -1; /* the root, open and flock'ed by the runner */

static int ttmp_rm_one(const char *p, const struct stat *sb, int flag,
		       struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	if (remove(p) < 0 && errno != ENOENT)
		fprintf(stderr, "test_tmp: cannot remove %s: %s\n", p,
			strerror(errno));
	return 0; /* go on with the rest */
}

/* The deepest mount point strictly under dir (a canonical path) in out,
 * from /proc/self/mountinfo (its 5th field, with \ooo escapes): 1, or 0
 * when there is none, or -1 when mountinfo cannot be read or dir itself
 * is a mount point (out: "", or dir). */
static int ttmp_mount_under(const char *dir, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	size_t dlen = strlen(dir), best = 0;
	char line[4096];

	if (!f) {
		if (len)
			out[0] = '\0';
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char mp[PATH_MAX], *p = line;
		size_t n = 0;

		for (int field = 0; field < 4 && p; field++) {
			p = strchr(p, ' ');
			p = p ? p + 1 : NULL;
		}
		if (!p)
			continue;
		while (*p && *p != ' ' && n + 1 < sizeof(mp)) {
			if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' &&
			    p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
			    p[3] <= '7') {
				mp[n++] =
				    (char)((p[1] - '0') * 64 +
					   (p[2] - '0') * 8 + (p[3] - '0'));
				p += 4;
			} else {
				mp[n++] = *p++;
			}
		}
		mp[n] = '\0';
		if (n == dlen && !strcmp(mp, dir)) {
			/* mounted on dir itself: not ours to empty */
			snprintf(out, len, "%s", mp);
			fclose(f);
			return -1;
		}
		if (n > dlen && n > best && n < len &&
		    !strncmp(mp, dir, dlen) && mp[dlen] == '/') {
			memcpy(out, mp, n + 1);
			best = n;
		}
	}
	fclose(f);
	return best > 0;
}

/* Detach every file system mounted under path (test_blocker_full's
 * tmpfs, left by a run killed before it unmounted it; or a bind mount,
 * which st_dev does not tell): false when one stays, and then nothing
 * may be removed under path (review-s13 F4, review-s13b F2: every later
 * run emptied the tmpfs and failed to remove it; removing through a bind
 * mount deletes files outside the root). */
static bool ttmp_detach_mounts(const char *path)
{
	char dir[PATH_MAX], mp[PATH_MAX] = "";
	struct stat st;
	int found;

	/* a symbolic link is removed, not followed (review-s13c F1) */
	if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return true;
	if (!realpath(path, dir))
		return true; /* gone meanwhile */
	for (int tries = 0; (found = ttmp_mount_under(dir, mp, sizeof(mp)));
	     tries++) {
		if (found < 0) { /* review-s13c F2 */
			fprintf(stderr, "test_tmp: not removing %s: %s\n", path,
				mp[0] ? "a file system is mounted on it"
				      : "cannot read /proc/self/mountinfo");
			return false;
		}
		if (tries == 64) { /* stacked mounts: each try detaches one */
			fprintf(stderr,
				"test_tmp: not removing %s: %s stays mounted\n",
				path, mp);
			return false;
		}
		if (umount2(mp, MNT_DETACH | UMOUNT_NOFOLLOW) < 0) {
			fprintf(stderr,
				"test_tmp: not removing %s: %s is mounted in "
				"it and cannot be unmounted: %s\n",
				path, mp, strerror(errno));
			return false;
		}
	}
	return true;
}

void ttmp_rmtree(const char *path)
{
	if (!ttmp_detach_mounts(path))
		return;
	/* FTW_MOUNT: never across a mount come meanwhile */
	nftw(path, ttmp_rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

const char *ttmp_root(void)
{
	return ttmp_root_path;
}

void ttmp_mkdtemp(char *out, size_t len, const char *tag)
{
	int n = snprintf(out, len, "%s/%s-XXXXXX", ttmp_root_path, tag);

	if (n < 0 || (size_t)n >= len) {
		fprintf(stderr,
			"test_tmp: %s/%s-XXXXXX: path longer than the %zu "
			"bytes given\n",
			ttmp_root_path, tag, len);
		abort();
	}
	if (!mkdtemp(out)) {
		fprintf(stderr, "test_tmp: cannot make directory %s: %s\n", out,
			strerror(errno));
		abort();
	}
}

/* A root left by a runner that did not reach its exit handlers: ours,
 * named actest-<pid>-..., its runner pid gone, and nobody (a forked child
 * of that runner) holding its lock. */
static void ttmp_sweep_one(const char *tmp, const char *name)
{
	char path[PATH_MAX], *end;
	struct stat st;
	long pid;
	int fd;

	if (strncmp(name, TTMP_PREFIX, strlen(TTMP_PREFIX)) != 0)
		return;
	pid = strtol(name + strlen(TTMP_PREFIX), &end, 10);
	if (pid <= 0 || *end != '-' || strlen(end) != 7)
		return;
	if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
		return;
	if (snprintf(path, sizeof(path), "%s/%s", tmp, name) >=
	    (int)sizeof(path))
		return;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
	    flock(fd, LOCK_EX | LOCK_NB) == 0) {
		fprintf(stderr,
			"test_tmp: removing %s, left by test process %ld "
			"(killed before its cleanup)\n",
			path, pid);
		ttmp_rmtree(path);
	}
	close(fd);
}

static void ttmp_sweep(const char *tmp)
{
	DIR *d = opendir(tmp);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d)) != NULL)
		ttmp_sweep_one(tmp, de->d_name);
	closedir(d);
}

static void ttmp_cleanup(void)
{
	if (getpid() != ttmp_runner || !ttmp_root_path[0])
		return; /* a forked child: the root is the runner's */
	ttmp_rmtree(ttmp_root_path);
	if (access(ttmp_root_path, F_OK) == 0)
		fprintf(stderr,
			"test_tmp: scratch directory %s could not be "
			"removed\n",
			ttmp_root_path);
	close(ttmp_lock);
	ttmp_lock = -1;
}

/*
 * Before main(), in the process that will run the tests: every test
 * process is forked from it afterwards and inherits the root's path.
 * Registered first, ttmp_cleanup runs after the exit handlers main()
 * registers (xtu_init's, which kill the peers that write there).
 */
__attribute__((constructor)) static void ttmp_init(void)
{
	const char *tmp = getenv("TMPDIR");
	int n;

	if (!tmp || !*tmp)
		tmp = "/tmp";
	if (strlen(tmp) > TTMP_TMPDIR_MAX) {
		/* sockets go under the root: sun_path holds 108 bytes */
		fprintf(stderr,
			"test_tmp: TMPDIR %s is longer than %d bytes, too long "
			"for the Unix sockets made under it; using /tmp\n",
			tmp, TTMP_TMPDIR_MAX);
		tmp = "/tmp";
	}
	ttmp_sweep(tmp);
	n = snprintf(ttmp_root_path, sizeof(ttmp_root_path),
		     "%s/" TTMP_PREFIX "%ld-XXXXXX", tmp, (long)getpid());
	if (n < 0 || (size_t)n >= sizeof(ttmp_root_path) ||
	    !mkdtemp(ttmp_root_path)) {
		fprintf(stderr,
			"test_tmp: cannot make the scratch directory in %s: "
			"%s\n",
			tmp,
			n < 0 || (size_t)n >= sizeof(ttmp_root_path)
			    ? "path too long"
			    : strerror(errno));
		abort();
	}
	ttmp_lock = open(ttmp_root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ttmp_lock < 0 || flock(ttmp_lock, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "test_tmp: cannot lock %s: %s\n",
			ttmp_root_path, strerror(errno));
		rmdir(ttmp_root_path);
		abort();
	}
	ttmp_runner = getpid();
	atexit(ttmp_cleanup);
}
