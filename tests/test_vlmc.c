/* SPDX-License-Identifier: MIT */
/*
 * vlmc_core unit tests: volume names, object names, the split at object
 * boundaries, the metadata encoding (and every way it can be corrupt), and
 * the NBD wire protocol parser (handshake, options, request validation),
 * and the write-back loss state machine (wbloss.h) with a fake counter.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "nbd_proto.h"
#include "volume.h"
#include "wbloss.h"

START_TEST(test_names)
{
	char big[VLMC_NAME_MAX + 2];

	ck_assert(vlmc_name_valid("vol-1.a_b@c+d=e", 15));
	ck_assert(!vlmc_name_valid("", 0));
	ck_assert(!vlmc_name_valid(NULL, 3));
	ck_assert(!vlmc_name_valid("a:b", 3)); /* object separator */
	ck_assert(!vlmc_name_valid("a/b", 3));
	ck_assert(!vlmc_name_valid("a b", 3));
	ck_assert(!vlmc_name_valid("a\0b", 3));
	memset(big, 'x', sizeof(big));
	ck_assert(vlmc_name_valid(big, VLMC_NAME_MAX));
	ck_assert(!vlmc_name_valid(big, VLMC_NAME_MAX + 1));
}
END_TEST

START_TEST(test_object_name)
{
	char buf[VLMC_OBJNAME_MAX + 1], big[VLMC_NAME_MAX + 1];

	/* legacy volumes (id 0): the names they always had */
	ck_assert_uint_eq(vlmc_object_name(buf, "v", 0, 0), 18);
	ck_assert_str_eq(buf, "v:0000000000000000");
	vlmc_object_name(buf, "v", 0, 0x1234abcd);
	ck_assert_str_eq(buf, "v:000000001234abcd");
	/* an incarnation id: a second ':' no legacy name has */
	ck_assert_uint_eq(vlmc_object_name(buf, "v", 0xfeed, 0x12), 35);
	ck_assert_str_eq(buf, "v:000000000000feed:0000000000000012");
	memset(big, 'y', VLMC_NAME_MAX);
	big[VLMC_NAME_MAX] = 0;
	ck_assert_uint_eq(vlmc_object_name(buf, big, UINT64_MAX, UINT64_MAX),
			  VLMC_OBJNAME_MAX);
	/* within the blocker's 255-byte name limit */
	ck_assert_uint_le(VLMC_OBJNAME_MAX, 255);
}
END_TEST

START_TEST(test_obj_size)
{
	ck_assert(vlmc_obj_size_valid(4096));
	ck_assert(vlmc_obj_size_valid(4u << 20));
	ck_assert(vlmc_obj_size_valid(64u << 20));
	ck_assert(!vlmc_obj_size_valid(0));
	ck_assert(!vlmc_obj_size_valid(2048));
	ck_assert(!vlmc_obj_size_valid(12288));
	ck_assert(!vlmc_obj_size_valid(128u << 20));
}
END_TEST

START_TEST(test_split)
{
	struct vlmc_extent e[8];
	const uint32_t os = 4096;

	ck_assert_uint_eq(vlmc_split_count(0, 0, os), 0);
	ck_assert_uint_eq(vlmc_split(0, 0, os, e, 8), 0);
	/* inside one object */
	ck_assert_uint_eq(vlmc_split(100, 200, os, e, 8), 1);
	ck_assert_uint_eq(e[0].obj_index, 0);
	ck_assert_uint_eq(e[0].obj_off, 100);
	ck_assert_uint_eq(e[0].len, 200);
	ck_assert_uint_eq(e[0].buf_off, 0);
	/* exactly one object */
	ck_assert_uint_eq(vlmc_split(4096, 4096, os, e, 8), 1);
	ck_assert_uint_eq(e[0].obj_index, 1);
	ck_assert_uint_eq(e[0].obj_off, 0);
	/* crossing two boundaries */
	ck_assert_uint_eq(vlmc_split(4000, 8200, os, e, 8), 3);
	ck_assert_uint_eq(e[0].obj_index, 0);
	ck_assert_uint_eq(e[0].obj_off, 4000);
	ck_assert_uint_eq(e[0].len, 96);
	ck_assert_uint_eq(e[1].obj_index, 1);
	ck_assert_uint_eq(e[1].obj_off, 0);
	ck_assert_uint_eq(e[1].len, 4096);
	ck_assert_uint_eq(e[1].buf_off, 96);
	ck_assert_uint_eq(e[2].obj_index, 2);
	ck_assert_uint_eq(e[2].len, 4008);
	ck_assert_uint_eq(e[2].len + e[1].len + e[0].len, 8200);
	ck_assert_uint_eq(e[2].buf_off, 96 + 4096);
	/* not enough room: nothing produced */
	ck_assert_uint_eq(vlmc_split(4000, 8200, os, e, 2), 0);
}
END_TEST

static void meta_fill(struct vlmc_volume_meta *m, const char *name,
		      uint64_t size, bool ro, const char *parent)
{
	memset(m, 0, sizeof(*m));
	strcpy(m->name, name);
	m->size = size;
	m->obj_size = 4u << 20;
	m->readonly = ro;
	strcpy(m->parent, parent);
}

START_TEST(test_meta_roundtrip)
{
	struct vlmc_volume_meta in[3], out[3];
	char buf[4096];
	long len;

	meta_fill(&in[0], "a", 1 << 20, false, "");
	meta_fill(&in[1], "snap", 1 << 20, true, "a");
	meta_fill(&in[2], "clone", 1 << 20, false, "snap");
	in[1].id = 0x0123456789abcdefULL;
	in[2].id = UINT64_MAX;
	len = vlmc_meta_encode(in, 3, buf, sizeof(buf));
	ck_assert_int_gt(len, 0);
	/* version 2; a legacy volume (id 0) keeps "-" */
	ck_assert_str_eq(buf, "vlmc-meta 2 3\n"
			      "a 1048576 4194304 rw - -\n"
			      "snap 1048576 4194304 ro a 0123456789abcdef\n"
			      "clone 1048576 4194304 rw snap ffffffffffffffff\n"
			      "end\n");
	ck_assert_int_eq(vlmc_meta_decode(buf, (size_t)len, out, 3), 3);
	ck_assert_mem_eq(in, out, sizeof(in));
	/* trailing garbage of an older, longer table is ignored */
	memset(buf + len, 'z', 100);
	ck_assert_int_eq(vlmc_meta_decode(buf, (size_t)len + 100, out, 3), 3);
	/* empty (never written / zeroes) */
	memset(buf, 0, 64);
	ck_assert_int_eq(vlmc_meta_decode(buf, 64, out, 3), 0);
	ck_assert_int_eq(vlmc_meta_decode(buf, 0, out, 3), 0);
	/* no room */
	ck_assert_int_eq(vlmc_meta_encode(in, 3, buf, 20), -ENOSPC);
	len = vlmc_meta_encode(in, 3, buf, sizeof(buf));
	ck_assert_int_eq(vlmc_meta_decode(buf, (size_t)len, out, 2), -ENOSPC);
}
END_TEST

/* A table written before incarnation ids (version 1) still decodes: its
 * volumes are legacy (id 0) and keep their object names. */
