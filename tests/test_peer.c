/* SPDX-License-Identifier: MIT */
/*
 * Peer framework tests, through the noop peer running as a real process on
 * a private segment: handlers are called, invalid requests are refused and
 * the peer keeps serving, graceful shutdown with requests in flight
 * completes them and releases the port, SIGUSR1 logs statistics without
 * disturbing service, daemon mode with a pid file, usage errors.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_peer_run.h"
#include "xseg_internal.h" /* to corrupt a statistics area */
#include "xseg_testutil.h"

#define SEC 1000000000ULL

/*
 * Two workers, except under ThreadSanitizer where the peer and this test
 * map the segment at different addresses: TSan then cannot see the
 * synchronisation through the queues and reports libxseg's writes to a
 * request reused by another worker as races. test_peer_threads runs the
 * framework with four workers on one mapping, where TSan sees everything.
 */
#ifdef AC_TSAN
#define NOOP_THREADS "1"
#else
#define NOOP_THREADS "2"
#endif

struct env {
	struct xseg *seg;
	const char *name;
	struct tpr_client cli;
	pid_t peer;
	const char *log; /* tpr_tmpfile's: not freed */
};

/* Create a segment and start noop on static port 1 with extra options. */
static void env_start(struct env *e, const char *tag, const char *const *extra)
{
	const char *argv[32] = {"noop", "-g", NULL, "-p", "1", "-v", "debug"};
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
	ck_assert_int_eq(tpr_client_open(&e->cli, e->name), 0);
}

/* Stop noop with SIGTERM and check it exits 0 and frees its port. */
static void env_stop(struct env *e)
{
	tpr_client_close(&e->cli);
	ck_assert_int_eq(xtu_kill(e->peer, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(e->peer, 20000), 0);
	ck_assert_int_eq(tpr_wait_port_free(e->seg, 1, 1000), 0);
	xseg_leave(e->seg);
}

START_TEST(handlers_called)
{
	const char *extra[] = {"-t",	      "2",     "--pattern", "171",
			       "--info-size", "12345", NULL};
	struct env e;
	struct xseg_request *req;
	unsigned char *d;

	env_start(&e, "handlers", extra);
	/* READ fills the pattern and reports the bytes */
	ck_assert_int_eq(tpr_roundtrip(&e.cli, 1, XSEG_OP_READ, "obj", 4096,
				       4096, 4096, &req),
			 0);
	ck_assert_uint_eq(req->serviced, 4096);
	d = xseg_request_data(e.cli.seg, req);
	for (int i = 0; i < 4096; i++)
		ck_assert_uint_eq(d[i], 171);
	xseg_put_request(e.cli.seg, req);
	/* INFO reports the configured size */
	ck_assert_int_eq(tpr_roundtrip(&e.cli, 1, XSEG_OP_INFO, "obj", 0, 0,
				       sizeof(struct xseg_reply_info), &req),
			 0);
	ck_assert_uint_eq(
	    ((struct xseg_reply_info *)xseg_request_data(e.cli.seg, req))->size,
	    12345);
	xseg_put_request(e.cli.seg, req);
	/* every other op succeeds */
	static const uint16_t ops[] = {XSEG_OP_WRITE, XSEG_OP_FLUSH,
				       XSEG_OP_DELETE, XSEG_OP_PING};
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		uint64_t sz = ops[i] == XSEG_OP_WRITE ? 512 : 0;
		ck_assert_int_eq(
		    tpr_roundtrip(&e.cli, 1, ops[i], "obj", 0, sz, sz, &req),
		    0);
		xseg_put_request(e.cli.seg, req);
	}
	ck_assert_int_eq(tpr_roundtrip(&e.cli, 1, XSEG_OP_HASH, "obj", 0, 0,
				       sizeof(struct xseg_reply_hash), &req),
			 0);
	xseg_put_request(e.cli.seg, req);
	env_stop(&e);
}
END_TEST

