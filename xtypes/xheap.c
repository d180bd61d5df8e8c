/* SPDX-License-Identifier: MIT */
/*
 * xheap: power-of-two size classes, one lock-free free list per class, and
 * a bump carver for memory no class has used yet. See xheap.h for the
 * contract; this file explains the layout and the orderings.
 *
 * Layout (offsets from the start of the heap block, all 64-bit):
 *
 *   [struct xheap][block][block]...[untouched arena]
 *                 ^arena_off        ^arena_off + carve
 *
 * A block is a 64-byte struct xheap_block followed by 2^class usable bytes,
 * so the user offset (block + 64) is 64-byte aligned and the usable size is
 * exactly the class size: a 4 KiB request costs 4 KiB + 64 B, not 8 KiB.
 *
 * Free lists are Treiber stacks. A head word packs (tag << 32) | idx where
 * idx is the block's offset in 64-byte units and tag counts successful head
 * changes, so a pop that read a stale head and stale next cannot succeed
 * (ABA) unless 2^32 other pushes/pops on the same class happened between its
 * load and its CAS.
 *
 * Every state change that matters is one atomic instruction: the head CAS
 * (pop/push), the carve CAS, and the exchange of a block's state word. The
 * statistics counters are updated next to them, so a process killed between
 * the two leaves a counter off by one buffer; the structure stays valid.
 */
#include "xheap.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define XHEAP_MAGIC	  0x5848454150303031ULL /* "XHEAP001" */
#define XHEAP_VERSION	  1u
#define XHEAP_BLOCK_MAGIC 0xB10C4EA9B10C4EA9ULL
#define XHEAP_UNIT	  64u
#define XHEAP_MIN_CLASS	  6u  /* 64 B */
#define XHEAP_MAX_CLASS	  40u /* 1 TiB */
#define XHEAP_NCLASSES	  (XHEAP_MAX_CLASS + 1)
#define XHEAP_EMPTY	  0xFFFFFFFFu /* free-list end / empty head index */
/* Returned by pop for a head that names no possible block (memory scribbled
 * over). Never a block index: a block there could not fit below
 * XHEAP_MAX_MEM. */
#define XHEAP_CORRUPT 0xFFFFFFFEu
/* Block indexes are 32-bit counts of 64-byte units from the heap start, and
 * XHEAP_EMPTY is reserved: the heap block may not extend beyond this. */
#define XHEAP_MAX_MEM ((uint64_t)XHEAP_EMPTY * XHEAP_UNIT)

enum xheap_block_state {
	XHEAP_BLOCK_FREE = 0x46524545u,	 /* "FREE" */
	XHEAP_BLOCK_ALLOC = 0x414c4f43u, /* "ALOC" */
};

struct xheap_block {
	/* XHEAP_BLOCK_MAGIC ^ (block offset): a copy of a header found
	 * elsewhere (e.g. inside user data) does not validate. */
	uint64_t magic;
	uint32_t cls;
	uint32_t state; /* atomic: enum xheap_block_state */
	uint32_t next;	/* atomic: next free block index while on a list */
	uint32_t pad0;
	uint64_t pad[5];
};
_Static_assert(sizeof(struct xheap_block) == XHEAP_UNIT, "block header");

struct xheap_class {
	uint64_t head;	     /* atomic: (tag << 32) | block index */
	uint64_t free_bytes; /* atomic: usable bytes on this free list */
};

struct xheap {
	/* line 0: immutable after init */
	uint64_t magic;
	uint32_t version;
	uint32_t pad0;
	uint64_t mem_size;
	uint64_t arena_off;
	uint64_t arena_size;
	uint64_t pad1[3];
	/* line 1: the carver, written only when a class list is empty */
	uint64_t carve;		/* atomic: bytes of the arena carved so far */
	uint64_t carved_blocks; /* atomic: blocks carved so far */
	uint64_t pad2[6];
	/* lines 2..: head and counter of one class share a line, so a pop or
	 * push that already owns the line updates the counter cheaply and
	 * there is no heap-wide counter every operation would bounce. */
	struct xheap_class cls[XHEAP_NCLASSES];
} __attribute__((aligned(64)));

