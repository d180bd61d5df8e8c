/* SPDX-License-Identifier: MIT */
/*
 * powerloss_fs: the durable-state model behind the power-loss tests; the
 * contract is in powerloss_fs.h, the method in docs/testing-powerloss.md.
 *
 * Each inode of the tracked tree has two shadow copies, the current
 * content (every wrapped write is copied into it, so that a cut can use
 * it even after the file was unlinked) and the durable content, and the
 * list of byte ranges written since its last sync; a sync copies just
 * those ranges from the one to the other. A third copy keeps, per sector
 * changed since the last sync, the content it had before its last change
 * (review6 F12: the page cache may write back any version, not only the
 * synced and the current one; one step back covers an undo, e.g. a
 * failed append zeroed again, whose zeros a cut may not have reached).
 * Directories keep their current and durable entry lists and the entry
 * operations since their last sync. Model inodes live until pl_fs_stop(): a
 * durable entry may still name an inode whose file is long gone, and the real
 * inode number may meanwhile be reused, so lookups by (dev, ino) only match
 * inodes that are alive (linked in the current tree or open).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include "powerloss_fs.h"

#define PL_SECTOR   512
#define PL_NAME_MAX 256
#define PL_DEPTH    16

/* the real functions behind the wrappers (ld --wrap) */
int __real_open(const char *path, int flags, ...);
int __real_openat(int dirfd, const char *path, int flags, ...);
int __real_creat(const char *path, mode_t mode);
int __real_close(int fd);
int __real_dup(int fd);
ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __real_writev(int fd, const struct iovec *iov, int cnt);
ssize_t __real_pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t __real_pwritev(int fd, const struct iovec *iov, int cnt, off_t off);
int __real_ftruncate(int fd, off_t len);
int __real_truncate(const char *path, off_t len);
int __real_fallocate(int fd, int mode, off_t off, off_t len);
int __real_fsync(int fd);
int __real_fdatasync(int fd);
int __real_sync_file_range(int fd, off_t off, off_t n, unsigned int flags);
int __real_rename(const char *from, const char *to);
int __real_renameat(int fromfd, const char *from, int tofd, const char *to);
int __real_renameat2(int fromfd, const char *from, int tofd, const char *to,
		     unsigned int flags);
int __real_unlink(const char *path);
int __real_unlinkat(int dirfd, const char *path, int flags);
int __real_mkdir(const char *path, mode_t mode);
int __real_mkdirat(int dirfd, const char *path, mode_t mode);
int __real_rmdir(const char *path);
int __real_link(const char *from, const char *to);
int __real_linkat(int fromfd, const char *from, int tofd, const char *to,
		  int flags);
int __real_symlink(const char *target, const char *path);
int __real_symlinkat(const char *target, int dirfd, const char *path);

struct pl_inode;

struct pl_dent {
	char name[PL_NAME_MAX];
	struct pl_inode *ino;
};

struct pl_dents {
	struct pl_dent *v;
	size_t n, cap;
};

enum pl_dop_kind { DOP_ADD, DOP_DEL, DOP_RENAME };

/* one directory entry operation since the directory's last sync */
struct pl_dop {
	enum pl_dop_kind kind;
	char name[PL_NAME_MAX];
	char to[PL_NAME_MAX]; /* DOP_RENAME */
	struct pl_inode *ino;
};

struct pl_range {
	uint64_t off, end;
};

struct pl_buf {
	uint8_t *p;
	uint64_t size, cap;
};

struct pl_inode {
	dev_t dev;
	ino_t ino;
	bool dir;
	int links; /* current entries naming it (the root: 1) */
	int fds;   /* open fds in the fd table */
	/* files */
	struct pl_buf cur, dur;
	/* prev: each sector's content before its last change since the
	 * last sync, where has_prev[sector] (sectors of prev.size) */
	struct pl_buf prev;
	uint8_t *has_prev;
	uint64_t has_prev_cap;
	struct pl_range *dirty; /* written since the last sync */
	size_t ndirty, capdirty;
	/* directories */
	struct pl_dents cur_ents, dur_ents;
	struct pl_dop *ops;
	size_t nops, capops;
};

static struct {
	pthread_mutex_t lock;
	int active; /* __atomic; changed under lock */
	struct pl_inode *root;
	struct pl_inode **all; /* every model inode, oldest first */
	size_t nall, capall;
	struct pl_inode **fdtab; /* fd -> inode (NULL: untracked) */
	size_t nfd;
	pl_fs_hook_fn hook;
	void *hook_arg;
	bool ignore_file_sync, ignore_dir_sync;
	char ignore_prefix[PL_NAME_MAX];
	struct pl_fs_stats st;
} pl = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* > 0: this thread's wrapped calls pass straight through */
static __thread int pl_pass;

/* a test harness out of memory cannot model anything */
static void oom(void)
{
	fprintf(stderr, "powerloss_fs: out of memory\n");
	abort();
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (!q)
		oom();
	return q;
}

/* ---- entering the model ---- */

