/* SPDX-License-Identifier: MIT */
/*
 * bench_xseg building blocks: LFSR permutation, latency histogram, block
 * stamps and the report printers.
 */
#include "bench_xseg_util.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* LFSR                                                                */
/* ------------------------------------------------------------------ */

/*
 * Feedback masks of maximal-length Galois LFSRs (right shift, xor the mask
 * when the bit shifted out is 1), widths 2..32. Each one is checked to
 * have period 2^w - 1 (exhaustively up to width 20 by
 * test_bench_xseg_util, and once offline for widths 21..32).
 */
static const uint32_t bench_lfsr_masks[33] = {
    [2] = 0x3,	       [3] = 0x6,	  [4] = 0xC,	     [5] = 0x14,
    [6] = 0x30,	       [7] = 0x60,	  [8] = 0xB8,	     [9] = 0x110,
    [10] = 0x240,      [11] = 0x500,	  [12] = 0x829,	     [13] = 0x100D,
    [14] = 0x2015,     [15] = 0x6000,	  [16] = 0xD008,     [17] = 0x12000,
    [18] = 0x20400,    [19] = 0x40023,	  [20] = 0x90000,    [21] = 0x140000,
    [22] = 0x300000,   [23] = 0x420000,	  [24] = 0xE10000,   [25] = 0x1200000,
    [26] = 0x2000023,  [27] = 0x4000013,  [28] = 0x9000000,  [29] = 0x14000000,
    [30] = 0x20000029, [31] = 0x48000000, [32] = 0x80200003,
};

uint64_t bench_lfsr_taps(unsigned width)
{
	return width < 33 ? bench_lfsr_masks[width] : 0;
}

static inline uint64_t bench_lfsr_step(uint64_t s, uint64_t mask)
{
	return (s >> 1) ^ (-(s & 1) & mask);
}

int bench_lfsr_init(struct bench_lfsr *l, uint64_t n, uint64_t seed)
{
	unsigned w = 2;

	if (n == 0 || n > UINT32_MAX)
		return -EINVAL;
	while (((1ULL << w) - 1) < n)
		w++;
	memset(l, 0, sizeof(*l));
	l->n = n;
	l->width = w;
	l->mask = bench_lfsr_masks[w];
	/* Any nonzero state lies on the single cycle: the seed picks one. */
	l->start = seed % ((1ULL << w) - 1) + 1;
	l->state = l->start;
	return 0;
}

uint64_t bench_lfsr_next(struct bench_lfsr *l)
{
	uint64_t v;

	if (l->served == l->n) {
		/* Next pass: same order, restart from the first state. */
		l->served = 0;
		l->state = l->start;
	}
	for (;;) {
		v = l->state - 1;
		l->state = bench_lfsr_step(l->state, l->mask);
		if (v < l->n)
			break;
	}
	l->served++;
	return v;
}

/* ------------------------------------------------------------------ */
/* Histogram                                                           */
/* ------------------------------------------------------------------ */

void bench_hist_init(struct bench_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min_ns = UINT64_MAX;
}

unsigned bench_hist_bucket(uint64_t ns)
{
	unsigned msb, range, sub;

	if (ns < (1ULL << BENCH_HIST_SUB))
		return (unsigned)ns;
	msb = 63 - (unsigned)__builtin_clzll(ns);
	/* msb >= SUB; range 1 covers [2^SUB, 2^(SUB+1)) and so on. */
	range = msb - BENCH_HIST_SUB + 1;
	sub = (unsigned)(ns >> (msb - BENCH_HIST_SUB)) &
	      ((1U << BENCH_HIST_SUB) - 1);
	return (range << BENCH_HIST_SUB) + sub;
}

uint64_t bench_hist_bucket_max(unsigned bucket)
{
	unsigned range = bucket >> BENCH_HIST_SUB;
	uint64_t sub = bucket & ((1U << BENCH_HIST_SUB) - 1);
	unsigned shift;
	uint64_t base;

	if (range == 0)
		return sub;
	shift = range - 1;
	base = ((1ULL << BENCH_HIST_SUB) + sub) << shift;
	return base + ((1ULL << shift) - 1);
}

