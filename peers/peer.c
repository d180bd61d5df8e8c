/* SPDX-License-Identifier: MIT */
/*
 * peer: common main, worker threads, dispatch, signals and shutdown.
 */
#include "peer.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef AC_VERSION
#define AC_VERSION "0.0.0"
#endif

#define PEER_BATCH 16
/* Idle workers sleep on the port's futex; the timeout only bounds how long
 * a worker can miss a stop flag set between its check and its sleep. */
#define PEER_IDLE_WAIT_NS (500ULL * 1000 * 1000)
/* Idle workers taking turns (handlers_never_block, several workers): a
 * batch still being dispatched after PEER_HANDOFF_NS while requests wait
 * on the port hands the port to a sleeping worker (looked at every
 * PEER_HANDOFF_NS while the batch lasts); while the peer has had work in the
 * last PEER_IDLE_WAIT_NS, sleepers also look every PEER_TURN_TICK_NS whether
 * the port is unwatched (one handler running long bounds the wait of new
 * requests to about that). */
#define PEER_HANDOFF_NS	     (50ULL * 1000)
#define PEER_TURN_TICK_NS    (1000ULL * 1000)
#define PEER_DRAIN_POLL_NS   (20ULL * 1000 * 1000)
#define PEER_DEFAULT_SPIN_NS (20ULL * 1000)
/* --spin-policy's default: true (adaptive), each worker spins only while
 * its spins catch work (xseg.h, "Adaptive spinning"); false (fixed), at
 * every wait */
#define PEER_DEFAULT_SPIN_ADAPTIVE true
#define PEER_DEFAULT_DRAIN_NS	   (30ULL * 1000 * 1000 * 1000)
/* The main thread reaps dead peers' ports this often (protocol.md): a
 * request this peer sent to a peer that died comes back ECONNRESET even
 * if nobody else reaps. */
#define PEER_REAP_PERIOD_S 1

struct peer_worker {
	struct peer *peer;
	unsigned index;
	pthread_t thread;
	bool started;
	/* 1 from before the worker's stopping check until its accepted batch
	 * is dispatched (seq_cst against the main thread's stopping store:
	 * Dekker), so shutdown knows when no accepted request is pending. */
	int busy;
	/* written by the worker only, read by stats with relaxed loads */
	uint64_t accepted[XSEG_OP_COUNT];
	uint64_t replies;
	/* sleepers this worker woke (ops->handlers_never_block): for a
	 * backlog of requests or replies, for a batch still dispatching */
	uint64_t wakes_backlog;
	uint64_t wakes_slow;
	/* wakes left out for the active-worker budget; turns a sleeper took
	 * over the port from a handler running long (budget only) */
	uint64_t wakes_suppressed;
	uint64_t long_handler_turns;
	/* With an active-worker budget below the thread count: odd while
	 * the worker is inside a handler (or on_reply), resp. a batch;
	 * bumped on entry and on exit. Written by the worker (relaxed
	 * stores, no clock read per request), read by sleepers at their
	 * ticks: the same odd value at two ticks is one handler call (one
	 * batch) that has run for at least a tick. */
	uint32_t handler_seq;
	uint32_t batch_seq;
	/* This worker's view, as a sleeper, of every worker's handler_seq
	 * and batch_seq at its previous look (2 * nr_threads; budget only).
	 * Its own. */
	uint32_t *seen;
	/* this worker's spins on the port (its own back-off: xseg.h,
	 * "Adaptive spinning"); worker only, statistics read relaxed */
	struct xseg_spin spin;
	/* While the worker dispatches a batch of requests or replies (and
	 * handlers never block), completions and forwards made on this
	 * thread only note the port to signal; the worker signals each
	 * noted port once after the batch (xseg_sigbatch). Worker only. */
	bool batching;
	struct xseg_sigbatch sigbatch;
};

struct peer {
	const struct peer_ops *ops;
	const char *prog;

	/* options */
	const char *segment;
	uint32_t port;
	bool dynamic_port;
	unsigned nr_threads;
	unsigned active_opt; /* --active-workers, 0 = auto */
	uint64_t spin_ns;
	bool spin_adaptive;
	enum peer_log_level log_level;
	bool use_syslog;
	bool daemon;
	const char *pidfile;
	uint64_t drain_ns;
	bool no_timestamps;

	/* run time */
	struct xseg *seg;
	bool port_bound;
	bool keep_port; /* peer_keep_port_at_exit */
	void *priv;
	struct peer_worker *workers;
	int stopping;	  /* shutdown begun: accept nothing new */
	int exit_workers; /* drained: workers leave their loop */
	int exit_status;  /* highest requested by peer_request_stop */
	uint64_t inflight;
	uint64_t failed[XSEG_OP_COUNT];
	uint64_t forwarded;
	uint64_t start_ns;
	uint64_t stats_published_ns; /* main thread only */
	uint64_t ticked_ns;	     /* main thread only: last ops->tick */
	bool stats_warned;

	/* ops->handlers_never_block with several workers: port_waiter is 1
	 * while an idle worker waits on the port; the other idle workers
	 * sleep on the futex word idle_seq (idle_sleepers of them). */
	int port_waiter;
	uint32_t idle_seq;
	uint32_t idle_sleepers;
	/* how many workers may be out of that sleep at once unless a handler
	 * runs long (peer_active_budget; nr_threads: no limit). Set before
	 * the workers start. */
	unsigned active_budget;
	/* when a worker last took requests (relaxed, updated at most once
	 * per PEER_TURN_TICK_NS): sleepers tick only while it is recent */
	uint64_t worked_ns;
};

/* Which worker the calling thread is, for peer_worker_index. */
static __thread struct peer_worker *peer_self;

static const char *const peer_op_names[XSEG_OP_COUNT] = {
    [XSEG_OP_NONE] = "none",	 [XSEG_OP_READ] = "read",
    [XSEG_OP_WRITE] = "write",	 [XSEG_OP_FLUSH] = "flush",
    [XSEG_OP_DELETE] = "delete", [XSEG_OP_INFO] = "info",
    [XSEG_OP_COPY] = "copy",	 [XSEG_OP_HASH] = "hash",
    [XSEG_OP_PING] = "ping",
};

const char *peer_op_name(unsigned op)
{
	return op < XSEG_OP_COUNT && peer_op_names[op] ? peer_op_names[op]
						       : "unknown";
}

void *peer_priv(struct peer *p)
{
	return p->priv;
}

struct xseg *peer_seg(struct peer *p)
{
	return p->seg;
}

void peer_spin_init(struct peer *p, struct xseg_spin *s)
{
	xseg_spin_init(s, p->spin_ns, p->spin_adaptive);
}

uint32_t peer_port(struct peer *p)
{
	return p->port;
}

unsigned peer_nr_threads(struct peer *p)
{
	return p->nr_threads;
}

int peer_worker_index(struct peer *p)
{
	return peer_self && peer_self->peer == p ? (int)peer_self->index : -1;
}

void peer_keep_port_at_exit(struct peer *p)
{
	__atomic_store_n(&p->keep_port, true, __ATOMIC_RELEASE);
}

bool peer_stopping(struct peer *p)
{
	return __atomic_load_n(&p->stopping, __ATOMIC_ACQUIRE);
}

