/* SPDX-License-Identifier: MIT */
/*
 * xheap: a boundary-tag general allocator under a robust process-shared
 * mutex, with per-class lock-free caches in front. See xheap.h for the
 * contract; this file explains the layout and the orderings.
 *
 * Layout (offsets from the start of the heap block, all 64-bit):
 *
 *   [struct xheap][block][block]...[block]
 *                 ^arena_off              ^arena_off + arena_size
 *
 * The blocks tile the arena exactly: block i + 1 starts at block i + its
 * size. A block is a 64-byte struct xheap_block followed by its payload.
 * An allocated or cached block is exactly 2^class + 64 bytes, so the user
 * offset (block + 64) is 64-byte aligned and the usable size is exactly the
 * class size: a 4 KiB request costs 4 KiB + 64 B, not 8 KiB. A free block
 * has any size that is a multiple of 64 (64: a header with no payload,
 * which serves nothing until it merges).
 *
 * Block states: FREE (owned by the general allocator, changed only under
 * the mutex), CACHED (on a class's Treiber stack), ALLOC (a caller's). The
 * general allocator merges only FREE blocks, so the lock-free layer and the
 * locked one never fight over a block: a CACHED or ALLOC block is just a
 * wall between free ranges. Every free block of 128 B or more sits in bin
 * floor(log2(size - 64)): every block of bin k serves class k, so the
 * smallest non-empty bin >= c (one bitmap scan) serves class c in O(1).
 *
 * Free lists are Treiber stacks. A head word packs (tag << 32) | idx where
 * idx is the block's offset in 64-byte units and tag counts successful head
 * changes, so a pop that read a stale head and stale next cannot succeed
 * (ABA) unless 2^32 other pushes/pops on the same class happened between its
 * load and its CAS. Such a stale pop may read the next field of a block that
 * has since been merged away and reused as user data: harmless (the CAS
 * fails), but a race in the C memory model, hence xheap_peek32.
 *
 * Crash safety of the general allocator: the forward walk (block by block,
 * by size) is well formed after every store. Split: the tail's header is
 * written in full before the head's size shrinks with one store; merge: the
 * survivor's size grows with one store and the absorbed header is left as
 * it was (state FREE, so a late double free of it still says -EALREADY).
 * prev_size, the bins and the counters may be stale after a death; the
 * repair (run by whoever gets EOWNERDEAD) recomputes all of them from the
 * walk and merges FREE neighbours that a death left apart.
 */
#include "xheap.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#define XHEAP_MAGIC	  0x5848454150303032ULL /* "XHEAP002" */
#define XHEAP_VERSION	  2u
#define XHEAP_BLOCK_MAGIC 0xB10C4EA9B10C4EA9ULL
#define XHEAP_UNIT	  64u
#define XHEAP_MIN_CLASS	  6u  /* 64 B */
#define XHEAP_MAX_CLASS	  40u /* 1 TiB */
#define XHEAP_NCLASSES	  (XHEAP_MAX_CLASS + 1)
#define XHEAP_EMPTY	  0xFFFFFFFFu /* list end / empty head index */
/* Returned by pop for a head that names no possible block (memory scribbled
 * over). Never a block index: a block there could not fit below
 * XHEAP_MAX_SIZE. */
#define XHEAP_CORRUPT 0xFFFFFFFEu
/* Block indexes are 32-bit counts of 64-byte units from the heap start, and
 * XHEAP_EMPTY is reserved: the heap block may not extend beyond
 * XHEAP_MAX_SIZE (xheap.h). */
_Static_assert(XHEAP_MAX_SIZE == (uint64_t)XHEAP_EMPTY * XHEAP_UNIT,
	       "XHEAP_MAX_SIZE is what 32-bit unit indexes name");
/* A class's cache holds at most arena_size >> XHEAP_CACHE_SHIFT bytes: what
 * is freed beyond that merges at once, so the caches can strand at most
 * (used classes) / 64 of the arena, and alloc takes even that back before it
 * gives up. */
