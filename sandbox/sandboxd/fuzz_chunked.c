/* fuzz_chunked.c — libFuzzer target for the chunked request-body decoder
 * of file uploads (xfer.c: sbd_xfer_read on a chunked body), checked
 * against a reference decoder written from the rules xfer.h states: a
 * CRLF-terminated chunk-size line of at most XFER_CHUNK_LINE_MAX bytes,
 * 1..15 hex digits, then optional extensions after ';', ' ' or '\t'; the
 * chunk's data and a CRLF; the last chunk (size 0) and trailer lines up to
 * an empty one. The decoder must give exactly the reference's payload
 * when the body is well formed, and an error otherwise, whatever sizes
 * its reader asks for (the input's first byte picks the read size).
 *
 * The body goes through a real socket pair (the decoder reads a socket),
 * closed for writing after the input, so a truncated body ends in an
 * error, never in a wait. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/sandboxd/xfer.h"

#define FUZZ_INPUT_MAX (64u << 10) /* fits a socket pair's buffer: no writer thread */

/* One line from p[*off..n), without its CRLF: its length, or -1. */
static long ref_line(const uint8_t *p, size_t n, size_t *off)
{
	const uint8_t *lf = memchr(p + *off, '\n', n - *off);
	if (!lf)
		return -1;
	size_t len = (size_t)(lf - (p + *off));
	if (len == 0 || p[*off + len - 1] != '\r' || len > XFER_CHUNK_LINE_MAX)
		return -1;
	long r = (long)len - 1;
	*off += len + 1;
	return r;
}

static int hex(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The reference decoding of p[0..n) into out: the payload's length, or -1
 * for a malformed or truncated body. */
static long ref_decode(const uint8_t *p, size_t n, uint8_t *out)
{
	size_t off = 0, got = 0;
	for (bool first = true;; first = false) {
		if (!first && ref_line(p, n, &off) != 0)
			return -1; /* the CRLF after a chunk's data */
		size_t at = off;
		long len = ref_line(p, n, &off);
		if (len < 0)
			return -1;
		uint64_t v = 0;
		long i = 0;
		for (; i < len && p[at + i] != ';' && p[at + i] != ' ' && p[at + i] != '\t'; i++) {
			if (hex(p[at + i]) < 0 || i >= 15)
				return -1;
			v = v * 16 + (uint64_t)hex(p[at + i]);
		}
		if (i == 0)
			return -1;
		if (v == 0)
			break;
		if (v > n - off)
			return -1;
		memcpy(out + got, p + off, v);
		got += v;
		off += v;
	}
	for (long len; (len = ref_line(p, n, &off)) != 0;) /* trailers */
		if (len < 0)
			return -1;
	return (long)got;
}

/* sbd_xfer_read's decoding of body through a socket, in reads of step
 * bytes: the payload's length, or -1 on an error. */
static long xfer_decode(const uint8_t *body, size_t n, size_t step, uint8_t *out)
{
	static char *in;
	int sv[2];
	if (!in && !(in = malloc(XFER_BUF)))
		abort();
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		abort();
	if (n && write(sv[0], body, n) != (ssize_t)n)
		abort();
	shutdown(sv[0], SHUT_WR);
	struct sbd_xfer x = {.sock = sv[1], .chunked = true, .in = in};
	long got = 0;
	for (;;) {
		ssize_t k = sbd_xfer_read(&x, out + got, step);
		if (k < 0) {
			got = -1;
			break;
		}
		if (k == 0 && x.body_done)
			break;
		if (k == 0 || (size_t)got + (size_t)k > n)
			abort(); /* no progress, or more payload than input */
		got += k;
	}
	close(sv[0]);
	close(sv[1]);
	return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > FUZZ_INPUT_MAX)
		return 0;
	size_t step = 1 + data[0] % 64u;
	static uint8_t want[FUZZ_INPUT_MAX], got[FUZZ_INPUT_MAX];
	long w = ref_decode(data + 1, size - 1, want);
	long g = xfer_decode(data + 1, size - 1, step, got);
	if (w != g || (w > 0 && memcmp(want, got, (size_t)w)))
		abort(); /* the decoder and the rules disagree */
	return 0;
}
