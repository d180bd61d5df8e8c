/* SPDX-License-Identifier: MIT */
/* Store lifecycle and object operations; the contract is in store.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "peer_util.h"
#include "store_int.h"
#include "xtime.h"

void blocker_opts_init(struct blocker_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->chunk_size = BLOCKER_DEFAULT_CHUNK_SIZE;
	o->segment_size = BLOCKER_SEGMENT_SIZE_AUTO;
	o->verify_reads = true;
	o->mmap_reads = true;
	o->partial_bits = BLOCKER_DEFAULT_PARTIAL_BITS;
	o->sync_interval_ms = 1000;
	o->checkpoint_bytes = 1ULL << 30;
}

void blocker_logf(const struct blocker_opts *o, enum blocker_log_level lvl,
		  const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (o && o->log)
		o->log(o->log_arg, lvl, msg);
	else
		fprintf(stderr, "%s\n", msg);
}

/* the smallest automatic segment for chunk_size (a valid one) */
static uint64_t auto_floor(uint32_t chunk_size)
{
	uint64_t floor = BLOCKER_MIN_AUTO_SEGMENT_SIZE;

	while (floor < 4 * brec_size(chunk_size))
		floor *= 2;
	return floor;
}

int blocker_auto_segment_size(uint64_t fs_bytes, uint32_t chunk_size,
			      uint64_t *segment_size)
{
	uint64_t seg = BLOCKER_DEFAULT_SEGMENT_SIZE, floor;

	if (chunk_size < 512 || chunk_size > (1u << 20) ||
	    (chunk_size & (chunk_size - 1)))
		return -EINVAL;
	floor = auto_floor(chunk_size);
	if (fs_bytes / 8 < floor)
		return -ENOSPC;
	while (seg > floor && seg > fs_bytes / 8)
		seg /= 2;
	if (seg < floor)
		seg = floor;
	*segment_size = seg;
	return 0;
}

/*
 * No super block, but is there a store's data? A create interrupted before
 * its super block leaves at most an empty log.000000, the lock file, the
 * durable mark and an open's reserve, which the create may redo; a store's
 * maps, index or a non-empty log segment mean a store that lost its super block
 * (deleted by hand, moved by fsck, missed by a restore: review11 N-G), and
 * creating over it would truncate its log, so every object in it would be lost.
 * Returns 0, or -ENOTEMPTY (logged with what to do).
 */
static int create_over_data(int dirfd, const char *dir,
			    const struct blocker_opts *o)
{
	static const char *const data_files[] = {BLOCKER_MAPS_FILE,
						 BLOCKER_INDEX_FILE};
	const char *found = NULL;
	struct stat sb;
	char name[32];

	for (size_t i = 0; i < sizeof(data_files) / sizeof(data_files[0]); i++)
		if (!fstatat(dirfd, data_files[i], &sb, 0))
			found = data_files[i];
	for (unsigned i = 0; !found && i < 1000000; i++) {
		snprintf(name, sizeof(name), "log.%06u", i);
		if (fstatat(dirfd, name, &sb, 0))
			break; /* segments are numbered without gaps */
		if (sb.st_size > 0 || i > 0)
			found = name;
	}
	if (!found)
		return 0;
	blocker_logf(o, BLOCKER_LOG_ERR,
		     "blocker: %s has a store's data (%s) but no super block: "
		     "refusing to create a new store over it, which would "
		     "erase it. Restore %s/%s from a backup (it records the "
		     "chunk and segment size), or move the files away to "
		     "start an empty store",
		     dir, found, dir, BLOCKER_SUPER_FILE);
	return -ENOTEMPTY;
}

