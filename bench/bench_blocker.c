/* SPDX-License-Identifier: MIT */
/*
 * bench_blocker: blocker store throughput next to its references, all
 * measured in the same run on the same disk, printed as one JSON object.
 *
 *   bench_blocker [--dir DIR] [--mib N] [--index-chunks N] [--seconds S]
 *                 [--io uring|sync]    (default uring, as the peer)
 *                 [--no-mmap-reads] [--only gc|reads|fua]
 *
 * - writes: sequential 64 KiB unique writes into a 4 KiB-chunk store, then
 *   the same data again (duplicates); reference: SHA-256 over 4 KiB chunks
 *   and raw appends of 4 KiB records to a plain file, same total bytes,
 *   one fdatasync at the end for every contender.
 * - reads: random 4 KiB reads (page cache warm), verified, through the
 *   default read path (mappings of the log) from a fresh open: a first
 *   pass (cold mappings: every page touched faults once) and a second one
 *   over the same chunks (warm, as in a long-running peer); the same
 *   unverified; verified and unverified through the I/O backend (pread,
 *   --no-mmap-reads); reference: SHA-256 over 4 KiB.
 * - index: RAM per chunk at N chunks (512-byte chunks so that 1 M chunks
 *   take 512 MiB) and the time to reopen that store, with its index file
 *   and rebuilding it from the log.
 * - FUA: 4 KiB random writes with BLOCKER_FUA from 1 and 16 threads (group
 *   commit), next to the bound of group commit on this disk (one thread
 *   appending 4 KiB to a plain file, fdatasync every N writes, N = 1 and
 *   16: the writer counts) and to pwrite+fdatasync per write on a plain
 *   file from 1 and 16 threads (the original file peer's policy); per
 *   case the writes per fsync (mean and histogram) and where a group
 *   commit cycle's time goes (traced at the I/O backend).
 * - GC: a store of 4 MiB segments filled with --mib/2 of unique data, then
 *   half of its chunks overwritten; one blocker_gc pass: MB/s of log
 *   examined and of live data copied (reference: raw 4 KiB appends
 *   above); then 4 KiB random overwrites from 4 threads for --seconds
 *   without GC, with back-to-back unthrottled passes, with passes
 *   throttled to 64 MiB/s (the peer's default --gc-rate), and without GC
 *   again (the no-GC figure is the mean of the first and the last run).
 *
 *   --no-mmap-reads makes the store read through the I/O backend in
 *   the write, index, FUA and GC cases (dedup lookups, read-modify-write);
 *   the read cases measure both paths anyway.
 *
 *   --only gc runs the references and the GC case only; --only reads
 *   the SHA-256 reference, the store fill and the read cases; --only fua
 *   the FUA cases, their bound and the fsync-per-write references.
 *
 * Before every case that measures fsyncs or appends ended by one, the
 * file system is synced (syncfs), so that no case pays for the dirty
 * pages of the one before.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <ftw.h>
#include <openssl/evp.h>
#include "store.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, int r)
{
	fprintf(stderr, "bench_blocker: %s: %s\n", what,
		strerror(r < 0 ? -r : r));
	exit(1);
}

static int rm_one(const char *p, const struct stat *sb, int f, struct FTW *w)
{
	(void)sb;
	(void)f;
	(void)w;
	return remove(p);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* unique content: random bytes with a per-chunk counter in each chunk */
static void stamp(uint8_t *buf, size_t len, size_t chunk, uint64_t *ctr)
{
	for (size_t o = 0; o < len; o += chunk) {
		uint64_t c = ++*ctr;
		memcpy(buf + o, &c, 8);
	}
}

static const struct blocker_io_ops *io_backend = &blocker_io_uring;

static bool mmap_reads = true; /* the store's default */
/* --no-mmap-reads: the write, index, FUA and GC cases read (dedup
 * lookups, read-modify-write) through the backend */
static bool default_mmap_reads = true;

static struct blocker_store *mkstore(const char *dir, uint32_t chunk,
				     bool verify)
{
	struct blocker_opts o;
	struct blocker_store *s;
	int r;

	blocker_opts_init(&o);
	o.chunk_size = chunk;
	o.sync_interval_ms = 0; /* the same fsync policy as the references */
	o.checkpoint_bytes = 0;
	o.verify_reads = verify;
	o.mmap_reads = mmap_reads;
	o.io = io_backend;
	r = blocker_create(dir, &o);
	if (r && r != -EEXIST)
		die("create", r);
	r = blocker_open(dir, &o, &s);
	if (r)
		die("open", r);
	return s;
}

/* the fastest way OpenSSL offers: a fetched EVP_MD and a reused context */
/*
 * Write back every dirty page of dir's file system before a case that
 * measures fsyncs (or appends ended by one): pages earlier cases left
 * dirty would otherwise be written by this case's fsyncs and counted
 * against it (the FUA 1-thread figure varied 351-4578 IOPS with what ran
 * before).
 */
static void settle(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);

	if (fd < 0)
		die("open for syncfs", errno);
	if (syncfs(fd) < 0)
		die("syncfs", errno);
	close(fd);
}

static double sha_mbps(const uint8_t *buf, size_t total, size_t piece)
{
	EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint8_t d[32];
	unsigned int n;
	double t = now();

	for (size_t o = 0; o < total; o += piece) {
		EVP_DigestInit_ex2(ctx, md, NULL);
		EVP_DigestUpdate(ctx, buf + (o % (64u << 20)), piece);
		EVP_DigestFinal_ex(ctx, d, &n);
	}
	t = now() - t;
	EVP_MD_CTX_free(ctx);
	EVP_MD_free(md);
	return total / t / 1e6;
}

