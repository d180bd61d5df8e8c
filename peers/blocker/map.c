/* SPDX-License-Identifier: MIT */
/*
 * Object maps in RAM (a hash table of objects, each an array of scores)
 * and the checkpoint files that persist maps and index.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "store_int.h"

static uint64_t name_hash(const char *name, size_t len)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 1099511628211ULL;
	return h;
}

int bmaps_init(struct blocker_store *s)
{
	s->nr_objects = 0;
	s->nr_logical_chunks = 0;
	s->objs_mask = 255;
	s->objs = calloc(s->objs_mask + 1, sizeof(*s->objs));
	if (!s->objs)
		return -ENOMEM;
	pthread_rwlock_init(&s->objs_lock, NULL);
	return 0;
}

static void bobj_free(struct bobj *o)
{
	pthread_rwlock_destroy(&o->lock);
	free(o->scores);
	free(o);
}

void bmaps_destroy(struct blocker_store *s)
{
	if (!s->objs)
		return;
	for (uint64_t i = 0; i <= s->objs_mask; i++) {
		struct bobj *o = s->objs[i], *n;
		for (; o; o = n) {
			n = o->next;
			bobj_free(o);
		}
	}
	free(s->objs);
	s->objs = NULL;
	pthread_rwlock_destroy(&s->objs_lock);
}

static struct bobj *find(struct blocker_store *s, const char *name, size_t len)
{
	struct bobj *o = s->objs[name_hash(name, len) & s->objs_mask];

	for (; o; o = o->next)
		if (o->namelen == len && !memcmp(o->name, name, len))
			return o;
	return NULL;
}

static void grow_table(struct blocker_store *s)
{
	uint64_t nmask = s->objs_mask * 2 + 1;
	struct bobj **n = calloc(nmask + 1, sizeof(*n));

	if (!n)
		return; /* chains just get longer */
	for (uint64_t i = 0; i <= s->objs_mask; i++) {
		struct bobj *o = s->objs[i], *next;
		for (; o; o = next) {
			next = o->next;
			uint64_t b = name_hash(o->name, o->namelen) & nmask;
			o->next = n[b];
			n[b] = o;
		}
	}
	free(s->objs);
	s->objs = n;
	s->objs_mask = nmask;
}

/*
 * Returns the object with a reference the caller drops with bobj_put(), or
 * NULL (missing and !create, or out of memory). The table owns one
 * reference until the object is unlinked.
 */
struct bobj *bobj_get(struct blocker_store *s, const char *name, size_t len,
		      bool create)
{
	struct bobj *o;

	pthread_rwlock_rdlock(&s->objs_lock);
	o = find(s, name, len);
	if (o)
		__atomic_fetch_add(&o->refs, 1, __ATOMIC_RELAXED);
	pthread_rwlock_unlock(&s->objs_lock);
	if (o || !create)
		return o;

	pthread_rwlock_wrlock(&s->objs_lock);
	o = find(s, name, len);
	if (o) {
		__atomic_fetch_add(&o->refs, 1, __ATOMIC_RELAXED);
		goto out;
	}
	o = calloc(1, sizeof(*o) + len);
	if (!o)
		goto out;
	pthread_rwlock_init(&o->lock, NULL);
	memcpy(o->name, name, len);
	o->namelen = len;
	o->refs = 2;
	if (s->nobjs + 1 > s->objs_mask + 1)
		grow_table(s);
	uint64_t b = name_hash(name, len) & s->objs_mask;
	o->next = s->objs[b];
	s->objs[b] = o;
	s->nobjs++;
out:
	pthread_rwlock_unlock(&s->objs_lock);
	return o;
}

void bobj_put(struct blocker_store *s, struct bobj *o)
{
	if (__atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) == 0)
		bobj_free(o);
}

/* Remove from the table and drop the table's reference. */
int bmaps_unlink(struct blocker_store *s, struct bobj *o)
{
	struct bobj **pp;

	pthread_rwlock_wrlock(&s->objs_lock);
	pp = &s->objs[name_hash(o->name, o->namelen) & s->objs_mask];
	while (*pp && *pp != o)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = o->next;
		s->nobjs--;
	}
	pthread_rwlock_unlock(&s->objs_lock);
	bobj_put(s, o);
	return 0;
}

