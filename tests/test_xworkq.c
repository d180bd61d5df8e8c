/* SPDX-License-Identifier: MIT */
/* xworkq single-threaded contract: bad input, FIFO, re-entrant enqueue. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "xworkq.h"

struct log {
	int seq[64];
	int n;
};

static struct log g_log;
static struct xworkq g_wq;
static struct xworkq_job g_jobs[8];

static void record(void *arg)
{
	g_log.seq[g_log.n++] = (int)(long)arg;
}

START_TEST(test_bad_input)
{
	struct xworkq wq;
	struct xworkq_job job;

	xworkq_init(&wq);
	ck_assert_int_eq(xworkq_enqueue(NULL, &job, record, NULL), -EINVAL);
	ck_assert_int_eq(xworkq_enqueue(&wq, NULL, record, NULL), -EINVAL);
	ck_assert_int_eq(xworkq_enqueue(&wq, &job, NULL, NULL), -EINVAL);
	ck_assert(xworkq_idle(&wq));
	ck_assert_int_eq(xworkq_destroy(&wq), 0);
}
END_TEST

START_TEST(test_runs_inline_when_idle)
{
	struct xworkq wq;
	struct xworkq_job job;

	g_log.n = 0;
	xworkq_init(&wq);
	ck_assert_int_eq(xworkq_enqueue(&wq, &job, record, (void *)7L), 0);
	ck_assert_int_eq(g_log.n, 1);
	ck_assert_int_eq(g_log.seq[0], 7);
	ck_assert(xworkq_idle(&wq));
	ck_assert_int_eq(xworkq_destroy(&wq), 0);
}
END_TEST

/*
 * A job that enqueues more jobs on its own queue: they must run after it
 * returns (no recursion), in FIFO order, by the same executor.
 */
static void spawner(void *arg)
{
	int i;

	(void)arg;
	g_log.seq[g_log.n++] = 0;
	for (i = 1; i <= 3; i++)
		ck_assert_int_eq(
		    xworkq_enqueue(&g_wq, &g_jobs[i], record, (void *)(long)i),
		    0);
	/* Nothing ran yet: we are the executor, still inside job 0. */
	ck_assert_int_eq(g_log.n, 1);
	ck_assert(!xworkq_idle(&g_wq));
	ck_assert_int_eq(xworkq_destroy(&g_wq), -EBUSY);
}

START_TEST(test_fifo_reentrant)
{
	int i;

	g_log.n = 0;
	xworkq_init(&g_wq);
	ck_assert_int_eq(xworkq_enqueue(&g_wq, &g_jobs[0], spawner, NULL), 0);
	ck_assert_int_eq(g_log.n, 4);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(g_log.seq[i], i);
	ck_assert(xworkq_idle(&g_wq));
	ck_assert_int_eq(xworkq_destroy(&g_wq), 0);
}
END_TEST

/* A job may reuse its own node at once (re-enqueue itself). */
static int g_rounds;
static void self_requeue(void *arg)
{
	struct xworkq_job *job = arg;

	g_log.seq[g_log.n++] = g_rounds;
	if (++g_rounds < 5)
		ck_assert_int_eq(xworkq_enqueue(&g_wq, job, self_requeue, job),
				 0);
}

START_TEST(test_node_reuse_from_job)
{
	g_log.n = 0;
	g_rounds = 0;
	xworkq_init(&g_wq);
	ck_assert_int_eq(
	    xworkq_enqueue(&g_wq, &g_jobs[0], self_requeue, &g_jobs[0]), 0);
	ck_assert_int_eq(g_log.n, 5);
	ck_assert_int_eq(g_log.seq[4], 4);
	ck_assert_int_eq(xworkq_destroy(&g_wq), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xworkq");
	TCase *tc = tcase_create("single");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_runs_inline_when_idle);
	tcase_add_test(tc, test_fifo_reentrant);
	tcase_add_test(tc, test_node_reuse_from_job);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
