/* chainmap.c — the replication half of the cluster map: which targets form
 * which chains, in which order and state, and how that changes when nodes
 * join, fail, come back and finish their resync.
 *
 * A mutation loads every target and chain record into a struct cmap (tens
 * to hundreds of records), edits it in memory, and writes the changed
 * records into the caller's batch (cmap_write), so each change is still one
 * atomic batch under ns->mu (invariant 6).
 *
 * Chain order and states (see README.md "Chains and failures"):
 *   [ serving... | syncing | waiting... | offline... ]
 *   - writes enter at the first serving target and go down through every
 *     serving and syncing target; reads go to serving targets only;
 *   - a failed target becomes offline and moves behind the live ones
 *     (cmap_node_down); the chain version bumps;
 *   - when no target serves, the chain is not reordered: its first target
 *     is the last one that served and holds every acknowledged write, so
 *     only it may serve again directly (cmap_node_up);
 *   - a returning target waits; the first waiting one syncs from the last
 *     serving one (chain_normalize); ns_sync_done makes it serving.
 * Versions: a chain's version bumps on every change of its order or of a
 * member's state; the routing version bumps with it.
 *
 * Placement (cmap_place), once expect_nodes nodes have registered: a target
 * in no chain first replaces a lost replica of a chain short of its `want`
 * on a node that chain does not use yet (it joins as waiting and is filled by
 * resync); the rest form new chains on distinct nodes, the head rotating over
 * the nodes so that each node is head, middle and tail of about as many
 * chains of a factor, and the chains of a failed node have their successors
 * spread over all others. Factors (form_chains): with N nodes with free
 * targets, the default factor D = min(replicas, N) first gets N / D chains
 * (one round over the nodes: its table spans the cluster), then every other
 * factor 1..min(5, N) that has no chain yet gets one, then the rest go to D.
 * Each factor's chains make its chain tables (tables.c).
 *
 * A target belongs to one chain only. The chunkservers keep one chunk store
 * and one state per target, and a resync makes the successor's store equal
 * to its predecessor's (chunkserver/resync.c): a target in chains of two
 * factors would lose the chunks of one chain to the resync of the other. So
 * the factors share nodes, never targets; the functions below still walk
 * every chain holding a target (chains_of) rather than assume one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fs/cleanup.h"
#include "fs/clock.h"
#include "meta/ns-internal.h"

struct cmap {
	struct cluster_target *t;
	bool *tdirty;
	uint32_t nt, capt;
	struct strata_chain *c;
	bool *cdirty;
	uint32_t nc, capc;
	bool formed[STRATA_MAX_REPLICAS + 1]; /* factors that got new chains */
	bool changed;
};

/* ---- loading and writing -------------------------------------------------- */

static int grow_t(struct cmap *m)
{
	if (m->nt < m->capt)
		return 0;
	uint32_t cap = m->capt ? m->capt * 2 : 16;
	struct cluster_target *t = realloc(m->t, cap * sizeof(*t));
	if (t)
		m->t = t;
	bool *d = t ? realloc(m->tdirty, cap * sizeof(*d)) : NULL;
	if (!d)
		return -ENOMEM;
	m->tdirty = d;
	m->capt = cap;
	return 0;
}

static int grow_c(struct cmap *m)
{
	if (m->nc < m->capc)
		return 0;
	uint32_t cap = m->capc ? m->capc * 2 : 16;
	struct strata_chain *c = realloc(m->c, cap * sizeof(*c));
	if (c)
		m->c = c;
	bool *d = c ? realloc(m->cdirty, cap * sizeof(*d)) : NULL;
	if (!d)
		return -ENOMEM;
	m->cdirty = d;
	m->capc = cap;
	return 0;
}

static int load_target(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct cmap *m = ctx;

	if (kl != 5 || grow_t(m) < 0)
		return kl != 5 ? -EIO : -ENOMEM;
	if (cluster_target_decode(v, vl, &m->t[m->nt]) < 0)
		return -EIO;
	m->t[m->nt].target_id = key_get_u32(k + 1);
	m->tdirty[m->nt++] = false;
	return 0;
}