static double raw_append_mbps(const char *dir, const uint8_t *buf, size_t total,
			      size_t rec)
{
	char path[4096];
	double t;
	int fd;

	snprintf(path, sizeof(path), "%s/raw.append", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("raw open", errno);
	t = now();
	for (size_t o = 0; o < total; o += rec)
		if (pwrite(fd, buf + (o % (64u << 20)), rec, o) != (ssize_t)rec)
			die("raw pwrite", errno);
	fdatasync(fd);
	t = now() - t;
	close(fd);
	unlink(path);
	return total / t / 1e6;
}

struct fua_arg {
	struct blocker_store *s;
	int fd; /* raw mode when >= 0 */
	int id;
	double until;
	uint64_t ops;
};

static void *fua_thread(void *p)
{
	struct fua_arg *a = p;
	uint64_t seed = 0x9e3779b97f4a7c15ULL * (a->id + 1),
		 ctr = (uint64_t)a->id << 40;
	uint8_t buf[4096];
	char name[32];

	snprintf(name, sizeof(name), "fua%d", a->id);
	memset(buf, 0xa5, sizeof(buf));
	while (now() < a->until) {
		uint64_t off = (rng(&seed) % 1024) * 4096;
		stamp(buf, 4096, 4096, &ctr);
		if (a->fd >= 0) {
			if (pwrite(a->fd, buf, 4096,
				   off + (uint64_t)a->id * (4u << 20)) !=
				4096 ||
			    fdatasync(a->fd))
				die("raw fua", errno);
		} else {
			int r = blocker_write(a->s, name, strlen(name), off,
					      4096, buf, BLOCKER_FUA);
			if (r)
				die("fua write", r);
		}
		a->ops++;
	}
	return NULL;
}

/* ops done by threads writers in secs; *elapsed: the time they took */
static uint64_t fua_run(struct blocker_store *s, int fd, int threads,
			double secs, double *elapsed)
{
	pthread_t t[16];
	struct fua_arg a[16];
	uint64_t ops = 0;
	double start = now();

	for (int i = 0; i < threads; i++) {
		a[i] = (struct fua_arg){s, fd, i, start + secs, 0};
		pthread_create(&t[i], NULL, fua_thread, &a[i]);
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		ops += a[i].ops;
	}
	*elapsed = now() - start;
	return ops;
}

static double fua_iops(struct blocker_store *s, int fd, int threads,
		       double secs)
{
	double t;
	uint64_t ops = fua_run(s, fd, threads, secs, &t);

	return ops / t;
}

/* ---- FUA: group commit, its disk bound, and where its time goes ---- */

/*
 * A tracing I/O backend for the FUA store cases: it passes every call to
 * io_backend and records, for each log fdatasync, how many appends
 * (pwritev calls: one per FUA write, its chunk and map record in one
 * batch) it was the first to cover (the group), whether it started while
 * another was running, the time from the end of the previous fsync to its
 * start (gap), and within that gap the time until the first append and
 * until the last one it covers (refill: released writers waking up,
 * hashing, appending and calling flush again) and from there to its
 * start (idle: the leader's gathering wait).
 */
#define FUA_HIST 34 /* groups 0..32, and > 32 */

static struct {
	pthread_mutex_t lock;
	uint64_t appends;    /* __atomic */
	double last_append;  /* under the store's append_lock; __atomic */
	double first_append; /* 0 after an fsync ends; __atomic */
	uint64_t covered;    /* appends at the start of the last fsync */
	double last_end;
	int inflight;
	uint64_t fsyncs, overlapped, cycles;
	double fsync_s, gap_s, refill_s, idle_s, first_s;
	uint64_t hist[FUA_HIST];
} tr = {.lock = PTHREAD_MUTEX_INITIALIZER};

static ssize_t tr_preadv(void *ctx, int fd, const struct iovec *iov, int cnt,
			 uint64_t off)
{
	return io_backend->preadv(ctx, fd, iov, cnt, off);
}

static ssize_t tr_pwritev(void *ctx, int fd, const struct iovec *iov, int cnt,
			  uint64_t off)
{
	ssize_t r = io_backend->pwritev(ctx, fd, iov, cnt, off);
	double t = now(), z = 0;

	/* the first append after an fsync ended (appends are serialised) */
	(void)__atomic_compare_exchange(&tr.first_append, &z, &t, false,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED);
	__atomic_store(&tr.last_append, &t, __ATOMIC_RELAXED);
	__atomic_fetch_add(&tr.appends, 1, __ATOMIC_RELEASE);
	return r;
}

static int tr_fdatasync(void *ctx, int fd)
{
	double t0 = now(), t1, la, fa, z = 0;
	uint64_t a = __atomic_load_n(&tr.appends, __ATOMIC_ACQUIRE), g;
	int r;

	__atomic_load(&tr.last_append, &la, __ATOMIC_RELAXED);
	__atomic_load(&tr.first_append, &fa, __ATOMIC_RELAXED);
	pthread_mutex_lock(&tr.lock);
	g = a - tr.covered;
	tr.covered = a;
	tr.hist[g < FUA_HIST - 1 ? g : FUA_HIST - 1]++;
	tr.fsyncs++;
	if (tr.inflight) {
		tr.overlapped++;
	} else if (tr.last_end > 0) {
		tr.cycles++;
		tr.gap_s += t0 - tr.last_end;
		if (la > tr.last_end && fa > tr.last_end) {
			tr.first_s += fa - tr.last_end;
			tr.refill_s += la - tr.last_end;
			tr.idle_s += t0 - la;
		}
	}
	tr.inflight++;
	pthread_mutex_unlock(&tr.lock);
	r = io_backend->fdatasync(ctx, fd);
	t1 = now();
	pthread_mutex_lock(&tr.lock);
	tr.inflight--;
	tr.fsync_s += t1 - t0;
	tr.last_end = t1;
	__atomic_store(&tr.first_append, &z, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&tr.lock);
	return r;
}

static int tr_preadv_batch(void *ctx, struct blocker_io_req *reqs, int n)
{
	return io_backend->preadv_batch(ctx, reqs, n);
}

static struct blocker_io_ops trace_ops = {
    .name = "trace",
    .preadv = tr_preadv,
    .pwritev = tr_pwritev,
    .fdatasync = tr_fdatasync,
};

static void trace_reset(void)
{
	pthread_mutex_lock(&tr.lock);
	tr.covered = __atomic_load_n(&tr.appends, __ATOMIC_ACQUIRE);
	tr.last_end = 0;
	tr.fsyncs = tr.overlapped = tr.cycles = 0;
	tr.fsync_s = tr.gap_s = tr.refill_s = tr.idle_s = tr.first_s = 0;
	memset(tr.hist, 0, sizeof(tr.hist));
	pthread_mutex_unlock(&tr.lock);
}

/* user + system CPU time of the whole process (every thread) */
static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

struct fua_case {
	double iops, cpu_us_per_write, writes_per_fsync, fsync_us, gap_us,
	    first_us, refill_us, idle_us, overlapped_pct;
	uint64_t writes, fsyncs;
	uint64_t hist[FUA_HIST];
};

/*
 * The ideal group commit on this disk: one thread appending 4 KiB with
 * pwrite to a new file in the store's directory, fdatasync after every
 * group writes (group = the FUA writer count): no hashing, no index, no
 * waiting for writers to come back. What a store whose groups are as
 * large as its writer count could reach at best. Appends at *off of fd
 * for secs; returns the writes, *elapsed the time.
 */
static uint64_t fua_bound_run(int fd, uint64_t *off, int group, double secs,
			      double *elapsed)
{
	uint8_t buf[4096];
	uint64_t ops = 0, ctr = *off;
	double start = now(), until = start + secs;

	memset(buf, 0x5a, sizeof(buf));
	while (now() < until) {
		for (int i = 0; i < group; i++, ops++, *off += 4096) {
			stamp(buf, 4096, 4096, &ctr);
			if (pwrite(fd, buf, 4096, *off) != 4096)
				die("bound pwrite", errno);
		}
		if (fdatasync(fd))
			die("bound fdatasync", errno);
	}
	*elapsed = now() - start;
	return ops;
}

/*
 * The store's FUA writers and the bound take turns, FUA_SLICES slices of
 * secs / FUA_SLICES each: the disk is shared with whatever else runs on
 * the machine, and a reference measured at another moment compares with
 * another disk.
 */
#define FUA_SLICES 4

static void fua_store_case(struct blocker_store *s, const char *dir,
			   int threads, double secs, struct fua_case *c,
			   double *bound)
{
	struct blocker_stats a, b;
	double st_t = 0, b_t = 0, cpu = 0, t;
	uint64_t st_ops = 0, b_ops = 0, off = 0;
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/bound.append", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("bound open", errno);
	trace_reset();
	blocker_get_stats(s, &a);
	for (int i = 0; i < FUA_SLICES; i++) {
		double c0 = cpu_s();

		/* the bound's slice is no gap between two of our fsyncs */
		pthread_mutex_lock(&tr.lock);
		tr.last_end = 0;
		pthread_mutex_unlock(&tr.lock);
		st_ops += fua_run(s, -1, threads, secs / FUA_SLICES, &t);
		st_t += t;
		cpu += cpu_s() - c0;
		b_ops +=
		    fua_bound_run(fd, &off, threads, secs / FUA_SLICES, &t);
		b_t += t;
	}
	close(fd);
	unlink(path);
	*bound = b_ops / b_t;
	c->iops = st_ops / st_t;
	c->writes = st_ops;
	c->cpu_us_per_write = cpu * 1e6 / (st_ops ? st_ops : 1);
	blocker_get_stats(s, &b);
	pthread_mutex_lock(&tr.lock);
	c->fsyncs = b.fsyncs - a.fsyncs;
	c->writes_per_fsync =
	    (double)(b.writes - a.writes) / (c->fsyncs ? c->fsyncs : 1);
	c->fsync_us = tr.fsync_s * 1e6 / (tr.fsyncs ? tr.fsyncs : 1);
	c->gap_us = tr.gap_s * 1e6 / (tr.cycles ? tr.cycles : 1);
	c->first_us = tr.first_s * 1e6 / (tr.cycles ? tr.cycles : 1);
	c->refill_us = tr.refill_s * 1e6 / (tr.cycles ? tr.cycles : 1);
	c->idle_us = tr.idle_s * 1e6 / (tr.cycles ? tr.cycles : 1);
	c->overlapped_pct = 100.0 * tr.overlapped / (tr.fsyncs ? tr.fsyncs : 1);
	memcpy(c->hist, tr.hist, sizeof(c->hist));
	pthread_mutex_unlock(&tr.lock);
}

struct fua_res {
	struct fua_case c1, c16;
	double bound1, bound16, raw1, raw16;
};

static void fua_case(const char *dir, double secs, struct fua_res *f)
{
	char sdir[4200], rpath[4300];
	struct blocker_store *s;
	const struct blocker_io_ops *io = io_backend;

	/* FUA 4 KiB random writes: group commit vs fsync per write */
	snprintf(sdir, sizeof(sdir), "%s/fua", dir);
	settle(dir);
	trace_ops.preadv_batch = io->preadv_batch ? tr_preadv_batch : NULL;
	io_backend = &trace_ops;
	s = mkstore(sdir, 4096, true);
	io_backend = io;
	settle(dir);
	fua_store_case(s, dir, 1, secs, &f->c1, &f->bound1);
	settle(dir);
	fua_store_case(s, dir, 16, secs, &f->c16, &f->bound16);
	blocker_close(s);
	nftw(sdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(rpath, sizeof(rpath), "%s/raw.fua", dir);
	int fd = open(rpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, 64u << 20))
		die("raw fua file", errno);
	fdatasync(fd);
	settle(dir);
	f->raw1 = fua_iops(NULL, fd, 1, secs);
	settle(dir);
	f->raw16 = fua_iops(NULL, fd, 16, secs);
	close(fd);
	unlink(rpath);
}

static void print_fua_case(const char *name, const struct fua_case *c)
{
	int last = FUA_HIST - 1;

	while (last > 0 && !c->hist[last])
		last--;
	printf("  \"%s\": {\"iops\": %.0f, \"cpu_us_per_write\": %.1f, "
	       "\"writes\": %llu, \"fsyncs\": "
	       "%llu, \"writes_per_fsync\": %.2f,\n"
	       "    \"fsync_us\": %.0f, \"overlapped_fsyncs_pct\": %.1f, "
	       "\"fsync_end_to_next_start_us\": %.0f,\n"
	       "    \"end_to_first_append_us\": %.0f, "
	       "\"end_to_last_covered_append_us\": %.0f, "
	       "\"last_append_to_fsync_start_us\": %.0f,\n"
	       "    \"writes_per_fsync_histogram\": [",
	       name, c->iops, c->cpu_us_per_write,
	       (unsigned long long)c->writes, (unsigned long long)c->fsyncs,
	       c->writes_per_fsync, c->fsync_us, c->overlapped_pct, c->gap_us,
	       c->first_us, c->refill_us, c->idle_us);
	for (int i = 0; i <= last; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)c->hist[i]);
	printf("]},\n");
}

