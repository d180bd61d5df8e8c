/* SPDX-License-Identifier: MIT */
/*
 * vlmc NBD server: fixed newstyle handshake, simple and structured
 * replies, base:allocation block status; two threads per connection.
 *
 * Per connection
 * - the reader thread runs the handshake, then reads commands through a
 *   buffer (many per recv); each valid command becomes a vlmc_io split
 *   into object requests submitted from the connection's own dynamic xseg
 *   port (WRITE payloads are read straight into those requests' buffers);
 * - the completer thread receives the replies on that port in batches
 *   and sends them; but while the reader runs with at most NBD_PARK_MAX
 *   (1) commands in flight the completer is parked on a condition, not
 *   on the port: the reader wakes it when a second command goes out or
 *   before it blocks (a hand-off from a thread going to sleep instead of
 *   a wake-up from the store's process: 1.2x randread qd16, see
 *   docs/vlmc.md); with --nbd-spin set the reader meanwhile polls the
 *   port for that reply for up to that long and sends it itself;
 * - a completed I/O queues its reply (olock); whoever completed it sends
 *   the queue with one writev (wlock serialises socket writes); replies
 *   may go out of order, as the protocol allows; READ data goes out from
 *   the object replies' buffers in the segment;
 * - at most nbd_max_inflight commands are in flight (back-pressure
 *   instead of unbounded buffering).
 * A protocol violation the spec says must end the connection closes only
 * that connection; the server keeps serving the others.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nbd_proto.h"
#include "vlmc_int.h"
#include "xtime.h"

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
	/* the connection's session on vol (wbloss.h): the fence generation
	 * when it attached (a fence after that fails every command of this
	 * connection with EIO) and whether it is stale (docs/vlmc.md,
	 * "Write-back loss") */
	struct vlmc_wbloss_sess wb;
	uint64_t size;
	bool readonly;
	/* largest READ/WRITE/CACHE of the volume, nbd_max_payload */
	uint32_t max_payload;
	uint32_t port;
	bool have_port;
	/* port allocated (at NBD_OPT_GO), the completer not yet started:
	 * nbd_conn_close only releases it */
	bool port_only;
	bool active; /* holds one of nbd->nr_active (--nbd-max-conns) */
	/* Under nbd->lock: still in the handshake and not yet shut down by
	 * the listener, which does so at hs_deadline_ns (xseg_now_ns) or to
	 * make room for a new socket (review12 F1). */
	bool in_hs;
	uint64_t hs_deadline_ns;

	/* negotiated in the handshake */
	bool structured;   /* NBD_OPT_STRUCTURED_REPLY */
	uint32_t meta_ctx; /* id of base:allocation, 0: not selected */
	char meta_export[VLMC_NAME_MAX + 1]; /* ...for this export */
	unsigned caps; /* NBD_CAP_* for nbd_check_request */

	/* reader thread only: bytes received and not yet consumed */
	uint8_t *rbuf; /* NBD_RBUF_SIZE */
	size_t rpos, rlen;

	pthread_mutex_t olock; /* replies ready to send */
	struct vlmc_io *ohead; /* __atomic (a lock-free emptiness check) */
	struct vlmc_io *otail;

	/* inflight is __atomic: the reader and the completer read it on
	 * every step, and a contended mutex there made them sleep (twice
	 * the context switches per command). lock and the conditions are
	 * for sleeping only: waiting for a slot or the drain (cond, with
	 * slot_waiting set so a decrement knows to wake), and the
	 * completer (ccond). inflight changes and waiting flags are
	 * seq_cst, so a waker and a sleeper cannot both miss each other. */
	pthread_mutex_t lock; /* completer_on, stop_completer, sleeping */
	pthread_cond_t cond;  /* inflight went down */
	pthread_cond_t ccond; /* completer: completer_on or stop */
	unsigned inflight;
	/* Bytes of segment buffers the commands in flight pin (__atomic,
	 * seq_cst like inflight), and the cost of the command at the head
	 * of rbuf that waits for them to drop (reader only; 0: none). */
	uint64_t inflight_bytes;
	uint64_t head_cost;
	/* The queue of connections waiting for the budget of all
	 * connections (struct vlmc_nbd, nbd_admit): tnext, tprev, tcost
	 * (head_cost when it joined) and tqueued under nbd->tlock, which
	 * tcond goes with (its turn came, or its own replies freed budget);
	 * the reader, their only writer, reads tqueued without the lock.
	 * tgranted (reader only): the head command passed; the connection
	 * stays in the queue, its claim standing, until the command's
	 * bytes are in nbd_total_inflight, or (a WRITE, a refusal) until
	 * before anything that can block on its own client (nbd_submit
	 * calls nbd_tq_leave). tlapse_logged (under tlock): this head's
	 * lapsed claim was logged. */
	struct vlmc_conn *tnext, *tprev;
	uint64_t tcost;
	bool tqueued;
	bool tgranted;
	bool tlapse_logged;
	pthread_cond_t tcond;
	/* when an ENOMEM was last logged (xseg_now_ns, __atomic; 0: never):
	 * one line per connection per NBD_ENOMEM_LOG_NS */
	uint64_t enomem_logged_ns;
	bool slot_waiting;     /* __atomic */
	bool completer_on;     /* the reader is (about to be) blocked */
	bool completer_was_on; /* before nbd_reader_wait turned it on */
	/* With at most this many commands in flight, the reader answers for
	 * their replies while it runs: the completer is parked on ccond
	 * until the reader hands them over (nbd_completer_on, or a second
	 * command in flight), and with --nbd-spin the reader polls for them
	 * itself (nbd_poll). NBD_PARK_MAX, or 0 (the completer waits on the
	 * port for every reply) while the reader's spinning is backed off.
	 * __atomic: written by the reader only; set to 0 under lock with a
	 * ccond signal, so a parked completer goes back to the port. */
	unsigned park_max;
	/* reader only: polls left before spinning is tried again after a
	 * spin ran out (spin_backoff), 0: not backed off */
	unsigned spin_backoff;
	bool stop_completer;
	pthread_t completer;
};

/* Commands read per recv: several 4 KiB writes or many headers. */
#define NBD_RBUF_SIZE	 (256u << 10)
#define NBD_SOCKBUF_SIZE (4 << 20)
/* A READ of at most this many objects is sent straight from the object
 * requests' buffers in the segment (one iovec each); larger ones are
 * gathered into a buffer first. */
#define NBD_KEEP_MAX_PARTS 64
/* With at most this many commands in flight the completer is parked
 * while the reader runs (park_max), and with --nbd-spin not 0 the reader
 * polls for their replies itself before it sleeps (nbd_poll); above, the
 * completer takes them while the reader reads commands, the two working
 * in parallel (the reader taking replies at any depth gave 0.7-0.8x
 * randread qd16 IOPS). */
#define NBD_PARK_MAX 1
/* BLOCK_STATUS looks at most at this many objects per command. */
#define NBD_STATUS_MAX_OBJECTS 64

/* Connections still in the handshake, beyond --nbd-max-conns in
 * transmission: for a socket over both, the oldest handshake is closed
 * (or, when all are already closing, the new socket). */
#define NBD_HANDSHAKE_SLACK 16
/* A handshake as a whole, from accept: a deadline, not a per-read
 * timeout, so that a client trickling bytes cannot stay in it for ever
 * (review12 F1). */
#define NBD_HANDSHAKE_NS (10ULL * 1000000000ULL)
/* ZERO parts in flight per command (a 4 GiB WRITE_ZEROES with NO_HOLE
 * writes 1024 objects of zeroes). */
#define NBD_ZERO_WINDOW 16

