/* SPDX-License-Identifier: MIT */
/*
 * noop: a peer that serves every request at once, for IPC benchmarks and
 * tests.
 *
 * READ returns zeroes (or --pattern BYTE, or untouched data with
 * --no-fill); WRITE, FLUSH, DELETE, COPY succeed; INFO returns --info-size;
 * HASH returns an empty digest; PING answers.
 *
 * Test helpers:
 *   --store            keep written data in memory (a hash table of
 *                      objects), so READ returns what was written: lets
 *                      bench_xseg --verify run against noop;
 *   --corrupt-offset N with --store, flip one byte at offset N of every
 *                      object in READ replies (a verification test must
 *                      notice);
 *   --delay TIME       complete every request TIME after accepting it,
 *                      from a separate thread (exercises the framework's
 *                      asynchronous completion and the shutdown drain).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"
#include "xtime.h"

enum {
	NOOP_OPT_INFO_SIZE = 256,
	NOOP_OPT_PATTERN,
	NOOP_OPT_NO_FILL,
	NOOP_OPT_STORE,
	NOOP_OPT_STORE_MAX,
	NOOP_OPT_CORRUPT,
	NOOP_OPT_DELAY,
};

/* One object of the --store table. */
struct noop_obj {
	struct noop_obj *next; /* hash chain */
	char *name;
	size_t namelen;
	uint64_t size; /* bytes of data (highest written end) */
	unsigned char *data;
};

struct noop_delayed {
	struct noop_delayed *next;
	struct xseg_request *req;
	int error;
	uint64_t due_ns;
};

struct noop {
	uint64_t info_size;
	int pattern; /* byte, or -1 for no fill */
	bool store;
	uint64_t store_max;
	uint64_t corrupt_offset; /* UINT64_MAX = off */
	uint64_t delay_ns;

	/* --store: objects by name, under store_lock */
	pthread_mutex_t store_lock;
	struct noop_obj **buckets;
	size_t nr_buckets;
	uint64_t store_bytes;
	uint64_t nr_objects;

	/* --delay: FIFO of requests to complete (deadlines are monotonic
	 * because the delay is constant), under delay_lock */
	pthread_mutex_t delay_lock;
	pthread_cond_t delay_cond;
	struct noop_delayed *delay_head, *delay_tail;
	bool delay_exit;
	pthread_t delay_thread;
	bool delay_started;
	uint64_t delayed_total;

	/* requests served, by op (__atomic relaxed): what a test asserts on
	 * through the port's statistics area */
	uint64_t ops[XSEG_OP_COUNT];
};

static const struct option noop_options[] = {
    {"info-size", required_argument, NULL, NOOP_OPT_INFO_SIZE},
    {"pattern", required_argument, NULL, NOOP_OPT_PATTERN},
    {"no-fill", no_argument, NULL, NOOP_OPT_NO_FILL},
    {"store", no_argument, NULL, NOOP_OPT_STORE},
    {"store-max", required_argument, NULL, NOOP_OPT_STORE_MAX},
    {"corrupt-offset", required_argument, NULL, NOOP_OPT_CORRUPT},
    {"delay", required_argument, NULL, NOOP_OPT_DELAY},
    {NULL, 0, NULL, 0},
};

static const char noop_options_help[] =
    "      --info-size SIZE    size INFO reports (default 4M)\n"
    "      --pattern BYTE      READ fills data with BYTE (default 0)\n"
    "      --no-fill           READ leaves the data buffer untouched\n"
    "      --store             keep written data in memory; READ returns "
    "it\n"
    "      --store-max SIZE    memory limit of --store (default 256M); "
    "WRITE fails\n"
    "                          with ENOSPC beyond it\n"
    "      --corrupt-offset N  (test) with --store, flip a byte at offset "
    "N of every\n"
    "                          object in READ replies\n"
    "      --delay TIME        (test) complete each request TIME after "
    "accepting it\n"
    "                          (bare number = us)\n";

static void noop_defaults(struct peer *p)
{
	struct noop *n = peer_priv(p);

	n->info_size = 4ULL << 20;
	n->store_max = 256ULL << 20;
	n->corrupt_offset = UINT64_MAX;
}

static int noop_parse_opt(struct peer *p, int val, const char *arg)
{
	struct noop *n = peer_priv(p);
	uint64_t v;
	int rc;

	switch (val) {
	case NOOP_OPT_INFO_SIZE:
		return peer_parse_size(arg, &n->info_size);
	case NOOP_OPT_PATTERN:
		rc = peer_parse_u64(arg, &v);
		if (rc)
			return rc;
		if (v > 255)
			return -ERANGE;
		n->pattern = (int)v;
		return 0;
	case NOOP_OPT_NO_FILL:
		n->pattern = -1;
		return 0;
	case NOOP_OPT_STORE:
		n->store = true;
		return 0;
	case NOOP_OPT_STORE_MAX:
		return peer_parse_size(arg, &n->store_max);
	case NOOP_OPT_CORRUPT:
		return peer_parse_size(arg, &n->corrupt_offset);
	case NOOP_OPT_DELAY:
		return peer_parse_duration(arg, 1000, &n->delay_ns);
	}
	return -EINVAL;
}

