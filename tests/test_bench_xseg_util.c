/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of bench_xseg's building blocks: LFSR permutation, latency
 * histogram, verification stamps, report printers.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_xseg_util.h"

/* Every width up to 20 has the full period 2^w - 1 (widths 21..32 were
 * checked the same way once, offline: too slow for a sanitizer run). */
START_TEST(lfsr_taps_maximal)
{
	for (unsigned w = 2; w <= 20; w++) {
		uint64_t m = bench_lfsr_taps(w), s = 1, n = 0;

		ck_assert_uint_ne(m, 0);
		do {
			s = (s >> 1) ^ (-(s & 1) & m);
			n++;
		} while (s != 1 && n <= (1ULL << w));
		ck_assert_msg(n == (1ULL << w) - 1, "width %u period %llu", w,
			      (unsigned long long)n);
	}
	ck_assert_uint_eq(bench_lfsr_taps(1), 0);
	ck_assert_uint_eq(bench_lfsr_taps(33), 0);
}
END_TEST

/* For many n and seeds, one pass visits each of 0..n-1 exactly once, and
 * the next pass repeats the same order. */
START_TEST(lfsr_permutation)
{
	static const uint64_t ns[] = {1, 2,   3,    4,	  5,	 7,
				      8, 100, 1000, 4096, 65537, 100000};

	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		for (uint64_t seed = 0; seed < 3; seed++) {
			uint64_t n = ns[k];
			struct bench_lfsr l;
			unsigned char *seen = calloc(n, 1);
			uint64_t *order = malloc(n * sizeof(*order));

			ck_assert_ptr_nonnull(seen);
			ck_assert_int_eq(bench_lfsr_init(&l, n, seed), 0);
			/* plain checks in the loops: a Check assertion costs
			 * a pipe write per call in fork mode */
			uint64_t out_of_range = 0, twice = 0, reordered = 0;
			for (uint64_t i = 0; i < n; i++) {
				uint64_t v = bench_lfsr_next(&l);
				if (v >= n) {
					out_of_range++;
					continue;
				}
				twice += seen[v];
				seen[v] = 1;
				order[i] = v;
			}
			for (uint64_t i = 0; i < n; i++)
				reordered += bench_lfsr_next(&l) != order[i];
			ck_assert_msg(!out_of_range && !twice && !reordered,
				      "n %llu seed %llu: %llu out of range, "
				      "%llu twice, %llu differ in pass 2",
				      (unsigned long long)n,
				      (unsigned long long)seed,
				      (unsigned long long)out_of_range,
				      (unsigned long long)twice,
				      (unsigned long long)reordered);
			free(seen);
			free(order);
		}
	}
}
END_TEST

START_TEST(lfsr_seed_changes_order)
{
	struct bench_lfsr a, b;
	int differ = 0;

	ck_assert_int_eq(bench_lfsr_init(&a, 1000, 1), 0);
	ck_assert_int_eq(bench_lfsr_init(&b, 1000, 2), 0);
	for (int i = 0; i < 1000; i++)
		differ |= bench_lfsr_next(&a) != bench_lfsr_next(&b);
	ck_assert(differ);
}
END_TEST

START_TEST(lfsr_bad_input)
{
	struct bench_lfsr l;

	memset(&l, 0xa5, sizeof(l));
	ck_assert_int_eq(bench_lfsr_init(&l, 0, 1), -EINVAL);
	ck_assert_int_eq(bench_lfsr_init(&l, 1ULL << 32, 1), -EINVAL);
	/* nothing written on error */
	ck_assert_uint_eq(l.n, 0xa5a5a5a5a5a5a5a5ULL);
}
END_TEST

/* Bucket boundaries are contiguous and each value falls in the bucket
 * whose range contains it. */
