/* SPDX-License-Identifier: MIT */
/*
 * xobj: fixed-size object pool = xq of free indexes + one state byte per
 * object. See xobj.h for the contract.
 *
 * Layout (offsets from the pool block, each part 64-byte aligned):
 *
 *   [struct xobj_pool][xq: capacity = 2^k >= count][state bytes][objects]
 *
 * The xq is the free list: its FIFO order spreads reuse over the pool (an
 * object just put is the last to come back, which also makes use-after-put
 * bugs less likely to be masked). The state bytes are not needed for the
 * free list itself; they make double put and put of a never-taken index
 * detectable in every build, at the price of one atomic exchange per get
 * and one CAS per put.
 *
 * Kill safety: an index is in the queue only while its state is FREE, and
 * the transitions are ordered so that a process killed between the two
 * steps of an operation leaves an object that is FREE but not queued (get:
 * dequeued, not yet marked; put: marked, not yet enqueued). Such an object
 * is lost to the pool (a later put of it returns -EALREADY) but nothing is
 * ever handed out twice.
 */
#include "xobj.h"
#include "xq.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define XOBJ_MAGIC     0x584f424a504f4f4cULL /* "XOBJPOOL" */
#define XOBJ_VERSION   1u
#define XOBJ_ALIGN     64u
#define XOBJ_MAX_COUNT (1u << 31) /* largest xq capacity */

enum xobj_state {
	XOBJ_FREE = 0x46,      /* 'F' */
	XOBJ_ALLOCATED = 0x41, /* 'A' */
};

struct xobj_pool {
	uint64_t magic;
	uint32_t version;
	uint32_t count;
	uint64_t obj_size; /* rounded up to XOBJ_ALIGN */
	uint64_t total_size;
	uint64_t q_off;
	uint64_t state_off;
	uint64_t objs_off;
	uint64_t pad;
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct xobj_pool) == 64, "pool header is one line");

struct xobj_layout {
	uint64_t cap, q_size, q_off, state_off, objs_off, obj_size, total;
};

static inline uint64_t xobj_round(uint64_t v)
{
	return (v + XOBJ_ALIGN - 1) & ~(uint64_t)(XOBJ_ALIGN - 1);
}

/* Compute the layout; false if the parameters are out of range or the
 * sizes overflow. */
static bool xobj_layout(uint32_t count, size_t obj_size, struct xobj_layout *l)
{
	uint64_t objs_bytes;

	if (count == 0 || obj_size == 0 || count > XOBJ_MAX_COUNT ||
	    obj_size > UINT64_MAX / 2)
		return false;
	l->obj_size = xobj_round(obj_size);
	/* xq capacities start at 2. */
	l->cap = count < 2 ? 2
			   : (uint64_t)1
				 << (64 - __builtin_clzll((uint64_t)count - 1));
	l->q_size = xq_size(l->cap);
	if (l->q_size == 0)
		return false;
	l->q_off = sizeof(struct xobj_pool);
	l->state_off = l->q_off + xobj_round(l->q_size);
	l->objs_off = l->state_off + xobj_round(count);
	if (__builtin_mul_overflow(l->obj_size, (uint64_t)count, &objs_bytes) ||
	    __builtin_add_overflow(l->objs_off, objs_bytes, &l->total) ||
	    l->total > SIZE_MAX)
		return false;
	return true;
}

static inline struct xq *xobj_q(struct xobj_pool *pool)
{
	return (struct xq *)((char *)pool + pool->q_off);
}

static inline uint8_t *xobj_states(struct xobj_pool *pool)
{
	return (uint8_t *)pool + pool->state_off;
}

static inline char *xobj_objs(struct xobj_pool *pool)
{
	return (char *)pool + pool->objs_off;
}

size_t xobj_pool_size(uint32_t count, size_t obj_size)
{
	struct xobj_layout l;

	if (!xobj_layout(count, obj_size, &l))
		return 0;
	return (size_t)l.total;
}

