/* SPDX-License-Identifier: MIT */
/*
 * Bind fence (review9 R9-7 part 2, xseg.h xseg_bind_port "Draining"): a
 * port whose previous owner died or left while other ports held requests
 * it had sent (accepted, or being answered, anywhere down a forward
 * chain) is not given to a new owner until no live process holds one; a
 * port with nothing outstanding binds at once; the late answers are
 * dropped, never delivered to the new owner.
 *
 * The test process is the server (it owns SERVER and NEXT and holds the
 * accepted requests, so it decides when they are answered: no timing).
 * Clients and binders are forked children: a client submits, hands
 * over, then dies by SIGKILL (or releases its port); a binder is a new
 * process that binds the client's port and reports the result in its
 * exit status. Linked with the hooked copy of libxseg (XSEG_TEST_HOOKS),
 * so that a binder can stop between its claim's check of the predecessor
 * and its CAS.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xseg.h"
#include "xseg_internal.h"
#include "xseg_testutil.h"

#define CLIENT	0
#define SERVER	2
#define NEXT	3
#define NR_REQS 64

/* binder exit statuses */
enum {
	B_BOUND = 0,	 /* bound, nothing delivered, released */
	B_EAGAIN = 10,	 /* refused: draining */
	B_EBUSY = 11,	 /* refused: owned or being reclaimed */
	B_OTHER = 12,	 /* refused with another errno */
	B_DELIVERED = 20 /* bound, but an old answer was delivered */
};

static struct xseg *mkseg(const char *tag, uint32_t nr_dynamic,
			  const char **namep)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	const char *name = xtu_segname(tag);
	int rc;

	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = nr_dynamic;
	cfg.nr_requests = NR_REQS;
	cfg.free_cache = 8;
	rc = xseg_create(name, &cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create: %s", err);
	*namep = name;
	return seg;
}

struct client_arg {
	const char *name;
	uint32_t port; /* XSEG_NOPORT: xseg_alloc_port */
	uint32_t dst;
	int nr;
	bool release; /* release the port instead of dying */
	int ready_fd, go_fd;
	/* bind port, but send from a dynamic port allocated besides it (as
	 * vlmc sends its table writes from its control port) */
	bool via_dynamic;
	/* with release: stay alive after releasing every port, say so again
	 * and wait for a second go before leaving */
	bool linger;
	bool also_port1; /* bind static port 1 too */
	uint16_t op;	 /* 0: XSEG_OP_WRITE */
};

/* Bind, submit nr WRITEs (or op) to dst, say so, wait for go, then die by
 * SIGKILL (or release its ports and leave, alive). */
static int client(void *p)
{
	struct client_arg *a = p;
	struct xseg_request *req;
	struct xseg *seg;
	uint32_t port = a->port, bound = a->port;
	char b = 0;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	if (port == XSEG_NOPORT ? xseg_alloc_port(seg, "fclient", &port)
				: xseg_bind_port(seg, port, "fclient"))
		return 2;
	if (a->also_port1 && xseg_bind_port(seg, 1, "fclient"))
		return 9;
	if (a->via_dynamic && xseg_alloc_port(seg, "fclient-ctl", &port))
		return 8;
	for (int i = 0; i < a->nr; i++) {
		if (xseg_get_request(seg, port, &req) ||
		    xseg_prep_request(seg, req, 3, 512))
			return 3;
		memcpy(req->target, "obj", 3);
		req->op = a->op ? a->op : XSEG_OP_WRITE;
		req->offset = 512ULL * (uint64_t)i;
		if (xseg_submit(seg, req, a->dst))
			return 4;
	}
	if (write(a->ready_fd, &b, 1) != 1 || read(a->go_fd, &b, 1) != 1)
		return 5;
	if (a->release) {
		if (xseg_release_port(seg, port) ||
		    (a->via_dynamic && xseg_release_port(seg, bound)))
			return 6;
		if (a->linger && (write(a->ready_fd, &b, 1) != 1 ||
				  read(a->go_fd, &b, 1) != 1))
			return 10;
		xseg_leave(seg);
		return 0;
	}
	raise(SIGKILL);
	return 7;
}

struct client {
	struct client_arg a;
	int ready[2], go[2];
	pid_t pid;
};

/* Start a client with the settings of a (name and the pipes are filled
 * in here). */
