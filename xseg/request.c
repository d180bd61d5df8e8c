/* SPDX-License-Identifier: MIT */
/*
 * xseg requests: get, prep, submit, accept, respond, forward, receive, put,
 * validation.
 *
 * Ownership rule that makes this lock-free: a request's payload is touched
 * only by the process of its holder port; it changes hands only through an
 * xq enqueue (release) and the matching dequeue (acquire). state and holder
 * are atomics because the reaper of another process reads them while
 * scanning the pool; it acts only on requests whose holder is dead.
 */
#include "xseg_internal.h"

#include <errno.h>
#include <string.h>

static inline void req_set_state(struct xseg_request *req, uint32_t st)
{
	__atomic_store_n(&req->state, st, __ATOMIC_RELEASE);
}

static inline uint32_t req_state(const struct xseg_request *req)
{
	return __atomic_load_n(&req->state, __ATOMIC_ACQUIRE);
}

static inline void req_set_holder(struct xseg_request *req, uint32_t port)
{
	__atomic_store_n(&req->holder, port, __ATOMIC_RELAXED);
}

static inline uint32_t req_holder(const struct xseg_request *req)
{
	return __atomic_load_n(&req->holder, __ATOMIC_RELAXED);
}

static inline uint64_t stamp(const struct xseg *seg)
{
	return seg->timestamps ? xseg_now_ns() : 0;
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
	if (req->data_off && req->data_cap > seg->default_data_size) {
		xheap_free(seg->heap, req->data_off - seg->heap_off);
		req->data_off = 0;
		req->data_cap = 0;
	}
}

void xseg_free_to_pool(struct xseg *seg, struct xseg_request *req)
{
	uint32_t idx;

	if (xobj_index(seg->pool, req, &idx) < 0)
		return;
	req_trim_buffer(seg, req);
	req->index = idx;
	req_set_holder(req, XSEG_NOPORT);
	req_set_state(req, XSEG_RS_FREE);
	xobj_put(seg->pool, idx);
}

int xseg_get_request(struct xseg *seg, uint32_t port,
		     struct xseg_request **reqp)
{
	struct xseg_port_local *pl;
	struct xseg_request *req;
	uint32_t idx;
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
		if (req && req_state(req) == XSEG_RS_FREE)
			break;
	}
	req->index = idx;
	req->src = port;
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
	req_set_holder(req, port);
	req_set_state(req, XSEG_RS_ALLOCATED);
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
	if (!req || targetlen > XSEG_MAX_TARGETLEN ||
	    !held_by_client(req_state(req)))
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
	req_set_state(req, XSEG_RS_PREPARED);
	return 0;
}

int xseg_submit(struct xseg *seg, struct xseg_request *req, uint32_t dst)
{
	struct xseg_port *sp, *ep;
	uint32_t st, src, eff, idx;

	if (!req || dst >= seg->nr_ports)
		return -EINVAL;
	st = req_state(req);
	src = req->src;
	idx = req->index;
	if (!held_by_client(st) || !xseg_owned_by_self(seg, src) ||
	    req_holder(req) != src || xobj_ptr(seg->pool, idx) != req)
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
	req_set_holder(req, eff);
	req_set_state(req, XSEG_RS_SUBMITTED);
	if (xq_enqueue(seg->ports[eff].reqq, idx) < 0) {
		/* Cannot happen: queues hold every request of the pool. */
		req_set_holder(req, src);
		req_set_state(req, st);
		return -EAGAIN;
	}
	xseg_count(&sp->sent);
	xseg_signal(seg, eff);
	return 0;
}

bool xseg_fail_back(struct xseg *seg, struct xseg_request *req, int err,
		    uint32_t counter_port)
{
	uint32_t src = req->src, idx;

	req->error = err;
	req->ts_responded = stamp(seg);
	if (counter_port < seg->nr_ports)
		xseg_count(&seg->ports[counter_port].port->failed);
	if (src >= seg->nr_ports || xobj_index(seg->pool, req, &idx) < 0) {
		xseg_free_to_pool(seg, req);
		return false;
	}
	req->index = idx;
	req_set_holder(req, src);
	req_set_state(req, XSEG_RS_FAILED);
	if (__atomic_load_n(&seg->ports[src].port->gen, __ATOMIC_ACQUIRE) !=
	    req->src_gen) {
		xseg_free_to_pool(seg, req);
		return false;
	}
	xq_enqueue(seg->ports[src].replyq, idx);
	xseg_signal(seg, src);
	return true;
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
		/* Inside the heap arena, end included, without overflow. */
		if (off < seg->heap_off ||
		    off - seg->heap_off >= seg->heap_bytes)
			return -EINVAL;
		if (cap > seg->heap_bytes - (off - seg->heap_off))
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
		      struct xseg_request **reqp)
{
	struct xseg_port_local *pl = &seg->ports[port];
	struct xseg_request *req;
	uint32_t idx, expect;
	int rc;

	for (;;) {
		if (xq_dequeue(pl->reqq, &idx) < 0)
			return -EAGAIN;
		req = xobj_ptr(seg->pool, idx);
		if (!req || req_holder(req) != port) {
			xseg_count(&pl->port->rejected);
			continue;
		}
		expect = XSEG_RS_SUBMITTED;
		if (!__atomic_compare_exchange_n(
			&req->state, &expect, XSEG_RS_ACCEPTED, false,
			__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
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
			xseg_fail_back(seg, req, -rc, port);
			continue;
		}
		if (seg->timestamps)
			req->ts_accepted = xseg_now_ns();
		xseg_count(&pl->port->accepted);
		*reqp = req;
		return 0;
	}
}

int xseg_accept(struct xseg *seg, uint32_t port, struct xseg_request **reqp)
{
	if (!reqp || port >= seg->nr_ports)
		return -EINVAL;
	if (!xseg_owned_by_self(seg, port))
		return -EPERM;
	return accept_one(seg, port, reqp);
}

unsigned xseg_accept_batch(struct xseg *seg, uint32_t port,
			   struct xseg_request **reqs, unsigned n)
{
	unsigned got = 0;

