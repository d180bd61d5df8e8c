/* SPDX-License-Identifier: MIT */
/*
 * GC on a full disk (review R4-6; docs/blocker.md "Full disk"): a store
 * that writes filled, whose user deletes objects and runs GC, gets its
 * space and its writes back without a restart, thanks to DIR/reserve.
 *
 * No real small file system is available to an unprivileged test (no
 * loop or tmpfs mounts), so the disk is a model: the fault I/O layer's
 * write budget is the free space for log writes, and the store's space
 * hook (store_int.h) moves the reserve, removed segments and checkpoint
 * files in and out of that same budget.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "store_int.h"
#include "test_blocker_util.h"

#define CS   4096
#define SEG  (1u << 20)
#define OBJ  (512u * 1024) /* an object: 128 chunks */
#define NOBJ 6

static char dir[256];
static struct tb_log logbuf;

struct disk {
	struct blocker_io_fault f;
	bool full; /* the model is in charge (else: no limits) */
	/* refuse the next checkpoint whatever the budget (the room comes
	 * back right after, as when a DELETE releases the reserve) */
	bool refuse_ckpt_once;
	uint64_t freed, reserve_freed, reserve_taken, ckpt_refused;
};

static int space_hook(void *arg, int event, uint64_t bytes)
{
	struct disk *d = arg;
	int64_t *budget = &d->f.write_budget;

	if (!d->full)
		return 0;
	switch (event) {
	case BLOCKER_SPACE_RESERVE_FREED:
		d->reserve_freed += bytes;
		__atomic_fetch_add(budget, (int64_t)bytes, __ATOMIC_RELAXED);
		return 0;
	case BLOCKER_SPACE_SEGMENT_FREED:
		d->freed += bytes;
		__atomic_fetch_add(budget, (int64_t)bytes, __ATOMIC_RELAXED);
		return 0;
	case BLOCKER_SPACE_RESERVE_ALLOC:
		if (__atomic_load_n(budget, __ATOMIC_RELAXED) < (int64_t)bytes)
			return -ENOSPC;
		d->reserve_taken += bytes;
		__atomic_fetch_sub(budget, (int64_t)bytes, __ATOMIC_RELAXED);
		return 0;
	case BLOCKER_SPACE_CHECKPOINT:
		/* the new files are written before the old ones go */
		if (d->refuse_ckpt_once ||
		    __atomic_load_n(budget, __ATOMIC_RELAXED) <
			(int64_t)bytes) {
			d->refuse_ckpt_once = false;
			d->ckpt_refused++;
			return -ENOSPC;
		}
		return 0;
	}
	return 0;
}

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

/* "obj<i>"; valid until the fourth call after */
static const char *oname(int i)
{
	static char n[4][16];
	static unsigned next;
	char *p = n[next++ % 4];

	snprintf(p, sizeof(n[0]), "obj%d", i);
	return p;
}

static int owrite(struct blocker_store *s, int i, uint64_t seed)
{
	uint8_t *b = malloc(OBJ);
	int r;

	ck_assert_ptr_nonnull(b);
	tb_fill(b, OBJ, seed, 0);
	r = blocker_write(s, oname(i), strlen(oname(i)), 0, OBJ, b, 0);
	free(b);
	return r;
}

static void expect_obj(struct blocker_store *s, int i, uint64_t seed)
{
	uint8_t *b = malloc(OBJ), *w = malloc(OBJ);

	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(blocker_read(s, oname(i), strlen(oname(i)), 0, OBJ, b),
			 0);
	tb_fill(w, OBJ, seed, 0);
	ck_assert_msg(!memcmp(b, w, OBJ), "%s differs", oname(i));
	free(b);
	free(w);
}

static uint64_t reserve_blocks(void)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, BLOCKER_RESERVE_FILE);
	if (stat(p, &st))
		return 0;
	return st.st_blocks * 512ULL;
}

/*
 * A new store on the model disk d (not in charge yet: no limits until
 * d->full), with o's options (NULL: opts()) and the fault I/O layer.
 */
static struct blocker_store *open_on(struct disk *d, struct blocker_opts *o)
{
	struct blocker_opts def;
	struct blocker_store *s;

	if (!o) {
		opts(&def);
		o = &def;
	}
	memset(d, 0, sizeof(*d));
	blocker_io_fault_init(&d->f, &blocker_io_sync, NULL);
	o->io = &blocker_io_fault_ops;
	o->io_ctx = &d->f;
	ck_assert_int_eq(blocker_create(dir, o), 0);
	ck_assert_int_eq(blocker_open(dir, o, &s), 0);
	s->space_hook = space_hook;
	s->space_hook_arg = d;
	return s;
}

