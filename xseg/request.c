/* SPDX-License-Identifier: MIT */
/*
 * xseg requests: get, prep, submit, accept, respond, forward, receive, put,
 * validation.
 *
 * Ownership rule that makes this lock-free: a request's payload is touched
 * only by the process of its holder port; it changes hands only through an
 * xq enqueue (release) and the matching dequeue (acquire). state, mover and
 * holder form one 64-bit word changed only by CAS or by its exclusive
 * holder (xseg_rs_*): the reaper of another process reads it while scanning
 * the pool and acts only from the exact word it read, so it never mixes an
 * old state with a new holder, and a late answer racing a reaper or a
 * release loses cleanly (-ESTALE). Takes (accept, receive) are CASes too,
 * because a reaper may queue a second index of a hand-over whose mover
 * died (reaper.c, "Stranded hand-overs").
 */
#include "xseg_internal.h"

#include <errno.h>
#include <string.h>

#define NEXT(w, st, h)	      xseg_rs_next((w), (st), (h))
#define HANDOVER(w, st, m, h) xseg_rs_handover((w), (st), (m), (h))
#define ST(w)		      xseg_rs_state(w)
#define HOLDER(w)	      xseg_rs_holder(w)

#ifdef XSEG_TEST_HOOKS
void (*xseg_test_hook)(enum xseg_test_point pt, struct xseg_request *req);
#endif

static inline uint64_t stamp(const struct xseg *seg)
{
	return seg->timestamps ? xseg_now_ns() : 0;
}

/* Signal port now, or note it in the caller's batch (signalled once by
 * xseg_sigbatch_flush). A full batch signals the new port at once. */
static void notify(struct xseg *seg, uint32_t port, struct xseg_sigbatch *b)
{
	if (!b) {
		xseg_signal(seg, port);
		return;
	}
	for (uint32_t i = 0; i < b->nr; i++)
		if (b->port[i] == port)
			return;
	if (b->nr < XSEG_SIGBATCH_PORTS)
		b->port[b->nr++] = port;
	else
		xseg_signal(seg, port);
}

/* After the enqueue of a hand-over: clear the mover, unless the receiver
 * (or a reaper) changed the word first. A kill between the enqueue and
 * this CAS leaves the mark, and the reap of the mover then queues a second
 * index, which the receiver's CAS makes harmless. hseq keeps a stale clear
 * (this thread stalled here while the request went round again to the
 * same mover) from matching a later hand-over's word. */
static inline void handed_over(struct xseg_request *req, uint64_t hw)
{
	/* A load first: a fast receiver has usually taken the request (and
	 * cleared the mark) already, and a load does not pull the line
	 * away from it as a failing CAS would. */
	if (__atomic_load_n(&req->state_holder, __ATOMIC_RELAXED) == hw)
		xseg_rs_cas(req, hw,
			    NEXT(hw, xseg_rs_state(hw), xseg_rs_holder(hw)));
}

unsigned xseg_sigbatch_flush(struct xseg *seg, struct xseg_sigbatch *b)
{
	unsigned n;

	if (!b)
		return 0;
	n = b->nr;
	for (uint32_t i = 0; i < n; i++)
		xseg_signal(seg, b->port[i]);
	b->nr = 0;
	return n;
}

/* How the request and reply queues' indexes map to requests, for the
 * dequeues of accept and receive: both CAS the request's word (line 0)
 * right after the dequeue, a line the other side wrote last, and then
 * touch line 1 (timestamps, serviced, src_gen). Prefetching both while
 * the queue's cell is being taken overlaps their transfers with the
 * cell's instead of queueing them behind it (docs/cached.md). A hint
 * only: the take is still the CAS below, which decides ownership. */
static inline void pool_prefetch(const struct xseg *seg, struct xq_prefetch *pf)
{
	pf->base = xobj_ptr(seg->pool, 0);
	pf->stride = xobj_obj_size(seg->pool);
	pf->count = pf->base ? xobj_count(seg->pool) : 0;
	pf->lines = 2;
}

struct xseg_request *xseg_request_at(const struct xseg *seg, uint32_t idx)
{
	return xobj_ptr(seg->pool, idx);
}

void *xseg_request_data(const struct xseg *seg, const struct xseg_request *req)
{
	uint64_t off = req->data_off;

	if (off == 0 || off < seg->heap_off ||
	    off - seg->heap_off >= seg->heap_bytes)
		return NULL;
	return seg->base + off;
}

