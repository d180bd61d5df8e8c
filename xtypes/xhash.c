/* SPDX-License-Identifier: MIT */
/*
 * xhash: see xhash.h for the contract and the layout.
 *
 * Dense "units": positions in the dense array are counted in units, which
 * is what index slots and cursors hold. An integer record is one unit of two
 * words {key, value}; a string record spans several one-word units:
 * {hash, value, len byte + key bytes, padding}. A bitmap with one bit per
 * unit marks the first unit of every live record; deleting clears the bit
 * (CPython's "key = NULL" in the entries array), so iteration is a scan for
 * set bits and never needs a deleted flag inside the record.
 *
 * Slot tags: a slot is as wide as CPython would make it (1, 2, 4 or 8
 * bytes by table size), but a unit position rarely needs all its bits; the
 * spare high bits below the sign hold the top bits of the key's hash. A
 * probe that meets another key's slot then usually rejects it from the tag
 * alone instead of loading that key's record, which in a table larger than
 * the caches is a memory miss saved for about a third of all lookups (the
 * mean successful probe count at our load is ~1.4). Tiny tables get no tag
 * bits, which is harmless as their records are in cache anyway.
 *
 * Integer records do not store the hash: comparing the 64-bit key costs the
 * same as comparing a stored hash, and recomputing the mixer on growth is
 * cheaper than 8 more bytes per record (a third more memory, so more cache
 * and TLB misses per lookup in big tables). String records store the full
 * 64-bit hash so that a probe only compares key bytes when the hashes are
 * equal, which for distinct keys almost never happens.
 */
#include "xhash.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#define XH_EMPTY	 (-1)
#define XH_DUMMY	 (-2)
#define XH_PERTURB_SHIFT 5
#define XH_MIN_SLOTS	 8
/* Hard ceiling on the index size; far beyond any memory we would get, it
 * only keeps the size arithmetic free of overflow. */
#define XH_MAX_SLOTS (UINT64_C(1) << 40)
/* Initial guess of string record size (units) before any key is seen:
 * 2 header words + up to 39 key bytes (object names here are ~26-40 bytes).
 * Wrong guesses only cost an early growth. */
#define XH_STR_GUESS_UNITS 7
#define XH_HUGE_MIN	   (UINT64_C(4) << 20)
#define XH_HUGE_ALIGN	   (UINT64_C(2) << 20)

struct xhash {
	void *index;	 /* 2^k slots of 1 << slot_shift bytes */
	uint64_t *dense; /* records */
	uint64_t *live;	 /* bit per dense unit: a live record starts here */
	uint64_t mask;	 /* index slots - 1 */
	unsigned slot_shift;
	unsigned unit_bits;  /* low bits of a slot: dense unit position */
	unsigned tag_rshift; /* (hash >> 1) >> tag_rshift = the slot tag */
	uint64_t unit_mask;
	unsigned unit_words;  /* words per unit: 2 (int) or 1 (str) */
	uint64_t used_units;  /* dense units appended since the last growth */
	uint64_t cap_units;   /* dense capacity in units */
	uint64_t records;     /* records appended since the last growth */
	uint64_t max_records; /* 2/3 of the slots: growth trigger */
	uint64_t count;	      /* live records */
	uint64_t live_units;  /* units of the live records */
	uint64_t seed;
	uint64_t layout_gen; /* bumped whenever records move */
	uint64_t resizes;
	enum xhash_kind kind;
	struct xhash_allocator a;
};

/* ---------------------------------------------------------------- memory */

static void *xh_default_alloc(void *ctx, size_t size)
{
	(void)ctx;
	if (size < XH_HUGE_MIN)
		return malloc(size);
	/*
	 * Big arrays are read at random addresses, so with 4 KiB pages nearly
	 * every lookup in a large table also misses the TLB. Aligning to 2 MiB
	 * and asking for transparent huge pages removes most of those misses;
	 * the advice is only a hint and is ignored where THP is off.
	 */
	void *p = NULL;
	if (posix_memalign(&p, XH_HUGE_ALIGN, size) != 0)
		return NULL;
	(void)madvise(p, size & ~(XH_HUGE_ALIGN - 1), MADV_HUGEPAGE);
	return p;
}

