/* SPDX-License-Identifier: MIT */
/*
 * Space reclamation: garbage collection of log segments (store.h,
 * blocker_gc; docs/blocker.md "Space reclamation", docs/on-disk-format.md
 * "gc").
 *
 * Liveness is computed by a mark over all maps rather than kept up to date
 * in per-segment counters: counters would need a reference count per
 * chunk (dedup and COPY share chunks between maps), i.e. RAM per chunk on
 * top of the 10-byte index entry, and an update on every overwrite. The
 * mark costs one walk over the maps and the index per pass and a
 * temporary set of 40-bit score prefixes (8 bytes at most half full, so
 * about 16 bytes per live chunk while a pass runs). A prefix collision
 * only makes a dead chunk look live, which is safe.
 *
 * One pass:
 *  1. With mutating calls excluded (ckpt_lock exclusive): mark, compute
 *     each closed segment's live bytes from the index, pick the victims,
 *     flag them. From here on a write that would dedup against a chunk in
 *     a victim stores it afresh (store.c, chunk_find), so a reference made
 *     after the mark never points into a victim.
 *  2. RCU grace period: readers that copied scores before the mark (and
 *     may read a chunk the mark found dead) are done.
 *  3. Per victim, in log order: each live chunk record that has no
 *     verified copy outside the victims is read, re-hashed (a mismatch
 *     stops the pass: the record is never copied as if good) and appended
 *     at the log head as a normal chunk record.
 *  4. Flush (the copies are durable), then repoint the index entries and
 *     drop every entry into the victims, under the index write lock.
 *  5. RCU grace period: readers that found a victim position are done.
 *  6. Checkpoint: the index and maps files no longer need the victims.
 *  7. DIR/gc lists the victims as removed (atomically, with the
 *     checkpoint position that made it safe).
 *  8. Unpublish the victims' fds, grace period, close, unlink.
 * A crash before 7 leaves the victims in place (the copies are duplicates
 * the next pass removes); after 7 open finishes the unlinks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "peer_util.h"
#include "store_int.h"
#include "xtime.h"

/* test hook points (struct blocker_store.gc_hook) */
enum {
	GC_HOOK_MARKED = 1,	  /* victims flagged, locks released */
	GC_HOOK_COPIED = 2,	  /* copies appended and flushed */
	GC_HOOK_REPOINTED = 3,	  /* index moved off the victims */
	GC_HOOK_CHECKPOINTED = 4, /* checkpoint written */
	GC_HOOK_LISTED = 5,	  /* DIR/gc written, files not yet unlinked */
	GC_HOOK_RESERVE_RELEASED = 6, /* the pass released DIR/reserve */
	GC_HOOK_RESERVE_RESTORED = 7, /* reallocated after a removal, writes
				       * not yet let back in */
	GC_HOOK_SEALED = 8, /* the active segment sealed (ckpt_lock held) */
};

static void hook(struct blocker_store *s, int point)
{
	/* tests may install it while the GC thread runs */
	void (*fn)(void *, int) =
	    __atomic_load_n(&s->gc_hook, __ATOMIC_ACQUIRE);

	if (fn)
		fn(__atomic_load_n(&s->gc_hook_arg, __ATOMIC_RELAXED), point);
}

/*
 * A write of the pass met a full disk: let the reserve go (reserve.c).
 * True if the write is worth trying again: released now, or already gone
 * (a DELETE may have released it since the write failed, and its room is
 * there now; the mirror of blocker_delete's retry).
 */
static bool release_reserve(struct blocker_store *s)
{
	int r = bres_release(s);

	if (!r)
		hook(s, GC_HOOK_RESERVE_RELEASED);
	return r >= 0;
}

/* ---- DIR/gc ---- */

#define GC_MAGIC   "BLKGC001"
#define GC_VERSION 1
#define GC_HDR	   24

