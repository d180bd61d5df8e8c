/* SPDX-License-Identifier: MIT */
#ifndef BLOCKER_STORE_H
#define BLOCKER_STORE_H
/*
 * blocker store: a venti-style object store in a directory.
 *
 * Objects are named, mutable byte ranges to their users. On disk an object
 * is a map from chunk index to score (SHA-256 of the chunk); chunks live
 * once (dedup) in an append-only log of segment files; all-zero chunks are
 * never stored. See docs/on-disk-format.md for the files and the recovery
 * algorithm.
 *
 * Threading contract
 * - Every blocker_* call on an open store is thread-safe and synchronous:
 *   the peer's worker threads call them directly, many at once. Reads of
 *   any objects run in parallel; writes to different objects run in
 *   parallel (hashing included); writes to one object are serialised.
 * - Concurrent flush / FUA callers share one fsync (group commit): a flush
 *   waits for at most one fsync already in progress plus the one that
 *   covers it.
 * - A store directory is opened by one process at a time (flock on
 *   DIR/lock); a second open fails with -EBUSY.
 *
 * Durability contract
 * - blocker_write() returns once its chunk and map records are in the log
 *   (the page cache): a later read sees it; a crash of the process keeps
 *   it, a crash of the machine may lose it.
 * - With BLOCKER_FUA, or for every write that returned before a
 *   blocker_flush() call started, the data survives a machine crash when
 *   the call returns 0. The background sync interval makes everything
 *   durable within sync_interval_ms.
 * - After any crash, reopening yields the state after some prefix of the
 *   acknowledged writes that includes every flushed one: a read returns old
 *   or new data, never garbage.
 *
 * Errors: functions return 0 or a negative errno. -EINVAL for a bad name
 * or range, -ENOENT for a missing object, -EIO for a chunk whose content
 * does not match its score, and in degraded mode every mutating call fails
 * with the errno that caused it (e.g. -ENOSPC, -EIO) while reads go on.
 * A store degraded by ENOSPC still takes deletes and GC passes, which
 * use the space held back in DIR/reserve; a GC pass that removed segments
 * and allocated the reserve again lets writes back in (docs/blocker.md
 * "Full disk").
 *
 * Object names: 1..BLOCKER_NAME_MAX bytes from [A-Za-z0-9._:@+=-]; names
 * are passed as (pointer, length), not NUL-terminated, because xseg
 * request targets are not.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define BLOCKER_VERSION_STRING "0.1.0"
#define BLOCKER_NAME_MAX       255
#define BLOCKER_SCORE_SIZE     32
/* Largest object size; an object's map lives in RAM (32 bytes a chunk). */
#define BLOCKER_MAX_OBJECT_SIZE	     (1ULL << 32)
#define BLOCKER_DEFAULT_CHUNK_SIZE   4096
#define BLOCKER_DEFAULT_SEGMENT_SIZE (256ULL << 20)
/*
 * blocker_opts.segment_size 0: chosen by blocker_create from the size of
 * the file system DIR is on (blocker_auto_segment_size).
 */
#define BLOCKER_SEGMENT_SIZE_AUTO 0
/* the smallest automatic segment, and the smallest file system an
 * automatic create accepts (8 of them: reserve + data + GC's room) */
#define BLOCKER_MIN_AUTO_SEGMENT_SIZE (1ULL << 20)
#define BLOCKER_MIN_FS_SIZE	      (8 * BLOCKER_MIN_AUTO_SEGMENT_SIZE)
/* Partial-score width kept in the in-memory index (bits). */
#define BLOCKER_DEFAULT_PARTIAL_BITS 40

/* Write flags */
#define BLOCKER_FUA 1u

struct blocker_store;

/*
 * I/O layer used for all log data I/O (reads, appends, fsync). Metadata
 * operations (open, rename, truncate, directory fsync) use plain syscalls.
 * Each function returns the byte count or 0, or a negative errno; short
 * transfers are allowed (the caller continues or fails). Implementations must
 * be thread-safe. ctx is the io_ctx of the options.
 */