static void xh_default_release(void *ctx, void *p)
{
	(void)ctx;
	free(p);
}

static void xh_free(const struct xhash *h, void *p)
{
	if (p)
		h->a.release(h->a.ctx, p);
}

/* ---------------------------------------------------------------- hashing */

#define XH_K0 UINT64_C(0x9e3779b97f4a7c15) /* 2^64 / golden ratio */
#define XH_K1 UINT64_C(0xbf58476d1ce4e5b9)
#define XH_K2 UINT64_C(0x94d049bb133111eb)

/*
 * Integer keys: the splitmix64 finaliser, a bijection with full avalanche,
 * applied to key + seed. Sequential keys (object numbers, indexes) thus
 * spread uniformly over the low bits that pick the home slot instead of
 * filling consecutive slots, which an identity hash would do and which
 * perturbation probing only partly repairs.
 */
static inline uint64_t xh_int_hash(uint64_t seed, uint64_t key)
{
	uint64_t z = key + seed;
	z = (z ^ (z >> 30)) * XH_K1;
	z = (z ^ (z >> 27)) * XH_K2;
	return z ^ (z >> 31);
}

static inline uint64_t xh_fold_mul(uint64_t a, uint64_t b)
{
	unsigned __int128 r = (unsigned __int128)a * b;
	return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t xh_rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint64_t xh_rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/*
 * String keys: a multiply-fold hash over 16-byte blocks. Each step
 * multiplies two key words (each xored with the running state) to 128 bits
 * and folds the halves, which mixes every input bit into every output bit
 * in one step at about 1 byte/cycle or better; the last 1..16 bytes are
 * read with two possibly overlapping loads, so no byte loop is needed.
 * Why not FNV-1a: one byte per multiply is slow on our ~40-byte object
 * names and its low bits (the ones that pick the slot) mix poorly for keys
 * that differ only near the end, like "volume-..._00000042". Why not
 * SipHash: about three times slower on such keys; instead the per-table
 * random seed enters every step, so an attacker who does not know the seed
 * cannot precompute colliding names. Not a cryptographic hash.
 */
static inline uint64_t xh_str_hash(uint64_t seed, const void *key, size_t len)
{
	const uint8_t *p = key;
	size_t n = len;
	uint64_t s = seed ^ xh_fold_mul(seed ^ XH_K0, (uint64_t)len ^ XH_K1);
	uint64_t a, b;

	while (n > 16) {
		s = xh_fold_mul(xh_rd64(p) ^ XH_K1 ^ s,
				xh_rd64(p + 8) ^ XH_K2 ^ s);
		p += 16;
		n -= 16;
	}
	if (n >= 8) {
		a = xh_rd64(p);
		b = xh_rd64(p + n - 8);
	} else if (n >= 4) {
		a = xh_rd32(p);
		b = xh_rd32(p + n - 4);
	} else {
		a = ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) |
		    p[n - 1];
		b = 0;
	}
	uint64_t x = xh_fold_mul(a ^ XH_K1 ^ s, b ^ XH_K2 ^ s);
	return xh_fold_mul(x ^ XH_K0, s ^ (uint64_t)len ^ XH_K2);
}

#ifdef XHASH_TEST_COLLIDE
/*
 * Test builds only (tests/test_xhash_collide.c): degenerate hashes, so that
 * equal hashes, equal tags, long probe chains and the key comparison
 * itself, which a good 64-bit hash never exercises, are tested.
 */
static inline uint64_t xh_hash_collide_int(uint64_t key)
{
	return key % 3;
}

static inline uint64_t xh_hash_collide_str(size_t len)
{
	return (uint64_t)(len % 4) * XH_K0;
}
#define xh_int_hash(seed, key) ((void)(seed), xh_hash_collide_int(key))
#define xh_str_hash(seed, key, len)                                            \
	((void)(seed), (void)(key), xh_hash_collide_str(len))
