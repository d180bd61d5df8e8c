/* SPDX-License-Identifier: MIT */
#ifndef XOBJ_H
#define XOBJ_H
/*
 * xobj: pool of fixed-size objects inside a memory region addressed by
 * offsets (the xseg segment).
 *
 * Contract
 * - The pool is one contiguous block: header, a free-index xq, a per-object
 *   state byte, then the objects (each aligned to 64 bytes). No pointers:
 *   objects are named by their index (0 .. count-1) or by their offset from
 *   the region base; xobj_ptr/xobj_index convert for the mapping at hand.
 * - get/put are O(1), lock-free and safe between threads and processes
 *   (they are xq operations); a process killed at any instruction leaks at
 *   most the one object it was taking or returning.
 * - Exhaustion: get returns -ENOMEM and the pool is unchanged.
 * - Double put and foreign pointers are detected in every build: put returns
 *   -EINVAL (foreign: outside the pool or not at an object boundary) or
 *   -EALREADY (double put) and changes nothing. Checking costs one atomic
 *   exchange on the state byte.
 * - Objects are zeroed once by xobj_pool_init, not on get: a reused object
 *   holds what its previous owner left, so callers initialise what they read.
 * - obj_size is rounded up to a multiple of 64 (xobj_obj_size returns the
 *   rounded size), so every object starts on a cache line.
 * - Free indexes are reused in FIFO order (the oldest freed first).
 * - Memory ordering: a put happens-before the get that returns the same
 *   index (xq release/acquire), so an object can be handed from one owner to
 *   the next through the pool alone.
 * - Killed processes: an object lost in the middle of a get or put stays
 *   marked free but is never handed out again (a put of its index returns
 *   -EALREADY). An object a killed process held (taken, not yet returned)
 *   is still allocated: whoever reclaims the dead process's objects (xseg's
 *   reaper) returns it with xobj_put.
 * - Only the functions below touch the pool; none validate the pool header,
 *   so passing memory that was never initialised is undefined.
 */
#include <stddef.h>
#include <stdint.h>

struct xobj_pool; /* layout private to xobj.c */

/* Bytes needed for a pool of count objects of obj_size bytes each (a
 * multiple of 64). Returns 0 for count == 0, count > 2^31, obj_size == 0 or
 * overflow. */
size_t xobj_pool_size(uint32_t count, size_t obj_size);

/* Initialise in caller memory (64-byte aligned, mem_size bytes, at least
 * xobj_pool_size(count, obj_size)); all objects start free and zeroed.
 * count is 1 .. 2^31. Writes the whole block (O(count)); not safe against
 * concurrent users of the same memory, the caller publishes the pool with
 * its own release. Returns 0 or -EINVAL. */
int xobj_pool_init(struct xobj_pool *pool, uint32_t count, size_t obj_size,
		   size_t mem_size);

/* Take a free object: *index receives its index. 0, -ENOMEM (none free;
 * nothing changed) or -EIO (the pool's memory was corrupted: the free queue
 * held an index that was not free, which is then left out of circulation).
 * Lock-free: one xq dequeue and one atomic exchange. */
int xobj_get(struct xobj_pool *pool, uint32_t *index);

/* Return object index to the pool. 0, -EINVAL (out of range, or the state
 * byte is corrupted), -EALREADY (already free) or -EIO (the free queue was
 * full: only possible if the pool's memory was corrupted). Nothing changes
 * on -EINVAL or -EALREADY. Of two racing puts of one index exactly one
 * returns 0. Lock-free: one CAS on the state byte and one xq enqueue. */
int xobj_put(struct xobj_pool *pool, uint32_t index);

/* Address of object index in this process's mapping, or NULL if out of
 * range. */
void *xobj_ptr(struct xobj_pool *pool, uint32_t index);

/* Index of the object at ptr: 0 and *index, or -EINVAL for a pointer that is
 * not the start of an object of this pool. */
int xobj_index(struct xobj_pool *pool, const void *ptr, uint32_t *index);

/* Number of objects in the pool. */
uint32_t xobj_count(const struct xobj_pool *pool);
/* Free objects queued: a snapshot, exact when the pool is quiescent (and
 * then count minus the objects taken, minus any lost to killed processes). */
uint32_t xobj_free_count(const struct xobj_pool *pool);
/* Size of each object (the requested size rounded up to 64). */
size_t xobj_obj_size(const struct xobj_pool *pool);

#endif /* XOBJ_H */
