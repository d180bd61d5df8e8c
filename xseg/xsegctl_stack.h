/* SPDX-License-Identifier: MIT */
#ifndef XSEGCTL_STACK_H
#define XSEGCTL_STACK_H
/*
 * Internals shared by `xsegctl stack` (xsegctl_stack.c: start, stop,
 * status, plug, unplug) and its supervisor (xsegctl_supervise.c: restarts
 * peers of a running stack that died). Not a library interface: both
 * files are parts of the xsegctl program. Functions print their own
 * one-line error (prefixed "xsegctl: stack: ") and return 0 or a negative
 * errno.
 */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "xseg.h"

#define STACK_STORE_PORT  1
#define STACK_CACHED_PORT 2
#define STACK_VLMC_PORT	  3

/* The stack's object_size (vlmc's object sizes, vlmc_obj_size_valid: a
 * power of two in between). It is also cached's largest object, and
 * vlmc's volume table objects (vlmc:meta.*, up to VLMC_TABLE_MAX, about
 * 464 KiB) go through cached: below 512K vlmc could not read its table
 * and the stack never started (xsegctl_stack.c checks the bound against
 * VLMC_TABLE_MAX). Volumes may still use smaller objects (volume create
 * NAME SIZE OBJSIZE). */
#define STACK_MIN_OBJECT_SIZE (512ULL << 10)
#define STACK_MAX_OBJECT_SIZE (64ULL << 20)
/* The stall bound of a peer's start (key start_timeout), in seconds: its
 * default and its largest value */
#define STACK_START_TIMEOUT_S	  120
#define STACK_START_TIMEOUT_MAX_S 3600
/* How long stop and unplug-cached wait for an exiting peer while none of
 * its threads ends (key exiting_timeout), in seconds: its default and
 * its largest value */
#define STACK_EXITING_TIMEOUT_S	    10
#define STACK_EXITING_TIMEOUT_MAX_S 3600
/* cached's bucket size (its default; the stack does not set it) */
#define STACK_CACHED_BUCKET_SIZE 4096ULL
/* cached's requests to the store, which it reserves from the segment's
 * data heap at its start (its --max-inflight and --max-req-size, given by
 * the stack so that stack_check sizes the segment for the same numbers) */
#define STACK_CACHED_MAX_INFLIGHT 32u
#define STACK_CACHED_MAX_REQ_SIZE ((uint64_t)128 << 10)

/* The largest segment_size a config or run/stack.conf can hold: every
 * peer maps the whole segment, and an x86-64 process has 128 TiB of
 * address space (a 127T segment's mmap fails); half of it leaves the rest
 * to the peer's own mappings, and 4 times it (the noop store's
 * --store-max) stays far from 2^64. What start takes is narrower and
 * depends on `requests`, so stack_check checks it across keys: at least
 * what xseg_create needs (xseg_min_size), at most what the data heap can
 * use whole (xseg_max_size, 256 GiB of data). This bound stays wider so
 * that the run/stack.conf of a larger segment made before session 20
 * still reads (stop, status). */
#define STACK_MAX_SEGMENT_SIZE (64ULL << 40)

/* The configuration of a stack (config file keys: docs/operations.md). */
/* The most worker threads of a peer (its -t bound, peers/peer.c). */
#define STACK_MAX_THREADS 1024