int blocker_create(const char *dir, const struct blocker_opts *o)
{
	struct blocker_opts def;
	char path[4096];
	int dirfd, fd, r;
	uint64_t segment_size;

	if (!o) {
		blocker_opts_init(&def);
		o = &def;
	}
	segment_size = o->segment_size;
	if (o->chunk_size < 512 || o->chunk_size > (1u << 20) ||
	    (o->chunk_size & (o->chunk_size - 1)) ||
	    (segment_size != BLOCKER_SEGMENT_SIZE_AUTO &&
	     (segment_size < (1u << 20) || segment_size % (1u << 20) ||
	      segment_size < 4 * brec_size(o->chunk_size))))
		return -EINVAL;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	if (segment_size == BLOCKER_SEGMENT_SIZE_AUTO) {
		struct statvfs vfs;
		uint64_t fs_bytes;

		if (statvfs(dir, &vfs) < 0)
			return -errno;
		fs_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
		r = blocker_auto_segment_size(fs_bytes, o->chunk_size,
					      &segment_size);
		if (r) {
			blocker_logf(
			    o, BLOCKER_LOG_ERR,
			    "blocker: %s: the file system holds %llu "
			    "bytes; a store needs at least %llu (8 "
			    "log segments of the smallest size: the "
			    "space reserve, data, and room for GC)",
			    dir, (unsigned long long)fs_bytes,
			    (unsigned long long)(8 *
						 auto_floor(o->chunk_size)));
			return r;
		}
	}
	/* also when dir existed: whoever made it may not have synced it */
	r = peer_fsync_parent(dir);
	if (r)
		return r;
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	if (faccessat(dirfd, BLOCKER_SUPER_FILE, F_OK, 0) == 0) {
		r = -EEXIST;
		goto out;
	}
	r = create_over_data(dirfd, dir, o);
	if (r)
		goto out;
	snprintf(path, sizeof(path), "%s/log.000000", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	close(fd);
	/* the lock file too, so that no open of this store (even one that
	 * refuses it) has a file to create (blocker_open) */
	fd = openat(dirfd, BLOCKER_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC,
		    0644);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	close(fd);
	/* the durable mark whole, before the super block: a cut leaves no
	 * store, or one whose files are all complete */
	r = bmark_create(dirfd);
	if (r)
		goto out;
	/* the super block last: its presence marks a complete store */
	r = blocker_write_super(dirfd, o->chunk_size, segment_size);
out:
	close(dirfd);
	return r;
}

/* ---- chunks ---- */

/*
 * The copy at pos failed with err (a read error, or -EIO for a failed
 * verification): flag it in the index so that no later lookup reads,
 * hashes, counts or logs it again, and no write dedups onto it: the next
 * write of its data stores a fresh copy, which reads then find (review6
 * F14). Errors that say nothing about the copy (a segment GC removed
 * meanwhile, no memory) do not flag. True if it was flagged already, by
 * another reader that met it first: that one counted it.
 */
static bool chunk_flag_bad(struct blocker_store *s, uint64_t pos, int err)
{
	if (err != -EIO && err != -ENODATA && err != -EBADMSG)
		return false;
	return bidx_flag_bad(&s->index, pos) == -EALREADY;
}

/* dst holds the chunk read at pos for score: verify it if enabled. */
static int chunk_verify(struct blocker_store *s, const uint8_t score[32],
			const void *dst, uint64_t pos)
{
	char want[65], got[65], path[4096];
	uint8_t sum[32];

	if (!s->o.verify_reads)
		return 0;
	blocker_sha256(dst, s->chunk_size, sum);
	if (!memcmp(sum, score, 32))
		return 0;
	/* flagged, later lookups skip this copy (review6 F14): whoever
	 * flags it counts and logs it, once per copy and open */
	if (chunk_flag_bad(s, pos, -EIO))
		return -EIO;
	STAT_INC(s, verify_failures);
	uint64_t nerr;
	if (!blog_seg_error_log(s, pos / s->segment_size, &nerr))
		return -EIO;
	blocker_hex(score, want);
	blocker_hex(sum, got);
	blog_seg_path(s->dir, pos / s->segment_size, path, sizeof(path));
	blocker_logf(&s->o, BLOCKER_LOG_ERR,
		     "blocker: %s: chunk at offset %llu fails verification: "
		     "score %s, data hashes to %s (error %llu of this segment)",
		     path, (unsigned long long)(pos % s->segment_size), want,
		     got, (unsigned long long)nerr);
	return -EIO;
}

/*
 * The header hb read at index candidate pos: 0 if it is a chunk record of
 * score; -ENOENT for another chunk's (a partial-score collision); -EIO if
 * it is no chunk record at all. Every index entry points at a chunk
 * record this store wrote, so the last is damage of this copy (review7
 * R7-2): flagged like a copy that fails verification, counted in
 * verify_failures and logged once (rate-limited per segment), instead of
 * being taken for a collision on every read.
 */
static int chunk_hdr_check(struct blocker_store *s, const uint8_t score[32],
			   const uint8_t *hb, uint64_t pos)
{
	struct brec_hdr h;
	enum brec_err e = brec_decode(hb, &h, pos);
	char path[4096];
	uint64_t nerr;

	if (e == BREC_OK) {
		if (h.type == BREC_CHUNK && h.len == s->chunk_size) {
			if (!memcmp(h.score, score, 32))
				return 0;
			STAT_INC(s, partial_collisions);
			return -ENOENT;
		}
	}
	if (chunk_flag_bad(s, pos, -EIO))
		return -EIO;
	STAT_INC(s, verify_failures);
	if (!blog_seg_error_log(s, pos / s->segment_size, &nerr))
		return -EIO;
	blog_seg_path(s->dir, pos / s->segment_size, path, sizeof(path));
	blocker_logf(&s->o, BLOCKER_LOG_ERR,
		     "blocker: %s: chunk record at offset %llu is damaged: %s "
		     "(error %llu of this segment)",
		     path, (unsigned long long)(pos % s->segment_size),
		     e != BREC_OK ? brec_strerror(e) : "not a chunk record",
		     (unsigned long long)nerr);
	return -EIO;
}

/*
 * rb holds the whole record read at pos: is it a copy of score that a new
 * reference may rely on? -ENOENT for another chunk (a partial-score
 * collision), -EIO for a damaged copy (logged and counted by
 * chunk_hdr_check or chunk_verify).
 */
static int dedup_check(struct blocker_store *s, const uint8_t score[32],
		       const uint8_t *rb, uint64_t pos)
{
	int r = chunk_hdr_check(s, score, rb, pos);

	return r ? r : chunk_verify(s, score, rb + BREC_HDR_SIZE, pos);
}

/*
 * Find the log position of the chunk with this score for dedup: every
 * index candidate's whole record (header and payload, into rb:
 * BREC_HDR_SIZE + chunk_size bytes) is read and its full score compared;
 * with verify_reads its payload is hashed too. A copy in a GC victim
 * segment does not count (the victim's live set was fixed by the mark, so
 * a new reference to it would be lost with it): the caller stores the
 * chunk afresh. Nor does a copy whose header or payload cannot be read,
 * or whose payload fails verification (logged and counted): a write
 * acknowledged onto it would read back EIO, while storing the chunk
 * again gives this write and the copy's other readers a good copy
 * (chunk_get tries every candidate). Such a copy is flagged in the index
 * (chunk_flag_bad), so neither the look under append_lock in write_piece
 * nor any later lookup reads or hashes it again. 0 with *pos, or -ENOENT.
 *
 * A copy that verified once is hashed again on every dedup hit, not
 * remembered as good: it can rot or be cut afterwards (the F3 case), and
 * a write deduplicated onto it then would be acknowledged and lost; the
 * SHA-256 per duplicate chunk is the price (docs/blocker.md).
 */
static int chunk_find(struct blocker_store *s, const uint8_t score[32],
		      uint8_t *rb, uint64_t *pos)
{
	uint64_t cand[8];
	uint64_t gen = 0;
	int total, skip = 0, r = -ENOENT;

	blocker_rcu_lock();
	do {
		total =
		    bidx_lookup_page(&s->index, score, cand, 8, &skip, &gen);
		for (int i = 0; i < total - skip && i < 8; i++) {
			if (blog_pos_victim(s, cand[i]))
				continue;
			r = blog_pread(s, cand[i], rb,
				       BREC_HDR_SIZE + s->chunk_size);
			if (r)
				chunk_flag_bad(s, cand[i], r);
			else
				r = dedup_check(s, score, rb, cand[i]);
			if (!r) {
				*pos = cand[i];
				goto out;
			}
			r = -ENOENT;
		}
		skip += 8;
	} while (skip < total);
out:
	blocker_rcu_unlock();
	return r;
}

/* Read the chunk with this score into dst (cs bytes), verifying it. */
static int chunk_get_rcu(struct blocker_store *s, const uint8_t score[32],
			 void *dst);

static int chunk_get(struct blocker_store *s, const uint8_t score[32],
		     void *dst)
{
	int r;

	blocker_rcu_lock();
	r = chunk_get_rcu(s, score, dst);
	blocker_rcu_unlock();
	return r;
}

/* caller holds the read-side RCU section */
static int chunk_get_rcu(struct blocker_store *s, const uint8_t score[32],
			 void *dst)
{
	uint64_t cand[8];
	uint64_t gen = 0;
	int total, skip = 0, bad = 0, err = 0;
	char want[65];

	do {
		total =
		    bidx_lookup_page(&s->index, score, cand, 8, &skip, &gen);
		for (int i = 0; i < total - skip && i < 8; i++) {
			uint8_t hb[BREC_HDR_SIZE];
			struct iovec iov[2] = {{hb, sizeof(hb)},
					       {dst, s->chunk_size}};
			int r = blog_preadv(s, cand[i], iov, 2);
			/* unreadable (logged and counted): a copy stored
			 * after it may be good */
			if (r) {
				chunk_flag_bad(s, cand[i], r);
				err = r;
				continue;
			}
			r = chunk_hdr_check(s, score, hb, cand[i]);
			if (r == -EIO)
				bad++; /* a damaged header (flagged) */
			if (r)
				continue;
			/* a damaged copy: another one (a GC copy, a write
			 * that stored it afresh) may still be good */
			if (!chunk_verify(s, score, dst, cand[i]))
				return 0;
			bad++;
		}
		skip += 8;
	} while (skip < total);
	if (bad)
		return -EIO; /* each failure was logged and counted */
	if (err)
		return -EIO; /* logged and counted by blog_preadv */
	uint64_t badpos, nerr;
	if (bidx_lookup_bad(&s->index, score, &badpos) > 0) {
		/* every copy was found damaged or unreadable before, and
		 * counted then: fail without reading it again */
		if (blog_seg_error_log(s, badpos / s->segment_size, &nerr)) {
			blocker_hex(score, want);
			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s: chunk %s: no good copy (its "
				     "copy at log position %llu was found "
				     "damaged or unreadable)",
				     s->dir, want, (unsigned long long)badpos);
		}
		return -EIO;
	}
	blocker_hex(score, want);
	blocker_logf(&s->o, BLOCKER_LOG_ERR,
		     "blocker: %s: chunk %s referenced by a map is missing",
		     s->dir, want);
	STAT_INC(s, verify_failures);
	return -EIO;
}

/*
 * Read several chunks with one batch of reads (the backend may have them
 * all in flight at once): each chunk's first index candidate is read
 * together with its header; anything unexpected (a partial-score
 * collision, a short read) falls back to chunk_get for that chunk.
 */
static int chunks_get_batch(struct blocker_store *s, uint8_t (*scores)[32],
			    uint8_t **dst, int n)
{
	struct blocker_io_req *q = malloc(n * sizeof(*q));
	struct iovec *iov = malloc(2 * n * sizeof(*iov));
	uint8_t(*hb)[BREC_HDR_SIZE] = malloc(n * sizeof(*hb));
	uint64_t *pos = malloc(n * sizeof(*pos));
	int r = 0;

	if (!q || !iov || !hb || !pos) {
		r = -ENOMEM;
		goto out;
	}
	blocker_rcu_lock();
	for (int i = 0; i < n && !r; i++) {
		uint64_t off;
		q[i].res = -ENOENT;
		q[i].fd = -1;
		if (bidx_lookup(&s->index, scores[i], &pos[i], 1, 0) < 1 ||
		    blog_fd(s, pos[i], &q[i].fd, &off))
			continue;
		iov[2 * i] = (struct iovec){hb[i], BREC_HDR_SIZE};
		iov[2 * i + 1] = (struct iovec){dst[i], s->chunk_size};
		q[i].iov = &iov[2 * i];
		q[i].cnt = 2;
		q[i].off = off;
	}
	/* requests without a candidate are skipped by moving them last */
	int m = 0;
	struct blocker_io_req *sub = malloc(n * sizeof(*sub));
	int *map = malloc(n * sizeof(*map));
	if (!sub || !map) {
		free(sub);
		free(map);
		blocker_rcu_unlock();
		r = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++)
		if (q[i].fd >= 0) {
			sub[m] = q[i];
			map[m++] = i;
		}
	if (m)
		r = s->io->preadv_batch(s->io_ctx, sub, m);
	for (int k = 0; k < m; k++)
		q[map[k]].res = sub[k].res;
	free(sub);
	free(map);
	for (int i = 0; i < n && !r; i++) {
		struct brec_hdr h;
		if (q[i].res == (ssize_t)(BREC_HDR_SIZE + s->chunk_size) &&
		    brec_decode(hb[i], &h, pos[i]) == BREC_OK &&
		    h.type == BREC_CHUNK && !memcmp(h.score, scores[i], 32)) {
			r = chunk_verify(s, scores[i], dst[i], pos[i]);
			/* damaged (now flagged): only another copy can help,
			 * and chunk_get_rcu says which failure it was */
			if (r)
				r = chunk_get_rcu(s, scores[i], dst[i]);
		} else {
			r = chunk_get_rcu(s, scores[i], dst[i]);
		}
	}
	blocker_rcu_unlock();
out:
	free(q);
	free(iov);
	free(hb);
	free(pos);
	return r;
}

/* ---- object operations ---- */

static int check_range(uint64_t off, size_t len)
{
	if (len == 0 || off > BLOCKER_MAX_OBJECT_SIZE ||
	    len > BLOCKER_MAX_OBJECT_SIZE - off)
		return -EINVAL;
	return 0;
}

/* A multi-chunk read with all its chunk reads issued as one batch. */
static int read_batched(struct blocker_store *s, uint64_t off, size_t len,
			void *buf, uint64_t first, uint64_t n,
			uint8_t (*scores)[32])
{
	uint32_t cs = s->chunk_size;
	uint8_t *tmp = malloc(2 * (size_t)cs), **dst = malloc(n * sizeof(*dst));
	uint8_t(*sc)[32] = malloc(n * 32);
	int m = 0, r;

	if (!tmp || !dst || !sc) {
		r = -ENOMEM;
		goto out;
	}
	for (uint64_t k = 0; k < n; k++) {
		uint64_t cstart = (first + k) * cs;
		uint64_t a = off > cstart ? off : cstart;
		uint64_t b = off + len < cstart + cs ? off + len : cstart + cs;

		if (blocker_score_is_zero(scores[k])) {
			memset((uint8_t *)buf + (a - off), 0, b - a);
			continue;
		}
		/* only the first and the last chunk can be partial */
		dst[m] = a == cstart && b == cstart + cs
			     ? (uint8_t *)buf + (a - off)
			     : tmp + (k ? cs : 0);
		memcpy(sc[m++], scores[k], 32);
	}
	r = m ? chunks_get_batch(s, sc, dst, m) : 0;
	if (r)
		goto out;
	for (uint64_t k = 0; k < n; k += n - 1) {
		uint64_t cstart = (first + k) * cs;
		uint64_t a = off > cstart ? off : cstart;
		uint64_t b = off + len < cstart + cs ? off + len : cstart + cs;
		if ((a != cstart || b != cstart + cs) &&
		    !blocker_score_is_zero(scores[k]))
			memcpy((uint8_t *)buf + (a - off),
			       tmp + (k ? cs : 0) + (a - cstart), b - a);
		if (n == 1)
			break;
	}
out:
	free(tmp);
	free(dst);
	free(sc);
	return r;
}

int blocker_read(struct blocker_store *s, const char *name, size_t namelen,
		 uint64_t off, size_t len, void *buf)
{
	uint32_t cs = s->chunk_size;
	uint64_t first, last, n;
	uint8_t(*scores)[32] = NULL, small[16][32];
	uint8_t *tmp = NULL;
	struct bobj *o;
	int r;

	if (!blocker_name_valid(name, namelen) || !buf)
		return -EINVAL;
	r = check_range(off, len);
	if (r)
		return r;
	o = bobj_get(s, name, namelen, false);
	if (!o)
		return -ENOENT;
	first = off / cs;
	last = (off + len - 1) / cs;
	n = last - first + 1;
	/* the common small read needs no allocation */
	scores = n <= 16 ? small : calloc(n, 32);
	if (!scores) {
		bobj_put(s, o);
		return -ENOMEM;
	}
	memset(scores, 0, n * 32);
	/*
	 * chunks are immutable: copy the scores, then read without locks;
	 * the RCU section from here to the last read keeps GC from dropping
	 * a chunk that an overwrite made dead after the copy
	 */
	blocker_rcu_lock();
	pthread_rwlock_rdlock(&o->lock);
	if (o->deleted || !o->live)
		r = -ENOENT;
	for (uint64_t i = first; i <= last && i < o->nchunks && !r; i++)
		memcpy(scores[i - first], o->scores[i], 32);
	pthread_rwlock_unlock(&o->lock);
	bobj_put(s, o);
	void (*hook)(void *) = __atomic_load_n(&s->read_hook, __ATOMIC_ACQUIRE);
	if (hook)
		hook(s->read_hook_arg);

	if (!r && n > 1 && s->io->preadv_batch && !s->o.mmap_reads) {
		r = read_batched(s, off, len, buf, first, n, scores);
		goto out;
	}
	for (uint64_t i = first; i <= last && !r; i++) {
		uint64_t cstart = i * cs;
		uint64_t a = off > cstart ? off : cstart;
		uint64_t b = off + len < cstart + cs ? off + len : cstart + cs;
		uint8_t *dst = (uint8_t *)buf + (a - off);

		if (blocker_score_is_zero(scores[i - first])) {
			memset(dst, 0, b - a);
			continue;
		}
		if (a == cstart && b == cstart + cs) {
			r = chunk_get(s, scores[i - first], dst);
			continue;
		}
		if (!tmp && !(tmp = malloc(cs))) {
			r = -ENOMEM;
			break;
		}
		r = chunk_get(s, scores[i - first], tmp);
		if (!r)
			memcpy(dst, tmp + (a - cstart), b - a);
	}
out:
	blocker_rcu_unlock();
	free(tmp);
	if (scores != small)
		free(scores);
	if (!r)
		STAT_INC(s, reads);
	return r;
}

/* Scratch for one atomic piece of a write (at most BMAP_MAX_UPDATES chunks). */
struct wscratch {
	struct bmap_update *u;
	const uint8_t **src;
	bool *miss;
	struct brec_out *rec; /* n + 1 */
	uint16_t *seen;	      /* in-batch dedup table: record index + 1 */
	uint8_t *tmp;	      /* two chunks for partial read-modify-write */
	uint8_t *rb;	      /* one whole chunk record (chunk_find) */
};

/* One allocation sized for pieces of n chunks (a 4 KiB write: ~8 KiB). */
static struct wscratch *wscratch_new(uint32_t n, uint32_t cs)
{
	uint32_t tsize = 32;
	struct wscratch *w;
	size_t sz;
	char *p;

	while (tsize < 2 * n)
		tsize *= 2;
	sz = sizeof(*w) + n * sizeof(*w->u) + n * sizeof(*w->src) +
	     (n + 1) * sizeof(*w->rec) + tsize * sizeof(*w->seen) + n +
	     3 * (size_t)cs + BREC_HDR_SIZE + 64;
	w = malloc(sz);
	if (!w)
		return NULL;
	p = (char *)(w + 1);
	w->u = (void *)p;
	p += n * sizeof(*w->u);
	w->src = (void *)p;
	p += n * sizeof(*w->src);
	w->rec = (void *)p;
	p += (n + 1) * sizeof(*w->rec);
	w->seen = (void *)p;
	p += tsize * sizeof(*w->seen);
	w->tmp = (void *)p;
	p += 2 * (size_t)cs;
	w->rb = (void *)p;
	p += BREC_HDR_SIZE + (size_t)cs;
	w->miss = (void *)p;
	return w;
}

/*
 * Which of the chunks marked in w->miss are already stored (dedup)? Every
 * index candidate's whole record is read and checked as chunk_find does.
 * With a batching backend the first candidate of every chunk is read in
 * one batch; chunks with several candidates fall back to chunk_find. The
 * batch is used with mapped reads too: a duplicate usually matches data
 * written moments ago, whose pages were never touched through the
 * mapping, and first-touch faults cost more than one batched read
 * (duplicate / unique writes 1.32-1.41 per chunk through the mapping,
 * 1.78-1.81 batched, bench_blocker --mib 64, same sitting).
 */
static int dedup_resolve(struct blocker_store *s, struct wscratch *w,
			 uint32_t n)
{
	struct blocker_io_req *q = NULL;
	struct iovec *iov = NULL;
	uint8_t *rbs = NULL;
	size_t rsize = BREC_HDR_SIZE + (size_t)s->chunk_size;
	uint64_t *pos = NULL, p;
	uint32_t *which = NULL, m = 0;
	int *cnt = NULL, r = 0;

	if (!s->io->preadv_batch || n < 2) {
		for (uint32_t k = 0; k < n; k++) {
			if (!w->miss[k])
				continue;
			r = chunk_find(s, w->u[k].score, w->rb, &p);
			if (r == -ENOENT)
				continue;
			if (r)
				return r;
			w->miss[k] = false;
			STAT_INC(s, dedup_hits);
		}
		return 0;
	}
	q = malloc(n * sizeof(*q));
	iov = malloc(n * sizeof(*iov));
	rbs = malloc(n * rsize);
	pos = malloc(n * sizeof(*pos));
	which = malloc(n * sizeof(*which));
	cnt = malloc(n * sizeof(*cnt));
	if (!q || !iov || !rbs || !pos || !which || !cnt) {
		r = -ENOMEM;
		goto out;
	}
	blocker_rcu_lock();
	for (uint32_t k = 0; k < n; k++) {
		uint64_t off;
		if (!w->miss[k])
			continue;
		cnt[m] = bidx_lookup(&s->index, w->u[k].score, &pos[m], 1, 0);
		/* a GC victim's copy stays a miss: write_piece looks again
		 * (chunk_find) for a copy elsewhere under append_lock */
		if (cnt[m] == 0 || blog_pos_victim(s, pos[m]) ||
		    blog_fd(s, pos[m], &q[m].fd, &off))
			continue; /* certainly new */
		iov[m] = (struct iovec){rbs + m * rsize, rsize};
		q[m].iov = &iov[m];
		q[m].cnt = 1;
		q[m].off = off;
		which[m++] = k;
	}
	if (m)
		r = s->io->preadv_batch(s->io_ctx, q, m);
	for (uint32_t j = 0; j < m && !r; j++) {
		uint32_t k = which[j];
		if (q[j].res == (ssize_t)rsize) {
			int c = dedup_check(s, w->u[k].score, rbs + j * rsize,
					    pos[j]);
			if (!c) {
				w->miss[k] = false;
				STAT_INC(s, dedup_hits);
				continue;
			}
			/* its only candidate is another chunk or damaged:
			 * store it afresh */
			if (cnt[j] == 1)
				continue;
		}
		/* (a failed or short read: chunk_find reads again, and
		 * logs why) */
		r = chunk_find(s, w->u[k].score, w->rb, &p);
		if (r == -ENOENT) {
			r = 0;
			continue;
		}
		if (!r) {
			w->miss[k] = false;
			STAT_INC(s, dedup_hits);
		}
	}
	blocker_rcu_unlock();
out:
	free(q);
	free(iov);
	free(rbs);
	free(pos);
	free(which);
	free(cnt);
	return r;
}

/*
 * One atomic piece: chunks [first, last] of the write. Hashing and the
 * dedup lookups run without the append lock; then the new chunks and the
 * map record that references them go to the log in one batch, the map
 * record last, so it is never in the log without its chunks.
 */
static int write_piece(struct blocker_store *s, struct bobj *o, uint64_t off,
		       size_t len, const uint8_t *buf, uint64_t first,
		       uint64_t last, struct wscratch *w)
{
	uint32_t cs = s->chunk_size, n = last - first + 1, nrec = 0;
	uint32_t tsize = 32;
	uint64_t size, end, pos;
	uint8_t *map = NULL, mscore[32];
	size_t mlen;
	int r = 0;

	for (uint32_t k = 0; k < n; k++) {
		uint64_t i = first + k, cstart = i * cs;
		uint64_t a = off > cstart ? off : cstart;
		uint64_t b = off + len < cstart + cs ? off + len : cstart + cs;
		const uint8_t *src = buf + (a - off);

		w->u[k].index = i;
		w->miss[k] = false;
		if (a != cstart || b != cstart + cs) {
			/* partial chunk (first or last of the write):
			 * read-modify-write under o->lock */
			uint8_t *t = w->tmp + (k ? cs : 0);
			if (i < o->nchunks &&
			    !blocker_score_is_zero(o->scores[i]))
				r = chunk_get(s, o->scores[i], t);
			else
				memset(t, 0, cs);
			if (r)
				return r;
			memcpy(t + (a - cstart), src, b - a);
			src = t;
		}
		w->src[k] = src;
		if (blocker_mem_is_zero(src, cs)) {
			memset(w->u[k].score, 0, 32);
			STAT_INC(s, zero_chunks);
			continue;
		}
		blocker_sha256(src, cs, w->u[k].score);
		w->miss[k] = true; /* until dedup_resolve finds it */
	}
	r = dedup_resolve(s, w, n);
	if (r)
		return r;

	end = (last + 1) * cs < off + len ? (last + 1) * cs : off + len;
	size = o->size > end ? o->size : end;
	r = bobj_reserve(o, (size + cs - 1) / cs);
	if (r)
		return r;
	mlen = bmap_payload_size(o->namelen, n);
	map = malloc(mlen);
	if (!map)
		return -ENOMEM;
	bmap_encode(map, o->name, o->namelen, size, w->u, n);
	blocker_sha256(map, mlen, mscore);

	while (tsize < 2 * n)
		tsize *= 2;
	memset(w->seen, 0, tsize * sizeof(w->seen[0]));
	pthread_mutex_lock(&s->append_lock);
	for (uint32_t k = 0; k < n && !r; k++) {
		if (!w->miss[k])
			continue;
		/* the same new chunk twice in this write: store it once */
		uint32_t h = get_le32(w->u[k].score) & (tsize - 1);
		bool dup = false;
		for (; w->seen[h]; h = (h + 1) & (tsize - 1))
			if (!memcmp(w->rec[w->seen[h] - 1].score, w->u[k].score,
				    32)) {
				dup = true;
				break;
			}
		/* a concurrent writer may have stored it since the look */
		if (!dup) {
			r = chunk_find(s, w->u[k].score, w->rb, &pos);
			if (r == -ENOENT) {
				r = 0;
				w->seen[h] = nrec + 1;
				w->rec[nrec++] =
				    (struct brec_out){BREC_CHUNK, w->u[k].score,
						      w->src[k], cs, 0};
				continue;
			}
		}
		if (!r)
			STAT_INC(s, dedup_hits);
	}
	if (!r) {
		w->rec[nrec++] =
		    (struct brec_out){BREC_MAP, mscore, map, mlen, 0};
		r = blog_append_batch_locked(s, w->rec, nrec);
	}
	for (uint32_t k = 0; k + 1 < nrec && !r; k++) {
		r = bidx_insert(&s->index, w->rec[k].score, w->rec[k].pos);
		STAT_ADD(s, chunk_bytes, cs);
	}
	pthread_mutex_unlock(&s->append_lock);
	free(map);
	if (r)
		return r;
	/* what the next checkpoint writes more (the reserve follows it): an
	 * index entry per chunk stored, a map entry per hole filled, the
	 * object's header if it is new; overwrites add nothing */
	uint64_t grown = 16ULL * (nrec - 1) + (o->live ? 0 : 18 + o->namelen);
	bobj_uncount(s, o);
	for (uint32_t k = 0; k < n; k++) {
		const uint8_t *dst = o->scores[w->u[k].index];
		if (blocker_score_is_zero(dst) &&
		    !blocker_score_is_zero(w->u[k].score))
			grown += 40;
		bobj_set_score(o, w->u[k].index, w->u[k].score);
	}
	o->size = size;
	o->live = true;
	bobj_count(s, o);
	bres_note(s, grown);
	return 0;
}

int blocker_write(struct blocker_store *s, const char *name, size_t namelen,
		  uint64_t off, size_t len, const void *buf, unsigned flags)
{
	uint32_t cs = s->chunk_size;
	struct wscratch *w = NULL;
	struct bobj *o;
	int r;

	if (!blocker_name_valid(name, namelen) || !buf ||
	    (flags & ~BLOCKER_FUA))
		return -EINVAL;
	r = check_range(off, len);
	if (r)
		return r;
	r = blocker_degraded(s);
	if (r)
		return -r;
	uint64_t nch = (off + len - 1) / cs - off / cs + 1;
	w = wscratch_new(nch < BMAP_MAX_UPDATES ? nch : BMAP_MAX_UPDATES, cs);
	if (!w)
		return -ENOMEM;
	/* counted in so that a group commit leader waits for this append */
	if (flags & BLOCKER_FUA)
		blog_fua_begin(s);
	pthread_rwlock_rdlock(&s->ckpt_lock);
	for (;;) {
		o = bobj_get(s, name, namelen, true);
		if (!o) {
			r = -ENOMEM;
			goto out;
		}
		pthread_rwlock_wrlock(&o->lock);
		if (!o->deleted)
			break;
		pthread_rwlock_unlock(&o->lock);
		bobj_put(s, o);
	}
	uint64_t first = off / cs, last = (off + len - 1) / cs;
	for (uint64_t p = first; p <= last && !r; p += BMAP_MAX_UPDATES) {
		uint64_t pl = p + BMAP_MAX_UPDATES - 1;
		r = write_piece(s, o, off, len, buf, p, pl < last ? pl : last,
				w);
	}
	/* created by this write, which failed: forget the name */
	bobj_forget_unborn(s, o);
	pthread_rwlock_unlock(&o->lock);
	bobj_put(s, o);
out:
	pthread_rwlock_unlock(&s->ckpt_lock);
	if (!r) {
		STAT_INC(s, writes);
		bres_grew(s);
	}
	if (flags & BLOCKER_FUA) {
		if (!r)
			r = blog_flush_fua(s);
		else
			blog_fua_abort(s);
	}
	free(w);
	return r;
}

static int append_names(struct blocker_store *s, enum brec_type type,
			const char *n1, size_t l1, const char *n2, size_t l2)
{
	size_t len = bnames_payload_size(l1, l2);
	uint8_t p[2 * (BLOCKER_NAME_MAX + 2)], score[32];
	uint64_t pos;

	bnames_encode(p, n1, l1, n2, l2);
	blocker_sha256(p, len, score);
	if (type != BREC_DELETE)
		return blog_append(s, type, score, p, len, &pos);
	/*
	 * A DELETE appends as GC's copies do: in a store degraded by
	 * ENOSPC too, and its own ENOSPC leaves the store as it was
	 * (undone, not degraded), so that the caller can release the
	 * reserve and try again
	 */
	struct brec_out rec = {type, score, p, (uint32_t)len, 0};
	int r;
	pthread_mutex_lock(&s->append_lock);
	r = blog_append_batch_gc_locked(s, &rec, 1);
	pthread_mutex_unlock(&s->append_lock);
	(void)pos;
	return r;
}

int blocker_delete(struct blocker_store *s, const char *name, size_t namelen)
{
	struct bobj *o;
	int r;

	if (!blocker_name_valid(name, namelen))
		return -EINVAL;
	/* a DELETE is how a full disk gets space back (with GC): only a
	 * store degraded by something else refuses it */
	r = blocker_degraded(s);
	if (r && r != ENOSPC)
		return -r;
	pthread_rwlock_rdlock(&s->ckpt_lock);
	o = bobj_get(s, name, namelen, false);
	if (!o) {
		r = -ENOENT;
		goto out;
	}
	pthread_rwlock_wrlock(&o->lock);
	if (o->deleted || !o->live)
		r = -ENOENT;
	else
		r = append_names(s, BREC_DELETE, name, namelen, NULL, 0);
	/*
	 * The disk is full: the reserve is there for this. If it is already
	 * gone, try again all the same: GC may have released it for its
	 * copies between the failed append and here (a full store's pass
	 * does), and its room is there now. A disk still full fails the
	 * same way, having changed nothing.
	 */
	if (r == -ENOSPC && bres_release(s) >= 0)
		r = append_names(s, BREC_DELETE, name, namelen, NULL, 0);
	if (!r) {
		bobj_uncount(s, o);
		o->deleted = true;
		bmaps_unlink(s, o);
		STAT_INC(s, deletes);
	}
	pthread_rwlock_unlock(&o->lock);
	bobj_put(s, o);
out:
	pthread_rwlock_unlock(&s->ckpt_lock);
	return r;
}

int blocker_info(struct blocker_store *s, const char *name, size_t namelen,
		 uint64_t *size)
{
	struct bobj *o;
	int r = 0;

	if (!blocker_name_valid(name, namelen) || !size)
		return -EINVAL;
	o = bobj_get(s, name, namelen, false);
	if (!o)
		return -ENOENT;
	pthread_rwlock_rdlock(&o->lock);
	if (o->deleted || !o->live)
		r = -ENOENT;
	else
		*size = o->size;
	pthread_rwlock_unlock(&o->lock);
	bobj_put(s, o);
	return r;
}

int blocker_copy(struct blocker_store *s, const char *src, size_t srclen,
		 const char *dst, size_t dstlen)
{
	struct bobj *so, *d;
	int r;

	if (!blocker_name_valid(src, srclen) ||
	    !blocker_name_valid(dst, dstlen) ||
	    (srclen == dstlen && !memcmp(src, dst, srclen)))
		return -EINVAL;
	r = blocker_degraded(s);
	if (r)
		return -r;
	pthread_rwlock_rdlock(&s->ckpt_lock);
	so = bobj_get(s, src, srclen, false);
	if (!so) {
		r = -ENOENT;
		goto out;
	}
	for (;;) {
		d = bobj_get(s, dst, dstlen, true);
		if (!d) {
			r = -ENOMEM;
			goto out_src;
		}
		/* two object locks: always in address order */
		if (so < d) {
			pthread_rwlock_rdlock(&so->lock);
			pthread_rwlock_wrlock(&d->lock);
		} else {
			pthread_rwlock_wrlock(&d->lock);
			pthread_rwlock_rdlock(&so->lock);
		}
		if (!d->deleted)
			break;
		pthread_rwlock_unlock(&so->lock);
		pthread_rwlock_unlock(&d->lock);
		bobj_put(s, d);
	}
	if (so->deleted || !so->live) {
		r = -ENOENT;
		goto unlock;
	}
	void *scores = NULL;
	if (so->nchunks) {
		scores = malloc(so->nchunks * 32);
		if (!scores) {
			r = -ENOMEM;
			goto unlock;
		}
		memcpy(scores, so->scores, so->nchunks * 32);
	}
	r = append_names(s, BREC_COPY, src, srclen, dst, dstlen);
	if (r) {
		free(scores);
		goto unlock;
	}
	bobj_uncount(s, d);
	free(d->scores);
	d->scores = scores;
	d->nchunks = so->nchunks;
	d->nonzero = so->nonzero;
	d->size = so->size;
	d->live = true;
	bobj_count(s, d);
	STAT_INC(s, copies);
	/* (the copy's map entries; its old ones, if any, are not taken
	 * back: an upper bound) */
	bres_note(s, 18 + d->namelen + 40 * d->nonzero);
unlock:
	/* created by this copy, which failed: forget the name */
	bobj_forget_unborn(s, d);
	pthread_rwlock_unlock(&so->lock);
	pthread_rwlock_unlock(&d->lock);
	bobj_put(s, d);
out_src:
	bobj_put(s, so);
out:
	pthread_rwlock_unlock(&s->ckpt_lock);
	if (!r)
		bres_grew(s);
	return r;
}

int blocker_hash(struct blocker_store *s, const char *name, size_t namelen,
		 uint8_t digest[BLOCKER_SCORE_SIZE])
{
	EVP_MD_CTX *ctx;
	struct bobj *o;
	uint8_t le[8];
	unsigned int dl = 32;
	int r = 0;

	if (!blocker_name_valid(name, namelen) || !digest)
		return -EINVAL;
	o = bobj_get(s, name, namelen, false);
	if (!o)
		return -ENOENT;
	ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		r = -ENOMEM;
		goto out;
	}
	pthread_rwlock_rdlock(&o->lock);
	if (o->deleted || !o->live)
		r = -ENOENT;
	put_le64(le, o->size);
	EVP_DigestUpdate(ctx, le, 8);
	for (uint64_t i = 0; i < o->nchunks && !r; i++) {
		if (blocker_score_is_zero(o->scores[i]))
			continue;
		put_le64(le, i);
		EVP_DigestUpdate(ctx, le, 8);
		EVP_DigestUpdate(ctx, o->scores[i], 32);
	}
	pthread_rwlock_unlock(&o->lock);
	if (!r && !EVP_DigestFinal_ex(ctx, digest, &dl))
		r = -EIO;
out:
	EVP_MD_CTX_free(ctx);
	bobj_put(s, o);
	return r;
}

