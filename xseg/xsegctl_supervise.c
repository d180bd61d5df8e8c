/* SPDX-License-Identifier: MIT */
/*
 * The stack supervisor: keeps the peers of a running stack running.
 *
 * `xsegctl stack start` (with `supervise = on`, the default) leaves one
 * detached `xsegctl stack supervise --dir DIR` behind it. Twice a second
 * it looks at each peer; a peer is down when its port is not bound by a
 * live process AND the pid in DIR/run/NAME.pid is not a live process of
 * that program (so a peer still starting, e.g. a blocker replaying its
 * log, is left alone). A down peer is restarted with the same command
 * line `start` used, after a reap that fails back what it held:
 *   store   always;
 *   vlmc    always (NBD clients reconnect to the same socket);
 *   cached  only if it is still plugged (the store's port is redirected to
 *           it) and the operator did not unplug it (DIR/run/cached.off).
 *           The order matters: the redirect is read after the death was
 *           seen, because an unplug removes the redirect before cached
 *           exits.
 * A peer that dies more than SUP_BURST times within SUP_WINDOW_S seconds
 * is given up on (logged, shown by `stack status`): restarting it again
 * would only flap. So is one whose last STACK_SUP_FAILED_STARTS restarts
 * all failed (stack_start_peer), a start that succeeds ending the run:
 * a start that stalls lasts start_timeout before it fails, so such a
 * peer never dies SUP_BURST times within SUP_WINDOW_S. Giving up on
 * cached also unplugs it, so volumes keep working against the store
 * alone. A peer given up on and then started by hand (plug-cached) or
 * asked for again (restart-peer) is supervised afresh, both counts
 * cleared.
 *
 * What a restart does not change: acknowledged writes that a write-back
 * cached held unflushed die with it (as they would without a
 * supervisor); flushed data is in the store. That loss is counted in the
 * segment (xseg_writeback_losses) by the reclaim of the dead cached's
 * port, before it is restarted or unplugged, so vlmc fails the next FLUSH
 * instead of reporting the lost writes durable; the log says when a
 * restart (or a give-up) followed such a loss.
 *
 * The supervisor's state (per peer: restarts, given up) is in
 * DIR/run/supervisor.state, rewritten on every change; its log is
 * DIR/run/supervisor.log; its pid DIR/run/supervisor.pid. It exits on
 * SIGTERM/SIGINT (`stack stop` stops it first) or when the stack's
 * segment is gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xseg.h"
#include "xsegctl_stack.h"

#define SUP_POLL_MS  500
#define SUP_BURST    5 /* restarts within SUP_WINDOW_S before giving up */
#define SUP_WINDOW_S 60
/* a supervisor asked to stop exits within its poll, or once the restart
 * it waits for ends (stack_stop_supervisor) */
#define SUP_STOP_S 60

struct sup_peer {
	unsigned restarts;
	time_t recent[SUP_BURST]; /* times of the last SUP_BURST restarts */
	/* restarts in a row whose start failed (stack_start_peer); 0 after
	 * one that succeeded */
	unsigned failed_starts;
	bool given_up;
	pid_t given_up_pid; /* its pid file's pid when given up on */
	/* restart-peer asked for it: start cached even though unplugged
	 * (a give-up unplugged it); cleared once it is seen up or given up
	 * on again */
	bool wanted;
	/* cached given up on, its redirect not yet removed (requests it
	 * sent still ran at the store): retried every poll */
	bool unplug_pending;
	/* the pid logged as exiting (its port alive only through threads
	 * its leader left), 0 if none: logged once when seen, once when it
	 * ends */
	pid_t exiting_pid;
};

static volatile sig_atomic_t sup_stop;

static void sup_on_signal(int sig)
{
	(void)sig;
	sup_stop = 1;
}

static void sup_path(char *out, size_t cap, const struct stack *st,
		     const char *file)
{
	snprintf(out, cap, "%s/run/%s", st->dir, file);
}

