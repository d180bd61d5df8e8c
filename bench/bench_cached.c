/* SPDX-License-Identifier: MIT */
/*
 * bench_cached: cached's hit path and first-pass cost, measured with real
 * processes. On a private segment it starts noop --store (the in-memory
 * store behind the cache) and cached in front of it, then runs bench_xseg
 * against cached and embeds its JSON reports in one JSON object, next to
 * the references measured in the same run: memcpy bandwidth for the same
 * block sizes (random blocks of a buffer the size of the working set into
 * a request-sized buffer, as a hit does), "memcpy_gbps" from a malloc'd
 * buffer (4 KiB pages; the reference the 90 % goal has always been stated
 * against) and "memcpy_pool_pages_gbps" from a buffer mapped as cached
 * maps its bucket pool (2 MiB aligned, huge pages advised before the
 * first touch; "memcpy_pool_pages_anon_huge_kb" says how much of it the
 * kernel backed with huge pages).
 *
 *   bench_cached [--quick] [--duration SECONDS] [--wait poll|sleep]
 *                [--only hits|scale|path|pathscale|workers] [--rounds N]
 *
 * --wait sets how bench_xseg waits for replies: poll (default; the
 * original cached's figures were measured with busy-polling clients) or
 * sleep (each reply then costs a futex wake-up of the client).
 *
 * Runs: for 1 and 2 cached threads, random 4k/16k/64k read and write hits
 * at iodepth 1 and 16 (the working set fits in the cache, warmed by a
 * write pass first), each with cached_cpu_ns_per_req: the CPU time of all
 * of cached's threads during the run divided by the requests served (it
 * includes the workers' polling for work, so it is the cost per request
 * only while cached is the bottleneck, e.g. at iodepth 16); and the first
 * (cold) and second (warm) write pass over the working set with and without
 * pre-faulted cache memory.
 *
 * Workers (--only workers; issue 6: "2 worker threads never below 0.9x
 * of 1"): cached -t 1 against cached -t 2, and -t 2 with every worker
 * allowed to be active, alternating in one sitting (run_workers).
 *
 * Scale (issue 6: "latency at 1 K vs 1 M cached objects, goal within
 * 1.5x"): one cached with 4 KiB objects of one 4 KiB bucket, room for
 * 1 M + 1 K of them (4000 MiB of buckets); 4 KiB random read hits at
 * iodepth 1 while the cache holds 1 K objects (reads over those, three
 * runs), then, after 1 M more objects were read in, reads over all 1 M
 * alternating with reads over the first 1 K only (three runs each; same
 * hot set, 1000x more objects indexed: the cost
 * of the index and LRU alone, without the CPU cache misses of a 4 GiB
 * working set). cached's miss counter is reported next to each, to show
 * they were hits, and cached_cpu_ns_per_req, the CPU time of cached's
 * threads during the run over the requests (at iodepth 1 it includes the
 * worker's polling between requests, so it moves with the latency); the
 * read-in reports cached_anon_huge_kb (how much of cached is in huge
 * pages). --quick uses 64 K instead of 1 M. About 4.5 GiB of RAM
 * (buckets, one xcache node and cached_obj per object). Each run has a
 * "floor" measured right after it over the same set: the memory
 * hierarchy alone, a chain of the dependent loads a hit makes (hash
 * bucket, entry, object, then the 4 KiB copy: "floor_chain") in arrays
 * of the same sizes and strides, no code of cached around it (see
 * floor_run; about 5.3 GiB more RAM while the scale run lasts). Its 1 M
 * over 1 K difference is what the memory costs whatever the code does.
 * Programs are taken from the directory of this binary.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cached.h"
#include "bench_args.h"

static char bindir[PATH_MAX];
static char segname[64];
/* bench_xseg's wait mode: poll (busy-poll replies, as the original cached
 * was measured) or sleep (futex per reply: adds the wake-up cost) */
static const char *wait_mode = "poll";
static pid_t children[8];
static int nr_children;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pid_t start(char *const argv[])
{
	char path[PATH_MAX + 64];
	pid_t pid;

	snprintf(path, sizeof(path), "%s/%s", bindir, argv[0]);
	pid = fork();
	if (pid == 0) {
		execv(path, argv);
		fprintf(stderr, "bench_cached: cannot run %s: %s\n", path,
			strerror(errno));
		_exit(127);
	}
	if (pid > 0)
		children[nr_children++] = pid;
	return pid;
}

