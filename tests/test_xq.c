/* SPDX-License-Identifier: MIT */
/* xq single-threaded behaviour: validation, FIFO, full/empty, batches, lap
 * and 32-bit sequence wrap, and the states a killed process leaves. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xq.h"
#include "xq_internal.h"

static struct xq *alloc_q(uint64_t cap, size_t *size_out)
{
	size_t size = xq_size(cap);
	void *mem = NULL;

	ck_assert_uint_gt(size, 0);
	ck_assert_int_eq(posix_memalign(&mem, 64, size), 0);
	memset(mem, 0xa5, size);
	ck_assert_int_eq(xq_init(mem, cap, size), 0);
	if (size_out)
		*size_out = size;
	return mem;
}

START_TEST(test_size)
{
	ck_assert_uint_eq(xq_size(0), 0);
	ck_assert_uint_eq(xq_size(1), 0);
	ck_assert_uint_eq(xq_size(3), 0);
	ck_assert_uint_eq(xq_size(1000), 0);
	ck_assert_uint_eq(xq_size(1ULL << 32), 0);
	ck_assert_uint_eq(xq_size(UINT64_MAX), 0);
	ck_assert_uint_gt(xq_size(2), 0);
	ck_assert_uint_gt(xq_size(1ULL << 31), 0);
	ck_assert_uint_eq(xq_size(1024) - xq_size(512), 512 * 8);
}
END_TEST

START_TEST(test_init_invalid)
{
	size_t size = xq_size(8);
	unsigned char *mem = NULL, *copy = malloc(size + 64);

	ck_assert_ptr_nonnull(copy);
	ck_assert_int_eq(posix_memalign((void **)&mem, 64, size + 64), 0);
	memset(mem, 0x5a, size + 64);
	memcpy(copy, mem, size + 64);

	ck_assert_int_eq(xq_init(NULL, 8, size), -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)mem, 0, size), -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)mem, 1, size), -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)mem, 6, size), -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)mem, 1ULL << 32, SIZE_MAX),
			 -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)mem, 8, size - 1), -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)mem, 8, 0), -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)(mem + 8), 8, size), -EINVAL);
	ck_assert_int_eq(xq_init((struct xq *)(mem + 32), 8, size), -EINVAL);
	/* Refused inputs leave the memory untouched. */
	ck_assert_mem_eq(mem, copy, size + 64);

	ck_assert_int_eq(xq_init((struct xq *)mem, 8, size), 0);
	ck_assert_uint_eq(xq_capacity((struct xq *)mem), 8);
	ck_assert_uint_eq(xq_count((struct xq *)mem), 0);
	free(mem);
	free(copy);
}
END_TEST

START_TEST(test_fifo)
{
	struct xq *q = alloc_q(16, NULL);
	xqindex v;

	for (xqindex i = 0; i < 10; i++) {
		ck_assert_int_eq(xq_enqueue(q, i * 7 + 1), 0);
		ck_assert_uint_eq(xq_count(q), i + 1);
	}
	for (xqindex i = 0; i < 10; i++) {
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, i * 7 + 1);
	}
	ck_assert_uint_eq(xq_count(q), 0);
	free(q);
}
END_TEST

START_TEST(test_full_empty)
{
	struct xq *q = alloc_q(4, NULL);
	xqindex v = 12345;

	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(v, 12345); /* untouched on failure */
	for (xqindex i = 0; i < 4; i++)
		ck_assert_int_eq(xq_enqueue(q, 100 + i), 0);
	ck_assert_uint_eq(xq_count(q), 4);
	ck_assert_int_eq(xq_enqueue(q, 999), -EAGAIN);
	ck_assert_int_eq(xq_enqueue(q, 998), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), 4);
	/* Refused enqueues changed nothing: the original four come out. */
	for (xqindex i = 0; i < 4; i++) {
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, 100 + i);
	}
	v = 777;
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(v, 777);
	ck_assert_uint_eq(xq_count(q), 0);
	free(q);
}
END_TEST

