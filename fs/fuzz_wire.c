/* fuzz_wire.c — libFuzzer entry point: feeds arbitrary bytes to the frame
 * header decoder, the checksum verifier and every rbuf getter. Nothing may
 * crash, read out of bounds, or accept a frame that fails validation. */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= WIRE_HDR_SIZE) {
		struct wire_hdr h;
		const char *why;
		if (wire_hdr_decode(data, &h, &why) == 0) {
			if (h.payload_len > WIRE_MAX_PAYLOAD)
				__builtin_trap();
			if (size - WIRE_HDR_SIZE >= h.payload_len)
				(void)wire_payload_verify(data, &h, data + WIRE_HDR_SIZE);
		}
	}
	struct rbuf r;
	rbuf_init(&r, data, size);
	char s[64];
	while (rbuf_done(&r) == 0 && rbuf_remaining(&r) > 0) {
		uint8_t op = rbuf_get_u8(&r);
		uint32_t n;
		switch (op % 6) {
		case 0: (void)rbuf_get_u16(&r); break;
		case 1: (void)rbuf_get_u32(&r); break;
		case 2: (void)rbuf_get_u64(&r); break;
		case 3: (void)rbuf_get_blob(&r, &n); break;
		case 4: rbuf_get_str(&r, s, sizeof(s)); if (strlen(s) >= sizeof(s)) __builtin_trap(); break;
		case 5: (void)rbuf_get_bytes(&r, op >> 3); break;
		}
	}
	return 0;
}