struct stack {
	char dir[PATH_MAX];
	char segment[128];
	uint64_t segment_size;
	uint64_t requests;
	char store[16]; /* blocker, noop, auto */
	bool cached;
	char cache_size[32];
	char write_policy[32];
	char object_size[32];
	uint64_t store_threads, cached_threads, vlmc_threads;
	char nbd_socket[PATH_MAX];
	char ctl_socket[PATH_MAX];
	uint64_t nbd_tcp;
	bool verify_reads;
	bool supervise; /* run a supervisor that restarts dead peers */
	char spin[32];	/* peers' --spin; "" = their default */
	/* cached's --spin instead of spin; "" = spin's. Poll mode: cached
	 * busy-polls for the next request this long after each one. The
	 * embedded default sets 80us (docs/performance.md, "Session 24");
	 * a config that sets spin without cached_spin clears it */
	char cached_spin[32];
	/* vlmc's --spin instead of spin; "" = spin's. The embedded default
	 * sets 20us: vlmc's NBD completers poll adaptively for cached's
	 * replies (docs/performance.md, "Session 20"); a config that sets
	 * spin without vlmc_spin clears it (stack_parse) */
	char vlmc_spin[32];
	char spin_policy[16]; /* peers' --spin-policy; "" = their default */
	char cpus[64];	      /* peers' --cpus; "" = no affinity set */
	/* vlmc's NBD limits; "" = vlmc's default */
	char nbd_max_conns[32], nbd_inflight_bytes[32], nbd_spin[32];
	/* cached's --max-objects; "" = cached's default (4 x cache_size /
	 * object_size) */
	char cache_max_objects[24];
	/* vlmc's --nbd-total-inflight-bytes; "" = vlmc's default (half
	 * the segment heap) */
	char nbd_total_inflight[32];
	char gc_threshold[8];	 /* blocker's --gc-threshold; "" = default */
	char dead_peer_wait[32]; /* vlmc's --dead-peer-wait; "" = default */
	/* vlmc's --snapshot-drain-wait; "" = default */
	char snapshot_drain_wait[32];
	/* blocker's --segment-size (at create only) and --reserve; "" =
	 * the blocker's default (auto) */
	char store_segment_size[32], store_reserve[32];
	/* how long a starting peer may make no progress (no CPU time, no
	 * I/O) before its start fails; "" = STACK_START_TIMEOUT_S */
	char start_timeout[32];
	/* how long stop and unplug-cached wait for an exiting peer (its
	 * leader gone, threads left) while none of its threads ends; "" =
	 * STACK_EXITING_TIMEOUT_S */
	char exiting_timeout[32];
	bool json;
};

/* The embedded default configuration (`xsegctl stack default-config`);
 * parsed first, a CONFIG's keys then override it. */
extern const char stack_default_conf[];
/* Copy v into dst (cap bytes): 0, or -ENAMETOOLONG when it does not fit. */
int stack_str(char *dst, size_t cap, const char *v);
/*
 * Parse config text ("key = value" lines, '#' comments, blank lines) into
 * st, over what st holds already; a text that sets spin but not
 * cached_spin (vlmc_spin) clears cached_spin (vlmc_spin): that peer then
 * gets that spin; name is used in messages.
 * Each key's value is checked against its bounds (docs/operations.md);
 * the first bad line is said on stderr with its number and what the key
 * accepts, and -EINVAL returned (st then holds the lines before it). 0,
 * -EINVAL or -ENOMEM.
 */
int stack_parse(struct stack *st, const char *text, const char *name);
/*
 * What no single key can tell: the values of two keys that a peer
 * refuses together (cached: the cache must hold two objects, its bucket
 * count must fit 32 bits), and a segment_size too small for the
 * segment's fixed parts with `requests` requests or too large for its
 * data heap to use whole (xseg_create's bounds).
 * Checked once the whole configuration is read, before anything starts: a
 * peer refusing its options at start used to cost the 30 s wait for its
 * port (review11 N-I). 0 or -EINVAL (said).
 */
int stack_check(const struct stack *st, const char *name);

/* The xseg_create configuration of st's segment: xseg's defaults with
 * st's segment_size and requests (what stack_check checks and start
 * creates). */
void stack_xseg_config(const struct stack *st, struct xseg_config *cfg);

/*
 * A value a config line can hold: stack_parse ends a value at a '#' (a
 * comment) or a line break and strips white space at its ends, so one
 * holding them would read back as another (a stack directory
 * "/srv/a#b" as "/srv/a").
 */
bool stack_conf_value_ok(const char *v);
/*
 * Print st as config text that stack_parse reads back to the same values
 * (DIR/run/stack.conf, which stop, status, plug and unplug parse into a
 * zeroed struct stack): every key with a value, the empty optional ones
 * left out; store is the program the store runs (st->store with auto
 * resolved). 0; -EINVAL (said, nothing printed) when a value set from
 * outside the parser (dir, segment, the sockets: from --dir or the
 * directory's realpath) fails stack_conf_value_ok; -EIO when writing f
 * failed.
 */
int stack_print_conf(FILE *f, const struct stack *st, const char *store);

