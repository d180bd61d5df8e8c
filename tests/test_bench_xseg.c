/* SPDX-License-Identifier: MIT */
/*
 * bench_xseg end to end against real peers on a private segment: every op
 * at iodepth 1 and 32, --verify round trips through noop --store, a
 * corrupted block and a wrong seed detected (exit 1, target and offset
 * named), failed requests counted, a target without a peer, a peer killed
 * mid-run (no hang), usage errors.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_peer_run.h"
#include "xseg_testutil.h"

struct env {
	struct xseg *seg;
	const char *name;
	pid_t peer;
	const char *log; /* tpr_tmpfile's: not freed */
};

/*
 * noop runs two workers, except under ThreadSanitizer: noop and bench_xseg
 * map the segment at different addresses, so TSan cannot see the
 * synchronisation through the queues and reports libxseg's writes to a
 * request reused by another worker as races. test_peer_threads runs the
 * framework multi-threaded on one mapping, where TSan sees everything.
 */
#ifdef AC_TSAN
#define NOOP_THREADS "1"
#else
#define NOOP_THREADS "2"
#endif

static void env_start(struct env *e, const char *tag, const char *const *extra)
{
	const char *argv[32] = {"noop", "-g", NULL,	   "-p",
				"1",	"-t", NOOP_THREADS};
	int n = 7;

	e->name = tpr_segment(tag, &e->seg);
	ck_assert_ptr_nonnull(e->name);
	argv[2] = e->name;
	while (extra && *extra)
		argv[n++] = *extra++;
	argv[n] = NULL;
	e->log = tpr_tmpfile(tag);
	e->peer = tpr_start(argv, e->log);
	ck_assert_int_gt(e->peer, 0);
	ck_assert_msg(tpr_wait_port(e->seg, 1, 10000) == 0,
		      "noop did not bind port 1: %s", tpr_slurp(e->log));
}

static void env_stop(struct env *e)
{
	ck_assert_int_eq(xtu_kill(e->peer, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(e->peer, 20000), 0);
	xseg_leave(e->seg);
}

/* Run bench_xseg -g SEG -p PORT ARGS...; returns the status. */
static int bench(struct env *e, const char *port, const char *const *args,
		 char **out, char **err)
{
	const char *argv[40] = {"bench_xseg", "-g", e->name, "-p", port};
	int n = 5;

	while (*args)
		argv[n++] = *args++;
	argv[n] = NULL;
	return tpr_run(argv, out, err, 120000);
}

START_TEST(all_ops)
{
	static const char *const ops[] = {"read",   "write", "info",
					  "delete", "ping",  "mixed"};
	static const char *const depths[] = {"1", "32"};
	struct env e;

	env_start(&e, "benchops", NULL);
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		for (size_t d = 0; d < 2; d++) {
			const char *args[] = {"-o",	ops[i], "-q", depths[d],
					      "-c",	"500",	"-n", "2",
					      "-O",	"64k",	"-P", "rand",
					      "--json", NULL};
			char *out, *err;
			int rc = bench(&e, "1", args, &out, &err);

			ck_assert_msg(rc == 0, "%s qd %s: status %d: %s",
				      ops[i], depths[d], rc, err);
			ck_assert_msg(strstr(out, "\"requests\":500,"),
				      "%s: %s", ops[i], out);
			ck_assert_msg(strstr(out, "\"errors\":0,"), "%s: %s",
				      ops[i], out);
			ck_assert_msg(strstr(out, "\"p99\":"), "%s", out);
			if (!strcmp(ops[i], "read") || !strcmp(ops[i], "write"))
				ck_assert_msg(strstr(out, "\"bytes\":2048000,"),
					      "%s", out);
			free(out);
			free(err);
		}
	}
	/* --fua: writes carry XSEG_F_FUA (noop serves them alike) and the
	 * report says so */
	{
		const char *fa[] = {"-o", "write", "--fua",  "-q", "4",
				    "-c", "50",	   "--json", NULL};
		char *out, *err;
		ck_assert_int_eq(bench(&e, "1", fa, &out, &err), 0);
		ck_assert_msg(strstr(out, "\"fua\":true"), "%s", out);
		ck_assert_msg(strstr(out, "\"errors\":0,"), "%s", out);
		free(out);
		free(err);
		const char *fm[] = {"-o", "mixed", "--fua", "-c", "20", NULL};
		ck_assert_int_eq(bench(&e, "1", fm, &out, &err), 0);
		ck_assert_msg(strstr(out, "bench_xseg: mixed fua "), "%s", out);
		free(out);
		free(err);
	}
	/* human report and the duration limit */
	const char *args[] = {"-o", "ping", "-T", "200ms", "--stages", NULL};
	char *out, *err;
	ck_assert_int_eq(bench(&e, "1", args, &out, &err), 0);
	ck_assert_msg(strstr(out, "lat (us): mean"), "%s", out);
	ck_assert_msg(strstr(out, "iops:"), "%s", out);
	ck_assert_msg(strstr(out, "stages (us, mean of "), "%s", out);
	free(out);
	free(err);
	env_stop(&e);
}
END_TEST

