/* SPDX-License-Identifier: MIT */
/*
 * libxseg multi-process stress tests with real processes on private
 * segments: lost wake-ups (sleeping and polling), redirect toggling under
 * load, peers and clients killed with SIGKILL mid-load, dynamic ports
 * churning while traffic flows.
 *
 * Sizes: XSEG_STRESS_ROUNDS (round trips per lost-wake-up case, default
 * 100000; e.g. 2000000 for a long run) and XSEG_STRESS_SCALE (multiplier for
 * the other cases) make runs longer; the defaults finish in well under a
 * minute each under ASan on 2 cores. Each wake-up mode is its own Check
 * case (CK_RUN_CASE=sleeping|polling|mixed|depth16|robustness).
 */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "xseg.h"
#include "xseg_internal.h"
#include "xseg_testutil.h"

#define MS	      (1000ULL * 1000)
#define REPLY_TIMEOUT (5000 * MS) /* a stall this long is a lost wake-up */
#define SERVER_STALL  (5000 * MS)
#define CLIENT_STALL  (8000 * MS)
#define ID_SEQ(id)    ((id) & ((1ULL << 40) - 1))

static uint64_t scale(void)
{
	uint64_t s = xtu_env_u64("XSEG_STRESS_SCALE", 1);

	return s ? s : 1;
}

static struct xseg *mkseg(const char *tag, uint32_t nr_requests,
			  uint32_t nr_dynamic, const char **namep)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	const char *name = xtu_segname(tag);
	int rc;

	xseg_config_default(&cfg);
	cfg.size = 32ULL << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = nr_dynamic;
	cfg.nr_requests = nr_requests;
	cfg.free_cache = 16;
	rc = xseg_create(name, &cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create: %s", err);
	*namep = name;
	return seg;
}

static pid_t start_echo_opts(const char *name, uint32_t port, uint64_t spin_ns,
			     uint64_t stall_ns)
{
	static struct xtu_echo_opts o; /* the child gets its own copy */
	pid_t pid;

	o = (struct xtu_echo_opts){.segname = name,
				   .port = port,
				   .spin_ns = spin_ns,
				   .stall_ns = stall_ns};
	pid = xtu_fork(xtu_echo_server, &o);
	ck_assert_int_gt(pid, 0);
	return pid;
}

