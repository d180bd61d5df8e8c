/* SPDX-License-Identifier: MIT */
/* Helpers shared by the xq stress tests (threads, processes, kills). */
#ifndef TEST_XQ_UTIL_H
#define TEST_XQ_UTIL_H

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xq.h"

/* Values per producer in the 2+2 stress tests: 10 million operations in
 * all (2 x 2.5M enqueues and as many dequeues). ThreadSanitizer runs about
 * 10x slower on this code, so it gets 4 million to stay within a minute on
 * a busy 2-core machine. XQ_STRESS_VALUES overrides either. */
#ifdef AC_TSAN
#define TXQ_DEFAULT_PER_PRODUCER 1000000u
#else
#define TXQ_DEFAULT_PER_PRODUCER 2500000u
#endif

static inline uint32_t txq_per_producer(void)
{
	const char *env = getenv("XQ_STRESS_VALUES");

	if (env && *env)
		return (uint32_t)strtoul(env, NULL, 0);
	return TXQ_DEFAULT_PER_PRODUCER;
}

/* Values carry the producer in the top 4 bits and a sequence below. */
#define TXQ_SEQ_BITS	28
#define TXQ_SEQ_MASK	((1u << TXQ_SEQ_BITS) - 1)
#define TXQ_VALUE(p, s) (((uint32_t)(p) << TXQ_SEQ_BITS) | (uint32_t)(s))
#define TXQ_PRODUCER(v) ((v) >> TXQ_SEQ_BITS)
#define TXQ_SEQ(v)	((v)&TXQ_SEQ_MASK)

static inline void txq_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/* Back off after a full/empty answer. The machine has fewer cores than our
 * threads, so yield regularly or the thread we wait for never runs. */
static inline void txq_wait(unsigned *fails)
{
	if (++*fails % 64 == 0)
		sched_yield();
	else
		txq_relax();
}

/* Map the memfd again at an address of the kernel's choice plus a
 * per-process page offset, so every process uses a different address for
 * the same queue. Returns MAP_FAILED on error. */
static inline void *txq_map_elsewhere(int fd, size_t len, unsigned slot)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t pad = page * (slot + 1);
	char *area = mmap(NULL, len + pad, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (area == MAP_FAILED)
		return MAP_FAILED;
	munmap(area, pad);
	return mmap(area + pad, len, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_FIXED, fd, 0);
}

/* In a child: die with the parent (the Check runner may kill the test on
 * timeout; children must not outlive it). */
static inline void txq_child_setup(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(3);
}

/* Kill and reap every child still listed (pid > 0). */
static inline void txq_kill_all(pid_t *pids, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
			pids[i] = 0;
		}
	}
}

#endif /* TEST_XQ_UTIL_H */
