/* SPDX-License-Identifier: MIT */
/*
 * Guarded copies out of the log's mappings (store.h, mmap_reads; store_int.h,
 * bguard_*).
 *
 * A read through a mapping turns what the syscall path reports as an error
 * into a signal: a page the disk cannot read, or a page past the end of a
 * file that was truncated behind the store's back, raises SIGBUS in the
 * reading thread. Left alone, that kills the whole peer. So every copy out
 * of a mapping is guarded: the thread records in thread-local state which
 * mapping it copies from, and a process-wide SIGBUS handler turns a fault
 * of the copy instruction on an address in that mapping into an error
 * return of the copy. Every other SIGBUS - another thread's, another
 * instruction's, an address outside the mapping being copied, a raise()
 * or kill() - goes to the handler installed before ours (a sanitizer's,
 * the application's) or gets the default action, so real crashes still
 * crash.
 *
 * How the copy fails: the way the kernel's own user-copy routines do, with
 * a fixup address. The copy is one "rep movsb" instruction in a tiny
 * assembler routine; when it faults, the handler moves the saved
 * instruction pointer to the routine's fixup code, which returns -EFAULT,
 * and returns. The kernel restores the signal mask and the stack as the
 * handler found them. Nothing jumps over C frames: a siglongjmp out of the
 * handler would skip the frames of whatever the copy was inside (a
 * sanitizer's memcpy interceptor, ThreadSanitizer's signal dispatch, whose
 * shadow stack it corrupts), and sigsetjmp with the signal mask saved costs
 * a syscall per read, which is what the mappings are there to avoid.
 * "rep movsb" is also what glibc's memcpy uses for copies of this size on
 * CPUs with fast string moves (ERMS).
 *
 * Inside the guarded region only that instruction runs: no lock, no
 * allocation, no OpenSSL. The caller hashes its copy afterwards.
 *
 * No alternate signal stack (SA_ONSTACK): a mapped read faults on the
 * thread's own stack with plenty of room, as any memcpy would, and the
 * handler uses a few words of it. Stack overflows raise SIGSEGV, which is
 * never ours.
 *
 * x86-64 only for now: elsewhere bguard_install returns -ENOTSUP and the
 * store reads with its I/O backend (store.c).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include "store_int.h"

#if defined(__x86_64__) && defined(__linux__)
/*
 * int bguard_movsb(void *dst, const void *src, size_t n): 0, or -EFAULT if
 * the copy faulted and bguard_handler sent it to the fixup. Hidden: not
 * part of the library's symbols.
 */
__asm__(".text\n"
	".p2align 4\n"
	".globl bguard_movsb\n"
	".hidden bguard_movsb\n"
	".type bguard_movsb, @function\n"
	"bguard_movsb:\n"
	"	movq %rdx, %rcx\n"
	".globl bguard_movsb_insn\n"
	".hidden bguard_movsb_insn\n"
	"bguard_movsb_insn:\n"
	"	rep movsb\n"
	"	xorl %eax, %eax\n"
	"	ret\n"
	".globl bguard_movsb_fixup\n"
	".hidden bguard_movsb_fixup\n"
	"bguard_movsb_fixup:\n"
	"	movl $-14, %eax\n" /* -EFAULT */
	"	ret\n"
	".size bguard_movsb, .-bguard_movsb\n");
int bguard_movsb(void *dst, const void *src, size_t n);
extern const char bguard_movsb_insn[], bguard_movsb_fixup[];
#define BGUARD_SUPPORTED 1
#endif

#ifdef BGUARD_SUPPORTED
struct bguard {
	/* written by the owning thread, read by its own signal handler:
	 * volatile plus signal fences order them against the copy */
	volatile sig_atomic_t active;
	volatile uintptr_t lo, hi;     /* the mapping being copied from */
	volatile uintptr_t fault_addr; /* si_addr of the caught fault */
};

static __thread struct bguard bguard_tls;

static struct sigaction bguard_prev; /* the handler ours replaced */
static pthread_once_t bguard_once = PTHREAD_ONCE_INIT;
static int bguard_install_err;