static int load_chain(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct cmap *m = ctx;

	if (grow_c(m) < 0)
		return -ENOMEM;
	int r = cluster_chain_decode(k, kl, v, vl, &m->c[m->nc]);
	if (r == 0)
		m->cdirty[m->nc++] = false;
	return r;
}

int cmap_load(struct ns *ns, struct cmap **ret)
{
	struct cmap *m = calloc(1, sizeof(*m));
	uint8_t tag = K_TARGET;
	int r;

	if (!m)
		return -ENOMEM;
	r = kv_scan(ns->kv, &tag, 1, NULL, 0, load_target, m);
	tag = K_CHAIN;
	if (r == 0)
		r = kv_scan(ns->kv, &tag, 1, NULL, 0, load_chain, m);
	if (r < 0) {
		cmap_free(m);
		return r;
	}
	*ret = m;
	return 0;
}

void cmap_free(struct cmap *m)
{
	if (!m)
		return;
	free(m->t);
	free(m->tdirty);
	free(m->c);
	free(m->cdirty);
	free(m);
}

bool cmap_write(struct cmap *m, struct kv_batch *b)
{
	for (uint32_t i = 0; i < m->nt; i++)
		if (m->tdirty[i])
			cluster_put_target(b, &m->t[i]);
	for (uint32_t i = 0; i < m->nc; i++)
		if (m->cdirty[i])
			cluster_put_chain(b, &m->c[i]);
	return m->changed;
}

/* ---- lookups --------------------------------------------------------------- */

static struct cluster_target *find_target(struct cmap *m, uint32_t id)
{
	for (uint32_t i = 0; i < m->nt; i++)
		if (m->t[i].target_id == id)
			return &m->t[i];
	return NULL;
}

static void set_state(struct cmap *m, struct cluster_target *t, uint8_t st)
{
	if (t->state == st)
		return;
	t->state = st;
	m->tdirty[t - m->t] = true;
	m->changed = true;
}

