/* SPDX-License-Identifier: MIT */
#ifndef XSEG_INTERNAL_H
#define XSEG_INTERNAL_H
/*
 * libxseg internals: the segment layout in shared memory and the
 * process-local handle. Exposed to the library's own sources and to its
 * tests (which corrupt headers on purpose); not for other modules.
 * docs/protocol.md describes the layout.
 */
#include "xseg.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "xheap.h"
#include "xobj.h"
#include "xq.h"

#define XSEG_HEADER_SIZE 4096u
#define XSEG_ALIGN	 64u
#define XSEG_NAME_MAX	 251 /* "/" + 250 characters + NUL */

/*
 * Owner word of a port (one 64-bit word, changed only by CAS):
 *   0                                   free
 *   start32 << 32 | pid                 owned by a live or dead process
 *   start32 << 32 | RECLAIM | pid       being cleaned up by that process
 * pid is at most 2^22 on Linux, so bit 31 is free for the flag. start32 is
 * the low 32 bits of the process start time (clock ticks since boot, field
 * 22 of /proc/PID/stat): a recycled pid has another start time.
 */
#define XSEG_OWNER_RECLAIM (1ULL << 31)
#define XSEG_OWNER_PIDMASK 0x7fffffffULL

static inline pid_t xseg_owner_pid(uint64_t owner)
{
	return (pid_t)(owner & XSEG_OWNER_PIDMASK);
}

static inline uint32_t xseg_owner_start(uint64_t owner)
{
	return (uint32_t)(owner >> 32);
}

/* Bound and not being cleaned up: requests sent now reach its owner (or,
 * if the owner has died unnoticed, come back with ECONNRESET at the next
 * reap). While a port is being bound or reclaimed its queues are drained,
 * so nothing may be sent to it. */
static inline bool xseg_owner_serving(uint64_t owner)
{
	return owner != 0 && !(owner & XSEG_OWNER_RECLAIM);
}

/* Immutable part first (covered by the checksum), then mutable words. */
struct xseg_shared_header {
	uint64_t magic; /* written last at creation (release) */
	uint32_t version;
	uint32_t header_size;
	uint32_t sizeof_request; /* sizes of this build's shared structs */
	uint32_t sizeof_port;
	uint32_t sizeof_header;
	uint32_t max_targetlen;

	uint64_t size;
	uint32_t nr_static_ports;
	uint32_t nr_dynamic_ports;
	uint32_t nr_requests;
	uint32_t free_cache;
	uint64_t default_data_size;
	uint32_t queue_capacity;
	uint32_t reserved0;

	uint64_t nonce;
	uint64_t ports_off;	   /* port table */
	uint64_t queues_off;	   /* per port: request q, reply q, free q */
	uint64_t queue_bytes;	   /* bytes of one request/reply queue */
	uint64_t free_queue_bytes; /* bytes of one free queue (0: none) */
	uint64_t pool_off;	   /* xobj pool of requests */
	uint64_t pool_bytes;
	uint64_t heap_off; /* xheap of data buffers */
	uint64_t heap_bytes;

	uint64_t checksum; /* FNV-1a 64 of the bytes from version to here */

	/* Mutable: source of port generations (and request id epochs). */
	_Alignas(64) uint32_t epoch;
	uint32_t reserved1;
	/* Reclaims of dead ports that held acknowledged, unflushed data
	 * (xseg_port_unflushed_add): see xseg_writeback_losses. */
	uint64_t writeback_losses;
};

/* One published statistics table (see xseg_port_stats_*): a multiple
 * of 8 bytes, copied word by word with relaxed atomics. */
struct xseg_stats_copy {
	uint32_t nr;
	int32_t pid;
	uint32_t generation;
	uint32_t reserved;
	uint64_t published_ns;
	struct xseg_stat stats[XSEG_STATS_MAX];
};

struct xseg_stats_area {
	_Alignas(64) uint64_t count; /* publications; copy[count & 1] */
	_Alignas(64) struct xseg_stats_copy copy[2];
};