void bench_hist_add(struct bench_hist *h, uint64_t ns)
{
	h->buckets[bench_hist_bucket(ns)]++;
	h->count++;
	if (__builtin_add_overflow(h->sum_ns, ns, &h->sum_ns))
		h->sum_ns = UINT64_MAX;
	if (ns < h->min_ns)
		h->min_ns = ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src)
{
	for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++)
		dst->buckets[i] += src->buckets[i];
	dst->count += src->count;
	if (__builtin_add_overflow(dst->sum_ns, src->sum_ns, &dst->sum_ns))
		dst->sum_ns = UINT64_MAX;
	if (src->min_ns < dst->min_ns)
		dst->min_ns = src->min_ns;
	if (src->max_ns > dst->max_ns)
		dst->max_ns = src->max_ns;
}

uint64_t bench_hist_percentile(const struct bench_hist *h, double p)
{
	uint64_t want, seen = 0;

	if (!h->count)
		return 0;
	if (p <= 0)
		return h->min_ns;
	if (p >= 100)
		return h->max_ns;
	/* Rank ceil(p/100 * count), at least 1. */
	want = (uint64_t)((p / 100.0) * (double)h->count + 0.999999);
	if (want < 1)
		want = 1;
	if (want > h->count)
		want = h->count;
	for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= want) {
			uint64_t v = bench_hist_bucket_max(i);
			if (v > h->max_ns)
				v = h->max_ns;
			if (v < h->min_ns)
				v = h->min_ns;
			return v;
		}
	}
	return h->max_ns;
}

double bench_hist_mean(const struct bench_hist *h)
{
	return h->count ? (double)h->sum_ns / (double)h->count : 0.0;
}

/* ------------------------------------------------------------------ */
/* Stamps                                                              */
/* ------------------------------------------------------------------ */

/*
 * Block layout: a prefix (header, then up to BENCH_STAMP_NAME_MAX bytes of
 * the target name, zero padded to a multiple of 8) and a stream of 64-bit
 * splitmix words seeded from (target, offset, seed). Because the prefix is
 * a multiple of 8 bytes, any window starting at a multiple of 8 begins on
 * a stream word, so blocks of any size are generated and checked window by
 * window without a block-sized scratch buffer.
 */
#define BENCH_STAMP_NAME_MAX 224

struct bench_stamp_hdr {
	uint64_t magic;
	uint64_t seed;
	uint64_t offset;
	uint32_t target_len;
	uint32_t name_hash; /* of the whole name, even when truncated */
};

struct bench_stamp_ctx {
	unsigned char
	    prefix[sizeof(struct bench_stamp_hdr) + BENCH_STAMP_NAME_MAX];
	size_t prefix_len;
	uint64_t x; /* splitmix state */
};