/* The disk is out of the way again (no limit, no fault), then close. */
static void close_on(struct disk *d, struct blocker_store *s)
{
	d->full = false;
	__atomic_store_n(&d->f.armed, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(blocker_close(s), 0);
}

/*
 * A store on a model disk: objects 0..NOBJ-1 written (seeds 100+i) and
 * flushed, then the disk is "full" (the budget is 0) and a write fails:
 * the store is degraded by ENOSPC.
 */
static struct blocker_store *fill_up_with(struct disk *d, uint64_t reserve)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_stats st;

	opts(&o);
	o.reserve_bytes = reserve;
	s = open_on(d, &o);
	/* default size: a segment, twice the checkpoint files, 1 MiB */
	if (!reserve)
		ck_assert_uint_ge(reserve_blocks(), SEG + (1u << 20));
	for (int i = 0; i < NOBJ; i++)
		ck_assert_int_eq(owrite(s, i, 100 + i), 0);
	ck_assert_int_eq(blocker_flush(s), 0);
	/* the disk fills up */
	d->full = true;
	blocker_io_fault_arm(&d->f, 0, ENOSPC, 0);
	ck_assert_int_eq(owrite(s, 0, 999), -ENOSPC);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, ENOSPC);
	ck_assert_int_eq(owrite(s, 1, 999), -ENOSPC);
	/* reads go on; the failed write changed nothing */
	expect_obj(s, 0, 100);
	expect_obj(s, 1, 101);
	return s;
}

static struct blocker_store *fill_up(struct disk *d)
{
	return fill_up_with(d, 0);
}

/*
 * After objects 0-2 were deleted and GC made room: writes are accepted
 * (obj0 written again, seed 500), the other objects read intact; closed.
 */
static void expect_writes_back(struct disk *d, struct blocker_store *s)
{
	struct blocker_stats st;

	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	ck_assert_int_eq(owrite(s, 0, 500), 0);
	expect_obj(s, 0, 500);
	for (int i = 3; i < NOBJ; i++)
		expect_obj(s, i, 100 + i);
	close_on(d, s);
}

START_TEST(test_full_disk_gc_gives_space_back)
{
	struct disk d;
	struct blocker_store *s = fill_up(&d);
	struct blocker_gc_report rep;
	struct blocker_stats st;
	uint64_t held = s->reserve_held;

	/* without the reserve, no room for a checkpoint (R4-6) */
	ck_assert_int_eq(blocker_checkpoint(s), -ENOSPC);
	ck_assert_uint_eq(d.ckpt_refused, 1);
	/* deletes are accepted: the first one releases the reserve */
	ck_assert_int_eq(blocker_delete(s, "obj0", 4), 0);
	ck_assert_uint_eq(d.reserve_freed, held);
	ck_assert_uint_eq(reserve_blocks(), 0);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "released"));
	ck_assert_int_eq(blocker_delete(s, "obj1", 4), 0);
	ck_assert_int_eq(blocker_delete(s, "obj2", 4), 0);
	/* still degraded: writes wait for GC */
	ck_assert_int_eq(owrite(s, 0, 999), -ENOSPC);
	/* GC removes the dead segments, takes the reserve back, lets
	 * writes in */
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_gt(rep.segments_removed, 0);
	ck_assert_uint_eq(d.freed, rep.bytes_reclaimed);
	/* (at least as large: the pass's checkpoint may have raised the
	 * target, review6 F5) */
	ck_assert_uint_ge(d.reserve_taken, held);
	ck_assert_uint_eq(d.reserve_taken, s->reserve_target);
	ck_assert_uint_ge(reserve_blocks(), held);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "writes accepted again"));
	ck_assert_int_eq(owrite(s, 0, 500), 0);
	ck_assert_int_eq(blocker_write(s, "new", 3, 0, 5, "hello", BLOCKER_FUA),
			 0);
	expect_obj(s, 0, 500);
	for (int i = 3; i < NOBJ; i++)
		expect_obj(s, i, 100 + i);
	uint8_t b[OBJ / 8];
	ck_assert_int_eq(blocker_read(s, "obj1", 4, 0, 10, b), -ENOENT);
	close_on(&d, s);
	/* everything acknowledged is there after a reopen */
	struct blocker_opts o;
	opts(&o);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	expect_obj(s, 0, 500);
	for (int i = 3; i < NOBJ; i++)
		expect_obj(s, i, 100 + i);
	ck_assert_int_eq(blocker_read(s, "obj2", 4, 0, 10, b), -ENOENT);
	ck_assert_int_eq(blocker_read(s, "new", 3, 0, 5, b), 0);
	ck_assert(!memcmp(b, "hello", 5));
	ck_assert_int_eq(blocker_close(s), 0);
	uint64_t problems = 1;
	ck_assert_int_eq(blocker_check(dir, NULL, NULL, NULL, &problems), 0);
	ck_assert_uint_eq(problems, 0);
}
END_TEST

