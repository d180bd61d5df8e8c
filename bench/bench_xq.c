/* SPDX-License-Identifier: MIT */
/*
 * bench_xq: throughput of xq next to a ring of the same capacity guarded by
 * a PTHREAD_PROCESS_SHARED mutex, measured in the same run:
 *   - single thread: enqueue+dequeue pairs per second;
 *   - 1 producer + 1 consumer process on a shared mapping;
 *   - 2 producer + 2 consumer threads.
 * "transfers" = values that went through (one enqueue + one dequeue each).
 * Both queues use the same policy on full/empty: pause, and sched_yield
 * every 64th consecutive failure.
 *
 * The process pair runs twice: free (the scheduler may stack both on one
 * CPU, where they time-share and hardly contend) and pinned to CPUs 0 and 1
 * (every transfer crosses cores). On a busy shared machine the medians
 * swing with the load; "best" is the least disturbed round.
 *
 * Usage: bench_xq [seconds per measurement, default 1.5]
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "xq.h"
#include "bench_args.h"

#define CAPACITY 1024u

/* ---- the reference: a mutex-protected ring in shared memory ---- */

struct mring {
	pthread_mutex_t mutex;
	uint64_t head, tail, mask;
	uint32_t slots[];
};

static size_t mring_size(uint64_t capacity)
{
	return sizeof(struct mring) + capacity * sizeof(uint32_t);
}

static int mring_init(struct mring *r, uint64_t capacity)
{
	pthread_mutexattr_t attr;
	int err;

	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	err = pthread_mutex_init(&r->mutex, &attr);
	pthread_mutexattr_destroy(&attr);
	r->head = r->tail = 0;
	r->mask = capacity - 1;
	return -err;
}

static int mring_enqueue(struct mring *r, uint32_t v)
{
	int ret = -EAGAIN;

	pthread_mutex_lock(&r->mutex);
	if (r->tail - r->head <= r->mask) {
		r->slots[r->tail++ & r->mask] = v;
		ret = 0;
	}
	pthread_mutex_unlock(&r->mutex);
	return ret;
}

static int mring_dequeue(struct mring *r, uint32_t *v)
{
	int ret = -EAGAIN;

	pthread_mutex_lock(&r->mutex);
	if (r->tail != r->head) {
		*v = r->slots[r->head++ & r->mask];
		ret = 0;
	}
	pthread_mutex_unlock(&r->mutex);
	return ret;
}

/* ---- common driver ---- */

enum kind { KIND_XQ, KIND_MUTEX };

