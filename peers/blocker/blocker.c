/* SPDX-License-Identifier: MIT */
/*
 * blocker: the peer that serves a venti-style store (store.h) on an xseg
 * port.
 *
 * Each worker thread calls the synchronous, thread-safe store directly, so
 * up to --threads requests are in flight in the store at once. FUA writes
 * and FLUSHes complete asynchronously: the worker appends the write without
 * FUA and hands the request to the syncer thread, which runs one
 * blocker_flush for everything handed over before it started and then
 * completes all of it. A worker never waits for an fsync, so at any
 * iodepth one fsync covers every FUA write that arrived while the previous
 * one ran, whatever --threads is (with the store's group commit inside a
 * single call it covered at most --threads writes).
 *
 * Semantics on top of the store (docs/operations.md, "Blocker peer"):
 * - READ of an object that was never written, or of a range past its end,
 *   returns zeros: objects are extents of virtual disks, and an unwritten
 *   extent reads as zeros on a disk. INFO and DELETE of a missing object
 *   fail with ENOENT, which is how callers learn that it does not exist.
 * - WRITE with XSEG_F_FUA is durable when it completes; FLUSH makes every
 *   write completed before it durable.
 * - Every request is validated again here (target name characters and
 *   length, offset + size against the store's maximum object size) on top
 *   of libxseg's checks, and a bad one fails with EINVAL.
 * - After a write error the store is degraded: writes fail with that errno,
 *   reads are still served, and SIGUSR1 statistics say why.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "peer.h"
#include "store.h"
#include "xtime.h"

enum {
	BLOCKER_OPT_STORE = 256,
	BLOCKER_OPT_CREATE,
	BLOCKER_OPT_CHUNK_SIZE,
	BLOCKER_OPT_NO_VERIFY,
	BLOCKER_OPT_SYNC_INTERVAL,
	BLOCKER_OPT_CHECKPOINT_BYTES,
	BLOCKER_OPT_IO,
	BLOCKER_OPT_MMAP_READS,
	BLOCKER_OPT_NO_MMAP_READS,
	BLOCKER_OPT_GC_THRESHOLD,
	BLOCKER_OPT_GC_RATE,
	BLOCKER_OPT_SEGMENT_SIZE,
	BLOCKER_OPT_TRUNCATE_AT_DAMAGE,
	BLOCKER_OPT_RESERVE,
	BLOCKER_OPT_TEST_FSYNC_CONTROL,
};

/*
 * The syncer: FUA writes (already appended) and FLUSHes wait here for an
 * fsync. Requests are chained through req->peer_priv (the peer's word; the
 * requests are accepted by this peer, so nobody else touches it) in
 * arrival order. lock protects head, tail, n and stop; the thread takes
 * the whole chain, flushes without the lock, and completes the chain.
 */
struct blocker_syncer {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct xseg_request *head, *tail;
	uint64_t n;
	bool stop;
	bool running; /* the thread was started (init) and not joined */
	pthread_t thread;
	/* statistics, relaxed atomics: syncs = blocker_flush calls, reqs =
	 * requests they completed, max_batch = most in one, gathers = flushes
	 * that waited for released requests to come back */
	uint64_t syncs, reqs, max_batch, gathers;
};

/* the longest a flush waits for requests the last one released (and half
 * the last flush's duration at most) */
#define BLOCKER_GATHER_MAX_NS 1000000ULL

struct blocker_peer {
	const char *dir;
	bool create;
	struct blocker_opts opts;
	struct blocker_store *store;
	struct blocker_syncer sync;
	/* test hook (--test-fsync-control): see blocker_ctl_fdatasync */
	const char *fsync_ctl;
	const struct blocker_io_ops *inner_io;
	void *inner_ctx;
};

