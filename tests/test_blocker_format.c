/* SPDX-License-Identifier: MIT */
/* Record format, payload codecs, names and the in-memory index. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "store_int.h"
#include "test_blocker_util.h"

static void some_score(uint8_t s[32], int seed)
{
	uint8_t b[8];

	memcpy(b, &seed, sizeof(seed));
	memset(b + 4, 0x5a, 4);
	blocker_sha256(b, sizeof(b), s);
}

START_TEST(test_crc32c_known)
{
	/* RFC 3720 test vector: 32 bytes of zeros */
	uint8_t z[32] = {0};
	ck_assert_uint_eq(blocker_crc32c(0, z, 32), 0x8a9136aa);
	ck_assert_uint_eq(blocker_crc32c(0, "123456789", 9), 0xe3069283);
}
END_TEST

START_TEST(test_record_roundtrip)
{
	uint8_t hb[BREC_HDR_SIZE], score[32];
	struct brec_hdr h;

	some_score(score, 1);
	brec_encode(hb, BREC_CHUNK, 4096, 12345 * 16, score);
	ck_assert_int_eq(brec_decode(hb, &h, 12345 * 16), BREC_OK);
	ck_assert_uint_eq(h.type, BREC_CHUNK);
	ck_assert_uint_eq(h.len, 4096);
	ck_assert_uint_eq(h.pos, 12345 * 16);
	ck_assert_mem_eq(h.score, score, 32);
	ck_assert_int_eq(brec_decode(hb, &h, ~0ULL), BREC_OK);
	ck_assert_uint_eq(brec_size(4096), 64 + 4096);
	ck_assert_uint_eq(brec_size(1), 64 + 16);
	ck_assert_uint_eq(brec_size(17), 64 + 32);
}
END_TEST

START_TEST(test_record_corrupt)
{
	uint8_t hb[BREC_HDR_SIZE], bad[BREC_HDR_SIZE], score[32];
	struct brec_hdr h;

	some_score(score, 2);
	brec_encode(hb, BREC_MAP, 100, 4096, score);
	/* every single-bit flip anywhere in the header is caught */
	for (int bit = 0; bit < BREC_HDR_SIZE * 8; bit++) {
		memcpy(bad, hb, sizeof(hb));
		bad[bit / 8] ^= 1u << (bit % 8);
		ck_assert_int_ne(brec_decode(bad, &h, 4096), BREC_OK);
	}
	memcpy(bad, hb, sizeof(hb));
	bad[0] ^= 1;
	ck_assert_int_eq(brec_decode(bad, &h, 4096), BREC_BAD_MAGIC);
	memcpy(bad, hb, sizeof(hb));
	bad[40] ^= 1;
	ck_assert_int_eq(brec_decode(bad, &h, 4096), BREC_BAD_CRC);
	/* a valid record found at the wrong place */
	ck_assert_int_eq(brec_decode(hb, &h, 8192), BREC_BAD_POS);
	/* valid checksum but nonsense fields */
	brec_encode(bad, 9, 100, 4096, score);
	ck_assert_int_eq(brec_decode(bad, &h, 4096), BREC_BAD_TYPE);
	brec_encode(bad, BREC_CHUNK, 0, 4096, score);
	ck_assert_int_eq(brec_decode(bad, &h, 4096), BREC_BAD_LENGTH);
	brec_encode(bad, BREC_CHUNK, BREC_MAX_PAYLOAD + 1, 4096, score);
	ck_assert_int_eq(brec_decode(bad, &h, 4096), BREC_BAD_LENGTH);
	memset(bad, 0, sizeof(bad));
	ck_assert_int_eq(brec_decode(bad, &h, 0), BREC_BAD_MAGIC);
	ck_assert_str_eq(brec_strerror(BREC_BAD_CRC),
			 "header checksum mismatch");
}
END_TEST