static bool listed(uint32_t id, const uint32_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Index of the first chain from index `from` on holding target id, or -1. */
static int chain_from(const struct cmap *m, uint32_t id, uint32_t from)
{
	for (uint32_t i = from; i < m->nc; i++)
		if (listed(id, m->c[i].targets, m->c[i].ntargets))
			return (int)i;
	return -1;
}

/* Index of the chain holding target id, or -1 (a spare). */
static int chain_of(const struct cmap *m, uint32_t id)
{
	return chain_from(m, id, 0);
}

/* Every chain index ci holding target id. */
#define chains_of(m, id, ci)                                                                       \
	for (int ci = chain_of(m, id); ci >= 0; ci = chain_from(m, id, (uint32_t)ci + 1))

static int chain_index(const struct cmap *m, uint32_t chain_id)
{
	for (uint32_t i = 0; i < m->nc; i++)
		if (m->c[i].chain_id == chain_id)
			return (int)i;
	return -1;
}

static uint8_t state_of(struct cmap *m, uint32_t id)
{
	struct cluster_target *t = find_target(m, id);

	return t ? t->state : TARGET_OFFLINE;
}

static int count_state(struct cmap *m, const struct strata_chain *c, uint8_t st)
{
	int n = 0;

	for (int j = 0; j < c->ntargets; j++)
		n += state_of(m, c->targets[j]) == st;
	return n;
}

/* ---- chain order ----------------------------------------------------------- */

/* Serving first, then syncing, waiting, offline; stable within a state. */
static void sort_by_state(struct cmap *m, struct strata_chain *c)
{
	for (int i = 1; i < c->ntargets; i++) {
		uint32_t id = c->targets[i];
		uint8_t s = state_of(m, id);
		int j = i - 1;
		while (j >= 0 && state_of(m, c->targets[j]) > s) {
			c->targets[j + 1] = c->targets[j];
			j--;
		}
		c->targets[j + 1] = id;
	}
}

/* Restores the order invariant after a state change and starts the next
 * resync: with a serving target, the first waiting one becomes syncing when
 * none is. Without one, the order is kept (position 0 is the last server). */
static void chain_normalize(struct cmap *m, uint32_t ci)
{
	struct strata_chain *c = &m->c[ci];

	if (count_state(m, c, TARGET_SERVING) == 0)
		return;
	sort_by_state(m, c);
	if (count_state(m, c, TARGET_SYNCING) > 0)
		return;
	for (int j = 0; j < c->ntargets; j++) {
		struct cluster_target *t = find_target(m, c->targets[j]);
		if (t && t->state == TARGET_WAITING) {
			set_state(m, t, TARGET_SYNCING);
			return;
		}
	}
}

static void chain_bump(struct cmap *m, uint32_t ci)
{
	m->c[ci].version++;
	m->cdirty[ci] = true;
	m->changed = true;
}

/* Target id changed state: every chain holding it is reordered and bumped. */
static void chains_changed(struct cmap *m, uint32_t id)
{
	chains_of(m, id, ci)
	{
		chain_normalize(m, (uint32_t)ci);
		chain_bump(m, (uint32_t)ci);
	}
}

/* ---- transitions ----------------------------------------------------------- */

int cmap_upsert_target(struct cmap *m, const struct cluster_target *t, bool *ret_fresh)
{
	struct cluster_target *old = find_target(m, t->target_id);

	*ret_fresh = !old;
	if (!old) {
		if (grow_t(m) < 0)
			return -ENOMEM;
		old = &m->t[m->nt++];
		*old = *t;
		m->tdirty[old - m->t] = true;
		m->changed = true;
		return 0;
	}
	if (old->node_id != t->node_id || strcmp(old->addr, t->addr) != 0)
		m->changed = true;
	uint8_t st = old->state;
	*old = *t;
	old->state = st; /* states change only through the transitions below */
	m->tdirty[old - m->t] = true;
	return 0;
}

/* serving|syncing|waiting -> offline (chain_normalize moves it back). */
void cmap_node_down(struct cmap *m, uint32_t node_id)
{
	for (uint32_t i = 0; i < m->nt; i++) {
		struct cluster_target *t = &m->t[i];
		if (t->node_id != node_id || t->state == TARGET_OFFLINE)
			continue;
		set_state(m, t, TARGET_OFFLINE);
		chains_changed(m, t->target_id);
	}
}

/* The state a target of this node takes when the node (re)appears. */
static uint8_t returning_state(struct cmap *m, const struct strata_chain *c,
			       const struct cluster_target *t, bool restarted)
{
	int serving = count_state(m, c, TARGET_SERVING);

	if (t->state == TARGET_OFFLINE)
		return serving == 0 && c->targets[0] == t->target_id ? TARGET_SERVING
								     : TARGET_WAITING;
	if (restarted && t->state == TARGET_SERVING && serving > 1)
		return TARGET_WAITING; /* may have missed or torn writes: resync */
	if (restarted && t->state == TARGET_SYNCING)
		return TARGET_WAITING; /* its resync starts over */
	return t->state;
}

/* offline -> serving (the last server of a dead chain) or waiting;
 * serving/syncing of a restarted node -> waiting when others serve. Only
 * the targets the node named (ids) come back: a disk it no longer has stays
 * offline until a replacement takes its place. */
void cmap_node_up(struct cmap *m, uint32_t node_id, const uint32_t *ids, int nids, bool restarted)
{
	for (uint32_t i = 0; i < m->nt; i++) {
		struct cluster_target *t = &m->t[i];
		if (t->node_id != node_id || !listed(t->target_id, ids, nids))
			continue;
		if (chain_of(m, t->target_id) < 0) {
			set_state(m, t, TARGET_SERVING); /* a spare is back */
			continue;
		}
		uint8_t st = TARGET_SERVING; /* the most cautious of its chains' answers */
		chains_of(m, t->target_id, ci) st =
		    STRATA_MAX(st, returning_state(m, &m->c[ci], t, restarted));
		if (st == t->state)
			continue;
		set_state(m, t, st);
		chains_changed(m, t->target_id);
	}
}

/* syncing -> serving, when the chain did not change since the sync began. */
static int cmap_synced(struct cmap *m, const struct mgmt_sync *s)
{
	struct cluster_target *t = find_target(m, s->target_id);
	int ci = chain_index(m, s->chain_id);

	if (!t || ci < 0 || !listed(s->target_id, m->c[ci].targets, m->c[ci].ntargets))
		return -ENOENT;
	if (m->c[ci].version != s->chain_ver || t->state != TARGET_SYNCING)
		return -ESTALE;
	set_state(m, t, TARGET_SERVING);
	chains_changed(m, s->target_id);
	return 0;
}

/* ---- placement ------------------------------------------------------------- */

static int live_count(struct cmap *m, const struct strata_chain *c)
{
	return c->ntargets - count_state(m, c, TARGET_OFFLINE);
}

static bool chain_uses_node(struct cmap *m, const struct strata_chain *c, uint32_t node,
			    bool live_only)
{
	for (int j = 0; j < c->ntargets; j++) {
		struct cluster_target *t = find_target(m, c->targets[j]);
		if (t && t->node_id == node && (!live_only || t->state != TARGET_OFFLINE))
			return true;
	}
	return false;
}

/* Drops offline members on `node` (the disk the new target replaces) and, if
 * the chain is full, its last offline member. */
static void drop_replaced(struct cmap *m, struct strata_chain *c, uint32_t node)
{
	int k = 0;

	for (int j = 0; j < c->ntargets; j++) {
		struct cluster_target *t = find_target(m, c->targets[j]);
		if (!(t && t->node_id == node && t->state == TARGET_OFFLINE))
			c->targets[k++] = c->targets[j];
	}
	c->ntargets = (uint8_t)k;
	if (c->ntargets == STRATA_MAX_REPLICAS &&
	    state_of(m, c->targets[c->ntargets - 1]) == TARGET_OFFLINE)
		c->ntargets--;
}

/* A spare target t replaces a lost replica: returns true if it found a chain. */
static bool place_replacement(struct cmap *m, struct cluster_target *t)
{
	int best = -1;

	for (uint32_t i = 0; i < m->nc; i++) {
		const struct strata_chain *c = &m->c[i];
		if (live_count(m, c) >= c->want || chain_uses_node(m, c, t->node_id, true))
			continue;
		if (best < 0 || live_count(m, c) < live_count(m, &m->c[best]))
			best = (int)i;
	}
	if (best < 0)
		return false;
	struct strata_chain *c = &m->c[best];
	drop_replaced(m, c, t->node_id);
	c->targets[c->ntargets++] = t->target_id;
	t->state = TARGET_OFFLINE; /* force the transition below to be recorded */
	set_state(m, t, TARGET_WAITING);
	chain_normalize(m, (uint32_t)best);
	/* the lost replicas it replaces leave the chain (they become spares
	 * if their node ever returns) */
	while (c->ntargets > c->want && state_of(m, c->targets[c->ntargets - 1]) == TARGET_OFFLINE)
		c->ntargets--;
	chain_bump(m, (uint32_t)best);
	return true;
}

struct node_free {
	uint32_t node_id;
	uint32_t n, next;
	uint32_t ids[NS_MAX_TARGETS];
};

static int by_free_desc(const void *a, const void *b)
{
	const struct node_free *x = a, *y = b;
	uint32_t lx = x->n - x->next, ly = y->n - y->next;

	if (lx != ly)
		return lx > ly ? -1 : 1;
	return x->node_id < y->node_id ? -1 : x->node_id > y->node_id;
}

/* Groups spare targets by node; returns the number of groups. */
static int group_spares(struct cmap *m, struct node_free *g, int cap)
{
	int ng = 0;

	for (uint32_t i = 0; i < m->nt; i++) {
		struct cluster_target *t = &m->t[i];
		if (t->state == TARGET_OFFLINE || chain_of(m, t->target_id) >= 0)
			continue;
		int k = 0;
		while (k < ng && g[k].node_id != t->node_id)
			k++;
		if (k == ng) {
			if (ng == cap)
				continue;
			g[ng++] = (struct node_free){.node_id = t->node_id};
		}
		if (g[k].n < NS_MAX_TARGETS)
			g[k].ids[g[k].n++] = t->target_id;
	}
	return ng;
}

static int nonempty(const struct node_free *g, int ng)
{
	int n = 0;

	for (int i = 0; i < ng; i++)
		n += g[i].next < g[i].n;
	return n;
}

static uint32_t chains_of_factor(const struct cmap *m, uint32_t r)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->nc; i++)
		n += m->c[i].want == r;
	return n;
}

