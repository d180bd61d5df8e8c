/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the blocker store's recovery (blocker_open: checkpoint
 * files, log replay, torn tails, damage below the durable mark) and its
 * offline check (blocker_check), on store directories built from the
 * input.
 *
 * Structure-aware: random bytes would almost never get past a record's
 * header CRC and payload SHA-256, so the input is a script of items that
 * the target encodes into a well-formed log (right CRC, position and
 * score), with items that then break it in chosen ways. Byte 0 holds
 * flags, then items follow until the input ends; each item is an op byte
 * (op % 10) and its operands (missing bytes read as 0):
 *   0 CHUNK   u16 n, n bytes: a chunk record (4 KiB, zero padded)
 *   1 MAP     name, u24 size, u8 count, count x (u8 index, u8 ref): a map
 *             update; ref picks an earlier chunk's score, a hole, or a
 *             score no chunk has
 *   2 DELETE  name            3 COPY  name, name
 *   4 RAW     u8 type, u16 len, len bytes: any type and payload under a
 *             valid header (the decoders' checks, not the CRC's)
 *   5 GARBAGE u16 n, n raw bytes (unaligned junk, a torn record)
 *   6 ZEROS   u16 n zero bytes (a zero tail, or zeros inside the log)
 *   7 CORRUPT u8 file, u32 offset, u8 xor: flip bits in the log, maps,
 *             index, durable mark, super block or gc file (applied last)
 *   8 CKPT    u8 which, u8 count, entries: a maps or index checkpoint
 *             file with a valid header and SHA-256 over the entries
 *   9 CUT     u16 n: drop the log's last n bytes
 * Names are "o0".."o7" (a name byte % 8), so items meet the same objects.
 * Flag bit 0: open and close the store once before the CORRUPT items (a
 * clean close writes the checkpoint files and moves the durable mark to
 * the log's end, so corruption then lies below it); bit 1: the final open
 * uses the operator override truncate_at_damage.
 *
 * Invariants: nothing crashes or leaks, every call returns 0 or a negative
 * errno; a read that succeeds returns, chunk by chunk, the zero chunk or
 * one of the chunks the input wrote (never other bytes: the store
 * verifies what it reads); a store that opens takes a new write, which
 * reads back identical after a close and a reopen.
 *
 * And a model: when the input holds only CHUNK, MAP, DELETE and COPY items
 * (a log as the store itself writes it, whole), the target replays them on
 * a model of the maps (docs/on-disk-format.md "Payloads"): a map update
 * sets chunks and grows the size, a delete drops the name, a copy replaces
 * the destination with the source. Then the store must open exactly when
 * every record applies (a map update past its own size, a copy from a name
 * that does not exist: refused), and hold exactly the model's objects,
 * sizes and chunks: a chunk no record stored must fail the read, never
 * read as zeros.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_reader.h"
#include "store_int.h"
#include "test_blocker_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHUNK	  4096u
#define SEG_SIZE  (1u << 20)
#define MAX_CHUNK 256 /* chunks whose scores items may refer to */
#define NNAMES	  8
#define MAX_FIX	  16 /* CORRUPT items kept */
#define READ_MAX  (64u << 10)
#define CKPT_HDR  72

static char dir[256];

/* An object of the model: its size and a score per chunk (all zero: a
 * hole). */
struct mobj {
	bool exists;
	uint64_t size;
	uint64_t nchunks;
	uint8_t (*scores)[BLOCKER_SCORE_SIZE];
};

/* the log being built, and what the invariants need to know of it */
struct script {
	uint8_t *log;
	size_t len;
	uint8_t scores[MAX_CHUNK][BLOCKER_SCORE_SIZE];
	unsigned nchunks;
	/* scores of every chunk-sized chunk record, for the read check */
	uint8_t (*allowed)[BLOCKER_SCORE_SIZE];
	unsigned nallowed, cap_allowed;
	struct {
		uint8_t file, xor;
		uint32_t off;
	} fix[MAX_FIX];
	unsigned nfix;
	/* the model: valid while the input is pure (only records the store
	 * could have written, all in the log); bad once a record would not
	 * apply */
	bool pure, bad, full;
	/* a map update names a score no chunk record before it has: the
	 * store opens (reads of it fail), the offline check reports it */
	bool dangling;
	struct mobj objs[NNAMES];
};

/* Recovery's reports are expected: quiet, unless FUZZ_VERBOSE is set (to
 * see what the store made of an input being replayed). */
static void on_log(void *arg, enum blocker_log_level level, const char *msg)
{
	static int verbose = -1;

	if (verbose < 0)
		verbose = getenv("FUZZ_VERBOSE") != NULL;
	if (verbose)
		fprintf(stderr, "store: %s\n", msg);
}

static void opts(struct blocker_opts *o, bool override)
{
	tb_opts_manual(o, CHUNK, SEG_SIZE, NULL);
	o->reserve_bytes = BLOCKER_RESERVE_NONE;
	o->truncate_at_damage = override;
	o->log = on_log;
}

static void name_of(char out[3], uint64_t b)
{
	out[0] = 'o';
	out[1] = (char)('0' + b % NNAMES);
	out[2] = '\0';
}

static void allow(struct script *s, const uint8_t score[32])
{
	if (s->nallowed == s->cap_allowed) {
		s->cap_allowed = s->cap_allowed ? 2 * s->cap_allowed : 64;
		s->allowed =
		    realloc(s->allowed, s->cap_allowed * sizeof(*s->allowed));
		if (!s->allowed)
			abort();
	}
	memcpy(s->allowed[s->nallowed++], score, 32);
}

/* Append one record: header with the right CRC, position and score.
 * false when the segment is full (then no later record is written either,
 * so the log stays a prefix of the script). */
static bool put_record(struct script *s, unsigned type, const uint8_t *p,
		       uint32_t len)
{
	uint8_t score[32];
	uint64_t need = brec_size(len);

	if (s->full || s->len + need > SEG_SIZE) {
		s->full = true;
		return false;
	}
	blocker_sha256(p, len, score);
	brec_encode(s->log + s->len, (enum brec_type)type, len, s->len, score);
	memcpy(s->log + s->len + BREC_HDR_SIZE, p, len);
	memset(s->log + s->len + BREC_HDR_SIZE + len, 0,
	       need - BREC_HDR_SIZE - len);
	s->len += need;
	if (type == BREC_CHUNK && len == CHUNK) {
		allow(s, score);
		if (s->nchunks < MAX_CHUNK)
			memcpy(s->scores[s->nchunks++], score, 32);
	}
	return true;
}

static void put_raw(struct script *s, const uint8_t *p, size_t n, bool zero)
{
	if (s->len + n > SEG_SIZE)
		n = SEG_SIZE - s->len;
	if (zero)
		memset(s->log + s->len, 0, n);
	else
		memcpy(s->log + s->len, p, n);
	s->len += n;
}

/* The score a MAP or checkpoint entry refers to by ref. */
static void score_ref(const struct script *s, uint64_t ref, uint8_t out[32])
{
	ref %= s->nchunks + 2;
	if (ref < s->nchunks)
		memcpy(out, s->scores[ref], 32);
	else if (ref == s->nchunks)
		memset(out, 0, 32); /* a hole */
	else
		blocker_sha256(&ref, sizeof(ref), out); /* no such chunk */
}

static void model_grow(struct mobj *o, uint64_t n)
{
	if (n <= o->nchunks)
		return;
	o->scores = realloc(o->scores, n * BLOCKER_SCORE_SIZE);
	if (!o->scores)
		abort();
	memset(o->scores[o->nchunks], 0, (n - o->nchunks) * BLOCKER_SCORE_SIZE);
	o->nchunks = n;
}

static void model_map(struct script *s, unsigned k, uint64_t size,
		      const struct bmap_update *u, uint32_t n)
{
	struct mobj *o = &s->objs[k];

	for (uint32_t i = 0; i < n; i++)
		if (u[i].index * CHUNK >= size) {
			s->bad = true; /* the store refuses such a record */
			return;
		}
	if (!o->exists) {
		o->exists = true;
		o->size = 0;
		o->nchunks = 0;
	}
	model_grow(o, (size + CHUNK - 1) / CHUNK);
	for (uint32_t i = 0; i < n; i++)
		memcpy(o->scores[u[i].index], u[i].score, BLOCKER_SCORE_SIZE);
	if (size > o->size)
		o->size = size;
}

static void model_names(struct script *s, unsigned a, unsigned b, int count)
{
	struct mobj *src = &s->objs[a], *dst = &s->objs[b];

	if (count == 1) {
		src->exists = false;
		return;
	}
	if (!src->exists) {
		s->bad = true; /* a copy from nothing: refused */
		return;
	}
	if (a == b)
		return;
	dst->exists = true;
	dst->size = src->size;
	dst->nchunks = 0;
	model_grow(dst, src->nchunks);
	if (src->nchunks)
		memcpy(dst->scores, src->scores,
		       src->nchunks * BLOCKER_SCORE_SIZE);
}

static void put_map(struct script *s, struct fuzz_reader *r)
{
	struct bmap_update u[16];
	char name[3];
	uint64_t size;
	uint32_t n;
	uint8_t *p;
	size_t len;

	uint64_t k = fuzz_take(r, 1) % NNAMES;

	name_of(name, k);
	size = fuzz_take(r, 3); /* up to 16 MiB: larger ones cost time only */
	n = (uint32_t)(fuzz_take(r, 1) % 17);
	for (uint32_t i = 0; i < n; i++) {
		u[i].index = fuzz_take(r, 1);
		score_ref(s, fuzz_take(r, 1), u[i].score);
	}
	len = bmap_payload_size(2, n);
	p = malloc(len);
	if (!p)
		abort();
	bmap_encode(p, name, 2, size, u, n);
	if (put_record(s, BREC_MAP, p, (uint32_t)len)) {
		for (uint32_t i = 0; i < n; i++) {
			bool known = blocker_score_is_zero(u[i].score);

			for (unsigned j = 0; j < s->nchunks && !known; j++)
				known = !memcmp(s->scores[j], u[i].score, 32);
			if (!known)
				s->dangling = true;
		}
		model_map(s, (unsigned)k, size, u, n);
	}
	free(p);
}

static void put_names(struct script *s, struct fuzz_reader *r, int count)
{
	char a[3], b[3];
	uint8_t p[16];
	unsigned ka = (unsigned)(fuzz_take(r, 1) % NNAMES);
	unsigned kb = count == 2 ? (unsigned)(fuzz_take(r, 1) % NNAMES) : 0;

	name_of(a, ka);
	name_of(b, kb);
	bnames_encode(p, a, 2, b, count == 2 ? 2 : 0);
	if (put_record(s, count == 2 ? BREC_COPY : BREC_DELETE, p,
		       (uint32_t)bnames_payload_size(2, count == 2 ? 2 : 0)))
		model_names(s, ka, kb, count);
}

static void write_file(const char *name, const uint8_t *p, size_t len)
{
	char path[300];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, p, len) != (ssize_t)len)
		abort();
	close(fd);
}

