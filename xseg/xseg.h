/* SPDX-License-Identifier: MIT */
#ifndef XSEG_H
#define XSEG_H
/*
 * libxseg: the shared-memory segment through which peer processes exchange
 * requests. docs/protocol.md describes the layout and the protocol in full;
 * this header is the contract of every call.
 *
 * Model
 * - A segment is a named POSIX shared memory object (mode 0600) holding a
 *   header, a table of ports, a pool of requests and a heap of data
 *   buffers. Everything inside refers to everything else by 64-bit offsets
 *   from the segment base, so every process maps it at any address.
 * - A process opens a segment with xseg_create or xseg_join and gets a
 *   process-local handle (struct xseg). One handle may be shared by all
 *   threads of the process; every call below is thread-safe unless it says
 *   otherwise. A handle is not meant to cross fork(): the child should
 *   xseg_join on its own (the fast paths identify "this process" by an
 *   identity cached in the handle, which only bind, alloc and reap
 *   refresh).
 * - A port is a mailbox owned by one process: a request queue (requests
 *   addressed to it), a reply queue (answers to requests it sent) and a free
 *   queue (a small cache of free requests for that port, so get/put rarely
 *   touch the shared pool). Ports 0 .. nr_static_ports-1 are bound by number
 *   (xseg_bind_port); the next nr_dynamic_ports are handed out at run time
 *   (xseg_alloc_port).
 * - A request lives in the segment's pool and is named by its index. At any
 *   moment exactly one port "holds" it (req->holder): the client between get
 *   and submit and again after the reply, the serving port while it is queued
 *   or accepted there. Only the holder's process touches the request's
 *   payload; the queues hand it over with release/acquire ordering, so
 *   whatever the sender wrote before submit/respond/forward is visible to
 *   the receiver after accept/receive.
 *
 * Life of a request
 *   client: xseg_get_request -> xseg_prep_request -> fill op/offset/target/
 *           data -> xseg_submit(dst)
 *   server: xseg_accept (validates) -> ... -> xseg_respond(error)
 *           (or xseg_forward to pass it on, keeping the original source)
 *   client: xseg_receive / xseg_wait_reply -> read result -> xseg_put_request
 *           (or prep and submit the same request again)
 *
 * Fast path: get, prep (when the buffer is big enough), submit, accept,
 * respond, forward, receive and put take no lock and make no syscall, except
 * a FUTEX_WAKE when the other side is registered as sleeping.
 *
 * Errors: functions return 0 (or a count) on success and a negative errno on
 * failure; on failure nothing was changed unless the function says so. A
 * request carries a positive errno in req->error when it failed.
 *
 * Robustness: a port's owner is identified by pid + process start time, so a
 * dead owner is detected even if its pid was recycled. xseg_reap reclaims
 * ports of dead owners and fails the requests they held back to their
 * senders with ECONNRESET. See xseg_reap for the exact rules.
 *
 * Changes after the first published version are marked "API change:" below.
 * API change (layout only, source compatible): the fields of struct
 * xseg_request were reordered so that line 0 carries everything a server
 * touches (data_off/data_cap moved up, serviced/index/src_gen down); the
 * layout version stays 1 as no segment outlives a build yet.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define XSEG_MAGIC 0x3147455358435241ULL /* "ARCXSEG1", little endian */
#define XSEG_VERSION                                                           \
	7 /* 2: per-port statistics area; 3: request                           \
	     mover, port signal/wake counters; 4: 64 statistics;               \
	     5: unflushed count per port, write-back loss counter;             \
	     6: xheap 2, a coalescing heap with a robust mutex;                \
	     7: request sent_op, written by every submit,                      \
	     in line 2 (the target moved to offset 144) */
#define XSEG_MAX_TARGETLEN 255
#define XSEG_PEER_TYPE_LEN 32 /* including the terminating NUL */
#define XSEG_NOPORT	   UINT32_MAX
#define XSEG_NOMOVER	   UINT16_MAX /* ports are 0 .. 65534 */
#define XSEG_WAIT_FOREVER  UINT64_MAX
#define XSEG_ERRBUF_LEN	   256 /* enough for any message of create/join */
/* The largest request pool xseg_create takes (struct xseg_config
 * nr_requests; the stack config checks its key against it). */
#define XSEG_MAX_REQUESTS (1u << 30)

/* ------------------------------------------------------------------------
 * Operations, flags, states
 */

enum xseg_op {
	XSEG_OP_NONE = 0, /* never valid: a zeroed request fails validation */
	XSEG_OP_READ,	  /* read size bytes at offset of target into data */
	XSEG_OP_WRITE,	  /* write size bytes of data at offset of target */
	XSEG_OP_FLUSH,	  /* every write completed before is durable when
			     this completes; targetlen may be 0 (all) */
	XSEG_OP_DELETE,	  /* remove target */
	XSEG_OP_INFO,	  /* data receives struct xseg_reply_info */
	XSEG_OP_COPY,	  /* data holds struct xseg_request_copy: clone its
			     src_target into target */
	XSEG_OP_HASH,	  /* data receives struct xseg_reply_hash */
	XSEG_OP_PING,	  /* no-op round trip; targetlen may be 0 */
	XSEG_OP_COUNT
};

/* Flags in req->flags. Bits 0..15 are defined here and validated (an unknown
 * bit in that range fails the request with EINVAL); bits 16..31 belong to
 * peers (XSEG_F_PEER_MASK) and are passed through unchecked. */
#define XSEG_F_FUA	 (1u << 0) /* WRITE: durable on completion */
#define XSEG_F_NOCACHE	 (1u << 1) /* caches pass the request through */
#define XSEG_F_KNOWN	 (XSEG_F_FUA | XSEG_F_NOCACHE)
#define XSEG_F_PEER_MASK 0xffff0000u

enum xseg_req_state {
	XSEG_RS_FREE = 0,  /* in the pool or a port's free queue */
	XSEG_RS_ALLOCATED, /* returned by xseg_get_request */
	XSEG_RS_PREPARED,  /* after xseg_prep_request */
	XSEG_RS_SUBMITTED, /* on a request queue (submit or forward) */
	XSEG_RS_ACCEPTED,  /* taken by the serving peer */
	XSEG_RS_SERVED,	   /* answered successfully, on the reply queue */
	XSEG_RS_FAILED,	   /* answered with req->error, on the reply queue */
	XSEG_RS_RECEIVED,  /* taken by the client from its reply queue;
			      req->error tells served (0) from failed */
	XSEG_RS_ANSWERING, /* (lib, transient) the holder won the right to
			      answer or forward it and is writing the
			      result; nobody else may touch it */
};

/* Payload conventions of the ops whose data is structured. Validation checks
 * that the data buffer is large enough for them (data_cap >= sizeof). */
struct xseg_reply_info {
	uint64_t size; /* object size in bytes */
};

struct xseg_request_copy {
	uint32_t src_targetlen; /* 1 .. XSEG_MAX_TARGETLEN */
	char src_target[XSEG_MAX_TARGETLEN + 1];
};

struct xseg_reply_hash {
	uint32_t len; /* bytes used in hash (32 for SHA-256) */
	uint8_t hash[64];
};

/* ------------------------------------------------------------------------
 * Requests
 *
 * The structure is public so peers read and write its fields directly; it
 * is 64-byte aligned in the pool. Fields marked (lib) are maintained by the
 * library and must not be written by callers; the others belong to whoever
 * holds the request (client before submit, server between accept and
 * respond). state and holder are accessed with __atomic builtins by the
 * library; read them with __atomic_load_n if you look at a request you do
 * not hold.
 */
