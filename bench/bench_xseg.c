/* SPDX-License-Identifier: MIT */
/*
 * bench_xseg: load generator for any xseg port.
 *
 * One thread drives a dynamic port of its own: it keeps --iodepth requests
 * in flight to the target port, and as each reply arrives it records the
 * latency, checks the result (and, with --verify, the block stamps), then
 * reuses the request for the next one. Exit status: 0 when every request
 * succeeded (and verified), 1 on request errors, verify mismatches or a
 * run-time failure, 2 on bad usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_xseg_util.h"
#include "peer.h"

#define BENCH_PROG	       "bench_xseg"
#define BENCH_BATCH	       64
#define BENCH_MAX_ERRORS_SHOWN 10

enum bench_op {
	BENCH_READ,
	BENCH_WRITE,
	BENCH_INFO,
	BENCH_DELETE,
	BENCH_PING,
	BENCH_MIXED,
};

static const char *const bench_op_names[] = {"read",   "write", "info",
					     "delete", "ping",	"mixed"};

/* Per-block state kept only with --verify. */
#define BENCH_BLK_WRITTEN  1 /* stamped by this run */
#define BENCH_BLK_INFLIGHT 2

struct bench_slot {
	struct xseg_request *req;
	uint64_t submit_ns;
	uint64_t unit;
	uint16_t op; /* xseg op */
	bool check;  /* verify this READ's data */
};

struct bench {
	/* options */
	const char *segment;
	uint32_t target;
	enum bench_op op;
	unsigned read_pct;
	bool random;
	uint64_t bs;
	uint64_t object_size;
	uint64_t objects;
	uint64_t total_size;
	unsigned iodepth;
	uint64_t duration_ns;
	uint64_t count;
	uint64_t seed;
	const char *prefix;
	size_t prefix_len;
	const char *exact_target; /* --target: one object, this exact name */
	bool verify;
	bool json;
	bool poll;
	bool batch_signal;
	bool fua; /* --fua: writes carry XSEG_F_FUA */
	uint64_t spin_ns;
	uint64_t timeout_ns;
	bool progress;

	/* run time */
	struct xseg_sigbatch sigbatch; /* --batch-signal */
	struct xseg *seg;
	uint32_t port;
	uint64_t units;		/* blocks, objects, or 1 for ping */
	uint64_t units_per_obj; /* blocks per object */
	uint64_t cursor;	/* seq pattern */
	struct bench_lfsr lfsr; /* rand pattern */
	uint64_t rng;		/* mixed op choice */
	unsigned char *blk;	/* --verify block states */
	struct bench_slot *slots;
	uint64_t issued, inflight, end_ns;
	uint64_t elapsed_ns;
	bool stop_issuing;

	/* results */
	struct bench_hist *lat;
	uint64_t completed, errors, verify_errors, verified, bytes;
	uint64_t shown;
	bool stages;
	uint64_t stage_samples, stage_accept, stage_service, stage_reply;
};

static volatile sig_atomic_t bench_interrupted;

static void bench_on_signal(int sig)
{
	(void)sig;
	bench_interrupted = 1;
}

