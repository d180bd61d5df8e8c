/* SPDX-License-Identifier: MIT */
/*
 * Reads through the log's mappings (store.h, mmap_reads; mapread.c): a
 * segment file truncated behind the store's back turns into -EIO for the
 * reads past the cut (SIGBUS caught), counted and logged, while the rest
 * of the store keeps working; a SIGBUS that is not a guarded copy's still
 * kills the process. Opening a store maps the segment pages that are
 * cached, and reads no others.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "store_int.h"
#include "test_blocker_util.h"

#define CS  4096
#define SEG (1u << 20)
#define REC (BREC_HDR_SIZE + CS) /* a chunk record: 4160 bytes */
#define NCH 240			 /* chunks of "a": all in log.000000 */
#define CUT (512u << 10)	 /* log.000000 is cut here */
/* chunks whose records end at or below the cut stay readable */
#define LAST_OK ((CUT / REC) - 1) /* 125 */

static char dir[256];
static struct tb_log logbuf;

static void setup(void)
{
	ttmp_mkdtemp(dir, sizeof(dir), "store");
	memset(&logbuf, 0, sizeof(logbuf));
}

static void teardown(void)
{
	ttmp_rmtree(dir);
}

static void opts(struct blocker_opts *o)
{
	tb_opts_manual(o, CS, SEG, &logbuf);
}

static void expect_chunk(struct blocker_store *s, const char *name, uint64_t k,
			 uint64_t seed)
{
	uint8_t b[CS], want[CS];

	ck_assert_int_eq(blocker_read(s, name, strlen(name), k * CS, CS, b), 0);
	tb_fill(want, CS, seed, k * CS);
	ck_assert_msg(!memcmp(b, want, CS), "%s chunk %llu differs", name,
		      (unsigned long long)k);
}

static void cut_segment0(void)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/log.000000", dir);
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, CUT), 0);
	close(fd);
}

/*
 * A store whose log.000000 holds "a" (NCH chunks, seed 1, records in order
 * from position 0) and is closed: "b" fills it up and goes on in
 * log.000001. Then log.000000
 * is cut at CUT under the open store.
 */
static struct blocker_store *mk_cut(bool verify)
{
	struct blocker_opts o;
	struct blocker_store *s;
	uint8_t *buf = malloc((size_t)NCH * CS);

	ck_assert_ptr_nonnull(buf);
	opts(&o);
	o.verify_reads = verify;
	ck_assert(o.mmap_reads); /* the default */
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	tb_fill(buf, (size_t)NCH * CS, 1, 0);
	ck_assert_int_eq(blocker_write(s, "a", 1, 0, (size_t)NCH * CS, buf, 0),
			 0);
	tb_fill(buf, (size_t)NCH * CS, 2, 0);
	ck_assert_int_eq(blocker_write(s, "b", 1, 0, (size_t)NCH * CS, buf, 0),
			 0);
	ck_assert_int_eq(blocker_flush(s), 0);
	free(buf);
	/* every chunk of "a" is read once through the mapping first, so
	 * that the pages the cut removes were mapped */
	for (uint64_t k = 0; k < NCH; k++)
		expect_chunk(s, "a", k, 1);
	cut_segment0();
	return s;
}

static void check_cut_store(struct blocker_store *s, bool verify)
{
	struct blocker_stats st0, st;
	uint8_t b[2 * CS];

	blocker_get_stats(s, &st0);
	ck_assert_uint_eq(st0.read_errors, 0);
	/* past the cut, and across it: -EIO, not a dead process */
	ck_assert_int_eq(blocker_read(s, "a", 1, (LAST_OK + 1) * CS, CS, b),
			 -EIO);
	ck_assert_int_eq(blocker_read(s, "a", 1, 200 * CS, CS, b), -EIO);
	/* a partial read of a chunk past the cut, and a multi-chunk one */
	ck_assert_int_eq(blocker_read(s, "a", 1, 200 * CS + 7, 10, b), -EIO);
	ck_assert_int_eq(blocker_read(s, "a", 1, LAST_OK * CS, 2 * CS, b),
			 -EIO);
	blocker_get_stats(s, &st);
	/* counted once per damaged copy (the index flags it, review6 F14):
	 * the four reads met two, LAST_OK + 1 and 200 */
	ck_assert_uint_eq(st.read_errors, 2);
	/* a read error, not a content mismatch */
	ck_assert_uint_eq(st.verify_failures, st0.verify_failures);
	ck_assert_int_eq(blocker_degraded(s), 0);
	/* segment, offset, reason; once the fault showed the cut, reads
	 * past it go to the backend (no more faults) */
	ck_assert_ptr_nonnull(strstr(logbuf.text, "log.000000: read at offset "
						  "524160 failed: SIGBUS: "
						  "the file ends at 524288 "
						  "(truncated)"));
	ck_assert_ptr_nonnull(strstr(logbuf.text, "log.000000: read at offset "
						  "832000 failed: past the "
						  "end of the file"));
	(void)verify;
	/* before the cut, and the other segment: right data */
	for (uint64_t k = 0; k <= LAST_OK; k += 25)
		expect_chunk(s, "a", k, 1);
	expect_chunk(s, "a", LAST_OK, 1);
	/* (the first chunks of "b" filled log.000000 up) */
	for (uint64_t k = 20; k < NCH; k += 17)
		expect_chunk(s, "b", k, 2);
}

