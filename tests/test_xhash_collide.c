/* SPDX-License-Identifier: MIT */
/*
 * xhash built with XHASH_TEST_COLLIDE: integer keys hash to key % 3 and
 * string keys to a function of their length only, so every probe meets
 * equal hashes and equal tags, chains are long, and the byte comparison of
 * string keys decides every lookup. A good hash never gets there, so these
 * paths are invisible to test_xhash. Differential test against a
 * direct-mapped model, including deletes in the middle of chains (dummies)
 * and growth.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "xhash.h"

enum { UNIVERSE = 700, OPS = 20000 };

static unsigned char keys[UNIVERSE][XHASH_KEY_MAX];
static size_t lens[UNIVERSE];
static unsigned char present[UNIVERSE];
static uint64_t values[UNIVERSE];

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(0x2545f4914f6cdd1d);
}

/*
 * String keys: for every length a base key and variants differing from it
 * in exactly one byte (first, middle, last, and each 8-byte word
 * boundary), which is what a word-wise comparison could get wrong.
 */
static unsigned add_key(unsigned k, const unsigned char *key, size_t len)
{
	if (k >= UNIVERSE)
		return k;
	for (unsigned j = 0; j < k; j++)
		if (lens[j] == len && !memcmp(keys[j], key, len))
			return k; /* already there */
	memcpy(keys[k], key, len);
	lens[k] = len;
	return k + 1;
}

static void make_keys(void)
{
	static const size_t lengths[] = {1,  2,	 3,  4,	 5,  7,	 8,  9,	  15,
					 16, 17, 24, 31, 33, 40, 64, 100, 255};
	static const size_t spots[] = {0, 7, 8, 15, 16, 63, 64};
	unsigned char key[XHASH_KEY_MAX];
	unsigned k = 0;
	for (unsigned c = 'b'; k < UNIVERSE && c < 256; c++) {
		for (unsigned l = 0; l < 18; l++) {
			size_t len = lengths[l];
			memset(key, 'a', len);
			k = add_key(k, key, len); /* the base key */
			size_t pos[9] = {len / 2, len - 1};
			memcpy(pos + 2, spots, sizeof(spots));
			for (unsigned p = 0; p < 9; p++) {
				if (pos[p] >= len)
					continue;
				memset(key, 'a', len);
				key[pos[p]] = (unsigned char)c;
				k = add_key(k, key, len);
			}
		}
	}
	ck_assert_uint_eq(k, UNIVERSE);
}

static void check_all(struct xhash *hs, struct xhash *hi, uint64_t count)
{
	uint64_t v, n = 0;
	ck_assert_uint_eq(xhash_count(hs), count);
	ck_assert_uint_eq(xhash_count(hi), count);
	for (unsigned i = 0; i < UNIVERSE; i++) {
		int want = present[i] ? 0 : -ENOENT;
		int rc = xhash_str_lookup(hs, keys[i], lens[i], &v);
		if (rc != want || (rc == 0 && v != values[i]))
			ck_abort_msg("str key %u (len %zu): rc %d value %lu, "
				     "want %d %lu",
				     i, lens[i], rc, (unsigned long)v, want,
				     (unsigned long)values[i]);
		rc = xhash_int_lookup(hi, i, &v);
		if (rc != want || (rc == 0 && v != values[i]))
			ck_abort_msg("int key %u: rc %d, want %d", i, rc, want);
	}
	struct xhash_iter it;
	struct xhash_item item;
	xhash_iter_init(hs, &it);
	while (xhash_iter_next(&it, &item) == 0) {
		unsigned i = (unsigned)(item.value % UNIVERSE);
		if (!present[i] || item.key_len != lens[i] ||
		    memcmp(item.key_str, keys[i], lens[i]))
			ck_abort_msg("iteration returned a wrong entry");
		n++;
	}
	ck_assert_uint_eq(n, count);
}

START_TEST(test_collide_differential)
{
	struct xhash *hs, *hi;
	uint64_t rng = 42, count = 0;
	ck_assert_int_eq(xhash_create(&hs, XHASH_KEY_STR, 0, NULL), 0);
	ck_assert_int_eq(xhash_create(&hi, XHASH_KEY_INT, 0, NULL), 0);
	make_keys();
	memset(present, 0, sizeof(present));
	for (unsigned op = 0; op < OPS; op++) {
		unsigned i = (unsigned)(rng_next(&rng) % UNIVERSE);
		uint64_t v = (rng_next(&rng) % 1000) * UNIVERSE + i;
		/* grow for the first half, then churn */
		unsigned ins = op < OPS / 2 ? 70 : 50;
		if (rng_next(&rng) % 100 < ins) {
			int want = present[i] ? 1 : 0;
			uint64_t old = 0;
			ck_assert_int_eq(
			    xhash_str_upsert(hs, keys[i], lens[i], v, &old),
			    want);
			if (want)
				ck_assert_uint_eq(old, values[i]);
			ck_assert_int_eq(xhash_int_upsert(hi, i, v, NULL),
					 want);
			ck_assert_int_eq(
			    xhash_str_insert(hs, keys[i], lens[i], v), -EEXIST);
			count += !present[i];
			present[i] = 1;
			values[i] = v;
		} else {
			int want = present[i] ? 0 : -ENOENT;
			ck_assert_int_eq(
			    xhash_str_delete(hs, keys[i], lens[i], NULL), want);
			ck_assert_int_eq(xhash_int_delete(hi, i, NULL), want);
			count -= present[i];
			present[i] = 0;
		}
		if (op % 1000 == 999)
			check_all(hs, hi, count);
	}
	check_all(hs, hi, count);
	ck_assert_uint_gt(count, 0);
	xhash_destroy(hs);
	xhash_destroy(hi);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xhash_collide");
	TCase *tc = tcase_create("collide");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_collide_differential);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