START_TEST(invalid_refused)
{
	struct env e;
	struct xseg_request *req;
	struct xseg_port_info pi;

	env_start(&e, "invalid", NULL);
	/* unknown op */
	int rc = tpr_roundtrip(&e.cli, 1, 77, "obj", 0, 0, 0, &req);
	ck_assert_msg(rc == EOPNOTSUPP, "got %d; noop log: %s", rc,
		      tpr_slurp(e.log));
	xseg_put_request(e.cli.seg, req);
	/* READ larger than its buffer */
	ck_assert_int_eq(xseg_get_request(e.cli.seg, e.cli.port, &req), 0);
	ck_assert_int_eq(xseg_prep_request(e.cli.seg, req, 3, 4096), 0);
	memcpy(req->target, "obj", 3);
	req->op = XSEG_OP_READ;
	req->size = req->data_cap + 1;
	ck_assert_int_eq(xseg_submit(e.cli.seg, req, 1), 0);
	struct xseg_request *rep;
	ck_assert_int_eq(xseg_wait_reply(e.cli.seg, e.cli.port, 10 * SEC, &rep),
			 0);
	ck_assert_int_eq(rep->error, EINVAL);
	xseg_put_request(e.cli.seg, rep);
	/* offset + size overflow */
	ck_assert_int_eq(tpr_roundtrip(&e.cli, 1, XSEG_OP_READ, "obj",
				       UINT64_MAX - 10, 4096, 4096, &req),
			 EINVAL);
	xseg_put_request(e.cli.seg, req);
	/* READ without a target */
	ck_assert_int_eq(
	    tpr_roundtrip(&e.cli, 1, XSEG_OP_READ, NULL, 0, 512, 512, &req),
	    EINVAL);
	xseg_put_request(e.cli.seg, req);
	/* the peer keeps serving */
	ck_assert_int_eq(xseg_port_alive(e.seg, 1), 1);
	ck_assert_int_eq(
	    tpr_roundtrip(&e.cli, 1, XSEG_OP_PING, NULL, 0, 0, 0, &req), 0);
	xseg_put_request(e.cli.seg, req);
	ck_assert_int_eq(xseg_port_info(e.seg, 1, &pi), 0);
	ck_assert_uint_ge(pi.rejected, 3);
	env_stop(&e);
}
END_TEST

/* Requests the peer has accepted when SIGTERM arrives are completed
 * (served, not failed), the peer exits 0 and its port is free. */
START_TEST(graceful_shutdown_inflight)
{
	const char *extra[] = {"--delay", "2s", "-t", "2", NULL};
	enum { N = 16 };
	struct xseg_request *reqs[N], *rep;
	struct xseg_port_info pi;
	struct env e;
	int served = 0;

	env_start(&e, "shutdown", extra);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(
		    xseg_get_request(e.cli.seg, e.cli.port, &reqs[i]), 0);
		ck_assert_int_eq(xseg_prep_request(e.cli.seg, reqs[i], 3, 512),
				 0);
		memcpy(reqs[i]->target, "obj", 3);
		reqs[i]->op = XSEG_OP_READ;
		ck_assert_int_eq(xseg_submit(e.cli.seg, reqs[i], 1), 0);
	}
	/* wait until all are accepted (held by the delay) */
	for (int t = 0; t < 5000; t++) {
		ck_assert_int_eq(xseg_port_info(e.seg, 1, &pi), 0);
		if (pi.accepted >= N)
			break;
		usleep(1000);
	}
	ck_assert_uint_eq(pi.accepted, N);
	/* some still held when the signal comes (not "none served": on a
	 * loaded machine the first delay may end before the last accept) */
	ck_assert_uint_lt(pi.served, N);
	ck_assert_int_eq(xtu_kill(e.peer, SIGTERM), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(
		    xseg_wait_reply(e.cli.seg, e.cli.port, 10 * SEC, &rep), 0);
		served += rep->error == 0;
		xseg_put_request(e.cli.seg, rep);
	}
	ck_assert_int_eq(served, N);
	ck_assert_int_eq(xtu_wait(e.peer, 20000), 0);
	ck_assert_int_eq(tpr_wait_port_free(e.seg, 1, 1000), 0);
	/* completions are 2 s after acceptance, so (but for a scheduler
	 * stalling noop for seconds) they are all in flight at SIGTERM; what
	 * matters is that none came back failed */
	char *log = tpr_slurp(e.log);
	const char *sd = strstr(log, "shutting down: ");
	ck_assert_msg(sd && atoi(sd + strlen("shutting down: ")) > 0, "%s",
		      log);
	ck_assert_msg(strstr(log, "port 1 released"), "%s", log);
	free(log);
	/* a new peer can bind the port again */
	const char *argv[] = {"noop", "-g", e.name, "-p", "1", NULL};
	pid_t again = tpr_start(argv, e.log);
	ck_assert_int_eq(tpr_wait_port(e.seg, 1, 10000), 0);
	ck_assert_int_eq(xtu_kill(again, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(again, 20000), 0);
	tpr_client_close(&e.cli);
	xseg_leave(e.seg);
}
END_TEST