#endif

static uint64_t xh_make_seed(const void *salt)
{
	uint64_t seed;
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == sizeof(seed))
		return seed;
	/* Early boot without entropy: still differ per table and per run. */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return xh_int_hash((uint64_t)(uintptr_t)salt,
			   (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30));
}

/* ---------------------------------------------------------------- slots */

static inline int64_t xh_slot_get(const struct xhash *h, uint64_t i)
{
	switch (h->slot_shift) {
	case 0:
		return ((const int8_t *)h->index)[i];
	case 1:
		return ((const int16_t *)h->index)[i];
	case 2:
		return ((const int32_t *)h->index)[i];
	default:
		return ((const int64_t *)h->index)[i];
	}
}

static inline void xh_slot_set(struct xhash *h, uint64_t i, int64_t v)
{
	switch (h->slot_shift) {
	case 0:
		((int8_t *)h->index)[i] = (int8_t)v;
		break;
	case 1:
		((int16_t *)h->index)[i] = (int16_t)v;
		break;
	case 2:
		((int32_t *)h->index)[i] = (int32_t)v;
		break;
	default:
		((int64_t *)h->index)[i] = v;
		break;
	}
}

/* Narrowest signed slot that holds every unit position below cap_units. */
static unsigned xh_slot_shift_for(uint64_t cap_units)
{
	if (cap_units <= INT8_MAX)
		return 0;
	if (cap_units <= INT16_MAX)
		return 1;
	if (cap_units <= INT32_MAX)
		return 2;
	return 3;
}

static inline uint64_t xh_tag(const struct xhash *h, uint64_t hash)
{
	/* two shifts: tag_rshift is 63 when there are no tag bits */
	return (hash >> 1) >> h->tag_rshift;
}

static inline int64_t xh_slot_value(const struct xhash *h, uint64_t hash,
				    uint64_t unit)
{
	return (int64_t)(xh_tag(h, hash) << h->unit_bits | unit);
}

/* Dense unit held by a slot that holds a live record. */
static inline uint64_t xh_slot_unit(const struct xhash *h, uint64_t i)
{
	return (uint64_t)xh_slot_get(h, i) & h->unit_mask;
}

static inline uint64_t *xh_rec(const struct xhash *h, uint64_t unit)
{
	return h->dense + unit * h->unit_words;
}

static inline uint64_t xh_str_units(size_t len)
{
	/* hash, value, then the length byte and the key bytes */
	return 2 + (1 + len + 7) / 8;
}

static inline const uint8_t *xh_str_bytes(const uint64_t *rec)
{
	return (const uint8_t *)(rec + 2);
}

static inline uint64_t xh_rec_units(const struct xhash *h, uint64_t unit)
{
	if (h->kind == XHASH_KEY_INT)
		return 1;
	return xh_str_units(xh_str_bytes(xh_rec(h, unit))[0]);
}

static inline uint64_t xh_rec_hash(const struct xhash *h, uint64_t unit)
{
	const uint64_t *rec = xh_rec(h, unit);
	return h->kind == XHASH_KEY_INT ? xh_int_hash(h->seed, rec[0]) : rec[0];
}

/*
 * Probe loops, one instance per slot width so the hot loop has no width
 * switch. They return the key's record and its slot position in *slot, or
 * NULL when an empty slot ends the probe sequence. The load limit
 * guarantees an empty slot exists, so the loops terminate.
 *
 * The first two positions of a probe sequence depend on the hash only, so
 * both slots are read up front and the candidate record is chosen without
 * a branch. Together they hold 80-90% of all keys at our loads; with a
 * one-slot start, the ~30% of lookups whose home slot holds another key
 * took a branch that depends on a memory load, whose misprediction stalls
 * the CPU until that load returns (a full memory latency in big tables)
 * and discards the independent work it had started. Only the final "is
 * this the key" test branches, and it nearly always succeeds. When it
 * does not (a key further along, a tag false positive, an absent key) the
 * plain CPython loop runs from the start.
 */
