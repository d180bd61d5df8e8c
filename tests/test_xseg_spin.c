/* SPDX-License-Identifier: MIT */
/*
 * The adaptive spin's back-off policy (xseg.h, "Adaptive spinning") as a
 * pure function: sequences of wait outcomes -> the next wait's spin
 * budget, with no clock and no threads; and the bad-input paths of the
 * *_spin waits. The waits themselves (spins that catch work or never do)
 * are tested by counting in test_xseg_threads.
 */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "xseg.h"
#include "xseg_testutil.h"

#define SPIN_NS 20000ULL

/* A thread whose every spin runs out and whose every sleep is long: what
 * budget does each of n waits get? Returns the number that spun. */
static unsigned run_never_catching(struct xseg_spin *s, unsigned n)
{
	unsigned spun = 0;

	for (unsigned i = 0; i < n; i++) {
		if (xseg_spin_budget(s)) {
			spun++;
			xseg_spin_note(s, XSEG_SPIN_MISSED);
		} else {
			xseg_spin_note(s, XSEG_SPIN_SLEPT_LONG);
		}
	}
	return spun;
}

START_TEST(test_init)
{
	struct xseg_spin s;

	memset(&s, 0xa5, sizeof(s));
	xseg_spin_init(&s, SPIN_NS, true);
	ck_assert_uint_eq(s.max_ns, SPIN_NS);
	ck_assert(s.adaptive);
	ck_assert_uint_eq(s.level, 0);
	ck_assert_uint_eq(s.skip, 0);
	ck_assert_uint_eq(s.waits + s.spins + s.caught + s.missed + s.hinted +
			      s.preempted,
			  0);
	ck_assert(!s.contended && !s.nivcsw_known);
	/* a fresh state spins: nothing has been learnt yet */
	ck_assert_uint_eq(xseg_spin_budget(&s), SPIN_NS);
	xseg_spin_init(&s, 0, true);
	ck_assert_uint_eq(xseg_spin_budget(&s), 0);
}
END_TEST

/* Each miss doubles the waits skipped: 1, 2, 4, ... up to the cap. */
START_TEST(test_miss_doubles_backoff)
{
	struct xseg_spin s;
	unsigned expect = 1;

	xseg_spin_init(&s, SPIN_NS, true);
	for (unsigned round = 0; round < 10; round++) {
		ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_MISSED), 0);
		ck_assert_uint_eq(s.skip, expect);
		for (unsigned i = 1; i < expect; i++)
			ck_assert_uint_eq(
			    xseg_spin_note(&s, XSEG_SPIN_SLEPT_LONG), 0);
		/* the last skipped wait: the next one probes */
		ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_SLEPT_LONG),
				  SPIN_NS);
		if (expect < XSEG_SPIN_SKIP_MAX)
			expect *= 2;
	}
	ck_assert_uint_eq(s.missed, 10);
	ck_assert_uint_eq(s.spins, 10);
	ck_assert_uint_eq(s.caught, 0);
}
END_TEST

/* A catch forgets the back-off: the next miss skips one wait only. */
START_TEST(test_catch_resets)
{
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, true);
	run_never_catching(&s, 500);
	ck_assert_uint_gt(s.level, 0);
	while (!xseg_spin_budget(&s))
		xseg_spin_note(&s, XSEG_SPIN_SLEPT_LONG);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_CAUGHT), SPIN_NS);
	ck_assert_uint_eq(s.level, 0);
	/* catching keeps spinning, however often */
	for (unsigned i = 0; i < 100; i++)
		ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_CAUGHT),
				  SPIN_NS);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_MISSED), 0);
	ck_assert_uint_eq(s.skip, 1);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_SLEPT_LONG), SPIN_NS);
}
END_TEST

/* A never-catching thread ends up spinning once per SKIP_MAX + 1 waits. */
START_TEST(test_never_catching_stops)
{
	struct xseg_spin s;
	unsigned n = 10000, spun;

	xseg_spin_init(&s, SPIN_NS, true);
	spun = run_never_catching(&s, n);
	ck_assert_uint_eq(s.waits, n);
	ck_assert_uint_eq(s.spins, spun);
	ck_assert_uint_eq(s.missed, spun);
	/* 7 misses reach the cap (1+2+...+64 = 127 waits skipped), then one
	 * probe per 65 waits */
	ck_assert_uint_le(spun,
			  7 + (n - 127 - 7) / (XSEG_SPIN_SKIP_MAX + 1) + 1);
	ck_assert_uint_ge(spun, (n - 127) / (XSEG_SPIN_SKIP_MAX + 1));
	/* in the steady state exactly one of any 65 waits in a row spins */
	spun = run_never_catching(&s, XSEG_SPIN_SKIP_MAX + 1);
	ck_assert_uint_eq(spun, 1);
}
END_TEST