static bool pl_enter(void)
{
	if (pl_pass || !__atomic_load_n(&pl.active, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&pl.lock);
	if (!pl.active) {
		pthread_mutex_unlock(&pl.lock);
		return false;
	}
	pl_pass++; /* our own syscalls, and the hook's, pass through */
	return true;
}

static void pl_leave(void)
{
	pl_pass--;
	pthread_mutex_unlock(&pl.lock);
}

static void pl_call(const char *name)
{
	pl.st.calls++;
	if (pl.hook)
		pl.hook(pl.hook_arg, pl.st.calls, name);
}

/* ---- buffers, ranges, entries ---- */

static void buf_resize(struct pl_buf *b, uint64_t size)
{
	if (size > b->cap) {
		uint64_t cap = b->cap ? b->cap : 4096;
		while (cap < size)
			cap *= 2;
		b->p = xrealloc(b->p, cap);
		b->cap = cap;
	}
	if (size > b->size)
		memset(b->p + b->size, 0, size - b->size);
	b->size = size;
}

static void dirty_add(struct pl_inode *n, uint64_t off, uint64_t end)
{
	struct pl_range *last = n->ndirty ? &n->dirty[n->ndirty - 1] : NULL;

	if (off >= end)
		return;
	/* appends and rewrites of the last range merge in place */
	if (last && off <= last->end && end >= last->off) {
		if (off < last->off)
			last->off = off;
		if (end > last->end)
			last->end = end;
		return;
	}
	if (n->ndirty == n->capdirty) {
		n->capdirty = n->capdirty ? 2 * n->capdirty : 16;
		n->dirty = xrealloc(n->dirty, n->capdirty * sizeof(*n->dirty));
	}
	n->dirty[n->ndirty++] = (struct pl_range){off, end};
}

static struct pl_dent *dents_find(struct pl_dents *d, const char *name)
{
	for (size_t i = 0; i < d->n; i++)
		if (!strcmp(d->v[i].name, name))
			return &d->v[i];
	return NULL;
}

static struct pl_inode *dents_get(struct pl_dents *d, const char *name)
{
	struct pl_dent *e = dents_find(d, name);

	return e ? e->ino : NULL;
}

static void dents_set(struct pl_dents *d, const char *name, struct pl_inode *n)
{
	struct pl_dent *e = dents_find(d, name);

	if (!e) {
		if (d->n == d->cap) {
			d->cap = d->cap ? 2 * d->cap : 16;
			d->v = xrealloc(d->v, d->cap * sizeof(*d->v));
		}
		e = &d->v[d->n++];
		snprintf(e->name, sizeof(e->name), "%s", name);
	}
	e->ino = n;
}

static void dents_del(struct pl_dents *d, const char *name)
{
	struct pl_dent *e = dents_find(d, name);

	if (e)
		*e = d->v[--d->n];
}

static void dents_copy(struct pl_dents *to, const struct pl_dents *from)
{
	if (to->cap < from->n) {
		to->cap = from->n;
		to->v = xrealloc(to->v, to->cap * sizeof(*to->v));
	}
	if (from->n)
		memcpy(to->v, from->v, from->n * sizeof(*from->v));
	to->n = from->n;
}

static struct pl_inode *inode_new(dev_t dev, ino_t ino, bool dir)
{
	struct pl_inode *n = calloc(1, sizeof(*n));

	if (!n)
		oom();
	n->dev = dev;
	n->ino = ino;
	n->dir = dir;
	if (pl.nall == pl.capall) {
		pl.capall = pl.capall ? 2 * pl.capall : 64;
		pl.all = xrealloc(pl.all, pl.capall * sizeof(*pl.all));
	}
	pl.all[pl.nall++] = n;
	pl.st.inodes++;
	return n;
}

static void inode_free(struct pl_inode *n)
{
	free(n->cur.p);
	free(n->dur.p);
	free(n->prev.p);
	free(n->has_prev);
	free(n->dirty);
	free(n->cur_ents.v);
	free(n->dur_ents.v);
	free(n->ops);
	free(n);
}

/* the alive model inode of a real inode, newest first */
static struct pl_inode *find_live(dev_t dev, ino_t ino)
{
	for (size_t i = pl.nall; i-- > 0;) {
		struct pl_inode *n = pl.all[i];
		if (n->dev == dev && n->ino == ino && (n->links || n->fds))
			return n;
	}
	return NULL;
}

/* ---- the fd table ---- */

static void fdtab_set(int fd, struct pl_inode *n)
{
	if (fd < 0)
		return;
	if ((size_t)fd >= pl.nfd) {
		size_t nfd = pl.nfd ? pl.nfd : 256;
		if (!n)
			return;
		while (nfd <= (size_t)fd)
			nfd *= 2;
		pl.fdtab = xrealloc(pl.fdtab, nfd * sizeof(*pl.fdtab));
		memset(pl.fdtab + pl.nfd, 0,
		       (nfd - pl.nfd) * sizeof(*pl.fdtab));
		pl.nfd = nfd;
	}
	if (pl.fdtab[fd])
		pl.fdtab[fd]->fds--;
	pl.fdtab[fd] = n;
	if (n)
		n->fds++;
}

/*
 * The model inode behind fd, or NULL. An fd closed by libc internally
 * (closedir of a dup) never passed the close wrapper: its number may name
 * another file now, which fstat tells.
 */
static struct pl_inode *fd_inode(int fd)
{
	struct pl_inode *n;
	struct stat st;

	if (fd < 0 || (size_t)fd >= pl.nfd || !(n = pl.fdtab[fd]))
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_dev != n->dev || st.st_ino != n->ino) {
		fdtab_set(fd, NULL);
		pl.st.stale_fds++;
		return NULL;
	}
	return n;
}

