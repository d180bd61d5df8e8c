/* SPDX-License-Identifier: MIT */
/*
 * xlock: test-and-test-and-set spinlock holding the owner id.
 *
 * Waiting: spin on plain (relaxed) loads so the line stays shared while the
 * holder runs, with exponential back-off in pause instructions between
 * looks, capped at XLOCK_BACKOFF_MAX pauses. After XLOCK_SPIN_ROUNDS rounds
 * a waiter calls sched_yield() before each further look: with more spinners
 * than cores the holder may be preempted, and only giving up the CPU lets it
 * run to its release (three busy threads on two cores otherwise crawl).
 */
#include "xlock.h"

#include <assert.h>
#include <sched.h>

#define XLOCK_BACKOFF_MAX 1024u /* pauses, ~10-40 us on current x86 */
#define XLOCK_SPIN_ROUNDS 16u

static inline void xlock_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

void xlock_init(struct xlock *lock)
{
	__atomic_store_n(&lock->owner, XLOCK_FREE, __ATOMIC_RELEASE);
}

bool xlock_try_acquire(struct xlock *lock, uint64_t owner)
{
	uint64_t expected = XLOCK_FREE;

	assert(owner != XLOCK_FREE);
	/* Look before the CAS: a failed locked CAS still takes the line
	 * exclusive and slows the holder down. */
	if (__atomic_load_n(&lock->owner, __ATOMIC_RELAXED) != XLOCK_FREE)
		return false;
	return __atomic_compare_exchange_n(&lock->owner, &expected, owner,
					   false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

void xlock_acquire(struct xlock *lock, uint64_t owner)
{
	unsigned backoff = 1, rounds = 0;

	assert(owner != XLOCK_FREE);
	while (!xlock_try_acquire(lock, owner)) {
		if (rounds < XLOCK_SPIN_ROUNDS) {
			for (unsigned i = 0; i < backoff; i++)
				xlock_cpu_relax();
			if (backoff < XLOCK_BACKOFF_MAX)
				backoff <<= 1;
			rounds++;
		} else {
			sched_yield();
		}
	}
}

void xlock_release(struct xlock *lock)
{
	assert(__atomic_load_n(&lock->owner, __ATOMIC_RELAXED) != XLOCK_FREE);
	__atomic_store_n(&lock->owner, XLOCK_FREE, __ATOMIC_RELEASE);
}

uint64_t xlock_owner(const struct xlock *lock)
{
	return __atomic_load_n(&lock->owner, __ATOMIC_ACQUIRE);
}
