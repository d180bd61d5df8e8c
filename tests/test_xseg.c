/* SPDX-License-Identifier: MIT */
/*
 * libxseg unit tests: segment create/join/checks, ports, request life
 * cycle, bad inputs, validation, buffers, routing, waits, 3 GiB segment.
 * Multi-process cases use real children (xseg_testutil) on private
 * segments.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xseg.h"
#include "xseg_internal.h"
#include "xseg_testutil.h"

#define MS (1000ULL * 1000)

static struct xseg *mkseg_cfg(const char *tag, const struct xseg_config *cfg,
			      const char **namep)
{
	char err[XSEG_ERRBUF_LEN];
	const char *name = xtu_segname(tag);
	struct xseg *seg = NULL;
	int rc;

	ck_assert_ptr_nonnull(name);
	rc = xseg_create(name, cfg, &seg, err, sizeof(err));
	ck_assert_msg(rc == 0, "create %s: %d %s", name, rc, err);
	if (namep)
		*namep = name;
	return seg;
}

static struct xseg *mkseg(const char *tag, const char **namep)
{
	struct xseg_config cfg;

	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 4;
	cfg.nr_dynamic_ports = 4;
	cfg.nr_requests = 64;
	cfg.free_cache = 4;
	return mkseg_cfg(tag, &cfg, namep);
}

static uint32_t free_requests(struct xseg *seg)
{
	struct xseg_info info;

	xseg_info(seg, &info);
	return info.free_requests;
}

/* Free requests counting the per-port free caches. */
/* ---------------------------------------------------------------------- */

START_TEST(test_create_join_leave)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_info a, b;
	struct xseg *seg, *seg2;
	const char *name;
	struct stat st;
	char path[300];

	seg = mkseg("cjl", &name);
	ck_assert_int_eq(xseg_join(name + 1, &seg2, err, sizeof(err)), 0);
	xseg_info(seg, &a);
	xseg_info(seg2, &b);
	ck_assert_uint_eq(a.nonce, b.nonce);
	ck_assert_uint_eq(a.cfg.nr_requests, 64);
	ck_assert_uint_eq(a.cfg.queue_capacity, 128);
	ck_assert_uint_eq(a.cfg.max_targetlen, XSEG_MAX_TARGETLEN);
	ck_assert_uint_eq(a.nr_ports, 8);
	ck_assert_uint_eq(a.free_requests, 64);
	ck_assert_str_eq(xseg_name(seg2), name);
	/* Owner-only permissions. */
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	xseg_leave(seg2);
	xseg_leave(seg);
	ck_assert_int_eq(xseg_destroy(name), 0);
	ck_assert_int_eq(xseg_join(name, &seg2, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, name));
	ck_assert_int_eq(xseg_destroy(name), -ENOENT);
}
END_TEST

static void cfg_tiny(struct xseg_config *c)
{
	c->size = 8192;
}
static void cfg_unaligned(struct xseg_config *c)
{
	c->size += 100;
}
static void cfg_no_ports(struct xseg_config *c)
{
	c->nr_static_ports = 0;
	c->nr_dynamic_ports = 0;
}
static void cfg_one_request(struct xseg_config *c)
{
	c->nr_requests = 1;
}
static void cfg_free_cache3(struct xseg_config *c)
{
	c->free_cache = 3;
}
static void cfg_many_ports(struct xseg_config *c)
{
	c->nr_dynamic_ports = 1u << 20;
}

START_TEST(test_create_errors)
{
	char err[XSEG_ERRBUF_LEN], longname[300];
	struct xseg_config cfg, bad;
	struct xseg *seg = NULL, *seg2;
	const char *name = xtu_segname("cerr");

	xseg_config_default(&cfg);
	cfg.size = 8ULL << 20;
	cfg.nr_requests = 32;
	memset(longname, 'a', sizeof(longname));
	longname[sizeof(longname) - 1] = '\0';
	ck_assert_int_eq(xseg_create("", &cfg, &seg, err, sizeof(err)),
			 -EINVAL);
	ck_assert_int_eq(xseg_create("/", &cfg, &seg, err, sizeof(err)),
			 -EINVAL);
	ck_assert_int_eq(xseg_create("/a/b", &cfg, &seg, err, sizeof(err)),
			 -EINVAL);
	ck_assert_int_eq(xseg_create(NULL, &cfg, &seg, err, sizeof(err)),
			 -EINVAL);
	ck_assert_int_eq(xseg_create(longname, &cfg, &seg, err, sizeof(err)),
			 -EINVAL);
	ck_assert_int_eq(xseg_create(name, NULL, &seg, err, sizeof(err)),
			 -EINVAL);
	ck_assert_ptr_null(seg);

	/* Configurations that cannot work; none leaves a segment behind. */
	static const struct {
		const char *what;
		void (*mut)(struct xseg_config *c);
	} cases[] = {
	    {"tiny", cfg_tiny},
	    {"unaligned", cfg_unaligned},
	    {"no ports", cfg_no_ports},
	    {"one request", cfg_one_request},
	    {"free cache 3", cfg_free_cache3},
	    {"too many ports", cfg_many_ports},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bad = cfg;
		cases[i].mut(&bad);
		err[0] = '\0';
		ck_assert_msg(xseg_create(name, &bad, &seg, err, sizeof(err)) ==
				  -EINVAL,
			      "%s accepted", cases[i].what);
		ck_assert_msg(strstr(err, name) != NULL, "%s: message '%s'",
			      cases[i].what, err);
		ck_assert_int_eq(xseg_join(name, &seg2, NULL, 0), -ENOENT);
	}

	/* An existing name is refused and left intact. */
	seg = mkseg_cfg("cerr", &cfg, &name);
	ck_assert_int_eq(xseg_create(name, &cfg, &seg2, err, sizeof(err)),
			 -EEXIST);
	ck_assert_int_eq(xseg_join(name, &seg2, err, sizeof(err)), 0);
	xseg_leave(seg2);
	xseg_leave(seg);
}
END_TEST

/* xseg_min_size is exactly xseg_create's bound: a segment of that size is
 * made, one page less is refused; it does not read cfg->size; 0 for a
 * configuration out of bounds. xsegctl stack checks segment_size with it
 * before it removes or creates anything. */
START_TEST(test_min_size)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	const char *name = xtu_segname("minsz");
	uint64_t min;

	xseg_config_default(&cfg);
	cfg.nr_requests = 1000;
	cfg.size = 0;
	min = xseg_min_size(&cfg);
	ck_assert_uint_gt(min, 0);
	ck_assert_uint_eq(min % 4096, 0);
	cfg.size = 1ULL << 40;
	ck_assert_uint_eq(xseg_min_size(&cfg), min);
	cfg.size = min - 4096;
	ck_assert_int_eq(xseg_create(name, &cfg, &seg, err, sizeof(err)),
			 -EINVAL);
	ck_assert_ptr_null(seg);
	cfg.size = min;
	ck_assert_int_eq(xseg_create(name, &cfg, &seg, err, sizeof(err)), 0);
	xseg_leave(seg);
	ck_assert_int_eq(xseg_destroy(name), 0);
	/* more requests need more room */
	cfg.nr_requests = 2000;
	ck_assert_uint_gt(xseg_min_size(&cfg), min);
	cfg.nr_requests = 1;
	ck_assert_uint_eq(xseg_min_size(&cfg), 0);
}
END_TEST

/* xseg_heap_bytes_for and xseg_min_size_for_data are exact: in a segment
 * of the size they give for 32 buffers of 128 KiB and one of 475328 bytes
 * (cached's reservation and vlmc's first read, as the stack launcher
 * checks them; a too-small segment used to fail cached's start late), a
 * port gets and prepares them all; one page less fails the last with
 * -ENOMEM. A datalen below the default data size counts as that (prep
 * allocates that much); no buffer needs xseg_min_size. */
START_TEST(test_min_size_for_data)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg_config cfg;
	struct xseg_request *reqs[33];
	struct xseg *seg = NULL;
	const char *name = xtu_segname("minszdata");
	uint64_t min, need, lens[33];

	xseg_config_default(&cfg);
	cfg.nr_requests = 64;
	cfg.size = 0;
	min = xseg_min_size(&cfg);
	for (int i = 0; i < 33; i++)
		lens[i] = i == 16 ? 475328 : 128 << 10;
	need = xseg_min_size_for_data(
	    &cfg, 32 * xseg_heap_bytes_for(&cfg, 128 << 10) +
		      xseg_heap_bytes_for(&cfg, 475328));
	ck_assert_uint_gt(need, min);
	ck_assert_uint_eq(need % 4096, 0);
	ck_assert_uint_eq(xseg_min_size_for_data(&cfg, 0), min);
	ck_assert_uint_eq(xseg_heap_bytes_for(&cfg, 0), 0);
	ck_assert_uint_eq(xseg_heap_bytes_for(&cfg, 1),
			  xseg_heap_bytes_for(&cfg, cfg.default_data_size));
	for (int less = 0; less <= 1; less++) {
		cfg.size = need - (uint64_t)less * 4096;
		ck_assert_int_eq(
		    xseg_create(name, &cfg, &seg, err, sizeof(err)), 0);
		ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
		for (int i = 0; i < 33; i++) {
			int rc;

			ck_assert_int_eq(xseg_get_request(seg, 0, &reqs[i]), 0);
			rc = xseg_prep_request(seg, reqs[i], 0, lens[i]);
			ck_assert_int_eq(rc, less && i == 32 ? -ENOMEM : 0);
		}
		for (int i = 0; i < 33; i++)
			xseg_put_request(seg, reqs[i]);
		xseg_leave(seg);
		ck_assert_int_eq(xseg_destroy(name), 0);
	}
	cfg.nr_requests = 1;
	ck_assert_uint_eq(xseg_min_size_for_data(&cfg, 4096), 0);
}
END_TEST

/* xseg_max_size is exactly xseg_create's upper bound: a segment of that
 * size is made (sparse: only its fixed parts and the heap's header are
 * touched) and its data heap manages all of it but the heap's own header;
 * one page more is refused with -EFBIG, a message naming both sizes and no
 * shm object left. Before session 20 the larger segment was made and what
 * lay beyond 256 GiB of data silently never used. Like xseg_min_size it
 * does not read cfg->size, grows with the pool and is 0 for a configuration
 * out of bounds. */