/* N READs to noop's port 1, not waited for; returns once noop has
 * accepted them all (held by its --delay). */
static void submit_held(struct env *e, int n)
{
	struct xseg_request *req;
	struct xseg_port_info pi;

	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(
		    xseg_get_request(e->cli.seg, e->cli.port, &req), 0);
		ck_assert_int_eq(xseg_prep_request(e->cli.seg, req, 3, 512), 0);
		memcpy(req->target, "obj", 3);
		req->op = XSEG_OP_READ;
		ck_assert_int_eq(xseg_submit(e->cli.seg, req, 1), 0);
	}
	for (int t = 0; t < 5000; t++) {
		ck_assert_int_eq(xseg_port_info(e->seg, 1, &pi), 0);
		if (pi.accepted >= (uint64_t)n)
			break;
		usleep(1000);
	}
	ck_assert_uint_eq(pi.accepted, n);
}

/* The replies to n requests: each failed back with ECONNRESET. */
static void replies_reset(struct env *e, int n)
{
	struct xseg_request *rep;

	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(
		    xseg_wait_reply(e->cli.seg, e->cli.port, 60 * SEC, &rep),
		    0);
		ck_assert_int_eq(rep->error, ECONNRESET);
		xseg_put_request(e->cli.seg, rep);
	}
}

/* Requests that outlive the drain timeout are failed back by the port
 * release (ECONNRESET): the senders never wait forever. */
START_TEST(drain_timeout)
{
	const char *extra[] = {"--delay", "1h", "--drain-timeout", "200ms",
			       NULL};
	enum { N = 4 };
	struct env e;

	env_start(&e, "draintmo", extra);
	submit_held(&e, N);
	ck_assert_int_eq(xtu_kill(e.peer, SIGTERM), 0);
	replies_reset(&e, N);
	ck_assert_int_eq(xtu_wait(e.peer, 20000), 0);
	char *log = tpr_slurp(e.log);
	ck_assert_msg(strstr(log, "drain timeout: 4 request(s)"), "%s", log);
	free(log);
	ck_assert_int_eq(tpr_wait_port_free(e.seg, 1, 1000), 0);
	tpr_client_close(&e.cli);
	xseg_leave(e.seg);
}
END_TEST

static bool shutting_down(void *arg)
{
	char *log = tpr_slurp(arg);
	bool yes = strstr(log, "shutting down: ") != NULL;

	free(log);
	return yes;
}

/*
 * An operator's second SIGTERM cuts the drain short, and the log names it
 * "second stop signal": it came from another process. (A peer's own
 * peer_request_stop cuts the drain short too but is named as such:
 * test_cached_mp, test_unplug_stuck_keeps_path.)
 */