static pid_t start_echo(const char *name, uint32_t port, uint64_t spin_ns)
{
	return start_echo_opts(name, port, spin_ns, 0);
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

static void stop(pid_t pid)
{
	xtu_kill(pid, SIGKILL);
	xtu_wait(pid, 10000);
}

/* ----------------------------------------------------------------------
 * Lost wake-ups: round trips at iodepth 1 (and 16) where every wait for
 * a reply has a generous timeout; a timeout with the request pending means
 * a wake-up was lost (the original xseg stalled ~1 run in 50 this way).
 */

/* Client and server both wait with xseg_wait and a long timeout (not
 * xseg_wait_reply, whose periodic reaping would hide a lost wake-up as a
 * 100 ms hiccup): a timeout with a request pending fails the test. */
static void pingpong(uint64_t client_spin, uint64_t server_spin, unsigned depth,
		     uint64_t rounds)
{
	struct xseg_request *reqs[16], *rep;
	uint64_t done = 0, sent = 0;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	pid_t server;
	int rc;

	seg = mkseg("pingpong", 64, 4, &name);
	server = start_echo_opts(name, 0, server_spin, SERVER_STALL);
	wait_bound(seg, 0);
	xseg_set_spin(seg, client_spin);
	xseg_set_timestamps(seg, false);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	for (unsigned i = 0; i < depth; i++) {
		ck_assert_int_eq(xseg_get_request(seg, client, &reqs[i]), 0);
		ck_assert_int_eq(xseg_prep_request(seg, reqs[i], 0, 0), 0);
		reqs[i]->op = XSEG_OP_PING;
		ck_assert_int_eq(xseg_submit(seg, reqs[i], 0), 0);
		sent++;
	}
	while (done < rounds) {
		rc = xseg_receive(seg, client, &rep);
		if (rc == -EAGAIN) {
			/* A wait that runs into its timeout while the reply
			 * is (or becomes) pending slept through a wake-up;
			 * xseg_wait then returns 0 for the work it finds, so
			 * judge by the time it took. */
			uint64_t t0 = xseg_now_ns();

			rc = xseg_wait(seg, client, CLIENT_STALL);
			ck_assert_msg(
			    rc == 0 && xseg_now_ns() - t0 < CLIENT_STALL,
			    "round %llu: wait %d (%s) for %llu ms "
			    "with %llu requests pending: lost "
			    "wake-up",
			    (unsigned long long)done, rc, strerror(-rc),
			    (unsigned long long)((xseg_now_ns() - t0) / MS),
			    (unsigned long long)(sent - done));
			continue;
		}
		ck_assert_int_eq(rc, 0);
		ck_assert_int_eq(rep->error, 0);
		done++;
		if (sent < rounds) {
			/* Straight back out: RECEIVED requests may be
			 * resubmitted without put/get. */
			ck_assert_int_eq(xseg_submit(seg, rep, 0), 0);
			sent++;
		} else {
			ck_assert_int_eq(xseg_put_request(seg, rep), 0);
		}
	}
	/* The server saw no stall either (it would have exited with 3). */
	ck_assert_int_eq(xtu_try_wait(server), -EAGAIN);
	stop(server);
	xseg_leave(seg);
}

static uint64_t rounds(uint64_t def)
{
	return xtu_env_u64("XSEG_STRESS_ROUNDS", def);
}

START_TEST(test_lost_wakeup_sleeping)
{
	pingpong(0, 0, 1, rounds(100000));
}
END_TEST

START_TEST(test_lost_wakeup_polling)
{
	/* Spin far longer than a round trip: neither side ever sleeps while
	 * traffic flows, and signals skip the futex syscall. */
	pingpong(1000 * MS, 1000 * MS, 1, rounds(100000));
}
END_TEST

START_TEST(test_lost_wakeup_mixed)
{
	/* One side polls, the other sleeps; and a short spin that expires
	 * right around the round-trip time, so both paths interleave. */
	pingpong(1000 * MS, 0, 1, rounds(100000) / 3);
	pingpong(0, 1000 * MS, 1, rounds(100000) / 3);
	pingpong(5000, 5000, 1, rounds(100000) / 3);
}
END_TEST

START_TEST(test_lost_wakeup_depth16)
{
	pingpong(0, 0, 16, rounds(100000));
}
END_TEST

/* ----------------------------------------------------------------------
 * Redirect toggled thousands of times under load: no request lost or
 * answered twice. Port 0 is the store (echo), port 1 a cache-like peer
 * that answers even ids itself and forwards odd ids to the original
 * destination (bypassing the redirect that brought them to it).
 */

struct route_shared {
	uint32_t stop;
	uint32_t toggles;
};

static int cache_peer(void *arg)
{
	const char *name = arg;
	struct xseg_request *reqs[16];
	struct xseg *seg;
	int rc;

	if (xseg_join(name, &seg, NULL, 0) || xseg_bind_port(seg, 1, "cache"))
		return 1;
	for (;;) {
		unsigned n = xseg_accept_batch(seg, 1, reqs, 16);

		if (n == 0) {
			xseg_wait(seg, 1, 100 * MS);
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];

			if (r->dst != 0)
				return 2;
			r->peer_priv = 1;
			if (r->id & 1)
				rc = xseg_forward(seg, r, r->dst);
			else
				rc = xseg_respond(seg, r, 0);
			if (rc)
				return 3;
		}
	}
}

static int toggler(void *arg)
{
	struct route_shared *sh = arg;
	struct xseg *seg;
	const char *name = (const char *)(sh + 1);

	if (xseg_join(name, &seg, NULL, 0))
		return 1;
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		if (xseg_set_path_next(seg, 0, 1) ||
		    (sched_yield(), xseg_clear_path_next(seg, 0)))
			return 2;
		__atomic_fetch_add(&sh->toggles, 1, __ATOMIC_RELAXED);
		sched_yield();
	}
	xseg_leave(seg);
	return 0;
}

