/* SPDX-License-Identifier: MIT */
/*
 * xheap thread stress: threads allocate mixed sizes, fill each buffer with a
 * pattern of their own, verify it before freeing, and free. A buffer handed
 * to two owners at once, or reused before its free is visible, breaks a
 * pattern; the heap is then checked structurally.
 */
#include "xheap.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int test_xheap_check(struct xheap *heap, unsigned tolerance);

#define NTHREADS 4
#define HELD	 16
#ifdef AC_TSAN
#define ITERS 50000
#else
#define ITERS 400000
#endif

struct worker {
	struct xheap *heap;
	unsigned id;
	unsigned
	    max_log; /* 0: the small mix; else log-uniform 1 B .. 2^max_log */
	unsigned long enomem;
	int failed_line;
	pthread_barrier_t *barrier;
};

static uint64_t pattern(unsigned id, uint64_t off, uint64_t i)
{
	return ((uint64_t)id << 56) ^ (off * 0x9E3779B97F4A7C15ULL) ^ i;
}

/* Every word of a buffer up to 16 KiB; about 256 words spread over a larger
 * one, the last included (enough to see an overlap, cheap under TSan). */
static uint64_t step_of(uint64_t size)
{
	return size <= 16384 ? 1 : size / 8 / 256;
}

static void fill(struct xheap *h, unsigned id, uint64_t off, uint64_t size)
{
	uint64_t *p = xheap_ptr(h, off), i, step = step_of(size);

	for (i = 0; i < size / 8; i += step)
		p[i] = pattern(id, off, i);
	p[size / 8 - 1] = pattern(id, off, size / 8 - 1);
}

static int verify(struct xheap *h, unsigned id, uint64_t off, uint64_t size)
{
	uint64_t *p = xheap_ptr(h, off), i, step = step_of(size);

	for (i = 0; i < size / 8; i += step)
		if (p[i] != pattern(id, off, i))
			return -1;
	return p[size / 8 - 1] == pattern(id, off, size / 8 - 1) ? 0 : -1;
}

#define FAIL(w)                                                                \
	do {                                                                   \
		(w)->failed_line = __LINE__;                                   \
		return NULL;                                                   \
	} while (0)

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t offs[HELD], rnd = 0x2545F4914F6CDD1DULL * (w->id + 1);
	int64_t sizes[HELD] = {0};
	unsigned i, k;

	pthread_barrier_wait(w->barrier);
	for (i = 0; i < ITERS; i++) {
		rnd ^= rnd << 13;
		rnd ^= rnd >> 7;
		rnd ^= rnd << 17;
		k = (unsigned)(rnd % HELD);
		if (sizes[k]) {
			if (xheap_usable_size(w->heap, offs[k]) != sizes[k])
				FAIL(w);
			if (verify(w->heap, w->id, offs[k], (uint64_t)sizes[k]))
				FAIL(w);
			if (xheap_free(w->heap, offs[k]))
				FAIL(w);
			sizes[k] = 0;
		} else {
			/* Mostly small, sometimes up to 16 KiB. */
			size_t sz = (rnd >> 20) % 8 ? 1 + (rnd >> 24) % 1024
						    : 1 + (rnd >> 24) % 16384;
			int64_t r;

			if (w->max_log)
				sz =
				    1 + (size_t)((rnd >> 32) &
						 ((1ULL << ((rnd >> 24) %
							    (w->max_log + 1))) -
						  1));
			r = xheap_alloc(w->heap, sz, &offs[k]);

			if (r == -ENOMEM) {
				w->enomem++;
				continue;
			}
			if (r < (int64_t)sz || offs[k] % 64)
				FAIL(w);
			sizes[k] = r;
			fill(w->heap, w->id, offs[k], (uint64_t)r);
		}
	}
	for (k = 0; k < HELD; k++) {
		if (!sizes[k])
			continue;
		if (verify(w->heap, w->id, offs[k], (uint64_t)sizes[k]))
			FAIL(w);
		if (xheap_free(w->heap, offs[k]))
			FAIL(w);
	}
	return NULL;
}

static void run(size_t heap_size, int expect_enomem, unsigned max_log)
{
	struct xheap *h = aligned_alloc(64, heap_size);
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	pthread_barrier_t barrier;
	struct xheap_stats st;
	unsigned long enomem = 0;
	unsigned i;

	ck_assert_ptr_nonnull(h);
	ck_assert_int_eq(xheap_init(h, heap_size), 0);
	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){.heap = h,
				       .id = i,
				       .max_log = max_log,
				       .barrier = &barrier};
		ck_assert_int_eq(
		    pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
		ck_assert_msg(w[i].failed_line == 0, "worker %u failed at %d",
			      i, w[i].failed_line);
		enomem += w[i].enomem;
	}
	pthread_barrier_destroy(&barrier);
	xheap_stats(h, &st);
	ck_assert_uint_eq(st.allocated_bytes, 0);
	ck_assert_uint_le(st.carved_bytes, st.arena_bytes);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	if (expect_enomem)
		ck_assert_uint_gt(enomem, 0);
	if (max_log) {
		/* Everything freed, merged across classes by the threads:
		 * one buffer of 2^max_log, as big as the arena, fits. */
		uint64_t off;

		ck_assert_int_eq(xheap_alloc(h, (size_t)1 << max_log, &off),
				 (int64_t)1 << max_log);
		ck_assert_int_eq(xheap_free(h, off), 0);
		ck_assert_int_eq(xheap_verify(h), 0);
	}
	free(h);
}

START_TEST(test_threads_roomy)
{
	run(64 << 20, 0, 0);
}
END_TEST

/* A heap too small for everyone: exhaustion under contention must refuse
 * cleanly and leave a consistent heap. */
START_TEST(test_threads_exhausting)
{
	run(96 << 10, 1, 0);
}
END_TEST

/* Sizes from 1 B to 2 MiB in a heap of 2 MiB + 4 KiB: most frees go to the
 * general allocator and merge under its mutex while other threads pop and
 * push the class caches; patterns catch a buffer handed out twice, and at
 * the end the whole arena is one free range again. */
START_TEST(test_threads_merging)
{
	run((2 << 20) + 4096, 1, 21);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xheap_stress");
	TCase *tc = tcase_create("threads");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 100);
	tcase_add_test(tc, test_threads_roomy);
	tcase_add_test(tc, test_threads_exhausting);
	tcase_add_test(tc, test_threads_merging);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
