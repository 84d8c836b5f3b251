/* wire.c — frame header codec and the growable/bounded buffers of wire.h. */
#include "fs/wire.h"
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

/* wire_xxh3.c: the same XXH3 with AVX2 (internal to libstrata_fs). */
uint64_t wire_xxh3_avx2(uint64_t seed, const struct iovec *iov, int iovcnt);
bool wire_xxh3_avx2_ok(void);

/* XXH3-64 of the iovecs with seed: the AVX2 build when the CPU has it. */
static uint64_t payload_hash(uint64_t seed, const struct iovec *iov, int iovcnt)
{
	if (iovcnt > 0 && wire_xxh3_avx2_ok())
		return wire_xxh3_avx2(seed, iov, iovcnt);
	XXH3_state_t st;
	XXH3_64bits_reset_withSeed(&st, seed);
	for (int i = 0; i < iovcnt; i++)
		XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
	return XXH3_64bits_digest(&st);
}

static void hdr_encode_fields(const struct wire_hdr *h, uint8_t out[WIRE_HDR_SIZE])
{
	le32_put(out + 0, h->magic);
	out[4] = h->major;
	out[5] = h->minor;
	le16_put(out + 6, h->flags);
	le16_put(out + 8, h->type);
	le16_put(out + 10, 0);
	le32_put(out + 12, (uint32_t)h->status);
	le64_put(out + 16, h->req_id);
	le32_put(out + 24, h->payload_len);
	le32_put(out + 28, h->flags & WIRE_F_DATA ? h->data_off : 0);
}

void wire_hdr_sealv(struct wire_hdr *h, const struct iovec *iov, int iovcnt,
		    uint8_t out[WIRE_HDR_SIZE])
{
	size_t len = 0;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	h->magic = WIRE_MAGIC;
	h->major = WIRE_MAJOR;
	h->minor = WIRE_MINOR;
	h->payload_len = (uint32_t)len;
	h->flags &= ~WIRE_F_DATA;
	h->data_off = 0;
	hdr_encode_fields(h, out);
	h->checksum = payload_hash(XXH3_64bits(out, 32), iov, iovcnt);
	le64_put(out + 32, h->checksum);
}

uint64_t wire_data_hash(const void *p, size_t len, uint64_t *sums)
{
	uint64_t stack[WIRE_MAX_PIECES];
	size_t n = wire_data_pieces(len);
	if (!sums && n <= WIRE_MAX_PIECES)
		sums = stack;
	uint8_t le[8];
	XXH3_state_t st;
	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < n; i++) {
		size_t off = i * WIRE_DATA_PIECE;
		size_t plen = len - off < WIRE_DATA_PIECE ? len - off : WIRE_DATA_PIECE;
		uint64_t v = wire_xxh3_64((const uint8_t *)p + off, plen, 0);
		if (sums)
			sums[i] = v;
		le64_put(le, v);
		XXH3_64bits_update(&st, le, 8);
	}
	return XXH3_64bits_digest(&st);
}

/* The checksum of a WIRE_F_DATA frame: fields, then the data hash. */
static uint64_t data_frame_sum(const uint8_t hdr[WIRE_HDR_SIZE], const struct iovec *fields,
			       int nfields, uint64_t data_hash)
{
	uint8_t le[8];
	le64_put(le, data_hash);
	XXH3_state_t st;
	XXH3_64bits_reset_withSeed(&st, XXH3_64bits(hdr, 32));
	for (int i = 0; i < nfields; i++)
		XXH3_64bits_update(&st, fields[i].iov_base, fields[i].iov_len);
	XXH3_64bits_update(&st, le, 8);
	return XXH3_64bits_digest(&st);
}

void wire_hdr_seal_data(struct wire_hdr *h, const struct iovec *iov, int iovcnt, size_t data_len,
			uint64_t data_hash, uint8_t out[WIRE_HDR_SIZE])
{
	size_t len = 0;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	h->magic = WIRE_MAGIC;
	h->major = WIRE_MAJOR;
	h->minor = WIRE_MINOR;
	h->flags |= WIRE_F_DATA;
	h->data_off = (uint32_t)len;
	h->payload_len = (uint32_t)(len + data_len);
	hdr_encode_fields(h, out);
	h->checksum = data_frame_sum(out, iov, iovcnt, data_hash);
	le64_put(out + 32, h->checksum);
}

