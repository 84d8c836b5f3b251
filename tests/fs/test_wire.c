/* test_wire.c — unit tests of the wire codec: header seal/decode, checksum
 * coverage, version and length checks, and the bounded read cursor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include "fs/wire.h"
#include "tests/testutil.h"

static void test_roundtrip(void)
{
	struct wbuf b;
	wbuf_init(&b);
	wbuf_put_u8(&b, 0xab);
	wbuf_put_u16(&b, 0xbeef);
	wbuf_put_u32(&b, 0xdeadbeef);
	wbuf_put_u64(&b, 0x0123456789abcdefull);
	wbuf_put_i64(&b, -42);
	wbuf_put_str(&b, "hello");
	wbuf_put_blob(&b, "xyz", 3);
	CHECK(b.err == 0);
	/* little-endian on the wire regardless of host */
	CHECK(b.data[1] == 0xef && b.data[2] == 0xbe);

	struct rbuf r;
	rbuf_init(&r, b.data, b.len);
	CHECK(rbuf_get_u8(&r) == 0xab);
	CHECK(rbuf_get_u16(&r) == 0xbeef);
	CHECK(rbuf_get_u32(&r) == 0xdeadbeef);
	CHECK(rbuf_get_u64(&r) == 0x0123456789abcdefull);
	CHECK(rbuf_get_i64(&r) == -42);
	char s[16];
	CHECK(strcmp(rbuf_get_str(&r, s, sizeof(s)), "hello") == 0);
	uint32_t n;
	const char *p = rbuf_get_blob(&r, &n);
	CHECK(p && n == 3 && memcmp(p, "xyz", 3) == 0);
	CHECK(rbuf_done(&r) == 0);
	CHECK(rbuf_remaining(&r) == 0);
	/* one more read overruns and poisons the cursor */
	CHECK(rbuf_get_u32(&r) == 0);
	CHECK(rbuf_done(&r) == -EBADMSG);
	wbuf_done(&b);
}

static void test_str_limits(void)
{
	struct wbuf b;
	wbuf_init(&b);
	wbuf_put_str(&b, "toolongforbuffer");
	struct rbuf r;
	rbuf_init(&r, b.data, b.len);
	char s[4];
	rbuf_get_str(&r, s, sizeof(s));
	CHECK(rbuf_done(&r) == -EBADMSG);
	CHECK(s[0] == '\0');
	/* an embedded NUL is refused */
	wbuf_reset(&b);
	wbuf_put_u16(&b, 3);
	wbuf_put_bytes(&b, "a\0b", 3);
	rbuf_init(&r, b.data, b.len);
	char t[8];
	rbuf_get_str(&r, t, sizeof(t));
	CHECK(rbuf_done(&r) == -EBADMSG);
	/* a length larger than the buffer */
	wbuf_reset(&b);
	wbuf_put_u32(&b, 1000);
	rbuf_init(&r, b.data, b.len);
	uint32_t n;
	CHECK(rbuf_get_blob(&r, &n) == NULL && n == 0);
	CHECK(rbuf_done(&r) == -EBADMSG);
	wbuf_done(&b);
}

static void test_header(void)
{
	const char payload[] = "payload bytes";
	struct wire_hdr h = {.type = 0x101, .req_id = 77, .status = -2, .flags = WIRE_F_REPLY};
	uint8_t raw[WIRE_HDR_SIZE];
	wire_hdr_seal(&h, payload, sizeof(payload), raw);
	struct wire_hdr d;
	const char *why;
	CHECK(wire_hdr_decode(raw, &d, &why) == 0);
	CHECK(d.type == 0x101 && d.req_id == 77 && d.status == -2 && d.flags == WIRE_F_REPLY);
	CHECK(d.payload_len == sizeof(payload));
	CHECK(wire_payload_verify(raw, &d, payload) == 0);

	/* any flipped payload bit is caught */
	char bad[sizeof(payload)];
	memcpy(bad, payload, sizeof(bad));
	bad[3] ^= 1;
	CHECK(wire_payload_verify(raw, &d, bad) == -EBADMSG);
	/* a flipped header field (req_id) is caught by the seeded checksum */
	uint8_t raw2[WIRE_HDR_SIZE];
	memcpy(raw2, raw, sizeof(raw2));
	raw2[16] ^= 1;
	CHECK(wire_hdr_decode(raw2, &d, &why) == 0);
	CHECK(wire_payload_verify(raw2, &d, payload) == -EBADMSG);

	memcpy(raw2, raw, sizeof(raw2));
	raw2[0] ^= 0xff;
	CHECK(wire_hdr_decode(raw2, &d, &why) == -EPROTO && why);
	memcpy(raw2, raw, sizeof(raw2));
	raw2[4] = WIRE_MAJOR + 1;
	CHECK(wire_hdr_decode(raw2, &d, &why) == -EPROTONOSUPPORT);
	memcpy(raw2, raw, sizeof(raw2));
	raw2[5] = WIRE_MINOR + 5; /* newer minor: accepted */
	CHECK(wire_hdr_decode(raw2, &d, &why) == 0);
	memcpy(raw2, raw, sizeof(raw2));
	le32_put(raw2 + 24, WIRE_MAX_PAYLOAD + 1);
	CHECK(wire_hdr_decode(raw2, &d, &why) == -EMSGSIZE);
	memcpy(raw2, raw, sizeof(raw2));
	raw2[10] = 1;
	CHECK(wire_hdr_decode(raw2, &d, &why) == -EPROTO);
}

