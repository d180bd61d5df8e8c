/* SPDX-License-Identifier: MIT */
#ifndef BENCH_XSEG_UTIL_H
#define BENCH_XSEG_UTIL_H
/*
 * Building blocks of bench_xseg that do not touch the segment, kept apart
 * so they have their own unit tests: the LFSR that visits every block once
 * per pass, the latency histogram, and the block stamps of --verify.
 * All functions are single-threaded (bench_xseg drives its port from one
 * thread); none allocates after init.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------------ */
/* LFSR: a permutation of 0 .. n-1                                     */
/* ------------------------------------------------------------------ */

/*
 * A maximal-length Galois LFSR of the smallest width w with 2^w - 1 >= n
 * runs through every state 1 .. 2^w - 1 exactly once per period; states
 * above n are skipped (fewer than half of them, so at most one skip per
 * hit on average), which yields each of 0 .. n-1 exactly once per pass
 * in an order fixed by the seed.
 */
struct bench_lfsr {
	uint64_t n;	 /* number of blocks */
	uint64_t mask;	 /* feedback taps */
	uint64_t state;	 /* current state, 1 .. 2^w - 1 */
	uint64_t start;	 /* first state of the pass */
	uint64_t served; /* values returned in this pass */
	unsigned width;
};

/* Prepare a permutation of 0 .. n-1 (1 <= n <= 2^63) starting at a state
 * derived from seed. Returns 0 or -EINVAL. */
int bench_lfsr_init(struct bench_lfsr *l, uint64_t n, uint64_t seed);

/* Next value of the permutation; after n values a new pass starts with the
 * same order. */
uint64_t bench_lfsr_next(struct bench_lfsr *l);

/* Feedback mask for width 2..64 (0 for others); exposed for tests. */
uint64_t bench_lfsr_taps(unsigned width);

/* ------------------------------------------------------------------ */
/* Latency histogram                                                   */
/* ------------------------------------------------------------------ */

/*
 * Log-linear histogram of nanosecond values: values below 2^BENCH_HIST_SUB
 * are exact, above that each power-of-two range is split into
 * 2^BENCH_HIST_SUB buckets, so a reported percentile is within 1/64
 * (1.6 %) of the true value. Count, sum, min and max are exact.
 */
#define BENCH_HIST_SUB	   6
#define BENCH_HIST_RANGES  (64 - BENCH_HIST_SUB)
#define BENCH_HIST_BUCKETS ((BENCH_HIST_RANGES + 1) << BENCH_HIST_SUB)

struct bench_hist {
	uint64_t count;
	uint64_t sum_ns; /* saturates instead of wrapping */
	uint64_t min_ns;
	uint64_t max_ns;
	uint64_t buckets[BENCH_HIST_BUCKETS];
};

void bench_hist_init(struct bench_hist *h);
void bench_hist_add(struct bench_hist *h, uint64_t ns);
/* Add every sample of src to dst. */
void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src);
/* Value at percentile p (0 < p <= 100): the smallest bucket value such
 * that at least p % of the samples are at or below it (the bucket's upper
 * bound, clamped to max). 0 when empty. */
uint64_t bench_hist_percentile(const struct bench_hist *h, double p);
double bench_hist_mean(const struct bench_hist *h);

/* Bucket index for a value, and the largest value of a bucket (tests). */
unsigned bench_hist_bucket(uint64_t ns);
uint64_t bench_hist_bucket_max(unsigned bucket);

/* ------------------------------------------------------------------ */
/* Verification stamps                                                 */
/* ------------------------------------------------------------------ */

/*
 * A stamped block starts with a header (magic, seed, offset, length of the
 * target name, the name itself, truncated to what fits) and continues with
 * a pseudo-random stream derived from (target, offset, seed), so a block
 * written for another target, offset or seed, a stale block, or a torn one
 * all fail the check. Blocks too short for the header (and the name, up
 * to 224 bytes of it) hold only the stream.
 */
#define BENCH_STAMP_MAGIC 0x5847534542434858ULL /* "XHCBESGX" */

/* Fill buf (len bytes) with the stamp for (target, offset, seed). */
void bench_stamp_fill(void *buf, size_t len, const char *target,
		      size_t target_len, uint64_t offset, uint64_t seed);

/*
 * Check buf against the stamp for (target, offset, seed). Returns -1 when
 * it matches, else the index of the first differing byte. When why is
 * non-NULL it receives a short explanation ("all zeroes", "stamp of offset
 * 8192", "stamp of seed 7", "different data at byte 100").
 */
int64_t bench_stamp_check(const void *buf, size_t len, const char *target,
			  size_t target_len, uint64_t offset, uint64_t seed,
			  char *why, size_t why_len);

/* ------------------------------------------------------------------ */
/* Report                                                              */
/* ------------------------------------------------------------------ */

struct bench_result {
	const char *op;	     /* "read", "write", ... */
	const char *pattern; /* "seq" or "rand" */
	const char *target;  /* port description */
	const char *mode;    /* "poll" or "sleep" */
	uint64_t block_size;
	uint64_t seed;
	unsigned iodepth;
	unsigned read_pct; /* mixed only */
	bool verify;
	uint64_t verified; /* blocks checked by --verify */
	uint64_t requests; /* completed (ok + failed) */
	uint64_t errors;   /* failed replies */
	uint64_t verify_errors;
	uint64_t bytes; /* payload bytes of successful requests */
	uint64_t elapsed_ns;
	const struct bench_hist *lat;
	/* --stages: mean ns from submit to accept (request queue), accept to
	 * respond (service) and respond to receive (reply queue), over
	 * stage_samples replies that carried every timestamp */
	uint64_t stage_samples;
	double stage_accept_ns, stage_service_ns, stage_reply_ns;
	/* --batch-signal: submits signalled once per batch */
	bool batch_signal;
	/* --fua: every write carried XSEG_F_FUA */
	bool fua;
	/* signals sent to and FUTEX_WAKEs made for the target port (by our
	 * submits) and our own port (by the target's answers) during the
	 * run, from xseg_port_info; valid when have_signals */
	bool have_signals;
	uint64_t target_signals, target_wakes, client_signals, client_wakes;
};

/* Human-readable report, several lines. */
void bench_report_text(FILE *f, const struct bench_result *r);
/* One JSON object on one line. */
void bench_report_json(FILE *f, const struct bench_result *r);

#endif /* BENCH_XSEG_UTIL_H */
