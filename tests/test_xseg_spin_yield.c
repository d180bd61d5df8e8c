/* SPDX-License-Identifier: MIT */
/*
 * The adaptive spin's preemption check against its own yields (xseg.h,
 * "Adaptive spinning"): a spin that yields its CPU is counted by the
 * kernel as switched out involuntarily, but that is the spin giving way
 * on purpose, so the switches counted across each yield must not make
 * the next wait sleep; a preemption anywhere else (between waits, or in
 * the spin before a yield) must. The real scheduler cannot be made to
 * switch at a chosen instant, so the count and the yield go through the
 * test hooks of a private libxseg (xseg_hooked): a fake count that only
 * the test and the fake yield move.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "xseg_internal.h"
#include "xseg_testutil.h"

/* What one yield adds to the count: the switch out and whatever else the
 * kernel counts around it; any number but 0 will do. */
#define YIELD_SWITCHES 3u
/* The spin of the waits, and their timeout: shorter, so every wait is cut
 * by its timeout and never noted as a miss (no back-off: each wait that
 * is not preempted spins, and yields every 20 us meanwhile). */
#define SPIN_NS	   (50ULL * 1000 * 1000)
#define TIMEOUT_NS (20ULL * 1000 * 1000)

static uint64_t fake_count;
static unsigned fake_reads, fake_yields;
/* the read with this number (1-based, 0: none) first adds a preemption:
 * the thread was switched out just before it */
static unsigned preempt_at_read;

static bool fake_nivcsw(uint64_t *n)
{
	if (++fake_reads == preempt_at_read)
		fake_count++;
	*n = fake_count;
	return true;
}

static void fake_yield(void)
{
	fake_yields++;
	fake_count += YIELD_SWITCHES;
}

static struct xseg *seg;

static void setup(void)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;

	xseg_config_default(&cfg);
	cfg.size = 8ULL << 20;
	cfg.nr_static_ports = 2;
	cfg.nr_dynamic_ports = 2;
	cfg.nr_requests = 16;
	ck_assert_int_eq(
	    xseg_create(xtu_segname("spinyield"), &cfg, &seg, err, sizeof(err)),
	    0);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "t"), 0);
	fake_count = 0;
	fake_reads = fake_yields = preempt_at_read = 0;
	xseg_test_nivcsw = fake_nivcsw;
	xseg_test_yield = fake_yield;
}

static void teardown(void)
{
	xseg_test_nivcsw = NULL;
	xseg_test_yield = NULL;
	xseg_test_spin_begin = NULL;
	xseg_leave(seg);
	seg = NULL;
}

/* One wait on the empty port that spins until its timeout; returns the
 * yields it made (0 only if the thread lost the CPU for the whole
 * timeout before its first yield, which the caller retries). */
static unsigned spin_wait(struct xseg_spin *s)
{
	unsigned before = fake_yields;

	ck_assert_int_eq(xseg_wait_spin(seg, 0, TIMEOUT_NS, s), -ETIMEDOUT);
	return fake_yields - before;
}

/* A first wait that yields at least once; its preemption check is the
 * first read, which only learns the count. */
static void first_yielding_wait(struct xseg_spin *s)
{
	for (int tries = 0; tries < 100; tries++) {
		if (spin_wait(s))
			return;
	}
	ck_abort_msg("100 waits of 20 ms spun without one yield");
}

/* The switches counted across the spin's yields are left out: the waits
 * after it spin again, however many yields came before. */
START_TEST(test_yields_are_not_preemptions)
{
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, true);
	first_yielding_wait(&s);
	ck_assert_uint_eq(fake_count, (uint64_t)fake_yields * YIELD_SWITCHES);
	for (int i = 0; i < 3; i++) {
		spin_wait(&s);
		ck_assert_msg(s.preempted == 0,
			      "wait %d after %u yields judged preempted", i + 1,
			      fake_yields);
	}
	/* every wait spun (none was judged preempted or backed off) */
	ck_assert_uint_eq(s.spins, s.waits);
	ck_assert_uint_eq(s.missed, 0);
	ck_assert_uint_eq(s.skip, 0);
}
END_TEST

/* A preemption between two waits makes the next one sleep as soon as its
 * spin has run XSEG_SPIN_CHECK_NS without work (no yield, not counted as
 * a spin), noted as preempted and backed off. */
START_TEST(test_preemption_between_waits)
{
	struct xseg_spin s;
	unsigned yields;
	uint64_t spins;

	xseg_spin_init(&s, SPIN_NS, true);
	first_yielding_wait(&s);
	fake_count++; /* switched out while it worked */
	yields = fake_yields;
	spins = s.spins;
	ck_assert_int_eq(xseg_wait_spin(seg, 0, TIMEOUT_NS, &s), -ETIMEDOUT);
	ck_assert_uint_eq(fake_yields, yields);
	ck_assert_uint_eq(s.spins, spins);
	ck_assert_uint_eq(s.preempted, 1);
	ck_assert(s.contended);
	ck_assert_uint_eq(xseg_spin_budget(&s), 0);
}
END_TEST

