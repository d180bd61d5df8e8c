/* SPDX-License-Identifier: MIT */
#ifndef CACHED_H
#define CACHED_H
/*
 * cached: the object cache peer. Internal contract between the bucket pool
 * (bucket.c), the per-object state machine (object.c) and the peer glue
 * (cached.c). docs/cached.md describes the design; this header states who
 * owns what and which thread may touch it.
 *
 * Model
 * - An object (struct cached_obj) is the private part of an xcache entry.
 *   It is split into nr_slots slots of bucket_size bytes; a slot holds the
 *   index of a bucket of the preallocated pool (allocation state CLAIMED)
 *   or CACHED_NO_BUCKET (FREE). A claimed bucket has a data state
 *   (enum cached_bstate); obj->counts[] counts the claimed buckets of each
 *   data state, so "is it clean", "is anything loading" are O(1).
 * - Everything in an object (slots, states, counters, waiters, flush
 *   book-keeping) is touched only by jobs of the object's xworkq, so it
 *   needs no lock. The only exceptions: the xcache hook on_put (the
 *   object has no reference then, hence no job can run) and the global
 *   counters, which are atomics. on_finalize runs unlocked while another
 *   thread may re-insert the object and start jobs on it, so it reads
 *   only atomics and leaves the decision to a job (see hook_finalize).
 * - Who holds an object reference: every client request context (cio)
 *   working on it, every request to the next port in flight for it
 *   (nreq), and the flush that keeps an evicted dirty object alive
 *   (obj->kept). The object's buckets go back to the pool in on_put,
 *   i.e. when nobody can use them any more.
 * - Requests to the next port come from a fixed pool of max_inflight
 *   xseg requests taken at start-up (nreq): at most that many are in
 *   flight, whatever the amount of dirty data, and the segment's request
 *   pool is never drained by cached. Work that finds the pool empty is
 *   parked in c->nreq_waitq and resumed when one is returned.
 * - Work that finds no free bucket (or no free xcache node) drops its
 *   object reference, evicts the least recently used object and is parked
 *   in c->space_waitq; it restarts from the lookup when space is freed.
 *   Holding nothing while waiting is what makes this deadlock-free.
 *   While the next port refuses writes (cached_space_refused) such work
 *   does not wait: reads are served uncached, the rest fails with the
 *   next port's errno (cio_space_fail in object.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "xcache.h"
#include "xseg.h"
#include "xwaitq.h"
#include "xworkq.h"

#define CACHED_NO_BUCKET UINT32_MAX
/* Flush errors are reported once per errno per this long (io->flush_error);
 * errnos from CACHED_FERR_SLOTS - 1 up share the last slot. */
#define CACHED_FLUSH_ERROR_LOG_NS (60ULL * 1000000000ULL)
#define CACHED_FERR_SLOTS	  136
/* Objects of at most this many slots keep them inside struct cached_obj
 * (e.g. 4 KiB .. 32 KiB objects of 4 KiB buckets). */
#define CACHED_INLINE_SLOTS 8

/* Slots of the name fence of uncached DELETEs (struct cached, fence):
 * names sharing a slot only wait for each other's DELETE. */
#define CACHED_FENCE_SLOTS 64

/* Data state of a claimed bucket. */
enum cached_bstate {
	CACHED_B_INVALID = 0, /* claimed, contents unknown */
	CACHED_B_LOADING,     /* a read from the next port will fill it */
	CACHED_B_VALID,	      /* same contents as the next port */
	CACHED_B_DIRTY,	      /* newer than the next port */
	CACHED_B_WRITING,     /* being written to the next port */
	CACHED_B_NR_STATES
};

/* Object state. */
enum cached_ostate {
	CACHED_O_READY = 0,   /* usable, no flush in flight */
	CACHED_O_FLUSHING,    /* a flush round is in flight */
	CACHED_O_DELETING,    /* a DELETE/COPY waits for a flush to end */
	CACHED_O_INVALIDATED, /* removed from the cache; requests that
				 still hold it look the name up again */
	CACHED_O_FAILED,      /* the last flush round failed; dirty data
				 stays dirty and is retried */
};

/* Values of cached_obj.acked[] for a DIRTY or WRITING bucket (0 for any
 * other state). */
enum cached_ack {
	CACHED_ACK_NONE = 0,  /* a write-through/FUA write waits for it, or
				 clean */
	CACHED_ACK_WRITEBACK, /* acknowledged write-back data: a loss if
				 cached dies before the next port has it */
	CACHED_ACK_FAILED,    /* written only by write-through/FUA writes
				 whose round failed: never acknowledged */
};

enum cached_policy {
	CACHED_WRITEBACK = 0,
	CACHED_WRITETHROUGH = 1,
};

/* ------------------------------------------------------------------------
 * Bucket pool (bucket.c). Thread-safe (a mutex around a stack of free
 * indexes: taken once per request, not per bucket).
 */
