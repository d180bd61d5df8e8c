/* SPDX-License-Identifier: MIT */
/*
 * xsegctl stack's configuration: the embedded default, the "key = value"
 * parser with its per-key bounds, the checks across keys, and the printer
 * that writes a running stack's DIR/run/stack.conf (read back by stop,
 * status, plug and unplug). Apart from the rest of xsegctl_stack.c so
 * that the fuzz target tests/fuzz/fuzz_stack_conf.c links it without a
 * segment, peers or processes (docs/fuzzing.md).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer_util.h"
#include "xsegctl_cmds.h"
#include "xsegctl_stack.h"

#include "volume.h" /* VLMC_TABLE_MAX: vlmc's first read */

const char stack_default_conf[] =
    "# embedded default stack (xsegctl stack start without CONFIG)\n"
    "dir = " XSEGCTL_STACK_DIR "\n"
    "segment_size = 1G\n"
    "requests = 8192\n"
    "store = auto\n"
    "cached = on\n"
    "cache_size = 256M\n"
    "write_policy = writeback\n"
    "object_size = 4M\n"
    "store_threads = 2\n"
    "cached_threads = 1\n"
    "vlmc_threads = 2\n"
    "verify_reads = on\n"
    "supervise = on\n"
    "# the store sleeps on its port at once: a spinning peer holds a core\n"
    "# the next process of the chain needs (docs/vlmc.md, \"Spinning\");\n"
    "# the adaptive spin (spin = 20us, spin_policy = adaptive) tied with\n"
    "# this on 2 shared cores (docs/vlmc.md, \"Adaptive spin\")\n"
    "spin = 0\n"
    "# but cached polls (adaptively) up to 80us for the next request:\n"
    "# a queue-depth-1 client's next request comes within it, and its\n"
    "# hand-over then costs no wake-up (fio randread at queue depth 1\n"
    "# through NBD 1.9x, queue depth 16 3-11 % lower; docs/performance.md,\n"
    "# \"Session 24\"); an idle stack backs off to sleeping. A config\n"
    "# that sets spin but not cached_spin gives cached its spin instead\n"
    "cached_spin = 80us\n"
    "# but vlmc's NBD completers poll (adaptively) for cached's replies:\n"
    "# randread at queue depth 16 0-8 % faster on 2 cores\n"
    "# (docs/performance.md, \"Session 20\"); a config that sets spin\n"
    "# but not vlmc_spin gives vlmc its spin instead\n"
    "vlmc_spin = 20us\n";

