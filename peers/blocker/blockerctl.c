/* SPDX-License-Identifier: MIT */
/* blockerctl: create, check and inspect a blocker store offline. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "peer_util.h" /* peer_parse_size, peer_parse_u64 */
#include "store.h"

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: blockerctl create DIR [--chunk-size N] "
	       "[--segment-size N|auto]\n"
	       "       blockerctl check DIR\n"
	       "       blockerctl stats [--reserve SIZE|auto] DIR\n"
	       "       blockerctl repair --truncate-at-damage "
	       "[--reserve SIZE|auto] DIR\n"
	       "       blockerctl gc [--min-dead PCT] [--reserve SIZE|auto] "
	       "DIR\n"
	       "       blockerctl clear-sync-error DIR\n"
	       "       blockerctl --help | --version\n"
	       "\n"
	       "create  make an empty store (chunk size: power of two, 512 B "
	       "to 1 MiB,\n"
	       "        default 4096; segment size: multiple of 1 MiB, or "
	       "auto, the\n"
	       "        default: 1/8 of the file system, a power of two, "
	       "1..256 MiB;\n"
	       "        refused on a file system under 8 MiB)\n"
	       "check   verify every record, map reference and checkpoint of "
	       "a store\n"
	       "        that is not in use; exit 0 if clean, 1 if problems "
	       "(listed;\n"
	       "        a store in use is one: its findings may be stale)\n"
	       "stats   open (and so recover) the store and print statistics "
	       "as JSON\n"
	       "repair  open a store that open refuses because durable data "
	       "is damaged\n"
	       "        or missing, cutting the log at the damage: everything "
	       "after it is\n"
	       "        LOST (each cut is logged); run check first\n"
	       "gc      reclaim space of a store that is not in use: copy the "
	       "live chunks\n"
	       "        of closed segments with at least PCT%% dead bytes "
	       "(default 0: any)\n"
	       "        to the log head and remove those segments; prints the "
	       "report as JSON\n"
	       "clear-sync-error  forget a failed log fsync recorded in "
	       "DIR/sync_error\n"
	       "        (the store opens degraded while it is there): check "
	       "the disk first;\n"
	       "        drops the log from the page cache so that the next "
	       "open reads\n"
	       "        what the disk holds, then removes the record\n"
	       "--reserve  for the commands that open the store: the disk "
	       "space held back\n"
	       "        in DIR/reserve for DELETE and GC on a full disk, as "
	       "the blocker peer\n"
	       "        takes it (at least 1M; 0: none, and a full disk cannot "
	       "be recovered\n"
	       "        online; auto, the default: a segment + 1M + twice the "
	       "maps and index)\n");
}

/* --reserve (blocker_reserve_opt): 0, or 2 after saying why */
static int parse_reserve(const char *arg, uint64_t *reserve_bytes)
{
	uint64_t v;

	if (!strcmp(arg, "auto")) {
		*reserve_bytes = 0;
		return 0;
	}
	if (peer_parse_size(arg, &v) || blocker_reserve_opt(v, reserve_bytes)) {
		fprintf(stderr,
			"blockerctl: bad --reserve '%s' (a size of at least "
			"1M, 0 for none, or auto)\n",
			arg);
		return 2;
	}
	if (*reserve_bytes == BLOCKER_RESERVE_NONE)
		fprintf(stderr, "blockerctl: --reserve 0: no space reserve; "
				"if the disk fills, DELETE and GC find no room "
				"and the store stays read-only\n");
	return 0;
}

/*
 * The options of the commands that open a store (--reserve, and the
 * command's own in extra, handled by fn), then exactly one DIR: its
 * index in argv, or -2 after saying why.
 */
static int open_args(int argc, char **argv, const char *cmd,
		     const struct option *extra, int (*fn)(int c, void *arg),
		     void *arg, struct blocker_opts *o)
{
	struct option opts[4] = {{"reserve", required_argument, NULL, 'R'}};
	int c, n = 1;

	for (; extra && extra->name && n < 3; extra++)
		opts[n++] = *extra;
	opts[n] = (struct option){NULL, 0, NULL, 0};
	blocker_opts_init(o);
	o->sync_interval_ms = 0;
	o->checkpoint_bytes = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'R') {
			if (parse_reserve(optarg, &o->reserve_bytes))
				return -2;
		} else if (c == '?' || !fn || fn(c, arg)) {
			return -2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "blockerctl: %s needs exactly one DIR\n", cmd);
		return -2;
	}
	return optind;
}

static void print_line(void *arg, const char *line)
{
	(void)arg;
	printf("%s\n", line);
}