struct xseg_request {
	/* cache line 0: the hand-over line. Everything a server needs to
	 * accept, validate and answer a request, so that a round trip moves
	 * this one line each way (plus line 1 only if the server sets
	 * serviced or timestamps, and the target lines if it reads them). */
	/* state, hseq, mover and holder form one 64-bit word, changed only
	 * as a whole (compare-and-swap from the expected value), so that a
	 * reaper never sees a new holder with an old state or the reverse.
	 * Read them with atomics; never write them. mover names the port
	 * whose process is publishing a hand-over (submit, forward,
	 * respond, fail-back) between its store and its enqueue, so that
	 * the reap of a mover killed there finds the request (see
	 * xseg_reap); hseq counts hand-overs (mod 256) so that the mover's
	 * clearing CAS cannot hit a later hand-over's word. API change
	 * (layout version 3): state shrank from 32 to 8 bits. */
	union {
		struct {
			uint8_t state;	 /* (lib) enum xseg_req_state */
			uint8_t hseq;	 /* (lib) hand-over count */
			uint16_t mover;	 /* (lib) port or XSEG_NOMOVER */
			uint32_t holder; /* (lib) port that must act on it */
		};
		uint64_t state_holder; /* (lib) all four, atomically */
	};
	uint32_t src;		/* (lib) port that got and submitted it */
	uint32_t dst;		/* (lib) port it was addressed to */
	uint32_t effective_dst; /* (lib) port it was delivered to last
				   (after redirect / forward) */
	uint16_t op;		/* enum xseg_op */
	uint16_t targetlen;	/* bytes of target used, no NUL needed */
	uint32_t flags;		/* XSEG_F_* */
	int32_t error;		/* positive errno when failed, else 0 */
	uint64_t offset;	/* byte offset in the target */
	uint64_t size;		/* bytes to transfer (READ/WRITE) */
	uint64_t data_off;	/* (lib) segment offset of the data buffer, 0 =
				   none; use xseg_request_data() */
	uint64_t data_cap;	/* (lib) usable bytes of the data buffer */

	/* cache line 1: result size, id, timestamps, client word */
	uint64_t serviced;     /* bytes transferred, set by the server */
	uint64_t id;	       /* (lib) unique id, assigned by submit */
	uint32_t index;	       /* (lib) own index in the pool */
	uint32_t src_gen;      /* (lib) generation of src when submitted;
				  a stale reply is dropped, see xseg_reap */
	uint64_t ts_submitted; /* (lib) CLOCK_MONOTONIC ns, see */
	uint64_t ts_accepted;  /* xseg_set_timestamps; left alone when off */
	uint64_t ts_responded;
	uint64_t ts_received;
	uint64_t user; /* client's word, untouched by the library and
			  by servers (e.g. a pointer to its context) */

	/* cache lines 2..6: serving peer's word, sent_op and the target */
	uint64_t peer_priv; /* serving peer's word; may be overwritten by
			       each peer the request passes through */
	/* (lib) op as the request's latest submit sent it: stored by
	 * submit (a relaxed atomic store), read by the pool scans of other
	 * threads and processes (a reclaim's drain, the successor's fence:
	 * does a held request change data?). They must not read op: its
	 * holder writes op with plain stores (a client reusing the request,
	 * a server between accept and respond), a data race with a scan in
	 * the same process (review23y F2). Next to peer_priv, in line 2,
	 * which get and prep already write: the submit's store touches no
	 * line a round trip does not (review R2 of fence24). API change
	 * (layout version 7): target moved from offset 136 to 144; the
	 * request did not grow. */
	uint16_t sent_op;
	uint16_t pad_sent_op[3]; /* target at a multiple of 8, as before */
	char target[XSEG_MAX_TARGETLEN + 1];
} __attribute__((aligned(64)));

/* ------------------------------------------------------------------------
 * Segment
 */

struct xseg; /* process-local handle, opaque */

/* Configuration, fixed at creation and recorded in the segment header. */
struct xseg_config {
	uint64_t size;		    /* total bytes of the segment; may exceed
				       4 GiB (the shm object is sparse) */
	uint32_t nr_static_ports;   /* ports 0 .. nr_static_ports-1 */
	uint32_t nr_dynamic_ports;  /* the next nr_dynamic_ports ports */
	uint32_t nr_requests;	    /* request pool size, 2 ..
				       XSEG_MAX_REQUESTS */
	uint32_t free_cache;	    /* capacity of each port's free queue, a
				       power of two >= 2, or 0 to disable the
				       per-port cache */
	uint64_t default_data_size; /* minimum data buffer a prep allocates;
				       buffers up to this size stay attached
				       to a request across put/get, larger
				       ones are freed by put */
	uint32_t max_targetlen;	    /* read-only: XSEG_MAX_TARGETLEN */
	uint32_t queue_capacity;    /* read-only: request and reply queue
				       capacity: twice nr_requests rounded
				       up to a power of two, so stale and
				       duplicate indexes never fill one */
};

/* Fill cfg with defaults: 64 MiB, 16 static + 48 dynamic ports, 4096
 * requests, free cache 64, default data 4 KiB. */
void xseg_config_default(struct xseg_config *cfg);

/* Create segment name ("/name" or "name"; at most 250 characters, no '/'
 * after the first) with shm_open(O_CREAT|O_EXCL, 0600), size it, initialise
 * it and return a handle in *segp. errbuf (may be NULL) receives a
 * one-line message on failure, naming the segment.
 * Errors: -EINVAL (bad name or configuration: sizes that do not fit,
 * zero or more than 65535 ports, too few requests), -EFBIG (cfg->size above
 * xseg_max_size: the data heap could not use all of it; nothing is
 * created), -EEXIST (the name exists), -ENOMEM, or the errno of
 * shm_open/ftruncate/mmap. On failure nothing is left behind (the shm
 * object is unlinked). */
int xseg_create(const char *name, const struct xseg_config *cfg,
		struct xseg **segp, char *errbuf, size_t errlen);

/* Map an existing segment and verify it before use.
 * Errors: -ENOENT (no such segment), -EPROTO (bad magic, other layout
 * version, structure sizes of another build, header checksum mismatch),
 * -EINVAL (header internally inconsistent, or the shm object's size differs
 * from the size in the header), or the errno of shm_open/mmap. errbuf gets
 * a message naming the segment and the check that failed. */
int xseg_join(const char *name, struct xseg **segp, char *errbuf,
	      size_t errlen);

/* Unmap and free the handle. Ports this process still owns are NOT
 * released (release them first); they are reclaimed by xseg_reap once the
 * process has exited. Not thread-safe against other calls on the handle. */
void xseg_leave(struct xseg *seg);

/* Unlink segment name. Processes that have it mapped keep using it until
 * they leave. Returns 0, -ENOENT or another errno of shm_unlink. */
int xseg_destroy(const char *name);

/* The smallest cfg->size xseg_create takes with cfg's other fields (the
 * header, ports, queues and request pool, then a data heap of one page),
 * whatever cfg->size holds; 0 when those other fields are out of bounds.
 * For a launcher that checks a configured size before it destroys or
 * creates anything, and says what the size must be. */
uint64_t xseg_min_size(const struct xseg_config *cfg);

/* Sizing the data heap for a peer's fixed reservation before anything
 * starts (the stack launcher: cached's requests to the store, vlmc's
 * first read of its volume table). xseg_heap_bytes_for: the heap bytes
 * that xseg_prep_request(datalen) allocates for a request that holds no
 * buffer (at least cfg->default_data_size, plus xheap's header); 0 for
 * datalen 0 (nothing is allocated) and for a datalen no heap serves.
 * xseg_min_size_for_data: the smallest cfg->size xseg_create takes with
 * cfg's other fields (at least xseg_min_size, a page multiple) whose new
 * data heap, used by nothing else, holds buffers whose
 * xseg_heap_bytes_for add up to heap_bytes; whatever cfg->size holds; 0
 * when cfg's other fields are out of bounds or no heap holds that much. */
