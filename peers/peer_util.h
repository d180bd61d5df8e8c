/* SPDX-License-Identifier: MIT */
#ifndef PEER_UTIL_H
#define PEER_UTIL_H
/*
 * peer_util: process plumbing shared by the peers, bench_xseg and xsegctl:
 * leveled logging to stderr or syslog, parsing of numbers, sizes and
 * durations given on the command line, a monotonic clock, daemonisation
 * with a start-up handshake, pid files, and making a new directory's
 * entry durable.
 *
 * None of this depends on libxseg; it is split from peer.h so that tools
 * and tests can use it alone.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------------ */
/* Logging                                                             */
/* ------------------------------------------------------------------ */

enum peer_log_level {
	PEER_LOG_ERROR = 0,
	PEER_LOG_WARN = 1,
	PEER_LOG_INFO = 2,
	PEER_LOG_DEBUG = 3,
};

/*
 * Configure the process-wide logger: messages are prefixed with prog
 * ("noop: ...") and those above level are dropped. With use_syslog the
 * messages go to syslog (LOG_DAEMON facility) instead of stderr.
 *
 * The logger is the one piece of process-global state in the framework
 * (syslog itself is process-global). Call it before starting threads; the
 * level may be read concurrently afterwards (relaxed atomic), peer_log is
 * thread-safe (one write(2) per message on stderr, so lines never
 * interleave). prog must stay valid for the life of the process.
 */
void peer_log_init(const char *prog, enum peer_log_level level,
		   bool use_syslog);

/* Current level, and change it at run time (thread-safe). */
enum peer_log_level peer_log_get_level(void);
void peer_log_set_level(enum peer_log_level level);

/* Parse "error", "warn", "info", "debug" or a digit 0..3. Returns 0 or
 * -EINVAL and leaves *level unchanged. */
int peer_log_parse_level(const char *s, enum peer_log_level *level);

/* Emit one message (a trailing newline is added). Thread-safe. */
void peer_log(enum peer_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void peer_vlog(enum peer_log_level level, const char *fmt, va_list ap);

#define peer_err(...)  peer_log(PEER_LOG_ERROR, __VA_ARGS__)
#define peer_warn(...) peer_log(PEER_LOG_WARN, __VA_ARGS__)
#define peer_info(...) peer_log(PEER_LOG_INFO, __VA_ARGS__)
#define peer_dbg(...)                                                          \
	do {                                                                   \
		if (peer_log_get_level() >= PEER_LOG_DEBUG)                    \
			peer_log(PEER_LOG_DEBUG, __VA_ARGS__);                 \
	} while (0)

/* ------------------------------------------------------------------ */
/* Command-line parsing                                                */
/* ------------------------------------------------------------------ */

/* Decimal (or 0x hex) unsigned integer, the whole string; a leading 0
 * is decimal too (010 is ten, not octal eight). 0 or -EINVAL
 * (empty, trailing garbage, sign) / -ERANGE; *out unchanged on error. */
int peer_parse_u64(const char *s, uint64_t *out);

/* Size with an optional binary suffix: 4096, 4k, 4K, 4kb, 4KB, 4Ki,
 * 4KiB, 4kib, 4KIB, 1m, 2G, 1T, 1P, 1E, 0x1000, 512B (the number as
 * peer_parse_u64 reads it; k = 1024, never 1000; the suffix is
 * case-insensitive: a letter k, m, g, t, p or e, then an optional i,
 * then an optional b; or a lone b, bytes). 0, -EINVAL (anything else
 * after the number, e.g. 4kbx, 4ik, 4X) or -ERANGE (overflow past
 * 2^64 - 1, e.g. 16E); *out unchanged on error. */
int peer_parse_size(const char *s, uint64_t *out);

/* Duration into nanoseconds: a number with a unit ns, us, ms, s, m, h; a
 * bare number takes default_unit_ns (e.g. 1000 for microseconds).
 * 0, -EINVAL or -ERANGE; *out unchanged on error. */
int peer_parse_duration(const char *s, uint64_t default_unit_ns,
			uint64_t *out_ns);

/* Percentage 0..100 (integer). 0 or -EINVAL / -ERANGE. */
int peer_parse_percent(const char *s, unsigned *out);

/* Print a one-line usage error "prog: reason\nTry 'prog --help'." to
 * stderr. Programs then exit with status 2. */
void peer_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ */
/* Time                                                                */
/* ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t peer_now_ns(void);

/* ------------------------------------------------------------------ */
/* Workers and CPUs                                                    */
/* ------------------------------------------------------------------ */

/* CPUs this process may run on (its affinity mask; the online count if
 * the mask cannot be read), at least 1. */
unsigned peer_cpus(void);

/*
 * Parse a CPU list ("1", "0-3", "0,2-3": decimal CPU numbers and ranges,
 * comma separated, no spaces) into *set (cleared first). Pure: the CPUs
 * need not exist; sched_setaffinity tells. Returns 0, or -EINVAL for an
 * empty or malformed list, a reversed range or a CPU number at or above
 * CPU_SETSIZE (set is then unspecified).
 */
int peer_parse_cpus(const char *list, cpu_set_t *set);

/*
 * How many of a peer's threads workers may be active at once when its
 * handlers never block (peer.h, handlers_never_block; --active-workers):
 * opt > 0 asks for opt (at most threads); opt 0 (auto) leaves one of the
 * ncpus CPUs to the processes that send the requests: max(1, ncpus - 1),
 * at most threads. On a 2-CPU machine the clients polling for replies and
 * one worker fill both CPUs; a second worker woken to help would only
 * take turns on a CPU with them. ncpus 0 (unknown) sets no limit
 * (threads). Pure: no side effect.
 * Returns the budget, 1..threads, or -EINVAL for threads 0.
 */
int peer_active_budget(unsigned ncpus, unsigned threads, unsigned opt);

/* ------------------------------------------------------------------ */
/* Daemon and pid file                                                 */
/* ------------------------------------------------------------------ */

/*
 * Detach into the background (fork, setsid, fork, chdir "/", stdio on
 * /dev/null). The original process does not return: it waits until the
 * daemon calls peer_daemon_ready() and exits 0, or exits 1 if the daemon
 * reports failure or dies first, so the caller's exit status says whether
 * start-up worked. In the daemon returns 0 with *ready_fd set to the
 * handshake descriptor; returns -errno on failure (still in the original
 * process, nothing forked). Call before any thread is started.
 */
int peer_daemonize(int *ready_fd);

/* Report start-up success (ok) or failure to the waiting parent and close
 * the descriptor. A negative fd is ignored (not daemonised). */
void peer_daemon_ready(int ready_fd, bool ok);

/*
 * Create the pid file at path holding the current pid, locked with an
 * exclusive flock for the life of the process so a second instance with
 * the same pid file fails with -EEXIST. Returns the descriptor (>= 0) to
 * pass to peer_pidfile_remove, or -errno.
 */
int peer_pidfile_create(const char *path);

/* Unlink the pid file and release the lock. */
void peer_pidfile_remove(const char *path, int fd);

/* ------------------------------------------------------------------ */
/* Durable directories                                                 */
/* ------------------------------------------------------------------ */

/*
 * fsync the directory that holds path (by name: trailing slashes are
 * ignored, a relative path without a slash means "."), so that path's own
 * entry - a mkdir just made - survives a power cut. Without it a POSIX
 * file system may lose the whole tree below path, flushed data included.
 * Returns 0 or -errno (-ENAMETOOLONG for a path of PATH_MAX or more).
 */
int peer_fsync_parent(const char *path);

#endif /* PEER_UTIL_H */