static void client_start_args(struct client *c, const char *name,
			      struct client_arg a)
{
	char b;

	ck_assert_int_eq(pipe(c->ready), 0);
	ck_assert_int_eq(pipe(c->go), 0);
	c->a = a;
	c->a.name = name;
	c->a.ready_fd = c->ready[1];
	c->a.go_fd = c->go[0];
	c->pid = xtu_fork(client, &c->a);
	ck_assert_int_gt(c->pid, 0);
	ck_assert_int_eq(read(c->ready[0], &b, 1), 1);
}

static void client_start(struct client *c, const char *name, uint32_t port,
			 uint32_t dst, int nr, bool release)
{
	client_start_args(
	    c, name,
	    (struct client_arg){
		.port = port, .dst = dst, .nr = nr, .release = release});
}

/* Let the client die (or release), and wait for it. */
static void client_end(struct client *c)
{
	char b = 0;

	ck_assert_int_eq(write(c->go[1], &b, 1), 1);
	ck_assert_int_eq(xtu_wait(c->pid, 10000),
			 c->a.release ? 0 : 128 + SIGKILL);
	close(c->ready[0]);
	close(c->ready[1]);
	close(c->go[0]);
	close(c->go[1]);
}

struct binder_arg {
	const char *name;
	uint32_t port;	/* XSEG_NOPORT: xseg_alloc_port */
	bool loop;	/* retry -EAGAIN for ever (killed by the test) */
	int refused_fd; /* > 0: a byte written there at each of the first
			   two -EAGAINs */
	/* > 0: the first time a bind has fenced the port's predecessor and
	 * not yet claimed the port (XSEG_TP_BIND_FENCED), write a byte to
	 * fenced_fd and wait for one on resume_fd */
	int fenced_fd, resume_fd;
};

/* The binder child's pipes for pause_once_fenced (a hook takes no
 * argument of its own). */
static int g_fenced_fd = -1, g_resume_fd = -1;

static void pause_once_fenced(enum xseg_test_point pt, struct xseg_request *req)
{
	char b = 0;

	(void)req;
	if (pt != XSEG_TP_BIND_FENCED)
		return;
	xseg_test_hook = NULL; /* once */
	if (write(g_fenced_fd, &b, 1) != 1 || read(g_resume_fd, &b, 1) != 1)
		_exit(24);
}

static int binder(void *p)
{
	struct binder_arg *a = p;
	struct xseg_request *req;
	struct xseg_port_info pi;
	struct xseg *seg;
	uint32_t port = a->port;
	int rc;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	if (a->fenced_fd > 0) {
		g_fenced_fd = a->fenced_fd;
		g_resume_fd = a->resume_fd;
		xseg_test_hook = pause_once_fenced;
	}
	for (unsigned refusals = 0;; refusals++) {
		rc = port == XSEG_NOPORT ? xseg_alloc_port(seg, "fnew", &port)
					 : xseg_bind_port(seg, port, "fnew");
		if (rc != -EAGAIN || !a->loop)
			break;
		if (refusals < 2 && a->refused_fd > 0 &&
		    write(a->refused_fd, "r", 1) != 1)
			return 23;
	}
	if (rc == -EAGAIN)
		return B_EAGAIN;
	if (rc == -EBUSY)
		return B_EBUSY;
	if (rc)
		return B_OTHER;
	/* The late answers were dropped: none reaches the new owner. */
	if (xseg_receive(seg, port, &req) != -EAGAIN)
		return B_DELIVERED;
	if (xseg_port_info(seg, port, &pi) || pi.draining || !pi.bound)
		return 21;
	if (xseg_release_port(seg, port))
		return 22;
	xseg_leave(seg);
	return B_BOUND;
}

/* A new process binds port: its exit status (B_*). */
static int bind_in_child(const char *name, uint32_t port)
{
	struct binder_arg a = {name, port, false, 0, 0, 0};
	pid_t pid = xtu_fork(binder, &a);

	ck_assert_int_gt(pid, 0);
	return xtu_wait(pid, 30000);
}

static struct xseg_port_info info(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_port_info(seg, port, &pi), 0);
	return pi;
}

static uint32_t rs_state(struct xseg_request *req)
{
	return xseg_rs_state(xseg_rs_load(req));
}

static struct xseg_request *accept_one(struct xseg *seg, uint32_t port)
{
	struct xseg_request *req = NULL;

