/* SPDX-License-Identifier: MIT */
/*
 * The blocker peer, as real processes on a private segment: data round
 * trips and survives restarts and SIGKILL (what a FLUSH covered), every bad
 * request is refused with EINVAL while the peer keeps serving, INFO / COPY /
 * HASH / DELETE semantics, a chunk corrupted on disk reads as EIO, and
 * start-up errors exit non-zero with a reason.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_peer_run.h"
#include "test_tmp.h"
#include "xseg.h"
#include "xseg_testutil.h"

#define BP_PORT	   1
#define BP_TIMEOUT 10000ULL /* ms: start-up and shutdown bounds */

struct bp_env {
	const char *segname;
	struct xseg *seg;
	char dir[128];	 /* store directory */
	const char *log; /* peer log file (tpr_tmpfile's: not freed) */
	pid_t peer;
	struct tpr_client client;
};

/* tests that set it run the peer with --mmap-reads (Check forks each) */
static bool bp_mmap;
/* tests that set it run the peer with small segments and eager GC */
static bool bp_gc;
/* tests that set it run the peer with --truncate-at-damage */
static bool bp_truncate;
/* tests that set it run the peer with --reserve=bp_reserve */
static const char *bp_reserve;
/* tests that set it run the peer with --test-fsync-control=DIR/fsctl,
 * --sync-interval-ms=0 and --drain-timeout=1s (bp_fsctl) */
static bool bp_fsctl;

static void bp_start(struct bp_env *e, bool create)
{
	char store[160];
	char fsctl[200];
	const char *argv[20] = {"blocker", "-g",      e->segname, "-p",
				"1",	   "--store", store,	  "-t",
				"2",	   "-v",      "warn"};
	int n = 11;

	if (bp_mmap)
		argv[n++] = "--mmap-reads";
	if (bp_gc) {
		argv[n++] = "--gc-threshold=20";
		argv[n++] = "--gc-rate=0";
		argv[n++] = "--segment-size=1M";
	}
	if (bp_truncate)
		argv[n++] = "--truncate-at-damage";
	char reserve[64];
	if (bp_reserve) {
		snprintf(reserve, sizeof(reserve), "--reserve=%s", bp_reserve);
		argv[n++] = reserve;
	}
	if (bp_fsctl) {
		snprintf(fsctl, sizeof(fsctl), "--test-fsync-control=%s/fsctl",
			 e->dir);
		argv[n++] = fsctl;
		argv[n++] = "--sync-interval-ms=0";
		argv[n++] = "--drain-timeout=1s";
	}
	if (create)
		argv[n++] = "--create";
	argv[n] = NULL;
	snprintf(store, sizeof(store), "%s/store", e->dir);
	e->peer = tpr_start(argv, e->log);
	ck_assert_int_gt(e->peer, 0);
	ck_assert_msg(tpr_wait_port(e->seg, BP_PORT, BP_TIMEOUT) == 0,
		      "blocker did not bind its port: %s", tpr_slurp(e->log));
}

static void bp_stop(struct bp_env *e)
{
	ck_assert_int_eq(xtu_kill(e->peer, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(e->peer, BP_TIMEOUT), 0);
	ck_assert_int_eq(tpr_wait_port_free(e->seg, BP_PORT, BP_TIMEOUT), 0);
}

static void bp_setup(struct bp_env *e, const char *tag)
{
	memset(e, 0, sizeof(*e));
	e->segname = tpr_segment(tag, &e->seg);
	ttmp_mkdtemp(e->dir, sizeof(e->dir), "bpeer");
	e->log = tpr_tmpfile(tag);
	bp_start(e, true);
	ck_assert_int_eq(tpr_client_open(&e->client, e->segname), 0);
}

static void bp_teardown(struct bp_env *e)
{
	tpr_client_close(&e->client);
	if (e->peer > 0 && xtu_try_wait(e->peer) == -EAGAIN) {
		xtu_kill(e->peer, SIGTERM);
		xtu_wait(e->peer, BP_TIMEOUT);
	}
	xseg_leave(e->seg);
	ttmp_rmtree(e->dir);
}

/*
 * One request: WRITE copies in, READ/INFO/HASH copy the reply payload to
 * out. extra (COPY: the source name) goes into the data buffer. Returns the
 * reply's errno (>= 0) or a negative local failure.
 */
static int bp_io(struct bp_env *e, uint16_t op, const char *target,
		 uint64_t off, uint64_t size, uint32_t flags, const void *in,
		 void *out, size_t outlen)
{
	struct tpr_client *c = &e->client;
	struct xseg_request *req, *rep;
	size_t tlen = strlen(target);
	uint64_t datalen = size > 512 ? size : 512;
	int rc;

	rc = xseg_get_request(c->seg, c->port, &req);
	if (rc < 0)
		return rc;
	rc = xseg_prep_request(c->seg, req, (uint32_t)tlen, datalen);
	if (rc < 0) {
		xseg_put_request(c->seg, req);
		return rc;
	}
	req->op = op;
	req->flags = flags;
	req->offset = off;
	req->size = size;
	memcpy(xseg_request_target(req), target, tlen);
	if (in)
		memcpy(xseg_request_data(c->seg, req), in,
		       op == XSEG_OP_WRITE ? size : outlen);
	rc = xseg_submit(c->seg, req, BP_PORT);
	if (rc < 0) {
		xseg_put_request(c->seg, req);
		return rc;
	}
	rc = xseg_wait_reply(c->seg, c->port, 30ULL * 1000000000ULL, &rep);
	if (rc < 0)
		return rc;
	rc = rep->error;
	if (!rc && out)
		memcpy(out, xseg_request_data(c->seg, rep), outlen);
	if (!rc && (op == XSEG_OP_READ || op == XSEG_OP_WRITE))
		ck_assert_uint_eq(rep->serviced, size);
	xseg_put_request(c->seg, rep);
	return rc;
}

static void bp_fill(unsigned char *buf, size_t len, unsigned seed)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL * (seed + 1);

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (unsigned char)x;
	}
}