START_TEST(hist_buckets)
{
	uint64_t prev_max = 0;

	ck_assert_uint_eq(bench_hist_bucket(0), 0);
	ck_assert_uint_eq(bench_hist_bucket_max(0), 0);
	unsigned bad = 0, first_bad = 0;
	for (unsigned b = 1; b < BENCH_HIST_BUCKETS; b++) {
		uint64_t mx = bench_hist_bucket_max(b);
		bool ok = mx > prev_max &&
			  (b >= 64 || mx == b) && /* exact below 64 ns */
			  /* relative width stays within 1/64 */
			  (mx - prev_max - 1) / 64 <= mx / 4096 + 1 &&
			  bench_hist_bucket(prev_max + 1) == b &&
			  bench_hist_bucket(mx) == b;
		if (!ok && !bad++)
			first_bad = b;
		prev_max = mx;
	}
	ck_assert_msg(!bad, "%u bad buckets, first %u", bad, first_bad);
	ck_assert_uint_eq(prev_max, UINT64_MAX);
	ck_assert_uint_eq(bench_hist_bucket(UINT64_MAX),
			  BENCH_HIST_BUCKETS - 1);
}
END_TEST

START_TEST(hist_percentiles)
{
	struct bench_hist *h = malloc(sizeof(*h));

	bench_hist_init(h);
	ck_assert_uint_eq(bench_hist_percentile(h, 50), 0);
	/* 1..1000 ns */
	for (uint64_t v = 1; v <= 1000; v++)
		bench_hist_add(h, v);
	ck_assert_uint_eq(h->count, 1000);
	ck_assert_uint_eq(h->min_ns, 1);
	ck_assert_uint_eq(h->max_ns, 1000);
	ck_assert(bench_hist_mean(h) > 500.4 && bench_hist_mean(h) < 500.6);
	uint64_t p50 = bench_hist_percentile(h, 50);
	uint64_t p99 = bench_hist_percentile(h, 99);
	/* within one bucket width (1/64) above the exact rank */
	ck_assert_uint_ge(p50, 500);
	ck_assert_uint_le(p50, 500 + 500 / 64 + 1);
	ck_assert_uint_ge(p99, 990);
	ck_assert_uint_le(p99, 1000);
	ck_assert_uint_eq(bench_hist_percentile(h, 100), 1000);
	ck_assert_uint_eq(bench_hist_percentile(h, 0.0001), 1);

	/* merge doubles counts, keeps percentiles */
	struct bench_hist *g = malloc(sizeof(*g));
	bench_hist_init(g);
	bench_hist_merge(g, h);
	bench_hist_merge(g, h);
	ck_assert_uint_eq(g->count, 2000);
	ck_assert_uint_eq(bench_hist_percentile(g, 50), p50);

	/* sum saturates */
	bench_hist_add(g, UINT64_MAX);
	bench_hist_add(g, UINT64_MAX);
	ck_assert_uint_eq(g->sum_ns, UINT64_MAX);
	ck_assert_uint_eq(g->max_ns, UINT64_MAX);
	free(g);
	free(h);
}
END_TEST

static void stamp_roundtrip(size_t len)
{
	unsigned char *buf = malloc(len + 1);
	char why[128];
	const char *t = "bench_obj_0007";

	bench_stamp_fill(buf, len, t, strlen(t), 8192, 42);
	ck_assert_int_eq(bench_stamp_check(buf, len, t, strlen(t), 8192, 42,
					   why, sizeof(why)),
			 -1);
	if (len == 0) {
		free(buf);
		return;
	}
	/* every kind of difference is caught */
	ck_assert_int_ge(bench_stamp_check(buf, len, t, strlen(t), 8192 + len,
					   42, why, sizeof(why)),
			 0);
	ck_assert_int_ge(bench_stamp_check(buf, len, t, strlen(t), 8192, 43,
					   why, sizeof(why)),
			 0);
	ck_assert_int_ge(bench_stamp_check(buf, len, "bench_obj_0008",
					   strlen(t), 8192, 42, why,
					   sizeof(why)),
			 0);
	buf[len - 1] ^= 1;
	ck_assert_int_eq(bench_stamp_check(buf, len, t, strlen(t), 8192, 42,
					   why, sizeof(why)),
			 (int64_t)len - 1);
	free(buf);
}

START_TEST(stamp_sizes)
{
	static const size_t lens[] = {0,    1,	   7,	  8,	  31,	32,
				      33,   64,	   512,	  4095,	  4096, 4097,
				      8192, 12345, 65536, 1 << 20};

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		stamp_roundtrip(lens[i]);
}
END_TEST

