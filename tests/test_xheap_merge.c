/* SPDX-License-Identifier: MIT */
/*
 * xheap: memory freed in one class serves every class (review12 F6: a burst
 * of 4 MiB buffers carved the whole arena into that class; every smaller
 * allocation then failed with ENOMEM until a restart). Each test fails on
 * the session-8 heap, which never gave memory back across classes.
 */
#include "xheap.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int test_xheap_check(struct xheap *heap, unsigned tolerance);

#define MiB (1ULL << 20)

static void *heap_mem;

static struct xheap *new_heap(size_t size)
{
	heap_mem = aligned_alloc(64, size);
	ck_assert_ptr_nonnull(heap_mem);
	/* Garbage where the arena will be: xheap must not rely on zeroes. */
	memset(heap_mem, 0xa5, size);
	ck_assert_int_eq(xheap_init(heap_mem, size), 0);
	return heap_mem;
}

static void free_heap(void)
{
	free(heap_mem);
	heap_mem = NULL;
}

/* Allocate class-size buffers of size until -ENOMEM; returns how many. */
static unsigned fill(struct xheap *h, size_t size, uint64_t *offs, unsigned max)
{
	unsigned n = 0;
	int64_t r;

	while (n < max && (r = xheap_alloc(h, size, &offs[n])) > 0) {
		if (r != (int64_t)size)
			break;
		/* Mark both ends: a later overlap shows as a wrong mark. */
		memset(xheap_ptr(h, offs[n]), (int)(n & 0xff), 64);
		memset((char *)xheap_ptr(h, offs[n]) + size - 64,
		       (int)(n & 0xff), 64);
		n++;
	}
	ck_assert_uint_lt(n, max);
	ck_assert_int_eq(r, -ENOMEM);
	return n;
}

/* Plain comparisons in the loops: every Check assertion writes to a pipe,
 * which makes millions of them slow. */
static void check_marks(struct xheap *h, size_t size, uint64_t *offs,
			unsigned n)
{
	unsigned bad = 0;

	for (unsigned i = 0; i < n; i++) {
		unsigned char *p = xheap_ptr(h, offs[i]);

		for (unsigned j = 0; j < 64; j++)
			bad += p[j] != (i & 0xff) ||
			       p[size - 64 + j] != (i & 0xff);
	}
	ck_assert_uint_eq(bad, 0);
}

static void free_all(struct xheap *h, uint64_t *offs, unsigned n)
{
	unsigned bad = 0;

	for (unsigned i = 0; i < n; i++)
		bad += xheap_free(h, offs[i]) != 0;
	ck_assert_uint_eq(bad, 0);
}

/* How many buffers of size fit a whole arena of arena bytes. */
static unsigned fit(uint64_t arena, uint64_t size)
{
	return (unsigned)(arena / (size + 64));
}

/* F6 itself: the arena carved into 4 MiB buffers, all freed; then 4 KiB
 * buffers must fill the whole arena again, and then 4 MiB ones again. */
START_TEST(test_large_freed_serves_small)
{
	struct xheap *h = new_heap(64 * MiB);
	static uint64_t offs[20000];
	struct xheap_stats st;
	unsigned big, small, again;

	xheap_stats(h, &st);
	big = fill(h, 4 * MiB, offs, 100);
	ck_assert_uint_eq(big, fit(st.arena_bytes, 4 * MiB));
	check_marks(h, 4 * MiB, offs, big);
	free_all(h, offs, big);
	ck_assert_int_eq(xheap_verify(h), 0);

	small = fill(h, 4096, offs, 20000);
	/* All of it: the arena, less what the class caches of other sizes
	 * could hold (nothing here) and the headers. */
	ck_assert_uint_eq(small, fit(st.arena_bytes, 4096));
	check_marks(h, 4096, offs, small);
	ck_assert_int_eq(xheap_verify(h), 0);
	free_all(h, offs, small);

	again = fill(h, 4 * MiB, offs, 100);
	ck_assert_uint_eq(again, big);
	free_all(h, offs, again);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	free_heap();
}
END_TEST

/* The reverse: the arena carved into 4 KiB buffers, all freed; 1 MiB and
 * then 4 MiB buffers fill it again (the 4 KiB cache holds 1/64 of the arena,
 * which alloc gives back before it answers -ENOMEM). */