START_TEST(test_truncated_segment)
{
	struct blocker_store *s = mk_cut(true);
	struct blocker_stats st;
	uint8_t b[CS];

	check_cut_store(s, true);
	/* writes go on: new data, and data equal to a lost chunk (stored
	 * afresh: the unreadable copy does not count for dedup) */
	tb_fill(b, CS, 3, 0);
	ck_assert_int_eq(blocker_write(s, "c", 1, 0, CS, b, 0), 0);
	tb_fill(b, CS, 1, 200 * CS);
	ck_assert_int_eq(blocker_write(s, "c", 1, CS, CS, b, BLOCKER_FUA), 0);
	expect_chunk(s, "c", 0, 3);
	ck_assert_int_eq(blocker_read(s, "c", 1, CS, CS, b), 0);
	/* and the object that lost the chunk reads it from the new copy */
	expect_chunk(s, "a", 200, 1);
	blocker_get_stats(s, &st);
	ck_assert_int_eq(st.degraded_errno, 0);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* without verification a read past the cut is still -EIO, never zeros
 * (a cut inside a page: test_cut_inside_page_unverified) */
START_TEST(test_truncated_segment_unverified)
{
	struct blocker_store *s = mk_cut(false);

	check_cut_store(s, false);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* the pread path (--no-mmap-reads) reports the cut as an error too */
START_TEST(test_truncated_segment_pread)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_stats st;
	uint8_t b[CS];

	opts(&o);
	o.mmap_reads = false;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	uint8_t *buf = malloc((size_t)NCH * CS);
	ck_assert_ptr_nonnull(buf);
	tb_fill(buf, (size_t)NCH * CS, 1, 0);
	ck_assert_int_eq(blocker_write(s, "a", 1, 0, (size_t)NCH * CS, buf, 0),
			 0);
	free(buf);
	cut_segment0();
	ck_assert_int_eq(blocker_read(s, "a", 1, 200 * CS, CS, b), -EIO);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "log.000000: read at offset "
						  "832000 failed: past the "
						  "end of the file"));
	expect_chunk(s, "a", 0, 1);
	blocker_get_stats(s, &st);
	ck_assert_uint_eq(st.read_errors, 1);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* a flipped bit in a chunk read through the mapping: -EIO as before */
START_TEST(test_bitflip_mapped)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_stats st;
	uint8_t b[CS];

	opts(&o);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	tb_fill(b, CS, 5, 0);
	ck_assert_int_eq(blocker_write(s, "x", 1, 0, CS, b, BLOCKER_FUA), 0);
	expect_chunk(s, "x", 0, 5);
	/* through the file: the shared mapping sees it at once */
	ck_assert_int_eq(tb_xor_byte(dir, "log.000000", BREC_HDR_SIZE + 99, 4),
			 0);
	ck_assert_int_eq(blocker_read(s, "x", 1, 0, CS, b), -EIO);
	blocker_get_stats(s, &st);
	ck_assert_uint_eq(st.verify_failures, 1);
	ck_assert_uint_eq(st.read_errors, 0);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "fails verification"));
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

static void cut_segment0_at(off_t at)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/log.000000", dir);
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, at), 0);
	close(fd);
}

/*
 * review6 F3: a copy whose header is readable but whose payload is not
 * (log.000000, closed, cut at 8192: chunk 1's record is [4160, 8320)) does not
 * count for dedup, so a write of the same data stores it afresh instead
 * of being acknowledged onto a copy that reads back EIO. Runs with
 * mapped reads, the pread path, and io_uring's batched dedup lookups.
 * verify: with verify_reads off too (the payload read must fail by
 * itself, not through a hash).
 */
