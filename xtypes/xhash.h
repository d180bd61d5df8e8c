/* SPDX-License-Identifier: MIT */
#ifndef XHASH_H
#define XHASH_H
/*
 * xhash: process-local open-addressing hash table in the spirit of CPython's
 * compact dict (Objects/dictobject.c).
 *
 * Layout
 * - A sparse index array of 2^k slots, each 1, 2, 4 or 8 bytes wide (the
 *   narrowest signed width that can address the dense array), holding
 *   EMPTY, DUMMY (deleted) or a position in the dense array; spare high
 *   bits of a position slot carry a few hash bits (a tag) so probes skip
 *   other keys without loading their records.
 * - A dense array of records in insertion order. Integer tables store
 *   {key, value} (16 bytes); string tables store {hash, value, len, key
 *   bytes} inline, padded to 8 bytes, so a lookup touches one index slot and
 *   one record and never chases a separate key allocation.
 * - Probing: i = hash & mask, then perturb >>= 5; i = (5*i + 1 + perturb) &
 *   mask, which visits every slot once perturb has drained to zero. The
 *   first two slots of the sequence are read together (see xhash.c).
 * - The table grows when the dense array is full; the dense array holds at
 *   most 2/3 of the slot count, so the index load (live + deleted) never
 *   exceeds 2/3. Growing rebuilds both arrays and compacts deleted records
 *   away. Deletes never move records and the table never shrinks by itself.
 *
 * Contract
 * - Not thread-safe: the caller serialises all calls on one table (readers
 *   alone may run concurrently: lookup, count, stats and iteration do not
 *   write to the table).
 * - Keys: uint64_t for XHASH_KEY_INT tables; 1..XHASH_KEY_MAX bytes, any
 *   content (not NUL-terminated: pointer + length) for XHASH_KEY_STR tables.
 *   The table copies string keys; the caller's buffer is not retained.
 * - Values: uint64_t, opaque to the table (indexes, or pointers cast to
 *   uintptr_t; the table never dereferences or frees them).
 * - Errors: functions return 0 or a negative errno. -EINVAL for NULL
 *   arguments, a string key length of 0 or > XHASH_KEY_MAX, or a call of
 *   the wrong key kind (an _int call on a string table or the reverse);
 *   -ENOMEM when growing failed, in which case the table is unchanged.
 * - Memory: comes from the allocator given at creation (malloc/free by
 *   default, i.e. jemalloc in our programs). Only inserts that grow the
 *   table and xhash_reserve() allocate.
 * - Hashing is seeded per table from getrandom(), so iteration order differs
 *   between tables and runs and collision flooding needs the seed.
 */
#include <stddef.h>
#include <stdint.h>

#define XHASH_KEY_MAX 255

enum xhash_kind {
	XHASH_KEY_INT = 1, /* uint64_t keys */
	XHASH_KEY_STR = 2, /* byte-string keys of 1..XHASH_KEY_MAX bytes */
};

/*
 * Allocation hook, mainly for failure injection in tests. alloc returns
 * memory aligned for uint64_t or NULL; release accepts what alloc returned
 * (never NULL).
 */
struct xhash_allocator {
	void *(*alloc)(void *ctx, size_t size);
	void (*release)(void *ctx, void *ptr);
	void *ctx;
};

struct xhash; /* private to xhash.c */

/*
 * Create an empty table of the given key kind, sized so that `expected`
 * entries fit without growing (0 for the minimum). `alloc` may be NULL
 * (malloc/free); a non-NULL allocator is copied and must outlive the table.
 * Returns 0 and *out, or -EINVAL (bad kind, NULL out, absurd expected),
 * -ENOMEM.
 */
int xhash_create(struct xhash **out, enum xhash_kind kind, uint64_t expected,
		 const struct xhash_allocator *alloc);

/* Free the table and its copies of the keys; values are not touched. NULL is
 * accepted. Outstanding cursors become invalid. */
void xhash_destroy(struct xhash *h);

/* Number of live entries. */
uint64_t xhash_count(const struct xhash *h);

/* Key kind given at creation; 0 for NULL. */
enum xhash_kind xhash_kind(const struct xhash *h);

/*
 * Grow now so that `n` live entries fit with no further allocation as long
 * as no entries are deleted (deleted records keep their space until the next
 * growth). Like growing on insert, this compacts and moves records.
 * Returns 0, -EINVAL, -ENOMEM (table unchanged).
 */