void bobj_forget_unborn(struct blocker_store *s, struct bobj *o)
{
	if (o->live)
		return;
	o->deleted = true;
	bmaps_unlink(s, o);
}

static bool bobj_counts(const struct bobj *o)
{
	return o->live && !o->deleted;
}

void bobj_uncount(struct blocker_store *s, const struct bobj *o)
{
	if (!bobj_counts(o))
		return;
	__atomic_sub_fetch(&s->nr_objects, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&s->nr_logical_chunks, o->nonzero, __ATOMIC_RELAXED);
}

void bobj_count(struct blocker_store *s, const struct bobj *o)
{
	if (!bobj_counts(o))
		return;
	__atomic_add_fetch(&s->nr_objects, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->nr_logical_chunks, o->nonzero, __ATOMIC_RELAXED);
}

void bobj_set_score(struct bobj *o, uint64_t idx,
		    const uint8_t score[BLOCKER_SCORE_SIZE])
{
	bool was = !blocker_score_is_zero(o->scores[idx]);
	bool is = !blocker_score_is_zero(score);

	memcpy(o->scores[idx], score, BLOCKER_SCORE_SIZE);
	if (is && !was)
		o->nonzero++;
	else if (was && !is)
		o->nonzero--;
}

int bmaps_visit(struct blocker_store *s, bmaps_visit_fn fn, void *arg)
{
	struct bobj **all;
	uint64_t n = 0;
	int r = 0;

	/* take references under the table lock, look inside each object
	 * after dropping it: delete holds an object's lock while it takes
	 * the table lock */
	pthread_rwlock_rdlock(&s->objs_lock);
	all = malloc((s->nobjs + 1) * sizeof(*all));
	for (uint64_t b = 0; all && b <= s->objs_mask; b++)
		for (struct bobj *o = s->objs[b]; o; o = o->next) {
			__atomic_fetch_add(&o->refs, 1, __ATOMIC_RELAXED);
			all[n++] = o;
		}
	pthread_rwlock_unlock(&s->objs_lock);
	if (!all)
		return -ENOMEM;
	for (uint64_t k = 0; k < n; k++) {
		struct bobj *o = all[k];

		if (!r) {
			pthread_rwlock_rdlock(&o->lock);
			r = fn(arg, o);
			pthread_rwlock_unlock(&o->lock);
		}
		bobj_put(s, o);
	}
	free(all);
	return r;
}

struct recount_acc {
	uint64_t objects, logical_chunks;
};

static int recount_fn(void *arg, const struct bobj *o)
{
	struct recount_acc *a = arg;

	a->objects += bobj_counts(o);
	for (uint64_t i = 0; i < o->nchunks && !o->deleted; i++)
		a->logical_chunks += !blocker_score_is_zero(o->scores[i]);
	return 0;
}

int bmaps_recount(struct blocker_store *s, uint64_t *objects,
		  uint64_t *logical_chunks)
{
	struct recount_acc a = {0, 0};
	int r = bmaps_visit(s, recount_fn, &a);

	*objects = a.objects;
	*logical_chunks = a.logical_chunks;
	return r;
}

int bobj_reserve(struct bobj *o, uint64_t n)
{
	uint64_t ncap;
	void *p;

	if (n <= o->nchunks)
		return 0;
	ncap = o->nchunks ? o->nchunks : 16;
	while (ncap < n)
		ncap *= 2;
	p = realloc(o->scores, ncap * BLOCKER_SCORE_SIZE);
	if (!p)
		return -ENOMEM;
	o->scores = p;
	memset(o->scores[o->nchunks], 0,
	       (ncap - o->nchunks) * BLOCKER_SCORE_SIZE);
	o->nchunks = ncap;
	return 0;
}

