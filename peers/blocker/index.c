/* SPDX-License-Identifier: MIT */
/*
 * In-memory index in the memventi spirit: only 40 bits of each score are
 * kept (enough that a lookup of an absent score at 1 G entries reads the
 * log once in a thousand), next to a 40-bit position in 16-byte units.
 * Entries are packed 10 bytes each in per-bucket arrays that grow by an
 * eighth, so RAM per chunk stays around 11-13 bytes including slack and
 * bucket headers (measured by bench_blocker).
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include "store_int.h"

#define BIDX_MIN_BITS  8
#define BIDX_SPLIT_AVG 32
#define PREFIX_BITS    40

static inline uint64_t score_prefix(const uint8_t *score)
{
	return get_be64(score) >> (64 - PREFIX_BITS);
}

static inline uint64_t ent_prefix(const uint8_t *e)
{
	uint64_t v = 0;
	for (int i = 4; i >= 0; i--)
		v = v << 8 | e[i];
	return v;
}

static inline uint64_t ent_pos(const uint8_t *e)
{
	uint64_t v = 0;
	for (int i = 9; i >= 5; i--)
		v = v << 8 | e[i];
	return v * BREC_ALIGN;
}

static inline void ent_set(uint8_t *e, uint64_t prefix, uint64_t pos)
{
	uint64_t u = pos / BREC_ALIGN;
	for (int i = 0; i < 5; i++) {
		e[i] = prefix >> (8 * i);
		e[5 + i] = u >> (8 * i);
	}
}

static inline uint64_t bucket_of(const struct bidx *x, uint64_t prefix)
{
	return prefix >> (PREFIX_BITS - x->bits);
}

int bidx_init(struct bidx *x, unsigned partial_bits, uint64_t expect)
{
	unsigned bits = BIDX_MIN_BITS;

	if (partial_bits == 0 || partial_bits > PREFIX_BITS)
		return -EINVAL;
	while (bits < 30 && (expect >> bits) > BIDX_SPLIT_AVG * 3 / 4)
		bits++;
	memset(x, 0, sizeof(*x));
	x->bits = bits;
	x->partial_bits = partial_bits;
	x->buckets = calloc(1ULL << bits, sizeof(*x->buckets));
	if (!x->buckets)
		return -ENOMEM;
	x->bytes = (1ULL << bits) * sizeof(*x->buckets);
	pthread_rwlock_init(&x->lock, NULL);
	return 0;
}

void bidx_destroy(struct bidx *x)
{
	if (!x->buckets)
		return;
	for (uint64_t i = 0; i < 1ULL << x->bits; i++)
		free(x->buckets[i].ents);
	free(x->buckets);
	x->buckets = NULL;
	free(x->bad);
	x->bad = NULL;
	x->nbad = x->bad_cap = 0;
	pthread_rwlock_destroy(&x->lock);
}

/* Double the bucket count; entries move to the child their next bit picks. */
static int bidx_split(struct bidx *x)
{
	uint64_t n = 1ULL << x->bits;
	struct bidx_bucket *nb;
	uint64_t bytes = 2 * n * sizeof(*nb);

	if (x->bits >= 30)
		return 0; /* buckets just get longer */
	nb = calloc(2 * n, sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		struct bidx_bucket *b = &x->buckets[i];
		uint32_t cnt[2] = {0, 0};
		unsigned shift = PREFIX_BITS - x->bits - 1;

		for (uint32_t k = 0; k < b->n; k++)
			cnt[(ent_prefix(b->ents + k * BIDX_ENTRY_SIZE) >>
			     shift) &
			    1]++;
		for (int c = 0; c < 2; c++) {
			if (!cnt[c])
				continue;
			nb[2 * i + c].ents = malloc(cnt[c] * BIDX_ENTRY_SIZE);
			if (!nb[2 * i + c].ents)
				goto nomem;
			nb[2 * i + c].cap = cnt[c];
			bytes += cnt[c] * BIDX_ENTRY_SIZE;
		}
		for (uint32_t k = 0; k < b->n; k++) {
			const uint8_t *e = b->ents + k * BIDX_ENTRY_SIZE;
			struct bidx_bucket *d =
			    &nb[2 * i + ((ent_prefix(e) >> shift) & 1)];
			memcpy(d->ents + d->n++ * BIDX_ENTRY_SIZE, e,
			       BIDX_ENTRY_SIZE);
		}
	}
	for (uint64_t i = 0; i < n; i++)
		free(x->buckets[i].ents);
	free(x->buckets);
	x->buckets = nb;
	x->bits++;
	x->bytes = bytes;
	x->gen++; /* a lookup now walks one child: fewer, renumbered */
	return 0;
nomem:
	for (uint64_t i = 0; i < 2 * n; i++)
		free(nb[i].ents);
	free(nb);
	return -ENOMEM;
}

