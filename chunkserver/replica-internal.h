/* replica-internal.h — what replica.c lends resync.c, the two halves of the
 * replication engine: the per-chunk ordering locks, pooled calls to the
 * other chunkservers, the routing table, the chain checks a resync request
 * needs, and the engine's stop flag. Not for use outside chunkserver/. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "fs/chunk_proto.h"
#include "fs/meta_client.h"
#include "fs/rpc.h"

struct repl;
struct cs_service;

/* Per-chunk ordering lock of (target, ino, index): held from the arrival of a
 * write to its local apply, across the forward (replica.c, invariant 2). */
void repl_order_lock(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index);
void repl_order_unlock(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index);
/* Sends a request to the chunkserver at addr (pooled connection). Returns 0
 * with the answer in *reply (rpc_reply_done), or -errno. */
int repl_call(struct repl *rp, const char *addr, uint16_t type, const struct chunk_req *req,
	      struct rpc_reply *reply);
/* The engine's strata-meta client and served targets (borrowed). */
struct meta_client *repl_meta(struct repl *rp);
struct cs_service *repl_service(struct repl *rp);
/* A copy of the current routing table (strata_routing_done); -ENXIO if none. */
int repl_routing_copy(struct repl *rp, struct strata_routing *ret);
/* Returns 0 if rt's target is syncing in rt's chain at rt's chain version by
 * our table (refetched first when the request's chain version is newer),
 * else -ESTALE: only such a target takes a resync's chunks. */
int repl_check_syncing(struct repl *rp, const struct chunk_route *rt);
/* Forgets a chunk's copy record (it was copied here from its successor,
 * replica.c invariant 8): a resync replaced or removed it. */
void repl_forget_pulled(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index);
/* True once repl_free began stopping the engine. */
bool repl_stopping(struct repl *rp);
/* Waits up to ms, or less when the engine stops. Returns repl_stopping. */
bool repl_wait_stop(struct repl *rp, int ms);
