/* fuzz_usrbio_proto.c — libFuzzer target for the native client's decoders
 * (fs/usrbio_proto.h): control messages and submission entries, the bytes
 * strata-fuse takes from an untrusted client. Nothing may crash or read
 * past the input; what decodes must satisfy the limits the server relies
 * on and encode back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/usrbio_proto.h"

static void check_msg(const uint8_t *data, size_t n)
{
	struct usrbio_msg m, again;
	uint8_t buf[USRBIO_MSG_MAX];

	if (usrbio_msg_decode(data, n, &m) < 0)
		return;
	if (m.type < USRBIO_SETUP || m.type > USRBIO_REPLY)
		abort();
	usrbio_msg_encode(&m, buf);
	if (usrbio_msg_decode(buf, sizeof(buf), &again) < 0 || memcmp(buf + 16, data + 16, 40))
		abort();
}

static void check_sqe(const uint8_t *data, size_t n)
{
	uint8_t raw[USRBIO_SQE_SIZE] = {0}, back[USRBIO_SQE_SIZE];
	struct usrbio_sqe s;
	uint64_t end;

	memcpy(raw, data, n < sizeof(raw) ? n : sizeof(raw));
	if (usrbio_sqe_decode(raw, &s) < 0)
		return;
	if (s.op == USRBIO_OP_FSYNC) {
		if (s.len || s.off || s.buf_off)
			abort();
	} else if (s.len == 0 || s.len > USRBIO_MAX_IO ||
		   __builtin_add_overflow(s.buf_off, (uint64_t)s.len, &end) ||
		   __builtin_add_overflow(s.off, (uint64_t)s.len, &end) || end > INT64_MAX) {
		abort();
	}
	usrbio_sqe_encode(&s, back);
	if (memcmp(back, raw, sizeof(raw)))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	check_msg(data, n);
	check_sqe(data, n);
	return 0;
}
