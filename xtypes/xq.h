/* SPDX-License-Identifier: MIT */
#ifndef XQ_H
#define XQ_H
/*
 * xq: bounded multi-producer multi-consumer FIFO of 32-bit indexes that
 * lives in shared memory.
 *
 * Contract
 * - Position independent: the queue is one contiguous block (header followed
 *   by the cells) holding no pointers, so processes that map it at different
 *   addresses use it together.
 * - Lock-free and kill-safe: every operation takes effect with one
 *   compare-and-swap on a cell, which both claims and publishes the slot
 *   (the cell packs a 32-bit lap sequence with the 32-bit value). The head
 *   and tail counters are advanced afterwards by the operation itself or by
 *   any other operation that finds them behind ("helping"). A process killed
 *   at any instruction therefore leaves the queue consistent and usable;
 *   at most the single value it was enqueuing or dequeuing is lost or kept:
 *   a producer's value is either queued whole or not at all; a consumer
 *   killed after its CAS took the value with it. Until the next operation
 *   helps, the dead process's counter lags by one (see xq_count).
 * - FIFO per queue under any interleaving that linearises the cell CASes.
 * - Capacity is a power of two, 2 .. 2^31.
 * - Values are any uint32_t (XQ_NONE included: there is no reserved value).
 * - Memory ordering: an enqueue happens-before the dequeue that returns its
 *   value (release on publish, acquire on take), so data written before
 *   enqueuing an index is visible to the consumer of that index.
 * - ABA: a thread stalled between reading a cell and its CAS for 2^32 / cap
 *   full laps of the queue could mis-CAS; documented, not defended.
 * - Cost: two CASes per operation uncontended (cell, then counter). The
 *   argument for all of the above is the comment block at the top of xq.c.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint32_t xqindex;

#define XQ_NONE UINT32_MAX

struct xq; /* layout private to xq.c; sized by xq_size() */

/* Bytes needed for a queue of the given capacity (header + cells). Returns 0
 * when capacity is not a power of two in range. */
size_t xq_size(uint64_t capacity);

/* Initialise a queue in caller-provided memory of at least mem_size bytes,
 * 64-byte aligned. Returns 0, or -EINVAL (NULL, bad capacity, too small
 * memory, misaligned), in which case the memory is untouched. Not safe
 * against concurrent users of the same memory; publish the queue to other
 * threads/processes after init returns (the magic is stored last, release).
 */
int xq_init(struct xq *q, uint64_t capacity, size_t mem_size);

/* Append v. Returns 0, or -EAGAIN when the queue is full (nothing changed).
 * Lock-free; safe from any number of threads and processes at once. */
int xq_enqueue(struct xq *q, xqindex v);

/* Take the oldest value into *v. Returns 0, or -EAGAIN when empty (*v is
 * not written). Lock-free; safe from any number of threads and processes. */
int xq_dequeue(struct xq *q, xqindex *v);

/* Where the values of a queue point: value v names the object at
 * base + v * stride (for v < count), e.g. a request in the segment's pool.
 * Used only to prefetch, never dereferenced: a stale or corrupt value
 * (v >= count) is simply not prefetched. */
struct xq_prefetch {
	const void *base;
	size_t stride;
	uint32_t count;
	uint32_t lines; /* 64-byte lines to prefetch from the object's start:
			   1 or 2 (more are clamped to 2, 0 is none) */
};

/* xq_dequeue, and, as soon as the cell shows the value and before the CAS
 * that takes it, a prefetch for writing of the first pf->lines lines of
 * the object the value names. A consumer that CASes the object's first
 * line right after the dequeue (another core wrote it last, as in a
 * hand-over) then has that line's transfer overlap the cell CAS's instead
 * of following it. The prefetch is a hint: it changes no memory and no
 * ordering, so the contract (and the memory ordering) is xq_dequeue's.
 * A prefetch for a value that a concurrent consumer then takes is wasted,
 * not wrong. pf may be NULL (plain xq_dequeue). Returns 0 or -EAGAIN
 * (empty, *v not written). */
int xq_dequeue_prefetch(struct xq *q, xqindex *v, const struct xq_prefetch *pf);

/* Append up to n values in order; returns how many were appended (stops at
 * the first full condition). A loop of xq_enqueue: each value is its own
 * linearisable operation, so other producers' values may interleave, but
 * this batch's values keep their relative order. */
unsigned xq_enqueue_batch(struct xq *q, const xqindex *v, unsigned n);

/* Take up to n values in FIFO order; returns how many were taken (stops at
 * the first empty condition). A loop of xq_dequeue, like the enqueue batch. */
unsigned xq_dequeue_batch(struct xq *q, xqindex *v, unsigned n);

/* Number of values queued: a snapshot, exact when the queue is quiescent
 * and no process died inside an operation; a counter left one behind by a
 * killed process (until another operation helps it on) makes it off by one.
 * Always within 0 .. capacity. */
uint64_t xq_count(const struct xq *q);

/* Whether a dequeue now could find a value, for pollers: reads only the
 * head counter and the head's cell (never the tail), so a consumer
 * spinning on it shares the one line the producer's enqueue writes first
 * (the cell) and leaves the tail's line in the producer's cache: the
 * producer's tail CAS then stays local, and the poller sees the value as
 * soon as its cell is published, one line transfer earlier than through
 * xq_count's tail. False when the head's cell was not yet filled when
 * read: the queue was empty at that instant (cells fill in order), or, if
 * the caller stalled between its two loads while others dequeued a whole
 * lap, every value present when it started has been taken. True
 * also while the head lags a finished or killed dequeue, until the next
 * dequeue helps it on (it may then find the queue empty); and, unlike
 * xq_count, true as soon as a producer killed before moving the tail has
 * published its value. Seq_cst loads: a waiter that announces itself with
 * a seq_cst RMW and then polls does not miss a producer that enqueues
 * and then looks for waiters with a seq_cst RMW (no lost wake-up). */
bool xq_ready(const struct xq *q);

uint64_t xq_capacity(const struct xq *q);

#endif /* XQ_H */
