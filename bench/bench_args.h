/* SPDX-License-Identifier: MIT */
#ifndef BENCH_ARGS_H
#define BENCH_ARGS_H
/*
 * bench_args: the command-line contract every benchmark program keeps, as
 * the peers and xsegctl do (README: "every program answers --help and
 * --version"):
 * - `--help` or `-h` anywhere: the usage on stdout, exit 0;
 * - `--version` or `-V` anywhere: "PROG VERSION" on stdout, exit 0;
 * - an argument the program does not take: the usage on stderr, exit 2,
 *   never read as a number (atof("--help") is 0, which once ran a
 *   benchmark of 0 s instead of refusing).
 * Header only, no state.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef AC_VERSION
#define AC_VERSION "0.0.0"
#endif

/* -1 when argv holds neither --help nor --version (the caller goes on
 * parsing), else the exit status after printing what was asked. usage is
 * the whole text, ending in a newline. */
static inline int bench_help_version(int argc, char **argv, const char *prog,
				     const char *usage)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
			printf("%s %s\n", prog, AC_VERSION);
			return 0;
		}
	}
	return -1;
}

/* An argument refused: say which, print the usage, status 2. */
static inline int bench_usage_error(const char *prog, const char *arg,
				    const char *usage)
{
	fprintf(stderr, "%s: bad argument '%s'\n%s", prog, arg, usage);
	return 2;
}

/* A duration in seconds: a decimal number (0.5 too), > 0 and <= 1 day. */
static inline bool bench_parse_seconds(const char *arg, double *seconds)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || !isfinite(v) || v <= 0 || v > 86400)
		return false;
	*seconds = v;
	return true;
}

/* For a program whose one optional argument is SECONDS: -1 to go on
 * (*seconds parsed, or left at the caller's default), else the exit
 * status (help, version, or a refused argument). */
static inline int bench_seconds_args(int argc, char **argv, const char *prog,
				     const char *usage, double *seconds)
{
	int rc = bench_help_version(argc, argv, prog, usage);

	if (rc >= 0)
		return rc;
	if (argc > 2)
		return bench_usage_error(prog, argv[2], usage);
	if (argc == 2 && !bench_parse_seconds(argv[1], seconds))
		return bench_usage_error(prog, argv[1], usage);
	return -1;
}

#endif
