/* SPDX-License-Identifier: MIT */
#ifndef PEER_H
#define PEER_H
/*
 * peer: the framework every peer (noop, vlmc, cached, blocker) is built on.
 *
 * A peer is a process serving one xseg port. The framework owns main():
 * it parses the common options, joins the segment, binds the port, runs N
 * worker threads that take requests from the port and hand each one to the
 * peer's handler for its op, and shuts down cleanly on SIGTERM/SIGINT.
 * The peer supplies a struct peer_ops: handlers per op, an optional handler
 * for replies to requests the peer itself sent, life-cycle hooks and its
 * own command-line options.
 *
 * Life cycle (peer_main)
 *   1. parse options (common ones, then the peer's via ops->parse_opt);
 *      --help / --version print and exit 0, bad usage exits 2 with a
 *      one-line reason;
 *   2. daemonise if asked (the starting command's exit status reports
 *      whether start-up below worked), write the pid file;
 *   3. join the segment, bind the port (static number or dynamic);
 *   4. ops->init; then the worker threads start;
 *   5. the main thread waits for signals: SIGUSR1 logs statistics
 *      (framework, port, then ops->stats), SIGTERM/SIGINT start shutdown;
 *      every second, on SIGUSR1 and once more after the drain it also
 *      publishes the framework's counters and ops->stats_table's in the
 *      port's statistics area of the segment (xseg_port_stats_publish),
 *      where `xsegctl stats SEGMENT PORT` reads them with no signal;
 *   6. shutdown: workers stop accepting new requests; requests already
 *      accepted are still handed to their handlers and served; ops->stop
 *      is called once no worker is in its accept/dispatch step (so no
 *      handler runs after it), e.g. cached flushes dirty data; workers
 *      keep receiving replies until every accepted request has been
 *      completed (or the drain timeout passes), ops->fini, the port is
 *      released (libxseg fails requests still queued on it back to their
 *      senders with ECONNRESET) and the segment left. Waiting for busy
 *      workers and the drain each have their own bound, so shutdown can
 *      take up to twice --drain-timeout.
 *
 * Request contract
 * - A handler is called on a worker thread with an ACCEPTED request that
 *   libxseg has already validated (xseg_validate_request: op, target
 *   length, offset + size overflow, data buffer inside the segment, ...).
 *   An op without a handler is failed with EOPNOTSUPP by the framework.
 * - A handler returning 0 takes ownership: it must eventually complete the
 *   request exactly once with peer_complete() (or hand it on with
 *   peer_forward()), either before returning (synchronous) or later from
 *   any thread (asynchronous: e.g. after an io_uring completion or a reply
 *   from another port). A handler returning a negative errno has not taken
 *   ownership: the framework fails the request with that errno.
 * - A request counts as in flight from its accept until its completion;
 *   shutdown waits for in-flight requests to drain, so an asynchronous
 *   peer must keep completing requests after ops->stop (while its fini
 *   has not run).
 * - req->peer_priv is free for the peer (e.g. a pointer to its per-request
 *   context); the framework does not touch it.
 * - Requests the peer sends itself (from peer_port(), with the xseg
 *   life-cycle calls) come back through ops->on_reply on a worker thread;
 *   the handler then owns the received request (put or resubmit it).
 *   Without on_reply such replies are logged and put.
 *
 * Threads: handlers and on_reply run concurrently on up to nr_threads
 * workers; the peer provides its own locking. init, stop, fini and
 * parse_opt run on the main thread with no worker running (stop excepted:
 * workers still run then). stats runs on the main thread concurrently
 * with the workers.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "peer_util.h"
#include "xseg.h"

struct peer; /* framework state, opaque */

/*
 * A per-op handler: 0 when the handler has taken the request (completed it
 * or will complete it), or a negative errno to have the framework fail it.
 */
typedef int (*peer_handler_fn)(struct peer *p, struct xseg_request *req);

struct peer_ops {
	const char *type;    /* peer type recorded in the port, e.g. "noop" */
	const char *version; /* printed by --version (default: project's) */
	const char *summary; /* one line for --help */

	/* Size of the peer's private state, allocated zeroed by the
	 * framework before option parsing; see peer_priv(). */
	size_t priv_size;

