/* SPDX-License-Identifier: MIT */
/*
 * xseg reaper: owner liveness and the reclaim of ports whose owner died.
 *
 * Only the process that CASed a port's owner word to "self | RECLAIM" cleans
 * that port, so a reclaim never races another reclaim of the same port. If
 * the reclaimer dies too, its RECLAIM word names a dead process and the next
 * reaper takes over (every step below tolerates being repeated).
 *
 * The cleanup acts only on requests held by the port being reclaimed (or,
 * for a dead owner, moved by it: see below), and only through a CAS from
 * the (state, mover, holder) word it read, so a submit, forward or answer
 * racing it either wins (the reaper leaves the request alone) or loses (its
 * own CAS fails). A request a submitter or forwarder moved to (SUBMITTED,
 * port) but had not enqueued yet is failed back; its late enqueue leaves a
 * stale index that the next dequeue drops. Replies in flight to the port
 * are dropped by the generation check in receive, or cleaned by the next
 * reap of a free port.
 *
 * Stranded hand-overs (review F7). Every hand-over is "store the word, then
 * enqueue the index", two atomic steps. A process killed between them
 * leaves the request on no queue. Where the new holder is the dead port
 * itself (a submit or forward to it, an accept killed between dequeue and
 * CAS, a receive killed between dequeue and CAS) the scan below finds it
 * by holder. Where the new holder is a live port, the word names the dead
 * process's port as "mover": submit stores (SUBMITTED, mover src, eff),
 * forward (SUBMITTED, mover h, next), respond (SERVED/FAILED, mover h,
 * src), a fail-back (FAILED, mover actor, src). Right after its enqueue
 * the mover clears the mark with a CAS (unless the receiver's CAS, which
 * clears it too, came first); a count of hand-overs in the word (hseq,
 * mod 256) keeps a stale clear from matching a later hand-over. So a mark
 * naming a dead port P is left only by a kill between P's store and its
 * clear. The reap of P settles every request whose word still names P as
 * mover, from that exact word:
 *   (SUBMITTED, P, X), src == P: P was the client and is dead: the request
 *       is returned to the pool (nobody would read its reply). A CAS from
 *       the word read moves it away from SUBMITTED, so if P's enqueue did
 *       happen, accept on X drops that index (its CAS from (SUBMITTED, *,
 *       X) fails); if accept's CAS came first, the reaper's fails and X
 *       serves it (the reply then goes to a dead port and is freed there).
 *   (SUBMITTED, P, X), src != P: P forwarded it; the hand-over is
 *       completed for P: the index is enqueued on X's request queue.
 *   (SERVED/FAILED, P, src): P answered it; the answer is delivered: the
 *       index is enqueued on src's reply queue.
 * The reaper cannot tell whether P's own enqueue happened (P may have died
 * after it, before its clear), so the last two cases may put a second
 * index on the queue (then clear the mark, as P would have). Accept and
 * receive take a request only by CAS from the exact word they read to
 * ACCEPTED/RECEIVED: of the two indexes exactly one takes it; the other finds
 * it taken and is dropped, or, if the request has meanwhile gone round again to
 * the same port, finds that later round's hand-over and takes it in place of
 * that round's own index, which is then the one dropped. Every round is taken
 * exactly once. While P is being reclaimed (RECLAIM owner word) nobody but this
 * reaper can write a word naming P as mover: movers are the acting process's
 * own ports, and P has no live owner. A reaper killed during all this leaves P
 * claimed by a dead process; the next reap redoes the scan (a fail-back it
 * had begun is (ANSWERING, P) or (FAILED, mover P, src): found again).
 */