/*
 * The race CI found (test_blocker_full test_background_gc): a DELETE's
 * append fails on the full disk, and before the DELETE releases the
 * reserve, GC releases it for its copies. The DELETE finds it gone, yet
 * the room is there: it must try again, not fail with ENOSPC. The model
 * disk's I/O layer does what GC did: its first failing write releases
 * the reserve before it returns.
 */
static struct blocker_store *race_store;
static int race_releases;

static ssize_t race_pwritev(void *ctx, int fd, const struct iovec *iov, int cnt,
			    uint64_t off)
{
	ssize_t w = blocker_io_fault_ops.pwritev(ctx, fd, iov, cnt, off);

	if (w == -ENOSPC && !race_releases++)
		ck_assert_int_eq(bres_release(race_store), 0);
	return w;
}

START_TEST(test_delete_after_reserve_released_meanwhile)
{
	struct disk d;
	struct blocker_store *s = fill_up(&d);
	struct blocker_io_ops race_io = blocker_io_fault_ops;
	const struct blocker_io_ops *model_io = s->io;
	uint64_t held = s->reserve_held;

	ck_assert_uint_gt(held, 0);
	race_io.pwritev = race_pwritev;
	race_store = s;
	race_releases = 0;
	s->io = &race_io;
	ck_assert_int_eq(blocker_delete(s, "obj0", 4), 0);
	s->io = model_io;
	/* released once, by the "GC"; the DELETE took the room it left */
	ck_assert_int_eq(race_releases, 1);
	ck_assert_uint_eq(d.reserve_freed, held);
	ck_assert_int_eq(blocker_info(s, "obj0", 4, &(uint64_t){0}), -ENOENT);
	/* with the reserve gone and the disk full again, a DELETE still
	 * fails cleanly: nothing changed */
	blocker_io_fault_arm(&d.f, 0, ENOSPC, 0);
	ck_assert_int_eq(blocker_delete(s, "obj1", 4), -ENOSPC);
	expect_obj(s, 1, 101);
	close_on(&d, s);
	/* the DELETE that landed is durable; the refused one left obj1 */
	struct blocker_opts o;
	opts(&o);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	ck_assert_int_eq(blocker_info(s, "obj0", 4, &(uint64_t){0}), -ENOENT);
	expect_obj(s, 1, 101);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/*
 * The mirror image in GC: the pass's checkpoint fails on the full disk,
 * and the reserve it would release is already gone (a DELETE released
 * it, here before the pass, in production maybe since the checkpoint
 * failed), while the room is there again. The pass must try again, not
 * fail with ENOSPC and keep its victims.
 */
static struct blocker_store *hooked_store;

/* GC hook: once the pass has repointed, its checkpoint is refused once */
static void refuse_next_ckpt(void *arg, int point)
{
	struct disk *d = arg;

	if (point != 3) /* GC_HOOK_REPOINTED */
		return;
	d->refuse_ckpt_once = true;
	/* no zeros past the log's tail: their room would let the
	 * checkpoint succeed on its own second try (blocker_checkpoint) */
	ck_assert_int_ge(blog_trim_tail(hooked_store), 0);
}

START_TEST(test_gc_checkpoint_after_reserve_released_elsewhere)
{
	struct disk d;
	struct blocker_store *s = fill_up(&d);
	struct blocker_gc_report rep;

	hooked_store = s;
	/* the first DELETE releases the reserve */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(blocker_delete(s, oname(i), 4), 0);
	ck_assert_uint_eq(s->reserve_held, 0);
	s->gc_hook = refuse_next_ckpt;
	s->gc_hook_arg = &d;
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	s->gc_hook = NULL;
	ck_assert_uint_eq(d.ckpt_refused, 1);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "checkpoint failed"));
	ck_assert_uint_gt(rep.segments_removed, 0);
	expect_writes_back(&d, s);
}
END_TEST