static void bp_expect_data(struct bp_env *e, const char *target, uint64_t off,
			   const unsigned char *want, size_t len)
{
	unsigned char *got = malloc(len);

	ck_assert_ptr_nonnull(got);
	ck_assert_int_eq(
	    bp_io(e, XSEG_OP_READ, target, off, len, 0, NULL, got, len), 0);
	ck_assert_msg(memcmp(got, want, len) == 0, "%s at %llu: data differs",
		      target, (unsigned long long)off);
	free(got);
}

static void roundtrip_and_restart(void)
{
	struct bp_env e;
	enum { LEN = 64 * 1024 };
	static unsigned char a[LEN], b[LEN], zeros[LEN];

	bp_setup(&e, "bprt");
	bp_fill(a, LEN, 1);
	bp_fill(b, LEN, 2);
	/* never written: zeros, like an unwritten extent of a disk */
	bp_expect_data(&e, "vol_0001", 0, zeros, 4096);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "vol_0001", 8192, LEN, 0, a, NULL, 0), 0);
	ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, "vol_0002", 0, LEN,
			       XSEG_F_FUA, b, NULL, 0),
			 0);
	bp_expect_data(&e, "vol_0001", 8192, a, LEN);
	bp_expect_data(&e, "vol_0001", 0, zeros, 8192);
	bp_expect_data(&e, "vol_0002", 0, b, LEN);

	/* a clean restart keeps everything */
	bp_stop(&e);
	bp_start(&e, false);
	bp_expect_data(&e, "vol_0001", 8192, a, LEN);
	bp_expect_data(&e, "vol_0002", 0, b, LEN);
	bp_teardown(&e);
}

START_TEST(test_roundtrip_and_restart)
{
	roundtrip_and_restart();
}
END_TEST

START_TEST(test_roundtrip_mmap_reads)
{
	bp_mmap = true;
	roundtrip_and_restart();
}
END_TEST

START_TEST(test_object_ops)
{
	struct bp_env e;
	enum { LEN = 16 * 1024 };
	static unsigned char a[LEN];
	struct xseg_reply_info info;
	struct xseg_reply_hash h1, h2;
	struct xseg_request_copy cp;

	bp_setup(&e, "bpops");
	bp_fill(a, LEN, 3);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_INFO, "obj", 0, 0, 0, NULL, &info, sizeof(info)),
	    ENOENT);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "obj", 4096, LEN, 0, a, NULL, 0), 0);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_INFO, "obj", 0, 0, 0, NULL, &info, sizeof(info)),
	    0);
	ck_assert_uint_eq(info.size, 4096 + LEN);

	/* COPY: same content (same hash), and writes stay apart */
	memset(&cp, 0, sizeof(cp));
	cp.src_targetlen = 3;
	memcpy(cp.src_target, "obj", 3);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_COPY, "obj.copy", 0, 0, 0, &cp, NULL, sizeof(cp)),
	    0);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_HASH, "obj", 0, 0, 0, NULL, &h1, sizeof(h1)), 0);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_HASH, "obj.copy", 0, 0, 0, NULL, &h2, sizeof(h2)),
	    0);
	ck_assert_uint_eq(h1.len, 32);
	ck_assert_mem_eq(h1.hash, h2.hash, 32);
	unsigned char one[4096];
	bp_fill(one, sizeof(one), 4);
	ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, "obj.copy", 4096, sizeof(one),
			       0, one, NULL, 0),
			 0);
	bp_expect_data(&e, "obj", 4096, a, LEN);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_HASH, "obj.copy", 0, 0, 0, NULL, &h2, sizeof(h2)),
	    0);
	ck_assert_int_ne(memcmp(h1.hash, h2.hash, 32), 0);

	/* COPY from a missing source */
	cp.src_targetlen = 7;
	memcpy(cp.src_target, "missing", 7);
	ck_assert_int_eq(bp_io(&e, XSEG_OP_COPY, "obj.copy2", 0, 0, 0, &cp,
			       NULL, sizeof(cp)),
			 ENOENT);

	/* DELETE, then it is gone; a second DELETE says so */
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_DELETE, "obj", 0, 0, 0, NULL, NULL, 0), 0);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_INFO, "obj", 0, 0, 0, NULL, &info, sizeof(info)),
	    ENOENT);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_DELETE, "obj", 0, 0, 0, NULL, NULL, 0), ENOENT);
	/* the copy is untouched by the delete of its source */
	bp_expect_data(&e, "obj.copy", 4096, one, sizeof(one));
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_FLUSH, "obj", 0, 0, 0, NULL, NULL, 0), 0);
	ck_assert_int_eq(bp_io(&e, XSEG_OP_PING, "obj", 0, 0, 0, NULL, NULL, 0),
			 0);
	bp_teardown(&e);
}
END_TEST