static int run_wait(char *const argv[])
{
	int st;
	pid_t pid = start(argv);

	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	nr_children--;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void stop_all(void)
{
	while (nr_children > 0) {
		pid_t pid = children[--nr_children];
		int i;

		kill(pid, SIGTERM);
		/* a peer that does not stop within a minute is killed: a
		 * benchmark never leaves processes behind */
		for (i = 0; i < 6000 && waitpid(pid, NULL, WNOHANG) == 0; i++)
			usleep(10000);
		if (i == 6000) {
			fprintf(stderr,
				"bench_cached: pid %d did not stop, "
				"killed\n",
				(int)pid);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
	}
}

static void on_exit_cleanup(void)
{
	char argv0[] = "xsegctl";

	stop_all();
	if (segname[0]) {
		char *argv[] = {argv0, "destroy", segname, NULL};
		run_wait(argv);
	}
}

static void on_signal(int sig)
{
	(void)sig;
	exit(1);
}

/* Run bench_xseg with args and copy its one-line JSON into out. */
static int bench_xseg(const char *args, char *out, size_t outlen)
{
	char cmd[PATH_MAX + 1024];
	FILE *f;

	snprintf(cmd, sizeof(cmd),
		 "%s/bench_xseg -g %s --json --no-progress -w %s %s", bindir,
		 segname, wait_mode, args);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	out[0] = '\0';
	if (!fgets(out, (int)outlen, f))
		out[0] = '\0';
	pclose(f);
	out[strcspn(out, "\n")] = '\0';
	if (!out[0])
		snprintf(out, outlen, "null");
	return 0;
}

static void wait_port(unsigned port)
{
	char cmd[PATH_MAX + 512];

	/* xsegctl stats fails until the port has a live owner */
	snprintf(
	    cmd, sizeof(cmd),
	    "%s/xsegctl stats %s %u 2>/dev/null | grep -q '^state: *alive'",
	    bindir, segname, port);
	for (int i = 0; i < 500; i++) {
		if (system(cmd) == 0)
			return;
		usleep(10000);
	}
}

/* Copy random bs-sized blocks of src (ws bytes) into one bs-sized
 * buffer for secs seconds; GB/s. */
static double memcpy_run(const unsigned char *src, size_t bs, size_t ws,
			 double secs)
{
	unsigned char *dst = aligned_alloc(4096, bs);
	uint64_t t0, bytes = 0, x = 88172645463325252ull;
	size_t blocks = ws / bs;

	if (!dst)
		return 0;
	memset(dst, 0, bs);
	t0 = now_ns();
	while (now_ns() - t0 < (uint64_t)(secs * 1e9)) {
		for (int i = 0; i < 256; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			memcpy(dst, src + (x % blocks) * bs, bs);
			bytes += bs;
		}
		__asm__ volatile("" ::"r"(dst) : "memory");
	}
	free(dst);
	return (double)bytes / ((double)(now_ns() - t0));
}

/* The original reference: random blocks of a malloc'd buffer the size of
 * the working set (4 KiB pages: glibc maps it, nobody advises huge
 * pages) into one hot destination block. */
static double memcpy_gbps(size_t bs, size_t ws, double secs)
{
	unsigned char *src = malloc(ws);
	double gbps;

	if (!src)
		return 0;
	memset(src, 1, ws);
	gbps = memcpy_run(src, bs, ws, secs);
	free(src);
	return gbps;
}

/* AnonHugePages (kB) of our mapping that starts at addr, or -1. */
static long long anon_huge_kb(const void *addr)
{
	char line[256];
	bool in = false;
	long long kb = -1;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			in = lo == (unsigned long)(uintptr_t)addr;
			continue;
		}
		if (in && sscanf(line, "AnonHugePages: %lld", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/* AnonHugePages (kB) of a whole process (its bucket pool, for cached), or
 * -1: shows in the report whether the cache was backed by huge pages. */
static long long proc_anon_huge_kb(pid_t pid)
{
	char path[64], line[256];
	long long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %lld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* The second reference: the same copies from a buffer mapped as cached
 * maps its bucket pool (peers/cached/bucket.c: 2 MiB aligned, huge pages
 * advised before the first touch), so both sides of the comparison see
 * the same page size. *huge_kb: how much of it the kernel backed with
 * huge pages (AnonHugePages). */
static double memcpy_pool_gbps(size_t bs, size_t ws, double secs,
			       long long *huge_kb)
{
	const size_t huge = 2u << 20;
	size_t len = (ws + huge - 1) / huge * huge;
	unsigned char *map, *src;
	double gbps;

	*huge_kb = -1;
	map = mmap(NULL, len + huge, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		return 0;
	src = (unsigned char *)(((uintptr_t)map + huge - 1) &
				~(uintptr_t)(huge - 1));
	madvise(src, len, MADV_HUGEPAGE);
	memset(src, 1, ws);
	*huge_kb = anon_huge_kb(src);
	gbps = memcpy_run(src, bs, ws, secs);
	munmap(map, len + huge);
	return gbps;
}

/* CPU time (ns) of every thread of process pid so far, from
 * /proc/PID/task/TID/schedstat (the first field: time on a CPU), or 0. */
static uint64_t proc_cpu_ns(pid_t pid)
{
	char path[96], line[128];
	uint64_t sum = 0;
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		unsigned long long ns;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.20s/schedstat",
			 (int)pid, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f) &&
		    sscanf(line, "%llu", &ns) == 1)
			sum += ns;
		fclose(f);
	}
	closedir(d);
	return sum;
}

/* "requests" of a bench_xseg report, or 0. */
static uint64_t report_requests(const char *json)
{
	const char *r = strstr(json, "\"requests\":");

	return r ? strtoull(r + strlen("\"requests\":"), NULL, 10) : 0;
}

/* noop --store on port 1, cached on port 2 with the given options (a
 * NULL-terminated list after the common ones), then one round trip
 * through cached (which waits until it has built its cache). */
static void start_stack_opts(unsigned threads, const char *const *opts)
{
	char argv0[] = "noop", argv1[] = "cached", th[8];
	char *noop[] = {argv0,	       "-g", segname, "-p",   "1", "--store",
			"--store-max", "1G", "-v",    "warn", NULL};
	char *cached[40] = {argv1, "-g", segname, "-p", "2",   "--next-port",
			    "1",   "-t", th,	  "-v", "warn"};
	int n = 11;
	char out[4096];

	for (int i = 0; opts[i] && n < 39; i++)
		cached[n++] = (char *)opts[i];
	cached[n] = NULL;
	snprintf(th, sizeof(th), "%u", threads);
	start(noop);
	wait_port(1);
	start(cached);
	wait_port(2);
	bench_xseg("-p 2 -o ping -c 1", out, sizeof(out));
}

/* One counter of the statistics area of port (xsegctl stats), or -1. */
static long long port_stat(unsigned port, const char *name)
{
	char cmd[PATH_MAX + 256], line[256];
	long long v = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s/xsegctl stats %s %u 2>/dev/null", bindir,
		 segname, port);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char key[64];
		long long val;

		if (sscanf(line, " %63s %lld", key, &val) == 2 &&
		    !strcmp(key, name))
			v = val;
	}
	pclose(f);
	return v;
}

/* One counter of cached's (port 2) statistics area, or -1. */
static long long cached_stat(const char *name)
{
	return port_stat(2, name);
}

/* ------------------------------------------------------------------ */
/* The scale floor: the memory hierarchy alone                         */
/* ------------------------------------------------------------------ */

/*
 * What a read hit of a random object has to load from memory, with
 * nothing of cached's code around it: the loads of the dependent chain
 * (docs/cached.md, "The dependent misses of a hit over 1 M objects"),
 * each address computed from the value the previous load returned, into
 * arrays of the sizes and strides cached's own structures have in the
 * scale configuration, mapped as cached maps them (cached_huge_calloc:
 * huge pages), then the 4 KiB copy out of the bucket the last load
 * named. Stages: the hash table's bucket (16 bytes each, as many as
 * xcache's active table has: the power of two >= max objects), the
 * xcache entry's first line (the stride of xcache's node pool), the
 * cached_obj line holding the slots (sizeof(struct cached_obj)), the
 * bucket's 4 KiB in a 4000 MiB pool. Object j sits at index j of each,
 * as the objects the scale run reads in sequentially do; its hash
 * bucket is a hash of j. "old_chain" adds the stage the entry layout
 * before session 11 had (priv in the entry's fifth line).
 */
struct floor_mem {
	unsigned char *hb, *ent, *obj, *data;
	uint64_t hb_len, ent_len, obj_len, data_len;
	uint64_t nr_hb, nr_nodes, nr_data, ent_stride;
};

static uint64_t floor_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

/* The stride of xcache's node pool, from a tiny cache's first two. */
static uint64_t floor_entry_stride(void)
{
	struct xcache_config xc = {.capacity = 1, .nr_nodes = 2};
	struct xcache *x;
	uint64_t s;

	if (xcache_create(&xc, &x))
		return 0;
	s = (uint64_t)((uintptr_t)xcache_node(x, 1) -
		       (uintptr_t)xcache_node(x, 0));
	xcache_destroy(x);
	return s;
}

static void floor_free(struct floor_mem *m)
{
	cached_huge_free(m->hb, m->hb_len);
	cached_huge_free(m->ent, m->ent_len);
	cached_huge_free(m->obj, m->obj_len);
	cached_huge_free(m->data, m->data_len);
	memset(m, 0, sizeof(*m));
}

/* objects: how many the chains use (index 0..objects-1); sizes as cached
 * -run with max_objects and a pool of nr_data 4 KiB buckets. */
static int floor_init(struct floor_mem *m, uint64_t max_objects,
		      uint64_t nr_data, uint64_t objects)
{
	memset(m, 0, sizeof(*m));
	m->ent_stride = floor_entry_stride();
	m->nr_hb = 1;
	while (m->nr_hb < max_objects)
		m->nr_hb <<= 1;
	m->nr_nodes = max_objects + max_objects / 2;
	m->nr_data = nr_data;
	if (!m->ent_stride || objects > m->nr_nodes || objects > nr_data)
		return -1;
	m->hb = cached_huge_calloc(m->nr_hb, 16, &m->hb_len);
	m->ent = cached_huge_calloc(m->nr_nodes, m->ent_stride, &m->ent_len);
	m->obj = cached_huge_calloc(m->nr_nodes, sizeof(struct cached_obj),
				    &m->obj_len);
	m->data = cached_huge_calloc(nr_data, 4096, &m->data_len);
	if (!m->hb || !m->ent || !m->obj || !m->data) {
		floor_free(m);
		return -1;
	}
	/* every page resident, as cached's are after the read-in */
	for (uint64_t i = 0; i < nr_data * 4096; i += 4096)
		m->data[i] = 1;
	for (uint64_t j = 0; j < objects; j++) {
		uint64_t h = floor_mix(j) & (m->nr_hb - 1);
		unsigned char *e = m->ent + j * m->ent_stride;
		unsigned char *o = m->obj + j * sizeof(struct cached_obj);
		uint32_t v = (uint32_t)j;

		memcpy(m->hb + h * 16, &v, 4);
		memcpy(e, &v, 4);
		memcpy(e + 4 * 64, &v, 4);
		memcpy(o + offsetof(struct cached_obj, inline_bucket), &v, 4);
	}
	/* colliding objects share a hash bucket: the chain then follows the
	 * last one written, still a random object */
	return 0;
}

static inline void floor_serialize(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("lfence" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static uint64_t floor_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns per hit (thread CPU time: what a neighbour on a shared machine
 * disturbs least; chunks of 256) of chains over objects
 * 0..set-1 for secs seconds. old: the pre-session-11 chain (one more
 * line of the entry). copy: the 4 KiB copy at the end; chain: the loads
 * before it (copy without chain: random buckets of the set). */
static double floor_run(const struct floor_mem *m, uint64_t set, bool chain,
			bool old, bool copy, double secs)
{
	unsigned char *dst = aligned_alloc(4096, 4096);
	uint64_t t0, n = 0, x = 88172645463325252ull, sum = 0;

	if (!dst)
		return 0;
	memset(dst, 0, 4096);
	t0 = floor_clock();
	while (floor_clock() - t0 < (uint64_t)(secs * 1e9)) {
		for (int i = 0; i < 256; i++) {
			uint32_t v;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			v = (uint32_t)(x % set);
			if (chain) {
				/* the loaded value joins the next address
				 * (v is j again): a dependent load each */
				memcpy(&v,
				       m->hb +
					   (floor_mix(v) & (m->nr_hb - 1)) * 16,
				       4);
				memcpy(&v, m->ent + (uint64_t)v * m->ent_stride,
				       4);
				if (old)
					memcpy(&v,
					       m->ent +
						   (uint64_t)v * m->ent_stride +
						   4 * 64,
					       4);
				memcpy(&v,
				       m->obj +
					   (uint64_t)v *
					       sizeof(struct cached_obj) +
					   offsetof(struct cached_obj,
						    inline_bucket),
				       4);
			}
			if (copy)
				memcpy(dst, m->data + (uint64_t)v * 4096, 4096);
			sum += v + dst[v & 4095];
			/* one hit at a time, as at iodepth 1: the next
			 * chain starts after this one's loads are done (else
			 * the CPU runs ahead into the next, independent one) */
			floor_serialize();
		}
		n += 256;
		__asm__ volatile("" ::"r"(dst) : "memory");
	}
	t0 = floor_clock() - t0;
	free(dst);
	__asm__ volatile("" ::"r"(sum));
	return (double)t0 / (double)n;
}

/* One floor sample over objects 0..set-1, printed as a JSON object. */
static void floor_print(const struct floor_mem *m, uint64_t set, double secs)
{
	printf("{\"set\":%" PRIu64 ",\"chain_copy_ns\":%.1f,"
	       "\"old_chain_copy_ns\":%.1f,\"chain_ns\":%.1f,"
	       "\"copy_ns\":%.1f}",
	       set, floor_run(m, set, true, false, true, secs),
	       floor_run(m, set, true, true, true, secs),
	       floor_run(m, set, true, false, false, secs),
	       floor_run(m, set, false, false, true, secs));
}

/* The scale section: see the header comment. */
static void run_scale(double duration, unsigned big)
{
	static const char *const opts[] = {
	    "--cache-size", "4000M", "--object-size", "4k", "--bucket-size",
	    "4k", "--max-objects", "1048576", "--dirty-threshold", "4000M",
	    "--max-inflight", "64",
	    /* pre-faulting 4000 MiB took 26 s
	     * on the 2-core VM; the read-in
	     * touches the pages anyway */
	    "--no-prefault", NULL};
	char args[512], out[4096];
	uint64_t t0, cpu0;
	long long before, after;
	struct floor_mem fm;
	bool floor_ok;
	pid_t cpid;

	/* the floor's arrays first: about 5.3 GiB next to cached's 4.5 */
	floor_ok = !floor_init(&fm, 1048576, 1024000, big);
	if (!floor_ok)
		fprintf(stderr, "bench_cached: scale: no memory for the floor "
				"(its figures are left out)\n");
	printf("\"scale\":{\"object_size\":\"4k\",\"bucket_size\":"
	       "\"4k\",\"cache\":\"4000M\",\"max_objects\":1048576,"
	       "\"op\":\"read\",\"bs\":\"4k\",\"iodepth\":1,"
	       "\"floor_chain\":[\"hash bucket\",\"entry line 0\","
	       "\"object slots line\",\"4 KiB copy\"],"
	       "\"old_floor_chain\":[\"hash bucket\",\"entry line 0\","
	       "\"entry line 4 (priv)\",\"object slots line\","
	       "\"4 KiB copy\"],\"runs\":[");
	fflush(stdout);
	start_stack_opts(1, opts);
	cpid = children[nr_children - 1];
	/* read in: objects are clean (the store answers zeroes), so the
	 * shutdown has nothing to flush */
	bench_xseg("-p 2 -o read -P seq -b 4k -O 4k -n 1000 --prefix k -q 16",
		   out, sizeof(out));
	/* Three runs of each, alternating after the read-in, so that both
	 * read sets see the same conditions (on a shared 2-core machine a
	 * neighbour's burst moves the qd1 median from 2 us to 30 us: the
	 * worker's spin ends and the next request pays a futex wake-up). */
	for (int run = 0; run < 9; run++) {
		bool big_set = run >= 3 && run % 2 == 1;
		unsigned set = big_set ? big : 1000;
		long long active;

		if (run == 3) {
			snprintf(args, sizeof(args),
				 "-p 2 -o read -P seq -b 4k -O 4k -n %u "
				 "--prefix m -q 16",
				 big);
			t0 = now_ns();
			bench_xseg(args, out, sizeof(out));
			printf("{\"read_in_objects\":%u,\"read_in_s\":%.1f,"
			       "\"cached_anon_huge_kb\":%lld},",
			       big, (double)(now_ns() - t0) / 1e9,
			       proc_anon_huge_kb(cpid));
		}
		/* the statistics area is published once a second */
		usleep(1100000);
		before = cached_stat("misses");
		active = cached_stat("objects_active");
		snprintf(args, sizeof(args),
			 "-p 2 -o read -P rand -b 4k -O 4k -n %u --prefix %s "
			 "-q 1 -T %dms --seed %d",
			 set, big_set ? "m" : "k", (int)(duration * 1000),
			 run + 1);
		cpu0 = proc_cpu_ns(cpid);
		bench_xseg(args, out, sizeof(out));
		cpu0 = proc_cpu_ns(cpid) - cpu0;
		usleep(1100000);
		after = cached_stat("misses");
		/* cached_cpu_ns_per_req: CPU time of cached's threads during
		 * the run over the requests served; at iodepth 1 it includes
		 * the worker's polling between requests */
		printf("{\"cached_objects\":%lld,\"read_set\":%u,"
		       "\"misses_during\":%lld,\"cached_cpu_ns_per_req\":%.0f,"
		       "\"bench_xseg\":%s",
		       active, set, after - before,
		       report_requests(out)
			   ? (double)cpu0 / (double)report_requests(out)
			   : 0.0,
		       out);
		/* the floor for the same set, right after the run */
		if (floor_ok) {
			printf(",\"floor\":");
			floor_print(&fm, set, 0.3);
		}
		printf("}%s", run < 8 ? "," : "");
		fflush(stdout);
	}
	printf("]}");
	stop_all();
	if (floor_ok)
		floor_free(&fm);
}

static void start_stack(unsigned threads, bool prefault, const char *cache,
			const char *policy)
{
	char argv0[] = "noop", argv1[] = "cached", th[8];
	char *noop[] = {argv0,	       "-g", segname, "-p",   "1", "--store",
			"--store-max", "1G", "-v",    "warn", NULL};
	char *cached[] = {argv1,
			  "-g",
			  segname,
			  "-p",
			  "2",
			  "--next-port",
			  "1",
			  "--cache-size",
			  (char *)cache,
			  "-t",
			  th,
			  "-v",
			  "warn",
			  "--write-policy",
			  (char *)policy,
			  prefault ? NULL : "--no-prefault",
			  NULL};

	char args[64], out[4096];

	snprintf(th, sizeof(th), "%u", threads);
	start(noop);
	wait_port(1);
	start(cached);
	wait_port(2);
	/* the port is bound before cached has built (and pre-faulted) its
	 * cache; a round trip through it waits for that */
	snprintf(args, sizeof(args), "-p 2 -o ping -c 1");
	bench_xseg(args, out, sizeof(out));
}

/* ------------------------------------------------------------------ */
/* --only workers: 2 cached workers against 1, alternating             */
/* ------------------------------------------------------------------ */

/*
 * Issue 6: "2 worker threads never below 0.9x of 1" for hits. Three
 * cached processes on one segment, in front of one noop --store, idle
 * while another is measured: "t1" (-t 1), "t2" (-t 2, the default
 * --active-workers, i.e. what a user gets) and "t2_all_active" (-t 2
 * --active-workers 2: both workers woken for load, the policy before the
 * active-worker budget, for comparison in the same sitting). Random read
 * hits of 4k and 64k at iodepth 1 and 16 over a warmed working set; each
 * (block size, iodepth) runs every config --rounds times (default 3, at
 * most 15), the order rotated each round, so that a neighbour's burst
 * falls on all of them alike. Per run:
 * IOPS, cached's CPU time per request and other_cpu_pct (what the rest of
 * the machine used meanwhile, wk_run_one); per config: the framework's
 * wake counters over all its runs; per row: the medians and the ratios
 * t2/t1 and t2_all_active/t1 of the medians. /proc/loadavg at the start
 * and the end says how quiet the machine was.
 */
#define WK_CONFIGS    3
#define WK_MAX_ROUNDS 15

static const struct {
	const char *name;
	unsigned threads;
	const char *opt; /* one extra option and its value, or NULL */
	const char *val;
} wk_configs[WK_CONFIGS] = {
    {"t1", 1, NULL, NULL},
    {"t2", 2, NULL, NULL},
    {"t2_all_active", 2, "--active-workers", "2"},
};

static const char *const wk_counters[] = {
    "wakes_backlog", "wakes_slow_batch", "wakes_suppressed",
    "long_handler_turns", "active_workers"};
#define WK_NR_COUNTERS (sizeof(wk_counters) / sizeof(wk_counters[0]))

static int wk_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median of n values (n odd; even: the upper middle one). */
static double wk_median(const double *v, int n)
{
	double s[WK_MAX_ROUNDS];

	memcpy(s, v, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), wk_cmp);
	return s[n / 2];
}

static void wk_loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "r");

	buf[0] = '\0';
	if (f) {
		if (!fgets(buf, (int)len, f))
			buf[0] = '\0';
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = '\0';
}

/* "iops" of a bench_xseg report, or 0. */
static double report_iops(const char *json)
{
	const char *r = strstr(json, "\"iops\":");

	return r ? strtod(r + strlen("\"iops\":"), NULL) : 0;
}

/* Busy CPU time of the whole machine so far (ns, /proc/stat: every
 * state but idle and iowait), or 0. */
static uint64_t machine_busy_ns(void)
{
	unsigned long long v[10] = {0};
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t busy = 0;
	FILE *f = fopen("/proc/stat", "r");

	if (!f)
		return 0;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8)
		busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
	fclose(f);
	return hz > 0 ? busy * (1000000000ull / (uint64_t)hz) : 0;
}

