/* SPDX-License-Identifier: MIT */
/*
 * blocker: fsync errors are never forgotten. Linux reports a writeback
 * error to one fsync of a file only; a later fsync of the same file
 * returns 0 although the pages were lost. The I/O backend here behaves
 * like that (one failing fdatasync, every other passes), which is what the
 * armed-forever fault backend of test_blocker_store cannot show:
 * - a failed fsync at a segment switch must fail every later FLUSH
 *   (review finding B1);
 * - an fsync that returns 0 while an earlier, overlapping one is still
 *   running and then fails must not make a FLUSH succeed (R7/B2).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "test_blocker_util.h"

static char dir[256];
static struct tb_log logbuf;

/*
 * The backend: plain syscalls, except that fdatasync number fail_call
 * (1-based, counted from arming) returns -EIO. With hold_first, that
 * failing call first waits until the next fdatasync has returned, so the
 * two overlap and the later one finishes first.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool armed;
	int calls;
	int fail_call;
	bool hold_first;
	bool failing_entered;
	bool second_returned;
} io = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static ssize_t t_preadv(void *ctx, int fd, const struct iovec *iov, int cnt,
			uint64_t off)
{
	return blocker_io_sync.preadv(ctx, fd, iov, cnt, off);
}

static ssize_t t_pwritev(void *ctx, int fd, const struct iovec *iov, int cnt,
			 uint64_t off)
{
	return blocker_io_sync.pwritev(ctx, fd, iov, cnt, off);
}

static int t_fdatasync(void *ctx, int fd)
{
	int r = blocker_io_sync.fdatasync(ctx, fd), n;

	pthread_mutex_lock(&io.lock);
	n = io.armed ? ++io.calls : 0;
	if (n && n == io.fail_call) {
		io.failing_entered = true;
		pthread_cond_broadcast(&io.cond);
		while (io.hold_first && !io.second_returned)
			pthread_cond_wait(&io.cond, &io.lock);
		r = -EIO;
	} else if (n && n == io.fail_call + 1) {
		io.second_returned = true;
		pthread_cond_broadcast(&io.cond);
	}
	pthread_mutex_unlock(&io.lock);
	return r;
}

static const struct blocker_io_ops once_ops = {
    .name = "fail-once",
    .preadv = t_preadv,
    .pwritev = t_pwritev,
    .fdatasync = t_fdatasync,
};

static void arm(int fail_call, bool hold_first)
{
	pthread_mutex_lock(&io.lock);
	io.armed = true;
	io.calls = 0;
	io.fail_call = fail_call;
	io.hold_first = hold_first;
	io.failing_entered = io.second_returned = false;
	pthread_mutex_unlock(&io.lock);
}

static struct blocker_store *open_store(void)
{
	struct blocker_opts o;
	struct blocker_store *s;

	blocker_opts_init(&o);
	o.chunk_size = 4096;
	o.segment_size = 1u << 20;
	o.sync_interval_ms = 0;
	o.checkpoint_bytes = 0;
	o.log = tb_log_fn;
	o.log_arg = &logbuf;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	o.io = &once_ops;
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	return s;
}

static void setup(void)
{
	tb_mkdtemp(dir, sizeof(dir));
	memset(&logbuf, 0, sizeof(logbuf));
	pthread_mutex_lock(&io.lock);
	io.armed = false;
	pthread_mutex_unlock(&io.lock);
}

static void teardown(void)
{
	tb_rmtree(dir);
}

static int write_seed(struct blocker_store *s, const char *name, size_t len,
		      uint64_t seed)
{
	uint8_t *b = malloc(len);
	int r;

	tb_fill(b, len, seed, 0);
	r = blocker_write(s, name, strlen(name), 0, len, b, 0);
	free(b);
	return r;
}

START_TEST(test_segment_switch_fsync_error_is_sticky)
{
	struct blocker_store *s = open_store();
	int r = 0;

	arm(1, false); /* the fsync of segment 0 at the switch fails */
	/* unique data, never flushed, until the log leaves segment 0 */
	for (int i = 0; i < 64 && !r; i++) {
		char name[16];

		snprintf(name, sizeof(name), "o%d", i);
		r = write_seed(s, name, 65536, 100 + i);
	}
	ck_assert_int_eq(r, -EIO); /* the switch failed: degraded */
	ck_assert_ptr_nonnull(strstr(logbuf.text, "degraded"));
	/* The kernel would now answer 0 to a new fsync of segment 0: the
	 * writes acknowledged before must not be reported durable. */
	ck_assert_int_eq(blocker_flush(s), -EIO);
	ck_assert_int_eq(blocker_flush(s), -EIO);
	blocker_close(s);
}
END_TEST

struct flusher {
	struct blocker_store *s;
	int r;
};

static void *flush_thread(void *arg)
{
	struct flusher *f = arg;

	f->r = blocker_flush(f->s);
	return NULL;
}

START_TEST(test_overlapping_fsync_error_not_hidden)
{
	struct blocker_store *s = open_store();
	struct flusher a = {s, 1};
	pthread_t t;

	/* A: acknowledged; its flush's fsync will fail, but only after the
	 * next fsync (B's) has returned 0 */
	ck_assert_int_eq(write_seed(s, "a", 16384, 1), 0);
	arm(1, true);
	ck_assert_int_eq(pthread_create(&t, NULL, flush_thread, &a), 0);
	pthread_mutex_lock(&io.lock);
	while (!io.failing_entered)
		pthread_cond_wait(&io.cond, &io.lock);
	pthread_mutex_unlock(&io.lock);
	/* B: written after A was acknowledged; its FLUSH promises A too */
	ck_assert_int_eq(write_seed(s, "b", 16384, 2), 0);
	ck_assert_int_eq(blocker_flush(s), -EIO);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(a.r, -EIO);
	/* and never success again */
	ck_assert_int_eq(blocker_flush(s), -EIO);
	blocker_close(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_fsync");
	TCase *tc = tcase_create("errors");
	SRunner *sr;
	int failed;

	tb_base_init();
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_segment_switch_fsync_error_is_sticky);
	tcase_add_test(tc, test_overlapping_fsync_error_not_hidden);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	tb_base_cleanup();
	return failed ? 1 : 0;
}
