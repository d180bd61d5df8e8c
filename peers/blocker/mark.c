/* SPDX-License-Identifier: MIT */
/*
 * The durable mark: DIR/durable records "the log is durable up to
 * position P", written after each successful group-commit fsync. See
 * docs/on-disk-format.md ("durable").
 *
 * Why no fsync of the mark itself: the mark is written only after the
 * fsync that made P durable has returned, so whatever version of the
 * file a crash leaves on disk names a position that was durable before
 * it was written. A mark lost in a crash just leaves an older (smaller)
 * one, which only weakens recovery's check back to what it was before the
 * mark existed; it never makes it wrong.
 *
 * Two slots in different 512-byte sectors are written alternately, so a
 * torn sector write loses at most the newest mark, never both.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "store_int.h"

#define BMARK_MAGIC	0x4b524d44u /* "DMRK" little-endian */
#define BMARK_VERSION	1
#define BMARK_SLOT_SIZE 32
#define BMARK_SLOT_GAP	512
#define BMARK_FILE_SIZE (2 * BMARK_SLOT_GAP)

struct bmark {
	int fd;
	uint64_t seq; /* of the newest slot written or read */
	uint64_t pos; /* newest position written or read */
};

static void slot_encode(uint8_t *b, uint64_t seq, uint64_t pos)
{
	memset(b, 0, BMARK_SLOT_SIZE);
	put_le32(b, BMARK_MAGIC);
	put_le32(b + 4, BMARK_VERSION);
	put_le64(b + 8, seq);
	put_le64(b + 16, pos);
	put_le32(b + 28, blocker_crc32c(0, b, 28));
}

static bool slot_decode(const uint8_t *b, uint64_t *seq, uint64_t *pos)
{
	if (get_le32(b) != BMARK_MAGIC || get_le32(b + 4) != BMARK_VERSION ||
	    get_le32(b + 28) != blocker_crc32c(0, b, 28))
		return false;
	*seq = get_le64(b + 8);
	*pos = get_le64(b + 16);
	return true;
}

/* The newest valid slot of an open mark file: 0, -ENODATA if none. */
static int mark_read_fd(int fd, uint64_t *seq, uint64_t *pos)
{
	uint8_t b[BMARK_FILE_SIZE];
	ssize_t n = pread(fd, b, sizeof(b), 0);
	bool found = false;

	if (n < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		uint64_t sq, p;
		if ((size_t)n < (size_t)i * BMARK_SLOT_GAP + BMARK_SLOT_SIZE ||
		    !slot_decode(b + i * BMARK_SLOT_GAP, &sq, &p))
			continue;
		if (!found || sq > *seq) {
			*seq = sq;
			*pos = p;
		}
		found = true;
	}
	return found ? 0 : -ENODATA;
}

int bmark_read(int dirfd, uint64_t *pos)
{
	uint64_t seq;
	int fd = openat(dirfd, BLOCKER_MARK_FILE, O_RDONLY | O_CLOEXEC);
	int r;

	if (fd < 0)
		return -errno;
	r = mark_read_fd(fd, &seq, pos);
	close(fd);
	return r;
}

int bmark_create(int dirfd)
{
	/* both slots say "nothing is known to be durable" (0), so that
	 * later marks are plain overwrites of allocated blocks; written as
	 * a whole (tmp + fdatasync + rename + directory fsync), so that no
	 * cut leaves a name without its slots, which the checker would
	 * report as damage */
	uint8_t b[BMARK_FILE_SIZE] = {0};
	struct iovec iov = {b, sizeof(b)};

	slot_encode(b, 0, 0);
	slot_encode(b + BMARK_SLOT_GAP, 0, 0);
	return blocker_write_file_atomic(dirfd, BLOCKER_MARK_FILE, &iov, 1);
}

