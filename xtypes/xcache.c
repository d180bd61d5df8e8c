/* SPDX-License-Identifier: MIT */
/*
 * xcache: see xcache.h for the contract.
 *
 * Layout of the solution
 * - Active table: a liburcu lock-free hash table (cds_lfht) of fixed size
 *   (no automatic resize, so no allocation after create), read under RCU
 *   by lookups, changed only under c->lock.
 * - Evicted table: a chained hash of list heads, touched only under
 *   c->lock (nobody looks up evicted entries without the lock: only insert
 *   needs them, for re-insertion), so it needs no RCU.
 * - One list link per entry serves, by state, as LRU link (ACTIVE), hash
 *   chain link (EVICTED) or free/limbo list link (FREE).
 * - All 1 -> 0 transitions of a reference count happen under c->lock (the
 *   lock-free put only decrements counts above 1), so the decision to
 *   finalize or release is atomic with re-insertion and invalidation.
 */
/*
 * The RCU read-side primitives are inlined (liburcu's _LGPL_SOURCE) for the
 * hit path, except under ThreadSanitizer: inlined, liburcu's internal
 * volatile accesses (the grace-period futex) would be instrumented and
 * reported as races; as library calls they are not, and the annotations
 * below describe what they guarantee.
 */
#if !defined(AC_TSAN)
#define _LGPL_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <urcu/urcu-memb.h>
#include <urcu/list.h>
#include <urcu/rculfhash.h>

#include "xcache.h"

#if defined(AC_TSAN)
#include <sanitizer/tsan_interface.h>
/*
 * liburcu synchronises in uninstrumented code (cds_lfht_add's barriers,
 * synchronize_rcu's membarrier), invisible to ThreadSanitizer. These
 * annotations tell it what liburcu guarantees: publication of an entry
 * happens before a reader finds it, and a reader's critical section
 * happens before the end of the next grace period.
 */
#define XC_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define XC_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define XC_TSAN_RELEASE(p) ((void)(p))
#define XC_TSAN_ACQUIRE(p) ((void)(p))
#endif

#define XCACHE_CACHELINE 64

/*
 * Layout: a hit reads the hash-table node, the reference count, the name
 * length and the name, and its user then reads priv (cached: its
 * object); they share the first cache line (with the first 32 bytes of
 * the name), so that a lookup of a short name in a table too big for the
 * CPU caches misses once in the entry. Until session 11 a hit over 1 M
 * entries missed three lines of it, one after the other: line 0; line 1,
 * because the name started at byte 40 and glibc's memcmp (AVX2) compares
 * a name shorter than 32 bytes with one 32-byte load from each side when
 * that does not cross a page, i.e. bytes 40..71; and line 4 for priv,
 * after the reference CAS (a locked instruction: nothing overlapped
 * it). The name now starts at byte 32, so that load stays in line 0.
 * The second hash-table node is used only by an entry re-inserted within
 * the grace period of its eviction: it lives in the cold part
 * (xcache_node_entry finds the entry from either node by its offset in
 * the pool).
 */
struct xcache_entry {
	/*
	 * Two hash-table nodes (lfnode0 here, lfnode1 in the cold part): a
	 * node deleted from the table may be added again only after a grace
	 * period, and an evicted entry may be re-inserted at once.
	 * del_epoch[i] is c->gp_epoch when node i was deleted; the node is
	 * reusable once c->gp_epoch has moved past.
	 */
	struct cds_lfht_node lfnode0;
	void *priv;   /* set once at create */
	uint32_t ref; /* __atomic; 1 -> 0 only under c->lock */
	uint16_t name_len;
	uint8_t referenced; /* __atomic relaxed; CLOCK bit */
	uint8_t state;	    /* enum xcache_state; written under c->lock */
	char name[XCACHE_NAME_MAX + 1];
	/* Cold: writers only, under c->lock, or set once at create. */
	uint8_t slot;	 /* node in the active table: 0 or 1 */
	bool finalizing; /* on_finalize running */
	bool refinalize; /* ref hit 0 again meanwhile */
	uint32_t index;
	uint64_t hash;
	struct cds_lfht_node lfnode1;
	struct cds_list_head link; /* LRU / evicted chain / pool */
	uint64_t del_epoch[2];
} __attribute__((aligned(XCACHE_CACHELINE)));

