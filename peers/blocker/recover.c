/* SPDX-License-Identifier: MIT */
/*
 * Startup recovery: replay the log after the last checkpoint into the
 * index and the maps, and cut a torn tail. See docs/on-disk-format.md.
 *
 * Below the durable mark D (the newest valid checkpoint position) every
 * record was fsynced before the checkpoint was written, so a bad record
 * there is media corruption, not a crash: recovery refuses to cut it and
 * open fails with -EUCLEAN (blockerctl check shows the details). At or
 * past D a bad record is the torn end of an interrupted append: it and
 * everything after it are dropped and reported.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "store_int.h"

static int64_t seg_size_of(struct blocker_store *s, uint32_t seg)
{
	struct stat st;

	if (fstat(s->segs[seg].fd, &st) < 0)
		return -errno;
	return st.st_size;
}

static bool pos_valid(struct blocker_store *s, uint64_t pos)
{
	uint64_t seg = pos / s->segment_size;

	if (pos == 0)
		return true;
	if (seg >= s->nsegs)
		return false;
	return pos % s->segment_size <= (uint64_t)seg_size_of(s, seg);
}

/* Drop everything from pos on: truncate its segment, remove later ones. */
static int cut_tail(struct blocker_store *s, uint64_t pos, const char *why)
{
	uint32_t seg = pos / s->segment_size;
	uint64_t off = pos % s->segment_size;
	int64_t fsize = seg_size_of(s, seg);
	char path[4096];
	uint64_t dropped = fsize > (int64_t)off ? fsize - off : 0;

	blog_seg_path(s->dir, seg, path, sizeof(path));
	blocker_logf(&s->o, BLOCKER_LOG_WARN,
		     "blocker: %s: torn tail at offset %llu: %s; truncating "
		     "%llu bytes",
		     path, (unsigned long long)off, why,
		     (unsigned long long)dropped);
	if (ftruncate(s->segs[seg].fd, off) < 0 ||
	    fdatasync(s->segs[seg].fd) < 0)
		return -errno;
	STAT_ADD(s, truncated_bytes, dropped);
	while (s->nsegs > seg + 1) {
		uint32_t last = s->nsegs - 1;
		int64_t sz = seg_size_of(s, last);

		blog_seg_path(s->dir, last, path, sizeof(path));
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: after the torn tail; removing %lld "
			     "bytes",
			     path, (long long)sz);
		blog_seg_release(s, last);
		s->nsegs--;
		if (unlink(path) < 0)
			return -errno;
		STAT_ADD(s, truncated_bytes, sz > 0 ? sz : 0);
	}
	if (fsync(s->dirfd) < 0)
		return -errno;
	return 0;
}

int blog_zero_after(struct blocker_store *s, uint64_t pos, uint64_t file_end,
		    bool *zero)
{
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	int r = 0;

	if (!buf)
		return -ENOMEM;
	*zero = true;
	while (pos < file_end && *zero) {
		size_t n = file_end - pos < cap ? file_end - pos : cap;
		r = blog_pread(s, pos, buf, n);
		if (r)
			break;
		*zero = blocker_mem_is_zero(buf, n);
		pos += n;
	}
	free(buf);
	return r;
}

/* Point *out at [pos, pos + n), which ends at or before file_end. */
int blog_win_get(struct blocker_store *s, struct blog_window *w, uint64_t pos,
		 size_t n, uint64_t file_end, const uint8_t **out)
{
	size_t want;
	int r;

	if (w->len && pos >= w->start && pos + n <= w->start + w->len) {
		*out = w->buf + (pos - w->start);
		return 0;
	}
	if (n > w->cap) {
		uint8_t *nb = realloc(w->buf, n);
		if (!nb)
			return -ENOMEM;
		w->buf = nb;
		w->cap = n;
	}
	want = w->cap;
	if (want > file_end - pos)
		want = file_end - pos;
	w->len = 0;
	r = blog_pread(s, pos, w->buf, want);
	if (r)
		return r;
	w->start = pos;
	w->len = want;
	*out = w->buf;
	return 0;
}