	ck_assert_int_eq(xseg_accept(seg, port, &req), 0);
	ck_assert_uint_eq(req->src, CLIENT);
	return req;
}

static struct xseg *server_seg(const char *tag, uint32_t nr_dynamic,
			       const char **namep)
{
	struct xseg *seg = mkseg(tag, nr_dynamic, namep);

	ck_assert_int_eq(xseg_bind_port(seg, SERVER, "fserver"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, NEXT, "fnext"), 0);
	return seg;
}

/* Everything back in the pool once the server's ports are released. */
static void finish(struct xseg *seg)
{
	ck_assert_int_eq(xseg_release_port(seg, SERVER), 0);
	ck_assert_int_eq(xseg_release_port(seg, NEXT), 0);
	ck_assert_int_ge(xseg_reap(seg, NULL), 0);
	ck_assert_uint_eq(xtu_free_requests(seg), NR_REQS);
	xseg_leave(seg);
}

/* ---------------------------------------------------------------------- */

/* The case: the dead client's write is accepted and held; a
 * new owner is refused (-EAGAIN, logged naming the holder), nothing
 * changes, and once the write is answered the bind succeeds and the
 * answer is dropped. reap_first: the port was reclaimed by a reap
 * before the bind (the fence then lives in the drain word only). */
static void held_blocks_bind(const char *tag, bool reap_first)
{
	const char *name;
	struct xseg *seg = server_seg(tag, 4, &name);
	struct xseg_port_info pi;
	struct xseg_reap_stats rs;
	struct xseg_request *req;
	struct xtu_captured cap;
	struct client c;
	char *log;

	client_start(&c, name, CLIENT, SERVER, 1, false);
	req = accept_one(seg, SERVER);
	client_end(&c);
	if (reap_first) {
		ck_assert_int_eq(xseg_reap(seg, &rs), 1);
		ck_assert(info(seg, CLIENT).draining);
		ck_assert(!info(seg, CLIENT).bound);
	}
	xtu_capture_start(&cap);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	log = xtu_capture_end(&cap);
	ck_assert_msg(strstr(log, "port 0: bind waits: 1 request(s)") &&
			  strstr(log, "port 2, fserver, pid "),
		      "%s", log);
	free(log);
	/* refused, and nothing changed: free, still draining, the write
	 * still held by the server, which can answer it */
	pi = info(seg, CLIENT);
	ck_assert(!pi.bound);
	ck_assert(pi.draining);
	ck_assert_uint_eq(pi.reply_depth, 0);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	ck_assert(!info(seg, CLIENT).draining);
	ck_assert_uint_eq(info(seg, SERVER).served, 1);
	finish(seg);
}

START_TEST(test_held_blocks_bind_over_dead_owner)
{
	held_blocks_bind("dead", false);
}
END_TEST

START_TEST(test_held_blocks_bind_after_reap)
{
	held_blocks_bind("reap", true);
}
END_TEST

/* Forwarded requests keep their src: one forwarded and accepted by the
 * next port blocks the bind as well; one forwarded and still queued at
 * the next port does not (accept drops it, it never runs). */