START_TEST(test_max_size)
{
	char err[XSEG_ERRBUF_LEN], num[32];
	struct xseg_config cfg;
	struct xseg_info info;
	struct xseg *seg = NULL;
	const char *name = xtu_segname("maxsz");
	uint64_t min, max;
	int fd;

	xseg_config_default(&cfg);
	cfg.nr_requests = 1000;
	cfg.size = 0;
	min = xseg_min_size(&cfg);
	max = xseg_max_size(&cfg);
	ck_assert_uint_eq(max % 4096, 0);
	/* the fixed parts, then at most XHEAP_MAX_SIZE of heap */
	ck_assert_uint_gt(max, min);
	ck_assert_uint_le(max - (min - 4096), XHEAP_MAX_SIZE);
	ck_assert_uint_gt(max - (min - 4096), XHEAP_MAX_SIZE - 4096);
	cfg.size = 1ULL << 40;
	ck_assert_uint_eq(xseg_max_size(&cfg), max);

	cfg.size = max + 4096;
	ck_assert_int_eq(xseg_create(name, &cfg, &seg, err, sizeof(err)),
			 -EFBIG);
	ck_assert_ptr_null(seg);
	snprintf(num, sizeof(num), "size %llu ",
		 (unsigned long long)(max + 4096));
	ck_assert_msg(strstr(err, num), "%s", err);
	snprintf(num, sizeof(num), " %llu,", (unsigned long long)max);
	ck_assert_msg(strstr(err, num), "%s", err);
	fd = shm_open(name, O_RDONLY, 0);
	ck_assert_int_eq(fd, -1);
	ck_assert_int_eq(errno, ENOENT);

	cfg.size = max;
	ck_assert_int_eq(xseg_create(name, &cfg, &seg, err, sizeof(err)), 0);
	xseg_info(seg, &info);
	ck_assert_uint_eq(info.cfg.size, max);
	/* every byte after the fixed parts is heap: its arena is that less
	 * the heap's header (about 1 KiB) */
	ck_assert_uint_le(info.heap_bytes, max - (min - 4096));
	ck_assert_uint_gt(info.heap_bytes, max - (min - 4096) - 4096);
	xseg_leave(seg);
	ck_assert_int_eq(xseg_destroy(name), 0);

	cfg.nr_requests = 2000;
	ck_assert_uint_gt(xseg_max_size(&cfg), max);
	cfg.nr_requests = 1;
	ck_assert_uint_eq(xseg_max_size(&cfg), 0);
}
END_TEST

/* Rewrite a header field and (optionally) its checksum, then join. */
static int join_after(const char *name, void (*mut)(struct xseg *),
		      bool fix_checksum, char *err, size_t errlen)
{
	struct xseg *seg, *seg2;
	int rc;

	ck_assert_int_eq(xseg_join(name, &seg, NULL, 0), 0);
	mut(seg);
	if (fix_checksum)
		seg->hdr->checksum = xseg_header_checksum(seg->hdr);
	rc = xseg_join(name, &seg2, err, errlen);
	if (rc == 0)
		xseg_leave(seg2);
	xseg_leave(seg);
	return rc;
}

static void mut_version(struct xseg *s)
{
	s->hdr->version = XSEG_VERSION + 1;
}
static void mut_magic(struct xseg *s)
{
	s->hdr->magic ^= 1;
}
static void mut_reqsize(struct xseg *s)
{
	s->hdr->sizeof_request += 64;
}
static void mut_nr_requests(struct xseg *s)
{
	s->hdr->nr_requests += 1;
}
static void mut_pool_off(struct xseg *s)
{
	s->hdr->pool_off += 64;
}
static void mut_size(struct xseg *s)
{
	s->hdr->size += 4096;
}
static uint64_t saved_word;
static void mut_restore(struct xseg *s)
{
	(void)s;
}

START_TEST(test_join_checks)
{
	char err[XSEG_ERRBUF_LEN];
	struct xseg *seg, *seg2;
	const char *name;
	int fd;

	seg = mkseg("jchk", &name);
	saved_word = seg->hdr->checksum;

	/* Other layout version, even with a valid checksum. */
	ck_assert_int_eq(join_after(name, mut_version, true, err, sizeof(err)),
			 -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "version"));
	ck_assert_ptr_nonnull(strstr(err, name));
	seg->hdr->version = XSEG_VERSION;
	seg->hdr->checksum = xseg_header_checksum(seg->hdr);
	ck_assert_int_eq(join_after(name, mut_restore, false, err, sizeof(err)),
			 0);

	/* Corrupt byte in the configuration: checksum catches it. */
	ck_assert_int_eq(
	    join_after(name, mut_nr_requests, false, err, sizeof(err)),
	    -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "checksum"));
	seg->hdr->nr_requests -= 1;

	ck_assert_int_eq(join_after(name, mut_magic, false, err, sizeof(err)),
			 -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "magic"));
	seg->hdr->magic ^= 1;

	ck_assert_int_eq(join_after(name, mut_reqsize, true, err, sizeof(err)),
			 -EPROTO);
	seg->hdr->sizeof_request -= 64;
	seg->hdr->checksum = xseg_header_checksum(seg->hdr);

	/* Internally inconsistent but correctly checksummed: -EINVAL. */
	ck_assert_int_eq(join_after(name, mut_pool_off, true, err, sizeof(err)),
			 -EINVAL);
	seg->hdr->pool_off -= 64;
	seg->hdr->checksum = xseg_header_checksum(seg->hdr);
	ck_assert_int_eq(
	    join_after(name, mut_nr_requests, true, err, sizeof(err)), -EINVAL);
	seg->hdr->nr_requests -= 1;
	seg->hdr->checksum = xseg_header_checksum(seg->hdr);
	ck_assert_int_eq(join_after(name, mut_size, true, err, sizeof(err)),
			 -EINVAL);
	seg->hdr->size -= 4096;
	seg->hdr->checksum = xseg_header_checksum(seg->hdr);
	ck_assert_uint_eq(seg->hdr->checksum, saved_word);
	ck_assert_int_eq(join_after(name, mut_restore, false, err, sizeof(err)),
			 0);

	/* The shm object grew behind the header's back. */
	fd = shm_open(name, O_RDWR, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)seg->size + 4096), 0);
	ck_assert_int_eq(xseg_join(name, &seg2, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "bytes"));
	ck_assert_int_eq(ftruncate(fd, (off_t)seg->size), 0);
	close(fd);
	ck_assert_int_eq(xseg_join(name, &seg2, err, sizeof(err)), 0);
	xseg_leave(seg2);
	xseg_leave(seg);

	/* Too small to hold a header at all. */
	name = xtu_segname("jsmall");
	fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 100), 0);
	close(fd);
	ck_assert_int_eq(xseg_join(name, &seg2, err, sizeof(err)), -EPROTO);
	/* And an all-zero header (e.g. creation in progress). */
	fd = shm_open(name, O_RDWR, 0);
	ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);
	close(fd);
	ck_assert_int_eq(xseg_join(name, &seg2, err, sizeof(err)), -EPROTO);
}
END_TEST

/* ---------------------------------------------------------------------- */

struct child_bind {
	const char *name;
	uint32_t port;
	int expect;
};

static int child_try_bind(void *arg)
{
	struct child_bind *cb = arg;
	struct xseg *seg;
	int rc;

	if (xseg_join(cb->name, &seg, NULL, 0))
		return 100;
	rc = xseg_bind_port(seg, cb->port, "child");
	xseg_leave(seg);
	return rc == cb->expect ? 0 : 101;
}

START_TEST(test_static_ports)
{
	struct xseg_port_info pi;
	struct child_bind cb;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	seg = mkseg("sport", &name);
	ck_assert_int_eq(xseg_port_alive(seg, 0), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), -EALREADY);
	ck_assert_int_eq(xseg_bind_port(seg, 4, "server"), -EINVAL);
	ck_assert_int_eq(xseg_bind_port(seg, 1, NULL), -EINVAL);
	ck_assert_int_eq(xseg_port_alive(seg, 0), 1);
	ck_assert_int_eq(xseg_port_alive(seg, 99), -EINVAL);
	ck_assert_int_eq(xseg_port_info(seg, 0, &pi), 0);
	ck_assert(pi.bound && pi.alive && !pi.dynamic && !pi.reclaiming);
	ck_assert_int_eq(pi.owner_pid, getpid());
	ck_assert_str_eq(pi.peer_type, "server");
	ck_assert_uint_eq(pi.path_next, XSEG_NOPORT);
	ck_assert_uint_ne(pi.generation, 0);

	/* Another live process cannot take it. */
	cb = (struct child_bind){name, 0, -EBUSY};
	pid = xtu_fork(child_try_bind, &cb);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);

	/* A child binds port 1 and exits without releasing: dead owner. */
	cb = (struct child_bind){name, 1, 0};
	pid = xtu_fork(child_try_bind, &cb);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);
	ck_assert_int_eq(xseg_port_info(seg, 1, &pi), 0);
	ck_assert(pi.bound && !pi.alive);
	ck_assert_int_eq(pi.owner_pid, pid);
	ck_assert_int_eq(xseg_port_alive(seg, 1), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "again"), 0);
	ck_assert_int_eq(xseg_port_alive(seg, 1), 1);

	/* While a port is being bound or reclaimed (RECLAIM flag in its
	 * owner word) it is not alive and takes no requests. */
	struct xseg_request *req;
	uint32_t client;
	uint64_t *ownerp = &seg->ports[0].port->owner, saved = *ownerp;
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	*ownerp = saved | XSEG_OWNER_RECLAIM;
	ck_assert_int_eq(xseg_port_alive(seg, 0), 0);
	ck_assert_int_eq(xseg_port_info(seg, 0, &pi), 0);
	ck_assert(pi.reclaiming && pi.alive);
	ck_assert_int_eq(xseg_submit(seg, req, 0), -ENXIO);
	ck_assert_uint_eq(req->state, XSEG_RS_PREPARED);
	*ownerp = saved;
	ck_assert_int_eq(xseg_port_alive(seg, 0), 1);
	ck_assert_int_eq(xseg_put_request(seg, req), 0);
	ck_assert_int_eq(xseg_release_port(seg, client), 0);

	/* Release, then bind again with a new generation. */
	ck_assert_int_eq(xseg_port_info(seg, 1, &pi), 0);
	uint32_t gen = pi.generation;
	ck_assert_int_eq(xseg_release_port(seg, 1), 0);
	ck_assert_int_eq(xseg_release_port(seg, 1), -EPERM);
	ck_assert_int_eq(xseg_release_port(seg, 100), -EINVAL);
	ck_assert_int_eq(xseg_port_alive(seg, 1), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "third"), 0);
	ck_assert_int_eq(xseg_port_info(seg, 1, &pi), 0);
	ck_assert_uint_ne(pi.generation, gen);
	xseg_leave(seg);
}
END_TEST

struct hold_arg {
	const char *name;
	uint32_t *port_out; /* shared memory */
};

static int child_hold_port(void *arg)
{
	struct hold_arg *ha = arg;
	struct xseg *seg;
	uint32_t port;

	if (xseg_join(ha->name, &seg, NULL, 0) ||
	    xseg_alloc_port(seg, "holder", &port))
		return 1;
	__atomic_store_n(ha->port_out, port, __ATOMIC_RELEASE);
	for (;;)
		pause();
}

