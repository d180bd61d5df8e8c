/* SPDX-License-Identifier: MIT */
/*
 * xworkq under concurrency: mutual exclusion, per-producer FIFO, no lost
 * job, and the enqueue/leave race (an enqueue that lands just as the
 * executor leaves) checked round by round.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "xworkq.h"

#if defined(AC_TSAN)
#define STRESS_JOBS 20000
#define RACE_ROUNDS 20000
#else
#define STRESS_JOBS 200000
#define RACE_ROUNDS 500000
#endif
#define NR_PRODUCERS 4

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

/* --- mutual exclusion, FIFO per producer, nothing lost --- */

struct stress {
	struct xworkq wq;
	int in_job;		     /* __atomic: detects overlap */
	long executed;		     /* plain: protected by xworkq */
	long last_seq[NR_PRODUCERS]; /* plain: protected by xworkq */
	long violations;	     /* plain: protected by xworkq */
	struct xworkq_job *jobs[NR_PRODUCERS];
	long errors; /* __atomic: failed calls in threads */
};

struct job_arg {
	struct stress *st;
	int producer;
	long seq;
};

static struct job_arg *g_args[NR_PRODUCERS];

static void stress_job(void *p)
{
	struct job_arg *a = p;
	struct stress *st = a->st;

	if (__atomic_exchange_n(&st->in_job, 1, __ATOMIC_ACQUIRE) != 0)
		__atomic_add_fetch(&st->violations, 1, __ATOMIC_RELAXED);
	if (a->seq != st->last_seq[a->producer] + 1)
		st->violations++;
	st->last_seq[a->producer] = a->seq;
	st->executed++;
	__atomic_store_n(&st->in_job, 0, __ATOMIC_RELEASE);
}

struct producer {
	struct stress *st;
	int id;
};

static void *producer_main(void *p)
{
	struct producer *pr = p;
	long i;

	for (i = 0; i < STRESS_JOBS; i++) {
		g_args[pr->id][i] = (struct job_arg){
		    .st = pr->st, .producer = pr->id, .seq = i + 1};
		if (xworkq_enqueue(&pr->st->wq, &pr->st->jobs[pr->id][i],
				   stress_job, &g_args[pr->id][i]) != 0)
			__atomic_add_fetch(&pr->st->errors, 1,
					   __ATOMIC_RELAXED);
	}
	return NULL;
}

START_TEST(test_stress_exclusion_fifo)
{
	static struct stress st;
	struct producer pr[NR_PRODUCERS];
	pthread_t th[NR_PRODUCERS];
	int i;

	xworkq_init(&st.wq);
	for (i = 0; i < NR_PRODUCERS; i++) {
		st.jobs[i] = calloc(STRESS_JOBS, sizeof(struct xworkq_job));
		g_args[i] = calloc(STRESS_JOBS, sizeof(struct job_arg));
		ck_assert(st.jobs[i] && g_args[i]);
		pr[i] = (struct producer){.st = &st, .id = i};
	}
	for (i = 0; i < NR_PRODUCERS; i++)
		ck_assert_int_eq(
		    pthread_create(&th[i], NULL, producer_main, &pr[i]), 0);
	for (i = 0; i < NR_PRODUCERS; i++)
		pthread_join(th[i], NULL);
	/* Every enqueue returned: no executor is left, nothing pending. */
	ck_assert(xworkq_idle(&st.wq));
	ck_assert_int_eq(st.errors, 0);
	ck_assert_int_eq(st.violations, 0);
	ck_assert_int_eq(st.executed, (long)NR_PRODUCERS * STRESS_JOBS);
	for (i = 0; i < NR_PRODUCERS; i++) {
		ck_assert_int_eq(st.last_seq[i], STRESS_JOBS);
		free(st.jobs[i]);
		free(g_args[i]);
	}
	ck_assert_int_eq(xworkq_destroy(&st.wq), 0);
}
END_TEST

/* --- the enqueue/leave race, round by round --- */

struct race {
	struct xworkq wq;
	struct spin_barrier bar;
	long ran[2]; /* __atomic: round number of each thread's last job */
	long lost;
	int work; /* plain: protected by xworkq */
};

struct race_arg {
	struct race *r;
	int id;
	long round;
	struct xworkq_job job;
};

static void race_job(void *p)
{
	struct race_arg *a = p;
	int i;

	/* A little work so that the other enqueue often lands mid-job. */
	for (i = 0; i < (a->round & 7); i++)
		a->r->work++;
	__atomic_store_n(&a->r->ran[a->id], a->round, __ATOMIC_RELEASE);
}

static void *race_main(void *p)
{
	struct race_arg *a = p;
	struct race *r = a->r;
	long round;

	for (round = 1; round <= RACE_ROUNDS; round++) {
		a->round = round;
		spin_barrier_wait(&r->bar);
		if (xworkq_enqueue(&r->wq, &a->job, race_job, a) != 0)
			__atomic_add_fetch(&r->lost, 1, __ATOMIC_RELAXED);
		spin_barrier_wait(&r->bar);
		/*
		 * Both enqueues have returned, so no executor remains: both
		 * jobs of this round must have run.
		 */
		if (__atomic_load_n(&r->ran[a->id ^ 1], __ATOMIC_ACQUIRE) !=
		    round)
			__atomic_add_fetch(&r->lost, 1, __ATOMIC_RELAXED);
		if (!xworkq_idle(&r->wq))
			__atomic_add_fetch(&r->lost, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

START_TEST(test_enqueue_leave_race)
{
	static struct race r;
	struct race_arg a[2] = {{.r = &r, .id = 0}, {.r = &r, .id = 1}};
	pthread_t th[2];
	int i;

	xworkq_init(&r.wq);
	r.bar.n = 2;
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, race_main, &a[i]),
				 0);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	ck_assert_int_eq(r.lost, 0);
	ck_assert_int_eq(r.ran[0], RACE_ROUNDS);
	ck_assert_int_eq(r.ran[1], RACE_ROUNDS);
	ck_assert_int_eq(xworkq_destroy(&r.wq), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xworkq_stress");
	TCase *tc = tcase_create("concurrent");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_stress_exclusion_fifo);
	tcase_add_test(tc, test_enqueue_leave_race);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