struct vlmc_nbd {
	int unix_fd, tcp_fd;
	pthread_t listener;
	bool started;
	bool stopping; /* __atomic */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct vlmc_conn *conns;
	unsigned nr_conns;  /* sockets open (handshake or transmission) */
	unsigned nr_active; /* in transmission (or entering it) */
	/* Connections whose next command waits for the budget of all
	 * connections, first come first served (nbd_admit): the head
	 * claims its command's bytes, and the others leave it room. tlock
	 * guards the queue (thead, ttail, the connections' t* fields); it
	 * is taken after a connection's lock, never before. claim is
	 * thead's tcost, 0 when nobody waits: __atomic (seq_cst), the one
	 * load admissions and replies pay when nobody waits. claim_ns
	 * (xseg_now_ns, __atomic, stored under tlock with claim): when the
	 * head's claim began; it holds for NBD_CLAIM_HOLD_NS, then lapses
	 * for NBD_CLAIM_LAPSE_NS, and so on (nbd_claim_holds). */
	pthread_mutex_t tlock;
	struct vlmc_conn *thead, *ttail;
	uint64_t claim;
	uint64_t claim_ns;
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
	if (__atomic_load_n(&c->wdead, __ATOMIC_RELAXED))
		rc = -1;
	while (!rc && cnt) {
		ssize_t n = writev(c->fd, iov, cnt);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			__atomic_store_n(&c->wdead, true, __ATOMIC_RELAXED);
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
	       NBD_FLAG_SEND_FAST_ZERO | NBD_FLAG_CAN_MULTI_CONN |
	       NBD_FLAG_SEND_CACHE | (readonly ? NBD_FLAG_READ_ONLY : 0);
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

/* Objects one command may span: a maximal command on a volume of small
 * objects must not need the whole request pool (a 32 MiB WRITE on 4 KiB
 * objects is 8192 object requests; review12 F3). */
#define NBD_MAX_PARTS 1024

/* The maximum payload advertised (NBD_INFO_BLOCK_SIZE) and enforced for a
 * volume of obj_size objects: min(32 MiB, NBD_MAX_PARTS objects). */
static uint32_t nbd_max_payload(uint64_t obj_size)
{
	return obj_size * NBD_MAX_PARTS < NBD_MAX_PAYLOAD
		   ? (uint32_t)(obj_size * NBD_MAX_PARTS)
		   : NBD_MAX_PAYLOAD;
}

/* Attach the connection to volume name (referenced); false if unknown. */
static bool nbd_attach(struct vlmc_conn *c, const char *name, uint32_t len)
{
	struct vlmc_volume *vol = vlmc_vol_get(c->v, name, len);

	if (!vol)
		return false;
	if (c->vol) {
		vlmc_wbloss_detach(&c->vol->wb, &c->wb);
		__atomic_sub_fetch(&c->vol->nbd_conns, 1, __ATOMIC_RELAXED);
		vlmc_vol_put(c->vol);
	}
	c->vol = vol;
	/* a loss not yet noticed fences the connections opened before it,
	 * not this one */
	if (vlmc_wbloss_attach(&c->v->wb, &vol->wb, &c->wb) == VLMC_WBLOSS_LOST)
		vlmc_wb_fenced(c->v, vol);
	__atomic_add_fetch(&vol->nbd_conns, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&vol->mu);
	c->size = vol->m.size;
	c->readonly = vol->m.readonly;
	pthread_mutex_unlock(&vol->mu);
	c->max_payload = nbd_max_payload(vol->m.obj_size);
	return true;
}

/* Let go of the volume nbd_attach took (INFO, or a refused GO: a
 * handshake must not keep a volume from removal; review12 F4). */
static void nbd_detach(struct vlmc_conn *c)
{
	if (!c->vol)
		return;
	vlmc_wbloss_detach(&c->vol->wb, &c->wb);
	__atomic_sub_fetch(&c->vol->nbd_conns, 1, __ATOMIC_RELAXED);
	vlmc_vol_put(c->vol);
	c->vol = NULL;
}

static int nbd_alloc_port(struct vlmc_conn *c);

/* Take one of the --nbd-max-conns transmission places; false (counted as
 * refused) when all are taken. */
static bool nbd_reserve(struct vlmc_conn *c)
{
	struct vlmc_nbd *nbd = c->v->nbd;
	bool ok;

	if (c->active)
		return true;
	pthread_mutex_lock(&nbd->lock);
	ok = nbd->nr_active < c->v->nbd_max_conns;
	if (ok)
		nbd->nr_active++;
	pthread_mutex_unlock(&nbd->lock);
	c->active = ok;
	if (ok) {
		__atomic_add_fetch(&c->v->st_nbd_conns, 1, __ATOMIC_RELAXED);
	} else {
		__atomic_add_fetch(&c->v->st_nbd_refused, 1, __ATOMIC_RELAXED);
		peer_warn("nbd: connection refused: %u connections served "
			  "(--nbd-max-conns)",
			  c->v->nbd_max_conns);
	}
	return ok;
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
	if (opt == NBD_OPT_GO && !nbd_reserve(c)) {
		static const char msg[] =
		    "vlmc: too many NBD connections, try again later";

		nbd_detach(c);
		return nbd_opt_reply(c, opt, NBD_REP_ERR_POLICY, msg,
				     sizeof(msg) - 1);
	}
	/* The connection's port before the ACK: a client told the export
	 * is ready must not lose the connection at its first command
	 * (review12 F5). Its transmission place stays reserved, as after
	 * any GO it may repeat. */
	if (opt == NBD_OPT_GO && !c->port_only) {
		if (nbd_alloc_port(c)) {
			static const char msg[] =
			    "vlmc: no free xseg port, try again later";

			__atomic_add_fetch(&c->v->st_nbd_refused, 1,
					   __ATOMIC_RELAXED);
			nbd_detach(c);
			return nbd_opt_reply(c, opt, NBD_REP_ERR_POLICY, msg,
					     sizeof(msg) - 1);
		}
		c->port_only = true;
	}
	nbd_encode_info_export(info, c->size, nbd_tflags(c->readonly));
	nbd_encode_info_block_size(bs, 1, 4096, c->max_payload);
	if (nbd_opt_reply(c, opt, NBD_REP_INFO, info, sizeof(info)) ||
	    nbd_opt_reply(c, opt, NBD_REP_INFO, bs, sizeof(bs)) ||
	    nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0))
		return -1;
	if (opt == NBD_OPT_GO)
		return 1;
	nbd_detach(c);
	return 0;
}

/* LIST_META_CONTEXT / SET_META_CONTEXT. The one context is
 * base:allocation: whether an object was ever written (see
 * docs/vlmc.md). Returns 0, or -1 to disconnect. */
static int nbd_opt_meta(struct vlmc_conn *c, uint32_t opt, const uint8_t *data,
			uint32_t len)
{
	static const char base[] = NBD_META_BASE_ALLOCATION;
	uint8_t out[4 + sizeof(base)];
	struct vlmc_volume *vol;
	const uint8_t *q;
	const char *name;
	uint32_t nl, nq;
	bool set = opt == NBD_OPT_SET_META_CONTEXT, found = false;

	if (nbd_parse_meta_context(data, len, &name, &nl, &nq, &q) ||
	    !c->structured) /* LIST too (review12 F4; proto.md) */
		return nbd_opt_reply(c, opt, NBD_REP_ERR_INVALID, NULL, 0);
	vol = vlmc_vol_get(c->v, name, nl);
	if (!vol) {
		static const char msg[] = "vlmc: no such volume";

		return nbd_opt_reply(c, opt, NBD_REP_ERR_UNKNOWN, msg,
				     sizeof(msg) - 1);
	}
	vlmc_vol_put(vol);
	/* LIST without queries lists every context; "base:" matches every
	 * context of the namespace (LIST only). */
	if (!set && nq == 0)
		found = true;
	for (uint32_t i = 0; i < nq; i++) {
		const char *qs;
		uint32_t ql;

		q = nbd_next_meta_query(q, &qs, &ql);
		if ((ql == sizeof(base) - 1 && !memcmp(qs, base, ql)) ||
		    (!set && ql == 5 && !memcmp(qs, "base:", 5)))
			found = true;
	}
	if (set) {
		c->meta_ctx = found ? 1 : 0;
		memcpy(c->meta_export, name, nl);
		c->meta_export[nl] = '\0';
	}
	if (found && nbd_opt_reply(c, opt, NBD_REP_META_CONTEXT, out,
				   (uint32_t)nbd_encode_meta_context(
				       out, set ? 1 : 0, base)))
		return -1;
	return nbd_opt_reply(c, opt, NBD_REP_ACK, NULL, 0);
}

/* Transmission starts on c->vol: what the checks of commands allow. */
static void nbd_enter_transmission(struct vlmc_conn *c)
{
	/* contexts were selected for the export named in SET; another
	 * export was chosen: none selected */
	if (c->meta_ctx && strcmp(c->meta_export, c->vol->m.name))
		c->meta_ctx = 0;
	c->caps = (c->readonly ? NBD_CAP_READONLY : 0) |
		  (c->meta_ctx ? NBD_CAP_BLOCK_STATUS : 0);
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
			if (!nbd_attach(c, (const char *)data, len) ||
			    !nbd_reserve(c))
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
		case NBD_OPT_STRUCTURED_REPLY:
			if (nbd_opt_reply(
				c, opt, len ? NBD_REP_ERR_INVALID : NBD_REP_ACK,
				NULL, 0))
				goto out;
			if (!len)
				c->structured = true;
			break;
		case NBD_OPT_LIST_META_CONTEXT:
		case NBD_OPT_SET_META_CONTEXT:
			if (nbd_opt_meta(c, opt, data, len))
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
	if (!ret)
		nbd_enter_transmission(c);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Transmission                                                        */
/* ------------------------------------------------------------------ */

/* The reply of a done I/O, encoded by nbd_io_done into io->scratch. */
struct nbd_reply_hdr {
	uint16_t type;	/* the command's, set at submission */
	uint8_t len;	/* bytes of hdr to send */
	bool with_data; /* READ: the data follows; STATUS: the extents */
	uint32_t cost;	/* its share of inflight_bytes (nbd_cost) */
	uint8_t hdr[NBD_STRUCTURED_REPLY_LEN + 8];
};
_Static_assert(sizeof(struct nbd_reply_hdr) <=
		   sizeof(((struct vlmc_io *)0)->scratch),
	       "reply header fits in the io's scratch");

/* An error reply: structured for READ and BLOCK_STATUS once structured
 * replies are negotiated (the spec wants those in chunks), else simple.
 * Returns the header length written to out. */
static uint8_t nbd_encode_error(const struct vlmc_conn *c, uint16_t type,
				uint32_t err, uint64_t cookie, uint8_t *out)
{
	if (c->structured &&
	    (type == NBD_CMD_READ || type == NBD_CMD_BLOCK_STATUS)) {
		nbd_encode_structured_reply(out, NBD_REPLY_FLAG_DONE,
					    NBD_REPLY_TYPE_ERROR, cookie, 6);
		nbd_put32(out + NBD_STRUCTURED_REPLY_LEN, err);
		nbd_put16(out + NBD_STRUCTURED_REPLY_LEN + 4, 0);
		return NBD_STRUCTURED_REPLY_LEN + 6;
	}
	nbd_encode_simple_reply(out, err, cookie);
	return NBD_REPLY_LEN;
}

static void nbd_completer_on(struct vlmc_conn *c, bool on);

/* A refusal or error answered at once from the reader thread. The socket
 * write may block (a client that reads replies slowly, the completer
 * holding wlock): the reader's batch sb goes out first, and the replies
 * of the commands in flight are handed to the completer for the write
 * (at depth 1 it is parked: a client streaming refused commands, or not
 * reading, kept that one reply unreceived in the port, and a snapshot of
 * the volume could not drain; review-park F1, F2). */
static int nbd_error_reply(struct vlmc_conn *c, uint16_t type, uint32_t err,
			   uint64_t cookie, struct xseg_sigbatch *sb)
{
	uint8_t hdr[NBD_STRUCTURED_REPLY_LEN + 8];
	bool busy = __atomic_load_n(&c->inflight, __ATOMIC_RELAXED) != 0;
	int rc;

	xseg_sigbatch_flush(c->v->seg, sb);
	if (busy)
		nbd_completer_on(c, true);
	rc = nbd_write(c, hdr, nbd_encode_error(c, type, err, cookie, hdr));
	if (busy)
		nbd_completer_on(c, false);
	return rc;
}

/* BLOCK_STATUS extents of a done STATUS io, written into io->buf (room for
 * 4 + 8 * nr_parts bytes): the context id, then one descriptor per run of
 * objects with the same state. REQ_ONE (io->xflags) keeps the first only.
 * Returns the payload length. */
static uint32_t nbd_encode_extents(struct vlmc_conn *c, struct vlmc_io *io)
{
	uint8_t *p = io->buf;
	uint32_t n = 0;

	nbd_put32(p, c->meta_ctx);
	for (uint64_t i = 0; i < io->nr_parts; i++) {
		uint32_t st =
		    io->parts[i].hole ? NBD_STATE_HOLE | NBD_STATE_ZERO : 0;
		uint8_t *d = p + 4 + 8 * (n - 1);

		/* extents are at most 4 GiB - 1: the request length is a
		 * u32, and parts only cover the request */
		if (n && nbd_get32(d + 4) == st) {
			nbd_put32(d, nbd_get32(d) + (uint32_t)io->parts[i].len);
			continue;
		}
		if (n && io->xflags)
			break;
		d = p + 4 + 8 * n++;
		nbd_put32(d, (uint32_t)io->parts[i].len);
		nbd_put32(d + 4, st);
	}
	return 4 + 8 * n;
}

static void nbd_log_enomem(struct vlmc_conn *c, unsigned type, uint64_t len);

/* Runs when every part of an NBD I/O has completed (on the reader or the
 * completer thread): encodes the reply and queues it; the thread that
 * completed it sends the queue with nbd_send_replies. */
static void nbd_io_done(struct vlmc_io *io)
{
	struct vlmc_conn *c = io->arg;
	struct nbd_reply_hdr *h = (struct nbd_reply_hdr *)io->scratch;
	uint16_t type = h->type;
	uint64_t cookie = io->arg2;
	uint32_t err = nbd_errno(io->error);

	if (io->vol)
		vlmc_vol_exit(io->vol);
	h->with_data = false;
	if (err) {
		if (io->error == ENOMEM)
			nbd_log_enomem(c, type, io->len);
		h->len = nbd_encode_error(c, type, err, cookie, h->hdr);
	} else if (type == NBD_CMD_READ && c->structured) {
		nbd_encode_structured_reply(h->hdr, NBD_REPLY_FLAG_DONE,
					    NBD_REPLY_TYPE_OFFSET_DATA, cookie,
					    (uint32_t)(8 + io->len));
		nbd_put64(h->hdr + NBD_STRUCTURED_REPLY_LEN, io->off);
		h->len = NBD_STRUCTURED_REPLY_LEN + 8;
		h->with_data = true;
	} else if (type == NBD_CMD_BLOCK_STATUS) {
		uint32_t plen = nbd_encode_extents(c, io);

		nbd_encode_structured_reply(h->hdr, NBD_REPLY_FLAG_DONE,
					    NBD_REPLY_TYPE_BLOCK_STATUS, cookie,
					    plen);
		io->len = plen; /* what follows the header */
		h->len = NBD_STRUCTURED_REPLY_LEN;
		h->with_data = true;
	} else {
		nbd_encode_simple_reply(h->hdr, 0, cookie);
		h->len = NBD_REPLY_LEN;
		h->with_data = type == NBD_CMD_READ;
	}
	io->next = NULL;
	pthread_mutex_lock(&c->olock);
	if (c->otail)
		c->otail->next = io;
	else
		__atomic_store_n(&c->ohead, io, __ATOMIC_RELEASE);
	c->otail = io;
	pthread_mutex_unlock(&c->olock);
}

static void nbd_tq_wake(struct vlmc_conn *c);

#define NBD_IOV_MAX 1024

/* iovecs io's reply needs. */
static int nbd_reply_iovs(const struct vlmc_io *io)
{
	const struct nbd_reply_hdr *h =
	    (const struct nbd_reply_hdr *)io->scratch;

	if (!h->with_data)
		return 1;
	return 1 + (io->keep_replies ? (int)io->nr_parts : 1);
}

/* Send every queued reply, as few writev calls as the iovec limit allows,
 * then free the I/Os and their slots. Any thread; writes are serialised by
 * wlock (replies may go out in any order, as the protocol allows). */
static void nbd_send_replies(struct vlmc_conn *c)
{
	struct iovec iov[NBD_IOV_MAX];
	struct vlmc_io *list, *io, *batch;
	unsigned done = 0;
	uint64_t freed = 0;

	if (!__atomic_load_n(&c->ohead, __ATOMIC_ACQUIRE))
		return; /* a reply queued meanwhile is sent by its queuer */
	pthread_mutex_lock(&c->olock);
	list = __atomic_load_n(&c->ohead, __ATOMIC_RELAXED);
	__atomic_store_n(&c->ohead, NULL, __ATOMIC_RELAXED);
	c->otail = NULL;
	pthread_mutex_unlock(&c->olock);
	while (list) {
		int cnt = 0;

		batch = list;
		while (list && cnt + nbd_reply_iovs(list) <= NBD_IOV_MAX) {
			struct nbd_reply_hdr *h =
			    (struct nbd_reply_hdr *)list->scratch;

			io = list;
			iov[cnt++] = (struct iovec){h->hdr, h->len};
			if (h->with_data && io->keep_replies) {
				for (uint64_t i = 0; i < io->nr_parts; i++)
					iov[cnt++] = (struct iovec){
					    vlmc_io_part_data(io, i),
					    io->parts[i].len};
			} else if (h->with_data) {
				iov[cnt++] = (struct iovec){io->buf, io->len};
			}
			list = list->next;
		}
		nbd_writev(c, iov, cnt); /* a failure sets wdead */
		while (batch != list) {
			io = batch;
			batch = batch->next;
			freed += ((struct nbd_reply_hdr *)io->scratch)->cost;
			vlmc_io_put_replies(io);
			free(io->buf);
			vlmc_io_free(io);
			done++;
		}
	}
	if (done) {
		/* the bytes first: a reader that sees the slot sees them */
		__atomic_sub_fetch(&c->inflight_bytes, freed, __ATOMIC_SEQ_CST);
		__atomic_sub_fetch(&c->v->nbd_total_inflight, freed,
				   __ATOMIC_SEQ_CST);
		__atomic_sub_fetch(&c->inflight, done, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&c->slot_waiting, __ATOMIC_SEQ_CST)) {
			pthread_mutex_lock(&c->lock);
			pthread_cond_broadcast(&c->cond);
			pthread_mutex_unlock(&c->lock);
		}
		/* after the decrements (seq_cst), as nbd_tq_check loads
		 * them after its claim: one of the two sees the other */
		if (__atomic_load_n(&c->v->nbd->claim, __ATOMIC_SEQ_CST))
			nbd_tq_wake(c);
	}
}

/* Hand reply reception to the completer while the reader is about to
 * block (on the socket, a slot, a frozen volume), and take it back. */
static void nbd_completer_on(struct vlmc_conn *c, bool on)
{
	pthread_mutex_lock(&c->lock);
	c->completer_on = on;
	if (on && __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST))
		pthread_cond_signal(&c->ccond);
	pthread_mutex_unlock(&c->lock);
}