/* CPU time of the children this process has waited for (the shells of
 * popen and, through them, bench_xseg). */
static uint64_t children_cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_CHILDREN, &ru))
		return 0;
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
		   1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/* One measured run of bench_xseg against port: its IOPS, the CPU time per
 * request of process pid (the cached measured), and other_cpu_pct: the
 * CPU the rest of the machine used meanwhile (busy time of all CPUs less
 * that of this benchmark's processes: the peers in pids, bench_xseg and
 * its shell), in percent of the CPUs' time. A figure measured while
 * others used a good part of the machine says little about 2 workers
 * against 1 (they then compete for CPU with the neighbours too). */
static void wk_run_one(const char *args, pid_t pid, const pid_t *pids,
		       int npids, double *iops, double *cpu, double *other,
		       uint64_t *reqs)
{
	char out[4096];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t own0 = children_cpu_ns(), busy0 = machine_busy_ns(),
		 t0 = now_ns(), me0 = proc_cpu_ns(pid), own1, wall;

	for (int i = 0; i < npids; i++)
		own0 += proc_cpu_ns(pids[i]);
	own0 += proc_cpu_ns(getpid());
	bench_xseg(args, out, sizeof(out));
	*cpu = (double)(proc_cpu_ns(pid) - me0);
	wall = now_ns() - t0;
	own1 = children_cpu_ns() + proc_cpu_ns(getpid());
	for (int i = 0; i < npids; i++)
		own1 += proc_cpu_ns(pids[i]);
	*other = 0;
	if (wall && ncpu > 0) {
		double o =
		    (double)(machine_busy_ns() - busy0) - (double)(own1 - own0);

		*other = o > 0 ? 100.0 * o / ((double)wall * (double)ncpu) : 0;
	}
	*reqs = report_requests(out);
	*iops = report_iops(out);
	*cpu = *reqs ? *cpu / (double)*reqs : 0;
}

