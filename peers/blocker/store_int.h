/* SPDX-License-Identifier: MIT */
#ifndef BLOCKER_STORE_INT_H
#define BLOCKER_STORE_INT_H
/*
 * Internals of the blocker store, shared by its source files and tests.
 * Nothing here is a stable interface.
 */
#include <pthread.h>
#include <stdarg.h>
#include "store.h"

/* ---- record format (record.c); see docs/on-disk-format.md ---- */

#define BREC_MAGIC	 0x524b4c42u /* "BLKR" little-endian */
#define BREC_VERSION	 1
#define BREC_HDR_SIZE	 64
#define BREC_ALIGN	 16
#define BREC_MAX_PAYLOAD (16u << 20)

enum brec_type {
	BREC_CHUNK = 1,	 /* payload: chunk data; score = SHA-256(payload) */
	BREC_MAP = 2,	 /* payload: object map update */
	BREC_DELETE = 3, /* payload: object name */
	BREC_COPY = 4,	 /* payload: source name, destination name */
};

struct brec_hdr {
	uint32_t magic;
	uint8_t type;
	uint8_t version;
	uint16_t flags;
	uint32_t len;	  /* payload bytes */
	uint32_t hdr_crc; /* crc32c of the 64 bytes with this field zero */
	uint64_t pos;	  /* the record's own log position */
	uint8_t score[BLOCKER_SCORE_SIZE]; /* SHA-256 of the payload */
	uint64_t reserved;
};

enum brec_err {
	BREC_OK = 0,
	BREC_BAD_MAGIC,
	BREC_BAD_CRC,
	BREC_BAD_VERSION,
	BREC_BAD_TYPE,
	BREC_BAD_LENGTH,
	BREC_BAD_POS,
	BREC_SHORT,
	BREC_BAD_SCORE,
};

uint32_t blocker_crc32c(uint32_t crc, const void *buf, size_t len);
void blocker_sha256(const void *buf, size_t len, uint8_t out[32]);
void brec_encode(uint8_t out[BREC_HDR_SIZE], enum brec_type type, uint32_t len,
		 uint64_t pos, const uint8_t score[32]);
/* Checks magic, crc, version, type, length and (if expect_pos != ~0) pos. */
enum brec_err brec_decode(const uint8_t in[BREC_HDR_SIZE], struct brec_hdr *h,
			  uint64_t expect_pos);
const char *brec_strerror(enum brec_err e);
static inline uint64_t brec_size(uint32_t len)
{
	return BREC_HDR_SIZE +
	       (((uint64_t)len + BREC_ALIGN - 1) & ~(uint64_t)(BREC_ALIGN - 1));
}
/* Whether a decoded header's length suits a store of chunk_size: a chunk
 * record holds exactly one chunk (brec_decode accepts up to 16 MiB for any
 * type). Recovery, GC and check treat another as a bad record
 * (BREC_BAD_LENGTH): a super restored from a store of another chunk size
 * would otherwise have GC copy it into a one-chunk slot. */
static inline bool brec_len_ok(const struct brec_hdr *h, uint32_t chunk_size)
{
	return h->type != BREC_CHUNK || h->len == chunk_size;
}
void blocker_hex(const uint8_t *score, char out[65]);
static inline bool blocker_score_is_zero(const uint8_t *s)
{
	static const uint8_t z[BLOCKER_SCORE_SIZE];
	return __builtin_memcmp(s, z, BLOCKER_SCORE_SIZE) == 0;
}
bool blocker_mem_is_zero(const void *buf, size_t len);

/* little-endian helpers */
static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = v;
	p[1] = v >> 8;
}
static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}
static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}
static inline uint16_t get_le16(const uint8_t *p)
{
	return p[0] | (uint16_t)p[1] << 8;
}
static inline uint32_t get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static inline uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}
static inline uint64_t get_be64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* ---- map update payloads (record.c) ---- */

struct bmap_update {
	uint64_t index;
	uint8_t score[BLOCKER_SCORE_SIZE]; /* all zero: hole */
};
#define BMAP_MAX_UPDATES 4096

/* Encoded size of a BREC_MAP payload. */
size_t bmap_payload_size(size_t namelen, uint32_t n);
void bmap_encode(uint8_t *out, const char *name, size_t namelen, uint64_t size,
		 const struct bmap_update *u, uint32_t n);
/*
 * Parse a BREC_MAP payload in place: *name points into p, *updates at the
 * first update (BMAP_UPDATE_SIZE bytes each). -EBADMSG if malformed.
 */
#define BMAP_UPDATE_SIZE 40
int bmap_decode(const uint8_t *p, size_t len, const char **name,
		size_t *namelen, uint64_t *size, uint32_t *n,
		const uint8_t **updates);
/* BREC_DELETE / BREC_COPY payloads: one or two length-prefixed names. */
size_t bnames_payload_size(size_t l1, size_t l2);
void bnames_encode(uint8_t *out, const char *n1, size_t l1, const char *n2,
		   size_t l2);
int bnames_decode(const uint8_t *p, size_t len, int count, const char **n1,
		  size_t *l1, const char **n2, size_t *l2);

/* ---- in-memory index (index.c) ---- */