START_TEST(test_forwarded_chain)
{
	const char *name;
	struct xseg *seg = server_seg("fwd", 4, &name);
	struct xseg_request *r1, *r2, *n1, *none = NULL;
	struct client c;

	client_start(&c, name, CLIENT, SERVER, 2, false);
	r1 = accept_one(seg, SERVER);
	r2 = accept_one(seg, SERVER);
	ck_assert_int_eq(xseg_forward(seg, r1, NEXT), 0);
	ck_assert_int_eq(xseg_forward(seg, r2, NEXT), 0);
	n1 = accept_one(seg, NEXT);
	ck_assert_ptr_eq(n1, r1);
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	ck_assert_uint_eq(rs_state(n1), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, n1, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	/* the queued one is dropped at accept, not run */
	ck_assert_int_eq(xseg_accept(seg, NEXT, &none), -EAGAIN);
	ck_assert_ptr_null(none);
	ck_assert_uint_eq(info(seg, NEXT).rejected, 1);
	ck_assert_uint_eq(info(seg, NEXT).accepted, 1);
	finish(seg);
}
END_TEST

/* No regression: a dead client with nothing accepted anywhere (nothing
 * sent, or a request still queued) is rebound at the first try and the
 * port is not draining; a fence that was lifted is not inherited by the
 * next death. */
START_TEST(test_nothing_outstanding_binds_at_once)
{
	const char *name;
	struct xseg *seg = server_seg("none", 4, &name);
	struct xseg_request *req, *none = NULL;
	struct client c;

	client_start(&c, name, CLIENT, SERVER, 0, false);
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	ck_assert(!info(seg, CLIENT).draining);

	client_start(&c, name, CLIENT, SERVER, 1, false);
	client_end(&c);
	ck_assert_int_eq(xseg_reap(seg, NULL), 1);
	ck_assert(!info(seg, CLIENT).draining);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	ck_assert_int_eq(xseg_accept(seg, SERVER, &none), -EAGAIN);
	ck_assert_uint_eq(info(seg, SERVER).rejected, 1);

	/* fenced once, answered, bound; then a death with nothing held */
	client_start(&c, name, CLIENT, SERVER, 1, false);
	req = accept_one(seg, SERVER);
	client_end(&c);
	ck_assert_int_eq(xseg_reap(seg, NULL), 1);
	ck_assert(info(seg, CLIENT).draining);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	client_start(&c, name, CLIENT, SERVER, 0, false);
	client_end(&c);
	ck_assert_int_eq(xseg_reap(seg, NULL), 1);
	ck_assert(!info(seg, CLIENT).draining);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	finish(seg);
}
END_TEST

/* A live owner that releases its port while a server holds its write
 * leaves it draining as a death does. */
START_TEST(test_release_drains)
{
	const char *name;
	struct xseg *seg = server_seg("rel", 4, &name);
	struct xseg_request *req;
	struct client c;

	client_start(&c, name, CLIENT, SERVER, 1, true);
	req = accept_one(seg, SERVER);
	client_end(&c);
	ck_assert(info(seg, CLIENT).draining);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	/* the answer fails back nothing: it is dropped */
	ck_assert_int_eq(xseg_respond(seg, req, EIO), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	finish(seg);
}
END_TEST

/* A holder that dies executes nothing: it no longer blocks the bind, and
 * its reap returns the request to the pool (its sender has changed). */
struct holder_arg {
	const char *name;
	int ready_fd;
};

static int holder(void *p)
{
	struct holder_arg *a = p;
	struct xseg_request *req;
	struct xseg *seg;
	char b = 0;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, 1, "fholder"))
		return 1;
	while (xseg_accept(seg, 1, &req) == -EAGAIN)
		xseg_wait(seg, 1, 100 * 1000 * 1000);
	if (write(a->ready_fd, &b, 1) != 1)
		return 2;
	pause(); /* holds it until SIGKILL */
	return 3;
}

static bool holder_bound(void *seg)
{
	struct xseg_port_info pi;

	return xseg_port_info(seg, 1, &pi) == 0 && pi.alive;
}

START_TEST(test_dead_holder_does_not_block)
{
	const char *name;
	struct xseg *seg = server_seg("hold", 4, &name);
	struct holder_arg ha = {0};
	struct client c;
	int hready[2];
	pid_t hpid;
	char b;

	ck_assert_int_eq(pipe(hready), 0);
	ha.name = name;
	ha.ready_fd = hready[1];
	hpid = xtu_fork(holder, &ha);
	ck_assert_int_gt(hpid, 0);
	/* the client submits once the holder's port is bound */
	ck_assert_int_eq(xtu_wait_until(holder_bound, seg, 30000), 0);
	client_start(&c, name, CLIENT, 1, 1, false);
	ck_assert_int_eq(read(hready[0], &b, 1), 1);
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	ck_assert_int_eq(xtu_kill(hpid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(hpid, 10000), 128 + SIGKILL);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	close(hready[0]);
	close(hready[1]);
	finish(seg);
}
END_TEST

/* xseg_alloc_port skips a draining dynamic port: -EAGAIN when it is the
 * only one, and the port is handed out once drained. */
START_TEST(test_alloc_skips_draining)
{
	const char *name;
	struct xseg *seg = server_seg("alloc", 1, &name);
	struct xseg_request *req = NULL;
	struct client c;

	client_start(&c, name, XSEG_NOPORT, SERVER, 1, false);
	ck_assert_int_eq(xseg_accept(seg, SERVER, &req), 0);
	ck_assert_uint_eq(req->src, 4);
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, XSEG_NOPORT), B_EAGAIN);
	ck_assert(info(seg, 4).draining);
	ck_assert(!info(seg, 4).bound);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, XSEG_NOPORT), B_BOUND);
	ck_assert(!info(seg, 4).draining);
	finish(seg);
}
END_TEST

