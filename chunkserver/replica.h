/* replica.h — the replication engine of strata-chunkserver: CRAQ over the
 * chains of strata-meta's routing table (see replica.c for the protocol, its
 * invariants and state diagram), and the resync that fills a returning or
 * replacement target from its predecessor (resync.c).
 *
 * service.c hands it every chunk request when one is attached
 * (cs_service.repl); without one (in-process tests) requests are served
 * locally with no chain checks, as before replication. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "fs/chunk_proto.h"
#include "fs/meta_client.h"
#include "fs/wire.h"

struct repl;
struct cs_service;
struct chunk_store;

/* Returns an engine that fetches routing through mc (borrowed) and serves
 * the targets published in svc (borrowed). Owned by the caller: repl_free. */
int repl_new(struct meta_client *mc, struct cs_service *svc, struct repl **ret);
/* Stops the resync thread (if started) and frees. NULL ok. */
void repl_free(struct repl *rp);
/* Fetches the routing table unless the last attempt is younger than
 * min_age_ms. Returns 0 or -errno (the old table stays in use). */
int repl_refresh(struct repl *rp, int min_age_ms);
/* Starts the resync thread. Returns 0 or -errno. */
int repl_start(struct repl *rp);

/* Serves one decoded request for target cs. Same contract as cs_handle;
 * adds -ESTALE (chain version or position mismatch: refetch routing),
 * -EAGAIN (retry: a pending write on a non-tail replica, or the successor
 * failed and was reported). */
int repl_handle(struct repl *rp, struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		struct wbuf *reply);

/* The position of rt's target in rt's chain by the current table, or -1
 * (no table, chain or target). For service.c's choice of worker pool. */
int repl_chain_pos(struct repl *rp, const struct chunk_route *rt);

/* ---- shared with resync.c ------------------------------------------------ */
/* Per-chunk ordering lock of (target, ino, index): held from the arrival of a
 * write to its local apply, across the forward. */
void repl_order_lock(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index);
void repl_order_unlock(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index);
/* Sends a request to the chunkserver at addr (pooled connection). */
int repl_call(struct repl *rp, const char *addr, uint16_t type, const struct chunk_req *req,
	      struct rpc_reply *reply);
struct meta_client *repl_meta(struct repl *rp);
bool repl_stopping(struct repl *rp);
struct cs_service *repl_service(struct repl *rp);
/* What the resync thread carries from one pass to the next (resync.c); it
 * owns it (on its stack) and passes it to every pass. Zero-initialised. */
struct resync_state {
	uint64_t tag_seq;     /* transfers tagged so far (part_tag) */
	uint32_t warned_peer; /* the last target warned about as too old ... */
	int64_t warned_ms;    /* ... and when (monotonic ms) */
	int64_t expired_ms;   /* the last staging expiry (monotonic ms) */
};
/* One pass of the resync (resync.c): every local target that is the last
 * serving one of its chain pushes to a syncing successor. */
void repl_resync_pass(struct repl *rp, struct resync_state *st);
/* A copy of the current routing table (strata_routing_done); -ENXIO if none. */
int repl_routing_copy(struct repl *rp, struct strata_routing *ret);