int blocker_flush(struct blocker_store *s)
{
	return blog_flush(s);
}

/*
 * The two checkpoint files, each written whole under a temporary name and
 * renamed over the old one, so the new ones take room before the old ones
 * give theirs back. A failure leaves each file whole, old or new (a new
 * maps file next to the old index is read as a checkpoint at the lower
 * position).
 */
static int ckpt_save(struct blocker_store *s, uint64_t pos, const uint8_t *mp,
		     size_t ml, uint64_t mc, const uint8_t *ip, size_t il,
		     uint64_t ic)
{
	int r = 0;

	if (s->space_hook)
		r = s->space_hook(s->space_hook_arg, BLOCKER_SPACE_CHECKPOINT,
				  ml + il);
	if (!r)
		r = bmaps_save_buf(s, pos, mp, ml, mc);
	if (!r)
		r = bidx_save_buf(s, pos, ip, il, ic);
	return r;
}

int blocker_checkpoint(struct blocker_store *s)
{
	uint8_t *mp = NULL, *ip = NULL;
	size_t ml, il;
	uint64_t mc, ic, pos, growth;
	int r;

	pthread_mutex_lock(&s->ckpt_mutex);
	/* degraded by ENOSPC, the maps and index still match the log up
	 * to its tail (a failed append is undone, log.c): GC needs this */
	r = blocker_degraded(s);
	if (r && r != ENOSPC) {
		r = -r;
		goto out;
	}
	r = 0;
	/* writers drained: maps and index describe exactly the log < pos */
	pthread_rwlock_wrlock(&s->ckpt_lock);
	pos = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
	growth = __atomic_load_n(&s->reserve_growth, __ATOMIC_RELAXED);
	r = bmaps_snapshot(s, &mp, &ml, &mc);
	if (!r)
		r = bidx_snapshot(s, &ip, &il, &ic);
	pthread_rwlock_unlock(&s->ckpt_lock);
	if (!r)
		r = blog_flush(s);
	if (!r) {
		r = ckpt_save(s, pos, mp, ml, mc, ip, il, ic);
		/* the log's zero-filled tail may hold the room the files
		 * need (seen on a full tmpfs: 7 MiB of it, and 80 KiB
		 * missing) */
		if (r == -ENOSPC && blog_trim_tail(s) > 0)
			r = ckpt_save(s, pos, mp, ml, mc, ip, il, ic);
	}
	if (!r) {
		__atomic_store_n(&s->last_ckpt, pos, __ATOMIC_RELEASE);
		bres_checkpointed(s, ml + il, growth);
	} else
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: checkpoint failed: %s", s->dir,
			     strerror(-r));