static void sup_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sup_log(const char *fmt, ...)
{
	char when[32];
	time_t now = time(NULL);
	struct tm tm;
	va_list ap;

	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
	fprintf(stderr, "%s supervise: ", when);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void stack_set_cached_off(const struct stack *st, bool off)
{
	char path[PATH_MAX + 32];
	int fd;

	sup_path(path, sizeof(path), st, "cached.off");
	if (!off) {
		unlink(path);
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

bool stack_cached_off(const struct stack *st)
{
	char path[PATH_MAX + 32];

	sup_path(path, sizeof(path), st, "cached.off");
	return !access(path, F_OK);
}

bool stack_pid_is_peer(const struct stack *st, pid_t pid, const char *name)
{
	char path[64], want[PATH_MAX + 64], args[8192];
	size_t n, wl;
	FILE *f;

	if (pid <= 0)
		return false;
	wl = (size_t)snprintf(want, sizeof(want), "--pidfile=%s/run/%s.pid",
			      st->dir, name);
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	n = fread(args, 1, sizeof(args) - 1, f);
	fclose(f);
	args[n] = 0;
	/* NUL-separated arguments: compare each whole */
	for (size_t i = 0; i < n; i += strlen(args + i) + 1)
		if (strlen(args + i) == wl && !memcmp(args + i, want, wl))
			return true;
	return false;
}

bool stack_role_pid_runs(const struct stack *st, pid_t pid, enum stack_role r)
{
	return stack_pid_runs(pid, stack_role_prog(st, r)) &&
	       stack_pid_is_peer(st, pid, stack_role_name(r));
}

bool stack_pid_runs(pid_t pid, const char *prog)
{
	char path[64], comm[32];
	struct xseg_proc_stat ps;
	FILE *f;
	bool same;

	if (pid <= 0 || (kill(pid, 0) && errno == ESRCH))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	same = fgets(comm, sizeof(comm), f) &&
	       !strncmp(comm, prog, strcspn(comm, "\n"));
	fclose(f);
	if (!same)
		return false;
	/* A peer SIGKILLed a moment ago stays a zombie until init reaps
	 * it (slowly on a loaded machine): it is not starting, it is
	 * dead. */
	return !xseg_proc_stat_read(pid, &ps) && !xseg_proc_exited(&ps);
}

static bool sup_down(const struct stack *st, struct xseg *seg,
		     enum stack_role r)
{
	pid_t pid;

	/* alive includes an owner that is exiting (its leader gone, threads
	 * left: xseg_port_info's exiting): the port is still its own and a
	 * new peer could not bind it, so it is waited for until they end
	 * (and logged: sup_note_exiting) */
	if (xseg_port_alive(seg, stack_role_port(r)) == 1)
		return false;
	pid = stack_pidfile(st, stack_role_name(r));
	/* a pid reused by a stranger of the same program is no peer */
	return !stack_role_pid_runs(st, pid, r);
}

/*
 * Log once when r's port is seen alive only through threads its leader
 * left (exiting), and once when that ends. sup_down waits for such a
 * peer (not down), silently before: a thread stuck for good held the
 * restart with nothing in the log to say why (ops22). Called before
 * sup_down, so that the end is logged before the restart it allows.
 */
static void sup_note_exiting(struct xseg *seg, enum stack_role r,
			     struct sup_peer *p)
{
	const char *name = stack_role_name(r);
	struct xseg_port_info pi;
	char why[512];

	if (!xseg_port_info(seg, stack_role_port(r), &pi) && pi.exiting) {
		if (p->exiting_pid == pi.owner_pid)
			return;
		stack_exiting_why(why, sizeof(why), &pi,
				  "then it is dead, and restarted as any dead "
				  "peer");
		sup_log("%s is exiting, not restarted yet: %s", name, why);
		p->exiting_pid = pi.owner_pid;
	} else if (p->exiting_pid) {
		sup_log("%s (pid %d) is no longer exiting: its last thread "
			"ended",
			name, (int)p->exiting_pid);
		p->exiting_pid = 0;
	}
}

static void sup_write_state(const struct stack *st,
			    const struct sup_peer *peers)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 40];
	FILE *f;

	sup_path(path, sizeof(path), st, "supervisor.state");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f)
		return;
	for (int r = 0; r < STACK_NR_ROLES; r++)
		fprintf(f, "%s %u %s\n", stack_role_name(r), peers[r].restarts,
			peers[r].given_up ? "gave-up" : "ok");
	if (fclose(f) || rename(tmp, path))
		unlink(tmp);
}

