/* SPDX-License-Identifier: MIT */
/*
 * xheap crash test for the general allocator: rounds of a fresh heap shared
 * (memfd) by a survivor and a victim process, both allocating, filling,
 * verifying and freeing sizes that mostly go through the mutex-protected
 * general allocator (split, merge). The victim is SIGKILLed at a varying
 * moment, sometimes while it holds the mutex. Then the survivor must go on
 * (a dead owner's mutex is repaired, never stuck), see no corruption, and
 * the heap must verify, lose at most what the victim held, and keep
 * working. Kills that landed while the victim held the mutex are counted
 * through the heap's repair counter.
 */
#include "xheap.h"

#include <check.h>

#include "test_kill_util.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int test_xheap_check(struct xheap *heap, unsigned tolerance);

#define HEAP_SIZE    (4u << 20)
#define CTRL_SIZE    4096u
#define ROUNDS	     150
#define HELD	     2
#define AFTER_KILL   300 /* survivor iterations after the kill */
#define MAX_BUF	     (512u << 10)
#define WAIT_SECONDS 60

struct ctrl {
	uint64_t progress[2]; /* atomic: iterations done (0 survivor) */
	uint32_t stop;	      /* atomic: survivor may finish */
};

static int shm_fd = -1;
static char *map;

static uint64_t pattern(unsigned id, uint64_t off, uint64_t iter, uint64_t i)
{
	return ((uint64_t)id << 60) ^ (off * 0x9E3779B97F4A7C15ULL) ^
	       (iter << 20) ^ i;
}

/* About 64 words of the buffer, the last included. */
static uint64_t step_of(uint64_t words)
{
	return words / 64 + 1;
}

/* Half of the sizes above the 64 KiB class-cache bound of a 4 MiB heap (the
 * general allocator), half small (the caches, and splits of free blocks). */
static size_t size_of(uint64_t rnd)
{
	if (rnd & 1)
		return (64u << 10) + (size_t)((rnd >> 8) % (MAX_BUF - 65536));
	return 1 + (size_t)((rnd >> 8) % 16384);
}

static int child_run(unsigned id, int victim)
{
	struct ctrl *ctrl = (struct ctrl *)map;
	struct xheap *h = (struct xheap *)(map + CTRL_SIZE);
	uint64_t offs[HELD], iters[HELD], rnd = 0x9E3779B97F4A7C15ULL;
	int64_t sizes[HELD] = {0};
	uint64_t iter, i, *p;
	unsigned k;

	rnd ^= (uint64_t)getpid() * 0x2545F4914F6CDD1DULL + id;
	for (iter = 0;; iter++) {
		if (!victim && __atomic_load_n(&ctrl->stop, __ATOMIC_ACQUIRE))
			break;
		rnd ^= rnd << 13;
		rnd ^= rnd >> 7;
		rnd ^= rnd << 17;
		k = (unsigned)((rnd >> 40) % HELD);
		if (sizes[k]) {
			uint64_t words = (uint64_t)sizes[k] / 8;

			p = xheap_ptr(h, offs[k]);
			for (i = 0; i < words; i += step_of(words))
				if (p[i] != pattern(id, offs[k], iters[k], i))
					return __LINE__;
			if (p[words - 1] !=
			    pattern(id, offs[k], iters[k], words - 1))
				return __LINE__;
			if (xheap_usable_size(h, offs[k]) != sizes[k])
				return __LINE__;
			if (xheap_free(h, offs[k]))
				return __LINE__;
			sizes[k] = 0;
		} else {
			size_t sz = size_of(rnd);
			int64_t r = xheap_alloc(h, sz, &offs[k]);
			uint64_t words;

			if (r == -ENOMEM)
				goto next;
			if (r < (int64_t)sz || offs[k] % 64)
				return __LINE__;
			sizes[k] = r;
			iters[k] = iter;
			words = (uint64_t)r / 8;
			p = xheap_ptr(h, offs[k]);
			for (i = 0; i < words; i += step_of(words))
				p[i] = pattern(id, offs[k], iter, i);
			p[words - 1] = pattern(id, offs[k], iter, words - 1);
		}
	next:
		__atomic_store_n(&ctrl->progress[id], iter + 1,
				 __ATOMIC_RELEASE);
	}
	for (k = 0; k < HELD; k++)
		if (sizes[k] && xheap_free(h, offs[k]))
			return __LINE__;
	return 0;
}