static void dedup_unreadable_case(bool mmap, const struct blocker_io_ops *io,
				  bool verify)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_stats st0, st;
	uint8_t buf[4 * CS], b[2 * CS];

	ttmp_rmtree(dir);
	ttmp_mkdtemp(dir, sizeof(dir), "store");
	opts(&o);
	o.mmap_reads = mmap;
	o.verify_reads = verify;
	o.io = io;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	tb_fill(buf, sizeof(buf), 1, 0);
	ck_assert_int_eq(
	    blocker_write(s, "a", 1, 0, sizeof(buf), buf, BLOCKER_FUA), 0);
	/* "f" fills log.000000 up: no append extends it again after the
	 * cut (a hole would read as zeros, which only verification sees) */
	uint8_t *fill = malloc(SEG);
	ck_assert_ptr_nonnull(fill);
	tb_fill(fill, SEG, 9, 0);
	ck_assert_int_eq(blocker_write(s, "f", 1, 0, SEG, fill, 0), 0);
	free(fill);
	ck_assert_int_eq(blocker_flush(s), 0);
	ck_assert_uint_gt(s->nsegs, 1);
	cut_segment0_at(8192);
	blocker_get_stats(s, &st0);
	/* "c": chunk 0 is a's chunk 1, chunk 1 is new (two chunks: the
	 * batched lookup with io_uring) */
	memcpy(b, buf + CS, CS);
	tb_fill(b + CS, CS, 7, CS);
	ck_assert_int_eq(blocker_write(s, "c", 1, 0, 2 * CS, b, BLOCKER_FUA),
			 0);
	ck_assert_int_eq(blocker_flush(s), 0);
	blocker_get_stats(s, &st);
	ck_assert_uint_eq(st.dedup_hits, st0.dedup_hits);
	memset(b, 0, sizeof(b));
	ck_assert_int_eq(blocker_read(s, "c", 1, 0, 2 * CS, b), 0);
	ck_assert(!memcmp(b, buf + CS, CS));
	expect_chunk(s, "c", 1, 7);
	/* and the object that lost it reads the new copy */
	if (verify)
		expect_chunk(s, "a", 1, 1);
	ck_assert_int_eq(blocker_close(s), 0);
}

START_TEST(test_dedup_skips_unreadable_payload)
{
	dedup_unreadable_case(true, &blocker_io_sync, true);
	dedup_unreadable_case(true, &blocker_io_sync, false);
	dedup_unreadable_case(false, &blocker_io_sync, true);
	dedup_unreadable_case(false, &blocker_io_uring, true);
	dedup_unreadable_case(false, &blocker_io_uring, false);
}
END_TEST

/* a copy whose payload fails its hash is not deduped onto (verify on) */
START_TEST(test_dedup_skips_damaged_payload)
{
	const struct blocker_io_ops *ios[2] = {&blocker_io_sync,
					       &blocker_io_uring};

	for (int i = 0; i < 3; i++) {
		struct blocker_opts o;
		struct blocker_store *s;
		struct blocker_stats st0, st;
		uint8_t buf[2 * CS];

		ttmp_rmtree(dir);
		ttmp_mkdtemp(dir, sizeof(dir), "store");
		opts(&o);
		o.mmap_reads = i == 0;
		o.io = ios[i == 2];
		ck_assert_int_eq(blocker_create(dir, &o), 0);
		ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
		tb_fill(buf, sizeof(buf), 4, 0);
		ck_assert_int_eq(
		    blocker_write(s, "x", 1, 0, CS, buf, BLOCKER_FUA), 0);
		ck_assert_int_eq(
		    tb_xor_byte(dir, "log.000000", BREC_HDR_SIZE + 10, 1), 0);
		blocker_get_stats(s, &st0);
		ck_assert_int_eq(
		    blocker_write(s, "y", 1, 0, 2 * CS, buf, BLOCKER_FUA), 0);
		blocker_get_stats(s, &st);
		ck_assert_uint_eq(st.dedup_hits, st0.dedup_hits);
		ck_assert_uint_gt(st.verify_failures, st0.verify_failures);
		expect_chunk(s, "y", 0, 4);
		expect_chunk(s, "x", 0, 4);
		ck_assert_int_eq(blocker_close(s), 0);
	}
}
END_TEST

/*
 * review6 F1: a closed segment cut inside a page (not page aligned),
 * verify_reads off: the chunk whose record ends past the cut is -EIO,
 * never the zeros a mapping shows past the end of the file's last page;
 * the chunks before it read right. And (F10) re-reading it does not log
 * a line per read.
 */
