/* SPDX-License-Identifier: MIT */
/*
 * nbd_proto: see nbd_proto.h. Written from the NBD protocol specification.
 */
#include <errno.h>
#include <string.h>

#include "nbd_proto.h"

void nbd_encode_greeting(uint8_t out[NBD_HANDSHAKE_LEN])
{
	nbd_put64(out, NBD_INIT_MAGIC);
	nbd_put64(out + 8, NBD_OPTS_MAGIC);
	nbd_put16(out + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
}

int nbd_parse_client_flags(const uint8_t in[4], bool *no_zeroes)
{
	uint32_t f = nbd_get32(in);

	/* The spec: unknown client flags, or a client that did not accept
	 * the fixed newstyle we offered, mean the server must disconnect. */
	if (f & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES))
		return -EPROTO;
	if (!(f & NBD_FLAG_C_FIXED_NEWSTYLE))
		return -EPROTO;
	*no_zeroes = f & NBD_FLAG_C_NO_ZEROES;
	return 0;
}

int nbd_parse_opt_header(const uint8_t in[NBD_OPT_HDR_LEN], uint32_t *opt,
			 uint32_t *len)
{
	if (nbd_get64(in) != NBD_OPTS_MAGIC)
		return -EPROTO;
	*opt = nbd_get32(in + 8);
	*len = nbd_get32(in + 12);
	return 0;
}

void nbd_encode_opt_reply(uint8_t out[NBD_OPT_REPLY_LEN], uint32_t opt,
			  uint32_t type, uint32_t len)
{
	nbd_put64(out, NBD_REP_MAGIC);
	nbd_put32(out + 8, opt);
	nbd_put32(out + 12, type);
	nbd_put32(out + 16, len);
}

int nbd_parse_go(const uint8_t *in, uint32_t len, const char **name,
		 uint32_t *namelen, const uint8_t **infos, uint16_t *nr_infos)
{
	uint32_t nl;
	uint16_t n;

	if (len < 6)
		return -EINVAL;
	nl = nbd_get32(in);
	if (nl > len - 6) /* len >= 6: no underflow */
		return -EINVAL;
	n = nbd_get16(in + 4 + nl);
	if ((uint64_t)nl + 6 + 2ULL * n != len)
		return -EINVAL;
	*name = (const char *)in + 4;
	*namelen = nl;
	*infos = in + 6 + nl;
	*nr_infos = n;
	return 0;
}

void nbd_encode_info_export(uint8_t out[NBD_INFO_EXPORT_LEN], uint64_t size,
			    uint16_t tflags)
{
	nbd_put16(out, NBD_INFO_EXPORT);
	nbd_put64(out + 2, size);
	nbd_put16(out + 10, tflags);
}

void nbd_encode_info_block_size(uint8_t out[NBD_INFO_BLOCK_SIZE_LEN],
				uint32_t min, uint32_t preferred, uint32_t max)
{
	nbd_put16(out, NBD_INFO_BLOCK_SIZE);
	nbd_put32(out + 2, min);
	nbd_put32(out + 6, preferred);
	nbd_put32(out + 10, max);
}

size_t nbd_encode_export_reply(uint8_t out[NBD_EXPORT_REPLY_LEN], uint64_t size,
			       uint16_t tflags, bool no_zeroes)
{
	nbd_put64(out, size);
	nbd_put16(out + 8, tflags);
	if (no_zeroes)
		return 10;
	memset(out + 10, 0, 124);
	return NBD_EXPORT_REPLY_LEN;
}

int nbd_parse_request(const uint8_t in[NBD_REQUEST_LEN], struct nbd_request *r)
{
	if (nbd_get32(in) != NBD_REQUEST_MAGIC)
		return -EPROTO;
	r->flags = nbd_get16(in + 4);
	r->type = nbd_get16(in + 6);
	r->cookie = nbd_get64(in + 8);
	r->offset = nbd_get64(in + 16);
	r->length = nbd_get32(in + 24);
	return 0;
}

static enum nbd_verdict nbd_refuse(const struct nbd_request *r, uint32_t *error,
				   uint32_t e)
{
	*error = e;
	/* A write's payload follows the header: we drop it by reading it,
	 * unless it is too large to be worth reading. */
	if (r->type == NBD_CMD_WRITE && r->length > NBD_MAX_PAYLOAD)
		return NBD_DISCONNECT;
	return NBD_REFUSE;
}

