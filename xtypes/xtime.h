/* SPDX-License-Identifier: MIT */
#ifndef XTIME_H
#define XTIME_H
/*
 * xtime: the absolute deadline "now plus ns" on a given clock, as the
 * struct timespec that the timed waits take (pthread_cond_timedwait,
 * pthread_mutex_timedlock, sem_timedwait); and a clock's reading in ns.
 *
 * Contract
 * - The clock must be the one the wait measures against: a condition
 *   variable initialised with pthread_condattr_setclock(CLOCK_MONOTONIC)
 *   needs xtime_in(CLOCK_MONOTONIC, ...); one with default attributes,
 *   pthread_mutex_timedlock and sem_timedwait need CLOCK_REALTIME. A
 *   deadline on the wrong clock is off by the clocks' difference (decades
 *   early or late), not by a little.
 * - tv_nsec is normalised to 0 .. 999999999; no overflow for any ns below
 *   2^63 on a 64-bit time_t.
 * - xtime_cond_init_monotonic initialises a condition variable whose
 *   timed waits take CLOCK_MONOTONIC deadlines (immune to steps of the
 *   wall clock); it returns 0 or an errno value, as pthread_cond_init.
 * - xtime_ns(clock) is the clock's reading in ns (CLOCK_MONOTONIC for
 *   intervals, CLOCK_THREAD_CPUTIME_ID for the calling thread's CPU time).
 * - Header only, no state: thread-safe.
 */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline struct timespec xtime_in(clockid_t clock, uint64_t ns)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	ts.tv_sec += (time_t)(ns / 1000000000ULL);
	ts.tv_nsec += (long)(ns % 1000000000ULL);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static inline uint64_t xtime_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline int xtime_cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t ca;
	int rc = pthread_condattr_init(&ca);

	if (rc)
		return rc;
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!rc)
		rc = pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
	return rc;
}

#endif /* XTIME_H */