/* The reader's wait hook (vlmc_set_wait_hook): vlmc_get_prep waits for
 * requests or heap that only replies give back (a READ holds its buffers
 * until its reply is sent). While the reader runs at depth 1 the
 * completer is parked (whatever --nbd-spin says), so the completer takes
 * them for the length of the wait (review7 M1: a pipelined WRITE failed
 * with ENOMEM after 1 s, the replies that would have freed the heap
 * unreceived). Restores the previous state, should the reader already
 * have handed them over. */
static void nbd_reader_wait(void *arg, bool waiting)
{
	struct vlmc_conn *c = arg;

	pthread_mutex_lock(&c->lock);
	if (waiting) {
		c->completer_was_on = c->completer_on;
		c->completer_on = true;
		if (__atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST))
			pthread_cond_signal(&c->ccond);
	} else {
		c->completer_on = c->completer_was_on;
	}
	pthread_mutex_unlock(&c->lock);
}

#define NBD_BATCH 32

/* Receive and complete every reply queued on the connection's port, then
 * send the replies that became ready. Returns how many were received. */
static unsigned nbd_reap(struct vlmc_conn *c)
{
	struct xseg_request *reqs[NBD_BATCH];
	struct xseg_sigbatch sb;
	unsigned n, total = 0;

	xseg_sigbatch_init(&sb);
	while ((n = xseg_receive_batch(c->v->seg, c->port, reqs, NBD_BATCH))) {
		for (unsigned i = 0; i < n; i++)
			vlmc_io_part_reply(c->v, reqs[i], &sb);
		total += n;
	}
	/* what the replies submitted (the next parts of a zeroing, checks
	 * of short reads) goes out before the socket write, which may
	 * block */
	xseg_sigbatch_flush(c->v->seg, &sb);
	nbd_send_replies(c);
	return total;
}

/* The completer is parked while the reader runs with at most park_max
 * commands in flight, until the reader hands it the replies (it is about
 * to block or to write a reply itself, or a second command went out);
 * then it waits for them on the port. With --nbd-spin the reader
 * meanwhile polls for them itself. */