START_TEST(verify_roundtrip)
{
	const char *extra[] = {"--store", NULL};
	struct env e;
	char *out, *err;

	env_start(&e, "verify", extra);
	/* 2 objects of 256 KiB in 4 KiB blocks: 128 blocks */
	const char *w[] = {"-o",   "write",  "--verify", "-P", "rand",
			   "-q",   "32",     "-n",	 "2",  "-O",
			   "256k", "--json", NULL};
	ck_assert_int_eq(bench(&e, "1", w, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"requests\":128,"), "%s", out);
	free(out);
	free(err);
	const char *r[] = {"-o",   "read",   "--verify", "-P", "rand",
			   "-q",   "32",     "-n",	 "2",  "-O",
			   "256k", "--json", NULL};
	ck_assert_int_eq(bench(&e, "1", r, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"verified\":128,"), "%s", out);
	ck_assert_msg(strstr(out, "\"verify_errors\":0,"), "%s", out);
	free(out);
	free(err);
	/* sequential at depth 1, other block size: a different layout of
	 * stamps, written and checked in one mixed run */
	const char *m[] = {"-o", "mixed", "-M",	  "50",	    "--verify", "-q",
			   "8",	 "-n",	  "1",	  "-O",	    "64k",	"-b",
			   "1k", "-c",	  "2000", "--json", NULL};
	ck_assert_int_eq(bench(&e, "1", m, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"verify_errors\":0,"), "%s", out);
	ck_assert_msg(!strstr(out, "\"verified\":0,"), "%s", out);
	free(out);
	free(err);
	env_stop(&e);
}
END_TEST

/* One byte flipped by the peer in every READ that covers offset 8192 of an
 * object: the read pass fails, naming target and offset. */
/* --target addresses one object by its exact name (a vlmc volume): what it
 * wrote verifies by that name, and the same blocks under the prefix-derived
 * name NAME_000000 were never written (zeros: verification fails). */
START_TEST(exact_target)
{
	struct env e;
	const char *const store[] = {"--store", NULL};
	const char *w[] = {"-o",   "write", "--target", "vol.one", "-O",
			   "256k", "-b",    "16k",	"-q",	   "8",
			   "-P",   "rand",  "--verify", "--json",  NULL};
	const char *r[] = {"-o",   "read", "--target", "vol.one", "-O",
			   "256k", "-b",   "16k",      "-q",	  "8",
			   "-P",   "rand", "--verify", "--json",  NULL};
	const char *other[] = {"-o",   "read", "--prefix", "vol.one",  "-O",
			       "256k", "-b",   "16k",	   "--verify", NULL};
	const char *bad[] = {"-o", "write", "--target", "v", "-n", "2", NULL};
	char *out, *err;

	env_start(&e, "benchtarget", store);
	ck_assert_int_eq(bench(&e, "1", w, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"verify_errors\":0,"), "%s", out);
	free(out);
	free(err);
	ck_assert_int_eq(bench(&e, "1", r, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"verify_errors\":0,"), "%s", out);
	free(out);
	free(err);
	ck_assert_int_eq(bench(&e, "1", other, &out, &err), 1);
	ck_assert_msg(strstr(err, "vol.one_000000"), "%s", err);
	free(out);
	free(err);
	ck_assert_int_eq(bench(&e, "1", bad, &out, &err), 2);
	ck_assert_msg(strstr(err, "--target"), "%s", err);
	free(out);
	free(err);
	env_stop(&e);
}
END_TEST