#include "xseg_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int xseg_owner_alive(uint64_t owner)
{
	pid_t pid = xseg_owner_pid(owner);
	struct xseg_proc_stat ps;
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
	rc = xseg_proc_stat_read(pid, &ps);
	if (rc == -ESRCH)
		return 0;
	if (rc < 0)
		return 1;
	/* A zombie has stopped serving even if its parent has not reaped
	 * it yet; a different start time means a recycled pid. But the
	 * state is the thread-group leader's: a leader that exited (its
	 * main returned through pthread_exit, or it died first of a
	 * SIGKILL) is a zombie while other threads still run, or still
	 * finish a system call that writes into a request's buffer (a
	 * pread of the store's). Dead only once it is the last
	 * (safety20 N1). */
	if (xseg_proc_exited(&ps))
		return 0;
	return (uint32_t)ps.start_time == xseg_owner_start(owner);
}

bool xseg_owner_exiting(uint64_t owner)
{
	pid_t pid = xseg_owner_pid(owner);
	struct xseg_proc_stat ps;

	if (pid <= 0 || xseg_owner_start(owner) == 0 ||
	    xseg_proc_stat_read(pid, &ps) < 0)
		return false;
	return (ps.state == 'Z' || ps.state == 'X') && !xseg_proc_exited(&ps) &&
	       (uint32_t)ps.start_time == xseg_owner_start(owner);
}

/* Fail req back if its word is still w (the word this reaper read).
 * Returns false if it was not (somebody acted on it first). */
static bool fail_reclaimed(struct xseg *seg, uint32_t port,
			   struct xseg_request *req, uint64_t w,
			   struct xseg_reap_stats *st)
{
	/* ACCEPTED and ANSWERING were counted as accepted by port's owner;
	 * SUBMITTED ones (queued or stranded) were not */
	unsigned state = xseg_rs_state(w);
	int rc = xseg_fail_back(seg, req, w, ECONNRESET, port,
				state == XSEG_RS_ACCEPTED ||
				    state == XSEG_RS_ANSWERING);

	if (rc == XSEG_FB_LOST)
		return false;
	xseg_count(&seg->ports[port].port->reaped);
	if (rc == XSEG_FB_QUEUED)
		st->requests_failed++;
	else
		st->requests_freed++;
	return true;
}

/* A request whose word names port (dead, claimed by us) as mover and
 * another port as holder: see "Stranded hand-overs" at the top. */
static void settle_moved(struct xseg *seg, uint32_t port,
			 struct xseg_request *req, uint32_t idx, uint64_t w,
			 struct xseg_reap_stats *st)
{
	uint32_t holder = xseg_rs_holder(w);

	switch (xseg_rs_state(w)) {
	case XSEG_RS_SUBMITTED:
		/* src is the client's and stable while the word is w: only
		 * get writes it, and a get needs the word to change. */
		if (xseg_req_src(req) == port) {
			if (xseg_free_to_pool(seg, req, w, port))
				st->requests_freed++;
			break;
		}
		if (xseg_rs_load(req) != w)
			break; /* taken meanwhile */
		if (xseg_redeliver(seg, req, idx, w, false))
			st->requests_redelivered++;
		break;
	case XSEG_RS_SERVED:
	case XSEG_RS_FAILED:
		/* src read atomically: once the word moves on, a get may be
		 * rewriting it (the re-check then refuses the value). */
		if (holder != xseg_req_src(req) || xseg_rs_load(req) != w)
			break;
		if (xseg_redeliver(seg, req, idx, w, true))
			st->requests_redelivered++;
		break;
	default:
		break;
	}
}

/* Sent by port (src), taken by another port and not yet answered: such a
 * request can still be executed after the reclaim of port (review9 R9-7
 * part 2), so a new owner of port must not start until it is answered.
 * Requests still SUBMITTED elsewhere never run: the reclaim changed the
 * port's generation (seq_cst) before its scan loaded w (seq_cst), so an
 * accept whose take (a seq_cst CAS) comes after that load reads the new
 * generation (seq_cst) and drops the request. Forwarding keeps src, so a
 * request passed down a chain of servers is found at whichever holds it.
 * src is read atomically and trusted only if the word is still w (only a
 * get writes src, and a get needs the word to change). */