struct xseg_port {
	/* line 0: read by every submit/accept/respond, written rarely */
	_Alignas(64) uint64_t owner; /* see XSEG_OWNER_* */
	uint32_t gen;		     /* new at every bind and reclaim */
	uint32_t path_next;	     /* redirect target or XSEG_NOPORT */
	uint64_t reqq_off;	     /* segment offsets of the queues */
	uint64_t replyq_off;
	uint64_t freeq_off; /* 0 when free_cache == 0 */
	uint32_t number;
	uint32_t dynamic;
	/* Nonzero: a reclaim or release of the port found requests its
	 * owner had sent still accepted (or being answered) by other ports;
	 * the next bind must wait until no live port holds one (review9
	 * R9-7 part 2, xseg_port_drained). Set by the claim holder before it
	 * frees the owner word, cleared only by a claim holder whose count
	 * found none. Rarely written: at reclaims and binds only. */
	uint32_t drain;
	/* The port is a cache while this equals gen: set by its owner
	 * (xseg_port_mark_cache), so every bind, release and reclaim, by
	 * any build, ends it (a new generation). 0 in a segment made
	 * before it existed, and gen is never 0. */
	uint32_t cache_gen;
	/* The port whose path the cache serves (cached's --next-port),
	 * published with the mark: ((uint64_t)gen << 32) | port, written
	 * before cache_gen. Valid only while its high half is the current
	 * gen: 0 (a segment made before it existed) and a previous owner's
	 * word read "unknown", as does a cache of a build that marked
	 * without publishing it (review20 F1-J). */
	uint64_t cache_next;

	/* line 1: identity, written at bind */
	_Alignas(64) char peer_type[XSEG_PEER_TYPE_LEN];
	/* The owner word (pid and start time, no flag) of the port's latest
	 * owner: written at every bind, before the owner word, and kept
	 * after a release or a death, so that the successor of a dead
	 * process on one of its static ports can find every other port that
	 * process had and wait for their requests too (xseg_bind_port,
	 * "The successor's fence"). 0: unknown (a segment made before it
	 * existed zeroed this padding; an older build does not write it). */
	uint64_t last_owner;

	/* line 2: the futex word, bumped only when a sleeper is registered,
	 * so spinning waiters' reads of it are not disturbed per signal */
	_Alignas(64) uint32_t futex_seq;

	/* line 3: every signal does one RMW on sleepers: the low 32 bits
	 * count registered sleepers (waiters add and remove 1), the high 32
	 * bits count the signals sent to the port (each signal adds 2^32),
	 * so counting costs no extra atomic. wakes counts the FUTEX_WAKE
	 * calls made for the port (only on that slow path). */
	_Alignas(64) uint64_t sleepers;
	uint64_t wakes;

	/* line 4: server-side counters, written by the owner only */
	_Alignas(64) uint64_t accepted;
	uint64_t served;
	uint64_t failed;
	uint64_t rejected;
	uint64_t forwarded;
	uint64_t reaped;

	/* line 5: client-side counters and the id sequence, owner only */
	_Alignas(64) uint64_t sent;
	uint64_t received;
	uint64_t id_next;

	/* line 6: acknowledged data the owner holds and has not yet passed
	 * on (xseg_port_unflushed_add); read by the reaper of a dead owner */
	_Alignas(64) uint64_t unflushed;

	/* lines 7..: statistics published by the owner; kept across
	 * owners (zeroed only at segment creation) */
	struct xseg_stats_area stats;
};

/* The drain, cache_gen and cache_next words took padding of line 0 (the
 * last 12 bytes of it): the layout did not change. */
_Static_assert(offsetof(struct xseg_port, peer_type) == 64,
	       "struct xseg_port line 0 is one cache line");
_Static_assert(offsetof(struct xseg_port, last_owner) + sizeof(uint64_t) <=
		       offsetof(struct xseg_port, futex_seq) &&
		   offsetof(struct xseg_port, futex_seq) == 128,
	       "last_owner took padding of line 1: the layout did not change");
_Static_assert(
    offsetof(struct xseg_port, cache_next) == 56,
    "cache_next: aligned, in padding a segment made before it zeroed");

/* Process-local view of one port: pointers into this mapping. */
struct xseg_port_local {
	struct xseg_port *port;
	struct xq *reqq;
	struct xq *replyq;
	struct xq *freeq; /* NULL when free_cache == 0 */
};