START_TEST(second_signal)
{
	/* the drain timeout only bounds a failure of this test */
	const char *extra[] = {"--delay", "1h", "--drain-timeout", "60s", NULL};
	enum { N = 4 };
	struct env e;

	env_start(&e, "second", extra);
	submit_held(&e, N);
	ck_assert_int_eq(xtu_kill(e.peer, SIGTERM), 0);
	/* the first signal taken: the second is not merged with it */
	ck_assert_int_eq(xtu_wait_until(shutting_down, (void *)e.log, 20000),
			 0);
	ck_assert_int_eq(xtu_kill(e.peer, SIGTERM), 0);
	replies_reset(&e, N);
	ck_assert_int_eq(xtu_wait(e.peer, 20000), 0);
	char *log = tpr_slurp(e.log);
	/* taken by the drain, or by the quiesce before it if a worker was
	 * still in its handler (then the drain is skipped: the replies
	 * above came at once either way) */
	ck_assert_msg(strstr(log, "second stop signal: not waiting for") &&
			  strstr(log, "4 request(s) in flight"),
		      "%s", log);
	ck_assert_msg(!strstr(log, "peer itself"), "%s", log);
	free(log);
	ck_assert_int_eq(tpr_wait_port_free(e.seg, 1, 1000), 0);
	tpr_client_close(&e.cli);
	xseg_leave(e.seg);
}
END_TEST

START_TEST(sigusr1_stats)
{
	struct env e;
	struct xseg_request *req;

	env_start(&e, "usr1", NULL);
	for (int i = 0; i < 200; i++) {
		if (i % 20 == 0)
			ck_assert_int_eq(xtu_kill(e.peer, SIGUSR1), 0);
		ck_assert_int_eq(tpr_roundtrip(&e.cli, 1, XSEG_OP_READ, "o", 0,
					       512, 512, &req),
				 0);
		xseg_put_request(e.cli.seg, req);
	}
	ck_assert_int_eq(xseg_port_alive(e.seg, 1), 1);
	/* Wait for a dump made after some reads (the one of the SIGUSR1
	 * sent after the first 20 round trips comes, however late the main
	 * thread takes it): waiting for any dump raced with the first one,
	 * made before any read, on a loaded machine. */
	char *log = NULL;
	for (int t = 0; t < 20000; t++) {
		free(log);
		log = tpr_slurp(e.log);
		if (strstr(log, "stats: by op (accepted/failed): read="))
			break;
		usleep(1000);
	}
	ck_assert_msg(strstr(log, "stats: port 1 up"), "%s", log);
	ck_assert_msg(strstr(log, "stats: by op (accepted/failed): read="),
		      "%s", log);
	ck_assert_msg(strstr(log, "stats: noop stored"), "%s", log);
	free(log);
	env_stop(&e);
}
END_TEST

/* Value of counter name in a statistics table, or UINT64_MAX. */
static uint64_t stat_value(const struct xseg_port_stats *ps, const char *name)
{
	for (uint32_t i = 0; i < ps->nr; i++)
		if (!strcmp(ps->stats[i].name, name))
			return ps->stats[i].value;
	return UINT64_MAX;
}

/* The framework publishes its counters in the port's statistics area
 * without any signal; xsegctl stats prints them; a SIGKILLed peer's last
 * numbers stay readable, marked as not running. */
