/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: xseg_validate_request, the check every server runs (in
 * xseg_accept) before it trusts a request's fields. A request lives in the
 * shared segment, so any process mapping it, buggy or dying, can leave
 * anything in it; what validation passes, a peer then uses to find the
 * data buffer it reads from or writes into.
 *
 * The target keeps one private segment (named xtu-PID-fuzz, so the one of
 * a run killed before its cleanup is removed by the next test program or
 * run of this target: xtu_sweep_dead_runs) with a
 * few live data buffers of different sizes and one freed one. Each input
 * fills a request slot of the pool: op, flags, targetlen, offset, size,
 * src, dst, and a data_off / data_cap that are either raw bytes or a live
 * or freed buffer's offset and size moved by a small delta (the cases that
 * matter lie near real buffers, which raw bytes would almost never hit);
 * for COPY the payload in the buffer too.
 *
 * Invariants, checked when validation accepts (returns 0):
 *   - op, flags, targetlen, src and dst are in their documented ranges;
 *   - a data buffer is exactly one of the live buffers and data_cap is at
 *     most its usable size; READ and WRITE have size <= data_cap; INFO,
 *     HASH and COPY have room for their reply or payload, and a COPY's
 *     source name length is 1 .. XSEG_MAX_TARGETLEN;
 *   - offset + size does not wrap; only PING and FLUSH have no name;
 *   - serving it is safe: writing data_cap bytes into the buffer (what a
 *     READ's server may do) leaves the heap's block chain intact
 *     (xheap_verify), so a request cannot be aimed at the allocator's own
 *     headers.
 * A rejection must be -EINVAL or -EOPNOTSUPP and change nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_reader.h"
#include "xheap.h"
#include "xseg.h"
#include "xseg_internal.h"
#include "xseg_testutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NBUF 4

static struct xseg *seg;
static char seg_name[64];
/* segment offsets and usable sizes of the live buffers, then the freed one */
static uint64_t buf_off[NBUF + 1];
static int64_t buf_usable[NBUF + 1];

static void fuzz_cleanup(void)
{
	if (seg) {
		xseg_leave(seg);
		xseg_destroy(seg_name);
		seg = NULL;
	}
}

static void fuzz_init(void)
{
	static const size_t sizes[NBUF + 1] = {4096, 512, 65536, 1 << 20, 8192};
	struct xseg_config cfg;
	char err[256];
	uint64_t off;

	xseg_config_default(&cfg);
	cfg.size = 16u << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = 4;
	cfg.nr_requests = 64;
	/* the segments of earlier runs that crashed (this one's too, when
	 * it crashes) */
	xtu_sweep_dead_runs();
	snprintf(seg_name, sizeof(seg_name), "xtu-%d-fuzz", (int)getpid());
	xseg_destroy(seg_name); /* a leftover of a pid reused */
	if (xseg_create(seg_name, &cfg, &seg, err, sizeof(err))) {
		fprintf(stderr, "fuzz_xseg_request: %s\n", err);
		abort();
	}
	atexit(fuzz_cleanup);
	for (int i = 0; i <= NBUF; i++) {
		if (xheap_alloc(seg->heap, sizes[i], &off) < 0)
			abort();
		buf_off[i] = seg->heap_off + off;
		buf_usable[i] = xheap_usable_size(seg->heap, off);
		if (buf_usable[i] < (int64_t)sizes[i])
			abort();
	}
	/* the last one is freed: validation must refuse it */
	if (xheap_free(seg->heap, buf_off[NBUF] - seg->heap_off))
		abort();
}

/* A value near a real one (most of the time) or raw. */
static uint64_t near(struct fuzz_reader *r, uint64_t real, uint64_t raw)
{
	switch (fuzz_take(r, 1) % 4) {
	case 0:
		return raw;
	case 1:
		return real;
	case 2:
		return real + (uint64_t)(int64_t)(int8_t)fuzz_take(r, 1);
	default:
		return real + (uint64_t)(int64_t)(int16_t)fuzz_take(r, 2) * 16;
	}
}

static int live_buffer(uint64_t off)
{
	for (int i = 0; i < NBUF; i++)
		if (buf_off[i] == off)
			return i;
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_reader r = {data, size};
	struct xseg_request *req;
	uint32_t copy_len = 0;
	int rc, which;

	if (!seg)
		fuzz_init();
	req = xseg_request_at(seg, 0);
	if (!req)
		abort();
	/* mostly in range: raw values would fail the first check and
	 * never reach the data buffer's */
	req->op = (uint16_t)near(&r, fuzz_take(&r, 1) % XSEG_OP_COUNT,
				 fuzz_take(&r, 2));
	req->flags = (uint32_t)near(
	    &r, fuzz_take(&r, 4) & (XSEG_F_KNOWN | XSEG_F_PEER_MASK),
	    fuzz_take(&r, 4));
	req->targetlen = (uint16_t)near(&r, 8, fuzz_take(&r, 2));
	req->offset = fuzz_take(&r, 8);
	req->src = (uint32_t)near(&r, 1, fuzz_take(&r, 4));
	{
		uint64_t real_dst = fuzz_take(&r, 1) & 1 ? XSEG_NOPORT : 2;
		req->dst = (uint32_t)near(&r, real_dst, fuzz_take(&r, 4));
	}
	which = (int)(fuzz_take(&r, 1) % (NBUF + 2)); /* NBUF + 1: no buffer */
	if (which <= NBUF) {
		req->data_off = near(&r, buf_off[which], fuzz_take(&r, 8));
		req->data_cap =
		    near(&r, (uint64_t)buf_usable[which], fuzz_take(&r, 8));
	} else {
		req->data_off = 0;
		req->data_cap = fuzz_take(&r, 1) & 1 ? fuzz_take(&r, 8) : 0;
	}
	req->size = near(&r, req->data_cap, fuzz_take(&r, 8));
	if (req->op == XSEG_OP_COPY && live_buffer(req->data_off) >= 0) {
		struct xseg_request_copy *c =
		    (void *)(seg->base + req->data_off);
		c->src_targetlen = (uint32_t)near(&r, 8, fuzz_take(&r, 4));
	}

	rc = xseg_validate_request(seg, req);
	if (rc) {
		if (rc != -EINVAL && rc != -EOPNOTSUPP)
			abort();
		return 0;
	}
	if (req->op == XSEG_OP_NONE || req->op >= XSEG_OP_COUNT)
		abort();
	if (req->targetlen > XSEG_MAX_TARGETLEN)
		abort();
	if (req->src >= seg->nr_ports ||
	    (req->dst >= seg->nr_ports && req->dst != XSEG_NOPORT))
		abort();
	if (req->flags & 0xffffu & ~XSEG_F_KNOWN)
		abort();
	if (req->op == XSEG_OP_COPY && req->data_off &&
	    live_buffer(req->data_off) >= 0)
		copy_len = ((const struct xseg_request_copy *)(seg->base +
							       req->data_off))
			       ->src_targetlen;
	if (req->data_off) {
		which = live_buffer(req->data_off);
		if (which < 0 || req->data_cap > (uint64_t)buf_usable[which])
			abort();
		if (xseg_request_data(seg, req) != seg->base + req->data_off)
			abort();
		/* serve it: fill what the request may write */
		memset(seg->base + req->data_off, 0xa5, req->data_cap);
		if (xheap_verify(seg->heap))
			abort();
	} else if (req->data_cap) {
		abort();
	}
	if ((req->op == XSEG_OP_READ || req->op == XSEG_OP_WRITE) &&
	    req->size > req->data_cap)
		abort();
	/* what the other ops' servers write or read in the buffer fits it
	 * (review17: with these checks removed from validation, 500 000
	 * runs passed) */
	if ((req->op == XSEG_OP_INFO &&
	     req->data_cap < sizeof(struct xseg_reply_info)) ||
	    (req->op == XSEG_OP_HASH &&
	     req->data_cap < sizeof(struct xseg_reply_hash)) ||
	    (req->op == XSEG_OP_COPY &&
	     req->data_cap < sizeof(struct xseg_request_copy)))
		abort();
	/* read before the fill above overwrote the buffer */
	if (req->op == XSEG_OP_COPY) {
		if (!copy_len || copy_len > XSEG_MAX_TARGETLEN)
			abort();
	}
	/* a range that does not wrap; a name unless PING or FLUSH */
	if (req->size > UINT64_MAX - req->offset)
		abort();
	if (!req->targetlen && req->op != XSEG_OP_PING &&
	    req->op != XSEG_OP_FLUSH)
		abort();
	return 0;
}