uint64_t peer_inflight(struct peer *p)
{
	return __atomic_load_n(&p->inflight, __ATOMIC_ACQUIRE);
}

void peer_request_stop(struct peer *p, int exit_status)
{
	int cur = __atomic_load_n(&p->exit_status, __ATOMIC_RELAXED);

	while (exit_status > cur &&
	       !__atomic_compare_exchange_n(&p->exit_status, &cur, exit_status,
					    false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
	/* The main thread waits in sigwaitinfo: the same path as an
	 * operator's SIGTERM. */
	kill(getpid(), SIGTERM);
}

/* ------------------------------------------------------------------ */
/* Completion                                                          */
/* ------------------------------------------------------------------ */

static void peer_done(struct peer *p)
{
	/* release: whatever the handler did is ordered before the drain
	 * check in the shutdown path sees the count drop */
	if (__atomic_sub_fetch(&p->inflight, 1, __ATOMIC_RELEASE) == 0 &&
	    __atomic_load_n(&p->stopping, __ATOMIC_RELAXED))
		xseg_kick(p->seg, p->port);
}

struct xseg_sigbatch *peer_sigbatch(struct peer *p)
{
	struct peer_worker *w = peer_self;

	return w && w->peer == p && w->batching ? &w->sigbatch : NULL;
}

int peer_complete(struct peer *p, struct xseg_request *req, int error)
{
	unsigned op = req->op;
	int rc;

	if (error < 0)
		error = -error; /* forgive a negative errno */
	rc = xseg_respond_batched(p->seg, req, error, peer_sigbatch(p));
	if (rc < 0) {
		peer_err("port %" PRIu32 ": cannot respond to request %" PRIu64
			 " (%s): %s",
			 p->port, req->id, peer_op_name(op), strerror(-rc));
		return rc;
	}
	if (error && op < XSEG_OP_COUNT)
		__atomic_add_fetch(&p->failed[op], 1, __ATOMIC_RELAXED);
	peer_done(p);
	return 0;
}

int peer_forward(struct peer *p, struct xseg_request *req, uint32_t port)
{
	int rc = xseg_forward_batched(p->seg, req, port, peer_sigbatch(p));

	if (rc < 0)
		return rc;
	__atomic_add_fetch(&p->forwarded, 1, __ATOMIC_RELAXED);
	peer_done(p);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Workers                                                             */
/* ------------------------------------------------------------------ */

static inline void peer_count(uint64_t *c)
{
	/* single writer: a relaxed load/store pair, no locked instruction */
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
}

static void peer_dispatch(struct peer *p, struct peer_worker *w,
			  struct xseg_request *req)
{
	unsigned op = req->op; /* validated by xseg_accept */
	peer_handler_fn h = op < XSEG_OP_COUNT ? p->ops->handlers[op] : NULL;
	int rc;

	/* counted in inflight by the worker when it accepted the batch */
	if (op < XSEG_OP_COUNT)
		peer_count(&w->accepted[op]);
	rc = h ? h(p, req) : -EOPNOTSUPP;
	if (rc < 0)
		peer_complete(p, req, -rc);
}

static void peer_reply(struct peer *p, struct peer_worker *w,
		       struct xseg_request *req)
{
	peer_count(&w->replies);
	if (p->ops->on_reply) {
		p->ops->on_reply(p, req);
		return;
	}
	peer_warn("port %" PRIu32 ": unexpected reply to request %" PRIu64
		  " (%s), dropped",
		  p->port, req->id, peer_op_name(req->op));
	xseg_put_request(p->seg, req);
}

/* ------------------------------------------------------------------ */
/* Idle workers taking turns on the port (ops->handlers_never_block)   */
/* ------------------------------------------------------------------ */

static bool peer_turns(const struct peer *p)
{
	return p->ops->handlers_never_block && p->nr_threads > 1;
}

/* Wake one sleeping idle worker (all: also at shutdown). Seq_cst
 * against the sleeper's count-then-check in peer_idle_wait: the sleeper
 * counts itself before it reads idle_seq, so either we see it counted and
 * bump idle_seq (its FUTEX_WAIT then returns at once or is woken), or it
 * is counted after our check and then sees the state (port unwatched,
 * stopping) that we stored before it. */
static bool peer_wake_idle(struct peer *p, bool all)
{
	if (!peer_turns(p) ||
	    !__atomic_load_n(&p->idle_sleepers, __ATOMIC_SEQ_CST))
		return false;
	__atomic_add_fetch(&p->idle_seq, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &p->idle_seq, FUTEX_WAKE_PRIVATE,
		all ? INT32_MAX : 1, NULL, NULL, 0);
	return true;
}

/* Fewer workers may be active at once than there are (the budget). */
static bool peer_limited(const struct peer *p)
{
	return peer_turns(p) && p->active_budget < p->nr_threads;
}

/* The budget is full: as many workers as it allows are out of their
 * sleep (a snapshot, relaxed: the budget is a policy, not an invariant;
 * the caller is one of them when it is a worker dispatching). */
static bool peer_budget_full(struct peer *p)
{
	return peer_limited(p) &&
	       p->nr_threads -
		       __atomic_load_n(&p->idle_sleepers, __ATOMIC_RELAXED) >=
		   p->active_budget;
}

/* Wake one sleeper to help the calling (active) worker, for a backlog or a
 * batch still dispatching. With the budget full the wake is left out
 * (counted): the woken worker would only take turns on a CPU with the
 * clients and the workers already active. Returns 1 woken, 0 nobody
 * asleep, -1 left out. */
static int peer_wake_help(struct peer *p, struct peer_worker *w)
{
	if (__atomic_load_n(&p->idle_sleepers, __ATOMIC_RELAXED) &&
	    peer_budget_full(p)) {
		peer_count(&w->wakes_suppressed);
		return -1;
	}
	return peer_wake_idle(p, false) ? 1 : 0;
}

/* At a sleeper's tick (budget only): a worker inside the same handler
 * call as at this sleeper's previous look, or inside the same batch with
 * requests waiting on the port. Either has run for at least a tick while
 * the port was unwatched. Notes what it saw for the next look. */
static bool peer_long_running(struct peer *p, struct peer_worker *self)
{
	bool found = false;

	for (unsigned t = 0; t < p->nr_threads; t++) {
		struct peer_worker *o = &p->workers[t];
		uint32_t h = __atomic_load_n(&o->handler_seq, __ATOMIC_RELAXED);
		uint32_t b = __atomic_load_n(&o->batch_seq, __ATOMIC_RELAXED);

		if ((h & 1) && h == self->seen[2 * t])
			found = true;
		else if ((b & 1) && b == self->seen[2 * t + 1] &&
			 xseg_requests_queued(p->seg, p->port))
			found = true;
		self->seen[2 * t] = h;
		self->seen[2 * t + 1] = b;
	}
	return found;
}

/* Worker only: bump one of its own odd-while-inside counters. */
static inline void peer_bump(uint32_t *seq)
{
	__atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
}

/* A worker took requests at now: sleepers keep ticking a while. One
 * store per tick at most, so workers do not bounce the line. After an idle
 * spell, sleepers may be in a long sleep (they chose it from the old
 * worked_ns): wake them, so that they tick from now on. Seq_cst against
 * the sleeper's count, idle_seq read, worked_ns read in peer_idle_wait:
 * either it is counted and woken here, or it reads the new worked_ns. */
static void peer_note_work(struct peer *p, uint64_t now)
{
	uint64_t old = __atomic_load_n(&p->worked_ns, __ATOMIC_RELAXED);

	if (old <= now && now - old < PEER_TURN_TICK_NS)
		return;
	old = __atomic_exchange_n(&p->worked_ns, now, __ATOMIC_SEQ_CST);
	if (old < now && now - old >= PEER_IDLE_WAIT_NS)
		peer_wake_idle(p, true);
}

/* Idle: wait on the port if no other worker does, else sleep until woken
 * (a backlog, a long batch, shutdown), a tick (while the peer is busy) or
 * PEER_IDLE_WAIT_NS. Returns after either; the caller loops and looks for
 * work (and takes the port if nobody watches it).
 *
 * The waiter that finds work leaves the port without waking anyone: with
 * short handlers it is back before more work could wait long, and waking a
 * sleeper to take over every time cost a futex wake and two context
 * switches per batch, which made two workers slower than one on a 2-core
 * machine. A sleeper is woken when a request is queued behind a full batch
 * (a backlog), or when a batch is still being dispatched after
 * PEER_HANDOFF_NS and requests wait on the port (see the worker loop);
 * a single handler running long is caught by the sleepers' tick (review
 * 2, P1: requests must not wait for a long handler while workers sleep). */
static void peer_idle_wait(struct peer *p)
{
	struct timespec ts = {0, (long)PEER_IDLE_WAIT_NS};
	uint32_t seq;
	int zero = 0;

	if (__atomic_compare_exchange_n(&p->port_waiter, &zero, 1, false,
					__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		xseg_wait_spin(p->seg, p->port, PEER_IDLE_WAIT_NS,
			       &peer_self->spin);
		__atomic_store_n(&p->port_waiter, 0, __ATOMIC_SEQ_CST);
		return;
	}
	/* Counted, then idle_seq, then what decides the sleep (see
	 * peer_wake_idle and peer_note_work). With a budget the sleeper
	 * stays counted across its ticks and compares idle_seq with the
	 * value read once after counting: a wake made at any time since is
	 * seen, none is lost between two ticks. */
	__atomic_add_fetch(&p->idle_sleepers, 1, __ATOMIC_SEQ_CST);
	seq = __atomic_load_n(&p->idle_seq, __ATOMIC_SEQ_CST);
	for (;;) {
		uint64_t now = peer_now_ns();

		if (__atomic_load_n(&p->stopping, __ATOMIC_SEQ_CST) ||
		    __atomic_load_n(&p->exit_workers, __ATOMIC_SEQ_CST))
			break;
		ts.tv_nsec = (long)PEER_IDLE_WAIT_NS;
		if (now - __atomic_load_n(&p->worked_ns, __ATOMIC_SEQ_CST) <
		    PEER_IDLE_WAIT_NS)
			ts.tv_nsec = (long)PEER_TURN_TICK_NS;
		/* the waiter may have left meanwhile (then nobody watches
		 * the port: go and take its place). With a budget, only
		 * while fewer workers than it allows are out of this sleep
		 * (the others are active and come back to the port when
		 * their batch is done), or when one of them has been in one
		 * handler call, or in one batch while requests wait, since
		 * this sleeper's previous tick: requests must not wait for a
		 * long handler while workers sleep (review 2, P1). */
		if (!__atomic_load_n(&p->port_waiter, __ATOMIC_SEQ_CST)) {
			if (!peer_budget_full(p))
				break;
			if (peer_long_running(p, peer_self)) {
				peer_count(&peer_self->long_handler_turns);
				break;
			}
		}
		syscall(SYS_futex, &p->idle_seq, FUTEX_WAIT_PRIVATE, seq, &ts,
			NULL, 0);
		/* without a budget every return takes a turn, as before */
		if (!peer_limited(p) ||
		    __atomic_load_n(&p->idle_seq, __ATOMIC_SEQ_CST) != seq)
			break;
	}
	__atomic_sub_fetch(&p->idle_sleepers, 1, __ATOMIC_SEQ_CST);
}

static void *peer_worker_main(void *arg)
{
	struct peer_worker *w = arg;
	struct peer *p = w->peer;
	/* one more than a batch: see the backlog probe below */
	struct xseg_request *reqs[PEER_BATCH + 1];
	unsigned n, m;
	bool backlog, woken;

	peer_self = w;
	for (;;) {
		n = 0;
		backlog = false;
		/* busy, then the stopping check (both seq_cst): either the
		 * main thread sees us busy and waits until the batch is
		 * dispatched before it calls ops->stop, or we see stopping
		 * and accept nothing. A request counts as in flight from
		 * its accept, so the drain cannot end while it is pending. */
		__atomic_store_n(&w->busy, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&p->stopping, __ATOMIC_SEQ_CST)) {
			n = xseg_accept_batch(p->seg, p->port, reqs,
					      PEER_BATCH);
			/* A full batch is often everything the clients have
			 * in flight (one client at iodepth 16 fills it
			 * exactly): waking a sleeper for it cost a futex
			 * wake, a context switch and a second thread
			 * polling the port against the client on a 2-core
			 * machine, for nothing to do. A request behind the
			 * batch is a backlog: take it too (it is ours now)
			 * and let a sleeper help with the rest. */
			if (n == PEER_BATCH && peer_turns(p) &&
			    xseg_accept_batch(p->seg, p->port, reqs + n, 1)) {
				n++;
				backlog = true;
			}
			if (n)
				__atomic_add_fetch(&p->inflight, n,
						   __ATOMIC_RELAXED);
		}
		woken = false;
		if (backlog && peer_wake_help(p, w) > 0) {
			peer_count(&w->wakes_backlog);
			woken = true;
		}
		/* Handlers that never block answer a batch quickly: one
		 * signal per client port for the whole batch instead of one
		 * per reply. A handler that may block must not hold back
		 * the signals of the replies made before it. */
		w->batching = p->ops->handlers_never_block;
		if (n && peer_turns(p)) {
			uint64_t t0 = peer_now_ns(), check = t0, now;
			bool limited = peer_limited(p);
			/* A backlog wake (made or not) ends the looking, as
			 * before the budget; a full budget too: no wake can
			 * be made in this batch, so no clock read per
			 * request (a long batch is the sleepers' to see). */
			bool handed = backlog || (limited && !woken &&
						  peer_budget_full(p));

			peer_note_work(p, t0);
			if (limited)
				peer_bump(&w->batch_seq);
			for (unsigned i = 0; i < n; i++) {
				if (limited)
					peer_bump(&w->handler_seq);
				peer_dispatch(p, w, reqs[i]);
				if (limited)
					peer_bump(&w->handler_seq);
				/* Still busy after a while and requests wait
				 * on the unwatched port: let a sleeper take
				 * it. Nothing waiting, nobody is woken (a
				 * batch of 64 KiB cached hits outlasts
				 * PEER_HANDOFF_NS: the wake cost a futex, two
				 * switches and a third busy thread on 2 cores
				 * for nothing to do); looked at again each
				 * PEER_HANDOFF_NS while the batch lasts. */
				if (handed || i + 1 >= n)
					continue;
				now = peer_now_ns();
				if (now - check < PEER_HANDOFF_NS)
					continue;
				check = now;
				if (!xseg_requests_queued(p->seg, p->port))
					continue;
				if (peer_wake_help(p, w) > 0)
					peer_count(&w->wakes_slow);
				handed = true;
			}
			if (limited)
				peer_bump(&w->batch_seq);
		} else {
			for (unsigned i = 0; i < n; i++)
				peer_dispatch(p, w, reqs[i]);
		}
		xseg_sigbatch_flush(p->seg, &w->sigbatch);
		__atomic_store_n(&w->busy, 0, __ATOMIC_RELEASE);
		/* Replies are taken while draining too: an asynchronous
		 * peer may need them to complete what it accepted. */
		m = xseg_receive_batch(p->seg, p->port, reqs, PEER_BATCH);
		if (m == PEER_BATCH && peer_wake_help(p, w) > 0)
			peer_count(&w->wakes_backlog);
		if (m && peer_limited(p)) {
			/* on_reply is a handler too: a long one (or a long
			 * batch of them) hands the port over at the
			 * sleepers' tick as well */
			peer_bump(&w->batch_seq);
			for (unsigned i = 0; i < m; i++) {
				peer_bump(&w->handler_seq);
				peer_reply(p, w, reqs[i]);
				peer_bump(&w->handler_seq);
			}
			peer_bump(&w->batch_seq);
		} else {
			for (unsigned i = 0; i < m; i++)
				peer_reply(p, w, reqs[i]);
		}
		xseg_sigbatch_flush(p->seg, &w->sigbatch);
		w->batching = false;
		if (n || m)
			continue;
		if (__atomic_load_n(&p->exit_workers, __ATOMIC_ACQUIRE))
			break;
		/* Spins for up to --spin while this worker's spins catch
		 * work (adaptive; always with --spin-policy fixed), then
		 * sleeps on the port's futex: an idle peer uses no CPU.
		 * While stopping, requests left on the queue (failed back
		 * by the release) must not wake us: wait for replies (or
		 * the kick of the drain's end) only, instead of spinning. */
		if (__atomic_load_n(&p->stopping, __ATOMIC_RELAXED))
			xseg_wait_replies(p->seg, p->port, PEER_IDLE_WAIT_NS);
		else if (peer_turns(p))
			peer_idle_wait(p);
		else
			xseg_wait_spin(p->seg, p->port, PEER_IDLE_WAIT_NS,
				       &w->spin);
	}
	peer_self = NULL;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Statistics                                                          */
/* ------------------------------------------------------------------ */

static void peer_dump_stats(struct peer *p)
{
	struct xseg_port_info pi;
	uint64_t accepted[XSEG_OP_COUNT] = {0}, replies = 0, total = 0;
	char line[512];
	int len = 0;

	for (unsigned t = 0; t < p->nr_threads; t++) {
		for (unsigned op = 0; op < XSEG_OP_COUNT; op++)
			accepted[op] += __atomic_load_n(
			    &p->workers[t].accepted[op], __ATOMIC_RELAXED);
		replies +=
		    __atomic_load_n(&p->workers[t].replies, __ATOMIC_RELAXED);
	}
	for (unsigned op = 1; op < XSEG_OP_COUNT; op++) {
		total += accepted[op];
		if (!accepted[op])
			continue;
		len +=
		    snprintf(line + len, sizeof(line) - len,
			     " %s=%" PRIu64 "/%" PRIu64 "f", peer_op_name(op),
			     accepted[op],
			     __atomic_load_n(&p->failed[op], __ATOMIC_RELAXED));
		if (len >= (int)sizeof(line))
			break;
	}
	uint64_t inflight = peer_inflight(p);
	uint64_t forwarded = __atomic_load_n(&p->forwarded, __ATOMIC_RELAXED);
	/* completed is derived: one atomic less per request on the hot path
	 * (a snapshot, exact when the peer is quiet) */
	uint64_t completed = total - inflight - forwarded;
	if (inflight + forwarded > total)
		completed = 0;
	peer_info(
	    "stats: port %" PRIu32 " up %.1f s threads %u: accepted %" PRIu64
	    " completed %" PRIu64 " forwarded %" PRIu64 " in flight %" PRIu64
	    " replies %" PRIu64,
	    p->port, (double)(peer_now_ns() - p->start_ns) / 1e9, p->nr_threads,
	    total, completed, forwarded, inflight, replies);
	if (len)
		peer_info("stats: by op (accepted/failed):%s", line);
	if (xseg_port_info(p->seg, p->port, &pi) == 0)
		peer_info("stats: port %" PRIu32 " counters: accepted %" PRIu64
			  " served %" PRIu64 " failed %" PRIu64
			  " rejected %" PRIu64 " sent %" PRIu64
			  " received %" PRIu64 " queues req %" PRIu64
			  " reply %" PRIu64 " free %" PRIu64,
			  p->port, pi.accepted, pi.served, pi.failed,
			  pi.rejected, pi.sent, pi.received, pi.request_depth,
			  pi.reply_depth, pi.free_depth);
	if (p->ops->stats)
		p->ops->stats(p);
	peer_publish_stats(p);
}

void peer_stat(struct xseg_stat *st, uint32_t *n, uint32_t max,
	       const char *name, uint64_t value)
{
	if (*n >= max)
		return;
	memset(st[*n].name, 0, sizeof(st[*n].name));
	strncpy(st[*n].name, name, sizeof(st[*n].name) - 1);
	st[*n].value = value;
	(*n)++;
}

int peer_publish_stats(struct peer *p)
{
	struct xseg_stat st[XSEG_STATS_MAX];
	uint64_t accepted = 0, replies = 0, failed = 0, inflight, forwarded;
	uint64_t wakes_backlog = 0, wakes_slow = 0, wakes_suppressed = 0;
	uint64_t long_turns = 0;
	uint64_t spin_waits = 0, spins = 0, spin_caught = 0, spin_preempted = 0;
	uint32_t n = 0;
	int rc;

	for (unsigned t = 0; p->workers && t < p->nr_threads; t++) {
		for (unsigned op = 1; op < XSEG_OP_COUNT; op++)
			accepted += __atomic_load_n(&p->workers[t].accepted[op],
						    __ATOMIC_RELAXED);
		replies +=
		    __atomic_load_n(&p->workers[t].replies, __ATOMIC_RELAXED);
		wakes_backlog += __atomic_load_n(&p->workers[t].wakes_backlog,
						 __ATOMIC_RELAXED);
		wakes_slow += __atomic_load_n(&p->workers[t].wakes_slow,
					      __ATOMIC_RELAXED);
		wakes_suppressed += __atomic_load_n(
		    &p->workers[t].wakes_suppressed, __ATOMIC_RELAXED);
		long_turns += __atomic_load_n(&p->workers[t].long_handler_turns,
					      __ATOMIC_RELAXED);
		spin_waits += __atomic_load_n(&p->workers[t].spin.waits,
					      __ATOMIC_RELAXED);
		spins += __atomic_load_n(&p->workers[t].spin.spins,
					 __ATOMIC_RELAXED);
		spin_caught += __atomic_load_n(&p->workers[t].spin.caught,
					       __ATOMIC_RELAXED);
		spin_preempted += __atomic_load_n(&p->workers[t].spin.preempted,
						  __ATOMIC_RELAXED);
	}
	for (unsigned op = 1; op < XSEG_OP_COUNT; op++)
		failed += __atomic_load_n(&p->failed[op], __ATOMIC_RELAXED);
	inflight = peer_inflight(p);
	forwarded = __atomic_load_n(&p->forwarded, __ATOMIC_RELAXED);
	peer_stat(st, &n, XSEG_STATS_MAX, "uptime_ms",
		  p->start_ns ? (peer_now_ns() - p->start_ns) / 1000000 : 0);
	peer_stat(st, &n, XSEG_STATS_MAX, "threads", p->nr_threads);
	peer_stat(st, &n, XSEG_STATS_MAX, "accepted", accepted);
	/* a snapshot: completed is derived, as in the SIGUSR1 log */
	peer_stat(st, &n, XSEG_STATS_MAX, "completed",
		  inflight + forwarded > accepted
		      ? 0
		      : accepted - inflight - forwarded);
	peer_stat(st, &n, XSEG_STATS_MAX, "failed", failed);
	peer_stat(st, &n, XSEG_STATS_MAX, "forwarded", forwarded);
	peer_stat(st, &n, XSEG_STATS_MAX, "in_flight", inflight);
	peer_stat(st, &n, XSEG_STATS_MAX, "replies", replies);
	peer_stat(st, &n, XSEG_STATS_MAX, "stopping", peer_stopping(p) ? 1 : 0);
	/* idle workers woken to help (handlers_never_block, threads > 1) */
	peer_stat(st, &n, XSEG_STATS_MAX, "wakes_backlog", wakes_backlog);
	peer_stat(st, &n, XSEG_STATS_MAX, "wakes_slow_batch", wakes_slow);
	/* the active-worker budget (--active-workers), the wakes it left
	 * out, and the turns sleepers took from a handler running long */
	peer_stat(st, &n, XSEG_STATS_MAX, "active_workers",
		  p->active_budget ? p->active_budget : p->nr_threads);
	peer_stat(st, &n, XSEG_STATS_MAX, "wakes_suppressed", wakes_suppressed);
	peer_stat(st, &n, XSEG_STATS_MAX, "long_handler_turns", long_turns);
	if (p->ops->stats_table)
		n += p->ops->stats_table(p, st + n, XSEG_STATS_MAX - n);
	if (n > XSEG_STATS_MAX)
		n = XSEG_STATS_MAX; /* a hook that ignored max */
	/* The workers' waits on the port that found nothing at once, how
	 * many of them spun, how many spins caught work, how many spins
	 * stopped after 1 us to sleep for a preemption (xseg_spin). After the
	 * peer's own table: should a table fill the 64 rows (none does
	 * today: cached's 37 after the 14 above are the most), these are
	 * the ones left out, not the peer's, the least telling last. */
	peer_stat(st, &n, XSEG_STATS_MAX, "spins", spins);
	peer_stat(st, &n, XSEG_STATS_MAX, "spins_caught", spin_caught);
	peer_stat(st, &n, XSEG_STATS_MAX, "spins_preempted", spin_preempted);
	peer_stat(st, &n, XSEG_STATS_MAX, "spin_waits", spin_waits);
	rc = xseg_port_stats_publish(p->seg, p->port, st, n);
	p->stats_published_ns = peer_now_ns();
	if (rc < 0 && !p->stats_warned) {
		/* once: a bad name in a peer's table is a bug, not news */
		p->stats_warned = true;
		peer_warn("port %" PRIu32 ": cannot publish statistics: %s",
			  p->port, strerror(-rc));
	}
	return rc;
}

/* Once a second (the main thread's loops call this after each wait):
 * the peer's tick, then the statistics. */
/* Once a second: ops->tick, and the statistics unless a SIGUSR1 has
 * just published them. Separate clocks: SIGUSR1 more than once a second
 * must not starve the tick (cached retries failed flushes from it). */
static void peer_periodic(struct peer *p)
{
	uint64_t now = peer_now_ns(),
		 period = PEER_REAP_PERIOD_S * 1000000000ULL;

	if (now - p->ticked_ns >= period) {
		p->ticked_ns = now;
		if (p->ops->tick)
			p->ops->tick(p);
	}
	if (now - p->stats_published_ns >= period)
		peer_publish_stats(p);
}

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

enum {
	PEER_OPT_SYSLOG = 1000,
	PEER_OPT_PIDFILE,
	PEER_OPT_DRAIN,
	PEER_OPT_NO_TS,
	PEER_OPT_SPIN_POLICY,
	PEER_OPT_ACTIVE,
	PEER_OPT_CPUS,
};

static const struct option peer_common_options[] = {
    {"segment", required_argument, NULL, 'g'},
    {"port", required_argument, NULL, 'p'},
    {"threads", required_argument, NULL, 't'},
    {"active-workers", required_argument, NULL, PEER_OPT_ACTIVE},
    {"cpus", required_argument, NULL, PEER_OPT_CPUS},
    {"spin", required_argument, NULL, 's'},
    {"spin-policy", required_argument, NULL, PEER_OPT_SPIN_POLICY},
    {"log-level", required_argument, NULL, 'v'},
    {"syslog", no_argument, NULL, PEER_OPT_SYSLOG},
    {"daemon", no_argument, NULL, 'd'},
    {"pidfile", required_argument, NULL, PEER_OPT_PIDFILE},
    {"drain-timeout", required_argument, NULL, PEER_OPT_DRAIN},
    {"no-timestamps", no_argument, NULL, PEER_OPT_NO_TS},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
};
#define PEER_NR_COMMON (sizeof(peer_common_options) / sizeof(struct option))

static void peer_usage(struct peer *p)
{
	const struct peer_ops *ops = p->ops;

	printf("Usage: %s -g SEGMENT -p PORT|dynamic [OPTIONS]\n", p->prog);
	if (ops->summary)
		printf("%s\n", ops->summary);
	printf(
	    "\nCommon options:\n"
	    "  -g, --segment NAME      xseg segment to join (required)\n"
	    "  -p, --port N|dynamic    static port number to bind, or a "
	    "dynamic port\n"
	    "  -t, --threads N         worker threads (default 1)\n"
	    "      --active-workers N  with handlers that never block: at "
	    "most N workers\n"
	    "                          woken to share the load, unless a "
	    "handler runs long\n"
	    "                          (0 = auto, the default: one CPU "
	    "less than the peer\n"
	    "                          may use, at least 1)\n"
	    "      --cpus LIST         run only on these CPUs (e.g. 1, "
	    "0-3, 0,2; default:\n"
	    "                          wherever the scheduler puts the "
	    "threads)\n"
	    "  -s, --spin TIME         busy-poll up to this long before "
	    "sleeping (default\n"
	    "                          20us; units ns us ms s, bare number "
	    "= us; 0: never)\n"
	    "      --spin-policy P     adaptive (spin only while spins catch "
	    "work) or\n"
	    "                          fixed (spin at every wait; default "
	    "%s)\n"
	    "  -v, --log-level LEVEL   error, warn, info (default), debug\n"
	    "      --syslog            log to syslog instead of stderr\n"
	    "  -d, --daemon            run in the background (logs go to "
	    "syslog once\n"
	    "                          started; exit status tells whether "
	    "start-up worked)\n"
	    "      --pidfile PATH      write and lock a pid file\n"
	    "      --drain-timeout T   at shutdown wait at most T for "
	    "requests in flight\n"
	    "                          (default 30s, bare number = s)\n"
	    "      --no-timestamps     do not stamp accept/respond times in "
	    "requests\n"
	    "  -h, --help              this help\n"
	    "  -V, --version           print the version\n",
	    PEER_DEFAULT_SPIN_ADAPTIVE ? "adaptive" : "fixed");
	if (ops->options_help)
		printf("\n%s options:\n%s", ops->type, ops->options_help);
	printf("\nSignals: SIGTERM/SIGINT shut down gracefully, SIGUSR1 logs "
	       "statistics.\n");
}

/* Returns -1 to go on, else the exit status. */
static int peer_parse_args(struct peer *p, int argc, char **argv)
{
	const struct peer_ops *ops = p->ops;
	size_t nr_extra = 0, i;
	struct option *longopts;
	int c, rc, status = -1;

	while (ops->options && ops->options[nr_extra].name)
		nr_extra++;
	longopts = calloc(PEER_NR_COMMON + nr_extra + 1, sizeof(*longopts));
	if (!longopts) {
		fprintf(stderr, "%s: out of memory\n", p->prog);
		return 1;
	}
	memcpy(longopts, peer_common_options, sizeof(peer_common_options));
	for (i = 0; i < nr_extra; i++)
		longopts[PEER_NR_COMMON + i] = ops->options[i];

	opterr = 0;
	optind = 0; /* full re-initialisation of getopt (glibc) */
	while (status < 0 && (c = getopt_long(argc, argv, ":g:p:t:s:v:dhV",
					      longopts, NULL)) != -1) {
		uint64_t v;

		switch (c) {
		case 'g':
			p->segment = optarg;
			break;
		case 'p':
			if (!strcmp(optarg, "dynamic") ||
			    !strcmp(optarg, "auto")) {
				p->dynamic_port = true;
			} else if (peer_parse_u64(optarg, &v) ||
				   v >= XSEG_NOPORT) {
				peer_usage_error(p->prog,
						 "bad port '%s' (a number or "
						 "'dynamic')",
						 optarg);
				status = 2;
			} else {
				p->port = (uint32_t)v;
				p->dynamic_port = false;
			}
			break;
		case 't':
			if (peer_parse_u64(optarg, &v) || v < 1 || v > 1024) {
				peer_usage_error(p->prog,
						 "bad thread count '%s' "
						 "(1..1024)",
						 optarg);
				status = 2;
			} else {
				p->nr_threads = (unsigned)v;
			}
			break;
		case PEER_OPT_ACTIVE:
			if (peer_parse_u64(optarg, &v) || v > 1024) {
				peer_usage_error(p->prog,
						 "bad active worker count "
						 "'%s' (0 = auto, 1..1024)",
						 optarg);
				status = 2;
			} else {
				p->active_opt = (unsigned)v;
			}
			break;
		case 's':
			if (peer_parse_duration(optarg, 1000, &p->spin_ns)) {
				peer_usage_error(p->prog, "bad spin time '%s'",
						 optarg);
				status = 2;
			}
			break;
		case 'v':
			if (peer_log_parse_level(optarg, &p->log_level)) {
				peer_usage_error(p->prog,
						 "bad log level '%s' (error, "
						 "warn, info, debug)",
						 optarg);
				status = 2;
			}
			break;
		case PEER_OPT_SYSLOG:
			p->use_syslog = true;
			break;
		case 'd':
			p->daemon = true;
			break;
		case PEER_OPT_PIDFILE:
			p->pidfile = optarg;
			break;
		case PEER_OPT_DRAIN:
			if (peer_parse_duration(optarg, 1000000000ULL,
						&p->drain_ns)) {
				peer_usage_error(
				    p->prog, "bad drain timeout '%s'", optarg);
				status = 2;
			}
			break;
		case PEER_OPT_NO_TS:
			p->no_timestamps = true;
			break;
		case PEER_OPT_CPUS: {
			cpu_set_t set;

			/*
			 * Set here, before any thread exists, so that every
			 * thread inherits it, and before the active-worker
			 * budget reads the mask (peer_cpus).
			 */
			if (peer_parse_cpus(optarg, &set)) {
				peer_usage_error(p->prog,
						 "bad CPU list '%s' (e.g. 1, "
						 "0-3, 0,2)",
						 optarg);
				status = 2;
			} else if (sched_setaffinity(0, sizeof(set), &set)) {
				peer_usage_error(p->prog,
						 "cannot run on CPUs '%s': %s",
						 optarg, strerror(errno));
				status = 2;
			}
			break;
		}
		case PEER_OPT_SPIN_POLICY:
			if (!strcmp(optarg, "adaptive")) {
				p->spin_adaptive = true;
			} else if (!strcmp(optarg, "fixed")) {
				p->spin_adaptive = false;
			} else {
				peer_usage_error(p->prog,
						 "bad spin policy '%s' "
						 "(adaptive or fixed)",
						 optarg);
				status = 2;
			}
			break;
		case 'h':
			peer_usage(p);
			status = 0;
			break;
		case 'V':
			printf("%s (%s) %s\n", p->prog,
			       ops->type ? ops->type : "peer",
			       ops->version ? ops->version : AC_VERSION);
			status = 0;
			break;
		case ':':
			peer_usage_error(p->prog, "option '%s' needs a value",
					 argv[optind - 1]);
			status = 2;
			break;
		case '?':
			if (optopt)
				peer_usage_error(
				    p->prog, "unknown option '-%c'", optopt);
			else
				peer_usage_error(p->prog, "unknown option '%s'",
						 argv[optind - 1]);
			status = 2;
			break;
		default:
			rc = ops->parse_opt ? ops->parse_opt(p, c, optarg)
					    : -EINVAL;
			if (rc < 0) {
				const char *name = "?";
				for (i = 0; i < nr_extra; i++)
					if (ops->options[i].val == c)
						name = ops->options[i].name;
				if (optarg)
					peer_usage_error(p->prog,
							 "bad value '%s' for "
							 "--%s",
							 optarg, name);
				else
					peer_usage_error(p->prog,
							 "option --%s cannot "
							 "be used here",
							 name);
				status = 2;
			}
			break;
		}
	}
	free(longopts);
	if (status >= 0)
		return status;
	if (optind < argc) {
		peer_usage_error(p->prog, "unexpected argument '%s'",
				 argv[optind]);
		return 2;
	}
	if (!p->segment) {
		peer_usage_error(p->prog, "no segment given (-g NAME)");
		return 2;
	}
	if (!p->dynamic_port && p->port == XSEG_NOPORT) {
		peer_usage_error(p->prog, "no port given (-p N|dynamic)");
		return 2;
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* Main                                                                */
/* ------------------------------------------------------------------ */

static int peer_start_workers(struct peer *p)
{
	for (unsigned t = 0; t < p->nr_threads; t++) {
		struct peer_worker *w = &p->workers[t];
		int rc;

		w->peer = p;
		w->index = t;
		peer_spin_init(p, &w->spin);
		rc = pthread_create(&w->thread, NULL, peer_worker_main, w);
		if (rc) {
			peer_err("cannot start worker thread %u: %s", t,
				 strerror(rc));
			return -rc;
		}
		w->started = true;
	}
	return 0;
}

static void peer_join_workers(struct peer *p)
{
	__atomic_store_n(&p->exit_workers, 1, __ATOMIC_SEQ_CST);
	peer_wake_idle(p, true);
	for (unsigned t = 0; t < p->nr_threads; t++) {
		xseg_kick(p->seg, p->port);
		if (p->workers[t].started)
			pthread_join(p->workers[t].thread, NULL);
		p->workers[t].started = false;
	}
}

/*
 * Who sent a stop signal that arrives during the shutdown, for the log:
 * an operator's second SIGTERM/SIGINT, or this peer's own
 * peer_request_stop (kill of itself: cached when it keeps its redirect
 * after the flush timeout, a worker after a fatal error). Either cuts the
 * wait short; only the message differs, so that the log does not claim a
 * second signal nobody sent. Signals do not queue: with both pending, si
 * names the first sender.
 */
static const char *peer_stop_sender(const siginfo_t *si)
{
	return si->si_code == SI_USER && si->si_pid == getpid()
		   ? "stop requested by the peer itself, not a second "
		     "signal"
		   : "second stop signal";
}

/* After stopping is set: wait until no worker is inside its accept and
 * dispatch step, so every request accepted before the flag has been handed
 * to its handler (and counted in flight) before ops->stop runs. Handlers
 * of a synchronous peer may take a while: SIGUSR1 is served meanwhile.
 * Returns true if a second SIGTERM/SIGINT cut it short: the caller then
 * skips the drain too (the signal meant "stop now"; taken here, the drain
 * would not see it and wait its whole timeout). */
static bool peer_quiesce(struct peer *p, const sigset_t *sigs)
{
	uint64_t deadline = peer_now_ns() + p->drain_ns;
	struct timespec ts = {0, 1000 * 1000};
	siginfo_t si;
	int sig;

	for (unsigned t = 0; t < p->nr_threads; t++) {
		while (p->workers[t].started &&
		       __atomic_load_n(&p->workers[t].busy, __ATOMIC_SEQ_CST)) {
			/* A handler that never returns must not keep the
			 * peer from stopping: same bounds as the drain. */
			if (peer_now_ns() >= deadline) {
				peer_warn("drain timeout: a worker is still "
					  "in a handler; stopping anyway");
				return false;
			}
			sig = sigtimedwait(sigs, &si, &ts);
			peer_periodic(p);
			if (sig == SIGUSR1)
				peer_dump_stats(p);
			else if (sig == SIGTERM || sig == SIGINT) {
				peer_warn("%s: not waiting for handlers to "
					  "return, nor for %" PRIu64
					  " request(s) in flight",
					  peer_stop_sender(&si),
					  peer_inflight(p));
				return true;
			}
		}
	}
	return false;
}

/* Wait for the requests in flight to complete, serving SIGUSR1 meanwhile;
 * a second SIGTERM/SIGINT (or the peer's own peer_request_stop) or the
 * drain timeout cuts it short. */
static void peer_drain(struct peer *p, const sigset_t *sigs)
{
	uint64_t deadline = peer_now_ns() + p->drain_ns;
	struct timespec ts = {0, PEER_DRAIN_POLL_NS};
	siginfo_t si;

	while (peer_inflight(p)) {
		if (peer_now_ns() >= deadline) {
			peer_warn("drain timeout: %" PRIu64
				  " request(s) still in flight are failed "
				  "back with ECONNRESET",
				  peer_inflight(p));
			return;
		}
		int sig = sigtimedwait(sigs, &si, &ts);
		peer_periodic(p);
		if (sig == SIGUSR1)
			peer_dump_stats(p);
		else if (sig == SIGTERM || sig == SIGINT) {
			peer_warn("%s: not waiting for %" PRIu64
				  " request(s) in flight",
				  peer_stop_sender(&si), peer_inflight(p));
			return;
		}
	}
}

/*
 * Bind the static port or allocate a dynamic one. -EAGAIN from xseg means
 * the port is draining: a previous owner's requests are still being
 * served at other ports, and binding before they are answered would let
 * a late write of the dead peer land after this peer's newer writes
 * (docs/protocol.md, "Requests of a reclaimed sender are not run"). xseg
 * waits up to 1 s per bind call (an allocation returns at once: we wait
 * 100 ms then) and logs the holder every 5 s; keep trying
 * for as long as it takes, unless told to stop (SIGTERM/SIGINT, blocked
 * here and left pending for the caller's exit path).
 */
static int peer_bind(struct peer *p)
{
	bool said = false;
	int rc;

	for (;;) {
		sigset_t pending;

		if (p->dynamic_port)
			rc = xseg_alloc_port(p->seg, p->ops->type, &p->port);
		else
			rc = xseg_bind_port(p->seg, p->port, p->ops->type);
		if (rc != -EAGAIN)
			return rc;
		if (!said && p->dynamic_port)
			peer_warn("segment %s: every free dynamic port is "
				  "draining (earlier owners' requests still "
				  "served at other ports); waiting",
				  xseg_name(p->seg));
		else if (!said)
			peer_warn("segment %s: port %" PRIu32 ": the previous "
				  "owner's requests are still served at other "
				  "ports; waiting for them before binding",
				  xseg_name(p->seg), p->port);
		said = true;
		if (!sigpending(&pending) && (sigismember(&pending, SIGTERM) ||
					      sigismember(&pending, SIGINT)))
			return rc;
		/* a static bind has waited 1 s inside xseg; the dynamic
		 * allocation answers at once: do not spin on it */
		if (p->dynamic_port)
			usleep(100000);
	}
}

int peer_main(int argc, char **argv, const struct peer_ops *ops)
{
	char errbuf[XSEG_ERRBUF_LEN];
	struct peer *p;
	sigset_t sigs;
	bool cut;
	int status, rc, ready_fd = -1, pid_fd = -1;
	const char *slash;
	char *pidfile_abs = NULL;

	p = calloc(1, sizeof(*p));
	if (!p) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	slash = strrchr(argv[0], '/');
	p->prog = slash ? slash + 1 : argv[0];
	p->ops = ops;
	p->port = XSEG_NOPORT;
	p->nr_threads = 1;
	p->spin_ns = PEER_DEFAULT_SPIN_NS;
	p->spin_adaptive = PEER_DEFAULT_SPIN_ADAPTIVE;
	p->log_level = PEER_LOG_INFO;
	p->drain_ns = PEER_DEFAULT_DRAIN_NS;
	if (ops->priv_size) {
		p->priv = calloc(1, ops->priv_size);
		if (!p->priv) {
			fprintf(stderr, "%s: out of memory\n", p->prog);
			free(p);
			return 1;
		}
	}
	if (ops->defaults)
		ops->defaults(p);
	status = peer_parse_args(p, argc, argv);
	if (status >= 0)
		goto out_free;
	status = 1;
	peer_log_init(p->prog, p->log_level, p->use_syslog);

	if (p->daemon && p->pidfile && p->pidfile[0] != '/') {
		/* the daemon runs in "/": keep the path the operator meant */
		char cwd[4096];
		if (getcwd(cwd, sizeof(cwd)) &&
		    asprintf(&pidfile_abs, "%s/%s", cwd, p->pidfile) > 0)
			p->pidfile = pidfile_abs;
	}
	if (p->daemon) {
		rc = peer_daemonize(&ready_fd);
		if (rc < 0) {
			peer_err("cannot daemonise: %s", strerror(-rc));
			goto out_free;
		}
	}
	if (p->pidfile) {
		pid_fd = peer_pidfile_create(p->pidfile);
		if (pid_fd < 0) {
			peer_err("pid file %s: %s", p->pidfile,
				 pid_fd == -EEXIST ? "locked by a running peer"
						   : strerror(-pid_fd));
			goto out_ready;
		}
	}

	/* Signals are taken synchronously by the main thread only: block
	 * them before any thread exists so every worker inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	errbuf[0] = '\0';
	rc = xseg_join(p->segment, &p->seg, errbuf, sizeof(errbuf));
	if (rc < 0) {
		peer_err("%s", errbuf[0] ? errbuf : strerror(-rc));
		goto out_pid;
	}
	xseg_set_spin(p->seg, p->spin_ns);
	if (p->no_timestamps)
		xseg_set_timestamps(p->seg, false);
	rc = peer_bind(p);
	if (rc < 0) {
		if (p->dynamic_port)
			peer_err("segment %s: no dynamic port: %s",
				 xseg_name(p->seg),
				 rc == -ENOSPC ? "all in use" : strerror(-rc));
		else
			peer_err("segment %s: port %" PRIu32
				 ": cannot bind: %s",
				 xseg_name(p->seg), p->port,
				 rc == -EBUSY ? "owned by a live process"
					      : strerror(-rc));
		goto out_leave;
	}
	p->port_bound = true;

	p->workers = calloc(p->nr_threads, sizeof(*p->workers));
	if (!p->workers) {
		peer_err("out of memory");
		goto out_release;
	}
	p->active_budget = p->nr_threads;
	if (ops->handlers_never_block) {
		unsigned cpus = peer_cpus();
		int budget =
		    peer_active_budget(cpus, p->nr_threads, p->active_opt);

		if (budget > 0)
			p->active_budget = (unsigned)budget;
		for (unsigned t = 0;
		     p->active_budget < p->nr_threads && t < p->nr_threads;
		     t++) {
			p->workers[t].seen =
			    calloc(2 * (size_t)p->nr_threads, sizeof(uint32_t));
			if (!p->workers[t].seen) {
				peer_err("out of memory");
				goto out_release;
			}
		}
		if (p->active_budget < p->nr_threads)
			peer_info("%u workers, at most %u active unless a "
				  "handler runs long (%u CPUs%s)",
				  p->nr_threads, p->active_budget, cpus,
				  p->active_opt ? ", --active-workers" : "");
	}
	if (ops->init) {
		rc = ops->init(p);
		if (rc < 0) {
			peer_err("segment %s: port %" PRIu32
				 ": initialisation failed: %s",
				 xseg_name(p->seg), p->port, strerror(-rc));
			goto out_release;
		}
	}
	p->start_ns = peer_now_ns();
	if (peer_start_workers(p) < 0) {
		__atomic_store_n(&p->stopping, 1, __ATOMIC_RELEASE);
		peer_join_workers(p);
		goto out_fini;
	}
	peer_info("serving segment %s port %" PRIu32 " with %u thread(s), "
		  "pid %ld",
		  xseg_name(p->seg), p->port, p->nr_threads, (long)getpid());
	peer_publish_stats(p); /* readable from the start */
	if (ready_fd >= 0) {
		peer_daemon_ready(ready_fd, true);
		ready_fd = -1;
		if (!p->use_syslog)
			peer_log_init(p->prog, p->log_level, true);
	}

	for (;;) {
		struct timespec reap_ts = {PEER_REAP_PERIOD_S, 0};
		siginfo_t si;
		int sig = sigtimedwait(&sigs, &si, &reap_ts);

		/* also when signals keep the timeout from expiring */
		peer_periodic(p);
		if (sig < 0 && errno == EAGAIN) {
			int n = xseg_reap(p->seg, NULL);

			if (n > 0)
				peer_info("reclaimed %d port(s) of dead peers",
					  n);
			continue;
		}
		if (sig == SIGUSR1)
			peer_dump_stats(p);
		else if (sig == SIGHUP)
			peer_info("SIGHUP ignored");
		else if (sig == SIGTERM || sig == SIGINT)
			break;
	}
	peer_info("shutting down: %" PRIu64 " request(s) in flight",
		  peer_inflight(p));
	__atomic_store_n(&p->stopping, 1, __ATOMIC_SEQ_CST);
	/* sleeping idle workers must wait for replies now (the drain) */
	peer_wake_idle(p, true);
	/* Requests accepted before the flag are served (dispatched before
	 * ops->stop); requests still queued are failed back with ECONNRESET
	 * by the release at the end (or, if the port is kept bound at exit,
	 * peer_keep_port_at_exit, by its reclaim after the exit). */
	/* a second stop signal during the quiesce means stop now: the
	 * drain is skipped as it would have been cut short */
	cut = peer_quiesce(p, &sigs);
	if (ops->stop)
		ops->stop(p);
	if (!cut)
		peer_drain(p, &sigs);
	peer_join_workers(p);
	peer_publish_stats(p); /* the last numbers outlive us */
	status = __atomic_load_n(&p->exit_status, __ATOMIC_RELAXED);
out_fini:
	if (ops->fini)
		ops->fini(p);
	/* fini may fail too (the blocker's last flush and close, review8
	 * R8-1): a peer_request_stop from it still counts. The paths that
	 * jump here set status themselves: keep the higher. */
	if (__atomic_load_n(&p->exit_status, __ATOMIC_RELAXED) > status)
		status = __atomic_load_n(&p->exit_status, __ATOMIC_RELAXED);
out_release:
	if (p->port_bound && __atomic_load_n(&p->keep_port, __ATOMIC_ACQUIRE)) {
		peer_warn("segment %s: port %" PRIu32 " left bound at exit: "
			  "requests this process gave up are still "
			  "unanswered below; its successor's bind reclaims "
			  "it and waits for them",
			  xseg_name(p->seg), p->port);
	} else if (p->port_bound) {
		rc = xseg_release_port(p->seg, p->port);
		if (rc < 0)
			peer_err("segment %s: port %" PRIu32
				 ": cannot release: %s",
				 xseg_name(p->seg), p->port, strerror(-rc));
		else
			peer_info("port %" PRIu32 " released", p->port);
	}
out_leave:
	xseg_leave(p->seg);
out_pid:
	if (pid_fd >= 0)
		peer_pidfile_remove(p->pidfile, pid_fd);
out_ready:
	if (ready_fd >= 0)
		peer_daemon_ready(ready_fd, false);
out_free:
	free(pidfile_abs);
	for (unsigned t = 0; p->workers && t < p->nr_threads; t++)
		free(p->workers[t].seen);
	free(p->workers);
	free(p->priv);
	free(p);
	return status;
}
