/* SPDX-License-Identifier: MIT */
/*
 * vlmc volume core: names, split, metadata encoding. See volume.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "volume.h"

static bool vlmc_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '@' ||
	       c == '+' || c == '=' || c == '-';
}

bool vlmc_name_valid(const char *name, size_t len)
{
	if (!name || len == 0 || len > VLMC_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!vlmc_name_char(name[i]))
			return false;
	return true;
}

bool vlmc_obj_size_valid(uint64_t obj_size)
{
	return obj_size >= 4096 && obj_size <= VLMC_MAX_OBJ_SIZE &&
	       !(obj_size & (obj_size - 1));
}

size_t vlmc_object_name(char *buf, const char *vol, uint64_t id, uint64_t idx)
{
	int n = id ? snprintf(buf, VLMC_OBJNAME_MAX + 1,
			      "%s:%016" PRIx64 ":%016" PRIx64, vol, id, idx)
		   : snprintf(buf, VLMC_OBJNAME_MAX + 1, "%s:%016" PRIx64, vol,
			      idx);

	return n < 0 ? 0 : (size_t)n;
}

uint64_t vlmc_split_count(uint64_t off, uint64_t len, uint32_t obj_size)
{
	if (!len)
		return 0;
	return (off + len - 1) / obj_size - off / obj_size + 1;
}

uint64_t vlmc_split(uint64_t off, uint64_t len, uint32_t obj_size,
		    struct vlmc_extent *ext, uint64_t max)
{
	uint64_t n = vlmc_split_count(off, len, obj_size), done = 0;

	if (!n || n > max)
		return 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t pos = off + done;
		uint64_t in_obj = pos % obj_size;
		uint64_t take = obj_size - in_obj;

		if (take > len - done)
			take = len - done;
		ext[i].obj_index = pos / obj_size;
		ext[i].obj_off = in_obj;
		ext[i].buf_off = done;
		ext[i].len = take;
		done += take;
	}
	return n;
}

static int vlmc_id_str(uint64_t id, char out[17])
{
	if (!id)
		return snprintf(out, 17, "-");
	return snprintf(out, 17, "%016" PRIx64, id);
}

long vlmc_meta_encode_r(const struct vlmc_volume_meta *v, size_t n,
			const struct vlmc_reclaim_meta *r, size_t nr, char *buf,
			size_t cap)
{
	size_t pos = 0;
	int w;

	/* version 2 when nothing is reclaimed: readable by older vlmc */
	w = nr ? snprintf(buf, cap, "vlmc-meta 3 %zu %zu\n", n, nr)
	       : snprintf(buf, cap, "vlmc-meta 2 %zu\n", n);
	if (w < 0 || (size_t)w >= cap)
		return -ENOSPC;
	pos = (size_t)w;
	for (size_t i = 0; i < n; i++) {
		char id[17];

		vlmc_id_str(v[i].id, id);
		w = snprintf(buf + pos, cap - pos,
			     "%s %" PRIu64 " %" PRIu32 " %s %s %s\n", v[i].name,
			     v[i].size, v[i].obj_size,
			     v[i].readonly ? "ro" : "rw",
			     v[i].parent[0] ? v[i].parent : "-", id);
		if (w < 0 || (size_t)w >= cap - pos)
			return -ENOSPC;
		pos += (size_t)w;
	}
	for (size_t i = 0; i < nr; i++) {
		char id[17];

		vlmc_id_str(r[i].id, id);
		w = snprintf(buf + pos, cap - pos,
			     "reclaim %s %s %" PRIu64 " %" PRIu64 "\n",
			     r[i].name, id, r[i].objects, r[i].next);
		if (w < 0 || (size_t)w >= cap - pos)
			return -ENOSPC;
		pos += (size_t)w;
	}
	w = snprintf(buf + pos, cap - pos, "end\n");
	if (w < 0 || (size_t)w >= cap - pos)
		return -ENOSPC;
	return (long)(pos + (size_t)w);
}