static int bucket_add(struct bidx *x, struct bidx_bucket *b, uint64_t prefix,
		      uint64_t pos)
{
	if (b->n == b->cap) {
		uint32_t ncap = b->cap + (b->cap / 8 > 4 ? b->cap / 8 : 4);
		uint8_t *ne = realloc(b->ents, (size_t)ncap * BIDX_ENTRY_SIZE);
		if (!ne)
			return -ENOMEM;
		x->bytes += (uint64_t)(ncap - b->cap) * BIDX_ENTRY_SIZE;
		b->ents = ne;
		b->cap = ncap;
	}
	ent_set(b->ents + (size_t)b->n++ * BIDX_ENTRY_SIZE, prefix, pos);
	x->count++;
	return 0;
}

int bidx_insert(struct bidx *x, const uint8_t score[32], uint64_t pos)
{
	uint64_t prefix = score_prefix(score);
	int r;

	if (pos % BREC_ALIGN || pos >= BIDX_MAX_POS)
		return -ERANGE;
	pthread_rwlock_wrlock(&x->lock);
	if (x->count + 1 > ((uint64_t)BIDX_SPLIT_AVG << x->bits)) {
		r = bidx_split(x);
		if (r < 0)
			goto out;
	}
	r = bucket_add(x, &x->buckets[bucket_of(x, prefix)], prefix, pos);
out:
	pthread_rwlock_unlock(&x->lock);
	return r;
}