START_TEST(test_meta_v1)
{
	static const char v1[] = "vlmc-meta 1 2\n"
				 "old 65536 65536 rw -\n"
				 "old@s 65536 65536 ro old\n"
				 "end\n";
	struct vlmc_volume_meta out[2];
	char buf[4096];
	long len;

	ck_assert_int_eq(vlmc_meta_decode(v1, strlen(v1), out, 2), 2);
	ck_assert_str_eq(out[0].name, "old");
	ck_assert_uint_eq(out[0].size, 65536);
	ck_assert_uint_eq(out[0].id, 0);
	ck_assert_str_eq(out[1].parent, "old");
	ck_assert(out[1].readonly);
	ck_assert_uint_eq(out[1].id, 0);
	/* rewritten as version 2, still legacy */
	len = vlmc_meta_encode(out, 2, buf, sizeof(buf));
	ck_assert_int_gt(len, 0);
	ck_assert_str_eq(buf, "vlmc-meta 2 2\n"
			      "old 65536 65536 rw - -\n"
			      "old@s 65536 65536 ro old -\n"
			      "end\n");
}
END_TEST

START_TEST(test_meta_corrupt)
{
	static const char *bad[] = {
	    "garbage\n",
	    "vlmc-meta 3 0\nend\n",
	    "vlmc-meta 0 0\nend\n",
	    /* version 2: the id column */
	    "vlmc-meta 2 1\na 10 4194304 rw -\nend\n", /* missing */
	    "vlmc-meta 2 1\na 10 4194304 rw - 0000000000000000\nend\n",
	    "vlmc-meta 2 1\na 10 4194304 rw - 0\nend\n",
	    "vlmc-meta 2 1\na 10 4194304 rw - 000000000000000g\nend\n",
	    "vlmc-meta 2 1\na 10 4194304 rw - 000000000000000A\nend\n",
	    "vlmc-meta 2 1\na 10 4194304 rw - 00000000000000001\nend\n",
	    "vlmc-meta 2 1\na 10 4194304 rw - 000000000000001\nend\n",
	    "vlmc-meta 2 1\na 10 4194304 rw - -0000000000000001\nend\n",
	    "vlmc-meta 2 1\na 10 4194304 rw - 0000000000000001 x\nend\n",
	    "vlmc-meta 2 2\na 1 4096 rw - 0000000000000001\n" /* dup id */
	    "b 1 4096 rw - 0000000000000001\nend\n",
	    /* version 1 has no id column */
	    "vlmc-meta 1 1\na 10 4194304 rw - 0000000000000001\nend\n",
	    "vlmc-meta 1 1\nend\n",				  /* count */
	    "vlmc-meta 1 0\n",					  /* trailer */
	    "vlmc-meta 1 1\na 10 4194304 rw -\n",		  /* trailer */
	    "vlmc-meta 1 1\na:b 10 4194304 rw -\nend\n",	  /* name */
	    "vlmc-meta 1 1\na x 4194304 rw -\nend\n",		  /* size */
	    "vlmc-meta 1 1\na 10 1000 rw -\nend\n",		  /* obj size */
	    "vlmc-meta 1 1\na 10 4194304 rx -\nend\n",		  /* flag */
	    "vlmc-meta 1 1\na 10 4194304 rw\nend\n",		  /* fields */
	    "vlmc-meta 1 1\na 10 4194304 rw - x\nend\n",	  /* fields */
	    "vlmc-meta 1 1\na 10 4194304 rw b/c\nend\n",	  /* parent */
	    "vlmc-meta 1 2\na 1 4096 rw -\na 1 4096 rw -\nend\n", /* dup */
	    "vlmc-meta 1 1\na 18446744073709551616 4096 rw -\nend\n",
	    "vlmc-meta 1 1\na -1 4096 rw -\nend\n",
	};
	static const char two_legacy[] = "vlmc-meta 2 2\na 1 4096 rw - -\n"
					 "b 1 4096 rw - -\nend\n";
	struct vlmc_volume_meta out[4];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(vlmc_meta_decode(bad[i], strlen(bad[i]), out,
					       4) == -EBADMSG,
			      "accepted: %s", bad[i]);
	/* two legacy volumes (both id 0) are not duplicates */
	ck_assert_int_eq(
	    vlmc_meta_decode(two_legacy, strlen(two_legacy), out, 4), 2);
}
END_TEST

/* Version 3: reclaim records (removed volumes whose objects are still
 * being deleted) after the volumes. Round trip; written as version 2
 * when there are none; a record's name may be a live volume's (created
 * again) under another id; bad records, id clashes and counts refused;
 * the plain decoder refuses a table with records (-ENOSPC, no room). */
START_TEST(test_meta_v3)
{
	struct vlmc_volume_meta in[2], out[2];
	struct vlmc_reclaim_meta rin[2], rout[3];
	static char buf[4096];
	uint64_t gen = 0;
	size_t nr = 99;
	long len;

	meta_fill(&in[0], "a", 1 << 20, false, "");
	meta_fill(&in[1], "gone", 1 << 20, false, "");
	in[0].id = 0x11;
	in[1].id = 0x22; /* a volume created again under a removed name */
	memset(rin, 0, sizeof(rin));
	strcpy(rin[0].name, "gone");
	rin[0].id = 0x0123456789abcdefULL;
	rin[0].objects = 268435456; /* 1P in 4M objects */
	rin[0].next = 4096;
	strcpy(rin[1].name, "old");
	rin[1].id = 0; /* legacy names */
	rin[1].objects = 3;
	rin[1].next = 3;
	len = vlmc_meta_encode_r(in, 2, rin, 2, buf, sizeof(buf));
	ck_assert_int_gt(len, 0);
	ck_assert_str_eq(buf, "vlmc-meta 3 2 2\n"
			      "a 1048576 4194304 rw - 0000000000000011\n"
			      "gone 1048576 4194304 rw - 0000000000000022\n"
			      "reclaim gone 0123456789abcdef 268435456 4096\n"
			      "reclaim old - 3 3\n"
			      "end\n");
	ck_assert_int_eq(
	    vlmc_meta_decode_r(buf, (size_t)len, out, 2, rout, 3, &nr), 2);
	ck_assert_uint_eq(nr, 2);
	ck_assert_mem_eq(in, out, sizeof(in));
	ck_assert_mem_eq(rin, rout, sizeof(rin));
	/* no room for the records; the plain decoder has none */
	ck_assert_int_eq(
	    vlmc_meta_decode_r(buf, (size_t)len, out, 2, rout, 1, &nr),
	    -ENOSPC);
	ck_assert_int_eq(vlmc_meta_decode(buf, (size_t)len, out, 2), -ENOSPC);
	/* no records: version 2, as an older vlmc reads it */
	len = vlmc_meta_encode_r(in, 2, rin, 0, buf, sizeof(buf));
	ck_assert_int_eq(strncmp(buf, "vlmc-meta 2 2\n", 14), 0);
	ck_assert_int_eq(
	    vlmc_meta_decode_r(buf, (size_t)len, out, 2, rout, 3, &nr), 2);
	ck_assert_uint_eq(nr, 0);
	/* records only */
	len = vlmc_meta_encode_r(in, 0, rin, 1, buf, sizeof(buf));
	ck_assert_int_eq(
	    vlmc_meta_decode_r(buf, (size_t)len, out, 2, rout, 3, &nr), 0);
	ck_assert_uint_eq(nr, 1);
	ck_assert_str_eq(rout[0].name, "gone");
	/* sealed in a table object */
	len = vlmc_table_encode_r(in, 2, rin, 2, 7, buf, sizeof(buf));
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(
	    vlmc_table_decode_r(buf, (size_t)len, &gen, out, 2, rout, 3, &nr),
	    2);
	ck_assert_uint_eq(gen, 7);
	ck_assert_uint_eq(nr, 2);
	ck_assert_mem_eq(rin, rout, sizeof(rin));
	ck_assert_int_eq(vlmc_table_decode(buf, (size_t)len, &gen, out, 2),
			 -ENOSPC);
	/* no room in the buffer */
	ck_assert_int_eq(vlmc_meta_encode_r(in, 2, rin, 2, buf, 150), -ENOSPC);
}
END_TEST

