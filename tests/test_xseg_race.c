/* SPDX-License-Identifier: MIT */
/*
 * libxseg: requests stranded by a kill at the wrong instruction (review
 * finding F7), and the races of those hand-overs with a live actor.
 *
 * Every hand-over of a request is "store the state word, then enqueue the
 * index" (submit, forward, respond, a fail-back), and every take is
 * "dequeue, then CAS the word" (accept, receive). A process SIGKILLed
 * between the two steps leaves the request on no queue. These tests run
 * the library's real code up to that instant in a child and kill it there
 * (a test hook compiled into a private copy of libxseg: XSEG_TEST_HOOKS,
 * see xseg_internal.h), then reap from the parent and check that the
 * request is settled exactly once: the sender gets one answer (served, or
 * failed with ECONNRESET), no second index delivers it again, and the
 * request pool is whole afterwards.
 *
 * The "live" cases run the reaper inside the hook instead, in the same
 * process, between the live actor's two steps: the CAS on the word must
 * settle the race (one answer, pool whole).
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xseg.h"
#include "xseg_internal.h"
#include "xseg_testutil.h"

#define MS	 (1000ULL * 1000)
#define NR_REQS	 64
#define KILLED	 (128 + SIGKILL)
#define NO_POINT (-1)

/* ---------------------------------------------------------------------- */
/* Hooks                                                                  */

static int g_point = NO_POINT;	    /* where the hook acts */
static struct xseg *g_reap_seg;	    /* live cases: reap here instead */
static struct xseg_reap_stats g_st; /* what that reap did */
static int g_reaped = -1;

static void hook(enum xseg_test_point pt, struct xseg_request *req)
{
	(void)req;
	if ((int)pt != g_point)
		return;
	g_point = NO_POINT; /* once */
	if (g_reap_seg) {
		g_reaped = xseg_reap(g_reap_seg, &g_st);
		return;
	}
	raise(SIGKILL);
}

/* Die (SIGKILL) when this process reaches pt. */
static void die_at(int pt)
{
	g_reap_seg = NULL;
	g_point = pt;
	xseg_test_hook = hook;
}

/* Run xseg_reap(seg) in this process when it reaches pt. */
static void reap_at(struct xseg *seg, int pt)
{
	g_reap_seg = seg;
	g_reaped = -1;
	memset(&g_st, 0, sizeof(g_st));
	g_point = pt;
	xseg_test_hook = hook;
}

static void no_hook(void)
{
	xseg_test_hook = NULL;
	g_point = NO_POINT;
	g_reap_seg = NULL;
}

/* ---------------------------------------------------------------------- */
/* Helpers                                                                */

static struct xseg *mkseg(const char *tag, const char **namep)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	const char *name = xtu_segname(tag);
	struct xseg *seg = NULL;
	int rc;

	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = 4;
	cfg.nr_requests = NR_REQS;
	cfg.free_cache = 4;
	rc = xseg_create(name, &cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create %s: %s", name, err);
	*namep = name;
	return seg;
}

static void wait_bound(struct xseg *seg, uint32_t port)
{
	uint64_t deadline = xtu_now_ms() + 10000;

	while (xseg_port_alive(seg, port) != 1) {
		ck_assert_msg(xtu_now_ms() < deadline, "port %u never bound",
			      port);
		usleep(1000);
	}
}

/* A PING from client port `from` to `to`. */
static struct xseg_request *send_ping(struct xseg *seg, uint32_t from,
				      uint32_t to)
{
	struct xseg_request *req;

	ck_assert_int_eq(xseg_get_request(seg, from, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
	req->target[0] = 'p';
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, to), 0);
	return req;
}

/* Exactly one reply to req on port, with error err; then nothing more,
 * even after another reap (which would find a stale index). */
static void expect_one_reply(struct xseg *seg, uint32_t port,
			     struct xseg_request *req, int err)
{
	struct xseg_request *rep;