static int run_workers(double duration, const char *ws, int rounds)
{
	static const char *const bss[] = {"4k", "64k"};
	static const int qds[] = {16, 1};
	pid_t pids[WK_CONFIGS + 1]; /* the cacheds, then noop */
	uint64_t reqs_total[WK_CONFIGS] = {0};
	long long c0[WK_CONFIGS][WK_NR_COUNTERS];
	char load[128], args[256], out[4096];
	char argv0[] = "noop", argv1[] = "cached";
	char *noop[] = {argv0,	       "-g", segname, "-p",   "1", "--store",
			"--store-max", "1G", "-v",    "warn", NULL};
	bool first = true;

	wk_loadavg(load, sizeof(load));
	printf("\"workers\":{\"rounds\":%d,\"loadavg_start\":\"%s\","
	       "\"configs\":[",
	       rounds, load);
	pids[WK_CONFIGS] = start(noop);
	if (pids[WK_CONFIGS] < 0)
		return 1;
	wait_port(1);
	for (int k = 0; k < WK_CONFIGS; k++) {
		char port[8], th[8];
		char *cached[] = {argv1,
				  "-g",
				  segname,
				  "-p",
				  port,
				  "--next-port",
				  "1",
				  "--cache-size",
				  "128M",
				  "-t",
				  th,
				  "-v",
				  "warn",
				  "--write-policy",
				  "writeback",
				  (char *)wk_configs[k].opt,
				  (char *)wk_configs[k].val,
				  NULL};

		snprintf(port, sizeof(port), "%d", 2 + k);
		snprintf(th, sizeof(th), "%u", wk_configs[k].threads);
		pids[k] = start(cached);
		if (pids[k] < 0)
			return 1;
		wait_port(2 + k);
		snprintf(args, sizeof(args), "-p %d -o ping -c 1", 2 + k);
		bench_xseg(args, out, sizeof(out));
		/* warm: every block in this cache */
		snprintf(args, sizeof(args),
			 "-p %d -o write -P seq -b 64k -S %s -q 16", 2 + k, ws);
		bench_xseg(args, out, sizeof(out));
		printf("%s{\"name\":\"%s\",\"port\":%d,\"threads\":%u,"
		       "\"options\":\"%s%s%s\"}",
		       k ? "," : "", wk_configs[k].name, 2 + k,
		       wk_configs[k].threads,
		       wk_configs[k].opt ? wk_configs[k].opt : "",
		       wk_configs[k].opt ? " " : "",
		       wk_configs[k].val ? wk_configs[k].val : "");
	}
	/* the statistics areas are published once a second */
	usleep(1100000);
	for (int k = 0; k < WK_CONFIGS; k++)
		for (size_t i = 0; i < WK_NR_COUNTERS; i++)
			c0[k][i] = port_stat(2 + k, wk_counters[i]);
	printf("],\"runs\":[");
	fflush(stdout);
	for (int b = 0; b < 2; b++)
		for (int q = 0; q < 2; q++) {
			double iops[WK_CONFIGS][WK_MAX_ROUNDS];
			double cpu[WK_CONFIGS][WK_MAX_ROUNDS];

			for (int r = 0; r < rounds; r++)
				for (int j = 0; j < WK_CONFIGS; j++) {
					int k = (r + j) % WK_CONFIGS;
					uint64_t reqs;
					double other;

					snprintf(
					    args, sizeof(args),
					    "-p %d -o read -P rand -b %s "
					    "-S %s -q %d -T %dms --seed %d",
					    2 + k, bss[b], ws, qds[q],
					    (int)(duration * 1000), r + 1);
					wk_run_one(args, pids[k], pids,
						   WK_CONFIGS + 1, &iops[k][r],
						   &cpu[k][r], &other, &reqs);
					reqs_total[k] += reqs;
					printf("%s{\"config\":\"%s\",\"bs\":"
					       "\"%s\",\"iodepth\":%d,"
					       "\"round\":%d,\"iops\":%.0f,"
					       "\"cached_cpu_ns_per_req\":%.0f,"
					       "\"other_cpu_pct\":%.1f}",
					       first ? "" : ",",
					       wk_configs[k].name, bss[b],
					       qds[q], r + 1, iops[k][r],
					       cpu[k][r], other);
					first = false;
					fflush(stdout);
				}
			/* the summary row of this block size and depth,
			 * printed as a run-like object so the stream stays
			 * one JSON object */
			printf(",{\"summary\":true,\"bs\":\"%s\",\"iodepth\":"
			       "%d",
			       bss[b], qds[q]);
			for (int k = 0; k < WK_CONFIGS; k++)
				printf(",\"%s_iops_median\":%.0f,\"%s_cpu_ns_"
				       "per_req_median\":%.0f",
				       wk_configs[k].name,
				       wk_median(iops[k], rounds),
				       wk_configs[k].name,
				       wk_median(cpu[k], rounds));
			for (int k = 1; k < WK_CONFIGS; k++) {
				double base = wk_median(iops[0], rounds);

				printf(
				    ",\"%s_over_t1\":%.3f", wk_configs[k].name,
				    base > 0 ? wk_median(iops[k], rounds) / base
					     : 0);
			}
			printf("}");
			fflush(stdout);
		}
	usleep(1100000);
	printf("],\"wakes\":[");
	for (int k = 0; k < WK_CONFIGS; k++) {
		printf("%s{\"config\":\"%s\",\"requests\":%" PRIu64,
		       k ? "," : "", wk_configs[k].name, reqs_total[k]);
		for (size_t i = 0; i < WK_NR_COUNTERS; i++) {
			long long v = port_stat(2 + k, wk_counters[i]);

			/* active_workers is a setting, not a count */
			if (i + 1 < WK_NR_COUNTERS && v >= 0 && c0[k][i] >= 0)
				v -= c0[k][i];
			printf(",\"%s\":%lld", wk_counters[i], v);
		}
		printf("}");
	}
	wk_loadavg(load, sizeof(load));
	printf("],\"loadavg_end\":\"%s\"}", load);
	stop_all();
	return 0;
}