#define XHEAP_CACHE_SHIFT 6

enum xheap_block_state {
	XHEAP_BLOCK_FREE = 0x46524545u,	  /* "FREE": general allocator's */
	XHEAP_BLOCK_CACHED = 0x43414348u, /* "CACH": on a class list */
	XHEAP_BLOCK_ALLOC = 0x414c4f43u,  /* "ALOC": a caller's */
};

struct xheap_block {
	/* XHEAP_BLOCK_MAGIC ^ (block offset): a copy of a header found
	 * elsewhere (e.g. inside user data) does not validate. Written once,
	 * when the header is created (init or split). */
	uint64_t magic;
	uint32_t cls;	   /* class of the last buffer here; 0: never one */
	uint32_t state;	   /* atomic: enum xheap_block_state */
	uint32_t next;	   /* atomic: next cached block index while CACHED */
	uint32_t bin_next; /* mutex: bin links while FREE, >= 128 B */
	uint32_t bin_prev;
	uint32_t pad0;
	uint64_t size;	    /* mutex (atomic stores): bytes, header included */
	uint64_t prev_size; /* mutex: predecessor's size, 0 for the first */
	uint64_t pad[2];
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
	uint64_t cache_limit; /* bytes one class may cache */
	uint64_t pad1[2];
	/* The general allocator: the mutex and what it guards. The counters
	 * are written with atomic stores under the mutex so that
	 * xheap_stats can read them without it. */
	pthread_mutex_t lock;
	uint64_t free_bytes;  /* in FREE blocks, headers included */
	uint64_t used_blocks; /* ALLOC + CACHED blocks */
	uint64_t repairs;     /* atomic: EOWNERDEAD repairs done */
	uint64_t bin_map;     /* bit k: bins[k] not empty */
	uint32_t broken;      /* atomic: a repair found the chain broken */
	uint32_t bins[XHEAP_NCLASSES];
	/* Own lines: head and counter of one class share a line, so a pop or
	 * push that already owns the line updates the counter cheaply and
	 * there is no heap-wide counter every operation would bounce. */
	struct xheap_class cls[XHEAP_NCLASSES] __attribute__((aligned(64)));
} __attribute__((aligned(64)));

#define XHEAP_ARENA_OFF                                                        \
	((sizeof(struct xheap) + XHEAP_UNIT - 1) & ~(uint64_t)(XHEAP_UNIT - 1))

static inline char *xheap_base(struct xheap *heap)
{
	return (char *)heap;
}

static inline struct xheap_block *xheap_blk(struct xheap *heap, uint64_t off)
{
	return (struct xheap_block *)(xheap_base(heap) + off);
}

static inline struct xheap_block *xheap_block_at(struct xheap *heap,
						 uint32_t idx)
{
	return xheap_blk(heap, (uint64_t)idx * XHEAP_UNIT);
}

static inline uint64_t xheap_end(const struct xheap *heap)
{
	return heap->arena_off + heap->arena_size;
}

static inline uint64_t xheap_head_pack(uint32_t tag, uint32_t idx)
{
	return ((uint64_t)tag << 32) | idx;
}

/* Reads of header words that may, at that moment, be someone's user data
 * (a stale Treiber pop, a foreign offset handed to free): the value is
 * checked or discarded afterwards, so the race is benign; it is kept out of
 * ThreadSanitizer's view because the other side is a plain user store. */
__attribute__((no_sanitize_thread)) static uint32_t
xheap_peek32(const uint32_t *p)
{
	return *(const volatile uint32_t *)p;
}

__attribute__((no_sanitize_thread)) static uint64_t
xheap_peek64(const uint64_t *p)
{
	return *(const volatile uint64_t *)p;
}

