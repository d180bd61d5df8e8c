/* SPDX-License-Identifier: MIT */
#ifndef TEST_TMP_H
#define TEST_TMP_H
/*
 * Scratch files of a test program, removed whatever the tests' outcome
 * (library target test_tmp; test code only).
 *
 * Check runs each test in a forked child, and a failing assertion
 * _exits that child: neither the test's own cleanup nor the child's
 * atexit handlers run. So every scratch file and directory of a test
 * program lives under one root, $TMPDIR (or /tmp)/actest-<pid>-XXXXXX,
 * that the program's first process (the Check runner) makes before main()
 * runs (a constructor) and removes, with everything under it, when it
 * exits (atexit; a forked child that exits leaves it to the runner).
 *
 * A runner that never reaches its exit handlers (killed by ctest's
 * timeout, SIGINT) leaves its root behind; the next test program to start
 * removes such roots: those no process holds the runner's lock on (the
 * runner keeps the root's directory open with an flock, which its forked
 * children inherit and exec'd programs do not) and whose runner pid is
 * gone.
 *
 * A program linked with this library but using none of its functions
 * makes no root: the constructor comes with the first use.
 */
#include <stddef.h>

/* The root of this program's scratch files (a directory that exists until
 * the runner exits). */
const char *ttmp_root(void);

/* A new empty directory ROOT/<tag>-XXXXXX; its path in out (len bytes).
 * tag may hold any character but '/'. Aborts with a message naming the
 * path when it cannot be made. */
void ttmp_mkdtemp(char *out, size_t len, const char *tag);

/* rm -rf path: no error if it does not exist, symbolic links are removed,
 * not followed; what cannot be removed is named on stderr. */
void ttmp_rmtree(const char *path);

#endif /* TEST_TMP_H */