static void print_fua(const struct fua_res *f, bool more)
{
	printf("  \"fua_4k_store_1thread_iops\": %.0f,\n"
	       "  \"fua_4k_store_16threads_iops\": %.0f,\n"
	       "  \"fua_bound_iops_1\": %.0f,\n"
	       "  \"fua_bound_iops_16\": %.0f,\n"
	       "  \"fua_bound\": \"one thread, 4 KiB pwrite appends to a new "
	       "file in the same directory, fdatasync every N writes "
	       "(N = writer count), in turns with the store's writers\",\n"
	       "  \"fua1_vs_bound1\": %.2f,\n"
	       "  \"fua16_vs_bound16\": %.2f,\n",
	       f->c1.iops, f->c16.iops, f->bound1, f->bound16,
	       f->c1.iops / f->bound1, f->c16.iops / f->bound16);
	print_fua_case("fua_1thread", &f->c1);
	print_fua_case("fua_16threads", &f->c16);
	printf("  \"fsync_per_write_1thread_iops\": %.0f,\n"
	       "  \"fsync_per_write_16threads_iops\": %.0f,\n"
	       "  \"fua16_vs_fsync_per_write16\": %.2f,\n"
	       "  \"archipelago_file_peer_reference_iops\": {\"1thread\": "
	       "7000, \"16threads\": 11000}%s\n",
	       f->raw1, f->raw16, f->c16.iops / f->raw16, more ? "," : "");
}