START_TEST(test_bad_requests_refused)
{
	struct bp_env e;
	unsigned char buf[4096] = {1};
	struct xseg_reply_info info;
	struct xseg_request_copy cp;
	char longname[300];

	bp_setup(&e, "bpbad");
	/* characters outside the store's name set */
	ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, "bad/name", 0, sizeof(buf), 0,
			       buf, NULL, 0),
			 EINVAL);
	ck_assert_int_eq(bp_io(&e, XSEG_OP_READ, "bad name", 0, sizeof(buf), 0,
			       NULL, buf, sizeof(buf)),
			 EINVAL);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_INFO, "a*b", 0, 0, 0, NULL, &info, sizeof(info)),
	    EINVAL);
	/* names longer than 255 bytes cannot even be prepared */
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	ck_assert_int_lt(
	    bp_io(&e, XSEG_OP_PING, longname, 0, 0, 0, NULL, NULL, 0), 0);
	/* ranges beyond the maximum object size, and overflowing ones */
	ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, "obj", 1ULL << 40,
			       sizeof(buf), 0, buf, NULL, 0),
			 EINVAL);
	ck_assert_int_eq(bp_io(&e, XSEG_OP_READ, "obj", UINT64_MAX - 100,
			       sizeof(buf), 0, NULL, buf, sizeof(buf)),
			 EINVAL);
	/* COPY with a bad source name */
	memset(&cp, 0, sizeof(cp));
	cp.src_targetlen = 3;
	memcpy(cp.src_target, "a b", 3);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_COPY, "dst", 0, 0, 0, &cp, NULL, sizeof(cp)),
	    EINVAL);
	/* nothing was created by any of them, and the peer still serves */
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_INFO, "obj", 0, 0, 0, NULL, &info, sizeof(info)),
	    ENOENT);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_INFO, "dst", 0, 0, 0, NULL, &info, sizeof(info)),
	    ENOENT);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "obj", 0, sizeof(buf), 0, buf, NULL, 0),
	    0);
	bp_expect_data(&e, "obj", 0, buf, sizeof(buf));
	bp_teardown(&e);
}
END_TEST

/* Everything acknowledged before a completed FLUSH survives SIGKILL. */
START_TEST(test_sigkill_keeps_flushed)
{
	struct bp_env e;
	enum { LEN = 32 * 1024, OBJS = 16 };
	static unsigned char data[OBJS][LEN];
	char name[32];

	bp_setup(&e, "bpkill");
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < OBJS; i++) {
			bp_fill(data[i], LEN, (unsigned)(round * OBJS + i));
			snprintf(name, sizeof(name), "obj_%02d", i);
			ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, name, 0, LEN,
					       0, data[i], NULL, 0),
					 0);
		}
		ck_assert_int_eq(
		    bp_io(&e, XSEG_OP_FLUSH, "obj_00", 0, 0, 0, NULL, NULL, 0),
		    0);
		ck_assert_int_eq(xtu_kill(e.peer, SIGKILL), 0);
		ck_assert_int_eq(xtu_wait(e.peer, BP_TIMEOUT), 128 + SIGKILL);
		/* a peer taking over the port of a dead one needs it
		 * reaped (xsegctl reap, or the launcher) */
		struct xseg_reap_stats rs;
		ck_assert_int_ge(xseg_reap(e.seg, &rs), 0);
		bp_start(&e, false);
		for (int i = 0; i < OBJS; i++) {
			snprintf(name, sizeof(name), "obj_%02d", i);
			bp_expect_data(&e, name, 0, data[i], LEN);
		}
	}
	bp_teardown(&e);
}
END_TEST

/* Flip a byte of a stored chunk on disk: its read fails with EIO, the
 * others are still served, and so is everything else. */
