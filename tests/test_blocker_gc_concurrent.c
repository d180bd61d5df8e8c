/* SPDX-License-Identifier: MIT */
/*
 * GC while the store is in use: writer threads overwrite, delete and copy
 * their own objects (each keeps a model), reader threads read frozen
 * objects (exact content) and the writers' objects (never an error but
 * ENOENT), and a GC thread runs passes back to back. Writers reuse a few
 * contents over and over, so chunks die and come back while their
 * segments are being collected (dedup into a victim). At the end every
 * object equals its model, after one more pass, a close, the offline
 * check and a reopen. Runs with the sync and io_uring backends and with
 * mmap reads; ThreadSanitizer runs it in CI (LABELS concurrent).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "store.h"
#include "test_blocker_util.h"

#define CS	   4096
#define SEG	   (1u << 20)
#define NWRITERS   2
#define NREADERS   2
#define OBJS_PER_W 3
#define OBJ_SIZE   (64 * 1024)
#define NFROZEN	   2
#define ITERS	   400

static char dir[256];
static struct blocker_store *st;
static int writers_left;	  /* __atomic */
static uint64_t reader_errors;	  /* __atomic */
static uint64_t gc_removed_total; /* __atomic */
static uint64_t gc_passes;	  /* __atomic */

struct wmodel {
	bool exists[OBJS_PER_W + 1]; /* the last one is a copy target */
	uint8_t data[OBJS_PER_W + 1][OBJ_SIZE];
};

static struct wmodel models[NWRITERS];

static void wname(char *out, int w, int i)
{
	snprintf(out, 32, "w%d.obj%d", w, i);
}

static void fname(char *out, int i)
{
	snprintf(out, 32, "frozen.%d", i);
}

static void *writer(void *arg)
{
	int w = (int)(intptr_t)arg;
	struct wmodel *m = &models[w];
	uint64_t rng = 0x1234 + w;
	uint8_t *buf = malloc(OBJ_SIZE);
	char n[32], c[32];

	for (int k = 0; k < ITERS; k++) {
		int i = tb_rnd(&rng) % OBJS_PER_W;

		/* halfway, make sure passes overlap the second half (a
		 * progress condition, not a timing one) */
		while (k == ITERS / 2 &&
		       !__atomic_load_n(&gc_removed_total, __ATOMIC_ACQUIRE) &&
		       __atomic_load_n(&gc_passes, __ATOMIC_ACQUIRE) < 100)
			usleep(1000);
		unsigned what = tb_rnd(&rng) % 16;

		wname(n, w, i);
		if (what == 0 && m->exists[i]) {
			ck_assert_int_eq(blocker_delete(st, n, strlen(n)), 0);
			m->exists[i] = false;
			memset(m->data[i], 0, OBJ_SIZE);
			continue;
		}
		if (what == 1 && m->exists[i]) {
			wname(c, w, OBJS_PER_W);
			ck_assert_int_eq(
			    blocker_copy(st, n, strlen(n), c, strlen(c)), 0);
			memcpy(m->data[OBJS_PER_W], m->data[i], OBJ_SIZE);
			m->exists[OBJS_PER_W] = true;
			continue;
		}
		/* half of the writes reuse a few contents: chunks die and
		 * come back, also while their segment is a GC victim */
		uint64_t seed = tb_rnd(&rng) % 2 ? 1 + tb_rnd(&rng) % 4
						 : 1000 + (uint64_t)k * 8 + w;
		uint64_t off = (tb_rnd(&rng) % (OBJ_SIZE / CS)) * CS;
		size_t len = (1 + tb_rnd(&rng) % 4) * CS;
		if (off + len > OBJ_SIZE)
			len = OBJ_SIZE - off;
		if (!m->exists[i]) {
			off = 0;
			len = OBJ_SIZE;
		}
		tb_fill(buf, len, seed, off);
		ck_assert_int_eq(
		    blocker_write(st, n, strlen(n), off, len, buf, 0), 0);
		memcpy(m->data[i] + off, buf, len);
		m->exists[i] = true;
	}
	free(buf);
	__atomic_fetch_sub(&writers_left, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *reader(void *arg)
{
	uint64_t rng = 0x777 + (uintptr_t)arg;
	uint8_t *buf = malloc(OBJ_SIZE), *want = malloc(OBJ_SIZE);
	char n[32];

	while (__atomic_load_n(&writers_left, __ATOMIC_ACQUIRE)) {
		int f = tb_rnd(&rng) % NFROZEN;
		fname(n, f);
		tb_fill(want, OBJ_SIZE, 100 + f, 0);
		if (blocker_read(st, n, strlen(n), 0, OBJ_SIZE, buf) ||
		    memcmp(buf, want, OBJ_SIZE))
			__atomic_fetch_add(&reader_errors, 1, __ATOMIC_RELAXED);
		/* a writer's object: old or new data, or gone; no error */
		wname(n, tb_rnd(&rng) % NWRITERS, tb_rnd(&rng) % OBJS_PER_W);
		uint64_t off = (tb_rnd(&rng) % (OBJ_SIZE / CS)) * CS;
		int r =
		    blocker_read(st, n, strlen(n), off,
				 2 * CS > OBJ_SIZE - off ? CS : 2 * CS, buf);
		if (r && r != -ENOENT)
			__atomic_fetch_add(&reader_errors, 1, __ATOMIC_RELAXED);
	}
	free(buf);
	free(want);
	return NULL;
}

static void *collector(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&writers_left, __ATOMIC_ACQUIRE)) {
		struct blocker_gc_report rep;
		int r = blocker_gc(st, NULL, &rep);
		ck_assert_int_eq(r, 0);
		__atomic_fetch_add(&gc_removed_total, rep.segments_removed,
				   __ATOMIC_RELEASE);
		__atomic_fetch_add(&gc_passes, 1, __ATOMIC_RELEASE);
		if (!rep.segments_removed)
			usleep(1000);
	}
	return NULL;
}