#define XH_PROBE(T, REC, MATCH)                                                \
	do {                                                                   \
		const T *ix = h->index;                                        \
		uint64_t mask = h->mask, i = hash & mask, perturb = hash;      \
		uint64_t tag = xh_tag(h, hash), umask = h->unit_mask;          \
		unsigned ubits = h->unit_bits;                                 \
		uint64_t i1 = (5 * i + 1 + (hash >> XH_PERTURB_SHIFT)) & mask; \
		int64_t s0 = ix[i], s1 = ix[i1];                               \
		uint64_t m0 = (uint64_t)(s0 >= 0) &                            \
			      (uint64_t)((uint64_t)s0 >> ubits == tag);        \
		uint64_t pick = -m0; /* all ones when slot 0 is the one */     \
		uint64_t cand =                                                \
		    ((uint64_t)s0 & pick) | ((uint64_t)s1 & ~pick);            \
		uint64_t cand_slot = (i & pick) | (i1 & ~pick);                \
		if ((int64_t)cand >= 0 && cand >> ubits == tag) {              \
			const uint64_t *rec = REC(cand & umask);               \
			if (MATCH) {                                           \
				*slot = cand_slot;                             \
				return (uint64_t *)rec;                        \
			}                                                      \
		}                                                              \
		for (;;) {                                                     \
			int64_t u = ix[i];                                     \
			if (u >= 0) {                                          \
				if ((uint64_t)u >> ubits == tag) {             \
					const uint64_t *rec =                  \
					    REC((uint64_t)u & umask);          \
					if (MATCH) {                           \
						*slot = i;                     \
						return (uint64_t *)rec;        \
					}                                      \
				}                                              \
			} else if (u == XH_EMPTY) {                            \
				return NULL;                                   \
			}                                                      \
			perturb >>= XH_PERTURB_SHIFT;                          \
			i = (5 * i + 1 + perturb) & mask;                      \
		}                                                              \
	} while (0)

/* Record addresses with the unit size as a constant, not h->unit_words. */
#define XH_INT_REC(u) (h->dense + 2 * (u))
#define XH_STR_REC(u) (h->dense + (u))

/* Inlined into each caller: the lookup path then has no call and no store
 * of the slot position it does not use (~10% faster on small tables). */
static inline __attribute__((always_inline)) uint64_t *
xh_int_find(const struct xhash *h, uint64_t key, uint64_t hash, uint64_t *slot)
{
	switch (h->slot_shift) {
	case 0:
		XH_PROBE(int8_t, XH_INT_REC, rec[0] == key);
	case 1:
		XH_PROBE(int16_t, XH_INT_REC, rec[0] == key);
	case 2:
		XH_PROBE(int32_t, XH_INT_REC, rec[0] == key);
	default:
		XH_PROBE(int64_t, XH_INT_REC, rec[0] == key);
	}
}

/*
 * Key equality for 1..255 bytes: word compares with an overlapping last
 * word instead of a memcmp call; after a full 64-bit hash match the keys
 * are nearly always equal, so there is nothing to gain from memcmp's early
 * exit, and the call and its length dispatch were a noticeable part of a
 * string lookup's instructions.
 */
static inline bool xh_key_eq(const uint8_t *a, const uint8_t *b, size_t len)
{
	if (len >= 8) {
		uint64_t diff = xh_rd64(a + len - 8) ^ xh_rd64(b + len - 8);
		for (size_t i = 0; i + 8 < len; i += 8)
			diff |= xh_rd64(a + i) ^ xh_rd64(b + i);
		return diff == 0;
	}
	if (len >= 4)
		return ((xh_rd32(a) ^ xh_rd32(b)) |
			(xh_rd32(a + len - 4) ^ xh_rd32(b + len - 4))) == 0;
	return memcmp(a, b, len) == 0;
}