int bgc_load(int dirfd, uint32_t nslots, uint32_t **removed, uint32_t *n,
	     uint32_t *past, uint32_t *end, uint64_t *ckpt)
{
	uint8_t *buf = NULL;
	uint32_t *list = NULL, nr, total = 0, prev_end = 0;
	struct stat st;
	int fd, r = 0;

	*removed = NULL;
	*n = 0;
	*past = 0;
	*end = 0;
	*ckpt = 0;
	fd = openat(dirfd, BLOCKER_GC_FILE, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (st.st_size < GC_HDR + 4 || st.st_size > (64 << 20)) {
		r = -EBADMSG;
		goto out;
	}
	buf = malloc(st.st_size);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	if (pread(fd, buf, st.st_size, 0) != st.st_size) {
		r = -EBADMSG;
		goto out;
	}
	nr = get_le32(buf + 12);
	if (memcmp(buf, GC_MAGIC, 8) || get_le32(buf + 8) != GC_VERSION ||
	    (uint64_t)st.st_size != GC_HDR + 8ULL * nr + 4 ||
	    get_le32(buf + st.st_size - 4) !=
		blocker_crc32c(0, buf, st.st_size - 4)) {
		r = -EBADMSG;
		goto out;
	}
	*ckpt = get_le64(buf + 16);
	/* Every range checked before the list is sized by their sum: ranges
	 * sorted, disjoint, non-empty and ending below 2^32, so their sum
	 * fits 32 bits. A file with a valid CRC but ranges that are not
	 * (crafted, or written by a bug) used to size the list by a sum that
	 * wrapped, and the fill wrote past it (safety21gc). Only the entries
	 * below nslots are listed: a log cannot have removed more segments
	 * than it has slots, and a valid-looking file listing ~2^32 of them
	 * made this allocate and fill 16 GiB (review21a R4); the caller
	 * refuses the rest (*past) before anything is allocated for them. */
	for (uint32_t i = 0; i < nr; i++) {
		uint32_t first = get_le32(buf + GC_HDR + 8 * i);
		uint32_t len = get_le32(buf + GC_HDR + 8 * i + 4);

		if (!len || first < prev_end || first + len <= first) {
			r = -EBADMSG;
			goto out;
		}
		prev_end = first + len;
		if (prev_end <= nslots) {
			total += len;
		} else {
			uint32_t below = first < nslots ? nslots - first : 0;

			total += below;
			*past += len - below;
		}
	}
	list = malloc((total ? total : 1) * sizeof(*list));
	if (!list) {
		r = -ENOMEM;
		goto out;
	}
	total = 0;
	for (uint32_t i = 0; i < nr; i++) {
		uint32_t first = get_le32(buf + GC_HDR + 8 * i);
		uint32_t len = get_le32(buf + GC_HDR + 8 * i + 4);

		for (uint32_t k = 0; k < len && first + k < nslots; k++)
			list[total++] = first + k;
	}
	*removed = list;
	*n = total;
	*end = prev_end;
	list = NULL;
out:
	close(fd);
	free(buf);
	free(list);
	return r;
}

int bgc_save(struct blocker_store *s, uint64_t ckpt)
{
	uint32_t nr = 0, cap = 16;
	uint8_t *buf = malloc(GC_HDR + 8 * cap + 4);
	size_t len;
	int r;

	if (!buf)
		return -ENOMEM;
	pthread_rwlock_rdlock(&s->segs_lock);
	for (uint32_t seg = 0; seg < s->nsegs; seg++) {
		uint32_t first = seg;

		if (!s->segs[seg].removed)
			continue;
		while (seg + 1 < s->nsegs && s->segs[seg + 1].removed)
			seg++;
		if (nr == cap) {
			uint8_t *nb = realloc(buf, GC_HDR + 16 * cap + 4);
			if (!nb) {
				pthread_rwlock_unlock(&s->segs_lock);
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		put_le32(buf + GC_HDR + 8 * nr, first);
		put_le32(buf + GC_HDR + 8 * nr + 4, seg - first + 1);
		nr++;
	}
	pthread_rwlock_unlock(&s->segs_lock);
	memcpy(buf, GC_MAGIC, 8);
	put_le32(buf + 8, GC_VERSION);
	put_le32(buf + 12, nr);
	put_le64(buf + 16, ckpt);
	len = GC_HDR + 8 * (size_t)nr;
	put_le32(buf + len, blocker_crc32c(0, buf, len));
	r = blocker_write_file_atomic(s->dirfd, BLOCKER_GC_FILE,
				      &(struct iovec){buf, len + 4}, 1);
	free(buf);
	return r;
}

/* ---- the live set: 40-bit score prefixes ---- */

struct pset {
	uint64_t *keys; /* prefix + 1; 0 empty */
	uint64_t mask, n;
};

static inline uint64_t score_key(const uint8_t *score)
{
	return (get_be64(score) >> 24) + 1;
}

static inline uint64_t key_slot(uint64_t k)
{
	return (k * 0x9e3779b97f4a7c15ULL) >> 17;
}

static int pset_add(struct pset *p, uint64_t k)
{
	if ((p->n + 1) * 2 > p->mask + 1) {
		struct pset np = {0};
		np.mask = p->mask ? 2 * p->mask + 1 : 4095;
		np.keys = calloc(np.mask + 1, sizeof(*np.keys));
		if (!np.keys)
			return -ENOMEM;
		for (uint64_t i = 0; p->keys && i <= p->mask; i++)
			if (p->keys[i])
				pset_add(&np, p->keys[i]);
		free(p->keys);
		*p = np;
	}
	for (uint64_t i = key_slot(k) & p->mask;; i = (i + 1) & p->mask) {
		if (p->keys[i] == k)
			return 0;
		if (!p->keys[i]) {
			p->keys[i] = k;
			p->n++;
			return 0;
		}
	}
}

static bool pset_has(const struct pset *p, uint64_t k)
{
	if (!p->keys)
		return false;
	for (uint64_t i = key_slot(k) & p->mask;; i = (i + 1) & p->mask) {
		if (p->keys[i] == k)
			return true;
		if (!p->keys[i])
			return false;
	}
}

/*
 * Mark: every score some map references. Objects are visited under their
 * own read locks; the caller decides whether mutating calls are excluded
 * (a pass) or not (an estimate).
 */
static int mark_fn(void *arg, const struct bobj *o)
{
	struct pset *live = arg;
	int r = 0;

	for (uint64_t i = 0; i < o->nchunks && !o->deleted && !r; i++)
		if (!blocker_score_is_zero(o->scores[i]))
			r = pset_add(live, score_key(o->scores[i]));
	return r;
}

static int mark(struct blocker_store *s, struct pset *live)
{
	return bmaps_visit(s, mark_fn, live);
}

struct live_acc {
	struct blocker_store *s;
	const struct pset *live;
	uint64_t *live_bytes; /* per segment */
	uint32_t nsegs;
};

static int live_fn(void *arg, uint64_t prefix, uint64_t pos)
{
	struct live_acc *a = arg;
	uint64_t seg = pos / a->s->segment_size;

	if (seg < a->nsegs && pset_has(a->live, (prefix >> 24) + 1))
		a->live_bytes[seg] += brec_size(a->s->chunk_size);
	return 0;
}

/* per-segment usage after a mark; closed segments only */
struct seg_use {
	uint32_t seg;
	uint64_t size, live;
};

static int seg_usage(struct blocker_store *s, const struct pset *live,
		     struct seg_use **out, uint32_t *nout, struct seg_use *act)
{
	uint64_t tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
	uint32_t nsegs, closed, n = 0;
	struct live_acc a = {s, live, NULL, 0};
	struct seg_use *u;

	pthread_rwlock_rdlock(&s->segs_lock);
	nsegs = s->nsegs;
	pthread_rwlock_unlock(&s->segs_lock);
	/* never the segment being appended to, nor one the tail just left
	 * (it is finished by the next append) */
	closed = tail / s->segment_size;
	if (closed + 1 > nsegs)
		closed = nsegs ? nsegs - 1 : 0;
	/* act: the segment being appended to, if it holds records (what
	 * blog_seal would make a candidate); counted too */
	if (act)
		*act = (struct seg_use){0, 0, 0};
	/* the last segment, being appended to or left by a tail that
	 * ended it (full; or, before session 21, sealed before a reopen
	 * dropped the empty next one, which recovery now keeps) */
	bool has_act = act && nsegs && closed == nsegs - 1 &&
		       tail > (uint64_t)closed * s->segment_size;
	a.nsegs = has_act ? closed + 1 : closed;
	a.live_bytes = calloc(closed + 1, sizeof(*a.live_bytes));
	u = malloc((closed + 1) * sizeof(*u));
	if (!a.live_bytes || !u) {
		free(a.live_bytes);
		free(u);
		return -ENOMEM;
	}
	bidx_walk(&s->index, live_fn, &a);
	for (uint32_t seg = 0; seg < closed; seg++) {
		int64_t end = blog_seg_end(s, seg);
		if (end < 0)
			continue; /* removed */
		u[n++] = (struct seg_use){
		    seg, (uint64_t)end - (uint64_t)seg * s->segment_size,
		    a.live_bytes[seg]};
	}
	if (has_act) {
		uint64_t lo = (uint64_t)closed * s->segment_size;
		int64_t end = blog_seg_end(s, closed);
		if (end > (int64_t)lo) {
			uint64_t e =
			    (uint64_t)end < tail ? (uint64_t)end : tail;
			*act = (struct seg_use){closed, e - lo,
						a.live_bytes[closed]};
		}
	}
	free(a.live_bytes);
	*out = u;
	*nout = n;
	return 0;
}

static void publish_estimate(struct blocker_store *s, const struct seg_use *u,
			     uint32_t n)
{
	uint64_t closed = 0, dead = 0;

	for (uint32_t i = 0; i < n; i++) {
		closed += u[i].size;
		dead += u[i].size > u[i].live ? u[i].size - u[i].live : 0;
	}
	__atomic_store_n(&s->gc_reclaimable, dead, __ATOMIC_RELAXED);
	__atomic_store_n(&s->gc_closed_bytes, closed, __ATOMIC_RELAXED);
}

int blocker_gc_estimate(struct blocker_store *s, uint64_t *reclaimable,
			uint64_t *closed_bytes)
{
	struct pset live = {0};
	struct seg_use *u = NULL, act = {0, 0, 0};
	uint32_t n = 0;
	int r;

	__atomic_store_n(&s->gc_est_tail,
			 __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&s->gc_est_deletes,
			 __atomic_load_n(&s->st.deletes, __ATOMIC_RELAXED),
			 __ATOMIC_RELAXED);
	r = mark(s, &live);
	if (!r)
		r = seg_usage(s, &live, &u, &n, &act);
	if (!r) {
		publish_estimate(s, u, n);
		__atomic_store_n(&s->gc_active_dead,
				 act.size > act.live ? act.size - act.live : 0,
				 __ATOMIC_RELAXED);
	}
	free(live.keys);
	free(u);
	if (!r && reclaimable)
		*reclaimable =
		    __atomic_load_n(&s->gc_reclaimable, __ATOMIC_RELAXED);
	if (!r && closed_bytes)
		*closed_bytes =
		    __atomic_load_n(&s->gc_closed_bytes, __ATOMIC_RELAXED);
	return r;
}

/* ---- one pass ---- */

void blocker_gc_opts_init(struct blocker_gc_opts *g)
{
	memset(g, 0, sizeof(*g));
}

static int cmp_dead(const void *a, const void *b)
{
	const struct seg_use *x = a, *y = b;
	uint64_t dx = x->size - (x->live < x->size ? x->live : x->size);
	uint64_t dy = y->size - (y->live < y->size ? y->live : y->size);

	if (dx != dy)
		return dx > dy ? -1 : 1;
	return x->seg < y->seg ? -1 : x->seg > y->seg;
}

/* copies made in this pass: score -> old and new position */
struct copy {
	uint8_t score[32];
	uint64_t old_pos, new_pos;
};

struct copies {
	struct copy *v;
	uint64_t n, cap;
	uint32_t *slots; /* index + 1; 0 empty */
	uint64_t mask;
};

static int copies_find(struct copies *c, const uint8_t *score)
{
	if (!c->slots)
		return -1;
	for (uint64_t i = get_le64(score + 8) & c->mask;;
	     i = (i + 1) & c->mask) {
		if (!c->slots[i])
			return -1;
		if (!memcmp(c->v[c->slots[i] - 1].score, score, 32))
			return (int)(c->slots[i] - 1);
	}
}

static int copies_add(struct copies *c, const uint8_t *score, uint64_t old,
		      uint64_t new)
{
	if (c->n == c->cap) {
		uint64_t ncap = c->cap ? 2 * c->cap : 1024;
		struct copy *nv = realloc(c->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		c->v = nv;
		c->cap = ncap;
	}
	if ((c->n + 1) * 2 > (c->slots ? c->mask + 1 : 0)) {
		uint64_t nmask = c->slots ? 2 * c->mask + 1 : 4095;
		uint32_t *ns = calloc(nmask + 1, sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		free(c->slots);
		c->slots = ns;
		c->mask = nmask;
		for (uint64_t k = 0; k < c->n; k++) {
			uint64_t i = get_le64(c->v[k].score + 8) & c->mask;
			while (c->slots[i])
				i = (i + 1) & c->mask;
			c->slots[i] = k + 1;
		}
	}
	memcpy(c->v[c->n].score, score, 32);
	c->v[c->n].old_pos = old;
	c->v[c->n].new_pos = new;
	uint64_t i = get_le64(score + 8) & c->mask;
	while (c->slots[i])
		i = (i + 1) & c->mask;
	c->slots[i] = ++c->n;
	return 0;
}

/*
 * Is there a verified copy of score outside the victim segments? Header
 * and payload are read and the payload re-hashed (review R4-4): a damaged
 * duplicate must not be the reason an intact victim copy is dropped. buf
 * holds a header and a chunk.
 */
static int copy_elsewhere(struct blocker_store *s, const uint8_t *score,
			  uint8_t *buf, bool *found)
{
	uint64_t cand[8];
	uint64_t gen = 0;
	int total, skip = 0, r = 0;

	*found = false;
	blocker_rcu_lock();
	do {
		total =
		    bidx_lookup_page(&s->index, score, cand, 8, &skip, &gen);
		for (int i = 0; i < total - skip && i < 8 && !*found; i++) {
			struct brec_hdr h;
			uint8_t sum[32];

			if (blog_pos_victim(s, cand[i]))
				continue;
			r = blog_pread(s, cand[i], buf,
				       BREC_HDR_SIZE + s->chunk_size);
			/* a short or unreadable file (logged): not a copy;
			 * the victim's own record is copied instead */
			if (r) {
				r = 0;
				continue;
			}
			if (brec_decode(buf, &h, cand[i]) != BREC_OK ||
			    h.type != BREC_CHUNK || memcmp(h.score, score, 32))
				continue;
			blocker_sha256(buf + BREC_HDR_SIZE, s->chunk_size, sum);
			*found = !memcmp(sum, score, 32);
		}
		skip += 8;
	} while (skip < total && !*found);
	blocker_rcu_unlock();
	return r;
}

#define GC_BATCH 64 /* chunk records per append */

struct gc_pass {
	struct blocker_store *s;
	const struct blocker_gc_opts *g;
	struct blocker_gc_report *rep;
	const struct pset *live;
	struct copies copies;
	struct brec_out rec[GC_BATCH];
	uint8_t score[GC_BATCH][32];
	uint64_t old_pos[GC_BATCH];
	uint8_t *buf;  /* GC_BATCH chunks */
	uint8_t *rbuf; /* a header and a chunk (copy_elsewhere) */
	int nrec;
	uint64_t t0_ns, copied;
};

static bool stopping(struct blocker_store *s)
{
	return __atomic_load_n(&s->gc_stop, __ATOMIC_ACQUIRE);
}

/* Keep the copy rate at or below g->rate_bytes (sleeping in short steps
 * so that close does not wait long). */
static int throttle(struct gc_pass *p)
{
	if (!p->g->rate_bytes)
		return stopping(p->s) ? -ECANCELED : 0;
	for (;;) {
		uint64_t due =
		    p->t0_ns + p->copied * 1000000000.0 / p->g->rate_bytes;
		uint64_t now = peer_now_ns();
		if (stopping(p->s))
			return -ECANCELED;
		if (now >= due)
			return 0;
		uint64_t wait = due - now > 20000000 ? 20000000 : due - now;
		struct timespec ts = {0, (long)wait};
		nanosleep(&ts, NULL);
	}
}

static int flush_batch(struct gc_pass *p)
{
	struct blocker_store *s = p->s;
	int r;

	if (!p->nrec)
		return 0;
	/* shared, as any mutating call: a checkpoint samples the tail and
	 * serialises the index with appends and index changes excluded */
	pthread_rwlock_rdlock(&s->ckpt_lock);
	pthread_mutex_lock(&s->append_lock);
	r = blog_append_batch_gc_locked(s, p->rec, p->nrec);
	pthread_mutex_unlock(&s->append_lock);
	pthread_rwlock_unlock(&s->ckpt_lock);
	for (int i = 0; i < p->nrec && !r; i++) {
		r = copies_add(&p->copies, p->score[i], p->old_pos[i],
			       p->rec[i].pos);
		p->rep->bytes_copied += brec_size(s->chunk_size);
		p->copied += brec_size(s->chunk_size);
	}
	p->nrec = 0;
	return r ? r : throttle(p);
}

/* segment seg's file is segment_size long: it may be sealed (log.c) */
static bool seg_sealed_layout(struct blocker_store *s, uint32_t seg)
{
	struct stat st;
	uint64_t off;
	bool full = false;
	int fd;

	blocker_rcu_lock();
	if (!blog_fd(s, (uint64_t)seg * s->segment_size, &fd, &off) &&
	    fstat(fd, &st) == 0)
		full = (uint64_t)st.st_size == s->segment_size;
	blocker_rcu_unlock();
	return full;
}

/*
 * Copy the live chunk records of victim seg to the log head. 0 when every
 * live record is copied (or has a copy elsewhere), else an error and the
 * victim must stay.
 */
static int copy_victim(struct gc_pass *p, uint32_t seg)
{
	struct blocker_store *s = p->s;
	uint64_t base = (uint64_t)seg * s->segment_size, off = 0;
	int64_t end = blog_seg_end(s, seg);
	struct blog_window win = {.cap = 1u << 20};
	char path[4096];
	int r = 0;

	/* a victim that cannot be read is like one with a bad record: it
	 * stays, the pass goes on with the others (review6 F2) */
	if (end < 0)
		return end == -ENOMEM ? -ENOMEM : -EBADMSG;
	win.buf = malloc(win.cap);
	if (!win.buf)
		return -ENOMEM;
	blog_seg_path(s->dir, seg, path, sizeof(path));
	while (base + off < (uint64_t)end && !r) {
		uint64_t pos = base + off;
		const uint8_t *hb, *payload;
		struct brec_hdr h;
		enum brec_err e = BREC_SHORT;

		if ((uint64_t)end - pos >= BREC_HDR_SIZE) {
			r = blog_win_get(s, &win, pos, BREC_HDR_SIZE, end, &hb);
			if (r)
				goto unreadable;
			e = brec_decode(hb, &h, pos);
		}
		if (e == BREC_OK && pos + brec_size(h.len) > (uint64_t)end)
			e = BREC_SHORT;
		/* a chunk is copied into a one-chunk slot of p->buf */
		if (e == BREC_OK && !brec_len_ok(&h, s->chunk_size))
			e = BREC_BAD_LENGTH;
		bool zero = false;
		if (e != BREC_OK && off && seg_sealed_layout(s, seg) &&
		    !blog_zero_after(s, pos, (uint64_t)end, &zero) && zero) {
			/* sealed before this open: its records end here */
			pthread_rwlock_wrlock(&s->segs_lock);
			s->segs[seg].data_end = off;
			pthread_rwlock_unlock(&s->segs_lock);
			break;
		}
		if (e != BREC_OK) {
			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s: bad record at offset %llu "
				     "during GC: %s; segment kept",
				     path, (unsigned long long)off,
				     brec_strerror(e));
			r = -EBADMSG;
			break;
		}
		off += brec_size(h.len);
		p->rep->bytes_examined += brec_size(h.len);
		if (h.type != BREC_CHUNK ||
		    !pset_has(p->live, score_key(h.score)) ||
		    copies_find(&p->copies, h.score) >= 0)
			continue;
		bool elsewhere = false;
		for (int i = 0; i < p->nrec && !elsewhere; i++)
			elsewhere = !memcmp(p->score[i], h.score, 32);
		if (!elsewhere)
			r = copy_elsewhere(s, h.score, p->rbuf, &elsewhere);
		if (r || elsewhere)
			continue;
		uint8_t *dst = p->buf + (size_t)p->nrec * s->chunk_size;
		r = blog_win_get(s, &win, pos + BREC_HDR_SIZE, h.len, end,
				 &payload);
		if (r)
			goto unreadable;
		uint8_t sum[32];
		blocker_sha256(payload, h.len, sum);
		if (memcmp(sum, h.score, 32)) {
			char want[65], got[65];
			STAT_INC(s, verify_failures);
			blocker_hex(h.score, want);
			blocker_hex(sum, got);
			blocker_logf(&s->o, BLOCKER_LOG_ERR,
				     "blocker: %s: chunk at offset %llu fails "
				     "verification during GC: score %s, data "
				     "hashes to %s; not copied, segment kept",
				     path, (unsigned long long)(pos - base),
				     want, got);
			r = -EBADMSG;
			break;
		}
		memcpy(dst, payload, h.len);
		memcpy(p->score[p->nrec], h.score, 32);
		p->old_pos[p->nrec] = pos;
		p->rec[p->nrec] = (struct brec_out){
		    BREC_CHUNK, p->score[p->nrec], dst, h.len, 0};
		if (++p->nrec == GC_BATCH)
			r = flush_batch(p);
	}
	if (!r)
		r = flush_batch(p);
	p->nrec = 0;
	free(win.buf);
	return r;
unreadable:
	/* (the read error itself was logged and counted by the read) */
	blocker_logf(&s->o, BLOCKER_LOG_ERR,
		     "blocker: %s: cannot read the records at offset %llu "
		     "during GC: %s; segment kept",
		     path, (unsigned long long)off, strerror(-r));
	p->nrec = 0;
	free(win.buf);
	return r == -ENOMEM ? r : -EBADMSG;
}

static void set_victim(struct blocker_store *s, uint32_t seg, bool on)
{
	pthread_rwlock_wrlock(&s->segs_lock);
	s->segs[seg].victim = on;
	pthread_rwlock_unlock(&s->segs_lock);
	if (on)
		__atomic_fetch_add(&s->gc_victims, 1, __ATOMIC_RELEASE);
	else
		__atomic_fetch_sub(&s->gc_victims, 1, __ATOMIC_RELEASE);
}

/* Steps 7-8 for victims v[0..n): list them, then delete their files. */
static int remove_victims(struct blocker_store *s, const struct seg_use *v,
			  uint32_t n, uint64_t ckpt,
			  struct blocker_gc_report *rep)
{
	struct bseg *old = malloc((n ? n : 1) * sizeof(*old));
	char path[4096];
	int r;

	if (!old)
		return -ENOMEM;
	pthread_rwlock_wrlock(&s->segs_lock);
	for (uint32_t i = 0; i < n; i++)
		s->segs[v[i].seg].removed = true;
	pthread_rwlock_unlock(&s->segs_lock);
	r = bgc_save(s, ckpt > s->gc_ckpt ? ckpt : s->gc_ckpt);
	if (r == -ENOSPC && release_reserve(s))
		r = bgc_save(s, ckpt > s->gc_ckpt ? ckpt : s->gc_ckpt);
	if (r) {
		pthread_rwlock_wrlock(&s->segs_lock);
		for (uint32_t i = 0; i < n; i++)
			s->segs[v[i].seg].removed = false;
		pthread_rwlock_unlock(&s->segs_lock);
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s/%s: cannot record removed "
			     "segments: %s; they stay",
			     s->dir, BLOCKER_GC_FILE, strerror(-r));
		free(old);
		return r;
	}
	if (ckpt > s->gc_ckpt)
		s->gc_ckpt = ckpt;
	hook(s, GC_HOOK_LISTED);
	/* unpublish the fds; a flush may still be syncing one */
	pthread_rwlock_wrlock(&s->segs_lock);
	for (uint32_t i = 0; i < n; i++) {
		struct bseg *b = &s->segs[v[i].seg];
		old[i] = *b;
		b->fd = -1;
		b->map = NULL;
	}
	pthread_rwlock_unlock(&s->segs_lock);
	blocker_rcu_sync();
	for (uint32_t i = 0; i < n; i++) {
		if (old[i].map)
			munmap((void *)old[i].map, s->segment_size);
		if (old[i].fd >= 0)
			close(old[i].fd);
		blog_seg_path(s->dir, v[i].seg, path, sizeof(path));
		if (unlink(path) < 0 && errno != ENOENT)
			blocker_logf(&s->o, BLOCKER_LOG_WARN,
				     "blocker: %s: removed by GC but unlink "
				     "failed: %s (removed at the next open)",
				     path, strerror(errno));
		set_victim(s, v[i].seg, false);
		rep->segments_removed++;
		rep->bytes_reclaimed += v[i].size;
		if (s->space_hook)
			s->space_hook(s->space_hook_arg,
				      BLOCKER_SPACE_SEGMENT_FREED, v[i].size);
	}
	fsync(s->dirfd);
	free(old);
	return 0;
}

static int gc_pass(struct blocker_store *s, const struct blocker_gc_opts *g,
		   struct blocker_gc_report *rep)
{
	struct gc_pass p = {.s = s, .g = g, .rep = rep};
	struct pset live = {0};
	struct seg_use *u = NULL;
	uint32_t n = 0, nv = 0, done = 0;
	bool *ok = NULL;
	int r, r2 = 0;
	/*
	 * A store that writes filled: the copies and the checkpoint need
	 * the room the reserve holds, so it goes, and the copies may take
	 * half of it (victims best first, skipping those whose live bytes
	 * no longer fit), leaving the rest for the checkpoint files. Only
	 * victims that give back more than their copies take (dead >= live)
	 */
	bool full = blocker_degraded_nospc(s);
	uint64_t copy_room = UINT64_MAX;

	/* what the reserve actually holds (or gave back to a DELETE), not
	 * what it should: open may have found less room (review6 F5) */
	if (full) {
		uint64_t room = bres_room(s);
		struct statvfs vfs;
		/*
		 * plus what the disk still has free: a store reopened after
		 * a crash on the way out may hold no reserve at all (a tmpfs
		 * gives back a fallocate that failed) while the disk has room
		 * for part of it (not with a test's model disk: space_hook)
		 */
		if (!__atomic_load_n(&s->space_hook, __ATOMIC_ACQUIRE) &&
		    fstatvfs(s->dirfd, &vfs) == 0)
			room += (uint64_t)vfs.f_bavail * vfs.f_frsize;
		copy_room = room / 2;
	}

	/* 1: mark and choose with mutating calls excluded */
	pthread_rwlock_wrlock(&s->ckpt_lock);
	r = mark(s, &live);
	for (bool sealed = false; !r;) {
		struct seg_use act = {0, 0, 0};
		uint64_t room0 = copy_room;

		r = seg_usage(s, &live, &u, &n, full ? &act : NULL);
		if (r)
			break;
		publish_estimate(s, u, n);
		rep->reclaimable_before =
		    __atomic_load_n(&s->gc_reclaimable, __ATOMIC_RELAXED);
		rep->segments_examined = n;
		qsort(u, n, sizeof(*u), cmp_dead);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t dead =
			    u[i].size -
			    (u[i].live < u[i].size ? u[i].live : u[i].size);
			if (!dead ||
			    dead * 100 < (uint64_t)g->min_dead_pct * u[i].size)
				break;
			if (g->max_segments && nv == g->max_segments)
				break;
			pthread_rwlock_rdlock(&s->segs_lock);
			bool bad = s->segs[u[i].seg].gc_bad;
			pthread_rwlock_unlock(&s->segs_lock);
			if (bad)
				continue;
			if (u[i].live > copy_room || (full && dead < u[i].live))
				continue;
			if (full)
				copy_room -= u[i].live;
			u[nv++] = u[i];
		}
		/*
		 * Writes filled the disk and no closed segment gives space
		 * back, but the one being appended to would (review11 N-E:
		 * on a disk with room for one segment it is the only one):
		 * seal it, so that it is closed, and choose again. Sealing
		 * takes no blocks; the next segment starts empty and the
		 * copies land there in the reserve's room.
		 */
		uint64_t adead = act.size > act.live ? act.size - act.live : 0;
		if (nv || !full || sealed || !adead || adead < act.live ||
		    act.live > room0 ||
		    adead * 100 < (uint64_t)g->min_dead_pct * act.size)
			break;
		r = blog_seal(s);
		if (r <= 0) {
			if (r)
				blocker_logf(&s->o, BLOCKER_LOG_ERR,
					     "blocker: %s: cannot seal log "
					     "segment %u for GC: %s",
					     s->dir, act.seg, strerror(-r));
			break;
		}
		r = 0;
		sealed = true;
		STAT_INC(s, gc_segments_sealed);
		hook(s, GC_HOOK_SEALED);
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: disk full and the only dead bytes "
			     "are in the log segment being appended to "
			     "(%llu of %llu): sealed log segment %u so that "
			     "GC can take it",
			     s->dir, (unsigned long long)adead,
			     (unsigned long long)act.size, act.seg);
		free(u);
		u = NULL;
		n = 0;
		copy_room = room0;
	}
	if (!r) {
		/* log order: copies keep their relative order */
		for (uint32_t i = 1; i < nv; i++)
			for (uint32_t k = i; k && u[k - 1].seg > u[k].seg;
			     k--) {
				struct seg_use t = u[k];
				u[k] = u[k - 1];
				u[k - 1] = t;
			}
		for (uint32_t i = 0; i < nv; i++)
			set_victim(s, u[i].seg, true);
	}
	pthread_rwlock_unlock(&s->ckpt_lock);
	if (r || !nv)
		goto out;
	/* released only for a pass that will use it: a pass without
	 * victims leaves it whole (review6 F5) */
	if (full)
		release_reserve(s);
	STAT_ADD(s, gc_segments_examined, n);
	hook(s, GC_HOOK_MARKED);

	/* 2: readers holding scores from before the mark are done */
	blocker_rcu_sync();

	/*
	 * 3: copy, victim by victim. A victim with a bad record (a live
	 * chunk that fails verification, a bad header) or one that cannot
	 * be read stays and is not chosen again while the store is open
	 * (review R4-5, review6 F2); the pass goes on with the others. Any
	 * other error (the copies' writes) ends the copying: the victims
	 * fully copied before it are completed.
	 */
	p.live = &live;
	p.t0_ns = peer_now_ns();
	p.buf = malloc((size_t)GC_BATCH * s->chunk_size);
	p.rbuf = malloc(BREC_HDR_SIZE + s->chunk_size);
	ok = calloc(nv, sizeof(*ok));
	if (!p.buf || !p.rbuf || !ok) {
		r = -ENOMEM;
		goto unflag;
	}
	for (uint32_t i = 0; i < nv; i++) {
		r2 = copy_victim(&p, u[i].seg);
		if (r2 == -EBADMSG) {
			pthread_rwlock_wrlock(&s->segs_lock);
			s->segs[u[i].seg].gc_bad = true;
			pthread_rwlock_unlock(&s->segs_lock);
			r = -EIO;
			continue;
		}
		if (r2) {
			r = r2;
			break;
		}
		ok[i] = true;
		done++;
	}
	/* 4: what was copied is made durable before anything points at it */
	if (p.copies.n) {
		r2 = blog_flush(s);
		if (r2) {
			r = r2;
			done = 0;
		}
	}
	if (!done)
		goto unflag;
	hook(s, GC_HOOK_COPIED);
	/* victims are in log order: the last is the highest */
	uint32_t top = u[nv - 1].seg + 1;
	uint8_t *gone = calloc(top, 1);
	if (!gone) {
		r = -ENOMEM;
		goto unflag;
	}
	for (uint32_t i = 0; i < nv; i++)
		gone[u[i].seg] = ok[i];
	pthread_rwlock_rdlock(&s->ckpt_lock);
	r2 = 0;
	for (uint64_t k = 0; k < p.copies.n && !r2; k++) {
		struct copy *c = &p.copies.v[k];
		uint64_t seg = c->old_pos / s->segment_size;
		/*
		 * A copy from a completed victim takes over its entry. A copy
		 * from a victim that stays gets an entry of its own: a
		 * completed victim may have relied on it (the chunk was
		 * copied once per pass), and it is durable and verified.
		 */
		if (seg < top && gone[seg] &&
		    !bidx_repoint(&s->index, c->score, c->old_pos, c->new_pos))
			continue;
		/* (or the index knew another victim's copy of the chunk, a
		 * duplicate an earlier pass left) */
		r2 = bidx_insert(&s->index, c->score, c->new_pos);
	}
	if (r2) {
		/* out of memory: the entries moved so far point at durable
		 * copies, the victims stay whole */
		pthread_rwlock_unlock(&s->ckpt_lock);
		free(gone);
		r = r2;
		goto unflag;
	}
	bidx_remove_segs(&s->index, gone, top, s->segment_size);
	free(gone);
	pthread_rwlock_unlock(&s->ckpt_lock);
	hook(s, GC_HOOK_REPOINTED);
	/* 5: readers that found a victim position are done */
	blocker_rcu_sync();
	/* 6: the checkpoint no longer needs the victims; on a full disk
	 * the reserve makes room for it (review R4-6) */
	r2 = blocker_checkpoint(s);
	if (r2 == -ENOSPC && release_reserve(s))
		r2 = blocker_checkpoint(s);
	if (r2) {
		/* nothing points into the victims any more; they stay as
		 * files until a later pass (they are all dead now) */
		r = r2;
		goto unflag;
	}
	hook(s, GC_HOOK_CHECKPOINTED);
	/* the completed victims first, the others after them */
	struct seg_use *sorted = malloc(nv * sizeof(*sorted));
	if (!sorted) {
		r = -ENOMEM;
		goto unflag;
	}
	uint32_t a = 0, b = done;
	for (uint32_t i = 0; i < nv; i++)
		sorted[ok[i] ? a++ : b++] = u[i];
	memcpy(u, sorted, nv * sizeof(*u));
	free(sorted);
	r2 = remove_victims(
	    s, u, done, __atomic_load_n(&s->last_ckpt, __ATOMIC_ACQUIRE), rep);
	if (r2) {
		r = r2;
	} else {
		/* removed victims are unflagged by remove_victims */
		memmove(u, u + done, (nv - done) * sizeof(*u));
		nv -= done;
	}
unflag:
	for (uint32_t i = 0; i < nv; i++)
		set_victim(s, u[i].seg, false);
out:
	free(ok);
	free(p.buf);
	free(p.rbuf);
	free(p.copies.v);
	free(p.copies.slots);
	free(live.keys);
	free(u);
	return r;
}

/*
 * After a pass (or, in ENOSPC mode, at each check of the GC thread): take
 * the reserve back if it is not whole, and leave ENOSPC mode once it is
 * and there is room for writes again: a pass removed segments, or space
 * came back from outside the store (other tenants freed files), which a
 * probe allocation of one segment past the reserve shows (review6 F15).
 * 0, or why writes stay refused.
 */
static int space_back(struct blocker_store *s, bool removed)
{
	int r = 0;

	if (!bres_full(s)) {
		r = bres_restore(s);
		if (r)
			return r;
		hook(s, GC_HOOK_RESERVE_RESTORED);
	}
	if (!blocker_degraded_nospc(s))
		return 0;
	if (!removed) {
		r = bres_probe(s, s->segment_size);
		if (r)
			return r;
	}
	blocker_undegrade_nospc(s, removed ? "GC removed segments and the "
					     "space reserve is whole again"
					   : "the space reserve is whole and "
					     "the disk has room again");
	return 0;
}

int blocker_gc(struct blocker_store *s, const struct blocker_gc_opts *g,
	       struct blocker_gc_report *rep)
{
	struct blocker_gc_opts def;
	struct blocker_gc_report dummy;
	int r;

	if (!g) {
		blocker_gc_opts_init(&def);
		g = &def;
	}
	if (!rep)
		rep = &dummy;
	memset(rep, 0, sizeof(*rep));
	if (g->min_dead_pct > 100)
		return -EINVAL;
	pthread_mutex_lock(&s->gc_mutex);
	/* degraded by ENOSPC, removing segments is the way out */
	r = blocker_degraded_nospc(s) ? 0 : -blocker_degraded(s);
	if (!r && stopping(s))
		r = -ECANCELED;
	if (!r)
		r = gc_pass(s, g, rep);
	/* counted before writes may come back (space_back): whoever sees
	 * the store writable again sees what this pass removed (CI, TSan:
	 * test_background_gc read degraded 0 with gc_segments_removed 0) */
	STAT_INC(s, gc_runs);
	STAT_ADD(s, gc_segments_removed, rep->segments_removed);
	STAT_ADD(s, gc_bytes_copied, rep->bytes_copied);
	STAT_ADD(s, gc_bytes_reclaimed, rep->bytes_reclaimed);
	if (r)
		STAT_INC(s, gc_failures);
	/*
	 * The reserve first, then writes: a store let back in without it
	 * would fill the disk up to the last block again, and the next
	 * full disk would find no room for a checkpoint
	 */
	if (!blocker_degraded(s) || blocker_degraded_nospc(s)) {
		int r3 = space_back(s, rep->segments_removed > 0);
		if (r3 && blocker_degraded_nospc(s)) {
			blocker_logf(&s->o, BLOCKER_LOG_WARN,
				     "blocker: %s: GC freed %llu bytes; no "
				     "room for the space reserve and writes "
				     "(%s): writes stay refused",
				     s->dir,
				     (unsigned long long)rep->bytes_reclaimed,
				     strerror(-r3));
		}
	}
	if (rep->segments_removed) {
		/* refresh the estimate the stats show */
		struct pset live = {0};
		struct seg_use *u = NULL;
		uint32_t n = 0;
		if (!mark(s, &live) && !seg_usage(s, &live, &u, &n, NULL))
			publish_estimate(s, u, n);
		free(live.keys);
		free(u);
	}
	pthread_mutex_unlock(&s->gc_mutex);
	if (r && r != -ECANCELED)
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: GC pass failed: %s (%llu "
			     "segment(s) removed before)",
			     s->dir, strerror(-r),
			     (unsigned long long)rep->segments_removed);
	return r;
}

/* ---- background GC ---- */

/*
 * blocker_gc_estimate started at t0, and the earliest time for the next
 * one: 9 times the CPU it took later. CPU, not wall time (review-s14b 2a):
 * an estimate descheduled for 5 s on a loaded machine cost little and
 * must not postpone the next one by 45 s.
 */
static int gc_estimate_paced(struct blocker_store *s, uint64_t *rec,
			     uint64_t *closed, uint64_t t0,
			     uint64_t *not_before)
{
	uint64_t cpu0 = xtime_ns(CLOCK_THREAD_CPUTIME_ID);
	int r = blocker_gc_estimate(s, rec, closed);

	*not_before = t0 + 10 * (xtime_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0);
	return r;
}

static void *gc_main(void *arg)
{
	struct blocker_store *s = arg;
	unsigned ms = s->o.gc_check_ms ? s->o.gc_check_ms : 1000;
	struct blocker_gc_opts g;

	blocker_gc_opts_init(&g);
	g.min_dead_pct = s->o.gc_threshold_pct / 2;
	g.rate_bytes = s->o.gc_rate_bytes;
	/* space comes back after each pass: keep passes short */
	g.max_segments = 16;
	bool again = false; /* the last pass removed: look again */
	/* The estimate is a mark over all maps, so its cost grows with the
	 * store (about 15 % of the blocker's CPU while 1 M objects of 4 KiB
	 * were written, one mark a second): the next one waits 9 times the
	 * CPU the last took, a tenth of this thread at most. Not when
	 * the store is full or the last pass removed segments. */
	uint64_t not_before = 0;

	pthread_mutex_lock(&s->bg_lock);
	while (!stopping(s)) {
		struct timespec ts;

		ts = xtime_in(CLOCK_MONOTONIC, ms * 1000000ULL);
		pthread_cond_timedwait(&s->bg_cond, &s->bg_lock, &ts);
		if (stopping(s))
			break;
		pthread_mutex_unlock(&s->bg_lock);
		uint64_t rec = 0, closed = 0;
		/* a mark costs a walk over all maps: only when at least
		 * an eighth of a segment was appended, or objects deleted */
		bool changed =
		    again ||
		    __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE) >=
			__atomic_load_n(&s->gc_est_tail, __ATOMIC_RELAXED) +
			    s->segment_size / 8 ||
		    __atomic_load_n(&s->st.deletes, __ATOMIC_RELAXED) !=
			__atomic_load_n(&s->gc_est_deletes, __ATOMIC_RELAXED);
		/* a store that writes filled: any dead byte is worth it */
		bool full = blocker_degraded_nospc(s);
		uint64_t t0 = peer_now_ns();

		if (changed && !again && !full && t0 < not_before)
			changed = false; /* looked at again next tick */
		again = false;
		/* full: also dead bytes only in the segment being
		 * appended to, which the pass seals (review11 N-E) */
		if (changed && (!blocker_degraded(s) || full) &&
		    !gc_estimate_paced(s, &rec, &closed, t0, &not_before) &&
		    (full ? rec > 0 || __atomic_load_n(&s->gc_active_dead,
						       __ATOMIC_RELAXED)
			  : closed &&
				rec * 100 >=
				    (uint64_t)s->o.gc_threshold_pct * closed)) {
			struct blocker_gc_report rep;
			g.min_dead_pct = full ? 0 : s->o.gc_threshold_pct / 2;
			blocker_gc(s, &g, &rep);
			again = rep.segments_removed > 0;
			if (rep.segments_removed)
				blocker_logf(
				    &s->o, BLOCKER_LOG_INFO,
				    "blocker: %s: GC removed %llu "
				    "segment(s), copied %llu bytes, "
				    "reclaimed %llu bytes",
				    s->dir,
				    (unsigned long long)rep.segments_removed,
				    (unsigned long long)rep.bytes_copied,
				    (unsigned long long)rep.bytes_reclaimed);
		} else if (full) {
			/* no pass: space may have come back from outside
			 * (gc_mutex: not while a blocker_gc runs) */
			pthread_mutex_lock(&s->gc_mutex);
			if (blocker_degraded_nospc(s))
				space_back(s, false);
			pthread_mutex_unlock(&s->gc_mutex);
		}
		pthread_mutex_lock(&s->bg_lock);
	}
	pthread_mutex_unlock(&s->bg_lock);
	return NULL;
}

int bgc_start(struct blocker_store *s)
{
	int r;

	if (!s->o.gc_threshold_pct)
		return 0;
	if (s->o.gc_threshold_pct > 100)
		return -EINVAL;
	r = -pthread_create(&s->gc_thread, NULL, gc_main, s);
	if (!r)
		s->gc_running = true;
	return r;
}

void bgc_stop(struct blocker_store *s)
{
	__atomic_store_n(&s->gc_stop, true, __ATOMIC_RELEASE);
	if (!s->gc_running)
		return;
	pthread_mutex_lock(&s->bg_lock);
	pthread_cond_broadcast(&s->bg_cond);
	pthread_mutex_unlock(&s->bg_lock);
	pthread_join(s->gc_thread, NULL);
	s->gc_running = false;
}
