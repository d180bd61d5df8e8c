/* SPDX-License-Identifier: MIT */
#ifndef VLMC_INT_H
#define VLMC_INT_H
/*
 * vlmc internals shared by vlmc.c (peer, volumes, I/O split, control
 * socket) and nbd.c (NBD server). Not a public interface.
 *
 * Threads and locking
 * - vols_lock (rwlock) protects the volume table; lookups take it shared
 *   and return a referenced volume (vlmc_vol_get / vlmc_vol_put).
 * - VLMC_CTL_THREADS control threads accept clients on the control
 *   socket, each serving one at a time. ctl_lock serialises control
 *   operations (create, remove, snapshot, ...) and every write of the
 *   metadata object; only a control thread holding it, the reclaimer
 *   thread (one window at a time, under ctl_lock) and init use ctl_port,
 *   synchronously. The reclaim records (v->reclaims) change under
 *   ctl_lock and reclaim_mu. list and info take no ctl_lock (they send
 *   nothing below): on other control threads they answer while an
 *   operation or the reclaimer waits for the store, reading the live
 *   table under vols_lock and each volume's mu, the records and the
 *   volume being removed under reclaim_mu (taken inside vols_lock, so a
 *   volume a remove takes out is seen in the one or the other), and
 *   nothing else that ctl_lock guards; they take no volume reference.
 *   A mutating command waits for ctl_lock in slices and is dropped if
 *   its client closes meanwhile (vlmc.c vlmc_ctl_lock).
 * - Each volume's mu protects inflight / frozen / pending: a snapshot
 *   freezes the volume, waits for its in-flight I/O to drain, copies the
 *   objects, and thaws it. NBD readers block while a volume is frozen;
 *   xseg requests are parked on the pending list instead (worker threads
 *   must keep running: they deliver the replies the drain waits for).
 * - Object requests of an I/O are submitted from the port the I/O names
 *   (vlmc's port for xseg volume requests, whose replies arrive through
 *   peer on_reply; a connection's own dynamic port for NBD, drained by
 *   the connection's completer thread). vlmc_io_part_reply is called with
 *   every reply, on whichever thread received it.
 *
 * Signal batches (xseg_sigbatch, xseg/xseg.h)
 * - vlmc_io_prep, vlmc_io_submit and vlmc_io_part_reply take the calling
 *   thread's batch sb (NULL: every submission signals the next port at
 *   once). The object requests they submit are queued before they return
 *   but their wake-up is only noted in sb: the caller flushes sb
 *   (xseg_sigbatch_flush) once it has submitted what it has at hand, and
 *   always before it waits or blocks (socket read or write, a slot, a
 *   frozen volume, a reply): a request whose signal is held back while the
 *   submitter sleeps waits for a peer that may be asleep too.
 * - Inside, the only wait is for a free request or heap space
 *   (vlmc_get_prep), and it flushes sb first. io->done may run with sb
 *   not yet flushed; it must not wait for the io's own parts.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "peer.h"
#include "volume.h"
#include "wbloss.h"

struct vlmc_nbd;

#define VLMC_DEFAULT_NBD_SPIN_NS 0ULL
/* Connections in transmission at once: each holds a thread pair, a
 * dynamic port and up to its byte budget of segment buffers. */
#define VLMC_DEFAULT_NBD_MAX_CONNS 32
/* Data of the commands in flight on one connection (request and reply
 * buffers in the segment): 64 maximal commands would pin 2 GiB. */
#define VLMC_DEFAULT_NBD_INFLIGHT_BYTES (64ULL << 20)
/* At shutdown, how long a connection waits for the replies of its
 * commands before it gives them up (as the peers' --drain-timeout). */
#define VLMC_DEFAULT_NBD_STOP_NS (30ULL * 1000000000ULL)
/* --dead-peer-wait: how long a part that a dead peer below failed back
 * (ECONNRESET) is resent while the supervisor restarts that peer, with a
 * back-off from VLMC_RETRY_MIN_NS doubling up to VLMC_RETRY_MAX_NS */
#define VLMC_DEFAULT_DEAD_PEER_WAIT_NS (30ULL * 1000000000ULL)
/* --ctl-wait-log: a volume operation waiting for the store logs this
 * often that it still waits (it never gives up: vlmc.c, R9-6) */
