/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: xsegctl stack's config parser (xseg/xsegctl_stack_conf.c),
 * which reads an operator's CONFIG over the embedded default at `start`,
 * and DIR/run/stack.conf, the running stack's state that `start` prints
 * and stop, status, plug and unplug read back into a zeroed struct stack.
 *
 * Input: byte 0 picks the path. Bit 0 clear: the rest is parsed into a
 * zeroed struct stack (how stack.conf is read). Bit 0 set: it is parsed
 * over the embedded default, then checked across keys (stack_check), as
 * `start` does, and printed as `start` writes stack.conf (store = auto
 * resolved to blocker) and parsed back into a zeroed struct. Bit 1 set
 * (with bit 0): the first line of the rest is the stack's directory as
 * `--dir` or the realpath of the configured dir gives it (any bytes but
 * NUL and newline), with the sockets and the segment name derived from it
 * as stack_resolve does, and the following lines are the config (which
 * may set dir again). Config text ends at the first NUL byte, as
 * stack_read_file reads a file.
 *
 * Invariants:
 *   - a parse returns 0 or -EINVAL; one that fails says exactly one line,
 *     "xsegctl: stack: NAME: line N: ..." with N a line of the input; one
 *     that succeeds says nothing;
 *   - a config that parses holds only values in the bounds the keys
 *     document (docs/operations.md, "Config file"; requests: those of
 *     xseg_create, struct xseg_config; segment_size: a multiple of 4k,
 *     at most STACK_MAX_SEGMENT_SIZE), and no string value
 *     with a '#', a line break or white space at an end (what the parser
 *     strips);
 *   - stack_check accepts only a cache of at least two objects with fewer
 *     than 2^32 buckets and a segment_size that holds the segment's
 *     fixed parts for `requests` (xseg_min_size) and no more than its
 *     data heap can use whole (xseg_max_size), and says why when it
 *     refuses;
 *   - what stack_print_conf prints parses back to the same values (a
 *     stopped stack is the one that was started); a config it cannot
 *     print so is refused with -EINVAL, and only then.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer_util.h"
#include "xsegctl_stack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The string fields of struct stack, for the checks and the comparison. */
#define STACK_STRINGS(X)                                                       \
	X(dir)                                                                 \
	X(segment)                                                             \
	X(store)                                                               \
	X(cache_size)                                                          \
	X(write_policy)                                                        \
	X(object_size)                                                         \
	X(nbd_socket)                                                          \
	X(ctl_socket)                                                          \
	X(spin)                                                                \
	X(spin_policy)                                                         \
	X(cpus)                                                                \
	X(nbd_max_conns)                                                       \
	X(nbd_inflight_bytes)                                                  \
	X(nbd_spin)                                                            \
	X(cached_spin)                                                         \
	X(vlmc_spin)                                                           \
	X(cache_max_objects)                                                   \
	X(nbd_total_inflight)                                                  \
	X(gc_threshold)                                                        \
	X(dead_peer_wait)                                                      \
	X(snapshot_drain_wait)                                                 \
	X(store_segment_size)                                                  \
	X(store_reserve)                                                       \
	X(start_timeout)                                                       \
	X(exiting_timeout)
#define STACK_NUMBERS(X)                                                       \
	X(segment_size)                                                        \
	X(requests)                                                            \
	X(store_threads)                                                       \
	X(cached_threads)                                                      \
	X(vlmc_threads)                                                        \
	X(nbd_tcp)                                                             \
	X(cached)                                                              \
	X(verify_reads)                                                        \
	X(supervise)

/* What stack_parse strips from a value, so that it can never hold it. */
static bool value_printable(const char *s)
{
	size_t n = strlen(s);

	return !strpbrk(s, "#\n") &&
	       (!n || (!isspace((unsigned char)s[0]) &&
		       !isspace((unsigned char)s[n - 1])));
}

static bool size_in(const char *s, uint64_t lo, uint64_t hi)
{
	uint64_t x;

	return !peer_parse_size(s, &x) && x >= lo && x <= hi;
}