static void bench_usage(void)
{
	printf("Usage: " BENCH_PROG " -g SEGMENT -p PORT [OPTIONS]\n"
	       "Generate load on an xseg port and report throughput and "
	       "latency.\n\n"
	       "  -g, --segment NAME     segment to join (required)\n"
	       "  -p, --port N           target port (required)\n"
	       "  -o, --op OP            read, write, info, delete, ping or "
	       "mixed\n"
	       "                         (default read)\n"
	       "  -M, --read-pct P       mixed: percentage of reads (default "
	       "50)\n"
	       "  -P, --pattern PAT      seq or rand (LFSR: every block once "
	       "per pass)\n"
	       "  -b, --bs SIZE          block size (default 4k)\n"
	       "  -O, --object-size SIZE object size (default 4M)\n"
	       "  -n, --objects N        number of objects (default 1)\n"
	       "  -S, --total-size SIZE  total size instead of --objects\n"
	       "  -q, --iodepth N        requests in flight (default 1)\n"
	       "  -T, --duration TIME    run this long (bare number = s)\n"
	       "  -c, --count N          issue N requests (default: one pass "
	       "over all blocks;\n"
	       "                         ping: 100000)\n"
	       "      --seed N           seed of the rand pattern, the mixed "
	       "choice and stamps\n"
	       "                         (default 1)\n"
	       "      --prefix NAME      object name prefix (default "
	       "'bench'): NAME_000000...\n"
	       "      --target NAME      one object with exactly this name "
	       "(e.g. a vlmc volume);\n"
	       "                         replaces --prefix\n"
	       "      --verify           writes stamp each block (target, "
	       "offset, seed);\n"
	       "                         reads check them\n"
	       "  -w, --wait MODE        poll (busy-poll replies) or sleep "
	       "(default)\n"
	       "  -s, --spin TIME        sleep mode: spin this long first "
	       "(default 0,\n"
	       "                         bare number = us)\n"
	       "      --timeout TIME     fail when no reply arrives for TIME "
	       "(default 30s)\n"
	       "      --stages           report mean time per stage (queue, "
	       "service, reply)\n"
	       "                         from the requests' timestamps\n"
	       "      --batch-signal     submit each batch of requests (the "
	       "replies of one\n"
	       "                         wait) first, then wake the target "
	       "once\n"
	       "      --fua              writes carry XSEG_F_FUA (durable when "
	       "they complete)\n"
	       "      --json             print the report as one JSON object\n"
	       "      --no-progress      no progress line on a terminal\n"
	       "  -h, --help             this help\n"
	       "  -V, --version          print the version\n\n"
	       "Exit status: 0 all requests succeeded, 1 errors or verify "
	       "mismatches,\n"
	       "2 bad usage.\n");
}

enum {
	OPT_SEED = 1000,
	OPT_PREFIX,
	OPT_TARGET,
	OPT_VERIFY,
	OPT_TIMEOUT,
	OPT_JSON,
	OPT_NO_PROGRESS,
	OPT_STAGES,
	OPT_BATCH_SIGNAL,
	OPT_FUA,
};

static const struct option bench_options[] = {
    {"segment", required_argument, NULL, 'g'},
    {"port", required_argument, NULL, 'p'},
    {"op", required_argument, NULL, 'o'},
    {"read-pct", required_argument, NULL, 'M'},
    {"pattern", required_argument, NULL, 'P'},
    {"bs", required_argument, NULL, 'b'},
    {"object-size", required_argument, NULL, 'O'},
    {"objects", required_argument, NULL, 'n'},
    {"total-size", required_argument, NULL, 'S'},
    {"iodepth", required_argument, NULL, 'q'},
    {"duration", required_argument, NULL, 'T'},
    {"count", required_argument, NULL, 'c'},
    {"seed", required_argument, NULL, OPT_SEED},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"target", required_argument, NULL, OPT_TARGET},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"wait", required_argument, NULL, 'w'},
    {"spin", required_argument, NULL, 's'},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"json", no_argument, NULL, OPT_JSON},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"stages", no_argument, NULL, OPT_STAGES},
    {"batch-signal", no_argument, NULL, OPT_BATCH_SIGNAL},
    {"fua", no_argument, NULL, OPT_FUA},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

#define BAD(...)                                                               \
	do {                                                                   \
		peer_usage_error(BENCH_PROG, __VA_ARGS__);                     \
		return 2;                                                      \
	} while (0)