START_TEST(stamp_explains)
{
	unsigned char buf[4096];
	char why[128];

	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(
	    bench_stamp_check(buf, sizeof(buf), "o", 1, 0, 1, why, sizeof(why)),
	    0);
	ck_assert_str_eq(why, "all zeroes");

	bench_stamp_fill(buf, sizeof(buf), "o", 1, 4096, 1);
	ck_assert_int_ge(
	    bench_stamp_check(buf, sizeof(buf), "o", 1, 0, 1, why, sizeof(why)),
	    0);
	ck_assert_str_eq(why, "stamp of offset 4096");

	bench_stamp_fill(buf, sizeof(buf), "o", 1, 0, 9);
	ck_assert_int_ge(
	    bench_stamp_check(buf, sizeof(buf), "o", 1, 0, 1, why, sizeof(why)),
	    0);
	ck_assert_str_eq(why, "stamp of seed 9");

	bench_stamp_fill(buf, sizeof(buf), "p", 1, 0, 1);
	ck_assert_int_ge(
	    bench_stamp_check(buf, sizeof(buf), "o", 1, 0, 1, why, sizeof(why)),
	    0);
	ck_assert_str_eq(why, "stamp of another target");

	bench_stamp_fill(buf, sizeof(buf), "o", 1, 0, 1);
	buf[2000] ^= 0x80;
	ck_assert_int_eq(
	    bench_stamp_check(buf, sizeof(buf), "o", 1, 0, 1, why, sizeof(why)),
	    2000);
	ck_assert_str_eq(why, "different data at byte 2000");
}
END_TEST

/* Long names are truncated in the header but still distinguished. */
START_TEST(stamp_long_names)
{
	char a[300], b[300];
	unsigned char buf[1024];

	memset(a, 'a', sizeof(a));
	memcpy(b, a, sizeof(b));
	b[299] = 'b';
	bench_stamp_fill(buf, sizeof(buf), a, sizeof(a), 0, 1);
	ck_assert_int_eq(
	    bench_stamp_check(buf, sizeof(buf), a, sizeof(a), 0, 1, NULL, 0),
	    -1);
	ck_assert_int_ge(
	    bench_stamp_check(buf, sizeof(buf), b, sizeof(b), 0, 1, NULL, 0),
	    0);
}
END_TEST

START_TEST(report_json)
{
	struct bench_hist *h = malloc(sizeof(*h));
	char *out = NULL;
	size_t out_len = 0;
	FILE *f = open_memstream(&out, &out_len);

	bench_hist_init(h);
	bench_hist_add(h, 1000);
	bench_hist_add(h, 3000);
	struct bench_result r = {
	    .op = "read",
	    .pattern = "rand",
	    .target = "port \"7\"",
	    .mode = "poll",
	    .block_size = 4096,
	    .iodepth = 1,
	    .requests = 2,
	    .bytes = 8192,
	    .elapsed_ns = 1000000000,
	    .lat = h,
	};
	bench_report_json(f, &r);
	bench_report_text(f, &r);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(out, "\"target\":\"port \\\"7\\\"\""));
	ck_assert_ptr_nonnull(strstr(out, "\"requests\":2,"));
	ck_assert_ptr_nonnull(strstr(out, "\"iops\":2.0,"));
	ck_assert_ptr_nonnull(strstr(out, "\"mean\":2000.0,"));
	ck_assert_ptr_nonnull(strstr(out, "\"max\":3000}}\n"));
	ck_assert_ptr_nonnull(strstr(out, "requests: 2 in 1.000 s"));
	free(out);
	free(h);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_xseg_util");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, lfsr_taps_maximal);
	tcase_add_test(tc, lfsr_permutation);
	tcase_add_test(tc, lfsr_seed_changes_order);
	tcase_add_test(tc, lfsr_bad_input);
	tcase_add_test(tc, hist_buckets);
	tcase_add_test(tc, hist_percentiles);
	tcase_add_test(tc, stamp_sizes);
	tcase_add_test(tc, stamp_explains);
	tcase_add_test(tc, stamp_long_names);
	tcase_add_test(tc, report_json);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
