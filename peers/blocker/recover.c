/* SPDX-License-Identifier: MIT */
/*
 * Startup recovery: replay the log after the last checkpoint into the
 * index and the maps, and cut a torn tail. See docs/on-disk-format.md.
 *
 * The durable point D is the larger of the newest valid checkpoint
 * position and the durable mark (DIR/durable, mark.c), the position the
 * last successful group-commit fsync covered. Everything below D was
 * fsynced, so a crash cannot have torn it: a bad record there, a log that
 * ends before D, or a segment file missing before later ones is damage to
 * acknowledged data, not a torn tail. Recovery then refuses to "repair"
 * it by cutting (open fails with -EUCLEAN, naming file, offset and D),
 * unless the operator asked for exactly that (opts.truncate_at_damage),
 * in which case it cuts and logs every byte it dropped. A bad record at
 * or past D in the last segment is the torn end of an interrupted append:
 * it and everything after it are dropped and reported, as always.
 *
 * A bad record in a segment followed by another one is damage wherever D
 * is: a segment is fsynced complete (seg_finish) before the next one is
 * created, so no crash leaves a torn record anywhere but in the last.
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

bool blog_ckpt_pos_valid(struct blocker_store *s, uint64_t pos,
			 bool *removed_seg)
{
	uint64_t seg = pos / s->segment_size;

	if (removed_seg)
		*removed_seg = seg < s->nsegs && s->segs[seg].removed;
	if (pos == 0)
		return true;
	/* the end of a last segment that ended exactly full: appends had
	 * not yet opened the next one when the checkpoint was taken */
	if (seg == s->nsegs && pos % s->segment_size == 0 &&
	    !s->segs[seg - 1].removed &&
	    (uint64_t)seg_size_of(s, seg - 1) == s->segment_size)
		return true;
	if (seg >= s->nsegs || s->segs[seg].removed)
		return false;
	return pos % s->segment_size <= (uint64_t)seg_size_of(s, seg);
}

/*
 * Drop everything from pos on: truncate its segment, remove later ones.
 * damage: the cut is below the durable point or in a segment that has
 * later ones (an operator's truncate_at_damage), not a torn tail.
 */
static int cut_tail(struct blocker_store *s, uint64_t pos, const char *why,
		    bool damage)
{
	uint32_t seg = pos / s->segment_size;
	uint64_t off = pos % s->segment_size;
	int64_t fsize = seg_size_of(s, seg);
	char path[4096];
	uint64_t dropped = fsize > (int64_t)off ? fsize - off : 0;

	blog_seg_path(s->dir, seg, path, sizeof(path));
	if (damage)
		blocker_logf(
		    &s->o, BLOCKER_LOG_WARN,
		    "blocker: %s: damaged durable data at offset %llu: "
		    "%s; truncate_at_damage: truncating %llu bytes",
		    path, (unsigned long long)off, why,
		    (unsigned long long)dropped);
	else
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: torn tail at offset %llu: %s; "
			     "truncating %llu bytes",
			     path, (unsigned long long)off, why,
			     (unsigned long long)dropped);
	/*
	 * The cut goes in four steps, in an order that leaves a store
	 * truncate_at_damage opens, and a normal open refuses, after a crash
	 * or a power cut at any instant (review21a, review22s F2, F9): (1)
	 * forget the later segments in memory; (2) if DIR/gc lists some of
	 * them (removed by GC), rewrite it without them, durably
	 * (blocker_write_file_atomic fsyncs the file and the directory); (3)
	 * unlink the later files, the last first, and fsync the directory;
	 * (4) truncate the damaged segment and fdatasync it. Until (4) the
	 * damage itself stays in the segment: a crash before it leaves the
	 * damaged segment followed by its old successors, or by files
	 * DIR/gc does not list (after a gap or not), or last; each is
	 * refused by a normal open (damage, stray, below the mark) and cut
	 * the same way by the next repair. Truncating first, as this did,
	 * could leave a segment ending at the cut and still followed by its
	 * successors, which replay may continue into silently (the next one
	 * removed by GC, or starting with a record larger than the room
	 * left). So could truncating before the unlinks are durable: a
	 * power cut may keep the new size and lose the unlinks
	 * (test_blocker_powerloss test_cut_tail_order). Unlinking before (2)
	 * could leave DIR/gc listing a segment past the last file
	 * (gc_list_check).
	 */
	uint32_t old_nsegs = s->nsegs;
	bool gc_list = false;
	for (uint32_t last = old_nsegs; last-- > seg + 1;) {
		int64_t sz;

		if (s->segs[last].removed) {
			gc_list = true;
			continue;
		}
		sz = seg_size_of(s, last);
		blog_seg_path(s->dir, last, path, sizeof(path));
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: after the %s; removing %lld bytes",
			     path, damage ? "damage" : "torn tail",
			     (long long)sz);
		STAT_ADD(s, truncated_bytes, sz > 0 ? sz : 0);
		blog_seg_release(s, last);
	}
	s->nsegs = seg + 1;
	if (gc_list) {
		int r = bgc_save(s, s->gc_ckpt);
		if (r)
			return r;
	}
	/* the array keeps the removed flags past nsegs */
	for (uint32_t last = old_nsegs; last-- > seg + 1;) {
		if (s->segs[last].removed)
			continue;
		blog_seg_path(s->dir, last, path, sizeof(path));
		if (unlink(path) < 0)
			return -errno;
	}
	if (fsync(s->dirfd) < 0)
		return -errno;
	if (ftruncate(s->segs[seg].fd, off) < 0 ||
	    fdatasync(s->segs[seg].fd) < 0)
		return -errno;
	STAT_ADD(s, truncated_bytes, dropped);
	return 0;
}