START_TEST(test_min_capacity)
{
	struct xq *q = alloc_q(2, NULL);
	xqindex v;

	for (unsigned lap = 0; lap < 1000; lap++) {
		ck_assert_int_eq(xq_enqueue(q, lap), 0);
		ck_assert_int_eq(xq_enqueue(q, lap + 1), 0);
		ck_assert_int_eq(xq_enqueue(q, 0), -EAGAIN);
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, lap);
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, lap + 1);
		ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	}
	free(q);
}
END_TEST

START_TEST(test_special_values)
{
	struct xq *q = alloc_q(8, NULL);
	xqindex v = 42;

	ck_assert_int_eq(xq_enqueue(q, XQ_NONE), 0);
	ck_assert_int_eq(xq_enqueue(q, 0), 0);
	ck_assert_int_eq(xq_enqueue(q, XQ_NONE - 1), 0);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, XQ_NONE);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, XQ_NONE - 1);
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	free(q);
}
END_TEST

START_TEST(test_batch)
{
	struct xq *q = alloc_q(8, NULL);
	xqindex in[12], out[12];

	for (unsigned i = 0; i < 12; i++)
		in[i] = 1000 + i;
	ck_assert_uint_eq(xq_enqueue_batch(q, in, 0), 0);
	ck_assert_uint_eq(xq_enqueue_batch(q, in, 5), 5);
	/* Stops at full: only 3 of the next 7 fit. */
	ck_assert_uint_eq(xq_enqueue_batch(q, in + 5, 7), 3);
	ck_assert_uint_eq(xq_count(q), 8);
	ck_assert_uint_eq(xq_enqueue_batch(q, in, 1), 0);

	memset(out, 0, sizeof(out));
	ck_assert_uint_eq(xq_dequeue_batch(q, out, 0), 0);
	ck_assert_uint_eq(xq_dequeue_batch(q, out, 3), 3);
	ck_assert_uint_eq(xq_dequeue_batch(q, out + 3, 12), 5);
	for (unsigned i = 0; i < 8; i++)
		ck_assert_uint_eq(out[i], 1000 + i);
	ck_assert_uint_eq(xq_dequeue_batch(q, out, 4), 0);
	ck_assert_uint_eq(xq_count(q), 0);
	free(q);
}
END_TEST

/* Per-operation checks without ck_assert: each passing ck_assert sends a
 * message to the Check runner, far too slow for 10^5 operations. */