static bool duration_in(const char *s, uint64_t unit, uint64_t lo, uint64_t hi)
{
	uint64_t x;

	return !peer_parse_duration(s, unit, &x) && x >= lo && x <= hi;
}

static bool u64_in(const char *s, uint64_t lo, uint64_t hi)
{
	uint64_t x;

	return !peer_parse_u64(s, &x) && x >= lo && x <= hi;
}

static bool one_of(const char *s, const char *a, const char *b, const char *c)
{
	return !strcmp(s, a) || !strcmp(s, b) || (c && !strcmp(s, c));
}

/* An optional key: "" (not set) or a value within its bounds. */
#define OPT(field, ok) (!st->field[0] || (ok))

/* The documented bounds of every key (docs/operations.md). */
static void check_bounds(const struct stack *st, bool from_parser,
			 bool over_default)
{
	uint64_t x;
	cpu_set_t set;

#define X(f)                                                                   \
	if (strnlen(st->f, sizeof(st->f)) >= sizeof(st->f) ||                  \
	    (from_parser && !value_printable(st->f)))                          \
		abort();
	STACK_STRINGS(X)
#undef X
	if (!OPT(store, one_of(st->store, "blocker", "noop", "auto")) ||
	    !OPT(write_policy,
		 one_of(st->write_policy, "writeback", "writethrough", NULL)) ||
	    !OPT(spin_policy,
		 one_of(st->spin_policy, "adaptive", "fixed", NULL)) ||
	    !OPT(cache_size, !peer_parse_size(st->cache_size, &x)) ||
	    !OPT(object_size, size_in(st->object_size, STACK_MIN_OBJECT_SIZE,
				      STACK_MAX_OBJECT_SIZE) &&
				  !peer_parse_size(st->object_size, &x) &&
				  !(x & (x - 1))) ||
	    !OPT(spin, duration_in(st->spin, 1000, 0, UINT64_MAX)) ||
	    !OPT(cpus, !peer_parse_cpus(st->cpus, &set)) ||
	    !OPT(gc_threshold, u64_in(st->gc_threshold, 0, 100)) ||
	    !OPT(nbd_max_conns, u64_in(st->nbd_max_conns, 1, 32)) ||
	    !OPT(nbd_inflight_bytes,
		 size_in(st->nbd_inflight_bytes, 1, 1ULL << 40)) ||
	    !OPT(nbd_total_inflight,
		 size_in(st->nbd_total_inflight, 1, 1ULL << 40)) ||
	    !OPT(cache_max_objects,
		 u64_in(st->cache_max_objects, 1, 1ULL << 30)) ||
	    !OPT(nbd_spin, duration_in(st->nbd_spin, 1000, 0, 1000000000ULL)) ||
	    !OPT(cached_spin,
		 duration_in(st->cached_spin, 1000, 0, 1000000000ULL)) ||
	    !OPT(vlmc_spin,
		 duration_in(st->vlmc_spin, 1000, 0, 1000000000ULL)) ||
	    !OPT(dead_peer_wait, duration_in(st->dead_peer_wait, 1000000000ULL,
					     0, 3600ULL * 1000000000ULL)) ||
	    !OPT(snapshot_drain_wait,
		 duration_in(st->snapshot_drain_wait, 1000000000ULL, 1000000ULL,
			     3600ULL * 1000000000ULL)) ||
	    !OPT(start_timeout,
		 duration_in(st->start_timeout, 1000000000ULL, 1000000000ULL,
			     STACK_START_TIMEOUT_MAX_S * 1000000000ULL) &&
		     !peer_parse_duration(st->start_timeout, 1000000000ULL,
					  &x) &&
		     x % 1000000000ULL == 0) ||
	    !OPT(exiting_timeout,
		 duration_in(st->exiting_timeout, 1000000000ULL, 1000000000ULL,
			     STACK_EXITING_TIMEOUT_MAX_S * 1000000000ULL) &&
		     !peer_parse_duration(st->exiting_timeout, 1000000000ULL,
					  &x) &&
		     x % 1000000000ULL == 0) ||
	    !OPT(store_segment_size,
		 !strcmp(st->store_segment_size, "auto") ||
		     (size_in(st->store_segment_size, 1ULL << 20, UINT64_MAX) &&
		      !peer_parse_size(st->store_segment_size, &x) &&
		      x % (1ULL << 20) == 0)) ||
	    !OPT(store_reserve,
		 !strcmp(st->store_reserve, "auto") ||
		     size_in(st->store_reserve, 0, 0) ||
		     size_in(st->store_reserve, 1ULL << 20, UINT64_MAX - 1)) ||
	    st->nbd_tcp > 65535 || st->store_threads > STACK_MAX_THREADS ||
	    st->cached_threads > STACK_MAX_THREADS ||
	    st->vlmc_threads > STACK_MAX_THREADS ||
	    (st->requests &&
	     (st->requests < 2 || st->requests > XSEG_MAX_REQUESTS)) ||
	    (st->segment_size && (st->segment_size % 4096 ||
				  st->segment_size > STACK_MAX_SEGMENT_SIZE)))
		abort();
	/* dir: "dir =" is refused, so over the default it stays set; so
	 * do the request pool and the segment size */
	if (over_default && (!st->dir[0] || !st->requests || !st->segment_size))
		abort();
	/* nor the spin: "spin =" is refused, and a config's spin that
	 * clears the default's vlmc_spin is given to vlmc instead, so every
	 * peer gets a --spin from the stack, never its own default (20us)
	 * by surprise (review20b B3, B4) */
	for (int r = 0; over_default && r < STACK_NR_ROLES; r++)
		if (!stack_role_spin(st, (enum stack_role)r)[0])
			abort();
}