out:
	pthread_mutex_unlock(&s->ckpt_mutex);
	free(mp);
	free(ip);
	return r;
}

int blocker_get_stats(struct blocker_store *s, struct blocker_stats *st)
{
	memset(st, 0, sizeof(*st));
	/* counters kept by every change (bobj_count): the peer publishes
	 * these each second, and a walk over the objects cost 0.34-0.48 CPU
	 * with 1 M of them */
	st->objects = __atomic_load_n(&s->nr_objects, __ATOMIC_RELAXED);
	st->logical_bytes =
	    __atomic_load_n(&s->nr_logical_chunks, __ATOMIC_RELAXED) *
	    s->chunk_size;
	pthread_rwlock_rdlock(&s->index.lock);
	st->chunks = s->index.count;
	st->index_bytes = s->index.bytes;
	pthread_rwlock_unlock(&s->index.lock);
	st->index_usable_bytes = bidx_usable_bytes(&s->index);
	st->chunk_bytes = st->chunks * s->chunk_size;
	st->log_bytes = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&s->reserve_lock);
	st->reserve_bytes = s->reserve_held;
	st->reserve_target = s->reserve_target;
	pthread_mutex_unlock(&s->reserve_lock);
#define C(f) st->f = __atomic_load_n(&s->st.f, __ATOMIC_RELAXED)
	C(reads);
	C(writes);
	C(dedup_hits);
	C(zero_chunks);
	C(partial_collisions);
	C(verify_failures);
	C(read_errors);
	C(flushes);
	C(fsyncs);
	C(replayed_records);
	C(truncated_bytes);
	C(deletes);
	C(copies);
	C(gc_runs);
	C(gc_segments_examined);
	C(gc_segments_removed);
	C(gc_bytes_copied);
	C(gc_bytes_reclaimed);
	C(gc_failures);
	C(gc_segments_sealed);