long vlmc_meta_encode(const struct vlmc_volume_meta *v, size_t n, char *buf,
		      size_t cap)
{
	return vlmc_meta_encode_r(v, n, NULL, 0, buf, cap);
}

/* Next line of buf[*pos..len) into line (NUL terminated, at most cap-1
 * bytes); false at the end, on a line without '\n', or one too long. */
static bool vlmc_next_line(const char *buf, size_t len, size_t *pos, char *line,
			   size_t cap)
{
	const char *nl;
	size_t l;

	if (*pos >= len)
		return false;
	nl = memchr(buf + *pos, '\n', len - *pos);
	if (!nl)
		return false;
	l = (size_t)(nl - (buf + *pos));
	if (l >= cap)
		return false;
	memcpy(line, buf + *pos, l);
	line[l] = 0;
	*pos += l + 1;
	return true;
}

static int vlmc_parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!*s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* An incarnation id column: "-" (legacy, 0) or exactly 16 lower-case hex
 * digits, not all zero (0 written as digits would be a legacy volume in
 * disguise: refused, so each id has one spelling). */
static int vlmc_parse_id(const char *s, uint64_t *out)
{
	uint64_t id = 0;

	if (!strcmp(s, "-")) {
		*out = 0;
		return 0;
	}
	if (strlen(s) != 16)
		return -EINVAL;
	for (int i = 0; i < 16; i++) {
		char c = s[i];

		if (c >= '0' && c <= '9')
			id = id << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			id = id << 4 | (uint64_t)(c - 'a' + 10);
		else
			return -EINVAL;
	}
	if (!id)
		return -EINVAL;
	*out = id;
	return 0;
}

/* Split line into at most max tokens at spaces; returns the number, or
 * max + 1 if there are more. */
static int vlmc_tokens(char *line, char **tok, int max)
{
	char *save;
	int nt = 0;

	for (char *t = strtok_r(line, " ", &save); t;
	     t = strtok_r(NULL, " ", &save)) {
		if (nt == max)
			return max + 1;
		tok[nt++] = t;
	}
	return nt;
}

/* A reclaim record line (version 3) into *r. */
static int vlmc_parse_reclaim(char *line, struct vlmc_reclaim_meta *r)
{
	/* the most objects a volume can have: the largest volume in the
	 * smallest objects */
	const uint64_t max_objs = vlmc_nr_objects(VLMC_MAX_VOLUME_SIZE, 4096);
	char *tok[5];
	uint64_t id, objects, next;

	if (vlmc_tokens(line, tok, 5) != 5 || strcmp(tok[0], "reclaim") ||
	    !vlmc_name_valid(tok[1], strlen(tok[1])) ||
	    vlmc_parse_id(tok[2], &id) || vlmc_parse_u64(tok[3], &objects) ||
	    objects > max_objs || vlmc_parse_u64(tok[4], &next) ||
	    next > objects)
		return -EBADMSG;
	memset(r, 0, sizeof(*r));
	strcpy(r->name, tok[1]);
	r->id = id;
	r->objects = objects;
	r->next = next;
	return 0;
}