#define XH_STR_MATCH                                                           \
	(rec[0] == hash && xh_str_bytes(rec)[0] == len &&                      \
	 xh_key_eq(xh_str_bytes(rec) + 1, key, len))

static inline __attribute__((always_inline)) uint64_t *
xh_str_find(const struct xhash *h, const void *key, size_t len, uint64_t hash,
	    uint64_t *slot)
{
	switch (h->slot_shift) {
	case 0:
		XH_PROBE(int8_t, XH_STR_REC, XH_STR_MATCH);
	case 1:
		XH_PROBE(int16_t, XH_STR_REC, XH_STR_MATCH);
	case 2:
		XH_PROBE(int32_t, XH_STR_REC, XH_STR_MATCH);
	default:
		XH_PROBE(int64_t, XH_STR_REC, XH_STR_MATCH);
	}
}

/* First slot of the probe sequence that holds no live record (empty or
 * dummy); as in CPython, inserts reuse dummies. */
static uint64_t xh_free_slot(const struct xhash *h, uint64_t hash)
{
	uint64_t mask = h->mask, i = hash & mask, perturb = hash;
	while (xh_slot_get(h, i) >= 0) {
		perturb >>= XH_PERTURB_SHIFT;
		i = (5 * i + 1 + perturb) & mask;
	}
	return i;
}

/* ---------------------------------------------------------------- growth */

static inline void xh_live_set(uint64_t *bits, uint64_t u)
{
	bits[u / 64] |= UINT64_C(1) << (u % 64);
}

static inline void xh_live_clear(uint64_t *bits, uint64_t u)
{
	bits[u / 64] &= ~(UINT64_C(1) << (u % 64));
}

/* First live unit at or after `from` and below `end`, or `end`. */
static uint64_t xh_live_next(const uint64_t *bits, uint64_t from, uint64_t end)
{
	if (from >= end)
		return end;
	uint64_t w = from / 64;
	uint64_t word = bits[w] & (~UINT64_C(0) << (from % 64));
	for (;;) {
		if (word) {
			uint64_t u = w * 64 + (uint64_t)__builtin_ctzll(word);
			return u < end ? u : end;
		}
		if (++w * 64 >= end)
			return end;
		word = bits[w];
	}
}

/*
 * Rebuild into fresh arrays able to hold want_records records and
 * want_units dense units, compacting deleted records away. Everything is
 * allocated before anything is touched, so on -ENOMEM the table is as it
 * was.
 */
static int xh_rebuild(struct xhash *h, uint64_t want_records,
		      uint64_t want_units)
{
	uint64_t slots = XH_MIN_SLOTS;
	while ((slots << 1) / 3 < want_records) {
		if (slots >= XH_MAX_SLOTS)
			return -ENOMEM;
		slots <<= 1;
	}
	uint64_t max_records = (slots << 1) / 3;
	uint64_t cap_units = max_records;
	if (h->kind == XHASH_KEY_STR) {
		/* Size the dense array by the mean live record, so that it
		 * and the record limit run out at about the same time. */
		uint64_t mean = h->count
				    ? (h->live_units + h->count - 1) / h->count
				    : XH_STR_GUESS_UNITS;
		cap_units = max_records * mean;
		if (cap_units < want_units)
			cap_units = want_units;
	}
	if (cap_units > XH_MAX_SLOTS * 64)
		return -ENOMEM;
	unsigned shift = xh_slot_shift_for(cap_units);
	unsigned unit_bits = 64 - (unsigned)__builtin_clzll(cap_units | 1);
	unsigned tag_bits = (8u << shift) - 1 - unit_bits;
	uint64_t live_words = (cap_units + 63) / 64;

	void *index = h->a.alloc(h->a.ctx, (size_t)(slots << shift));
	uint64_t *dense = h->a.alloc(
	    h->a.ctx, (size_t)(cap_units * h->unit_words * sizeof(uint64_t)));
	uint64_t *live =
	    h->a.alloc(h->a.ctx, (size_t)(live_words * sizeof(uint64_t)));
	if (!index || !dense || !live) {
		xh_free(h, index);
		xh_free(h, dense);
		xh_free(h, live);
		return -ENOMEM;
	}
	memset(index, 0xff, (size_t)(slots << shift)); /* XH_EMPTY */
	memset(live, 0, (size_t)(live_words * sizeof(uint64_t)));

	struct xhash old = *h;
	h->index = index;
	h->dense = dense;
	h->live = live;
	h->mask = slots - 1;
	h->slot_shift = shift;
	h->unit_bits = unit_bits;
	h->unit_mask = (UINT64_C(1) << unit_bits) - 1;
	h->tag_rshift = 63 - tag_bits;
	h->cap_units = cap_units;
	h->max_records = max_records;

	uint64_t out = 0;
	for (uint64_t u = xh_live_next(old.live, 0, old.used_units);
	     u < old.used_units;
	     u = xh_live_next(old.live, u + 1, old.used_units)) {
		uint64_t n = xh_rec_units(&old, u);
		memcpy(xh_rec(h, out), xh_rec(&old, u),
		       n * h->unit_words * sizeof(uint64_t));
		/* The new index has no dummies and the keys are distinct:
		 * the first empty slot is the right one, no compares. */
		uint64_t hash = xh_rec_hash(h, out);
		xh_slot_set(h, xh_free_slot(h, hash),
			    xh_slot_value(h, hash, out));
		xh_live_set(live, out);
		out += n;
	}
	h->used_units = out;
	h->records = h->count;
	h->layout_gen++;
	h->resizes++;
	xh_free(&old, old.index);
	xh_free(&old, old.dense);
	xh_free(&old, old.live);
	return 0;
}