/* Bad input is refused as before, and changes nothing of the fence. */
START_TEST(test_bad_bind_changes_nothing)
{
	const char *name;
	struct xseg *seg = server_seg("bad", 4, &name);
	struct xseg_request *req;
	struct client c;
	uint32_t gen;

	client_start(&c, name, CLIENT, SERVER, 1, false);
	req = accept_one(seg, SERVER);
	client_end(&c);
	ck_assert_int_eq(xseg_reap(seg, NULL), 1);
	gen = info(seg, CLIENT).generation;
	ck_assert_int_eq(xseg_bind_port(seg, 4, "x"), -EINVAL); /* dynamic */
	ck_assert_int_eq(xseg_bind_port(seg, 99, "x"), -EINVAL);
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT, NULL), -EINVAL);
	ck_assert_int_eq(xseg_alloc_port(seg, NULL, NULL), -EINVAL);
	ck_assert_int_eq(xseg_bind_port(seg, SERVER, "x"), -EALREADY);
	ck_assert(info(seg, CLIENT).draining);
	ck_assert_uint_eq(info(seg, CLIENT).generation, gen);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	finish(seg);
}
END_TEST

/* A binder SIGKILLed while it holds the claim (waiting for the drain)
 * leaves the port to the next one, which is still refused: the fence is
 * found again by the reclaim of the dead binder's claim. */
static bool binder_claims(void *p)
{
	void **a = p;
	struct xseg_port_info pi;

	if (xseg_port_info(a[0], CLIENT, &pi))
		return false;
	return pi.reclaiming && pi.owner_pid == *(pid_t *)a[1];
}

START_TEST(test_killed_binder_keeps_fence)
{
	const char *name;
	struct xseg *seg = server_seg("kill", 4, &name);
	struct binder_arg ba;
	struct xseg_request *req;
	struct client c;
	void *cond[2];
	pid_t pid;

	client_start(&c, name, CLIENT, SERVER, 1, false);
	req = accept_one(seg, SERVER);
	client_end(&c);
	ba = (struct binder_arg){name, CLIENT, true, 0, 0, 0};
	pid = xtu_fork(binder, &ba);
	ck_assert_int_gt(pid, 0);
	cond[0] = seg;
	cond[1] = &pid;
	ck_assert_int_eq(xtu_wait_until(binder_claims, cond, 30000), 0);
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	finish(seg);
}
END_TEST

/* The successor's fence (xseg.h xseg_bind_port): the client binds
 * CLIENT but sends its two writes from a dynamic port (vlmc's control
 * port), and dies with one accepted and held by the server, the other
 * still queued there. A new process binding CLIENT, its successor, is
 * refused until the held write is answered, although CLIENT itself sent
 * nothing; the queued write is dropped at accept, never run; a bind of
 * a port the dead process never had is not held up. reap_first: a reap
 * (the stack supervisor's) reclaimed both ports before the bind, so the
 * link between them is only the ports' last_owner. */
static void successor_fences(const char *tag, bool reap_first)
{
	const char *name;
	struct xseg *seg = server_seg(tag, 4, &name);
	struct xseg_request *req = NULL, *none = NULL;
	struct xseg_reap_stats rs;
	struct xtu_captured cap;
	struct client c;
	char *log;

	client_start_args(
	    &c, name,
	    (struct client_arg){
		.port = CLIENT, .dst = SERVER, .nr = 2, .via_dynamic = true});
	ck_assert_int_eq(xseg_accept(seg, SERVER, &req), 0);
	ck_assert_uint_eq(req->src, 4); /* the first dynamic port */
	client_end(&c);
	if (reap_first) {
		ck_assert_int_eq(xseg_reap(seg, &rs), 2);
		ck_assert(info(seg, 4).draining);
		ck_assert(!info(seg, CLIENT).draining);
	}
	xtu_capture_start(&cap);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	log = xtu_capture_end(&cap);
	ck_assert_msg(strstr(log, "port 4: 1 request(s) sent by its previous "
				  "owner") &&
			  strstr(log, "port 2, fserver, pid ") &&
			  strstr(log, "port 0, which that owner had too"),
		      "%s", log);
	free(log);
	/* refused and free; the dynamic port reclaimed, its queued write
	 * dropped at accept */
	ck_assert(!info(seg, CLIENT).bound);
	ck_assert(!info(seg, 4).bound);
	ck_assert(info(seg, 4).draining);
	ck_assert_int_eq(xseg_accept(seg, SERVER, &none), -EAGAIN);
	ck_assert_ptr_null(none);
	ck_assert_uint_eq(info(seg, SERVER).rejected, 1);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	/* not every bind waits: port 1 was never the dead process's */
	ck_assert_int_eq(bind_in_child(name, 1), B_BOUND);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	ck_assert_uint_eq(info(seg, SERVER).served, 1);
	finish(seg);
}