/*
 * score -> log position, 10 bytes an entry: the top 40 bits of the score
 * and the position in 16-byte units (40 bits: 16 TiB of log). Buckets are
 * selected by the top bits of the score and split when they average more
 * than 32 entries. Lookups compare only the top partial_bits bits, so a
 * match is a candidate whose full score the caller checks in the log.
 * Locking: an internal rwlock; lookups share it, inserts exclude.
 */
#define BIDX_ENTRY_SIZE 10
#define BIDX_MAX_POS	((1ULL << 40) * BREC_ALIGN)

struct bidx_bucket {
	uint8_t *ents;
	uint32_t n, cap;
};

struct bidx {
	pthread_rwlock_t lock;
	unsigned bits;	       /* log2 of the bucket count */
	unsigned partial_bits; /* bits compared on lookup */
	struct bidx_bucket *buckets;
	uint64_t count;
	uint64_t bytes; /* requested RAM: bucket array + entry arrays */
	/*
	 * Log positions of copies found damaged or unreadable since open
	 * (review6 F14), sorted; lookups skip them. Rare, so a sorted array
	 * beside the entries rather than a bit in each (the 10-byte entry
	 * has none to spare). In memory only: a reopen examines them again.
	 */
	uint64_t *bad;
	uint32_t nbad, bad_cap;
	/*
	 * Bumped (under the write lock) whenever the matches of a score may
	 * have changed order or lost one below the end: a bucket split, GC's
	 * compaction (bidx_remove_segs moves a bucket's last entry into the
	 * removed ones' slots) and a new bad flag. Appends (insert) and
	 * repoints (in place) keep every match's number. See
	 * bidx_lookup_page.
	 */
	uint64_t gen;
};

int bidx_init(struct bidx *x, unsigned partial_bits, uint64_t expect);
void bidx_destroy(struct bidx *x);
/* Insert; -ENOMEM, -ERANGE if pos is not addressable. */
int bidx_insert(struct bidx *x, const uint8_t score[32], uint64_t pos);
/*
 * Candidates for score: fills up to max positions, skipping the first skip
 * matches, and returns the total number of matches. Positions flagged bad
 * (bidx_flag_bad) are not candidates.
 */
int bidx_lookup(struct bidx *x, const uint8_t score[32], uint64_t *pos, int max,
		int skip);
/*
 * Page through the candidates for score, max at a time: start with
 * *skip = 0, add max after each page, stop when *skip reaches the total
 * returned. Matches are numbered by their place in a bucket, so when the
 * index changed their order between two pages (x->gen: a GC pass
 * compacting the bucket, a copy flagged bad, a split) a page at *skip
 * could pass over a match never seen (safety21gc F5: a read of a good
 * chunk failed EIO). The page then starts again from the first match
 * (*skip = 0; the earlier ones are tried again, the cost of a rare
 * event). *gen: 0 before the first page, then what this call saw.
 */
int bidx_lookup_page(struct bidx *x, const uint8_t score[32], uint64_t *pos,
		     int max, int *skip, uint64_t *gen);
/*
 * Flag the copy at pos damaged or unreadable: later lookups skip it, so
 * the next write of its data stores a fresh copy and reads find that one.
 * 0 if newly flagged (the caller counts and logs it: once per copy),
 * -EALREADY if it already was, -ENOMEM. Takes the write lock.
 */
int bidx_flag_bad(struct bidx *x, uint64_t pos);
/* Flagged copies whose partial score matches score's: their number, the
 * first one's position in *pos (if any). */
int bidx_lookup_bad(struct bidx *x, const uint8_t score[32], uint64_t *pos);
/* Walk every entry (prefix = top 64 bits of the score, only the top 40
 * meaningful). Holds the read lock during the walk. */
int bidx_walk(struct bidx *x,
	      int (*fn)(void *arg, uint64_t prefix, uint64_t pos), void *arg);
uint64_t bidx_usable_bytes(struct bidx *x);
/* GC: move the entry (score's prefix, old_pos) to new_pos; -ENOENT if
 * there is none. Remove every entry (and bad flag) in a segment s with
 * segs[s] != 0 (s < nsegs), in one walk; the count removed. Both take the
 * write lock (lookups see before or after). */
int bidx_repoint(struct bidx *x, const uint8_t score[32], uint64_t old_pos,
		 uint64_t new_pos);
uint64_t bidx_remove_segs(struct bidx *x, const uint8_t *segs, uint64_t nsegs,
			  uint64_t segment_size);

/* ---- the store (store.c, log.c, map.c) ---- */

struct bobj {
	struct bobj *next;     /* hash chain, under s->objs_lock */
	pthread_rwlock_t lock; /* map contents and size */
	uint32_t refs;	       /* under s->objs_lock */
	bool deleted;	       /* under lock (write) */
	/* false until the first map or copy record for it is in the log: a
	 * name created by a write still in progress (or failed) does not
	 * exist for other operations, so no record can refer to it early */
	bool live;
	uint64_t size;
	uint64_t nchunks; /* length of scores[] */
	uint8_t (*scores)[BLOCKER_SCORE_SIZE];
	uint64_t nonzero; /* scores[] that are not zero (bobj_set_score) */
	uint16_t namelen;
	char name[];
};

