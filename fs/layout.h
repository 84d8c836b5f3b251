/* layout.h — mapping a file's chunks onto chains. Pure functions. */
#pragma once
#include "fs/types.h"

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

/* Chains (replication). Positions are indexes into c->targets; -1 = none.
 * Writes enter at the head (first serving target) and go down through the
 * serving and syncing targets; the tail (last serving) commits. */
int chain_pos(const struct strata_chain *c, uint32_t target_id);
/* The target's state; TARGET_OFFLINE if it is not in the table. */
uint8_t routing_state(const struct strata_routing *r, uint32_t target_id);
int chain_head(const struct strata_routing *r, const struct strata_chain *c);
int chain_tail(const struct strata_routing *r, const struct strata_chain *c);
/* The next target after pos that receives writes (serving or syncing). */
int chain_next_writer(const struct strata_routing *r, const struct strata_chain *c, int pos);
int chain_nserving(const struct strata_routing *r, const struct strata_chain *c);
/* Deep copy, released with strata_routing_done. Returns 0 or -ENOMEM. */
int strata_routing_copy(const struct strata_routing *src, struct strata_routing *ret);
