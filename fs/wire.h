/* wire.h — the RPC wire format and the little-endian field codec.
 *
 * Every message on the wire is one frame:
 *
 *   offset size field
 *   0      4    magic        0x41525453 ("STRA" little-endian)
 *   4      1    major        WIRE_MAJOR; a peer with another major is refused
 *   5      1    minor        WIRE_MINOR; newer minors are served
 *   6      2    flags        WIRE_F_REPLY, WIRE_F_DATA
 *   8      2    type         message type (proto.h)
 *   10     2    reserved     0
 *   12     4    status       replies: 0 or a negative errno; requests: 0
 *   16     8    req_id       chosen by the caller, echoed by the reply
 *   24     4    payload_len  bytes after the header, <= WIRE_MAX_PAYLOAD
 *   28     4    data_off     with WIRE_F_DATA: where the payload's bulk data
 *                            starts (<= payload_len); else 0
 *   32     8    checksum     XXH3-64 of the payload, seeded with XXH3-64 of
 *                            header bytes 0..31 (so header and payload are
 *                            both covered); with WIRE_F_DATA see below
 *   40          payload
 *
 * WIRE_F_DATA (minor >= 1): the payload is fields [0, data_off) followed by
 * bulk data [data_off, payload_len). The data is summed on its own:
 *   data_hash = XXH3-64 of the little-endian XXH3-64s of its consecutive
 *               WIRE_DATA_PIECE-byte pieces (the last one shorter),
 *   checksum  = XXH3-64 of (fields, then data_hash as 8 LE bytes), seeded
 *               with XXH3-64 of header bytes 0..31.
 * Every byte is still covered, and a hop that forwards the same data with
 * new fields (chain replication) re-seals from the data_hash it computed
 * while verifying the frame, without reading the data again; the piece sums
 * are a chunk's 64 KiB block checksums when the data is block aligned, so
 * the chunkserver verifies and checksums the data in one pass. A sender
 * uses the flag only towards a peer that answered with minor >= 1 on that
 * connection (rpc_client.c): an older peer would refuse the frame.
 *
 * Payload fields are fixed-width little-endian, written and read by the
 * wbuf_put_* / rbuf_get_* functions below, never by casting a struct.
 *
 * Invariants:
 *  1. A frame is accepted only if magic, major, length and checksum are valid;
 *     anything else closes the connection (the stream cannot be resynced).
 *  2. rbuf getters never read past the end: an overrun sets rbuf.err = -EBADMSG
 *     and returns zeros; decoders check rbuf_done() once at the end. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WIRE_MAGIC 0x41525453u
/* 2 (2026-12): every connection opens with the handshake of rpc_auth.h;
 * minor 1's WIRE_F_DATA is kept as it was. */
#define WIRE_MAJOR 2
/* 1: WIRE_F_DATA. 2: operation ids on strata-meta's mutations (meta_proto.c
 * F_OPID; a server below 2 ignores them and does not deduplicate). */
#define WIRE_MINOR 2
#define WIRE_HDR_SIZE 40
#define WIRE_MAX_PAYLOAD (8u << 20) /* 8 MiB: reads and writes are <= 4 MiB */
#define WIRE_F_REPLY 0x0001
#define WIRE_F_DATA 0x0002 /* minor >= 1: data_off and the split checksum */
#define WIRE_DATA_PIECE 65536u
#define WIRE_MAX_PIECES (WIRE_MAX_PAYLOAD / WIRE_DATA_PIECE)

struct wire_hdr {
	uint32_t magic;
	uint8_t major, minor;
	uint16_t flags;
	uint16_t type;
	int32_t status;
	uint64_t req_id;
	uint32_t payload_len;
	uint32_t data_off; /* WIRE_F_DATA */
	uint64_t checksum;
};

/* Fills h->magic/major/minor/checksum for payload p[0..len) and encodes h into
 * out[WIRE_HDR_SIZE]. */
void wire_hdr_seal(struct wire_hdr *h, const void *payload, size_t len, uint8_t out[WIRE_HDR_SIZE]);
/* Same, for a payload given as an iovec list. */
struct iovec;
void wire_hdr_sealv(struct wire_hdr *h, const struct iovec *iov, int iovcnt,
		    uint8_t out[WIRE_HDR_SIZE]);
/* Seals a WIRE_F_DATA frame: the fields are iov[0..iovcnt), followed by
 * data_len bytes of data whose wire_data_hash is data_hash (the data itself
 * is not read). Fills h like wire_hdr_sealv. */
void wire_hdr_seal_data(struct wire_hdr *h, const struct iovec *iov, int iovcnt, size_t data_len,
			uint64_t data_hash, uint8_t out[WIRE_HDR_SIZE]);
/* The data_hash of WIRE_F_DATA for p[0..len). If sums is not NULL it gets
 * the XXH3-64 of each WIRE_DATA_PIECE piece (wire_data_pieces(len) of them). */