START_TEST(test_dynamic_ports)
{
	uint32_t got[4], extra, again;
	struct xseg_port_info pi;
	struct xseg *seg;

	seg = mkseg("dport", NULL);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(xseg_alloc_port(seg, "client", &got[i]), 0);
		ck_assert_uint_ge(got[i], 4);
		ck_assert_uint_lt(got[i], 8);
		for (int j = 0; j < i; j++)
			ck_assert_uint_ne(got[i], got[j]);
		ck_assert_int_eq(xseg_port_info(seg, got[i], &pi), 0);
		ck_assert(pi.dynamic && pi.alive);
	}
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &extra), -ENOSPC);
	ck_assert_int_eq(xseg_alloc_port(seg, NULL, &extra), -EINVAL);
	ck_assert_int_eq(xseg_alloc_port(seg, "x", NULL), -EINVAL);
	ck_assert_int_eq(xseg_release_port(seg, got[2]), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &again), 0);
	ck_assert_uint_eq(again, got[2]);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(xseg_release_port(seg, got[i]), 0);
	ck_assert_int_eq(xseg_port_alive(seg, got[0]), 0);

	/* Across processes: a live child's port is not handed out; once the
	 * child is killed its port is reclaimed by the next alloc. */
	struct hold_arg ha = {xseg_name(seg), NULL};
	int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(shared, MAP_FAILED);
	ha.port_out = (uint32_t *)shared;
	*ha.port_out = XSEG_NOPORT;
	pid_t pid = xtu_fork(child_hold_port, &ha);
	uint64_t deadline = xtu_now_ms() + 10000;
	while (__atomic_load_n(ha.port_out, __ATOMIC_ACQUIRE) == XSEG_NOPORT)
		ck_assert_uint_lt(xtu_now_ms(), deadline);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(xseg_alloc_port(seg, "client", &got[i]), 0);
		ck_assert_uint_ne(got[i], *ha.port_out);
	}
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &extra), -ENOSPC);
	ck_assert_int_eq(xseg_port_alive(seg, *ha.port_out), 1);
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &extra), 0);
	ck_assert_uint_eq(extra, *ha.port_out);
	munmap(shared, 4096);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */

/* xseg_requests_queued: what waits on a port's request queue, not yet
 * accepted (the peer framework wakes a second worker only for that); 0
 * for a bad port, and reading it changes nothing. */
START_TEST(test_requests_queued)
{
	struct xseg_request *req[3], *acc;
	uint32_t client;
	struct xseg *seg;

	seg = mkseg("rqd", NULL);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	ck_assert_uint_eq(xseg_requests_queued(seg, 0), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(xseg_get_request(seg, client, &req[i]), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req[i], 0, 0), 0);
		req[i]->op = XSEG_OP_PING;
		ck_assert_int_eq(xseg_submit(seg, req[i], 0), 0);
		ck_assert_uint_eq(xseg_requests_queued(seg, 0), i + 1);
	}
	ck_assert_uint_eq(xseg_requests_queued(seg, 0), 3);
	ck_assert_uint_eq(xseg_requests_queued(seg, client), 0);
	ck_assert_uint_eq(xseg_requests_queued(seg, 100000), 0);
	ck_assert_uint_eq(xseg_requests_queued(NULL, 0), 0);
	for (int i = 2; i >= 0; i--) {
		ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
		ck_assert_uint_eq(xseg_requests_queued(seg, 0), (uint64_t)i);
		ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	}
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(xseg_receive(seg, client, &acc), 0);
		ck_assert_int_eq(xseg_put_request(seg, acc), 0);
	}
	xseg_leave(seg);
}
END_TEST

START_TEST(test_lifecycle_local)
{
	struct xseg_request *req, *acc, *rep;
	struct xseg_port_info pi;
	uint32_t client;
	struct xseg *seg;
	uint64_t id1;
	char *data;

	seg = mkseg("life", NULL);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);

	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_uint_eq(req->state, XSEG_RS_ALLOCATED);
	ck_assert_uint_eq(req->holder, client);
	ck_assert_uint_eq(req->src, client);
	ck_assert_int_eq(xseg_prep_request(seg, req, 5, 1000), 0);
	ck_assert_uint_eq(req->state, XSEG_RS_PREPARED);
	ck_assert_uint_eq(req->size, 1000);
	ck_assert_uint_ge(req->data_cap, 4096); /* default_data_size */
	data = xseg_request_data(seg, req);
	ck_assert_ptr_nonnull(data);
	ck_assert_ptr_eq(xseg_request_at(seg, req->index), req);
	memcpy(xseg_request_target(req), "obj-1", 5);
	memset(data, 0xab, 1000);
	req->op = XSEG_OP_WRITE;
	req->offset = 4096;
	req->flags = XSEG_F_FUA;
	req->user = 0x1234;
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	ck_assert_uint_eq(req->state, XSEG_RS_SUBMITTED);
	ck_assert_uint_eq(req->holder, 0);
	ck_assert_uint_eq(req->dst, 0);
	ck_assert_uint_eq(req->effective_dst, 0);
	ck_assert_uint_ne(req->id, 0);
	ck_assert_uint_ne(req->ts_submitted, 0);
	id1 = req->id;

	ck_assert_int_eq(xseg_receive(seg, client, &rep), -EAGAIN);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
	ck_assert_ptr_eq(acc, req);
	ck_assert_uint_eq(acc->state, XSEG_RS_ACCEPTED);
	ck_assert_int_eq(memcmp(acc->target, "obj-1", 5), 0);
	ck_assert_uint_eq(acc->offset, 4096);
	ck_assert_uint_ge(acc->ts_accepted, acc->ts_submitted);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), -EAGAIN);
	req->serviced = 1000;
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(xseg_receive(seg, client, &rep), 0);
	ck_assert_ptr_eq(rep, req);
	ck_assert_uint_eq(rep->state, XSEG_RS_RECEIVED);
	ck_assert_int_eq(rep->error, 0);
	ck_assert_uint_eq(rep->serviced, 1000);
	ck_assert_uint_eq(rep->user, 0x1234);
	ck_assert_uint_ge(rep->ts_responded, rep->ts_accepted);
	ck_assert_uint_ge(rep->ts_received, rep->ts_responded);

	/* Reuse without put: a failed answer this time. */
	ck_assert_int_eq(xseg_prep_request(seg, req, 5, 10), 0);
	req->op = XSEG_OP_READ;
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	ck_assert_uint_gt(req->id, id1);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
	ck_assert_int_eq(xseg_respond(seg, acc, EIO), 0);
	ck_assert_int_eq(xseg_receive(seg, client, &rep), 0);
	ck_assert_int_eq(rep->error, EIO);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	ck_assert_uint_eq(req->state, XSEG_RS_FREE);

	ck_assert_int_eq(xseg_port_info(seg, client, &pi), 0);
	ck_assert_uint_eq(pi.sent, 2);
	ck_assert_uint_eq(pi.received, 2);
	ck_assert_uint_eq(pi.free_depth, 1);
	ck_assert_int_eq(xseg_port_info(seg, 0, &pi), 0);
	ck_assert_uint_eq(pi.accepted, 2);
	ck_assert_uint_eq(pi.served, 1);
	ck_assert_uint_eq(pi.failed, 1);
	ck_assert_uint_eq(pi.request_depth, 0);
	ck_assert_uint_eq(xtu_free_requests(seg), 64);

	/* The cached request comes back first. */
	ck_assert_int_eq(xseg_get_request(seg, client, &rep), 0);
	ck_assert_ptr_eq(rep, req);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_bad_inputs)
{
	struct xseg_request *req, *acc, fake;
	uint32_t client, free0;
	struct xseg *seg;

	seg = mkseg("bad", NULL);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);

	/* get */
	ck_assert_int_eq(xseg_get_request(seg, 99, &req), -EINVAL);
	ck_assert_int_eq(xseg_get_request(seg, client, NULL), -EINVAL);
	ck_assert_int_eq(xseg_get_request(seg, 2, &req), -EPERM);
	free0 = xtu_free_requests(seg);
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);

	/* prep */
	ck_assert_int_eq(xseg_prep_request(seg, req, XSEG_MAX_TARGETLEN + 1, 0),
			 -EINVAL);
	ck_assert_uint_eq(req->state, XSEG_RS_ALLOCATED);
	ck_assert_int_eq(xseg_prep_request(seg, req, 3, 0), 0);
	req->op = XSEG_OP_PING;

	/* submit */
	ck_assert_int_eq(xseg_submit(seg, req, 99), -EINVAL);
	ck_assert_int_eq(xseg_submit(seg, req, 1), -ENXIO); /* unbound */
	ck_assert_uint_eq(req->state, XSEG_RS_PREPARED);
	ck_assert_uint_eq(req->holder, client);
	ck_assert_int_eq(xseg_submit(seg, NULL, 0), -EINVAL);
	memset(&fake, 0, sizeof(fake));
	ck_assert_int_eq(xseg_submit(seg, &fake, 0), -EINVAL);
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	ck_assert_int_eq(xseg_submit(seg, req, 0), -EINVAL);   /* twice */
	ck_assert_int_eq(xseg_put_request(seg, req), -EINVAL); /* queued */
	ck_assert_int_eq(xseg_respond(seg, req, 0), -EINVAL);  /* queued */

	/* accept / respond / forward */
	ck_assert_int_eq(xseg_accept(seg, 99, &acc), -EINVAL);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), -EPERM);
	ck_assert_int_eq(xseg_accept(seg, 0, NULL), -EINVAL);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
	ck_assert_int_eq(xseg_respond(seg, acc, -EIO), -EINVAL);
	ck_assert_int_eq(xseg_forward(seg, acc, 0), -EINVAL); /* to itself */
	ck_assert_int_eq(xseg_forward(seg, acc, 99), -EINVAL);
	ck_assert_int_eq(xseg_forward(seg, acc, 1), -ENXIO);
	ck_assert_uint_eq(acc->state, XSEG_RS_ACCEPTED);
	ck_assert_uint_eq(acc->holder, 0);
	ck_assert_int_eq(xseg_put_request(seg, acc), -EINVAL);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), -EINVAL); /* twice */

	/* receive / put */
	ck_assert_int_eq(xseg_receive(seg, 99, &acc), -EINVAL);
	ck_assert_int_eq(xseg_receive(seg, 0, NULL), -EINVAL);
	ck_assert_int_eq(xseg_receive(seg, 2, &acc), -EPERM);
	ck_assert_int_eq(xseg_receive(seg, client, &acc), 0);
	ck_assert_int_eq(xseg_put_request(seg, &fake), -EINVAL);
	ck_assert_int_eq(xseg_put_request(seg, NULL), -EINVAL);
	ck_assert_int_eq(xseg_put_request(seg, (void *)((char *)req + 64)),
			 -EINVAL);
	ck_assert_int_eq(xseg_put_request(seg, req), 0);
	ck_assert_int_eq(xseg_put_request(seg, req), -EALREADY);
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), -EINVAL);
	ck_assert_int_eq(xseg_submit(seg, req, 0), -EINVAL);
	ck_assert_uint_eq(xtu_free_requests(seg), free0);

	/* routing */
	ck_assert_int_eq(xseg_set_path_next(seg, 0, 0), -EINVAL);
	ck_assert_int_eq(xseg_set_path_next(seg, 0, 99), -EINVAL);
	ck_assert_int_eq(xseg_set_path_next(seg, 99, 0), -EINVAL);
	ck_assert_int_eq(xseg_clear_path_next(seg, 99), -EINVAL);
	ck_assert_uint_eq(xseg_get_path_next(seg, 0), XSEG_NOPORT);
	ck_assert_uint_eq(xseg_get_path_next(seg, 99), XSEG_NOPORT);

	/* waits */
	ck_assert_int_eq(xseg_wait(seg, 99, 0), -EINVAL);
	ck_assert_int_eq(xseg_wait_reply(seg, 99, 0, &acc), -EINVAL);
	ck_assert_int_eq(xseg_wait_reply(seg, client, 0, NULL), -EINVAL);
	ck_assert_int_eq(xseg_port_info(seg, 99, NULL), -EINVAL);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_pool_exhaustion)
{
	struct xseg_request *reqs[8], *extra;
	struct xseg_config cfg;
	uint32_t client;
	struct xseg *seg;

	xseg_config_default(&cfg);
	cfg.size = 4ULL << 20;
	cfg.nr_static_ports = 1;
	cfg.nr_dynamic_ports = 2;
	cfg.nr_requests = 8;
	cfg.free_cache = 2;
	seg = mkseg_cfg("pool", &cfg, NULL);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(xseg_get_request(seg, client, &reqs[i]), 0);
	ck_assert_int_eq(xseg_get_request(seg, client, &extra), -ENOMEM);
	ck_assert_uint_eq(free_requests(seg), 0);
	/* Recovery: what is put back is usable again, by this port (via
	 * its free cache) and beyond the cache via the pool. */
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(xseg_put_request(seg, reqs[i]), 0);
	ck_assert_uint_eq(xtu_free_requests(seg), 8);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(xseg_get_request(seg, client, &reqs[i]), 0);
	ck_assert_int_eq(xseg_get_request(seg, client, &extra), -ENOMEM);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(xseg_put_request(seg, reqs[i]), 0);
	/* Releasing the port empties its free cache into the pool. */
	ck_assert_int_eq(xseg_release_port(seg, client), 0);
	ck_assert_uint_eq(free_requests(seg), 8);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_data_resize)
{
	struct xseg_request *req;
	struct xseg_info info0, info;
	uint64_t off, cap;
	uint32_t client;
	struct xseg *seg;
	char *d;

	seg = mkseg("resize", NULL);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_ptr_null(xseg_request_data(seg, req));
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	ck_assert_uint_eq(req->data_off, 0); /* no data, no buffer */
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 100), 0);
	ck_assert_uint_eq(req->data_cap, 4096);
	off = req->data_off;
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 4096), 0);
	ck_assert_uint_eq(req->data_off, off); /* fits: kept */
	xseg_info(seg, &info0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 10000), 0);
	ck_assert_uint_eq(req->data_cap, 16384);
	ck_assert_uint_ne(req->data_off, off);
	d = xseg_request_data(seg, req);
	ck_assert_ptr_nonnull(d);
	memset(d, 1, 10000);
	ck_assert_int_eq(xseg_validate_request(seg, req), -EOPNOTSUPP);
	req->op = XSEG_OP_WRITE;
	ck_assert_int_eq(xseg_validate_request(seg, req), 0);

	/* Heap exhaustion: -ENOMEM, request untouched. */
	off = req->data_off;
	cap = req->data_cap;
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 1ULL << 30), -ENOMEM);
	ck_assert_uint_eq(req->data_off, off);
	ck_assert_uint_eq(req->data_cap, cap);
	ck_assert_uint_eq(req->size, 10000);
	ck_assert_uint_eq(req->op, XSEG_OP_WRITE);

	/* put frees a buffer above default_data_size. */
	ck_assert_int_eq(xseg_put_request(seg, req), 0);
	ck_assert_uint_eq(req->data_off, 0);
	xseg_info(seg, &info);
	ck_assert_uint_lt(info.heap_allocated, info0.heap_allocated + 16384);
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 10), 0);
	ck_assert_int_eq(xseg_put_request(seg, req), 0);
	/* ... and keeps a default-sized one. */
	ck_assert_uint_eq(req->data_cap, 4096);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */

static int start_echo(const char *name, uint32_t port, pid_t *pid)
{
	static struct xtu_echo_opts o; /* copied into the child by fork */

	o = (struct xtu_echo_opts){.segname = name, .port = port};
	*pid = xtu_fork(xtu_echo_server, &o);
	return *pid > 0 ? 0 : (int)*pid;
}

static bool port_alive_cond(void *arg)
{
	struct xseg **segp = arg;

	return xseg_port_alive(*segp, 0) == 1;
}

START_TEST(test_lifecycle_mp)
{
	struct xseg_request *req, *rep;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	pid_t server;

	seg = mkseg("lifemp", &name);
	ck_assert_int_eq(start_echo(name, 0, &server), 0);
	ck_assert_int_eq(xtu_wait_until(port_alive_cond, &seg, 10000), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	for (int i = 0; i < 2000; i++) {
		ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req, 4, 512), 0);
		memcpy(req->target, "obj1", 4);
		req->op = i % 2 ? XSEG_OP_READ : XSEG_OP_WRITE;
		req->offset = (uint64_t)i * 512;
		req->user = (uint64_t)i;
		ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
		ck_assert_int_eq(xseg_wait_reply(seg, client, 10000 * MS, &rep),
				 0);
		ck_assert_ptr_eq(rep, req);
		ck_assert_uint_eq(rep->user, (uint64_t)i);
		ck_assert_int_eq(rep->error, 0);
		ck_assert_uint_eq(rep->serviced, 512);
		if (rep->op == XSEG_OP_READ) {
			unsigned char *d = xseg_request_data(seg, rep);

			for (int j = 0; j < 512; j++)
				ck_assert_uint_eq(d[j],
						  xtu_pattern(rep->offset, j));
		}
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	/* A failed answer travels back with its errno. */
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 6, 0), 0);
	memcpy(req->target, "fail:x", 6);
	req->op = XSEG_OP_DELETE;
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	ck_assert_int_eq(xseg_wait_reply(seg, client, 10000 * MS, &rep), 0);
	ck_assert_int_eq(rep->error, EIO);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	ck_assert_int_eq(xtu_kill(server, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(server, 10000), 128 + SIGKILL);
	xseg_leave(seg);
}
END_TEST

/* Each case breaks one rule of xseg_validate_request. */
static void break_op0(struct xseg *s, struct xseg_request *r)
{
	r->op = XSEG_OP_NONE;
}
static void break_op_unknown(struct xseg *s, struct xseg_request *r)
{
	r->op = XSEG_OP_COUNT + 3;
}
static void break_targetlen0(struct xseg *s, struct xseg_request *r)
{
	r->targetlen = 0;
}
static void break_targetlen_big(struct xseg *s, struct xseg_request *r)
{
	r->targetlen = XSEG_MAX_TARGETLEN + 1;
}
static void break_overflow(struct xseg *s, struct xseg_request *r)
{
	r->offset = UINT64_MAX - 10;
	r->size = 100;
}
static void break_size(struct xseg *s, struct xseg_request *r)
{
	r->size = r->data_cap + 1;
}
static void break_flags(struct xseg *s, struct xseg_request *r)
{
	r->flags = 1u << 9;
}
static void break_data_off_low(struct xseg *s, struct xseg_request *r)
{
	r->data_off = 64;
}
static void break_data_off_high(struct xseg *s, struct xseg_request *r)
{
	r->data_off = s->size + 4096;
}
static void break_data_cap(struct xseg *s, struct xseg_request *r)
{
	r->data_cap = UINT64_MAX - 4;
}
static void break_data_end(struct xseg *s, struct xseg_request *r)
{
	r->data_off = s->size - 64;
	r->data_cap = 128;
	r->size = 0;
}
/* F4: inside the heap region, but not a live buffer of the allocator. */
static void break_heap_header(struct xseg *s, struct xseg_request *r)
{
	r->data_off = s->heap_off; /* struct xheap itself */
}
static void break_heap_carve(struct xseg *s, struct xseg_request *r)
{
	r->data_off = s->heap_off + 64; /* the allocator's carve line */
}
static void break_inside_buffer(struct xseg *s, struct xseg_request *r)
{
	r->data_off += 64; /* not the start of a block */
	r->data_cap -= 64;
}
static void break_cap_over_block(struct xseg *s, struct xseg_request *r)
{
	r->data_cap += 64; /* would run over the next block's header */
}
static void break_freed_buffer(struct xseg *s, struct xseg_request *r)
{
	uint64_t off;
	int64_t got = xheap_alloc(s->heap, r->data_cap, &off);

	ck_assert_int_ge(got, (int64_t)r->data_cap);
	ck_assert_int_eq(xheap_free(s->heap, off), 0);
	r->data_off = s->heap_off + off;
}
static void break_cap_without_buffer(struct xseg *s, struct xseg_request *r)
{
	r->data_off = 0;
	r->size = 0;
}
static void break_info_small(struct xseg *s, struct xseg_request *r)
{
	r->op = XSEG_OP_INFO;
	r->data_off = 0;
	r->data_cap = 0;
	r->size = 0;
}
static void break_copy_src(struct xseg *s, struct xseg_request *r)
{
	struct xseg_request_copy *c = xseg_request_data(s, r);

	r->op = XSEG_OP_COPY;
	c->src_targetlen = 0;
}

