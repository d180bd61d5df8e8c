/* SPDX-License-Identifier: MIT */
/*
 * The log: segment files DIR/log.NNNNNN of at most segment_size bytes.
 * A log position is seg * segment_size + offset; a record never crosses a
 * segment, so a segment may end short of segment_size. Appends are
 * serialised by append_lock (the log order is the replay order); durability
 * comes from blog_flush(), a group commit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "store_int.h"

int blog_seg_path(const char *dir, uint32_t seg, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "%s/log.%06u", dir, seg);

	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

void blocker_degrade(struct blocker_store *s, int err, const char *fmt, ...)
{
	char msg[160];
	va_list ap;
	int expected = 0;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&s->sync_lock);
	if (__atomic_compare_exchange_n(&s->degraded, &expected, err, false,
					__ATOMIC_RELEASE, __ATOMIC_RELAXED))
		memcpy(s->degraded_reason, msg, sizeof(msg));
	pthread_mutex_unlock(&s->sync_lock);
	if (!expected)
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s: degraded (writes refused, reads "
			     "served): %s",
			     s->dir, msg);
}

static int seg_push(struct blocker_store *s, int fd)
{
	pthread_rwlock_wrlock(&s->segs_lock);
	if (s->nsegs == s->segs_cap) {
		uint32_t ncap = s->segs_cap ? 2 * s->segs_cap : 16;
		struct bseg *n = realloc(s->segs, ncap * sizeof(*n));
		if (!n) {
			pthread_rwlock_unlock(&s->segs_lock);
			return -ENOMEM;
		}
		s->segs = n;
		s->segs_cap = ncap;
	}
	s->segs[s->nsegs++].fd = fd;
	pthread_rwlock_unlock(&s->segs_lock);
	return 0;
}

/* Open every existing segment log.000000.. in order (they must be dense). */
int blog_open_segments(struct blocker_store *s, bool create_first)
{
	char path[4096];

	for (uint32_t seg = 0;; seg++) {
		int r = blog_seg_path(s->dir, seg, path, sizeof(path));
		int fd;

		if (r)
			return r;
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && seg == 0 && create_first) {
			fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
				  0644);
			__atomic_fetch_add(&s->dir_seq, 1, __ATOMIC_RELEASE);
		}
		if (fd < 0 && errno == ENOENT)
			return 0;
		if (fd < 0)
			return -errno;
		r = seg_push(s, fd);
		if (r) {
			close(fd);
			return r;
		}
	}
}

int blog_fd(struct blocker_store *s, uint64_t pos, int *fd, uint64_t *off)
{
	uint64_t seg = pos / s->segment_size;
	int r = 0;

	pthread_rwlock_rdlock(&s->segs_lock);
	if (seg >= s->nsegs)
		r = -ERANGE;
	else
		*fd = s->segs[seg].fd;
	pthread_rwlock_unlock(&s->segs_lock);
	*off = pos % s->segment_size;
	return r;
}

int blog_preadv(struct blocker_store *s, uint64_t pos, struct iovec *iov,
		int cnt)
{
	uint64_t off;
	int fd, r;

	r = blog_fd(s, pos, &fd, &off);
	if (r)
		return r;
	while (cnt > 0) {
		ssize_t n = s->io->preadv(s->io_ctx, fd, iov, cnt, off);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -ENODATA;
		off += n;
		/* consume what arrived; iov is the caller's scratch copy */
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= n;
		}
	}
	return 0;
}

int blog_pread(struct blocker_store *s, uint64_t pos, void *buf, size_t len)
{
	struct iovec iov = {buf, len};

	return blog_preadv(s, pos, &iov, 1);
}

/* Start segment seg (caller holds append_lock). */
static int seg_create(struct blocker_store *s, uint32_t seg)
{
	char path[4096];
	int fd, r;

	r = blog_seg_path(s->dir, seg, path, sizeof(path));
	if (r)
		return r;
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = seg_push(s, fd);
	if (r) {
		close(fd);
		return r;
	}
	__atomic_fetch_add(&s->dir_seq, 1, __ATOMIC_RELEASE);
	return 0;
}