static bool held_elsewhere(uint32_t port, struct xseg_request *req, uint64_t w)
{
	uint32_t state = xseg_rs_state(w);

	if (state != XSEG_RS_ACCEPTED && state != XSEG_RS_ANSWERING)
		return false;
	if (xseg_rs_holder(w) == port || xseg_req_src(req) != port)
		return false;
	/* Only requests that change stored data count: a READ, INFO, HASH
	 * or PING run late changes nothing, and its answer is dropped (the
	 * generation); a FLUSH run late makes durable what is already
	 * acknowledged. Counting them let one READ a store never answers
	 * keep a restarted peer from binding for ever (review23x F3). The
	 * op is the one the request was submitted with (sent_op), not op:
	 * op is written with plain stores by whoever holds the request (a
	 * client of this same process reusing it between our load of w
	 * and this one made a data race, review23y F2; a server may
	 * rewrite it between accept and respond). sent_op is written only
	 * by submit, atomically, before the word's release store: a scan
	 * that read w of this round reads this round's value or a later
	 * round's. A later round means this one is over, so "not held" is
	 * then true, and "held" is trusted, like src, only if the word
	 * still reads w. */
	switch (__atomic_load_n(&req->sent_op, __ATOMIC_RELAXED)) {
	case XSEG_OP_READ:
	case XSEG_OP_INFO:
	case XSEG_OP_HASH:
	case XSEG_OP_PING:
	case XSEG_OP_FLUSH:
		return false;
	default:
		return __atomic_load_n(&req->state_holder, __ATOMIC_SEQ_CST) ==
		       w;
	}
}

/* The requests of xseg_port_held_elsewhere sent from port, or, with
 * senders, from any port marked in it; one pass over the pool. */
static uint32_t count_held(struct xseg *seg, uint32_t port,
			   const uint8_t *senders, uint32_t *first_src,
			   uint32_t *first_holder)
{
	/* Per holder port: 0 not looked at, 1 alive, 2 not (free, dead
	 * owner). Without memory every holder counts as alive: the safe
	 * side (the binder waits). */
	uint8_t *alive = calloc(seg->nr_ports, 1);
	uint32_t nr = 0, first = XSEG_NOPORT, src0 = XSEG_NOPORT;

	for (uint32_t idx = 0; idx < seg->nr_requests; idx++) {
		struct xseg_request *req = xobj_ptr(seg->pool, idx);
		uint32_t h, src;
		uint64_t w, o;

		if (!req)
			continue;
		w = __atomic_load_n(&req->state_holder, __ATOMIC_SEQ_CST);
		/* src is trusted by held_elsewhere, which reads it again
		 * and checks the word is still w */
		src = senders ? xseg_req_src(req) : port;
		if (senders && (src >= seg->nr_ports || !senders[src]))
			continue;
		if (!held_elsewhere(src, req, w))
			continue;
		h = xseg_rs_holder(w);
		if (h >= seg->nr_ports)
			continue;
		if (alive && !alive[h]) {
			o = __atomic_load_n(&seg->ports[h].port->owner,
					    __ATOMIC_ACQUIRE);
			/* Flags ignored: a port being reclaimed by a live
			 * process, or released by its live owner, may
			 * still have a thread finishing the request. */
			alive[h] = o && xseg_owner_alive(o) ? 1 : 2;
		}
		if (alive && alive[h] == 2)
			continue;
		if (first == XSEG_NOPORT) {
			first = h;
			src0 = src;
		}
		nr++;
	}
	free(alive);
	if (first_holder)
		*first_holder = first;
	if (first_src)
		*first_src = src0;
	return nr;
}

uint32_t xseg_port_held_elsewhere(struct xseg *seg, uint32_t port,
				  uint32_t *first_holder)
{
	return count_held(seg, port, NULL, NULL, first_holder);
}

uint32_t xseg_ports_held_elsewhere(struct xseg *seg, const uint8_t *senders,
				   uint32_t *first_src, uint32_t *first_holder)
{
	return count_held(seg, XSEG_NOPORT, senders, first_src, first_holder);
}