long vlmc_meta_decode_r(const char *buf, size_t len, struct vlmc_volume_meta *v,
			size_t max, struct vlmc_reclaim_meta *r, size_t rmax,
			size_t *nr)
{
	char line[2 * VLMC_NAME_MAX + 96];
	size_t pos = 0, i;
	uint64_t count, rcount = 0, id = 0;
	char *tok[6];
	int version, fields;

	if (nr)
		*nr = 0;
	if (len == 0 || buf[0] == 0)
		return 0; /* never written, or all zeroes */
	if (!vlmc_next_line(buf, len, &pos, line, sizeof(line)))
		return -EBADMSG;
	if (!strncmp(line, "vlmc-meta 1 ", 12))
		version = 1; /* before incarnation ids: no id column */
	else if (!strncmp(line, "vlmc-meta 2 ", 12))
		version = 2;
	else if (!strncmp(line, "vlmc-meta 3 ", 12))
		version = 3; /* reclaim records after the volumes */
	else
		return -EBADMSG;
	fields = version == 1 ? 5 : 6;
	if (version == 3) {
		char *sp = strchr(line + 12, ' ');

		if (!sp)
			return -EBADMSG;
		*sp = 0;
		if (vlmc_parse_u64(sp + 1, &rcount) || !rcount)
			return -EBADMSG; /* none: written as version 2 */
	}
	if (vlmc_parse_u64(line + 12, &count))
		return -EBADMSG;
	if (count > max || rcount > rmax)
		return -ENOSPC;
	for (i = 0; i < count; i++) {
		uint64_t size, osz;

		if (!vlmc_next_line(buf, len, &pos, line, sizeof(line)))
			return -EBADMSG;
		if (vlmc_tokens(line, tok, 6) != fields ||
		    !vlmc_name_valid(tok[0], strlen(tok[0])) ||
		    vlmc_parse_u64(tok[1], &size) ||
		    size > VLMC_MAX_VOLUME_SIZE ||
		    vlmc_parse_u64(tok[2], &osz) || !vlmc_obj_size_valid(osz) ||
		    (strcmp(tok[3], "ro") && strcmp(tok[3], "rw")) ||
		    (strcmp(tok[4], "-") &&
		     !vlmc_name_valid(tok[4], strlen(tok[4]))) ||
		    (version >= 2 && vlmc_parse_id(tok[5], &id)))
			return -EBADMSG;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(v[j].name, tok[0]) || (id && v[j].id == id))
				return -EBADMSG;
		memset(&v[i], 0, sizeof(v[i]));
		strcpy(v[i].name, tok[0]);
		v[i].size = size;
		v[i].obj_size = (uint32_t)osz;
		v[i].readonly = !strcmp(tok[3], "ro");
		if (strcmp(tok[4], "-"))
			strcpy(v[i].parent, tok[4]);
		v[i].id = id;
	}
	for (i = 0; i < rcount; i++) {
		struct vlmc_reclaim_meta *ri = &r[i];

		if (!vlmc_next_line(buf, len, &pos, line, sizeof(line)) ||
		    vlmc_parse_reclaim(line, ri))
			return -EBADMSG;
		/* one incarnation's objects are one volume's or one
		 * record's: an id (or, for legacy id 0, a name) used twice
		 * would have two owners */
		for (size_t j = 0; j < count; j++)
			if (v[j].id == ri->id &&
			    (ri->id || !strcmp(v[j].name, ri->name)))
				return -EBADMSG;
		for (size_t j = 0; j < i; j++)
			if (r[j].id == ri->id &&
			    (ri->id || !strcmp(r[j].name, ri->name)))
				return -EBADMSG;
	}
	if (!vlmc_next_line(buf, len, &pos, line, sizeof(line)) ||
	    strcmp(line, "end"))
		return -EBADMSG;
	if (nr)
		*nr = (size_t)rcount;
	return (long)count;
}

long vlmc_meta_decode(const char *buf, size_t len, struct vlmc_volume_meta *v,
		      size_t max)
{
	return vlmc_meta_decode_r(buf, len, v, max, NULL, 0, NULL);
}