START_TEST(stats_area_published)
{
	struct env e;
	struct xseg_request *req;
	struct xseg_port_stats ps;
	char *out = NULL, *err = NULL;
	int rc = -1;

	env_start(&e, "starea", NULL);
	for (int i = 0; i < 50; i++) {
		ck_assert_int_eq(tpr_roundtrip(&e.cli, 1, XSEG_OP_READ, "o", 0,
					       512, 512, &req),
				 0);
		xseg_put_request(e.cli.seg, req);
	}
	/* published every second: wait (bounded) until it shows the 50 */
	for (int t = 0; t < 20000; t++) {
		rc = xseg_port_stats_read(e.seg, 1, &ps);
		if (!rc && stat_value(&ps, "accepted") == 50 &&
		    stat_value(&ps, "in_flight") == 0)
			break;
		usleep(1000);
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(stat_value(&ps, "accepted"), 50);
	ck_assert_uint_eq(stat_value(&ps, "completed"), 50);
	ck_assert_uint_eq(stat_value(&ps, "threads"), 1);
	ck_assert_int_eq(ps.pid, e.peer);

	const char *sh[] = {"xsegctl", "stats", e.name, "1", NULL};
	ck_assert_int_eq(tpr_run(sh, &out, &err, 10000), 0);
	ck_assert_msg(strstr(out, "(alive)"), "%s", out);
	ck_assert_msg(strstr(out, "accepted               50"), "%s", out);
	free(out);
	free(err);
	const char *js[] = {"xsegctl", "stats", "--json", e.name, "1", NULL};
	ck_assert_int_eq(tpr_run(js, &out, &err, 10000), 0);
	ck_assert_msg(strstr(out, "\"publisher_alive\":true"), "%s", out);
	ck_assert_msg(strstr(out, "\"accepted\":50,"), "%s", out);
	free(out);
	free(err);
	/* a port nobody published on */
	const char *none[] = {"xsegctl", "stats", e.name, "2", NULL};
	ck_assert_int_eq(tpr_run(none, &out, &err, 10000), 0);
	ck_assert_msg(strstr(out, "none published"), "%s", out);
	free(out);
	free(err);
	const char *nonej[] = {"xsegctl", "stats", "--json", e.name, "2", NULL};
	ck_assert_int_eq(tpr_run(nonej, &out, &err, 10000), 0);
	ck_assert_msg(strstr(out, "\"peer_stats\":null"), "%s", out);
	free(out);
	free(err);

	/* SIGKILL: the numbers outlive the peer */
	tpr_client_close(&e.cli);
	ck_assert_int_eq(xtu_kill(e.peer, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(e.peer, 20000), 128 + SIGKILL);
	ck_assert_int_eq(xseg_port_stats_read(e.seg, 1, &ps), 0);
	ck_assert_int_eq(ps.pid, e.peer);
	ck_assert_uint_eq(stat_value(&ps, "accepted"), 50);
	ck_assert_int_eq(tpr_run(sh, &out, &err, 10000), 0);
	ck_assert_msg(strstr(out, "(not running)"), "%s", out);
	ck_assert_msg(strstr(out, "accepted               50"), "%s", out);
	free(out);
	free(err);
	xseg_leave(e.seg);
}
END_TEST

/* The area's API refuses bad input and changes nothing. */
START_TEST(stats_area_bad_input)
{
	struct xseg *seg;
	struct tpr_client cli;
	struct xseg_port_stats ps;
	struct xseg_stat st[XSEG_STATS_MAX + 1];
	const char *name = tpr_segment("stbad", &seg);

	ck_assert_ptr_nonnull(name);
	ck_assert_int_eq(tpr_client_open(&cli, name), 0);
	memset(st, 0, sizeof(st));
	for (unsigned i = 0; i <= XSEG_STATS_MAX; i++) {
		snprintf(st[i].name, sizeof(st[i].name), "c%u", i);
		st[i].value = 1000 + i;
	}
	/* reads */
	ck_assert_int_eq(xseg_port_stats_read(seg, xseg_nr_ports(seg), &ps),
			 -EINVAL);
	ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, NULL), -EINVAL);
	ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps), -ENOENT);
	/* publishes refused, nothing published */
	ck_assert_int_eq(
	    xseg_port_stats_publish(cli.seg, cli.port, st, XSEG_STATS_MAX + 1),
	    -EINVAL);
	ck_assert_int_eq(xseg_port_stats_publish(cli.seg, cli.port, NULL, 1),
			 -EINVAL);
	ck_assert_int_eq(
	    xseg_port_stats_publish(cli.seg, xseg_nr_ports(seg), st, 1),
	    -EINVAL);
	strcpy(st[1].name, "bad name");
	ck_assert_int_eq(xseg_port_stats_publish(cli.seg, cli.port, st, 2),
			 -EINVAL);
	st[1].name[0] = '\0';
	ck_assert_int_eq(xseg_port_stats_publish(cli.seg, cli.port, st, 2),
			 -EINVAL);
	memset(st[1].name, 'x', sizeof(st[1].name)); /* no NUL */
	ck_assert_int_eq(xseg_port_stats_publish(cli.seg, cli.port, st, 2),
			 -EINVAL);
	/* a port this process does not own (static port 1: free) */
	ck_assert_int_eq(xseg_port_stats_publish(cli.seg, 1, st, 1), -EPERM);
	ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps), -ENOENT);
	ck_assert_int_eq(xseg_port_stats_read(seg, 1, &ps), -ENOENT);
	/* a good one, read back through another mapping */
	strcpy(st[1].name, "c1");
	ck_assert_int_eq(
	    xseg_port_stats_publish(cli.seg, cli.port, st, XSEG_STATS_MAX), 0);
	ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps), 0);
	ck_assert_uint_eq(ps.nr, XSEG_STATS_MAX);
	ck_assert_uint_eq(ps.count, 1);
	ck_assert_int_eq(ps.pid, getpid());
	{
		char last[XSEG_STAT_NAME_LEN];

		snprintf(last, sizeof(last), "c%u", XSEG_STATS_MAX - 1);
		ck_assert_str_eq(ps.stats[XSEG_STATS_MAX - 1].name, last);
	}
	ck_assert_uint_eq(stat_value(&ps, "c7"), 1007);
	/* a corrupt table (a buggy or hostile process wrote the area) is
	 * refused by readers, not printed */
	{
		struct xseg_stats_copy *cp =
		    &seg->ports[cli.port].port->stats.copy[ps.count & 1];
		char keep = cp->stats[3].name[0];

		cp->stats[3].name[0] = '\x1b';
		ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps),
				 -EIO);
		cp->stats[3].name[0] = keep;
		memset(cp->stats[5].name, 'x', XSEG_STAT_NAME_LEN); /* no NUL */
		ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps),
				 -EIO);
		strcpy(cp->stats[5].name, "c5");
		ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps), 0);
	}
	/* a refused publish leaves the last table as it was */
	strcpy(st[0].name, "a b");
	ck_assert_int_eq(xseg_port_stats_publish(cli.seg, cli.port, st, 3),
			 -EINVAL);
	ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps), 0);
	ck_assert_uint_eq(ps.count, 1);
	ck_assert_uint_eq(ps.nr, XSEG_STATS_MAX);
	/* and the next good one replaces it whole */
	strcpy(st[0].name, "only");
	ck_assert_int_eq(xseg_port_stats_publish(cli.seg, cli.port, st, 1), 0);
	ck_assert_int_eq(xseg_port_stats_read(seg, cli.port, &ps), 0);
	ck_assert_uint_eq(ps.count, 2);
	ck_assert_uint_eq(ps.nr, 1);
	ck_assert_str_eq(ps.stats[0].name, "only");
	tpr_client_close(&cli);
	xseg_leave(seg);
}
END_TEST