/* A checkpoint file (docs/on-disk-format.md "Checkpoint header") over
 * entries the input describes: maps (name, size, chunk entries) or index
 * (score prefix, position). */
static void put_ckpt(struct script *s, struct fuzz_reader *r)
{
	bool maps = fuzz_take(r, 1) & 1;
	unsigned count = (unsigned)(fuzz_take(r, 1) % 9);
	uint8_t *buf = calloc(1, CKPT_HDR + 9 * (2 + 2 + 16 + 8 * 40));
	size_t off = CKPT_HDR;
	uint64_t pos = s->len;

	if (!buf)
		abort();
	for (unsigned k = 0; k < count; k++) {
		uint8_t score[32];

		if (maps) {
			char name[3];
			unsigned n = (unsigned)(fuzz_take(r, 1) % 9);

			name_of(name, fuzz_take(r, 1));
			put_le16(buf + off, 2);
			memcpy(buf + off + 2, name, 2);
			put_le64(buf + off + 4, fuzz_take(r, 3));
			put_le64(buf + off + 12, n);
			off += 20;
			for (unsigned i = 0; i < n; i++, off += 40) {
				put_le64(buf + off, fuzz_take(r, 1));
				score_ref(s, fuzz_take(r, 1), score);
				memcpy(buf + off + 8, score, 32);
			}
		} else {
			score_ref(s, fuzz_take(r, 1), score);
			put_le64(buf + off, get_be64(score));
			put_le64(buf + off + 8, fuzz_take(r, 2) * 16);
			off += 16;
		}
	}
	if (fuzz_take(r, 1) & 1) /* a position other than the log's end */
		pos = fuzz_take(r, 3) * 16;
	memcpy(buf, maps ? "BLKMAPS1" : "BLKIDX01", 8);
	put_le32(buf + 8, 1);
	put_le64(buf + 16, pos);
	put_le64(buf + 24, count);
	put_le64(buf + 32, off - CKPT_HDR);
	blocker_sha256(buf + CKPT_HDR, off - CKPT_HDR, buf + 40);
	write_file(maps ? BLOCKER_MAPS_FILE : BLOCKER_INDEX_FILE, buf, off);
	free(buf);
}