/* review23x F2: the predecessor released its ports on its way out (a
 * peer's clean stop) and is still alive when its successor binds: its
 * write held by the server still fences the bind. */
START_TEST(test_successor_fences_live_predecessor)
{
	const char *name;
	struct xseg *seg = server_seg("succlive", 4, &name);
	struct xseg_request *req = NULL;
	struct client c;
	char b = 0;

	client_start_args(&c, name,
			  (struct client_arg){.port = CLIENT,
					      .dst = SERVER,
					      .nr = 1,
					      .release = true,
					      .via_dynamic = true,
					      .linger = true});
	ck_assert_int_eq(xseg_accept(seg, SERVER, &req), 0);
	ck_assert_uint_eq(req->src, 4);
	ck_assert_int_eq(write(c.go[1], &b, 1), 1);
	ck_assert_int_eq(read(c.ready[0], &b, 1), 1); /* released, alive */
	ck_assert(!info(seg, CLIENT).bound);
	ck_assert(info(seg, 4).draining);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	client_end(&c);
	finish(seg);
}
END_TEST

/* review23x F3: a READ (or INFO, HASH, PING, FLUSH) run late changes
 * nothing stored, so one held by a server fences no bind: neither the
 * port it was sent from (its own drain) nor its process's static port
 * (the successor's fence). A store that never answers a READ used to keep
 * a restarted peer from binding for ever. */
START_TEST(test_held_read_does_not_fence)
{
	const char *name;
	struct xseg *seg = server_seg("read", 4, &name);
	struct xseg_request *r1 = NULL, *r2 = NULL;
	struct client c;

	client_start_args(
	    &c, name,
	    (struct client_arg){
		.port = CLIENT, .dst = SERVER, .nr = 1, .op = XSEG_OP_READ});
	ck_assert_int_eq(xseg_accept(seg, SERVER, &r1), 0);
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	client_start_args(&c, name,
			  (struct client_arg){.port = CLIENT,
					      .dst = SERVER,
					      .nr = 1,
					      .via_dynamic = true,
					      .op = XSEG_OP_READ});
	ck_assert_int_eq(xseg_accept(seg, SERVER, &r2), 0);
	ck_assert_uint_eq(r2->src, 4);
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	/* the late answers are dropped */
	ck_assert_int_eq(xseg_respond(seg, r1, 0), 0);
	ck_assert_int_eq(xseg_respond(seg, r2, 0), 0);
	finish(seg);
}
END_TEST

/* review23y F2: a held request is judged by the op it was submitted
 * with (sent_op), never by op, which its holder may write (a server
 * between accept and respond; a client reusing a request, concurrently
 * with a scan in its own process, made a data race): a WRITE whose op
 * the server has since overwritten with READ still fences the port it
 * was sent from, and a READ overwritten with WRITE fences nothing. */
START_TEST(test_fence_judges_op_as_sent)
{
	const char *name;
	struct xseg *seg = server_seg("sentop", 4, &name);
	struct xseg_request *req = NULL;
	struct client c;

	client_start(&c, name, CLIENT, SERVER, 1, false);
	req = accept_one(seg, SERVER);
	req->op = XSEG_OP_READ;
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	client_start_args(
	    &c, name,
	    (struct client_arg){
		.port = CLIENT, .dst = SERVER, .nr = 1, .op = XSEG_OP_READ});
	req = accept_one(seg, SERVER);
	req->op = XSEG_OP_WRITE;
	client_end(&c);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	finish(seg);
}
END_TEST