/* Make room for one more record of `units` units. */
static int xh_make_room(struct xhash *h, uint64_t units)
{
	if (h->records < h->max_records &&
	    h->used_units + units <= h->cap_units)
		return 0;
	/* CPython's GROWTH_RATE: room for about twice the live entries, so a
	 * table that only grows rebuilds O(log n) times. A table churning at
	 * constant size rebuilds (and compacts) in place every ~count ops. */
	uint64_t want = 2 * h->count + 1;
	return xh_rebuild(h, want, 2 * (h->live_units + units));
}

/* ---------------------------------------------------------------- API */

int xhash_create(struct xhash **out, enum xhash_kind kind, uint64_t expected,
		 const struct xhash_allocator *alloc)
{
	if (!out || (kind != XHASH_KEY_INT && kind != XHASH_KEY_STR))
		return -EINVAL;
	if (expected > XH_MAX_SLOTS / 2)
		return -EINVAL;
	if (alloc && (!alloc->alloc || !alloc->release))
		return -EINVAL;
	struct xhash_allocator a = {xh_default_alloc, xh_default_release, NULL};
	if (alloc)
		a = *alloc;
	struct xhash *h = a.alloc(a.ctx, sizeof(*h));
	if (!h)
		return -ENOMEM;
	memset(h, 0, sizeof(*h));
	h->a = a;
	h->kind = kind;
	h->unit_words = kind == XHASH_KEY_INT ? 2 : 1;
	h->seed = xh_make_seed(h);
	int rc = xh_rebuild(
	    h, expected,
	    kind == XHASH_KEY_STR ? expected * XH_STR_GUESS_UNITS : 0);
	if (rc) {
		a.release(a.ctx, h);
		return rc;
	}
	h->resizes = 0;
	*out = h;
	return 0;
}

void xhash_destroy(struct xhash *h)
{
	if (!h)
		return;
	struct xhash_allocator a = h->a;
	xh_free(h, h->index);
	xh_free(h, h->dense);
	xh_free(h, h->live);
	a.release(a.ctx, h);
}

uint64_t xhash_count(const struct xhash *h)
{
	return h ? h->count : 0;
}

enum xhash_kind xhash_kind(const struct xhash *h)
{
	return h ? h->kind : (enum xhash_kind)0;
}