	ck_assert_int_eq(xseg_receive(seg, port, &rep), 0);
	ck_assert_ptr_eq(rep, req);
	ck_assert_int_eq(rep->error, err);
	ck_assert_int_eq(xseg_receive(seg, port, &rep), -EAGAIN);
	ck_assert_int_ge(xseg_reap(seg, NULL), 0);
	ck_assert_int_eq(xseg_receive(seg, port, &rep), -EAGAIN);
	ck_assert_int_eq(xseg_put_request(seg, req), 0);
}

/* Nothing queued for port as a server. */
static void expect_no_request(struct xseg *seg, uint32_t port)
{
	struct xseg_request *r;

	ck_assert_int_eq(xseg_accept(seg, port, &r), -EAGAIN);
}

/* All requests back: in the pool or a free queue. A reap first returns
 * what stale indexes on free ports still name. */
static void expect_pool_whole(struct xseg *seg)
{
	ck_assert_int_ge(xseg_reap(seg, NULL), 0);
	ck_assert_uint_eq(xtu_free_requests(seg), NR_REQS);
}

/* A serving child: bind port, take one request, then act on it (respond,
 * forward to next, or nothing) with the hook armed at point. If the hook
 * did not kill it, it exits without releasing the port (dead owner). */
enum child_act { ACT_NOTHING, ACT_RESPOND, ACT_FORWARD };

struct server_arg {
	const char *name;
	uint32_t port, next;
	enum child_act act;
	int point;
};

static int child_server(void *arg)
{
	struct server_arg *a = arg;
	uint64_t deadline = xtu_now_ms() + 10000;
	struct xseg_request *r;
	struct xseg *seg;
	int rc;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, a->port, "victim"))
		return 1;
	die_at(a->point);
	while ((rc = xseg_accept(seg, a->port, &r)) != 0) {
		if (rc != -EAGAIN || xtu_now_ms() > deadline)
			return 2;
		xseg_wait(seg, a->port, 10 * MS);
	}
	if (a->act == ACT_RESPOND)
		rc = xseg_respond(seg, r, 0);
	else if (a->act == ACT_FORWARD)
		rc = xseg_forward(seg, r, a->next);
	if (rc)
		return 3;
	_exit(0);
}

static pid_t start_server(struct xseg *seg, struct server_arg *a)
{
	pid_t pid = xtu_fork(child_server, a);

	ck_assert_int_gt(pid, 0);
	wait_bound(seg, a->port);
	return pid;
}

/* ---------------------------------------------------------------------- */
/* Killed between the two steps of a hand-over                           */

/* (a) accept killed after its dequeue, before its CAS: (SUBMITTED, dead
 * port) on no queue. The reap of the acceptor fails it back. */
START_TEST(test_accept_killed_after_dequeue)
{
	struct server_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *req;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("acckill", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	a = (struct server_arg){name, 1, 0, ACT_NOTHING,
				XSEG_TP_ACCEPT_DEQUEUED};
	pid = start_server(seg, &a);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	ck_assert_uint_eq(xseg_rs_state(xseg_rs_load(req)), XSEG_RS_SUBMITTED);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_failed, 1);
	expect_one_reply(seg, 0, req, ECONNRESET);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* (b) forward killed after its store of (SUBMITTED, next), before the
 * enqueue: held by the live next port, on no queue. The reap of the
 * forwarder completes the hand-over: the next port gets it once. */
START_TEST(test_forward_killed_before_enqueue)
{
	struct server_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *req, *acc;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("fwdkill", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 2, "store"), 0);
	a = (struct server_arg){name, 1, 2, ACT_FORWARD,
				XSEG_TP_FORWARD_STORED};
	pid = start_server(seg, &a);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	/* Stranded: the store has nothing queued, the client no reply. */
	expect_no_request(seg, 2);
	ck_assert_int_eq(xseg_receive(seg, 0, &acc), -EAGAIN);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_redelivered, 1);
	ck_assert_uint_eq(st.requests_failed, 0);
	ck_assert_int_eq(xseg_accept(seg, 2, &acc), 0);
	ck_assert_ptr_eq(acc, req);
	ck_assert_uint_eq(acc->src, 0);
	ck_assert_uint_eq(acc->dst, 1);
	expect_no_request(seg, 2);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	expect_one_reply(seg, 0, req, 0);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* A forwarder that dies right after a complete forward (it cleared its
 * mark after the enqueue): the reap has nothing to settle, the next port
 * gets the request once. */
