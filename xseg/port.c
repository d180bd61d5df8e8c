/* SPDX-License-Identifier: MIT */
/*
 * xseg ports: bind, allocate, release, liveness, redirects, statistics.
 *
 * A port changes owner only by CAS on its owner word; taking a port always
 * goes through "self | RECLAIM" and a cleanup of whatever the previous
 * owner left, so a new owner never sees its predecessor's requests or
 * replies (see reaper.c).
 */
#include "xseg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XSEG_BIND_WAIT_NS (1000ULL * 1000 * 1000)

/*
 * Requests port's owners sent that other live ports accepted and have not
 * answered (xseg_port_held_elsewhere): such a request can still be
 * executed, so nothing that must come after it may start (review9 R9-7
 * part 2, review14 F1). Polls for up to wait_ns while the set is not
 * empty. claimed: the caller holds port's claim, so nothing can be sent
 * from it and the set only shrinks (a holder answers, or dies and its reap
 * fails the request back). Else the port must stay free: a new owner's
 * own requests would count too, and its bind has already waited for its
 * predecessor's, so the wait ends (returning 0) once someone binds it.
 * Returns how many are still held, and one holder in *holder.
 */
/* The pause between two looks of a wait for held requests: 100 us,
 * doubling up to 10 ms. */
static void held_pause(uint32_t *pause_us)
{
	usleep(*pause_us);
	if (*pause_us < 10000)
		*pause_us *= 2;
}

static uint32_t wait_held_elsewhere(struct xseg *seg, uint32_t port,
				    uint64_t wait_ns, bool claimed,
				    uint32_t *holder)
{
	uint64_t deadline = xseg_now_ns() + wait_ns;
	uint32_t nr, pause_us = 100;

	for (;;) {
		if (!claimed && __atomic_load_n(&seg->ports[port].port->owner,
						__ATOMIC_ACQUIRE))
			return 0;
		nr = xseg_port_held_elsewhere(seg, port, holder);
		if (!nr || xseg_now_ns() >= deadline)
			return nr;
		held_pause(&pause_us);
	}
}

/* Log that nr requests of port are still held (e.g. by holder), what
 * waits first and why after,
 * at most once per XSEG_DRAIN_LOG_NS per handle however often a caller
 * retries. */