START_TEST(test_meta_v3_corrupt)
{
	static const char *bad[] = {
	    "vlmc-meta 3 0 0\nend\n", /* no records: version 2 */
	    "vlmc-meta 3 0\nend\n",
	    "vlmc-meta 3 0 1\nend\n",			 /* count */
	    "vlmc-meta 3 0 1\nreclaim a - 1 0\n",	 /* trailer */
	    "vlmc-meta 3 0 1 2\nreclaim a - 1 0\nend\n", /* header */
	    "vlmc-meta 3 0 1\nreclaim a - 1 2\nend\n",	 /* next > objects */
	    "vlmc-meta 3 0 1\nreclaim a - 1\nend\n",	 /* fields */
	    "vlmc-meta 3 0 1\nreclaim a - 1 0 0\nend\n", /* fields */
	    "vlmc-meta 3 0 1\nreclaimx a - 1 0\nend\n",	 /* kind */
	    "vlmc-meta 3 0 1\nreclaim a:b - 1 0\nend\n", /* name */
	    "vlmc-meta 3 0 1\nreclaim a 0 1 0\nend\n",	 /* id */
	    "vlmc-meta 3 0 1\nreclaim a - x 0\nend\n",	 /* objects */
	    "vlmc-meta 3 0 1\nreclaim a - 274877906945 0\nend\n", /* > 2^38 */
	    /* one incarnation's objects with two owners */
	    "vlmc-meta 3 0 2\nreclaim a 0000000000000001 1 0\n"
	    "reclaim b 0000000000000001 1 0\nend\n",
	    "vlmc-meta 3 0 2\nreclaim a - 1 0\nreclaim a - 2 0\nend\n",
	    "vlmc-meta 3 1 1\na 1 4096 rw - 0000000000000001\n"
	    "reclaim b 0000000000000001 1 0\nend\n",
	    "vlmc-meta 3 1 1\na 1 4096 rw - -\nreclaim a - 1 0\nend\n",
	    /* records after the volumes only */
	    "vlmc-meta 3 1 1\nreclaim b - 1 0\na 1 4096 rw - -\nend\n",
	};
	/* the same name under two ids, legacy next to a live one: fine */
	static const char ok[] = "vlmc-meta 3 1 2\n"
				 "a 1 4096 rw - 0000000000000001\n"
				 "reclaim a 0000000000000002 1 0\n"
				 "reclaim a - 1 1\nend\n";
	struct vlmc_volume_meta out[4];
	struct vlmc_reclaim_meta rout[4];
	size_t nr = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(vlmc_meta_decode_r(bad[i], strlen(bad[i]), out, 4,
						 rout, 4, &nr) == -EBADMSG,
			      "accepted: %s", bad[i]);
	ck_assert_int_eq(
	    vlmc_meta_decode_r(ok, strlen(ok), out, 4, rout, 4, &nr), 1);
	ck_assert_uint_eq(nr, 2);
}
END_TEST

/* The sealed table object (R9-2): generation and SHA-256 round trip; a
 * torn object (the first part of one write, the rest of an older one), a
 * flipped byte anywhere, a changed generation or a cut-short object are
 * refused with EBADMSG. */
START_TEST(test_table_seal)
{
	struct vlmc_volume_meta in[3], out[3];
	static char a[8192], b[8192], t[8192];
	long la, lb;
	uint64_t gen = 0;
	size_t half;

	meta_fill(&in[0], "a", 1 << 20, false, "");
	meta_fill(&in[1], "snap", 1 << 20, true, "a");
	in[1].id = 0x42;
	la = vlmc_table_encode(in, 2, 5, a, sizeof(a));
	ck_assert_int_gt(la, 0);
	ck_assert_int_eq(strncmp(a, "vlmc-table 1 5 ", 15), 0);
	ck_assert_int_eq(vlmc_table_decode(a, (size_t)la, &gen, out, 3), 2);
	ck_assert_uint_eq(gen, 5);
	ck_assert_mem_eq(in, out, 2 * sizeof(in[0]));
	/* the text inside is the plain table */
	ck_assert_ptr_nonnull(strstr(a, "\nvlmc-meta 2 2\na 1048576"));
	/* bytes after it (an older, longer object) are ignored */
	meta_fill(&in[2], "clone-with-a-longer-name", 1 << 20, false, "snap");
	in[2].id = 0x43;
	lb = vlmc_table_encode(in, 3, 6, b, sizeof(b));
	ck_assert_int_gt(lb, la);
	memcpy(t, b, (size_t)lb);
	memcpy(t, a, (size_t)la);
	ck_assert_int_eq(vlmc_table_decode(t, (size_t)lb, &gen, out, 3), 2);
	ck_assert_uint_eq(gen, 5);
	/* torn: the first half of gen 6, the rest of gen 5 (and the other
	 * way round) */
	half = (size_t)la / 2;
	memcpy(t, a, (size_t)la);
	memcpy(t, b, half);
	ck_assert_int_eq(vlmc_table_decode(t, (size_t)la, &gen, out, 3),
			 -EBADMSG);
	memcpy(t, b, (size_t)lb);
	memcpy(t, a, half);
	ck_assert_int_eq(vlmc_table_decode(t, (size_t)lb, &gen, out, 3),
			 -EBADMSG);
	/* any byte flipped: header, hash or text */
	for (long i = 0; i < la; i += 7) {
		memcpy(t, a, (size_t)la);
		t[i] ^= 0x01;
		ck_assert_msg(vlmc_table_decode(t, (size_t)la, &gen, out, 3) ==
				  -EBADMSG,
			      "flipped byte %ld accepted", i);
	}
	/* the generation changed (same digit count) */
	memcpy(t, a, (size_t)la);
	t[13] = '7';
	ck_assert_int_eq(vlmc_table_decode(t, (size_t)la, &gen, out, 3),
			 -EBADMSG);
	/* cut short, empty, zeroes, garbage */
	ck_assert_int_eq(vlmc_table_decode(a, (size_t)la - 1, &gen, out, 3),
			 -EBADMSG);
	ck_assert_int_eq(vlmc_table_decode(a, 0, &gen, out, 3), -EBADMSG);
	memset(t, 0, sizeof(t));
	ck_assert_int_eq(vlmc_table_decode(t, sizeof(t), &gen, out, 3),
			 -EBADMSG);
	memset(t, 'x', sizeof(t));
	ck_assert_int_eq(vlmc_table_decode(t, sizeof(t), &gen, out, 3),
			 -EBADMSG);
	/* a plain (legacy) table is not a table object */
	ck_assert_int_eq(
	    vlmc_table_decode("vlmc-meta 1 0\nend\n", 18, &gen, out, 3),
	    -EBADMSG);
	/* generation 0 is never written nor read; no room; too many */
	ck_assert_int_eq(vlmc_table_encode(in, 2, 0, t, sizeof(t)), -EINVAL);
	ck_assert_int_eq(vlmc_table_encode(in, 2, 1, t, 200), -ENOSPC);
	ck_assert_int_eq(vlmc_table_decode(b, (size_t)lb, &gen, out, 2),
			 -ENOSPC);
}
END_TEST

/* ---------------------------------------------------------------- NBD */

START_TEST(test_nbd_greeting)
{
	uint8_t g[NBD_HANDSHAKE_LEN], f[4];
	bool nz;

	nbd_encode_greeting(g);
	ck_assert_mem_eq(g, "NBDMAGICIHAVEOPT", 16);
	ck_assert_uint_eq(nbd_get16(g + 16), 3);
	nbd_put32(f, 3);
	ck_assert_int_eq(nbd_parse_client_flags(f, &nz), 0);
	ck_assert(nz);
	nbd_put32(f, 1);
	ck_assert_int_eq(nbd_parse_client_flags(f, &nz), 0);
	ck_assert(!nz);
	nbd_put32(f, 0); /* not fixed newstyle */
	ck_assert_int_eq(nbd_parse_client_flags(f, &nz), -EPROTO);
	nbd_put32(f, 1 | 4); /* unknown flag */
	ck_assert_int_eq(nbd_parse_client_flags(f, &nz), -EPROTO);
}
END_TEST