/* ------------------------------------------------------------------ */
/* --only path: cached's own code path, in this process                */
/* ------------------------------------------------------------------ */

/*
 * The cache (cached_core) driven in this process through fake I/O, as the
 * unit tests drive it: no segment, no peer framework, no other process.
 * What it measures is the CPU time (CLOCK_THREAD_CPUTIME_ID) of one
 * thread per READ or WRITE hit, from cached_submit_request to the
 * completion, next to the CPU time of the copy alone (the same number
 * of random blocks of the same pool), so the difference is
 * cached's fixed cost per request. On a shared machine this is what
 * stays put when the IPC figures turn into scheduling noise: a
 * neighbour takes CPU away from the thread, not CPU time from the
 * measure (its caches still pay).
 */
struct path_req {
	struct xseg_request req;
	unsigned char *buf;
	bool done;
	int error;
};

static void *path_data(struct cached *c, struct xseg_request *req)
{
	(void)c;
	return ((struct path_req *)req)->buf;
}

static void path_complete(struct cached *c, struct xseg_request *req, int error)
{
	struct path_req *r = (struct path_req *)req;

	(void)c;
	r->done = true;
	r->error = error;
}

static int path_forward(struct cached *c, struct xseg_request *req)
{
	path_complete(c, req, 0);
	return 0;
}

