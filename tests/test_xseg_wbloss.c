/* SPDX-License-Identifier: MIT */
/*
 * Write-back losses (xseg.h "Write-back losses"): a port whose owner holds
 * acknowledged, unflushed data (a nonzero unflushed count) and dies, or
 * gives the port up, is counted in the segment's loss counter exactly once
 * by whoever reclaims it, before anybody sees the reclaim's effects, and
 * no path takes such a port out of a redirect uncounted.
 *
 * Victims are forked children that join the segment, bind a port, set its
 * count and SIGKILL themselves, so the test knows the count a dead owner
 * left without any timing. Loss lines go to stderr; the tests that check
 * them redirect stderr to a temporary file around the reclaim.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xseg.h"
#include "xseg_internal.h"
#include "xseg_testutil.h"

#define VICTIM_PORT 1
#define CLIENT_PORT 0
#define NR_REQS	    64

static struct xseg *mkseg(const char *tag, const char **namep)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	const char *name = xtu_segname(tag);
	int rc;

	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = 4;
	cfg.nr_requests = NR_REQS;
	cfg.free_cache = 8;
	rc = xseg_create(name, &cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create: %s", err);
	*namep = name;
	return seg;
}

struct victim_arg {
	const char *name;
	uint32_t port;
	int64_t adds[4]; /* applied in order; 0 ends the list */
	int ready_fd;	 /* -1: die at once; else write a byte, then wait */
	int go_fd;	 /* read a byte before dying (with ready_fd) */
};

/* Join, bind, apply the adds, then die by SIGKILL (optionally after a
 * hand-shake with the parent, which submits requests meanwhile). */
static int victim(void *p)
{
	struct victim_arg *a = p;
	struct xseg *seg;
	char b = 0;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	if (xseg_bind_port(seg, a->port, "wbvictim"))
		return 2;
	for (int i = 0; i < 4 && a->adds[i]; i++)
		xseg_port_unflushed_add(seg, a->port, a->adds[i]);
	if (a->ready_fd >= 0) {
		if (write(a->ready_fd, &b, 1) != 1 ||
		    read(a->go_fd, &b, 1) != 1)
			return 3;
	}
	raise(SIGKILL);
	return 4;
}

/* A victim on port that left count unflushed units behind, dead. */
static void dead_victim(const char *name, uint32_t port, int64_t a0, int64_t a1)
{
	struct victim_arg a = {name, port, {a0, a1, 0, 0}, -1, -1};
	pid_t pid = xtu_fork(victim, &a);

	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
}

/* A child run by fn(a) that writes a byte to a->ready_fd once set up and
 * reads one from a->go_fd before going on (dying, for a victim). */
struct handshake {
	pid_t pid;
	int ready[2], go[2];
};

/* Fork fn(a) with a's hand-shake descriptors and wait until it is ready. */
static void handshake_start(struct handshake *h, int (*fn)(void *),
			    struct victim_arg *a)
{
	char b;

	ck_assert_int_eq(pipe(h->ready), 0);
	ck_assert_int_eq(pipe(h->go), 0);
	a->ready_fd = h->ready[1];
	a->go_fd = h->go[0];
	h->pid = xtu_fork(fn, a);
	ck_assert_int_gt(h->pid, 0);
	ck_assert_int_eq(read(h->ready[0], &b, 1), 1);
}

/* Let the child go on and wait for it to end with status want. */
static void handshake_finish(struct handshake *h, int want)
{
	char b = 0;

	ck_assert_int_eq(write(h->go[1], &b, 1), 1);
	ck_assert_int_eq(xtu_wait(h->pid, 10000), want);
	close(h->ready[0]);
	close(h->ready[1]);
	close(h->go[0]);
	close(h->go[1]);
}

static uint64_t port_unflushed(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_port_info(seg, port, &pi), 0);
	return pi.unflushed;
}

static bool port_bound(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_port_info(seg, port, &pi), 0);
	return pi.bound;
}

/* ---------------------------------------------------------------------- */