/*
 * The tracked directory that holds path (relative to dirfd) and the
 * entry's name in it, or NULL if the path is outside the tracked tree.
 */
static struct pl_inode *parent_of(int dirfd, const char *path,
				  char base[PL_NAME_MAX])
{
	const char *slash = strrchr(path, '/'), *name = path;
	struct pl_inode *d = NULL;
	struct stat st;

	if (slash) {
		char dirpart[PATH_MAX];
		size_t len = slash == path ? 1 : (size_t)(slash - path);
		if (len >= sizeof(dirpart))
			return NULL;
		memcpy(dirpart, path, len);
		dirpart[len] = 0;
		if (fstatat(dirfd, dirpart, &st, 0) < 0)
			return NULL;
		d = find_live(st.st_dev, st.st_ino);
		name = slash + 1;
	} else if (dirfd == AT_FDCWD) {
		if (stat(".", &st) < 0)
			return NULL;
		d = find_live(st.st_dev, st.st_ino);
	} else {
		d = fd_inode(dirfd);
	}
	if (!d || !d->dir || !*name || strlen(name) >= PL_NAME_MAX)
		return NULL;
	snprintf(base, PL_NAME_MAX, "%s", name);
	return d;
}

/* ---- directory operations (current state + op log) ---- */

static void dop_push(struct pl_inode *d, enum pl_dop_kind kind,
		     const char *name, const char *to, struct pl_inode *n)
{
	struct pl_dop *op;

	if (d->nops == d->capops) {
		d->capops = d->capops ? 2 * d->capops : 16;
		d->ops = xrealloc(d->ops, d->capops * sizeof(*d->ops));
	}
	op = &d->ops[d->nops++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	snprintf(op->name, sizeof(op->name), "%s", name);
	if (to)
		snprintf(op->to, sizeof(op->to), "%s", to);
	op->ino = n;
}

static void dir_add(struct pl_inode *d, const char *name, struct pl_inode *n)
{
	struct pl_inode *old = dents_get(&d->cur_ents, name);

	if (old == n)
		return;
	if (old)
		old->links--;
	dents_set(&d->cur_ents, name, n);
	n->links++;
	dop_push(d, DOP_ADD, name, NULL, n);
}

static void dir_del(struct pl_inode *d, const char *name)
{
	struct pl_inode *n = dents_get(&d->cur_ents, name);

	if (!n)
		return;
	dents_del(&d->cur_ents, name);
	n->links--;
	dop_push(d, DOP_DEL, name, NULL, n);
}

static void dir_rename(struct pl_inode *d, const char *from, const char *to)
{
	struct pl_inode *n = dents_get(&d->cur_ents, from), *old;

	if (!n || !strcmp(from, to))
		return;
	old = dents_get(&d->cur_ents, to);
	if (old == n) /* two links to one inode: POSIX says no-op */
		return;
	if (old)
		old->links--;
	dents_set(&d->cur_ents, to, n);
	dents_del(&d->cur_ents, from);
	dop_push(d, DOP_RENAME, from, to, n);
}

static void dops_apply(struct pl_dents *e, const struct pl_dop *op)
{
	switch (op->kind) {
	case DOP_ADD:
		dents_set(e, op->name, op->ino);
		break;
	case DOP_DEL:
		dents_del(e, op->name);
		break;
	case DOP_RENAME:
		dents_set(e, op->to, op->ino);
		dents_del(e, op->name);
		break;
	}
}

/* ---- file operations ---- */

/*
 * Bytes [off, end) are about to change: every sector they touch keeps its
 * whole current content (zeros past the current size) as its previous
 * version, replacing an older one.
 */
static void save_prev(struct pl_inode *n, uint64_t off, uint64_t end)
{
	uint64_t first = off / PL_SECTOR, last = (end - 1) / PL_SECTOR;

	if (off >= end)
		return;
	if ((last + 1) * PL_SECTOR > n->prev.size)
		buf_resize(&n->prev, (last + 1) * PL_SECTOR);
	if (last + 1 > n->has_prev_cap) {
		uint64_t cap = n->has_prev_cap ? n->has_prev_cap : 64;
		while (cap < last + 1)
			cap *= 2;
		n->has_prev = xrealloc(n->has_prev, cap);
		memset(n->has_prev + n->has_prev_cap, 0, cap - n->has_prev_cap);
		n->has_prev_cap = cap;
	}
	for (uint64_t s = first; s <= last; s++) {
		uint64_t a = s * PL_SECTOR, b = a + PL_SECTOR;
		uint64_t have = n->cur.size < a	  ? 0
				: n->cur.size > b ? PL_SECTOR
						  : n->cur.size - a;
		if (have)
			memcpy(n->prev.p + a, n->cur.p + a, have);
		memset(n->prev.p + a + have, 0, PL_SECTOR - have);
		n->has_prev[s] = 1;
	}
}

static void file_write(struct pl_inode *n, uint64_t off, const void *buf,
		       uint64_t len)
{
	save_prev(n, off, off + len);
	if (off + len > n->cur.size)
		buf_resize(&n->cur, off + len);
	memcpy(n->cur.p + off, buf, len);
	dirty_add(n, off, off + len);
}

static void file_writev(struct pl_inode *n, uint64_t off,
			const struct iovec *iov, int cnt, uint64_t done)
{
	for (int i = 0; i < cnt && done; i++) {
		uint64_t k = iov[i].iov_len < done ? iov[i].iov_len : done;
		file_write(n, off, iov[i].iov_base, k);
		off += k;
		done -= k;
	}
}

static void file_truncate(struct pl_inode *n, uint64_t len)
{
	uint64_t old = n->cur.size;

	/* the bytes between the two sizes change (to zeros or to nothing) */
	save_prev(n, len < old ? len : old, len < old ? old : len);
	dirty_add(n, len < old ? len : old, len < old ? old : len);
	if (len < old)
		n->cur.size = len;
	else
		buf_resize(&n->cur, len);
}

static void file_sync(struct pl_inode *n)
{
	uint64_t size = n->cur.size;

	if (size > n->dur.size)
		buf_resize(&n->dur, size);
	for (size_t i = 0; i < n->ndirty; i++) {
		uint64_t off = n->dirty[i].off, end = n->dirty[i].end;
		if (end > size)
			end = size;
		if (off < end)
			memcpy(n->dur.p + off, n->cur.p + off, end - off);
	}
	n->dur.size = size;
	n->ndirty = 0;
	/* a synced sector's earlier versions can no longer come back */
	if (n->has_prev)
		memset(n->has_prev, 0, n->has_prev_cap);
	pl.st.file_syncs++;
}

static void dir_sync(struct pl_inode *d)
{
	dents_copy(&d->dur_ents, &d->cur_ents);
	d->nops = 0;
	pl.st.dir_syncs++;
}

/* read a whole existing file into both shadows (it counts as durable) */
static int adopt_content(struct pl_inode *n, int fd)
{
	struct stat st;
	uint64_t done = 0;

	if (fstat(fd, &st) < 0)
		return -errno;
	buf_resize(&n->cur, st.st_size);
	while (done < (uint64_t)st.st_size) {
		ssize_t r = pread(fd, n->cur.p + done, st.st_size - done, done);
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += r;
	}
	buf_resize(&n->dur, n->cur.size);
	if (n->cur.size)
		memcpy(n->dur.p, n->cur.p, n->cur.size);
	return 0;
}

/* a file found in the tree that did not come in through the wrappers */
static void adopt(struct pl_inode *n, int fd)
{
	char path[64];
	int rfd;

	pl.st.adopted++;
	if (n->dir)
		return;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rfd = __real_open(path, O_RDONLY | O_CLOEXEC);
	if (rfd < 0)
		return;
	adopt_content(n, rfd);
	__real_close(rfd);
}

static int scan_tree(struct pl_inode *d, int dfd, int depth)
{
	DIR *dir;
	struct dirent *de;
	int r = 0, fd = __real_dup(dfd);

	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		__real_close(fd);
		return -errno;
	}
	while (!r && (de = readdir(dir))) {
		struct stat st;
		struct pl_inode *n;
		int cfd;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
			continue;
		n = inode_new(st.st_dev, st.st_ino, S_ISDIR(st.st_mode));
		dents_set(&d->cur_ents, de->d_name, n);
		n->links++;
		cfd = __real_openat(dfd, de->d_name,
				    O_RDONLY | O_CLOEXEC |
					(n->dir ? O_DIRECTORY : 0));
		if (cfd < 0) {
			r = -errno;
			break;
		}
		if (n->dir)
			r = depth < PL_DEPTH ? scan_tree(n, cfd, depth + 1)
					     : -ELOOP;
		else
			r = adopt_content(n, cfd);
		__real_close(cfd);
	}
	closedir(dir);
	dents_copy(&d->dur_ents, &d->cur_ents);
	return r;
}

