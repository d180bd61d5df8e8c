/* SPDX-License-Identifier: MIT */
/* xheap unit tests: every API path and every refused input. */
#include "xheap.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int test_xheap_check(struct xheap *heap, unsigned tolerance);

#define GiB (1ULL << 30)

static void *heap_mem;
static size_t heap_mem_size;

static struct xheap *new_heap(size_t size)
{
	heap_mem_size = size;
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

static void assert_stats_eq(const struct xheap_stats *a,
			    const struct xheap_stats *b)
{
	ck_assert_int_eq(memcmp(a, b, sizeof(*a)), 0);
}

START_TEST(test_init_refuses_bad_input)
{
	char *mem = aligned_alloc(64, 8192);

	ck_assert_ptr_nonnull(mem);
	ck_assert_int_eq(xheap_init(NULL, 8192), -EINVAL);
	ck_assert_int_eq(xheap_init((struct xheap *)(mem + 8), 4096), -EINVAL);
	ck_assert_int_eq(xheap_init((struct xheap *)mem, 4095), -EINVAL);
	ck_assert_int_eq(xheap_init((struct xheap *)mem, 0), -EINVAL);
	ck_assert_int_eq(xheap_init((struct xheap *)mem, 4096), 0);
	free(mem);
}
END_TEST

START_TEST(test_alloc_sizes_and_alignment)
{
	static const struct {
		size_t ask;
		int64_t usable;
	} cases[] = {
	    {1, 64},	  {63, 64},	  {64, 64},	    {65, 128},
	    {128, 128},	  {129, 256},	  {4095, 4096},	    {4096, 4096},
	    {4097, 8192}, {65536, 65536}, {100000, 131072},
	};
	struct xheap *h = new_heap(1 << 20);
	uint64_t offs[sizeof(cases) / sizeof(cases[0])];
	struct xheap_stats st;
	uint64_t total = 0;
	unsigned i, j;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t r = xheap_alloc(h, cases[i].ask, &offs[i]);
		char *p;

		ck_assert_int_eq(r, cases[i].usable);
		ck_assert_uint_eq(offs[i] % 64, 0);
		ck_assert_int_eq(xheap_usable_size(h, offs[i]), r);
		p = xheap_ptr(h, offs[i]);
		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % 64, 0);
		ck_assert_uint_eq(xheap_off(h, p), offs[i]);
		ck_assert_uint_eq(xheap_off(h, p + r - 1), offs[i] + r - 1);
		memset(p, (int)i + 1, (size_t)r);
		total += (uint64_t)r;
	}
	/* No two buffers overlap: each still holds its own fill. */
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned char *p = xheap_ptr(h, offs[i]);

		for (j = 0; j < cases[i].usable; j++)
			ck_assert_uint_eq(p[j], i + 1);
	}
	xheap_stats(h, &st);
	ck_assert_uint_eq(st.allocated_bytes, total);
	ck_assert_uint_eq(st.header_bytes, 64 * (sizeof(offs) / 8));
	ck_assert_uint_eq(st.carved_bytes, total + st.header_bytes);
	ck_assert_uint_le(st.carved_bytes, st.arena_bytes);
	ck_assert_uint_le(st.arena_bytes, heap_mem_size);
	ck_assert_uint_ge(st.arena_bytes, heap_mem_size - 4096);
	for (i = 0; i < sizeof(offs) / 8; i++)
		ck_assert_int_eq(xheap_free(h, offs[i]), 0);
	xheap_stats(h, &st);
	ck_assert_uint_eq(st.allocated_bytes, 0);
	ck_assert_uint_eq(st.free_list_bytes[6], 3 * 64);
	ck_assert_uint_eq(st.free_list_bytes[12], 2 * 4096);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	free_heap();
}
END_TEST