START_TEST(dynamic_port)
{
	struct xseg *seg;
	const char *name = tpr_segment("dyn", &seg);
	const char *log = tpr_tmpfile("dyn");
	const char *argv[] = {"noop", "-g", name, "-p", "dynamic", NULL};
	pid_t pid = tpr_start(argv, log);
	struct xseg_port_info pi;
	uint32_t found = XSEG_NOPORT;

	for (int t = 0; t < 5000 && found == XSEG_NOPORT; t++) {
		for (uint32_t p = 8; p < 16; p++)
			if (xseg_port_info(seg, p, &pi) == 0 && pi.alive &&
			    !strcmp(pi.peer_type, "noop"))
				found = p;
		usleep(1000);
	}
	ck_assert_uint_ne(found, XSEG_NOPORT);
	struct tpr_client c;
	struct xseg_request *req;
	ck_assert_int_eq(tpr_client_open(&c, name), 0);
	ck_assert_int_eq(
	    tpr_roundtrip(&c, found, XSEG_OP_PING, NULL, 0, 0, 0, &req), 0);
	xseg_put_request(c.seg, req);
	tpr_client_close(&c);
	ck_assert_int_eq(xtu_kill(pid, SIGINT), 0);
	ck_assert_int_eq(xtu_wait(pid, 20000), 0);
	ck_assert_int_eq(tpr_wait_port_free(seg, found, 1000), 0);
	xseg_leave(seg);
}
END_TEST