/* Drop a large buffer so idle requests do not pin heap memory. */
static void req_trim_buffer(struct xseg *seg, struct xseg_request *req)
{
	uint64_t off = req->data_off;

	/* Cleared before the free (review 3, F4): a reaper killed between
	 * the two then leaks one buffer instead of leaving an offset that
	 * the next reap would free a second time (maybe someone else's by
	 * then). The caller holds the request (ANSWERING or FREE-by-us). */
	if (off && req->data_cap > seg->default_data_size) {
		req->data_off = 0;
		req->data_cap = 0;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		xheap_free(seg->heap, off - seg->heap_off);
	}
}

bool xseg_free_to_pool(struct xseg *seg, struct xseg_request *req,
		       uint64_t expect, uint32_t actor)
{
	uint32_t idx;

	if (xobj_index(seg->pool, req, &idx) < 0)
		return false;
	/* Claim it before touching the buffer: whoever changed the word
	 * first (a late answer, another reaper step) keeps it. Held by
	 * actor meanwhile, so a kill here is found by the reap of actor. */
	if (!xseg_rs_cas(req, expect, NEXT(expect, XSEG_RS_ANSWERING, actor)))
		return false;
	req_trim_buffer(seg, req);
	req->index = idx;
	xseg_rs_store(req, NEXT(expect, XSEG_RS_FREE, XSEG_NOPORT));
	xobj_put(seg->pool, idx);
	return true;
}

int xseg_get_request(struct xseg *seg, uint32_t port,
		     struct xseg_request **reqp)
{
	struct xseg_port_local *pl;
	struct xseg_request *req;
	uint32_t idx;
	uint64_t w;
	int rc;

	if (!reqp || port >= seg->nr_ports)
		return -EINVAL;
	if (!xseg_owned_by_self(seg, port))
		return -EPERM;
	pl = &seg->ports[port];
	for (;;) {
		if (pl->freeq && xq_dequeue(pl->freeq, &idx) == 0) {
			req = xobj_ptr(seg->pool, idx);
		} else {
			rc = xobj_get(seg->pool, &idx);
			if (rc)
				return rc;
			req = xobj_ptr(seg->pool, idx);
		}
		/* An index from a queue is checked like any other: a request
		 * that is not free is somebody else's; drop the index. */
		if (!req)
			continue;
		w = xseg_rs_load(req);
		if (ST(w) == XSEG_RS_FREE) {
			/* Ours alone (taken off our free queue or the pool):
			 * a store, not a CAS, keeps the fast path cheap. */
			xseg_rs_store(req, NEXT(w, XSEG_RS_ALLOCATED, port));
			break;
		}
	}
	req->index = idx;
	/* Atomic (relaxed): a reaper or a stale index may read src of a
	 * request whose word already moved on (review 3, F3). */
	__atomic_store_n(&req->src, port, __ATOMIC_RELAXED);
	req->dst = XSEG_NOPORT;
	req->effective_dst = XSEG_NOPORT;
	req->src_gen = __atomic_load_n(&pl->port->gen, __ATOMIC_RELAXED);
	req->op = XSEG_OP_NONE;
	req->targetlen = 0;
	req->flags = 0;
	req->error = 0;
	req->offset = 0;
	req->size = 0;
	req->serviced = 0;
	req->id = 0;
	req->ts_submitted = 0;
	req->ts_accepted = 0;
	req->ts_responded = 0;
	req->ts_received = 0;
	req->user = 0;
	req->peer_priv = 0;
	*reqp = req;
	return 0;
}

static bool held_by_client(uint32_t st)
{
	return st == XSEG_RS_ALLOCATED || st == XSEG_RS_PREPARED ||
	       st == XSEG_RS_RECEIVED;
}

