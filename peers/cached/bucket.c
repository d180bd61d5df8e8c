/* SPDX-License-Identifier: MIT */
/*
 * cached: the preallocated bucket pool and the per-object slot states.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cached.h"

/* The PMD (transparent huge page) size, or 0 where THP is unknown. */
static uint64_t cached_thp_size(void)
{
	static const char path[] =
	    "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size";
	unsigned long long v = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	/* a power of two, or we do not align to it */
	return v && !(v & (v - 1)) ? (uint64_t)v : 0;
}

/*
 * Anonymous memory of len bytes, rounded up to a multiple of huge, at an
 * address aligned to huge (when huge is not 0 and len is at least one huge
 * page): reserve huge bytes more, trim the unaligned head and the tail.
 * Only a huge-aligned, huge-sized range of a mapping can be backed by a
 * transparent huge page, and mmap aligns only to 4 KiB.
 */
static unsigned char *cached_pool_map(uint64_t len, uint64_t huge,
				      uint64_t *map_len)
{
	unsigned char *p, *start;
	uint64_t want = len, head, tail;

	if (!huge || len < huge) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		*map_len = len;
		return p == MAP_FAILED ? NULL : p;
	}
	want = (len + huge - 1) / huge * huge;
	/* size_t is as wide as uint64_t (checked): the wrap is the only
	 * limit (a test against SIZE_MAX was dead, review7 N1) */
	_Static_assert(sizeof(size_t) >= sizeof(uint64_t),
		       "cached_pool_map needs a 64-bit size_t");
	if (want < len || want + huge < want)
		return NULL;
	p = mmap(NULL, want + huge, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	start = (unsigned char *)(((uintptr_t)p + huge - 1) &
				  ~(uintptr_t)(huge - 1));
	head = (uint64_t)(start - p);
	tail = huge - head;
	if (head)
		munmap(p, head);
	if (tail)
		munmap(start + want, tail);
	*map_len = want;
	return start;
}

void *cached_huge_calloc(uint64_t nmemb, uint64_t size, uint64_t *map_len)
{
	uint64_t huge = cached_thp_size(), len = nmemb * size;
	unsigned char *p;

	*map_len = 0;
	if (size && len / size != nmemb) {
		errno = ENOMEM;
		return NULL;
	}
	/* Small arrays (every unit test's cache) stay with the allocator:
	 * a huge page would be mostly empty, and ASan checks their
	 * bounds. */
	if (!huge || len < huge)
		return calloc(nmemb ? nmemb : 1, size ? size : 1);
	p = cached_pool_map(len, huge, map_len);
	if (!p) {
		errno = ENOMEM; /* also for a length that wraps */
		return NULL;
	}
	/* Before the first touch, as for the pool (see cached_pool_init);
	 * mmap's pages are zero: no memset, which would touch them all. */
	madvise(p, *map_len, MADV_HUGEPAGE);
	return p;
}

void cached_huge_free(void *p, uint64_t map_len)
{
	if (map_len)
		munmap(p, map_len);
	else
		free(p);
}

int cached_pool_init(struct cached_pool *pool, uint32_t nr,
		     uint32_t bucket_size, bool prefault)
{
	uint64_t len;
	long page = sysconf(_SC_PAGESIZE);
	int rc;

	memset(pool, 0, sizeof(*pool));
	if (!nr || !bucket_size || nr == CACHED_NO_BUCKET)
		return -EINVAL;
	len = (uint64_t)nr * bucket_size;
	if (len / bucket_size != nr || len > SIZE_MAX)
		return -EINVAL;
	pool->data = cached_pool_map(len, cached_thp_size(), &pool->map_len);
	if (!pool->data)
		return -ENOMEM;
	/*
	 * Transparent huge pages where the kernel allows them (THP
	 * "madvise" mode needs this advice): a random read hit over a large
	 * working set then costs no TLB miss walk per 4 KiB. The advice must
	 * come before the first touch: pages faulted in before it are 4 KiB
	 * pages and stay so until khugepaged, maybe never, collapses them
	 * (MAP_POPULATE followed by this advice got no huge page at all).
	 * Advisory; a failure leaves 4 KiB pages, nothing else changes.
	 */
	madvise(pool->data, pool->map_len, MADV_HUGEPAGE);
	if (prefault && page > 0)
		/* A write per page makes every page private now (a huge
		 * page on its first write) rather than on the first pass
		 * over the working set; a read would map the zero page.
		 * Only the buckets: the rounding tail of the map holds none
		 * (review7 N1: it was touched too). */
		for (uint64_t off = 0; off < len; off += (uint64_t)page)
			pool->data[off] = 0;
	pool->free_stack = malloc((size_t)nr * sizeof(uint32_t));
	if (!pool->free_stack) {
		munmap(pool->data, pool->map_len);
		pool->data = NULL;
		return -ENOMEM;
	}
	/* Highest index at the bottom: buckets are handed out from the start
	 * of the map, which keeps a small working set dense. */
	for (uint32_t i = 0; i < nr; i++)
		pool->free_stack[i] = nr - 1 - i;
	rc = pthread_mutex_init(&pool->lock, NULL);
	if (rc) {
		free(pool->free_stack);
		munmap(pool->data, pool->map_len);
		pool->data = NULL;
		return -rc;
	}
	pool->nr = nr;
	pool->bucket_size = bucket_size;
	pool->nr_free = nr;
	return 0;
}

