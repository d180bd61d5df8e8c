/* SPDX-License-Identifier: MIT */
/* xobj unit tests: every API path and every refused input. */
#include "xobj.h"
#include "xq.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void *pool_mem;

static struct xobj_pool *new_pool(uint32_t count, size_t obj_size)
{
	size_t size = xobj_pool_size(count, obj_size);

	ck_assert_uint_gt(size, 0);
	pool_mem = aligned_alloc(64, (size + 63) & ~(size_t)63);
	ck_assert_ptr_nonnull(pool_mem);
	/* Garbage first: init must zero the objects itself. */
	memset(pool_mem, 0xa5, size);
	ck_assert_int_eq(xobj_pool_init(pool_mem, count, obj_size, size), 0);
	return pool_mem;
}

static void free_pool(void)
{
	free(pool_mem);
	pool_mem = NULL;
}

START_TEST(test_pool_size)
{
	ck_assert_uint_eq(xobj_pool_size(0, 64), 0);
	ck_assert_uint_eq(xobj_pool_size(10, 0), 0);
	ck_assert_uint_eq(xobj_pool_size((1u << 31) + 1, 64), 0);
	ck_assert_uint_eq(xobj_pool_size(UINT32_MAX, 64), 0);
	ck_assert_uint_eq(xobj_pool_size(10, SIZE_MAX), 0);
	ck_assert_uint_eq(xobj_pool_size(1u << 31, (size_t)1 << 40), 0);
	ck_assert_uint_ge(xobj_pool_size(10, 100), 10 * 128);
	ck_assert_uint_ge(xobj_pool_size(1, 1), 64);
	ck_assert_uint_eq(xobj_pool_size(10, 100) % 64, 0);
	ck_assert_uint_gt(xobj_pool_size(1u << 31, 64), (size_t)64 << 31);
}
END_TEST

START_TEST(test_init_refuses_bad_input)
{
	size_t need = xobj_pool_size(16, 100);
	char *mem = aligned_alloc(64, need + 64);

	ck_assert_ptr_nonnull(mem);
	ck_assert_int_eq(xobj_pool_init(NULL, 16, 100, need), -EINVAL);
	ck_assert_int_eq(
	    xobj_pool_init((struct xobj_pool *)(mem + 8), 16, 100, need),
	    -EINVAL);
	ck_assert_int_eq(
	    xobj_pool_init((struct xobj_pool *)mem, 16, 100, need - 1),
	    -EINVAL);
	ck_assert_int_eq(xobj_pool_init((struct xobj_pool *)mem, 0, 100, need),
			 -EINVAL);
	ck_assert_int_eq(xobj_pool_init((struct xobj_pool *)mem, 16, 0, need),
			 -EINVAL);
	ck_assert_int_eq(
	    xobj_pool_init((struct xobj_pool *)mem, UINT32_MAX, 100, SIZE_MAX),
	    -EINVAL);
	ck_assert_int_eq(xobj_pool_init((struct xobj_pool *)mem, 16, 100, need),
			 0);
	ck_assert_uint_eq(xobj_count((struct xobj_pool *)mem), 16);
	free(mem);
}
END_TEST

static void check_get_all(uint32_t count, size_t obj_size)
{
	struct xobj_pool *p = new_pool(count, obj_size);
	size_t osz = xobj_obj_size(p);
	char *seen = calloc(count, 1);
	uint32_t i, idx, again;

	ck_assert_ptr_nonnull(seen);
	ck_assert_uint_eq(osz % 64, 0);
	ck_assert_uint_ge(osz, obj_size);
	ck_assert_uint_lt(osz, obj_size + 64);
	ck_assert_uint_eq(xobj_count(p), count);
	ck_assert_uint_eq(xobj_free_count(p), count);
	for (i = 0; i < count; i++) {
		unsigned char *o;
		size_t j;

		ck_assert_int_eq(xobj_get(p, &idx), 0);
		ck_assert_uint_lt(idx, count);
		ck_assert_int_eq(seen[idx], 0);
		seen[idx] = 1;
		o = xobj_ptr(p, idx);
		ck_assert_ptr_nonnull(o);
		ck_assert_uint_eq((uintptr_t)o % 64, 0);
		for (j = 0; j < osz; j++)
			ck_assert_uint_eq(o[j], 0); /* zeroed by init */
		ck_assert_int_eq(xobj_index(p, o, &again), 0);
		ck_assert_uint_eq(again, idx);
		memset(o, (int)(idx & 0xff), osz);
		ck_assert_uint_eq(xobj_free_count(p), count - i - 1);
	}
	/* Objects do not overlap. */
	for (i = 0; i < count; i++) {
		unsigned char *o = xobj_ptr(p, i);

		ck_assert_uint_eq(o[0], i & 0xff);
		ck_assert_uint_eq(o[osz - 1], i & 0xff);
	}
	idx = 4242;
	ck_assert_int_eq(xobj_get(p, &idx), -ENOMEM);
	ck_assert_uint_eq(idx, 4242);
	ck_assert_uint_eq(xobj_free_count(p), 0);
	for (i = 0; i < count; i++)
		ck_assert_int_eq(xobj_put(p, i), 0);
	ck_assert_uint_eq(xobj_free_count(p), count);
	free(seen);
	free_pool();
}

