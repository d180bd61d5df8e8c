/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the blocker's garbage collection and its recovery across
 * many log segments (blocker_gc, the DIR/gc list, blocker_open of what a
 * crash leaves, blocker_check), through the store's own API.
 *
 * fuzz_blocker_log writes the log itself, into one segment; this target
 * never writes a record by hand: the store writes, overwrites, deletes,
 * copies, flushes, checkpoints, closes and reopens objects and runs GC
 * passes, the input choosing each step. With the smallest legal segment
 * (1 MiB) and 64 KiB chunks (15 chunk records a segment) a few dozen
 * writes span many segments, and a pass has victims to copy and remove.
 * A model keeps, for every object, the state it had at the last flush
 * (everything acknowledged before it must survive a crash) and every
 * state it took since (a crash may leave any of them, never anything
 * else).
 *
 * A crash: the input chooses a crash point, now or at a later event
 * (each GC hook point of a pass: victims marked, copies flushed, index
 * repointed, checkpoint written, DIR/gc written; and each victim file
 * unlinked); there the target copies every file of the store (the state
 * a killed process leaves; the page cache survives it) and stops the
 * sequence. Then it damages the copy the way a crash can
 * (docs/on-disk-format.md "Recovery", "gc"): the last segment cut at or
 * past the durable point (max of the checkpoints and the durable mark),
 * at a record boundary or inside a record; a half-written gc.tmp; the
 * files DIR/gc lists removed (the unlinks done). Or, instead, the way
 * only corruption can: a segment DIR/gc does not list removed, or DIR/gc
 * itself cut short.
 *
 * Invariants: nothing crashes or leaks; every call returns what the model
 * says (0, -ENOENT for a missing object); a store damaged by a crash
 * opens, and every object reads back as one of the model's states for
 * it (all of its bytes: a chunk that fails to read is lost data), the
 * offline check (blocker_check) then reporting no problem unless the cut
 * tore a record; a corrupted store is refused with -EUCLEAN and an error
 * message, and the offline check reports a problem; after a crash the
 * store takes a GC pass, a write, a close and a reopen with every object
 * unchanged. Without a crash the store closes and reopens holding
 * exactly the model.
 *
 * Input: items until the input ends, an op byte (op % 8) and operands
 * (missing bytes read as 0):
 *   0 WRITE  u8 name, u8 index, u8 count, u8 seed: chunks index ..
 *            index + count - 1 (% 8, 1..4) of object "g0".."g3", chunk j
 *            filled with seed + j (seed 0: zeros, a hole)
 *   1 DELETE u8 name          2 COPY  u8 src, u8 dst
 *   3 FLUSH                   4 REOPEN (close, open)
 *   5 GC     u8 min_dead_pct (% 101), u8 max_segments (% 4; 0: all)
 *   6 CHECKPOINT
 *   7 CRASH  u8 at (% 12: 0 now, else at the at-th event from now),
 *            u8 how, u16 cut (see damage())
 * With no CRASH item the crash is at the end, without damage.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_reader.h"
#include "store_int.h"
#include "test_blocker_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int unlink(const char *path);

#define CS   (64u << 10) /* chunk size */
#define SEG  (1u << 20)	 /* the smallest legal segment */
#define NOBJ 4
#define MAXC 8 /* chunks an object may have */
/* states kept per object since the last flush: more than a 4 KiB input
 * (libFuzzer's -max_len in scripts/fuzz.sh) can make; past it, the object
 * is not judged until the next flush */
#define MAXST	1024
#define MAXFILE 64

/* An object's state: absent, or its size and a seed per chunk (0: zeros). */
struct ostate {
	bool exists;
	uint64_t size;
	uint8_t seed[MAXC];
};

struct model {
	struct ostate cur[NOBJ];
	/* states since the last flush, the first one its durable state */
	struct ostate hist[NOBJ][MAXST];
	unsigned nhist[NOBJ];
	bool overflow[NOBJ];
};

/* a copy of the store's files */
struct snap {
	unsigned n;
	char name[MAXFILE][32];
	uint8_t *data[MAXFILE];
	size_t len[MAXFILE];
};

static char dir[256], img[256];
static uint8_t *wbuf, *rbuf;
/* crash points: events counted during the sequence, the copy taken at
 * crash_at (0: none armed) */