static void corrupt_chunk_is_eio(void)
{
	struct bp_env e;
	enum { LEN = 4096 };
	unsigned char a[LEN], b[LEN];
	char logpath[256];
	struct stat st;
	int fd;

	bp_setup(&e, "bpcorrupt");
	bp_fill(a, LEN, 7);
	bp_fill(b, LEN, 8);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "victim", 0, LEN, 0, a, NULL, 0), 0);
	bp_stop(&e);

	/* the store's log holds exactly one chunk record: flip the last
	 * byte of its data, which is the last byte of that record */
	snprintf(logpath, sizeof(logpath), "%s/store/log.000000", e.dir);
	fd = open(logpath, O_RDWR);
	ck_assert_msg(fd >= 0, "open %s: %s", logpath, strerror(errno));
	ck_assert_int_eq(fstat(fd, &st), 0);
	/* find the chunk's data: the record whose payload equals a */
	unsigned char *file = malloc((size_t)st.st_size);
	ck_assert_ptr_nonnull(file);
	ck_assert_int_eq(pread(fd, file, (size_t)st.st_size, 0), st.st_size);
	off_t at = -1;
	for (off_t o = 0; o + LEN <= st.st_size; o++)
		if (!memcmp(file + o, a, LEN)) {
			at = o;
			break;
		}
	ck_assert_msg(at >= 0, "chunk data not found in %s", logpath);
	unsigned char flipped = file[at + 100] ^ 0x01;
	ck_assert_int_eq(pwrite(fd, &flipped, 1, at + 100), 1);
	free(file);
	close(fd);

	bp_start(&e, false);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_READ, "victim", 0, LEN, 0, NULL, a, LEN), EIO);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "other", 0, LEN, 0, b, NULL, 0), 0);
	bp_expect_data(&e, "other", 0, b, LEN);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_READ, "victim", 0, LEN, 0, NULL, a, LEN), EIO);
	bp_teardown(&e);
}

START_TEST(test_corrupt_chunk_is_eio)
{
	corrupt_chunk_is_eio();
}
END_TEST

/* verification is the same when reads come from mappings of the log */
START_TEST(test_corrupt_chunk_is_eio_mmap)
{
	bp_mmap = true;
	corrupt_chunk_is_eio();
}
END_TEST

/*
 * The peer's background GC: an object overwritten over and over in a
 * store of 1 MiB segments. The peer removes segments (the gc file
 * appears and log.000000 goes) while it serves, and after a restart the
 * last contents read back.
 */
START_TEST(test_background_gc)
{
	enum { LEN = 64 * 1024 };
	static unsigned char buf[LEN], last[4][LEN];
	struct bp_env e;
	char p[300];
	int k;

	bp_gc = true;
	bp_setup(&e, "bpgc");
	for (k = 0; k < 80; k++) {
		bp_fill(buf, LEN, 100 + k);
		ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, "vol_gc",
				       (k % 4) * LEN, LEN, 0, buf, NULL, 0),
				 0);
		memcpy(last[k % 4], buf, LEN);
	}
	/* no timing assumption: wait (bounded, so that a hang fails) for
	 * the peer's GC thread to remove the first segment */
	snprintf(p, sizeof(p), "%s/store/log.000000", e.dir);
	for (k = 0; k < 600 && access(p, F_OK) == 0; k++) {
		bp_fill(buf, LEN, 1000 + k);
		ck_assert_int_eq(
		    bp_io(&e, XSEG_OP_WRITE, "vol_gc", 0, LEN, 0, buf, NULL, 0),
		    0);
		memcpy(last[0], buf, LEN);
		usleep(100000);
	}
	ck_assert_msg(access(p, F_OK) != 0, "GC did not run: %s",
		      tpr_slurp(e.log));
	for (k = 0; k < 4; k++)
		bp_expect_data(&e, "vol_gc", k * LEN, last[k], LEN);
	bp_stop(&e);
	snprintf(p, sizeof(p), "%s/store/gc", e.dir);
	ck_assert_int_eq(access(p, F_OK), 0);
	bp_start(&e, false);
	for (k = 0; k < 4; k++)
		bp_expect_data(&e, "vol_gc", k * LEN, last[k], LEN);
	bp_teardown(&e);
}
END_TEST

/*
 * Damage below the durable mark: the peer refuses to start (naming
 * --truncate-at-damage), and starts with it, cutting the log at the
 * damage: what came before reads back, what came after is gone.
 */