static void build(struct script *s, struct fuzz_reader *r)
{
	while (r->left) {
		uint64_t op = fuzz_take(r, 1) % 10;
		uint8_t tmp[CHUNK];
		size_t n;

		if (op > 3)
			s->pure = false; /* no model for these */
		switch (op) {
		case 0:
			n = fuzz_take(r, 2) % (CHUNK + 1);
			memset(tmp, 0, sizeof(tmp));
			for (size_t i = 0; i < n; i++)
				tmp[i] = (uint8_t)fuzz_take(r, 1);
			put_record(s, BREC_CHUNK, tmp, CHUNK);
			break;
		case 1:
			put_map(s, r);
			break;
		case 2:
		case 3:
			put_names(s, r, (int)op - 1);
			break;
		case 4: {
			unsigned type = (unsigned)fuzz_take(r, 1);
			n = 1 + fuzz_take(r, 2) % CHUNK;
			for (size_t i = 0; i < n; i++)
				tmp[i] = (uint8_t)fuzz_take(r, 1);
			put_record(s, type, tmp, (uint32_t)n);
			break;
		}
		case 5:
			n = fuzz_take(r, 2) % 513;
			for (size_t i = 0; i < n; i++)
				tmp[i] = (uint8_t)fuzz_take(r, 1);
			put_raw(s, tmp, n, false);
			break;
		case 6:
			put_raw(s, NULL, fuzz_take(r, 2), true);
			break;
		case 7:
			if (s->nfix < MAX_FIX) {
				s->fix[s->nfix].file = (uint8_t)fuzz_take(r, 1);
				s->fix[s->nfix].off = (uint32_t)fuzz_take(r, 4);
				s->fix[s->nfix++].xor
				    = (uint8_t)(fuzz_take(r, 1) | 1);
			} else {
				fuzz_take(r, 6);
			}
			break;
		case 8:
			put_ckpt(s, r);
			break;
		default:
			n = fuzz_take(r, 2);
			s->len -= n < s->len ? n : s->len;
			break;
		}
	}
}