/* Fixed (not adaptive): every wait spins, misses or not. */
START_TEST(test_fixed_always_spins)
{
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, false);
	ck_assert_uint_eq(run_never_catching(&s, 1000), 1000);
	ck_assert_uint_eq(s.missed, 1000);
	ck_assert_uint_eq(xseg_spin_budget(&s), SPIN_NS);
}
END_TEST

/* A sleep woken with work within the spin's reach halves what is left of
 * the back-off; long sleeps use it up one by one. */
START_TEST(test_short_sleep_halves)
{
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, true);
	run_never_catching(&s, 1000);
	/* reach the top of a back-off: a miss at the cap */
	while (!xseg_spin_budget(&s))
		xseg_spin_note(&s, XSEG_SPIN_SLEPT_LONG);
	xseg_spin_note(&s, XSEG_SPIN_MISSED);
	ck_assert_uint_eq(s.skip, XSEG_SPIN_SKIP_MAX);
	/* 64 -> 31 -> 15 -> 7 -> 3 -> 1 -> 0 */
	const unsigned left[] = {31, 15, 7, 3, 1, 0};
	for (unsigned i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
		uint64_t b = xseg_spin_note(&s, XSEG_SPIN_SLEPT_SHORT);

		ck_assert_uint_eq(s.skip, left[i]);
		ck_assert_uint_eq(b, left[i] ? 0 : SPIN_NS);
	}
	ck_assert_uint_eq(s.hinted, 6);
	/* the level is kept: a miss now skips the cap again */
	xseg_spin_note(&s, XSEG_SPIN_MISSED);
	ck_assert_uint_eq(s.skip, XSEG_SPIN_SKIP_MAX);
	/* a short sleep while spinning is allowed changes nothing */
	xseg_spin_init(&s, SPIN_NS, true);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_SLEPT_SHORT), SPIN_NS);
	ck_assert_uint_eq(s.level, 0);
}
END_TEST

/* Outcome sequence -> budgets, written out: miss, the skipped wait, a
 * probe that misses, two skipped, a probe that catches, catch. */
START_TEST(test_sequence)
{
	static const struct {
		enum xseg_spin_outcome o;
		uint64_t budget_after;
	} seq[] = {
	    {XSEG_SPIN_MISSED, 0},
	    {XSEG_SPIN_SLEPT_LONG, SPIN_NS},
	    {XSEG_SPIN_MISSED, 0},
	    {XSEG_SPIN_SLEPT_LONG, 0},
	    {XSEG_SPIN_SLEPT_LONG, SPIN_NS},
	    {XSEG_SPIN_CAUGHT, SPIN_NS},
	    {XSEG_SPIN_CAUGHT, SPIN_NS},
	    {XSEG_SPIN_MISSED, 0},
	    {XSEG_SPIN_SLEPT_SHORT, SPIN_NS},
	};
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, true);
	for (unsigned i = 0; i < sizeof(seq) / sizeof(seq[0]); i++)
		ck_assert_msg(xseg_spin_note(&s, seq[i].o) ==
				  seq[i].budget_after,
			      "step %u", i);
	ck_assert_uint_eq(s.waits, 9);
	ck_assert_uint_eq(s.spins, 5);
	ck_assert_uint_eq(s.caught, 2);
	ck_assert_uint_eq(s.missed, 3);
	ck_assert_uint_eq(s.hinted, 1);
}
END_TEST

/* The preemption check: the first count only sets the baseline; a
 * changed count is a lost CPU, an unchanged one is not. */
START_TEST(test_lost_cpu_compares_counts)
{
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, true);
	ck_assert(!xseg_spin_lost_cpu(&s, 7));
	ck_assert(!xseg_spin_lost_cpu(&s, 7));
	ck_assert(xseg_spin_lost_cpu(&s, 8));
	ck_assert(!xseg_spin_lost_cpu(&s, 8));
	ck_assert(xseg_spin_lost_cpu(&s, 11));
	/* the check itself is not an outcome: nothing counted */
	ck_assert_uint_eq(s.waits + s.preempted, 0);
	ck_assert_uint_eq(xseg_spin_budget(&s), SPIN_NS);
}
END_TEST

/* A preemption backs off as a miss does (1, 2, 4 .. waits), and hints do
 * not shorten that back-off (the sleep gave the CPU away: of course the
 * work came soon) until a check finds no new preemption. */
