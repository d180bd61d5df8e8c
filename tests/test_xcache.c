/* SPDX-License-Identifier: MIT */
/*
 * xcache single-threaded contract: every API path, every bad input, and
 * the order of hook calls (recorded in a log and compared).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xcache.h"

#define LOG_MAX 256

static char g_log[LOG_MAX][XCACHE_NAME_MAX + 16];
static int g_nlog;
static int g_node_inits;
static int g_fail_node_init = -1; /* index whose on_node_init fails */
static int g_fail_init;		  /* on_init fails while set */
static int g_keep;		  /* on_finalize keeps this many times */
static struct xcache_entry *g_kept;
static struct xcache *g_cache;	   /* for hooks that call back in */
static int g_put_in_finalize;	   /* keep, then drop at once */
static int g_reinsert_in_finalize; /* re-insert the name from the hook */
static struct xcache_entry *g_reinserted;
static int g_priv[64];

static void log_event(const char *ev, struct xcache_entry *e)
{
	ck_assert_int_lt(g_nlog, LOG_MAX);
	snprintf(g_log[g_nlog++], sizeof(g_log[0]), "%s:%s", ev,
		 xcache_entry_name(e));
}

static void expect_log(const char *const *exp, int n)
{
	int i;

	for (i = 0; i < n && i < g_nlog; i++)
		ck_assert_str_eq(g_log[i], exp[i]);
	ck_assert_int_eq(g_nlog, n);
	g_nlog = 0;
}

#define EXPECT(...)                                                            \
	do {                                                                   \
		const char *const _exp[] = {__VA_ARGS__};                      \
		expect_log(_exp, (int)(sizeof(_exp) / sizeof(_exp[0])));       \
	} while (0)
#define EXPECT_NONE() ck_assert_int_eq(g_nlog, 0)

static int h_node_init(void *cp, uint32_t index, void **priv)
{
	(void)cp;
	g_node_inits++;
	if ((int)index == g_fail_node_init)
		return -EIO;
	*priv = index < 64 ? &g_priv[index] : NULL;
	return 0;
}

static int h_init(void *cp, struct xcache_entry *e)
{
	(void)cp;
	log_event("init", e);
	return g_fail_init ? -EIO : 0;
}

static void h_evict(void *cp, struct xcache_entry *e)
{
	(void)cp;
	log_event("evict", e);
}

static void h_post_evict(void *cp, struct xcache_entry *e)
{
	(void)cp;
	log_event("post_evict", e);
}

static void h_reinsert(void *cp, struct xcache_entry *e)
{
	(void)cp;
	log_event("reinsert", e);
}

static bool h_finalize(void *cp, struct xcache_entry *e)
{
	(void)cp;
	log_event("finalize", e);
	if (g_put_in_finalize) {
		/* Keep it, and the "flush" completes before we return. */
		g_put_in_finalize = 0;
		xcache_get(e);
		ck_assert_int_eq(xcache_put(g_cache, e), 0);
		return true;
	}
	if (g_reinsert_in_finalize) {
		enum xcache_insert_how how;

		g_reinsert_in_finalize = 0;
		ck_assert_int_eq(xcache_insert(g_cache, xcache_entry_name(e),
					       &g_reinserted, &how),
				 0);
		ck_assert_int_eq(how, XCACHE_REINSERTED);
		ck_assert_ptr_eq(g_reinserted, e);
		return false; /* ignored: the entry is active again */
	}
	if (g_keep > 0) {
		g_keep--;
		xcache_get(e);
		g_kept = e;
		return true;
	}
	return false;
}

static void h_put(void *cp, struct xcache_entry *e)
{
	(void)cp;
	log_event("put", e);
}

static void h_free(void *cp, struct xcache_entry *e)
{
	(void)cp;
	log_event("free", e);
}

static const struct xcache_ops g_ops = {
    .on_node_init = h_node_init,
    .on_init = h_init,
    .on_evict = h_evict,
    .post_evict = h_post_evict,
    .on_reinsert = h_reinsert,
    .on_finalize = h_finalize,
    .on_put = h_put,
    .on_free = h_free,
};

static void setup(void)
{
	xcache_thread_register();
	g_nlog = 0;
	g_node_inits = 0;
	g_fail_node_init = -1;
	g_fail_init = 0;
	g_keep = 0;
	g_kept = NULL;
	g_cache = NULL;
	g_put_in_finalize = 0;
	g_reinsert_in_finalize = 0;
	g_reinserted = NULL;
}

