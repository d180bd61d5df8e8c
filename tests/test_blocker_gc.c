/* SPDX-License-Identifier: MIT */
/*
 * Garbage collection of the blocker store (store.h, blocker_gc; gc.c):
 * overwrite and delete workloads reclaim space and read back exactly (a
 * model of every object), the offline check stays clean, the dedup race
 * with a victim segment (a write between the mark and the removal, made
 * deterministic by the GC test hook), ENOSPC/EIO and a corrupt chunk while
 * copying (victim kept, nothing lost), a kill at each GC step, segments
 * removed by GC vs lost ones, bad input, and the background GC thread.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "store_int.h"
#include "test_blocker_util.h"
#include "test_blocker_files.h"

#define CS	4096
#define SEG	(1u << 20)
#define NOBJ	8
#define OBJ_MAX (256 * 1024)

static char dir[256];
static struct tb_log logbuf;
/* index partial-score bits (tests that set it force collisions) */
static unsigned partial_bits = BLOCKER_DEFAULT_PARTIAL_BITS;

/* the expected content of every object */
struct model {
	bool exists[NOBJ];
	uint64_t size[NOBJ];
	uint8_t data[NOBJ][OBJ_MAX];
};
static struct model *m;

static void opts(struct blocker_opts *o)
{
	tb_opts_manual(o, CS, SEG, &logbuf);
	o->partial_bits = partial_bits;
}

static struct blocker_store *reopen_with(struct blocker_opts *o)
{
	struct blocker_store *s = NULL;

	ck_assert_int_eq(blocker_open(dir, o, &s), 0);
	return s;
}

static struct blocker_store *reopen(void)
{
	struct blocker_opts o;

	opts(&o);
	return reopen_with(&o);
}

static struct blocker_store *mk(void)
{
	struct blocker_opts o;

	ttmp_mkdtemp(dir, sizeof(dir), "store");
	opts(&o);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	memset(m, 0, sizeof(*m));
	memset(&logbuf, 0, sizeof(logbuf));
	return reopen();
}

static const char *oname(int i)
{
	static char n[NOBJ][16];

	snprintf(n[i], sizeof(n[i]), "obj.%04d", i);
	return n[i];
}

/* write [off, off+len) of object i with content derived from seed */
static void mwrite(struct blocker_store *s, int i, uint64_t off, size_t len,
		   uint64_t seed)
{
	uint8_t *buf = malloc(len);

	tb_fill(buf, len, seed, off);
	ck_assert_int_eq(
	    blocker_write(s, oname(i), strlen(oname(i)), off, len, buf, 0), 0);
	memcpy(m->data[i] + off, buf, len);
	if (!m->exists[i]) {
		m->exists[i] = true;
		m->size[i] = 0;
	}
	if (off + len > m->size[i])
		m->size[i] = off + len;
	free(buf);
}

static void mdelete(struct blocker_store *s, int i)
{
	ck_assert_int_eq(blocker_delete(s, oname(i), strlen(oname(i))), 0);
	m->exists[i] = false;
	memset(m->data[i], 0, OBJ_MAX);
	m->size[i] = 0;
}

static void verify_all(struct blocker_store *s)
{
	uint8_t *buf = malloc(OBJ_MAX);

	for (int i = 0; i < NOBJ; i++) {
		uint64_t size = 0;
		int r = blocker_info(s, oname(i), strlen(oname(i)), &size);
		if (!m->exists[i]) {
			ck_assert_int_eq(r, -ENOENT);
			continue;
		}
		ck_assert_int_eq(r, 0);
		ck_assert_uint_eq(size, m->size[i]);
		ck_assert_int_eq(
		    blocker_read(s, oname(i), strlen(oname(i)), 0, size, buf),
		    0);
		ck_assert_msg(!memcmp(buf, m->data[i], size),
			      "object %d differs from the model", i);
	}
	free(buf);
}

static void check_clean(void)
{
	uint64_t problems = 99;

	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(
	    blocker_check(dir, NULL, tb_log_fn_line, &logbuf, &problems), 0);
	ck_assert_msg(problems == 0, "check: %s", logbuf.text);
}

/* bytes of all log segment files */
static uint64_t log_file_bytes(int *nfiles)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t sum = 0;
	char p[512];

	*nfiles = 0;
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		struct stat st;
		if (strncmp(de->d_name, "log.", 4))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		/* a background pass may remove it after readdir */
		if (stat(p, &st) < 0) {
			ck_assert_int_eq(errno, ENOENT);
			continue;
		}
		sum += st.st_size;
		(*nfiles)++;
	}
	closedir(d);
	return sum;
}

static void fd_write_garbage(const char *p)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "garbage, not a gc file......", 28), 28);
	close(fd);
}

static bool seg_exists(uint32_t seg)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/log.%06u", dir, seg);
	return access(p, F_OK) == 0;
}

/* Overwrite-heavy: every object rewritten in random 4-32 KiB pieces. */
static void overwrite_workload(struct blocker_store *s, uint64_t *rng,
			       int rounds)
{
	for (int k = 0; k < rounds; k++) {
		int i = tb_rnd(rng) % NOBJ;
		uint64_t off = (tb_rnd(rng) % (OBJ_MAX / CS)) * CS;
		size_t len = (1 + tb_rnd(rng) % 8) * CS;
		if (off + len > OBJ_MAX)
			len = OBJ_MAX - off;
		mwrite(s, i, off, len, tb_rnd(rng));
	}
}

static void gc_overwrite(void)
{
	struct blocker_store *s = mk();
	struct blocker_gc_report rep;
	struct blocker_stats st;
	uint64_t rng = 12345, before, after;
	int nb, na;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 1000 + i);
	overwrite_workload(s, &rng, 600);
	ck_assert_int_eq(blocker_flush(s), 0);
	before = log_file_bytes(&nb);
	ck_assert_int_eq(blocker_gc_estimate(s, NULL, NULL), 0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_uint_gt(st.reclaimable_bytes, 0);
	ck_assert_uint_le(st.reclaimable_bytes, st.closed_bytes);

	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_gt(rep.segments_removed, 0);
	ck_assert_uint_gt(rep.bytes_reclaimed, rep.bytes_copied);
	after = log_file_bytes(&na);
	ck_assert_uint_lt(after, before);
	ck_assert_int_lt(na, nb);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_uint_eq(st.gc_segments_removed, rep.segments_removed);
	ck_assert_uint_eq(st.gc_bytes_copied, rep.bytes_copied);
	verify_all(s);
	/* the store keeps working after GC, and a second pass too */
	overwrite_workload(s, &rng, 200);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}

START_TEST(test_gc_overwrite)
{
	gc_overwrite();
}
END_TEST

/* 2-bit partial scores: every lookup has many candidates */
START_TEST(test_gc_overwrite_collisions)
{
	partial_bits = 2;
	gc_overwrite();
}
END_TEST

/* a failed fsync of the copies: degraded, victims kept, nothing lost */
START_TEST(test_gc_fsync_error)
{
	struct blocker_io_fault f;
	struct blocker_store *s;
	struct blocker_opts o;
	struct blocker_gc_report rep;
	uint64_t rng = 33;
	int nb, na;

	s = mk();
	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 6500 + i);
	overwrite_workload(s, &rng, 500);
	ck_assert_int_eq(blocker_close(s), 0);
	log_file_bytes(&nb);
	opts(&o);
	blocker_io_fault_init(&f, &blocker_io_sync, NULL);
	o.io = &blocker_io_fault_ops;
	o.io_ctx = &f;
	s = reopen_with(&o);
	blocker_io_fault_arm(&f, INT64_MAX / 2, 0, EIO);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	ck_assert_uint_eq(rep.segments_removed, 0);
	for (uint32_t k = 0; k < (uint32_t)nb; k++)
		ck_assert(seg_exists(k));
	verify_all(s);
	blocker_close(s);
	/* the failed fsync was recorded (DIR/sync_error, review9 R9-12):
	 * the next open is degraded, reads served, until it is cleared */
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_flush(s), -EIO);
	blocker_close(s);
	ck_assert_int_eq(blocker_clear_sync_error(dir, NULL), 0);
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	log_file_bytes(&na);
	ck_assert_int_ge(na, nb);
	check_clean();
}
END_TEST

