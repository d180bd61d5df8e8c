/* SPDX-License-Identifier: MIT */
/*
 * The space reserve, DIR/reserve (docs/blocker.md "Full disk";
 * docs/on-disk-format.md "reserve"): a file of preallocated blocks that
 * holds back room for the work that gives space back on a full disk.
 *
 * Garbage collection frees space only by removing segment files, and it
 * may remove one only after a checkpoint that no longer needs it: new
 * maps and index files written next to the old ones (tmp + rename), plus
 * the log records of copies and of the DELETEs that made data dead. On a
 * disk that writes have filled, none of that fits (review R4-6). So the
 * store keeps this file allocated while there is room, and lets it go
 * when a DELETE or a GC pass meets a full disk: truncating it to zero
 * returns its blocks to the file system at once. A GC pass that removed
 * segments allocates it again before writes are let back in.
 *
 * The file holds no data: its size is its only content, it is never read,
 * and a crash at any point leaves a store that opens (open allocates the
 * file again if it is missing or short, as far as there is room). Stores
 * made before it existed open the same way.
 *
 * Locking: reserve_lock orders release and restore (a DELETE and a GC
 * pass may race to release it).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "store_int.h"

static uint64_t file_size(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, 0) == 0 ? (uint64_t)st.st_size : 0;
}

/*
 * The default size: a checkpoint writes both files anew beside the old
 * ones (twice their size leaves room for their growth too), and a pass
 * may copy up to one segment of live chunks.
 */
static uint64_t default_target(struct blocker_store *s)
{
	uint64_t ckpt =
	    __atomic_load_n(&s->reserve_ckpt_base, __ATOMIC_RELAXED) +
	    __atomic_load_n(&s->reserve_growth, __ATOMIC_RELAXED);

	return s->segment_size + 2 * ckpt + (1u << 20);
}

/* the size the reserve should have (see store.h, reserve_bytes) */
static uint64_t reserve_target(struct blocker_store *s)
{
	if (s->o.reserve_bytes == BLOCKER_RESERVE_NONE)
		return 0;
	if (s->o.reserve_bytes)
		return s->o.reserve_bytes;
	return default_target(s);
}

static void set_target(struct blocker_store *s, uint64_t bytes)
{
	__atomic_store_n(&s->reserve_target, bytes, __ATOMIC_RELAXED);
}

static int space_event(struct blocker_store *s, int event, uint64_t bytes)
{
	int (*fn)(void *, int, uint64_t) =
	    __atomic_load_n(&s->space_hook, __ATOMIC_ACQUIRE);

	return fn ? fn(s->space_hook_arg, event, bytes) : 0;
}