START_TEST(test_nbd_options)
{
	uint8_t h[NBD_OPT_HDR_LEN], go[64];
	const uint8_t *infos;
	const char *name;
	uint32_t opt, len, nl;
	uint16_t ni;

	nbd_put64(h, NBD_OPTS_MAGIC);
	nbd_put32(h + 8, NBD_OPT_GO);
	nbd_put32(h + 12, 10);
	ck_assert_int_eq(nbd_parse_opt_header(h, &opt, &len), 0);
	ck_assert_uint_eq(opt, NBD_OPT_GO);
	ck_assert_uint_eq(len, 10);
	h[0] ^= 1;
	ck_assert_int_eq(nbd_parse_opt_header(h, &opt, &len), -EPROTO);

	/* name "vol", two info requests */
	nbd_put32(go, 3);
	memcpy(go + 4, "vol", 3);
	nbd_put16(go + 7, 2);
	nbd_put16(go + 9, NBD_INFO_BLOCK_SIZE);
	nbd_put16(go + 11, NBD_INFO_NAME);
	ck_assert_int_eq(nbd_parse_go(go, 13, &name, &nl, &infos, &ni), 0);
	ck_assert_uint_eq(nl, 3);
	ck_assert_mem_eq(name, "vol", 3);
	ck_assert_uint_eq(ni, 2);
	ck_assert_uint_eq(nbd_get16(infos), NBD_INFO_BLOCK_SIZE);
	/* lengths that do not add up */
	ck_assert_int_eq(nbd_parse_go(go, 12, &name, &nl, &infos, &ni),
			 -EINVAL);
	ck_assert_int_eq(nbd_parse_go(go, 14, &name, &nl, &infos, &ni),
			 -EINVAL);
	ck_assert_int_eq(nbd_parse_go(go, 5, &name, &nl, &infos, &ni), -EINVAL);
	nbd_put32(go, 0xffffffffu);
	ck_assert_int_eq(nbd_parse_go(go, 13, &name, &nl, &infos, &ni),
			 -EINVAL);
	/* empty name, no infos */
	nbd_put32(go, 0);
	nbd_put16(go + 4, 0);
	ck_assert_int_eq(nbd_parse_go(go, 6, &name, &nl, &infos, &ni), 0);
	ck_assert_uint_eq(nl, 0);
}
END_TEST

static void req_fill(uint8_t *b, uint16_t flags, uint16_t type, uint64_t off,
		     uint32_t len)
{
	nbd_put32(b, NBD_REQUEST_MAGIC);
	nbd_put16(b + 4, flags);
	nbd_put16(b + 6, type);
	nbd_put64(b + 8, 0x1122334455667788ULL);
	nbd_put64(b + 16, off);
	nbd_put32(b + 24, len);
}

static enum nbd_verdict check(uint16_t flags, uint16_t type, uint64_t off,
			      uint32_t len, bool ro, uint32_t *err)
{
	uint8_t b[NBD_REQUEST_LEN];
	struct nbd_request r;

	req_fill(b, flags, type, off, len);
	ck_assert_int_eq(nbd_parse_request(b, &r), 0);
	ck_assert_uint_eq(r.cookie, 0x1122334455667788ULL);
	return nbd_check_request(&r, 1 << 20, ro, err);
}