START_TEST(test_gc_delete_all)
{
	struct blocker_store *s = mk();
	struct blocker_gc_report rep;
	uint64_t rng = 7;
	int n;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 2000 + i);
	overwrite_workload(s, &rng, 200);
	for (int i = 0; i < NOBJ; i++)
		mdelete(s, i);
	ck_assert_uint_gt(log_file_bytes(&n), 2 * SEG);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_eq(rep.bytes_copied, 0);
	/* what is left: the segment being appended to */
	ck_assert_uint_le(log_file_bytes(&n), SEG);
	ck_assert_int_eq(n, 1);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	s = reopen();
	verify_all(s);
	mwrite(s, 3, 0, 8192, 77);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
}
END_TEST

/* min_dead_pct and max_segments choose the victims */
START_TEST(test_gc_victim_choice)
{
	struct blocker_store *s = mk();
	struct blocker_gc_opts g;
	struct blocker_gc_report rep;
	uint64_t rng = 99;
	int n0, n1;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 3000 + i);
	overwrite_workload(s, &rng, 400);
	log_file_bytes(&n0);
	blocker_gc_opts_init(&g);
	g.min_dead_pct = 100; /* only segments that are all dead */
	ck_assert_int_eq(blocker_gc(s, &g, &rep), 0);
	ck_assert_uint_eq(rep.bytes_copied, 0);
	g.min_dead_pct = 0;
	g.max_segments = 1;
	ck_assert_int_eq(blocker_gc(s, &g, &rep), 0);
	ck_assert_uint_eq(rep.segments_removed, 1);
	log_file_bytes(&n1);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
}
END_TEST

/*
 * The dedup race: chunk X lives in a closed segment only for an object
 * that is then overwritten, so the mark finds X dead. Between the mark and
 * the victim's removal (the hook), another object is written with X's
 * content. It must not dedup against the victim's copy of X (which the
 * pass removes): it is stored afresh and reads back after GC and reopen.
 */
struct race {
	struct blocker_store *s;
	int point, fired;
	uint64_t seed;
	uint64_t writes_ok;
};

static void race_hook(void *arg, int point)
{
	struct race *r = arg;

	if (point != r->point)
		return;
	r->fired++;
	mwrite(r->s, 1, 0, 4 * CS, r->seed);
	r->writes_ok++;
}

static void dedup_race(int point)
{
	struct blocker_store *s = mk();
	struct blocker_gc_report rep;
	struct race rc = {.s = s, .point = point, .seed = 4242};
	uint64_t rng = 5;

	/* object 0 holds X (seed 4242) in segment 0, then loses it */
	mwrite(s, 0, 0, 4 * CS, 4242);
	for (int k = 0; k < 400; k++)
		mwrite(s, 2 + k % 6, (k % 64) * CS, CS, 50000 + k);
	mwrite(s, 0, 0, 4 * CS, 4343);
	overwrite_workload(s, &rng, 100);
	s->gc_hook = race_hook;
	s->gc_hook_arg = &rc;
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_int_eq(rc.fired, 1);
	ck_assert_uint_gt(rep.segments_removed, 0);
	ck_assert(!seg_exists(0));
	s->gc_hook = NULL;
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}

START_TEST(test_gc_dedup_race_marked)
{
	dedup_race(1); /* GC_HOOK_MARKED */
}
END_TEST

START_TEST(test_gc_dedup_race_copied)
{
	dedup_race(2); /* GC_HOOK_COPIED */
}
END_TEST

START_TEST(test_gc_dedup_race_repointed)
{
	dedup_race(3); /* GC_HOOK_REPOINTED */
}
END_TEST

/*
 * A damaged duplicate outside the victims (review R4-4): during a pass a
 * write stores a victim's chunk afresh, and that fresh copy then rots.
 * The pass must not take it as "a copy elsewhere" (its payload is
 * hashed): it copies the victim's intact record, so both objects read
 * back (a read tries the next copy when one fails verification).
 */
static void rot_fresh_copy(void *arg, int point)
{
	struct race *rc = arg;
	struct blocker_store *s = rc->s;
	uint8_t want[64], *file;
	char p[512];
	struct stat st;
	int fd;

	if (point != 1)
		return;
	rc->fired++;
	mwrite(s, 1, 0, 4 * CS, rc->seed); /* stored afresh at the tail */
	ck_assert_int_eq(blocker_flush(s), 0);
	tb_fill(want, sizeof(want), rc->seed, 0);
	snprintf(p, sizeof(p), "%s/log.%06llu", dir,
		 (unsigned long long)(s->tail / SEG));
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	file = malloc(st.st_size);
	ck_assert_int_eq(pread(fd, file, st.st_size, 0), st.st_size);
	off_t at = -1;
	for (off_t o = BREC_HDR_SIZE; o + CS <= st.st_size; o += BREC_ALIGN)
		if (!memcmp(file + o, want, sizeof(want)))
			at = o;
	ck_assert_int_ge(at, 0);
	uint8_t b = file[at + 100] ^ 0x5a;
	ck_assert_int_eq(pwrite(fd, &b, 1, at + 100), 1);
	free(file);
	close(fd);
}

START_TEST(test_gc_damaged_duplicate)
{
	struct blocker_store *s = mk();
	struct blocker_gc_report rep;
	struct race rc = {.s = s, .seed = 4242};
	uint64_t rng = 6, problems = 0;

	mwrite(s, 0, 0, 4 * CS, 4242);
	for (int k = 0; k < 400; k++)
		mwrite(s, 2 + k % 6, (k % 64) * CS, CS, 60000 + k);
	overwrite_workload(s, &rng, 100);
	s->gc_hook = rot_fresh_copy;
	s->gc_hook_arg = &rc;
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	s->gc_hook = NULL;
	ck_assert_int_eq(rc.fired, 1);
	ck_assert(!seg_exists(0));
	ck_assert_uint_gt(rep.bytes_copied, 0);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	/* the rotten copy is still there, and reported */
	ck_assert_int_eq(blocker_check(dir, NULL, NULL, NULL, &problems), 0);
	ck_assert_uint_gt(problems, 0);
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/*
 * A reader that copied an object's scores before an overwrite made a
 * chunk dead must still read it: a pass that starts meanwhile waits for
 * the reader (grace period) before it removes anything. The reader is
 * held inside blocker_read (test hook) while a pass runs in another
 * thread; only if the pass got through while the reader was held (the
 * bug) would its read find the chunk gone. Waiting for that is bounded;
 * with the grace period the pass cannot finish, so the bound only limits
 * how long the test looks.
 */
struct held_read {
	struct blocker_store *s;
	int held, release; /* __atomic */
	int r;
	uint8_t buf[4 * CS];
};

static void hold_reader(void *arg)
{
	struct held_read *h = arg;

	__atomic_store_n(&h->held, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&h->release, __ATOMIC_ACQUIRE))
		usleep(1000);
}

static void *reader_thread(void *arg)
{
	struct held_read *h = arg;

	h->r =
	    blocker_read(h->s, oname(0), strlen(oname(0)), 0, 4 * CS, h->buf);
	return NULL;
}

struct gc_run {
	struct blocker_store *s;
	int r, finished; /* __atomic */
	struct blocker_gc_report rep;
};