START_TEST(test_alloc_refuses_bad_sizes)
{
	struct xheap *h = new_heap(1 << 16);
	struct xheap_stats before, after;
	uint64_t off = 12345;

	xheap_stats(h, &before);
	ck_assert_int_eq(xheap_alloc(h, 0, &off), -EINVAL);
	ck_assert_int_eq(xheap_alloc(h, 1 << 16, &off), -EINVAL);
	ck_assert_int_eq(xheap_alloc(h, (size_t)1 << 41, &off), -EINVAL);
	ck_assert_int_eq(xheap_alloc(h, SIZE_MAX, &off), -EINVAL);
	ck_assert_int_eq(xheap_alloc(h, 64, NULL), -EINVAL);
	ck_assert_int_eq(xheap_alloc(NULL, 64, &off), -EINVAL);
	ck_assert_uint_eq(off, 12345);
	xheap_stats(h, &after);
	assert_stats_eq(&before, &after);
	free_heap();
}
END_TEST

START_TEST(test_free_refuses_foreign_and_double)
{
	struct xheap *h = new_heap(1 << 20);
	struct xheap_stats before, after;
	uint64_t a, b, c;
	char *pa, *pb;

	ck_assert_int_eq(xheap_alloc(h, 4096, &a), 4096);
	ck_assert_int_eq(xheap_alloc(h, 4096, &b), 4096);
	ck_assert_int_eq(xheap_alloc(h, 64, &c), 64);
	pa = xheap_ptr(h, a);
	pb = xheap_ptr(h, b);
	/* A copy of a's header inside b's data must not pass for a buffer. */
	memcpy(pb + 64, pa - 64, 64);

	xheap_stats(h, &before);
	ck_assert_int_eq(xheap_free(h, 0), -EINVAL);
	ck_assert_int_eq(xheap_free(h, a + 1), -EINVAL);
	ck_assert_int_eq(xheap_free(h, a + 64), -EINVAL);  /* inside a */
	ck_assert_int_eq(xheap_free(h, a - 64), -EINVAL);  /* its header */
	ck_assert_int_eq(xheap_free(h, b + 128), -EINVAL); /* forged */
	ck_assert_int_eq(xheap_free(h, c + 128), -EINVAL); /* not carved */
	ck_assert_int_eq(xheap_free(h, 1 << 20), -EINVAL); /* past end */
	ck_assert_int_eq(xheap_free(h, 1ULL << 40), -EINVAL);
	ck_assert_int_eq(xheap_free(h, UINT64_MAX - 63), -EINVAL);
	ck_assert_int_eq(xheap_free(NULL, a), -EINVAL);
	ck_assert_int_eq(xheap_usable_size(h, a + 64), -EINVAL);
	ck_assert_int_eq(xheap_usable_size(h, b + 128), -EINVAL);
	xheap_stats(h, &after);
	assert_stats_eq(&before, &after);
	ck_assert_int_eq(xheap_usable_size(h, a), 4096);

	ck_assert_int_eq(xheap_free(h, a), 0);
	xheap_stats(h, &before);
	ck_assert_int_eq(xheap_free(h, a), -EALREADY);
	ck_assert_int_eq(xheap_usable_size(h, a), -EALREADY);
	xheap_stats(h, &after);
	assert_stats_eq(&before, &after);
	ck_assert_uint_eq(after.free_list_bytes[12], 4096);

	ck_assert_int_eq(xheap_free(h, b), 0);
	ck_assert_int_eq(xheap_free(h, c), 0);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	free_heap();
}
END_TEST

START_TEST(test_ptr_off_bounds)
{
	struct xheap *h = new_heap(1 << 16);
	char *base = (char *)h;
	uint64_t off;

	ck_assert_ptr_null(xheap_ptr(h, 0));
	ck_assert_ptr_null(xheap_ptr(h, 1 << 16));
	ck_assert_ptr_null(xheap_ptr(h, UINT64_MAX));
	ck_assert_uint_eq(xheap_off(h, base), UINT64_MAX);
	ck_assert_uint_eq(xheap_off(h, base + (1 << 16)), UINT64_MAX);
	ck_assert_uint_eq(xheap_off(h, base - 1), UINT64_MAX);
	ck_assert_int_eq(xheap_alloc(h, 100, &off), 128);
	ck_assert_ptr_eq(xheap_ptr(h, off), base + off);
	ck_assert_uint_eq(xheap_off(h, base + off), off);
	ck_assert_ptr_eq(xheap_ptr(h, (1 << 16) - 1), base + (1 << 16) - 1);
	free_heap();
}
END_TEST

