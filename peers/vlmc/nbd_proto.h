/* SPDX-License-Identifier: MIT */
#ifndef VLMC_NBD_PROTO_H
#define VLMC_NBD_PROTO_H
/*
 * nbd_proto: pure encoding and parsing of the NBD wire protocol (fixed
 * newstyle handshake, simple replies), written from the NBD protocol
 * specification (NetworkBlockDevice/nbd doc/proto.md). No I/O, no state,
 * no allocation: every function works on caller buffers, so the parser can
 * be unit-tested and fuzzed on its own.
 *
 * All integers on the wire are big-endian.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_INIT_MAGIC		   0x4e42444d41474943ULL /* "NBDMAGIC" */
#define NBD_OPTS_MAGIC		   0x49484156454f5054ULL /* "IHAVEOPT" */
#define NBD_REP_MAGIC		   0x0003e889045565a9ULL
#define NBD_REQUEST_MAGIC	   0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC	   0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

/* handshake flags (server) and client flags */
#define NBD_FLAG_FIXED_NEWSTYLE	  (1u << 0)
#define NBD_FLAG_NO_ZEROES	  (1u << 1)
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES	  (1u << 1)

/* options */
#define NBD_OPT_EXPORT_NAME	  1
#define NBD_OPT_ABORT		  2
#define NBD_OPT_LIST		  3
#define NBD_OPT_INFO		  6
#define NBD_OPT_GO		  7
#define NBD_OPT_STRUCTURED_REPLY  8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT  10

/* option reply types */
#define NBD_REP_ACK	     1u
#define NBD_REP_SERVER	     2u
#define NBD_REP_INFO	     3u
#define NBD_REP_META_CONTEXT 4u
#define NBD_REP_ERR	     (1u << 31)
#define NBD_REP_ERR_UNSUP    (NBD_REP_ERR + 1)
#define NBD_REP_ERR_POLICY   (NBD_REP_ERR + 2)
#define NBD_REP_ERR_INVALID  (NBD_REP_ERR + 3)
#define NBD_REP_ERR_UNKNOWN  (NBD_REP_ERR + 6)
#define NBD_REP_ERR_TOO_BIG  (NBD_REP_ERR + 9)

/* information types of NBD_REP_INFO */
#define NBD_INFO_EXPORT	     0
#define NBD_INFO_NAME	     1
#define NBD_INFO_DESCRIPTION 2
#define NBD_INFO_BLOCK_SIZE  3

/* transmission flags */
#define NBD_FLAG_HAS_FLAGS	   (1u << 0)
#define NBD_FLAG_READ_ONLY	   (1u << 1)
#define NBD_FLAG_SEND_FLUSH	   (1u << 2)
#define NBD_FLAG_SEND_FUA	   (1u << 3)
#define NBD_FLAG_SEND_TRIM	   (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_CAN_MULTI_CONN	   (1u << 8)
#define NBD_FLAG_SEND_CACHE	   (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO	   (1u << 11)

/* commands and command flags */
#define NBD_CMD_READ	     0
#define NBD_CMD_WRITE	     1
#define NBD_CMD_DISC	     2
#define NBD_CMD_FLUSH	     3
#define NBD_CMD_TRIM	     4
#define NBD_CMD_CACHE	     5
#define NBD_CMD_WRITE_ZEROES 6
#define NBD_CMD_BLOCK_STATUS 7
#define NBD_CMD_FLAG_FUA     (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)
/* WRITE_ZEROES: fail at once with NBD_ENOTSUP, changing nothing, unless
 * the zeroing is fast (vlmc: whole objects deleted, or already holes) */
#define NBD_CMD_FLAG_FAST_ZERO (1u << 4)

/* structured reply chunks */
#define NBD_REPLY_FLAG_DONE	    (1u << 0)
#define NBD_REPLY_TYPE_NONE	    0u
#define NBD_REPLY_TYPE_OFFSET_DATA  1u
#define NBD_REPLY_TYPE_BLOCK_STATUS 5u
#define NBD_REPLY_TYPE_ERROR	    ((1u << 15) + 1)

/* base:allocation states */
#define NBD_STATE_HOLE		 (1u << 0)
#define NBD_STATE_ZERO		 (1u << 1)
#define NBD_META_BASE_ALLOCATION "base:allocation"