/* GC that frees less than the reserve needs: writes stay refused */
START_TEST(test_full_disk_not_enough_freed)
{
	struct disk d;
	struct blocker_store *s = fill_up(&d);
	struct blocker_gc_report rep;
	struct blocker_stats st;

	/* (almost) nothing dead: a victim would cost more copies than it
	 * gives back, so a full store's pass takes none; writes stay
	 * refused */
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_eq(rep.segments_removed, 0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, ENOSPC);
	ck_assert_int_eq(owrite(s, 2, 999), -ENOSPC);
	/* a pass without victims leaves the reserve whole (review6 F5) */
	ck_assert_uint_eq(s->reserve_held, s->reserve_target);
	ck_assert_uint_eq(d.reserve_freed, 0);
	for (int i = 0; i < NOBJ; i++)
		expect_obj(s, i, 100 + i);
	/* a delete and a pass later, all is well */
	ck_assert_int_eq(blocker_delete(s, "obj0", 4), 0);
	ck_assert_int_eq(blocker_delete(s, "obj1", 4), 0);
	ck_assert_int_eq(blocker_delete(s, "obj2", 4), 0);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_gt(rep.segments_removed, 0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	ck_assert_int_eq(owrite(s, 2, 600), 0);
	expect_obj(s, 2, 600);
	close_on(&d, s);
}
END_TEST

/* Without a reserve the store cannot get out (what R4-6 found). */
START_TEST(test_full_disk_without_reserve)
{
	struct disk d;
	struct blocker_store *s = fill_up_with(&d, BLOCKER_RESERVE_NONE);
	struct blocker_gc_report rep;
	struct blocker_stats st;

	ck_assert_uint_eq(reserve_blocks(), 0);
	ck_assert_int_eq(blocker_delete(s, "obj0", 4), -ENOSPC);
	expect_obj(s, 0, 100);
	/* nothing became dead: nothing to remove */
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_eq(rep.segments_removed, 0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, ENOSPC);
	close_on(&d, s);
}
END_TEST

/* A store degraded by EIO is not let back in by GC, nor collected. */
START_TEST(test_eio_degraded_stays)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_io_fault f;
	struct blocker_gc_report rep;

	opts(&o);
	blocker_io_fault_init(&f, &blocker_io_sync, NULL);
	o.io = &blocker_io_fault_ops;
	o.io_ctx = &f;
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	for (int i = 0; i < NOBJ; i++)
		ck_assert_int_eq(owrite(s, i, 100 + i), 0);
	blocker_io_fault_arm(&f, 0, EIO, 0);
	ck_assert_int_eq(owrite(s, 0, 999), -EIO);
	ck_assert_int_eq(blocker_delete(s, "obj1", 4), -EIO);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	ck_assert_uint_eq(rep.segments_removed, 0);
	expect_obj(s, 1, 101);
	ck_assert_uint_ge(reserve_blocks(), SEG);
	__atomic_store_n(&f.armed, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/*
 * review6 F4: a write error (EIO) that comes after the store was degraded
 * by ENOSPC is a hard error: it replaces the space state, is logged, and
 * no GC pass (which may well free space) lets writes back in.
 */
START_TEST(test_eio_after_enospc_sticks)
{
	struct disk d;
	struct blocker_store *s = fill_up(&d);
	struct blocker_gc_report rep;
	struct blocker_stats st;

	ck_assert_int_eq(blocker_delete(s, "obj0", 4), 0);
	ck_assert_int_eq(blocker_delete(s, "obj1", 4), 0);
	ck_assert_int_eq(blocker_delete(s, "obj2", 4), 0);
	/* the device now fails writes */
	d.full = false;
	blocker_io_fault_arm(&d.f, 0, EIO, 0);
	ck_assert_int_eq(blocker_delete(s, "obj3", 4), -EIO);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, EIO);
	ck_assert_ptr_nonnull(strstr(st.degraded_reason, "write of"));
	ck_assert_ptr_nonnull(strstr(logbuf.text, "was: no space left"));
	/* plenty of room again, and GC may run: the EIO stays */
	blocker_io_fault_arm(&d.f, 1LL << 40, ENOSPC, 0);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), -EIO);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, EIO);
	ck_assert_int_eq(owrite(s, 4, 555), -EIO);
	ck_assert_ptr_null(strstr(logbuf.text, "writes accepted again"));
	expect_obj(s, 4, 104);
	expect_obj(s, 3, 103);
	__atomic_store_n(&d.f.armed, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(blocker_close(s), 0);
}
END_TEST

