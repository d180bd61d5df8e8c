/* SPDX-License-Identifier: MIT */
/*
 * blocker: fsync errors are never forgotten. Linux reports a writeback
 * error to one fsync of a file only; a later fsync of the same file
 * returns 0 although the pages were lost. The I/O backend here behaves
 * like that (one failing fdatasync, every other passes), which is what the
 * armed-forever fault backend of test_blocker_store cannot show:
 * - a failed fsync at a segment switch must fail every later FLUSH
 *   (review finding B1);
 * - a FLUSH that arrives while an fsync that will fail is running must
 *   fail too, and never succeed later (R7/B2; fsyncs no longer overlap,
 *   so it waits for that one instead of racing it).
 * The same backend also counts appends and fsyncs running at once, so the
 * group commit's policy can be checked without timing: one fsync at a
 * time, and the writers queued behind one fsync share the next.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "store_int.h" /* the space hook, BLOCKER_SYNC_ERROR_FILE */
#include "test_blocker_util.h"

static char dir[256];
static struct tb_log logbuf;

/*
 * The backend: plain syscalls, except that once armed, fdatasync number
 * hold_call (1-based, counted from arming) waits until the test releases
 * it, and number fail_call returns -EIO. It counts appends (pwritev
 * calls: one per write, its chunks and map record in one batch) and
 * records, for each fdatasync since arming, how many appends had
 * completed when it started, and the most fdatasyncs ever running at once.
 */
#define MAX_CALLS 64

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool armed;
	int calls;
	int fail_call;
	int hold_call;
	bool held; /* the held call has entered */
	bool released;
	int running, max_running;
	int appends;
	int appends_at[MAX_CALLS + 1]; /* [n]: at the start of call n */
} io = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static ssize_t t_preadv(void *ctx, int fd, const struct iovec *iov, int cnt,
			uint64_t off)
{
	return blocker_io_sync.preadv(ctx, fd, iov, cnt, off);
}

static ssize_t t_pwritev(void *ctx, int fd, const struct iovec *iov, int cnt,
			 uint64_t off)
{
	ssize_t r = blocker_io_sync.pwritev(ctx, fd, iov, cnt, off);

	pthread_mutex_lock(&io.lock);
	io.appends++;
	pthread_mutex_unlock(&io.lock);
	return r;
}

static int t_fdatasync(void *ctx, int fd)
{
	int r, n;

	pthread_mutex_lock(&io.lock);
	n = io.armed ? ++io.calls : 0;
	if (n && n <= MAX_CALLS)
		io.appends_at[n] = io.appends;
	if (++io.running > io.max_running)
		io.max_running = io.running;
	if (n && n == io.hold_call) {
		io.held = true;
		pthread_cond_broadcast(&io.cond);
		while (!io.released)
			pthread_cond_wait(&io.cond, &io.lock);
	}
	pthread_mutex_unlock(&io.lock);
	r = blocker_io_sync.fdatasync(ctx, fd);
	pthread_mutex_lock(&io.lock);
	io.running--;
	if (n && n == io.fail_call)
		r = -EIO;
	pthread_cond_broadcast(&io.cond);
	pthread_mutex_unlock(&io.lock);
	return r;
}

static const struct blocker_io_ops once_ops = {
    .name = "fail-once",
    .preadv = t_preadv,
    .pwritev = t_pwritev,
    .fdatasync = t_fdatasync,
};

/* fail_call, hold_call: 0 for none */
static void arm(int fail_call, int hold_call)
{
	pthread_mutex_lock(&io.lock);
	io.armed = true;
	io.calls = 0;
	io.fail_call = fail_call;
	io.hold_call = hold_call;
	io.held = io.released = false;
	io.max_running = io.running;
	pthread_mutex_unlock(&io.lock);
}

static void wait_held(void)
{
	pthread_mutex_lock(&io.lock);
	while (!io.held)
		pthread_cond_wait(&io.cond, &io.lock);
	pthread_mutex_unlock(&io.lock);
}

static void release_held(void)
{
	pthread_mutex_lock(&io.lock);
	io.released = true;
	pthread_cond_broadcast(&io.cond);
	pthread_mutex_unlock(&io.lock);
}

static uint64_t flushes(struct blocker_store *s)
{
	struct blocker_stats st;

	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	return st.flushes;
}

/*
 * Wait until the store has counted n flush calls (each counts itself when
 * it enters, after its write appended), then give a store that would
 * start an fsync for them while the held one runs the chance to do so:
 * up to 200 ms for a further fdatasync to begin. The wait only makes the
 * test stronger (it can catch an overlap); a store that waits, as it
 * should, passes whatever the time.
 */