static void log_held_elsewhere(struct xseg *seg, uint32_t port, uint32_t nr,
			       uint32_t holder, const char *what,
			       const char *why)
{
	uint64_t now = xseg_now_ns(), o;
	uint64_t last = __atomic_load_n(&seg->drain_log_ns, __ATOMIC_RELAXED);
	char type[XSEG_PEER_TYPE_LEN];

	if ((last && now - last < XSEG_DRAIN_LOG_NS) ||
	    !__atomic_compare_exchange_n(&seg->drain_log_ns, &last, now, false,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	o = __atomic_load_n(&seg->ports[holder].port->owner, __ATOMIC_ACQUIRE);
	memcpy(type, seg->ports[holder].port->peer_type, sizeof(type));
	type[sizeof(type) - 1] = '\0';
	for (size_t i = 0; type[i]; i++) /* another peer's bytes */
		if (type[i] < 0x20 || type[i] > 0x7e)
			type[i] = '?';
	fprintf(stderr,
		"xseg %s: port %u: %s%u request(s) sent by its previous owner "
		"still accepted and unanswered (e.g. by port %u, %s, pid %d); "
		"%s\n",
		seg->name, port, what, nr, holder, type[0] ? type : "?",
		(int)xseg_owner_pid(o), why);
}

/* Port (claimed by us: self|RECLAIM) had an owner whose requests other
 * ports had accepted when it died or left (its drain word): wait until no
 * live port holds one, so that a restarted peer cannot overtake its
 * predecessor's writes. wait: up to XSEG_BIND_WAIT_NS, else a single
 * count. -EAGAIN if requests are still held. */
static int wait_drained(struct xseg *seg, uint32_t port, bool wait)
{
	uint32_t nr, holder;

	nr = wait_held_elsewhere(seg, port, wait ? XSEG_BIND_WAIT_NS : 0, true,
				 &holder);
	if (!nr) {
		__atomic_store_n(&seg->ports[port].port->drain, 0,
				 __ATOMIC_SEQ_CST);
		return 0;
	}
	log_held_elsewhere(seg, port, nr, holder, "bind waits: ",
			   "a new owner must not overtake them");
	return -EAGAIN;
}

/*
 * The successor's fence. A process is the unit of failure, and a peer
 * sends from more ports than its static one: vlmc's table writes and
 * COPYs go out from a dynamic control port, each NBD connection's I/O
 * from a dynamic port of its own. A restarted peer binds its static port
 * again but gets fresh dynamic ports, so the drain of one port (above)
 * fences only what its predecessor sent from that port: a table write or
 * a WRITE it sent from another, accepted by a stalled store, could run
 * after the successor read the table and wrote over it (docs/vlmc.md,
 * "Limits"). So before it claims a static port whose latest owner is
 * another process that no longer owns it, a bind (1) reclaims every
 * other port that process still owns if it is dead, which changes their
 * generations, so their requests still queued anywhere are dropped at
 * accept, and (2) waits, as for a port's own drain, until no live port
 * holds a request sent from a port whose latest owner was that process
 * (last_owner) and which is marked draining (released or reclaimed: it
 * sends nothing more). A live predecessor counts too (review23x F2): a
 * peer that released its ports on its way out is alive until its exit,
 * and its successor may already be starting. Ports the predecessor still
 * owns are not waited for: only a dead owner's are reclaimed, and a live
 * one may go on using them.
 *
 * The fence runs before the claim, holding nothing, so that two binders
 * fencing the same predecessor (it had two static ports) do not wait for
 * each other's claims (review23x F1); the claim then checks that the
 * predecessor is still the one fenced (claim_port, -ESTALE).
 */

/* The predecessor a bind of port must fence, as its owner word reads now
 * (o): the owner word itself when it is a dead owner's own (no RECLAIM
 * flag; a defence: every build that joins a layout 7 segment writes
 * last_owner at its bind, but an older one did not), else the port's
 * last_owner; 0 when there is none (unknown, this process) or when the
 * port's owner is alive (the claim will refuse it). */
static uint64_t port_predecessor(const struct xseg *seg,
				 const struct xseg_port *p, uint64_t o)
{
	uint64_t prev;

	if (o && !(o & XSEG_OWNER_RECLAIM) && o != seg->self_owner) {
		if (xseg_owner_alive(o))
			return 0;
		prev = o;
	} else {
		prev = __atomic_load_n(&p->last_owner, __ATOMIC_RELAXED);
	}
	return prev == seg->self_owner ? 0 : prev;
}

/* Requests sent from ports other than port whose latest owner was prev
 * and which are marked draining, still held by a live port (one such
 * port in *from, a holder in *holder): one pass over the pool for all of
 * them (a vlmc had a port per NBD connection). */
static uint32_t predecessor_held(struct xseg *seg, uint32_t port, uint64_t prev,
				 uint32_t *from, uint32_t *holder)
{
	uint8_t *senders = calloc(seg->nr_ports, 1);
	bool any = false;
	uint32_t nr;

	if (!senders)
		return 1; /* cannot tell: the safe side (no port named) */
	for (uint32_t i = 0; i < seg->nr_ports; i++) {
		struct xseg_port *q = seg->ports[i].port;

		if (i == port ||
		    __atomic_load_n(&q->last_owner, __ATOMIC_RELAXED) != prev ||
		    !__atomic_load_n(&q->drain, __ATOMIC_SEQ_CST))
			continue;
		senders[i] = 1;
		any = true;
	}
	nr = any ? xseg_ports_held_elsewhere(seg, senders, from, holder) : 0;
	free(senders);
	return nr;
}

/* Fence prev, port's latest owner, as described above, waiting up to
 * XSEG_BIND_WAIT_NS for the held requests (and up to
 * XSEG_RECLAIM_WAIT_NS for each port another live process is
 * reclaiming, so that its drain mark is stored before it is read).
 * -EAGAIN while requests are held or such a reclaim goes on; -EBUSY if
 * the one that goes on is port's own (as claim_port). */
static int fence_predecessor(struct xseg *seg, uint32_t port, uint64_t prev)
{
	uint64_t deadline = xseg_now_ns() + XSEG_BIND_WAIT_NS;
	uint32_t nr, from = XSEG_NOPORT, holder = XSEG_NOPORT;
	uint32_t pause_us = 100;
	char why[96];

	for (uint32_t i = 0; i < seg->nr_ports; i++) {
		struct xseg_port *q = seg->ports[i].port;
		uint64_t o = __atomic_load_n(&q->owner, __ATOMIC_ACQUIRE);
		struct xseg_reap_stats st = {0};

		if ((o & ~XSEG_OWNER_RECLAIM) != prev &&
		    __atomic_load_n(&q->last_owner, __ATOMIC_RELAXED) != prev)
			continue;
		/* Reclaims it if its owner is dead (prev, or a reclaimer
		 * that died); waits for a live reclaimer to finish; leaves
		 * a live owner alone. port itself too: a refused bind then
		 * leaves it free, as a refused drain wait does. */
		if (xseg_reclaim_if_dead(seg, i, &st) == -EBUSY)
			/* port itself: what its claim answers for a live
			 * binder or reclaimer that does not finish (the
			 * caller gives up, as before the fence); another of
			 * prev's ports: its drain mark is not known yet */
			return i == port ? -EBUSY : -EAGAIN;
	}
	for (;;) {
		nr = predecessor_held(seg, port, prev, &from, &holder);
		if (!nr)
			return 0;
		if (xseg_now_ns() >= deadline)
			break;
		held_pause(&pause_us);
	}
	snprintf(why, sizeof(why),
		 "port %u, which that owner had too, is not bound again "
		 "before they are answered",
		 port);
	if (holder < seg->nr_ports) /* none named without memory */
		log_held_elsewhere(seg, from, nr, holder, "", why);
	return -EAGAIN;
}

/* Take port for this process. wait: if another live process is reclaiming
 * it, wait up to a second for it to finish. fenced: for a static port,
 * the predecessor the caller fenced (0: none); -ESTALE (port left as it
 * was, or free) if the port's predecessor is another one by the time it is
 * claimed (it was bound and left meanwhile): fence again. */
static int claim_port(struct xseg *seg, uint32_t port, const char *peer_type,
		      bool wait, uint64_t fenced)
{
	struct xseg_port *p = seg->ports[port].port;
	struct xseg_reap_stats st = {0};
	uint64_t self = seg->self_owner, claim = self | XSEG_OWNER_RECLAIM;
	uint64_t deadline = xseg_now_ns() + XSEG_BIND_WAIT_NS, o, prev;
	uint32_t gen;
	bool scan;

	for (;;) {
		o = __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE);
		if (o == self)
			return -EALREADY;
		if (o == claim)
			return -EBUSY; /* another thread of ours reclaims it */
		if (o == 0) {
			scan = false;
		} else if (xseg_owner_alive(o)) {
			if ((o & XSEG_OWNER_RECLAIM) && wait &&
			    xseg_now_ns() < deadline) {
				usleep(1000);
				continue;
			}
			return -EBUSY;
		} else {
			scan = true; /* its owner died: it may hold requests */
		}
		prev = port < seg->nr_static ? port_predecessor(seg, p, o) : 0;
		if (prev && prev != fenced)
			return -ESTALE;
		/* tests stop a bind here, between its check and its CAS */
		if (fenced)
			XSEG_TEST_POINT(XSEG_TP_BIND_FENCED, NULL);
		if (__atomic_compare_exchange_n(&p->owner, &o, claim, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			break;
	}
	/* The check above and the CAS are two steps: a free port (o == 0)
	 * may have been bound, used and released (or reaped) between them,
	 * owner 0 again, and the CAS from 0 then succeeds. Claimed now,
	 * last_owner is stable (only a claimer writes it) and the acq_rel CAS
	 * saw the leaver's last_owner: check again. A dead owner o cannot
	 * come back, so only o == 0 needs it. */
	if (!o && port < seg->nr_static) {
		prev = port_predecessor(seg, p, 0);
		if (prev && prev != fenced) {
			__atomic_store_n(&p->owner, 0, __ATOMIC_RELEASE);
			return -ESTALE;
		}
	}
	xseg_port_cleanup(seg, port, o,
			  scan ? XSEG_CLEAN_DEAD : XSEG_CLEAN_QUEUES, &st);
	if (__atomic_load_n(&p->drain, __ATOMIC_SEQ_CST)) {
		int rc = wait_drained(seg, port, wait);

		if (rc < 0) {
			/* Free again, still draining: a reaper or the next
			 * bind attempt takes it from here. */
			__atomic_store_n(&p->owner, 0, __ATOMIC_RELEASE);
			return rc;
		}
	}
	gen = __atomic_load_n(&p->gen, __ATOMIC_RELAXED);
	memset(p->peer_type, 0, sizeof(p->peer_type));
	strncpy(p->peer_type, peer_type, sizeof(p->peer_type) - 1);
	/* Ids: 24 bits of the generation above a 40-bit sequence. */
	__atomic_store_n(&p->id_next, ((uint64_t)(gen & 0xffffff) << 40) | 1,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&p->last_owner, self, __ATOMIC_RELAXED);
	__atomic_store_n(&p->owner, self, __ATOMIC_RELEASE);
	return 0;
}

int xseg_bind_port(struct xseg *seg, uint32_t port, const char *peer_type)
{
	int rc;

	if (!peer_type || port >= seg->nr_static)
		return -EINVAL;
	rc = xseg_self_identity(seg);
	if (rc < 0)
		return rc;
	for (;;) {
		struct xseg_port *p = seg->ports[port].port;
		uint64_t prev = port_predecessor(
		    seg, p, __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE));

		if (prev) {
			rc = fence_predecessor(seg, port, prev);
			if (rc < 0)
				return rc;
		}
		/* Nothing is held here: another process may bind the port
		 * and leave it before the claim, which then answers -ESTALE */
		rc = claim_port(seg, port, peer_type, true, prev);
		if (rc != -ESTALE)
			return rc;
	}
}

int xseg_alloc_port(struct xseg *seg, const char *peer_type, uint32_t *port)
{
	bool draining = false;
	int rc;

	if (!peer_type || !port)
		return -EINVAL;
	rc = xseg_self_identity(seg);
	if (rc < 0)
		return rc;
	for (uint32_t i = seg->nr_static; i < seg->nr_ports; i++) {
		uint64_t o = __atomic_load_n(&seg->ports[i].port->owner,
					     __ATOMIC_RELAXED);

		/* Skip ports owned by us without asking /proc. */
		if ((o & ~XSEG_OWNER_RECLAIM) == seg->self_owner)
			continue;
		rc = claim_port(seg, i, peer_type, false, 0);
		if (rc == 0) {
			*port = i;
			return 0;
		}
		if (rc == -EAGAIN)
			draining = true;
	}
	return draining ? -EAGAIN : -ENOSPC;
}

int xseg_release_port(struct xseg *seg, uint32_t port)
{
	struct xseg_reap_stats st = {0};
	uint64_t self, o;
	struct xseg_port *p;

	if (port >= seg->nr_ports)
		return -EINVAL;
	p = seg->ports[port].port;
	self = seg->self_owner;
	o = self;
	if (self == 0 || !__atomic_compare_exchange_n(
			     &p->owner, &o, self | XSEG_OWNER_RECLAIM, false,
			     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return -EPERM;
	xseg_port_cleanup(seg, port, self, XSEG_CLEAN_SELF, &st);
	__atomic_store_n(&p->owner, 0, __ATOMIC_RELEASE);
	return 0;
}

int xseg_port_alive(struct xseg *seg, uint32_t port)
{
	uint64_t o;

	if (port >= seg->nr_ports)
		return -EINVAL;
	o = __atomic_load_n(&seg->ports[port].port->owner, __ATOMIC_ACQUIRE);
	return xseg_owner_serving(o) ? xseg_owner_alive(o) : 0;
}

/* What a decision about a port (a redirect's old or new target) read:
 * its owner word, generation and cache mark. Read again just before the
 * redirect's CAS and found equal, none of them changed in between: the
 * owner word is the owner's identity (pid and start time), the generation
 * changes at every bind, release and reclaim, and the mark is written
 * only by the owner, so a bind, a mark, a release or a reclaim after the
 * decision shows (review20 F1-F). */
struct port_snap {
	uint64_t owner;
	uint32_t gen;
	uint32_t cache_gen;
	bool taken; /* a snapshot was taken (the port was examined) */
};

static void port_snap_take(const struct xseg *seg, uint32_t port,
			   struct port_snap *s)
{
	const struct xseg_port *p = seg->ports[port].port;

	s->owner = __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE);
	s->gen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
	s->cache_gen = __atomic_load_n(&p->cache_gen, __ATOMIC_ACQUIRE);
	s->taken = true;
}

static bool port_snap_moved(const struct xseg *seg, uint32_t port,
			    const struct port_snap *s)
{
	struct port_snap now;

	if (!s || !s->taken)
		return false;
	port_snap_take(seg, port, &now);
	return now.owner != s->owner || now.gen != s->gen ||
	       now.cache_gen != s->cache_gen;
}

/* Whether the port p is a cache now: its mark is the current generation
 * (xseg_port_mark_cache). Read after the owner word (acquire), so a new
 * owner is never seen with its predecessor's mark. *serves: the port
 * whose path it caches, or XSEG_NOPORT if it did not publish one (a
 * cache of an older build). */
static bool port_is_cache(const struct xseg_port *p, uint32_t *serves)
{
	uint32_t gen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
	uint64_t cn;

	if (__atomic_load_n(&p->cache_gen, __ATOMIC_ACQUIRE) != gen)
		return false;
	/* written before cache_gen (release): a mark seen, its word too */
	cn = __atomic_load_n(&p->cache_next, __ATOMIC_RELAXED);
	*serves = (uint32_t)(cn >> 32) == gen ? (uint32_t)cn : XSEG_NOPORT;
	return true;
}

/* Whether port is a cache (xseg_port_mark_cache: its mark is the
 * current generation, so any bind, release or reclaim, by any build,
 * ends it) owned by another live process: -EPERM; -EBUSY while its owner
 * word is being changed (bound, released, reclaimed: retry); 0 if not a
 * cache, ours, free or dead. */
static int cache_owned_elsewhere(const struct xseg *seg, uint32_t port)
{
	const struct xseg_port *p = seg->ports[port].port;
	uint64_t o = __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE);
	uint32_t serves;

	if (!o || (o & ~XSEG_OWNER_RECLAIM) == seg->self_owner)
		return 0;
	if (!port_is_cache(p, &serves))
		return 0;
	if (o & XSEG_OWNER_RECLAIM)
		return -EBUSY;
	return xseg_owner_alive(o) ? -EPERM : 0;
}

/* A cache serves one path: cached fetches from and writes back to its
 * own next port whatever a request's destination, and keys its buckets
 * by name only. Put in another port's path, that port's writes would
 * land in its next port's store, and objects of the same name on the two
 * would share buckets: wrong data (review20 F1-J). -EXDEV if next is a
 * cache whose owner is alive (this process or another) and not known to
 * serve port's path: it serves another port, or it did not say which (a
 * cache of an older build: it cannot be checked, so it is refused too;
 * such a cache can still plug itself, cached --plug). 0 otherwise: not a
 * cache, free, dead or being bound, released or reclaimed (as before). */
static int cache_serves_elsewhere(const struct xseg *seg, uint32_t port,
				  uint32_t next)
{
	const struct xseg_port *p = seg->ports[next].port;
	uint64_t o = __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE);
	uint32_t serves;

	if (!o || (o & XSEG_OWNER_RECLAIM) || !port_is_cache(p, &serves) ||
	    serves == port)
		return 0;
	if (o != seg->self_owner && !xseg_owner_alive(o))
		return 0;
	return -EXDEV;
}

int xseg_port_mark_cache(struct xseg *seg, uint32_t port, uint32_t next)
{
	struct xseg_port *p;
	uint32_t gen;
	int rc;

	if (port >= seg->nr_ports || next >= seg->nr_ports || next == port)
		return -EINVAL;
	p = seg->ports[port].port;
	/* This process's identity, not the one the handle was made with: a
	 * child forked after its parent bound the port is not its owner.
	 * And an identity of 0 is a free port's owner word too (review20
	 * F1-H). */
	rc = xseg_self_identity(seg);
	if (rc < 0)
		return rc;
	if (!seg->self_owner ||
	    __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE) != seg->self_owner)
		return -EPERM;
	gen = __atomic_load_n(&p->gen, __ATOMIC_RELAXED);
	/* the port it serves first: a reader that sees the mark sees it */
	__atomic_store_n(&p->cache_next, ((uint64_t)gen << 32) | next,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&p->cache_gen, gen, __ATOMIC_RELEASE);
	return 0;
}