/* index of the first flagged position >= pos; under the lock */
static uint32_t bad_find(const struct bidx *x, uint64_t pos)
{
	uint32_t lo = 0, hi = x->nbad;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (x->bad[mid] < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool is_bad(const struct bidx *x, uint64_t pos)
{
	uint32_t i;

	if (!x->nbad)
		return false;
	i = bad_find(x, pos);
	return i < x->nbad && x->bad[i] == pos;
}

/* matches of score whose bad flag equals bad: the first max after skip
 * into pos[], and their number */
static int lookup_flagged(struct bidx *x, const uint8_t score[32],
			  uint64_t *pos, int max, int skip, bool bad,
			  uint64_t *gen)
{
	uint64_t prefix = score_prefix(score);
	unsigned drop = PREFIX_BITS - x->partial_bits;
	int found = 0;

	pthread_rwlock_rdlock(&x->lock);
	struct bidx_bucket *b = &x->buckets[bucket_of(x, prefix)];
	for (uint32_t k = 0; k < b->n; k++) {
		const uint8_t *e = b->ents + (size_t)k * BIDX_ENTRY_SIZE;
		if ((ent_prefix(e) >> drop) != (prefix >> drop))
			continue;
		uint64_t at = ent_pos(e);
		if (is_bad(x, at) != bad)
			continue;
		if (found >= skip && found - skip < max)
			pos[found - skip] = at;
		found++;
	}
	if (gen)
		*gen = x->gen;
	pthread_rwlock_unlock(&x->lock);
	return found;
}

int bidx_lookup(struct bidx *x, const uint8_t score[32], uint64_t *pos, int max,
		int skip)
{
	return lookup_flagged(x, score, pos, max, skip, false, NULL);
}

int bidx_lookup_page(struct bidx *x, const uint8_t score[32], uint64_t *pos,
		     int max, int *skip, uint64_t *gen)
{
	uint64_t seen;
	int total = lookup_flagged(x, score, pos, max, *skip, false, &seen);

	if (*skip && seen != *gen) {
		*skip = 0;
		total = lookup_flagged(x, score, pos, max, 0, false, &seen);
	}
	*gen = seen;
	return total;
}

int bidx_lookup_bad(struct bidx *x, const uint8_t score[32], uint64_t *pos)
{
	return lookup_flagged(x, score, pos, 1, 0, true, NULL);
}

int bidx_flag_bad(struct bidx *x, uint64_t pos)
{
	int r = 0;

	pthread_rwlock_wrlock(&x->lock);
	uint32_t i = bad_find(x, pos);
	if (i < x->nbad && x->bad[i] == pos) {
		r = -EALREADY;
		goto out;
	}
	if (x->nbad == x->bad_cap) {
		uint32_t ncap = x->bad_cap ? 2 * x->bad_cap : 8;
		uint64_t *nb = realloc(x->bad, ncap * sizeof(*nb));
		if (!nb) {
			r = -ENOMEM;
			goto out;
		}
		x->bad = nb;
		x->bad_cap = ncap;
	}
	memmove(x->bad + i + 1, x->bad + i, (x->nbad - i) * sizeof(*x->bad));
	x->bad[i] = pos;
	x->nbad++;
	x->gen++; /* one match fewer: later ones renumbered */
out:
	pthread_rwlock_unlock(&x->lock);
	return r;
}

int bidx_walk(struct bidx *x,
	      int (*fn)(void *arg, uint64_t prefix, uint64_t pos), void *arg)
{
	int r = 0;

	pthread_rwlock_rdlock(&x->lock);
	for (uint64_t i = 0; i < 1ULL << x->bits && !r; i++) {
		struct bidx_bucket *b = &x->buckets[i];
		for (uint32_t k = 0; k < b->n && !r; k++) {
			const uint8_t *e =
			    b->ents + (size_t)k * BIDX_ENTRY_SIZE;
			r = fn(arg, ent_prefix(e) << (64 - PREFIX_BITS),
			       ent_pos(e));
		}
	}
	pthread_rwlock_unlock(&x->lock);
	return r;
}

int bidx_repoint(struct bidx *x, const uint8_t score[32], uint64_t old_pos,
		 uint64_t new_pos)
{
	uint64_t prefix = score_prefix(score);
	int r = -ENOENT;

	if (new_pos % BREC_ALIGN || new_pos >= BIDX_MAX_POS)
		return -ERANGE;
	pthread_rwlock_wrlock(&x->lock);
	struct bidx_bucket *b = &x->buckets[bucket_of(x, prefix)];
	for (uint32_t k = 0; k < b->n; k++) {
		uint8_t *e = b->ents + (size_t)k * BIDX_ENTRY_SIZE;
		if (ent_prefix(e) == prefix && ent_pos(e) == old_pos) {
			ent_set(e, prefix, new_pos);
			r = 0;
			break;
		}
	}
	pthread_rwlock_unlock(&x->lock);
	return r;
}

uint64_t bidx_remove_segs(struct bidx *x, const uint8_t *segs, uint64_t nsegs,
			  uint64_t segment_size)
{
	uint64_t removed = 0;

	pthread_rwlock_wrlock(&x->lock);
	for (uint64_t i = 0; i < 1ULL << x->bits; i++) {
		struct bidx_bucket *b = &x->buckets[i];
		for (uint32_t k = 0; k < b->n;) {
			uint8_t *e = b->ents + (size_t)k * BIDX_ENTRY_SIZE;
			uint64_t seg = ent_pos(e) / segment_size;
			if (seg >= nsegs || !segs[seg]) {
				k++;
				continue;
			}
			/* order inside a bucket does not matter */
			memcpy(e,
			       b->ents + (size_t)(b->n - 1) * BIDX_ENTRY_SIZE,
			       BIDX_ENTRY_SIZE);
			b->n--;
			removed++;
		}
	}
	x->count -= removed;
	/* positions are never reused, but a removed segment's flags are
	 * dead weight in every lookup's search */
	uint32_t kept = 0;
	for (uint32_t i = 0; i < x->nbad; i++) {
		uint64_t seg = x->bad[i] / segment_size;
		if (seg >= nsegs || !segs[seg])
			x->bad[kept++] = x->bad[i];
	}
	/* moved entries renumber matches (a dropped flag too: one more) */
	if (removed || kept != x->nbad)
		x->gen++;
	x->nbad = kept;
	pthread_rwlock_unlock(&x->lock);
	return removed;
}

uint64_t bidx_usable_bytes(struct bidx *x)
{
	uint64_t sum;

	pthread_rwlock_rdlock(&x->lock);
	sum = malloc_usable_size(x->buckets);
	for (uint64_t i = 0; i < 1ULL << x->bits; i++)
		if (x->buckets[i].ents)
			sum += malloc_usable_size(x->buckets[i].ents);
	pthread_rwlock_unlock(&x->lock);
	return sum;
}