/* Replay: single-threaded, before the store is shared. */
int bmaps_apply(struct blocker_store *s, enum brec_type type, const uint8_t *p,
		uint32_t len)
{
	const char *n1, *n2;
	size_t l1, l2;
	struct bobj *o, *d;
	int r;

	switch (type) {
	case BREC_MAP: {
		uint64_t size;
		uint32_t n;
		const uint8_t *u;

		r = bmap_decode(p, len, &n1, &l1, &size, &n, &u);
		if (r)
			return r;
		o = bobj_get(s, n1, l1, true);
		if (!o)
			return -ENOMEM;
		bobj_uncount(s, o);
		r = bobj_reserve(o, (size + s->chunk_size - 1) / s->chunk_size);
		for (uint32_t i = 0; i < n && !r; i++, u += BMAP_UPDATE_SIZE) {
			uint64_t idx = get_le64(u);
			if (idx >= o->nchunks || idx * s->chunk_size >= size) {
				r = -EBADMSG;
				break;
			}
			bobj_set_score(o, idx, u + 8);
		}
		if (!r && size > o->size)
			o->size = size;
		o->live = true;
		bobj_count(s, o);
		bobj_put(s, o);
		return r;
	}
	case BREC_DELETE:
		r = bnames_decode(p, len, 1, &n1, &l1, &n2, &l2);
		if (r)
			return r;
		o = bobj_get(s, n1, l1, false);
		if (o) {
			bobj_uncount(s, o);
			o->deleted = true;
			bmaps_unlink(s, o);
			bobj_put(s, o);
		}
		return 0;
	case BREC_COPY:
		r = bnames_decode(p, len, 2, &n1, &l1, &n2, &l2);
		if (r)
			return r;
		o = bobj_get(s, n1, l1, false);
		if (!o)
			return -EBADMSG;
		if (l1 == l2 && !memcmp(n1, n2, l1)) {
			/* blocker_copy refuses it; as a record it changes
			 * nothing (replayed as such it freed the object's
			 * map and left it empty, review-counters finding 2) */
			bobj_put(s, o);
			return 0;
		}
		d = bobj_get(s, n2, l2, true);
		if (!d) {
			bobj_put(s, o);
			return -ENOMEM;
		}
		bobj_uncount(s, d);
		free(d->scores);
		d->scores = NULL;
		d->nchunks = 0;
		r = bobj_reserve(d, o->nchunks);
		if (!r && o->nchunks)
			memcpy(d->scores, o->scores,
			       o->nchunks * BLOCKER_SCORE_SIZE);
		d->nonzero = r ? 0 : o->nonzero;
		d->size = o->size;
		d->live = true;
		bobj_count(s, d);
		bobj_put(s, d);
		bobj_put(s, o);
		return r;
	default:
		return -EBADMSG;
	}
}

/* ---- checkpoint files ---- */

#define CKPT_HDR_SIZE 72

int blocker_write_file_atomic(int dirfd, const char *name,
			      const struct iovec *iov, int cnt)
{
	char tmp[300];
	int fd, r = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	for (int i = 0; i < cnt && !r; i++) {
		size_t done = 0;
		while (done < iov[i].iov_len) {
			ssize_t w = write(fd, (char *)iov[i].iov_base + done,
					  iov[i].iov_len - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				r = w < 0 ? -errno : -EIO;
				break;
			}
			done += w;
		}
	}
	if (!r && fdatasync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && !r)
		r = -errno;
	if (!r && renameat(dirfd, tmp, dirfd, name) < 0)
		r = -errno;
	if (!r && fsync(dirfd) < 0)
		r = -errno;
	if (r)
		unlinkat(dirfd, tmp, 0);
	return r;
}

static void ckpt_header(uint8_t *h, const char magic[8], uint64_t pos,
			uint64_t count, const uint8_t *payload, size_t len)
{
	memset(h, 0, CKPT_HDR_SIZE);
	memcpy(h, magic, 8);
	put_le32(h + 8, 1);
	put_le64(h + 16, pos);
	put_le64(h + 24, count);
	put_le64(h + 32, len);
	blocker_sha256(payload, len, h + 40);
}

