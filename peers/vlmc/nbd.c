/* SPDX-License-Identifier: MIT */
/*
 * vlmc NBD server: fixed newstyle handshake and transmission with simple
 * replies, one thread pair per connection.
 *
 * Per connection
 * - the connection thread runs the handshake, then reads commands; each
 *   valid command becomes a vlmc_io split into object requests submitted
 *   from the connection's own dynamic xseg port;
 * - the completer thread receives the replies on that port; when an I/O's
 *   last part completes it sends the NBD reply (replies may go out of
 *   order, as the protocol allows);
 * - socket writes (handshake and refusals from the connection thread,
 *   replies from the completer) are serialised by wlock;
 * - at most nbd_max_inflight commands are in flight; the reader waits for
 *   a slot (back-pressure instead of unbounded buffering).
 * A protocol violation the spec says must end the connection closes only
 * that connection; the server keeps serving the others.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nbd_proto.h"
#include "vlmc_int.h"

int vlmc_listen_unix(const char *path, int *fdp);

struct vlmc_conn {
	struct vlmc *v;
	int fd;
	struct vlmc_conn *next, *prev; /* nbd->conns, under nbd->lock */
	pthread_t thread;
	pthread_mutex_t wlock;
	bool wdead; /* a write failed: drop further replies */
	bool no_zeroes;

	struct vlmc_volume *vol;
	uint64_t size;
	bool readonly;
	uint32_t port;
	bool have_port;

	pthread_mutex_t lock; /* inflight, stop_completer */
	pthread_cond_t cond;
	unsigned inflight;
	bool stop_completer;
	pthread_t completer;
};

struct vlmc_nbd {
	int unix_fd, tcp_fd;
	pthread_t listener;
	bool started;
	bool stopping; /* __atomic */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct vlmc_conn *conns;
	unsigned nr_conns;
};

/* ------------------------------------------------------------------ */
/* Socket helpers                                                      */
/* ------------------------------------------------------------------ */

/* Read exactly len bytes: 0, or -1 on EOF/error. */
static int nbd_readn(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int nbd_skip(int fd, uint64_t len)
{
	char buf[4096];

	while (len) {
		size_t n = len < sizeof(buf) ? (size_t)len : sizeof(buf);

		if (nbd_readn(fd, buf, n))
			return -1;
		len -= n;
	}
	return 0;
}

/* Write all of iov under the connection's write lock. */
static int nbd_writev(struct vlmc_conn *c, struct iovec *iov, int cnt)
{
	int rc = 0;

	pthread_mutex_lock(&c->wlock);
	if (c->wdead)
		rc = -1;
	while (!rc && cnt) {
		ssize_t n = writev(c->fd, iov, cnt);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			c->wdead = true;
			rc = -1;
			break;
		}
		while (cnt && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	pthread_mutex_unlock(&c->wlock);
	return rc;
}

static int nbd_write(struct vlmc_conn *c, const void *buf, size_t len)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

	return nbd_writev(c, &iov, 1);
}

static int nbd_opt_reply(struct vlmc_conn *c, uint32_t opt, uint32_t type,
			 const void *data, uint32_t len)
{
	uint8_t hdr[NBD_OPT_REPLY_LEN];
	struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)data, len}};

	nbd_encode_opt_reply(hdr, opt, type, len);
	return nbd_writev(c, iov, len ? 2 : 1);
}

/* ------------------------------------------------------------------ */
/* Handshake                                                           */
/* ------------------------------------------------------------------ */

static uint16_t nbd_tflags(bool readonly)
{
	/* Flushes go to the whole store below, so a flush on one
	 * connection covers writes completed on every other: multi-conn
	 * is safe. */
	return NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
	       NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES |
	       NBD_FLAG_CAN_MULTI_CONN | (readonly ? NBD_FLAG_READ_ONLY : 0);
}

