/* resync.h — the receiving side of a resync that resync.c implements:
 * MSG_CHUNK_PUT_PART, a piece of a chunk larger than one message (service.c
 * hands it here when a replication engine is attached). The sending side,
 * repl_resync_pass, is declared in replica.h. */
#pragma once
#include "fs/chunk_proto.h"
#include "fs/wire.h"

struct repl;
struct chunk_store;

/* Serves one PUT_PART for target cs: only a syncing target at the request's
 * chain version takes one (else -ESTALE); under the chunk's ordering lock the
 * piece goes to chunk_store_put_piece (its errors), and the reply is a
 * chunk_stat (the published chunk after the last piece, zeros before). */
int resync_put_part(struct repl *rp, struct chunk_store *cs, const struct chunk_req *r,
		    struct wbuf *reply);
