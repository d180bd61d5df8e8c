/* SPDX-License-Identifier: MIT */
#ifndef VLMC_WBLOSS_H
#define VLMC_WBLOSS_H
/*
 * Write-back loss tracking (docs/vlmc.md, "Write-back loss"): the state
 * machine that keeps vlmc from reporting a FLUSH as done, or serving a
 * read, after a write-back cache below died with writes vlmc had already
 * acknowledged. Pure: no segment, no I/O; the loss counter is read through
 * a callback (xseg_writeback_losses in vlmc, a plain variable in tests).
 *
 * The counter L (monotonic) is read before every write-like object
 * request is submitted. A volume with acknowledged writes not yet covered
 * by a successful FLUSH is "marked" with the smallest L of those writes.
 * When the counter later differs from that L, a cache that held some of
 * them may have died: the volume is fenced (its fence generation moves
 * on), and every command of a session opened before the fence fails with
 * EIO. Sessions (NBD connections) remember the generation they started in.
 *
 * Stale sessions (review safety17 F2). A FLUSH covers the writes completed
 * on every session of its volume (NBD's CAN_MULTI_CONN), not only its own.
 * A session fenced while it had acknowledged writes no FLUSH covered yet
 * is "stale" for as long as it stays open: those writes may be lost, so
 * every FLUSH of the volume fails with EIO until it closes, also a FLUSH
 * on a session opened after the fence. Closing the stale sessions (the
 * client reconnecting) accepts the loss, as a new session does for its
 * own commands. Sessions are linked in their volume's list from attach to
 * detach so that a fence can find the stale ones. And the first FLUSH of
 * the volume after a fence fails whatever its session (reporting the loss
 * of writes whose sessions are gone: vlmc_wbloss_flush_report).
 *
 * Locking: each volume's state has its own mutex, taken only on the slow
 * paths (a write completed, the volume is marked, a FLUSH looks at it);
 * the fast path of a read on an unmarked volume is two relaxed loads.
 * Memory ordering: seq (the global write-completion sequence) is seq_cst,
 * so a FLUSH that snapshots it before it is submitted orders every write
 * completion recorded before (covered) against every one after (not).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* What a check found. */
enum vlmc_wbloss_verdict {
	VLMC_WBLOSS_OK = 0,
	/* the session's generation is older than the volume's: fenced
	 * before (the command fails with EIO) */
	VLMC_WBLOSS_FENCED,
	/* this check found the loss and fenced the volume now (the command
	 * fails with EIO; the caller logs it, once) */
	VLMC_WBLOSS_LOST,
};

typedef uint64_t (*vlmc_wbloss_read_fn)(void *arg);

/* Shared by all volumes of one vlmc. */
struct vlmc_wbloss {
	vlmc_wbloss_read_fn read; /* the segment's loss counter */
	void *read_arg;
	uint64_t seq;	   /* __atomic: successful write completions */
	uint64_t base;	   /* the counter when tracking started */
	uint64_t max_seen; /* __atomic: largest counter value a check read */
	uint64_t fences;   /* __atomic: volumes fenced */
	uint64_t cmds_eio; /* __atomic: commands failed by a fence */
};

/* One session (an NBD connection) on a volume. Fields under the volume's
 * mu, except gen, which only attach writes. */
struct vlmc_wbloss_sess {
	uint64_t gen; /* the volume's fence generation at attach */
	/* seq of its latest acknowledged write (0: none yet); uncovered
	 * while above the volume's covered_seq */
	uint64_t last_seq;
	bool stale;  /* fenced with uncovered writes: counted in stale */
	bool linked; /* in the volume's list (attach to detach) */
	struct vlmc_wbloss_sess *next, *prev;
};