/* Record a restart of r now; false when r died too often to go on. */
static bool sup_may_restart(struct sup_peer *p, time_t now)
{
	unsigned in_window = 0;

	for (int i = 0; i < SUP_BURST; i++)
		if (p->recent[i] && now - p->recent[i] < SUP_WINDOW_S)
			in_window++;
	if (in_window >= SUP_BURST)
		return false;
	p->recent[p->restarts % SUP_BURST] = now;
	p->restarts++;
	return true;
}

/* Log the write-back losses counted since *seen (by our reap or by any
 * other reclaimer); true if there were any. */
static bool sup_check_losses(struct xseg *seg, uint64_t *seen)
{
	uint64_t now = xseg_writeback_losses(seg);

	if (now == *seen)
		return false;
	sup_log("write-back loss: a dead write-back cache held acknowledged "
		"writes it had not flushed (segment's loss counter %" PRIu64
		" -> %" PRIu64 "); vlmc fails the next FLUSH of the volumes "
		"written since their last one",
		*seen, now);
	*seen = now;
	return true;
}

/* Take a cached given up on out of the path. The call reclaims it
 * first, so a loss it held is counted before requests reach the store
 * directly; while requests it sent still run at the store it keeps the
 * redirect (-EAGAIN, review14 F1) and p->unplug_pending has the next
 * polls try again. */
static void sup_unplug_dead_cached(struct xseg *seg, struct sup_peer *p,
				   uint64_t *losses_seen)
{
	int rc = xseg_clear_path_next(seg, STACK_STORE_PORT);

	sup_check_losses(seg, losses_seen);
	if (!rc) {
		p->unplug_pending = false;
		sup_log("cached unplugged: volumes go to the store directly");
	} else if (rc == -EAGAIN) {
		if (!p->unplug_pending)
			sup_log("cached is not unplugged yet: requests it "
				"sent are still running at the store "
				"(retrying until they are answered)");
		p->unplug_pending = true;
	} else if (rc == -EPERM || rc == -EBUSY) {
		/* a live cached on the port again (restarted by hand:
		 * -EPERM, it leaves the path by itself, or dies), or a
		 * process binding or reclaiming the port (-EBUSY: its owner
		 * word under change) */
		if (!p->unplug_pending)
			sup_log("cached is not unplugged yet: %s port %u "
				"(retrying until %s)",
				rc == -EPERM ? "a cached runs on"
					     : "another process binds or "
					       "reclaims",
				STACK_CACHED_PORT,
				rc == -EPERM ? "it exits" : "that is done");
		p->unplug_pending = true;
	} else {
		p->unplug_pending = false;
		sup_log("cannot unplug cached: %s (volumes fail until "
			"`xsegctl stack unplug-cached`)",
			strerror(-rc));
	}
}

/* Supervise p again as if it had never died: a peer given up on that
 * came back by hand, or that restart-peer asked for. */
static void sup_afresh(struct sup_peer *p)
{
	memset(p->recent, 0, sizeof(p->recent));
	p->failed_starts = 0;
	p->given_up = false;
	p->unplug_pending = false;
}

/* Stop restarting r (why: the rule that fired, for the log); cached is
 * taken out of the path too, so that volumes go to the store. */
static void sup_give_up(const struct stack *st, struct xseg *seg,
			enum stack_role r, struct sup_peer *p,
			uint64_t *losses_seen, const char *why)
{
	const char *name = stack_role_name(r);

	p->given_up = true;
	p->wanted = false;
	p->given_up_pid = stack_pidfile(st, name);
	sup_log("%s %s: giving up on it", name, why);
	/* only the stack's own redirect (the store to cached's port): one
	 * an operator made elsewhere is not the supervisor's (review20b) */
	if (r == STACK_ROLE_CACHED && stack_plugged(seg))
		sup_unplug_dead_cached(seg, p, losses_seen);
}