uint64_t xseg_heap_bytes_for(const struct xseg_config *cfg, uint64_t datalen);
uint64_t xseg_min_size_for_data(const struct xseg_config *cfg,
				uint64_t heap_bytes);

/* The largest cfg->size whose every byte xseg_create's data heap can use
 * (xheap's XHEAP_MAX_SIZE, 256 GiB - 64 B, after the fixed parts that
 * xseg_min_size counts, rounded down to a page); whatever cfg->size holds,
 * 0 when the other fields are out of bounds. xseg_create refuses a larger
 * size (-EFBIG) rather than leave the rest of the segment unused. */
uint64_t xseg_max_size(const struct xseg_config *cfg);

/* The configuration recorded in the header. */
void xseg_get_config(const struct xseg *seg, struct xseg_config *cfg);

/* "/name" as opened. */
const char *xseg_name(const struct xseg *seg);

/* Segment-wide numbers (for xsegctl and benchmarks); a snapshot. */
struct xseg_info {
	struct xseg_config cfg;
	uint32_t version;
	uint64_t nonce;		 /* random, chosen at creation */
	uint32_t nr_ports;	 /* static + dynamic */
	uint32_t free_requests;	 /* in the global pool (not counting the
				    per-port free caches) */
	uint64_t heap_bytes;	 /* data heap arena */
	uint64_t heap_allocated; /* bytes in allocated buffers */
	uint64_t heap_carved;	 /* bytes ever taken from the arena */
	/* API addition (layout 5): xseg_writeback_losses() at the time of
	 * the call */
	uint64_t writeback_losses;
};
void xseg_info(const struct xseg *seg, struct xseg_info *info);

/* Current CLOCK_MONOTONIC time in ns (vDSO, no syscall). */
uint64_t xseg_now_ns(void);

/* The fields of /proc/PID/stat that xseg and its tools use (numbered as
 * in proc(5)). */
struct xseg_proc_stat {
	char state;	     /* 3: R, S, D, Z (zombie), X (dead)... */
	uint64_t utime;	     /* 14: user CPU time, clock ticks */
	uint64_t stime;	     /* 15: system CPU time, clock ticks */
	int num_threads;     /* 20: threads not yet exited */
	uint64_t start_time; /* 22: clock ticks after boot */
};

/* Whether a process whose /proc/PID/stat reads ps has exited: its
 * thread-group leader is a zombie (or dead) and no other thread is left.
 * A zombie leader with threads left is still running them, or they still
 * finish a system call (safety20 N1). The one rule of xseg's reaper and
 * xsegctl's stack and supervisor. */
static inline bool xseg_proc_exited(const struct xseg_proc_stat *ps)
{
	return (ps->state == 'Z' || ps->state == 'X') && ps->num_threads <= 1;
}
/*
 * Read pid's /proc/PID/stat into *ps: the one parser of that file. The
 * command name (field 2) is in parentheses and may itself hold blanks
 * and ')' (a process names itself as it likes, prctl PR_SET_NAME): the
 * fields are read after the LAST ')' of the line, never by counting
 * blanks from its start. Returns 0; -ESRCH only when the process does
 * not exist (no such file, as also without /proc, or nothing read: it
 * exited between the open and the read); -EIO when the line does not
 * parse; any other negative errno (EMFILE, EACCES...) means "could not
 * tell", never "gone". A zombie has a stat: state 'Z'. Reentrant; one
 * open and one read, no allocation.
 */
int xseg_proc_stat_read(pid_t pid, struct xseg_proc_stat *ps);

/* ------------------------------------------------------------------------
 * Ports
 */

uint32_t xseg_nr_ports(const struct xseg *seg); /* static + dynamic */

/* Bind static port (0 .. nr_static_ports-1) to this process as peer_type
 * (copied, truncated to XSEG_PEER_TYPE_LEN-1). If the port's previous owner
 * is dead it is reclaimed first (see xseg_reap), so a restarted peer simply
 * binds again. The port gets a new generation: replies still in flight to
 * the previous owner are dropped, never delivered to the new one.
 * Errors: -EINVAL (not a static port, NULL peer_type), -EBUSY (a live
 * process owns it, or another process is reclaiming it right now: retry),
 * -EALREADY (this process already owns it), -EAGAIN (draining, below).
 *
 * Draining (review9 R9-7 part 2): a port whose previous owner died (or
 * released it) while other ports had accepted requests it sent and not
 * answered them is not given to a new owner until no live process holds
 * such a request any more: one of those could be a write, and running it
 * after a write that the restarted peer (or a client it failed back to)
 * made since would put older data over newer. Bind waits for that up to
 * a second, then fails with -EAGAIN (port left free, nothing else
 * changed): the caller retries for as long as it wants to start; a line
 * to stderr names a holding port at most every 5 s per handle. A holder
 * that never answers blocks the bind for ever: the price of never
 * reordering a write. Holders that die do not count (their reap fails the
 * request back). Late answers to the previous owner are dropped, never
 * delivered to the new one. A port with nothing outstanding (the usual
 * case) binds at once, as before; the check costs one pass over the
 * request pool only when the port is flagged draining.
 *
 * The successor's fence (session 23): a process's requests may come from
 * several ports (vlmc: its static port, a dynamic control port, one per
 * NBD connection), and its successor gets fresh dynamic ports. So when
 * the port's latest owner is another process that no longer owns it, the
 * bind first, holding nothing, reclaims every other port that process
 * still owns if it is dead (their queued requests are then dropped at
 * accept, as above) and waits up to a second, with the same -EAGAIN,
 * until no live port holds a request sent from any port whose latest
 * owner was that process and which is released or reclaimed (draining).
 * A live predecessor counts too: a peer stopping has released its ports
 * before its exit, while its successor may already be starting; ports it
 * still owns are not waited for. Each port of it that another live
 * process is reclaiming or binding is waited for too (up to a second
 * each), so a bind can take a few seconds before it answers -EAGAIN.
 * Costs a liveness check of the previous owner at every bind that has
 * one, one pass over the port table, and one pool pass (for all its
 * draining ports together) at each look while it waits. Not applied when the
 * latest owner is unknown (a port a build before this one bound and nobody
 * reclaimed since), nor by xseg_alloc_port (a dynamic port names no successor).
 *
 * Only requests that change stored data fence a bind, here and in the
 * drain above: WRITE, DELETE, COPY (and any unknown op). A READ, INFO,
 * HASH, PING or FLUSH run late changes nothing that a newer request
 * wrote, and one a store never answers must not keep a restarted peer
 * out (review23x F3).
 *
 * API change: a bind can now return -EAGAIN for requests of its
 * predecessor's other ports. */
int xseg_bind_port(struct xseg *seg, uint32_t port, const char *peer_type);

/* Allocate a free (or dead-owned, reclaimed first) dynamic port for this
 * process. Lock-free: one CAS on the port's owner word; safe against other
 * processes allocating, releasing and serving at the same time.
 * A dynamic port that is draining (see xseg_bind_port) is skipped, not
 * waited for. Errors: -EINVAL (NULL args), -ENOSPC (all dynamic ports are
 * owned by live processes), -EAGAIN (none free, but at least one was
 * skipped as draining: retry later). */
int xseg_alloc_port(struct xseg *seg, const char *peer_type, uint32_t *port);

