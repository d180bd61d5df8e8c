/* SPDX-License-Identifier: MIT */
/*
 * xq between processes: producers and consumers are separate processes that
 * map one memfd at different addresses. Also the kill tests: a producer (or
 * a consumer) SIGKILLed at a random moment leaves the queue usable, nothing
 * is received twice and every surviving producer's value arrives.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "test_xq_util.h"
#include "xq.h"

/* Note: every passing ck_assert sends a message to the Check runner, so the
 * per-value loops below test with if/ck_abort_msg instead. */

#define MAX_CHILDREN  8
#define MAX_PRODUCERS 4

enum role { ROLE_PRODUCER, ROLE_CONSUMER };

/* Control block shared by all processes, after the queue in the memfd. */
struct ctl {
	uint64_t go;	   /* children spin until set */
	uint64_t done;	   /* consumers: all producers are gone */
	uint64_t received; /* values dequeued, all consumers */
	uint64_t order_errors;
	uint64_t foreign_values;
	uint64_t values_per_producer[MAX_PRODUCERS];
	uint8_t counts[]; /* [producer][seq]: times received */
};

struct run {
	int fd;
	size_t queue_bytes; /* rounded up to a page */
	size_t len;
	char *base; /* parent's mapping */
	struct xq *q;
	struct ctl *ctl;
	unsigned producers;
	uint32_t max_per_producer;
	pid_t pids[MAX_CHILDREN];
	unsigned nchildren;
};

static void run_open(struct run *r, uint64_t capacity, unsigned producers,
		     uint32_t max_per_producer)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	memset(r, 0, sizeof(*r));
	r->producers = producers;
	r->max_per_producer = max_per_producer;
	r->queue_bytes = (xq_size(capacity) + page - 1) / page * page;
	r->len = r->queue_bytes + sizeof(struct ctl) +
		 (size_t)producers * max_per_producer;
	r->fd = memfd_create("test_xq_procs", MFD_CLOEXEC);
	ck_assert_int_ge(r->fd, 0);
	ck_assert_int_eq(ftruncate(r->fd, (off_t)r->len), 0);
	r->base =
	    mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	ck_assert_ptr_ne(r->base, MAP_FAILED);
	r->q = (struct xq *)r->base;
	r->ctl = (struct ctl *)(r->base + r->queue_bytes);
	ck_assert_int_eq(xq_init(r->q, capacity, xq_size(capacity)), 0);
}

static void run_close(struct run *r)
{
	txq_kill_all(r->pids, r->nchildren);
	munmap(r->base, r->len);
	close(r->fd);
}

static uint8_t *counts_of(struct ctl *ctl, uint32_t max_per_producer,
			  unsigned p)
{
	return ctl->counts + (size_t)p * max_per_producer;
}