/* WIRE_F_DATA: fields + data summed through the data hash; every byte and
 * every header field still covered; a forward re-seals from the hash. */
static void test_data_frame(void)
{
	const char fields[] = "fields";
	size_t dlen = 3 * WIRE_DATA_PIECE + 100; /* 4 pieces, the last short */
	uint8_t *buf = malloc(sizeof(fields) + dlen), *data = buf + sizeof(fields);
	CHECK(buf != NULL);
	memcpy(buf, fields, sizeof(fields));
	for (size_t i = 0; i < dlen; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	uint64_t sums[WIRE_MAX_PIECES], sums2[WIRE_MAX_PIECES];
	uint64_t dh = wire_data_hash(data, dlen, sums);
	CHECK(wire_data_pieces(dlen) == 4);
	/* the piece sums are plain XXH3-64s of the pieces (chunk block sums) */
	CHECK(sums[0] == wire_xxh3_64(data, WIRE_DATA_PIECE, 0));
	CHECK(sums[3] == wire_xxh3_64(data + 3 * WIRE_DATA_PIECE, 100, 0));
	CHECK(wire_data_hash(data, dlen, NULL) == dh);

	struct iovec f = {.iov_base = buf, .iov_len = sizeof(fields)};
	struct wire_hdr h = {.type = 0x203, .req_id = 9};
	uint8_t raw[WIRE_HDR_SIZE];
	wire_hdr_seal_data(&h, &f, 1, dlen, dh, raw);
	struct wire_hdr d;
	const char *why;
	CHECK(wire_hdr_decode(raw, &d, &why) == 0);
	CHECK((d.flags & WIRE_F_DATA) && d.data_off == sizeof(fields) && d.minor >= 1);
	CHECK(d.payload_len == sizeof(fields) + dlen);
	uint64_t got = 0;
	CHECK(wire_payload_verify_data(raw, &d, buf, &got, sums2) == 0);
	CHECK(got == dh && memcmp(sums, sums2, 4 * sizeof(uint64_t)) == 0);
	CHECK(wire_payload_verify(raw, &d, buf) == 0);

	/* a flipped bit anywhere: fields, any piece, the header */
	size_t spots[] = {0, sizeof(fields) + 5, sizeof(fields) + 2 * WIRE_DATA_PIECE + 1,
			  sizeof(fields) + dlen - 1};
	for (size_t i = 0; i < sizeof(spots) / sizeof(spots[0]); i++) {
		buf[spots[i]] ^= 0x10;
		CHECK(wire_payload_verify(raw, &d, buf) == -EBADMSG);
		buf[spots[i]] ^= 0x10;
	}
	uint8_t raw2[WIRE_HDR_SIZE];
	memcpy(raw2, raw, sizeof(raw2));
	raw2[28]--; /* data_off one earlier: fields and data split elsewhere */
	CHECK(wire_hdr_decode(raw2, &d, &why) == 0);
	CHECK(wire_payload_verify(raw2, &d, buf) == -EBADMSG);
	memcpy(raw2, raw, sizeof(raw2));
	raw2[6] &= ~WIRE_F_DATA; /* the same bytes read as a plain frame */
	CHECK(wire_hdr_decode(raw2, &d, &why) == -EPROTO); /* data_off must be 0 */
	memcpy(raw2, raw, sizeof(raw2));
	raw2[5] = 0; /* the flag needs minor >= 1 */
	CHECK(wire_hdr_decode(raw2, &d, &why) == -EPROTO && why);
	memcpy(raw2, raw, sizeof(raw2));
	le32_put(raw2 + 28, (uint32_t)(sizeof(fields) + dlen + 1));
	CHECK(wire_hdr_decode(raw2, &d, &why) == -EPROTO);

	/* a forward: new fields, the same data, re-sealed from the hash alone,
	 * verifies like a frame hashed from scratch */
	buf[0] = 'F';
	struct wire_hdr h2 = {.type = 0x203, .req_id = 10};
	wire_hdr_seal_data(&h2, &f, 1, dlen, dh, raw);
	CHECK(wire_hdr_decode(raw, &d, &why) == 0);
	CHECK(wire_payload_verify(raw, &d, buf) == 0);
	/* a plain frame of the same payload verifies too (old peers) */
	wire_hdr_seal(&h2, buf, sizeof(fields) + dlen, raw);
	CHECK(wire_hdr_decode(raw, &d, &why) == 0 && !(d.flags & WIRE_F_DATA));
	CHECK(wire_payload_verify(raw, &d, buf) == 0);
	free(buf);
}

int main(void)
{
	test_roundtrip();
	test_str_limits();
	test_header();
	test_data_frame();
	printf("test_wire: ok\n");
	return 0;
}
