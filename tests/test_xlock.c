/* SPDX-License-Identifier: MIT */
/* xlock: owner reporting, try_acquire, mutual exclusion between threads and
 * between processes, and progress with more spinners than cores. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xlock.h"

START_TEST(test_basic)
{
	struct xlock lock;

	memset(&lock, 0xff, sizeof(lock));
	xlock_init(&lock);
	ck_assert_uint_eq(xlock_owner(&lock), XLOCK_FREE);
	ck_assert(xlock_try_acquire(&lock, 0x1234));
	ck_assert_uint_eq(xlock_owner(&lock), 0x1234);
	/* Held: a second attempt, by anyone (even the holder), fails and
	 * leaves the owner alone. The lock is not recursive. */
	ck_assert(!xlock_try_acquire(&lock, 0x5678));
	ck_assert(!xlock_try_acquire(&lock, 0x1234));
	ck_assert_uint_eq(xlock_owner(&lock), 0x1234);
	xlock_release(&lock);
	ck_assert_uint_eq(xlock_owner(&lock), XLOCK_FREE);

	xlock_acquire(&lock, UINT64_MAX);
	ck_assert_uint_eq(xlock_owner(&lock), UINT64_MAX);
	xlock_release(&lock);
	ck_assert(xlock_try_acquire(&lock, 7));
	xlock_release(&lock);
}
END_TEST

#ifndef NDEBUG
/* Owner 0 would look free: refused (assert, SIGABRT). */
START_TEST(test_zero_owner_refused)
{
	struct xlock lock;

	xlock_init(&lock);
	xlock_try_acquire(&lock, XLOCK_FREE);
}
END_TEST

START_TEST(test_release_free_refused)
{
	struct xlock lock;

	xlock_init(&lock);
	xlock_release(&lock);
}
END_TEST
#endif

#define THREADS 4

struct shared_counter {
	struct xlock lock;
	uint64_t counter; /* plain: protected by lock only */
	uint64_t in_section;
	uint64_t overlaps;
	unsigned iterations;
	unsigned work; /* busy iterations inside the section */
};

struct worker {
	struct shared_counter *sc;
	uint64_t owner;
};

static void critical_section(struct shared_counter *sc, uint64_t owner)
{
	volatile unsigned spin = 0;

	xlock_acquire(&sc->lock, owner);
	if (sc->in_section++ != 0)
		sc->overlaps++;
	if (xlock_owner(&sc->lock) != owner)
		sc->overlaps++;
	sc->counter++;
	for (unsigned k = 0; k < sc->work; k++)
		spin++;
	sc->in_section--;
	xlock_release(&sc->lock);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (unsigned i = 0; i < w->sc->iterations; i++)
		critical_section(w->sc, w->owner);
	return NULL;
}

static void run_threads(unsigned nthreads, unsigned iterations, unsigned work,
			bool two_cpus)
{
	struct shared_counter sc;
	struct worker w[THREADS];
	pthread_t t[THREADS];

	memset(&sc, 0, sizeof(sc));
	xlock_init(&sc.lock);
	sc.iterations = iterations;
	sc.work = work;
	for (unsigned i = 0; i < nthreads; i++) {
		w[i] = (struct worker){&sc, 0x100 + i};
		ck_assert_int_eq(
		    pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
		if (two_cpus && sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
			cpu_set_t set;

			CPU_ZERO(&set);
			CPU_SET(0, &set);
			CPU_SET(1, &set);
			pthread_setaffinity_np(t[i], sizeof(set), &set);
		}
	}
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	ck_assert_uint_eq(sc.overlaps, 0);
	ck_assert_uint_eq(sc.counter, (uint64_t)nthreads * iterations);
	ck_assert_uint_eq(xlock_owner(&sc.lock), XLOCK_FREE);
}

/* Mutual exclusion: a plain counter incremented under the lock is exact. */
START_TEST(test_mutual_exclusion)
{
	run_threads(THREADS, 100000, 50, false);
}
END_TEST

/* Three spinners on two CPUs, each holding the lock for a while: they all
 * finish (the back-off yields to a preempted holder). No timing asserted. */
START_TEST(test_more_spinners_than_cores)
{
	run_threads(3, 20000, 2000, true);
}
END_TEST

/* Mutual exclusion between processes through a shared mapping. */
START_TEST(test_processes)
{
	struct shared_counter *sc;
	pid_t parent = getpid(), pids[3];
	const unsigned iterations = 100000;

	sc = mmap(NULL, sizeof(*sc), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sc, MAP_FAILED);
	memset(sc, 0, sizeof(*sc));
	xlock_init(&sc->lock);
	sc->iterations = iterations;
	for (unsigned i = 0; i < 3; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(3);
			for (unsigned k = 0; k < iterations; k++)
				critical_section(
				    sc, ((uint64_t)getpid() << 16) | 1);
			_exit(0);
		}
	}
	for (unsigned i = 0; i < 3; i++) {
		int status;

		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	ck_assert_uint_eq(sc->overlaps, 0);
	ck_assert_uint_eq(sc->counter, 3ULL * iterations);
	ck_assert_uint_eq(xlock_owner(&sc->lock), XLOCK_FREE);
	munmap(sc, sizeof(*sc));
}
END_TEST

/* A holder that died keeps the lock: the owner id says who (xlock never
 * breaks a lock; recovery belongs to the caller). */
START_TEST(test_dead_holder_visible)
{
	struct xlock *lock;
	pid_t pid;
	int status;

	lock = mmap(NULL, sizeof(*lock), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(lock, MAP_FAILED);
	xlock_init(lock);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		xlock_acquire(lock, (uint64_t)getpid() << 16);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_uint_eq(xlock_owner(lock), (uint64_t)pid << 16);
	ck_assert(!xlock_try_acquire(lock, 1));
	munmap(lock, sizeof(*lock));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xlock");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_basic);
#ifndef NDEBUG
	tcase_add_test_raise_signal(tc, test_zero_owner_refused, SIGABRT);
	tcase_add_test_raise_signal(tc, test_release_free_refused, SIGABRT);
#endif
	tcase_add_test(tc, test_mutual_exclusion);
	tcase_add_test(tc, test_more_spinners_than_cores);
	tcase_add_test(tc, test_processes);
	tcase_add_test(tc, test_dead_holder_visible);
	tcase_set_timeout(tc, 300);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