static int nbd_opt_list(struct vlmc_conn *c, uint32_t len)
{
	struct vlmc_volume_meta *m;
	size_t n;
	int rc = 0;

	if (len)
		return nbd_opt_reply(c, NBD_OPT_LIST, NBD_REP_ERR_INVALID, NULL,
				     0);
	m = calloc(VLMC_MAX_VOLUMES, sizeof(*m));
	if (!m)
		return -1;
	n = vlmc_vol_list(c->v, m, VLMC_MAX_VOLUMES);
	for (size_t i = 0; i < n && !rc; i++) {
		uint8_t buf[4 + VLMC_NAME_MAX];
		uint32_t nl = (uint32_t)strlen(m[i].name);

		nbd_put32(buf, nl);
		memcpy(buf + 4, m[i].name, nl);
		rc =
		    nbd_opt_reply(c, NBD_OPT_LIST, NBD_REP_SERVER, buf, 4 + nl);
	}
	free(m);
	return rc ? rc : nbd_opt_reply(c, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
}

/* Attach the connection to volume name (referenced); false if unknown. */
static bool nbd_attach(struct vlmc_conn *c, const char *name, uint32_t len)
{
	struct vlmc_volume *vol = vlmc_vol_get(c->v, name, len);

	if (!vol)
		return false;
	if (c->vol) {
		__atomic_sub_fetch(&c->vol->nbd_conns, 1, __ATOMIC_RELAXED);
		vlmc_vol_put(c->vol);
	}
	c->vol = vol;
	__atomic_add_fetch(&vol->nbd_conns, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&vol->mu);
	c->size = vol->m.size;
	c->readonly = vol->m.readonly;
	pthread_mutex_unlock(&vol->mu);
	return true;
}

/* INFO or GO. Returns 1 to enter transmission, 0 to go on haggling, -1 to
 * disconnect. */
static int nbd_opt_go(struct vlmc_conn *c, uint32_t opt, const uint8_t *data,
		      uint32_t len)
{
	uint8_t info[NBD_INFO_EXPORT_LEN], bs[NBD_INFO_BLOCK_SIZE_LEN];
	const uint8_t *infos;
	const char *name;
	uint32_t nl;
	uint16_t ni;

	if (nbd_parse_go(data, len, &name, &nl, &infos, &ni))
		return nbd_opt_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	if (!nbd_attach(c, name, nl)) {
		static const char msg[] = "vlmc: no such volume";

		return nbd_opt_reply(c, opt, NBD_REP_ERR_UNKNOWN, msg,
				     sizeof(msg) - 1);
	}
	nbd_encode_info_export(info, c->size, nbd_tflags(c->readonly));
	nbd_encode_info_block_size(bs, 1, 4096, NBD_MAX_PAYLOAD);
	if (nbd_opt_reply(c, opt, NBD_REP_INFO, info, sizeof(info)) ||
	    nbd_opt_reply(c, opt, NBD_REP_INFO, bs, sizeof(bs)) ||
	    nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0))
		return -1;
	return opt == NBD_OPT_GO ? 1 : 0;
}

/* Returns 0 when the connection enters transmission with c->vol set, -1
 * when it must be closed. */
