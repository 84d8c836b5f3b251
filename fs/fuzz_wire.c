/* fuzz_wire.c — libFuzzer entry point: feeds arbitrary bytes to the frame
 * header decoder, the checksum verifiers (plain and WIRE_F_DATA frames) and
 * every rbuf getter. Nothing may crash, read out of bounds, or accept a frame
 * that fails validation; a WIRE_F_DATA frame sealed from the input, split at
 * an input-chosen offset, must verify, and must fail once a byte changes. */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include "fs/wire.h"

static uint64_t sums[WIRE_MAX_PIECES];

static void data_frame_roundtrip(const uint8_t *data, size_t size)
{
	if (size < 2 || size > WIRE_MAX_PAYLOAD)
		return;
	size_t split = data[0] % size;
	struct iovec f = {.iov_base = (void *)data, .iov_len = split};
	struct wire_hdr h = {.type = data[1]}, d;
	uint8_t raw[WIRE_HDR_SIZE];
	wire_hdr_seal_data(&h, &f, 1, size - split,
			   wire_data_hash(data + split, size - split, NULL), raw);
	uint64_t dh;
	if (wire_hdr_decode(raw, &d, NULL) != 0 ||
	    wire_payload_verify_data(raw, &d, data, &dh, sums))
		__builtin_trap();
	/* the same payload, one byte changed, must not verify */
	static uint8_t copy[4096];
	if (size <= sizeof(copy)) {
		memcpy(copy, data, size);
		copy[data[1] % size] ^= 0x01;
		if (wire_payload_verify(raw, &d, copy) == 0)
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= WIRE_HDR_SIZE) {
		struct wire_hdr h;
		const char *why;
		if (wire_hdr_decode(data, &h, &why) == 0) {
			if (h.payload_len > WIRE_MAX_PAYLOAD)
				__builtin_trap();
			if ((h.flags & WIRE_F_DATA) && h.data_off > h.payload_len)
				__builtin_trap();
			if (size - WIRE_HDR_SIZE >= h.payload_len) {
				uint64_t dh;
				(void)wire_payload_verify_data(data, &h, data + WIRE_HDR_SIZE, &dh,
							       sums);
			}
		}
	}
	data_frame_roundtrip(data, size);
	struct rbuf r;
	rbuf_init(&r, data, size);
	char s[64];
	while (rbuf_done(&r) == 0 && rbuf_remaining(&r) > 0) {
		uint8_t op = rbuf_get_u8(&r);
		uint32_t n;
		switch (op % 6) {
		case 0:
			(void)rbuf_get_u16(&r);
			break;
		case 1:
			(void)rbuf_get_u32(&r);
			break;
		case 2:
			(void)rbuf_get_u64(&r);
			break;
		case 3:
			(void)rbuf_get_blob(&r, &n);
			break;
		case 4:
			rbuf_get_str(&r, s, sizeof(s));
			if (strlen(s) >= sizeof(s))
				__builtin_trap();
			break;
		case 5:
			(void)rbuf_get_bytes(&r, op >> 3);
			break;
		}
	}
	return 0;
}
