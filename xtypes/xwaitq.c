/* SPDX-License-Identifier: MIT */
/*
 * xwaitq: see xwaitq.h for the contract.
 *
 * Why a mutex and not a lock-free list: several signallers may take jobs
 * at once, and each must check the predicate and unlink the oldest job as
 * one step that is consistent with enqueuers linking new jobs. The mutex is
 * held only for that check and the pointer updates, never while a job
 * runs, and the common "nothing queued" signal does not take it.
 */
#include <errno.h>
#include <stddef.h>

#include "xwaitq.h"

int xwaitq_init(struct xwaitq *wq, xwaitq_cond_fn cond, void *cond_arg)
{
	int err;

	if (!wq || !cond)
		return -EINVAL;
	err = pthread_mutex_init(&wq->lock, NULL);
	if (err)
		return -err;
	wq->head = NULL;
	wq->tailp = &wq->head;
	__atomic_store_n(&wq->nr_queued, 0, __ATOMIC_RELAXED);
	wq->cond = cond;
	wq->cond_arg = cond_arg;
	return 0;
}

int xwaitq_destroy(struct xwaitq *wq)
{
	if (__atomic_load_n(&wq->nr_queued, __ATOMIC_ACQUIRE) != 0)
		return -EBUSY;
	pthread_mutex_destroy(&wq->lock);
	return 0;
}

uint64_t xwaitq_nr_queued(const struct xwaitq *wq)
{
	return __atomic_load_n(&wq->nr_queued, __ATOMIC_ACQUIRE);
}

int xwaitq_signal(struct xwaitq *wq)
{
	struct xwaitq_job *job;
	xwaitq_fn fn;
	void *arg;
	int ran = 0;

	/*
	 * Pairs with the enqueuer's "queue, then re-check": the signaller's
	 * state change is ordered before this load, the enqueuer's queuing
	 * before its predicate call, so at least one of the two sees the
	 * other (store-buffer pattern with full fences on both sides).
	 */
#if defined(AC_TSAN)
	/* TSan does not model fences; a seq_cst RMW is as strong here. */
	if (__atomic_fetch_add(&wq->nr_queued, 0, __ATOMIC_SEQ_CST) == 0)
		return 0;
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&wq->nr_queued, __ATOMIC_SEQ_CST) == 0)
		return 0;
#endif
	for (;;) {
		pthread_mutex_lock(&wq->lock);
		job = wq->head;
		if (!job || !wq->cond(wq->cond_arg)) {
			pthread_mutex_unlock(&wq->lock);
			return ran;
		}
		wq->head = job->next;
		if (!wq->head)
			wq->tailp = &wq->head;
		__atomic_sub_fetch(&wq->nr_queued, 1, __ATOMIC_SEQ_CST);
		fn = job->fn;
		arg = job->arg;
		pthread_mutex_unlock(&wq->lock);
		/* The node belongs to the job's function from here on. */
		fn(arg);
		ran++;
	}
}

int xwaitq_enqueue(struct xwaitq *wq, struct xwaitq_job *job, xwaitq_fn fn,
		   void *arg)
{
	if (!wq || !job || !fn)
		return -EINVAL;
	if (wq->cond(wq->cond_arg)) {
		fn(arg);
		return 0;
	}
	job->fn = fn;
	job->arg = arg;
	job->next = NULL;
	pthread_mutex_lock(&wq->lock);
	*wq->tailp = job;
	wq->tailp = &job->next;
	__atomic_add_fetch(&wq->nr_queued, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&wq->lock);
	/* A signal may have come between the first check and the queuing. */
	xwaitq_signal(wq);
	return 0;
}
