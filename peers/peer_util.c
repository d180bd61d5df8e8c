/* SPDX-License-Identifier: MIT */
/*
 * peer_util: logging, command-line parsing, clock, daemon and pid file.
 */
#include "peer_util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include "xtime.h"

/* ------------------------------------------------------------------ */
/* Logging                                                             */
/* ------------------------------------------------------------------ */

static struct {
	const char *prog;
	int level; /* enum peer_log_level, read with relaxed atomics */
	bool use_syslog;
} peer_logger = {"peer", PEER_LOG_INFO, false};

static const char *const peer_level_names[] = {"error", "warn", "info",
					       "debug"};

void peer_log_init(const char *prog, enum peer_log_level level, bool use_syslog)
{
	peer_logger.prog = prog ? prog : "peer";
	__atomic_store_n(&peer_logger.level, (int)level, __ATOMIC_RELAXED);
	peer_logger.use_syslog = use_syslog;
	if (use_syslog)
		openlog(peer_logger.prog, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

enum peer_log_level peer_log_get_level(void)
{
	return (enum peer_log_level)__atomic_load_n(&peer_logger.level,
						    __ATOMIC_RELAXED);
}

void peer_log_set_level(enum peer_log_level level)
{
	__atomic_store_n(&peer_logger.level, (int)level, __ATOMIC_RELAXED);
}

int peer_log_parse_level(const char *s, enum peer_log_level *level)
{
	if (!s)
		return -EINVAL;
	for (int i = 0; i <= PEER_LOG_DEBUG; i++) {
		if (!strcasecmp(s, peer_level_names[i]) ||
		    (s[0] == '0' + i && s[1] == '\0')) {
			*level = (enum peer_log_level)i;
			return 0;
		}
	}
	if (!strcasecmp(s, "warning")) {
		*level = PEER_LOG_WARN;
		return 0;
	}
	return -EINVAL;
}

void peer_vlog(enum peer_log_level level, const char *fmt, va_list ap)
{
	static const int syslog_prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO,
					  LOG_DEBUG};
	char buf[1024];
	int n;

	if ((int)level > __atomic_load_n(&peer_logger.level, __ATOMIC_RELAXED))
		return;
	if (peer_logger.use_syslog) {
		vsyslog(syslog_prio[level], fmt, ap);
		return;
	}
	n = snprintf(buf, sizeof(buf), "%s: ", peer_logger.prog);
	if (level != PEER_LOG_INFO && n < (int)sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - n,
			      "%s: ", peer_level_names[level]);
	if (n < (int)sizeof(buf))
		n += vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
	if (n >= (int)sizeof(buf) - 1)
		n = sizeof(buf) - 2; /* truncated: keep the newline */
	buf[n++] = '\n';
	/* One write per line: lines from several threads never interleave. */
	ssize_t left = n;
	const char *p = buf;
	while (left > 0) {
		ssize_t w = write(STDERR_FILENO, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p += w;
		left -= w;
	}
}

void peer_log(enum peer_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	peer_vlog(level, fmt, ap);
	va_end(ap);
}

void peer_usage_error(const char *prog, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", prog);
}

/* ------------------------------------------------------------------ */
/* Parsing                                                             */
/* ------------------------------------------------------------------ */

/* Parse the leading unsigned number of s; *end points past it. */
static int peer_parse_prefix(const char *s, uint64_t *out, const char **end)
{
	char *e;
	unsigned long long v;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	/* decimal, or hex after 0x; not strtoull's base 0, which read a
	 * leading 0 as octal: "010G" was 8 GiB and "08" refused (found by
	 * fuzz_vlmc_ctl) */
	bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X') &&
		   isxdigit((unsigned char)s[2]);
	errno = 0;
	v = strtoull(s, &e, hex ? 16 : 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (e == s)
		return -EINVAL;
	*out = v;
	*end = e;
	return 0;
}

int peer_parse_u64(const char *s, uint64_t *out)
{
	const char *end;
	uint64_t v;
	int rc = peer_parse_prefix(s, &v, &end);

	if (rc)
		return rc;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

int peer_parse_size(const char *s, uint64_t *out)
{
	const char *end;
	uint64_t v;
	unsigned shift = 0;
	int rc = peer_parse_prefix(s, &v, &end);

	if (rc)
		return rc;
	switch (*end) {
	case '\0':
		break;
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	case 't':
	case 'T':
		shift = 40;
		break;
	/* vlmc's largest volume is 1P: a limit an error message names must
	 * be one the parser reads back (review11 N-I) */
	case 'p':
	case 'P':
		shift = 50;
		break;
	case 'e':
	case 'E':
		shift = 60;
		break;
	case 'b':
	case 'B':
		if (end[1])
			return -EINVAL;
		*out = v;
		return 0;
	default:
		return -EINVAL;
	}
	if (shift) {
		/* after the letter an optional i and an optional b, either
		 * case: 4k, 4K, 4kb, 4KB, 4ki, 4KiB, 4kib, 4KIB are all 4096.
		 * Before, only "", "B", "iB" and "ib" were taken, and an
		 * operator's 4kb or 4KIB was refused as a bad value */
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'b' || *end == 'B')
			end++;
		if (*end)
			return -EINVAL;
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
		v <<= shift;
	}
	*out = v;
	return 0;
}

int peer_parse_duration(const char *s, uint64_t default_unit_ns,
			uint64_t *out_ns)
{
	static const struct {
		const char *name;
		uint64_t ns;
	} units[] = {
	    {"ns", 1},
	    {"us", 1000},
	    {"ms", 1000000},
	    {"s", 1000000000ULL},
	    {"m", 60000000000ULL},
	    {"min", 60000000000ULL},
	    {"h", 3600000000000ULL},
	};
	const char *end;
	uint64_t v, unit = default_unit_ns;
	int rc = peer_parse_prefix(s, &v, &end);

	if (rc)
		return rc;
	if (*end) {
		unit = 0;
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (!strcmp(end, units[i].name))
				unit = units[i].ns;
		if (!unit)
			return -EINVAL;
	}
	if (unit && v > UINT64_MAX / unit)
		return -ERANGE;
	*out_ns = v * unit;
	return 0;
}

int peer_parse_percent(const char *s, unsigned *out)
{
	uint64_t v;
	int rc = peer_parse_u64(s, &v);

	if (rc)
		return rc;
	if (v > 100)
		return -ERANGE;
	*out = (unsigned)v;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Time                                                                */
/* ------------------------------------------------------------------ */

uint64_t peer_now_ns(void)
{
	return xtime_ns(CLOCK_MONOTONIC);
}

/* ------------------------------------------------------------------ */
/* Daemon                                                              */
/* ------------------------------------------------------------------ */

int peer_daemonize(int *ready_fd)
{
	int pfd[2];
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int err = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return err;
	}
	if (pid > 0) {
		/* Original process: wait for the verdict of the daemon. */
		char c = 0;
		ssize_t n;

		close(pfd[1]);
		do {
			n = read(pfd[0], &c, 1);
		} while (n < 0 && errno == EINTR);
		waitpid(pid, NULL, 0); /* the intermediate child */
		_exit(n == 1 && c == 'o' ? 0 : 1);
	}
	close(pfd[0]);
	if (setsid() < 0)
		_exit(1);
	pid = fork();
	if (pid < 0)
		_exit(1);
	if (pid > 0)
		_exit(0); /* the daemon is not a session leader: no tty */
	if (chdir("/") < 0) {
		/* cannot fail for "/" in practice; keep going */
	}
	int nullfd = open("/dev/null", O_RDWR);
	if (nullfd >= 0) {
		dup2(nullfd, STDIN_FILENO);
		dup2(nullfd, STDOUT_FILENO);
		/* stderr stays until ready: start-up errors remain visible
		 * to whoever started us. */
		if (nullfd > STDERR_FILENO)
			close(nullfd);
	}
	*ready_fd = pfd[1];
	return 0;
}

void peer_daemon_ready(int ready_fd, bool ok)
{
	char c = ok ? 'o' : 'f';
	ssize_t n;

	if (ready_fd < 0)
		return;
	if (ok) {
		int nullfd = open("/dev/null", O_RDWR);
		if (nullfd >= 0) {
			dup2(nullfd, STDERR_FILENO);
			if (nullfd > STDERR_FILENO)
				close(nullfd);
		}
	}
	do {
		n = write(ready_fd, &c, 1);
	} while (n < 0 && errno == EINTR);
	close(ready_fd);
}

int peer_pidfile_create(const char *path)
{
	char buf[32];
	int fd, n;

	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int err = errno == EWOULDBLOCK ? -EEXIST : -errno;
		close(fd);
		return err;
	}
	n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || write(fd, buf, n) != n) {
		int err = -errno;
		close(fd);
		unlink(path);
		return err ? err : -EIO;
	}
	return fd;
}

void peer_pidfile_remove(const char *path, int fd)
{
	if (fd < 0)
		return;
	unlink(path);
	close(fd);
}

int peer_fsync_parent(const char *path)
{
	char parent[PATH_MAX];
	size_t n = strlen(path);
	char *slash;
	int fd, r = 0;

	if (n >= sizeof(parent))
		return -ENAMETOOLONG;
	memcpy(parent, path, n + 1);
	while (n > 1 && parent[n - 1] == '/')
		parent[--n] = 0;
	slash = strrchr(parent, '/');
	if (!slash)
		strcpy(parent, ".");
	else if (slash == parent)
		parent[1] = 0; /* "/x": the parent is "/" */
	else
		*slash = 0;
	fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* ------------------------------------------------------------------ */
/* Workers and CPUs                                                    */
/* ------------------------------------------------------------------ */

unsigned peer_cpus(void)
{
	cpu_set_t set;
	long n;

	/* the mask, not the machine: a peer started under taskset or in a
	 * cpuset shares only the CPUs it was given */
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

/* One decimal CPU number at *sp, advancing *sp past it. */
static int peer_parse_cpu(const char **sp, unsigned *cpu)
{
	const char *s = *sp;
	unsigned long v = 0;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	while (isdigit((unsigned char)*s)) {
		v = v * 10 + (unsigned long)(*s++ - '0');
		if (v >= CPU_SETSIZE)
			return -EINVAL;
	}
	*cpu = (unsigned)v;
	*sp = s;
	return 0;
}

int peer_parse_cpus(const char *list, cpu_set_t *set)
{
	const char *s = list;

	CPU_ZERO(set);
	for (;;) {
		unsigned lo, hi;

		if (peer_parse_cpu(&s, &lo))
			return -EINVAL;
		hi = lo;
		if (*s == '-') {
			s++;
			if (peer_parse_cpu(&s, &hi) || hi < lo)
				return -EINVAL;
		}
		for (unsigned c = lo; c <= hi; c++)
			CPU_SET(c, set);
		if (*s == '\0')
			return 0;
		if (*s++ != ',')
			return -EINVAL;
	}
}

int peer_active_budget(unsigned ncpus, unsigned threads, unsigned opt)
{
	unsigned budget;

	if (!threads)
		return -EINVAL;
	if (opt)
		budget = opt;
	else if (!ncpus)
		budget = threads;
	else
		budget = ncpus > 1 ? ncpus - 1 : 1;
	return (int)(budget < threads ? budget : threads);
}