void stack_err(const char *fmt, ...)
{
	va_list ap;

	fputs("xsegctl: stack: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int stack_bool(const char *v, bool *out)
{
	if (!strcmp(v, "on") || !strcmp(v, "yes") || !strcmp(v, "true") ||
	    !strcmp(v, "1"))
		*out = true;
	else if (!strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "false") ||
		 !strcmp(v, "0"))
		*out = false;
	else
		return -EINVAL;
	return 0;
}

int stack_str(char *dst, size_t cap, const char *v)
{
	if (strlen(v) >= cap)
		return -ENAMETOOLONG;
	strcpy(dst, v);
	return 0;
}

/* A duration key in whole seconds, 1s .. max_s (bare number = seconds):
 * start_timeout, exiting_timeout */
static int stack_set_whole_seconds(char *dst, size_t cap, const char *v,
				   uint64_t max_s)
{
	uint64_t x;

	if (peer_parse_duration(v, 1000000000ULL, &x) || x < 1000000000ULL ||
	    x > max_s * 1000000000ULL || x % 1000000000ULL)
		return -EINVAL;
	return stack_str(dst, cap, v);
}

/* A *_threads key: the peers' -t bound (peer.c), so that a value they
 * would refuse fails here, with the line number, not at every start. */
static int stack_threads(const char *v, uint64_t *out)
{
	uint64_t x;

	if (peer_parse_u64(v, &x) || x == 0 || x > STACK_MAX_THREADS)
		return -EINVAL;
	*out = x;
	return 0;
}

/* One "key = value" setting. */
static int stack_set(struct stack *st, const char *k, const char *v)
{
	uint64_t x;

	if (!strcmp(k, "dir"))
		return *v ? stack_str(st->dir, sizeof(st->dir), v) : -EINVAL;
	if (!strcmp(k, "segment"))
		return stack_str(st->segment, sizeof(st->segment), v);
	if (!strcmp(k, "segment_size")) {
		/* xseg_create's page multiple and a mappable size, here:
		 * 64k or 4097 was taken and refused only by xseg_create,
		 * after start had removed a left-over segment, in a message
		 * that did not name the key; 1E failed mmap there */
		if (peer_parse_size(v, &x) || !x || x % 4096 ||
		    x > STACK_MAX_SEGMENT_SIZE)
			return -EINVAL;
		st->segment_size = x;
		return 0;
	}
	if (!strcmp(k, "requests")) {
		/* xseg_create's bounds, here: the pool size is 32 bits in
		 * struct xseg_config, and 4294967298 was taken and cut to a
		 * pool of 2 (found while writing fuzz_stack_conf) */
		if (peer_parse_u64(v, &x) || x < 2 || x > XSEG_MAX_REQUESTS)
			return -EINVAL;
		st->requests = x;
		return 0;
	}
	if (!strcmp(k, "store")) {
		if (strcmp(v, "blocker") && strcmp(v, "noop") &&
		    strcmp(v, "auto"))
			return -EINVAL;
		return stack_str(st->store, sizeof(st->store), v);
	}
	if (!strcmp(k, "cached"))
		return stack_bool(v, &st->cached);
	if (!strcmp(k, "verify_reads"))
		return stack_bool(v, &st->verify_reads);
	if (!strcmp(k, "supervise"))
		return stack_bool(v, &st->supervise);
	if (!strcmp(k, "cache_size"))
		return peer_parse_size(v, &x)
			   ? -EINVAL
			   : stack_str(st->cache_size, sizeof(st->cache_size),
				       v);
	/* vlmc's bound (vlmc_obj_size_valid): a value it refuses made it
	 * fail only after the stack had waited 30 s (review11 N-I) */
	if (!strcmp(k, "object_size"))
		return peer_parse_size(v, &x) || x < STACK_MIN_OBJECT_SIZE ||
			       x > STACK_MAX_OBJECT_SIZE || (x & (x - 1))
			   ? -EINVAL
			   : stack_str(st->object_size, sizeof(st->object_size),
				       v);
	if (!strcmp(k, "store_segment_size")) {
		/* blocker --segment-size: auto, or whole MiB (blocker_create
		 * refuses the rest; 0 is not taken for auto) */
		if (strcmp(v, "auto") && (peer_parse_size(v, &x) ||
					  x < (1ULL << 20) || x % (1ULL << 20)))
			return -EINVAL;
		return stack_str(st->store_segment_size,
				 sizeof(st->store_segment_size), v);
	}
	if (!strcmp(k, "store_reserve")) {
		/* blocker --reserve: auto, 0 (none) or at least 1 MiB
		 * (blocker_reserve_opt) */
		if (strcmp(v, "auto") &&
		    (peer_parse_size(v, &x) ||
		     (x && (x < (1ULL << 20) || x == UINT64_MAX))))
			return -EINVAL;
		return stack_str(st->store_reserve, sizeof(st->store_reserve),
				 v);
	}
	if (!strcmp(k, "write_policy")) {
		if (strcmp(v, "writeback") && strcmp(v, "writethrough"))
			return -EINVAL;
		return stack_str(st->write_policy, sizeof(st->write_policy), v);
	}
	if (!strcmp(k, "store_threads"))
		return stack_threads(v, &st->store_threads);
	if (!strcmp(k, "cached_threads"))
		return stack_threads(v, &st->cached_threads);
	if (!strcmp(k, "vlmc_threads"))
		return stack_threads(v, &st->vlmc_threads);
	if (!strcmp(k, "spin"))
		return peer_parse_duration(v, 1000, &x)
			   ? -EINVAL
			   : stack_str(st->spin, sizeof(st->spin), v);
	if (!strcmp(k, "cached_spin"))
		return peer_parse_duration(v, 1000, &x) || x > 1000000000ULL
			   ? -EINVAL
			   : stack_str(st->cached_spin, sizeof(st->cached_spin),
				       v);
	if (!strcmp(k, "vlmc_spin"))
		return peer_parse_duration(v, 1000, &x) || x > 1000000000ULL
			   ? -EINVAL
			   : stack_str(st->vlmc_spin, sizeof(st->vlmc_spin), v);
	if (!strcmp(k, "spin_policy"))
		return strcmp(v, "adaptive") && strcmp(v, "fixed")
			   ? -EINVAL
			   : stack_str(st->spin_policy, sizeof(st->spin_policy),
				       v);
	if (!strcmp(k, "cpus")) {
		cpu_set_t set;

		return peer_parse_cpus(v, &set)
			   ? -EINVAL
			   : stack_str(st->cpus, sizeof(st->cpus), v);
	}
	if (!strcmp(k, "nbd_socket"))
		return stack_str(st->nbd_socket, sizeof(st->nbd_socket), v);
	if (!strcmp(k, "ctl_socket"))
		return stack_str(st->ctl_socket, sizeof(st->ctl_socket), v);
	if (!strcmp(k, "gc_threshold"))
		return peer_parse_u64(v, &x) || x > 100
			   ? -EINVAL
			   : stack_str(st->gc_threshold,
				       sizeof(st->gc_threshold), v);
	/* the same bounds as vlmc's options: a value vlmc refuses would
	 * make it fail at every (re)start */
	if (!strcmp(k, "nbd_max_conns"))
		/* each connection takes a dynamic port: the segment's 48
		 * (xsegctl create's default) minus 16 for vlmc's control
		 * port, xsegctl tools and benches (review12 F5) */
		return peer_parse_u64(v, &x) || x == 0 || x > 32
			   ? -EINVAL
			   : stack_str(st->nbd_max_conns,
				       sizeof(st->nbd_max_conns), v);
	if (!strcmp(k, "nbd_inflight_bytes"))
		return peer_parse_size(v, &x) || x == 0 || x > (1ULL << 40)
			   ? -EINVAL
			   : stack_str(st->nbd_inflight_bytes,
				       sizeof(st->nbd_inflight_bytes), v);
	if (!strcmp(k, "nbd_total_inflight"))
		return peer_parse_size(v, &x) || x == 0 || x > (1ULL << 40)
			   ? -EINVAL
			   : stack_str(st->nbd_total_inflight,
				       sizeof(st->nbd_total_inflight), v);
	if (!strcmp(k, "cache_max_objects"))
		return peer_parse_u64(v, &x) || x == 0 || x > (1ULL << 30)
			   ? -EINVAL
			   : stack_str(st->cache_max_objects,
				       sizeof(st->cache_max_objects), v);
	if (!strcmp(k, "nbd_spin"))
		return peer_parse_duration(v, 1000, &x) || x > 1000000000ULL
			   ? -EINVAL
			   : stack_str(st->nbd_spin, sizeof(st->nbd_spin), v);
	if (!strcmp(k, "dead_peer_wait"))
		return peer_parse_duration(v, 1000000000ULL, &x) ||
			       x > 3600ULL * 1000000000ULL
			   ? -EINVAL
			   : stack_str(st->dead_peer_wait,
				       sizeof(st->dead_peer_wait), v);
	if (!strcmp(k, "snapshot_drain_wait"))
		return peer_parse_duration(v, 1000000000ULL, &x) ||
			       x < 1000000ULL || x > 3600ULL * 1000000000ULL
			   ? -EINVAL
			   : stack_str(st->snapshot_drain_wait,
				       sizeof(st->snapshot_drain_wait), v);
	/* a duration (bare number = seconds), whole seconds, 1s .. 1h:
	 * the stall bound of a peer's start (stack_wait_port) */
	if (!strcmp(k, "start_timeout"))
		return stack_set_whole_seconds(st->start_timeout,
					       sizeof(st->start_timeout), v,
					       STACK_START_TIMEOUT_MAX_S);
	/* the same form: the bound of stop and unplug-cached on an exiting
	 * peer (stack_stop_port) */
	if (!strcmp(k, "exiting_timeout"))
		return stack_set_whole_seconds(st->exiting_timeout,
					       sizeof(st->exiting_timeout), v,
					       STACK_EXITING_TIMEOUT_MAX_S);
	if (!strcmp(k, "nbd_tcp"))
		return peer_parse_u64(v, &st->nbd_tcp) || st->nbd_tcp > 65535
			   ? -EINVAL
			   : 0;
	return -ENOENT;
}

/* What key k accepts, for the message that refuses a value. */
static const char *stack_key_allowed(const char *k)
{
	static const struct {
		const char *key, *allowed;
	} keys[] = {
	    {"dir", "a directory, not empty"},
	    {"segment", "a segment name"},
	    {"segment_size", "a size, a multiple of 4k, at most 64T, e.g. 1G"},
	    {"requests", "a number, 2 .. 1073741824"},
	    {"store", "blocker|noop|auto"},
	    {"cached", "on|off"},
	    {"verify_reads", "on|off"},
	    {"supervise", "on|off"},
	    {"cache_size", "a size, e.g. 256M"},
	    {"object_size", "a power of two, 512k .. 64M"},
	    {"write_policy", "writeback|writethrough"},
	    {"store_threads", "1 .. 1024"},
	    {"cached_threads", "1 .. 1024"},
	    {"vlmc_threads", "1 .. 1024"},
	    {"spin", "a duration, e.g. 20us or 0"},
	    {"spin_policy", "adaptive|fixed"},
	    {"cached_spin", "a duration, at most 1s"},
	    {"vlmc_spin", "a duration, at most 1s"},
	    {"cpus", "a CPU list, e.g. 1 or 0-3 or 0,2-3"},
	    {"nbd_socket", "a path"},
	    {"ctl_socket", "a path"},
	    {"gc_threshold", "a percentage, 0 .. 100"},
	    {"nbd_max_conns", "1 .. 32"},
	    {"nbd_inflight_bytes", "a size, 1 .. 1T"},
	    {"nbd_total_inflight", "a size, 1 .. 1T"},
	    {"nbd_spin", "a duration, at most 1s"},
	    {"cache_max_objects", "a number, 1 .. 1073741824"},
	    {"dead_peer_wait", "a duration, at most 1h"},
	    {"snapshot_drain_wait", "a duration, 1ms .. 1h"},
	    {"start_timeout", "a duration in whole seconds, 1s .. 1h"},
	    {"exiting_timeout", "a duration in whole seconds, 1s .. 1h"},
	    {"nbd_tcp", "a TCP port, 1 .. 65535, or 0 for none"},
	    {"store_segment_size", "auto, or a multiple of 1M"},
	    {"store_reserve", "auto, 0 for none, or a size of at least 1M"},
	};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(keys[i].key, k))
			return keys[i].allowed;
	return "see docs/operations.md";
}