START_TEST(test_validation_mp)
{
	static const struct {
		const char *what;
		void (*brk)(struct xseg *, struct xseg_request *);
		int err;
	} cases[] = {
	    {"op 0", break_op0, EOPNOTSUPP},
	    {"unknown op", break_op_unknown, EOPNOTSUPP},
	    {"targetlen 0", break_targetlen0, EINVAL},
	    {"targetlen 256", break_targetlen_big, EINVAL},
	    {"offset+size overflow", break_overflow, EINVAL},
	    {"size > buffer", break_size, EINVAL},
	    {"unknown flag", break_flags, EINVAL},
	    {"buffer below heap", break_data_off_low, EINVAL},
	    {"buffer beyond segment", break_data_off_high, EINVAL},
	    {"capacity overflow", break_data_cap, EINVAL},
	    {"buffer past the end", break_data_end, EINVAL},
	    {"capacity without buffer", break_cap_without_buffer, EINVAL},
	    {"buffer on the heap header", break_heap_header, EINVAL},
	    {"buffer on the carve line", break_heap_carve, EINVAL},
	    {"buffer inside a block", break_inside_buffer, EINVAL},
	    {"capacity over the block", break_cap_over_block, EINVAL},
	    {"freed buffer", break_freed_buffer, EINVAL},
	    {"INFO without buffer", break_info_small, EINVAL},
	    {"COPY without source", break_copy_src, EINVAL},
	};
	const size_t n = sizeof(cases) / sizeof(cases[0]);
	struct xseg_request *req, *rep;
	struct xseg_port_info pi;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	pid_t server;

	seg = mkseg("valid", &name);
	ck_assert_int_eq(start_echo(name, 0, &server), 0);
	ck_assert_int_eq(xtu_wait_until(port_alive_cond, &seg, 10000), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	for (size_t i = 0; i <= n; i++) {
		ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
		ck_assert_int_eq(
		    xseg_prep_request(seg, req, 3,
				      sizeof(struct xseg_request_copy)),
		    0);
		memcpy(req->target, "obj", 3);
		req->op = XSEG_OP_READ;
		req->flags = XSEG_F_FUA | (1u << 20); /* peer bits pass */
		uint64_t off = req->data_off, cap = req->data_cap;
		if (i < n)
			cases[i].brk(seg, req);
		ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
		ck_assert_int_eq(xseg_wait_reply(seg, client, 10000 * MS, &rep),
				 0);
		ck_assert_ptr_eq(rep, req);
		if (i < n) {
			ck_assert_msg(rep->error == cases[i].err,
				      "%s: error %d, expected %d",
				      cases[i].what, rep->error, cases[i].err);
			ck_assert_uint_eq(rep->serviced, 0);
		} else {
			/* The server survived all of the above. */
			ck_assert_int_eq(rep->error, 0);
			ck_assert_uint_eq(rep->serviced, rep->size);
		}
		/* Restore what the case broke before returning it. */
		req->data_off = off;
		req->data_cap = cap;
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
	ck_assert_int_eq(xseg_port_info(seg, 0, &pi), 0);
	ck_assert_uint_eq(pi.rejected, n);
	ck_assert_uint_eq(pi.accepted, 1);
	ck_assert_int_eq(xseg_port_alive(seg, 0), 1);

	/* Pure checks in this process too. */
	ck_assert_int_eq(xseg_validate_request(seg, NULL), -EINVAL);
	xtu_kill(server, SIGKILL);
	xtu_wait(server, 10000);
	xseg_leave(seg);
}
END_TEST

START_TEST(test_redirect_forward_local)
{
	struct xseg_request *req, *acc, *rep;
	uint32_t client;
	struct xseg *seg;

	seg = mkseg("route", NULL);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "store"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "cache"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	ck_assert_int_eq(xseg_set_path_next(seg, 0, 1), 0);
	ck_assert_uint_eq(xseg_get_path_next(seg, 0), 1);

	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	ck_assert_uint_eq(req->dst, 0);
	ck_assert_uint_eq(req->effective_dst, 1);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), -EAGAIN);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
	/* The cache passes it to the store it sits in front of. */
	ck_assert_int_eq(xseg_forward(seg, acc, acc->dst), 0);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), -EAGAIN);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
	ck_assert_uint_eq(acc->src, client);
	ck_assert_uint_eq(acc->effective_dst, 0);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	ck_assert_int_eq(xseg_receive(seg, client, &rep), 0);
	ck_assert_int_eq(rep->error, 0);

	/* Unplug: new requests go straight to the store. */
	ck_assert_int_eq(xseg_clear_path_next(seg, 0), 0);
	ck_assert_uint_eq(xseg_get_path_next(seg, 0), XSEG_NOPORT);
	ck_assert_int_eq(xseg_prep_request(seg, rep, 1, 0), 0);
	rep->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, rep, 0), 0);
	ck_assert_uint_eq(rep->effective_dst, 0);
	ck_assert_int_eq(xseg_accept(seg, 0, &acc), 0);
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	ck_assert_int_eq(xseg_receive(seg, client, &rep), 0);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);

	/* A redirect to an unbound port refuses new requests. */
	ck_assert_int_eq(xseg_set_path_next(seg, 0, 2), 0);
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 1, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 0), -ENXIO);
	ck_assert_int_eq(xseg_put_request(seg, req), 0);
	xseg_leave(seg);
}
END_TEST

/* review20 F1-J: a cache serves the path of its own next port only
 * (cached fetches from and writes back to it whatever req->dst is): a
 * redirect of another port to it is refused, the one of its next port is
 * not. A cache that marked itself without naming its next port (an older
 * build), or whose word is a previous owner's, cannot be checked: refused
 * too. A port that is no cache takes any redirect, as before. */
/* A child of the process that bound port 2 tries to mark it through the
 * handle it inherited: 0 if refused (-EPERM). */
static int mark_port2(void *arg)
{
	return xseg_port_mark_cache(arg, 2, 1) == -EPERM ? 0 : 1;
}

START_TEST(test_redirect_cache_of_other_path)
{
	struct xseg_port_info pi;
	struct xseg_port *c;
	struct xseg *seg;
	pid_t pid;

	seg = mkseg("cachepath", NULL);
	c = seg->ports[2].port;
	/* review20 F1-H: a handle without an identity marks nothing, not
	 * even a free port (whose owner word, 0, is that identity too) */
	seg->self_owner = 0;
	ck_assert_int_eq(xseg_port_mark_cache(seg, 2, 1), -EPERM);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi), 0);
	ck_assert(!pi.cache);
	ck_assert_int_eq(xseg_bind_port(seg, 2, "cached"), 0);
	/* nor does a child of the owner, through the handle it inherited */
	pid = xtu_fork(mark_port2, seg);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi), 0);
	ck_assert(!pi.cache);
	ck_assert_int_eq(xseg_port_mark_cache(seg, 2, 2), -EINVAL);
	ck_assert_int_eq(xseg_port_mark_cache(seg, 2, xseg_nr_ports(seg)),
			 -EINVAL);
	ck_assert_int_eq(xseg_port_mark_cache(seg, 2, 1), 0);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi), 0);
	ck_assert(pi.cache);
	ck_assert_uint_eq(pi.cache_next, 1);
	ck_assert_int_eq(xseg_set_path_next(seg, 0, 2), -EXDEV);
	ck_assert_uint_eq(xseg_get_path_next(seg, 0), XSEG_NOPORT);
	ck_assert_int_eq(xseg_set_path_next(seg, 1, 2), 0);
	ck_assert_int_eq(xseg_clear_path_next(seg, 1), 0);
	/* marked by a build that did not publish the port it serves: the
	 * word a segment made before it holds */
	__atomic_store_n(&c->cache_next, 0, __ATOMIC_RELAXED);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi), 0);
	ck_assert(pi.cache);
	ck_assert_uint_eq(pi.cache_next, XSEG_NOPORT);
	ck_assert_int_eq(xseg_set_path_next(seg, 1, 2), -EXDEV);
	ck_assert_int_eq(xseg_port_mark_cache(seg, 2, 1), 0);
	/* a new owner, not a cache: any redirect, as before */
	ck_assert_int_eq(xseg_release_port(seg, 2), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 2, "noop"), 0);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi), 0);
	ck_assert(!pi.cache);
	ck_assert_int_eq(xseg_set_path_next(seg, 0, 2), 0);
	ck_assert_int_eq(xseg_clear_path_next(seg, 0), 0);
	/* it marks itself the way an older build did (the generation only):
	 * the previous owner's next port is not taken for its */
	__atomic_store_n(&c->cache_gen,
			 __atomic_load_n(&c->gen, __ATOMIC_RELAXED),
			 __ATOMIC_RELEASE);
	ck_assert_int_eq(xseg_port_info(seg, 2, &pi), 0);
	ck_assert(pi.cache);
	ck_assert_uint_eq(pi.cache_next, XSEG_NOPORT);
	ck_assert_int_eq(xseg_set_path_next(seg, 1, 2), -EXDEV);
	ck_assert_uint_eq(xseg_get_path_next(seg, 1), XSEG_NOPORT);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */

struct kick_arg {
	const char *name;
	uint32_t port;
	uint32_t *woken; /* MAP_SHARED: set by the parent once its wait ended */
};

/* Kick every 50 ms until the parent's wait has ended. A kick is not
 * remembered: one sent before the parent's wait took its starting point
 * (a parent descheduled for 50 ms after the fork, on a loaded machine)
 * would leave that wait to run into its timeout. */
static int child_kick(void *arg)
{
	struct kick_arg *ka = arg;
	struct xseg *seg;

	if (xseg_join(ka->name, &seg, NULL, 0))
		return 1;
	while (!__atomic_load_n(ka->woken, __ATOMIC_ACQUIRE)) {
		usleep(50 * 1000);
		xseg_kick(seg, ka->port);
	}
	xseg_leave(seg);
	return 0;
}