/*
 * Segment files numbered at or past s->nsegs: blog_open_segments stopped
 * at a missing one, so these lie after a gap. Appending would overwrite
 * them (and the gap means data is gone): -EUCLEAN, or with
 * truncate_at_damage they are removed and reported.
 */
static int stray_segments(struct blocker_store *s)
{
	uint32_t *found = NULL, n = 0;
	char path[4096], gap[4096];
	int r = blog_segs_after(s, &found, &n);

	if (r || !n)
		return r;
	blog_seg_path(s->dir, s->nsegs, gap, sizeof(gap));
	blog_seg_path(s->dir, found[0], path, sizeof(path));
	if (!s->o.truncate_at_damage) {
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: missing, but %s and %u more segment "
			     "file(s) after it exist: durable data lost; "
			     "refusing to open (truncate_at_damage removes the "
			     "files after the gap)",
			     gap, path, n - 1);
		r = -EUCLEAN;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct stat st;

		blog_seg_path(s->dir, found[i], path, sizeof(path));
		if (stat(path, &st) < 0) {
			r = -errno;
			goto out;
		}
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: after the missing %s; "
			     "truncate_at_damage: removing %lld bytes",
			     path, gap, (long long)st.st_size);
		if (unlink(path) < 0) {
			r = -errno;
			goto out;
		}
		STAT_ADD(s, truncated_bytes, st.st_size);
	}
	if (fsync(s->dirfd) < 0)
		r = -errno;
out:
	free(found);
	return r;
}

int blog_zero_after(struct blocker_store *s, uint64_t pos, uint64_t file_end,
		    bool *zero)
{
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	uint64_t base = pos - pos % s->segment_size, off;
	int fd = -1, r = 0;

	if (!buf)
		return -ENOMEM;
	if (blog_fd(s, pos, &fd, &off))
		fd = -1;
	*zero = true;
	while (pos < file_end && *zero) {
		/*
		 * Holes read as zeros: skip them without reading (a segment
		 * sealed early is mostly one, segment_size long). Where
		 * SEEK_DATA is not supported, everything is read.
		 */
		if (fd >= 0) {
			off_t d = lseek(fd, (off_t)(pos - base), SEEK_DATA);
			if (d < 0 && errno == ENXIO)
				break; /* a hole to the end of the file */
			if (d >= 0 && base + (uint64_t)d > pos)
				pos = base + (uint64_t)d;
			if (pos >= file_end)
				break;
		}
		size_t n = file_end - pos < cap ? file_end - pos : cap;
		if (fd >= 0) {
			/* ... and never read into one through a mapping
			 * (a tmpfs allocates pages for it: recover.c) */
			off_t h = lseek(fd, (off_t)(pos - base), SEEK_HOLE);
			if (h >= 0 && base + (uint64_t)h > pos &&
			    base + (uint64_t)h - pos < n)
				n = base + (uint64_t)h - pos;
		}
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

/* The durable mark: 0 if there is none (a store from a build without
 * marks: s->mark stays NULL, and the file is made only once blocker_open
 * accepted the store; bmark_reset is never called then, as it is only
 * for a mark above a cut) or none is readable (then reported). */
static int load_mark(struct blocker_store *s, uint64_t *mark)
{
	int r = bmark_open(s, mark);

	if (r == -ENOENT)
		return 0;
	if (r == -ENODATA) {
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s/%s: no valid durable mark; recovery "
			     "can only rely on the checkpoint",
			     s->dir, BLOCKER_MARK_FILE);
		*mark = 0;
		return 0;
	}
	return r;
}

/*
 * Damage below the durable point (or in a segment with later ones) at
 * pos: -EUCLEAN, or with truncate_at_damage cut there (0, or -ERANGE if
 * the cut falls below the checkpoint, which then describes records that
 * are gone: the caller discards it and replays the whole log).
 */
static int damage(struct blocker_store *s, uint64_t pos, uint64_t ckpt,
		  uint64_t mark, const char *why)
{
	uint32_t seg = pos / s->segment_size;
	uint64_t off = pos % s->segment_size;
	char path[4096];
	const char *where;
	int r;

	blog_seg_path(s->dir, seg, path, sizeof(path));
	where = pos < ckpt   ? "below the checkpoint"
		: pos < mark ? "below the durable mark"
			     : "in a segment followed by later ones";
	if (!s->o.truncate_at_damage) {
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: bad record at offset %llu %s "
			     "(log position %llu, checkpoint %llu, durable "
			     "mark %llu): %s; refusing to cut durable data "
			     "(truncate_at_damage cuts it)",
			     path, (unsigned long long)off, where,
			     (unsigned long long)pos, (unsigned long long)ckpt,
			     (unsigned long long)mark, why);
		return -EUCLEAN;
	}
	r = cut_tail(s, pos, why, true);
	if (!r && mark > pos)
		r = bmark_reset(s, pos);
	if (!r && pos < ckpt)
		r = -ERANGE;
	return r;
}

