/* SPDX-License-Identifier: MIT */
/* xq with 2 producer and 2 consumer threads: every value arrives exactly
 * once and each consumer sees each producer's values in order. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_xq_util.h"
#include "xq.h"
#include "xq_internal.h"

#define PRODUCERS 2
#define CONSUMERS 2

struct stress {
	struct xq *q;
	uint32_t per_producer;
	uint64_t total;
	uint64_t received;	 /* atomic */
	uint64_t producers_done; /* atomic: set once all producers joined */
	/* seen[c][p][seq]: how often consumer c got value (p, seq) */
	uint8_t *seen[CONSUMERS][PRODUCERS];
	uint64_t order_errors[CONSUMERS];
	uint64_t foreign_values[CONSUMERS];
};

struct worker {
	struct stress *st;
	unsigned id;
};

static void *producer(void *arg)
{
	struct worker *w = arg;
	struct stress *st = w->st;
	unsigned fails = 0;

	for (uint32_t s = 0; s < st->per_producer; s++) {
		while (xq_enqueue(st->q, TXQ_VALUE(w->id, s)) != 0)
			txq_wait(&fails);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct worker *w = arg;
	struct stress *st = w->st;
	int64_t last[PRODUCERS];
	unsigned fails = 0;
	xqindex v;

	for (unsigned p = 0; p < PRODUCERS; p++)
		last[p] = -1;
	for (;;) {
		/* Stop on empty only once no producer is left: a lost value
		 * then shows up as missing instead of as a hang. */
		uint64_t done =
		    __atomic_load_n(&st->producers_done, __ATOMIC_ACQUIRE);

		if (xq_dequeue(st->q, &v) != 0) {
			if (done)
				break;
			txq_wait(&fails);
			continue;
		}
		__atomic_fetch_add(&st->received, 1, __ATOMIC_RELAXED);
		unsigned p = TXQ_PRODUCER(v);
		uint32_t s = TXQ_SEQ(v);

		if (p >= PRODUCERS || s >= st->per_producer) {
			st->foreign_values[w->id]++;
			continue;
		}
		if ((int64_t)s <= last[p])
			st->order_errors[w->id]++;
		last[p] = s;
		if (st->seen[w->id][p][s] < UINT8_MAX)
			st->seen[w->id][p][s]++;
	}
	return NULL;
}

static void run_stress(uint64_t capacity, uint32_t per_producer,
		       uint64_t start_pos)
{
	struct stress st;
	struct worker prod[PRODUCERS], cons[CONSUMERS];
	pthread_t pt[PRODUCERS], ct[CONSUMERS];
	size_t size = xq_size(capacity);
	xqindex v;

	memset(&st, 0, sizeof(st));
	ck_assert_int_eq(posix_memalign((void **)&st.q, 64, size), 0);
	ck_assert_int_eq(xq_init(st.q, capacity, size), 0);
	ck_assert_int_eq(xq_test_set_position(st.q, start_pos), 0);
	st.per_producer = per_producer;
	st.total = (uint64_t)per_producer * PRODUCERS;
	for (unsigned c = 0; c < CONSUMERS; c++)
		for (unsigned p = 0; p < PRODUCERS; p++) {
			st.seen[c][p] = calloc(per_producer, 1);
			ck_assert_ptr_nonnull(st.seen[c][p]);
		}

	for (unsigned c = 0; c < CONSUMERS; c++) {
		cons[c] = (struct worker){&st, c};
		ck_assert_int_eq(
		    pthread_create(&ct[c], NULL, consumer, &cons[c]), 0);
	}
	for (unsigned p = 0; p < PRODUCERS; p++) {
		prod[p] = (struct worker){&st, p};
		ck_assert_int_eq(
		    pthread_create(&pt[p], NULL, producer, &prod[p]), 0);
	}
	for (unsigned p = 0; p < PRODUCERS; p++)
		pthread_join(pt[p], NULL);
	__atomic_store_n(&st.producers_done, 1, __ATOMIC_RELEASE);
	for (unsigned c = 0; c < CONSUMERS; c++)
		pthread_join(ct[c], NULL);

	uint64_t missing = 0, duplicated = 0, per_consumer[CONSUMERS] = {0};

	for (unsigned p = 0; p < PRODUCERS; p++) {
		for (uint32_t s = 0; s < per_producer; s++) {
			unsigned n = 0;

			for (unsigned c = 0; c < CONSUMERS; c++) {
				n += st.seen[c][p][s];
				per_consumer[c] += st.seen[c][p][s];
			}
			missing += n == 0;
			duplicated += n > 1;
		}
	}
	fprintf(stderr,
		"xq threads cap %llu: %llu values, consumer split %llu/%llu\n",
		(unsigned long long)capacity, (unsigned long long)st.total,
		(unsigned long long)per_consumer[0],
		(unsigned long long)per_consumer[1]);
	ck_assert_uint_eq(missing, 0);
	ck_assert_uint_eq(duplicated, 0);
	for (unsigned c = 0; c < CONSUMERS; c++) {
		ck_assert_uint_eq(st.order_errors[c], 0);
		ck_assert_uint_eq(st.foreign_values[c], 0);
	}
	ck_assert_uint_eq(st.received, st.total);
	ck_assert_int_eq(xq_dequeue(st.q, &v), -EAGAIN);
	ck_assert_uint_eq(xq_count(st.q), 0);
	ck_assert_uint_eq(xq_test_enqueue_pos(st.q), start_pos + st.total);

	for (unsigned c = 0; c < CONSUMERS; c++)
		for (unsigned p = 0; p < PRODUCERS; p++)
			free(st.seen[c][p]);
	free(st.q);
}

static uint32_t per_producer_values(void)
{
	uint32_t n = txq_per_producer();

	return n > TXQ_SEQ_MASK ? TXQ_SEQ_MASK : n;
}

/* Big queue: mostly neither full nor empty. */
START_TEST(test_threads_big)
{
	run_stress(1024, per_producer_values(), 0);
}
END_TEST

/* Tiny queue: constant full/empty transitions and lapping. */
START_TEST(test_threads_tiny)
{
	run_stress(4, per_producer_values() / 5, 0);
}
END_TEST

/* Concurrent operations across the 32-bit wrap of the lap sequence. */
START_TEST(test_threads_seq_wrap)
{
	uint32_t n = per_producer_values() / 10;

	run_stress(8, n, (1ULL << 32) - n);
	run_stress(1024, n, (1ULL << 32) - n);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xq_threads");
	TCase *tc = tcase_create("mpmc");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_threads_big);
	tcase_add_test(tc, test_threads_tiny);
	tcase_add_test(tc, test_threads_seq_wrap);
	tcase_set_timeout(tc, 300);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
