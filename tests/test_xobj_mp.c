/* SPDX-License-Identifier: MIT */
/*
 * xobj process stress: processes share one pool through a memfd, each
 * mapping it at its own address. Survivors take, stamp, verify and return
 * objects while a series of victims doing the same are SIGKILLed at
 * arbitrary instructions. Afterwards the survivors must have seen no
 * corruption, every object must be either free exactly once or lost, and
 * at most one object per killed process may be lost.
 */
#include "xobj.h"

#include <check.h>

#include "test_kill_util.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POOL_COUNT   64u
#define OBJ_SIZE     256u
#define CTRL_SIZE    4096u
#define NSURVIVORS   2
#define NKILLS	     20
#define MIN_ITERS    100000
#define MAX_PROCS    (NSURVIVORS + 1)
#define WAIT_SECONDS 60

struct ctrl {
	uint64_t progress[MAX_PROCS]; /* atomic: iterations done */
	uint32_t stop;		      /* atomic: survivors may finish */
	uint64_t parent_map;	      /* parent's mapping address */
};

static int shm_fd = -1;
static size_t pool_size;

static uint8_t pattern(unsigned id, uint64_t iter, uint64_t i)
{
	return (uint8_t)(id * 37 + iter * 13 + i * 7 + (i >> 8));
}

/* Child body: returns the failing line, or 0. Each child holds at most one
 * object at any time, so killing it can lose at most that one. */
static int child_run(unsigned id, int victim)
{
	char *map = mmap(NULL, CTRL_SIZE + pool_size, PROT_READ | PROT_WRITE,
			 MAP_SHARED, shm_fd, 0);
	struct ctrl *ctrl;
	struct xobj_pool *p;
	uint64_t iter;

	if (map == MAP_FAILED)
		return __LINE__;
	ctrl = (struct ctrl *)map;
	p = (struct xobj_pool *)(map + CTRL_SIZE);
	/* The point of the test: a different address than the creator's. */
	if ((uint64_t)(uintptr_t)map == ctrl->parent_map)
		return __LINE__;
	for (iter = 0;; iter++) {
		uint32_t idx, back;
		uint8_t *o;
		uint64_t i;
		int ret;

		if (!victim && iter >= MIN_ITERS &&
		    __atomic_load_n(&ctrl->stop, __ATOMIC_ACQUIRE))
			break;
		ret = xobj_get(p, &idx);
		if (ret == -ENOMEM)
			continue;
		if (ret)
			return __LINE__;
		o = xobj_ptr(p, idx);
		if (!o || xobj_index(p, o, &back) || back != idx)
			return __LINE__;
		for (i = 0; i < OBJ_SIZE; i++)
			o[i] = pattern(id, iter, i);
		for (i = 0; i < OBJ_SIZE; i++)
			if (o[i] != pattern(id, iter, i))
				return __LINE__;
		if (xobj_put(p, idx))
			return __LINE__;
		__atomic_store_n(&ctrl->progress[id], iter + 1,
				 __ATOMIC_RELEASE);
	}
	return 0;
}

START_TEST(test_processes_with_kills)
{
	pid_t pids[MAX_PROCS] = {0};
	struct ctrl *ctrl;
	struct xobj_pool *p;
	char *map, seen[POOL_COUNT] = {0};
	unsigned i, k, drained = 0, lost = 0;
	int status, ret;
	uint32_t idx;

	pool_size = xobj_pool_size(POOL_COUNT, OBJ_SIZE);
	ck_assert_uint_gt(pool_size, 0);
	shm_fd = memfd_create("test_xobj_mp", MFD_CLOEXEC);
	ck_assert_int_ge(shm_fd, 0);
	ck_assert_int_eq(ftruncate(shm_fd, CTRL_SIZE + pool_size), 0);
	map = mmap(NULL, CTRL_SIZE + pool_size, PROT_READ | PROT_WRITE,
		   MAP_SHARED, shm_fd, 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	ctrl = (struct ctrl *)map;
	p = (struct xobj_pool *)(map + CTRL_SIZE);
	ctrl->parent_map = (uint64_t)(uintptr_t)map;
	ck_assert_int_eq(xobj_pool_init(p, POOL_COUNT, OBJ_SIZE, pool_size), 0);

	for (i = 0; i < NSURVIVORS; i++)
		pids[i] = tku_spawn(child_run, i, 0);
	for (k = 0; k < NKILLS; k++) {
		ctrl->progress[NSURVIVORS] = 0;
		pids[NSURVIVORS] = tku_spawn(child_run, NSURVIVORS, 1);
		ck_assert_int_gt(pids[NSURVIVORS], 0);
		/* Let it get going, then kill it at a varying moment. */
		ret = tku_wait_progress(&ctrl->progress[NSURVIVORS],
					pids[NSURVIVORS], 100 + k * 397,
					WAIT_SECONDS);
		if (ret)
			tku_kill_all(pids, MAX_PROCS);
		ck_assert_int_eq(ret, 0);
		ck_assert_int_eq(kill(pids[NSURVIVORS], SIGKILL), 0);
		ck_assert_int_eq(waitpid(pids[NSURVIVORS], &status, 0),
				 pids[NSURVIVORS]);
		pids[NSURVIVORS] = 0;
		ck_assert(WIFSIGNALED(status));
		ck_assert_int_eq(WTERMSIG(status), SIGKILL);
	}
	__atomic_store_n(&ctrl->stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < NSURVIVORS; i++) {
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		pids[i] = 0;
		ck_assert(WIFEXITED(status));
		ck_assert_msg(WEXITSTATUS(status) == 0,
			      "survivor %u failed at line %d", i,
			      WEXITSTATUS(status));
		ck_assert_uint_ge(ctrl->progress[i], MIN_ITERS);
	}

	/* Every object is either queued exactly once or lost, and at most one
	 * per killed process is lost. */
	while (xobj_get(p, &idx) == 0) {
		ck_assert_uint_lt(idx, POOL_COUNT);
		ck_assert_int_eq(seen[idx], 0);
		seen[idx] = 1;
		drained++;
	}
	ck_assert_uint_ge(drained, POOL_COUNT - NKILLS);
	for (i = 0; i < POOL_COUNT; i++) {
		if (seen[i])
			continue;
		/* Held by a victim (put recovers it) or lost while free. */
		ret = xobj_put(p, i);
		ck_assert(ret == 0 || ret == -EALREADY);
		if (ret)
			lost++;
	}
	ck_assert_uint_le(lost, NKILLS);
	/* And it keeps working for the creator. */
	for (i = 0; i < POOL_COUNT; i++)
		if (seen[i])
			ck_assert_int_eq(xobj_put(p, i), 0);
	ck_assert_uint_eq(xobj_free_count(p), POOL_COUNT - lost);
	for (i = 0; i < 1000; i++) {
		ck_assert_int_eq(xobj_get(p, &idx), 0);
		memset(xobj_ptr(p, idx), 0x5a, OBJ_SIZE);
		ck_assert_int_eq(xobj_put(p, idx), 0);
		ck_assert_int_eq(xobj_put(p, idx), -EALREADY);
	}
	munmap(map, CTRL_SIZE + pool_size);
	close(shm_fd);
	shm_fd = -1;
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xobj_mp");
	TCase *tc = tcase_create("processes");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 110);
	tcase_add_test(tc, test_processes_with_kills);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