static char *stack_trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

int stack_parse(struct stack *st, const char *text, const char *name)
{
	char *copy = strdup(text), *next, *line;
	int lineno = 0, rc = 0;
	bool spin_set = false, cached_spin_set = false, vlmc_spin_set = false;

	if (!copy)
		return -ENOMEM;
	/* strsep, not strtok_r: strtok_r skips empty lines, and every
	 * message after a blank line named the wrong line (review11 N-I) */
	for (next = copy; (line = strsep(&next, "\n"));) {
		char *eq, *k, *v;
		int e;

		lineno++;
		line[strcspn(line, "#")] = 0;
		k = stack_trim(line);
		if (!*k)
			continue;
		eq = strchr(k, '=');
		if (!eq) {
			stack_err("%s: line %d: expected 'key = value'", name,
				  lineno);
			rc = -EINVAL;
			break;
		}
		*eq = 0;
		v = stack_trim(eq + 1);
		k = stack_trim(k);
		e = stack_set(st, k, v);
		spin_set |= !e && !strcmp(k, "spin");
		cached_spin_set |= !e && !strcmp(k, "cached_spin");
		vlmc_spin_set |= !e && !strcmp(k, "vlmc_spin");
		if (e == -ENOENT) {
			stack_err("%s: line %d: unknown key '%s'", name, lineno,
				  k);
			rc = -EINVAL;
			break;
		}
		if (e == -ENAMETOOLONG) {
			stack_err("%s: line %d: value of %s too long (%zu "
				  "characters)",
				  name, lineno, k, strlen(v));
			rc = -EINVAL;
			break;
		}
		if (e) {
			stack_err("%s: line %d: bad value '%s' for %s (%s)",
				  name, lineno, v, k, stack_key_allowed(k));
			rc = -EINVAL;
			break;
		}
	}
	free(copy);
	/* A text that sets spin but not vlmc_spin (cached_spin) means spin
	 * for vlmc (cached) too: a config's "spin = 0" stops every peer
	 * spinning, and one written before the key existed keeps what it
	 * gave that peer; only the default's role spins, below a config's
	 * spin, give way (review20b B3). Applied per text, so a running
	 * stack's run/stack.conf (written with all three, or spin alone)
	 * reads back the same. */
	if (!rc && spin_set && !cached_spin_set)
		st->cached_spin[0] = 0;
	if (!rc && spin_set && !vlmc_spin_set)
		st->vlmc_spin[0] = 0;
	return rc;
}