static void wait_go(struct ctl *ctl)
{
	while (!__atomic_load_n(&ctl->go, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void __attribute__((noreturn))
producer_main(struct xq *q, struct ctl *ctl, unsigned id)
{
	uint64_t n = ctl->values_per_producer[id];
	unsigned fails = 0;

	wait_go(ctl);
	for (uint32_t s = 0; s < n; s++)
		while (xq_enqueue(q, TXQ_VALUE(id, s)) != 0)
			txq_wait(&fails);
	_exit(0);
}

static void __attribute__((noreturn))
consumer_main(struct xq *q, struct ctl *ctl, unsigned producers,
	      uint32_t max_per_producer)
{
	int64_t last[MAX_PRODUCERS];
	unsigned fails = 0;
	xqindex v;

	for (unsigned p = 0; p < MAX_PRODUCERS; p++)
		last[p] = -1;
	wait_go(ctl);
	for (;;) {
		uint64_t done = __atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE);

		if (xq_dequeue(q, &v) != 0) {
			/* done was set before this attempt: no producer is
			 * left, so empty is final. */
			if (done)
				break;
			txq_wait(&fails);
			continue;
		}
		unsigned p = TXQ_PRODUCER(v);
		uint32_t s = TXQ_SEQ(v);

		if (p >= producers || s >= max_per_producer) {
			__atomic_fetch_add(&ctl->foreign_values, 1,
					   __ATOMIC_RELAXED);
		} else {
			if ((int64_t)s <= last[p])
				__atomic_fetch_add(&ctl->order_errors, 1,
						   __ATOMIC_RELAXED);
			last[p] = s;
			__atomic_fetch_add(
			    &counts_of(ctl, max_per_producer, p)[s], 1,
			    __ATOMIC_RELAXED);
		}
		__atomic_fetch_add(&ctl->received, 1, __ATOMIC_RELAXED);
	}
	_exit(0);
}

/* Start a child that remaps the memfd elsewhere, drops the parent's mapping
 * (so a stray absolute pointer in the queue would fault) and runs role. */
static pid_t spawn(struct run *r, enum role role, unsigned id)
{
	pid_t parent = getpid();
	unsigned slot = r->nchildren;
	pid_t pid;

	ck_assert_uint_lt(r->nchildren, MAX_CHILDREN);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char *mine;

		txq_child_setup(parent);
		mine = txq_map_elsewhere(r->fd, r->len, slot);
		if (mine == MAP_FAILED || mine == r->base)
			_exit(4);
		munmap(r->base, r->len);

		struct xq *q = (struct xq *)mine;
		struct ctl *ctl = (struct ctl *)(mine + r->queue_bytes);

		if (role == ROLE_PRODUCER)
			producer_main(q, ctl, id);
		consumer_main(q, ctl, r->producers, r->max_per_producer);
	}
	r->pids[r->nchildren++] = pid;
	return pid;
}

/* Reap pid within timeout_s; returns its wait status, or -1 on timeout. */
static int reap(struct run *r, pid_t pid, int timeout_s)
{
	struct timespec start, now;
	int status;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		pid_t got = waitpid(pid, &status, WNOHANG);

		if (got == pid)
			break;
		ck_assert_int_eq(got, 0);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > timeout_s)
			return -1;
		usleep(2000);
	}
	for (unsigned i = 0; i < r->nchildren; i++)
		if (r->pids[i] == pid)
			r->pids[i] = 0;
	return status;
}

static void reap_ok(struct run *r, pid_t pid)
{
	int status = reap(r, pid, 120);

	ck_assert_msg(status != -1, "child %d hung", (int)pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child %d failed: status 0x%x", (int)pid, status);
}

/* The queue is usable and empty: a full lap of fresh values goes through. */
static void check_fresh_lap(struct xq *q)
{
	uint64_t cap = xq_capacity(q);
	xqindex v;

	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), 0);
	for (uint64_t i = 0; i < cap; i++)
		ck_assert_int_eq(xq_enqueue(q, 0xf0000000u + (xqindex)i), 0);
	ck_assert_int_eq(xq_enqueue(q, 1), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), cap);
	for (uint64_t i = 0; i < cap; i++) {
		ck_assert_int_eq(xq_dequeue(q, &v), 0);
		ck_assert_uint_eq(v, 0xf0000000u + (xqindex)i);
	}
	ck_assert_int_eq(xq_dequeue(q, &v), -EAGAIN);
	ck_assert_uint_eq(xq_count(q), 0);
}