int xseg_prep_request(struct xseg *seg, struct xseg_request *req,
		      uint32_t targetlen, uint64_t datalen)
{
	uint64_t w;

	if (!req || targetlen > XSEG_MAX_TARGETLEN)
		return -EINVAL;
	w = xseg_rs_load(req);
	if (!held_by_client(ST(w)))
		return -EINVAL;
	if (datalen > req->data_cap) {
		uint64_t want = datalen > seg->default_data_size
				    ? datalen
				    : seg->default_data_size;
		uint64_t off;
		int64_t got = xheap_alloc(seg->heap, want, &off);

		if (got < 0)
			return got == -EINVAL ? -ENOMEM : (int)got;
		if (req->data_off)
			xheap_free(seg->heap, req->data_off - seg->heap_off);
		req->data_off = seg->heap_off + off;
		req->data_cap = (uint64_t)got;
	}
	req->targetlen = (uint16_t)targetlen;
	req->size = datalen;
	req->op = XSEG_OP_NONE;
	req->flags = 0;
	req->offset = 0;
	req->serviced = 0;
	req->error = 0;
	req->peer_priv = 0;
	/* A store: only the holder's process acts on a client-held request
	 * (a reaper only if that process is dead). */
	xseg_rs_store(req, NEXT(w, XSEG_RS_PREPARED, HOLDER(w)));
	return 0;
}

int xseg_submit_batched(struct xseg *seg, struct xseg_request *req,
			uint32_t dst, struct xseg_sigbatch *b)
{
	struct xseg_port *sp, *ep;
	uint32_t src, eff, idx;
	uint64_t w, hw;

	if (!req || dst >= seg->nr_ports)
		return -EINVAL;
	w = xseg_rs_load(req);
	src = req->src;
	idx = req->index;
	if (!held_by_client(ST(w)) || !xseg_owned_by_self(seg, src) ||
	    HOLDER(w) != src || xobj_ptr(seg->pool, idx) != req)
		return -EINVAL;
	/* One load of the redirect: a concurrent set/clear sends this
	 * request to the old or the new target, never both. */
	eff =
	    __atomic_load_n(&seg->ports[dst].port->path_next, __ATOMIC_ACQUIRE);
	if (eff >= seg->nr_ports)
		eff = dst;
	ep = seg->ports[eff].port;
	if (!xseg_owner_serving(__atomic_load_n(&ep->owner, __ATOMIC_RELAXED)))
		return -ENXIO;
	sp = seg->ports[src].port;
	req->dst = dst;
	req->effective_dst = eff;
	req->src_gen = __atomic_load_n(&sp->gen, __ATOMIC_RELAXED);
	req->id = __atomic_fetch_add(&sp->id_next, 1, __ATOMIC_RELAXED);
	req->error = 0;
	req->serviced = 0;
	if (seg->timestamps) {
		req->ts_submitted = xseg_now_ns();
		req->ts_accepted = 0;
		req->ts_responded = 0;
		req->ts_received = 0;
	}
	/* For the pool scans, which must not read op (xseg.h): before the
	 * word, whose release publishes it with this round */
	__atomic_store_n(&req->sent_op, req->op, __ATOMIC_RELAXED);
	/* One 64-bit store moves state and holder together: a reaper of eff
	 * sees either the client's word (not its port's: ignored) or
	 * (SUBMITTED, eff), never a mix. A store suffices: nobody else acts
	 * on a request the live client holds. The mover src lets the reap
	 * of a client killed before the enqueue find the request. */
	hw = HANDOVER(w, XSEG_RS_SUBMITTED, src, eff);
	xseg_rs_store(req, hw);
	XSEG_TEST_POINT(XSEG_TP_SUBMIT_STORED, req);
	if (xq_enqueue(seg->ports[eff].reqq, idx) < 0) {
		/* Cannot happen: queues hold every request of the pool. If a
		 * reaper of eff failed it back meanwhile, the reply comes. */
		if (xseg_rs_cas(req, hw, w))
			return -EAGAIN;
	}
	handed_over(req, hw);
	xseg_count(&sp->sent);
	notify(seg, eff, b);
	return 0;
}

int xseg_submit(struct xseg *seg, struct xseg_request *req, uint32_t dst)
{
	return xseg_submit_batched(seg, req, dst, NULL);
}