static uint64_t bench_fnv1a(const void *p, size_t len, uint64_t h)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < len; i++) {
		h ^= s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static inline uint64_t bench_splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void bench_stamp_ctx_init(struct bench_stamp_ctx *c, const char *target,
				 size_t target_len, uint64_t offset,
				 uint64_t seed, size_t block_len)
{
	uint64_t name_hash =
	    bench_fnv1a(target, target_len, 0xcbf29ce484222325ULL);
	struct bench_stamp_hdr hdr = {
	    .magic = BENCH_STAMP_MAGIC,
	    .seed = seed,
	    .offset = offset,
	    .target_len = (uint32_t)target_len,
	    .name_hash = (uint32_t)(name_hash ^ (name_hash >> 32)),
	};
	size_t n = target_len < BENCH_STAMP_NAME_MAX ? target_len
						     : BENCH_STAMP_NAME_MAX;

	memset(c->prefix, 0, sizeof(c->prefix));
	memcpy(c->prefix, &hdr, sizeof(hdr));
	memcpy(c->prefix + sizeof(hdr), target, n);
	c->prefix_len = (sizeof(hdr) + n + 7) & ~(size_t)7;
	c->x = bench_fnv1a(&offset, sizeof(offset), name_hash);
	c->x = bench_fnv1a(&seed, sizeof(seed), c->x);
	/* A block too short for the whole prefix would hold only the magic
	 * and maybe the seed: make it pure stream, which depends on all of
	 * target, offset and seed. */
	if (block_len < c->prefix_len)
		c->prefix_len = 0;
}

/* Produce bytes [pos, pos + n) of the block; windows must be requested in
 * order, each starting at a multiple of 8 (or 0). */
static void bench_stamp_window(struct bench_stamp_ctx *c, size_t pos,
			       unsigned char *out, size_t n)
{
	size_t i = 0;

	while (i < n && pos + i < c->prefix_len) {
		out[i] = c->prefix[pos + i];
		i++;
	}
	while (i < n) {
		uint64_t r = bench_splitmix(&c->x);
		size_t k = n - i < 8 ? n - i : 8;
		memcpy(out + i, &r, k);
		i += k;
	}
}

void bench_stamp_fill(void *buf, size_t len, const char *target,
		      size_t target_len, uint64_t offset, uint64_t seed)
{
	struct bench_stamp_ctx c;

	bench_stamp_ctx_init(&c, target, target_len, offset, seed, len);
	bench_stamp_window(&c, 0, buf, len);
}

static void bench_stamp_explain(const unsigned char *got, size_t len,
				const struct bench_stamp_ctx *c, int64_t bad,
				char *why, size_t why_len)
{
	struct bench_stamp_hdr want, hdr;
	size_t i;

	for (i = 0; i < len && !got[i]; i++)
		;
	if (i == len) {
		snprintf(why, why_len, "all zeroes");
		return;
	}
	if (!c->prefix_len || bad >= (int64_t)c->prefix_len) {
		snprintf(why, why_len, "different data at byte %" PRId64, bad);
		return;
	}
	memcpy(&want, c->prefix, sizeof(want));
	memcpy(&hdr, got, sizeof(hdr));
	if (hdr.magic != BENCH_STAMP_MAGIC)
		snprintf(why, why_len,
			 "no stamp, different data at byte %" PRId64, bad);
	else if (hdr.offset != want.offset)
		snprintf(why, why_len, "stamp of offset %" PRIu64, hdr.offset);
	else if (hdr.seed != want.seed)
		snprintf(why, why_len, "stamp of seed %" PRIu64, hdr.seed);
	else
		snprintf(why, why_len, "stamp of another target");
}

int64_t bench_stamp_check(const void *buf, size_t len, const char *target,
			  size_t target_len, uint64_t offset, uint64_t seed,
			  char *why, size_t why_len)
{
	const unsigned char *got = buf;
	unsigned char expect[4096];
	struct bench_stamp_ctx c;
	int64_t bad = -1;

	bench_stamp_ctx_init(&c, target, target_len, offset, seed, len);
	for (size_t pos = 0; pos < len && bad < 0; pos += sizeof(expect)) {
		size_t n =
		    len - pos < sizeof(expect) ? len - pos : sizeof(expect);

		bench_stamp_window(&c, pos, expect, n);
		if (!memcmp(got + pos, expect, n))
			continue;
		for (size_t i = 0; i < n; i++)
			if (got[pos + i] != expect[i]) {
				bad = (int64_t)(pos + i);
				break;
			}
	}
	if (bad >= 0 && why && why_len) {
		struct bench_stamp_ctx c0;
		bench_stamp_ctx_init(&c0, target, target_len, offset, seed,
				     len);
		bench_stamp_explain(got, len, &c0, bad, why, why_len);
	}
	return bad;
}

/* ------------------------------------------------------------------ */
/* Report                                                              */
/* ------------------------------------------------------------------ */

static double bench_per_sec(uint64_t n, uint64_t ns)
{
	return ns ? (double)n * 1e9 / (double)ns : 0.0;
}

void bench_report_text(FILE *f, const struct bench_result *r)
{
	const struct bench_hist *h = r->lat;
	double secs = (double)r->elapsed_ns / 1e9;

	fprintf(f,
		"bench_xseg: %s%s %s bs=%" PRIu64 " iodepth=%u mode=%s "
		"target=%s\n",
		r->op, r->fua ? " fua" : "", r->pattern, r->block_size,
		r->iodepth, r->mode, r->target);
	fprintf(f,
		"  requests: %" PRIu64 " in %.3f s, errors: %" PRIu64
		", verify errors: %" PRIu64 "\n",
		r->requests, secs, r->errors, r->verify_errors);
	fprintf(f, "  iops:     %.0f\n",
		bench_per_sec(r->requests, r->elapsed_ns));
	fprintf(f, "  bw:       %.2f MiB/s (%" PRIu64 " bytes)\n",
		bench_per_sec(r->bytes, r->elapsed_ns) / 1048576.0, r->bytes);
	fprintf(f,
		"  lat (us): mean %.3f, p50 %.3f, p90 %.3f, p99 %.3f, "
		"p99.9 %.3f, max %.3f\n",
		bench_hist_mean(h) / 1e3, bench_hist_percentile(h, 50) / 1e3,
		bench_hist_percentile(h, 90) / 1e3,
		bench_hist_percentile(h, 99) / 1e3,
		bench_hist_percentile(h, 99.9) / 1e3, h->max_ns / 1e3);
	if (r->stage_samples)
		fprintf(f,
			"  stages (us, mean of %" PRIu64 "): to accept %.3f, "
			"service %.3f, to receive %.3f\n",
			r->stage_samples, r->stage_accept_ns / 1e3,
			r->stage_service_ns / 1e3, r->stage_reply_ns / 1e3);
	if (r->have_signals)
		fprintf(f,
			"  signals%s: to target %" PRIu64 " (%" PRIu64
			" futex wakes), to us %" PRIu64 " (%" PRIu64
			" futex wakes)\n",
			r->batch_signal ? " (batched submits)" : "",
			r->target_signals, r->target_wakes, r->client_signals,
			r->client_wakes);
}

static void bench_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void bench_report_json(FILE *f, const struct bench_result *r)
{
	const struct bench_hist *h = r->lat;

	fprintf(f, "{\"op\":");
	bench_json_str(f, r->op);
	fprintf(f, ",\"pattern\":");
	bench_json_str(f, r->pattern);
	fprintf(f, ",\"target\":");
	bench_json_str(f, r->target);
	fprintf(f, ",\"mode\":");
	bench_json_str(f, r->mode);
	fprintf(f,
		",\"block_size\":%" PRIu64 ",\"iodepth\":%u,\"seed\":%" PRIu64
		",\"read_pct\":%u,\"verify\":%s,\"verified\":%" PRIu64,
		r->block_size, r->iodepth, r->seed, r->read_pct,
		r->verify ? "true" : "false", r->verified);
	fprintf(f, ",\"batch_signal\":%s", r->batch_signal ? "true" : "false");
	fprintf(f, ",\"fua\":%s", r->fua ? "true" : "false");
	if (r->have_signals)
		fprintf(
		    f,
		    ",\"signals\":{\"to_target\":%" PRIu64
		    ",\"target_wakes\":%" PRIu64 ",\"to_client\":%" PRIu64
		    ",\"client_wakes\":%" PRIu64 ",\"wakes_per_request\":%.4f}",
		    r->target_signals, r->target_wakes, r->client_signals,
		    r->client_wakes,
		    r->requests ? (double)(r->target_wakes + r->client_wakes) /
				      (double)r->requests
				: 0.0);
	fprintf(f,
		",\"requests\":%" PRIu64 ",\"errors\":%" PRIu64
		",\"verify_errors\":%" PRIu64 ",\"bytes\":%" PRIu64
		",\"elapsed_s\":%.6f,\"iops\":%.1f,\"bw_mib_s\":%.3f"
		",\"lat_ns\":{\"mean\":%.1f,\"min\":%" PRIu64
		",\"p50\":%" PRIu64 ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64
		",\"p99_9\":%" PRIu64 ",\"max\":%" PRIu64 "}",
		r->requests, r->errors, r->verify_errors, r->bytes,
		(double)r->elapsed_ns / 1e9,
		bench_per_sec(r->requests, r->elapsed_ns),
		bench_per_sec(r->bytes, r->elapsed_ns) / 1048576.0,
		bench_hist_mean(h), h->count ? h->min_ns : 0,
		bench_hist_percentile(h, 50), bench_hist_percentile(h, 90),
		bench_hist_percentile(h, 99), bench_hist_percentile(h, 99.9),
		h->max_ns);
	if (r->stage_samples)
		fprintf(f,
			",\"stages_ns\":{\"samples\":%" PRIu64
			",\"to_accept\":%.1f,\"service\":%.1f"
			",\"to_receive\":%.1f}",
			r->stage_samples, r->stage_accept_ns,
			r->stage_service_ns, r->stage_reply_ns);
	fprintf(f, "}\n");
}
