/* SPDX-License-Identifier: MIT */
#ifndef XCACHE_H
#define XCACHE_H
/*
 * xcache: a bounded cache of named entries, after the xcache of the cached
 * thesis (sections 5.2 and 6.1), rebuilt so that a hit takes no lock.
 *
 * Model
 * - A pool of nr_nodes entries is allocated at xcache_create(); nothing is
 *   allocated afterwards. At most `capacity` entries are ACTIVE (indexed
 *   by name in the active table); entries evicted while someone still
 *   holds a reference are EVICTED (indexed in the evicted table) until
 *   their last reference goes; invalidated entries are DETACHED (in no
 *   table) until then. nr_nodes > capacity leaves room for evicted and
 *   detached entries and for freed entries waiting for a grace period.
 * - Names are 1..XCACHE_NAME_MAX bytes, NUL-terminated, compared bytewise.
 * - Reference counts (thesis table 6.1): insert gives the cache one
 *   reference and the caller one; lookup takes one; xcache_put() drops
 *   one; eviction and invalidation drop the cache's. An ACTIVE entry
 *   therefore has ref >= 1; an entry is released only when ref is 0 and
 *   on_finalize did not keep it.
 * - Re-insertion: xcache_insert() of a name that is EVICTED brings that
 *   same entry back (same priv, same pending work) instead of creating a
 *   second one; a name that is ACTIVE returns the existing entry.
 * - Implicit eviction: inserting into a full cache evicts one entry in the
 *   same critical section as the insert.
 *
 * Replacement policy: CLOCK (second chance) over a doubly linked list.
 * A hit only sets the entry's referenced bit (a relaxed store, skipped if
 * already set), so hits from many threads never write shared state. The
 * eviction path takes the entry at the LRU end; if its bit is set it clears
 * it, moves the entry to the MRU end and looks again. This is LRU in which
 * an entry's recency is updated when the eviction scan reaches it rather
 * than at each hit: among entries not hit since the scan last passed them
 * the least recently inserted/moved goes first, and an entry hit at least
 * once since then is kept. Insert, touch, remove and evict are O(1)
 * (evict amortised: each second chance consumes one bit set by a hit; the
 * scan is bounded by the number of active entries).
 *
 * Concurrency
 * - Threads must be registered with liburcu's memb flavour
 *   (xcache_thread_register(), or urcu_memb_register_thread()) before they
 *   call any xcache function, and must not call xcache_insert() or
 *   xcache_destroy() inside an RCU read-side critical section (they may
 *   wait for a grace period).
 * - xcache_lookup() and the common xcache_put() take no lock: an RCU
 *   lookup in a liburcu lock-free hash table (cds_lfht), a reference taken
 *   with an atomic increment-if-not-zero, the referenced bit set.
 * - Everything that changes the tables or the list (insert, eviction,
 *   invalidate, remove, the put that drops the last reference) takes the
 *   cache's mutex; a hit never touches it. (The thesis' xcache took its
 *   lock for every lookup as well, and did not scale past two threads.)
 * - Freed entries return to the pool only after an RCU grace period, so a
 *   reader that found an entry in the table before it was removed never
 *   sees it renamed; the grace period is waited for (synchronize_rcu) when
 *   the free list runs empty, once for all entries freed since the last
 *   one, inside xcache_insert(). Re-inserting an entry within the grace
 *   period of its eviction uses its second hash-table node; only a third
 *   move within one grace period waits.
 * - Memory ordering: the insert that publishes an entry (and on_init's
 *   writes) happens before a lookup that finds it; xcache_put() releases,
 *   and the release of an entry happens after all puts.
 *
 * Hooks (all optional; cache_priv is xcache_config.priv). "Locked" hooks
 * run with the cache mutex held: they must be short and may call only
 * xcache_get(), xcache_entry_*() and xcache_touch(). The others run with no
 * xcache lock held and may call anything.
 *   on_node_init  once per pool node in xcache_create(), sets the node's
 *                 priv (kept for the node's whole life). Non-zero return
 *                 fails xcache_create() with that error.
 *   on_init       locked; a new entry got its name, before it is visible.
 *                 A negative return fails the insert with that error and
 *                 changes nothing (no other hook is called).
 *   on_evict      locked; the entry has just moved from the active to the
 *                 evicted table (the cache still holds its reference).
 *   post_evict    unlocked, right after the eviction, still before the
 *                 cache's reference is dropped (the entry cannot vanish
 *                 during the hook).
 *   on_reinsert   locked; an EVICTED entry is ACTIVE again.
 *   on_finalize   unlocked; the entry (EVICTED or DETACHED) reached zero
 *                 references. Return true to keep it alive, after taking a
 *                 reference with xcache_get() (e.g. to flush dirty data);
 *                 its later last put calls on_finalize again. Return false
 *                 to let it go. It may be re-inserted concurrently, in
 *                 which case it is not released whatever the hook returns.
 *   on_put        unlocked; the entry has left the cache for good (no
 *                 table, no references).
 *   on_free       unlocked; right after on_put, the node is about to go
 *                 back to the pool: it is put there when on_free returns
 *                 (and reused after a grace period), so an insert made
 *                 from inside on_free may still find the pool empty.
 * Order for one entry: on_init, then any number of (on_evict, post_evict
 * [, on_finalize...] , on_reinsert) cycles, then on_finalize (once per time
 * ref reaches 0 while not ACTIVE), on_put, on_free; xcache_invalidate()
 * and xcache_remove() call no hook themselves. An insert into a full
 * cache calls on_init(new) (or, for a re-insertion, nothing yet), then
 * on_evict(victim), then on_reinsert(entry) if re-inserting, then, after
 * the mutex is dropped, post_evict(victim), then the victim's finalize
 * chain if the cache held its last reference.
 *
 * Errors: functions return 0 or a negative errno; on error nothing changed.
 */
