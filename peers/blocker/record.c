/* SPDX-License-Identifier: MIT */
/* Record and payload encoding: the only code that knows the byte layout. */
#include <errno.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include "store_int.h"

static uint32_t crc32c_table[8][256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc32c_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc32c_table[t][i] =
			    (crc32c_table[t - 1][i] >> 8) ^
			    crc32c_table[0][crc32c_table[t - 1][i] & 0xff];
}

/* Slicing-by-8 software CRC-32C (Castagnoli); headers are 64 bytes. */
uint32_t blocker_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	pthread_once(&crc32c_once, crc32c_init);
	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = crc ^ get_le32(p), hi = get_le32(p + 4);
		crc = crc32c_table[7][lo & 0xff] ^
		      crc32c_table[6][(lo >> 8) & 0xff] ^
		      crc32c_table[5][(lo >> 16) & 0xff] ^
		      crc32c_table[4][lo >> 24] ^ crc32c_table[3][hi & 0xff] ^
		      crc32c_table[2][(hi >> 8) & 0xff] ^
		      crc32c_table[1][(hi >> 16) & 0xff] ^
		      crc32c_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ crc32c_table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

/*
 * SHA256() fetches the algorithm on every call in OpenSSL 3 (about a third
 * of the cost of hashing 4 KiB); keep one fetched EVP_MD and a context per
 * thread instead.
 */
static EVP_MD *sha_md;
static pthread_key_t sha_key;
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static void sha_ctx_free(void *p)
{
	EVP_MD_CTX_free(p);
}

static void sha_init(void)
{
	sha_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	pthread_key_create(&sha_key, sha_ctx_free);
}

void blocker_sha256(const void *buf, size_t len, uint8_t out[32])
{
	EVP_MD_CTX *ctx;
	unsigned int n;

	pthread_once(&sha_once, sha_init);
	ctx = pthread_getspecific(sha_key);
	if (!ctx && sha_md) {
		ctx = EVP_MD_CTX_new();
		if (ctx)
			pthread_setspecific(sha_key, ctx);
	}
	if (!ctx || !EVP_DigestInit_ex2(ctx, sha_md, NULL) ||
	    !EVP_DigestUpdate(ctx, buf, len) ||
	    !EVP_DigestFinal_ex(ctx, out, &n))
		SHA256(buf, len, out); /* no context: the slow path */
}

bool blocker_mem_is_zero(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	/* compare against itself shifted: one pass, vectorised by libc */
	if (len == 0)
		return true;
	if (p[0] != 0)
		return false;
	return memcmp(p, p + 1, len - 1) == 0;
}

void blocker_hex(const uint8_t *score, char out[65])
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < 32; i++) {
		out[2 * i] = hex[score[i] >> 4];
		out[2 * i + 1] = hex[score[i] & 15];
	}
	out[64] = 0;
}

void brec_encode(uint8_t out[BREC_HDR_SIZE], enum brec_type type, uint32_t len,
		 uint64_t pos, const uint8_t score[32])
{
	memset(out, 0, BREC_HDR_SIZE);
	put_le32(out, BREC_MAGIC);
	out[4] = type;
	out[5] = BREC_VERSION;
	put_le16(out + 6, 0);
	put_le32(out + 8, len);
	put_le64(out + 16, pos);
	memcpy(out + 24, score, 32);
	put_le32(out + 12, blocker_crc32c(0, out, BREC_HDR_SIZE));
}

enum brec_err brec_decode(const uint8_t in[BREC_HDR_SIZE], struct brec_hdr *h,
			  uint64_t expect_pos)
{
	uint8_t tmp[BREC_HDR_SIZE];

	h->magic = get_le32(in);
	if (h->magic != BREC_MAGIC)
		return BREC_BAD_MAGIC;
	h->hdr_crc = get_le32(in + 12);
	memcpy(tmp, in, BREC_HDR_SIZE);
	memset(tmp + 12, 0, 4);
	if (blocker_crc32c(0, tmp, BREC_HDR_SIZE) != h->hdr_crc)
		return BREC_BAD_CRC;
	h->type = in[4];
	h->version = in[5];
	h->flags = get_le16(in + 6);
	h->len = get_le32(in + 8);
	h->pos = get_le64(in + 16);
	memcpy(h->score, in + 24, 32);
	h->reserved = get_le64(in + 56);
	if (h->version != BREC_VERSION)
		return BREC_BAD_VERSION;
	if (h->type < BREC_CHUNK || h->type > BREC_COPY)
		return BREC_BAD_TYPE;
	if (h->len == 0 || h->len > BREC_MAX_PAYLOAD)
		return BREC_BAD_LENGTH;
	if (expect_pos != ~0ULL && h->pos != expect_pos)
		return BREC_BAD_POS;
	return BREC_OK;
}

