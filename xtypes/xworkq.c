/* SPDX-License-Identifier: MIT */
/*
 * xworkq: see xworkq.h for the contract.
 *
 * The queue is liburcu's wait-free concurrent queue (wfcqueue); only the
 * elected executor dequeues, so the dequeue side needs no lock. This file
 * calls the library's out-of-line wfcqueue functions (no _LGPL_SOURCE) so
 * that ThreadSanitizer builds do not instrument liburcu's volatile/asm
 * atomics; the hand-off of a job node is annotated for TSan instead.
 */
#include <errno.h>
#include <stddef.h>

#include "xworkq.h"

#if defined(AC_TSAN)
#include <sanitizer/tsan_interface.h>
/* liburcu's enqueue/dequeue synchronise in uninstrumented code. */
#define XWORKQ_TSAN_RELEASE(p) __tsan_release(p)
#define XWORKQ_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define XWORKQ_TSAN_RELEASE(p) ((void)(p))
#define XWORKQ_TSAN_ACQUIRE(p) ((void)(p))
#endif

void xworkq_init(struct xworkq *wq)
{
	cds_wfcq_init(&wq->head, &wq->tail);
	__atomic_store_n(&wq->pending, 0, __ATOMIC_RELAXED);
}

int xworkq_destroy(struct xworkq *wq)
{
	if (__atomic_load_n(&wq->pending, __ATOMIC_ACQUIRE) != 0)
		return -EBUSY;
	cds_wfcq_destroy(&wq->head, &wq->tail);
	return 0;
}

bool xworkq_idle(const struct xworkq *wq)
{
	return __atomic_load_n(&wq->pending, __ATOMIC_ACQUIRE) == 0;
}

/* Append job to wq's queue (publishing its fn/arg to the executor). */
static void xworkq_push(struct xworkq *wq, struct xworkq_job *job)
{
	cds_wfcq_node_init(&job->node);
	XWORKQ_TSAN_RELEASE(job);
	cds_wfcq_enqueue(&wq->head, &wq->tail, &job->node);
}

int xworkq_enqueue(struct xworkq *wq, struct xworkq_job *job, xworkq_fn fn,
		   void *arg)
{
	struct cds_wfcq_node *node;
	struct xworkq_job *next;
	xworkq_fn next_fn;
	void *next_arg;

	uint64_t idle = 0;

	if (!wq || !job || !fn)
		return -EINVAL;
	job->fn = fn;
	job->arg = arg;
	/*
	 * Nothing pending (the common case: one request at a time on an
	 * object): become the executor with one compare-and-swap. If the
	 * queue is empty too, run this job in place, without the round trip
	 * through the queue (an exchange, a dequeue and their cache lines);
	 * it counts as pending while it runs, is not queued, and this thread
	 * dequeues only for the jobs counted after it, each of which was
	 * queued before it was counted. A queue that is not empty holds a
	 * node whose enqueuer has not counted it yet (it entered before this
	 * job): this job then goes behind it, as below, so that jobs still
	 * run in the order they entered (running in place past such a node
	 * broke a producer's FIFO order in test_xworkq_stress). The acquire
	 * of a successful exchange pairs with the previous executor's
	 * release, as below.
	 */
	if (__atomic_load_n(&wq->pending, __ATOMIC_RELAXED) == 0 &&
	    __atomic_compare_exchange_n(&wq->pending, &idle, 1, false,
					__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		if (cds_wfcq_empty(&wq->head, &wq->tail)) {
			fn(arg);
			if (__atomic_sub_fetch(&wq->pending, 1,
					       __ATOMIC_ACQ_REL) == 0)
				return 0;
		} else {
			xworkq_push(wq, job);
		}
		goto run_queued;
	}
	/*
	 * Queue before counting: a counted job is always already in the
	 * queue, so the executor never finds the queue empty while the
	 * counter says otherwise.
	 */
	xworkq_push(wq, job);
	if (__atomic_fetch_add(&wq->pending, 1, __ATOMIC_ACQ_REL) != 0)
		return 0; /* another thread is the executor */

run_queued:
	do {
		node = __cds_wfcq_dequeue_blocking(&wq->head, &wq->tail);
		/*
		 * Cannot be empty: pending > 0 means more jobs were counted
		 * than run, and each was queued before it was counted.
		 */
		next = caa_container_of(node, struct xworkq_job, node);
		XWORKQ_TSAN_ACQUIRE(next);
		next_fn = next->fn;
		next_arg = next->arg;
		/* From here on the node belongs to the job's function. */
		next_fn(next_arg);
	} while (__atomic_sub_fetch(&wq->pending, 1, __ATOMIC_ACQ_REL) != 0);
	return 0;
}
