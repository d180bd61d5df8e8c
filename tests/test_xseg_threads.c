/* SPDX-License-Identifier: MIT */
/*
 * libxseg multi-threaded tests (label "concurrent": CI also runs them under
 * ThreadSanitizer, which checks that every hand-over of a request between
 * threads is ordered by the queues). Threads of one process share one
 * handle, as peers with worker threads do.
 *
 * XSEG_STRESS_ROUNDS changes the number of round trips (default 20000).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "xseg.h"
#include "xseg_testutil.h"

#define MS	      (1000ULL * 1000)
#define REPLY_TIMEOUT (5000 * MS)
#define ID_SEQ(id)    ((id) & ((1ULL << 40) - 1))

static uint64_t rounds(void)
{
	return xtu_env_u64("XSEG_STRESS_ROUNDS", 20000);
}

static struct xseg *mkseg(const char *tag, uint32_t nr_requests)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	int rc;

	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 2;
	cfg.nr_dynamic_ports = 8;
	cfg.nr_requests = nr_requests;
	cfg.free_cache = 16;
	rc = xseg_create(xtu_segname(tag), &cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create: %s", err);
	return seg;
}

/* Server threads: serve port 0 until stop is set (then kicked). */
struct server {
	struct xseg *seg;
	uint32_t port;
	uint32_t stop;
	uint64_t served; /* atomic */
	int error;	 /* first failure, 0 if none */
};

static void *server_thread(void *arg)
{
	struct server *sv = arg;
	struct xseg_request *reqs[8];

	while (!__atomic_load_n(&sv->stop, __ATOMIC_ACQUIRE)) {
		unsigned n = xseg_accept_batch(sv->seg, sv->port, reqs, 8);

		if (n == 0) {
			int rc = xseg_wait(sv->seg, sv->port, 100 * MS);

			if (rc && rc != -ETIMEDOUT && rc != -EINTR)
				sv->error = rc;
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			/* The client wrote user before submit: the queue's
			 * release/acquire makes it visible here. */
			reqs[i]->serviced = reqs[i]->user;
			int rc = xseg_respond(sv->seg, reqs[i], 0);

			if (rc)
				sv->error = rc;
		}
		__atomic_fetch_add(&sv->served, n, __ATOMIC_RELAXED);
	}
	return NULL;
}

struct client {
	struct xseg *seg;
	uint32_t port;
	uint32_t dst;
	unsigned depth;
	uint64_t total;
	char failure[160];
};

static void *client_thread(void *arg)
{
	struct client *cl = arg;
	struct xseg_request *req, *rep;
	uint64_t sent = 0, done = 0, base = 0;
	uint8_t *seen = calloc(cl->total, 1);
	int rc;

	while (seen && done < cl->total) {
		while (sent < cl->total && sent - done < cl->depth) {
			rc = xseg_get_request(cl->seg, cl->port, &req);
			if (!rc)
				rc = xseg_prep_request(cl->seg, req, 1, 0);
			if (rc) {
				snprintf(cl->failure, sizeof(cl->failure),
					 "get/prep: %s", strerror(-rc));
				goto out;
			}
			req->target[0] = 't';
			req->op = XSEG_OP_PING;
			req->user = sent + 1;
			rc = xseg_submit(cl->seg, req, cl->dst);
			if (rc) {
				snprintf(cl->failure, sizeof(cl->failure),
					 "submit: %s", strerror(-rc));
				goto out;
			}
			if (sent == 0)
				base = ID_SEQ(req->id);
			sent++;
		}
		rc = xseg_receive(cl->seg, cl->port, &rep);
		if (rc == -EAGAIN) {
			/* Not xseg_wait_reply: its periodic reaping would
			 * turn a lost wake-up into a 100 ms hiccup. */
			uint64_t t0 = xseg_now_ns();

			rc = xseg_wait(cl->seg, cl->port, REPLY_TIMEOUT);
			if (rc || xseg_now_ns() - t0 >= REPLY_TIMEOUT) {
				snprintf(cl->failure, sizeof(cl->failure),
					 "wait after %llu replies, %llu "
					 "pending: %d, lost wake-up",
					 (unsigned long long)done,
					 (unsigned long long)(sent - done), rc);
				goto out;
			}
			continue;
		}
		if (rc) {
			snprintf(cl->failure, sizeof(cl->failure),
				 "receive: %s", strerror(-rc));
			goto out;
		}
		uint64_t k = ID_SEQ(rep->id) - base;
		if (rep->error || k >= cl->total || seen[k] ||
		    rep->serviced != rep->user) {
			snprintf(cl->failure, sizeof(cl->failure),
				 "bad reply: error %d, id %llu seen %d, "
				 "serviced %llu user %llu",
				 rep->error, (unsigned long long)k,
				 k < cl->total ? seen[k] : -1,
				 (unsigned long long)rep->serviced,
				 (unsigned long long)rep->user);
			goto out;
		}
		seen[k] = 1;
		done++;
		rc = xseg_put_request(cl->seg, rep);
		if (rc) {
			snprintf(cl->failure, sizeof(cl->failure), "put: %s",
				 strerror(-rc));
			goto out;
		}
	}
out:
	free(seen);
	return NULL;
}