struct blocker_io_req {
	int fd;
	int cnt;
	const struct iovec *iov;
	uint64_t off;
	ssize_t res;
};

struct blocker_io_ops {
	const char *name;
	ssize_t (*preadv)(void *ctx, int fd, const struct iovec *iov, int cnt,
			  uint64_t off);
	ssize_t (*pwritev)(void *ctx, int fd, const struct iovec *iov, int cnt,
			   uint64_t off);
	int (*fdatasync)(void *ctx, int fd);
	/*
	 * Optional (NULL: the store issues preadv calls one by one): start
	 * all n reads at once, wait for all, store each result (bytes or
	 * negative errno) in reqs[i].res. Returns 0, or a negative errno if
	 * the batch could not be issued at all.
	 */
	int (*preadv_batch)(void *ctx, struct blocker_io_req *reqs, int n);
};

/* Plain pread/pwritev/fdatasync. ctx unused. */
extern const struct blocker_io_ops blocker_io_sync;

/*
 * io_uring backend: each calling thread gets its own ring (created on first
 * use, freed at thread exit), so reads issued by many worker threads are in
 * flight concurrently, and a multi-chunk read submits all its chunk reads
 * in one io_uring_enter (preadv_batch). Single reads, appends and fsyncs
 * are plain syscalls (cheaper when the caller waits at once; io.c). ctx
 * unused.
 */
extern const struct blocker_io_ops blocker_io_uring;

/*
 * Fault injection wrapper for tests. Wraps another backend; once armed,
 * the next writes succeed for write_budget bytes (a write crossing the
 * budget is cut short there), after which every pwritev fails with
 * write_errno; fsync fails with fsync_errno if non-zero. Counters are
 * atomics; arm/disarm from any thread.
 */
struct blocker_io_fault {
	const struct blocker_io_ops *inner;
	void *inner_ctx;
	int armed;	      /* accessed with __atomic */
	int64_t write_budget; /* bytes still allowed; __atomic */
	int write_errno;      /* e.g. ENOSPC */
	int fsync_errno;      /* 0: fsync passes through */
	int read_errno;	      /* 0: reads pass through */
	uint64_t faults;      /* number of injected failures */
};
extern const struct blocker_io_ops blocker_io_fault_ops;
void blocker_io_fault_init(struct blocker_io_fault *f,
			   const struct blocker_io_ops *inner, void *inner_ctx);
/* Arm: allow budget more bytes, then fail writes with write_errno. */
void blocker_io_fault_arm(struct blocker_io_fault *f, int64_t budget,
			  int write_errno, int fsync_errno);

enum blocker_log_level { BLOCKER_LOG_ERR, BLOCKER_LOG_WARN, BLOCKER_LOG_INFO };