void cached_pool_destroy(struct cached_pool *pool)
{
	if (!pool->data)
		return;
	pthread_mutex_destroy(&pool->lock);
	free(pool->free_stack);
	munmap(pool->data, pool->map_len);
	memset(pool, 0, sizeof(*pool));
}

int cached_pool_get(struct cached_pool *pool, uint32_t *out, uint32_t n)
{
	uint32_t nf;

	if (!n)
		return 0;
	pthread_mutex_lock(&pool->lock);
	nf = pool->nr_free;
	if (nf < n) {
		pthread_mutex_unlock(&pool->lock);
		return -ENOSPC;
	}
	for (uint32_t i = 0; i < n; i++)
		out[i] = pool->free_stack[nf - 1 - i];
	__atomic_store_n(&pool->nr_free, nf - n, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

int cached_pool_get_slots(struct cached_pool *pool, uint32_t *slot, uint32_t n,
			  uint32_t need)
{
	uint32_t nf;

	if (!need)
		return 0;
	pthread_mutex_lock(&pool->lock);
	nf = pool->nr_free;
	if (nf < need) {
		pthread_mutex_unlock(&pool->lock);
		return -ENOSPC;
	}
	for (uint32_t i = 0, k = 0; i < n && k < need; i++)
		if (slot[i] == CACHED_NO_BUCKET)
			slot[i] = pool->free_stack[nf - 1 - k++];
	__atomic_store_n(&pool->nr_free, nf - need, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

void cached_pool_put(struct cached_pool *pool, const uint32_t *idx, uint32_t n)
{
	uint32_t nf;

	if (!n)
		return;
	pthread_mutex_lock(&pool->lock);
	nf = pool->nr_free;
	for (uint32_t i = 0; i < n; i++)
		pool->free_stack[nf + i] = idx[i];
	__atomic_store_n(&pool->nr_free, nf + n, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pool->lock);
}

/* ------------------------------------------------------------------ */
/* Slots                                                               */
/* ------------------------------------------------------------------ */

int cached_obj_alloc_slots(struct cached_obj *o, uint32_t nr_slots)
{
	unsigned char *block;

	if (!nr_slots)
		return -EINVAL;
	if (nr_slots <= CACHED_INLINE_SLOTS) {
		/* Inside the object: a hit reads the slot of a small object
		 * from the object's own cache lines, with no dependent load
		 * into another page (issue 6: at 1 M objects each such
		 * load was a cache and a TLB miss). */
		o->bucket = o->inline_bucket;
		o->bstate = o->inline_bstate;
		o->acked = o->inline_acked;
		memset(o->inline_bstate, 0, sizeof(o->inline_bstate));
		memset(o->inline_acked, 0, sizeof(o->inline_acked));
	} else {
		/* bucket[], bstate[] and acked[] in one block: uint32_t
		 * first, so every array is aligned */
		block = malloc((size_t)nr_slots * (sizeof(uint32_t) + 2));
		if (!block)
			return -ENOMEM;
		o->bucket = (uint32_t *)(void *)block;
		o->bstate = block + (size_t)nr_slots * sizeof(uint32_t);
		o->acked = o->bstate + nr_slots;
		memset(o->bstate, 0, (size_t)nr_slots * 2);
	}
	for (uint32_t s = 0; s < nr_slots; s++)
		o->bucket[s] = CACHED_NO_BUCKET;
	o->nr_slots = nr_slots;
	return 0;
}

void cached_obj_free_slots(struct cached_obj *o)
{
	if (o->bucket != o->inline_bucket)
		free(o->bucket);
	o->bucket = NULL;
	o->bstate = NULL;
	o->acked = NULL;
	o->nr_slots = 0;
}

static void cached_global_count(struct cached *c, enum cached_bstate st,
				int delta)
{
	if (!c)
		return;
	/* seq_cst: the unplug handshake is a store-buffer pattern (a writer
	 * adds here then loads the policy; cached_stop stores the policy
	 * then loads these), which only seq_cst on both sides makes safe
	 * (on x86 a locked add is a full barrier whatever the order) */
	if (st == CACHED_B_DIRTY)
		__atomic_add_fetch(&c->dirty_buckets, (uint64_t)(int64_t)delta,
				   __ATOMIC_SEQ_CST);
	else if (st == CACHED_B_WRITING)
		__atomic_add_fetch(&c->writing_buckets,
				   (uint64_t)(int64_t)delta, __ATOMIC_SEQ_CST);
}

static void cached_unflushed_add(struct cached *c, int64_t delta)
{
	if (!c)
		return;
	/* seq_cst: an add must be visible to a reaper before the reply it
	 * precedes; a subtract comes after the next port's reply */
	if (c->io && c->io->unflushed)
		c->io->unflushed(c, delta);
	else
		__atomic_add_fetch(&c->unflushed, (uint64_t)delta,
				   __ATOMIC_SEQ_CST);
}

static void cached_failed_add(struct cached *c, int64_t delta)
{
	if (c)
		__atomic_add_fetch(&c->failed_buckets, (uint64_t)delta,
				   __ATOMIC_SEQ_CST);
}

void cached_obj_mark_acked(struct cached_obj *o, uint32_t first, uint32_t n)
{
	int64_t k = 0, failed = 0;

	/* a rewrite of counted data only reads the flag */
	for (uint32_t s = first; s < first + n; s++)
		if (o->acked[s] != CACHED_ACK_WRITEBACK) {
			/* a bucket holding failed-write bytes and now
			 * acknowledged ones counts as acknowledged */
			failed += o->acked[s] == CACHED_ACK_FAILED;
			o->acked[s] = CACHED_ACK_WRITEBACK;
			k++;
		}
	if (k)
		cached_unflushed_add(o->c, k);
	if (failed)
		cached_failed_add(o->c, -failed);
}

void cached_obj_mark_failed(struct cached_obj *o, uint32_t s)
{
	if (o->acked[s] != CACHED_ACK_NONE)
		return;
	o->acked[s] = CACHED_ACK_FAILED;
	cached_failed_add(o->c, 1);
}

void cached_obj_set_bstate(struct cached_obj *o, uint32_t s,
			   enum cached_bstate st)
{
	enum cached_bstate old = (enum cached_bstate)o->bstate[s];

	if (old == st)
		return;
	/* Leaving DIRTY/WRITING for a clean state: the next port has the
	 * data (VALID after a flush write's reply; cached no longer drops
	 * dirty data unwritten, not even for a DELETE/COPY target, whose
	 * data is flushed before the operation goes: review9 R9-8). Any
	 * other way out of DIRTY would be a discard and is counted as
	 * written, so nobody must add one: see cached_obj.acked. */
	if (o->acked[s] && st != CACHED_B_DIRTY && st != CACHED_B_WRITING) {
		if (o->acked[s] == CACHED_ACK_WRITEBACK)
			cached_unflushed_add(o->c, -1);
		else
			cached_failed_add(o->c, -1);
		o->acked[s] = CACHED_ACK_NONE;
	}
	o->counts[old]--;
	o->counts[st]++;
	o->bstate[s] = (uint8_t)st;
	/* Increment the new state first so a reader of the sum never sees
	 * a bucket that is DIRTY -> WRITING as clean. */
	cached_global_count(o->c, st, 1);
	cached_global_count(o->c, old, -1);
	__atomic_store_n(&o->unclean,
			 o->counts[CACHED_B_DIRTY] +
			     o->counts[CACHED_B_WRITING],
			 __ATOMIC_RELEASE);
}

uint32_t cached_obj_unclaimed(const struct cached_obj *o, uint32_t first,
			      uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t s = first; s < first + n; s++)
		k += o->bucket[s] == CACHED_NO_BUCKET;
	return k;
}

int cached_obj_claim(struct cached_obj *o, uint32_t first, uint32_t n)
{
	uint32_t need = cached_obj_unclaimed(o, first, n);
	int rc;

	if (!need)
		return 0;
	/* Straight into the slots: no scratch array to allocate, so the
	 * only failure is "no space" (a malloc failure used to be taken
	 * for one and parked the request in a loop). */
	rc = cached_pool_get_slots(&o->c->pool, o->bucket + first, n, need);
	if (rc)
		return rc;
	/* bstate of a free slot is INVALID already (release_all) */
	o->counts[CACHED_B_INVALID] += need;
	__atomic_store_n(&o->nr_claimed, o->nr_claimed + need,
			 __ATOMIC_RELAXED);
	return 0;
}

uint32_t cached_obj_release_clean(struct cached_obj *o)
{
	uint32_t batch[64], k = 0, total = 0;

	for (uint32_t s = 0; s < o->nr_slots && o->nr_claimed; s++) {
		uint8_t st = o->bstate[s];

		if (o->bucket[s] == CACHED_NO_BUCKET ||
		    (st != CACHED_B_VALID && st != CACHED_B_INVALID))
			continue;
		o->counts[st]--;
		batch[k++] = o->bucket[s];
		o->bucket[s] = CACHED_NO_BUCKET;
		o->bstate[s] = CACHED_B_INVALID;
		__atomic_store_n(&o->nr_claimed, o->nr_claimed - 1,
				 __ATOMIC_RELAXED);
		total++;
		if (k == 64) {
			cached_pool_put(&o->c->pool, batch, k);
			k = 0;
		}
	}
	cached_pool_put(&o->c->pool, batch, k);
	return total;
}

void cached_obj_release_all(struct cached_obj *o)
{
	uint32_t batch[64], k = 0;
	int64_t acked = 0, failed = 0;

	for (uint32_t s = 0; s < o->nr_slots && o->nr_claimed; s++) {
		if (o->bucket[s] == CACHED_NO_BUCKET)
			continue;
		acked += o->acked[s] == CACHED_ACK_WRITEBACK;
		failed += o->acked[s] == CACHED_ACK_FAILED;
		o->acked[s] = CACHED_ACK_NONE;
		/* dirty data is dropped here only by cached_destroy of a
		 * cache whose flush timed out; keep the global counters
		 * exact regardless */
		cached_global_count(o->c, (enum cached_bstate)o->bstate[s], -1);
		o->counts[o->bstate[s]]--;
		batch[k++] = o->bucket[s];
		o->bucket[s] = CACHED_NO_BUCKET;
		o->bstate[s] = CACHED_B_INVALID;
		__atomic_store_n(&o->nr_claimed, o->nr_claimed - 1,
				 __ATOMIC_RELAXED);
		if (k == 64) {
			cached_pool_put(&o->c->pool, batch, k);
			k = 0;
		}
	}
	cached_pool_put(&o->c->pool, batch, k);
	/* Acknowledged data dropped without reaching the next port happens
	 * only in cached_destroy of a cache whose flush timed out: the
	 * count stays up, so that releasing the port (or the process's
	 * death) reports the loss. Anywhere else every acked flag was
	 * cleared by a flush (set_bstate) before the release. */
	if (acked && !o->c->destroying)
		cached_unflushed_add(o->c, -acked);
	if (failed)
		cached_failed_add(o->c, -failed);
	memset(o->counts, 0, sizeof(o->counts));
	__atomic_store_n(&o->unclean, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&o->nr_claimed, 0, __ATOMIC_RELAXED);
	o->waiters = NULL;
	o->flushing = false;
	o->fua_wanted = false;
	o->round_fua = false;
	o->kept = false;
	o->cursor = 0;
	o->round_inflight = 0;
	o->round_error = 0;
	o->seq_started = o->seq_done = 0;
	o->last_round_error = 0;
	cached_obj_set_state(o, CACHED_O_READY);
}