/* ---- GC ---- */

#define GC_SEG	(4u << 20)
#define GC_OBJ	(4u << 20)
#define GC_RATE (64ull << 20)

struct gc_res {
	double pass_s, examined_mbps, copied_mbps;
	uint64_t examined, copied, reclaimed, removed, log_before, log_after;
	double iops_nogc, iops_nogc_before, iops_nogc_after, iops_gc,
	    iops_gc_rate;
	double max_ms_nogc, max_ms_nogc2, max_ms_gc, max_ms_gc_rate;
	uint64_t bg_passes, bg_removed, bg_passes_rate, bg_removed_rate;
};

struct ow_arg {
	struct blocker_store *s;
	int id, nobj;
	double until;
	uint64_t ops;
	double max_s; /* slowest write */
};

/* 4 KiB random overwrites of unique data: every write kills a chunk */
static void *ow_thread(void *p)
{
	struct ow_arg *a = p;
	uint64_t seed = 0x51ed2701ULL * (a->id + 3),
		 ctr = ((uint64_t)a->id + 100) << 40;
	uint8_t buf[4096];

	memset(buf, 0x5a, sizeof(buf));
	while (now() < a->until) {
		uint64_t blk = rng(&seed) % ((uint64_t)a->nobj * GC_OBJ / 4096);
		char name[32];
		snprintf(name, sizeof(name), "gc%llu",
			 (unsigned long long)(blk / (GC_OBJ / 4096)));
		stamp(buf, 4096, 4096, &ctr);
		double t0 = now();
		int r =
		    blocker_write(a->s, name, strlen(name),
				  (blk % (GC_OBJ / 4096)) * 4096, 4096, buf, 0);
		if (r)
			die("overwrite", r);
		t0 = now() - t0;
		if (t0 > a->max_s)
			a->max_s = t0;
		a->ops++;
	}
	return NULL;
}

struct gc_loop {
	struct blocker_store *s;
	struct blocker_gc_opts g;
	volatile int stop; /* set after the writers joined */
	uint64_t passes, removed;
};

static void *gc_loop_thread(void *p)
{
	struct gc_loop *l = p;

	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
		struct blocker_gc_report rep;
		int r = blocker_gc(l->s, &l->g, &rep);
		if (r)
			die("gc pass", r);
		l->passes++;
		l->removed += rep.segments_removed;
		if (!rep.segments_removed)
			usleep(2000);
	}
	return NULL;
}