const char *stack_role_spin(const struct stack *st, enum stack_role r)
{
	if (r == STACK_ROLE_CACHED && st->cached_spin[0])
		return st->cached_spin;
	if (r == STACK_ROLE_VLMC && st->vlmc_spin[0])
		return st->vlmc_spin;
	return st->spin;
}

void stack_xseg_config(const struct stack *st, struct xseg_config *cfg)
{
	xseg_config_default(cfg);
	cfg->size = st->segment_size;
	cfg->nr_requests = (uint32_t)st->requests;
}

int stack_check(const struct stack *st, const char *name)
{
	struct xseg_config cfg;
	uint64_t cache, object, min, max, heap, need;

	if (peer_parse_size(st->cache_size, &cache) ||
	    peer_parse_size(st->object_size, &object))
		return -EINVAL; /* stack_set checked both */
	/* the header, ports, queues and request pool come first: a size
	 * that cannot hold them for this pool fails xseg_create, which
	 * start reaches only after it removed a left-over segment */
	stack_xseg_config(st, &cfg);
	min = xseg_min_size(&cfg);
	if (!min || st->segment_size < min) {
		stack_err("%s: segment_size %" PRIu64 " is too small for "
			  "requests = %" PRIu64 ": the segment needs at least "
			  "%" PRIu64 " bytes (%" PRIu64 " MiB, rounded up) "
			  "for its header, ports, queues and request pool and "
			  "a page of data",
			  name, st->segment_size, st->requests, min,
			  (uint64_t)((min + (1ULL << 20) - 1) >> 20));
		return -EINVAL;
	}
	/* At its start cached reserves its requests to the store, and vlmc
	 * reads its volume table, through the segment's data heap: a
	 * segment without room for both failed the start late, after the
	 * store had started (cached's "cannot reserve request 0 of 32 for
	 * the next port", vlmc's "cannot read vlmc:meta.0"). cached's part
	 * only with cached = on: a later plug-cached needs it too
	 * (operations.md). */
	heap = xseg_heap_bytes_for(&cfg, VLMC_TABLE_MAX);
	if (st->cached)
		heap += STACK_CACHED_MAX_INFLIGHT *
			xseg_heap_bytes_for(&cfg, STACK_CACHED_MAX_REQ_SIZE);
	need = xseg_min_size_for_data(&cfg, heap);
	if (!need || st->segment_size < need) {
		char cached[96] = "";

		if (st->cached)
			snprintf(cached, sizeof(cached),
				 "cached reserves %u requests of %" PRIu64
				 " KiB to the store and ",
				 STACK_CACHED_MAX_INFLIGHT,
				 STACK_CACHED_MAX_REQ_SIZE >> 10);
		stack_err("%s: segment_size %" PRIu64 " is too small for the "
			  "peers' start: %svlmc reads its volume table (%u "
			  "KiB) through the segment's data heap, so with "
			  "requests = %" PRIu64 " the segment needs at least "
			  "%" PRIu64 " bytes (%" PRIu64 " MiB, rounded up), "
			  "and room beyond that for I/O",
			  name, st->segment_size, cached,
			  (unsigned)((VLMC_TABLE_MAX + 1023) >> 10),
			  st->requests, need,
			  (uint64_t)((need + (1ULL << 20) - 1) >> 20));
		return -EINVAL;
	}
	/* the data heap uses at most 256 GiB (xheap's 32-bit unit indexes):
	 * xseg_create refuses a larger segment, which start would reach
	 * only after it removed a left-over segment; before session 20 the
	 * rest was silently never used. Here and not in stack_set: the
	 * bound depends on requests, and a run/stack.conf of a larger
	 * segment made before must still read for stop. */
	max = xseg_max_size(&cfg);
	if (st->segment_size > max) {
		stack_err("%s: segment_size %" PRIu64 " is too large for "
			  "requests = %" PRIu64 ": the data heap can use at "
			  "most 256 GiB, so the largest segment whose every "
			  "byte is used is %" PRIu64 " bytes (%" PRIu64
			  " MiB, rounded down)",
			  name, st->segment_size, st->requests, max, max >> 20);
		return -EINVAL;
	}
	if (cache / 2 < object) {
		stack_err("%s: cache_size %s must hold at least two objects of "
			  "object_size %s (at least %" PRIu64 " MiB)",
			  name, st->cache_size, st->object_size,
			  (2 * object) >> 20);
		return -EINVAL;
	}
	if (cache / STACK_CACHED_BUCKET_SIZE >= UINT32_MAX) {
		stack_err("%s: cache_size %s is too large (at most %" PRIu64
			  " GiB: cached counts its 4 KiB buckets in 32 bits)",
			  name, st->cache_size,
			  (uint64_t)((STACK_CACHED_BUCKET_SIZE *
				      (UINT32_MAX - 1ULL)) >>
				     30));
		return -EINVAL;
	}
	return 0;
}

