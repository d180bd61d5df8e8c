/* SPDX-License-Identifier: MIT */
/*
 * Structural check of a quiescent heap through its public API, shared by the
 * xheap tests: every class's free list must hold exactly as many distinct,
 * valid buffers as its counter says. Draining a list with allocations and
 * watching whether the carve offset moves tells the two apart: a list shorter
 * than its counter makes an allocation carve; a cycle hands out a buffer
 * twice.
 *
 * tolerance: by how many buffers, summed over all classes, the lists may be
 * shorter than their counters (a process killed between a free-list pop and
 * its counter update leaves one).
 * Finally the general allocator's block chain must pass xheap_verify.
 * Returns 0, or a negative line number identifying the failed check.
 */
#include "xheap.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int test_xheap_check(struct xheap *heap, unsigned tolerance);

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int test_xheap_check(struct xheap *heap, unsigned tolerance)
{
	struct xheap_stats st, after;
	uint64_t free_total = 0;
	unsigned c;
	int ret = 0;

	xheap_stats(heap, &st);
	for (c = 0; c < 41; c++)
		free_total += st.free_list_bytes[c];
	if (st.carved_bytes !=
	    st.allocated_bytes + st.header_bytes + free_total)
		return -__LINE__;
	if (st.carved_bytes > st.arena_bytes)
		return -__LINE__;

	for (c = 6; c < 41; c++) {
		uint64_t size = (uint64_t)1 << c;
		uint64_t n = st.free_list_bytes[c] / size, i, got = 0;
		uint64_t *offs;
		struct xheap_stats pre, mid;

		if (st.free_list_bytes[c] % size)
			return -__LINE__;
		if (!n)
			continue;
		xheap_stats(heap, &pre);
		offs = calloc(n, sizeof(*offs));
		if (!offs)
			return -__LINE__;
		for (i = 0; i < n; i++) {
			int64_t r = xheap_alloc(heap, size, &offs[i]);

			if (r != (int64_t)size) {
				ret = -__LINE__;
				break;
			}
			got++;
			if (xheap_usable_size(heap, offs[i]) != (int64_t)size)
				ret = -__LINE__;
		}
		xheap_stats(heap, &mid);
		if (!ret && mid.carved_bytes != pre.carved_bytes) {
			/* The list ran short of its counter. */
			uint64_t delta = mid.carved_bytes - pre.carved_bytes;
			uint64_t short_by = delta / (size + 64);

			if (delta % (size + 64) == 0 && short_by <= tolerance)
				tolerance -= (unsigned)short_by;
			else
				ret = -__LINE__;
			fprintf(stderr,
				"xheap check: class %u: list of %" PRIu64
				" buffers ran short, carved %" PRIu64
				" more bytes\n",
				c, n, mid.carved_bytes - pre.carved_bytes);
		}
		qsort(offs, got, sizeof(*offs), cmp_u64);
		for (i = 1; i < got; i++)
			if (offs[i] == offs[i - 1])
				ret = -__LINE__;
		for (i = 0; i < got; i++) {
			/* A duplicate was freed on its first copy already. */
			if (i && offs[i] == offs[i - 1])
				continue;
			if (xheap_free(heap, offs[i]))
				ret = -__LINE__;
		}
		free(offs);
		if (ret)
			return ret;
	}
	xheap_stats(heap, &after);
	if (after.allocated_bytes != st.allocated_bytes)
		return -__LINE__;
	if (after.carved_bytes + after.general_free_bytes != after.arena_bytes)
		return -__LINE__;
	if (xheap_verify(heap))
		return -__LINE__;
	return 0;
}