static void teardown(void)
{
	xcache_thread_unregister();
}

static struct xcache *mk(uint32_t capacity, uint32_t nr_nodes)
{
	struct xcache_config cfg = {
	    .capacity = capacity, .nr_nodes = nr_nodes, .ops = &g_ops};
	struct xcache *c = NULL;

	ck_assert_int_eq(xcache_create(&cfg, &c), 0);
	ck_assert_ptr_nonnull(c);
	return c;
}

/* Insert name, expect how, return the entry (caller holds a reference). */
static struct xcache_entry *ins(struct xcache *c, const char *name,
				enum xcache_insert_how want)
{
	struct xcache_entry *e = NULL;
	enum xcache_insert_how how = 0;

	ck_assert_int_eq(xcache_insert(c, name, &e, &how), 0);
	ck_assert_int_eq(how, want);
	ck_assert_str_eq(xcache_entry_name(e), name);
	return e;
}

static void st(struct xcache *c, struct xcache_stats *s)
{
	memset(s, 0, sizeof(*s));
	xcache_get_stats(c, s);
}

static void assert_same_stats(const struct xcache_stats *a,
			      const struct xcache_stats *b)
{
	ck_assert_int_eq(memcmp(a, b, sizeof(*a)), 0);
}

START_TEST(test_create_bad_input)
{
	struct xcache_config cfg = {.capacity = 4, .ops = &g_ops};
	struct xcache *c = (struct xcache *)0x1;

	ck_assert_int_eq(xcache_create(NULL, &c), -EINVAL);
	ck_assert_int_eq(xcache_create(&cfg, NULL), -EINVAL);
	cfg.capacity = 0;
	ck_assert_int_eq(xcache_create(&cfg, &c), -EINVAL);
	cfg.capacity = 4;
	cfg.nr_nodes = 4;
	ck_assert_int_eq(xcache_create(&cfg, &c), -EINVAL);
	cfg.nr_nodes = 3;
	ck_assert_int_eq(xcache_create(&cfg, &c), -EINVAL);
	ck_assert_int_eq(g_node_inits, 0);
	cfg.nr_nodes = 0;
	g_fail_node_init = 5;
	ck_assert_int_eq(xcache_create(&cfg, &c), -EIO);
	ck_assert_int_eq(g_node_inits, 6);
	ck_assert_ptr_eq(c, (struct xcache *)0x1);
	ck_assert_int_eq(xcache_destroy(NULL), -EINVAL);
}
END_TEST

START_TEST(test_node_init_and_stats)
{
	struct xcache *c = mk(4, 0);
	struct xcache_stats s;
	uint32_t i;

	ck_assert_int_eq(g_node_inits, 8);
	for (i = 0; i < 8; i++) {
		struct xcache_entry *e = xcache_node(c, i);

		ck_assert_ptr_nonnull(e);
		ck_assert_uint_eq(xcache_entry_index(e), i);
		ck_assert_ptr_eq(xcache_entry_priv(e), &g_priv[i]);
		ck_assert_int_eq(xcache_entry_state(e), XCACHE_FREE);
		ck_assert_uint_eq(xcache_entry_refcount(e), 0);
	}
	ck_assert_ptr_null(xcache_node(c, 8));
	ck_assert_ptr_null(xcache_node(NULL, 0));
	st(c, &s);
	ck_assert_uint_eq(s.capacity, 4);
	ck_assert_uint_eq(s.nr_nodes, 8);
	ck_assert_uint_eq(s.nr_free, 8);
	ck_assert_uint_eq(s.nr_active, 0);
	EXPECT_NONE();
	ck_assert_int_eq(xcache_destroy(c), 0);
	EXPECT_NONE();
}
END_TEST