/* The next port: a store of zeroes that answers at once (flushes are not
 * expected in the measured loops; the dirty threshold is above the cache
 * size). */
static int path_submit(struct cached *c, struct cached_nreq *n)
{
	if (n->req->op == XSEG_OP_READ)
		memset(((struct path_req *)n->req)->buf, 0, n->req->size);
	cached_nreq_done(c, n, 0, n->req->size);
	return 0;
}

/* unflushed NULL: cached keeps the count itself, as in its unit tests */
static const struct cached_io_ops path_io = {.data = path_data,
					     .complete = path_complete,
					     .forward = path_forward,
					     .submit = path_submit};

static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t path_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void path_set(struct path_req *r, uint16_t op, uint64_t obj,
		     uint64_t off, uint64_t bs)
{
	r->req.op = op;
	r->req.flags = 0;
	r->req.offset = off;
	r->req.size = bs;
	r->req.serviced = 0;
	r->req.targetlen = (uint16_t)snprintf(
	    r->req.target, sizeof(r->req.target), "bench_%" PRIu64, obj);
	r->done = false;
}

/* Thread CPU ns per request of n random op hits of bs bytes over ws
 * bytes (4 MiB objects) into *hit_ns, and of the copies alone (as
 * many random blocks of the same pool) into *copy_ns. Hits and copies alternate
 * in chunks of 256, so that both see the same neighbours on a shared machine.
 * Returns 0 or -1 if a request failed. */
static int path_run(struct cached *c, struct path_req *r, uint16_t op,
		    uint64_t bs, uint64_t ws, unsigned n, double *hit_ns,
		    double *copy_ns)
{
	const uint64_t osz = 4u << 20;
	uint64_t x = 88172645463325252ull, y = 0x9e3779b97f4a7c15ull;
	uint64_t blocks = ws / bs, hit = 0, copy = 0;
	unsigned char *src = cached_pool_bucket(&c->pool, 0);

	for (unsigned done = 0; done < n; done += 256) {
		uint64_t t0 = thread_ns(), t1;

		for (unsigned i = 0; i < 256; i++) {
			uint64_t at = (path_rand(&x) % blocks) * bs;

			path_set(r, op, at / osz, at % osz, bs);
			if (cached_submit_request(c, &r->req) || !r->done ||
			    r->error) {
				fprintf(stderr,
					"bench_cached: path: request failed\n");
				return -1;
			}
		}
		t1 = thread_ns();
		hit += t1 - t0;
		for (unsigned i = 0; i < 256; i++) {
			uint64_t at = (path_rand(&y) % blocks) * bs;

			/* the pool is contiguous and was filled in order:
			 * blocks a hit copies (other ones than the chunk of
			 * hits just before, which the CPU caches hold) */
			if (op == XSEG_OP_READ)
				memcpy(r->buf, src + at, bs);
			else
				memcpy(src + at, r->buf, bs);
			__asm__ volatile("" ::"r"(r->buf) : "memory");
		}
		copy += thread_ns() - t1;
	}
	n = (n + 255) / 256 * 256;
	*hit_ns = (double)hit / n;
	*copy_ns = (double)copy / n;
	return 0;
}

static int run_path(double duration)
{
	static const uint64_t wss[] = {64u << 20, 1u << 20};
	static const uint64_t bsz[] = {4096, 65536};
	struct cached_config cfg = {
	    .cache_size = 128u << 20,
	    .bucket_size = 4096,
	    .object_size = 4u << 20,
	    .max_objects = 128,
	    .policy = CACHED_WRITEBACK,
	    .dirty_threshold = 1ull << 40,
	    .max_req_size = 128u << 10,
	    .max_inflight = 32,
	    .nr_cios = 64,
	    .prefault = true,
	};
	struct cached *c = calloc(1, sizeof(*c));
	struct path_req *nr = calloc(cfg.max_inflight, sizeof(*nr));
	struct path_req r = {0};
	bool first = true;
	int rc = 0;

	if (!c || !nr)
		return 1;
	xcache_thread_register();
	if (cached_init(c, &cfg)) {
		fprintf(stderr, "bench_cached: path: cached_init failed\n");
		return 1;
	}
	c->io = &path_io;
	for (uint32_t i = 0; i < cfg.max_inflight; i++) {
		nr[i].buf = aligned_alloc(4096, cfg.max_req_size);
		c->nreqs[i].req = &nr[i].req;
	}
	r.buf = aligned_alloc(4096, 65536);
	memset(r.buf, 1, 65536);
	/* warm: the whole largest working set written (dirty, as bench_xseg's
	 * warm-up pass leaves it) */
	for (uint64_t at = 0; at < wss[0]; at += 65536) {
		path_set(&r, XSEG_OP_WRITE, at / (4u << 20), at % (4u << 20),
			 65536);
		if (cached_submit_request(c, &r.req) || !r.done) {
			fprintf(stderr, "bench_cached: path: warm failed\n");
			return 1;
		}
	}
	printf("\"path\":{\"what\":\"thread CPU ns per request of "
	       "cached_core driven in-process (no segment, no peer "
	       "framework), next to the copy alone over as many random "
	       "blocks of the same pool\",\"runs\":[");
	for (unsigned w = 0; w < 2; w++)
		for (unsigned b = 0; b < 2; b++)
			for (int op = 0; op < 2; op++) {
				uint16_t xop =
				    op ? XSEG_OP_WRITE : XSEG_OP_READ;
				/* about duration seconds per measure */
				unsigned n =
				    (unsigned)(duration *
					       (bsz[b] == 4096 ? 1e6 : 2e5));
				double hit, copy;

				if (path_run(c, &r, xop, bsz[b], wss[w], n / 10,
					     &hit, &copy) ||
				    path_run(c, &r, xop, bsz[b], wss[w], n,
					     &hit, &copy)) {
					rc = 1;
					goto out;
				}
				printf("%s{\"op\":\"%s\",\"bs\":%" PRIu64
				       ",\"working_set\":%" PRIu64
				       ",\"requests\":%u,\"hit_ns\":%.1f,"
				       "\"copy_ns\":%.1f,\"fixed_ns\":%.1f}",
				       first ? "" : ",", op ? "write" : "read",
				       bsz[b], wss[w], n, hit, copy,
				       hit - copy);
				first = false;
				fflush(stdout);
			}
out:
	printf("]}");
	return rc;
}

/*
 * --only pathscale: the scale configuration of --only scale (4 KiB
 * objects of one bucket, 4000 MiB of buckets, 1 M max objects) driven
 * in-process as --only path drives it: 1 K objects read in (objects
 * 0..999), then the big set (1000..1000+big-1); thread CPU ns per 4 KiB
 * read hit of a random object of either set, alternating (--rounds
 * rounds each, default 3), each round followed by the floor over a set of the
 * same size (floor_run). No segment and no other process: what is left is
 * cached's own hit path and its misses, next to what the memory alone
 * costs.
 */