struct cached_pool {
	unsigned char *data; /* nr * bucket_size bytes, mmap'd */
	uint64_t map_len;    /* >= nr * bucket_size: rounded to a huge page */
	uint32_t bucket_size;
	uint32_t nr;
	uint32_t *free_stack;
	uint32_t nr_free; /* __atomic loads outside the lock */
	pthread_mutex_t lock;
};

/* Map nr buckets of bucket_size bytes at an address aligned to the
 * transparent huge page size (the map rounded up to a multiple of it) and
 * advise huge pages before any page is touched, so that a kernel in THP
 * "madvise" mode backs the pool with huge pages; prefault: then write
 * every page now, so the first pass over the cache does not pay page
 * faults. Returns 0, -EINVAL (nr or bucket_size 0, size overflow),
 * -ENOMEM. */
int cached_pool_init(struct cached_pool *pool, uint32_t nr,
		     uint32_t bucket_size, bool prefault);
void cached_pool_destroy(struct cached_pool *pool);
/* Take n buckets into out[], all or none. Returns 0 or -ENOSPC. */
int cached_pool_get(struct cached_pool *pool, uint32_t *out, uint32_t n);
/* Give every entry of slot[0..n) that holds CACHED_NO_BUCKET a bucket,
 * all or none; need is how many such entries there are (the caller
 * counted them). Returns 0 or -ENOSPC (slot[] unchanged). Allocates
 * nothing, so a claim of any size fails only for want of buckets. */
int cached_pool_get_slots(struct cached_pool *pool, uint32_t *slot, uint32_t n,
			  uint32_t need);
/* Return n buckets. */
void cached_pool_put(struct cached_pool *pool, const uint32_t *idx, uint32_t n);

/* Zeroed memory for one of cached's big fixed arrays (the objects, the
 * flush waiters): nmemb * size bytes. At least one transparent huge page
 * of them is mapped as the bucket pool is (2 MiB aligned, MADV_HUGEPAGE
 * before the first touch, so a kernel in THP "madvise" mode backs it with
 * huge pages and a random access costs no 4 KiB TLB miss walk); smaller
 * arrays are calloc'd. *map_len is the mapping's length, 0 for calloc'd
 * memory; give both to cached_huge_free. Returns NULL (errno ENOMEM) on
 * failure or when the size overflows. Any thread. */
void *cached_huge_calloc(uint64_t nmemb, uint64_t size, uint64_t *map_len);
void cached_huge_free(void *p, uint64_t map_len);
static inline uint32_t cached_pool_nr_free(const struct cached_pool *pool)
{
	return __atomic_load_n(&pool->nr_free, __ATOMIC_ACQUIRE);
}
static inline unsigned char *cached_pool_bucket(struct cached_pool *pool,
						uint32_t idx)
{
	return pool->data + (uint64_t)idx * pool->bucket_size;
}

/* ------------------------------------------------------------------------
 * Objects
 */
struct cached;
struct cached_obj;

/* Something waiting for an event of one object (a load or a flush round
 * completing). Run on the object's workq; fn either finishes or links the
 * waiter again with cached_obj_wait(). */
struct cached_waiter {
	struct cached_waiter *next;
	void (*fn)(struct cached_obj *o, struct cached_waiter *w);
	uint64_t need_seq; /* flush waiters: round that must complete */
};