/* allocate the reserve up to s->reserve_target; reserve_lock held */
static int allocate(struct blocker_store *s)
{
	uint64_t want = s->reserve_target;
	int fd, r = 0;

	if (s->reserve_held >= want)
		return 0;
	r = space_event(s, BLOCKER_SPACE_RESERVE_ALLOC, want - s->reserve_held);
	if (r)
		return r;
	fd = openat(s->dirfd, BLOCKER_RESERVE_FILE,
		    O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* blocks, not a sparse size: that is the point of the file */
	if (fallocate(fd, 0, 0, (off_t)want) < 0)
		r = -errno;
	else if (fsync(fd) < 0)
		r = -errno;
	if (!r) {
		s->reserve_held = want;
	} else {
		struct stat st;
		/* a failed fallocate may have allocated part of it */
		if (fstat(fd, &st) == 0)
			s->reserve_held = st.st_blocks * 512ULL < want
					      ? st.st_blocks * 512ULL
					      : want;
	}
	close(fd);
	return r;
}

/* allocate() (reserve_lock held); a file system without fallocate is
 * not asked again */
static int allocate_or_wait(struct blocker_store *s)
{
	int r = allocate(s);

	if (r == -EOPNOTSUPP)
		s->reserve_unsupported = true;
	return r;
}

/*
 * After a failed allocate_or_wait, with reserve_lock dropped (degrading
 * and blocker_opts.log must not run under store locks, review7 N3): log
 * it, and if the disk has no room for the reserve (at open, or when it
 * must grow; review6 F5 (a)) the store enters ENOSPC mode: writes wait,
 * as after a release, until GC or others make room, since a store that
 * went on writing would fill the disk past the point where GC can write
 * its checkpoint. verb names the attempt.
 */
static void log_short(struct blocker_store *s, const char *verb, uint64_t want,
		      uint64_t held, int r)
{
	if (!r)
		return;
	if (r == -ENOSPC)
		blocker_degrade(s, ENOSPC,
				"no room to %s the space reserve (%llu "
				"bytes): writes wait for GC or free space",
				verb, (unsigned long long)want);
	blocker_logf(&s->o, BLOCKER_LOG_WARN,
		     "blocker: %s/%s: cannot %s the space reserve to %llu "
		     "bytes (%s; %llu held): GC on a full disk may not find "
		     "room for its checkpoint%s",
		     s->dir, BLOCKER_RESERVE_FILE, verb,
		     (unsigned long long)want, strerror(-r),
		     (unsigned long long)held,
		     r == -ENOSPC ? "; writes wait until there is room" : "");
}

void bres_open(struct blocker_store *s)
{
	int r;

	/* a probe a crash left behind holds blocks (review6 F17); so do the
	 * temporary files of blocker_write_file_atomic that a crash stopped
	 * before their rename, a checkpoint's maps.tmp and index.tmp as large
	 * as the maps and the index: on a full disk they took the room the
	 * reserve needs until the next checkpoint truncated them
	 * (safety21gc). Never read: the renamed file is the only copy that
	 * counts. Not super.tmp (a create that did not finish is create's), nor
	 * sync_error.tmp: a failed log fsync whose record a crash stopped is
	 * evidence an operator may want (review21a R3). */
	static const char *const left[] = {
	    "reserve.probe", BLOCKER_MAPS_FILE ".tmp",
	    BLOCKER_INDEX_FILE ".tmp", BLOCKER_GC_FILE ".tmp",
	    BLOCKER_MARK_FILE ".tmp"};

	for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++)
		unlinkat(s->dirfd, left[i], 0);
	/* what the next checkpoint writes: the maps and index as recovery
	 * left them (the files on disk may be older), and their headers */
	uint64_t files = file_size(s->dirfd, BLOCKER_MAPS_FILE) +
			 file_size(s->dirfd, BLOCKER_INDEX_FILE);
	uint64_t mem = bmaps_ckpt_bytes(s) + 16 * s->index.count + 4096;
	__atomic_store_n(&s->reserve_ckpt_base, mem > files ? mem : files,
			 __ATOMIC_RELAXED);
	pthread_mutex_lock(&s->reserve_lock);
	set_target(s, reserve_target(s));
	if (!s->reserve_target) {
		/* turned off: the blocks an earlier run held go back */
		unlinkat(s->dirfd, BLOCKER_RESERVE_FILE, 0);
		pthread_mutex_unlock(&s->reserve_lock);
		return;
	}
	/* what an earlier run left: allocated blocks count */
	struct stat st;
	if (fstatat(s->dirfd, BLOCKER_RESERVE_FILE, &st, 0) == 0)
		s->reserve_held = st.st_blocks * 512ULL;
	r = allocate_or_wait(s);
	uint64_t want = s->reserve_target, held = s->reserve_held;
	pthread_mutex_unlock(&s->reserve_lock);
	log_short(s, "allocate", want, held, r);
}

/*
 * Raise the target to want and allocate the file while the store is
 * healthy (after a release, bres_restore allocates the new size).
 */
static void grow(struct blocker_store *s, uint64_t want)
{
	uint64_t held;
	int r = 0;

	pthread_mutex_lock(&s->reserve_lock);
	if (want > s->reserve_target) {
		set_target(s, want);
		if (!s->reserve_released && !blocker_degraded(s) &&
		    !s->reserve_unsupported)
			r = allocate_or_wait(s);
	}
	held = s->reserve_held;
	pthread_mutex_unlock(&s->reserve_lock);
	log_short(s, "grow", want, held, r);
}

void bres_note(struct blocker_store *s, uint64_t bytes)
{
	__atomic_fetch_add(&s->reserve_growth, bytes, __ATOMIC_RELAXED);
}

void bres_grew(struct blocker_store *s)
{
	uint64_t want, have, step;

	if (s->o.reserve_bytes)
		return; /* a fixed size, or none */
	want = default_target(s);
	have = __atomic_load_n(&s->reserve_target, __ATOMIC_RELAXED);
	/* in steps: each costs an fallocate and an fsync */
	step = have / 32 > (1u << 20) ? have / 32 : (1u << 20);
	if (want < have + step)
		return;
	grow(s, want);
}