/* A preemption in the spin before a yield still counts (only the
 * switches across the yield itself are left out, review19): the next
 * wait sleeps at once. */
START_TEST(test_preemption_before_yield)
{
	struct xseg_spin s;
	uint64_t spins;

	xseg_spin_init(&s, SPIN_NS, true);
	for (int tries = 0;; tries++) {
		ck_assert_int_lt(tries, 100);
		/* the wait's first read is its check; its second, the
		 * count before its first yield, finds a switch since */
		preempt_at_read = fake_reads + 2;
		if (spin_wait(&s))
			break;
		preempt_at_read = 0; /* no yield: no second read */
	}
	spins = s.spins;
	spin_wait(&s);
	ck_assert_uint_eq(s.preempted, 1);
	ck_assert_uint_eq(s.spins, spins);
}
END_TEST

/* A spin that is not cut by its wait's timeout and is judged preempted is
 * noted once, as preempted, not also as a spin that ran out (review21c
 * F2: the other tests' spins are all cut). */
START_TEST(test_preempted_spin_not_also_missed)
{
	struct xseg_spin s;
	uint64_t missed, waits;

	xseg_spin_init(&s, 5ULL * 1000 * 1000, true); /* 5 ms < the timeout */
	/* learns the count, runs out: a miss, so the next wait sleeps */
	ck_assert_int_eq(xseg_wait_spin(seg, 0, TIMEOUT_NS, &s), -ETIMEDOUT);
	ck_assert_uint_eq(s.missed, 1);
	ck_assert_int_eq(xseg_wait_spin(seg, 0, TIMEOUT_NS, &s), -ETIMEDOUT);
	ck_assert_uint_eq(s.skip, 0); /* the back-off is over */
	missed = s.missed;
	waits = s.waits;
	fake_count++; /* switched out while it worked */
	ck_assert_int_eq(xseg_wait_spin(seg, 0, TIMEOUT_NS, &s), -ETIMEDOUT);
	ck_assert_uint_eq(s.preempted, 1);
	ck_assert_uint_eq(s.missed, missed);
	ck_assert_uint_eq(s.waits, waits + 1);
}
END_TEST

/* The spin-begin hook of test_caught_spin_reads_no_count: a request sent
 * to port 0 as the spin starts, before it first looks for work. */
static uint32_t client;
static unsigned submitted;

static void submit_at_spin_begin(void)
{
	struct xseg_request *req;

	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	submitted++;
}

/* A spin that catches work before XSEG_SPIN_CHECK_NS does not read the
 * preemption count: the check (a getrusage system call, about 1.1 us) is
 * not on the path of work that comes at once (session 21; session 19 read
 * it before every spin, a microsecond more per in-process hit at queue
 * depth 1). The work is there at the spin's first look, so no clock is
 * involved. A preemption is still found by the next spin that runs
 * without work (test_preemption_between_waits). */
START_TEST(test_caught_spin_reads_no_count)
{
	struct xseg_request *acc;
	struct xseg_spin s;

	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	xseg_spin_init(&s, SPIN_NS, true);
	first_yielding_wait(&s); /* learns the count */
	submitted = 0;
	xseg_test_spin_begin = submit_at_spin_begin;
	for (int i = 0; i < 3; i++) {
		unsigned reads = fake_reads;

		ck_assert_int_eq(xseg_wait_spin(seg, 0, TIMEOUT_NS, &s), 0);
		ck_assert_uint_eq(submitted, i + 1);
		ck_assert_msg(fake_reads == reads,
			      "wait %d caught its work at once but read the "
			      "count %u time(s)",
			      i + 1, fake_reads - reads);
		ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
		ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
		ck_assert_int_eq(xseg_receive(seg, client, &acc), 0);
		ck_assert_int_eq(xseg_put_request(seg, acc), 0);
	}
	xseg_test_spin_begin = NULL;
	ck_assert_uint_eq(s.caught, 3);
	ck_assert_uint_eq(s.preempted, 0);
}
END_TEST

static Suite *spin_yield_suite(void)
{
	Suite *s = suite_create("xseg_spin_yield");
	TCase *tc = tcase_create("hooked");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_yields_are_not_preemptions);
	tcase_add_test(tc, test_preemption_between_waits);
	tcase_add_test(tc, test_caught_spin_reads_no_count);
	tcase_add_test(tc, test_preempted_spin_not_also_missed);
	tcase_add_test(tc, test_preemption_before_yield);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(spin_yield_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