/* Per volume. */
struct vlmc_wbloss_vol {
	pthread_mutex_t mu;
	bool marked;	    /* __atomic (read unlocked on the fast path) */
	uint64_t mark_loss; /* smallest L of the unflushed writes */
	uint64_t last_seq;  /* seq of the latest write recorded */
	uint64_t gen;	    /* __atomic: fence generation, starts at 0 */
	uint64_t lost;	    /* losses found by the latest fence */
	/* every write recorded with a seq up to this one is durable: a
	 * FLUSH that snapshot seq there succeeded with no loss since the
	 * oldest unflushed write left (it need not have cleared the mark:
	 * writes completed while it was in flight keep that) */
	uint64_t covered_seq;
	struct vlmc_wbloss_sess *sessions; /* attached sessions */
	unsigned stale;			   /* __atomic: open stale sessions */
	bool stale_logged; /* a FLUSH refused for them was reported */
	/* __atomic: a fence no FLUSH has reported yet (set by the fence,
	 * taken by the next FLUSH of the volume, which fails) */
	bool unreported;
};

/* A FLUSH's view taken before it is submitted. */
struct vlmc_wbloss_flush {
	uint64_t loss; /* counter before submission (F) */
	uint64_t seq;  /* writes recorded before it was received (G) */
};

/* Start tracking: read the counter once as the base. */
void vlmc_wbloss_init(struct vlmc_wbloss *g, vlmc_wbloss_read_fn read,
		      void *read_arg);
void vlmc_wbloss_vol_init(struct vlmc_wbloss_vol *w);
void vlmc_wbloss_vol_destroy(struct vlmc_wbloss_vol *w);

/* The counter, for a write-like part about to be submitted (seq_cst:
 * read before the submission, never after its reply). */
static inline uint64_t vlmc_wbloss_read(struct vlmc_wbloss *g)
{
	return g->read(g->read_arg);
}

/* The volume's fence generation: a session records it when it opens. */
static inline uint64_t vlmc_wbloss_gen(struct vlmc_wbloss_vol *w)
{
	return __atomic_load_n(&w->gen, __ATOMIC_ACQUIRE);
}

/* Whether a session opened at generation gen is fenced (relaxed: a fence
 * racing the check is caught again at completion). */
static inline bool vlmc_wbloss_fenced(struct vlmc_wbloss_vol *w, uint64_t gen)
{
	return __atomic_load_n(&w->gen, __ATOMIC_RELAXED) != gen;
}

/*
 * A command of a session opened at generation gen completed on the
 * volume. wrote: it was a write that succeeded (acknowledged to the
 * client once this returns OK), loss: the smallest counter value read
 * before its write-like parts were (last) submitted. Records the write,
 * then, if the volume has unflushed writes, compares their L with the
 * counter now: a difference fences the volume (LOST). FENCED: an earlier
 * fence; nothing recorded. The caller fails the command with EIO for
 * anything but OK. Fast path (not wrote, not marked, not fenced): no lock,
 * no counter read.
 */
enum vlmc_wbloss_verdict vlmc_wbloss_complete(struct vlmc_wbloss *g,
					      struct vlmc_wbloss_vol *w,
					      uint64_t gen, bool wrote,
					      uint64_t loss);

/* vlmc_wbloss_complete for a command of session s (attached to w): an
 * acknowledged write (OK) also makes s uncovered until a FLUSH covers it,
 * so that a fence before then makes s stale. A write that finds the loss
 * (LOST) is not acknowledged and does not count for s. */
enum vlmc_wbloss_verdict vlmc_wbloss_complete_sess(struct vlmc_wbloss *g,
						   struct vlmc_wbloss_vol *w,
						   struct vlmc_wbloss_sess *s,
						   bool wrote, uint64_t loss);

/*
 * Session s opens on the volume: if its unflushed writes' L differs from
 * the counter now (a loss nobody has looked at yet), the volume is fenced
 * first (LOST: the caller logs it), so that sessions opened before the
 * loss fail and s, opened after it, does not. s records the generation
 * and joins the volume's sessions until vlmc_wbloss_detach. Takes the
 * volume's lock (once per connection).
 */
enum vlmc_wbloss_verdict vlmc_wbloss_attach(struct vlmc_wbloss *g,
					    struct vlmc_wbloss_vol *w,
					    struct vlmc_wbloss_sess *s);

/* Session s closes (or moves to another volume): it leaves w's sessions,
 * and if it was stale, FLUSHes of w no longer wait for it. No-op if s is
 * not attached. Call it once no command of s can complete any more (an
 * abandoned connection's replies are never received: nbd_conn_close). */