START_TEST(test_nbd_requests)
{
	uint8_t b[NBD_REQUEST_LEN];
	struct nbd_request r;
	uint32_t e;

	req_fill(b, 0, NBD_CMD_READ, 0, 4096);
	b[0] ^= 0x80;
	ck_assert_int_eq(nbd_parse_request(b, &r), -EPROTO);

	ck_assert_int_eq(check(0, NBD_CMD_READ, 0, 4096, false, &e), NBD_DO);
	ck_assert_int_eq(
	    check(NBD_CMD_FLAG_FUA, NBD_CMD_WRITE, 4096, 4096, false, &e),
	    NBD_DO);
	ck_assert_int_eq(check(0, NBD_CMD_FLUSH, 0, 0, false, &e), NBD_DO);
	ck_assert_int_eq(check(0, NBD_CMD_DISC, 0, 0, false, &e), NBD_DO);
	/* DISC has no reply, whatever its flags or fields (review12 F4) */
	ck_assert_int_eq(check(NBD_CMD_FLAG_FUA, NBD_CMD_DISC, 0, 0, false, &e),
			 NBD_DO);
	ck_assert_int_eq(check(0x8000, NBD_CMD_DISC, 1, 4096, true, &e),
			 NBD_DO);
	ck_assert_int_eq(check(NBD_CMD_FLAG_NO_HOLE, NBD_CMD_WRITE_ZEROES, 0,
			       1 << 20, false, &e),
			 NBD_DO);
	ck_assert_int_eq(check(0, NBD_CMD_TRIM, 0, 1 << 20, false, &e), NBD_DO);
	/* FAST_ZERO: WRITE_ZEROES only (with or without the others) */
	ck_assert_int_eq(check(NBD_CMD_FLAG_FAST_ZERO, NBD_CMD_WRITE_ZEROES, 0,
			       1 << 20, false, &e),
			 NBD_DO);
	ck_assert_int_eq(check(NBD_CMD_FLAG_FAST_ZERO | NBD_CMD_FLAG_NO_HOLE |
				   NBD_CMD_FLAG_FUA,
			       NBD_CMD_WRITE_ZEROES, 0, 4096, false, &e),
			 NBD_DO);
	ck_assert_int_eq(
	    check(NBD_CMD_FLAG_FAST_ZERO, NBD_CMD_TRIM, 0, 4096, false, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(
	    check(NBD_CMD_FLAG_FAST_ZERO, NBD_CMD_WRITE, 0, 4096, false, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(check(NBD_CMD_FLAG_FAST_ZERO, NBD_CMD_WRITE_ZEROES, 0,
			       4096, true, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EPERM);
	/* the last byte exactly */
	ck_assert_int_eq(check(0, NBD_CMD_READ, (1 << 20) - 1, 1, false, &e),
			 NBD_DO);

	/* out of range */
	ck_assert_int_eq(check(0, NBD_CMD_READ, 1 << 20, 1, false, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(check(0, NBD_CMD_WRITE, (1 << 20) - 1, 2, false, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_ENOSPC);
	ck_assert_int_eq(check(0, NBD_CMD_READ, UINT64_MAX, 2, false, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(check(0, NBD_CMD_TRIM, 4096, 1 << 20, false, &e),
			 NBD_REFUSE);
	/* unknown command, unknown or misplaced flags */
	ck_assert_int_eq(check(0, 99, 0, 0, false, &e), NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(check(0, 8 /* NBD_CMD_RESIZE */, 0, 4096, false, &e),
			 NBD_REFUSE);
	ck_assert_int_eq(
	    check(NBD_CMD_FLAG_FUA, NBD_CMD_READ, 0, 4096, false, &e),
	    NBD_REFUSE);
	ck_assert_int_eq(check(0x8000, NBD_CMD_WRITE, 0, 4096, false, &e),
			 NBD_REFUSE);
	ck_assert_int_eq(check(0, NBD_CMD_FLUSH, 0, 1, false, &e), NBD_REFUSE);
	/* zero length */
	ck_assert_int_eq(check(0, NBD_CMD_READ, 0, 0, false, &e), NBD_REFUSE);
	/* oversized: a read is refused, a write's payload is not read */
	ck_assert_int_eq(
	    check(0, NBD_CMD_READ, 0, NBD_MAX_PAYLOAD + 1, false, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EOVERFLOW);
	ck_assert_int_eq(
	    check(0, NBD_CMD_WRITE, 0, NBD_MAX_PAYLOAD + 1, false, &e),
	    NBD_DISCONNECT);
	ck_assert_int_eq(
	    check(0x8000, NBD_CMD_WRITE, 0, NBD_MAX_PAYLOAD + 1, false, &e),
	    NBD_DISCONNECT);
	/* read-only export */
	ck_assert_int_eq(check(0, NBD_CMD_WRITE, 0, 4096, true, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EPERM);
	ck_assert_int_eq(check(0, NBD_CMD_TRIM, 0, 4096, true, &e), NBD_REFUSE);
	ck_assert_int_eq(check(0, NBD_CMD_READ, 0, 4096, true, &e), NBD_DO);
	ck_assert_int_eq(check(0, NBD_CMD_FLUSH, 0, 0, true, &e), NBD_DO);
}
END_TEST

START_TEST(test_nbd_replies)
{
	uint8_t b[NBD_EXPORT_REPLY_LEN];

	nbd_encode_simple_reply(b, NBD_EIO, 42);
	ck_assert_uint_eq(nbd_get32(b), NBD_SIMPLE_REPLY_MAGIC);
	ck_assert_uint_eq(nbd_get32(b + 4), 5);
	ck_assert_uint_eq(nbd_get64(b + 8), 42);
	nbd_encode_opt_reply(b, NBD_OPT_LIST, NBD_REP_ERR_UNSUP, 7);
	ck_assert_uint_eq(nbd_get64(b), NBD_REP_MAGIC);
	ck_assert_uint_eq(nbd_get32(b + 12), (1u << 31) + 1);
	ck_assert_uint_eq(nbd_encode_export_reply(b, 1 << 20, 0x3, true), 10);
	ck_assert_uint_eq(nbd_encode_export_reply(b, 1 << 20, 0x3, false), 134);
	ck_assert_uint_eq(nbd_get64(b), 1 << 20);
	nbd_encode_info_export(b, 77, 9);
	ck_assert_uint_eq(nbd_get16(b), NBD_INFO_EXPORT);
	ck_assert_uint_eq(nbd_get64(b + 2), 77);
	ck_assert_uint_eq(nbd_errno(0), 0);
	ck_assert_uint_eq(nbd_errno(EROFS), NBD_EPERM);
	ck_assert_uint_eq(nbd_errno(ECONNRESET), NBD_EIO);
	ck_assert_uint_eq(nbd_errno(ENOSPC), NBD_ENOSPC);
}
END_TEST

static enum nbd_verdict check_caps(uint16_t flags, uint16_t type, uint64_t off,
				   uint32_t len, unsigned caps, uint32_t *err)
{
	uint8_t b[NBD_REQUEST_LEN];
	struct nbd_request r;

	req_fill(b, flags, type, off, len);
	ck_assert_int_eq(nbd_parse_request(b, &r), 0);
	return nbd_check_request(&r, 1 << 20, caps, err);
}

START_TEST(test_nbd_cache_status_requests)
{
	const unsigned bs = NBD_CAP_BLOCK_STATUS;
	uint32_t e;

	/* CACHE: like a read, also on a read-only export, any u32 length */
	ck_assert_int_eq(check_caps(0, NBD_CMD_CACHE, 0, 1 << 20, 0, &e),
			 NBD_DO);
	ck_assert_int_eq(
	    check_caps(0, NBD_CMD_CACHE, 4096, 4096, NBD_CAP_READONLY, &e),
	    NBD_DO);
	ck_assert_int_eq(check_caps(0, NBD_CMD_CACHE, 0, 0, 0, &e), NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(check_caps(0, NBD_CMD_CACHE, 1 << 20, 1, 0, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(
	    check_caps(0, NBD_CMD_CACHE, UINT64_MAX - 1, 4096, 0, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(
	    check_caps(NBD_CMD_FLAG_FUA, NBD_CMD_CACHE, 0, 4096, 0, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);

	/* BLOCK_STATUS: only with a selected context */
	ck_assert_int_eq(check_caps(0, NBD_CMD_BLOCK_STATUS, 0, 4096, 0, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(
	    check_caps(0, NBD_CMD_BLOCK_STATUS, 0, 1 << 20, bs, &e), NBD_DO);
	ck_assert_int_eq(check_caps(NBD_CMD_FLAG_REQ_ONE, NBD_CMD_BLOCK_STATUS,
				    (1 << 20) - 1, 1, bs | NBD_CAP_READONLY,
				    &e),
			 NBD_DO);
	ck_assert_int_eq(check_caps(0, NBD_CMD_BLOCK_STATUS, 0, 0, bs, &e),
			 NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(
	    check_caps(0, NBD_CMD_BLOCK_STATUS, 4096, 1 << 20, bs, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(
	    check_caps(0, NBD_CMD_BLOCK_STATUS, UINT64_MAX, 2, bs, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	ck_assert_int_eq(
	    check_caps(NBD_CMD_FLAG_FUA, NBD_CMD_BLOCK_STATUS, 0, 4096, bs, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
	/* REQ_ONE belongs to BLOCK_STATUS only */
	ck_assert_int_eq(
	    check_caps(NBD_CMD_FLAG_REQ_ONE, NBD_CMD_READ, 0, 4096, bs, &e),
	    NBD_REFUSE);
	ck_assert_uint_eq(e, NBD_EINVAL);
}
END_TEST

/* a meta context payload: name, then the queries */
static uint32_t ctx_fill(uint8_t *b, const char *name, const char **q,
			 uint32_t nq)
{
	uint32_t pos = 0;

	nbd_put32(b, (uint32_t)strlen(name));
	memcpy(b + 4, name, strlen(name));
	pos = 4 + (uint32_t)strlen(name);
	nbd_put32(b + pos, nq);
	pos += 4;
	for (uint32_t i = 0; i < nq; i++) {
		nbd_put32(b + pos, (uint32_t)strlen(q[i]));
		memcpy(b + pos + 4, q[i], strlen(q[i]));
		pos += 4 + (uint32_t)strlen(q[i]);
	}
	return pos;
}

START_TEST(test_nbd_meta_context)
{
	const char *qs[] = {"base:allocation", "qemu:dirty-bitmap:x"};
	uint8_t b[256];
	const uint8_t *q;
	const char *name, *s;
	uint32_t nl, nq, sl, len;

	len = ctx_fill(b, "vol", qs, 2);
	ck_assert_int_eq(nbd_parse_meta_context(b, len, &name, &nl, &nq, &q),
			 0);
	ck_assert_uint_eq(nl, 3);
	ck_assert_mem_eq(name, "vol", 3);
	ck_assert_uint_eq(nq, 2);
	q = nbd_next_meta_query(q, &s, &sl);
	ck_assert_uint_eq(sl, strlen(qs[0]));
	ck_assert_mem_eq(s, qs[0], sl);
	q = nbd_next_meta_query(q, &s, &sl);
	ck_assert_mem_eq(s, qs[1], sl);
	ck_assert_ptr_eq(q, b + len);
	/* no queries */
	len = ctx_fill(b, "v", NULL, 0);
	ck_assert_int_eq(nbd_parse_meta_context(b, len, &name, &nl, &nq, &q),
			 0);
	ck_assert_uint_eq(nq, 0);

	/* lengths that do not add up: short, trailing byte, name or query
	 * running past the end, a count with missing queries */
	len = ctx_fill(b, "vol", qs, 2);
	for (uint32_t l = 0; l < len; l++)
		ck_assert_int_eq(
		    nbd_parse_meta_context(b, l, &name, &nl, &nq, &q), -EINVAL);
	ck_assert_int_eq(
	    nbd_parse_meta_context(b, len + 1, &name, &nl, &nq, &q), -EINVAL);
	nbd_put32(b, 0xfffffff0u);
	ck_assert_int_eq(nbd_parse_meta_context(b, len, &name, &nl, &nq, &q),
			 -EINVAL);
	len = ctx_fill(b, "vol", qs, 1);
	nbd_put32(b + 7, 0xffffffffu); /* count */
	ck_assert_int_eq(nbd_parse_meta_context(b, len, &name, &nl, &nq, &q),
			 -EINVAL);
	len = ctx_fill(b, "vol", qs, 1);
	nbd_put32(b + 11, 0xffffffffu); /* query length */
	ck_assert_int_eq(nbd_parse_meta_context(b, len, &name, &nl, &nq, &q),
			 -EINVAL);
	/* a query longer than NBD_OPT_MAX is refused even if present */
	{
		static uint8_t big[NBD_OPT_MAX + 32];
		uint32_t ql = NBD_OPT_MAX + 1;

		nbd_put32(big, 0);
		nbd_put32(big + 4, 1);
		nbd_put32(big + 8, ql);
		ck_assert_int_eq(
		    nbd_parse_meta_context(big, 12 + ql, &name, &nl, &nq, &q),
		    -EINVAL);
	}
	ck_assert_uint_eq(nbd_encode_meta_context(b, 7, "base:allocation"),
			  4 + 15);
	ck_assert_uint_eq(nbd_get32(b), 7);
	ck_assert_mem_eq(b + 4, "base:allocation", 15);
}
END_TEST

START_TEST(test_nbd_structured_reply)
{
	uint8_t b[NBD_STRUCTURED_REPLY_LEN];

	nbd_encode_structured_reply(b, NBD_REPLY_FLAG_DONE,
				    NBD_REPLY_TYPE_ERROR, 0x0102030405060708ULL,
				    6);
	ck_assert_uint_eq(nbd_get32(b), NBD_STRUCTURED_REPLY_MAGIC);
	ck_assert_uint_eq(nbd_get16(b + 4), 1);
	ck_assert_uint_eq(nbd_get16(b + 6), 32769);
	ck_assert_uint_eq(nbd_get64(b + 8), 0x0102030405060708ULL);
	ck_assert_uint_eq(nbd_get32(b + 16), 6);
}
END_TEST

/* ---- write-back loss (wbloss.h): the segment counter is a variable ---- */

static uint64_t fake_losses;

static uint64_t fake_read(void *arg)
{
	return __atomic_load_n((uint64_t *)arg, __ATOMIC_SEQ_CST);
}

static void wb_setup(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w,
		     uint64_t start)
{
	fake_losses = start;
	vlmc_wbloss_init(g, fake_read, &fake_losses);
	vlmc_wbloss_vol_init(w);
}

/* A write acknowledged, the cache dies (counter moves), FLUSH: lost, the
 * volume fenced for the old session, a new session works; a read on the
 * old session fails too. */
START_TEST(test_wbloss_flush_after_loss)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	uint64_t gen, L;

	wb_setup(&g, &w, 7);
	gen = vlmc_wbloss_gen(&w);
	L = vlmc_wbloss_read(&g);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, L),
			 VLMC_WBLOSS_OK);
	ck_assert(w.marked);
	fake_losses = 9; /* two caches died with unflushed data */
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 9),
			 VLMC_WBLOSS_LOST);
	ck_assert_uint_eq(vlmc_wbloss_vol_lost(&w), 2);
	ck_assert_uint_eq(vlmc_wbloss_seen(&g), 2);
	ck_assert(vlmc_wbloss_fenced(&w, gen));
	ck_assert_uint_eq(g.fences, 1);
	/* the old session: every command fails, reads too */
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_FENCED);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 9),
			 VLMC_WBLOSS_FENCED);
	ck_assert(!w.marked); /* a fenced session's write is not recorded */
	/* a new session starts clean */
	gen = vlmc_wbloss_gen(&w);
	ck_assert(!vlmc_wbloss_fenced(&w, gen));
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 9),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 9), VLMC_WBLOSS_OK);
	ck_assert(!w.marked);
	ck_assert_uint_eq(g.fences, 1);
	ck_assert_uint_eq(g.cmds_eio, 2);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* Write, FLUSH ok (mark cleared), the cache dies, FLUSH: ok, reads ok. */
START_TEST(test_wbloss_flushed_then_loss)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	uint64_t gen;

	wb_setup(&g, &w, 0);
	gen = vlmc_wbloss_gen(&w);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 0),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 0), VLMC_WBLOSS_OK);
	ck_assert(!w.marked);
	fake_losses = 1;
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 1), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_fenced(&w, gen));
	ck_assert_uint_eq(g.fences, 0);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* A read (any completion) on a marked volume after a loss fences at once,
 * before any FLUSH; a read on an unmarked volume does not look. */
START_TEST(test_wbloss_read_after_loss)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w, other;
	uint64_t gen, ogen;

	wb_setup(&g, &w, 3);
	vlmc_wbloss_vol_init(&other);
	gen = vlmc_wbloss_gen(&w);
	ogen = vlmc_wbloss_gen(&other);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 3),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_OK); /* no loss yet */
	fake_losses = 4;
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &other, ogen, false, 0),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_LOST);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_FENCED);
	ck_assert(!vlmc_wbloss_fenced(&other, ogen));
	vlmc_wbloss_vol_destroy(&other);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* A write whose own L is older than the counter at its completion (the
 * cache that acknowledged it may be the one that died) fences at once. */
START_TEST(test_wbloss_write_across_loss)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	uint64_t gen;

	wb_setup(&g, &w, 5);
	gen = vlmc_wbloss_gen(&w);
	fake_losses = 6;
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 5),
			 VLMC_WBLOSS_LOST);
	ck_assert(vlmc_wbloss_fenced(&w, gen));
	/* a write whose L was read after the loss is fine */
	gen = vlmc_wbloss_gen(&w);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 6),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* A write completing while the FLUSH is in flight is not covered by it:
 * the volume stays marked, and a loss after the FLUSH still fences. */
START_TEST(test_wbloss_racing_write)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	uint64_t gen;

	wb_setup(&g, &w, 0);
	gen = vlmc_wbloss_gen(&w);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 0),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	/* completes after the FLUSH was received */
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 0),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 0), VLMC_WBLOSS_OK);
	ck_assert(w.marked); /* the racing write is unflushed */
	fake_losses = 1;
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 1),
			 VLMC_WBLOSS_LOST);
	ck_assert(vlmc_wbloss_fenced(&w, gen));
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* A loss while the FLUSH is in flight: F differs from now; a volume marked
 * before fails, a volume whose only writes came after the loss (L == now)
 * stays marked (not covered), nothing cleared. */