static void wait_flushers(struct blocker_store *s, uint64_t n, int calls)
{
	while (flushes(s) < n)
		usleep(1000);
	for (int i = 0; i < 200; i++) {
		pthread_mutex_lock(&io.lock);
		bool more = io.calls > calls;
		pthread_mutex_unlock(&io.lock);
		if (more)
			break;
		usleep(1000);
	}
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

/* the store made by open_store, opened again on io (no thread of its
 * own: the tests set hooks on the open handle) */
static struct blocker_store *reopen_io(const struct blocker_io_ops *ops)
{
	struct blocker_opts o;
	struct blocker_store *s;

	blocker_opts_init(&o);
	o.sync_interval_ms = 0;
	o.checkpoint_bytes = 0;
	o.gc_threshold_pct = 0;
	o.io = ops;
	o.log = tb_log_fn;
	o.log_arg = &logbuf;
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	return s;
}

static struct blocker_store *reopen_store(void)
{
	return reopen_io(&blocker_io_sync);
}

static char *record_path(void)
{
	static char p[400];

	snprintf(p, sizeof(p), "%s/%s", dir, BLOCKER_SYNC_ERROR_FILE);
	return p;
}

static bool has_record(void)
{
	return access(record_path(), F_OK) == 0;
}

/* the record's text ("" if empty) */
static void read_record(char *buf, size_t len)
{
	FILE *f = fopen(record_path(), "r");
	size_t n;

	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
}

static void setup(void)
{
	ttmp_mkdtemp(dir, sizeof(dir), "store");
	memset(&logbuf, 0, sizeof(logbuf));
	pthread_mutex_lock(&io.lock);
	io.armed = false;
	pthread_mutex_unlock(&io.lock);
}

static void teardown(void)
{
	ttmp_rmtree(dir);
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

	arm(1, 0); /* the fsync of segment 0 at the switch fails */
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
	/* recorded: a restart does not forget it (review9 R9-12) */
	ck_assert(has_record());
	s = reopen_store();
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

START_TEST(test_flush_during_failing_fsync_fails)
{
	struct blocker_store *s = open_store();
	struct flusher a = {s, 1};
	pthread_t t;
	uint64_t f0;

	/* A: acknowledged; its flush's fsync is held, then fails */
	ck_assert_int_eq(write_seed(s, "a", 16384, 1), 0);
	arm(1, 1);
	f0 = flushes(s);
	ck_assert_int_eq(pthread_create(&t, NULL, flush_thread, &a), 0);
	wait_held();
	/* B: written after A was acknowledged; its FLUSH promises A too. It
	 * waits for A's fsync (one at a time) and inherits its error. */
	ck_assert_int_eq(write_seed(s, "b", 16384, 2), 0);
	struct flusher b = {s, 1};
	pthread_t tb;
	ck_assert_int_eq(pthread_create(&tb, NULL, flush_thread, &b), 0);
	wait_flushers(s, f0 + 2, 1);
	release_held();
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(pthread_join(tb, NULL), 0);
	ck_assert_int_eq(a.r, -EIO);
	ck_assert_int_eq(b.r, -EIO);
	pthread_mutex_lock(&io.lock);
	ck_assert_int_eq(io.max_running, 1);
	pthread_mutex_unlock(&io.lock);
	/* and never success again */
	ck_assert_int_eq(blocker_flush(s), -EIO);
	blocker_close(s);
}
END_TEST

#define WRITERS 8
#define ROUNDS	3

struct fua_writer {
	struct blocker_store *s;
	int id;
	int r;
};

static void *fua_thread(void *arg)
{
	struct fua_writer *w = arg;
	uint8_t b[4096];
	char name[16];

	snprintf(name, sizeof(name), "w%d", w->id);
	for (int i = 0; i < ROUNDS && !w->r; i++) {
		tb_fill(b, sizeof(b), 1000 * w->id + i, 0);
		w->r = blocker_write(w->s, name, strlen(name), 4096 * i,
				     sizeof(b), b, BLOCKER_FUA);
	}
	return NULL;
}

/*
 * Group commit policy: while one fsync runs, no other starts, and when it
 * ends, one fsync takes every FUA writer that queued behind it. (With two
 * fsyncs in flight, the first writer to queue started its own and the
 * writers split into alternating half groups.)
 */
START_TEST(test_fua_writers_share_next_fsync)
{
	struct blocker_store *s = open_store();
	struct fua_writer w[WRITERS];
	pthread_t t[WRITERS];
	uint64_t f0 = flushes(s);

	arm(0, 1);
	/* writer 0's fsync is held... */
	w[0] = (struct fua_writer){s, 0, 0};
	ck_assert_int_eq(pthread_create(&t[0], NULL, fua_thread, &w[0]), 0);
	wait_held();
	/* ...while the others append and queue behind it */
	for (int i = 1; i < WRITERS; i++) {
		w[i] = (struct fua_writer){s, i, 0};
		ck_assert_int_eq(pthread_create(&t[i], NULL, fua_thread, &w[i]),
				 0);
	}
	wait_flushers(s, f0 + WRITERS, 1);
	release_held();
	for (int i = 0; i < WRITERS; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_int_eq(w[i].r, 0);
	}
	pthread_mutex_lock(&io.lock);
	ck_assert_int_eq(io.max_running, 1);
	ck_assert_int_ge(io.calls, 2);
	/* the fsync after the held one covers the WRITERS - 1 queued */
	ck_assert_int_ge(io.appends_at[2] - io.appends_at[1], WRITERS - 1);
	/* every write was covered, no more fsyncs than writes */
	ck_assert_int_le(io.calls, WRITERS * ROUNDS);
	pthread_mutex_unlock(&io.lock);
	blocker_close(s);
}
END_TEST

/* a store degraded by a recorded sync error: reads only */
static void expect_degraded(struct blocker_store *s)
{
	struct blocker_stats st;
	uint8_t b[4096];

	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, EIO);
	ck_assert_ptr_nonnull(strstr(st.degraded_reason, "sync_error"));
	ck_assert_int_eq(blocker_flush(s), -EIO);
	tb_fill(b, sizeof(b), 77, 0);
	ck_assert_int_eq(blocker_write(s, "x", 1, 0, sizeof(b), b, 0), -EIO);
	ck_assert_int_eq(blocker_write(s, "x", 1, 0, sizeof(b), b, BLOCKER_FUA),
			 -EIO);
}

static void expect_seed(struct blocker_store *s, const char *name, size_t len,
			uint64_t seed)
{
	uint8_t *b = malloc(len), *want = malloc(len);

	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_nonnull(want);
	tb_fill(want, len, seed, 0);
	ck_assert_int_eq(blocker_read(s, name, strlen(name), 0, len, b), 0);
	ck_assert_int_eq(memcmp(b, want, len), 0);
	free(b);
	free(want);
}

/*
 * Review9 R9-12: the sticky fsync error lived in memory only. A restarted
 * store read the lost writes back from the page cache, its next fsync
 * returned 0 (the kernel had reported the error once) and its FLUSH
 * acknowledged them. The failure is now recorded in DIR/sync_error before
 * the FLUSH fails, and every later open is degraded until the operator
 * clears it.
 */
START_TEST(test_sync_error_survives_reopen)
{
	struct blocker_store *s = open_store(), *s2;
	char text[1024];
	uint64_t problems = 0;

	ck_assert_int_eq(write_seed(s, "a", 16384, 1), 0);
	ck_assert_int_eq(blocker_flush(s), 0);
	ck_assert(!has_record());
	ck_assert_int_eq(write_seed(s, "b", 16384, 2), 0); /* not flushed */
	arm(1, 0);
	ck_assert_int_eq(blocker_flush(s), -EIO);
	/* durable before the FLUSH failed: errno and the durable mark */
	ck_assert(has_record());
	read_record(text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "errno 5\n"));
	ck_assert_ptr_nonnull(strstr(text, "durable "));
	ck_assert_ptr_nonnull(strstr(text, "log.000000"));
	ck_assert_ptr_nonnull(strstr(logbuf.text, "clear-sync-error"));
	ck_assert_int_eq(blocker_close(s), -EIO);

	/* the restart: degraded, reads served, the record kept as it was */
	memset(&logbuf, 0, sizeof(logbuf));
	s = reopen_store();
	ck_assert_ptr_nonnull(strstr(logbuf.text, BLOCKER_SYNC_ERROR_FILE));
	ck_assert_ptr_nonnull(strstr(logbuf.text, "errno 5"));
	expect_degraded(s);
	expect_seed(s, "a", 16384, 1);
	expect_seed(s, "b", 16384, 2);
	/* the operator cannot clear it under a running store */
	ck_assert_int_eq(blocker_clear_sync_error(dir, NULL), -EBUSY);
	ck_assert(has_record());
	ck_assert_int_eq(blocker_close(s), -EIO);
	{
		char again[1024];
		read_record(again, sizeof(again));
		ck_assert_str_eq(again, text);
	}
	/* the offline check names it */
	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(
	    blocker_check(dir, NULL, tb_log_fn_line, &logbuf, &problems), 0);
	ck_assert_uint_eq(problems, 1);
	ck_assert_ptr_nonnull(strstr(logbuf.text, BLOCKER_SYNC_ERROR_FILE));

	/* cleared: healthy again, nothing lost that was read back */
	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(blocker_clear_sync_error(dir, NULL), 0);
	ck_assert(!has_record());
	s2 = reopen_store();
	expect_seed(s2, "a", 16384, 1);
	ck_assert_int_eq(write_seed(s2, "c", 16384, 3), 0);
	ck_assert_int_eq(blocker_flush(s2), 0);
	ck_assert_int_eq(blocker_close(s2), 0);
	ck_assert_int_eq(blocker_check(dir, NULL, NULL, NULL, &problems), 0);
	ck_assert_uint_eq(problems, 0);
}
END_TEST

