/* SPDX-License-Identifier: MIT */
/*
 * xhash concurrent readers: the header promises that lookups, count, stats
 * and iteration never write to the table, so several threads may read one
 * table at once as long as nobody modifies it. Run under ThreadSanitizer
 * (label "concurrent"), any hidden write on the read path is a data race.
 * Between rounds the main thread modifies the table with the readers
 * stopped, as a caller following the contract would.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "xhash.h"

enum { READERS = 4, KEYS = 20000, ROUNDS = 3 };

struct reader {
	struct xhash *hi, *hs;
	uint64_t round;
	uint64_t errors;
	uint64_t found;
};

static size_t key_name(uint64_t i, char *buf, size_t size)
{
	return (size_t)snprintf(buf, size, "volume-%010lu_%08lu",
				(unsigned long)(i / 16),
				(unsigned long)(i % 16));
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char name[48];
	/* In round k the live keys are those with i % ROUNDS >= k (the
	 * main thread deletes one residue class per round). */
	for (uint64_t i = 0; i < KEYS; i++) {
		uint64_t v;
		bool live = i % ROUNDS >= r->round;
		int rc = xhash_int_lookup(r->hi, i * 7919, &v);
		if (rc != (live ? 0 : -ENOENT) || (live && v != i))
			r->errors++;
		size_t len = key_name(i, name, sizeof(name));
		rc = xhash_str_lookup(r->hs, name, len, &v);
		if (rc != (live ? 0 : -ENOENT) || (live && v != i))
			r->errors++;
		r->found += live;
	}
	struct xhash_iter it;
	struct xhash_item item;
	uint64_t n = 0;
	xhash_iter_init(r->hs, &it);
	while (xhash_iter_next(&it, &item) == 0)
		n++;
	if (n != xhash_count(r->hs))
		r->errors++;
	struct xhash_stats st;
	if (xhash_stats(r->hi, &st) != 0 || st.count != xhash_count(r->hi))
		r->errors++;
	return NULL;
}

START_TEST(test_concurrent_readers)
{
	struct xhash *hi, *hs;
	char name[48];
	ck_assert_int_eq(xhash_create(&hi, XHASH_KEY_INT, 0, NULL), 0);
	ck_assert_int_eq(xhash_create(&hs, XHASH_KEY_STR, 0, NULL), 0);
	for (uint64_t i = 0; i < KEYS; i++) {
		ck_assert_int_eq(xhash_int_insert(hi, i * 7919, i), 0);
		size_t len = key_name(i, name, sizeof(name));
		ck_assert_int_eq(xhash_str_insert(hs, name, len, i), 0);
	}
	for (uint64_t round = 0; round < ROUNDS; round++) {
		pthread_t tid[READERS];
		struct reader r[READERS];
		for (int t = 0; t < READERS; t++) {
			r[t] = (struct reader){hi, hs, round, 0, 0};
			ck_assert_int_eq(
			    pthread_create(&tid[t], NULL, reader_main, &r[t]),
			    0);
		}
		for (int t = 0; t < READERS; t++) {
			ck_assert_int_eq(pthread_join(tid[t], NULL), 0);
			ck_assert_uint_eq(r[t].errors, 0);
			ck_assert_uint_gt(r[t].found, 0);
		}
		/* readers stopped: modify (the join orders these writes
		 * before the next round's reads) */
		for (uint64_t i = round; i < KEYS; i += ROUNDS) {
			ck_assert_int_eq(xhash_int_delete(hi, i * 7919, NULL),
					 0);
			size_t len = key_name(i, name, sizeof(name));
			ck_assert_int_eq(xhash_str_delete(hs, name, len, NULL),
					 0);
		}
	}
	xhash_destroy(hi);
	xhash_destroy(hs);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xhash_readers");
	TCase *tc = tcase_create("readers");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_concurrent_readers);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
