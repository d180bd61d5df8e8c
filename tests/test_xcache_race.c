/* SPDX-License-Identifier: MIT */
/*
 * xcache: a lock-free hit whose reader is preempted between the hash-table
 * find and the reference increment, while the entry is evicted and kept
 * alive by its on_finalize. The reader must not come back with the evicted
 * entry as a plain hit: it must re-insert it (on_reinsert runs) so that a
 * user like cached learns the entry has a new user (review finding R1: an
 * acknowledged write-back write was dropped this way). Built with xcache.c
 * compiled with XCACHE_TEST_HOOKS, which replays the preemption at that
 * exact point.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "xcache.h"

extern void (*xcache_test_after_find)(struct xcache *c, struct xcache_entry *e);

static struct xcache_entry *g_kept; /* the reference on_finalize took */
static int g_reinserts, g_finalizes;

static bool h_finalize(void *cp, struct xcache_entry *e)
{
	(void)cp;
	g_finalizes++;
	if (g_kept)
		return false; /* the second time: let it go */
	xcache_get(e);
	g_kept = e;
	return true;
}

static void h_reinsert(void *cp, struct xcache_entry *e)
{
	(void)cp;
	(void)e;
	g_reinserts++;
}

static const struct xcache_ops ops = {
    .on_finalize = h_finalize,
    .on_reinsert = h_reinsert,
};

/* The "preemption": another thread inserts a name and evicts the one the
 * reader has just found (capacity 1). Runs once. */
static void evict_under_reader(struct xcache *c, struct xcache_entry *e)
{
	struct xcache_entry *b;

	(void)e;
	xcache_test_after_find = NULL;
	ck_assert_int_eq(xcache_insert(c, "b", &b, NULL), 0);
	ck_assert_int_eq(xcache_put(c, b), 0);
}

static struct xcache *setup(struct xcache_entry **a)
{
	struct xcache_config cfg = {.capacity = 1, .nr_nodes = 4, .ops = &ops};
	struct xcache *c;

	g_kept = NULL;
	g_reinserts = g_finalizes = 0;
	ck_assert_int_eq(xcache_create(&cfg, &c), 0);
	ck_assert_int_eq(xcache_insert(c, "a", a, NULL), 0);
	ck_assert_int_eq(xcache_put(c, *a), 0); /* only the cache holds it */
	return c;
}

START_TEST(insert_reinserts_entry_evicted_under_reader)
{
	struct xcache_entry *a, *got;
	enum xcache_insert_how how;
	struct xcache *c = setup(&a);

	xcache_test_after_find = evict_under_reader;
	ck_assert_int_eq(xcache_insert(c, "a", &got, &how), 0);
	ck_assert_ptr_eq(g_kept, a); /* it was evicted and kept meanwhile */
	ck_assert_ptr_eq(got, a);    /* the same entry comes back ... */
	ck_assert_int_eq(how, XCACHE_REINSERTED); /* ... re-inserted */
	ck_assert_int_eq(g_reinserts, 1);
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_ACTIVE);
	/* ours, the cache's, on_finalize's */
	ck_assert_uint_eq(xcache_entry_refcount(a), 3);
	ck_assert_int_eq(xcache_put(c, a), 0);
	ck_assert_int_eq(xcache_put(c, g_kept), 0);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(lookup_misses_entry_evicted_under_reader)
{
	struct xcache_entry *a, *got = NULL;
	struct xcache *c = setup(&a);

	xcache_test_after_find = evict_under_reader;
	ck_assert_int_eq(xcache_lookup(c, "a", &got), -ENOENT);
	ck_assert_ptr_null(got);
	ck_assert_ptr_eq(g_kept, a);
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_EVICTED);
	/* the reader's increment was given back: only on_finalize's */
	ck_assert_uint_eq(xcache_entry_refcount(a), 1);
	ck_assert_int_eq(g_reinserts, 0);
	ck_assert_int_eq(xcache_put(c, g_kept), 0); /* released now */
	ck_assert_int_eq(g_finalizes, 2);
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_FREE);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xcache_race");
	TCase *tc = tcase_create("preempted_hit");
	SRunner *sr;
	int failed;

	xcache_thread_register();
	tcase_add_test(tc, insert_reinserts_entry_evicted_under_reader);
	tcase_add_test(tc, lookup_misses_entry_evicted_under_reader);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	xcache_thread_unregister();
	return failed ? 1 : 0;
}