struct bseg {
	int fd; /* -1 once removed by GC (or a placeholder for one) */
	/* read-only mapping of segment_size bytes (o.mmap_reads), or NULL;
	 * only bytes below the tail are ever touched, so truncating the
	 * zero tail cannot fault a reader */
	const uint8_t *map;
	/* removed by GC (listed in DIR/gc): no file, no records */
	bool removed;
	/* removed, but its file still exists (a GC pass killed before its
	 * unlinks): blog_finish_gc_removals unlinks it */
	bool file_left;
	/* a GC victim between its mark and its removal: writes must not
	 * dedup against chunks in it (set under ckpt_lock exclusive, read
	 * under segs_lock) */
	bool victim;
	/* a pass found a bad record in it: not chosen again while open
	 * (blockerctl check / repair is the operator's move); segs_lock */
	bool gc_bad;
	/*
	 * Mapped reads stop here (an offset in the file; __atomic, written
	 * under segs_lock read): segment_size until a read finds the file
	 * shorter (truncated behind the store's back), then its size, so
	 * that reads past it go to the backend, which reports the short
	 * file, instead of faulting or reading the zeros a mapping shows
	 * past the end of a file's last page.
	 */
	uint64_t valid_end;
	uint64_t errors; /* read/verify errors; __atomic; rate-limits logs */
	/*
	 * Sealed early (blog_seal): the offset in the file where its records
	 * end, the file being extended to segment_size with zeros (a hole)
	 * as the on-disk sign; 0 for every other segment (their records end
	 * where the file does). Set under append_lock + segs_lock write
	 * (blog_seal) or by recovery before any other thread runs; read
	 * under segs_lock.
	 */
	uint64_t data_end;
};

struct blocker_store {
	char *dir;
	int dirfd, lockfd;
	uint32_t chunk_size;
	uint64_t segment_size;
	struct blocker_opts o;
	const struct blocker_io_ops *io;
	void *io_ctx;

	/* log: append under append_lock; tail = end of complete records */
	pthread_mutex_t append_lock;
	struct bseg *segs;
	uint32_t nsegs, segs_cap;   /* segs[] grows under append_lock */
	pthread_rwlock_t segs_lock; /* protects the segs array pointer */
	uint64_t tail;		    /* __atomic; bytes of complete records */
	/*
	 * The last segment is zero-filled ahead of the tail while flushes are
	 * frequent, so that an fdatasync after an append writes data only
	 * (no file size or block allocation to commit). Log position of the
	 * end of the last segment's file; under append_lock.
	 */
	uint64_t alloc_end;
	uint64_t alloc_flushes; /* st.flushes at the last zero-fill */

	/* group commit */
	pthread_mutex_t sync_lock;
	pthread_cond_t sync_cond;
	uint32_t inflight;	 /* fsyncs running */
	uint64_t inflight_max;	 /* largest position a running fsync covers */
	uint64_t synced;	 /* durable up to here */
	uint32_t synced_seg;	 /* segments below this are fully synced */
	uint32_t dir_seq;	 /* segments created; __atomic */
	uint32_t dir_synced_seq; /* dir_seq covered by a directory fsync */
	int sync_err;		 /* errno of a failed fsync, sticky */
	/* DIR/sync_error written (or found at open), under syncrec_lock */
	pthread_mutex_t syncrec_lock;
	bool sync_recorded;
	struct bmark *mark; /* DIR/durable (mark.c); under sync_lock */
	/*
	 * fsyncs publish in the order they started: Linux reports a
	 * writeback error to one fsync of a file only, so a later fsync that
	 * returns 0 proves nothing while an earlier one may still fail.
	 */
	uint64_t fsync_started;	  /* tickets handed out */
	uint64_t fsync_published; /* tickets below this have published */
	uint32_t flushers; /* callers in blog_flush no fsync has taken yet */
	/*
	 * FUA writes between their start and their flush. A leader about to
	 * sample the tail waits (briefly, bounded) until they have appended,
	 * so that one fsync takes them all; under sync_lock.
	 */
	uint32_t fua_writers;
	/* callers active when the last fsync completed: the ones it took,
	 * those that queued meanwhile, FUA writes under way (log.c) */
	uint32_t group;
	uint64_t fsync_ns;	    /* how long the last fsync took */
	bool gathering;		    /* a leader waits on gather_cond */
	pthread_cond_t gather_cond; /* CLOCK_MONOTONIC */

	/* degraded mode */
	int degraded; /* __atomic errno, 0 healthy; written under sync_lock */
	char degraded_reason[160];
	/* an ENOSPC that GC cannot cure (log positions exhausted): never
	 * lifted by blocker_undegrade_nospc; under sync_lock */
	bool degraded_pinned;

	struct bidx index;

	/* objects */
	pthread_rwlock_t objs_lock;
	struct bobj **objs;
	uint64_t objs_mask, nobjs;
	/* live, undeleted objects and their non-zero chunks, for the stats
	 * (a walk over every object each second cost 0.34-0.48 CPU with 1 M
	 * objects): bobj_uncount / bobj_count around every change; atomics */
	uint64_t nr_objects, nr_logical_chunks;