START_TEST(test_redirect_toggle_under_load)
{
	const uint64_t total = 100000 * scale();
	const unsigned depth = 32;
	struct xseg_request *req, *rep;
	struct route_shared *sh;
	uint64_t sent = 0, done = 0, via_cache = 0, direct = 0, base = 0;
	uint8_t *seen;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	pid_t store, cache, tog;

	seg = mkseg("route", 256, 4, &name);
	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	strcpy((char *)(sh + 1), name);
	seen = calloc(total + 1, 1);
	ck_assert_ptr_nonnull(seen);

	store = start_echo(name, 0, 0);
	cache = xtu_fork(cache_peer, (void *)name);
	wait_bound(seg, 0);
	wait_bound(seg, 1);
	tog = xtu_fork(toggler, sh);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);

	while (done < total) {
		while (sent < total && sent - done < depth) {
			ck_assert_int_eq(xseg_get_request(seg, client, &req),
					 0);
			ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
			req->target[0] = 'o';
			req->op = XSEG_OP_PING;
			ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
			if (sent == 0)
				base = ID_SEQ(req->id);
			sent++;
		}
		int rc = xseg_wait_reply(seg, client, REPLY_TIMEOUT, &rep);
		ck_assert_msg(rc == 0, "after %llu replies: %s",
			      (unsigned long long)done, strerror(-rc));
		ck_assert_int_eq(rep->error, 0);
		uint64_t k = ID_SEQ(rep->id) - base;
		ck_assert_uint_lt(k, total);
		ck_assert_msg(!seen[k], "request %llu answered twice",
			      (unsigned long long)k);
		seen[k] = 1;
		/* Where it went: the cache marks what it saw. */
		if (rep->effective_dst == 1 || rep->peer_priv)
			via_cache++;
		else
			direct++;
		done++;
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(xtu_wait(tog, 10000), 0);
	for (uint64_t k = 0; k < total; k++)
		ck_assert_msg(seen[k], "request %llu never answered",
			      (unsigned long long)k);
	/* Both routes were really taken while the redirect flipped. */
	ck_assert_uint_gt(via_cache, 0);
	ck_assert_uint_gt(direct, 0);
	ck_assert_uint_gt(sh->toggles, 1000);
	fprintf(stderr,
		"redirect toggle: %llu requests, %u toggles, %llu via cache, "
		"%llu direct\n",
		(unsigned long long)total, sh->toggles,
		(unsigned long long)via_cache, (unsigned long long)direct);
	stop(store);
	stop(cache);
	ck_assert_uint_eq(xtu_free_requests(seg), 256);
	free(seen);
	munmap(sh, 4096);
	xseg_leave(seg);
}
END_TEST

/* ----------------------------------------------------------------------
 * A serving peer SIGKILLed mid-load: the client never hangs, requests the
 * peer held come back with ECONNRESET, a new process rebinds the port and
 * traffic resumes; no request is leaked.
 */