/* Whether the completer has replies to take (under c->lock). */
static bool nbd_completer_busy(struct vlmc_conn *c)
{
	unsigned n = __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST);

	return n && (c->completer_on ||
		     n > __atomic_load_n(&c->park_max, __ATOMIC_RELAXED));
}

/* Add what the completer's spin state counted since *seen to vlmc's
 * statistics (a few relaxed RMWs per wait on a thread that just woke or
 * spun). */
static void nbd_spin_account(struct vlmc *v, const struct xseg_spin *s,
			     struct xseg_spin *seen)
{
	if (s->waits == seen->waits)
		return;
	__atomic_add_fetch(&v->st_nbd_completer_waits, s->waits - seen->waits,
			   __ATOMIC_RELAXED);
	__atomic_add_fetch(&v->st_nbd_completer_spins, s->spins - seen->spins,
			   __ATOMIC_RELAXED);
	__atomic_add_fetch(&v->st_nbd_completer_caught,
			   s->caught - seen->caught, __ATOMIC_RELAXED);
	__atomic_add_fetch(&v->st_nbd_completer_preempted,
			   s->preempted - seen->preempted, __ATOMIC_RELAXED);
	*seen = *s;
}

static void *nbd_completer_main(void *arg)
{
	struct vlmc_conn *c = arg;
	struct vlmc *v = c->v;
	/* this thread's spins on the connection's port: the peer's --spin
	 * and --spin-policy, with its own back-off (xseg.h) */
	struct xseg_spin spin, seen;

	peer_spin_init(v->p, &spin);
	seen = spin;
	for (;;) {
		struct xseg_request *req;
		bool stop;
		int rc;

		pthread_mutex_lock(&c->lock);
		/* Parked here while the reader runs with at most park_max
		 * commands in flight: the reader wakes it when a second
		 * command goes out or before it blocks, so the reply of the
		 * last command of a burst is taken by a completer woken by
		 * the reader going to sleep (a hand-off on its CPU), not by
		 * the store's respond from another process; and with
		 * --nbd-spin a completer waiting on the port would be woken
		 * by every reply the reader polls for. With park_max 0
		 * (the reader's spin backed off) it always waits on the
		 * port, woken by the store's reply itself. Measured: the
		 * completer's port wake-ups per command at randread qd16
		 * fell from about 0.25 to 0.1 (docs/vlmc.md). */
		while (__atomic_load_n(&c->park_max, __ATOMIC_RELAXED) &&
		       !c->stop_completer && !nbd_completer_busy(c))
			pthread_cond_wait(&c->ccond, &c->lock);
		stop = c->stop_completer;
		pthread_mutex_unlock(&c->lock);
		if (stop)
			break;
		/* With nothing in flight the next reply is a whole client
		 * round trip away (the client must send the next command
		 * first): no spin can catch it, so sleep at once. With
		 * commands in flight their replies are what the spin
		 * catches, a few us away when the store answers from
		 * memory; the back-off stops it where they are not. */
		rc = xseg_wait_reply_spin(
		    v->seg, c->port, 100000000ULL,
		    __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) ? &spin
								    : NULL,
		    &req);
		nbd_spin_account(v, &spin, &seen);
		if (!rc)
			vlmc_io_part_reply(v, req, NULL);
		nbd_reap(c);
	}
	return NULL;
}

static size_t nbd_buffered(const struct vlmc_conn *c)
{
	return c->rlen - c->rpos;
}

/* Read more of the socket into rbuf (after what is buffered). Blocking or
 * not; returns bytes read, 0 on EOF or error, -EAGAIN when nothing is
 * there (non-blocking). */
