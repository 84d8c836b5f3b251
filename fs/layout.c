/* layout.c — mapping a file's chunks onto chains (layout.h): round robin
 * over the layout's chain table starting at stripe_seed, and lookups of
 * targets, chains and tables by id in a routing table. Linear scans: tables
 * hold tens to hundreds of entries and lookups are not on a hot path that a
 * scan would dominate (the RPC costs far more). */
#include "layout.h"

#include <stddef.h>

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