/* Smallest class whose size is >= size; size >= 1. */
static inline unsigned xheap_class_of(size_t size)
{
	if (size <= (1u << XHEAP_MIN_CLASS))
		return XHEAP_MIN_CLASS;
	return 64 - (unsigned)__builtin_clzll((unsigned long long)size - 1);
}

/* Bin of a free block of size >= 128: the largest class it can serve. */
static inline unsigned xheap_bin_of(uint64_t size)
{
	return 63 - (unsigned)__builtin_clzll(size - XHEAP_UNIT);
}

static inline uint64_t xheap_load64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void xheap_store64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* ---- general allocator: everything below until the API runs under the
 * mutex ---- */

static void xheap_bin_insert(struct xheap *heap, uint64_t off)
{
	struct xheap_block *b = xheap_blk(heap, off);
	unsigned k = xheap_bin_of(b->size);
	uint32_t idx = (uint32_t)(off / XHEAP_UNIT), head = heap->bins[k];

	b->bin_prev = XHEAP_EMPTY;
	b->bin_next = head;
	if (head != XHEAP_EMPTY)
		xheap_block_at(heap, head)->bin_prev = idx;
	heap->bins[k] = idx;
	heap->bin_map |= 1ULL << k;
}

/* Unlink a FREE block; its size must be the one it was inserted with. */
static void xheap_bin_remove(struct xheap *heap, uint64_t off)
{
	struct xheap_block *b = xheap_blk(heap, off);
	unsigned k = xheap_bin_of(b->size);

	if (b->bin_prev != XHEAP_EMPTY)
		xheap_block_at(heap, b->bin_prev)->bin_next = b->bin_next;
	else
		heap->bins[k] = b->bin_next;
	if (b->bin_next != XHEAP_EMPTY)
		xheap_block_at(heap, b->bin_next)->bin_prev = b->bin_prev;
	if (heap->bins[k] == XHEAP_EMPTY)
		heap->bin_map &= ~(1ULL << k);
}

static bool xheap_is_free_block(struct xheap *heap, uint64_t off)
{
	struct xheap_block *b = xheap_blk(heap, off);

	return b->magic == (XHEAP_BLOCK_MAGIC ^ off) &&
	       __atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == XHEAP_BLOCK_FREE;
}

/* The block after off (whose size is size) learns its predecessor's size. */
static void xheap_set_next_prev(struct xheap *heap, uint64_t off, uint64_t size)
{
	if (off + size < xheap_end(heap))
		xheap_blk(heap, off + size)->prev_size = size;
}

/* Take a block of class c: 0 with *out set, -ENOMEM, or -EIO. */
static int xheap_general_alloc(struct xheap *heap, unsigned c, uint64_t *out)
{
	uint64_t need = ((uint64_t)1 << c) + XHEAP_UNIT;
	uint64_t mask = heap->bin_map & ~((1ULL << c) - 1), off, size;
	struct xheap_block *b;
	unsigned k;

	if (!mask)
		return -ENOMEM;
	k = (unsigned)__builtin_ctzll(mask);
	off = (uint64_t)heap->bins[k] * XHEAP_UNIT;
	if (off < heap->arena_off || off + need > xheap_end(heap) ||
	    !xheap_is_free_block(heap, off))
		return -EIO;
	b = xheap_blk(heap, off);
	size = b->size;
	if (size < need || size > xheap_end(heap) - off)
		return -EIO;
	xheap_bin_remove(heap, off);
	if (size > need) {
		uint64_t tail_off = off + need, tail_size = size - need;
		struct xheap_block *t = xheap_blk(heap, tail_off);

		/* The tail's header in full before the head shrinks: until
		 * that one store, the walk steps over the tail. */
		t->magic = XHEAP_BLOCK_MAGIC ^ tail_off;
		t->cls = 0;
		__atomic_store_n(&t->state, XHEAP_BLOCK_FREE, __ATOMIC_RELAXED);
		__atomic_store_n(&t->next, XHEAP_EMPTY, __ATOMIC_RELAXED);
		t->size = tail_size;
		t->prev_size = need;
		xheap_set_next_prev(heap, tail_off, tail_size);
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		xheap_store64(&b->size, need);
		if (tail_size > XHEAP_UNIT)
			xheap_bin_insert(heap, tail_off);
	}
	xheap_store64(&heap->free_bytes, heap->free_bytes - need);
	xheap_store64(&heap->used_blocks, heap->used_blocks + 1);
	/* Killed before this store: a FREE block of exactly need bytes,
	 * which the repair merges back. After it: this one buffer leaks. */
	__atomic_store_n(&b->cls, c, __ATOMIC_RELAXED);
	__atomic_store_n(&b->state, XHEAP_BLOCK_ALLOC, __ATOMIC_RELEASE);
	*out = off;
	return 0;
}