static bool same(const struct stack *a, const struct stack *b)
{
#define X(f)                                                                   \
	if (strcmp(a->f, b->f))                                                \
		return false;
	STACK_STRINGS(X)
#undef X
#define X(f)                                                                   \
	if (a->f != b->f)                                                      \
		return false;
	STACK_NUMBERS(X)
#undef X
	return true;
}

/* Every string value of st is one stack_parse could give. */
static bool all_printable(const struct stack *st)
{
#define X(f)                                                                   \
	if (!value_printable(st->f))                                           \
		return false;
	STACK_STRINGS(X)
#undef X
	return true;
}

/*
 * Run fn with stderr captured: the one line the parser says on a failure.
 * Sanitizers write to file descriptor 2 directly, so a report still shows.
 */
struct said {
	char *text;
	size_t len;
};

static FILE *capture_begin(struct said *s, FILE **saved)
{
	FILE *f = open_memstream(&s->text, &s->len);

	if (!f)
		abort();
	*saved = stderr;
	stderr = f;
	return f;
}

static void capture_end(struct said *s, FILE *f, FILE *saved)
{
	stderr = saved;
	if (fclose(f))
		abort();
	(void)s;
}

static unsigned count_lines(const char *text)
{
	unsigned n = 1;

	for (; *text; text++)
		n += *text == '\n';
	return n;
}

/* A failed call said one line "xsegctl: stack: NAME: ..." (no "NAME: "
 * when name is NULL); with a line number when it is the parser's, one of
 * the text's. One that succeeded said nothing. */
static void check_said(const struct said *s, int rc, const char *name,
		       const char *text, bool parse)
{
	char prefix[64];
	int n = snprintf(prefix, sizeof(prefix), "xsegctl: stack: %s%s",
			 name ? name : "", name ? ": " : "");

	if (!rc) {
		if (s->len)
			abort();
		return;
	}
	if (rc != -EINVAL || s->len <= (size_t)n ||
	    strncmp(s->text, prefix, (size_t)n) ||
	    memchr(s->text, '\n', s->len) != s->text + s->len - 1)
		abort();
	if (parse) {
		unsigned line;

		if (sscanf(s->text + n, "line %u: ", &line) != 1 || !line ||
		    line > count_lines(text))
			abort();
	}
}

static int parse(struct stack *st, const char *text, const char *name)
{
	struct said s = {0};
	FILE *saved, *f = capture_begin(&s, &saved);
	int rc = stack_parse(st, text, name);

	capture_end(&s, f, saved);
	check_said(&s, rc, name, text, true);
	free(s.text);
	return rc;
}