START_TEST(test_forward_completed_then_killed)
{
	struct server_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *req, *acc;
	struct xseg_port_info pi0, pi1;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("fwddone", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 2, "store"), 0);
	a = (struct server_arg){name, 1, 2, ACT_FORWARD, NO_POINT};
	pid = start_server(seg, &a);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi0), 0);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_redelivered, 0);
	ck_assert_uint_eq(st.requests_failed, 0);
	ck_assert_int_eq(xseg_accept(seg, 2, &acc), 0);
	ck_assert_ptr_eq(acc, req);
	expect_no_request(seg, 2);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi1), 0);
	ck_assert_uint_eq(pi1.accepted, pi0.accepted + 1);
	ck_assert_uint_eq(pi1.rejected, pi0.rejected);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	expect_one_reply(seg, 0, req, 0);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* (c) respond killed after its store of (SERVED, client), before the
 * enqueue: held by the live client, never delivered. The reap of the
 * responder delivers the answer once. */
START_TEST(test_respond_killed_before_enqueue)
{
	struct server_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *req, *rep;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("rspkill", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	a = (struct server_arg){name, 1, 0, ACT_RESPOND,
				XSEG_TP_RESPOND_STORED};
	pid = start_server(seg, &a);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	ck_assert_uint_eq(xseg_rs_state(xseg_rs_load(req)), XSEG_RS_SERVED);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_redelivered, 1);
	ck_assert_uint_eq(st.requests_failed, 0);
	expect_one_reply(seg, 0, req, 0); /* served, not failed */
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* respond killed after its enqueue, before it clears its mark: the reply
 * is queued, but the reap cannot know and queues it again. The client
 * receives it once. */
START_TEST(test_respond_killed_after_enqueue)
{
	struct server_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *req;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("rspdone", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	a = (struct server_arg){name, 1, 0, ACT_RESPOND,
				XSEG_TP_RESPOND_ENQUEUED};
	pid = start_server(seg, &a);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_redelivered, 1);
	expect_one_reply(seg, 0, req, 0);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* A reaper killed inside its own fail-back, after its store of (FAILED,
 * client), before the enqueue. The port it was reclaiming stays claimed
 * by a dead process; the next reap takes it over and delivers the
 * failure once. */
static int child_reaper(void *arg)
{
	const char *name = arg;
	struct xseg *seg;

	if (xseg_join(name, &seg, NULL, 0))
		return 1;
	die_at(XSEG_TP_FAILBACK_STORED);
	xseg_reap(seg, NULL);
	return 2; /* the hook did not fire */
}

START_TEST(test_failback_killed_before_enqueue)
{
	struct server_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *req, *rep;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("fbkill", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	/* The server accepts and dies holding the request (ACCEPTED). */
	a = (struct server_arg){name, 1, 0, ACT_NOTHING, NO_POINT};
	pid = start_server(seg, &a);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);
	ck_assert_uint_eq(xseg_rs_state(xseg_rs_load(req)), XSEG_RS_ACCEPTED);
	/* Its reaper dies half-way through failing it back. */
	pid = xtu_fork(child_reaper, (void *)name);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	ck_assert_uint_eq(xseg_rs_state(xseg_rs_load(req)), XSEG_RS_FAILED);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_redelivered, 1);
	expect_one_reply(seg, 0, req, ECONNRESET);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* A client killed in submit after its store, before the enqueue: the
 * request is held by the live server but on no queue, and its reply would
 * go to a dead port. The reap of the client returns it to the pool (it
 * used to leak: the pool shrank by one for good). */
struct client_arg {
	const char *name;
	uint32_t server;
	int point;
	int up; /* pipe to the parent: 's' after the submit */
};

static int child_client(void *arg)
{
	struct client_arg *a = arg;
	struct xseg_request *req, *rep;
	struct xseg *seg;
	uint32_t port;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_alloc_port(seg, "doomed", &port))
		return 1;
	if (xseg_get_request(seg, port, &req) ||
	    xseg_prep_request(seg, req, 1, 0))
		return 2;
	req->target[0] = 'c';
	req->op = XSEG_OP_PING;
	die_at(a->point);
	if (xseg_submit(seg, req, a->server))
		return 3;
	if (a->up >= 0 && write(a->up, "s", 1) != 1)
		return 4;
	if (xseg_wait_reply(seg, port, 10000 * MS, &rep))
		return 5;
	return 6; /* the hook did not fire */
}

START_TEST(test_submit_killed_before_enqueue)
{
	struct client_arg a;
	struct xseg_reap_stats st;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("subkill", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "server"), 0);
	a = (struct client_arg){name, 1, XSEG_TP_SUBMIT_STORED, -1};
	pid = xtu_fork(child_client, &a);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	expect_no_request(seg, 1);
	ck_assert_uint_eq(xtu_free_requests(seg), NR_REQS - 1);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_freed, 1);
	expect_no_request(seg, 1);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* A client killed in receive after its dequeue, before its CAS: the reply
 * is (SERVED, dead client) on no queue. The reap returns it to the pool
 * (it used to skip SERVED requests held by the port: a leak). */