START_TEST(test_reuse_per_class)
{
	struct xheap *h = new_heap(1 << 20);
	struct xheap_stats st, st2;
	uint64_t a, b, c, d, e;

	ck_assert_int_eq(xheap_alloc(h, 4096, &a), 4096);
	ck_assert_int_eq(xheap_alloc(h, 4096, &b), 4096);
	ck_assert_int_eq(xheap_free(h, a), 0);
	ck_assert_int_eq(xheap_free(h, b), 0);
	xheap_stats(h, &st);
	/* Another class does not take the freed 4 KiB buffers. */
	ck_assert_int_eq(xheap_alloc(h, 64, &c), 64);
	ck_assert_uint_ne(c, a);
	ck_assert_uint_ne(c, b);
	/* The same class reuses them, last freed first, without carving. */
	ck_assert_int_eq(xheap_alloc(h, 3000, &d), 4096);
	ck_assert_uint_eq(d, b);
	ck_assert_int_eq(xheap_alloc(h, 4096, &e), 4096);
	ck_assert_uint_eq(e, a);
	xheap_stats(h, &st2);
	ck_assert_uint_eq(st2.carved_bytes, st.carved_bytes + 64 + 64);
	ck_assert_uint_eq(st2.free_list_bytes[12], 0);
	ck_assert_int_eq(xheap_free(h, c), 0);
	ck_assert_int_eq(xheap_free(h, d), 0);
	ck_assert_int_eq(xheap_free(h, e), 0);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	free_heap();
}
END_TEST

START_TEST(test_exhaustion_changes_nothing)
{
	struct xheap *h = new_heap(64 * 1024);
	struct xheap_stats before, after;
	uint64_t offs[64], off, small;
	unsigned n = 0, i;

	while (n < 64 && xheap_alloc(h, 4096, &offs[n]) == 4096)
		n++;
	ck_assert_uint_gt(n, 10);
	ck_assert_uint_lt(n, 16);
	xheap_stats(h, &before);
	off = 777;
	ck_assert_int_eq(xheap_alloc(h, 4096, &off), -ENOMEM);
	/* A big failed request does not move the carver past the end. */
	ck_assert_int_eq(xheap_alloc(h, 32768, &off), -ENOMEM);
	ck_assert_uint_eq(off, 777);
	xheap_stats(h, &after);
	assert_stats_eq(&before, &after);

	/* The leftover still serves smaller classes. */
	if (before.arena_bytes - before.carved_bytes >= 128) {
		ck_assert_int_eq(xheap_alloc(h, 64, &small), 64);
		ck_assert_int_eq(xheap_free(h, small), 0);
	}
	/* Free one and allocate again: the heap kept working. */
	ck_assert_int_eq(xheap_free(h, offs[3]), 0);
	ck_assert_int_eq(xheap_alloc(h, 4096, &off), 4096);
	ck_assert_uint_eq(off, offs[3]);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(xheap_free(h, offs[i]), 0);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	xheap_stats(h, &after);
	ck_assert_uint_eq(after.allocated_bytes, 0);
	free_heap();
}
END_TEST

START_TEST(test_stats_consistency_random)
{
	struct xheap *h = new_heap(4 << 20);
	uint64_t offs[256] = {0};
	int64_t sizes[256] = {0};
	unsigned seed = 12345, i, k;
	uint64_t live = 0;
	struct xheap_stats st;

	for (i = 0; i < 20000; i++) {
		seed = seed * 1103515245 + 12345;
		k = (seed >> 8) % 256;
		if (sizes[k]) {
			ck_assert_int_eq(xheap_usable_size(h, offs[k]),
					 sizes[k]);
			ck_assert_int_eq(xheap_free(h, offs[k]), 0);
			live -= (uint64_t)sizes[k];
			sizes[k] = 0;
		} else {
			size_t sz = 1 + (seed >> 12) % 20000;
			int64_t r = xheap_alloc(h, sz, &offs[k]);

			if (r == -ENOMEM)
				continue;
			ck_assert_int_ge(r, (int64_t)sz);
			ck_assert_int_lt(r, 2 * (int64_t)sz + 64);
			sizes[k] = r;
			live += (uint64_t)r;
		}
		if (i % 1000 == 0) {
			xheap_stats(h, &st);
			ck_assert_uint_eq(st.allocated_bytes, live);
			ck_assert_int_eq(test_xheap_check(h, 0), 0);
		}
	}
	for (k = 0; k < 256; k++)
		if (sizes[k])
			ck_assert_int_eq(xheap_free(h, offs[k]), 0);
	xheap_stats(h, &st);
	ck_assert_uint_eq(st.allocated_bytes, 0);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	free_heap();
}
END_TEST

