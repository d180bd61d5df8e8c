/* SPDX-License-Identifier: MIT */
/*
 * bench_xseg_floor: the hardware/kernel floor of a cross-process round trip
 * on this machine, measured the same way bench_xseg measures xseg, so the
 * IPC benchmark can compare against it in the same run:
 *   poll:  two processes ping-pong one 64-bit word each through shared
 *          memory, both busy-polling (what a polling xseg round trip can at
 *          best achieve: two cache-line transfers);
 *   futex: the same, but the waiting side sleeps in FUTEX_WAIT and is woken
 *          by FUTEX_WAKE (the floor of sleeping mode).
 * Prints one JSON object. Usage: bench_xseg_floor [ROUNDS]
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_xseg_util.h"
#include "peer_util.h"

struct floor_shm {
	_Alignas(64) uint32_t ping; /* written by the client */
	_Alignas(64) uint32_t pong; /* written by the server */
};

static long floor_futex(uint32_t *w, int op, uint32_t val)
{
	return syscall(SYS_futex, w, op, val, NULL, NULL, 0);
}

static inline void floor_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Wait until *w == want: spin, or sleep on the futex. */
static void floor_wait(uint32_t *w, uint32_t want, bool sleep)
{
	uint32_t v;

	while ((v = __atomic_load_n(w, __ATOMIC_ACQUIRE)) != want) {
		if (sleep)
			floor_futex(w, FUTEX_WAIT, v);
		else
			floor_relax();
	}
}

static void floor_post(uint32_t *w, uint32_t v, bool sleep)
{
	__atomic_store_n(w, v, __ATOMIC_RELEASE);
	if (sleep)
		floor_futex(w, FUTEX_WAKE, 1);
}

static void floor_run(struct floor_shm *m, uint64_t rounds, bool sleep,
		      struct bench_hist *h, uint64_t *elapsed)
{
	pid_t pid;
	uint64_t start;

	m->ping = m->pong = 0;
	pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid == 0) {
		for (uint32_t i = 1; i <= rounds; i++) {
			floor_wait(&m->ping, i, sleep);
			floor_post(&m->pong, i, sleep);
		}
		_exit(0);
	}
	start = peer_now_ns();
	for (uint32_t i = 1; i <= rounds; i++) {
		uint64_t t0 = peer_now_ns();
		floor_post(&m->ping, i, sleep);
		floor_wait(&m->pong, i, sleep);
		bench_hist_add(h, peer_now_ns() - t0);
	}
	*elapsed = peer_now_ns() - start;
	waitpid(pid, NULL, 0);
}

static void floor_print(const char *mode, const struct bench_hist *h,
			uint64_t elapsed, bool last)
{
	printf("  \"%s\": {\"round_trips\": %" PRIu64
	       ", \"per_s\": %.0f, \"mean_ns\": %.1f, \"p50_ns\": %" PRIu64
	       ", \"p99_ns\": %" PRIu64 "}%s\n",
	       mode, h->count, elapsed ? h->count * 1e9 / elapsed : 0.0,
	       bench_hist_mean(h), bench_hist_percentile(h, 50),
	       bench_hist_percentile(h, 99), last ? "" : ",");
}

int main(int argc, char **argv)
{
	uint64_t rounds = 1000000, elapsed;
	struct floor_shm *m;
	struct bench_hist *h;

	if (argc == 2 && !strcmp(argv[1], "--help")) {
		printf(
		    "Usage: bench_xseg_floor [ROUNDS]\n"
		    "Measure the cross-process round-trip floor (shared-word "
		    "ping-pong, polling\nand futex) and print it as JSON; "
		    "ROUNDS defaults to 1000000.\n");
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		printf("bench_xseg_floor %s\n", AC_VERSION);
		return 0;
	}
	if (argc > 2 || (argc == 2 && (peer_parse_u64(argv[1], &rounds) ||
				       !rounds || rounds > UINT32_MAX))) {
		fprintf(stderr, "bench_xseg_floor: bad arguments (ROUNDS: "
				"1..4294967295)\nTry 'bench_xseg_floor "
				"--help' for more information.\n");
		return 2;
	}
	/* after the arguments: an early return must not leak it */
	h = malloc(sizeof(*h));
	m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || !h) {
		perror("bench_xseg_floor");
		return 1;
	}
	printf("{\n  \"benchmark\": \"xseg_floor\",\n");
	bench_hist_init(h);
	floor_run(m, rounds, false, h, &elapsed);
	floor_print("poll", h, elapsed, false);
	bench_hist_init(h);
	floor_run(m, rounds / 10 ? rounds / 10 : 1, true, h, &elapsed);
	floor_print("futex", h, elapsed, true);
	printf("}\n");
	free(h);
	return 0;
}
