/* SPDX-License-Identifier: MIT */
/*
 * Bind fence under concurrency (review9 R9-7 part 2): a dead client's
 * port, whose requests a server thread holds and answers one by one,
 * while reaper threads and reaper processes reap and binder threads try
 * to bind it. No bind may succeed while one of the requests is still
 * accepted (or being answered) by the server; exactly one binder
 * succeeds once all are answered; no answer reaches the new owner; every
 * request is back in the pool at the end. The order is forced by
 * hand-shakes, not by time: the server starts answering only after a
 * binder has been refused with -EAGAIN.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
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

#define CLIENT	  0
#define SERVER	  2
#define NR_REQS	  64
#define NR_HELD	  16
#define NR_REAPT  2 /* reaper threads */
#define NR_REAPP  2 /* reaper processes */
#define NR_BIND	  2 /* binder threads */
#define NR_ROUNDS 3

struct client_arg {
	const char *name;
	int ready_fd, go_fd;
};

static int client(void *p)
{
	struct client_arg *a = p;
	struct xseg_request *req;
	struct xseg *seg;
	char b = 0;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, CLIENT, "fclient"))
		return 1;
	for (int i = 0; i < NR_HELD; i++) {
		if (xseg_get_request(seg, CLIENT, &req) ||
		    xseg_prep_request(seg, req, 3, 512))
			return 2;
		memcpy(req->target, "obj", 3);
		req->op = XSEG_OP_WRITE;
		if (xseg_submit(seg, req, SERVER))
			return 3;
	}
	/* dies once all of them are accepted by the server (before, a
	 * reaper's new generation would make accept drop them) */
	if (write(a->ready_fd, &b, 1) != 1 || read(a->go_fd, &b, 1) != 1)
		return 4;
	raise(SIGKILL);
	return 5;
}

struct reaper_proc_arg {
	const char *name;
	int *stop; /* MAP_SHARED */
};

static int reaper_proc(void *p)
{
	struct reaper_proc_arg *a = p;
	struct xseg *seg;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	while (!__atomic_load_n(a->stop, __ATOMIC_ACQUIRE))
		if (xseg_reap(seg, NULL) < 0)
			return 2;
	xseg_leave(seg);
	return 0;
}

struct round {
	struct xseg *seg;
	struct xseg_request *held[NR_HELD];
	int answers_begun; /* respond calls started */
	int refused;	   /* binds refused with -EAGAIN */
	int bound;	   /* successful binds */
	int stop;	   /* reaper threads */
	int bad;	   /* first failure seen by a thread (0: none) */
	int received;	   /* answers delivered to the new owner */
};