#define VLMC_DEFAULT_CTL_WAIT_LOG_NS (30ULL * 1000000000ULL)
/* Background reclaim of removed volumes (vlmc.c, "Background reclaim"):
 * --reclaim-window objects deleted per hold of ctl_lock, progress saved
 * in the table after --reclaim-save objects or VLMC_RECLAIM_SAVE_NS,
 * a failing record retried after a back-off doubling from
 * VLMC_RECLAIM_RETRY_MIN_NS up to --reclaim-retry-max */
#define VLMC_DEFAULT_RECLAIM_WINDOW	  1024
#define VLMC_DEFAULT_RECLAIM_SAVE	  (1ULL << 20)
#define VLMC_RECLAIM_SAVE_NS		  (30ULL * 1000000000ULL)
#define VLMC_RECLAIM_RETRY_MIN_NS	  (1000ULL * 1000000ULL)
#define VLMC_DEFAULT_RECLAIM_RETRY_MAX_NS (60ULL * 1000000000ULL)
#define VLMC_RETRY_MIN_NS		  (10ULL * 1000000ULL)
#define VLMC_RETRY_MAX_NS		  (500ULL * 1000000ULL)
/* Control threads, all accepting on the control socket: list and info
 * answer while up to VLMC_CTL_THREADS - 1 commands run or wait for
 * ctl_lock (vlmc.c, "Control socket") */
#define VLMC_CTL_THREADS 8
/* Commands that change volumes (they run one at a time under ctl_lock)
 * running or waiting at once; more are refused with EBUSY, so that two
 * threads always stay for list and info even while the running one waits
 * for a store that does not answer (review-ctlpar F1) */
#define VLMC_CTL_MUTATING_MAX (VLMC_CTL_THREADS - 2)
/* --remove-busy-wait: remove of a volume still referenced (an NBD
 * connection being torn down, I/O in flight) waits this long for it to
 * be let go before it answers EBUSY */
#define VLMC_DEFAULT_REMOVE_BUSY_NS (2ULL * 1000000000ULL)

struct vlmc_volume {
	struct vlmc_volume_meta m; /* size changes only under ctl_lock and
				      the volume's mu */
	uint32_t refs;		   /* __atomic; the table holds one */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	uint64_t inflight; /* I/Os started and not done */
	bool frozen;
	struct vlmc_io *pending;   /* xseg I/Os parked while frozen */
	uint32_t nbd_conns;	   /* __atomic: open NBD connections */
	struct vlmc_wbloss_vol wb; /* write-back loss mark and fence */
};

/* What a reclaim record is for (in memory only: the table does not say,
 * so a record loaded at start is VLMC_RECLAIM_REMOVED whatever wrote it;
 * for list, info and the log). */
enum vlmc_reclaim_kind {
	VLMC_RECLAIM_REMOVED,  /* a removed volume */
	VLMC_RECLAIM_SNAPSHOT, /* the copies of a snapshot or clone that */
	VLMC_RECLAIM_CLONE     /* failed (or is still in progress: hold) */
};

/* Who may delete a record's objects. A snapshot or clone commits a record
 * for its copies before its first COPY (vlmc.c vlmc_copy_hold), so that a
 * crash before its own commit leaves them named; the reclaimer must not
 * delete them while the operation may still publish them. */
enum vlmc_reclaim_hold {
	VLMC_HOLD_NONE,	   /* the reclaimer's */
	VLMC_HOLD_COPYING, /* the snapshot or clone is in progress */
	/* its commit failed and the rewrite over it too (meta_uncertain):
	 * the failed table, which names the new volume, may still be the
	 * one the next start takes; released by the rewrite that decides
	 * against it (vlmc_meta_settle) */
	VLMC_HOLD_UNDECIDED
};

/* A removed volume (or the copies of a snapshot or clone, kind) whose
 * objects the reclaimer deletes (under ctl_lock). m is what the committed
 * table holds (m.next: objects below it are deleted, durably); done runs
 * ahead of it between saves. kind, hold and uncopied change under
 * ctl_lock and reclaim_mu (list and info read them under reclaim_mu). */
struct vlmc_reclaim {
	struct vlmc_reclaim_meta m;
	uint8_t kind;  /* enum vlmc_reclaim_kind */
	uint8_t hold;  /* enum vlmc_reclaim_hold: not VLMC_HOLD_NONE, the
			  reclaimer leaves the record alone */
	bool uncopied; /* a snapshot or clone that failed before its first
			  COPY: nothing to delete (list says so, not "N of
			  N objects deleted") */
	uint64_t done; /* objects [0, done) deleted */
	/* the sweep: objects [cursor, end) are still to be sent a DELETE
	 * in this pass; those that failed in it are in [failed_lo,
	 * failed_end) (failed_end 0: none), retried by the next pass once
	 * this one is over, after the back-off (review15 F3) */
	uint64_t cursor, end, failed_lo, failed_end;
	uint64_t saved_ns;    /* when m.next was last saved (or loaded) */
	uint64_t retry_at_ns; /* 0: ready; else not before (a failure) */
	uint64_t delay_ns;    /* current back-off (0: none) */
	int err;	      /* errno of the last failure logged, 0: none */
};

