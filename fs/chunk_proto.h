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
 *   WRITE_EX    as WRITE, then client_id u64, req_id u64, then the data
 *               (flags may carry CHUNK_WF_FWD: forwarded down the chain)
 *   LIST        route, ino, index (cursor), max u32, flags u32 (CHUNK_LF_FIRST:
 *               start at the beginning, else strictly after the cursor)
 *               reply: n u32, more u8, n x (ino u64, index u32, version u64,
 *               length u32, checksum u64; version 0 = damaged chunk)
 *   PUT         route, ino, index, version u64, len u32, chunk_size u32,
 *               flags u32 (CHUNK_PF_REMOVE), then len data bytes: replaces
 *               the chunk wholesale at that version (resync only)
 *   PUT_PART    route, ino, index, version u64, total u32, off u32, len u32,
 *               flags u32 (CHUNK_PP_FIRST, CHUNK_PP_LAST), tag u64,
 *               checksum u64, then len data bytes: one piece of a chunk of
 *               total bytes (above CHUNK_IO_MAX), sent in order from off 0;
 *               the receiver stages the pieces of one transfer (tag) and,
 *               with the last one, verifies the whole chunk against checksum
 *               (the source's chunk checksum) and publishes it at version
 *               (resync only; chunkserver/README.md "Resync of large chunks")
 *               reply: chunk_stat (after the last piece: the published chunk)
 *   TRUNCATE may carry trailing flags u32, client_id u64, req_id u64
 *   (appended fields: an old peer ignores them).
 *   READ_MANY   n u32 (1..CHUNK_READ_MANY_MAX), then n x READ's fields
 *               (route, ino, index, off, len; each entry its own target),
 *               their lengths summing to at most CHUNK_IO_MAX
 *               reply: n x (status i32, len u32, then len data bytes), in
 *               the order asked; an entry's status is what READ would have
 *               answered (its data absent unless 0). An old server answers
 *               the whole request -EOPNOTSUPP.
 *
 * Fields are only ever appended (a newer minor's trailing bytes are ignored),
 * except after WRITE's data and in READ's reply, which have no room: they
 * need new message numbers. Decoders never read past the payload and return
 * -EBADMSG for anything malformed, including out-of-range values (len above
 * CHUNK_IO_MAX, off+len past the chunk size, a chunk size that is not a power
 * of two in STRATA_MIN..MAX_CHUNK_SIZE). Fuzzed by fs/fuzz_chunk_proto.c. */
#pragma once
#include <stdint.h>
#include "fs/chunk_client.h"
#include "fs/wire.h"

/* The most bytes one READ or WRITE moves; larger ranges are split. */
#define CHUNK_IO_MAX (4u << 20)
/* WRITE flags */
#define CHUNK_WF_SYNC 0x1
#define CHUNK_WF_FWD 0x2 /* WRITE_EX/TRUNCATE: from the predecessor, not a client */
/* LIST flags */
#define CHUNK_LF_FIRST 0x1
#define CHUNK_LF_VERIFY 0x2 /* read every block; a damaged chunk lists as version 0 */
#define CHUNK_LIST_MAX 4096 /* entries per LIST page */
/* PUT flags */
#define CHUNK_PF_REMOVE 0x1 /* the source has no such chunk: remove it */
/* PUT_PART flags */
#define CHUNK_PP_FIRST 0x1 /* starts the transfer (drops any partial one) */
#define CHUNK_PP_LAST 0x2  /* ends it: verify and publish */

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
	uint32_t chunk_size;	    /* WRITE, TRUNCATE */
	uint32_t flags;		    /* WRITE */
	const void *data;	    /* WRITE: len bytes; decode: points into the rbuf */
	uint64_t client_id, req_id; /* WRITE_EX, TRUNCATE: exactly-once; 0 = none */
	uint64_t version;	    /* PUT, PUT_PART */
	uint32_t total;		    /* PUT_PART: the whole chunk's length */
	uint64_t tag;		    /* PUT_PART: the transfer, chosen by the sender */
	uint64_t checksum;	    /* PUT_PART: the source's chunk checksum */
	/* Not on the wire: set by the server when the frame carried the data
	 * as WIRE_F_DATA (rpc_peer.data), already verified. data_hash lets a
	 * forward re-seal without reading the data; data_sums are the XXH3-64s
	 * of its 64 KiB pieces (wire_data_hash), NULL if not known. */
	bool data_hashed;
	uint64_t data_hash;
	const uint64_t *data_sums;
};

/* One LIST entry. */
struct chunk_list_ent {
	uint64_t ino;
	uint32_t index;
	struct chunk_stat st;
};
void chunk_list_put(struct wbuf *b, const struct chunk_list_ent *e, uint32_t n, bool more);
/* Decodes up to cap entries into ents. Returns the count or -EBADMSG. */
int chunk_list_get(struct rbuf *b, struct chunk_list_ent *ents, uint32_t cap, bool *ret_more);

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

/* ---- READ_MANY ---- */
#define CHUNK_READ_MANY_MAX 64	 /* entries per request */
#define CHUNK_READ_MANY_ENTRY 32 /* bytes of one entry: READ's fields */
/* Encodes n READ requests (1..CHUNK_READ_MANY_MAX; their route set) as one
 * READ_MANY. Returns 0, -EINVAL (n out of range, lengths above CHUNK_IO_MAX)
 * or the wbuf's error. */
int chunk_read_many_encode(const struct chunk_req *reqs, uint32_t n, struct wbuf *b);
/* Decodes a READ_MANY request into reqs[0..cap). Returns the count or
 * -EBADMSG (an entry READ would refuse, a count or total out of range,
 * trailing bytes). */
int chunk_read_many_decode(struct rbuf *b, struct chunk_req *reqs, uint32_t cap);
/* One entry of a READ_MANY reply: its status and data (pointing into the
 * reply). */
struct chunk_read_ans {
	int status;
	const void *data;
	uint32_t len;
};
/* Decodes a reply to n requests of lengths reqs[i].len into ans[0..n):
 * 0, or -EBADMSG (fewer or more entries, an entry longer than asked, a
 * positive status). */
int chunk_read_many_reply_get(struct rbuf *b, const struct chunk_req *reqs, uint32_t n,
			      struct chunk_read_ans *ans);