/* One new chain of r targets on the r nodes with the most spares, its head
 * rotating with the number of chains of factor r. */
static int form_one(struct ns *ns, struct cmap *m, struct node_free *g, int ng, uint32_t r)
{
	qsort(g, (size_t)ng, sizeof(*g), by_free_desc);
	if (grow_c(m) < 0)
		return -ENOMEM;
	uint32_t rot = chains_of_factor(m, r) % r;
	struct strata_chain *c = &m->c[m->nc];
	*c = (struct strata_chain){
	    .chain_id = ns->next_chain++, .version = 1, .ntargets = (uint8_t)r, .want = (uint8_t)r};
	for (uint32_t j = 0; j < r; j++) {
		struct node_free *n = &g[(j + rot) % r];
		c->targets[j] = n->ids[n->next++];
		struct cluster_target *t = find_target(m, c->targets[j]);
		t->state = TARGET_OFFLINE;
		set_state(m, t, TARGET_SERVING); /* empty chain: all equal */
	}
	m->cdirty[m->nc++] = true;
	m->formed[r] = true;
	m->changed = true;
	return 0;
}

/* New chains from the spares: a round of the default factor d over the
 * nodes (the default table, which most files use, spans every node with
 * spares), one chain of every other factor that has none yet (so that each
 * factor the nodes allow has a table, from targets beyond one per node),
 * then as many of d as the spares make. */
