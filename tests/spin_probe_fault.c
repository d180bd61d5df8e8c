/* SPDX-License-Identifier: MIT */
/*
 * spin_probe_fault: an LD_PRELOAD shim for tests/test_bench_spin_probe.sh,
 * making bench_spin_probe meet what it cannot measure (SPIN_PROBE_FAULT):
 *   getrusage  getrusage() fails with ENOSYS (a kernel without
 *              RUSAGE_THREAD): the probe must say so and print nothing;
 *   clock      clock_gettime() always answers the same time: every batch
 *              measures 0 ns, so a ratio of two is 0/0, which the JSON
 *              must carry as null (JSON has no nan).
 * Unset or anything else: both behave as libc's.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static bool fault(const char *what)
{
	const char *f = getenv("SPIN_PROBE_FAULT");

	return f && !strcmp(f, what);
}

int getrusage(int who, struct rusage *usage)
{
	int (*real)(int, struct rusage *);

	if (fault("getrusage")) {
		errno = ENOSYS;
		return -1;
	}
	real = (int (*)(int, struct rusage *))dlsym(RTLD_NEXT, "getrusage");
	return real ? real(who, usage) : (errno = ENOSYS, -1);
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
	int (*real)(clockid_t, struct timespec *);

	if (fault("clock")) {
		ts->tv_sec = 1;
		ts->tv_nsec = 0;
		return 0;
	}
	real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT,
							    "clock_gettime");
	return real ? real(clk, ts) : (errno = ENOSYS, -1);
}
