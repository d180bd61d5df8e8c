/* SPDX-License-Identifier: MIT */
/*
 * xseg reaper: owner liveness and the reclaim of ports whose owner died.
 *
 * Only the process that CASed a port's owner word to "self | RECLAIM" cleans
 * that port, so a reclaim never races another reclaim of the same port. If
 * the reclaimer dies too, its RECLAIM word names a dead process and the next
 * reaper takes over (every step below tolerates being repeated).
 *
 * The cleanup acts only on requests held by the port being reclaimed, whose
 * owner no longer runs; requests in flight towards the port (a submitter
 * that read the owner word before the claim, a responder that read the old
 * generation) are left alone: they land on its queues afterwards and are
 * served by the next owner (requests) or dropped by the generation check in
 * receive (replies), or cleaned by the next reap of a free port.
 */
#include "xseg_internal.h"

#include <errno.h>
#include <signal.h>

int xseg_owner_alive(uint64_t owner)
{
	pid_t pid = xseg_owner_pid(owner);
	uint64_t start;
	char state;
	int rc;

	if (pid <= 0)
		return 0;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 0;
	/* Without /proc (start time recorded as 0) kill() is all we have. */
	if (xseg_owner_start(owner) == 0)
		return 1;
	/* Dead only on proof (no such process); an unreadable /proc entry
	 * (EMFILE, EACCES, ...) means "unknown", and unknown is alive: a
	 * false "dead" would take a live peer's port and requests away. */
	rc = xseg_proc_stat(pid, &start, &state);
	if (rc == -ESRCH)
		return 0;
	if (rc < 0)
		return 1;
	/* A zombie has stopped serving even if its parent has not reaped
	 * it yet; a different start time means a recycled pid. */
	if (state == 'Z' || state == 'X')
		return 0;
	return (uint32_t)start == xseg_owner_start(owner);
}

static void fail_reclaimed(struct xseg *seg, uint32_t port,
			   struct xseg_request *req, struct xseg_reap_stats *st)
{
	xseg_count(&seg->ports[port].port->reaped);
	if (xseg_fail_back(seg, req, ECONNRESET, port))
		st->requests_failed++;
	else
		st->requests_freed++;
}

void xseg_port_cleanup(struct xseg *seg, uint32_t port, bool scan,
		       struct xseg_reap_stats *st)
{
	struct xseg_port_local *pl = &seg->ports[port];
	struct xseg_request *req;
	uint32_t idx, state, expect;

	/* New generation first: a reply in flight to the old owner is from
	 * now on recognised as stale by respond and receive. */
	__atomic_store_n(&pl->port->gen, xseg_new_generation(seg),
			 __ATOMIC_SEQ_CST);

	/* Requests queued on the port: failed back, not kept for a future
	 * owner (whose existence nobody can promise the senders). */
	while (xq_dequeue(pl->reqq, &idx) == 0) {
		req = xobj_ptr(seg->pool, idx);
		if (!req ||
		    __atomic_load_n(&req->holder, __ATOMIC_RELAXED) != port)
			continue;
		expect = XSEG_RS_SUBMITTED;
		if (!__atomic_compare_exchange_n(
			&req->state, &expect, XSEG_RS_ACCEPTED, false,
			__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			continue;
		req->index = idx;
		fail_reclaimed(seg, port, req, st);
	}

	/* The free cache goes back to the pool before the scan, so a FREE
	 * request still marked as held by the port afterwards is one its
	 * owner died in the middle of getting or putting. */
	if (pl->freeq) {
		while (xq_dequeue(pl->freeq, &idx) == 0) {
			req = xobj_ptr(seg->pool, idx);
			if (!req ||
			    __atomic_load_n(&req->state, __ATOMIC_ACQUIRE) !=
				XSEG_RS_FREE)
				continue;
			__atomic_store_n(&req->holder, XSEG_NOPORT,
					 __ATOMIC_RELAXED);
			xobj_put(seg->pool, idx);
		}
	}

	/* Replies nobody will read. */
	while (xq_dequeue(pl->replyq, &idx) == 0) {
		req = xobj_ptr(seg->pool, idx);
		if (!req)
			continue;
		state = __atomic_load_n(&req->state, __ATOMIC_ACQUIRE);
		if ((state != XSEG_RS_SERVED && state != XSEG_RS_FAILED) ||
		    req->src != port ||
		    __atomic_load_n(&req->holder, __ATOMIC_RELAXED) != port)
			continue;
		xseg_free_to_pool(seg, req);
		st->requests_freed++;
	}

	if (!scan)
		return;
	for (idx = 0; idx < seg->nr_requests; idx++) {
		req = xobj_ptr(seg->pool, idx);
		if (!req ||
		    __atomic_load_n(&req->holder, __ATOMIC_RELAXED) != port)
			continue;
		state = __atomic_load_n(&req->state, __ATOMIC_ACQUIRE);
		switch (state) {
		case XSEG_RS_ACCEPTED:
			/* Accepted by the dead owner and never answered. */
			req->index = idx;
			fail_reclaimed(seg, port, req, st);
			break;
		case XSEG_RS_ALLOCATED:
		case XSEG_RS_PREPARED:
		case XSEG_RS_RECEIVED:
			/* Held by the dead owner as a client. */
			xseg_free_to_pool(seg, req);
			st->requests_freed++;
			break;
		case XSEG_RS_FREE:
			/* Lost between a queue and the state word by a kill;
			 * xobj refuses it harmlessly if it is in fact free. */
			__atomic_store_n(&req->holder, XSEG_NOPORT,
					 __ATOMIC_RELAXED);
			xobj_put(seg->pool, idx);
			break;
		default:
			/* SUBMITTED / SERVED / FAILED: in flight to one of
			 * the port's queues; see the comment at the top. */
			break;
		}
	}
}

int xseg_reap(struct xseg *seg, struct xseg_reap_stats *stats)
{
	struct xseg_reap_stats st = {0};
	int reclaimed = 0;

	int rc = xseg_self_identity(seg);

	if (rc < 0)
		return rc; /* cannot claim without an identity */
	for (uint32_t i = 0; i < seg->nr_ports; i++) {
		struct xseg_port_local *pl = &seg->ports[i];
		uint64_t *ownerp = &pl->port->owner;
		uint64_t o = __atomic_load_n(ownerp, __ATOMIC_ACQUIRE);
		uint64_t claim = seg->self_owner | XSEG_OWNER_RECLAIM;

		if (o == 0) {
			/* Free, but something arrived after its cleanup. */
			if (!xq_count(pl->reqq) && !xq_count(pl->replyq))
				continue;
			if (!__atomic_compare_exchange_n(
				ownerp, &o, claim, false, __ATOMIC_ACQ_REL,
				__ATOMIC_RELAXED))
				continue;
			xseg_port_cleanup(seg, i, false, &st);
			__atomic_store_n(ownerp, 0, __ATOMIC_RELEASE);
			continue;
		}
		if ((o & ~XSEG_OWNER_RECLAIM) == seg->self_owner ||
		    xseg_owner_alive(o))
			continue;
		if (!__atomic_compare_exchange_n(ownerp, &o, claim, false,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_RELAXED))
			continue;
		xseg_port_cleanup(seg, i, true, &st);
		__atomic_store_n(ownerp, 0, __ATOMIC_RELEASE);
		reclaimed++;
	}
	st.ports_reclaimed = (uint32_t)reclaimed;
	if (stats)
		*stats = st;
	return reclaimed;
}
