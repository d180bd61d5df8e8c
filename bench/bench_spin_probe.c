/* SPDX-License-Identifier: MIT */
/*
 * bench_spin_probe: what the adaptive spin's preemption check costs (xseg.h,
 * "Adaptive spinning"). A wait that would spin first reads its thread's
 * count of involuntary context switches with getrusage(RUSAGE_THREAD), and
 * a spin reads it twice around each sched_yield. Measured here against, in
 * the same run:
 *   null_syscall   syscall(SYS_getppid): the cheapest kernel entry;
 *   clock_gettime  CLOCK_MONOTONIC through the vDSO (what the spin loop
 *                  reads every XSEG_SPIN_BATCH polls);
 *   sched_yield    with no other runnable thread on the CPU.
 * Each is timed in batches of CALLS calls; the figure is the median batch
 * in ns per call (min and max batches alongside). Prints one JSON object;
 * a figure that is not finite (a ratio over batches the clock measured as
 * 0 ns) is null. Exits 1, printing nothing, when getrusage(RUSAGE_THREAD)
 * fails: its error path is not what a wait pays
 * (tests/test_bench_spin_probe.sh).
 * Usage: bench_spin_probe [BATCHES] [CALLS]
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench_args.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Defeat the optimiser without a barrier on every call. */
static volatile uint64_t sink;

static void call_getrusage(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru) == 0)
		sink += (uint64_t)ru.ru_nivcsw;
}

static void call_null_syscall(void)
{
	sink += (uint64_t)syscall(SYS_getppid);
}

static void call_clock(void)
{
	sink += now_ns();
}

static void call_yield(void)
{
	sched_yield();
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* v as a JSON number, or null: JSON has no inf or nan (a ratio over a
 * batch the clock measured as 0 ns would be one) */
static void print_num(double v, int decimals)
{
	if (isfinite(v))
		printf("%.*f", decimals, v);
	else
		fputs("null", stdout);
}

/* ns per call of fn: median, min and max over batches of calls, in ns
 * (batches slots, the caller's: nothing to fail half-way through the
 * JSON). */
static void measure(const char *name, void (*fn)(void), unsigned batches,
		    unsigned calls, double *ns, double *out, bool last)
{
	for (unsigned i = 0; i < calls; i++) /* warm the path */
		fn();
	for (unsigned b = 0; b < batches; b++) {
		uint64_t t0 = now_ns();

		for (unsigned i = 0; i < calls; i++)
			fn();
		ns[b] = (double)(now_ns() - t0) / calls;
	}
	qsort(ns, batches, sizeof(*ns), cmp_double);
	*out = ns[batches / 2];
	printf("    \"%s\": {\"ns_per_call\": ", name);
	print_num(ns[batches / 2], 1);
	fputs(", \"min\": ", stdout);
	print_num(ns[0], 1);
	fputs(", \"max\": ", stdout);
	print_num(ns[batches - 1], 1);
	printf("}%s\n", last ? "" : ",");
}

static const char usage[] =
    "usage: bench_spin_probe [BATCHES [CALLS]]\n"
    "  the cost of the adaptive spin's preemption check (getrusage\n"
    "  RUSAGE_THREAD) against a null syscall, the vDSO clock and\n"
    "  sched_yield: ns per call, median of BATCHES (default 21) batches\n"
    "  of CALLS (default 20000) calls; one JSON object on stdout\n";

/* A count 1 .. 10^8, or false. */
static bool parse_count(const char *arg, unsigned *out)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 10);

	if (end == arg || *end || !v || v > 100000000ul)
		return false;
	*out = (unsigned)v;
	return true;
}

int main(int argc, char **argv)
{
	unsigned batches = 21, calls = 20000;
	double ru, null_sc, clk, yld, *ns;
	struct rusage probe;
	int rc = bench_help_version(argc, argv, "bench_spin_probe", usage);

	if (rc >= 0)
		return rc;
	if (argc > 3)
		return bench_usage_error("bench_spin_probe", argv[3], usage);
	if (argc > 1 && !parse_count(argv[1], &batches))
		return bench_usage_error("bench_spin_probe", argv[1], usage);
	if (argc > 2 && !parse_count(argv[2], &calls))
		return bench_usage_error("bench_spin_probe", argv[2], usage);
	/* a getrusage that fails would be timed all the same, measuring its
	 * error path (RUSAGE_THREAD needs Linux 2.6.26) */
	if (getrusage(RUSAGE_THREAD, &probe)) {
		fprintf(stderr,
			"bench_spin_probe: getrusage(RUSAGE_THREAD): %s: "
			"nothing to measure\n",
			strerror(errno));
		return 1;
	}
	ns = malloc(batches * sizeof(*ns));
	if (!ns) {
		fprintf(stderr, "bench_spin_probe: %u batches: %s\n", batches,
			strerror(errno));
		return 1;
	}
	printf(
	    "{\n  \"bench\": \"spin_probe\",\n  \"batches\": %u,\n"
	    "  \"calls_per_batch\": %u,\n  \"statistic\": \"median batch\",\n"
	    "  \"results\": {\n",
	    batches, calls);
	measure("getrusage_thread", call_getrusage, batches, calls, ns, &ru,
		false);
	measure("null_syscall", call_null_syscall, batches, calls, ns, &null_sc,
		false);
	measure("clock_gettime", call_clock, batches, calls, ns, &clk, false);
	measure("sched_yield", call_yield, batches, calls, ns, &yld, true);
	free(ns);
	fputs("  },\n  \"getrusage_vs_null_syscall\": ", stdout);
	print_num(ru / null_sc, 2);
	fputs(",\n  \"per_spinning_wait_ns\": ", stdout);
	print_num(ru, 1);
	fputs(",\n  \"per_yield_ns\": ", stdout);
	print_num(2 * ru + yld, 1);
	fputs("\n}\n", stdout);
	return 0;
}
