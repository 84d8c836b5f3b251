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

/* READ_MANY: an accepted request re-encodes to its bytes, and the request
 * it makes bounds any reply decoded against it. */
static void check_read_many(const uint8_t *p, size_t n)
{
	struct chunk_req reqs[CHUNK_READ_MANY_MAX];
	struct chunk_read_ans ans[CHUNK_READ_MANY_MAX];
	struct rbuf b;
	struct wbuf w;
	uint64_t total = 0;
	rbuf_init(&b, p, n);
	int k = chunk_read_many_decode(&b, reqs, CHUNK_READ_MANY_MAX);
	if (k < 0)
		return;
	for (int i = 0; i < k; i++)
		total += reqs[i].len;
	if (k == 0 || k > CHUNK_READ_MANY_MAX || total > CHUNK_IO_MAX)
		__builtin_trap();
	wbuf_init(&w);
	if (chunk_read_many_encode(reqs, (uint32_t)k, &w) != 0 || w.len != n ||
	    memcmp(w.data, p, n) != 0)
		__builtin_trap();
	wbuf_done(&w);
	rbuf_init(&b, p, n); /* the same bytes as a reply to it */
	if (chunk_read_many_reply_get(&b, reqs, (uint32_t)k, ans) == 0)
		for (int i = 0; i < k; i++)
			if (ans[i].status > 0 || ans[i].len > reqs[i].len ||
			    (ans[i].len && (const uint8_t *)ans[i].data + ans[i].len > p + n))
				__builtin_trap();
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
		if (sel & 0x80)
			check_read_many(p, n);
		else
			(void)chunk_read_reply_check(n, sel);
		break;
	default:
		check_req((uint16_t)(MSG_CHUNK_PING + sel % 16), p, n);
		break;
	}
	return 0;
}