/* bad input: refused, nothing changed */
START_TEST(test_clear_sync_error_refused)
{
	struct blocker_store *s = open_store();
	char missing[400], empty[400];
	struct blocker_stats st;

	ck_assert_int_eq(write_seed(s, "a", 8192, 1), 0);
	ck_assert_int_eq(blocker_close(s), 0);
	snprintf(missing, sizeof(missing), "%s/nonexistent", dir);
	ck_assert_int_eq(blocker_clear_sync_error(missing, NULL), -ENOENT);
	snprintf(empty, sizeof(empty), "%s/empty", dir);
	ck_assert_int_eq(mkdir(empty, 0700), 0);
	ck_assert_int_eq(blocker_clear_sync_error(empty, NULL), -ENOENT);
	ck_assert_int_eq(rmdir(empty), 0); /* and nothing was made there */
	/* a store without a record */
	ck_assert_int_eq(blocker_clear_sync_error(dir, NULL), -ENOENT);
	s = reopen_store();
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	expect_seed(s, "a", 8192, 1);
	ck_assert_int_eq(blocker_flush(s), 0);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* the space hook: fail the record (bytes > 0), or everything */
static int space_fail(void *arg, int event, uint64_t bytes)
{
	bool all = *(bool *)arg;

	if (event != BLOCKER_SPACE_SYNC_ERROR)
		return 0;
	return all || bytes ? -ENOSPC : 0;
}

/*
 * No room for the record: an empty DIR/sync_error (no data block) is the
 * record; a store that cannot even create that keeps failing in this
 * process and says loudly that a restart would forget it.
 */
START_TEST(test_sync_error_record_no_space)
{
	struct blocker_store *s = open_store();
	bool all = false;
	char text[64];

	s->space_hook_arg = &all;
	__atomic_store_n(&s->space_hook, space_fail, __ATOMIC_RELEASE);
	ck_assert_int_eq(write_seed(s, "a", 8192, 1), 0);
	arm(1, 0);
	ck_assert_int_eq(blocker_flush(s), -EIO);
	ck_assert(has_record());
	read_record(text, sizeof(text));
	ck_assert_str_eq(text, "");
	ck_assert_ptr_nonnull(strstr(logbuf.text, "left it empty"));
	blocker_close(s);
	memset(&logbuf, 0, sizeof(logbuf));
	s = reopen_store();
	ck_assert_ptr_nonnull(strstr(logbuf.text, "empty or unreadable"));
	expect_degraded(s);
	blocker_close(s);
	ck_assert_int_eq(blocker_clear_sync_error(dir, NULL), 0);

	/* nothing at all can be written */
	memset(&logbuf, 0, sizeof(logbuf));
	s = reopen_io(&once_ops);
	all = true;
	s->space_hook_arg = &all;
	__atomic_store_n(&s->space_hook, space_fail, __ATOMIC_RELEASE);
	ck_assert_int_eq(write_seed(s, "b", 8192, 2), 0);
	arm(1, 0);
	ck_assert_int_eq(blocker_flush(s), -EIO);
	ck_assert(!has_record());
	ck_assert_ptr_nonnull(strstr(logbuf.text, "CANNOT RECORD"));
	/* this process stays on the safe side */
	ck_assert_int_eq(blocker_flush(s), -EIO);
	ck_assert_int_eq(write_seed(s, "c", 8192, 3), -EIO);
	blocker_close(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_fsync");
	TCase *tc = tcase_create("errors");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_segment_switch_fsync_error_is_sticky);
	tcase_add_test(tc, test_flush_during_failing_fsync_fails);
	tcase_add_test(tc, test_fua_writers_share_next_fsync);
	tcase_add_test(tc, test_sync_error_survives_reopen);
	tcase_add_test(tc, test_clear_sync_error_refused);
	tcase_add_test(tc, test_sync_error_record_no_space);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