START_TEST(test_reap_counts_dead_unflushed)
{
	const char *name;
	struct xseg *seg = mkseg("reap", &name);
	struct xseg_reap_stats rs = {0};
	struct xseg_info info;
	struct xtu_captured cap;
	char *log, want[64];

	dead_victim(name, VICTIM_PORT, 5, 0);
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 5);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);
	xtu_capture_start(&cap);
	ck_assert_int_eq(xseg_reap(seg, &rs), 1);
	log = xtu_capture_end(&cap);
	ck_assert_uint_eq(rs.writeback_losses, 1);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 0);
	xseg_info(seg, &info);
	ck_assert_uint_eq(info.writeback_losses, 1);
	/* one line naming the port, the peer type and the units */
	ck_assert_msg(strstr(log, "port 1 (wbvictim, pid ") != NULL, "%s", log);
	ck_assert_msg(strstr(log, " 5 unflushed") != NULL, "%s", log);
	snprintf(want, sizeof(want), "write-back loss %d\n", 1);
	ck_assert_msg(strstr(log, want) != NULL, "%s", log);
	ck_assert_ptr_eq(strchr(log, '\n'), log + strlen(log) - 1);
	free(log);
	/* nothing left to count: a second reap changes nothing */
	ck_assert_int_eq(xseg_reap(seg, &rs), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	/* a later death is a second loss */
	dead_victim(name, VICTIM_PORT, 1, 0);
	ck_assert_int_eq(xseg_reap(seg, &rs), 1);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 2);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_flushed_back_to_zero_is_no_loss)
{
	const char *name;
	struct xseg *seg = mkseg("zero", &name);
	struct xseg_reap_stats rs = {0};

	dead_victim(name, VICTIM_PORT, 3, -3);
	ck_assert_int_eq(xseg_reap(seg, &rs), 1);
	ck_assert_uint_eq(rs.writeback_losses, 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);
	/* and a dead owner that never counted anything */
	dead_victim(name, VICTIM_PORT, 0, 0);
	ck_assert_int_eq(xseg_reap(seg, &rs), 1);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_bind_over_dead_owner_counts)
{
	const char *name;
	struct xseg *seg = mkseg("bind", &name);

	dead_victim(name, VICTIM_PORT, 7, 0);
	ck_assert_int_eq(xseg_bind_port(seg, VICTIM_PORT, "heir"), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	/* the new owner starts from zero */
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 0);
	ck_assert_int_eq(xseg_release_port(seg, VICTIM_PORT), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_release_with_unflushed_counts)
{
	const char *name;
	struct xseg *seg = mkseg("release", &name);
	uint32_t dyn;

	/* a live owner giving up its port holding data: a loss too */
	ck_assert_int_eq(xseg_bind_port(seg, VICTIM_PORT, "giver"), 0);
	xseg_port_unflushed_add(seg, VICTIM_PORT, 2);
	ck_assert_int_eq(xseg_release_port(seg, VICTIM_PORT), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 0);
	/* a clean one is not */
	ck_assert_int_eq(xseg_bind_port(seg, VICTIM_PORT, "giver"), 0);
	xseg_port_unflushed_add(seg, VICTIM_PORT, 4);
	xseg_port_unflushed_add(seg, VICTIM_PORT, -4);
	ck_assert_int_eq(xseg_release_port(seg, VICTIM_PORT), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	/* a late subtract after a release took the count (a worker that
	 * outlived a timed-out drain) leaves the word negative: the next
	 * bind clears it without a false loss (review10 N1) */
	xseg_port_unflushed_add(seg, VICTIM_PORT, -1);
	ck_assert_int_eq(xseg_bind_port(seg, VICTIM_PORT, "giver"), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 0);
	ck_assert_int_eq(xseg_release_port(seg, VICTIM_PORT), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	/* dynamic ports too */
	ck_assert_int_eq(xseg_alloc_port(seg, "giver", &dyn), 0);
	xseg_port_unflushed_add(seg, dyn, 1);
	ck_assert_int_eq(xseg_release_port(seg, dyn), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 2);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_bad_inputs_change_nothing)
{
	const char *name;
	struct xseg *seg = mkseg("bad", &name);
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_bind_port(seg, VICTIM_PORT, "x"), 0);
	xseg_port_unflushed_add(seg, xseg_nr_ports(seg), 5);
	xseg_port_unflushed_add(seg, XSEG_NOPORT, 5);
	for (uint32_t p = 0; p < xseg_nr_ports(seg); p++)
		ck_assert_uint_eq(port_unflushed(seg, p), 0);
	ck_assert_int_eq(xseg_port_info(seg, xseg_nr_ports(seg), &pi), -EINVAL);
	/* a release refused (not ours) counts nothing and keeps the count */
	xseg_port_unflushed_add(seg, VICTIM_PORT, 1);
	ck_assert_int_eq(xseg_release_port(seg, 2), -EPERM);
	ck_assert_int_eq(xseg_clear_path_next(seg, xseg_nr_ports(seg)),
			 -EINVAL);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 1);
	xseg_port_unflushed_add(seg, VICTIM_PORT, -1);
	ck_assert_int_eq(xseg_release_port(seg, VICTIM_PORT), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);
	xseg_leave(seg);
}
END_TEST

/* Several processes reap the same dead port at once: one loss. */
struct reaper_arg {
	const char *name;
	int go_fd;
};

static int reaper(void *p)
{
	struct reaper_arg *a = p;
	struct xseg *seg;
	char b;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	if (read(a->go_fd, &b, 1) != 1)
		return 2;
	for (int i = 0; i < 4; i++)
		if (xseg_reap(seg, NULL) < 0)
			return 3;
	xseg_leave(seg);
	return 0;
}

#define NR_REAPERS 4
#define ROUNDS	   20

START_TEST(test_concurrent_reapers_count_once)
{
	const char *name;
	struct xseg *seg = mkseg("conc", &name);
	struct reaper_arg ra;
	pid_t pids[NR_REAPERS];
	int go[2];
	char b[NR_REAPERS] = {0};

	for (unsigned r = 0; r < ROUNDS; r++) {
		/* two dead ports each round: both counted, once each */
		dead_victim(name, VICTIM_PORT, 1 + r, 0);
		dead_victim(name, 2, 9, 0);
		ck_assert_int_eq(pipe(go), 0);
		ra = (struct reaper_arg){name, go[0]};
		for (int i = 0; i < NR_REAPERS; i++) {
			pids[i] = xtu_fork(reaper, &ra);
			ck_assert_int_gt(pids[i], 0);
		}
		/* all joined and blocked on the pipe: released together */
		ck_assert_int_eq(write(go[1], b, NR_REAPERS), NR_REAPERS);
		for (int i = 0; i < NR_REAPERS; i++)
			ck_assert_int_eq(xtu_wait(pids[i], 30000), 0);
		close(go[0]);
		close(go[1]);
		ck_assert_uint_eq(xseg_writeback_losses(seg), 2 * (r + 1));
		ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 0);
		ck_assert_uint_eq(port_unflushed(seg, 2), 0);
		ck_assert(!port_bound(seg, VICTIM_PORT));
		ck_assert(!port_bound(seg, 2));
	}
	xseg_leave(seg);
}
END_TEST