/* A free list holding a buffer whose header says it is allocated (memory
 * scribbled over) is refused with -EIO, never handed out. The test copies
 * one buffer header over another: it knows only that the 64 bytes before a
 * buffer are its header. */
START_TEST(test_corrupted_free_list_is_eio)
{
	struct xheap *h = new_heap(1 << 20);
	uint64_t x, y, off = 99;
	char *px, *py;

	ck_assert_int_eq(xheap_alloc(h, 4096, &x), 4096);
	ck_assert_int_eq(xheap_alloc(h, 4096, &y), 4096);
	px = xheap_ptr(h, x);
	py = xheap_ptr(h, y);
	ck_assert_int_eq(xheap_free(h, x), 0);
	memcpy(px - 64, py - 64, 64); /* x now looks like an allocated y */
	ck_assert_int_eq(xheap_alloc(h, 4096, &off), -EIO);
	ck_assert_uint_eq(off, 99);
	/* x is out of circulation and no longer passes for a buffer. */
	ck_assert_int_eq(xheap_free(h, x), -EINVAL);
	ck_assert_int_eq(xheap_alloc(h, 4096, &off), 4096);
	ck_assert_uint_ne(off, x);
	ck_assert_int_eq(xheap_free(h, off), 0);
	ck_assert_int_eq(xheap_free(h, y), 0);

	/* A zeroed header on a free list: popping it is -EIO, and the list
	 * head it leaves behind (block index 0, the heap header) is refused
	 * with -EIO instead of being followed outside the arena. */
	ck_assert_int_eq(xheap_alloc(h, 256, &x), 256);
	ck_assert_int_eq(xheap_free(h, x), 0);
	memset((char *)xheap_ptr(h, x) - 64, 0, 64);
	ck_assert_int_eq(xheap_alloc(h, 256, &off), -EIO);
	ck_assert_int_eq(xheap_alloc(h, 256, &off), -EIO);
	/* Other classes are unaffected. */
	ck_assert_int_eq(xheap_alloc(h, 512, &off), 512);
	ck_assert_int_eq(xheap_free(h, off), 0);
	free_heap();
}
END_TEST

/* Serve allocations of sizes[0..n) in turn from a new heap of mem bytes:
 * the index of the first that fails with -ENOMEM, or n if all succeed. */
static size_t serve_in_turn(uint64_t mem, const uint64_t *sizes, size_t n)
{
	struct xheap *h = new_heap(mem);
	uint64_t off;
	size_t k;

	for (k = 0; k < n; k++) {
		int64_t got = xheap_alloc(h, sizes[k], &off);

		if (got == -ENOMEM)
			break;
		ck_assert_msg(got >= (int64_t)sizes[k],
			      "alloc %zu of %" PRIu64 ": %" PRId64, k, sizes[k],
			      got);
	}
	free_heap();
	return k;
}

/* xheap_arena_bytes_for and xheap_mem_size_for are exact: a new heap of
 * the size they give serves the allocations, in any order and of mixed
 * sizes; one 64-byte unit less fails the last with -ENOMEM (the stack
 * launcher sizes the segment for cached's reserved requests and vlmc's
 * first read with them); out of range they are 0. */
