/* SPDX-License-Identifier: MIT */
/*
 * cached: per-object state machine. Every function named obj_* or cio_*
 * that takes a struct cached_obj runs as (or from) a job of that object's
 * xworkq, so object state needs no lock; see cached.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cached.h"
#include "xtime.h"

#define CACHED_CHECK(cond)                                                     \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr,                                        \
				"cached: %s:%d: invariant %s broken\n",        \
				__FILE__, __LINE__, #cond);                    \
			__builtin_trap();                                      \
		}                                                              \
	} while (0)

#define container_of(ptr, type, member)                                        \
	((type *)((char *)(ptr)-offsetof(type, member)))

static void cio_run(struct cached_obj *o, struct cached_cio *cio);
static void obj_flush_continue(struct cached_obj *o);
static void cio_dispatch(struct cached *c, struct cached_cio *cio);
static void cio_nc_send(struct cached_obj *o, struct cached_cio *cio);
static void nreq_op_done(struct cached_obj *o, struct cached_nreq *n,
			 int error);
static void obj_drop_created(struct cached *c, struct cached_obj *o,
			     struct cached_cio *cio);
static void flush_write_result(struct cached *c, int error);
static bool fence_park(struct cached *c, struct cached_cio *cio,
		       const char *name);
static void cio_delete_uncached(struct cached *c, struct cached_cio *cio);
static void unc_delete_done_job(void *arg);
static void redispatch_job(void *arg);
static void cio_job(void *arg);

/* ------------------------------------------------------------------ */
/* Context pools                                                       */
/* ------------------------------------------------------------------ */

/*
 * One spare context per thread. A hit gets its context, runs in place and
 * puts it back on the same thread, so the spare serves every hit without
 * the pool mutex (its lock and unlock are two locked instructions each for
 * get and put, and with two workers a line that bounces between them).
 * The spare is tagged with the cache's instance number, not its address:
 * a test (or a restart) that destroys a cache and builds another at the
 * same address must not get a context of the freed array. A context
 * sitting in a spare is not on the free list: the pool is short of at
 * most one per thread (nr_cios has 64 beyond the segment's requests), and
 * cached_dump_busy counts it as in use. A thread that exits takes its
 * spare with it (the framework's workers live as long as the peer).
 */
static uint64_t cached_instances;
static __thread struct {
	uint64_t instance;
	struct cached_cio *cio;
} cio_spare;

static struct cached_cio *cio_get(struct cached *c)
{
	struct cached_cio *cio;

	if (cio_spare.cio && cio_spare.instance == c->instance) {
		cio = cio_spare.cio;
		cio_spare.cio = NULL;
	} else {
		pthread_mutex_lock(&c->cio_lock);
		cio = c->cio_free;
		if (cio)
			c->cio_free = cio->next_free;
		pthread_mutex_unlock(&c->cio_lock);
	}
	if (cio)
		memset(cio, 0, offsetof(struct cached_cio, next_free));
	return cio;
}

static void cio_put(struct cached *c, struct cached_cio *cio)
{
	CACHED_CHECK(cio->parked == 0);
	if (!cio_spare.cio) {
		cio_spare.instance = c->instance;
		cio_spare.cio = cio;
		return;
	}
	pthread_mutex_lock(&c->cio_lock);
	cio->next_free = c->cio_free;
	c->cio_free = cio;
	pthread_mutex_unlock(&c->cio_lock);
}

static struct cached_nreq *nreq_get(struct cached *c)
{
	struct cached_nreq *n;

	pthread_mutex_lock(&c->nreq_lock);
	n = c->nreq_free;
	if (n) {
		c->nreq_free = n->next_free;
		__atomic_sub_fetch(&c->nreq_nr_free, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&c->nreq_lock);
	return n;
}

static void nreq_put(struct cached *c, struct cached_nreq *n)
{
	n->obj = NULL;
	n->cio = NULL; /* free: neither (cached_on_reply's check) */
	pthread_mutex_lock(&c->nreq_lock);
	n->next_free = c->nreq_free;
	c->nreq_free = n;
	__atomic_add_fetch(&c->nreq_nr_free, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->nreq_lock);
	xwaitq_signal(&c->nreq_waitq);
}

static bool nreq_available(void *arg)
{
	struct cached *c = arg;

	return __atomic_load_n(&c->nreq_nr_free, __ATOMIC_ACQUIRE) > 0;
}

static bool space_free(const struct cached *c)
{
	uint32_t want = __atomic_load_n(&c->space_want, __ATOMIC_RELAXED);

	return cached_pool_nr_free(&c->pool) >= (want ? want : 1) &&
	       __atomic_load_n(&c->nodes_used, __ATOMIC_ACQUIRE) < c->nr_nodes;
}

static bool space_errno_refuses(int error)
{
	return error == ENOSPC || error == EDQUOT || error == EROFS;
}

int cached_space_refused(const struct cached *c)
{
	int error;

	if (!__atomic_load_n(&c->flush_failing, __ATOMIC_ACQUIRE))
		return 0;
	error = (int)__atomic_load_n(&c->flush_errno, __ATOMIC_ACQUIRE);
	if (!error)
		return 0;
	if (space_errno_refuses(error) ||
	    __atomic_load_n(&c->space_give_up, __ATOMIC_ACQUIRE))
		return error;
	return 0;
}

/* Requests parked for space also go on while the next port refuses writes
 * (cached_space_refused): they then fail with its errno rather than wait
 * for space that failing flushes will not free. A woken request never
 * parks again while this holds (it claims or fails), so it cannot spin:
 * it parks only when nothing is refused, and if refusal starts
 * meanwhile, the enqueue runs it at once and it fails. */
static bool space_available(void *arg)
{
	struct cached *c = arg;

	return space_free(c) || cached_space_refused(c);
}

/* READs parked for buckets also go on while flushes fail: they are then
 * served uncached (cio_read). A woken read never parks again while this
 * holds, so it cannot spin: it parks only when flush_failing is clear,
 * and if it is set again meanwhile, the enqueue runs it at once and it
 * takes the uncached path. */
static bool space_read_available(void *arg)
{
	struct cached *c = arg;

	return __atomic_load_n(&c->flush_failing, __ATOMIC_ACQUIRE) ||
	       space_free(c);
}

/* Requests parked for space, in both queues. */
static uint64_t space_parked(const struct cached *c)
{
	return xwaitq_nr_queued(&c->space_waitq) +
	       xwaitq_nr_queued(&c->space_rwaitq);
}

/*
 * Nodes whose on_free ran in this thread, in the xcache call it is still
 * inside. xcache puts a node back on its lists only after on_free
 * returned, so until the call returns an insert still fails with EAGAIN:
 * counting the node as free in on_free let another thread's wake-up run
 * a request parked for a node inside that window, which got EAGAIN,
 * parked, was woken again, in a loop (review finding M4). The count is
 * per thread because only the thread that made the call knows when it
 * has returned; space_kick() in that thread moves it to c->nodes_used.
 * Every xcache call of this file that can free an entry is followed by
 * space_kick() on the same cache in the same thread.
 */
static __thread uint32_t cached_nodes_freed_here;

/* The xcache hooks that free buckets and nodes (on_put, on_free) run
 * before xcache has put the node back on its lists, so they only note that
 * space was freed; whoever called into xcache signals once the call has
 * returned (a restart run from inside the hook would find the node still
 * missing and spin). */
static void space_kick(struct cached *c)
{
	uint32_t freed = cached_nodes_freed_here;
	bool signal = false;

	if (freed) {
		cached_nodes_freed_here = 0;
		__atomic_sub_fetch(&c->nodes_used, freed, __ATOMIC_RELEASE);
		signal = true;
	}
	if (__atomic_load_n(&c->space_pending, __ATOMIC_ACQUIRE) &&
	    __atomic_exchange_n(&c->space_pending, false, __ATOMIC_ACQ_REL))
		signal = true;
	if (signal) {
		xwaitq_signal(&c->space_waitq);
		xwaitq_signal(&c->space_rwaitq);
	}
}

static void obj_put(struct cached *c, struct xcache_entry *e)
{
	xcache_put(c->cache, e);
	space_kick(c);
}

/* ------------------------------------------------------------------ */
/* Waiters                                                             */
/* ------------------------------------------------------------------ */

static void obj_wait(struct cached_obj *o, struct cached_waiter *w)
{
	w->next = o->waiters;
	o->waiters = w;
}

/* Run every waiter once; they re-link themselves if still waiting. */
static void obj_wake_all(struct cached_obj *o)
{
	struct cached_waiter *w = o->waiters, *next;

	o->waiters = NULL;
	for (; w; w = next) {
		next = w->next;
		w->fn(o, w);
	}
}

static bool obj_needs_round(const struct cached_obj *o)
{
	for (const struct cached_waiter *w = o->waiters; w; w = w->next)
		if (w->need_seq > o->seq_done)
			return true;
	return false;
}

/* ------------------------------------------------------------------ */
/* Client request completion and restart                               */
/* ------------------------------------------------------------------ */

static void cio_release_obj(struct cached *c, struct cached_cio *cio)
{
	struct xcache_entry *e = cio->entry;

	cio->entry = NULL;
	cio->obj = NULL;
	if (e)
		obj_put(c, e);
}

/* Complete the client request and drop everything the context holds.
 * The object may be released by the put: callers return right after. */
static void cio_finish(struct cached *c, struct cached_cio *cio, int error)
{
	struct xseg_request *req = cio->req;

	/* a next port that is gone: ECONNRESET, which vlmc waits on */
	c->io->complete(c, req, cached_client_error(error));
	cio_release_obj(c, cio);
	cio_put(c, cio);
}

static void cio_forward(struct cached *c, struct cached_cio *cio)
{
	struct xseg_request *req = cio->req;
	int rc = c->io->forward(c, req);

	if (rc < 0)
		c->io->complete(c, req, cached_client_error(-rc));
	cio_release_obj(c, cio);
	cio_put(c, cio);
}

static void redispatch_job(void *arg)
{
	struct cached_cio *cio = arg;

	cio_dispatch(cio->c, cio);
}

/*
 * space_want is the largest need among the requests parked for space.
 * It used to only grow: after one 4 MiB write had parked, every later
 * park evicted until 1024 buckets were free and every waiter waited for
 * that many (review finding M1). Now the requests that need exactly
 * `want` are counted; when the last of them is woken, want drops to 0
 * and any smaller waiter raises it again when it re-parks (one extra
 * wake-up, never a stall: a re-park sets want to its own need before it
 * queues, so its own enqueue cannot run it at once).
 */
static void space_want_add(struct cached *c, uint32_t need)
{
	pthread_mutex_lock(&c->space_lock);
	if (need > c->space_want) {
		__atomic_store_n(&c->space_want, need, __ATOMIC_RELAXED);
		c->space_want_holders = 1;
	} else if (need == c->space_want) {
		c->space_want_holders++;
	}
	pthread_mutex_unlock(&c->space_lock);
}

static void space_want_drop(struct cached *c, uint32_t need)
{
	pthread_mutex_lock(&c->space_lock);
	if (need == c->space_want && c->space_want_holders &&
	    !--c->space_want_holders)
		__atomic_store_n(&c->space_want, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&c->space_lock);
}

/* Parked jobs of the wait queues run in whatever thread signalled, maybe
 * deep inside an xcache hook: they only queue the restart on the
 * redispatch workq, whose executor does the work iteratively. */
static void space_wake_job(void *arg)
{
	struct cached_cio *cio = arg;

	CACHED_CHECK(cio->parked == 2);
	cio->parked = 0;
	space_want_drop(cio->c, cio->space_need);
	xworkq_enqueue(&cio->c->redispatch_wq, &cio->job, redispatch_job, cio);
}

/* Evict until the free buckets plus those that evicted objects will give
 * back cover the largest need of a parked request. Evicted objects give
 * their buckets back when their last user and their flush are done, and
 * that signals the wait queue. Every evicted object counts, clean or
 * dirty: counting only those kept for a flush let one park evict every
 * object while the clean victims were still in use (review finding M2). */
static void space_make_room(struct cached *c, uint32_t need)
{
	uint32_t want = __atomic_load_n(&c->space_want, __ATOMIC_RELAXED);

	if (need < want)
		need = want;
	for (uint32_t i = 0;
	     i < c->cfg.max_objects &&
	     cached_pool_nr_free(&c->pool) +
		     __atomic_load_n(&c->away_buckets, __ATOMIC_RELAXED) <
		 need;
	     i++)
		if (xcache_evict_lru(c->cache) < 0)
			break;
	space_kick(c);
}

/*
 * No bucket or no xcache node: hold nothing, wait for space, make room.
 * Room is made after the request is queued: free buckets that a parked
 * request counted on can be taken by a request that is not parked (it
 * claims between a signal and the parked one's predicate check, or
 * between our room-making and our queuing). Whoever takes buckets while
 * requests are parked makes room again (obj_claim_or_park), and either it
 * sees us queued or our room-making sees its claim. Without that the
 * cache could end full of idle objects with requests parked forever
 * (seen in test_cached_mp under TSan).
 */
static void cio_park_space(struct cached *c, struct cached_cio *cio,
			   uint32_t need, struct xwaitq *q)
{
	cio->space_need = need;
	space_want_add(c, need);
	cio_release_obj(c, cio);
	CACHED_STAT(c, space_waits, 1);
	CACHED_CHECK(cio->parked == 0);
	cio->parked = 2;
	/* cio may run (and be done) as soon as it is queued: not touched
	 * after this */
	xwaitq_enqueue(q, &cio->wjob, space_wake_job, cio);
	space_make_room(c, need);
}

/*
 * The claim of slots [first, first+n) failed while flushes fail: if the
 * buckets that are neither DIRTY nor WRITING can cover the need at all,
 * evict victims until the free buckets alone cover it (an unused clean
 * victim gives its buckets back at once, a dirty one its clean part) and
 * claim again. Not space_make_room: it counts the buckets of evicted
 * objects as coming back (away_buckets), and those of objects kept for
 * data the next port refuses do not come back, so it could stop before a
 * clean victim was evicted (a write would then fail for want of space
 * with clean data in the cache). Returns true when the buckets were
 * claimed.
 */
static bool claim_after_room(struct cached *c, struct cached_obj *o,
			     uint32_t first, uint32_t n)
{
	if (cached_unclean(c) + n > c->pool.nr)
		return false; /* no room can be made */
	for (uint32_t i = 0;
	     i < c->cfg.max_objects && cached_pool_nr_free(&c->pool) < n; i++)
		if (xcache_evict_lru(c->cache) < 0)
			break;
	space_kick(c);
	return cached_obj_claim(o, first, n) == 0;
}

/* Report a request failed by cio_space_fail through io->space_failed:
 * the first, then at most once per CACHED_FLUSH_ERROR_LOG_NS with the
 * number not reported in between. */
static void space_fail_report(struct cached *c, struct cached_cio *cio,
			      int error)
{
	uint64_t now, suppressed = 0;
	bool report = false;

	if (!c->io->space_failed)
		return;
	now = xtime_ns(CLOCK_MONOTONIC);
	pthread_mutex_lock(&c->ferr_lock);
	if (!c->sfail_last_ns ||
	    now - c->sfail_last_ns >= CACHED_FLUSH_ERROR_LOG_NS) {
		report = true;
		suppressed = c->sfail_suppressed;
		c->sfail_suppressed = 0;
		c->sfail_last_ns = now ? now : 1;
	} else {
		c->sfail_suppressed++;
	}
	pthread_mutex_unlock(&c->ferr_lock);
	if (report)
		c->io->space_failed(c, cio->req->op, cio->name, error,
				    suppressed);
}

/*
 * cio needs a bucket or an xcache node the cache cannot find, and the next
 * port refuses writes (cached_space_refused: a store out of space, or
 * failing flushes for longer than cfg.space_wait_ns): waiting could last
 * as long as the store refuses, so the request fails with the store's
 * errno instead. It has changed nothing: it claimed nothing and copied
 * nothing in; an entry its dispatch made for it (the cache held nothing
 * of the object) is taken out again. Runs on the object's workq, or at
 * dispatch with no object attached.
 */
static void cio_space_fail(struct cached *c, struct cached_cio *cio, int error)
{
	CACHED_STAT(c, space_failed, 1);
	space_fail_report(c, cio, error);
	if (cio->obj) {
		/* made by this request, maybe before it parked: taken out
		 * only if it holds nothing (obj_drop_created checks) */
		cio->created = cio->created || cio->made_entry;
		obj_drop_created(c, cio->obj, cio);
	}
	cio_finish(c, cio, error);
}

/* Claim the buckets of slots [first, first+n) for cio (a WRITE), or park
 * it for space, or, while the next port refuses writes, fail it when no
 * room can be made (returns true: the caller returns). Writes that find
 * their buckets are accepted as ever (write-back: a later FLUSH reports
 * the store's error). */
static bool obj_claim_or_park(struct cached *c, struct cached_obj *o,
			      struct cached_cio *cio, uint32_t first,
			      uint32_t n)
{
	if (cached_obj_claim(o, first, n) < 0) {
		int refused = cached_space_refused(c);

		if (!refused) {
			cio_park_space(c, cio, n, &c->space_waitq);
			return true;
		}
		if (!claim_after_room(c, o, first, n)) {
			cio_space_fail(c, cio, refused);
			return true;
		}
	}
	/* we may have taken what parked requests were woken for */
	if (space_parked(c))
		space_make_room(c, 0);
	return false;
}

/* The object is active again or released: its buckets are no longer
 * "coming back" (any thread; idempotent). */
static void obj_unaway(struct cached_obj *o)
{
	uint32_t v = __atomic_exchange_n(&o->away_claimed, 0, __ATOMIC_RELAXED);

	if (v)
		__atomic_sub_fetch(&o->c->away_buckets, v, __ATOMIC_RELAXED);
}

static void cio_restart(struct cached *c, struct cached_cio *cio)
{
	cio_release_obj(c, cio);
	xworkq_enqueue(&c->redispatch_wq, &cio->job, redispatch_job, cio);
}

static void cio_job(void *arg)
{
	struct cached_cio *cio = arg;

	cio_run(cio->obj, cio);
}

static void nreq_wake_cio_job(void *arg)
{
	struct cached_cio *cio = arg;

	CACHED_CHECK(cio->parked == 1);
	cio->parked = 0;
	xworkq_enqueue(&cio->obj->wq, &cio->job, cio_job, cio);
}

static void cio_park_nreq(struct cached *c, struct cached_cio *cio)
{
	CACHED_STAT(c, nreq_waits, 1);
	CACHED_CHECK(cio->parked == 0);
	cio->parked = 1;
	xwaitq_enqueue(&c->nreq_waitq, &cio->wjob, nreq_wake_cio_job, cio);
}

static void cio_waiter_fn(struct cached_obj *o, struct cached_waiter *w)
{
	cio_run(o, container_of(w, struct cached_cio, waiter));
}

/* ------------------------------------------------------------------ */
/* Fetches (reads from the next port)                                  */
/* ------------------------------------------------------------------ */

static void nreq_send(struct cached *c, struct cached_obj *o,
		      struct cached_nreq *n)
{
	int rc;

