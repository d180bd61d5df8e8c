/* SPDX-License-Identifier: MIT */
/*
 * xseg signaling: futex words in the segment, spin-then-sleep waits (a
 * fixed spin per handle, or an adaptive one per waiting thread: see
 * xseg.h, "Adaptive spinning").
 *
 * Protocol (per port: futex_seq, a 32-bit word, and sleepers, a 64-bit word
 * whose low half counts sleepers and whose high half counts signals)
 *   waiter:   sleepers += 1 (seq_cst RMW); v = futex_seq; re-check queues;
 *             FUTEX_WAIT(futex_seq, v); sleepers -= 1
 *   signaler: enqueue (seq_cst CAS inside xq); s = sleepers (seq_cst RMW,
 *             adding 2^32: the signal count); if low half of s:
 *             futex_seq += 1; wakes += 1; FUTEX_WAKE(futex_seq, all)
 * A batch (xseg_sigbatch) does several enqueues and then one signal: the
 * argument below holds for every enqueue of the batch, since each one
 * precedes the signal's RMW.
 * Either the signaler's read of sleepers comes after the waiter's increment
 * in the single order of seq_cst operations, and it bumps the word (the
 * waiter's FUTEX_WAIT then returns at once or is woken), or it comes before
 * it, and then the enqueue precedes the waiter's re-check, which sees the
 * request. No wake-up can be lost. RMWs stand in for fences because
 * ThreadSanitizer does not model fences.
 *
 * The shared futex ops (not FUTEX_PRIVATE) are needed: the waiters and
 * signalers are different processes with different mappings.
 */
#include "xseg_internal.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define XSEG_WAIT_REQ	   1u
#define XSEG_WAIT_REPLY	   2u
#define XSEG_SPIN_BATCH	   32
#define XSEG_SPIN_YIELD_NS (20ULL * 1000)
/* A spin reads its thread's preemption count (getrusage, about 1.1 us on
 * a VM: a system call) only once it has run this long without work: work
 * that comes sooner (the next request of a polling client, a reply in
 * flight) is caught without it. Session 19 read it before every spin, on
 * the critical path of every request: in-process 4 KiB hits at queue
 * depth 1 took 1.5-1.6 us more at p50 (docs/performance.md, "Session
 * 21"). A preempted thread spins this long at most before it learns it,
 * about what the read costs: 3 us made randread at queue depth 16 through
 * NBD lose in one sitting, 1 us did not. */
#define XSEG_SPIN_CHECK_NS (1ULL * 1000)

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

static int futex_wait(uint32_t *addr, uint32_t val, uint64_t timeout_ns)
{
	struct timespec ts, *tp = NULL;

	if (timeout_ns != XSEG_WAIT_FOREVER) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000ULL);
		ts.tv_nsec = (long)(timeout_ns % 1000000000ULL);
		tp = &ts;
	}
	/* FUTEX_WAIT's timeout is relative (CLOCK_MONOTONIC). */
	if (syscall(SYS_futex, addr, FUTEX_WAIT, val, tp, NULL, 0) < 0)
		return -errno;
	return 0;
}

static void futex_wake_all(uint32_t *addr)
{
	int saved = errno;

	syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	errno = saved;
}

/* xq_ready, not xq_count: a poller reading the queue's tail counter
 * takes that line from the producer, whose tail CAS then waits for it,
 * and sees the value one transfer later than through the head's cell
 * (hitpath6: noop ping qd1 polling p50 1295 -> ~1000 ns). Seq_cst loads,
 * so the protocol above holds as with the tail: the producer's cell
 * store precedes its signal RMW. It may be true with nothing to take
 * (a head lagging a dequeue that finished or was killed): the caller's
 * accept or receive then helps the head on and finds nothing, as after
 * any spurious wake-up. */
static bool has_work(const struct xseg_port_local *pl, unsigned mask)
{
	return ((mask & XSEG_WAIT_REQ) && xq_ready(pl->reqq)) ||
	       ((mask & XSEG_WAIT_REPLY) && xq_ready(pl->replyq));
}

void xseg_signal(struct xseg *seg, uint32_t port)
{
	struct xseg_port *p;

	if (port >= seg->nr_ports)
		return;
	p = seg->ports[port].port;
	/* The RMW that orders us after the enqueue also counts the signal:
	 * no extra atomic on the fast path. */
	if ((uint32_t)__atomic_fetch_add(&p->sleepers, 1ULL << 32,
					 __ATOMIC_SEQ_CST) == 0)
		return;
	__atomic_fetch_add(&p->futex_seq, 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&p->wakes, 1, __ATOMIC_RELAXED);
	futex_wake_all(&p->futex_seq);
}