#undef C
	st->segment_size = s->segment_size;
	st->reclaimable_bytes =
	    __atomic_load_n(&s->gc_reclaimable, __ATOMIC_RELAXED);
	st->closed_bytes =
	    __atomic_load_n(&s->gc_closed_bytes, __ATOMIC_RELAXED);
	st->chunk_size = s->chunk_size;
	pthread_mutex_lock(&s->sync_lock);
	st->degraded_errno = s->degraded;
	memcpy(st->degraded_reason, s->degraded_reason,
	       sizeof(st->degraded_reason));
	pthread_mutex_unlock(&s->sync_lock);
	return 0;
}

/* ---- open / close ---- */

static void *bg_main(void *arg)
{
	struct blocker_store *s = arg;
	unsigned ms = s->o.sync_interval_ms ? s->o.sync_interval_ms : 1000;

	pthread_mutex_lock(&s->bg_lock);
	while (!s->bg_stop) {
		struct timespec ts;

		ts = xtime_in(CLOCK_MONOTONIC, ms * 1000000ULL);
		pthread_cond_timedwait(&s->bg_cond, &s->bg_lock, &ts);
		if (s->bg_stop)
			break;
		pthread_mutex_unlock(&s->bg_lock);
		uint64_t tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
		if (s->o.sync_interval_ms && !blocker_degraded(s))
			blog_flush(s);
		if (s->o.checkpoint_bytes && !blocker_degraded(s) &&
		    tail - __atomic_load_n(&s->last_ckpt, __ATOMIC_ACQUIRE) >=
			s->o.checkpoint_bytes)
			blocker_checkpoint(s);
		pthread_mutex_lock(&s->bg_lock);
	}
	pthread_mutex_unlock(&s->bg_lock);
	return NULL;
}