/* review23x F1: a process that owned two static ports, whose successors
 * bind both at once while its write is held, retrying -EAGAIN at once
 * (as peer_bind does): once the write is answered both bind. The fence
 * used to run inside each binder's claim, and each waited for the
 * other's claim for ever once both had been refused twice (the write is
 * answered only then; with 3d8e71c's code the first binder was still
 * refused after 60 s). */
START_TEST(test_two_successors_do_not_livelock)
{
	const char *name;
	struct xseg *seg = server_seg("twosucc", 4, &name);
	struct binder_arg b0 = {NULL, CLIENT, true, 0, 0, 0},
			  b1 = {NULL, 1, true, 0, 0, 0};
	struct xseg_request *req = NULL;
	struct client c;
	int refused[2];
	pid_t p0, p1;
	char r[2];

	client_start_args(&c, name,
			  (struct client_arg){.port = CLIENT,
					      .dst = SERVER,
					      .nr = 1,
					      .via_dynamic = true,
					      .also_port1 = true});
	ck_assert_int_eq(xseg_accept(seg, SERVER, &req), 0);
	client_end(&c);
	ck_assert_int_eq(pipe(refused), 0);
	b0.name = b1.name = name;
	b0.refused_fd = b1.refused_fd = refused[1];
	p0 = xtu_fork(binder, &b0);
	p1 = xtu_fork(binder, &b1);
	ck_assert_int_gt(p0, 0);
	ck_assert_int_gt(p1, 0);
	/* both refused twice (they retry) while the write is held: by
	 * then, fenced inside their claims, they would be waiting for each
	 * other */
	for (int k = 0; k < 4; k++)
		ck_assert_int_eq(read(refused[0], r + (k & 1), 1), 1);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(xtu_wait(p0, 60000), B_BOUND);
	ck_assert_int_eq(xtu_wait(p1, 60000), B_BOUND);
	close(refused[0]);
	close(refused[1]);
	finish(seg);
}
END_TEST

/* review23x F4: the dead process bound its ports with a build that did
 * not record last_owner (cleared here by hand), and a reap reclaimed them
 * before its successor's bind: the reap records the dead owner, so the
 * bind still fences its dynamic port's held write. */
START_TEST(test_successor_fences_old_build_predecessor)
{
	const char *name;
	struct xseg *seg = server_seg("succold", 4, &name);
	struct xseg_request *req = NULL;
	struct xseg_reap_stats rs;
	struct client c;

	client_start_args(
	    &c, name,
	    (struct client_arg){
		.port = CLIENT, .dst = SERVER, .nr = 1, .via_dynamic = true});
	ck_assert_int_eq(xseg_accept(seg, SERVER, &req), 0);
	ck_assert_uint_eq(req->src, 4);
	client_end(&c);
	__atomic_store_n(&seg->ports[CLIENT].port->last_owner, 0,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&seg->ports[4].port->last_owner, 0, __ATOMIC_RELAXED);
	ck_assert_int_eq(xseg_reap(seg, &rs), 2);
	ck_assert(info(seg, 4).draining);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_EAGAIN);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	finish(seg);
}
END_TEST

/* review23y F3 and review-fence24 R1: the claim's re-checks of the
 * predecessor (claim_port, -ESTALE). A binder fences the port's
 * predecessor P1 (dead, nothing held) and stops after its fence, before
 * its claim's CAS (XSEG_TP_BIND_FENCED). Meanwhile P2 binds the port,
 * sends a WRITE from a dynamic port, which the server accepts and holds,
 * and leaves: dies (the owner word stays P2's) or releases (owner 0
 * again, as when the binder loaded it). Either way the binder finds
 * another predecessor than the one it fenced and fences again: it is
 * refused while P2's write is held, and a bind succeeds once it is
 * answered. Without the re-checks the claim would take the port at once,
 * P2's write still runnable behind the new owner's back. */