static void *gc_thread(void *arg)
{
	struct gc_run *g = arg;

	g->r = blocker_gc(g->s, NULL, &g->rep);
	__atomic_store_n(&g->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

START_TEST(test_gc_waits_for_readers)
{
	struct blocker_store *s = mk();
	struct held_read h = {.s = s};
	struct gc_run g = {.s = s};
	uint8_t old[4 * CS];
	pthread_t rt, gt;

	/* object 0's first chunks live in log.000000 only */
	mwrite(s, 0, 0, 4 * CS, 31337);
	memcpy(old, m->data[0], 4 * CS);
	for (int k = 0; k < 400; k++)
		mwrite(s, 1 + k % 7, (k % 64) * CS, CS, 70000 + k);
	__atomic_store_n(&s->read_hook_arg, (void *)&h, __ATOMIC_RELAXED);
	__atomic_store_n(&s->read_hook, hold_reader, __ATOMIC_RELEASE);
	pthread_create(&rt, NULL, reader_thread, &h);
	while (!__atomic_load_n(&h.held, __ATOMIC_ACQUIRE))
		usleep(1000);
	__atomic_store_n(&s->read_hook, NULL, __ATOMIC_RELEASE);
	/* the reader holds the old scores; now they die */
	mwrite(s, 0, 0, 4 * CS, 31338);
	pthread_create(&gt, NULL, gc_thread, &g);
	for (int k = 0;
	     k < 500 && !__atomic_load_n(&g.finished, __ATOMIC_ACQUIRE); k++)
		usleep(1000);
	__atomic_store_n(&h.release, 1, __ATOMIC_RELEASE);
	pthread_join(rt, NULL);
	pthread_join(gt, NULL);
	ck_assert_int_eq(h.r, 0);
	ck_assert(!memcmp(h.buf, old, sizeof(old)));
	ck_assert_int_eq(g.r, 0);
	ck_assert_uint_gt(g.rep.segments_removed, 0);
	ck_assert(!seg_exists(0));
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
}
END_TEST

/* ENOSPC while copying: the victim stays, the store is not degraded */
START_TEST(test_gc_enospc)
{
	struct blocker_io_fault f;
	struct blocker_store *s;
	struct blocker_opts o;
	struct blocker_gc_report rep;
	struct blocker_stats st;
	uint64_t rng = 31, before, after;
	int nb, na;

	s = mk();
	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 5000 + i);
	overwrite_workload(s, &rng, 500);
	ck_assert_int_eq(blocker_close(s), 0);
	before = log_file_bytes(&nb);

	opts(&o);
	blocker_io_fault_init(&f, &blocker_io_sync, NULL);
	o.io = &blocker_io_fault_ops;
	o.io_ctx = &f;
	s = reopen_with(&o);
	blocker_io_fault_arm(&f, 3 * (CS + 64) + 100, ENOSPC, 0);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -ENOSPC);
	ck_assert_uint_eq(rep.segments_removed, 0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	ck_assert_uint_eq(st.gc_failures, 1);
	after = log_file_bytes(&na);
	ck_assert_int_eq(na, nb);
	/* the failed copy's bytes past the tail were taken back */
	ck_assert_uint_le(after, before + 3 * (CS + 64) + 100);
	for (uint32_t k = 0; k < (uint32_t)nb; k++)
		ck_assert(seg_exists(k));
	verify_all(s);
	/* space again: GC completes, and writes went on meanwhile */
	__atomic_store_n(&f.armed, 0, __ATOMIC_RELEASE);
	mwrite(s, 2, 0, 2 * CS, 777);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_gt(rep.segments_removed, 0);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/*
 * ENOSPC on the first write into a segment the copy had just created
 * (review R4-2): the switch is taken back, so a small record acknowledged
 * afterwards lands in the previous segment, and a crash then reopens
 * cleanly (no "segment ends early" refusal).
 */
START_TEST(test_gc_enospc_new_segment)
{
	struct blocker_store *s = mk();
	uint64_t rng = 34;
	int status;
	pid_t pid;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 5500 + i);
	overwrite_workload(s, &rng, 500);
	ck_assert_int_eq(blocker_close(s), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct blocker_io_fault f;
		struct blocker_opts o;
		struct blocker_store *c;
		uint8_t *buf = malloc(OBJ_MAX);
		opts(&o);
		blocker_io_fault_init(&f, &blocker_io_sync, NULL);
		o.io = &blocker_io_fault_ops;
		o.io_ctx = &f;
		if (blocker_open(dir, &o, &c))
			_exit(10);
		uint64_t tail = c->tail, seg = tail / SEG;
		uint64_t fit = (SEG - tail % SEG) / (CS + BREC_HDR_SIZE);
		/* the copies fill this segment; the next write fails */
		blocker_io_fault_arm(&f, fit * (CS + BREC_HDR_SIZE), ENOSPC, 0);
		if (blocker_gc(c, NULL, NULL) != -ENOSPC)
			_exit(11);
		if (c->tail / SEG != seg || seg_exists(seg + 1))
			_exit(12);
		__atomic_store_n(&f.armed, 0, __ATOMIC_RELEASE);
		/* stored content again: a map record only, made durable */
		memcpy(buf, m->data[0], 2 * CS);
		if (blocker_write(c, oname(0), strlen(oname(0)), 0, 2 * CS, buf,
				  BLOCKER_FUA))
			_exit(13);
		_exit(0); /* a crash: no close */
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child status %d", status);
	memset(&logbuf, 0, sizeof(logbuf));
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
}
END_TEST

/* EIO while copying: the store degrades (as for any write error), the
 * victim stays, reads go on, and a reopen has everything */
START_TEST(test_gc_eio)
{
	struct blocker_io_fault f;
	struct blocker_store *s;
	struct blocker_opts o;
	struct blocker_gc_report rep;
	struct blocker_stats st;
	uint64_t rng = 32;
	int nb, na;

	s = mk();
	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 6000 + i);
	overwrite_workload(s, &rng, 500);
	ck_assert_int_eq(blocker_flush(s), 0);
	ck_assert_int_eq(blocker_close(s), 0);
	log_file_bytes(&nb);
	opts(&o);
	blocker_io_fault_init(&f, &blocker_io_sync, NULL);
	o.io = &blocker_io_fault_ops;
	o.io_ctx = &f;
	s = reopen_with(&o);
	blocker_io_fault_arm(&f, 5 * (CS + 64) + 10, EIO, 0);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, EIO);
	log_file_bytes(&na);
	ck_assert_int_eq(na, nb);
	verify_all(s);
	/* degraded: GC refuses with the degraded errno */
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	blocker_close(s);
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
}
END_TEST

/* a backend whose reads of log.000000 fail with EIO (a bad sector) */
static volatile int seg0_unreadable;

static bool fd_is_seg0(int fd)
{
	char l[64], t[512];
	ssize_t n;

	snprintf(l, sizeof(l), "/proc/self/fd/%d", fd);
	n = readlink(l, t, sizeof(t) - 1);
	if (n < 0)
		return false;
	t[n] = 0;
	return strstr(t, "/log.000000") != NULL;
}

static ssize_t bad0_preadv(void *ctx, int fd, const struct iovec *iov, int cnt,
			   uint64_t off)
{
	if (seg0_unreadable && fd_is_seg0(fd))
		return -EIO;
	return blocker_io_sync.preadv(ctx, fd, iov, cnt, off);
}

static ssize_t bad0_pwritev(void *ctx, int fd, const struct iovec *iov, int cnt,
			    uint64_t off)
{
	return blocker_io_sync.pwritev(ctx, fd, iov, cnt, off);
}

static int bad0_fdatasync(void *ctx, int fd)
{
	return blocker_io_sync.fdatasync(ctx, fd);
}

static const struct blocker_io_ops bad0_io = {
    "bad-seg0", bad0_preadv, bad0_pwritev, bad0_fdatasync, NULL};

/*
 * review6 F2: the lowest victim cannot be read (EIO). It stays (marked,
 * not chosen again while open), and the pass still collects the other
 * victims, instead of every pass stopping at it.
 */