static ssize_t nbd_fill(struct vlmc_conn *c, bool block)
{
	ssize_t n;

	if (c->rpos) {
		memmove(c->rbuf, c->rbuf + c->rpos, nbd_buffered(c));
		c->rlen -= c->rpos;
		c->rpos = 0;
	}
	do {
		n = recv(c->fd, c->rbuf + c->rlen, NBD_RBUF_SIZE - c->rlen,
			 block ? 0 : MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -EAGAIN;
	if (n <= 0)
		return 0;
	c->rlen += (size_t)n;
	return n;
}

/* Take len bytes of the request stream into dst (NULL: drop them): what
 * rbuf holds, then straight from the socket (a large payload lands in the
 * segment without passing through rbuf). 0, or -1 on EOF/error. */
static int nbd_take(struct vlmc_conn *c, void *dst, uint64_t len)
{
	size_t have = nbd_buffered(c);
	size_t take = len < have ? (size_t)len : have;

	if (dst)
		memcpy(dst, c->rbuf + c->rpos, take);
	c->rpos += take;
	len -= take;
	if (!len)
		return 0;
	return dst ? nbd_readn(c->fd, (char *)dst + take, (size_t)len)
		   : nbd_skip(c->fd, len);
}

/* Take a payload that may not all be buffered: the socket read may block,
 * so the completer looks after the replies meanwhile, and the reader's
 * signal batch sb goes out first. */
static int nbd_take_payload(struct vlmc_conn *c, void *dst, uint64_t len,
			    struct xseg_sigbatch *sb)
{
	bool block = len > nbd_buffered(c);
	int rc;

	if (block) {
		/* never block with a request not signalled */
		xseg_sigbatch_flush(c->v->seg, sb);
		nbd_completer_on(c, true);
	}
	rc = nbd_take(c, dst, len);
	if (block)
		nbd_completer_on(c, false);
	return rc;
}

/* Wait while vol is frozen by a snapshot, without entering it (counted
 * in nbd_thaw_waits). The reader's batch goes out first and the
 * completer takes the replies meanwhile: the snapshot's drain needs this
 * connection's replies. */
static void nbd_wait_thaw(struct vlmc_conn *c, struct vlmc_volume *vol,
			  struct xseg_sigbatch *sb)
{
	/* set and cleared under vol->mu with atomic stores (vlmc.c
	 * vlmc_freeze / vlmc_thaw): a relaxed look suffices here, the
	 * wait below looks again under the lock */
	if (!__atomic_load_n(&vol->frozen, __ATOMIC_RELAXED))
		return;
	__atomic_add_fetch(&c->v->st_nbd_thaw_waits, 1, __ATOMIC_RELAXED);
	xseg_sigbatch_flush(c->v->seg, sb);
	nbd_completer_on(c, true);
	pthread_mutex_lock(&vol->mu);
	while (vol->frozen)
		pthread_cond_wait(&vol->cond, &vol->mu);
	pthread_mutex_unlock(&vol->mu);
	nbd_completer_on(c, false);
}

/* Bytes of segment buffers a valid command pins while in flight, for the
 * connection's budget (--nbd-inflight-bytes): READ and WRITE their data;
 * a zeroing the zeroes written (the partial first and last objects, or a
 * window of whole ones with NO_HOLE); the others next to nothing. At most
 * NBD_ZERO_WINDOW * 64 MiB: fits the u32 of nbd_reply_hdr. */
static uint64_t nbd_cost(const struct vlmc_conn *c, const struct nbd_request *r)
{
	uint64_t osz = c->vol->m.obj_size, n;

	switch (r->type) {
	case NBD_CMD_READ:
	case NBD_CMD_WRITE:
		return r->length;
	case NBD_CMD_CACHE:
		return r->length < c->max_payload ? r->length : c->max_payload;
	case NBD_CMD_TRIM:
	case NBD_CMD_WRITE_ZEROES:
		n = (r->flags & NBD_CMD_FLAG_NO_HOLE) ? NBD_ZERO_WINDOW : 2;
		return r->length < n * osz ? r->length : n * osz;
	default:
		return 0;
	}
}

/* A claim that cannot be met (clients that do not read their replies pin
 * more of the total than the head could ever go with) must not lock the
 * others out for good (review-nbdfair F2): it holds for
 * NBD_CLAIM_HOLD_NS, then lapses for NBD_CLAIM_LAPSE_NS (the others go
 * as if nobody waited: as before the queue), then holds again, and so on
 * while the head waits. A total that can drain does so within
 * milliseconds while the claim holds, so the head still gets through;
 * a command the old rule admits waits at most NBD_CLAIM_HOLD_NS plus a
 * waiter's 1 s look behind a claim that cannot be met. The lapse is
 * long enough for a waiter looking once a second to see it. */
#define NBD_CLAIM_HOLD_NS  (2ULL * 1000000000ULL)
#define NBD_CLAIM_LAPSE_NS (2ULL * 1000000000ULL)

/* Whether the standing claim (claim non-zero) holds now, or lapses. Any
 * thread. */
/* A connection's fair share of the budget of all connections: it may
 * always have this much in flight (nbd_admit). */
static uint64_t nbd_share(const struct vlmc *v)
{
	return v->nbd_total_bytes / (2 * (uint64_t)v->nbd_max_conns);
}

/* Whether cost more bytes fit in the budget of all connections with
 * total in flight, leaving room bytes for a waiting head's claim (0: no
 * claim, or it lapses); with no claim a command alone always fits. */
static bool nbd_total_fits(const struct vlmc *v, uint64_t total, uint64_t cost,
			   uint64_t room)
{
	if (!room)
		return !total || total + cost <= v->nbd_total_bytes;
	return total + cost + room <= v->nbd_total_bytes;
}

static bool nbd_claim_holds(struct vlmc_nbd *nbd)
{
	uint64_t since = __atomic_load_n(&nbd->claim_ns, __ATOMIC_SEQ_CST);

	return (xseg_now_ns() - since) %
		   (NBD_CLAIM_HOLD_NS + NBD_CLAIM_LAPSE_NS) <
	       NBD_CLAIM_HOLD_NS;
}

/* A new head claims (or the queue empties: claim 0); under tlock. */
static void nbd_tq_claim(struct vlmc_nbd *nbd)
{
	__atomic_store_n(&nbd->claim_ns, xseg_now_ns(), __ATOMIC_SEQ_CST);
	__atomic_store_n(&nbd->claim, nbd->thead ? nbd->thead->tcost : 0,
			 __ATOMIC_SEQ_CST);
}

/* The queue of connections waiting for the total budget (see
 * nbd_admit). Whether c's head command may go, c in the queue (it joins
 * at the tail if not yet in it); under nbd->tlock, reader only.
 * No lost wake-up: claim is non-zero from the first join (which stores
 * it) until the queue empties, and this looks at the counters after that
 * store; replies decrement them before they load claim (all seq_cst;
 * nbd_send_replies). So a reply is either seen here, or it sees the
 * claim and signals, under tlock (which c holds from here until it
 * sleeps: nbd_tq_wait), the head, and c itself if the reply was its own
 * (nbd_tq_wake). A waiter behind the head goes on its share, on its own
 * replies, when its turn comes (nbd_tq_leave signals it), or while the
 * claim lapses as the old rule lets it (replies then wake every waiter;
 * a lapse that begins is seen at the waiter's next 1 s look). */
static bool nbd_tq_check(struct vlmc_conn *c)
{
	struct vlmc *v = c->v;
	struct vlmc_nbd *nbd = v->nbd;
	uint64_t bytes, total, share, room;
	bool head;

	if (!c->tqueued) {
		c->tcost = c->head_cost;
		c->tnext = NULL;
		c->tprev = nbd->ttail;
		if (nbd->ttail)
			nbd->ttail->tnext = c;
		else
			nbd->thead = c;
		nbd->ttail = c;
		c->tqueued = true;
		c->tlapse_logged = false;
		if (nbd->thead == c)
			nbd_tq_claim(nbd);
		__atomic_add_fetch(&v->st_nbd_total_waits, 1, __ATOMIC_RELAXED);
	}
	bytes = __atomic_load_n(&c->inflight_bytes, __ATOMIC_SEQ_CST);
	total = __atomic_load_n(&v->nbd_total_inflight, __ATOMIC_SEQ_CST);
	share = nbd_share(v);
	head = nbd->thead == c;
	/* the head's claim is its own room; a lapsed claim leaves none */
	room = head || !nbd_claim_holds(nbd) ? 0 : nbd->thead->tcost;
	if (bytes + c->tcost <= share ||
	    nbd_total_fits(v, total, c->tcost, room) ||
	    (head && total <= v->nbd_total_bytes / 2))
		c->tgranted = true;
	if (head && !c->tgranted && !c->tlapse_logged &&
	    !nbd_claim_holds(nbd)) {
		c->tlapse_logged = true;
		peer_warn("nbd: %s: a command of %" PRIu64
			  " bytes has waited %llu s for the budget of all "
			  "connections (%" PRIu64 " of %" PRIu64
			  " bytes in flight, pinned by clients that do not "
			  "read their replies?): its claim lapses now and "
			  "then, the others go as if nobody waited",
			  c->vol->m.name, c->tcost,
			  NBD_CLAIM_HOLD_NS / 1000000000ULL, total,
			  v->nbd_total_bytes);
	}
	return c->tgranted;
}

static bool nbd_tq_admit(struct vlmc_conn *c)
{
	struct vlmc_nbd *nbd = c->v->nbd;
	bool ok;

	pthread_mutex_lock(&nbd->tlock);
	ok = nbd_tq_check(c);
	pthread_mutex_unlock(&nbd->tlock);
	return ok;
}

/* c's replies freed budget while someone waits for the total: wake the
 * head of the queue, and c's reader if it is in the queue (its own
 * bytes went down: its share may let it go). Any thread. */
static void nbd_tq_wake(struct vlmc_conn *c)
{
	struct vlmc_nbd *nbd = c->v->nbd;

	pthread_mutex_lock(&nbd->tlock);
	if (nbd->thead && !nbd_claim_holds(nbd)) {
		/* the claim lapses: any waiter may go by the old rule */
		for (struct vlmc_conn *w = nbd->thead; w; w = w->tnext)
			pthread_cond_signal(&w->tcond);
	} else {
		if (nbd->thead)
			pthread_cond_signal(&nbd->thead->tcond);
		if (c->tqueued && nbd->thead != c)
			pthread_cond_signal(&c->tcond);
	}
	pthread_mutex_unlock(&nbd->tlock);
}

/* c leaves the queue: its granted command is in flight (or refused), or
 * the connection closes; the next one claims and is woken. Reader only. */
static void nbd_tq_leave(struct vlmc_conn *c)
{
	struct vlmc_nbd *nbd = c->v->nbd;

	if (!c->tqueued)
		return;
	pthread_mutex_lock(&nbd->tlock);
	if (c->tprev)
		c->tprev->tnext = c->tnext;
	else
		nbd->thead = c->tnext;
	if (c->tnext)
		c->tnext->tprev = c->tprev;
	else
		nbd->ttail = c->tprev;
	if (!c->tprev) {
		nbd_tq_claim(nbd);
		if (nbd->thead)
			pthread_cond_signal(&nbd->thead->tcond);
	}
	c->tqueued = false;
	c->tgranted = false;
	pthread_mutex_unlock(&nbd->tlock);
}

/* The reader, in the queue, sleeps until its command may go or until
 * deadline (to notice vlmc's stop): woken on tcond by replies that free
 * the total while it is the head, its own replies (bytes and slots), and
 * its turn coming (nbd_tq_leave). */
static void nbd_tq_wait(struct vlmc_conn *c, const struct timespec *deadline)
{
	struct vlmc_nbd *nbd = c->v->nbd;

	pthread_mutex_lock(&nbd->tlock);
	/* the slot looked at again under tlock: a reply that frees it
	 * after this look signals tcond once we sleep */
	if (__atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) >=
		c->v->nbd_max_inflight ||
	    !nbd_tq_check(c))
		pthread_cond_timedwait(&c->tcond, &nbd->tlock, deadline);
	pthread_mutex_unlock(&nbd->tlock);
}

/* Whether the reader may take another command: a slot is free and, when
 * the command at the head of rbuf waits for the byte budget (head_cost),
 * it fits, or nothing is in flight (one command alone larger than the
 * budget still goes through, else it never would).
 *
 * The per-connection budgets add up to more than the segment heap
 * (32 x 64 MiB > 1 GiB; review12 F2), so the command must also fit in
 * the budget of all connections (v->nbd_total_bytes, T: half the heap by
 * default), where clients that do not read their replies could pin it
 * all. So that they cannot lock the others out, a connection may always
 * have its fair share in flight, share = T / (2 * nbd_max_conns), over
 * the total.
 *
 * A command larger than the share could still wait for ever while other
 * connections keep the total full with a steady stream of commands, each
 * taking what a reply just freed. So a connection whose command does not
 * fit the total, with at most its share in flight itself, joins a queue
 * (nbd_tq_check); the queue's head claims its command's bytes
 * (nbd->claim), and every other command then passes only within its
 * share or with room left for the claim (total + cost + claim <= T): the
 * total drains until the head fits (total + cost <= T), or, for a command
 * larger than T / 2, until it is at most half full (the shares alone can
 * keep it there: the N connections' shares add up to T / 2). Heads are
 * served in the order they came. A connection over its share does not
 * queue (the waiter's own unread replies could then hold the others to
 * their shares for ever): its own replies wake it, and once they bring it
 * within its share it queues like the others. The heap NBD can pin stays
 * within 1.5 x T, or T plus one command larger than T / 2 (it goes once
 * the total is half full, and the shares come on top), plus at most one
 * WRITE between its grant and its accounting (nbd_submit). The head
 * gives its claim up as soon as its bytes are counted, and before
 * anything that can block on its own client (nbd_submit). A head whose
 * total never drains (clients that do not read their replies pin it)
 * holds the others to their shares and to what the total has left
 * beyond its claim only while its claim holds: it lapses every
 * NBD_CLAIM_HOLD_NS for NBD_CLAIM_LAPSE_NS (nbd_claim_holds), and the
 * others then go by the old rule. */
static bool nbd_admit(struct vlmc_conn *c)
{
	struct vlmc *v = c->v;
	uint64_t bytes, total, share, claim;

	if (__atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) >=
	    v->nbd_max_inflight)
		return false;
	if (!c->head_cost || c->tgranted)
		return true;
	bytes = __atomic_load_n(&c->inflight_bytes, __ATOMIC_SEQ_CST);
	if (bytes && bytes + c->head_cost > v->nbd_inflight_bytes)
		return false;
	if (c->tqueued)
		return nbd_tq_admit(c);
	share = nbd_share(v);
	if (bytes + c->head_cost <= share)
		return true;
	total = __atomic_load_n(&v->nbd_total_inflight, __ATOMIC_SEQ_CST);
	claim = __atomic_load_n(&v->nbd->claim, __ATOMIC_SEQ_CST);
	if (claim && !nbd_claim_holds(v->nbd))
		claim = 0; /* it lapses: the old rule */
	if (nbd_total_fits(v, total, c->head_cost, claim))
		return true;
	if (bytes > share)
		return false; /* its own replies wake it */
	return nbd_tq_admit(c);
}

/* How long between two ENOMEM lines of one connection. */
#define NBD_ENOMEM_LOG_NS (10ULL * 1000000000ULL)

/* A command failed with ENOMEM (no request or heap for it): say so, at
 * most once per NBD_ENOMEM_LOG_NS per connection (a client retrying in
 * a loop must not flood the log). Any thread. */