/* ---- start, stop, cut ---- */

static void model_free(void)
{
	for (size_t i = 0; i < pl.nall; i++)
		inode_free(pl.all[i]);
	free(pl.all);
	free(pl.fdtab);
	pl.all = NULL;
	pl.fdtab = NULL;
	pl.nall = pl.capall = pl.nfd = 0;
	pl.root = NULL;
}

int pl_fs_start(const char *root)
{
	struct stat st;
	int fd, r;

	pthread_mutex_lock(&pl.lock);
	pl_pass++;
	__atomic_store_n(&pl.active, 0, __ATOMIC_RELEASE);
	model_free();
	memset(&pl.st, 0, sizeof(pl.st));
	fd = __real_open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		__real_close(fd);
		goto out;
	}
	pl.root = inode_new(st.st_dev, st.st_ino, true);
	pl.root->links = 1; /* taken as durable and never unlinked */
	r = scan_tree(pl.root, fd, 0);
	__real_close(fd);
	pl.st.adopted = 0; /* files present at the start are expected */
	if (!r)
		__atomic_store_n(&pl.active, 1, __ATOMIC_RELEASE);
	else
		model_free();
out:
	pl_pass--;
	pthread_mutex_unlock(&pl.lock);
	return r;
}

void pl_fs_stop(void)
{
	pthread_mutex_lock(&pl.lock);
	__atomic_store_n(&pl.active, 0, __ATOMIC_RELEASE);
	model_free();
	pl.hook = NULL;
	pl.ignore_file_sync = pl.ignore_dir_sync = false;
	pthread_mutex_unlock(&pl.lock);
}

