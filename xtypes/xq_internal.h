/* SPDX-License-Identifier: MIT */
#ifndef XQ_INTERNAL_H
#define XQ_INTERNAL_H
/*
 * xq internals exposed for tests only: they let a test put a queue into the
 * states a killed process leaves behind, and start the position counters
 * near the 2^32 wrap of the 32-bit lap sequence. Not for production callers.
 */
#include <stdint.h>

#include "xq.h"

/* How an operation reads the sequence of the cell at its position, relative
 * to the position counter it loaded (see the comment block in xq.c). */
enum xq_cell_state {
	XQ_CELL_READY,	/* the operation may CAS the cell */
	XQ_CELL_BEHIND, /* counter lags a completed operation: help advance */
	XQ_CELL_WAIT,	/* enqueue: full; dequeue: empty (if counter unmoved) */
};

/* Classify a cell's sequence seq for an enqueue at position pos. */
enum xq_cell_state xq_classify_enqueue(uint32_t seq, uint64_t pos,
				       uint64_t capacity);

/* Classify a cell's sequence seq for a dequeue at position pos. */
enum xq_cell_state xq_classify_dequeue(uint32_t seq, uint64_t pos,
				       uint64_t capacity);

/* Reset an EMPTY, quiescent queue so both counters equal pos and every cell
 * carries the sequence of the next position that will use it. Returns 0 or
 * -EINVAL if the queue is not empty. */
int xq_test_set_position(struct xq *q, uint64_t pos);

/* Enqueue that stops right after the cell CAS, as a producer killed before
 * advancing the tail would: the value is queued, the tail counter lags. */
int xq_test_enqueue_publish_only(struct xq *q, xqindex v);

/* Dequeue that stops right after the cell CAS, as a consumer killed before
 * advancing the head would: the value is taken, the head counter lags. */
int xq_test_dequeue_take_only(struct xq *q, xqindex *v);

/* Raw counters (tail = enqueue position, head = dequeue position). */
uint64_t xq_test_enqueue_pos(const struct xq *q);
uint64_t xq_test_dequeue_pos(const struct xq *q);

#endif /* XQ_INTERNAL_H */