START_TEST(test_peer_killed_mid_load)
{
	const unsigned depth = 32, kills = 4; /* depth + 8 <= 256 */
	const uint64_t per_phase = 3000 * scale();
	struct xseg_request *req, *rep;
	uint64_t outstanding = 0, resets = 0, served = 0, enxio = 0;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	pid_t server;
	int rc;

	seg = mkseg("kill", 256, 4, &name);
	server = start_echo(name, 0, 0);
	wait_bound(seg, 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);

	for (unsigned phase = 0; phase <= kills; phase++) {
		uint64_t phase_served = 0;

		/* Load until this phase's server has answered enough. */
		while (phase_served < per_phase) {
			while (outstanding < depth) {
				ck_assert_int_eq(
				    xseg_get_request(seg, client, &req), 0);
				ck_assert_int_eq(
				    xseg_prep_request(seg, req, 1, 4096), 0);
				req->target[0] = 'k';
				req->op = XSEG_OP_READ;
				rc = xseg_submit(seg, req, 0);
				ck_assert_int_eq(rc, 0);
				outstanding++;
			}
			rc = xseg_wait_reply(seg, client, REPLY_TIMEOUT, &rep);
			ck_assert_msg(rc == 0, "phase %u: wait_reply: %s",
				      phase, strerror(-rc));
			ck_assert_int_eq(rep->error, 0);
			outstanding--;
			phase_served++;
			served++;
			ck_assert_int_eq(xseg_put_request(seg, rep), 0);
		}
		if (phase == kills) {
			while (outstanding) {
				rc = xseg_wait_reply(seg, client, REPLY_TIMEOUT,
						     &rep);
				ck_assert_int_eq(rc, 0);
				ck_assert_int_eq(rep->error, 0);
				outstanding--;
				ck_assert_int_eq(xseg_put_request(seg, rep), 0);
			}
			break;
		}
		/* Kill with requests queued: stop the server, queue 8 more
		 * it can never serve, then kill it. */
		ck_assert_int_eq(xtu_kill(server, SIGSTOP), 0);
		for (int i = 0; i < 8; i++) {
			ck_assert_int_eq(xseg_get_request(seg, client, &req),
					 0);
			ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
			req->target[0] = 'q';
			req->op = XSEG_OP_PING;
			ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
			outstanding++;
		}
		ck_assert_int_eq(xtu_kill(server, SIGKILL), 0);
		/* Every outstanding request comes back, served (answered
		 * before the kill) or failed with ECONNRESET (by the reap
		 * that wait_reply runs while it waits): never a timeout. */
		while (outstanding) {
			rc = xseg_wait_reply(seg, client, REPLY_TIMEOUT, &rep);
			ck_assert_msg(rc == 0,
				      "phase %u: %llu requests of a killed "
				      "peer: wait_reply %s",
				      phase, (unsigned long long)outstanding,
				      strerror(-rc));
			ck_assert_msg(rep->error == 0 ||
					  rep->error == ECONNRESET,
				      "error %d", rep->error);
			if (rep->error)
				resets++;
			outstanding--;
			ck_assert_int_eq(xseg_put_request(seg, rep), 0);
		}
		ck_assert_int_eq(xtu_wait(server, 10000), 128 + SIGKILL);
		/* The port is free (or dead-owned): new requests are
		 * refused, not queued into the void. */
		xseg_reap(seg, NULL);
		ck_assert_int_eq(xseg_port_alive(seg, 0), 0);
		ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
		req->op = XSEG_OP_PING;
		rc = xseg_submit(seg, req, 0);
		ck_assert_int_eq(rc, -ENXIO);
		enxio++;
		ck_assert_int_eq(xseg_put_request(seg, req), 0);
		/* A new process rebinds the same port. */
		server = start_echo(name, 0, 0);
		wait_bound(seg, 0);
	}
	/* The reaper failed at least the requests queued at each kill. */
	ck_assert_uint_ge(resets, 8 * kills);
	fprintf(stderr, "peer killed %u times: %llu served, %llu reset\n",
		kills, (unsigned long long)served, (unsigned long long)resets);
	stop(server);
	ck_assert_uint_eq(xtu_free_requests(seg), 256);
	xseg_leave(seg);
}
END_TEST

/* A client SIGKILLed with requests in flight: the server keeps running,
 * the reaper returns every request of the dead client to the pool. */
static int doomed_client(void *arg)
{
	const char *name = arg;
	struct xseg_request *req, *rep;
	struct xseg *seg;
	uint32_t port;

	if (xseg_join(name, &seg, NULL, 0) ||
	    xseg_alloc_port(seg, "doomed", &port))
		return 1;
	for (int i = 0; i < 32; i++) {
		if (xseg_get_request(seg, port, &req) ||
		    xseg_prep_request(seg, req, 1, 1024))
			return 2;
		req->target[0] = 'd';
		req->op = XSEG_OP_READ;
		if (xseg_submit(seg, req, 0))
			return 3;
	}
	for (;;) {
		if (xseg_wait_reply(seg, port, REPLY_TIMEOUT, &rep))
			return 4;
		if (xseg_submit(seg, rep, 0))
			return 5;
	}
}