void pl_fs_set_hook(pl_fs_hook_fn fn, void *arg)
{
	pthread_mutex_lock(&pl.lock);
	pl.hook = fn;
	pl.hook_arg = arg;
	pthread_mutex_unlock(&pl.lock);
}

int pl_fs_call_hook(const char *call)
{
	int r = -ENOENT;

	pthread_mutex_lock(&pl.lock);
	pl_pass++;
	if (pl.active && pl.hook) {
		pl.hook(pl.hook_arg, 0, call);
		r = 0;
	}
	pl_pass--;
	pthread_mutex_unlock(&pl.lock);
	return r;
}

void pl_fs_bypass(bool on)
{
	pl_pass += on ? 1 : -1;
}

void pl_fs_ignore_syncs(const char *file_prefix, bool dir_syncs)
{
	pthread_mutex_lock(&pl.lock);
	pl.ignore_file_sync = file_prefix != NULL;
	snprintf(pl.ignore_prefix, sizeof(pl.ignore_prefix), "%s",
		 file_prefix ? file_prefix : "");
	pl.ignore_dir_sync = dir_syncs;
	pthread_mutex_unlock(&pl.lock);
}

void pl_fs_get_stats(struct pl_fs_stats *st)
{
	pthread_mutex_lock(&pl.lock);
	*st = pl.st;
	pthread_mutex_unlock(&pl.lock);
}

static bool all_zero(const uint8_t *p, size_t len)
{
	return !len || (!p[0] && !memcmp(p, p + 1, len - 1));
}

/*
 * Write an image file sparsely: zero blocks stay holes, which keeps the
 * cuts of a store with a large preallocated file (DIR/reserve) cheap.
 */