static const struct option blocker_options[] = {
    {"store", required_argument, NULL, BLOCKER_OPT_STORE},
    {"create", no_argument, NULL, BLOCKER_OPT_CREATE},
    {"chunk-size", required_argument, NULL, BLOCKER_OPT_CHUNK_SIZE},
    {"no-verify", no_argument, NULL, BLOCKER_OPT_NO_VERIFY},
    {"sync-interval-ms", required_argument, NULL, BLOCKER_OPT_SYNC_INTERVAL},
    {"checkpoint-bytes", required_argument, NULL, BLOCKER_OPT_CHECKPOINT_BYTES},
    {"io", required_argument, NULL, BLOCKER_OPT_IO},
    {"mmap-reads", no_argument, NULL, BLOCKER_OPT_MMAP_READS},
    {"no-mmap-reads", no_argument, NULL, BLOCKER_OPT_NO_MMAP_READS},
    {"gc-threshold", required_argument, NULL, BLOCKER_OPT_GC_THRESHOLD},
    {"gc-rate", required_argument, NULL, BLOCKER_OPT_GC_RATE},
    {"segment-size", required_argument, NULL, BLOCKER_OPT_SEGMENT_SIZE},
    {"truncate-at-damage", no_argument, NULL, BLOCKER_OPT_TRUNCATE_AT_DAMAGE},
    {"reserve", required_argument, NULL, BLOCKER_OPT_RESERVE},
    /* tests only, not in --help: blocker_ctl_fdatasync */
    {"test-fsync-control", required_argument, NULL,
     BLOCKER_OPT_TEST_FSYNC_CONTROL},
    {NULL, 0, NULL, 0},
};

static const char blocker_options_help[] =
    "      --store DIR           the store directory (required)\n"
    "      --create              create the store if DIR holds none\n"
    "      --chunk-size SIZE     chunk size of a store made by --create "
    "(default 4K)\n"
    "      --segment-size SIZE|auto  log segment size of a store made by "
    "--create\n"
    "                            (default auto: 1/8 of the file system, "
    "a power\n"
    "                            of two, 1M..256M; GC reclaims whole "
    "segments)\n"
    "      --no-verify           do not re-hash chunks read from disk "
    "(benchmarks)\n"
    "      --sync-interval-ms N  make writes durable every N ms even "
    "without FLUSH\n"
    "                            (default 1000; 0: only on FLUSH)\n"
    "      --checkpoint-bytes SIZE  checkpoint after this much log "
    "(default 1G;\n"
    "                            0: only at exit)\n"
    "      --io sync|uring       I/O backend (default uring)\n"
    "      --no-mmap-reads       read the log with the --io backend "
    "instead of through\n"
    "                            mappings of its segments (slower; "
    "mappings are the\n"
    "                            default, and a damaged file fails only "
    "the read)\n"
    "      --mmap-reads          read through mappings (the default)\n"
    "      --gc-threshold PCT    collect garbage in the background when "
    "PCT% of the\n"
    "                            closed log segments' bytes are dead "
    "(default 50;\n"
    "                            0: never)\n"
    "      --truncate-at-damage  start even if flushed log data is damaged "
    "or missing,\n"
    "                            cutting the log there: everything after "
    "it is LOST\n"
    "                            (each cut is logged; run blockerctl check "
    "first)\n"
    "      --gc-rate SIZE        background GC copy rate per second "
    "(default 64M;\n"
    "                            0: unlimited)\n"
    "      --reserve SIZE|auto   disk space held back (DIR/reserve) so "
    "that DELETE and\n"
    "                            GC work on a full disk: at least 1M, or 0 "
    "for none (a\n"
    "                            full disk then cannot be recovered "
    "online); default\n"
    "                            auto: a segment + 1M + twice the maps and "
    "index\n";

static void blocker_defaults(struct peer *p)
{
	struct blocker_peer *b = peer_priv(p);

	blocker_opts_init(&b->opts);
	b->opts.io = &blocker_io_uring;
	b->opts.gc_threshold_pct = 50;
	b->opts.gc_rate_bytes = 64ULL << 20;
}