	/* mutating calls hold it shared; checkpoints exclusive */
	pthread_rwlock_t ckpt_lock;
	uint64_t last_ckpt;	    /* under ckpt_mutex */
	pthread_mutex_t ckpt_mutex; /* one checkpoint at a time */

	/* background sync/checkpoint thread */
	pthread_t bg;
	bool bg_running, bg_stop;
	pthread_mutex_t bg_lock;
	pthread_cond_t bg_cond;

	/* garbage collection (gc.c) */
	pthread_mutex_t gc_mutex; /* one blocker_gc at a time */
	uint32_t gc_victims;	  /* segments flagged victim; __atomic */
	uint64_t gc_ckpt;	  /* maps must cover this (DIR/gc) */
	/* blog_open_segments refused DIR/gc (unreadable, or it names the
	 * last segment), before it opened any segment: check reports the
	 * files it has instead of a layout it cannot know */
	bool gc_refused;
	/* a store never written to (blocker_create's log.000000 missing,
	 * nothing else written): blog_open_segments opened no segment, and
	 * blocker_open creates log.000000 once recovery accepted the store
	 * (blog_create_first), so that a refused open creates nothing */
	bool seg0_pending;
	/* blocker_verdict (check): recovery judges and changes nothing (no
	 * torn tail cut, no empty last segment dropped) */
	bool judge_only;
	uint64_t gc_reclaimable;  /* last estimate; __atomic */
	uint64_t gc_closed_bytes; /* last estimate; __atomic */
	/* last estimate's dead bytes in the segment being appended to, which
	 * GC can take only after blog_seal; __atomic */
	uint64_t gc_active_dead;
	uint64_t gc_est_tail;	 /* tail at the last estimate */
	uint64_t gc_est_deletes; /* st.deletes at the last estimate */
	bool gc_stop;		 /* __atomic: close wants GC to stop */
	pthread_t gc_thread;
	bool gc_running;
	/* test hook: called by blocker_read between copying an object's
	 * scores and reading its chunks (inside the read-side section) */
	void (*read_hook)(void *arg);
	void *read_hook_arg;
	/* test hook: called by blocker_gc at named points (gc.c) */
	void (*gc_hook)(void *arg, int point);
	void *gc_hook_arg;
	/*
	 * test hook for a simulated full disk (tests model free space with
	 * the fault I/O layer's write budget): told about space the store
	 * frees or is about to take outside the log (BLOCKER_SPACE_*); a
	 * negative errno makes that allocation fail as the disk would
	 */
	int (*space_hook)(void *arg, int event, uint64_t bytes);
	void *space_hook_arg;

	/* the space reserve (reserve.c), under reserve_lock */
	pthread_mutex_t reserve_lock;
	/* bytes it should hold, 0: none; written under reserve_lock with
	 * __atomic stores, read by bres_grew without it */
	uint64_t reserve_target;
	uint64_t reserve_held; /* bytes it holds */
	/*
	 * The default target follows the maps and index files a checkpoint
	 * would write (review6 F5): their size at the last checkpoint (or
	 * at open, from memory), plus an upper bound of what writes and
	 * copies added since (__atomic; added under ckpt_lock shared, taken
	 * back by the checkpoint that covers it).
	 */
	uint64_t reserve_ckpt_base;
	uint64_t reserve_growth;
	bool reserve_unsupported; /* fallocate: EOPNOTSUPP; stop trying */
	/* bytes released since the last restore: what the store's DELETEs
	 * and GC may still use of the room it gave back */
	uint64_t reserve_released;

	struct {
		uint64_t reads, writes, dedup_hits, zero_chunks;
		uint64_t deletes, copies;
		uint64_t gc_runs, gc_segments_examined, gc_segments_removed;
		uint64_t gc_bytes_copied, gc_bytes_reclaimed, gc_failures;
		uint64_t gc_segments_sealed;
		uint64_t partial_collisions, verify_failures, read_errors;
		uint64_t flushes, fsyncs, chunk_bytes;
		uint64_t replayed_records, truncated_bytes;
	} st; /* __atomic counters */
};

#define STAT_INC(s, f)	  __atomic_fetch_add(&(s)->st.f, 1, __ATOMIC_RELAXED)
#define STAT_ADD(s, f, v) __atomic_fetch_add(&(s)->st.f, (v), __ATOMIC_RELAXED)