	if (!reqs || !xseg_owned_by_self(seg, port))
		return 0;
	while (got < n && accept_one(seg, port, &reqs[got]) == 0)
		got++;
	return got;
}

int xseg_respond(struct xseg *seg, struct xseg_request *req, int error)
{
	struct xseg_port *hp;
	uint32_t h, src, idx;

	if (!req || error < 0)
		return -EINVAL;
	h = req_holder(req);
	if (!xseg_owned_by_self(seg, h) || req_state(req) != XSEG_RS_ACCEPTED ||
	    xobj_index(seg->pool, req, &idx) < 0)
		return -EINVAL;
	hp = seg->ports[h].port;
	xseg_count(error ? &hp->failed : &hp->served);
	req->error = error;
	if (seg->timestamps)
		req->ts_responded = xseg_now_ns();
	src = req->src;
	if (src >= seg->nr_ports) {
		xseg_count(&hp->rejected);
		xseg_free_to_pool(seg, req);
		return 0;
	}
	req_set_holder(req, src);
	req_set_state(req, error ? XSEG_RS_FAILED : XSEG_RS_SERVED);
	/* No generation check here (it would read the client's line 1):
	 * a reply to a port that changed owner since the submit is dropped
	 * by xseg_receive, or by the reaper if the port stays free. */
	xq_enqueue(seg->ports[src].replyq, idx);
	xseg_signal(seg, src);
	return 0;
}

int xseg_forward(struct xseg *seg, struct xseg_request *req, uint32_t port)
{
	uint32_t h, idx;

	if (!req || port >= seg->nr_ports)
		return -EINVAL;
	h = req_holder(req);
	if (h == port || !xseg_owned_by_self(seg, h) ||
	    req_state(req) != XSEG_RS_ACCEPTED)
		return -EINVAL;
	if (!xseg_owner_serving(__atomic_load_n(&seg->ports[port].port->owner,
						__ATOMIC_RELAXED)))
		return -ENXIO;
	if (xobj_index(seg->pool, req, &idx) < 0)
		return -EINVAL;
	req->effective_dst = port;
	xseg_count(&seg->ports[h].port->forwarded);
	req_set_holder(req, port);
	req_set_state(req, XSEG_RS_SUBMITTED);
	xq_enqueue(seg->ports[port].reqq, idx);
	xseg_signal(seg, port);
	return 0;
}

static int receive_one(struct xseg *seg, uint32_t port,
		       struct xseg_request **reqp)
{
	struct xseg_port_local *pl = &seg->ports[port];
	struct xseg_request *req;
	uint32_t idx, st;

	for (;;) {
		if (xq_dequeue(pl->replyq, &idx) < 0)
			return -EAGAIN;
		req = xobj_ptr(seg->pool, idx);
		if (!req)
			continue;
		st = req_state(req);
		if ((st != XSEG_RS_SERVED && st != XSEG_RS_FAILED) ||
		    req->src != port || req_holder(req) != port)
			continue;
		if (req->src_gen !=
		    __atomic_load_n(&pl->port->gen, __ATOMIC_RELAXED)) {
			/* A reply to this port's previous owner. */
			xseg_free_to_pool(seg, req);
			continue;
		}
		if (req->index != idx)
			req->index = idx;
		req_set_state(req, XSEG_RS_RECEIVED);
		if (seg->timestamps)
			req->ts_received = xseg_now_ns();
		xseg_count(&pl->port->received);
		*reqp = req;
		return 0;
	}
}

int xseg_receive(struct xseg *seg, uint32_t port, struct xseg_request **reqp)
{
	if (!reqp || port >= seg->nr_ports)
		return -EINVAL;
	if (!xseg_owned_by_self(seg, port))
		return -EPERM;
	return receive_one(seg, port, reqp);
}

unsigned xseg_receive_batch(struct xseg *seg, uint32_t port,
			    struct xseg_request **reqs, unsigned n)
{
	unsigned got = 0;

	if (!reqs || !xseg_owned_by_self(seg, port))
		return 0;
	while (got < n && receive_one(seg, port, &reqs[got]) == 0)
		got++;
	return got;
}

int xseg_put_request(struct xseg *seg, struct xseg_request *req)
{
	struct xseg_port_local *pl;
	uint32_t idx, st, h;

	if (!req || xobj_index(seg->pool, req, &idx) < 0)
		return -EINVAL;
	st = req_state(req);
	if (st == XSEG_RS_FREE)
		return -EALREADY;
	if (!held_by_client(st))
		return -EINVAL;
	h = req_holder(req);
	if (!xseg_owned_by_self(seg, h))
		return -EINVAL;
	/* A CAS, so that two racing puts of one request cannot both queue
	 * it: the loser gets -EALREADY. */
	if (!__atomic_compare_exchange_n(&req->state, &st, XSEG_RS_FREE, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return st == XSEG_RS_FREE ? -EALREADY : -EINVAL;
	req_trim_buffer(seg, req);
	req->index = idx;
	pl = &seg->ports[h];
	if (pl->freeq && xq_enqueue(pl->freeq, idx) == 0)
		return 0;
	req_set_holder(req, XSEG_NOPORT);
	xobj_put(seg->pool, idx);
	return 0;
}