/* Give up a port this process owns (static or dynamic). The caller must
 * have stopped all use of the port first (no thread in accept/wait/respond
 * on it). What is left is cleaned up as for a dead owner: requests still on
 * its request queue and requests it accepted but did not answer are failed
 * back to their senders with ECONNRESET; replies on its reply queue and
 * requests it still holds are returned to the pool; its free queue is
 * emptied; its redirect (path_next) is kept, counters are kept. A nonzero
 * unflushed count (xseg_port_unflushed_add) is a write-back loss like a
 * death's: counted and logged first (see "Write-back losses"). Requests
 * the port sent that other ports accepted and have not answered are left
 * to them (their answers are dropped) and the port drains: the next bind
 * waits for them (see xseg_bind_port).
 * Errors: -EINVAL (no such port), -EPERM (not owned by this process). */
int xseg_release_port(struct xseg *seg, uint32_t port);

/* 1 if the port has an owner that is alive (pid exists, is not a zombie
 * whose threads have all exited, and its start time matches) and ready (not in
 * the middle of a bind or reclaim), 0 if it is free, being bound or reclaimed,
 * or its owner is dead, -EINVAL for a bad port. Reads /proc: not for a fast
 * path. */
int xseg_port_alive(struct xseg *seg, uint32_t port);

/* Redirect new requests submitted to port to next (routing: e.g. plug a
 * cache in front of a store). Takes effect for every submit that starts
 * after the call returns; a submit running concurrently goes to either the
 * old or the new target, exactly once. Requests already queued stay where
 * they are. Redirects are not followed transitively and do not apply to
 * xseg_forward. If port was redirected to another port whose owner is
 * dead, that port is reclaimed first (as xseg_clear_path_next), so a
 * write-back loss it held is counted before it leaves the path. Errors:
 * -EINVAL (bad port or next, or next == port); -EXDEV (next is a cache,
 * xseg_port_mark_cache, whose owner is alive, this process or another,
 * and that does not serve port's path: it published another next port,
 * or none, a cache of an older build that cannot be checked; a cache
 * fetches from and writes to its own next port whatever the request's
 * destination, review20 F1-J; xseg_port_info's cache_next names the port
 * it serves); then as xseg_clear_path_next, with the old redirect kept. */
int xseg_set_path_next(struct xseg *seg, uint32_t port, uint32_t next);
/* Remove port's redirect. If the port it redirects to is owned by a dead
 * process (proof, as xseg_reap) that port is reclaimed first, so a
 * write-back loss it held is counted (xseg_writeback_losses) before a
 * request can bypass it; if another process is reclaiming it, waits up to
 * a second for that to end. Errors, with the redirect kept: -EINVAL (bad
 * port); -EBUSY (the target is still being reclaimed by another process
 * after a second: retry; or it is alive and still holds unflushed data:
 * its owner must flush first, review10 F2); -EPERM (the target is a
 * cache, xseg_port_mark_cache, whose owner is alive and not this process:
 * only the cache takes itself out of the path, safety20 F1; checked
 * before its unflushed data, so a cache gets -EPERM dirty or clean,
 * review20 F1-I); -EAGAIN (the
 * target is free or
 * dead and requests it sent are still accepted and unanswered at other
 * live ports after a second of waiting: they may still run, and a request
 * bypassing the target now could run before them, review14 F1; logged at
 * most once per 5 s; retry; also when, during that wait, the target was
 * bound again or another process changed the redirect: the change is
 * made only from the redirect examined, by CAS, so it never undoes a
 * re-plug it did not look at; and when a target examined, old or new,
 * was bound, released, reclaimed or marked a cache between its
 * examination and that CAS, review20 F1-F: they are read again just
 * before it); what xseg_reap returns when this process has no identity
 * (e.g. -EMFILE). Reads /proc and scans the request pool: not for a fast
 * path. */
int xseg_clear_path_next(struct xseg *seg, uint32_t port);
/* Declare port, bound by this process, a cache: a peer that keeps data of
 * the path it is redirected into (cached), the path of port next (the port
 * it fetches from and writes back to). Until the port is bound, released
 * or reclaimed again (the mark is the port's generation), while this
 * process lives, no other process can take it out of a path
 * (xseg_clear_path_next, or xseg_set_path_next replacing it: -EPERM): it
 * would not know, and would keep serving data that writes bypassing it
 * made stale once redirected to again, and a write it held could land
 * over a newer one. Nor can any process put it into another port's path
 * (xseg_set_path_next(seg, q, port) with q != next: -EXDEV). The owner
 * leaves by itself (cached's unplug: it flushes, then clears the
 * redirect); a dead owner is reclaimed as always. Errors: -EINVAL (bad
 * port or next, or next == port), -EPERM (not bound by this process: also
 * in a child forked by the process that bound it, and for a free port),
 * what xseg_bind_port returns when this process has no identity
 * (/proc/self/stat unreadable, e.g. -EMFILE). */
int xseg_port_mark_cache(struct xseg *seg, uint32_t port, uint32_t next);
/* The current redirect of port, or XSEG_NOPORT (also for a bad port). */
uint32_t xseg_get_path_next(const struct xseg *seg, uint32_t port);

/* Per-port snapshot for xsegctl and statistics. Counters are maintained by
 * the port's own process with relaxed atomics, so the snapshot is exact only
 * when the port is quiet. */
struct xseg_port_info {
	uint32_t port;
	bool dynamic;	 /* in the dynamic range */
	bool bound;	 /* has an owner (live or dead) */
	bool alive;	 /* owner alive (as xseg_port_alive) */
	bool reclaiming; /* a reaper or binder is cleaning it up */
	/* API addition: alive only through threads left after its leader
	 * exited (a zombie leader; the threads still run, are stuck in the
	 * kernel or stopped by a tracer): the port stays the owner's until
	 * they end, and requests to it wait (review20 N1-B) */
	bool exiting;
	pid_t owner_pid;
	uint32_t owner_start; /* low 32 bits of the owner's start time
				 (clock ticks since boot, /proc stat 22) */
	uint32_t generation;  /* changes at every bind and reclaim */
	uint32_t path_next;   /* XSEG_NOPORT if none */
	/* API addition: marked a cache by its current owner
	 * (xseg_port_mark_cache), and the port whose path it serves, or
	 * XSEG_NOPORT if it did not say (an older build) or is no cache */
	bool cache;
	uint32_t cache_next;
	char peer_type[XSEG_PEER_TYPE_LEN];
	/* as a client */
	uint64_t sent;	   /* requests submitted from this port */
	uint64_t received; /* replies taken from its reply queue */
	/* as a server */
	uint64_t accepted;  /* valid requests handed to the peer */
	uint64_t served;    /* answered with error 0 */
	uint64_t failed;    /* accepted, then answered with an error (so
			       accepted - served - failed - forwarded is
			       what the port holds; API change: rejected
			       ones no longer count here) */
	uint64_t rejected;  /* failed by validation in accept, dropped by
			       accept because their sender's port was
			       reclaimed since, or dropped because they
			       could not be answered */
	uint64_t forwarded; /* passed on with xseg_forward */
	uint64_t reaped;    /* requests failed back by reclaims of it */
	/* signaling of this port (API change: added in version 3); any
	 * process's signals count, so these are exact at any time */
	uint64_t signals;  /* xseg_signal calls for it (submits, responds,
			      forwards to it, flushed batches), modulo 2^32 */
	uint64_t wakes;	   /* FUTEX_WAKE syscalls made for it (a signal that
			      found a sleeper registered, and kicks) */
	uint32_t sleepers; /* threads registered asleep right now */
	/* queue depths (xq_count snapshots) */
	uint64_t request_depth;
	uint64_t reply_depth;
	uint64_t free_depth;
	/* API addition (layout 5): the port's unflushed count
	 * (xseg_port_unflushed_add), seq_cst load */
	uint64_t unflushed;
	/* API addition: the last reclaim or release of the port found
	 * requests its owner had sent still accepted by other ports; the
	 * next bind waits for them (see xseg_bind_port). Cleared by the
	 * bind that finds none left. */
	bool draining;
	/* API addition: the port's latest owner, recorded at every bind
	 * and by the reclaim of a dead owner, and kept after a release or
	 * a death. For a free or draining port: the process whose held
	 * requests the next bind of a static port it owned waits for
	 * (xseg_bind_port, "The successor's fence"). pid 0: never bound
	 * since the segment was made (every build that can join a layout 7
	 * segment records it).
	 * alive as xseg_port_alive judges an owner (false when unknown). */
	pid_t last_owner_pid;
	uint32_t last_owner_start;
	bool last_owner_alive;
};
int xseg_port_info(struct xseg *seg, uint32_t port,
		   struct xseg_port_info *info);

