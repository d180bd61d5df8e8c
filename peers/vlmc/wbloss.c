/* SPDX-License-Identifier: MIT */
/*
 * Write-back loss tracking: see wbloss.h for the contract and
 * docs/vlmc.md ("Write-back loss") for what a client sees.
 */
#include "wbloss.h"

static void wbloss_saw(struct vlmc_wbloss *g, uint64_t now)
{
	uint64_t m = __atomic_load_n(&g->max_seen, __ATOMIC_RELAXED);

	while (now > m &&
	       !__atomic_compare_exchange_n(&g->max_seen, &m, now, true,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

void vlmc_wbloss_init(struct vlmc_wbloss *g, vlmc_wbloss_read_fn read,
		      void *read_arg)
{
	g->read = read;
	g->read_arg = read_arg;
	g->seq = 0;
	g->base = read(read_arg);
	g->max_seen = g->base;
	g->fences = 0;
	g->cmds_eio = 0;
}

void vlmc_wbloss_vol_init(struct vlmc_wbloss_vol *w)
{
	pthread_mutex_init(&w->mu, NULL);
	w->marked = false;
	w->mark_loss = 0;
	w->last_seq = 0;
	w->gen = 0;
	w->lost = 0;
}

void vlmc_wbloss_vol_destroy(struct vlmc_wbloss_vol *w)
{
	pthread_mutex_destroy(&w->mu);
}

/* Caller holds w->mu. The volume's unflushed writes may be gone: a new
 * generation fences every session opened before, and the mark goes (the
 * loss is reported; sessions opened from now on start clean). */
static void wbloss_fence(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w,
			 uint64_t now)
{
	w->lost = now > w->mark_loss ? now - w->mark_loss : 1;
	__atomic_store_n(&w->marked, false, __ATOMIC_RELAXED);
	__atomic_add_fetch(&w->gen, 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&g->fences, 1, __ATOMIC_RELAXED);
}

enum vlmc_wbloss_verdict vlmc_wbloss_complete(struct vlmc_wbloss *g,
					      struct vlmc_wbloss_vol *w,
					      uint64_t gen, bool wrote,
					      uint64_t loss)
{
	enum vlmc_wbloss_verdict vd = VLMC_WBLOSS_OK;

	if (!wrote && !__atomic_load_n(&w->marked, __ATOMIC_RELAXED) &&
	    !vlmc_wbloss_fenced(w, gen))
		return VLMC_WBLOSS_OK;
	pthread_mutex_lock(&w->mu);
	if (w->gen != gen) {
		vd = VLMC_WBLOSS_FENCED;
		goto out;
	}
	if (wrote) {
		if (!w->marked || loss < w->mark_loss)
			w->mark_loss = loss;
		__atomic_store_n(&w->marked, true, __ATOMIC_RELAXED);
		w->last_seq = __atomic_add_fetch(&g->seq, 1, __ATOMIC_SEQ_CST);
	}
	if (w->marked) {
		uint64_t now = vlmc_wbloss_read(g);

		wbloss_saw(g, now);
		if (now != w->mark_loss) {
			wbloss_fence(g, w, now);
			vd = VLMC_WBLOSS_LOST;
		}
	}
out:
	pthread_mutex_unlock(&w->mu);
	if (vd != VLMC_WBLOSS_OK)
		__atomic_add_fetch(&g->cmds_eio, 1, __ATOMIC_RELAXED);
	return vd;
}

void vlmc_wbloss_vol_inherit(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w)
{
	pthread_mutex_lock(&w->mu);
	/* the inherited writes are older than any this vlmc records
	 * (last_seq 0 <= every FLUSH's snapshot of seq): the first FLUSH
	 * with no loss since base covers them */
	w->mark_loss = g->base;
	__atomic_store_n(&w->marked, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&w->mu);
}

enum vlmc_wbloss_verdict vlmc_wbloss_check(struct vlmc_wbloss *g,
					   struct vlmc_wbloss_vol *w,
					   uint64_t now)
{
	enum vlmc_wbloss_verdict vd = VLMC_WBLOSS_OK;

	wbloss_saw(g, now);
	pthread_mutex_lock(&w->mu);
	if (w->marked && now != w->mark_loss) {
		wbloss_fence(g, w, now);
		vd = VLMC_WBLOSS_LOST;
	}
	pthread_mutex_unlock(&w->mu);
	return vd;
}

bool vlmc_wbloss_marked(struct vlmc_wbloss_vol *w)
{
	return __atomic_load_n(&w->marked, __ATOMIC_RELAXED);
}

enum vlmc_wbloss_verdict vlmc_wbloss_attach(struct vlmc_wbloss *g,
					    struct vlmc_wbloss_vol *w,
					    uint64_t *gen)
{
	enum vlmc_wbloss_verdict vd = VLMC_WBLOSS_OK;

	if (!__atomic_load_n(&w->marked, __ATOMIC_RELAXED)) {
		*gen = vlmc_wbloss_gen(w);
		return VLMC_WBLOSS_OK;
	}
	pthread_mutex_lock(&w->mu);
	if (w->marked) {
		uint64_t now = vlmc_wbloss_read(g);

		wbloss_saw(g, now);
		if (now != w->mark_loss) {
			wbloss_fence(g, w, now);
			vd = VLMC_WBLOSS_LOST;
		}
	}
	*gen = w->gen;
	pthread_mutex_unlock(&w->mu);
	return vd;
}

void vlmc_wbloss_flush_begin(struct vlmc_wbloss *g, struct vlmc_wbloss_flush *f)
{
	/* seq first: a write recorded after this load is not covered by the
	 * FLUSH and keeps its volume marked; the counter second, so a loss
	 * between the two shows as a mark older than F (fenced) */
	f->seq = __atomic_load_n(&g->seq, __ATOMIC_SEQ_CST);
	f->loss = vlmc_wbloss_read(g);
}

enum vlmc_wbloss_verdict
vlmc_wbloss_flush_done(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w,
		       const struct vlmc_wbloss_flush *f, uint64_t now)
{
	enum vlmc_wbloss_verdict vd = VLMC_WBLOSS_OK;

	wbloss_saw(g, now);
	if (!__atomic_load_n(&w->marked, __ATOMIC_RELAXED))
		return VLMC_WBLOSS_OK;
	pthread_mutex_lock(&w->mu);
	if (w->marked) {
		if (w->mark_loss != now) {
			wbloss_fence(g, w, now);
			vd = VLMC_WBLOSS_LOST;
		} else if (w->mark_loss == f->loss && w->last_seq <= f->seq) {
			__atomic_store_n(&w->marked, false, __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&w->mu);
	return vd;
}

uint64_t vlmc_wbloss_vol_lost(struct vlmc_wbloss_vol *w)
{
	uint64_t n;

	pthread_mutex_lock(&w->mu);
	n = w->lost;
	pthread_mutex_unlock(&w->mu);
	return n;
}

uint64_t vlmc_wbloss_seen(struct vlmc_wbloss *g)
{
	return __atomic_load_n(&g->max_seen, __ATOMIC_RELAXED) - g->base;
}