	/* Peer-specific long options (terminated by a zero entry; use val
	 * >= 256 so they cannot clash with the common short options), their
	 * help text (one line each, printed after the common options), and
	 * the parser: return 0, or -EINVAL / -ERANGE after printing nothing;
	 * the framework then prints "prog: bad value 'arg' for --name". */
	const struct option *options;
	/* Set defaults in the private state, before options are parsed. */
	void (*defaults)(struct peer *p);
	const char *options_help;
	int (*parse_opt)(struct peer *p, int val, const char *arg);

	/* After the port is bound, before workers start; a negative errno
	 * aborts start-up (logged with the reason the hook logged). */
	int (*init)(struct peer *p);
	/* Shutdown has begun: no new request will be handed to a handler. */
	void (*stop)(struct peer *p);
	/* Workers have exited; last chance before the port is released. An
	 * asynchronous peer must quiesce its completers here: a completion
	 * after the release is refused by libxseg (-ESTALE), but a completer
	 * still writing a data buffer would write into a request that is no
	 * longer the peer's. */
	void (*fini)(struct peer *p);
	/* SIGUSR1: log the peer's own statistics with peer_info(). */
	void (*stats)(struct peer *p);
	/* The peer's own counters for the port's statistics area: fill at
	 * most max entries of st (peer_stat() helps) and return how many.
	 * Runs on the main thread concurrently with the workers (read
	 * counters with relaxed atomics), every second, on SIGUSR1 and
	 * after the drain (before fini). Optional. */
	uint32_t (*stats_table)(struct peer *p, struct xseg_stat *st,
				uint32_t max);
	/* Called about once a second on the main thread, concurrently with
	 * the workers, also while shutdown waits (not during ops->stop):
	 * for retries and other periodic work. Must not block long.
	 * Optional. */
	void (*tick)(struct peer *p);

	peer_handler_fn handlers[XSEG_OP_COUNT];
	/* A reply to a request this peer submitted from its port. */
	void (*on_reply)(struct peer *p, struct xseg_request *req);

	/* The handlers and on_reply never block (they hand work on and
	 * return, as cached's do). With more than one worker, idle workers
	 * then take turns: one at a time waits on the port (spinning for
	 * up to --spin as its own back-off allows, then on its futex), the
	 * others sleep. The one that finds
	 * work serves it without waking anyone; a sleeper is woken when a
	 * backlog shows (a full batch of 16 with another request queued
	 * behind it, which the worker takes too; a full batch alone is
	 * often all a client has in flight), or when the batch is still
	 * being dispatched after 50 us while requests wait on the port
	 * (looked at every 50 us while the batch lasts; a batch that is
	 * all the clients have in flight wakes nobody however long it
	 * runs) (the port's statistics count both:
	 * wakes_backlog, wakes_slow_batch); while the peer is busy sleepers
	 * also look every 1 ms whether the port is unwatched, so a handler
	 * running long (CPU work, not blocking) delays new requests by about
	 * 1 ms at most.
	 * Active-worker budget (--active-workers N, 0 = auto: one less than
	 * the CPUs the peer may run on, at least 1; peer_active_budget):
	 * the wakes above are made only while fewer than N workers are
	 * out of their sleep, and a sleeper's tick takes the port only
	 * then, or when work runs long: a worker inside the same handler
	 * call (or on_reply) as at the sleeper's previous tick, or inside
	 * the same batch while requests wait. A long handler then delays
	 * new requests by one to two ticks. Wakes left out are counted
	 * (wakes_suppressed), turns taken from long work too
	 * (long_handler_turns).
	 * Several workers polling one port on a small machine only take the
	 * CPU the clients and the next peer need. A peer whose handlers may
	 * block must leave this false: requests arriving while its only
	 * awake worker is blocked would wait for it (or up to the tick). */
	bool handlers_never_block;
};

/*
 * Run a peer: the whole life cycle above. Returns the process exit status
 * (0 clean shutdown, 1 start-up or run-time failure, 2 bad usage); the
 * caller returns it from main().
 */
int peer_main(int argc, char **argv, const struct peer_ops *ops);