/*
 * A last segment that holds no record (empty, all zeros, or cut at its
 * start as a torn tail) after a crash: its name was committed, its data
 * not. Left as the last segment, the next small record would start it
 * although it fits in the previous one, and the next open would read the
 * previous segment as ending early (damage; power-loss finding F3,
 * review6 F16). So it is removed, as seg_unswitch does for a failed
 * append, and the previous segment is the last again. Not when a
 * checkpoint or GC list refers to its start (then nothing changes).
 * Nor when the previous segment is segment_size long: it ended exactly
 * full (no record fits in it, so the reason above does not hold) or was
 * sealed early by GC (blog_seal: a hole up to segment_size), and a seal
 * is read only in a segment that has a successor. Dropped, the next open
 * would find the sealed one last, its hole below a durable mark at its
 * end, and refuse the store as damaged although nothing was lost
 * (safety21gc F1).
 * zpos: where the zero tail begins, or UINT64_MAX. The durable mark, if
 * it points at the segment's start, comes back to the previous end:
 * nothing lies between the two.
 */
static int drop_empty_last(struct blocker_store *s, uint64_t zpos,
			   uint64_t ckpt, uint64_t *mark, bool *zero_tail)
{
	uint32_t last = s->nsegs - 1;
	uint64_t start = (uint64_t)last * s->segment_size, prev_end;
	int64_t sz, psz;
	char path[4096];
	int r;

	if (s->nsegs < 2 || s->segs[last].removed || s->segs[last - 1].removed)
		return 0;
	sz = seg_size_of(s, last);
	if (sz < 0)
		return (int)sz;
	if (sz > 0 && zpos != start)
		return 0; /* it holds records */
	psz = seg_size_of(s, last - 1);
	if (psz < 0)
		return (int)psz;
	if ((uint64_t)psz >= s->segment_size)
		return 0;
	prev_end = start - s->segment_size + psz;
	if (ckpt > prev_end || s->gc_ckpt > prev_end)
		return 0;
	blog_seg_path(s->dir, last, path, sizeof(path));
	blocker_logf(&s->o, BLOCKER_LOG_WARN,
		     "blocker: %s: holds no record (a crash after it was "
		     "created); removing it, the previous segment is the "
		     "last again",
		     path);
	if (*mark > prev_end) {
		r = bmark_reset(s, prev_end);
		if (r)
			return r;
		*mark = prev_end;
	}
	blog_seg_release(s, last);
	s->nsegs--;
	if (unlink(path) < 0)
		return -errno;
	if (fsync(s->dirfd) < 0)
		return -errno;
	*zero_tail = false;
	return 0;
}