START_TEST(test_preempted_backs_off)
{
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, true);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_PREEMPTED), 0);
	ck_assert_uint_eq(s.skip, 1);
	ck_assert(s.contended);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_SLEPT_SHORT), SPIN_NS);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_PREEMPTED), 0);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_PREEMPTED), 0);
	ck_assert_uint_eq(s.skip, 4);
	/* one wait per hint, not halves: 4 -> 3 -> 2 -> 1 -> 0 */
	for (unsigned left = 3;; left--) {
		uint64_t b = xseg_spin_note(&s, XSEG_SPIN_SLEPT_SHORT);

		ck_assert_uint_eq(s.skip, left);
		ck_assert_uint_eq(b, left ? 0 : SPIN_NS);
		if (!left)
			break;
	}
	ck_assert_uint_eq(s.preempted, 3);
	ck_assert_uint_eq(s.waits, 8);
	ck_assert_uint_eq(s.hinted, 5);
	ck_assert_uint_eq(s.spins + s.missed + s.caught, 0);
	/* the probe's check finds the CPU kept: hints halve again */
	ck_assert(!xseg_spin_lost_cpu(&s, 1));
	ck_assert(!s.contended);
	xseg_spin_note(&s, XSEG_SPIN_MISSED);
	ck_assert_uint_eq(s.skip, 8);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_SLEPT_SHORT), 0);
	ck_assert_uint_eq(s.skip, 3);
	/* a catch ends it all */
	xseg_spin_note(&s, XSEG_SPIN_PREEMPTED);
	ck_assert(s.contended);
	while (!xseg_spin_budget(&s))
		xseg_spin_note(&s, XSEG_SPIN_SLEPT_LONG);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_CAUGHT), SPIN_NS);
	ck_assert(!s.contended);
	ck_assert_uint_eq(s.level, 0);
}
END_TEST

/* A preemption under the fixed policy is counted, and changes nothing:
 * the fixed spin spins at every wait (the waits do not even check). */
START_TEST(test_preempted_fixed_spins_on)
{
	struct xseg_spin s;

	xseg_spin_init(&s, SPIN_NS, false);
	ck_assert_uint_eq(xseg_spin_note(&s, XSEG_SPIN_PREEMPTED), SPIN_NS);
	ck_assert_uint_eq(s.preempted, 1);
	ck_assert_uint_eq(s.skip, 0);
}
END_TEST

/* Bad input to the waits: refused with EINVAL, the state untouched. */
START_TEST(test_bad_input)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg_request *req = NULL;
	struct xseg *seg = NULL;
	struct xseg_spin s, before;

	xseg_config_default(&cfg);
	cfg.size = 8ULL << 20;
	cfg.nr_static_ports = 2;
	cfg.nr_dynamic_ports = 2;
	cfg.nr_requests = 16;
	ck_assert_int_eq(
	    xseg_create(xtu_segname("spin"), &cfg, &seg, err, sizeof(err)), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "t"), 0);
	xseg_spin_init(&s, SPIN_NS, true);
	before = s;
	ck_assert_int_eq(xseg_wait_spin(seg, 1000, 1000, &s), -EINVAL);
	ck_assert_int_eq(xseg_wait_reply_spin(seg, 1000, 1000, &s, &req),
			 -EINVAL);
	ck_assert_int_eq(xseg_wait_reply_spin(seg, 0, 1000, &s, NULL), -EINVAL);
	ck_assert(req == NULL);
	ck_assert_mem_eq(&s, &before, sizeof(s));
	/* timeout 0 only checks: nothing learnt, nothing counted */
	ck_assert_int_eq(xseg_wait_spin(seg, 0, 0, &s), -ETIMEDOUT);
	ck_assert_mem_eq(&s, &before, sizeof(s));
	/* NULL state: sleeps at once, times out */
	ck_assert_int_eq(xseg_wait_spin(seg, 0, 1000, NULL), -ETIMEDOUT);
	xseg_leave(seg);
}
END_TEST

static Suite *spin_suite(void)
{
	Suite *s = suite_create("xseg_spin");
	TCase *tc = tcase_create("policy");

	tcase_add_test(tc, test_init);
	tcase_add_test(tc, test_miss_doubles_backoff);
	tcase_add_test(tc, test_catch_resets);
	tcase_add_test(tc, test_never_catching_stops);
	tcase_add_test(tc, test_fixed_always_spins);
	tcase_add_test(tc, test_short_sleep_halves);
	tcase_add_test(tc, test_sequence);
	tcase_add_test(tc, test_lost_cpu_compares_counts);
	tcase_add_test(tc, test_preempted_backs_off);
	tcase_add_test(tc, test_preempted_fixed_spins_on);
	tcase_add_test(tc, test_bad_input);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	xtu_init();
	return xtu_run_suite(spin_suite());
}
