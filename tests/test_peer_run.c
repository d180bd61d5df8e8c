/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the tools tests: see test_peer_run.h.
 */
#include "test_peer_run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_tmp.h"
#include "xseg_testutil.h"

char *tpr_bin(const char *name)
{
	const char *dir = getenv("AC_BIN_DIR");
	char *path;

	if (!dir)
		dir = ".";
	if (asprintf(&path, "%s/%s", dir, name) < 0)
		abort();
	return path;
}

static char **tpr_argv(const char *const argv[])
{
	size_t n = 0;
	char **v;

	while (argv[n])
		n++;
	v = calloc(n + 1, sizeof(*v));
	if (!v)
		abort();
	/* copies: the caller's strings may live in memory a forked child
	 * reuses (xseg_testutil resets its name registry in children) */
	v[0] = tpr_bin(argv[0]);
	for (size_t i = 1; i < n; i++)
		if (!(v[i] = strdup(argv[i])))
			abort();
	return v;
}

static void tpr_argv_free(char **v)
{
	for (size_t i = 0; v[i]; i++)
		free(v[i]);
	free(v);
}

struct tpr_buf {
	char *data;
	size_t len, cap;
};

static void tpr_buf_add(struct tpr_buf *b, const char *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->data = realloc(b->data, b->cap);
		if (!b->data)
			abort();
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

int tpr_run(const char *const argv[], char **out, char **err,
	    uint64_t timeout_ms)
{
	struct tpr_buf bufs[2] = {{0}, {0}};
	int pout[2], perr[2], status;
	uint64_t deadline = xtu_now_ms() + timeout_ms;
	char **v = tpr_argv(argv);
	bool timed_out = false;
	pid_t pid;

	tpr_buf_add(&bufs[0], "", 0);
	tpr_buf_add(&bufs[1], "", 0);
	if (pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC))
		abort();
	pid = fork();
	if (pid < 0)
		abort();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pout[1], STDOUT_FILENO);
		dup2(perr[1], STDERR_FILENO);
		close(pout[0]);
		close(perr[0]);
		execv(v[0], v);
		fprintf(stderr, "exec %s: %s\n", v[0], strerror(errno));
		_exit(127);
	}
	close(pout[1]);
	close(perr[1]);
	struct pollfd pf[2] = {{pout[0], POLLIN, 0}, {perr[0], POLLIN, 0}};
	int open_fds = 2;
	while (open_fds) {
		uint64_t now = xtu_now_ms();
		if (now >= deadline) {
			timed_out = true;
			kill(pid, SIGKILL);
			break;
		}
		int n = poll(pf, 2, (int)(deadline - now));
		if (n < 0 && errno == EINTR)
			continue;
		for (int i = 0; i < 2; i++) {
			char buf[4096];
			ssize_t r;

			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			r = read(pf[i].fd, buf, sizeof(buf));
			if (r > 0) {
				tpr_buf_add(&bufs[i], buf, (size_t)r);
			} else {
				close(pf[i].fd);
				pf[i].fd = -1;
				open_fds--;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (pf[i].fd >= 0)
			close(pf[i].fd);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	tpr_argv_free(v);
	if (out)
		*out = bufs[0].data;
	else
		free(bufs[0].data);
	if (err)
		*err = bufs[1].data;
	else
		free(bufs[1].data);
	if (timed_out)
		return -ETIMEDOUT;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

struct tpr_start_args {
	char **argv;
	const char *log_path;
};

static int tpr_start_child(void *arg)
{
	struct tpr_start_args *a = arg;
	int fd = open(a->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);

	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	execv(a->argv[0], a->argv);
	fprintf(stderr, "exec %s: %s\n", a->argv[0], strerror(errno));
	return 127;
}

pid_t tpr_start(const char *const argv[], const char *log_path)
{
	struct tpr_start_args a = {tpr_argv(argv), log_path};
	pid_t pid = xtu_fork(tpr_start_child, &a);

	tpr_argv_free(a.argv);
	return pid;
}

char *tpr_slurp(const char *path)
{
	struct tpr_buf b = {0};
	FILE *f = fopen(path, "r");
	char buf[4096];
	size_t n;

	tpr_buf_add(&b, "", 0);
	if (!f)
		return b.data;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		tpr_buf_add(&b, buf, n);
	fclose(f);
	return b.data;
}

/* Every name tpr_tmpfile handed out: the strings are this table's, never
 * the callers' (review-ctlpar F5: callers freed names the table still
 * held). Never freed: reachable until exit. The files themselves are
 * removed with the scratch root (test_tmp.h), whatever the outcome of the
 * test that made them. */
static char **tpr_tmp_names;
static size_t tpr_tmp_nr, tpr_tmp_cap;

const char *tpr_tmpfile(const char *tag)
{
	static unsigned seq;
	char *path;

	if (tpr_tmp_nr == tpr_tmp_cap) {
		tpr_tmp_cap = tpr_tmp_cap ? 2 * tpr_tmp_cap : 64;
		tpr_tmp_names = realloc(tpr_tmp_names,
					tpr_tmp_cap * sizeof(*tpr_tmp_names));
		if (!tpr_tmp_names)
			abort();
	}
	/* pid and sequence: a forked child inherits seq, not the pid */
	if (asprintf(&path, "%s/tpr-%s-%ld-%u", ttmp_root(), tag,
		     (long)getpid(), seq++) < 0)
		abort();
	tpr_tmp_names[tpr_tmp_nr++] = path;
	return path;
}

int tpr_wait_port(struct xseg *seg, uint32_t port, uint64_t timeout_ms)
{
	uint64_t deadline = xtu_now_ms() + timeout_ms;

	while (xtu_now_ms() < deadline) {
		struct xseg_port_info pi;
		/* not while the binder still cleans the port up: a request
		 * submitted then is failed back with ECONNRESET */
		if (xseg_port_info(seg, port, &pi) == 0 && pi.bound &&
		    pi.alive && !pi.reclaiming)
			return 0;
		usleep(2000);
	}
	return -ETIMEDOUT;
}

int tpr_wait_port_free(struct xseg *seg, uint32_t port, uint64_t timeout_ms)
{
	uint64_t deadline = xtu_now_ms() + timeout_ms;

	while (xtu_now_ms() < deadline) {
		struct xseg_port_info pi;
		if (xseg_port_info(seg, port, &pi) == 0 && !pi.bound &&
		    !pi.reclaiming)
			return 0;
		usleep(2000);
	}
	return -ETIMEDOUT;
}

const char *tpr_segment(const char *tag, struct xseg **seg)
{
	const char *name = xtu_segname(tag);
	struct xseg_config cfg;
	char errbuf[XSEG_ERRBUF_LEN];

	xseg_config_default(&cfg);
	cfg.size = 32ULL << 20;
	cfg.nr_static_ports = 8;
	cfg.nr_dynamic_ports = 8;
	cfg.nr_requests = 512;
	if (xseg_create(name, &cfg, seg, errbuf, sizeof(errbuf)) < 0) {
		fprintf(stderr, "%s\n", errbuf);
		return NULL;
	}
	return name;
}

int tpr_client_open(struct tpr_client *c, const char *segname)
{
	char errbuf[XSEG_ERRBUF_LEN];
	int rc = xseg_join(segname, &c->seg, errbuf, sizeof(errbuf));

	if (rc < 0)
		return rc;
	rc = xseg_alloc_port(c->seg, "test", &c->port);
	if (rc < 0) {
		xseg_leave(c->seg);
		c->seg = NULL;
	}
	return rc;
}

void tpr_client_close(struct tpr_client *c)
{
	if (!c->seg)
		return;
	xseg_release_port(c->seg, c->port);
	xseg_leave(c->seg);
	c->seg = NULL;
}

int tpr_roundtrip(struct tpr_client *c, uint32_t dst, uint16_t op,
		  const char *target, uint64_t offset, uint64_t size,
		  uint64_t datalen, struct xseg_request **reqp)
{
	struct xseg_request *req, *rep;
	uint32_t tlen = target ? (uint32_t)strlen(target) : 0;
	int rc;

	*reqp = NULL;
	rc = xseg_get_request(c->seg, c->port, &req);
	if (rc < 0)
		return rc;
	rc = xseg_prep_request(c->seg, req, tlen, datalen);
	if (rc < 0)
		goto put;
	req->op = op;
	req->offset = offset;
	req->size = size;
	if (tlen)
		memcpy(xseg_request_target(req), target, tlen);
	rc = xseg_submit(c->seg, req, dst);
	if (rc < 0)
		goto put;
	rc = xseg_wait_reply(c->seg, c->port, 10ULL * 1000000000ULL, &rep);
	if (rc < 0)
		return rc; /* the request is lost to the test: it fails */
	*reqp = rep;
	return rep->error;
put:
	xseg_put_request(c->seg, req);
	return rc;
}