int blocker_recover(struct blocker_store *s, uint64_t idx_pos,
		    uint64_t maps_pos)
{
	uint64_t start = idx_pos < maps_pos ? idx_pos : maps_pos;
	uint64_t ckpt = idx_pos > maps_pos ? idx_pos : maps_pos;
	uint64_t mark = 0, durable;
	uint64_t pos = start;
	struct blog_window win = {.cap = 4u << 20};
	int64_t cur_seg = -1, fsize = 0, rsize = 0;
	uint64_t room = 0; /* space the previous segment left unused */
	bool zero_tail = false;
	int r;

	/* no segment: only a store never written to, whose log.000000
	 * blocker_open creates once this accepted it (s->seg0_pending);
	 * a segment file past the missing log.000000 is a stray */
	if (s->nsegs == 0 && !s->seg0_pending)
		return -ENOENT;
	r = load_mark(s, &mark);
	if (!r)
		r = stray_segments(s);
	if (r)
		return r;
	if (!blog_ckpt_pos_valid(s, idx_pos, NULL) ||
	    !blog_ckpt_pos_valid(s, maps_pos, NULL))
		return -ERANGE; /* caller refuses, or discards the checkpoint
				   with truncate_at_damage (store.c) */
	durable = ckpt > mark ? ckpt : mark;
	win.buf = malloc(win.cap);
	if (!win.buf)
		return -ENOMEM;

	for (;;) {
		uint32_t seg = pos / s->segment_size;
		uint64_t off = pos % s->segment_size;
		uint64_t file_end, read_end;
		const uint8_t *hb, *payload = NULL;
		struct brec_hdr h;
		enum brec_err e;
		uint64_t size;
		bool need_payload;

		if (seg >= s->nsegs)
			break; /* the last segment ended full */
		if (s->segs[seg].removed) {
			/* removed by GC: nothing of it is needed (the maps
			 * checkpoint covers its journal records) */
			room = 0;
			pos = (uint64_t)(seg + 1) * s->segment_size;
			continue;
		}
		if (cur_seg != seg) {
			fsize = seg_size_of(s, seg);
			cur_seg = seg;
			rsize = fsize;
			/*
			 * A segment sealed early ends in a hole: read only
			 * up to it. Reading a hole through a shared mapping
			 * of a tmpfs file allocates pages, which a full disk
			 * refuses (SIGBUS, EIO); what lies past it is zeros.
			 */
			if (fsize == (int64_t)s->segment_size) {
				off_t hole =
				    lseek(s->segs[seg].fd, 0, SEEK_HOLE);
				if (hole >= 0 && hole < fsize &&
				    lseek(s->segs[seg].fd, hole, SEEK_DATA) <
					0 &&
				    errno == ENXIO)
					rsize = hole;
			}
		}
		if (fsize < 0) {
			r = (int)fsize;
			break;
		}
		file_end = (uint64_t)seg * s->segment_size + fsize;
		read_end = (uint64_t)seg * s->segment_size + rsize;
		if ((uint64_t)fsize <= off) {
			if (seg + 1 < s->nsegs) {
				room = s->segment_size - off;
				pos = (uint64_t)(seg + 1) * s->segment_size;
				continue;
			}
			break; /* clean end of the log */
		}
		e = BREC_SHORT;
		if (read_end > pos && read_end - pos >= BREC_HDR_SIZE) {
			r = blog_win_get(s, &win, pos, BREC_HDR_SIZE, read_end,
					 &hb);
			if (r)
				break;
			e = brec_decode(hb, &h, pos);
		}
		if (e == BREC_OK) {
			size = brec_size(h.len);
			if (off + size > s->segment_size ||
			    !brec_len_ok(&h, s->chunk_size))
				e = BREC_BAD_LENGTH;
			else if (pos + size > read_end)
				e = BREC_SHORT;
		}
		/* below D a chunk's payload cannot be torn; a damaged one
		 * is caught when read (verify_reads) or by check */
		need_payload =
		    e == BREC_OK && (h.type != BREC_CHUNK || pos >= durable);
		if (need_payload) {
			uint8_t sum[32];

			r = blog_win_get(s, &win, pos + BREC_HDR_SIZE, h.len,
					 read_end, &payload);
			if (r)
				break;
			blocker_sha256(payload, h.len, sum);
			if (memcmp(sum, h.score, 32))
				e = BREC_BAD_SCORE;
		}
		/* a record starts a segment only if it did not fit in the
		 * previous one: if it would have, that segment lost its end
		 * (a truncated or re-created file) */
		if (e == BREC_OK && off == 0 && room && size <= room) {
			if (!s->o.truncate_at_damage) {
				char path[4096];
				blog_seg_path(s->dir, seg - 1, path,
					      sizeof(path));
				blocker_logf(
				    &s->o, BLOCKER_LOG_ERR,
				    "blocker: %s: ends %llu bytes early, "
				    "before "
				    "the next segment's first record: durable "
				    "data lost; refusing to open "
				    "(truncate_at_damage cuts the log there)",
				    path, (unsigned long long)room);
				r = -EUCLEAN;
				break;
			}
			uint64_t cut = (uint64_t)seg * s->segment_size - room;
			r = damage(s, cut, ckpt, mark, "segment ends early");
			if (!r && mark > cut)
				mark = cut;
			break;
		}
		room = 0;
		if (e != BREC_OK && off && seg + 1 < s->nsegs &&
		    (uint64_t)fsize == s->segment_size) {
			/*
			 * Sealed early by GC on a full disk (blog_seal): a
			 * segment followed by another one that is segment_size
			 * long and holds only zeros from a record boundary on.
			 * No other segment but the last has bytes past its
			 * last record, so this is no cut file; its records end
			 * here and the next segment's first record may have
			 * fitted in the rest (no "ends early").
			 */
			bool zero = false;
			r = blog_zero_after(s, pos, file_end, &zero);
			if (r)
				break;
			if (zero) {
				s->segs[seg].data_end = off;
				pos = (uint64_t)(seg + 1) * s->segment_size;
				continue;
			}
		}
		if (e != BREC_OK) {
			if (pos < durable || seg + 1 < s->nsegs) {
				r = damage(s, pos, ckpt, mark,
					   brec_strerror(e));
				if (!r && mark > pos)
					mark = pos;
				break;
			}
			/* zeros from here to the end of the last segment: the
			 * zero-filled tail no append reached, the clean end */
			bool zero = false;
			r = blog_zero_after(s, pos, file_end, &zero);
			if (r)
				break;
			if (zero) {
				zero_tail = true;
				break;
			}
			/* (a verdict for check: a torn tail is no refusal,
			 * and nothing is cut) */
			if (!s->judge_only)
				r = cut_tail(s, pos, brec_strerror(e), false);
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
	/* the log ends (clean end or zero tail) before the durable mark:
	 * flushed records are missing (a truncated or lost segment) */
	if (!r && pos < mark) {
		char path[4096];

		blog_seg_path(s->dir, pos / s->segment_size, path,
			      sizeof(path));
		if (!s->o.truncate_at_damage) {
			blocker_logf(
			    &s->o, BLOCKER_LOG_ERR,
			    "blocker: %s: the log ends at offset %llu (log "
			    "position %llu) below the durable mark %llu: "
			    "%llu bytes of durable data are missing; refusing "
			    "to open (truncate_at_damage accepts the loss)",
			    path, (unsigned long long)(pos % s->segment_size),
			    (unsigned long long)pos, (unsigned long long)mark,
			    (unsigned long long)(mark - pos));
			return -EUCLEAN;
		}
		blocker_logf(&s->o, BLOCKER_LOG_WARN,
			     "blocker: %s: the log ends at offset %llu below "
			     "the durable mark %llu; truncate_at_damage: "
			     "accepting the loss of %llu bytes",
			     path, (unsigned long long)(pos % s->segment_size),
			     (unsigned long long)mark,
			     (unsigned long long)(mark - pos));
		r = bmark_reset(s, pos);
		mark = pos;
	}
	if (!r && !s->judge_only)
		r = drop_empty_last(s, zero_tail ? pos : UINT64_MAX, ckpt,
				    &mark, &zero_tail);
	if (!r) {
		/* the tail is the end of the last segment (after any cut),
		 * or where its zero-filled part begins; 0 for a first
		 * segment still to be created */
		uint32_t last = s->nsegs ? s->nsegs - 1 : 0;
		int64_t sz = s->nsegs ? seg_size_of(s, last) : 0;
		if (sz < 0)
			return (int)sz;
		s->alloc_end = (uint64_t)last * s->segment_size + sz;
		if (zero_tail && pos > s->alloc_end)
			zero_tail = false;
		s->tail = zero_tail ? pos : s->alloc_end;
		/* after a process crash the tail may be only in the page
		 * cache; below the checkpoint and the mark it was fsynced */
		durable = ckpt > mark ? ckpt : mark;
		if (durable > s->tail)
			durable = s->tail;
		s->synced = durable;
		s->synced_seg = durable / s->segment_size;
		/*
		 * The same for the directory (review9 R9-11): a segment file
		 * the crashed process created after its last flush has a
		 * name only in the page cache, and this process never
		 * created it, so dir_seq does not say so. Taking the
		 * directory as changed makes the first fsync past the
		 * durable position (the first that acknowledges anything
		 * new) fsync it too. Everything up to that position was
		 * covered by a directory fsync of the process that flushed
		 * it (the mark and the checkpoints are written only after
		 * their flush). Lazily rather than one fsync here: a store
		 * that is only read, or degraded, never pays for it, and a
		 * failure is reported by the flush that needs it, through
		 * the same sticky error as a failed log fsync.
		 */
		s->dir_synced_seq = s->dir_seq - 1;
	}
	return r;
}