START_TEST(test_get_all_various_shapes)
{
	check_get_all(1, 1);
	check_get_all(2, 64);
	check_get_all(3, 65);
	check_get_all(64, 100);
	check_get_all(65, 4096);
	check_get_all(1000, 24);
}
END_TEST

START_TEST(test_put_refuses_bad_and_double)
{
	struct xobj_pool *p = new_pool(8, 128);
	uint32_t a, b;

	ck_assert_int_eq(xobj_get(p, &a), 0);
	ck_assert_int_eq(xobj_get(p, &b), 0);
	ck_assert_uint_eq(xobj_free_count(p), 6);
	ck_assert_int_eq(xobj_put(p, 8), -EINVAL);
	ck_assert_int_eq(xobj_put(p, UINT32_MAX), -EINVAL);
	/* Never taken: already free. */
	ck_assert_uint_ne(a, 5);
	ck_assert_uint_ne(b, 5);
	ck_assert_int_eq(xobj_put(p, 5), -EALREADY);
	ck_assert_uint_eq(xobj_free_count(p), 6);
	ck_assert_int_eq(xobj_put(p, a), 0);
	ck_assert_int_eq(xobj_put(p, a), -EALREADY);
	ck_assert_uint_eq(xobj_free_count(p), 7);
	ck_assert_int_eq(xobj_put(p, b), 0);
	ck_assert_uint_eq(xobj_free_count(p), 8);
	/* Nothing was enqueued twice: exactly 8 gets succeed. */
	for (a = 0; a < 8; a++)
		ck_assert_int_eq(xobj_get(p, &b), 0);
	ck_assert_int_eq(xobj_get(p, &b), -ENOMEM);
	free_pool();
}
END_TEST

START_TEST(test_ptr_and_index_bounds)
{
	struct xobj_pool *p = new_pool(4, 100); /* 128-byte objects */
	char *o0 = xobj_ptr(p, 0), *o3 = xobj_ptr(p, 3);
	uint32_t idx = 77;

	ck_assert_ptr_nonnull(o0);
	ck_assert_ptr_eq(o3, o0 + 3 * 128);
	ck_assert_ptr_null(xobj_ptr(p, 4));
	ck_assert_ptr_null(xobj_ptr(p, UINT32_MAX));
	ck_assert_int_eq(xobj_index(p, o0 - 128, &idx), -EINVAL);
	ck_assert_int_eq(xobj_index(p, o0 - 1, &idx), -EINVAL);
	ck_assert_int_eq(xobj_index(p, o0 + 1, &idx), -EINVAL);
	ck_assert_int_eq(xobj_index(p, o0 + 64, &idx), -EINVAL);
	ck_assert_int_eq(xobj_index(p, o3 + 128, &idx), -EINVAL);
	ck_assert_int_eq(xobj_index(p, (char *)p, &idx), -EINVAL);
	ck_assert_int_eq(xobj_index(p, NULL, &idx), -EINVAL);
	ck_assert_uint_eq(idx, 77);
	ck_assert_int_eq(xobj_index(p, o3, &idx), 0);
	ck_assert_uint_eq(idx, 3);
	free_pool();
}
END_TEST