/* Flip bits of one file of the store (an offset past its end wraps). */
static void corrupt(const char *file, uint32_t off, uint8_t xor)
{
	char path[300];
	struct stat sb;
	uint8_t b;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return;
	if (!fstat(fd, &sb) && sb.st_size > 0) {
		off_t at = (off_t)(off % (uint64_t)sb.st_size);
		if (pread(fd, &b, 1, at) == 1) {
			b ^= xor;
			if (pwrite(fd, &b, 1, at) != 1)
				abort();
		}
	}
	close(fd);
}

static bool allowed(const struct script *s, const uint8_t *chunk)
{
	uint8_t score[32];

	if (blocker_mem_is_zero(chunk, CHUNK))
		return true;
	blocker_sha256(chunk, CHUNK, score);
	for (unsigned i = 0; i < s->nallowed; i++)
		if (!memcmp(s->allowed[i], score, 32))
			return true;
	return false;
}

static void check_line(void *arg, const char *line)
{
	(void)arg;
	fprintf(stderr, "check: %s\n", line);
}

static void check_rc(int rc)
{
	if (rc > 0 || rc < -4095)
		abort();
}

/* The model's chunk idx of o: 0 zeros (a hole, or past the size), 1 the
 * stored chunk of score *sc, -1 a score no record stored (reads fail). */