struct blocker_opts {
	/* creation parameters (blocker_create only) */
	uint32_t chunk_size; /* power of two, 512 .. 1 MiB */
	/* multiple of 1 MiB, >= 1 MiB; BLOCKER_SEGMENT_SIZE_AUTO (the
	 * default) to scale it to the file system */
	uint64_t segment_size;
	/* runtime parameters (blocker_open) */
	bool verify_reads; /* re-hash chunks read from disk */
	/*
	 * Read the log through read-only shared mappings of its segments
	 * (default on): no syscall and no kernel copy per read, which on a
	 * VM costs as much as hashing the chunk. Each segment is mapped
	 * once, whole (segment_size bytes); a segment that cannot be mapped
	 * (address space, ENOMEM) is read with the backend instead.
	 *
	 * A page the disk cannot read, or one past the end of a segment
	 * file truncated behind the store's back, raises SIGBUS in the
	 * reader. The store catches it: the read fails with -EIO, the
	 * failure is logged (segment file, offset, reason) and counted in
	 * blocker_stats.read_errors, and the store goes on serving.
	 *
	 * Process-wide effect: the first blocker_open with mmap_reads
	 * installs a SIGBUS handler (sigaction, SA_SIGINFO, no alternate
	 * stack) that stays for the life of the process. It handles only a
	 * fault the kernel raises for an address inside the mapping the
	 * faulting thread is copying a chunk out of, at that moment; every
	 * other SIGBUS (other addresses, kill/raise) is passed to the
	 * handler that was installed before it (a sanitizer's, the
	 * application's), or gets the default action (the process dies).
	 * An application that installs its own SIGBUS handler after
	 * opening a store must chain to the previous one the same way, or
	 * mapped read faults kill the process again.
	 *
	 * Bypasses the I/O backend for reads (not for writes), so fault
	 * injection of reads (blocker_io_fault.read_errno) needs it off.
	 */
	bool mmap_reads;
	unsigned partial_bits;	   /* 1..40; tiny values force collisions */
	unsigned sync_interval_ms; /* 0: no background sync */
	uint64_t checkpoint_bytes; /* checkpoint after this much log; 0 off */
	/*
	 * Operator override (default off): open even if log data below the
	 * durable point is damaged or missing, by cutting the log there
	 * (everything after it is lost) and logging exactly what was cut.
	 * Off, such an open fails with -EUCLEAN.
	 */
	bool truncate_at_damage;
	/*
	 * Background garbage collection (default 0: off). When the
	 * reclaimable share of the closed segments' bytes reaches this
	 * percentage, a store thread runs blocker_gc() with gc_rate_bytes
	 * (0: unlimited) as its copy rate, gc_threshold_pct / 2 as
	 * min_dead_pct and 16 as max_segments. The estimate is refreshed every
	 * gc_check_ms (default 1000) if an eighth of a segment was appended or
	 * objects were deleted since the last one.
	 */
	unsigned gc_threshold_pct;
	uint64_t gc_rate_bytes;
	unsigned gc_check_ms;
	/*
	 * Space held back in DIR/reserve (a preallocated file) for the work
	 * that gives space back on a full disk: DELETE records, GC's copies
	 * and its checkpoint. 0 (default): one segment plus twice the maps
	 * and index files plus 1 MiB, following them as they grow while the
	 * store is open; BLOCKER_RESERVE_NONE: none (a full disk cannot be
	 * recovered online). Tools take it through blocker_reserve_opt.
	 * See docs/blocker.md "Full disk".
	 */
	uint64_t reserve_bytes;
	const struct blocker_io_ops *io; /* NULL: blocker_io_sync */
	void *io_ctx;
	/* message sink; NULL: stderr. Called without store locks held. */
	void (*log)(void *arg, enum blocker_log_level level, const char *msg);
	void *log_arg;
};

#define BLOCKER_RESERVE_NONE UINT64_MAX
#define BLOCKER_RESERVE_MIN  (1ULL << 20)

/*
 * An operator's reserve size (--reserve BYTES of the blocker peer and
 * blockerctl) into blocker_opts.reserve_bytes: 0 turns the reserve off
 * (BLOCKER_RESERVE_NONE: the caller should warn that a full disk then
 * cannot be recovered online), anything else is a fixed size of at least
 * BLOCKER_RESERVE_MIN (-ERANGE below it, or at BLOCKER_RESERVE_NONE).
 * "auto" (the default size) is the caller's: leave reserve_bytes 0.
 */
int blocker_reserve_opt(uint64_t bytes, uint64_t *reserve_bytes);

/* Fill with defaults: 4 KiB chunks, automatic segment size, verification
 * on, mapped reads on. */
void blocker_opts_init(struct blocker_opts *o);