/* ------------------------------------------------------------------ */
/* --store                                                             */
/* ------------------------------------------------------------------ */

static size_t noop_hash(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return (size_t)h;
}

/* Caller holds store_lock. */
static struct noop_obj **noop_find(struct noop *n, const char *name, size_t len)
{
	struct noop_obj **pp =
	    &n->buckets[noop_hash(name, len) % n->nr_buckets];

	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->namelen == len && !memcmp((*pp)->name, name, len))
			break;
	return pp;
}

static void noop_obj_free(struct noop *n, struct noop_obj *o)
{
	n->store_bytes -= o->size;
	n->nr_objects--;
	free(o->name);
	free(o->data);
	free(o);
}

/* Caller holds store_lock. Object named name, created if absent. */
static int noop_obj_get(struct noop *n, const char *name, size_t len,
			struct noop_obj **op)
{
	struct noop_obj **pp = noop_find(n, name, len), *o;

	if (*pp) {
		*op = *pp;
		return 0;
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->name = malloc(len);
	if (!o->name) {
		free(o);
		return -ENOMEM;
	}
	memcpy(o->name, name, len);
	o->namelen = len;
	*pp = o;
	n->nr_objects++;
	*op = o;
	return 0;
}

/* Caller holds store_lock. Grow o to at least end bytes (zero filled). */
static int noop_obj_grow(struct noop *n, struct noop_obj *o, uint64_t end)
{
	unsigned char *d;

	if (end <= o->size)
		return 0;
	if (end - o->size > n->store_max - n->store_bytes ||
	    n->store_bytes > n->store_max)
		return -ENOSPC;
	d = realloc(o->data, end);
	if (!d)
		return -ENOMEM;
	memset(d + o->size, 0, end - o->size);
	n->store_bytes += end - o->size;
	o->data = d;
	o->size = end;
	return 0;
}

static int noop_store_write(struct noop *n, struct xseg_request *req,
			    const void *data)
{
	struct noop_obj *o;
	int rc;

	pthread_mutex_lock(&n->store_lock);
	rc = noop_obj_get(n, req->target, req->targetlen, &o);
	if (!rc)
		rc = noop_obj_grow(n, o, req->offset + req->size);
	if (!rc)
		memcpy(o->data + req->offset, data, req->size);
	pthread_mutex_unlock(&n->store_lock);
	return rc;
}

static void noop_store_read(struct noop *n, struct xseg_request *req,
			    unsigned char *data)
{
	struct noop_obj *o;
	uint64_t have = 0;

	pthread_mutex_lock(&n->store_lock);
	o = *noop_find(n, req->target, req->targetlen);
	if (o && req->offset < o->size) {
		have = o->size - req->offset;
		if (have > req->size)
			have = req->size;
		memcpy(data, o->data + req->offset, have);
	}
	pthread_mutex_unlock(&n->store_lock);
	memset(data + have, 0, req->size - have);
	if (n->corrupt_offset >= req->offset &&
	    n->corrupt_offset - req->offset < req->size)
		data[n->corrupt_offset - req->offset] ^= 0x5a;
}

static int noop_store_delete(struct noop *n, struct xseg_request *req)
{
	struct noop_obj **pp, *o;

	pthread_mutex_lock(&n->store_lock);
	pp = noop_find(n, req->target, req->targetlen);
	o = *pp;
	if (o) {
		*pp = o->next;
		noop_obj_free(n, o);
	}
	pthread_mutex_unlock(&n->store_lock);
	return o ? 0 : -ENOENT;
}

static int noop_store_copy(struct noop *n, struct xseg_request *req,
			   const struct xseg_request_copy *cp)
{
	struct noop_obj *src, *dst;
	int rc = 0;

	pthread_mutex_lock(&n->store_lock);
	src = *noop_find(n, cp->src_target, cp->src_targetlen);
	if (!src) {
		rc = -ENOENT;
		goto out;
	}
	rc = noop_obj_get(n, req->target, req->targetlen, &dst);
	if (rc || dst == src)
		goto out;
	rc = noop_obj_grow(n, dst, src->size);
	if (rc)
		goto out;
	memcpy(dst->data, src->data, src->size);
	memset(dst->data + src->size, 0, dst->size - src->size);
out:
	pthread_mutex_unlock(&n->store_lock);
	return rc;
}

/* ------------------------------------------------------------------ */
/* --delay                                                             */
/* ------------------------------------------------------------------ */

static void *noop_delay_main(void *arg)
{
	struct peer *p = arg;
	struct noop *n = peer_priv(p);

	pthread_mutex_lock(&n->delay_lock);
	for (;;) {
		struct noop_delayed *d = n->delay_head;
		uint64_t now;

		/* At exit the queue is empty after a normal drain; after a
		 * drain timeout what is left is dropped (fini frees it) and
		 * the port release fails it back with ECONNRESET. */
		if (n->delay_exit)
			break;
		if (!d) {
			pthread_cond_wait(&n->delay_cond, &n->delay_lock);
			continue;
		}
		now = peer_now_ns();
		if (d->due_ns > now) {
			/* delay_cond's clock */
			struct timespec ts =
			    xtime_in(CLOCK_MONOTONIC, d->due_ns - now);
			pthread_cond_timedwait(&n->delay_cond, &n->delay_lock,
					       &ts);
			continue;
		}
		n->delay_head = d->next;
		if (!n->delay_head)
			n->delay_tail = NULL;
		pthread_mutex_unlock(&n->delay_lock);
		peer_complete(p, d->req, d->error);
		free(d);
		pthread_mutex_lock(&n->delay_lock);
	}
	pthread_mutex_unlock(&n->delay_lock);
	return NULL;
}

/* Complete now, or after --delay from the delay thread. */
static int noop_finish(struct peer *p, struct xseg_request *req, int error)
{
	struct noop *n = peer_priv(p);
	struct noop_delayed *d;

	if (!n->delay_ns) {
		/* a failure is logged by the framework; the request is not
		 * ours any more either way */
		peer_complete(p, req, error);
		return 0;
	}
	d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM; /* the framework fails it */
	d->req = req;
	d->error = error;
	d->next = NULL;
	d->due_ns = peer_now_ns() + n->delay_ns;
	pthread_mutex_lock(&n->delay_lock);
	if (n->delay_tail)
		n->delay_tail->next = d;
	else
		n->delay_head = d;
	n->delay_tail = d;
	n->delayed_total++;
	pthread_cond_signal(&n->delay_cond);
	pthread_mutex_unlock(&n->delay_lock);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Handlers                                                            */
/* ------------------------------------------------------------------ */

static int noop_read(struct peer *p, struct xseg_request *req)
{
	struct noop *n = peer_priv(p);
	unsigned char *data = xseg_request_data(peer_seg(p), req);

	if (!req->size) {
		req->serviced = 0;
		return noop_finish(p, req, 0);
	}
	if (!data)
		return -EINVAL;
	if (n->store)
		noop_store_read(n, req, data);
	else if (n->pattern >= 0 && req->size)
		memset(data, n->pattern, req->size);
	req->serviced = req->size;
	return noop_finish(p, req, 0);
}

static int noop_write(struct peer *p, struct xseg_request *req)
{
	struct noop *n = peer_priv(p);
	int rc = 0;

	if (n->store && req->size) {
		const void *data = xseg_request_data(peer_seg(p), req);
		if (!data)
			return -EINVAL;
		rc = noop_store_write(n, req, data);
	}
	if (!rc)
		req->serviced = req->size;
	return noop_finish(p, req, -rc);
}

static void noop_count(struct noop *n, uint16_t op)
{
	if (op < XSEG_OP_COUNT)
		__atomic_add_fetch(&n->ops[op], 1, __ATOMIC_RELAXED);
}

static int noop_delete(struct peer *p, struct xseg_request *req)
{
	struct noop *n = peer_priv(p);

	noop_count(n, XSEG_OP_DELETE);
	return noop_finish(p, req, n->store ? -noop_store_delete(n, req) : 0);
}

static int noop_info(struct peer *p, struct xseg_request *req)
{
	struct noop *n = peer_priv(p);
	struct xseg_reply_info *info = xseg_request_data(peer_seg(p), req);

	if (!info) /* validation guarantees room for it */
		return -EINVAL;
	info->size = n->info_size;
	return noop_finish(p, req, 0);
}

static int noop_copy(struct peer *p, struct xseg_request *req)
{
	struct noop *n = peer_priv(p);
	const struct xseg_request_copy *cp =
	    xseg_request_data(peer_seg(p), req);

	if (!cp)
		return -EINVAL;
	return noop_finish(p, req, n->store ? -noop_store_copy(n, req, cp) : 0);
}

static int noop_hash_op(struct peer *p, struct xseg_request *req)
{
	struct xseg_reply_hash *h = xseg_request_data(peer_seg(p), req);

	if (!h)
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	return noop_finish(p, req, 0);
}

static int noop_ok(struct peer *p, struct xseg_request *req)
{
	noop_count(peer_priv(p), req->op);
	return noop_finish(p, req, 0);
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                          */
/* ------------------------------------------------------------------ */

static int noop_init(struct peer *p)
{
	struct noop *n = peer_priv(p);
	int rc;

	pthread_mutex_init(&n->store_lock, NULL);
	pthread_mutex_init(&n->delay_lock, NULL);
	xtime_cond_init_monotonic(&n->delay_cond);
	if (n->store) {
		n->nr_buckets = 4096;
		n->buckets = calloc(n->nr_buckets, sizeof(*n->buckets));
		if (!n->buckets)
			return -ENOMEM;
	}
	if (n->delay_ns) {
		rc = pthread_create(&n->delay_thread, NULL, noop_delay_main, p);
		if (rc)
			return -rc;
		n->delay_started = true;
	}
	peer_info("info size %" PRIu64 ", read fill %s%s%s", n->info_size,
		  n->pattern < 0 ? "none" : (n->pattern ? "pattern" : "zeroes"),
		  n->store ? ", storing writes" : "",
		  n->delay_ns ? ", delayed completion" : "");
	return 0;
}

static void noop_fini(struct peer *p)
{
	struct noop *n = peer_priv(p);

	if (n->delay_started) {
		pthread_mutex_lock(&n->delay_lock);
		n->delay_exit = true;
		pthread_cond_signal(&n->delay_cond);
		pthread_mutex_unlock(&n->delay_lock);
		pthread_join(n->delay_thread, NULL);
		while (n->delay_head) {
			struct noop_delayed *d = n->delay_head;
			n->delay_head = d->next;
			free(d);
		}
		n->delay_tail = NULL;
	}
	for (size_t i = 0; i < n->nr_buckets; i++)
		while (n->buckets[i]) {
			struct noop_obj *o = n->buckets[i];
			n->buckets[i] = o->next;
			noop_obj_free(n, o);
		}
	free(n->buckets);
	n->buckets = NULL;
}

static void noop_stats(struct peer *p)
{
	struct noop *n = peer_priv(p);

	pthread_mutex_lock(&n->store_lock);
	uint64_t objects = n->nr_objects, bytes = n->store_bytes;
	pthread_mutex_unlock(&n->store_lock);
	pthread_mutex_lock(&n->delay_lock);
	uint64_t delayed = n->delayed_total;
	pthread_mutex_unlock(&n->delay_lock);
	peer_info("stats: noop stored objects %" PRIu64 " bytes %" PRIu64
		  " delayed completions %" PRIu64,
		  objects, bytes, delayed);
}

/* The port's statistics area (xsegctl stats). */
static uint32_t noop_stats_table(struct peer *p, struct xseg_stat *st,
				 uint32_t max)
{
	struct noop *n = peer_priv(p);
	uint32_t k = 0;

	peer_stat(st, &k, max, "flushes",
		  __atomic_load_n(&n->ops[XSEG_OP_FLUSH], __ATOMIC_RELAXED));
	peer_stat(st, &k, max, "deletes",
		  __atomic_load_n(&n->ops[XSEG_OP_DELETE], __ATOMIC_RELAXED));
	peer_stat(st, &k, max, "pings",
		  __atomic_load_n(&n->ops[XSEG_OP_PING], __ATOMIC_RELAXED));
	return k;
}

static const struct peer_ops noop_ops = {
    .type = "noop",
    .summary = "Serve every xseg request at once (IPC benchmarks, tests).",
    .priv_size = sizeof(struct noop),
    .options = noop_options,
    .options_help = noop_options_help,
    .defaults = noop_defaults,
    .parse_opt = noop_parse_opt,
    .init = noop_init,
    .fini = noop_fini,
    .stats = noop_stats,
    .stats_table = noop_stats_table,
    .handlers =
	{
	    [XSEG_OP_READ] = noop_read,
	    [XSEG_OP_WRITE] = noop_write,
	    [XSEG_OP_FLUSH] = noop_ok,
	    [XSEG_OP_DELETE] = noop_delete,
	    [XSEG_OP_INFO] = noop_info,
	    [XSEG_OP_COPY] = noop_copy,
	    [XSEG_OP_HASH] = noop_hash_op,
	    [XSEG_OP_PING] = noop_ok,
	},
    /* Every handler returns at once: a memset or a copy under the store
     * lock (held only for copies), or, with --delay, a note on the delay
     * thread's list (completed there). */
    .handlers_never_block = true,
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &noop_ops);
}