/* ------------------------------------------------------------------------
 * Per-port statistics area
 *
 * Every port has, in the segment, a table of up to XSEG_STATS_MAX named
 * 64-bit counters. Its owner publishes it (the peer framework: every
 * second and on SIGUSR1); anyone who joined the segment reads it without
 * disturbing the owner (xsegctl stats). It is not cleared when the owner
 * dies or releases the port: the last numbers stay readable, with the
 * time they were published, until the next owner publishes.
 *
 * Memory ordering: the area holds two copies and a publish count. A
 * publish writes the copy the count does not name, then stores count + 1
 * with release; a reader loads the count with acquire, copies the named
 * copy and checks the count did not move (else it retries). So a reader
 * never returns a half-written table, and a publisher killed mid-way
 * leaves the previous table readable. API change: added in layout
 * version 2 (struct xseg_port grew by the area); 64 entries instead of 40
 * since layout version 4 (the blocker's own table and the framework's
 * filled 40, and the spin counters were left out).
 */
#define XSEG_STATS_MAX	   64
#define XSEG_STAT_NAME_LEN 24 /* including the terminating NUL */

struct xseg_stat {
	char name[XSEG_STAT_NAME_LEN]; /* 1..23 chars, [A-Za-z0-9_.-] */
	uint64_t value;
};

struct xseg_port_stats {
	uint32_t nr;	     /* valid entries of stats[] */
	int32_t pid;	     /* process that published */
	uint32_t generation; /* port generation at publication */
	uint32_t reserved;
	uint64_t published_ns; /* CLOCK_MONOTONIC (system-wide) */
	uint64_t count;	       /* publications since the segment's creation */
	struct xseg_stat stats[XSEG_STATS_MAX];
};

/* Publish nr counters for port, which this process must own. Not
 * thread-safe for one port: one publisher thread (or a lock) per port.
 * Wait-free, no syscall except the clock. Errors, with nothing changed:
 * -EINVAL (bad port, NULL stats with nr > 0, nr > XSEG_STATS_MAX, a name
 * empty, not NUL-terminated within XSEG_STAT_NAME_LEN or with a character
 * outside [A-Za-z0-9_.-]), -EPERM (port not owned by this process). */
int xseg_port_stats_publish(struct xseg *seg, uint32_t port,
			    const struct xseg_stat *stats, uint32_t nr);

/* Read the last table published for port into *out (any process, any
 * thread, lock-free). Errors: -EINVAL (bad port, NULL out), -ENOENT
 * (nothing published since the segment was created), -EAGAIN (the owner
 * published continuously while we copied, 1000 times in a row), -EIO (the
 * area is corrupt: entry count out of range, or a name that the publisher
 * would have refused). */
int xseg_port_stats_read(struct xseg *seg, uint32_t port,
			 struct xseg_port_stats *out);

/* ------------------------------------------------------------------------
 * Request life cycle
 */

/* Take a free request for use by port (which this process must own): from
 * the port's free queue, else from the global pool. The request is
 * ALLOCATED, held by port, src = port, with no target and size 0; it keeps
 * any data buffer it had (capacity <= default_data_size).
 * Errors: -EINVAL (bad port, NULL reqp), -EPERM (port not owned by this
 * process), -ENOMEM (pool exhausted; nothing changed). */
int xseg_get_request(struct xseg *seg, uint32_t port,
		     struct xseg_request **reqp);

/* Prepare a request the caller holds (ALLOCATED, PREPARED or RECEIVED) for
 * a new operation: targetlen bytes of target, a data buffer of at least
 * datalen bytes (grown if needed: a new buffer of max(datalen,
 * default_data_size) rounded to a power of two; the old contents are not
 * kept). Resets op (NONE), flags, offset, serviced, error, peer_priv; sets
 * size = datalen. The caller then fills op, offset, target and data.
 * Errors: -EINVAL (targetlen > XSEG_MAX_TARGETLEN, wrong state), -ENOMEM
 * (heap exhausted; the request and its old buffer are unchanged). */
int xseg_prep_request(struct xseg *seg, struct xseg_request *req,
		      uint32_t targetlen, uint64_t datalen);

/* The target name (XSEG_MAX_TARGETLEN + 1 bytes, inline in the request). */
static inline char *xseg_request_target(struct xseg_request *req)
{
	return req->target;
}

/* The data buffer in this process's mapping, or NULL if the request has
 * none (data_off 0) or its buffer lies outside the data heap. */
void *xseg_request_data(const struct xseg *seg, const struct xseg_request *req);

/* The request with pool index idx in this mapping, or NULL if idx is out of
 * range. For tools; the caller must not assume it holds the request. */
struct xseg_request *xseg_request_at(const struct xseg *seg, uint32_t idx);

/* Send a request the caller holds (ALLOCATED, PREPARED or RECEIVED; src
 * must be a port this process owns) to port dst. If dst has a redirect
 * (path_next), the request goes to path_next instead; req->dst records dst,
 * req->effective_dst the port it went to. Assigns req->id and stamps
 * ts_submitted, then enqueues and signals the receiving port. No
 * validation of the payload happens here (the receiver validates).
 * Errors: -EINVAL (bad dst, request not held by a port of this process or
 * in a wrong state), -ENXIO (the receiving port has no owner, or is being
 * bound or reclaimed right now). On error the caller still holds the
 * request. */
int xseg_submit(struct xseg *seg, struct xseg_request *req, uint32_t dst);

/* Take the next request from port's request queue (non-blocking); the port
 * must be owned by this process. Each index taken from the queue is checked
 * (in range, SUBMITTED, delivered to this port) and the request validated
 * with xseg_validate_request: an invalid request is failed back to its
 * source with EINVAL/EOPNOTSUPP (or dropped if its source is invalid) and
 * counted in "rejected", and the next one is tried. Stamps ts_accepted
 * if the client stamped ts_submitted (see xseg_set_timestamps).
 * Returns 0 and the ACCEPTED request in *reqp, -EAGAIN if nothing valid is
 * queued, -EINVAL (bad port), -EPERM (port not owned by this process). */
int xseg_accept(struct xseg *seg, uint32_t port, struct xseg_request **reqp);

/* Take up to n valid requests at once (as xseg_accept). Returns how many
 * were stored in reqs (0 if none or on a bad/unowned port). */
unsigned xseg_accept_batch(struct xseg *seg, uint32_t port,
			   struct xseg_request **reqs, unsigned n);

/* How many requests are queued on port's request queue right now, not
 * yet accepted: a snapshot (xseg_port_info's request_depth without the
 * rest of that call, which also checks the owner's liveness), for a
 * server deciding whether more hands are needed. 0 for a bad port. Any
 * process joined to the segment; reads the queue with relaxed atomics. */