static int model_chunk(const struct script *s, const struct mobj *o,
		       uint64_t idx, const uint8_t **sc)
{
	if (idx >= o->nchunks || idx * CHUNK >= o->size ||
	    blocker_score_is_zero(o->scores[idx]))
		return 0;
	*sc = o->scores[idx];
	for (unsigned i = 0; i < s->nallowed; i++)
		if (!memcmp(s->allowed[i], *sc, 32))
			return 1;
	return -1;
}

/* Read what recovery made of every name, chunk-aligned pieces only, and
 * with a pure input compare it with the model. */
static void read_all(const struct script *s, struct blocker_store *st,
		     uint8_t *buf)
{
	for (unsigned k = 0; k < NNAMES; k++) {
		const struct mobj *o = &s->objs[k];
		char name[3];
		uint64_t size, offs[256 * CHUNK / READ_MAX + 1];
		unsigned nr_offs;
		const uint8_t *sc;
		uint8_t sum[32];
		int rc;

		name_of(name, k);
		rc = blocker_info(st, name, 2, &size);
		check_rc(rc);
		if (s->pure &&
		    ((rc == 0) != o->exists || (!rc && size != o->size)))
			abort();
		if (rc)
			continue;
		/* every chunk a MAP item can name (index < 256: the first
		 * MiB), then the last one: reading only the first 64 KiB and
		 * the last chunk left indexes 16..255 unchecked */
		nr_offs = 0;
		for (uint64_t at = 0; at < size && at < 256 * CHUNK;
		     at += READ_MAX)
			offs[nr_offs++] = at;
		if (size > nr_offs * READ_MAX)
			offs[nr_offs++] = (size - 1) / CHUNK * CHUNK;
		if (!nr_offs)
			offs[nr_offs++] = 0;
		for (unsigned i = 0; i < nr_offs; i++) {
			size_t len = READ_MAX;
			bool missing = false;

			rc = blocker_read(st, name, 2, offs[i], len, buf);
			check_rc(rc);
			for (size_t c = 0; s->pure && c < len; c += CHUNK)
				if (model_chunk(s, o, (offs[i] + c) / CHUNK,
						&sc) < 0)
					missing = true;
			if (s->pure && missing != (rc != 0))
				abort();
			if (rc)
				continue;
			for (size_t c = 0; c < len; c += CHUNK) {
				if (!allowed(s, buf + c))
					abort();
				if (!s->pure)
					continue;
				if (!model_chunk(s, o, (offs[i] + c) / CHUNK,
						 &sc)) {
					if (!blocker_mem_is_zero(buf + c,
								 CHUNK))
						abort();
					continue;
				}
				blocker_sha256(buf + c, CHUNK, sum);
				if (memcmp(sum, sc, 32))
					abort();
			}
		}
	}
}