/* The volume a remove has taken out of the live table and neither
 * replaced by its reclaim record nor put back yet (review-ctlpar F3):
 * list and info show it, so that it is never in neither. Set and
 * cleared under reclaim_mu inside the same hold of vols_lock (write) as
 * the volume leaves or re-enters the table, and the record goes in under
 * the same reclaim_mu hold that clears it; list and info take vols_lock
 * (read) then reclaim_mu. One at a time (remove holds ctl_lock).
 * m.name[0] == '\0': none. */
struct vlmc_removing {
	struct vlmc_volume_meta m;
	uint64_t objects;
	/* 0: the table without it is being written; else that write
	 * failed with this errno, and its objects are being deleted in
	 * place (deleted so far) before the table is written again */
	int table_err;
	uint64_t deleted;
};

struct vlmc_part;

/* Parts waiting to be resent after a dead peer below failed them back
 * (docs/vlmc.md, "Dead peer below"): one timer thread resends each when
 * its back-off has passed. */
struct vlmc_retry {
	pthread_mutex_t mu;
	pthread_cond_t cond;	/* CLOCK_MONOTONIC: a part parked or stop */
	struct vlmc_part *head; /* parked parts, unsorted (few) */
	bool stop;		/* vlmc stops: fail parked parts, take none */
	bool started;
	bool inited; /* mu and cond initialised */
	pthread_t thread;
};

struct vlmc;

/* One control thread and the client it serves. */
struct vlmc_ctl_thread {
	struct vlmc *v;
	pthread_t thread;
	bool started;
	/* the client being served (-1: none), under v->ctl_client_lock:
	 * vlmc_stop shuts its reading side so a silent client cannot hold
	 * the stop */
	int client_fd;
};

struct vlmc {
	/* options */
	uint32_t next_port;
	uint32_t obj_size;
	uint32_t max_obj_size; /* --max-object-size (R9-10) */
	/* --snapshot-drain-wait: a snapshot gives up the drain of its
	 * source's I/O after this long (0: not given, vlmc_snap_drain_ns) */
	uint64_t snap_drain_ns;
	const char *nbd_socket_arg, *ctl_socket_arg; /* options (argv) */
	char *nbd_socket;			     /* set by init */
	char *ctl_socket;
	int nbd_tcp_port; /* 0: no TCP listener */
	unsigned nbd_max_inflight;
	uint64_t nbd_spin_ns;	     /* see nbd.c: reader polling; 0: the
					completer takes every reply */
	unsigned nbd_max_conns;	     /* connections in transmission */
	bool nbd_max_conns_set;	     /* given as an option (checked against
					the segment's dynamic ports) */
	uint64_t nbd_inflight_bytes; /* per connection, see nbd.c */
	/* --nbd-total-inflight-bytes: all connections together (0: half
	 * the segment heap, set by vlmc_nbd_start), and the bytes they pin
	 * now (__atomic seq_cst, like each connection's own count) */
	uint64_t nbd_total_bytes;
	uint64_t nbd_total_inflight;
	uint64_t nbd_stop_ns;	       /* at stop, wait this long for replies */
	uint64_t dead_peer_wait_ns;    /* resend parts failed by a dead peer
					  this long; 0: fail at once */
	uint64_t ctl_wait_log_ns;      /* see VLMC_DEFAULT_CTL_WAIT_LOG_NS */
	uint64_t reclaim_window;       /* --reclaim-window */
	uint64_t reclaim_save;	       /* --reclaim-save */
	uint64_t reclaim_retry_max_ns; /* --reclaim-retry-max */
	uint64_t remove_busy_ns;       /* --remove-busy-wait */

	struct peer *p;
	struct xseg *seg;

	pthread_rwlock_t vols_lock;
	struct vlmc_volume *vols[VLMC_MAX_VOLUMES];
	size_t nr_vols;