static int pathscale_read(struct cached *c, struct path_req *r, uint64_t obj)
{
	path_set(r, XSEG_OP_READ, obj, 0, 4096);
	if (cached_submit_request(c, &r->req) || !r->done || r->error) {
		fprintf(stderr,
			"bench_cached: pathscale: read of object "
			"bench_%" PRIu64 " failed\n",
			obj);
		return -1;
	}
	return 0;
}

/* 256 read hits of random objects base..base+set-1. A function of its
 * own so that a cache simulator can count what the hits alone miss
 * (valgrind --tool=callgrind --cache-sim=yes
 * --toggle-collect=pathscale_hits). */
__attribute__((noinline)) static int pathscale_hits(struct cached *c,
						    struct path_req *r,
						    uint64_t base, uint64_t set,
						    uint64_t *x)
{
	for (int i = 0; i < 256; i++)
		if (pathscale_read(c, r, base + path_rand(x) % set))
			return -1;
	return 0;
}

static int run_pathscale(double duration, unsigned big, int rounds)
{
	struct cached_config cfg = {
	    .cache_size = 4000ull << 20,
	    .bucket_size = 4096,
	    .object_size = 4096,
	    .max_objects = 1048576,
	    .policy = CACHED_WRITEBACK,
	    .dirty_threshold = 1ull << 40,
	    .max_req_size = 128u << 10,
	    .max_inflight = 64,
	    .nr_cios = 128,
	    .prefault = false,
	};
	struct cached *c = calloc(1, sizeof(*c));
	struct path_req *nr = calloc(cfg.max_inflight, sizeof(*nr));
	struct path_req r = {0};
	struct floor_mem fm;
	struct xcache_stats xst;
	uint64_t x = 88172645463325252ull, t0;
	int rc = 0;

	if (!c || !nr)
		return 1;
	if (floor_init(&fm, cfg.max_objects, cfg.cache_size / 4096, big)) {
		fprintf(stderr, "bench_cached: pathscale: no memory for the "
				"floor\n");
		return 1;
	}
	xcache_thread_register();
	if (cached_init(c, &cfg)) {
		fprintf(stderr,
			"bench_cached: pathscale: cached_init failed\n");
		floor_free(&fm);
		return 1;
	}
	c->io = &path_io;
	for (uint32_t i = 0; i < cfg.max_inflight; i++) {
		nr[i].buf = aligned_alloc(4096, cfg.max_req_size);
		c->nreqs[i].req = &nr[i].req;
	}
	r.buf = aligned_alloc(4096, 4096);
	t0 = now_ns();
	for (uint64_t o = 0; o < 1000u + big; o++)
		if (pathscale_read(c, &r, o)) {
			floor_free(&fm);
			return 1;
		}
	xcache_get_stats(c->cache, &xst);
	printf("\"pathscale\":{\"what\":\"thread CPU ns per 4 KiB read hit "
	       "of a random object, cached_core in-process in the scale "
	       "configuration, and the floor (the dependent loads and the "
	       "copy alone) over a set of the same size\",\"read_in_s\":%.1f,"
	       "\"objects_active\":%" PRIu64 ",\"floor_chain\":[\"hash "
	       "bucket\",\"entry line 0\",\"object slots line\",\"4 KiB "
	       "copy\"],\"runs\":[",
	       (double)(now_ns() - t0) / 1e9, (uint64_t)xst.nr_active);
	for (int run = 0; run < 2 * rounds; run++) {
		uint64_t set = run % 2 ? big : 1000, base = run % 2 ? 1000 : 0;
		uint64_t hits0 = c->st.hits, n = 0, t = 0;
		uint64_t end = floor_clock() + (uint64_t)(duration * 1e9);

		while (floor_clock() < end) {
			uint64_t t1 = floor_clock();

			if (pathscale_hits(c, &r, base, set, &x)) {
				rc = 1;
				goto out;
			}
			t += floor_clock() - t1;
			n += 256;
		}
		printf("%s{\"set\":%" PRIu64 ",\"hits\":%" PRIu64
		       ",\"requests\":%" PRIu64 ",\"hit_ns\":%.1f,\"floor\":",
		       run ? "," : "", set, c->st.hits - hits0, n,
		       (double)t / (double)n);
		floor_print(&fm, set, duration / 4);
		printf("}");
		fflush(stdout);
	}
out:
	printf("]}");
	floor_free(&fm);
	return rc;
}

#define BENCH_CACHED_USAGE                                                     \
	"usage: bench_cached [--quick] [--duration S] [--wait poll|sleep]\n"   \
	"                    [--only hits|scale|path|pathscale|workers]\n"     \
	"                    [--rounds N]\n"