#define XHEAP_ARENA_OFF                                                        \
	((sizeof(struct xheap) + XHEAP_UNIT - 1) & ~(uint64_t)(XHEAP_UNIT - 1))

static inline char *xheap_base(struct xheap *heap)
{
	return (char *)heap;
}

static inline struct xheap_block *xheap_block_at(struct xheap *heap,
						 uint32_t idx)
{
	return (struct xheap_block *)(xheap_base(heap) +
				      (uint64_t)idx * XHEAP_UNIT);
}

static inline uint64_t xheap_head_pack(uint32_t tag, uint32_t idx)
{
	return ((uint64_t)tag << 32) | idx;
}

/* Smallest class whose size is >= size; size >= 1. */
static inline unsigned xheap_class_of(size_t size)
{
	unsigned c;

	if (size <= (1u << XHEAP_MIN_CLASS))
		return XHEAP_MIN_CLASS;
	c = 64 - (unsigned)__builtin_clzll((unsigned long long)size - 1);
	return c;
}

int xheap_init(struct xheap *heap, size_t mem_size)
{
	uint64_t mem = mem_size;
	unsigned c;

	if (!heap || ((uintptr_t)heap & (XHEAP_UNIT - 1)) || mem_size < 4096)
		return -EINVAL;
	/* Memory beyond what 32-bit unit indexes can name stays unused;
	 * arena_bytes in the statistics shows what the heap manages. */
	if (mem > XHEAP_MAX_MEM)
		mem = XHEAP_MAX_MEM;
	mem &= ~(uint64_t)(XHEAP_UNIT - 1);

	/* Only the header is written: the arena is touched block by block as
	 * it is carved, so a large MAP_NORESERVE mapping stays unpopulated. */
	memset(heap, 0, sizeof(*heap));
	heap->magic = XHEAP_MAGIC;
	heap->version = XHEAP_VERSION;
	heap->mem_size = mem;
	heap->arena_off = XHEAP_ARENA_OFF;
	heap->arena_size = mem - XHEAP_ARENA_OFF;
	for (c = 0; c < XHEAP_NCLASSES; c++)
		heap->cls[c].head = xheap_head_pack(0, XHEAP_EMPTY);
	return 0;
}

/* Pop a block from class c, or return XHEAP_EMPTY, or XHEAP_CORRUPT if the
 * head names no block of the arena (checked so that a scribbled-over heap
 * makes alloc fail instead of reading outside the heap). */
static uint32_t xheap_pop(struct xheap *heap, unsigned c)
{
	struct xheap_class *cl = &heap->cls[c];
	uint64_t head, newhead;
	uint32_t idx, next;

	head = __atomic_load_n(&cl->head, __ATOMIC_ACQUIRE);
	do {
		idx = (uint32_t)head;
		if (idx == XHEAP_EMPTY)
			return XHEAP_EMPTY;
		if ((uint64_t)idx * XHEAP_UNIT < heap->arena_off ||
		    (uint64_t)idx * XHEAP_UNIT + 2 * XHEAP_UNIT >
			heap->arena_off + heap->arena_size)
			return XHEAP_CORRUPT;
		/* The block may be popped and reused by someone else right
		 * now; then next is stale and the tag makes the CAS fail. The
		 * header is never user memory, so reading it is harmless. */
		next = __atomic_load_n(&xheap_block_at(heap, idx)->next,
				       __ATOMIC_RELAXED);
		newhead = xheap_head_pack((uint32_t)(head >> 32) + 1, next);
	} while (!__atomic_compare_exchange_n(&cl->head, &head, newhead, true,
					      __ATOMIC_ACQUIRE,
					      __ATOMIC_ACQUIRE));
	__atomic_fetch_sub(&cl->free_bytes, (uint64_t)1 << c, __ATOMIC_RELAXED);
	return idx;
}