int xhash_reserve(struct xhash *h, uint64_t n);

/* --- integer keys (XHASH_KEY_INT tables) --- */

/* Add key -> value. Returns 0, -EEXIST (key present; table unchanged),
 * -ENOMEM (table unchanged), -EINVAL. */
int xhash_int_insert(struct xhash *h, uint64_t key, uint64_t value);

/*
 * Insert or replace. Returns 0 when the key was added, 1 when an existing
 * value was replaced (the previous one in *old if old is not NULL), or
 * -ENOMEM / -EINVAL with the table unchanged. Replacing never allocates
 * nor moves records.
 */
int xhash_int_upsert(struct xhash *h, uint64_t key, uint64_t value,
		     uint64_t *old);

/* Returns 0 and *value (value may be NULL for a membership test), -ENOENT,
 * -EINVAL. */
int xhash_int_lookup(const struct xhash *h, uint64_t key, uint64_t *value);

/* Remove key. Returns 0 (its value in *old if old is not NULL), -ENOENT,
 * -EINVAL. Never allocates and never moves other records. */
int xhash_int_delete(struct xhash *h, uint64_t key, uint64_t *old);

/* --- string keys (XHASH_KEY_STR tables); len must be 1..XHASH_KEY_MAX --- */

int xhash_str_insert(struct xhash *h, const void *key, size_t len,
		     uint64_t value);
int xhash_str_upsert(struct xhash *h, const void *key, size_t len,
		     uint64_t value, uint64_t *old);
int xhash_str_lookup(const struct xhash *h, const void *key, size_t len,
		     uint64_t *value);
int xhash_str_delete(struct xhash *h, const void *key, size_t len,
		     uint64_t *old);

/* --- iteration --- */

/*
 * Cursor over the live entries in insertion order (order of the dense
 * array). Fields are private; the struct is public so cursors live on the
 * caller's stack.
 *
 * During an iteration the caller may:
 * - delete any entry, including the one just returned: deleted records stay
 *   in place, so the cursor is unaffected and never returns a deleted entry;
 * - replace values (upsert of an existing key): in place, returned as
 *   updated if not yet visited;
 * - insert: new records are appended behind the cursor and are returned
 *   later by this iteration, unless the insert had to grow the table, which
 *   compacts and moves records; the cursor detects that and
 *   xhash_iter_next() returns -ESTALE from then on (restart, or call
 *   xhash_reserve() before iterating to make inserts not grow).
 * Every live entry present for the whole iteration is returned exactly once.
 */
struct xhash_iter {
	const struct xhash *h;
	uint64_t pos;	     /* next dense position to examine */
	uint64_t layout_gen; /* table layout generation at xhash_iter_init */
};

struct xhash_item {
	uint64_t key_int;    /* XHASH_KEY_INT tables */
	const void *key_str; /* XHASH_KEY_STR tables: the table's copy, not
				NUL-terminated; valid until the next insert,
				upsert, delete, reserve or destroy */
	size_t key_len;	     /* XHASH_KEY_STR tables: 1..XHASH_KEY_MAX */
	uint64_t value;
};

/* Start a cursor at the first entry. */
void xhash_iter_init(const struct xhash *h, struct xhash_iter *it);

/* Fill *item with the next live entry. Returns 0, -ENOENT at the end,
 * -ESTALE if the table grew since xhash_iter_init, -EINVAL on NULL. */
int xhash_iter_next(struct xhash_iter *it, struct xhash_item *item);

/* --- introspection (tests, benchmarks, tuning) --- */

struct xhash_stats {
	uint64_t count;	       /* live entries */
	uint64_t index_slots;  /* 2^k */
	unsigned slot_bytes;   /* 1, 2, 4 or 8 */
	uint64_t records;      /* dense records ever appended since the last
				  growth, deleted ones included */
	uint64_t records_max;  /* records that fit before growing (2/3 of
				  index_slots) */
	uint64_t dense_bytes;  /* bytes allocated for the dense array */
	uint64_t dense_used;   /* bytes of it in use (deleted included) */
	uint64_t probes_total; /* sum over live keys of slots probed to
				  find them (1 = found in its home slot) */
	uint64_t probes_max;   /* longest such probe sequence */
	uint64_t resizes;      /* growths since creation */
};

/* Walks the whole table (O(size)); returns 0 or -EINVAL. */
int xhash_stats(const struct xhash *h, struct xhash_stats *st);

#endif /* XHASH_H */