START_TEST(test_wbloss_loss_during_flush)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol a, b;
	struct vlmc_wbloss_flush f;
	uint64_t ga, gb;

	wb_setup(&g, &a, 0);
	vlmc_wbloss_vol_init(&b);
	ga = vlmc_wbloss_gen(&a);
	gb = vlmc_wbloss_gen(&b);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &a, ga, true, 0),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	fake_losses = 1;
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &b, gb, true, 1),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &a, &f, 1),
			 VLMC_WBLOSS_LOST);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &b, &f, 1), VLMC_WBLOSS_OK);
	ck_assert(b.marked);
	ck_assert(!vlmc_wbloss_fenced(&b, gb));
	vlmc_wbloss_vol_destroy(&b);
	vlmc_wbloss_vol_destroy(&a);
}
END_TEST

/* The smallest L of the unflushed writes is kept. */
START_TEST(test_wbloss_min_mark)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	uint64_t gen;

	wb_setup(&g, &w, 10);
	gen = vlmc_wbloss_gen(&w);
	fake_losses = 10;
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 10),
			 VLMC_WBLOSS_OK);
	fake_losses = 11;
	/* a write submitted after the loss, completing after it: its own L
	 * is fine, but the older unflushed write is what counts */
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 11),
			 VLMC_WBLOSS_LOST);
	ck_assert_uint_eq(vlmc_wbloss_vol_lost(&w), 1);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* A session opened after a loss nobody looked at yet: the attach fences
 * the volume (old sessions fail), the new session is served. */
