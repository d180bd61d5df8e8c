/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: vlmc's volume table (peers/vlmc/volume.c), the text that
 * holds every volume's name, size, object size, snapshot parent and
 * incarnation id, and the objects of removed volumes still to reclaim. vlmc
 * reads it back from the store at every start (two alternating table
 * objects, vlmc.c); what it decodes names the objects of every volume.
 *
 * Input: byte 0 picks the path. Bit 0 clear: the rest is table text for
 * vlmc_meta_decode_r. Bit 0 set: the rest is sealed into a table object
 * with a right header and SHA-256 ("vlmc-table 1 <gen> <len> <sha>\n",
 * gen from byte 1) for vlmc_table_decode_r, so the text checks are reached
 * through the path vlmc uses; bit 1 then flips one byte of the sealed
 * object (byte 2 picks which), which must make the decode fail or give
 * the same result.
 *
 * Invariants of a table that decodes: every volume has a valid name, a
 * size of at most VLMC_MAX_VOLUME_SIZE, a valid object size, a parent that
 * is "" or a valid name; no name twice among the volumes; every reclaim
 * record has next <= objects; encoding what was decoded and decoding it
 * again gives the same volumes and records (what vlmc writes back after
 * reading a table is what it read).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "volume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXV 16
#define MAXR 16

struct table {
	struct vlmc_volume_meta v[MAXV];
	struct vlmc_reclaim_meta r[MAXR];
	long n;
	size_t nr;
};

static void check_table(const struct table *t)
{
	for (long i = 0; i < t->n; i++) {
		const struct vlmc_volume_meta *v = &t->v[i];

		if (!vlmc_name_valid(v->name, strlen(v->name)) ||
		    v->size > VLMC_MAX_VOLUME_SIZE ||
		    !vlmc_obj_size_valid(v->obj_size) ||
		    (v->parent[0] &&
		     !vlmc_name_valid(v->parent, strlen(v->parent))))
			abort();
		for (long j = 0; j < i; j++)
			if (!strcmp(t->v[j].name, v->name))
				abort();
	}
	for (size_t i = 0; i < t->nr; i++)
		if (t->r[i].next > t->r[i].objects ||
		    !vlmc_name_valid(t->r[i].name, strlen(t->r[i].name)))
			abort();
}

static bool same(const struct table *a, const struct table *b)
{
	if (a->n != b->n || a->nr != b->nr)
		return false;
	for (long i = 0; i < a->n; i++)
		if (strcmp(a->v[i].name, b->v[i].name) ||
		    a->v[i].size != b->v[i].size ||
		    a->v[i].obj_size != b->v[i].obj_size ||
		    a->v[i].readonly != b->v[i].readonly ||
		    strcmp(a->v[i].parent, b->v[i].parent) ||
		    a->v[i].id != b->v[i].id)
			return false;
	for (size_t i = 0; i < a->nr; i++)
		if (strcmp(a->r[i].name, b->r[i].name) ||
		    a->r[i].id != b->r[i].id ||
		    a->r[i].objects != b->r[i].objects ||
		    a->r[i].next != b->r[i].next)
			return false;
	return true;
}

/* Encode t and decode it again: the same table. */
static void round_trip(const struct table *t, char *buf, size_t cap)
{
	static struct table again;
	long len =
	    vlmc_meta_encode_r(t->v, (size_t)t->n, t->r, t->nr, buf, cap);

	if (len < 0)
		abort(); /* it fits: it was decoded from at most cap bytes */
	memset(&again, 0, sizeof(again));
	again.n = vlmc_meta_decode_r(buf, (size_t)len, again.v, MAXV, again.r,
				     MAXR, &again.nr);
	if (again.n < 0 || !same(t, &again))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct table t, sealed;
	uint8_t mode = size ? data[0] : 0;
	size_t cap = 2 * size + 4096;
	char *buf = malloc(cap), *obj;
	uint64_t gen;
	long len;

	if (!buf)
		abort();
	memset(&t, 0, sizeof(t));
	if (!(mode & 1)) {
		const char *text = size ? (const char *)data + 1 : "";
		/* a heap copy of exactly the text: ASan sees a read past it */
		char *copy = malloc(size ? size - 1 : 1);

		if (!copy)
			abort();
		memcpy(copy, text, size ? size - 1 : 0);
		t.n = vlmc_meta_decode_r(copy, size ? size - 1 : 0, t.v, MAXV,
					 t.r, MAXR, &t.nr);
		free(copy);
		if (t.n >= 0) {
			check_table(&t);
			round_trip(&t, buf, cap);
		} else if (t.n != -EBADMSG && t.n != -ENOSPC) {
			abort();
		}
		free(buf);
		return 0;
	}

	/* seal the text (the header vlmc_table_encode writes) via a decoded
	 * table when it decodes, else as raw text under a hand-made header */
	size_t tlen = size > 3 ? size - 3 : 0;
	const char *text = (const char *)data + (size > 3 ? 3 : size);
	gen = size > 1 ? data[1] : 0;
	t.n = vlmc_meta_decode_r(text, tlen, t.v, MAXV, t.r, MAXR, &t.nr);
	if (t.n < 0) {
		free(buf);
		return 0;
	}
	check_table(&t);
	len = vlmc_table_encode_r(t.v, (size_t)t.n, t.r, t.nr, gen, buf, cap);
	if (gen == 0) {
		if (len != -EINVAL)
			abort();
		free(buf);
		return 0;
	}
	if (len < 0)
		abort();
	obj = malloc((size_t)len);
	if (!obj)
		abort();
	memcpy(obj, buf, (size_t)len);
	if ((mode & 2) && len > 0)
		obj[(size > 2 ? data[2] : 0) % (size_t)len] ^= 0x20;
	memset(&sealed, 0, sizeof(sealed));
	uint64_t got_gen = 0;
	sealed.n = vlmc_table_decode_r(obj, (size_t)len, &got_gen, sealed.v,
				       MAXV, sealed.r, MAXR, &sealed.nr);
	if (!(mode & 2) &&
	    (sealed.n < 0 || got_gen != gen || !same(&t, &sealed)))
		abort();
	/* a flipped byte: refused, or (a byte the seal does not need, if
	 * any) the same table; never a different one that verifies */
	if ((mode & 2) && sealed.n >= 0 &&
	    (!same(&t, &sealed) || got_gen != gen))
		abort();
	free(obj);
	free(buf);
	return 0;
}
