/* layout.c — mapping a file's chunks onto chains (layout.h): round robin
 * over the layout's chain table starting at stripe_seed, and lookups of
 * targets, chains and tables by id in a routing table. Linear scans: tables
 * hold tens to hundreds of entries and lookups are not on a hot path that a
 * scan would dominate (the RPC costs far more). */
#include "fs/layout.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "fs/meta_client.h"

const struct strata_target *routing_target(const struct strata_routing *r, uint32_t target_id)
{
	for (uint32_t i = 0; r && i < r->ntargets; i++)
		if (r->targets[i].target_id == target_id)
			return &r->targets[i];
	return NULL;
}

const struct strata_chain *routing_chain(const struct strata_routing *r, uint32_t chain_id)
{
	for (uint32_t i = 0; r && i < r->nchains; i++)
		if (r->chains[i].chain_id == chain_id)
			return &r->chains[i];
	return NULL;
}

const struct strata_chain_table *routing_table(const struct strata_routing *r, uint32_t table_id)
{
	for (uint32_t i = 0; r && i < r->ntables; i++)
		if (r->tables[i].table_id == table_id)
			return &r->tables[i];
	return NULL;
}

const struct strata_chain *layout_chain_for_chunk(const struct strata_routing *r,
						  const struct strata_layout *layout,
						  uint32_t index)
{
	const struct strata_chain_table *t = routing_table(r, layout->table_id);
	if (!t || t->nchains == 0)
		return NULL;
	uint64_t slot = ((uint64_t)layout->stripe_seed + index) % t->nchains;
	return routing_chain(r, t->chain_ids[slot]);
}

/* ---- chains: positions and states (replication) ------------------------- */

int chain_pos(const struct strata_chain *c, uint32_t target_id)
{
	for (int i = 0; c && i < c->ntargets; i++)
		if (c->targets[i] == target_id)
			return i;
	return -1;
}

uint8_t routing_state(const struct strata_routing *r, uint32_t target_id)
{
	const struct strata_target *t = routing_target(r, target_id);
	return t ? t->state : TARGET_OFFLINE;
}

int chain_head(const struct strata_routing *r, const struct strata_chain *c)
{
	for (int i = 0; c && i < c->ntargets; i++)
		if (routing_state(r, c->targets[i]) == TARGET_SERVING)
			return i;
	return -1;
}

int chain_tail(const struct strata_routing *r, const struct strata_chain *c)
{
	int tail = -1;
	for (int i = 0; c && i < c->ntargets; i++)
		if (routing_state(r, c->targets[i]) == TARGET_SERVING)
			tail = i;
	return tail;
}

int chain_next_writer(const struct strata_routing *r, const struct strata_chain *c, int pos)
{
	for (int i = pos + 1; c && i < c->ntargets; i++) {
		uint8_t s = routing_state(r, c->targets[i]);
		if (s == TARGET_SERVING || s == TARGET_SYNCING)
			return i;
	}
	return -1;
}

int chain_nserving(const struct strata_routing *r, const struct strata_chain *c)
{
	int n = 0;
	for (int i = 0; c && i < c->ntargets; i++)
		n += routing_state(r, c->targets[i]) == TARGET_SERVING;
	return n;
}

static void *copy_array(const void *p, size_t n, size_t size)
{
	void *q = calloc(n ? n : 1, size);
	if (q && n)
		memcpy(q, p, n * size);
	return q;
}

int strata_routing_copy(const struct strata_routing *src, struct strata_routing *ret)
{
	struct strata_routing r = *src;
	r.ntables = 0;
	r.targets = copy_array(src->targets, src->ntargets, sizeof(*r.targets));
	r.chains = copy_array(src->chains, src->nchains, sizeof(*r.chains));
	r.tables = calloc(src->ntables ? src->ntables : 1, sizeof(*r.tables));
	int err = !r.targets || !r.chains || !r.tables ? -ENOMEM : 0;
	for (uint32_t i = 0; err == 0 && i < src->ntables; i++, r.ntables++) {
		r.tables[i] = src->tables[i];
		r.tables[i].chain_ids =
		    copy_array(src->tables[i].chain_ids, src->tables[i].nchains, sizeof(uint32_t));
		if (!r.tables[i].chain_ids)
			err = -ENOMEM;
	}
	if (err < 0) {
		strata_routing_done(&r);
		return err;
	}
	*ret = r;
	return 0;
}