START_TEST(test_truncate_at_damage)
{
	enum { LEN = 4096 };
	static unsigned char keep[LEN], lost[LEN], zeros[LEN], file[1 << 16];
	struct bp_env e;
	char logpath[300], store[300];
	char *err = NULL;
	int fd;
	ssize_t n;
	off_t at = -1;

	bp_setup(&e, "bptrunc");
	bp_fill(keep, LEN, 21);
	bp_fill(lost, LEN, 22);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "keep", 0, LEN, XSEG_F_FUA, keep, NULL, 0),
	    0);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "lost", 0, LEN, XSEG_F_FUA, lost, NULL, 0),
	    0);
	/* killed: no checkpoint covers the records, the durable mark does */
	ck_assert_int_eq(xtu_kill(e.peer, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(e.peer, BP_TIMEOUT), 128 + SIGKILL);
	struct xseg_reap_stats rs;
	ck_assert_int_ge(xseg_reap(e.seg, &rs), 0);
	/* break the header of lost's chunk record (below the mark) */
	snprintf(logpath, sizeof(logpath), "%s/store/log.000000", e.dir);
	fd = open(logpath, O_RDWR);
	ck_assert_int_ge(fd, 0);
	n = pread(fd, file, sizeof(file), 0);
	ck_assert_int_gt(n, 0);
	for (off_t o = 64; o + LEN <= n; o += 16)
		if (!memcmp(file + o, lost, LEN)) {
			at = o - 64;
			break;
		}
	ck_assert_int_ge(at, 0);
	unsigned char bad = file[at + 12] ^ 0xff;
	ck_assert_int_eq(pwrite(fd, &bad, 1, at + 12), 1);
	close(fd);

	snprintf(store, sizeof(store), "%s/store", e.dir);
	const char *plain[] = {"blocker", "-g",	     e.segname, "-p",
			       "1",	  "--store", store,	NULL};
	ck_assert_int_ne(tpr_run(plain, NULL, &err, BP_TIMEOUT), 0);
	ck_assert_msg(strstr(err, "--truncate-at-damage"),
		      "no way out named: %s", err);
	free(err);

	bp_truncate = true;
	bp_start(&e, false);
	bp_expect_data(&e, "keep", 0, keep, LEN);
	bp_expect_data(&e, "lost", 0, zeros, LEN);
	char *lg = tpr_slurp(e.log);
	ck_assert_msg(strstr(lg, "truncating"), "the cut is not logged: %s",
		      lg);
	free(lg);
	bp_teardown(&e);
}
END_TEST

/* Start-up refusals: no --store, and a directory that holds no store
 * without --create. Both exit non-zero naming the reason. */
START_TEST(test_startup_errors)
{
	struct xseg *seg;
	const char *segname = tpr_segment("bpstart", &seg);
	char *err = NULL;
	const char *no_store[] = {"blocker", "-g", segname, "-p", "1", NULL};
	const char *empty[] = {"blocker", "-g",	     segname, "-p",
			       "1",	  "--store", "/tmp",  NULL};
	const char *bad_io[] = {"blocker", "-g",   segname, "-p",
				"1",	   "--io", "bogus", NULL};
	const char *bad_gc[] = {"blocker",	  "-g",	 segname, "-p", "1",
				"--gc-threshold", "101", NULL};
	/* a reserve below 1M, and no size at all */
	const char *bad_res[] = {"blocker", "-g",   segname,	 "-p",	 "1",
				 "--store", "/tmp", "--reserve", "512K", NULL};
	const char *bad_res2[] = {"blocker", "-g",   segname,	  "-p",	  "1",
				  "--store", "/tmp", "--reserve", "lots", NULL};

	ck_assert_int_ne(tpr_run(no_store, NULL, &err, BP_TIMEOUT), 0);
	ck_assert_msg(strstr(err, "--store"), "no reason given: %s", err);
	free(err);
	ck_assert_int_ne(tpr_run(empty, NULL, &err, BP_TIMEOUT), 0);
	ck_assert_msg(strstr(err, "/tmp"), "no reason given: %s", err);
	free(err);
	ck_assert_int_eq(tpr_run(bad_io, NULL, &err, BP_TIMEOUT), 2);
	ck_assert_msg(strstr(err, "bogus"), "no reason given: %s", err);
	free(err);
	ck_assert_int_eq(tpr_run(bad_gc, NULL, &err, BP_TIMEOUT), 2);
	ck_assert_msg(strstr(err, "101"), "no reason given: %s", err);
	free(err);
	ck_assert_int_eq(tpr_run(bad_res, NULL, &err, BP_TIMEOUT), 2);
	ck_assert_msg(strstr(err, "512K") && strstr(err, "--reserve"),
		      "no reason given: %s", err);
	free(err);
	ck_assert_int_eq(tpr_run(bad_res2, NULL, &err, BP_TIMEOUT), 2);
	ck_assert_msg(strstr(err, "lots"), "no reason given: %s", err);
	free(err);
	xseg_leave(seg);
}
END_TEST

static bool bp_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/*
 * --reserve 0: the peer warns that a full disk cannot be recovered
 * online, holds no DIR/reserve (an earlier one is given back), and
 * serves as always; blockerctl takes the same values (and shows the
 * reserve in stats) and refuses bad ones, changing nothing.
 */
/* ------------------------------------------------------------------ */
/* FUA writes and FLUSH complete after a shared fsync (the syncer)     */
/* ------------------------------------------------------------------ */

enum { FUA_N = 16, FUA_LEN = 4096 };

/* the peer's fsyncs: 'b' held, 'f' failed with EIO, 'p' run (see
 * blocker.c blocker_ctl_fdatasync); written whole by a rename */
static void bp_fsctl_set(struct bp_env *e, char c)
{
	char path[200], tmp[210];
	FILE *f;

	snprintf(path, sizeof(path), "%s/fsctl", e->dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputc(c, f), c);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, path), 0);
}

