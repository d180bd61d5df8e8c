/* SPDX-License-Identifier: MIT */
/*
 * cached: the object cache peer. This file is the glue to the peer
 * framework and the segment: options, handlers, requests to the next
 * port, statistics, plug at start and unplug at shutdown. The cache
 * itself is in object.c and bucket.c (see cached.h, docs/cached.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cached.h"
#include "peer.h"

/*
 * jemalloc's options for this process (read by jemalloc at its first
 * allocation; the MALLOC_CONF environment variable still overrides them,
 * e.g. MALLOC_CONF=thp:default). thp:always advises transparent huge
 * pages for everything jemalloc maps: the arrays cached does not map
 * itself (cached_huge_calloc), above all the xcache hash table's buckets,
 * which liburcu calloc's and every hit reads at random (16 MiB at 1 M
 * objects: with 4 KiB pages a TLB miss per lookup). Measured in-process
 * at 1 M objects: about 10 % less CPU per read hit (docs/cached.md).
 * Unused where jemalloc is not linked (sanitizer builds).
 */
const char *malloc_conf = "thp:always,metadata_thp:auto";

enum {
	OPT_CACHE_SIZE = 256,
	OPT_BUCKET_SIZE,
	OPT_OBJECT_SIZE,
	OPT_MAX_OBJECTS,
	OPT_POLICY,
	OPT_DIRTY_THRESHOLD,
	OPT_MAX_REQ_SIZE,
	OPT_MAX_INFLIGHT,
	OPT_NEXT_PORT,
	OPT_PLUG,
	OPT_NO_PREFAULT,
	OPT_FLUSH_TIMEOUT,
	OPT_SPACE_WAIT,
};

struct cached_peer {
	struct cached c;
	struct cached_config cfg;
	struct peer *p;
	struct xseg *seg;
	uint32_t port;
	uint32_t next_port;
	bool plug;
	bool plugged; /* we set the redirect of next_port to us */
	bool dirty_threshold_set;
	bool max_objects_set;
	bool initialised;
	bool keep_redirect; /* flush timed out while plugged: stay in the
			       path so nothing reads the stale store */
	uint64_t flush_timeout_ns;
};