/* A client that dies holding a port (and a request queued to it). */
static int child_dead_client(void *arg)
{
	const char *name = arg;
	struct xseg_request *req;
	struct xseg *seg;

	if (xseg_join(name, &seg, NULL, 0) || xseg_bind_port(seg, 3, "doomed"))
		return 1;
	if (xseg_get_request(seg, 3, &req) || xseg_prep_request(seg, req, 0, 0))
		return 2;
	_exit(0);
}

/* F3: a running peer reaps dead peers' ports by itself (protocol.md: peers
 * reap periodically); this test never calls anything that reaps. */
START_TEST(peer_reaps)
{
	struct env e;
	struct xseg_port_info pi;
	bool bound = true;

	env_start(&e, "preap", NULL);
	ck_assert_int_eq(
	    xtu_wait(xtu_fork(child_dead_client, (void *)e.name), 10000), 0);
	for (int t = 0; t < 1000 && bound; t++) {
		ck_assert_int_eq(xseg_port_info(e.seg, 3, &pi), 0);
		bound = pi.bound;
		usleep(10000);
	}
	ck_assert_msg(!bound, "port 3 of a dead process not reaped in 10 s");
	env_stop(&e);
}
END_TEST

/* --daemon returns once the peer serves; the pid file names it and is
 * removed at shutdown; a second instance with the same pid file fails. */
START_TEST(daemon_pidfile)
{
	struct xseg *seg;
	const char *name = tpr_segment("daemon", &seg);
	const char *pidfile = tpr_tmpfile("pid");
	const char *argv[] = {"noop",	  "-g",	       name,	"-p", "2",
			      "--daemon", "--pidfile", pidfile, NULL};
	char *err = NULL;
	long pid;

	int started = tpr_run(argv, NULL, &err, 20000);
	free(err);
	char *txt = tpr_slurp(pidfile);
	pid = atol(txt);
	free(txt);
	/* The daemon is not our child, so nothing kills it if this test dies:
	 * observe everything first, stop it, and only then assert. */
	int alive = xseg_port_alive(seg, 2);
	/* second instance on another port, same pid file */
	const char *argv2[] = {"noop",	   "-g",	name,	 "-p", "3",
			       "--daemon", "--pidfile", pidfile, NULL};
	int rc = tpr_run(argv2, NULL, &err, 20000);
	if (pid > 1)
		kill((pid_t)pid, SIGTERM);
	ck_assert_int_eq(started, 0);
	ck_assert_int_gt(pid, 1);
	ck_assert_int_eq(alive, 1);
	ck_assert_int_eq(rc, 1);
	ck_assert_msg(strstr(err, "locked by a running peer"), "%s", err);
	free(err);
	for (int t = 0; t < 20000 && access(pidfile, F_OK) == 0; t++)
		usleep(1000);
	ck_assert_int_ne(access(pidfile, F_OK), 0);
	ck_assert_int_eq(tpr_wait_port_free(seg, 2, 5000), 0);
	xseg_leave(seg);
}
END_TEST