static void nbd_log_enomem(struct vlmc_conn *c, unsigned type, uint64_t len)
{
	uint64_t now = xseg_now_ns();
	uint64_t last = __atomic_load_n(&c->enomem_logged_ns, __ATOMIC_RELAXED);

	if (last && now - last < NBD_ENOMEM_LOG_NS)
		return;
	if (!__atomic_compare_exchange_n(&c->enomem_logged_ns, &last, now,
					 false, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	peer_warn("nbd: %s: command %u length %" PRIu64
		  " failed: no segment memory (ENOMEM; %" PRIu64
		  " bytes in flight on all connections)",
		  c->vol->m.name, type, len,
		  __atomic_load_n(&c->v->nbd_total_inflight, __ATOMIC_RELAXED));
}

/* Start a valid command, its object requests' wake-ups noted in the
 * reader's batch sb (flushed here before anything that may block, and by
 * nbd_transmission once the buffered commands are submitted). Returns 0,
 * or -1 when the connection must close. */
static int nbd_submit(struct vlmc_conn *c, const struct nbd_request *r,
		      uint64_t cost, struct xseg_sigbatch *sb)
{
	struct vlmc *v = c->v;
	enum vlmc_io_op op;
	struct vlmc_io *io;
	uint64_t len = r->length;

	switch (r->type) {
	case NBD_CMD_READ:
	case NBD_CMD_CACHE:
		op = VLMC_IO_READ;
		break;
	case NBD_CMD_WRITE:
		op = VLMC_IO_WRITE;
		break;
	case NBD_CMD_FLUSH:
		op = VLMC_IO_FLUSH;
		break;
	case NBD_CMD_BLOCK_STATUS:
		op = VLMC_IO_STATUS;
		break;
	default: /* TRIM, WRITE_ZEROES */
		op = VLMC_IO_ZERO;
		break;
	}
	/* A command granted at the head of the queue for the total
	 * (nbd_admit) keeps its claim until its bytes are in the total,
	 * below, but never while it may block on its own client
	 * (review-nbdfair F1: a payload the client stalls, an error reply
	 * it does not read would keep the claim, and every command larger
	 * than its share waiting, for as long as the client likes). So a
	 * refusal leaves the queue first, and so does a WRITE, whose thaw
	 * wait and payload come before its bytes are counted: between the
	 * two the total can go over by that one WRITE, as before the
	 * queue. */
	if (op == VLMC_IO_WRITE)
		nbd_tq_leave(c);
	/* fenced after a write-back loss: this connection only gets EIO
	 * (one relaxed load of a word of the volume) */
	if (vlmc_wbloss_fenced(&c->vol->wb, c->wb.gen)) {
		__atomic_add_fetch(&v->wb.cmds_eio, 1, __ATOMIC_RELAXED);
		nbd_tq_leave(c);
		/* a FLUSH that fails here reports the fence (wbloss.h,
		 * vlmc_wbloss_flush_report): the next one, on any
		 * connection, goes by the other rules */
		if (r->type == NBD_CMD_FLUSH)
			vlmc_wbloss_flush_report(&c->vol->wb);
		if (r->type == NBD_CMD_WRITE &&
		    nbd_take_payload(c, NULL, len, sb))
			return -1;
		return nbd_error_reply(c, r->type, NBD_EIO, r->cookie, sb);
	}
	/* With NO_HOLE zeroes must be written, which is never fast: fail
	 * at once, as FAST_ZERO asks, having changed nothing. */
	if ((r->flags & NBD_CMD_FLAG_FAST_ZERO) &&
	    (r->flags & NBD_CMD_FLAG_NO_HOLE)) {
		nbd_tq_leave(c);
		return nbd_error_reply(c, r->type, NBD_ENOTSUP, r->cookie, sb);
	}
	/* CACHE is advisory: warm at most one maximal read's worth. A
	 * status reply may cover less than asked (the client asks again
	 * from where it ends): look at a bounded number of objects. */
	if (r->type == NBD_CMD_CACHE && len > c->max_payload)
		len = c->max_payload;
	if (op == VLMC_IO_STATUS) {
		uint64_t osz = c->vol->m.obj_size;
		uint64_t end = (r->offset / osz + NBD_STATUS_MAX_OBJECTS) * osz;

		if (end - r->offset < len)
			len = end - r->offset;
	}
	io = vlmc_io_alloc(v, op == VLMC_IO_FLUSH ? NULL : c->vol, op,
			   r->offset, len);
	if (io && op == VLMC_IO_READ && r->type == NBD_CMD_READ) {
		if (io->nr_parts <= NBD_KEEP_MAX_PARTS) {
			io->keep_replies = true; /* sent from the segment */
		} else {
			io->buf = malloc(len);
			if (!io->buf) {
				vlmc_io_free(io);
				io = NULL;
			}
		}
	}
	if (io && op == VLMC_IO_STATUS) {
		io->buf = malloc(4 + 8 * io->nr_parts);
		if (!io->buf) {
			vlmc_io_free(io);
			io = NULL;
		} else
			io->xflags = r->flags & NBD_CMD_FLAG_REQ_ONE;
	}
	if (io) {
		io->port = c->port;
		/* the connection's volume and generation, FLUSH too */
		io->fence_vol = c->vol;
		io->fence_gen = c->wb.gen;
		io->fence_sess = &c->wb;
	}
	/* review14 m2: a WRITE takes its object requests (up to
	 * NBD_MAX_PARTS) before it enters the volume, to receive its
	 * payload into them. Taken while the volume is frozen they would be
	 * held until the thaw: a few such writers could hold the pool the
	 * snapshot's COPYs need, failing it ENOMEM. So wait for the thaw
	 * first (not entered: the drain does not wait for this command). A
	 * freeze that begins after this look finds the command at
	 * vlmc_vol_try_enter below, its requests taken: only the commands
	 * between the two looks. */
	if (io && op == VLMC_IO_WRITE)
		nbd_wait_thaw(c, io->vol, sb);
	if (io && op == VLMC_IO_WRITE) {
		io->xflags = (r->flags & NBD_CMD_FLAG_FUA) ? XSEG_F_FUA : 0;
		/* the payload goes straight into the object requests */
		if (vlmc_io_prep(io, sb)) {
			vlmc_io_free(io);
			io = NULL;
		}
	}
	if (op == VLMC_IO_ZERO && io) {
		io->xflags = (r->flags & NBD_CMD_FLAG_FUA) ? XSEG_F_FUA : 0;
		io->no_hole = r->type == NBD_CMD_WRITE_ZEROES &&
			      (r->flags & NBD_CMD_FLAG_NO_HOLE);
		io->zero_check = r->type == NBD_CMD_WRITE_ZEROES &&
				 (r->flags & NBD_CMD_FLAG_FAST_ZERO);
		if (io->nr_parts > NBD_ZERO_WINDOW)
			io->window = NBD_ZERO_WINDOW;
	}
	if (!io) {
		nbd_tq_leave(c);
		if (r->type == NBD_CMD_WRITE &&
		    nbd_take_payload(c, NULL, len, sb))
			return -1;
		nbd_log_enomem(c, r->type, len);
		return nbd_error_reply(c, r->type, NBD_ENOMEM, r->cookie, sb);
	}
	if (op == VLMC_IO_WRITE) {
		for (uint64_t i = 0; i < io->nr_parts; i++) {
			if (nbd_take_payload(c, vlmc_io_part_data(io, i),
					     io->parts[i].len, sb)) {
				vlmc_io_put_replies(io);
				vlmc_io_free(io);
				return -1;
			}
		}
	}
	((struct nbd_reply_hdr *)io->scratch)->type = r->type;
	((struct nbd_reply_hdr *)io->scratch)->cost = (uint32_t)cost;
	io->done = nbd_io_done;
	io->arg = c;
	io->arg2 = r->cookie;
	__atomic_add_fetch(&c->inflight_bytes, cost, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&v->nbd_total_inflight, cost, __ATOMIC_SEQ_CST);
	/* counted: the claim goes to the next in the queue, before the
	 * volume's freeze can hold this command */
	nbd_tq_leave(c);
	/* park_max is the reader's own: this thread writes it */
	if (__atomic_add_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST) ==
		c->park_max + 1 &&
	    c->park_max) {
		pthread_mutex_lock(&c->lock);
		pthread_cond_signal(&c->ccond);
		pthread_mutex_unlock(&c->lock);
	}
	if (io->vol && !vlmc_vol_try_enter(io->vol)) {
		/* frozen by a snapshot: its drain needs our replies, and the
		 * replies need the requests of the batch signalled */
		__atomic_add_fetch(&v->st_nbd_thaw_waits, 1, __ATOMIC_RELAXED);
		xseg_sigbatch_flush(v->seg, sb);
		nbd_completer_on(c, true);
		vlmc_vol_enter(io->vol);
		nbd_completer_on(c, false);
	}
	vlmc_io_submit(io, sb);
	return 0;
}

/* Stop the reader's spinning for NBD_SPIN_BACKOFF polls (its spin ran
 * out: the store is slow, or the machine too loaded for the store to run
 * while the reader spins), and send the completer back to the port, where
 * it waits for the replies as with --nbd-spin 0. Reader only. */
#define NBD_SPIN_BACKOFF 64
static void nbd_spin_back_off(struct vlmc_conn *c)
{
	c->spin_backoff = NBD_SPIN_BACKOFF;
	pthread_mutex_lock(&c->lock);
	__atomic_store_n(&c->park_max, 0, __ATOMIC_RELAXED);
	pthread_cond_signal(&c->ccond);
	pthread_mutex_unlock(&c->lock);
}

/* Poll for replies and for more commands, without sleeping. With at most
 * park_max commands in flight (queue depth 1) and --nbd-spin set, the
 * reader waits for their replies itself, polling the port for up to
 * spin_ns (with --nbd-spin 0 it hands them to the parked completer before
 * it blocks, nbd_serve): it is awake anyway,
 * and a reply caught this way is sent without waking the completer (one
 * sleep and wake-up per command less). With nothing in flight, or more
 * than park_max, it does not spin: the next command is the client's,
 * which needs the CPU to send it, and above park_max the completer takes
 * the replies. While it polls the port it looks at the socket every
 * NBD_POLL_SOCKET_EVERY polls (a recv is a system call; a command that
 * arrives meanwhile waits at most that long; at queue depth 1 none
 * comes before the reply), and between polls it yields the CPU (on a
 * loaded machine the store that owes the reply may be waiting for it; on
 * an idle one sched_yield returns at once). A spin that runs out backs
 * spinning off (nbd_spin_back_off): where the store does not answer
 * within the spin, a failed spin costs more than it saves (the completer
 * is woken on top). With nothing in flight it returns at once (the
 * blocking recv that follows sees what is there); otherwise, and with
 * park_max 0, the socket is looked at once more before the reader
 * sleeps. Returns 1 when a command may be buffered (process it), 0 when
 * the reader should block, -1 when the connection must close. */
#define NBD_POLL_SOCKET_EVERY 64
static int nbd_poll(struct vlmc_conn *c)
{
	uint64_t spin = c->v->nbd_spin_ns;
	uint64_t deadline = 0;
	unsigned polls = 0, park_max;

	if (c->spin_backoff && !--c->spin_backoff)
		__atomic_store_n(&c->park_max, NBD_PARK_MAX, __ATOMIC_RELAXED);
	park_max = __atomic_load_n(&c->park_max, __ATOMIC_RELAXED);
	for (;;) {
		unsigned inflight;
		bool slot, spinning, look;

		inflight = __atomic_load_n(&c->inflight, __ATOMIC_RELAXED);
		/* above park_max the completer reaps and sends: the reader
		 * stays off its locks; with --nbd-spin 0 it never polls */
		spinning = spin && inflight && inflight <= park_max;
		if (spinning) {
			unsigned got = nbd_reap(c);

			if (got) {
				__atomic_add_fetch(&c->v->st_nbd_reader_replies,
						   got, __ATOMIC_RELAXED);
				inflight = __atomic_load_n(&c->inflight,
							   __ATOMIC_RELAXED);
				spinning = inflight && inflight <= park_max;
			}
		}
		if (__atomic_load_n(&c->wdead, __ATOMIC_RELAXED))
			return -1;
		slot = nbd_admit(c);
		if (slot && c->head_cost)
			return 1; /* the head command fits now */
		if (slot && nbd_buffered(c) >= NBD_REQUEST_LEN)
			return 1;
		if (spinning)
			look = ++polls % NBD_POLL_SOCKET_EVERY == 0;
		else
			look = inflight || !park_max;
		if (slot && look) {
			ssize_t n = nbd_fill(c, false);

			if (n > 0)
				return 1;
			if (n == 0)
				return -1;
		}
		if (!spinning)
			return 0;
		if (!deadline) {
			deadline = xseg_now_ns() + spin;
		} else if (xseg_now_ns() >= deadline) {
			nbd_spin_back_off(c);
			return 0;
		}
		sched_yield();
	}
}

/* nbd_transmission's loop: returns when the connection must close. */
static void nbd_serve(struct vlmc_conn *c, struct xseg_sigbatch *sb)
{
	bool throttled = false; /* the head command was counted */

	for (;;) {
		struct nbd_request r;
		uint32_t err;
		int rc;

		/* every complete command buffered, while slots and the
		 * byte budget last */
		while (nbd_buffered(c) >= NBD_REQUEST_LEN) {
			enum nbd_verdict verdict;
			uint64_t cost = 0;

			c->head_cost = 0;
			if (!nbd_admit(c))
				break;
			if (nbd_parse_request(c->rbuf + c->rpos, &r))
				return; /* bad magic: must disconnect */
			verdict = nbd_check_request(&r, c->size, c->caps, &err);
			/* the volume's own maximum (nbd_max_payload), under
			 * the protocol's: refused at once, before any request
			 * of the pool is taken; a WRITE's payload is skipped */
			if (verdict == NBD_DO &&
			    (r.type == NBD_CMD_READ ||
			     r.type == NBD_CMD_WRITE) &&
			    r.length > c->max_payload) {
				verdict = NBD_REFUSE;
				err = r.type == NBD_CMD_READ ? NBD_EOVERFLOW
							     : NBD_EINVAL;
			}
			if (verdict == NBD_DO && r.type != NBD_CMD_DISC) {
				cost = nbd_cost(c, &r);
				c->head_cost = cost;
				if (!nbd_admit(c)) {
					/* leave it (and its payload) in
					 * the socket until replies free
					 * budget: back-pressure */
					if (!throttled)
						__atomic_add_fetch(
						    &c->v->st_nbd_throttled, 1,
						    __ATOMIC_RELAXED);
					throttled = true;
					break;
				}
				c->head_cost = 0;
			}
			throttled = false;
			c->rpos += NBD_REQUEST_LEN;
			switch (verdict) {
			case NBD_DISCONNECT:
				peer_warn("nbd: %s: command %u length %" PRIu32
					  " refused, disconnecting",
					  c->vol->m.name, r.type, r.length);
				return;
			case NBD_REFUSE:
				if (r.type == NBD_CMD_WRITE &&
				    nbd_take_payload(c, NULL, r.length, sb))
					return;
				if (nbd_error_reply(c, r.type, err, r.cookie,
						    sb))
					return;
				continue;
			case NBD_DO:
				break;
			}
			if (r.type == NBD_CMD_DISC)
				return;
			rc = nbd_submit(c, &r, cost, sb);
			/* nbd_submit left the queue (its bytes counted, a
			 * WRITE, a refusal); any path it returns by without
			 * leaving passes the claim on here */
			nbd_tq_leave(c);
			if (rc)
				return;
		}
		/* The buffered commands are submitted: one wake-up of the
		 * next port for all of them, and the batch is empty before
		 * nbd_poll (which may return 0: sleep) and the waits below. */
		xseg_sigbatch_flush(c->v->seg, sb);
		rc = nbd_poll(c);
		if (rc < 0)
			return;
		if (rc > 0)
			continue;
		/* Nothing for a while: sleep on the socket (or for a
		 * slot), the completer looking after the replies (handed
		 * over first: the send below may block on the client).
		 * Replies this thread completed (refused at submission) go
		 * out before it sleeps. */
		nbd_completer_on(c, true);
		nbd_send_replies(c);
		pthread_mutex_lock(&c->lock);
		__atomic_store_n(&c->slot_waiting, true, __ATOMIC_SEQ_CST);
		/* Replies free slots and budget. If they never come (a
		 * store that lost them), vlmc's stop must still get
		 * through: look at it now and then, and leave, so that
		 * nbd_conn_close's bounded drain runs (review 5, R5-2). */
		while (!nbd_admit(c) && !__atomic_load_n(&c->v->nbd->stopping,
							 __ATOMIC_ACQUIRE)) {
			/* c->cond and tcond run on CLOCK_MONOTONIC: a step of
			 * the wall clock does not delay the look at the stop */
			struct timespec ts =
			    xtime_in(CLOCK_MONOTONIC, 1000000000ULL);

			if (!c->tqueued) {
				pthread_cond_timedwait(&c->cond, &c->lock, &ts);
				continue;
			}
			/* in the queue for the total: what frees it signals
			 * tcond, under nbd->tlock (not taken under c->lock
			 * by wakers) */
			pthread_mutex_unlock(&c->lock);
			nbd_tq_wait(c, &ts);
			pthread_mutex_lock(&c->lock);
		}
		__atomic_store_n(&c->slot_waiting, false, __ATOMIC_RELAXED);
		if (!nbd_admit(c)) { /* stopping */
			pthread_mutex_unlock(&c->lock);
			nbd_completer_on(c, false);
			return;
		}
		pthread_mutex_unlock(&c->lock);
		rc = nbd_buffered(c) >= NBD_REQUEST_LEN ? 1
		     : nbd_fill(c, true) > 0		? 1
							: 0;
		nbd_completer_on(c, false);
		if (!rc)
			return;
	}
}

/*
 * The reader: commands from the socket to the next port. Signal batching:
 * the object requests of all the commands one recv brought in are
 * submitted with one wake-up of the next port (sb), sent when the
 * buffered commands are submitted, before anything that may block (a
 * socket read or write, a frozen volume, a free request: nbd_submit,
 * nbd_take_payload, nbd_error_reply, vlmc_get_prep) and before leaving.
 * So sb is always empty while the reader polls, sleeps or closes.
 */
static void nbd_transmission(struct vlmc_conn *c)
{
	struct xseg_sigbatch sb;

	xseg_sigbatch_init(&sb);
	vlmc_set_wait_hook(nbd_reader_wait, c);
	nbd_serve(c, &sb);
	/* a connection that closes while it waits for the total lets the
	 * next one claim it */
	nbd_tq_leave(c);
	vlmc_set_wait_hook(NULL, NULL);
	/* the connection closes: nbd_conn_close waits for every reply */
	xseg_sigbatch_flush(c->v->seg, &sb);
}

/* Wait until every command of c is answered (c->lock held). While vlmc
 * runs, for as long as it takes; once it stops, for at most
 * --nbd-stop-timeout: a store that lost replies must not keep vlmc (and
 * `xsegctl stack stop`) from exiting. Returns false when it gave up. */
static bool nbd_drain(struct vlmc_conn *c)
{
	uint64_t deadline = 0;

	while (__atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST)) {
		struct timespec ts;
		uint64_t now = xseg_now_ns();

		if (!deadline &&
		    __atomic_load_n(&c->v->nbd->stopping, __ATOMIC_ACQUIRE))
			deadline = now + c->v->nbd_stop_ns;
		if (deadline && now >= deadline)
			return false;
		/* wake up now and then to notice the stop (c->cond runs
		 * on CLOCK_MONOTONIC) */
		ts = xtime_in(CLOCK_MONOTONIC, 1000000000ULL);
		pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	}
	return true;
}