static unsigned events, crash_at;
static bool crashed, counting;
static struct snap crash_snap;
static char errmsg[512];

static void on_log(void *arg, enum blocker_log_level level, const char *msg)
{
	static int verbose = -1;

	(void)arg;
	if (verbose < 0)
		verbose = getenv("FUZZ_VERBOSE") != NULL;
	if (verbose)
		fprintf(stderr, "store: %s\n", msg);
	if (level == BLOCKER_LOG_ERR && !errmsg[0])
		snprintf(errmsg, sizeof(errmsg), "%s", msg);
}

static void opts(struct blocker_opts *o)
{
	tb_opts_manual(o, CS, SEG, NULL);
	o->reserve_bytes = BLOCKER_RESERVE_NONE;
	o->log = on_log;
}

static void fail(const char *why)
{
	fprintf(stderr, "fuzz_blocker_gc: %s\n", why);
	abort();
}

static void snap_free(struct snap *sn)
{
	for (unsigned i = 0; i < sn->n; i++)
		free(sn->data[i]);
	sn->n = 0;
}

static void snap_take(struct snap *sn, const char *from)
{
	DIR *d = opendir(from);
	struct dirent *e;

	snap_free(sn);
	if (!d)
		abort();
	while ((e = readdir(d))) {
		char path[320];
		struct stat st;
		int fd;

		if (e->d_name[0] == '.' || strlen(e->d_name) >= 32)
			continue;
		snprintf(path, sizeof(path), "%s/%s", from, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) ||
		    sn->n == MAXFILE)
			abort();
		strcpy(sn->name[sn->n], e->d_name);
		sn->len[sn->n] = (size_t)st.st_size;
		sn->data[sn->n] = malloc(st.st_size ? st.st_size : 1);
		if (!sn->data[sn->n] ||
		    pread(fd, sn->data[sn->n], st.st_size, 0) != st.st_size)
			abort();
		sn->n++;
		close(fd);
	}
	closedir(d);
}

static int snap_find(const struct snap *sn, const char *name)
{
	for (unsigned i = 0; i < sn->n; i++)
		if (!strcmp(sn->name[i], name))
			return (int)i;
	return -1;
}

static void snap_drop(struct snap *sn, unsigned i)
{
	free(sn->data[i]);
	sn->n--;
	if (i != sn->n) {
		strcpy(sn->name[i], sn->name[sn->n]);
		sn->data[i] = sn->data[sn->n];
		sn->len[i] = sn->len[sn->n];
	}
}

static void crash_event(const char *what)
{
	if (!counting || crashed)
		return;
	++events;
	if (getenv("FUZZ_VERBOSE"))
		fprintf(stderr, "event %u: %s%s\n", events, what,
			events == crash_at ? " (the crash)" : "");
	if (events == crash_at) {
		snap_take(&crash_snap, dir);
		crashed = true;
	}
}

/*
 * Every unlink of the process passes here: the unlinks of a GC pass's
 * victims are crash points (the store's own order decides what the copy
 * holds: a victim unlinked before DIR/gc lists it is seen missing).
 */
int unlink(const char *path)
{
	int r = unlinkat(AT_FDCWD, path, 0);
	const char *base = strrchr(path, '/');

	if (!r && base && !strncmp(base, "/log.", 5))
		crash_event(path);
	return r;
}

static void gc_hook(void *arg, int point)
{
	static const char *const names[] = {"",
					    "gc: victims marked",
					    "gc: copies flushed",
					    "gc: index repointed",
					    "gc: checkpoint written",
					    "gc: listed"};

	(void)arg;
	crash_event(point > 0 && point < 6 ? names[point] : "gc: hook");
}

static void name_of(char out[3], unsigned k)
{
	out[0] = 'g';
	out[1] = (char)('0' + k);
	out[2] = '\0';
}

static void fill(uint8_t *p, uint8_t seed)
{
	memset(p, seed, CS);
	if (seed) /* not a run of one byte only: the first bytes differ */
		memcpy(p, "fuzzgc", 6);
}

static void model_set(struct model *m, unsigned k, const struct ostate *st)
{
	m->cur[k] = *st;
	if (m->nhist[k] < MAXST)
		m->hist[k][m->nhist[k]++] = *st;
	else
		m->overflow[k] = true;
}