START_TEST(test_gc_unreadable_victim)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_gc_report rep;
	uint8_t *buf = calloc(240, CS);

	ck_assert_ptr_nonnull(buf);
	ttmp_mkdtemp(dir, sizeof(dir), "store");
	memset(&logbuf, 0, sizeof(logbuf));
	opts(&o);
	o.mmap_reads = false; /* the backend injects the errors */
	o.io = &bad0_io;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	/* 4 objects of 240 chunks: about a segment each */
	for (int i = 0; i < 4; i++) {
		char nm[8];
		snprintf(nm, sizeof(nm), "o%d", i);
		tb_fill(buf, 240 * CS, 10 + i, 0);
		ck_assert_int_eq(blocker_write(s, nm, 2, 0, 240 * CS, buf, 0),
				 0);
	}
	/* o0..o2 keep their first chunk; the rest becomes dead */
	memset(buf, 0, 240 * CS);
	for (int i = 0; i < 3; i++) {
		char nm[8];
		snprintf(nm, sizeof(nm), "o%d", i);
		ck_assert_int_eq(blocker_write(s, nm, 2, CS, 239 * CS, buf, 0),
				 0);
	}
	ck_assert_int_eq(blocker_flush(s), 0);
	seg0_unreadable = 1;
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	ck_assert_uint_ge(rep.segments_removed, 2);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "log.000000: cannot read"));
	ck_assert(s->segs[0].gc_bad);
	ck_assert_int_ge(s->segs[0].fd, 0);
	/* the next pass does not stop at it either (it is not chosen) */
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_int_eq(blocker_degraded(s), 0);
	seg0_unreadable = 0;
	/* everything still reads */
	for (int i = 1; i < 4; i++) {
		char nm[8];
		uint8_t want[CS];
		snprintf(nm, sizeof(nm), "o%d", i);
		ck_assert_int_eq(blocker_read(s, nm, 2, 0, CS, buf), 0);
		tb_fill(want, CS, 10 + i, 0);
		ck_assert(!memcmp(buf, want, CS));
	}
	free(buf);
	ck_assert_int_eq(blocker_close(s), 0);
	ttmp_rmtree(dir);
}
END_TEST

/* A live chunk whose bytes rotted in a victim is never copied as good. */
START_TEST(test_gc_corrupt_live_chunk)
{
	struct blocker_store *s = mk();
	struct blocker_gc_report rep;
	struct blocker_stats st;
	uint8_t b;
	char p[512];
	int fd, n0, n1;

	mwrite(s, 0, 0, CS, 8000); /* first record of log.000000 */
	for (int k = 0; k < 1200; k++)
		mwrite(s, 1 + k % 7, (k % 64) * CS, CS, 80000 + k);
	ck_assert_int_eq(blocker_close(s), 0);
	snprintf(p, sizeof(p), "%s/log.000000", dir);
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &b, 1, BREC_HDR_SIZE + 100), 1);
	b ^= 0x55;
	ck_assert_int_eq(pwrite(fd, &b, 1, BREC_HDR_SIZE + 100), 1);
	close(fd);
	log_file_bytes(&n0);
	memset(&logbuf, 0, sizeof(logbuf));
	s = reopen();
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	ck_assert_ptr_nonnull(
	    strstr(logbuf.text, "fails verification during GC"));
	ck_assert(seg_exists(0));
	/* the other victims were reclaimed all the same (review R4-5) */
	ck_assert_uint_gt(rep.segments_removed, 0);
	log_file_bytes(&n1);
	ck_assert_int_lt(n1, n0);
	/* and the bad segment is not chosen again while open */
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert(seg_exists(0));
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	/* the damaged chunk still fails its read; nothing else changed */
	uint8_t *buf = malloc(CS);
	ck_assert_int_eq(
	    blocker_read(s, oname(0), strlen(oname(0)), 0, CS, buf), -EIO);
	free(buf);
	m->exists[0] = false;
	for (int i = 1; i < NOBJ; i++) {
		uint8_t *ob = malloc(OBJ_MAX);
		ck_assert_int_eq(blocker_read(s, oname(i), strlen(oname(i)), 0,
					      m->size[i], ob),
				 0);
		ck_assert(!memcmp(ob, m->data[i], m->size[i]));
		free(ob);
	}
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/*
 * A chunk record whose length is not the store's chunk size (a super
 * restored from another store, docs/blocker.md) is a bad record to GC, as
 * to recovery and check: the segment is kept and the pass fails, instead
 * of copying the record's whole payload into a one-chunk slot of the copy
 * buffer (past its end at the batch's last slot; safety21gc F2).
 */
START_TEST(test_gc_chunk_of_another_size)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_gc_report rep;
	uint8_t *buf = malloc(2 * CS);
	int dirfd;

	ttmp_mkdtemp(dir, sizeof(dir), "store");
	memset(&logbuf, 0, sizeof(logbuf));
	tb_opts_manual(&o, 2 * CS, SEG, &logbuf);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	s = reopen_with(&o);
	/* log.000000: object 0's chunk (live), then overwrites of object 1
	 * until the log is in its third segment (log.000000 mostly dead) */
	tb_fill(buf, 2 * CS, 9000, 0);
	ck_assert_int_eq(
	    blocker_write(s, oname(0), strlen(oname(0)), 0, 2 * CS, buf, 0), 0);
	for (int k = 0; k < 300; k++) {
		tb_fill(buf, 2 * CS, 90000 + k, 0);
		ck_assert_int_eq(blocker_write(s, oname(1), strlen(oname(1)), 0,
					       2 * CS, buf, 0),
				 0);
	}
	ck_assert(seg_exists(2));
	ck_assert_int_eq(blocker_close(s), 0); /* checkpoint at the end */
	dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(dirfd, 0);
	ck_assert_int_eq(blocker_write_super(dirfd, CS, SEG), 0);
	close(dirfd);
	s = reopen(); /* chunk size CS now */
	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "bad payload length"));
	ck_assert_ptr_nonnull(strstr(logbuf.text, "during GC"));
	ck_assert(seg_exists(0));
	ck_assert_int_eq(blocker_close(s), 0);
	free(buf);
	ttmp_rmtree(dir);
}
END_TEST

/* A gc file of ranges given as (first, len) pairs, with a valid CRC (the
 * layout of bgc_save: magic, version, count, checkpoint, ranges, CRC). */
static void write_gc_ranges(const uint32_t *r, uint32_t nr)
{
	uint8_t b[24 + 8 * 4 + 4] = "BLKGC001";
	size_t len = 24 + 8 * (size_t)nr;
	char p[512];
	int fd;

	ck_assert_uint_le(nr, 4);
	put_le32(b + 8, 1);
	put_le32(b + 12, nr);
	put_le64(b + 16, 0);
	for (uint32_t i = 0; i < 2 * nr; i++)
		put_le32(b + 24 + 4 * i, r[i]);
	put_le32(b + len, blocker_crc32c(0, b, len));
	snprintf(p, sizeof(p), "%s/gc", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, b, len + 4), (ssize_t)(len + 4));
	close(fd);
}

/*
 * A gc file whose CRC is valid but whose ranges are not (overlapping, out
 * of order, wrapping past 2^32): refused as corrupt, without reading past
 * the list. Before session 21 the list was sized by the ranges' sum, which
 * wrapped for (0, 2^31), (2^31, 2^31): a 4-byte list filled with 2^31
 * entries (safety21gc).
 */
START_TEST(test_gc_file_bad_ranges)
{
	static const uint32_t bad[][4] = {
	    {0, 1u << 31, 1u << 31, 1u << 31}, /* sum wraps, the 2nd wraps */
	    {0, 10, 5, 10},		       /* overlapping */
	    {20, 1, 10, 1},		       /* out of order */
	    {1, 0xffffffffu, 0, 0},	       /* wraps alone */
	    {3, 0, 0, 0},		       /* empty */
	};
	struct blocker_store *s = mk();
	struct blocker_opts o;

	mwrite(s, 0, 0, CS, 1);
	ck_assert_int_eq(blocker_close(s), 0);
	opts(&o);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_gc_ranges(bad[i], bad[i][2] || bad[i][3] ? 2 : 1);
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_open(dir, &o, &s), -EUCLEAN);
		ck_assert_ptr_nonnull(strstr(logbuf.text, "corrupt"));
	}
	/* well-formed, but naming segments at or past the end of the log
	 * (GC never removes the tail's): a later open, the log grown that
	 * far, would have unlinked real segments as unfinished removals
	 * (review21a R4) */
	for (int i = 0; i < 2; i++) {
		/* the log's only segment listed; then one past it too */
		write_gc_ranges((const uint32_t[]){0, 1, 5, 2}, 1 + i);
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_open(dir, &o, &s), -EUCLEAN);
		ck_assert_ptr_nonnull(strstr(
		    logbuf.text, i ? "lists segment 6 as removed by GC"
				   : "lists segment 0 as removed by GC"));
		ck_assert(seg_exists(0)); /* nothing unlinked */
	}
	ttmp_rmtree(dir);
}
END_TEST