uint64_t xseg_requests_queued(struct xseg *seg, uint32_t port);

/* Answer an ACCEPTED request this process's port holds: error 0 = served,
 * a positive errno = failed. The request goes onto its source port's reply
 * queue and that port is signalled. If the source port has been released
 * or reclaimed since the request was submitted (generation changed) the
 * reply has nobody to go to: xseg_receive of the port's next owner returns
 * it to the pool, or xseg_reap does if the port stays free. (Checking here
 * would read a cache line the server otherwise never touches.)
 * Errors: -EINVAL (error < 0, request not ACCEPTED or not held by a port of
 * this process); -ESTALE (lost the race to xseg_release_port or a reaper,
 * which failed the request back already: the client has it, do not touch
 * it again); nothing changed then. -ENOSPC: the reply queue was full, which
 * needs more stray indexes on it than the pool has requests (queues have
 * twice the pool's room): only a corrupt segment; the request was returned
 * to the pool.
 * Ordering: one CAS (ACCEPTED -> ANSWERING), then a release store of the
 * answer (naming this port as mover), the enqueue, and a CAS that clears
 * the mover (see xseg_reap, step 5). A late completion racing a release must
 * not write the data buffer after the release: quiesce completers before
 * xseg_release_port. */
int xseg_respond(struct xseg *seg, struct xseg_request *req, int error);

/* Pass an ACCEPTED request on to port (e.g. a cache forwarding a miss to the
 * store behind it), keeping src and dst: the final server responds to the
 * original sender. No redirect is applied (forwarding to the request's
 * original dst therefore reaches that port even while it is redirected to
 * the forwarder). Errors: -EINVAL (bad port, port is the current holder,
 * wrong state, not held by this process), -ENXIO (port has no owner or is being
 * bound or reclaimed), -EAGAIN (the queue was full: only with a corrupt
 * segment); the caller still holds the request on these errors. -ESTALE:
 * lost the race to a release or reaper that failed it back (not held any
 * more). Forward it with the op it came with: the drain of its sender's
 * port and the successor's fence (xseg_bind_port) judge whether a held
 * request changes data by the op it was submitted with (sent_op); a
 * server that needs another op sends a request of its own. */
int xseg_forward(struct xseg *seg, struct xseg_request *req, uint32_t port);

/* Take the next reply from port's reply queue (non-blocking); the request
 * becomes RECEIVED, held by port; req->error is 0 (served) or the errno.
 * Indexes that fail the checks (out of range, not SERVED/FAILED, other
 * source) are dropped; stale replies addressed to a previous owner of the
 * port are returned to the pool. Stamps ts_received.
 * Returns 0, -EAGAIN (no reply), -EINVAL, -EPERM (not owner). */
int xseg_receive(struct xseg *seg, uint32_t port, struct xseg_request **reqp);

/* Take up to n replies at once; returns how many. */
unsigned xseg_receive_batch(struct xseg *seg, uint32_t port,
			    struct xseg_request **reqs, unsigned n);

/* Return a request the caller holds (any state but SUBMITTED, ACCEPTED,
 * SERVED/FAILED-not-yet-received and FREE) to the free queue of its source
 * port, or to the global pool if that is full or the port is not owned by
 * this process. A data buffer larger than default_data_size is freed.
 * Errors: -EINVAL (not a request of this segment, or in a state where it
 * belongs to someone else), -EALREADY (already free); nothing changed. */
int xseg_put_request(struct xseg *seg, struct xseg_request *req);

/* Check a request's fields before trusting them (xseg_accept calls it):
 * op in 1 .. XSEG_OP_COUNT-1 (else -EOPNOTSUPP); no unknown flag in bits
 * 0..15; targetlen 1 .. XSEG_MAX_TARGETLEN (0 allowed for PING and FLUSH);
 * offset + size does not overflow; a data buffer (data_off != 0) lies
 * entirely inside the data heap, is the start of a live heap buffer and
 * data_cap is at most that buffer's usable size; READ and
 * WRITE have size <= data_cap; INFO, COPY and HASH have a buffer of at least
 * the size of their payload struct (COPY: src_targetlen 1..255); src is a
 * valid port and dst a valid port or XSEG_NOPORT (not yet submitted). Returns
 * 0, -EINVAL or -EOPNOTSUPP. Pure: reads the request, changes nothing. */
int xseg_validate_request(const struct xseg *seg,
			  const struct xseg_request *req);

/* Set the per-handle option of stamping ts_* (default on; costs a vDSO
 * clock read per stage). A server stamps ts_accepted and ts_responded only
 * for a request whose client stamped ts_submitted (and ts_responded only
 * after a stamped accept), so a client that does not read the stages
 * (xseg_set_timestamps(seg, false)) costs the servers no clock reads.
 * Call before threads use the handle. */
void xseg_set_timestamps(struct xseg *seg, bool on);

/* ------------------------------------------------------------------------
 * Signaling
 *
 * Each port has one futex word in the segment (FUTEX_WAIT/FUTEX_WAKE, shared,
 * not PRIVATE) and a count of registered sleepers. submit/forward signal
 * the receiving port, respond signals the source port. A signal costs a
 * fence and a load; it bumps the word and issues FUTEX_WAKE (all waiters)
 * only if a sleeper is registered. A waiter registers, re-reads the word,
 * re-checks both queues, and only then sleeps on the value it read, so a
 * signal between the check and the sleep makes FUTEX_WAIT return at once:
 * no lost wake-ups.
 */

/* Spin (busy-poll the port's queues) for spin_ns before sleeping in
 * xseg_wait, xseg_wait_replies and xseg_wait_reply (a fixed spin at every
 * wait); 0 = sleep at once (default). The *_spin waits below use their
 * own adaptive state instead. Call before threads use the handle. */
void xseg_set_spin(struct xseg *seg, uint64_t spin_ns);

