/* SPDX-License-Identifier: MIT */
/*
 * Stage timestamps: a server stamps accept and respond only for a request
 * whose client stamped its submit (and respond only after a stamped
 * accept), so servers of unstamped traffic (every client but
 * bench_xseg --stages) skip two clock reads per request. One handle plays
 * both sides; xseg_set_timestamps switches it between them.
 */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "xseg.h"
#include "xseg_testutil.h"

static struct xseg *mkseg(const char *tag)
{
	char err[XSEG_ERRBUF_LEN];
	const char *name = xtu_segname(tag);
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	int rc;

	ck_assert_ptr_nonnull(name);
	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 2;
	cfg.nr_dynamic_ports = 2;
	cfg.nr_requests = 16;
	cfg.free_cache = 4;
	rc = xseg_create(name, &cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create %s: %d %s", name, rc, err);
	return seg;
}

/* One PING round trip; client_ts / server_ts: the handle's timestamps
 * option while acting as client (submit, receive) and as server. */
static struct xseg_request *round_trip(struct xseg *seg, uint32_t client,
				       bool client_ts, bool server_ts)
{
	struct xseg_request *req, *acc, *rep;

	xseg_set_timestamps(seg, client_ts);
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	xseg_set_timestamps(seg, server_ts);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
	ck_assert_ptr_eq(acc, req);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	xseg_set_timestamps(seg, client_ts);
	ck_assert_int_eq(xseg_receive(seg, client, &rep), 0);
	ck_assert_ptr_eq(rep, req);
	return rep;
}

START_TEST(test_stamps_follow_the_client)
{
	struct xseg *seg = mkseg("stamps");
	struct xseg_request *r;
	uint32_t client;

	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);

	/* Both stamp: every stage, in order. */
	r = round_trip(seg, client, true, true);
	ck_assert_uint_ne(r->ts_submitted, 0);
	ck_assert_uint_ge(r->ts_accepted, r->ts_submitted);
	ck_assert_uint_ge(r->ts_responded, r->ts_accepted);
	ck_assert_uint_ge(r->ts_received, r->ts_responded);
	ck_assert_int_eq(xseg_put_request(seg, r), 0);

	/* The client does not stamp: the server (stamping on) leaves the
	 * request's stamps alone. */
	r = round_trip(seg, client, false, true);
	ck_assert_uint_eq(r->ts_submitted, 0);
	ck_assert_uint_eq(r->ts_accepted, 0);
	ck_assert_uint_eq(r->ts_responded, 0);
	ck_assert_uint_eq(r->ts_received, 0);
	ck_assert_int_eq(xseg_put_request(seg, r), 0);

	/* The client stamps, the server does not: neither server stage,
	 * and respond does not stamp after an unstamped accept. */
	r = round_trip(seg, client, true, false);
	ck_assert_uint_ne(r->ts_submitted, 0);
	ck_assert_uint_eq(r->ts_accepted, 0);
	ck_assert_uint_eq(r->ts_responded, 0);
	ck_assert_uint_ge(r->ts_received, r->ts_submitted);
	ck_assert_int_eq(xseg_put_request(seg, r), 0);

	xseg_leave(seg);
}
END_TEST

static Suite *stamps_suite(void)
{
	Suite *s = suite_create("xseg_stamps");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_stamps_follow_the_client);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	xtu_init();
	return xtu_run_suite(stamps_suite());
}
