/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of peer_util: number/size/duration parsing, log levels, pid
 * files, syncing a directory's parent.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "peer_util.h"
#include "test_tmp.h"

START_TEST(parse_u64)
{
	uint64_t v = 7;

	ck_assert_int_eq(peer_parse_u64("0", &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(peer_parse_u64("18446744073709551615", &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert_int_eq(peer_parse_u64("0x10", &v), 0);
	ck_assert_uint_eq(v, 16);
	/* a leading 0 is decimal, not octal (fuzz_vlmc_ctl) */
	ck_assert_int_eq(peer_parse_u64("010", &v), 0);
	ck_assert_uint_eq(v, 10);
	ck_assert_int_eq(peer_parse_u64("08", &v), 0);
	ck_assert_uint_eq(v, 8);
	ck_assert_int_eq(peer_parse_u64("0X1f", &v), 0);
	ck_assert_uint_eq(v, 31);
	v = 7;
	ck_assert_int_eq(peer_parse_u64("18446744073709551616", &v), -ERANGE);
	ck_assert_int_eq(peer_parse_u64("", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_u64("-1", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_u64(" 1", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_u64("1x", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_u64(NULL, &v), -EINVAL);
	ck_assert_uint_eq(v, 7); /* unchanged on error */
}
END_TEST

START_TEST(parse_size)
{
	uint64_t v = 7;

	ck_assert_int_eq(peer_parse_size("010G", &v), 0);
	ck_assert_uint_eq(v, 10ULL << 30); /* not octal: 8G */
	ck_assert_int_eq(peer_parse_size("0x", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_size("4096", &v), 0);
	ck_assert_uint_eq(v, 4096);
	ck_assert_int_eq(peer_parse_size("4k", &v), 0);
	ck_assert_uint_eq(v, 4096);
	ck_assert_int_eq(peer_parse_size("4KiB", &v), 0);
	ck_assert_uint_eq(v, 4096);
	ck_assert_int_eq(peer_parse_size("2M", &v), 0);
	ck_assert_uint_eq(v, 2 << 20);
	ck_assert_int_eq(peer_parse_size("3G", &v), 0);
	ck_assert_uint_eq(v, 3ULL << 30);
	ck_assert_int_eq(peer_parse_size("1T", &v), 0);
	ck_assert_uint_eq(v, 1ULL << 40);
	ck_assert_int_eq(peer_parse_size("512B", &v), 0);
	ck_assert_uint_eq(v, 512);
	/* vlmc names 1P as its limit: the parser must read it back */
	ck_assert_int_eq(peer_parse_size("1P", &v), 0);
	ck_assert_uint_eq(v, 1ULL << 50);
	ck_assert_int_eq(peer_parse_size("2pib", &v), 0);
	ck_assert_uint_eq(v, 2ULL << 50);
	ck_assert_int_eq(peer_parse_size("15E", &v), 0);
	ck_assert_uint_eq(v, 15ULL << 60);
	v = 7;
	ck_assert_int_eq(peer_parse_size("16E", &v), -ERANGE);
	ck_assert_int_eq(peer_parse_size("16384P", &v), -ERANGE);
	ck_assert_int_eq(peer_parse_size("1PX", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_size("16777216T", &v), -ERANGE);
	ck_assert_int_eq(peer_parse_size("4kb2", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_size("4X", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_size("k", &v), -EINVAL);
	ck_assert_int_eq(peer_parse_size("4Bx", &v), -EINVAL);
	ck_assert_uint_eq(v, 7);
}
END_TEST

/* The suffix after the number, in any case: a letter, an optional i, an
 * optional b. Before, 4kb, 4KIB, 4Ki and 4kIB were refused while 4kB,
 * 4KiB and 4kib were taken. */
START_TEST(parse_size_suffix_case)
{
	static const char letters[] = "kmgtpe";
	static const char *const is[] = {"", "i", "I"};
	static const char *const bs[] = {"", "b", "B"};
	char buf[32];
	uint64_t v;

	for (unsigned l = 0; letters[l]; l++)
		for (unsigned up = 0; up < 2; up++)
			for (unsigned i = 0; i < 3; i++)
				for (unsigned b = 0; b < 3; b++) {
					char c =
					    up ? (char)(letters[l] - 'a' + 'A')
					       : letters[l];

					snprintf(buf, sizeof(buf), "3%c%s%s", c,
						 is[i], bs[b]);
					v = 7;
					ck_assert_msg(!peer_parse_size(buf, &v),
						      "%s refused", buf);
					ck_assert_msg(
					    v == 3ULL << (10 * (l + 1)),
					    "%s read as %llu", buf,
					    (unsigned long long)v);
				}
	ck_assert_int_eq(peer_parse_size("512b", &v), 0);
	ck_assert_uint_eq(v, 512);
	/* the overflow check holds for every spelling */
	ck_assert_int_eq(peer_parse_size("16eib", &v), -ERANGE);
	ck_assert_int_eq(peer_parse_size("16EIB", &v), -ERANGE);
	ck_assert_int_eq(peer_parse_size("16384pb", &v), -ERANGE);
	/* junk stays junk: a doubled or misplaced i or b, an i without a
	 * letter, anything after the suffix, a sign, white space, empty */
	v = 7;
	static const char *const junk[] = {
	    "4kbb", "4kii",  "4kbi", "4ik",   "4i",  "4ib",
	    "4bb",  "4KIBB", "4kB ", " 4k",   "4 k", "-4k",
	    "+4k",  "",	     "kib",  "4kiB2", "4Kx", "4KIBi",
	};
	for (size_t j = 0; j < sizeof(junk) / sizeof(junk[0]); j++)
		ck_assert_msg(peer_parse_size(junk[j], &v) == -EINVAL,
			      "'%s' not refused", junk[j]);
	ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(parse_duration)
{
	uint64_t v = 7;

	ck_assert_int_eq(peer_parse_duration("5", 1000, &v), 0);
	ck_assert_uint_eq(v, 5000);
	ck_assert_int_eq(peer_parse_duration("5ns", 1000, &v), 0);
	ck_assert_uint_eq(v, 5);
	ck_assert_int_eq(peer_parse_duration("20us", 1, &v), 0);
	ck_assert_uint_eq(v, 20000);
	ck_assert_int_eq(peer_parse_duration("3ms", 1, &v), 0);
	ck_assert_uint_eq(v, 3000000);
	ck_assert_int_eq(peer_parse_duration("2s", 1, &v), 0);
	ck_assert_uint_eq(v, 2000000000ULL);
	ck_assert_int_eq(peer_parse_duration("1m", 1, &v), 0);
	ck_assert_uint_eq(v, 60000000000ULL);
	ck_assert_int_eq(peer_parse_duration("1h", 1, &v), 0);
	ck_assert_uint_eq(v, 3600000000000ULL);
	v = 7;
	ck_assert_int_eq(peer_parse_duration("1y", 1, &v), -EINVAL);
	ck_assert_int_eq(peer_parse_duration("s", 1, &v), -EINVAL);
	ck_assert_int_eq(peer_parse_duration("100000000000h", 1, &v), -ERANGE);
	ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(parse_percent_and_level)
{
	unsigned pct = 7;
	enum peer_log_level l = PEER_LOG_INFO;

	ck_assert_int_eq(peer_parse_percent("0", &pct), 0);
	ck_assert_uint_eq(pct, 0);
	ck_assert_int_eq(peer_parse_percent("100", &pct), 0);
	ck_assert_uint_eq(pct, 100);
	ck_assert_int_eq(peer_parse_percent("101", &pct), -ERANGE);
	ck_assert_int_eq(peer_parse_percent("x", &pct), -EINVAL);
	ck_assert_uint_eq(pct, 100);

	ck_assert_int_eq(peer_log_parse_level("debug", &l), 0);
	ck_assert_int_eq(l, PEER_LOG_DEBUG);
	ck_assert_int_eq(peer_log_parse_level("ERROR", &l), 0);
	ck_assert_int_eq(l, PEER_LOG_ERROR);
	ck_assert_int_eq(peer_log_parse_level("warning", &l), 0);
	ck_assert_int_eq(l, PEER_LOG_WARN);
	ck_assert_int_eq(peer_log_parse_level("2", &l), 0);
	ck_assert_int_eq(l, PEER_LOG_INFO);
	ck_assert_int_eq(peer_log_parse_level("4", &l), -EINVAL);
	ck_assert_int_eq(peer_log_parse_level("loud", &l), -EINVAL);
	ck_assert_int_eq(peer_log_parse_level(NULL, &l), -EINVAL);
	ck_assert_int_eq(l, PEER_LOG_INFO);
}
END_TEST

/* Messages above the level are dropped, others are one line each. */
START_TEST(log_levels)
{
	int pfd[2];
	char buf[512] = {0};
	int saved = dup(STDERR_FILENO);
	ssize_t n;

	ck_assert_int_eq(pipe(pfd), 0);
	dup2(pfd[1], STDERR_FILENO);
	peer_log_init("tst", PEER_LOG_WARN, false);
	peer_info("hidden %d", 1);
	peer_dbg("hidden %d", 2);
	peer_warn("shown %d", 3);
	peer_log_set_level(PEER_LOG_DEBUG);
	peer_dbg("shown %d", 4);
	dup2(saved, STDERR_FILENO);
	close(pfd[1]);
	n = read(pfd[0], buf, sizeof(buf) - 1);
	close(pfd[0]);
	close(saved);
	ck_assert_int_gt(n, 0);
	ck_assert_str_eq(buf, "tst: warn: shown 3\ntst: debug: shown 4\n");
}
END_TEST

/* A second holder of the pid file is refused; removal unlinks it. */
START_TEST(pidfile_lock)
{
	char path[PATH_MAX];
	int tmp, fd, st;
	char buf[32] = {0};
	pid_t pid;

	snprintf(path, sizeof(path), "%s/pid-XXXXXX", ttmp_root());
	tmp = mkstemp(path);
	ck_assert_int_ge(tmp, 0);
	close(tmp);
	fd = peer_pidfile_create(path);
	ck_assert_int_ge(fd, 0);
	tmp = open(path, O_RDONLY);
	ck_assert_int_gt(read(tmp, buf, sizeof(buf) - 1), 0);
	close(tmp);
	ck_assert_int_eq(atol(buf), getpid());
	/* flock is per open file description: a child opening anew fails */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(peer_pidfile_create(path) == -EEXIST ? 0 : 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	peer_pidfile_remove(path, fd);
	ck_assert_int_ne(access(path, F_OK), 0);
	ck_assert_int_eq(peer_pidfile_create("/nonexistent-dir/x.pid"),
			 -ENOENT);
}
END_TEST

/*
 * Which directory peer_fsync_parent opens is seen through its errors: a
 * regular file where the parent should be gives -ENOTDIR, so the path
 * cases below tell the parent it derived from the path apart.
 */
START_TEST(fsync_parent)
{
	char dir[PATH_MAX], file[PATH_MAX + 8];
	char p[PATH_MAX + 16];
	static char longp[PATH_MAX + 8];

	ttmp_mkdtemp(dir, sizeof(dir), "fsync");
	snprintf(file, sizeof(file), "%s/f", dir);
	close(open(file, O_WRONLY | O_CREAT, 0600));
	snprintf(p, sizeof(p), "%s/new", dir);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	ck_assert_int_eq(peer_fsync_parent(p), 0);
	/* the parent, not the path: an absent entry of dir is fine */
	snprintf(p, sizeof(p), "%s/absent", dir);
	ck_assert_int_eq(peer_fsync_parent(p), 0);
	/* trailing slashes are not a level: the parent of f/ is dir, not f */
	snprintf(p, sizeof(p), "%s///", file);
	ck_assert_int_eq(peer_fsync_parent(p), 0);
	/* a file where the parent should be */
	snprintf(p, sizeof(p), "%s/sub", file);
	ck_assert_int_eq(peer_fsync_parent(p), -ENOTDIR);
	ck_assert_int_eq(peer_fsync_parent("/nonexistent-dir/x"), -ENOENT);
	ck_assert_int_eq(peer_fsync_parent("/x"), 0);  /* parent "/" */
	ck_assert_int_eq(peer_fsync_parent("rel"), 0); /* parent "." */
	memset(longp, 'a', sizeof(longp) - 1);
	ck_assert_int_eq(peer_fsync_parent(longp), -ENAMETOOLONG);
	unlink(file);
	snprintf(p, sizeof(p), "%s/new", dir);
	rmdir(p);
	rmdir(dir);
}
END_TEST

/* The active-worker budget: auto leaves one CPU to the clients, an
 * explicit count is capped by the threads, no thread is refused. */
START_TEST(active_budget)
{
	static const struct {
		unsigned cpus, threads, opt;
		int budget;
	} cases[] = {
	    {2, 2, 0, 1}, {2, 1, 0, 1},	   {1, 4, 0, 1},    {4, 2, 0, 2},
	    {4, 8, 0, 3}, {64, 16, 0, 16}, {0, 3, 0, 3}, /* CPUs unknown */
	    {2, 2, 2, 2}, {2, 2, 5, 2},	   {2, 4, 3, 3},    {64, 4, 1, 1},
	    {0, 4, 2, 2}, {1, 1, 0, 1},	   {2, 1024, 0, 1},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(
		    peer_active_budget(cases[i].cpus, cases[i].threads,
				       cases[i].opt) == cases[i].budget,
		    "case %zu: %d", i,
		    peer_active_budget(cases[i].cpus, cases[i].threads,
				       cases[i].opt));
	ck_assert_int_eq(peer_active_budget(2, 0, 0), -EINVAL);
	ck_assert_int_eq(peer_active_budget(2, 0, 1), -EINVAL);
	ck_assert_uint_ge(peer_cpus(), 1);
}
END_TEST

START_TEST(parse_cpus)
{
	const char *bad[] = {"",  ",",	 "1,", ",1",	"3-1", "1-", "-1",
			     "a", "1 2", " 1", "1-2-3", "0x1", "1;2"};
	cpu_set_t set;
	char big[32];

	ck_assert_int_eq(peer_parse_cpus("1", &set), 0);
	ck_assert_int_eq(CPU_COUNT(&set), 1);
	ck_assert(CPU_ISSET(1, &set));
	ck_assert_int_eq(peer_parse_cpus("0-3,6", &set), 0);
	ck_assert_int_eq(CPU_COUNT(&set), 5);
	ck_assert(CPU_ISSET(3, &set) && CPU_ISSET(6, &set) &&
		  !CPU_ISSET(4, &set));
	ck_assert_int_eq(peer_parse_cpus("2-2", &set), 0);
	ck_assert_int_eq(CPU_COUNT(&set), 1);
	/* the last CPU of a cpu_set_t, and one past it */
	snprintf(big, sizeof(big), "%d", CPU_SETSIZE - 1);
	ck_assert_int_eq(peer_parse_cpus(big, &set), 0);
	snprintf(big, sizeof(big), "%d", CPU_SETSIZE);
	ck_assert_int_eq(peer_parse_cpus(big, &set), -EINVAL);
	ck_assert_int_eq(peer_parse_cpus("99999999999999999999", &set),
			 -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(peer_parse_cpus(bad[i], &set) == -EINVAL,
			      "'%s' accepted", bad[i]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peer_util");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, parse_u64);
	tcase_add_test(tc, parse_size);
	tcase_add_test(tc, parse_size_suffix_case);
	tcase_add_test(tc, parse_duration);
	tcase_add_test(tc, parse_percent_and_level);
	tcase_add_test(tc, log_levels);
	tcase_add_test(tc, pidfile_lock);
	tcase_add_test(tc, fsync_parent);
	tcase_add_test(tc, active_budget);
	tcase_add_test(tc, parse_cpus);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