START_TEST(test_client_killed_mid_load)
{
	struct xseg_request *req, *rep;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	pid_t server, doomed;

	seg = mkseg("clkill", 128, 4, &name);
	server = start_echo(name, 0, 0);
	wait_bound(seg, 0);
	for (unsigned round = 0; round < 5; round++) {
		doomed = xtu_fork(doomed_client, (void *)name);
		usleep(20 * 1000);
		ck_assert_int_eq(xtu_kill(doomed, SIGKILL), 0);
		ck_assert_int_eq(xtu_wait(doomed, 10000), 128 + SIGKILL);
		/* The server is still answering. */
		ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
		ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
		req->op = XSEG_OP_PING;
		ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
		ck_assert_int_eq(
		    xseg_wait_reply(seg, client, REPLY_TIMEOUT, &rep), 0);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
		ck_assert_int_eq(xseg_release_port(seg, client), 0);
		/* Once the server has drained what the dead client sent,
		 * the reaper gets every request back to the pool. */
		uint64_t deadline = xtu_now_ms() + 10000;
		for (;;) {
			xseg_reap(seg, NULL);
			if (xtu_free_requests(seg) == 128)
				break;
			ck_assert_msg(xtu_now_ms() < deadline,
				      "round %u: %u of 128 requests free",
				      round, xtu_free_requests(seg));
			usleep(1000);
		}
	}
	stop(server);
	xseg_leave(seg);
}
END_TEST

/* ----------------------------------------------------------------------
 * Dynamic ports allocated and released by several processes while a
 * client and a server run; one churner is SIGKILLed holding a port. No two
 * live processes ever hold the same port; exhaustion is reported as
 * -ENOSPC and recovers.
 */

struct churn_shared {
	uint32_t holder[16]; /* pid holding each port, per the churners */
	uint32_t enospc;
	uint32_t held, max_held; /* ports held by churners right now, max */
	uint32_t stop;
	uint32_t victim_ready;
	char name[128];
};