struct cached_obj {
	struct cached *c;
	struct xcache_entry *entry; /* set in on_init, valid while used */
	struct xworkq wq;
	uint32_t state; /* enum cached_ostate; __atomic for readers
			   outside the workq (stats, tests) */
	uint32_t nr_slots;
	uint32_t *bucket; /* per slot: pool index or CACHED_NO_BUCKET */
	uint8_t *bstate;  /* per slot: enum cached_bstate if claimed */
	/* Per slot (same allocation as bstate), enum cached_ack:
	 * CACHED_ACK_WRITEBACK while the bucket holds write-back data that a
	 * client was told is written and the next port has not
	 * acknowledged. Set by a write-back WRITE before its reply
	 * (cached_obj_mark_acked); cleared, and the count lowered, when the
	 * bucket leaves DIRTY/WRITING: WRITING -> VALID after the next port
	 * acknowledged the flush write (a DELETE/COPY target is flushed that
	 * way before its operation is sent: acknowledged data is never
	 * dropped unwritten, review9 R9-8). A failed flush (WRITING ->
	 * DIRTY) keeps it. A write-through or FUA write never sets it (it
	 * is acknowledged only after the next port's reply); one that
	 * rewrites an acknowledged bucket leaves it set.
	 * CACHED_ACK_FAILED: a flush write of a bucket no write-back write
	 * touched failed, so its data comes only from write-through/FUA
	 * writes that were (or will be) answered with the error (review11
	 * N-C). Not a loss if cached dies (not in the unflushed count),
	 * counted in c->failed_buckets instead; still served and retried
	 * like any dirty data; dropped at shutdown when it cannot be written
	 * (cached_drop_failed). A write-back write over it makes it
	 * CACHED_ACK_WRITEBACK (a bucket with both is counted as
	 * acknowledged). */
	uint8_t *acked;
	/* Slot storage of an object of at most CACHED_INLINE_SLOTS slots
	 * (bucket, bstate and acked point here; larger objects use one
	 * malloc'd block): right after the pointers, so a hit on a small
	 * object reads its slots from the lines it already loaded. */
	uint32_t inline_bucket[CACHED_INLINE_SLOTS];
	uint8_t inline_bstate[CACHED_INLINE_SLOTS];
	uint8_t inline_acked[CACHED_INLINE_SLOTS];
	uint32_t counts[CACHED_B_NR_STATES];
	uint32_t nr_claimed; /* written with __atomic stores: the eviction
				hook reads it from another thread */
	/* NOCACHE writes of this object in flight at the next port: cached
	 * reads and writes of the object wait until they are done, so no
	 * fetch can cache data older than such a write. (Read by every hit,
	 * as fenced: kept in the lines of the slots, not at the end.) */
	uint32_t nocache_inflight;
	/* A DELETE or COPY with this object as target (fence_owner, its
	 * client context) is flushing the object's unflushed data or is at
	 * the next port: every other request of the object waits for its
	 * end (object.c, cio_delete). */
	bool fenced;
	const struct cached_cio *fence_owner;

	/* waiters for loads and flush rounds */
	struct cached_waiter *waiters;

	/* flush rounds: at most one in flight */
	bool flushing;
	bool fua_wanted; /* a FUA write waits: next round writes FUA */
	bool round_fua;
	bool kept;	       /* on_finalize kept it alive for a flush */
	uint32_t away_claimed; /* __atomic: its buckets counted in
				  c->away_buckets (set when evicted, taken
				  back when released or re-inserted) */
	bool nreq_parked;
	uint32_t cursor;	 /* next slot the round scans */
	uint32_t round_inflight; /* writes of the round in flight */
	int round_error;	 /* first error of the round */
	uint64_t seq_started, seq_done;
	int last_round_error;

	uint32_t unclean;	     /* __atomic: DIRTY + WRITING, a hint for
					walkers outside the workq (FLUSH, shutdown) */
	struct xworkq_job kick_job;  /* obj_kick */
	struct xworkq_job final_job; /* on_finalize's decision */
	uint32_t revivals;	     /* __atomic: re-insertions (on_reinsert) */
	uint32_t clean_at; /* __atomic: revivals + 1 when the final job
			      found it clean and unused; 0: never */
	struct xworkq_job unpark_job; /* resume after an nreq wait */
	struct xworkq_job drop_job;   /* cached_drop_failed */
	bool drop_queued;	      /* __atomic */
	bool kick_queued;	      /* __atomic */
	struct xwaitq_job nreq_wjob;

	/* Object size as the next port would report it (INFO answered from
	 * the cache): size is the next port's answer to our own INFO,
	 * write_end the end of everything written through this entry
	 * (exact: a flush writes the last bucket only up to write_end, so
	 * the next port's size grows exactly as the client's writes). The
	 * size is max of both. size_gen moves on whenever the next port's size
	 * may have changed behind our back (a failed NOCACHE write), so an INFO
	 * answer that raced with it is not trusted. Reset by on_init. */
	bool size_known;
	uint64_t size;
	uint64_t write_end;
	uint32_t size_gen;
};

/*
 * The lines of o a request reads first (c, wq, state, the slot pointers,
 * the inline slots, nocache_inflight, fenced: bytes 0 .. fenced, three or
 * four lines at the array's 424-byte stride), prefetched at once as soon
 * as o is known. Without it, over 1 M objects each was a miss of its own
 * in turn: the workq's compare-and-swap on the first is a locked
 * instruction, so the loads of the others started only after it. A hint:
 * it reads nothing (no race with the object's workq).
 */
static inline void cached_obj_prefetch(const struct cached_obj *o)
{
	const char *p = (const char *)o;
	const size_t end = offsetof(struct cached_obj, fenced);

	for (size_t off = 0; off < end; off += 64)
		__builtin_prefetch(p + off);
	__builtin_prefetch(p + end);
}

/* Slot helpers (bucket.c), called on the object's workq. */
/* Give o nr_slots free slots (all CACHED_NO_BUCKET, INVALID, not acked):
 * up to CACHED_INLINE_SLOTS in the object itself, more in one malloc'd
 * block (bucket[], then bstate[] and acked[]). The single place that
 * decides where slots live; cached_obj_free_slots undoes it. Called once
 * per xcache node (hook_node_init), never on a hot path. Returns 0,
 * -EINVAL (nr_slots 0) or -ENOMEM (o unchanged). */
