/* SPDX-License-Identifier: MIT */
/*
 * Many threads on one store: disjoint and overlapping writers, FUA writers
 * sharing fsyncs, racing identical writes (dedup must stay exact),
 * copy/delete/checkpoint races, and the io_uring backend.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "store_int.h"
#include "test_blocker_util.h"

#define NTHREADS    8
#define FUA_THREADS 16 /* also the most threads run() starts */

static char dir[256];
static struct blocker_store *st;

static void setup(void)
{
	ttmp_mkdtemp(dir, sizeof(dir), "store");
}

static void teardown(void)
{
	ttmp_rmtree(dir);
}

static void open_store(const struct blocker_io_ops *io, uint32_t chunk)
{
	struct blocker_opts o;

	blocker_opts_init(&o);
	o.chunk_size = chunk;
	o.segment_size = 1u << 20;
	o.sync_interval_ms = 5;
	o.checkpoint_bytes = 256 * 1024;
	o.io = io;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &st), 0);
}

struct targ {
	int id;
	int err;
};

/* each thread owns an object; mixes FUA writes and verified reads */
static void *own_object(void *p)
{
	struct targ *a = p;
	char name[32];
	uint8_t buf[9000], chk[9000];

	snprintf(name, sizeof(name), "t%d", a->id);
	for (int i = 0; i < 60 && !a->err; i++) {
		uint64_t off = (uint64_t)(i % 7) * 3000;
		tb_fill(buf, sizeof(buf), a->id * 1000 + i, off);
		a->err = blocker_write(st, name, strlen(name), off, sizeof(buf),
				       buf, i % 3 == 0 ? BLOCKER_FUA : 0);
		if (!a->err)
			a->err = blocker_read(st, name, strlen(name), off,
					      sizeof(chk), chk);
		if (!a->err && memcmp(buf, chk, sizeof(buf)))
			a->err = -EILSEQ;
		if (!a->err && i % 10 == 9)
			a->err = blocker_flush(st);
	}
	return NULL;
}

static void run(void *(*fn)(void *), int n)
{
	pthread_t t[FUA_THREADS];
	struct targ a[FUA_THREADS];

	for (int i = 0; i < n; i++) {
		a[i] = (struct targ){.id = i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, fn, &a[i]), 0);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(a[i].err, 0);
	}
}

static void own_objects_case(const struct blocker_io_ops *io)
{
	struct blocker_stats s;

	open_store(io, 4096);
	run(own_object, NTHREADS);
	blocker_get_stats(st, &s);
	ck_assert_uint_le(s.fsyncs, s.flushes + 64);
	ck_assert_int_eq(blocker_close(st), 0);
}

START_TEST(test_own_objects_sync)
{
	own_objects_case(&blocker_io_sync);
}
END_TEST

START_TEST(test_own_objects_uring)
{
	own_objects_case(&blocker_io_uring);
}
END_TEST

/*
 * Group commit under load: 16 threads of FUA writes (own objects, 1 MiB
 * segments, so zero-filling and segment switches run between them), one
 * of them sometimes a plain write followed by FLUSH. Every write must
 * read back, also after a reopen; the store must not be degraded.
 */
#define FUA_WRITES 48
static void *fua_writer(void *p)
{
	struct targ *a = p;
	char name[32];
	uint8_t buf[4096];

	snprintf(name, sizeof(name), "fua%d", a->id);
	for (int i = 0; i < FUA_WRITES && !a->err; i++) {
		bool plain = a->id == 0 && i % 4 == 0;
		tb_fill(buf, sizeof(buf), a->id + 1, (uint64_t)i * 4096);
		a->err =
		    blocker_write(st, name, strlen(name), (uint64_t)i * 4096,
				  sizeof(buf), buf, plain ? 0 : BLOCKER_FUA);
		if (!a->err && plain)
			a->err = blocker_flush(st);
	}
	return NULL;
}

static void fua_check_all(void)
{
	uint8_t buf[4096], want[4096];
	char name[32];

	for (int t = 0; t < FUA_THREADS; t++) {
		snprintf(name, sizeof(name), "fua%d", t);
		for (int i = 0; i < FUA_WRITES; i++) {
			tb_fill(want, sizeof(want), t + 1, (uint64_t)i * 4096);
			ck_assert_int_eq(blocker_read(st, name, strlen(name),
						      (uint64_t)i * 4096,
						      sizeof(buf), buf),
					 0);
			ck_assert_mem_eq(buf, want, sizeof(buf));
		}
	}
}

static void group_commit_case(bool mmap_reads)
{
	struct blocker_opts o;
	struct blocker_stats s;

	blocker_opts_init(&o);
	o.segment_size = 1u << 20;
	o.sync_interval_ms = 0;
	o.checkpoint_bytes = 0;
	o.mmap_reads = mmap_reads;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &st), 0);
	run(fua_writer, FUA_THREADS);
	blocker_get_stats(st, &s);
	ck_assert_int_eq(s.degraded_errno, 0);
	/* 16 * 48 records of 4 KiB and maps: at least three segments */
	ck_assert_uint_ge(s.log_bytes, 3u << 20);
	fua_check_all();
	ck_assert_int_eq(blocker_close(st), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &st), 0);
	fua_check_all();
	ck_assert_int_eq(blocker_close(st), 0);
}

START_TEST(test_group_commit)
{
	group_commit_case(false);
}
END_TEST

START_TEST(test_group_commit_mmap)
{
	group_commit_case(true);
}
END_TEST

/*
 * All threads write interleaved 100-byte stripes of one object: stripes
 * share chunks, so the read-modify-writes of one chunk race; none may be
 * lost.
 */
