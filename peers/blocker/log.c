/* SPDX-License-Identifier: MIT */
/*
 * The log: segment files DIR/log.NNNNNN of at most segment_size bytes.
 * A log position is seg * segment_size + offset; a record never crosses a
 * segment, so a segment may end short of segment_size. Appends are
 * serialised by append_lock (the log order is the replay order); durability
 * comes from blog_flush(), a group commit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
/*
 * Library calls, not liburcu's inline read side (_LGPL_SOURCE): the inline
 * code touches the registry entry liburcu-bp allocates less aligned than
 * its type declares (UBSan reports it), and ThreadSanitizer would see
 * liburcu's internal accesses. A call per read section costs nothing next
 * to the read itself.
 */
#include <urcu/urcu-bp.h>
#include "peer_util.h"
#include "store_int.h"
#include "xtime.h"

#if defined(AC_TSAN)
#include <sanitizer/tsan_interface.h>
/*
 * liburcu synchronises in code ThreadSanitizer does not see: tell it that
 * a reader's section happens before the end of the next grace period (so
 * that closing a removed segment's fd after blocker_rcu_sync is not a race
 * with a pread that ended before).
 */
static int rcu_tsan_sync;
#define RCU_TSAN_RELEASE() __tsan_release(&rcu_tsan_sync)
#define RCU_TSAN_ACQUIRE() __tsan_acquire(&rcu_tsan_sync)
#else
#define RCU_TSAN_RELEASE() ((void)0)
#define RCU_TSAN_ACQUIRE() ((void)0)
#endif

void blocker_rcu_lock(void)
{
	urcu_bp_read_lock();
}

void blocker_rcu_unlock(void)
{
	RCU_TSAN_RELEASE();
	urcu_bp_read_unlock();
}

void blocker_rcu_sync(void)
{
	urcu_bp_synchronize_rcu();
	RCU_TSAN_ACQUIRE();
}

bool blog_seg_name(const char *name, uint32_t *seg)
{
	const char *num = name + 4;
	char *end;
	unsigned long v;

	if (strncmp(name, "log.", 4) || strlen(num) < 6 || num[0] < '0' ||
	    num[0] > '9')
		return false;
	errno = 0;
	v = strtoul(num, &end, 10);
	if (*end || errno || v > UINT32_MAX)
		return false;
	*seg = (uint32_t)v;
	return true;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int blog_segs_after(struct blocker_store *s, uint32_t **out, uint32_t *nout)
{
	uint32_t *found = NULL, n = 0, cap = 0;
	int fd = dup(s->dirfd), r = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		uint32_t v;

		if (!blog_seg_name(de->d_name, &v) || v < s->nsegs)
			continue;
		if (n == cap) {
			uint32_t *nf = realloc(found, (cap ? 2 * cap : 8) *
							  sizeof(*found));
			if (!nf) {
				r = -ENOMEM;
				break;
			}
			found = nf;
			cap = cap ? 2 * cap : 8;
		}
		found[n++] = v;
	}
	closedir(d);
	if (r) {
		free(found);
		return r;
	}
	if (n)
		qsort(found, n, sizeof(*found), cmp_u32);
	*out = found;
	*nout = n;
	return 0;
}

int blog_seg_path(const char *dir, uint32_t seg, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "%s/log.%06u", dir, seg);

	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/*
 * The first cause wins, with one exception: an ENOSPC degradation is a
 * space state that GC may lift (blocker_undegrade_nospc), so a later hard
 * error (EIO, a failed fsync, ...) replaces it and is never lifted that
 * way. A hard error that meets a hard degradation changes nothing but is
 * still logged: the operator must see every failed write. pinned marks an
 * ENOSPC that freed space does not cure (log address space exhausted).
 */
static void degrade_msg(struct blocker_store *s, int err, bool pinned,
			const char *msg)
{
	bool changed = false;
	int cur;

	pthread_mutex_lock(&s->sync_lock);
	cur = __atomic_load_n(&s->degraded, __ATOMIC_RELAXED);
	if (!cur || (cur == ENOSPC && err != ENOSPC)) {
		__atomic_store_n(&s->degraded, err, __ATOMIC_RELEASE);
		memcpy(s->degraded_reason, msg, sizeof(s->degraded_reason));
		changed = true;
	}
	if (pinned)
		s->degraded_pinned = true;
	pthread_mutex_unlock(&s->sync_lock);
	if (changed)
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: degraded (writes refused, reads "
			     "served)%s: %s",
			     s->dir,
			     cur == ENOSPC ? " (was: no space left on device)"
					   : "",
			     msg);
	else if (err != ENOSPC)
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: already degraded (%s): %s", s->dir,
			     strerror(cur), msg);
}

void blocker_degrade(struct blocker_store *s, int err, const char *fmt, ...)
{
	char msg[sizeof(s->degraded_reason)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	degrade_msg(s, err, false, msg);
}

void blocker_undegrade_nospc(struct blocker_store *s, const char *why)
{
	bool done = false;

	/* no append in progress; a failed one was undone (write_all) */
	pthread_mutex_lock(&s->append_lock);
	pthread_mutex_lock(&s->sync_lock);
	if (s->degraded == ENOSPC && !s->sync_err && !s->degraded_pinned) {
		__atomic_store_n(&s->degraded, 0, __ATOMIC_RELEASE);
		s->degraded_reason[0] = 0;
		done = true;
	}
	pthread_mutex_unlock(&s->sync_lock);
	pthread_mutex_unlock(&s->append_lock);
	if (done)
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: writes accepted again: %s", s->dir,
			     why);
}

/*
 * Map the pages of a segment's file that are in the page cache now
 * (mincore), and only those: a first read of a freshly mapped page faults
 * (fault-around maps up to 16 cached neighbours), and on this VM each
 * fault costs as much as several chunk reads. Pages not cached are left
 * alone, so opening a cold store reads nothing from disk. Best effort: a
 * kernel without MADV_POPULATE_READ (before 5.14), or a page evicted
 * meanwhile (populating it reads that one page), changes nothing else. A
 * syscall, so a page past the end of a cut file is an error here, not a
 * SIGBUS.
 *
 * It costs about 1 us per page on this VM (30-50 ms per 128 MiB cached
 * under load), so open maps at most POPULATE_MAX bytes, newest segments
 * first (the data most likely read next); the rest faults in as before.
 * *budget: bytes still allowed, less what this call mapped.
 */
#define POPULATE_MAX (256ull << 20)