/* Read a checkpoint file; *payload is malloc'd. -ENOENT, -EBADMSG. */
static int ckpt_read(int dirfd, const char *name, const char magic[8],
		     uint64_t *pos, uint64_t *count, uint8_t **payload,
		     size_t *len)
{
	uint8_t h[CKPT_HDR_SIZE], sum[32];
	struct stat st;
	uint8_t *buf;
	size_t got = 0;
	int fd, r = 0;

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (st.st_size < CKPT_HDR_SIZE) {
		r = -EBADMSG;
		goto out;
	}
	buf = malloc(st.st_size);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EBADMSG;
			free(buf);
			goto out;
		}
		got += n;
	}
	memcpy(h, buf, CKPT_HDR_SIZE);
	*len = get_le64(h + 32);
	if (memcmp(h, magic, 8) || get_le32(h + 8) != 1 ||
	    *len != (size_t)st.st_size - CKPT_HDR_SIZE) {
		free(buf);
		r = -EBADMSG;
		goto out;
	}
	blocker_sha256(buf + CKPT_HDR_SIZE, *len, sum);
	if (memcmp(sum, h + 40, 32)) {
		free(buf);
		r = -EBADMSG;
		goto out;
	}
	*pos = get_le64(h + 16);
	*count = get_le64(h + 24);
	memmove(buf, buf + CKPT_HDR_SIZE, *len);
	*payload = buf;
out:
	close(fd);
	return r;
}

/*
 * Maps file payload: per object le16 namelen, name, le64 size, le64 n,
 * then n times (le64 chunk index, 32-byte score) for non-hole chunks.
 * Caller excludes writers (ckpt_lock held exclusive).
 */
/* the maps payload's size: per live object its name, size and count,
 * and 40 bytes per stored chunk; objects may not change meanwhile */
static uint64_t maps_size(struct blocker_store *s)
{
	uint64_t need = 0;

	for (uint64_t b = 0; b <= s->objs_mask; b++)
		for (struct bobj *o = s->objs[b]; o; o = o->next) {
			if (!o->live)
				continue;
			need += 2 + o->namelen + 16;
			for (uint64_t i = 0; i < o->nchunks; i++)
				if (!blocker_score_is_zero(o->scores[i]))
					need += 40;
		}
	return need;
}

uint64_t bmaps_ckpt_bytes(struct blocker_store *s)
{
	uint64_t need;

	pthread_rwlock_rdlock(&s->objs_lock);
	need = maps_size(s);
	pthread_rwlock_unlock(&s->objs_lock);
	return need;
}

static int maps_serialize(struct blocker_store *s, uint8_t **out, size_t *len,
			  uint64_t *count)
{
	size_t need = maps_size(s), off = 0;
	uint8_t *buf;

	*count = 0;
	buf = malloc(need ? need : 1);
	if (!buf)
		return -ENOMEM;
	for (uint64_t b = 0; b <= s->objs_mask; b++)
		for (struct bobj *o = s->objs[b]; o; o = o->next) {
			uint64_t n = 0;
			size_t at;

			if (!o->live)
				continue;
			put_le16(buf + off, o->namelen);
			memcpy(buf + off + 2, o->name, o->namelen);
			off += 2 + o->namelen;
			put_le64(buf + off, o->size);
			at = off + 8;
			off += 16;
			for (uint64_t i = 0; i < o->nchunks; i++) {
				if (blocker_score_is_zero(o->scores[i]))
					continue;
				put_le64(buf + off, i);
				memcpy(buf + off + 8, o->scores[i], 32);
				off += 40;
				n++;
			}
			put_le64(buf + at, n);
			(*count)++;
		}
	*out = buf;
	*len = off;
	return 0;
}

/* Write one checkpoint file (header + body) atomically: the maps and index
 * files differ only in their magic and name. */