int xhash_reserve(struct xhash *h, uint64_t n)
{
	if (!h || n > XH_MAX_SLOTS / 2)
		return -EINVAL;
	if (n <= h->count)
		return 0;
	uint64_t add = n - h->count, add_units = add;
	if (h->kind == XHASH_KEY_STR)
		add_units *= h->count
				 ? (h->live_units + h->count - 1) / h->count
				 : XH_STR_GUESS_UNITS;
	if (add <= h->max_records - h->records &&
	    add_units <= h->cap_units - h->used_units)
		return 0;
	return xh_rebuild(h, n, h->live_units + add_units);
}

static int xh_int_put(struct xhash *h, uint64_t key, uint64_t value,
		      uint64_t *old, bool replace)
{
	if (!h || h->kind != XHASH_KEY_INT)
		return -EINVAL;
	uint64_t hash = xh_int_hash(h->seed, key);
	uint64_t slot;
	uint64_t *rec = xh_int_find(h, key, hash, &slot);
	if (rec) {
		if (!replace)
			return -EEXIST;
		if (old)
			*old = rec[1];
		rec[1] = value;
		return 1;
	}
	int rc = xh_make_room(h, 1);
	if (rc)
		return rc;
	uint64_t u = h->used_units;
	rec = xh_rec(h, u);
	rec[0] = key;
	rec[1] = value;
	xh_slot_set(h, xh_free_slot(h, hash), xh_slot_value(h, hash, u));
	xh_live_set(h->live, u);
	h->used_units++;
	h->records++;
	h->count++;
	h->live_units++;
	return 0;
}

int xhash_int_insert(struct xhash *h, uint64_t key, uint64_t value)
{
	return xh_int_put(h, key, value, NULL, false);
}

int xhash_int_upsert(struct xhash *h, uint64_t key, uint64_t value,
		     uint64_t *old)
{
	return xh_int_put(h, key, value, old, true);
}

int xhash_int_lookup(const struct xhash *h, uint64_t key, uint64_t *value)
{
	if (!h || h->kind != XHASH_KEY_INT)
		return -EINVAL;
	uint64_t slot;
	const uint64_t *rec =
	    xh_int_find(h, key, xh_int_hash(h->seed, key), &slot);
	if (!rec)
		return -ENOENT;
	if (value)
		*value = rec[1];
	return 0;
}

/* Turn slot `pos` into a dummy and retire its record in place. */
static void xh_remove_at(struct xhash *h, uint64_t pos, uint64_t *old)
{
	uint64_t u = xh_slot_unit(h, pos);
	if (old)
		*old = xh_rec(h, u)[1];
	h->live_units -= xh_rec_units(h, u);
	xh_live_clear(h->live, u);
	xh_slot_set(h, pos, XH_DUMMY);
	h->count--;
}

int xhash_int_delete(struct xhash *h, uint64_t key, uint64_t *old)
{
	if (!h || h->kind != XHASH_KEY_INT)
		return -EINVAL;
	uint64_t slot;
	if (!xh_int_find(h, key, xh_int_hash(h->seed, key), &slot))
		return -ENOENT;
	xh_remove_at(h, slot, old);
	return 0;
}

static inline bool xh_str_ok(const struct xhash *h, const void *key, size_t len)
{
	return h && h->kind == XHASH_KEY_STR && key && len >= 1 &&
	       len <= XHASH_KEY_MAX;
}

static int xh_str_put(struct xhash *h, const void *key, size_t len,
		      uint64_t value, uint64_t *old, bool replace)
{
	if (!xh_str_ok(h, key, len))
		return -EINVAL;
	uint64_t hash = xh_str_hash(h->seed, key, len);
	uint64_t slot;
	uint64_t *rec = xh_str_find(h, key, len, hash, &slot);
	if (rec) {
		if (!replace)
			return -EEXIST;
		if (old)
			*old = rec[1];
		rec[1] = value;
		return 1;
	}
	uint64_t n = xh_str_units(len);
	int rc = xh_make_room(h, n);
	if (rc)
		return rc;
	uint64_t u = h->used_units;
	rec = xh_rec(h, u);
	rec[n - 1] = 0; /* deterministic padding */
	rec[0] = hash;
	rec[1] = value;
	uint8_t *bytes = (uint8_t *)(rec + 2);
	bytes[0] = (uint8_t)len;
	memcpy(bytes + 1, key, len);
	xh_slot_set(h, xh_free_slot(h, hash), xh_slot_value(h, hash, u));
	xh_live_set(h->live, u);
	h->used_units += n;
	h->records++;
	h->count++;
	h->live_units += n;
	return 0;
}