START_TEST(test_fifo_reuse_and_not_zeroed_on_get)
{
	struct xobj_pool *p = new_pool(4, 64);
	uint32_t idx[4], i, got;
	char *o;

	for (i = 0; i < 4; i++)
		ck_assert_int_eq(xobj_get(p, &idx[i]), 0);
	o = xobj_ptr(p, idx[2]);
	strcpy(o, "left by previous owner");
	ck_assert_int_eq(xobj_put(p, idx[2]), 0);
	ck_assert_int_eq(xobj_put(p, idx[0]), 0);
	ck_assert_int_eq(xobj_get(p, &got), 0);
	ck_assert_uint_eq(got, idx[2]); /* oldest freed first */
	ck_assert_str_eq(xobj_ptr(p, got), "left by previous owner");
	ck_assert_int_eq(xobj_get(p, &got), 0);
	ck_assert_uint_eq(got, idx[0]);
	free_pool();
}
END_TEST

/* White box: the state bytes are the count bytes of the 64-byte-aligned
 * part just before object 0 (the layout xobj.h describes). Scribbling over
 * them must make get and put refuse, never hand out an object twice. */
static uint8_t *state_byte(struct xobj_pool *p, uint32_t count, uint32_t i)
{
	return (uint8_t *)xobj_ptr(p, 0) - ((count + 63) & ~63u) + i;
}

START_TEST(test_corrupted_state_is_refused)
{
	struct xobj_pool *p = new_pool(4, 64);
	uint32_t idx = 99, first, i;

	for (i = 0; i < 4; i++)
		ck_assert_uint_eq(*state_byte(p, 4, i), 'F'); /* layout */
	/* Pool FIFO: index 0 comes out first. Make it look allocated. */
	*state_byte(p, 4, 0) = 'A';
	ck_assert_int_eq(xobj_get(p, &idx), -EIO);
	ck_assert_uint_eq(idx, 99);
	ck_assert_int_eq(xobj_get(p, &first), 0);
	ck_assert_uint_eq(first, 1);
	/* A state byte that is neither free nor allocated: put refuses. */
	*state_byte(p, 4, 1) = 0;
	ck_assert_int_eq(xobj_put(p, 1), -EINVAL);
	ck_assert_uint_eq(*state_byte(p, 4, 1), 0);
	free_pool();
}
END_TEST

/* The two places a killed process can stop in the middle of an operation,
 * reproduced by doing only the first half by hand (white box: the free
 * queue starts one 64-byte line into the pool). Either way exactly that
 * object is lost, a put of it is refused, and the rest keeps working. */
START_TEST(test_kill_mid_operation_loses_one)
{
	struct xobj_pool *p = new_pool(8, 64);
	struct xq *q = (struct xq *)((char *)p + 64);
	uint32_t lost_get, lost_put, idx, n = 0;
	char seen[8] = {0};

	/* get killed after the dequeue, before marking the object taken */
	ck_assert_uint_eq(xq_capacity(q), 8);
	ck_assert_int_eq(xq_dequeue(q, &lost_get), 0);
	/* put killed after marking the object free, before the enqueue */
	ck_assert_int_eq(xobj_get(p, &lost_put), 0);
	*state_byte(p, 8, lost_put) = 'F';

	ck_assert_uint_eq(xobj_free_count(p), 6);
	ck_assert_int_eq(xobj_put(p, lost_get), -EALREADY);
	ck_assert_int_eq(xobj_put(p, lost_put), -EALREADY);
	while (xobj_get(p, &idx) == 0) {
		ck_assert_uint_ne(idx, lost_get);
		ck_assert_uint_ne(idx, lost_put);
		ck_assert_int_eq(seen[idx], 0);
		seen[idx] = 1;
		n++;
	}
	ck_assert_uint_eq(n, 6);
	for (idx = 0; idx < 8; idx++)
		if (seen[idx])
			ck_assert_int_eq(xobj_put(p, idx), 0);
	ck_assert_uint_eq(xobj_free_count(p), 6);
	free_pool();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xobj");
	TCase *tc = tcase_create("unit");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_pool_size);
	tcase_add_test(tc, test_init_refuses_bad_input);
	tcase_add_test(tc, test_get_all_various_shapes);
	tcase_add_test(tc, test_put_refuses_bad_and_double);
	tcase_add_test(tc, test_ptr_and_index_bounds);
	tcase_add_test(tc, test_fifo_reuse_and_not_zeroed_on_get);
	tcase_add_test(tc, test_corrupted_state_is_refused);
	tcase_add_test(tc, test_kill_mid_operation_loses_one);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
