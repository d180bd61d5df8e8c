/* SPDX-License-Identifier: MIT */
/*
 * bench_xlock: lock+unlock rate of xlock next to references measured in the
 * same run: a plain test-and-set spinlock without back-off (what the
 * original xseg used), glibc's pthread_spinlock and a pthread mutex.
 *   - 1 thread: uncontended acquire+release pairs per second;
 *   - 3 threads on 2 CPUs (more spinners than cores), each section a few
 *     dozen instructions: total acquisitions per second, and the smallest
 *     share one thread got (spinlocks promise no fairness; this shows it).
 *
 * Usage: bench_xlock [seconds per measurement, default 1]
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xlock.h"
#include "bench_args.h"

enum kind { K_XLOCK, K_TAS, K_PSPIN, K_MUTEX, K_COUNT };

static const char *const kind_name[K_COUNT] = {
    "xlock", "tas_no_backoff", "pthread_spinlock", "pthread_mutex"};

struct lockset {
	enum kind kind;
	struct xlock xl;
	uint64_t tas;
	pthread_spinlock_t spin;
	pthread_mutex_t mutex;
	_Alignas(64) uint64_t stop;
	_Alignas(64) uint64_t data[8]; /* the protected state */
};

static inline void lock(struct lockset *l, uint64_t owner)
{
	switch (l->kind) {
	case K_XLOCK:
		xlock_acquire(&l->xl, owner);
		break;
	case K_TAS:
		while (__atomic_exchange_n(&l->tas, 1, __ATOMIC_ACQUIRE))
			;
		break;
	case K_PSPIN:
		pthread_spin_lock(&l->spin);
		break;
	default:
		pthread_mutex_lock(&l->mutex);
		break;
	}
}

static inline void unlock(struct lockset *l)
{
	switch (l->kind) {
	case K_XLOCK:
		xlock_release(&l->xl);
		break;
	case K_TAS:
		__atomic_store_n(&l->tas, 0, __ATOMIC_RELEASE);
		break;
	case K_PSPIN:
		pthread_spin_unlock(&l->spin);
		break;
	default:
		pthread_mutex_unlock(&l->mutex);
		break;
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void lockset_init(struct lockset *l, enum kind kind)
{
	memset(l, 0, sizeof(*l));
	l->kind = kind;
	xlock_init(&l->xl);
	pthread_spin_init(&l->spin, PTHREAD_PROCESS_SHARED);
	pthread_mutex_init(&l->mutex, NULL);
}

static void lockset_destroy(struct lockset *l)
{
	pthread_spin_destroy(&l->spin);
	pthread_mutex_destroy(&l->mutex);
}

static double single(enum kind kind, double seconds)
{
	struct lockset l;
	uint64_t pairs = 0;
	double t0 = now_s(), elapsed;

	lockset_init(&l, kind);
	do {
		for (unsigned i = 0; i < 1u << 20; i++) {
			lock(&l, 1);
			l.data[0]++;
			unlock(&l);
		}
		pairs += 1u << 20;
		elapsed = now_s() - t0;
	} while (elapsed < seconds);
	lockset_destroy(&l);
	return (double)pairs / elapsed;
}

struct worker {
	struct lockset *l;
	uint64_t owner;
	uint64_t acquisitions;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct lockset *l = w->l;
	uint64_t n = 0;

	while (!__atomic_load_n(&l->stop, __ATOMIC_RELAXED)) {
		lock(l, w->owner);
		for (unsigned i = 0; i < 8; i++)
			l->data[i] += i + 1;
		unlock(l);
		n++;
	}
	w->acquisitions = n;
	return NULL;
}

/* Smallest per-thread share of the acquisitions in the last contended run:
 * 0.33 is perfectly fair, near 0 means a thread starved. */
static double min_share[K_COUNT];

static double contended(enum kind kind, double seconds)
{
	struct lockset l;
	struct worker w[3];
	pthread_t t[3];
	uint64_t total = 0;
	double t0, elapsed;
	cpu_set_t set;

	lockset_init(&l, kind);
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	if (sysconf(_SC_NPROCESSORS_ONLN) > 1)
		CPU_SET(1, &set);
	t0 = now_s();
	for (unsigned i = 0; i < 3; i++) {
		w[i] = (struct worker){&l, 0x100 + i, 0};
		pthread_create(&t[i], NULL, worker_main, &w[i]);
		pthread_setaffinity_np(t[i], sizeof(set), &set);
	}
	usleep((useconds_t)(seconds * 1e6));
	__atomic_store_n(&l.stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		total += w[i].acquisitions;
	}
	elapsed = now_s() - t0;
	min_share[kind] = 1.0;
	for (unsigned i = 0; i < 3; i++)
		if (total &&
		    (double)w[i].acquisitions / total < min_share[kind])
			min_share[kind] = (double)w[i].acquisitions / total;
	lockset_destroy(&l);
	return (double)total / elapsed;
}

#define BENCH_XLOCK_USAGE                                                      \
	"usage: bench_xlock [SECONDS]\n"                                       \
	"  SECONDS: length of each measurement (default 1)\n"

int main(int argc, char **argv)
{
	double one[K_COUNT], three[K_COUNT];
	double seconds = 1.0;
	int rc = bench_seconds_args(argc, argv, "bench_xlock",
				    BENCH_XLOCK_USAGE, &seconds);

	if (rc >= 0)
		return rc;
	for (int k = 0; k < K_COUNT; k++) {
		one[k] = single((enum kind)k, seconds);
		three[k] = contended((enum kind)k, seconds);
	}
	printf("{\n  \"bench\": \"xlock\",\n  \"seconds_per_measurement\": "
	       "%.2f,\n  \"cpus_online\": %ld,\n"
	       "  \"reference\": \"test-and-set without back-off, "
	       "pthread_spinlock, pthread_mutex; same run\",\n",
	       seconds, sysconf(_SC_NPROCESSORS_ONLN));
	printf("  \"single_thread_pairs_per_s\": {");
	for (int k = 0; k < K_COUNT; k++)
		printf("%s\"%s\": %.0f", k ? ", " : "", kind_name[k], one[k]);
	printf("},\n  \"three_threads_two_cpus_acquisitions_per_s\": {");
	for (int k = 0; k < K_COUNT; k++)
		printf("%s\"%s\": %.0f", k ? ", " : "", kind_name[k], three[k]);
	printf("},\n  \"three_threads_min_thread_share\": {");
	for (int k = 0; k < K_COUNT; k++)
		printf("%s\"%s\": %.3f", k ? ", " : "", kind_name[k],
		       min_share[k]);
	printf("}\n}\n");
	return 0;
}
