/* SPDX-License-Identifier: MIT */
/*
 * test_vlmc_store: the store below vlmc in vlmc's tests. An in-memory
 * object store (objects grow as written; INFO gives the size, or ENOENT
 * for an object never written or deleted) with the faults vlmc must not
 * trust:
 *   --short-reads     a READ serves only the bytes the object holds
 *                     (serviced < size at its end) and leaves garbage
 *                     (0xee) after them, as a reused buffer would
 *   --lie-reads       a READ serves half of what was asked, garbage after,
 *                     whatever the object holds (INFO tells the truth)
 *   --short-writes    a WRITE is stored but answered one byte short
 *   --fail-deletes N  the first N DELETEs fail with EIO
 *   --fail-delete-suffix S  every DELETE of a name ending in S fails with
 *                     EIO (one object that can never be deleted)
 *   --fail-copy-suffix S  every COPY to a name ending in S fails with EIO
 *                     (a snapshot that fails after some of its COPYs)
 *   --hang-reads      a READ is never answered (a store that lost it)
 *   --hold OPS        requests of these ops (comma list of copy, delete,
 *                     write, read) are held, not answered, until a WRITE
 *                     to the object "ts:release" (sent by the test
 *                     straight to this port) executes and answers them
 *                     all, in order: a store stalled as long as the test
 *                     wants, with no timing
 * The faults spare vlmc's table objects ("vlmc:meta*"), so volumes can
 * still be created. Faults of the table writes themselves are set while
 * the store runs, by a WRITE of text to the object "ts:table-fault" (sent
 * by the test straight to this port):
 *   "landed N"  the next N WRITEs to a table object ("vlmc:meta.*") are
 *               stored and then answered ENOSPC: a write that failed
 *               but whose bytes are there to be read back (what cached
 *               does with a write-through/FUA write the store refused:
 *               it keeps the bytes dirty and serves them)
 *   "lost N"    the next N such WRITEs are answered ENOSPC, not stored
 *   "landlost N" as "landed" for the first of the next N such WRITEs,
 *               "lost" for the others: a failed commit whose bytes are
 *               there, and a rewrite over it that never got there
 *   "flush N"   the next N FLUSHes fail with EIO (the write before
 *               them did land)
 *   "hold N"    the next N such WRITEs are held as --hold holds (until
 *               "ts:release"; a failure set above applies when they are
 *               served): a table write in progress, for as long as the
 *               test wants
 *   "off"       none of these
 * "landed", "lost" and "landlost" take "after K": the next K table
 * WRITEs succeed first (a snapshot or clone writes the table twice: its
 * reclaim record before the copies, its commit after them).
 * Counters: SIGUSR1 logs them, and the port's statistics area has
 * "objects" (live objects), "deletes", "copies", "held" (requests held
 * now) and "table_faults" (table writes and FLUSHes failed on purpose).
 * The statistics are published at the peer's tick and may lag; an INFO
 * of the object "ts:held" answers the number of requests held now.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "peer.h"

enum {
	TS_OPT_SHORT_READS = 256,
	TS_OPT_LIE_READS,
	TS_OPT_SHORT_WRITES,
	TS_OPT_FAIL_DELETES,
	TS_OPT_FAIL_DELETE_SUFFIX,
	TS_OPT_FAIL_COPY_SUFFIX,
	TS_OPT_HANG_READS,
	TS_OPT_HOLD,
};

struct ts_obj {
	struct ts_obj *next;
	char name[XSEG_MAX_TARGETLEN + 1];
	uint64_t size;
	unsigned char *data;
};

#define TS_HASH 1024

struct ts {
	bool short_reads, lie_reads, short_writes, hang_reads;
	uint64_t fail_deletes;
	char fail_delete_suffix[64], fail_copy_suffix[64];
	uint32_t hold_ops; /* bit per XSEG_OP_ */
	pthread_mutex_t lock;
	struct ts_obj *objs[TS_HASH];
	uint64_t nr_objs, deletes, failed_deletes, copies; /* under lock */
	/* "ts:table-fault" (under lock): table writes left to fail, and
	 * whether they land; FLUSHes left to fail; faults so far */
	uint64_t table_fail_left, flush_fail_left, table_faults;
	bool table_fail_lands;
	/* "landlost N": only the first of the N failing writes lands */
	bool table_land_first;
	uint64_t table_skip; /* "after K": table writes left to pass first */
	uint64_t table_hold_left; /* table writes left to hold */
	/* held requests, oldest first (under lock) */
	struct xseg_request **held;
	uint64_t nr_held, cap_held;
};