START_TEST(test_wbloss_attach_after_loss)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_sess old, s2, s3;

	wb_setup(&g, &w, 0);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &old), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, old.gen, true, 0),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &s2), VLMC_WBLOSS_OK);
	ck_assert_uint_eq(s2.gen, old.gen); /* no loss: the same generation */
	fake_losses = 1;
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &s3), VLMC_WBLOSS_LOST);
	ck_assert_uint_ne(s3.gen, old.gen);
	ck_assert_uint_eq(g.cmds_eio, 0); /* no command failed by it */
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &s3, true, 1),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &old, false, 0),
			 VLMC_WBLOSS_FENCED);
	vlmc_wbloss_detach(&w, &old);
	vlmc_wbloss_detach(&w, &s2);
	vlmc_wbloss_detach(&w, &s3);
	ck_assert_ptr_null(w.sessions);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* Review safety17 F2: with CAN_MULTI_CONN a FLUSH on one connection
 * covers the writes of all of them. Session A's acknowledged write is lost
 * (the cache died); B opens after the fence: B's FLUSH must fail while A
 * is open (A's write may be lost), and succeed once A has closed. A
 * reader (C, never wrote) and a session whose writes a FLUSH covered
 * before the loss (D) are not stale: they hold nothing back. */
START_TEST(test_wbloss_stale_session_blocks_flush)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	struct vlmc_wbloss_sess a, b, c, d;
	bool first;

	wb_setup(&g, &w, 0);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &a), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &c), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &d), VLMC_WBLOSS_OK);
	/* D writes and a FLUSH covers it: D's writes are durable */
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &d, true, 0),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 0), VLMC_WBLOSS_OK);
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 0);
	/* A writes (acknowledged, unflushed), C reads */
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, true, 0),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &c, false, 0),
			 VLMC_WBLOSS_OK);
	fake_losses = 1; /* the cache holding A's write dies */
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &b), VLMC_WBLOSS_LOST);
	ck_assert_uint_eq(w.stale, 1); /* A only */
	ck_assert(a.stale && !c.stale && !d.stale && !b.stale);
	/* B's FLUSH succeeds below but must not be reported done */
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 1), VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_fenced(&w, b.gen));
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 1);
	ck_assert(first); /* logged once... */
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 1);
	ck_assert(!first); /* ...not on every FLUSH */
	/* closing the reader and the covered writer changes nothing */
	vlmc_wbloss_detach(&w, &c);
	vlmc_wbloss_detach(&w, &d);
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 1);
	/* A closes: the client has dropped the connection that lost writes */
	vlmc_wbloss_detach(&w, &a);
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 0);
	ck_assert(!first);
	vlmc_wbloss_detach(&w, &a); /* twice: no-op */
	ck_assert_uint_eq(w.stale, 0);
	vlmc_wbloss_detach(&w, &b);
	ck_assert_ptr_null(w.sessions);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* Staleness is judged at the fence that ends a session's generation:
 * writes recorded in an earlier epoch that a later FLUSH covered do not
 * count, a second fence does not count a session twice, and a session
 * stale by the first fence stays stale (one count) until it closes; the
 * next stale episode logs again. */
START_TEST(test_wbloss_stale_epochs)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	struct vlmc_wbloss_sess a, b, e;
	bool first;

	wb_setup(&g, &w, 0);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &a), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, true, 0),
			 VLMC_WBLOSS_OK);
	/* a FLUSH begun before a second write does not cover it */
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, true, 0),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 0), VLMC_WBLOSS_OK);
	ck_assert(vlmc_wbloss_marked(&w));
	fake_losses = 1;
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, false, 0),
			 VLMC_WBLOSS_LOST); /* a read of A finds it */
	ck_assert(a.stale);
	ck_assert_uint_eq(w.stale, 1);
	/* B opens after, writes, a second loss fences again: B is stale
	 * too, A is not counted twice */
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &b), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &b, true, 1),
			 VLMC_WBLOSS_OK);
	fake_losses = 2;
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &e), VLMC_WBLOSS_LOST);
	ck_assert_uint_eq(w.stale, 2);
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 2);
	ck_assert(first);
	vlmc_wbloss_detach(&w, &a);
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 1);
	ck_assert(!first);
	vlmc_wbloss_detach(&w, &b);
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 0);
	/* E writes, a FLUSH covers it, then a loss: E is not stale */
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &e, true, 2),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 2), VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_marked(&w));
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &e, true, 2),
			 VLMC_WBLOSS_OK);
	fake_losses = 3;
	ck_assert_int_eq(vlmc_wbloss_check(&g, &w, 3), VLMC_WBLOSS_LOST);
	ck_assert(e.stale); /* its second write was uncovered */
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 1);
	ck_assert(first); /* a new episode is logged again */
	vlmc_wbloss_detach(&w, &e);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* review18 M2: a's write is covered by a FLUSH that succeeded with no loss;
 * a write of b completed while that FLUSH was in flight keeps the volume
 * marked (correctly: it is not covered). A later loss must make b stale,
 * not a, whose writes are durable (docs/vlmc.md: "a connection ... whose
 * writes a FLUSH covered before the loss, is not stale"). */
START_TEST(test_wbloss_stale_covered_writer)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	struct vlmc_wbloss_sess a, b, c;

	wb_setup(&g, &w, 0);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &a), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &b), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, true, 0),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f); /* covers a's write */
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &b, true, 0),
			 VLMC_WBLOSS_OK); /* completes during the FLUSH */
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 0), VLMC_WBLOSS_OK);
	fake_losses = 1;
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &c), VLMC_WBLOSS_LOST);
	ck_assert(b.stale);
	ck_assert_msg(!a.stale, "a's only write was covered by a successful "
				"FLUSH, yet a is stale");
	vlmc_wbloss_detach(&w, &a);
	vlmc_wbloss_detach(&w, &b);
	vlmc_wbloss_detach(&w, &c);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* review18 L: a's writes are all covered; its next write was submitted
 * before a loss and completes after it: that write finds the loss and
 * fails with EIO (never acknowledged). It alone must not make a stale. */
START_TEST(test_wbloss_stale_failed_write)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	struct vlmc_wbloss_sess a;

	wb_setup(&g, &w, 0);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &a), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, true, 0),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 0), VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_marked(&w));
	fake_losses = 1; /* another volume's data, say */
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, true, 0),
			 VLMC_WBLOSS_LOST); /* this write gets EIO */
	ck_assert_msg(!a.stale, "a has no acknowledged uncovered write, yet "
				"it is stale");
	vlmc_wbloss_detach(&w, &a);
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* review18 H1: a session writes (acknowledged, unflushed) and closes; the
 * cache dies; a session opened after it FLUSHes. With CAN_MULTI_CONN that
 * FLUSH covers the closed session's write, which may be lost: no session
 * is stale (the writer left before the fence), so the fence itself must
 * be reported, to the first FLUSH after it, once; the next one succeeds.
 * A fence found by a read reports to the next FLUSH the same way, and a
 * FLUSH failing for its own fenced session takes the report. */
