/* cluster.c — the cluster map: nodes, targets, chains and chain tables.
 *
 * A chunkserver registers (MSG_MGMT_REGISTER) with its address and targets;
 * new nodes and targets get ids from persisted counters. Which chains the
 * targets join, and how their states change, is chainmap.c's business:
 * registration loads the map, records the node's targets in it, brings them
 * back (cmap_node_up), places spares (cmap_place) and writes everything in
 * one batch. Chain tables are kept per replication factor: whenever chains
 * of factor r are formed, a new table holding every chain of factor r is
 * created and becomes r's newest (ns->factor_table[r]); a new file or
 * directory takes the newest table of its parent's factor (ns_table_for),
 * so new chains are used at once while old files keep their table. The
 * default table (ns->newest_table) is the newest of the largest factor up
 * to --replicas; the root directory starts on it (tables.c). The routing
 * version bumps on every change of nodes, targets, chains or tables;
 * heartbeats refresh sizes, last-seen times and the node's lease, and bring
 * back targets that were taken out while the node still lived.
 *
 * The node, target, chain and table records and their codecs are in
 * records.c, with the meta store's other records. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fs/cleanup.h"
#include "meta/ns-internal.h"

int cluster_get_target(struct ns *ns, uint32_t id, struct cluster_target *ret)
{
	_cleanup_free_ uint8_t *v = NULL;
	struct key k;
	size_t n;
	int r;

	key_id(&k, K_TARGET, id);
	r = kv_get(ns->kv, k.b, k.len, (void **)&v, &n);
	if (r < 0)
		return r;
	r = cluster_target_decode(v, n, ret);
	ret->target_id = id;
	return r;
}

/* ---- collecting records into growable arrays ----------------------------- */

struct collect {
	struct strata_routing *r;
	const struct ns *ns;
};

static int grow(void **arr, uint32_t n, size_t size)
{
	if (n & (n - 1)) /* grow at powers of two */
		return 0;
	void *p = realloc(*arr, (n ? n * 2 : 4) * size);
	if (!p)
		return -ENOMEM;
	*arr = p;
	return 0;
}

static int collect_target(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct strata_routing *r = ((struct collect *)ctx)->r;
	struct cluster_target ct;

	if (kl != 5 || cluster_target_decode(v, vl, &ct) < 0)
		return -EIO;
	if (grow((void **)&r->targets, r->ntargets, sizeof(*r->targets)) < 0)
		return -ENOMEM;
	struct strata_target *t = &r->targets[r->ntargets++];
	memset(t, 0, sizeof(*t));
	t->target_id = key_get_u32(k + 1);
	t->node_id = ct.node_id;
	t->state = ct.state;
	memcpy(t->addr, ct.addr, sizeof(t->addr));
	return 0;
}

static int collect_chain(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct strata_routing *r = ((struct collect *)ctx)->r;

	if (grow((void **)&r->chains, r->nchains, sizeof(*r->chains)) < 0)
		return -ENOMEM;
	int e = cluster_chain_decode(k, kl, v, vl, &r->chains[r->nchains]);
	if (e == 0)
		r->nchains++;
	return e;
}

static int collect_table(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct collect *c = ctx;
	struct strata_routing *r = c->r;
	struct rbuf b;
	uint32_t n;

	if (cluster_table_decode(k, kl, v, vl, &b, &n) < 0)
		return -EIO;
	if (grow((void **)&r->tables, r->ntables, sizeof(*r->tables)) < 0)
		return -ENOMEM;
	struct strata_chain_table *t = &r->tables[r->ntables];
	t->table_id = key_get_u32(k + 1);
	t->nchains = n;
	t->chain_ids = calloc(n ? n : 1, sizeof(uint32_t));
	if (!t->chain_ids)
		return -ENOMEM;
	r->ntables++;
	for (uint32_t i = 0; i < n; i++)
		t->chain_ids[i] = rbuf_get_u32(&b);
	t->replicas = ns_table_factor(c->ns, t->table_id);
	return 0;
}

static int scan_tag(struct ns *ns, uint8_t tag, kv_scan_fn fn, struct strata_routing *r)
{
	struct collect c = {r, ns};

	return kv_scan(ns->kv, &tag, 1, NULL, 0, fn, &c);
}

/* Reads the map; called under ns->mu by ns_routing (so version and records
 * agree). */
static int routing_locked(struct ns *ns, struct strata_routing *r)
{
	int e;

	memset(r, 0, sizeof(*r));
	r->version = ns->routing_version;
	r->lease_ms = ns->lease_ms;
	e = scan_tag(ns, K_TARGET, collect_target, r);
	if (e == 0)
		e = scan_tag(ns, K_CHAIN, collect_chain, r);
	if (e == 0)
		e = scan_tag(ns, K_TABLE, collect_table, r);
	if (e < 0)
		strata_routing_done(r);
	return e;
}

int ns_routing(struct ns *ns, struct strata_routing *ret)
{
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);

	return routing_locked(ns, ret);
}

/* ---- register ------------------------------------------------------------ */

void cluster_put_counters(struct ns *ns, struct kv_batch *b)
{
	ns_put_counter(b, "next_node", ns->next_node);
	ns_put_counter(b, "next_target", ns->next_target);
	ns_put_counter(b, "next_chain", ns->next_chain);
	ns_put_counter(b, "next_table", ns->next_table);
	ns_put_counter(b, "newest_table", ns->newest_table);
	ns_put_counter(b, "routing_version", ns->routing_version);
}

