/* SPDX-License-Identifier: MIT */
#ifndef XWORKQ_H
#define XWORKQ_H
/*
 * xworkq: a serial job queue. Many threads enqueue jobs (function +
 * argument); exactly one thread at a time executes queued jobs, in FIFO
 * order of enqueue; a thread that enqueues while another thread is
 * executing returns at once and its job is run by that executor. cached
 * keeps one per object so that all work on an object is serialised without
 * a lock that threads wait on.
 *
 * Contract
 * - Process-local (holds pointers); not for shared memory.
 * - Jobs are caller-provided nodes (struct xworkq_job), so enqueue never
 *   allocates. The queue owns the node from xworkq_enqueue() until the
 *   job's function is called; the function may then free, reuse or
 *   re-enqueue the node (on this or another queue). A node must not be on
 *   two queues, or twice on one, at the same time.
 * - Executor election is lock-free: a counter of pending jobs. The thread
 *   whose enqueue moves it from 0 to 1 becomes the executor and runs jobs
 *   until it brings the counter back to 0; every enqueue adds its job to
 *   the queue before it counts it, so a job enqueued while the executor is
 *   leaving is either run by it or makes its own enqueuer the next
 *   executor: no job is left behind, and nobody ever waits for another
 *   thread's job to finish. An enqueue that finds nothing pending takes
 *   the executor's role with one compare-and-swap and runs its job in
 *   place, without queueing it (the common case in cached: one request
 *   at a time on an object). (The only wait is liburcu's wfcqueue waiting
 *   for a producer between its two enqueue stores, a few instructions; if
 *   that producer is preempted right there, the executor spins briefly,
 *   then sleeps in 10 ms steps until it is scheduled again.)
 * - Mutual exclusion and ordering: jobs of one queue never run
 *   concurrently, and everything a job wrote is visible to the next job of
 *   the queue, whichever thread runs it (acquire/release on the counter).
 *   Everything the enqueuer wrote before xworkq_enqueue() is visible to
 *   the job.
 * - Fairness: an executor keeps running jobs as long as others keep
 *   enqueuing; a job that enqueues on its own queue is run later by the
 *   same executor (no recursion).
 * - FIFO: jobs run in the order in which their nodes entered the queue;
 *   jobs enqueued by one thread run in that thread's enqueue order.
 */
#include <stdbool.h>
#include <stdint.h>
#include <urcu/wfcqueue.h>

typedef void (*xworkq_fn)(void *arg);

struct xworkq_job {
	struct cds_wfcq_node node; /* private to xworkq */
	xworkq_fn fn;
	void *arg;
};

struct xworkq {
	struct cds_wfcq_head head; /* private */
	struct cds_wfcq_tail tail; /* private */
	uint64_t pending;	   /* __atomic: enqueued and not yet run */
};

/* Initialise an empty queue. Not thread-safe against users. */
void xworkq_init(struct xworkq *wq);

/*
 * Release the queue. Returns 0, or -EBUSY (queue unchanged) if jobs are
 * still pending or an executor is running. The caller guarantees that no
 * thread enqueues concurrently.
 */
int xworkq_destroy(struct xworkq *wq);

/*
 * Queue job with (fn, arg) and, if no thread is executing this queue's
 * jobs, become the executor: run queued jobs (this one and any enqueued
 * meanwhile) until the queue is empty, then return. If another thread is
 * executing, return at once; that thread runs the job.
 * Returns 0, or -EINVAL (nothing queued) if wq, job or fn is NULL.
 * May be called from inside a job (of this queue or another one).
 */
int xworkq_enqueue(struct xworkq *wq, struct xworkq_job *job, xworkq_fn fn,
		   void *arg);

/* Snapshot: true if no job is pending or running. For diagnosis/tests. */
bool xworkq_idle(const struct xworkq *wq);

#endif /* XWORKQ_H */