/* A request queued on the dead port is failed back only after the loss
 * was counted: the client that sees ECONNRESET sees the counter moved. */
static int lone_reaper(void *p)
{
	struct xseg *seg;

	if (xseg_join(p, &seg, NULL, 0))
		return 1;
	if (xseg_reap(seg, NULL) != 1)
		return 2;
	xseg_leave(seg);
	return 0;
}

START_TEST(test_failed_back_after_count)
{
	const char *name;
	struct xseg *seg = mkseg("order", &name);
	struct xseg_request *req, *got = NULL;
	struct victim_arg a = {name, VICTIM_PORT, {3, 0, 0, 0}, -1, -1};
	struct handshake h;
	pid_t rp;

	handshake_start(&h, victim, &a);
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT_PORT, "client"), 0);
	ck_assert_int_eq(xseg_get_request(seg, CLIENT_PORT, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_FLUSH;
	ck_assert_int_eq(xseg_submit(seg, req, VICTIM_PORT), 0);
	handshake_finish(&h, 128 + SIGKILL);
	rp = xtu_fork(lone_reaper, (void *)name);
	ck_assert_int_gt(rp, 0);
	/* polled without xseg_wait (which would reap itself) */
	for (uint64_t end = xtu_now_ms() + 20000; !got;) {
		if (xseg_receive(seg, CLIENT_PORT, &got) == 0)
			break;
		ck_assert_msg(xtu_now_ms() < end, "no reply");
		usleep(200);
	}
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_ptr_eq(got, req);
	ck_assert_int_eq(got->error, ECONNRESET);
	ck_assert_int_eq(xtu_wait(rp, 10000), 0);
	ck_assert_int_eq(xseg_put_request(seg, got), 0);
	xseg_leave(seg);
}
END_TEST

/* Unredirecting from a dead write-back port counts it first. */
START_TEST(test_clear_path_next_counts_dead_target)
{
	const char *name;
	struct xseg *seg = mkseg("unredir", &name);
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	dead_victim(name, VICTIM_PORT, 4, 0);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), 0);
	/* counted before the call returned, and the port reclaimed */
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_int_eq(xseg_get_path_next(seg, 3), XSEG_NOPORT);
	ck_assert_int_eq(xseg_port_info(seg, VICTIM_PORT, &pi), 0);
	ck_assert(!pi.bound);
	ck_assert_uint_eq(pi.unflushed, 0);
	/* nothing more for a reaper to count */
	ck_assert_int_eq(xseg_reap(seg, NULL), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);

	/* a dead target with nothing unflushed: reclaimed, no loss */
	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	dead_victim(name, VICTIM_PORT, 0, 0);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), 0);
	ck_assert(!port_bound(seg, VICTIM_PORT));
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);

	/* a live target holding unflushed data is not taken out of the
	 * path (review10 F2): -EBUSY, redirect, port and count kept; once
	 * clean (its owner flushed) it may go */
	ck_assert_int_eq(xseg_bind_port(seg, VICTIM_PORT, "live"), 0);
	xseg_port_unflushed_add(seg, VICTIM_PORT, 2);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), -EBUSY);
	ck_assert_int_eq(xseg_get_path_next(seg, 3), VICTIM_PORT);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 2);
	xseg_port_unflushed_add(seg, VICTIM_PORT, -2);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), 0);
	ck_assert_int_eq(xseg_get_path_next(seg, 3), XSEG_NOPORT);
	ck_assert_int_eq(xseg_release_port(seg, VICTIM_PORT), 0);
	/* no redirect at all: nothing to look at */
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), 0);
	xseg_leave(seg);
}
END_TEST