/* A short name's compare (a 32-byte load from the name's start) and the
 * hit-path fields stay in the first line. */
_Static_assert(offsetof(struct xcache_entry, name) + 32 <= XCACHE_CACHELINE,
	       "hit-path fields, priv and the name's first 32 bytes share "
	       "the first line");

static struct cds_lfht_node *xcache_lfnode(struct xcache_entry *e, uint8_t slot)
{
	return slot ? &e->lfnode1 : &e->lfnode0;
}

struct xcache {
	/* Read by every lookup, written only at create: never shares a line
	 * with what writers change, so hits do not miss on it. */
	struct cds_lfht *active;
	struct xcache_entry *nodes;
	uint32_t capacity;
	uint32_t nr_nodes;
	size_t nodes_map_len; /* > 0: nodes come from xcache_map_pool() */
	struct cds_list_head *ev_buckets;
	uint64_t ev_mask;
	void *priv;
	struct xcache_ops ops;

	/* Writers' state, under the lock. */
	pthread_mutex_t lock __attribute__((aligned(XCACHE_CACHELINE)));
	struct cds_list_head lru; /* next = MRU end, prev = LRU end */
	struct cds_list_head free_list;
	struct cds_list_head limbo; /* freed, waiting for a grace period */
	uint32_t nr_active;
	uint32_t nr_evicted;
	uint32_t nr_detached;
	uint32_t nr_free;
	uint32_t nr_limbo;
	uint64_t gp_epoch;
	uint64_t inserts;
	uint64_t evictions;
	uint64_t reinsertions;
	uint64_t releases;
	uint64_t grace_periods;
	/* TSan sync object for grace periods (written by readers there). */
	char tsan_gp __attribute__((aligned(XCACHE_CACHELINE)));
};

struct xcache_key {
	const char *name;
	size_t len;
	const struct xcache *c;
};

/* The entry holding a hash-table node: nodes live in the pool array. */
static struct xcache_entry *xcache_node_entry(const struct xcache *c,
					      const struct cds_lfht_node *node)
{
	uintptr_t off = (uintptr_t)node - (uintptr_t)c->nodes;

	return &c->nodes[off / sizeof(struct xcache_entry)];
}