START_TEST(test_name_validation)
{
	struct xcache *c = mk(4, 0);
	struct xcache_entry *e = NULL;
	struct xcache_stats before, after;
	char longname[XCACHE_NAME_MAX + 2];

	st(c, &before);
	memset(longname, 'n', sizeof(longname));
	longname[XCACHE_NAME_MAX + 1] = '\0'; /* 256 bytes */
	ck_assert_int_eq(xcache_lookup(c, NULL, &e), -EINVAL);
	ck_assert_int_eq(xcache_lookup(c, "", &e), -EINVAL);
	ck_assert_int_eq(xcache_lookup(c, longname, &e), -ENAMETOOLONG);
	ck_assert_int_eq(xcache_lookup(NULL, "a", &e), -EINVAL);
	ck_assert_int_eq(xcache_lookup(c, "a", NULL), -EINVAL);
	ck_assert_int_eq(xcache_insert(c, NULL, &e, NULL), -EINVAL);
	ck_assert_int_eq(xcache_insert(c, "", &e, NULL), -EINVAL);
	ck_assert_int_eq(xcache_insert(c, longname, &e, NULL), -ENAMETOOLONG);
	ck_assert_int_eq(xcache_insert(NULL, "a", &e, NULL), -EINVAL);
	ck_assert_int_eq(xcache_insert(c, "a", NULL, NULL), -EINVAL);
	ck_assert_int_eq(xcache_invalidate(c, NULL), -EINVAL);
	ck_assert_int_eq(xcache_invalidate(c, ""), -EINVAL);
	ck_assert_int_eq(xcache_invalidate(c, longname), -ENAMETOOLONG);
	ck_assert_int_eq(xcache_invalidate(NULL, "a"), -EINVAL);
	ck_assert_ptr_null(e);
	EXPECT_NONE();
	st(c, &after);
	assert_same_stats(&before, &after);

	/* 255 bytes is the longest name. */
	longname[XCACHE_NAME_MAX] = '\0';
	e = ins(c, longname, XCACHE_INSERTED);
	{
		char exp[sizeof(g_log[0])];

		snprintf(exp, sizeof(exp), "init:%s", longname);
		ck_assert_int_eq(g_nlog, 1);
		ck_assert_str_eq(g_log[0], exp);
		g_nlog = 0;
	}
	ck_assert_uint_eq(strlen(xcache_entry_name(e)), XCACHE_NAME_MAX);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_refcounts_and_bad_puts)
{
	struct xcache *c = mk(4, 0);
	struct xcache_entry *e, *l = NULL;
	struct xcache_stats before, after;

	ck_assert_int_eq(xcache_lookup(c, "a", &l), -ENOENT);
	ck_assert_ptr_null(l);
	e = ins(c, "a", XCACHE_INSERTED);
	EXPECT("init:a");
	ck_assert_int_eq(xcache_entry_state(e), XCACHE_ACTIVE);
	ck_assert_uint_eq(xcache_entry_refcount(e), 2); /* cache + caller */
	ck_assert_int_eq(xcache_lookup(c, "a", &l), 0);
	ck_assert_ptr_eq(l, e);
	ck_assert_uint_eq(xcache_entry_refcount(e), 3);
	ck_assert_ptr_eq(ins(c, "a", XCACHE_FOUND), e);
	ck_assert_uint_eq(xcache_entry_refcount(e), 4);
	EXPECT_NONE();
	xcache_get(e);
	ck_assert_uint_eq(xcache_entry_refcount(e), 5);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_uint_eq(xcache_entry_refcount(e), 1); /* the cache's */

	/* Over-put of an active entry: refused, nothing changes. */
	st(c, &before);
	ck_assert_int_eq(xcache_put(c, e), -EINVAL);
	ck_assert_uint_eq(xcache_entry_refcount(e), 1);
	ck_assert_int_eq(xcache_entry_state(e), XCACHE_ACTIVE);
	ck_assert_int_eq(xcache_put(NULL, e), -EINVAL);
	ck_assert_int_eq(xcache_put(c, NULL), -EINVAL);
	/* Put of a free pool node (no reference at all): refused. */
	ck_assert_int_eq(xcache_put(c, xcache_node(c, 7)), -EINVAL);
	st(c, &after);
	assert_same_stats(&before, &after);
	EXPECT_NONE();
	ck_assert_int_eq(xcache_destroy(c), 0);
	EXPECT("put:a", "free:a");
}
END_TEST