static const struct option ts_options[] = {
    {"short-reads", no_argument, NULL, TS_OPT_SHORT_READS},
    {"lie-reads", no_argument, NULL, TS_OPT_LIE_READS},
    {"short-writes", no_argument, NULL, TS_OPT_SHORT_WRITES},
    {"fail-deletes", required_argument, NULL, TS_OPT_FAIL_DELETES},
    {"fail-delete-suffix", required_argument, NULL, TS_OPT_FAIL_DELETE_SUFFIX},
    {"fail-copy-suffix", required_argument, NULL, TS_OPT_FAIL_COPY_SUFFIX},
    {"hang-reads", no_argument, NULL, TS_OPT_HANG_READS},
    {"hold", required_argument, NULL, TS_OPT_HOLD},
    {NULL, 0, NULL, 0},
};

static int ts_parse(struct peer *p, int val, const char *arg)
{
	struct ts *t = peer_priv(p);

	switch (val) {
	case TS_OPT_SHORT_READS:
		t->short_reads = true;
		return 0;
	case TS_OPT_LIE_READS:
		t->lie_reads = true;
		return 0;
	case TS_OPT_SHORT_WRITES:
		t->short_writes = true;
		return 0;
	case TS_OPT_FAIL_DELETES:
		return peer_parse_u64(arg, &t->fail_deletes);
	case TS_OPT_FAIL_DELETE_SUFFIX:
	case TS_OPT_FAIL_COPY_SUFFIX: {
		char *dst = val == TS_OPT_FAIL_COPY_SUFFIX
				? t->fail_copy_suffix
				: t->fail_delete_suffix;

		if (!*arg || strlen(arg) >= sizeof(t->fail_delete_suffix)) {
			fprintf(stderr,
				"teststore: --fail-%s-suffix '%s': 1 to "
				"%zu characters\n",
				val == TS_OPT_FAIL_COPY_SUFFIX ? "copy"
							       : "delete",
				arg, sizeof(t->fail_delete_suffix) - 1);
			return -EINVAL;
		}
		strcpy(dst, arg);
		return 0;
	}
	case TS_OPT_HANG_READS:
		t->hang_reads = true;
		return 0;
	case TS_OPT_HOLD: {
		char buf[128], *save, *tok;

		if (strlen(arg) >= sizeof(buf))
			return -EINVAL;
		strcpy(buf, arg);
		for (tok = strtok_r(buf, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			if (!strcmp(tok, "copy"))
				t->hold_ops |= 1u << XSEG_OP_COPY;
			else if (!strcmp(tok, "delete"))
				t->hold_ops |= 1u << XSEG_OP_DELETE;
			else if (!strcmp(tok, "write"))
				t->hold_ops |= 1u << XSEG_OP_WRITE;
			else if (!strcmp(tok, "read"))
				t->hold_ops |= 1u << XSEG_OP_READ;
			else
				return -EINVAL;
		}
		return 0;
	}
	}
	return -EINVAL;
}

static unsigned ts_hash(const char *s, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h % TS_HASH;
}

/* Caller holds the lock. The link that points at name's object (or at
 * NULL where it would go). */
static struct ts_obj **ts_find(struct ts *t, const char *name, size_t len)
{
	struct ts_obj **pp = &t->objs[ts_hash(name, len)];

	for (; *pp; pp = &(*pp)->next)
		if (strlen((*pp)->name) == len &&
		    !memcmp((*pp)->name, name, len))
			break;
	return pp;
}

/* Faults spare the volume table ("vlmc:meta", "vlmc:meta.0", ...). */
static bool ts_faulty(const struct xseg_request *req)
{
	static const char meta[] = "vlmc:meta";

	return !(req->targetlen >= sizeof(meta) - 1 &&
		 !memcmp(req->target, meta, sizeof(meta) - 1));
}

static bool ts_is(const struct xseg_request *req, const char *name)
{
	return req->targetlen == strlen(name) &&
	       !memcmp(req->target, name, req->targetlen);
}

/* One of the sealed table objects (vlmc:meta.0, vlmc:meta.1). */
static bool ts_is_table(const struct xseg_request *req)
{
	static const char table[] = "vlmc:meta.";

	return req->targetlen > sizeof(table) - 1 &&
	       !memcmp(req->target, table, sizeof(table) - 1);
}

/* A WRITE to "ts:table-fault": set the table faults (see the top). */
static int ts_table_fault(struct peer *p, struct xseg_request *req)
{
	struct ts *t = peer_priv(p);
	const char *data = xseg_request_data(peer_seg(p), req);
	char cmd[64], what[16];
	unsigned long long n = 0, skip = 0;
	int err = 0, got;

	if (!data || !req->size || req->size >= sizeof(cmd))
		return -EINVAL;
	memcpy(cmd, data, req->size);
	cmd[req->size] = '\0';
	pthread_mutex_lock(&t->lock);
	if (!strcmp(cmd, "off")) {
		t->table_fail_left = t->flush_fail_left = 0;
		t->table_hold_left = t->table_skip = 0;
	} else if ((got = sscanf(cmd, "%15s %llu after %llu", what, &n,
				 &skip)) < 2) {
		err = EINVAL;
	} else if (!strcmp(what, "landed") || !strcmp(what, "lost") ||
		   !strcmp(what, "landlost")) {
		t->table_fail_left = n;
		t->table_skip = got == 3 ? skip : 0;
		t->table_fail_lands = strcmp(what, "lost") != 0;
		t->table_land_first = !strcmp(what, "landlost");
	} else if (got == 3) {
		err = EINVAL; /* "after" only for the write faults */
	} else if (!strcmp(what, "flush")) {
		t->flush_fail_left = n;
	} else if (!strcmp(what, "hold")) {
		t->table_hold_left = n;
	} else {
		err = EINVAL;
	}
	pthread_mutex_unlock(&t->lock);
	req->serviced = err ? 0 : req->size;
	return peer_complete(p, req, err);
}

/* Hold req (taken: answered by ts_release) if its op is held, or if it
 * is a table write and "hold N" has some left. */
static bool ts_hold(struct ts *t, struct xseg_request *req)
{
	bool held = false, table = req->op == XSEG_OP_WRITE && ts_is_table(req);

	if (!table && (!(t->hold_ops & (1u << req->op)) || !ts_faulty(req) ||
		       ts_is(req, "ts:release")))
		return false;
	pthread_mutex_lock(&t->lock);
	if (table && !t->table_hold_left) {
		pthread_mutex_unlock(&t->lock);
		return false;
	}
	if (t->nr_held == t->cap_held) {
		uint64_t cap = t->cap_held ? 2 * t->cap_held : 64;
		struct xseg_request **h = realloc(t->held, cap * sizeof(*h));

		if (h) {
			t->held = h;
			t->cap_held = cap;
		}
	}
	if (t->nr_held < t->cap_held) {
		t->held[t->nr_held++] = req;
		held = true;
		if (table)
			t->table_hold_left--;
	}
	pthread_mutex_unlock(&t->lock);
	/* a test learns a snapshot's new incarnation id from this */
	if (held && req->op == XSEG_OP_COPY)
		fprintf(stderr, "teststore: holding a COPY to %.*s\n",
			(int)req->targetlen, req->target);
	return held; /* (no room: served at once) */
}

static int ts_serve(struct peer *p, struct xseg_request *req);

/* Serve every held request, oldest first. */
static void ts_release(struct peer *p)
{
	struct ts *t = peer_priv(p);
	struct xseg_request **h;
	uint64_t n;

	pthread_mutex_lock(&t->lock);
	h = t->held;
	n = t->nr_held;
	t->held = NULL;
	t->nr_held = t->cap_held = 0;
	pthread_mutex_unlock(&t->lock);
	for (uint64_t i = 0; i < n; i++) {
		int rc = ts_serve(p, h[i]);

		if (rc)
			peer_complete(p, h[i], -rc);
	}
	free(h);
}

static int ts_read(struct peer *p, struct xseg_request *req)
{
	struct ts *t = peer_priv(p);
	unsigned char *data = xseg_request_data(peer_seg(p), req);
	struct ts_obj *o;
	uint64_t have = 0, serve = req->size;

	if (req->size && !data)
		return -EINVAL;
	if (ts_faulty(req) && t->hang_reads) {
		/* taken, never answered; a test waits for this line before
		 * it acts on the READ being in flight */
		fprintf(stderr,
			"teststore: holding a READ of %.*s unanswered\n",
			(int)req->targetlen, req->target);
		return 0;
	}
	pthread_mutex_lock(&t->lock);
	o = *ts_find(t, req->target, req->targetlen);
	if (!o) {
		pthread_mutex_unlock(&t->lock);
		return -ENOENT; /* vlmc reads it as zeroes */
	}
	if (req->offset < o->size) {
		have = o->size - req->offset;
		if (have > req->size)
			have = req->size;
		memcpy(data, o->data + req->offset, have);
	}
	pthread_mutex_unlock(&t->lock);
	memset(data + have, 0, req->size - have);
	if (ts_faulty(req) && t->short_reads)
		serve = have;
	if (ts_faulty(req) && t->lie_reads)
		serve = req->size / 2;
	/* what a reused buffer would still hold */
	memset(data + serve, 0xee, req->size - serve);
	req->serviced = serve;
	return peer_complete(p, req, 0);
}

static int ts_write(struct peer *p, struct xseg_request *req)
{
	struct ts *t = peer_priv(p);
	const unsigned char *data = xseg_request_data(peer_seg(p), req);
	uint64_t end = req->offset + req->size;
	struct ts_obj **pp, *o;
	bool fault = false;
	int err = 0;

	if (req->size && !data)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	if (ts_is_table(req) && t->table_fail_left && t->table_skip) {
		t->table_skip--; /* "after K": this one succeeds */
	} else if (ts_is_table(req) && t->table_fail_left) {
		t->table_fail_left--;
		t->table_faults++;
		fault = true;
		if (!t->table_fail_lands) {
			pthread_mutex_unlock(&t->lock);
			return peer_complete(p, req, ENOSPC);
		}
		if (t->table_land_first) /* this one lands, the rest not */
			t->table_land_first = t->table_fail_lands = false;
	}
	pp = ts_find(t, req->target, req->targetlen);
	o = *pp;
	if (!o) {
		o = calloc(1, sizeof(*o));
		if (o) {
			memcpy(o->name, req->target, req->targetlen);
			*pp = o;
			t->nr_objs++;
		}
	}
	if (o && end > o->size) {
		unsigned char *d = realloc(o->data, end);

		if (d) {
			memset(d + o->size, 0, end - o->size);
			o->data = d;
			o->size = end;
		}
	}
	if (!o || end > o->size)
		err = ENOMEM;
	else
		memcpy(o->data + req->offset, data, req->size);
	pthread_mutex_unlock(&t->lock);
	if (err)
		return -err;
	if (fault) /* stored, and answered as failed */
		return peer_complete(p, req, ENOSPC);
	req->serviced = req->size;
	if (ts_faulty(req) && t->short_writes && req->size)
		req->serviced = req->size - 1;
	return peer_complete(p, req, 0);
}

/* req's target ends with suffix (never, for an empty one). */
static bool ts_ends_with(const struct xseg_request *req, const char *suffix)
{
	size_t sl = strlen(suffix);

	return sl && req->targetlen >= sl &&
	       !memcmp(req->target + req->targetlen - sl, suffix, sl);
}

static int ts_delete(struct peer *p, struct xseg_request *req)
{
	struct ts *t = peer_priv(p);
	struct ts_obj **pp, *o;
	bool fail;

	if (ts_ends_with(req, t->fail_delete_suffix))
		return -EIO; /* one object whose DELETE fails for good */
	pthread_mutex_lock(&t->lock);
	fail = ts_faulty(req) && t->failed_deletes < t->fail_deletes;
	if (fail) {
		t->failed_deletes++;
		pthread_mutex_unlock(&t->lock);
		return -EIO;
	}
	t->deletes++;
	pp = ts_find(t, req->target, req->targetlen);
	o = *pp;
	if (o) {
		*pp = o->next;
		t->nr_objs--;
		free(o->data);
		free(o);
	}
	pthread_mutex_unlock(&t->lock);
	return peer_complete(p, req, o ? 0 : ENOENT);
}

static int ts_info(struct peer *p, struct xseg_request *req)
{
	struct ts *t = peer_priv(p);
	struct xseg_reply_info *info = xseg_request_data(peer_seg(p), req);
	struct ts_obj *o;

	if (!info)
		return -EINVAL;
	if (ts_is(req, "ts:held")) {
		pthread_mutex_lock(&t->lock);
		info->size = t->nr_held;
		pthread_mutex_unlock(&t->lock);
		return peer_complete(p, req, 0);
	}
	pthread_mutex_lock(&t->lock);
	o = *ts_find(t, req->target, req->targetlen);
	info->size = o ? o->size : 0;
	pthread_mutex_unlock(&t->lock);
	return peer_complete(p, req, o ? 0 : ENOENT);
}

static int ts_ok(struct peer *p, struct xseg_request *req)
{
	return peer_complete(p, req, 0); /* PING */
}

static int ts_flush(struct peer *p, struct xseg_request *req)
{
	struct ts *t = peer_priv(p);
	bool fail;

	pthread_mutex_lock(&t->lock);
	fail = t->flush_fail_left > 0;
	if (fail) {
		t->flush_fail_left--;
		t->table_faults++;
	}
	pthread_mutex_unlock(&t->lock);
	return peer_complete(p, req, fail ? EIO : 0);
}

/* COPY: the target becomes a copy of the source (ENOENT: no source). */
static int ts_copy(struct peer *p, struct xseg_request *req)
{
	struct ts *t = peer_priv(p);
	const struct xseg_request_copy *cp =
	    xseg_request_data(peer_seg(p), req);
	struct ts_obj **pp, *src, *o;
	unsigned char *d = NULL;
	int err = 0;

	if (!cp || !cp->src_targetlen || cp->src_targetlen > XSEG_MAX_TARGETLEN)
		return -EINVAL;
	if (ts_ends_with(req, t->fail_copy_suffix)) {
		fprintf(stderr, "teststore: failing a COPY to %.*s\n",
			(int)req->targetlen, req->target);
		return -EIO;
	}
	pthread_mutex_lock(&t->lock);
	src = *ts_find(t, cp->src_target, cp->src_targetlen);
	if (!src) {
		pthread_mutex_unlock(&t->lock);
		return peer_complete(p, req, ENOENT);
	}
	if (src->size && !(d = malloc(src->size)))
		err = ENOMEM;
	pp = ts_find(t, req->target, req->targetlen);
	o = *pp;
	if (!err && !o) {
		o = calloc(1, sizeof(*o));
		if (o) {
			memcpy(o->name, req->target, req->targetlen);
			*pp = o;
			t->nr_objs++;
		} else {
			err = ENOMEM;
		}
	}
	if (!err) {
		if (src->size)
			memcpy(d, src->data, src->size);
		free(o->data);
		o->data = d;
		o->size = src->size;
		t->copies++;
	} else {
		free(d);
	}
	pthread_mutex_unlock(&t->lock);
	return peer_complete(p, req, err);
}

static int ts_serve(struct peer *p, struct xseg_request *req)
{
	switch (req->op) {
	case XSEG_OP_READ:
		return ts_read(p, req);
	case XSEG_OP_WRITE:
		return ts_write(p, req);
	case XSEG_OP_DELETE:
		return ts_delete(p, req);
	case XSEG_OP_COPY:
		return ts_copy(p, req);
	}
	return -EOPNOTSUPP;
}

/* Entry of READ, WRITE, DELETE, COPY: held, the release, or served. */
static int ts_h(struct peer *p, struct xseg_request *req)
{
	if (req->op == XSEG_OP_WRITE && ts_is(req, "ts:release")) {
		ts_release(p);
		req->serviced = req->size;
		return peer_complete(p, req, 0);
	}
	if (req->op == XSEG_OP_WRITE && ts_is(req, "ts:table-fault"))
		return ts_table_fault(p, req);
	if (ts_hold(peer_priv(p), req))
		return 0;
	return ts_serve(p, req);
}

static int ts_init(struct peer *p)
{
	struct ts *t = peer_priv(p);

	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

static void ts_fini(struct peer *p)
{
	struct ts *t = peer_priv(p);

	for (unsigned i = 0; i < TS_HASH; i++)
		while (t->objs[i]) {
			struct ts_obj *o = t->objs[i];

			t->objs[i] = o->next;
			free(o->data);
			free(o);
		}
	free(t->held); /* (the framework fails what is still held) */
	pthread_mutex_destroy(&t->lock);
}

static void ts_stats(struct peer *p)
{
	struct ts *t = peer_priv(p);

	pthread_mutex_lock(&t->lock);
	peer_info("stats: test store: objects %" PRIu64 " deletes %" PRIu64
		  " failed deletes %" PRIu64,
		  t->nr_objs, t->deletes, t->failed_deletes);
	pthread_mutex_unlock(&t->lock);
}

static uint32_t ts_stats_table(struct peer *p, struct xseg_stat *st,
			       uint32_t max)
{
	struct ts *t = peer_priv(p);
	uint32_t n = 0;

	pthread_mutex_lock(&t->lock);
	peer_stat(st, &n, max, "objects", t->nr_objs);
	peer_stat(st, &n, max, "deletes", t->deletes);
	peer_stat(st, &n, max, "copies", t->copies);
	peer_stat(st, &n, max, "held", t->nr_held);
	peer_stat(st, &n, max, "table_faults", t->table_faults);
	pthread_mutex_unlock(&t->lock);
	return n;
}

static const struct peer_ops ts_ops = {
    .type = "teststore",
    .summary = "In-memory object store with short answers and failing "
	       "deletes (vlmc tests).",
    .priv_size = sizeof(struct ts),
    .options = ts_options,
    .options_help = "      --short-reads     serve only what the object "
		    "holds, garbage after\n"
		    "      --lie-reads       serve half of every read, "
		    "garbage after\n"
		    "      --short-writes    answer writes one byte short\n"
		    "      --fail-deletes N  fail the first N deletes with "
		    "EIO\n"
		    "      --fail-delete-suffix S  fail every delete of a "
		    "name ending in S with EIO\n"
		    "      --fail-copy-suffix S  fail every copy to a name "
		    "ending in S with EIO\n"
		    "      --hang-reads      never answer a read\n"
		    "      --hold OPS        hold copy,delete,write,read "
		    "requests until a write to ts:release\n"
		    "  (a write of 'landed N', 'lost N', 'flush N', 'hold N' "
		    "or 'off' to ts:table-fault fails or holds table writes "
		    "or fails flushes; 'landed N after K' etc. lets K table "
		    "writes succeed first)\n",
    .parse_opt = ts_parse,
    .init = ts_init,
    .fini = ts_fini,
    .stats = ts_stats,
    .stats_table = ts_stats_table,
    .handlers =
	{
	    [XSEG_OP_READ] = ts_h,
	    [XSEG_OP_WRITE] = ts_h,
	    [XSEG_OP_FLUSH] = ts_flush,
	    [XSEG_OP_DELETE] = ts_h,
	    [XSEG_OP_COPY] = ts_h,
	    [XSEG_OP_INFO] = ts_info,
	    [XSEG_OP_PING] = ts_ok,
	},
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &ts_ops);
}
