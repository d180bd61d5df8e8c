/* SPDX-License-Identifier: MIT */
/* Helpers shared by the blocker tests. Their scratch store directories
 * are made with ttmp_mkdtemp (test_tmp.h): removed by the test runner
 * whatever the test's outcome. */
#ifndef TEST_BLOCKER_UTIL_H
#define TEST_BLOCKER_UTIL_H
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "store.h"
#include "test_tmp.h"

/* Messages from the store, kept so tests can assert what was reported. */
struct tb_log {
	char text[16384];
	size_t len;
	int lines;
};

/* the store logs from any of its callers' threads */
static pthread_mutex_t tb_log_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void tb_log_fn(void *arg, enum blocker_log_level lvl,
			     const char *msg)
{
	struct tb_log *l = arg;
	size_t n = strlen(msg);

	(void)lvl;
	pthread_mutex_lock(&tb_log_lock);
	if (l->len + n + 2 < sizeof(l->text)) {
		memcpy(l->text + l->len, msg, n);
		l->len += n;
		l->text[l->len++] = '\n';
		l->text[l->len] = 0;
	}
	l->lines++;
	pthread_mutex_unlock(&tb_log_lock);
}

/*
 * Options of a store the test drives by hand: the given chunk and segment
 * sizes, no background sync or checkpoint (only explicit flushes and
 * checkpoints happen), messages captured in *log.
 */
static inline void tb_opts_manual(struct blocker_opts *o, uint32_t chunk,
				  uint64_t segment, struct tb_log *log)
{
	blocker_opts_init(o);
	o->chunk_size = chunk;
	o->segment_size = segment;
	o->sync_interval_ms = 0;
	o->checkpoint_bytes = 0;
	o->log = tb_log_fn;
	o->log_arg = log;
}

/* blocker_check's report callback into a struct tb_log */
static inline void tb_log_fn_line(void *arg, const char *line)
{
	tb_log_fn(arg, BLOCKER_LOG_ERR, line);
}

/* xorshift64 */
static inline uint64_t tb_rnd(uint64_t *st)
{
	*st ^= *st << 13;
	*st ^= *st >> 7;
	*st ^= *st << 17;
	return *st;
}

/* deterministic bytes: content f(seed, position) */
static inline uint8_t tb_byte(uint64_t seed, uint64_t pos)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ULL ^
		     (pos / 8) * 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 31;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (pos % 8)));
}

static inline void tb_fill(uint8_t *buf, size_t len, uint64_t seed,
			   uint64_t pos)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = tb_byte(seed, pos + i);
}
/* Corrupt a store file in place: xor the byte at off of DIR/name with
 * mask. 0, or a negative errno (callers assert it). */
static inline int tb_xor_byte(const char *dir, const char *name, uint64_t off,
			      uint8_t mask)
{
	char p[512];
	uint8_t c;
	int fd, r = 0;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_RDWR);
	if (fd < 0)
		return -errno;
	if (pread(fd, &c, 1, (off_t)off) != 1)
		r = -EIO;
	c ^= mask;
	if (!r && pwrite(fd, &c, 1, (off_t)off) != 1)
		r = -EIO;
	close(fd);
	return r;
}

/* $AC_BIN_DIR if blockerctl was built there (ctest sets it), else NULL:
 * the tests that run blockerctl skip that part where it was not built. */
static inline const char *tb_ctl_dir(void)
{
	static char p[600];
	const char *bin = getenv("AC_BIN_DIR");

	if (!bin)
		return NULL;
	snprintf(p, sizeof(p), "%s/blockerctl", bin);
	return access(p, X_OK) == 0 ? bin : NULL;
}
#endif
