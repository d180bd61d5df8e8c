/* SPDX-License-Identifier: MIT */
/*
 * xheap process stress: processes share one heap through a memfd, each
 * mapping it at its own address. Survivors allocate, fill, verify and free
 * while a series of victims doing the same are SIGKILLed at arbitrary
 * instructions. Afterwards the survivors must have seen no corruption, the
 * heap must be structurally sound, and at most one buffer per killed
 * process may be lost.
 */
#include "xheap.h"

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

int test_xheap_check(struct xheap *heap, unsigned tolerance);

#define HEAP_SIZE    (8u << 20)
#define CTRL_SIZE    4096u
#define NSURVIVORS   2
#define NKILLS	     20
#define MIN_ITERS    100000
#define MAX_BUF	     8192
#define MAX_PROCS    (NSURVIVORS + 1)
#define WAIT_SECONDS 60

struct ctrl {
	uint64_t progress[MAX_PROCS]; /* atomic: iterations done */
	uint32_t stop;		      /* atomic: survivors may finish */
	uint64_t parent_map;	      /* parent's mapping address */
};

static int shm_fd = -1;

static uint8_t pattern(unsigned id, uint64_t iter, uint64_t i)
{
	return (uint8_t)(id * 37 + iter * 13 + i * 7 + (i >> 8));
}

/* Child body: returns the failing line, or 0. Each child holds at most one
 * buffer at any time, so killing it can lose at most that one. */
static int child_run(unsigned id, int victim)
{
	char *map = mmap(NULL, CTRL_SIZE + HEAP_SIZE, PROT_READ | PROT_WRITE,
			 MAP_SHARED, shm_fd, 0);
	struct ctrl *ctrl;
	struct xheap *h;
	uint64_t iter, rnd = 88172645463325252ULL + id * 7919ULL;

	if (map == MAP_FAILED)
		return __LINE__;
	ctrl = (struct ctrl *)map;
	h = (struct xheap *)(map + CTRL_SIZE);
	/* The point of the test: a different address than the creator's. */
	if ((uint64_t)(uintptr_t)map == ctrl->parent_map)
		return __LINE__;
	for (iter = 0;; iter++) {
		uint64_t off, i;
		uint8_t *p;
		size_t sz;
		int64_t r;

		if (!victim && iter >= MIN_ITERS &&
		    __atomic_load_n(&ctrl->stop, __ATOMIC_ACQUIRE))
			break;
		rnd ^= rnd << 13;
		rnd ^= rnd >> 7;
		rnd ^= rnd << 17;
		sz = 1 + (size_t)(rnd % MAX_BUF);
		r = xheap_alloc(h, sz, &off);
		if (r == -ENOMEM)
			continue;
		if (r < (int64_t)sz)
			return __LINE__;
		p = xheap_ptr(h, off);
		if (!p || xheap_off(h, p) != off)
			return __LINE__;
		for (i = 0; i < (uint64_t)r; i += 61)
			p[i] = pattern(id, iter, i);
		if (xheap_usable_size(h, off) != r)
			return __LINE__;
		for (i = 0; i < (uint64_t)r; i += 61)
			if (p[i] != pattern(id, iter, i))
				return __LINE__;
		if (xheap_free(h, off))
			return __LINE__;
		__atomic_store_n(&ctrl->progress[id], iter + 1,
				 __ATOMIC_RELEASE);
	}
	return 0;
}

START_TEST(test_processes_with_kills)
{
	pid_t pids[MAX_PROCS] = {0};
	struct xheap_stats st;
	struct ctrl *ctrl;
	struct xheap *h;
	char *map;
	unsigned i, k;
	int status, ret;
	uint64_t off;

	shm_fd = memfd_create("test_xheap_mp", MFD_CLOEXEC);
	ck_assert_int_ge(shm_fd, 0);
	ck_assert_int_eq(ftruncate(shm_fd, CTRL_SIZE + HEAP_SIZE), 0);
	map = mmap(NULL, CTRL_SIZE + HEAP_SIZE, PROT_READ | PROT_WRITE,
		   MAP_SHARED, shm_fd, 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	ctrl = (struct ctrl *)map;
	h = (struct xheap *)(map + CTRL_SIZE);
	ctrl->parent_map = (uint64_t)(uintptr_t)map;
	ck_assert_int_eq(xheap_init(h, HEAP_SIZE), 0);

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

	/* At most one buffer per killed process is lost, and the heap is
	 * sound (counters may be one off per killed process). */
	xheap_stats(h, &st);
	ck_assert_uint_le(st.allocated_bytes, (uint64_t)NKILLS * MAX_BUF);
	ck_assert_int_eq(test_xheap_check(h, NKILLS), 0);
	/* And it keeps working for the creator. */
	for (i = 0; i < 1000; i++) {
		ck_assert_int_eq(xheap_alloc(h, 4096, &off), 4096);
		memset(xheap_ptr(h, off), 0x5a, 4096);
		ck_assert_int_eq(xheap_free(h, off), 0);
		ck_assert_int_eq(xheap_free(h, off), -EALREADY);
	}
	munmap(map, CTRL_SIZE + HEAP_SIZE);
	close(shm_fd);
	shm_fd = -1;
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xheap_mp");
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
