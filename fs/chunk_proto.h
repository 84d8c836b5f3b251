/* chunk_proto.h — payloads of the chunkserver messages (MSG_CHUNK_* in
 * proto.h), with hand-written encoders and decoders over wbuf/rbuf.
 *
 * Every request but PING starts with a struct chunk_route: the target the
 * request is for, and the chain it belongs to with the chain version the
 * client routed by (room for CRAQ: a server may answer -ESTALE when the
 * version is old). Then, all fields little-endian:
 *
 *   READ        route, ino u64, index u32, off u32, len u32
 *               reply: the data bytes themselves (payload length = bytes
 *               read), so that they land in the caller's buffer
 *   WRITE       route, ino, index, off u32, len u32, chunk_size u32,
 *               flags u32, then len data bytes
 *               reply: chunk_stat (version u64, length u32, checksum u64)
 *   TRUNCATE    route, ino, index, len u32, chunk_size u32   reply: chunk_stat
 *   REMOVE      route, ino, index                            reply: empty
 *   REMOVE_FILE route, ino, first_index u32                  reply: removed u32
 *   SYNC        route                                        reply: empty
 *   STAT        route, ino, index                            reply: chunk_stat
 *   PING        empty                                        reply: empty
 *
 * Fields are only ever appended (a newer minor's trailing bytes are ignored),
 * except after WRITE's data and in READ's reply, which have no room: they
 * need new message numbers. Decoders never read past the payload and return
 * -EBADMSG for anything malformed, including out-of-range values (len above
 * CHUNK_IO_MAX, off+len past the chunk size, a chunk size that is not a power
 * of two in STRATA_MIN..MAX_CHUNK_SIZE). Fuzzed by fs/fuzz_chunk_proto.c. */
#pragma once
#include <stdint.h>
#include "chunk_client.h"
#include "wire.h"

/* The most bytes one READ or WRITE moves; larger ranges are split. */
#define CHUNK_IO_MAX (4u << 20)
/* WRITE flags */
#define CHUNK_WF_SYNC 0x1

struct chunk_route {
	uint32_t target_id;
	uint32_t chain_id;
	uint32_t chain_ver;
};

/* One request of any MSG_CHUNK_* type; which fields are used depends on it. */
struct chunk_req {
	struct chunk_route route;
	uint64_t ino;
	uint32_t index; /* first_index for REMOVE_FILE */
	uint32_t off, len;
	uint32_t chunk_size; /* WRITE, TRUNCATE */
	uint32_t flags;      /* WRITE */
	const void *data;    /* WRITE: len bytes; decode: points into the rbuf */
};

/* Encodes the request's fields. For WRITE only the fixed part is encoded: the
 * caller sends the data as a second iovec (no copy). Returns 0, -EINVAL for
 * an unknown type, or the wbuf's error. */
int chunk_req_encode(uint16_t type, const struct chunk_req *r, struct wbuf *b);
/* Returns 0, -EINVAL (unknown type) or -EBADMSG. */
int chunk_req_decode(uint16_t type, struct rbuf *b, struct chunk_req *ret);

void chunk_stat_put(struct wbuf *b, const struct chunk_stat *s);
/* Returns 0 or -EBADMSG. */
int chunk_stat_get(struct rbuf *b, struct chunk_stat *ret);
void chunk_count_put(struct wbuf *b, uint32_t n);
int chunk_count_get(struct rbuf *b, uint32_t *ret);
/* Checks a READ reply of n bytes for a request of len bytes. */
int chunk_read_reply_check(size_t n, uint32_t len);
