/* SPDX-License-Identifier: MIT */
/*
 * bench_xheap: allocation + free pairs per second of xobj (4 KiB objects)
 * and xheap (4 KiB, mixed sizes 64 B .. 64 KiB, and large sizes 64 KiB ..
 * 4 MiB, which mostly bypass the class caches), with 1 and 2 threads,
 * next to the process allocator (jemalloc when linked, as ac_bench does in
 * non-sanitized builds) running the same pattern in the same run.
 *
 * Pattern per thread: take BATCH buffers, write one byte in each, release
 * them in the order taken; repeat for DURATION seconds. Then the review12 F6
 * scenario on a fresh heap: the arena filled with 4 MiB buffers, all freed,
 * then how many 4 KiB buffers can be allocated (a heap that gives memory
 * back across classes fills the arena again; the session-8 heap could not).
 * The same source builds against the session-start xheap for an old-vs-new
 * comparison. Prints one JSON object.
 * Usage: bench_xheap [seconds per measurement, default 0.5]
 */
#include "xheap.h"
#include "xobj.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "bench_args.h"

#define BATCH	    16
#define NSIZES	    4096
#define HEAP_BYTES  (512ULL << 20)
#define POOL_COUNT  1024u
#define OBJ_BYTES   4096u
#define MAX_THREADS 2
#define F6_BYTES    (64ULL << 20) /* heap of the F6 scenario */

enum target { T_XOBJ, T_XHEAP, T_MALLOC };

struct bench {
	enum target target;
	int mixed;
	unsigned nthreads;
	double seconds;
	struct xheap *heap;
	struct xobj_pool *pool;
	pthread_barrier_t barrier;
	uint64_t pairs[MAX_THREADS];
	double cpu[MAX_THREADS];
	int error;
};

static size_t mixed_sizes[NSIZES];
static size_t large_sizes[NSIZES];

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

struct thread_arg {
	struct bench *b;
	unsigned id;
};

static void *run_thread(void *arg)
{
	struct thread_arg *ta = arg;
	struct bench *b = ta->b;
	volatile char *ptrs[BATCH];
	uint64_t offs[BATCH], pairs = 0;
	uint32_t idx[BATCH];
	unsigned s = ta->id * 977, i;
	double deadline, cpu0;

	pthread_barrier_wait(&b->barrier);
	deadline = now() + b->seconds;
	cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	do {
		for (int rep = 0; rep < 64; rep++) {
			for (i = 0; i < BATCH; i++) {
				size_t sz =
				    b->mixed == 2 ? large_sizes[s++ % NSIZES]
				    : b->mixed	  ? mixed_sizes[s++ % NSIZES]
						  : 4096;

				switch (b->target) {
				case T_XOBJ:
					if (xobj_get(b->pool, &idx[i])) {
						b->error = -ENOMEM;
						return NULL;
					}
					ptrs[i] = xobj_ptr(b->pool, idx[i]);
					break;
				case T_XHEAP:
					if (xheap_alloc(b->heap, sz, &offs[i]) <
					    0) {
						b->error = -ENOMEM;
						return NULL;
					}
					ptrs[i] = xheap_ptr(b->heap, offs[i]);
					break;
				case T_MALLOC:
					ptrs[i] = malloc(sz);
					if (!ptrs[i]) {
						b->error = -ENOMEM;
						return NULL;
					}
					break;
				}
				ptrs[i][0] = (char)i;
			}
			for (i = 0; i < BATCH; i++) {
				switch (b->target) {
				case T_XOBJ:
					xobj_put(b->pool, idx[i]);
					break;
				case T_XHEAP:
					xheap_free(b->heap, offs[i]);
					break;
				case T_MALLOC:
					free((void *)ptrs[i]);
					break;
				}
			}
			pairs += BATCH;
		}
	} while (now() < deadline);
	b->pairs[ta->id] = pairs;
	b->cpu[ta->id] = clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	return NULL;
}

/* Pairs per wall-clock second (and *per_cpu: per second of CPU time the
 * threads got, which is what a shared, loaded machine distorts least), or a
 * negative errno. */