/*
 * The automatic segment size for a store on a file system of fs_bytes
 * (total size): the largest power of two at most fs_bytes / 8, between
 * BLOCKER_MIN_AUTO_SEGMENT_SIZE and BLOCKER_DEFAULT_SEGMENT_SIZE, and at
 * least 4 records of chunk_size. Why: the space reserve holds one segment
 * (plus the checkpoint files), GC gives space back a segment at a time
 * and needs a closed segment to take, so a segment of 256 MiB on a
 * 512 MiB disk left room for one segment only (review11 N-E) and one on
 * a 64 MiB disk no room for the reserve at all (N-F). -ENOSPC if fs_bytes
 * is below 8 such segments (BLOCKER_MIN_FS_SIZE for 4 KiB chunks).
 */
int blocker_auto_segment_size(uint64_t fs_bytes, uint32_t chunk_size,
			      uint64_t *segment_size);

/*
 * Create an empty store in dir (created if missing; must be empty of store
 * files). Durable on return: the store's files and directory are fsynced,
 * and so is dir's parent directory (dir's own entry). -EEXIST if a store
 * is already there, -EINVAL for bad parameters, -ENOSPC (logged through
 * o->log with the minimum) when the segment size is automatic and the
 * file system is smaller than 8 segments of the smallest size, or the
 * errno of a failed mkdir, statvfs, open or fsync, -ENOTEMPTY (logged)
 * when dir holds a store's data but no super block (maps, index, a
 * non-empty log.000000 or a later segment: a store that lost its super
 * block, which a create would erase; an interrupted create's leftovers,
 * an empty log.000000, the durable mark, the reserve, are redone) (a failed
 * parent fsync fails the create: a store whose directory entry may vanish in a
 * power cut is not created). Nothing is created when the parameters are
 * refused; a refused file system leaves at most the (empty) directory.
 */
int blocker_create(const char *dir, const struct blocker_opts *o);

/*
 * Open (and recover) the store in dir. Loads the last checkpoint (maps and
 * index files), replays the log after it, truncates a torn tail and logs
 * what it dropped. On success *out is the store; the caller owns it until
 * blocker_close().
 * A store whose log fsync once failed (DIR/sync_error, written at the
 * failure) opens degraded: reads are served, writes, FUA writes and
 * flushes fail with -EIO (and so does blocker_close), with an error
 * logged that names the file, until blocker_clear_sync_error.
 */
int blocker_open(const char *dir, const struct blocker_opts *o,
		 struct blocker_store **out);

/*
 * Forget a failed log fsync recorded in DIR/sync_error (the operator's
 * `blockerctl clear-sync-error DIR`, after checking the disk): drops the
 * log segments' clean pages from the page cache (best effort, so that the
 * next open reads what the disk holds and cuts what the failed writeback
 * lost as a torn tail past the durable mark), then removes the record and
 * fsyncs the directory. The store must not be open: -EBUSY if its lock is
 * held (nothing changed). -ENOENT if dir has no store or no record
 * (nothing changed), or the errno of a failed unlink or fsync. o: only
 * its log sink is used (NULL: stderr).
 */
int blocker_clear_sync_error(const char *dir, const struct blocker_opts *o);

/*
 * Flush, write a checkpoint (unless degraded) and free the store. No other
 * call may be in progress or follow. Returns the first error met; the
 * store is freed regardless.
 */
int blocker_close(struct blocker_store *s);

/* Does the name satisfy the name rules? */
bool blocker_name_valid(const char *name, size_t len);

/*
 * Read len bytes at off of an object into buf. Unwritten ranges, including
 * those past the object's size, read as zeros. -ENOENT if the object does
 * not exist; -EINVAL if len is 0 or off+len overflows or exceeds
 * BLOCKER_MAX_OBJECT_SIZE; -EIO if a chunk fails verification or cannot
 * be read and no other copy of it is good (buf is then undefined). A copy
 * found damaged or unreadable is skipped from then on until the store is
 * reopened; a write of the same data stores a fresh copy, which reads then
 * use (the repair).
 */
int blocker_read(struct blocker_store *s, const char *name, size_t namelen,
		 uint64_t off, size_t len, void *buf);