static void verify(void)
{
	uint8_t *buf = malloc(OBJ_SIZE);
	char n[32];

	for (int w = 0; w < NWRITERS; w++)
		for (int i = 0; i <= OBJS_PER_W; i++) {
			uint64_t size;
			wname(n, w, i);
			int r = blocker_info(st, n, strlen(n), &size);
			if (!models[w].exists[i]) {
				ck_assert_int_eq(r, -ENOENT);
				continue;
			}
			ck_assert_int_eq(r, 0);
			ck_assert_uint_eq(size, OBJ_SIZE);
			ck_assert_int_eq(
			    blocker_read(st, n, strlen(n), 0, OBJ_SIZE, buf),
			    0);
			ck_assert_msg(!memcmp(buf, models[w].data[i], OBJ_SIZE),
				      "%s differs from its model", n);
		}
	free(buf);
}

static void run(const struct blocker_io_ops *io, bool mmap_reads)
{
	pthread_t wt[NWRITERS], rt[NREADERS], gt;
	struct blocker_opts o;
	uint64_t problems = 1;
	uint8_t *buf = malloc(OBJ_SIZE);
	char n[32];

	ttmp_mkdtemp(dir, sizeof(dir), "store");
	blocker_opts_init(&o);
	o.chunk_size = CS;
	o.segment_size = SEG;
	o.sync_interval_ms = 5;
	o.checkpoint_bytes = 2 * SEG;
	o.io = io;
	o.mmap_reads = mmap_reads;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &st), 0);
	memset(models, 0, sizeof(models));
	for (int f = 0; f < NFROZEN; f++) {
		fname(n, f);
		tb_fill(buf, OBJ_SIZE, 100 + f, 0);
		ck_assert_int_eq(
		    blocker_write(st, n, strlen(n), 0, OBJ_SIZE, buf, 0), 0);
	}
	writers_left = NWRITERS;
	reader_errors = 0;
	gc_removed_total = 0;
	gc_passes = 0;
	for (int i = 0; i < NWRITERS; i++)
		pthread_create(&wt[i], NULL, writer, (void *)(intptr_t)i);
	for (int i = 0; i < NREADERS; i++)
		pthread_create(&rt[i], NULL, reader, (void *)(intptr_t)i);
	pthread_create(&gt, NULL, collector, NULL);
	for (int i = 0; i < NWRITERS; i++)
		pthread_join(wt[i], NULL);
	for (int i = 0; i < NREADERS; i++)
		pthread_join(rt[i], NULL);
	pthread_join(gt, NULL);
	ck_assert_uint_eq(reader_errors, 0);
	ck_assert_uint_gt(gc_removed_total, 0);
	verify();
	ck_assert_int_eq(blocker_gc(st, NULL, NULL), 0);
	verify();
	ck_assert_int_eq(blocker_close(st), 0);
	ck_assert_int_eq(blocker_check(dir, NULL, NULL, NULL, &problems), 0);
	ck_assert_uint_eq(problems, 0);
	/* the checkpoints written during the passes are all usable */
	struct tb_log lg = {0};
	o.log = tb_log_fn;
	o.log_arg = &lg;
	ck_assert_int_eq(blocker_open(dir, &o, &st), 0);
	ck_assert_msg(lg.lines == 0, "reopen said: %s", lg.text);
	verify();
	for (int f = 0; f < NFROZEN; f++) {
		uint8_t *want = malloc(OBJ_SIZE);
		fname(n, f);
		tb_fill(want, OBJ_SIZE, 100 + f, 0);
		ck_assert_int_eq(
		    blocker_read(st, n, strlen(n), 0, OBJ_SIZE, buf), 0);
		ck_assert(!memcmp(buf, want, OBJ_SIZE));
		free(want);
	}
	ck_assert_int_eq(blocker_close(st), 0);
	free(buf);
}

START_TEST(test_gc_concurrent_sync)
{
	run(&blocker_io_sync, false);
}
END_TEST

START_TEST(test_gc_concurrent_uring)
{
	run(&blocker_io_uring, false);
}
END_TEST

START_TEST(test_gc_concurrent_mmap)
{
	run(&blocker_io_sync, true);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("blocker_gc_concurrent");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_gc_concurrent_sync);
	tcase_add_test(tc, test_gc_concurrent_uring);
	tcase_add_test(tc, test_gc_concurrent_mmap);
	suite_add_tcase(su, tc);
	sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