int xseg_fail_back(struct xseg *seg, struct xseg_request *req, uint64_t expect,
		   int err, uint32_t actor, bool accepted)
{
	uint64_t mine = NEXT(expect, XSEG_RS_ANSWERING, actor), hw;
	uint32_t src, idx;

	if (xobj_index(seg->pool, req, &idx) < 0)
		return XSEG_FB_LOST;
	/* Exactly one of the holder's answer, a release and a reaper wins
	 * this CAS; the others leave the request alone. */
	if (!xseg_rs_cas(req, expect, mine))
		return XSEG_FB_LOST;
	src = req->src;
	req->error = err;
	req->ts_responded = stamp(seg);
	req->index = idx;
	if (accepted && actor < seg->nr_ports)
		xseg_count(&seg->ports[actor].port->failed);
	if (src >= seg->nr_ports ||
	    __atomic_load_n(&seg->ports[src].port->gen, __ATOMIC_ACQUIRE) !=
		req->src_gen) {
		xseg_free_to_pool(seg, req, mine, actor);
		return XSEG_FB_FREED;
	}
	hw = HANDOVER(mine, XSEG_RS_FAILED, actor, src);
	xseg_rs_store(req, hw);
	XSEG_TEST_POINT(XSEG_TP_FAILBACK_STORED, req);
	if (xq_enqueue(seg->ports[src].replyq, idx) < 0) {
		/* Cannot happen: a reply queue holds every index of the pool;
		 * only stray duplicate indexes (corruption) can fill it. Keep
		 * the pool whole rather than leak the request. */
		xseg_count(&seg->ports[src].port->rejected);
		xseg_free_to_pool(seg, req, hw, actor);
		return XSEG_FB_FREED;
	}
	handed_over(req, hw);
	xseg_signal(seg, src);
	return XSEG_FB_QUEUED;
}

int xseg_validate_request(const struct xseg *seg,
			  const struct xseg_request *req)
{
	uint64_t off, cap, size, need = 0;
	uint32_t op;

	if (!req)
		return -EINVAL;
	op = req->op;
	if (op == XSEG_OP_NONE || op >= XSEG_OP_COUNT)
		return -EOPNOTSUPP;
	if (req->flags & ~XSEG_F_PEER_MASK & ~XSEG_F_KNOWN)
		return -EINVAL;
	if (req->targetlen > XSEG_MAX_TARGETLEN ||
	    (req->targetlen == 0 && op != XSEG_OP_PING && op != XSEG_OP_FLUSH))
		return -EINVAL;
	size = req->size;
	if (size > UINT64_MAX - req->offset)
		return -EINVAL;
	if (req->src >= seg->nr_ports ||
	    (req->dst >= seg->nr_ports && req->dst != XSEG_NOPORT))
		return -EINVAL;
	off = req->data_off;
	cap = req->data_cap;
	if (off) {
		int64_t usable;

		/* Inside the heap arena, end included, without overflow
		 * (xheap_usable_size assumes an in-range offset). */
		if (off < seg->heap_off ||
		    off - seg->heap_off >= seg->heap_bytes)
			return -EINVAL;
		if (cap > seg->heap_bytes - (off - seg->heap_off))
			return -EINVAL;
		/* And the start of a live heap buffer that holds cap bytes:
		 * otherwise a corrupt data_off could point at the heap's own
		 * header or a block header, and a READ would overwrite the
		 * allocator's state (O(1): alignment, magic, class). */
		usable = xheap_usable_size(seg->heap, off - seg->heap_off);
		if (usable < 0 || cap > (uint64_t)usable)
			return -EINVAL;
	} else if (cap) {
		return -EINVAL;
	}
	switch (op) {
	case XSEG_OP_READ:
	case XSEG_OP_WRITE:
		need = size;
		break;
	case XSEG_OP_INFO:
		need = sizeof(struct xseg_reply_info);
		break;
	case XSEG_OP_HASH:
		need = sizeof(struct xseg_reply_hash);
		break;
	case XSEG_OP_COPY:
		need = sizeof(struct xseg_request_copy);
		break;
	default:
		break;
	}
	if (need > cap)
		return -EINVAL;
	if (op == XSEG_OP_COPY) {
		const struct xseg_request_copy *c =
		    (const void *)(seg->base + off);
		if (c->src_targetlen == 0 ||
		    c->src_targetlen > XSEG_MAX_TARGETLEN)
			return -EINVAL;
	}
	return 0;
}

/* One valid request from port's queue (the caller checked the port). */
static int accept_one(struct xseg *seg, uint32_t port,
		      struct xseg_request **reqp, const struct xq_prefetch *pf)
{
	struct xseg_port_local *pl = &seg->ports[port];
	struct xseg_request *req;
	uint32_t idx;
	uint64_t w;
	int rc;