static int blocker_parse_opt(struct peer *p, int val, const char *arg)
{
	struct blocker_peer *b = peer_priv(p);
	uint64_t v;
	int rc;

	switch (val) {
	case BLOCKER_OPT_STORE:
		b->dir = arg;
		return 0;
	case BLOCKER_OPT_CREATE:
		b->create = true;
		return 0;
	case BLOCKER_OPT_CHUNK_SIZE:
		rc = peer_parse_size(arg, &v);
		if (rc)
			return rc;
		if (v > UINT32_MAX)
			return -ERANGE;
		b->opts.chunk_size = (uint32_t)v;
		return 0;
	case BLOCKER_OPT_NO_VERIFY:
		b->opts.verify_reads = false;
		return 0;
	case BLOCKER_OPT_SYNC_INTERVAL:
		rc = peer_parse_u64(arg, &v);
		if (rc)
			return rc;
		if (v > UINT32_MAX)
			return -ERANGE;
		b->opts.sync_interval_ms = (unsigned)v;
		return 0;
	case BLOCKER_OPT_CHECKPOINT_BYTES:
		return peer_parse_size(arg, &b->opts.checkpoint_bytes);
	case BLOCKER_OPT_MMAP_READS:
		b->opts.mmap_reads = true;
		return 0;
	case BLOCKER_OPT_NO_MMAP_READS:
		b->opts.mmap_reads = false;
		return 0;
	case BLOCKER_OPT_GC_THRESHOLD:
		rc = peer_parse_u64(arg, &v);
		if (rc)
			return rc;
		if (v > 100)
			return -ERANGE;
		b->opts.gc_threshold_pct = (unsigned)v;
		return 0;
	case BLOCKER_OPT_GC_RATE:
		return peer_parse_size(arg, &b->opts.gc_rate_bytes);
	case BLOCKER_OPT_SEGMENT_SIZE: {
		uint64_t sz;
		int r;
		if (!strcmp(arg, "auto")) {
			b->opts.segment_size = BLOCKER_SEGMENT_SIZE_AUTO;
			return 0;
		}
		r = peer_parse_size(arg, &sz);
		if (!r && !sz)
			r = -EINVAL; /* 0 is not "auto" by accident */
		if (!r)
			b->opts.segment_size = sz;
		return r;
	}
	case BLOCKER_OPT_TRUNCATE_AT_DAMAGE:
		b->opts.truncate_at_damage = true;
		return 0;
	case BLOCKER_OPT_RESERVE:
		if (!strcmp(arg, "auto")) {
			b->opts.reserve_bytes = 0;
			return 0;
		}
		rc = peer_parse_size(arg, &v);
		if (rc)
			return rc;
		return blocker_reserve_opt(v, &b->opts.reserve_bytes);
	case BLOCKER_OPT_TEST_FSYNC_CONTROL:
		b->fsync_ctl = arg;
		return 0;
	case BLOCKER_OPT_IO:
		if (!strcmp(arg, "sync"))
			b->opts.io = &blocker_io_sync;
		else if (!strcmp(arg, "uring"))
			b->opts.io = &blocker_io_uring;
		else
			return -EINVAL;
		return 0;
	}
	return -EINVAL;
}

/* The store's messages go to the peer's log, at the matching level. */
static void blocker_store_log(void *arg, enum blocker_log_level level,
			      const char *msg)
{
	(void)arg;
	switch (level) {
	case BLOCKER_LOG_ERR:
		peer_err("%s", msg);
		break;
	case BLOCKER_LOG_WARN:
		peer_warn("%s", msg);
		break;
	default:
		peer_info("%s", msg);
		break;
	}
}

/* ------------------------------------------------------------------ */
/* Validation                                                          */
/* ------------------------------------------------------------------ */

/* Name and range checks of the store, before it is asked anything: a bad
 * request fails with EINVAL whatever state the store is in. */
static bool blocker_valid_range(const struct xseg_request *req)
{
	return req->offset <= BLOCKER_MAX_OBJECT_SIZE &&
	       req->size <= BLOCKER_MAX_OBJECT_SIZE - req->offset;
}

static bool blocker_valid_target(const struct xseg_request *req)
{
	return blocker_name_valid(req->target, req->targetlen);
}

/* ------------------------------------------------------------------ */
/* Test hook: fsyncs held or failed on request                         */
/* ------------------------------------------------------------------ */

/*
 * --test-fsync-control PATH (tests only): before each fdatasync of a log
 * segment the store asks for, read PATH's first byte: 'b' (block) waits,
 * looking again every millisecond; 'f' (fail) fails the fdatasync with EIO;
 * anything else, or no file, lets it run. Tests hold fsyncs to see what is
 * acknowledged before one, and fail one to see who hears of it.
 */
static int blocker_ctl_state(const char *path)
{
	char c = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	if (fread(&c, 1, 1, f) != 1)
		c = 0;
	fclose(f);
	return c;
}

