/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for xhash: every API and error path, allocation failure
 * injection, iteration semantics, and a randomized differential test
 * against a direct-mapped reference model.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xhash.h"

/*
 * Check's ck_assert_* record every passing assertion through a write() to
 * its log channel, which made the 100k-operation differential runs spend
 * most of their time in the kernel. These report the same way on failure
 * and cost nothing on success.
 */
#define EXPECT_CMP(T, FMT, X, OP, Y)                                           \
	do {                                                                   \
		T x_ = (T)(X), y_ = (T)(Y);                                    \
		if (!(x_ OP y_))                                               \
			ck_abort_msg("Assertion '%s' failed: %s == " FMT       \
				     ", %s == " FMT,                           \
				     #X " " #OP " " #Y, #X, x_, #Y, y_);       \
	} while (0)
#define EXPECT_INT_EQ(X, Y)  EXPECT_CMP(intmax_t, "%jd", X, ==, Y)
#define EXPECT_UINT_EQ(X, Y) EXPECT_CMP(uintmax_t, "%ju", X, ==, Y)
#define EXPECT_UINT_LT(X, Y) EXPECT_CMP(uintmax_t, "%ju", X, <, Y)
#define EXPECT_UINT_LE(X, Y) EXPECT_CMP(uintmax_t, "%ju", X, <=, Y)
#define EXPECT_UINT_GT(X, Y) EXPECT_CMP(uintmax_t, "%ju", X, >, Y)
#define EXPECT_UINT_GE(X, Y) EXPECT_CMP(uintmax_t, "%ju", X, >=, Y)
#define EXPECT(C)                                                              \
	do {                                                                   \
		if (!(C))                                                      \
			ck_abort_msg("Assertion '%s' failed", #C);             \
	} while (0)
#define EXPECT_MEM_EQ(X, Y, N)                                                 \
	do {                                                                   \
		if (memcmp((X), (Y), (N)) != 0)                                \
			ck_abort_msg("Assertion '%s' failed: bytes differ",    \
				     #X " == " #Y);                            \
	} while (0)

/* ------------------------------------------------------------- helpers */

/* Counting allocator that can be told to fail: fail_in == 0 fails the next
 * allocation, > 0 counts down, < 0 never fails. */
struct test_alloc {
	long fail_in;
	long live;
	long calls;
};

static void *t_alloc(void *ctx, size_t size)
{
	struct test_alloc *t = ctx;
	t->calls++;
	if (t->fail_in == 0)
		return NULL;
	if (t->fail_in > 0)
		t->fail_in--;
	void *p = malloc(size);
	if (p)
		t->live++;
	return p;
}

static void t_release(void *ctx, void *p)
{
	struct test_alloc *t = ctx;
	t->live--;
	free(p);
}

static struct xhash_allocator test_allocator(struct test_alloc *t)
{
	struct xhash_allocator a = {t_alloc, t_release, t};
	memset(t, 0, sizeof(*t));
	t->fail_in = -1;
	return a;
}

/* xorshift64*: deterministic per test so failures reproduce */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(0x2545f4914f6cdd1d);
}

static struct xhash *new_table(enum xhash_kind kind)
{
	struct xhash *h = NULL;
	EXPECT_INT_EQ(xhash_create(&h, kind, 0, NULL), 0);
	ck_assert_ptr_nonnull(h);
	return h;
}

/* Sum of (key, value) pairs seen by a full iteration, and their number. */
static uint64_t iter_count(struct xhash *h)
{
	struct xhash_iter it;
	struct xhash_item item;
	uint64_t n = 0;
	int rc;
	xhash_iter_init(h, &it);
	while ((rc = xhash_iter_next(&it, &item)) == 0)
		n++;
	EXPECT_INT_EQ(rc, -ENOENT);
	return n;
}

/* ------------------------------------------------------------- create */

START_TEST(test_create_bad_args)
{
	struct xhash *h = (struct xhash *)0x1;
	EXPECT_INT_EQ(xhash_create(NULL, XHASH_KEY_INT, 0, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_create(&h, 0, 0, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_create(&h, 3, 0, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_create(&h, XHASH_KEY_INT, UINT64_MAX, NULL),
		      -EINVAL);
	struct xhash_allocator half = {t_alloc, NULL, NULL};
	EXPECT_INT_EQ(xhash_create(&h, XHASH_KEY_INT, 0, &half), -EINVAL);
	ck_assert_ptr_eq(h, (struct xhash *)0x1); /* untouched on error */
	xhash_destroy(NULL);			  /* accepted */
	EXPECT_UINT_EQ(xhash_count(NULL), 0);
}
END_TEST

START_TEST(test_create_enomem)
{
	/* Fail each allocation of create in turn: -ENOMEM, nothing leaked,
	 * *out untouched. */
	for (enum xhash_kind kind = XHASH_KEY_INT; kind <= XHASH_KEY_STR;
	     kind++) {
		for (long k = 0; k < 4; k++) {
			struct test_alloc t;
			struct xhash_allocator a = test_allocator(&t);
			struct xhash *h = NULL;
			t.fail_in = k;
			EXPECT_INT_EQ(xhash_create(&h, kind, 100, &a), -ENOMEM);
			ck_assert_ptr_null(h);
			EXPECT_INT_EQ(t.live, 0);
		}
		struct test_alloc t;
		struct xhash_allocator a = test_allocator(&t);
		struct xhash *h = NULL;
		t.fail_in = 4;
		EXPECT_INT_EQ(xhash_create(&h, kind, 100, &a), 0);
		EXPECT_INT_EQ(t.live, 4);
		EXPECT_INT_EQ(xhash_kind(h), kind);
		xhash_destroy(h);
		EXPECT_INT_EQ(t.live, 0);
	}
}
END_TEST

START_TEST(test_create_expected_no_growth)
{
	struct test_alloc t;
	struct xhash_allocator a = test_allocator(&t);
	struct xhash *h;
	EXPECT_INT_EQ(xhash_create(&h, XHASH_KEY_INT, 1000, &a), 0);
	long calls = t.calls;
	for (uint64_t k = 0; k < 1000; k++)
		EXPECT_INT_EQ(xhash_int_insert(h, k, k), 0);
	EXPECT_INT_EQ(t.calls, calls); /* no allocation */
	struct xhash_stats st;
	EXPECT_INT_EQ(xhash_stats(h, &st), 0);
	EXPECT_UINT_EQ(st.resizes, 0);
	xhash_destroy(h);
	EXPECT_INT_EQ(t.live, 0);
}
END_TEST

/* ------------------------------------------------------------- int keys */

START_TEST(test_int_basic)
{
	struct xhash *h = new_table(XHASH_KEY_INT);
	uint64_t v = 0, old = 0;

	EXPECT_UINT_EQ(xhash_count(h), 0);
	EXPECT_INT_EQ(xhash_int_lookup(h, 7, &v), -ENOENT);
	EXPECT_INT_EQ(xhash_int_delete(h, 7, NULL), -ENOENT);

	EXPECT_INT_EQ(xhash_int_insert(h, 7, 70), 0);
	EXPECT_INT_EQ(xhash_int_insert(h, 0, 1), 0); /* key 0 is valid */
	EXPECT_INT_EQ(xhash_int_insert(h, UINT64_MAX, 2), 0);
	EXPECT_UINT_EQ(xhash_count(h), 3);

	/* -EEXIST leaves the old value */
	EXPECT_INT_EQ(xhash_int_insert(h, 7, 99), -EEXIST);
	EXPECT_INT_EQ(xhash_int_lookup(h, 7, &v), 0);
	EXPECT_UINT_EQ(v, 70);
	EXPECT_UINT_EQ(xhash_count(h), 3);
	EXPECT_INT_EQ(xhash_int_lookup(h, 0, NULL), 0); /* membership */
	EXPECT_INT_EQ(xhash_int_lookup(h, UINT64_MAX, &v), 0);
	EXPECT_UINT_EQ(v, 2);

	/* upsert: replace returns 1 and the old value, add returns 0 */
	EXPECT_INT_EQ(xhash_int_upsert(h, 7, 71, &old), 1);
	EXPECT_UINT_EQ(old, 70);
	EXPECT_INT_EQ(xhash_int_upsert(h, 7, 72, NULL), 1);
	EXPECT_INT_EQ(xhash_int_upsert(h, 8, 80, &old), 0);
	EXPECT_UINT_EQ(xhash_count(h), 4);
	EXPECT_INT_EQ(xhash_int_lookup(h, 7, &v), 0);
	EXPECT_UINT_EQ(v, 72);

	/* values can carry pointers */
	static int target;
	EXPECT_INT_EQ(xhash_int_insert(h, 9, (uintptr_t)&target), 0);
	EXPECT_INT_EQ(xhash_int_lookup(h, 9, &v), 0);
	ck_assert_ptr_eq((int *)(uintptr_t)v, &target);

	EXPECT_INT_EQ(xhash_int_delete(h, 7, &old), 0);
	EXPECT_UINT_EQ(old, 72);
	EXPECT_INT_EQ(xhash_int_delete(h, 7, &old), -ENOENT);
	EXPECT_INT_EQ(xhash_int_lookup(h, 7, &v), -ENOENT);
	EXPECT_INT_EQ(xhash_int_delete(h, 0, NULL), 0);
	EXPECT_UINT_EQ(xhash_count(h), 3);
	/* re-insert after delete (reuses a dummy slot) */
	EXPECT_INT_EQ(xhash_int_insert(h, 7, 700), 0);
	EXPECT_INT_EQ(xhash_int_lookup(h, 7, &v), 0);
	EXPECT_UINT_EQ(v, 700);
	EXPECT_UINT_EQ(iter_count(h), xhash_count(h));
	xhash_destroy(h);
}
END_TEST

START_TEST(test_wrong_kind_and_null)
{
	struct xhash *hi = new_table(XHASH_KEY_INT);
	struct xhash *hs = new_table(XHASH_KEY_STR);
	uint64_t v = 12345;

	EXPECT_INT_EQ(xhash_int_insert(hi, 1, 1), 0);
	EXPECT_INT_EQ(xhash_str_insert(hs, "a", 1, 1), 0);

	EXPECT_INT_EQ(xhash_str_insert(hi, "a", 1, 2), -EINVAL);
	EXPECT_INT_EQ(xhash_str_upsert(hi, "a", 1, 2, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_str_lookup(hi, "a", 1, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_str_delete(hi, "a", 1, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_int_insert(hs, 1, 2), -EINVAL);
	EXPECT_INT_EQ(xhash_int_upsert(hs, 1, 2, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_int_lookup(hs, 1, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_int_delete(hs, 1, &v), -EINVAL);
	EXPECT_UINT_EQ(v, 12345);

	EXPECT_INT_EQ(xhash_int_insert(NULL, 1, 1), -EINVAL);
	EXPECT_INT_EQ(xhash_int_upsert(NULL, 1, 1, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_int_lookup(NULL, 1, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_int_delete(NULL, 1, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_str_insert(NULL, "a", 1, 1), -EINVAL);
	EXPECT_INT_EQ(xhash_str_lookup(hs, NULL, 1, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_str_insert(hs, NULL, 1, 1), -EINVAL);
	EXPECT_INT_EQ(xhash_reserve(NULL, 10), -EINVAL);
	EXPECT_INT_EQ(xhash_reserve(hi, UINT64_MAX), -EINVAL);
	struct xhash_stats st;
	EXPECT_INT_EQ(xhash_stats(NULL, &st), -EINVAL);
	EXPECT_INT_EQ(xhash_stats(hi, NULL), -EINVAL);

	/* nothing changed */
	EXPECT_UINT_EQ(xhash_count(hi), 1);
	EXPECT_UINT_EQ(xhash_count(hs), 1);
	EXPECT_INT_EQ(xhash_int_lookup(hi, 1, &v), 0);
	EXPECT_UINT_EQ(v, 1);
	EXPECT_INT_EQ(xhash_str_lookup(hs, "a", 1, &v), 0);
	EXPECT_UINT_EQ(v, 1);
	xhash_destroy(hi);
	xhash_destroy(hs);
}
END_TEST

/* ------------------------------------------------------------- str keys */

START_TEST(test_str_basic)
{
	struct xhash *h = new_table(XHASH_KEY_STR);
	uint64_t v = 0, old = 0;
	char buf[64];

	strcpy(buf, "volume-0000001234_00000042");
	EXPECT_INT_EQ(xhash_str_insert(h, buf, strlen(buf), 42), 0);
	/* the table copied the key: scribbling on the caller buffer is
	 * harmless */
	memset(buf, 'x', sizeof(buf));
	EXPECT_INT_EQ(xhash_str_lookup(h, "volume-0000001234_00000042", 26, &v),
		      0);
	EXPECT_UINT_EQ(v, 42);
	EXPECT_INT_EQ(xhash_str_insert(h, "volume-0000001234_00000042", 26, 1),
		      -EEXIST);
	/* a prefix and an extension are different keys (not NUL-terminated) */
	EXPECT_INT_EQ(xhash_str_lookup(h, "volume-0000001234_0000004", 25, &v),
		      -ENOENT);
	EXPECT_INT_EQ(
	    xhash_str_lookup(h, "volume-0000001234_000000420", 27, &v),
	    -ENOENT);
	EXPECT_INT_EQ(xhash_str_insert(h, "volume-0000001234_000000420", 26, 7),
		      -EEXIST); /* same 26 bytes */

	/* embedded NUL bytes are part of the key */
	EXPECT_INT_EQ(xhash_str_insert(h, "a\0b", 3, 1), 0);
	EXPECT_INT_EQ(xhash_str_insert(h, "a\0c", 3, 2), 0);
	EXPECT_INT_EQ(xhash_str_insert(h, "a", 1, 3), 0);
	EXPECT_INT_EQ(xhash_str_lookup(h, "a\0c", 3, &v), 0);
	EXPECT_UINT_EQ(v, 2);

	/* length limits: 1 and 255 accepted */
	char big[XHASH_KEY_MAX + 1];
	memset(big, 0xab, sizeof(big));
	EXPECT_INT_EQ(xhash_str_insert(h, big, XHASH_KEY_MAX, 255), 0);
	EXPECT_INT_EQ(xhash_str_lookup(h, big, XHASH_KEY_MAX, &v), 0);
	EXPECT_UINT_EQ(v, 255);
	EXPECT_INT_EQ(xhash_str_lookup(h, big, XHASH_KEY_MAX - 1, &v), -ENOENT);

	EXPECT_INT_EQ(xhash_str_upsert(h, "a", 1, 30, &old), 1);
	EXPECT_UINT_EQ(old, 3);
	EXPECT_INT_EQ(xhash_str_upsert(h, "b", 1, 40, &old), 0);
	EXPECT_UINT_EQ(xhash_count(h), 6);
	EXPECT_INT_EQ(xhash_str_delete(h, "a\0b", 3, &old), 0);
	EXPECT_UINT_EQ(old, 1);
	EXPECT_INT_EQ(xhash_str_delete(h, "a\0b", 3, &old), -ENOENT);
	EXPECT_INT_EQ(xhash_str_lookup(h, "a\0b", 3, NULL), -ENOENT);
	EXPECT_INT_EQ(xhash_str_lookup(h, "a\0c", 3, NULL), 0);
	EXPECT_UINT_EQ(xhash_count(h), 5);
	EXPECT_UINT_EQ(iter_count(h), 5);
	xhash_destroy(h);
}
END_TEST

START_TEST(test_str_bad_length)
{
	struct xhash *h = new_table(XHASH_KEY_STR);
	char big[XHASH_KEY_MAX + 2];
	uint64_t v = 77;
	memset(big, 'k', sizeof(big));
	EXPECT_INT_EQ(xhash_str_insert(h, "k", 1, 1), 0);

	EXPECT_INT_EQ(xhash_str_insert(h, "k", 0, 1), -EINVAL);
	EXPECT_INT_EQ(xhash_str_insert(h, big, XHASH_KEY_MAX + 1, 1), -EINVAL);
	EXPECT_INT_EQ(xhash_str_upsert(h, "k", 0, 9, NULL), -EINVAL);
	EXPECT_INT_EQ(xhash_str_upsert(h, big, XHASH_KEY_MAX + 1, 9, NULL),
		      -EINVAL);
	EXPECT_INT_EQ(xhash_str_lookup(h, "k", 0, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_str_lookup(h, big, SIZE_MAX, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_str_delete(h, "k", 0, &v), -EINVAL);
	EXPECT_INT_EQ(xhash_str_delete(h, big, XHASH_KEY_MAX + 1, &v), -EINVAL);
	EXPECT_UINT_EQ(v, 77);
	EXPECT_UINT_EQ(xhash_count(h), 1);
	EXPECT_INT_EQ(xhash_str_lookup(h, "k", 1, &v), 0);
	EXPECT_UINT_EQ(v, 1);
	EXPECT_UINT_EQ(iter_count(h), 1);
	xhash_destroy(h);
}
END_TEST

/* ------------------------------------------------------------- growth */

START_TEST(test_slot_widths)
{
	/* The index slot width follows the table size: 1, 2 then 4 bytes. */
	struct xhash *h = new_table(XHASH_KEY_INT);
	struct xhash_stats st;
	unsigned seen = 0;
	uint64_t last_slots = 0;
	for (uint64_t k = 0; k < 70000; k++) {
		EXPECT_INT_EQ(xhash_int_insert(h, k * 3, k), 0);
		if (k > 2000 && k % 1000) /* stats is O(n) */
			continue;
		EXPECT_INT_EQ(xhash_stats(h, &st), 0);
		seen |= st.slot_bytes;
		EXPECT_UINT_GE(st.index_slots, last_slots);
		EXPECT_UINT_LE(st.records * 3, st.index_slots * 2);
		last_slots = st.index_slots;
	}
	EXPECT_INT_EQ(xhash_stats(h, &st), 0);
	seen |= st.slot_bytes;
	EXPECT_UINT_EQ(seen, 1 | 2 | 4);
	EXPECT_UINT_EQ(st.slot_bytes, 4);
	EXPECT_UINT_EQ(st.count, 70000);
	for (uint64_t k = 0; k < 70000; k++) {
		uint64_t v;
		EXPECT_INT_EQ(xhash_int_lookup(h, k * 3, &v), 0);
		EXPECT_UINT_EQ(v, k);
		EXPECT_INT_EQ(xhash_int_lookup(h, k * 3 + 1, &v), -ENOENT);
	}
	xhash_destroy(h);
}
END_TEST

START_TEST(test_hash_spread)
{
	/* Sequential integer keys and names that differ only in their digits
	 * must spread: the mean probe count at <= 2/3 load with a good hash is
	 * about 1.5; a hash that clusters such keys goes far above 2. */
	struct xhash *hi = new_table(XHASH_KEY_INT);
	struct xhash *hs = new_table(XHASH_KEY_STR);
	struct xhash_stats st;
	char name[64];
	for (uint64_t k = 0; k < 50000; k++) {
		EXPECT_INT_EQ(xhash_int_insert(hi, k, k), 0);
		EXPECT_INT_EQ(xhash_int_insert(hi, (k + 1) << 32, k), 0);
		int n = snprintf(name, sizeof(name), "volume-%010u_%08u",
				 (unsigned)(k / 64), (unsigned)(k % 64));
		EXPECT_INT_EQ(xhash_str_insert(hs, name, (size_t)n, k), 0);
	}
	EXPECT_INT_EQ(xhash_stats(hi, &st), 0);
	EXPECT_UINT_EQ(st.count, 100000);
	EXPECT_UINT_LT(st.probes_total, 2 * st.count);
	EXPECT_UINT_LT(st.probes_max, 64);
	EXPECT_INT_EQ(xhash_stats(hs, &st), 0);
	EXPECT_UINT_EQ(st.count, 50000);
	EXPECT_UINT_LT(st.probes_total, 2 * st.count);
	EXPECT_UINT_LT(st.probes_max, 64);
	xhash_destroy(hi);
	xhash_destroy(hs);
}
END_TEST

/* Fill until the next insert must grow, then fail that growth. */
static void check_grow_enomem(enum xhash_kind kind)
{
	struct test_alloc t;
	struct xhash_allocator a = test_allocator(&t);
	struct xhash *h;
	struct xhash_stats st, st2;
	char name[32];
	uint64_t k = 0, v;
	EXPECT_INT_EQ(xhash_create(&h, kind, 0, &a), 0);

	for (int round = 0; round < 6; round++) {
		/* insert until an insert allocates */
		for (;;) {
			long calls = t.calls;
			int n = snprintf(name, sizeof(name), "key-%lu",
					 (unsigned long)k);
			t.fail_in = 0; /* any allocation fails */
			int rc =
			    kind == XHASH_KEY_INT
				? xhash_int_insert(h, k, k + 1)
				: xhash_str_insert(h, name, (size_t)n, k + 1);
			if (rc == 0) {
				EXPECT_INT_EQ(t.calls, calls);
				k++;
				continue;
			}
			EXPECT_INT_EQ(rc, -ENOMEM);
			break;
		}
		/* table unchanged: same stats, every key, iteration */
		EXPECT_INT_EQ(xhash_stats(h, &st), 0);
		EXPECT_UINT_EQ(st.count, k);
		EXPECT_UINT_EQ(iter_count(h), k);
		for (uint64_t j = 0; j < k; j++) {
			int n = snprintf(name, sizeof(name), "key-%lu",
					 (unsigned long)j);
			int rc = kind == XHASH_KEY_INT
				     ? xhash_int_lookup(h, j, &v)
				     : xhash_str_lookup(h, name, (size_t)n, &v);
			EXPECT_INT_EQ(rc, 0);
			EXPECT_UINT_EQ(v, j + 1);
		}
		int n =
		    snprintf(name, sizeof(name), "key-%lu", (unsigned long)k);
		EXPECT_INT_EQ(kind == XHASH_KEY_INT
				  ? xhash_int_lookup(h, k, &v)
				  : xhash_str_lookup(h, name, (size_t)n, &v),
			      -ENOENT);
		/* the failing growth may get part of its memory: fail the
		 * second and third allocation too */
		for (long f = 1; f < 3; f++) {
			t.fail_in = f;
			int rc = kind == XHASH_KEY_INT
				     ? xhash_int_upsert(h, k, k + 1, NULL)
				     : xhash_str_upsert(h, name, (size_t)n,
							k + 1, NULL);
			EXPECT_INT_EQ(rc, -ENOMEM);
			EXPECT_INT_EQ(xhash_stats(h, &st2), 0);
			EXPECT_MEM_EQ(&st, &st2, sizeof(st));
		}
		/* reserve fails the same way */
		t.fail_in = 0;
		EXPECT_INT_EQ(xhash_reserve(h, k * 4 + 100), -ENOMEM);
		EXPECT_INT_EQ(xhash_stats(h, &st2), 0);
		EXPECT_MEM_EQ(&st, &st2, sizeof(st));
		/* then it succeeds */
		t.fail_in = -1;
		EXPECT_INT_EQ(kind == XHASH_KEY_INT
				  ? xhash_int_insert(h, k, k + 1)
				  : xhash_str_insert(h, name, (size_t)n, k + 1),
			      0);
		k++;
	}
	EXPECT_UINT_EQ(xhash_count(h), k);
	xhash_destroy(h);
	EXPECT_INT_EQ(t.live, 0);
}

START_TEST(test_grow_enomem_int)
{
	check_grow_enomem(XHASH_KEY_INT);
}
END_TEST

START_TEST(test_grow_enomem_str)
{
	check_grow_enomem(XHASH_KEY_STR);
}
END_TEST

START_TEST(test_reserve)
{
	struct test_alloc t;
	struct xhash_allocator a = test_allocator(&t);
	struct xhash *h;
	EXPECT_INT_EQ(xhash_create(&h, XHASH_KEY_STR, 0, &a), 0);
	EXPECT_INT_EQ(xhash_str_insert(h, "0123456789abcdef0123", 20, 0), 0);
	EXPECT_INT_EQ(xhash_reserve(h, 5000), 0);
	EXPECT_INT_EQ(xhash_reserve(h, 10), 0); /* smaller: no-op */
	long calls = t.calls;
	char name[32];
	for (unsigned i = 1; i < 5000; i++) {
		int n = snprintf(name, sizeof(name), "0123456789ab%08u", i);
		EXPECT_INT_EQ(xhash_str_insert(h, name, (size_t)n, i), 0);
	}
	EXPECT_INT_EQ(t.calls, calls); /* reserved: no allocation */
	EXPECT_INT_EQ(xhash_reserve(h, 5000), 0);
	EXPECT_INT_EQ(t.calls, calls);
	EXPECT_UINT_EQ(xhash_count(h), 5000);
	xhash_destroy(h);
	EXPECT_INT_EQ(t.live, 0);
}
END_TEST

/* ------------------------------------------------------------- iteration */

START_TEST(test_iter_exactly_once)
{
	enum { N = 3000 };
	static unsigned char seen[N];
	struct xhash *h = new_table(XHASH_KEY_INT);
	struct xhash_iter it;
	struct xhash_item item;

	/* empty table */
	xhash_iter_init(h, &it);
	EXPECT_INT_EQ(xhash_iter_next(&it, &item), -ENOENT);
	EXPECT_INT_EQ(xhash_iter_next(&it, &item), -ENOENT);
	EXPECT_INT_EQ(xhash_iter_next(NULL, &item), -EINVAL);
	EXPECT_INT_EQ(xhash_iter_next(&it, NULL), -EINVAL);

	for (uint64_t k = 0; k < N; k++)
		EXPECT_INT_EQ(xhash_int_insert(h, k, k * 2), 0);
	for (uint64_t k = 0; k < N; k += 3) /* leave holes */
		EXPECT_INT_EQ(xhash_int_delete(h, k, NULL), 0);
	memset(seen, 0, sizeof(seen));
	uint64_t n = 0;
	xhash_iter_init(h, &it);
	while (xhash_iter_next(&it, &item) == 0) {
		EXPECT_UINT_LT(item.key_int, N);
		EXPECT_UINT_EQ(item.value, item.key_int * 2);
		ck_assert_ptr_null(item.key_str);
		EXPECT_UINT_EQ(seen[item.key_int]++, 0);
		n++;
	}
	EXPECT_UINT_EQ(n, xhash_count(h));
	for (uint64_t k = 0; k < N; k++)
		EXPECT_UINT_EQ(seen[k], k % 3 != 0);
	xhash_destroy(h);
}
END_TEST

START_TEST(test_iter_delete_current)
{
	enum { N = 2000 };
	static unsigned char seen[N];
	struct xhash *h = new_table(XHASH_KEY_STR);
	struct xhash_iter it;
	struct xhash_item item;
	char name[32];
	for (unsigned i = 0; i < N; i++) {
		int n = snprintf(name, sizeof(name), "obj-%u", i);
		EXPECT_INT_EQ(xhash_str_insert(h, name, (size_t)n, i), 0);
	}
	memset(seen, 0, sizeof(seen));
	/* delete every entry as it is returned: all visited once, then
	 * empty */
	xhash_iter_init(h, &it);
	uint64_t n = 0;
	while (xhash_iter_next(&it, &item) == 0) {
		EXPECT_UINT_LT(item.value, N);
		EXPECT_UINT_EQ(seen[item.value]++, 0);
		int len = snprintf(name, sizeof(name), "obj-%u",
				   (unsigned)item.value);
		EXPECT_UINT_EQ(item.key_len, (size_t)len);
		EXPECT_MEM_EQ(item.key_str, name, item.key_len);
		uint64_t old;
		EXPECT_INT_EQ(
		    xhash_str_delete(h, item.key_str, item.key_len, &old), 0);
		EXPECT_UINT_EQ(old, item.value);
		n++;
	}
	EXPECT_UINT_EQ(n, N);
	EXPECT_UINT_EQ(xhash_count(h), 0);
	EXPECT_UINT_EQ(iter_count(h), 0);
	/* still usable */
	EXPECT_INT_EQ(xhash_str_insert(h, "again", 5, 5), 0);
	EXPECT_UINT_EQ(iter_count(h), 1);
	xhash_destroy(h);
}
END_TEST

START_TEST(test_iter_delete_others_and_upsert)
{
	enum { N = 1000 };
	struct xhash *h = new_table(XHASH_KEY_INT);
	struct xhash_iter it;
	struct xhash_item item;
	for (uint64_t k = 0; k < N; k++)
		EXPECT_INT_EQ(xhash_int_insert(h, k, k), 0);
	/* Entries are returned in insertion order. While at key k, delete
	 * key k+1 (not yet visited: must never be returned) and bump the
	 * value of k+2 (must be returned with the new value). */
	xhash_iter_init(h, &it);
	uint64_t n = 0, expect = 0;
	while (xhash_iter_next(&it, &item) == 0) {
		EXPECT_UINT_EQ(item.key_int, expect);
		EXPECT_UINT_EQ(item.value, expect ? expect + 1000000 : 0);
		if (item.key_int + 1 < N)
			EXPECT_INT_EQ(
			    xhash_int_delete(h, item.key_int + 1, NULL), 0);
		if (item.key_int + 2 < N)
			EXPECT_INT_EQ(
			    xhash_int_upsert(h, item.key_int + 2,
					     item.key_int + 2 + 1000000, NULL),
			    1);
		expect += 2;
		n++;
	}
	EXPECT_UINT_EQ(n, N / 2);
	EXPECT_UINT_EQ(n, xhash_count(h));
	xhash_destroy(h);
}
END_TEST

START_TEST(test_iter_insert)
{
	struct xhash *h = new_table(XHASH_KEY_INT);
	struct xhash_iter it;
	struct xhash_item item;
	for (uint64_t k = 0; k < 100; k++)
		EXPECT_INT_EQ(xhash_int_insert(h, k, k), 0);

	/* With room reserved, inserts during iteration do not move records:
	 * the new entries are appended and visited by the same iteration. */
	EXPECT_INT_EQ(xhash_reserve(h, 200), 0);
	xhash_iter_init(h, &it);
	uint64_t n = 0;
	while (xhash_iter_next(&it, &item) == 0) {
		if (item.key_int < 100)
			EXPECT_INT_EQ(
			    xhash_int_insert(h, item.key_int + 1000, 0), 0);
		n++;
	}
	EXPECT_UINT_EQ(n, 200);
	EXPECT_UINT_EQ(xhash_count(h), 200);

	/* An insert that grows the table makes the cursor report -ESTALE. */
	xhash_iter_init(h, &it);
	EXPECT_INT_EQ(xhash_iter_next(&it, &item), 0);
	struct xhash_stats st;
	EXPECT_INT_EQ(xhash_stats(h, &st), 0);
	uint64_t resizes = st.resizes;
	uint64_t k = 5000;
	while (st.resizes == resizes) {
		EXPECT_INT_EQ(xhash_int_insert(h, k++, 0), 0);
		EXPECT_INT_EQ(xhash_stats(h, &st), 0);
	}
	EXPECT_INT_EQ(xhash_iter_next(&it, &item), -ESTALE);
	EXPECT_INT_EQ(xhash_iter_next(&it, &item), -ESTALE);
	/* a fresh cursor works */
	EXPECT_UINT_EQ(iter_count(h), xhash_count(h));
	xhash_destroy(h);
}
END_TEST

/* ------------------------------------------------------------- random */

/*
 * Differential test: random insert/upsert/lookup/delete over a fixed
 * universe of candidate keys, checked against a direct-mapped reference
 * (present[i], value[i] for candidate i). The operation mix drifts through
 * growth, churn and drain phases so the table grows, accumulates dummies,
 * compacts on rebuild and empties again.
 */
enum { UNIVERSE = 6000, OPS = 100000 };

struct model {
	unsigned char present[UNIVERSE];
	uint64_t value[UNIVERSE];
	uint64_t count;
};

static uint64_t int_keys[UNIVERSE];
static unsigned char str_keys[UNIVERSE][XHASH_KEY_MAX];
static size_t str_lens[UNIVERSE];

static void make_keys(uint64_t *rng)
{
	for (unsigned i = 0; i < UNIVERSE; i++) {
		/* dense small keys, sparse random keys, keys differing only
		 * in the top bits */
		uint64_t r = rng_next(rng);
		int_keys[i] = i % 3 == 0   ? i
			      : i % 3 == 1 ? r
					   : (uint64_t)i << 48;
		/* a shared prefix for half the keys, random lengths 1..255,
		 * any byte value including NUL */
		size_t len = 1 + rng_next(rng) % XHASH_KEY_MAX;
		if (i % 2 == 0) {
			int n = snprintf((char *)str_keys[i], XHASH_KEY_MAX,
					 "volume-%010u_%08u", i / 10, i % 10);
			len = (size_t)n;
		} else {
			for (size_t j = 0; j < len; j++)
				str_keys[i][j] = (unsigned char)rng_next(rng);
		}
		str_lens[i] = len;
	}
	/* keys must be distinct for the model: make collisions impossible by
	 * stamping the index into odd random string keys of length >= 2 */
	for (unsigned i = 1; i < UNIVERSE; i += 2) {
		if (str_lens[i] < 3)
			str_lens[i] = 3;
		str_keys[i][0] = 0xff;
		str_keys[i][1] = (unsigned char)(i >> 8);
		str_keys[i][2] = (unsigned char)i;
	}
}

static int t_insert(struct xhash *h, unsigned i, uint64_t v)
{
	return xhash_kind(h) == XHASH_KEY_INT
		   ? xhash_int_insert(h, int_keys[i], v)
		   : xhash_str_insert(h, str_keys[i], str_lens[i], v);
}

static int t_upsert(struct xhash *h, unsigned i, uint64_t v, uint64_t *old)
{
	return xhash_kind(h) == XHASH_KEY_INT
		   ? xhash_int_upsert(h, int_keys[i], v, old)
		   : xhash_str_upsert(h, str_keys[i], str_lens[i], v, old);
}

static int t_lookup(struct xhash *h, unsigned i, uint64_t *v)
{
	return xhash_kind(h) == XHASH_KEY_INT
		   ? xhash_int_lookup(h, int_keys[i], v)
		   : xhash_str_lookup(h, str_keys[i], str_lens[i], v);
}

static int t_delete(struct xhash *h, unsigned i, uint64_t *old)
{
	return xhash_kind(h) == XHASH_KEY_INT
		   ? xhash_int_delete(h, int_keys[i], old)
		   : xhash_str_delete(h, str_keys[i], str_lens[i], old);
}

static void check_full(struct xhash *h, const struct model *m)
{
	static unsigned char seen[UNIVERSE];
	struct xhash_iter it;
	struct xhash_item item;
	uint64_t n = 0, v;
	memset(seen, 0, sizeof(seen));
	EXPECT_UINT_EQ(xhash_count(h), m->count);
	xhash_iter_init(h, &it);
	while (xhash_iter_next(&it, &item) == 0) {
		/* the value encodes the candidate index, cross-check it */
		unsigned i = (unsigned)(item.value % UNIVERSE);
		EXPECT_UINT_LT(i, UNIVERSE);
		if (xhash_kind(h) == XHASH_KEY_INT)
			EXPECT_UINT_EQ(item.key_int, int_keys[i]);
		else {
			EXPECT_UINT_EQ(item.key_len, str_lens[i]);
			EXPECT_MEM_EQ(item.key_str, str_keys[i], str_lens[i]);
		}
		EXPECT(m->present[i]);
		EXPECT_UINT_EQ(item.value, m->value[i]);
		EXPECT_UINT_EQ(seen[i]++, 0);
		n++;
	}
	EXPECT_UINT_EQ(n, m->count);
	for (unsigned i = 0; i < UNIVERSE; i++) {
		int rc = t_lookup(h, i, &v);
		EXPECT_INT_EQ(rc, m->present[i] ? 0 : -ENOENT);
		if (m->present[i])
			EXPECT_UINT_EQ(v, m->value[i]);
	}
	struct xhash_stats st;
	EXPECT_INT_EQ(xhash_stats(h, &st), 0);
	EXPECT_UINT_EQ(st.count, m->count);
	EXPECT_UINT_LE(st.records * 3, st.index_slots * 2);
	EXPECT_UINT_LE(st.dense_used, st.dense_bytes);
}

static void run_differential(enum xhash_kind kind, uint64_t seed)
{
	static struct model m;
	uint64_t rng = seed;
	struct xhash *h = new_table(kind);
	memset(&m, 0, sizeof(m));
	make_keys(&rng);

	for (unsigned op = 0; op < OPS; op++) {
		/* phase-dependent insert share: 80% -> 50% -> 20% */
		unsigned phase = (op / 10000) % 5;
		unsigned ins_pct = phase < 2 ? 80 : phase < 4 ? 50 : 20;
		unsigned i = (unsigned)(rng_next(&rng) % UNIVERSE);
		uint64_t v = (rng_next(&rng) % 1000000) * UNIVERSE + i;
		unsigned r = (unsigned)(rng_next(&rng) % 100);
		uint64_t got = UINT64_MAX;
		int rc;

		if (r < ins_pct / 2) {
			rc = t_insert(h, i, v);
			if (m.present[i]) {
				EXPECT_INT_EQ(rc, -EEXIST);
			} else {
				EXPECT_INT_EQ(rc, 0);
				m.present[i] = 1;
				m.value[i] = v;
				m.count++;
			}
		} else if (r < ins_pct) {
			rc = t_upsert(h, i, v, &got);
			EXPECT_INT_EQ(rc, m.present[i] ? 1 : 0);
			if (m.present[i])
				EXPECT_UINT_EQ(got, m.value[i]);
			else
				m.count++;
			m.present[i] = 1;
			m.value[i] = v;
		} else if (r < ins_pct + (100 - ins_pct) / 2) {
			rc = t_delete(h, i, &got);
			if (m.present[i]) {
				EXPECT_INT_EQ(rc, 0);
				EXPECT_UINT_EQ(got, m.value[i]);
				m.present[i] = 0;
				m.count--;
			} else {
				EXPECT_INT_EQ(rc, -ENOENT);
			}
		} else {
			rc = t_lookup(h, i, &got);
			EXPECT_INT_EQ(rc, m.present[i] ? 0 : -ENOENT);
			if (m.present[i])
				EXPECT_UINT_EQ(got, m.value[i]);
		}
		EXPECT_UINT_EQ(xhash_count(h), m.count);
		if (op % 5000 == 4999)
			check_full(h, &m);
	}
	check_full(h, &m);
	struct xhash_stats st;
	EXPECT_INT_EQ(xhash_stats(h, &st), 0);
	EXPECT_UINT_GT(st.resizes, 3); /* the mix did exercise growth */
	/* drain completely, then check the empty table */
	for (unsigned i = 0; i < UNIVERSE; i++) {
		if (m.present[i]) {
			EXPECT_INT_EQ(t_delete(h, i, NULL), 0);
			m.present[i] = 0;
			m.count--;
		}
	}
	check_full(h, &m);
	xhash_destroy(h);
}

START_TEST(test_differential_int)
{
	run_differential(XHASH_KEY_INT, 0x1234567u + (uint64_t)_i);
}
END_TEST

START_TEST(test_differential_str)
{
	run_differential(XHASH_KEY_STR, 0x7654321u + (uint64_t)_i);
}
END_TEST

/* A differential run under random allocation failures: every failed insert
 * must leave the table exactly as the model says. */
START_TEST(test_differential_enomem)
{
	static struct model m;
	uint64_t rng = 99;
	struct test_alloc t;
	struct xhash_allocator a = test_allocator(&t);
	for (enum xhash_kind kind = XHASH_KEY_INT; kind <= XHASH_KEY_STR;
	     kind++) {
		struct xhash *h;
		EXPECT_INT_EQ(xhash_create(&h, kind, 0, &a), 0);
		memset(&m, 0, sizeof(m));
		make_keys(&rng);
		unsigned failures = 0;
		for (unsigned op = 0; op < 30000; op++) {
			unsigned i = (unsigned)(rng_next(&rng) % UNIVERSE);
			uint64_t v = (rng_next(&rng) % 1000) * UNIVERSE + i;
			t.fail_in = (rng_next(&rng) % 4 == 0) ? 0 : -1;
			if (rng_next(&rng) % 3) {
				int rc = t_insert(h, i, v);
				if (rc == -ENOMEM) {
					EXPECT(!m.present[i]);
					failures++;
				} else if (m.present[i]) {
					EXPECT_INT_EQ(rc, -EEXIST);
				} else {
					EXPECT_INT_EQ(rc, 0);
					m.present[i] = 1;
					m.value[i] = v;
					m.count++;
				}
			} else {
				int rc = t_delete(h, i, NULL);
				EXPECT_INT_EQ(rc, m.present[i] ? 0 : -ENOENT);
				if (m.present[i]) {
					m.present[i] = 0;
					m.count--;
				}
			}
			if (op % 3000 == 0) {
				t.fail_in = -1;
				check_full(h, &m);
			}
		}
		t.fail_in = -1;
		check_full(h, &m);
		EXPECT_UINT_GT(failures, 0);
		xhash_destroy(h);
		EXPECT_INT_EQ(t.live, 0);
	}
}
END_TEST

static Suite *xhash_suite(void)
{
	Suite *s = suite_create("xhash");
	TCase *tc = tcase_create("api");
	tcase_add_test(tc, test_create_bad_args);
	tcase_add_test(tc, test_create_enomem);
	tcase_add_test(tc, test_create_expected_no_growth);
	tcase_add_test(tc, test_int_basic);
	tcase_add_test(tc, test_wrong_kind_and_null);
	tcase_add_test(tc, test_str_basic);
	tcase_add_test(tc, test_str_bad_length);
	suite_add_tcase(s, tc);

	tc = tcase_create("growth");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_slot_widths);
	tcase_add_test(tc, test_hash_spread);
	tcase_add_test(tc, test_grow_enomem_int);
	tcase_add_test(tc, test_grow_enomem_str);
	tcase_add_test(tc, test_reserve);
	suite_add_tcase(s, tc);

	tc = tcase_create("iteration");
	tcase_add_test(tc, test_iter_exactly_once);
	tcase_add_test(tc, test_iter_delete_current);
	tcase_add_test(tc, test_iter_delete_others_and_upsert);
	tcase_add_test(tc, test_iter_insert);
	suite_add_tcase(s, tc);

	tc = tcase_create("random");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_differential_int, 0, 2);
	tcase_add_loop_test(tc, test_differential_str, 0, 2);
	tcase_add_test(tc, test_differential_enomem);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(xhash_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