struct xseg {
	char *base;
	uint64_t size;
	struct xseg_shared_header *hdr;
	struct xseg_port_local *ports;
	uint32_t nr_ports;
	uint32_t nr_static;
	uint32_t nr_requests;
	uint64_t default_data_size;
	struct xobj_pool *pool;
	struct xheap *heap;
	uint64_t heap_off; /* segment offset of the heap block */
	uint64_t heap_bytes;
	uint64_t self_owner; /* owner word of this process (0: unknown) */
	pid_t self_pid;
	uint64_t spin_ns;
	/* CLOCK_MONOTONIC ns of the next reap done by a wait of this handle
	 * (atomic; CASed forward by the thread that reaps): kept per handle,
	 * not per call, so loops of short waits still reap on time. */
	uint64_t next_reap_ns;
	bool timestamps;
	/* CLOCK_MONOTONIC ns of the last "bind waits for the previous
	 * owner's requests" line this handle logged (atomic, relaxed): at
	 * most one every XSEG_DRAIN_LOG_NS however often a peer retries. */
	uint64_t drain_log_ns;
	char name[XSEG_NAME_MAX];
};

/* Layout computed from a configuration: used by create and, to check the
 * recorded offsets, by join. */
struct xseg_layout {
	uint64_t ports_off, queues_off, queue_bytes, free_queue_bytes;
	uint64_t pool_off, pool_bytes, heap_off, heap_bytes;
	uint32_t queue_capacity;
};

/* Interval of the dead-peer check run by xseg_wait/xseg_wait_reply. */
#define XSEG_REAP_PERIOD_NS (100ULL * 1000 * 1000)

/* segment.c */
int xseg_compute_layout(const struct xseg_config *cfg, struct xseg_layout *lay);
uint64_t xseg_header_checksum(const struct xseg_shared_header *hdr);
int xseg_self_identity(struct xseg *seg);
uint32_t xseg_new_generation(struct xseg *seg);

/* reaper.c */
/* 1 alive, 0 dead (owner word, flags ignored). Dead only on proof
 * (ESRCH/ENOENT, zombie, other start time); "could not tell" is alive. */
int xseg_owner_alive(uint64_t owner);
/* Whether the owner is alive only through threads that outlive its leader:
 * the leader exited (a zombie) and other threads are left (stuck in the
 * kernel, stopped by a tracer...). Such an owner keeps its port (alive,
 * as above) until they end; this only says why (review20 N1-B). */
bool xseg_owner_exiting(uint64_t owner);
/* Reclaim a port whose owner word the caller has just set to
 * self|RECLAIM. Leaves the owner word as it is (the caller stores the final
 * one). mode:
 *   XSEG_CLEAN_QUEUES  a free port: drain its queues only;
 *   XSEG_CLEAN_SELF    released by its live owner: also scan the pool for
 *                      requests the port holds;
 *   XSEG_CLEAN_DEAD    its owner is dead: scan too, and also fail back what
 *                      the dead owner left half-accepted or half-answered
 *                      (ANSWERING), and reset its stale sleeper count. */
enum xseg_clean_mode { XSEG_CLEAN_QUEUES, XSEG_CLEAN_SELF, XSEG_CLEAN_DEAD };
/* prev_owner: the owner word before the caller's claim (0: the port was
 * free), named in the write-back loss line. The first step of every mode
 * is xseg_port_count_loss, before the generation changes and before any
 * request is failed back. */
void xseg_port_cleanup(struct xseg *seg, uint32_t port, uint64_t prev_owner,
		       enum xseg_clean_mode mode, struct xseg_reap_stats *st);
/* If port's unflushed count is nonzero: add 1 to the segment's write-back
 * loss counter (seq_cst), then subtract the count read (not a store of 0:
 * a live owner releasing its port may still have a thread adding), then
 * log one line to stderr. Called by whoever holds the port's owner word as
 * self|RECLAIM (the reclaim CAS elects exactly one), so one death counts
 * once. A reclaimer killed between the add and the subtract makes the
 * next reclaimer count the same death again: a second count can only make
 * a flush fail that might have succeeded, never the reverse (subtracting
 * first would lose the loss). released: a live owner's release (named so
 * in the log line). Returns the count found. */