/* NBD error values (as the spec numbers them; equal to Linux errnos) */
#define NBD_EPERM     1
#define NBD_EIO	      5
#define NBD_ENOMEM    12
#define NBD_EINVAL    22
#define NBD_ENOSPC    28
#define NBD_EOVERFLOW 75
#define NBD_ENOTSUP   95

/* Sizes of the fixed wire structures. */
#define NBD_HANDSHAKE_LEN	 18 /* init magic, opts magic, flags */
#define NBD_OPT_HDR_LEN		 16 /* IHAVEOPT, option, length */
#define NBD_OPT_REPLY_LEN	 20 /* magic, option, type, length */
#define NBD_REQUEST_LEN		 28
#define NBD_REPLY_LEN		 16
#define NBD_STRUCTURED_REPLY_LEN 20 /* magic, flags, type, cookie, length */
#define NBD_EXPORT_REPLY_LEN                                                   \
	134 /* NBD_OPT_EXPORT_NAME: size, flags, zeroes                        \
	     */

/* Largest option payload the server reads (longer: NBD_REP_ERR_TOO_BIG
 * and the payload is skipped, or disconnect beyond NBD_OPT_SKIP_MAX). */
#define NBD_OPT_MAX	 4096
#define NBD_OPT_SKIP_MAX (1u << 20)
/* Largest READ/WRITE payload accepted (advertised as the maximum block
 * size). */
#define NBD_MAX_PAYLOAD (32u << 20)

static inline void nbd_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void nbd_put32(uint8_t *p, uint32_t v)
{
	nbd_put16(p, (uint16_t)(v >> 16));
	nbd_put16(p + 2, (uint16_t)v);
}

static inline void nbd_put64(uint8_t *p, uint64_t v)
{
	nbd_put32(p, (uint32_t)(v >> 32));
	nbd_put32(p + 4, (uint32_t)v);
}

static inline uint16_t nbd_get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t nbd_get32(const uint8_t *p)
{
	return ((uint32_t)nbd_get16(p) << 16) | nbd_get16(p + 2);
}

static inline uint64_t nbd_get64(const uint8_t *p)
{
	return ((uint64_t)nbd_get32(p) << 32) | nbd_get32(p + 4);
}

/* Server greeting: NBDMAGIC, IHAVEOPT, handshake flags (fixed newstyle and
 * no zeroes). Writes NBD_HANDSHAKE_LEN bytes. */
void nbd_encode_greeting(uint8_t out[NBD_HANDSHAKE_LEN]);

/* Check the client flags word. 0 if acceptable (only FIXED_NEWSTYLE and
 * NO_ZEROES known, FIXED_NEWSTYLE required); -EPROTO otherwise, in which
 * case the server must disconnect. *no_zeroes tells whether the client set
 * NO_ZEROES. */
int nbd_parse_client_flags(const uint8_t in[4], bool *no_zeroes);

/* Option header: 0 and *opt, *len, or -EPROTO (bad IHAVEOPT magic: the
 * server must disconnect). */
int nbd_parse_opt_header(const uint8_t in[NBD_OPT_HDR_LEN], uint32_t *opt,
			 uint32_t *len);

/* Option reply header for a reply of type with len payload bytes. */
void nbd_encode_opt_reply(uint8_t out[NBD_OPT_REPLY_LEN], uint32_t opt,
			  uint32_t type, uint32_t len);

/* Payload of NBD_OPT_INFO / NBD_OPT_GO: u32 name length, name, u16 count,
 * count u16 info requests. On success 0, *name points into in (not NUL
 * terminated), *infos points at the first request (big-endian u16s,
 * read with nbd_get16). -EINVAL when the lengths do not add up exactly
 * (the server answers NBD_REP_ERR_INVALID). */
int nbd_parse_go(const uint8_t *in, uint32_t len, const char **name,
		 uint32_t *namelen, const uint8_t **infos, uint16_t *nr_infos);

/* NBD_INFO_EXPORT payload (12 bytes) and NBD_INFO_BLOCK_SIZE (14 bytes). */
#define NBD_INFO_EXPORT_LEN	12
#define NBD_INFO_BLOCK_SIZE_LEN 14
void nbd_encode_info_export(uint8_t out[NBD_INFO_EXPORT_LEN], uint64_t size,
			    uint16_t tflags);
void nbd_encode_info_block_size(uint8_t out[NBD_INFO_BLOCK_SIZE_LEN],
				uint32_t min, uint32_t preferred, uint32_t max);