#include <stdbool.h>
#include <stdint.h>

#define XCACHE_NAME_MAX 255

struct xcache;
struct xcache_entry;

struct xcache_ops {
	int (*on_node_init)(void *cache_priv, uint32_t index,
			    void **entry_priv);
	int (*on_init)(void *cache_priv, struct xcache_entry *e);
	void (*on_evict)(void *cache_priv, struct xcache_entry *e);
	void (*post_evict)(void *cache_priv, struct xcache_entry *e);
	void (*on_reinsert)(void *cache_priv, struct xcache_entry *e);
	bool (*on_finalize)(void *cache_priv, struct xcache_entry *e);
	void (*on_put)(void *cache_priv, struct xcache_entry *e);
	void (*on_free)(void *cache_priv, struct xcache_entry *e);
};

struct xcache_config {
	uint32_t capacity;	      /* max ACTIVE entries, >= 1 */
	uint32_t nr_nodes;	      /* pool size, > capacity; 0: 2x */
	const struct xcache_ops *ops; /* may be NULL; copied */
	void *priv;		      /* cache_priv passed to hooks */
};

/* How xcache_insert() satisfied the request. */
enum xcache_insert_how {
	XCACHE_INSERTED = 1,   /* a new entry was created */
	XCACHE_FOUND = 2,      /* the name was ACTIVE: existing entry */
	XCACHE_REINSERTED = 3, /* the name was EVICTED: it is ACTIVE again */
};

/* Entry states, as reported by xcache_entry_state(). */
enum xcache_state {
	XCACHE_FREE = 0,     /* in the pool */
	XCACHE_ACTIVE = 1,   /* in the active table */
	XCACHE_EVICTED = 2,  /* in the evicted table, referenced */
	XCACHE_DETACHED = 3, /* invalidated/removed, still referenced */
};

/* Table selection for xcache_for_each(). */
#define XCACHE_TABLE_ACTIVE  1u
#define XCACHE_TABLE_EVICTED 2u

struct xcache_stats {
	uint32_t capacity;
	uint32_t nr_nodes;
	uint32_t nr_active;
	uint32_t nr_evicted;
	uint32_t nr_detached;
	uint32_t nr_free;  /* in the free list, reusable now */
	uint32_t nr_limbo; /* freed, waiting for a grace period */
	uint64_t inserts;
	uint64_t evictions;
	uint64_t reinsertions;
	uint64_t releases;	/* entries given back to the pool */
	uint64_t grace_periods; /* synchronize_rcu calls by the pool */
};

/* Register/unregister the calling thread with liburcu (memb flavour). */
void xcache_thread_register(void);
void xcache_thread_unregister(void);

/*
 * Create a cache. Returns 0 and *out, -EINVAL (capacity 0, nr_nodes <=
 * capacity, NULL cfg/out), -ENOMEM, or the error of on_node_init (then
 * nothing is left allocated). Need not be called from a registered thread.
 */
int xcache_create(const struct xcache_config *cfg, struct xcache **out);

/*
 * Destroy the cache. Returns -EBUSY (nothing changed) if any entry is
 * referenced by a user (ACTIVE with ref > 1, EVICTED or DETACHED) or being
 * finalized. Otherwise releases the remaining ACTIVE entries calling
 * on_put and on_free for each (no eviction hooks), frees everything and
 * returns 0. No other thread may use the cache concurrently or afterwards.
 * Must be called from a registered thread, outside a read-side section.
 */
int xcache_destroy(struct xcache *c);

/*
 * Find an ACTIVE entry by name and take a reference. Lock-free. Returns 0
 * and *out, -ENOENT (not active; evicted entries are not returned),
 * -EINVAL (NULL argument or empty name) or -ENAMETOOLONG. Marks the entry
 * referenced for the replacement policy. An eviction racing with the
 * lookup may leave the caller holding an entry that is EVICTED by the
 * time it looks (as if the lookup had come just before the eviction).
 */