/* this process's data size (VmData), in bytes */
static uint64_t vm_data(void)
{
	char line[256];
	uint64_t kb = 0;
	FILE *f = fopen("/proc/self/status", "r");

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmData: %llu kB",
			   (unsigned long long *)&kb) == 1)
			break;
	fclose(f);
	ck_assert_uint_gt(kb, 0);
	return kb * 1024;
}

/*
 * A gc file with a valid CRC whose one range lists ~2^32 segments in a
 * store of one: refused, naming the file, without allocating the list
 * (review21a R4: the list is capped by the segment slots the log has).
 * The forked test runs with 1 GiB of data room left: the old code's
 * 16 GiB list fails there (-ENOMEM: "cannot tell ...", or the
 * sanitizer's out-of-memory abort) instead of being filled for minutes.
 */
START_TEST(test_gc_file_huge_list)
{
	struct blocker_store *s = mk();
	struct blocker_opts o;
	struct rlimit rl;

	mwrite(s, 0, 0, CS, 1);
	ck_assert_int_eq(blocker_close(s), 0);
	opts(&o);
	ck_assert_int_eq(getrlimit(RLIMIT_DATA, &rl), 0);
	rl.rlim_cur = vm_data() + (1ULL << 30);
	ck_assert_int_eq(setrlimit(RLIMIT_DATA, &rl), 0);
	for (int repair = 0; repair < 2; repair++) {
		/* segment 0 listed too under repair: the last file, refused */
		write_gc_ranges((const uint32_t[]){!repair, 0xfffffffeu}, 1);
		o.truncate_at_damage = repair;
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_open(dir, &o, &s), -EUCLEAN);
		ck_assert_ptr_nonnull(
		    strstr(logbuf.text,
			   repair ? "gc: corrupt: lists segment 4294967293"
				  : "gc: corrupt: lists segment 4294967294"));
		ck_assert(seg_exists(0));
		/* the "run it again" hint only where the repair accepts */
		ck_assert((strstr(logbuf.text, "run it again") == NULL) ==
			  repair);
	}
	/* a normal open of a list naming the last file too: the repair
	 * refuses it as well, so no hint to run it (review22s F7) */
	write_gc_ranges((const uint32_t[]){0, 0xfffffffeu}, 1);
	o.truncate_at_damage = false;
	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(blocker_open(dir, &o, &s), -EUCLEAN);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "gc: corrupt: lists"));
	ck_assert_ptr_null(strstr(logbuf.text, "run it again"));
	ttmp_rmtree(dir);
}
END_TEST

/*
 * The store the DIR/gc list tests below damage: NOBJ whole objects
 * written (their contents from seed) and the store closed, over three
 * segments at least. Returns the number of the last segment.
 */
static uint32_t gc_list_store(uint64_t seed)
{
	struct blocker_store *s = mk();
	uint32_t last = 0;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, seed + i);
	ck_assert_int_eq(blocker_close(s), 0);
	while (seg_exists(last + 1))
		last++;
	ck_assert_uint_ge(last, 2);
	return last;
}

/* Once the test has undone its damage: with DIR/gc gone, every object
 * reads back and check finds the store clean (nothing was lost); then
 * the store is removed. */
static void gc_list_store_finish(void)
{
	struct blocker_store *s;
	char p[512];

	snprintf(p, sizeof(p), "%s/gc", dir);
	ck_assert_int_eq(unlink(p), 0);
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	ttmp_rmtree(dir);
}

/*
 * safety23b: check on a store whose DIR/gc is refused before any segment
 * is opened (a list naming the log's last segment, or a bad CRC). check
 * reported every real segment as "after the missing log.000000" and
 * "log.000000: missing" while the file was there. Now it says the list is
 * refused and why, lists each segment file as existing with what its
 * records say (a damaged one found), guesses no missing file or gap, and
 * changes nothing.
 */
START_TEST(test_gc_list_refused_check_report)
{
	uint32_t last;
	uint64_t problems;
	char p[512], want[600];
	uint8_t byte = 0;
	int fd;

	last = gc_list_store(700);
	for (int c = 0; c < 3; c++) {
		char *before, *after;

		/* every segment listed, the last too (case 2: with a
		 * damaged record in log.000001); case 1: a bad CRC */
		write_gc_ranges((const uint32_t[]){0, last + 1}, 1);
		snprintf(p, sizeof(p), "%s/gc", dir);
		if (c == 1) {
			fd = open(p, O_RDWR);
			ck_assert_int_ge(fd, 0);
			ck_assert_int_eq(pwrite(fd, "X", 1, 20), 1);
			close(fd);
		}
		snprintf(p, sizeof(p), "%s/log.000001", dir);
		if (c == 2) {
			fd = open(p, O_RDWR);
			ck_assert_int_ge(fd, 0);
			ck_assert_int_eq(pread(fd, &byte, 1, BREC_HDR_SIZE), 1);
			byte ^= 0xff;
			ck_assert_int_eq(pwrite(fd, &byte, 1, BREC_HDR_SIZE),
					 1);
			close(fd);
		}
		before = tb_dir_digest(dir);
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_check(dir, NULL, tb_log_fn_line,
					       &logbuf, &problems),
				 0);
		/* the refusal, and for case 2 the damaged record */
		ck_assert_uint_eq(problems, c == 2 ? 2 : 1);
		if (c == 1)
			snprintf(want, sizeof(want),
				 "%s/gc: corrupt: cannot tell segments removed "
				 "by GC from lost ones (open refuses the store",
				 dir);
		else
			snprintf(want, sizeof(want),
				 "%s/gc: corrupt: lists segment %u as removed "
				 "by GC, at or past the log's last segment",
				 dir, last);
		ck_assert_msg(strstr(logbuf.text, want), "case %d: %s", c,
			      logbuf.text);
		ck_assert_msg(!strstr(logbuf.text, "log.000000: missing") &&
				  !strstr(logbuf.text, "after the missing"),
			      "case %d: %s", c, logbuf.text);
		for (uint32_t seg = 0; seg <= last; seg++) {
			snprintf(want, sizeof(want),
				 "%s/log.%06u: exists: ", dir, seg);
			ck_assert_msg(strstr(logbuf.text, want),
				      "case %d: no line for log.%06u: %s", c,
				      seg, logbuf.text);
		}
		snprintf(want, sizeof(want),
			 "%s/log.000001: bad record at offset 0: ", dir);
		ck_assert_msg(!strstr(logbuf.text, want) == (c != 2),
			      "case %d: %s", c, logbuf.text);
		after = tb_dir_digest(dir);
		ck_assert_msg(!strcmp(before, after),
			      "case %d: check changed the store", c);
		free(after);
		free(before);
	}
	/* the damage undone and DIR/gc gone: every object is still there */
	byte ^= 0xff;
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, &byte, 1, BREC_HDR_SIZE), 1);
	close(fd);
	gc_list_store_finish();
}
END_TEST

/*
 * review22s F8: a gc file with a valid CRC listing real segments, and a
 * stray segment file far past a gap (log.4000000000). The list was judged
 * against the highest file, the stray, so it passed, and open unlinked
 * every listed file as a removal a crash left unfinished before it
 * refused the store: a refused open destroyed the log. Now the listed
 * files are removed only once the layout is accepted, and nothing
 * changes: (a) a list naming every segment, the tail's too, is refused
 * (no last segment), with or without truncate_at_damage; (b) one naming
 * all but the tail's (the layout a GC killed before its unlinks leaves,
 * plus the stray) is refused for the stray, its listed files kept. check
 * changes nothing either, names the stray, and gives open's own reason
 * (since session 24: before, (a) got a generic line, (b) none).
 */
