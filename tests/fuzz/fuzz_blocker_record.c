/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the blocker's record codec (peers/blocker/record.c), the
 * only code that knows the byte layout of the log (docs/on-disk-format.md
 * "Record", "Payloads"). Recovery, the offline check and GC run these
 * decoders on whatever the disk holds.
 *
 * Input: byte 0 picks what the header check sees (bit 0: the header's
 * CRC is made right, so the decoder gets past it and the later checks are
 * reached; bit 1: the expected position is the header's own), bytes 1..64
 * are the header, the rest is a payload given to the map-update decoder and
 * the one- and two-name decoders.
 *
 * Invariants:
 *   - brec_decode accepts only a header that brec_encode, given the fields
 *     it decoded, writes byte for byte the same (apart from the flags and
 *     reserved fields, which it does not check), with a known type,
 *     version 1 and a length 1 .. 16 MiB;
 *   - a payload a decoder accepts is canonical: encoding what it decoded
 *     gives the same bytes, every name lies inside the payload and obeys
 *     the name rules, the update count matches the length exactly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_header(const uint8_t *data, size_t size)
{
	uint8_t hdr[BREC_HDR_SIZE] = {0}, again[BREC_HDR_SIZE];
	uint8_t mode = size ? data[0] : 0;
	struct brec_hdr h;
	uint64_t expect;

	if (size > 1)
		memcpy(hdr, data + 1,
		       size - 1 < BREC_HDR_SIZE ? size - 1 : BREC_HDR_SIZE);
	if (mode & 1) {
		memset(hdr + 12, 0, 4);
		put_le32(hdr + 12, blocker_crc32c(0, hdr, BREC_HDR_SIZE));
	}
	expect = mode & 2 ? get_le64(hdr + 16) : 4096;
	if (brec_decode(hdr, &h, expect) != BREC_OK)
		return;
	if (h.type < BREC_CHUNK || h.type > BREC_COPY ||
	    h.version != BREC_VERSION || h.len == 0 ||
	    h.len > BREC_MAX_PAYLOAD || h.pos != expect)
		abort();
	brec_encode(again, h.type, h.len, h.pos, h.score);
	/* flags (6..7) and reserved (56..63) are not checked by the
	 * decoder; the CRC covers them, so it differs when they do */
	if (memcmp(again, hdr, 6) || memcmp(again + 16, hdr + 16, 40))
		abort();
	if (!memcmp(hdr + 6, again + 6, 2) &&
	    !memcmp(hdr + 56, again + 56, 8) && memcmp(again + 8, hdr + 8, 8))
		abort();
}

static void check_map(const uint8_t *p, size_t len)
{
	const char *name;
	size_t nl;
	uint64_t size;
	uint32_t n;
	const uint8_t *u;
	uint8_t *again;
	struct bmap_update *ups;

	if (bmap_decode(p, len, &name, &nl, &size, &n, &u))
		return;
	if ((const uint8_t *)name < p || (const uint8_t *)name + nl > p + len ||
	    !blocker_name_valid(name, nl) || size > BLOCKER_MAX_OBJECT_SIZE ||
	    n > BMAP_MAX_UPDATES || len != bmap_payload_size(nl, n) ||
	    u + (size_t)n * BMAP_UPDATE_SIZE != p + len)
		abort();
	ups = calloc(n ? n : 1, sizeof(*ups));
	again = malloc(len);
	if (!ups || !again)
		abort();
	for (uint32_t i = 0; i < n; i++) {
		ups[i].index = get_le64(u + (size_t)i * BMAP_UPDATE_SIZE);
		memcpy(ups[i].score, u + (size_t)i * BMAP_UPDATE_SIZE + 8,
		       BLOCKER_SCORE_SIZE);
	}
	bmap_encode(again, name, nl, size, ups, n);
	if (memcmp(again, p, len))
		abort();
	free(again);
	free(ups);
}

static void check_names(const uint8_t *p, size_t len, int count)
{
	const char *n1 = NULL, *n2 = NULL;
	size_t l1 = 0, l2 = 0;
	uint8_t *again;

	if (bnames_decode(p, len, count, &n1, &l1, &n2, &l2))
		return;
	if ((const uint8_t *)n1 < p || (const uint8_t *)n1 + l1 > p + len ||
	    !blocker_name_valid(n1, l1))
		abort();
	if (count == 2 &&
	    ((const uint8_t *)n2 < p || (const uint8_t *)n2 + l2 > p + len ||
	     !blocker_name_valid(n2, l2)))
		abort();
	if (count == 1)
		l2 = 0;
	if (len != bnames_payload_size(l1, l2))
		abort();
	again = malloc(len);
	if (!again)
		abort();
	bnames_encode(again, n1, l1, n2, l2);
	if (memcmp(again, p, len))
		abort();
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *payload;
	size_t plen;
	uint8_t *copy;

	check_header(data, size);
	if (size <= 1 + BREC_HDR_SIZE)
		return 0;
	/* a heap copy of exactly the payload, so that ASan sees a read
	 * past its end */
	plen = size - 1 - BREC_HDR_SIZE;
	copy = malloc(plen);
	if (!copy)
		abort();
	payload = memcpy(copy, data + 1 + BREC_HDR_SIZE, plen);
	check_map(payload, plen);
	check_names(payload, plen, 1);
	check_names(payload, plen, 2);
	free(copy);
	return 0;
}