START_TEST(test_map_payload)
{
	struct bmap_update u[3];
	const char *name;
	size_t nl, len;
	uint64_t size;
	uint32_t n;
	const uint8_t *up;
	uint8_t *p;

	for (int i = 0; i < 3; i++) {
		u[i].index = i * 7;
		some_score(u[i].score, i);
	}
	len = bmap_payload_size(5, 3);
	p = malloc(len + 1);
	bmap_encode(p, "obj_1", 5, 12345, u, 3);
	ck_assert_int_eq(bmap_decode(p, len, &name, &nl, &size, &n, &up), 0);
	ck_assert_uint_eq(nl, 5);
	ck_assert(!memcmp(name, "obj_1", 5));
	ck_assert_uint_eq(size, 12345);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(get_le64(up + 40), 7);
	ck_assert_mem_eq(up + 48, u[1].score, 32);
	/* truncated, extended, bad name, bad count */
	ck_assert_int_eq(bmap_decode(p, len - 1, &name, &nl, &size, &n, &up),
			 -EBADMSG);
	ck_assert_int_eq(bmap_decode(p, len + 1, &name, &nl, &size, &n, &up),
			 -EBADMSG);
	ck_assert_int_eq(bmap_decode(p, 1, &name, &nl, &size, &n, &up),
			 -EBADMSG);
	p[3] = '/';
	ck_assert_int_eq(bmap_decode(p, len, &name, &nl, &size, &n, &up),
			 -EBADMSG);
	p[3] = 'b';
	put_le32(p + 2 + 5 + 8, 4);
	ck_assert_int_eq(bmap_decode(p, len, &name, &nl, &size, &n, &up),
			 -EBADMSG);
	put_le16(p, 0);
	ck_assert_int_eq(bmap_decode(p, len, &name, &nl, &size, &n, &up),
			 -EBADMSG);
	free(p);
}
END_TEST

START_TEST(test_names_payload)
{
	uint8_t p[600];
	const char *a, *b;
	size_t la, lb, len = bnames_payload_size(3, 4);

	bnames_encode(p, "abc", 3, "defg", 4);
	ck_assert_int_eq(bnames_decode(p, len, 2, &a, &la, &b, &lb), 0);
	ck_assert_uint_eq(la, 3);
	ck_assert_uint_eq(lb, 4);
	ck_assert(!memcmp(b, "defg", 4));
	ck_assert_int_eq(bnames_decode(p, len - 1, 2, &a, &la, &b, &lb),
			 -EBADMSG);
	ck_assert_int_eq(bnames_decode(p, len, 1, &a, &la, &b, &lb), -EBADMSG);
	bnames_encode(p, "abc", 3, NULL, 0);
	ck_assert_int_eq(bnames_decode(p, 5, 1, &a, &la, &b, &lb), 0);
	ck_assert_int_eq(bnames_decode(p, 1, 1, &a, &la, &b, &lb), -EBADMSG);
}
END_TEST

START_TEST(test_names)
{
	char longname[BLOCKER_NAME_MAX + 2];

	ck_assert(blocker_name_valid("a", 1));
	ck_assert(blocker_name_valid("vol_0001:snap@2.x+y=z-w", 23));
	ck_assert(!blocker_name_valid("", 0));
	ck_assert(!blocker_name_valid(NULL, 3));
	ck_assert(!blocker_name_valid("a/b", 3));
	ck_assert(!blocker_name_valid("a b", 3));
	ck_assert(!blocker_name_valid("a\0b", 3));
	ck_assert(!blocker_name_valid("\xc3\xa9", 2));
	memset(longname, 'x', sizeof(longname));
	ck_assert(blocker_name_valid(longname, BLOCKER_NAME_MAX));
	ck_assert(!blocker_name_valid(longname, BLOCKER_NAME_MAX + 1));
}
END_TEST

START_TEST(test_zero_detect)
{
	uint8_t b[4096] = {0};

	ck_assert(blocker_mem_is_zero(b, sizeof(b)));
	b[4095] = 1;
	ck_assert(!blocker_mem_is_zero(b, sizeof(b)));
	b[4095] = 0;
	b[0] = 1;
	ck_assert(!blocker_mem_is_zero(b, sizeof(b)));
}
END_TEST

START_TEST(test_index_basic)
{
	struct bidx x;
	uint8_t s[32];
	uint64_t pos[8];
	const int n = 100000;

	ck_assert_int_eq(bidx_init(&x, 40, 0), 0);
	for (int i = 0; i < n; i++) {
		some_score(s, i);
		ck_assert_int_eq(bidx_insert(&x, s, (uint64_t)i * 16), 0);
	}
	ck_assert_uint_eq(x.count, n);
	ck_assert_uint_ge(x.bits, 11); /* it split */
	for (int i = 0; i < n; i++) {
		some_score(s, i);
		int m = bidx_lookup(&x, s, pos, 8, 0);
		ck_assert_int_ge(m, 1);
		int hit = 0;
		for (int k = 0; k < m && k < 8; k++)
			hit |= pos[k] == (uint64_t)i * 16;
		ck_assert(hit);
	}
	/* absent scores: with 40-bit partials a false match is ~1e-7 */
	int fp = 0;
	for (int i = n; i < 2 * n; i++) {
		some_score(s, i);
		fp += bidx_lookup(&x, s, pos, 8, 0);
	}
	ck_assert_int_le(fp, 2);
	/* the RAM budget: at most 16 bytes per chunk */
	ck_assert_uint_le(x.bytes, 16ULL * n);
	ck_assert_uint_le(bidx_usable_bytes(&x), 16ULL * n);
	/* bad positions refused, nothing inserted */
	ck_assert_int_eq(bidx_insert(&x, s, 17), -ERANGE);
	ck_assert_int_eq(bidx_insert(&x, s, BIDX_MAX_POS), -ERANGE);
	ck_assert_uint_eq(x.count, n);
	bidx_destroy(&x);
	ck_assert_int_eq(bidx_init(&x, 0, 0), -EINVAL);
	ck_assert_int_eq(bidx_init(&x, 41, 0), -EINVAL);
}
END_TEST