uint64_t xseg_port_count_loss(struct xseg *seg, uint32_t port,
			      uint64_t prev_owner, bool released);
/* Reclaim port, whose owner word the caller read as o and found dead:
 * CAS o -> self|RECLAIM, xseg_port_cleanup(DEAD), mark free. Returns false
 * (nothing done) if the word was no longer o. Needs self identity. */
bool xseg_reclaim_dead(struct xseg *seg, uint32_t port, uint64_t o,
		       struct xseg_reap_stats *st);
/* Make sure port is not owned by a dead process that has not been
 * reclaimed: if its owner is dead, reclaim it here (1); if another live
 * process is reclaiming or binding it, wait up to XSEG_RECLAIM_WAIT_NS
 * for it to finish (its loss count is done by then), else -EBUSY; 0 if
 * free or owned by a live process (alive on "could not tell", as
 * xseg_owner_alive). -EMFILE etc. if this process has no identity. */
#define XSEG_RECLAIM_WAIT_NS (1000ULL * 1000 * 1000)
int xseg_reclaim_if_dead(struct xseg *seg, uint32_t port,
			 struct xseg_reap_stats *st);

/* Count the requests whose sender is port (sent by an earlier owner: the
 * caller holds port's owner word as self|RECLAIM, so it has no owner now)
 * and which a live process still holds at another port: ACCEPTED, or
 * ANSWERING (being answered, forwarded or failed back). Those could still
 * be executed; requests SUBMITTED to another port never will be (accept
 * drops them: the port's generation changed before the scan, see
 * xseg_port_cleanup). A holder whose owner is dead (or which is free)
 * does not count: a dead process executes nothing, and the reap of the
 * holder fails the request back. Holders' liveness is read from /proc
 * once per holder port. If first_holder is not NULL it gets one holder
 * port (XSEG_NOPORT if the count is 0). Reads only; one pass over the
 * pool. */
uint32_t xseg_port_held_elsewhere(struct xseg *seg, uint32_t port,
				  uint32_t *first_holder);
/* The same for the requests sent from any port i with senders[i] nonzero
 * (senders: nr_ports bytes), in one pass over the pool; *first_src gets
 * the sender of the one whose holder is in *first_holder. */
uint32_t xseg_ports_held_elsewhere(struct xseg *seg, const uint8_t *senders,
				   uint32_t *first_src, uint32_t *first_holder);
/* Log interval of xseg_bind_port's refusals for a draining port. */
#define XSEG_DRAIN_LOG_NS (5ULL * 1000 * 1000 * 1000)

/* request.c */
/* Fail req back to its source with error err, or free it if nobody can
 * receive the reply, provided its (state, holder) word still equals
 * expect (CAS). counter_port: whose counters to bump (XSEG_NOPORT: none).
 * Returns XSEG_FB_QUEUED, XSEG_FB_FREED, or XSEG_FB_LOST if the word had
 * changed (somebody else acted on it first: nothing was done). */
enum { XSEG_FB_LOST = -1, XSEG_FB_FREED = 0, XSEG_FB_QUEUED = 1 };
/* actor: the port on whose behalf this runs (the accepting port, the port
 * being released or reclaimed). It holds the request while the error is
 * written (ANSWERING, actor) and is recorded as the reply's mover, so
 * that if this process dies half-way the reap of actor finishes the job.
 * accepted: actor had counted the request as accepted; only then is its
 * failed counter bumped, so that accepted - served - failed - forwarded
 * stays what actor holds (cached's plug waits on it; review10 F1): a
 * request refused or dropped by accept counts as rejected, one failed
 * back from a reclaimed port's queue as reaped. */
int xseg_fail_back(struct xseg *seg, struct xseg_request *req, uint64_t expect,
		   int err, uint32_t actor, bool accepted);
/* Return a request to the global pool regardless of caches, if its word
 * still equals expect; while it does so, the request is (ANSWERING,
 * actor). Returns false (nothing done) if the word had changed. */
bool xseg_free_to_pool(struct xseg *seg, struct xseg_request *req,
		       uint64_t expect, uint32_t actor);
