/* resync.h — the resync of strata-chunkserver (resync.c): the sending side,
 * a thread that fills each syncing successor of a chain whose tail is here,
 * and the receiving side, the requests that sending side makes (LIST, PUT,
 * PUT_PART), which service.c hands here when a replication engine is
 * attached. */
#pragma once
#include <stdint.h>
#include "fs/chunk_proto.h"
#include "fs/wire.h"

struct repl;
struct chunk_store;

/* The resync thread's body (pthread start routine; arg is the struct repl).
 * repl_start starts it, repl_free stops it: a pass every 200 ms, until the
 * engine stops. Returns NULL. */
void *resync_main(void *arg);

/* Serves one decoded resync request for target cs:
 *  - LIST: a page of cs's chunks after (ino, index) (CHUNK_LF_FIRST: from
 *    the start) with their state; with CHUNK_LF_VERIFY a chunk that does not
 *    read back whole lists as version 0. No chain check.
 *  - PUT: only a syncing target at the request's chain version takes one
 *    (else -ESTALE); under the chunk's ordering lock the whole chunk is put
 *    at the sender's version, or removed (CHUNK_PF_REMOVE); the reply is
 *    the chunk_stat put (zeros after a removal).
 *  - PUT_PART, a piece of a chunk larger than one message: the same check;
 *    under the chunk's ordering lock the piece goes to
 *    chunk_store_put_piece (its errors), and the reply is a chunk_stat (the
 *    published chunk after the last piece, zeros before).
 * Other types: -EOPNOTSUPP. Errors as cs_handle's otherwise. */
int resync_handle(struct repl *rp, struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		  struct wbuf *reply);