	xcache_get(o->entry);
	n->obj = o;
	n->error = 0;
	rc = c->io->submit(c, n);
	if (rc < 0)
		cached_nreq_done(c, n, -rc, 0);
}

/* Start reads of the INVALID slots among [first, first+n) (only those
 * with want[] set if want is not NULL). Returns false if it ran out of
 * next-port requests (the caller parks). */
static bool obj_fetch(struct cached_obj *o, uint32_t first, uint32_t n,
		      const bool *want)
{
	struct cached *c = o->c;
	uint64_t bs = c->cfg.bucket_size;

	for (uint32_t s = first; s < first + n;) {
		uint32_t e;
		struct cached_nreq *nr;

		if (o->bstate[s] != CACHED_B_INVALID ||
		    (want && !want[s - first])) {
			s++;
			continue;
		}
		for (e = s + 1; e < first + n && e - s < c->max_req_slots &&
				o->bstate[e] == CACHED_B_INVALID &&
				(!want || want[e - first]);
		     e++)
			;
		nr = nreq_get(c);
		if (!nr)
			return false;
		nr->kind = CACHED_N_FETCH;
		nr->first = s;
		nr->n = e - s;
		for (uint32_t k = s; k < e; k++)
			cached_obj_set_bstate(o, k, CACHED_B_LOADING);
		nr->req->op = XSEG_OP_READ;
		nr->req->flags = 0;
		nr->req->offset = s * bs;
		nr->req->size = (e - s) * bs;
		CACHED_STAT(c, fetches, 1);
		nreq_send(c, o, nr);
		s = e;
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* READ                                                                */
/* ------------------------------------------------------------------ */

static bool cio_range(struct cached *c, struct cached_cio *cio, uint32_t *first,
		      uint32_t *n)
{
	struct xseg_request *req = cio->req;
	uint64_t bs = c->cfg.bucket_size;

	if (req->offset >= c->cfg.object_size ||
	    req->size > c->cfg.object_size - req->offset)
		return false;
	*first = (uint32_t)(req->offset / bs);
	*n = (uint32_t)((req->offset + req->size - 1) / bs) - *first + 1;
	return true;
}

/* The slots of a READ or WRITE, or false once the request is completed:
 * with EINVAL when its range is outside the object, at once when it is
 * empty (nothing to read or write). */
static bool cio_start_range(struct cached *c, struct cached_cio *cio,
			    uint32_t *first, uint32_t *n)
{
	if (!cio_range(c, cio, first, n)) {
		cio_finish(c, cio, EINVAL);
		return false;
	}
	if (!cio->req->size) {
		cio_finish(c, cio, 0);
		return false;
	}
	return true;
}

/* A NOCACHE write of the object is in flight: a fetch now could cache
 * what the next port had before it, a write could be overtaken by it.
 * Wait for its end (it wakes the object's waiters). */
static bool obj_wait_nocache(struct cached_obj *o, struct cached_cio *cio)
{
	if (!o->nocache_inflight)
		return false;
	cio->waiter.fn = cio_waiter_fn;
	cio->waiter.need_seq = 0;
	obj_wait(o, &cio->waiter);
	return true;
}

static inline bool bstate_has_data(uint8_t st)
{
	return st == CACHED_B_VALID || st == CACHED_B_DIRTY ||
	       st == CACHED_B_WRITING;
}

static void cio_copy(struct cached *c, struct cached_obj *o,
		     struct cached_cio *cio, bool to_cache)
{
	struct xseg_request *req = cio->req;
	unsigned char *data = c->io->data(c, req);
	uint64_t bs = c->cfg.bucket_size, off = req->offset, done = 0;
	uint64_t size = req->size;

	/*
	 * One memcpy per run of slots whose buckets are adjacent in the
	 * pool (the usual case: the pool hands out ascending indexes, so an
	 * object written in order gets a contiguous run). A 64 KiB hit from
	 * a working set far larger than the CPU caches cost about 1 us more
	 * copied bucket by bucket than in one call, measured in-process
	 * (bench_cached --only path): each 4 KiB copy started its misses
	 * from scratch where one copy keeps them streaming.
	 */
	while (done < size) {
		uint32_t s = (uint32_t)(off / bs), e = s + 1;
		uint64_t in = off % bs, len = bs - in;
		uint32_t b0 = o->bucket[s];
		unsigned char *b;

		while (len < size - done && o->bucket[e] == b0 + (e - s)) {
			len += bs;
			e++;
		}
		if (len > size - done)
			len = size - done;
		b = cached_pool_bucket(&c->pool, b0) + in;
		if (to_cache) {
			memcpy(b, data + done, len);
			for (uint32_t k = s; k < e; k++)
				cached_obj_set_bstate(o, k, CACHED_B_DIRTY);
		} else {
			memcpy(data + done, b, len);
		}
		done += len;
		off += len;
	}
}

/*
 * Uncached READ (review11 N-D). A read that finds no free bucket while
 * flushes to the next port fail would wait for space that cannot come:
 * the cache is full of dirty data nobody can write (a store out of space
 * answers every write ENOSPC but serves reads), and evicting it only keeps
 * it (its flush fails). Such a read is served without buckets: slot by
 * slot, what the object holds with data (VALID, DIRTY, WRITING) is copied
 * from its bucket, every run of other slots (no bucket, INVALID, LOADING)
 * is read from the next port into one of our requests and copied from
 * there; nothing is inserted in the cache. Not stale: the slots fetched
 * hold no data newer than the next port's (dirty data is always in a
 * bucket until the next port acknowledged it; a NOCACHE write in flight
 * was waited for), and everything acknowledged before the read arrived
 * is either in a bucket copied here or at the next port. A write landing
 * while a fetch is in flight is concurrent with the read: either version
 * is right.
 *
 * Trigger: no free bucket and flush_failing (the last flush write
 * failed). It cannot hang: the read claims nothing and waits only for
 * next-port requests, which come back. Reads already parked for space
 * are woken when flush_failing is set (space_rwaitq's predicate).
 *
 * phase CACHED_READ_UNCACHED while sending, CACHED_READ_UNCACHED_PARKED
 * while parked for a request (the completion of a fetch then leaves the
 * finish to the resumption); unc_cursor is the next slot to serve.
 */
/*
 * A read found no free bucket. While flushes fail it would go uncached,
 * but flush_failing is cache-wide: one object whose flush keeps failing
 * must not stop a cache full of clean data from taking new data (review13
 * R13-2). So first evict clean victims and claim again, if the buckets
 * that are neither DIRTY nor WRITING can cover the need at all. An
 * evicted object gives its clean buckets back at once when nobody uses
 * it; if its users hold them, the claim fails again and the read goes
 * uncached (it never waits on buckets while flushes fail). Returns true
 * when the buckets were claimed.
 */
static bool read_claim_after_room(struct cached *c, struct cached_obj *o,
				  uint32_t first, uint32_t n)
{
	if (!__atomic_load_n(&c->flush_failing, __ATOMIC_ACQUIRE))
		return false; /* the normal park makes room */
	return claim_after_room(c, o, first, n);
}

enum {
	CACHED_READ_UNCACHED = 2,
	CACHED_READ_UNCACHED_PARKED = 3,
};

static bool slot_has_data(const struct cached_obj *o, uint32_t s)
{
	return o->bucket[s] != CACHED_NO_BUCKET &&
	       bstate_has_data(o->bstate[s]);
}

/* Copy into the READ cio's buffer its part of slot s, whose bytes
 * (bucket_size of them) are at src. */
static void cio_read_copy_slot(struct cached *c, struct cached_cio *cio,
			       uint32_t s, const unsigned char *src)
{
	struct xseg_request *req = cio->req;
	unsigned char *data = c->io->data(c, req);
	uint64_t bs = c->cfg.bucket_size, lo = (uint64_t)s * bs, hi = lo + bs;
	uint64_t end = req->offset + req->size;

	if (lo < req->offset)
		lo = req->offset;
	if (hi > end)
		hi = end;
	memcpy(data + (lo - req->offset), src + (lo - (uint64_t)s * bs),
	       hi - lo);
}

static void cio_uncached_maybe_done(struct cached_obj *o,
				    struct cached_cio *cio)
{
	struct cached *c = o->c;
	uint32_t first, n;

	if (!cio_range(c, cio, &first, &n))
		return; /* checked at the start: cannot happen */
	if (cio->phase != CACHED_READ_UNCACHED || cio->unc_inflight ||
	    (!cio->error && cio->unc_cursor < first + n))
		return;
	if (!cio->error)
		cio->req->serviced = cio->req->size;
	/* an entry made for it only (the object was not cached): take it
	 * out again, nothing stays in the cache for an uncached read */
	obj_drop_created(c, o, cio);
	cio_finish(c, cio, cio->error);
}

static void cio_read_uncached(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	uint64_t bs = c->cfg.bucket_size;
	uint32_t first, n;

	if (!cio_range(c, cio, &first, &n)) {
		cio_finish(c, cio, EINVAL);
		return;
	}
	if (cio->phase != CACHED_READ_UNCACHED &&
	    cio->phase != CACHED_READ_UNCACHED_PARKED) {
		cio->unc_cursor = first;
		cio->unc_inflight = 0;
		cio->counted = true;
		CACHED_STAT(c, uncached_reads, 1);
	}
	cio->phase = CACHED_READ_UNCACHED;
	while (!cio->error && cio->unc_cursor < first + n) {
		uint32_t s = cio->unc_cursor, e;
		struct cached_nreq *nr;

		if (slot_has_data(o, s)) {
			cio_read_copy_slot(
			    c, cio, s,
			    cached_pool_bucket(&c->pool, o->bucket[s]));
			cio->unc_cursor++;
			continue;
		}
		for (e = s + 1; e < first + n && e - s < c->max_req_slots &&
				!slot_has_data(o, e);
		     e++)
			;
		nr = nreq_get(c);
		if (!nr) {
			cio->phase = CACHED_READ_UNCACHED_PARKED;
			cio_park_nreq(c, cio);
			return;
		}
		nr->kind = CACHED_N_UNCACHED;
		nr->cio = cio;
		nr->first = s;
		nr->n = e - s;
		nr->req->op = XSEG_OP_READ;
		nr->req->flags = 0;
		nr->req->offset = (uint64_t)s * bs;
		nr->req->size = (uint64_t)(e - s) * bs;
		cio->unc_inflight++;
		cio->unc_cursor = e;
		CACHED_STAT(c, fetches, 1);
		/* its completion is a job of this workq: it runs after us */
		nreq_send(c, o, nr);
	}
	cio_uncached_maybe_done(o, cio);
}

static void cio_read(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	uint32_t first, n, present = 0, loading = 0;

	if (cio->phase == CACHED_READ_UNCACHED_PARKED) {
		cio_read_uncached(o, cio);
		return;
	}
	if (cio->error) {
		cio_finish(c, cio, cio->error);
		return;
	}
	if (!cio_start_range(c, cio, &first, &n))
		return;
	if (obj_wait_nocache(o, cio))
		return;
	if (cached_obj_unclaimed(o, first, n)) {
		if (cached_obj_claim(o, first, n) < 0 &&
		    !read_claim_after_room(c, o, first, n)) {
			if (__atomic_load_n(&c->flush_failing,
					    __ATOMIC_ACQUIRE)) {
				cio_read_uncached(o, cio);
				return;
			}
			cio_park_space(c, cio, n, &c->space_rwaitq);
			return;
		}
		/* we may have taken what parked requests were woken for */
		if (space_parked(c))
			space_make_room(c, 0);
	}
	for (uint32_t s = first; s < first + n; s++) {
		present += bstate_has_data(o->bstate[s]);
		loading += o->bstate[s] == CACHED_B_LOADING;
	}
	if (!cio->counted) {
		cio->counted = true;
		if (present == n)
			CACHED_STAT(c, hits, 1);
		else if (!present)
			CACHED_STAT(c, misses, 1);
		else
			CACHED_STAT(c, partial_hits, 1);
	}
	if (present == n) {
		cio_copy(c, o, cio, false);
		cio->req->serviced = cio->req->size;
		cio_finish(c, cio, 0);
		return;
	}
	if (present + loading < n && !obj_fetch(o, first, n, NULL)) {
		/* some fetches may be in flight; we rescan when resumed */
		cio_park_nreq(c, cio);
		return;
	}
	cio->waiter.fn = cio_waiter_fn;
	cio->waiter.need_seq = 0;
	obj_wait(o, &cio->waiter);
}

/* ------------------------------------------------------------------ */
/* WRITE                                                               */
/* ------------------------------------------------------------------ */

static void obj_kick_now(struct cached_obj *o)
{
	if (!o->flushing && !o->nreq_parked)
		obj_flush_continue(o);
}

static void cio_write_wait_round(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;

	if (o->seq_done >= cio->waiter.need_seq) {
		int err = o->last_round_error;

		if (!err)
			cio->req->serviced = cio->req->size;
		cio_finish(c, cio, err);
		return;
	}
	cio->waiter.fn = cio_waiter_fn;
	obj_wait(o, &cio->waiter);
	obj_kick_now(o);
}

static void cio_write(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	struct xseg_request *req = cio->req;
	uint64_t bs = c->cfg.bucket_size;
	uint32_t first, n, last;
	bool head_partial, tail_partial, wait = false;
	bool want_fetch[2] = {false, false};

	if (cio->phase == 1) {
		cio_write_wait_round(o, cio);
		return;
	}
	if (cio->error) {
		cio_finish(c, cio, cio->error);
		return;
	}
	if (!cio_start_range(c, cio, &first, &n))
		return;
	if (obj_wait_nocache(o, cio))
		return;
	if (cached_obj_unclaimed(o, first, n) &&
	    obj_claim_or_park(c, o, cio, first, n))
		return;
	last = first + n - 1;
	head_partial = req->offset % bs != 0 || (n == 1 && req->size < bs);
	tail_partial = (req->offset + req->size) % bs != 0;
	for (uint32_t s = first; s <= last; s++) {
		uint8_t st = o->bstate[s];
		bool partial =
		    (s == first && head_partial) || (s == last && tail_partial);

		/* A load in flight would overwrite what we write. */
		if (st == CACHED_B_LOADING)
			wait = true;
		else if (partial && st == CACHED_B_INVALID) {
			/* read-modify-write of a bucket we do not have */
			if (s == first)
				want_fetch[0] = true;
			else
				want_fetch[1] = true;
			wait = true;
		}
	}
	if (want_fetch[0] || want_fetch[1]) {
		bool ok = true;
		if (want_fetch[0])
			ok = obj_fetch(o, first, 1, NULL);
		if (ok && want_fetch[1] && last != first)
			ok = obj_fetch(o, last, 1, NULL);
		if (!ok) {
			cio_park_nreq(c, cio);
			return;
		}
	}
	if (wait) {
		cio->waiter.fn = cio_waiter_fn;
		cio->waiter.need_seq = 0;
		obj_wait(o, &cio->waiter);
		return;
	}
	cio_copy(c, o, cio, true);
	CACHED_STAT(c, writes, 1);
	/* the flush writes up to here: the next port's size grows exactly
	 * as the client's writes */
	if (req->offset + req->size > o->write_end)
		o->write_end = req->offset + req->size;
	if ((req->flags & XSEG_F_FUA) ||
	    __atomic_load_n(&c->policy, __ATOMIC_SEQ_CST) ==
		CACHED_WRITETHROUGH) {
		/* Written through: acknowledged once a flush round that
		 * started after the data landed in the buckets completed. */
		if (req->flags & XSEG_F_FUA) {
			o->fua_wanted = true;
			/* A round in flight (maybe parked for requests) may
			 * send these buckets before ours starts: what it
			 * sends from now on goes with FUA too, else our
			 * round could find nothing dirty and the data would
			 * have reached the next port without FUA. */
			if (o->flushing)
				o->round_fua = true;
		}
		cio->phase = 1;
		cio->waiter.need_seq = o->seq_started + 1;
		cio_write_wait_round(o, cio);
		return;
	}
	/* Counted before the reply: from here until the next port has
	 * the data, a death of this cached is a write-back loss. */
	cached_obj_mark_acked(o, first, n);
	if (__atomic_load_n(&c->dirty_buckets, __ATOMIC_RELAXED) * bs >
	    c->cfg.dirty_threshold)
		obj_kick_now(o);
	req->serviced = req->size;
	cio_finish(c, cio, 0);
}

/* ------------------------------------------------------------------ */
/* Flush rounds                                                        */
/* ------------------------------------------------------------------ */

static void obj_unpark_job(void *arg)
{
	struct cached_obj *o = arg;

	o->nreq_parked = false;
	obj_flush_continue(o);
	obj_put(o->c, o->entry); /* the parking reference */
}

static void nreq_wake_obj_job(void *arg)
{
	struct cached_obj *o = arg;

	CACHED_CHECK(o->nreq_parked);
	xworkq_enqueue(&o->wq, &o->unpark_job, obj_unpark_job, o);
}

static void obj_round_end(struct cached_obj *o)
{
	struct cached *c = o->c;
	enum cached_ostate st = cached_obj_state(o);

	o->flushing = false;
	o->seq_done = o->seq_started;
	o->last_round_error = o->round_error;
	/* Retried by cached_retry_failed (the peer's tick), active or
	 * evicted: dirty data drains by itself once the next port takes
	 * writes again (review11 N-D: active objects used to wait for a
	 * FLUSH or their eviction). Never at once: with a next port that is
	 * gone that would loop. */
	if (o->round_error)
		__atomic_store_n(&c->retry_pending, true, __ATOMIC_RELEASE);
	if (st == CACHED_O_FLUSHING || st == CACHED_O_FAILED)
		cached_obj_set_state(o, o->round_error ? CACHED_O_FAILED
						       : CACHED_O_READY);
	obj_wake_all(o);
	/* A waiter may have started the next round already; its end does
	 * what is left here. */
	if (o->flushing || o->nreq_parked)
		return;
	if (obj_needs_round(o)) {
		obj_flush_continue(o);
		return;
	}
	if (o->kept) {
		/* Evicted with dirty data: keep flushing until clean, unless
		 * it became active again (its next eviction flushes it). */
		if (!cached_obj_clean(o) &&
		    xcache_entry_state(o->entry) != XCACHE_ACTIVE &&
		    cached_obj_state(o) != CACHED_O_INVALIDATED) {
			if (o->last_round_error) {
				/* The next port fails or is gone: retrying
				 * here would loop in this thread (a submit
				 * that fails at once completes the round
				 * in the same executor) or storm the port.
				 * cached_retry_failed, a FLUSH or shutdown
				 * retries it. */
				__atomic_store_n(&c->retry_pending, true,
						 __ATOMIC_RELEASE);
				CACHED_STAT(c, deferred_retries, 1);
				return;
			}
			obj_flush_continue(o);
			return;
		}
		o->kept = false;
		obj_put(c, o->entry); /* may release o */
		/* if it stays (active again), requests waiting for space
		 * need another victim */
		if (space_parked(c))
			space_make_room(c, 1);
	}
}

static void obj_flush_continue(struct cached_obj *o)
{
	struct cached *c = o->c;
	uint64_t bs = c->cfg.bucket_size;

	if (!o->flushing) {
		if (!o->counts[CACHED_B_DIRTY] && !obj_needs_round(o))
			return;
		o->flushing = true;
		o->seq_started++;
		o->cursor = 0;
		o->round_error = 0;
		o->round_fua = o->fua_wanted;
		o->fua_wanted = false;
		if (cached_obj_state(o) != CACHED_O_DELETING)
			cached_obj_set_state(o, CACHED_O_FLUSHING);
		CACHED_STAT(c, flush_rounds, 1);
	}
	while (o->cursor < o->nr_slots) {
		uint32_t s = o->cursor, e;
		struct cached_nreq *n;

		while (s < o->nr_slots && (o->bucket[s] == CACHED_NO_BUCKET ||
					   o->bstate[s] != CACHED_B_DIRTY))
			s++;
		if (s >= o->nr_slots) {
			o->cursor = o->nr_slots;
			break;
		}
		for (e = s + 1; e < o->nr_slots && e - s < c->max_req_slots &&
				o->bucket[e] != CACHED_NO_BUCKET &&
				o->bstate[e] == CACHED_B_DIRTY;
		     e++)
			;
		n = nreq_get(c);
		if (!n) {
			CACHED_CHECK(!o->nreq_parked);
			/* Back-pressure: at most max_inflight requests to
			 * the next port; resume when one comes back. */
			o->cursor = s;
			o->nreq_parked = true;
			xcache_get(o->entry);
			CACHED_STAT(c, nreq_waits, 1);
			xwaitq_enqueue(&c->nreq_waitq, &o->nreq_wjob,
				       nreq_wake_obj_job, o);
			return;
		}
		unsigned char *data = c->io->data(c, n->req);
		for (uint32_t k = s; k < e; k++) {
			memcpy(data + (uint64_t)(k - s) * bs,
			       cached_pool_bucket(&c->pool, o->bucket[k]), bs);
			cached_obj_set_bstate(o, k, CACHED_B_WRITING);
		}
		n->kind = CACHED_N_WRITE;
		n->first = s;
		n->n = e - s;
		n->req->op = XSEG_OP_WRITE;
		n->req->offset = s * bs;
		n->req->size = (e - s) * bs;
		/* Not past the end of what clients wrote: whole buckets made
		 * the object at the next port grow to a bucket multiple, so
		 * its size and HASH differed with and without cached in the
		 * path (review finding M10). Every dirty byte lies below
		 * write_end. */
		if (o->write_end > n->req->offset &&
		    o->write_end < n->req->offset + n->req->size)
			n->req->size = o->write_end - n->req->offset;
		n->req->flags = o->round_fua ? XSEG_F_FUA : 0;
		o->round_inflight++;
		o->cursor = e;
		CACHED_STAT(c, flush_writes, 1);
		nreq_send(c, o, n);
	}
	if (o->flushing && !o->round_inflight && o->cursor >= o->nr_slots)
		obj_round_end(o);
}

static void obj_kick_job(void *arg)
{
	struct cached_obj *o = arg;

	__atomic_store_n(&o->kick_queued, false, __ATOMIC_RELEASE);
	obj_kick_now(o);
	obj_put(o->c, o->entry); /* the kick's reference */
}

/* Queue a flush of o from outside its workq; the caller holds a reference
 * (the kick takes its own). */
static void obj_kick(struct cached_obj *o)
{
	if (__atomic_exchange_n(&o->kick_queued, true, __ATOMIC_ACQ_REL))
		return;
	xcache_get(o->entry);
	xworkq_enqueue(&o->wq, &o->kick_job, obj_kick_job, o);
}

/* ------------------------------------------------------------------ */
/* Next-port completions                                               */
/* ------------------------------------------------------------------ */

/* Does WRITE cio need the old contents of slot s (it covers s only in
 * part)? Same rule as cio_write's read-modify-write. */
static bool cio_write_partial_slot(const struct cached *c,
				   const struct cached_cio *cio, uint32_t f,
				   uint32_t k, uint32_t s)
{
	const struct xseg_request *req = cio->req;
	uint64_t bs = c->cfg.bucket_size;

	if (s == f && (req->offset % bs != 0 || (k == 1 && req->size < bs)))
		return true;
	return s == f + k - 1 && (req->offset + req->size) % bs != 0;
}

/* A failed fetch fails the readers that wait for its slots, and the
 * writers that needed the old data of one of them (a partial bucket):
 * the buckets go back to INVALID and the error reaches those clients. A
 * writer that covers the failed buckets whole only waited for the load
 * not to overwrite it: it goes on (review finding M8). */
static void obj_fail_waiters(struct cached_obj *o, uint32_t first, uint32_t n,
			     int error)
{
	struct cached *c = o->c;

	for (struct cached_waiter *w = o->waiters; w; w = w->next) {
		struct cached_cio *cio;
		uint32_t f, k, lo, hi;
		bool hit = false;

		if (w->fn != cio_waiter_fn)
			continue;
		cio = container_of(w, struct cached_cio, waiter);
		if (cio->phase || !cio_range(c, cio, &f, &k))
			continue;
		lo = f > first ? f : first;
		hi = f + k < first + n ? f + k : first + n;
		if (lo >= hi || cio->error)
			continue;
		if (cio->kind != CACHED_C_WRITE)
			hit = true;
		for (uint32_t s = lo; s < hi && !hit; s++)
			hit = cio_write_partial_slot(c, cio, f, k, s);
		if (hit)
			cio->error = error;
	}
}

static void cio_info_answer(struct cached *c, struct cached_cio *cio,
			    uint64_t size)
{
	struct xseg_reply_info *info = c->io->data(c, cio->req);

	info->size = size;
	cio_finish(c, cio, 0);
}

static void nreq_info_done(struct cached_obj *o, struct cached_nreq *n,
			   int error)
{
	struct cached *c = o->c;
	struct cached_cio *cio = n->cio;
	uint64_t size = 0;

	if (!error) {
		const struct xseg_reply_info *ri = c->io->data(c, n->req);

		size = ri->size;
	} else if (error == ENOENT && o->write_end) {
		/* written through us and not flushed yet: it exists for
		 * anyone reading through the cache */
		error = 0;
	}
	if (!error && cio->size_gen == o->size_gen) {
		o->size = size;
		o->size_known = true;
	}
	nreq_put(c, n);
	if (error)
		cio_finish(c, cio, error);
	else
		cio_info_answer(c, cio,
				size > o->write_end ? size : o->write_end);
}

/* Every piece of a NOCACHE write is back (or one failed and nothing more
 * is sent): account its effect on the object's size, let the object's
 * reads and writes go on, complete the client. */
static void cio_nc_maybe_done(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	struct xseg_request *req = cio->req;

	if (cio->nc_inflight || (!cio->error && cio->nc_sent < req->size))
		return;
	CACHED_CHECK(o->nocache_inflight > 0);
	o->nocache_inflight--;
	if (!cio->error) {
		if (req->offset + req->size > o->write_end)
			o->write_end = req->offset + req->size;
		req->serviced = req->size;
	} else {
		/* some pieces may have landed: the size is unknown */
		o->size_known = false;
		o->size_gen++;
	}
	obj_wake_all(o);
	obj_drop_created(c, o, cio);
	cio_finish(c, cio, cio->error);
}

static void nreq_done_job(void *arg)
{
	struct cached_nreq *n = arg;
	struct cached_obj *o = n->obj;
	struct cached *c = o->c;
	struct xcache_entry *e = o->entry;
	uint64_t bs = c->cfg.bucket_size;
	int error = n->error;

	if (n->kind == CACHED_N_FETCH) {
		const unsigned char *data = c->io->data(c, n->req);

		for (uint32_t s = n->first; s < n->first + n->n; s++) {
			if (o->bstate[s] != CACHED_B_LOADING)
				continue;
			if (!error) {
				memcpy(
				    cached_pool_bucket(&c->pool, o->bucket[s]),
				    data + (uint64_t)(s - n->first) * bs, bs);
				cached_obj_set_bstate(o, s, CACHED_B_VALID);
			} else {
				cached_obj_set_bstate(o, s, CACHED_B_INVALID);
			}
		}
		if (error)
			obj_fail_waiters(o, n->first, n->n, error);
		else
			CACHED_STAT(c, bytes_from_next, (uint64_t)n->n * bs);
		nreq_put(c, n);
		obj_wake_all(o);
	} else if (n->kind == CACHED_N_INFO) {
		nreq_info_done(o, n, error);
	} else if (n->kind == CACHED_N_OP) {
		nreq_op_done(o, n, error);
	} else if (n->kind == CACHED_N_UNCACHED) {
		struct cached_cio *cio = n->cio;

		if (error && !cio->error)
			cio->error = error;
		if (!error) {
			const unsigned char *data = c->io->data(c, n->req);

			for (uint32_t s = n->first; s < n->first + n->n; s++)
				cio_read_copy_slot(
				    c, cio, s,
				    data + (uint64_t)(s - n->first) * bs);
			CACHED_STAT(c, bytes_from_next, (uint64_t)n->n * bs);
		}
		cio->unc_inflight--;
		nreq_put(c, n);
		/* parked for a request: its resumption finishes */
		cio_uncached_maybe_done(o, cio);
	} else if (n->kind == CACHED_N_PASS) {
		struct cached_cio *cio = n->cio;

		if (error && !cio->error)
			cio->error = error;
		if (!error)
			CACHED_STAT(c, bytes_to_next, n->req->size);
		cio->nc_inflight--;
		nreq_put(c, n);
		/* phase 3: parked for a request, its resumption finishes */
		if (cio->phase == 2)
			cio_nc_maybe_done(o, cio);
	} else {
		for (uint32_t s = n->first; s < n->first + n->n; s++) {
			/* DIRTY means rewritten meanwhile: stays dirty */
			if (o->bstate[s] == CACHED_B_WRITING)
				cached_obj_set_bstate(o, s,
						      error ? CACHED_B_DIRTY
							    : CACHED_B_VALID);
			/* data no write-back write acknowledged: only
			 * failed write-through/FUA writes carry it */
			if (error && o->bstate[s] == CACHED_B_DIRTY)
				cached_obj_mark_failed(o, s);
		}
		flush_write_result(c, error);
		if (error && !o->round_error)
			o->round_error = error;
		if (!error)
			CACHED_STAT(c, bytes_to_next, n->req->size);
		o->round_inflight--;
		nreq_put(c, n);
		if (o->flushing && !o->nreq_parked)
			obj_flush_continue(o);
	}
	obj_put(c, e); /* the nreq's reference; may release o */
}

/* Report through io->flush_error once per errno per
 * CACHED_FLUSH_ERROR_LOG_NS (slot 0: "writes go through again"). */
static void flush_error_report(struct cached *c, int error)
{
	unsigned slot = error < CACHED_FERR_SLOTS - 1 ? (unsigned)error
						      : CACHED_FERR_SLOTS - 1;
	uint64_t now = xtime_ns(CLOCK_MONOTONIC), suppressed = 0;
	bool report = false;

	if (!c->io->flush_error)
		return;
	pthread_mutex_lock(&c->ferr_lock);
	if (!c->ferr_last_ns[slot] ||
	    now - c->ferr_last_ns[slot] >= CACHED_FLUSH_ERROR_LOG_NS) {
		report = true;
		suppressed = c->ferr_suppressed[slot];
		c->ferr_suppressed[slot] = 0;
		c->ferr_last_ns[slot] = now ? now : 1;
	} else {
		c->ferr_suppressed[slot]++;
	}
	pthread_mutex_unlock(&c->ferr_lock);
	if (report)
		c->io->flush_error(c, error, suppressed);
}

/* A flush write to the next port came back (object's workq). Failures
 * set flush_failing (reads that find no bucket are then served uncached:
 * wake those parked) and are reported; the first success after them
 * clears it. */
static void flush_write_result(struct cached *c, int error)
{
	if (error) {
		/* the errno first: whoever sees flush_failing reads this
		 * failure's errno or a later one */
		__atomic_store_n(&c->flush_errno, (uint32_t)error,
				 __ATOMIC_RELEASE);
		if (!__atomic_load_n(&c->flush_failing, __ATOMIC_RELAXED) &&
		    !__atomic_exchange_n(&c->flush_failing, 1,
					 __ATOMIC_ACQ_REL)) {
			/* the run of failures the space-wait bound counts
			 * from (cached_space_expire) */
			__atomic_store_n(&c->failing_since_ns,
					 xtime_ns(CLOCK_MONOTONIC),
					 __ATOMIC_RELEASE);
			/* its jobs only queue restarts: safe from here */
			xwaitq_signal(&c->space_rwaitq);
		}
		/* a store out of space (or whose errno changed to that):
		 * requests parked for space fail rather than wait */
		if (cached_space_refused(c))
			xwaitq_signal(&c->space_waitq);
		flush_error_report(c, error);
		return;
	}
	if (__atomic_load_n(&c->flush_failing, __ATOMIC_RELAXED) &&
	    __atomic_exchange_n(&c->flush_failing, 0, __ATOMIC_ACQ_REL)) {
		/* writes go through: waiting for space makes sense again */
		__atomic_store_n(&c->space_give_up, 0, __ATOMIC_RELEASE);
		flush_error_report(c, 0);
	}
}

void cached_nreq_done(struct cached *c, struct cached_nreq *n, int error,
		      uint64_t serviced)
{
	uint64_t size = n->req->size;

	if (error < 0)
		error = -error;
	n->serviced = serviced;
	/* A read of an object never written is answered ENOENT: normal
	 * (review11 N-I), counted apart from the errors. For a fetch or an
	 * uncached read it means the object does not exist at the next
	 * port: its bytes read as zeroes, as the blocker answers them
	 * (review14 F3: failing the fetch failed reads that also hit
	 * acknowledged dirty buckets, which vlmc then read as zeroes, and
	 * every read-modify-write of a partial bucket of a new object). */
	if (error == ENOENT) {
		CACHED_STAT(c, next_enoent, 1);
		if (n->kind == CACHED_N_FETCH || n->kind == CACHED_N_UNCACHED) {
			memset(c->io->data(c, n->req), 0, size);
			error = 0;
			serviced = size;
			n->serviced = 0;
		}
	}
	if (!error && serviced < size && n->kind != CACHED_N_INFO &&
	    n->kind != CACHED_N_OP) {
		if (n->kind == CACHED_N_WRITE || n->kind == CACHED_N_PASS) {
			/* A store that "succeeds" without writing would leave
			 * the buckets dirty forever: an error, retried. */
			error = EIO;
		} else {
			/* a short read ends at the end of the object */
			unsigned char *data = c->io->data(c, n->req);
			memset(data + serviced, 0, size - serviced);
		}
	}
	if (error && error != ENOENT)
		CACHED_STAT(c, next_errors, 1);
	n->error = error;
	if (n->kind == CACHED_N_UNC_DELETE)
		xworkq_enqueue(&c->redispatch_wq, &n->job, unc_delete_done_job,
			       n);
	else
		xworkq_enqueue(&n->obj->wq, &n->job, nreq_done_job, n);
}

/* ------------------------------------------------------------------ */
/* Flush-wait, DELETE, COPY, INFO, HASH                                */
/* ------------------------------------------------------------------ */

static void cio_flushwait(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;

	if (cio->phase == 0) {
		if (cached_obj_clean(o) && !o->flushing)
			goto done;
		cio->phase = 1;
		cio->waiter.need_seq = o->seq_started + 1;
	}
	if (o->seq_done < cio->waiter.need_seq) {
		cio->waiter.fn = cio_waiter_fn;
		obj_wait(o, &cio->waiter);
		obj_kick_now(o);
		return;
	}
	if (o->last_round_error) {
		cio_finish(c, cio, o->last_round_error);
		return;
	}
done:
	obj_drop_created(c, o, cio);
	if (cio->kind == CACHED_C_COPY_SRC) {
		cio_release_obj(c, cio);
		cio->kind = CACHED_C_COPY_DST;
		cio->phase = 0;
		xworkq_enqueue(&c->redispatch_wq, &cio->job, redispatch_job,
			       cio);
		return;
	}
	cio_forward(c, cio);
}

/* The DELETE/COPY that fenced o gives up before sending its operation
 * (its pre-op flush failed): the name is open again, with the object as
 * the client last wrote it (its dirty buckets, their acked flags and the
 * unflushed count untouched), and the client gets the error. */
static void cio_delete_abort(struct cached_obj *o, struct cached_cio *cio,
			     int error)
{
	o->fenced = false;
	o->fence_owner = NULL;
	/* FAILED: the round failed, its data stays dirty and is retried
	 * (a FLUSH, an eviction, cached_retry_failed, shutdown) */
	cached_obj_set_state(o, CACHED_O_FAILED);
	obj_wake_all(o); /* requests that waited at the fence go on */
	cio_finish(o->c, cio, error);
}

/*
 * DELETE, or a COPY onto o (phase 2 of a COPY).
 *
 * Acknowledged write-back data of the target is written to the next port
 * BEFORE the operation is sent, never dropped ahead of the answer (review9
 * R9-8). Dropping it first (as cached did) lost it whenever the next port
 * failed the operation (COPY from a missing source: ENOENT; a degraded
 * store: EIO; a store dying: ECONNRESET): the store kept the object's older
 * content and reads returned that, after the client had been told its
 * writes were done and the DELETE/COPY had not happened.
 *
 * Why flush first rather than keep the dirty buckets through the operation
 * and decide on the answer (invalidate on success, keep them dirty on
 * failure): the answer does not say what the store did. An ECONNRESET of a
 * store that died after executing the DELETE, or a reaped request the store
 * had already applied, leaves the object deleted (or replaced); dirty
 * buckets kept and flushed later would write pieces of the old object over
 * the new one, a mix that is neither. With the store holding every
 * acknowledged byte before the operation goes, the store is the truth
 * whatever the answer: cached drops its copy on any answer, and a later
 * read fetches either the object as last written (operation not done) or
 * its result (done). The price is one write of data about to be deleted or
 * replaced, only for a target holding unflushed write-back data, and only
 * that data (clean objects send the operation at once, as before).
 *
 * cached sends the operation itself rather than forwarding the client's
 * request: a forward gave no way to know when it took effect, so a read
 * restarted or arriving meanwhile could fetch (and keep) data from before
 * it (review finding R3).
 *
 * Concurrency: the name is fenced (o->fenced) from before that flush until
 * the answer: every other request for the object waits as a waiter
 * (cio_run), so nothing reads data the operation is about to replace and
 * nothing can make the object dirty again meanwhile; requests woken when
 * it ends restart on a new entry and fetch what the next port has after
 * the operation. The fence is raised only once no flush round, no parked
 * round and no NOCACHE write is in flight (they could land after the
 * operation and bring old data back; a NOCACHE write's pieces resume
 * through cio_run, which the fence would stop). Rounds started while
 * fenced (ours; a kick from eviction, the dirty threshold, a FLUSH or
 * shutdown joins it) can only write data acknowledged before the fence, and
 * all of them end before the operation is sent. If the flush fails the
 * operation is not sent: the client gets the flush's error and the object
 * stays as last written, still dirty and counted (cio_delete_abort).
 */
static void cio_delete(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;

	struct xseg_request *req = cio->req;
	struct cached_nreq *nr;

	if (cio->phase == 0) {
		if (o->flushing || o->nreq_parked || o->nocache_inflight) {
			cached_obj_set_state(o, CACHED_O_DELETING);
			cio->waiter.fn = cio_waiter_fn;
			cio->waiter.need_seq = 0;
			obj_wait(o, &cio->waiter);
			return;
		}
		o->fenced = true;
		o->fence_owner = cio;
		cached_obj_set_state(o, CACHED_O_DELETING);
		cio->phase = 1;
		cio->waiter.need_seq = 0;
	}
	/* phase 1: fenced; the target's unflushed data goes first. Also
	 * while the next port refuses writes (a full store): the DELETE then
	 * fails with its errno, the data stays dirty and counted, and a retry
	 * once the store takes writes again goes through. Sending it without
	 * that data and deciding on the answer cannot be made safe: an
	 * answer that does not say whether the store deleted the object
	 * (ECONNRESET of a store that died after doing it, ETIMEDOUT, EIO)
	 * would leave kept data to be written later over the deleted object,
	 * a mix that is neither (review16 F1; see above). */
	if (!cached_obj_clean(o) || o->flushing) {
		if (cio->waiter.need_seq &&
		    o->seq_done >= cio->waiter.need_seq) {
			if (o->last_round_error) {
				cio_delete_abort(o, cio, o->last_round_error);
				return;
			}
			/* clean unless a round started before ours left
			 * something: one more */
		}
		if (!cio->waiter.need_seq ||
		    o->seq_done >= cio->waiter.need_seq)
			cio->waiter.need_seq = o->seq_started + 1;
		cio->waiter.fn = cio_waiter_fn;
		obj_wait(o, &cio->waiter);
		obj_kick_now(o);
		return;
	}
	nr = nreq_get(c);
	if (!nr) {
		/* resumed through cio_run, which lets the fence's owner in */
		cio_park_nreq(c, cio);
		return;
	}
	/* nothing of the object is unflushed now: the next port has every
	 * acknowledged byte, and the fence keeps it so */
	CACHED_CHECK(cached_obj_clean(o));
	CACHED_CHECK(!o->flushing);
	cio->phase = 2;
	nr->kind = CACHED_N_OP;
	nr->cio = cio;
	nr->first = nr->n = 0;
	nr->req->op = req->op;
	nr->req->flags = req->flags;
	nr->req->offset = 0;
	nr->req->size = 0;
	if (req->op == XSEG_OP_COPY) {
		/* from the names checked at submission, not from the
		 * client's buffer, which its owner may have rewritten */
		struct xseg_request_copy *cp = c->io->data(c, nr->req);

		memset(cp, 0, sizeof(*cp));
		cp->src_targetlen = (uint32_t)strlen(cio->src_name);
		memcpy(cp->src_target, cio->src_name, cp->src_targetlen);
		nr->req->size = sizeof(struct xseg_request_copy);
	}
	nreq_send(c, o, nr);
}

/* The next port answered the DELETE or COPY whose target is o: drop what
 * the cache holds of it (all clean: cio_delete flushed it first, so the
 * next port is right whatever it answered), unfence the name (waiters
 * restart on a new entry, after the operation took effect or failed) and
 * answer the client. */
static void nreq_op_done(struct cached_obj *o, struct cached_nreq *n, int error)
{
	struct cached *c = o->c;
	struct cached_cio *cio = n->cio;

	nreq_put(c, n);
	CACHED_CHECK(cached_obj_clean(o));
	for (uint32_t s = 0; s < o->nr_slots; s++)
		if (o->bucket[s] != CACHED_NO_BUCKET &&
		    o->bstate[s] != CACHED_B_INVALID)
			/* a load in flight ends up ignored: not LOADING */
			cached_obj_set_bstate(o, s, CACHED_B_INVALID);
	xcache_remove(c->cache, o->entry); /* -ENOENT: already detached */
	space_kick(c);
	o->fenced = false;
	o->fence_owner = NULL;
	cached_obj_set_state(o, CACHED_O_INVALIDATED);
	obj_wake_all(o); /* they look the name up again */
	cio_finish(c, cio, error);
}

/* ------------------------------------------------------------------ */
/* INFO and NOCACHE                                                    */
/* ------------------------------------------------------------------ */

/* A NOCACHE request, a HASH or a COPY source created this entry (nothing
 * of the object was cached) and is done with it: take it out again, so
 * that passing through does not occupy the cache. Only if nothing else
 * uses it: no bucket, no waiter, nothing in flight. Runs on the object's
 * workq; a request that found the entry meanwhile restarts on a new
 * lookup (INVALIDATED), and there is no data to lose. The release comes
 * with the caller's put of its reference. */
static void obj_drop_created(struct cached *c, struct cached_obj *o,
			     struct cached_cio *cio)
{
	if (!cio->created)
		return;
	cio->created = false;
	if (o->nr_claimed || o->waiters || o->nocache_inflight || o->fenced ||
	    o->flushing || o->nreq_parked || o->kept ||
	    cached_obj_state(o) != CACHED_O_READY)
		return;
	cached_obj_set_state(o, CACHED_O_INVALIDATED);
	xcache_remove(c->cache, o->entry);
	space_kick(c);
}

static void cio_info(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	struct cached_nreq *nr;

	if (o->size_known) {
		CACHED_STAT(c, info_hits, 1);
		cio_info_answer(
		    c, cio, o->size > o->write_end ? o->size : o->write_end);
		return;
	}
	/* No flush first: the next port's size plus write_end is what it
	 * will report once our dirty data reached it. */
	nr = nreq_get(c);
	if (!nr) {
		cio_park_nreq(c, cio);
		return;
	}
	CACHED_STAT(c, info_asked, 1);
	cio->size_gen = o->size_gen;
	nr->kind = CACHED_N_INFO;
	nr->cio = cio;
	nr->first = nr->n = 0;
	nr->req->op = XSEG_OP_INFO;
	nr->req->flags = 0;
	nr->req->offset = 0;
	nr->req->size = sizeof(struct xseg_reply_info);
	nreq_send(c, o, nr);
}

/*
 * Make the next port hold the newest data of slots [first, first+n): if
 * any is DIRTY or WRITING, wait for a round that started after now.
 * Returns 0 when the range is clean, -1 when cio now waits (it runs again
 * at the round's end), or the positive errno of a failed round.
 */
static int cio_flush_range(struct cached_obj *o, struct cached_cio *cio,
			   uint32_t first, uint32_t n)
{
	bool unclean = false;

	for (uint32_t s = first; s < first + n && !unclean; s++)
		unclean = o->bucket[s] != CACHED_NO_BUCKET &&
			  (o->bstate[s] == CACHED_B_DIRTY ||
			   o->bstate[s] == CACHED_B_WRITING);
	if (!unclean)
		return 0;
	if (cio->phase == 1 && o->seq_done >= cio->waiter.need_seq) {
		if (o->last_round_error)
			return o->last_round_error;
		cio->phase = 0; /* rewritten since: one more round */
	}
	if (cio->phase == 0) {
		cio->phase = 1;
		cio->waiter.need_seq = o->seq_started + 1;
	}
	cio->waiter.fn = cio_waiter_fn;
	obj_wait(o, &cio->waiter);
	obj_kick_now(o);
	return -1;
}

static void cio_nc_read(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	uint32_t first, n;
	int rc;

	if (!cio_range(c, cio, &first, &n)) {
		cio_finish(c, cio, EINVAL);
		return;
	}
	if (cio->req->size) {
		rc = cio_flush_range(o, cio, first, n);
		if (rc < 0)
			return;
		if (rc > 0) {
			cio_finish(c, cio, rc);
			return;
		}
	}
	CACHED_STAT(c, nocache_reads, 1);
	obj_drop_created(c, o, cio);
	cio_forward(c, cio);
}

static void cio_nc_write(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	uint32_t first, n;
	int rc;

	if (cio->phase == 3) {
		cio->phase = 2; /* resumed after a wait for a request */
		cio_nc_send(o, cio);
		return;
	}
	if (!cio_start_range(c, cio, &first, &n))
		return;
	cio->error = 0; /* a failed load we waited for is not ours */
	for (uint32_t s = first; s < first + n; s++) {
		/* a load in flight would cache what was there before */
		if (o->bucket[s] != CACHED_NO_BUCKET &&
		    o->bstate[s] == CACHED_B_LOADING) {
			cio->waiter.fn = cio_waiter_fn;
			cio->waiter.need_seq = 0;
			obj_wait(o, &cio->waiter);
			return;
		}
	}
	/* dirty data of partially covered buckets must not be lost, and
	 * no older flush may land after our write */
	rc = cio_flush_range(o, cio, first, n);
	if (rc < 0)
		return;
	if (rc > 0) {
		cio_finish(c, cio, rc);
		return;
	}
	for (uint32_t s = first; s < first + n; s++)
		if (o->bucket[s] != CACHED_NO_BUCKET &&
		    o->bstate[s] != CACHED_B_INVALID)
			cached_obj_set_bstate(o, s, CACHED_B_INVALID);
	o->nocache_inflight++;
	CACHED_STAT(c, nocache_writes, 1);
	cio->phase = 2;
	cio->nc_sent = 0;
	cio->nc_inflight = 0;
	cio_nc_send(o, cio);
}

/* Send the rest of a NOCACHE write in pieces of max_req_size (phase 2);
 * park for a free request when none is left (phase 3). Once a piece
 * failed nothing more is sent. */
static void cio_nc_send(struct cached_obj *o, struct cached_cio *cio)
{
	struct cached *c = o->c;
	struct xseg_request *req = cio->req;
	const unsigned char *data = c->io->data(c, req);

	while (!cio->error && cio->nc_sent < req->size) {
		uint64_t len = req->size - cio->nc_sent;
		struct cached_nreq *nr = nreq_get(c);

		if (!nr) {
			cio->phase = 3;
			cio_park_nreq(c, cio);
			return;
		}
		if (len > c->cfg.max_req_size)
			len = c->cfg.max_req_size;
		memcpy(c->io->data(c, nr->req), data + cio->nc_sent, len);
		nr->kind = CACHED_N_PASS;
		nr->cio = cio;
		nr->first = nr->n = 0;
		nr->req->op = XSEG_OP_WRITE;
		nr->req->flags = req->flags;
		nr->req->offset = req->offset + cio->nc_sent;
		nr->req->size = len;
		cio->nc_sent += len;
		cio->nc_inflight++;
		/* its completion is a job of this workq: it runs after us */
		nreq_send(c, o, nr);
	}
	cio_nc_maybe_done(o, cio);
}

/* ------------------------------------------------------------------ */
/* FLUSH                                                               */
/* ------------------------------------------------------------------ */

struct cached_flushwait {
	struct cached_waiter waiter;
	struct cached_cio *cio;
	struct cached_obj *obj;
	struct xworkq_job job;
	struct cached_flushwait *next_free;
};

static struct cached_flushwait *fw_get(struct cached *c)
{
	struct cached_flushwait *fw;

	pthread_mutex_lock(&c->fw_lock);
	fw = c->fw_free;
	if (fw) {
		c->fw_free = fw->next_free;
		__atomic_store_n(&c->fw_nr_free, c->fw_nr_free - 1,
				 __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&c->fw_lock);
	return fw;
}

static void fw_put(struct cached *c, struct cached_flushwait *fw)
{
	pthread_mutex_lock(&c->fw_lock);
	fw->next_free = c->fw_free;
	c->fw_free = fw;
	__atomic_store_n(&c->fw_nr_free, c->fw_nr_free + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->fw_lock);
	xwaitq_signal(&c->fw_waitq);
}

static bool fw_available(void *arg)
{
	struct cached *c = arg;

	return __atomic_load_n(&c->fw_nr_free, __ATOMIC_ACQUIRE) > 0;
}

static void flush_op_start(struct cached *c, struct cached_cio *cio);

static void flush_rewalk_job(void *arg)
{
	struct cached_cio *cio = arg;

	flush_op_start(cio->c, cio);
}

/* a flushwait is free again: walk again, from the redispatch workq */
static void fw_wake_job(void *arg)
{
	struct cached_cio *cio = arg;

	xworkq_enqueue(&cio->c->redispatch_wq, &cio->job, flush_rewalk_job,
		       cio);
}

static void flush_op_finish(struct cached *c, struct cached_cio *cio)
{
	if (!cio->error && cio->flush_rewalk) {
		/* Some objects could not be waited for (no flushwait left):
		 * what was registered is flushed; walk again for the rest.
		 * A round started now is still one that started after the
		 * FLUSH arrived. From the redispatch workq: the walk takes
		 * references, never nested in an object's job. */
		cio->flush_rewalk = false;
		xworkq_enqueue(&c->redispatch_wq, &cio->job, flush_rewalk_job,
			       cio);
		return;
	}
	if (cio->error)
		cio_finish(c, cio, cio->error);
	else
		cio_forward(c, cio);
}

static void flush_op_put(struct cached *c, struct cached_cio *cio)
{
	if (__atomic_sub_fetch(&cio->pending, 1, __ATOMIC_ACQ_REL) == 0)
		flush_op_finish(c, cio);
}

static void flushwait_fn(struct cached_obj *o, struct cached_waiter *w)
{
	struct cached_flushwait *fw =
	    container_of(w, struct cached_flushwait, waiter);
	struct cached *c = o->c;
	struct cached_cio *cio = fw->cio;

	if (o->seq_done < w->need_seq) {
		obj_wait(o, w);
		return;
	}
	if (o->last_round_error) {
		int zero = 0;
		__atomic_compare_exchange_n(&cio->error, &zero,
					    o->last_round_error, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	obj_put(c, o->entry);
	fw_put(c, fw);
	flush_op_put(c, cio);
}

static void flushwait_job(void *arg)
{
	struct cached_flushwait *fw = arg;
	struct cached_obj *o = fw->obj;

	if (cached_obj_clean(o) && !o->flushing) {
		fw->waiter.need_seq = 0; /* done at once */
		flushwait_fn(o, &fw->waiter);
		return;
	}
	fw->waiter.fn = flushwait_fn;
	fw->waiter.need_seq = o->seq_started + 1;
	obj_wait(o, &fw->waiter);
	obj_kick_now(o);
}

struct cached_flush_walk {
	struct cached_cio *cio;
	const char *name;    /* NULL: every object */
	uint32_t registered; /* objects it waits for */
};

static int flush_op_visit(struct xcache *cache, struct xcache_entry *e,
			  void *arg)
{
	struct cached_flush_walk *walk = arg;
	struct cached_cio *cio = walk->cio;
	struct cached_obj *o = xcache_entry_priv(e);
	struct cached_flushwait *fw;

	if (walk->name && strcmp(xcache_entry_name(e), walk->name))
		return 0;
	if (!__atomic_load_n(&o->unclean, __ATOMIC_ACQUIRE))
		return 0;
	fw = fw_get(o->c);
	if (!fw) {
		/* as many as objects, but FLUSHes overlap: the rest waits
		 * for a second walk (flush_op_finish) */
		cio->flush_rewalk = true;
		return 1;
	}
	(void)cache;
	fw->cio = cio;
	fw->obj = o;
	walk->registered++;
	xcache_get(e);
	__atomic_add_fetch(&cio->pending, 1, __ATOMIC_ACQ_REL);
	xworkq_enqueue(&o->wq, &fw->job, flushwait_job, fw);
	return 0;
}

static void flush_op_start(struct cached *c, struct cached_cio *cio)
{
	struct cached_flush_walk walk = {cio, NULL, 0};
	struct xcache_entry *e;

	cio->pending = 1; /* ours, dropped after the walk */
	cio->flush_rewalk = false;
	if (cio->name[0]) {
		walk.name = cio->name;
		if (!cio->phase)
			CACHED_STAT(c, targeted_flushes, 1);
	}
	cio->phase = 1; /* a later walk is a rewalk */
	if (walk.name && !xcache_lookup(c->cache, walk.name, &e)) {
		flush_op_visit(c->cache, e, &walk);
		obj_put(c, e);
	} else {
		/* Not active: it may be evicted and still flushing. The
		 * walk visits every pool node once whatever table it moves
		 * to meanwhile, so it cannot miss the object. */
		xcache_for_each(c->cache,
				XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED,
				flush_op_visit, &walk);
	}
	space_kick(c);
	if (cio->flush_rewalk && !walk.registered) {
		/* Every flushwait is taken by other FLUSHes: wait for one
		 * rather than walk again at once (a spin). Nothing holds
		 * this FLUSH meanwhile: it registered nothing. */
		xwaitq_enqueue(&c->fw_waitq, &cio->wjob, fw_wake_job, cio);
		return;
	}
	flush_op_put(c, cio);
}

static int flush_all_visit(struct xcache *cache, struct xcache_entry *e,
			   void *arg)
{
	struct cached_obj *o = xcache_entry_priv(e);
	unsigned *count = arg;

	(void)cache;
	if (__atomic_load_n(&o->unclean, __ATOMIC_ACQUIRE)) {
		obj_kick(o);
		(*count)++;
	}
	return 0;
}

static int retry_failed_visit(struct xcache *cache, struct xcache_entry *e,
			      void *arg)
{
	struct cached_obj *o = xcache_entry_priv(e);
	unsigned *count = arg;

	(void)cache;
	if (cached_obj_state(o) == CACHED_O_FAILED &&
	    __atomic_load_n(&o->unclean, __ATOMIC_ACQUIRE)) {
		obj_kick(o);
		(*count)++;
	}
	return 0;
}

bool cached_space_expire(struct cached *c)
{
	uint64_t since, now;

	if (!__atomic_load_n(&c->flush_failing, __ATOMIC_ACQUIRE))
		return false;
	/* a wake-up that raced with a parking is caught here */
	if (cached_space_refused(c)) {
		xwaitq_signal(&c->space_waitq);
		return false;
	}
	if (!c->cfg.space_wait_ns)
		return false; /* wait as long as the store refuses */
	since = __atomic_load_n(&c->failing_since_ns, __ATOMIC_ACQUIRE);
	now = xtime_ns(CLOCK_MONOTONIC);
	if (now < since || now - since < c->cfg.space_wait_ns)
		return false;
	if (__atomic_exchange_n(&c->space_give_up, 1, __ATOMIC_ACQ_REL))
		return false;
	/* flush_failing may have been cleared since we looked: then the
	 * give-up must not stay (the success cleared it before us) */
	if (!__atomic_load_n(&c->flush_failing, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&c->space_give_up, 0, __ATOMIC_RELEASE);
		return false;
	}
	/* the parked requests fail with the last flush errno (reads are
	 * served uncached since the first failure) */
	xwaitq_signal(&c->space_waitq);
	return true;
}

unsigned cached_retry_failed(struct cached *c)
{
	unsigned count = 0;

	/* reads parked for space while flushes fail go uncached: a
	 * wake-up that raced with their parking is caught here */
	if (__atomic_load_n(&c->flush_failing, __ATOMIC_ACQUIRE))
		xwaitq_signal(&c->space_rwaitq);
	if (!__atomic_exchange_n(&c->retry_pending, false, __ATOMIC_ACQ_REL))
		return 0;
	xcache_for_each(c->cache, XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED,
			retry_failed_visit, &count);
	space_kick(c);
	CACHED_STAT(c, failed_retries, count);
	return count;
}

/* cached_drop_failed's job: drop the failed-write data of o if nothing
 * wants it written now (no round in flight or parked, no writer waiting
 * for a round, no fence). */
static void obj_drop_failed_job(void *arg)
{
	struct cached_obj *o = arg;
	struct cached *c = o->c;
	uint64_t dropped = 0;

	__atomic_store_n(&o->drop_queued, false, __ATOMIC_RELEASE);
	if (!o->flushing && !o->nreq_parked && !o->fenced &&
	    !obj_needs_round(o)) {
		for (uint32_t s = 0; s < o->nr_slots; s++)
			if (o->bucket[s] != CACHED_NO_BUCKET &&
			    o->bstate[s] == CACHED_B_DIRTY &&
			    o->acked[s] == CACHED_ACK_FAILED) {
				cached_obj_set_bstate(o, s, CACHED_B_INVALID);
				dropped++;
			}
		if (dropped && cached_obj_clean(o) &&
		    cached_obj_state(o) == CACHED_O_FAILED)
			cached_obj_set_state(o, CACHED_O_READY);
		CACHED_STAT(c, failed_dropped, dropped);
		if (dropped && o->kept && cached_obj_clean(o) &&
		    xcache_entry_state(o->entry) != XCACHE_ACTIVE) {
			/* evicted and kept only for that data */
			o->kept = false;
			obj_put(c, o->entry);
		}
	}
	obj_put(c, o->entry); /* the job's reference; may release o */
}

static int drop_failed_visit(struct xcache *cache, struct xcache_entry *e,
			     void *arg)
{
	struct cached_obj *o = xcache_entry_priv(e);
	unsigned *count = arg;

	(void)cache;
	if (!__atomic_load_n(&o->unclean, __ATOMIC_ACQUIRE) ||
	    __atomic_exchange_n(&o->drop_queued, true, __ATOMIC_ACQ_REL))
		return 0;
	xcache_get(e);
	xworkq_enqueue(&o->wq, &o->drop_job, obj_drop_failed_job, o);
	(*count)++;
	return 0;
}

unsigned cached_drop_failed(struct cached *c)
{
	unsigned count = 0;

	xcache_for_each(c->cache, XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED,
			drop_failed_visit, &count);
	space_kick(c);
	return count;
}

unsigned cached_flush_all(struct cached *c)
{
	unsigned count = 0;

	xcache_for_each(c->cache, XCACHE_TABLE_ACTIVE | XCACHE_TABLE_EVICTED,
			flush_all_visit, &count);
	space_kick(c);
	return count;
}

void cached_set_policy(struct cached *c, enum cached_policy p)
{
	__atomic_store_n(&c->policy, (uint32_t)p, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */
/* ------------------------------------------------------------------ */

static void cio_run(struct cached_obj *o, struct cached_cio *cio)
{
	/* A request can hold an object that is no longer ACTIVE without a
	 * re-insertion: xcache's lock-free lookup may take its reference
	 * after the eviction (and after the final job found it clean).
	 * Count that as a revival, as on_reinsert would, so a "clean and
	 * unused" verdict taken before this job cannot release buckets
	 * this request is about to dirty. */
	if (xcache_entry_state(o->entry) != XCACHE_ACTIVE)
		__atomic_add_fetch(&o->revivals, 1, __ATOMIC_ACQ_REL);
	/* an uncached READ resuming after a wait for a request: its
	 * fetches in flight point to it, so it neither restarts nor waits
	 * at a fence; what it still reads is concurrent with the
	 * DELETE/COPY, either side of it is right */
	bool uncached = cio->kind == CACHED_C_READ &&
			cio->phase == CACHED_READ_UNCACHED_PARKED;

	if (cached_obj_state(o) == CACHED_O_INVALIDATED && !uncached &&
	    !(cio->kind == CACHED_C_NC_WRITE && cio->phase >= 2)) {
		/* deleted or replaced by a COPY since we found it (a NOCACHE
		 * write already sending goes on: its pieces hold this
		 * object and its nocache_inflight count) */
		cio_restart(o->c, cio);
		return;
	}
	if (o->fenced && o->fence_owner != cio && !uncached &&
	    !(cio->kind == CACHED_C_WRITE && cio->phase == 1)) {
		/* A DELETE/COPY of this name is flushing it or at the next
		 * port: wait for its end (which restarts us on a new entry,
		 * or lets us go on if it failed before sending). Not its
		 * owner, and not a write-through/FUA write whose data is
		 * already in the buckets and which only waits for the
		 * round that carries it (it reads the round's result). */
		cio->waiter.fn = cio_waiter_fn;
		cio->waiter.need_seq = 0;
		obj_wait(o, &cio->waiter);
		return;
	}
	switch (cio->kind) {
	case CACHED_C_READ:
		cio_read(o, cio);
		break;
	case CACHED_C_WRITE:
		cio_write(o, cio);
		break;
	case CACHED_C_FLUSHWAIT:
	case CACHED_C_COPY_SRC:
		cio_flushwait(o, cio);
		break;
	case CACHED_C_DELETE:
	case CACHED_C_COPY_DST:
		cio_delete(o, cio);
		break;
	case CACHED_C_INFO:
		cio_info(o, cio);
		break;
	case CACHED_C_NC_READ:
		cio_nc_read(o, cio);
		break;
	case CACHED_C_NC_WRITE:
		cio_nc_write(o, cio);
		break;
	default:
		cio_finish(o->c, cio, EOPNOTSUPP);
		break;
	}
}

/*
 * Uncached DELETE. While flushes fail, every xcache node may be held by
 * an evicted object kept for data the next port refuses (review13 R13-1),
 * and a DELETE of a name the cache holds nothing of would find no node.
 * It used to fail with the store's errno, but a DELETE (volume remove)
 * is how an operator frees space in a full store, so it is sent to the
 * next port without a node: nothing of the object is in the cache, so
 * there is nothing to flush or drop first.
 *
 * The danger is a request inserting the name while that DELETE is at the
 * next port: a READ could fetch (and keep) data from before the DELETE,
 * a partial WRITE read-modify-write it, and serve or flush it after the
 * DELETE was answered. The name fence stops that: fence[h] (h = the
 * name's hash) counts the uncached DELETEs in flight; a request whose
 * slot is nonzero when it has inserted the name (or found no node) waits
 * in fence_parked[h] until the slot drops to 0, and restarts then. Names
 * sharing a slot only wait for each other's DELETE, never more.
 *
 * Why the check after the insert suffices: the DELETE raises its slot,
 * then inserts the name again (cio_delete_uncached). If that insert finds
 * a node or the name, the DELETE drops the fence and goes the cached way
 * (cio_delete). If it answers EAGAIN (the name absent in every form,
 * under xcache's lock), every later insert of the name comes after it in
 * that lock's order, so the raised slot is visible to the inserter's
 * check; an insert before it would have been found. A request that found
 * the name lock-free found an entry inserted after the DELETE's insert
 * (and parked at the fence, holding no data) or one the DELETE saw.
 *
 * No hang: the DELETE holds an nreq to the next port, which always comes
 * back: answered, or ECONNRESET when the next port dies (the reaper fails
 * the requests a dead port held), and the answer drops the fence and
 * restarts its waiters.
 */
static uint32_t fence_slot(const char *name)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return h % CACHED_FENCE_SLOTS;
}

/* Park cio if an uncached DELETE of name's slot is in flight (true); it
 * restarts when the slot drops to 0 (fence_drop). */
static bool fence_park(struct cached *c, struct cached_cio *cio,
		       const char *name)
{
	uint32_t h;
	bool parked = false;

	if (!__atomic_load_n(&c->fence_total, __ATOMIC_ACQUIRE))
		return false;
	h = fence_slot(name);
	pthread_mutex_lock(&c->fence_lock);
	if (__atomic_load_n(&c->fence[h], __ATOMIC_RELAXED)) {
		CACHED_CHECK(cio->parked == 0);
		cio->parked = 3;
		cio->fence_next = c->fence_parked[h];
		c->fence_parked[h] = cio;
		parked = true;
	}
	pthread_mutex_unlock(&c->fence_lock);
	if (parked)
		CACHED_STAT(c, fence_waits, 1);
	return parked;
}

static void fence_raise(struct cached *c, const char *name)
{
	uint32_t h = fence_slot(name);

	pthread_mutex_lock(&c->fence_lock);
	__atomic_add_fetch(&c->fence[h], 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&c->fence_total, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&c->fence_lock);
}

/* An uncached DELETE of name is answered (or was not sent): drop its
 * count; at 0 the requests parked on the slot go on (the ones that hold
 * an entry run on it, the others look the name up again). */
static void fence_drop(struct cached *c, const char *name)
{
	uint32_t h = fence_slot(name);
	struct cached_cio *list = NULL;

	pthread_mutex_lock(&c->fence_lock);
	CACHED_CHECK(c->fence[h] > 0);
	__atomic_sub_fetch(&c->fence_total, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_sub_fetch(&c->fence[h], 1, __ATOMIC_SEQ_CST)) {
		list = c->fence_parked[h];
		c->fence_parked[h] = NULL;
	}
	pthread_mutex_unlock(&c->fence_lock);
	while (list) {
		struct cached_cio *cio = list;

		list = cio->fence_next;
		cio->fence_next = NULL;
		CACHED_CHECK(cio->parked == 3);
		cio->parked = 0;
		if (cio->obj)
			xworkq_enqueue(&cio->obj->wq, &cio->job, cio_job, cio);
		else
			xworkq_enqueue(&c->redispatch_wq, &cio->job,
				       redispatch_job, cio);
	}
}

/* The dispatch found (or inserted) the entry e for name: run cio on it,
 * unless an uncached DELETE of the name is in flight (then at its end). */
static void cio_attach(struct cached *c, struct cached_cio *cio,
		       const char *name, struct xcache_entry *e,
		       enum xcache_insert_how how)
{
	/* An evicted object is active again: the buckets parked requests
	 * counted on as coming back (away_buckets) no longer come. */
	if (how == XCACHE_REINSERTED && space_parked(c))
		space_make_room(c, 0);
	cio->created = how == XCACHE_INSERTED;
	if (how == XCACHE_INSERTED)
		cio->made_entry = true;
	cio->entry = e;
	cio->obj = xcache_entry_priv(e);
	cached_obj_prefetch(cio->obj);
	if (fence_park(c, cio, name))
		return;
	xworkq_enqueue(&cio->obj->wq, &cio->job, cio_job, cio);
}

static void nreq_wake_redispatch_job(void *arg)
{
	struct cached_cio *cio = arg;

	CACHED_CHECK(cio->parked == 1);
	cio->parked = 0;
	xworkq_enqueue(&cio->c->redispatch_wq, &cio->job, redispatch_job, cio);
}

/* A DELETE found no xcache node while flushes fail: see "Uncached
 * DELETE" above. */
static void cio_delete_uncached(struct cached *c, struct cached_cio *cio)
{
	enum xcache_insert_how how = XCACHE_FOUND;
	struct xcache_entry *e;
	struct cached_nreq *n;
	int rc;

	n = nreq_get(c);
	if (!n) {
		/* holds nothing: looks the name up again when one is free */
		CACHED_STAT(c, nreq_waits, 1);
		CACHED_CHECK(cio->parked == 0);
		cio->parked = 1;
		xwaitq_enqueue(&c->nreq_waitq, &cio->wjob,
			       nreq_wake_redispatch_job, cio);
		return;
	}
	fence_raise(c, cio->name);
	rc = xcache_insert(c->cache, cio->name, &e, &how);
	space_kick(c);
	if (rc != -EAGAIN) {
		/* a node was freed or the name inserted meanwhile: the
		 * cached way (cio_delete), which fences the entry */
		nreq_put(c, n);
		fence_drop(c, cio->name);
		if (rc < 0)
			cio_finish(c, cio, -rc);
		else
			cio_attach(c, cio, cio->name, e, how);
		return;
	}
	CACHED_STAT(c, uncached_deletes, 1);
	n->kind = CACHED_N_UNC_DELETE;
	n->cio = cio;
	n->obj = NULL;
	n->first = n->n = 0;
	n->error = 0;
	n->req->op = XSEG_OP_DELETE;
	n->req->flags = cio->req->flags;
	n->req->offset = 0;
	n->req->size = 0;
	rc = c->io->submit(c, n);
	if (rc < 0)
		cached_nreq_done(c, n, -rc, 0);
}

static void unc_delete_done_job(void *arg)
{
	struct cached_nreq *n = arg;
	struct cached *c = n->cio->c;
	struct cached_cio *cio = n->cio;
	int error = n->error;

	nreq_put(c, n);
	fence_drop(c, cio->name);
	cio_finish(c, cio, error);
}

/*
 * Requests that only read the object (READ, NOCACHE READ, INFO, NOCACHE
 * INFO, HASH): when xcache_insert finds no node for them while flushes
 * fail, they are forwarded to the next port as they are. EAGAIN means the
 * cache holds nothing of the name, neither active nor evicted and held
 * (checked under xcache's lock): no dirty byte of it is in a bucket or on
 * its way to the next port (a flush write, a NOCACHE write, a DELETE or
 * COPY in flight all hold the entry), so the next port's answer is the
 * cache's answer: its data for a READ, its size for an INFO (the cache
 * would answer max(next port's size, write_end), write_end 0 here), its
 * hash for a HASH (the cache would flush nothing first). A write
 * inserting the name meanwhile is concurrent with the request: either
 * answer is right.
 */
static bool cio_reads_only(const struct cached_cio *cio)
{
	return cio->kind == CACHED_C_READ || cio->kind == CACHED_C_NC_READ ||
	       cio->kind == CACHED_C_INFO || cio->kind == CACHED_C_FLUSHWAIT;
}

static void cio_dispatch(struct cached *c, struct cached_cio *cio)
{
	const char *name =
	    cio->kind == CACHED_C_COPY_SRC ? cio->src_name : cio->name;
	enum xcache_insert_how how = XCACHE_FOUND;
	struct xcache_entry *e;
	int rc;

	rc = xcache_insert(c->cache, name, &e, &how);
	space_kick(c); /* the insert may have released a victim */
	if (rc == -EAGAIN) {
		/* No node. xcache_insert answers EAGAIN only after finding
		 * the name neither active nor evicted-but-held (under its
		 * lock), so the cache holds nothing of this object: while
		 * flushes fail (nodes may all be held by evicted objects kept
		 * for data the store refuses, review13 R13-1), a READ is
		 * forwarded, the next port's data being the newest (a write
		 * inserting the name meanwhile is concurrent with it). Else
		 * a READ parks where a failing flush wakes it to come back
		 * here. */
		bool reads = cio_reads_only(cio);
		bool failing =
		    __atomic_load_n(&c->flush_failing, __ATOMIC_ACQUIRE);
		int refused;

		/* an uncached DELETE of the name is at the next port: what
		 * the next port answers meanwhile may be from before it */
		if (fence_park(c, cio, name))
			return;
		if (reads && failing) {
			CACHED_STAT(c, uncached_reads, 1);
			cio_forward(c, cio);
			return;
		}
		if (cio->kind == CACHED_C_DELETE && failing) {
			cio_delete_uncached(c, cio);
			return;
		}
		/* Writes, DELETE, COPY, NOCACHE writes are never forwarded
		 * uncached: a READ inserting the name while one is at the
		 * next port could cache the data from before it and serve
		 * that after it was acknowledged. While the next port
		 * refuses writes they fail with its errno; else they wait
		 * for a node (bounded: cached_space_expire). */
		refused = reads ? 0 : cached_space_refused(c);
		if (refused) {
			cio_space_fail(c, cio, refused);
			return;
		}
		cio_park_space(c, cio, 1,
			       reads ? &c->space_rwaitq : &c->space_waitq);
		return;
	}
	if (rc < 0) {
		cio_finish(c, cio, -rc);
		return;
	}
	cio_attach(c, cio, name, e, how);
}

/* Copy a name of len bytes from shared memory: refused if empty, too
 * long or holding a NUL (it would alias the name before the NUL). */
static bool name_copy(char *dst, const char *src, size_t len)
{
	if (!len || len > XSEG_MAX_TARGETLEN)
		return false;
	memcpy(dst, src, len);
	dst[len] = '\0';
	return !memchr(dst, '\0', len);
}

int cached_submit_request(struct cached *c, struct xseg_request *req)
{
	struct cached_cio *cio;
	uint32_t targetlen = __atomic_load_n(&req->targetlen, __ATOMIC_RELAXED);
	uint32_t srclen = 0;

	switch (req->op) {
	case XSEG_OP_READ:
	case XSEG_OP_WRITE:
	case XSEG_OP_INFO:
	case XSEG_OP_HASH:
	case XSEG_OP_DELETE:
	case XSEG_OP_COPY:
	case XSEG_OP_FLUSH:
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (req->op != XSEG_OP_FLUSH && !targetlen)
		return -EINVAL;
	if (targetlen > XSEG_MAX_TARGETLEN)
		return -EINVAL;
	if ((req->op == XSEG_OP_READ || req->op == XSEG_OP_WRITE) &&
	    req->size && !c->io->data(c, req))
		return -EINVAL;
	if (req->op == XSEG_OP_INFO && !c->io->data(c, req))
		return -EINVAL;
	if (req->op == XSEG_OP_COPY) {
		const struct xseg_request_copy *cp = c->io->data(c, req);
		if (!cp)
			return -EINVAL;
		srclen = __atomic_load_n(&cp->src_targetlen, __ATOMIC_RELAXED);
		if (!srclen || srclen > XSEG_MAX_TARGETLEN)
			return -EINVAL;
	}
	cio = cio_get(c);
	if (!cio)
		return -EBUSY;
	cio->name[0] = '\0';
	if ((targetlen && !name_copy(cio->name, req->target, targetlen)) ||
	    (srclen &&
	     !name_copy(cio->src_name,
			((const struct xseg_request_copy *)c->io->data(c, req))
			    ->src_target,
			srclen))) {
		cio_put(c, cio);
		return -EINVAL;
	}
	cio->c = c;
	cio->req = req;
	switch (req->op) {
	case XSEG_OP_READ:
		if (req->flags & XSEG_F_NOCACHE) {
			cio->kind = CACHED_C_NC_READ;
			break;
		}
		cio->kind = CACHED_C_READ;
		CACHED_STAT(c, reads, 1);
		break;
	case XSEG_OP_WRITE:
		cio->kind = req->flags & XSEG_F_NOCACHE ? CACHED_C_NC_WRITE
							: CACHED_C_WRITE;
		break;
	case XSEG_OP_INFO:
		/* NOCACHE: the next port answers (after a flush) */
		cio->kind = req->flags & XSEG_F_NOCACHE ? CACHED_C_FLUSHWAIT
							: CACHED_C_INFO;
		break;
	case XSEG_OP_DELETE:
		cio->kind = CACHED_C_DELETE;
		break;
	case XSEG_OP_COPY:
		cio->kind = CACHED_C_COPY_SRC;
		break;
	case XSEG_OP_FLUSH:
		cio->kind = CACHED_C_FLUSH;
		flush_op_start(c, cio);
		return 0;
	default:
		cio->kind = CACHED_C_FLUSHWAIT;
		break;
	}
	cio_dispatch(c, cio);
	return 0;
}

/* ------------------------------------------------------------------ */
/* xcache hooks                                                        */
/* ------------------------------------------------------------------ */

static int hook_node_init(void *cache_priv, uint32_t index, void **priv)
{
	struct cached *c = cache_priv;
	struct cached_obj *o = &c->objs[index];
	int rc;

	o->c = c;
	rc = cached_obj_alloc_slots(o, c->slots_per_obj);
	if (rc)
		return rc;
	xworkq_init(&o->wq);
	*priv = o;
	return 0;
}

static int hook_init(void *cache_priv, struct xcache_entry *e)
{
	struct cached *c = cache_priv;
	struct cached_obj *o = xcache_entry_priv(e);

	o->entry = e;
	__atomic_store_n(&o->clean_at, 0, __ATOMIC_RELAXED);
	/* a new object: nothing known about its size */
	o->size_known = false;
	o->size = 0;
	o->write_end = 0;
	o->size_gen++;
	o->nocache_inflight = 0;
	o->fenced = false;
	o->fence_owner = NULL;
	cached_obj_set_state(o, CACHED_O_READY);
	__atomic_add_fetch(&c->nodes_used, 1, __ATOMIC_RELEASE);
	return 0;
}

static void hook_evict(void *cache_priv, struct xcache_entry *e)
{
	struct cached *c = cache_priv;
	struct cached_obj *o = xcache_entry_priv(e);
	uint32_t claimed = __atomic_load_n(&o->nr_claimed, __ATOMIC_RELAXED);
	uint32_t old;

	CACHED_STAT(c, evictions, 1);
	/* Its buckets come back when it is released: counted from now on,
	 * every time it is evicted (an object re-inserted during its flush
	 * and evicted again was not counted the second time: review finding
	 * M3). A snapshot: a user that still holds it may claim more. */
	old = __atomic_exchange_n(&o->away_claimed, claimed, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->away_buckets, (uint64_t)claimed - old,
			   __ATOMIC_RELAXED);
}

static void hook_reinsert(void *cache_priv, struct xcache_entry *e)
{
	struct cached_obj *o = xcache_entry_priv(e);

	(void)cache_priv;
	/* Called after the entry is ACTIVE again (under the cache lock):
	 * a "clean and unused" verdict taken before this is stale. */
	__atomic_add_fetch(&o->revivals, 1, __ATOMIC_ACQ_REL);
	/* active again: its buckets are not coming back */
	obj_unaway(o);
}

/*
 * An evicted object kept for its dirty data gives back the rest of its
 * buckets now (review11 N-D: with flushes failing, the clean part of such
 * objects stayed claimed for as long as the store refused writes, and a
 * cache of 256 MiB with 151 MiB dirty had none free). A request that
 * revives it meanwhile claims what it needs again. The buckets no longer
 * count as coming back (away_buckets). Freed space is only noted here (we
 * may run inside an xcache hook): the caller's space_kick signals.
 */
static void obj_release_clean(struct cached_obj *o)
{
	struct cached *c = o->c;
	uint32_t k = cached_obj_release_clean(o), cur, take;

	if (!k)
		return;
	cur = __atomic_load_n(&o->away_claimed, __ATOMIC_RELAXED);
	do
		take = cur < k ? cur : k;
	while (!__atomic_compare_exchange_n(&o->away_claimed, &cur, cur - take,
					    false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED));
	if (take)
		__atomic_sub_fetch(&c->away_buckets, take, __ATOMIC_RELAXED);
	__atomic_store_n(&c->space_pending, true, __ATOMIC_RELEASE);
}

/*
 * The decision of on_finalize, taken in the object's workq so that it is
 * serialized with every job of a user that re-inserted the object
 * meanwhile. Holds the reference hook_finalize took.
 */
static void obj_final_job(void *arg)
{
	struct cached_obj *o = arg;
	struct xcache_entry *e = o->entry;
	uint32_t gen = __atomic_load_n(&o->revivals, __ATOMIC_ACQUIRE);

	if (xcache_entry_state(e) == XCACHE_ACTIVE || o->kept) {
		/* revived (its next eviction decides), or already kept by
		 * an earlier verdict whose flush holds its own reference */
		obj_put(o->c, e);
		return;
	}
	if (cached_obj_clean(o) ||
	    cached_obj_state(o) == CACHED_O_INVALIDATED) {
		/* Only ours: nobody can make it dirty before the last put
		 * except by re-inserting it, which moves revivals on. */
		if (xcache_entry_refcount(e) == 1)
			__atomic_store_n(&o->clean_at, gen + 1,
					 __ATOMIC_RELEASE);
		obj_put(o->c, e); /* may release o */
		return;
	}
	/* Dirty data must reach the next port before the buckets go: our
	 * reference keeps the entry alive; the end of its flush drops it. */
	o->kept = true;
	obj_release_clean(o);
	obj_kick_now(o);
}

/*
 * Reference count reached 0 on an evicted (or removed) object. This runs
 * with no lock while another thread may re-insert the object and run jobs
 * on it, so it reads nothing a job writes: it lets the object go only if
 * the final job found it clean and unused and nobody re-inserted it since;
 * otherwise it takes a reference and asks the final job, whose put of
 * that reference calls this hook again.
 */
static bool hook_finalize(void *cache_priv, struct xcache_entry *e)
{
	struct cached_obj *o = xcache_entry_priv(e);

	(void)cache_priv;
	if (__atomic_load_n(&o->clean_at, __ATOMIC_ACQUIRE) ==
	    __atomic_load_n(&o->revivals, __ATOMIC_ACQUIRE) + 1)
		return false;
	xcache_get(e);
	xworkq_enqueue(&o->wq, &o->final_job, obj_final_job, o);
	return true;
}

static void hook_put(void *cache_priv, struct xcache_entry *e)
{
	struct cached *c = cache_priv;
	struct cached_obj *o = xcache_entry_priv(e);

	obj_unaway(o);
	cached_obj_release_all(o);
	if (!c->destroying)
		__atomic_store_n(&c->space_pending, true, __ATOMIC_RELEASE);
}

static void hook_free(void *cache_priv, struct xcache_entry *e)
{
	struct cached *c = cache_priv;

	(void)e;
	if (c->destroying) {
		/* nobody waits; nodes_used no longer matters */
		return;
	}
	/* not free yet: see cached_nodes_freed_here */
	cached_nodes_freed_here++;
}

static const struct xcache_ops cached_xcache_ops = {
    .on_node_init = hook_node_init,
    .on_init = hook_init,
    .on_evict = hook_evict,
    .on_reinsert = hook_reinsert,
    .on_finalize = hook_finalize,
    .on_put = hook_put,
    .on_free = hook_free,
};

/* Name every object still referenced, and why (diagnosis). */
uint32_t cached_free_contexts(struct cached *c)
{
	uint32_t nfree = 0;

	pthread_mutex_lock(&c->cio_lock);
	for (struct cached_cio *cio = c->cio_free; cio; cio = cio->next_free)
		nfree++;
	pthread_mutex_unlock(&c->cio_lock);
	return nfree + (cio_spare.cio && cio_spare.instance == c->instance);
}

void cached_dump_busy(struct cached *c)
{
	uint32_t nfree = cached_free_contexts(c);

	fprintf(stderr,
		"cached: %u client contexts in use, %" PRIu64
		" parked for space, %" PRIu64
		" for requests; free buckets %" PRIu32 ", away buckets %" PRIu64
		", space want %" PRIu32 ", nodes used %" PRIu32 " of %" PRIu32
		"\n",
		c->cfg.nr_cios - nfree, space_parked(c),
		xwaitq_nr_queued(&c->nreq_waitq), cached_pool_nr_free(&c->pool),
		__atomic_load_n(&c->away_buckets, __ATOMIC_RELAXED),
		__atomic_load_n(&c->space_want, __ATOMIC_RELAXED),
		__atomic_load_n(&c->nodes_used, __ATOMIC_RELAXED), c->nr_nodes);
	for (uint32_t i = 0; i < c->cfg.nr_cios; i++) {
		struct cached_cio *cio = &c->cios[i];
		bool isfree =
		    cio == cio_spare.cio && cio_spare.instance == c->instance;
		for (struct cached_cio *f = c->cio_free; f; f = f->next_free)
			if (f == cio)
				isfree = true;
		if (!isfree)
			fprintf(stderr,
				"cached: context %u: kind %u phase %u obj %s "
				"error %d\n",
				i, cio->kind, cio->phase,
				cio->entry ? xcache_entry_name(cio->entry)
					   : "-",
				cio->error);
	}
	for (uint32_t i = 0; i < c->cfg.max_inflight; i++)
		if (!c->nreqs[i].obj && c->nreqs[i].cio)
			fprintf(stderr,
				"cached: request %u to the next port still in "
				"flight: uncached delete of %s\n",
				i, c->nreqs[i].cio->name);
		else if (c->nreqs[i].obj)
			fprintf(stderr,
				"cached: request %u to the next port still in "
				"flight: %s of %s slots %u+%u\n",
				i,
				c->nreqs[i].kind == CACHED_N_FETCH ? "read"
								   : "write",
				xcache_entry_name(c->nreqs[i].obj->entry),
				c->nreqs[i].first, c->nreqs[i].n);
	for (uint32_t i = 0; i < c->nr_nodes; i++) {
		struct xcache_entry *e = xcache_node(c->cache, i);
		struct cached_obj *o = &c->objs[i];
		uint32_t refs;

		if (!e || xcache_entry_state(e) == XCACHE_FREE)
			continue;
		refs = xcache_entry_refcount(e);
		if (xcache_entry_state(e) == XCACHE_ACTIVE && refs <= 1)
			continue;
		fprintf(stderr,
			"cached: object %s: xcache state %d refs %u, state %d "
			"dirty %u writing %u loading %u flushing %d parked %d "
			"kept %d kick %d waiters %s round inflight %u\n",
			xcache_entry_name(e), (int)xcache_entry_state(e), refs,
			(int)cached_obj_state(o), o->counts[CACHED_B_DIRTY],
			o->counts[CACHED_B_WRITING],
			o->counts[CACHED_B_LOADING], o->flushing,
			o->nreq_parked, o->kept, o->kick_queued,
			o->waiters ? "yes" : "no", o->round_inflight);
	}
}

/* ------------------------------------------------------------------ */
/* Set-up                                                              */
/* ------------------------------------------------------------------ */

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

int cached_validate_config(const struct cached_config *cfg, char *why,
			   size_t whylen)
{
	const char *msg = NULL;

	if (!is_pow2(cfg->bucket_size) || cfg->bucket_size < 512)
		msg = "bucket size must be a power of two >= 512";
	else if (!cfg->object_size || cfg->object_size % cfg->bucket_size ||
		 cfg->object_size / cfg->bucket_size > (1u << 24))
		msg = "object size must be a multiple of the bucket size "
		      "(at most 2^24 buckets)";
	else if (cfg->cache_size < 2 * cfg->object_size)
		msg = "cache size must hold at least two objects";
	else if (cfg->cache_size / cfg->bucket_size >= CACHED_NO_BUCKET)
		msg = "too many buckets (cache size / bucket size >= 2^32)";
	else if (!cfg->max_objects || cfg->max_objects > (1u << 30))
		msg = "max objects must be 1 .. 2^30";
	else if (cfg->max_req_size < cfg->bucket_size)
		msg = "max request size must be at least one bucket";
	else if (!cfg->max_inflight || cfg->max_inflight > 65536)
		msg = "max in-flight requests must be 1 .. 65536";
	else if (!cfg->nr_cios)
		msg = "no client contexts";
	else if (cfg->policy > CACHED_WRITETHROUGH)
		msg = "unknown write policy";
	if (msg && why)
		snprintf(why, whylen, "%s", msg);
	return msg ? -EINVAL : 0;
}

int cached_init(struct cached *c, const struct cached_config *cfg)
{
	struct xcache_config xc;
	int rc;

	rc = cached_validate_config(cfg, NULL, 0);
	if (rc)
		return rc;
	memset(c, 0, sizeof(*c));
	c->instance =
	    __atomic_add_fetch(&cached_instances, 1, __ATOMIC_RELAXED);
	c->cfg = *cfg;
	c->policy = cfg->policy;
	c->slots_per_obj = (uint32_t)(cfg->object_size / cfg->bucket_size);
	c->max_req_slots = (uint32_t)(cfg->max_req_size / cfg->bucket_size);
	if (c->max_req_slots > c->slots_per_obj)
		c->max_req_slots = c->slots_per_obj;
	pthread_mutex_init(&c->cio_lock, NULL);
	pthread_mutex_init(&c->nreq_lock, NULL);
	pthread_mutex_init(&c->space_lock, NULL);
	pthread_mutex_init(&c->fw_lock, NULL);
	pthread_mutex_init(&c->fence_lock, NULL);
	xwaitq_init(&c->space_waitq, space_available, c);
	xwaitq_init(&c->space_rwaitq, space_read_available, c);
	pthread_mutex_init(&c->ferr_lock, NULL);
	xwaitq_init(&c->nreq_waitq, nreq_available, c);
	xwaitq_init(&c->fw_waitq, fw_available, c);
	xworkq_init(&c->redispatch_wq);
	/* a cache destroyed by this thread left nothing behind, but an
	 * xcache call of a test, not followed by space_kick, might have */
	cached_nodes_freed_here = 0;

	rc = cached_pool_init(&c->pool,
			      (uint32_t)(cfg->cache_size / cfg->bucket_size),
			      cfg->bucket_size, cfg->prefault);
	if (rc)
		goto err;
	c->cios = calloc(cfg->nr_cios, sizeof(*c->cios));
	c->nreqs = calloc(cfg->max_inflight, sizeof(*c->nreqs));
	/* room for the active objects plus as many evicted ones still
	 * flushing or referenced */
	c->nr_nodes = cfg->max_objects +
		      (cfg->max_objects > 64 ? cfg->max_objects / 2 : 32);
	/* At 1 M objects these are hundreds of MiB read at random (objs by
	 * every hit): huge pages where they are that big */
	c->objs =
	    cached_huge_calloc(c->nr_nodes, sizeof(*c->objs), &c->objs_map_len);
	c->fws =
	    cached_huge_calloc(c->nr_nodes, sizeof(*c->fws), &c->fws_map_len);
	if (!c->cios || !c->nreqs || !c->objs || !c->fws) {
		rc = -ENOMEM;
		goto err;
	}
	for (uint32_t i = c->nr_nodes; i-- > 0;) {
		c->fws[i].next_free = c->fw_free;
		c->fw_free = &c->fws[i];
	}
	c->fw_nr_free = c->nr_nodes;
	for (uint32_t i = cfg->nr_cios; i-- > 0;) {
		c->cios[i].next_free = c->cio_free;
		c->cio_free = &c->cios[i];
	}
	for (uint32_t i = cfg->max_inflight; i-- > 0;) {
		c->nreqs[i].next_free = c->nreq_free;
		c->nreq_free = &c->nreqs[i];
	}
	c->nreq_nr_free = cfg->max_inflight;
	xc.capacity = cfg->max_objects;
	xc.nr_nodes = c->nr_nodes;
	xc.ops = &cached_xcache_ops;
	xc.priv = c;
	rc = xcache_create(&xc, &c->cache);
	if (rc)
		goto err;
	return 0;
err:
	cached_destroy(c);
	return rc;
}

/*
 * At the end of a stop whose flush timed out, evicted objects are still
 * kept for dirty data the next port never took (obj_flush_done drops the
 * keeping reference only once the object is clean). Nothing will flush
 * them now: drop that reference so that their buckets and nodes are
 * freed like the active objects' (before, xcache_destroy refused with
 * EBUSY and the whole cache leaked at exit). The data is abandoned, not
 * hidden: hook_put keeps the unflushed count up while destroying, so
 * releasing the port reports the write-back loss. Single-threaded: every
 * worker has been joined.
 */
static void cached_abandon_kept(struct cached *c)
{
	for (uint32_t i = 0; i < c->nr_nodes; i++) {
		struct xcache_entry *e = xcache_node(c->cache, i);
		struct cached_obj *o = &c->objs[i];

		if (!e || !o->kept || xcache_entry_state(e) != XCACHE_EVICTED ||
		    xcache_entry_refcount(e) != 1 || o->kick_queued)
			continue;
		o->kept = false;
		/* hook_finalize lets it go instead of asking a final job */
		__atomic_store_n(
		    &o->clean_at,
		    __atomic_load_n(&o->revivals, __ATOMIC_ACQUIRE) + 1,
		    __ATOMIC_RELEASE);
		xcache_put(c->cache, e);
	}
}

/* What a cache still in use at exit keeps (cached_destroy), referenced
 * from here: requests still in flight may touch it until the process
 * exits, so it is held on purpose, not lost, and LeakSanitizer (which
 * scans globals) does not report it. */
static void *cached_kept_at_exit[6];

void cached_destroy(struct cached *c)
{
	/* this thread's spare would dangle (other threads' are never used
	 * again: no later cache has this instance number) */
	if (cio_spare.instance == c->instance)
		cio_spare.cio = NULL;
	c->destroying = true;
	if (c->cache) {
		int rc;

		cached_abandon_kept(c);
		rc = xcache_destroy(c->cache);
		if (rc) {
			fprintf(stderr,
				"cached: cache still in use at exit: %s\n",
				strerror(-rc));
			cached_dump_busy(c);
			/* the entries still referenced keep their memory */
			cached_kept_at_exit[0] = c->cache;
			cached_kept_at_exit[1] = c->cios;
			cached_kept_at_exit[2] = c->nreqs;
			cached_kept_at_exit[3] =
			    c->objs; /* small: on the heap */
			cached_kept_at_exit[4] = c->fws;
			cached_kept_at_exit[5] = c->pool.free_stack;
			return;
		}
		c->cache = NULL;
	}
	if (c->objs)
		for (uint32_t i = 0; i < c->nr_nodes; i++)
			cached_obj_free_slots(&c->objs[i]);
	cached_huge_free(c->objs, c->objs_map_len);
	free(c->cios);
	free(c->nreqs);
	cached_huge_free(c->fws, c->fws_map_len);
	c->objs = NULL;
	c->objs_map_len = 0;
	c->fws_map_len = 0;
	c->cios = NULL;
	c->nreqs = NULL;
	c->fws = NULL;
	c->fw_free = NULL;
	cached_pool_destroy(&c->pool);
}