uint64_t xseg_port_count_loss(struct xseg *seg, uint32_t port,
			      uint64_t prev_owner, bool released)
{
	struct xseg_port *p = seg->ports[port].port;
	uint64_t u = __atomic_load_n(&p->unflushed, __ATOMIC_SEQ_CST), nr;
	char type[XSEG_PEER_TYPE_LEN];

	/* The top bit set: a negative count, i.e. a late subtract of a
	 * worker that outlived a timed-out drain and ran after an earlier
	 * release took the count (below): not a loss, just cleared. */
	if (!u || (u >> 63)) {
		if (u)
			__atomic_exchange_n(&p->unflushed, 0, __ATOMIC_SEQ_CST);
		return 0;
	}
	/* Counted before anything else of the reclaim: the requests the
	 * owner held are failed back (and the port can be bound) only
	 * after this add, so a client that sees one of those failures or
	 * talks to the next owner also sees the new counter. A reclaimer
	 * killed between the add and the reset makes the next one count
	 * again: the safe side. */
	nr = __atomic_add_fetch(&seg->hdr->writeback_losses, 1,
				__ATOMIC_SEQ_CST);
	/* Reset by exchange, not by subtracting u: a late worker's -1
	 * between the two (a release after a timed-out drain) would wrap
	 * the word and the next bind would count a false loss (review10
	 * N1). */
	__atomic_exchange_n(&p->unflushed, 0, __ATOMIC_SEQ_CST);
	memcpy(type, p->peer_type, sizeof(type));
	type[sizeof(type) - 1] = '\0';
	for (size_t i = 0; type[i]; i++) /* a dead peer's bytes: printable */
		if (type[i] < 0x20 || type[i] > 0x7e)
			type[i] = '?';
	fprintf(stderr,
		"xseg %s: port %u (%s, pid %d) %s holding %" PRIu64
		" unflushed write-back units: write-back loss %" PRIu64 "\n",
		seg->name, port, type[0] ? type : "?",
		(int)xseg_owner_pid(prev_owner),
		released ? "released by its owner" : "reclaimed", u, nr);
	return u;
}

void xseg_port_cleanup(struct xseg *seg, uint32_t port, uint64_t prev_owner,
		       enum xseg_clean_mode mode, struct xseg_reap_stats *st)
{
	struct xseg_port_local *pl = &seg->ports[port];
	struct xseg_request *req;
	uint32_t idx, state;
	bool drain = false;
	uint64_t w;

	if (xseg_port_count_loss(seg, port, prev_owner,
				 mode == XSEG_CLEAN_SELF))
		st->writeback_losses++;
	/* The dead owner is the port's latest owner (a bind by a build
	 * before last_owner existed did not record it): what the successor's
	 * fence needs to find its other ports (port.c). Not a dead
	 * reclaimer's claim word: that names whoever was reclaiming. */
	if (mode == XSEG_CLEAN_DEAD && prev_owner &&
	    !(prev_owner & XSEG_OWNER_RECLAIM))
		__atomic_store_n(&pl->port->last_owner, prev_owner,
				 __ATOMIC_RELAXED);

	/* New generation first: a reply in flight to the old owner is from
	 * now on recognised as stale by respond and receive. */
	__atomic_store_n(&pl->port->gen, xseg_new_generation(seg),
			 __ATOMIC_SEQ_CST);

	/* Requests queued on the port: failed back, not kept for a future
	 * owner (whose existence nobody can promise the senders). */
	while (xq_dequeue(pl->reqq, &idx) == 0) {
		req = xobj_ptr(seg->pool, idx);
		if (!req)
			continue;
		/* Retried while the word still reads (SUBMITTED, port):
		 * the submitter's clearing CAS may change the mover under
		 * us, and losing to that must not strand the request. */
		for (;;) {
			w = xseg_rs_load(req);
			if (xseg_rs_state(w) != XSEG_RS_SUBMITTED ||
			    xseg_rs_holder(w) != port ||
			    fail_reclaimed(seg, port, req, w, st))
				break;
		}
	}