/* A flush: every object's current state is now its durable one. */
static void model_flushed(struct model *m)
{
	for (unsigned k = 0; k < NOBJ; k++) {
		m->hist[k][0] = m->cur[k];
		m->nhist[k] = 1;
		m->overflow[k] = false;
	}
}

static void check_rc(int rc, int want, const char *what)
{
	if (rc != want) {
		fprintf(stderr, "fuzz_blocker_gc: %s: %d (%s), model says %d\n",
			what, rc, strerror(-rc), want);
		abort();
	}
}

/* Read object k whole; does it match state *st exactly? A read that
 * fails matches nothing (a lost chunk). */
static bool obj_matches(struct blocker_store *s, unsigned k,
			const struct ostate *st)
{
	char name[3];
	uint64_t size;
	int rc;

	name_of(name, k);
	rc = blocker_info(s, name, 2, &size);
	if (rc == -ENOENT)
		return !st->exists;
	if (rc || !st->exists || size != st->size)
		return false;
	for (uint64_t c = 0; c * CS < size; c++) {
		if (blocker_read(s, name, 2, c * CS, CS, rbuf))
			return false;
		fill(wbuf, st->seed[c]);
		if (memcmp(rbuf, wbuf, CS))
			return false;
	}
	return true;
}

/* Every object is one of its states since the last flush; *seen gets
 * which (for the checks after a crash). */
static void check_model(struct blocker_store *s, const struct model *m,
			struct ostate seen[NOBJ], const char *when)
{
	for (unsigned k = 0; k < NOBJ; k++) {
		bool ok = false;

		if (m->overflow[k])
			continue; /* not judged (MAXST) */
		for (unsigned i = 0; i < m->nhist[k] && !ok; i++)
			if (obj_matches(s, k, &m->hist[k][i])) {
				ok = true;
				if (seen)
					seen[k] = m->hist[k][i];
			}
		if (!ok) {
			fprintf(stderr,
				"fuzz_blocker_gc: %s: object g%u matches none "
				"of its %u states since the last flush\n",
				when, k, m->nhist[k]);
			abort();
		}
	}
}

static void op_write(struct blocker_store *s, struct model *m,
		     struct fuzz_reader *r)
{
	unsigned k = (unsigned)(fuzz_take(r, 1) % NOBJ);
	unsigned idx = (unsigned)(fuzz_take(r, 1) % MAXC);
	unsigned cnt = (unsigned)(1 + fuzz_take(r, 1) % 4);
	uint8_t seed = (uint8_t)fuzz_take(r, 1);
	struct ostate st = m->cur[k];
	char name[3];
	uint8_t *buf;

	if (idx + cnt > MAXC)
		cnt = MAXC - idx;
	buf = malloc((size_t)cnt * CS);
	if (!buf)
		abort();
	if (!st.exists) {
		memset(&st, 0, sizeof(st));
		st.exists = true;
	}
	for (unsigned j = 0; j < cnt; j++) {
		uint8_t sj = seed ? (uint8_t)(1 + (seed + j - 1) % 255) : 0;

		fill(buf + (size_t)j * CS, sj);
		st.seed[idx + j] = sj;
	}
	if ((uint64_t)(idx + cnt) * CS > st.size)
		st.size = (uint64_t)(idx + cnt) * CS;
	name_of(name, k);
	check_rc(blocker_write(s, name, 2, (uint64_t)idx * CS, (size_t)cnt * CS,
			       buf, 0),
		 0, "write");
	free(buf);
	model_set(m, k, &st);
}

static void op_delete(struct blocker_store *s, struct model *m,
		      struct fuzz_reader *r)
{
	unsigned k = (unsigned)(fuzz_take(r, 1) % NOBJ);
	struct ostate gone = {0};
	char name[3];

	name_of(name, k);
	check_rc(blocker_delete(s, name, 2), m->cur[k].exists ? 0 : -ENOENT,
		 "delete");
	if (m->cur[k].exists)
		model_set(m, k, &gone);
}

static void op_copy(struct blocker_store *s, struct model *m,
		    struct fuzz_reader *r)
{
	unsigned a = (unsigned)(fuzz_take(r, 1) % NOBJ);
	unsigned b = (unsigned)(fuzz_take(r, 1) % NOBJ);
	char na[3], nb[3];

