/* SPDX-License-Identifier: MIT */
/*
 * xobj thread stress: threads take objects, stamp them with a pattern of
 * their own, verify the stamp before returning them, and try a second put
 * of an object they still hold to be refused only after its first put. The
 * pool is smaller than what the threads want to hold, so exhaustion happens
 * under contention. At the end every object must be back exactly once.
 */
#include "xobj.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 4
#define HELD	 16
#define OBJ_SIZE 200
#ifdef AC_TSAN
#define ITERS 50000
#else
#define ITERS 400000
#endif

struct worker {
	struct xobj_pool *pool;
	unsigned id;
	unsigned long enomem;
	int failed_line;
	pthread_barrier_t *barrier;
};

static uint64_t pattern(unsigned id, uint32_t idx, uint64_t i)
{
	return ((uint64_t)id << 56) ^ ((uint64_t)idx << 20) ^ i;
}

#define FAIL(w)                                                                \
	do {                                                                   \
		(w)->failed_line = __LINE__;                                   \
		return NULL;                                                   \
	} while (0)

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	size_t words = xobj_obj_size(w->pool) / 8;
	uint64_t rnd = 0x2545F4914F6CDD1DULL * (w->id + 1), j;
	uint32_t held[HELD];
	int have[HELD] = {0};
	unsigned i, k;

	pthread_barrier_wait(w->barrier);
	for (i = 0; i < ITERS; i++) {
		uint64_t *o;

		rnd ^= rnd << 13;
		rnd ^= rnd >> 7;
		rnd ^= rnd << 17;
		k = (unsigned)(rnd % HELD);
		if (have[k]) {
			o = xobj_ptr(w->pool, held[k]);
			for (j = 0; j < words; j++)
				if (o[j] != pattern(w->id, held[k], j))
					FAIL(w);
			if (xobj_put(w->pool, held[k]))
				FAIL(w);
			have[k] = 0;
			continue;
		}
		if (xobj_get(w->pool, &held[k])) {
			w->enomem++;
			continue;
		}
		have[k] = 1;
		o = xobj_ptr(w->pool, held[k]);
		if (!o)
			FAIL(w);
		for (j = 0; j < words; j++)
			o[j] = pattern(w->id, held[k], j);
	}
	for (k = 0; k < HELD; k++)
		if (have[k] && xobj_put(w->pool, held[k]))
			FAIL(w);
	return NULL;
}

START_TEST(test_threads)
{
	uint32_t count = NTHREADS * HELD / 4, i, idx;
	size_t size = xobj_pool_size(count, OBJ_SIZE);
	struct xobj_pool *p = aligned_alloc(64, (size + 63) & ~(size_t)63);
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	pthread_barrier_t barrier;
	unsigned long enomem = 0;
	char *seen;

	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(xobj_pool_init(p, count, OBJ_SIZE, size), 0);
	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){.pool = p, .id = i, .barrier = &barrier};
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
	ck_assert_uint_gt(enomem, 0);

	/* Every object back exactly once. */
	ck_assert_uint_eq(xobj_free_count(p), count);
	seen = calloc(count, 1);
	ck_assert_ptr_nonnull(seen);
	for (i = 0; i < count; i++) {
		ck_assert_int_eq(xobj_get(p, &idx), 0);
		ck_assert_uint_lt(idx, count);
		ck_assert_int_eq(seen[idx], 0);
		seen[idx] = 1;
	}
	ck_assert_int_eq(xobj_get(p, &idx), -ENOMEM);
	for (i = 0; i < count; i++)
		ck_assert_int_eq(xobj_put(p, i), 0);
	free(seen);
	free(p);
}
END_TEST

/* Racing puts of the same index: exactly one wins each round. */
struct racer {
	struct xobj_pool *pool;
	uint32_t *slot;
	unsigned *wins;
	pthread_barrier_t *barrier;
};

#define RACE_ROUNDS 2000

static void *racer_main(void *arg)
{
	struct racer *r = arg;
	unsigned round;

	for (round = 0; round < RACE_ROUNDS; round++) {
		int ret;

		pthread_barrier_wait(r->barrier);
		ret = xobj_put(r->pool,
			       __atomic_load_n(r->slot, __ATOMIC_ACQUIRE));
		if (ret == 0)
			__atomic_fetch_add(r->wins, 1, __ATOMIC_RELAXED);
		else if (ret != -EALREADY)
			__atomic_fetch_add(r->wins, 1000000, __ATOMIC_RELAXED);
		pthread_barrier_wait(r->barrier);
	}
	return NULL;
}

START_TEST(test_racing_double_put)
{
	size_t size = xobj_pool_size(4, 64);
	struct xobj_pool *p = aligned_alloc(64, (size + 63) & ~(size_t)63);
	struct racer r[NTHREADS];
	pthread_t th[NTHREADS];
	pthread_barrier_t barrier;
	unsigned wins = 0, i, round;
	uint32_t slot;

	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(xobj_pool_init(p, 4, 64, size), 0);
	pthread_barrier_init(&barrier, NULL, NTHREADS + 1);
	for (i = 0; i < NTHREADS; i++) {
		r[i] = (struct racer){p, &slot, &wins, &barrier};
		ck_assert_int_eq(
		    pthread_create(&th[i], NULL, racer_main, &r[i]), 0);
	}
	for (round = 0; round < RACE_ROUNDS; round++) {
		uint32_t idx;

		ck_assert_int_eq(xobj_get(p, &idx), 0);
		__atomic_store_n(&slot, idx, __ATOMIC_RELEASE);
		pthread_barrier_wait(&barrier); /* go */
		pthread_barrier_wait(&barrier); /* done */
		ck_assert_uint_eq(__atomic_load_n(&wins, __ATOMIC_RELAXED),
				  round + 1);
		ck_assert_uint_eq(xobj_free_count(p), 4);
	}
	for (i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&barrier);
	free(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xobj_stress");
	TCase *tc = tcase_create("threads");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 100);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_racing_double_put);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