static double overwrite_iops(struct blocker_store *s, int nobj, double secs,
			     struct gc_loop *gl, double *max_ms)
{
	pthread_t t[4], g;
	struct ow_arg a[4];
	uint64_t ops = 0;
	double start = now();

	if (gl)
		pthread_create(&g, NULL, gc_loop_thread, gl);
	for (int i = 0; i < 4; i++) {
		a[i] = (struct ow_arg){s, i, nobj, start + secs, 0, 0};
		pthread_create(&t[i], NULL, ow_thread, &a[i]);
	}
	*max_ms = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ops += a[i].ops;
		if (a[i].max_s * 1e3 > *max_ms)
			*max_ms = a[i].max_s * 1e3;
	}
	double iops = ops / (now() - start);
	if (gl) {
		__atomic_store_n(&gl->stop, 1, __ATOMIC_RELEASE);
		pthread_join(g, NULL);
	}
	return iops;
}

static void gc_case(const char *dir, const uint8_t *data, size_t total,
		    double secs, struct gc_res *res)
{
	struct blocker_opts o;
	struct blocker_store *s;
	struct blocker_stats st;
	struct blocker_gc_report rep;
	char sdir[4200];
	int nobj = total / 2 / GC_OBJ, r;
	uint64_t ctr = 1ull << 50, seed = 99;
	uint8_t *w = malloc(65536);

	if (nobj < 1)
		nobj = 1;
	snprintf(sdir, sizeof(sdir), "%s/gc", dir);
	blocker_opts_init(&o);
	o.segment_size = GC_SEG;
	o.sync_interval_ms = 0;
	o.checkpoint_bytes = 0;
	o.io = io_backend;
	if ((r = blocker_create(sdir, &o)) || (r = blocker_open(sdir, &o, &s)))
		die("gc store", r);
	for (uint64_t off = 0; off < (uint64_t)nobj * GC_OBJ; off += 65536) {
		char name[32];
		memcpy(w, data + (off % (64u << 20)), 65536);
		stamp(w, 65536, 4096, &ctr);
		snprintf(name, sizeof(name), "gc%llu",
			 (unsigned long long)(off / GC_OBJ));
		r = blocker_write(s, name, strlen(name), off % GC_OBJ, 65536, w,
				  0);
		if (r)
			die("gc fill", r);
	}
	/* overwrite half of the chunks (random 4 KiB pieces) */
	uint64_t nchunks = (uint64_t)nobj * GC_OBJ / 4096;
	for (uint64_t k = 0; k < nchunks / 2; k++) {
		uint64_t blk = rng(&seed) % nchunks;
		char name[32];
		memcpy(w, data + (k * 4096) % (64u << 20), 4096);
		stamp(w, 4096, 4096, &ctr);
		snprintf(name, sizeof(name), "gc%llu",
			 (unsigned long long)(blk / (GC_OBJ / 4096)));
		r = blocker_write(s, name, strlen(name),
				  (blk % (GC_OBJ / 4096)) * 4096, 4096, w, 0);
		if (r)
			die("gc overwrite", r);
	}
	blocker_flush(s);
	blocker_get_stats(s, &st);
	res->log_before = st.log_bytes;
	double t = now();
	r = blocker_gc(s, NULL, &rep);
	res->pass_s = now() - t;
	if (r)
		die("gc", r);
	res->examined = rep.bytes_examined;
	res->copied = rep.bytes_copied;
	res->reclaimed = rep.bytes_reclaimed;
	res->removed = rep.segments_removed;
	res->examined_mbps = rep.bytes_examined / res->pass_s / 1e6;
	res->copied_mbps = rep.bytes_copied / res->pass_s / 1e6;
	blocker_get_stats(s, &st);
	res->log_after = st.log_bytes - st.gc_bytes_reclaimed;

	/* foreground overwrites: no GC, GC back to back, GC throttled */
	res->iops_nogc = overwrite_iops(s, nobj, secs, NULL, &res->max_ms_nogc);
	struct gc_loop gl = {.s = s};
	blocker_gc_opts_init(&gl.g);
	res->iops_gc = overwrite_iops(s, nobj, secs, &gl, &res->max_ms_gc);
	res->bg_passes = gl.passes;
	res->bg_removed = gl.removed;
	struct gc_loop glr = {.s = s};
	blocker_gc_opts_init(&glr.g);
	glr.g.rate_bytes = GC_RATE;
	res->iops_gc_rate =
	    overwrite_iops(s, nobj, secs, &glr, &res->max_ms_gc_rate);
	res->bg_passes_rate = glr.passes;
	res->bg_removed_rate = glr.removed;
	/* no GC again: the mean of before and after cancels drift (page
	 * cache, writeback of the fill) */
	res->iops_nogc_before = res->iops_nogc;
	res->iops_nogc_after =
	    overwrite_iops(s, nobj, secs, NULL, &res->max_ms_nogc2);
	if (res->max_ms_nogc2 > res->max_ms_nogc)
		res->max_ms_nogc = res->max_ms_nogc2;
	res->iops_nogc = (res->iops_nogc_before + res->iops_nogc_after) / 2;
	blocker_close(s);
	nftw(sdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(w);
}

static void print_gc(const struct gc_res *g, double raw4k, bool last)
{
	printf(
	    "  \"gc_segment_size\": %u, \"gc_pass_s\": %.3f,\n"
	    "  \"gc_log_bytes_before\": %llu, \"gc_bytes_examined\": %llu, "
	    "\"gc_bytes_copied\": %llu, \"gc_bytes_reclaimed\": %llu, "
	    "\"gc_segments_removed\": %llu,\n"
	    "  \"gc_examined_MBps\": %.0f, \"gc_copied_MBps\": %.0f,\n"
	    "  \"gc_examined_vs_raw_append_4k\": %.2f,\n"
	    "  \"overwrite_4k_4threads_nogc_iops\": %.0f, "
	    "\"nogc_first_iops\": %.0f, \"nogc_last_iops\": %.0f,\n"
	    "  \"overwrite_4k_4threads_gc_unthrottled_iops\": %.0f, "
	    "\"gc_unthrottled_passes\": %llu, "
	    "\"gc_unthrottled_segments_removed\": %llu,\n"
	    "  \"overwrite_4k_4threads_gc_64MiBps_iops\": %.0f, "
	    "\"gc_64MiBps_passes\": %llu, "
	    "\"gc_64MiBps_segments_removed\": %llu,\n"
	    "  \"overwrite_gc_unthrottled_vs_nogc\": %.2f, "
	    "\"overwrite_gc_64MiBps_vs_nogc\": %.2f,\n"
	    "  \"overwrite_max_latency_ms\": {\"nogc\": %.1f, "
	    "\"gc_unthrottled\": %.1f, \"gc_64MiBps\": %.1f}%s\n",
	    GC_SEG, g->pass_s, (unsigned long long)g->log_before,
	    (unsigned long long)g->examined, (unsigned long long)g->copied,
	    (unsigned long long)g->reclaimed, (unsigned long long)g->removed,
	    g->examined_mbps, g->copied_mbps, g->examined_mbps / raw4k,
	    g->iops_nogc, g->iops_nogc_before, g->iops_nogc_after, g->iops_gc,
	    (unsigned long long)g->bg_passes, (unsigned long long)g->bg_removed,
	    g->iops_gc_rate, (unsigned long long)g->bg_passes_rate,
	    (unsigned long long)g->bg_removed_rate, g->iops_gc / g->iops_nogc,
	    g->iops_gc_rate / g->iops_nogc, g->max_ms_nogc, g->max_ms_gc,
	    g->max_ms_gc_rate, last ? "" : ",");
}

/*
 * Random 4 KiB reads of a store filled with total bytes of unique data in
 * objects "obj<N>" of 4 MiB (page cache warm: the store was just written).
 */
struct read_res {
	/* opening the store for the first mapped pass and for the first
	 * backend pass; page faults (minor) per chunk during the former */
	double open_map_s, open_backend_s, faults_open;
	double pread_unverified, pread_verified;
	double map_verified_first, map_verified_second;
	double map_unverified;
	/* page faults (minor) per read in the first and second pass */
	double faults_first, faults_second;
	/*
	 * SHA-256 over 4 KiB measured right before each verified pass (a
	 * quarter of the data): on a shared machine the load changes
	 * between the start of the run and the reads
	 */
	double sha_first, sha_second, sha_pread;
};

static long minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static double read_pass(struct blocker_store *s, size_t total)
{
	uint64_t nreads = total / 4096, rs = 7;
	uint8_t rb[4096];
	double t = now();
	int r;

	for (uint64_t i = 0; i < nreads; i++) {
		uint64_t blk = rng(&rs) % (total / 4096);
		char name[32];
		snprintf(name, sizeof(name), "obj%llu",
			 (unsigned long long)(blk >> 10));
		r = blocker_read(s, name, strlen(name), (blk & 1023) * 4096,
				 4096, rb);
		if (r)
			die("read", r);
	}
	return nreads * 4096.0 / (now() - t) / 1e6;
}

static void read_cases(const char *sdir, const uint8_t *data, size_t total,
		       struct read_res *rd)
{
	struct blocker_store *s;

	/* the default path from a fresh open: mappings start cold */
	mmap_reads = true;
	long f0 = minflt();
	double t = now();
	s = mkstore(sdir, 4096, true);
	rd->open_map_s = now() - t;
	rd->faults_open = (double)(minflt() - f0) / (total / 4096);
	rd->sha_first = sha_mbps(data, total / 4, 4096);
	f0 = minflt();
	rd->map_verified_first = read_pass(s, total);
	rd->faults_first = (double)(minflt() - f0) / (total / 4096);
	rd->sha_second = sha_mbps(data, total / 4, 4096);
	f0 = minflt();
	rd->map_verified_second = read_pass(s, total);
	rd->faults_second = (double)(minflt() - f0) / (total / 4096);
	blocker_close(s);
	s = mkstore(sdir, 4096, false);
	read_pass(s, total); /* warm its mappings */
	rd->map_unverified = read_pass(s, total);
	blocker_close(s);
	/* the backend (--no-mmap-reads) */
	mmap_reads = false;
	t = now();
	s = mkstore(sdir, 4096, true);
	rd->open_backend_s = now() - t;
	rd->sha_pread = sha_mbps(data, total / 4, 4096);
	rd->pread_verified = read_pass(s, total);
	blocker_close(s);
	s = mkstore(sdir, 4096, false);
	rd->pread_unverified = read_pass(s, total);
	blocker_close(s);
	mmap_reads = default_mmap_reads;
}

static void print_reads(const struct read_res *rd, double sha4k, bool more)
{
	printf("  \"default_read_path\": \"mmap\",\n"
	       "  \"open_before_first_mapped_pass_s\": %.3f,\n"
	       "  \"page_faults_per_chunk_in_that_open\": %.2f,\n"
	       "  \"open_before_first_backend_pass_s\": %.3f,\n"
	       "  \"random_read_4k_verified_first_pass_MBps\": %.0f,\n"
	       "  \"random_read_4k_verified_second_pass_MBps\": %.0f,\n"
	       "  \"verified_first_pass_vs_sha256_4k\": %.2f,\n"
	       "  \"verified_second_pass_vs_sha256_4k\": %.2f,\n"
	       "  \"page_faults_per_read_first_pass\": %.2f,\n"
	       "  \"page_faults_per_read_second_pass\": %.2f,\n"
	       "  \"sha256_4k_right_before_first_pass_MBps\": %.0f,\n"
	       "  \"sha256_4k_right_before_second_pass_MBps\": %.0f,\n"
	       "  \"verified_first_pass_vs_sha256_right_before\": %.2f,\n"
	       "  \"verified_second_pass_vs_sha256_right_before\": %.2f,\n"
	       "  \"random_read_4k_unverified_MBps\": %.0f,\n"
	       "  \"random_read_4k_verified_pread_MBps\": %.0f,\n"
	       "  \"verified_pread_vs_sha256_4k\": %.2f,\n"
	       "  \"verified_pread_vs_sha256_right_before\": %.2f,\n"
	       "  \"random_read_4k_unverified_pread_MBps\": %.0f%s\n",
	       rd->open_map_s, rd->faults_open, rd->open_backend_s,
	       rd->map_verified_first, rd->map_verified_second,
	       rd->map_verified_first / sha4k, rd->map_verified_second / sha4k,
	       rd->faults_first, rd->faults_second, rd->sha_first,
	       rd->sha_second, rd->map_verified_first / rd->sha_first,
	       rd->map_verified_second / rd->sha_second, rd->map_unverified,
	       rd->pread_verified, rd->pread_verified / sha4k,
	       rd->pread_verified / rd->sha_pread, rd->pread_unverified,
	       more ? "," : "");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"mib", required_argument, NULL, 'm'},
	    {"index-chunks", required_argument, NULL, 'i'},
	    {"seconds", required_argument, NULL, 's'},
	    {"io", required_argument, NULL, 'o'},
	    {"only", required_argument, NULL, 'O'},
	    {"no-mmap-reads", no_argument, NULL, 'N'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	size_t mib = 256, total;
	uint64_t index_chunks = 1u << 20, ctr = 0, seed = 42;
	double secs = 3, t;
	char dir[4096], sdir[4200];
	uint8_t *data;
	bool only_gc = false, only_reads = false, only_fua = false;
	int c, r;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			base = optarg;
			break;
		case 'm':
			mib = strtoull(optarg, NULL, 0);
			break;
		case 'i':
			index_chunks = strtoull(optarg, NULL, 0);
			break;
		case 's':
			secs = atof(optarg);
			break;
		case 'o':
			if (!strcmp(optarg, "sync"))
				io_backend = &blocker_io_sync;
			else if (!strcmp(optarg, "uring"))
				io_backend = &blocker_io_uring;
			else {
				fprintf(stderr, "bench_blocker: --io takes "
						"uring or sync\n");
				return 2;
			}
			break;
		case 'O':
			if (!strcmp(optarg, "gc")) {
				only_gc = true;
			} else if (!strcmp(optarg, "reads")) {
				only_reads = true;
			} else if (!strcmp(optarg, "fua")) {
				only_fua = true;
			} else {
				fprintf(stderr, "bench_blocker: --only takes "
						"gc, reads or fua\n");
				return 2;
			}
			break;
		case 'N':
			mmap_reads = default_mmap_reads = false;
			break;
		case 'h':
			printf("usage: bench_blocker [--dir DIR] [--mib N] "
			       "[--index-chunks N] [--seconds S] "
			       "[--io uring|sync] [--only gc|reads|fua] "
			       "[--no-mmap-reads]\n");
			return 0;
		case 'V':
			printf("bench_blocker %s\n", BLOCKER_VERSION_STRING);
			return 0;
		default:
			return 2;
		}
	}
	if (mib < 64 || index_chunks < 1024 || secs <= 0) {
		fprintf(stderr, "bench_blocker: --mib >= 64, --index-chunks "
				">= 1024, --seconds > 0\n");
		return 2;
	}
	total = mib << 20;
	snprintf(dir, sizeof(dir), "%s/bench_blocker-XXXXXX", base);
	if (!mkdtemp(dir))
		die("mkdtemp", errno);
	if (only_fua) {
		struct fua_res f;
		fua_case(dir, secs, &f);
		rmdir(dir);
		printf("{\n  \"bench\": \"blocker_fua\", \"io\": \"%s\",\n"
		       "  \"seconds\": %.1f, \"write_size\": 4096,\n",
		       io_backend->name, secs);
		print_fua(&f, false);
		printf("}\n");
		return 0;
	}
	data = malloc(64u << 20);
	for (size_t i = 0; i < (64u << 20) / 8; i++)
		((uint64_t *)data)[i] = rng(&seed);

	/* references */
	double sha4k = sha_mbps(data, total, 4096);
	double sha64k = 0, raw4k = 0, raw64k = 0;
	struct gc_res gres;
	if (!only_reads) {
		sha64k = sha_mbps(data, total, 65536);
		settle(dir);
		raw4k = raw_append_mbps(dir, data, total, 4096);
		settle(dir);
		raw64k = raw_append_mbps(dir, data, total, 65536);
		settle(dir);
		gc_case(dir, data, total, secs, &gres);
	}
	if (only_gc) {
		rmdir(dir);
		printf("{\n  \"bench\": \"blocker_gc\", \"io\": \"%s\",\n"
		       "  \"data_mib\": %zu, \"chunk_size\": 4096,\n"
		       "  \"raw_append_4k_MBps\": %.0f, "
		       "\"raw_append_64k_MBps\": %.0f,\n",
		       io_backend->name, mib / 2, raw4k, raw64k);
		print_gc(&gres, raw4k, true);
		printf("}\n");
		free(data);
		return 0;
	}

	/* unique and duplicate sequential 64 KiB writes */
	snprintf(sdir, sizeof(sdir), "%s/w", dir);
	settle(dir);
	struct blocker_store *s = mkstore(sdir, 4096, true);
	uint8_t *w = malloc(total);
	for (size_t o = 0; o < total; o += 65536) {
		memcpy(w + o, data + (o % (64u << 20)), 65536);
		stamp(w + o, 65536, 4096, &ctr);
	}
	t = now();
	for (size_t o = 0; o < total; o += 65536) {
		char name[32];
		snprintf(name, sizeof(name), "obj%zu", o >> 22);
		r = blocker_write(s, name, strlen(name), o & ((4u << 20) - 1),
				  65536, w + o, 0);
		if (r)
			die("write", r);
	}
	blocker_flush(s);
	double uniq = total / (now() - t) / 1e6;
	t = now();
	for (size_t o = 0; o < total; o += 65536) {
		char name[32];
		snprintf(name, sizeof(name), "dup%zu", o >> 22);
		r = blocker_write(s, name, strlen(name), o & ((4u << 20) - 1),
				  65536, w + o, 0);
		if (r)
			die("dup write", r);
	}
	blocker_flush(s);
	double dup = total / (now() - t) / 1e6;
	blocker_close(s);

	struct read_res rd;
	read_cases(sdir, data, total, &rd);
	nftw(sdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(w);
	if (only_reads) {
		rmdir(dir);
		printf("{\n  \"bench\": \"blocker_reads\", \"io\": \"%s\",\n"
		       "  \"data_mib\": %zu, \"chunk_size\": 4096,\n"
		       "  \"sha256_4k_MBps\": %.0f,\n",
		       io_backend->name, mib, sha4k);
		print_reads(&rd, sha4k, false);
		printf("}\n");
		free(data);
		return 0;
	}

	/* index RAM per chunk and reopen time at index_chunks chunks */
	snprintf(sdir, sizeof(sdir), "%s/idx", dir);
	s = mkstore(sdir, 512, true);
	uint8_t *ib = malloc(65536);
	memcpy(ib, data, 65536);
	double fill = now();
	for (uint64_t k = 0; k < index_chunks; k += 128) {
		char name[32];
		uint64_t n = index_chunks - k < 128 ? index_chunks - k : 128;
		stamp(ib, n * 512, 512, &ctr);
		snprintf(name, sizeof(name), "i%llu",
			 (unsigned long long)(k >> 13));
		r = blocker_write(s, name, strlen(name), (k & 8191) * 512,
				  n * 512, ib, 0);
		if (r)
			die("index fill", r);
	}
	fill = now() - fill;
	struct blocker_stats ist;
	blocker_get_stats(s, &ist);
	t = now();
	blocker_close(s);
	double close_s = now() - t;
	struct blocker_opts o;
	blocker_opts_init(&o);
	o.sync_interval_ms = 0;
	o.checkpoint_bytes = 0;
	o.io = io_backend;
	t = now();
	r = blocker_open(sdir, &o, &s);
	double reopen = now() - t;
	if (r)
		die("reopen", r);
	blocker_close(s);
	char ipath[4300];
	snprintf(ipath, sizeof(ipath), "%s/index", sdir);
	unlink(ipath);
	t = now();
	r = blocker_open(sdir, &o, &s);
	double rebuild = now() - t;
	if (r)
		die("rebuild", r);
	blocker_close(s);
	nftw(sdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(ib);

	struct fua_res fua;
	fua_case(dir, secs, &fua);
	rmdir(dir);

	double ref = sha4k < raw4k ? sha4k : raw4k;
	printf("{\n"
	       "  \"bench\": \"blocker\", \"io\": \"%s\", \"store_reads\": "
	       "\"%s\",\n"
	       "  \"data_mib\": %zu, \"chunk_size\": 4096, \"write_size\": "
	       "65536, \"fsync_policy\": \"one fdatasync at the end\",\n"
	       "  \"sha256_4k_MBps\": %.0f, \"sha256_64k_MBps\": %.0f,\n"
	       "  \"raw_append_4k_MBps\": %.0f, \"raw_append_64k_MBps\": "
	       "%.0f,\n"
	       "  \"unique_write_64k_MBps\": %.0f,\n"
	       "  \"unique_vs_min_sha_raw4k\": %.2f,\n"
	       "  \"duplicate_write_64k_MBps\": %.0f,\n"
	       "  \"duplicate_vs_unique\": %.2f,\n"
	       "  \"index_chunks\": %llu, \"index_chunk_size\": 512,\n"
	       "  \"index_fill_s\": %.2f,\n"
	       "  \"index_bytes_per_chunk\": %.2f,\n"
	       "  \"index_usable_bytes_per_chunk\": %.2f,\n"
	       "  \"close_with_checkpoint_s\": %.3f,\n"
	       "  \"reopen_s\": %.3f,\n"
	       "  \"reopen_rebuild_index_s\": %.3f,\n",
	       io_backend->name, default_mmap_reads ? "mmap" : "backend", mib,
	       sha4k, sha64k, raw4k, raw64k, uniq, uniq / ref, dup, dup / uniq,
	       (unsigned long long)index_chunks, fill,
	       (double)ist.index_bytes / (ist.chunks ? ist.chunks : 1),
	       (double)ist.index_usable_bytes / (ist.chunks ? ist.chunks : 1),
	       close_s, reopen, rebuild);
	print_fua(&fua, true);
	print_reads(&rd, sha4k, true);
	print_gc(&gres, raw4k, true);
	printf("}\n");
	free(data);
	return 0;
}