	pthread_mutex_t ctl_lock;
	uint32_t ctl_port;
	bool have_ctl_port;
	int ctl_fd;
	pthread_mutex_t ctl_client_lock; /* the threads' client_fd */
	struct vlmc_ctl_thread ctl_threads[VLMC_CTL_THREADS];
	/* __atomic: vlmc_stop began; a waiting control operation returns
	 * -ESHUTDOWN and rolls nothing back (vlmc.c, R9-6) */
	bool ctl_stop;
	/* The volume table in the store (vlmc.c vlmc_meta_store), all
	 * under ctl_lock: */
	char *meta_buf;	       /* VLMC_TABLE_MAX bytes */
	uint64_t meta_gen;     /* newest durable table generation */
	uint64_t meta_top_gen; /* highest generation ever sent (>= meta_gen) */
	/* the table generation meta_gen holds (VLMC_MAX_VOLUMES entries),
	 * the one a failed write is undone with */
	struct vlmc_volume_meta *meta_committed;
	size_t nr_committed;
	/* a failed write of another table may be the newest in the store
	 * and no rewrite of meta_committed has superseded it yet: volume
	 * operations are refused until one does (review11 N-C) */
	bool meta_uncertain;
	/* Reclaim records (nr_reclaims of VLMC_MAX_VOLUMES entries, in
	 * table order; nr_vols + nr_reclaims <= VLMC_MAX_VOLUMES), the
	 * thread deleting their objects, and its wake-up (with ctl_lock,
	 * CLOCK_MONOTONIC): a new record, a control command done, stop.
	 * ctl_wanted (__atomic) counts control commands waiting for
	 * ctl_lock: the reclaimer lets them in between windows. */
	struct vlmc_reclaim *reclaims;
	size_t nr_reclaims;
	/* changes to reclaims / nr_reclaims take ctl_lock and this; list
	 * and info read them under this alone (they take no ctl_lock) */
	pthread_mutex_t reclaim_mu;
	struct vlmc_removing removing; /* under reclaim_mu, see its type */
	pthread_cond_t reclaim_cond;
	bool reclaim_cond_inited;
	pthread_t reclaim_thread;
	bool reclaim_started;
	uint32_t ctl_wanted;
	/* (__atomic) mutating commands running or waiting for ctl_lock
	 * (at most VLMC_CTL_MUTATING_MAX) */
	uint32_t ctl_mutating;
	/* (__atomic) mutating commands not run because their client had
	 * closed its connection before they could start */
	uint64_t st_ctl_dropped;

	struct vlmc_nbd *nbd;
	struct vlmc_wbloss wb; /* write-back losses (wbloss.h) */
	struct vlmc_retry retry;

	/* statistics, __atomic */
	uint64_t st_ios, st_parts, st_errors;
	uint64_t st_short_reads;	/* READ parts served short, the object
					   ending there: tail zero-filled */
	uint64_t st_nbd_conns;		/* NBD connections in transmission */
	uint64_t st_nbd_refused;	/* over --nbd-max-conns */
	uint64_t st_nbd_throttled;	/* reader waits for the byte budget */
	uint64_t st_nbd_reader_replies; /* replies an NBD reader took while
					   polling for them (queue depth 1:
					   no completer wake-up) */
	/* NBD completers' waits on their port that found no reply at once
	 * (with commands in flight and a spin configured), how many spun,
	 * how many spins caught a reply (xseg_spin) */
	uint64_t st_nbd_completer_waits;
	uint64_t st_nbd_completer_spins;
	uint64_t st_nbd_completer_caught;
	uint64_t st_nbd_completer_preempted;
	uint64_t st_nbd_thaw_waits;   /* NBD commands that waited for a thaw */
	uint64_t st_nbd_total_waits;  /* NBD commands that queued for the
					 total budget (nbd.c nbd_admit) */
	uint64_t st_ctl_waits_logged; /* "still waiting" lines of volume
					 operations (--ctl-wait-log) */
	uint64_t st_parts_retried;    /* parts resent after a dead peer */
	uint64_t st_cmds_failed_dead_peer; /* commands failed for one */
	/* background reclaim: records pending, their objects not yet
	 * deleted, objects deleted, windows or saves failed, records done */
	uint64_t st_reclaims_pending, st_reclaim_objects_left;
	uint64_t st_reclaim_objects_deleted, st_reclaim_errors;
	uint64_t st_reclaims_done;
};

