/* SPDX-License-Identifier: MIT */
/*
 * libxseg under SIGKILL: a client (the test process) keeps 32 requests in
 * flight through a forwarding peer (port 1: answers some requests itself,
 * forwards the others to port 2) and to a serving peer (port 2) directly,
 * while both peers are SIGKILLed over and over: by the test at random
 * moments, and by themselves at random instants inside the hand-over
 * windows of review finding F7 (a test hook compiled into a private copy
 * of libxseg, XSEG_TEST_HOOKS, fires between a store and its enqueue or a
 * dequeue and its CAS). Killed peers are restarted on the same port.
 *
 * Checked: every request sent is answered exactly once, served (0) or
 * failed back (ECONNRESET), never lost (a reply missing for 10 s fails
 * the test; the reaper runs every 100 ms while the client waits); READ
 * data is right when served; afterwards every request is back in the
 * pool. No assertion depends on timing: the random moments only choose
 * where the kills land.
 *
 * XSEG_STRESS_SCALE multiplies the number of requests and kills.
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

#define MS	      (1000ULL * 1000)
#define NR_REQS	      256
#define DEPTH	      32
#define REPLY_TIMEOUT (10000 * MS)
#define FWD_PORT      1
#define STORE_PORT    2
#define DATA_SIZE     256
#define ID_SEQ(id)    ((id) & ((1ULL << 40) - 1))

static uint64_t scale(void)
{
	uint64_t s = xtu_env_u64("XSEG_STRESS_SCALE", 1);

	return s ? s : 1;
}

/* ---------------------------------------------------------------------- */
/* Peers                                                                  */

static unsigned g_odds; /* die at a hook point with probability 1/g_odds */
static unsigned g_seed;

static void random_death(enum xseg_test_point pt, struct xseg_request *req)
{
	(void)pt;
	(void)req;
	if (g_odds && rand_r(&g_seed) % g_odds == 0)
		raise(SIGKILL);
}

struct peer_arg {
	const char *name;
	uint32_t port;
	unsigned odds;
	unsigned seed;
};

/* Port FWD_PORT answers requests whose id is a multiple of 3 itself and
 * forwards the others to STORE_PORT; STORE_PORT serves everything (READ:
 * a pattern of the offset). Binds with retries: the previous owner may
 * still be being reclaimed (-EBUSY), or, for FWD_PORT, the store may still
 * hold requests the dead one forwarded (-EAGAIN after a second of waiting
 * for them: a store descheduled that long on a loaded machine), as
 * xtu_echo_server and peer_bind retry. */
static int child_peer(void *arg)
{
	struct peer_arg *a = arg;
	struct xseg_request *reqs[16];
	struct xseg *seg;
	uint64_t deadline = xtu_now_ms() + 5000;
	int rc;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	while ((rc = xseg_bind_port(seg, a->port, "victim")) != 0) {
		if ((rc != -EBUSY && rc != -EAGAIN) || xtu_now_ms() > deadline)
			return 2;
		usleep(1000);
	}
	g_odds = a->odds;
	g_seed = a->seed;
	xseg_test_hook = random_death;
	for (;;) {
		unsigned n = xseg_accept_batch(seg, a->port, reqs, 16);

		if (n == 0) {
			xseg_wait(seg, a->port, 100 * MS);
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];

			if (a->port == FWD_PORT && r->id % 3 != 0) {
				rc = xseg_forward(seg, r, STORE_PORT);
				/* The store is down: fail it back. */
				if (rc == -ENXIO)
					rc = xseg_respond(seg, r, ECONNRESET);
			} else {
				if (r->op == XSEG_OP_READ) {
					unsigned char *d =
					    xseg_request_data(seg, r);

					for (uint64_t k = 0; k < r->size; k++)
						d[k] =
						    xtu_pattern(r->offset, k);
					r->serviced = r->size;
				}
				rc = xseg_respond(seg, r, 0);
			}
			/* -ESTALE would mean a reaper took a request from a
			 * live peer: never. */
			if (rc) {
				fprintf(stderr,
					"peer on port %u: answer to request "
					"%u: %s\n",
					a->port, r->index, strerror(-rc));
				return 3;
			}
		}
	}
}

/* ---------------------------------------------------------------------- */
/* The client                                                             */

struct victim {
	uint32_t port;
	pid_t pid;
	unsigned starts;
};

static void start_peer(const char *name, struct victim *v, unsigned odds)
{
	static struct peer_arg a; /* the child gets its own copy */

	a = (struct peer_arg){name, v->port, odds, 7919u * ++v->starts};
	v->pid = xtu_fork(child_peer, &a);
	ck_assert_int_gt(v->pid, 0);
}

/* Restart a peer that died (it may still be reclaiming its port: the new
 * one retries its bind). Returns true if it had died. */
static bool revive(const char *name, struct victim *v, unsigned odds)
{
	int st = xtu_try_wait(v->pid);

	if (st == -EAGAIN)
		return false;
	ck_assert_msg(st == 128 + SIGKILL, "peer on port %u exited with %d",
		      v->port, st);
	start_peer(name, v, odds);
	return true;
}

