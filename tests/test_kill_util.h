/* SPDX-License-Identifier: MIT */
#ifndef TEST_KILL_UTIL_H
#define TEST_KILL_UTIL_H
/*
 * Helpers of the multi-process kill tests of the segment allocators
 * (test_xheap_mp, test_xobj_mp): fork workers that die with the test, kill
 * them, and wait for a worker's progress counter in shared memory.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline void tku_sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Fork a worker running child(id, victim) and _exit with its result; it
 * never outlives the test process. Returns the pid (or -1 in the parent if
 * fork failed). */
static inline pid_t tku_spawn(int (*child)(unsigned id, int victim),
			      unsigned id, int victim)
{
	pid_t parent = getpid();
	pid_t pid = fork();

	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(99);
	_exit(child(id, victim));
}

/* SIGKILL and reap every non-zero pid, and zero it. */
static inline void tku_kill_all(pid_t *pids, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
			pids[i] = 0;
		}
}

/* Wait until *progress (updated by worker pid with release stores) reaches
 * target. -ECHILD if the worker exits first (it found corruption),
 * -ETIMEDOUT after wait_seconds. */
static inline int tku_wait_progress(const uint64_t *progress, pid_t pid,
				    uint64_t target, unsigned wait_seconds)
{
	unsigned waited = 0;

	while (__atomic_load_n(progress, __ATOMIC_ACQUIRE) < target) {
		if (waited++ > wait_seconds * 1000)
			return -ETIMEDOUT;
		if (waitpid(pid, NULL, WNOHANG) != 0)
			return -ECHILD;
		tku_sleep_ms(1);
	}
	return 0;
}

#endif /* TEST_KILL_UTIL_H */