/* A redirect target about to leave the path (old != keep) may be a
 * write-back cache that died holding acknowledged data: once it is out of
 * the path a FLUSH reaches another port and would succeed, so the loss
 * must be counted (by reclaiming the dead port) first. A target that dies
 * after this check is counted by whoever reaps it; requests sent to it
 * meanwhile fail with ECONNRESET. */
static int reclaim_leaving_target(struct xseg *seg, uint32_t port,
				  uint32_t keep, uint32_t *oldp,
				  struct port_snap *snap)
{
	struct xseg_reap_stats st = {0};
	uint32_t old = __atomic_load_n(&seg->ports[port].port->path_next,
				       __ATOMIC_ACQUIRE);
	int rc;

	*oldp = old;

	if (old >= seg->nr_ports || old == port || old == keep)
		return 0;
	rc = xseg_reclaim_if_dead(seg, old, &st);
	if (rc < 0)
		return rc;
	/* what follows decides on this state of the target (free, dead and
	 * reclaimed by us, or live, a cache or not) */
	port_snap_take(seg, old, snap);
	/* A dead target's requests that the next port accepted can still
	 * run there; its clients were failed back (ECONNRESET) and may
	 * already have sent newer requests, which once the redirect is gone
	 * reach the next port directly and could run first: a dead cached's
	 * DELETE or flush WRITE landing over data written and flushed after
	 * it (review14 F1). The redirect stays until they are answered; the
	 * caller retries (requests meanwhile fail as they would have). */
	if (!__atomic_load_n(&seg->ports[old].port->owner, __ATOMIC_ACQUIRE)) {
		uint32_t holder,
		    nr = wait_held_elsewhere(seg, old, XSEG_BIND_WAIT_NS, false,
					     &holder);

		if (nr) {
			log_held_elsewhere(
			    seg, old, nr, holder, "",
			    "the redirect to it stays until they are answered, "
			    "so that no later request overtakes them");
			return -EAGAIN;
		}
		/* bound meanwhile (a cached restarted, once its drain was
		 * done): the caller decides again about a live target */
		if (__atomic_load_n(&seg->ports[old].port->owner,
				    __ATOMIC_ACQUIRE))
			return -EAGAIN;
	}
	if (rc)
		return 0; /* it was dead: reclaimed, its loss counted */
	/* A live cache, even a clean one, leaves a path only by its own
	 * hand (cached's unplug: write-through, flushed, nothing in flight,
	 * then it clears the redirect and exits). Taken out by another
	 * process it would not know: writes then reach the next port
	 * directly while it keeps the buckets they make stale, which it
	 * serves once redirected to again, and a write it still holds (a
	 * read-modify-write fetch in flight) lands later over a newer one
	 * (safety20 F1). Checked before the unflushed data below, so a
	 * cache, dirty or clean, always gets this answer (review20 F1-I):
	 * a retry once it flushed would only meet it then. */
	rc = cache_owned_elsewhere(seg, old);
	if (rc)
		return rc;
	/* A live target still holding acknowledged, unflushed data: once
	 * out of the path, a FLUSH would reach the next port and succeed
	 * without that data, reads would return older data, and nothing
	 * would count a loss (review10 F2). Its owner clears its own
	 * redirect only once clean (cached's unplug); an operator must
	 * stop it (it flushes) or kill it (counted) first. */
	if (__atomic_load_n(&seg->ports[old].port->owner, __ATOMIC_ACQUIRE) &&
	    __atomic_load_n(&seg->ports[old].port->unflushed, __ATOMIC_SEQ_CST))
		return -EBUSY;
	return 0;
}