static const struct option cached_options[] = {
    {"cache-size", required_argument, NULL, OPT_CACHE_SIZE},
    {"bucket-size", required_argument, NULL, OPT_BUCKET_SIZE},
    {"object-size", required_argument, NULL, OPT_OBJECT_SIZE},
    {"max-objects", required_argument, NULL, OPT_MAX_OBJECTS},
    {"write-policy", required_argument, NULL, OPT_POLICY},
    {"dirty-threshold", required_argument, NULL, OPT_DIRTY_THRESHOLD},
    {"max-req-size", required_argument, NULL, OPT_MAX_REQ_SIZE},
    {"max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT},
    {"next-port", required_argument, NULL, OPT_NEXT_PORT},
    {"plug", no_argument, NULL, OPT_PLUG},
    {"no-prefault", no_argument, NULL, OPT_NO_PREFAULT},
    {"flush-timeout", required_argument, NULL, OPT_FLUSH_TIMEOUT},
    {"space-wait", required_argument, NULL, OPT_SPACE_WAIT},
    {NULL, 0, NULL, 0},
};

static const char cached_options_help[] =
    "      --next-port N         port of the store behind the cache "
    "(required)\n"
    "      --cache-size SIZE     bucket memory (default 128M)\n"
    "      --bucket-size SIZE    bucket size, a power of two (default "
    "4k)\n"
    "      --object-size SIZE    largest object size (default 4M)\n"
    "      --max-objects N       objects indexed at once (default 4 x "
    "cache/object)\n"
    "      --write-policy P      writeback (default) or writethrough\n"
    "      --dirty-threshold SIZE  write-back: flush above this much "
    "dirty data\n"
    "                          (default half the cache)\n"
    "      --max-req-size SIZE   largest request to the next port "
    "(default 128k)\n"
    "      --max-inflight N      requests to the next port in flight "
    "(default 32)\n"
    "      --plug                redirect the next port to this one at "
    "start, and\n"
    "                          remove the redirect at shutdown (after "
    "flushing)\n"
    "      --no-prefault         do not touch the cache memory at start\n"
    "      --flush-timeout TIME  at shutdown give up flushing when no dirty "
    "data\n"
    "                          reached the next port for TIME (default "
    "60s,\n"
    "                          bare number = s)\n"
    "      --space-wait TIME     while the next port refuses writes with "
    "an error\n"
    "                          other than ENOSPC/EDQUOT/EROFS, requests "
    "wait for\n"
    "                          cache space at most TIME after the first "
    "failure,\n"
    "                          then fail with it (default 30s, 0 = until "
    "it takes\n"
    "                          writes again; ENOSPC fails them at once)\n";

static void cached_defaults(struct peer *p)
{
	struct cached_peer *cp = peer_priv(p);

	cp->next_port = XSEG_NOPORT;
	cp->cfg.cache_size = 128ULL << 20;
	cp->cfg.bucket_size = 4096;
	cp->cfg.object_size = 4ULL << 20;
	cp->cfg.policy = CACHED_WRITEBACK;
	cp->cfg.max_req_size = 128 << 10;
	cp->cfg.max_inflight = 32;
	cp->cfg.prefault = true;
	cp->flush_timeout_ns = 60ULL * 1000000000ULL;
	cp->cfg.space_wait_ns = 30ULL * 1000000000ULL;
}

static int cached_parse_opt(struct peer *p, int val, const char *arg)
{
	struct cached_peer *cp = peer_priv(p);
	uint64_t v;
	int rc;

	switch (val) {
	case OPT_CACHE_SIZE:
		return peer_parse_size(arg, &cp->cfg.cache_size);
	case OPT_BUCKET_SIZE:
		rc = peer_parse_size(arg, &v);
		if (rc)
			return rc;
		if (v > (1u << 30))
			return -ERANGE;
		cp->cfg.bucket_size = (uint32_t)v;
		return 0;
	case OPT_OBJECT_SIZE:
		return peer_parse_size(arg, &cp->cfg.object_size);
	case OPT_MAX_OBJECTS:
		rc = peer_parse_u64(arg, &v);
		if (rc)
			return rc;
		if (!v || v > (1u << 30))
			return -ERANGE;
		cp->cfg.max_objects = (uint32_t)v;
		cp->max_objects_set = true;
		return 0;
	case OPT_POLICY:
		if (!strcmp(arg, "writeback") || !strcmp(arg, "write-back"))
			cp->cfg.policy = CACHED_WRITEBACK;
		else if (!strcmp(arg, "writethrough") ||
			 !strcmp(arg, "write-through"))
			cp->cfg.policy = CACHED_WRITETHROUGH;
		else
			return -EINVAL;
		return 0;
	case OPT_DIRTY_THRESHOLD:
		cp->dirty_threshold_set = true;
		return peer_parse_size(arg, &cp->cfg.dirty_threshold);
	case OPT_MAX_REQ_SIZE:
		return peer_parse_size(arg, &cp->cfg.max_req_size);
	case OPT_MAX_INFLIGHT:
		rc = peer_parse_u64(arg, &v);
		if (rc)
			return rc;
		if (!v || v > 65536)
			return -ERANGE;
		cp->cfg.max_inflight = (uint32_t)v;
		return 0;
	case OPT_NEXT_PORT:
		rc = peer_parse_u64(arg, &v);
		if (rc)
			return rc;
		if (v >= XSEG_NOPORT)
			return -ERANGE;
		cp->next_port = (uint32_t)v;
		return 0;
	case OPT_PLUG:
		cp->plug = true;
		return 0;
	case OPT_NO_PREFAULT:
		cp->cfg.prefault = false;
		return 0;
	case OPT_FLUSH_TIMEOUT:
		return peer_parse_duration(arg, 1000000000ULL,
					   &cp->flush_timeout_ns);
	case OPT_SPACE_WAIT:
		return peer_parse_duration(arg, 1000000000ULL,
					   &cp->cfg.space_wait_ns);
	}
	return -EINVAL;
}

/* ------------------------------------------------------------------ */
/* liburcu registration of the framework's threads                     */
/* ------------------------------------------------------------------ */

static pthread_key_t cached_urcu_key;
static pthread_once_t cached_urcu_once = PTHREAD_ONCE_INIT;
static __thread bool cached_urcu_registered;

static void cached_urcu_exit(void *arg)
{
	(void)arg;
	if (cached_urcu_registered) {
		xcache_thread_unregister();
		cached_urcu_registered = false;
	}
}

static void cached_urcu_key_init(void)
{
	pthread_key_create(&cached_urcu_key, cached_urcu_exit);
}

/* Worker threads belong to the framework: register each the first time
 * it enters cached, and unregister it when it exits (key destructor). */
static inline void cached_thread_enter(void)
{
	if (__builtin_expect(cached_urcu_registered, 1))
		return;
	pthread_once(&cached_urcu_once, cached_urcu_key_init);
	xcache_thread_register();
	cached_urcu_registered = true;
	pthread_setspecific(cached_urcu_key, (void *)1);
}

/* ------------------------------------------------------------------ */
/* I/O to the segment                                                  */
/* ------------------------------------------------------------------ */

static void *io_data(struct cached *c, struct xseg_request *req)
{
	struct cached_peer *cp = c->io_priv;

	return xseg_request_data(cp->seg, req);
}

static void io_complete(struct cached *c, struct xseg_request *req, int error)
{
	struct cached_peer *cp = c->io_priv;

	peer_complete(cp->p, req, error);
}

static int io_forward(struct cached *c, struct xseg_request *req)
{
	struct cached_peer *cp = c->io_priv;

	return peer_forward(cp->p, req, cp->next_port);
}

static int io_submit(struct cached *c, struct cached_nreq *n)
{
	struct cached_peer *cp = c->io_priv;
	struct xseg_request *req = n->req;
	uint16_t op = req->op;
	uint32_t flags = req->flags;
	uint64_t offset = req->offset, size = req->size;
	/* an uncached DELETE has no object: its client request's name */
	const char *name =
	    n->obj ? xcache_entry_name(n->obj->entry) : n->cio->name;
	size_t len = strlen(name);
	int rc;

	/* the buffer is big enough, so prep keeps it (and its contents) */
	rc = xseg_prep_request(cp->seg, req, (uint32_t)len, size);
	if (rc < 0)
		return rc;
	req->op = op;
	req->flags = flags;
	req->offset = offset;
	req->size = size;
	req->user = (uint64_t)(uintptr_t)n;
	memcpy(xseg_request_target(req), name, len);
	return xseg_submit(cp->seg, req, cp->next_port);
}

/* The acknowledged write-back buckets are counted in our own port's
 * unflushed word, the one the reaper of a dead cached (or the release of
 * its port) reads: no second counter on the write path. */
static void io_unflushed(struct cached *c, int64_t delta)
{
	struct cached_peer *cp = c->io_priv;

	xseg_port_unflushed_add(cp->seg, cp->port, delta);
}

/* A flush write failed (rate-limited by the cache: the first failure per
 * errno, then once a minute), or writes go through again (error 0): the
 * operator learns from cached.log that the store refuses writes (review11
 * N-D: nothing was logged while the cache filled with unwritable data). */
static void io_flush_error(struct cached *c, int error, uint64_t suppressed)
{
	struct cached_peer *cp = c->io_priv;
	uint64_t bs = cp->cfg.bucket_size;

	if (!error) {
		peer_info("cached: port %" PRIu32 " takes writes again; "
			  "flushing the %" PRIu64 " dirty bytes left",
			  cp->next_port, cached_unclean(c) * bs);
		return;
	}
	char more[64] = "";

	if (suppressed)
		snprintf(more, sizeof(more),
			 " (%" PRIu64 " more failures since the last report)",
			 suppressed);
	char wait[96];

	if (error == ENOSPC || error == EDQUOT || error == EROFS)
		snprintf(wait, sizeof(wait), "fail with it");
	else if (cp->cfg.space_wait_ns)
		snprintf(wait, sizeof(wait),
			 "wait for it to take writes, then fail after %" PRIu64
			 " ms of failures",
			 cp->cfg.space_wait_ns / 1000000);
	else
		snprintf(wait, sizeof(wait),
			 "wait until it takes writes (--space-wait 0)");
	peer_warn("cached: port %" PRIu32 " refuses writes: %s%s; %" PRIu64
		  " dirty bytes kept and retried every second; reads the "
		  "cache has no room for are served uncached, other requests "
		  "it has no room for %s",
		  cp->next_port, strerror(error), more, cached_unclean(c) * bs,
		  wait);
}

static const char *cached_op_name(uint16_t op)
{
	switch (op) {
	case XSEG_OP_READ:
		return "READ";
	case XSEG_OP_WRITE:
		return "WRITE";
	case XSEG_OP_INFO:
		return "INFO";
	case XSEG_OP_HASH:
		return "HASH";
	case XSEG_OP_DELETE:
		return "DELETE";
	case XSEG_OP_COPY:
		return "COPY";
	case XSEG_OP_FLUSH:
		return "FLUSH";
	}
	return "request";
}

/* A request needed cache space while the next port refuses writes and
 * was failed with its errno (rate-limited by the cache: the first, then
 * once a minute). */
static void io_space_failed(struct cached *c, uint16_t op, const char *name,
			    int error, uint64_t suppressed)
{
	struct cached_peer *cp = c->io_priv;
	char more[80] = "";

	if (suppressed)
		snprintf(more, sizeof(more),
			 " (%" PRIu64 " more since the last report)",
			 suppressed);
	peer_warn("cached: %s of object '%s' failed: %s: no free bucket or "
		  "object slot in the cache, and port %" PRIu32
		  " refuses the writes that would free one%s",
		  cached_op_name(op), name,
		  strerror(cached_client_error(error)), cp->next_port, more);
}

static const struct cached_io_ops cached_xseg_io = {
    .data = io_data,
    .complete = io_complete,
    .forward = io_forward,
    .submit = io_submit,
    .flush_error = io_flush_error,
    .space_failed = io_space_failed,
    .unflushed = io_unflushed,
};

/* ------------------------------------------------------------------ */
/* Handlers                                                            */
/* ------------------------------------------------------------------ */

/* A request sent to a port other than the next one and redirected here
 * (xsegctl redirect Q C for Q not the next port, set before this cache
 * marked its port, which libxseg refuses after: review21b F1): served, it
 * would read and write the next port's store and share buckets with that
 * port's objects of the same name. Refused with EXDEV; logged at most
 * every CACHED_FOREIGN_LOG_NS (one clock for the process). Not a request
 * forwarded by a cache in front of this one (a chain C1 -> C2: xseg_forward
 * keeps dst, C1's own port): dst is then a live cache whose next port is
 * this one (review21c F5); looked at only off the fast path. 0: serve it. */
#define CACHED_FOREIGN_LOG_NS (10ULL * 1000000000ULL)
static int cached_check_foreign(struct cached_peer *cp,
				const struct xseg_request *req)
{
	static uint64_t logged_ns; /* __atomic */
	struct xseg_port_info pi;
	uint64_t now, last;

	if (req->dst == cp->next_port || req->dst == cp->port)
		return 0;
	if (!xseg_port_info(cp->seg, req->dst, &pi) && pi.alive && pi.cache &&
	    pi.cache_next == cp->port)
		return 0;
	now = peer_now_ns();
	last = __atomic_load_n(&logged_ns, __ATOMIC_RELAXED);

	if ((!last || now - last >= CACHED_FOREIGN_LOG_NS) &&
	    __atomic_compare_exchange_n(&logged_ns, &last, now, false,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		peer_err("cached: port %" PRIu32 ": a request for port %" PRIu32
			 " was redirected here, but this cache serves the "
			 "path of port %" PRIu32 " only: refused (EXDEV); "
			 "remove that redirect (xsegctl unredirect)",
			 cp->port, req->dst, cp->next_port);
	return -EXDEV;
}

static int cached_handle(struct peer *p, struct xseg_request *req)
{
	struct cached_peer *cp = peer_priv(p);
	int rc;

	/* Plugged in front of the next port, our own requests to it are
	 * redirected back to us: pass them on, bypassing the redirect. */
	if (req->src == cp->port)
		return peer_forward(p, req, cp->next_port);
	rc = cached_check_foreign(cp, req);
	if (rc)
		return rc;
	cached_thread_enter();
	return cached_submit_request(&cp->c, req);
}

static int cached_passthrough(struct peer *p, struct xseg_request *req)
{
	struct cached_peer *cp = peer_priv(p);
	/* a PING for another port would report the next port's liveness */
	int rc = cached_check_foreign(cp, req);

	return rc ? rc : peer_forward(p, req, cp->next_port);
}

static void cached_on_reply(struct peer *p, struct xseg_request *req)
{
	struct cached_peer *cp = peer_priv(p);
	struct cached_nreq *n = (struct cached_nreq *)(uintptr_t)req->user;

	if (!n || n < cp->c.nreqs || n >= cp->c.nreqs + cp->cfg.max_inflight ||
	    n->req != req || (!n->obj && !n->cio)) {
		peer_warn("cached: port %" PRIu32 ": stray reply to request "
			  "%" PRIu64 " (%s), dropped",
			  cp->port, req->id, peer_op_name(req->op));
		return;
	}
	cached_thread_enter();
	cached_nreq_done(&cp->c, n, req->error, req->serviced);
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                          */
/* ------------------------------------------------------------------ */

static void cached_sleep_ms(unsigned ms)
{
	struct timespec ts = {0, (long)ms * 1000000L};

	nanosleep(&ts, NULL);
}

/* Plug: requests addressed to the next port come to us from now on.
 * Requests the next port took before the redirect may still be in flight
 * there; wait (bounded) until it has answered them, so that nothing we
 * fetch can be older than a write it acknowledges afterwards. */
struct cached_held;
static unsigned cached_pump(struct cached_peer *cp, struct cached_held *hold);

/* A SIGTERM or SIGINT arrived: the framework blocks them in every thread
 * until its main loop waits for them, so during init they are only
 * pending. */
static bool cached_stop_pending(void)
{
	sigset_t set;

	if (sigpending(&set) < 0)
		return false;
	return sigismember(&set, SIGTERM) == 1 ||
	       sigismember(&set, SIGINT) == 1;
}

/* The next port has answered every request it took (none queued, none
 * held). Exact only while nothing else sends to it: after the redirect
 * every new request comes to us. */
static bool cached_next_settled(struct cached_peer *cp, bool *err)
{
	struct xseg_port_info pi;

	if (xseg_port_info(cp->seg, cp->next_port, &pi) < 0) {
		*err = true;
		return true;
	}
	return !pi.request_depth &&
	       pi.accepted <= pi.served + pi.failed + pi.forwarded;
}

/*
 * Redirect the next port to us, then wait until it has answered the
 * requests it took before the redirect: until then a read cached fetches
 * could be older than a write the next port acknowledges afterwards, and
 * every later read would hit that stale copy. The wait has no deadline
 * (review9 R9-9: it used to end silently after 5 s): cached is not serving
 * yet, so waiting costs only the latency of the requests queued on our
 * port, while giving up risks wrong data. A warning says so after 5 s and
 * every 30 s after. The counters must then stay settled for 50 ms: a
 * submit that read the path just before the redirect and enqueued on the
 * next port after our first look shows up within that quiet period (a
 * client preempted for longer is still possible; only libxseg could close
 * that window). A stop signal (SIGTERM, SIGINT) pending meanwhile abandons
 * the plug: the redirect is taken back and what reached our port is passed
 * on to the next port (the cache is empty, so that is coherent); the main
 * loop then stops cached. A redirect refused (another cache is plugged
 * there: safety20 F1 and review20; its data unflushed) fails cached's start
 * with a message naming that port: serving its own port unplugged, cached
 * would be a cache beside the path, not in it. 0 or the negative errno.
 */
static int cached_plug(struct cached_peer *cp)
{
	uint64_t start = peer_now_ns(), warn_at = start + 5000000000ULL;
	uint64_t settled_since = 0;
	uint32_t names;
	bool err = false;
	int rc;

	/* -EAGAIN: the redirect's old target is dead and requests it sent
	 * still run at the next port (about a second per try), or another
	 * process changed the redirect meanwhile: try again, while no stop
	 * is asked for */
	for (unsigned tries = 0;; tries++) {
		rc = xseg_set_path_next(cp->seg, cp->next_port, cp->port);
		if (rc != -EAGAIN || cached_stop_pending())
			break;
		if (tries % 30 == 0)
			peer_warn("cached: port %" PRIu32
				  "'s redirect is still "
				  "changing (a dead cache's requests still "
				  "run there); retrying the plug",
				  cp->next_port);
	}
	if (rc < 0) {
		/* Refused: a cached serving its own port unplugged would be
		 * a cache next to the path, not in it. Exit instead. */
		struct xseg_port_info in = {0};
		uint32_t cur = xseg_get_path_next(cp->seg, cp->next_port);
		char target[96] = "";

		if (cur != XSEG_NOPORT && !xseg_port_info(cp->seg, cur, &in))
			snprintf(target, sizeof(target),
				 " (redirected to port %" PRIu32
				 ", %s pid %ld)",
				 cur, in.peer_type[0] ? in.peer_type : "free",
				 (long)in.owner_pid);
		peer_err("cached: cannot plug in front of port %" PRIu32
			 "%s: %s%s",
			 cp->next_port, target, strerror(-rc),
			 rc == -EPERM	? ": another cache is plugged there; "
					  "stop it first (xsegctl stack "
					  "unplug-cached)"
			 : rc == -EBUSY ? ": the cache there holds unflushed "
					  "data or is being reclaimed"
					: "");
		return rc;
	}
	cp->plugged = true;
	for (;;) {
		uint64_t now = peer_now_ns();

		if (cached_next_settled(cp, &err)) {
			if (err) {
				peer_warn("cached: cannot read port %" PRIu32
					  "'s counters: plugged without "
					  "waiting for its earlier requests",
					  cp->next_port);
				break;
			}
			if (!settled_since)
				settled_since = now;
			else if (now - settled_since >= 50000000ULL)
				break;
		} else {
			settled_since = 0;
		}
		if (cached_stop_pending()) {
			peer_warn("cached: stop requested while waiting for "
				  "port %" PRIu32 "'s earlier requests: plug "
				  "abandoned",
				  cp->next_port);
			if (xseg_get_path_next(cp->seg, cp->next_port) ==
			    cp->port)
				xseg_clear_path_next(cp->seg, cp->next_port);
			cp->plugged = false;
			cached_pump(cp, NULL);
			return 0; /* the main loop stops cached */
		}
		if (now >= warn_at) {
			peer_warn("cached: port %" PRIu32 " has not answered "
				  "the requests it took before the plug after "
				  "%.0f s; still waiting (serving now could "
				  "cache data older than a write it "
				  "acknowledges later); requests to it wait "
				  "meanwhile",
				  cp->next_port, (double)(now - start) / 1e9);
			warn_at = now + 30000000000ULL;
		}
		cached_sleep_ms(1);
	}
	/* Another process's redirect change can still land between its
	 * last look at our port and its CAS (review20 F1-F: a window of two
	 * instructions, set_path_next_from in xseg/port.c): we would then
	 * be beside the path, not in it. Still empty: pass on what reached
	 * us and fail the start, loudly, as a refused plug does. */
	names = xseg_get_path_next(cp->seg, cp->next_port);
	if (names != cp->port) {
		char now[32] = "no port";

		if (names != XSEG_NOPORT)
			snprintf(now, sizeof(now), "port %" PRIu32, names);
		peer_err("cached: port %" PRIu32 "'s redirect was changed by "
			 "another process while cached plugged in front of it "
			 "(it names %s now, not port %" PRIu32 "): not in the "
			 "path, so not serving; exiting",
			 cp->next_port, now, cp->port);
		cp->plugged = false;
		cached_pump(cp, NULL);
		return -EBUSY;
	}
	peer_info("cached: plugged in front of port %" PRIu32 " (waited %.3f s "
		  "for its earlier requests)",
		  cp->next_port, (double)(peer_now_ns() - start) / 1e9);
	return 0;
}

static void cached_fini(struct peer *p);

static int cached_init_peer(struct peer *p)
{
	struct cached_peer *cp = peer_priv(p);
	struct xseg_config sc;
	char why[160];
	int rc;

	cp->p = p;
	cp->seg = peer_seg(p);
	cp->port = peer_port(p);
	if (cp->next_port == XSEG_NOPORT) {
		peer_err("cached: no --next-port given");
		return -EINVAL;
	}
	if (cp->next_port >= xseg_nr_ports(cp->seg) ||
	    cp->next_port == cp->port) {
		peer_err("cached: bad next port %" PRIu32, cp->next_port);
		return -EINVAL;
	}
	xseg_get_config(cp->seg, &sc);
	if (!cp->max_objects_set) {
		uint64_t m =
		    4 * (cp->cfg.cache_size /
			 (cp->cfg.object_size ? cp->cfg.object_size : 1));
		cp->cfg.max_objects = (uint32_t)(m < 16		  ? 16
						 : m > (1u << 20) ? (1u << 20)
								  : m);
	}
	if (!cp->dirty_threshold_set)
		cp->cfg.dirty_threshold = cp->cfg.cache_size / 2;
	cp->cfg.nr_cios = sc.nr_requests + 64;
	rc = cached_validate_config(&cp->cfg, why, sizeof(why));
	if (rc) {
		peer_err("cached: %s", why);
		return rc;
	}
	cached_thread_enter();
	rc = cached_init(&cp->c, &cp->cfg);
	if (rc) {
		peer_err("cached: cannot set up the cache: %s", strerror(-rc));
		return rc;
	}
	cp->initialised = true;
	/* Only cached takes itself out of a path (its unplug flushes and
	 * stops first): another process's unredirect would leave it serving
	 * buckets that writes bypassing it made stale once redirected to
	 * again (safety20 F1). With the port it serves: nobody can put it
	 * in another port's path, where that port's writes would land in
	 * ours (review20 F1-J). Before any redirect, --plug or by hand. */
	rc = xseg_port_mark_cache(cp->seg, cp->port, cp->next_port);
	if (rc) {
		peer_err("cached: cannot mark port %" PRIu32 " as a cache: %s",
			 cp->port, strerror(-rc));
		goto fail;
	}
	cp->c.io = &cached_xseg_io;
	cp->c.io_priv = cp;
	for (uint32_t i = 0; i < cp->cfg.max_inflight; i++) {
		struct xseg_request *req;

		rc = xseg_get_request(cp->seg, cp->port, &req);
		if (!rc) {
			rc = xseg_prep_request(cp->seg, req, XSEG_MAX_TARGETLEN,
					       cp->cfg.max_req_size);
			if (rc)
				xseg_put_request(cp->seg, req);
		}
		if (rc) {
			peer_err("cached: cannot reserve request %" PRIu32
				 " of %" PRIu32 " for the next port: %s",
				 i, cp->cfg.max_inflight, strerror(-rc));
			goto fail;
		}
		req->user = (uint64_t)(uintptr_t)&cp->c.nreqs[i];
		cp->c.nreqs[i].req = req;
	}
	peer_info("cached: %" PRIu64 " MiB in %" PRIu32 " buckets of %" PRIu32
		  " bytes, objects of %" PRIu64 " bytes, max %" PRIu32
		  " objects, %s, dirty threshold %" PRIu64
		  " bytes, next port %" PRIu32 " (at most %" PRIu32
		  " requests of %" PRIu64 " bytes in flight)%s",
		  cp->cfg.cache_size >> 20, cp->c.pool.nr, cp->cfg.bucket_size,
		  cp->cfg.object_size, cp->cfg.max_objects,
		  cp->cfg.policy == CACHED_WRITEBACK ? "write-back"
						     : "write-through",
		  cp->cfg.dirty_threshold, cp->next_port, cp->cfg.max_inflight,
		  cp->cfg.max_req_size,
		  cp->cfg.prefault ? ", memory pre-faulted" : "");
	if (cp->plug) {
		rc = cached_plug(cp);
		if (rc)
			goto fail;
	}
	return 0;
fail:
	/* the framework runs fini only after a successful init: give back
	 * the requests reserved so far and the cache's memory here */
	cached_fini(p);
	return rc;
}

/* Hand every request queued on our port to the next port: our own ones
 * (redirected back while plugged) always; client ones only when hold is
 * NULL, else they are kept on the hold list until the cache is clean. */
struct cached_held {
	struct xseg_request **reqs;
	size_t nr, cap;
};

static unsigned cached_pump(struct cached_peer *cp, struct cached_held *hold)
{
	struct xseg_request *req;
	unsigned n = 0;

	while (xseg_accept(cp->seg, cp->port, &req) == 0) {
		n++;
		if (req->src != cp->port && hold) {
			if (hold->nr == hold->cap) {
				size_t cap = hold->cap ? 2 * hold->cap : 64;
				void *r = realloc(hold->reqs,
						  cap * sizeof(*hold->reqs));
				if (!r) {
					xseg_respond(cp->seg, req, ENOMEM);
					continue;
				}
				hold->reqs = r;
				hold->cap = cap;
			}
			hold->reqs[hold->nr++] = req;
			continue;
		}
		if (xseg_forward(cp->seg, req, cp->next_port) < 0)
			xseg_respond(cp->seg, req, cached_client_error(ENXIO));
	}
	return n;
}

/* Buckets of acknowledged write-back data not yet at the next port: our
 * port's unflushed count (cached keeps it there, see io_unflushed). */
static uint64_t cached_stop_acked(struct cached_peer *cp)
{
	struct xseg_port_info pi;

	if (xseg_port_info(cp->seg, cp->port, &pi) < 0)
		return UINT64_MAX; /* unknown: assume the worst */
	return pi.unflushed;
}

/* cached_stop: retry pace while the flush stalls, and progress log pace */
#define CACHED_STOP_KICK_NS   100000000ULL
#define CACHED_STOP_REPORT_NS 10000000000ULL

/*
 * Shutdown = unplug: switch to write-through, write every dirty bucket to
 * the next port (at most max_inflight requests at a time), and while in
 * the path also wait for every request already accepted to finish, then
 * remove our redirect and pass whatever is still queued on our port
 * straight to the next port. The framework has stopped handing us new
 * requests (they wait on our port, pumped into hold).
 *
 * Why the wait for accepted requests: a write waiting for its bucket's
 * fetch (a partial bucket), parked, or queued on its object has no dirty
 * bucket yet, so the cache looks clean; written through after the unplug,
 * as the whole bucket, it put the fetched old bytes over a newer write
 * that had reached the next port directly meanwhile: an acknowledged,
 * even flushed, write silently lost (safety17 F1, test_cached_mp case
 * unplug_inflight).
 */
static void cached_stop(struct peer *p)
{
	struct cached_peer *cp = peer_priv(p);
	struct cached *c = &cp->c;
	struct cached_held hold = {0};
	uint64_t start = peer_now_ns(), last_kick = 0, quiet_since;
	uint64_t lowest = UINT64_MAX, progress_at = start, report_at;
	uint64_t inflight = 0;
	bool plugged, lost = false, stuck = false, dropping = false;
	unsigned kicks = 0;

	if (!cp->initialised)
		return;
	cached_thread_enter();
	cached_set_policy(c, CACHED_WRITETHROUGH);
	plugged = xseg_get_path_next(cp->seg, cp->next_port) == cp->port;
	peer_info("cached: stopping: write-through, flushing %" PRIu64
		  " dirty bytes%s",
		  cached_unclean(c) * cp->cfg.bucket_size,
		  plugged ? ", then unplugging" : "");
	report_at = start + CACHED_STOP_REPORT_NS;
	for (;;) {
		uint64_t now = peer_now_ns();

		uint64_t unclean, failed;

		if (plugged)
			cached_pump(cp, &hold);
		/* in flight first: once it reads 0, every accepted write has
		 * completed, so its dirty bucket (write-back) is already in
		 * the unclean count read next, or its data already at the
		 * next port (write-through); the other order could miss a
		 * write that dirtied its bucket after the unclean read and
		 * completed before the in-flight one (review17 F6) */
		inflight = plugged ? peer_inflight(p) : 0;
		unclean = cached_unclean(c);
		if (!unclean && !inflight)
			break;
		failed = cached_failed_only(c);
		/* The drop test compares two counters: decide only when
		 * unclean did not move while failed was read, so both
		 * describe one instant and the log line never names a drop
		 * while acknowledged data is still being flushed (review13
		 * m2); else decide on the next pass, 1 ms later. */
		if (cached_unclean(c) != unclean)
			failed = 0;
		/* Progress = the unclean count reaches a new low. The timeout
		 * counts from the last progress, not from the start: a large
		 * cache of small objects flushing at its store's pace must
		 * not be cut off while it still drains (3.68 GB of 4 KiB
		 * objects lost 2.18 GB to a 60 s total bound, session 13). */
		if (unclean + inflight < lowest) {
			lowest = unclean + inflight;
			progress_at = now;
		}
		if (now >= report_at) {
			peer_info("cached: flushing: %" PRIu64
				  " dirty bytes and %" PRIu64
				  " request(s) in flight left after %.0f s",
				  unclean * cp->cfg.bucket_size, inflight,
				  (double)(now - start) / 1e9);
			report_at = now + CACHED_STOP_REPORT_NS;
		}
		if (now - progress_at > cp->flush_timeout_ns && inflight &&
		    (!unclean || !cached_stop_acked(cp))) {
			/* Accepted requests are left (with at most dirty data
			 * nobody was told is written), and the next port
			 * has not answered them for the flush timeout.
			 * Unplugging now would let them be written through
			 * after newer writes (above): stay in the path and
			 * exit; the reaper fails them back to their clients
			 * once we are gone, and they resend. */
			peer_err("cached: %" PRIu64
				 " request(s) still in flight "
				 "to port %" PRIu32 " after the flush timeout "
				 "(it does not answer): not unplugging, so "
				 "that none of them is written through after "
				 "newer writes reach port %" PRIu32
				 " directly (no acknowledged write is lost)",
				 inflight, cp->next_port, cp->next_port);
			stuck = true;
			break;
		}
		if (now - progress_at > cp->flush_timeout_ns) {
			uint64_t acked = cached_stop_acked(cp);

			if (!acked) {
				/* nothing acknowledged is left: what is, is
				 * data of failed writes or of writes still
				 * waiting (they fail with us) */
				peer_warn("cached: flush timeout: %" PRIu64
					  " dirty bytes could not be written "
					  "to port %" PRIu32 "; none of them "
					  "was acknowledged to a client: "
					  "not a loss",
					  unclean * cp->cfg.bucket_size,
					  cp->next_port);
				cached_drop_failed(c);
				break;
			}
			peer_err("cached: flush timeout: %" PRIu64
				 " dirty bytes could not be written to port "
				 "%" PRIu32 " (%" PRIu64 " of them "
				 "acknowledged write-back data)",
				 unclean * cp->cfg.bucket_size, cp->next_port,
				 acked * cp->cfg.bucket_size);
			/* exit non-zero: the operator must know data is lost */
			lost = true;
			break;
		}
		/*
		 * Everything left is data of write-through/FUA writes the
		 * next port failed (their writers were told so; never
		 * acknowledged: review11 N-C) and it failed again since we
		 * started: drop it rather than hold the stop for the flush
		 * timeout and report a loss. The next port keeps what it had
		 * (a failed write leaves its range undefined).
		 */
		if (kicks >= 2 && failed && failed >= unclean) {
			if (!dropping)
				peer_warn("cached: dropping %" PRIu64
					  " bytes of "
					  "failed write-through/FUA writes "
					  "that port %" PRIu32
					  " refuses (never acknowledged)",
					  failed * cp->cfg.bucket_size,
					  cp->next_port);
			dropping = true;
			cached_drop_failed(c);
		}
		/* Kick every dirty object once, then again only while
		 * nothing drains: a kick visits every cached object, and
		 * with a million of them queued 100 ms apart the kicks took
		 * the CPU the flush needed. A kick also retries objects
		 * whose last round failed; those drain nothing, so they
		 * are retried every 100 ms as before. */
		if (!kicks || (now - last_kick > CACHED_STOP_KICK_NS &&
			       now - progress_at > CACHED_STOP_KICK_NS)) {
			cached_flush_all(c);
			last_kick = now;
			kicks++;
		}
		cached_sleep_ms(1);
	}
	if ((lost || stuck) && plugged &&
	    xseg_get_path_next(cp->seg, cp->next_port) == cp->port) {
		/* Unplugging now would let clients read the store, which
		 * lacks acknowledged writes, or let our late writes land
		 * over newer ones: stay in the path. Requests for the store
		 * fail (ECONNRESET once we are gone) until the operator
		 * removes the redirect. */
		peer_err("cached: port %" PRIu32 " stays redirected to port "
			 "%" PRIu32 " (dead after exit): %s; `xsegctl "
			 "unredirect %s %" PRIu32 "` once that is dealt with",
			 cp->next_port, cp->port,
			 lost ? "its store lacks acknowledged writes"
			      : "it does not answer requests of ours",
			 xseg_name(cp->seg), cp->next_port);
		cp->keep_redirect = true;
		for (size_t i = 0; i < hold.nr; i++)
			xseg_respond(cp->seg, hold.reqs[i], EIO);
		free(hold.reqs);
		peer_request_stop(p, 1);
		return;
	}
	if (plugged && xseg_get_path_next(cp->seg, cp->next_port) == cp->port) {
		xseg_clear_path_next(cp->seg, cp->next_port);
		peer_info("cached: unplugged from port %" PRIu32,
			  cp->next_port);
	}
	for (size_t i = 0; i < hold.nr; i++)
		/* the next port is down (a store being restarted): the
		 * client resends, as for every request a dead next port
		 * failed (docs/cached.md "Errors to the client"); a raw
		 * ENXIO reached NBD clients as EIO (test_stack_chaos_wt) */
		if (xseg_forward(cp->seg, hold.reqs[i], cp->next_port) < 0)
			xseg_respond(cp->seg, hold.reqs[i],
				     cached_client_error(ENXIO));
	free(hold.reqs);
	/* A submit that read the redirect just before we cleared it may
	 * still land here: keep passing requests on until the queue has
	 * been quiet for a while. */
	quiet_since = peer_now_ns();
	{
		/* bounded: a client that keeps sending to our own port
		 * must not keep us from stopping (it gets ECONNRESET for
		 * what is queued when the port is released) */
		uint64_t until = quiet_since + 5000000000ULL;

		while (peer_now_ns() - quiet_since < 200000000ULL) {
			if (peer_now_ns() >= until) {
				peer_warn("cached: port %" PRIu32
					  " still receives requests after "
					  "the unplug; stopping anyway",
					  cp->port);
				break;
			}
			if (cached_pump(cp, NULL))
				quiet_since = peer_now_ns();
			cached_sleep_ms(1);
		}
	}
	if (lost) {
		peer_err("cached: stopped after %.3f s without flushing "
			 "everything (above)",
			 (double)(peer_now_ns() - start) / 1e9);
		peer_request_stop(p, 1);
	} else {
		peer_info("cached: flushed in %.3f s",
			  (double)(peer_now_ns() - start) / 1e9);
	}
}

static void cached_fini(struct peer *p)
{
	struct cached_peer *cp = peer_priv(p);

	if (!cp->initialised)
		return;
	cached_thread_enter();
	/* A submit that read our redirect long before it was removed (a
	 * stalled client) may have landed after stop's quiet period: the
	 * release would fail it with ECONNRESET. The cache is clean, so
	 * passing it on is coherent. (Only libxseg could close the window
	 * completely.) */
	if (!cached_unclean(&cp->c))
		cached_pump(cp, NULL);
	for (uint32_t i = 0; i < cp->cfg.max_inflight; i++)
		if (cp->c.nreqs && cp->c.nreqs[i].req && !cp->c.nreqs[i].obj &&
		    !cp->c.nreqs[i].cio)
			xseg_put_request(cp->seg, cp->c.nreqs[i].req);
	if (cp->plugged && !cp->keep_redirect &&
	    xseg_get_path_next(cp->seg, cp->next_port) == cp->port)
		xseg_clear_path_next(cp->seg, cp->next_port);
	cached_destroy(&cp->c);
	cp->initialised = false;
}

static void cached_stats(struct peer *p)
{
	struct cached_peer *cp = peer_priv(p);
	struct cached *c = &cp->c;
	struct cached_stats s;
	struct xcache_stats xs;

	if (!cp->initialised)
		return;
#define LD(f) s.f = __atomic_load_n(&c->st.f, __ATOMIC_RELAXED)
	LD(hits);
	LD(misses);
	LD(partial_hits);
	LD(reads);
	LD(writes);
	LD(evictions);
	LD(flush_rounds);
	LD(flush_writes);
	LD(fetches);
	LD(bytes_to_next);
	LD(bytes_from_next);
	LD(next_errors);
	LD(next_enoent);
	LD(uncached_reads);
	LD(space_failed);
	LD(space_waits);
	LD(nreq_waits);
	LD(info_hits);
	LD(info_asked);
	LD(nocache_reads);
	LD(nocache_writes);
	LD(targeted_flushes);
#undef LD
	xcache_get_stats(c->cache, &xs);
	peer_info(
	    "stats: cached: %s reads %" PRIu64 " hits %" PRIu64
	    " misses %" PRIu64 " partial hits %" PRIu64 " writes %" PRIu64
	    " evictions %" PRIu64 " dirty bytes %" PRIu64
	    " writing bytes %" PRIu64,
	    __atomic_load_n(&c->policy, __ATOMIC_RELAXED) == CACHED_WRITEBACK
		? "write-back"
		: "write-through",
	    s.reads, s.hits, s.misses, s.partial_hits, s.writes, s.evictions,
	    __atomic_load_n(&c->dirty_buckets, __ATOMIC_RELAXED) *
		cp->cfg.bucket_size,
	    __atomic_load_n(&c->writing_buckets, __ATOMIC_RELAXED) *
		cp->cfg.bucket_size);
	peer_info("stats: cached: flushes %" PRIu64 " flush writes %" PRIu64
		  " fetches %" PRIu64 " bytes to next %" PRIu64
		  " bytes from next %" PRIu64 " next-port errors %" PRIu64
		  " (and %" PRIu64 " ENOENT) waits for space %" PRIu64
		  " waits for requests %" PRIu64 " uncached reads %" PRIu64
		  " failed for space %" PRIu64,
		  s.flush_rounds, s.flush_writes, s.fetches, s.bytes_to_next,
		  s.bytes_from_next, s.next_errors, s.next_enoent,
		  s.space_waits, s.nreq_waits, s.uncached_reads,
		  s.space_failed);
	peer_info("stats: cached: info from cache %" PRIu64 " asked %" PRIu64
		  " nocache reads %" PRIu64 " writes %" PRIu64
		  " targeted flushes %" PRIu64,
		  s.info_hits, s.info_asked, s.nocache_reads, s.nocache_writes,
		  s.targeted_flushes);
	peer_info(
	    "stats: cached: parked for space %" PRIu64 " for requests %" PRIu64
	    ", next-port requests free %" PRIu32 " of %" PRIu32,
	    /* reads parked for buckets wait on space_rwaitq (review13 m1) */
	    xwaitq_nr_queued(&c->space_waitq) +
		xwaitq_nr_queued(&c->space_rwaitq),
	    xwaitq_nr_queued(&c->nreq_waitq),
	    __atomic_load_n(&c->nreq_nr_free, __ATOMIC_RELAXED),
	    cp->cfg.max_inflight);
	if (peer_log_get_level() >= PEER_LOG_DEBUG)
		cached_dump_busy(c);
	peer_info("stats: cached: objects active %" PRIu32 " evicted %" PRIu32
		  " detached %" PRIu32 " free buckets %" PRIu32 " of %" PRIu32,
		  xs.nr_active, xs.nr_evicted, xs.nr_detached,
		  cached_pool_nr_free(&c->pool), c->pool.nr);
}

/* The port's statistics area (xsegctl stats): what the issue asks for
 * (hits, misses, partial hits, evictions, dirty bytes, flushes, bytes to
 * and from the next port) and what explains them. */
static uint32_t cached_stats_table(struct peer *p, struct xseg_stat *st,
				   uint32_t max)
{
	struct cached_peer *cp = peer_priv(p);
	struct cached *c = &cp->c;
	struct xcache_stats xs;
	uint64_t bs = cp->cfg.bucket_size;
	uint32_t n = 0;

	if (!cp->initialised)
		return 0;
	xcache_get_stats(c->cache, &xs);
#define ST(name, v) peer_stat(st, &n, max, name, v)
#define LD(f)	    __atomic_load_n(&c->st.f, __ATOMIC_RELAXED)
	ST("writeback",
	   __atomic_load_n(&c->policy, __ATOMIC_RELAXED) == CACHED_WRITEBACK);
	ST("reads", LD(reads));
	ST("hits", LD(hits));
	ST("misses", LD(misses));
	ST("partial_hits", LD(partial_hits));
	ST("writes", LD(writes));
	ST("evictions", LD(evictions));
	ST("dirty_bytes",
	   __atomic_load_n(&c->dirty_buckets, __ATOMIC_RELAXED) * bs);
	ST("writing_bytes",
	   __atomic_load_n(&c->writing_buckets, __ATOMIC_RELAXED) * bs);
	ST("flushes", LD(flush_rounds));
	ST("flush_writes", LD(flush_writes));
	ST("fetches", LD(fetches));
	ST("bytes_to_next", LD(bytes_to_next));
	ST("bytes_from_next", LD(bytes_from_next));
	ST("next_errors", LD(next_errors));
	ST("space_waits", LD(space_waits));
	ST("nreq_waits", LD(nreq_waits));
	ST("info_hits", LD(info_hits));
	ST("info_asked", LD(info_asked));
	ST("nocache_reads", LD(nocache_reads));
	ST("nocache_writes", LD(nocache_writes));
	ST("targeted_flushes", LD(targeted_flushes));
	ST("deferred_retries", LD(deferred_retries));
	/* added in session 9 (xsegctl reads statistics by name) */
	ST("next_enoent", LD(next_enoent));
	ST("failed_retries", LD(failed_retries));
	ST("uncached_reads", LD(uncached_reads));
	ST("failed_dropped_bytes", LD(failed_dropped) * bs);
	ST("failed_write_bytes",
	   __atomic_load_n(&c->failed_buckets, __ATOMIC_RELAXED) * bs);
	ST("flush_failing",
	   __atomic_load_n(&c->flush_failing, __ATOMIC_RELAXED));
	/* added in session 10 */
	ST("space_failed", LD(space_failed));
	ST("space_refused", (uint64_t)cached_space_refused(c));
	ST("uncached_deletes", LD(uncached_deletes));
	ST("fence_waits", LD(fence_waits));
	ST("objects_active", xs.nr_active);
	ST("objects_evicted", xs.nr_evicted);
	ST("free_bytes", (uint64_t)cached_pool_nr_free(&c->pool) * bs);
	ST("cache_bytes", (uint64_t)c->pool.nr * bs);
#undef LD
#undef ST
	return n < max ? n : max;
}

/* Once a second: objects whose flush failed are tried again, and
 * requests waiting for space fail once flushes have failed for
 * --space-wait. */
static void cached_tick(struct peer *p)
{
	struct cached_peer *cp = peer_priv(p);
	struct cached *c = &cp->c;

	if (!cp->initialised)
		return;
	cached_thread_enter();
	if (cached_space_expire(c)) {
		int error =
		    (int)__atomic_load_n(&c->flush_errno, __ATOMIC_RELAXED);

		peer_warn("cached: port %" PRIu32
			  " has refused writes for %" PRIu64
			  " ms (last: %s): requests that need cache space fail "
			  "with that error until a write goes through "
			  "(--space-wait)",
			  cp->next_port, cp->cfg.space_wait_ns / 1000000,
			  strerror(error));
	}
	cached_retry_failed(c);
}

static const struct peer_ops cached_ops = {
    .type = "cached",
    .summary = "Cache objects in RAM in front of another port "
	       "(write-back or write-through).",
    .priv_size = sizeof(struct cached_peer),
    .options = cached_options,
    .options_help = cached_options_help,
    .defaults = cached_defaults,
    .parse_opt = cached_parse_opt,
    .init = cached_init_peer,
    .stop = cached_stop,
    .fini = cached_fini,
    .stats = cached_stats,
    .stats_table = cached_stats_table,
    .tick = cached_tick,
    .handlers =
	{
	    [XSEG_OP_READ] = cached_handle,
	    [XSEG_OP_WRITE] = cached_handle,
	    [XSEG_OP_FLUSH] = cached_handle,
	    [XSEG_OP_DELETE] = cached_handle,
	    [XSEG_OP_INFO] = cached_handle,
	    [XSEG_OP_COPY] = cached_handle,
	    [XSEG_OP_HASH] = cached_handle,
	    [XSEG_OP_PING] = cached_passthrough,
	},
    .on_reply = cached_on_reply,
    /* handlers queue work on objects' workqs and return */
    .handlers_never_block = true,
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &cached_ops);
}