int nbd_parse_meta_context(const uint8_t *in, uint32_t len, const char **name,
			   uint32_t *namelen, uint32_t *nr_queries,
			   const uint8_t **queries)
{
	uint64_t pos, nl, nq;

	if (len < 8)
		return -EINVAL;
	nl = nbd_get32(in);
	if (nl > len - 8)
		return -EINVAL;
	pos = 4 + nl;
	nq = nbd_get32(in + pos);
	pos += 4;
	*queries = in + pos;
	for (uint64_t i = 0; i < nq; i++) {
		uint64_t ql;

		if (len - pos < 4)
			return -EINVAL;
		ql = nbd_get32(in + pos);
		if (ql > NBD_OPT_MAX || ql > len - pos - 4)
			return -EINVAL;
		pos += 4 + ql;
	}
	if (pos != len)
		return -EINVAL;
	*name = (const char *)in + 4;
	*namelen = (uint32_t)nl;
	*nr_queries = (uint32_t)nq;
	return 0;
}

const uint8_t *nbd_next_meta_query(const uint8_t *q, const char **s,
				   uint32_t *slen)
{
	*slen = nbd_get32(q);
	*s = (const char *)q + 4;
	return q + 4 + *slen;
}

size_t nbd_encode_meta_context(uint8_t *out, uint32_t id, const char *name)
{
	size_t nl = strlen(name);

	nbd_put32(out, id);
	memcpy(out + 4, name, nl);
	return 4 + nl;
}

void nbd_encode_structured_reply(uint8_t out[NBD_STRUCTURED_REPLY_LEN],
				 uint16_t flags, uint16_t type, uint64_t cookie,
				 uint32_t length)
{
	nbd_put32(out, NBD_STRUCTURED_REPLY_MAGIC);
	nbd_put16(out + 4, flags);
	nbd_put16(out + 6, type);
	nbd_put64(out + 8, cookie);
	nbd_put32(out + 16, length);
}

enum nbd_verdict nbd_check_request(const struct nbd_request *r, uint64_t size,
				   unsigned caps, uint32_t *error)
{
	bool readonly = caps & NBD_CAP_READONLY;
	uint16_t allowed;
	bool writes = false;

	*error = 0;
	/* DISC has no reply whatever its fields: the client then waits for
	 * the close (review12 F4) */
	if (r->type == NBD_CMD_DISC)
		return NBD_DO;
	switch (r->type) {
	case NBD_CMD_READ:
		allowed = 0;
		break;
	case NBD_CMD_WRITE:
		allowed = NBD_CMD_FLAG_FUA;
		writes = true;
		break;
	case NBD_CMD_FLUSH:
		allowed = 0;
		break;
	case NBD_CMD_TRIM:
		allowed = NBD_CMD_FLAG_FUA;
		writes = true;
		break;
	case NBD_CMD_WRITE_ZEROES:
		allowed = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE |
			  NBD_CMD_FLAG_FAST_ZERO;
		writes = true;
		break;
	case NBD_CMD_CACHE:
		allowed = 0;
		break;
	case NBD_CMD_BLOCK_STATUS:
		/* SHOULD be EINVAL without a selected context (spec) */
		if (!(caps & NBD_CAP_BLOCK_STATUS))
			return nbd_refuse(r, error, NBD_EINVAL);
		allowed = NBD_CMD_FLAG_REQ_ONE;
		break;
	default:
		return nbd_refuse(r, error, NBD_EINVAL);
	}
	if (r->flags & ~allowed)
		return nbd_refuse(r, error, NBD_EINVAL);
	if (r->type == NBD_CMD_WRITE && r->length > NBD_MAX_PAYLOAD)
		return NBD_DISCONNECT;
	if (r->type == NBD_CMD_FLUSH)
		return r->offset || r->length ? nbd_refuse(r, error, NBD_EINVAL)
					      : NBD_DO;
	if (r->length == 0)
		return nbd_refuse(r, error, NBD_EINVAL);
	if (r->type == NBD_CMD_READ && r->length > NBD_MAX_PAYLOAD)
		return nbd_refuse(r, error, NBD_EOVERFLOW);
	if (writes && readonly)
		return nbd_refuse(r, error, NBD_EPERM);
	if (r->offset > size || r->length > size - r->offset)
		return nbd_refuse(r, error, writes ? NBD_ENOSPC : NBD_EINVAL);
	return NBD_DO;
}

void nbd_encode_simple_reply(uint8_t out[NBD_REPLY_LEN], uint32_t error,
			     uint64_t cookie)
{
	nbd_put32(out, NBD_SIMPLE_REPLY_MAGIC);
	nbd_put32(out + 4, error);
	nbd_put64(out + 8, cookie);
}

uint32_t nbd_errno(int err)
{
	switch (err) {
	case 0:
		return 0;
	case EPERM:
	case EROFS:
		return NBD_EPERM;
	case ENOMEM:
		return NBD_ENOMEM;
	case EINVAL:
		return NBD_EINVAL;
	case ENOSPC:
		return NBD_ENOSPC;
	case EOVERFLOW:
		return NBD_EOVERFLOW;
	case EOPNOTSUPP:
		return NBD_ENOTSUP;
	default:
		return NBD_EIO;
	}
}