static void check_cross(const struct stack *st)
{
	struct said s = {0};
	FILE *saved, *f = capture_begin(&s, &saved);
	int rc = stack_check(st, "c.conf");
	uint64_t cache, object;
	struct xseg_config cfg;

	capture_end(&s, f, saved);
	check_said(&s, rc, "c.conf", "", false);
	free(s.text);
	/* the segment start would create: xseg's defaults, the two keys */
	xseg_config_default(&cfg);
	cfg.size = st->segment_size;
	cfg.nr_requests = (uint32_t)st->requests;
	if (!rc && (peer_parse_size(st->cache_size, &cache) ||
		    peer_parse_size(st->object_size, &object) ||
		    cache / 2 < object || cache / 4096 >= UINT32_MAX ||
		    st->segment_size < xseg_min_size(&cfg) ||
		    st->segment_size > xseg_max_size(&cfg)))
		abort();
}

/* Print st as start does, parse it back into a zeroed stack: the same. */
static void round_trip(const struct stack *st)
{
	static struct stack again, want;
	const char *store = strcmp(st->store, "auto") ? st->store : "blocker";
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int rc;

	struct said s = {0};
	FILE *saved, *err;

	if (!f)
		abort();
	err = capture_begin(&s, &saved);
	rc = stack_print_conf(f, st, store);
	capture_end(&s, err, saved);
	if (fclose(f))
		abort();
	check_said(&s, rc, NULL, "", false);
	free(s.text);
	/* refused exactly when a value would not read back the same */
	if (rc == -EINVAL && !all_printable(st)) {
		free(text);
		return;
	}
	if (rc)
		abort();
	memset(&again, 0, sizeof(again));
	if (parse(&again, text, "stack.conf"))
		abort();
	want = *st;
	strcpy(want.store, store);
	if (!same(&want, &again))
		abort();
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct stack st;
	uint8_t mode = size ? data[0] : 0;
	/* the text as stack_read_file gives it: up to the first NUL */
	size_t tlen = size ? strnlen((const char *)data + 1, size - 1) : 0;
	char *text = malloc(tlen + 1), *conf = text;

	if (!text)
		abort();
	memcpy(text, data + (size ? 1 : 0), tlen);
	text[tlen] = 0;
	memset(&st, 0, sizeof(st));
	if (!(mode & 1)) {
		if (!parse(&st, text, "stack.conf"))
			check_bounds(&st, true, false);
		free(text);
		return 0;
	}
	if (stack_parse(&st, stack_default_conf, "default"))
		abort();
	if (mode & 2) {
		/* the first line: the directory, the rest the config */
		char *nl = strchr(text, '\n');

		conf = nl ? nl + 1 : text + tlen;
		if (nl)
			*nl = 0;
	}
	if (parse(&st, conf, "c.conf")) {
		free(text);
		return 0;
	}
	check_bounds(&st, true, true);
	check_cross(&st);
	if ((mode & 2) && *text && !stack_str(st.dir, sizeof(st.dir), text)) {
		/* as stack_resolve: dir is its realpath, which may hold any
		 * byte but NUL (--dir, or a '#' in a parent's name), and
		 * the sockets and the segment name unset are derived */
		if (!st.segment[0])
			snprintf(st.segment, sizeof(st.segment),
				 "archcache-%08x", (unsigned)tlen);
		if (!st.nbd_socket[0] &&
		    snprintf(st.nbd_socket, sizeof(st.nbd_socket),
			     "%s/run/nbd.sock",
			     st.dir) >= (int)sizeof(st.nbd_socket))
			st.nbd_socket[0] = 0;
		if (!st.ctl_socket[0] &&
		    snprintf(st.ctl_socket, sizeof(st.ctl_socket),
			     "%s/run/vlmc.ctl",
			     st.dir) >= (int)sizeof(st.ctl_socket))
			st.ctl_socket[0] = 0;
		check_bounds(&st, false, true);
	}
	round_trip(&st);
	free(text);
	return 0;
}
