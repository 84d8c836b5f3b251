/* service.h — the MSG_CHUNK_* request handler of strata-chunkserver: decodes
 * a request, finds its target, runs it on the chunk engine and encodes the
 * reply. Separate from main.c so that tests can serve targets in-process. */
#pragma once
#include <stdint.h>
#include "fs/rpc.h"
#include "fs/types.h"

struct chunk_store;
struct chunk_req;
struct chunk_stat;
struct wbuf;

struct cs_target {
	uint32_t target_id; /* assigned by strata-meta */
	struct chunk_store *store;
};

struct repl;

struct cs_service {
	struct cs_target *targets;
	int ntargets;	   /* published with __atomic_store_n (release) once the
			    * targets' ids are known; read with acquire */
	struct repl *repl; /* replication engine (replica.h); NULL: local only */
};

/* Worker pools of the daemon's RPC server (cs_pool_of): a request for a
 * target at chain position p runs in pool p (0: clients' writes at the head,
 * reads, anything not in a chain), PING (strata-meta's probes) and messages
 * that are not chunk requests in CS_POOL_CONTROL. */
#define CS_POOL_CLIENT 0
#define CS_POOL_CONTROL STRATA_MAX_REPLICAS
#define CS_NPOOLS (STRATA_MAX_REPLICAS + 1)

/* rpc_pool_fn; ctx is a struct cs_service. A request only ever waits on
 * requests for targets further down its chain (a forward, a reconcile's
 * barrier and read, a resync's LIST and PUT, or an ordering lock held by a
 * write that forwards), so pools by position cannot wait on each other in
 * a cycle, across any number of nodes and chains (chunkserver/README.md
 * "Worker pools"). The position is looked up in this node's routing table. */
int cs_pool_of(void *ctx, uint16_t type, const uint8_t *payload, size_t len);

/* rpc_handler_fn; ctx is a struct cs_service. Errors: -EBADMSG (malformed
 * request), -EOPNOTSUPP (unknown message), -ENXIO (target not served here),
 * then the engine's (-EIO, -ENOSPC, -ENOENT for STAT of a missing chunk, ...). */
int cs_handle(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
	      const struct rpc_peer *peer);

/* Reads r's range (r->off, r->len) of chunk (r->ino, r->index) of cs into
 * reply, straight into its buffer: no chain checks (the caller made them).
 * Past the chunk's end the reply is short: only the bytes the chunk has,
 * none for a missing chunk. Returns 0, -ENOMEM, or chunk_store_read's
 * error. Used by cs_handle without and repl_handle with replication. */
int cs_read_local(struct chunk_store *cs, const struct chunk_req *r, struct wbuf *reply);
/* Applies r locally to cs: a TRUNCATE to r->len, else (WRITE, WRITE_EX) a
 * write of r->data at r->off with its piece sums (r->data_sums, may be
 * NULL) and CHUNK_WF_SYNC. No chain checks. *ret gets the chunk's new state
 * (zeros on failure). Returns 0 or the engine's error (-EFBIG, -ENOSPC,
 * -EIO, ...). Used by cs_handle without and repl_handle with replication. */
int cs_write_local(struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		   struct chunk_stat *ret);