/* Enqueue index idx of req, whose word was w (a hand-over to holder(w)
 * marked by a dead mover), on the holder's reply queue (reply) or request
 * queue again, clear the mark if the word is still w, and signal: the
 * reaper cannot tell whether the mover's enqueue happened; accept's and
 * receive's CAS take the request through one of the two indexes. */
bool xseg_redeliver(struct xseg *seg, struct xseg_request *req, uint32_t idx,
		    uint64_t w, bool reply);

/* req->src read by a process that does not hold the request (a reaper):
 * relaxed atomic, because a get may store it concurrently once the word
 * moved on; the caller re-checks the word before acting on the value. */
static inline uint32_t xseg_req_src(const struct xseg_request *req)
{
	return __atomic_load_n(&req->src, __ATOMIC_RELAXED);
}

#ifdef XSEG_TEST_HOOKS
/* Tests only (a private copy of the library built with XSEG_TEST_HOOKS):
 * called at the instants a kill strands a request, so a test can die or
 * reap exactly there. */
enum xseg_test_point {
	XSEG_TP_SUBMIT_STORED,	  /* submit: word stored, not enqueued */
	XSEG_TP_ACCEPT_DEQUEUED,  /* accept: dequeued, before the CAS */
	XSEG_TP_RESPOND_STORED,	  /* respond: word stored, not enqueued */
	XSEG_TP_RESPOND_ENQUEUED, /* respond: enqueued, not signalled */
	XSEG_TP_FORWARD_STORED,	  /* forward: word stored, not enqueued */
	XSEG_TP_FAILBACK_STORED,  /* fail-back: word stored, not enqueued */
	XSEG_TP_RECEIVE_DEQUEUED, /* receive: dequeued, before the CAS */
	XSEG_TP_REDELIVERED,	  /* reaper: redelivered, mark not cleared */
	XSEG_TP_PATH_DECIDED,	  /* redirect change: targets examined, before
				     their re-read and the CAS (req NULL) */
	XSEG_TP_BIND_FENCED,	  /* xseg_bind_port: predecessor fenced (or
				     none), before the claim (req NULL) */
};
extern void (*xseg_test_hook)(enum xseg_test_point pt,
			      struct xseg_request *req);
/* The adaptive spin's view of the scheduler (signal.c): how a waiting
 * thread reads its count of involuntary context switches (getrusage) and
 * how its spin gives way (sched_yield). NULL: the real call. A test sets
 * them before its waits to replay a preemption or a yield's switches at
 * a chosen instant, which the real scheduler offers no way to do. */
extern bool (*xseg_test_nivcsw)(uint64_t *n);
extern void (*xseg_test_yield)(void);
/* called as a spin begins, before it first looks for work */
extern void (*xseg_test_spin_begin)(void);
#define XSEG_TEST_POINT(pt, req)                                               \
	do {                                                                   \
		if (xseg_test_hook)                                            \
			xseg_test_hook((pt), (req));                           \
	} while (0)
#else
#define XSEG_TEST_POINT(pt, req)                                               \
	do {                                                                   \
	} while (0)
#endif

/*
 * The (state, mover, holder) word of a request. Every transition that can
 * race is a CAS from the exact word the actor read (a request the actor
 * holds exclusively - get, prep, submit - takes a release store), so that
 * the reaper, a late completion and the owner can race on a request and
 * exactly one of them wins: the loser sees the CAS fail and does nothing.
 * A winner that must write payload fields (error, timestamps) before
 * handing the request on first moves it to XSEG_RS_ANSWERING (still held
 * by its port), writes, then stores the final word with release order and
 * enqueues the index. A hand-over's word names the acting port as mover
 * until the receiver's CAS (accept, receive) takes it: see "Stranded
 * hand-overs" in reaper.c for why, and why a queue may then hold a second
 * index of a request that only one of the two takes.
 */
/* The word's parts, in memory order (what the CAS compares). */
union xseg_rs_word {
	struct {
		uint8_t state, hseq;
		uint16_t mover;
		uint32_t holder;
	};
	uint64_t w;
};

static inline uint64_t xseg_rs_make(uint32_t state, uint32_t hseq,
				    uint32_t mover, uint32_t holder)
{
	union xseg_rs_word u = {.state = (uint8_t)state,
				.hseq = (uint8_t)hseq,
				.mover = (uint16_t)mover,
				.holder = holder};

	return u.w;
}