	for (;;) {
		if (xq_dequeue_prefetch(pl->reqq, &idx, pf) < 0)
			return -EAGAIN;
		req = xobj_ptr(seg->pool, idx);
		if (!req) {
			xseg_count(&pl->port->rejected);
			continue;
		}
		XSEG_TEST_POINT(XSEG_TP_ACCEPT_DEQUEUED, req);
		/* Whatever the mover, the CAS from the word read here takes
		 * the hand-over exactly once (a reaper settling a stranded
		 * copy, or a duplicate index, loses or wins it whole). */
		if (!xseg_rs_take(req, XSEG_RS_SUBMITTED, XSEG_RS_SUBMITTED,
				  port, XSEG_RS_ACCEPTED, &w)) {
			/* A stale or duplicated index: not ours to touch. */
			xseg_count(&pl->port->rejected);
			continue;
		}
		/* Not even req->index is written here: a server that
		 * only reads the hand-over line (line 0) leaves the
		 * client's other lines in the client's cache. */
		rc = xseg_validate_request(seg, req);
		if (rc) {
			xseg_count(&pl->port->rejected);
			xseg_fail_back(seg, req,
				       NEXT(w, XSEG_RS_ACCEPTED, port), -rc,
				       port, false);
			continue;
		}
		/* A request whose sender's port was reclaimed or released
		 * since the submit (a new generation) is dropped, not
		 * executed: its reply would be dropped anyway, and a dead
		 * sender's write run late could land after newer writes to
		 * the same object made by its restarted successor, or by
		 * its clients once their requests came back ECONNRESET
		 * (review9 R9-7). Requests accepted before the reclaim
		 * still run, but the sender's port cannot be bound again
		 * until they are answered (xseg_port_held_elsewhere): the
		 * seq_cst CAS of the take above and this seq_cst load pair
		 * with the reclaim's generation store and pool scan, so a
		 * request is either seen ACCEPTED by that scan or dropped
		 * here. src_gen is on line 1, already being fetched for
		 * writing (prefetch), and the sender's line 0 is read again
		 * by the answer. */
		if (__atomic_load_n(&seg->ports[req->src].port->gen,
				    __ATOMIC_SEQ_CST) != req->src_gen) {
			xseg_count(&pl->port->rejected);
			/* fail_back sees the generation and frees it */
			xseg_fail_back(seg, req,
				       NEXT(w, XSEG_RS_ACCEPTED, port),
				       ECONNRESET, port, false);
			continue;
		}
		/* Stage stamps only for a client that stamped its submit:
		 * nobody else reads them (bench_xseg --stages), and the two
		 * clock reads were most of a server's own cost per hit. */
		if (seg->timestamps && req->ts_submitted)
			req->ts_accepted = xseg_now_ns();
		xseg_count(&pl->port->accepted);
		*reqp = req;
		return 0;
	}
}

int xseg_accept(struct xseg *seg, uint32_t port, struct xseg_request **reqp)
{
	struct xq_prefetch pf;

	if (!reqp || port >= seg->nr_ports)
		return -EINVAL;
	if (!xseg_owned_by_self(seg, port))
		return -EPERM;
	pool_prefetch(seg, &pf);
	return accept_one(seg, port, reqp, &pf);
}

unsigned xseg_accept_batch(struct xseg *seg, uint32_t port,
			   struct xseg_request **reqs, unsigned n)
{
	struct xq_prefetch pf;
	unsigned got = 0;

	if (!reqs || !xseg_owned_by_self(seg, port))
		return 0;
	pool_prefetch(seg, &pf);
	while (got < n && accept_one(seg, port, &reqs[got], &pf) == 0)
		got++;
	return got;
}

uint64_t xseg_requests_queued(struct xseg *seg, uint32_t port)
{
	if (!seg || port >= seg->nr_ports)
		return 0;
	return xq_count(seg->ports[port].reqq);
}

int xseg_respond_batched(struct xseg *seg, struct xseg_request *req, int error,
			 struct xseg_sigbatch *b)
{
	struct xseg_port *hp;
	uint32_t h, src, idx, st;
	uint64_t w, mine, hw;