/* 2 producer + 2 consumer processes, 10M operations (see txq_per_producer). */
START_TEST(test_procs_mpmc)
{
	uint32_t per = txq_per_producer();

	if (per > TXQ_SEQ_MASK)
		per = TXQ_SEQ_MASK;
	pid_t pids[4];
	struct run r;

	run_open(&r, 256, 2, per);
	r.ctl->values_per_producer[0] = per;
	r.ctl->values_per_producer[1] = per;
	pids[0] = spawn(&r, ROLE_PRODUCER, 0);
	pids[1] = spawn(&r, ROLE_PRODUCER, 1);
	pids[2] = spawn(&r, ROLE_CONSUMER, 0);
	pids[3] = spawn(&r, ROLE_CONSUMER, 1);
	__atomic_store_n(&r.ctl->go, 1, __ATOMIC_RELEASE);
	reap_ok(&r, pids[0]);
	reap_ok(&r, pids[1]);
	/* Consumers stop on empty once this is set, so a lost value shows up
	 * as missing rather than as a hang. */
	__atomic_store_n(&r.ctl->done, 1, __ATOMIC_RELEASE);
	reap_ok(&r, pids[2]);
	reap_ok(&r, pids[3]);

	uint64_t missing = 0, duplicated = 0;

	for (unsigned p = 0; p < 2; p++) {
		uint8_t *c = counts_of(r.ctl, per, p);

		for (uint32_t s = 0; s < per; s++) {
			missing += c[s] == 0;
			duplicated += c[s] > 1;
		}
	}
	ck_assert_uint_eq(missing, 0);
	ck_assert_uint_eq(duplicated, 0);
	ck_assert_uint_eq(r.ctl->order_errors, 0);
	ck_assert_uint_eq(r.ctl->foreign_values, 0);
	ck_assert_uint_eq(r.ctl->received, 2ULL * per);
	check_fresh_lap(r.q);
	run_close(&r);
}
END_TEST

static unsigned test_seed(void)
{
	const char *env = getenv("XQ_SEED");
	unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 0)
				    : (unsigned)time(NULL) ^ (unsigned)getpid();

	fprintf(stderr, "xq kill tests: XQ_SEED=%u\n", seed);
	return seed;
}

/* Wait until values are moving, so kills land mid-stream rather than
 * before the children got going (bounded: a hang shows up in the reaps). */
static void wait_flowing(struct ctl *ctl)
{
	for (unsigned i = 0; i < 20000; i++) {
		if (__atomic_load_n(&ctl->received, __ATOMIC_RELAXED) >= 1000)
			return;
		usleep(100);
	}
}

#ifdef AC_TSAN
#define KILL_ROUNDS 6 /* ThreadSanitizer: ~10x slower, keep under a minute */
#else
#define KILL_ROUNDS 12
#endif
#define VICTIM_VALUES	(1u << 22)
#define SURVIVOR_VALUES 200000u

/* A producer killed mid-stream, repeatedly, on the same queue. */
START_TEST(test_kill_producer)
{
	unsigned seed = test_seed(), killed_running = 0;
	struct run r;

	run_open(&r, 64, 2, VICTIM_VALUES);
	for (unsigned round = 0; round < KILL_ROUNDS; round++) {
		pid_t victim, survivor, cons[2];
		int status;

		memset(r.ctl, 0, sizeof(*r.ctl) + 2 * (size_t)VICTIM_VALUES);
		r.ctl->values_per_producer[0] = VICTIM_VALUES;
		r.ctl->values_per_producer[1] = SURVIVOR_VALUES;
		cons[0] = spawn(&r, ROLE_CONSUMER, 0);
		cons[1] = spawn(&r, ROLE_CONSUMER, 1);
		victim = spawn(&r, ROLE_PRODUCER, 0);
		survivor = spawn(&r, ROLE_PRODUCER, 1);
		__atomic_store_n(&r.ctl->go, 1, __ATOMIC_RELEASE);

		wait_flowing(r.ctl);
		usleep(rand_r(&seed) % 20000);
		kill(victim, SIGKILL);
		status = reap(&r, victim, 120);
		ck_assert_int_ne(status, -1);
		killed_running += WIFSIGNALED(status);
		reap_ok(&r, survivor);
		__atomic_store_n(&r.ctl->done, 1, __ATOMIC_RELEASE);
		reap_ok(&r, cons[0]);
		reap_ok(&r, cons[1]);
		r.nchildren = 0;

		/* Survivor: everything exactly once. */
		uint8_t *c = counts_of(r.ctl, VICTIM_VALUES, 1);

		for (uint32_t s = 0; s < SURVIVOR_VALUES; s++)
			if (c[s] != 1)
				ck_abort_msg("round %u: survivor value %u "
					     "received %u times",
					     round, s, c[s]);
		/* Victim: a prefix of its values, each exactly once (the value
		 * it was enqueuing when killed is either in or out). */
		uint32_t k = 0;

		c = counts_of(r.ctl, VICTIM_VALUES, 0);
		while (k < VICTIM_VALUES && c[k] == 1)
			k++;
		for (uint32_t s = k; s < VICTIM_VALUES; s++)
			if (c[s] != 0)
				ck_abort_msg("round %u: victim value %u "
					     "received %u times (prefix %u)",
					     round, s, c[s], k);
		ck_assert_uint_eq(r.ctl->order_errors, 0);
		ck_assert_uint_eq(r.ctl->foreign_values, 0);
		ck_assert_uint_eq(r.ctl->received, SURVIVOR_VALUES + k);
		check_fresh_lap(r.q);
	}
	fprintf(stderr, "xq kill producer: %u of %u victims died mid-stream\n",
		killed_running, KILL_ROUNDS);
	run_close(&r);
}
END_TEST