static void nbd_conn_close(struct vlmc_conn *c)
{
	struct vlmc_nbd *nbd = c->v->nbd;
	bool abandon = false;

	if (c->have_port) {
		/* Every command must be answered before we let go. */
		pthread_mutex_lock(&c->lock);
		c->completer_on = true;
		pthread_cond_signal(&c->ccond);
		__atomic_store_n(&c->slot_waiting, true, __ATOMIC_SEQ_CST);
		abandon = !nbd_drain(c);
		c->stop_completer = true;
		pthread_cond_signal(&c->ccond);
		pthread_mutex_unlock(&c->lock);
		xseg_kick(c->v->seg, c->port);
		pthread_join(c->completer, NULL);
		if (abandon) {
			/* Replies may still come to the port: keep it (it
			 * is reaped with the process), and c, which their
			 * I/Os point at; nobody receives them any more.
			 * The static port stays bound too, so that a vlmc
			 * started before this one's exit still fences
			 * these commands (review23y F1). */
			peer_keep_port_at_exit(c->v->p);
			peer_err(
			    "nbd: %s: %u command(s) never answered by "
			    "port %" PRIu32 " after %" PRIu64
			    " ms: connection given up",
			    c->vol->m.name,
			    __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST),
			    c->v->next_port, c->v->nbd_stop_ns / 1000000);
		} else {
			xseg_release_port(c->v->seg, c->port);
		}
	} else if (c->port_only) {
		xseg_release_port(c->v->seg, c->port);
	}
	if (c->vol) {
		/* a stale session stops holding the volume's FLUSHes back
		 * here, also when abandoned (its completer is joined: none
		 * of its commands completes from now on) */
		vlmc_wbloss_detach(&c->vol->wb, &c->wb);
		__atomic_sub_fetch(&c->vol->nbd_conns, 1, __ATOMIC_RELAXED);
		vlmc_vol_put(c->vol);
	}
	if (c->active)
		__atomic_sub_fetch(&c->v->st_nbd_conns, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&nbd->lock);
	if (c->active)
		nbd->nr_active--;
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
	if (abandon)
		return;
	pthread_mutex_destroy(&c->wlock);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->olock);
	pthread_cond_destroy(&c->cond);
	pthread_cond_destroy(&c->ccond);
	pthread_cond_destroy(&c->tcond);
	free(c->rbuf);
	free(c);
}

