/* SPDX-License-Identifier: MIT */
#ifndef POWERLOSS_FS_H
#define POWERLOSS_FS_H
/*
 * powerloss_fs: a model of what a POSIX file system must keep across a
 * power cut, fed by link-time wrappers (-Wl,--wrap=open,...) around the
 * file syscalls of the code under test (docs/testing-powerloss.md).
 *
 * Every wrapped call is passed through to the real file system. For files
 * and directories below the tracked root the model also records, POSIX
 * strictly:
 * - a file's content and size are durable only as of its last successful
 *   fsync or fdatasync (both are treated alike: fdatasync also commits a
 *   size change, as Linux does);
 * - a directory entry (create, rename, unlink, mkdir) is durable only
 *   after a successful fsync of that directory; fsync of a file does not
 *   make its name durable.
 * Files are tracked by inode (fstat after open), so renames and unlinks of
 * files that are still open are modelled right. Only the byte ranges
 * written since an inode's last sync are recorded; at its sync they are
 * copied (from the real file) into the inode's shadow copy, which is the
 * durable content.
 *
 * A cut (pl_fs_cut) writes the durable image of the tracked tree into a
 * fresh directory at that instant:
 * - PL_CUT_SYNCED: durable directory entries -> durable inode contents;
 * - PL_CUT_RANDOM: additionally, per directory a random prefix of the
 *   entry operations since its last sync survives; per file the size is
 *   either the synced or the current one, and every 512-byte sector
 *   written since the last sync independently holds its synced, its
 *   current, or the version it had before its last change (so writes are
 *   torn at sector granularity, and an overwrite or an undo since the
 *   sync may be lost on its own). Sectors without content read as zeros.
 * Not modelled: the file system's own crash consistency (assumed), fsync
 * that lies, reordering inside one sector, and versions of a sector older
 * than the one before its last change (other than the synced one).
 *
 * Locking: one process-wide mutex serialises every wrapped call on a
 * tracked object with its model update, so a cut taken from any thread
 * sees a state that existed. Calls on untracked fds and paths pass
 * through without touching the model. Calls made by a thread while it is
 * in bypass mode (pl_fs_bypass) or inside a hook pass through untouched.
 *
 * Calls that change files but are not modelled (link, symlink, fallocate,
 * truncate by path, writev, sync_file_range, renameat2 ...) are passed
 * through and counted in pl_fs_stats.unmodeled when they touch the tracked
 * tree; a test should require that count to stay 0.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

enum pl_cut_mode {
	PL_CUT_SYNCED, /* exactly what fsyncs covered */
	PL_CUT_RANDOM  /* plus a random subset of the unsynced changes */
};

/*
 * Start tracking the directory root (it must exist; it is taken as
 * durable, and so is everything already in it). Any previous tracking is
 * dropped. Returns 0 or a negative errno.
 */
int pl_fs_start(const char *root);

/* Stop tracking and free the model; wrapped calls then pass through. */
void pl_fs_stop(void);

/*
 * Hook called before every tracked call that can change the durable or
 * the current state (open with O_CREAT or O_TRUNC in a tracked directory,
 * write, writev, pwrite, pwritev, ftruncate, truncate, fallocate, fsync,
 * fdatasync, rename*, unlink*, rmdir, mkdir*), with the
 * model lock held and the calling thread in bypass mode: the hook may call
 * pl_fs_cut_locked() and may do file I/O of its own outside the tracked
 * tree, but must not call into the code under test. call is the name of
 * the wrapped function, seq the number of tracked calls so far (from 1).
 * NULL removes the hook.
 */
typedef void (*pl_fs_hook_fn)(void *arg, uint64_t seq, const char *call);
void pl_fs_set_hook(pl_fs_hook_fn fn, void *arg);

/*
 * Call the hook now (call = the given name, seq = 0), with the lock held,
 * as before a wrapped call: for a cut at a moment the caller chooses while
 * other threads may be making wrapped calls. 0, or -ENOENT if nothing is
 * tracked or no hook is set.
 */
int pl_fs_call_hook(const char *call);

/*
 * Materialise the durable image into dst (created; must not exist). rng is
 * the state of the caller's random generator (PL_CUT_RANDOM only; advanced).
 * pl_fs_cut takes the model lock; pl_fs_cut_locked is for hooks, which run
 * with it held. Returns 0 or a negative errno.
 */
int pl_fs_cut(const char *dst, enum pl_cut_mode mode, uint64_t *rng);
int pl_fs_cut_locked(const char *dst, enum pl_cut_mode mode, uint64_t *rng);

/*
 * Per-thread pass-through: while on, the calling thread's wrapped calls
 * go straight to the real functions, unrecorded (for opening and checking
 * an image while the workload's store stays open).
 */
void pl_fs_bypass(bool on);

/*
 * Fault injection for the harness' own tests: from now on, successful
 * fsync/fdatasync calls of tracked files whose current name starts with
 * file_prefix (NULL: none; "": every file), and of tracked directories if
 * dir_syncs is true, are passed through but not recorded, as if the code
 * under test had forgotten them.
 */
void pl_fs_ignore_syncs(const char *file_prefix, bool dir_syncs);

struct pl_fs_stats {
	uint64_t calls;	     /* tracked calls that reached the hook */
	uint64_t file_syncs; /* recorded file fsync/fdatasync */
	uint64_t dir_syncs;  /* recorded directory fsyncs */
	uint64_t cuts;
	uint64_t inodes;       /* model inodes ever created */
	uint64_t adopted;      /* untracked files found in the tree */
	uint64_t unmodeled;    /* unmodelled calls on the tracked tree */
	uint64_t stale_fds;    /* fd entries found reused behind our back */
	uint64_t prev_sectors; /* random cuts: sectors given their previous
				* version (neither synced nor current) */
};
void pl_fs_get_stats(struct pl_fs_stats *st);

/* splitmix64 step, shared by the harness and its tests */
static inline uint64_t pl_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

#endif