START_TEST(test_gc_list_with_stray_changes_nothing)
{
	struct blocker_store *s;
	struct blocker_opts o;
	uint32_t last;
	uint64_t problems;
	char p[512], want[600], owant[600];
	int fd;

	last = gc_list_store(500);
	snprintf(p, sizeof(p), "%s/log.4000000000", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "stray", 5), 5);
	close(fd);
	opts(&o);
	for (int c = 0; c < 3; c++) {
		char *before, *after;

		/* (a) 0..last, normal and repair; (b) 0..last-1 */
		write_gc_ranges((const uint32_t[]){0, c < 2 ? last + 1 : last},
				1);
		before = tb_dir_digest(dir);
		o.truncate_at_damage = c == 1;
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_open(dir, &o, &s), -EUCLEAN);
		if (c < 2)
			snprintf(want, sizeof(want),
				 "log.%06u: missing after segments removed by "
				 "GC: the log has no last segment",
				 last + 1);
		else
			snprintf(want, sizeof(want),
				 "log.%06u: missing, but %s/log.4000000000",
				 last + 1, dir);
		ck_assert_msg(strstr(logbuf.text, want), "case %d: %s", c,
			      logbuf.text);
		snprintf(owant, sizeof(owant), "%s", want);
		after = tb_dir_digest(dir);
		ck_assert_msg(!strcmp(before, after),
			      "case %d: the refused open changed the store:\n"
			      "before:\n%s\nafter:\n%s",
			      c, before, after);
		free(after);
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_check(dir, NULL, tb_log_fn_line,
					       &logbuf, &problems),
				 0);
		ck_assert_uint_ge(problems, 1);
		snprintf(want, sizeof(want),
			 "log.4000000000: after the missing %s/log.%06u", dir,
			 last + 1);
		ck_assert_msg(strstr(logbuf.text, want), "case %d: %s", c,
			      logbuf.text);
		/* and open's own reason (session 24: before, a generic
		 * line for (a), nothing for (b)) */
		ck_assert_msg(strstr(logbuf.text, owant), "case %d: %.3000s", c,
			      logbuf.text);
		after = tb_dir_digest(dir);
		ck_assert_msg(!strcmp(before, after),
			      "case %d: check changed the store", c);
		free(after);
		/* the same through blockerctl check, if it was built */
		char *text;
		int st = tb_ctl_check(dir, &text);
		if (st >= 0) {
			ck_assert_int_eq(st, 1);
			ck_assert_msg(strstr(text, want) && strstr(text, owant),
				      "case %d: %.3000s", c, text);
			free(text);
			after = tb_dir_digest(dir);
			ck_assert_msg(!strcmp(before, after),
				      "case %d: blockerctl check changed the "
				      "store",
				      c);
			free(after);
		}
		free(before);
	}
	/* every segment's data is still there */
	ck_assert_int_eq(unlink(p), 0);
	gc_list_store_finish();
}
END_TEST

/*
 * review23h F1: a normal open refused after the segments were opened
 * changes nothing, DIR/gc's listed files included. A gc file listing
 * log.000001 (as a GC killed before its unlinks leaves it) and the last
 * segment cut below the checkpoint: recovery refuses the store
 * (checkpoint beyond the end of the log). The build before had already
 * unlinked log.000001 as a removal left unfinished; now the removal is
 * finished only once recovery accepted the store, and the files are as
 * they were. With the last segment restored and DIR/gc gone, every object
 * reads back: the refused open lost nothing.
 */
START_TEST(test_gc_refused_open_keeps_listed_files)
{
	struct blocker_store *s;
	struct blocker_opts o;
	uint32_t last;
	char p[512], *before, *after;
	uint8_t *saved = malloc(SEG);
	ssize_t len;
	int fd;

	ck_assert_ptr_nonnull(saved);
	last = gc_list_store(700);
	write_gc_ranges((const uint32_t[]){1, 1}, 1);
	snprintf(p, sizeof(p), "%s/log.%06u", dir, last);
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	len = pread(fd, saved, SEG, 0);
	ck_assert_int_gt(len, 4096);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	close(fd);
	before = tb_dir_digest(dir);
	opts(&o);
	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(blocker_open(dir, &o, &s), -EUCLEAN);
	ck_assert_msg(strstr(logbuf.text, "checkpoint lies beyond the end of "
					  "the log"),
		      "%s", logbuf.text);
	ck_assert_msg(!strstr(logbuf.text, "finishing its removal"), "%s",
		      logbuf.text);
	ck_assert(seg_exists(1));
	after = tb_dir_digest(dir);
	ck_assert_msg(!strcmp(before, after),
		      "the refused open changed the store:\nbefore:\n%s\n"
		      "after:\n%s",
		      before, after);
	free(after);
	free(before);
	/* nothing was lost by it */
	fd = open(p, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, saved, (size_t)len, 0), len);
	close(fd);
	free(saved);
	gc_list_store_finish();
}
END_TEST

/*
 * review23h F4: a listed file whose removal cannot be finished (here a
 * directory in its place: unlink fails with EISDIR, also for root) makes
 * the open fail with that error and says so, normal or truncate_at_damage
 * (whose cut would otherwise drop the entry from DIR/gc and leave the
 * file unlisted); the list and the files stay as they were. The build
 * before ignored the failed unlink and opened the store. With the cause
 * removed (the segment back, DIR/gc gone) every object reads back.
 */
START_TEST(test_gc_finish_removal_fails)
{
	struct blocker_store *s;
	struct blocker_opts o;
	char p[512], saved[600], want[700], *before, *after;

	gc_list_store(900);
	write_gc_ranges((const uint32_t[]){1, 1}, 1);
	snprintf(p, sizeof(p), "%s/log.000001", dir);
	snprintf(saved, sizeof(saved), "%s.seg1", dir);
	ck_assert_int_eq(rename(p, saved), 0);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	before = tb_dir_digest(dir);
	opts(&o);
	for (int c = 0; c < 2; c++) {
		o.truncate_at_damage = c == 1;
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_open(dir, &o, &s), -EISDIR);
		snprintf(want, sizeof(want),
			 "%s: removed by GC, but finishing its removal failed: "
			 "%s; refusing to open",
			 p, strerror(EISDIR));
		ck_assert_msg(strstr(logbuf.text, want), "case %d: %s", c,
			      logbuf.text);
		after = tb_dir_digest(dir);
		ck_assert_msg(!strcmp(before, after),
			      "case %d: the refused open changed the "
			      "store:\nbefore:\n%s\nafter:\n%s",
			      c, before, after);
		free(after);
	}
	free(before);
	ck_assert_int_eq(rmdir(p), 0);
	ck_assert_int_eq(rename(saved, p), 0);
	gc_list_store_finish();
}
END_TEST

/* Removed by GC vs lost: only the second is refused (R6 stays). */
START_TEST(test_gc_missing_vs_removed)
{
	struct blocker_store *s = mk();
	struct blocker_gc_report rep;
	struct blocker_opts o;
	struct blocker_store *t;
	uint64_t rng = 40, problems;
	uint32_t lost = UINT32_MAX, k;
	char p[512], q[512];
	int n;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 9000 + i);
	overwrite_workload(s, &rng, 400);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_gt(rep.segments_removed, 0);
	overwrite_workload(s, &rng, 200);
	ck_assert_int_eq(blocker_flush(s), 0);
	ck_assert_int_eq(blocker_close(s), 0);
	ck_assert(!seg_exists(0));
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);

	/* a segment that GC did not remove goes missing: refused */
	log_file_bytes(&n);
	for (k = 1; k < 1000 && lost == UINT32_MAX; k++)
		if (seg_exists(k) && seg_exists(k + 1))
			lost = k;
	ck_assert_uint_ne(lost, UINT32_MAX);
	snprintf(p, sizeof(p), "%s/log.%06u", dir, lost);
	snprintf(q, sizeof(q), "%s/saved", dir);
	ck_assert_int_eq(rename(p, q), 0);
	memset(&logbuf, 0, sizeof(logbuf));
	opts(&o);
	ck_assert_int_eq(blocker_open(dir, &o, &t), -EUCLEAN);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "missing"));
	ck_assert_int_eq(blocker_check(dir, NULL, NULL, NULL, &problems), 0);
	ck_assert_uint_gt(problems, 0);
	ck_assert_int_eq(rename(q, p), 0);

	/* a corrupt gc file: cannot tell removed from lost: refused */
	snprintf(p, sizeof(p), "%s/gc", dir);
	snprintf(q, sizeof(q), "%s/gc.saved", dir);
	ck_assert_int_eq(rename(p, q), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &t), -EUCLEAN);
	fd_write_garbage(p);
	ck_assert_int_eq(blocker_open(dir, &o, &t), -EUCLEAN);
	ck_assert_int_eq(rename(q, p), 0);

	/* the maps checkpoint is needed once journal segments are gone */
	snprintf(p, sizeof(p), "%s/maps", dir);
	snprintf(q, sizeof(q), "%s/maps.saved", dir);
	ck_assert_int_eq(rename(p, q), 0);
	memset(&logbuf, 0, sizeof(logbuf));
	ck_assert_int_eq(blocker_open(dir, &o, &t), -EUCLEAN);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "cannot be rebuilt"));
	/* the operator override replays the journal that is left */
	{
		char cp[600];
		snprintf(cp, sizeof(cp), "cp -a '%s' '%s.copy'", dir, dir);
		ck_assert_int_eq(system(cp), 0);
		struct blocker_opts oo;
		opts(&oo);
		oo.truncate_at_damage = true;
		snprintf(cp, sizeof(cp), "%s.copy", dir);
		ck_assert_int_eq(blocker_open(cp, &oo, &t), 0);
		ck_assert_int_eq(blocker_close(t), 0);
		ttmp_rmtree(cp);
	}
	ck_assert_int_eq(rename(q, p), 0);

	/* the index is rebuilt from the log */
	snprintf(p, sizeof(p), "%s/index", dir);
	ck_assert_int_eq(unlink(p), 0);
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
}
END_TEST