static int form_chains(struct ns *ns, struct cmap *m, struct node_free *g, int ng)
{
	uint32_t nodes = (uint32_t)nonempty(g, ng), d = STRATA_MIN(ns->replicas, nodes);
	int e = 0;
	/* A cluster started for replication (expect_nodes > 1) keeps spares
	 * that cannot form a full chain; a single-node start takes what it has. */
	if (d == 0 || (ns->expect_nodes > 1 && d < STRATA_MIN(ns->replicas, ns->expect_nodes)))
		return 0;
	for (uint32_t k = nodes / d; e == 0 && k > 0; k--) /* on distinct nodes */
		e = form_one(ns, m, g, ng, d);
	for (uint32_t r = 1; e == 0 && r <= STRATA_MAX_REPLICAS; r++)
		if (r != d && chains_of_factor(m, r) == 0 && (uint32_t)nonempty(g, ng) >= r)
			e = form_one(ns, m, g, ng, r);
	while (e == 0 && (uint32_t)nonempty(g, ng) >= d)
		e = form_one(ns, m, g, ng, d);
	return e;
}

/* A new table for every factor that got chains (all chains of the factor),
 * and the root on the newest table of its factor. */
static int new_tables(struct ns *ns, struct cmap *m, struct kv_batch *b)
{
	_cleanup_free_ uint32_t *ids = calloc(m->nc ? m->nc : 1, sizeof(*ids));
	int e = ids ? 0 : -ENOMEM;

	for (uint32_t r = 1; e == 0 && r <= STRATA_MAX_REPLICAS; r++) {
		if (!m->formed[r])
			continue;
		int n = 0;
		for (uint32_t i = 0; i < m->nc; i++)
			if (m->c[i].want == r)
				ids[n++] = m->c[i].chain_id;
		e = cluster_new_table(ns, b, (uint8_t)r, ids, n);
	}
	return e ?: cluster_point_root(ns, b);
}

static uint32_t live_nodes(struct cmap *m)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->nt; i++) {
		bool seen = m->t[i].state == TARGET_OFFLINE;
		for (uint32_t j = 0; j < i && !seen; j++)
			seen =
			    m->t[j].node_id == m->t[i].node_id && m->t[j].state != TARGET_OFFLINE;
		n += !seen;
	}
	return n;
}