#define EXPECT(cond)                                                           \
	do {                                                                   \
		if (!(cond))                                                   \
			ck_abort_msg("op %u: %s", i, #cond);                   \
	} while (0)

/* Many laps with a varying fill level: every value comes back in order. */
static void run_laps(struct xq *q, unsigned ops, uint32_t seed)
{
	uint64_t cap = xq_capacity(q);
	xqindex next_in = seed, next_out = seed, v;
	uint64_t queued = 0;
	unsigned rnd = seed | 1, i;

	for (i = 0; i < ops; i++) {
		rnd = rnd * 1103515245u + 12345u;
		if ((rnd >> 16) & 1) {
			int r = xq_enqueue(q, next_in);

			if (queued == cap) {
				EXPECT(r == -EAGAIN);
			} else {
				EXPECT(r == 0);
				next_in++;
				queued++;
			}
		} else {
			int r = xq_dequeue(q, &v);

			if (queued == 0) {
				EXPECT(r == -EAGAIN);
			} else {
				EXPECT(r == 0);
				EXPECT(v == next_out);
				next_out++;
				queued--;
			}
		}
		EXPECT(xq_count(q) == queued);
	}
	while (queued--) {
		EXPECT(xq_dequeue(q, &v) == 0);
		EXPECT(v == next_out);
		next_out++;
	}
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(next_in, next_out);
}

START_TEST(test_wrap_laps)
{
	struct xq *q = alloc_q(4, NULL);

	run_laps(q, 200000, 7);
	ck_assert_uint_gt(xq_test_enqueue_pos(q), 1000);
	free(q);
	/* Capacities below, at and above the 8 cells of a cache line. */
	q = alloc_q(16, NULL);
	run_laps(q, 100000, 5);
	free(q);
	q = alloc_q(64, NULL);
	run_laps(q, 200000, 11);
	free(q);
	q = alloc_q(4096, NULL);
	run_laps(q, 200000, 13);
	free(q);
}
END_TEST

/* The 32-bit lap sequence wraps while the 64-bit positions cross 2^32. */
START_TEST(test_seq_wrap)
{
	static const uint64_t starts[] = {
	    (1ULL << 32) - 3, (1ULL << 32) - 64, (1ULL << 33) - 5,
	    UINT64_MAX - 300, /* even the 64-bit counters wrap cleanly */
	};
	static const uint64_t caps[] = {2, 4, 8, 64};

	for (unsigned c = 0; c < 4; c++) {
		for (unsigned s = 0; s < 4; s++) {
			struct xq *q = alloc_q(caps[c], NULL);

			ck_assert_int_eq(xq_test_set_position(q, starts[s]), 0);
			ck_assert_uint_eq(xq_test_enqueue_pos(q), starts[s]);
			ck_assert_uint_eq(xq_count(q), 0);
			run_laps(q, 5000, 3 + s);
			/* We really crossed the 32-bit boundary. */
			ck_assert_uint_gt(xq_test_enqueue_pos(q) - starts[s],
					  300);
			free(q);
		}
	}
}
END_TEST

START_TEST(test_seq_wrap_full)
{
	struct xq *q = alloc_q(8, NULL);
	xqindex v;

	/* Full with the cells straddling the wrap. */
	ck_assert_int_eq(xq_test_set_position(q, (1ULL << 32) - 4), 0);
	for (xqindex i = 0; i < 8; i++)
		ck_assert_int_eq(xq_enqueue(q, i), 0);
	ck_assert_int_eq(xq_enqueue(q, 99), -EAGAIN);
	for (xqindex i = 0; i < 8; i++) {
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, i);
	}
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_int_eq(xq_enqueue(q, 5), 0);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 5);
	free(q);
}
END_TEST

START_TEST(test_set_position_refuses_nonempty)
{
	struct xq *q = alloc_q(8, NULL);
	xqindex v;

	ck_assert_int_eq(xq_enqueue(q, 1), 0);
	ck_assert_int_eq(xq_test_set_position(q, 1000), -EINVAL);
	ck_assert_uint_eq(xq_count(q), 1);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 1);
	free(q);
}
END_TEST

/* Classification of every reachable (seq, pos) case, including cap = 2^31
 * where a signed distance would mistake "behind by a lap" for "full". */
START_TEST(test_classify)
{
	static const uint64_t caps[] = {2, 4, 1024, 1ULL << 30, 1ULL << 31};
	static const uint64_t positions[] = {0, 5, (1ULL << 32) - 1,
					     (1ULL << 32) + 7, UINT64_MAX - 2};

	for (unsigned c = 0; c < 5; c++) {
		for (unsigned p = 0; p < 5; p++) {
			uint64_t cap = caps[c], pos = positions[p];

			ck_assert_int_eq(
			    xq_classify_enqueue((uint32_t)pos, pos, cap),
			    XQ_CELL_READY);
			ck_assert_int_eq(
			    xq_classify_enqueue((uint32_t)(pos + 1), pos, cap),
			    XQ_CELL_BEHIND);
			ck_assert_int_eq(xq_classify_enqueue(
					     (uint32_t)(pos + cap), pos, cap),
					 XQ_CELL_BEHIND);
			ck_assert_int_eq(
			    xq_classify_enqueue((uint32_t)(pos - cap + 1), pos,
						cap),
			    XQ_CELL_WAIT);

			ck_assert_int_eq(
			    xq_classify_dequeue((uint32_t)(pos + 1), pos, cap),
			    XQ_CELL_READY);
			ck_assert_int_eq(xq_classify_dequeue(
					     (uint32_t)(pos + cap), pos, cap),
					 XQ_CELL_BEHIND);
			ck_assert_int_eq(
			    xq_classify_dequeue((uint32_t)(pos + cap + 1), pos,
						cap),
			    XQ_CELL_BEHIND);
			ck_assert_int_eq(
			    xq_classify_dequeue((uint32_t)pos, pos, cap),
			    XQ_CELL_WAIT);
		}
	}
}
END_TEST