/* The block at off has just become FREE (state stored by the caller):
 * account for it, merge it with FREE neighbours and bin the result. */
static void xheap_general_release(struct xheap *heap, uint64_t off)
{
	struct xheap_block *b = xheap_blk(heap, off);
	uint64_t size = b->size, next = off + size;

	xheap_store64(&heap->free_bytes, heap->free_bytes + size);
	xheap_store64(&heap->used_blocks, heap->used_blocks - 1);
	if (next < xheap_end(heap) && xheap_is_free_block(heap, next)) {
		struct xheap_block *n = xheap_blk(heap, next);

		if (n->size > XHEAP_UNIT)
			xheap_bin_remove(heap, next);
		size += n->size;
		xheap_store64(&b->size, size); /* the merge: one store */
		xheap_set_next_prev(heap, off, size);
	}
	if (b->prev_size && b->prev_size <= off - heap->arena_off &&
	    xheap_is_free_block(heap, off - b->prev_size)) {
		uint64_t prev = off - b->prev_size;
		struct xheap_block *p = xheap_blk(heap, prev);

		if (p->size == b->prev_size) {
			if (p->size > XHEAP_UNIT)
				xheap_bin_remove(heap, prev);
			size += p->size;
			xheap_store64(&p->size, size);
			xheap_set_next_prev(heap, prev, size);
			off = prev;
		}
	}
	if (size > XHEAP_UNIT)
		xheap_bin_insert(heap, off);
}

/* Walk the arena from its start: recompute prev_size, merge FREE
 * neighbours, rebuild the bins and the counters. Idempotent, and keeps the
 * walk well formed at every store, so a repairer killed half-way leaves
 * work for the next one. A header that does not validate means the memory
 * was scribbled over: the general allocator is then marked broken. */
static void xheap_repair(struct xheap *heap)
{
	uint64_t off = heap->arena_off, end = xheap_end(heap);
	uint64_t prev = 0, run = 0, free_bytes = 0, used = 0;
	bool in_run = false;
	unsigned k;

	for (k = 0; k < XHEAP_NCLASSES; k++)
		heap->bins[k] = XHEAP_EMPTY;
	heap->bin_map = 0;
	while (off < end) {
		struct xheap_block *b = xheap_blk(heap, off);
		uint64_t size = b->size;
		uint32_t state = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);

		if (b->magic != (XHEAP_BLOCK_MAGIC ^ off) ||
		    size < XHEAP_UNIT || size % XHEAP_UNIT || size > end - off)
			goto broken;
		if (state == XHEAP_BLOCK_FREE) {
			free_bytes += size;
			if (in_run) {
				struct xheap_block *r = xheap_blk(heap, run);

				xheap_store64(&r->size, r->size + size);
				off += size;
				continue;
			}
			in_run = true;
			run = off;
		} else if (state == XHEAP_BLOCK_ALLOC ||
			   state == XHEAP_BLOCK_CACHED) {
			if (in_run && xheap_blk(heap, run)->size > XHEAP_UNIT)
				xheap_bin_insert(heap, run);
			in_run = false;
			used++;
		} else {
			goto broken;
		}
		b->prev_size = off == heap->arena_off ? 0 : off - prev;
		prev = off;
		off += size;
	}
	if (in_run && xheap_blk(heap, run)->size > XHEAP_UNIT)
		xheap_bin_insert(heap, run);
	xheap_store64(&heap->free_bytes, free_bytes);
	xheap_store64(&heap->used_blocks, used);
	return;