int xcache_lookup(struct xcache *c, const char *name,
		  struct xcache_entry **out);

/*
 * Get the entry for name, creating it if needed; the caller gets one
 * reference in every successful case. If the name is ACTIVE, returns it
 * (*how = XCACHE_FOUND, no allocation, usually no lock). If it is EVICTED,
 * makes that entry ACTIVE again (XCACHE_REINSERTED, on_reinsert). Otherwise
 * claims a pool node, names it, calls on_init and publishes it
 * (XCACHE_INSERTED). When a new or re-inserted entry finds the active
 * table full, the replacement policy's victim is evicted in the same
 * critical section (see the hook order above).
 * Errors: -EINVAL, -ENAMETOOLONG, -EAGAIN (every pool node is in use by
 * active or referenced entries, and none waits for reuse; nothing changed:
 * retry after puts, or after xcache_evict_lru() has released an
 * unreferenced entry; size nr_nodes >= capacity + the number of evicted
 * entries that may stay referenced + 1 to avoid it), or the
 * error returned by on_init. how may be NULL.
 */
int xcache_insert(struct xcache *c, const char *name, struct xcache_entry **out,
		  enum xcache_insert_how *how);

/*
 * Drop one reference. Lock-free unless this may be the last reference of
 * a non-active entry; the last one runs the finalize chain (on_finalize,
 * then on_put and on_free unless kept) in the calling thread. Returns 0,
 * or -EINVAL (nothing changed) for NULL arguments, an entry with no
 * reference (a double put) or a put that would take the cache's own
 * reference of an ACTIVE entry.
 */
int xcache_put(struct xcache *c, struct xcache_entry *e);

/*
 * Take one more reference. The caller must already hold one, or be inside
 * this entry's on_finalize. Lock-free.
 */
void xcache_get(struct xcache_entry *e);

/* Mark the entry recently used (what a hit does). Lock-free. */
void xcache_touch(struct xcache_entry *e);

/*
 * Take the entry for name out of the cache, from whichever table holds
 * it; it becomes DETACHED and is released when its last reference goes
 * (through on_finalize, on_put, on_free). A later insert of the name
 * creates a new entry. No eviction hooks are called. Returns 0, -ENOENT,
 * -EINVAL or -ENAMETOOLONG.
 */
int xcache_invalidate(struct xcache *c, const char *name);

/*
 * As xcache_invalidate() but for an entry the caller holds a reference
 * to. Returns 0, -EINVAL (NULL), or -ENOENT if the entry is not in a table
 * (already DETACHED).
 */
int xcache_remove(struct xcache *c, struct xcache_entry *e);

/*
 * Evict the replacement policy's victim now (on_evict, post_evict, and
 * its finalize chain if unreferenced). Returns 0, or -ENOENT if no entry
 * is active.
 */
int xcache_evict_lru(struct xcache *c);

/*
 * Return, with a reference taken, the entry xcache_evict_lru() would
 * evict next, without evicting it (the scan may give second chances, as
 * an eviction would). Returns 0 and *out, -EINVAL, or -ENOENT if empty.
 */
int xcache_peek_and_get_lru(struct xcache *c, struct xcache_entry **out);

/*
 * Call fn(c, e, arg) for every entry in the selected tables
 * (XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED) at the time its pool slot is
 * visited; for shutdown (e.g. evict everything and wait for flushes).
 * fn runs with no lock held and with a reference on e that is dropped
 * after fn returns; fn may evict, invalidate, put or insert. Entries
 * inserted during the walk may or may not be visited. A non-zero return of
 * fn stops the walk and is returned. Returns 0, -EINVAL.
 */
int xcache_for_each(struct xcache *c, unsigned int tables,
		    int (*fn)(struct xcache *c, struct xcache_entry *e,
			      void *arg),
		    void *arg);

/* Snapshot of counters, consistent (taken under the mutex). */
void xcache_get_stats(struct xcache *c, struct xcache_stats *st);

/* Entry accessors; valid while the caller holds a reference (or in hooks).*/
const char *xcache_entry_name(const struct xcache_entry *e);
void *xcache_entry_priv(const struct xcache_entry *e);
uint32_t xcache_entry_index(const struct xcache_entry *e);
/* Snapshots, for diagnosis and tests. */
uint32_t xcache_entry_refcount(const struct xcache_entry *e);
enum xcache_state xcache_entry_state(const struct xcache_entry *e);
/* The pool node with this index (0..nr_nodes-1), or NULL. No reference. */
struct xcache_entry *xcache_node(struct xcache *c, uint32_t index);

#endif /* XCACHE_H */