int blocker_recover(struct blocker_store *s, uint64_t idx_pos,
		    uint64_t maps_pos)
{
	uint64_t start = idx_pos < maps_pos ? idx_pos : maps_pos;
	uint64_t durable = idx_pos > maps_pos ? idx_pos : maps_pos;
	uint64_t pos = start;
	struct blog_window win = {.cap = 4u << 20};
	int64_t cur_seg = -1, fsize = 0;
	bool zero_tail = false;
	int r = 0;

	win.buf = malloc(win.cap);
	if (!win.buf)
		return -ENOMEM;

	if (!pos_valid(s, idx_pos) || !pos_valid(s, maps_pos)) {
		free(win.buf);
		return -ERANGE; /* caller discards the checkpoint */
	}
	if (s->nsegs == 0) {
		free(win.buf);
		return -ENOENT;
	}

	for (;;) {
		uint32_t seg = pos / s->segment_size;
		uint64_t off = pos % s->segment_size;
		uint64_t file_end;
		const uint8_t *hb, *payload = NULL;
		struct brec_hdr h;
		enum brec_err e;
		uint64_t size;
		bool need_payload;

		if (cur_seg != seg) {
			fsize = seg_size_of(s, seg);
			cur_seg = seg;
		}
		if (fsize < 0) {
			r = (int)fsize;
			break;
		}
		file_end = (uint64_t)seg * s->segment_size + fsize;
		if ((uint64_t)fsize <= off) {
			if (seg + 1 < s->nsegs) {
				pos = (uint64_t)(seg + 1) * s->segment_size;
				continue;
			}
			break; /* clean end of the log */
		}
		e = BREC_SHORT;
		if ((uint64_t)fsize - off >= BREC_HDR_SIZE) {
			r = blog_win_get(s, &win, pos, BREC_HDR_SIZE, file_end,
					 &hb);
			if (r)
				break;
			e = brec_decode(hb, &h, pos);
		}
		if (e == BREC_OK) {
			size = brec_size(h.len);
			if (off + size > s->segment_size ||
			    (h.type == BREC_CHUNK && h.len != s->chunk_size))
				e = BREC_BAD_LENGTH;
			else if (off + size > (uint64_t)fsize)
				e = BREC_SHORT;
		}
		need_payload =
		    e == BREC_OK && (h.type != BREC_CHUNK || pos >= durable);
		if (need_payload) {
			uint8_t sum[32];

			r = blog_win_get(s, &win, pos + BREC_HDR_SIZE, h.len,
					 file_end, &payload);
			if (r)
				break;
			blocker_sha256(payload, h.len, sum);
			if (memcmp(sum, h.score, 32))
				e = BREC_BAD_SCORE;
		}
		if (e != BREC_OK) {
			char path[4096];

			if (pos < durable) {
				blog_seg_path(s->dir, seg, path, sizeof(path));
				blocker_logf(
				    &s->o, BLOCKER_LOG_ERR,
				    "blocker: %s: bad record at offset "
				    "%llu below the checkpoint: %s",
				    path, (unsigned long long)off,
				    brec_strerror(e));
				r = -EUCLEAN;
				break;
			}
			/* zeros from here to the end of the last segment: the
			 * zero-filled tail no append reached, the clean end */
			if (seg + 1 == s->nsegs) {
				bool zero = false;
				r = blog_zero_after(s, pos, file_end, &zero);
				if (r)
					break;
				if (zero) {
					zero_tail = true;
					break;
				}
			}
			r = cut_tail(s, pos, brec_strerror(e));
			break;
		}
		if (h.type == BREC_CHUNK) {
			if (pos >= idx_pos)
				r = bidx_insert(&s->index, h.score, pos);
		} else if (pos >= maps_pos) {
			r = bmaps_apply(s, h.type, payload, h.len);
			if (r) {
				char path[4096];
				blog_seg_path(s->dir, seg, path, sizeof(path));
				blocker_logf(
				    &s->o, BLOCKER_LOG_ERR,
				    "blocker: %s: map record at offset "
				    "%llu cannot be applied: %s",
				    path, (unsigned long long)off,
				    strerror(-r));
				r = -EUCLEAN;
			}
		}
		if (r)
			break;
		STAT_INC(s, replayed_records);
		pos += size;
	}
	free(win.buf);
	if (!r) {
		/* the tail is the end of the last segment (after any cut),
		 * or where its zero-filled part begins */
		uint32_t last = s->nsegs - 1;
		int64_t sz = seg_size_of(s, last);
		if (sz < 0)
			return (int)sz;
		s->alloc_end = (uint64_t)last * s->segment_size + sz;
		s->tail = zero_tail ? pos : s->alloc_end;
		/* after a crash the tail may be only in the page cache */
		s->synced = durable;
		s->synced_seg = durable / s->segment_size;
	}
	return r;
}