START_TEST(test_receive_killed_after_dequeue)
{
	struct client_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *acc;
	struct xseg *seg;
	const char *name;
	int fds[2];
	char c;
	pid_t pid;

	seg = mkseg("rcvkill", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "server"), 0);
	ck_assert_int_eq(pipe(fds), 0);
	a = (struct client_arg){name, 1, XSEG_TP_RECEIVE_DEQUEUED, fds[1]};
	pid = xtu_fork(child_client, &a);
	/* Only the child writes: if it fails early, read sees EOF now
	 * instead of blocking until the test's timeout (review 3, F6). */
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	ck_assert_uint_eq(xseg_rs_state(xseg_rs_load(acc)), XSEG_RS_SERVED);
	ck_assert_uint_eq(xtu_free_requests(seg), NR_REQS - 1);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_freed, 1);
	expect_pool_whole(seg);
	close(fds[0]);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* A live actor between its two steps while a reaper runs                 */

/* A child that binds port and exits without releasing it. */
static int child_bind_and_die(void *arg)
{
	struct server_arg *a = arg;
	struct xseg *seg;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, a->port, "doomed"))
		return 1;
	_exit(0);
}

static void dead_owner(struct xseg *seg, const char *name, uint32_t port)
{
	struct server_arg a = {name, port, 0, ACT_NOTHING, NO_POINT};

	ck_assert_int_eq(xtu_wait(xtu_fork(child_bind_and_die, &a), 10000), 0);
	ck_assert_int_eq(xseg_port_alive(seg, port), 0);
}

/* A live client submits to a port whose owner died unnoticed; the reaper
 * runs between the client's store and its enqueue. The reaper's CAS fails
 * the request back; the client's late enqueue is a stale index. */