void blocker_logf(const struct blocker_opts *o, enum blocker_log_level lvl,
		  const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * store.c: what blocker_open would decide about the store in dir, without
 * a lock and changing nothing on disk: 0 if it would open it, else its
 * refusal (-EUCLEAN ...), logged through o->log exactly as blocker_open
 * logs it, from the same code. Warnings about what an open would repair
 * (a torn tail, an unusable checkpoint file) are logged as open logs them,
 * but nothing is repaired. blocker_check reports the refusal with open's
 * reason. o may be NULL; truncate_at_damage and mmap_reads are ignored.
 */
int blocker_verdict(const char *dir, const struct blocker_opts *o);

/* log.c */
int blog_open_segments(struct blocker_store *s, bool create_first);
/* Unlink the files of listed segments blog_open_segments found still
 * there (file_left): what a GC pass killed between writing DIR/gc and its
 * unlinks left. blocker_open calls it once recovery accepted the store (a
 * refused open changes nothing); under truncate_at_damage
 * blog_open_segments calls it itself, before the repair. 0, or -errno of
 * an unlink that failed other than with ENOENT (said; the open is
 * refused). */
int blog_finish_gc_removals(struct blocker_store *s);
/* Create log.000000 of a store never written to (s->seg0_pending), once
 * recovery accepted the store; 0 if nothing is pending. */
int blog_create_first(struct blocker_store *s);
/* No file a write leaves (log.000001, maps, index, durable): a store
 * never written to, whose missing log.000000 open creates */
bool blog_never_written(struct blocker_store *s);
int blog_seg_path(const char *dir, uint32_t seg, char *out, size_t outlen);
/* Is name a log segment file name ("log." and at least six digits)? If so
 * *seg is its number (names beyond UINT32_MAX are not segment files). */
bool blog_seg_name(const char *name, uint32_t *seg);
/* Segment files numbered s->nsegs or more (they lie after a gap), sorted:
 * *out (free() it; NULL when *n is 0). 0 or a negative errno. */
int blog_segs_after(struct blocker_store *s, uint32_t **out, uint32_t *n);
/*
 * fd and offset of log position pos. -ERANGE past the log, -ESTALE for a
 * segment removed by GC. The fd stays valid only inside a read-side RCU
 * section (blocker_rcu_lock) or under append_lock: GC closes a removed
 * segment's fd after a grace period.
 */
int blog_fd(struct blocker_store *s, uint64_t pos, int *fd, uint64_t *off);
/* Is pos in a segment flagged as a GC victim? */
bool blog_pos_victim(struct blocker_store *s, uint64_t pos);
/* One record to append; pos is filled in. */
struct brec_out {
	enum brec_type type;
	const uint8_t *score;
	const void *payload;
	uint32_t len;
	uint64_t pos;
};
/*
 * Append records in order with as few pwritev calls as segment boundaries
 * allow. Caller holds append_lock. The tail advances after each write, so
 * a record is readable once its index entry (inserted by the caller after
 * this returns) is visible. On error the store is degraded and records
 * not yet written are not in the log; some may be (the caller's map
 * record is last, so a partial batch is never referenced).
 */
int blog_append_batch_locked(struct blocker_store *s, struct brec_out *rec,
			     int n);
/*
 * The same for GC's copies: an ENOSPC does not degrade the store (the
 * copies are optional work; the bytes a failed write left past the tail
 * are zeroed or cut off again); any other error does.
 */
int blog_append_batch_gc_locked(struct blocker_store *s, struct brec_out *rec,
				int n);
int blog_append_locked(struct blocker_store *s, enum brec_type type,
		       const uint8_t score[32], const void *payload,
		       uint32_t len, uint64_t *pos_out);
int blog_append(struct blocker_store *s, enum brec_type type,
		const uint8_t score[32], const void *payload, uint32_t len,
		uint64_t *pos_out);
int blog_flush(struct blocker_store *s);
/*
 * Group commit entry for a FUA write: like blog_flush, and counts the
 * caller out of s->fua_writers (which blocker_write counted in with
 * blog_fua_begin). blog_fua_abort counts out a FUA write that failed.
 */
void blog_fua_begin(struct blocker_store *s);
int blog_flush_fua(struct blocker_store *s);
void blog_fua_abort(struct blocker_store *s);
/*
 * Cut the zero-filled part past the tail off the last segment: at a clean
 * close, so that a closed store ends at its last record, and when a
 * checkpoint finds no room. 1 if it cut something, 0 if there was
 * nothing to cut, or a negative errno.
 */
int blog_trim_tail(struct blocker_store *s);
int blog_pread(struct blocker_store *s, uint64_t pos, void *buf, size_t len);
/* iov is modified (consumed) */
int blog_preadv(struct blocker_store *s, uint64_t pos, struct iovec *iov,
		int cnt);
void blog_close(struct blocker_store *s);
/* close segment seg's file and drop its mapping (recovery's cut) */
void blog_seg_release(struct blocker_store *s, uint32_t seg);
/*
 * A read or verification error of segment seg: should its log line be
 * written? The first 8 of a segment, then one in 1024 (*n: the
 * segment's count so far), so that a client re-reading damaged data
 * cannot flood the log. The caller counts the error in the stats.
 */
bool blog_seg_error_log(struct blocker_store *s, uint64_t seg, uint64_t *n);
/*
 * Log position where segment seg's records end: where its file ends
 * (fstat), or for a segment sealed early its data_end; negative errno.
 */
int64_t blog_seg_end(struct blocker_store *s, uint32_t seg);
/*
 * Seal the segment being appended to (review11 N-E): GC takes only
 * segments the tail has left, so on a disk too small for a second
 * segment the dead bytes of the only one could never be reclaimed. The
 * file is extended to segment_size (a hole: no blocks needed, which
 * matters on a full disk) and fdatasynced, then the next segment is
 * created empty and the tail moves to its start; from then on the
 * sealed segment is closed like any other. Recovery reads a segment
 * that is not the last, is segment_size long and holds only zeros from
 * a record boundary on as sealed there (docs/on-disk-format.md). Takes
 * append_lock (the caller may hold ckpt_lock). 1 if sealed, 0 if there
 * is nothing to seal (the segment is empty, or the next one already
 * exists), or a negative errno with nothing changed (a failed fdatasync
 * is also made sticky as at a segment switch).
 */
int blog_seal(struct blocker_store *s);

/*
 * mapread.c: guarded copies out of a segment mapping. bguard_install sets
 * up the process-wide SIGBUS handler once (later calls return the first
 * result). bguard_copy copies the bytes at map + off into iov[0..cnt); a
 * SIGBUS raised by the kernel for an address in [map, map + map_len) while
 * this thread copies (a page that cannot be read, or one past the end of a
 * file truncated under the mapping) makes it return -EIO with *fault_off
 * the faulting offset in the mapping; iov's buffers are then partly
 * written. No lock, allocation or other call runs inside the copy.
 */
int bguard_install(void);
int bguard_copy(const uint8_t *map, size_t map_len, size_t off,
		const struct iovec *iov, int cnt, size_t *fault_off);

/*
 * Read-side RCU (liburcu-bp: no thread registration, so any caller's
 * thread may read): a reader holds it from taking an object's scores
 * until its last log read is done, so that GC, which waits for a grace
 * period after its mark and after repointing the index, never frees a
 * chunk or closes a segment a reader may still use. Nests.
 */
void blocker_rcu_lock(void);
void blocker_rcu_unlock(void);
/* wait until every read-side section that began before has ended */
void blocker_rcu_sync(void);

/*
 * gc.c: DIR/gc lists the segments GC removed and the checkpoint position
 * that made the removal safe. bgc_load reads it (-ENOENT if none,
 * -EBADMSG if corrupt) into a sorted array of the removed segment numbers
 * below nslots (the segment slots the log can have: up to its last
 * segment file), never more than nslots entries however long the list is:
 * the *past listed ones at or past nslots are only counted, and *end is
 * one past the highest listed (0: none). bgc_save writes the removed
 * flags of s->segs atomically.
 */
#define BLOCKER_GC_FILE "gc"
int bgc_load(int dirfd, uint32_t nslots, uint32_t **removed, uint32_t *n,
	     uint32_t *past, uint32_t *end, uint64_t *ckpt);
int bgc_save(struct blocker_store *s, uint64_t ckpt);
/* start/stop the background GC thread (o.gc_threshold_pct) */
int bgc_start(struct blocker_store *s);
void bgc_stop(struct blocker_store *s);
void blocker_degrade(struct blocker_store *s, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int blocker_degraded(struct blocker_store *s)
{
	return __atomic_load_n(&s->degraded, __ATOMIC_ACQUIRE);
}

/*
 * A read window over the log for sequential scans (recovery, check): reads
 * cap bytes at a time instead of two small preads a record. buf is
 * malloc'd by the caller with cap bytes, or NULL with cap 0.
 */
struct blog_window {
	uint8_t *buf;
	size_t cap, len;
	uint64_t start;
};
/* Point *out at log bytes [pos, pos + n); file_end is the log position of
 * the end of pos's segment file. Valid until the next call. */
int blog_win_get(struct blocker_store *s, struct blog_window *w, uint64_t pos,
		 size_t n, uint64_t file_end, const uint8_t **out);

/*
 * Is the log [pos, file_end) all zero bytes (a zero-filled tail that no
 * record reached)? 0 with *zero set, or an I/O error. recover.c
 */
int blog_zero_after(struct blocker_store *s, uint64_t pos, uint64_t file_end,
		    bool *zero);

/*
 * mark.c: the durable mark, DIR/durable ("log durable up to pos").
 * bmark_create writes a new one (no position known durable) atomically:
 * blocker_create does, before the super block. bmark_open opens an
 * existing one and reads it into s->mark; -ENOENT if there is none (a
 * store made before marks: s->mark stays NULL, nothing is created, as
 * recovery may still refuse the store), -ENODATA if no slot is valid.
 * bmark_create_missing makes and opens the missing file once blocker_open
 * accepted the store (0 if s->mark is set already). bmark_note records
 * pos after a successful fsync (caller holds sync_lock; no fsync, never fails
 * loudly); bmark_reset rewrites it durably (recovery only); bmark_read
 * reads it without opening a store (check).
 */
#define BLOCKER_MARK_FILE "durable"
int bmark_create(int dirfd);
int bmark_open(struct blocker_store *s, uint64_t *pos);
int bmark_create_missing(struct blocker_store *s);
void bmark_note(struct blocker_store *s, uint64_t pos);
int bmark_reset(struct blocker_store *s, uint64_t pos);
void bmark_close(struct blocker_store *s);
int bmark_read(int dirfd, uint64_t *pos);

/*
 * mark.c: DIR/sync_error, a failed log fsync remembered across opens
 * (review9 R9-12; docs/on-disk-format.md). Linux reports a writeback
 * error to one fsync only and leaves the lost pages clean in the page
 * cache, so a later process's fsync of the same file returns 0: the
 * sticky s->sync_err must outlive the process.
 * bsyncerr_record writes it once per handle (the first failure; later
 * ones return at once), before the caller publishes the error, so no
 * FLUSH fails before the record is durable: the text record (tmp +
 * fdatasync + rename + directory fsync), or if that fails an empty file
 * (no data block needed), or nothing but a loud log line. Takes
 * syncrec_lock, then sync_lock; the caller holds neither (append_lock is
 * allowed). bsyncerr_read: 0 if there is no record, 1 if there is one
 * (any content, or none) with a description in desc.
 */
#define BLOCKER_SYNC_ERROR_FILE "sync_error"
void bsyncerr_record(struct blocker_store *s, int err, const char *what);
int bsyncerr_read(int dirfd, char *desc, size_t len);

/* recover.c: scan the log from pos, replaying into index and maps. */
int blocker_recover(struct blocker_store *s, uint64_t idx_pos,
		    uint64_t maps_pos);
/*
 * Can a checkpoint (maps or index) at pos be replayed from? Open's rule,
 * on the segments blog_open_segments opened: pos is 0, or inside or at the
 * end of an existing segment file (the zero-filled rest of the last one
 * included: replay starts at pos and never reads below it), or at the end
 * of a last segment that ended exactly full. Not inside a segment GC
 * removed. Open refuses a checkpoint for which this is false (-ERANGE
 * from blocker_recover), and blocker_check reports exactly that
 * (review21c F7). *removed_seg: set when pos lies in a removed segment.
 */
bool blog_ckpt_pos_valid(struct blocker_store *s, uint64_t pos,
			 bool *removed_seg);

/* map.c */
int bmaps_init(struct blocker_store *s);
void bmaps_destroy(struct blocker_store *s);
struct bobj *bobj_get(struct blocker_store *s, const char *name, size_t len,
		      bool create);
void bobj_put(struct blocker_store *s, struct bobj *o);
/* resize the map to hold at least n chunks; under o->lock (write) */
int bobj_reserve(struct bobj *o, uint64_t n);
/*
 * The store's object counters (nr_objects, nr_logical_chunks): an object
 * counts once, with its non-zero chunks, while it is live and not deleted.
 * Every change of live, deleted or scores[] is bracketed by bobj_uncount
 * (its old share out) and bobj_count (its new share in), under o->lock
 * (write) or in single-threaded replay; scores[] entries change through
 * bobj_set_score, a whole scores[] copied takes its source's nonzero.
 */
void bobj_uncount(struct blocker_store *s, const struct bobj *o);
void bobj_count(struct blocker_store *s, const struct bobj *o);
void bobj_set_score(struct bobj *o, uint64_t idx,
		    const uint8_t score[BLOCKER_SCORE_SIZE]);
/*
 * Call fn for every object in the table, each under its own read lock
 * (the table lock is not held meanwhile: delete takes it under an
 * object's lock); objects created or deleted during the walk may be
 * missed or seen. Stops at fn's first nonzero result and returns it;
 * -ENOMEM when the list of objects cannot be allocated.
 */
typedef int (*bmaps_visit_fn)(void *arg, const struct bobj *o);
int bmaps_visit(struct blocker_store *s, bmaps_visit_fn fn, void *arg);
/* The counters recomputed by a walk over every object (tests compare);
 * 0 or -ENOMEM. */
int bmaps_recount(struct blocker_store *s, uint64_t *objects,
		  uint64_t *logical_chunks);
/* apply a replayed/decoded record to the in-memory maps (no locking) */
int bmaps_apply(struct blocker_store *s, enum brec_type type,
		const uint8_t *payload, uint32_t len);
int bmaps_unlink(struct blocker_store *s, struct bobj *o);
/* An operation that created o (bobj_get with create) and failed before
 * o became live forgets the name again: marked deleted (a waiter on its
 * lock then looks the name up afresh) and unlinked, so failed writes and
 * copies to new names do not pile up entries in the table. Nothing if o
 * is live. Called with o's lock held for writing. */
void bobj_forget_unborn(struct blocker_store *s, struct bobj *o);
int bmaps_save(struct blocker_store *s, uint64_t pos);
/* Bytes the maps file would have if written now (bres_open: the reserve
 * follows it). Takes objs_lock shared; no object may change meanwhile
 * (open, or writers excluded). */
uint64_t bmaps_ckpt_bytes(struct blocker_store *s);
int bmaps_load(struct blocker_store *s, uint64_t *pos);
int bidx_save(struct blocker_store *s, uint64_t pos);
/* serialised checkpoint payloads (malloc'd), taken with writers excluded */
int bmaps_snapshot(struct blocker_store *s, uint8_t **p, size_t *len,
		   uint64_t *count);
int bidx_snapshot(struct blocker_store *s, uint8_t **p, size_t *len,
		  uint64_t *count);
int bmaps_save_buf(struct blocker_store *s, uint64_t pos, const uint8_t *p,
		   size_t len, uint64_t count);
int bidx_save_buf(struct blocker_store *s, uint64_t pos, const uint8_t *p,
		  size_t len, uint64_t count);
int bidx_load(struct blocker_store *s, uint64_t *pos);

/*
 * reserve.c: DIR/reserve, space held back for DELETEs and GC on a full
 * disk. bres_open allocates it at open (logs if it cannot); bres_release
 * truncates it (0; 1 if nothing was held: released before, maybe by
 * another thread since the caller's write failed, or never allocated; or
 * a negative errno); bres_restore
 * allocates it again (0 or a negative errno, e.g. -ENOSPC); bres_full:
 * does it hold all it should?
 */
#define BLOCKER_RESERVE_FILE "reserve"
enum {
	BLOCKER_SPACE_RESERVE_FREED = 1, /* bytes: released */
	BLOCKER_SPACE_RESERVE_ALLOC = 2, /* bytes: about to be allocated */
	BLOCKER_SPACE_SEGMENT_FREED = 3, /* bytes: a segment file removed */
	BLOCKER_SPACE_CHECKPOINT = 4,	 /* bytes: new maps + index files */
	/* bytes: the DIR/sync_error record, 0 for its empty fallback */
	BLOCKER_SPACE_SYNC_ERROR = 5,
};
void bres_open(struct blocker_store *s);
/* also puts a healthy store into ENOSPC mode (writes refused, DELETEs and
 * GC accepted) until GC restores the reserve */
int bres_release(struct blocker_store *s);
int bres_restore(struct blocker_store *s);
bool bres_full(struct blocker_store *s);
/* the room the reserve holds or gave back since the last restore */
uint64_t bres_room(struct blocker_store *s);
/* a checkpoint wrote ckpt_bytes of maps and index, covering growth
 * bytes of bres_grew: the default target follows them (review6 F5) */
void bres_checkpointed(struct blocker_store *s, uint64_t ckpt_bytes,
		       uint64_t growth);
/*
 * A write or copy (holding ckpt_lock shared) may have added up to bytes
 * to the next checkpoint's files: bres_note counts them. bres_grew,
 * called without store locks after the call, grows the reserve file
 * once the default target has outgrown it by a step (1 MiB, or 1/32 of
 * the target): a store whose checkpoints are rare (checkpoint_bytes 0)
 * still holds room for the checkpoint GC needs on a full disk. If the
 * disk has no room for it, the store enters ENOSPC mode (writes wait,
 * DELETEs and GC go on), as when the reserve is released: a store let
 * on without its reserve would fill the disk past the point of return.
 */
void bres_note(struct blocker_store *s, uint64_t bytes);
void bres_grew(struct blocker_store *s);
/*
 * Is there room for bytes more past the reserve? Allocates a scratch
 * file (DIR/reserve.probe) and removes it at once: 0 or -ENOSPC. Used to
 * let writes back into a store in ENOSPC mode when space came back from
 * outside it (review6 F15).
 */
int bres_probe(struct blocker_store *s, uint64_t bytes);
/*
 * Leave a degraded state caused by ENOSPC (GC made room and the reserve
 * is whole again): writes are accepted again. No effect for any other
 * cause, or after a failed fsync. log.c
 */
void blocker_undegrade_nospc(struct blocker_store *s, const char *why);
/* degraded by ENOSPC only (deletes and GC may still append) */
static inline bool blocker_degraded_nospc(struct blocker_store *s)
{
	return blocker_degraded(s) == ENOSPC;
}

/* files in a store directory */
#define BLOCKER_SUPER_FILE "super"
#define BLOCKER_LOCK_FILE  "lock"
#define BLOCKER_MAPS_FILE  "maps"
#define BLOCKER_INDEX_FILE "index"

/*
 * Format version 2: the last log segment may end with a zero-filled tail
 * past its last record. Version 3: segment files listed in DIR/gc were
 * removed by garbage collection (a version 2 reader would take the gap
 * for lost data). Older stores are read; blocker_open rewrites their super
 * block at the current version before appending anything.
 */
#define BLOCKER_FORMAT_VERSION 3
/* -EBADMSG if corrupt, -EPROTONOSUPPORT for a version this build does not
 * know (newer) */
int blocker_read_super(int dirfd, uint32_t *chunk_size, uint64_t *seg_size,
		       uint32_t *version);
/* atomically (tmp + fsync + rename), at BLOCKER_FORMAT_VERSION */
int blocker_write_super(int dirfd, uint32_t chunk_size, uint64_t seg_size);
/* Write a file atomically: tmp + fsync + rename + directory fsync. */
int blocker_write_file_atomic(int dirfd, const char *name,
			      const struct iovec *iov, int cnt);

/*
 * Test support: what a SIGKILL of the process leaves behind, except for
 * a GC pass in progress. The background and GC threads are stopped
 * (joined: a pass in progress ends first, and ends as a pass does, with
 * its flush, checkpoint, gc file and unlinks: a test that needs a crash
 * inside a pass forks and SIGKILLs, test_blocker_gc_crash.c), then memory,
 * mappings and descriptors are released, the lock file's with them (so
 * another handle can open the store), and nothing else is written to the
 * store's files: no checkpoint, no flush, no trimmed tail.
 * Whatever the handle appended and did not make durable stays as it is
 * (the page cache, or a power-loss model's pending state). s is freed.
 */
void blocker_abandon(struct blocker_store *s);

#endif
