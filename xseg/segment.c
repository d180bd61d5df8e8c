/* SPDX-License-Identifier: MIT */
/*
 * xseg segment: create, join, leave, destroy; layout and header checks.
 */
#include "xseg_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XSEG_MAX_PORTS 65535u /* XSEG_NOMOVER (0xffff) is no port */
#define XSEG_MAX_DATA  (1ULL << 40)

_Static_assert(sizeof(struct xseg_shared_header) <= XSEG_HEADER_SIZE,
	       "header fits its page");
_Static_assert(sizeof(struct xseg_request) % 64 == 0, "requests aligned");
_Static_assert(sizeof(struct xseg_request) == 7 * 64,
	       "sent_op and its padding took padding of the last line: the "
	       "request did not grow");
/* sent_op shares line 2 with peer_priv, which get and prep write anyway:
 * a submit's store to it costs no extra line (review R2 of fence24) */
_Static_assert(offsetof(struct xseg_request, sent_op) / 64 == 2 &&
		   offsetof(struct xseg_request, peer_priv) / 64 == 2,
	       "sent_op in peer_priv's line");
/* 7 lines of queues, owner, counters and the unflushed count, then the
 * statistics area */
_Static_assert(sizeof(struct xseg_port) ==
		   7 * 64 + sizeof(struct xseg_stats_area),
	       "port layout");
_Static_assert(sizeof(struct xseg_port) % 64 == 0, "ports aligned");