/* The three peers of a stack, in start order (stop goes in reverse). */
enum stack_role { STACK_ROLE_STORE, STACK_ROLE_CACHED, STACK_ROLE_VLMC };
/* Role r's --spin ("" = the peer's own default): cached_spin or
 * vlmc_spin when set, else spin. */
const char *stack_role_spin(const struct stack *st, enum stack_role r);
#define STACK_NR_ROLES 3

/* Name of a role: its log, pid file and status row (store, cached, vlmc). */
const char *stack_role_name(enum stack_role r);
uint32_t stack_role_port(enum stack_role r);
/* The role named name (store, cached, vlmc), or -1. */
int stack_role_by_name(const char *name);
/* The program a role runs (blocker or noop for the store). */
const char *stack_role_prog(const struct stack *st, enum stack_role r);

/*
 * Why a port is exiting (xseg_port_info's exiting: its owner lives only
 * through threads its leader left), for status, restart-peer, stop and
 * the supervisor alike: neither serving nor dead. The owner keeps the
 * port (nothing reclaims it, the supervisor does not restart it, no new
 * peer can bind it) until they end, which for a thread stuck for good is
 * never: say so, what comes then (then, without a final stop), and where
 * to look (review20 N1-B, review21b F7). Into out (cap bytes, truncated).
 */
void stack_exiting_why(char *out, size_t cap, const struct xseg_port_info *pi,
		       const char *then);

void stack_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void stack_sleep_ms(unsigned ms);
/* Read a whole (small) file into a malloc'ed NUL-terminated string. */
int stack_read_file(const char *path, char **text);
/* Run bin with argv detached (own session, stdin /dev/null, stdout and
 * stderr appended to log; double fork, so nobody has to reap it). 0 once
 * the exec succeeded, with the new process's pid in *pidp (may be NULL;
 * not our child: watch it with stack_pid_runs); the exec's -errno, or
 * -ECHILD when the forks failed. */
int stack_spawn_detached(const char *bin, char *const argv[], const char *log,
			 pid_t *pidp);
/* The pid in DIR/run/NAME.pid, or 0 when there is none. */
pid_t stack_pidfile(const struct stack *st, const char *name);
/* Is pid a live process running prog? (A pid file may outlive its
 * process, and the pid may have been reused by another program.) A
 * zombie is not. */
bool stack_pid_runs(pid_t pid, const char *prog);
/* Is pid a process started as st's peer NAME, i.e. given
 * --pidfile=DIR/run/NAME.pid (stack_peer_args always passes it)? What a
 * pid file names before anything is waited for or killed on its word: a
 * pid reused by another stack's peer of the same program passes
 * stack_pid_runs. */
bool stack_pid_is_peer(const struct stack *st, pid_t pid, const char *name);
/* pid (from role r's pid file) is that peer of st, alive: a live process
 * of r's program (stack_pid_runs) given r's --pidfile (stack_pid_is_peer) */
bool stack_role_pid_runs(const struct stack *st, pid_t pid, enum stack_role r);
/* True when the store's port is redirected to cached's (cached plugged). */
bool stack_plugged(struct xseg *seg);
/*
 * Start the peer of role r detached (log DIR/run/NAME.log) and wait until
 * it is up: its port bound and its statistics published after its init;
 * cached: and plugged itself; vlmc: and made its control socket. The wait
 * lasts as long as the peer's process makes progress (CPU time or I/O),
 * and fails after start_timeout without (the process is then killed). A
 * peer that exits meanwhile fails it at once. On failure what the peer
 * logged during this start is printed.
 */
int stack_start_peer(const struct stack *st, struct xseg *seg,
		     enum stack_role r);
/*
 * Following a peer's start (stack_start_peer; restart-peer and stop
 * following the supervisor's): is it making progress, i.e. did the CPU
 * time (all threads) or the I/O of the processes watched grow?
 */
struct stack_progress {
	uint64_t start_ns, sampled_ns, progress_ns; /* 0: not yet */
	uint64_t said_ns;			    /* last line printed */
	double cpu_s; /* the first pid's CPU time at the last reading */
	unsigned npids;
	pid_t pid[STACK_NR_ROLES];
	uint64_t cpu_ticks[STACK_NR_ROLES];
	uint64_t read_bytes[STACK_NR_ROLES], write_bytes[STACK_NR_ROLES];
	bool known[STACK_NR_ROLES];
};
/* The stall bound of st's peers' start, in ns (key start_timeout). */
uint64_t stack_start_timeout_ns(const struct stack *st);
/* The bound of st's stop and unplug-cached on an exiting peer, in ns (key
 * exiting_timeout). */