/* A kill right after each GC step: every reopen has everything. */
struct killer {
	int point;
};

static void kill_hook(void *arg, int point)
{
	struct killer *k = arg;

	if (point == k->point)
		raise(SIGKILL);
}

START_TEST(test_gc_kill_points)
{
	uint64_t rng = 50;

	for (int point = 1; point <= 5; point++) {
		struct blocker_store *s = mk();
		int status;
		pid_t pid;

		for (int i = 0; i < NOBJ; i++)
			mwrite(s, i, 0, OBJ_MAX, 10000 + i + 10 * point);
		overwrite_workload(s, &rng, 300);
		ck_assert_int_eq(blocker_flush(s), 0);
		ck_assert_int_eq(blocker_close(s), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			struct killer k = {point};
			struct blocker_opts o;
			struct blocker_store *c;
			opts(&o);
			if (blocker_open(dir, &o, &c))
				_exit(3);
			c->gc_hook = kill_hook;
			c->gc_hook_arg = &k;
			blocker_gc(c, NULL, NULL);
			_exit(4);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFSIGNALED(status) &&
				  WTERMSIG(status) == SIGKILL,
			      "point %d: child status %d", point, status);
		memset(&logbuf, 0, sizeof(logbuf));
		s = reopen();
		verify_all(s);
		if (point == 5)
			ck_assert_ptr_nonnull(
			    strstr(logbuf.text, "finishing its removal"));
		ck_assert_int_eq(blocker_close(s), 0);
		check_clean();
		/* and a later pass finishes the job */
		s = reopen();
		ck_assert_int_eq(blocker_gc(s, NULL, NULL), 0);
		verify_all(s);
		ck_assert_int_eq(blocker_close(s), 0);
		check_clean();
	}
}
END_TEST

/*
 * review23h F3: truncate_at_damage finishes a killed GC's removals before
 * its repair, also when a stray lies after a gap (a normal open refuses
 * that store and changes nothing). The repair's cut drops listed entries
 * past it from DIR/gc without unlinking their files: a victim it left
 * would stay on disk unlisted, past the new tail, and be read later as a
 * live segment or reused by number. A GC pass killed after writing DIR/gc
 * (its victims listed and still there), a stray log file after a gap, and
 * (damaged) a bad record in a segment below the lowest victim, so that
 * the cut lies below it: the repair opens, the victims' files and the
 * stray are gone, no segment file lies at or past the tail's, check is
 * clean, and a normal open follows; undamaged, every object reads back.
 */
START_TEST(test_gc_killed_pass_stray_repair)
{
	for (int damaged = 0; damaged < 2; damaged++) {
		struct blocker_store *s = mk();
		struct blocker_opts o;
		uint32_t *removed = NULL, nremoved = 0, past, end, last = 0;
		uint64_t ckpt;
		char p[512], stray[512];
		int status, fd, dfd;
		pid_t pid;

		/* objects 0..3 stay live in the first segment; the others,
		 * rewritten, leave the segments after it mostly dead: GC's
		 * victims lie above a live segment */
		for (int i = 0; i < NOBJ; i++)
			mwrite(s, i, 0, OBJ_MAX, 1100 + i);
		for (int r = 0; r < 20; r++)
			mwrite(s, NOBJ / 2 + r % (NOBJ / 2), 0, OBJ_MAX,
			       1200 + r);
		ck_assert_int_eq(blocker_close(s), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			/* GC killed between writing DIR/gc and its unlinks */
			struct killer k = {5};
			struct blocker_store *c;
			struct blocker_gc_opts g;

			/* mostly dead segments only: not the live first */
			blocker_gc_opts_init(&g);
			g.min_dead_pct = 50;
			opts(&o);
			if (blocker_open(dir, &o, &c))
				_exit(3);
			c->gc_hook = kill_hook;
			c->gc_hook_arg = &k;
			blocker_gc(c, &g, NULL);
			_exit(4);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFSIGNALED(status) &&
				  WTERMSIG(status) == SIGKILL,
			      "child status %d", status);
		while (seg_exists(last + 1))
			last++;
		dfd = open(dir, O_RDONLY | O_DIRECTORY);
		ck_assert_int_ge(dfd, 0);
		ck_assert_int_eq(bgc_load(dfd, last + 1, &removed, &nremoved,
					  &past, &end, &ckpt),
				 0);
		close(dfd);
		/* the victims are listed and still there */
		ck_assert_uint_ge(nremoved, 1);
		for (uint32_t i = 0; i < nremoved; i++)
			ck_assert(seg_exists(removed[i]));
		snprintf(stray, sizeof(stray), "%s/log.%06u", dir, last + 5);
		fd = open(stray, O_WRONLY | O_CREAT | O_EXCL, 0644);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, "stray", 5), 5);
		close(fd);
		if (damaged) {
			uint32_t below = removed[0] - 1;
			uint8_t byte;

			/* (the workload above puts the lowest victim
			 * above log.000000) */
			ck_assert_uint_ge(removed[0], 1);
			snprintf(p, sizeof(p), "%s/log.%06u", dir, below);
			fd = open(p, O_RDWR);
			ck_assert_int_ge(fd, 0);
			/* its first record's header, and the checkpoint
			 * gone (the repair then replays the whole log):
			 * the repair cuts there */
			ck_assert_int_eq(pread(fd, &byte, 1, 0), 1);
			byte ^= 0xff;
			ck_assert_int_eq(pwrite(fd, &byte, 1, 0), 1);
			close(fd);
			snprintf(p, sizeof(p), "%s/%s", dir, BLOCKER_MAPS_FILE);
			ck_assert_int_eq(unlink(p), 0);
			snprintf(p, sizeof(p), "%s/%s", dir,
				 BLOCKER_INDEX_FILE);
			ck_assert_int_eq(unlink(p), 0);
		}
		opts(&o);
		o.truncate_at_damage = true;
		memset(&logbuf, 0, sizeof(logbuf));
		ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
		for (uint32_t i = 0; i < nremoved; i++)
			ck_assert_msg(!seg_exists(removed[i]),
				      "damaged %d: victim log.%06u left: %s",
				      damaged, removed[i], logbuf.text);
		ck_assert_int_eq(access(stray, F_OK), -1);
		for (uint32_t seg = s->nsegs; seg <= last + 5; seg++)
			ck_assert_msg(!seg_exists(seg),
				      "damaged %d: log.%06u at or past the "
				      "tail's (%u segments): %s",
				      damaged, seg, s->nsegs, logbuf.text);
		if (!damaged)
			verify_all(s);
		ck_assert_int_eq(blocker_close(s), 0);
		free(removed);
		check_clean();
		s = reopen();
		if (!damaged)
			verify_all(s);
		ck_assert_int_eq(blocker_close(s), 0);
		ttmp_rmtree(dir);
	}
}
END_TEST

