/* SPDX-License-Identifier: MIT */
/*
 * cached_testpeer: the "next port" of cached's tests. An in-memory object
 * store (objects grow as written, reads past the end return zeroes) with
 * fault injection:
 *   --fail-every N   fail every Nth READ/WRITE/FLUSH with EIO (N >= 2)
 *   --zero-writes    complete every WRITE with success but 0 bytes served
 *   --fail-writes    fail every WRITE with EIO
 *   --full-after N   serve N WRITEs, then fail every WRITE with ENOSPC
 *                    (a store out of space: reads still served)
 *   --write-delay MS each WRITE takes MS ms (a slow store: the handler
 *                    sleeps, so its threads bound the rate)
 * It counts FLUSH requests; SIGUSR1 logs its counters. HASH answers an
 * FNV-1a digest of the object's size and contents (as the blocker's HASH,
 * it changes with the size), so a test can compare objects written
 * through cached and directly.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "peer.h"

enum {
	TP_OPT_FAIL_EVERY = 256,
	TP_OPT_ZERO_WRITES,
	TP_OPT_FAIL_WRITES,
	TP_OPT_FULL_AFTER,
	TP_OPT_WRITE_DELAY,
};

struct tp_obj {
	struct tp_obj *next;
	char name[XSEG_MAX_TARGETLEN + 1];
	uint64_t size;
	unsigned char *data;
};

#define TP_HASH 1024

struct tp {
	uint64_t fail_every;
	bool zero_writes;
	bool fail_writes;
	bool full_set;
	uint64_t full_after; /* --full-after: WRITEs served before ENOSPC */
	uint64_t write_delay_ms;
	pthread_mutex_t lock;
	struct tp_obj *objs[TP_HASH];
	uint64_t counter, failed, flushes, writes, reads;
};

static const struct option tp_options[] = {
    {"fail-every", required_argument, NULL, TP_OPT_FAIL_EVERY},
    {"zero-writes", no_argument, NULL, TP_OPT_ZERO_WRITES},
    {"fail-writes", no_argument, NULL, TP_OPT_FAIL_WRITES},
    {"full-after", required_argument, NULL, TP_OPT_FULL_AFTER},
    {"write-delay", required_argument, NULL, TP_OPT_WRITE_DELAY},
    {NULL, 0, NULL, 0},
};

static int tp_parse(struct peer *p, int val, const char *arg)
{
	struct tp *t = peer_priv(p);
	int rc;

	switch (val) {
	case TP_OPT_FAIL_EVERY:
		rc = peer_parse_u64(arg, &t->fail_every);
		if (!rc && t->fail_every < 2)
			rc = -ERANGE;
		return rc;
	case TP_OPT_ZERO_WRITES:
		t->zero_writes = true;
		return 0;
	case TP_OPT_FAIL_WRITES:
		t->fail_writes = true;
		return 0;
	case TP_OPT_FULL_AFTER:
		t->full_set = true;
		return peer_parse_u64(arg, &t->full_after);
	case TP_OPT_WRITE_DELAY:
		return peer_parse_u64(arg, &t->write_delay_ms);
	}
	return -EINVAL;
}

static unsigned tp_hash(const char *s, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h % TP_HASH;
}

/* Caller holds the lock. */
static struct tp_obj *tp_find(struct tp *t, const char *name, size_t len,
			      bool create)
{
	struct tp_obj **pp = &t->objs[tp_hash(name, len)], *o;

	for (o = *pp; o; o = o->next)
		if (strlen(o->name) == len && !memcmp(o->name, name, len))
			return o;
	if (!create)
		return NULL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	memcpy(o->name, name, len);
	o->next = *pp;
	*pp = o;
	return o;
}

static bool tp_inject(struct tp *t)
{
	if (!t->fail_every)
		return false;
	return __atomic_add_fetch(&t->counter, 1, __ATOMIC_RELAXED) %
		   t->fail_every ==
	       0;
}

