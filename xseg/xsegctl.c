/* SPDX-License-Identifier: MIT */
/*
 * xsegctl: administer xseg segments: create, destroy, show configuration
 * and usage, list ports, show a port's counters, set and clear redirects,
 * reap dead peers.
 *
 * Exit status: 0 success, 1 the operation failed (the message names the
 * segment and port), 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "peer_util.h"
#include "xseg.h"
#include "xsegctl_cmds.h"

#define PROG "xsegctl"

struct ctl {
	const char *cmd;
	const char *segment;
	char **args; /* positional arguments after the segment */
	int nargs;
	bool json;
	bool all;
	struct xseg_config cfg;
};

static void ctl_usage(void)
{
	printf("Usage: " PROG " COMMAND [OPTIONS] SEGMENT [ARGS]\n"
	       "Administer xseg shared-memory segments.\n\n"
	       "Commands:\n"
	       "  create SEGMENT        create a segment (options below)\n"
	       "  destroy SEGMENT       unlink a segment (mapped users keep "
	       "it until they leave)\n"
	       "  info SEGMENT          configuration and usage\n"
	       "  list SEGMENT          ports: owner, liveness, type, "
	       "redirect, cache, queues,\n"
	       "                        counters, last owner (bound, "
	       "redirected or draining\n"
	       "                        ports; --all for every port)\n"
	       "  stats SEGMENT PORT    every counter of one port, and the "
	       "peer's own\n"
	       "                        statistics as it last published them\n"
	       "  redirect SEGMENT PORT NEXT\n"
	       "                        send new requests for PORT to NEXT\n"
	       "  unredirect SEGMENT PORT\n"
	       "                        remove the redirect of PORT\n"
	       "  reap SEGMENT          reclaim ports of dead peers and fail "
	       "their requests\n"
	       "                        back to the senders\n"
	       "  volume ...            volume operations (xsegctl volume "
	       "--help)\n"
	       "  stack ...             start/stop/inspect a whole stack "
	       "(xsegctl stack --help)\n\n"
	       "Options of create (defaults: 64M, 16 static + 48 dynamic "
	       "ports, 4096 requests,\n"
	       "free cache 64, data size 4k):\n"
	       "      --size SIZE           segment size (bytes, or a "
	       "suffix k, M, G, T, P,\n"
	       "                            E of 1024s, any case, with "
	       "an optional i and B:\n"
	       "                            64M, 64MiB, 64mb); at most "
	       "256G of data heap\n"
	       "                            plus the fixed parts (the "
	       "refusal names the largest)\n"
	       "      --static-ports N      ports 0..N-1 bound by number\n"
	       "      --dynamic-ports N     ports allocated at run time\n"
	       "      --requests N          request pool size\n"
	       "      --free-cache N        per-port free queue capacity "
	       "(power of two, 0 off)\n"
	       "      --data-size SIZE      default data buffer size\n\n"
	       "Other options:\n"
	       "      --json                machine-readable output (info, "
	       "list, stats, reap)\n"
	       "  -a, --all                 list: show every port\n"
	       "  -h, --help                this help\n"
	       "  -V, --version             print the version\n");
}

enum {
	OPT_SIZE = 1000,
	OPT_STATIC,
	OPT_DYNAMIC,
	OPT_REQUESTS,
	OPT_FREE_CACHE,
	OPT_DATA_SIZE,
	OPT_JSON,
};