START_TEST(test_gc_bad_input)
{
	struct blocker_store *s = mk();
	struct blocker_gc_opts g;
	struct blocker_gc_report rep;
	struct blocker_opts o;
	struct blocker_stats st;
	uint64_t rng = 60;
	int n0, n1;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 11000 + i);
	overwrite_workload(s, &rng, 300);
	log_file_bytes(&n0);
	blocker_gc_opts_init(&g);
	g.min_dead_pct = 101;
	ck_assert_int_eq(blocker_gc(s, &g, &rep), -EINVAL);
	log_file_bytes(&n1);
	ck_assert_int_eq(n1, n0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_uint_eq(st.gc_runs, 0);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	/* a background threshold above 100% is refused at open */
	opts(&o);
	o.gc_threshold_pct = 101;
	ck_assert_int_eq(blocker_open(dir, &o, &s), -EINVAL);
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* The background thread collects once the threshold is passed. */
START_TEST(test_gc_background)
{
	struct blocker_store *s = mk();
	struct blocker_opts o;
	struct blocker_stats st;
	uint64_t rng = 70;

	ck_assert_int_eq(blocker_close(s), 0);
	opts(&o);
	o.gc_threshold_pct = 30;
	o.gc_check_ms = 20;
	s = reopen_with(&o);
	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 12000 + i);
	overwrite_workload(s, &rng, 600);
	/* no timing assumption: wait (bounded, to turn a hang into a
	 * failure) until the thread has removed something */
	for (int k = 0; k < 3000; k++) {
		ck_assert_int_eq(blocker_get_stats(s, &st), 0);
		if (st.gc_segments_removed)
			break;
		usleep(10000);
	}
	ck_assert_uint_gt(st.gc_segments_removed, 0);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* More dead segments than one background pass takes: the thread keeps
 * going (pass after pass) until the log is down to its live part. */
START_TEST(test_gc_background_many)
{
	struct blocker_store *s = mk();
	struct blocker_opts o;
	uint64_t rng = 71;
	int n = 0;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 12300 + i);
	overwrite_workload(s, &rng, 1500);
	ck_assert_int_eq(blocker_close(s), 0);
	log_file_bytes(&n);
	ck_assert_int_gt(n, 20); /* more than a background pass takes */
	opts(&o);
	o.gc_threshold_pct = 30;
	o.gc_check_ms = 10;
	s = reopen_with(&o);
	for (int i = 1; i < NOBJ; i++)
		mdelete(s, i);
	/* bounded wait (a stuck thread fails, no timing is asserted) */
	for (int k = 0; k < 3000; k++) {
		log_file_bytes(&n);
		if (n <= 3)
			break;
		usleep(10000);
	}
	ck_assert_int_le(n, 3);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* Closing the store while the background thread is in a pass (throttled
 * to a crawl): close stops the pass, and the store reopens intact. */
START_TEST(test_gc_close_during_pass)
{
	struct blocker_store *s = mk();
	struct blocker_opts o;
	uint64_t rng = 75;

	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 12500 + i);
	overwrite_workload(s, &rng, 500);
	ck_assert_int_eq(blocker_close(s), 0);
	opts(&o);
	o.gc_threshold_pct = 1;
	o.gc_check_ms = 10;
	o.gc_rate_bytes = 1; /* one byte a second: the pass never ends */
	s = reopen_with(&o);
	/* a pass is under way once it has flagged its victims (the thread
	 * may start before a hook could be installed) */
	while (!__atomic_load_n(&s->gc_victims, __ATOMIC_ACQUIRE))
		usleep(1000);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/* mmap reads: the victims' mappings go away safely */
START_TEST(test_gc_mmap_reads)
{
	struct blocker_store *s = mk();
	struct blocker_opts o;
	uint64_t rng = 80;

	ck_assert_int_eq(blocker_close(s), 0);
	opts(&o);
	o.mmap_reads = true;
	s = reopen_with(&o);
	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 13000 + i);
	overwrite_workload(s, &rng, 500);
	ck_assert_int_eq(blocker_gc(s, NULL, NULL), 0);
	verify_all(s);
	overwrite_workload(s, &rng, 100);
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
	check_clean();
}
END_TEST

START_TEST(test_blockerctl_gc)
{
	struct blocker_store *s;
	uint64_t rng = 90;
	char cmd[1024], out[4096];
	int n0, n1;

	if (!tb_ctl_dir())
		return; /* blockerctl not built: nothing to run */
	s = mk();
	for (int i = 0; i < NOBJ; i++)
		mwrite(s, i, 0, OBJ_MAX, 14000 + i);
	overwrite_workload(s, &rng, 400);
	ck_assert_int_eq(blocker_close(s), 0);
	log_file_bytes(&n0);
	/* bad usage: refused, nothing changed */
	snprintf(cmd, sizeof(cmd), "%s/blockerctl gc --min-dead 101 %s 2>&1",
		 tb_ctl_dir(), dir);
	ck_assert_int_eq(tb_run_cmd(cmd, out, sizeof(out)), 2);
	ck_assert_ptr_nonnull(strstr(out, "101"));
	snprintf(cmd, sizeof(cmd), "%s/blockerctl gc 2>&1", tb_ctl_dir());
	ck_assert_int_eq(tb_run_cmd(cmd, out, sizeof(out)), 2);
	log_file_bytes(&n1);
	ck_assert_int_eq(n1, n0);
	/* stats shows what is reclaimable */
	snprintf(cmd, sizeof(cmd), "%s/blockerctl stats %s", tb_ctl_dir(), dir);
	ck_assert_int_eq(tb_run_cmd(cmd, out, sizeof(out)), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"reclaimable_bytes\": "));
	ck_assert_ptr_null(strstr(out, "\"reclaimable_bytes\": 0,"));
	/* gc reclaims and reports */
	snprintf(cmd, sizeof(cmd), "%s/blockerctl gc %s", tb_ctl_dir(), dir);
	ck_assert_int_eq(tb_run_cmd(cmd, out, sizeof(out)), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"segments_removed\": "));
	ck_assert_ptr_null(strstr(out, "\"segments_removed\": 0,"));
	log_file_bytes(&n1);
	ck_assert_int_lt(n1, n0);
	check_clean();
	s = reopen();
	verify_all(s);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *su = suite_create("blocker_gc");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gc_overwrite);
	tcase_add_test(tc, test_gc_overwrite_collisions);
	tcase_add_test(tc, test_gc_fsync_error);
	tcase_add_test(tc, test_gc_delete_all);
	tcase_add_test(tc, test_gc_victim_choice);
	tcase_add_test(tc, test_gc_dedup_race_marked);
	tcase_add_test(tc, test_gc_dedup_race_copied);
	tcase_add_test(tc, test_gc_dedup_race_repointed);
	tcase_add_test(tc, test_gc_waits_for_readers);
	tcase_add_test(tc, test_gc_damaged_duplicate);
	tcase_add_test(tc, test_gc_enospc);
	tcase_add_test(tc, test_gc_enospc_new_segment);
	tcase_add_test(tc, test_gc_eio);
	tcase_add_test(tc, test_gc_unreadable_victim);
	tcase_add_test(tc, test_gc_corrupt_live_chunk);
	tcase_add_test(tc, test_gc_chunk_of_another_size);
	tcase_add_test(tc, test_gc_file_bad_ranges);
	tcase_add_test(tc, test_gc_file_huge_list);
	tcase_add_test(tc, test_gc_list_with_stray_changes_nothing);
	tcase_add_test(tc, test_gc_refused_open_keeps_listed_files);
	tcase_add_test(tc, test_gc_finish_removal_fails);
	tcase_add_test(tc, test_gc_killed_pass_stray_repair);
	tcase_add_test(tc, test_gc_list_refused_check_report);
	tcase_add_test(tc, test_gc_missing_vs_removed);
	tcase_add_test(tc, test_gc_kill_points);
	tcase_add_test(tc, test_gc_bad_input);
	tcase_add_test(tc, test_gc_background);
	tcase_add_test(tc, test_gc_mmap_reads);
	tcase_add_test(tc, test_gc_close_during_pass);
	tcase_add_test(tc, test_gc_background_many);
	tcase_add_test(tc, test_blockerctl_gc);
	suite_add_tcase(su, tc);
	return su;
}

int main(void)
{
	SRunner *sr;
	int failed;

	m = malloc(sizeof(*m));
	sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	free(m);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
