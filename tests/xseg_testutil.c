/* SPDX-License-Identifier: MIT */
/*
 * Multi-process test helpers: see xseg_testutil.h.
 */
#include <check.h>

#include "xseg_testutil.h"
#include "xseg.h"
#include "xseg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define XTU_MAX_CHILDREN 256
#define XTU_MAX_NAMES	 64
#define XTU_NAME_LEN	 96

static pid_t xtu_runner; /* pid of the process that called xtu_init */

/* Registries are inherited by fork; every entry records the process that
 * made it, and a process only acts on its own entries, so a child never
 * kills its siblings or unlinks its parent's segments (while the strings
 * stay readable in the child). */
static struct {
	pid_t owner;
	pid_t pid;
} xtu_children[XTU_MAX_CHILDREN];
static struct {
	pid_t owner;
	char name[XTU_NAME_LEN];
} xtu_names[XTU_MAX_NAMES];
static unsigned xtu_name_seq;

static void xtu_cleanup_own(void)
{
	pid_t me = getpid();

	for (int i = 0; i < XTU_MAX_CHILDREN; i++) {
		if (xtu_children[i].owner == me && xtu_children[i].pid > 0) {
			kill(xtu_children[i].pid, SIGKILL);
			waitpid(xtu_children[i].pid, NULL, 0);
			xtu_children[i].owner = 0;
			xtu_children[i].pid = 0;
		}
	}
	for (int i = 0; i < XTU_MAX_NAMES; i++) {
		if (xtu_names[i].owner == me && xtu_names[i].name[0]) {
			shm_unlink(xtu_names[i].name);
			xtu_names[i].owner = 0;
		}
	}
}

static void xtu_atexit(void)
{
	xtu_cleanup_own();
}

static void xtu_on_signal(int sig)
{
	/* kill, waitpid and shm_unlink (an unlink) are async-signal-safe. */
	xtu_cleanup_own();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Segments of runs whose runner was killed before its xtu_finish (by
 * ctest's timeout, SIGKILL): named xtu-<runner>-..., that pid gone, owned
 * by this user. (A live runner in another pid namespace sharing /dev/shm
 * would look gone: the tests do not run that way.) */
void xtu_sweep_dead_runs(void)
{
	struct dirent *de;
	DIR *d = opendir("/dev/shm");

	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		char path[300], *end;
		struct stat st;
		long pid;

		if (strncmp(de->d_name, "xtu-", 4) != 0)
			continue;
		pid = strtol(de->d_name + 4, &end, 10);
		if (pid <= 0 || *end != '-' || kill((pid_t)pid, 0) == 0 ||
		    errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", de->d_name);
		/* a segment is a regular file (a directory here is not
		 * ours: saying "removing segment" of it on every start was
		 * wrong, and shm_unlink cannot remove it anyway) */
		if (stat(path, &st) < 0 || st.st_uid != geteuid() ||
		    !S_ISREG(st.st_mode))
			continue;
		fprintf(stderr,
			"xseg_testutil: removing segment /%s, left by test "
			"process %ld (killed before its cleanup)\n",
			de->d_name, pid);
		shm_unlink(path + strlen("/dev/shm"));
	}
	closedir(d);
}

void xtu_init(void)
{
	xtu_sweep_dead_runs();
	xtu_runner = getpid();
	atexit(xtu_atexit);
	signal(SIGINT, xtu_on_signal);
	signal(SIGTERM, xtu_on_signal);
	signal(SIGHUP, xtu_on_signal);
}

void xtu_finish(void)
{
	char prefix[64];
	struct dirent *de;
	DIR *d;

	xtu_cleanup_own();
	snprintf(prefix, sizeof(prefix), "xtu-%d-", (int)xtu_runner);
	d = opendir("/dev/shm");
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		char name[300];

		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(name, sizeof(name), "/%s", de->d_name);
		shm_unlink(name);
	}
	closedir(d);
}

const char *xtu_segname(const char *tag)
{
	pid_t me = getpid();

	for (int i = 0; i < XTU_MAX_NAMES; i++) {
		/* Keep entries of live ancestors readable: a child may still
		 * use a name its parent made. */
		if (xtu_names[i].owner == me ||
		    (xtu_names[i].owner && kill(xtu_names[i].owner, 0) == 0))
			continue;
		xtu_names[i].owner = me;
		snprintf(xtu_names[i].name, XTU_NAME_LEN, "/xtu-%d-%s-%d-%u",
			 (int)(xtu_runner ? xtu_runner : me), tag, (int)me,
			 xtu_name_seq++);
		return xtu_names[i].name;
	}
	return NULL;
}

void xtu_forget_segname(const char *name)
{
	for (int i = 0; i < XTU_MAX_NAMES; i++)
		if (xtu_names[i].owner == getpid() &&
		    strcmp(xtu_names[i].name, name) == 0)
			xtu_names[i].owner = 0;
}

static int xtu_register(pid_t pid)
{
	for (int i = 0; i < XTU_MAX_CHILDREN; i++) {
		/* Entries of other processes are inherited copies: ours to
		 * overwrite in this process's memory. */
		if (xtu_children[i].owner != getpid()) {
			xtu_children[i].owner = getpid();
			xtu_children[i].pid = pid;
			return 0;
		}
	}
	return -ENOSPC;
}

static void xtu_unregister(pid_t pid)
{
	for (int i = 0; i < XTU_MAX_CHILDREN; i++) {
		if (xtu_children[i].owner == getpid() &&
		    xtu_children[i].pid == pid) {
			xtu_children[i].owner = 0;
			xtu_children[i].pid = 0;
		}
	}
}

/* In the child: die with the parent (also if the parent already died). */
static void xtu_child_setup(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
}

pid_t xtu_fork(int (*fn)(void *arg), void *arg)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		xtu_child_setup(parent);
		int rc = fn(arg);
		/* The child's own children and segment names. */
		xtu_cleanup_own();
		_exit(rc & 0xff);
	}
	if (xtu_register(pid) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -ENOSPC;
	}
	return pid;
}