START_TEST(test_peers_killed_under_load)
{
	const uint64_t total = 10000 * scale();
	const unsigned max_kills = 20 * (unsigned)scale();
	struct victim v[2] = {{FWD_PORT, 0, 0}, {STORE_PORT, 0, 0}};
	uint64_t sent = 0, done = 0, resets = 0, refused = 0, base = 0;
	uint64_t next_kill;
	unsigned kills = 0, odds = 300, seed = 12345;
	struct xseg_request *req, *rep;
	struct xseg_config cfg;
	uint8_t *seen;
	uint32_t client;
	struct xseg *seg;
	const char *name = xtu_segname("kill");
	char err[XSEG_ERRBUF_LEN];
	int rc;

	xseg_config_default(&cfg);
	cfg.size = 32ULL << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = 4;
	cfg.nr_requests = NR_REQS;
	cfg.free_cache = 16;
	rc = xseg_create(name, &cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create: %s", err);
	seen = calloc(total, 1);
	ck_assert_ptr_nonnull(seen);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	start_peer(name, &v[0], odds);
	start_peer(name, &v[1], odds);
	next_kill = 50 + rand_r(&seed) % 500;

	while (done < sent || sent < total) {
		/* Keep DEPTH in flight; a submit to a port without a live
		 * owner is refused (-ENXIO) and retried after a restart. */
		while (sent < total && sent - done < DEPTH) {
			uint32_t dst = (sent % 4 == 0) ? STORE_PORT : FWD_PORT;

			ck_assert_int_eq(xseg_get_request(seg, client, &req),
					 0);
			ck_assert_int_eq(
			    xseg_prep_request(seg, req, 1, DATA_SIZE), 0);
			req->target[0] = 'k';
			req->op = (sent & 1) ? XSEG_OP_READ : XSEG_OP_PING;
			req->size = req->op == XSEG_OP_READ ? DATA_SIZE : 0;
			req->offset = sent;
			rc = xseg_submit(seg, req, dst);
			if (rc == -ENXIO) {
				refused++;
				ck_assert_int_eq(xseg_put_request(seg, req), 0);
				break;
			}
			ck_assert_int_eq(rc, 0);
			if (sent == 0)
				base = ID_SEQ(req->id);
			/* ids are sequential per port: the id names the
			 * request's number among those sent */
			ck_assert_uint_eq(ID_SEQ(req->id) - base, sent);
			sent++;
		}
		if (done < sent) {
			rc = xseg_wait_reply(seg, client, REPLY_TIMEOUT, &rep);
			ck_assert_msg(rc == 0,
				      "%llu of %llu answered, %u kills: "
				      "wait_reply: %s (a request stranded)",
				      (unsigned long long)done,
				      (unsigned long long)sent, kills,
				      strerror(-rc));
			uint64_t k = ID_SEQ(rep->id) - base;

			ck_assert_uint_lt(k, sent);
			ck_assert_msg(!seen[k], "request %llu answered twice",
				      (unsigned long long)k);
			seen[k] = 1;
			ck_assert_msg(rep->error == 0 ||
					  rep->error == ECONNRESET,
				      "request %llu: error %d",
				      (unsigned long long)k, rep->error);
			if (rep->error) {
				resets++;
			} else if (rep->op == XSEG_OP_READ) {
				const unsigned char *d =
				    xseg_request_data(seg, rep);

				ck_assert_uint_eq(rep->serviced, DATA_SIZE);
				for (unsigned i = 0; i < DATA_SIZE; i++)
					ck_assert_uint_eq(
					    d[i], xtu_pattern(rep->offset, i));
			}
			done++;
			ck_assert_int_eq(xseg_put_request(seg, rep), 0);
		} else {
			usleep(1000); /* everything refused: let peers bind */
		}
		/* A kill from outside, at a random moment of the load. */
		if (kills < max_kills && done >= next_kill) {
			struct victim *x = &v[rand_r(&seed) % 2];

			/* a victim that already died (self-inflicted) is
			 * restarted by revive, which reaps it: reaping it here
			 * and leaving it dead made revive's wait fail (ECHILD)
			 */
			if (!revive(name, x, odds)) {
				ck_assert_int_eq(xtu_kill(x->pid, SIGKILL), 0);
				kills++;
			}
			next_kill = done + 50 + rand_r(&seed) % 500;
		}
		/* Self-inflicted kills stop after max_kills restarts, so
		 * the run ends. */
		if (v[0].starts + v[1].starts >= 2 + max_kills)
			odds = 0;
		for (unsigned i = 0; i < 2; i++)
			revive(name, &v[i], odds);
	}
	for (uint64_t k = 0; k < total; k++)
		ck_assert_msg(seen[k], "request %llu never answered",
			      (unsigned long long)k);
	fprintf(stderr,
		"peers killed: %u by the test, %u restarts in all; %llu "
		"requests, %llu failed back, %llu submits refused\n",
		kills, v[0].starts + v[1].starts - 2, (unsigned long long)total,
		(unsigned long long)resets, (unsigned long long)refused);
	ck_assert_uint_gt(v[0].starts + v[1].starts, 2);

	/* Everything comes back to the pool once the peers are gone and
	 * their ports reclaimed. */
	for (unsigned i = 0; i < 2; i++) {
		xtu_kill(v[i].pid, SIGKILL);
		ck_assert_int_eq(xtu_wait(v[i].pid, 10000), 128 + SIGKILL);
	}
	ck_assert_int_eq(xseg_release_port(seg, client), 0);
	ck_assert_int_ge(xseg_reap(seg, NULL), 0);
	ck_assert_int_ge(xseg_reap(seg, NULL), 0);
	ck_assert_uint_eq(xtu_free_requests(seg), NR_REQS);
	free(seen);
	xseg_leave(seg);
}
END_TEST

static Suite *kill_suite(void)
{
	Suite *s = suite_create("xseg_kill");
	TCase *tc = tcase_create("kill");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_peers_killed_under_load);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	xtu_init();
	return xtu_run_suite(kill_suite());
}