static int write_image_file(int fd, const uint8_t *p, uint64_t len)
{
	const uint64_t blk = 4096;

	if (__real_ftruncate(fd, len) < 0)
		return -errno;
	for (uint64_t off = 0; off < len;) {
		uint64_t k = len - off < blk ? len - off : blk;
		if (all_zero(p + off, k)) {
			off += k;
			continue;
		}
		ssize_t w = __real_pwrite(fd, p + off, k, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		off += w;
	}
	return 0;
}

/* The content a file has in the image; *out is malloc'd. */
static uint64_t image_content(struct pl_inode *n, enum pl_cut_mode mode,
			      uint64_t *rng, uint8_t **out)
{
	uint64_t size = n->dur.size;
	uint8_t *b;

	if (mode == PL_CUT_RANDOM && n->cur.size != n->dur.size &&
	    (pl_rand(rng) & 1))
		size = n->cur.size;
	b = calloc(1, size ? size : 1);
	if (!b)
		oom();
	if (n->dur.size)
		memcpy(b, n->dur.p, size < n->dur.size ? size : n->dur.size);
	if (mode == PL_CUT_RANDOM) {
		/* each written sector: its synced or its current content */
		for (size_t i = 0; i < n->ndirty; i++) {
			uint64_t off = n->dirty[i].off, end = n->dirty[i].end;
			while (off < end && off < size) {
				uint64_t s_end =
				    (off / PL_SECTOR + 1) * PL_SECTOR;
				uint64_t e = s_end < end ? s_end : end;
				if (e > size)
					e = size;
				/* past the current size (a truncation) the
				 * old bytes stay: no file system zeroes
				 * them without committing the new size */
				uint64_t s = off / PL_SECTOR;
				bool prev =
				    s < n->has_prev_cap && n->has_prev[s];
				uint64_t v = pl_rand(rng) % (prev ? 3 : 2);
				if (v == 1) {
					for (uint64_t o = off; o < e; o++)
						if (o < n->cur.size)
							b[o] = n->cur.p[o];
				} else if (v == 2) {
					/* the version before the last
					 * change (its other bytes, if
					 * changed too, are another piece
					 * of the dirty list) */
					memcpy(b + off, n->prev.p + off,
					       e - off);
					pl.st.prev_sectors++;
				}
				off = e;
			}
		}
	}
	*out = b;
	return size;
}

static int put_tree(struct pl_inode *d, int dstfd, enum pl_cut_mode mode,
		    uint64_t *rng, int depth)
{
	struct pl_dents ents = {0};
	int r = 0;

	if (depth > PL_DEPTH)
		return -ELOOP;
	dents_copy(&ents, &d->dur_ents);
	if (mode == PL_CUT_RANDOM && d->nops) {
		/* a journaling file system commits entry operations in order */
		size_t k = pl_rand(rng) % (d->nops + 1);
		for (size_t i = 0; i < k; i++)
			dops_apply(&ents, &d->ops[i]);
	}
	for (size_t i = 0; i < ents.n && !r; i++) {
		struct pl_inode *n = ents.v[i].ino;
		const char *name = ents.v[i].name;
		int fd;

		if (n->dir) {
			if (__real_mkdirat(dstfd, name, 0755) < 0) {
				r = -errno;
				break;
			}
			fd = __real_openat(dstfd, name,
					   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0) {
				r = -errno;
				break;
			}
			r = put_tree(n, fd, mode, rng, depth + 1);
		} else {
			uint8_t *b;
			uint64_t size = image_content(n, mode, rng, &b);
			fd = __real_openat(
			    dstfd, name,
			    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			if (fd < 0) {
				r = -errno;
				free(b);
				break;
			}
			r = write_image_file(fd, b, size);
			free(b);
		}
		__real_close(fd);
	}
	free(ents.v);
	return r;
}

int pl_fs_cut_locked(const char *dst, enum pl_cut_mode mode, uint64_t *rng)
{
	int fd, r;

	if (!pl.root)
		return -ENOENT;
	if (__real_mkdir(dst, 0755) < 0)
		return -errno;
	fd = __real_open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = put_tree(pl.root, fd, mode, rng, 0);
	__real_close(fd);
	if (!r)
		pl.st.cuts++;
	return r;
}

int pl_fs_cut(const char *dst, enum pl_cut_mode mode, uint64_t *rng)
{
	int r;

	pthread_mutex_lock(&pl.lock);
	pl_pass++;
	r = pl_fs_cut_locked(dst, mode, rng);
	pl_pass--;
	pthread_mutex_unlock(&pl.lock);
	return r;
}

/* ---- the wrappers ---- */

static int do_open(int dirfd, const char *path, int flags, mode_t mode, bool at)
{
	char base[PL_NAME_MAX];
	struct pl_inode *d, *n;
	bool existed;
	struct stat st;
	int fd, e;

	if (!pl_enter())
		return at ? __real_openat(dirfd, path, flags, mode)
			  : __real_open(path, flags, mode);
	d = parent_of(dirfd, path, base);
	if (d && (flags & O_TMPFILE) == O_TMPFILE) {
		/* an unnamed file in directory path (linkat names it) */
		pl.st.unmodeled++;
		d = NULL;
	}
	existed = d && dents_get(&d->cur_ents, base);
	if (d && (flags & (O_CREAT | O_TRUNC)))
		pl_call(at ? "openat" : "open");
	fd = at ? __real_openat(dirfd, path, flags, mode)
		: __real_open(path, flags, mode);
	e = errno;
	if (fd >= 0) {
		n = NULL;
		if (fstat(fd, &st) == 0) {
			n = find_live(st.st_dev, st.st_ino);
			if (!n && d) {
				n = inode_new(st.st_dev, st.st_ino,
					      S_ISDIR(st.st_mode));
				/* a file that existed without the model
				 * knowing it: take it as it is */
				if (existed || !(flags & O_CREAT))
					adopt(n, fd);
			}
		}
		if (n && d && dents_get(&d->cur_ents, base) != n)
			dir_add(d, base, n);
		if (n && !n->dir && (flags & O_TRUNC) && n->cur.size)
			file_truncate(n, 0);
		fdtab_set(fd, n);
	}
	pl_leave();
	errno = e;
	return fd;
}

int __wrap_open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, int);
		va_end(ap);
	}
	return do_open(AT_FDCWD, path, flags, mode, false);
}

int __wrap_openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;

	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, int);
		va_end(ap);
	}
	return do_open(dirfd, path, flags, mode, true);
}

int __wrap_creat(const char *path, mode_t mode)
{
	return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode,
		       false);
}

int __wrap_close(int fd)
{
	int r, e;

	if (!pl_enter())
		return __real_close(fd);
	r = __real_close(fd);
	e = errno;
	fdtab_set(fd, NULL);
	pl_leave();
	errno = e;
	return r;
}

int __wrap_dup(int fd)
{
	struct pl_inode *n;
	int r, e;

	if (!pl_enter())
		return __real_dup(fd);
	n = fd_inode(fd);
	r = __real_dup(fd);
	e = errno;
	if (r >= 0)
		fdtab_set(r, n);
	pl_leave();
	errno = e;
	return r;
}

/* the offset a write() at the file position will land at */
static int64_t write_pos(int fd, struct pl_inode *n)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_APPEND))
		return n->cur.size;
	return lseek(fd, 0, SEEK_CUR);
}

ssize_t __wrap_write(int fd, const void *buf, size_t len)
{
	struct pl_inode *n;
	int64_t off;
	ssize_t r;
	int e;

	if (!pl_enter())
		return __real_write(fd, buf, len);
	n = fd_inode(fd);
	if (n && !n->dir) {
		pl_call("write");
		off = write_pos(fd, n);
		r = __real_write(fd, buf, len);
		e = errno;
		if (r > 0 && off >= 0)
			file_write(n, off, buf, r);
	} else {
		r = __real_write(fd, buf, len);
		e = errno;
	}
	pl_leave();
	errno = e;
	return r;
}