static void seg_populate(struct blocker_store *s, const uint8_t *map, int fd,
			 uint64_t *budget)
{
#ifdef MADV_POPULATE_READ
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), len, n;
	unsigned char *vec;
	struct stat st;

	if (fstat(fd, &st) < 0 || st.st_size <= 0)
		return;
	len = (uint64_t)st.st_size < s->segment_size ? (size_t)st.st_size
						     : s->segment_size;
	n = (len + pg - 1) / pg;
	vec = malloc(n);
	if (!vec)
		return;
	if (mincore((void *)map, n * pg, vec) == 0) {
		for (size_t a = 0, b; a < n && *budget >= pg; a = b) {
			for (; a < n && !(vec[a] & 1); a++)
				;
			for (b = a; b < n && (vec[b] & 1) &&
				    (b - a + 1) * pg <= *budget;
			     b++)
				;
			if (b == a)
				continue;
			if (madvise((void *)(map + a * pg), (b - a) * pg,
				    MADV_POPULATE_READ) < 0 &&
			    errno == EINVAL) {
				*budget = 0; /* not supported */
				break;
			}
			*budget -= (b - a) * pg;
		}
	}
	free(vec);
#else
	(void)s;
	(void)map;
	(void)fd;
	*budget = 0;
#endif
}

/* fd < 0: a placeholder for a segment GC removed */
static int seg_push(struct blocker_store *s, int fd)
{
	const uint8_t *map = NULL;

	/* (the offline checker opens segments without blocker_open: no
	 * mapping without the SIGBUS guard) */
	if (s->o.mmap_reads && fd >= 0 && !bguard_install()) {
		void *m =
		    mmap(NULL, s->segment_size, PROT_READ, MAP_SHARED, fd, 0);
		/* reads of this segment go through the backend instead */
		if (m == MAP_FAILED)
			blocker_logf(&s->o, BLOCKER_LOG_WARN,
				     "blocker: %s: cannot map log segment "
				     "%u: %s; reading it with %s",
				     s->dir, s->nsegs, strerror(errno),
				     s->io->name);
		else
			map = m;
	}
	pthread_rwlock_wrlock(&s->segs_lock);
	if (s->nsegs == s->segs_cap) {
		uint32_t ncap = s->segs_cap ? 2 * s->segs_cap : 16;
		struct bseg *n = realloc(s->segs, ncap * sizeof(*n));
		if (!n) {
			pthread_rwlock_unlock(&s->segs_lock);
			if (map)
				munmap((void *)map, s->segment_size);
			return -ENOMEM;
		}
		s->segs = n;
		s->segs_cap = ncap;
	}
	s->segs[s->nsegs++] = (struct bseg){.fd = fd,
					    .map = map,
					    .removed = fd < 0,
					    .valid_end = s->segment_size};
	pthread_rwlock_unlock(&s->segs_lock);
	return 0;
}

/*
 * A store whose first segment may be (re)created empty: nothing was ever
 * written to it, so no later segment, no checkpoint and no durable mark
 * exist. blocker_create makes log.000000; a store missing it otherwise
 * lost it (damage: open must refuse, review R4-3), unless DIR/gc lists
 * it as removed by GC.
 */
bool blog_never_written(struct blocker_store *s)
{
	static const char *const written[] = {"log.000001", BLOCKER_MAPS_FILE,
					      BLOCKER_INDEX_FILE,
					      BLOCKER_MARK_FILE};

	for (size_t i = 0; i < sizeof(written) / sizeof(written[0]); i++)
		if (faccessat(s->dirfd, written[i], F_OK, 0) == 0)
			return false;
	return true;
}

/*
 * GC never removes the segment the tail is in, so every segment DIR/gc
 * lists lies below the last segment of the log (the highest-numbered
 * segment file: recovery drops an empty last one only when the one before
 * it was not removed). A list that names the last segment or one
 * past it (a crafted or damaged file with a valid CRC) is refused before
 * anything is unlinked: blog_open_segments takes a listed file that still
 * exists for a removal a crash left unfinished, and would have unlinked
 * the log's real last segment, or, once the log grew that far, a later
 * one (review21a R4). removed is sorted (bgc_load).
 *
 * One exception, under truncate_at_damage only: entries past the last
 * segment file (none of them has a file, so nothing is unlinked) are what
 * a crash inside an older build's truncate_at_damage cut left (it unlinked
 * the segments after the cut before it rewrote DIR/gc; cut_tail now
 * rewrites DIR/gc first). bgc_load left them out of removed[] (past
 * counts them, end is one past the highest listed); *rewrite is set: the
 * caller saves DIR/gc without them, so that the next open without the
 * option accepts the store. An entry naming the last file itself stays
 * refused: dropping it would keep a segment GC said it removed.
 * found[n]: every segment file, sorted. 0 or -EUCLEAN.
 */
static int gc_list_check(struct blocker_store *s, const uint32_t *removed,
			 uint32_t nremoved, uint32_t past, uint32_t end,
			 const uint32_t *found, uint32_t n, bool repair,
			 bool *rewrite)
{
	/* removed[] holds only entries up to the last file (bgc_load's
	 * nslots); past counts the ones after it */
	if (n && !past && removed[nremoved - 1] < found[n - 1])
		return 0;
	if (repair && n && past &&
	    (!nremoved || removed[nremoved - 1] < found[n - 1])) {
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s/%s: lists %u segment(s) past the "
			     "log's last segment (log.%06u) as removed by GC, "
			     "as an interrupted truncate_at_damage cut leaves "
			     "it; truncate_at_damage: dropping them from the "
			     "list",
			     s->dir, BLOCKER_GC_FILE, past, found[n - 1]);
		*rewrite = true;
		return 0;
	}
	blocker_logf(
	    &s->o, BLOCKER_LOG_ERR,
	    "blocker: %s/%s: corrupt: lists segment %u as removed by "
	    "GC, at or past the log's last segment%s: GC never "
	    "removes the last one%s",
	    s->dir, BLOCKER_GC_FILE, past ? end - 1 : removed[nremoved - 1],
	    n ? "" : " (none is left)",
	    /* only where the repair above would accept the list:
	     * an entry naming the last file is refused by it too
	     * (review22s F7) */
	    n && past && (!nremoved || removed[nremoved - 1] < found[n - 1])
		? " (an interrupted truncate_at_damage repair "
		  "leaves this: run it again)"
		: "");
	return -EUCLEAN;
}

/*
 * Listed segment files that still exist: what a crash between writing
 * DIR/gc and the unlinks left (GC writes DIR/gc, then unlinks its
 * victims, all below the tail's segment, the last step of a pass);
 * removing them finishes that pass. Here they are only marked
 * (file_left); blog_finish_gc_removals unlinks them. Called once the
 * segments are open and the layout checks of blog_open_segments passed.
 * A normal open finishes the removals only after recovery accepted the
 * store (blocker_open), because a refused open must change nothing on
 * disk: recovery may still refuse a stray after a gap (found[] at or
 * past nsegs, stray_segments), a checkpoint beyond the end of the log or
 * damage below the mark, and before session 23 such an open had already
 * unlinked the listed files (review22s F8: a list naming the real
 * segments beside a stray log.4000000000 got them all unlinked;
 * review23h F1: a killed GC's victim unlinked by an open refused for a
 * cut last segment). Nothing in a normal open's recovery needs the files
 * gone: replay and the checkpoint checks go by the removed flags, a
 * torn-tail cut touches only the last segment (never listed), and
 * stray_segments looks only past nsegs. truncate_at_damage (only that)
 * finishes them here, before the repair: cut_tail drops listed entries
 * past its cut from DIR/gc without unlinking their files, relying on
 * this, and a file left unlisted past the new tail would later be read
 * as a live segment or reused by number. Every layout a legitimate crash
 * leaves still has its removals finished: a killed GC leaves its listed
 * victims, each followed (up to the tail's file) by files or other
 * listed numbers, so no file lies after a gap; cut_tail rewrites DIR/gc
 * before it unlinks anything, so it leaves no listed file behind it,
 * only unlisted ones after its cut, which truncate_at_damage removes as
 * strays.
 */