static void run_threads(uint64_t spin_ns, unsigned nservers, unsigned nclients,
			unsigned depth, uint64_t total)
{
	pthread_t st[8], ct[8];
	struct client cl[8];
	struct server sv;
	struct xseg *seg;

	seg = mkseg("threads", 256);
	xseg_set_spin(seg, spin_ns);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	sv = (struct server){.seg = seg, .port = 0};
	for (unsigned i = 0; i < nservers; i++)
		ck_assert_int_eq(
		    pthread_create(&st[i], NULL, server_thread, &sv), 0);
	for (unsigned i = 0; i < nclients; i++) {
		cl[i] = (struct client){
		    .seg = seg, .dst = 0, .depth = depth, .total = total};
		ck_assert_int_eq(xseg_alloc_port(seg, "client", &cl[i].port),
				 0);
		ck_assert_int_eq(
		    pthread_create(&ct[i], NULL, client_thread, &cl[i]), 0);
	}
	for (unsigned i = 0; i < nclients; i++) {
		pthread_join(ct[i], NULL);
		ck_assert_msg(cl[i].failure[0] == '\0', "client %u: %s", i,
			      cl[i].failure);
	}
	__atomic_store_n(&sv.stop, 1, __ATOMIC_RELEASE);
	xseg_kick(seg, 0);
	for (unsigned i = 0; i < nservers; i++)
		pthread_join(st[i], NULL);
	ck_assert_int_eq(sv.error, 0);
	ck_assert_uint_eq(sv.served, total * nclients);
	ck_assert_uint_eq(xtu_free_requests(seg), 256);
	xseg_leave(seg);
}

START_TEST(test_pingpong_sleeping)
{
	run_threads(0, 1, 1, 1, rounds());
}
END_TEST

START_TEST(test_pingpong_polling)
{
	run_threads(1000 * MS, 1, 1, 1, rounds());
}
END_TEST

START_TEST(test_workers_and_clients)
{
	/* Four workers sleeping on one port's futex word and two clients
	 * with 8 requests in flight each: every request answered once. */
	run_threads(0, 4, 2, 8, rounds());
	run_threads(20 * 1000, 4, 2, 8, rounds() / 2);
}
END_TEST

/* get/put from several threads on one port (its free queue and the pool),
 * and racing double puts: exactly one wins. */
struct getput {
	struct xseg *seg;
	uint32_t port;
	uint64_t n;
	int error;
};

static void *getput_thread(void *arg)
{
	struct getput *gp = arg;
	struct xseg_request *reqs[4];

	for (uint64_t i = 0; i < gp->n; i++) {
		unsigned k = (unsigned)(i % 4) + 1;

		for (unsigned j = 0; j < k; j++) {
			int rc = xseg_get_request(gp->seg, gp->port, &reqs[j]);

			if (rc) {
				gp->error = rc;
				return NULL;
			}
			reqs[j]->user = (uint64_t)(uintptr_t)gp;
		}
		for (unsigned j = 0; j < k; j++) {
			if (reqs[j]->user != (uint64_t)(uintptr_t)gp) {
				gp->error = -EBADE; /* handed out twice */
				return NULL;
			}
			int rc = xseg_put_request(gp->seg, reqs[j]);

			if (rc) {
				gp->error = rc;
				return NULL;
			}
		}
	}
	return NULL;
}

struct double_put {
	struct xseg *seg;
	struct xseg_request *req;
	pthread_barrier_t *barrier;
	int rc;
};