/*
 * Adaptive spinning (struct xseg_spin).
 *
 * A spin pays only when work comes within it: then the waiter saves a
 * sleep, a FUTEX_WAKE on the signaler's side and a wake-up; when it runs
 * out, it was pure cost, and on a machine with fewer cores than busy
 * processes it holds the core the process it waits for needs. An
 * xseg_spin remembers, for one waiting thread on one port, whether its
 * recent spins caught work, and lets a wait spin only while they do:
 *
 * - a spin that caught work keeps spinning on (back-off level 0);
 * - a spin that ran out (or whose wait timed out) makes the next
 *   2^level waits sleep at once, and raises level (1, 2, 4, ... up to
 *   XSEG_SPIN_SKIP_MAX waits);
 * - a wait that slept at once because of the back-off still tells
 *   something: woken with work within max_ns of its start (a spin would
 *   have caught it), the waits left to skip are halved; otherwise one
 *   wait of the back-off is used up. After the back-off the next wait
 *   spins again (a probe); its outcome decides as above.
 * - a thread that lost its CPU to another runnable thread since its
 *   last spin decision (an involuntary context switch, counted by the
 *   kernel: getrusage RUSAGE_THREAD, ru_nivcsw) stops spinning and
 *   sleeps, backed off as after a miss, once its spin has run 1 us
 *   without work (XSEG_SPIN_CHECK_NS, signal.c: work that comes sooner is
 *   caught without the system call; since session 21, before which the
 *   count was read before every spin, a microsecond on the path of each
 *   in-process hit at queue depth 1): every CPU has more work than
 *   threads to run it, and a spin would take a CPU the work needs (on 2
 *   cores, a polling cached against vlmc and the client at queue depth
 *   16). Until a later decision finds no new preemption the back-off is
 *   not shortened by hints (a sleep that gave the CPU away is why the work
 *   came soon). Counted in `preempted`. The spin's own sched_yield
 *   (after each 20 us without work), when it lets another thread
 *   run, is counted by the kernel as involuntary too, but is the spin
 *   giving way on purpose: the switches counted across each yield are
 *   left out (a preemption before it still counts). At queue depth 1
 *   through NBD those were 16 % of cached's waits, the real preemptions
 *   under 1 %; at queue depth 16, 2-4 % (bench/spin_counts.sh). The
 *   window judged is the whole time since the last check, a back-off
 *   included: under lasting contention the thread stays backed off
 *   (spins that keep catching work within 1 us never check, so after a
 *   long run of them the window is long too, and an old preemption can
 *   stop the first idle spin after it: one early sleep). A spin of less
 *   than 1 us never checks; the clock is read every 32 polls, so the
 *   check comes at 1 us or a little later.
 *   Where getrusage fails nothing is judged. Adaptive only; one
 *   getrusage per spin that runs 1 us without work and two per yield.
 * So a thread whose spins never catch work spins about once per
 * XSEG_SPIN_SKIP_MAX + 1 waits, and one whose spins catch work spins at
 * every wait while it keeps its CPU. The spin itself is always max_ns
 * long at most (the configured spin: --spin of the peers, the stack's
 * `spin`).
 *
 * State kept (all in the struct, nothing in the segment, nothing global):
 * the configuration (max_ns, adaptive), the back-off (level, skip,
 * contended, the thread's preemption count last seen), and statistics
 * (waits, spins, caught, missed, hinted, preempted).
 * Ownership and thread-safety: the struct belongs to the one thread that
 * waits with it (e.g. a peer worker, vlmc's completer of one connection)
 * and to one port; the wait and the policy functions update it without
 * locks, so two threads must never wait with the same struct at the same
 * time; and since the preemption check compares counts of the calling
 * thread, a struct that passes to another thread (not done today) must be
 * initialised again first. The statistics are written with relaxed atomic
 * stores by that thread only, so another thread may read them with relaxed
 * atomic loads
 * (__atomic_load_n) at any time (e.g. a statistics dump); the values may
 * be a few waits old and need not be consistent with each other.
 * No memory ordering is implied by the struct: the wait's ordering
 * against signalers is that of the protocol above.
 */
#define XSEG_SPIN_SKIP_MAX 64u /* most waits skipped after a miss */

struct xseg_spin {
	uint64_t max_ns;   /* the spin of a wait that spins; 0: never spin */
	bool adaptive;	   /* false: every wait spins max_ns (fixed) */
	uint32_t level;	   /* the next miss skips 2^level waits (capped) */
	uint32_t skip;	   /* waits left that sleep at once */
	bool contended;	   /* backing off for a preemption: hints do not
			      shorten the back-off */
	bool nivcsw_known; /* nivcsw holds a count read by this thread */
	uint64_t nivcsw;   /* its involuntary context switches, last read */
	/* statistics (see above for reading them from another thread) */
	uint64_t waits;	    /* waits that found no work at once (max_ns != 0) */
	uint64_t spins;	    /* of those, the spins that caught or ran out (not
			       the ones cut at 1 us for a preemption) */
	uint64_t caught;    /* spins that found work */
	uint64_t missed;    /* spins that ran out (or timed out) */
	uint64_t hinted;    /* waits that slept at once and were woken with work
			       within max_ns (a spin would have caught it) */
	uint64_t preempted; /* spins stopped after 1 us without work to sleep:
			       the thread had been preempted since */
};

/* What one wait of a thread did, for xseg_spin_note. */
enum xseg_spin_outcome {
	XSEG_SPIN_CAUGHT,      /* it spun and found work */
	XSEG_SPIN_MISSED,      /* it spun and the spin ran out or timed out */
	XSEG_SPIN_SLEPT_SHORT, /* it slept at once, work came within max_ns */
	XSEG_SPIN_SLEPT_LONG,  /* it slept at once, work came later or never */
	XSEG_SPIN_PREEMPTED,   /* its spin found no work within 1 us and
				  the thread was preempted since its last
				  check: it sleeps (noted before the sleep;
				  the sleep itself is not noted) */
};

/* Initialise s: max_ns the spin (0: never spin), adaptive false: spin
 * max_ns at every wait (what xseg_set_spin does for the plain waits). */
void xseg_spin_init(struct xseg_spin *s, uint64_t max_ns, bool adaptive);

/* The spin the next wait with s may use: 0 (sleep at once) or max_ns.
 * Pure: reads s only. */
static inline uint64_t xseg_spin_budget(const struct xseg_spin *s)
{
	return s->skip ? 0 : s->max_ns;
}

/* The back-off policy: record one wait's outcome in s (statistics and
 * back-off, as described above) and return the budget of the next wait
 * (xseg_spin_budget). Pure apart from s; the *_spin waits call it, and
 * it is public so that the policy can be tested without a clock.
 * An outcome that contradicts the budget (a spin while the budget is 0)
 * is recorded as given. Owner thread only. */
uint64_t xseg_spin_note(struct xseg_spin *s, enum xseg_spin_outcome o);

/* The preemption check of a spin that ran 1 us without work (since session
 * 21; before, of every wait about to spin): nivcsw is the owner
 * thread's count of involuntary context switches now. Returns true if
 * it changed since the last call with s (the thread lost its CPU since
 * its last decision: the wait notes XSEG_SPIN_PREEMPTED and sleeps);
 * false on the first call, or when unchanged, which also ends the
 * contended back-off. Pure apart from s, for tests; owner thread only. */
bool xseg_spin_lost_cpu(struct xseg_spin *s, uint64_t nivcsw);

/* As xseg_wait, but the spin before the sleep is chosen by s
 * (xseg_spin_budget) and the wait's outcome recorded in s
 * (xseg_spin_note). s NULL: sleep at once. Recorded: a spin that found
 * work (CAUGHT) or ran out its whole budget (MISSED); a sleep at once
 * that was woken with work (SLEPT_SHORT or _LONG by the time since the
 * wait began) or slept longer than max_ns without (SLEPT_LONG); with an
 * adaptive s, a spin that found no work within 1 us and whose thread
 * was preempted since the last such check (PREEMPTED, xseg_spin_lost_cpu;
 * it sleeps then and its sleep is not recorded). Nothing
 * is recorded for a wait that finds work at once, a spin or sleep cut
 * short by timeout_ns before max_ns, or a wake-up without work (a kick).
 * Same returns as xseg_wait. s: see "Ownership" above (one thread, one
 * port). */
int xseg_wait_spin(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
		   struct xseg_spin *s);

/* As xseg_wait_reply, with the spins chosen and recorded by s as in
 * xseg_wait_spin (s NULL: sleep at once). */
int xseg_wait_reply_spin(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
			 struct xseg_spin *s, struct xseg_request **reqp);

/* Wait until port's request or reply queue is non-empty, the port is
 * kicked (xseg_kick), or timeout_ns elapse (XSEG_WAIT_FOREVER: no timeout;
 * 0: just check). The port should be owned by this process. May return 0
 * spuriously; callers loop on accept/receive.
 * When it times out it runs xseg_reap if this handle has not reaped for
 * 100 ms (the period is per handle, so short waits in a loop reap too);
 * it does not wake up early to do so.
 * Returns 0, -ETIMEDOUT, -EINTR (a signal handler ran while sleeping),
 * -EINVAL (bad port). */
int xseg_wait(struct xseg *seg, uint32_t port, uint64_t timeout_ns);