START_TEST(test_cut_inside_page_unverified)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_stats st;
	uint8_t *buf = malloc(SEG), b[CS];
	off_t at = 10 * REC - 100; /* inside chunk 9's record, page 10 */

	ck_assert_ptr_nonnull(buf);
	opts(&o);
	o.verify_reads = false;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	tb_fill(buf, SEG, 1, 0);
	/* 256 chunks: log.000000 fills up and is closed */
	ck_assert_int_eq(blocker_write(s, "a", 1, 0, SEG, buf, 0), 0);
	ck_assert_int_eq(blocker_flush(s), 0);
	ck_assert_uint_gt(s->nsegs, 1);
	free(buf);
	for (uint64_t k = 0; k < 20; k++)
		expect_chunk(s, "a", k, 1);
	ck_assert_uint_ne(at % 4096, 0);
	cut_segment0_at(at);
	ck_assert_int_eq(blocker_read(s, "a", 1, 9 * CS, CS, b), -EIO);
	for (uint64_t k = 0; k < 9; k++)
		expect_chunk(s, "a", k, 1);
	ck_assert_int_eq(blocker_read(s, "a", 1, 10 * CS, CS, b), -EIO);
	ck_assert_int_eq(blocker_read(s, "a", 1, 19 * CS, CS, b), -EIO);
	expect_chunk(s, "a", 255, 1); /* in log.000001 */
	blocker_get_stats(s, &st);
	ck_assert_uint_eq(st.read_errors, 3);
	ck_assert_uint_eq(st.verify_failures, 0);
	/* 200 more failed reads: a handful of log lines, not 200, and no
	 * new count (the copy was flagged at its first failure) */
	int lines = logbuf.lines;
	for (int i = 0; i < 200; i++)
		ck_assert_int_eq(blocker_read(s, "a", 1, 9 * CS, CS, b), -EIO);
	blocker_get_stats(s, &st);
	ck_assert_uint_eq(st.read_errors, 3);
	ck_assert_int_le(logbuf.lines - lines, 8);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* review6 F14: re-reading a damaged chunk logs a handful of lines, not
 * one per read; the damaged copy is counted once */
START_TEST(test_verify_failure_log_limited)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_stats st;
	uint8_t b[CS];
	int lines;

	opts(&o);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	tb_fill(b, CS, 5, 0);
	ck_assert_int_eq(blocker_write(s, "x", 1, 0, CS, b, BLOCKER_FUA), 0);
	ck_assert_int_eq(tb_xor_byte(dir, "log.000000", BREC_HDR_SIZE + 99, 4),
			 0);
	lines = logbuf.lines;
	for (int i = 0; i < 100; i++)
		ck_assert_int_eq(blocker_read(s, "x", 1, 0, CS, b), -EIO);
	blocker_get_stats(s, &st);
	ck_assert_uint_eq(st.verify_failures, 1);
	ck_assert_int_ge(logbuf.lines - lines, 1);
	ck_assert_int_le(logbuf.lines - lines, 8);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/*
 * Run fn in a child and return its wait status. The child opens a store
 * with mapped reads first (installing the store's SIGBUS handler) and
 * exits 0 only if fn returns.
 */
static int in_child(void (*fn)(void))
{
	pid_t pid = fork();
	int status = 0;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct blocker_opts o;
		struct blocker_store *s;

		opts(&o);
		if (blocker_create(dir, &o) || blocker_open(dir, &o, &s))
			_exit(3);
		fn();
		_exit(0); /* the signal was swallowed */
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

static void raise_bus(void)
{
	raise(SIGBUS);
}

/* a real fault, on a mapping that is not the store's */
static void foreign_fault(void)
{
	char p[512];
	volatile const uint8_t *m;
	int fd;

	snprintf(p, sizeof(p), "%s/foreign", dir);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, 8192))
		_exit(4);
	m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED || ftruncate(fd, 0))
		_exit(4);
	(void)m[4096];
}

/*
 * dead by SIGBUS, or by a sanitizer's handler that ours chained to: that
 * one reports and then exits non-zero, or aborts (SIGABRT) with
 * abort_on_error=1 as CI runs it; but not the "swallowed" exit 0 nor a
 * setup failure
 */