START_TEST(test_wait_timeout_kick)
{
	struct xseg_request *req, *rep;
	struct kick_arg ka;
	uint32_t client, *woken;
	struct xseg *seg;
	const char *name;
	uint64_t t0;
	pid_t pid;

	seg = mkseg("wait", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	ck_assert_int_eq(xseg_wait(seg, 0, 0), -ETIMEDOUT);
	ck_assert_int_eq(xseg_wait(seg, 0, 20 * MS), -ETIMEDOUT);
	xseg_set_spin(seg, 5 * MS);
	ck_assert_int_eq(xseg_wait(seg, 0, 20 * MS), -ETIMEDOUT);
	ck_assert_int_eq(xseg_wait(seg, 0, 2 * MS), -ETIMEDOUT);
	xseg_set_spin(seg, 0);
	ck_assert_int_eq(xseg_wait_reply(seg, client, 20 * MS, &rep),
			 -ETIMEDOUT);

	/* Pending work: no wait at all. */
	ck_assert_int_eq(xseg_get_request(seg, client, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 0), 0);
	ck_assert_int_eq(xseg_wait(seg, 0, 0), 0);
	ck_assert_int_eq(xseg_wait(seg, 0, XSEG_WAIT_FOREVER), 0);
	ck_assert_int_eq(xseg_accept(seg, 0, &req), 0);
	ck_assert_int_eq(xseg_respond(seg, req, 0), 0);
	ck_assert_int_eq(xseg_wait(seg, client, 0), 0);
	ck_assert_int_eq(xseg_wait_reply(seg, client, 0, &rep), 0);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);

	/* A kick from another process ends an endless wait. */
	woken = mmap(NULL, sizeof(*woken), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(woken, MAP_FAILED);
	*woken = 0;
	ka = (struct kick_arg){name, 0, woken};
	pid = xtu_fork(child_kick, &ka);
	t0 = xtu_now_ms();
	ck_assert_int_eq(xseg_wait(seg, 0, 30000 * MS), 0);
	ck_assert_uint_lt(xtu_now_ms() - t0, 29000);
	__atomic_store_n(woken, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);
	munmap(woken, sizeof(*woken));
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */

struct dead_client_arg {
	const char *name;
	int n;
};

/* Submit n requests to port 0, keep two prepared, then die. */
static int child_dead_client(void *arg)
{
	struct dead_client_arg *a = arg;
	struct xseg_request *req;
	struct xseg *seg;
	uint32_t port;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_alloc_port(seg, "doomed", &port))
		return 1;
	for (int i = 0; i < a->n + 2; i++) {
		if (xseg_get_request(seg, port, &req) ||
		    xseg_prep_request(seg, req, 1, 100))
			return 2;
		req->target[0] = 'x';
		req->op = XSEG_OP_READ;
		if (i < a->n && xseg_submit(seg, req, 0))
			return 3;
	}
	_exit(0);
}

START_TEST(test_reap_dead_client)
{
	struct dead_client_arg a;
	struct xseg_port_info info;
	struct xseg_reap_stats st;
	uint64_t rejected, failed;
	struct xseg_request *acc[16];
	struct xseg *seg;
	const char *name;
	pid_t pid;
	unsigned n;

	seg = mkseg("deadcl", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	a = (struct dead_client_arg){name, 6};
	pid = xtu_fork(child_dead_client, &a);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);
	/* Accept half before the reap, answer after it. */
	n = xseg_accept_batch(seg, 0, acc, 3);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.ports_reclaimed, 1);
	ck_assert_uint_eq(st.requests_freed, 2); /* the prepared ones */
	ck_assert_int_eq(xseg_reap(seg, &st), 0);
	/* The three still queued were sent by a port reclaimed since:
	 * accept drops them (review9 R9-7: a dead sender's write run late
	 * could land after newer writes) and returns them to the pool. */
	ck_assert_int_eq(xseg_port_info(seg, 0, &info), 0);
	rejected = info.rejected;
	failed = info.failed;
	n += xseg_accept_batch(seg, 0, acc + 3, 13);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(xseg_port_info(seg, 0, &info), 0);
	ck_assert_uint_eq(info.rejected - rejected, 3);
	/* never accepted: not failed either, so accepted - served -
	 * failed - forwarded stays what the port holds (review10 F1) */
	ck_assert_uint_eq(info.failed, failed);
	ck_assert_uint_eq(
	    info.accepted - info.served - info.failed - info.forwarded, 3);
	ck_assert_uint_eq(xseg_requests_queued(seg, 0), 0);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(xseg_respond(seg, acc[i], 0), 0);
	/* Nobody to answer to: the replies wait on the free port's reply
	 * queue until a reap returns them to the pool. */
	ck_assert_int_eq(xseg_reap(seg, &st), 0);
	ck_assert_uint_eq(st.requests_freed, 3);
	ck_assert_uint_eq(xtu_free_requests(seg), 64);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */

struct live_server_arg {
	const char *name;
	int up, down; /* pipe ends: to the parent, from the parent */
};

/* Bind port 1, accept one request, report, answer it when told to. */
static int child_live_server(void *arg)
{
	struct live_server_arg *a = arg;
	struct xseg_request *r;
	struct xseg *seg;
	char c;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, 1, "server"))
		return 1;
	if (write(a->up, "b", 1) != 1)
		return 2;
	while (xseg_accept(seg, 1, &r) != 0)
		xseg_wait(seg, 1, 10 * MS);
	if (write(a->up, "a", 1) != 1 || read(a->down, &c, 1) != 1)
		return 3;
	if (xseg_respond(seg, r, 0))
		return 4; /* the port or the request was taken away */
	return 0;
}

/* A peer whose main thread exited (pthread_exit) while a worker runs on:
 * bind port 1, start the worker, report, and leave the main thread. */
static void *child_worker_forever(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static int child_leader_exits(void *arg)
{
	struct live_server_arg *a = arg;
	struct xseg *seg;
	pthread_t t;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, 1, "server") ||
	    pthread_create(&t, NULL, child_worker_forever, NULL))
		return 1;
	if (write(a->up, "b", 1) != 1)
		return 2;
	pthread_exit(NULL);
}

static bool leader_is_zombie(void *arg)
{
	struct xseg_proc_stat ps;

	return !xseg_proc_stat_read(*(pid_t *)arg, &ps) && ps.state == 'Z';
}

/* the zombie leader is the process's last thread */
static bool leader_alone(void *arg)
{
	struct xseg_proc_stat ps;

	return !xseg_proc_stat_read(*(pid_t *)arg, &ps) && ps.state == 'Z' &&
	       ps.num_threads == 1;
}

/* safety20 N1: /proc/PID/stat's state is the thread-group leader's. A
 * leader that exited is a zombie while the process's other threads still
 * run (or still finish a system call writing into a request buffer after
 * a SIGKILL); the reaper must take the owner for alive until the last
 * thread is gone, not reclaim its port and requests under it. */
START_TEST(test_reap_keeps_port_of_exited_leader)
{
	struct xseg_port_info pi;
	struct live_server_arg a;
	struct xseg_reap_stats st;
	struct xseg_proc_stat ps;
	struct xseg *seg;
	const char *name;
	int fds[2];
	pid_t pid;
	char c;

	seg = mkseg("zleader", &name);
	ck_assert_int_eq(pipe(fds), 0);
	a = (struct live_server_arg){name, fds[1], -1};
	pid = xtu_fork(child_leader_exits, &a);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	ck_assert_int_eq(xtu_wait_until(leader_is_zombie, &pid, 10000), 0);
	ck_assert_int_eq(xseg_proc_stat_read(pid, &ps), 0);
	ck_assert_int_gt(ps.num_threads, 1);
	ck_assert_int_eq(xseg_reap(seg, &st), 0);
	ck_assert_uint_eq(st.ports_reclaimed, 0);
	ck_assert_int_eq(xseg_port_alive(seg, 1), 1);
	/* and xseg_port_info says why: alive, exiting (review20 N1-B) */
	ck_assert_int_eq(xseg_port_info(seg, 1, &pi), 0);
	ck_assert(pi.alive && pi.exiting);
	/* the last thread gone, the zombie not yet waited for: dead,
	 * reclaimed */
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait_until(leader_alone, &pid, 10000), 0);
	ck_assert_int_eq(xseg_port_info(seg, 1, &pi), 0);
	ck_assert(!pi.alive && !pi.exiting);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.ports_reclaimed, 1);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	close(fds[0]);
	close(fds[1]);
	xseg_leave(seg);
}
END_TEST

/* F1: a reaper that cannot read /proc/PID/stat (out of descriptors) must
 * take the owner for alive, not reclaim a live peer's port. */
START_TEST(test_reap_emfile_keeps_live_port)
{
	struct live_server_arg a;
	struct xseg_reap_stats st = {0};
	struct xseg_request *req, *rep;
	struct rlimit rl, low;
	int up[2], down[2], fd, first = -1, last = -1, rc;
	struct xseg *seg;
	const char *name;
	pid_t pid;
	char c;

	seg = mkseg("emfile", &name);
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	a = (struct live_server_arg){name, up[1], down[0]};
	pid = xtu_fork(child_live_server, &a);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_get_request(seg, 0, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 1), 0);
	ck_assert_int_eq(read(up[0], &c, 1), 1); /* accepted */

	/* Use up every descriptor: opening /proc/PID/stat fails EMFILE. */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	low = rl;
	low.rlim_cur = 64;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) {
		if (first < 0)
			first = fd;
		last = fd;
	}
	rc = xseg_reap(seg, &st);
	for (fd = first; first >= 0 && fd <= last; fd++)
		if (fd != up[0] && fd != up[1] && fd != down[0] &&
		    fd != down[1])
			close(fd);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(st.ports_reclaimed, 0);
	ck_assert_uint_eq(st.requests_failed, 0);
	ck_assert_int_eq(xseg_port_alive(seg, 1), 1);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);

	/* The live server still owns its port and answers normally. */
	ck_assert_int_eq(write(down[1], "r", 1), 1);
	ck_assert_int_eq(xseg_wait_reply(seg, 0, 10000 * MS, &rep), 0);
	ck_assert_ptr_eq(rep, req);
	ck_assert_int_eq(rep->error, 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 0);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	xseg_leave(seg);
}
END_TEST

/* F3: a client that polls with short timeouts (vlmc's NBD completer: 100
 * ms) still gets a request held by a peer that died failed back, with
 * xseg_wait_reply and with xseg_wait + xseg_receive. */
static void short_wait_case(bool use_wait)
{
	struct live_server_arg a;
	struct xseg_request *req, *rep = NULL;
	int up[2], down[2], rc = -ETIMEDOUT;
	struct xseg *seg;
	const char *name;
	pid_t pid;
	char c;

	seg = mkseg("shortwait", &name);
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	a = (struct live_server_arg){name, up[1], down[0]};
	pid = xtu_fork(child_live_server, &a);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_get_request(seg, 0, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 1), 0);
	ck_assert_int_eq(read(up[0], &c, 1), 1); /* accepted */
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	/* Up to 30 s of 50 ms polls; the reap is due after 100 ms. */
	for (int i = 0; i < 600 && rc != 0; i++) {
		if (use_wait) {
			xseg_wait(seg, 0, 50 * MS);
			rc = xseg_receive(seg, 0, &rep);
		} else {
			rc = xseg_wait_reply(seg, 0, 50 * MS, &rep);
			ck_assert_int_eq(rc == 0 || rc == -ETIMEDOUT, 1);
		}
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_ptr_eq(rep, req);
	ck_assert_int_eq(rep->error, ECONNRESET);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	xseg_leave(seg);
}

START_TEST(test_short_waits_reap)
{
	short_wait_case(false);
	short_wait_case(true);
}
END_TEST

/* F8: a server that stopped accepting waits for replies only: a request
 * sitting on its queue must not end the wait (or the drain would spin). */
START_TEST(test_wait_replies_ignores_requests)
{
	struct xseg_request *req, *rep;
	struct xseg *seg;

	seg = mkseg("waitrep", NULL);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "server"), 0);
	ck_assert_int_eq(xseg_get_request(seg, 0, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 1), 0);
	ck_assert_int_eq(xseg_wait(seg, 1, 20 * MS), 0);
	ck_assert_int_eq(xseg_wait_replies(seg, 1, 20 * MS), -ETIMEDOUT);
	ck_assert_int_eq(xseg_wait_replies(seg, 99, 0), -EINVAL);
	ck_assert_int_eq(xseg_wait_replies(seg, 0, 0), -ETIMEDOUT);
	ck_assert_int_eq(xseg_accept(seg, 1, &rep), 0);
	ck_assert_int_eq(xseg_respond(seg, rep, 0), 0);
	ck_assert_int_eq(xseg_wait_replies(seg, 0, 20 * MS), 0);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	xseg_leave(seg);
}
END_TEST