/* A store that opened must take a write and keep it across a reopen. */
static void write_and_reopen(struct blocker_store *st, bool override)
{
	static uint8_t pattern[CHUNK], back[CHUNK];
	struct blocker_opts o;
	int rc;

	for (unsigned i = 0; i < CHUNK; i++)
		pattern[i] = (uint8_t)(i * 7 + 1);
	rc = blocker_write(st, "new", 3, 0, CHUNK, pattern, 0);
	check_rc(rc);
	check_rc(blocker_close(st));
	if (rc)
		return; /* e.g. a store degraded by what recovery found */
	opts(&o, override);
	rc = blocker_open(dir, &o, &st);
	check_rc(rc);
	if (rc) {
		/* it opened a moment ago and was closed cleanly */
		fprintf(stderr, "fuzz_blocker_log: reopen: %s\n",
			strerror(-rc));
		abort();
	}
	if (blocker_read(st, "new", 3, 0, CHUNK, back) ||
	    memcmp(back, pattern, CHUNK))
		abort();
	check_rc(blocker_close(st));
}

static void fuzz_init(void)
{
	/* under the test program's scratch root (tests/test_tmp.h: removed
	 * at exit, and by the next test program when a crash left it);
	 * ctest and scripts/fuzz.sh set TMPDIR=/dev/shm, tmpfs, so that an
	 * input does not wait for the disk's flushes */
	ttmp_mkdtemp(dir, sizeof(dir), "fuzzstore");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const files[] = {
	    "log.000000",      BLOCKER_MAPS_FILE,  BLOCKER_INDEX_FILE,
	    BLOCKER_MARK_FILE, BLOCKER_SUPER_FILE, BLOCKER_GC_FILE};
	struct fuzz_reader r = {data, size};
	struct script s = {.pure = true};
	struct blocker_opts o;
	struct blocker_store *st;
	uint64_t problems;
	uint8_t flags;
	uint8_t *buf;
	int rc;

	if (!dir[0])
		fuzz_init();
	ttmp_rmtree(dir); /* the directory too: blocker_create makes it */
	opts(&o, false);
	if (blocker_create(dir, &o))
		abort();
	flags = (uint8_t)fuzz_take(&r, 1);
	s.log = malloc(SEG_SIZE);
	buf = malloc(READ_MAX);
	if (!s.log || !buf)
		abort();
	build(&s, &r);
	write_file("log.000000", s.log, s.len);

	if (flags & 1) {
		rc = blocker_open(dir, &o, &st);
		check_rc(rc);
		if (s.pure && (rc != 0) != s.bad)
			abort();
		if (!rc)
			check_rc(blocker_close(st));
	}
	for (unsigned i = 0; i < s.nfix; i++)
		corrupt(files[s.fix[i].file % 6], s.fix[i].off, s.fix[i].xor);

	rc = blocker_check(dir, &o, getenv("FUZZ_VERBOSE") ? check_line : NULL,
			   NULL, &problems);
	check_rc(rc);
	/* the offline check agrees with the model on a pure log: no problem
	 * in a log whose every record applies and names stored chunks only,
	 * some in one that open refuses or that names a chunk no record
	 * stored (before, its verdict was never looked at: a check that
	 * skipped the records it cannot apply passed) */
	if (s.pure && !rc && (problems != 0) != (s.bad || s.dangling)) {
		fprintf(stderr,
			"fuzz_blocker_log: check: %llu problem(s), "
			"model says %s\n",
			(unsigned long long)problems, s.bad ? "bad" : "good");
		abort();
	}
	opts(&o, flags & 2);
	rc = blocker_open(dir, &o, &st);
	check_rc(rc);
	/* a pure log opens exactly when every record applies */
	if (s.pure && (rc != 0) != s.bad)
		abort();
	if (!rc) {
		read_all(&s, st, buf);
		write_and_reopen(st, flags & 2);
	}
	free(buf);
	free(s.log);
	free(s.allowed);
	for (unsigned k = 0; k < NNAMES; k++)
		free(s.objs[k].scores);
	return 0;
}