static void expect_killed(int status)
{
	if (WIFSIGNALED(status)) {
		ck_assert_msg(WTERMSIG(status) == SIGBUS ||
				  WTERMSIG(status) == SIGABRT,
			      "child killed by signal %d", WTERMSIG(status));
		return;
	}
	ck_assert(WIFEXITED(status));
	ck_assert_int_ne(WEXITSTATUS(status), 0);
	ck_assert_int_ne(WEXITSTATUS(status), 3);
	ck_assert_int_ne(WEXITSTATUS(status), 4);
}

static void other_bus_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	_exit(7);
}

/*
 * review6 F8: another SIGBUS handler in place of the store's (installed
 * after it, as an embedding program might; or a runtime that keeps its
 * own): a store opened then does not map its segments (a guarded fault
 * would go to the other handler) but reads through the backend, says so
 * in the log, and a cut segment reads -EIO, with no SIGBUS.
 */
static void replaced_handler(void)
{
	struct sigaction sa;
	struct blocker_opts o;
	struct blocker_store *s;
	uint8_t *buf = malloc((size_t)NCH * CS), b[CS];
	char sub[300];

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = other_bus_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (!buf || sigaction(SIGBUS, &sa, NULL))
		_exit(4);
	snprintf(sub, sizeof(sub), "%s/second", dir);
	opts(&o);
	if (blocker_create(sub, &o) || blocker_open(sub, &o, &s))
		_exit(5);
	if (!strstr(logbuf.text, "another SIGBUS handler") || s->segs[0].map)
		_exit(6);
	tb_fill(buf, (size_t)NCH * CS, 1, 0);
	if (blocker_write(s, "a", 1, 0, (size_t)NCH * CS, buf, BLOCKER_FUA))
		_exit(8);
	snprintf(sub, sizeof(sub), "%s/second/log.000000", dir);
	if (truncate(sub, CUT))
		_exit(9);
	if (blocker_read(s, "a", 1, 200 * CS, CS, b) != -EIO)
		_exit(10);
	if (blocker_read(s, "a", 1, 0, CS, b) || memcmp(b, buf, CS))
		_exit(11);
	blocker_close(s);
	free(buf);
}

START_TEST(test_replaced_handler_falls_back)
{
	int status = in_child(replaced_handler);

	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child: status %d", status);
}
END_TEST

START_TEST(test_foreign_sigbus_kills)
{
	expect_killed(in_child(raise_bus));
	ttmp_rmtree(dir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	expect_killed(in_child(foreign_fault));
}
END_TEST

/* the offline checker reads through mappings too: a cut segment is a
 * problem it reports, not a crash */
START_TEST(test_check_truncated)
{
	struct blocker_store *s = mk_cut(true);
	uint64_t problems = 0;

	ck_assert_int_eq(blocker_close(s), 0);
	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(
	    blocker_check(dir, NULL, tb_log_fn_line, &logbuf, &problems), 0);
	ck_assert_uint_gt(problems, 0);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "log.000000"));
}
END_TEST

/* several threads hit the cut at once: each read fails alone */
struct reader_arg {
	struct blocker_store *s;
	unsigned id;
	int bad; /* reads that did not give what they should */
};

static void *reader(void *p)
{
	struct reader_arg *a = p;
	uint64_t rs = 0x9e37 + a->id;
	uint8_t b[CS], want[CS];

	for (int i = 0; i < 300; i++) {
		uint64_t k = tb_rnd(&rs) % NCH;
		int r = blocker_read(a->s, "a", 1, k * CS, CS, b);
		if (k > LAST_OK) {
			a->bad += r != -EIO;
			continue;
		}
		tb_fill(want, CS, 1, k * CS);
		a->bad += r != 0 || memcmp(b, want, CS);
	}
	return NULL;
}

