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
 */
#include <stddef.h>
#include <stdint.h>

struct xobj_pool; /* layout private to xobj.c */

/* Bytes needed for a pool of count objects of obj_size bytes each. Returns 0
 * for count == 0, obj_size == 0 or overflow. */
size_t xobj_pool_size(uint32_t count, size_t obj_size);

/* Initialise in caller memory (64-byte aligned, mem_size bytes); all objects
 * start free and zeroed. Returns 0 or -EINVAL. */
int xobj_pool_init(struct xobj_pool *pool, uint32_t count, size_t obj_size,
		   size_t mem_size);

/* Take a free object: *index receives its index. 0 or -ENOMEM. */
int xobj_get(struct xobj_pool *pool, uint32_t *index);

/* Return object index to the pool. 0, -EINVAL (out of range) or -EALREADY
 * (already free). */
int xobj_put(struct xobj_pool *pool, uint32_t index);

/* Address of object index in this process's mapping, or NULL if out of
 * range. */
void *xobj_ptr(struct xobj_pool *pool, uint32_t index);

/* Index of the object at ptr: 0 and *index, or -EINVAL for a pointer that is
 * not the start of an object of this pool. */
int xobj_index(struct xobj_pool *pool, const void *ptr, uint32_t *index);

uint32_t xobj_count(const struct xobj_pool *pool);
uint32_t xobj_free_count(const struct xobj_pool *pool);
size_t xobj_obj_size(const struct xobj_pool *pool);

#endif /* XOBJ_H */