/* Replacing a redirect takes the old target out of the path as clearing
 * it does: a dead write-back target is counted first (review9 R9-5(c)). */
START_TEST(test_set_path_next_replacing_counts_dead_target)
{
	const char *name;
	struct xseg *seg = mkseg("replace", &name);

	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	dead_victim(name, VICTIM_PORT, 6, 0);
	/* the same target again: it stays in the path, nothing reclaimed */
	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	ck_assert(port_bound(seg, VICTIM_PORT));
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);
	/* another target: the dead one is counted before the call returns */
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 2), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), 2);
	ck_assert(!port_bound(seg, VICTIM_PORT));
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 0);
	ck_assert_int_eq(xseg_reap(seg, NULL), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);

	/* a live old target holding unflushed data is not replaced
	 * (review10 F2); once clean it is */
	ck_assert_int_eq(xseg_bind_port(seg, VICTIM_PORT, "live"), 0);
	xseg_port_unflushed_add(seg, VICTIM_PORT, 2);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 2), -EBUSY);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), VICTIM_PORT);
	ck_assert_uint_eq(port_unflushed(seg, VICTIM_PORT), 2);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	xseg_port_unflushed_add(seg, VICTIM_PORT, -2);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 2), 0);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), 2);
	ck_assert_int_eq(xseg_release_port(seg, VICTIM_PORT), 0);

	/* bad input is refused before anything is looked at or changed */
	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	dead_victim(name, VICTIM_PORT, 1, 0);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 3), -EINVAL);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, xseg_nr_ports(seg)),
			 -EINVAL);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), VICTIM_PORT);
	ck_assert(port_bound(seg, VICTIM_PORT));
	ck_assert_uint_eq(xseg_writeback_losses(seg), 1);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 2), 0);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 2);
	xseg_leave(seg);
}
END_TEST

/* A target being reclaimed by another live process: wait for it; if it
 * does not finish, -EBUSY with the redirect kept. */
static int sleeper(void *p)
{
	struct victim_arg *a = p;
	struct xseg *seg;
	char b = 0;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	if (xseg_bind_port(seg, a->port, "sleeper"))
		return 2;
	if (write(a->ready_fd, &b, 1) != 1 || read(a->go_fd, &b, 1) != 1)
		return 3;
	return 0;
}

START_TEST(test_clear_path_next_busy_keeps_redirect)
{
	const char *name;
	struct xseg *seg = mkseg("busy", &name);
	struct victim_arg a = {name, VICTIM_PORT, {0}, -1, -1};
	struct handshake h;
	uint64_t *ownerp, o;

	handshake_start(&h, sleeper, &a);
	/* pretend the live child is in the middle of a reclaim */
	ownerp = &seg->ports[VICTIM_PORT].port->owner;
	o = __atomic_fetch_or(ownerp, XSEG_OWNER_RECLAIM, __ATOMIC_SEQ_CST);
	ck_assert_uint_ne(o, 0);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), -EBUSY);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), VICTIM_PORT);
	/* replacing it waits the same way and keeps the old redirect */
	ck_assert_int_eq(xseg_set_path_next(seg, 3, 2), -EBUSY);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), VICTIM_PORT);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);
	__atomic_store_n(ownerp, o, __ATOMIC_SEQ_CST);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), 0);
	handshake_finish(&h, 0);
	xseg_leave(seg);
}
END_TEST

/* A victim that sent a request to port STORE_PORT (which the parent
 * holds accepted and unanswered), then dies when told. */
#define STORE_PORT 2