/* Bind port 1 and sleep on it for ever (killed by the parent). */
static int child_sleeper(void *arg)
{
	struct xseg *seg;

	if (xseg_join(arg, &seg, NULL, 0) || xseg_bind_port(seg, 1, "sleepy"))
		return 1;
	for (;;)
		xseg_wait(seg, 1, XSEG_WAIT_FOREVER);
}

static bool sleeper_registered(void *arg)
{
	struct xseg *seg = arg;

	return (uint32_t)__atomic_load_n(&seg->ports[1].port->sleepers,
					 __ATOMIC_SEQ_CST) == 1;
}

/* F9: a waiter SIGKILLed inside FUTEX_WAIT leaves sleepers = 1; the reclaim
 * of its port resets it, so signals to the next owner are no syscall. */
START_TEST(test_reclaim_resets_sleepers)
{
	struct xseg_port_info pi;
	uint64_t signals, wakes;
	struct xseg *seg;
	const char *name;
	uint32_t seq;
	pid_t pid;

	seg = mkseg("sleepers", &name);
	pid = xtu_fork(child_sleeper, (void *)name);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(xtu_wait_until(sleeper_registered, seg, 10000), 0);
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	ck_assert_int_eq(xseg_reap(seg, NULL), 1);
	ck_assert_uint_eq((uint32_t)seg->ports[1].port->sleepers, 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "next"), 0);
	seq = seg->ports[1].port->futex_seq;
	ck_assert_int_eq(xseg_port_info(seg, 1, &pi), 0);
	signals = pi.signals;
	wakes = pi.wakes;
	for (int i = 0; i < 10; i++)
		xseg_signal(seg, 1);
	ck_assert_uint_eq(seg->ports[1].port->futex_seq, seq);
	/* Counted as signals, none of them a wake. */
	ck_assert_int_eq(xseg_port_info(seg, 1, &pi), 0);
	ck_assert_uint_eq(pi.signals, signals + 10);
	ck_assert_uint_eq(pi.wakes, wakes);
	ck_assert_uint_eq(pi.sleepers, 0);
	xseg_leave(seg);
}
END_TEST

static uint64_t port_signals(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_port_info(seg, port, &pi), 0);
	return pi.signals;
}

static uint64_t port_wakes(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_port_info(seg, port, &pi), 0);
	return pi.wakes;
}

/* Batched signaling: the *_batched calls queue at once but signal only
 * at the flush, once per port; a sleeping receiver gets exactly one
 * FUTEX_WAKE for a batch; bad input is refused and nothing is noted. */
START_TEST(test_sigbatch)
{
	struct xseg_request *req[16], *acc, *r;
	struct xseg_sigbatch b;
	struct xseg_config cfg;
	struct xseg *seg;
	const char *name;
	uint64_t s0, w0;
	pid_t pid;

	xseg_config_default(&cfg);
	cfg.size = 16ULL << 20;
	cfg.nr_static_ports = 12;
	cfg.nr_dynamic_ports = 0;
	cfg.nr_requests = 64;
	cfg.free_cache = 4;
	seg = mkseg_cfg("sigbatch", &cfg, &name);
	xseg_sigbatch_init(&b);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	for (uint32_t p = 2; p <= 10; p++)
		ck_assert_int_eq(xseg_bind_port(seg, p, "server"), 0);

	/* Bad input: refused, nothing noted, nothing queued. */
	ck_assert_int_eq(xseg_submit_batched(seg, NULL, 2, &b), -EINVAL);
	ck_assert_int_eq(xseg_get_request(seg, 0, &req[0]), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req[0], 1, 0), 0);
	req[0]->op = XSEG_OP_PING;
	req[0]->target[0] = 't';
	ck_assert_int_eq(xseg_submit_batched(seg, req[0], 99, &b), -EINVAL);
	ck_assert_int_eq(xseg_submit_batched(seg, req[0], 11, &b), -ENXIO);
	ck_assert_uint_eq(b.nr, 0);
	ck_assert_int_eq(xseg_accept(seg, 2, &acc), -EAGAIN);
	ck_assert_uint_eq(xseg_sigbatch_flush(seg, NULL), 0);
	ck_assert_uint_eq(xseg_sigbatch_flush(seg, &b), 0);

	/* Five submits to one port: queued at once, one signal at the
	 * flush. */
	s0 = port_signals(seg, 2);
	ck_assert_int_eq(xseg_submit_batched(seg, req[0], 2, &b), 0);
	for (int i = 1; i < 5; i++) {
		ck_assert_int_eq(xseg_get_request(seg, 0, &req[i]), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req[i], 0, 0), 0);
		req[i]->op = XSEG_OP_PING;
		ck_assert_int_eq(xseg_submit_batched(seg, req[i], 2, &b), 0);
	}
	ck_assert_uint_eq(b.nr, 1);
	ck_assert_uint_eq(port_signals(seg, 2), s0);
	ck_assert_uint_eq(xseg_sigbatch_flush(seg, &b), 1);
	ck_assert_uint_eq(b.nr, 0);
	ck_assert_uint_eq(port_signals(seg, 2), s0 + 1);

	/* Answers too: five responds to the client, one signal. Bad input
	 * first (a negative error, a request not accepted). */
	ck_assert_int_eq(xseg_respond_batched(seg, req[0], 0, &b), -EINVAL);
	s0 = port_signals(seg, 0);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(xseg_accept(seg, 2, &acc), 0);
		ck_assert_int_eq(xseg_respond_batched(seg, acc, -1, &b),
				 -EINVAL);
		ck_assert_int_eq(xseg_respond_batched(seg, acc, 0, &b), 0);
	}
	ck_assert_uint_eq(b.nr, 1);
	ck_assert_uint_eq(port_signals(seg, 0), s0);
	ck_assert_uint_eq(xseg_sigbatch_flush(seg, &b), 1);
	ck_assert_uint_eq(port_signals(seg, 0), s0 + 1);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(xseg_receive(seg, 0, &r), 0);
		ck_assert_int_eq(xseg_put_request(seg, r), 0);
	}

	/* Nine ports: the batch notes eight, the ninth is signalled at
	 * once. */
	for (uint32_t p = 2; p <= 10; p++) {
		ck_assert_int_eq(xseg_get_request(seg, 0, &req[p]), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req[p], 0, 0), 0);
		req[p]->op = XSEG_OP_PING;
		s0 = port_signals(seg, p);
		ck_assert_int_eq(xseg_submit_batched(seg, req[p], p, &b), 0);
		ck_assert_uint_eq(port_signals(seg, p), s0 + (p == 10));
	}
	ck_assert_uint_eq(b.nr, XSEG_SIGBATCH_PORTS);
	ck_assert_uint_eq(xseg_sigbatch_flush(seg, &b), XSEG_SIGBATCH_PORTS);
	for (uint32_t p = 2; p <= 10; p++) {
		ck_assert_int_eq(xseg_accept(seg, p, &acc), 0);
		ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
		ck_assert_int_eq(xseg_receive(seg, 0, &r), 0);
		ck_assert_int_eq(xseg_put_request(seg, r), 0);
	}

	/* A sleeping receiver: 16 batched submits make no wake-up; the
	 * flush makes exactly one. */
	pid = xtu_fork(child_sleeper, (void *)name);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(xtu_wait_until(sleeper_registered, seg, 10000), 0);
	w0 = port_wakes(seg, 1);
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(xseg_get_request(seg, 0, &req[i]), 0);
		ck_assert_int_eq(xseg_prep_request(seg, req[i], 0, 0), 0);
		req[i]->op = XSEG_OP_PING;
		ck_assert_int_eq(xseg_submit_batched(seg, req[i], 1, &b), 0);
	}
	ck_assert_uint_eq(port_wakes(seg, 1), w0);
	ck_assert_uint_eq(xseg_sigbatch_flush(seg, &b), 1);
	ck_assert_uint_eq(port_wakes(seg, 1), w0 + 1);
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	ck_assert_int_eq(xseg_reap(seg, NULL), 1);
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(xseg_receive(seg, 0, &r), 0);
		ck_assert_int_eq(r->error, ECONNRESET);
		ck_assert_int_eq(xseg_put_request(seg, r), 0);
	}
	ck_assert_uint_eq(xtu_free_requests(seg), 64);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */

struct binder_arg {
	const char *name;
	uint32_t port;
};

/* Bind a static port and die holding it. */
static int child_bind_and_die(void *arg)
{
	struct binder_arg *a = arg;
	struct xseg *seg;

	if (xseg_join(a->name, &seg, NULL, 0) ||
	    xseg_bind_port(seg, a->port, "doomed"))
		return 1;
	_exit(0);
}

/* F2/F7: a request in the (SUBMITTED, dead port) state that is on no queue
 * (a submit or forward between its CAS and its enqueue, or an accept
 * killed between dequeue and CAS) is failed back by the reaper, and the
 * late enqueue is harmless: exactly one reply, the pool stays whole. */
START_TEST(test_reap_submit_race)
{
	struct binder_arg a;
	struct xseg_reap_stats st = {0};
	struct xseg_request *req, *acc, *rep;
	struct xseg *seg;
	const char *name;
	uint32_t idx;

	seg = mkseg("subrace", &name);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 2, "middle"), 0);
	a = (struct binder_arg){name, 1};
	ck_assert_int_eq(xtu_wait(xtu_fork(child_bind_and_die, &a), 10000), 0);

	/* B: submit to port 1 (dead, not reaped yet) stopped after its
	 * CAS: exactly the word xseg_submit publishes. */
	ck_assert_int_eq(xseg_get_request(seg, 0, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	idx = req->index;
	__atomic_store_n(&req->state_holder, xseg_rs_pack(XSEG_RS_SUBMITTED, 1),
			 __ATOMIC_RELEASE);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_failed, 1);
	/* The submitter resumes: its enqueue lands on the freed port. */
	ck_assert_int_eq(xq_enqueue(seg->ports[1].reqq, idx), 0);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
	ck_assert_ptr_eq(rep, req);
	ck_assert_int_eq(rep->error, ECONNRESET);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	ck_assert_int_eq(xseg_reap(seg, &st), 0); /* drops the stale index */
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	ck_assert_uint_eq(req->state, XSEG_RS_RECEIVED);

	/* A: forward from port 2 to port 3 whose owner then dies, stopped
	 * after the forward's store of (SUBMITTED, 3). */
	a.port = 3;
	ck_assert_int_eq(xtu_wait(xtu_fork(child_bind_and_die, &a), 10000), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 2), 0);
	ck_assert_int_eq(xseg_accept(seg, 2, &acc), 0);
	__atomic_store_n(&acc->state_holder, xseg_rs_pack(XSEG_RS_SUBMITTED, 3),
			 __ATOMIC_RELEASE);
	ck_assert_int_eq(xseg_reap(seg, &st), 1);
	ck_assert_uint_eq(st.requests_failed, 1);
	ck_assert_int_eq(xq_enqueue(seg->ports[3].reqq, idx), 0);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
	ck_assert_int_eq(rep->error, ECONNRESET);
	/* The client owns it again: it can put it; nothing else changes. */
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	ck_assert_int_eq(xseg_reap(seg, &st), 0);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	ck_assert_uint_eq(xtu_free_requests(seg), 64);
	xseg_leave(seg);
}
END_TEST