static void *double_put_thread(void *arg)
{
	struct double_put *dp = arg;

	pthread_barrier_wait(dp->barrier);
	dp->rc = xseg_put_request(dp->seg, dp->req);
	return NULL;
}

START_TEST(test_concurrent_get_put)
{
	struct getput gp[4];
	pthread_t t[4];
	struct xseg *seg;
	uint32_t port;

	seg = mkseg("getput", 64);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &port), 0);
	for (int i = 0; i < 4; i++) {
		gp[i] = (struct getput){
		    .seg = seg, .port = port, .n = rounds() * 2};
		ck_assert_int_eq(
		    pthread_create(&t[i], NULL, getput_thread, &gp[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(gp[i].error == 0, "thread %d: %s", i,
			      strerror(-gp[i].error));
	}
	ck_assert_uint_eq(xtu_free_requests(seg), 64);

	for (int round = 0; round < 200; round++) {
		pthread_barrier_t barrier;
		struct double_put dp[2];
		struct xseg_request *req;

		ck_assert_int_eq(xseg_get_request(seg, port, &req), 0);
		pthread_barrier_init(&barrier, NULL, 2);
		for (int i = 0; i < 2; i++) {
			dp[i] = (struct double_put){seg, req, &barrier, 1};
			pthread_create(&t[i], NULL, double_put_thread, &dp[i]);
		}
		pthread_join(t[0], NULL);
		pthread_join(t[1], NULL);
		pthread_barrier_destroy(&barrier);
		ck_assert_msg((dp[0].rc == 0 && dp[1].rc == -EALREADY) ||
				  (dp[1].rc == 0 && dp[0].rc == -EALREADY),
			      "double put: %d and %d", dp[0].rc, dp[1].rc);
	}
	ck_assert_uint_eq(xtu_free_requests(seg), 64);
	xseg_leave(seg);
}
END_TEST

/* Adaptive spinning, counted (xseg.h, "Adaptive spinning"). */

/* A thread whose spins never catch work (nobody ever submits) stops
 * spinning: of n waits, only the policy's probes spin, exactly as the
 * pure policy says for an all-miss sequence; with the fixed policy every
 * wait spins. Each wait times out after its spin: no timing decides. */
START_TEST(test_spin_never_catching_backs_off)
{
	const unsigned n = 400;
	struct xseg_spin s, model;
	unsigned model_spins = 0;
	struct xseg *seg = mkseg("spinidle", 16);

	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	xseg_spin_init(&s, 20000, true);
	xseg_spin_init(&model, 20000, true);
	for (unsigned i = 0; i < n; i++) {
		uint64_t preempted = s.preempted;

		ck_assert_int_eq(xseg_wait_spin(seg, 0, 100000, &s),
				 -ETIMEDOUT);
		/* a wait that would spin sleeps instead if this thread
		 * lost its CPU since (a loaded machine): the model follows */
		if (s.preempted != preempted) {
			ck_assert(xseg_spin_budget(&model));
			xseg_spin_note(&model, XSEG_SPIN_PREEMPTED);
		} else if (xseg_spin_budget(&model)) {
			model_spins++;
			xseg_spin_note(&model, XSEG_SPIN_MISSED);
		} else {
			xseg_spin_note(&model, XSEG_SPIN_SLEPT_LONG);
		}
	}
	ck_assert_uint_eq(s.waits, n);
	ck_assert_uint_eq(s.caught, 0);
	ck_assert_uint_eq(s.hinted, 0);
	ck_assert_uint_eq(s.spins, model_spins);
	ck_assert_uint_eq(s.missed, model_spins);
	ck_assert_uint_lt(s.spins * 8, n);
	ck_assert_uint_eq(s.skip, model.skip);
	ck_assert_uint_eq(s.level, model.level);

	xseg_spin_init(&s, 20000, false);
	for (unsigned i = 0; i < 50; i++)
		ck_assert_int_eq(xseg_wait_spin(seg, 0, 100000, &s),
				 -ETIMEDOUT);
	ck_assert_uint_eq(s.spins, 50);
	ck_assert_uint_eq(s.missed, 50);
	/* spin 0: never spins, learns nothing */
	xseg_spin_init(&s, 0, true);
	ck_assert_int_eq(xseg_wait_spin(seg, 0, 100000, &s), -ETIMEDOUT);
	ck_assert_uint_eq(s.waits + s.spins, 0);
	xseg_leave(seg);
}
END_TEST

/* Two threads playing ping-pong through the segment, each waiting with
 * its own adaptive state and a spin far longer than a round trip: every
 * wait that finds nothing at once spins and catches the work, so none
 * ever backs off. */
struct spin_pp {
	struct xseg *seg;
	uint32_t port;
	uint64_t rounds;
	struct xseg_spin spin;
	char failure[120];
};

#define SPIN_PP_NS (5000 * MS) /* a spin that cannot run out */

static void *spin_pp_server(void *arg)
{
	struct spin_pp *sv = arg;
	struct xseg_request *req;

	for (uint64_t done = 0; done < sv->rounds;) {
		int rc = xseg_accept(sv->seg, sv->port, &req);

		if (rc == -EAGAIN) {
			rc = xseg_wait_spin(sv->seg, sv->port, REPLY_TIMEOUT,
					    &sv->spin);
			if (rc) {
				snprintf(sv->failure, sizeof(sv->failure),
					 "wait: %d", rc);
				return NULL;
			}
			continue;
		}
		if (!rc)
			rc = xseg_respond(sv->seg, req, 0);
		if (rc) {
			snprintf(sv->failure, sizeof(sv->failure),
				 "accept/respond: %d", rc);
			return NULL;
		}
		done++;
	}
	return NULL;
}

static void *spin_pp_client(void *arg)
{
	struct spin_pp *cl = arg;
	struct xseg_request *req;
	int rc = 0;

	for (uint64_t i = 0; i < cl->rounds && !rc; i++) {
		rc = xseg_get_request(cl->seg, cl->port, &req);
		if (!rc)
			rc = xseg_prep_request(cl->seg, req, 1, 0);
		if (rc)
			break;
		req->target[0] = 't';
		req->op = XSEG_OP_PING;
		rc = xseg_submit(cl->seg, req, 0);
		if (!rc)
			rc = xseg_wait_reply_spin(
			    cl->seg, cl->port, REPLY_TIMEOUT, &cl->spin, &req);
		if (!rc)
			rc = req->error ? -req->error : 0;
		if (!rc)
			rc = xseg_put_request(cl->seg, req);
	}
	if (rc)
		snprintf(cl->failure, sizeof(cl->failure), "client: %d", rc);
	return NULL;
}

START_TEST(test_spin_catching_keeps_spinning)
{
	const uint64_t n = rounds() / 10;
	struct xseg *seg = mkseg("spinpp", 16);
	struct spin_pp sv = {.seg = seg, .port = 0, .rounds = n};
	struct spin_pp cl = {.seg = seg, .rounds = n};
	pthread_t ts, tc;

	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &cl.port), 0);
	xseg_spin_init(&sv.spin, SPIN_PP_NS, true);
	xseg_spin_init(&cl.spin, SPIN_PP_NS, true);
	ck_assert_int_eq(pthread_create(&ts, NULL, spin_pp_server, &sv), 0);
	ck_assert_int_eq(pthread_create(&tc, NULL, spin_pp_client, &cl), 0);
	pthread_join(tc, NULL);
	if (cl.failure[0]) /* the server waits for rounds that never come */
		xseg_kick(seg, 0);
	pthread_join(ts, NULL);
	ck_assert_msg(!cl.failure[0], "%s", cl.failure);
	ck_assert_msg(!sv.failure[0], "%s", sv.failure);
	/* every wait spun and every spin caught its work; but a thread
	 * preempted since its last spin (a loaded machine: others want
	 * the CPU) sleeps instead, and the waits of its back-off sleep,
	 * each woken with its work within the spin (hinted) */
	ck_assert_uint_eq(sv.spin.missed, 0);
	ck_assert_uint_eq(cl.spin.missed, 0);
	ck_assert_uint_eq(sv.spin.spins + sv.spin.preempted + sv.spin.hinted,
			  sv.spin.waits);
	ck_assert_uint_eq(cl.spin.spins + cl.spin.preempted + cl.spin.hinted,
			  cl.spin.waits);
	ck_assert_uint_eq(sv.spin.caught, sv.spin.spins);
	ck_assert_uint_eq(cl.spin.caught, cl.spin.spins);
	/* the server waits for the first request at least (if it came
	 * before the server looked, the client waited for its reply) */
	ck_assert_uint_gt(sv.spin.waits + cl.spin.waits, 0);
	if (!sv.spin.preempted)
		ck_assert_uint_eq(sv.spin.skip + sv.spin.hinted, 0);
	if (!cl.spin.preempted)
		ck_assert_uint_eq(cl.spin.skip + cl.spin.hinted, 0);
	ck_assert_uint_eq(xtu_free_requests(seg), 16);
	xseg_leave(seg);
}
END_TEST

