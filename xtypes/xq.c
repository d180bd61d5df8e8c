/* SPDX-License-Identifier: MIT */
/*
 * xq: bounded MPMC queue of 32-bit indexes in shared memory, kill-safe.
 *
 * Layout (struct xq, then the cells): a 64-byte header line (magic, version,
 * capacity, mask), the enqueue position (tail) on its own cache line, the
 * dequeue position (head) on its own cache line, then capacity 64-bit cells.
 * No pointers anywhere, so any mapping address works.
 *
 * Cells and positions
 * -------------------
 * Positions are unbounded 64-bit counters; position p uses cell p & mask.
 * A cell is one 64-bit word (seq << 32) | value, where seq is a 32-bit lap
 * sequence. Writing P = (uint32_t)p, the cell of position p goes through
 *
 *   seq == P            free for the enqueue at p
 *   seq == P + 1        holds the value enqueued at p, not yet dequeued
 *   seq == P + cap      dequeued: free for the enqueue at p + cap
 *
 * Initially cell i has seq i (free for position i). Every change of a cell
 * is one CAS of the whole word, and each CAS moves seq forward along that
 * chain (cap >= 2 so P + cap != P + 1). The enqueue at p succeeds only by a
 * CAS from seq P to P + 1, the dequeue at p only by a CAS from P + 1 to
 * P + cap: each position is filled at most once and emptied at most once.
 * That CAS is the linearisation point of the operation: it both claims the
 * slot and publishes (or takes) the value, so there is no state in which a
 * slot is claimed but not yet written.
 *
 * The counters are only hints of where the next operation goes. The tail is
 * advanced from p to p + 1 (by CAS, so at most once) only by an operation
 * that saw position p filled: the producer that filled it, or any later
 * operation that finds the cell already filled ("helping"). So
 *   - the tail is either the first unfilled position or one behind it, and
 *     the head is the first unemptied position or one behind it;
 *   - an enqueue at p needs to have read tail == p, which needs p - 1 to be
 *     filled: positions are filled in order, and likewise emptied in order.
 * Hence values leave in the order they were put in (FIFO), and a process
 * killed at any instruction leaves one of: nothing changed, or its cell CAS
 * done with the counter one behind, which the next operation of any process
 * repairs. The value it was carrying is then queued (enqueue) or lost with
 * it (dequeue), as the header says.
 *
 * Classification
 * --------------
 * An operation loads its counter (pos), then the cell (for enqueue: the word
 * returned by its failed blind CAS, see Cost), and computes the
 * 32-bit distance d between the cell's seq and the seq it wants to see
 * (enqueue: P; dequeue: P + 1), in unsigned arithmetic. If the counter still
 * equals pos when the cell is read, the only possible values are:
 *
 *   enqueue:  d == 0           free: CAS it
 *             d == 1           filled at pos, tail not advanced: help
 *             d == cap         filled and already emptied, tail behind: help
 *             d == 2^32-cap+1  previous lap not yet dequeued: FULL
 *   dequeue:  d == 0           filled: CAS it
 *             d == cap - 1     emptied at pos, head not advanced: help
 *             d == cap         emptied and refilled one lap on: help
 *             d == 2^32-1      not yet filled: EMPTY
 *
 * (the cases with a counter behind exist only after an operation was
 * delayed or killed between its cell CAS and its counter CAS). We classify
 * d == 0 as ready, 1 <= d <= cap as behind (help) and anything else as
 * wait (full/empty). For every cap in 2 .. 2^31 those sets separate the
 * cases above: the largest "behind" value is cap and the smallest "wait"
 * value is 2^32 - cap + 1 > cap. A signed comparison (int32_t)d > 0 would
 * not: with cap = 2^31, d == cap is negative as an int32_t and a queue whose
 * tail (head) lags a completed operation would report full (empty) forever.
 *
 * If the counter moved after we loaded it, the reading is stale and may be
 * misclassified, but every action is then harmless: a help CAS of a moved
 * counter fails; "full"/"empty" is reported only after reloading the counter
 * and finding it unchanged (counters are monotonic 64-bit values, so
 * unchanged means unchanged throughout, and then the reading was current);
 * a cell CAS succeeds only if the cell's seq equals the one the position
 * needs. The exception is the documented ABA: seq is 32 bits, so an
 * operation stalled for 2^32 positions between loading its counter and its
 * cell CAS can find a cell whose truncated seq matches and fill or empty a
 * position out of turn.
 *
 * Full and empty are linearisable: "full" is returned when the tail equalled
 * pos throughout and cell pos - cap was filled but not emptied; since cells
 * empty in order, positions pos - cap .. pos - 1 were then all queued.
 * "Empty" is returned when the head equalled pos throughout and position pos
 * was unfilled; since cells fill in order, nothing after it was either.
 *
 * Progress (lock-free): an iteration that does not return retries only
 * because another operation's cell CAS succeeded (our CAS failed), or a
 * counter moved (stale reading), or it just moved a counter itself (help);
 * each of those is progress of the system, and counters can only lag by
 * one, so no process, live or dead, can block the others.
 *
 * Counter wrap: positions are 64-bit, so they do not wrap in practice; seq
 * wraps every 2^32 positions, and all the arithmetic above is modulo 2^32.
 * (Tests start the counters just below 2^32 to exercise this.)
 *
 * Memory ordering: all accesses are sequentially consistent __atomic
 * operations, so the reasoning above can use a single total order. The cell
 * CAS of an enqueue is a release and the cell load of the dequeue that takes
 * it an acquire: writes made before enqueuing an index are visible to its
 * consumer. On x86 a seq_cst load is a plain load, so this costs nothing
 * over acquire/release; the CASes are locked instructions in any case.
 *
 * Cost: two CASes per operation (cell, then counter) in the uncontended case.
 * Enqueue CASes the cell blind, expecting the free word (seq P, value 0),
 * and classifies the word the failed CAS returns, saving a shared read of a
 * line it is about to write (pinned on two cores: ~1.7x the transfers/s
 * of load-then-CAS). The price: a producer polling a full queue takes the
 * cell's line exclusive on each try, slowing the consumer it waits for;
 * callers should back off on -EAGAIN (the tests and benchmarks do).
 * Consecutive positions share cache lines (8 cells per line) on purpose: a
 * consumer that trails its producer by a few cells then takes up to eight
 * values per line transfer. Spreading them over lines (as LCRQ/SCQ do for
 * fetch-and-add queues) would cost one transfer per value in that regime and
 * save nothing in lockstep, where every value moves a line either way.
 */