/*
 * Write len bytes from buf at off, creating the object if needed; the size
 * becomes max(size, off+len). Partial chunks are read-modify-written. A
 * write of up to 4096 chunks is atomic across a crash; larger writes are
 * split into atomic pieces. flags: BLOCKER_FUA makes it durable before
 * returning. Errors as blocker_read, plus the degraded errno.
 */
int blocker_write(struct blocker_store *s, const char *name, size_t namelen,
		  uint64_t off, size_t len, const void *buf, unsigned flags);

/*
 * Delete an object (its chunks stay: other maps may share them). Works in
 * a store degraded by ENOSPC; on a full disk the first delete releases
 * the space reserve for its record; one that finds no reserve to release
 * (released before, e.g. by GC since this append failed, or none at all)
 * tries once more all the same. -ENOSPC if even that finds no room
 * (nothing changed, the store is not degraded by it).
 */
int blocker_delete(struct blocker_store *s, const char *name, size_t namelen);

/* Size of an object. -ENOENT if missing. */
int blocker_info(struct blocker_store *s, const char *name, size_t namelen,
		 uint64_t *size);

/*
 * Copy object src to dst (replacing dst): only the map is copied; later
 * writes to either never affect the other. -EINVAL if src == dst.
 */
int blocker_copy(struct blocker_store *s, const char *src, size_t srclen,
		 const char *dst, size_t dstlen);

/*
 * Digest over the map: SHA-256 of le64(size) followed by, for each chunk
 * index i holding a stored (non-zero) chunk in increasing order, le64(i)
 * and its score. Equal contents give equal digests.
 */
int blocker_hash(struct blocker_store *s, const char *name, size_t namelen,
		 uint8_t digest[BLOCKER_SCORE_SIZE]);

/* Everything acknowledged before the call is durable when it returns 0. */
int blocker_flush(struct blocker_store *s);

/* Flush and write the maps and index files (bounds the next replay). */
int blocker_checkpoint(struct blocker_store *s);

struct blocker_stats {
	uint64_t objects;
	uint64_t chunks;	/* distinct stored chunks (index entries) */
	uint64_t chunk_bytes;	/* chunk payload bytes in the log */
	uint64_t logical_bytes; /* referenced non-zero chunks * chunk size */
	uint64_t log_bytes;	/* log end position */
	uint64_t index_bytes;	/* index RAM requested (buckets + entries) */
	uint64_t index_usable_bytes; /* same, as the allocator rounded it */
	uint64_t reads, writes, dedup_hits, zero_chunks;
	uint64_t
	    partial_collisions; /* index matches whose full score differed */
	/* chunk copies found not to match their score; each copy once per
	 * open (it is then skipped by lookups), however often it is read */
	uint64_t verify_failures;
	/* log reads that failed with an I/O error: a SIGBUS caught in a
	 * mapped read, or an error from the read backend (not content
	 * mismatches: those are verify_failures); a chunk copy that cannot
	 * be read is counted once per open, like a damaged one */
	uint64_t read_errors;
	uint64_t flushes, fsyncs;
	uint64_t replayed_records, truncated_bytes;
	uint64_t deletes, copies;
	/* garbage collection: reclaimable_bytes is the last estimate (dead
	 * chunk and journal bytes in closed segments, of closed_bytes);
	 * the rest count blocker_gc() work since open */
	uint64_t reclaimable_bytes, closed_bytes;
	uint64_t gc_runs, gc_segments_examined, gc_segments_removed;
	uint64_t gc_bytes_copied, gc_bytes_reclaimed, gc_failures;
	/* segments GC sealed early on a full disk to take their dead bytes
	 * (docs/blocker.md "Full disk"); the store's log segment size */
	uint64_t gc_segments_sealed, segment_size;
	/* DIR/reserve: bytes allocated now, and what it should hold (0:
	 * none; it follows the maps and index unless set) */
	uint64_t reserve_bytes, reserve_target;
	uint32_t chunk_size;
	int degraded_errno; /* 0 when healthy */
	char degraded_reason[160];
};