static int ckpt_save_file(struct blocker_store *s, const char *file,
			  const char magic[8], uint64_t pos, const uint8_t *p,
			  size_t len, uint64_t count)
{
	uint8_t h[CKPT_HDR_SIZE];
	struct iovec iov[2] = {{h, CKPT_HDR_SIZE}, {(void *)p, len}};

	ckpt_header(h, magic, pos, count, p, len);
	return blocker_write_file_atomic(s->dirfd, file, iov, 2);
}

int bmaps_save_buf(struct blocker_store *s, uint64_t pos, const uint8_t *p,
		   size_t len, uint64_t count)
{
	return ckpt_save_file(s, BLOCKER_MAPS_FILE, "BLKMAPS1", pos, p, len,
			      count);
}

int bmaps_save(struct blocker_store *s, uint64_t pos)
{
	uint8_t *p;
	size_t len;
	uint64_t count;
	int r = maps_serialize(s, &p, &len, &count);

	if (r)
		return r;
	r = bmaps_save_buf(s, pos, p, len, count);
	free(p);
	return r;
}

int bmaps_snapshot(struct blocker_store *s, uint8_t **p, size_t *len,
		   uint64_t *count)
{
	return maps_serialize(s, p, len, count);
}

int bmaps_load(struct blocker_store *s, uint64_t *pos)
{
	uint8_t *p;
	size_t len, off = 0;
	uint64_t count;
	int r;

	r = ckpt_read(s->dirfd, BLOCKER_MAPS_FILE, "BLKMAPS1", pos, &count, &p,
		      &len);
	if (r)
		return r;
	for (uint64_t k = 0; k < count; k++) {
		size_t nl;
		uint64_t size, n;
		struct bobj *o;

		if (off + 2 > len)
			goto bad;
		nl = get_le16(p + off);
		if (off + 2 + nl + 16 > len ||
		    !blocker_name_valid((char *)p + off + 2, nl))
			goto bad;
		size = get_le64(p + off + 2 + nl);
		n = get_le64(p + off + 10 + nl);
		if (size > BLOCKER_MAX_OBJECT_SIZE ||
		    n > (len - off - 18 - nl) / 40)
			goto bad;
		o = bobj_get(s, (char *)p + off + 2, nl, true);
		if (!o) {
			free(p);
			return -ENOMEM;
		}
		/* Each object once (the table is empty before the load): a
		 * second entry of a name set its size over the first's
		 * chunks, e.g. size 0 with chunks, a map the next checkpoint
		 * wrote and no load accepted, so a store that opened and
		 * closed cleanly then failed to open (fuzz_blocker_log,
		 * tests/fuzz/corpus/fuzz_blocker_log/crash-maps-name-twice) */
		if (o->live) {
			bobj_put(s, o);
			goto bad;
		}
		bobj_uncount(s, o);
		o->size = size;
		o->live = true;
		r = bobj_reserve(o, (size + s->chunk_size - 1) / s->chunk_size);
		off += 18 + nl;
		for (uint64_t i = 0; i < n && !r; i++, off += 40) {
			uint64_t idx = get_le64(p + off);
			/* past the object's size: the capacity is rounded
			 * up, so idx < nchunks alone let such an entry in
			 * (review-counters finding 3) */
			if (idx >= o->nchunks || idx * s->chunk_size >= size)
				r = -EBADMSG;
			else
				bobj_set_score(o, idx, p + off + 8);
		}
		bobj_count(s, o);
		bobj_put(s, o);
		if (r == -EBADMSG)
			goto bad;
		if (r) {
			free(p);
			return r;
		}
	}
	free(p);
	return off == len ? 0 : -EBADMSG;
bad:
	free(p);
	return -EBADMSG;
}

/* ---- index file: le64 prefix (top 40 bits meaningful), le64 pos ---- */

struct idx_ser {
	uint8_t *buf;
	size_t off;
};

static int idx_ser_fn(void *arg, uint64_t prefix, uint64_t pos)
{
	struct idx_ser *c = arg;

	put_le64(c->buf + c->off, prefix);
	put_le64(c->buf + c->off + 8, pos);
	c->off += 16;
	return 0;
}