/* A word from scratch: no mover, hand-over count 0 (tests, init). */
static inline uint64_t xseg_rs_pack(uint32_t state, uint32_t holder)
{
	return xseg_rs_make(state, 0, XSEG_NOMOVER, holder);
}

static inline uint32_t xseg_rs_state(uint64_t w)
{
	union xseg_rs_word u = {.w = w};

	return u.state;
}

static inline uint32_t xseg_rs_hseq(uint64_t w)
{
	union xseg_rs_word u = {.w = w};

	return u.hseq;
}

/* The next word after w that is not a hand-over: same count, no mover. */
static inline uint64_t xseg_rs_next(uint64_t w, uint32_t state, uint32_t holder)
{
	return xseg_rs_make(state, xseg_rs_hseq(w), XSEG_NOMOVER, holder);
}

/* The word of a hand-over by mover after w: the count goes up by one, so
 * no later hand-over of the request has the same word for 256 of them. */
static inline uint64_t xseg_rs_handover(uint64_t w, uint32_t state,
					uint32_t mover, uint32_t holder)
{
	return xseg_rs_make(state, xseg_rs_hseq(w) + 1, mover, holder);
}

static inline uint32_t xseg_rs_mover(uint64_t w)
{
	union xseg_rs_word u = {.w = w};

	return u.mover;
}

static inline uint32_t xseg_rs_holder(uint64_t w)
{
	union xseg_rs_word u = {.w = w};

	return u.holder;
}

static inline uint64_t xseg_rs_load(const struct xseg_request *req)
{
	return __atomic_load_n(&req->state_holder, __ATOMIC_ACQUIRE);
}

/* Release on success (publishes the payload written before), acquire on
 * both paths (the winner/loser sees the other side's writes). */
static inline bool xseg_rs_cas(struct xseg_request *req, uint64_t expect,
			       uint64_t desired)
{
	return __atomic_compare_exchange_n(&req->state_holder, &expect, desired,
					   false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

/* Take a hand-over to port: CAS the word from (from_a or from_b, any
 * hseq, any mover, port) to (to, same hseq, no mover, port). Retries while
 * the word still reads as such a hand-over: the mover's clearing CAS may
 * change the word between our load and our CAS, and that must not make
 * us drop the request. Returns false (nothing done) once the word reads
 * otherwise: the request is not (or no longer) a hand-over to us.
 * The CAS is seq_cst: accept reads the sender's generation (seq_cst)
 * after it, and a reclaim stores the new generation (seq_cst) before its
 * pool scan loads the words (seq_cst), so either the scan sees the
 * request ACCEPTED (and the port drains) or accept sees the new
 * generation (and drops it), never neither. On x86 and arm64 this is the
 * same instruction as acq_rel. */
static inline bool xseg_rs_take(struct xseg_request *req, uint32_t from_a,
				uint32_t from_b, uint32_t port, uint32_t to,
				uint64_t *wp)
{
	uint64_t w = __atomic_load_n(&req->state_holder, __ATOMIC_ACQUIRE);

	for (;;) {
		uint32_t st = xseg_rs_state(w);

		if ((st != from_a && st != from_b) || xseg_rs_holder(w) != port)
			return false;
		if (__atomic_compare_exchange_n(
			&req->state_holder, &w, xseg_rs_next(w, to, port),
			false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
			*wp = w;
			return true;
		}
	}
}

/* Only by an actor that holds the request exclusively (after a won CAS
 * to ANSWERING, or a request nobody else can reach). */
static inline void xseg_rs_store(struct xseg_request *req, uint64_t w)
{
	__atomic_store_n(&req->state_holder, w, __ATOMIC_RELEASE);
}

static inline uint64_t xseg_load64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline uint32_t xseg_load32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void xseg_count(uint64_t *counter)
{
	__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

static inline bool xseg_owned_by_self(const struct xseg *seg, uint32_t port)
{
	return port < seg->nr_ports && seg->self_owner != 0 &&
	       __atomic_load_n(&seg->ports[port].port->owner,
			       __ATOMIC_RELAXED) == seg->self_owner;
}

#endif /* XSEG_INTERNAL_H */