void wire_hdr_seal(struct wire_hdr *h, const void *payload, size_t len, uint8_t out[WIRE_HDR_SIZE])
{
	struct iovec iov = {.iov_base = (void *)payload, .iov_len = len};
	wire_hdr_sealv(h, &iov, len ? 1 : 0, out);
}

int wire_hdr_decode(const uint8_t in[WIRE_HDR_SIZE], struct wire_hdr *ret, const char **why)
{
	struct wire_hdr h = {
	    .magic = le32_get(in),
	    .major = in[4],
	    .minor = in[5],
	    .flags = le16_get(in + 6),
	    .type = le16_get(in + 8),
	    .status = (int32_t)le32_get(in + 12),
	    .req_id = le64_get(in + 16),
	    .payload_len = le32_get(in + 24),
	    .data_off = le32_get(in + 28),
	    .checksum = le64_get(in + 32),
	};
	const char *reason = NULL;
	int r = 0;
	if (h.magic != WIRE_MAGIC) {
		reason = "bad magic";
		r = -EPROTO;
	} else if (h.major > WIRE_MAJOR) {
		reason = "newer major protocol version";
		r = -EPROTONOSUPPORT;
	} else if (h.major < WIRE_MAJOR) {
		reason = "older major protocol version";
		r = -EPROTONOSUPPORT;
	} else if (le16_get(in + 10) != 0 || (!(h.flags & WIRE_F_DATA) && h.data_off != 0)) {
		reason = "reserved header fields not zero";
		r = -EPROTO;
	} else if (h.payload_len > WIRE_MAX_PAYLOAD) {
		reason = "payload length over the limit";
		r = -EMSGSIZE;
	} else if ((h.flags & WIRE_F_DATA) && h.minor < 1) {
		reason = "data flag in a minor 0 frame";
		r = -EPROTO;
	} else if ((h.flags & WIRE_F_DATA) && h.data_off > h.payload_len) {
		reason = "data offset past the payload";
		r = -EPROTO;
	}
	if (why)
		*why = reason;
	if (r == 0)
		*ret = h;
	return r;
}

uint64_t wire_xxh3_64(const void *buf, size_t len, uint64_t seed)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return payload_hash(seed, &iov, 1);
}

int wire_payload_verify_data(const uint8_t in_hdr[WIRE_HDR_SIZE], const struct wire_hdr *h,
			     const void *payload, uint64_t *ret_data_hash, uint64_t *sums)
{
	uint64_t sum;
	if (h->flags & WIRE_F_DATA) {
		/* wire_hdr_decode checked data_off <= payload_len */
		const uint8_t *p = payload;
		uint64_t dh = wire_data_hash(p + h->data_off, h->payload_len - h->data_off, sums);
		struct iovec f = {.iov_base = (void *)p, .iov_len = h->data_off};
		sum = data_frame_sum(in_hdr, &f, 1, dh);
		if (ret_data_hash)
			*ret_data_hash = dh;
	} else {
		struct iovec iov = {.iov_base = (void *)payload, .iov_len = h->payload_len};
		sum = payload_hash(XXH3_64bits(in_hdr, 32), &iov, 1);
	}
	return sum == h->checksum ? 0 : -EBADMSG;
}

int wire_payload_verify(const uint8_t in_hdr[WIRE_HDR_SIZE], const struct wire_hdr *h,
			const void *payload)
{
	return wire_payload_verify_data(in_hdr, h, payload, NULL, NULL);
}

/* ---- wbuf --------------------------------------------------------------- */
void wbuf_init(struct wbuf *b)
{
	memset(b, 0, sizeof(*b));
}

