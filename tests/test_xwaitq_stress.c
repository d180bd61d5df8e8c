/* SPDX-License-Identifier: MIT */
/*
 * xwaitq under concurrency.
 * - Lost wake-up race, millions of rounds: one thread enqueues a job whose
 *   predicate is false at the time, while the other makes it true and
 *   signals. Once both calls returned, the job must have run.
 * - Token pool: several threads park jobs that need a token; tokens are
 *   released with a signal; every job must eventually run.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "xwaitq.h"

#if defined(AC_TSAN)
#define RACE_ROUNDS 200000
#define TOKEN_JOBS  5000
#elif defined(__SANITIZE_ADDRESS__)
#define RACE_ROUNDS 1000000
#define TOKEN_JOBS  20000
#else
#define RACE_ROUNDS 2000000
#define TOKEN_JOBS  50000
#endif
#define NR_THREADS 4
#define NR_TOKENS  2

struct spin_barrier {
	unsigned int n;
	unsigned int count;
	unsigned int gen;
};

static void spin_barrier_wait(struct spin_barrier *b)
{
	unsigned int gen = __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
	unsigned int spins = 0;

	if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->n) {
		__atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
		__atomic_add_fetch(&b->gen, 1, __ATOMIC_RELEASE);
		return;
	}
	while (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) == gen)
		if (++spins > 64)
			sched_yield();
}

/* --- lost wake-up race --- */

struct race {
	struct xwaitq wq;
	struct spin_barrier bar;
	long round; /* __atomic: current round, set by the waiter */
	long go;    /* __atomic: last round the signaller released */
	long done;  /* __atomic: last round whose job ran */
	long lost;
	int stop; /* __atomic: the waiter saw a lost job; both threads stop */
	struct xwaitq_job job;
};

static bool race_cond(void *arg)
{
	struct race *r = arg;

	return __atomic_load_n(&r->go, __ATOMIC_SEQ_CST) >=
	       __atomic_load_n(&r->round, __ATOMIC_SEQ_CST);
}

static void race_job(void *arg)
{
	struct race *r = arg;

	__atomic_store_n(&r->done, __atomic_load_n(&r->round, __ATOMIC_SEQ_CST),
			 __ATOMIC_SEQ_CST);
}

static void *race_waiter(void *arg)
{
	struct race *r = arg;
	long i;

	for (i = 1; i <= RACE_ROUNDS; i++) {
		__atomic_store_n(&r->round, i, __ATOMIC_SEQ_CST);
		if (r->lost)
			__atomic_store_n(&r->stop, 1, __ATOMIC_SEQ_CST);
		spin_barrier_wait(&r->bar);
		/* A lost job is still queued: its node cannot be reused. */
		if (__atomic_load_n(&r->stop, __ATOMIC_SEQ_CST))
			break;
		if (xwaitq_enqueue(&r->wq, &r->job, race_job, r) != 0)
			r->lost++;
		spin_barrier_wait(&r->bar);
		/* Both calls returned: nobody else will ever run the job. */
		if (__atomic_load_n(&r->done, __ATOMIC_SEQ_CST) != i)
			r->lost++;
		if (xwaitq_nr_queued(&r->wq) != 0)
			r->lost++;
	}
	return NULL;
}

static void *race_signaller(void *arg)
{
	struct race *r = arg;
	long i;

	for (i = 1; i <= RACE_ROUNDS; i++) {
		spin_barrier_wait(&r->bar);
		if (__atomic_load_n(&r->stop, __ATOMIC_SEQ_CST))
			break;
		__atomic_store_n(&r->go, i, __ATOMIC_SEQ_CST);
		xwaitq_signal(&r->wq);
		spin_barrier_wait(&r->bar);
	}
	return NULL;
}

START_TEST(test_no_lost_wakeup)
{
	static struct race r;
	pthread_t w, s;

	ck_assert_int_eq(xwaitq_init(&r.wq, race_cond, &r), 0);
	r.bar.n = 2;
	ck_assert_int_eq(pthread_create(&w, NULL, race_waiter, &r), 0);
	ck_assert_int_eq(pthread_create(&s, NULL, race_signaller, &r), 0);
	pthread_join(w, NULL);
	pthread_join(s, NULL);
	ck_assert_int_eq(r.lost, 0);
	ck_assert_int_eq(r.done, RACE_ROUNDS);
	ck_assert_int_eq(xwaitq_destroy(&r.wq), 0);
}
END_TEST

/* --- token pool --- */

struct pool {
	struct xwaitq wq;
	int tokens;  /* __atomic */
	long ran;    /* __atomic */
	long errors; /* __atomic */
};

struct token_job {
	struct xwaitq_job job;
	struct pool *p;
	int got; /* __atomic */
};

static bool pool_cond(void *arg)
{
	struct pool *p = arg;

	return __atomic_load_n(&p->tokens, __ATOMIC_SEQ_CST) > 0;
}

static void token_job_fn(void *arg);

static void token_job_fn(void *arg)
{
	struct token_job *tj = arg;
	struct pool *p = tj->p;
	int t = __atomic_load_n(&p->tokens, __ATOMIC_SEQ_CST);

	/* Another job may have taken the token since the check. */
	do {
		if (t <= 0) {
			if (xwaitq_enqueue(&p->wq, &tj->job, token_job_fn, tj))
				__atomic_add_fetch(&p->errors, 1,
						   __ATOMIC_RELAXED);
			return;
		}
	} while (!__atomic_compare_exchange_n(
	    &p->tokens, &t, t - 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	__atomic_add_fetch(&p->ran, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&tj->got, 1, __ATOMIC_SEQ_CST);
}

static void *pool_main(void *arg)
{
	struct pool *p = arg;
	struct token_job tj = {.p = p};
	long i;

	for (i = 0; i < TOKEN_JOBS; i++) {
		__atomic_store_n(&tj.got, 0, __ATOMIC_SEQ_CST);
		if (xwaitq_enqueue(&p->wq, &tj.job, token_job_fn, &tj))
			__atomic_add_fetch(&p->errors, 1, __ATOMIC_RELAXED);
		/*
		 * Wait for our token: a lost wake-up would leave every
		 * thread here for ever and the test would time out.
		 */
		while (!__atomic_load_n(&tj.got, __ATOMIC_SEQ_CST))
			sched_yield();
		__atomic_add_fetch(&p->tokens, 1, __ATOMIC_SEQ_CST);
		xwaitq_signal(&p->wq);
	}
	return NULL;
}

START_TEST(test_token_pool)
{
	static struct pool p;
	pthread_t th[NR_THREADS];
	int i;

	p.tokens = NR_TOKENS;
	ck_assert_int_eq(xwaitq_init(&p.wq, pool_cond, &p), 0);
	for (i = 0; i < NR_THREADS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, pool_main, &p),
				 0);
	for (i = 0; i < NR_THREADS; i++)
		pthread_join(th[i], NULL);
	ck_assert_int_eq(p.errors, 0);
	ck_assert_int_eq(p.ran, (long)NR_THREADS * TOKEN_JOBS);
	ck_assert_int_eq(p.tokens, NR_TOKENS);
	ck_assert_uint_eq(xwaitq_nr_queued(&p.wq), 0);
	ck_assert_int_eq(xwaitq_destroy(&p.wq), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xwaitq_stress");
	TCase *tc = tcase_create("concurrent");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_no_lost_wakeup);
	tcase_add_test(tc, test_token_pool);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
