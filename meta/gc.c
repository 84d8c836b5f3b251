/* gc.c — the chunk garbage collector (see gc.h for the contract and its
 * invariants). A pass hands its items to workers through an atomic index;
 * the pass's own thread is one of the workers. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "fs/cleanup.h"
#include "meta/gc.h"
#include "meta/ticker.h"

/* ---- one pass ------------------------------------------------------------- */

struct pass {
	const struct ns_gc_item *items;
	int *rc; /* per item: 1 not tried, 0 removed, -errno */
	int n;
	atomic_int next, failed;
	gc_remove_fn remove;
	void *ctx;
	const atomic_bool *stop;
};

static void *pass_worker(void *arg)
{
	struct pass *p = arg;

	for (;;) {
		if (atomic_load(&p->failed) >= GC_WORKERS || (p->stop && atomic_load(p->stop)))
			break;
		int i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n)
			break;
		p->rc[i] = p->remove(p->ctx, &p->items[i]);
		if (p->rc[i] < 0)
			atomic_fetch_add(&p->failed, 1);
	}
	return NULL;
}

/* Runs pass_worker on nworkers threads (this one included; fewer if a
 * thread cannot be created) and waits for them. */
static void pass_run(struct pass *p, int nworkers)
{
	pthread_t thr[GC_WORKERS];
	int started = 0;

	nworkers = STRATA_MIN(STRATA_MIN(nworkers, GC_WORKERS), p->n);
	for (; started < nworkers - 1; started++)
		if (pthread_create(&thr[started], NULL, pass_worker, p) != 0)
			break;
	pass_worker(p);
	for (int i = 0; i < started; i++)
		pthread_join(thr[i], NULL);
}

/* Drops the queue entries of every removed item in one batch (invariant 2). */
static void pass_commit(struct ns *ns, const struct pass *p, struct gc_stats *st)
{
	_cleanup_free_ strata_ino_t *inos = calloc((size_t)p->n + 1, sizeof(*inos));
	int k = 0;

	for (int i = 0; i < p->n; i++) {
		if (p->rc[i] == 0 && inos)
			inos[k++] = p->items[i].ino;
		else if (p->rc[i] < 0 || !inos)
			st->failed++;
	}
	if (k > 0 && ns_gc_done_many(ns, inos, k) < 0)
		st->failed += k;
	else
		st->done = k;
}

int gc_pass(struct ns *ns, strata_ino_t after, int max, int nworkers, gc_remove_fn remove,
	    void *ctx, const atomic_bool *stop, struct gc_stats *ret)
{
	max = STRATA_MAX(STRATA_MIN(max, GC_BATCH), 1);
	_cleanup_free_ struct ns_gc_item *items = calloc((size_t)max, sizeof(*items));
	_cleanup_free_ int *rc = calloc((size_t)max, sizeof(*rc));
	struct gc_stats st = {0};

	if (!items || !rc)
		return -ENOMEM;
	int n = ns_gc_list_after(ns, after, items, max);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++)
		rc[i] = 1;
	struct pass p = {
	    .items = items, .rc = rc, .n = n, .remove = remove, .ctx = ctx, .stop = stop};
	if (n > 0)
		pass_run(&p, STRATA_MAX(nworkers, 1));
	pass_commit(ns, &p, &st);
	st.listed = n;
	st.last = n > 0 ? items[n - 1].ino : after;
	*ret = st;
	return 0;
}

/* ---- the collector thread ------------------------------------------------- */

struct gc {
	struct ns *ns;
	struct gc_opts o;
	struct ticker *ticker;
	atomic_bool stop; /* lets a running pass end early */
	int backoff_ms;
};

/* One sweep: passes back to back from the start of the queue until a pass
 * comes out short (the end), fails or the collector stops. Returns 0 or the
 * queue's read error; *sweep gets the totals. */
static int gc_sweep(struct gc *g, struct gc_stats *sweep)
{
	strata_ino_t after = 0;

	*sweep = (struct gc_stats){0};
	while (!atomic_load(&g->stop)) {
		struct gc_stats st;
		int r = gc_pass(g->ns, after, GC_BATCH, GC_WORKERS, g->o.remove, g->o.ctx, &g->stop,
				&st);
		if (r < 0)
			return r;
		sweep->listed += st.listed;
		sweep->done += st.done;
		sweep->failed += st.failed;
		if (st.listed < GC_BATCH || st.failed > 0)
			break;
		after = st.last;
	}
	return 0;
}

/* One turn of the collector on its ticker thread: a sweep, then the delay
 * before the next one (idle, or a growing backoff while removals fail). */
static int gc_tick(void *arg)
{
	struct gc *g = arg;
	struct gc_stats sweep;
	int r = gc_sweep(g, &sweep);
	bool failing = r < 0 || sweep.failed > 0;

	g->backoff_ms = failing ? STRATA_MIN(STRATA_MAX(g->backoff_ms * 2, g->o.idle_ms * 2),
					     g->o.backoff_max_ms)
				: 0;
	int wait = failing ? g->backoff_ms : g->o.idle_ms;
	if (g->o.report)
		g->o.report(g->o.ctx, r, &sweep, wait);
	return wait;
}

int gc_start(struct ns *ns, const struct gc_opts *o, struct gc **ret)
{
	struct gc *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	g->ns = ns;
	g->o = *o;
	if (g->o.idle_ms <= 0)
		g->o.idle_ms = 500;
	if (g->o.backoff_max_ms <= 0)
		g->o.backoff_max_ms = 16000;
	int r = ticker_start(g->o.idle_ms, gc_tick, g, &g->ticker);
	if (r < 0) {
		free(g);
		return r;
	}
	ticker_kick(g->ticker); /* the first sweep runs at once */
	*ret = g;
	return 0;
}

void gc_kick(struct gc *g)
{
	ticker_kick(g->ticker);
}

void gc_stop(struct gc *g)
{
	if (!g)
		return;
	atomic_store(&g->stop, true);
	ticker_stop(g->ticker);
	free(g);
}