void wbuf_done(struct wbuf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

void wbuf_reset(struct wbuf *b)
{
	b->len = 0;
	b->err = 0;
}

static int wbuf_grow(struct wbuf *b, size_t extra)
{
	if (b->err)
		return b->err;
	if (b->len + extra <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra)
		cap *= 2;
	uint8_t *p = realloc(b->data, cap);
	if (!p)
		return b->err = -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

void *wbuf_reserve(struct wbuf *b, size_t n)
{
	if (wbuf_grow(b, n) < 0)
		return NULL;
	void *p = b->data + b->len;
	b->len += n;
	return p;
}

void wbuf_put_bytes(struct wbuf *b, const void *p, size_t n)
{
	void *dst = wbuf_reserve(b, n);
	if (dst && n)
		memcpy(dst, p, n);
}

void wbuf_put_u8(struct wbuf *b, uint8_t v)
{
	wbuf_put_bytes(b, &v, 1);
}

void wbuf_put_u16(struct wbuf *b, uint16_t v)
{
	uint8_t *p = wbuf_reserve(b, 2);
	if (p)
		le16_put(p, v);
}

void wbuf_put_u32(struct wbuf *b, uint32_t v)
{
	uint8_t *p = wbuf_reserve(b, 4);
	if (p)
		le32_put(p, v);
}

void wbuf_put_u64(struct wbuf *b, uint64_t v)
{
	uint8_t *p = wbuf_reserve(b, 8);
	if (p)
		le64_put(p, v);
}

void wbuf_put_i64(struct wbuf *b, int64_t v)
{
	wbuf_put_u64(b, (uint64_t)v);
}

void wbuf_put_blob(struct wbuf *b, const void *p, uint32_t n)
{
	wbuf_put_u32(b, n);
	wbuf_put_bytes(b, p, n);
}

void wbuf_put_str(struct wbuf *b, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n > UINT16_MAX) {
		b->err = -ENAMETOOLONG;
		return;
	}
	wbuf_put_u16(b, (uint16_t)n);
	wbuf_put_bytes(b, s, n);
}

/* ---- rbuf --------------------------------------------------------------- */
void rbuf_init(struct rbuf *b, const void *p, size_t len)
{
	b->p = p;
	b->len = len;
	b->off = 0;
	b->err = 0;
}

const void *rbuf_get_bytes(struct rbuf *b, size_t n)
{
	if (b->err || n > b->len - b->off) {
		b->err = -EBADMSG;
		return NULL;
	}
	const void *p = b->p + b->off;
	b->off += n;
	return p;
}

uint8_t rbuf_get_u8(struct rbuf *b)
{
	const uint8_t *p = rbuf_get_bytes(b, 1);
	return p ? p[0] : 0;
}

uint16_t rbuf_get_u16(struct rbuf *b)
{
	const uint8_t *p = rbuf_get_bytes(b, 2);
	return p ? le16_get(p) : 0;
}

uint32_t rbuf_get_u32(struct rbuf *b)
{
	const uint8_t *p = rbuf_get_bytes(b, 4);
	return p ? le32_get(p) : 0;
}

uint64_t rbuf_get_u64(struct rbuf *b)
{
	const uint8_t *p = rbuf_get_bytes(b, 8);
	return p ? le64_get(p) : 0;
}

int64_t rbuf_get_i64(struct rbuf *b)
{
	return (int64_t)rbuf_get_u64(b);
}

const void *rbuf_get_blob(struct rbuf *b, uint32_t *ret_len)
{
	uint32_t n = rbuf_get_u32(b);
	const void *p = rbuf_get_bytes(b, n);
	*ret_len = p ? n : 0;
	return p;
}

char *rbuf_get_str(struct rbuf *b, char *out, size_t cap)
{
	uint16_t n = rbuf_get_u16(b);
	const char *p = rbuf_get_bytes(b, n);
	if (cap)
		out[0] = '\0';
	if (!p)
		return out;
	if ((size_t)n >= cap || memchr(p, '\0', n)) {
		b->err = -EBADMSG;
		return out;
	}
	memcpy(out, p, n);
	out[n] = '\0';
	return out;
}

size_t rbuf_remaining(const struct rbuf *b)
{
	return b->len - b->off;
}

int rbuf_done(const struct rbuf *b)
{
	return b->err ? -EBADMSG : 0;
}