/* Like xseg_wait, but only the reply queue (or a kick) ends the wait:
 * requests queued on the port do not. For a server that has stopped
 * accepting (shutdown drain) and waits only for replies to what it sent;
 * with xseg_wait it would return at once and spin while requests sit on
 * its queue. Same returns as xseg_wait. */
int xseg_wait_replies(struct xseg *seg, uint32_t port, uint64_t timeout_ns);

/* Receive the next reply on port, waiting up to timeout_ns for it. While it
 * waits it runs xseg_reap about every 100 ms of wall clock, tracked per
 * handle (not per call: a loop of waits shorter than 100 ms reaps as often
 * as one long wait), so a request held by a dead peer comes back failed
 * with ECONNRESET instead of waiting out the timeout.
 * Returns 0 and *reqp, -ETIMEDOUT, -EINTR, -EINVAL, -EPERM. */
int xseg_wait_reply(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
		    struct xseg_request **reqp);

/* Wake port's sleepers if any are registered (what submit/respond do).
 * Cost: one seq_cst RMW on the port's sleeper word (a cache line shared
 * with the port's waiters), plus a FUTEX_WAKE syscall if a sleeper is
 * registered. Counted in xseg_port_info's signals (and wakes). */
void xseg_signal(struct xseg *seg, uint32_t port);

/*
 * Batched signaling. A thread that submits, answers or forwards several
 * requests in a row (a batch of NBD commands, the replies to a batch of
 * accepted requests) passes a struct xseg_sigbatch to the *_batched calls:
 * they enqueue exactly as the plain calls do but only note the port to
 * signal; xseg_sigbatch_flush then signals each noted port once. One
 * wake-up (at most one FUTEX_WAKE) per port per batch instead of one per
 * request, and the receiver finds the whole batch queued when it wakes.
 *
 * Contract:
 * - The batch is process-local and single-threaded (one per thread, e.g.
 *   on the stack); b == NULL means "signal now" (the plain call).
 * - Flush before the thread waits, blocks or returns to code that may
 *   wait: an unflushed batch delays the receiver's wake-up (a receiver
 *   that polls, or is awake anyway, still sees the requests at once:
 *   they are queued before the call returns). No wake-up is lost by
 *   deferring: the flush's signal follows every enqueue of the batch, and
 *   the protocol above only needs the signal after the enqueue.
 * - A batch remembers up to XSEG_SIGBATCH_PORTS distinct ports; a further
 *   port is signalled at once.
 * - Errors are those of the plain calls; on error nothing is noted.
 */
#define XSEG_SIGBATCH_PORTS 8
struct xseg_sigbatch {
	uint32_t nr; /* ports noted */
	uint32_t port[XSEG_SIGBATCH_PORTS];
};

static inline void xseg_sigbatch_init(struct xseg_sigbatch *b)
{
	b->nr = 0;
}

int xseg_submit_batched(struct xseg *seg, struct xseg_request *req,
			uint32_t dst, struct xseg_sigbatch *b);
int xseg_respond_batched(struct xseg *seg, struct xseg_request *req, int error,
			 struct xseg_sigbatch *b);
int xseg_forward_batched(struct xseg *seg, struct xseg_request *req,
			 uint32_t port, struct xseg_sigbatch *b);

/* Signal every port noted in b once (xseg_signal) and empty b. Returns the
 * number of ports signalled. b may be NULL (returns 0). */
unsigned xseg_sigbatch_flush(struct xseg *seg, struct xseg_sigbatch *b);

/* Always bump port's futex word and wake all its waiters, e.g. from a
 * shutdown path so worker threads notice a stop flag. Async-signal-safe. */
void xseg_kick(struct xseg *seg, uint32_t port);

/* ------------------------------------------------------------------------
 * Robustness
 */

struct xseg_reap_stats {
	uint32_t ports_reclaimed;      /* dead-owned ports made free */
	uint32_t requests_failed;      /* failed back with ECONNRESET */
	uint32_t requests_freed;       /* returned to the pool (held by a dead
					  client, or replies nobody will read) */
	uint32_t requests_redelivered; /* forwards and answers a dead peer
					  had published but maybe not
					  queued: queued again (API change:
					  added in version 3) */
	uint32_t writeback_losses;     /* reclaims that found the port's
					  unflushed count nonzero (API
					  change: added in version 5) */
};

/* Find ports whose owner is dead (pid gone, zombie, or start time differs)
 * and reclaim each one:
 *   1. claim it (CAS of the owner word to "reclaiming by me"; only one
 *      process reclaims a port; if that process dies too, the next reap
 *      takes over);
 *   1b. if its unflushed count (xseg_port_unflushed_add) is nonzero, add 1
 *      to the segment's write-back loss counter, subtract the count and log
 *      one line to stderr (port, peer type, pid, units): before anything
 *      below, so nobody sees a request of the dead owner failed back, or
 *      a new owner of the port, before the counter moved;
 *   2. give it a new generation, so late replies to it are dropped;
 *   3. fail back every request on its request queue and every request it
 *      had accepted and not answered, with error ECONNRESET, to their
 *      senders (requests are never left queued for a future owner);
 *   4. return to the pool the requests the dead process held as a client
 *      (prepared, received, or replies on its reply queue or on their way
 *      to it) and empty its free queue;
 *   5. settle every hand-over the dead process published and may not have
 *      queued (the request's word still names the port as mover): a
 *      request it submitted goes back to the pool (nobody would read the
 *      reply); a request it forwarded is queued on the next port's request
 *      queue, an answer it gave on the sender's reply queue, again (taken
 *      exactly once even if the dead process's enqueue happened too:
 *      accept and receive take a request by CAS from the word they read);
 *   6. mark the port free; draining (see xseg_bind_port) if its scan of
 *      the pool found requests the port had sent still accepted (or being
 *      answered) by other ports.
 * Free ports with stray requests on their queue (submitted while the
 * owner was dying) are cleaned the same way. Costs one /proc read per bound
 * port, plus a scan of the request pool only when a port is reclaimed.
 * Safe to call from any process at any time, concurrently with traffic
 * and with other reapers. stats may be NULL.
 * An owner counts as dead only on proof (no such process, a zombie, or
 * another start time): if /proc/PID cannot be read for another reason
 * (EMFILE, EACCES, ...) the owner is taken to be alive.
 * Returns the number of ports reclaimed (>= 0), or a negative errno if
 * this process cannot establish its own identity (e.g. -EMFILE). */
int xseg_reap(struct xseg *seg, struct xseg_reap_stats *stats);

/* ------------------------------------------------------------------------
 * Write-back losses
 *
 * A peer that acknowledges writes before they reach the next port (cached
 * in write-back) keeps in its port the amount of such data it holds
 * (units of its choosing, e.g. buckets): it adds before it acknowledges a
 * write that makes data unflushed, and subtracts once the next port has
 * acknowledged that data. If the owner dies, the reclaim of its port (any
 * path: xseg_reap, a bind over a dead owner, xsegctl) finds the count
 * nonzero, adds 1 to the segment's write-back loss counter and logs it.
 * A client that acknowledged writes to its own clients (vlmc) compares the
 * counter before its first unflushed write and after a flush: a change
 * means writes it acknowledged may be gone, so the flush must not report
 * success.
 */

/* Add delta (may be negative) to port's unflushed count. Any thread of
 * the port's owner; seq_cst, so the add is visible before any reply the
 * caller sends afterwards. */
void xseg_port_unflushed_add(struct xseg *seg, uint32_t port, int64_t delta);
/* Reclaims that found unflushed data, since the segment was created
 * (seq_cst load; monotonic). */
uint64_t xseg_writeback_losses(const struct xseg *seg);

#endif /* XSEG_H */
