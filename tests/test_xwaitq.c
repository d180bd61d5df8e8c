/* SPDX-License-Identifier: MIT */
/* xwaitq single-threaded contract: bad input, run-now, queue, signal. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "xwaitq.h"

static int g_tokens; /* __atomic */
static int g_log[32];
static int g_nlog;
static int g_cond_calls;

static bool have_token(void *arg)
{
	(void)arg;
	g_cond_calls++;
	return __atomic_load_n(&g_tokens, __ATOMIC_SEQ_CST) > 0;
}

static void take_and_log(void *arg)
{
	__atomic_sub_fetch(&g_tokens, 1, __ATOMIC_SEQ_CST);
	g_log[g_nlog++] = (int)(long)arg;
}

static void reset(void)
{
	g_tokens = 0;
	g_nlog = 0;
	g_cond_calls = 0;
}

START_TEST(test_bad_input)
{
	struct xwaitq wq;
	struct xwaitq_job job;

	reset();
	ck_assert_int_eq(xwaitq_init(NULL, have_token, NULL), -EINVAL);
	ck_assert_int_eq(xwaitq_init(&wq, NULL, NULL), -EINVAL);
	ck_assert_int_eq(xwaitq_init(&wq, have_token, NULL), 0);
	ck_assert_int_eq(xwaitq_enqueue(NULL, &job, take_and_log, NULL),
			 -EINVAL);
	ck_assert_int_eq(xwaitq_enqueue(&wq, NULL, take_and_log, NULL),
			 -EINVAL);
	ck_assert_int_eq(xwaitq_enqueue(&wq, &job, NULL, NULL), -EINVAL);
	/* Refused before the predicate was even asked. */
	ck_assert_int_eq(g_cond_calls, 0);
	ck_assert_uint_eq(xwaitq_nr_queued(&wq), 0);
	ck_assert_int_eq(xwaitq_destroy(&wq), 0);
}
END_TEST

START_TEST(test_runs_now_when_true)
{
	struct xwaitq wq;
	struct xwaitq_job job;

	reset();
	g_tokens = 1;
	ck_assert_int_eq(xwaitq_init(&wq, have_token, NULL), 0);
	ck_assert_int_eq(xwaitq_enqueue(&wq, &job, take_and_log, (void *)5L),
			 0);
	ck_assert_int_eq(g_nlog, 1);
	ck_assert_int_eq(g_log[0], 5);
	ck_assert_uint_eq(xwaitq_nr_queued(&wq), 0);
	ck_assert_int_eq(xwaitq_destroy(&wq), 0);
}
END_TEST

START_TEST(test_queue_then_signal_fifo)
{
	struct xwaitq wq;
	struct xwaitq_job jobs[4];
	int i;

	reset();
	ck_assert_int_eq(xwaitq_init(&wq, have_token, NULL), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(xwaitq_enqueue(&wq, &jobs[i], take_and_log,
						(void *)(long)i),
				 0);
	ck_assert_int_eq(g_nlog, 0);
	ck_assert_uint_eq(xwaitq_nr_queued(&wq), 4);
	ck_assert_int_eq(xwaitq_destroy(&wq), -EBUSY);
	/* Predicate still false: signal runs nothing. */
	ck_assert_int_eq(xwaitq_signal(&wq), 0);
	ck_assert_uint_eq(xwaitq_nr_queued(&wq), 4);
	/* Two tokens: exactly the two oldest jobs run, in order. */
	__atomic_store_n(&g_tokens, 2, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(xwaitq_signal(&wq), 2);
	ck_assert_int_eq(g_nlog, 2);
	ck_assert_int_eq(g_log[0], 0);
	ck_assert_int_eq(g_log[1], 1);
	ck_assert_uint_eq(xwaitq_nr_queued(&wq), 2);
	__atomic_store_n(&g_tokens, 5, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(xwaitq_signal(&wq), 2);
	ck_assert_int_eq(g_log[2], 2);
	ck_assert_int_eq(g_log[3], 3);
	ck_assert_int_eq(g_tokens, 3);
	/* Empty queue: signal does not even ask the predicate. */
	g_cond_calls = 0;
	ck_assert_int_eq(xwaitq_signal(&wq), 0);
	ck_assert_int_eq(g_cond_calls, 0);
	ck_assert_int_eq(xwaitq_destroy(&wq), 0);
}
END_TEST

/* A job may signal its own queue (it released what others wait for). */
static struct xwaitq g_wq;
static void release_two(void *arg)
{
	g_log[g_nlog++] = (int)(long)arg;
	__atomic_add_fetch(&g_tokens, 2, __ATOMIC_SEQ_CST);
	xwaitq_signal(&g_wq);
}

START_TEST(test_signal_from_job)
{
	struct xwaitq_job jobs[3], releaser;

	reset();
	ck_assert_int_eq(xwaitq_init(&g_wq, have_token, NULL), 0);
	ck_assert_int_eq(
	    xwaitq_enqueue(&g_wq, &jobs[0], take_and_log, (void *)1L), 0);
	ck_assert_int_eq(
	    xwaitq_enqueue(&g_wq, &jobs[1], take_and_log, (void *)2L), 0);
	g_tokens = 1;
	/* Runs at once (a token), then its signal runs the two queued. */
	ck_assert_int_eq(
	    xwaitq_enqueue(&g_wq, &releaser, release_two, (void *)9L), 0);
	ck_assert_int_eq(g_nlog, 3);
	ck_assert_int_eq(g_log[0], 9);
	ck_assert_int_eq(g_log[1], 1);
	ck_assert_int_eq(g_log[2], 2);
	ck_assert_int_eq(g_tokens, 1);
	(void)jobs[2];
	ck_assert_int_eq(xwaitq_destroy(&g_wq), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xwaitq");
	TCase *tc = tcase_create("single");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_runs_now_when_true);
	tcase_add_test(tc, test_queue_then_signal_fifo);
	tcase_add_test(tc, test_signal_from_job);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