int cmap_place(struct ns *ns, struct cmap *m, struct kv_batch *b)
{
	if (live_nodes(m) < ns->expect_nodes)
		return 0;
	for (uint32_t i = 0; i < m->nt; i++) {
		struct cluster_target *t = &m->t[i];
		if (t->state != TARGET_OFFLINE && chain_of(m, t->target_id) < 0)
			place_replacement(m, t);
	}
	_cleanup_free_ struct node_free *g = calloc(256, sizeof(*g));
	if (!g)
		return -ENOMEM;
	int r = form_chains(ns, m, g, group_spares(m, g, 256));
	return r < 0 ? r : new_tables(ns, m, b);
}

/* ---- liveness -------------------------------------------------------------- */

static struct ns_live *live_find(struct ns *ns, uint32_t node, bool add)
{
	for (uint32_t i = 0; i < ns->nlive; i++)
		if (ns->live[i].node_id == node)
			return &ns->live[i];
	if (!add)
		return NULL;
	if (ns->nlive == ns->caplive) {
		uint32_t cap = ns->caplive ? ns->caplive * 2 : 16;
		struct ns_live *l = realloc(ns->live, cap * sizeof(*l));
		if (!l)
			return NULL;
		ns->live = l;
		ns->caplive = cap;
	}
	ns->live[ns->nlive] = (struct ns_live){node, strata_mono_ms()};
	return &ns->live[ns->nlive++];
}

void ns_live_touch(struct ns *ns, uint32_t node_id)
{
	pthread_mutex_lock(&ns->live_mu);
	struct ns_live *l = live_find(ns, node_id, true);
	if (l)
		l->heard_ms = strata_mono_ms();
	pthread_mutex_unlock(&ns->live_mu);
}

/* Milliseconds since node was heard; a node never heard in this run starts
 * its lease now (grace after a restart of strata-meta). */
static int64_t live_age(struct ns *ns, uint32_t node_id)
{
	pthread_mutex_lock(&ns->live_mu);
	struct ns_live *l = live_find(ns, node_id, true);
	int64_t age = l ? strata_mono_ms() - l->heard_ms : 0;
	pthread_mutex_unlock(&ns->live_mu);
	return age;
}

bool ns_probe_due(struct ns *ns, uint32_t target_id)
{
	struct ns_live *slot = &ns->probes[target_id % NS_PROBE_SLOTS];
	int64_t now = strata_mono_ms();
	pthread_mutex_lock(&ns->live_mu);
	bool due = slot->node_id != target_id || now - slot->heard_ms >= NS_PROBE_EVERY_MS;
	if (due)
		*slot = (struct ns_live){target_id, now};
	pthread_mutex_unlock(&ns->live_mu);
	return due;
}

int ns_set_cluster_opts(struct ns *ns, uint32_t lease_ms, uint32_t replicas, uint32_t expect_nodes)
{
	if (lease_ms < 200 || replicas < 1 || replicas > STRATA_MAX_REPLICAS || expect_nodes < 1)
		return -EINVAL;
	ns->lease_ms = lease_ms;
	sbnodes_set_lease(ns->sbnodes, lease_ms);
	ns->replicas = replicas;
	ns->expect_nodes = expect_nodes;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	ns_pick_default_table(ns); /* the default factor may have changed */
	return 0;
}

/* Writes m's changes (and the counters) as one batch. */
static int commit_map(struct ns *ns, struct cmap *m)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();

	if (!b)
		return -ENOMEM;
	if (!cmap_write(m, b))
		return 0;
	ns->routing_version++;
	cluster_put_counters(ns, b);
	return ns_commit(ns, b);
}

int ns_lease_check(struct ns *ns)
{
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct cmap *m = NULL;
	int r = cmap_load(ns, &m), failed = 0;

	if (r < 0)
		return r;
	for (uint32_t i = 0; i < m->nt; i++) {
		struct cluster_target *t = &m->t[i];
		if (t->state == TARGET_OFFLINE || live_age(ns, t->node_id) <= ns->lease_ms)
			continue;
		cmap_node_down(m, t->node_id);
		failed++;
	}
	r = commit_map(ns, m);
	cmap_free(m);
	return r < 0 ? r : failed;
}