static const uint8_t zero_pad[BREC_ALIGN];

/* pwritev all of iov at off, continuing after short writes */
static int write_all(struct blocker_store *s, int fd, struct iovec *iov, int n,
		     uint64_t off, uint64_t size, uint64_t pos)
{
	uint64_t done = 0;

	while (done < size) {
		ssize_t w = s->io->pwritev(s->io_ctx, fd, iov, n, off + done);
		if (w <= 0) {
			int e = w < 0 ? (int)-w : EIO;
			char path[4096];
			blog_seg_path(s->dir, pos / s->segment_size, path,
				      sizeof(path));
			blocker_degrade(
			    s, e, "write of %s at offset %llu failed: %s", path,
			    (unsigned long long)(off + done), strerror(e));
			return -e;
		}
		done += w;
		/* drop what a short write already wrote (iov is ours) */
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= w;
		}
	}
	return 0;
}

#define BATCH_IOV 1020 /* below IOV_MAX, a multiple of 3 */

int blog_append_batch_locked(struct blocker_store *s, struct brec_out *rec,
			     int n)
{
	uint8_t(*hdr)[BREC_HDR_SIZE] = NULL;
	struct iovec *iov = NULL;
	int i = 0, r;

	r = blocker_degraded(s);
	if (r)
		return -r;
	hdr = malloc((size_t)n * BREC_HDR_SIZE);
	iov = malloc(sizeof(*iov) * BATCH_IOV);
	if (!hdr || !iov) {
		r = -ENOMEM;
		goto out;
	}
	while (i < n) {
		uint64_t pos = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
		uint64_t seg = pos / s->segment_size, start, size = 0, off;
		int k = 0, fd;

		if (pos % s->segment_size + brec_size(rec[i].len) >
		    s->segment_size) {
			seg++;
			pos = seg * s->segment_size;
		}
		/* also when the previous segment ended exactly at its end */
		if (seg >= s->nsegs) {
			r = seg_create(s, seg);
			if (r) {
				blocker_degrade(
				    s, -r, "cannot create segment %llu: %s",
				    (unsigned long long)seg, strerror(-r));
				goto out;
			}
			/* nothing lives between the old end and here */
			__atomic_store_n(&s->tail, pos, __ATOMIC_RELEASE);
		}
		start = pos;
		/* a run: the records that fit in this segment and one iov */
		while (i < n && k + 3 <= BATCH_IOV) {
			uint64_t rs = brec_size(rec[i].len);
			if ((pos + rs - 1) / s->segment_size != seg)
				break;
			if (pos + rs > BIDX_MAX_POS) {
				blocker_degrade(s, ENOSPC,
						"log address space exhausted");
				r = -ENOSPC;
				goto out;
			}
			brec_encode(hdr[i], rec[i].type, rec[i].len, pos,
				    rec[i].score);
			rec[i].pos = pos;
			iov[k++] = (struct iovec){hdr[i], BREC_HDR_SIZE};
			iov[k++] =
			    (struct iovec){(void *)rec[i].payload, rec[i].len};
			if (rs - BREC_HDR_SIZE > rec[i].len)
				iov[k++] = (struct iovec){(void *)zero_pad,
							  rs - BREC_HDR_SIZE -
							      rec[i].len};
			pos += rs;
			size += rs;
			i++;
		}
		r = blog_fd(s, start, &fd, &off);
		if (!r)
			r = write_all(s, fd, iov, k, off, size, start);
		if (r)
			goto out;
		__atomic_store_n(&s->tail, pos, __ATOMIC_RELEASE);
	}
out:
	free(hdr);
	free(iov);
	return r;
}

int blog_append_locked(struct blocker_store *s, enum brec_type type,
		       const uint8_t score[32], const void *payload,
		       uint32_t len, uint64_t *pos_out)
{
	struct brec_out rec = {type, score, payload, len, 0};
	int r = blog_append_batch_locked(s, &rec, 1);

	if (!r)
		*pos_out = rec.pos;
	return r;
}