int xhash_str_insert(struct xhash *h, const void *key, size_t len,
		     uint64_t value)
{
	return xh_str_put(h, key, len, value, NULL, false);
}

int xhash_str_upsert(struct xhash *h, const void *key, size_t len,
		     uint64_t value, uint64_t *old)
{
	return xh_str_put(h, key, len, value, old, true);
}

int xhash_str_lookup(const struct xhash *h, const void *key, size_t len,
		     uint64_t *value)
{
	if (!xh_str_ok(h, key, len))
		return -EINVAL;
	uint64_t slot;
	const uint64_t *rec =
	    xh_str_find(h, key, len, xh_str_hash(h->seed, key, len), &slot);
	if (!rec)
		return -ENOENT;
	if (value)
		*value = rec[1];
	return 0;
}

int xhash_str_delete(struct xhash *h, const void *key, size_t len,
		     uint64_t *old)
{
	if (!xh_str_ok(h, key, len))
		return -EINVAL;
	uint64_t slot;
	if (!xh_str_find(h, key, len, xh_str_hash(h->seed, key, len), &slot))
		return -ENOENT;
	xh_remove_at(h, slot, old);
	return 0;
}

void xhash_iter_init(const struct xhash *h, struct xhash_iter *it)
{
	if (!it)
		return;
	it->h = h;
	it->pos = 0;
	it->layout_gen = h ? h->layout_gen : 0;
}

int xhash_iter_next(struct xhash_iter *it, struct xhash_item *item)
{
	if (!it || !it->h || !item)
		return -EINVAL;
	const struct xhash *h = it->h;
	if (it->layout_gen != h->layout_gen)
		return -ESTALE;
	uint64_t u = xh_live_next(h->live, it->pos, h->used_units);
	if (u >= h->used_units) {
		it->pos = u;
		return -ENOENT;
	}
	const uint64_t *rec = xh_rec(h, u);
	if (h->kind == XHASH_KEY_INT) {
		item->key_int = rec[0];
		item->key_str = NULL;
		item->key_len = 0;
	} else {
		item->key_int = 0;
		item->key_str = xh_str_bytes(rec) + 1;
		item->key_len = xh_str_bytes(rec)[0];
	}
	item->value = rec[1];
	it->pos = u + 1;
	return 0;
}

int xhash_stats(const struct xhash *h, struct xhash_stats *st)
{
	if (!h || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->count = h->count;
	st->index_slots = h->mask + 1;
	st->slot_bytes = 1u << h->slot_shift;
	st->records = h->records;
	st->records_max = h->max_records;
	st->dense_bytes = h->cap_units * h->unit_words * sizeof(uint64_t);
	st->dense_used = h->used_units * h->unit_words * sizeof(uint64_t);
	st->resizes = h->resizes;
	for (uint64_t u = xh_live_next(h->live, 0, h->used_units);
	     u < h->used_units;
	     u = xh_live_next(h->live, u + 1, h->used_units)) {
		uint64_t hash = xh_rec_hash(h, u), mask = h->mask;
		uint64_t i = hash & mask, perturb = hash, probes = 1;
		while (xh_slot_get(h, i) != xh_slot_value(h, hash, u)) {
			perturb >>= XH_PERTURB_SHIFT;
			i = (5 * i + 1 + perturb) & mask;
			probes++;
		}
		st->probes_total += probes;
		if (probes > st->probes_max)
			st->probes_max = probes;
	}
	return 0;
}