static void bp_submit(struct bp_env *e, uint16_t op, const char *target,
		      uint64_t size, uint32_t flags, const void *in)
{
	struct tpr_client *c = &e->client;
	struct xseg_request *req;
	size_t tlen = strlen(target);

	ck_assert_int_eq(xseg_get_request(c->seg, c->port, &req), 0);
	ck_assert_int_eq(xseg_prep_request(c->seg, req, (uint32_t)tlen,
					   size > 512 ? size : 512),
			 0);
	req->op = op;
	req->flags = flags;
	req->offset = 0;
	req->size = size;
	memcpy(xseg_request_target(req), target, tlen);
	if (in)
		memcpy(xseg_request_data(c->seg, req), in, size);
	ck_assert_int_eq(xseg_submit(c->seg, req, BP_PORT), 0);
}

/* the next reply: its errno, *serviced its serviced bytes */
static int bp_reply(struct bp_env *e, uint64_t *serviced)
{
	struct xseg_request *rep;
	int rc;

	ck_assert_int_eq(xseg_wait_reply(e->client.seg, e->client.port,
					 30ULL * 1000000000ULL, &rep),
			 0);
	rc = rep->error;
	*serviced = rep->serviced;
	xseg_put_request(e->client.seg, rep);
	return rc;
}

static uint64_t bp_stat(const struct xseg_port_stats *ps, const char *name)
{
	for (uint32_t i = 0; i < ps->nr; i++)
		if (!strcmp(ps->stats[i].name, name))
			return ps->stats[i].value;
	ck_abort_msg("no statistic %s", name);
	return 0;
}

static uint64_t bp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* the peer's statistics published after `after` (CLOCK_MONOTONIC ns) */
static void bp_stats_after(struct bp_env *e, uint64_t after,
			   struct xseg_port_stats *ps)
{
	for (int t = 0; t < 30000; t++) {
		if (!xseg_port_stats_read(e->seg, BP_PORT, ps) &&
		    ps->published_ns > after)
			return;
		usleep(1000);
	}
	ck_abort_msg("no statistics published");
}

/* wait (bounded) until the store counted `writes` writes: every FUA write
 * submitted was appended, with the fsyncs held. A peer whose workers wait
 * for their own fsync never gets there (at most --threads are appended). */
static void bp_wait_writes(struct bp_env *e, uint64_t writes)
{
	struct xseg_port_stats ps;

	for (int t = 0; t < 20000; t++) {
		if (!xseg_port_stats_read(e->seg, BP_PORT, &ps) &&
		    bp_stat(&ps, "writes") >= writes)
			return;
		usleep(1000);
	}
	ck_abort_msg("only %llu of %llu FUA writes appended while an fsync "
		     "was held",
		     (unsigned long long)bp_stat(&ps, "writes"),
		     (unsigned long long)writes);
}

/* submit FUA_N FUA writes of obj_NN with fsyncs held; return when all are
 * appended, none acknowledged */
static void bp_fua_held(struct bp_env *e, unsigned char (*data)[FUA_LEN],
			unsigned seed)
{
	struct xseg_request *rep;
	char name[32];

	bp_fsctl_set(e, 'b');
	for (int i = 0; i < FUA_N; i++) {
		bp_fill(data[i], FUA_LEN, seed + (unsigned)i);
		snprintf(name, sizeof(name), "obj_%02d", i);
		bp_submit(e, XSEG_OP_WRITE, name, FUA_LEN, XSEG_F_FUA, data[i]);
	}
	bp_wait_writes(e, FUA_N);
	/* no fsync has returned: no FUA write may be acknowledged */
	ck_assert_int_eq(xseg_receive(e->client.seg, e->client.port, &rep),
			 -EAGAIN);
}

/* Many FUA writes in flight: none is acknowledged before an fsync that
 * covers it, and two fsyncs cover all 16 (the one held, which covered
 * what was appended before it started, and one for the rest), with 2
 * worker threads. */
START_TEST(test_fua_writes_share_fsyncs)
{
	static unsigned char data[FUA_N][FUA_LEN];
	struct xseg_port_stats ps;
	struct bp_env e;
	uint64_t fs0, serviced, t;
	char name[32];

	bp_fsctl = true;
	bp_setup(&e, "bpfua");
	bp_stats_after(&e, 0, &ps);
	fs0 = bp_stat(&ps, "fsyncs");
	bp_fua_held(&e, data, 100);
	bp_fsctl_set(&e, 'p');
	for (int i = 0; i < FUA_N; i++) {
		ck_assert_int_eq(bp_reply(&e, &serviced), 0);
		ck_assert_uint_eq(serviced, FUA_LEN);
	}
	t = bp_now_ns();
	bp_stats_after(&e, t, &ps);
	ck_assert_uint_ge(bp_stat(&ps, "fsyncs") - fs0, 1);
	ck_assert_uint_le(bp_stat(&ps, "fsyncs") - fs0, 2);
	ck_assert_uint_eq(bp_stat(&ps, "sync_requests"), FUA_N);
	ck_assert_uint_le(bp_stat(&ps, "sync_flushes"), 2);
	/* a FLUSH and a zero-length FUA write go the same way */
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_FLUSH, "obj_00", 0, 0, 0, NULL, NULL, 0), 0);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "obj_00", 0, 0, XSEG_F_FUA, NULL, NULL, 0),
	    0);
	for (int i = 0; i < FUA_N; i++) {
		snprintf(name, sizeof(name), "obj_%02d", i);
		bp_expect_data(&e, name, 0, data[i], FUA_LEN);
	}
	bp_stop(&e);
	bp_teardown(&e);
}
END_TEST