static void sup_restart(const struct stack *st, struct xseg *seg,
			enum stack_role r, struct sup_peer *p,
			uint64_t *losses_seen)
{
	const char *name = stack_role_name(r);
	char path[PATH_MAX + 32], why[64];
	struct xseg_reap_stats rs = {0};
	struct stat sb;
	bool lost;
	int rc;

	/* fail back what the dead peer held now, not at the next
	 * periodic reap of a live peer (and count a write-back loss it
	 * left before anything is restarted or unplugged) */
	if (xseg_reap(seg, &rs) > 0)
		sup_log("reaped %u port(s), %u request(s) failed back",
			rs.ports_reclaimed, rs.requests_failed);
	lost = sup_check_losses(seg, losses_seen);
	if (!sup_may_restart(p, time(NULL))) {
		snprintf(why, sizeof(why), "died %d times within %d s",
			 SUP_BURST, SUP_WINDOW_S);
		sup_give_up(st, seg, r, p, losses_seen, why);
		return;
	}
	sup_log("%s (port %u) is down; restart %u%s", name, stack_role_port(r),
		p->restarts, lost ? " (after a write-back loss)" : "");
	/* the dead peer's pid file and control socket would make the
	 * start-up wait think the new one is there (or already dead) */
	snprintf(path, sizeof(path), "%s/run/%s.pid", st->dir, name);
	unlink(path);
	if (r == STACK_ROLE_VLMC && !lstat(st->ctl_socket, &sb) &&
	    S_ISSOCK(sb.st_mode))
		unlink(st->ctl_socket);
	rc = stack_start_peer(st, seg, r);
	if (!rc) {
		p->failed_starts = 0;
		sup_log("%s is back (pid %d)", name,
			(int)stack_pidfile(st, name));
		return;
	}
	p->failed_starts++;
	sup_log("%s did not come back: %s%s", name,
		rc == -ECHILD ? "it exited during its start-up" : strerror(-rc),
		p->failed_starts < STACK_SUP_FAILED_STARTS ? " (retrying)"
							   : "");
	if (p->failed_starts >= STACK_SUP_FAILED_STARTS) {
		snprintf(why, sizeof(why), "failed to start %d times in a row",
			 STACK_SUP_FAILED_STARTS);
		sup_give_up(st, seg, r, p, losses_seen, why);
	}
}

static void sup_request_path(char *out, size_t cap, const struct stack *st,
			     enum stack_role r)
{
	snprintf(out, cap, "%s/run/restart-peer.%s", st->dir,
		 stack_role_name(r));
}