static void mark_gc_files_left(struct blocker_store *s, const uint32_t *found,
			       uint32_t nfound)
{
	for (uint32_t i = 0; i < nfound && found[i] < s->nsegs; i++)
		if (s->segs[found[i]].removed)
			s->segs[found[i]].file_left = true;
}

int blog_finish_gc_removals(struct blocker_store *s)
{
	char path[4096];

	/* before GC's thread starts: no lock needed for segs */
	for (uint32_t seg = 0; seg < s->nsegs; seg++) {
		if (!s->segs[seg].file_left)
			continue;
		blog_seg_path(s->dir, seg, path, sizeof(path));
		if (unlink(path) == 0) {
			blocker_logf(&s->o, BLOCKER_LOG_INFO,
				     "blocker: %s: removed by GC; "
				     "finishing its removal",
				     path);
		} else if (errno != ENOENT) {
			/* a listed file left in place would be taken for
			 * a live segment once a repair's cut drops it from
			 * DIR/gc (review23h F4): refuse instead, with the
			 * file still listed */
			int r = -errno;

			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s: removed by GC, but "
				     "finishing its removal failed: %s; "
				     "refusing to open (remove the cause "
				     "and open again)",
				     path, strerror(-r));
			return r;
		}
		s->segs[seg].file_left = false;
	}
	return 0;
}

/*
 * Open every existing segment log.000000.. in order: they must be dense,
 * except for the ones DIR/gc lists as removed by GC, which get
 * placeholders (a listed file that still exists is removed afterwards,
 * blog_finish_gc_removals).
 */
int blog_open_segments(struct blocker_store *s, bool create_first)
{
	uint32_t *removed = NULL, nremoved = 0, k = 0, past, end;
	uint32_t *found = NULL, nfound = 0, nslots = 0;
	uint64_t budget = POPULATE_MAX;
	bool rewrite = false;
	char path[4096];
	int r;

	/* every segment file (nsegs is still 0), past any gap: a segment
	 * lost below the last one is the loop's own refusal ("missing");
	 * the list cannot name more segments than the slots up to the last
	 * one, nor more than positions can address */
	r = blog_segs_after(s, &found, &nfound);
	if (r)
		return r;
	if (nfound) {
		uint64_t max = BIDX_MAX_POS / s->segment_size;

		nslots = (uint64_t)found[nfound - 1] + 1 < max
			     ? found[nfound - 1] + 1
			     : (uint32_t)max;
	}
	r = bgc_load(s->dirfd, nslots, &removed, &nremoved, &past, &end,
		     &s->gc_ckpt);
	if (r == -ENOENT) {
		r = 0;
	} else if (r) {
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s/%s: corrupt: cannot tell segments "
			     "removed by GC from lost ones",
			     s->dir, BLOCKER_GC_FILE);
		free(found);
		s->gc_refused = true;
		return -EUCLEAN;
	}
	if (!r && end) {
		r = gc_list_check(
		    s, removed, nremoved, past, end, found, nfound,
		    create_first && s->o.truncate_at_damage, &rewrite);
		s->gc_refused = r != 0;
	}
	for (uint32_t seg = 0; !r; seg++) {
		int fd;

		r = blog_seg_path(s->dir, seg, path, sizeof(path));
		if (r)
			break;
		while (k < nremoved && removed[k] < seg)
			k++;
		if (k < nremoved && removed[k] == seg) {
			r = seg_push(s, -1);
			if (r)
				break;
			continue;
		}
		fd = open(path, O_RDWR | O_CLOEXEC);
		/* not created here: recovery may still refuse the store (a
		 * stray segment file, review23h F2), and a refused open
		 * creates nothing; blocker_open does once it is accepted
		 * (blog_create_first) */
		if (fd < 0 && errno == ENOENT && seg == 0 && create_first &&
		    blog_never_written(s)) {
			s->seg0_pending = true;
			break;
		}
		if (fd < 0 && errno == ENOENT)
			break;
		if (fd < 0) {
			r = -errno;
			break;
		}
		r = seg_push(s, fd);
		if (r) {
			close(fd);
			break;
		}
	}
	free(removed);
	if (!r && s->nsegs == 0 && !blog_never_written(s)) {
		blog_seg_path(s->dir, 0, path, sizeof(path));
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: missing in a store that was written "
			     "to (not removed by GC): refusing to open",
			     path);
		r = -EUCLEAN;
	}
	if (!r && s->nsegs && s->segs[s->nsegs - 1].removed) {
		blog_seg_path(s->dir, s->nsegs, path, sizeof(path));
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: missing after segments removed by "
			     "GC: the log has no last segment",
			     path);
		r = -EUCLEAN;
	}
	/* entries gc_list_check dropped: DIR/gc without them, before
	 * anything relies on the list (recovery may rewrite it again) */
	if (!r && rewrite)
		r = bgc_save(s, s->gc_ckpt);
	/* check (create_first false) changes nothing; a normal open
	 * finishes the removals once recovery accepted the store */
	if (!r && create_first) {
		mark_gc_files_left(s, found, nfound);
		if (s->o.truncate_at_damage)
			r = blog_finish_gc_removals(s);
	}
	free(found);
	/* nothing else runs yet: no lock needed for segs */
	for (uint32_t seg = s->nsegs; !r && seg-- > 0 && budget;) {
		if (s->segs[seg].map)
			seg_populate(s, s->segs[seg].map, s->segs[seg].fd,
				     &budget);
	}
	return r;
}

int blog_create_first(struct blocker_store *s)
{
	char path[4096];
	int fd, r;

	if (!s->seg0_pending)
		return 0;
	r = blog_seg_path(s->dir, 0, path, sizeof(path));
	if (r)
		return r;
	/* (EXCL: the flock is held, so nobody else made it meanwhile) */
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = seg_push(s, fd);
	if (r) {
		close(fd);
		unlink(path);
		return r;
	}
	/* the first flush fsyncs the directory for its name */
	__atomic_fetch_add(&s->dir_seq, 1, __ATOMIC_RELEASE);
	s->seg0_pending = false;
	return 0;
}

int blog_fd(struct blocker_store *s, uint64_t pos, int *fd, uint64_t *off)
{
	uint64_t seg = pos / s->segment_size;
	int r = 0;

	pthread_rwlock_rdlock(&s->segs_lock);
	if (seg >= s->nsegs)
		r = -ERANGE;
	else if (s->segs[seg].fd < 0)
		r = -ESTALE;
	else
		*fd = s->segs[seg].fd;
	pthread_rwlock_unlock(&s->segs_lock);
	*off = pos % s->segment_size;
	return r;
}