START_TEST(test_live_submit_vs_reaper)
{
	struct xseg_request *req;
	struct xseg *seg;
	const char *name;

	seg = mkseg("livesub", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	dead_owner(seg, name, 1);
	reap_at(seg, XSEG_TP_SUBMIT_STORED);
	req = send_ping(seg, 0, 1); /* submit returns 0 */
	no_hook();
	ck_assert_int_eq(g_reaped, 1);
	ck_assert_uint_eq(g_st.requests_failed, 1);
	expect_one_reply(seg, 0, req, ECONNRESET);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* A live forwarder forwards to a port whose owner died unnoticed; the
 * reaper runs between the forwarder's store and its enqueue. */
START_TEST(test_live_forward_vs_reaper)
{
	struct xseg_request *req, *acc;
	struct xseg *seg;
	const char *name;

	seg = mkseg("livefwd", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "cache"), 0);
	dead_owner(seg, name, 2);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
	reap_at(seg, XSEG_TP_FORWARD_STORED);
	ck_assert_int_eq(xseg_forward(seg, acc, 2), 0);
	no_hook();
	ck_assert_int_eq(g_reaped, 1);
	ck_assert_uint_eq(g_st.requests_failed, 1);
	expect_one_reply(seg, 0, req, ECONNRESET);
	expect_no_request(seg, 1);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* A live server answers a client that died; the reaper of the client runs
 * between the server's store and its enqueue: it frees the reply (nobody
 * will read it), and the server's late enqueue is a stale index on the
 * free port's reply queue that the next reap drops. */
START_TEST(test_live_respond_vs_reaper)
{
	struct client_arg a;
	struct xseg_request *acc;
	struct xseg *seg;
	const char *name;
	int fds[2];
	char c;
	pid_t pid;

	seg = mkseg("liversp", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "server"), 0);
	ck_assert_int_eq(pipe(fds), 0);
	/* A client that submits, says so, and is then killed waiting. */
	a = (struct client_arg){name, 1, NO_POINT, fds[1]};
	pid = xtu_fork(child_client, &a);
	/* Only the child writes: if it fails early, read sees EOF now
	 * instead of blocking until the test's timeout (review 3, F6). */
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	reap_at(seg, XSEG_TP_RESPOND_STORED);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	no_hook();
	ck_assert_int_eq(g_reaped, 1);
	ck_assert_uint_eq(g_st.requests_freed, 1);
	ck_assert_uint_eq(g_st.requests_redelivered, 0);
	expect_pool_whole(seg);
	close(fds[0]);
	xseg_leave(seg);
}
END_TEST

/* Two receivers of one port race for a reply and its re-delivered copy:
 * exactly one of them gets it. */
START_TEST(test_duplicate_reply_taken_once)
{
	struct xseg_request *req, *acc, *rep;
	struct xseg *seg;
	const char *name;

	seg = mkseg("dup", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "server"), 0);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	/* What a reaper of a dead responder would add. */
	xseg_redeliver(seg, req, req->index, xseg_rs_load(req), true);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
	ck_assert_ptr_eq(rep, req);
	/* The client sends it round again before the copy is consumed:
	 * the copy delivers that round's answer, once. */
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 1), 0);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
	ck_assert_int_eq(xseg_respond(seg, acc, 5), 0);
	expect_one_reply(seg, 0, req, 5);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Reaps of a dead server: one index per request (review 3, F1, F2)       */

static uint64_t reply_depth(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info in;

	ck_assert_int_eq(xseg_port_info(seg, port, &in), 0);
	return in.reply_depth;
}

/* n PINGs from port 0 queued at dead port 1. */
static void queue_at_dead_server(struct xseg *seg, const char *name,
				 struct xseg_request **reqs, unsigned n)
{
	/* Submit checks only that the owner word names a serving owner,
	 * which a dead owner's still does until a reap. */
	dead_owner(seg, name, 1);
	for (unsigned i = 0; i < n; i++)
		reqs[i] = send_ping(seg, 0, 1);
}

/* Every request queued at a dead server is failed back once: the reap
 * must not re-queue its own fail-backs (they name the dead port as mover
 * too). With half the pool queued there, the old reap filled the client's
 * reply queue to the brim; then a burst of answers from a live server was
 * lost (respond freed them on the full queue). */