int cached_obj_alloc_slots(struct cached_obj *o, uint32_t nr_slots);
/* Free what cached_obj_alloc_slots allocated (nothing for inline slots);
 * also fine on a zeroed object that never had slots. */
void cached_obj_free_slots(struct cached_obj *o);
/* Change the data state of claimed slot s, keeping counts and the global
 * dirty counter right. */
void cached_obj_set_bstate(struct cached_obj *o, uint32_t s,
			   enum cached_bstate st);
/* A write-back WRITE of slots [first, first+n) (all DIRTY) is about to be
 * acknowledged: set their acked flags and add the number newly set to the
 * unflushed count, in one call (nothing when all were set already: a
 * rewrite of unflushed data costs no atomic). Object's workq. */
void cached_obj_mark_acked(struct cached_obj *o, uint32_t first, uint32_t n);
/* A flush write of slot s (DIRTY again after the failure) failed: if no
 * write-back write is counted in it, mark it CACHED_ACK_FAILED (counted
 * in c->failed_buckets). Object's workq. */
void cached_obj_mark_failed(struct cached_obj *o, uint32_t s);
/* Give back to the pool the buckets of o that hold no unflushed data and
 * are not being loaded (VALID, INVALID): an evicted object kept for its
 * dirty data holds only what it must (review11 N-D: with a store refusing
 * writes, the clean part of such objects was never given back). Returns
 * the number of buckets returned. Object's workq. */
uint32_t cached_obj_release_clean(struct cached_obj *o);
/* Claim a bucket for every free slot in [first, first+n): all or none
 * (-ENOSPC). New buckets are INVALID. */
int cached_obj_claim(struct cached_obj *o, uint32_t first, uint32_t n);
/* Return every claimed bucket to the pool and reset the object to an
 * empty READY state (on_put: no reference, no job). */
void cached_obj_release_all(struct cached_obj *o);
/* Number of free slots in [first, first+n). */
uint32_t cached_obj_unclaimed(const struct cached_obj *o, uint32_t first,
			      uint32_t n);