pid_t xtu_spawn(char *const argv[])
{
	pid_t parent = getpid(), pid;
	const char *bindir = getenv("AC_BIN_DIR");

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		char path[4096];

		xtu_child_setup(parent);
		if (!strchr(argv[0], '/') && bindir) {
			snprintf(path, sizeof(path), "%s/%s", bindir, argv[0]);
			execv(path, argv);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	if (xtu_register(pid) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -ENOSPC;
	}
	return pid;
}

uint64_t xtu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int xtu_wait(pid_t pid, uint64_t timeout_ms)
{
	uint64_t deadline = xtu_now_ms() + timeout_ms;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			xtu_unregister(pid);
			return -errno;
		}
		if (xtu_now_ms() >= deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			xtu_unregister(pid);
			return -ETIMEDOUT;
		}
		usleep(1000);
	}
	xtu_unregister(pid);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 255;
}

int xtu_try_wait(pid_t pid)
{
	int status;
	pid_t r = waitpid(pid, &status, WNOHANG);

	if (r == 0)
		return -EAGAIN;
	if (r < 0) {
		xtu_unregister(pid);
		return -errno;
	}
	xtu_unregister(pid);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 255;
}

int xtu_kill(pid_t pid, int sig)
{
	return kill(pid, sig) < 0 ? -errno : 0;
}

int xtu_wait_until(bool (*cond)(void *arg), void *arg, uint64_t timeout_ms)
{
	uint64_t deadline = xtu_now_ms() + timeout_ms;

	while (!cond(arg)) {
		if (xtu_now_ms() >= deadline)
			return -ETIMEDOUT;
		usleep(1000);
	}
	return 0;
}

uint64_t xtu_env_u64(const char *name, uint64_t def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end)
		return def;
	return v;
}