struct shared {
	uint64_t go, stop;
	uint64_t transfers[4]; /* per consumer */
	uint64_t sink;
	enum kind kind;
	_Alignas(64) unsigned char queue[];
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

static inline void wait_fail(unsigned *fails)
{
	if (++*fails % 64 == 0)
		sched_yield();
	else
		relax();
}

static inline int q_enqueue(struct shared *sh, uint32_t v)
{
	if (sh->kind == KIND_XQ)
		return xq_enqueue((struct xq *)sh->queue, v);
	return mring_enqueue((struct mring *)sh->queue, v);
}

static inline int q_dequeue(struct shared *sh, uint32_t *v)
{
	if (sh->kind == KIND_XQ)
		return xq_dequeue((struct xq *)sh->queue, v);
	return mring_dequeue((struct mring *)sh->queue, v);
}

static void wait_go(struct shared *sh)
{
	while (!__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
		relax();
}

static void produce(struct shared *sh)
{
	unsigned fails = 0;
	uint32_t v = 0;

	wait_go(sh);
	while (!__atomic_load_n(&sh->stop, __ATOMIC_RELAXED)) {
		if (q_enqueue(sh, v) == 0)
			v++;
		else
			wait_fail(&fails);
	}
}

static void consume(struct shared *sh, unsigned id)
{
	unsigned fails = 0;
	uint64_t n = 0, sum = 0;
	uint32_t v;

	wait_go(sh);
	while (!__atomic_load_n(&sh->stop, __ATOMIC_RELAXED)) {
		if (q_dequeue(sh, &v) == 0) {
			n++;
			sum += v;
		} else {
			wait_fail(&fails);
		}
	}
	__atomic_store_n(&sh->transfers[id], n, __ATOMIC_RELEASE);
	__atomic_fetch_add(&sh->sink, sum, __ATOMIC_RELAXED);
}

static struct shared *shared_new(enum kind kind, size_t *len)
{
	size_t qbytes =
	    kind == KIND_XQ ? xq_size(CAPACITY) : mring_size(CAPACITY);
	struct shared *sh;

	*len = sizeof(struct shared) + qbytes;
	sh = mmap(NULL, *len, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return NULL;
	memset(sh, 0, sizeof(*sh));
	sh->kind = kind;
	if (kind == KIND_XQ ? xq_init((struct xq *)sh->queue, CAPACITY, qbytes)
			    : mring_init((struct mring *)sh->queue, CAPACITY)) {
		munmap(sh, *len);
		return NULL;
	}
	return sh;
}

/* Let the workers run for seconds; returns the measured interval. */
static double run_interval(struct shared *sh, double seconds)
{
	double t0 = now_s(), t1;

	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	usleep((useconds_t)(seconds * 1e6));
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	t1 = now_s();
	return t1 - t0;
}

/* Producer on CPU 0, consumer on CPU 1, as on an otherwise idle two-core
 * machine, for the pinned variant. */

static void pin_to_cpu(unsigned cpu)
{
	cpu_set_t set;

	if (sysconf(_SC_NPROCESSORS_ONLN) <= (long)cpu)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* 1 producer + 1 consumer process. Returns transfers/s or -1. */
static double bench_procs(enum kind kind, double seconds, bool pin)
{
	pid_t parent = getpid(), pids[2];
	double elapsed, rate;
	struct shared *sh;
	size_t len;

	sh = shared_new(kind, &len);
	if (!sh)
		return -1;
	for (unsigned i = 0; i < 2; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			return -1;
		if (pids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(1);
			if (pin)
				pin_to_cpu(i);
			if (i == 0)
				produce(sh);
			else
				consume(sh, 0);
			_exit(0);
		}
	}
	elapsed = run_interval(sh, seconds);
	for (unsigned i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
	rate = (double)sh->transfers[0] / elapsed;
	munmap(sh, len);
	return rate;
}

static double bench_procs_free(enum kind kind, double seconds)
{
	return bench_procs(kind, seconds, false);
}

static double bench_procs_pinned(enum kind kind, double seconds)
{
	return bench_procs(kind, seconds, true);
}

struct thread_arg {
	struct shared *sh;
	unsigned id;
	bool producer;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;

	if (a->producer)
		produce(a->sh);
	else
		consume(a->sh, a->id);
	return NULL;
}

/* 2 producer + 2 consumer threads. Returns transfers/s or -1. */
static double bench_threads(enum kind kind, double seconds)
{
	struct thread_arg args[4];
	pthread_t t[4];
	double elapsed, rate;
	struct shared *sh;
	uint64_t total = 0;
	size_t len;

	sh = shared_new(kind, &len);
	if (!sh)
		return -1;
	for (unsigned i = 0; i < 4; i++) {
		args[i] = (struct thread_arg){sh, i / 2, i % 2 == 0};
		if (pthread_create(&t[i], NULL, thread_main, &args[i]))
			return -1;
	}
	elapsed = run_interval(sh, seconds);
	for (unsigned i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < 2; i++)
		total += sh->transfers[i];
	rate = (double)total / elapsed;
	munmap(sh, len);
	return rate;
}

/* Single thread: enqueue+dequeue pairs per second. */
static double bench_single(enum kind kind, double seconds)
{
	const unsigned chunk = 1u << 20;
	double t0, elapsed;
	struct shared *sh;
	uint64_t pairs = 0, sum = 0;
	uint32_t v;
	size_t len;

	sh = shared_new(kind, &len);
	if (!sh)
		return -1;
	t0 = now_s();
	do {
		for (unsigned i = 0; i < chunk; i++) {
			q_enqueue(sh, i);
			q_dequeue(sh, &v);
			sum += v;
		}
		pairs += chunk;
		elapsed = now_s() - t0;
	} while (elapsed < seconds);
	sh->sink = sum;
	munmap(sh, len);
	return (double)pairs / elapsed;
}

#define ROUNDS 5

typedef double (*bench_fn)(enum kind kind, double seconds);

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *samples)
{
	double sorted[ROUNDS];

	memcpy(sorted, samples, sizeof(sorted));
	qsort(sorted, ROUNDS, sizeof(double), cmp_double);
	return sorted[ROUNDS / 2];
}

static double best(const double *samples)
{
	double b = 0;

	for (unsigned i = 0; i < ROUNDS; i++)
		if (samples[i] > b)
			b = samples[i];
	return b;
}

static void print_samples(const double *samples)
{
	printf("[");
	for (unsigned i = 0; i < ROUNDS; i++)
		printf("%s%.0f", i ? ", " : "", samples[i]);
	printf("]");
}

/* The machine is shared and its load changes by the second: measure xq and
 * the mutex ring in alternating short rounds (seconds / ROUNDS each, order
 * swapped every round) and report medians plus every sample. */
static void compare(const char *name, const char *unit, bench_fn fn,
		    double seconds, bool last)
{
	double xq[ROUNDS], mx[ROUNDS], slice = seconds / ROUNDS;
	double xq_med, mx_med;

	for (unsigned r = 0; r < ROUNDS; r++) {
		if (r % 2 == 0) {
			xq[r] = fn(KIND_XQ, slice);
			mx[r] = fn(KIND_MUTEX, slice);
		} else {
			mx[r] = fn(KIND_MUTEX, slice);
			xq[r] = fn(KIND_XQ, slice);
		}
	}
	xq_med = median(xq);
	mx_med = median(mx);
	printf("  \"%s\": {\"xq_%s\": %.0f, \"mutex_ring_%s\": %.0f, "
	       "\"ratio\": %.2f,\n    \"best_ratio\": %.2f, \"xq_samples\": ",
	       name, unit, xq_med, unit, mx_med,
	       mx_med > 0 ? xq_med / mx_med : 0.0,
	       best(mx) > 0 ? best(xq) / best(mx) : 0.0);
	print_samples(xq);
	printf(", \"mutex_ring_samples\": ");
	print_samples(mx);
	printf("}%s\n", last ? "" : ",");
}

#define BENCH_XQ_USAGE                                                         \
	"usage: bench_xq [SECONDS]\n"                                          \
	"  SECONDS: length of each measurement (default 1.5)\n"

int main(int argc, char **argv)
{
	double seconds = 1.5;
	int rc = bench_seconds_args(argc, argv, "bench_xq", BENCH_XQ_USAGE,
				    &seconds);

	if (rc >= 0)
		return rc;
	printf("{\n  \"bench\": \"xq\",\n  \"capacity\": %u,\n"
	       "  \"seconds_per_measurement\": %.2f,\n  \"rounds\": %u,\n"
	       "  \"cpus_online\": %ld,\n"
	       "  \"reference\": \"ring of the same capacity guarded by a "
	       "PTHREAD_PROCESS_SHARED mutex, same run, alternating rounds\",\n"
	       "  \"unit_note\": \"medians of the rounds; best_ratio = best xq "
	       "round / best mutex round; a transfer is one enqueue plus one "
	       "dequeue of the same value\",\n"
	       "  \"goal\": \"procs_1p1c ratio >= 3\",\n",
	       CAPACITY, seconds, ROUNDS, sysconf(_SC_NPROCESSORS_ONLN));
	fflush(stdout);
	compare("single_thread", "pairs_per_s", bench_single, seconds, false);
	compare("procs_1p1c", "transfers_per_s", bench_procs_free, seconds,
		false);
	compare("procs_1p1c_pinned", "transfers_per_s", bench_procs_pinned,
		seconds, false);
	compare("threads_2p2c", "transfers_per_s", bench_threads, seconds,
		true);
	printf("}\n");
	return 0;
}
