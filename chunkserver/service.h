/* service.h — the MSG_CHUNK_* request handler of strata-chunkserver: decodes
 * a request, finds its target, runs it on the chunk engine and encodes the
 * reply. Separate from main.c so that tests can serve targets in-process. */
#pragma once
#include <stdint.h>
#include "rpc.h"

struct chunk_store;

struct cs_target {
	uint32_t target_id; /* assigned by strata-meta */
	struct chunk_store *store;
};

struct repl;

struct cs_service {
	struct cs_target *targets;
	int ntargets; /* published with __atomic_store_n (release) once the
		       * targets' ids are known; read with acquire */
	struct repl *repl; /* replication engine (replica.h); NULL: local only */
};

/* rpc_handler_fn; ctx is a struct cs_service. Errors: -EBADMSG (malformed
 * request), -EOPNOTSUPP (unknown message), -ENXIO (target not served here),
 * then the engine's (-EIO, -ENOSPC, -ENOENT for STAT of a missing chunk, ...). */
int cs_handle(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
	      const struct rpc_peer *peer);