/* Returns -1 to run, else the exit status. */
static int bench_parse(struct bench *b, int argc, char **argv)
{
	bool have_port = false, have_objects = false;
	uint64_t v;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":g:p:o:M:P:b:O:n:S:q:T:c:w:s:hV",
				bench_options, NULL)) != -1) {
		switch (c) {
		case 'g':
			b->segment = optarg;
			break;
		case 'p':
			if (peer_parse_u64(optarg, &v) || v >= XSEG_NOPORT)
				BAD("bad port '%s'", optarg);
			b->target = (uint32_t)v;
			have_port = true;
			break;
		case 'o': {
			size_t i, n = sizeof(bench_op_names) /
				      sizeof(bench_op_names[0]);
			for (i = 0; i < n; i++)
				if (!strcmp(optarg, bench_op_names[i]))
					break;
			if (i == n)
				BAD("bad op '%s' (read, write, info, delete, "
				    "ping, mixed)",
				    optarg);
			b->op = (enum bench_op)i;
			break;
		}
		case 'M':
			if (peer_parse_percent(optarg, &b->read_pct))
				BAD("bad read percentage '%s' (0..100)",
				    optarg);
			break;
		case 'P':
			if (!strcmp(optarg, "seq"))
				b->random = false;
			else if (!strcmp(optarg, "rand"))
				b->random = true;
			else
				BAD("bad pattern '%s' (seq or rand)", optarg);
			break;
		case 'b':
			if (peer_parse_size(optarg, &b->bs) || b->bs == 0)
				BAD("bad block size '%s'", optarg);
			break;
		case 'O':
			if (peer_parse_size(optarg, &b->object_size) ||
			    b->object_size == 0)
				BAD("bad object size '%s'", optarg);
			break;
		case 'n':
			if (peer_parse_u64(optarg, &b->objects) ||
			    b->objects == 0)
				BAD("bad number of objects '%s'", optarg);
			have_objects = true;
			break;
		case 'S':
			if (peer_parse_size(optarg, &b->total_size) ||
			    b->total_size == 0)
				BAD("bad total size '%s'", optarg);
			break;
		case 'q':
			if (peer_parse_u64(optarg, &v) || v < 1 || v > 65536)
				BAD("bad iodepth '%s' (1..65536)", optarg);
			b->iodepth = (unsigned)v;
			break;
		case 'T':
			if (peer_parse_duration(optarg, 1000000000ULL,
						&b->duration_ns) ||
			    !b->duration_ns)
				BAD("bad duration '%s'", optarg);
			break;
		case 'c':
			if (peer_parse_u64(optarg, &b->count) || !b->count)
				BAD("bad count '%s'", optarg);
			break;
		case OPT_SEED:
			if (peer_parse_u64(optarg, &b->seed))
				BAD("bad seed '%s'", optarg);
			break;
		case OPT_PREFIX:
			if (!optarg[0] ||
			    strlen(optarg) > XSEG_MAX_TARGETLEN - 24)
				BAD("bad prefix '%s' (1..%d characters)",
				    optarg, XSEG_MAX_TARGETLEN - 24);
			b->prefix = optarg;
			break;
		case OPT_TARGET:
			if (!optarg[0] || strlen(optarg) > XSEG_MAX_TARGETLEN)
				BAD("bad target '%s' (1..%d characters)",
				    optarg, XSEG_MAX_TARGETLEN);
			b->exact_target = optarg;
			break;
		case OPT_VERIFY:
			b->verify = true;
			break;
		case 'w':
			if (!strcmp(optarg, "poll"))
				b->poll = true;
			else if (!strcmp(optarg, "sleep"))
				b->poll = false;
			else
				BAD("bad wait mode '%s' (poll or sleep)",
				    optarg);
			break;
		case 's':
			if (peer_parse_duration(optarg, 1000, &b->spin_ns))
				BAD("bad spin time '%s'", optarg);
			break;
		case OPT_TIMEOUT:
			if (peer_parse_duration(optarg, 1000000000ULL,
						&b->timeout_ns) ||
			    !b->timeout_ns)
				BAD("bad timeout '%s'", optarg);
			break;
		case OPT_JSON:
			b->json = true;
			break;
		case OPT_STAGES:
			b->stages = true;
			break;
		case OPT_BATCH_SIGNAL:
			b->batch_signal = true;
			break;
		case OPT_FUA:
			b->fua = true;
			break;
		case OPT_NO_PROGRESS:
			b->progress = false;
			break;
		case 'h':
			bench_usage();
			return 0;
		case 'V':
			printf(BENCH_PROG " %s\n", AC_VERSION);
			return 0;
		case ':':
			BAD("option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt)
				BAD("unknown option '-%c'", optopt);
			BAD("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		BAD("unexpected argument '%s'", argv[optind]);
	if (!b->segment)
		BAD("no segment given (-g NAME)");
	if (!have_port)
		BAD("no target port given (-p N)");
	if (b->fua && b->op != BENCH_WRITE && b->op != BENCH_MIXED)
		BAD("--fua needs write or mixed");
	if (b->duration_ns && b->count)
		BAD("--duration and --count exclude each other");
	if (b->total_size && have_objects)
		BAD("--objects and --total-size exclude each other");
	if (b->total_size)
		b->objects =
		    (b->total_size + b->object_size - 1) / b->object_size;
	if (b->op == BENCH_READ || b->op == BENCH_WRITE ||
	    b->op == BENCH_MIXED) {
		if (b->bs > b->object_size || b->object_size % b->bs)
			BAD("block size %" PRIu64 " must divide the object "
			    "size %" PRIu64,
			    b->bs, b->object_size);
		b->units_per_obj = b->object_size / b->bs;
		if (b->objects > UINT32_MAX / b->units_per_obj)
			BAD("too many blocks (at most 2^32 - 1)");
		b->units = b->objects * b->units_per_obj;
	} else if (b->op == BENCH_PING) {
		b->units = 1;
		b->units_per_obj = 1;
		if (b->verify)
			BAD("--verify needs read, write or mixed");
	} else {
		b->units = b->objects;
		b->units_per_obj = 1;
		if (b->verify)
			BAD("--verify needs read, write or mixed");
		if (b->objects > UINT32_MAX)
			BAD("too many objects (at most 2^32 - 1)");
	}
	b->prefix_len = strlen(b->prefix);
	if (b->exact_target && b->objects != 1)
		BAD("--target names one object: it excludes --objects N > 1 "
		    "and a --total-size larger than --object-size");
	if (!b->duration_ns && !b->count)
		b->count = b->op == BENCH_PING ? 100000 : b->units;
	if (b->verify && b->iodepth > b->units) {
		/* two requests for one block in flight would race */
		b->iodepth = (unsigned)b->units;
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* Run                                                                 */
/* ------------------------------------------------------------------ */

static uint64_t bench_rand(struct bench *b)
{
	/* xorshift64*: only picks read vs write in mixed mode */
	uint64_t x = b->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	b->rng = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static uint64_t bench_next_unit(struct bench *b)
{
	if (b->random)
		return bench_lfsr_next(&b->lfsr);
	uint64_t u = b->cursor;
	if (++b->cursor == b->units)
		b->cursor = 0;
	return u;
}

static void bench_target_of(const struct bench *b, uint64_t unit, char *name,
			    uint64_t *offset)
{
	uint64_t obj = unit / b->units_per_obj;
	char digits[24];
	int nd = 0;

	*offset = (unit % b->units_per_obj) * b->bs;
	if (b->exact_target) {
		strcpy(name,
		       b->exact_target); /* length checked at parse time */
		return;
	}
	/* prefix + '_' + at least 6 digits; by hand, as snprintf would cost
	 * as much as a round trip (the prefix length was checked) */
	do {
		digits[nd++] = (char)('0' + obj % 10);
		obj /= 10;
	} while (obj || nd < 6);
	memcpy(name, b->prefix, b->prefix_len);
	name[b->prefix_len] = '_';
	for (int i = 0; i < nd; i++)
		name[b->prefix_len + 1 + i] = digits[nd - 1 - i];
	name[b->prefix_len + 1 + nd] = '\0';
}

static bool bench_may_issue(struct bench *b, uint64_t now)
{
	if (b->stop_issuing || bench_interrupted)
		return false;
	if (b->count)
		return b->issued < b->count;
	return now < b->end_ns;
}

/* Prepare and submit the next request in slot s. 0 or -errno (fatal). */
static int bench_issue(struct bench *b, struct bench_slot *s)
{
	struct xseg_request *req = s->req;
	char name[XSEG_MAX_TARGETLEN + 1];
	uint64_t unit, offset = 0, datalen = 0;
	uint32_t targetlen = 0;
	uint16_t op;
	int rc;

	switch (b->op) {
	case BENCH_READ:
		op = XSEG_OP_READ;
		break;
	case BENCH_WRITE:
		op = XSEG_OP_WRITE;
		break;
	case BENCH_INFO:
		op = XSEG_OP_INFO;
		break;
	case BENCH_DELETE:
		op = XSEG_OP_DELETE;
		break;
	case BENCH_PING:
		op = XSEG_OP_PING;
		break;
	default:
		op = bench_rand(b) % 100 < b->read_pct ? XSEG_OP_READ
						       : XSEG_OP_WRITE;
		break;
	}
	unit = bench_next_unit(b);
	if (b->blk) {
		/* never two requests on one block at once: the order in
		 * which the target serves them is not defined */
		for (uint64_t tries = 0; b->blk[unit] & BENCH_BLK_INFLIGHT;
		     tries++) {
			if (tries > b->units)
				return -EDEADLK; /* cannot happen: iodepth
						    <= units */
			unit = bench_next_unit(b);
		}
		b->blk[unit] |= BENCH_BLK_INFLIGHT;
	}
	s->unit = unit;
	s->op = op;
	s->check = false;
	if (op != XSEG_OP_PING) {
		bench_target_of(b, unit, name, &offset);
		targetlen = (uint32_t)strlen(name);
	}
	if (op == XSEG_OP_READ || op == XSEG_OP_WRITE)
		datalen = b->bs;
	else if (op == XSEG_OP_INFO)
		datalen = sizeof(struct xseg_reply_info);
	rc = xseg_prep_request(b->seg, req, targetlen, datalen);
	if (rc < 0) {
		peer_err("cannot prepare a request of %" PRIu64 " bytes: %s",
			 datalen, strerror(-rc));
		return rc;
	}
	req->op = op;
	/* a reused request keeps its flags: set them every time */
	req->flags = op == XSEG_OP_WRITE && b->fua ? XSEG_F_FUA : 0;
	req->offset = offset;
	req->size = (op == XSEG_OP_READ || op == XSEG_OP_WRITE) ? b->bs : 0;
	if (targetlen)
		memcpy(xseg_request_target(req), name, targetlen);
	if (op == XSEG_OP_WRITE && b->verify)
		bench_stamp_fill(xseg_request_data(b->seg, req), b->bs, name,
				 targetlen, offset, b->seed);
	if (op == XSEG_OP_READ && b->verify)
		/* a mixed run only checks blocks it wrote itself */
		s->check =
		    b->op == BENCH_READ || (b->blk[unit] & BENCH_BLK_WRITTEN);
	req->user = (uint64_t)(s - b->slots);
	s->submit_ns = peer_now_ns();
	rc = xseg_submit_batched(b->seg, req, b->target,
				 b->batch_signal ? &b->sigbatch : NULL);
	if (rc < 0) {
		peer_err("segment %s: port %" PRIu32 ": cannot submit: %s",
			 b->segment, b->target,
			 rc == -ENXIO ? "no peer serves this port"
				      : strerror(-rc));
		if (b->blk)
			b->blk[unit] &= ~BENCH_BLK_INFLIGHT;
		return rc;
	}
	b->issued++;
	b->inflight++;
	return 0;
}

static void bench_show_error(struct bench *b, const struct bench_slot *s,
			     const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void bench_show_error(struct bench *b, const struct bench_slot *s,
			     const char *fmt, ...)
{
	char name[XSEG_MAX_TARGETLEN + 1] = "";
	char msg[256];
	uint64_t offset = 0;
	va_list ap;

	if (b->shown++ >= BENCH_MAX_ERRORS_SHOWN) {
		if (b->shown == BENCH_MAX_ERRORS_SHOWN + 1)
			peer_err("more errors: not shown, counted");
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (s->op == XSEG_OP_PING) {
		peer_err("%s to port %" PRIu32 ": %s", peer_op_name(s->op),
			 b->target, msg);
		return;
	}
	bench_target_of(b, s->unit, name, &offset);
	if (s->op == XSEG_OP_READ || s->op == XSEG_OP_WRITE)
		peer_err("%s target %s offset %" PRIu64 ": %s",
			 peer_op_name(s->op), name, offset, msg);
	else
		peer_err("%s target %s: %s", peer_op_name(s->op), name, msg);
}

/* Account for one reply; the request stays with the slot. */
static void bench_complete(struct bench *b, struct bench_slot *s, uint64_t now)
{
	struct xseg_request *req = s->req;

	b->inflight--;
	b->completed++;
	bench_hist_add(b->lat, now - s->submit_ns);
	if (b->blk)
		b->blk[s->unit] &= ~BENCH_BLK_INFLIGHT;
	if (b->stages && req->ts_submitted && req->ts_accepted &&
	    req->ts_responded && req->ts_received &&
	    req->ts_submitted <= req->ts_accepted &&
	    req->ts_accepted <= req->ts_responded &&
	    req->ts_responded <= req->ts_received) {
		b->stage_samples++;
		b->stage_accept += req->ts_accepted - req->ts_submitted;
		b->stage_service += req->ts_responded - req->ts_accepted;
		b->stage_reply += req->ts_received - req->ts_responded;
	}
	if (req->error) {
		b->errors++;
		bench_show_error(b, s, "failed: %s", strerror(req->error));
		return;
	}
	if ((s->op == XSEG_OP_READ || s->op == XSEG_OP_WRITE) &&
	    req->serviced != req->size) {
		b->errors++;
		bench_show_error(
		    b, s, "short transfer: %" PRIu64 " of %" PRIu64 " bytes",
		    req->serviced, req->size);
		return;
	}
	if (s->op == XSEG_OP_READ || s->op == XSEG_OP_WRITE)
		b->bytes += req->size;
	if (s->op == XSEG_OP_WRITE && b->blk)
		b->blk[s->unit] |= BENCH_BLK_WRITTEN;
	if (s->check) {
		char name[XSEG_MAX_TARGETLEN + 1], why[160];
		uint64_t offset;
		int64_t bad;

		bench_target_of(b, s->unit, name, &offset);
		bad = bench_stamp_check(xseg_request_data(b->seg, req), b->bs,
					name, strlen(name), offset, b->seed,
					why, sizeof(why));
		b->verified++;
		if (bad >= 0) {
			b->verify_errors++;
			bench_show_error(b, s, "verify mismatch: %s", why);
		}
	}
}

static void bench_progress(struct bench *b, uint64_t now, uint64_t start)
{
	double secs = (double)(now - start) / 1e9;

	printf("\r[%6.1fs] %" PRIu64 " requests, %.0f IOPS, %.1f MiB/s, "
	       "errors %" PRIu64 "   ",
	       secs, b->completed, secs > 0 ? b->completed / secs : 0.0,
	       secs > 0 ? b->bytes / secs / 1048576.0 : 0.0,
	       b->errors + b->verify_errors);
	fflush(stdout);
}

/* Wait for at least one reply; fills reps, returns how many, or -errno. */
static int bench_wait(struct bench *b, struct xseg_request **reps)
{
	unsigned n;

	if (!b->poll) {
		int rc =
		    xseg_wait_reply(b->seg, b->port, b->timeout_ns, &reps[0]);
		if (rc < 0)
			return rc;
		return 1 + (int)xseg_receive_batch(b->seg, b->port, reps + 1,
						   BENCH_BATCH - 1);
	}
	/* Busy-poll; look at the clock only now and then. Dead peers are
	 * reaped every 100 ms, as xseg_wait_reply does in sleep mode. */
	uint64_t start = peer_now_ns(), last_reap = start;
	for (unsigned spins = 1;; spins++) {
		n = xseg_receive_batch(b->seg, b->port, reps, BENCH_BATCH);
		if (n)
			return (int)n;
		if (spins % 4096)
			continue;
		if (bench_interrupted)
			return -EINTR;
		uint64_t now = peer_now_ns();
		if (now - start >= b->timeout_ns)
			return -ETIMEDOUT;
		if (now - last_reap >= 100000000ULL) {
			xseg_reap(b->seg, NULL);
			last_reap = now;
		}
	}
}

static int bench_run(struct bench *b)
{
	struct xseg_request *reps[BENCH_BATCH];
	uint64_t start = peer_now_ns(), now = start, next_progress;
	unsigned nslots = b->iodepth;
	int rc = 0;

	b->slots = calloc(nslots, sizeof(*b->slots));
	if (!b->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < nslots; i++) {
		rc = xseg_get_request(b->seg, b->port, &b->slots[i].req);
		if (rc < 0) {
			peer_err("segment %s: cannot get request %u of %u: %s",
				 b->segment, i + 1, nslots,
				 rc == -ENOMEM ? "request pool exhausted"
					       : strerror(-rc));
			nslots = i;
			goto out;
		}
	}
	start = now = peer_now_ns();
	next_progress = start + 1000000000ULL;
	b->end_ns = start + b->duration_ns;
	for (unsigned i = 0; i < nslots && bench_may_issue(b, now); i++) {
		rc = bench_issue(b, &b->slots[i]);
		if (rc < 0) {
			b->stop_issuing = true; /* drain what was issued */
			break;
		}
	}
	/* --batch-signal: the whole initial window, then one wake-up. */
	xseg_sigbatch_flush(b->seg, &b->sigbatch);
	while (b->inflight) {
		int n = bench_wait(b, reps);

		if (n == -EINTR)
			continue; /* bench_interrupted: stop issuing, drain */
		if (n < 0) {
			rc = n;
			if (n == -ETIMEDOUT)
				peer_err("segment %s: port %" PRIu32
					 ": no reply for %.1f s, %" PRIu64
					 " request(s) outstanding",
					 b->segment, b->target,
					 (double)b->timeout_ns / 1e9,
					 b->inflight);
			else
				peer_err("segment %s: port %" PRIu32
					 ": waiting for replies: %s",
					 b->segment, b->port, strerror(-n));
			goto out;
		}
		now = peer_now_ns();
		for (int i = 0; i < n; i++) {
			uint64_t idx = reps[i]->user;
			struct bench_slot *s;

			if (idx >= nslots || b->slots[idx].req != reps[i]) {
				peer_err("reply for an unknown request %" PRIu64
					 " dropped",
					 reps[i]->id);
				continue;
			}
			s = &b->slots[idx];
			bench_complete(b, s, now);
			if (bench_may_issue(b, now) && !rc) {
				rc = bench_issue(b, s);
				if (rc < 0)
					b->stop_issuing = true;
			}
		}
		/* Every request of this batch is queued: wake the target
		 * once (a no-op without --batch-signal). */
		xseg_sigbatch_flush(b->seg, &b->sigbatch);
		if (b->progress && now >= next_progress) {
			bench_progress(b, now, start);
			next_progress = now + 1000000000ULL;
		}
	}
	now = peer_now_ns();
	b->elapsed_ns = now - start;
	if (b->progress && now - start >= 1000000000ULL)
		printf("\r\033[K");
out:
	/* Requests still outstanding (timeout) stay with the target; the
	 * release of our port drops their late replies. */
	for (unsigned i = 0; i < nslots; i++) {
		struct xseg_request *req = b->slots[i].req;
		if (req &&
		    __atomic_load_n(&req->holder, __ATOMIC_ACQUIRE) == b->port)
			xseg_put_request(b->seg, req);
	}
	if (!b->elapsed_ns)
		b->elapsed_ns = peer_now_ns() - start;
	return rc;
}

int main(int argc, char **argv)
{
	struct bench b = {
	    .op = BENCH_READ,
	    .read_pct = 50,
	    .bs = 4096,
	    .object_size = 4ULL << 20,
	    .objects = 1,
	    .iodepth = 1,
	    .seed = 1,
	    .prefix = "bench",
	    .timeout_ns = 30ULL * 1000000000ULL,
	    .progress = true,
	    .port = XSEG_NOPORT,
	};
	char errbuf[XSEG_ERRBUF_LEN], target_desc[300];
	struct sigaction sa;
	int status, rc;

	peer_log_init(BENCH_PROG, PEER_LOG_INFO, false);
	status = bench_parse(&b, argc, argv);
	if (status >= 0)
		return status;
	if (b.json || !isatty(STDOUT_FILENO))
		b.progress = false;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = bench_on_signal; /* no SA_RESTART: waits return */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	b.lat = malloc(sizeof(*b.lat));
	if (!b.lat) {
		peer_err("out of memory");
		return 1;
	}
	bench_hist_init(b.lat);
	b.rng = b.seed * 0x9e3779b97f4a7c15ULL + 1;
	if (b.random && bench_lfsr_init(&b.lfsr, b.units, b.seed) < 0) {
		peer_err("cannot set up the rand pattern for %" PRIu64
			 " blocks",
			 b.units);
		return 1;
	}
	if (b.verify) {
		b.blk = calloc(b.units, 1);
		if (!b.blk) {
			peer_err("out of memory for %" PRIu64 " block states",
				 b.units);
			return 1;
		}
	}

	status = 1;
	errbuf[0] = '\0';
	rc = xseg_join(b.segment, &b.seg, errbuf, sizeof(errbuf));
	if (rc < 0) {
		peer_err("%s", errbuf[0] ? errbuf : strerror(-rc));
		goto out_free;
	}
	/* we time requests ourselves; --stages reads the library's stage
	 * stamps (the target peer must stamp too: its default) */
	xseg_set_timestamps(b.seg, b.stages);
	xseg_set_spin(b.seg, b.spin_ns);
	rc = xseg_alloc_port(b.seg, "bench_xseg", &b.port);
	if (rc < 0) {
		peer_err("segment %s: no dynamic port for the client: %s",
			 b.segment,
			 rc == -ENOSPC ? "all in use" : strerror(-rc));
		goto out_leave;
	}
	if (xseg_port_alive(b.seg, b.target) != 1)
		peer_warn("segment %s: port %" PRIu32
			  " has no live owner: requests will fail",
			  b.segment, b.target);

	struct xseg_port_info ti0, ci0, ti1, ci1;
	bool have_signals = xseg_port_info(b.seg, b.target, &ti0) == 0 &&
			    xseg_port_info(b.seg, b.port, &ci0) == 0;

	rc = bench_run(&b);
	have_signals = have_signals &&
		       xseg_port_info(b.seg, b.target, &ti1) == 0 &&
		       xseg_port_info(b.seg, b.port, &ci1) == 0;
	snprintf(target_desc, sizeof(target_desc), "%s:%" PRIu32,
		 xseg_name(b.seg), b.target);
	struct bench_result r = {
	    .op = bench_op_names[b.op],
	    .pattern = b.random ? "rand" : "seq",
	    .target = target_desc,
	    .mode = b.poll ? "poll" : "sleep",
	    .block_size = (b.op == BENCH_PING || b.op == BENCH_INFO ||
			   b.op == BENCH_DELETE)
			      ? 0
			      : b.bs,
	    .seed = b.seed,
	    .iodepth = b.iodepth,
	    .read_pct = b.op == BENCH_MIXED ? b.read_pct
					    : (b.op == BENCH_READ ? 100 : 0),
	    .verify = b.verify,
	    .verified = b.verified,
	    .requests = b.completed,
	    .errors = b.errors,
	    .verify_errors = b.verify_errors,
	    .bytes = b.bytes,
	    .elapsed_ns = b.elapsed_ns,
	    .lat = b.lat,
	    .stage_samples = b.stage_samples,
	    .batch_signal = b.batch_signal,
	    .fua = b.fua,
	    .have_signals = have_signals,
	};
	if (have_signals) {
		/* signals are counted modulo 2^32 */
		r.target_signals = (uint32_t)(ti1.signals - ti0.signals);
		r.target_wakes = ti1.wakes - ti0.wakes;
		r.client_signals = (uint32_t)(ci1.signals - ci0.signals);
		r.client_wakes = ci1.wakes - ci0.wakes;
	}
	if (b.stage_samples) {
		r.stage_accept_ns = (double)b.stage_accept / b.stage_samples;
		r.stage_service_ns = (double)b.stage_service / b.stage_samples;
		r.stage_reply_ns = (double)b.stage_reply / b.stage_samples;
	}
	if (b.json)
		bench_report_json(stdout, &r);
	else
		bench_report_text(stdout, &r);
	fflush(stdout);
	if (rc == 0 && !b.errors && !b.verify_errors && !bench_interrupted)
		status = 0;
	if (b.verify_errors)
		peer_err("%" PRIu64 " block(s) failed verification",
			 b.verify_errors);
	if (b.errors)
		peer_err("%" PRIu64 " request(s) failed", b.errors);

	rc = xseg_release_port(b.seg, b.port);
	if (rc < 0)
		peer_warn("segment %s: port %" PRIu32 ": cannot release: %s",
			  b.segment, b.port, strerror(-rc));
out_leave:
	xseg_leave(b.seg);
out_free:
	free(b.slots);
	free(b.blk);
	free(b.lat);
	return status;
}