bool stack_conf_value_ok(const char *v)
{
	size_t n = strlen(v);

	return !strpbrk(v, "#\n") &&
	       (!n || (!isspace((unsigned char)v[0]) &&
		       !isspace((unsigned char)v[n - 1])));
}

int stack_print_conf(FILE *f, const struct stack *st, const char *store)
{
	/* the values a line could not hold; the others come from the
	 * parser, which can give no such value */
	const struct {
		const char *key, *value;
	} paths[] = {{"dir", st->dir},
		     {"segment", st->segment},
		     {"nbd_socket", st->nbd_socket},
		     {"ctl_socket", st->ctl_socket}};

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (!stack_conf_value_ok(paths[i].value)) {
			stack_err("%s '%s' holds a '#', a line break or "
				  "white space at an end, which a config line "
				  "cannot hold",
				  paths[i].key, paths[i].value);
			return -EINVAL;
		}
	fprintf(f,
		"# written by xsegctl stack start: the running stack\n"
		"dir = %s\nsegment = %s\nsegment_size = %" PRIu64
		"\nrequests = %" PRIu64 "\nstore = %s\ncached = %s\n"
		"cache_size = %s\nwrite_policy = %s\nobject_size = %s\n"
		"store_threads = %" PRIu64 "\ncached_threads = %" PRIu64
		"\nvlmc_threads = %" PRIu64 "\nnbd_socket = %s\n"
		"ctl_socket = %s\nnbd_tcp = %" PRIu64 "\nverify_reads = %s\n"
		"supervise = %s\n%s%s%s",
		st->dir, st->segment, st->segment_size, st->requests, store,
		st->cached ? "on" : "off", st->cache_size, st->write_policy,
		st->object_size, st->store_threads, st->cached_threads,
		st->vlmc_threads, st->nbd_socket, st->ctl_socket, st->nbd_tcp,
		st->verify_reads ? "on" : "off", st->supervise ? "on" : "off",
		st->spin[0] ? "spin = " : "", st->spin,
		st->spin[0] ? "\n" : "");
	if (st->gc_threshold[0])
		fprintf(f, "gc_threshold = %s\n", st->gc_threshold);
	if (st->nbd_max_conns[0])
		fprintf(f, "nbd_max_conns = %s\n", st->nbd_max_conns);
	if (st->nbd_inflight_bytes[0])
		fprintf(f, "nbd_inflight_bytes = %s\n", st->nbd_inflight_bytes);
	if (st->nbd_total_inflight[0])
		fprintf(f, "nbd_total_inflight = %s\n", st->nbd_total_inflight);
	if (st->nbd_spin[0])
		fprintf(f, "nbd_spin = %s\n", st->nbd_spin);
	if (st->cached_spin[0])
		fprintf(f, "cached_spin = %s\n", st->cached_spin);
	if (st->vlmc_spin[0])
		fprintf(f, "vlmc_spin = %s\n", st->vlmc_spin);
	if (st->cache_max_objects[0])
		fprintf(f, "cache_max_objects = %s\n", st->cache_max_objects);
	if (st->spin_policy[0])
		fprintf(f, "spin_policy = %s\n", st->spin_policy);
	if (st->dead_peer_wait[0])
		fprintf(f, "dead_peer_wait = %s\n", st->dead_peer_wait);
	if (st->snapshot_drain_wait[0])
		fprintf(f, "snapshot_drain_wait = %s\n",
			st->snapshot_drain_wait);
	if (st->cpus[0])
		fprintf(f, "cpus = %s\n", st->cpus);
	if (st->store_segment_size[0])
		fprintf(f, "store_segment_size = %s\n", st->store_segment_size);
	if (st->store_reserve[0])
		fprintf(f, "store_reserve = %s\n", st->store_reserve);
	if (st->start_timeout[0])
		fprintf(f, "start_timeout = %s\n", st->start_timeout);
	if (st->exiting_timeout[0])
		fprintf(f, "exiting_timeout = %s\n", st->exiting_timeout);
	return ferror(f) ? -EIO : 0;
}