static int nbd_handshake(struct vlmc_conn *c)
{
	uint8_t greet[NBD_HANDSHAKE_LEN], flags[4], hdr[NBD_OPT_HDR_LEN];
	uint8_t *data = NULL;
	int ret = -1;

	nbd_encode_greeting(greet);
	if (nbd_write(c, greet, sizeof(greet)) || nbd_readn(c->fd, flags, 4) ||
	    nbd_parse_client_flags(flags, &c->no_zeroes))
		return -1;
	data = malloc(NBD_OPT_MAX);
	if (!data)
		return -1;
	for (;;) {
		uint32_t opt, len;
		int rc;

		if (nbd_readn(c->fd, hdr, sizeof(hdr)) ||
		    nbd_parse_opt_header(hdr, &opt, &len))
			break; /* EOF, or bad magic: must disconnect */
		if (len > NBD_OPT_MAX) {
			if (opt == NBD_OPT_EXPORT_NAME ||
			    len > NBD_OPT_SKIP_MAX || nbd_skip(c->fd, len) ||
			    nbd_opt_reply(c, opt, NBD_REP_ERR_TOO_BIG, NULL, 0))
				break;
			continue;
		}
		if (nbd_readn(c->fd, data, len))
			break;
		switch (opt) {
		case NBD_OPT_EXPORT_NAME: {
			uint8_t out[NBD_EXPORT_REPLY_LEN];
			size_t n;

			/* No way to report an error here: disconnect. */
			if (!nbd_attach(c, (const char *)data, len))
				goto out;
			n = nbd_encode_export_reply(out, c->size,
						    nbd_tflags(c->readonly),
						    c->no_zeroes);
			ret = nbd_write(c, out, n) ? -1 : 0;
			goto out;
		}
		case NBD_OPT_ABORT:
			nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
			goto out;
		case NBD_OPT_LIST:
			if (nbd_opt_list(c, len))
				goto out;
			break;
		case NBD_OPT_INFO:
		case NBD_OPT_GO:
			rc = nbd_opt_go(c, opt, data, len);
			if (rc < 0)
				goto out;
			if (rc == 1) {
				ret = 0;
				goto out;
			}
			break;
		default:
			if (nbd_opt_reply(c, opt, NBD_REP_ERR_UNSUP, NULL, 0))
				goto out;
		}
	}
out:
	free(data);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Transmission                                                        */
/* ------------------------------------------------------------------ */

static int nbd_simple_reply(struct vlmc_conn *c, uint32_t err, uint64_t cookie,
			    const void *data, size_t len)
{
	uint8_t hdr[NBD_REPLY_LEN];
	struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)data, len}};

	nbd_encode_simple_reply(hdr, err, cookie);
	return nbd_writev(c, iov, len && !err ? 2 : 1);
}

