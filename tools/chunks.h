/* chunks.h — the CLI's calls to chunkservers (`strata admin verify`,
 * `strata fsck`): one request to one target of a chain, chunk listings,
 * a chunk's state. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/chunk_proto.h"
#include "fs/layout.h"
#include "fs/rpc.h"

/* One idempotent request to target t of chain ch (routed by the chain's
 * current version); the reply in *rep (rpc_reply_done it). */
int cli_chunk_call(const struct strata_target *t, const struct strata_chain *ch, uint16_t type,
		   struct chunk_req *q, struct rpc_reply *rep);
/* Up to max entries after (ino, index) (first: from the start); deep: every
 * block read, a damaged chunk listed as version 0. Returns the count. */
int cli_chunk_list_page(const struct strata_target *t, const struct strata_chain *ch, bool first,
			uint64_t ino, uint32_t index, uint32_t max, bool deep,
			struct chunk_list_ent *v, bool *more);
/* Every chunk of the target, in (ino, index) order; *ret is malloc'ed. */
int cli_chunk_list_all(const struct strata_target *t, const struct strata_chain *ch, bool deep,
		       struct chunk_list_ent **ret, size_t *ret_n);
/* A chunk's state on one target; a missing chunk is version 0, length 0. */
int cli_chunk_stat(const struct strata_target *t, const struct strata_chain *ch, uint64_t ino,
		   uint32_t index, struct chunk_stat *st);
