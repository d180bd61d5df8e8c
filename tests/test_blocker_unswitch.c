/*
 * A segment switch taken back (seg_unswitch, log.c) must never leave a
 * published sync position above the tail (review7 R7-3).
 *
 * The interleaving is forced, not raced: an I/O wrapper fails the first
 * write into log.000001 with ENOSPC, and before returning it runs
 * blocker_flush() in another thread to completion, i.e. a flush samples
 * the tail while the appender holds append_lock between creating the new
 * segment and its first write. Before the fix that flush published the
 * new segment's start as synced (and in the durable mark), seg_unswitch
 * moved the tail back below it, a later FUA write fitting in segment 0
 * was acknowledged with no fdatasync, and after a crash the store refused
 * to open (EUCLEAN). The store runs in a child that _exit()s (a crash of
 * the peer: the page cache survives, nothing is closed).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store_int.h"
#include "test_blocker_util.h"

#define CS  4096u
#define SEG (1u << 20)

static char dir[256];
static struct tb_log logbuf;
static struct blocker_store *S;
static int trap_armed, trapped, trap_flush_r = 1;
static uint64_t fsyncs, trap_tail, trap_synced;

static void *trap_flusher(void *arg)
{
	(void)arg;
	trap_flush_r = blocker_flush(S);
	return NULL;
}

static bool is_seg1(int fd)
{
	char p[64], t[512];
	ssize_t n;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	n = readlink(p, t, sizeof(t) - 1);
	if (n <= 0)
		return false;
	t[n] = 0;
	return strstr(t, "log.000001") != NULL;
}

static ssize_t w_pwritev(void *ctx, int fd, const struct iovec *iov, int cnt,
			 uint64_t off)
{
	(void)ctx;
	if (__atomic_load_n(&trap_armed, __ATOMIC_SEQ_CST) && off == 0 &&
	    is_seg1(fd)) {
		pthread_t t;

		__atomic_store_n(&trap_armed, 0, __ATOMIC_SEQ_CST);
		/* the appender holds append_lock, segment 1 exists: a
		 * flush that takes no append_lock runs now, to the end */
		if (pthread_create(&t, NULL, trap_flusher, NULL) == 0)
			pthread_join(t, NULL);
		pthread_mutex_lock(&S->sync_lock);
		trap_synced = S->synced;
		pthread_mutex_unlock(&S->sync_lock);
		trap_tail = __atomic_load_n(&S->tail, __ATOMIC_SEQ_CST);
		trapped = 1;
		return -ENOSPC;
	}
	return blocker_io_sync.pwritev(NULL, fd, iov, cnt, off);
}

static ssize_t w_preadv(void *ctx, int fd, const struct iovec *iov, int cnt,
			uint64_t off)
{
	(void)ctx;
	return blocker_io_sync.preadv(NULL, fd, iov, cnt, off);
}

static int w_fdatasync(void *ctx, int fd)
{
	(void)ctx;
	__atomic_add_fetch(&fsyncs, 1, __ATOMIC_SEQ_CST);
	return blocker_io_sync.fdatasync(NULL, fd);
}

static const struct blocker_io_ops wrap = {"unswitch", w_preadv, w_pwritev,
					   w_fdatasync, NULL};

static void opts(struct blocker_opts *o)
{
	tb_opts_manual(o, CS, SEG, &logbuf);
	o->io = &wrap;
	o->reserve_bytes = BLOCKER_RESERVE_NONE;
	o->mmap_reads = false;
}

/* child exit codes: what went wrong, so the parent's failure names it */
enum {
	C_OK = 0,
	C_OPEN = 10,
	C_NOTRAP,	/* the loop never reached segment 1 */
	C_WRITE_R,	/* the trapped write did not fail with ENOSPC */
	C_TRAP_FLUSH,	/* the flush inside the window failed */
	C_SYNCED_AHEAD, /* synced above the tail after the unswitch */
	C_FUA_R,	/* the FUA write after undegrade failed */
	C_FUA_NOSYNC,	/* ... was acknowledged without an fdatasync */
	C_FUA_SYNCED,	/* ... returned with synced below its records */
};