broken:
	for (k = 0; k < XHEAP_NCLASSES; k++)
		heap->bins[k] = XHEAP_EMPTY;
	heap->bin_map = 0;
	__atomic_store_n(&heap->broken, 1, __ATOMIC_RELAXED);
}

static int xheap_lock(struct xheap *heap)
{
	int rc = pthread_mutex_lock(&heap->lock);

	if (rc == EOWNERDEAD) {
		/* The owner died somewhere inside a critical section. */
		xheap_repair(heap);
		__atomic_fetch_add(&heap->repairs, 1, __ATOMIC_RELAXED);
		rc = pthread_mutex_consistent(&heap->lock);
		if (rc) {
			pthread_mutex_unlock(&heap->lock);
			return -rc;
		}
	} else if (rc) {
		return -rc;
	}
	if (__atomic_load_n(&heap->broken, __ATOMIC_RELAXED)) {
		pthread_mutex_unlock(&heap->lock);
		return -EIO;
	}
	return 0;
}

static void xheap_unlock(struct xheap *heap)
{
	pthread_mutex_unlock(&heap->lock);
}

int xheap_init(struct xheap *heap, size_t mem_size)
{
	uint64_t mem = mem_size;
	pthread_mutexattr_t attr;
	struct xheap_block *b;
	unsigned c;
	int rc;

	if (!heap || ((uintptr_t)heap & (XHEAP_UNIT - 1)) || mem_size < 4096)
		return -EINVAL;
	/* Memory beyond what 32-bit unit indexes can name would stay unused:
	 * refused, so that a caller who sized a region for the heap learns
	 * it at once (a 512 GiB xseg segment once gave 256 GiB of data
	 * without a word). */
	if (mem > XHEAP_MAX_SIZE)
		return -EFBIG;
	mem &= ~(uint64_t)(XHEAP_UNIT - 1);

	memset(heap, 0, sizeof(*heap));
	rc = pthread_mutexattr_init(&attr);
	if (rc)
		return -rc;
	rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	if (!rc)
		rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	if (!rc)
		rc = pthread_mutex_init(&heap->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	if (rc)
		return -rc;
	heap->magic = XHEAP_MAGIC;
	heap->version = XHEAP_VERSION;
	heap->mem_size = mem;
	heap->arena_off = XHEAP_ARENA_OFF;
	heap->arena_size = mem - XHEAP_ARENA_OFF;
	heap->cache_limit = heap->arena_size >> XHEAP_CACHE_SHIFT;
	for (c = 0; c < XHEAP_NCLASSES; c++) {
		heap->cls[c].head = xheap_head_pack(0, XHEAP_EMPTY);
		heap->bins[c] = XHEAP_EMPTY;
	}
	/* One free block covers the arena; only its header is written, so a
	 * large MAP_NORESERVE mapping stays unpopulated. */
	b = xheap_blk(heap, heap->arena_off);
	memset(b, 0, sizeof(*b));
	b->magic = XHEAP_BLOCK_MAGIC ^ heap->arena_off;
	b->state = XHEAP_BLOCK_FREE;
	b->next = XHEAP_EMPTY;
	b->size = heap->arena_size;
	heap->free_bytes = heap->arena_size;
	xheap_bin_insert(heap, heap->arena_off);
	return 0;
}

/* Pop a block from class c, or return XHEAP_EMPTY, or XHEAP_CORRUPT if the
 * head names no block of the arena (checked so that a scribbled-over heap
 * makes alloc fail instead of reading outside the heap). Inlined by force:
 * it is alloc's fast path, and the give-back also calls it. */
static inline __attribute__((always_inline)) uint32_t
xheap_pop(struct xheap *heap, unsigned c)
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
			xheap_end(heap))
			return XHEAP_CORRUPT;
		/* The block may be popped and reused by someone else right
		 * now, even merged away into user data; then next is stale
		 * and the tag makes the CAS fail. */
		next = xheap_peek32(&xheap_block_at(heap, idx)->next);
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