/* SHA-256 of a then b, as 64 hex digits + NUL into hex. */
static int vlmc_table_hash(const char *a, size_t alen, const char *b,
			   size_t blen, char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok;

	if (!ctx)
		return -ENOMEM;
	ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(ctx, a, alen) && EVP_DigestUpdate(ctx, b, blen) &&
	     EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -ENOMEM;
	for (unsigned i = 0; i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = 0;
	return 0;
}

long vlmc_table_encode(const struct vlmc_volume_meta *v, size_t n, uint64_t gen,
		       char *buf, size_t cap)
{
	return vlmc_table_encode_r(v, n, NULL, 0, gen, buf, cap);
}

long vlmc_table_encode_r(const struct vlmc_volume_meta *v, size_t n,
			 const struct vlmc_reclaim_meta *r, size_t nr,
			 uint64_t gen, char *buf, size_t cap)
{
	char prefix[64], hex[65];
	long tlen;
	int plen, rc;

	if (!gen)
		return -EINVAL;
	if (cap <= VLMC_TABLE_HDR_MAX)
		return -ENOSPC;
	/* the text first, after room for the header; moved down after */
	tlen = vlmc_meta_encode_r(v, n, r, nr, buf + VLMC_TABLE_HDR_MAX,
				  cap - VLMC_TABLE_HDR_MAX);
	if (tlen < 0)
		return tlen;
	plen = snprintf(prefix, sizeof(prefix), "vlmc-table 1 %" PRIu64 " %ld ",
			gen, tlen);
	if (plen < 0 || (size_t)plen >= sizeof(prefix))
		return -ENOSPC;
	rc = vlmc_table_hash(prefix, (size_t)plen, buf + VLMC_TABLE_HDR_MAX,
			     (size_t)tlen, hex);
	if (rc)
		return rc;
	/* plen + 64 + 1 < VLMC_TABLE_HDR_MAX: the header fits */
	memmove(buf + plen + 65, buf + VLMC_TABLE_HDR_MAX, (size_t)tlen);
	memcpy(buf, prefix, (size_t)plen);
	memcpy(buf + plen, hex, 64);
	buf[plen + 64] = '\n';
	return plen + 65 + tlen;
}

/* Decimal digits at *p up to a space: the value into *out, *p past the
 * space. */
static int vlmc_table_field(const char **p, const char *end, uint64_t *out)
{
	char tmp[24];
	const char *sp = memchr(*p, ' ', (size_t)(end - *p));
	size_t l;

	if (!sp)
		return -EBADMSG;
	l = (size_t)(sp - *p);
	if (!l || l >= sizeof(tmp))
		return -EBADMSG;
	memcpy(tmp, *p, l);
	tmp[l] = 0;
	if (vlmc_parse_u64(tmp, out))
		return -EBADMSG;
	*p = sp + 1;
	return 0;
}

long vlmc_table_decode(const char *buf, size_t len, uint64_t *gen,
		       struct vlmc_volume_meta *v, size_t max)
{
	return vlmc_table_decode_r(buf, len, gen, v, max, NULL, 0, NULL);
}

long vlmc_table_decode_r(const char *buf, size_t len, uint64_t *gen,
			 struct vlmc_volume_meta *v, size_t max,
			 struct vlmc_reclaim_meta *r, size_t rmax, size_t *nr)
{
	static const char magic[] = "vlmc-table 1 ";
	const char *nl, *p, *end;
	uint64_t g, tlen;
	char hex[65];
	size_t hlen;
	int rc;

	nl = memchr(buf, '\n',
		    len < VLMC_TABLE_HDR_MAX ? len : VLMC_TABLE_HDR_MAX);
	if (!nl || strncmp(buf, magic, sizeof(magic) - 1))
		return -EBADMSG;
	p = buf + sizeof(magic) - 1;
	end = nl;
	if (vlmc_table_field(&p, end, &g) || !g ||
	    vlmc_table_field(&p, end, &tlen))
		return -EBADMSG;
	/* p: the hash, 64 hex digits up to the newline */
	if (end - p != 64)
		return -EBADMSG;
	hlen = (size_t)(nl - buf) + 1;
	if (tlen > len - hlen)
		return -EBADMSG; /* cut short */
	rc = vlmc_table_hash(buf, (size_t)(p - buf), nl + 1, (size_t)tlen, hex);
	if (rc)
		return rc;
	if (memcmp(hex, p, 64))
		return -EBADMSG;
	*gen = g;
	return vlmc_meta_decode_r(nl + 1, (size_t)tlen, v, max, r, rmax, nr);
}
