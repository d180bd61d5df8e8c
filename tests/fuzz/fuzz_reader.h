/* SPDX-License-Identifier: MIT */
#ifndef FUZZ_READER_H
#define FUZZ_READER_H
/*
 * A fuzz input read as a sequence of little-endian fields (structure-aware
 * targets: tests/fuzz/fuzz_xseg_request.c, fuzz_blocker_log.c). Past the
 * input's end every field reads as 0, so any input, even an empty one,
 * is a complete script: the target never has to reject one.
 */
#include <stddef.h>
#include <stdint.h>

struct fuzz_reader {
	const uint8_t *p;
	size_t left;
};

/* The next `bytes` (1..8) bytes as a little-endian number. */
static inline uint64_t fuzz_take(struct fuzz_reader *r, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++) {
		uint64_t b = 0;
		if (r->left) {
			b = *r->p++;
			r->left--;
		}
		v |= b << (8 * i);
	}
	return v;
}

#endif /* FUZZ_READER_H */
