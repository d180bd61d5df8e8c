/* SPDX-License-Identifier: MIT */
#ifndef XLOCK_H
#define XLOCK_H
/*
 * xlock: a spinlock that records who holds it.
 *
 * Contract
 * - Only for short critical sections that never block (no syscalls, no
 *   allocation, no waiting on another lock that might block).
 * - Works in shared memory between processes: the lock is one 64-bit word,
 *   no pointers.
 * - The word holds the owner id of the holder (non-zero), or XLOCK_FREE.
 *   Owner ids are chosen by the caller (xseg uses pid << 16 | thread slot);
 *   they exist for diagnosis ("who holds it?"), and so a recovery path can
 *   see that a dead process holds a lock. xlock itself never breaks a lock.
 * - Acquire spins with exponential back-off (pause instruction, then
 *   sched_yield past a bound) so that more spinners than cores do not starve
 *   the holder: the original xseg's spinlocks without back-off made three
 *   busy threads on two cores run at half speed.
 * - Memory ordering: acquire has acquire semantics, release has release
 *   semantics; everything written inside the section is visible to the next
 *   holder.
 * - Not recursive (the holder's second acquire spins forever; its
 *   try_acquire fails) and not fair: a releasing thread that re-acquires at
 *   once usually wins. Waiters read the word before trying the CAS, so they
 *   do not steal the line from the holder while it works.
 */
#include <stdbool.h>
#include <stdint.h>

#define XLOCK_FREE 0ULL

struct xlock {
	uint64_t owner; /* accessed only through __atomic builtins */
};

/* Initialise to the free state. Not thread-safe against users. */
void xlock_init(struct xlock *lock);

/* Spin (with back-off) until acquired. owner must be non-zero. */
void xlock_acquire(struct xlock *lock, uint64_t owner);

/* One attempt. Returns true if acquired. owner must be non-zero. */
bool xlock_try_acquire(struct xlock *lock, uint64_t owner);

/* Release; the caller must be the holder. Releasing a free lock is caught by
 * an assert (the lock word does not say which thread of an owner id holds
 * it, so a release by a non-holder with the lock held is not detected). */
void xlock_release(struct xlock *lock);

/* The current holder, or XLOCK_FREE. A snapshot, for diagnosis only. */
uint64_t xlock_owner(const struct xlock *lock);

#endif /* XLOCK_H */
