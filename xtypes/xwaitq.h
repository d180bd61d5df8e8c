/* SPDX-License-Identifier: MIT */
#ifndef XWAITQ_H
#define XWAITQ_H
/*
 * xwaitq: a conditional job queue. A job runs only when the queue's
 * predicate holds: xwaitq_enqueue() tries the predicate first and runs the
 * job at once if it holds, queues the job otherwise; xwaitq_signal(),
 * called by whoever may have made the predicate true, re-checks it and
 * runs queued jobs while it holds. cached parks work waiting for free
 * buckets, free requests or an in-flight flush this way.
 *
 * Contract
 * - Process-local (holds pointers and a pthread mutex).
 * - Jobs are caller-provided nodes (struct xwaitq_job): no allocation. The
 *   queue owns a node from enqueue until its function is called; the
 *   function may then free, reuse or re-enqueue it.
 * - Jobs run in the thread that found the predicate true (the enqueuer or
 *   a signaller), outside any xwaitq lock, and may run concurrently with
 *   other jobs of the same queue in other threads: jobs must be
 *   thread-safe. Queued jobs are taken in FIFO order; a job enqueued while
 *   the predicate holds runs at once, even if older jobs are queued (they
 *   are queued only because the predicate was false when they were
 *   checked; the next signal runs them).
 * - A job is run when the predicate was seen true just before it was taken
 *   off the queue; if jobs consume what the predicate tests, a job may
 *   still find it gone (another thread consumed it in between) and must
 *   cope, e.g. by enqueuing itself again.
 * - The predicate is called with the queue's internal mutex held (for
 *   queued jobs) or with no lock (first attempt in enqueue). It must be
 *   cheap, must not block, and must not call this queue's functions.
 * - No lost wake-up: if a signaller changes the state so that the
 *   predicate holds and then calls xwaitq_signal(), every job whose
 *   enqueue overlapped with or preceded that signal runs (or finds the
 *   predicate false again because a job consumed the state). This needs
 *   the state the predicate reads to be written with atomics or under a
 *   lock (xwaitq_signal() issues a full fence before its lock-free
 *   "nothing queued" check, and the enqueuer re-checks the predicate after
 *   queuing).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef bool (*xwaitq_cond_fn)(void *cond_arg);
typedef void (*xwaitq_fn)(void *arg);

struct xwaitq_job {
	struct xwaitq_job *next; /* private to xwaitq */
	xwaitq_fn fn;
	void *arg;
};

struct xwaitq {
	pthread_mutex_t lock;	   /* protects head/tail */
	struct xwaitq_job *head;   /* oldest queued job */
	struct xwaitq_job **tailp; /* where the next job is linked */
	uint64_t nr_queued;	   /* __atomic; written under lock */
	xwaitq_cond_fn cond;
	void *cond_arg;
};

/*
 * Initialise an empty queue with predicate cond(cond_arg). Returns 0,
 * -EINVAL if wq or cond is NULL, or the pthread_mutex_init error.
 */
int xwaitq_init(struct xwaitq *wq, xwaitq_cond_fn cond, void *cond_arg);

/*
 * Release the queue. Returns 0, or -EBUSY (queue unchanged) if jobs are
 * still queued. The caller guarantees that no thread uses it concurrently.
 */
int xwaitq_destroy(struct xwaitq *wq);

/*
 * Run fn(arg) now if the predicate holds; otherwise queue the job, then
 * re-check the predicate (as xwaitq_signal()) so that a signal racing
 * with the first check is not lost. Returns 0 (job ran or is queued), or
 * -EINVAL (nothing done) if wq, job or fn is NULL.
 */
int xwaitq_enqueue(struct xwaitq *wq, struct xwaitq_job *job, xwaitq_fn fn,
		   void *arg);

/*
 * Re-check the predicate and, while it holds, take the oldest queued job
 * and run it in the calling thread. Returns the number of jobs run (>= 0).
 * Cheap when nothing is queued (a fence and a load). Callable from a job.
 */
int xwaitq_signal(struct xwaitq *wq);

/* Snapshot of the number of queued jobs. For diagnosis/tests. */
uint64_t xwaitq_nr_queued(const struct xwaitq *wq);

#endif /* XWAITQ_H */