void vlmc_wbloss_detach(struct vlmc_wbloss_vol *w, struct vlmc_wbloss_sess *s);

/*
 * A FLUSH of the volume succeeded below (and did not find a loss): may it
 * be reported as done? Not while a stale session is open (their writes
 * may be lost, and the FLUSH claims to cover them): returns the number of
 * open stale sessions (the caller fails the FLUSH with EIO), 0 if none.
 * *first: true for the first refusal since the volume had none (the caller
 * logs that one). One relaxed load when there are none.
 */
unsigned vlmc_wbloss_flush_stale(struct vlmc_wbloss_vol *w, bool *first);

/* Open stale sessions now, without logging (a FLUSH notes it when it is
 * submitted: one held back then stays held back, even if they close
 * before it completes; review18 L2). */
static inline unsigned vlmc_wbloss_stale(struct vlmc_wbloss_vol *w)
{
	return __atomic_load_n(&w->stale, __ATOMIC_SEQ_CST);
}

/*
 * A FLUSH of the volume completed (whatever its result): whether it is the
 * first since the volume's latest fence. Such a FLUSH fails with EIO, and
 * the loss counts as reported (the next FLUSH goes by the other rules).
 * Why (review18 H1): the lost writes may be those of sessions closed
 * before the fence, of a previous vlmc (inherited), or of xseg requests:
 * nobody open is stale for them, yet the FLUSH covers them. As Linux
 * reports a writeback error to the first fsync after it even on a file
 * opened since, one FLUSH reports the loss, on whichever session. A FLUSH
 * that fails for another reason (its session fenced) reports it too. One
 * relaxed load when there is nothing to report.
 */
bool vlmc_wbloss_flush_report(struct vlmc_wbloss_vol *w);

/* Snapshot before a FLUSH is submitted. */
void vlmc_wbloss_flush_begin(struct vlmc_wbloss *g,
			     struct vlmc_wbloss_flush *f);

/*
 * A FLUSH that began with f succeeded below; now: the counter read once
 * after its completion (the same value for every volume). A marked volume
 * whose L differs from now is fenced (LOST); one whose L equals f->loss
 * (so no loss since) and that recorded no write after f was taken is
 * clean: its mark is cleared. A write recorded after f keeps the volume
 * marked (the FLUSH does not cover it); those recorded before f are
 * covered all the same when no loss is seen (covered_seq: their sessions
 * are no longer stale at a later fence). Returns OK or LOST.
 */
enum vlmc_wbloss_verdict
vlmc_wbloss_flush_done(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w,
		       const struct vlmc_wbloss_flush *f, uint64_t now);

/*
 * A volume loaded from the table at start-up (docs/vlmc.md, "Write-back
 * loss", R9-13): a cache below may still hold writes a previous vlmc
 * acknowledged on it, which sessions of this vlmc will read back. Marks it
 * unflushed since g->base, the counter read by vlmc_wbloss_init, so that
 * a loss before the first successful FLUSH fences it as if this vlmc had
 * written them; that FLUSH clears the mark as usual. Call before the
 * volume is published (no session can hold a generation yet).
 */
void vlmc_wbloss_vol_inherit(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w);

/*
 * A control operation about to depend on the volume's acknowledged data
 * being below (a snapshot, after its I/O drained): now is a counter value
 * the caller read. If the volume has unflushed writes whose L differs from
 * now, they may be lost: the volume is fenced (LOST; the caller logs it
 * and fails the operation). OK: unmarked, or marked with no loss since.
 */
enum vlmc_wbloss_verdict vlmc_wbloss_check(struct vlmc_wbloss *g,
					   struct vlmc_wbloss_vol *w,
					   uint64_t now);

/* Whether the volume has acknowledged writes no FLUSH covered yet. */
bool vlmc_wbloss_marked(struct vlmc_wbloss_vol *w);

/* Losses the latest fence of w found (the counter's distance from L). */
uint64_t vlmc_wbloss_vol_lost(struct vlmc_wbloss_vol *w);

/* Counter increments seen by checks since init (statistics). */
uint64_t vlmc_wbloss_seen(struct vlmc_wbloss *g);

#endif /* VLMC_WBLOSS_H */
