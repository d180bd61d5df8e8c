/* SPDX-License-Identifier: MIT */
/*
 * bench_blocker: blocker store throughput next to its references, all
 * measured in the same run on the same disk, printed as one JSON object.
 *
 *   bench_blocker [--dir DIR] [--mib N] [--index-chunks N] [--seconds S]
 *                 [--io uring|sync]    (default uring, as the peer)
 *
 * - writes: sequential 64 KiB unique writes into a 4 KiB-chunk store, then
 *   the same data again (duplicates); reference: SHA-256 over 4 KiB chunks
 *   and raw appends of 4 KiB records to a plain file, same total bytes,
 *   one fdatasync at the end for every contender.
 * - reads: random 4 KiB reads (page cache warm) with and without
 *   verification, and verified through mappings of the log (first and
 *   second pass); reference: SHA-256 over 4 KiB.
 * - index: RAM per chunk at N chunks (512-byte chunks so that 1 M chunks
 *   take 512 MiB) and the time to reopen that store, with its index file
 *   and rebuilding it from the log.
 * - FUA: 4 KiB random writes with BLOCKER_FUA from 1 and 16 threads (group
 *   commit), next to pwrite+fdatasync per write on a plain file from 1
 *   and 16 threads (the original file peer's policy).
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

static bool mmap_reads;

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

static double fua_iops(struct blocker_store *s, int fd, int threads,
		       double secs)
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
	return ops / (now() - start);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"mib", required_argument, NULL, 'm'},
	    {"index-chunks", required_argument, NULL, 'i'},
	    {"seconds", required_argument, NULL, 's'},
	    {"io", required_argument, NULL, 'o'},
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
		case 'h':
			printf("usage: bench_blocker [--dir DIR] [--mib N] "
			       "[--index-chunks N] [--seconds S] "
			       "[--io uring|sync]\n");
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
	data = malloc(64u << 20);
	for (size_t i = 0; i < (64u << 20) / 8; i++)
		((uint64_t *)data)[i] = rng(&seed);

	/* references */
	double sha4k = sha_mbps(data, total, 4096);
	double sha64k = sha_mbps(data, total, 65536);
	double raw4k = raw_append_mbps(dir, data, total, 4096);
	double raw64k = raw_append_mbps(dir, data, total, 65536);

	/* unique and duplicate sequential 64 KiB writes */
	snprintf(sdir, sizeof(sdir), "%s/w", dir);
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

	/*
	 * random 4 KiB reads, warm cache, with and without verification;
	 * then verified through mappings of the log (mmap_reads), a first
	 * pass (every read faults its page in) and a second one over the
	 * same chunks (page tables warm, as in a long-running peer)
	 */
	double rd[4];
	uint64_t nreads = total / 4096;
	uint8_t rb[4096];
	for (int v = 0; v < 3; v++) {
		mmap_reads = v == 2;
		s = mkstore(sdir, 4096, v >= 1);
		for (int pass = 0; pass < (v == 2 ? 2 : 1); pass++) {
			uint64_t rs = 7;
			t = now();
			for (uint64_t i = 0; i < nreads; i++) {
				uint64_t blk = rng(&rs) % (total / 4096);
				char name[32];
				snprintf(name, sizeof(name), "obj%llu",
					 (unsigned long long)(blk >> 10));
				r = blocker_read(s, name, strlen(name),
						 (blk & 1023) * 4096, 4096, rb);
				if (r)
					die("read", r);
			}
			rd[v + pass] = nreads * 4096.0 / (now() - t) / 1e6;
		}
		blocker_close(s);
	}
	mmap_reads = false;
	nftw(sdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(w);

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
	struct blocker_stats ist, st;
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

	/* FUA 4 KiB random writes: group commit vs fsync per write */
	snprintf(sdir, sizeof(sdir), "%s/fua", dir);
	s = mkstore(sdir, 4096, true);
	double fua1 = fua_iops(s, -1, 1, secs);
	double fua16 = fua_iops(s, -1, 16, secs);
	blocker_get_stats(s, &st);
	uint64_t fsyncs = st.fsyncs, flushes = st.flushes;
	blocker_close(s);
	nftw(sdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	char rpath[4300];
	snprintf(rpath, sizeof(rpath), "%s/raw.fua", dir);
	int fd = open(rpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, 64u << 20))
		die("raw fua file", errno);
	fdatasync(fd);
	double raw1 = fua_iops(NULL, fd, 1, secs);
	double raw16 = fua_iops(NULL, fd, 16, secs);
	close(fd);
	unlink(rpath);
	rmdir(dir);

	double ref = sha4k < raw4k ? sha4k : raw4k;
	printf("{\n"
	       "  \"bench\": \"blocker\", \"io\": \"%s\",\n"
	       "  \"data_mib\": %zu, \"chunk_size\": 4096, \"write_size\": "
	       "65536, \"fsync_policy\": \"one fdatasync at the end\",\n"
	       "  \"sha256_4k_MBps\": %.0f, \"sha256_64k_MBps\": %.0f,\n"
	       "  \"raw_append_4k_MBps\": %.0f, \"raw_append_64k_MBps\": "
	       "%.0f,\n"
	       "  \"unique_write_64k_MBps\": %.0f,\n"
	       "  \"unique_vs_min_sha_raw4k\": %.2f,\n"
	       "  \"duplicate_write_64k_MBps\": %.0f,\n"
	       "  \"duplicate_vs_unique\": %.2f,\n"
	       "  \"random_read_4k_verified_MBps\": %.0f,\n"
	       "  \"random_read_4k_unverified_MBps\": %.0f,\n"
	       "  \"verified_read_vs_sha256_4k\": %.2f,\n"
	       "  \"random_read_4k_verified_mmap_first_pass_MBps\": %.0f,\n"
	       "  \"random_read_4k_verified_mmap_second_pass_MBps\": %.0f,\n"
	       "  \"verified_mmap_second_pass_vs_sha256_4k\": %.2f,\n"
	       "  \"index_chunks\": %llu, \"index_chunk_size\": 512,\n"
	       "  \"index_fill_s\": %.2f,\n"
	       "  \"index_bytes_per_chunk\": %.2f,\n"
	       "  \"index_usable_bytes_per_chunk\": %.2f,\n"
	       "  \"close_with_checkpoint_s\": %.3f,\n"
	       "  \"reopen_s\": %.3f,\n"
	       "  \"reopen_rebuild_index_s\": %.3f,\n"
	       "  \"fua_4k_store_1thread_iops\": %.0f,\n"
	       "  \"fua_4k_store_16threads_iops\": %.0f,\n"
	       "  \"fua_store_fsyncs\": %llu, \"fua_store_flushes\": %llu,\n"
	       "  \"fsync_per_write_1thread_iops\": %.0f,\n"
	       "  \"fsync_per_write_16threads_iops\": %.0f,\n"
	       "  \"fua16_vs_fsync_per_write16\": %.2f,\n"
	       "  \"archipelago_file_peer_reference_iops\": {\"1thread\": "
	       "7000, \"16threads\": 11000}\n"
	       "}\n",
	       io_backend->name, mib, sha4k, sha64k, raw4k, raw64k, uniq,
	       uniq / ref, dup, dup / uniq, rd[1], rd[0], rd[1] / sha4k, rd[2],
	       rd[3], rd[3] / sha4k, (unsigned long long)index_chunks, fill,
	       (double)ist.index_bytes / (ist.chunks ? ist.chunks : 1),
	       (double)ist.index_usable_bytes / (ist.chunks ? ist.chunks : 1),
	       close_s, reopen, rebuild, fua1, fua16,
	       (unsigned long long)fsyncs, (unsigned long long)flushes, raw1,
	       raw16, fua16 / raw16);
	free(data);
	return 0;
}