int bres_release(struct blocker_store *s)
{
	uint64_t held;
	int fd, r = 0;

	pthread_mutex_lock(&s->reserve_lock);
	held = s->reserve_held;
	if (!held) {
		pthread_mutex_unlock(&s->reserve_lock);
		return 1;
	}
	/*
	 * Writes wait first (review6 F11): the freed blocks are for DELETEs,
	 * GC's copies and its checkpoint; a healthy store that kept taking
	 * writes would hand them to the next foreground write, and the next
	 * full disk would find no way out. GC lifts this once the reserve
	 * is whole again (blocker_gc). No effect on a store already
	 * degraded. (sync_lock nests inside reserve_lock.)
	 */
	blocker_degrade(s, ENOSPC,
			"the space reserve was released (the disk is full): "
			"writes wait for GC to take it back");
	fd = openat(s->dirfd, BLOCKER_RESERVE_FILE, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
	} else {
		/* the fsync commits the truncation: a file system may hand
		 * freed blocks out again only after that */
		if (ftruncate(fd, 0) < 0 || fsync(fd) < 0)
			r = -errno;
		close(fd);
	}
	if (!r) {
		s->reserve_held = 0;
		s->reserve_released += held;
		space_event(s, BLOCKER_SPACE_RESERVE_FREED, held);
	}
	pthread_mutex_unlock(&s->reserve_lock);
	if (!r)
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s/%s: released %llu bytes of reserved "
			     "space (the disk is full)",
			     s->dir, BLOCKER_RESERVE_FILE,
			     (unsigned long long)held);
	return r;
}

int bres_restore(struct blocker_store *s)
{
	int r;

	pthread_mutex_lock(&s->reserve_lock);
	/* the size the maps and index need now, not at the last growth */
	if (s->reserve_target && !s->o.reserve_bytes &&
	    default_target(s) > s->reserve_target)
		set_target(s, default_target(s));
	r = s->reserve_target ? allocate(s) : 0;
	if (!r)
		s->reserve_released = 0;
	pthread_mutex_unlock(&s->reserve_lock);
	return r;
}

uint64_t bres_room(struct blocker_store *s)
{
	uint64_t room;

	pthread_mutex_lock(&s->reserve_lock);
	room = s->reserve_held + s->reserve_released;
	pthread_mutex_unlock(&s->reserve_lock);
	return room;
}

void bres_checkpointed(struct blocker_store *s, uint64_t ckpt_bytes,
		       uint64_t growth)
{
	/* the growth the checkpoint covered is in ckpt_bytes now */
	__atomic_fetch_sub(&s->reserve_growth, growth, __ATOMIC_RELAXED);
	__atomic_store_n(&s->reserve_ckpt_base, ckpt_bytes, __ATOMIC_RELAXED);
	if (s->o.reserve_bytes)
		return; /* a fixed size, or none */
	/* never shrinks while open: deletes make room that GC gives back
	 * only later */
	grow(s, default_target(s));
}

bool bres_full(struct blocker_store *s)
{
	bool full;

	pthread_mutex_lock(&s->reserve_lock);
	full = s->reserve_held >= s->reserve_target;
	pthread_mutex_unlock(&s->reserve_lock);
	return full;
}

int bres_probe(struct blocker_store *s, uint64_t bytes)
{
	static const char name[] = "reserve.probe"; /* bres_open too */
	int fd, r;

	r = space_event(s, BLOCKER_SPACE_RESERVE_ALLOC, bytes);
	if (r)
		return r;
	fd = openat(s->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
		    0600);
	if (fd < 0) {
		r = -errno;
	} else {
		if (fallocate(fd, 0, 0, (off_t)bytes) < 0)
			r = -errno;
		close(fd);
		unlinkat(s->dirfd, name, 0);
	}
	space_event(s, BLOCKER_SPACE_RESERVE_FREED, bytes);
	return r;
}

int blocker_reserve_opt(uint64_t bytes, uint64_t *reserve_bytes)
{
	if (!bytes) {
		*reserve_bytes = BLOCKER_RESERVE_NONE;
		return 0;
	}
	if (bytes < BLOCKER_RESERVE_MIN || bytes >= BLOCKER_RESERVE_NONE)
		return -ERANGE;
	*reserve_bytes = bytes;
	return 0;
}