START_TEST(test_dead_server_one_index_each)
{
	struct xseg_request *reqs[NR_REQS], *acc, *rep;
	struct xseg_reap_stats st;
	struct xseg *seg;
	const char *name;
	unsigned half = NR_REQS / 2, got;

	seg = mkseg("oneidx", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	queue_at_dead_server(seg, name, reqs, half);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_failed, half);
	ck_assert_uint_eq(st.requests_redelivered, 0);
	ck_assert_uint_eq(reply_depth(seg, 0), half);
	for (unsigned i = 0; i < half; i++) {
		ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
		ck_assert_int_eq(rep->error, ECONNRESET);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	/* The whole pool to a live server, answered in one burst before
	 * the client looks: every answer arrives. */
	ck_assert_int_eq(xseg_bind_port(seg, 2, "server"), 0);
	for (unsigned i = 0; i < NR_REQS; i++)
		reqs[i] = send_ping(seg, 0, 2);
	for (unsigned i = 0; i < NR_REQS; i++) {
		ck_assert_int_eq(xseg_accept(seg, 2, &acc), 0);
		ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	}
	for (got = 0; xseg_receive(seg, 0, &rep) == 0; got++) {
		ck_assert_int_eq(rep->error, 0);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	ck_assert_uint_eq(got, NR_REQS);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* Legitimate duplicates (what the reap of responders killed between their
 * enqueue and their clear adds) left on a client's reply queue after it
 * took its answers, then a burst of answers for the whole pool before the
 * client looks: every answer must arrive. With queues as large as the pool
 * (review 3, F2) the reply queue filled and respond freed the request
 * (-ENOSPC): the client never heard back. */
START_TEST(test_duplicates_never_fill_reply_queue)
{
	struct xseg_request *reqs[NR_REQS], *acc, *rep;
	struct xseg *seg;
	const char *name;
	unsigned half = NR_REQS / 2, got;

	seg = mkseg("dupfull", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "server"), 0);
	for (unsigned i = 0; i < half; i++)
		reqs[i] = send_ping(seg, 0, 1);
	for (unsigned i = 0; i < half; i++) {
		ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
		ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	}
	for (unsigned i = 0; i < half; i++)
		ck_assert(xseg_redeliver(seg, reqs[i], reqs[i]->index,
					 xseg_rs_load(reqs[i]), true));
	for (unsigned i = 0; i < half; i++) {
		ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	ck_assert_uint_eq(reply_depth(seg, 0), half); /* the copies */
	for (unsigned i = 0; i < NR_REQS; i++)
		reqs[i] = send_ping(seg, 0, 1);
	for (unsigned i = 0; i < NR_REQS; i++) {
		ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
		ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	}
	for (got = 0; xseg_receive(seg, 0, &rep) == 0; got++) {
		ck_assert_int_eq(rep->error, 0);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	ck_assert_uint_eq(got, NR_REQS);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* The same through a rebind of the dead port (what a supervisor's restart
 * of the peer does): one fail-back per request, no second index. */
START_TEST(test_dead_server_rebind_one_index_each)
{
	struct xseg_request *reqs[4], *rep;
	struct xseg *seg;
	const char *name;

	seg = mkseg("rebind1", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	queue_at_dead_server(seg, name, reqs, 4);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "restarted"), 0);
	ck_assert_uint_eq(reply_depth(seg, 0), 4);
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
		ck_assert_int_eq(rep->error, ECONNRESET);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	expect_no_request(seg, 1);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* Two reaper processes at once on one dead server: exactly one of them
 * reclaims the port, and every request is failed back once. */
struct reaper_arg {
	const char *name;
	int go; /* read end: one byte starts the reap */
};

static int child_reap_on_signal(void *arg)
{
	struct reaper_arg *a = arg;
	struct xseg_reap_stats st;
	struct xseg *seg;
	char c;
	int rc;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 100;
	if (read(a->go, &c, 1) != 1)
		return 101;
	rc = xseg_reap(seg, &st);
	if (rc < 0 || st.requests_redelivered)
		return 102;
	/* Exit code: ports reclaimed * 10 + requests failed back. */
	return rc * 10 + (int)st.requests_failed;
}

START_TEST(test_two_reapers_at_once)
{
	struct xseg_request *reqs[4], *rep;
	struct reaper_arg ra;
	struct xseg *seg;
	const char *name;
	int fds[2], s1, s2;
	pid_t p1, p2;

	seg = mkseg("tworeap", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	queue_at_dead_server(seg, name, reqs, 4);
	ck_assert_int_eq(pipe(fds), 0);
	ra = (struct reaper_arg){name, fds[0]};
	p1 = xtu_fork(child_reap_on_signal, &ra);
	p2 = xtu_fork(child_reap_on_signal, &ra);
	ck_assert_int_gt(p1, 0);
	ck_assert_int_gt(p2, 0);
	close(fds[0]);
	ck_assert_int_eq(write(fds[1], "gg", 2), 2);
	close(fds[1]);
	s1 = xtu_wait(p1, 10000);
	s2 = xtu_wait(p2, 10000);
	/* One reclaimed the port and failed back the four requests; the
	 * other found nothing to do (or the port already being claimed). */
	ck_assert_msg((s1 == 14 && s2 == 0) || (s1 == 0 && s2 == 14),
		      "reapers exited %d and %d", s1, s2);
	ck_assert_uint_eq(reply_depth(seg, 0), 4);
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
		ck_assert_int_eq(rep->error, ECONNRESET);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* The reaper of a responder killed before its enqueue is itself killed
 * while settling: after it queued the reply, before it cleared the mark.
 * The next reap takes the dead reaper's claim over and queues the reply a
 * second time; the client gets it once, the pool is whole. */
static int child_reaper_at(void *arg)
{
	const char *name = arg;
	struct xseg *seg;

	if (xseg_join(name, &seg, NULL, 0))
		return 1;
	die_at(XSEG_TP_REDELIVERED);
	xseg_reap(seg, NULL);
	return 2; /* the hook did not fire */
}

START_TEST(test_reaper_killed_while_settling)
{
	struct server_arg a;
	struct xseg_reap_stats st;
	struct xseg_request *req;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("setkill", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	a = (struct server_arg){name, 1, 0, ACT_RESPOND,
				XSEG_TP_RESPOND_STORED};
	pid = start_server(seg, &a);
	req = send_ping(seg, 0, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	pid = xtu_fork(child_reaper_at, (void *)name);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	/* Queued once, the mark still names the dead responder. */
	ck_assert_uint_eq(reply_depth(seg, 0), 1);
	ck_assert_uint_eq(xseg_rs_mover(xseg_rs_load(req)), 1);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_redelivered, 1);
	ck_assert_uint_eq(reply_depth(seg, 0), 2);
	expect_one_reply(seg, 0, req, 0);
	expect_pool_whole(seg);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* A redirect change against a cache starting on its target (review20    */
/* F1-F)                                                                  */

struct cache_start_arg {
	const char *name;
	int go;	  /* read end: start when a byte comes */
	int done; /* write end: one byte once bound, marked and plugged */
	/* the other process's ends, closed in the child so that only the
	 * child holds done's write end: its exit is EOF there */
	int parent_go, parent_done;
};

/* A cached starting on port 2 in front of port 1, in one go: bind, mark
 * (serving port 1), its own plug (1 -> 2), as cached_init_peer does. */
static int cache_start(void *arg)
{
	struct cache_start_arg *a = arg;
	struct xseg *seg;
	char c;

	close(a->parent_go);
	close(a->parent_done);
	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	if (read(a->go, &c, 1) != 1)
		return 2;
	if (xseg_bind_port(seg, 2, "cached") ||
	    xseg_port_mark_cache(seg, 2, 1) || xseg_set_path_next(seg, 1, 2))
		return 3;
	if (write(a->done, "d", 1) != 1)
		return 4;
	for (;;)
		pause();
}

/* the parent's side of the cache starting: its pid and pipe ends */
static struct {
	pid_t pid;
	int go, done;
} g_cache_start;

/* At the decision's end, before the CAS: let the cache start, entirely.
 * A child that fails (exit 1-4) closes done without a byte: the test
 * fails here with its status, not at Check's timeout (review21b F4). */
static void start_cache_hook(enum xseg_test_point pt, struct xseg_request *req)
{
	ssize_t n;
	char c;

	(void)req;
	if (pt != XSEG_TP_PATH_DECIDED || g_point != (int)pt)
		return;
	g_point = NO_POINT; /* once */
	ck_assert_int_eq(write(g_cache_start.go, "g", 1), 1);
	do
		n = read(g_cache_start.done, &c, 1);
	while (n < 0 && errno == EINTR);
	ck_assert_msg(n == 1,
		      "the starting cache (pid %d) did not bind, mark and "
		      "plug: read %zd, its exit status %d",
		      (int)g_cache_start.pid, n,
		      n ? -1 : xtu_wait(g_cache_start.pid, 10000));
}

/* Fork the cache (waiting to start) and arm the hook; cache_start_done
 * closes the pipes. */
static pid_t cache_start_armed(const char *name)
{
	struct cache_start_arg a;
	int go[2], done[2];
	pid_t pid;

	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	a = (struct cache_start_arg){name, go[0], done[1], go[1], done[0]};
	pid = xtu_fork(cache_start, &a);
	ck_assert_int_gt(pid, 0);
	close(go[0]);
	close(done[1]);
	g_cache_start.pid = pid;
	g_cache_start.go = go[1];
	g_cache_start.done = done[0];
	g_point = XSEG_TP_PATH_DECIDED;
	xseg_test_hook = start_cache_hook;
	return pid;
}

/* The cache killed: reaped, its pipes closed. */
static void cache_start_done(pid_t pid)
{
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), KILLED);
	close(g_cache_start.go);
	close(g_cache_start.done);
}

/* The check of a redirect's target and the CAS on the redirect are two
 * steps: a cache bound, marked and plugged on the target between them
 * must not be taken out of the path (clear) nor end up in another port's
 * path (set) by a decision made on the target as it was before. The
 * change is refused with -EAGAIN; decided again, the live cache is
 * refused as such. */
START_TEST(test_path_change_vs_cache_start)
{
	struct xseg *seg;
	const char *name;
	pid_t cache;

	seg = mkseg("f1f", &name);
	/* clear: port 1 redirected to a free port 2, where a cached starts
	 * while the clear decides */
	ck_assert_int_eq(xseg_set_path_next(seg, 1, 2), 0);
	cache = cache_start_armed(name);
	ck_assert_int_eq(xseg_clear_path_next(seg, 1), -EAGAIN);
	no_hook();
	ck_assert_uint_eq(xseg_get_path_next(seg, 1), 2);
	ck_assert_int_eq(xseg_clear_path_next(seg, 1), -EPERM);
	cache_start_done(cache);
	ck_assert_int_eq(xseg_clear_path_next(seg, 1), 0);
	/* set: port 3 redirected to port 2 (free), where a cached of port
	 * 1's path starts while the set decides */
	cache = cache_start_armed(name);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 2), -EAGAIN);
	no_hook();
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), XSEG_NOPORT);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 2), -EXDEV);
	cache_start_done(cache);
	xseg_leave(seg);
}
END_TEST

static Suite *race_suite(void)
{
	Suite *s = suite_create("xseg_race");
	TCase *tc = tcase_create("killed");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_accept_killed_after_dequeue);
	tcase_add_test(tc, test_forward_killed_before_enqueue);
	tcase_add_test(tc, test_forward_completed_then_killed);
	tcase_add_test(tc, test_respond_killed_before_enqueue);
	tcase_add_test(tc, test_respond_killed_after_enqueue);
	tcase_add_test(tc, test_failback_killed_before_enqueue);
	tcase_add_test(tc, test_submit_killed_before_enqueue);
	tcase_add_test(tc, test_receive_killed_after_dequeue);
	suite_add_tcase(s, tc);
	tc = tcase_create("live");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_live_submit_vs_reaper);
	tcase_add_test(tc, test_live_forward_vs_reaper);
	tcase_add_test(tc, test_live_respond_vs_reaper);
	tcase_add_test(tc, test_duplicate_reply_taken_once);
	tcase_add_test(tc, test_path_change_vs_cache_start);
	suite_add_tcase(s, tc);
	tc = tcase_create("reap");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_dead_server_one_index_each);
	tcase_add_test(tc, test_duplicates_never_fill_reply_queue);
	tcase_add_test(tc, test_dead_server_rebind_one_index_each);
	tcase_add_test(tc, test_two_reapers_at_once);
	tcase_add_test(tc, test_reaper_killed_while_settling);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	xtu_init();
	return xtu_run_suite(race_suite());
}