bool blog_pos_victim(struct blocker_store *s, uint64_t pos)
{
	uint64_t seg = pos / s->segment_size;
	bool v = false;

	if (!__atomic_load_n(&s->gc_victims, __ATOMIC_ACQUIRE))
		return false;
	pthread_rwlock_rdlock(&s->segs_lock);
	if (seg < s->nsegs)
		v = s->segs[seg].victim;
	pthread_rwlock_unlock(&s->segs_lock);
	return v;
}

int64_t blog_seg_end(struct blocker_store *s, uint32_t seg)
{
	struct stat st;
	int fd, r;
	uint64_t off, data_end = 0;

	pthread_rwlock_rdlock(&s->segs_lock);
	if (seg < s->nsegs)
		data_end = s->segs[seg].data_end;
	pthread_rwlock_unlock(&s->segs_lock);
	/* GC may be removing the segment: keep its fd open meanwhile */
	blocker_rcu_lock();
	r = blog_fd(s, (uint64_t)seg * s->segment_size, &fd, &off);
	if (!r && !data_end && fstat(fd, &st) < 0)
		r = -errno;
	/*
	 * A segment sealed before this open whose records recovery did not
	 * scan (they lie below the checkpoint): its records end before the
	 * hole that fills it to segment_size. Stop there, as an upper
	 * bound: a read of the hole through a mapping would allocate pages
	 * on a tmpfs, which a full disk refuses (recover.c); GC's walk
	 * ends at the zeros before it (copy_victim).
	 */
	if (!r && !data_end && (uint64_t)st.st_size == s->segment_size) {
		off_t hole = lseek(fd, 0, SEEK_HOLE);
		if (hole >= 0 && hole < st.st_size &&
		    lseek(fd, hole, SEEK_DATA) < 0 && errno == ENXIO)
			st.st_size = hole;
	}
	blocker_rcu_unlock();
	if (r)
		return r;
	if (data_end)
		return (int64_t)seg * s->segment_size + data_end;
	return (int64_t)seg * s->segment_size + st.st_size;
}

/*
 * Count a read error of segment seg; should its log line be written? The
 * first few of every segment, then one in 1024: a client re-reading a
 * damaged chunk must not flood the log (review6 F10). *n: the count.
 */
static bool seg_read_error(struct blocker_store *s, uint64_t seg, uint64_t *n)
{
	STAT_INC(s, read_errors);
	return blog_seg_error_log(s, seg, n);
}

bool blog_seg_error_log(struct blocker_store *s, uint64_t seg, uint64_t *n)
{
	*n = 1;
	pthread_rwlock_rdlock(&s->segs_lock);
	if (seg < s->nsegs)
		*n = __atomic_add_fetch(&s->segs[seg].errors, 1,
					__ATOMIC_RELAXED);
	pthread_rwlock_unlock(&s->segs_lock);
	return *n <= 8 || *n % 1024 == 0;
}

static void seg_set_valid_end(struct blocker_store *s, uint64_t seg,
			      uint64_t end)
{
	pthread_rwlock_rdlock(&s->segs_lock);
	if (seg < s->nsegs)
		__atomic_store_n(&s->segs[seg].valid_end, end,
				 __ATOMIC_RELAXED);
	pthread_rwlock_unlock(&s->segs_lock);
}

/* Size of segment seg's file, or -1 (fstat failed, or removed). */
static int64_t seg_file_size(struct blocker_store *s, uint64_t seg)
{
	struct stat st;
	int64_t size = -1;
	uint64_t o;
	int fd;

	/* the caller's read section keeps the fd open; nest one anyway */
	blocker_rcu_lock();
	if (!blog_fd(s, seg * s->segment_size, &fd, &o) && !fstat(fd, &st))
		size = st.st_size;
	blocker_rcu_unlock();
	return size;
}

/*
 * A mapped read of segment seg at off faulted at fault (an offset in the
 * segment). Says why as well as the file can tell: a page past its end
 * (the file was truncated behind the store's back: later reads past the
 * end go to the backend) or an I/O error.
 */
static void map_fault(struct blocker_store *s, uint64_t seg, uint64_t off,
		      size_t fault)
{
	char path[4096], why[96];
	int64_t size = seg_file_size(s, seg);
	uint64_t n;

	if (size >= 0 && (uint64_t)size <= fault)
		seg_set_valid_end(s, seg, size);
	if (!seg_read_error(s, seg, &n))
		return;
	blog_seg_path(s->dir, seg, path, sizeof(path));
	if (size < 0)
		snprintf(why, sizeof(why), "SIGBUS (I/O error or truncated)");
	else if ((uint64_t)size <= fault)
		snprintf(why, sizeof(why),
			 "SIGBUS: the file ends at %llu (truncated)",
			 (unsigned long long)size);
	else
		snprintf(why, sizeof(why), "SIGBUS: I/O error");
	blocker_logf(&s->o, BLOCKER_LOG_ERR,
		     "blocker: %s: read at offset %llu failed: %s at offset "
		     "%llu; the read fails with EIO (read error %llu of this "
		     "segment)",
		     path, (unsigned long long)off, why,
		     (unsigned long long)fault, (unsigned long long)n);
}

/*
 * An unverified mapped read whose last byte is zero may have read the
 * zeros a mapping shows past the end of a file cut inside that page (no
 * SIGBUS there): every cut inside the range leaves its last byte zero, so
 * checking the file size then (one fstat, for ~1/256 of the reads of
 * random data) catches every such cut. True if the file ends before end.
 */
static bool map_short(struct blocker_store *s, uint64_t seg, uint64_t end)
{
	int64_t size = seg_file_size(s, seg);

	if (size < 0 || (uint64_t)size >= end)
		return false;
	seg_set_valid_end(s, seg, size);
	return true;
}

static bool iov_last_zero(const struct iovec *iov, int cnt)
{
	for (int i = cnt - 1; i >= 0; i--)
		if (iov[i].iov_len)
			return !((const uint8_t *)iov[i]
				     .iov_base)[iov[i].iov_len - 1];
	return false;
}