static int cmd_create(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"chunk-size", required_argument, NULL, 'c'},
	    {"segment-size", required_argument, NULL, 's'},
	    {NULL, 0, NULL, 0},
	};
	struct blocker_opts o;
	uint64_t v;
	int c, r;

	blocker_opts_init(&o);
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 's' && !strcmp(optarg, "auto")) {
			o.segment_size = BLOCKER_SEGMENT_SIZE_AUTO;
			continue;
		}
		if ((c == 'c' || c == 's') && peer_parse_size(optarg, &v)) {
			fprintf(stderr, "blockerctl: bad size '%s'\n", optarg);
			return 2;
		}
		if (c == 'c' && v <= UINT32_MAX)
			o.chunk_size = v;
		else if (c == 'c')
			o.chunk_size = 0; /* refused below */
		else if (c == 's')
			o.segment_size = v ? v : 1; /* 0: refused below */
		else
			return 2;
	}
	if (optind != argc - 1) {
		fprintf(stderr, "blockerctl: create needs exactly one DIR\n");
		return 2;
	}
	r = blocker_create(argv[optind], &o);
	if (r) {
		fprintf(stderr, "blockerctl: %s: cannot create store: %s\n",
			argv[optind],
			r == -EINVAL ? "bad chunk or segment size"
				     : strerror(-r));
		return 1;
	}
	return 0;
}

static int cmd_check(const char *dir)
{
	uint64_t problems = 0;
	int r = blocker_check(dir, NULL, print_line, NULL, &problems);

	if (r) {
		fprintf(stderr, "blockerctl: %s: cannot check: %s\n", dir,
			strerror(-r));
		return 1;
	}
	if (problems) {
		printf("%s: %llu problem(s)\n", dir,
		       (unsigned long long)problems);
		return 1;
	}
	printf("%s: clean\n", dir);
	return 0;
}

static void open_failed(const char *dir, int r)
{
	fprintf(stderr, "blockerctl: %s: cannot open store: %s\n", dir,
		strerror(-r));
	if (r == -EUCLEAN)
		fprintf(stderr,
			"blockerctl: %s: durable data is damaged or missing "
			"(see the messages above and 'blockerctl check'); "
			"'blockerctl repair --truncate-at-damage' cuts it off "
			"and loses everything after it\n",
			dir);
}

static int repair_opt(int c, void *arg)
{
	*(bool *)arg = c == 't';
	return c == 't' ? 0 : -1;
}

static int cmd_repair(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"truncate-at-damage", no_argument, NULL, 't'},
	    {NULL, 0, NULL, 0},
	};
	struct blocker_opts o;
	struct blocker_stats st;
	struct blocker_store *s;
	bool truncate = false;
	int r;

	optind =
	    open_args(argc, argv, "repair", opts, repair_opt, &truncate, &o);
	if (optind < 0)
		return 2;
	if (!truncate) {
		fprintf(stderr, "blockerctl: repair drops data: say so with "
				"--truncate-at-damage\n");
		return 2;
	}
	o.truncate_at_damage = true;
	r = blocker_open(argv[optind], &o, &s);
	if (r) {
		open_failed(argv[optind], r);
		return 1;
	}
	blocker_get_stats(s, &st);
	r = blocker_close(s);
	if (r) {
		fprintf(stderr, "blockerctl: %s: close: %s\n", argv[optind],
			strerror(-r));
		return 1;
	}
	printf("%s: %llu bytes of log dropped\n", argv[optind],
	       (unsigned long long)st.truncated_bytes);
	return 0;
}

static int cmd_stats(int argc, char **argv)
{
	struct blocker_opts o;
	struct blocker_stats st;
	struct blocker_store *s;
	const char *dir;
	int r;

	r = open_args(argc, argv, "stats", NULL, NULL, NULL, &o);
	if (r < 0)
		return 2;
	dir = argv[r];
	r = blocker_open(dir, &o, &s);
	if (r) {
		open_failed(dir, r);
		return 1;
	}
	r = blocker_gc_estimate(s, NULL, NULL);
	if (r)
		fprintf(stderr, "blockerctl: %s: reclaimable estimate: %s\n",
			dir, strerror(-r));
	blocker_get_stats(s, &st);
	printf("{\"objects\": %llu, \"chunks\": %llu, \"chunk_size\": %u, "
	       "\"bytes_stored\": %llu, \"bytes_logical\": %llu, "
	       "\"dedup_ratio\": %.3f, \"log_bytes\": %llu, "
	       "\"index_bytes\": %llu, \"index_usable_bytes\": %llu, "
	       "\"index_bytes_per_chunk\": %.2f, \"replayed_records\": %llu, "
	       "\"truncated_bytes\": %llu, \"closed_bytes\": %llu, "
	       "\"reclaimable_bytes\": %llu, \"reclaimable_pct\": %.1f, "
	       "\"reserve_bytes\": %llu, \"reserve_target\": %llu}\n",
	       (unsigned long long)st.objects, (unsigned long long)st.chunks,
	       st.chunk_size, (unsigned long long)st.chunk_bytes,
	       (unsigned long long)st.logical_bytes,
	       st.chunk_bytes ? (double)st.logical_bytes / st.chunk_bytes : 1.0,
	       (unsigned long long)st.log_bytes,
	       (unsigned long long)st.index_bytes,
	       (unsigned long long)st.index_usable_bytes,
	       st.chunks ? (double)st.index_usable_bytes / st.chunks : 0.0,
	       (unsigned long long)st.replayed_records,
	       (unsigned long long)st.truncated_bytes,
	       (unsigned long long)st.closed_bytes,
	       (unsigned long long)st.reclaimable_bytes,
	       st.closed_bytes ? 100.0 * st.reclaimable_bytes / st.closed_bytes
			       : 0.0,
	       (unsigned long long)st.reserve_bytes,
	       (unsigned long long)st.reserve_target);
	r = blocker_close(s);
	if (r) {
		fprintf(stderr, "blockerctl: %s: close: %s\n", dir,
			strerror(-r));
		return 1;
	}
	return 0;
}