START_TEST(test_truncated_concurrent_readers)
{
	struct blocker_store *s = mk_cut(true);
	struct reader_arg a[4];
	pthread_t t[4];
	struct blocker_stats st;
	uint64_t expect_errors = 0, distinct = 0;
	bool seen[NCH] = {false};

	for (unsigned i = 0; i < 4; i++) {
		a[i] = (struct reader_arg){.s = s, .id = i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, reader, &a[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_int_eq(a[i].bad, 0);
		uint64_t rs = 0x9e37 + i;
		for (int k = 0; k < 300; k++) {
			uint64_t c = tb_rnd(&rs) % NCH;
			if (c <= LAST_OK)
				continue;
			expect_errors++;
			distinct += !seen[c];
			seen[c] = true;
		}
	}
	/* each damaged copy counted once, or by each of the readers that
	 * met it before one of them flagged it */
	blocker_get_stats(s, &st);
	ck_assert_uint_ge(st.read_errors, distinct);
	ck_assert_uint_le(st.read_errors, expect_errors);
	ck_assert_uint_eq(st.verify_failures, 0);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* pages [0, n) of the mapping at map: resident in the page cache
 * (mincore), and mapped in this process (present in /proc/self/pagemap;
 * -1 if that file cannot be read) */
static void page_counts(const uint8_t *map, size_t n, size_t *cached,
			long *mapped)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *vec = malloc(n);
	int fd = open("/proc/self/pagemap", O_RDONLY);

	ck_assert_ptr_nonnull(vec);
	ck_assert_int_eq(mincore((void *)map, n * pg, vec), 0);
	*cached = 0;
	*mapped = fd < 0 ? -1 : 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t e;

		*cached += vec[i] & 1;
		if (fd < 0)
			continue;
		ck_assert_int_eq(pread(fd, &e, sizeof(e),
				       ((uintptr_t)map / pg + i) * sizeof(e)),
				 sizeof(e));
		*mapped += (e >> 63) & 1;
	}
	if (fd >= 0)
		close(fd);
	free(vec);
}

/*
 * Opening a store maps the pages of its segments that are in the page
 * cache (so a first read does not fault them in one by one) and only
 * those: a cold store is not read at open.
 */
START_TEST(test_open_maps_cached_pages_only)
{
	struct blocker_opts o;
	struct blocker_store *s;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n, cached;
	uint8_t *buf = malloc(NCH * CS);
	char p[512];
	struct stat st;
	long mapped;
	int fd;

	opts(&o);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	tb_fill(buf, NCH * CS, 1, 0);
	ck_assert_int_eq(blocker_write(s, "a", 1, 0, NCH * CS, buf, 0), 0);
	free(buf);
	ck_assert_int_eq(blocker_close(s), 0);
	snprintf(p, sizeof(p), "%s/log.000000", dir);
	ck_assert_int_eq(stat(p, &st), 0);
	n = (st.st_size + pg - 1) / pg;
	ck_assert_uint_gt(n, 200);

	/* warm: just written, so (unless reclaim took some meanwhile, which
	 * a loaded machine may do) cached; open maps every cached page */
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	ck_assert_ptr_nonnull(s->segs[0].map);
	page_counts(s->segs[0].map, n, &cached, &mapped);
	ck_assert_uint_gt(cached, 0);
	if (mapped >= 0)
		ck_assert_int_eq(mapped, (long)cached);
	expect_chunk(s, "a", NCH - 1, 1);
	ck_assert_int_eq(blocker_close(s), 0);

	/* cold: the file's (clean) pages dropped from the cache */
	fd = open(p, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fdatasync(fd), 0);
	ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	/* tmpfs (a TMPDIR in /dev/shm) and some file systems ignore the
	 * advice: look through a scratch mapping whether the pages left */
	void *scratch = mmap(NULL, n * pg, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(scratch, MAP_FAILED);
	page_counts(scratch, n, &cached, &mapped);
	ck_assert_int_eq(munmap(scratch, n * pg), 0);
	close(fd);
	if (cached >= n / 2) {
		printf("test_open_maps_cached_pages_only: %zu of %zu pages "
		       "still cached after POSIX_FADV_DONTNEED (tmpfs?): "
		       "cold half skipped\n",
		       cached, n);
		return;
	}
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	page_counts(s->segs[0].map, n, &cached, &mapped);
	/* (recovery may read a few records at the tail) */
	ck_assert_uint_lt(cached, n / 2);
	if (mapped >= 0)
		ck_assert_int_le(mapped, (long)cached);
	expect_chunk(s, "a", 0, 1);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_mmap");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_truncated_segment);
	tcase_add_test(tc, test_truncated_segment_unverified);
	tcase_add_test(tc, test_truncated_segment_pread);
	tcase_add_test(tc, test_bitflip_mapped);
	tcase_add_test(tc, test_verify_failure_log_limited);
	tcase_add_test(tc, test_dedup_skips_unreadable_payload);
	tcase_add_test(tc, test_cut_inside_page_unverified);
	tcase_add_test(tc, test_dedup_skips_damaged_payload);
	tcase_add_test(tc, test_foreign_sigbus_kills);
	tcase_add_test(tc, test_replaced_handler_falls_back);
	tcase_add_test(tc, test_truncated_concurrent_readers);
	tcase_add_test(tc, test_check_truncated);
	tcase_add_test(tc, test_open_maps_cached_pages_only);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