/*
 * review6 F11: other tenants fill the disk; the store has not failed a
 * write. A DELETE that meets ENOSPC releases the reserve, and that puts
 * the store into ENOSPC mode: foreground writes are refused (they would
 * take the blocks meant for GC), DELETEs and GC are not, and the pass
 * that takes the reserve back lets writes in again.
 */
START_TEST(test_release_refuses_writes)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_gc_report rep;
	struct blocker_stats st;
	struct disk d;

	opts(&o);
	s = open_on(&d, &o);
	for (int i = 0; i < NOBJ; i++)
		ck_assert_int_eq(owrite(s, i, 100 + i), 0);
	ck_assert_int_eq(blocker_flush(s), 0);
	uint64_t held = s->reserve_held;
	ck_assert_uint_gt(held, 0);
	d.full = true;
	blocker_io_fault_arm(&d.f, 0, ENOSPC, 0);
	ck_assert_int_eq(blocker_delete(s, "obj0", 4), 0);
	ck_assert_uint_eq(d.reserve_freed, held);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, ENOSPC);
	ck_assert_ptr_nonnull(strstr(st.degraded_reason, "space reserve"));
	/* the freed blocks are not for foreground writes */
	int64_t budget = __atomic_load_n(&d.f.write_budget, __ATOMIC_RELAXED);
	ck_assert_int_eq(owrite(s, 0, 999), -ENOSPC);
	ck_assert_int_eq(blocker_write(s, "new", 3, 0, 5, "hello", BLOCKER_FUA),
			 -ENOSPC);
	ck_assert_int_eq(__atomic_load_n(&d.f.write_budget, __ATOMIC_RELAXED),
			 budget);
	ck_assert_int_eq(blocker_delete(s, "obj1", 4), 0);
	ck_assert_int_eq(blocker_delete(s, "obj2", 4), 0);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_gt(rep.segments_removed, 0);
	ck_assert_uint_eq(s->reserve_held, s->reserve_target);
	expect_writes_back(&d, s);
}
END_TEST

/*
 * review6 F5: the reserve's default size follows the checkpoint files. A
 * store opened small grows maps and index past what the reserve sized at
 * open could hold; after a checkpoint (as the background thread makes
 * them) the reserve has grown too, so GC on the full disk finds room for
 * its checkpoint and writes come back.
 */
/* small chunks: maps and index grow fast (64 B of them per 512 B) */
enum { SCS = 512, NO = 64 };

static struct blocker_store *open_small(struct disk *d)
{
	struct blocker_opts o;

	opts(&o);
	o.chunk_size = SCS;
	return open_on(d, &o);
}

