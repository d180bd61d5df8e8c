/* SPDX-License-Identifier: MIT */
/*
 * xsegctl: usage errors, create/info/destroy with configuration options,
 * listing ports with a live peer, redirects, statistics, reaping a peer
 * killed with SIGKILL; errors name the segment and the port.
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

/* Run xsegctl with args; returns the status, output in *out / *err. */
static int ctl(const char *const *args, char **out, char **err)
{
	const char *argv[24] = {"xsegctl"};
	int n = 1;

	while (*args)
		argv[n++] = *args++;
	argv[n] = NULL;
	return tpr_run(argv, out, err, 30000);
}

#define CTL_OK(...)                                                            \
	do {                                                                   \
		const char *a_[] = {__VA_ARGS__, NULL};                        \
		char *o_, *e_;                                                 \
		int rc_ = ctl(a_, &o_, &e_);                                   \
		ck_assert_msg(rc_ == 0, "%s: status %d: %s", a_[0], rc_, e_);  \
		free(o_);                                                      \
		free(e_);                                                      \
	} while (0)

START_TEST(usage_errors)
{
	static const struct {
		const char *argv[10];
		int status;
		const char *msg;
	} cases[] = {
	    {{"--help", NULL}, 0, NULL},
	    {{"--version", NULL}, 0, NULL},
	    {{NULL}, 2, "no command given"},
	    {{"frobnicate", "s", NULL}, 2, "unknown command 'frobnicate'"},
	    {{"create", NULL}, 2, "create: no segment given"},
	    {{"stats", "s", NULL}, 2, "expected 'stats SEGMENT PORT'"},
	    {{"redirect", "s", "1", NULL},
	     2,
	     "expected 'redirect SEGMENT PORT NEXT'"},
	    {{"list", "s", "extra", NULL}, 2, "expected 'list SEGMENT'"},
	    {{"list", "--size", "1M", "s", NULL}, 2, "only apply to create"},
	    {{"create", "--size", "lots", "s", NULL}, 2, "bad size 'lots'"},
	    {{"create", "--requests", "-3", "s", NULL},
	     2,
	     "bad number '-3' for --requests"},
	    {{"--bogus", NULL}, 2, "unknown option '--bogus'"},
	    {{"info", "/tpr-ctl-missing", NULL}, 1, "tpr-ctl-missing"},
	    {{"destroy", "/tpr-ctl-missing", NULL},
	     1,
	     "segment /tpr-ctl-missing: cannot destroy: no such segment"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *out = NULL, *err = NULL;
		int rc = ctl(cases[i].argv, &out, &err);

		ck_assert_msg(rc == cases[i].status, "case %zu: status %d: %s",
			      i, rc, err);
		if (cases[i].msg)
			ck_assert_msg(strstr(err, cases[i].msg), "case %zu: %s",
				      i, err);
		if (cases[i].status == 2)
			/* a one-line reason and the --help hint */
			ck_assert_msg(strchr(err, '\n') &&
					  strchr(strchr(err, '\n') + 1, '\n') ==
					      err + strlen(err) - 1,
				      "case %zu: %s", i, err);
		if (i == 0)
			ck_assert_ptr_nonnull(strstr(out, "redirect"));
		free(out);
		free(err);
	}
}
END_TEST

START_TEST(create_info_destroy)
{
	const char *name = xtu_segname("ctlcreate");
	char *out, *err;

	CTL_OK("create", "--size", "16M", "--static-ports", "4",
	       "--dynamic-ports", "4", "--requests", "64", "--free-cache", "8",
	       "--data-size", "8k", name);
	const char *info[] = {"info", "--json", name, NULL};
	ck_assert_int_eq(ctl(info, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"size\":16777216,"), "%s", out);
	ck_assert_msg(strstr(out, "\"static_ports\":4,"), "%s", out);
	ck_assert_msg(strstr(out, "\"dynamic_ports\":4,"), "%s", out);
	ck_assert_msg(strstr(out, "\"requests\":64,"), "%s", out);
	ck_assert_msg(strstr(out, "\"free_cache\":8,"), "%s", out);
	ck_assert_msg(strstr(out, "\"default_data_size\":8192,"), "%s", out);
	free(out);
	free(err);
	const char *human[] = {"info", name, NULL};
	ck_assert_int_eq(ctl(human, &out, &err), 0);
	ck_assert_msg(strstr(out, "4 static (0..3), 4 dynamic"), "%s", out);
	free(out);
	free(err);
	/* creating it again fails and names it */
	const char *again[] = {"create", name, NULL};
	ck_assert_int_eq(ctl(again, &out, &err), 1);
	ck_assert_msg(strstr(err, name + 1), "%s", err);
	free(out);
	free(err);
	/* a configuration the library refuses */
	const char *bad[] = {
	    "create", "--static-ports", "0", "--dynamic-ports", "0", name,
	    NULL};
	ck_assert_int_eq(ctl(bad, &out, &err), 1);
	free(out);
	free(err);
	CTL_OK("destroy", name);
	xtu_forget_segname(name);
	const char *gone[] = {"info", name, NULL};
	ck_assert_int_eq(ctl(gone, &out, &err), 1);
	free(out);
	free(err);
}
END_TEST

START_TEST(list_redirect_stats)
{
	struct xseg *seg;
	const char *name = tpr_segment("ctllist", &seg);
	char *log = tpr_tmpfile("ctllist");
	const char *argv[] = {"noop", "-g", name, "-p", "1", NULL};
	pid_t peer = tpr_start(argv, log);
	char *out, *err;

	ck_assert_int_eq(tpr_wait_port(seg, 1, 10000), 0);
	/* some traffic for the counters */
	const char *b[] = {"bench_xseg", "-g",	 name, "-p",  "1",
			   "-o",	 "ping", "-c", "100", NULL};
	ck_assert_int_eq(tpr_run(b, NULL, NULL, 60000), 0);

	const char *list[] = {"list", name, NULL};
	ck_assert_int_eq(ctl(list, &out, &err), 0);
	char pidstr[32];
	snprintf(pidstr, sizeof(pidstr), " %ld ", (long)peer);
	ck_assert_msg(strstr(out, "noop"), "%s", out);
	ck_assert_msg(strstr(out, pidstr), "%s", out);
	ck_assert_msg(strstr(out, "alive"), "%s", out);
	ck_assert_msg(!strstr(out, "\n2 "), "unbound port listed: %s", out);
	free(out);
	free(err);
	const char *all[] = {"list", "--all", name, NULL};
	ck_assert_int_eq(ctl(all, &out, &err), 0);
	ck_assert_msg(strstr(out, "\n15d "), "%s", out);
	free(out);
	free(err);

	CTL_OK("redirect", name, "1", "3");
	ck_assert_uint_eq(xseg_get_path_next(seg, 1), 3);
	const char *lj[] = {"list", "--json", name, NULL};
	ck_assert_int_eq(ctl(lj, &out, &err), 0);
	ck_assert_msg(strstr(out, "{\"port\":1,\"dynamic\":false,\"state\":"
				  "\"alive\""),
		      "%s", out);
	ck_assert_msg(strstr(out, "\"path_next\":3,"), "%s", out);
	free(out);
	free(err);
	/* traffic for port 1 now reaches a peer on port 3 */
	const char *argv3[] = {"noop", "-g", name, "-p", "3", NULL};
	pid_t peer3 = tpr_start(argv3, log);
	struct xseg_port_info pi3;
	ck_assert_int_eq(tpr_wait_port(seg, 3, 10000), 0);
	const char *b50[] = {"bench_xseg", "-g",   name, "-p", "1",
			     "-o",	   "ping", "-c", "50", NULL};
	ck_assert_int_eq(tpr_run(b50, NULL, NULL, 60000), 0);
	ck_assert_int_eq(xseg_port_info(seg, 3, &pi3), 0);
	ck_assert_uint_eq(pi3.served, 50);
	ck_assert_int_eq(xtu_kill(peer3, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(peer3, 20000), 0);

	CTL_OK("unredirect", name, "1");
	ck_assert_uint_eq(xseg_get_path_next(seg, 1), XSEG_NOPORT);

	/* errors name segment and port; nothing changes */
	const char *r1[] = {"redirect", name, "1", "99", NULL};
	ck_assert_int_eq(ctl(r1, &out, &err), 1);
	ck_assert_msg(strstr(err, "port 99: no such port (ports are 0..15)"),
		      "%s", err);
	ck_assert_msg(strstr(err, name + 1), "%s", err);
	free(out);
	free(err);
	const char *r2[] = {"redirect", name, "1", "1", NULL};
	ck_assert_int_eq(ctl(r2, &out, &err), 1);
	ck_assert_msg(strstr(err, "port 1: cannot redirect a port to itself"),
		      "%s", err);
	free(out);
	free(err);
	const char *r3[] = {"stats", name, "x1", NULL};
	ck_assert_int_eq(ctl(r3, &out, &err), 1);
	ck_assert_msg(strstr(err, "bad port 'x1'"), "%s", err);
	free(out);
	free(err);
	ck_assert_uint_eq(xseg_get_path_next(seg, 1), XSEG_NOPORT);

	const char *st[] = {"stats", "--json", name, "1", NULL};
	ck_assert_int_eq(ctl(st, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"peer_type\":\"noop\""), "%s", out);
	ck_assert_msg(strstr(out, "\"served\":100,"), "%s", out);
	free(out);
	free(err);
	const char *sh[] = {"stats", name, "1", NULL};
	ck_assert_int_eq(ctl(sh, &out, &err), 0);
	ck_assert_msg(strstr(out, "served 100"), "%s", out);
	free(out);
	free(err);

	ck_assert_int_eq(xtu_kill(peer, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(peer, 20000), 0);
	xseg_leave(seg);
}
END_TEST

/* A port's owner dies holding unflushed write-back data: list shows the
 * count, unredirect of the port redirected to it reclaims it first (the
 * loss is counted and logged before the redirect goes), info shows the
 * segment's loss counter. */
static int wb_victim(void *arg)
{
	struct xseg *seg;

	if (xseg_join(arg, &seg, NULL, 0) || xseg_bind_port(seg, 2, "cached"))
		return 1;
	xseg_port_unflushed_add(seg, 2, 3);
	raise(SIGKILL);
	return 2;
}

START_TEST(writeback_loss_visible)
{
	struct xseg *seg;
	const char *name = tpr_segment("ctlwbl", &seg);
	pid_t victim = xtu_fork(wb_victim, (void *)name);
	char *out, *err;

	ck_assert_int_gt(victim, 0);
	ck_assert_int_eq(xtu_wait(victim, 10000), 128 + SIGKILL);
	ck_assert_int_eq(xseg_set_path_next(seg, 1, 2), 0);
	const char *lj[] = {"list", "--json", name, NULL};
	ck_assert_int_eq(ctl(lj, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"reaped\":0,\"unflushed\":3}"), "%s", out);
	free(out);
	free(err);
	const char *lt[] = {"list", name, NULL};
	ck_assert_int_eq(ctl(lt, &out, &err), 0);
	ck_assert_msg(strstr(out, "UNFLUSHED"), "%s", out);
	free(out);
	free(err);
	const char *ij[] = {"info", "--json", name, NULL};
	ck_assert_int_eq(ctl(ij, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"writeback_losses\":0}"), "%s", out);
	free(out);
	free(err);
	const char *un[] = {"unredirect", name, "1", NULL};
	ck_assert_int_eq(ctl(un, &out, &err), 0);
	ck_assert_msg(strstr(err, "port 2 (cached, pid ") &&
			  strstr(err, "reclaimed holding 3 unflushed"),
		      "%s", err);
	free(out);
	free(err);
	ck_assert_uint_eq(xseg_get_path_next(seg, 1), XSEG_NOPORT);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_int_eq(ctl(ij, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"writeback_losses\":1}"), "%s", out);
	free(out);
	free(err);
	const char *it[] = {"info", name, NULL};
	ck_assert_int_eq(ctl(it, &out, &err), 0);
	ck_assert_msg(strstr(out, "write-back losses: 1 ("), "%s", out);
	free(out);
	free(err);
	const char *st[] = {"stats", name, "2", NULL};
	ck_assert_int_eq(ctl(st, &out, &err), 0);
	ck_assert_msg(strstr(out, "unflushed:     0 "), "%s", out);
	free(out);
	free(err);
	xseg_leave(seg);
}
END_TEST

/* A peer killed with SIGKILL is listed dead; reap frees its port. */
START_TEST(reap_dead_peer)
{
	struct xseg *seg;
	const char *name = tpr_segment("ctlreap", &seg);
	char *log = tpr_tmpfile("ctlreap");
	const char *argv[] = {"noop", "-g", name, "-p", "2", NULL};
	pid_t peer = tpr_start(argv, log);
	char *out, *err;

	ck_assert_int_eq(tpr_wait_port(seg, 2, 10000), 0);
	ck_assert_int_eq(xtu_kill(peer, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(peer, 10000), 128 + SIGKILL);
	const char *list[] = {"list", name, NULL};
	ck_assert_int_eq(ctl(list, &out, &err), 0);
	ck_assert_msg(strstr(out, "dead"), "%s", out);
	free(out);
	free(err);
	const char *reap[] = {"reap", "--json", name, NULL};
	ck_assert_int_eq(ctl(reap, &out, &err), 0);
	ck_assert_msg(strstr(out, "\"ports_reclaimed\":1,"), "%s", out);
	/* A peer killed while idle moved nothing: no second index. */
	ck_assert_msg(
	    strstr(out, "\"requests_redelivered\":0,\"writeback_losses\":0}"),
	    "%s", out);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(list, &out, &err), 0);
	ck_assert_msg(!strstr(out, "dead"), "%s", out);
	free(out);
	free(err);
	ck_assert_int_eq(tpr_wait_port_free(seg, 2, 1000), 0);
	xseg_leave(seg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xsegctl");
	TCase *tc = tcase_create("cli");

	xtu_init();
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, usage_errors);
	tcase_add_test(tc, create_info_destroy);
	tcase_add_test(tc, list_redirect_stats);
	tcase_add_test(tc, reap_dead_peer);
	tcase_add_test(tc, writeback_loss_visible);
	suite_add_tcase(s, tc);
	return xtu_run_suite(s);
}