	if (a == b)
		return; /* -EINVAL, documented */
	name_of(na, a);
	name_of(nb, b);
	check_rc(blocker_copy(s, na, 2, nb, 2), m->cur[a].exists ? 0 : -ENOENT,
		 "copy");
	if (m->cur[a].exists)
		model_set(m, b, &m->cur[a]);
}

static struct blocker_store *open_store(const char *where)
{
	struct blocker_opts o;
	struct blocker_store *s;
	int rc;

	opts(&o);
	errmsg[0] = '\0';
	rc = blocker_open(where, &o, &s);
	if (rc) {
		fprintf(stderr, "fuzz_blocker_gc: open: %s: %s\n",
			strerror(-rc), errmsg);
		abort();
	}
	s->gc_hook = gc_hook;
	return s;
}

static void op_gc(struct blocker_store *s, struct fuzz_reader *r)
{
	struct blocker_gc_opts g;
	struct blocker_gc_report rep;
	int rc;

	blocker_gc_opts_init(&g);
	g.min_dead_pct = (unsigned)(fuzz_take(r, 1) % 101);
	g.max_segments = (uint32_t)(fuzz_take(r, 1) % 4);
	rc = blocker_gc(s, &g, &rep);
	check_rc(rc, 0, "gc");
}

/* The run of operations; the store it leaves open (or NULL). */
static struct blocker_store *run(struct model *m, struct fuzz_reader *r,
				 uint8_t *how, uint16_t *cut)
{
	struct blocker_store *s = open_store(dir);

	counting = true;
	while (r->left && !crashed) {
		switch (fuzz_take(r, 1) % 8) {
		case 0:
			op_write(s, m, r);
			break;
		case 1:
			op_delete(s, m, r);
			break;
		case 2:
			op_copy(s, m, r);
			break;
		case 3:
			check_rc(blocker_flush(s), 0, "flush");
			model_flushed(m);
			break;
		case 4:
			check_rc(blocker_close(s), 0, "close");
			model_flushed(m);
			s = open_store(dir);
			check_model(s, m, NULL, "reopen");
			break;
		case 5:
			op_gc(s, r);
			break;
		case 6:
			check_rc(blocker_checkpoint(s), 0, "checkpoint");
			model_flushed(m);
			break;
		default: {
			unsigned at = (unsigned)(fuzz_take(r, 1) % 12);

			*how = (uint8_t)fuzz_take(r, 1);
			*cut = (uint16_t)fuzz_take(r, 2);
			if (crash_at)
				break; /* the first CRASH item counts */
			crash_at = events + at;
			if (!at)
				crash_event("now");
			break;
		}
		}
	}
	counting = false;
	if (!crashed) {
		/* the crash at the end */
		snap_take(&crash_snap, dir);
		crashed = true;
	}
	return s;
}

static uint64_t le64_at(const struct snap *sn, const char *name, size_t off)
{
	int i = snap_find(sn, name);

	if (i < 0 || sn->len[i] < off + 8)
		return 0;
	return get_le64(sn->data[i] + off);
}

/* The durable point of a copy: no record below it may be cut. */
static uint64_t durable_point(const struct snap *sn)
{
	uint64_t d = le64_at(sn, BLOCKER_MAPS_FILE, 16);
	uint64_t i = le64_at(sn, BLOCKER_INDEX_FILE, 16);
	int k = snap_find(sn, BLOCKER_MARK_FILE);

	if (i > d)
		d = i;
	for (unsigned slot = 0; k >= 0 && slot < 2; slot++) {
		const uint8_t *p = sn->data[k] + 512 * slot;

		if (sn->len[k] < 512 * slot + 32 || get_le32(p) != 0x4b524d44 ||
		    get_le32(p + 28) != blocker_crc32c(0, p, 28))
			continue;
		if (get_le64(p + 16) > d)
			d = get_le64(p + 16);
	}
	return d;
}

/* Is segment seg listed in the copy's DIR/gc? */
static bool gc_lists(const struct snap *sn, unsigned seg)
{
	int k = snap_find(sn, BLOCKER_GC_FILE);

	if (k < 0 || sn->len[k] < 28)
		return false;
	uint32_t n = get_le32(sn->data[k] + 12);
	for (uint32_t i = 0; i < n && 24 + 8 * i + 8 <= sn->len[k]; i++) {
		uint32_t first = get_le32(sn->data[k] + 24 + 8 * i);
		uint32_t len = get_le32(sn->data[k] + 24 + 8 * i + 4);

		if (seg >= first && seg - first < len)
			return true;
	}
	return false;
}