static int blocker_ctl_fdatasync(void *ctx, int fd)
{
	struct blocker_peer *b = ctx;
	int c;

	while ((c = blocker_ctl_state(b->fsync_ctl)) == 'b')
		usleep(1000);
	if (c == 'f')
		return -EIO;
	return b->inner_io->fdatasync(b->inner_ctx, fd);
}

static ssize_t blocker_ctl_preadv(void *ctx, int fd, const struct iovec *iov,
				  int cnt, uint64_t off)
{
	struct blocker_peer *b = ctx;

	return b->inner_io->preadv(b->inner_ctx, fd, iov, cnt, off);
}

static ssize_t blocker_ctl_pwritev(void *ctx, int fd, const struct iovec *iov,
				   int cnt, uint64_t off)
{
	struct blocker_peer *b = ctx;

	return b->inner_io->pwritev(b->inner_ctx, fd, iov, cnt, off);
}

static int blocker_ctl_preadv_batch(void *ctx, struct blocker_io_req *reqs,
				    int n)
{
	struct blocker_peer *b = ctx;

	return b->inner_io->preadv_batch(b->inner_ctx, reqs, n);
}

/* the wrapped backend's calls with its own ctx; only fdatasync is held or
 * failed. preadv_batch is set in blocker_init when the backend has it. */
static struct blocker_io_ops blocker_ctl_io = {
    "fsync-control", blocker_ctl_preadv, blocker_ctl_pwritev,
    blocker_ctl_fdatasync, NULL};

/* ------------------------------------------------------------------ */
/* The syncer: FUA writes and FLUSHes complete after a shared fsync    */
/* ------------------------------------------------------------------ */

static struct xseg_request *blocker_next(struct xseg_request *req)
{
	return (struct xseg_request *)(uintptr_t)req->peer_priv;
}