const char *brec_strerror(enum brec_err e)
{
	switch (e) {
	case BREC_OK:
		return "ok";
	case BREC_BAD_MAGIC:
		return "bad magic";
	case BREC_BAD_CRC:
		return "header checksum mismatch";
	case BREC_BAD_VERSION:
		return "unknown record version";
	case BREC_BAD_TYPE:
		return "unknown record type";
	case BREC_BAD_LENGTH:
		return "bad payload length";
	case BREC_BAD_POS:
		return "record position mismatch";
	case BREC_SHORT:
		return "short record";
	case BREC_BAD_SCORE:
		return "payload does not match score";
	}
	return "?";
}

size_t bmap_payload_size(size_t namelen, uint32_t n)
{
	return 2 + namelen + 8 + 4 + (size_t)n * BMAP_UPDATE_SIZE;
}

void bmap_encode(uint8_t *out, const char *name, size_t namelen, uint64_t size,
		 const struct bmap_update *u, uint32_t n)
{
	put_le16(out, namelen);
	memcpy(out + 2, name, namelen);
	out += 2 + namelen;
	put_le64(out, size);
	put_le32(out + 8, n);
	out += 12;
	for (uint32_t i = 0; i < n; i++) {
		put_le64(out, u[i].index);
		memcpy(out + 8, u[i].score, 32);
		out += BMAP_UPDATE_SIZE;
	}
}

int bmap_decode(const uint8_t *p, size_t len, const char **name,
		size_t *namelen, uint64_t *size, uint32_t *n,
		const uint8_t **updates)
{
	if (len < 2)
		return -EBADMSG;
	*namelen = get_le16(p);
	if (*namelen == 0 || *namelen > BLOCKER_NAME_MAX ||
	    len < 2 + *namelen + 12)
		return -EBADMSG;
	*name = (const char *)p + 2;
	if (!blocker_name_valid(*name, *namelen))
		return -EBADMSG;
	p += 2 + *namelen;
	*size = get_le64(p);
	*n = get_le32(p + 8);
	if (*size > BLOCKER_MAX_OBJECT_SIZE || *n > BMAP_MAX_UPDATES ||
	    len != bmap_payload_size(*namelen, *n))
		return -EBADMSG;
	*updates = p + 12;
	return 0;
}

size_t bnames_payload_size(size_t l1, size_t l2)
{
	return 2 + l1 + (l2 ? 2 + l2 : 0);
}

void bnames_encode(uint8_t *out, const char *n1, size_t l1, const char *n2,
		   size_t l2)
{
	put_le16(out, l1);
	memcpy(out + 2, n1, l1);
	if (l2) {
		put_le16(out + 2 + l1, l2);
		memcpy(out + 4 + l1, n2, l2);
	}
}

int bnames_decode(const uint8_t *p, size_t len, int count, const char **n1,
		  size_t *l1, const char **n2, size_t *l2)
{
	size_t used;

	if (len < 2)
		return -EBADMSG;
	*l1 = get_le16(p);
	if (len < 2 + *l1 || !blocker_name_valid((const char *)p + 2, *l1))
		return -EBADMSG;
	*n1 = (const char *)p + 2;
	used = 2 + *l1;
	if (count == 2) {
		if (len < used + 2)
			return -EBADMSG;
		*l2 = get_le16(p + used);
		if (len < used + 2 + *l2 ||
		    !blocker_name_valid((const char *)p + used + 2, *l2))
			return -EBADMSG;
		*n2 = (const char *)p + used + 2;
		used += 2 + *l2;
	}
	return used == len ? 0 : -EBADMSG;
}

bool blocker_name_valid(const char *name, size_t len)
{
	if (!name || len == 0 || len > BLOCKER_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		    c == '-' || c == ':' || c == '@' || c == '+' || c == '=')
			continue;
		return false;
	}
	return true;
}