int blog_append(struct blocker_store *s, enum brec_type type,
		const uint8_t score[32], const void *payload, uint32_t len,
		uint64_t *pos_out)
{
	int r;

	pthread_mutex_lock(&s->append_lock);
	r = blog_append_locked(s, type, score, payload, len, pos_out);
	pthread_mutex_unlock(&s->append_lock);
	return r;
}

/*
 * Group commit. A caller whose writes are not yet durable becomes a leader
 * if fewer than FLUSH_INFLIGHT fsyncs are running and none of them already
 * covers its writes: it samples the tail, fdatasyncs every segment written
 * since the last sync (and the directory if a segment was created), and
 * publishes the synced position. Everyone else waits; each fsync covers
 * every write appended before it started, so callers arriving during one
 * fsync share the next. Two fsyncs may overlap (the kernel merges their
 * journal commits); fdatasync makes everything written before the call
 * durable regardless of the other, so a finished sync publishes
 * max(synced, its position).
 */
#define FLUSH_INFLIGHT 2

int blog_flush(struct blocker_store *s)
{
	uint64_t target = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
	int r = 0;

	STAT_INC(s, flushes);
	pthread_mutex_lock(&s->sync_lock);
	s->flushers++;
	while (s->synced < target) {
		/* after a failed fsync the page cache state is unknown: never
		 * report success again (a retried fsync may "succeed") */
		if (s->sync_err) {
			r = -s->sync_err;
			break;
		}
		if (s->inflight >= FLUSH_INFLIGHT ||
		    (s->inflight && s->inflight_max >= target)) {
			pthread_cond_wait(&s->sync_cond, &s->sync_lock);
			continue;
		}
		s->inflight++;
		/*
		 * The callers the previous fsync released are appending their
		 * next writes right now; sampling the tail at once would leave
		 * them to the fsync after this one and split the writers into
		 * alternating groups. When flushes come in groups, wait a
		 * moment (small next to an fsync) so one fsync takes them all.
		 */
		if (s->group > 1) {
			pthread_mutex_unlock(&s->sync_lock);
			usleep(100);
			pthread_mutex_lock(&s->sync_lock);
		}
		uint64_t pos = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
		uint32_t dseq = __atomic_load_n(&s->dir_seq, __ATOMIC_ACQUIRE);
		bool dir = dseq != s->dir_synced_seq;
		uint32_t from = s->synced_seg;
		uint32_t to = pos ? (pos - 1) / s->segment_size : 0;
		if (pos > s->inflight_max)
			s->inflight_max = pos;
		pthread_mutex_unlock(&s->sync_lock);

		for (uint32_t seg = from; seg <= to && !r; seg++) {
			int fd;
			uint64_t off;
			r = blog_fd(s, (uint64_t)seg * s->segment_size, &fd,
				    &off);
			if (!r) {
				r = s->io->fdatasync(s->io_ctx, fd);
				STAT_INC(s, fsyncs);
			}
			if (r) {
				char path[4096];
				blog_seg_path(s->dir, seg, path, sizeof(path));
				blocker_degrade(s, -r, "fsync of %s failed: %s",
						path, strerror(-r));
			}
		}
		/* a new segment's directory entry must be durable too */
		if (!r && dir && fsync(s->dirfd) < 0) {
			r = -errno;
			blocker_degrade(s, -r, "fsync of directory failed: %s",
					strerror(-r));
		}

		pthread_mutex_lock(&s->sync_lock);
		s->inflight--;
		s->group = s->flushers;
		if (!r) {
			if (pos > s->synced)
				s->synced = pos;
			if (to > s->synced_seg)
				s->synced_seg = to;
			if ((int32_t)(dseq - s->dir_synced_seq) > 0)
				s->dir_synced_seq = dseq;
		} else {
			s->sync_err = -r;
		}
		pthread_cond_broadcast(&s->sync_cond);
		if (r)
			break;
	}
	s->flushers--;
	pthread_mutex_unlock(&s->sync_lock);
	return r;
}

void blog_close(struct blocker_store *s)
{
	for (uint32_t i = 0; i < s->nsegs; i++)
		if (s->segs[i].fd >= 0)
			close(s->segs[i].fd);
	free(s->segs);
	s->segs = NULL;
	s->nsegs = 0;
}
