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
 *   offsets capped segments below 2 GiB). Blocks are named inside the heap
 *   by 32-bit indexes of 64-byte units, so a heap is at most XHEAP_MAX_SIZE
 *   (256 GiB - 64 B); xheap_init refuses more memory rather than leave the
 *   rest silently unused (a caller sizes its region with it, as
 *   xseg_max_size does).
 * - Buffers are not zeroed: the caller initialises what it reads.
 * - Memory goes back across classes (review12 F6: a burst of 4 MiB reads
 *   once carved the whole arena into the 4 MiB class for good). Two layers:
 *   1. A general allocator owns the arena as a sequence of blocks, each with
 *      a 64-byte boundary-tag header (its size and its predecessor's size).
 *      Free blocks are merged with free neighbours at once, so no two free
 *      blocks are ever adjacent, and are kept in bins by the largest class
 *      they can serve; allocation takes a block from the smallest non-empty
 *      bin that serves the class and splits off the rest. It runs under one
 *      process-shared robust mutex (see crash safety below).
 *   2. In front of it, one lock-free Treiber stack per class caches freed
 *      buffers for reuse by the same class (the O(1) fast path of the
 *      original design). Each class may hold at most 1/64 of the arena
 *      there; a free beyond that goes to the general allocator and merges.
 *   Guarantee: when no other thread or process uses the heap at the same
 *   time, an allocation of class c fails with -ENOMEM only if no contiguous
 *   free range of 2^c + 64 bytes exists: before failing, alloc moves every
 *   cached buffer into the general allocator (merging it) and tries again.
 *   Under concurrent use a buffer another thread holds between a pop and
 *   its use is not free, and a buffer leaked by a killed process is lost
 *   (see below); both are what any allocator would count as used.
 * - Crash safety: the heap is shared by processes that may be SIGKILLed at
 *   any instruction. The lock-free layer changes state with single atomic
 *   instructions as before. The general allocator orders its header writes
 *   so that walking the arena from its start, block by block by size, is
 *   well formed after every store (a split writes the new tail header before
 *   it shrinks the head with one store; a merge grows the survivor with one
 *   store). A process that dies holding the mutex leaves it EOWNERDEAD: the
 *   next locker walks the arena, merges adjacent free blocks, rebuilds the
 *   bins, recounts, and marks the mutex consistent (statistics: repairs).
 *   A killed process leaks at most the buffer it was handling.
 * - Exhaustion returns -ENOMEM; no buffer is allocated (cached buffers may
 *   have been moved to the general allocator, which the per-class
 *   free_list_bytes show); the heap keeps working.
 * - Memory ordering: a free happens-before the alloc that returns the same
 *   buffer (release push / acquire pop on the fast path, the mutex on the
 *   general path), so a buffer can be handed from one owner to the next
 *   through the heap alone.
 * - Every buffer has a 64-byte header (magic, class, state). free checks it:
 *   a foreign offset returns -EINVAL, a double free -EALREADY, in every
 *   build; nothing is changed on error. A buffer whose memory was merged
 *   into a neighbour keeps its old header (state free) until the memory is
 *   reused, so a late double free still returns -EALREADY then.
 */
#include <stddef.h>
#include <stdint.h>

struct xheap; /* layout private to xheap.c */

#define XHEAP_MIN_ALLOC 64
/* The most memory a heap can manage: block indexes are 32-bit counts of
 * 64-byte units and the index 2^32 - 1 is reserved (a list's end). */
#define XHEAP_MAX_SIZE ((uint64_t)0xFFFFFFFFu * 64)

/* Initialise a heap in caller memory of mem_size bytes (64-byte aligned,
 * at least 4 KiB, at most XHEAP_MAX_SIZE). Only the heap header (about 1 KiB)
 * and the header of the one free block that covers the arena are written: the
 * arena is touched buffer by buffer as it is used, so a MAP_NORESERVE mapping
 * stays unpopulated. The memory must be shared (MAP_SHARED) between the
 * processes that use the heap, as the mutex inside is process-shared. Not safe
 * against concurrent users of the same memory; the caller publishes the heap to
 * other threads or processes with its own release (e.g. the segment's ready
 * flag). Returns 0, -EINVAL (bad pointer or too little memory), -EFBIG
 * (more than XHEAP_MAX_SIZE: the heap could not use all of it; nothing is
 * written), or the negative errno of the mutex set-up. */
int xheap_init(struct xheap *heap, size_t mem_size);

/* Sizing a heap for a reservation before it is made (the stack launcher
 * sizes the xseg segment for cached's requests and vlmc's first read).
 * xheap_arena_bytes_for: the arena one allocation of size bytes takes, its
 * class size plus the 64-byte buffer header; 0 if size is 0 or above the
 * largest class. xheap_mem_size_for: the mem_size (for xheap_init) of the
 * smallest heap whose arena holds arena_bytes, at least 4 KiB; 0 above
 * XHEAP_MAX_SIZE. A new heap that nothing else allocates from serves
 * allocations whose xheap_arena_bytes_for add up to arena_bytes, made one
 * after another in any order: each is carved from the one free block a new
 * heap has, whose rest stays one block. */
uint64_t xheap_arena_bytes_for(uint64_t size);
uint64_t xheap_mem_size_for(uint64_t arena_bytes);

/* Allocate at least size bytes (size >= 1). On success *off receives the
 * buffer's offset and the usable size is returned (> 0). Returns -ENOMEM
 * (no free range of the class plus header, after every cached buffer has
 * been given back to the general allocator), or -EINVAL (size 0, or so
 * large that its class plus header cannot fit even an empty arena), or -EIO
 * (the heap memory was scribbled over: the class's free list held a buffer
 * that was not free, which is then left out, or named no buffer of the
 * arena, which makes that class's cache fail from then on rather than read
 * outside the heap; or the arena's block chain is broken, found by a
 * repair). Fast path lock-free: one CAS on the class's free-list head. Else
 * the general allocator's mutex, O(1) apart from the repair after an
 * owner's death (O(blocks)) and the give-back before -ENOMEM (O(cached
 * buffers)). */
int64_t xheap_alloc(struct xheap *heap, size_t size, uint64_t *off);

/* Free the buffer at off. 0, -EINVAL (not a buffer of this heap: outside
 * the arena, not 64-byte aligned, or no valid buffer header in front of
 * it) or -EALREADY (already free); nothing changes on error. Of two racing
 * frees of one buffer exactly one returns 0. Lock-free while the class's
 * cache is under its bound; otherwise under the mutex, merging the buffer
 * with free neighbours (may also return -EIO after a repair found the block
 * chain broken; the buffer then stays allocated). */
int xheap_free(struct xheap *heap, uint64_t off);

/* Usable size of the allocated buffer at off (its class size), or -EINVAL
 * (not a buffer of this heap) or -EALREADY (the buffer is free). Lock-free. */
int64_t xheap_usable_size(struct xheap *heap, uint64_t off);

/* Give every buffer cached on the per-class free lists back to the general
 * allocator, merging it with its free neighbours (alloc does this itself
 * before it answers -ENOMEM). Returns the number of bytes given back (class
 * sizes), or -EIO as alloc. Takes the mutex. */
int64_t xheap_trim(struct xheap *heap);

/* Diagnostic (tests, xsegctl): walk the whole arena under the mutex and
 * check the block chain: headers valid, sizes adding up to the arena,
 * predecessor sizes right, no two adjacent free blocks, every free block in
 * the right bin and the bins holding nothing else, the counters equal to
 * what the walk finds. O(blocks). 0 or -EIO. */
int xheap_verify(struct xheap *heap);

/* Translate between offsets and this process's addresses. xheap_ptr returns
 * NULL for an offset outside the arena; xheap_off returns UINT64_MAX for a
 * pointer outside it. */
void *xheap_ptr(struct xheap *heap, uint64_t off);
uint64_t xheap_off(struct xheap *heap, const void *ptr);

/* Statistics. When the heap is quiescent:
 *   carved_bytes == allocated_bytes + header_bytes + sum(free_list_bytes)
 *   arena_bytes == carved_bytes + general_free_bytes
 * where allocated_bytes also counts buffers leaked by killed processes. A
 * process killed between a free-list change and its counter update leaves
 * free_list_bytes of that class one buffer high: the lost buffer is counted
 * as free (the heap itself stays sound; only the statistics are off). Each
 * counter is at least what its list holds at every instant. The general
 * allocator's counters are recounted by a repair.
 * Under concurrent use the fields are read one by one (not a snapshot). */
struct xheap_stats {
	uint64_t arena_bytes;	      /* total arena */
	uint64_t carved_bytes;	      /* outside free blocks: buffers (live
					 or cached) with their headers */
	uint64_t allocated_bytes;     /* in allocated buffers (class sizes) */
	uint64_t free_list_bytes[41]; /* cached per class (index = log2) */
	uint64_t header_bytes;	      /* 64 B per carved buffer */
	uint64_t general_free_bytes;  /* in free blocks, headers included */
	uint64_t repairs; /* mutex owner deaths repaired by a walk */
};
void xheap_stats(struct xheap *heap, struct xheap_stats *st);

#endif /* XHEAP_H */