START_TEST(test_mem_size_for)
{
	static const uint64_t one[] = {1, 64, 65, 4096, 5000, 128 << 10};
	static const uint64_t mixed[][6] = {
	    {128 << 10, 475328, 128 << 10, 100, 128 << 10, 4096},
	    {475328, 100, 4096, 128 << 10, 128 << 10, 128 << 10}};
	uint64_t sizes[32], arena, mem;

	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
		for (size_t n = 2; n <= 32; n += 15) {
			for (size_t k = 0; k < n; k++)
				sizes[k] = one[i];
			arena = n * xheap_arena_bytes_for(one[i]);
			mem = xheap_mem_size_for(arena);
			ck_assert_uint_ge(mem, 4096);
			ck_assert_uint_eq(serve_in_turn(mem, sizes, n), n);
			if (mem - 64 >= 4096) /* else the 4 KiB floor */
				ck_assert_uint_eq(
				    serve_in_turn(mem - 64, sizes, n), n - 1);
		}
	for (size_t i = 0; i < 2; i++) {
		arena = 0;
		for (size_t k = 0; k < 6; k++)
			arena += xheap_arena_bytes_for(mixed[i][k]);
		mem = xheap_mem_size_for(arena);
		ck_assert_uint_eq(serve_in_turn(mem, mixed[i], 6), 6);
		ck_assert_uint_eq(serve_in_turn(mem - 64, mixed[i], 6), 5);
	}
	/* the header's promise: 4 KiB takes 4 KiB + 64 B of arena */
	ck_assert_uint_eq(xheap_arena_bytes_for(4096), 4096 + 64);
	ck_assert_uint_eq(xheap_arena_bytes_for(0), 0);
	ck_assert_uint_eq(xheap_arena_bytes_for((1ULL << 40) + 1), 0);
	ck_assert_uint_eq(xheap_mem_size_for(0), 4096);
	ck_assert_uint_eq(xheap_mem_size_for(XHEAP_MAX_SIZE), 0);
}
END_TEST

/* Write and check a few bytes at both ends of a buffer: enough to prove the
 * offset arithmetic without populating gigabytes. */
static void touch(struct xheap *h, uint64_t off, uint64_t size, char v)
{
	char *p = xheap_ptr(h, off);

	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(xheap_off(h, p + size - 1), off + size - 1);
	p[0] = v;
	p[size - 1] = (char)(v + 1);
}

static void check_touch(struct xheap *h, uint64_t off, uint64_t size, char v)
{
	char *p = xheap_ptr(h, off);

	ck_assert_int_eq(p[0], v);
	ck_assert_int_eq(p[size - 1], (char)(v + 1));
}

START_TEST(test_arena_beyond_4gib)
{
	size_t size = 6 * GiB;
	struct xheap *h;
	struct xheap_stats st;
	uint64_t big[5], small[4], again;
	unsigned i, n = 0;

	h = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ck_assert_ptr_ne(h, MAP_FAILED);
	ck_assert_int_eq(xheap_init(h, size), 0);
	xheap_stats(h, &st);
	ck_assert_uint_gt(st.arena_bytes, 5 * GiB);

	/* 1 GiB buffers: the fifth one cannot fit (headers), the carver
	 * then lies beyond 4 GiB. */
	for (i = 0; i < 5; i++) {
		int64_t r = xheap_alloc(h, GiB, &big[i]);

		if (r == -ENOMEM)
			break;
		ck_assert_int_eq(r, (int64_t)GiB);
		touch(h, big[i], GiB, (char)i);
		n++;
	}
	ck_assert_uint_eq(n, 5);
	ck_assert_uint_gt(big[4], 4 * GiB);
	ck_assert_int_eq(xheap_alloc(h, GiB, &again), -ENOMEM);
	/* Small buffers carved beyond 4 GiB. */
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(xheap_alloc(h, 4096, &small[i]), 4096);
		ck_assert_uint_gt(small[i], 5 * GiB);
		touch(h, small[i], 4096, (char)(10 + i));
	}
	for (i = 0; i < 5; i++)
		check_touch(h, big[i], GiB, (char)i);
	for (i = 0; i < 4; i++)
		check_touch(h, small[i], 4096, (char)(10 + i));
	ck_assert_int_eq(xheap_usable_size(h, big[4]), (int64_t)GiB);
	ck_assert_int_eq(xheap_usable_size(h, small[3]), 4096);

	/* Free and reuse above 4 GiB. */
	ck_assert_int_eq(xheap_free(h, big[4]), 0);
	ck_assert_int_eq(xheap_free(h, big[4]), -EALREADY);
	ck_assert_int_eq(xheap_free(h, small[2]), 0);
	ck_assert_int_eq(xheap_alloc(h, GiB - 100, &again), (int64_t)GiB);
	ck_assert_uint_eq(again, big[4]);
	ck_assert_int_eq(xheap_alloc(h, 4000, &again), 4096);
	ck_assert_uint_eq(again, small[2]);
	ck_assert_int_eq(xheap_free(h, small[3] + 4096 + 64), -EINVAL);

	xheap_stats(h, &st);
	ck_assert_uint_eq(st.allocated_bytes, 5 * GiB + 4 * 4096);
	for (i = 0; i < 5; i++)
		ck_assert_int_eq(xheap_free(h, big[i]), 0);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(xheap_free(h, small[i]), 0);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	ck_assert_int_eq(munmap(h, size), 0);
}
END_TEST

