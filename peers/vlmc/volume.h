/* SPDX-License-Identifier: MIT */
#ifndef VLMC_VOLUME_H
#define VLMC_VOLUME_H
/*
 * vlmc volume core: pure functions on volume metadata, no I/O, no xseg.
 *
 * - Names. A volume name is 1..VLMC_NAME_MAX bytes from [A-Za-z0-9._@+=-]
 *   (the blocker's object-name charset without ':'). Every volume has an
 *   incarnation id, 64 random bits chosen when it is created (create,
 *   snapshot, clone). Object i of volume V with id X is named
 *   "V:%016x:%016x" (X, i in hex): objects an earlier incarnation of the
 *   name left behind (a crash in a snapshot, a failed remove) carry
 *   another id and are never addressed. Volumes of a table written before
 *   ids existed have id 0 (legacy) and keep the names "V:%016x" (i). ':'
 *   cannot occur in V, so names never collide across volumes, nor a new
 *   name with a legacy one (two ':' against one). The metadata objects
 *   (VLMC_TABLE_OBJECT_0/1 and the legacy VLMC_META_OBJECT) end in no
 *   ':' + 16 hex digits, so no volume object name can equal them.
 * - Split. A byte range of a volume maps onto consecutive objects; each
 *   extent is one object request.
 * - Metadata table. All volumes, and the reclaim records of removed
 *   volumes whose objects are still being deleted, are persisted as one
 *   text table (see vlmc_meta_encode_r), sealed with a generation and a
 *   SHA-256
 *   (vlmc_table_encode) and written whole, alternately into two objects
 *   in the store below vlmc; the newest that verifies is the table.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VLMC_NAME_MAX 200
/* "V:ID:INDEX": 234 bytes at most, within the blocker's 255 */
#define VLMC_OBJNAME_MAX (VLMC_NAME_MAX + 1 + 16 + 1 + 16)
/* the table before session 8 (one object, no checksum): read only when
 * neither table object exists (migration) */
#define VLMC_META_OBJECT "vlmc:meta"
/* the two table objects: generation g is written into object g % 2 */
#define VLMC_TABLE_OBJECT_0   "vlmc:meta.0"
#define VLMC_TABLE_OBJECT_1   "vlmc:meta.1"
#define VLMC_DEFAULT_OBJ_SIZE (4u << 20)
#define VLMC_MAX_OBJ_SIZE     (64u << 20) /* vlmc_obj_size_valid's limit */
/* Volumes and reclaim records (struct vlmc_reclaim_meta) together: a
 * record takes the place of the volume it was (its line is shorter), so
 * the table's size bound below holds for both. */
#define VLMC_MAX_VOLUMES 1024
/* Largest volume: object index must fit the 16 hex digits and offsets must
 * not overflow; 2^50 (1 PiB) is far beyond any test. */
#define VLMC_MAX_VOLUME_SIZE (1ULL << 50)
/* Bytes reserved for the encoded metadata table. */
#define VLMC_META_MAX (VLMC_MAX_VOLUMES * (VLMC_NAME_MAX * 2 + 64) + 64)
/* Largest header line of a table object (vlmc_table_encode), and of the
 * whole object */
#define VLMC_TABLE_HDR_MAX 128
#define VLMC_TABLE_MAX	   (VLMC_META_MAX + VLMC_TABLE_HDR_MAX)

/* Persistent description of a volume. */
struct vlmc_volume_meta {
	char name[VLMC_NAME_MAX + 1];
	uint64_t size;
	uint32_t obj_size;		/* power of two, 4 KiB .. 64 MiB */
	bool readonly;			/* a snapshot */
	char parent[VLMC_NAME_MAX + 1]; /* snapshot/clone source, "" if none */
	uint64_t id; /* incarnation id; 0: legacy (names without an id) */
};

/*
 * A reclaim record: the objects of a removed volume still to be deleted
 * (vlmc.c, "Background reclaim"). Objects [0, next) of incarnation id
 * (0: legacy names) of name are deleted; [next, objects) may remain. The
 * name may meanwhile belong to a new volume: its id differs, so do its
 * object names.
 */
struct vlmc_reclaim_meta {
	char name[VLMC_NAME_MAX + 1];
	uint64_t id;
	uint64_t objects; /* objects of the removed volume */
	uint64_t next;	  /* <= objects */
};

/* true if name[0..len) is a valid volume name. */
bool vlmc_name_valid(const char *name, size_t len);

/* true if size is a valid object size (power of two, 4 KiB .. 64 MiB). */
bool vlmc_obj_size_valid(uint64_t obj_size);

/* Write the name of object idx of volume vol with incarnation id (0:
 * legacy) into buf (NUL terminated, at least VLMC_OBJNAME_MAX + 1 bytes);
 * returns its length. vol must be a valid name. No allocation (it is on
 * the I/O path). */
size_t vlmc_object_name(char *buf, const char *vol, uint64_t id, uint64_t idx);

/* Number of objects of a volume of size bytes. */
static inline uint64_t vlmc_nr_objects(uint64_t size, uint32_t obj_size)
{
	return (size + obj_size - 1) / obj_size;
}

/* One piece of a split: len bytes at obj_off of object obj_index, at
 * buf_off of the caller's buffer. */