void xseg_kick(struct xseg *seg, uint32_t port)
{
	struct xseg_port *p;

	if (port >= seg->nr_ports)
		return;
	p = seg->ports[port].port;
	__atomic_fetch_add(&p->futex_seq, 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&p->wakes, 1, __ATOMIC_RELAXED);
	futex_wake_all(&p->futex_seq);
}

/* Reap if this handle's period has passed (wall clock, whatever the
 * callers' timeouts): the request we wait for may be held by a peer that
 * died. One thread per handle wins the CAS and reaps. Returns true if this
 * call reaped; *next: when the next reap is due (> now). */
static bool reap_if_due(struct xseg *seg, uint64_t now, uint64_t *next)
{
	uint64_t due = __atomic_load_n(&seg->next_reap_ns, __ATOMIC_RELAXED);
	bool won = false;

	if (now >= due) {
		won = __atomic_compare_exchange_n(
		    &seg->next_reap_ns, &due, now + XSEG_REAP_PERIOD_NS, false,
		    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		if (won)
			xseg_reap(seg, NULL);
		due = __atomic_load_n(&seg->next_reap_ns, __ATOMIC_RELAXED);
	}
	if (next)
		*next = due > now ? due : now + XSEG_REAP_PERIOD_NS;
	return won;
}

static uint64_t deadline_after(uint64_t now, uint64_t timeout_ns)
{
	if (timeout_ns == XSEG_WAIT_FOREVER || timeout_ns > UINT64_MAX - now)
		return UINT64_MAX;
	return now + timeout_ns;
}

static inline void spin_stat(uint64_t *c)
{
	/* single writer (the owner thread): relaxed store, not an RMW; other
	 * threads may read it with relaxed loads (xseg.h) */
	__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
}

void xseg_spin_init(struct xseg_spin *s, uint64_t max_ns, bool adaptive)
{
	memset(s, 0, sizeof(*s));
	s->max_ns = max_ns;
	s->adaptive = adaptive;
}

#define XSEG_SPIN_LEVEL_MAX 6 /* 1u << 6 == XSEG_SPIN_SKIP_MAX */
_Static_assert((1u << XSEG_SPIN_LEVEL_MAX) == XSEG_SPIN_SKIP_MAX,
	       "level cap and skip cap disagree");

uint64_t xseg_spin_note(struct xseg_spin *s, enum xseg_spin_outcome o)
{
	spin_stat(&s->waits);
	switch (o) {
	case XSEG_SPIN_CAUGHT:
		spin_stat(&s->spins);
		spin_stat(&s->caught);
		s->level = 0;
		s->skip = 0;
		s->contended = false;
		break;
	case XSEG_SPIN_MISSED:
		spin_stat(&s->spins);
		spin_stat(&s->missed);
		if (!s->adaptive)
			break;
		s->skip = 1u << s->level;
		if (s->level < XSEG_SPIN_LEVEL_MAX)
			s->level++;
		break;
	case XSEG_SPIN_SLEPT_SHORT:
		spin_stat(&s->hinted);
		/* Work came within the spin's reach: try spinning again
		 * soon, but not at once: on a core shared with the process
		 * we wait for, sleeping may be what let the work come
		 * soon, and a spin there would miss again. Not while the
		 * back-off is for a preemption: then it surely was. */
		if (s->contended) {
			if (s->skip)
				s->skip--;
		} else if (s->skip) {
			s->skip = (s->skip - 1) / 2;
		}
		break;
	case XSEG_SPIN_SLEPT_LONG:
		if (s->skip)
			s->skip--;
		break;
	case XSEG_SPIN_PREEMPTED:
		spin_stat(&s->preempted);
		if (!s->adaptive)
			break;
		s->contended = true;
		s->skip = 1u << s->level;
		if (s->level < XSEG_SPIN_LEVEL_MAX)
			s->level++;
		break;
	}
	return xseg_spin_budget(s);
}

bool xseg_spin_lost_cpu(struct xseg_spin *s, uint64_t nivcsw)
{
	bool lost = s->nivcsw_known && nivcsw != s->nivcsw;

	s->nivcsw = nivcsw;
	s->nivcsw_known = true;
	if (!lost)
		s->contended = false;
	return lost;
}

#ifdef XSEG_TEST_HOOKS
bool (*xseg_test_nivcsw)(uint64_t *n);
void (*xseg_test_yield)(void);
void (*xseg_test_spin_begin)(void);
#endif

/* The calling thread's involuntary context switches (it was preempted,
 * or yielded the CPU to another runnable thread) in *n; false if the
 * kernel does not say (then no preemption is judged). */
static bool thread_nivcsw(uint64_t *n)
{
	struct rusage ru;

#ifdef XSEG_TEST_HOOKS
	if (xseg_test_nivcsw)
		return xseg_test_nivcsw(n);
#endif
	if (getrusage(RUSAGE_THREAD, &ru))
		return false;
	*n = (uint64_t)ru.ru_nivcsw;
	return true;
}

/* The spin giving way to a thread runnable on its CPU. */
static void spin_yield(void)
{
#ifdef XSEG_TEST_HOOKS
	if (xseg_test_yield) {
		xseg_test_yield();
		return;
	}
#endif
	sched_yield();
}

/* A spin of s that has run XSEG_SPIN_CHECK_NS without work: was its
 * thread preempted since the last such check? The window is the whole time
 * since, a back-off included, on purpose: under lasting contention some
 * preemption falls in it, and the thread stays backed off (up to
 * XSEG_SPIN_SKIP_MAX waits) while the CPUs are short; that is what made queue
 * depth 16 as fast as not polling (docs/performance.md, "Session 19"). */
static bool spin_preempted(struct xseg_spin *s, uint64_t spin_ns)
{
	uint64_t n;

	if (!spin_ns || !s->adaptive || !thread_nivcsw(&n))
		return false;
	return xseg_spin_lost_cpu(s, n);
}

/* Wait for work in mask on port. spin_ns: the fixed spin when s is NULL;
 * with s, the spin is s's budget and the outcome is noted in s (the
 * *_spin waits pass spin_ns 0, so s NULL means sleep at once). */
static int wait_mask(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
		     unsigned mask, uint64_t spin_ns, struct xseg_spin *s)
{
	struct xseg_port_local *pl;
	struct xseg_port *p;
	uint64_t now, start, deadline;
	uint32_t seq0, v;
	bool spun = false, noted = false;
	int rc;

	if (port >= seg->nr_ports)
		return -EINVAL;
	pl = &seg->ports[port];
	p = pl->port;
	if (has_work(pl, mask))
		return 0;
	if (timeout_ns == 0)
		return -ETIMEDOUT;
	start = now = xseg_now_ns();
	deadline = deadline_after(now, timeout_ns);
	seq0 = __atomic_load_n(&p->futex_seq, __ATOMIC_SEQ_CST);
	if (s) {
		spin_ns = xseg_spin_budget(s);
		/* nothing to learn from a thread that never spins */
		if (!s->max_ns)
			s = NULL;
	}

	if (spin_ns) {
		uint64_t end = deadline_after(now, spin_ns);
		/* A spin cut short by the wait's timeout (e.g. the reap
		 * slices of xseg_wait_reply_spin) did not run out: it is
		 * not judged. */
		bool cut = end > deadline;

		if (cut)
			end = deadline;
		uint64_t yield_at = now + XSEG_SPIN_YIELD_NS;
		/* the preemption check, once, if no work came by then */
		uint64_t check_at =
		    s && s->adaptive ? now + XSEG_SPIN_CHECK_NS : UINT64_MAX;

		spun = true;
#ifdef XSEG_TEST_HOOKS
		if (xseg_test_spin_begin)
			xseg_test_spin_begin();
#endif
		for (;;) {
			for (int i = 0; i < XSEG_SPIN_BATCH; i++) {
				if (has_work(pl, mask)) {
					if (s)
						xseg_spin_note(
						    s, XSEG_SPIN_CAUGHT);
					return 0;
				}
				cpu_relax();
			}
			now = xseg_now_ns();
			/* before the end: a thread descheduled past the
			 * spin's end before its first look at the clock was
			 * preempted, and is judged so (review21c F4) */
			if (now >= check_at) {
				check_at = UINT64_MAX;
				if (spin_preempted(s, spin_ns)) {
					/* the CPUs have more work than this
					 * spin would catch: sleep, and give
					 * the CPU to it */
					xseg_spin_note(s, XSEG_SPIN_PREEMPTED);
					noted = true;
					break;
				}
			}
			if (now >= end)
				break;
			/* Nothing for a while: the peer we wait for may be
			 * runnable on this very CPU (more processes than
			 * cores). Let it run; when work keeps arriving
			 * within the period this syscall never happens. */
			if (now >= yield_at) {
				uint64_t n0, n1;
				/* a yield that let another thread run is
				 * counted as involuntary, but it is the spin
				 * giving way on purpose, not the CPUs being
				 * short: its switches (only) are not a
				 * preemption */
				bool counted = s && s->adaptive &&
					       s->nivcsw_known &&
					       thread_nivcsw(&n0);

				spin_yield();
				if (counted && thread_nivcsw(&n1))
					s->nivcsw += n1 - n0;
				yield_at = xseg_now_ns() + XSEG_SPIN_YIELD_NS;
			}
		}
		if (s && !cut && !noted)
			xseg_spin_note(s, XSEG_SPIN_MISSED);
		if (now >= deadline)
			return has_work(pl, mask) ? 0 : -ETIMEDOUT;
	}
	/* A wait that slept at once tells s whether a spin would have
	 * caught its work; one that spun (a preempted one included) has been
	 * noted already. */
	if (spun)
		s = NULL;

	for (;;) {
		__atomic_fetch_add(&p->sleepers, 1, __ATOMIC_SEQ_CST);
		v = __atomic_load_n(&p->futex_seq, __ATOMIC_SEQ_CST);
		/* A changed word means a signal or kick since we started. */
		if (v != seq0 || has_work(pl, mask)) {
			__atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
			rc = 0;
			break;
		}
		now = xseg_now_ns();
		if (now >= deadline) {
			__atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
			rc = -ETIMEDOUT;
			break;
		}
		rc = futex_wait(&p->futex_seq, v,
				deadline == UINT64_MAX ? XSEG_WAIT_FOREVER
						       : deadline - now);
		__atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
		if (rc == -EINTR)
			break;
		if (rc != -ETIMEDOUT) {
			rc = 0; /* woken, or the word changed (EAGAIN) */
			break;
		}
		if (has_work(pl, mask)) {
			rc = 0;
			break;
		}
		if (xseg_now_ns() >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
	}
	if (s) {
		/* Judged: work came (within the spin's reach or later), or
		 * nothing came for longer than a spin. A wake-up without
		 * work, or a timeout shorter than the spin, says nothing. */
		uint64_t waited = xseg_now_ns() - start;

		if (!rc && has_work(pl, mask))
			xseg_spin_note(s, waited <= s->max_ns
					      ? XSEG_SPIN_SLEPT_SHORT
					      : XSEG_SPIN_SLEPT_LONG);
		else if (waited > s->max_ns)
			xseg_spin_note(s, XSEG_SPIN_SLEPT_LONG);
	}
	return rc;
}

int xseg_wait(struct xseg *seg, uint32_t port, uint64_t timeout_ns)
{
	int rc = wait_mask(seg, port, timeout_ns,
			   XSEG_WAIT_REQ | XSEG_WAIT_REPLY, seg->spin_ns, NULL);

	/* Nothing came: check for dead peers (at most once per period per
	 * handle), so a thread polling for replies with short waits gets
	 * the requests a dead peer held failed back. The sleep itself is
	 * not shortened: an idle peer stays asleep. */
	if (rc == -ETIMEDOUT)
		reap_if_due(seg, xseg_now_ns(), NULL);
	return rc;
}

int xseg_wait_replies(struct xseg *seg, uint32_t port, uint64_t timeout_ns)
{
	int rc = wait_mask(seg, port, timeout_ns, XSEG_WAIT_REPLY, seg->spin_ns,
			   NULL);

	if (rc == -ETIMEDOUT)
		reap_if_due(seg, xseg_now_ns(), NULL);
	return rc;
}

static int wait_reply(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
		      uint64_t spin_ns, struct xseg_spin *s,
		      struct xseg_request **reqp)
{
	uint64_t now, deadline, next_reap, until;
	int rc;

	if (!reqp || port >= seg->nr_ports)
		return -EINVAL;
	now = xseg_now_ns();
	deadline = deadline_after(now, timeout_ns);
	for (;;) {
		rc = xseg_receive(seg, port, reqp);
		if (rc != -EAGAIN)
			return rc;
		/* The reap comes before the deadline check and its period is
		 * the handle's, not this call's: a loop of 100 ms waits
		 * (vlmc's NBD completer) reaps like one long wait. The peer
		 * holding our request may have died: its reclaim fails the
		 * request back to us. */
		now = xseg_now_ns();
		if (reap_if_due(seg, now, &next_reap))
			continue;
		if (now >= deadline)
			return -ETIMEDOUT;
		until = deadline < next_reap ? deadline : next_reap;
		rc = wait_mask(seg, port, until - now, XSEG_WAIT_REPLY, spin_ns,
			       s);
		if (rc == -EINTR || rc == -EINVAL)
			return rc;
	}
}

int xseg_wait_reply(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
		    struct xseg_request **reqp)
{
	return wait_reply(seg, port, timeout_ns, seg->spin_ns, NULL, reqp);
}

int xseg_wait_spin(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
		   struct xseg_spin *s)
{
	int rc = wait_mask(seg, port, timeout_ns,
			   XSEG_WAIT_REQ | XSEG_WAIT_REPLY, 0, s);

	if (rc == -ETIMEDOUT)
		reap_if_due(seg, xseg_now_ns(), NULL);
	return rc;
}

int xseg_wait_reply_spin(struct xseg *seg, uint32_t port, uint64_t timeout_ns,
			 struct xseg_spin *s, struct xseg_request **reqp)
{
	return wait_reply(seg, port, timeout_ns, 0, s, reqp);
}