ssize_t __wrap_writev(int fd, const struct iovec *iov, int cnt)
{
	struct pl_inode *n;
	int64_t off;
	ssize_t r;
	int e;

	if (!pl_enter())
		return __real_writev(fd, iov, cnt);
	n = fd_inode(fd);
	if (n && !n->dir) {
		pl_call("writev");
		off = write_pos(fd, n);
		r = __real_writev(fd, iov, cnt);
		e = errno;
		if (r > 0 && off >= 0)
			file_writev(n, off, iov, cnt, r);
	} else {
		r = __real_writev(fd, iov, cnt);
		e = errno;
	}
	pl_leave();
	errno = e;
	return r;
}

ssize_t __wrap_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	struct pl_inode *n;
	ssize_t r;
	int e;

	if (!pl_enter())
		return __real_pwrite(fd, buf, len, off);
	n = fd_inode(fd);
	if (n && !n->dir)
		pl_call("pwrite");
	r = __real_pwrite(fd, buf, len, off);
	e = errno;
	if (n && !n->dir && r > 0)
		file_write(n, off, buf, r);
	pl_leave();
	errno = e;
	return r;
}

ssize_t __wrap_pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	struct pl_inode *n;
	ssize_t r;
	int e;

	if (!pl_enter())
		return __real_pwritev(fd, iov, cnt, off);
	n = fd_inode(fd);
	if (n && !n->dir)
		pl_call("pwritev");
	r = __real_pwritev(fd, iov, cnt, off);
	e = errno;
	if (n && !n->dir && r > 0)
		file_writev(n, off, iov, cnt, r);
	pl_leave();
	errno = e;
	return r;
}

int __wrap_ftruncate(int fd, off_t len)
{
	struct pl_inode *n;
	int r, e;

	if (!pl_enter())
		return __real_ftruncate(fd, len);
	n = fd_inode(fd);
	if (n && !n->dir)
		pl_call("ftruncate");
	r = __real_ftruncate(fd, len);
	e = errno;
	if (n && !n->dir && r == 0)
		file_truncate(n, len);
	pl_leave();
	errno = e;
	return r;
}

int __wrap_truncate(const char *path, off_t len)
{
	char base[PL_NAME_MAX];
	struct pl_inode *d, *n = NULL;
	int r, e;

	if (!pl_enter())
		return __real_truncate(path, len);
	d = parent_of(AT_FDCWD, path, base);
	if (d)
		n = dents_get(&d->cur_ents, base);
	if (n && !n->dir)
		pl_call("truncate");
	r = __real_truncate(path, len);
	e = errno;
	if (n && !n->dir && r == 0)
		file_truncate(n, len);
	pl_leave();
	errno = e;
	return r;
}

int __wrap_fallocate(int fd, int mode, off_t off, off_t len)
{
	struct pl_inode *n;
	int r, e;

	if (!pl_enter())
		return __real_fallocate(fd, mode, off, len);
	n = fd_inode(fd);
	if (n && !n->dir)
		pl_call("fallocate");
	r = __real_fallocate(fd, mode, off, len);
	e = errno;
	if (n && !n->dir && r == 0) {
		/* plain allocation only grows the file (with zeros) */
		if (mode == 0) {
			if ((uint64_t)(off + len) > n->cur.size)
				file_truncate(n, off + len);
		} else {
			pl.st.unmodeled++;
		}
	}
	pl_leave();
	errno = e;
	return r;
}

/* should a sync of file n be forgotten (pl_fs_ignore_syncs)? */
static bool sync_ignored(struct pl_inode *n)
{
	size_t len = strlen(pl.ignore_prefix);

	if (!pl.ignore_file_sync)
		return false;
	for (size_t i = 0; i < pl.nall; i++) {
		struct pl_inode *d = pl.all[i];
		if (!d->dir || !(d->links || d->fds))
			continue;
		for (size_t k = 0; k < d->cur_ents.n; k++)
			if (d->cur_ents.v[k].ino == n &&
			    !strncmp(d->cur_ents.v[k].name, pl.ignore_prefix,
				     len))
				return true;
	}
	return false;
}

static int do_sync(int fd, bool data_only)
{
	struct pl_inode *n;
	int r, e;

	if (!pl_enter())
		return data_only ? __real_fdatasync(fd) : __real_fsync(fd);
	n = fd_inode(fd);
	if (n)
		pl_call(data_only ? "fdatasync" : "fsync");
	r = data_only ? __real_fdatasync(fd) : __real_fsync(fd);
	e = errno;
	if (n && r == 0) {
		if (n->dir && !pl.ignore_dir_sync)
			dir_sync(n);
		else if (!n->dir && !sync_ignored(n))
			file_sync(n);
	}
	pl_leave();
	errno = e;
	return r;
}

int __wrap_fsync(int fd)
{
	return do_sync(fd, false);
}

int __wrap_fdatasync(int fd)
{
	return do_sync(fd, true);
}

int __wrap_sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
	/* no durability guarantee: nothing to record, but say it was used */
	if (pl_enter()) {
		if (fd_inode(fd))
			pl.st.unmodeled++;
		pl_leave();
	}
	return __real_sync_file_range(fd, off, n, flags);
}