static void xheap_push(struct xheap *heap, unsigned c, uint32_t idx)
{
	struct xheap_class *cl = &heap->cls[c];
	struct xheap_block *b = xheap_block_at(heap, idx);
	uint64_t head, newhead;

	/* Counter first, list second (pop: list first, counter second): the
	 * counter never falls below what the list holds, so a reader never
	 * sees it wrap below zero, and a process killed between the two steps
	 * of either leaves it one buffer high (that buffer is lost). */
	__atomic_fetch_add(&cl->free_bytes, (uint64_t)1 << c, __ATOMIC_RELAXED);
	head = __atomic_load_n(&cl->head, __ATOMIC_RELAXED);
	do {
		__atomic_store_n(&b->next, (uint32_t)head, __ATOMIC_RELAXED);
		newhead = xheap_head_pack((uint32_t)(head >> 32) + 1, idx);
		/* Release: the block header (next) and everything the owner
		 * wrote into the buffer happen-before the next pop of it. */
	} while (!__atomic_compare_exchange_n(&cl->head, &head, newhead, true,
					      __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
}

/* Carve a fresh block of class c, or return XHEAP_EMPTY when the arena is
 * exhausted. A CAS loop rather than fetch_add: a failed large carve must
 * not move the carve offset past the end, or later small carves that would
 * fit would fail too. */
static uint32_t xheap_carve(struct xheap *heap, unsigned c)
{
	uint64_t need = ((uint64_t)1 << c) + XHEAP_UNIT;
	uint64_t carve, block_off;
	struct xheap_block *b;

	carve = __atomic_load_n(&heap->carve, __ATOMIC_RELAXED);
	do {
		if (need > heap->arena_size - carve)
			return XHEAP_EMPTY;
	} while (!__atomic_compare_exchange_n(
	    &heap->carve, &carve, carve + need, true, __ATOMIC_RELAXED,
	    __ATOMIC_RELAXED));
	__atomic_fetch_add(&heap->carved_blocks, 1, __ATOMIC_RELAXED);

	block_off = heap->arena_off + carve;
	b = (struct xheap_block *)(xheap_base(heap) + block_off);
	b->magic = XHEAP_BLOCK_MAGIC ^ block_off;
	b->cls = c;
	__atomic_store_n(&b->next, XHEAP_EMPTY, __ATOMIC_RELAXED);
	__atomic_store_n(&b->state, XHEAP_BLOCK_FREE, __ATOMIC_RELAXED);
	return (uint32_t)(block_off / XHEAP_UNIT);
}

int64_t xheap_alloc(struct xheap *heap, size_t size, uint64_t *off)
{
	struct xheap_block *b;
	uint32_t idx, prev;
	unsigned c;

	if (!heap || !off || size == 0 ||
	    size > ((uint64_t)1 << XHEAP_MAX_CLASS))
		return -EINVAL;
	c = xheap_class_of(size);
	/* A class whose block cannot fit an empty arena can never succeed:
	 * that is a bad request, not a transient shortage. */
	if (((uint64_t)1 << c) + XHEAP_UNIT > heap->arena_size)
		return -EINVAL;

	idx = xheap_pop(heap, c);
	if (idx == XHEAP_CORRUPT)
		return -EIO;
	if (idx == XHEAP_EMPTY)
		idx = xheap_carve(heap, c);
	if (idx == XHEAP_EMPTY)
		return -ENOMEM;

	b = xheap_block_at(heap, idx);
	prev =
	    __atomic_exchange_n(&b->state, XHEAP_BLOCK_ALLOC, __ATOMIC_ACQ_REL);
	if (prev != XHEAP_BLOCK_FREE) {
		/* Only reachable if something scribbled over the heap: the
		 * block is kept off the lists rather than handed out twice. */
		return -EIO;
	}
	*off = (uint64_t)idx * XHEAP_UNIT + XHEAP_UNIT;
	return (int64_t)((uint64_t)1 << c);
}

/* The header of the buffer at user offset off, or NULL if off cannot be a
 * buffer of this heap: outside the carved part of the arena, misaligned, or
 * without a valid header. */
static struct xheap_block *xheap_lookup(struct xheap *heap, uint64_t off)
{
	uint64_t block_off, carve;
	struct xheap_block *b;

	if (!heap || off & (XHEAP_UNIT - 1))
		return NULL;
	if (off < heap->arena_off + XHEAP_UNIT ||
	    off >= heap->arena_off + heap->arena_size)
		return NULL;
	block_off = off - XHEAP_UNIT;
	carve = __atomic_load_n(&heap->carve, __ATOMIC_RELAXED);
	if (block_off >= heap->arena_off + carve)
		return NULL;
	b = (struct xheap_block *)(xheap_base(heap) + block_off);
	if (b->magic != (XHEAP_BLOCK_MAGIC ^ block_off))
		return NULL;
	if (b->cls < XHEAP_MIN_CLASS || b->cls > XHEAP_MAX_CLASS ||
	    ((uint64_t)1 << b->cls) > heap->arena_off + carve - off)
		return NULL;
	return b;
}

int xheap_free(struct xheap *heap, uint64_t off)
{
	struct xheap_block *b = xheap_lookup(heap, off);
	uint32_t expected = XHEAP_BLOCK_ALLOC;

	if (!b)
		return -EINVAL;
	/* The CAS is the free: of two racing frees of one buffer exactly one
	 * wins, the other sees FREE and changes nothing. */
	if (!__atomic_compare_exchange_n(&b->state, &expected, XHEAP_BLOCK_FREE,
					 false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return expected == XHEAP_BLOCK_FREE ? -EALREADY : -EINVAL;
	/* A process killed here leaks this one buffer: FREE but on no list. */
	xheap_push(heap, b->cls, (uint32_t)((off - XHEAP_UNIT) / XHEAP_UNIT));
	return 0;
}

int64_t xheap_usable_size(struct xheap *heap, uint64_t off)
{
	struct xheap_block *b = xheap_lookup(heap, off);
	uint32_t state;

	if (!b)
		return -EINVAL;
	state = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
	if (state == XHEAP_BLOCK_FREE)
		return -EALREADY;
	if (state != XHEAP_BLOCK_ALLOC)
		return -EINVAL;
	return (int64_t)((uint64_t)1 << b->cls);
}

void *xheap_ptr(struct xheap *heap, uint64_t off)
{
	if (!heap || off < heap->arena_off ||
	    off >= heap->arena_off + heap->arena_size)
		return NULL;
	return xheap_base(heap) + off;
}

uint64_t xheap_off(struct xheap *heap, const void *ptr)
{
	uintptr_t base = (uintptr_t)heap, p = (uintptr_t)ptr;

	if (!heap || p < base + heap->arena_off ||
	    p - base >= heap->arena_off + heap->arena_size)
		return UINT64_MAX;
	return (uint64_t)(p - base);
}

void xheap_stats(struct xheap *heap, struct xheap_stats *st)
{
	uint64_t free_total = 0, carved, blocks;
	unsigned c;

	memset(st, 0, sizeof(*st));
	st->arena_bytes = heap->arena_size;
	for (c = 0; c < XHEAP_NCLASSES; c++) {
		st->free_list_bytes[c] =
		    __atomic_load_n(&heap->cls[c].free_bytes, __ATOMIC_RELAXED);
		free_total += st->free_list_bytes[c];
	}
	blocks = __atomic_load_n(&heap->carved_blocks, __ATOMIC_RELAXED);
	carved = __atomic_load_n(&heap->carve, __ATOMIC_RELAXED);
	st->carved_bytes = carved;
	st->header_bytes = blocks * XHEAP_UNIT;
	/* Derived rather than counted, so alloc and free touch no heap-wide
	 * word. Under concurrent use the reads are not one snapshot; clamp
	 * instead of reporting a wrapped-around value. */
	if (carved >= st->header_bytes + free_total)
		st->allocated_bytes = carved - st->header_bytes - free_total;
}