START_TEST(test_implicit_eviction_lru_order)
{
	struct xcache *c = mk(2, 0);
	struct xcache_stats s;

	ck_assert_int_eq(xcache_put(c, ins(c, "a", XCACHE_INSERTED)), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "b", XCACHE_INSERTED)), 0);
	EXPECT("init:a", "init:b");
	/* Full: c evicts the least recently inserted, a. */
	ck_assert_int_eq(xcache_put(c, ins(c, "c", XCACHE_INSERTED)), 0);
	EXPECT("init:c", "evict:a", "post_evict:a", "finalize:a", "put:a",
	       "free:a");
	ck_assert_int_eq(xcache_put(c, ins(c, "d", XCACHE_INSERTED)), 0);
	EXPECT("init:d", "evict:b", "post_evict:b", "finalize:b", "put:b",
	       "free:b");
	st(c, &s);
	ck_assert_uint_eq(s.nr_active, 2);
	ck_assert_uint_eq(s.nr_evicted, 0);
	ck_assert_uint_eq(s.evictions, 2);
	ck_assert_uint_eq(s.releases, 2);
	ck_assert_uint_eq(s.nr_free + s.nr_limbo, 2);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_clock_second_chance)
{
	struct xcache *c = mk(3, 0);
	struct xcache_entry *e;

	ck_assert_int_eq(xcache_put(c, ins(c, "a", XCACHE_INSERTED)), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "b", XCACHE_INSERTED)), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "c", XCACHE_INSERTED)), 0);
	g_nlog = 0;
	/* A hit on a (the LRU) gives it a second chance: b goes instead. */
	ck_assert_int_eq(xcache_lookup(c, "a", &e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "d", XCACHE_INSERTED)), 0);
	EXPECT("init:d", "evict:b", "post_evict:b", "finalize:b", "put:b",
	       "free:b");
	/* a's chance is used up: with c and d touched, a goes next. */
	xcache_touch(e = ins(c, "c", XCACHE_FOUND));
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "d", XCACHE_FOUND)), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "e", XCACHE_INSERTED)), 0);
	EXPECT("init:e", "evict:a", "post_evict:a", "finalize:a", "put:a",
	       "free:a");
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_evicted_referenced_and_reinsert)
{
	struct xcache *c = mk(1, 4);
	struct xcache_entry *a, *b, *l;
	struct xcache_stats s;

	a = ins(c, "a", XCACHE_INSERTED);
	b = ins(c, "b", XCACHE_INSERTED);
	/* a is still referenced: evicted but not finalized. */
	EXPECT("init:a", "init:b", "evict:a", "post_evict:a");
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_EVICTED);
	ck_assert_uint_eq(xcache_entry_refcount(a), 1);
	st(c, &s);
	ck_assert_uint_eq(s.nr_active, 1);
	ck_assert_uint_eq(s.nr_evicted, 1);
	/* Lookups see only active entries. */
	ck_assert_int_eq(xcache_lookup(c, "a", &l), -ENOENT);
	/* Re-insertion brings back the same entry, evicting b. */
	ck_assert_ptr_eq(ins(c, "a", XCACHE_REINSERTED), a);
	EXPECT("evict:b", "reinsert:a", "post_evict:b");
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_ACTIVE);
	ck_assert_uint_eq(xcache_entry_refcount(a), 3);
	ck_assert_int_eq(xcache_entry_state(b), XCACHE_EVICTED);
	/* b's last reference: finalized and released. */
	ck_assert_int_eq(xcache_put(c, b), 0);
	EXPECT("finalize:b", "put:b", "free:b");
	ck_assert_int_eq(xcache_entry_state(b), XCACHE_FREE);
	ck_assert_int_eq(xcache_put(c, a), 0);
	ck_assert_int_eq(xcache_put(c, a), 0);
	ck_assert_uint_eq(xcache_entry_refcount(a), 1);
	st(c, &s);
	ck_assert_uint_eq(s.reinsertions, 1);
	ck_assert_uint_eq(s.nr_evicted, 0);
	ck_assert_int_eq(xcache_lookup(c, "a", &l), 0);
	ck_assert_ptr_eq(l, a);
	ck_assert_int_eq(xcache_put(c, l), 0);
	EXPECT_NONE();
	ck_assert_int_eq(xcache_destroy(c), 0);
	EXPECT("put:a", "free:a");
}
END_TEST