static void note_bad(struct round *r, int code)
{
	int zero = 0;

	__atomic_compare_exchange_n(&r->bad, &zero, code, false,
				    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static void *server_thread(void *p)
{
	struct round *r = p;

	/* Answer only once a binder has been refused, so the answers race
	 * with binds that are waiting for them. */
	while (!__atomic_load_n(&r->refused, __ATOMIC_SEQ_CST) &&
	       !__atomic_load_n(&r->bad, __ATOMIC_SEQ_CST))
		sched_yield();
	for (int i = 0; i < NR_HELD; i++) {
		__atomic_add_fetch(&r->answers_begun, 1, __ATOMIC_SEQ_CST);
		if (xseg_respond(r->seg, r->held[i], 0))
			note_bad(r, 1);
		sched_yield();
	}
	return NULL;
}

static void *reaper_thread(void *p)
{
	struct round *r = p;

	while (!__atomic_load_n(&r->stop, __ATOMIC_SEQ_CST))
		if (xseg_reap(r->seg, NULL) < 0)
			note_bad(r, 2);
	return NULL;
}

static void *binder_thread(void *p)
{
	struct round *r = p;
	struct xseg_request *req;

	for (;;) {
		int rc = xseg_bind_port(r->seg, CLIENT, "fnew");

		if (rc == -EAGAIN) {
			__atomic_add_fetch(&r->refused, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		if (rc == -EBUSY) { /* the other binder holds the claim */
			usleep(100);
			continue;
		}
		if (rc == -EALREADY) /* the other binder got it */
			return NULL;
		if (rc) {
			note_bad(r, 3);
			return NULL;
		}
		break;
	}
	__atomic_add_fetch(&r->bound, 1, __ATOMIC_SEQ_CST);
	/* Bound: every held request must have left the server's hands. */
	if (__atomic_load_n(&r->answers_begun, __ATOMIC_SEQ_CST) != NR_HELD)
		note_bad(r, 4);
	for (int i = 0; i < NR_HELD; i++) {
		uint64_t w = xseg_rs_load(r->held[i]);
		uint32_t st = xseg_rs_state(w);

		if (st == XSEG_RS_ACCEPTED ||
		    (st == XSEG_RS_ANSWERING && xseg_rs_holder(w) == SERVER))
			note_bad(r, 5);
	}
	while (xseg_receive(r->seg, CLIENT, &req) == 0)
		__atomic_add_fetch(&r->received, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

START_TEST(test_reapers_and_binders_wait_for_answers)
{
	char err[XSEG_ERRBUF_LEN];
	const char *name = xtu_segname("fthr");
	struct reaper_proc_arg ra;
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	pid_t reapers[NR_REAPP];
	int *stop;

	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = 2;
	cfg.nr_requests = NR_REQS;
	cfg.free_cache = 4;
	ck_assert_msg(xseg_create(name, &cfg, &seg, err, sizeof(err)) == 0,
		      "create: %s", err);
	ck_assert_int_eq(xseg_bind_port(seg, SERVER, "fserver"), 0);
	stop = mmap(NULL, sizeof(*stop), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(stop, MAP_FAILED);
	*stop = 0;
	ra = (struct reaper_proc_arg){name, stop};
	for (int i = 0; i < NR_REAPP; i++) {
		reapers[i] = xtu_fork(reaper_proc, &ra);
		ck_assert_int_gt(reapers[i], 0);
	}

	for (int round = 0; round < NR_ROUNDS; round++) {
		struct round r = {.seg = seg};
		struct xseg_port_info pi;
		struct client_arg ca;
		pthread_t st, rt[NR_REAPT], bt[NR_BIND];
		int ready[2], go[2];
		pid_t pid;
		char b;

		ck_assert_int_eq(pipe(ready), 0);
		ck_assert_int_eq(pipe(go), 0);
		ca = (struct client_arg){name, ready[1], go[0]};
		pid = xtu_fork(client, &ca);
		ck_assert_int_gt(pid, 0);
		ck_assert_int_eq(read(ready[0], &b, 1), 1);
		for (int i = 0; i < NR_HELD; i++) {
			struct xseg_request *req = NULL;
			int rc;

			while ((rc = xseg_accept(seg, SERVER, &req)) == -EAGAIN)
				sched_yield();
			ck_assert_int_eq(rc, 0);
			r.held[i] = req;
		}
		ck_assert_int_eq(write(go[1], &b, 1), 1);
		ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
		close(ready[0]);
		close(ready[1]);
		close(go[0]);
		close(go[1]);

		ck_assert_int_eq(pthread_create(&st, NULL, server_thread, &r),
				 0);
		for (int i = 0; i < NR_REAPT; i++)
			ck_assert_int_eq(
			    pthread_create(&rt[i], NULL, reaper_thread, &r), 0);
		for (int i = 0; i < NR_BIND; i++)
			ck_assert_int_eq(
			    pthread_create(&bt[i], NULL, binder_thread, &r), 0);
		for (int i = 0; i < NR_BIND; i++)
			pthread_join(bt[i], NULL);
		pthread_join(st, NULL);
		__atomic_store_n(&r.stop, 1, __ATOMIC_SEQ_CST);
		for (int i = 0; i < NR_REAPT; i++)
			pthread_join(rt[i], NULL);

		ck_assert_msg(r.bad == 0, "round %d: failure %d", round, r.bad);
		ck_assert_int_ge(r.refused, 1);
		ck_assert_int_eq(r.bound, 1);
		ck_assert_int_eq(r.received, 0);
		ck_assert_int_eq(xseg_port_info(seg, SERVER, &pi), 0);
		ck_assert_uint_eq(pi.served, (uint64_t)NR_HELD * (round + 1));
		ck_assert(!pi.request_depth);
		ck_assert_int_eq(xseg_release_port(seg, CLIENT), 0);
	}
	__atomic_store_n(stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < NR_REAPP; i++)
		ck_assert_int_eq(xtu_wait(reapers[i], 30000), 0);
	ck_assert_int_eq(xseg_release_port(seg, SERVER), 0);
	ck_assert_int_ge(xseg_reap(seg, NULL), 0);
	ck_assert_uint_eq(xtu_free_requests(seg), NR_REQS);
	munmap(stop, sizeof(*stop));
	xseg_leave(seg);
}
END_TEST

static Suite *fence_threads_suite(void)
{
	Suite *s = suite_create("xseg_fence_threads");
	TCase *tc = tcase_create("concurrent");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reapers_and_binders_wait_for_answers);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	xtu_init();
	return xtu_run_suite(fence_threads_suite());
}