int bmark_open(struct blocker_store *s, uint64_t *pos)
{
	struct bmark *m;
	int r;

	*pos = 0;
	if (s->mark) { /* recovery's second pass */
		*pos = s->mark->pos;
		return 0;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	/* a missing file (a store made before blocker_create wrote the
	 * mark) is not created here: recovery may still refuse the store,
	 * and a refused open changes nothing (review23h F2); blocker_open
	 * creates it once the store is accepted (bmark_create_missing) */
	m->fd = openat(s->dirfd, BLOCKER_MARK_FILE, O_RDWR | O_CLOEXEC);
	if (m->fd < 0) {
		r = -errno;
		free(m);
		return r;
	}
	s->mark = m;
	r = mark_read_fd(m->fd, &m->seq, &m->pos);
	if (r)
		return r;
	*pos = m->pos;
	return 0;
}

int bmark_create_missing(struct blocker_store *s)
{
	struct bmark *m;
	int r;

	if (s->mark)
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	r = bmark_create(s->dirfd);
	if (!r) {
		m->fd = openat(s->dirfd, BLOCKER_MARK_FILE, O_RDWR | O_CLOEXEC);
		if (m->fd < 0)
			r = -errno;
	}
	if (r) {
		free(m);
		return r;
	}
	s->mark = m; /* both slots say 0, seq 0 */
	return 0;
}

void bmark_note(struct blocker_store *s, uint64_t pos)
{
	struct bmark *m = s->mark;
	uint8_t b[BMARK_SLOT_SIZE];

	if (!m || pos <= m->pos)
		return;
	m->seq++;
	m->pos = pos;
	slot_encode(b, m->seq, pos);
	/* a failure only leaves an older mark behind (see the top) */
	if (pwrite(m->fd, b, sizeof(b), (m->seq & 1) * BMARK_SLOT_GAP) < 0)
		return;
}

int bmark_reset(struct blocker_store *s, uint64_t pos)
{
	struct bmark *m = s->mark;
	uint8_t b[BMARK_FILE_SIZE];

	if (!m)
		return -EBADF;
	/* both slots, durably: an older, larger mark must not come back */
	m->seq++;
	m->pos = pos;
	memset(b, 0, sizeof(b));
	slot_encode(b, m->seq, pos);
	slot_encode(b + BMARK_SLOT_GAP, m->seq, pos);
	errno = 0;
	if (pwrite(m->fd, b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return errno ? -errno : -EIO;
	if (fsync(m->fd) < 0)
		return -errno;
	return 0;
}

void bmark_close(struct blocker_store *s)
{
	if (!s->mark)
		return;
	close(s->mark->fd);
	free(s->mark);
	s->mark = NULL;
}

/* ---- DIR/sync_error: a failed log fsync, remembered across opens ---- */

#define SYNCERR_MAGIC "blocker-sync-error 1"

void bsyncerr_record(struct blocker_store *s, int err, const char *what)
{
	int (*hook)(void *, int, uint64_t);
	char text[512];
	uint64_t durable;
	int n, r, r2;

	pthread_mutex_lock(&s->syncrec_lock);
	if (s->sync_recorded) { /* the first failure's record stands */
		pthread_mutex_unlock(&s->syncrec_lock);
		return;
	}
	s->sync_recorded = true;
	pthread_mutex_lock(&s->sync_lock);
	durable = s->synced;
	pthread_mutex_unlock(&s->sync_lock);
	n = snprintf(text, sizeof(text),
		     SYNCERR_MAGIC "\nerrno %d\nerror %s\ndurable %llu\n"
				   "time %lld\nwhat %s\n",
		     err, strerror(err), (unsigned long long)durable,
		     (long long)time(NULL), what);
	if (n < 0 || (size_t)n >= sizeof(text))
		n = (int)strlen(text); /* what was cut: still one record */
	struct iovec iov = {text, (size_t)n};
	hook = __atomic_load_n(&s->space_hook, __ATOMIC_ACQUIRE);
	r = hook ? hook(s->space_hook_arg, BLOCKER_SPACE_SYNC_ERROR, n) : 0;
	if (!r)
		r = blocker_write_file_atomic(s->dirfd, BLOCKER_SYNC_ERROR_FILE,
					      &iov, 1);
	if (!r) {
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s/%s: recorded (%s; durable up to "
			     "log position %llu): the store opens degraded "
			     "until 'blockerctl clear-sync-error %s'",
			     s->dir, BLOCKER_SYNC_ERROR_FILE, strerror(err),
			     (unsigned long long)durable, s->dir);
		goto out;
	}
	/*
	 * No room for the record (or the disk fails it too): an empty file
	 * needs no data block, and its presence alone is what open acts
	 * on. Created, then the directory fsynced: the name is the record.
	 */
	r2 = hook ? hook(s->space_hook_arg, BLOCKER_SPACE_SYNC_ERROR, 0) : 0;
	if (!r2) {
		int fd = openat(s->dirfd, BLOCKER_SYNC_ERROR_FILE,
				O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			r2 = -errno;
		else if (close(fd) < 0)
			r2 = -errno;
		if (!r2 && fsync(s->dirfd) < 0)
			r2 = -errno;
	}
	if (!r2) {
		blocker_logf(&s->o, BLOCKER_LOG_ERR,
			     "blocker: %s/%s: cannot write the record of the "
			     "failed fsync (%s); left it empty: the store "
			     "opens degraded until 'blockerctl "
			     "clear-sync-error %s'",
			     s->dir, BLOCKER_SYNC_ERROR_FILE, strerror(-r),
			     s->dir);
		goto out;
	}
	blocker_logf(&s->o, BLOCKER_LOG_ERR,
		     "blocker: %s/%s: CANNOT RECORD the failed fsync (%s; "
		     "empty file: %s): this process keeps failing writes, "
		     "FLUSH and FUA, but a restart would forget the failure "
		     "and acknowledge flushes of writes that never reached "
		     "the disk: do not restart the store before the disk is "
		     "checked; then create the file by hand or copy the "
		     "store",
		     s->dir, BLOCKER_SYNC_ERROR_FILE, strerror(-r),
		     strerror(-r2));
out:
	pthread_mutex_unlock(&s->syncrec_lock);
}

int bsyncerr_read(int dirfd, char *desc, size_t len)
{
	char text[600];
	int fd = openat(dirfd, BLOCKER_SYNC_ERROR_FILE, O_RDONLY | O_CLOEXEC);
	unsigned long long durable = 0;
	long long when = 0;
	int err = 0, got = 0;
	ssize_t n = 0;

	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd >= 0) {
		n = pread(fd, text, sizeof(text) - 1, 0);
		close(fd);
	}
	text[n > 0 ? n : 0] = 0;
	/* anything there is a record; its content only describes it */
	if (!strncmp(text, SYNCERR_MAGIC "\n", strlen(SYNCERR_MAGIC) + 1)) {
		for (char *l = text; l;) {
			got += sscanf(l, "errno %d", &err) == 1;
			got += sscanf(l, "durable %llu", &durable) == 1;
			got += sscanf(l, "time %lld", &when) == 1;
			l = strchr(l, '\n');
			l = l ? l + 1 : NULL;
		}
	}
	if (got == 3)
		snprintf(desc, len,
			 "a log fsync failed with errno %d (%s) at %lld (unix "
			 "time); durable up to log position %llu",
			 err, strerror(err), when, durable);
	else
		snprintf(desc, len,
			 "a log fsync failed (the record is empty or "
			 "unreadable: the store could not write it whole)");
	return 1;
}