START_TEST(test_small_freed_serves_large)
{
	struct xheap *h = new_heap(64 * MiB);
	static uint64_t offs[20000];
	struct xheap_stats st;
	unsigned small, big, mid;

	xheap_stats(h, &st);
	small = fill(h, 4096, offs, 20000);
	ck_assert_uint_eq(small, fit(st.arena_bytes, 4096));
	/* Free in a scattered order so that merging has to join both
	 * neighbours, not only grow a run at its end. */
	for (unsigned i = 0; i < small; i += 2)
		ck_assert_int_eq(xheap_free(h, offs[i]), 0);
	for (unsigned i = 1; i < small; i += 2)
		ck_assert_int_eq(xheap_free(h, offs[i]), 0);
	xheap_stats(h, &st);
	ck_assert_uint_gt(st.free_list_bytes[12], 0);
	ck_assert_uint_le(st.free_list_bytes[12], st.arena_bytes / 64);
	ck_assert_int_eq(xheap_verify(h), 0);

	mid = fill(h, MiB, offs, 100);
	ck_assert_uint_eq(mid, fit(st.arena_bytes, MiB));
	check_marks(h, MiB, offs, mid);
	free_all(h, offs, mid);
	big = fill(h, 4 * MiB, offs, 100);
	ck_assert_uint_eq(big, fit(st.arena_bytes, 4 * MiB));
	free_all(h, offs, big);
	xheap_stats(h, &st);
	ck_assert_uint_eq(st.allocated_bytes, 0);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	free_heap();
}
END_TEST

/* Every class cache full and the general allocator empty: a class no cache
 * holds still gets memory, from the caches given back and merged. */
START_TEST(test_enomem_gives_caches_back)
{
	struct xheap *h = new_heap(4 * MiB + 4096);
	static uint64_t offs[70000];
	struct xheap_stats st;
	unsigned n = 0, c, i;
	uint64_t off;
	int64_t r;

	/* Many classes, interleaved, until the arena is full. */
	for (c = 6;; c = c == 12 ? 6 : c + 1) {
		r = xheap_alloc(h, (size_t)1 << c, &offs[n]);
		if (r == -ENOMEM)
			break;
		ck_assert_int_eq(r, (int64_t)1 << c);
		n++;
	}
	free_all(h, offs, n);
	xheap_stats(h, &st);
	for (c = 6; c <= 12; c++)
		ck_assert_uint_gt(st.free_list_bytes[c], 0);
	/* The whole arena at once: needs every cached buffer merged. */
	r = xheap_alloc(h, 4 * MiB, &off);
	ck_assert_int_eq(r, (int64_t)(4 * MiB));
	xheap_stats(h, &st);
	for (c = 0; c < 41; c++)
		ck_assert_uint_eq(st.free_list_bytes[c], 0);
	ck_assert_int_eq(xheap_free(h, off), 0);
	/* And back: the small classes serve again. */
	for (i = 0; i < 100; i++)
		ck_assert_int_eq(xheap_alloc(h, 100, &offs[i]), 128);
	free_all(h, offs, 100);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	free_heap();
}
END_TEST

struct live {
	uint64_t off;
	int64_t size;
	uint64_t tag;
};

static uint64_t mark_of(uint64_t tag, uint64_t i)
{
	return tag * 0x9E3779B97F4A7C15ULL ^ i;
}

static void write_marks(struct xheap *h, const struct live *l)
{
	uint64_t *p = xheap_ptr(h, l->off);
	uint64_t words = (uint64_t)l->size / 8, step = words / 8 + 1, i;

	for (i = 0; i < words; i += step)
		p[i] = mark_of(l->tag, i);
	p[words - 1] = mark_of(l->tag, words - 1);
}

static void check_live(struct xheap *h, const struct live *l)
{
	uint64_t *p = xheap_ptr(h, l->off);
	uint64_t words = (uint64_t)l->size / 8, step = words / 8 + 1, i;
	unsigned bad = p[words - 1] != mark_of(l->tag, words - 1);

	for (i = 0; i < words; i += step)
		bad += p[i] != mark_of(l->tag, i);
	ck_assert_uint_eq(bad, 0);
}

/* Random sizes from 1 B to 2 MiB against a model: no two live buffers (with
 * their headers) overlap, each keeps its marks, the structure verifies, and
 * once everything is freed one buffer of the whole arena fits again. */