START_TEST(test_reserve_grows_with_checkpoints)
{
	/* _i 1: no checkpoint since open (checkpoint_bytes 0, "only at
	 * exit"): the reserve follows the maps and index as writes grow
	 * them (review6 probe5) */
	bool ckpt = _i == 0;
	struct blocker_store *s;
	struct blocker_gc_report rep;
	struct blocker_stats st;
	struct disk d;
	uint8_t b[SCS] = {1};

	s = open_small(&d);
	uint64_t target0 = s->reserve_target;
	for (int i = 0; i < NO; i++)
		ck_assert_int_eq(owrite(s, i, 1000 + i), 0);
	if (ckpt)
		ck_assert_int_eq(blocker_checkpoint(s), 0);
	ck_assert_uint_gt(s->reserve_target, target0);
	ck_assert_uint_eq(s->reserve_held, s->reserve_target);
	ck_assert_uint_ge(reserve_blocks(), s->reserve_target);
	d.full = true;
	blocker_io_fault_arm(&d.f, 0, ENOSPC, 0);
	ck_assert_int_eq(owrite(s, NO, 7), -ENOSPC);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(blocker_delete(s, oname(i), strlen(oname(i))),
				 0);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_gt(rep.segments_removed, 0);
	ck_assert_uint_eq(d.ckpt_refused, 0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	ck_assert_int_eq(blocker_write(s, "new", 3, 0, SCS, b, 0), 0);
	expect_obj(s, NO - 1, 1000 + NO - 1);
	close_on(&d, s);
}
END_TEST

/*
 * The growth the reserve follows is what the next checkpoint writes more:
 * an overwrite adds index entries for its new chunks but no map entries,
 * a rewrite of stored data (dedup) nothing, so a long-running store that
 * rewrites its objects without checkpoints does not grow its reserve
 * without bound.
 */
START_TEST(test_reserve_growth_counts_net)
{
	struct disk d;
	struct blocker_store *s = open_small(&d);
	uint64_t g0;

	ck_assert_int_eq(owrite(s, 0, 1), 0);
	g0 = s->reserve_growth;
	/* a new object: its header, a map and an index entry per chunk */
	ck_assert_uint_eq(g0, 18 + 4 + (uint64_t)(OBJ / SCS) * (40 + 16));
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(owrite(s, 0, 2 + k), 0);
	ck_assert_uint_eq(s->reserve_growth - g0,
			  3 * (uint64_t)(OBJ / SCS) * 16);
	g0 = s->reserve_growth;
	ck_assert_int_eq(owrite(s, 0, 1), 0); /* all duplicates */
	ck_assert_uint_eq(s->reserve_growth, g0);
	/* a checkpoint takes it all into its base */
	ck_assert_int_eq(blocker_checkpoint(s), 0);
	ck_assert_uint_eq(s->reserve_growth, 0);
	close_on(&d, s);
}
END_TEST

/*
 * review6 F5 (a): the reserve must grow with the maps and index, and the
 * disk has no room for it (others filled it; the store's writes still
 * fit): writes wait (ENOSPC mode) rather than fill the disk past the
 * point where GC could checkpoint. Once space comes back, a pass takes
 * the grown reserve and lets writes in.
 */
START_TEST(test_reserve_growth_needs_room)
{
	struct blocker_store *s;
	struct blocker_gc_report rep;
	struct disk d;
	uint8_t b[SCS] = {1};
	int i, r = 0;

	s = open_small(&d);
	uint64_t target0 = s->reserve_target;
	/*
	 * Room for the log records of 10 objects (1024 chunk records of
	 * 576 bytes and a map record of 41056: 630880 bytes each) and
	 * 600000 more: the 10th write raises the target by more than the
	 * 1 MiB step (57366 bytes of maps and index per object, twice), and
	 * that growth does not fit, while the next object's records would
	 * not fit either.
	 */
	d.full = true;
	blocker_io_fault_arm(&d.f, 10 * 630880 + 600000, ENOSPC, 0);
	for (i = 0; i < NO && !r; i++) {
		r = owrite(s, i, 1000 + i);
		ck_assert(r == 0 || r == -ENOSPC);
	}
	/* the write whose growth found no room was acknowledged, the next
	 * one was refused with the disk not full */
	struct blocker_stats st;
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_msg(r == -ENOSPC && i == 11, "write %d -> %d (%s)", i, r,
		      st.degraded_reason);
	ck_assert_int_eq(st.degraded_errno, ENOSPC);
	ck_assert_ptr_nonnull(
	    strstr(st.degraded_reason, "grow the space reserve"));
	ck_assert_int_eq(__atomic_load_n(&d.f.write_budget, __ATOMIC_RELAXED),
			 600000);
	ck_assert_uint_eq(s->reserve_held, target0);
	for (int k = 0; k < i - 1; k++)
		expect_obj(s, k, 1000 + k);
	/* others free space: the pass takes the grown reserve, then writes
	 * come back */
	__atomic_store_n(&d.f.write_budget, 64 << 20, __ATOMIC_RELAXED);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_int_eq(blocker_degraded(s), 0);
	ck_assert_uint_gt(s->reserve_target, target0);
	ck_assert_uint_eq(s->reserve_held, s->reserve_target);
	ck_assert_int_eq(blocker_write(s, "new", 3, 0, SCS, b, 0), 0);
	close_on(&d, s);
}
END_TEST

/*
 * review6 F15 (b): a write met ENOSPC because others filled the disk (the
 * reserve stays whole); then they free space. A pass with nothing to
 * collect finds the room (a probe past the reserve) and lets writes in.
 */
START_TEST(test_space_back_from_outside)
{
	struct disk d;
	struct blocker_store *s = fill_up(&d);
	struct blocker_gc_report rep;
	struct blocker_stats st;

	/* still full: the pass changes nothing */
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_int_eq(blocker_degraded(s), ENOSPC);
	/* 64 MiB come back */
	__atomic_store_n(&d.f.write_budget, 64 << 20, __ATOMIC_RELAXED);
	ck_assert_int_eq(blocker_gc(s, NULL, &rep), 0);
	ck_assert_uint_eq(rep.segments_removed, 0);
	ck_assert_int_eq(blocker_get_stats(s, &st), 0);
	ck_assert_int_eq(st.degraded_errno, 0);
	ck_assert_ptr_nonnull(strstr(logbuf.text, "disk has room again"));
	ck_assert_int_eq(owrite(s, 0, 500), 0);
	expect_obj(s, 0, 500);
	close_on(&d, s);
}
END_TEST

/*
 * review6 F15 (a): a DELETE that frees nothing (a snapshot sharing all
 * its chunks) releases the reserve on a full disk; then space comes back.
 * The background GC thread, with nothing to collect, restores the
 * reserve and lets writes in.
 */
START_TEST(test_space_back_background)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct disk d;

	opts(&o);
	o.gc_threshold_pct = 50;
	o.gc_check_ms = 20;
	s = open_on(&d, &o);
	ck_assert_int_eq(owrite(s, 0, 100), 0);
	ck_assert_int_eq(blocker_copy(s, "obj0", 4, "snap", 4), 0);
	ck_assert_int_eq(blocker_flush(s), 0);
	d.full = true;
	blocker_io_fault_arm(&d.f, 0, ENOSPC, 0);
	ck_assert_int_eq(blocker_delete(s, "snap", 4), 0);
	ck_assert_int_eq(blocker_degraded(s), ENOSPC);
	ck_assert_int_eq(owrite(s, 1, 101), -ENOSPC);
	__atomic_store_n(&d.f.write_budget, 64 << 20, __ATOMIC_RELAXED);
	/* (a bound, not a timing assertion: the thread checks every
	 * 20 ms) */
	for (int i = 0; i < 3000 && blocker_degraded(s); i++)
		usleep(10000);
	ck_assert_int_eq(blocker_degraded(s), 0);
	ck_assert_uint_eq(s->reserve_held, s->reserve_target);
	ck_assert_int_eq(owrite(s, 1, 101), 0);
	expect_obj(s, 1, 101);
	expect_obj(s, 0, 100);
	close_on(&d, s);
}
END_TEST