int blog_preadv(struct blocker_store *s, uint64_t pos, struct iovec *iov,
		int cnt)
{
	uint64_t off;
	int fd, r;

	if (s->o.mmap_reads) {
		const uint8_t *map = NULL;
		uint64_t seg = pos / s->segment_size, vend = 0;
		size_t len = 0, fault;

		for (int i = 0; i < cnt; i++)
			len += iov[i].iov_len;
		pthread_rwlock_rdlock(&s->segs_lock);
		if (seg < s->nsegs) {
			map = s->segs[seg].map;
			vend = __atomic_load_n(&s->segs[seg].valid_end,
					       __ATOMIC_RELAXED);
		}
		pthread_rwlock_unlock(&s->segs_lock);
		/* (a read past the segment's end, or past a cut: the
		 * backend says why) */
		off = pos % s->segment_size;
		if (map && len <= vend && off <= vend - len) {
			r = bguard_copy(map, s->segment_size, off, iov, cnt,
					&fault);
			if (r) {
				map_fault(s, seg, off, fault);
				return r;
			}
			/* with verify_reads the caller's hash rejects the
			 * zeros anyway (a verify failure); the fstat is
			 * the unverified reader's price (review6 F13) */
			if (s->o.verify_reads || !iov_last_zero(iov, cnt) ||
			    !map_short(s, seg, off + len))
				return 0;
		}
	}
	r = blog_fd(s, pos, &fd, &off);
	if (r)
		return r;
	while (cnt > 0) {
		ssize_t n = s->io->preadv(s->io_ctx, fd, iov, cnt, off);
		if (n <= 0) {
			char path[4096];
			uint64_t nerr, seg = pos / s->segment_size;
			r = n ? (int)n : -ENODATA;
			if (!seg_read_error(s, seg, &nerr))
				return r;
			blog_seg_path(s->dir, seg, path, sizeof(path));
			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s: read at offset %llu failed: "
				     "%s (read error %llu of this segment)",
				     path, (unsigned long long)off,
				     n ? strerror(-r)
				       : "past the end of the file",
				     (unsigned long long)nerr);
			return r;
		}
		off += n;
		/* consume what arrived; iov is the caller's scratch copy */
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= n;
		}
	}
	return 0;
}

int blog_pread(struct blocker_store *s, uint64_t pos, void *buf, size_t len)
{
	struct iovec iov = {buf, len};

	return blog_preadv(s, pos, &iov, 1);
}

/* Start segment seg (caller holds append_lock). */
static int seg_create(struct blocker_store *s, uint32_t seg)
{
	char path[4096];
	int fd, r;

	r = blog_seg_path(s->dir, seg, path, sizeof(path));
	if (r)
		return r;
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = seg_push(s, fd);
	if (r) {
		close(fd);
		return r;
	}
	__atomic_fetch_add(&s->dir_seq, 1, __ATOMIC_RELEASE);
	return 0;
}

static const uint8_t zero_pad[BREC_ALIGN];
static const uint8_t zero_block[64 * 1024];

/*
 * Zero-filling the tail. An fdatasync after an append that extends the
 * file must also commit the new size and block allocation (a journal
 * commit on ext4); over blocks already written it writes data only. So
 * while flushes are frequent the last segment is kept zero-filled up to
 * ZERO_STEP past the tail, refilled every ZERO_STEP / 2 of log: one
 * metadata commit per ZERO_STEP / 2 instead of one per flush. Without
 * flushes (streaming writes, one sync at the end) zeroing would only cost
 * bandwidth, so it is skipped. Recovery reads a zero tail as the clean
 * end of the log (docs/on-disk-format.md).
 *
 * Nor does it take the last room of the file system: it fills only while
 * ZERO_STEP would stay free after it. On a disk close to full those zeros
 * are room a checkpoint, a DELETE or GC's copies need (a close failed in
 * CI for 80 KiB of checkpoint with 7 MiB of zeros past the tail).
 */
#define ZERO_STEP (8u << 20)

/* pos: the end of a run just written in segment seg, through fd */
static void zero_ahead(struct blocker_store *s, int fd, uint64_t seg,
		       uint64_t pos)
{
	uint64_t seg_end = (seg + 1) * s->segment_size;
	uint64_t flushes = __atomic_load_n(&s->st.flushes, __ATOMIC_RELAXED);
	uint64_t from = s->alloc_end, to = pos + ZERO_STEP;
	struct iovec iov[ZERO_STEP / sizeof(zero_block)];
	struct statvfs fs;
	int n = 0;

	if (pos + ZERO_STEP / 2 <= s->alloc_end || s->alloc_end >= seg_end ||
	    flushes == s->alloc_flushes)
		return;
	s->alloc_flushes = flushes;
	if (to > seg_end)
		to = seg_end;
	if (fstatvfs(fd, &fs) < 0 ||
	    (uint64_t)fs.f_bavail * fs.f_frsize < to - from + ZERO_STEP)
		return;
	for (uint64_t o = from; o < to; o += sizeof(zero_block))
		iov[n++] = (struct iovec){
		    (void *)zero_block,
		    to - o < sizeof(zero_block) ? to - o : sizeof(zero_block)};
	/*
	 * Best effort: on failure (a full disk) the tail is simply not
	 * preallocated; the next record's own write reports the error. What
	 * did land is zeros past the tail, which recovery accepts. A plain
	 * syscall, not the I/O backend: the fault-injection budget counts
	 * record bytes, so that a test's disk still fills up mid-record.
	 */
	ssize_t w = pwritev(fd, iov, n, from % s->segment_size);
	if (w > 0)
		s->alloc_end = from + w;
}

/*
 * A log fsync failed: the kernel has reported the writeback error to this
 * call only, so a later fsync of the same file may return 0 although the
 * pages were lost. Make the error sticky for every present and future
 * flush (they never report success again) and wake the waiters. Takes
 * sync_lock (allowed under append_lock).
 */
static void blog_sync_failed(struct blocker_store *s, int err, uint32_t seg,
			     const char *when)
{
	char path[4096], what[4200];

	/* on disk before any caller learns of it (mark.c) */
	blog_seg_path(s->dir, seg, path, sizeof(path));
	snprintf(what, sizeof(what), "fsync of %s %s failed: %s", path, when,
		 strerror(err));
	bsyncerr_record(s, err, what);
	pthread_mutex_lock(&s->sync_lock);
	if (!s->sync_err)
		s->sync_err = err;
	pthread_cond_broadcast(&s->sync_cond);
	pthread_mutex_unlock(&s->sync_lock);
}

/*
 * Leave segment seg for the next one (caller holds append_lock): cut its
 * zero tail and make it durable, so that every segment but the last ends
 * exactly at its last record and no record of the next segment can be on
 * disk while one before it in this segment is not.
 */
static int seg_finish(struct blocker_store *s, uint32_t seg)
{
	uint64_t end = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
	int fd, r;
	uint64_t off;

	r = blog_fd(s, (uint64_t)seg * s->segment_size, &fd, &off);
	if (r)
		return r;
	if (end / s->segment_size != seg)
		end = (uint64_t)(seg + 1) * s->segment_size; /* ended full */
	if (s->alloc_end > end &&
	    ftruncate(fd, end - (uint64_t)seg * s->segment_size) < 0)
		return -errno;
	r = s->io->fdatasync(s->io_ctx, fd);
	if (r) {
		blog_sync_failed(s, -r, seg, "at a segment switch");
		return r;
	}
	s->alloc_end = (uint64_t)(seg + 1) * s->segment_size;
	return 0;
}