/* An fsync that fails fails every FUA write and FLUSH waiting for it
 * (EIO, nothing serviced), and every later one: the sync error is
 * sticky. Reads are still served. */
START_TEST(test_fua_failed_fsync_fails_all)
{
	static unsigned char data[FUA_N][FUA_LEN];
	struct bp_env e;
	uint64_t serviced;

	bp_fsctl = true;
	bp_setup(&e, "bpfuaerr");
	bp_fua_held(&e, data, 200);
	bp_submit(&e, XSEG_OP_FLUSH, "obj_00", 0, 0, NULL);
	bp_fsctl_set(&e, 'f');
	for (int i = 0; i < FUA_N + 1; i++) {
		ck_assert_int_eq(bp_reply(&e, &serviced), EIO);
		ck_assert_uint_eq(serviced, 0);
	}
	bp_fsctl_set(&e, 'p');
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_FLUSH, "obj_00", 0, 0, 0, NULL, NULL, 0), EIO);
	ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, "obj_00", 0, FUA_LEN,
			       XSEG_F_FUA, data[0], NULL, 0),
			 EIO);
	bp_expect_data(&e, "obj_01", 0, data[1], FUA_LEN);
	/* the store cannot be closed durably: the peer says so in its exit
	 * status, not "stopped cleanly" (review8 R8-1) */
	ck_assert_int_eq(xtu_kill(e.peer, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(e.peer, BP_TIMEOUT), 1);
	bp_teardown(&e);
}
END_TEST

/* SIGTERM with FUA writes waiting for a held fsync: the drain times out,
 * fini completes them (after the fsync) before the port is released, the
 * peer exits cleanly and a restarted peer reads them back. */
START_TEST(test_shutdown_with_fua_pending)
{
	static unsigned char data[FUA_N][FUA_LEN];
	struct bp_env e;
	uint64_t serviced;
	char name[32], *log = NULL;

	bp_fsctl = true;
	bp_setup(&e, "bpfuastop");
	bp_fua_held(&e, data, 300);
	ck_assert_int_eq(xtu_kill(e.peer, SIGTERM), 0);
	for (int t = 0; t < 30000; t++) {
		free(log);
		log = tpr_slurp(e.log);
		if (log && strstr(log, "drain timeout"))
			break;
		usleep(1000);
	}
	ck_assert_msg(log && strstr(log, "drain timeout"), "%s",
		      log ? log : "(no log)");
	free(log);
	bp_fsctl_set(&e, 'p');
	for (int i = 0; i < FUA_N; i++) {
		ck_assert_int_eq(bp_reply(&e, &serviced), 0);
		ck_assert_uint_eq(serviced, FUA_LEN);
	}
	ck_assert_int_eq(xtu_wait(e.peer, BP_TIMEOUT), 0);
	ck_assert_int_eq(tpr_wait_port_free(e.seg, BP_PORT, BP_TIMEOUT), 0);
	bp_start(&e, false);
	for (int i = 0; i < FUA_N; i++) {
		snprintf(name, sizeof(name), "obj_%02d", i);
		bp_expect_data(&e, name, 0, data[i], FUA_LEN);
	}
	bp_teardown(&e);
}
END_TEST

/* One client writing with FUA at iodepth 1: each write is its own group
 * and the syncer never waits for a second client (review8 R8-2: the
 * clients to gather for were counted after the last flush's clients were
 * released, so one already back with its next write counted twice and a
 * lone writer waited up to 1 ms on a third to two thirds of its writes;
 * how often depended on when the syncer thread lost the CPU). */
START_TEST(test_lone_fua_writer_never_gathers)
{
	enum { LONE_N = 64 };
	static unsigned char data[FUA_LEN];
	struct xseg_port_stats ps;
	struct bp_env e;
	uint64_t t;

	bp_fsctl = true;
	bp_setup(&e, "bpfualone");
	bp_fsctl_set(&e, 'p');
	for (int i = 0; i < LONE_N; i++) {
		bp_fill(data, FUA_LEN, 400 + (unsigned)i);
		ck_assert_int_eq(bp_io(&e, XSEG_OP_WRITE, "obj_lone", 0,
				       FUA_LEN, XSEG_F_FUA, data, NULL, 0),
				 0);
	}
	t = bp_now_ns();
	bp_stats_after(&e, t, &ps);
	ck_assert_uint_eq(bp_stat(&ps, "sync_requests"), LONE_N);
	ck_assert_uint_eq(bp_stat(&ps, "sync_flushes"), LONE_N);
	ck_assert_uint_eq(bp_stat(&ps, "sync_gathers"), 0);
	/* the framework's spin counters come after the blocker's own
	 * statistics: the table has room for all of them */
	ck_assert_uint_ge(bp_stat(&ps, "spin_waits"), 1);
	bp_expect_data(&e, "obj_lone", 0, data, FUA_LEN);
	bp_stop(&e);
	bp_teardown(&e);
}
END_TEST