/* Stores made before DIR/reserve, or that lost it, get one at open;
 * reserve_bytes sets its size or turns it off. */
START_TEST(test_reserve_file_open)
{
	struct blocker_opts o;
	struct blocker_store *s;
	char p[512];

	opts(&o);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(reserve_blocks(), 0); /* created by open */
	o.reserve_bytes = BLOCKER_RESERVE_NONE;
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	ck_assert_int_eq(blocker_close(s), 0);
	ck_assert_int_eq(reserve_blocks(), 0);
	o.reserve_bytes = 3u << 20;
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	ck_assert_int_eq(owrite(s, 0, 1), 0);
	ck_assert_int_eq(blocker_close(s), 0);
	ck_assert_uint_ge(reserve_blocks(), 3u << 20);
	/* lost (or a store from before): back at the next open */
	snprintf(p, sizeof(p), "%s/%s", dir, BLOCKER_RESERVE_FILE);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	ck_assert_uint_ge(reserve_blocks(), 3u << 20);
	expect_obj(s, 0, 1);
	ck_assert_int_eq(blocker_close(s), 0);
	/* a short one (a crash while allocating it) is completed */
	ck_assert_int_eq(truncate(p, 4096), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	ck_assert_uint_ge(reserve_blocks(), 3u << 20);
	ck_assert_int_eq(blocker_close(s), 0);
	/* turned off: the blocks go back */
	o.reserve_bytes = BLOCKER_RESERVE_NONE;
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	ck_assert_int_eq(blocker_close(s), 0);
	ck_assert_int_eq(access(p, F_OK), -1);
	/* the operator's values (--reserve): 0 is none, a size at least
	 * 1 MiB; anything else is refused and leaves the option alone */
	uint64_t v = 42;
	ck_assert_int_eq(blocker_reserve_opt(0, &v), 0);
	ck_assert_uint_eq(v, BLOCKER_RESERVE_NONE);
	ck_assert_int_eq(blocker_reserve_opt(1u << 20, &v), 0);
	ck_assert_uint_eq(v, 1u << 20);
	v = 42;
	ck_assert_int_eq(blocker_reserve_opt((1u << 20) - 1, &v), -ERANGE);
	ck_assert_int_eq(blocker_reserve_opt(1, &v), -ERANGE);
	ck_assert_int_eq(blocker_reserve_opt(BLOCKER_RESERVE_NONE, &v),
			 -ERANGE);
	ck_assert_uint_eq(v, 42);
}
END_TEST

/*
 * A kill at each point of the full-disk path (the reserve released by the
 * pass, the reserve reallocated before writes come back), and right after
 * a DELETE released it: the store reopens with everything acknowledged,
 * and its reserve whole again.
 */
struct killer {
	int point;
};

static void kill_hook(void *arg, int point)
{
	struct killer *k = arg;

	if (point == k->point)
		raise(SIGKILL);
}

START_TEST(test_full_disk_kill_points)
{
	static const int points[] = {6, 3, 4, 5, 7, 0};

	for (unsigned n = 0; n < sizeof(points) / sizeof(points[0]); n++) {
		int point = points[n], status;
		pid_t pid;

		ttmp_rmtree(dir);
		ck_assert_int_eq(mkdir(dir, 0700), 0);
		memset(&logbuf, 0, sizeof(logbuf));
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			struct killer k = {point};
			struct disk d;
			struct blocker_store *s = fill_up(&d);
			/* point 6: the deletes find room (the reserve stays
			 * for the pass to release) */
			if (point == 6)
				__atomic_store_n(&d.f.write_budget, 4096,
						 __ATOMIC_RELAXED);
			/* point 0: killed right after a DELETE released it */
			if (blocker_delete(s, "obj0", 4))
				_exit(3);
			if (!point)
				raise(SIGKILL);
			if (blocker_delete(s, "obj1", 4))
				_exit(3);
			if (point == 6) /* full again for the pass */
				__atomic_store_n(&d.f.write_budget, 0,
						 __ATOMIC_RELAXED);
			s->gc_hook = kill_hook;
			s->gc_hook_arg = &k;
			blocker_gc(s, NULL, NULL);
			_exit(4);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFSIGNALED(status) &&
				  WTERMSIG(status) == SIGKILL,
			      "point %d: child status %d", point, status);
		struct blocker_opts o;
		struct blocker_store *s;
		struct blocker_stats st;
		uint8_t b[16];
		opts(&o);
		ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
		ck_assert_int_eq(blocker_get_stats(s, &st), 0);
		ck_assert_int_eq(st.degraded_errno, 0);
		ck_assert_int_eq(blocker_read(s, "obj0", 4, 0, 10, b), -ENOENT);
		if (point)
			ck_assert_int_eq(blocker_read(s, "obj1", 4, 0, 10, b),
					 -ENOENT);
		else
			expect_obj(s, 1, 101);
		for (int i = 2; i < NOBJ; i++)
			expect_obj(s, i, 100 + i);
		ck_assert_uint_ge(reserve_blocks(), SEG + (1u << 20));
		/* and a later pass finishes the job */
		ck_assert_int_eq(blocker_gc(s, NULL, NULL), 0);
		for (int i = 2; i < NOBJ; i++)
			expect_obj(s, i, 100 + i);
		ck_assert_int_eq(owrite(s, 0, 700), 0);
		ck_assert_int_eq(blocker_close(s), 0);
		uint64_t problems = 1;
		ck_assert_int_eq(
		    blocker_check(dir, NULL, NULL, NULL, &problems), 0);
		ck_assert_uint_eq(problems, 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocker_gc_full");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_full_disk_gc_gives_space_back);
	tcase_add_test(tc, test_delete_after_reserve_released_meanwhile);
	tcase_add_test(tc, test_gc_checkpoint_after_reserve_released_elsewhere);
	tcase_add_test(tc, test_full_disk_not_enough_freed);
	tcase_add_test(tc, test_full_disk_without_reserve);
	tcase_add_test(tc, test_eio_degraded_stays);
	tcase_add_test(tc, test_eio_after_enospc_sticks);
	tcase_add_test(tc, test_release_refuses_writes);
	tcase_add_loop_test(tc, test_reserve_grows_with_checkpoints, 0, 2);
	tcase_add_test(tc, test_reserve_growth_needs_room);
	tcase_add_test(tc, test_reserve_growth_counts_net);
	tcase_add_test(tc, test_space_back_from_outside);
	tcase_add_test(tc, test_space_back_background);
	tcase_add_test(tc, test_reserve_file_open);
	tcase_add_test(tc, test_full_disk_kill_points);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