/* Bad usage exits 2 with a one-line reason; a missing segment exits 1. */
START_TEST(usage_errors)
{
	static const struct {
		const char *argv[8];
		int status;
		const char *msg;
	} cases[] = {
	    {{"noop", "--help", NULL}, 0, NULL},
	    {{"noop", "--version", NULL}, 0, NULL},
	    {{"noop", "--bogus", NULL}, 2, "unknown option '--bogus'"},
	    {{"noop", "-p", "1", NULL}, 2, "no segment given"},
	    {{"noop", "-g", "x", NULL}, 2, "no port given"},
	    {{"noop", "-g", "x", "-p", "one", NULL}, 2, "bad port 'one'"},
	    {{"noop", "-g", "x", "-p", "1", "-t", "0", NULL},
	     2,
	     "bad thread count"},
	    {{"noop", "-g", "x", "-p", "1", "--info-size", "z", NULL},
	     2,
	     "bad value 'z' for --info-size"},
	    {{"noop", "-g", "x", "-p", "1", "--spin-policy", "sometimes", NULL},
	     2,
	     "bad spin policy 'sometimes'"},
	    {{"noop", "-g", "x", "-p", "1", "--active-workers", "some", NULL},
	     2,
	     "bad active worker count 'some'"},
	    {{"noop", "-g", "x", "-p", "1", "--active-workers", "1025", NULL},
	     2,
	     "bad active worker count '1025'"},
	    {{"noop", "-g", "x", "-p", "1", "--active-workers", "-1", NULL},
	     2,
	     "bad active worker count '-1'"},
	    {{"noop", "-g", "x", "-p", "1", "--cpus", "1-x", NULL},
	     2,
	     "bad CPU list '1-x'"},
	    /* a CPU no machine here has (sched_setaffinity: EINVAL) */
	    {{"noop", "-g", "x", "-p", "1", "--cpus", "1000", NULL},
	     2,
	     "cannot run on CPUs '1000'"},
	    {{"noop", "-g", "x", "-p", "1", "--spin", "soon", NULL},
	     2,
	     "bad spin time 'soon'"},
	    {{"noop", "-g", "x", "-p", "1", "extra", NULL},
	     2,
	     "unexpected argument 'extra'"},
	    {{"noop", "-g", "x", "-p", "1", "-g", NULL}, 2, "needs a value"},
	    {{"noop", "-g", "/tpr-no-such-segment", "-p", "1", NULL},
	     1,
	     "tpr-no-such-segment"},
	    /* a daemon reports its start-up failure to the caller */
	    {{"noop", "-g", "/tpr-no-such-segment", "-p", "1", "--daemon",
	      NULL},
	     1,
	     "tpr-no-such-segment"},
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
			ck_assert_ptr_nonnull(strstr(out, "--segment"));
		if (i == 1)
			ck_assert_ptr_nonnull(strstr(out, "noop"));
		free(out);
		free(err);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peer");
	TCase *tc = tcase_create("noop");

	xtu_init();
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, handlers_called);
	tcase_add_test(tc, invalid_refused);
	tcase_add_test(tc, graceful_shutdown_inflight);
	tcase_add_test(tc, drain_timeout);
	tcase_add_test(tc, second_signal);
	tcase_add_test(tc, sigusr1_stats);
	tcase_add_test(tc, stats_area_published);
	tcase_add_test(tc, stats_area_bad_input);
	tcase_add_test(tc, dynamic_port);
	tcase_add_test(tc, peer_reaps);
	tcase_add_test(tc, daemon_pidfile);
	tcase_add_test(tc, usage_errors);
	suite_add_tcase(s, tc);
	return xtu_run_suite(s);
}
