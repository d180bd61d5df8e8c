/* SPDX-License-Identifier: MIT */
#ifndef TEST_PEER_RUN_H
#define TEST_PEER_RUN_H
/*
 * Helpers of the tools tests (test_peer, test_bench_xseg, test_xsegctl):
 * run the built programs ($AC_BIN_DIR) and capture their output, start a
 * long-running peer with its log in a file, and a small xseg client.
 * Children are started through xseg_testutil (xtu_fork), so they die with
 * the test process and are killed at exit even when a test fails.
 */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "xseg.h"

/* Path of a built program: $AC_BIN_DIR/name (malloc'd). */
char *tpr_bin(const char *name);

/*
 * Run $AC_BIN_DIR/argv[0] with the other arguments (NULL-terminated),
 * capture stdout and stderr (NUL-terminated, malloc'd; pass NULL to drop)
 * and return its exit status (0..255), 128 + signal, or -ETIMEDOUT after
 * killing it when it runs longer than timeout_ms.
 */
int tpr_run(const char *const argv[], char **out, char **err,
	    uint64_t timeout_ms);

/* Start $AC_BIN_DIR/argv[0] in the background with stdout and stderr
 * appended to log_path. Returns the pid (registered with xseg_testutil). */
pid_t tpr_start(const char *const argv[], const char *log_path);

/* Whole file as a NUL-terminated string (malloc'd; "" if missing). */
char *tpr_slurp(const char *path);

/* A temporary file name (nothing is created) unique to this process,
 * under the program's scratch root: removed when the test runner exits,
 * also after a failed test (test_tmp.h). The string belongs to
 * tpr_tmpfile's table (kept until exit): the caller must NOT free it. */
const char *tpr_tmpfile(const char *tag);

/* Wait until port of segment is bound to a live owner (or timeout). */
int tpr_wait_port(struct xseg *seg, uint32_t port, uint64_t timeout_ms);

/* Wait until port has no owner any more. */
int tpr_wait_port_free(struct xseg *seg, uint32_t port, uint64_t timeout_ms);

/* Create a segment for a test: 32 MiB, 8 static + 8 dynamic ports, 512
 * requests. Name registered for cleanup. */
const char *tpr_segment(const char *tag, struct xseg **seg);

/* Client side: one dynamic port of this process. */
struct tpr_client {
	struct xseg *seg;
	uint32_t port;
};
int tpr_client_open(struct tpr_client *c, const char *segname);
void tpr_client_close(struct tpr_client *c);

/* One round trip: get, prep (target, datalen), op, offset, size, submit to
 * dst, wait up to 10 s. On success *reqp holds the received request (the
 * caller puts it) and the return value is req->error (>= 0); a negative
 * value is a local failure (-ETIMEDOUT ...). */
int tpr_roundtrip(struct tpr_client *c, uint32_t dst, uint16_t op,
		  const char *target, uint64_t offset, uint64_t size,
		  uint64_t datalen, struct xseg_request **reqp);

#endif /* TEST_PEER_RUN_H */