int ns_fail_target_node(struct ns *ns, uint32_t target_id)
{
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct cmap *m = NULL;
	int r = cmap_load(ns, &m);

	if (r < 0)
		return r;
	struct cluster_target *t = find_target(m, target_id);
	if (t)
		cmap_node_down(m, t->node_id);
	r = t ? commit_map(ns, m) : -ENOENT;
	cmap_free(m);
	return r;
}

static void prog_set(struct ns *ns, uint32_t target, uint64_t done, uint64_t total)
{
	pthread_mutex_lock(&ns->live_mu);
	uint32_t i = 0;
	while (i < ns->nprog && ns->prog[i].target_id != target)
		i++;
	if (i == ns->nprog && ns->nprog == ns->capprog) {
		uint32_t cap = ns->capprog ? ns->capprog * 2 : 16;
		struct ns_prog *p = realloc(ns->prog, cap * sizeof(*p));
		if (p) {
			ns->prog = p;
			ns->capprog = cap;
		}
	}
	if (i < ns->capprog) {
		ns->prog[i] = (struct ns_prog){target, done, total};
		if (i == ns->nprog)
			ns->nprog++;
	}
	pthread_mutex_unlock(&ns->live_mu);
}

int ns_sync_done(struct ns *ns, const struct mgmt_sync *s)
{
	prog_set(ns, s->target_id, s->done, s->total);
	if (!s->finished)
		return 0;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct cmap *m = NULL;
	int r = cmap_load(ns, &m);

	if (r < 0)
		return r;
	r = cmap_synced(m, s);
	if (r == 0)
		r = commit_map(ns, m);
	cmap_free(m);
	return r;
}

/* ---- admin view ------------------------------------------------------------ */

static void fill_nodes(struct ns *ns, struct cmap *m, struct mgmt_cluster *c)
{
	for (uint32_t i = 0; i < m->nt; i++) {
		bool seen = false;
		for (uint32_t j = 0; j < c->nnodes && !seen; j++)
			seen = c->nodes[j].node_id == m->t[i].node_id;
		if (seen)
			continue;
		struct mgmt_node_info *n = &c->nodes[c->nnodes++];
		n->node_id = m->t[i].node_id;
		snprintf(n->addr, sizeof(n->addr), "%s", m->t[i].addr);
		n->age_ms = live_age(ns, n->node_id);
		n->alive = n->age_ms <= ns->lease_ms;
	}
}

static void fill_targets(struct ns *ns, struct cmap *m, struct mgmt_cluster *c)
{
	for (uint32_t i = 0; i < m->nt; i++) {
		struct cluster_target *t = &m->t[i];
		struct mgmt_target_detail *d = &c->targets[c->ntargets++];
		int ci = chain_of(m, t->target_id);
		*d = (struct mgmt_target_detail){.target_id = t->target_id,
						 .node_id = t->node_id,
						 .chain_id = ci >= 0 ? m->c[ci].chain_id : 0,
						 .state = t->state,
						 .total_bytes = t->total_bytes,
						 .free_bytes = t->free_bytes};
		snprintf(d->path, sizeof(d->path), "%s", t->path);
		pthread_mutex_lock(&ns->live_mu);
		for (uint32_t k = 0; k < ns->nprog; k++)
			if (ns->prog[k].target_id == t->target_id) {
				d->sync_done = ns->prog[k].done;
				d->sync_total = ns->prog[k].total;
			}
		pthread_mutex_unlock(&ns->live_mu);
	}
}

int ns_cluster(struct ns *ns, struct mgmt_cluster *ret)
{
	struct mgmt_cluster c = {
	    .lease_ms = ns->lease_ms, .replicas = ns->replicas, .expect_nodes = ns->expect_nodes};
	struct cmap *m = NULL;
	int r;

	{
		_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
		r = cmap_load(ns, &m);
	}
	if (r < 0)
		return r;
	c.nodes = calloc(m->nt ? m->nt : 1, sizeof(*c.nodes));
	c.targets = calloc(m->nt ? m->nt : 1, sizeof(*c.targets));
	if (!c.nodes || !c.targets) {
		mgmt_cluster_done(&c);
		cmap_free(m);
		return -ENOMEM;
	}
	fill_nodes(ns, m, &c);
	fill_targets(ns, m, &c);
	cmap_free(m);
	*ret = c;
	return 0;
}