int bidx_snapshot(struct blocker_store *s, uint8_t **p, size_t *len,
		  uint64_t *count)
{
	struct idx_ser c;

	/* count is stable: inserts happen under append_lock/ckpt exclusion */
	pthread_rwlock_rdlock(&s->index.lock);
	*count = s->index.count;
	pthread_rwlock_unlock(&s->index.lock);
	c.buf = malloc(*count * 16 + 1);
	c.off = 0;
	if (!c.buf)
		return -ENOMEM;
	bidx_walk(&s->index, idx_ser_fn, &c);
	*p = c.buf;
	*len = c.off;
	*count = c.off / 16;
	return 0;
}

int bidx_save_buf(struct blocker_store *s, uint64_t pos, const uint8_t *p,
		  size_t len, uint64_t count)
{
	return ckpt_save_file(s, BLOCKER_INDEX_FILE, "BLKIDX01", pos, p, len,
			      count);
}

int bidx_save(struct blocker_store *s, uint64_t pos)
{
	uint8_t *p;
	size_t len;
	uint64_t count;
	int r = bidx_snapshot(s, &p, &len, &count);

	if (r)
		return r;
	r = bidx_save_buf(s, pos, p, len, count);
	free(p);
	return r;
}

/* Load into an empty index sized for the file; -EBADMSG if inconsistent. */
int bidx_load(struct blocker_store *s, uint64_t *pos)
{
	uint8_t *p, score[32] = {0};
	size_t len;
	uint64_t count;
	int r;

	r = ckpt_read(s->dirfd, BLOCKER_INDEX_FILE, "BLKIDX01", pos, &count, &p,
		      &len);
	if (r)
		return r;
	if (len != count * 16) {
		free(p);
		return -EBADMSG;
	}
	bidx_destroy(&s->index);
	r = bidx_init(&s->index, s->o.partial_bits, count);
	for (uint64_t i = 0; i < count && !r; i++) {
		uint64_t e = get_le64(p + i * 16);
		uint64_t at = get_le64(p + i * 16 + 8);
		if (at >= *pos || at % BREC_ALIGN) {
			r = -EBADMSG;
			break;
		}
		for (int k = 0; k < 8; k++)
			score[k] = e >> (56 - 8 * k);
		r = bidx_insert(&s->index, score, at);
	}
	free(p);
	if (r) {
		bidx_destroy(&s->index);
		bidx_init(&s->index, s->o.partial_bits, 0);
	}
	return r;
}

int blocker_read_super(int dirfd, uint32_t *chunk_size, uint64_t *seg_size,
		       uint32_t *version)
{
	uint8_t b[32];
	ssize_t n;
	int fd = openat(dirfd, BLOCKER_SUPER_FILE, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, b, sizeof(b));
	close(fd);
	if (n != 32 || memcmp(b, "BLKSUPER", 8) ||
	    blocker_crc32c(0, b, 28) != get_le32(b + 28))
		return -EBADMSG;
	*version = get_le32(b + 8);
	if (*version < 1 || *version > BLOCKER_FORMAT_VERSION)
		return -EPROTONOSUPPORT;
	*chunk_size = get_le32(b + 12);
	*seg_size = get_le64(b + 16);
	if (*chunk_size < 512 || *chunk_size > (1u << 20) ||
	    (*chunk_size & (*chunk_size - 1)) || *seg_size < (1u << 20) ||
	    *seg_size % (1u << 20))
		return -EBADMSG;
	return 0;
}

int blocker_write_super(int dirfd, uint32_t chunk_size, uint64_t seg_size)
{
	uint8_t b[32];

	memset(b, 0, sizeof(b));
	memcpy(b, "BLKSUPER", 8);
	put_le32(b + 8, BLOCKER_FORMAT_VERSION);
	put_le32(b + 12, chunk_size);
	put_le64(b + 16, seg_size);
	put_le32(b + 28, blocker_crc32c(0, b, 28));
	return blocker_write_file_atomic(dirfd, BLOCKER_SUPER_FILE,
					 &(struct iovec){b, sizeof(b)}, 1);
}
