/* SPDX-License-Identifier: MIT */
/*
 * xcache under concurrency: threads insert, look up, hold, put, evict,
 * invalidate and remove overlapping names (half the operations on a few
 * hot names), while on_finalize sometimes keeps entries alive (as cached
 * does to flush). Every reference obtained is checked to be the entry of
 * the requested name and alive; at the end all references are dropped and
 * the invariants are checked: refcounts back to the cache's own, the pool
 * full again, nothing evicted or detached left, no name active twice, and
 * the hook counts consistent.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xcache.h"

#if defined(AC_TSAN)
#define OPS_PER_THREAD 100000
#else
#define OPS_PER_THREAD 1000000
#endif
#define NR_THREADS 4
#define NR_NAMES   256
#define NR_HOT	   8
#define CAPACITY   64
#define NR_NODES   160
#define HOLD_MAX   4

struct node_state {
	char name[XCACHE_NAME_MAX + 1];
	int live;
};

static struct node_state g_nodes[NR_NODES];
static char g_names[NR_NAMES][16];

/* Hook counters, __atomic. */
static long n_init, n_evict, n_post_evict, n_reinsert, n_finalize, n_put,
    n_free, n_kept;
static int g_keeping = 1; /* __atomic: on_finalize may keep entries */

/* Entries kept alive by on_finalize, put later by the workers. */
static pthread_mutex_t g_kept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xcache_entry *g_kept[NR_NODES * 4];
static int g_nkept;

static long g_errors; /* __atomic */

#define FAIL(...)                                                              \
	do {                                                                   \
		if (__atomic_add_fetch(&g_errors, 1, __ATOMIC_RELAXED) < 10)   \
			fprintf(stderr, __VA_ARGS__);                          \
	} while (0)