#include "xq.h"
#include "xq_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#define XQ_MAGIC	0x78715f5155455545ULL /* "xq_QUEUE" */
#define XQ_VERSION	1u
#define XQ_MIN_CAPACITY 2ULL
#define XQ_MAX_CAPACITY (1ULL << 31)
#define XQ_ALIGN	64u

struct xq {
	_Alignas(64) uint64_t magic;
	uint32_t version;
	uint32_t reserved;
	uint64_t capacity;
	uint64_t mask;
	/* Producers and consumers each hammer one counter: keep them on
	 * separate lines from each other and from the read-mostly header. */
	_Alignas(64) uint64_t enqueue_pos;
	_Alignas(64) uint64_t dequeue_pos;
	_Alignas(64) uint64_t cells[];
};

_Static_assert(sizeof(struct xq) == 192, "xq header layout");

static inline void xq_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

static inline uint64_t xq_load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static inline bool xq_cas(uint64_t *p, uint64_t expected, uint64_t desired)
{
	return __atomic_compare_exchange_n(p, &expected, desired, false,
					   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static inline uint64_t *xq_cell_of(struct xq *q, uint64_t pos)
{
	return &q->cells[pos & q->mask];
}

static inline uint64_t xq_cell(uint64_t pos, uint32_t value)
{
	return ((uint64_t)(uint32_t)pos << 32) | value;
}

static inline bool xq_valid_capacity(uint64_t capacity)
{
	return capacity >= XQ_MIN_CAPACITY && capacity <= XQ_MAX_CAPACITY &&
	       (capacity & (capacity - 1)) == 0;
}

static inline enum xq_cell_state xq_classify(uint32_t d, uint64_t capacity)
{
	if (d == 0)
		return XQ_CELL_READY;
	if (d <= capacity)
		return XQ_CELL_BEHIND;
	return XQ_CELL_WAIT;
}

enum xq_cell_state xq_classify_enqueue(uint32_t seq, uint64_t pos,
				       uint64_t capacity)
{
	return xq_classify(seq - (uint32_t)pos, capacity);
}

enum xq_cell_state xq_classify_dequeue(uint32_t seq, uint64_t pos,
				       uint64_t capacity)
{
	return xq_classify(seq - (uint32_t)(pos + 1), capacity);
}

size_t xq_size(uint64_t capacity)
{
	if (!xq_valid_capacity(capacity))
		return 0;
	if (capacity > (SIZE_MAX - sizeof(struct xq)) / sizeof(uint64_t))
		return 0;
	return sizeof(struct xq) + (size_t)capacity * sizeof(uint64_t);
}

int xq_init(struct xq *q, uint64_t capacity, size_t mem_size)
{
	size_t need = xq_size(capacity);

	if (!q || need == 0 || mem_size < need ||
	    ((uintptr_t)q & (XQ_ALIGN - 1)) != 0)
		return -EINVAL;

	q->version = XQ_VERSION;
	q->reserved = 0;
	q->capacity = capacity;
	q->mask = capacity - 1;
	for (uint64_t i = 0; i < capacity; i++)
		__atomic_store_n(xq_cell_of(q, i), xq_cell(i, 0),
				 __ATOMIC_RELAXED);
	__atomic_store_n(&q->enqueue_pos, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&q->dequeue_pos, 0, __ATOMIC_RELAXED);
	/* Publish last: whoever sees the magic through an acquire (or a later
	 * synchronisation such as the segment's own) sees a whole queue. */
	__atomic_store_n(&q->magic, XQ_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

/* advance == false stops after the cell CAS (test hook: a killed producer) */
static int xq_enqueue_one(struct xq *q, xqindex v, bool advance)
{
	const uint64_t cap = q->capacity;

	assert(q->magic == XQ_MAGIC);
	for (;;) {
		uint64_t pos = xq_load(&q->enqueue_pos);
		uint64_t *cell = xq_cell_of(q, pos);
		uint64_t w = xq_cell(pos, 0);

		/* A free cell always holds value 0 (init and dequeue write
		 * it), so CAS blind first: one exclusive fetch of the line
		 * instead of a shared read and then an upgrade (see Cost).
		 * On failure w holds the cell's current word, read
		 * atomically by the CAS. */
		if (__atomic_compare_exchange_n(cell, &w, xq_cell(pos + 1, v),
						false, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST)) {
			/* Fails only if someone already helped. */
			if (advance)
				xq_cas(&q->enqueue_pos, pos, pos + 1);
			return 0;
		}
		switch (xq_classify_enqueue((uint32_t)(w >> 32), pos, cap)) {
		case XQ_CELL_READY:
			/* Free with a non-zero value: not made by this code,
			 * but still this position's slot. */
			if (xq_cas(cell, w, xq_cell(pos + 1, v))) {
				if (advance)
					xq_cas(&q->enqueue_pos, pos, pos + 1);
				return 0;
			}
			xq_cpu_relax();
			break;
		case XQ_CELL_BEHIND:
			xq_cas(&q->enqueue_pos, pos, pos + 1);
			break;
		case XQ_CELL_WAIT:
			if (xq_load(&q->enqueue_pos) == pos)
				return -EAGAIN;
			break;
		}
	}
}

/* Prefetch one line for writing. On x86 PREFETCHW, written out because
 * without -mprfchw GCC turns __builtin_prefetch(p, 1) into a read prefetch
 * (a shared copy, then the CAS waits for the upgrade); CPUs without it run
 * its opcode (0F 0D) as a NOP. */
static inline void xq_prefetchw(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ __volatile__("prefetchw %0" : : "m"(*(const char *)p));
#else
	__builtin_prefetch(p, 1, 3);
#endif
}

/* Prefetch (for writing) the object value v names. Only a hint: no
 * access is made, so nothing about the queue's guarantees depends on it;
 * a value out of the range is not prefetched (a prefetch of a wild address
 * would not fault, but computing it would be undefined behaviour). */
static inline void xq_prefetch_obj(const struct xq_prefetch *pf, uint32_t v)
{
	const char *o;

	if (!pf || v >= pf->count || !pf->lines)
		return;
	o = (const char *)pf->base + (size_t)v * pf->stride;
	xq_prefetchw(o);
	if (pf->lines > 1)
		xq_prefetchw(o + 64);
}

/* advance == false stops after the cell CAS (test hook: a killed consumer) */
static int xq_dequeue_one(struct xq *q, xqindex *v, bool advance,
			  const struct xq_prefetch *pf)
{
	const uint64_t cap = q->capacity;

	assert(q->magic == XQ_MAGIC);
	for (;;) {
		uint64_t pos = xq_load(&q->dequeue_pos);
		uint64_t *cell = xq_cell_of(q, pos);
		uint64_t w = xq_load(cell);

		switch (xq_classify_dequeue((uint32_t)(w >> 32), pos, cap)) {
		case XQ_CELL_READY:
			/* The value is known before we own it: start the
			 * transfer of the line the caller will CAS next, so
			 * it overlaps the cell CAS's (which waits for its
			 * own line). */
			xq_prefetch_obj(pf, (uint32_t)w);
			if (xq_cas(cell, w, xq_cell(pos + cap, 0))) {
				if (advance)
					xq_cas(&q->dequeue_pos, pos, pos + 1);
				*v = (uint32_t)w;
				return 0;
			}
			xq_cpu_relax();
			break;
		case XQ_CELL_BEHIND:
			xq_cas(&q->dequeue_pos, pos, pos + 1);
			break;
		case XQ_CELL_WAIT:
			if (xq_load(&q->dequeue_pos) == pos)
				return -EAGAIN;
			break;
		}
	}
}

int xq_enqueue(struct xq *q, xqindex v)
{
	return xq_enqueue_one(q, v, true);
}

int xq_dequeue(struct xq *q, xqindex *v)
{
	return xq_dequeue_one(q, v, true, NULL);
}

int xq_dequeue_prefetch(struct xq *q, xqindex *v, const struct xq_prefetch *pf)
{
	return xq_dequeue_one(q, v, true, pf);
}

/* Batches are loops of single operations: each value is its own
 * linearisable enqueue/dequeue, so values of concurrent callers may
 * interleave with a batch, but a batch's own values keep their order. */
unsigned xq_enqueue_batch(struct xq *q, const xqindex *v, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (xq_enqueue_one(q, v[i], true) != 0)
			break;
	return i;
}

unsigned xq_dequeue_batch(struct xq *q, xqindex *v, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (xq_dequeue_one(q, &v[i], true, NULL) != 0)
			break;
	return i;
}

uint64_t xq_count(const struct xq *q)
{
	/* Head first: it only grows, so reading it before the tail can only
	 * overestimate, and the clamp bounds that. Each counter may lag by one
	 * after a killed or delayed operation. */
	uint64_t head = xq_load(&q->dequeue_pos);
	uint64_t tail = xq_load(&q->enqueue_pos);

	/* Signed distance: also right across the (theoretical) 2^64 wrap. */
	int64_t queued = (int64_t)(tail - head);

	if (queued <= 0)
		return 0;
	if ((uint64_t)queued > q->capacity)
		return q->capacity;
	return (uint64_t)queued;
}

bool xq_ready(const struct xq *q)
{
	uint64_t pos = xq_load(&q->dequeue_pos);
	uint64_t w = xq_load(&q->cells[pos & q->mask]);

	/* READY: filled at pos. BEHIND: the head lags a taken cell (maybe
	 * with a value after it): let the caller's dequeue help and see.
	 * WAIT: pos not filled, and positions fill in order (see the top). */
	return xq_classify_dequeue((uint32_t)(w >> 32), pos, q->capacity) !=
	       XQ_CELL_WAIT;
}

uint64_t xq_capacity(const struct xq *q)
{
	return q->capacity;
}

/* ---- test hooks (xq_internal.h) ---- */

int xq_test_set_position(struct xq *q, uint64_t pos)
{
	const uint64_t cap = q->capacity;
	uint64_t tail = xq_load(&q->enqueue_pos);
	uint64_t head = xq_load(&q->dequeue_pos);

	if (tail != head)
		return -EINVAL;
	/* Cell j serves next the first position >= pos that maps to it. */
	for (uint64_t k = 0; k < cap; k++) {
		uint64_t p = pos + k;

		__atomic_store_n(xq_cell_of(q, p), xq_cell(p, 0),
				 __ATOMIC_SEQ_CST);
	}
	__atomic_store_n(&q->enqueue_pos, pos, __ATOMIC_SEQ_CST);
	__atomic_store_n(&q->dequeue_pos, pos, __ATOMIC_SEQ_CST);
	return 0;
}

int xq_test_enqueue_publish_only(struct xq *q, xqindex v)
{
	return xq_enqueue_one(q, v, false);
}

int xq_test_dequeue_take_only(struct xq *q, xqindex *v)
{
	return xq_dequeue_one(q, v, false, NULL);
}

uint64_t xq_test_enqueue_pos(const struct xq *q)
{
	return xq_load(&q->enqueue_pos);
}

uint64_t xq_test_dequeue_pos(const struct xq *q)
{
	return xq_load(&q->dequeue_pos);
}
