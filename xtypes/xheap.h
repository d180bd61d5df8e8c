/* SPDX-License-Identifier: MIT */
#ifndef XHEAP_H
#define XHEAP_H
/*
 * xheap: allocator of variable-size buffers inside a memory region addressed
 * by offsets (the data buffers of xseg requests).
 *
 * Contract
 * - The heap is one contiguous block: a header, then the arena. Buffers are
 *   named by their offset from the start of the heap block (xheap_off), so
 *   every process can find them in its own mapping (xheap_ptr).
 * - Sizes are rounded up to a power-of-two class (64 B .. 2^40 B); alloc
 *   returns the usable size, which is exactly the class size and at least
 *   the size asked for. The class size does not count the 64-byte buffer
 *   header: a 4 KiB buffer takes 4 KiB + 64 B of arena. Buffers (and their
 *   offsets) are 64-byte aligned.
 * - Offsets and sizes are 64-bit throughout (the original xseg's 32-bit
 *   offsets capped segments below 2 GiB). Memory beyond 256 GiB - 64 B is
 *   left unused (arena_bytes in the statistics says how much is managed).
 * - Buffers are not zeroed: the caller initialises what it reads.
 * - O(1): a freed buffer goes onto the free list of its class (lock-free
 *   Treiber stack whose head packs a 32-bit ABA tag with a 32-bit index in
 *   64-byte units, so arenas of up to 256 GiB are addressable); a class whose
 *   list is empty carves from the untouched part of the arena with one
 *   compare-and-swap on the carve offset (not an add: a request that does
 *   not fit leaves the offset where it was, for smaller ones). Buffers are not
 * coalesced: memory freed into one class is reused only by that class (the
 * original xseg heap made the same trade for O(1)); xheap_stats shows how much
 * sits in each class.
 * - Thread- and process-safe; every change of the heap's structure is one
 *   atomic instruction (free-list head CAS, carve CAS, buffer state
 *   exchange), so a process killed at any instruction leaks at most the
 *   buffer it was handling and never corrupts the heap.
 * - Exhaustion returns -ENOMEM and changes nothing; the heap keeps working
 *   (free something of that class, or leave uncarved arena, and allocate
 *   again).
 * - Memory ordering: a free happens-before the alloc that returns the same
 *   buffer (release push, acquire pop), so a buffer can be handed from one
 *   owner to the next through the heap alone.
 * - Every buffer has a 64-byte header (magic, class, state). free checks it:
 *   a foreign offset returns -EINVAL, a double free -EALREADY, in every
 *   build; nothing is changed on error.
 */
#include <stddef.h>
#include <stdint.h>

struct xheap; /* layout private to xheap.c */

#define XHEAP_MIN_ALLOC 64

/* Initialise a heap in caller memory of mem_size bytes (64-byte aligned,
 * at least 4 KiB). Only the heap header (under 1 KiB) is written: the arena
 * is touched buffer by buffer as it is used, so a MAP_NORESERVE mapping
 * stays unpopulated. Not safe against concurrent users of the same memory;
 * the caller publishes the heap to other threads or processes with its own
 * release (e.g. the segment's ready flag).
 * Returns 0 or -EINVAL. */
int xheap_init(struct xheap *heap, size_t mem_size);

/* Allocate at least size bytes (size >= 1). On success *off receives the
 * buffer's offset and the usable size is returned (> 0). Returns -ENOMEM
 * (the class's free list is empty and the uncarved arena is too small), or
 * -EINVAL (size 0, or so large that its class plus header cannot fit even an
 * empty arena), or -EIO (the heap memory was scribbled over: the class's
 * free list held a buffer that was not free, which is then left out, or
 * named no buffer of the arena, which makes that class fail from then on
 * rather than read outside the heap). Lock-free: one CAS on the class's
 * free-list head, or on the carve offset when the list is empty. */
int64_t xheap_alloc(struct xheap *heap, size_t size, uint64_t *off);

/* Free the buffer at off. 0, -EINVAL (not a buffer of this heap: outside
 * the used arena, not 64-byte aligned, or no valid buffer header in front of
 * it) or -EALREADY (already free); nothing changes on error. Of two racing
 * frees of one buffer exactly one returns 0. */
int xheap_free(struct xheap *heap, uint64_t off);

/* Usable size of the allocated buffer at off (its class size), or -EINVAL
 * (not a buffer of this heap) or -EALREADY (the buffer is free). */
int64_t xheap_usable_size(struct xheap *heap, uint64_t off);

/* Translate between offsets and this process's addresses. xheap_ptr returns
 * NULL for an offset outside the arena; xheap_off returns UINT64_MAX for a
 * pointer outside it. */
void *xheap_ptr(struct xheap *heap, uint64_t off);
uint64_t xheap_off(struct xheap *heap, const void *ptr);

/* Statistics. When the heap is quiescent:
 *   carved_bytes == allocated_bytes + header_bytes + sum(free_list_bytes)
 * where allocated_bytes also counts buffers leaked by killed processes. A
 * process killed between a free-list change and its counter update leaves
 * free_list_bytes of that class one buffer high: the lost buffer is counted
 * as free (the heap itself stays sound; only the statistics are off). Each
 * counter is at least what its list holds at every instant.
 * Under concurrent use the fields are read one by one (not a snapshot). */
struct xheap_stats {
	uint64_t arena_bytes;	      /* total arena */
	uint64_t carved_bytes;	      /* taken from the arena so far */
	uint64_t allocated_bytes;     /* in allocated buffers (class sizes) */
	uint64_t free_list_bytes[41]; /* per class (index = log2 size) */
	uint64_t header_bytes;	      /* 64 B per carved buffer */
};
void xheap_stats(struct xheap *heap, struct xheap_stats *st);

#endif /* XHEAP_H */