#define STRIPE		   100
#define STRIPES_PER_THREAD 40
static void *stripes(void *p)
{
	struct targ *a = p;
	uint8_t buf[STRIPE];

	for (int k = 0; k < STRIPES_PER_THREAD && !a->err; k++) {
		uint64_t off = ((uint64_t)k * NTHREADS + a->id) * STRIPE;
		tb_fill(buf, STRIPE, 77, off);
		a->err = blocker_write(st, "shared", 6, off, STRIPE, buf, 0);
	}
	return NULL;
}

START_TEST(test_shared_object_rmw)
{
	size_t len = (size_t)NTHREADS * STRIPES_PER_THREAD * STRIPE;
	uint8_t *got = malloc(len), *want = malloc(len);
	uint64_t size;

	open_store(&blocker_io_sync, 512);
	run(stripes, NTHREADS);
	tb_fill(want, len, 77, 0);
	ck_assert_int_eq(blocker_info(st, "shared", 6, &size), 0);
	ck_assert_uint_eq(size, len);
	ck_assert_int_eq(blocker_read(st, "shared", 6, 0, len, got), 0);
	ck_assert(!memcmp(got, want, len));
	ck_assert_int_eq(blocker_close(st), 0);
	ck_assert_int_eq(blocker_open(dir, NULL, &st), 0);
	ck_assert_int_eq(blocker_read(st, "shared", 6, 0, len, got), 0);
	ck_assert(!memcmp(got, want, len));
	ck_assert_int_eq(blocker_close(st), 0);
	free(got);
	free(want);
}
END_TEST

/* identical content written at once to different objects */
static void *same_content(void *p)
{
	struct targ *a = p;
	char name[32];
	uint8_t buf[4096 * 8];

	snprintf(name, sizeof(name), "dup%d", a->id);
	for (int round = 0; round < 20 && !a->err; round++) {
		tb_fill(buf, sizeof(buf), round, 0);
		a->err = blocker_write(st, name, strlen(name),
				       (uint64_t)round * sizeof(buf),
				       sizeof(buf), buf, 0);
	}
	return NULL;
}

START_TEST(test_dedup_race)
{
	struct blocker_stats s;
	uint8_t d0[32], d[32];

	open_store(&blocker_io_sync, 4096);
	run(same_content, NTHREADS);
	blocker_get_stats(st, &s);
	/* every chunk stored exactly once despite the races */
	ck_assert_uint_eq(s.chunks, 20 * 8);
	ck_assert_uint_eq(s.dedup_hits, (NTHREADS - 1) * 20 * 8);
	ck_assert_int_eq(blocker_hash(st, "dup0", 4, d0), 0);
	for (int i = 1; i < NTHREADS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "dup%d", i);
		ck_assert_int_eq(blocker_hash(st, name, strlen(name), d), 0);
		ck_assert_mem_eq(d, d0, 32);
	}
	ck_assert_int_eq(blocker_close(st), 0);
}
END_TEST

/* copy, delete, write and checkpoint racing on a few names */
static void *churn(void *p)
{
	struct targ *a = p;
	static const char *names[] = {"a", "b", "c"};
	uint64_t r = a->id * 7919 + 1;
	uint8_t buf[3000];

	for (int i = 0; i < 150 && !a->err; i++) {
		const char *n1 = names[r % 3], *n2 = names[(r / 3) % 3];
		int e = 0;

		r = r * 6364136223846793005ULL + 1442695040888963407ULL;
		switch ((r >> 33) % 5) {
		case 0:
			e = blocker_copy(st, n1, 1, n2, 1);
			if (e == -EINVAL && n1 == n2)
				e = 0;
			break;
		case 1:
			e = blocker_delete(st, n1, 1);
			break;
		case 2:
			if ((r >> 20) & 1) {
				e = blocker_checkpoint(st);
			} else {
				struct blocker_stats bs;
				e = blocker_get_stats(st, &bs);
			}
			break;
		default:
			tb_fill(buf, sizeof(buf), r, 0);
			e = blocker_write(st, n1, 1, (r >> 40) % 20000,
					  sizeof(buf), buf, 0);
			break;
		}
		if (e == -ENOENT)
			e = 0;
		a->err = e;
	}
	return NULL;
}

static void print_problem(void *arg, const char *line)
{
	(void)arg;
	fprintf(stderr, "%s\n", line);
}

START_TEST(test_copy_delete_checkpoint_race)
{
	static const char *names[] = {"a", "b", "c"};
	uint8_t before[3][32], after[3][32];
	int exists[3];

	open_store(&blocker_io_sync, 512);
	run(churn, NTHREADS);
	for (int i = 0; i < 3; i++)
		exists[i] = blocker_hash(st, names[i], 1, before[i]);
	ck_assert_int_eq(blocker_close(st), 0);
	/* what was in memory is exactly what comes back */
	ck_assert_int_eq(blocker_open(dir, NULL, &st), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(blocker_hash(st, names[i], 1, after[i]),
				 exists[i]);
		if (!exists[i])
			ck_assert_mem_eq(before[i], after[i], 32);
	}
	ck_assert_int_eq(blocker_close(st), 0);
	uint64_t problems = 1;
	ck_assert_int_eq(
	    blocker_check(dir, NULL, print_problem, NULL, &problems), 0);
	ck_assert_uint_eq(problems, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_concurrent");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_own_objects_sync);
	tcase_add_test(tc, test_own_objects_uring);
	tcase_add_test(tc, test_group_commit);
	tcase_add_test(tc, test_group_commit_mmap);
	tcase_add_test(tc, test_shared_object_rmw);
	tcase_add_test(tc, test_dedup_race);
	tcase_add_test(tc, test_copy_delete_checkpoint_race);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