/* Kill window 1: a producer published its cell and died before advancing
 * the tail. The next enqueue helps and lands after it; nothing is lost. */
START_TEST(test_dead_producer)
{
	struct xq *q = alloc_q(8, NULL);
	xqindex v;

	ck_assert_int_eq(xq_enqueue(q, 10), 0);
	ck_assert_int_eq(xq_test_enqueue_publish_only(q, 11), 0);
	ck_assert_uint_eq(xq_test_enqueue_pos(q), 1); /* tail lags */
	ck_assert_uint_eq(xq_count(q), 1);
	ck_assert_int_eq(xq_enqueue(q, 12), 0);
	ck_assert_uint_eq(xq_test_enqueue_pos(q), 3); /* helped + own */
	ck_assert_uint_eq(xq_count(q), 3);
	for (xqindex i = 10; i <= 12; i++) {
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, i);
	}
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);

	/* A dequeue alone (no later producer) also sees the orphan value. */
	ck_assert_int_eq(xq_test_enqueue_publish_only(q, 13), 0);
	ck_assert_uint_eq(xq_count(q), 0);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 13);
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	/* Now the tail lags a filled-and-emptied cell (distance == cap). */
	ck_assert_uint_eq(xq_test_enqueue_pos(q), 3);
	ck_assert_int_eq(xq_enqueue(q, 14), 0);
	ck_assert_uint_eq(xq_test_enqueue_pos(q), 5);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 14);
	ck_assert_uint_eq(xq_count(q), 0);
	free(q);
}
END_TEST

/* The dead producer took the last free slot: full must be reported (after
 * helping), not a spurious success or a hang. */
START_TEST(test_dead_producer_full)
{
	struct xq *q = alloc_q(4, NULL);
	xqindex v;

	for (xqindex i = 0; i < 3; i++)
		ck_assert_int_eq(xq_enqueue(q, i), 0);
	ck_assert_int_eq(xq_test_enqueue_publish_only(q, 3), 0);
	ck_assert_int_eq(xq_enqueue(q, 4), -EAGAIN);
	ck_assert_uint_eq(xq_test_enqueue_pos(q), 4);
	ck_assert_uint_eq(xq_count(q), 4);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(xq_enqueue(q, 4), 0);
	for (xqindex i = 1; i <= 4; i++) {
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, i);
	}
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	free(q);
}
END_TEST

/* Kill window 2: a consumer took its cell and died before advancing the
 * head. Its value is gone (it had it), the next dequeue helps and returns
 * the following value, never the taken one again. */
START_TEST(test_dead_consumer)
{
	struct xq *q = alloc_q(4, NULL);
	xqindex v;

	for (xqindex i = 0; i < 4; i++)
		ck_assert_int_eq(xq_enqueue(q, 20 + i), 0);
	ck_assert_int_eq(xq_test_dequeue_take_only(q, &v), 0);
	ck_assert_uint_eq(v, 20);
	ck_assert_uint_eq(xq_test_dequeue_pos(q), 0); /* head lags */
	ck_assert_uint_eq(xq_count(q), 4);
	/* The freed slot is usable by producers although the head lags:
	 * the cell distance seen by the next dequeue is then cap. */
	ck_assert_int_eq(xq_enqueue(q, 24), 0);
	ck_assert_int_eq(xq_enqueue(q, 25), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), 4); /* 5 - 0 clamped to capacity */
	for (xqindex i = 21; i <= 24; i++) {
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, i);
	}
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), 0);

	/* Dead consumer on the last value: empty is reported after help. */
	ck_assert_int_eq(xq_enqueue(q, 30), 0);
	ck_assert_int_eq(xq_test_dequeue_take_only(q, &v), 0);
	ck_assert_uint_eq(v, 30);
	ck_assert_uint_eq(xq_count(q), 1);
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), 0);
	free(q);
}
END_TEST