static void blocker_atomic_max(uint64_t *m, uint64_t v)
{
	uint64_t cur = __atomic_load_n(m, __ATOMIC_RELAXED);

	while (cur < v &&
	       !__atomic_compare_exchange_n(m, &cur, v, true, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
}

/*
 * Complete a chain after one blocker_flush covering it: rc is that flush's
 * result (0 or a negative errno) for every request. A WRITE's serviced was
 * set when it was appended; a failed flush takes it back (nothing is
 * promised durable).
 */
static void blocker_complete_chain(struct peer *p, struct xseg_request *req,
				   int rc)
{
	while (req) {
		struct xseg_request *next = blocker_next(req);

		req->peer_priv = 0;
		if (rc)
			req->serviced = 0;
		peer_complete(p, req, rc < 0 ? -rc : 0);
		req = next;
	}
}

/*
 * Gather (caller holds y->lock, the chain is not empty): wait while fewer
 * requests are chained than were in the syncer's hands when the last
 * flush ended (those it completed plus those chained meanwhile), for at
 * most half that flush's duration, capped at BLOCKER_GATHER_MAX_NS. The
 * clients it released usually send their next FUA write within that
 * time; flushing without them splits the clients into two groups that
 * alternate, each fsync covering about half of them. A client that
 * leaves costs one such wait.
 */
static void blocker_gather(struct blocker_syncer *y, uint64_t expect,
			   uint64_t flush_ns)
{
	uint64_t wait = flush_ns / 2;
	struct timespec ts;

	if (y->n >= expect || y->stop)
		return;
	if (wait > BLOCKER_GATHER_MAX_NS)
		wait = BLOCKER_GATHER_MAX_NS;
	ts = xtime_in(CLOCK_MONOTONIC, wait); /* y->cond's clock */
	__atomic_add_fetch(&y->gathers, 1, __ATOMIC_RELAXED);
	while (y->n < expect && !y->stop &&
	       pthread_cond_timedwait(&y->cond, &y->lock, &ts) != ETIMEDOUT)
		;
}

static void *blocker_syncer_main(void *arg)
{
	struct peer *p = arg;
	struct blocker_peer *b = peer_priv(p);
	struct blocker_syncer *y = &b->sync;
	uint64_t expect = 0, flush_ns = 0;

	pthread_mutex_lock(&y->lock);
	for (;;) {
		struct xseg_request *chain;
		uint64_t n, t0;
		int rc;

		while (!y->head && !y->stop)
			pthread_cond_wait(&y->cond, &y->lock);
		if (!y->head)
			break; /* stopping and nothing left */
		blocker_gather(y, expect, flush_ns);
		chain = y->head;
		n = y->n;
		y->head = y->tail = NULL;
		y->n = 0;
		pthread_mutex_unlock(&y->lock);
		/* every request of the chain was appended before it was
		 * handed over, so below the tail this flush samples; a sync
		 * error stays sticky in the store (later flushes fail too) */
		t0 = peer_now_ns();
		rc = blocker_flush(b->store);
		flush_ns = peer_now_ns() - t0;
		__atomic_add_fetch(&y->syncs, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&y->reqs, n, __ATOMIC_RELAXED);
		blocker_atomic_max(&y->max_batch, n);
		/* The clients to wait for next time: the chain's and those
		 * chained during the flush, counted before the chain is
		 * released. Counted after, a client already back with its
		 * next write would count twice, and a lone writer would wait
		 * out the gather for a second client that does not exist
		 * (review8 R8-2). */
		pthread_mutex_lock(&y->lock);
		expect = n + y->n;
		pthread_mutex_unlock(&y->lock);
		blocker_complete_chain(p, chain, rc);
		pthread_mutex_lock(&y->lock);
	}
	pthread_mutex_unlock(&y->lock);
	return NULL;
}

/* Hand a request to the syncer: it completes it after the next
 * blocker_flush that starts after this call. Without a syncer (its thread
 * could not start) the flush runs here, as before. Returns 0 (the request
 * is taken). */
static int blocker_sync_later(struct peer *p, struct xseg_request *req)
{
	struct blocker_peer *b = peer_priv(p);
	struct blocker_syncer *y = &b->sync;

	if (!y->running) {
		int rc = blocker_flush(b->store);
		req->peer_priv = 0;
		blocker_complete_chain(p, req, rc);
		return 0;
	}
	req->peer_priv = 0;
	pthread_mutex_lock(&y->lock);
	if (y->tail)
		y->tail->peer_priv = (uint64_t)(uintptr_t)req;
	else
		y->head = req;
	y->tail = req;
	y->n++;
	/* the syncer is either waiting (woken here) or flushing (it looks
	 * at the chain again before it waits) */
	pthread_cond_signal(&y->cond);
	pthread_mutex_unlock(&y->lock);
	return 0;
}

static int blocker_syncer_start(struct peer *p)
{
	struct blocker_peer *b = peer_priv(p);
	struct blocker_syncer *y = &b->sync;
	int rc;

	rc = pthread_mutex_init(&y->lock, NULL);
	if (rc)
		return -rc;
	/* the gather's deadline is on CLOCK_MONOTONIC */
	rc = xtime_cond_init_monotonic(&y->cond);
	if (rc) {
		pthread_mutex_destroy(&y->lock);
		return -rc;
	}
	rc = pthread_create(&y->thread, NULL, blocker_syncer_main, p);
	if (rc) {
		pthread_cond_destroy(&y->cond);
		pthread_mutex_destroy(&y->lock);
		return -rc;
	}
	y->running = true;
	return 0;
}

/* fini (workers gone, nothing is handed over any more): the syncer
 * flushes and completes what it holds, then exits. */
static void blocker_syncer_stop(struct peer *p)
{
	struct blocker_peer *b = peer_priv(p);
	struct blocker_syncer *y = &b->sync;

	if (!y->running)
		return;
	pthread_mutex_lock(&y->lock);
	y->stop = true;
	pthread_cond_signal(&y->cond);
	pthread_mutex_unlock(&y->lock);
	pthread_join(y->thread, NULL);
	y->running = false;
	pthread_cond_destroy(&y->cond);
	pthread_mutex_destroy(&y->lock);
}

/* ------------------------------------------------------------------ */
/* Handlers: each completes synchronously on the worker thread, but   */
/* FUA writes and FLUSH, which the syncer completes.                  */
/* ------------------------------------------------------------------ */

static int blocker_finish(struct peer *p, struct xseg_request *req, int rc)
{
	peer_complete(p, req, rc < 0 ? -rc : 0);
	return 0;
}

static int blocker_read_op(struct peer *p, struct xseg_request *req)
{
	struct blocker_peer *b = peer_priv(p);
	void *data;
	int rc;

	if (!blocker_valid_target(req) || !blocker_valid_range(req))
		return -EINVAL;
	req->serviced = 0;
	if (!req->size)
		return blocker_finish(p, req, 0);
	data = xseg_request_data(peer_seg(p), req);
	if (!data)
		return -EINVAL;
	rc = blocker_read(b->store, req->target, req->targetlen, req->offset,
			  req->size, data);
	if (rc == -ENOENT) { /* never written: zeros, as on a disk */
		memset(data, 0, req->size);
		rc = 0;
	}
	if (!rc)
		req->serviced = req->size;
	return blocker_finish(p, req, rc);
}

static int blocker_write_op(struct peer *p, struct xseg_request *req)
{
	struct blocker_peer *b = peer_priv(p);
	const void *data;
	int rc;

	if (!blocker_valid_target(req) || !blocker_valid_range(req))
		return -EINVAL;
	req->serviced = 0;
	if (!req->size) {
		/* nothing to write; a FUA still promises durability of
		 * what came before it */
		if (req->flags & XSEG_F_FUA)
			return blocker_sync_later(p, req);
		return blocker_finish(p, req, 0);
	}
	data = xseg_request_data(peer_seg(p), req);
	if (!data)
		return -EINVAL;
	/* a FUA write is appended like any other; the syncer's flush makes
	 * it durable before it completes */
	rc = blocker_write(b->store, req->target, req->targetlen, req->offset,
			   req->size, data, 0);
	if (rc)
		return blocker_finish(p, req, rc);
	req->serviced = req->size;
	if (req->flags & XSEG_F_FUA)
		return blocker_sync_later(p, req);
	return blocker_finish(p, req, 0);
}

static int blocker_flush_op(struct peer *p, struct xseg_request *req)
{
	return blocker_sync_later(p, req);
}

static int blocker_delete_op(struct peer *p, struct xseg_request *req)
{
	struct blocker_peer *b = peer_priv(p);

	if (!blocker_valid_target(req))
		return -EINVAL;
	return blocker_finish(
	    p, req, blocker_delete(b->store, req->target, req->targetlen));
}

static int blocker_info_op(struct peer *p, struct xseg_request *req)
{
	struct blocker_peer *b = peer_priv(p);
	struct xseg_reply_info *info = xseg_request_data(peer_seg(p), req);
	uint64_t size;
	int rc;

	if (!blocker_valid_target(req) || !info)
		return -EINVAL;
	rc = blocker_info(b->store, req->target, req->targetlen, &size);
	if (!rc)
		info->size = size;
	return blocker_finish(p, req, rc);
}

static int blocker_copy_op(struct peer *p, struct xseg_request *req)
{
	struct blocker_peer *b = peer_priv(p);
	const struct xseg_request_copy *cp =
	    xseg_request_data(peer_seg(p), req);

	if (!blocker_valid_target(req) || !cp ||
	    !blocker_name_valid(cp->src_target, cp->src_targetlen))
		return -EINVAL;
	return blocker_finish(p, req,
			      blocker_copy(b->store, cp->src_target,
					   cp->src_targetlen, req->target,
					   req->targetlen));
}

static int blocker_hash_op(struct peer *p, struct xseg_request *req)
{
	struct blocker_peer *b = peer_priv(p);
	struct xseg_reply_hash *h = xseg_request_data(peer_seg(p), req);
	int rc;

	if (!blocker_valid_target(req) || !h)
		return -EINVAL;
	_Static_assert(BLOCKER_SCORE_SIZE <= sizeof(h->hash), "hash reply");
	rc = blocker_hash(b->store, req->target, req->targetlen, h->hash);
	if (!rc)
		h->len = BLOCKER_SCORE_SIZE;
	return blocker_finish(p, req, rc);
}

static int blocker_ping_op(struct peer *p, struct xseg_request *req)
{
	return blocker_finish(p, req, 0);
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                          */
/* ------------------------------------------------------------------ */

static int blocker_init(struct peer *p)
{
	struct blocker_peer *b = peer_priv(p);
	int rc;

	if (!b->dir) {
		peer_err("--store DIR is required");
		return -EINVAL;
	}
	b->opts.log = blocker_store_log;
	if (b->fsync_ctl) {
		b->inner_io = b->opts.io ? b->opts.io : &blocker_io_sync;
		b->inner_ctx = b->opts.io_ctx;
		if (b->inner_io->preadv_batch)
			blocker_ctl_io.preadv_batch = blocker_ctl_preadv_batch;
		b->opts.io = &blocker_ctl_io;
		b->opts.io_ctx = b;
	}
	if (b->create) {
		rc = blocker_create(b->dir, &b->opts);
		if (rc && rc != -EEXIST) {
			peer_err("%s: cannot create store: %s", b->dir,
				 strerror(-rc));
			return rc;
		}
		if (!rc)
			peer_info("%s: created store (chunk size "
				  "%" PRIu32 ")",
				  b->dir, b->opts.chunk_size);
	}
	if (b->opts.truncate_at_damage)
		peer_warn(
		    "%s: --truncate-at-damage: damaged or missing flushed "
		    "data will be cut off the log, with everything after "
		    "it",
		    b->dir);
	if (b->opts.reserve_bytes == BLOCKER_RESERVE_NONE)
		peer_warn("%s: --reserve 0: no space reserve; if the disk "
			  "fills, DELETE and GC find no room and the store "
			  "stays read-only until space is freed outside it",
			  b->dir);
	rc = blocker_open(b->dir, &b->opts, &b->store);
	if (rc == -EUCLEAN)
		peer_err("%s: flushed data is damaged or missing (see above; "
			 "run 'blockerctl check %s'); --truncate-at-damage "
			 "starts anyway and loses everything after the damage",
			 b->dir, b->dir);
	if (rc) {
		peer_err("%s: cannot open store: %s%s", b->dir, strerror(-rc),
			 rc == -ENOENT && !b->create
			     ? " (use --create to make a new one)"
			     : "");
		return rc;
	}
	rc = blocker_syncer_start(p);
	if (rc)
		peer_warn("%s: no syncer thread (%s): FUA writes and FLUSH "
			  "wait for their fsync on the worker",
			  b->dir, strerror(-rc));
	peer_info(
	    "%s: store open, io %s%s, read verification %s, gc "
	    "threshold %u%%",
	    b->dir, b->opts.io->name, b->opts.mmap_reads ? ", mmap reads" : "",
	    b->opts.verify_reads ? "on" : "off", b->opts.gc_threshold_pct);
	return 0;
}

static void blocker_fini(struct peer *p)
{
	struct blocker_peer *b = peer_priv(p);
	int rc;

	if (!b->store)
		return;
	/* requests the drain left behind (its timeout, a second SIGTERM)
	 * are completed before the port is released */
	blocker_syncer_stop(p);
	rc = blocker_close(b->store);
	b->store = NULL;
	if (rc) {
		peer_err("%s: close: %s", b->dir, strerror(-rc));
		peer_request_stop(p, 1);
	} else {
		peer_info("%s: store closed cleanly", b->dir);
	}
}

static void blocker_stats_op(struct peer *p)
{
	struct blocker_peer *b = peer_priv(p);
	struct blocker_stats st;

	if (!b->store || blocker_get_stats(b->store, &st))
		return;
	peer_info("stats: blocker objects %" PRIu64 " chunks %" PRIu64
		  " stored %" PRIu64 " logical %" PRIu64 " log %" PRIu64
		  " index %" PRIu64 " B",
		  st.objects, st.chunks, st.chunk_bytes, st.logical_bytes,
		  st.log_bytes, st.index_bytes);
	peer_info("stats: blocker reads %" PRIu64 " writes %" PRIu64
		  " dedup hits %" PRIu64 " zero chunks %" PRIu64
		  " flushes %" PRIu64 " fsyncs %" PRIu64
		  " verify failures %" PRIu64 " read errors %" PRIu64,
		  st.reads, st.writes, st.dedup_hits, st.zero_chunks,
		  st.flushes, st.fsyncs, st.verify_failures, st.read_errors);
	peer_info("stats: blocker reclaimable %" PRIu64 " of %" PRIu64
		  " closed log bytes; gc runs %" PRIu64 " segments removed "
		  "%" PRIu64 " copied %" PRIu64 " reclaimed %" PRIu64
		  " failures %" PRIu64 " sealed %" PRIu64,
		  st.reclaimable_bytes, st.closed_bytes, st.gc_runs,
		  st.gc_segments_removed, st.gc_bytes_copied,
		  st.gc_bytes_reclaimed, st.gc_failures, st.gc_segments_sealed);
	peer_info("stats: blocker reserve %" PRIu64 " of %" PRIu64 " B%s",
		  st.reserve_bytes, st.reserve_target,
		  st.reserve_target ? "" : " (off)");
	uint64_t ys = __atomic_load_n(&b->sync.syncs, __ATOMIC_RELAXED);
	uint64_t yr = __atomic_load_n(&b->sync.reqs, __ATOMIC_RELAXED);
	peer_info("stats: blocker syncer flushes %" PRIu64 " covering %" PRIu64
		  " FUA writes and FLUSHes (%.2f each, at most %" PRIu64
		  "), %" PRIu64 " gathered",
		  ys, yr, ys ? (double)yr / (double)ys : 0.0,
		  __atomic_load_n(&b->sync.max_batch, __ATOMIC_RELAXED),
		  __atomic_load_n(&b->sync.gathers, __ATOMIC_RELAXED));
	if (st.degraded_errno)
		peer_warn("stats: blocker DEGRADED (%s): %s",
			  strerror(st.degraded_errno), st.degraded_reason);
}

/* The port's statistics area (xsegctl stats): the store's counters. */
static uint32_t blocker_stats_table(struct peer *p, struct xseg_stat *st,
				    uint32_t max)
{
	struct blocker_peer *b = peer_priv(p);
	struct blocker_stats bs;
	uint32_t n = 0;

	if (!b->store || blocker_get_stats(b->store, &bs))
		return 0;
#define ST(f) peer_stat(st, &n, max, #f, bs.f)
	ST(objects);
	ST(chunks);
	ST(chunk_bytes);
	ST(logical_bytes);
	ST(log_bytes);
	ST(index_bytes);
	ST(reads);
	ST(writes);
	ST(dedup_hits);
	ST(zero_chunks);
	ST(flushes);
	ST(fsyncs);
	ST(verify_failures);
	ST(read_errors);
	ST(replayed_records);
	ST(truncated_bytes);
	ST(closed_bytes);
	ST(reclaimable_bytes);
	ST(gc_runs);
	ST(gc_segments_removed);
	ST(gc_bytes_copied);
	ST(gc_bytes_reclaimed);
	ST(gc_failures);
	ST(gc_segments_sealed);
	ST(segment_size);
	ST(reserve_bytes);
	ST(reserve_target);
#undef ST
	peer_stat(st, &n, max, "degraded_errno", (uint64_t)bs.degraded_errno);
	peer_stat(st, &n, max, "sync_flushes",
		  __atomic_load_n(&b->sync.syncs, __ATOMIC_RELAXED));
	peer_stat(st, &n, max, "sync_requests",
		  __atomic_load_n(&b->sync.reqs, __ATOMIC_RELAXED));
	peer_stat(st, &n, max, "sync_gathers",
		  __atomic_load_n(&b->sync.gathers, __ATOMIC_RELAXED));
	return n;
}

static const struct peer_ops blocker_ops = {
    .type = "blocker",
    .summary = "Serve a venti-style content-addressed object store.",
    .priv_size = sizeof(struct blocker_peer),
    .options = blocker_options,
    .options_help = blocker_options_help,
    .defaults = blocker_defaults,
    .parse_opt = blocker_parse_opt,
    .init = blocker_init,
    .fini = blocker_fini,
    .stats = blocker_stats_op,
    .stats_table = blocker_stats_table,
    .handlers =
	{
	    [XSEG_OP_READ] = blocker_read_op,
	    [XSEG_OP_WRITE] = blocker_write_op,
	    [XSEG_OP_FLUSH] = blocker_flush_op,
	    [XSEG_OP_DELETE] = blocker_delete_op,
	    [XSEG_OP_INFO] = blocker_info_op,
	    [XSEG_OP_COPY] = blocker_copy_op,
	    [XSEG_OP_HASH] = blocker_hash_op,
	    [XSEG_OP_PING] = blocker_ping_op,
	},
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &blocker_ops);
}