int blocker_get_stats(struct blocker_store *s, struct blocker_stats *st);

/*
 * Garbage collection (docs/blocker.md, "Space reclamation").
 *
 * A chunk is live iff some object's map references its score. A pass
 * marks the live scores (a set of 40-bit score prefixes built from all
 * maps with mutating calls excluded for the length of the walk: a prefix
 * collision only keeps a dead chunk), picks closed segments (never the
 * one being appended to) whose dead share is at least min_dead_pct,
 * best first, and for each: copies its live chunk records to the log head
 * (each payload re-hashed first: a record that fails is never copied, the
 * segment is kept and the pass fails with -EIO), fsyncs, repoints the
 * index, writes a checkpoint, records the segment as removed in DIR/gc
 * and only then deletes its file. A crash anywhere in between leaves a
 * store that opens with nothing lost.
 *
 * Concurrency: runs alongside reads, writes, deletes and copies from
 * other threads; one pass at a time (a second caller waits). Writes that
 * would dedup against a chunk in a victim segment store it afresh.
 *
 * Full disk: runs in a store degraded by ENOSPC (not by other errors),
 * releasing DIR/reserve for its copies and checkpoint and taking only
 * victims with dead >= live bytes, copying at most half the reserve; in a
 * healthy store a checkpoint or DIR/gc write that meets ENOSPC releases
 * the reserve and is tried once more. After a pass that removed segments
 * the reserve is allocated again, and then a store degraded by ENOSPC
 * accepts writes again.
 *
 * Errors: the degraded errno (other than ENOSPC); -ENOSPC if the copies
 * do not fit (the store
 * is NOT degraded by a GC copy's ENOSPC: the victim is kept, and only the
 * victims fully copied before are completed); -EIO (a write or fsync
 * error, which degrades the store as any write error, or a record that
 * fails verification, which does not); -ECANCELED if the store is being
 * closed. The report (optional) is filled in any case.
 */
struct blocker_gc_opts {
	unsigned min_dead_pct; /* victims: dead share >= this (0: any dead) */
	uint32_t max_segments; /* victims per pass; 0: no limit */
	uint64_t rate_bytes;   /* copy rate limit in bytes/s; 0: none */
};
void blocker_gc_opts_init(struct blocker_gc_opts *g); /* 0%, all, none */

struct blocker_gc_report {
	uint64_t segments_examined; /* candidates whose live bytes were known */
	uint64_t segments_removed;
	uint64_t bytes_examined;     /* bytes of victim segments scanned */
	uint64_t bytes_copied;	     /* live record bytes appended */
	uint64_t bytes_reclaimed;    /* file bytes of removed segments */
	uint64_t reclaimable_before; /* the mark's estimate */
};

int blocker_gc(struct blocker_store *s, const struct blocker_gc_opts *g,
	       struct blocker_gc_report *rep);

/*
 * Refresh the reclaimable estimate (blocker_stats.reclaimable_bytes): one
 * walk over all maps and the index, without excluding other calls.
 */
int blocker_gc_estimate(struct blocker_store *s, uint64_t *reclaimable,
			uint64_t *closed_bytes);

/*
 * Offline check of a store that is not open: verifies every record's
 * header checksum and score, every map reference (after replaying the
 * whole journal) and the checkpoint files. Each problem is passed to
 * report (one line, naming file and offset or object). *problems gets
 * their count. Holds DIR/lock shared while it runs (an open gets -EBUSY);
 * a store held open is reported as a problem ("in use"), without open's
 * verdict, its other lines possibly stale. Returns 0 if the check ran (even
 * with problems), or a negative errno if it could not run.
 */
int blocker_check(const char *dir, const struct blocker_opts *o,
		  void (*report)(void *arg, const char *line), void *arg,
		  uint64_t *problems);

#endif