	if (!req || error < 0)
		return -EINVAL;
	w = xseg_rs_load(req);
	h = HOLDER(w);
	if (!xseg_owned_by_self(seg, h) || ST(w) != XSEG_RS_ACCEPTED ||
	    xobj_index(seg->pool, req, &idx) < 0)
		return -EINVAL;
	/* Lost to xseg_release_port or a reaper, which failed it back
	 * already: the client has it, touch nothing. */
	mine = NEXT(w, XSEG_RS_ANSWERING, h);
	if (!xseg_rs_cas(req, w, mine))
		return -ESTALE;
	hp = seg->ports[h].port;
	xseg_count(error ? &hp->failed : &hp->served);
	req->error = error;
	if (seg->timestamps && req->ts_accepted)
		req->ts_responded = xseg_now_ns();
	src = req->src;
	if (src >= seg->nr_ports) {
		xseg_count(&hp->rejected);
		xseg_free_to_pool(seg, req, mine, h);
		return 0;
	}
	st = error ? XSEG_RS_FAILED : XSEG_RS_SERVED;
	/* Mover h: if this process dies before the enqueue, the reap of h
	 * finds the reply (held by the live client, on no queue) and
	 * delivers it. */
	hw = HANDOVER(mine, st, h, src);
	xseg_rs_store(req, hw);
	XSEG_TEST_POINT(XSEG_TP_RESPOND_STORED, req);
	/* No generation check here (it would read the client's line 1):
	 * a reply to a port that changed owner since the submit is dropped
	 * by xseg_receive, or by the reaper if the port stays free. */
	if (xq_enqueue(seg->ports[src].replyq, idx) < 0) {
		/* Cannot happen: a reply queue holds every index of the pool
		 * (only stray duplicates from corruption can fill it). Free
		 * the request rather than leak it; the client times out. */
		xseg_count(&hp->rejected);
		xseg_free_to_pool(seg, req, hw, h);
		return -ENOSPC;
	}
	XSEG_TEST_POINT(XSEG_TP_RESPOND_ENQUEUED, req);
	handed_over(req, hw);
	notify(seg, src, b);
	return 0;
}

int xseg_respond(struct xseg *seg, struct xseg_request *req, int error)
{
	return xseg_respond_batched(seg, req, error, NULL);
}

int xseg_forward_batched(struct xseg *seg, struct xseg_request *req,
			 uint32_t port, struct xseg_sigbatch *b)
{
	uint32_t h, idx;
	uint64_t w, mine, hw;

	if (!req || port >= seg->nr_ports)
		return -EINVAL;
	w = xseg_rs_load(req);
	h = HOLDER(w);
	if (h == port || !xseg_owned_by_self(seg, h) ||
	    ST(w) != XSEG_RS_ACCEPTED)
		return -EINVAL;
	if (!xseg_owner_serving(__atomic_load_n(&seg->ports[port].port->owner,
						__ATOMIC_RELAXED)))
		return -ENXIO;
	if (xobj_index(seg->pool, req, &idx) < 0)
		return -EINVAL;
	mine = NEXT(w, XSEG_RS_ANSWERING, h);
	if (!xseg_rs_cas(req, w, mine))
		return -ESTALE; /* failed back by a release or a reaper */
	req->effective_dst = port;
	xseg_count(&seg->ports[h].port->forwarded);
	/* Mover h: if this process dies before the enqueue, the reap of h
	 * finds the request (held by the live next port, on no queue) and
	 * fails it back to its sender. */
	hw = HANDOVER(mine, XSEG_RS_SUBMITTED, h, port);
	xseg_rs_store(req, hw);
	XSEG_TEST_POINT(XSEG_TP_FORWARD_STORED, req);
	if (xq_enqueue(seg->ports[port].reqq, idx) < 0) {
		/* Cannot happen (queues hold every index of the pool): give
		 * it back to the caller, unless a reaper of port failed it
		 * back meanwhile (then it is answered: report success). */
		if (xseg_rs_cas(req, hw, NEXT(hw, XSEG_RS_ACCEPTED, h)))
			return -EAGAIN;
		return 0;
	}
	handed_over(req, hw);
	notify(seg, port, b);
	return 0;
}

int xseg_forward(struct xseg *seg, struct xseg_request *req, uint32_t port)
{
	return xseg_forward_batched(seg, req, port, NULL);
}

bool xseg_redeliver(struct xseg *seg, struct xseg_request *req, uint32_t idx,
		    uint64_t w, bool reply)
{
	uint32_t port = HOLDER(w);
	struct xseg_port_local *pl;

	if (port >= seg->nr_ports)
		return false;
	pl = &seg->ports[port];
	/* Full only with far more stray indexes than requests (queues have
	 * twice the pool's room); the request keeps its word, and the
	 * original enqueue, if it happened, delivers it. */
	if (xq_enqueue(reply ? pl->replyq : pl->reqq, idx) < 0) {
		xseg_count(&pl->port->rejected);
		return false;
	}
	XSEG_TEST_POINT(XSEG_TP_REDELIVERED, req);
	/* Queued now (maybe twice): the mark has done its job. */
	handed_over(req, w);
	xseg_signal(seg, port);
	return true;
}