int xobj_pool_init(struct xobj_pool *pool, uint32_t count, size_t obj_size,
		   size_t mem_size)
{
	struct xobj_layout l;
	uint32_t i;
	int ret;

	if (!pool || ((uintptr_t)pool & (XOBJ_ALIGN - 1)))
		return -EINVAL;
	if (!xobj_layout(count, obj_size, &l) || mem_size < l.total)
		return -EINVAL;

	memset(pool, 0, sizeof(*pool));
	pool->version = XOBJ_VERSION;
	pool->count = count;
	pool->obj_size = l.obj_size;
	pool->total_size = l.total;
	pool->q_off = l.q_off;
	pool->state_off = l.state_off;
	pool->objs_off = l.objs_off;
	ret = xq_init(xobj_q(pool), l.cap, (size_t)l.q_size);
	if (ret)
		return ret;
	memset(xobj_states(pool), XOBJ_FREE, count);
	memset(xobj_objs(pool), 0, (size_t)(l.obj_size * count));
	for (i = 0; i < count; i++)
		if (xq_enqueue(xobj_q(pool), i))
			return -EINVAL; /* cannot happen: cap >= count */
	pool->magic = XOBJ_MAGIC;
	return 0;
}

int xobj_get(struct xobj_pool *pool, uint32_t *index)
{
	uint32_t idx;
	uint8_t prev;

	if (xq_dequeue(xobj_q(pool), &idx))
		return -ENOMEM;
	/* A process killed here loses idx: FREE, but no longer queued. */
	if (idx >= pool->count)
		return -EIO; /* the queue was scribbled over */
	prev = __atomic_exchange_n(&xobj_states(pool)[idx], XOBJ_ALLOCATED,
				   __ATOMIC_ACQ_REL);
	if (prev != XOBJ_FREE)
		return -EIO; /* queued while not free: corruption */
	*index = idx;
	return 0;
}

int xobj_put(struct xobj_pool *pool, uint32_t index)
{
	uint8_t expected = XOBJ_ALLOCATED;

	if (index >= pool->count)
		return -EINVAL;
	/* The CAS is what makes a put count: of two racing puts of one index
	 * exactly one gets here, the other sees FREE and changes nothing. */
	if (!__atomic_compare_exchange_n(&xobj_states(pool)[index], &expected,
					 XOBJ_FREE, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return expected == XOBJ_FREE ? -EALREADY : -EINVAL;
	/* A process killed here loses index: FREE, but never queued. The
	 * enqueue cannot find the queue full: an index enters it only on a
	 * successful ALLOCATED -> FREE transition, so at most count are in. */
	if (xq_enqueue(xobj_q(pool), index))
		return -EIO;
	return 0;
}

void *xobj_ptr(struct xobj_pool *pool, uint32_t index)
{
	if (index >= pool->count)
		return NULL;
	return xobj_objs(pool) + (uint64_t)index * pool->obj_size;
}

int xobj_index(struct xobj_pool *pool, const void *ptr, uint32_t *index)
{
	uintptr_t base = (uintptr_t)xobj_objs(pool), p = (uintptr_t)ptr;
	uint64_t rel;

	if (p < base)
		return -EINVAL;
	rel = (uint64_t)(p - base);
	if (rel % pool->obj_size || rel / pool->obj_size >= pool->count)
		return -EINVAL;
	*index = (uint32_t)(rel / pool->obj_size);
	return 0;
}

uint32_t xobj_count(const struct xobj_pool *pool)
{
	return pool->count;
}

uint32_t xobj_free_count(const struct xobj_pool *pool)
{
	uint64_t n =
	    xq_count((const struct xq *)((const char *)pool + pool->q_off));

	/* The queue's capacity may exceed count; its snapshot never should,
	 * but a snapshot is not worth trusting past what the pool holds. */
	return n > pool->count ? pool->count : (uint32_t)n;
}

size_t xobj_obj_size(const struct xobj_pool *pool)
{
	return (size_t)pool->obj_size;
}