static void inc(long *c)
{
	__atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

static int h_node_init(void *cp, uint32_t index, void **priv)
{
	(void)cp;
	*priv = &g_nodes[index];
	return 0;
}

static int h_init(void *cp, struct xcache_entry *e)
{
	struct node_state *ns = xcache_entry_priv(e);

	(void)cp;
	if (ns->live)
		FAIL("on_init on a live node %s\n", ns->name);
	strcpy(ns->name, xcache_entry_name(e));
	ns->live = 1;
	inc(&n_init);
	return 0;
}

static void h_evict(void *cp, struct xcache_entry *e)
{
	(void)cp;
	(void)e;
	inc(&n_evict);
}

static void h_post_evict(void *cp, struct xcache_entry *e)
{
	(void)cp;
	if (xcache_entry_refcount(e) == 0)
		FAIL("post_evict with no reference\n");
	inc(&n_post_evict);
}

static void h_reinsert(void *cp, struct xcache_entry *e)
{
	(void)cp;
	(void)e;
	inc(&n_reinsert);
}

static bool h_finalize(void *cp, struct xcache_entry *e)
{
	long n = __atomic_add_fetch(&n_finalize, 1, __ATOMIC_RELAXED);

	(void)cp;
	if (!__atomic_load_n(&g_keeping, __ATOMIC_RELAXED) || n % 8 != 0)
		return false;
	xcache_get(e);
	pthread_mutex_lock(&g_kept_lock);
	if (g_nkept >= (int)(sizeof(g_kept) / sizeof(g_kept[0]))) {
		pthread_mutex_unlock(&g_kept_lock);
		FAIL("kept list overflow\n");
		return true; /* leaks a reference: the test fails anyway */
	}
	g_kept[g_nkept++] = e;
	pthread_mutex_unlock(&g_kept_lock);
	inc(&n_kept);
	return true;
}

static void h_put(void *cp, struct xcache_entry *e)
{
	(void)cp;
	(void)e;
	inc(&n_put);
}

static void h_free(void *cp, struct xcache_entry *e)
{
	struct node_state *ns = xcache_entry_priv(e);

	(void)cp;
	if (!ns->live)
		FAIL("on_free on a dead node\n");
	ns->live = 0;
	ns->name[0] = '\0';
	inc(&n_free);
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

static struct xcache_entry *pop_kept(void)
{
	struct xcache_entry *e = NULL;

	pthread_mutex_lock(&g_kept_lock);
	if (g_nkept > 0)
		e = g_kept[--g_nkept];
	pthread_mutex_unlock(&g_kept_lock);
	return e;
}

/* A reference we hold must be to a live entry of that name. */
static void check_ref(struct xcache_entry *e, const char *name)
{
	struct node_state *ns = xcache_entry_priv(e);

	if (strcmp(xcache_entry_name(e), name) != 0)
		FAIL("got %s for %s\n", xcache_entry_name(e), name);
	if (!ns->live || strcmp(ns->name, name) != 0)
		FAIL("entry %s not live (%d, %s)\n", name, ns->live, ns->name);
	if (xcache_entry_refcount(e) == 0)
		FAIL("held entry %s has refcount 0\n", name);
	if (xcache_entry_state(e) == XCACHE_FREE)
		FAIL("held entry %s is FREE\n", name);
}

struct worker {
	struct xcache *c;
	unsigned int seed;
	struct xcache_entry *held[HOLD_MAX];
	int nheld;
	long eagain;
};

static unsigned int rnd(struct worker *w)
{
	w->seed ^= w->seed << 13;
	w->seed ^= w->seed >> 17;
	w->seed ^= w->seed << 5;
	return w->seed;
}

static const char *pick_name(struct worker *w)
{
	unsigned int r = rnd(w);

	return g_names[(r & 1) ? (r >> 1) % NR_HOT : (r >> 1) % NR_NAMES];
}

static void put_or_hold(struct worker *w, struct xcache_entry *e)
{
	if (w->nheld < HOLD_MAX && rnd(w) % 4 == 0) {
		w->held[w->nheld++] = e;
		return;
	}
	if (xcache_put(w->c, e) != 0)
		FAIL("put failed\n");
}

static void drop_one(struct worker *w)
{
	if (w->nheld == 0)
		return;
	if (xcache_put(w->c, w->held[--w->nheld]) != 0)
		FAIL("put of a held entry failed\n");
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct xcache_entry *e;
	const char *name;
	long i;
	int err, op;

	xcache_thread_register();
	for (i = 0; i < OPS_PER_THREAD; i++) {
		op = (int)(rnd(w) % 100);
		name = pick_name(w);
		if (op < 40) {
			err = xcache_lookup(w->c, name, &e);
			if (err == 0) {
				check_ref(e, name);
				put_or_hold(w, e);
			} else if (err != -ENOENT) {
				FAIL("lookup: %d\n", err);
			}
		} else if (op < 70) {
			err = xcache_insert(w->c, name, &e, NULL);
			if (err == 0) {
				check_ref(e, name);
				put_or_hold(w, e);
			} else if (err == -EAGAIN) {
				w->eagain++;
				drop_one(w);
			} else {
				FAIL("insert: %d\n", err);
			}
		} else if (op < 78) {
			err = xcache_invalidate(w->c, name);
			if (err && err != -ENOENT)
				FAIL("invalidate: %d\n", err);
		} else if (op < 83) {
			err = xcache_evict_lru(w->c);
			if (err && err != -ENOENT)
				FAIL("evict_lru: %d\n", err);
		} else if (op < 88) {
			err = xcache_peek_and_get_lru(w->c, &e);
			if (err == 0) {
				check_ref(e, xcache_entry_name(e));
				put_or_hold(w, e);
			} else if (err != -ENOENT) {
				FAIL("peek_and_get_lru: %d\n", err);
			}
		} else if (op < 93) {
			drop_one(w);
		} else if (op < 96) {
			if (w->nheld) {
				err = xcache_remove(w->c, w->held[0]);
				if (err && err != -ENOENT)
					FAIL("remove: %d\n", err);
			}
		} else {
			e = pop_kept();
			if (e && xcache_put(w->c, e) != 0)
				FAIL("put of a kept entry failed\n");
		}
	}
	while (w->nheld)
		drop_one(w);
	xcache_thread_unregister();
	return NULL;
}

START_TEST(test_concurrent_mixed)
{
	struct xcache_config cfg = {
	    .capacity = CAPACITY, .nr_nodes = NR_NODES, .ops = &g_ops};
	struct worker w[NR_THREADS];
	pthread_t th[NR_THREADS];
	struct xcache_stats s;
	struct xcache_entry *e, *l;
	struct xcache *c;
	uint32_t i, j, nactive = 0;
	long eagain = 0;

	for (i = 0; i < NR_NAMES; i++)
		snprintf(g_names[i], sizeof(g_names[i]), "obj-%03u", i);
	xcache_thread_register();
	ck_assert_int_eq(xcache_create(&cfg, &c), 0);
	for (i = 0; i < NR_THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].c = c;
		w[i].seed = 0x9e3779b9u * (i + 1);
		ck_assert_int_eq(
		    pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (i = 0; i < NR_THREADS; i++) {
		pthread_join(th[i], NULL);
		eagain += w[i].eagain;
	}
	/* Drain what on_finalize kept, keeping nothing more. */
	__atomic_store_n(&g_keeping, 0, __ATOMIC_RELAXED);
	while ((e = pop_kept()))
		ck_assert_int_eq(xcache_put(c, e), 0);

	ck_assert_int_eq(__atomic_load_n(&g_errors, __ATOMIC_RELAXED), 0);
	xcache_get_stats(c, &s);
	ck_assert_uint_eq(s.nr_evicted, 0);
	ck_assert_uint_eq(s.nr_detached, 0);
	ck_assert_uint_le(s.nr_active, CAPACITY);
	ck_assert_uint_eq(s.nr_active + s.nr_free + s.nr_limbo, NR_NODES);
	for (i = 0; i < NR_NODES; i++) {
		e = xcache_node(c, i);
		switch (xcache_entry_state(e)) {
		case XCACHE_ACTIVE:
			nactive++;
			ck_assert_uint_eq(xcache_entry_refcount(e), 1);
			ck_assert(g_nodes[i].live);
			ck_assert_int_eq(
			    xcache_lookup(c, xcache_entry_name(e), &l), 0);
			ck_assert_ptr_eq(l, e);
			ck_assert_int_eq(xcache_put(c, l), 0);
			for (j = 0; j < i; j++)
				if (xcache_entry_state(xcache_node(c, j)) ==
				    XCACHE_ACTIVE)
					ck_assert_str_ne(
					    xcache_entry_name(e),
					    xcache_entry_name(
						xcache_node(c, j)));
			break;
		case XCACHE_FREE:
			ck_assert_uint_eq(xcache_entry_refcount(e), 0);
			ck_assert(!g_nodes[i].live);
			break;
		default:
			ck_abort_msg("node %u left evicted or detached", i);
		}
	}
	ck_assert_uint_eq(nactive, s.nr_active);
	/* Hook bookkeeping. */
	ck_assert_int_eq(n_evict, (long)s.evictions);
	ck_assert_int_eq(n_post_evict, n_evict);
	ck_assert_int_eq(n_reinsert, (long)s.reinsertions);
	ck_assert_int_eq(n_put, n_free);
	ck_assert_int_eq(n_free, (long)s.releases);
	ck_assert_int_eq(n_init, n_free + (long)s.nr_active);
	ck_assert_int_eq(n_init, (long)s.inserts);
	ck_assert_int_ge(n_finalize, n_put + n_kept);
	/* The run exercised what it is meant to. */
	ck_assert_int_gt(n_evict, 0);
	ck_assert_int_gt(n_reinsert, 0);
	ck_assert_int_gt(n_kept, 0);
	fprintf(stderr,
		"inserts %lu evictions %lu reinsertions %lu releases %lu "
		"kept %ld grace periods %lu eagain %ld\n",
		(unsigned long)s.inserts, (unsigned long)s.evictions,
		(unsigned long)s.reinsertions, (unsigned long)s.releases,
		n_kept, (unsigned long)s.grace_periods, eagain);
	ck_assert_int_eq(xcache_destroy(c), 0);
	ck_assert_int_eq(n_free, n_init);
	xcache_thread_unregister();
}
END_TEST

/*
 * The hit path takes no cache lock: while one thread sits in on_evict
 * (called with the cache mutex held), another looks up, re-finds via
 * insert and puts an active entry. If any of those took the mutex, the two
 * threads would wait for each other and the test would time out.
 */
static int g_in_hook;	/* __atomic */
static int g_hits_done; /* __atomic */

static void blocking_evict(void *cp, struct xcache_entry *e)
{
	(void)cp;
	(void)e;
	__atomic_store_n(&g_in_hook, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(&g_hits_done, __ATOMIC_SEQ_CST))
		sched_yield();
}

static void *evicting_insert(void *arg)
{
	struct xcache *c = arg;
	struct xcache_entry *e;

	xcache_thread_register();
	if (xcache_insert(c, "c", &e, NULL) == 0)
		xcache_put(c, e);
	else
		__atomic_add_fetch(&g_errors, 1, __ATOMIC_RELAXED);
	xcache_thread_unregister();
	return NULL;
}

START_TEST(test_hit_while_mutex_held)
{
	static const struct xcache_ops ops = {.on_evict = blocking_evict};
	struct xcache_config cfg = {.capacity = 2, .nr_nodes = 4, .ops = &ops};
	enum xcache_insert_how how;
	struct xcache_entry *e;
	struct xcache *c;
	pthread_t th;

	xcache_thread_register();
	ck_assert_int_eq(xcache_create(&cfg, &c), 0);
	ck_assert_int_eq(xcache_insert(c, "a", &e, NULL), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_insert(c, "b", &e, NULL), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, evicting_insert, c), 0);
	while (!__atomic_load_n(&g_in_hook, __ATOMIC_SEQ_CST))
		sched_yield();
	/* The other thread holds the mutex now (evicting a). */
	ck_assert_int_eq(xcache_lookup(c, "b", &e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_insert(c, "b", &e, &how), 0);
	ck_assert_int_eq(how, XCACHE_FOUND);
	xcache_touch(e);
	ck_assert_int_eq(xcache_put(c, e), 0);
	__atomic_store_n(&g_hits_done, 1, __ATOMIC_SEQ_CST);
	pthread_join(th, NULL);
	ck_assert_int_eq(__atomic_load_n(&g_errors, __ATOMIC_RELAXED), 0);
	ck_assert_int_eq(xcache_lookup(c, "a", &e), -ENOENT);
	ck_assert_int_eq(xcache_lookup(c, "c", &e), 0);
	ck_assert_int_eq(xcache_put(c, e), 0);
	ck_assert_int_eq(xcache_destroy(c), 0);
	xcache_thread_unregister();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xcache_stress");
	TCase *tc = tcase_create("concurrent");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_concurrent_mixed);
	tcase_add_test(tc, test_hit_while_mutex_held);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