/* Reply to NBD_OPT_EXPORT_NAME: size, transmission flags, then 124 zero
 * bytes unless no_zeroes. Returns the number of bytes written (10 or
 * NBD_EXPORT_REPLY_LEN). */
size_t nbd_encode_export_reply(uint8_t out[NBD_EXPORT_REPLY_LEN], uint64_t size,
			       uint16_t tflags, bool no_zeroes);

/* Payload of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT: u32
 * export name length, name, u32 query count, then count queries of u32
 * length + string. On success 0, *name points into in (not NUL
 * terminated), *queries at the first query (walk them with
 * nbd_next_meta_query). -EINVAL when the lengths do not add up exactly or
 * a query is longer than NBD_OPT_MAX (the server answers
 * NBD_REP_ERR_INVALID). */
int nbd_parse_meta_context(const uint8_t *in, uint32_t len, const char **name,
			   uint32_t *namelen, uint32_t *nr_queries,
			   const uint8_t **queries);

/* The query at q (validated by nbd_parse_meta_context): its string and
 * length; returns the next query. */
const uint8_t *nbd_next_meta_query(const uint8_t *q, const char **s,
				   uint32_t *slen);

/* Payload of an NBD_REP_META_CONTEXT reply: u32 context id, then the
 * name. Writes 4 + strlen(name) bytes (out has room for it). */
size_t nbd_encode_meta_context(uint8_t *out, uint32_t id, const char *name);

/* A transmission-phase request. */
struct nbd_request {
	uint16_t flags;
	uint16_t type;
	uint64_t cookie;
	uint64_t offset;
	uint32_t length;
};

/* Parse a request header. 0, or -EPROTO on a bad magic (the server must
 * disconnect: it can no longer find request boundaries). */
int nbd_parse_request(const uint8_t in[NBD_REQUEST_LEN], struct nbd_request *r);

/* What to do with a parsed request. */
enum nbd_verdict {
	NBD_DO = 0,	/* valid: perform it */
	NBD_REFUSE,	/* reply with *error; for WRITE the payload
			   (length bytes) must still be read and dropped */
	NBD_DISCONNECT, /* close the connection (e.g. a WRITE whose
			   payload is larger than NBD_MAX_PAYLOAD: the
			   server will not read it) */
};

/* What the connection allows, for nbd_check_request (a bool true is
 * NBD_CAP_READONLY, as the argument was once a bool). */
#define NBD_CAP_READONLY     (1u << 0) /* writes refused with EPERM */
#define NBD_CAP_BLOCK_STATUS (1u << 1) /* a meta context was selected */

/*
 * Validate a request against an export of size bytes (caps: read-only,
 * block status negotiated):
 * known command, only flags valid for that command, offset + length within
 * the export without overflow, length 1..NBD_MAX_PAYLOAD for READ/WRITE,
 * WRITE_ZEROES flags FUA, NO_HOLE and FAST_ZERO (always advertised),
 * 1..UINT32_MAX for TRIM/WRITE_ZEROES, offset = length = 0 for FLUSH,
 * writes refused on a read-only export; CACHE and BLOCK_STATUS: length
 * 1..UINT32_MAX inside the export, BLOCK_STATUS only with
 * NBD_CAP_BLOCK_STATUS (flag REQ_ONE allowed). *error gets the NBD error to
 * send for NBD_REFUSE (EINVAL, ENOSPC for a write past the end, EPERM for
 * a write to a read-only export, EOVERFLOW for an oversized READ).
 * NBD_CMD_DISC is NBD_DO whatever its flags, offset and length (it has
 * no reply: the client waits for the close).
 */
enum nbd_verdict nbd_check_request(const struct nbd_request *r, uint64_t size,
				   unsigned caps, uint32_t *error);

/* Simple reply header. */
void nbd_encode_simple_reply(uint8_t out[NBD_REPLY_LEN], uint32_t error,
			     uint64_t cookie);

/* Structured reply chunk header: flags (NBD_REPLY_FLAG_DONE), type, and
 * length payload bytes to follow. */
void nbd_encode_structured_reply(uint8_t out[NBD_STRUCTURED_REPLY_LEN],
				 uint16_t flags, uint16_t type, uint64_t cookie,
				 uint32_t length);

/* Map a positive errno from the storage path to an NBD error value. */
uint32_t nbd_errno(int err);

#endif /* VLMC_NBD_PROTO_H */
