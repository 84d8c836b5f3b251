/* layout.h — mapping a file's chunks onto chains. Pure functions. */
#pragma once
#include "types.h"

/* Returns the chain for chunk `index` of a file with this layout, or NULL if
 * the layout's table is unknown or empty. Chunks are striped round-robin over
 * the table starting at stripe_seed: consecutive chunks land on different
 * chains, so one large file spreads over every disk. */
const struct strata_chain *layout_chain_for_chunk(const struct strata_routing *r,
						  const struct strata_layout *layout,
						  uint32_t index);
const struct strata_target *routing_target(const struct strata_routing *r, uint32_t target_id);
const struct strata_chain *routing_chain(const struct strata_routing *r, uint32_t chain_id);
const struct strata_chain_table *routing_table(const struct strata_routing *r, uint32_t table_id);