/* F2/F6: the reaper and late answers act only from the exact pair they
 * read; whoever comes second changes nothing and enqueues nothing. */
START_TEST(test_answer_race_cas)
{
	struct xseg_request *req, *acc, *rep;
	uint64_t w;
	struct xseg *seg;

	seg = mkseg("ansrace", NULL);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "client"), 0);
	ck_assert_int_eq(xseg_bind_port(seg, 1, "server"), 0);
	ck_assert_int_eq(xseg_get_request(seg, 0, &req), 0);
	ck_assert_int_eq(xseg_prep_request(seg, req, 0, 0), 0);
	req->op = XSEG_OP_PING;
	ck_assert_int_eq(xseg_submit(seg, req, 1), 0);
	ck_assert_int_eq(xseg_accept(seg, 1, &acc), 0);
	/* A reaper that read a stale word loses and does nothing. */
	w = xseg_rs_load(acc);
	ck_assert_int_eq(xseg_fail_back(seg, acc,
					xseg_rs_next(w, XSEG_RS_SUBMITTED, 1),
					ECONNRESET, 1, false),
			 XSEG_FB_LOST);
	ck_assert_uint_eq(acc->state, XSEG_RS_ACCEPTED);
	ck_assert_int_eq(acc->error, 0);
	/* A release (reaper) that wins: the late respond and forward are
	 * refused, the client gets exactly one answer. */
	ck_assert_int_eq(xseg_fail_back(seg, acc, w, ECONNRESET, 1, true),
			 XSEG_FB_QUEUED);
	ck_assert_int_lt(xseg_respond(seg, acc, 0), 0);
	ck_assert_int_lt(xseg_forward(seg, acc, 2), 0);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), 0);
	ck_assert_int_eq(rep->error, ECONNRESET);
	ck_assert_int_eq(xseg_receive(seg, 0, &rep), -EAGAIN);
	/* A put racing a reaper of the client: only one of them frees. */
	ck_assert_int_eq(
	    xseg_free_to_pool(seg, rep, xseg_rs_pack(XSEG_RS_PREPARED, 0), 0),
	    false);
	ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	ck_assert_int_eq(xseg_put_request(seg, rep), -EALREADY);
	ck_assert_uint_eq(xtu_free_requests(seg), 64);
	xseg_leave(seg);
}
END_TEST

/* ---------------------------------------------------------------------- */

static int child_big_reader(void *arg)
{
	const char *name = arg;
	struct xseg_request *req, *rep;
	struct xseg *seg;
	uint32_t port;
	char *d;

	if (xseg_join(name, &seg, NULL, 0) ||
	    xseg_alloc_port(seg, "reader", &port))
		return 1;
	if (xseg_get_request(seg, port, &req) ||
	    xseg_prep_request(seg, req, 3, 8192))
		return 2;
	if (req->data_off < (3ULL << 30) / 2)
		return 3; /* the third buffer lies beyond 2 GiB */
	d = xseg_request_data(seg, req);
	memcpy(req->target, "big", 3);
	req->op = XSEG_OP_READ;
	req->offset = 5;
	if (xseg_submit(seg, req, 0) ||
	    xseg_wait_reply(seg, port, 10000 * MS, &rep) || rep->error)
		return 4;
	for (int i = 0; i < 8192; i++)
		if ((unsigned char)d[i] != xtu_pattern(5, i))
			return 5;
	xseg_put_request(seg, rep);
	xseg_release_port(seg, port);
	xseg_leave(seg);
	return 0;
}

START_TEST(test_segment_3gib)
{
	struct xseg_request *r1, *r2, *acc;
	struct xseg_config cfg;
	struct xseg_info info;
	uint32_t client;
	struct xseg *seg;
	const char *name;
	pid_t pid;

	xseg_config_default(&cfg);
	cfg.size = 3ULL << 30;
	seg = mkseg_cfg("big", &cfg, &name);
	xseg_info(seg, &info);
	ck_assert_uint_gt(info.heap_bytes, 2ULL << 30);
	ck_assert_int_eq(xseg_bind_port(seg, 0, "server"), 0);
	ck_assert_int_eq(xseg_alloc_port(seg, "client", &client), 0);
	/* Two 1 GiB buffers (only their headers are touched) push the next
	 * allocation past 2 GiB. */
	ck_assert_int_eq(xseg_get_request(seg, client, &r1), 0);
	ck_assert_int_eq(xseg_get_request(seg, client, &r2), 0);
	ck_assert_int_eq(xseg_prep_request(seg, r1, 1, 1ULL << 30), 0);
	ck_assert_int_eq(xseg_prep_request(seg, r2, 1, 1ULL << 30), 0);
	ck_assert_uint_eq(r2->data_cap, 1ULL << 30);
	r2->target[0] = 'b';
	r2->op = XSEG_OP_WRITE;
	ck_assert_int_eq(xseg_validate_request(seg, r2), 0);

	pid = xtu_fork(child_big_reader, (void *)name);
	/* Serve the child's read from here. */
	uint64_t deadline = xtu_now_ms() + 20000;
	while (xseg_accept(seg, 0, &acc) == -EAGAIN) {
		ck_assert_uint_lt(xtu_now_ms(), deadline);
		xseg_wait(seg, 0, 100 * MS);
	}
	ck_assert_uint_gt(acc->data_off, 2ULL << 30);
	unsigned char *d = xseg_request_data(seg, acc);
	for (uint64_t i = 0; i < acc->size; i++)
		d[i] = xtu_pattern(acc->offset, i);
	acc->serviced = acc->size;
	ck_assert_int_eq(xseg_respond(seg, acc, 0), 0);
	ck_assert_int_eq(xtu_wait(pid, 20000), 0);
	ck_assert_int_eq(xseg_put_request(seg, r1), 0);
	ck_assert_int_eq(xseg_put_request(seg, r2), 0);
	xseg_leave(seg);
}
END_TEST

/* A command name that looks like the fields after it: ") Z" as if a
 * zombie, and more ")" and numbers. */
#define TRICKY_COMM "x) Z 1 (y) 2 3"

static int child_tricky_name(void *arg)
{
	(void)arg;
	if (prctl(PR_SET_NAME, TRICKY_COMM))
		return 1;
	for (;;)
		pause();
	return 0;
}

/* Named, and asleep in its pause(): read from /proc/PID/comm and the
 * "State:" line of /proc/PID/status, not through the parser under test.
 * Named is not enough: between its prctl and its pause the child runs
 * (state R), which a loaded machine shows. */
static bool comm_is_tricky(void *arg)
{
	char path[64], comm[32] = "", line[128];
	bool sleeping = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", *(pid_t *)arg);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = 0;
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/status", *(pid_t *)arg);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "State:", 6)) {
			sleeping = strstr(line, "S (sleeping)") != NULL;
			break;
		}
	fclose(f);
	return sleeping && !strcmp(comm, TRICKY_COMM "\n");
}

/*
 * xseg_proc_stat_read's contract: the fields after the LAST ')' of
 * /proc/PID/stat, whatever the command name holds (a parser that counts
 * from the first ')' reads this sleeping child as a zombie); -ESRCH once
 * the process is gone.
 */
START_TEST(test_proc_stat_tricky_comm)
{
	struct xseg_proc_stat self, ps;
	pid_t pid = xtu_fork(child_tricky_name, NULL);

	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(xseg_proc_stat_read(getpid(), &self), 0);
	ck_assert_int_eq(self.state, 'R'); /* reading its own stat */
	ck_assert_int_eq(xtu_wait_until(comm_is_tricky, &pid, 10000), 0);
	ck_assert_int_eq(xseg_proc_stat_read(pid, &ps), 0);
	ck_assert_msg(ps.state == 'S', "state '%c'", ps.state);
	/* started after this process; only named itself and paused (under
	 * a second of CPU: fields 14, 15 read, not others) */
	ck_assert_uint_ge(ps.start_time, self.start_time);
	ck_assert_uint_lt(ps.utime + ps.stime, sysconf(_SC_CLK_TCK));
	ck_assert_int_eq(xtu_kill(pid, SIGKILL), 0);
	ck_assert_int_eq(xtu_wait(pid, 10000), 128 + SIGKILL);
	ck_assert_int_eq(xseg_proc_stat_read(pid, &ps), -ESRCH);
}
END_TEST

static Suite *xseg_suite(void)
{
	Suite *s = suite_create("xseg");
	TCase *tc = tcase_create("segment");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_create_join_leave);
	tcase_add_test(tc, test_create_errors);
	tcase_add_test(tc, test_min_size);
	tcase_add_test(tc, test_min_size_for_data);
	tcase_add_test(tc, test_max_size);
	tcase_add_test(tc, test_join_checks);
	suite_add_tcase(s, tc);

	tc = tcase_create("ports");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_static_ports);
	tcase_add_test(tc, test_dynamic_ports);
	suite_add_tcase(s, tc);

	tc = tcase_create("requests");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_lifecycle_local);
	tcase_add_test(tc, test_requests_queued);
	tcase_add_test(tc, test_bad_inputs);
	tcase_add_test(tc, test_pool_exhaustion);
	tcase_add_test(tc, test_data_resize);
	tcase_add_test(tc, test_lifecycle_mp);
	tcase_add_test(tc, test_validation_mp);
	tcase_add_test(tc, test_redirect_forward_local);
	tcase_add_test(tc, test_redirect_cache_of_other_path);
	tcase_add_test(tc, test_wait_timeout_kick);
	tcase_add_test(tc, test_reap_dead_client);
	tcase_add_test(tc, test_reap_emfile_keeps_live_port);
	tcase_add_test(tc, test_reap_keeps_port_of_exited_leader);
	tcase_add_test(tc, test_short_waits_reap);
	tcase_add_test(tc, test_wait_replies_ignores_requests);
	tcase_add_test(tc, test_reclaim_resets_sleepers);
	tcase_add_test(tc, test_sigbatch);
	tcase_add_test(tc, test_reap_submit_race);
	tcase_add_test(tc, test_answer_race_cas);
	tcase_add_test(tc, test_segment_3gib);
	tcase_add_test(tc, test_proc_stat_tricky_comm);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{

	xtu_init();
	return xtu_run_suite(xseg_suite());
}