static inline bool cached_obj_clean(const struct cached_obj *o)
{
	return !o->counts[CACHED_B_DIRTY] && !o->counts[CACHED_B_WRITING];
}
static inline enum cached_ostate cached_obj_state(const struct cached_obj *o)
{
	return (enum cached_ostate)__atomic_load_n(&o->state, __ATOMIC_RELAXED);
}
static inline void cached_obj_set_state(struct cached_obj *o,
					enum cached_ostate st)
{
	__atomic_store_n(&o->state, (uint32_t)st, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------
 * Requests to the next port (nreq) and client request contexts (cio)
 */
enum cached_nreq_kind {
	CACHED_N_FETCH = 1,  /* READ of slots [first, first+n) */
	CACHED_N_WRITE,	     /* flush WRITE of slots [first, first+n) */
	CACHED_N_INFO,	     /* INFO on behalf of client request cio */
	CACHED_N_PASS,	     /* a piece of the NOCACHE WRITE cio */
	CACHED_N_OP,	     /* the DELETE or COPY cio, target = the object */
	CACHED_N_UNCACHED,   /* READ of slots [first, first+n) for the
				uncached READ cio (no bucket involved) */
	CACHED_N_UNC_DELETE, /* the DELETE cio of a name the cache holds
				nothing of, sent with no xcache node (obj
				NULL) under the name fence (object.c,
				cio_delete_uncached) */
};

struct cached_nreq {
	struct xseg_request *req; /* held by cached between uses */
	struct cached_obj *obj;	  /* holds a reference while in flight;
				     NULL for N_UNC_DELETE */
	uint32_t kind;
	uint32_t first, n;
	int error;		/* result, set before the done job runs */
	uint64_t serviced;	/* N_PASS: what the next port reported */
	struct cached_cio *cio; /* N_INFO, N_PASS, N_OP, N_UNCACHED,
				   N_UNC_DELETE: the client request (NULL
				   while free: nreq_put) */
	struct xworkq_job job;
	struct cached_nreq *next_free;
};

enum cached_cio_kind {
	CACHED_C_READ = 1,
	CACHED_C_WRITE,
	CACHED_C_FLUSHWAIT, /* INFO, HASH: flush the object, then forward */
	CACHED_C_DELETE,    /* wait for flushes, fence the name, flush
			       its dirty data, send the DELETE, drop the
			       object on the answer */
	CACHED_C_COPY_SRC,  /* COPY phase 1: flush the source */
	CACHED_C_COPY_DST,  /* COPY phase 2: as DELETE, for the target */
	CACHED_C_FLUSH,	    /* FLUSH: every object (or the target), then
			       forward */
	CACHED_C_INFO,	    /* INFO: from the cache, or ask the next port */
	CACHED_C_NC_READ,   /* NOCACHE READ: flush the range, forward */
	CACHED_C_NC_WRITE,  /* NOCACHE WRITE: flush and drop the range, write
			       it through our requests, complete */
};

struct cached_cio {
	struct cached *c;
	struct xseg_request *req;
	struct cached_obj *obj;	    /* NULL when not attached */
	struct xcache_entry *entry; /* the reference we hold */
	uint32_t kind;
	uint32_t phase;	       /* 0 new, 1 applied/waiting for a round */
	int error;	       /* first error from the next port */
	bool counted;	       /* hit/miss accounted */
	bool fua;	       /* written through with FUA */
	uint8_t parked;	       /* 1 on nreq_waitq, 2 on space_waitq, 3 at
				  the name fence (fence_parked) */
	bool created;	       /* NOCACHE, INFO-NOCACHE, HASH: dispatch
				  created the object (nothing was cached) */
	bool made_entry;       /* a dispatch of this request inserted the
				  name (kept across parks for space: a
				  request failed for space takes out the
				  empty entry it made, cio_space_fail) */
	bool flush_rewalk;     /* FLUSH: the flushwait pool ran out during
				  the walk: walk again when done */
	uint32_t space_need;   /* parked for space: buckets it needs */
	uint64_t pending;      /* FLUSH: objects still flushing (atomic) */
	uint64_t nc_sent;      /* NC_WRITE: bytes handed to the next port */
	uint32_t nc_inflight;  /* NC_WRITE: pieces in flight */
	uint32_t size_gen;     /* INFO: obj->size_gen when asked */
	uint32_t unc_cursor;   /* uncached READ: next slot to serve */
	uint32_t unc_inflight; /* uncached READ: fetches in flight */
	struct cached_cio *fence_next; /* parked at the name fence */
	struct cached_waiter waiter;
	struct xworkq_job job;
	struct xwaitq_job wjob;
	struct cached_cio *next_free;
	/* Names copied once from the request at submission (checked: no
	 * NUL, length in range); everything after uses only these, since
	 * another process may rewrite the request's fields. Not cleared by
	 * cio_get (after next_free). name is "" for a FLUSH without target;
	 * src_name is the COPY source. */
	char name[XSEG_MAX_TARGETLEN + 1];
	char src_name[XSEG_MAX_TARGETLEN + 1];
};

/* ------------------------------------------------------------------------
 * The cache
 */

/* How cached talks to the world: the peer glue supplies the xseg versions,
 * unit tests supply fakes so the state machine runs without a segment. */
struct cached_io_ops {
	void *(*data)(struct cached *c, struct xseg_request *req);
	/* complete a client request (error 0 or positive errno) */
	void (*complete)(struct cached *c, struct xseg_request *req, int error);
	/* hand a client request on to the next port; negative errno if
	 * that failed (the caller then completes it with the error) */
	int (*forward)(struct cached *c, struct xseg_request *req);
	/* submit an nreq (prepared by the caller) to the next port; a
	 * negative errno means it was not sent */
	int (*submit)(struct cached *c, struct cached_nreq *n);
	/* Optional: a flush write to the next port failed with error
	 * (positive errno), or, error 0, one succeeded after failures.
	 * Rate-limited by the cache: called for the first failure with a
	 * given errno, then at most once per CACHED_FLUSH_ERROR_LOG_NS for
	 * it (suppressed: the failures with that errno not reported since
	 * the last call), and once with 0 when writes go through again. The
	 * peer glue logs it (naming the next port). Any thread, from an
	 * object's workq; must not call into the cache. NULL: not logged. */
	void (*flush_error)(struct cached *c, int error, uint64_t suppressed);
	/* Optional: a client request (op, object name) was failed with
	 * error because it needed cache space (a bucket or an xcache node)
	 * the cache could not find while the next port refuses writes (see
	 * cached_space_refused). Rate-limited by the cache as flush_error:
	 * the first failure, then at most once per
	 * CACHED_FLUSH_ERROR_LOG_NS (suppressed: the failures not reported
	 * since the last call). Any thread; must not call into the cache.
	 * NULL: not logged. */
	void (*space_failed)(struct cached *c, uint16_t op, const char *name,
			     int error, uint64_t suppressed);
	/* Optional: add delta to the count of acknowledged write-back
	 * buckets (see cached_obj.acked): the peer glue adds to its port's
	 * unflushed count (xseg_port_unflushed_add), the one word the
	 * reaper of a dead cached reads. NULL: cached keeps the count in
	 * c->unflushed. Called on an object's workq (and from on_put),
	 * with the add before the client's reply is sent and the subtract
	 * after the next port's reply was received; seq_cst. */
	void (*unflushed)(struct cached *c, int64_t delta);
};

struct cached_stats {
	uint64_t hits, misses, partial_hits;
	uint64_t reads, writes;
	uint64_t evictions, flush_rounds, flush_writes, fetches;
	uint64_t bytes_to_next, bytes_from_next;
	uint64_t next_errors; /* errors from the next port, ENOENT aside */
	uint64_t next_enoent; /* ENOENT answers (a read of an object never
				 written: normal, not an error) */
	uint64_t space_waits, nreq_waits;
	uint64_t info_hits, info_asked; /* INFO from the cache / asked */
	uint64_t nocache_reads, nocache_writes;
	uint64_t targeted_flushes; /* FLUSH with a target */
	uint64_t deferred_retries; /* failed flushes of evicted objects left
				      for cached_retry_failed */
	uint64_t failed_retries;   /* objects cached_retry_failed kicked */
	uint64_t uncached_reads;   /* READs served without buckets (no
				      space while flushes fail) */
	uint64_t failed_dropped;   /* buckets of failed write-through/FUA
				      writes dropped (cached_drop_failed) */
	uint64_t space_failed;	   /* requests failed for want of a bucket
				      or an xcache node while the next port
				      refuses writes (cached_space_refused) */
	uint64_t uncached_deletes; /* DELETEs of names the cache holds
				      nothing of, sent with no xcache node
				      while flushes fail */
	uint64_t fence_waits;	   /* requests that waited for an uncached
				      DELETE of their name (or one sharing
				      its fence slot) */
};

struct cached_config {
	uint64_t cache_size;
	uint32_t bucket_size;
	uint64_t object_size;
	uint32_t max_objects;
	uint32_t policy; /* enum cached_policy */
	uint64_t dirty_threshold;
	uint64_t max_req_size;
	uint32_t max_inflight;
	uint32_t nr_cios; /* client contexts: the segment's request count */
	bool prefault;
	/* While flush writes fail with an errno other than ENOSPC, EDQUOT
	 * or EROFS (a next port that is gone or restarting, EIO), requests
	 * wait for cache space at most this long after the first failure of
	 * the run (checked by cached_space_expire, the peer's tick), then
	 * fail with the last flush errno. 0: they wait until the next port
	 * takes writes again. */
	uint64_t space_wait_ns;
};

struct cached {
	struct cached_config cfg;
	uint32_t policy; /* __atomic: unplug switches it at run time */
	uint32_t slots_per_obj;
	uint32_t max_req_slots;
	const struct cached_io_ops *io;
	void *io_priv;

	struct xcache *cache;
	struct cached_pool pool;
	struct cached_obj *objs; /* one per xcache node */
	uint64_t objs_map_len;	 /* cached_huge_calloc */
	uint32_t nr_nodes;
	uint32_t nodes_used; /* __atomic */

	/* client contexts: a free list under cio_lock, and one spare per
	 * thread (object.c, cio_get) tagged with instance, unique per
	 * cached_init in the process, so a spare of a destroyed cache is
	 * never handed out by a later one at the same address */
	struct cached_cio *cios;
	struct cached_cio *cio_free;
	pthread_mutex_t cio_lock;
	uint64_t instance;

	/* next-port requests */
	struct cached_nreq *nreqs;
	struct cached_nreq *nreq_free;
	uint32_t nreq_nr_free; /* __atomic */
	pthread_mutex_t nreq_lock;

	struct xwaitq space_waitq; /* buckets / xcache nodes */
	/* READs that found no free bucket. Apart from space_waitq because
	 * its predicate also holds while flushes fail (flush_failing): such
	 * a read is then served uncached instead of waiting (review11 N-D),
	 * and a write woken by that would only park again. */
	struct xwaitq space_rwaitq;
	/* space_want: the largest need among the requests parked for
	 * space (0: none known), read by the wait queue's predicate;
	 * space_want_holders: how many parked requests need exactly that
	 * much. When the last holder leaves, want drops to 0 and smaller
	 * waiters raise it again when they re-park. Written under
	 * space_lock, __atomic for the predicate. */
	uint32_t space_want;
	uint32_t space_want_holders;
	pthread_mutex_t space_lock;
	uint64_t away_buckets;	  /* __atomic: buckets claimed by evicted
				     objects, which come back to the pool when
				     their last user or flush is done */
	struct xwaitq nreq_waitq; /* a free nreq */
	/* restarts of parked cios run from here, never nested in a hook */
	struct xworkq redispatch_wq;
	/* The name fence of uncached DELETEs (object.c, "Uncached
	 * DELETE"): fence[h] counts the DELETEs in flight with no xcache
	 * node whose name hashes to h, fence_parked[h] the requests waiting
	 * for it to reach 0, fence_total the sum (the dispatch's fast
	 * path). Under fence_lock; fence_total and fence[] also __atomic. */
	uint32_t fence[CACHED_FENCE_SLOTS];
	uint32_t fence_total;
	struct cached_cio *fence_parked[CACHED_FENCE_SLOTS];
	pthread_mutex_t fence_lock;

	bool destroying;	  /* set by cached_destroy: the hooks that
				     xcache_destroy runs skip the wake-up and node
				     accounting (nobody is parked; the thread-local
				     count of freed nodes must not leak into a
				     later cache) */
	bool space_pending;	  /* __atomic: on_put/on_free freed space; the
				     caller into xcache signals space_waitq */
	bool retry_pending;	  /* __atomic: an evicted object's flush
				     failed; cached_retry_failed kicks it */
	uint64_t dirty_buckets;	  /* __atomic */
	uint64_t writing_buckets; /* __atomic */
	uint64_t unflushed;	  /* __atomic: buckets with acked set, when
				     io->unflushed is NULL (in-process users) */
	uint64_t failed_buckets;  /* __atomic: DIRTY/WRITING buckets marked
				     CACHED_ACK_FAILED */
	/* __atomic: the last flush write to the next port failed (set by a
	 * failure, cleared by a success). While set, a READ that finds no
	 * free bucket is served uncached (cio_read) rather than waiting for
	 * space that failing flushes will not free. */
	uint32_t flush_failing;
	/* __atomic: errno of the last failed flush write (meaningful while
	 * flush_failing); failing_since_ns: when flush_failing was last set
	 * (CLOCK_MONOTONIC); space_give_up: set by cached_space_expire once
	 * flushes have failed for cfg.space_wait_ns, cleared with
	 * flush_failing. See cached_space_refused. */
	uint32_t flush_errno;
	uint64_t failing_since_ns;
	uint32_t space_give_up;
	/* space_failed reports (io->space_failed), under ferr_lock */
	uint64_t sfail_last_ns;
	uint64_t sfail_suppressed;
	/* flush error reports (io->flush_error), per errno, under
	 * ferr_lock: when it was last reported and how many since */
	pthread_mutex_t ferr_lock;
	uint64_t ferr_last_ns[CACHED_FERR_SLOTS];
	uint64_t ferr_suppressed[CACHED_FERR_SLOTS];
	struct cached_stats st; /* __atomic relaxed adds */

	/* Waiters a FLUSH links to each object it waits for: a fixed pool
	 * (nr_nodes entries), so a FLUSH allocates nothing; a FLUSH that
	 * finds it empty waits for what it could register, then walks
	 * again (cached_cio.flush_rewalk); one that could register none
	 * parks in fw_waitq until one is returned. */
	struct cached_flushwait *fws;
	uint64_t fws_map_len; /* cached_huge_calloc */
	struct cached_flushwait *fw_free;
	uint32_t fw_nr_free; /* __atomic; written under fw_lock */
	pthread_mutex_t fw_lock;
	struct xwaitq fw_waitq;
};

#define CACHED_STAT(c, field, v)                                               \
	__atomic_add_fetch(&(c)->st.field, (v), __ATOMIC_RELAXED)

/* Set up / tear down the cache (object.c). cfg is validated: -EINVAL with
 * nothing allocated when sizes are inconsistent (bucket size not a power
 * of two or not dividing the object size, cache smaller than one object,
 * max_req_size smaller than a bucket, zero counts). The caller fills
 * c->io, c->io_priv and, after init, the nreqs' xseg requests
 * (cached_nreq_attach). */
int cached_validate_config(const struct cached_config *cfg, char *why,
			   size_t whylen);
int cached_init(struct cached *c, const struct cached_config *cfg);
void cached_destroy(struct cached *c);

/* Free client contexts: the free list plus the calling thread's spare
 * (see cio_get in object.c); other threads' spares count as in use.
 * Takes cio_lock. For tests and diagnostics. */
uint32_t cached_free_contexts(struct cached *c);

/* Entry points (object.c). Any thread registered with liburcu. */
/* Start serving a client request (READ, WRITE, INFO, HASH, DELETE, COPY,
 * FLUSH). Takes ownership: the request is completed or forwarded later.
 * Returns 0, or a negative errno with nothing taken and nothing changed:
 * -EOPNOTSUPP (other op), -EINVAL (no target where one is needed, a
 * target or COPY source containing a NUL byte or longer than
 * XSEG_MAX_TARGETLEN, no data buffer for READ/WRITE/INFO, bad COPY
 * argument), -EBUSY (no context free). Names are copied into the context
 * here, once.
 * - INFO is answered from the cache when the object's size is known
 *   (learned by an earlier INFO this cached sent itself), else cached
 *   asks the next port and answers (no flush needed: see cached_obj).
 * - XSEG_F_NOCACHE READ: dirty data of the range is flushed, then the
 *   request is forwarded. NOCACHE WRITE: loads and dirty data of the
 *   range are waited for / flushed, the range's buckets dropped, the data
 *   written through cached's own requests (pieces of max_req_size);
 *   reads and writes of the object wait meanwhile. NOCACHE INFO is
 *   forwarded (after a flush of the object).
 * - FLUSH with a target flushes that object only, then is forwarded;
 *   without a target every object. */
int cached_submit_request(struct cached *c, struct xseg_request *req);
/* The next port answered nreq n; error is its result (0 = served) and
 * serviced what it reported. */
void cached_nreq_done(struct cached *c, struct cached_nreq *n, int error,
		      uint64_t serviced);
/* Start a flush of every object with dirty data (shutdown, unplug);
 * returns the number of objects kicked. */
unsigned cached_flush_all(struct cached *c);
/* Objects whose flush round failed are not retried at once (a next
 * port that is gone would make that a loop): this kicks them again if
 * any failed since the last call (the peer's tick, once a second), active
 * and evicted alike, so that dirty data drains by itself once the next
 * port takes writes again (review11 N-D: active objects used to wait for
 * a FLUSH or their eviction). Returns the number of objects kicked. Any
 * thread registered with liburcu. */
unsigned cached_retry_failed(struct cached *c);
/*
 * The next port refuses writes for good enough that waiting for cache
 * space is pointless: returns the errno requests that need a bucket or an
 * xcache node the cache cannot find are failed with, or 0 (they wait).
 * Nonzero while the last flush write failed (flush_failing) and either
 * its errno says the store takes no data (ENOSPC, EDQUOT, EROFS: failed
 * at once) or flushes have failed for cfg.space_wait_ns (space_give_up;
 * any errno, e.g. ECONNRESET of a next port that does not come back).
 * Reads are not failed for it: they are served uncached. Any thread.
 */
int cached_space_refused(const struct cached *c);
/* The bound on waiting for space (cfg.space_wait_ns, 0 = none): if
 * flushes have failed since at least that long, give up (space_give_up):
 * requests parked for space are woken and fail with the last flush errno,
 * and so do new ones that find no space, until a flush write succeeds.
 * Returns true when it gave up now (the caller logs it). The peer's tick,
 * once a second. Any thread registered with liburcu. */
bool cached_space_expire(struct cached *c);
/* Drop the data of failed write-through/FUA writes (CACHED_ACK_FAILED
 * buckets: never acknowledged to anyone) from every object that has no
 * flush round in flight or wanted, no write waiting for one and no fence:
 * their buckets become INVALID (the next port keeps what it had: a failed
 * write leaves its range undefined). For shutdown, when that data cannot
 * be written (cached_stop): it must not hold the stop for the flush
 * timeout nor count as a loss (review11 N-C). Acknowledged data is never
 * dropped. Asynchronous (a job per object); returns the number of
 * objects queued. Any thread registered with liburcu. */
unsigned cached_drop_failed(struct cached *c);
/* Buckets of failed write-through/FUA writes still DIRTY or WRITING. */
static inline uint64_t cached_failed_only(const struct cached *c)
{
	return __atomic_load_n(&c->failed_buckets, __ATOMIC_SEQ_CST);
}
/* Map an error from the next port to what a client is told: a next port
 * that is gone (its requests failed back by the reaper, ECONNRESET, or
 * not submittable while it is down, ENXIO) is ECONNRESET, the error vlmc
 * answers by waiting for the peer and resending (its dead-peer wait);
 * every other error (ENOSPC, EIO from the store) is passed on as is. */
static inline int cached_client_error(int error)
{
	return error == ENXIO || error == ECONNRESET || error == EPIPE
		   ? ECONNRESET
		   : error;
}
/* Dirty or writing buckets anywhere (0 = everything reached the port). */
static inline uint64_t cached_unclean(const struct cached *c)
{
	/* seq_cst: see cached_set_policy */
	return __atomic_load_n(&c->dirty_buckets, __ATOMIC_SEQ_CST) +
	       __atomic_load_n(&c->writing_buckets, __ATOMIC_SEQ_CST);
}
/* Switch the write policy for writes that land from now on. Seq_cst, as
 * the writers' policy load and the dirty counters: after
 * cached_set_policy(WRITETHROUGH), a write either sees write-through or
 * its dirty bucket is counted in a later cached_unclean() (unplug relies
 * on it). */
void cached_set_policy(struct cached *c, enum cached_policy p);
/* Diagnosis of a stuck cache: print to stderr every client context in
 * use, every request to the next port in flight and every object
 * referenced beyond the cache, with its state. Reads that state without
 * the workqs (snapshots that may be torn): for a hung cache, at exit, or
 * on SIGUSR1 at log level debug. */
void cached_dump_busy(struct cached *c);

#endif /* CACHED_H */