enum vlmc_io_op {
	VLMC_IO_READ,
	VLMC_IO_WRITE,
	VLMC_IO_ZERO, /* TRIM / WRITE_ZEROES: whole objects deleted, the rest
			 written with zeroes (all of it with no_hole) */
	VLMC_IO_FLUSH,
	VLMC_IO_STATUS, /* allocation status: one INFO per object; a part
			   whose object does not exist gets hole = true */
};

struct vlmc_io;
typedef void (*vlmc_io_done_fn)(struct vlmc_io *io);

struct vlmc_part {
	struct vlmc_io *io;
	uint64_t buf_off;
	uint64_t len;
	/* Before submission: a request prepared by vlmc_io_prep (its data
	 * filled by the owner, submitted as is). After completion of a
	 * keep_replies READ: the reply, data in its buffer, until
	 * vlmc_io_put_replies. NULL otherwise. */
	struct xseg_request *req;
	bool hole; /* VLMC_IO_STATUS, zero_check: the object was never
		      written */
	bool skip; /* not submitted (set by vlmc.c for zero_check) */
	/* write-back loss counter read before this part's last submission
	 * as a write or delete (UINT64_MAX: none) */
	uint64_t loss;
	/* dead peer below: first failure, current back-off, when to resend
	 * and the request to resend (under v->retry.mu while parked) */
	uint64_t retry_first_ns, retry_delay_ns, retry_at_ns;
	struct xseg_request *retry_req;
	struct vlmc_part *retry_next;
};

struct vlmc_io {
	struct vlmc *v;
	struct vlmc_volume *vol; /* referenced; NULL for FLUSH */
	enum vlmc_io_op op;
	uint32_t xflags; /* XSEG_F_FUA */
	uint64_t off, len;
	unsigned char *buf; /* READ destination / WRITE source */
	uint32_t port;	    /* submit parts from this port */
	uint32_t remaining; /* __atomic */
	int error;	    /* first error (positive errno), __atomic */
	vlmc_io_done_fn done;
	void *arg;	      /* owner's context */
	uint64_t arg2;	      /* owner's word (e.g. NBD cookie) */
	struct vlmc_io *next; /* pending list */
	/* READ: keep each part's reply (part->req) instead of copying its
	 * data into buf; the owner reads xseg_request_data(part->req) and
	 * returns them with vlmc_io_put_replies. A part that read a
	 * never-written object has its buffer zeroed. */
	bool keep_replies;
	/* ZERO with FUA: its whole-object parts are DELETEs, which carry no
	 * FUA; a FLUSH sent after every part completed makes the zeroing
	 * durable before the owner is told (set when that FLUSH is sent) */
	bool fua_flush;
	/* ZERO: write zeroes to whole objects too instead of deleting them
	 * (NBD_CMD_FLAG_NO_HOLE: the client asked for no hole) */
	bool no_hole;
	/* ZERO, fast or not at all (NBD_CMD_FLAG_FAST_ZERO, without
	 * no_hole): the partial objects are first looked at with INFO; if
	 * any exists the io fails with EOPNOTSUPP having changed nothing,
	 * else only the whole objects are deleted. Set by the owner before
	 * vlmc_io_submit; vlmc.c clears it when the check is done. */
	bool zero_check;
	/* ZERO: at most this many parts in flight (0: all at once), so a
	 * large zeroing cannot take the whole request pool or heap; the
	 * next part is submitted from the reply of an earlier one */
	uint32_t window;
	uint64_t next_part; /* __atomic: next part to submit (window) */
	/* Write-back loss: the volume whose fence fails this io and the
	 * session's fence generation (an NBD connection's, taken when it
	 * attached; an xseg request's, taken when it arrived). NULL for an
	 * xseg FLUSH (it fails when it finds any volume lost). */
	struct vlmc_volume *fence_vol;
	uint64_t fence_gen;
	/* the NBD connection's session on fence_vol (NULL: an xseg
	 * request, which has none): its writes are recorded in it, so a
	 * fence can tell it stale (wbloss.h) */
	struct vlmc_wbloss_sess *fence_sess;
	struct vlmc_wbloss_flush wbf; /* FLUSH: taken before submission */
	/* FLUSH: a stale session was open on its volume (any volume, for a
	 * volume-less one) when it was submitted: it fails (wbloss.h) */
	bool stale_at_submit;
	bool dead_peer;			 /* __atomic: counted as failed by a
					    dead peer below */
	_Alignas(8) uint8_t scratch[48]; /* owner's (NBD: the reply header) */
	uint64_t nr_parts;
	struct vlmc_part *parts; /* nr_parts entries */
};