static const struct option ctl_options[] = {
    {"size", required_argument, NULL, OPT_SIZE},
    {"static-ports", required_argument, NULL, OPT_STATIC},
    {"dynamic-ports", required_argument, NULL, OPT_DYNAMIC},
    {"requests", required_argument, NULL, OPT_REQUESTS},
    {"free-cache", required_argument, NULL, OPT_FREE_CACHE},
    {"data-size", required_argument, NULL, OPT_DATA_SIZE},
    {"json", no_argument, NULL, OPT_JSON},
    {"all", no_argument, NULL, 'a'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

#define BAD(...)                                                               \
	do {                                                                   \
		peer_usage_error(PROG, __VA_ARGS__);                           \
		return 2;                                                      \
	} while (0)

static int ctl_u32(const char *s, uint32_t *out)
{
	uint64_t v;

	if (peer_parse_u64(s, &v) || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* Commands and how many positional arguments follow the segment. */
static const struct {
	const char *name;
	int nargs;
	const char *args_help;
} ctl_cmds[] = {
    {"create", 0, ""},
    {"destroy", 0, ""},
    {"info", 0, ""},
    {"list", 0, ""},
    {"stats", 1, " PORT"},
    {"redirect", 2, " PORT NEXT"},
    {"unredirect", 1, " PORT"},
    {"reap", 0, ""},
};
#define CTL_NR_CMDS (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))

static int ctl_parse(struct ctl *c, int argc, char **argv)
{
	bool create_opts = false;
	size_t k;
	int opt;

	xseg_config_default(&c->cfg);
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":ahV", ctl_options, NULL)) !=
	       -1) {
		uint64_t v;
		uint32_t u;

		switch (opt) {
		case OPT_SIZE:
			if (peer_parse_size(optarg, &v) || !v)
				BAD("bad size '%s'", optarg);
			c->cfg.size = v;
			create_opts = true;
			break;
		case OPT_STATIC:
		case OPT_DYNAMIC:
		case OPT_REQUESTS:
		case OPT_FREE_CACHE:
			if (ctl_u32(optarg, &u))
				BAD("bad number '%s' for --%s", optarg,
				    opt == OPT_STATIC	  ? "static-ports"
				    : opt == OPT_DYNAMIC  ? "dynamic-ports"
				    : opt == OPT_REQUESTS ? "requests"
							  : "free-cache");
			if (opt == OPT_STATIC)
				c->cfg.nr_static_ports = u;
			else if (opt == OPT_DYNAMIC)
				c->cfg.nr_dynamic_ports = u;
			else if (opt == OPT_REQUESTS)
				c->cfg.nr_requests = u;
			else
				c->cfg.free_cache = u;
			create_opts = true;
			break;
		case OPT_DATA_SIZE:
			if (peer_parse_size(optarg, &v))
				BAD("bad data size '%s'", optarg);
			c->cfg.default_data_size = v;
			create_opts = true;
			break;
		case OPT_JSON:
			c->json = true;
			break;
		case 'a':
			c->all = true;
			break;
		case 'h':
			ctl_usage();
			return 0;
		case 'V':
			printf(PROG " %s\n", AC_VERSION);
			return 0;
		case ':':
			BAD("option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt)
				BAD("unknown option '-%c'", optopt);
			BAD("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		BAD("no command given");
	c->cmd = argv[optind++];
	for (k = 0; k < CTL_NR_CMDS; k++)
		if (!strcmp(c->cmd, ctl_cmds[k].name))
			break;
	if (k == CTL_NR_CMDS)
		BAD("unknown command '%s'", c->cmd);
	if (optind >= argc)
		BAD("%s: no segment given", c->cmd);
	c->segment = argv[optind++];
	c->args = argv + optind;
	c->nargs = argc - optind;
	if (c->nargs != ctl_cmds[k].nargs)
		BAD("%s: expected '%s SEGMENT%s'", c->cmd, c->cmd,
		    ctl_cmds[k].args_help);
	if (create_opts && strcmp(c->cmd, "create"))
		BAD("%s: segment options only apply to create", c->cmd);
	if (!strcmp(c->cmd, "create")) {
		/* after every option: the largest size depends on the
		 * ports and requests; a configuration out of bounds (max 0)
		 * is xseg_create's to refuse, with its own message */
		uint64_t max = xseg_max_size(&c->cfg);

		if (max && c->cfg.size > max)
			BAD("create: --size %" PRIu64 " is too large: with "
			    "%u requests the largest segment whose data heap "
			    "can use every byte is %" PRIu64 " bytes (the "
			    "heap holds at most 256 GiB)",
			    c->cfg.size, c->cfg.nr_requests, max);
	}
	return -1;
}

static void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void ctl_err(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int ctl_join(struct ctl *c, struct xseg **seg)
{
	char errbuf[XSEG_ERRBUF_LEN] = "";
	int rc = xseg_join(c->segment, seg, errbuf, sizeof(errbuf));

	if (rc < 0) {
		if (errbuf[0])
			ctl_err("%s", errbuf);
		else
			ctl_err("segment %s: cannot join: %s", c->segment,
				strerror(-rc));
	}
	return rc;
}

/* Parse a port argument and check it against the segment. */
static int ctl_port(struct ctl *c, struct xseg *seg, const char *arg,
		    uint32_t *port)
{
	uint32_t n = xseg_nr_ports(seg);

	if (ctl_u32(arg, port)) {
		ctl_err("segment %s: bad port '%s'", xseg_name(seg), arg);
		return -EINVAL;
	}
	if (*port >= n) {
		ctl_err("segment %s: port %" PRIu32
			": no such port (ports are 0..%" PRIu32 ")",
			xseg_name(seg), *port, n - 1);
		return -EINVAL;
	}
	(void)c;
	return 0;
}

static const char *ctl_port_state(const struct xseg_port_info *pi)
{
	if (pi->reclaiming)
		return "reclaiming";
	if (!pi->bound)
		return pi->draining ? "draining" : "free";
	if (pi->exiting)
		return "exiting"; /* alive, by threads its leader left */
	return pi->alive ? "alive" : "dead";
}

static void ctl_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			printf("\\u%04x", ch); /* never invalid UTF-8 */
		else
			putchar(ch);
	}
	putchar('"');
}

/* The port's fields, without the closing brace (stats appends). */
static void ctl_port_json_open(const struct xseg_port_info *pi)
{
	/* last_owner_pid 0 and last_owner_alive null: not known */
	printf("{\"port\":%" PRIu32 ",\"dynamic\":%s,\"state\":\"%s\","
	       "\"owner_pid\":%ld,\"last_owner_pid\":%ld,"
	       "\"last_owner_alive\":%s,\"generation\":%" PRIu32
	       ",\"draining\":%s,\"peer_type\":",
	       pi->port, pi->dynamic ? "true" : "false", ctl_port_state(pi),
	       pi->bound ? (long)pi->owner_pid : 0L, (long)pi->last_owner_pid,
	       !pi->last_owner_pid    ? "null"
	       : pi->last_owner_alive ? "true"
				      : "false",
	       pi->generation, pi->draining ? "true" : "false");
	ctl_json_str(pi->peer_type);
	if (pi->path_next == XSEG_NOPORT)
		printf(",\"path_next\":null");
	else
		printf(",\"path_next\":%" PRIu32, pi->path_next);
	/* a marked cache, and the port whose path it serves (null: not a
	 * cache, or a cache of an older build that does not say) */
	printf(",\"cache\":%s", pi->cache ? "true" : "false");
	if (pi->cache_next == XSEG_NOPORT)
		printf(",\"cache_next\":null");
	else
		printf(",\"cache_next\":%" PRIu32, pi->cache_next);
	printf(",\"request_depth\":%" PRIu64 ",\"reply_depth\":%" PRIu64
	       ",\"free_depth\":%" PRIu64 ",\"sent\":%" PRIu64
	       ",\"received\":%" PRIu64 ",\"accepted\":%" PRIu64
	       ",\"served\":%" PRIu64 ",\"failed\":%" PRIu64
	       ",\"rejected\":%" PRIu64 ",\"forwarded\":%" PRIu64
	       ",\"reaped\":%" PRIu64 ",\"unflushed\":%" PRIu64,
	       pi->request_depth, pi->reply_depth, pi->free_depth, pi->sent,
	       pi->received, pi->accepted, pi->served, pi->failed, pi->rejected,
	       pi->forwarded, pi->reaped, pi->unflushed);
}

static void ctl_port_json(const struct xseg_port_info *pi)
{
	ctl_port_json_open(pi);
	putchar('}');
}

/* Age in seconds of a publication stamped with CLOCK_MONOTONIC (which is
 * system-wide, so comparable across processes). */
static double ctl_stats_age(const struct xseg_port_stats *ps)
{
	uint64_t now = xseg_now_ns();

	return now > ps->published_ns ? (double)(now - ps->published_ns) / 1e9
				      : 0.0;
}

static int ctl_create(struct ctl *c)
{
	char errbuf[XSEG_ERRBUF_LEN] = "";
	struct xseg *seg;
	int rc = xseg_create(c->segment, &c->cfg, &seg, errbuf, sizeof(errbuf));

	if (rc < 0) {
		if (errbuf[0])
			ctl_err("%s", errbuf);
		else
			ctl_err("segment %s: cannot create: %s", c->segment,
				strerror(-rc));
		return 1;
	}
	xseg_leave(seg);
	return 0;
}

static int ctl_destroy(struct ctl *c)
{
	int rc = xseg_destroy(c->segment);

	if (rc < 0) {
		ctl_err("segment %s: cannot destroy: %s", c->segment,
			rc == -ENOENT ? "no such segment" : strerror(-rc));
		return 1;
	}
	return 0;
}

static int ctl_info(struct ctl *c, struct xseg *seg)
{
	struct xseg_info in;
	uint32_t bound = 0, alive = 0;

	xseg_info(seg, &in);
	for (uint32_t p = 0; p < in.nr_ports; p++) {
		struct xseg_port_info pi;
		if (xseg_port_info(seg, p, &pi) == 0 && pi.bound) {
			bound++;
			alive += pi.alive;
		}
	}
	if (c->json) {
		printf("{\"segment\":");
		ctl_json_str(xseg_name(seg));
		printf(
		    ",\"version\":%" PRIu32 ",\"size\":%" PRIu64
		    ",\"static_ports\":%" PRIu32 ",\"dynamic_ports\":%" PRIu32
		    ",\"requests\":%" PRIu32 ",\"free_cache\":%" PRIu32
		    ",\"default_data_size\":%" PRIu64
		    ",\"queue_capacity\":%" PRIu32 ",\"free_requests\":%" PRIu32
		    ",\"heap_bytes\":%" PRIu64 ",\"heap_allocated\":%" PRIu64
		    ",\"heap_carved\":%" PRIu64 ",\"ports_bound\":%" PRIu32
		    ",\"ports_alive\":%" PRIu32 ",\"writeback_losses\":%" PRIu64
		    "}\n",
		    in.version, in.cfg.size, in.cfg.nr_static_ports,
		    in.cfg.nr_dynamic_ports, in.cfg.nr_requests,
		    in.cfg.free_cache, in.cfg.default_data_size,
		    in.cfg.queue_capacity, in.free_requests, in.heap_bytes,
		    in.heap_allocated, in.heap_carved, bound, alive,
		    in.writeback_losses);
		return 0;
	}
	printf("segment:        %s (layout version %" PRIu32 ")\n",
	       xseg_name(seg), in.version);
	printf("size:           %" PRIu64 " bytes\n", in.cfg.size);
	printf("ports:          %" PRIu32 " static (0..%" PRIu32 "), %" PRIu32
	       " dynamic; %" PRIu32 " bound, %" PRIu32 " alive\n",
	       in.cfg.nr_static_ports,
	       in.cfg.nr_static_ports ? in.cfg.nr_static_ports - 1 : 0,
	       in.cfg.nr_dynamic_ports, bound, alive);
	printf("requests:       %" PRIu32 " (%" PRIu32
	       " free in the pool), queue capacity %" PRIu32 "\n",
	       in.cfg.nr_requests, in.free_requests, in.cfg.queue_capacity);
	printf("free cache:     %" PRIu32 " per port\n", in.cfg.free_cache);
	printf("data buffers:   default %" PRIu64 " bytes; heap %" PRIu64
	       " bytes, %" PRIu64 " allocated, %" PRIu64 " carved\n",
	       in.cfg.default_data_size, in.heap_bytes, in.heap_allocated,
	       in.heap_carved);
	/* nonzero: a write-back cache died (or gave up) holding writes it
	 * had acknowledged; see docs/operations.md */
	printf("write-back losses: %" PRIu64 "%s\n", in.writeback_losses,
	       in.writeback_losses ? " (acknowledged writes lost by a dead "
				     "write-back cache)"
				   : "");
	return 0;
}

static int ctl_list(struct ctl *c, struct xseg *seg)
{
	uint32_t n = xseg_nr_ports(seg);
	bool first = true;

	if (c->json) {
		printf("{\"segment\":");
		ctl_json_str(xseg_name(seg));
		printf(",\"ports\":[");
	} else {
		printf("%-6s %-16s %-8s %-10s %-5s %-5s %6s %6s %6s %10s %10s "
		       "%8s %8s %10s %10s %9s %s\n",
		       "PORT", "TYPE", "PID", "STATE", "NEXT", "CACHE", "REQQ",
		       "REPQ", "FREEQ", "ACCEPTED", "SERVED", "FAILED",
		       "REJECTED", "SENT", "RECEIVED", "UNFLUSHED",
		       "LAST-OWNER");
	}
	for (uint32_t p = 0; p < n; p++) {
		struct xseg_port_info pi;
		char port[16], next[16], cache[16], last[32];

		if (xseg_port_info(seg, p, &pi) < 0)
			continue;
		if (!c->all && !pi.bound && !pi.reclaiming && !pi.draining &&
		    pi.path_next == XSEG_NOPORT && !pi.request_depth)
			continue;
		if (c->json) {
			if (!first)
				putchar(',');
			ctl_port_json(&pi);
			first = false;
			continue;
		}
		snprintf(port, sizeof(port), "%" PRIu32 "%s", p,
			 pi.dynamic ? "d" : "");
		if (pi.path_next == XSEG_NOPORT)
			snprintf(next, sizeof(next), "-");
		else
			snprintf(next, sizeof(next), "%" PRIu32, pi.path_next);
		/* CACHE: the port whose path a marked cache serves ("?": a
		 * cache of an older build that does not say); "-": no cache */
		if (!pi.cache)
			snprintf(cache, sizeof(cache), "-");
		else if (pi.cache_next == XSEG_NOPORT)
			snprintf(cache, sizeof(cache), "?");
		else
			snprintf(cache, sizeof(cache), "%" PRIu32,
				 pi.cache_next);
		/* LAST-OWNER: the process a bind of the port would fence
		 * (the successor's fence), alive or dead; "-": unknown */
		if (!pi.last_owner_pid)
			snprintf(last, sizeof(last), "-");
		else
			snprintf(last, sizeof(last), "%ld:%s",
				 (long)pi.last_owner_pid,
				 pi.last_owner_alive ? "alive" : "dead");
		printf("%-6s %-16s %-8ld %-10s %-5s %-5s %6" PRIu64 " %6" PRIu64
		       " %6" PRIu64 " %10" PRIu64 " %10" PRIu64 " %8" PRIu64
		       " %8" PRIu64 " %10" PRIu64 " %10" PRIu64 " %9" PRIu64
		       " %s\n",
		       port, pi.bound && pi.peer_type[0] ? pi.peer_type : "-",
		       pi.bound ? (long)pi.owner_pid : 0L, ctl_port_state(&pi),
		       next, cache, pi.request_depth, pi.reply_depth,
		       pi.free_depth, pi.accepted, pi.served, pi.failed,
		       pi.rejected, pi.sent, pi.received, pi.unflushed, last);
	}
	if (c->json)
		printf("]}\n");
	return 0;
}

static int ctl_stats(struct ctl *c, struct xseg *seg)
{
	struct xseg_port_info pi;
	struct xseg_port_stats ps;
	uint32_t port;
	int rc, src;

	if (ctl_port(c, seg, c->args[0], &port) < 0)
		return 1;
	rc = xseg_port_info(seg, port, &pi);
	if (rc < 0) {
		ctl_err("segment %s: port %" PRIu32 ": %s", xseg_name(seg),
			port, strerror(-rc));
		return 1;
	}
	src = xseg_port_stats_read(seg, port, &ps);
	if (src < 0 && src != -ENOENT) {
		ctl_err("segment %s: port %" PRIu32 ": cannot read statistics: "
			"%s",
			xseg_name(seg), port, strerror(-src));
		return 1;
	}
	if (c->json) {
		ctl_port_json_open(&pi);
		if (src == -ENOENT) {
			printf(",\"peer_stats\":null}\n");
			return 0;
		}
		printf(",\"peer_stats\":{\"pid\":%ld,\"publisher_alive\":%s,"
		       "\"age_s\":%.3f,\"publications\":%" PRIu64
		       ",\"counters\":{",
		       (long)ps.pid,
		       pi.alive && pi.owner_pid == ps.pid &&
			       pi.generation == ps.generation
			   ? "true"
			   : "false",
		       ctl_stats_age(&ps), ps.count);
		for (uint32_t i = 0; i < ps.nr; i++) {
			if (i)
				putchar(',');
			ctl_json_str(ps.stats[i].name);
			printf(":%" PRIu64, ps.stats[i].value);
		}
		printf("}}}\n");
		return 0;
	}
	printf("port:          %" PRIu32 " (%s)\n", port,
	       pi.dynamic ? "dynamic" : "static");
	printf("state:         %s\n", ctl_port_state(&pi));
	printf("owner:         pid %ld, start %" PRIu32 ", generation %" PRIu32
	       "\n",
	       pi.bound ? (long)pi.owner_pid : 0L, pi.owner_start,
	       pi.generation);
	if (pi.last_owner_pid)
		printf("last owner:    pid %ld, start %" PRIu32 " (%s)\n",
		       (long)pi.last_owner_pid, pi.last_owner_start,
		       pi.last_owner_alive ? "alive" : "dead");
	else
		printf("last owner:    unknown\n");
	printf("peer type:     %s\n", pi.peer_type[0] ? pi.peer_type : "-");
	if (pi.path_next == XSEG_NOPORT)
		printf("redirect:      none\n");
	else
		printf("redirect:      to port %" PRIu32 "\n", pi.path_next);
	if (pi.cache && pi.cache_next != XSEG_NOPORT)
		printf("cache:         of port %" PRIu32 "'s path (only it "
		       "leaves a path; redirects only from port %" PRIu32 ")\n",
		       pi.cache_next, pi.cache_next);
	else if (pi.cache)
		printf("cache:         of a path it does not name (an older "
		       "build; only it leaves a path)\n");
	printf("queues:        request %" PRIu64 ", reply %" PRIu64
	       ", free %" PRIu64 "\n",
	       pi.request_depth, pi.reply_depth, pi.free_depth);
	printf("as a server:   accepted %" PRIu64 ", served %" PRIu64
	       ", failed %" PRIu64 ", rejected %" PRIu64 ", forwarded %" PRIu64
	       ", reaped %" PRIu64 "\n",
	       pi.accepted, pi.served, pi.failed, pi.rejected, pi.forwarded,
	       pi.reaped);
	printf("as a client:   sent %" PRIu64 ", received %" PRIu64 "\n",
	       pi.sent, pi.received);
	printf("unflushed:     %" PRIu64 " (acknowledged write-back units "
	       "not yet at the next port)\n",
	       pi.unflushed);
	if (src == -ENOENT) {
		printf("peer stats:    none published\n");
		return 0;
	}
	/* the publisher may be gone: say so, and how old the numbers are */
	printf("peer stats:    published by pid %ld (%s), %.1f s ago\n",
	       (long)ps.pid,
	       pi.alive && pi.owner_pid == ps.pid &&
		       pi.generation == ps.generation
		   ? "alive"
		   : "not running",
	       ctl_stats_age(&ps));
	for (uint32_t i = 0; i < ps.nr; i++)
		printf("  %-22s %" PRIu64 "\n", ps.stats[i].name,
		       ps.stats[i].value);
	return 0;
}

/* Attempts of a redirect change while a dead target's requests drain
 * (about a second each). */
#define CTL_REDIRECT_TRIES 10

static int ctl_redirect(struct ctl *c, struct xseg *seg, bool set)
{
	uint32_t port, next = XSEG_NOPORT, target = XSEG_NOPORT;
	int rc = -EAGAIN;

	if (ctl_port(c, seg, c->args[0], &port) < 0)
		return 1;
	if (set) {
		if (ctl_port(c, seg, c->args[1], &next) < 0)
			return 1;
		if (next == port) {
			ctl_err("segment %s: port %" PRIu32
				": cannot redirect a port to itself",
				xseg_name(seg), port);
			return 1;
		}
	}
	/* -EAGAIN: requests a dead target sent still run at another port
	 * (each call waits a second for them); give them a while. The
	 * messages name the target the failed call examined, read before it:
	 * read after, a cache that has just unplugged itself would show as
	 * none (review20 F1-I). */
	for (int tries = 0; tries < CTL_REDIRECT_TRIES; tries++) {
		target = xseg_get_path_next(seg, port);
		rc = set ? xseg_set_path_next(seg, port, next)
			 : xseg_clear_path_next(seg, port);
		if (rc != -EAGAIN)
			break;
	}
	if (rc == -EAGAIN) {
		ctl_err("segment %s: port %" PRIu32 ": cannot %s redirect: "
			"requests its dead target (port %" PRIu32 ") sent are "
			"still being executed by another port, and a request "
			"bypassing the target now could run before them: "
			"retry once they are answered",
			xseg_name(seg), port, set ? "set" : "clear", target);
		return 1;
	}
	if (rc == -EBUSY) {
		/* the current target holds acknowledged write-back data (or
		 * another process is still reclaiming it): taking it out of
		 * the path would let a FLUSH succeed without that data */
		ctl_err("segment %s: port %" PRIu32 ": cannot %s redirect: "
			"its current target (port %" PRIu32 ") holds "
			"unflushed write-back data or is being reclaimed: "
			"stop that peer (it flushes) or retry",
			xseg_name(seg), port, set ? "set" : "clear", target);
		return 1;
	}
	if (rc == -EPERM) {
		ctl_err("segment %s: port %" PRIu32 ": cannot %s redirect: "
			"its current target (port %" PRIu32 ") is a running "
			"cache, which only leaves the path itself: stop it "
			"(`xsegctl stack unplug-cached`, or SIGTERM to it, "
			"then SIGCONT if it was stopped: it flushes, then "
			"removes its redirect; a hung one: SIGKILL, which "
			"counts a write-back loss if it held data). Taken out "
			"from here it would serve data that writes bypassing "
			"it made stale once redirected to again",
			xseg_name(seg), port, set ? "set" : "clear", target);
		return 1;
	}
	if (rc == -EXDEV) {
		/* a cache serves the path of its own next port only: it would
		 * write this port's data into that port's store */
		struct xseg_port_info ni = {0};
		char serves[96] = "another port's path";

		if (!xseg_port_info(seg, next, &ni) && ni.cache &&
		    ni.cache_next != XSEG_NOPORT)
			snprintf(serves, sizeof(serves),
				 "port %" PRIu32 "'s path (cached --next-port "
				 "%" PRIu32 ")",
				 ni.cache_next, ni.cache_next);
		else if (ni.cache)
			snprintf(serves, sizeof(serves),
				 "a path it does not name (an older build)");
		ctl_err("segment %s: port %" PRIu32 ": cannot set redirect: "
			"port %" PRIu32 " is a running cache of %s: it fetches "
			"from and writes back to that port only, so this "
			"port's writes would land there; redirect that port "
			"to it, or start a cache with --next-port %" PRIu32,
			xseg_name(seg), port, next, serves, port);
		return 1;
	}
	if (rc < 0) {
		ctl_err("segment %s: port %" PRIu32 ": cannot %s redirect: %s",
			xseg_name(seg), port, set ? "set" : "clear",
			strerror(-rc));
		return 1;
	}
	return 0;
}

static int ctl_reap(struct ctl *c, struct xseg *seg)
{
	struct xseg_reap_stats st = {0};
	int rc = xseg_reap(seg, &st);

	if (rc < 0) {
		ctl_err("segment %s: reap failed: %s", xseg_name(seg),
			strerror(-rc));
		return 1;
	}
	if (c->json)
		printf("{\"ports_reclaimed\":%" PRIu32
		       ",\"requests_failed\":%" PRIu32
		       ",\"requests_freed\":%" PRIu32
		       ",\"requests_redelivered\":%" PRIu32
		       ",\"writeback_losses\":%" PRIu32 "}\n",
		       st.ports_reclaimed, st.requests_failed,
		       st.requests_freed, st.requests_redelivered,
		       st.writeback_losses);
	else
		printf("reclaimed %" PRIu32 " port(s); %" PRIu32
		       " request(s) failed back, %" PRIu32 " freed, %" PRIu32
		       " redelivered; %" PRIu32 " write-back loss(es)\n",
		       st.ports_reclaimed, st.requests_failed,
		       st.requests_freed, st.requests_redelivered,
		       st.writeback_losses);
	return 0;
}

int main(int argc, char **argv)
{
	struct ctl c = {0};
	struct xseg *seg;
	int status;

	/* volume and stack commands live in xsegctl_{volume,stack}.c */
	if (argc > 1 && !strcmp(argv[1], "volume"))
		return xsegctl_volume_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "stack"))
		return xsegctl_stack_main(argc - 1, argv + 1);
	status = ctl_parse(&c, argc, argv);

	if (status >= 0)
		return status;
	if (!strcmp(c.cmd, "create"))
		return ctl_create(&c);
	if (!strcmp(c.cmd, "destroy"))
		return ctl_destroy(&c);
	if (ctl_join(&c, &seg) < 0)
		return 1;
	if (!strcmp(c.cmd, "info"))
		status = ctl_info(&c, seg);
	else if (!strcmp(c.cmd, "list"))
		status = ctl_list(&c, seg);
	else if (!strcmp(c.cmd, "stats"))
		status = ctl_stats(&c, seg);
	else if (!strcmp(c.cmd, "redirect"))
		status = ctl_redirect(&c, seg, true);
	else if (!strcmp(c.cmd, "unredirect"))
		status = ctl_redirect(&c, seg, false);
	else
		status = ctl_reap(&c, seg);
	xseg_leave(seg);
	return status;
}