static void bg_thread_stop(struct blocker_store *s)
{
	if (!s->bg_running)
		return;
	pthread_mutex_lock(&s->bg_lock);
	s->bg_stop = true;
	pthread_cond_signal(&s->bg_cond);
	pthread_mutex_unlock(&s->bg_lock);
	pthread_join(s->bg, NULL);
	s->bg_running = false;
}

static void store_free(struct blocker_store *s)
{
	bgc_stop(s);
	bmaps_destroy(s);
	bidx_destroy(&s->index);
	blog_close(s);
	if (s->lockfd >= 0)
		close(s->lockfd); /* drops the flock */
	if (s->dirfd >= 0)
		close(s->dirfd);
	pthread_mutex_destroy(&s->append_lock);
	pthread_rwlock_destroy(&s->segs_lock);
	pthread_mutex_destroy(&s->sync_lock);
	pthread_cond_destroy(&s->sync_cond);
	pthread_cond_destroy(&s->gather_cond);
	pthread_rwlock_destroy(&s->ckpt_lock);
	pthread_mutex_destroy(&s->ckpt_mutex);
	pthread_mutex_destroy(&s->bg_lock);
	pthread_cond_destroy(&s->bg_cond);
	pthread_mutex_destroy(&s->gc_mutex);
	pthread_mutex_destroy(&s->reserve_lock);
	pthread_mutex_destroy(&s->syncrec_lock);
	free(s->dir);
	free(s);
}

/*
 * A log fsync failed in an earlier process (DIR/sync_error): the pages it
 * lost may still read back from the page cache, and an fsync now would
 * return 0 for them. Exactly the state that process left: degraded, the
 * fsync error sticky (EIO), until the operator clears the record.
 */
static void sync_error_at_open(struct blocker_store *s)
{
	char desc[200];

	if (!bsyncerr_read(s->dirfd, desc, sizeof(desc)))
		return;
	s->sync_err = EIO;
	s->sync_recorded = true; /* keep the first failure's record */
	blocker_logf(&s->o, BLOCKER_LOG_ERR,
		     "blocker: %s/%s: %s: writes acknowledged after that "
		     "position may never have reached the disk although they "
		     "read back; writes, FLUSH and FUA fail with EIO until "
		     "the disk is checked and 'blockerctl clear-sync-error "
		     "%s' removes the record",
		     s->dir, BLOCKER_SYNC_ERROR_FILE, desc, s->dir);
	blocker_degrade(s, EIO, "log fsync failed in an earlier run (%s)",
			BLOCKER_SYNC_ERROR_FILE);
}

