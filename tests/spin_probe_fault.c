/* SPDX-License-Identifier: MIT */
/*
 * spin_probe_fault: an LD_PRELOAD shim for tests/test_bench_spin_probe.sh,
 * making bench_spin_probe meet what it cannot measure (SPIN_PROBE_FAULT):
 *   getrusage  getrusage() fails with ENOSYS (a kernel without
 *              RUSAGE_THREAD): the probe must say so and print nothing;
 *   clock      clock_gettime() always answers the same time: every batch
 *              measures 0 ns, so a ratio of two is 0/0, which the JSON
 *              must carry as null (JSON has no nan).
 * Unset or anything else: both behave as libc's.
 * A fault that took effect creates the file SPIN_PROBE_MARK names (if
 * set): the test's proof that this shim answered the call, not a
 * definition that comes before it and does not pass the call on (one in
 * the executable itself, which a static sanitizer runtime may add;
 * review21b F3).
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static bool fault(const char *what)
{
	static bool marked;
	const char *f = getenv("SPIN_PROBE_FAULT"), *mark;
	int fd;

	if (!f || strcmp(f, what))
		return false;
	mark = getenv("SPIN_PROBE_MARK");
	if (!marked && mark) {
		/* once: the clock is read in a loop */
		marked = true;
		fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd >= 0)
			close(fd);
	}
	return true;
}

/*
 * At load: if the faulted function's first definition (what the program's
 * calls reach) is this shim's, create SPIN_PROBE_MARK.interposed. The test
 * then fails a fault that left no mark (the program no longer makes the
 * call it is judged on), and skips only where another definition comes
 * first (review22s F6).
 */
__attribute__((constructor)) static void note_interposed(void)
{
	const char *f = getenv("SPIN_PROBE_FAULT"), *mark;
	Dl_info first, self;
	char path[4096];
	void *sym;
	int fd;

	mark = getenv("SPIN_PROBE_MARK");
	if (!f || !mark)
		return;
	if (strcmp(f, "getrusage") && strcmp(f, "clock"))
		return;
	/* whose definition the program's calls reach: compared by the
	 * object it lies in (a global's address taken here would itself be
	 * resolved to the first definition) */
	sym = dlsym(RTLD_DEFAULT,
		    !strcmp(f, "getrusage") ? "getrusage" : "clock_gettime");
	if (!sym || !dladdr(sym, &first) ||
	    !dladdr((void *)note_interposed, &self) ||
	    first.dli_fbase != self.dli_fbase ||
	    (size_t)snprintf(path, sizeof(path), "%s.interposed", mark) >=
		sizeof(path))
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

int getrusage(int who, struct rusage *usage)
{
	int (*real)(int, struct rusage *);

	if (fault("getrusage")) {
		errno = ENOSYS;
		return -1;
	}
	real = (int (*)(int, struct rusage *))dlsym(RTLD_NEXT, "getrusage");
	return real ? real(who, usage) : (errno = ENOSYS, -1);
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
	int (*real)(clockid_t, struct timespec *);

	if (fault("clock")) {
		ts->tv_sec = 1;
		ts->tv_nsec = 0;
		return 0;
	}
	real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT,
							    "clock_gettime");
	return real ? real(clk, ts) : (errno = ENOSYS, -1);
}