int stack_request_restart(const struct stack *st, enum stack_role r, char *path,
			  size_t cap)
{
	int fd;

	sup_request_path(path, cap, st, r);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* restart-peer asked for r: supervise it afresh. The state file is
 * rewritten before the request is removed (stack_request_restart). */
static void sup_take_request(const struct stack *st, enum stack_role r,
			     struct sup_peer *peers)
{
	char path[PATH_MAX + 64];
	struct sup_peer *p = &peers[r];

	sup_request_path(path, sizeof(path), st, r);
	if (access(path, F_OK))
		return;
	sup_log("restart-peer %s: asked again by the operator%s; supervising "
		"it afresh",
		stack_role_name(r), p->given_up ? " after the give-up" : "");
	sup_afresh(p);
	p->given_up_pid = 0;
	p->wanted = true;
	sup_write_state(st, peers);
	unlink(path);
}

/* The segment we watch is still the stack's (not stopped and recreated
 * by someone else meanwhile). */
static bool sup_segment_same(const struct stack *st, ino_t ino)
{
	char path[256];
	struct stat sb;

	snprintf(path, sizeof(path), "/dev/shm/%s", st->segment);
	return !stat(path, &sb) && sb.st_ino == ino;
}

int stack_supervise(struct stack *st)
{
	struct sup_peer peers[STACK_NR_ROLES] = {{0}};
	uint64_t losses_seen;
	struct sigaction sa = {.sa_handler = sup_on_signal};
	char path[PATH_MAX + 32], err[XSEG_ERRBUF_LEN];
	struct xseg *seg;
	struct stat sb;
	FILE *f;

	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	snprintf(path, sizeof(path), "/dev/shm/%s", st->segment);
	if (stat(path, &sb) || xseg_join(st->segment, &seg, err, sizeof(err))) {
		stack_err("supervise: segment %s: not running", st->segment);
		return -ENOENT;
	}
	sup_path(path, sizeof(path), st, "supervisor.pid");
	f = fopen(path, "we");
	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
	sup_write_state(st, peers);
	losses_seen = xseg_writeback_losses(seg);
	sup_log("watching segment %s (store, %s vlmc); write-back losses so "
		"far: %" PRIu64,
		st->segment, st->cached ? "cached," : "", losses_seen);
	while (!sup_stop) {
		if (!sup_segment_same(st, sb.st_ino)) {
			sup_log("segment %s is gone: exiting", st->segment);
			break;
		}
		for (int r = 0; r < STACK_NR_ROLES; r++)
			sup_take_request(st, r, peers);
		for (int r = 0; r < STACK_NR_ROLES && !sup_stop; r++) {
			sup_note_exiting(seg, r, &peers[r]);
			if (!sup_down(st, seg, r)) {
				peers[r].wanted = false;
				/* started again by hand (plug-cached):
				 * supervise it afresh */
				if (peers[r].given_up) {
					sup_afresh(&peers[r]);
					sup_write_state(st, peers);
				}
				continue;
			}
			if (peers[r].given_up) {
				pid_t pid =
				    stack_pidfile(st, stack_role_name(r));

				/* started by hand (plug-cached) since, and
				 * dead before we saw it alive: supervised
				 * again all the same */
				if (!pid || pid == peers[r].given_up_pid) {
					if (peers[r].unplug_pending &&
					    stack_plugged(seg))
						sup_unplug_dead_cached(
						    seg, &peers[r],
						    &losses_seen);
					continue;
				}
				sup_afresh(&peers[r]);
				sup_write_state(st, peers);
			}
			/* read after the death was seen: an unplug removes
			 * the redirect before cached exits */
			if (r == STACK_ROLE_CACHED && !peers[r].wanted &&
			    (!stack_plugged(seg) || stack_cached_off(st)))
				continue;
			/* a teardown (stop, a test's cleanup) kills peers
			 * and then removes the segment: do not race it */
			if (!sup_segment_same(st, sb.st_ino))
				break;
			sup_restart(st, seg, r, &peers[r], &losses_seen);
			sup_write_state(st, peers);
		}
		stack_sleep_ms(SUP_POLL_MS);
	}
	sup_log("stopped");
	sup_path(path, sizeof(path), st, "supervisor.pid");
	unlink(path);
	xseg_leave(seg);
	return 0;
}

int stack_start_supervisor(const struct stack *st)
{
	char bin[PATH_MAX], log[PATH_MAX + 32], dir[PATH_MAX + 8];
	char *argv[] = {"xsegctl", "stack", "supervise", dir, NULL};
	ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);
	int rc;

	if (n < 0)
		return -errno;
	bin[n] = 0;
	snprintf(dir, sizeof(dir), "--dir=%s", st->dir);
	/* an old pid file would make the wait below succeed at once */
	sup_path(log, sizeof(log), st, "supervisor.pid");
	unlink(log);
	sup_path(log, sizeof(log), st, "supervisor.log");
	rc = stack_spawn_detached(bin, argv, log, NULL);
	if (rc)
		return rc;
	for (int i = 0; i < 250; i++) { /* 5 s */
		if (stack_pidfile(st, "supervisor"))
			return 0;
		stack_sleep_ms(20);
	}
	stack_err("the supervisor did not start (see %s)", log);
	return -ETIMEDOUT;
}

/*
 * A restart in progress finishes before the supervisor exits. Its wait for
 * the peer lasts as long as the peer progresses (stack_start_peer), so
 * this one does too: it gives up after start_timeout (and a slack)
 * without progress of a peer that is starting, or after SUP_STOP_S when
 * none is (a fixed 60 s failed `stack stop` during any restart longer
 * than that, such as a store replaying a large journal).
 */