/* Volume table. */
struct vlmc_volume *vlmc_vol_get(struct vlmc *v, const char *name, size_t len);
void vlmc_vol_put(struct vlmc_volume *vol);
/* Snapshot of the names of all volumes (for NBD_OPT_LIST): fills up to
 * max metas; returns the count. */
size_t vlmc_vol_list(struct vlmc *v, struct vlmc_volume_meta *out, size_t max);

/* Allocate an I/O with its parts for [off, off+len) of vol (or a FLUSH
 * when op is VLMC_IO_FLUSH). Returns NULL on ENOMEM. */
struct vlmc_io *vlmc_io_alloc(struct vlmc *v, struct vlmc_volume *vol,
			      enum vlmc_io_op op, uint64_t off, uint64_t len);
void vlmc_io_free(struct vlmc_io *io);

/* Get and prepare the object request of every part of a WRITE io from
 * io->port (op, offset, target, a data buffer of part->len bytes) without
 * submitting them, so the owner can fill the data in place (NBD reads a
 * payload straight from the socket into the segment). vlmc_io_submit then
 * submits them as they are. Returns 0 or a negative errno (-ENOMEM when
 * the pool or heap stayed exhausted), in which case no request is held. */
int vlmc_io_prep(struct vlmc_io *io, struct xseg_sigbatch *sb);
/* Data buffer of part i's prepared request or kept reply. */
void *vlmc_io_part_data(struct vlmc_io *io, uint64_t i);
/* Return every request held in io->parts[].req to the pool. */
void vlmc_io_put_replies(struct vlmc_io *io);

/* A thread's hook around the waits for a free request or heap space
 * (vlmc_io_prep, vlmc_io_submit, a refill or short-read check running on
 * this thread): fn(arg, true) before the first wait, fn(arg, false) once
 * the wait is over (got one, or gave up). Those waits end only when
 * replies give requests back, so a thread that is the only one receiving
 * its port's replies must hand them over here (the NBD reader with
 * --nbd-spin, whose completer is parked). Per thread (thread-local), so
 * another thread's waits never call it; fn must not wait for the pool or
 * heap itself. NULL fn: none (the default). Set and cleared by the thread
 * itself. */
typedef void (*vlmc_wait_hook_fn)(void *arg, bool waiting);
void vlmc_set_wait_hook(vlmc_wait_hook_fn fn, void *arg);

/* Wait until vol is not frozen and count an I/O in flight on it. */
void vlmc_vol_enter(struct vlmc_volume *vol);
/* The same without waiting: false (nothing counted) while vol is frozen. */
bool vlmc_vol_try_enter(struct vlmc_volume *vol);
/* The matching exit (wakes a snapshot waiting for the drain). */
void vlmc_vol_exit(struct vlmc_volume *vol);

/* Submit all parts of io (the caller counted it with vlmc_vol_enter when
 * it has a volume), their wake-ups noted in sb (see above: the caller
 * flushes it). io->done runs exactly once when every part has completed,
 * possibly before this returns; io->error then holds the first error. */
void vlmc_io_submit(struct vlmc_io *io, struct xseg_sigbatch *sb);

/*
 * A reply to a part request (any thread). Takes ownership of req.
 * Short answers (V2): a WRITE part served short fails the io with EIO; a
 * READ part served short (serviced < size, no error) is checked with an
 * INFO of its object: if the object ends where the read stopped (or no
 * longer exists) the rest reads as zeroes, else the io fails with EIO. The
 * bytes past serviced are never passed on (request buffers are reused).
 * A part failed back with ECONNRESET (a dead peer below) is parked instead
 * and resent by vlmc's timer thread after a back-off (v->retry), until
 * --dead-peer-wait has passed; its io then completes on that thread, which
 * kicks io->port so an NBD connection's completer sends the reply.
 */
void vlmc_io_part_reply(struct vlmc *v, struct xseg_request *req,
			struct xseg_sigbatch *sb);

/* vol was fenced after a write-back loss (called once per fence, by the
 * check that found it): log it at error level, and have the parts of the
 * fenced sessions parked for a dead peer fail at once. */
void vlmc_wb_fenced(struct vlmc *v, struct vlmc_volume *vol);

/* NBD server (nbd.c). start: listeners and their thread; stop: close
 * listeners, shut every connection down and wait for them. */
int vlmc_nbd_start(struct vlmc *v);
void vlmc_nbd_stop(struct vlmc *v);

#endif /* VLMC_INT_H */