/* Both counters lag at once (producer and consumer of the same value died),
 * near the 32-bit sequence wrap. */
START_TEST(test_dead_both_at_wrap)
{
	struct xq *q = alloc_q(2, NULL);
	xqindex v;

	ck_assert_int_eq(xq_test_set_position(q, (1ULL << 32) - 1), 0);
	ck_assert_int_eq(xq_test_enqueue_publish_only(q, 40), 0);
	ck_assert_int_eq(xq_test_dequeue_take_only(q, &v), 0);
	ck_assert_uint_eq(v, 40);
	ck_assert_uint_eq(xq_test_enqueue_pos(q), (1ULL << 32) - 1);
	ck_assert_uint_eq(xq_test_dequeue_pos(q), (1ULL << 32) - 1);
	for (xqindex i = 41; i < 141; i++) {
		ck_assert_int_eq(xq_enqueue(q, i), 0);
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, i);
	}
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), 0);
	ck_assert_uint_eq(xq_test_enqueue_pos(q), (1ULL << 32) + 100);
	free(q);
}
END_TEST

/* xq_dequeue_prefetch is xq_dequeue plus a hint: same values, same order,
 * same empty result (value untouched), the named objects untouched, and
 * values outside the prefetch range (stale or corrupt indexes) still
 * dequeued, with every pf variant, mixed with plain dequeues and across a
 * lagging head (the help path). */
START_TEST(test_dequeue_prefetch)
{
	enum { NOBJ = 8, STRIDE = 192 };
	static const uint32_t lines[] = {0, 1, 2, 5};
	const xqindex vals[] = {3, NOBJ,     0, UINT32_MAX,
				7, 1u << 30, 5, NOBJ - 1};
	const unsigned nv = sizeof(vals) / sizeof(vals[0]);
	unsigned char *objs = malloc(NOBJ * STRIDE),
		      *copy = malloc(NOBJ * STRIDE);
	struct xq *q = alloc_q(16, NULL);
	xqindex v;

	ck_assert_ptr_nonnull(objs);
	ck_assert_ptr_nonnull(copy);
	for (unsigned i = 0; i < NOBJ * STRIDE; i++)
		objs[i] = (unsigned char)(i * 31 + 7);
	memcpy(copy, objs, NOBJ * STRIDE);
	for (unsigned k = 0; k <= 4; k++) {
		struct xq_prefetch pf = {objs, STRIDE, NOBJ, 0};
		const struct xq_prefetch *pp = k < 4 ? &pf : NULL;

		if (k < 4)
			pf.lines = lines[k];
		v = 4242;
		ck_assert_int_eq(xq_dequeue_prefetch(q, &v, pp), -EAGAIN);
		ck_assert_uint_eq(v, 4242);
		for (unsigned i = 0; i < nv; i++)
			ck_assert_int_eq(xq_enqueue(q, vals[i]), 0);
		for (unsigned i = 0; i < nv; i++) {
			/* every third a plain dequeue: one FIFO for both */
			if (i % 3 == 2)
				ck_assert_int_eq(xq_dequeue(q, &v), 0);
			else
				ck_assert_int_eq(xq_dequeue_prefetch(q, &v, pp),
						 0);
			ck_assert_uint_eq(v, vals[i]);
		}
		ck_assert_uint_eq(xq_count(q), 0);
		/* A consumer died after its cell CAS: the prefetching
		 * dequeue helps the head on and takes the next value. */
		ck_assert_int_eq(xq_enqueue(q, 1), 0);
		ck_assert_int_eq(xq_enqueue(q, 2), 0);
		ck_assert_int_eq(xq_test_dequeue_take_only(q, &v), 0);
		ck_assert_uint_eq(v, 1);
		ck_assert_int_eq(xq_dequeue_prefetch(q, &v, pp), 0);
		ck_assert_uint_eq(v, 2);
		v = 4343;
		ck_assert_int_eq(xq_dequeue_prefetch(q, &v, pp), -EAGAIN);
		ck_assert_uint_eq(v, 4343);
		ck_assert_uint_eq(xq_test_dequeue_pos(q),
				  xq_test_enqueue_pos(q));
	}
	ck_assert_mem_eq(objs, copy, NOBJ * STRIDE);
	free(objs);
	free(copy);
	free(q);
}
END_TEST