int stack_stop_supervisor(const struct stack *st)
{
	uint64_t limit_ns = stack_start_timeout_ns(st) + STACK_RESTART_SLACK_NS;
	pid_t pid = stack_pidfile(st, "supervisor"), pids[STACK_NR_ROLES];
	char err[XSEG_ERRBUF_LEN], what[96];
	struct stack_progress pg = {0};
	struct xseg *seg;
	unsigned n, none = 0; /* 20 ms steps in a row with nothing starting */
	int rc = 0;

	if (!stack_pid_runs(pid, "xsegctl"))
		return 0;
	/* A stopped supervisor (SIGSTOP, a debugger's detach, a test killed
	 * mid-case: review22s F5) would hold the SIGTERM pending and this
	 * wait would run out: continue it first (harmless if it runs). */
	kill(pid, SIGCONT);
	if (kill(pid, SIGTERM))
		return errno == ESRCH ? 0 : -errno;
	/* what is starting is read from the segment: none without one */
	if (xseg_join(st->segment, &seg, err, sizeof(err)))
		seg = NULL;
	snprintf(what, sizeof(what),
		 "the supervisor (pid %d) to finish a restart", (int)pid);
	while (!(kill(pid, 0) && errno == ESRCH)) {
		n = seg ? stack_starting_pids(st, seg, pids) : 0;
		none = n ? 0 : none + 1;
		stack_progress_sample(&pg, pids, n);
		if (n ? stack_progress_stalled(&pg, limit_ns)
		      : none >= SUP_STOP_S * 50) {
			stack_err("the supervisor (pid %d) did not exit: %s",
				  (int)pid,
				  n ? "the peer it restarts made no progress "
				      "(under a tenth of a CPU, no block I/O) "
				      "for start_timeout"
				    : "nothing it would wait for is starting");
			rc = -ETIMEDOUT;
			break;
		}
		if (n)
			stack_progress_say(&pg, what);
		stack_sleep_ms(20);
	}
	if (seg)
		xseg_leave(seg);
	return rc;
}

struct sup_gave_up_arg {
	const char *role;
	int gave_up;
};

static void sup_find_peer(const char *role, unsigned restarts, bool gave_up,
			  void *arg)
{
	struct sup_gave_up_arg *a = arg;

	(void)restarts;
	if (!strcmp(role, a->role))
		a->gave_up = gave_up;
}

static void sup_read_state(const struct stack *st,
			   void (*fn)(const char *role, unsigned restarts,
				      bool gave_up, void *arg),
			   void *arg);

int stack_supervisor_gave_up(const struct stack *st, enum stack_role r)
{
	struct sup_gave_up_arg a = {stack_role_name(r), -1};

	sup_read_state(st, sup_find_peer, &a);
	return a.gave_up;
}

/* Call fn for each peer line of the supervisor's state file. */
static void sup_read_state(const struct stack *st,
			   void (*fn)(const char *role, unsigned restarts,
				      bool gave_up, void *arg),
			   void *arg)
{
	char path[PATH_MAX + 32], *text, *line, *save;

	sup_path(path, sizeof(path), st, "supervisor.state");
	if (stack_read_file(path, &text))
		return;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char name[16], state[16];
		unsigned n;

		if (sscanf(line, "%15s %u %15s", name, &n, state) == 3)
			fn(name, n, strcmp(state, "ok") != 0, arg);
	}
	free(text);
}

static void sup_print_peer(const char *role, unsigned restarts, bool gave_up,
			   void *arg)
{
	const char **sep = arg;

	printf("%s%s %u%s", *sep, role, restarts, gave_up ? " (gave up)" : "");
	*sep = ", ";
}

static void sup_print_peer_json(const char *role, unsigned restarts,
				bool gave_up, void *arg)
{
	const char **sep = arg;

	/* role names come from our own table: no escaping needed */
	printf("%s{\"role\":\"%s\",\"restarts\":%u,\"gave_up\":%s}", *sep, role,
	       restarts, gave_up ? "true" : "false");
	*sep = ",";
}

void stack_print_supervisor(const struct stack *st)
{
	pid_t pid = stack_pidfile(st, "supervisor");
	const char *sep = " ";

	if (!stack_pid_runs(pid, "xsegctl")) {
		printf("supervisor: not running%s\n",
		       st->supervise ? " (dead peers are not restarted; "
				       "'xsegctl stack supervise' runs it)"
				     : "");
		return;
	}
	printf("supervisor: pid %d, restarts:", (int)pid);
	sup_read_state(st, sup_print_peer, &sep);
	putchar('\n');
}

void stack_print_supervisor_json(const struct stack *st)
{
	pid_t pid = stack_pidfile(st, "supervisor");
	bool running = stack_pid_runs(pid, "xsegctl");
	const char *sep = "";

	printf("{\"pid\":%d,\"running\":%s,\"peers\":[", running ? (int)pid : 0,
	       running ? "true" : "false");
	if (running)
		sup_read_state(st, sup_print_peer_json, &sep);
	printf("]}");
}