START_TEST(test_index_partial_collisions)
{
	struct bidx x;
	uint8_t s[32];
	uint64_t pos[4];

	/* 2-bit partials: every entry of a bucket matches every lookup */
	ck_assert_int_eq(bidx_init(&x, 2, 0), 0);
	for (int i = 0; i < 5000; i++) {
		some_score(s, i);
		ck_assert_int_eq(bidx_insert(&x, s, (uint64_t)i * 32), 0);
	}
	for (int i = 0; i < 5000; i++) {
		some_score(s, i);
		int m = bidx_lookup(&x, s, pos, 4, 0), hit = 0;
		ck_assert_int_ge(m, 1);
		/* page through all candidates with skip */
		for (int skip = 0; skip < m; skip += 4) {
			int got = bidx_lookup(&x, s, pos, 4, skip);
			ck_assert_int_eq(got, m);
			for (int k = 0; k < 4 && skip + k < m; k++)
				hit |= pos[k] == (uint64_t)i * 32;
		}
		ck_assert(hit);
	}
	bidx_destroy(&x);
}
END_TEST

/*
 * GC's compaction between two pages of a lookup (safety21gc F5):
 * bidx_remove_segs moves a bucket's last entry into a removed one's slot,
 * so the match that was last now sits on a page already read. Ten entries
 * of one score (1 MiB segments: entry i in segment i), a page of 8 read,
 * segment 0 removed: the paging must still show every entry left.
 */
START_TEST(test_index_pages_across_compaction)
{
	enum { N = 10, SEGSZ = 1 << 20 };
	struct bidx x;
	uint8_t s[32], segs[N] = {1};
	uint64_t pos[8], gen = 0;
	bool seen[N] = {false}, removed = false;
	int skip = 0, total;

	ck_assert_int_eq(bidx_init(&x, 40, 0), 0);
	some_score(s, 7);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(bidx_insert(&x, s, (uint64_t)i * SEGSZ), 0);
	do {
		total = bidx_lookup_page(&x, s, pos, 8, &skip, &gen);
		for (int k = 0; k < total - skip && k < 8; k++)
			seen[pos[k] / SEGSZ] = true;
		if (!removed) /* GC removes segment 0 after the first page */
			ck_assert_uint_eq(bidx_remove_segs(&x, segs, N, SEGSZ),
					  1);
		removed = true;
		skip += 8;
	} while (skip < total);
	for (int i = 1; i < N; i++)
		ck_assert_msg(seen[i], "entry %d never shown", i);
	bidx_destroy(&x);
}
END_TEST

static int walk_count(void *arg, uint64_t prefix, uint64_t pos)
{
	(void)prefix;
	(void)pos;
	(*(uint64_t *)arg)++;
	return 0;
}

START_TEST(test_index_presized_walk)
{
	struct bidx x;
	uint8_t s[32];
	uint64_t n = 0;

	ck_assert_int_eq(bidx_init(&x, 40, 1000000), 0);
	ck_assert_uint_ge(x.bits, 15);
	for (int i = 0; i < 1000; i++) {
		some_score(s, i);
		bidx_insert(&x, s, i * 16);
	}
	bidx_walk(&x, walk_count, &n);
	ck_assert_uint_eq(n, 1000);
	bidx_destroy(&x);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_format");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_crc32c_known);
	tcase_add_test(tc, test_record_roundtrip);
	tcase_add_test(tc, test_record_corrupt);
	tcase_add_test(tc, test_map_payload);
	tcase_add_test(tc, test_names_payload);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_zero_detect);
	tcase_add_test(tc, test_index_basic);
	tcase_add_test(tc, test_index_partial_collisions);
	tcase_add_test(tc, test_index_pages_across_compaction);
	tcase_add_test(tc, test_index_presized_walk);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
