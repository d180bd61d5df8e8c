/* SPDX-License-Identifier: MIT */
/*
 * Crash during GC: a child process overwrites objects with FUA writes
 * (each durable when it returns; what it issued and completed is recorded
 * in shared memory) and runs GC passes in between. Once the child has
 * started a pass the parent kills it with SIGKILL after a random delay, so
 * kills land in every step of a pass (copying, flushing, the checkpoint,
 * DIR/gc, the unlinks) and in the writes between passes. After each kill
 * the store must open, every completed write must read back exactly (the
 * one in flight: old or new content), and every few rounds the offline
 * check must be clean. BLOCKER_GC_CRASH_ITERATIONS overrides the count;
 * the seed of the kill delays is printed, BLOCKER_GC_CRASH_SEED sets it.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "store_int.h"
#include "test_blocker_util.h"

#define CS	   4096
#define SEG	   (1u << 20)
#define NOBJ	   4
#define OBJ_SIZE   (128 * 1024)
#define MAXOPS	   200000
#define ITERATIONS 30

struct op {
	uint32_t obj, off, len;
	uint64_t seed;
};

struct shared {
	uint64_t issued, done; /* __atomic */
	int in_gc;	       /* __atomic: a pass is running */
	int started;	       /* __atomic: the child has begun a pass */
	int passes;	       /* __atomic: passes the child completed */
	struct op ops[MAXOPS];
};

static char dir[256];
static struct shared *sh;
static uint8_t model[NOBJ][OBJ_SIZE];
static uint64_t applied; /* ops in model */

static void oname(char *out, int i)
{
	snprintf(out, 32, "vol.%04d", i);
}

static void opts(struct blocker_opts *o, int variant)
{
	blocker_opts_init(o);
	o->chunk_size = CS;
	o->segment_size = SEG;
	o->sync_interval_ms = 0;
	o->checkpoint_bytes = variant % 3 == 0 ? 2 * SEG : 0;
	o->mmap_reads = variant % 4 == 1;
	o->io = variant % 5 == 2 ? &blocker_io_uring : &blocker_io_sync;
	o->log = tb_log_fn;
	o->log_arg = NULL;
}

static struct tb_log quiet;

static void child(int iter, uint64_t first_op)
{
	struct blocker_opts o;
	struct blocker_store *s;
	uint64_t rng = 0x9e37 + iter, n = first_op;
	uint8_t *buf = malloc(8 * CS);
	char name[32];

	opts(&o, iter);
	o.log_arg = &quiet;
	if (blocker_open(dir, &o, &s))
		_exit(3);
	for (;;) {
		for (int k = 0; k < 16 && n < MAXOPS; k++, n++) {
			struct op *op = &sh->ops[n];
			op->obj = tb_rnd(&rng) % NOBJ;
			op->off = (tb_rnd(&rng) % (OBJ_SIZE / CS)) * CS;
			op->len = (1 + tb_rnd(&rng) % 8) * CS;
			if (op->off + op->len > OBJ_SIZE)
				op->len = OBJ_SIZE - op->off;
			op->seed = tb_rnd(&rng) | 1;
			__atomic_store_n(&sh->issued, n + 1, __ATOMIC_RELEASE);
			tb_fill(buf, op->len, op->seed, op->off);
			oname(name, op->obj);
			if (blocker_write(s, name, strlen(name), op->off,
					  op->len, buf, BLOCKER_FUA))
				_exit(4);
			__atomic_store_n(&sh->done, n + 1, __ATOMIC_RELEASE);
		}
		__atomic_store_n(&sh->in_gc, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&sh->started, 1, __ATOMIC_RELEASE);
		int r = blocker_gc(s, NULL, NULL);
		__atomic_store_n(&sh->in_gc, 0, __ATOMIC_RELEASE);
		if (r)
			_exit(5);
		__atomic_fetch_add(&sh->passes, 1, __ATOMIC_RELEASE);
		if (n >= MAXOPS)
			_exit(6);
	}
}

static void apply(uint64_t i)
{
	struct op *op = &sh->ops[i];

	tb_fill(model[op->obj] + op->off, op->len, op->seed, op->off);
}