/* The 32-bit unit indexes end at XHEAP_MAX_SIZE (256 GiB - 64 B): more
 * memory is refused (it once was taken and its rest silently left unused),
 * untouched; exactly that much is managed whole, and buffers up to the
 * limit work. */
START_TEST(test_arena_index_limit)
{
	size_t size = 300 * GiB;
	struct xheap *h;
	struct xheap_stats st;
	uint64_t off, last = 0;
	int64_t r, last_size = 0;
	unsigned c;

	ck_assert_uint_eq(XHEAP_MAX_SIZE, 256 * GiB - 64);
	h = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (h == MAP_FAILED)
		return; /* no such address space here: nothing to test */
	memset(h, 0x5a, 4096);
	ck_assert_int_eq(xheap_init(h, size), -EFBIG);
	ck_assert_int_eq(xheap_init(h, XHEAP_MAX_SIZE + 64), -EFBIG);
	ck_assert_int_eq(xheap_init(h, XHEAP_MAX_SIZE + 1), -EFBIG);
	for (unsigned i = 0; i < 4096; i++)
		ck_assert_int_eq(((unsigned char *)h)[i], 0x5a);
	ck_assert_int_eq(xheap_init(h, XHEAP_MAX_SIZE), 0);
	xheap_stats(h, &st);
	/* all of it but the heap's own header (about 1 KiB) is arena */
	ck_assert_uint_lt(st.arena_bytes, XHEAP_MAX_SIZE);
	ck_assert_uint_gt(st.arena_bytes, XHEAP_MAX_SIZE - 4096);
	ck_assert_int_eq(xheap_alloc(h, 256 * GiB, &off), -EINVAL);
	/* 128 + 64 + ... GiB: the carver walks up to the index limit. */
	for (c = 37; c >= 12; c--) {
		r = xheap_alloc(h, (size_t)1 << c, &off);
		if (r == -ENOMEM)
			continue;
		ck_assert_int_eq(r, (int64_t)1 << c);
		touch(h, off, (uint64_t)r, 7);
		ck_assert_int_eq(xheap_usable_size(h, off), r);
		last = off;
		last_size = r;
	}
	ck_assert_uint_gt(last, 255 * GiB);
	ck_assert_int_eq(xheap_free(h, last), 0);
	ck_assert_int_eq(xheap_alloc(h, (size_t)last_size, &off), last_size);
	ck_assert_uint_eq(off, last);
	ck_assert_int_eq(munmap(h, size), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xheap");
	TCase *tc = tcase_create("unit");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_init_refuses_bad_input);
	tcase_add_test(tc, test_alloc_sizes_and_alignment);
	tcase_add_test(tc, test_alloc_refuses_bad_sizes);
	tcase_add_test(tc, test_free_refuses_foreign_and_double);
	tcase_add_test(tc, test_ptr_off_bounds);
	tcase_add_test(tc, test_reuse_per_class);
	tcase_add_test(tc, test_exhaustion_changes_nothing);
	tcase_add_test(tc, test_stats_consistency_random);
	tcase_add_test(tc, test_corrupted_free_list_is_eio);
	tcase_add_test(tc, test_mem_size_for);
	tcase_add_test(tc, test_arena_beyond_4gib);
	tcase_add_test(tc, test_arena_index_limit);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