static int cmd_clear_sync_error(const char *dir)
{
	int r = blocker_clear_sync_error(dir, NULL);

	if (r == -ENOENT) {
		fprintf(stderr,
			"blockerctl: %s: no store, or no sync error recorded "
			"in it: nothing to clear\n",
			dir);
		return 1;
	}
	if (r == -EBUSY) {
		fprintf(stderr,
			"blockerctl: %s: the store is in use (stop its blocker "
			"first): nothing cleared\n",
			dir);
		return 1;
	}
	if (r) {
		fprintf(stderr, "blockerctl: %s: clear-sync-error: %s\n", dir,
			strerror(-r));
		return 1;
	}
	printf("%s: sync error cleared; run 'blockerctl check %s' before "
	       "starting the store\n",
	       dir, dir);
	return 0;
}

static int gc_opt(int c, void *arg)
{
	struct blocker_gc_opts *g = arg;
	uint64_t v;

	if (c != 'm')
		return -1;
	if (peer_parse_u64(optarg, &v) || v > 100) {
		fprintf(stderr, "blockerctl: bad --min-dead '%s' (0..100)\n",
			optarg);
		return -1;
	}
	g->min_dead_pct = (unsigned)v;
	return 0;
}

static int cmd_gc(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"min-dead", required_argument, NULL, 'm'},
	    {NULL, 0, NULL, 0},
	};
	struct blocker_gc_opts g;
	struct blocker_gc_report rep;
	struct blocker_opts o;
	struct blocker_store *s;
	int r, r2;

	blocker_gc_opts_init(&g);
	optind = open_args(argc, argv, "gc", opts, gc_opt, &g, &o);
	if (optind < 0)
		return 2;
	r = blocker_open(argv[optind], &o, &s);
	if (r) {
		open_failed(argv[optind], r);
		return 1;
	}
	r = blocker_gc(s, &g, &rep);
	printf("{\"segments_examined\": %llu, \"segments_removed\": %llu, "
	       "\"bytes_examined\": %llu, \"bytes_copied\": %llu, "
	       "\"bytes_reclaimed\": %llu, \"reclaimable_before\": %llu, "
	       "\"error\": \"%s\"}\n",
	       (unsigned long long)rep.segments_examined,
	       (unsigned long long)rep.segments_removed,
	       (unsigned long long)rep.bytes_examined,
	       (unsigned long long)rep.bytes_copied,
	       (unsigned long long)rep.bytes_reclaimed,
	       (unsigned long long)rep.reclaimable_before,
	       r ? strerror(-r) : "");
	r2 = blocker_close(s);
	if (r2)
		fprintf(stderr, "blockerctl: %s: close: %s\n", argv[optind],
			strerror(-r2));
	if (r)
		fprintf(stderr, "blockerctl: %s: gc: %s\n", argv[optind],
			strerror(-r));
	return r || r2 ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("blockerctl %s\n", BLOCKER_VERSION_STRING);
		return 0;
	}
	if (!strcmp(argv[1], "create"))
		return cmd_create(argc - 1, argv + 1);
	if (!strcmp(argv[1], "repair"))
		return cmd_repair(argc - 1, argv + 1);
	if (!strcmp(argv[1], "gc"))
		return cmd_gc(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stats"))
		return cmd_stats(argc - 1, argv + 1);
	if (!strcmp(argv[1], "clear-sync-error")) {
		if (argc != 3) {
			fprintf(stderr, "blockerctl: clear-sync-error needs "
					"exactly one DIR\n");
			return 2;
		}
		return cmd_clear_sync_error(argv[2]);
	}
	if (!strcmp(argv[1], "check")) {
		if (argc != 3) {
			fprintf(stderr,
				"blockerctl: check needs exactly one DIR\n");
			return 2;
		}
		return cmd_check(argv[2]);
	}
	fprintf(stderr, "blockerctl: unknown command '%s' (try --help)\n",
		argv[1]);
	return 2;
}