/* A thread that lost its CPU to another runnable thread since its last
 * spin sleeps at once instead of spinning (xseg_spin_lost_cpu): the
 * waiter and a busy thread share one CPU, and the waiter yields until the
 * kernel counts an involuntary switch (sched_yield to a runnable thread
 * is one), so the preemption is made, not waited for. */
static bool hog_run;

static void *cpu_hog(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&hog_run, __ATOMIC_ACQUIRE))
		;
	return NULL;
}

static uint64_t my_nivcsw(void)
{
	struct rusage ru;

	ck_assert_int_eq(getrusage(RUSAGE_THREAD, &ru), 0);
	return (uint64_t)ru.ru_nivcsw;
}

START_TEST(test_spin_preempted_sleeps)
{
	struct xseg *seg = mkseg("spinpre", 16);
	struct xseg_spin s;
	cpu_set_t all, one;
	pthread_attr_t attr;
	pthread_t hog;
	uint64_t before;
	int cpu = 0;

	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	xseg_spin_init(&s, 20000, true);
	/* the first wait spins, runs out, and sets the count's baseline;
	 * the second sleeps (the miss's back-off) */
	ck_assert_int_eq(xseg_wait_spin(seg, 0, 100000, &s), -ETIMEDOUT);
	ck_assert_int_eq(xseg_wait_spin(seg, 0, 100000, &s), -ETIMEDOUT);
	ck_assert_uint_eq(xseg_spin_budget(&s), 20000);
	ck_assert_uint_eq(s.spins, 1);

	ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	while (!CPU_ISSET(cpu, &all))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	ck_assert_msg(
	    !pthread_setaffinity_np(pthread_self(), sizeof(one), &one),
	    "cannot pin this thread to CPU %d", cpu);
	ck_assert_int_eq(pthread_attr_init(&attr), 0);
	ck_assert_int_eq(pthread_attr_setaffinity_np(&attr, sizeof(one), &one),
			 0);
	__atomic_store_n(&hog_run, true, __ATOMIC_RELEASE);
	ck_assert_int_eq(pthread_create(&hog, &attr, cpu_hog, NULL), 0);
	before = my_nivcsw();
	for (int i = 0; i < 1000000 && my_nivcsw() == before; i++)
		sched_yield();
	__atomic_store_n(&hog_run, false, __ATOMIC_RELEASE);
	pthread_join(hog, NULL);
	pthread_attr_destroy(&attr);
	ck_assert_int_eq(
	    pthread_setaffinity_np(pthread_self(), sizeof(all), &all), 0);
	ck_assert_msg(my_nivcsw() != before,
		      "the kernel counted no involuntary switch in 1000000 "
		      "yields to a busy thread on CPU %d (getrusage "
		      "ru_nivcsw): the preemption check cannot work here",
		      cpu);

	/* would spin (budget above), but slept: noted as preempted */
	ck_assert_int_eq(xseg_wait_spin(seg, 0, 100000, &s), -ETIMEDOUT);
	ck_assert_uint_eq(s.preempted, 1);
	ck_assert_uint_eq(s.spins, 1);
	ck_assert_uint_eq(s.waits, 3);
	ck_assert(s.contended);
	ck_assert_uint_eq(s.skip, 1 << (s.level - 1));
	xseg_leave(seg);
}
END_TEST

static Suite *threads_suite(void)
{
	Suite *s = suite_create("xseg_threads");
	TCase *tc = tcase_create("threads");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_pingpong_sleeping);
	tcase_add_test(tc, test_pingpong_polling);
	tcase_add_test(tc, test_workers_and_clients);
	tcase_add_test(tc, test_concurrent_get_put);
	tcase_add_test(tc, test_spin_never_catching_backs_off);
	tcase_add_test(tc, test_spin_catching_keeps_spinning);
	tcase_add_test(tc, test_spin_preempted_sleeps);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{

	xtu_init();
	return xtu_run_suite(threads_suite());
}