START_TEST(test_wbloss_fence_reported_once)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	struct vlmc_wbloss_sess a, b, c;
	bool first;

	wb_setup(&g, &w, 0);
	ck_assert(!vlmc_wbloss_flush_report(&w)); /* nothing yet */
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &a), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &a, true, 0),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_detach(&w, &a); /* closed without a FLUSH */
	fake_losses = 1;	    /* the cache holding a's write dies */
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &b), VLMC_WBLOSS_LOST);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 1), VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_fenced(&w, b.gen));
	ck_assert_uint_eq(vlmc_wbloss_flush_stale(&w, &first), 0);
	ck_assert_msg(vlmc_wbloss_flush_report(&w),
		      "FLUSH on b succeeds although a's acknowledged write "
		      "may be lost");
	ck_assert(!vlmc_wbloss_flush_report(&w)); /* once */
	/* b writes; a read of b finds a loss (it fails: a read is not a
	 * report); c attaches after it: the next FLUSH, c's, reports it */
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &b, true, 1),
			 VLMC_WBLOSS_OK);
	fake_losses = 2;
	ck_assert_int_eq(vlmc_wbloss_complete_sess(&g, &w, &b, false, 0),
			 VLMC_WBLOSS_LOST);
	ck_assert_int_eq(vlmc_wbloss_attach(&g, &w, &c), VLMC_WBLOSS_OK);
	ck_assert(vlmc_wbloss_flush_report(&w));
	ck_assert(!vlmc_wbloss_flush_report(&w));
	vlmc_wbloss_detach(&w, &b);
	vlmc_wbloss_detach(&w, &c);
	/* inherited writes (a previous vlmc's), no session at all */
	vlmc_wbloss_vol_inherit(&g, &w);
	fake_losses = 3;
	ck_assert_int_eq(vlmc_wbloss_check(&g, &w, 3), VLMC_WBLOSS_LOST);
	ck_assert(vlmc_wbloss_flush_report(&w));
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* R9-13: a volume loaded at start-up is marked unflushed since the base
 * counter: a loss before the first FLUSH fences it (a read on a session
 * opened before fails, the FLUSH too); without a loss the first FLUSH
 * clears the mark and a later loss changes nothing. */
START_TEST(test_wbloss_inherit)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w, w2;
	struct vlmc_wbloss_flush f;
	uint64_t gen;

	wb_setup(&g, &w, 4);
	vlmc_wbloss_vol_init(&w2);
	vlmc_wbloss_vol_inherit(&g, &w);
	vlmc_wbloss_vol_inherit(&g, &w2);
	ck_assert(vlmc_wbloss_marked(&w));
	gen = vlmc_wbloss_gen(&w);
	/* reads before any loss: served, still marked */
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_OK);
	ck_assert(vlmc_wbloss_marked(&w));
	fake_losses = 5;
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_LOST);
	ck_assert(vlmc_wbloss_fenced(&w, gen));
	ck_assert_uint_eq(vlmc_wbloss_vol_lost(&w), 1);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 5), VLMC_WBLOSS_OK);
	ck_assert(vlmc_wbloss_fenced(&w, gen)); /* the caller fails it */
	/* w2: a FLUSH with the loss in its window fences it too */
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w2, &f, 5),
			 VLMC_WBLOSS_LOST);
	vlmc_wbloss_vol_destroy(&w);
	vlmc_wbloss_vol_destroy(&w2);

	/* no loss before the first FLUSH: cleared, a later loss is none */
	wb_setup(&g, &w, 7);
	vlmc_wbloss_vol_inherit(&g, &w);
	gen = vlmc_wbloss_gen(&w);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 7), VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_marked(&w));
	fake_losses = 8;
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, false, 0),
			 VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_fenced(&w, gen));
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

/* R9-4: the snapshot's check of its drained source. */
START_TEST(test_wbloss_check)
{
	struct vlmc_wbloss g;
	struct vlmc_wbloss_vol w;
	struct vlmc_wbloss_flush f;
	uint64_t gen, L;

	/* unmarked: a moved counter is no loss of this volume */
	wb_setup(&g, &w, 2);
	gen = vlmc_wbloss_gen(&w);
	ck_assert_int_eq(vlmc_wbloss_check(&g, &w, 3), VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_fenced(&w, gen));
	/* marked, no loss since: OK, still marked */
	L = vlmc_wbloss_read(&g);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, L),
			 VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_check(&g, &w, 2), VLMC_WBLOSS_OK);
	ck_assert(vlmc_wbloss_marked(&w));
	ck_assert(!vlmc_wbloss_fenced(&w, gen));
	/* marked, the counter moved: fenced, mark gone, sessions fail */
	ck_assert_int_eq(vlmc_wbloss_check(&g, &w, 4), VLMC_WBLOSS_LOST);
	ck_assert(vlmc_wbloss_fenced(&w, gen));
	ck_assert(!vlmc_wbloss_marked(&w));
	ck_assert_uint_eq(vlmc_wbloss_vol_lost(&w), 2);
	ck_assert_uint_eq(vlmc_wbloss_seen(&g), 2);
	/* once fenced, checking again finds nothing new */
	ck_assert_int_eq(vlmc_wbloss_check(&g, &w, 4), VLMC_WBLOSS_OK);
	/* flushed writes: nothing to lose */
	fake_losses = 4;
	gen = vlmc_wbloss_gen(&w);
	ck_assert_int_eq(vlmc_wbloss_complete(&g, &w, gen, true, 4),
			 VLMC_WBLOSS_OK);
	vlmc_wbloss_flush_begin(&g, &f);
	ck_assert_int_eq(vlmc_wbloss_flush_done(&g, &w, &f, 4), VLMC_WBLOSS_OK);
	ck_assert_int_eq(vlmc_wbloss_check(&g, &w, 9), VLMC_WBLOSS_OK);
	ck_assert(!vlmc_wbloss_fenced(&w, gen));
	vlmc_wbloss_vol_destroy(&w);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vlmc");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_object_name);
	tcase_add_test(tc, test_obj_size);
	tcase_add_test(tc, test_split);
	tcase_add_test(tc, test_meta_roundtrip);
	tcase_add_test(tc, test_meta_v1);
	tcase_add_test(tc, test_meta_corrupt);
	tcase_add_test(tc, test_meta_v3);
	tcase_add_test(tc, test_meta_v3_corrupt);
	tcase_add_test(tc, test_table_seal);
	tcase_add_test(tc, test_nbd_greeting);
	tcase_add_test(tc, test_nbd_options);
	tcase_add_test(tc, test_nbd_requests);
	tcase_add_test(tc, test_nbd_replies);
	tcase_add_test(tc, test_nbd_cache_status_requests);
	tcase_add_test(tc, test_nbd_meta_context);
	tcase_add_test(tc, test_nbd_structured_reply);
	tcase_add_test(tc, test_wbloss_flush_after_loss);
	tcase_add_test(tc, test_wbloss_flushed_then_loss);
	tcase_add_test(tc, test_wbloss_read_after_loss);
	tcase_add_test(tc, test_wbloss_write_across_loss);
	tcase_add_test(tc, test_wbloss_racing_write);
	tcase_add_test(tc, test_wbloss_loss_during_flush);
	tcase_add_test(tc, test_wbloss_min_mark);
	tcase_add_test(tc, test_wbloss_attach_after_loss);
	tcase_add_test(tc, test_wbloss_stale_session_blocks_flush);
	tcase_add_test(tc, test_wbloss_stale_epochs);
	tcase_add_test(tc, test_wbloss_inherit);
	tcase_add_test(tc, test_wbloss_check);
	tcase_add_test(tc, test_wbloss_stale_covered_writer);
	tcase_add_test(tc, test_wbloss_stale_failed_write);
	tcase_add_test(tc, test_wbloss_fence_reported_once);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