/* 64-bit multiply-xorshift hash; the final mix feeds cds_lfht's bits. */
static uint64_t xcache_hash(const char *s, size_t len)
{
	const uint64_t m = 0xff51afd7ed558ccdULL;
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ (len * m);
	uint64_t k;

	while (len >= 8) {
		memcpy(&k, s, 8);
		h = (h ^ k) * m;
		h ^= h >> 32;
		s += 8;
		len -= 8;
	}
	if (len) {
		k = 0;
		memcpy(&k, s, len);
		h = (h ^ k) * m;
	}
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static int xcache_check_name(const char *name, size_t *len)
{
	size_t n;

	if (!name)
		return -EINVAL;
	n = strnlen(name, XCACHE_NAME_MAX + 1);
	if (n == 0)
		return -EINVAL;
	if (n > XCACHE_NAME_MAX)
		return -ENAMETOOLONG;
	*len = n;
	return 0;
}

static void xcache_set_state(struct xcache_entry *e, enum xcache_state s)
{
	__atomic_store_n(&e->state, (uint8_t)s, __ATOMIC_RELAXED);
}

static int xcache_match(struct cds_lfht_node *node, const void *key)
{
	const struct xcache_key *k = key;
	const struct xcache_entry *e = xcache_node_entry(k->c, node);

	XC_TSAN_ACQUIRE(e);
	return e->name_len == k->len && memcmp(e->name, k->name, k->len) == 0;
}

/* Caller is inside an RCU read-side critical section. */
static struct xcache_entry *xcache_active_find(struct xcache *c,
					       const struct xcache_key *key,
					       uint64_t hash)
{
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;

	cds_lfht_lookup(c->active, (unsigned long)hash, xcache_match, key,
			&iter);
	node = cds_lfht_iter_get_node(&iter);
	if (!node)
		return NULL;
	return xcache_node_entry(c, node);
}

static bool xcache_ref_get_unless_zero(struct xcache_entry *e)
{
	uint32_t r = __atomic_load_n(&e->ref, __ATOMIC_RELAXED);

	do {
		if (r == 0)
			return false;
	} while (!__atomic_compare_exchange_n(
	    &e->ref, &r, r + 1, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED));
	return true;
}

void xcache_touch(struct xcache_entry *e)
{
	/* Read first: a hot entry's line stays shared between cores. */
	if (!__atomic_load_n(&e->referenced, __ATOMIC_RELAXED))
		__atomic_store_n(&e->referenced, 1, __ATOMIC_RELAXED);
}

void xcache_get(struct xcache_entry *e)
{
	__atomic_add_fetch(&e->ref, 1, __ATOMIC_RELAXED);
}

/*
 * The lock-free hit: an entry found in the active table while the cache
 * held its reference cannot reach 0 and be reused before our read-side
 * section ends, so increment-if-not-zero either pins it or proves it gone.
 * It may have been evicted between the find and the increment, though
 * (the reference of an evicted entry's user, or of its on_finalize, keeps
 * the count above 0): a reference to a no longer ACTIVE entry is given
 * back, so that the caller takes the locked path and a re-insertion is
 * what revives it (on_reinsert runs; users such as cached rely on it to
 * know the entry has a new user).
 */
#ifdef XCACHE_TEST_HOOKS
/* Tests only: runs between the find and the increment of a lock-free hit,
 * to replay an eviction that a preempted reader would miss. */
void (*xcache_test_after_find)(struct xcache *c, struct xcache_entry *e);
#define XCACHE_TEST_AFTER_FIND(c, e)                                           \
	do {                                                                   \
		if (xcache_test_after_find)                                    \
			xcache_test_after_find(c, e);                          \
	} while (0)
#else
#define XCACHE_TEST_AFTER_FIND(c, e) ((void)0)
#endif

static bool xcache_lookup_get(struct xcache *c, const struct xcache_key *key,
			      uint64_t hash, struct xcache_entry **out)
{
	struct xcache_entry *e;
	bool ok = false;

	urcu_memb_read_lock();
	e = xcache_active_find(c, key, hash);
	if (e)
		XCACHE_TEST_AFTER_FIND(c, e);
	if (e && xcache_ref_get_unless_zero(e))
		ok = true;
	XC_TSAN_RELEASE(&c->tsan_gp);
	urcu_memb_read_unlock();
	if (!ok)
		return false;
	/* Ordered after the increment (acquire CAS): an eviction that the
	 * entry's finalization could have seen is visible here. */
	if (__atomic_load_n(&e->state, __ATOMIC_ACQUIRE) != XCACHE_ACTIVE) {
		(void)xcache_put(c, e);
		return false;
	}
	xcache_touch(e);
	*out = e;
	return true;
}

/* --- everything below runs under c->lock unless it says otherwise --- */

static void xcache_grace_period_locked(struct xcache *c)
{
	/*
	 * Readers never take c->lock, so waiting with it held cannot
	 * deadlock; it only delays other writers, once per batch of frees.
	 */
	urcu_memb_synchronize_rcu();
	XC_TSAN_ACQUIRE(&c->tsan_gp);
	c->gp_epoch++;
	c->grace_periods++;
}

static struct xcache_entry *xcache_pool_get_locked(struct xcache *c)
{
	struct xcache_entry *e;

	if (cds_list_empty(&c->free_list)) {
		if (cds_list_empty(&c->limbo))
			return NULL;
		/* Every entry in limbo left the active table before now. */
		xcache_grace_period_locked(c);
		cds_list_splice(&c->limbo, &c->free_list);
		CDS_INIT_LIST_HEAD(&c->limbo);
		c->nr_free += c->nr_limbo;
		c->nr_limbo = 0;
	}
	e = cds_list_first_entry(&c->free_list, struct xcache_entry, link);
	cds_list_del(&e->link);
	c->nr_free--;
	return e;
}

static void xcache_active_add_locked(struct xcache *c, struct xcache_entry *e,
				     uint8_t slot)
{
	e->slot = slot;
	cds_lfht_node_init(xcache_lfnode(e, slot));
	__atomic_store_n(&e->referenced, 0, __ATOMIC_RELAXED);
	xcache_set_state(e, XCACHE_ACTIVE);
	cds_list_add(&e->link, &c->lru);
	c->nr_active++;
	XC_TSAN_RELEASE(e);
	urcu_memb_read_lock();
	cds_lfht_add(c->active, (unsigned long)e->hash, xcache_lfnode(e, slot));
	urcu_memb_read_unlock();
}

static void xcache_active_del_locked(struct xcache *c, struct xcache_entry *e)
{
	urcu_memb_read_lock();
	cds_lfht_del(c->active, xcache_lfnode(e, e->slot));
	urcu_memb_read_unlock();
	e->del_epoch[e->slot] = c->gp_epoch;
	cds_list_del(&e->link);
	c->nr_active--;
}

static struct cds_list_head *xcache_ev_bucket(struct xcache *c, uint64_t hash)
{
	return &c->ev_buckets[hash & c->ev_mask];
}

static struct xcache_entry *
xcache_evicted_find_locked(struct xcache *c, const struct xcache_key *key,
			   uint64_t hash)
{
	struct cds_list_head *head = xcache_ev_bucket(c, hash), *pos;
	struct xcache_entry *e;

	/*
	 * Not cds_list_for_each_entry: it forms an entry pointer from the
	 * list head itself, which UBSan rightly flags as misaligned.
	 */
	for (pos = head->next; pos != head; pos = pos->next) {
		e = cds_list_entry(pos, struct xcache_entry, link);
		if (e->hash == hash && e->name_len == key->len &&
		    memcmp(e->name, key->name, key->len) == 0)
			return e;
	}
	return NULL;
}

static void xcache_evicted_del_locked(struct xcache *c, struct xcache_entry *e)
{
	cds_list_del(&e->link);
	c->nr_evicted--;
}

/*
 * CLOCK victim: give entries hit since the hand last passed them a second
 * chance (move to the MRU end, clear the bit). Bounded by nr_active moves
 * so that hits racing with the scan cannot make it loop for ever.
 */
static struct xcache_entry *xcache_clock_victim_locked(struct xcache *c)
{
	uint32_t budget = c->nr_active;
	struct xcache_entry *e;

	if (cds_list_empty(&c->lru))
		return NULL;
	for (;;) {
		e = cds_list_entry(c->lru.prev, struct xcache_entry, link);
		if (budget-- == 0 ||
		    !__atomic_load_n(&e->referenced, __ATOMIC_RELAXED))
			return e;
		__atomic_store_n(&e->referenced, 0, __ATOMIC_RELAXED);
		cds_list_move(&e->link, &c->lru);
	}
}

/* Move v from the active to the evicted table; the cache keeps its ref. */
static void xcache_evict_locked(struct xcache *c, struct xcache_entry *v)
{
	xcache_active_del_locked(c, v);
	cds_list_add(&v->link, xcache_ev_bucket(c, v->hash));
	xcache_set_state(v, XCACHE_EVICTED);
	c->nr_evicted++;
	c->evictions++;
	if (c->ops.on_evict)
		c->ops.on_evict(c->priv, v);
}

/*
 * Reference count reached 0 on a non-active entry: ask on_finalize (with
 * the lock dropped, so that it may flush, enqueue work, or take a
 * reference), then release unless the entry was revived. Called with the
 * lock held; returns with it released.
 */
static void xcache_finalize_locked(struct xcache *c, struct xcache_entry *e)
{
	e->finalizing = true;
	/* Without the hook nobody can revive it: release at once. */
	while (c->ops.on_finalize) {
		e->refinalize = false;
		pthread_mutex_unlock(&c->lock);
		(void)c->ops.on_finalize(c->priv, e);
		pthread_mutex_lock(&c->lock);
		if (e->state == XCACHE_ACTIVE ||
		    __atomic_load_n(&e->ref, __ATOMIC_ACQUIRE) > 0) {
			/* Kept by on_finalize, re-inserted, or walked. */
			e->finalizing = false;
			pthread_mutex_unlock(&c->lock);
			return;
		}
		/* Kept, used and put again while the hook ran: ask again. */
		if (!e->refinalize)
			break;
	}
	e->finalizing = false;
	if (e->state == XCACHE_EVICTED)
		xcache_evicted_del_locked(c, e);
	else
		c->nr_detached--;
	xcache_set_state(e, XCACHE_FREE);
	c->releases++;
	if (!c->ops.on_put && !c->ops.on_free) {
		cds_list_add_tail(&e->link, &c->limbo);
		c->nr_limbo++;
		pthread_mutex_unlock(&c->lock);
		return;
	}
	pthread_mutex_unlock(&c->lock);

	if (c->ops.on_put)
		c->ops.on_put(c->priv, e);
	if (c->ops.on_free)
		c->ops.on_free(c->priv, e);

	/* Not before the hooks returned: the node may be reused after this. */
	pthread_mutex_lock(&c->lock);
	cds_list_add_tail(&e->link, &c->limbo);
	c->nr_limbo++;
	pthread_mutex_unlock(&c->lock);
}

/*
 * Drop one reference with the lock held; returns with the lock released.
 * Returns -EINVAL (nothing changed) for a double put or for a put of the
 * cache's own reference of an ACTIVE entry.
 */
static int xcache_put_locked(struct xcache *c, struct xcache_entry *e)
{
	uint32_t r = __atomic_load_n(&e->ref, __ATOMIC_RELAXED);

	do {
		if (r == 0 || (r == 1 && e->state == XCACHE_ACTIVE)) {
			pthread_mutex_unlock(&c->lock);
			return -EINVAL;
		}
	} while (!__atomic_compare_exchange_n(
	    &e->ref, &r, r - 1, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
	if (r > 1 || e->finalizing) {
		if (r == 1)
			e->refinalize = true;
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	xcache_finalize_locked(c, e);
	return 0;
}

int xcache_put(struct xcache *c, struct xcache_entry *e)
{
	uint32_t r;

	if (!c || !e)
		return -EINVAL;
	r = __atomic_load_n(&e->ref, __ATOMIC_RELAXED);
	while (r > 1) {
		if (__atomic_compare_exchange_n(&e->ref, &r, r - 1, true,
						__ATOMIC_RELEASE,
						__ATOMIC_RELAXED))
			return 0;
	}
	if (r == 0)
		return -EINVAL;
	/* Possibly the last reference: decide under the lock. */
	pthread_mutex_lock(&c->lock);
	return xcache_put_locked(c, e);
}

/* After an eviction, with the lock released: post_evict, then the
 * cache's reference goes. */
static void xcache_finish_eviction(struct xcache *c, struct xcache_entry *v)
{
	if (c->ops.post_evict)
		c->ops.post_evict(c->priv, v);
	(void)xcache_put(c, v);
}

/* --- public API --- */

void xcache_thread_register(void)
{
	urcu_memb_register_thread();
}

void xcache_thread_unregister(void)
{
	urcu_memb_unregister_thread();
}

static unsigned long xcache_pow2(uint64_t n)
{
	unsigned long p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

/*
 * The pool is one array touched at random by lookups; for big caches it is
 * mapped 2 MiB-aligned and advised for transparent huge pages, so that a
 * lookup in a 1 M-entry cache costs cache misses but not also TLB misses.
 * The advice is best effort (THP may be disabled). Memory is zeroed.
 */
#define XCACHE_HUGE (2UL << 20)

static void *xcache_map_pool(size_t len, size_t *map_len)
{
	size_t total = len + XCACHE_HUGE;
	uintptr_t p, aligned;
	void *m;

	m = mmap(NULL, total, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	p = (uintptr_t)m;
	aligned = (p + XCACHE_HUGE - 1) & ~(XCACHE_HUGE - 1);
	/* Give back the unaligned head and the unused tail. */
	if (aligned > p)
		munmap(m, aligned - p);
	if (p + total > aligned + len)
		munmap((void *)(aligned + len), p + total - (aligned + len));
	(void)madvise((void *)aligned, len, MADV_HUGEPAGE);
	*map_len = len;
	return (void *)aligned;
}

static void xcache_free_struct(struct xcache *c)
{
	free(c->ev_buckets);
	if (c->nodes_map_len)
		munmap(c->nodes, c->nodes_map_len);
	else
		free(c->nodes);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int xcache_create(const struct xcache_config *cfg, struct xcache **out)
{
	struct xcache *c;
	unsigned long size;
	uint64_t nr_nodes, i;
	size_t len;
	int err;

	if (!cfg || !out || cfg->capacity == 0)
		return -EINVAL;
	nr_nodes = cfg->nr_nodes ? cfg->nr_nodes : 2ULL * cfg->capacity;
	if (nr_nodes <= cfg->capacity || nr_nodes > UINT32_MAX)
		return -EINVAL;

	c = aligned_alloc(XCACHE_CACHELINE, sizeof(*c));
	if (!c)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	err = pthread_mutex_init(&c->lock, NULL);
	if (err) {
		free(c);
		return -err;
	}
	c->capacity = cfg->capacity;
	c->nr_nodes = (uint32_t)nr_nodes;
	if (cfg->ops)
		c->ops = *cfg->ops;
	c->priv = cfg->priv;
	c->gp_epoch = 1; /* fresh nodes have del_epoch 0: reusable */
	CDS_INIT_LIST_HEAD(&c->lru);
	CDS_INIT_LIST_HEAD(&c->free_list);
	CDS_INIT_LIST_HEAD(&c->limbo);

	len = nr_nodes * sizeof(struct xcache_entry);
	if (len >= XCACHE_HUGE) {
		c->nodes = xcache_map_pool(len, &c->nodes_map_len);
	} else {
		c->nodes = aligned_alloc(XCACHE_CACHELINE, len);
		if (c->nodes)
			memset(c->nodes, 0, len);
	}
	size = xcache_pow2(nr_nodes);
	c->ev_buckets = calloc(size, sizeof(*c->ev_buckets));
	if (!c->nodes || !c->ev_buckets) {
		xcache_free_struct(c);
		return -ENOMEM;
	}
	c->ev_mask = size - 1;
	for (i = 0; i < size; i++)
		CDS_INIT_LIST_HEAD(&c->ev_buckets[i]);

	for (i = 0; i < nr_nodes; i++) {
		struct xcache_entry *e = &c->nodes[i];

		e->index = (uint32_t)i;
		xcache_set_state(e, XCACHE_FREE);
		cds_list_add_tail(&e->link, &c->free_list);
		if (c->ops.on_node_init) {
			err = c->ops.on_node_init(c->priv, e->index, &e->priv);
			if (err) {
				xcache_free_struct(c);
				return err < 0 ? err : -err;
			}
		}
	}
	c->nr_free = c->nr_nodes;

	/*
	 * Fixed size, no automatic resize: the active table never holds
	 * more than capacity entries, and a resize would allocate.
	 */
	size = xcache_pow2(cfg->capacity);
	c->active =
	    cds_lfht_new_flavor(size, size, size, 0, &urcu_memb_flavor, NULL);
	if (!c->active) {
		xcache_free_struct(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

int xcache_destroy(struct xcache *c)
{
	struct xcache_entry *e;
	uint32_t i;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	for (i = 0; i < c->nr_nodes; i++) {
		e = &c->nodes[i];
		if (e->finalizing || e->state == XCACHE_EVICTED ||
		    e->state == XCACHE_DETACHED ||
		    (e->state == XCACHE_ACTIVE &&
		     __atomic_load_n(&e->ref, __ATOMIC_ACQUIRE) != 1)) {
			pthread_mutex_unlock(&c->lock);
			return -EBUSY;
		}
	}
	while (!cds_list_empty(&c->lru)) {
		e = cds_list_first_entry(&c->lru, struct xcache_entry, link);
		xcache_active_del_locked(c, e);
		__atomic_store_n(&e->ref, 0, __ATOMIC_RELAXED);
		xcache_set_state(e, XCACHE_FREE);
		if (c->ops.on_put)
			c->ops.on_put(c->priv, e);
		if (c->ops.on_free)
			c->ops.on_free(c->priv, e);
	}
	pthread_mutex_unlock(&c->lock);
	/* No readers are allowed now, but be safe against late ones. */
	urcu_memb_synchronize_rcu();
	cds_lfht_destroy(c->active, NULL);
	xcache_free_struct(c);
	return 0;
}

int xcache_lookup(struct xcache *c, const char *name, struct xcache_entry **out)
{
	struct xcache_key key;
	int err;

	if (!c || !out)
		return -EINVAL;
	err = xcache_check_name(name, &key.len);
	if (err)
		return err;
	key.name = name;
	key.c = c;
	if (!xcache_lookup_get(c, &key, xcache_hash(name, key.len), out))
		return -ENOENT;
	return 0;
}

/*
 * Pick a hash-table node of e that no reader can still be standing on:
 * node 0 whenever it is free of readers (it shares the first line with
 * what a hit reads; a lookup that finds node 1 reads the cold part too),
 * node 1 only for an entry re-inserted within the grace period of its
 * eviction.
 */
static uint8_t xcache_reinsert_slot_locked(struct xcache *c,
					   struct xcache_entry *e)
{
	if (e->del_epoch[0] < c->gp_epoch)
		return 0;
	if (e->del_epoch[1] < c->gp_epoch)
		return 1;
	/* Both moved within this grace period: rare, wait for it. */
	xcache_grace_period_locked(c);
	return 0;
}

int xcache_insert(struct xcache *c, const char *name, struct xcache_entry **out,
		  enum xcache_insert_how *how)
{
	struct xcache_entry *e, *victim = NULL;
	enum xcache_insert_how result;
	struct xcache_key key;
	uint64_t hash;
	uint8_t slot;
	int err;

	if (!c || !out)
		return -EINVAL;
	err = xcache_check_name(name, &key.len);
	if (err)
		return err;
	key.name = name;
	key.c = c;
	hash = xcache_hash(name, key.len);

	if (xcache_lookup_get(c, &key, hash, &e)) {
		result = XCACHE_FOUND;
		goto done;
	}

	pthread_mutex_lock(&c->lock);
	urcu_memb_read_lock();
	e = xcache_active_find(c, &key, hash);
	urcu_memb_read_unlock();
	if (e) {
		/* Inserted meanwhile; ACTIVE under the lock means ref >= 1. */
		xcache_get(e);
		xcache_touch(e);
		result = XCACHE_FOUND;
		goto unlock;
	}

	/* Usually nothing is evicted: spare the cold bucket. */
	e = c->nr_evicted ? xcache_evicted_find_locked(c, &key, hash) : NULL;
	if (e) {
		slot = xcache_reinsert_slot_locked(c, e);
		xcache_evicted_del_locked(c, e);
		if (c->nr_active == c->capacity) {
			victim = xcache_clock_victim_locked(c);
			xcache_evict_locked(c, victim);
		}
		/* One for the cache, one for the caller. */
		__atomic_add_fetch(&e->ref, 2, __ATOMIC_RELAXED);
		xcache_active_add_locked(c, e, slot);
		c->reinsertions++;
		if (c->ops.on_reinsert)
			c->ops.on_reinsert(c->priv, e);
		result = XCACHE_REINSERTED;
		goto unlock;
	}

	e = xcache_pool_get_locked(c);
	if (!e) {
		pthread_mutex_unlock(&c->lock);
		return -EAGAIN;
	}
	memcpy(e->name, name, key.len);
	e->name[key.len] = '\0';
	e->name_len = (uint16_t)key.len;
	e->hash = hash;
	e->del_epoch[0] = 0;
	e->del_epoch[1] = 0;
	e->finalizing = false;
	e->refinalize = false;
	if (c->ops.on_init) {
		err = c->ops.on_init(c->priv, e);
		if (err < 0) {
			/* Never published: straight back to the free list. */
			cds_list_add(&e->link, &c->free_list);
			c->nr_free++;
			pthread_mutex_unlock(&c->lock);
			return err;
		}
	}
	if (c->nr_active == c->capacity) {
		victim = xcache_clock_victim_locked(c);
		xcache_evict_locked(c, victim);
	}
	__atomic_store_n(&e->ref, 2, __ATOMIC_RELAXED);
	xcache_active_add_locked(c, e, 0);
	c->inserts++;
	result = XCACHE_INSERTED;
unlock:
	pthread_mutex_unlock(&c->lock);
	if (victim)
		xcache_finish_eviction(c, victim);
done:
	*out = e;
	if (how)
		*how = result;
	return 0;
}

/* Take e out of its table. Lock held; returns with it released. */
static int xcache_remove_locked(struct xcache *c, struct xcache_entry *e)
{
	switch (e->state) {
	case XCACHE_ACTIVE:
		xcache_active_del_locked(c, e);
		xcache_set_state(e, XCACHE_DETACHED);
		c->nr_detached++;
		/* The cache's reference goes now. */
		return xcache_put_locked(c, e);
	case XCACHE_EVICTED:
		xcache_evicted_del_locked(c, e);
		xcache_set_state(e, XCACHE_DETACHED);
		c->nr_detached++;
		pthread_mutex_unlock(&c->lock);
		return 0;
	default:
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
}

int xcache_remove(struct xcache *c, struct xcache_entry *e)
{
	if (!c || !e)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	return xcache_remove_locked(c, e);
}

int xcache_invalidate(struct xcache *c, const char *name)
{
	struct xcache_entry *e;
	struct xcache_key key;
	uint64_t hash;
	int err;

	if (!c)
		return -EINVAL;
	err = xcache_check_name(name, &key.len);
	if (err)
		return err;
	key.name = name;
	key.c = c;
	hash = xcache_hash(name, key.len);

	/* Find and detach in one lock hold: the entry cannot change hands. */
	pthread_mutex_lock(&c->lock);
	urcu_memb_read_lock();
	e = xcache_active_find(c, &key, hash);
	urcu_memb_read_unlock();
	if (!e && c->nr_evicted)
		e = xcache_evicted_find_locked(c, &key, hash);
	if (!e) {
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
	return xcache_remove_locked(c, e);
}

int xcache_evict_lru(struct xcache *c)
{
	struct xcache_entry *v;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	v = xcache_clock_victim_locked(c);
	if (!v) {
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
	xcache_evict_locked(c, v);
	pthread_mutex_unlock(&c->lock);
	xcache_finish_eviction(c, v);
	return 0;
}

int xcache_peek_and_get_lru(struct xcache *c, struct xcache_entry **out)
{
	struct xcache_entry *v;

	if (!c || !out)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	v = xcache_clock_victim_locked(c);
	if (v)
		xcache_get(v);
	pthread_mutex_unlock(&c->lock);
	if (!v)
		return -ENOENT;
	*out = v;
	return 0;
}

int xcache_for_each(struct xcache *c, unsigned int tables,
		    int (*fn)(struct xcache *c, struct xcache_entry *e,
			      void *arg),
		    void *arg)
{
	struct xcache_entry *e;
	uint32_t i;
	bool take;
	int ret;

	if (!c || !fn ||
	    (tables & ~(XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED)))
		return -EINVAL;
	for (i = 0; i < c->nr_nodes; i++) {
		e = &c->nodes[i];
		pthread_mutex_lock(&c->lock);
		take = (e->state == XCACHE_ACTIVE &&
			(tables & XCACHE_TABLE_ACTIVE)) ||
		       (e->state == XCACHE_EVICTED &&
			(tables & XCACHE_TABLE_EVICTED));
		/*
		 * Under the lock an indexed entry cannot be released, even at
		 * ref 0 (finalizing): a reference taken here keeps it.
		 */
		if (take)
			xcache_get(e);
		pthread_mutex_unlock(&c->lock);
		if (!take)
			continue;
		ret = fn(c, e, arg);
		(void)xcache_put(c, e);
		if (ret)
			return ret;
	}
	return 0;
}

void xcache_get_stats(struct xcache *c, struct xcache_stats *st)
{
	pthread_mutex_lock(&c->lock);
	st->capacity = c->capacity;
	st->nr_nodes = c->nr_nodes;
	st->nr_active = c->nr_active;
	st->nr_evicted = c->nr_evicted;
	st->nr_detached = c->nr_detached;
	st->nr_free = c->nr_free;
	st->nr_limbo = c->nr_limbo;
	st->inserts = c->inserts;
	st->evictions = c->evictions;
	st->reinsertions = c->reinsertions;
	st->releases = c->releases;
	st->grace_periods = c->grace_periods;
	pthread_mutex_unlock(&c->lock);
}

const char *xcache_entry_name(const struct xcache_entry *e)
{
	return e->name;
}

void *xcache_entry_priv(const struct xcache_entry *e)
{
	return e->priv;
}

uint32_t xcache_entry_index(const struct xcache_entry *e)
{
	return e->index;
}

uint32_t xcache_entry_refcount(const struct xcache_entry *e)
{
	return __atomic_load_n(&e->ref, __ATOMIC_RELAXED);
}

enum xcache_state xcache_entry_state(const struct xcache_entry *e)
{
	return (enum xcache_state)__atomic_load_n(&e->state, __ATOMIC_RELAXED);
}

struct xcache_entry *xcache_node(struct xcache *c, uint32_t index)
{
	if (!c || index >= c->nr_nodes)
		return NULL;
	return &c->nodes[index];
}