static void nbd_io_done(struct vlmc_io *io)
{
	struct vlmc_conn *c = io->arg;
	uint32_t err = nbd_errno(io->error);

	if (io->vol)
		vlmc_vol_exit(io->vol);
	nbd_simple_reply(c, err, io->arg2, io->buf,
			 io->op == VLMC_IO_READ ? io->len : 0);
	free(io->buf);
	vlmc_io_free(io);
	pthread_mutex_lock(&c->lock);
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void *nbd_completer_main(void *arg)
{
	struct vlmc_conn *c = arg;
	struct vlmc *v = c->v;

	for (;;) {
		struct xseg_request *req;
		bool stop;
		int rc;

		pthread_mutex_lock(&c->lock);
		stop = c->stop_completer;
		pthread_mutex_unlock(&c->lock);
		if (stop)
			break;
		rc = xseg_wait_reply(v->seg, c->port, 100000000ULL, &req);
		if (!rc)
			vlmc_io_part_reply(v, req);
	}
	return NULL;
}

static void nbd_transmission(struct vlmc_conn *c)
{
	struct vlmc *v = c->v;
	uint8_t hdr[NBD_REQUEST_LEN];

	for (;;) {
		struct nbd_request r;
		enum vlmc_io_op op;
		struct vlmc_io *io;
		uint32_t err;
		unsigned char *buf = NULL;

		if (nbd_readn(c->fd, hdr, sizeof(hdr)) ||
		    nbd_parse_request(hdr, &r))
			break; /* EOF, or bad magic: must disconnect */
		switch (nbd_check_request(&r, c->size, c->readonly, &err)) {
		case NBD_DISCONNECT:
			peer_warn("nbd: %s: command %u length %" PRIu32
				  " refused, disconnecting",
				  c->vol->m.name, r.type, r.length);
			return;
		case NBD_REFUSE:
			if (r.type == NBD_CMD_WRITE &&
			    nbd_skip(c->fd, r.length))
				return;
			if (nbd_simple_reply(c, err, r.cookie, NULL, 0))
				return;
			continue;
		case NBD_DO:
			break;
		}
		switch (r.type) {
		case NBD_CMD_DISC:
			return;
		case NBD_CMD_READ:
			op = VLMC_IO_READ;
			break;
		case NBD_CMD_WRITE:
			op = VLMC_IO_WRITE;
			break;
		case NBD_CMD_FLUSH:
			op = VLMC_IO_FLUSH;
			break;
		default: /* TRIM, WRITE_ZEROES */
			op = VLMC_IO_ZERO;
			break;
		}
		if (op == VLMC_IO_READ || op == VLMC_IO_WRITE) {
			buf = malloc(r.length);
			if (!buf) {
				if (op == VLMC_IO_WRITE &&
				    nbd_skip(c->fd, r.length))
					return;
				if (nbd_simple_reply(c, NBD_ENOMEM, r.cookie,
						     NULL, 0))
					return;
				continue;
			}
			if (op == VLMC_IO_WRITE &&
			    nbd_readn(c->fd, buf, r.length)) {
				free(buf);
				return;
			}
		}
		io = vlmc_io_alloc(v, op == VLMC_IO_FLUSH ? NULL : c->vol, op,
				   r.offset, r.length);
		if (!io) {
			free(buf);
			if (nbd_simple_reply(c, NBD_ENOMEM, r.cookie, NULL, 0))
				return;
			continue;
		}
		io->buf = buf;
		io->xflags = (r.flags & NBD_CMD_FLAG_FUA) ? XSEG_F_FUA : 0;
		io->port = c->port;
		io->done = nbd_io_done;
		io->arg = c;
		io->arg2 = r.cookie;
		pthread_mutex_lock(&c->lock);
		while (c->inflight >= v->nbd_max_inflight)
			pthread_cond_wait(&c->cond, &c->lock);
		c->inflight++;
		pthread_mutex_unlock(&c->lock);
		if (io->vol)
			vlmc_vol_enter(io->vol);
		vlmc_io_submit(io);
	}
}

static void nbd_conn_close(struct vlmc_conn *c)
{
	struct vlmc_nbd *nbd = c->v->nbd;

	if (c->have_port) {
		/* Every command must be answered before we let go. */
		pthread_mutex_lock(&c->lock);
		while (c->inflight)
			pthread_cond_wait(&c->cond, &c->lock);
		c->stop_completer = true;
		pthread_mutex_unlock(&c->lock);
		xseg_kick(c->v->seg, c->port);
		pthread_join(c->completer, NULL);
		xseg_release_port(c->v->seg, c->port);
	}
	if (c->vol) {
		__atomic_sub_fetch(&c->vol->nbd_conns, 1, __ATOMIC_RELAXED);
		vlmc_vol_put(c->vol);
	}
	pthread_mutex_lock(&nbd->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		nbd->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	nbd->nr_conns--;
	pthread_cond_broadcast(&nbd->cond);
	pthread_mutex_unlock(&nbd->lock);
	close(c->fd);
	pthread_mutex_destroy(&c->wlock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c);
}

static void *nbd_conn_main(void *arg)
{
	static const struct timeval hs_timeout = {.tv_sec = 30};
	static const struct timeval no_timeout = {0};
	struct vlmc_conn *c = arg;
	int rc;

	/* A client that stalls in the handshake must not hold a thread
	 * for ever; once transmission starts, idle connections are fine. */
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &hs_timeout,
		   sizeof(hs_timeout));
	if (nbd_handshake(c))
		goto out;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &no_timeout,
		   sizeof(no_timeout));
	rc = xseg_alloc_port(c->v->seg, "vlmc-nbd", &c->port);
	if (rc) {
		peer_err("nbd: no dynamic port for a connection to %s: "
			 "%s",
			 c->vol->m.name, strerror(-rc));
		goto out;
	}
	rc = pthread_create(&c->completer, NULL, nbd_completer_main, c);
	if (rc) {
		xseg_release_port(c->v->seg, c->port);
		goto out;
	}
	c->have_port = true;
	peer_dbg("nbd: connection to %s on port %" PRIu32, c->vol->m.name,
		 c->port);
	nbd_transmission(c);
out:
	nbd_conn_close(c);
	return NULL;
}