/*
 * Fill segment 0 with 4 KiB writes until one needs segment 1 (trapped),
 * lift the ENOSPC degrade, make a FUA write of a zero chunk (a map record
 * only: it fits in segment 0's rest), then crash.
 */
static void child(void)
{
	struct blocker_opts o;
	uint8_t b[CS];
	char name[32];
	uint64_t f0, f1, tail, synced;
	int r = 0, i;

	opts(&o);
	if (blocker_open(dir, &o, &S))
		_exit(C_OPEN);
	for (i = 0; i < 400 && !trapped; i++) {
		tb_fill(b, CS, 77, (uint64_t)i * CS);
		snprintf(name, sizeof(name), "o%d", i);
		__atomic_store_n(&trap_armed, 1, __ATOMIC_SEQ_CST);
		r = blocker_write(S, name, strlen(name), 0, CS, b, 0);
	}
	if (!trapped)
		_exit(C_NOTRAP);
	if (r != -ENOSPC)
		_exit(C_WRITE_R);
	if (trap_flush_r)
		_exit(C_TRAP_FLUSH);
	/* the flush in the window saw no position in segment 1 */
	if (trap_synced > trap_tail || S->synced > S->tail)
		_exit(C_SYNCED_AHEAD);
	blocker_undegrade_nospc(S, "test: space is back");
	memset(b, 0, CS);
	f0 = __atomic_load_n(&fsyncs, __ATOMIC_SEQ_CST);
	r = blocker_write(S, "z", 1, 0, CS, b, BLOCKER_FUA);
	f1 = __atomic_load_n(&fsyncs, __ATOMIC_SEQ_CST);
	tail = __atomic_load_n(&S->tail, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&S->sync_lock);
	synced = S->synced;
	pthread_mutex_unlock(&S->sync_lock);
	if (r)
		_exit(C_FUA_R);
	if (f1 == f0)
		_exit(C_FUA_NOSYNC);
	if (synced < tail)
		_exit(C_FUA_SYNCED);
	_exit(C_OK); /* a crash: no close, no trim */
}

START_TEST(test_unswitch_after_window_flush)
{
	struct blocker_opts o;
	struct blocker_store *s;
	int status, r;
	pid_t pid;

	opts(&o);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid)
		child();
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "child died: status %d", status);
	static const char *const why[] = {
	    "open failed",
	    "segment 1 never reached",
	    "trapped write did not fail with ENOSPC",
	    "flush inside the window failed",
	    "synced above the tail after the unswitch",
	    "FUA write failed",
	    "FUA write acknowledged without an fdatasync",
	    "FUA write returned with synced below its records"};
	r = WEXITSTATUS(status);
	ck_assert_msg(r == C_OK, "child exit %d: %s", r,
		      r >= C_OPEN && r <= C_FUA_SYNCED ? why[r - C_OPEN] : "?");
	/* the crash left a store that opens and holds the FUA write */
	logbuf.len = 0;
	logbuf.text[0] = 0;
	r = blocker_open(dir, &o, &s);
	ck_assert_msg(r == 0, "reopen: %d (%s)\n%s", r, strerror(-r),
		      logbuf.text);
	uint8_t b[CS], z[CS];
	memset(z, 0, CS);
	memset(b, 0xa5, CS);
	ck_assert_int_eq(blocker_read(s, "z", 1, 0, CS, b), 0);
	ck_assert_mem_eq(b, z, CS);
	blocker_close(s);
}
END_TEST

static void setup(void)
{
	ttmp_mkdtemp(dir, sizeof(dir), "store");
	memset(&logbuf, 0, sizeof(logbuf));
}

static void teardown(void)
{
	ttmp_rmtree(dir);
}

int main(void)
{
	Suite *su = suite_create("blocker_unswitch");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int nf;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_unswitch_after_window_flush);
	suite_add_tcase(su, tc);
	sr = srunner_create(su);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