START_TEST(verify_detects_corruption)
{
	const char *extra[] = {"--store", "--corrupt-offset", "8192", NULL};
	struct env e;
	char *out, *err;

	env_start(&e, "corrupt", extra);
	const char *w[] = {"-o", "write", "--verify", "-n",
			   "1",	 "-O",	  "64k",      NULL};
	ck_assert_int_eq(bench(&e, "1", w, &out, &err), 0);
	free(out);
	free(err);
	const char *r[] = {"-o",  "read", "--verify", "-n",	"1", "-O",
			   "64k", "-q",	  "4",	      "--json", NULL};
	ck_assert_int_eq(bench(&e, "1", r, &out, &err), 1);
	ck_assert_msg(strstr(out, "\"verify_errors\":1,"), "%s", out);
	ck_assert_msg(strstr(err, "read target bench_000000 offset 8192: "
				  "verify mismatch"),
		      "%s", err);
	free(out);
	free(err);
	/* a read with another seed sees stamps of seed 1 everywhere */
	const char *s[] = {"-o", "read", "--verify", "-n", "1",
			   "-O", "64k",	 "--seed",   "2",  NULL};
	ck_assert_int_eq(bench(&e, "1", s, &out, &err), 1);
	ck_assert_msg(strstr(err, "stamp of seed 1"), "%s", err);
	ck_assert_msg(strstr(out, "verify errors: 16"), "%s", out);
	free(out);
	free(err);
	env_stop(&e);
}
END_TEST

/* A peer that fails requests: errors are counted, shown with target and
 * offset, and make the exit status 1. */
START_TEST(request_errors)
{
	struct xseg *seg;
	const char *name = tpr_segment("benchfail", &seg);
	struct xtu_echo_opts o = {.segname = name, .port = 2};
	pid_t pid = xtu_fork(xtu_echo_server, &o);
	struct env e = {.seg = seg, .name = name};
	char *out, *err;

	ck_assert_int_eq(tpr_wait_port(seg, 2, 10000), 0);
	const char *a[] = {"-o", "read", "--prefix", "fail:x", "-c",
			   "40", "-q",	 "4",	     "--json", NULL};
	ck_assert_int_eq(bench(&e, "2", a, &out, &err), 1);
	ck_assert_msg(strstr(out, "\"errors\":40,"), "%s", out);
	ck_assert_msg(strstr(err, "read target fail:x_000000 offset 0: failed: "
				  "Input/output error"),
		      "%s", err);
	ck_assert_msg(strstr(err, "40 request(s) failed"), "%s", err);
	free(out);
	free(err);
	/* the same server answers other names */
	const char *b[] = {"-o", "read", "-c", "40", NULL};
	ck_assert_int_eq(bench(&e, "2", b, &out, &err), 0);
	free(out);
	free(err);
	xtu_kill(pid, SIGKILL);
	xtu_wait(pid, 10000);
	xseg_leave(seg);
}
END_TEST

START_TEST(no_peer)
{
	struct xseg *seg;
	const char *name = tpr_segment("nopeer", &seg);
	struct env e = {.seg = seg, .name = name};
	char *out, *err;
	const char *a[] = {"-o", "ping", "-c", "10", NULL};

	ck_assert_int_eq(bench(&e, "5", a, &out, &err), 1);
	ck_assert_msg(strstr(err, "port 5: cannot submit: no peer serves"),
		      "%s", err);
	free(out);
	free(err);
	/* its own dynamic port was released */
	for (uint32_t p = 8; p < 16; p++)
		ck_assert_int_eq(xseg_port_alive(seg, p), 0);
	xseg_leave(seg);
}
END_TEST