enum verdict { DAMAGE_NONE, DAMAGE_TORN, DAMAGE_CORRUPT };

/*
 * Damage the copy, how:
 *   bit 0: cut the last segment at or past the durable point (cut picks
 *          where: the end of a record, or inside one);
 *   bits 1-2: 1 a half-written gc.tmp, 2 the files DIR/gc lists removed,
 *          3 corruption: bit 3 picks a segment DIR/gc does not list,
 *          other than the last, removed, or DIR/gc cut short.
 */
static enum verdict damage(struct snap *sn, uint8_t how, uint16_t cut)
{
	enum verdict v = DAMAGE_NONE;
	int last = -1;
	unsigned lastseg = 0;

	for (unsigned i = 0; i < sn->n; i++) {
		unsigned seg;

		if (sscanf(sn->name[i], "log.%u", &seg) == 1 &&
		    (last < 0 || seg > lastseg)) {
			last = (int)i;
			lastseg = seg;
		}
	}
	if ((how & 1) && last >= 0) {
		uint64_t base = (uint64_t)lastseg * SEG, d = durable_point(sn);
		size_t lo = d > base ? (size_t)(d - base) : 0;
		size_t len = sn->len[last], at, off = 0;

		if (lo < len) {
			at = lo + cut % (len - lo + 1);
			/* the record boundaries: a cut at one tears nothing */
			while (off + BREC_HDR_SIZE <= len && off < at) {
				uint32_t plen =
				    get_le32(sn->data[last] + off + 8);

				if (get_le32(sn->data[last] + off) !=
				    0x524b4c42)
					break;
				off += brec_size(plen);
			}
			if (off != at && at < len)
				v = DAMAGE_TORN;
			sn->len[last] = at;
		}
	}
	switch ((how >> 1) & 3) {
	case 1: {
		/* a DIR/gc write that a crash stopped before its rename */
		int k = snap_find(sn, BLOCKER_GC_FILE);

		if (sn->n < MAXFILE) {
			unsigned i = sn->n++;

			snprintf(sn->name[i], 32, "%s.tmp", BLOCKER_GC_FILE);
			sn->len[i] = k >= 0 ? cut % (sn->len[k] + 1) : 13;
			sn->data[i] = malloc(sn->len[i] + 1);
			if (!sn->data[i])
				abort();
			memset(sn->data[i], 0x5a, sn->len[i]);
			if (k >= 0)
				memcpy(sn->data[i], sn->data[k], sn->len[i]);
		}
		break;
	}
	case 2:
		for (unsigned i = 0; i < sn->n; i++) {
			unsigned seg;

			if (sscanf(sn->name[i], "log.%u", &seg) == 1 &&
			    gc_lists(sn, seg))
				snap_drop(sn, i--);
		}
		break;
	case 3:
		if (how & 8) {
			/* a segment lost with nothing saying so */
			for (unsigned i = 0; i < sn->n; i++) {
				unsigned seg;

				if (sscanf(sn->name[i], "log.%u", &seg) != 1 ||
				    seg == lastseg || gc_lists(sn, seg))
					continue;
				snap_drop(sn, i);
				return DAMAGE_CORRUPT;
			}
		} else {
			int k = snap_find(sn, BLOCKER_GC_FILE);

			if (k >= 0) {
				sn->len[k] = cut % sn->len[k];
				return DAMAGE_CORRUPT;
			}
		}
		break;
	}
	return v;
}

static void snap_write(const struct snap *sn, const char *to)
{
	ttmp_rmtree(to);
	if (mkdir(to, 0700))
		abort();
	for (unsigned i = 0; i < sn->n; i++) {
		char path[320];
		int fd;

		snprintf(path, sizeof(path), "%s/%s", to, sn->name[i]);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 ||
		    write(fd, sn->data[i], sn->len[i]) != (ssize_t)sn->len[i])
			abort();
		close(fd);
	}
}

static void check_line(void *arg, const char *line)
{
	(void)arg;
	fprintf(stderr, "check: %s\n", line);
}