/* xq_ready: false exactly when the head's cell is unfilled; true for a
 * value published by a producer killed before its tail CAS (xq_count still
 * 0), and, conservatively, while the head lags a killed consumer's take
 * (until a dequeue helps). Never changes the queue. */
START_TEST(test_ready)
{
	struct xq *q = alloc_q(4, NULL);
	xqindex v;

	ck_assert(!xq_ready(q));
	ck_assert_int_eq(xq_enqueue(q, 9), 0);
	ck_assert(xq_ready(q));
	ck_assert(xq_ready(q)); /* a look, not a take */
	ck_assert_uint_eq(xq_count(q), 1);
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 9);
	ck_assert(!xq_ready(q));

	/* dead producer: the value is in its cell, the tail lags */
	ck_assert_int_eq(xq_test_enqueue_publish_only(q, 11), 0);
	ck_assert_uint_eq(xq_count(q), 0);
	ck_assert(xq_ready(q));
	ck_assert_int_eq(xq_dequeue(q, &v), 0);
	ck_assert_uint_eq(v, 11);
	ck_assert(!xq_ready(q));

	/* dead consumer of the last value: the head lags */
	ck_assert_int_eq(xq_enqueue(q, 12), 0);
	ck_assert_int_eq(xq_test_dequeue_take_only(q, &v), 0);
	ck_assert_uint_eq(v, 12);
	ck_assert(xq_ready(q));
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN); /* helps the head on */
	ck_assert(!xq_ready(q));

	/* full queue, and across laps and the 32-bit sequence wrap */
	for (xqindex i = 0; i < 4; i++)
		ck_assert_int_eq(xq_enqueue(q, i), 0);
	for (xqindex i = 0; i < 4; i++) {
		ck_assert(xq_ready(q));
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, i);
	}
	ck_assert(!xq_ready(q));
	ck_assert_int_eq(xq_test_set_position(q, 0xfffffffeULL), 0);
	ck_assert(!xq_ready(q));
	for (unsigned lap = 0; lap < 3; lap++) {
		ck_assert_int_eq(xq_enqueue(q, 100 + lap), 0);
		ck_assert_int_eq(xq_enqueue(q, 200 + lap), 0);
		ck_assert(xq_ready(q));
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, 100 + lap);
		ck_assert(xq_ready(q));
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, 200 + lap);
		ck_assert(!xq_ready(q));
	}
	free(q);
}
END_TEST

static Suite *xq_suite(void)
{
	Suite *s = suite_create("xq");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_size);
	tcase_add_test(tc, test_init_invalid);
	tcase_add_test(tc, test_fifo);
	tcase_add_test(tc, test_full_empty);
	tcase_add_test(tc, test_min_capacity);
	tcase_add_test(tc, test_special_values);
	tcase_add_test(tc, test_batch);
	tcase_add_test(tc, test_wrap_laps);
	tcase_add_test(tc, test_seq_wrap);
	tcase_add_test(tc, test_seq_wrap_full);
	tcase_add_test(tc, test_set_position_refuses_nonempty);
	tcase_add_test(tc, test_classify);
	tcase_add_test(tc, test_dead_producer);
	tcase_add_test(tc, test_dead_producer_full);
	tcase_add_test(tc, test_dead_consumer);
	tcase_add_test(tc, test_dead_both_at_wrap);
	tcase_add_test(tc, test_dequeue_prefetch);
	tcase_add_test(tc, test_ready);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(xq_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