static int tp_rw(struct peer *p, struct xseg_request *req)
{
	struct tp *t = peer_priv(p);
	unsigned char *data = xseg_request_data(peer_seg(p), req);
	struct tp_obj *o;
	int err = 0;

	if (req->size && !data)
		return -EINVAL;
	if (tp_inject(t)) {
		__atomic_add_fetch(&t->failed, 1, __ATOMIC_RELAXED);
		return -EIO;
	}
	if (req->op == XSEG_OP_WRITE && t->write_delay_ms) {
		struct timespec d = {(time_t)(t->write_delay_ms / 1000),
				     (long)(t->write_delay_ms % 1000) *
					 1000000L};

		while (nanosleep(&d, &d) && errno == EINTR)
			;
	}
	pthread_mutex_lock(&t->lock);
	if (req->op == XSEG_OP_READ) {
		uint64_t have = 0;
		t->reads++;
		o = tp_find(t, req->target, req->targetlen, false);
		if (o && req->offset < o->size) {
			have = o->size - req->offset;
			if (have > req->size)
				have = req->size;
			memcpy(data, o->data + req->offset, have);
		}
		memset(data + have, 0, req->size - have);
		req->serviced = req->size;
	} else if (t->fail_writes) {
		err = EIO;
	} else if (t->full_set && t->writes >= t->full_after) {
		__atomic_add_fetch(&t->failed, 1, __ATOMIC_RELAXED);
		err = ENOSPC;
	} else if (t->zero_writes) {
		req->serviced = 0;
	} else {
		uint64_t end = req->offset + req->size;
		t->writes++;
		o = tp_find(t, req->target, req->targetlen, true);
		if (o && end > o->size) {
			unsigned char *d = realloc(o->data, end);
			if (d) {
				memset(d + o->size, 0, end - o->size);
				o->data = d;
				o->size = end;
			}
		}
		if (!o || end > o->size) {
			err = ENOMEM;
		} else {
			memcpy(o->data + req->offset, data, req->size);
			req->serviced = req->size;
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (err)
		return -err;
	return peer_complete(p, req, 0);
}

static int tp_flush(struct peer *p, struct xseg_request *req)
{
	struct tp *t = peer_priv(p);

	if (tp_inject(t))
		return -EIO;
	__atomic_add_fetch(&t->flushes, 1, __ATOMIC_RELAXED);
	return peer_complete(p, req, 0);
}

static int tp_delete(struct peer *p, struct xseg_request *req)
{
	struct tp *t = peer_priv(p);
	struct tp_obj *o;

	pthread_mutex_lock(&t->lock);
	o = tp_find(t, req->target, req->targetlen, false);
	if (o) {
		free(o->data);
		o->data = NULL;
		o->size = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return peer_complete(p, req, o ? 0 : ENOENT);
}

static int tp_info(struct peer *p, struct xseg_request *req)
{
	struct tp *t = peer_priv(p);
	struct xseg_reply_info *info = xseg_request_data(peer_seg(p), req);
	struct tp_obj *o;

	if (!info)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	o = tp_find(t, req->target, req->targetlen, false);
	info->size = o ? o->size : 0;
	pthread_mutex_unlock(&t->lock);
	return peer_complete(p, req, o ? 0 : ENOENT);
}

static int tp_hash_op(struct peer *p, struct xseg_request *req)
{
	struct tp *t = peer_priv(p);
	struct xseg_reply_hash *h = xseg_request_data(peer_seg(p), req);
	uint64_t d = 14695981039346656037ull, size = 0;
	struct tp_obj *o;

	if (!h || req->size < sizeof(*h))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	o = tp_find(t, req->target, req->targetlen, false);
	if (o) {
		size = o->size;
		for (unsigned i = 0; i < 8; i++)
			d = (d ^ ((size >> (8 * i)) & 0xff)) * 1099511628211ull;
		for (uint64_t i = 0; i < size; i++)
			d = (d ^ o->data[i]) * 1099511628211ull;
	}
	pthread_mutex_unlock(&t->lock);
	if (!o)
		return peer_complete(p, req, ENOENT);
	memset(h, 0, sizeof(*h));
	h->len = sizeof(d);
	memcpy(h->hash, &d, sizeof(d));
	return peer_complete(p, req, 0);
}

static int tp_init(struct peer *p)
{
	struct tp *t = peer_priv(p);

	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

static void tp_fini(struct peer *p)
{
	struct tp *t = peer_priv(p);

	for (unsigned i = 0; i < TP_HASH; i++)
		while (t->objs[i]) {
			struct tp_obj *o = t->objs[i];
			t->objs[i] = o->next;
			free(o->data);
			free(o);
		}
}

static void tp_stats(struct peer *p)
{
	struct tp *t = peer_priv(p);

	peer_info("stats: testpeer: injected failures %" PRIu64
		  " flushes %" PRIu64,
		  __atomic_load_n(&t->failed, __ATOMIC_RELAXED),
		  __atomic_load_n(&t->flushes, __ATOMIC_RELAXED));
}

static const struct peer_ops tp_ops = {
    .type = "testpeer",
    .summary = "In-memory object store with fault injection (cached tests).",
    .priv_size = sizeof(struct tp),
    .options = tp_options,
    .options_help = "      --fail-every N   fail every Nth read/write/flush "
		    "with EIO\n"
		    "      --zero-writes    serve writes with 0 bytes\n"
		    "      --fail-writes    fail every write with EIO\n"
		    "      --full-after N   serve N writes, then fail every "
		    "write with ENOSPC\n",
    .parse_opt = tp_parse,
    .init = tp_init,
    .fini = tp_fini,
    .stats = tp_stats,
    .handlers =
	{
	    [XSEG_OP_READ] = tp_rw,
	    [XSEG_OP_WRITE] = tp_rw,
	    [XSEG_OP_FLUSH] = tp_flush,
	    [XSEG_OP_DELETE] = tp_delete,
	    [XSEG_OP_INFO] = tp_info,
	    [XSEG_OP_HASH] = tp_hash_op,
	},
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &tp_ops);
}
