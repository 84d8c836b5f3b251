/* tables.c — chain tables per replication factor.
 *
 * A chain table is the list of chains a layout stripes over. strata-meta
 * keeps tables per replication factor r (1..STRATA_MAX_REPLICAS): every
 * chain of a table was formed with `want` = r. When chains of factor r are
 * formed (chainmap.c, cmap_place), a new table of every chain of factor r is
 * written and becomes r's newest; older tables stay as they are, for the
 * files that name them (a file's layout never changes). A new file or
 * directory takes the newest table of its parent's factor (ns_table_for),
 * so new chains are used at once. The default table (ns->newest_table) is
 * the newest table of the largest factor up to --replicas; the root starts
 * on it, and a directory whose parent has no table (made before any chain
 * existed) gets it.
 *
 * The factors are kept in memory (ns->tables, ns->factor_table, under
 * ns->mu), loaded by ns_open. The table record and its codec are in
 * records.c. Its factor byte was appended: a table written before has none
 * and takes the smallest `want` of its chains (legacy_factor: a db of the
 * old single-table code gets the cluster's factor). */
#include <errno.h>
#include <stdlib.h>
#include "fs/cleanup.h"
#include "meta/ns-internal.h"

uint8_t ns_table_factor(const struct ns *ns, uint32_t table_id)
{
	for (uint32_t i = 0; i < ns->ntables; i++)
		if (ns->tables[i].table_id == table_id)
			return ns->tables[i].replicas;
	return 0;
}

uint32_t ns_factor_table(const struct ns *ns, uint32_t r)
{
	return r >= 1 && r <= STRATA_MAX_REPLICAS ? ns->factor_table[r] : 0;
}

uint32_t ns_table_for(const struct ns *ns, uint32_t table_id)
{
	if (!table_id)
		return ns->newest_table;
	return ns_factor_table(ns, ns_table_factor(ns, table_id)) ?: table_id;
}

/* newest_table: the largest factor up to --replicas that has a table, else
 * the smallest factor above it that has one. */
void ns_pick_default_table(struct ns *ns)
{
	uint32_t best = 0;

	for (uint32_t r = 1; r <= STRATA_MAX_REPLICAS; r++)
		if (ns->factor_table[r] && (r <= ns->replicas || !best))
			best = ns->factor_table[r];
	if (best)
		ns->newest_table = best;
}

static int remember(struct ns *ns, uint32_t id, uint8_t r)
{
	if (r < 1 || r > STRATA_MAX_REPLICAS)
		return -EIO;
	if (ns->ntables == ns->captables) {
		uint32_t cap = ns->captables ? ns->captables * 2 : 8;
		struct ns_table *t = realloc(ns->tables, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		ns->tables = t;
		ns->captables = cap;
	}
	ns->tables[ns->ntables++] = (struct ns_table){id, r};
	if (id > ns->factor_table[r])
		ns->factor_table[r] = id;
	return 0;
}

/* The smallest `want` of the chains ids (in b), for a record without factor. */
static uint8_t legacy_factor(struct ns *ns, struct rbuf *b, uint32_t n)
{
	uint8_t r = 0;

	for (uint32_t i = 0; i < n; i++) {
		_cleanup_free_ uint8_t *v = NULL;
		struct strata_chain c;
		struct key k;
		size_t vl;
		key_id(&k, K_CHAIN, rbuf_get_u32(b));
		if (kv_get(ns->kv, k.b, k.len, (void **)&v, &vl) == 0 &&
		    cluster_chain_decode(k.b, k.len, v, vl, &c) == 0 && (!r || c.want < r))
			r = c.want;
	}
	return r ? r : 1;
}

static int load_table(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct ns *ns = ctx;
	struct rbuf b;
	uint32_t n;

	if (cluster_table_decode(k, kl, v, vl, &b, &n) < 0)
		return -EIO;
	if (rbuf_remaining(&b) == (size_t)n * 4)
		return remember(ns, key_get_u32(k + 1), legacy_factor(ns, &b, n));
	for (uint32_t i = 0; i < n; i++)
		rbuf_get_u32(&b);
	return remember(ns, key_get_u32(k + 1), rbuf_get_u8(&b));
}

int cluster_load_tables(struct ns *ns)
{
	uint8_t tag = K_TABLE;
	int r = kv_scan(ns->kv, &tag, 1, NULL, 0, load_table, ns);

	if (r == 0)
		ns_pick_default_table(ns);
	return r;
}

int cluster_new_table(struct ns *ns, struct kv_batch *b, uint8_t r, const uint32_t *ids, int n)
{
	uint32_t table = ns->next_table;
	int e = remember(ns, table, r);

	if (e < 0)
		return e;
	ns->next_table++;
	e = cluster_put_table(b, table, r, ids, n);
	ns_pick_default_table(ns);
	return e;
}

int cluster_point_root(struct ns *ns, struct kv_batch *b)
{
	struct inode root;
	int r = ns_get_inode(ns, STRATA_ROOT_INO, &root);

	if (r < 0)
		return r;
	uint32_t t = ns_table_for(ns, root.a.layout.table_id);
	if (t != root.a.layout.table_id) {
		root.a.layout.table_id = t;
		ns_put_inode(b, &root);
	}
	return 0;
}