/* every completed write reads back; the one in flight old or new */
static void verify(struct blocker_store *s)
{
	uint64_t issued = __atomic_load_n(&sh->issued, __ATOMIC_ACQUIRE);
	uint64_t done = __atomic_load_n(&sh->done, __ATOMIC_ACQUIRE);
	uint8_t *buf = malloc(OBJ_SIZE);
	char name[32];

	for (; applied < done; applied++)
		apply(applied);
	for (int i = 0; i < NOBJ; i++) {
		oname(name, i);
		ck_assert_int_eq(
		    blocker_read(s, name, strlen(name), 0, OBJ_SIZE, buf), 0);
		if (!memcmp(buf, model[i], OBJ_SIZE))
			continue;
		/* only the write in flight may differ: then it happened */
		ck_assert_msg(issued > done && sh->ops[done].obj == (uint32_t)i,
			      "object %d lost completed writes", i);
		apply(done);
		applied++;
		ck_assert_msg(!memcmp(buf, model[i], OBJ_SIZE),
			      "object %d: neither old nor new", i);
	}
	/* the next child starts where this one's record ends */
	__atomic_store_n(&sh->issued, applied, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->done, applied, __ATOMIC_RELEASE);
	free(buf);
}

START_TEST(test_gc_crash)
{
	int iterations = ITERATIONS, in_gc_kills = 0, removed_seen = 0;
	const char *env = getenv("BLOCKER_GC_CRASH_ITERATIONS");
	struct blocker_opts o;
	struct blocker_store *s;
	const char *seed_env = getenv("BLOCKER_GC_CRASH_SEED");
	uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0)
				 : ((uint64_t)time(NULL) ^ (uint64_t)getpid());
	uint64_t rng = seed | 1;
	uint8_t *buf = malloc(OBJ_SIZE);
	char name[32];

	if (env && atoi(env) > 0)
		iterations = atoi(env);
	/* the kill delays come from it: BLOCKER_GC_CRASH_SEED replays */
	printf("gc crash: seed %llu\n", (unsigned long long)seed);
	fflush(stdout);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	ttmp_mkdtemp(dir, sizeof(dir), "store");
	opts(&o, 1);
	ck_assert_int_eq(blocker_create(dir, &o), 0);
	ck_assert_int_eq(blocker_open(dir, &o, &s), 0);
	for (int i = 0; i < NOBJ; i++) {
		tb_fill(buf, OBJ_SIZE, 50 + i, 0);
		memcpy(model[i], buf, OBJ_SIZE);
		oname(name, i);
		ck_assert_int_eq(
		    blocker_write(s, name, strlen(name), 0, OBJ_SIZE, buf, 0),
		    0);
	}
	ck_assert_int_eq(blocker_close(s), 0);

	for (int it = 0; it < iterations; it++) {
		int status;
		pid_t pid;

		__atomic_store_n(&sh->started, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&sh->passes, 0, __ATOMIC_RELEASE);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0)
			child(it, applied);
		/* kill after the child has begun a pass (progress, not
		 * time), then at a random moment */
		while (!__atomic_load_n(&sh->started, __ATOMIC_ACQUIRE) &&
		       waitpid(pid, &status, WNOHANG) == 0)
			usleep(200);
		/* every third child completes a pass first, so that passes
		 * do remove segments however slow the machine is */
		while (it % 3 == 0 &&
		       !__atomic_load_n(&sh->passes, __ATOMIC_ACQUIRE) &&
		       waitpid(pid, &status, WNOHANG) == 0)
			usleep(200);
		usleep(tb_rnd(&rng) % 30000);
		in_gc_kills += __atomic_load_n(&sh->in_gc, __ATOMIC_ACQUIRE);
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFSIGNALED(status),
			      "iteration %d: child exited with %d", it,
			      WEXITSTATUS(status));
		opts(&o, it + 1);
		memset(&quiet, 0, sizeof(quiet));
		o.log_arg = &quiet;
		int r = blocker_open(dir, &o, &s);
		ck_assert_msg(r == 0, "iteration %d: reopen: %s\n%s", it,
			      strerror(-r), quiet.text);
		verify(s);
		ck_assert_int_eq(blocker_close(s), 0);
		if (access(dir, F_OK) == 0) {
			char p[512];
			snprintf(p, sizeof(p), "%s/gc", dir);
			removed_seen |= access(p, F_OK) == 0;
		}
		if (it % 5 == 4) {
			uint64_t problems = 1;
			memset(&quiet, 0, sizeof(quiet));
			ck_assert_int_eq(blocker_check(dir, NULL,
						       tb_log_fn_line, &quiet,
						       &problems),
					 0);
			ck_assert_msg(problems == 0, "iteration %d: %s", it,
				      quiet.text);
		}
	}
	/* the kills did land inside passes, and passes did remove */
	ck_assert_int_gt(in_gc_kills, 0);
	ck_assert_int_ne(removed_seen, 0);
	printf("gc crash: %d kills, %d inside a pass\n", iterations,
	       in_gc_kills);
	free(buf);
	munmap(sh, sizeof(*sh));
}
END_TEST

int main(void)
{
	Suite *su = suite_create("blocker_gc_crash");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 280);
	tcase_add_test(tc, test_gc_crash);
	suite_add_tcase(su, tc);
	sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