uint64_t wire_data_hash(const void *p, size_t len, uint64_t *sums);
static inline size_t wire_data_pieces(size_t len)
{
	return (len + WIRE_DATA_PIECE - 1) / WIRE_DATA_PIECE;
}
/* Decodes and validates a header (magic, major, reserved, length).
 * Returns 0, -EPROTO (bad magic/reserved), -EPROTONOSUPPORT (newer major) or
 * -EMSGSIZE (payload_len > WIRE_MAX_PAYLOAD). On failure *why names the
 * reason in words (static string). */
int wire_hdr_decode(const uint8_t in[WIRE_HDR_SIZE], struct wire_hdr *ret, const char **why);
/* Returns 0 if the payload matches h->checksum, -EBADMSG otherwise. */
int wire_payload_verify(const uint8_t in_hdr[WIRE_HDR_SIZE], const struct wire_hdr *h,
			const void *payload);
/* Same; for a WIRE_F_DATA frame also returns the data's hash and, if sums is
 * not NULL (room for WIRE_MAX_PIECES), its piece sums (wire_data_hash). */
int wire_payload_verify_data(const uint8_t in_hdr[WIRE_HDR_SIZE], const struct wire_hdr *h,
			     const void *payload, uint64_t *ret_data_hash, uint64_t *sums);
/* Returns XXH3-64 of buf with seed, computed with AVX2 when the CPU has it
 * (same value as the library's XXH3_64bits_withSeed, about twice as fast for
 * big buffers). */
uint64_t wire_xxh3_64(const void *buf, size_t len, uint64_t seed);

/* ---- growable write buffer -------------------------------------------- */
struct wbuf {
	uint8_t *data;
	size_t len, cap;
	int err; /* -ENOMEM once an allocation failed; later puts are no-ops */
};
void wbuf_init(struct wbuf *b);
void wbuf_done(struct wbuf *b);	 /* frees data; accepts a zeroed wbuf */
void wbuf_reset(struct wbuf *b); /* len = 0, keeps the allocation */
void wbuf_put_u8(struct wbuf *b, uint8_t v);
void wbuf_put_u16(struct wbuf *b, uint16_t v);
void wbuf_put_u32(struct wbuf *b, uint32_t v);
void wbuf_put_u64(struct wbuf *b, uint64_t v);
void wbuf_put_i64(struct wbuf *b, int64_t v);
void wbuf_put_bytes(struct wbuf *b, const void *p, size_t n);
/* u32 length then bytes. */
void wbuf_put_blob(struct wbuf *b, const void *p, uint32_t n);
/* u16 length then bytes (no NUL). s may be NULL (length 0). */
void wbuf_put_str(struct wbuf *b, const char *s);
/* Reserves n bytes at the end and returns a pointer to them (valid until the
 * next put), or NULL on allocation failure. Lets a handler read from disk
 * straight into the reply. */
void *wbuf_reserve(struct wbuf *b, size_t n);

/* ---- bounded read cursor ---------------------------------------------- */
struct rbuf {
	const uint8_t *p;
	size_t len, off;
	int err; /* -EBADMSG after any overrun */
};
void rbuf_init(struct rbuf *b, const void *p, size_t len);
uint8_t rbuf_get_u8(struct rbuf *b);
uint16_t rbuf_get_u16(struct rbuf *b);
uint32_t rbuf_get_u32(struct rbuf *b);
uint64_t rbuf_get_u64(struct rbuf *b);
int64_t rbuf_get_i64(struct rbuf *b);
/* Returns a pointer to the next n bytes inside the buffer, or NULL (and err). */
const void *rbuf_get_bytes(struct rbuf *b, size_t n);
/* u32 length then bytes; *ret_len gets the length. NULL on overrun. */
const void *rbuf_get_blob(struct rbuf *b, uint32_t *ret_len);
/* u16 length then bytes, copied NUL-terminated into out[cap]. A string that
 * does not fit or contains a NUL byte sets err = -EBADMSG. Returns out. */
char *rbuf_get_str(struct rbuf *b, char *out, size_t cap);
size_t rbuf_remaining(const struct rbuf *b);
/* Returns 0 if nothing overran (trailing bytes are allowed: newer minors may
 * append fields), else -EBADMSG. */
int rbuf_done(const struct rbuf *b);

/* little-endian helpers for fixed on-disk records */
static inline void le16_put(uint8_t *p, uint16_t v)
{
	p[0] = v;
	p[1] = v >> 8;
}
static inline void le32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}
static inline void le64_put(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}
static inline uint16_t le16_get(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t le32_get(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le64_get(const uint8_t *p)
{
	return (uint64_t)le32_get(p) | (uint64_t)le32_get(p + 4) << 32;
}