/* The peer dies with requests in flight: bench_xseg gets them back failed
 * (reaped) and exits 1 well before its timeout. */
START_TEST(peer_killed)
{
	const char *extra[] = {"--delay", "5s", NULL};
	struct env e;
	struct xseg_port_info pi;

	env_start(&e, "killed", extra);
	const char *blog = tpr_tmpfile("benchlog");
	const char *argv[] = {"bench_xseg", "-g",	 e.name, "-p", "1",
			      "-o",	    "read",	 "-q",	 "8",  "-c",
			      "8",	    "--timeout", "60s",	 NULL};
	pid_t b = tpr_start(argv, blog);
	for (int t = 0; t < 10000; t++) {
		ck_assert_int_eq(xseg_port_info(e.seg, 1, &pi), 0);
		if (pi.accepted >= 8)
			break;
		usleep(1000);
	}
	ck_assert_uint_eq(pi.accepted, 8);
	ck_assert_int_eq(xtu_kill(e.peer, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(e.peer, 10000), 128 + SIGKILL);
	ck_assert_int_eq(xtu_wait(b, 30000), 1);
	char *log = tpr_slurp(blog);
	ck_assert_msg(strstr(log, "Connection reset by peer"), "%s", log);
	ck_assert_msg(strstr(log, "8 request(s) failed"), "%s", log);
	free(log);
	xseg_leave(e.seg);
}
END_TEST

START_TEST(usage_errors)
{
	static const struct {
		const char *argv[12];
		int status;
		const char *msg;
	} cases[] = {
	    {{"bench_xseg", "--help", NULL}, 0, NULL},
	    {{"bench_xseg", "--version", NULL}, 0, NULL},
	    {{"bench_xseg", "-g", "s", NULL}, 2, "no target port"},
	    {{"bench_xseg", "-p", "1", NULL}, 2, "no segment"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-o", "scan", NULL},
	     2,
	     "bad op 'scan'"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-P", "zigzag", NULL},
	     2,
	     "bad pattern"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-b", "3k", "-O", "4k", NULL},
	     2,
	     "must divide"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-o", "ping", "--verify",
	      NULL},
	     2,
	     "--verify needs"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-T", "1s", "-c", "5", NULL},
	     2,
	     "exclude each other"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-q", "0", NULL},
	     2,
	     "bad iodepth"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-M", "101", NULL},
	     2,
	     "bad read percentage"},
	    {{"bench_xseg", "-g", "s", "-p", "1", "-o", "read", "--fua", NULL},
	     2,
	     "--fua needs write or mixed"},
	    {{"bench_xseg", "-g", "/tpr-no-such-seg", "-p", "1", NULL},
	     1,
	     "tpr-no-such-seg"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *out = NULL, *err = NULL;
		int rc = tpr_run(cases[i].argv, &out, &err, 20000);

		ck_assert_msg(rc == cases[i].status, "case %zu: status %d: %s",
			      i, rc, err);
		if (cases[i].msg)
			ck_assert_msg(strstr(err, cases[i].msg), "case %zu: %s",
				      i, err);
		if (i == 0)
			ck_assert_ptr_nonnull(strstr(out, "--iodepth"));
		free(out);
		free(err);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_xseg");
	TCase *tc = tcase_create("e2e");

	xtu_init();
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, all_ops);
	tcase_add_test(tc, verify_roundtrip);
	tcase_add_test(tc, exact_target);
	tcase_add_test(tc, verify_detects_corruption);
	tcase_add_test(tc, request_errors);
	tcase_add_test(tc, no_peer);
	tcase_add_test(tc, peer_killed);
	tcase_add_test(tc, usage_errors);
	suite_add_tcase(s, tc);
	return xtu_run_suite(s);
}
