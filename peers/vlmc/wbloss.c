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
	w->covered_seq = 0;
	w->sessions = NULL;
	w->stale = 0;
	w->stale_logged = false;
	w->unreported = false;
}

void vlmc_wbloss_vol_destroy(struct vlmc_wbloss_vol *w)
{
	pthread_mutex_destroy(&w->mu);
}

/* Caller holds w->mu. The volume's unflushed writes may be gone: a new
 * generation fences every session opened before, and the mark goes (the
 * loss is reported; sessions opened from now on start clean). Sessions of
 * the ending generation with an acknowledged write no successful FLUSH
 * covered (possibly among the lost) become stale. */
static void wbloss_fence(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w,
			 uint64_t now)
{
	for (struct vlmc_wbloss_sess *s = w->sessions; s; s = s->next)
		if (s->gen == w->gen && s->last_seq > w->covered_seq &&
		    !s->stale) {
			s->stale = true;
			__atomic_add_fetch(&w->stale, 1, __ATOMIC_RELAXED);
		}
	w->lost = now > w->mark_loss ? now - w->mark_loss : 1;
	__atomic_store_n(&w->marked, false, __ATOMIC_RELAXED);
	__atomic_store_n(&w->unreported, true, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&w->gen, 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&g->fences, 1, __ATOMIC_RELAXED);
}

static enum vlmc_wbloss_verdict
wbloss_complete(struct vlmc_wbloss *g, struct vlmc_wbloss_vol *w, uint64_t gen,
		struct vlmc_wbloss_sess *s, bool wrote, uint64_t loss)
{
	enum vlmc_wbloss_verdict vd = VLMC_WBLOSS_OK;
	uint64_t seq = 0;

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
		seq = __atomic_add_fetch(&g->seq, 1, __ATOMIC_SEQ_CST);
		w->last_seq = seq;
	}
	if (w->marked) {
		uint64_t now = vlmc_wbloss_read(g);

		wbloss_saw(g, now);
		if (now != w->mark_loss) {
			wbloss_fence(g, w, now);
			vd = VLMC_WBLOSS_LOST;
		}
	}
	/* only now: a write that finds a loss fails with EIO (never
	 * acknowledged) and does not make its own session stale */
	if (s && seq && vd == VLMC_WBLOSS_OK)
		s->last_seq = seq;
out:
	pthread_mutex_unlock(&w->mu);
	if (vd != VLMC_WBLOSS_OK)
		__atomic_add_fetch(&g->cmds_eio, 1, __ATOMIC_RELAXED);
	return vd;
}

enum vlmc_wbloss_verdict vlmc_wbloss_complete(struct vlmc_wbloss *g,
					      struct vlmc_wbloss_vol *w,
					      uint64_t gen, bool wrote,
					      uint64_t loss)
{
	return wbloss_complete(g, w, gen, NULL, wrote, loss);
}

enum vlmc_wbloss_verdict vlmc_wbloss_complete_sess(struct vlmc_wbloss *g,
						   struct vlmc_wbloss_vol *w,
						   struct vlmc_wbloss_sess *s,
						   bool wrote, uint64_t loss)
{
	return wbloss_complete(g, w, s->gen, s, wrote, loss);
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
					    struct vlmc_wbloss_sess *s)
{
	enum vlmc_wbloss_verdict vd = VLMC_WBLOSS_OK;

	pthread_mutex_lock(&w->mu);
	if (w->marked) {
		uint64_t now = vlmc_wbloss_read(g);

		wbloss_saw(g, now);
		if (now != w->mark_loss) {
			wbloss_fence(g, w, now);
			vd = VLMC_WBLOSS_LOST;
		}
	}
	/* after the fence: s is of the new generation, never stale by it */
	s->gen = w->gen;
	s->last_seq = 0;
	s->stale = false;
	s->linked = true;
	s->prev = NULL;
	s->next = w->sessions;
	if (w->sessions)
		w->sessions->prev = s;
	w->sessions = s;
	pthread_mutex_unlock(&w->mu);
	return vd;
}

void vlmc_wbloss_detach(struct vlmc_wbloss_vol *w, struct vlmc_wbloss_sess *s)
{
	pthread_mutex_lock(&w->mu);
	if (s->linked) {
		if (s->prev)
			s->prev->next = s->next;
		else
			w->sessions = s->next;
		if (s->next)
			s->next->prev = s->prev;
		s->linked = false;
		if (s->stale &&
		    __atomic_sub_fetch(&w->stale, 1, __ATOMIC_RELAXED) == 0)
			w->stale_logged = false;
		s->stale = false;
	}
	pthread_mutex_unlock(&w->mu);
}

unsigned vlmc_wbloss_flush_stale(struct vlmc_wbloss_vol *w, bool *first)
{
	unsigned n;

	*first = false;
	if (!__atomic_load_n(&w->stale, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&w->mu);
	n = w->stale;
	if (n && !w->stale_logged) {
		w->stale_logged = true;
		*first = true;
	}
	pthread_mutex_unlock(&w->mu);
	return n;
}

bool vlmc_wbloss_flush_report(struct vlmc_wbloss_vol *w)
{
	if (!__atomic_load_n(&w->unreported, __ATOMIC_SEQ_CST))
		return false;
	/* one FLUSH takes it, also when several complete at once */
	return __atomic_exchange_n(&w->unreported, false, __ATOMIC_SEQ_CST);
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
		} else {
			/* no loss since the oldest unflushed write left:
			 * every write recorded before f was taken is durable,
			 * also while later ones keep the volume marked */
			if (f->seq > w->covered_seq)
				w->covered_seq = f->seq;
			if (w->mark_loss == f->loss && w->last_seq <= f->seq)
				__atomic_store_n(&w->marked, false,
						 __ATOMIC_RELAXED);
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