START_TEST(test_reserve_option)
{
	struct bp_env e;
	char path[300], *out = NULL, *err = NULL;
	unsigned char a[4096], b[4096];

	/* (the port is bound before the store opens: a request's reply
	 * says the peer is past its open) */
	bp_setup(&e, "bpres");
	snprintf(path, sizeof(path), "%s/store/reserve", e.dir);
	bp_fill(a, sizeof(a), 9);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "obj", 0, sizeof(a), 0, a, NULL, 0), 0);
	ck_assert(bp_exists(path)); /* the default: auto */
	bp_stop(&e);
	bp_reserve = "0";
	bp_start(&e, false);
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_READ, "obj", 0, sizeof(b), 0, NULL, b, sizeof(b)),
	    0);
	ck_assert(!memcmp(a, b, sizeof(a)));
	ck_assert_int_eq(
	    bp_io(&e, XSEG_OP_WRITE, "obj2", 0, sizeof(a), 0, a, NULL, 0), 0);
	char *lg = tpr_slurp(e.log);
	ck_assert_msg(strstr(lg, "--reserve 0: no space reserve"),
		      "no warning: %s", lg);
	free(lg);
	ck_assert(!bp_exists(path));
	bp_stop(&e);

	/* blockerctl: stats shows a fixed size, and refuses bad values */
	char store[300];
	snprintf(store, sizeof(store), "%s/store", e.dir);
	const char *st2m[] = {"blockerctl", "stats", "--reserve",
			      "2M",	    store,   NULL};
	const char *st0[] = {"blockerctl", "stats", "--reserve=0", store, NULL};
	const char *bad[] = {"blockerctl", "stats", "--reserve",
			     "100",	   store,   NULL};
	const char *bad_gc[] = {"blockerctl", "gc",  "--reserve",
				"-1",	      store, NULL};
	ck_assert_int_eq(tpr_run(st2m, &out, &err, BP_TIMEOUT), 0);
	ck_assert_msg(strstr(out, "\"reserve_bytes\": 2097152, "
				  "\"reserve_target\": 2097152"),
		      "stats: %s", out);
	free(out);
	free(err);
	ck_assert(bp_exists(path));
	ck_assert_int_eq(tpr_run(st0, &out, &err, BP_TIMEOUT), 0);
	ck_assert_msg(strstr(out, "\"reserve_target\": 0"), "stats: %s", out);
	ck_assert_msg(strstr(err, "no space reserve"), "no warning: %s", err);
	free(out);
	free(err);
	ck_assert(!bp_exists(path));
	ck_assert_int_eq(tpr_run(bad, &out, &err, BP_TIMEOUT), 2);
	ck_assert_msg(strstr(err, "bad --reserve '100'"), "stderr: %s", err);
	ck_assert_str_eq(out, "");
	free(out);
	free(err);
	ck_assert_int_eq(tpr_run(bad_gc, &out, &err, BP_TIMEOUT), 2);
	ck_assert_msg(strstr(err, "bad --reserve '-1'"), "stderr: %s", err);
	free(out);
	free(err);
	/* nothing was opened: still no reserve file */
	ck_assert(!bp_exists(path));
	bp_reserve = NULL;
	bp_teardown(&e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_peer");
	TCase *tc = tcase_create("peer");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_roundtrip_and_restart);
	tcase_add_test(tc, test_roundtrip_mmap_reads);
	tcase_add_test(tc, test_object_ops);
	tcase_add_test(tc, test_bad_requests_refused);
	tcase_add_test(tc, test_sigkill_keeps_flushed);
	tcase_add_test(tc, test_corrupt_chunk_is_eio);
	tcase_add_test(tc, test_corrupt_chunk_is_eio_mmap);
	tcase_add_test(tc, test_startup_errors);
	tcase_add_test(tc, test_reserve_option);
	tcase_add_test(tc, test_background_gc);
	tcase_add_test(tc, test_truncate_at_damage);
	tcase_add_test(tc, test_fua_writes_share_fsyncs);
	tcase_add_test(tc, test_fua_failed_fsync_fails_all);
	tcase_add_test(tc, test_shutdown_with_fua_pending);
	tcase_add_test(tc, test_lone_fua_writer_never_gathers);
	suite_add_tcase(s, tc);
	xtu_init();
	return xtu_run_suite(s);
}