START_TEST(test_finalize_keeps_alive)
{
	struct xcache *c = mk(1, 4);
	struct xcache_entry *a;

	ck_assert_int_eq(xcache_put(c, ins(c, "a", XCACHE_INSERTED)), 0);
	g_nlog = 0;
	g_keep = 1; /* like cached with dirty data: keep a to flush it */
	ck_assert_int_eq(xcache_put(c, ins(c, "b", XCACHE_INSERTED)), 0);
	EXPECT("init:b", "evict:a", "post_evict:a", "finalize:a");
	a = g_kept;
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_EVICTED);
	ck_assert_uint_eq(xcache_entry_refcount(a), 1);
	/* The "flush" completes: the hook is asked again, lets it go. */
	ck_assert_int_eq(xcache_put(c, a), 0);
	EXPECT("finalize:a", "put:a", "free:a");
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_finalize_kept_then_reinserted)
{
	struct xcache *c = mk(1, 4);
	struct xcache_entry *a;

	ck_assert_int_eq(xcache_put(c, ins(c, "a", XCACHE_INSERTED)), 0);
	g_keep = 1;
	ck_assert_int_eq(xcache_put(c, ins(c, "b", XCACHE_INSERTED)), 0);
	a = g_kept;
	g_nlog = 0;
	/* While kept (flushing), a is found for re-insertion. */
	ck_assert_ptr_eq(ins(c, "a", XCACHE_REINSERTED), a);
	EXPECT("evict:b", "reinsert:a", "post_evict:b", "finalize:b", "put:b",
	       "free:b");
	ck_assert_uint_eq(xcache_entry_refcount(a), 3);
	ck_assert_int_eq(xcache_put(c, a), 0); /* flush done */
	ck_assert_int_eq(xcache_put(c, a), 0); /* caller done */
	EXPECT_NONE();
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_ACTIVE);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_invalidate_and_remove)
{
	struct xcache *c = mk(2, 6);
	struct xcache_entry *a, *a2, *b, *l;
	struct xcache_stats s;

	a = ins(c, "a", XCACHE_INSERTED);
	ck_assert_int_eq(xcache_invalidate(c, "zz"), -ENOENT);
	ck_assert_int_eq(xcache_invalidate(c, "a"), 0);
	EXPECT("init:a");
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_DETACHED);
	ck_assert_uint_eq(xcache_entry_refcount(a), 1);
	ck_assert_int_eq(xcache_lookup(c, "a", &l), -ENOENT);
	ck_assert_int_eq(xcache_invalidate(c, "a"), -ENOENT);
	ck_assert_int_eq(xcache_remove(c, a), -ENOENT);
	/* A new insert of the name makes a new entry. */
	a2 = ins(c, "a", XCACHE_INSERTED);
	ck_assert_ptr_ne(a2, a);
	EXPECT("init:a");
	st(c, &s);
	ck_assert_uint_eq(s.nr_detached, 1);
	ck_assert_uint_eq(s.nr_active, 1);
	ck_assert_int_eq(xcache_put(c, a), 0);
	EXPECT("finalize:a", "put:a", "free:a");
	st(c, &s);
	ck_assert_uint_eq(s.nr_detached, 0);

	/* Invalidate an unreferenced active entry: released at once. */
	ck_assert_int_eq(xcache_put(c, a2), 0);
	ck_assert_int_eq(xcache_invalidate(c, "a"), 0);
	EXPECT("finalize:a", "put:a", "free:a");

	/* Invalidate an evicted entry: it is no longer re-insertable. */
	b = ins(c, "b", XCACHE_INSERTED);
	ck_assert_int_eq(xcache_put(c, ins(c, "c", XCACHE_INSERTED)), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "d", XCACHE_INSERTED)), 0);
	EXPECT("init:b", "init:c", "init:d", "evict:b", "post_evict:b");
	ck_assert_int_eq(xcache_entry_state(b), XCACHE_EVICTED);
	ck_assert_int_eq(xcache_invalidate(c, "b"), 0);
	ck_assert_int_eq(xcache_entry_state(b), XCACHE_DETACHED);
	l = ins(c, "b", XCACHE_INSERTED);
	ck_assert_ptr_ne(l, b);
	ck_assert_int_eq(xcache_put(c, l), 0);
	g_nlog = 0;
	ck_assert_int_eq(xcache_put(c, b), 0);
	EXPECT("finalize:b", "put:b", "free:b");

	/* xcache_remove by entry, on an active entry. */
	ck_assert_int_eq(xcache_lookup(c, "b", &l), 0);
	ck_assert_int_eq(xcache_remove(c, l), 0);
	ck_assert_int_eq(xcache_entry_state(l), XCACHE_DETACHED);
	ck_assert_int_eq(xcache_remove(NULL, l), -EINVAL);
	ck_assert_int_eq(xcache_remove(c, NULL), -EINVAL);
	ck_assert_int_eq(xcache_put(c, l), 0);
	EXPECT("finalize:b", "put:b", "free:b");
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_evict_lru_and_peek)
{
	struct xcache *c = mk(3, 0);
	struct xcache_entry *p = NULL;

	ck_assert_int_eq(xcache_evict_lru(c), -ENOENT);
	ck_assert_int_eq(xcache_peek_and_get_lru(c, &p), -ENOENT);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(xcache_evict_lru(NULL), -EINVAL);
	ck_assert_int_eq(xcache_peek_and_get_lru(c, NULL), -EINVAL);
	ck_assert_int_eq(xcache_put(c, ins(c, "a", XCACHE_INSERTED)), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "b", XCACHE_INSERTED)), 0);
	g_nlog = 0;
	ck_assert_int_eq(xcache_peek_and_get_lru(c, &p), 0);
	ck_assert_str_eq(xcache_entry_name(p), "a");
	ck_assert_uint_eq(xcache_entry_refcount(p), 2);
	ck_assert_int_eq(xcache_entry_state(p), XCACHE_ACTIVE);
	EXPECT_NONE();
	/* Explicit eviction of the LRU (a), still referenced by us. */
	ck_assert_int_eq(xcache_evict_lru(c), 0);
	EXPECT("evict:a", "post_evict:a");
	ck_assert_int_eq(xcache_put(c, p), 0);
	EXPECT("finalize:a", "put:a", "free:a");
	ck_assert_int_eq(xcache_evict_lru(c), 0);
	EXPECT("evict:b", "post_evict:b", "finalize:b", "put:b", "free:b");
	ck_assert_int_eq(xcache_evict_lru(c), -ENOENT);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