/* Move port's redirect from old (what reclaim_leaving_target examined)
 * to next; -EAGAIN if another process changed it meanwhile (that wait may
 * take a second), or if a target examined (the old one, the new one:
 * snaps) was bound, released, reclaimed or marked a cache since: the
 * caller decides again on what it is now.
 *
 * The redirect and the target are separate words, so the re-read and the
 * CAS are two steps, not one (review20 F1-F): what is left is a target
 * changed between them, which for the case that matters, a cache bound on
 * the target, marked and plugged by its own CAS before ours, means a
 * process's bind, cache set-up, mark and plug all done while this one is
 * preempted between two adjacent atomic instructions. The cache is then
 * new and empty (its plug still settling, at least 50 ms), and once
 * settled cached checks that the redirect still names it (cached_plug). */
static int set_path_next_from(struct xseg *seg, uint32_t port, uint32_t old,
			      uint32_t next, const struct port_snap *old_snap,
			      const struct port_snap *next_snap)
{
	XSEG_TEST_POINT(XSEG_TP_PATH_DECIDED, NULL);
	if (port_snap_moved(seg, old, old_snap) ||
	    port_snap_moved(seg, next, next_snap))
		return -EAGAIN;
	if (!__atomic_compare_exchange_n(&seg->ports[port].port->path_next,
					 &old, next, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return -EAGAIN;
	return 0;
}

int xseg_set_path_next(struct xseg *seg, uint32_t port, uint32_t next)
{
	struct port_snap old_snap = {0}, next_snap = {0};
	uint32_t old;
	int rc;

	if (port >= seg->nr_ports || next >= seg->nr_ports || next == port)
		return -EINVAL;
	port_snap_take(seg, next, &next_snap);
	rc = cache_serves_elsewhere(seg, port, next);
	if (rc < 0)
		return rc;
	/* Replacing a redirect takes the old target out of the path just
	 * as clearing it does (review9 R9-5(c)). */
	rc = reclaim_leaving_target(seg, port, next, &old, &old_snap);
	if (rc < 0)
		return rc;
	return set_path_next_from(seg, port, old, next, &old_snap, &next_snap);
}

int xseg_clear_path_next(struct xseg *seg, uint32_t port)
{
	struct port_snap old_snap = {0};
	uint32_t old;
	int rc;

	if (port >= seg->nr_ports)
		return -EINVAL;
	rc = reclaim_leaving_target(seg, port, XSEG_NOPORT, &old, &old_snap);
	if (rc < 0)
		return rc;
	return set_path_next_from(seg, port, old, XSEG_NOPORT, &old_snap, NULL);
}

uint32_t xseg_get_path_next(const struct xseg *seg, uint32_t port)
{
	if (port >= seg->nr_ports)
		return XSEG_NOPORT;
	return __atomic_load_n(&seg->ports[port].port->path_next,
			       __ATOMIC_ACQUIRE);
}

static uint64_t rd(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

int xseg_port_info(struct xseg *seg, uint32_t port, struct xseg_port_info *info)
{
	struct xseg_port_local *pl;
	struct xseg_port *p;
	uint64_t o, lo;

	if (!info || port >= seg->nr_ports)
		return -EINVAL;
	pl = &seg->ports[port];
	p = pl->port;
	memset(info, 0, sizeof(*info));
	o = __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE);
	info->port = port;
	info->dynamic = port >= seg->nr_static;
	info->bound = o != 0;
	info->alive = o != 0 && xseg_owner_alive(o) == 1;
	info->exiting = info->alive && xseg_owner_exiting(o);
	info->reclaiming = (o & XSEG_OWNER_RECLAIM) != 0;
	info->owner_pid = xseg_owner_pid(o);
	info->owner_start = xseg_owner_start(o);
	info->generation = __atomic_load_n(&p->gen, __ATOMIC_RELAXED);
	info->path_next = __atomic_load_n(&p->path_next, __ATOMIC_RELAXED);
	info->cache_next = XSEG_NOPORT;
	info->cache = o != 0 && port_is_cache(p, &info->cache_next);
	if (o)
		memcpy(info->peer_type, p->peer_type, sizeof(p->peer_type));
	info->peer_type[XSEG_PEER_TYPE_LEN - 1] = '\0';
	info->sent = rd(&p->sent);
	info->received = rd(&p->received);
	info->accepted = rd(&p->accepted);
	info->served = rd(&p->served);
	info->failed = rd(&p->failed);
	info->rejected = rd(&p->rejected);
	info->forwarded = rd(&p->forwarded);
	info->reaped = rd(&p->reaped);
	info->unflushed = __atomic_load_n(&p->unflushed, __ATOMIC_SEQ_CST);
	info->draining = __atomic_load_n(&p->drain, __ATOMIC_RELAXED) != 0;
	lo = __atomic_load_n(&p->last_owner, __ATOMIC_RELAXED);
	info->last_owner_pid = xseg_owner_pid(lo);
	info->last_owner_start = xseg_owner_start(lo);
	/* the owner itself (the usual case for a bound port): its answer,
	 * without a second look at /proc */
	if (lo && o && lo == (o & ~XSEG_OWNER_RECLAIM))
		info->last_owner_alive = info->alive;
	else
		info->last_owner_alive = lo && xseg_owner_alive(lo) == 1;
	{
		uint64_t sw = __atomic_load_n(&p->sleepers, __ATOMIC_RELAXED);

		info->signals = sw >> 32;
		info->sleepers = (uint32_t)sw;
	}
	info->wakes = rd(&p->wakes);
	info->request_depth = xq_count(pl->reqq);
	info->reply_depth = xq_count(pl->replyq);
	info->free_depth = pl->freeq ? xq_count(pl->freeq) : 0;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Per-port statistics area                                            */
/* ------------------------------------------------------------------ */

_Static_assert(sizeof(struct xseg_stats_copy) % 8 == 0, "word copies");

static bool stat_name_ok(const char *name)
{
	size_t i;

	for (i = 0; i < XSEG_STAT_NAME_LEN && name[i]; i++) {
		char ch = name[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
		      ch == '-'))
			return false;
	}
	return i > 0 && i < XSEG_STAT_NAME_LEN;
}

int xseg_port_stats_publish(struct xseg *seg, uint32_t port,
			    const struct xseg_stat *stats, uint32_t nr)
{
	struct xseg_stats_copy tmp;
	struct xseg_stats_area *a;
	struct xseg_port *p;
	uint64_t count, *dst;
	const uint64_t *src;

	if (!seg || port >= seg->nr_ports || (!stats && nr) ||
	    nr > XSEG_STATS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < nr; i++)
		if (!stat_name_ok(stats[i].name))
			return -EINVAL;
	if (!xseg_owned_by_self(seg, port))
		return -EPERM;
	p = seg->ports[port].port;
	a = &p->stats;
	memset(&tmp, 0, sizeof(tmp));
	tmp.nr = nr;
	tmp.pid = (int32_t)seg->self_pid;
	tmp.generation = __atomic_load_n(&p->gen, __ATOMIC_RELAXED);
	tmp.published_ns = xseg_now_ns();
	for (uint32_t i = 0; i < nr; i++) {
		memcpy(tmp.stats[i].name, stats[i].name, XSEG_STAT_NAME_LEN);
		tmp.stats[i].value = stats[i].value;
	}
	/* Only the owner writes count. The copy we overwrite was named by
	 * count - 1, which a reader may still be copying: our stores are
	 * releases (a reader whose acquire load sees one also sees the
	 * count move past its own, and retries), and the previous
	 * publication's acq_rel increment keeps them after it. No fences:
	 * ThreadSanitizer does not model them. */
	count = __atomic_load_n(&a->count, __ATOMIC_ACQUIRE);
	dst = (uint64_t *)&a->copy[(count + 1) & 1];
	src = (const uint64_t *)&tmp;
	for (size_t i = 0; i < sizeof(tmp) / 8; i++)
		__atomic_store_n(&dst[i], src[i], __ATOMIC_RELEASE);
	__atomic_fetch_add(&a->count, 1, __ATOMIC_ACQ_REL);
	return 0;
}

int xseg_port_stats_read(struct xseg *seg, uint32_t port,
			 struct xseg_port_stats *out)
{
	struct xseg_stats_copy tmp;
	struct xseg_stats_area *a;

	if (!seg || !out || port >= seg->nr_ports)
		return -EINVAL;
	a = &seg->ports[port].port->stats;
	for (int tries = 0; tries < 1000; tries++) {
		uint64_t count = __atomic_load_n(&a->count, __ATOMIC_ACQUIRE);
		const uint64_t *src;
		uint64_t *dst = (uint64_t *)&tmp;

		if (!count)
			return -ENOENT;
		src = (const uint64_t *)&a->copy[count & 1];
		/* acquire loads: the count check below cannot move before
		 * them (seqlock reader without a fence) */
		for (size_t i = 0; i < sizeof(tmp) / 8; i++)
			dst[i] = __atomic_load_n(&src[i], __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&a->count, __ATOMIC_ACQUIRE) != count)
			continue;
		/* the publisher's rules again: a peer's bug or a hostile
		 * process must not make xsegctl print escapes or bad JSON */
		if (tmp.nr > XSEG_STATS_MAX)
			return -EIO;
		for (uint32_t i = 0; i < tmp.nr; i++)
			if (!stat_name_ok(tmp.stats[i].name))
				return -EIO;
		memset(out, 0, sizeof(*out));
		out->nr = tmp.nr;
		out->pid = tmp.pid;
		out->generation = tmp.generation;
		out->published_ns = tmp.published_ns;
		out->count = count;
		for (uint32_t i = 0; i < tmp.nr; i++) {
			out->stats[i] = tmp.stats[i];
			out->stats[i].name[XSEG_STAT_NAME_LEN - 1] = '\0';
		}
		return 0;
	}
	return -EAGAIN;
}