/* After a crash: recover the copy and judge it. */
static void recover(struct model *m, uint8_t how, uint16_t cut)
{
	enum verdict v = damage(&crash_snap, how, cut);
	struct ostate seen[NOBJ];
	struct blocker_opts o;
	struct blocker_store *s;
	uint64_t problems;
	int rc;

	snap_write(&crash_snap, img);
	snap_free(&crash_snap);
	opts(&o);
	rc = blocker_check(img, &o, getenv("FUZZ_VERBOSE") ? check_line : NULL,
			   NULL, &problems);
	check_rc(rc, 0, "check");
	errmsg[0] = '\0';
	rc = blocker_open(img, &o, &s);
	if (v == DAMAGE_CORRUPT) {
		if (rc != -EUCLEAN || !errmsg[0])
			fail("a corrupted store opened, or was refused "
			     "without saying why");
		if (!problems)
			fail("open refuses the store, the check finds "
			     "no problem");
		return;
	}
	if (rc) {
		fprintf(stderr,
			"fuzz_blocker_gc: a store a crash left is refused: "
			"%s: %s\n",
			strerror(-rc), errmsg);
		abort();
	}
	if (v == DAMAGE_NONE && problems) {
		fprintf(stderr,
			"fuzz_blocker_gc: check: %llu problem(s) in a store "
			"that opens (FUZZ_VERBOSE=1 shows them)\n",
			(unsigned long long)problems);
		abort();
	}
	check_model(s, m, seen, "after the crash");
	/* what recovery made of it is now the model, exactly */
	for (unsigned k = 0; k < NOBJ; k++) {
		if (m->overflow[k])
			continue; /* still not judged */
		m->cur[k] = seen[k];
		m->hist[k][0] = seen[k];
		m->nhist[k] = 1;
	}
	{
		struct blocker_gc_opts g;
		struct blocker_gc_report rep;

		blocker_gc_opts_init(&g);
		check_rc(blocker_gc(s, &g, &rep), 0, "gc after the crash");
	}
	check_model(s, m, NULL, "gc after the crash");
	/* (wbuf: obj_matches fills it too) */
	uint8_t *pattern = malloc(CS);

	if (!pattern)
		abort();
	fill(pattern, 0xee);
	check_rc(blocker_write(s, "new", 3, 0, CS, pattern, 0), 0, "write");
	check_rc(blocker_close(s), 0, "close");
	s = open_store(img);
	check_model(s, m, NULL, "reopen after the crash");
	if (blocker_read(s, "new", 3, 0, CS, rbuf) || memcmp(rbuf, pattern, CS))
		fail("a write after the crash did not read back");
	free(pattern);
	check_rc(blocker_close(s), 0, "close");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_reader r = {data, size};
	struct model *m = calloc(1, sizeof(*m));
	struct blocker_opts o;
	struct blocker_store *s;
	uint8_t how = 0;
	uint16_t cut = 0;

	if (!m)
		abort();
	if (!dir[0]) {
		/* under the test scratch root (tests/test_tmp.h); ctest and
		 * scripts/fuzz.sh set TMPDIR=/dev/shm */
		ttmp_mkdtemp(dir, sizeof(dir), "fuzzgc");
		ttmp_mkdtemp(img, sizeof(img), "fuzzgcimg");
		wbuf = malloc(CS);
		rbuf = malloc(CS);
		if (!wbuf || !rbuf)
			abort();
	}
	ttmp_rmtree(dir); /* the directory too: blocker_create makes it */
	opts(&o);
	if (blocker_create(dir, &o))
		abort();
	for (unsigned k = 0; k < NOBJ; k++)
		m->nhist[k] = 1;
	events = crash_at = 0;
	crashed = false;
	s = run(m, &r, &how, &cut);
	/* the store the crash left behind: closed, and it holds exactly the
	 * model (a close is a flush) */
	check_rc(blocker_close(s), 0, "close");
	{
		struct model *done = malloc(sizeof(*done));

		if (!done)
			abort();
		*done = *m;
		model_flushed(done);
		s = open_store(dir);
		check_model(s, done, NULL, "clean reopen");
		check_rc(blocker_close(s), 0, "close");
		free(done);
	}
	recover(m, how, cut);
	free(m);
	return 0;
}