static void xseg_err(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void xseg_err(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static bool is_pow2(uint64_t v)
{
	return v && (v & (v - 1)) == 0;
}

static uint64_t round_pow2(uint64_t v)
{
	uint64_t p = 2;

	while (p < v)
		p <<= 1;
	return p;
}

/* "/name" in out; -EINVAL for empty, too long or containing another '/'. */
static int xseg_normalize_name(const char *name, char *out)
{
	const char *s;
	size_t len;

	if (!name)
		return -EINVAL;
	s = name[0] == '/' ? name + 1 : name;
	len = strlen(s);
	if (len == 0 || len > XSEG_NAME_MAX - 2 || strchr(s, '/'))
		return -EINVAL;
	out[0] = '/';
	memcpy(out + 1, s, len + 1);
	return 0;
}

void xseg_config_default(struct xseg_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->size = 64ULL << 20;
	cfg->nr_static_ports = 16;
	cfg->nr_dynamic_ports = 48;
	cfg->nr_requests = 4096;
	cfg->free_cache = 64;
	cfg->default_data_size = 4096;
	cfg->max_targetlen = XSEG_MAX_TARGETLEN;
}

int xseg_compute_layout(const struct xseg_config *cfg, struct xseg_layout *lay)
{
	uint64_t nr_ports, off, qcap, per_port;

	nr_ports = (uint64_t)cfg->nr_static_ports + cfg->nr_dynamic_ports;
	if (nr_ports == 0 || nr_ports > XSEG_MAX_PORTS)
		return -EINVAL;
	if (cfg->nr_requests < 2 || cfg->nr_requests > XSEG_MAX_REQUESTS)
		return -EINVAL;
	if (cfg->free_cache != 0 &&
	    (!is_pow2(cfg->free_cache) || cfg->free_cache > (1u << 30)))
		return -EINVAL;
	if (cfg->default_data_size > XSEG_MAX_DATA)
		return -EINVAL;

	memset(lay, 0, sizeof(*lay));
	/* Twice the pool (review 3, F2): an index is on at most one queue
	 * per request plus stale ones (a reaper's second copy for a dead
	 * mover, a late enqueue after a fail-back), which the next dequeue
	 * drops; with no slack those could fill a reply queue and make a
	 * respond lose its answer. 4 bytes per slot, touched sparsely. */
	qcap = 2 * round_pow2(cfg->nr_requests);
	lay->queue_capacity = (uint32_t)qcap;
	lay->queue_bytes = align_up(xq_size(qcap), XSEG_ALIGN);
	if (cfg->free_cache)
		lay->free_queue_bytes =
		    align_up(xq_size(cfg->free_cache), XSEG_ALIGN);
	if (lay->queue_bytes == 0 ||
	    (cfg->free_cache && lay->free_queue_bytes == 0))
		return -EINVAL;

	off = XSEG_HEADER_SIZE;
	lay->ports_off = off;
	off += nr_ports * sizeof(struct xseg_port);
	off = align_up(off, XSEG_ALIGN);
	lay->queues_off = off;
	per_port = 2 * lay->queue_bytes + lay->free_queue_bytes;
	off += nr_ports * per_port;
	off = align_up(off, XSEG_ALIGN);
	lay->pool_off = off;
	lay->pool_bytes =
	    xobj_pool_size(cfg->nr_requests, sizeof(struct xseg_request));
	if (lay->pool_bytes == 0)
		return -EINVAL;
	off += align_up(lay->pool_bytes, XSEG_ALIGN);
	/* The heap starts on a page so buffers of a page stay page-aligned
	 * relative to each other (xheap's headers are 64 bytes). */
	off = align_up(off, 4096);
	lay->heap_off = off;
	if (cfg->size < off + 4096 || cfg->size % 4096 != 0)
		return -EINVAL;
	lay->heap_bytes = cfg->size - off;
	return 0;
}

uint64_t xseg_min_size(const struct xseg_config *cfg)
{
	struct xseg_config c = *cfg;
	struct xseg_layout lay;

	/* the largest page multiple: the layout's only check on the size is
	 * that it holds the fixed parts and a page of heap */
	c.size = UINT64_MAX & ~4095ULL;
	if (xseg_compute_layout(&c, &lay))
		return 0;
	return lay.heap_off + 4096;
}

uint64_t xseg_heap_bytes_for(const struct xseg_config *cfg, uint64_t datalen)
{
	if (!datalen)
		return 0;
	/* as xseg_prep_request asks the heap */
	return xheap_arena_bytes_for(datalen > cfg->default_data_size
					 ? datalen
					 : cfg->default_data_size);
}

uint64_t xseg_min_size_for_data(const struct xseg_config *cfg,
				uint64_t heap_bytes)
{
	uint64_t min = xseg_min_size(cfg), mem;

	if (!min)
		return 0;
	mem = xheap_mem_size_for(heap_bytes);
	if (!mem)
		return 0;
	/* the heap starts on a page (xseg_compute_layout) and takes the
	 * rest: min holds one page of it */
	return min - 4096 + ((mem + 4095) & ~4095ULL);
}

uint64_t xseg_max_size(const struct xseg_config *cfg)
{
	uint64_t min = xseg_min_size(cfg);

	/* the heap takes the rest of the segment from its page-aligned start,
	 * and a size is a page multiple: the largest page multiple of heap
	 * that xheap manages whole */
	if (!min)
		return 0;
	return min - 4096 + (XHEAP_MAX_SIZE & ~4095ULL);
}

uint64_t xseg_header_checksum(const struct xseg_shared_header *hdr)
{
	/* From the version on: the magic is written after the checksum, as
	 * the last step of creation, and is checked on its own. */
	const unsigned char *p = (const unsigned char *)hdr;
	size_t n = offsetof(struct xseg_shared_header, checksum);
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = offsetof(struct xseg_shared_header, version); i < n;
	     i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

uint64_t xseg_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int xseg_proc_stat_read(pid_t pid, struct xseg_proc_stat *ps)
{
	char path[64], buf[1024];
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	/* Only "no such file / process" proves the process is gone. EMFILE,
	 * ENFILE, ENOMEM, EACCES... say nothing about it: the caller must
	 * not reap a live peer because this process is short of fds. */
	if (fd < 0)
		return (errno == ENOENT || errno == ESRCH) ? -ESRCH : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0)
		n = (errno == ESRCH) ? -ESRCH : -errno;
	close(fd);
	if (n == 0)
		return -ESRCH; /* exited between open and read */
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	/* the kernel writes "PID (COMM) STATE ...": after the last ')',
	 * one blank, then fields 3 .. 52 separated by one blank each */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -EIO;
	/* 3 state; 4-8 ppid pgrp session tty_nr tpgid; 9-13 flags minflt
	 * cminflt majflt cmajflt; 14-15 utime stime; 16-21 cutime cstime
	 * priority nice num_threads itrealvalue; 22 starttime */
	if (sscanf(p + 2,
		   "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %" SCNu64
		   " %" SCNu64 " %*d %*d %*d %*d %d %*d %" SCNu64,
		   &ps->state, &ps->utime, &ps->stime, &ps->num_threads,
		   &ps->start_time) != 5)
		return -EIO;
	return 0;
}

int xseg_self_identity(struct xseg *seg)
{
	pid_t pid = getpid();
	struct xseg_proc_stat ps = {0};
	uint64_t start;
	int rc;

	if (seg->self_owner && seg->self_pid == pid)
		return 0;
	rc = xseg_proc_stat_read(pid, &ps);
	start = ps.start_time;
	/* No /proc at all: liveness falls back to kill(pid, 0). A transient
	 * failure (EMFILE...) must not be recorded as start time 0, which
	 * would keep a recycled pid "alive" forever: fail, retry later. */
	if (rc == -ESRCH)
		start = 0;
	else if (rc < 0)
		return rc;
	seg->self_pid = pid;
	seg->self_owner = ((uint64_t)(uint32_t)start << 32) | (uint64_t)pid;
	return 0;
}

uint32_t xseg_new_generation(struct xseg *seg)
{
	uint32_t g;

	do
		g = __atomic_add_fetch(&seg->hdr->epoch, 1, __ATOMIC_RELAXED);
	while (g == 0);
	return g;
}

/* Build the process-local handle for a verified mapping. */
static int xseg_handle_init(struct xseg *seg)
{
	struct xseg_shared_header *hdr = seg->hdr;
	uint64_t per_port;

	seg->nr_static = hdr->nr_static_ports;
	seg->nr_ports = hdr->nr_static_ports + hdr->nr_dynamic_ports;
	seg->nr_requests = hdr->nr_requests;
	seg->default_data_size = hdr->default_data_size;
	seg->pool = (struct xobj_pool *)(seg->base + hdr->pool_off);
	seg->heap = (struct xheap *)(seg->base + hdr->heap_off);
	seg->heap_off = hdr->heap_off;
	seg->heap_bytes = hdr->heap_bytes;
	seg->timestamps = true;
	seg->spin_ns = 0;
	seg->next_reap_ns = xseg_now_ns() + XSEG_REAP_PERIOD_NS;
	seg->ports = calloc(seg->nr_ports, sizeof(*seg->ports));
	if (!seg->ports)
		return -ENOMEM;
	per_port = 2 * hdr->queue_bytes + hdr->free_queue_bytes;
	for (uint32_t i = 0; i < seg->nr_ports; i++) {
		struct xseg_port_local *pl = &seg->ports[i];
		char *q = seg->base + hdr->queues_off + i * per_port;

		pl->port = (struct xseg_port *)(seg->base + hdr->ports_off +
						i * sizeof(struct xseg_port));
		pl->reqq = (struct xq *)q;
		pl->replyq = (struct xq *)(q + hdr->queue_bytes);
		pl->freeq = hdr->free_queue_bytes
				? (struct xq *)(q + 2 * hdr->queue_bytes)
				: NULL;
	}
	return xseg_self_identity(seg);
}

static int xseg_init_layout(struct xseg *seg, const struct xseg_config *cfg,
			    const struct xseg_layout *lay, char *errbuf,
			    size_t errlen)
{
	struct xseg_shared_header *hdr = seg->hdr;
	uint32_t nr_ports = cfg->nr_static_ports + cfg->nr_dynamic_ports;
	uint64_t per_port = 2 * lay->queue_bytes + lay->free_queue_bytes;
	int rc;

	for (uint32_t i = 0; i < nr_ports; i++) {
		struct xseg_port *p =
		    (struct xseg_port *)(seg->base + lay->ports_off +
					 i * sizeof(struct xseg_port));
		uint64_t qoff = lay->queues_off + i * per_port;

		memset(p, 0, sizeof(*p));
		p->path_next = XSEG_NOPORT;
		p->number = i;
		p->dynamic = i >= cfg->nr_static_ports;
		p->reqq_off = qoff;
		p->replyq_off = qoff + lay->queue_bytes;
		p->freeq_off =
		    lay->free_queue_bytes ? qoff + 2 * lay->queue_bytes : 0;
		rc = xq_init((struct xq *)(seg->base + p->reqq_off),
			     lay->queue_capacity, lay->queue_bytes);
		if (!rc)
			rc = xq_init((struct xq *)(seg->base + p->replyq_off),
				     lay->queue_capacity, lay->queue_bytes);
		if (!rc && p->freeq_off)
			rc = xq_init((struct xq *)(seg->base + p->freeq_off),
				     cfg->free_cache, lay->free_queue_bytes);
		if (rc) {
			xseg_err(errbuf, errlen,
				 "xseg %s: port %u: queue init failed: %s",
				 seg->name, i, strerror(-rc));
			return rc;
		}
	}
	rc = xobj_pool_init((struct xobj_pool *)(seg->base + lay->pool_off),
			    cfg->nr_requests, sizeof(struct xseg_request),
			    lay->pool_bytes);
	if (rc) {
		xseg_err(errbuf, errlen,
			 "xseg %s: request pool init failed: %s", seg->name,
			 strerror(-rc));
		return rc;
	}
	rc = xheap_init((struct xheap *)(seg->base + lay->heap_off),
			lay->heap_bytes);
	if (rc) {
		xseg_err(errbuf, errlen, "xseg %s: data heap init failed: %s",
			 seg->name, strerror(-rc));
		return rc;
	}

	memset(hdr, 0, sizeof(*hdr));
	hdr->version = XSEG_VERSION;
	hdr->header_size = XSEG_HEADER_SIZE;
	hdr->sizeof_request = sizeof(struct xseg_request);
	hdr->sizeof_port = sizeof(struct xseg_port);
	hdr->sizeof_header = sizeof(struct xseg_shared_header);
	hdr->max_targetlen = XSEG_MAX_TARGETLEN;
	hdr->size = cfg->size;
	hdr->nr_static_ports = cfg->nr_static_ports;
	hdr->nr_dynamic_ports = cfg->nr_dynamic_ports;
	hdr->nr_requests = cfg->nr_requests;
	hdr->free_cache = cfg->free_cache;
	hdr->default_data_size = cfg->default_data_size;
	hdr->queue_capacity = lay->queue_capacity;
	if (getrandom(&hdr->nonce, sizeof(hdr->nonce), 0) != sizeof(hdr->nonce))
		hdr->nonce = xseg_now_ns() ^ ((uint64_t)getpid() << 40);
	hdr->ports_off = lay->ports_off;
	hdr->queues_off = lay->queues_off;
	hdr->queue_bytes = lay->queue_bytes;
	hdr->free_queue_bytes = lay->free_queue_bytes;
	hdr->pool_off = lay->pool_off;
	hdr->pool_bytes = lay->pool_bytes;
	hdr->heap_off = lay->heap_off;
	hdr->heap_bytes = lay->heap_bytes;
	hdr->checksum = xseg_header_checksum(hdr);
	hdr->epoch = 0;
	/* Publish: a joiner that sees the magic sees everything above. */
	__atomic_store_n(&hdr->magic, XSEG_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int xseg_create(const char *name, const struct xseg_config *cfg,
		struct xseg **segp, char *errbuf, size_t errlen)
{
	struct xseg_layout lay;
	struct xseg *seg;
	void *map;
	int fd, rc;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (!cfg || !segp) {
		xseg_err(errbuf, errlen, "xseg: create: missing arguments");
		return -EINVAL;
	}
	seg = calloc(1, sizeof(*seg));
	if (!seg)
		return -ENOMEM;
	rc = xseg_normalize_name(name, seg->name);
	if (rc) {
		xseg_err(errbuf, errlen,
			 "xseg: create: bad segment name '%s' (1..250 "
			 "characters, no '/' after the first)",
			 name ? name : "(null)");
		free(seg);
		return rc;
	}
	rc = xseg_compute_layout(cfg, &lay);
	if (rc) {
		xseg_err(
		    errbuf, errlen,
		    "xseg %s: create: configuration does not fit: size %llu"
		    " (a multiple of 4096), %u+%u ports, %u requests, free "
		    "cache %u, default data %llu",
		    seg->name, (unsigned long long)cfg->size,
		    cfg->nr_static_ports, cfg->nr_dynamic_ports,
		    cfg->nr_requests, cfg->free_cache,
		    (unsigned long long)cfg->default_data_size);
		free(seg);
		return rc;
	}
	if (cfg->size > xseg_max_size(cfg)) {
		/* xheap names its blocks by 32-bit indexes of 64-byte units:
		 * it cannot use more, and a segment whose rest is never used
		 * is refused rather than made with less than was asked */
		xseg_err(errbuf, errlen,
			 "xseg %s: create: size %llu is above %llu, the largest"
			 " whose data heap can use every byte (%u requests; "
			 "the heap holds at most %llu bytes)",
			 seg->name, (unsigned long long)cfg->size,
			 (unsigned long long)xseg_max_size(cfg),
			 cfg->nr_requests, (unsigned long long)XHEAP_MAX_SIZE);
		free(seg);
		return -EFBIG;
	}
	fd = shm_open(seg->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		xseg_err(errbuf, errlen, "xseg %s: create: shm_open: %s",
			 seg->name, strerror(errno));
		free(seg);
		return rc;
	}
	if (ftruncate(fd, (off_t)cfg->size) < 0) {
		rc = -errno;
		xseg_err(errbuf, errlen, "xseg %s: create: ftruncate %llu: %s",
			 seg->name, (unsigned long long)cfg->size,
			 strerror(errno));
		goto err_unlink;
	}
	map = mmap(NULL, cfg->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		xseg_err(errbuf, errlen, "xseg %s: create: mmap %llu: %s",
			 seg->name, (unsigned long long)cfg->size,
			 strerror(errno));
		goto err_unlink;
	}
	close(fd);
	fd = -1;
	seg->base = map;
	seg->size = cfg->size;
	seg->hdr = map;
	rc = xseg_init_layout(seg, cfg, &lay, errbuf, errlen);
	if (!rc)
		rc = xseg_handle_init(seg);
	if (rc)
		goto err_unmap;
	*segp = seg;
	return 0;

err_unmap:
	munmap(seg->base, seg->size);
err_unlink:
	if (fd >= 0)
		close(fd);
	shm_unlink(seg->name);
	free(seg->ports);
	free(seg);
	return rc;
}

/* Check a mapped header; rc and a message on failure. */
static int xseg_verify(struct xseg *seg, uint64_t file_size, char *errbuf,
		       size_t errlen)
{
	const struct xseg_shared_header *hdr = seg->hdr;
	struct xseg_config cfg;
	struct xseg_layout lay;
	uint64_t magic = __atomic_load_n(&hdr->magic, __ATOMIC_ACQUIRE);

	if (magic != XSEG_MAGIC) {
		xseg_err(errbuf, errlen,
			 "xseg %s: not an xseg segment (bad magic %#llx; "
			 "corrupt or still being created)",
			 seg->name, (unsigned long long)magic);
		return -EPROTO;
	}
	if (hdr->version != XSEG_VERSION) {
		xseg_err(errbuf, errlen,
			 "xseg %s: layout version %u, this build speaks %u",
			 seg->name, hdr->version, XSEG_VERSION);
		return -EPROTO;
	}
	if (hdr->header_size != XSEG_HEADER_SIZE ||
	    hdr->sizeof_request != sizeof(struct xseg_request) ||
	    hdr->sizeof_port != sizeof(struct xseg_port) ||
	    hdr->sizeof_header != sizeof(struct xseg_shared_header) ||
	    hdr->max_targetlen != XSEG_MAX_TARGETLEN) {
		xseg_err(errbuf, errlen,
			 "xseg %s: structure sizes differ from this build "
			 "(request %u/%zu, port %u/%zu, header %u/%zu, "
			 "targetlen %u/%u)",
			 seg->name, hdr->sizeof_request,
			 sizeof(struct xseg_request), hdr->sizeof_port,
			 sizeof(struct xseg_port), hdr->sizeof_header,
			 sizeof(struct xseg_shared_header), hdr->max_targetlen,
			 XSEG_MAX_TARGETLEN);
		return -EPROTO;
	}
	if (hdr->checksum != xseg_header_checksum(hdr)) {
		xseg_err(errbuf, errlen,
			 "xseg %s: header checksum mismatch (corrupt header)",
			 seg->name);
		return -EPROTO;
	}
	if (hdr->size != file_size) {
		xseg_err(errbuf, errlen,
			 "xseg %s: header says %llu bytes, shm object has %llu",
			 seg->name, (unsigned long long)hdr->size,
			 (unsigned long long)file_size);
		return -EINVAL;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.size = hdr->size;
	cfg.nr_static_ports = hdr->nr_static_ports;
	cfg.nr_dynamic_ports = hdr->nr_dynamic_ports;
	cfg.nr_requests = hdr->nr_requests;
	cfg.free_cache = hdr->free_cache;
	cfg.default_data_size = hdr->default_data_size;
	if (xseg_compute_layout(&cfg, &lay) < 0 ||
	    lay.ports_off != hdr->ports_off ||
	    lay.queues_off != hdr->queues_off ||
	    lay.queue_bytes != hdr->queue_bytes ||
	    lay.free_queue_bytes != hdr->free_queue_bytes ||
	    lay.pool_off != hdr->pool_off ||
	    lay.pool_bytes != hdr->pool_bytes ||
	    lay.heap_off != hdr->heap_off ||
	    lay.heap_bytes != hdr->heap_bytes ||
	    lay.queue_capacity != hdr->queue_capacity) {
		xseg_err(errbuf, errlen,
			 "xseg %s: header layout inconsistent with its "
			 "configuration",
			 seg->name);
		return -EINVAL;
	}
	return 0;
}

int xseg_join(const char *name, struct xseg **segp, char *errbuf, size_t errlen)
{
	struct xseg *seg;
	struct stat st;
	void *map;
	int fd, rc;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (!segp) {
		xseg_err(errbuf, errlen, "xseg: join: missing arguments");
		return -EINVAL;
	}
	seg = calloc(1, sizeof(*seg));
	if (!seg)
		return -ENOMEM;
	rc = xseg_normalize_name(name, seg->name);
	if (rc) {
		xseg_err(errbuf, errlen, "xseg: join: bad segment name '%s'",
			 name ? name : "(null)");
		free(seg);
		return rc;
	}
	fd = shm_open(seg->name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		xseg_err(errbuf, errlen, "xseg %s: join: shm_open: %s",
			 seg->name, strerror(errno));
		free(seg);
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		xseg_err(errbuf, errlen, "xseg %s: join: fstat: %s", seg->name,
			 strerror(errno));
		close(fd);
		free(seg);
		return rc;
	}
	if ((uint64_t)st.st_size < XSEG_HEADER_SIZE) {
		xseg_err(errbuf, errlen,
			 "xseg %s: join: %lld bytes cannot hold an xseg header",
			 seg->name, (long long)st.st_size);
		close(fd);
		free(seg);
		return -EPROTO;
	}
	map = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	rc = map == MAP_FAILED ? -errno : 0;
	close(fd);
	if (rc) {
		xseg_err(errbuf, errlen, "xseg %s: join: mmap: %s", seg->name,
			 strerror(-rc));
		free(seg);
		return rc;
	}
	seg->base = map;
	seg->size = st.st_size;
	seg->hdr = map;
	rc = xseg_verify(seg, st.st_size, errbuf, errlen);
	if (!rc)
		rc = xseg_handle_init(seg);
	if (rc) {
		munmap(seg->base, seg->size);
		free(seg->ports);
		free(seg);
		return rc;
	}
	*segp = seg;
	return 0;
}

void xseg_leave(struct xseg *seg)
{
	if (!seg)
		return;
	munmap(seg->base, seg->size);
	free(seg->ports);
	free(seg);
}

int xseg_destroy(const char *name)
{
	char norm[XSEG_NAME_MAX];
	int rc = xseg_normalize_name(name, norm);

	if (rc)
		return rc;
	return shm_unlink(norm) < 0 ? -errno : 0;
}

void xseg_get_config(const struct xseg *seg, struct xseg_config *cfg)
{
	const struct xseg_shared_header *hdr = seg->hdr;

	memset(cfg, 0, sizeof(*cfg));
	cfg->size = hdr->size;
	cfg->nr_static_ports = hdr->nr_static_ports;
	cfg->nr_dynamic_ports = hdr->nr_dynamic_ports;
	cfg->nr_requests = hdr->nr_requests;
	cfg->free_cache = hdr->free_cache;
	cfg->default_data_size = hdr->default_data_size;
	cfg->max_targetlen = hdr->max_targetlen;
	cfg->queue_capacity = hdr->queue_capacity;
}

const char *xseg_name(const struct xseg *seg)
{
	return seg->name;
}

uint32_t xseg_nr_ports(const struct xseg *seg)
{
	return seg->nr_ports;
}

void xseg_info(const struct xseg *seg, struct xseg_info *info)
{
	struct xheap_stats st;

	memset(info, 0, sizeof(*info));
	xseg_get_config(seg, &info->cfg);
	info->version = seg->hdr->version;
	info->nonce = seg->hdr->nonce;
	info->nr_ports = seg->nr_ports;
	info->free_requests = xobj_free_count(seg->pool);
	xheap_stats(seg->heap, &st);
	info->heap_bytes = st.arena_bytes;
	info->heap_allocated = st.allocated_bytes;
	info->heap_carved = st.carved_bytes;
	info->writeback_losses = xseg_writeback_losses(seg);
}

void xseg_port_unflushed_add(struct xseg *seg, uint32_t port, int64_t delta)
{
	if (port >= seg->nr_ports)
		return;
	__atomic_add_fetch(&seg->ports[port].port->unflushed, (uint64_t)delta,
			   __ATOMIC_SEQ_CST);
}

uint64_t xseg_writeback_losses(const struct xseg *seg)
{
	return __atomic_load_n(&seg->hdr->writeback_losses, __ATOMIC_SEQ_CST);
}

void xseg_set_timestamps(struct xseg *seg, bool on)
{
	seg->timestamps = on;
}

void xseg_set_spin(struct xseg *seg, uint64_t spin_ns)
{
	seg->spin_ns = spin_ns;
}