int blog_seal(struct blocker_store *s)
{
	uint64_t tail, seg, off, base, old_end;
	int fd, r;

	pthread_mutex_lock(&s->append_lock);
	tail = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
	seg = tail / s->segment_size;
	off = tail % s->segment_size;
	base = seg * s->segment_size;
	if (seg == s->nsegs && seg && !off) {
		/*
		 * The last segment ended exactly full: it is finished only
		 * by the next append. (Before session 21 also a segment
		 * sealed before a crash whose empty next one recovery had
		 * dropped; recovery keeps that one now, drop_empty_last.)
		 * Finish it (its zero tail is none; fdatasync) and start the
		 * next one now, so that GC may take it.
		 */
		r = seg_finish(s, seg - 1);
		if (!r)
			r = seg_create(s, seg);
		if (!r) {
			s->alloc_end = tail;
			r = 1;
		}
		goto out;
	}
	r = 0;
	if (!off || seg + 1 != s->nsegs)
		goto out; /* empty: nothing to take */
	r = blog_fd(s, base, &fd, &off);
	if (r)
		goto out;
	old_end = s->alloc_end > tail ? s->alloc_end : tail;
	/*
	 * The hole up to segment_size is the on-disk sign of the seal: no
	 * other segment but the last extends past its last record, and the
	 * last one only with zeros that recovery reads as its clean end.
	 * Durable before the next segment exists, as at every switch, so
	 * that no crash leaves a later segment next to a shorter file.
	 */
	if (ftruncate(fd, s->segment_size) < 0) {
		r = -errno;
		goto out;
	}
	r = s->io->fdatasync(s->io_ctx, fd);
	if (r) {
		blog_sync_failed(s, -r, seg, "when sealing it");
		goto undo;
	}
	r = seg_create(s, seg + 1);
	if (r)
		goto undo;
	pthread_rwlock_wrlock(&s->segs_lock);
	s->segs[seg].data_end = tail - base;
	pthread_rwlock_unlock(&s->segs_lock);
	/*
	 * The tail moves to the new segment at once (unlike append_batch,
	 * which waits for the first write there, review7 R7-3): this switch
	 * is never taken back, so a flush may publish the new start as
	 * synced; everything below it was fdatasynced above, and the flush
	 * fsyncs the directory for the new name (dir_seq).
	 */
	s->alloc_end = (seg + 1) * s->segment_size;
	__atomic_store_n(&s->tail, s->alloc_end, __ATOMIC_RELEASE);
	r = 1;
	goto out;
undo:
	/* back to the file as it was: a crash before this leaves a last
	 * segment with a zero tail, which recovery reads as its clean end */
	(void)!ftruncate(fd, old_end - base);
out:
	pthread_mutex_unlock(&s->append_lock);
	return r;
}

int blog_trim_tail(struct blocker_store *s)
{
	uint64_t tail, off;
	struct stat st;
	int fd, r;

	pthread_mutex_lock(&s->append_lock);
	tail = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
	/* after a failed fsync nothing is cut: a second fdatasync of the
	 * file may pass although the first one's pages were lost, and a
	 * caller taking the 1 would then trust the log */
	pthread_mutex_lock(&s->sync_lock);
	r = -s->sync_err;
	pthread_mutex_unlock(&s->sync_lock);
	if (r || s->alloc_end <= tail ||
	    tail / s->segment_size + 1 != s->nsegs ||
	    (r = blog_fd(s, tail, &fd, &off)))
		goto out;
	if (fstat(fd, &st) < 0) {
		r = -errno;
	} else if ((uint64_t)st.st_size <= off) {
		/* alloc_end was above the file (a segment switch that
		 * failed after its seg_finish): nothing to cut */
		s->alloc_end = tail;
	} else if (ftruncate(fd, off) < 0) {
		r = -errno;
	} else if ((r = s->io->fdatasync(s->io_ctx, fd))) {
		blog_sync_failed(s, -r, tail / s->segment_size,
				 "after its tail was cut");
	} else {
		s->alloc_end = tail;
		r = 1;
	}
out:
	pthread_mutex_unlock(&s->append_lock);
	return r;
}

/*
 * A GC copy failed with ENOSPC after writing done bytes at off (past the
 * tail): put back what was there, zeros up to the zero-filled end
 * (alloc_end; overwriting allocated blocks needs no space) and no file
 * beyond it, so that the log past the tail holds nothing but zeros again.
 * Best effort: what remains is cut as a torn tail at the next open.
 */
static void gc_undo_write(struct blocker_store *s, int fd, uint64_t pos,
			  uint64_t off, uint64_t done)
{
	uint64_t base = pos - pos % s->segment_size, zend;
	struct stat st;

	zend = s->alloc_end < base ? base : s->alloc_end;
	if (zend > base + s->segment_size)
		zend = base + s->segment_size;
	zend -= base; /* file offset where the zero fill ends */
	for (uint64_t o = off; o < off + done && o < zend;) {
		uint64_t k = zend - o;
		if (k > off + done - o)
			k = off + done - o;
		if (k > sizeof(zero_block))
			k = sizeof(zero_block);
		if (pwrite(fd, zero_block, k, o) <= 0)
			break;
		o += k;
	}
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > zend)
		(void)!ftruncate(fd, zend);
}

/* pwritev all of iov at off, continuing after short writes */
static int write_all(struct blocker_store *s, int fd, struct iovec *iov, int n,
		     uint64_t off, uint64_t size, uint64_t pos, bool gc)
{
	uint64_t done = 0;

	while (done < size) {
		ssize_t w = s->io->pwritev(s->io_ctx, fd, iov, n, off + done);
		if (w <= 0) {
			int e = w < 0 ? (int)-w : EIO;
			char path[4096];
			blog_seg_path(s->dir, pos / s->segment_size, path,
				      sizeof(path));
			/* the log past the tail holds only zeros again,
			 * so appends can resume once there is room */
			if (e == ENOSPC) {
				gc_undo_write(s, fd, pos, off, done);
				if (gc)
					return -e;
			}
			blocker_degrade(
			    s, e, "write of %s at offset %llu failed: %s", path,
			    (unsigned long long)(off + done), strerror(e));
			return -e;
		}
		done += w;
		/* drop what a short write already wrote (iov is ours) */
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= w;
		}
	}
	return 0;
}

#define BATCH_IOV 1020 /* below IOV_MAX, a multiple of 3 */

static int append_batch(struct blocker_store *s, struct brec_out *rec, int n,
			bool gc);

int blog_append_batch_locked(struct blocker_store *s, struct brec_out *rec,
			     int n)
{
	return append_batch(s, rec, n, false);
}

int blog_append_batch_gc_locked(struct blocker_store *s, struct brec_out *rec,
				int n)
{
	return append_batch(s, rec, n, true);
}

/*
 * A GC run failed with ENOSPC as the first write into segment seg, which
 * this append had just created (caller holds append_lock): take the
 * switch back, so that the previous segment is the last one again and the
 * next record goes where it fits. Left in place, a later small record at
 * the new segment's start would make recovery read the previous segment
 * as ending early (damage). Nothing refers to the new segment yet: no
 * index entry, and the tail was never published in it (append_batch moves
 * it only after the first run there landed), so no flush sampled its start
 * and synced, inflight_max and the durable mark are all <= prev_tail:
 * nothing moves backwards.
 */