static void bguard_chain(int sig, siginfo_t *si, void *uctx)
{
	struct sigaction dfl;

	if (bguard_prev.sa_flags & SA_SIGINFO) {
		if (bguard_prev.sa_sigaction) {
			bguard_prev.sa_sigaction(sig, si, uctx);
			return;
		}
	} else if (bguard_prev.sa_handler == SIG_IGN) {
		/* a sent SIGBUS is ignored as before; a fault cannot be
		 * (returning would fault again forever): default action */
		if (si->si_code <= 0)
			return;
	} else if (bguard_prev.sa_handler != SIG_DFL) {
		bguard_prev.sa_handler(sig);
		return;
	}
	/*
	 * Default action: terminate (with a core), as it would have without
	 * our handler. Restore it and make the signal pending again, for a
	 * fault too: it is delivered as this handler returns and unblocks
	 * it, before the faulting access is re-executed. Relying on the
	 * access to fault again would leave SIGBUS at SIG_DFL for good in a
	 * process whose fault was transient (review6 F9): every guarded
	 * read fault after that would kill it.
	 */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(SIGBUS, &dfl, NULL);
	raise(SIGBUS);
}

static void bguard_handler(int sig, siginfo_t *si, void *uctx)
{
	struct bguard *g = &bguard_tls;
	ucontext_t *uc = uctx;
	uintptr_t a = (uintptr_t)si->si_addr;

	/* ours only if the kernel raised it (si_code > 0: not kill/raise/
	 * sigqueue) for the copy instruction, on an address in the mapping
	 * this thread is copying from */
	if (g->active && si->si_code > 0 && a >= g->lo && a < g->hi &&
	    uc->uc_mcontext.gregs[REG_RIP] == (greg_t)bguard_movsb_insn) {
		g->fault_addr = a;
		uc->uc_mcontext.gregs[REG_RIP] = (greg_t)bguard_movsb_fixup;
		return;
	}
	bguard_chain(sig, si, uctx);
}

static void bguard_do_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = bguard_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &bguard_prev) < 0)
		bguard_install_err = -errno;
}

/*
 * Is our handler the one the kernel will run? A runtime that owns SIGBUS
 * may accept sigaction and keep its own (ASan with
 * allow_user_segv_handler=0), and an embedding program may have replaced
 * ours since: either way a guarded fault would kill the process, so the
 * store reads through the backend instead (review6 F8). One syscall per
 * call (each open and each new segment mapping), never per read.
 */
static int bguard_check(void)
{
	struct sigaction cur;

	if (sigaction(SIGBUS, NULL, &cur) < 0)
		return -errno;
	if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != bguard_handler)
		return -EBUSY;
	return 0;
}

int bguard_install(void)
{
	pthread_once(&bguard_once, bguard_do_install);
	return bguard_install_err ? bguard_install_err : bguard_check();
}
#else
int bguard_install(void)
{
	return -ENOTSUP;
}
#endif

int bguard_copy(const uint8_t *map, size_t map_len, size_t off,
		const struct iovec *iov, int cnt, size_t *fault_off)
{
#ifdef BGUARD_SUPPORTED
	struct bguard *g = &bguard_tls;
	int r = 0;

	g->lo = (uintptr_t)map;
	g->hi = (uintptr_t)map + map_len;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	g->active = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	for (int i = 0; i < cnt && !r; i++) {
#ifdef __SANITIZE_ADDRESS__
		/* the copy instruction is invisible to ASan: let its memset
		 * interceptor check the destination (review6 F10) */
		memset(iov[i].iov_base, 0, iov[i].iov_len);
#endif
		r = bguard_movsb(iov[i].iov_base, map + off, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	g->active = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (r) {
		*fault_off = g->fault_addr - (uintptr_t)map;
		return -EIO;
	}
	return 0;
#else
	(void)map;
	(void)map_len;
	(void)off;
	(void)iov;
	(void)cnt;
	(void)fault_off;
	return -ENOTSUP;
#endif
}