/* Under the mutex: move every cached buffer to the general allocator.
 * Returns the class bytes moved. A popped block whose state is not CACHED
 * (scribbled over) is left out, as alloc leaves it out. */
static uint64_t xheap_trim_locked(struct xheap *heap)
{
	uint64_t moved = 0;
	unsigned c;

	for (c = XHEAP_MIN_CLASS; c < XHEAP_NCLASSES; c++) {
		uint32_t idx;

		while ((idx = xheap_pop(heap, c)) != XHEAP_EMPTY &&
		       idx != XHEAP_CORRUPT) {
			struct xheap_block *b = xheap_block_at(heap, idx);
			uint32_t expected = XHEAP_BLOCK_CACHED;

			/* Killed between the pop and this CAS: the block
			 * stays CACHED on no list, lost (as a killed
			 * allocation would be). */
			if (!__atomic_compare_exchange_n(
				&b->state, &expected, XHEAP_BLOCK_FREE, false,
				__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				continue;
			xheap_general_release(heap, (uint64_t)idx * XHEAP_UNIT);
			moved += (uint64_t)1 << c;
		}
	}
	return moved;
}

static bool xheap_caches_hold_something(struct xheap *heap)
{
	unsigned c;

	for (c = XHEAP_MIN_CLASS; c < XHEAP_NCLASSES; c++)
		if (__atomic_load_n(&heap->cls[c].free_bytes, __ATOMIC_RELAXED))
			return true;
	return false;
}

uint64_t xheap_arena_bytes_for(uint64_t size)
{
	if (!size || size > ((uint64_t)1 << XHEAP_MAX_CLASS))
		return 0;
	/* as xheap_general_alloc carves a block */
	return ((uint64_t)1 << xheap_class_of(size)) + XHEAP_UNIT;
}

uint64_t xheap_mem_size_for(uint64_t arena_bytes)
{
	uint64_t mem;

	if (arena_bytes > XHEAP_MAX_SIZE - XHEAP_ARENA_OFF)
		return 0;
	mem = XHEAP_ARENA_OFF + arena_bytes;
	return mem < 4096 ? 4096 : mem;
}

int64_t xheap_alloc(struct xheap *heap, size_t size, uint64_t *off)
{
	struct xheap_block *b;
	uint64_t block_off;
	uint32_t idx, prev;
	unsigned c;
	int rc;

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
	if (idx != XHEAP_EMPTY) {
		b = xheap_block_at(heap, idx);
		prev = __atomic_exchange_n(&b->state, XHEAP_BLOCK_ALLOC,
					   __ATOMIC_ACQ_REL);
		/* Only reachable if something scribbled over the heap: the
		 * block is kept off the lists rather than handed out twice. */
		if (prev != XHEAP_BLOCK_CACHED)
			return -EIO;
		*off = (uint64_t)idx * XHEAP_UNIT + XHEAP_UNIT;
		return (int64_t)((uint64_t)1 << c);
	}

	rc = xheap_lock(heap);
	if (rc)
		return rc;
	rc = xheap_general_alloc(heap, c, &block_off);
	if (rc == -ENOMEM && xheap_caches_hold_something(heap)) {
		xheap_trim_locked(heap);
		rc = xheap_general_alloc(heap, c, &block_off);
	}
	xheap_unlock(heap);
	if (rc)
		return rc;
	*off = block_off + XHEAP_UNIT;
	return (int64_t)((uint64_t)1 << c);
}

/* The header of the buffer at user offset off, or NULL if off cannot be a
 * buffer of this heap: outside the arena, misaligned, or without a valid
 * header. */
static struct xheap_block *xheap_lookup(struct xheap *heap, uint64_t off,
					unsigned *cls)
{
	uint64_t block_off;
	struct xheap_block *b;
	uint32_t c;

	if (!heap || off & (XHEAP_UNIT - 1))
		return NULL;
	if (off < heap->arena_off + XHEAP_UNIT || off >= xheap_end(heap))
		return NULL;
	block_off = off - XHEAP_UNIT;
	b = xheap_blk(heap, block_off);
	if (xheap_peek64(&b->magic) != (XHEAP_BLOCK_MAGIC ^ block_off))
		return NULL;
	c = xheap_peek32(&b->cls);
	if (c < XHEAP_MIN_CLASS || c > XHEAP_MAX_CLASS ||
	    ((uint64_t)1 << c) > xheap_end(heap) - off)
		return NULL;
	*cls = c;
	return b;
}

static int xheap_state_error(uint32_t state)
{
	return state == XHEAP_BLOCK_CACHED || state == XHEAP_BLOCK_FREE
		   ? -EALREADY
		   : -EINVAL;
}

int xheap_free(struct xheap *heap, uint64_t off)
{
	uint32_t expected = XHEAP_BLOCK_ALLOC;
	struct xheap_block *b;
	struct xheap_class *cl;
	unsigned c;
	int rc;

	b = xheap_lookup(heap, off, &c);
	if (!b)
		return -EINVAL;
	cl = &heap->cls[c];
	if (__atomic_load_n(&cl->free_bytes, __ATOMIC_RELAXED) +
		((uint64_t)1 << c) <=
	    heap->cache_limit) {
		/* The CAS is the free: of two racing frees of one buffer
		 * exactly one wins, the other changes nothing. */
		if (!__atomic_compare_exchange_n(
			&b->state, &expected, XHEAP_BLOCK_CACHED, false,
			__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return xheap_state_error(expected);
		/* Killed here: this one buffer leaks (CACHED, on no list). */
		xheap_push(heap, c,
			   (uint32_t)((off - XHEAP_UNIT) / XHEAP_UNIT));
		return 0;
	}
	rc = xheap_lock(heap);
	if (rc)
		return rc;
	if (!__atomic_compare_exchange_n(&b->state, &expected, XHEAP_BLOCK_FREE,
					 false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		xheap_unlock(heap);
		return xheap_state_error(expected);
	}
	/* Killed from here on: the repair finds the block FREE and merges
	 * it; nothing is lost. */
	xheap_general_release(heap, off - XHEAP_UNIT);
	xheap_unlock(heap);
	return 0;
}

int64_t xheap_usable_size(struct xheap *heap, uint64_t off)
{
	struct xheap_block *b;
	uint32_t state;
	unsigned c;

	b = xheap_lookup(heap, off, &c);
	if (!b)
		return -EINVAL;
	state = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
	if (state != XHEAP_BLOCK_ALLOC)
		return xheap_state_error(state);
	return (int64_t)((uint64_t)1 << c);
}

int64_t xheap_trim(struct xheap *heap)
{
	uint64_t moved;
	int rc;

	if (!heap)
		return -EINVAL;
	rc = xheap_lock(heap);
	if (rc)
		return rc;
	moved = xheap_trim_locked(heap);
	xheap_unlock(heap);
	return (int64_t)moved;
}

int xheap_verify(struct xheap *heap)
{
	uint64_t off, end, prev_size = 0, free_bytes = 0, used = 0;
	uint64_t binned = 0, listed = 0;
	bool prev_free = false;
	unsigned k;
	int rc;

	if (!heap)
		return -EINVAL;
	rc = xheap_lock(heap);
	if (rc)
		return rc;
	rc = -EIO;
	end = xheap_end(heap);
	for (off = heap->arena_off; off < end;) {
		struct xheap_block *b = xheap_blk(heap, off);
		uint32_t state = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
		uint64_t size = b->size;

		if (b->magic != (XHEAP_BLOCK_MAGIC ^ off) ||
		    size < XHEAP_UNIT || size % XHEAP_UNIT ||
		    size > end - off || b->prev_size != prev_size)
			goto out;
		if (state == XHEAP_BLOCK_FREE) {
			if (prev_free)
				goto out;
			free_bytes += size;
			if (size > XHEAP_UNIT)
				binned++;
			prev_free = true;
		} else if (state == XHEAP_BLOCK_ALLOC ||
			   state == XHEAP_BLOCK_CACHED) {
			if (size != ((uint64_t)1 << b->cls) + XHEAP_UNIT)
				goto out;
			used++;
			prev_free = false;
		} else {
			goto out;
		}
		prev_size = size;
		off += size;
	}
	if (off != end || free_bytes != heap->free_bytes ||
	    used != heap->used_blocks)
		goto out;
	for (k = 0; k < XHEAP_NCLASSES; k++) {
		uint32_t idx = heap->bins[k], prev = XHEAP_EMPTY;

		if ((idx != XHEAP_EMPTY) != !!(heap->bin_map & (1ULL << k)))
			goto out;
		while (idx != XHEAP_EMPTY) {
			uint64_t boff = (uint64_t)idx * XHEAP_UNIT;
			struct xheap_block *b;

			if (boff < heap->arena_off || boff >= end ||
			    !xheap_is_free_block(heap, boff) ||
			    ++listed > binned)
				goto out;
			b = xheap_blk(heap, boff);
			if (b->size <= XHEAP_UNIT ||
			    xheap_bin_of(b->size) != k || b->bin_prev != prev)
				goto out;
			prev = idx;
			idx = b->bin_next;
		}
	}
	if (listed == binned)
		rc = 0;
out:
	xheap_unlock(heap);
	return rc;
}

void *xheap_ptr(struct xheap *heap, uint64_t off)
{
	if (!heap || off < heap->arena_off || off >= xheap_end(heap))
		return NULL;
	return xheap_base(heap) + off;
}

uint64_t xheap_off(struct xheap *heap, const void *ptr)
{
	uintptr_t base = (uintptr_t)heap, p = (uintptr_t)ptr;

	if (!heap || p < base + heap->arena_off || p - base >= xheap_end(heap))
		return UINT64_MAX;
	return (uint64_t)(p - base);
}

void xheap_stats(struct xheap *heap, struct xheap_stats *st)
{
	uint64_t free_total = 0, carved, general_free, blocks;
	unsigned c;

	memset(st, 0, sizeof(*st));
	st->arena_bytes = heap->arena_size;
	for (c = 0; c < XHEAP_NCLASSES; c++) {
		st->free_list_bytes[c] = xheap_load64(&heap->cls[c].free_bytes);
		free_total += st->free_list_bytes[c];
	}
	general_free = xheap_load64(&heap->free_bytes);
	blocks = xheap_load64(&heap->used_blocks);
	carved = general_free <= heap->arena_size
		     ? heap->arena_size - general_free
		     : 0;
	st->carved_bytes = carved;
	st->general_free_bytes = general_free;
	st->header_bytes = blocks * XHEAP_UNIT;
	st->repairs = xheap_load64(&heap->repairs);
	/* Derived rather than counted, so alloc and free touch no heap-wide
	 * word. Under concurrent use the reads are not one snapshot; clamp
	 * instead of reporting a wrapped-around value. */
	if (carved >= st->header_bytes + free_total)
		st->allocated_bytes = carved - st->header_bytes - free_total;
}