/*
 * Every connection takes a dynamic port of its own. xseg_alloc_port
 * answers -EAGAIN at once when the only free dynamic ports are draining:
 * a dead owner's requests are still held by live peers, and the port is
 * not handed out until they are answered (xseg.h, xseg_bind_port), which
 * usually takes a moment (a restarted peer's predecessor's requests being
 * failed back or served). So a connection waits for one, up to
 * NBD_PORT_WAIT_NS, looking every 100 ms (as peer_bind does), and gives
 * up at once when vlmc stops. Other errors (-ENOSPC: every dynamic port
 * owned by a live process) fail at once. Returns 0 and c->port, or the
 * negative errno (logged).
 */
#define NBD_PORT_WAIT_NS (5ULL * 1000000000ULL)

static int nbd_alloc_port(struct vlmc_conn *c)
{
	uint64_t deadline = xseg_now_ns() + NBD_PORT_WAIT_NS;
	bool said = false;
	int rc;

	for (;;) {
		rc = xseg_alloc_port(c->v->seg, "vlmc-nbd", &c->port);
		if (rc != -EAGAIN)
			break;
		if (__atomic_load_n(&c->v->nbd->stopping, __ATOMIC_ACQUIRE) ||
		    xseg_now_ns() >= deadline)
			break;
		if (!said)
			peer_warn("nbd: connection to %s: every free dynamic "
				  "port of segment %s is draining (a dead "
				  "owner's requests are still being "
				  "answered); waiting up to %llu s",
				  c->vol->m.name, xseg_name(c->v->seg),
				  NBD_PORT_WAIT_NS / 1000000000ULL);
		said = true;
		usleep(100000);
	}
	if (rc == -EAGAIN &&
	    __atomic_load_n(&c->v->nbd->stopping, __ATOMIC_ACQUIRE))
		peer_warn("nbd: connection to %s closed while waiting for a "
			  "dynamic port: vlmc is stopping",
			  c->vol->m.name);
	else if (rc == -EAGAIN)
		peer_err("nbd: no dynamic port for a connection to %s: every "
			 "free one is still draining after %llu s (a dead "
			 "owner's requests are still held by a peer: xsegctl "
			 "list %s shows them): connection closed",
			 c->vol->m.name, NBD_PORT_WAIT_NS / 1000000000ULL,
			 xseg_name(c->v->seg));
	else if (rc)
		peer_err("nbd: no dynamic port for a connection to %s: %s",
			 c->vol->m.name, strerror(-rc));
	return rc;
}

static void *nbd_conn_main(void *arg)
{
	struct vlmc_conn *c = arg;
	int rc;

	/* A client that stalls in the handshake must not hold a thread
	 * for ever; once transmission starts, idle connections are fine. */
	if (nbd_handshake(c))
		goto out;
	/* from now on the listener leaves it alone (an idle connection in
	 * transmission is fine); one shut down a moment ago fails on its
	 * first read */
	pthread_mutex_lock(&c->v->nbd->lock);
	c->in_hs = false;
	pthread_mutex_unlock(&c->v->nbd->lock);
	/* only now: a connection in the handshake holds no buffer */
	c->rbuf = malloc(NBD_RBUF_SIZE);
	if (!c->rbuf)
		goto out;
	if (!c->port_only) { /* EXPORT_NAME: disconnect on failure */
		rc = nbd_alloc_port(c);
		if (rc)
			goto out;
		c->port_only = true;
	}
	rc = pthread_create(&c->completer, NULL, nbd_completer_main, c);
	if (rc)
		goto out; /* nbd_conn_close releases the port */
	c->port_only = false;
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
	int bufsz = NBD_SOCKBUF_SIZE;

	if (fd < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A 1 MiB reply in one writev without waiting for the client to
	 * drain the socket; best effort (capped by net.core.wmem_max). */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof(bufsz));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
	/* Bound the sockets still in the handshake too (each holds a
	 * thread until its deadline): past that, close the oldest one (a
	 * real client's handshake takes milliseconds, so the oldest is the
	 * likeliest to be stuck or hostile); only when every one is already
	 * closing, the new socket. */
	pthread_mutex_lock(&nbd->lock);
	if (nbd->nr_conns - nbd->nr_active >= NBD_HANDSHAKE_SLACK) {
		struct vlmc_conn *old = NULL;

		for (c = nbd->conns; c; c = c->next)
			if (c->in_hs &&
			    (!old || c->hs_deadline_ns < old->hs_deadline_ns))
				old = c;
		if (old) {
			old->in_hs = false;
			shutdown(old->fd, SHUT_RDWR);
		}
		pthread_mutex_unlock(&nbd->lock);
		__atomic_add_fetch(&v->st_nbd_refused, 1, __ATOMIC_RELAXED);
		peer_warn("nbd: %s: %d handshakes in progress",
			  old ? "oldest handshake closed" : "connection closed",
			  NBD_HANDSHAKE_SLACK);
		if (!old) {
			close(fd);
			return;
		}
	} else {
		pthread_mutex_unlock(&nbd->lock);
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->v = v;
	c->park_max = NBD_PARK_MAX;
	c->fd = fd;
	pthread_mutex_init(&c->wlock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->olock, NULL);
	/* the timed waits on cond and tcond take CLOCK_MONOTONIC
	 * deadlines (xtime_in) */
	xtime_cond_init_monotonic(&c->cond);
	pthread_cond_init(&c->ccond, NULL);
	xtime_cond_init_monotonic(&c->tcond);
	c->in_hs = true;
	c->hs_deadline_ns = xseg_now_ns() + NBD_HANDSHAKE_NS;
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

/* Shut down the handshakes past their deadline (listener, every poll
 * round): the connection's thread then fails its read or write and
 * closes. */
static void nbd_expire_handshakes(struct vlmc *v)
{
	struct vlmc_nbd *nbd = v->nbd;
	uint64_t now = xseg_now_ns();
	unsigned n = 0;

	pthread_mutex_lock(&nbd->lock);
	for (struct vlmc_conn *c = nbd->conns; c; c = c->next) {
		if (c->in_hs && now >= c->hs_deadline_ns) {
			c->in_hs = false;
			shutdown(c->fd, SHUT_RDWR);
			n++;
		}
	}
	pthread_mutex_unlock(&nbd->lock);
	if (n)
		peer_warn("nbd: %u handshake(s) closed: not done within %llu s",
			  n, NBD_HANDSHAKE_NS / 1000000000ULL);
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
		nbd_expire_handshakes(v);
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
	pthread_mutex_init(&nbd->tlock, NULL);
	v->nbd = nbd;
	if (!v->nbd_total_bytes) {
		struct xseg_info info;

		xseg_info(v->seg, &info);
		v->nbd_total_bytes = info.heap_bytes / 2;
		if (!v->nbd_total_bytes)
			v->nbd_total_bytes = 1;
	}
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
	peer_info("nbd on %s%s (%" PRIu64 " bytes in flight at most on all"
		  " connections)",
		  v->nbd_socket, v->nbd_tcp_port ? " and 127.0.0.1 (tcp)" : "",
		  v->nbd_total_bytes);
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
	pthread_mutex_destroy(&nbd->tlock);
	free(nbd);
	v->nbd = NULL;
}
