/* replica.h — the replication engine of strata-chunkserver: CRAQ over the
 * chains of strata-meta's routing table (see replica.c for the protocol, its
 * invariants and state diagram), and the resync that fills a returning or
 * replacement target from its predecessor (resync.c, resync.h; what the two
 * share is in replica-internal.h).
 *
 * service.c hands it the chunk requests of the write and read path when one
 * is attached (cs_service.repl), and resync's to resync_handle; without one
 * (in-process tests) requests are served locally with no chain checks, as
 * before replication. */
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
/* Starts the resync thread (resync_main). Returns 0 or -errno. */
int repl_start(struct repl *rp);

/* Serves one decoded READ, WRITE, WRITE_EX, TRUNCATE or REMOVE_FILE for
 * target cs (else -EOPNOTSUPP). Same contract as cs_handle;
 * adds -ESTALE (chain version or position mismatch: refetch routing),
 * -EAGAIN (retry: a pending write on a non-tail replica, or the successor
 * failed and was reported). */
int repl_handle(struct repl *rp, struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		struct wbuf *reply);

/* The position of rt's target in rt's chain by the current table, or -1
 * (no table, chain or target). For service.c's choice of worker pool. */
int repl_chain_pos(struct repl *rp, const struct chunk_route *rt);