static int do_rename(int fromfd, const char *from, int tofd, const char *to,
		     unsigned int flags, int kind)
{
	char fb[PL_NAME_MAX], tb[PL_NAME_MAX];
	struct pl_inode *fd_dir, *td_dir, *n = NULL;
	int r, e;

#define REAL_RENAME()                                                          \
	(kind == 0   ? __real_rename(from, to)                                 \
	 : kind == 1 ? __real_renameat(fromfd, from, tofd, to)                 \
		     : __real_renameat2(fromfd, from, tofd, to, flags))
	if (!pl_enter())
		return REAL_RENAME();
	fd_dir = parent_of(fromfd, from, fb);
	td_dir = parent_of(tofd, to, tb);
	if (fd_dir || td_dir)
		pl_call(kind == 0 ? "rename" : "renameat");
	r = REAL_RENAME();
	e = errno;
	if (r == 0 && (fd_dir || td_dir)) {
		if (flags)
			pl.st.unmodeled++;
		if (fd_dir && fd_dir == td_dir) {
			dir_rename(fd_dir, fb, tb);
		} else {
			if (fd_dir)
				n = dents_get(&fd_dir->cur_ents, fb);
			if (fd_dir)
				dir_del(fd_dir, fb);
			if (td_dir && n)
				dir_add(td_dir, tb, n);
			else if (td_dir)
				pl.st.unmodeled++; /* moved in from outside */
		}
	}
#undef REAL_RENAME
	pl_leave();
	errno = e;
	return r;
}

int __wrap_rename(const char *from, const char *to)
{
	return do_rename(AT_FDCWD, from, AT_FDCWD, to, 0, 0);
}

int __wrap_renameat(int fromfd, const char *from, int tofd, const char *to)
{
	return do_rename(fromfd, from, tofd, to, 0, 1);
}

int __wrap_renameat2(int fromfd, const char *from, int tofd, const char *to,
		     unsigned int flags)
{
	return do_rename(fromfd, from, tofd, to, flags, 2);
}

static int do_unlink(int dirfd, const char *path, int flags, int kind)
{
	char base[PL_NAME_MAX];
	struct pl_inode *d;
	int r, e;

#define REAL_UNLINK()                                                          \
	(kind == 0   ? __real_unlink(path)                                     \
	 : kind == 1 ? __real_unlinkat(dirfd, path, flags)                     \
		     : __real_rmdir(path))
	if (!pl_enter())
		return REAL_UNLINK();
	d = parent_of(dirfd, path, base);
	if (d)
		pl_call(kind == 0   ? "unlink"
			: kind == 1 ? "unlinkat"
				    : "rmdir");
	r = REAL_UNLINK();
	e = errno;
	if (r == 0 && d)
		dir_del(d, base);
#undef REAL_UNLINK
	pl_leave();
	errno = e;
	return r;
}

int __wrap_unlink(const char *path)
{
	return do_unlink(AT_FDCWD, path, 0, 0);
}

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
	return do_unlink(dirfd, path, flags, 1);
}

int __wrap_rmdir(const char *path)
{
	return do_unlink(AT_FDCWD, path, 0, 2);
}

static int do_mkdir(int dirfd, const char *path, mode_t mode, bool at)
{
	char base[PL_NAME_MAX];
	struct pl_inode *d;
	struct stat st;
	int r, e;

	if (!pl_enter())
		return at ? __real_mkdirat(dirfd, path, mode)
			  : __real_mkdir(path, mode);
	d = parent_of(dirfd, path, base);
	if (d)
		pl_call(at ? "mkdirat" : "mkdir");
	r = at ? __real_mkdirat(dirfd, path, mode) : __real_mkdir(path, mode);
	e = errno;
	if (r == 0 && d && fstatat(dirfd, path, &st, 0) == 0)
		dir_add(d, base, inode_new(st.st_dev, st.st_ino, true));
	pl_leave();
	errno = e;
	return r;
}

int __wrap_mkdir(const char *path, mode_t mode)
{
	return do_mkdir(AT_FDCWD, path, mode, false);
}

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
	return do_mkdir(dirfd, path, mode, true);
}

/* links are not modelled: count their use in the tracked tree */
static void unmodeled_path(int dirfd, const char *path)
{
	char base[PL_NAME_MAX];

	if (pl_enter()) {
		if (parent_of(dirfd, path, base))
			pl.st.unmodeled++;
		pl_leave();
	}
}

int __wrap_link(const char *from, const char *to)
{
	unmodeled_path(AT_FDCWD, to);
	return __real_link(from, to);
}

int __wrap_linkat(int fromfd, const char *from, int tofd, const char *to,
		  int flags)
{
	unmodeled_path(tofd, to);
	return __real_linkat(fromfd, from, tofd, to, flags);
}

int __wrap_symlink(const char *target, const char *path)
{
	unmodeled_path(AT_FDCWD, path);
	return __real_symlink(target, path);
}

int __wrap_symlinkat(const char *target, int dirfd, const char *path)
{
	unmodeled_path(dirfd, path);
	return __real_symlinkat(target, dirfd, path);
}