START_TEST(test_random_model)
{
	enum { SLOTS = 256, ITERS = 40000 };
	struct xheap *h = new_heap(8 * MiB + 4096);
	static struct live live[SLOTS];
	uint64_t rnd = 0x853c49e6748fea9bULL, off, tag = 0;
	unsigned i, k, j, enomem = 0, overlaps;
	struct xheap_stats st;
	int64_t r;

	memset(live, 0, sizeof(live));
	for (i = 0; i < ITERS; i++) {
		rnd ^= rnd << 13;
		rnd ^= rnd >> 7;
		rnd ^= rnd << 17;
		k = (unsigned)(rnd % SLOTS);
		if (live[k].size) {
			check_live(h, &live[k]);
			ck_assert_int_eq(xheap_usable_size(h, live[k].off),
					 live[k].size);
			ck_assert_int_eq(xheap_free(h, live[k].off), 0);
			ck_assert_int_eq(xheap_free(h, live[k].off), -EALREADY);
			live[k].size = 0;
		} else {
			/* Log-uniform: 2^0 .. 2^21 bytes. */
			size_t sz =
			    1 + (size_t)((rnd >> 32) &
					 ((1ULL << ((rnd >> 24) % 22)) - 1));

			r = xheap_alloc(h, sz, &off);
			if (r == -ENOMEM) {
				enomem++;
				continue;
			}
			ck_assert_int_ge(r, (int64_t)sz);
			ck_assert_int_lt(r, 2 * (int64_t)sz + 64);
			for (j = 0, overlaps = 0; j < SLOTS; j++) {
				/* [off - 64, off + r) vs the other. */
				if (live[j].size &&
				    off + (uint64_t)r > live[j].off - 64 &&
				    live[j].off + (uint64_t)live[j].size >
					off - 64)
					overlaps++;
			}
			ck_assert_uint_eq(overlaps, 0);
			live[k].off = off;
			live[k].size = r;
			live[k].tag = ++tag;
			write_marks(h, &live[k]);
		}
		if (i % 4000 == 0)
			ck_assert_int_eq(xheap_verify(h), 0);
	}
	ck_assert_uint_gt(enomem, 0); /* the heap was under pressure */
	for (k = 0; k < SLOTS; k++)
		if (live[k].size) {
			check_live(h, &live[k]);
			ck_assert_int_eq(xheap_free(h, live[k].off), 0);
		}
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	/* The whole arena (8 MiB of 8 MiB + 4 KiB - header) in one piece. */
	ck_assert_int_eq(xheap_alloc(h, 8 * MiB, &off), (int64_t)(8 * MiB));
	xheap_stats(h, &st);
	ck_assert_uint_eq(st.allocated_bytes, 8 * MiB);
	ck_assert_int_eq(xheap_free(h, off), 0);
	ck_assert_int_eq(xheap_trim(h), 0);
	xheap_stats(h, &st);
	ck_assert_uint_eq(st.general_free_bytes, st.arena_bytes);
	free_heap();
}
END_TEST

/* A buffer merged into its free neighbour: a late double free still says
 * -EALREADY and changes nothing; offsets inside free memory, inside a
 * merged range, or at a split tail's header are refused -EINVAL. */
START_TEST(test_merged_double_free_and_foreign)
{
	struct xheap *h = new_heap(64 * MiB);
	struct xheap_stats before, after;
	uint64_t a, b, c, tail;

	/* 2 MiB buffers do not fit a class cache (1 MiB of 64): they go to
	 * the general allocator and merge at once. */
	ck_assert_int_eq(xheap_alloc(h, 2 * MiB, &a), (int64_t)(2 * MiB));
	ck_assert_int_eq(xheap_alloc(h, 2 * MiB, &b), (int64_t)(2 * MiB));
	ck_assert_int_eq(xheap_alloc(h, 2 * MiB, &c), (int64_t)(2 * MiB));
	ck_assert_uint_eq(b, a + 2 * MiB + 64);
	ck_assert_int_eq(xheap_free(h, a), 0);
	ck_assert_int_eq(xheap_free(h, b), 0); /* merges into a */
	xheap_stats(h, &before);
	ck_assert_uint_eq(before.free_list_bytes[21], 0);
	ck_assert_int_eq(xheap_free(h, b), -EALREADY);
	ck_assert_int_eq(xheap_free(h, a), -EALREADY);
	ck_assert_int_eq(xheap_usable_size(h, b), -EALREADY);
	ck_assert_int_eq(xheap_free(h, a + 4096), -EINVAL);
	ck_assert_int_eq(xheap_free(h, b + 64), -EINVAL);
	tail = c + 2 * MiB + 64; /* the free tail block's header is there */
	ck_assert_int_eq(xheap_free(h, tail), -EINVAL);
	ck_assert_int_eq(xheap_free(h, tail + 64), -EINVAL);
	ck_assert_int_eq(xheap_usable_size(h, tail + 64), -EINVAL);
	ck_assert_int_eq(xheap_trim(NULL), -EINVAL);
	ck_assert_int_eq(xheap_verify(NULL), -EINVAL);
	xheap_stats(h, &after);
	ck_assert_int_eq(memcmp(&before, &after, sizeof(before)), 0);
	ck_assert_int_eq(xheap_verify(h), 0);
	/* The merged 4 MiB + 64 B range serves a 4 MiB buffer in place. */
	ck_assert_int_eq(xheap_alloc(h, 4 * MiB, &a), (int64_t)(4 * MiB));
	ck_assert_uint_eq(a, b - 2 * MiB - 64);
	ck_assert_int_eq(xheap_free(h, a), 0);
	ck_assert_int_eq(xheap_free(h, c), 0);
	xheap_stats(h, &after);
	ck_assert_uint_eq(after.general_free_bytes, after.arena_bytes);
	ck_assert_int_eq(xheap_verify(h), 0);
	free_heap();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xheap_merge");
	TCase *tc = tcase_create("merge");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_large_freed_serves_small);
	tcase_add_test(tc, test_small_freed_serves_large);
	tcase_add_test(tc, test_enomem_gives_caches_back);
	tcase_add_test(tc, test_random_model);
	tcase_add_test(tc, test_merged_double_free_and_foreign);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
