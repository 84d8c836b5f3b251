/* test_wire.c — unit tests of the wire codec: header seal/decode, checksum
 * coverage, version and length checks, and the bounded read cursor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wire.h"
#include "testutil.h"

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

int main(void)
{
	test_roundtrip();
	test_str_limits();
	test_header();
	printf("test_wire: ok\n");
	return 0;
}