/* Complete a request a handler took: error 0 = served, a positive errno =
 * failed. Thread-safe, callable from any thread, exactly once per
 * request. Returns 0 or the negative errno of xseg_respond (the request
 * was not ACCEPTED by this peer: a bug in the peer, logged). The reply is
 * queued at once; on a worker dispatching a batch (see peer_sigbatch) the
 * client's wake-up is sent after the batch, once per client port. */
int peer_complete(struct peer *p, struct xseg_request *req, int error);

/* Hand a request a handler took on to another port (xseg_forward: the
 * final server answers the original sender). Counts as completion for
 * this peer. Forward it with the op it came with: the fence judges a held
 * request by the op its submit sent (sent_op, which forward keeps); for
 * another op, submit a request of your own. On error the caller still owns the
 * request and it is still in flight (complete it, e.g. with the error). */
int peer_forward(struct peer *p, struct xseg_request *req, uint32_t port);

/* The signal batch of the calling worker while it dispatches a batch of
 * requests or replies of peer p (only if ops->handlers_never_block), else
 * NULL. peer_complete and peer_forward use it: their replies and forwards
 * are signalled once per port after the batch, not once each. A handler
 * that submits requests of its own may pass it to xseg_submit_batched
 * (the worker flushes it after the batch); with NULL those calls signal at
 * once. Never flush or keep it: it belongs to the worker. */
struct xseg_sigbatch *peer_sigbatch(struct peer *p);

/* Accessors. */
void *peer_priv(struct peer *p);
struct xseg *peer_seg(struct peer *p);
/* Initialise s with the peer's --spin and --spin-policy, for a thread of
 * the peer's own that waits on a port with xseg_wait_spin or
 * xseg_wait_reply_spin (vlmc's NBD completer): the same spinning as the
 * workers, with the thread's own back-off. s then belongs to that thread
 * (xseg.h, "Adaptive spinning"). Valid from ops->init on. */
void peer_spin_init(struct peer *p, struct xseg_spin *s);
uint32_t peer_port(struct peer *p);
unsigned peer_nr_threads(struct peer *p);
/* Index (0 .. nr_threads-1) of the calling worker thread, or -1 when not
 * called on a worker (e.g. on a peer's own completion thread). */
int peer_worker_index(struct peer *p);
/* True once shutdown has begun. */
bool peer_stopping(struct peer *p);
/* Ask for a shutdown as if SIGTERM had arrived (e.g. on a fatal error in a
 * peer thread). exit_status is what peer_main will return (the highest of
 * all requests wins; also when called from ops->fini, e.g. because the
 * store's last flush failed: there it only sets the status). Thread-safe. */
void peer_request_stop(struct peer *p, int exit_status);
/* Leave the peer's static port bound when the process exits, instead of
 * releasing it: for a peer that gave up requests it sent from another
 * port of its own, still unanswered below, and keeps that port (an NBD
 * connection given up at stop). Released, the static port would read as
 * the port of a live process that still owns the kept one until the exit,
 * and a successor started meanwhile (a supervisor's restart) would not
 * fence the given-up requests; left bound, it reads dead once the process
 * is gone, and the successor's bind reclaims every port of it and waits
 * for them (xseg.h xseg_bind_port, "The successor's fence"; review23y
 * F1). Thread-safe; callable from ops->fini. */
void peer_keep_port_at_exit(struct peer *p);

/* Number of requests handed to handlers and not yet completed. */
uint64_t peer_inflight(struct peer *p);

/* Append counter name = value to st[*n] if *n < max (else drop it) and
 * advance *n. name: 1..XSEG_STAT_NAME_LEN-1 chars of [A-Za-z0-9_.-]
 * (longer names are cut). */
void peer_stat(struct xseg_stat *st, uint32_t *n, uint32_t max,
	       const char *name, uint64_t value);

/* Publish the statistics now (what the main thread does every second).
 * Main thread only. Returns 0 or the error of xseg_port_stats_publish. */
int peer_publish_stats(struct peer *p);

/* Name of an op ("read", "write", ..., "ping"), "unknown" for others. */
const char *peer_op_name(unsigned op);

#endif /* PEER_H */