	/* The free cache goes back to the pool before the scan, so a FREE
	 * request still marked as held by the port afterwards is one its
	 * owner died in the middle of getting or putting. */
	if (pl->freeq) {
		while (xq_dequeue(pl->freeq, &idx) == 0) {
			req = xobj_ptr(seg->pool, idx);
			if (!req)
				continue;
			w = xseg_rs_load(req);
			if (xseg_rs_state(w) != XSEG_RS_FREE ||
			    !xseg_rs_cas(
				req, w,
				xseg_rs_next(w, XSEG_RS_FREE, XSEG_NOPORT)))
				continue;
			xobj_put(seg->pool, idx);
		}
	}

	/* Replies nobody will read. */
	while (xq_dequeue(pl->replyq, &idx) == 0) {
		req = xobj_ptr(seg->pool, idx);
		if (!req)
			continue;
		if (xseg_req_src(req) != port)
			continue;
		for (;;) { /* retried as above (the responder's clear) */
			w = xseg_rs_load(req);
			state = xseg_rs_state(w);
			if ((state != XSEG_RS_SERVED &&
			     state != XSEG_RS_FAILED) ||
			    xseg_rs_holder(w) != port)
				break;
			if (xseg_free_to_pool(seg, req, w, port)) {
				st->requests_freed++;
				break;
			}
		}
	}

	if (mode == XSEG_CLEAN_DEAD) {
		/* Only the owner's threads wait on a port, and the owner is
		 * gone: a count left by a waiter killed inside FUTEX_WAIT
		 * would otherwise make every later signal a FUTEX_WAKE. The
		 * signal count in the high half is kept. */
		__atomic_fetch_and(&pl->port->sleepers, ~0xffffffffULL,
				   __ATOMIC_SEQ_CST);
	}
	if (mode == XSEG_CLEAN_QUEUES)
		return;
	/* Every action below is a CAS from the exact (state, holder) pair
	 * read here: a submit, forward, answer or put that changes the
	 * request meanwhile wins, and the reaper leaves it alone. The loads
	 * are seq_cst: see held_elsewhere. */
	for (idx = 0; idx < seg->nr_requests; idx++) {
		req = xobj_ptr(seg->pool, idx);
		if (!req)
			continue;
		w = __atomic_load_n(&req->state_holder, __ATOMIC_SEQ_CST);
		if (xseg_rs_holder(w) != port) {
			/* The fail-backs this cleanup made above named port
			 * as mover too, but each cleared its mark after its
			 * enqueue (handed_over), so a mark left here is the
			 * dead owner's or a killed earlier reaper's (review
			 * 3, F1: test_dead_server_one_index_each). */
			if (mode == XSEG_CLEAN_DEAD && xseg_rs_mover(w) == port)
				settle_moved(seg, port, req, idx, w, st);
			else if (!drain && held_elsewhere(port, req, w))
				drain = true;
			continue;
		}
		switch (xseg_rs_state(w)) {
		case XSEG_RS_ACCEPTED:
			/* Accepted by the port and never answered. */
			fail_reclaimed(seg, port, req, w, st);
			break;
		case XSEG_RS_SUBMITTED:
			/* Not on the request queue (drained above): either
			 * stranded by an accept killed between its dequeue
			 * and its CAS, or a submit/forward that read the
			 * owner word before the claim and has not enqueued
			 * yet. Both are failed back; the late enqueue then
			 * leaves a stale index that accept/reap drop. */
			fail_reclaimed(seg, port, req, w, st);
			break;
		case XSEG_RS_ANSWERING:
			/* Only a dead owner leaves this (killed inside
			 * respond/forward/put); with a live owner (release)
			 * one of its threads is writing it right now. */
			if (mode == XSEG_CLEAN_DEAD)
				fail_reclaimed(seg, port, req, w, st);
			break;
		case XSEG_RS_ALLOCATED:
		case XSEG_RS_PREPARED:
		case XSEG_RS_RECEIVED:
			/* Held by the port as a client. */
			if (xseg_free_to_pool(seg, req, w, port))
				st->requests_freed++;
			break;
		case XSEG_RS_SERVED:
		case XSEG_RS_FAILED:
			/* A reply to the port that is on no queue (its reply
			 * queue was drained above): a receive killed between
			 * dequeue and CAS, or an answer whose mover has not
			 * enqueued yet. Nobody will read it. The mover only
			 * enqueues after its store and never touches the
			 * request again, so freeing it is safe; its late
			 * index is dropped by the next reap of the free
			 * port or by receive (the word no longer matches). */
			if (xseg_free_to_pool(seg, req, w, port))
				st->requests_freed++;
			break;
		case XSEG_RS_FREE:
			/* Lost between a queue and the state word by a kill;
			 * xobj refuses it harmlessly if it is in fact free. */
			if (xseg_rs_cas(
				req, w,
				xseg_rs_next(w, XSEG_RS_FREE, XSEG_NOPORT)))
				xobj_put(seg->pool, idx);
			break;
		default:
			break;
		}
	}
	/* Whatever an earlier reclaim found: this scan, made after the new
	 * generation, sees every request of the port's owners that can
	 * still be executed (a later accept drops the rest). Stored before
	 * the caller frees the owner word (release), so the next binder's
	 * claim sees it. A reclaimer killed before this store leaves its
	 * claim to the next reaper, which scans again. */
	__atomic_store_n(&pl->port->drain, drain ? 1 : 0, __ATOMIC_SEQ_CST);
}

