/* server.h — the RPC face of strata-meta: one rpc_handler_fn that decodes a
 * MSG_META_* or MSG_MGMT_* request, runs it on the engine (ns.h) and encodes
 * the reply. ctx is the struct ns. Decode errors answer -EBADMSG; unknown
 * message types -EOPNOTSUPP. */
#pragma once
#include "fs/rpc.h"

int meta_handle(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
		const struct rpc_peer *peer);