/* A consumer killed mid-stream: at most the one value it held is lost,
 * nothing is duplicated, the queue stays usable. */
START_TEST(test_kill_consumer)
{
	unsigned seed = test_seed();
	struct run r;

	run_open(&r, 64, 2, SURVIVOR_VALUES);
	for (unsigned round = 0; round < KILL_ROUNDS / 2; round++) {
		pid_t victim, other, prod[2];
		uint64_t missing = 0;
		int status;

		memset(r.ctl, 0, sizeof(*r.ctl) + 2 * (size_t)SURVIVOR_VALUES);
		r.ctl->values_per_producer[0] = SURVIVOR_VALUES;
		r.ctl->values_per_producer[1] = SURVIVOR_VALUES;
		victim = spawn(&r, ROLE_CONSUMER, 0);
		other = spawn(&r, ROLE_CONSUMER, 1);
		prod[0] = spawn(&r, ROLE_PRODUCER, 0);
		prod[1] = spawn(&r, ROLE_PRODUCER, 1);
		__atomic_store_n(&r.ctl->go, 1, __ATOMIC_RELEASE);

		wait_flowing(r.ctl);
		usleep(rand_r(&seed) % 20000);
		kill(victim, SIGKILL);
		status = reap(&r, victim, 120);
		ck_assert_int_ne(status, -1);
		reap_ok(&r, prod[0]);
		reap_ok(&r, prod[1]);
		__atomic_store_n(&r.ctl->done, 1, __ATOMIC_RELEASE);
		reap_ok(&r, other);
		r.nchildren = 0;

		for (unsigned p = 0; p < 2; p++) {
			uint8_t *c = counts_of(r.ctl, SURVIVOR_VALUES, p);

			for (uint32_t s = 0; s < SURVIVOR_VALUES; s++) {
				if (c[s] > 1)
					ck_abort_msg("round %u: value %u/%u "
						     "received %u times",
						     round, p, s, c[s]);
				missing += c[s] == 0;
			}
		}
		ck_assert_msg(missing <= 1, "round %u: %llu values lost", round,
			      (unsigned long long)missing);
		ck_assert_uint_eq(r.ctl->order_errors, 0);
		ck_assert_uint_eq(r.ctl->foreign_values, 0);
		check_fresh_lap(r.q);
	}
	run_close(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xq_procs");
	TCase *tc = tcase_create("procs");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_procs_mpmc);
	tcase_add_test(tc, test_kill_producer);
	tcase_add_test(tc, test_kill_consumer);
	tcase_set_timeout(tc, 300);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
