/* SPDX-License-Identifier: MIT */
/*
 * A peer restarted on a draining port (xseg.h xseg_bind_port, -EAGAIN:
 * its dead predecessor's request is still held by a live server) waits
 * for the request to be answered and then binds, instead of exiting; and
 * SIGTERM while it waits ends it. peers/peer.c peer_bind.
 *
 * The test process is the server: it holds the dead client's request, so
 * it decides when the wait ends (no timing; the bounded waits below are
 * for events and only fail a test that would otherwise hang).
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_peer_run.h"
#include "xseg.h"
#include "xseg_testutil.h"

#define PEER_PORT   1 /* the dead client's port, then noop's */
#define SERVER_PORT 2

struct dead_client {
	const char *name;
	int ready_fd;
};

/* Bind PEER_PORT, submit one WRITE to SERVER_PORT, say so, die. */
static int dead_client(void *p)
{
	struct dead_client *a = p;
	struct xseg_request *req;
	struct xseg *seg;
	char b = 0;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, PEER_PORT, "fclient") ||
	    xseg_get_request(seg, PEER_PORT, &req) ||
	    xseg_prep_request(seg, req, 3, 512))
		return 1;
	memcpy(xseg_request_target(req), "obj", 3);
	req->op = XSEG_OP_WRITE;
	req->size = 512;
	if (xseg_submit(seg, req, SERVER_PORT) ||
	    write(a->ready_fd, &b, 1) != 1)
		return 2;
	raise(SIGKILL);
	return 3;
}

/* The segment with the server bound and the dead client's request
 * accepted and held in *held. */
static struct xseg *draining_segment(const char *tag, const char **namep,
				     struct xseg_request **held)
{
	struct xseg *seg;
	struct dead_client a;
	int fds[2];
	pid_t pid;
	char b;

	*namep = tpr_segment(tag, &seg);
	ck_assert_int_eq(xseg_bind_port(seg, SERVER_PORT, "fserver"), 0);
	ck_assert_int_eq(pipe(fds), 0);
	a = (struct dead_client){*namep, fds[1]};
	pid = xtu_fork(dead_client, &a);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(read(fds[0], &b, 1), 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	close(fds[0]);
	close(fds[1]);
	*held = NULL;
	ck_assert_int_eq(xseg_accept(seg, SERVER_PORT, held), 0);
	ck_assert_uint_eq((*held)->src, PEER_PORT);
	return seg;
}

struct log_wait {
	const char *path;
	const char *needle;
};

static bool log_has(void *p)
{
	struct log_wait *w = p;
	char *s = tpr_slurp(w->path);
	bool found = strstr(s, w->needle) != NULL;

	free(s);
	return found;
}

static const char *const waiting_line =
    "port 1: the previous owner's requests are still served";

START_TEST(test_restart_waits_then_binds)
{
	struct xseg_request *held;
	struct xseg_port_info pi;
	const char *name;
	struct xseg *seg = draining_segment("pfence", &name, &held);
	const char *log = tpr_tmpfile("pfence.log");
	const char *argv[] = {"noop", "-g", name, "-p", "1", NULL};
	struct log_wait w = {log, waiting_line};
	pid_t pid = tpr_start(argv, log);

	/* noop says it waits (it was refused -EAGAIN), is still running,
	 * and has not started serving (while a bind call waits inside
	 * xseg, the port may show it as the claimant) */
	ck_assert_msg(xtu_wait_until(log_has, &w, 30000) == 0, "%s",
		      tpr_slurp(log));
	ck_assert_int_eq(xtu_try_wait(pid), -EAGAIN);
	w.needle = "serving segment";
	ck_assert(!log_has(&w));
	/* the server answers the dead client's write: noop binds */
	ck_assert_int_eq(xseg_respond(seg, held, 0), 0);
	ck_assert_int_eq(tpr_wait_port(seg, PEER_PORT, 30000), 0);
	ck_assert_int_eq(xseg_port_info(seg, PEER_PORT, &pi), 0);
	ck_assert_int_eq(pi.owner_pid, pid);
	ck_assert_int_eq(xtu_kill(pid, SIGTERM), 0);
	ck_assert_int_eq(xtu_wait(pid, 30000), 0);
	ck_assert_int_eq(xseg_release_port(seg, SERVER_PORT), 0);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_sigterm_while_waiting)
{
	struct xseg_request *held;
	const char *name;
	struct xseg *seg = draining_segment("pfterm", &name, &held);
	const char *log = tpr_tmpfile("pfterm.log");
	const char *argv[] = {"noop", "-g", name, "-p", "1", NULL};
	struct log_wait w = {log, waiting_line};
	pid_t pid = tpr_start(argv, log);
	int status;

	ck_assert_msg(xtu_wait_until(log_has, &w, 30000) == 0, "%s",
		      tpr_slurp(log));
	ck_assert_int_eq(xtu_kill(pid, SIGTERM), 0);
	status = xtu_wait(pid, 30000);
	/* it never bound: a start-up failure, not a hang or a crash */
	ck_assert_msg(status == 1, "noop exit status %d: %s", status,
		      tpr_slurp(log));
	ck_assert_int_eq(xseg_respond(seg, held, 0), 0);
	ck_assert_int_eq(xseg_release_port(seg, SERVER_PORT), 0);
	xseg_leave(seg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peer_fence");
	TCase *tc = tcase_create("core");

	xtu_init(); /* segments named for this run, unlinked at its end */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_restart_waits_then_binds);
	tcase_add_test(tc, test_sigterm_while_waiting);
	suite_add_tcase(s, tc);
	return xtu_run_suite(s);
}