int xtu_echo_server(void *arg)
{
	const struct xtu_echo_opts *o = arg;
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg_request *reqs[16];
	struct xseg *seg;
	uint64_t answered = 0, deadline;
	uint32_t port = o->port;
	int rc;

	rc = xseg_join(o->segname, &seg, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "echo server: %s\n", err);
		return 1;
	}
	xseg_set_spin(seg, o->spin_ns);
	xseg_get_config(seg, &cfg);
	/* -EBUSY: the previous server of a test is still leaving;
	 * -EAGAIN: the port is draining (its dead owner's requests are still
	 * being answered elsewhere). Both end by themselves: retry a while,
	 * as peers/peer.c's peer_bind does. */
	deadline = xtu_now_ms() + 2000;
	for (;;) {
		if (port >= cfg.nr_static_ports)
			rc = xseg_alloc_port(seg, "echo", &port);
		else
			rc = xseg_bind_port(seg, port, "echo");
		if ((rc != -EBUSY && rc != -EAGAIN) || xtu_now_ms() >= deadline)
			break;
		usleep(1000);
	}
	if (rc == 0 && port >= cfg.nr_static_ports && o->dyn_port_out)
		__atomic_store_n(o->dyn_port_out, port, __ATOMIC_RELEASE);
	if (rc) {
		fprintf(stderr, "echo server: %s: port %u: %s\n", o->segname,
			port, strerror(-rc));
		xseg_leave(seg);
		return 1;
	}
	while (o->stop_after == 0 || answered < o->stop_after) {
		unsigned n = xseg_accept_batch(seg, port, reqs, 16);

		if (n == 0) {
			struct xseg_port_info pi;

			if (!o->stall_ns) {
				xseg_wait(seg, port, 100ULL * 1000 * 1000);
				continue;
			}
			/* xseg_wait returns 0 if work is there when its
			 * timeout expires: judge by the time it took. */
			uint64_t t0 = xseg_now_ns();

			xseg_wait(seg, port, o->stall_ns);
			if (xseg_now_ns() - t0 >= o->stall_ns &&
			    xseg_port_info(seg, port, &pi) == 0 &&
			    pi.request_depth > 0) {
				fprintf(stderr,
					"echo server: %s: port %u: wait timed "
					"out with %llu requests queued: lost "
					"wake-up\n",
					o->segname, port,
					(unsigned long long)pi.request_depth);
				return 3;
			}
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			struct xseg_request *req = reqs[i];
			int error = 0;

			if (req->targetlen >= 5 &&
			    memcmp(req->target, "fail:", 5) == 0) {
				error = EIO;
			} else if (req->op == XSEG_OP_READ) {
				unsigned char *d = xseg_request_data(seg, req);

				for (uint64_t j = 0; j < req->size; j++)
					d[j] = xtu_pattern(req->offset, j);
				req->serviced = req->size;
			} else if (req->op == XSEG_OP_WRITE) {
				req->serviced = req->size;
			}
			rc = xseg_respond(seg, req, error);
			if (rc) {
				fprintf(stderr, "echo server: respond: %s\n",
					strerror(-rc));
				return 1;
			}
			answered++;
		}
	}
	xseg_release_port(seg, port);
	xseg_leave(seg);
	return 0;
}

int xtu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	xtu_finish();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

uint32_t xtu_free_requests(struct xseg *seg)
{
	struct xseg_port_info pi;
	struct xseg_info info;
	uint32_t n;

	xseg_info(seg, &info);
	n = info.free_requests;
	for (uint32_t p = 0; p < xseg_nr_ports(seg); p++) {
		xseg_port_info(seg, p, &pi);
		n += (uint32_t)pi.free_depth;
	}
	return n;
}

void xtu_capture_start(struct xtu_captured *c)
{
	fflush(stderr);
	c->f = tmpfile();
	ck_assert_ptr_nonnull(c->f);
	c->saved = dup(STDERR_FILENO);
	ck_assert_int_ge(c->saved, 0);
	ck_assert_int_ge(dup2(fileno(c->f), STDERR_FILENO), 0);
}

char *xtu_capture_end(struct xtu_captured *c)
{
	char *buf = calloc(1, 4096);
	size_t n;

	ck_assert_ptr_nonnull(buf);
	fflush(stderr);
	ck_assert_int_ge(dup2(c->saved, STDERR_FILENO), 0);
	close(c->saved);
	rewind(c->f);
	n = fread(buf, 1, 4095, c->f);
	buf[n] = '\0';
	fclose(c->f);
	return buf;
}