static void nbd_accept(struct vlmc *v, int lfd)
{
	struct vlmc_nbd *nbd = v->nbd;
	struct vlmc_conn *c;
	pthread_attr_t attr;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), one = 1;

	if (fd < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->v = v;
	c->fd = fd;
	pthread_mutex_init(&c->wlock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	pthread_mutex_lock(&nbd->lock);
	c->next = nbd->conns;
	if (c->next)
		c->next->prev = c;
	nbd->conns = c;
	nbd->nr_conns++;
	pthread_mutex_unlock(&nbd->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&c->thread, &attr, nbd_conn_main, c)) {
		pthread_attr_destroy(&attr);
		nbd_conn_close(c);
		return;
	}
	pthread_attr_destroy(&attr);
}

static void *nbd_listener_main(void *arg)
{
	struct vlmc *v = arg;
	struct vlmc_nbd *nbd = v->nbd;

	while (!__atomic_load_n(&nbd->stopping, __ATOMIC_ACQUIRE)) {
		struct pollfd pfd[2];
		int n = 0;

		if (nbd->unix_fd >= 0)
			pfd[n++] = (struct pollfd){nbd->unix_fd, POLLIN, 0};
		if (nbd->tcp_fd >= 0)
			pfd[n++] = (struct pollfd){nbd->tcp_fd, POLLIN, 0};
		if (poll(pfd, (nfds_t)n, 200) <= 0)
			continue;
		for (int i = 0; i < n; i++)
			if (pfd[i].revents & POLLIN)
				nbd_accept(v, pfd[i].fd);
	}
	return NULL;
}

static int nbd_listen_tcp(int port, int *fdp)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 64)) {
		int e = -errno;
		close(fd);
		return e;
	}
	*fdp = fd;
	return 0;
}

int vlmc_nbd_start(struct vlmc *v)
{
	struct vlmc_nbd *nbd = calloc(1, sizeof(*nbd));
	int rc;

	if (!nbd)
		return -ENOMEM;
	nbd->unix_fd = nbd->tcp_fd = -1;
	pthread_mutex_init(&nbd->lock, NULL);
	pthread_cond_init(&nbd->cond, NULL);
	v->nbd = nbd;
	if (strcmp(v->nbd_socket, "none")) {
		rc = vlmc_listen_unix(v->nbd_socket, &nbd->unix_fd);
		if (rc) {
			peer_err("nbd socket %s: %s", v->nbd_socket,
				 strerror(-rc));
			return rc;
		}
	}
	if (v->nbd_tcp_port) {
		rc = nbd_listen_tcp(v->nbd_tcp_port, &nbd->tcp_fd);
		if (rc) {
			peer_err("nbd tcp 127.0.0.1:%d: %s", v->nbd_tcp_port,
				 strerror(-rc));
			return rc;
		}
	}
	rc = pthread_create(&nbd->listener, NULL, nbd_listener_main, v);
	if (rc)
		return -rc;
	nbd->started = true;
	peer_info("nbd on %s%s", v->nbd_socket,
		  v->nbd_tcp_port ? " and 127.0.0.1 (tcp)" : "");
	return 0;
}

void vlmc_nbd_stop(struct vlmc *v)
{
	struct vlmc_nbd *nbd = v->nbd;

	if (!nbd)
		return;
	if (nbd->started) {
		__atomic_store_n(&nbd->stopping, true, __ATOMIC_RELEASE);
		pthread_join(nbd->listener, NULL);
		nbd->started = false;
	}
	pthread_mutex_lock(&nbd->lock);
	for (struct vlmc_conn *c = nbd->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	while (nbd->nr_conns)
		pthread_cond_wait(&nbd->cond, &nbd->lock);
	pthread_mutex_unlock(&nbd->lock);
	if (nbd->unix_fd >= 0) {
		close(nbd->unix_fd);
		unlink(v->nbd_socket);
	}
	if (nbd->tcp_fd >= 0)
		close(nbd->tcp_fd);
	pthread_mutex_destroy(&nbd->lock);
	pthread_cond_destroy(&nbd->cond);
	free(nbd);
	v->nbd = NULL;
}