static int churner(void *arg)
{
	struct churn_shared *sh = arg;
	struct xseg_request *req, *rep;
	struct xseg *seg;
	uint32_t port, me = (uint32_t)getpid();

	if (xseg_join(sh->name, &seg, NULL, 0))
		return 1;
	for (int i = 0; i < 300 && !__atomic_load_n(&sh->stop, 0); i++) {
		int rc = xseg_alloc_port(seg, "churn", &port);

		if (rc == -ENOSPC) {
			__atomic_fetch_add(&sh->enospc, 1, __ATOMIC_RELAXED);
			usleep(200);
			continue;
		}
		if (rc || port >= 16)
			return 2;
		uint32_t expect = 0;
		if (!__atomic_compare_exchange_n(&sh->holder[port], &expect, me,
						 false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			/* Held by a churner that was killed? Then the port
			 * was reclaimed: fine. Otherwise a double owner. */
			if (kill((pid_t)expect, 0) == 0)
				return 3;
			__atomic_store_n(&sh->holder[port], me,
					 __ATOMIC_RELEASE);
		}
		uint32_t h = __atomic_add_fetch(&sh->held, 1, __ATOMIC_ACQ_REL);
		uint32_t m = __atomic_load_n(&sh->max_held, __ATOMIC_RELAXED);
		while (h > m && !__atomic_compare_exchange_n(
				    &sh->max_held, &m, h, false,
				    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		if (xseg_get_request(seg, port, &req) ||
		    xseg_prep_request(seg, req, 1, 0))
			return 4;
		req->target[0] = 'c';
		req->op = XSEG_OP_PING;
		if (xseg_submit(seg, req, 0) ||
		    xseg_wait_reply(seg, port, REPLY_TIMEOUT, &rep) ||
		    rep->error || xseg_put_request(seg, rep))
			return 5;
		if (__atomic_load_n(&sh->holder[port], __ATOMIC_ACQUIRE) != me)
			return 6;
		__atomic_store_n(&sh->holder[port], 0, __ATOMIC_RELEASE);
		__atomic_sub_fetch(&sh->held, 1, __ATOMIC_ACQ_REL);
		if (xseg_release_port(seg, port))
			return 7;
	}
	xseg_leave(seg);
	return 0;
}

static int churn_victim(void *arg)
{
	struct churn_shared *sh = arg;
	struct xseg_request *req;
	struct xseg *seg;
	uint32_t port;

	if (xseg_join(sh->name, &seg, NULL, 0) ||
	    xseg_alloc_port(seg, "victim", &port))
		return 1;
	__atomic_store_n(&sh->holder[port], (uint32_t)getpid(),
			 __ATOMIC_RELEASE);
	if (xseg_get_request(seg, port, &req) ||
	    xseg_prep_request(seg, req, 1, 0))
		return 2;
	req->target[0] = 'v';
	req->op = XSEG_OP_PING;
	if (xseg_submit(seg, req, 0))
		return 3;
	__atomic_store_n(&sh->victim_ready, 1, __ATOMIC_RELEASE);
	for (;;)
		pause();
}

START_TEST(test_dynamic_ports_churn)
{
	struct churn_shared *sh;
	struct xseg_request *req, *rep;
	pid_t server, churners[4], victim;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	uint64_t trips = 0;

	/* 4 static ports, dynamic ports 4..7: four for six users. */
	seg = mkseg("churn", 128, 4, &name);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	strcpy(sh->name, name);
	server = start_echo(name, 0, 0);
	wait_bound(seg, 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	sh->holder[client] = (uint32_t)getpid();

	/* A victim that takes a port and is killed holding it, with a
	 * request in flight. */
	victim = xtu_fork(churn_victim, sh);
	uint64_t deadline = xtu_now_ms() + 10000;
	while (!__atomic_load_n(&sh->victim_ready, __ATOMIC_ACQUIRE))
		ck_assert_uint_lt(xtu_now_ms(), deadline);
	xtu_kill(victim, SIGKILL);
	ck_assert_int_eq(xtu_wait(victim, 10000), 128 + SIGKILL);
	for (int i = 0; i < 4; i++)
		churners[i] = xtu_fork(churner, sh);

	bool running = true;
	while (running) {
		ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
		req->target[0] = 'm';
		req->op = XSEG_OP_PING;
		ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
		ck_assert_int_eq(
		    xseg_wait_reply(seg, client, REPLY_TIMEOUT, &rep), 0);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
		trips++;
		running = false;
		for (int i = 0; i < 4; i++) {
			if (churners[i] == 0)
				continue;
			int st = xtu_try_wait(churners[i]);
			if (st == -EAGAIN) {
				running = true;
				continue;
			}
			ck_assert_msg(st == 0, "churner %d exited %d", i, st);
			churners[i] = 0;
		}
	}
	fprintf(stderr,
		"churn: %llu client trips, %u ENOSPC, up to %u ports held "
		"by churners at once\n",
		(unsigned long long)trips, sh->enospc, sh->max_held);
	/* Never more holders than free dynamic ports. */
	ck_assert_uint_le(sh->max_held, 3);
	/* Every dynamic port but the client's can be taken again. */
	uint32_t p[4], n = 0;
	while (n < 4 && xseg_alloc_port(seg, "final", &p[n]) == 0)
		n++;
	ck_assert_uint_eq(n, 3);
	stop(server);
	munmap(sh, sizeof(*sh));
	xseg_leave(seg);
}
END_TEST

static Suite *mp_suite(void)
{
	Suite *s = suite_create("xseg_mp");
	const struct {
		const char *name;
		const TTest *test;
	} wake[] = {
	    {"sleeping", test_lost_wakeup_sleeping},
	    {"polling", test_lost_wakeup_polling},
	    {"mixed", test_lost_wakeup_mixed},
	    {"depth16", test_lost_wakeup_depth16},
	};
	TCase *tc;

	/* One case each, so CK_RUN_CASE=polling runs just that one. */
	for (size_t i = 0; i < sizeof(wake) / sizeof(wake[0]); i++) {
		tc = tcase_create(wake[i].name);
		tcase_set_timeout(tc, 300);
		tcase_add_test(tc, wake[i].test);
		suite_add_tcase(s, tc);
	}

	tc = tcase_create("robustness");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_redirect_toggle_under_load);
	tcase_add_test(tc, test_peer_killed_mid_load);
	tcase_add_test(tc, test_client_killed_mid_load);
	tcase_add_test(tc, test_dynamic_ports_churn);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{

	xtu_init();
	return xtu_run_suite(mp_suite());
}