struct vlmc_extent {
	uint64_t obj_index;
	uint64_t obj_off;
	uint64_t buf_off;
	uint64_t len;
};

/* Number of extents vlmc_split produces for [off, off+len). 0 for len 0. */
uint64_t vlmc_split_count(uint64_t off, uint64_t len, uint32_t obj_size);

/* Split [off, off+len) at object boundaries into ext (room for max);
 * returns the number written (vlmc_split_count), or 0 if max is too small
 * or len is 0. The caller checks range and overflow first. */
uint64_t vlmc_split(uint64_t off, uint64_t len, uint32_t obj_size,
		    struct vlmc_extent *ext, uint64_t max);

/*
 * Encode n volumes and nr reclaim records into buf (cap bytes). Format
 * (text, one volume a line):
 *   "vlmc-meta 2 <n>\n"
 *   "<name> <size> <obj_size> <ro|rw> <parent|-> <id|->\n" ... n times
 *   "end\n"
 * id is the incarnation id as exactly 16 lower-case hex digits, "-" for a
 * legacy volume (id 0). The trailer makes a shorter table written over a
 * longer one unambiguous (bytes after "end\n" are ignored). With reclaim
 * records (nr > 0) the table is version 3: the header line gives both
 * counts and the records follow the volumes:
 *   "vlmc-meta 3 <n> <nr>\n"
 *   volume lines as above ... n times
 *   "reclaim <name> <id|-> <objects> <next>\n" ... nr times
 *   "end\n"
 * (version 2 when there are none, so a table with nothing to reclaim
 * stays readable by a vlmc of before version 3). Returns the encoded
 * length, or -ENOSPC if it does not fit.
 */
long vlmc_meta_encode_r(const struct vlmc_volume_meta *v, size_t n,
			const struct vlmc_reclaim_meta *r, size_t nr, char *buf,
			size_t cap);
/* The same without reclaim records. */
long vlmc_meta_encode(const struct vlmc_volume_meta *v, size_t n, char *buf,
		      size_t cap);

/*
 * Decode a buffer of len bytes: version 3 or 2 (above) or version 1,
 * written before incarnation ids (no id column: every volume gets id 0,
 * legacy). An empty table (all zero bytes, len 0) decodes to 0 volumes.
 * On success returns the number of volumes stored in v (room for max) and
 * stores the reclaim records in r (room for rmax; NULL if rmax is 0) and
 * their number in *nr (may be NULL when rmax is 0). -EBADMSG on any
 * syntax error, bad name or value (in versions 2 and 3: an id that is not
 * 16 hex digits, or is 0 written as digits; a record whose objects exceed
 * the largest volume's or whose next exceeds its objects), duplicate name
 * among the volumes, an id used twice (volumes and records together; id
 * 0: a name used twice), count mismatch or missing trailer; -ENOSPC if
 * more than max volumes or rmax records.
 */
long vlmc_meta_decode_r(const char *buf, size_t len, struct vlmc_volume_meta *v,
			size_t max, struct vlmc_reclaim_meta *r, size_t rmax,
			size_t *nr);
/* The same for a table that must hold no reclaim record (-ENOSPC if it
 * does). */
long vlmc_meta_decode(const char *buf, size_t len, struct vlmc_volume_meta *v,
		      size_t max);

/*
 * A table object: the table of n volumes (vlmc_meta_encode) behind one
 * header line that seals it with its generation gen (>= 1) and a SHA-256:
 *   "vlmc-table 1 <gen> <len> <sha256>\n" then len bytes of table text
 * sha256 (64 lower-case hex digits) is over the header up to and
 * including the space before it, then the text: a header of one write
 * with the text of another (a table object rewritten in several pieces,
 * torn by a crash between them) does not verify. Encodes into buf (cap
 * bytes); returns the length of the object, -EINVAL for gen 0, -ENOSPC if
 * it does not fit, -ENOMEM if libcrypto fails. The _r form also encodes
 * nr reclaim records (vlmc_meta_encode_r).
 */
long vlmc_table_encode(const struct vlmc_volume_meta *v, size_t n, uint64_t gen,
		       char *buf, size_t cap);
long vlmc_table_encode_r(const struct vlmc_volume_meta *v, size_t n,
			 const struct vlmc_reclaim_meta *r, size_t nr,
			 uint64_t gen, char *buf, size_t cap);

/*
 * Verify and decode a table object of len bytes (bytes after the text are
 * ignored: an older, longer table under it). On success stores the
 * generation in *gen and returns the number of volumes stored in v (room
 * for max), as vlmc_meta_decode. -EBADMSG if the header is malformed (or
 * generation 0), the text is shorter than the header says, the checksum
 * does not match, or the text does not decode; -ENOSPC if more than max
 * volumes; -ENOMEM if libcrypto fails. *gen and v are unspecified on
 * failure. The _r form also returns the reclaim records
 * (vlmc_meta_decode_r); the plain one refuses a table holding any.
 */
long vlmc_table_decode(const char *buf, size_t len, uint64_t *gen,
		       struct vlmc_volume_meta *v, size_t max);
long vlmc_table_decode_r(const char *buf, size_t len, uint64_t *gen,
			 struct vlmc_volume_meta *v, size_t max,
			 struct vlmc_reclaim_meta *r, size_t rmax, size_t *nr);

#endif /* VLMC_VOLUME_H */