static int sender(void *p)
{
	struct victim_arg *a = p;
	struct xseg_request *req;
	struct xseg *seg;
	char b = 0;

	if (xseg_join(a->name, &seg, NULL, 0))
		return 1;
	if (xseg_bind_port(seg, a->port, "sender"))
		return 2;
	if (xseg_get_request(seg, a->port, &req) ||
	    xseg_prep_request(seg, req, 3, 0))
		return 3;
	/* a DELETE: a request that changes data (a FLUSH or a READ run
	 * late changes nothing, and does not hold a port back: xseg.h
	 * xseg_bind_port) */
	memcpy(xseg_request_target(req), "obj", 3);
	req->op = XSEG_OP_DELETE;
	if (xseg_submit(seg, req, STORE_PORT))
		return 4;
	if (write(a->ready_fd, &b, 1) != 1 || read(a->go_fd, &b, 1) != 1)
		return 5;
	raise(SIGKILL);
	return 6;
}

/* Taking a dead target out of the path while a request it sent is still
 * accepted and unanswered elsewhere would let a newer request, now sent
 * past it, run first (a dead cached's DELETE landing after a write that
 * was flushed later, review14 F1): the redirect stays (-EAGAIN, logged)
 * until that request is answered. Fails on the old code, which cleared
 * the redirect at once. */
START_TEST(test_redirect_waits_for_dead_targets_requests)
{
	const char *name;
	struct xseg *seg = mkseg("orphan", &name);
	struct xseg_request *held = NULL;
	struct xtu_captured cap;
	struct victim_arg a = {name, VICTIM_PORT, {0}, -1, -1};
	struct handshake h;
	char *log;

	ck_assert_int_eq(xseg_bind_port(seg, STORE_PORT, "store"), 0);
	handshake_start(&h, sender, &a);
	for (uint64_t end = xtu_now_ms() + 20000; !held;) {
		if (xseg_accept(seg, STORE_PORT, &held) == 0)
			break;
		ck_assert_msg(xtu_now_ms() < end, "the request never came");
		usleep(200);
	}
	ck_assert_int_eq(xseg_set_path_next(seg, 3, VICTIM_PORT), 0);
	handshake_finish(&h, 128 + SIGKILL);

	xtu_capture_start(&cap);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), -EAGAIN);
	log = xtu_capture_end(&cap);
	ck_assert_msg(strstr(log, "port 1: 1 request(s) sent by its previous "
				  "owner still accepted and unanswered (e.g. "
				  "by port 2, store, pid ") != NULL,
		      "%s", log);
	ck_assert_msg(strstr(log, "the redirect to it stays") != NULL, "%s",
		      log);
	free(log);
	/* the dead target was reclaimed, the redirect kept; replacing it is
	 * refused alike */
	ck_assert(!port_bound(seg, VICTIM_PORT));
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), VICTIM_PORT);
	ck_assert_int_eq(xseg_set_path_next(seg, 3, STORE_PORT), -EAGAIN);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), VICTIM_PORT);
	ck_assert_uint_eq(xseg_writeback_losses(seg), 0);

	/* answered: nothing of the dead target can run any more */
	ck_assert_int_eq(xseg_respond(seg, held, 0), 0);
	ck_assert_int_eq(xseg_clear_path_next(seg, 3), 0);
	ck_assert_uint_eq(xseg_get_path_next(seg, 3), XSEG_NOPORT);
	ck_assert_int_eq(xseg_reap(seg, NULL), 0);
	ck_assert_int_eq(xseg_release_port(seg, STORE_PORT), 0);
	xseg_leave(seg);
}
END_TEST

static Suite *wbloss_suite(void)
{
	Suite *s = suite_create("xseg_wbloss");
	TCase *tc = tcase_create("wbloss");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reap_counts_dead_unflushed);
	tcase_add_test(tc, test_flushed_back_to_zero_is_no_loss);
	tcase_add_test(tc, test_bind_over_dead_owner_counts);
	tcase_add_test(tc, test_release_with_unflushed_counts);
	tcase_add_test(tc, test_bad_inputs_change_nothing);
	tcase_add_test(tc, test_concurrent_reapers_count_once);
	tcase_add_test(tc, test_failed_back_after_count);
	tcase_add_test(tc, test_clear_path_next_counts_dead_target);
	tcase_add_test(tc, test_set_path_next_replacing_counts_dead_target);
	tcase_add_test(tc, test_clear_path_next_busy_keeps_redirect);
	tcase_add_test(tc, test_redirect_waits_for_dead_targets_requests);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	xtu_init();
	return xtu_run_suite(wbloss_suite());
}