int blocker_clear_sync_error(const char *dir, const struct blocker_opts *o)
{
	struct blocker_opts defaults;
	uint32_t chunk, version;
	uint64_t seg_size;
	char desc[200];
	int dirfd, lockfd = -1, r;
	DIR *d = NULL;
	struct dirent *e;
	unsigned evicted = 0;

	if (!o) {
		blocker_opts_init(&defaults);
		o = &defaults;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	r = blocker_read_super(dirfd, &chunk, &seg_size, &version);
	if (r)
		goto out;
	lockfd = openat(dirfd, BLOCKER_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC,
			0644);
	if (lockfd < 0) {
		r = -errno;
		goto out;
	}
	if (flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto out;
	}
	if (!bsyncerr_read(dirfd, desc, sizeof(desc))) {
		r = -ENOENT;
		goto out;
	}
	/* the clean pages a failed writeback left: read from disk again */
	r = dup(dirfd);
	d = r >= 0 ? fdopendir(r) : NULL;
	if (!d && r >= 0)
		close(r);
	r = 0;
	while (d && (e = readdir(d))) {
		uint32_t seg;
		if (!blog_seg_name(e->d_name, &seg))
			continue;
		int fd = openat(dirfd, e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (!posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED))
			evicted++;
		close(fd);
	}
	if (unlinkat(dirfd, BLOCKER_SYNC_ERROR_FILE, 0) < 0 ||
	    fsync(dirfd) < 0) {
		r = -errno;
		goto out;
	}
	blocker_logf(o, BLOCKER_LOG_WARN,
		     "blocker: %s/%s: cleared (%s); %u segment file(s) dropped "
		     "from the page cache: the next open reads the log from "
		     "the disk",
		     dir, BLOCKER_SYNC_ERROR_FILE, desc, evicted);
out:
	if (d)
		closedir(d);
	if (lockfd >= 0)
		close(lockfd);
	close(dirfd);
	return r;
}

static void reset_state(struct blocker_store *s)
{
	bmaps_destroy(s);
	bmaps_init(s);
	bidx_destroy(&s->index);
	bidx_init(&s->index, s->o.partial_bits, 0);
}

/*
 * A checkpoint truncate_at_damage discarded (it lay beyond the end of the
 * log that is left) is still on disk: the next open without the override
 * would find it there and refuse the repaired store (review21a R1). So a
 * new one is written at once, after the stale files are removed where GC
 * removed no segment (then, if the new one cannot be written, a full disk:
 * the store degraded by ENOSPC, its close writes none either, the next
 * open replays the whole log as this one did). With segments removed by
 * GC the maps cannot be rebuilt from the log without a checkpoint: said,
 * and left.
 */
static void replace_discarded_checkpoint(struct blocker_store *s)
{
	static const char *const files[] = {BLOCKER_MAPS_FILE,
					    BLOCKER_INDEX_FILE};

	if (s->gc_ckpt) {
		uint64_t pos;

		/* the maps cannot be rebuilt from the log: a new checkpoint
		 * or nothing (a crash between its maps and index files
		 * leaves the stale index, and the next open needs the
		 * override again) */
		if (blocker_checkpoint(s)) {
			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s: the discarded checkpoint "
				     "could not be replaced, and GC removed "
				     "segments: the next open needs "
				     "truncate_at_damage again unless a "
				     "checkpoint succeeds before then",
				     s->dir);
			return;
		}
		/* DIR/gc's C may lie past the end of what is left too (the
		 * log cut below GC's own checkpoint): the next open would
		 * refuse the new checkpoint as older than C. The repaired
		 * state in it is what the removals now rely on: C = its
		 * position. Written after it, so a crash in between leaves
		 * the old C and the override is needed again, never a C
		 * that no checkpoint on disk reaches (safety22). */
		pos = __atomic_load_n(&s->last_ckpt, __ATOMIC_ACQUIRE);
		if (s->gc_ckpt > pos) {
			if (bgc_save(s, pos))
				blocker_logf(&s->o, BLOCKER_LOG_ERR,
					     "blocker: %s/%s: cannot lower "
					     "its checkpoint position to the "
					     "repaired log's: the next open "
					     "needs truncate_at_damage again",
					     s->dir, BLOCKER_GC_FILE);
			else
				s->gc_ckpt = pos;
		}
		return;
	}
	/* The log alone rebuilds everything: the stale files go first, the
	 * directory synced, so that a crash at any point leaves no
	 * checkpoint (a whole replay, as this open did) or the new one,
	 * never a new maps file next to the stale index (review21c F8). */
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (unlinkat(s->dirfd, files[i], 0) < 0 && errno != ENOENT)
			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s/%s: cannot remove the "
				     "discarded checkpoint: %s",
				     s->dir, files[i], strerror(errno));
	if (fsync(s->dirfd) < 0)
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: fsync of the directory: %s", s->dir,
			     strerror(errno));
	if (blocker_checkpoint(s))
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: removed the discarded checkpoint "
			     "files and could not write a new one: the next "
			     "open replays the whole log",
			     s->dir);
}

/* A store as blocker_open begins it: options, locks and conditions set
 * up, nothing opened (store_free undoes it). NULL without memory. */
static struct blocker_store *store_new(const char *dir,
				       const struct blocker_opts *opts)
{
	struct blocker_store *s;

	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (opts)
		s->o = *opts;
	else
		blocker_opts_init(&s->o);
	s->dirfd = s->lockfd = -1;
	pthread_mutex_init(&s->append_lock, NULL);
	pthread_rwlock_init(&s->segs_lock, NULL);
	pthread_mutex_init(&s->sync_lock, NULL);
	pthread_cond_init(&s->sync_cond, NULL);
	pthread_rwlock_init(&s->ckpt_lock, NULL);
	pthread_mutex_init(&s->ckpt_mutex, NULL);
	pthread_mutex_init(&s->bg_lock, NULL);
	pthread_mutex_init(&s->gc_mutex, NULL);
	pthread_mutex_init(&s->reserve_lock, NULL);
	pthread_mutex_init(&s->syncrec_lock, NULL);
	xtime_cond_init_monotonic(&s->bg_cond);
	xtime_cond_init_monotonic(&s->gather_cond);
	s->io = s->o.io ? s->o.io : &blocker_io_sync;
	s->io_ctx = s->o.io_ctx;
	s->dir = strdup(dir);
	if (!s->dir) {
		store_free(s);
		return NULL;
	}
	return s;
}

/* what store_judge found: the checkpoints recovery started from */
struct open_verdict {
	uint64_t idx_pos, maps_pos;
	bool ckpt_discarded; /* truncate_at_damage discarded them */
};

/*
 * blocker_open's verdict on a store whose super block it read (and whose
 * lock it holds): open the segments, load the checkpoints, recover. 0 if
 * the store is accepted, else the refusal (logged with its reason). A
 * normal open changes nothing on disk before recovery's last refusal
 * check: the files it creates or removes wait for the verdict (review23h
 * F1, F2). Recovery's own two repairs come after that check, at or past
 * D: the cut of a torn tail, and the drop of an empty last segment with
 * the reset of a mark pointing into it (bmark_reset); after them only an
 * I/O error makes this fail (review-blocker24 R4). With
 * s->judge_only (blocker_verdict, for check) recovery changes nothing at
 * all, not even a torn tail it would cut (store_int.h).
 */