static void refence(const char *tag, bool release)
{
	const char *name;
	struct xseg *seg = server_seg(tag, 4, &name);
	struct xseg_request *req = NULL;
	struct binder_arg ba;
	struct client c;
	int fenced[2], resume[2];
	pid_t pid;
	char b = 0;

	/* P1 had the port and died, nothing outstanding */
	client_start(&c, name, CLIENT, SERVER, 0, false);
	client_end(&c);
	ck_assert_int_eq(pipe(fenced), 0);
	ck_assert_int_eq(pipe(resume), 0);
	ba = (struct binder_arg){.name = name,
				 .port = CLIENT,
				 .fenced_fd = fenced[1],
				 .resume_fd = resume[0]};
	pid = xtu_fork(binder, &ba);
	ck_assert_int_gt(pid, 0);
	/* Only the binder keeps these ends: one that exits before the test
	 * point gives EOF at once, and one stuck before it fails the bounded
	 * poll (an upper bound, not a timing), rather than a hang until the
	 * tcase's timeout (review R5). */
	close(fenced[1]);
	close(resume[0]);
	ck_assert_msg(poll(&(struct pollfd){.fd = fenced[0], .events = POLLIN},
			   1, 30000) == 1,
		      "the binder did not reach XSEG_TP_BIND_FENCED in 30 s");
	ck_assert_msg(read(fenced[0], &b, 1) == 1,
		      "the binder exited before XSEG_TP_BIND_FENCED (no hook? "
		      "status %d)",
		      xtu_wait(pid, 30000));
	/* P1 fenced (its port reclaimed), the port not claimed: free */
	ck_assert(!info(seg, CLIENT).bound);
	/* P2 binds it meanwhile, sends, and leaves with its write held */
	client_start_args(&c, name,
			  (struct client_arg){.port = CLIENT,
					      .dst = SERVER,
					      .nr = 1,
					      .via_dynamic = true,
					      .release = release});
	ck_assert_int_eq(xseg_accept(seg, SERVER, &req), 0);
	ck_assert_uint_eq(req->src, 4);
	client_end(&c);
	if (release)
		ck_assert_uint_eq(info(seg, CLIENT).owner_pid, 0);
	ck_assert_int_eq(write(resume[1], &b, 1), 1);
	ck_assert_int_eq(xtu_wait(pid, 30000), B_EAGAIN);
	ck_assert(!info(seg, CLIENT).bound);
	ck_assert(info(seg, 4).draining);
	ck_assert_uint_eq(rs_state(req), XSEG_RS_ACCEPTED);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(bind_in_child(name, CLIENT), B_BOUND);
	close(fenced[0]);
	close(resume[1]);
	finish(seg);
}

START_TEST(test_successor_refences_new_predecessor)
{
	refence("refence", false);
}
END_TEST

/* P2 released the port: the binder's CAS from 0 succeeds (ABA), so only
 * a check after the CAS sees P2 (review R1). */
START_TEST(test_refence_released_aba)
{
	refence("refaba", true);
}
END_TEST

START_TEST(test_successor_fences_dynamic_ports)
{
	successor_fences("succ", false);
}
END_TEST

START_TEST(test_successor_fences_after_reap)
{
	successor_fences("succreap", true);
}
END_TEST

static Suite *fence_suite(void)
{
	Suite *s = suite_create("xseg_fence");
	TCase *tc = tcase_create("fence");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_held_blocks_bind_over_dead_owner);
	tcase_add_test(tc, test_held_blocks_bind_after_reap);
	tcase_add_test(tc, test_forwarded_chain);
	tcase_add_test(tc, test_nothing_outstanding_binds_at_once);
	tcase_add_test(tc, test_release_drains);
	tcase_add_test(tc, test_dead_holder_does_not_block);
	tcase_add_test(tc, test_alloc_skips_draining);
	tcase_add_test(tc, test_bad_bind_changes_nothing);
	tcase_add_test(tc, test_killed_binder_keeps_fence);
	tcase_add_test(tc, test_successor_fences_dynamic_ports);
	tcase_add_test(tc, test_successor_fences_after_reap);
	tcase_add_test(tc, test_successor_fences_live_predecessor);
	tcase_add_test(tc, test_held_read_does_not_fence);
	tcase_add_test(tc, test_fence_judges_op_as_sent);
	tcase_add_test(tc, test_two_successors_do_not_livelock);
	tcase_add_test(tc, test_successor_fences_old_build_predecessor);
	tcase_add_test(tc, test_successor_refences_new_predecessor);
	tcase_add_test(tc, test_refence_released_aba);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	xtu_init();
	return xtu_run_suite(fence_suite());
}