static double measure(struct bench *b, double *per_cpu)
{
	struct thread_arg ta[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	uint64_t total = 0;
	double t0, t1, cpu = 0;
	unsigned i;

	b->error = 0;
	pthread_barrier_init(&b->barrier, NULL, b->nthreads + 1);
	for (i = 0; i < b->nthreads; i++) {
		ta[i] = (struct thread_arg){b, i};
		if (pthread_create(&th[i], NULL, run_thread, &ta[i]))
			return -EAGAIN;
	}
	pthread_barrier_wait(&b->barrier);
	t0 = now();
	for (i = 0; i < b->nthreads; i++)
		pthread_join(th[i], NULL);
	t1 = now();
	pthread_barrier_destroy(&b->barrier);
	if (b->error)
		return b->error;
	for (i = 0; i < b->nthreads; i++) {
		total += b->pairs[i];
		cpu += b->cpu[i];
	}
	*per_cpu = cpu > 0 ? (double)total / cpu : 0;
	return (double)total / (t1 - t0);
}

#define BENCH_XHEAP_USAGE                                                      \
	"usage: bench_xheap [SECONDS]\n"                                       \
	"  SECONDS: length of each measurement (default 0.5)\n"

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		enum target target;
		int mixed;
	} cases[] = {
	    {"xobj_4k", T_XOBJ, 0},	   {"malloc_4k", T_MALLOC, 0},
	    {"xheap_4k", T_XHEAP, 0},	   {"xheap_mixed", T_XHEAP, 1},
	    {"malloc_mixed", T_MALLOC, 1}, {"xheap_large", T_XHEAP, 2},
	    {"malloc_large", T_MALLOC, 2},
	};
	uint64_t n4m = 0, n4k = 0;
	double seconds = 0.5;
	struct bench b = {0};
	size_t pool_bytes = xobj_pool_size(POOL_COUNT, OBJ_BYTES);
	const char *ref = dlsym(RTLD_DEFAULT, "mallctl") ? "jemalloc" : "libc";
	unsigned i, t, seed = 1;
	void *heap_mem, *pool_mem;
	int rc = bench_seconds_args(argc, argv, "bench_xheap",
				    BENCH_XHEAP_USAGE, &seconds);

	if (rc >= 0)
		return rc;
	/* Log-uniform 64 B .. 64 KiB, not all powers of two. */
	for (i = 0; i < NSIZES; i++) {
		unsigned cls;

		seed = seed * 1103515245u + 12345u;
		cls = 6 + (seed >> 16) % 11;
		mixed_sizes[i] = ((size_t)1 << cls) -
				 ((seed >> 8) & (((size_t)1 << (cls - 1)) - 1));
		seed = seed * 1103515245u + 12345u;
		cls = 17 + (seed >> 16) % 6; /* 64 KiB .. 4 MiB */
		large_sizes[i] = ((size_t)1 << cls) -
				 ((seed >> 8) & (((size_t)1 << (cls - 1)) - 1));
	}
	heap_mem = mmap(NULL, HEAP_BYTES, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pool_mem = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (heap_mem == MAP_FAILED || pool_mem == MAP_FAILED ||
	    xheap_init(heap_mem, HEAP_BYTES) ||
	    xobj_pool_init(pool_mem, POOL_COUNT, OBJ_BYTES, pool_bytes)) {
		fprintf(stderr, "bench_xheap: cannot set up heap/pool\n");
		return 1;
	}
	b.heap = heap_mem;
	b.pool = pool_mem;
	b.seconds = seconds;

	printf("{\n  \"benchmark\": \"bench_xheap\",\n");
	printf("  \"unit\": \"alloc+free pairs per second\",\n");
	printf("  \"pattern\": \"per thread: %d allocations (one byte "
	       "written each), then %d frees in the same order\",\n",
	       BATCH, BATCH);
	printf("  \"mixed_sizes\": \"log-uniform 33 B .. 64 KiB\",\n");
	printf("  \"large_sizes\": \"log-uniform 32 KiB .. 4 MiB\",\n");
	printf("  \"reference_allocator\": \"%s\",\n", ref);
	printf("  \"seconds_per_measurement\": %.2f,\n", seconds);
	printf("  \"fields\": \"per_s: pairs per wall-clock second (all "
	       "threads); per_cpu_s: pairs per second of CPU time the threads "
	       "got\",\n");
	printf("  \"results\": {");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (t = 1; t <= MAX_THREADS; t++) {
			double r, per_cpu = 0;

			b.target = cases[i].target;
			b.mixed = cases[i].mixed;
			b.nthreads = t;
			r = measure(&b, &per_cpu);
			printf("%s\n    \"%s_%uthread%s\": ",
			       i || t > 1 ? "," : "", cases[i].name, t,
			       t > 1 ? "s" : "");
			if (r < 0)
				printf("null");
			else
				printf("{\"per_s\": %.0f, \"per_cpu_s\": %.0f}",
				       r, per_cpu);
		}
	}
	printf("\n  },\n");
	/* F6: a fresh heap carved into 4 MiB buffers, all freed. Buffers are
	 * touched only by the heap's own headers. */
	if (xheap_init(heap_mem, F6_BYTES) == 0) {
		static uint64_t offs[1u << 16];

		while (n4m < (1u << 16) &&
		       xheap_alloc(b.heap, 4u << 20, &offs[n4m]) > 0)
			n4m++;
		for (i = 0; i < n4m; i++)
			xheap_free(b.heap, offs[i]);
		while (n4k < (1u << 16) &&
		       xheap_alloc(b.heap, 4096, &offs[n4k]) > 0)
			n4k++;
		for (i = 0; i < n4k; i++)
			xheap_free(b.heap, offs[i]);
	}
	printf("  \"f6_after_4m_burst\": {\"heap_bytes\": %llu, "
	       "\"buffers_4m\": %llu, \"then_buffers_4k\": %llu, "
	       "\"buffers_4k_that_fit_the_arena\": %llu}\n}\n",
	       (unsigned long long)F6_BYTES, (unsigned long long)n4m,
	       (unsigned long long)n4k,
	       (unsigned long long)(F6_BYTES / (4096 + 64)));
	munmap(heap_mem, HEAP_BYTES);
	munmap(pool_mem, pool_bytes);
	return 0;
}
