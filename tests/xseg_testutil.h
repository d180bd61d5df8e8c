/* SPDX-License-Identifier: MIT */
#ifndef XSEG_TESTUTIL_H
#define XSEG_TESTUTIL_H
/*
 * Helpers for multi-process tests on private xseg segments (library target
 * xseg_testutil). Test code only: it keeps per-process registries in
 * globals.
 *
 * Cleanup guarantee, even when a test fails or is killed:
 * - every child started with xtu_fork/xtu_spawn gets PR_SET_PDEATHSIG =
 *   SIGKILL, so it dies with the process that started it (a Check test
 *   process killed by its timeout takes its children with it);
 * - children and segment names are registered; an atexit handler and
 *   SIGINT/SIGTERM/SIGHUP handlers kill the children and unlink the names;
 * - segment names carry the pid of the process that called xtu_init
 *   ("/xtu-<runner>-<tag>-<pid>-<n>"), and xtu_finish (call it in main after
 *   srunner_run_all) unlinks every /dev/shm/xtu-<runner>-* left behind by
 *   test processes that were killed outright (or _exited by a failing
 *   assertion);
 * - xtu_init unlinks the segments of earlier runs whose runner was killed
 *   before its xtu_finish (ctest's timeout): those of this user whose
 *   <runner> pid no longer exists.
 *
 * Typical main:
 *	xtu_init();
 *	srunner_run_all(sr, CK_NORMAL);
 *	failed = srunner_ntests_failed(sr);
 *	xtu_finish();
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

/* Once, at the start of main: remember the runner pid, install handlers. */
/* Remove the segments /dev/shm/xtu-<pid>-* of test processes that are gone
 * (killed before their cleanup); xtu_init does it first. For programs
 * that make such segments without xtu_init (the fuzz targets). */
void xtu_sweep_dead_runs(void);
void xtu_init(void);

/* Unlink every segment of this run (any process); kill and reap registered
 * children of the calling process. Call at the end of main. */
void xtu_finish(void);

/* The end of every multi-process test's main: run all of suite s (fork
 * mode, CK_NORMAL output), free the runner, xtu_finish(), and return the
 * exit status for main (EXIT_FAILURE if any test failed). */
struct Suite;
int xtu_run_suite(struct Suite *s);

/* This process's stderr, redirected to a temporary file between
 * xtu_capture_start and xtu_capture_end, which restores it and returns
 * what was written (malloc'd, NUL-terminated, at most 4095 bytes). For
 * checking a library's log lines. Fails the test on an I/O error. */
struct xtu_captured {
	FILE *f;
	int saved;
};
void xtu_capture_start(struct xtu_captured *c);
char *xtu_capture_end(struct xtu_captured *c);

/* Free requests of a segment: the pool's plus every port's free queue
 * (after a test, all of them must be back). */
struct xseg;
uint32_t xtu_free_requests(struct xseg *seg);

/* A segment name unique to this run, process and call, registered for
 * unlink at exit of the calling process. The string stays valid until the
 * process exits. tag: a short word naming the test (letters, digits). */
const char *xtu_segname(const char *tag);

/* Forget a name registered by xtu_segname (e.g. a test unlinked it). */
void xtu_forget_segname(const char *name);

/* Fork a child that runs fn(arg) and _exits with its return value (0..255)
 * without running the parent's atexit handlers. Returns the pid (> 0) or a
 * negative errno. */
pid_t xtu_fork(int (*fn)(void *arg), void *arg);

/* Start a program: argv[0] without a '/' is looked up in $AC_BIN_DIR
 * (set by ctest for every test) and then in PATH. Returns the pid or a
 * negative errno. The child gets the same cleanup guarantees. */
pid_t xtu_spawn(char *const argv[]);

/* Wait up to timeout_ms for pid: returns its exit status (0..255), 128 +
 * signal number if a signal killed it, or -ETIMEDOUT after killing it with
 * SIGKILL (and reaping it). Unregisters it. */
int xtu_wait(pid_t pid, uint64_t timeout_ms);

/* Like xtu_wait without waiting: -EAGAIN if pid is still running. */
int xtu_try_wait(pid_t pid);

/* Send sig to a registered child (it stays registered until waited). */
int xtu_kill(pid_t pid, int sig);

/* Poll cond(arg) every millisecond until it returns true (returns 0) or
 * timeout_ms pass (returns -ETIMEDOUT). */
int xtu_wait_until(bool (*cond)(void *arg), void *arg, uint64_t timeout_ms);

/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t xtu_now_ms(void);

/* An environment variable as an unsigned number, or def if unset/invalid
 * (for stress sizes: XSEG_STRESS_ROUNDS=... makes a run longer). */
uint64_t xtu_env_u64(const char *name, uint64_t def);

/* ------------------------------------------------------------------------
 * A minimal in-test peer, to run in a child with xtu_fork (so tests do not
 * depend on the real peers).
 *
 * It joins segname, binds port (retrying -EBUSY for up to 2 s; a port in
 * the dynamic range is taken with xseg_alloc_port instead, and the number
 * it got is written to *dyn_port_out if that is non-NULL and shared, e.g.
 * MAP_SHARED memory), then serves until it has answered stop_after requests
 * (0: until killed): READ fills the data with (offset + i) & 0xff and sets
 * serviced = size; WRITE sets serviced = size; other ops are served with
 * nothing done. A request whose target starts with "fail:" is failed with
 * EIO. spin_ns is passed to xseg_set_spin. Returns 0, or 1 after printing
 * why to stderr (3: a lost wake-up, see stall_ns).
 */
#include "xseg.h"

struct xtu_echo_opts {
	const char *segname;
	uint32_t port;
	uint64_t spin_ns;
	uint64_t stop_after;
	uint32_t *dyn_port_out;
	/* 0: wait in slices of 100 ms. Otherwise wait up to stall_ns and
	 * treat a wait that lasted stall_ns while requests were queued as
	 * a lost wake-up: print it and exit with status 3. */
	uint64_t stall_ns;
};

int xtu_echo_server(void *opts);

/* Fill one byte pattern the echo server writes for READ, for checks. */
static inline unsigned char xtu_pattern(uint64_t offset, uint64_t i)
{
	return (unsigned char)((offset + i) & 0xff);
}

#endif /* XSEG_TESTUTIL_H */