struct walk {
	int active;
	int evicted;
	int calls;
	int stop_after;
};

static int walk_fn(struct xcache *c, struct xcache_entry *e, void *arg)
{
	struct walk *w = arg;

	(void)c;
	w->calls++;
	if (xcache_entry_state(e) == XCACHE_ACTIVE)
		w->active++;
	if (xcache_entry_state(e) == XCACHE_EVICTED)
		w->evicted++;
	ck_assert_uint_ge(xcache_entry_refcount(e), 1);
	return w->calls == w->stop_after ? 42 : 0;
}

static int evict_all_fn(struct xcache *c, struct xcache_entry *e, void *arg)
{
	(void)arg;
	return xcache_remove(c, e);
}

START_TEST(test_for_each)
{
	struct xcache *c = mk(2, 6);
	struct xcache_entry *a;
	struct walk w = {0};
	struct xcache_stats s;

	a = ins(c, "a", XCACHE_INSERTED);
	ck_assert_int_eq(xcache_put(c, ins(c, "b", XCACHE_INSERTED)), 0);
	ck_assert_int_eq(xcache_put(c, ins(c, "c", XCACHE_INSERTED)), 0);
	g_nlog = 0; /* a is evicted and referenced; b, c active */
	ck_assert_int_eq(xcache_for_each(c, 0x4, walk_fn, &w), -EINVAL);
	ck_assert_int_eq(xcache_for_each(c, XCACHE_TABLE_ACTIVE, NULL, &w),
			 -EINVAL);
	ck_assert_int_eq(xcache_for_each(NULL, 1, walk_fn, &w), -EINVAL);
	ck_assert_int_eq(xcache_for_each(c, XCACHE_TABLE_ACTIVE, walk_fn, &w),
			 0);
	ck_assert_int_eq(w.active, 2);
	ck_assert_int_eq(w.evicted, 0);
	memset(&w, 0, sizeof(w));
	ck_assert_int_eq(xcache_for_each(c, XCACHE_TABLE_EVICTED, walk_fn, &w),
			 0);
	ck_assert_int_eq(w.evicted, 1);
	ck_assert_int_eq(w.active, 0);
	memset(&w, 0, sizeof(w));
	w.stop_after = 2;
	ck_assert_int_eq(
	    xcache_for_each(c, XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED,
			    walk_fn, &w),
	    42);
	ck_assert_int_eq(w.calls, 2);
	EXPECT_NONE();
	ck_assert_uint_eq(xcache_entry_refcount(a), 1);
	/* Shutdown style: remove everything, then the last put. */
	ck_assert_int_eq(
	    xcache_for_each(c, XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED,
			    evict_all_fn, NULL),
	    0);
	ck_assert_int_eq(xcache_put(c, a), 0);
	st(c, &s);
	ck_assert_uint_eq(s.nr_active + s.nr_evicted + s.nr_detached, 0);
	ck_assert_uint_eq(s.nr_free + s.nr_limbo, 6);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_pool_exhaustion_and_grace_period)
{
	struct xcache *c = mk(1, 2);
	struct xcache_entry *a, *b, *e = NULL;
	struct xcache_stats before, after;

	a = ins(c, "a", XCACHE_INSERTED);
	b = ins(c, "b", XCACHE_INSERTED); /* a evicted, still referenced */
	g_nlog = 0;
	st(c, &before);
	ck_assert_uint_eq(before.nr_free + before.nr_limbo, 0);
	ck_assert_int_eq(xcache_insert(c, "c", &e, NULL), -EAGAIN);
	ck_assert_ptr_null(e);
	EXPECT_NONE();
	st(c, &after);
	assert_same_stats(&before, &after);
	ck_assert_int_eq(xcache_entry_state(b), XCACHE_ACTIVE);
	/* a released: its node waits in limbo for a grace period. */
	ck_assert_int_eq(xcache_put(c, a), 0);
	st(c, &after);
	ck_assert_uint_eq(after.nr_limbo, 1);
	ck_assert_uint_eq(after.grace_periods, 0);
	g_nlog = 0;
	e = ins(c, "c", XCACHE_INSERTED);
	ck_assert_ptr_eq(e, a); /* the same node, reused after the GP */
	st(c, &after);
	ck_assert_uint_eq(after.grace_periods, 1);
	ck_assert_uint_eq(after.nr_limbo, 0);
	EXPECT("init:c", "evict:b", "post_evict:b");
	ck_assert_int_eq(xcache_put(c, b), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_on_init_failure)
{
	struct xcache *c = mk(1, 3);
	struct xcache_entry *e = NULL;
	struct xcache_stats before, after;

	ck_assert_int_eq(xcache_put(c, ins(c, "a", XCACHE_INSERTED)), 0);
	g_nlog = 0;
	st(c, &before);
	g_fail_init = 1;
	ck_assert_int_eq(xcache_insert(c, "b", &e, NULL), -EIO);
	ck_assert_ptr_null(e);
	/* Only the failing hook ran: a was not evicted. */
	EXPECT("init:b");
	st(c, &after);
	assert_same_stats(&before, &after);
	g_fail_init = 0;
	ck_assert_int_eq(xcache_lookup(c, "a", &e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_destroy_busy)
{
	struct xcache *c = mk(1, 3);
	struct xcache_entry *a, *b;

	a = ins(c, "a", XCACHE_INSERTED);
	g_nlog = 0;
	ck_assert_int_eq(xcache_destroy(c), -EBUSY); /* a user ref on a */
	EXPECT_NONE();
	b = ins(c, "b", XCACHE_INSERTED);
	ck_assert_int_eq(xcache_put(c, b), 0);
	g_nlog = 0;
	ck_assert_int_eq(xcache_destroy(c), -EBUSY); /* a is evicted */
	EXPECT_NONE();
	ck_assert_int_eq(xcache_put(c, a), 0);
	EXPECT("finalize:a", "put:a", "free:a");
	ck_assert_int_eq(xcache_destroy(c), 0);
	EXPECT("put:b", "free:b");
}
END_TEST

START_TEST(test_reinsert_ping_pong)
{
	struct xcache *c = mk(1, 3);
	struct xcache_entry *a, *b, *l;
	struct xcache_stats s;
	int i;

	a = ins(c, "a", XCACHE_INSERTED);
	b = ins(c, "b", XCACHE_INSERTED);
	/*
	 * Each re-insertion moves an entry back into the active table; the
	 * third move of one entry within a grace period must wait for one.
	 */
	for (i = 0; i < 6; i++) {
		ck_assert_ptr_eq(ins(c, "a", XCACHE_REINSERTED), a);
		ck_assert_int_eq(xcache_lookup(c, "a", &l), 0);
		ck_assert_ptr_eq(l, a);
		ck_assert_int_eq(xcache_put(c, l), 0);
		ck_assert_int_eq(xcache_put(c, a), 0);
		ck_assert_ptr_eq(ins(c, "b", XCACHE_REINSERTED), b);
		ck_assert_int_eq(xcache_lookup(c, "a", &l), -ENOENT);
		ck_assert_int_eq(xcache_put(c, b), 0);
	}
	st(c, &s);
	ck_assert_uint_eq(s.reinsertions, 12);
	ck_assert_uint_ge(s.grace_periods, 1);
	ck_assert_uint_eq(xcache_entry_refcount(a), 1);
	ck_assert_uint_eq(xcache_entry_refcount(b), 2);
	ck_assert_int_eq(xcache_put(c, b), 0);
	g_nlog = 0;
	ck_assert_int_eq(xcache_put(c, a), 0);
	EXPECT("finalize:a", "put:a", "free:a");
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_finalize_put_during_hook)
{
	struct xcache *c = mk(1, 4);

	g_cache = c;
	ck_assert_int_eq(xcache_put(c, ins(c, "a", XCACHE_INSERTED)), 0);
	g_nlog = 0;
	/*
	 * The hook keeps a and drops its reference before returning: the
	 * finalizer must notice and ask again (second call lets it go).
	 */
	g_put_in_finalize = 1;
	ck_assert_int_eq(xcache_put(c, ins(c, "b", XCACHE_INSERTED)), 0);
	EXPECT("init:b", "evict:a", "post_evict:a", "finalize:a", "finalize:a",
	       "put:a", "free:a");
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

START_TEST(test_reinsert_during_finalize)
{
	struct xcache *c = mk(2, 6);
	struct xcache_entry *a;
	struct xcache_stats s;

	g_cache = c;
	a = ins(c, "a", XCACHE_INSERTED);
	ck_assert_int_eq(xcache_evict_lru(c), 0);
	g_nlog = 0;
	/* The last put finalizes a; the hook re-inserts it meanwhile. */
	g_reinsert_in_finalize = 1;
	ck_assert_int_eq(xcache_put(c, a), 0);
	EXPECT("finalize:a", "reinsert:a");
	ck_assert_ptr_eq(g_reinserted, a);
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_ACTIVE);
	ck_assert_uint_eq(xcache_entry_refcount(a), 2);
	st(c, &s);
	ck_assert_uint_eq(s.nr_active, 1);
	ck_assert_uint_eq(s.nr_evicted, 0);
	ck_assert_uint_eq(s.releases, 0);
	ck_assert_int_eq(xcache_put(c, a), 0);
	EXPECT_NONE();
	ck_assert_int_eq(xcache_destroy(c), 0);
	EXPECT("put:a", "free:a");
}
END_TEST

START_TEST(test_no_hooks)
{
	struct xcache_config cfg = {.capacity = 2, .nr_nodes = 4};
	struct xcache_entry *a, *e;
	struct xcache_stats s;
	struct xcache *c;
	char name[8];
	int i;

	/* No ops at all: the release path takes no detours. */
	ck_assert_int_eq(xcache_create(&cfg, &c), 0);
	a = ins(c, "a", XCACHE_INSERTED);
	for (i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		e = ins(c, name, XCACHE_INSERTED);
		ck_assert_int_eq(xcache_put(c, e), 0);
	}
	st(c, &s);
	ck_assert_uint_eq(s.nr_active, 2);
	ck_assert_uint_eq(s.nr_evicted, 1); /* a, still referenced */
	ck_assert_uint_eq(s.releases, 18);
	ck_assert_uint_ge(s.grace_periods, 1);
	ck_assert_int_eq(xcache_put(c, a), 0);
	ck_assert_int_eq(xcache_entry_state(a), XCACHE_FREE);
	st(c, &s);
	ck_assert_uint_eq(s.nr_free + s.nr_limbo, 2);
	ck_assert_int_eq(xcache_lookup(c, "n19", &e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_lookup(c, "n17", &e), -ENOENT);
	EXPECT_NONE();
	ck_assert_int_eq(xcache_destroy(c), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xcache");
	TCase *tc = tcase_create("single");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_create_bad_input);
	tcase_add_test(tc, test_node_init_and_stats);
	tcase_add_test(tc, test_name_validation);
	tcase_add_test(tc, test_refcounts_and_bad_puts);
	tcase_add_test(tc, test_implicit_eviction_lru_order);
	tcase_add_test(tc, test_clock_second_chance);
	tcase_add_test(tc, test_evicted_referenced_and_reinsert);
	tcase_add_test(tc, test_finalize_keeps_alive);
	tcase_add_test(tc, test_finalize_kept_then_reinserted);
	tcase_add_test(tc, test_invalidate_and_remove);
	tcase_add_test(tc, test_evict_lru_and_peek);
	tcase_add_test(tc, test_for_each);
	tcase_add_test(tc, test_pool_exhaustion_and_grace_period);
	tcase_add_test(tc, test_on_init_failure);
	tcase_add_test(tc, test_destroy_busy);
	tcase_add_test(tc, test_reinsert_ping_pong);
	tcase_add_test(tc, test_finalize_put_during_hook);
	tcase_add_test(tc, test_reinsert_during_finalize);
	tcase_add_test(tc, test_no_hooks);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
