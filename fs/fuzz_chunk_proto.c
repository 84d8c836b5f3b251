/* fuzz_chunk_proto.c — libFuzzer entry point over every chunk protocol
 * decoder (chunk_proto.h): the first byte picks the message, the rest is the
 * payload. Nothing may crash or read out of bounds; an accepted request must
 * satisfy the decoder's own limits and re-encode to the bytes it came from. */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "fs/chunk_proto.h"
#include "fs/proto.h"

static void check_req(uint16_t type, const uint8_t *p, size_t n)
{
	struct rbuf b;
	struct chunk_req r;
	rbuf_init(&b, p, n);
	if (chunk_req_decode(type, &b, &r) != 0)
		return;
	if (type == MSG_CHUNK_WRITE || type == MSG_CHUNK_READ) {
		if (r.len > CHUNK_IO_MAX)
			__builtin_trap();
	}
	if ((type == MSG_CHUNK_WRITE || type == MSG_CHUNK_WRITE_EX || type == MSG_CHUNK_PUT ||
	     type == MSG_CHUNK_PUT_PART) &&
	    (!r.data && r.len))
		__builtin_trap();
	if (r.data && (const uint8_t *)r.data + r.len > p + n)
		__builtin_trap();
	struct wbuf w;
	wbuf_init(&w);
	if (chunk_req_encode(type, &r, &w) != 0 || w.len > n ||
	    (w.len > 0 && memcmp(w.data, p, w.len) != 0))
		__builtin_trap();
	wbuf_done(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	struct rbuf b;
	rbuf_init(&b, p, n);
	switch (sel % 16) {
	case 15:
		check_req(MSG_CHUNK_PUT_PART, p, n);
		break;
	case 11:
	case 12:
	case 13:
		check_req((uint16_t)(MSG_CHUNK_WRITE_EX + sel % 16 - 11), p, n);
		break;
	case 14: {
		struct chunk_list_ent ents[8];
		bool more;
		int k = chunk_list_get(&b, ents, 8, &more);
		if (k > 8)
			__builtin_trap();
		break;
	}
	case 8: {
		struct chunk_stat st;
		if (chunk_stat_get(&b, &st) == 0 && st.length > STRATA_MAX_CHUNK_SIZE)
			__builtin_trap();
		break;
	}
	case 9: {
		uint32_t c;
		(void)chunk_count_get(&b, &c);
		break;
	}
	case 10:
		(void)chunk_read_reply_check(n, sel);
		break;
	default:
		check_req((uint16_t)(MSG_CHUNK_PING + sel % 16), p, n);
		break;
	}
	return 0;
}