bool xseg_reclaim_dead(struct xseg *seg, uint32_t port, uint64_t o,
		       struct xseg_reap_stats *st)
{
	uint64_t *ownerp = &seg->ports[port].port->owner;

	if (!__atomic_compare_exchange_n(
		ownerp, &o, seg->self_owner | XSEG_OWNER_RECLAIM, false,
		__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return false;
	xseg_port_cleanup(seg, port, o, XSEG_CLEAN_DEAD, st);
	__atomic_store_n(ownerp, 0, __ATOMIC_RELEASE);
	return true;
}

int xseg_reclaim_if_dead(struct xseg *seg, uint32_t port,
			 struct xseg_reap_stats *st)
{
	uint64_t *ownerp = &seg->ports[port].port->owner;
	uint64_t deadline = xseg_now_ns() + XSEG_RECLAIM_WAIT_NS, o;
	int rc = xseg_self_identity(seg);

	if (rc < 0)
		return rc;
	for (;;) {
		o = __atomic_load_n(ownerp, __ATOMIC_ACQUIRE);
		/* Free, or ours. (Ours being reclaimed by another of our
		 * threads is waited for below, as any reclaimer.) */
		if (o == 0 || o == seg->self_owner)
			return 0;
		if ((o & ~XSEG_OWNER_RECLAIM) != seg->self_owner &&
		    !xseg_owner_alive(o)) {
			if (xseg_reclaim_dead(seg, port, o, st))
				return 1;
			continue; /* the word moved: look again */
		}
		if (!(o & XSEG_OWNER_RECLAIM))
			return 0; /* a live owner */
		/* Another live process reclaims or binds it: its count of
		 * a loss may not have happened yet. Wait for it to end. */
		if (xseg_now_ns() >= deadline)
			return -EBUSY;
		usleep(1000);
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
			xseg_port_cleanup(seg, i, 0, XSEG_CLEAN_QUEUES, &st);
			__atomic_store_n(ownerp, 0, __ATOMIC_RELEASE);
			continue;
		}
		if ((o & ~XSEG_OWNER_RECLAIM) == seg->self_owner ||
		    xseg_owner_alive(o))
			continue;
		reclaimed += xseg_reclaim_dead(seg, i, o, &st);
	}
	st.ports_reclaimed = (uint32_t)reclaimed;
	if (stats)
		*stats = st;
	return reclaimed;
}