static void seg_unswitch(struct blocker_store *s, uint32_t seg,
			 uint64_t prev_tail)
{
	char path[4096];
	struct bseg b;

	pthread_rwlock_wrlock(&s->segs_lock);
	b = s->segs[seg];
	s->nsegs--;
	pthread_rwlock_unlock(&s->segs_lock);
	if (b.map)
		munmap((void *)b.map, s->segment_size);
	close(b.fd);
	blog_seg_path(s->dir, seg, path, sizeof(path));
	unlink(path);
	/* seg_finish cut the previous segment at prev_tail */
	__atomic_store_n(&s->tail, prev_tail, __ATOMIC_RELEASE);
	s->alloc_end = prev_tail;
}

static int append_batch(struct blocker_store *s, struct brec_out *rec, int n,
			bool gc)
{
	uint8_t(*hdr)[BREC_HDR_SIZE] = NULL;
	struct iovec *iov = NULL;
	int i = 0, r;
	int64_t created = -1; /* segment this call created */
	uint64_t prev_tail = 0;

	/* GC's copies and DELETEs give space back: a store degraded by
	 * ENOSPC still takes them */
	r = blocker_degraded(s);
	if (r && !(gc && r == ENOSPC))
		return -r;
	r = 0;
	hdr = malloc((size_t)n * BREC_HDR_SIZE);
	iov = malloc(sizeof(*iov) * BATCH_IOV);
	if (!hdr || !iov) {
		r = -ENOMEM;
		goto out;
	}
	while (i < n) {
		uint64_t pos = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
		uint64_t seg = pos / s->segment_size, start, size = 0, off;
		int k = 0, fd;

		if (pos % s->segment_size + brec_size(rec[i].len) >
		    s->segment_size) {
			seg++;
			pos = seg * s->segment_size;
		}
		/* also when the previous segment ended exactly at its end */
		if (seg >= s->nsegs) {
			r = seg_finish(s, seg - 1);
			if (!r)
				r = seg_create(s, seg);
			if (r == -ENOSPC && gc)
				goto out;
			if (r) {
				blocker_degrade(
				    s, -r, "cannot create segment %llu: %s",
				    (unsigned long long)seg, strerror(-r));
				goto out;
			}
			created = seg;
			prev_tail = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
			/* the tail stays at prev_tail until the first run in
			 * the new segment has landed: a flush sampling the
			 * new segment's start would publish it as synced (and
			 * in the durable mark), and if the write then failed
			 * and seg_unswitch took the switch back, records
			 * appended at prev_tail would sit below synced and be
			 * acknowledged without an fdatasync (review7 R7-3) */
		}
		start = pos;
		/* a run: the records that fit in this segment and one iov */
		while (i < n && k + 3 <= BATCH_IOV) {
			uint64_t rs = brec_size(rec[i].len);
			if ((pos + rs - 1) / s->segment_size != seg)
				break;
			if (pos + rs > BIDX_MAX_POS) {
				/* no GC pass gives positions back */
				degrade_msg(s, ENOSPC, true,
					    "log address space exhausted");
				r = -ENOSPC;
				goto out;
			}
			brec_encode(hdr[i], rec[i].type, rec[i].len, pos,
				    rec[i].score);
			rec[i].pos = pos;
			iov[k++] = (struct iovec){hdr[i], BREC_HDR_SIZE};
			iov[k++] =
			    (struct iovec){(void *)rec[i].payload, rec[i].len};
			if (rs - BREC_HDR_SIZE > rec[i].len)
				iov[k++] = (struct iovec){(void *)zero_pad,
							  rs - BREC_HDR_SIZE -
							      rec[i].len};
			pos += rs;
			size += rs;
			i++;
		}
		r = blog_fd(s, start, &fd, &off);
		if (!r)
			r = write_all(s, fd, iov, k, off, size, start, gc);
		if (r == -ENOSPC && (int64_t)seg == created &&
		    start == seg * s->segment_size)
			seg_unswitch(s, seg, prev_tail);
		if (r)
			goto out;
		__atomic_store_n(&s->tail, pos, __ATOMIC_RELEASE);
		if (pos > s->alloc_end)
			s->alloc_end = pos;
		zero_ahead(s, fd, seg, pos);
	}
out:
	free(hdr);
	free(iov);
	return r;
}

int blog_append_locked(struct blocker_store *s, enum brec_type type,
		       const uint8_t score[32], const void *payload,
		       uint32_t len, uint64_t *pos_out)
{
	struct brec_out rec = {type, score, payload, len, 0};
	int r = blog_append_batch_locked(s, &rec, 1);

	if (!r)
		*pos_out = rec.pos;
	return r;
}

int blog_append(struct blocker_store *s, enum brec_type type,
		const uint8_t score[32], const void *payload, uint32_t len,
		uint64_t *pos_out)
{
	int r;

	pthread_mutex_lock(&s->append_lock);
	r = blog_append_locked(s, type, score, payload, len, pos_out);
	pthread_mutex_unlock(&s->append_lock);
	return r;
}

/*
 * Group commit. A caller whose writes are not yet durable becomes the
 * leader if no fsync is running (FLUSH_INFLIGHT) and no other leader is
 * gathering: it samples the tail, fdatasyncs every segment written since
 * the last sync (and the directory if a segment was created), and
 * publishes the synced position. Everyone else waits; each fsync covers
 * every write appended before it started, so callers arriving during one
 * fsync share the next.
 *
 * One fsync at a time: on this disk (ext4 on virtio) one fsync of 16
 * writes costs little more than one of 8 (fio, 4 KiB writes, fdatasync
 * every 16: 28.5 K IOPS; every 64: 62 K; two jobs each syncing every 8:
 * 22 K), so what pays is the group size, and a second fsync started while
 * one runs takes the writers that arrive meanwhile away from the next
 * group. With two in flight, 16 FUA writers split into alternating
 * groups (7.1-7.4 writes per fsync, half of the fsyncs overlapping one
 * another, many taking a single write); one at a time, with the gathering
 * below, they form groups of 13.3-15.0 (`bench_blocker --only fua`, same
 * sitting). The ticket order below (fsync_started/fsync_published) is
 * kept for FLUSH_INFLIGHT > 1 and costs nothing at 1.
 *
 * Gathering: the writers an fsync releases start their next FUA writes at
 * once, and their appends are serialised by append_lock; on a busy
 * machine some are not even running yet. A leader that sampled the tail
 * right away would cover only the first of them and leave the rest to the
 * next fsync, splitting the writers into small alternating groups. So
 * before sampling, a leader waits while a FUA write that has started
 * (s->fua_writers) has not reached its flush yet, or while fewer callers
 * wait for an fsync (s->flushers: callers no fsync has taken yet) than
 * were active when the last fsync completed (s->group: the callers it
 * took, those that arrived while it ran and the FUA writes under way),
 * for at most half the last fsync's time (capped at GATHER_MAX_NS):
 * waiting costs at most a fraction of the fsync it saves. A lone writer
 * never waits: its group is itself. A writer that leaves costs one such
 * wait: the next completion counts without it.
 *
 * Counting only the callers no fsync has taken matters: those the last
 * fsync released are still inside until they run again, and counting
 * them ended the wait before any of them was back.
 */