/* Records one target of the registering node in the map; a new one gets an
 * id (it joins a chain in cmap_place). */
static int reg_target(struct ns *ns, struct cmap *m, uint32_t node_id, const char *addr,
		      int64_t now, struct mgmt_target_info *ti, bool *changed)
{
	struct cluster_target t = {0};
	bool fresh;

	if (!ti->target_id)
		ti->target_id = ns->next_target++;
	else if (ti->target_id >= ns->next_target)
		ns->next_target = ti->target_id + 1;
	t.target_id = ti->target_id;
	t.node_id = node_id;
	t.state = TARGET_SERVING;
	snprintf(t.path, sizeof(t.path), "%s", ti->path);
	snprintf(t.addr, sizeof(t.addr), "%s", addr);
	t.total_bytes = ti->total_bytes;
	t.free_bytes = ti->free_bytes;
	t.fsid = ti->fsid;
	t.last_seen_ns = now;
	int r = cmap_upsert_target(m, &t, &fresh);
	if (fresh)
		*changed = true;
	return r;
}

static int register_locked(struct ns *ns, struct kv_batch *b, uint32_t *node_id, const char *addr,
			   struct mgmt_target_info *targets, int ntargets)
{
	struct cmap *m = NULL;
	bool changed = false;
	int64_t now = ns_now();
	int r = cmap_load(ns, &m);

	if (r < 0)
		return r;
	if (!*node_id) {
		*node_id = ns->next_node++;
		changed = true;
	} else if (*node_id >= ns->next_node) {
		ns->next_node = *node_id + 1;
		changed = true;
	}
	cluster_put_node(b, *node_id, addr, now);
	for (int i = 0; i < ntargets && r == 0; i++)
		r = reg_target(ns, m, *node_id, addr, now, &targets[i], &changed);
	if (r == 0) {
		uint32_t ids[NS_MAX_TARGETS];
		for (int i = 0; i < ntargets; i++)
			ids[i] = targets[i].target_id;
		cmap_node_up(m, *node_id, ids, ntargets, true);
		r = cmap_place(ns, m, b);
	}
	if (r == 0 && (cmap_write(m, b) || changed))
		ns->routing_version++;
	cmap_free(m);
	if (r < 0)
		return r;
	cluster_put_counters(ns, b);
	return ns_commit(ns, b);
}

int ns_register(struct ns *ns, uint32_t *node_id, const char *addr,
		struct mgmt_target_info *targets, int ntargets)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	uint32_t node = *node_id;
	int r;

	if (!b)
		return -ENOMEM;
	if (ntargets < 0 || ntargets > NS_MAX_TARGETS || !addr || !addr[0] ||
	    strlen(addr) >= sizeof(((struct strata_target *)0)->addr))
		return -EINVAL;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	r = register_locked(ns, b, &node, addr, targets, ntargets);
	if (r == 0) {
		*node_id = node;
		ns_live_touch(ns, node);
	}
	return r;
}

/* ---- heartbeat ----------------------------------------------------------- */

/* A live node whose targets were taken out (a lease that ran out under load,
 * a failed probe) brings them back: waiting, then resynced. */
static int returning_locked(struct ns *ns, struct kv_batch *b, uint32_t node_id,
			    const struct mgmt_target_info *targets, int ntargets)
{
	uint32_t ids[NS_MAX_TARGETS];
	struct cmap *m = NULL;
	int r = cmap_load(ns, &m);

	if (r < 0)
		return r;
	for (int i = 0; i < ntargets; i++)
		ids[i] = targets[i].target_id;
	cmap_node_up(m, node_id, ids, ntargets, false);
	if (cmap_write(m, b)) {
		ns->routing_version++;
		cluster_put_counters(ns, b);
	}
	cmap_free(m);
	return 0;
}

static int heartbeat_locked(struct ns *ns, struct kv_batch *b, uint32_t node_id,
			    const struct mgmt_target_info *targets, int ntargets)
{
	struct cluster_target t;
	struct key k;
	int64_t now = ns_now();
	int r;

	key_id(&k, K_NODE, node_id);
	if ((r = kv_exists(ns->kv, k.b, k.len)) < 0)
		return r; /* -ENOENT: the chunkserver registers again */
	for (int i = 0; i < ntargets; i++) {
		if ((r = cluster_get_target(ns, targets[i].target_id, &t)) < 0)
			return r;
		if (t.node_id != node_id)
			return -EINVAL;
		t.total_bytes = targets[i].total_bytes;
		t.free_bytes = targets[i].free_bytes;
		t.fsid = targets[i].fsid;
		t.last_seen_ns = now;
		cluster_put_target(b, &t);
	}
	return returning_locked(ns, b, node_id, targets, ntargets);
}

int ns_heartbeat(struct ns *ns, uint32_t node_id, const struct mgmt_target_info *targets,
		 int ntargets)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	int r;

	if (!b)
		return -ENOMEM;
	if (ntargets < 0 || ntargets > NS_MAX_TARGETS)
		return -EINVAL;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	r = heartbeat_locked(ns, b, node_id, targets, ntargets);
	if (r == 0)
		ns_live_touch(ns, node_id);
	if (r < 0 || kv_batch_count(b) == 0)
		return r;
	return ns_commit(ns, b);
}