/* The control block and the heap, in one shared mapping the forked
 * children inherit. */
static void map_shared(struct ctrl **ctrl, struct xheap **h)
{
	shm_fd = memfd_create("test_xheap_crash", MFD_CLOEXEC);
	ck_assert_int_ge(shm_fd, 0);
	ck_assert_int_eq(ftruncate(shm_fd, CTRL_SIZE + HEAP_SIZE), 0);
	map = mmap(NULL, CTRL_SIZE + HEAP_SIZE, PROT_READ | PROT_WRITE,
		   MAP_SHARED, shm_fd, 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	*ctrl = (struct ctrl *)map;
	*h = (struct xheap *)(map + CTRL_SIZE);
}

static void unmap_shared(void)
{
	munmap(map, CTRL_SIZE + HEAP_SIZE);
	close(shm_fd);
	shm_fd = -1;
}

START_TEST(test_kills_under_the_mutex)
{
	struct ctrl *ctrl;
	struct xheap *h;
	uint64_t repairs = 0, off, target, seed = 12345;
	unsigned round;

	map_shared(&ctrl, &h);

	for (round = 0; round < ROUNDS; round++) {
		pid_t pids[2] = {0, 0};
		struct xheap_stats st;
		int status, ret;

		memset(ctrl, 0, sizeof(*ctrl));
		ck_assert_int_eq(xheap_init(h, HEAP_SIZE), 0);
		pids[0] = tku_spawn(child_run, 0, 0);
		pids[1] = tku_spawn(child_run, 1, 1);
		ck_assert_int_gt(pids[0], 0);
		ck_assert_int_gt(pids[1], 0);
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		target = 1 + (seed >> 33) % 400;
		ret = tku_wait_progress(&ctrl->progress[1], pids[1], target,
					WAIT_SECONDS);
		if (ret)
			tku_kill_all(pids, 2);
		ck_assert_msg(ret == 0, "round %u: victim: %d", round, ret);
		ck_assert_int_eq(kill(pids[1], SIGKILL), 0);
		ck_assert_int_eq(waitpid(pids[1], &status, 0), pids[1]);
		pids[1] = 0;
		ck_assert(WIFSIGNALED(status));
		/* The survivor must get through the mutex the victim may
		 * have died holding. */
		target = __atomic_load_n(&ctrl->progress[0], __ATOMIC_ACQUIRE) +
			 AFTER_KILL;
		ret = tku_wait_progress(&ctrl->progress[0], pids[0], target,
					WAIT_SECONDS);
		if (ret)
			tku_kill_all(pids, 2);
		ck_assert_msg(ret == 0,
			      "round %u: survivor stuck or failed: %d", round,
			      ret);
		__atomic_store_n(&ctrl->stop, 1, __ATOMIC_RELEASE);
		ck_assert_int_eq(waitpid(pids[0], &status, 0), pids[0]);
		pids[0] = 0;
		ck_assert(WIFEXITED(status));
		ck_assert_msg(WEXITSTATUS(status) == 0,
			      "round %u: survivor failed at line %d", round,
			      WEXITSTATUS(status));

		ck_assert_int_eq(xheap_verify(h), 0);
		xheap_stats(h, &st);
		repairs += st.repairs;
		/* The victim held at most HELD buffers and one in transit
		 * (popped for a give-back). */
		ck_assert_uint_le(st.allocated_bytes,
				  (uint64_t)(HELD + 1) * MAX_BUF);
		ck_assert_int_eq(test_xheap_check(h, HELD + 1), 0);
		ck_assert_int_eq(xheap_alloc(h, 4096, &off), 4096);
		ck_assert_int_eq(xheap_free(h, off), 0);
		ck_assert_int_eq(xheap_alloc(h, 256 << 10, &off), 256 << 10);
		ck_assert_int_eq(xheap_free(h, off), 0);
		ck_assert_int_eq(xheap_verify(h), 0);
	}
	fprintf(stderr,
		"test_xheap_crash: %u kills, %llu landed while the victim held "
		"the heap mutex (repaired)\n",
		ROUNDS, (unsigned long long)repairs);
	unmap_shared();
}
END_TEST

/* Victim of the owner-death test: xheap_verify walks a heap of many blocks
 * under the mutex, so the victim holds it nearly all the time. */
static int verifier_run(unsigned id, int victim)
{
	struct ctrl *ctrl = (struct ctrl *)map;
	struct xheap *h = (struct xheap *)(map + CTRL_SIZE);
	uint64_t iter;

	(void)victim;
	for (iter = 0;; iter++) {
		if (xheap_verify(h))
			return __LINE__;
		__atomic_store_n(&ctrl->progress[id], iter + 1,
				 __ATOMIC_RELEASE);
	}
	return 0;
}

/* Deterministic counterpart of the random kills: a process killed while it
 * holds the mutex (retried until one kill lands there, which the repair
 * counter shows) leaves a heap that the next caller repairs and that keeps
 * working, with nothing lost. */
START_TEST(test_owner_death_repaired)
{
	enum { NBUF = 8000, ATTEMPTS = 20 };
	static uint64_t offs[NBUF];
	struct xheap_stats st, st0;
	struct ctrl *ctrl;
	struct xheap *h;
	unsigned i, attempt;
	uint64_t off;

	map_shared(&ctrl, &h);
	memset(ctrl, 0, sizeof(*ctrl));
	ck_assert_int_eq(xheap_init(h, HEAP_SIZE), 0);
	/* Many blocks, every other one free: a long walk. */
	for (i = 0; i < NBUF; i++)
		ck_assert_int_eq(xheap_alloc(h, 256, &offs[i]), 256);
	for (i = 0; i < NBUF; i += 2)
		ck_assert_int_eq(xheap_free(h, offs[i]), 0);
	ck_assert_int_gt(xheap_trim(h), 0);
	xheap_stats(h, &st0);
	for (attempt = 0; attempt < ATTEMPTS; attempt++) {
		pid_t pid[1];
		int ret;

		ctrl->progress[1] = 0;
		pid[0] = tku_spawn(verifier_run, 1, 1);
		ck_assert_int_gt(pid[0], 0);
		ret = tku_wait_progress(&ctrl->progress[1], pid[0], 1,
					WAIT_SECONDS);
		if (ret)
			tku_kill_all(pid, 1);
		ck_assert_int_eq(ret, 0);
		tku_kill_all(pid, 1);
		/* Takes the mutex: repairs if the victim died holding it. */
		ck_assert_int_eq(xheap_verify(h), 0);
		xheap_stats(h, &st);
		if (st.repairs)
			break;
	}
	ck_assert_msg(st.repairs > 0, "no kill landed in %u attempts",
		      ATTEMPTS);
	/* Nothing lost, nothing changed, and it still works. */
	ck_assert_uint_eq(st.allocated_bytes, st0.allocated_bytes);
	ck_assert_uint_eq(st.general_free_bytes, st0.general_free_bytes);
	for (i = 0; i < NBUF; i += 2)
		ck_assert_int_eq(xheap_alloc(h, 256, &offs[i]), 256);
	for (i = 0; i < NBUF; i++)
		ck_assert_int_eq(xheap_free(h, offs[i]), 0);
	ck_assert_int_eq(xheap_trim(h) >= 0, 1);
	ck_assert_int_eq(xheap_alloc(h, 2 << 20, &off), 2 << 20);
	ck_assert_int_eq(xheap_free(h, off), 0);
	ck_assert_int_eq(test_xheap_check(h, 0), 0);
	unmap_shared();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xheap_crash");
	TCase *tc = tcase_create("processes");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 110);
	tcase_add_test(tc, test_kills_under_the_mutex);
	tcase_add_test(tc, test_owner_death_repaired);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