#define FLUSH_INFLIGHT 1
#define GATHER_MAX_NS  1000000u

void blog_fua_begin(struct blocker_store *s)
{
	pthread_mutex_lock(&s->sync_lock);
	s->fua_writers++;
	pthread_mutex_unlock(&s->sync_lock);
}

/* caller holds sync_lock; true while the leader should keep gathering */
static bool gather_more(struct blocker_store *s)
{
	return s->fua_writers || s->flushers < s->group;
}

/* caller holds sync_lock */
static void fua_end_locked(struct blocker_store *s)
{
	s->fua_writers--;
	if (s->gathering && !gather_more(s))
		pthread_cond_signal(&s->gather_cond);
}

void blog_fua_abort(struct blocker_store *s)
{
	pthread_mutex_lock(&s->sync_lock);
	fua_end_locked(s);
	pthread_mutex_unlock(&s->sync_lock);
}

static void gather_locked(struct blocker_store *s)
{
	struct timespec ts;
	uint64_t wait = s->fsync_ns / 2;

	if (!gather_more(s))
		return;
	if (wait > GATHER_MAX_NS)
		wait = GATHER_MAX_NS;
	ts = xtime_in(CLOCK_MONOTONIC, wait); /* gather_cond's clock */
	s->gathering = true;
	while (gather_more(s) &&
	       pthread_cond_timedwait(&s->gather_cond, &s->sync_lock, &ts) !=
		   ETIMEDOUT)
		;
	s->gathering = false;
}

static int flush_common(struct blocker_store *s, bool fua)
{
	uint64_t target = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE), gen = 0;
	char what[4200];
	bool waiting;
	int r = 0;

	STAT_INC(s, flushes);
	pthread_mutex_lock(&s->sync_lock);
	/* in s->flushers until an fsync takes it (fsync_started moves) */
	waiting = target > s->synced && target > s->inflight_max;
	if (waiting) {
		s->flushers++;
		gen = s->fsync_started;
	}
	if (fua)
		fua_end_locked(s);
	else if (s->gathering && !gather_more(s))
		pthread_cond_signal(&s->gather_cond);
	while (s->synced < target) {
		/* after a failed fsync the page cache state is unknown: never
		 * report success again (a retried fsync may "succeed") */
		if (s->sync_err) {
			r = -s->sync_err;
			break;
		}
		if (s->inflight >= FLUSH_INFLIGHT || s->gathering ||
		    (s->inflight && s->inflight_max >= target)) {
			pthread_cond_wait(&s->sync_cond, &s->sync_lock);
			continue;
		}
		s->inflight++;
		gather_locked(s);
		/* everyone waiting now appended below the tail sampled next */
		uint64_t ticket = s->fsync_started++;
		uint32_t took = s->flushers;
		s->flushers = 0;
		uint64_t pos = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
		uint32_t dseq = __atomic_load_n(&s->dir_seq, __ATOMIC_ACQUIRE);
		bool dir = dseq != s->dir_synced_seq;
		uint32_t from = s->synced_seg;
		uint32_t to = pos ? (pos - 1) / s->segment_size : 0;
		if (pos > s->inflight_max)
			s->inflight_max = pos;
		pthread_mutex_unlock(&s->sync_lock);

		uint64_t t0 = peer_now_ns();
		for (uint32_t seg = from; seg <= to && !r; seg++) {
			int fd;
			uint64_t off;
			blocker_rcu_lock();
			r = blog_fd(s, (uint64_t)seg * s->segment_size, &fd,
				    &off);
			if (!r) {
				r = s->io->fdatasync(s->io_ctx, fd);
				STAT_INC(s, fsyncs);
			} else if (r == -ESTALE) {
				r = 0; /* removed by GC: nothing to sync */
			}
			blocker_rcu_unlock();
			if (r) {
				blog_seg_path(s->dir, seg, what, sizeof(what));
				blocker_degrade(s, -r, "fsync of %s failed: %s",
						what, strerror(-r));
			}
		}
		/* a new segment's directory entry must be durable too */
		if (!r && dir && fsync(s->dirfd) < 0) {
			r = -errno;
			snprintf(what, sizeof(what), "%s", s->dir);
			blocker_degrade(s, -r, "fsync of directory failed: %s",
					strerror(-r));
		}
		/* recorded before any flush fails with it (mark.c) */
		if (r) {
			size_t n = strlen(what);
			snprintf(what + n, sizeof(what) - n,
				 ": fsync failed: %s", strerror(-r));
			bsyncerr_record(s, -r, what);
		}

		pthread_mutex_lock(&s->sync_lock);
		s->fsync_ns = peer_now_ns() - t0;
		/* an earlier fsync still running may yet fail for pages this
		 * one covered: publish after it, and only if it did not */
		while (s->fsync_published != ticket)
			pthread_cond_wait(&s->sync_cond, &s->sync_lock);
		s->fsync_published++;
		s->inflight--;
		/* the callers the next gather expects back */
		s->group = took + s->flushers + s->fua_writers;
		if (!r && s->sync_err)
			r = -s->sync_err;
		if (!r) {
			if (pos > s->synced)
				s->synced = pos;
			bmark_note(s, s->synced);
			if (to > s->synced_seg)
				s->synced_seg = to;
			if ((int32_t)(dseq - s->dir_synced_seq) > 0)
				s->dir_synced_seq = dseq;
		} else if (!s->sync_err) {
			s->sync_err = -r;
		}
		pthread_cond_broadcast(&s->sync_cond);
		if (r)
			break;
	}
	/* covered by an fsync that succeeded before another one failed:
	 * which pages the failure lost is unknown, so nothing is durable */
	if (!r && s->sync_err)
		r = -s->sync_err;
	if (waiting && s->fsync_started == gen)
		s->flushers--; /* no fsync took it (an error ended the wait) */
	pthread_mutex_unlock(&s->sync_lock);
	return r;
}

int blog_flush(struct blocker_store *s)
{
	return flush_common(s, false);
}

int blog_flush_fua(struct blocker_store *s)
{
	return flush_common(s, true);
}

void blog_seg_release(struct blocker_store *s, uint32_t seg)
{
	if (s->segs[seg].map)
		munmap((void *)s->segs[seg].map, s->segment_size);
	s->segs[seg].map = NULL;
	if (s->segs[seg].fd >= 0)
		close(s->segs[seg].fd);
	s->segs[seg].fd = -1;
}

void blog_close(struct blocker_store *s)
{
	for (uint32_t i = 0; i < s->nsegs; i++)
		blog_seg_release(s, i);
	free(s->segs);
	s->segs = NULL;
	s->nsegs = 0;
	bmark_close(s);
}