static int receive_one(struct xseg *seg, uint32_t port,
		       struct xseg_request **reqp, const struct xq_prefetch *pf)
{
	struct xseg_port_local *pl = &seg->ports[port];
	struct xseg_request *req;
	uint32_t idx;
	uint64_t w;

	for (;;) {
		if (xq_dequeue_prefetch(pl->replyq, &idx, pf) < 0)
			return -EAGAIN;
		req = xobj_ptr(seg->pool, idx);
		if (!req)
			continue;
		XSEG_TEST_POINT(XSEG_TP_RECEIVE_DEQUEUED, req);
		/* No look at req->src (or any plain field) before the CAS:
		 * a stale index may name a request another of our threads
		 * is filling in right now (a data race, seen by TSan in
		 * vlmc). holder == port in the word says it is ours.
		 * A CAS, not a store: the reaper of a dead mover may have
		 * queued this reply a second time (it cannot tell whether
		 * the mover's enqueue happened), and two of our threads may
		 * hold the two indexes. The take succeeds once; the other
		 * index finds it RECEIVED (or in a later round's state,
		 * which it then takes as that round's reply, equally once). */
		if (!xseg_rs_take(req, XSEG_RS_SERVED, XSEG_RS_FAILED, port,
				  XSEG_RS_RECEIVED, &w))
			continue;
		if (req->src_gen !=
		    __atomic_load_n(&pl->port->gen, __ATOMIC_RELAXED)) {
			/* A reply to this port's previous owner. */
			xseg_free_to_pool(
			    seg, req, NEXT(w, XSEG_RS_RECEIVED, port), port);
			continue;
		}
		if (req->index != idx)
			req->index = idx;
		if (seg->timestamps)
			req->ts_received = xseg_now_ns();
		xseg_count(&pl->port->received);
		*reqp = req;
		return 0;
	}
}

int xseg_receive(struct xseg *seg, uint32_t port, struct xseg_request **reqp)
{
	struct xq_prefetch pf;

	if (!reqp || port >= seg->nr_ports)
		return -EINVAL;
	if (!xseg_owned_by_self(seg, port))
		return -EPERM;
	pool_prefetch(seg, &pf);
	return receive_one(seg, port, reqp, &pf);
}

unsigned xseg_receive_batch(struct xseg *seg, uint32_t port,
			    struct xseg_request **reqs, unsigned n)
{
	struct xq_prefetch pf;
	unsigned got = 0;

	if (!reqs || !xseg_owned_by_self(seg, port))
		return 0;
	pool_prefetch(seg, &pf);
	while (got < n && receive_one(seg, port, &reqs[got], &pf) == 0)
		got++;
	return got;
}

int xseg_put_request(struct xseg *seg, struct xseg_request *req)
{
	struct xseg_port_local *pl;
	uint32_t idx, st, h;
	uint64_t w;

	if (!req || xobj_index(seg->pool, req, &idx) < 0)
		return -EINVAL;
	w = xseg_rs_load(req);
	st = ST(w);
	if (st == XSEG_RS_FREE)
		return -EALREADY;
	if (!held_by_client(st))
		return -EINVAL;
	h = HOLDER(w);
	if (!xseg_owned_by_self(seg, h))
		return -EINVAL;
	/* A CAS, so that two racing puts of one request cannot both queue
	 * it: the loser gets -EALREADY. */
	if (!xseg_rs_cas(req, w, NEXT(w, XSEG_RS_FREE, h)))
		return ST(xseg_rs_load(req)) == XSEG_RS_FREE ? -EALREADY
							     : -EINVAL;
	req_trim_buffer(seg, req);
	req->index = idx;
	pl = &seg->ports[h];
	if (pl->freeq && xq_enqueue(pl->freeq, idx) == 0)
		return 0;
	xseg_rs_store(req, NEXT(w, XSEG_RS_FREE, XSEG_NOPORT));
	xobj_put(seg->pool, idx);
	return 0;
}