int main(int argc, char **argv)
{
	static const char *const bss[] = {"4k", "16k", "64k"};
	static const size_t bsz[] = {4096, 16384, 65536};
	char self[PATH_MAX], out[4096], args[512];
	double duration = 3;
	const char *ws = "64M";
	size_t ws_bytes = 64u << 20;
	bool first = true;
	const char *only = NULL;
	unsigned big = 1000000;
	int rounds = 3;
	long long hkb = -1, cached_huge_kb = -1;
	int asked =
	    bench_help_version(argc, argv, "bench_cached", BENCH_CACHED_USAGE);

	if (asked >= 0)
		return asked;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			duration = 1;
			ws = "16M";
			ws_bytes = 16u << 20;
			big = 65536;
		} else if (!strcmp(argv[i], "--rounds") && i + 1 < argc &&
			   atoi(argv[i + 1]) >= 1 &&
			   atoi(argv[i + 1]) <= WK_MAX_ROUNDS) {
			rounds = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--duration") && i + 1 < argc &&
			   bench_parse_seconds(argv[i + 1], &duration)) {
			i++;
		} else if (!strcmp(argv[i], "--wait") && i + 1 < argc &&
			   (!strcmp(argv[i + 1], "poll") ||
			    !strcmp(argv[i + 1], "sleep"))) {
			wait_mode = argv[++i];
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc &&
			   (!strcmp(argv[i + 1], "hits") ||
			    !strcmp(argv[i + 1], "scale") ||
			    !strcmp(argv[i + 1], "workers") ||
			    !strcmp(argv[i + 1], "path") ||
			    !strcmp(argv[i + 1], "pathscale"))) {
			only = argv[++i];
		} else {
			return bench_usage_error("bench_cached", argv[i],
						 BENCH_CACHED_USAGE);
		}
	}
	if (only && !strcmp(only, "path")) {
		int rc;

		printf("{\"bench\":\"cached\",\"duration_s\":%.1f,", duration);
		rc = run_path(duration);
		printf("}\n");
		return rc;
	}
	if (only && !strcmp(only, "pathscale")) {
		int rc;

		printf("{\"bench\":\"cached\",\"duration_s\":%.1f,", duration);
		rc = run_pathscale(duration, big, rounds);
		printf("}\n");
		return rc;
	}
	if (!realpath("/proc/self/exe", self))
		return 1;
	snprintf(bindir, sizeof(bindir), "%s", dirname(self));
	snprintf(segname, sizeof(segname), "bench_cached_%d", (int)getpid());
	atexit(on_exit_cleanup);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* a reader that stops reading (| head) must not leave the peers
	 * and the segment behind */
	signal(SIGPIPE, on_signal);
	signal(SIGHUP, on_signal);
	{
		char argv0[] = "xsegctl";
		char *create[] = {argv0,  "create",	segname, "--size",
				  "512M", "--requests", "1024",	 "--data-size",
				  "64k",  NULL};
		if (run_wait(create)) {
			fprintf(stderr,
				"bench_cached: cannot create segment\n");
			segname[0] = '\0';
			return 1;
		}
	}

	printf("{\"bench\":\"cached\",\"working_set\":\"%s\","
	       "\"duration_s\":%.1f,\"wait\":\"%s\",",
	       ws, duration, wait_mode);
	if (only && !strcmp(only, "scale")) {
		run_scale(duration, big);
		printf("}\n");
		return 0;
	}
	if (only && !strcmp(only, "workers")) {
		int rc = run_workers(duration, ws, rounds);

		printf("}\n");
		return rc;
	}
	/* Two references, both measured here. The goal figure (issue 6:
	 * 64 KiB read hits >= 90 % of memcpy) is compared against the first,
	 * memcpy_gbps, as in every earlier report; memcpy_pool_pages_gbps
	 * copies the same blocks from memory paged as the bucket pool is
	 * (huge pages where the kernel gives them), for the reader who wants
	 * like against like. */
	printf("\"memcpy_gbps\":{");
	for (int b = 0; b < 3; b++)
		printf("%s\"%s\":%.2f", b ? "," : "", bss[b],
		       memcpy_gbps(bsz[b], ws_bytes, duration));
	printf("},\"memcpy_pool_pages_gbps\":{");
	for (int b = 0; b < 3; b++) {
		double g = memcpy_pool_gbps(bsz[b], ws_bytes, duration, &hkb);

		printf("%s\"%s\":%.2f", b ? "," : "", bss[b], g);
	}
	printf("},\"memcpy_pool_pages_anon_huge_kb\":%lld,"
	       "\"memcpy_reference\":\"memcpy_gbps: random blocks of a "
	       "working-set-sized malloc buffer (4 KiB pages) into one "
	       "buffer; memcpy_pool_pages_gbps: the same from a buffer "
	       "mapped like the bucket pool (2 MiB aligned, MADV_HUGEPAGE "
	       "before the first touch); the 90 %% goal is stated against "
	       "memcpy_gbps\",\"hits\":[",
	       hkb);
	fflush(stdout);
	for (unsigned threads = 1; threads <= 2; threads++) {
		start_stack(threads, true, "128M", "writeback");
		/* warm: every block in the cache */
		snprintf(args, sizeof(args),
			 "-p 2 -o write -P seq -b 64k -S %s -q 16", ws);
		bench_xseg(args, out, sizeof(out));
		/* cached was started last */
		cached_huge_kb = proc_anon_huge_kb(children[nr_children - 1]);
		for (int op = 0; op < 2; op++)
			for (int b = 0; b < 3; b++)
				for (int q = 1; q <= 16; q += 15) {
					snprintf(args, sizeof(args),
						 "-p 2 -o %s -P rand -b %s -S "
						 "%s -q %d -T %dms",
						 op ? "write" : "read", bss[b],
						 ws, q, (int)(duration * 1000));
					pid_t cpid = children[nr_children - 1];
					uint64_t cpu0 = proc_cpu_ns(cpid), reqs;
					double cpu_per_req;

					bench_xseg(args, out, sizeof(out));
					reqs = report_requests(out);
					cpu_per_req =
					    reqs ? (double)(proc_cpu_ns(cpid) -
							    cpu0) /
						       (double)reqs
						 : 0;
					printf(
					    "%s{\"threads\":%u,\"op\":\"%s\","
					    "\"bs\":\"%s\",\"iodepth\":%d,"
					    "\"cached_anon_huge_kb\":%lld,"
					    "\"cached_cpu_ns_per_req\":%.0f,"
					    "\"bench_xseg\":%s}",
					    first ? "" : ",", threads,
					    op ? "write" : "read", bss[b], q,
					    cached_huge_kb, cpu_per_req, out);
					first = false;
					fflush(stdout);
				}
		stop_all();
	}
	if (only) { /* hits */
		printf("]}\n");
		return 0;
	}
	printf("],\"first_pass\":[");
	first = true;
	for (int prefault = 1; prefault >= 0; prefault--) {
		start_stack(1, prefault, "256M", "writeback");
		for (int pass = 0; pass < 2; pass++) {
			snprintf(args, sizeof(args),
				 "-p 2 -o write -P seq -b 64k -S 96M -q 16");
			bench_xseg(args, out, sizeof(out));
			printf("%s{\"prefault\":%s,\"pass\":\"%s\","
			       "\"bench_xseg\":%s}",
			       first ? "" : ",", prefault ? "true" : "false",
			       pass ? "warm" : "cold", out);
			first = false;
			fflush(stdout);
		}
		stop_all();
	}
	/* the store alone, and a working set 8x the cache in both policies */
	printf("],\"store_alone\":[");
	first = true;
	start_stack(1, true, "16M", "writeback");
	/* write the working set into the store first: reads of objects it
	 * never stored would only be zero-fills */
	snprintf(args, sizeof(args), "-p 1 -o write -P seq -b 64k -S %s -q 16",
		 ws);
	bench_xseg(args, out, sizeof(out));
	for (int op = 0; op < 2; op++)
		for (int b = 0; b < 3; b++) {
			snprintf(args, sizeof(args),
				 "-p 1 -o %s -P rand -b %s -S %s -q 16 -T %dms",
				 op ? "write" : "read", bss[b], ws,
				 (int)(duration * 1000));
			bench_xseg(args, out, sizeof(out));
			printf("%s{\"op\":\"%s\",\"bs\":\"%s\",\"iodepth\":16,"
			       "\"bench_xseg\":%s}",
			       first ? "" : ",", op ? "write" : "read", bss[b],
			       out);
			first = false;
			fflush(stdout);
		}
	stop_all();
	printf("],\"working_set_8x_cache\":[");
	first = true;
	for (int pol = 0; pol < 3; pol++) {
		const char *name = pol == 0   ? "writeback"
				   : pol == 1 ? "writethrough"
					      : "store_alone";
		start_stack(1, true, "16M",
			    pol == 1 ? "writethrough" : "writeback");
		snprintf(
		    args, sizeof(args),
		    "-p %d -o write -P rand -b 4k -O 1M -S 128M -q 16 -T %dms",
		    pol == 2 ? 1 : 2, (int)(duration * 1000));
		bench_xseg(args, out, sizeof(out));
		printf("%s{\"target\":\"%s\",\"cache\":\"16M\","
		       "\"working_set\":\"128M\",\"bench_xseg\":%s}",
		       first ? "" : ",", name, out);
		first = false;
		fflush(stdout);
		stop_all();
	}
	printf("],");
	run_scale(duration, big);
	printf("}\n");
	return 0;
}
