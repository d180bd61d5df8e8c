/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for vlmc's NBD parser (peers/vlmc/nbd_proto.h): every
 * parsing and checking entry point on arbitrary bytes. Invariants checked:
 * a GO/INFO payload that parses has a name and info list inside the input;
 * so does a meta context payload, with every query inside it; a request
 * accepted for an export of size S lies inside [0, S).
 * Build with clang: cmake -DCMAKE_C_COMPILER=clang, target fuzz_nbd_proto.
 */
#include <stdlib.h>
#include <string.h>

#include "nbd_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t buf[64] = {0};
	struct nbd_request r;
	const uint8_t *infos;
	const char *name;
	uint32_t opt, len, nl, err, nq;
	const uint8_t *q;
	uint16_t ni;
	bool nz;

	memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
	nbd_parse_client_flags(buf, &nz);
	nbd_parse_opt_header(buf, &opt, &len);
	if (size <= UINT32_MAX &&
	    !nbd_parse_go(data, (uint32_t)size, &name, &nl, &infos, &ni)) {
		if ((const uint8_t *)name < data ||
		    (const uint8_t *)name + nl > data + size ||
		    infos + 2 * (size_t)ni > data + size)
			abort();
	}
	if (size <= UINT32_MAX &&
	    !nbd_parse_meta_context(data, (uint32_t)size, &name, &nl, &nq,
				    &q)) {
		if ((const uint8_t *)name < data ||
		    (const uint8_t *)name + nl > data + size)
			abort();
		for (uint32_t i = 0; i < nq; i++) {
			const char *qs;
			uint32_t ql;

			q = nbd_next_meta_query(q, &qs, &ql);
			if ((const uint8_t *)qs < data || q > data + size)
				abort();
		}
		if (q != data + size)
			abort();
	}
	if (!nbd_parse_request(buf, &r)) {
		uint64_t export_size =
		    size > 36 ? nbd_get64(buf + 28) : 1 << 20;

		if (nbd_check_request(&r, export_size, buf[36] & 3, &err) ==
			NBD_DO &&
		    r.type != NBD_CMD_DISC && r.type != NBD_CMD_FLUSH &&
		    (r.length == 0 || r.offset > export_size ||
		     r.length > export_size - r.offset))
			abort();
	}
	return 0;
}