uint64_t stack_exiting_timeout_ns(const struct stack *st);
/* Waits that follow the supervisor's wait on a starting peer end after
 * start_timeout without progress, and this much more: the supervisor's
 * own wait on the same process, begun earlier, ends first (and its log
 * says why) */
#define STACK_RESTART_SLACK_NS 10000000000ULL
/* The supervisor gives up on a peer whose last this many restarts all
 * failed to start (xsegctl_supervise.c). Not 1: a start can fail by
 * chance (the peer killed during its start-up, a moment without memory),
 * and the next one then succeeds. Not more: a start that stalls lasts
 * start_timeout (120 s by default) before it fails, so each one more
 * leaves a dead peer (and a cached still plugged) that long; three in a
 * row with the peer never up between them point at a cause an operator
 * has to fix. restart-peer's wait (stack_restart_supervised) lasts as
 * long as such a run. */
#define STACK_SUP_FAILED_STARTS 3
/* Read the usage of pids (npids of them, at most STACK_NR_ROLES, 0 for
 * none) at most once a second (pg zeroed at first), and record when one
 * of them grew. A pid not watched at the last reading (a new process)
 * only gives its baseline: a restarted process is not progress by
 * itself. */
void stack_progress_sample(struct stack_progress *pg, const pid_t *pids,
			   unsigned npids);
/* The wait of pg has gone on for limit_ns without progress. */
bool stack_progress_stalled(const struct stack_progress *pg, uint64_t limit_ns);
/* Every 10 s of the wait of pg, on stdout: "xsegctl: waiting for WHAT: T
 * s, still progressing (CPU C s)", or how long it has not. */
void stack_progress_say(struct stack_progress *pg, const char *what);
/* The pid-file processes of the roles that are not up (of their program:
 * a stale file may name a reused pid), in pids: what a supervisor busy
 * restarting one of them waits for. Their number. */
unsigned stack_starting_pids(const struct stack *st, struct xseg *seg,
			     pid_t *pids);
/*
 * The operator's wish that cached stays unplugged (DIR/run/cached.off,
 * written by unplug-cached, removed by plug-cached and start): the
 * supervisor does not restart a cached that is wished off.
 */
void stack_set_cached_off(const struct stack *st, bool off);
bool stack_cached_off(const struct stack *st);
/*
 * `xsegctl stack restart-peer`'s request to the running supervisor: the
 * file DIR/run/restart-peer.NAME (its path in path). The supervisor, at
 * its next poll, clears the peer's give-up state and restart count
 * window, records that in supervisor.state, and only then removes the
 * file; a peer that is down is then restarted as after any death (cached
 * also when unplugged: it is started plugged). So once the file is gone,
 * stack_supervisor_gave_up says what happened to this request. 0 or
 * -errno.
 */
int stack_request_restart(const struct stack *st, enum stack_role r, char *path,
			  size_t cap);
/* What supervisor.state says of role r: 1 given up on, 0 supervised, -1
 * no state (no supervisor ever ran). */
int stack_supervisor_gave_up(const struct stack *st, enum stack_role r);
/* Start the supervisor of the running stack in st->dir, detached. */
int stack_start_supervisor(const struct stack *st);
/* SIGTERM the stack's supervisor, if one runs, and wait for it to exit. */
int stack_stop_supervisor(const struct stack *st);
/* Print the supervisor's state for `stack status`: one line, or (json)
 * an object {"pid":N,"running":B,"peers":[{"role":R,"restarts":N,
 * "gave_up":B},...]}. */
void stack_print_supervisor(const struct stack *st);
void stack_print_supervisor_json(const struct stack *st);
/* `xsegctl stack supervise`: run the supervisor in the foreground until
 * SIGTERM/SIGINT or until the stack's segment is removed. */
int stack_supervise(struct stack *st);

#endif /* XSEGCTL_STACK_H */