static int store_judge(struct blocker_store *s, struct open_verdict *v)
{
	int r;

	r = bidx_init(&s->index, s->o.partial_bits, 0);
	if (!r)
		r = bmaps_init(s);
	if (!r)
		r = blog_open_segments(s, true);
	if (r)
		return r;
	r = bidx_load(s, &v->idx_pos);
	if (r) {
		if (r != -ENOENT || s->nsegs > 1 ||
		    (s->nsegs == 1 && lseek(s->segs[0].fd, 0, SEEK_END) > 0))
			blocker_logf(&s->o, BLOCKER_LOG_WARN,
				     "blocker: %s/%s: %s; rebuilding the index "
				     "from the log",
				     s->dir, BLOCKER_INDEX_FILE,
				     r == -ENOENT ? "missing" : "unusable");
		v->idx_pos = 0;
	}
	r = bmaps_load(s, &v->maps_pos);
	if (r) {
		if (r != -ENOENT)
			blocker_logf(&s->o, BLOCKER_LOG_WARN,
				     "blocker: %s/%s: unusable; replaying the "
				     "whole journal",
				     s->dir, BLOCKER_MAPS_FILE);
		/* drop what a half-parsed file left behind */
		bmaps_destroy(s);
		r = bmaps_init(s);
		if (r)
			return r;
		v->maps_pos = 0;
	}
	/*
	 * GC removed segments whose journal records only the maps
	 * checkpoint it wrote (s->gc_ckpt, DIR/gc) still holds: an older or
	 * missing maps file cannot be completed from the log. The index can
	 * (every live chunk was copied below gc_ckpt).
	 */
	if (v->maps_pos < s->gc_ckpt) {
		if (!s->o.truncate_at_damage) {
			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s/%s: checkpoint at %llu "
				     "predates the segments GC removed (it "
				     "needs one at %llu or later): the object "
				     "maps cannot be rebuilt from the log; "
				     "refusing to open (truncate_at_damage "
				     "replays what is left)",
				     s->dir, BLOCKER_MAPS_FILE,
				     (unsigned long long)v->maps_pos,
				     (unsigned long long)s->gc_ckpt);
			return -EUCLEAN;
		}
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s/%s: predates the segments GC "
			     "removed; truncate_at_damage: replaying the "
			     "journal that is left (maps may be incomplete)",
			     s->dir, BLOCKER_MAPS_FILE);
		bmaps_destroy(s);
		r = bmaps_init(s);
		if (r)
			return r;
		v->maps_pos = 0;
	}
	if (v->idx_pos && v->idx_pos < s->gc_ckpt) {
		blocker_logf(
		    &s->o, BLOCKER_LOG_WARN,
		    "blocker: %s/%s: predates the segments GC removed; "
		    "rebuilding the index from the log",
		    s->dir, BLOCKER_INDEX_FILE);
		bidx_destroy(&s->index);
		r = bidx_init(&s->index, s->o.partial_bits, 0);
		if (r)
			return r;
		v->idx_pos = 0;
	}
	r = blocker_recover(s, v->idx_pos, v->maps_pos);
	/* A checkpoint is saved only after the log below it was flushed
	 * (blocker_checkpoint), so a log that ends below it lost flushed
	 * records: damage, refused like damage below the durable mark
	 * (which may be older than the checkpoint, or missing). Before
	 * session 21 this was refused only where GC had removed segments,
	 * and otherwise replayed with a warning, the lost writes gone
	 * (safety21gc F3). truncate_at_damage replays what is left. */
	if (r == -ERANGE && !s->o.truncate_at_damage) {
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: checkpoint lies beyond the end of "
			     "the log: flushed records are missing%s; "
			     "refusing to open (truncate_at_damage replays "
			     "what is left)",
			     s->dir,
			     s->gc_ckpt ? ", and GC removed segments: the "
					  "maps cannot be rebuilt from the log"
					: "");
		r = -EUCLEAN;
	}
	if (r == -ERANGE) {
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: checkpoint lies beyond the end of "
			     "the log; discarding it and replaying the log",
			     s->dir);
		reset_state(s);
		r = blocker_recover(s, 0, 0);
		v->idx_pos = v->maps_pos = 0;
		v->ckpt_discarded = true;
	}
	return r;
}

/*
 * What blocker_open and blocker_verdict both do first (review-blocker24
 * R6: one body, where the verdict had silently defaulted a bad
 * partial_bits and not logged an unsupported format version): check the
 * options, open the directory, read the super block (*version).
 */
static int store_begin(struct blocker_store *s, uint32_t *version)
{
	int r;

	if (s->o.partial_bits == 0 || s->o.partial_bits > 40)
		return -EINVAL;
	s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0)
		return -errno;
	r = blocker_read_super(s->dirfd, &s->chunk_size, &s->segment_size,
			       version);
	if (r == -EPROTONOSUPPORT)
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s/%s: format version %u not supported "
			     "(this build reads 1..%d)",
			     s->dir, BLOCKER_SUPER_FILE, *version,
			     BLOCKER_FORMAT_VERSION);
	return r;
}

int blocker_verdict(const char *dir, const struct blocker_opts *o)
{
	struct open_verdict v = {0};
	struct blocker_store *s = store_new(dir, o);
	uint32_t version;
	int r;

	if (!s)
		return -ENOMEM;
	s->judge_only = true;
	s->o.truncate_at_damage = false;
	/* read through the backend: no SIGBUS guard needed */
	s->o.mmap_reads = false;
	r = store_begin(s, &version);
	if (!r)
		r = store_judge(s, &v);
	store_free(s);
	return r;
}

int blocker_open(const char *dir, const struct blocker_opts *opts,
		 struct blocker_store **out)
{
	struct blocker_store *s;
	struct open_verdict v = {0};
	uint64_t idx_pos, maps_pos;
	uint32_t version = 0;
	bool ckpt_discarded;
	int r;

	s = store_new(dir, opts);
	if (!s)
		return -ENOMEM;
	r = store_begin(s, &version);
	if (r)
		goto fail;
	/* without the SIGBUS guard a mapped read fault kills the process
	 * (installed before any segment is mapped, in store_judge) */
	if (s->o.mmap_reads && (r = bguard_install())) {
		/* (not on this platform: nothing the operator can fix) */
		blocker_logf(
		    &s->o, r == -ENOTSUP ? BLOCKER_LOG_INFO : BLOCKER_LOG_WARN,
		    "blocker: %s: %s: %s; reading with %s", dir,
		    r == -EBUSY ? "another SIGBUS handler is in place "
				  "of the store's (mapped reads need "
				  "it)"
				: "cannot install the SIGBUS handler "
				  "for mapped reads",
		    strerror(-r), s->io->name);
		s->o.mmap_reads = false;
	}
	/*
	 * The one file an open may create before its verdict (review23h F2:
	 * a refused open creates nothing else). The flock must be held
	 * before anything is read, or a store a live process is appending
	 * to would be judged mid-write and refused instead of -EBUSY; the
	 * file must exist to be locked; and removing it again at a refusal
	 * would break the exclusion (an opener that opened it before the
	 * unlink would lock the orphaned inode while a third one locks a
	 * new file). blocker_create makes it, so only a store of a build
	 * before session 24 that was never opened lacks it; it is empty,
	 * and nothing reads it or counts its presence.
	 */
	s->lockfd = openat(s->dirfd, BLOCKER_LOCK_FILE,
			   O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lockfd < 0) {
		r = -errno;
		goto fail;
	}
	if (flock(s->lockfd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto fail;
	}
	r = store_judge(s, &v);
	idx_pos = v.idx_pos;
	maps_pos = v.maps_pos;
	ckpt_discarded = v.ckpt_discarded;
	/* only now, recovery having accepted the store: a refused open
	 * changes nothing (review23h F1); truncate_at_damage finished them
	 * before its repair (blog_open_segments) */
	if (!r && !s->o.truncate_at_damage)
		r = blog_finish_gc_removals(s);
	/* the files a store may lack are made only now, for the same
	 * reason (review23h F2): log.000000 of a store never written to,
	 * then the durable mark of a store made before marks (in the order
	 * blocker_create writes them: a crash between the two leaves a
	 * store that still counts as never written) */
	if (!r)
		r = blog_create_first(s);
	if (!r)
		r = bmark_create_missing(s);
	if (r)
		goto fail;
	/* a version 1 reader would take a zero tail for a torn one */
	if (version < BLOCKER_FORMAT_VERSION) {
		r = blocker_write_super(s->dirfd, s->chunk_size,
					s->segment_size);
		if (r)
			goto fail;
		blocker_logf(&s->o, BLOCKER_LOG_INFO,
			     "blocker: %s/%s: format version %u upgraded to %d",
			     dir, BLOCKER_SUPER_FILE, version,
			     BLOCKER_FORMAT_VERSION);
	}
	s->last_ckpt = idx_pos < maps_pos ? idx_pos : maps_pos;
	sync_error_at_open(s);
	/* (missing in stores made before it, or cut short by a crash) */
	bres_open(s);
	/* Also when no checkpoint was discarded but the repaired log ends
	 * below GC's C: a repair that died after writing its new checkpoint
	 * and before lowering C (or one whose maps and index were both
	 * missing) left C past every record, and the next repair open takes
	 * the "predates" path with no -ERANGE; without this, C would never
	 * be lowered and every normal open would refuse the store
	 * (review22s F1). */
	if (ckpt_discarded ||
	    (s->o.truncate_at_damage &&
	     s->gc_ckpt > __atomic_load_n(&s->tail, __ATOMIC_RELAXED)))
		replace_discarded_checkpoint(s);
	if (s->o.sync_interval_ms || s->o.checkpoint_bytes) {
		r = -pthread_create(&s->bg, NULL, bg_main, s);
		if (r)
			goto fail;
		s->bg_running = true;
	}
	r = bgc_start(s);
	if (r)
		goto fail_bg;
	*out = s;
	return 0;
fail_bg:
	bg_thread_stop(s);
fail:
	store_free(s);
	return r;
}

void blocker_abandon(struct blocker_store *s)
{
	bg_thread_stop(s);
	store_free(s); /* stops GC; writes nothing */
}

int blocker_close(struct blocker_store *s)
{
	int r;

	bgc_stop(s);
	bg_thread_stop(s);
	if (blocker_degraded(s))
		r = blog_flush(s);
	else
		r = blocker_checkpoint(s);
	/* a cleanly closed store ends at its last record */
	if (!r && !blocker_degraded(s) && (r = blog_trim_tail(s)) > 0)
		r = 0;
	store_free(s);
	return r;
}
