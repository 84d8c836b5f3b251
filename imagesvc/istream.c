/* istream.c — gzip / zstd / plain detection and streaming decompression.
 *
 * Invariants:
 *  1. At most IN_CAP input bytes are buffered; output goes straight into the
 *     caller's buffer, so memory is bounded whatever the ratio.
 *  2. total_out never exceeds max_out: the read that would cross it fails
 *     with -EFBIG (decompression bomb).
 *  3. The end of the source is only a clean end when the decoder finished a
 *     whole member/frame there; anything else is "truncated" (-EBADMSG).
 *  4. The first error is sticky: every later read returns it again. */
#include "imagesvc/istream.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define IN_CAP (64u * 1024)
#define ZSTD_WINDOW_LOG_MAX 27

struct istream {
	img_read_fn fn;
	void *ctx;
	enum istream_kind kind;
	uint64_t max_out, total_out;
	uint8_t *in;
	size_t in_off, in_len;
	bool src_eof;
	bool member_done; /* gzip/zstd: the last member/frame ended exactly here */
	bool done;
	int err;
	char msg[160];
	z_stream z;
	bool z_init;
	ZSTD_DStream *zd;
};

static int fail(struct istream *s, int err, const char *fmt, const char *detail)
{
	if (!s->err) {
		s->err = err;
		snprintf(s->msg, sizeof(s->msg), fmt, detail ? detail : "");
	}
	return s->err;
}

/* Reads once from the source into the free end of the input buffer
 * (retrying EINTR). Returns 0 (src_eof set when the source ended) or -errno. */
static int read_some(struct istream *s)
{
	for (;;) {
		ssize_t n = s->fn(s->ctx, s->in + s->in_len, IN_CAP - s->in_len);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return fail(s, (int)n, "reading the layer failed%s", NULL);
		if (n == 0)
			s->src_eof = true;
		s->in_len += (size_t)n;
		return 0;
	}
}

/* Refills the input buffer if it is empty. Returns 0 (maybe with src_eof set)
 * or -errno from the source. */
static int refill(struct istream *s)
{
	if (s->in_off < s->in_len || s->src_eof)
		return 0;
	s->in_off = s->in_len = 0;
	return read_some(s);
}

/* Makes at least `want` bytes available at in+in_off unless the source ends. */
static int peek(struct istream *s, size_t want)
{
	while (s->in_len - s->in_off < want && !s->src_eof) {
		if (s->in_off > 0) {
			memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
			s->in_len -= s->in_off;
			s->in_off = 0;
		}
		int r = read_some(s);
		if (r < 0)
			return r;
	}
	return 0;
}

static int detect(struct istream *s)
{
	int r = peek(s, 4);
	if (r < 0)
		return r;
	const uint8_t *p = s->in + s->in_off;
	size_t avail = s->in_len - s->in_off;
	if (avail >= 2 && p[0] == 0x1f && p[1] == 0x8b) {
		s->kind = ISTREAM_GZIP;
		if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
			return -ENOMEM;
		s->z_init = true;
	} else if (avail >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd) {
		s->kind = ISTREAM_ZSTD;
		s->zd = ZSTD_createDStream();
		if (!s->zd)
			return -ENOMEM;
		if (ZSTD_isError(
			ZSTD_DCtx_setParameter(s->zd, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX)))
			return -ENOMEM;
	} else {
		s->kind = ISTREAM_PLAIN;
	}
	return 0;
}

int istream_open(img_read_fn fn, void *ctx, uint64_t max_out, struct istream **ret)
{
	struct istream *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->fn = fn;
	s->ctx = ctx;
	s->max_out = max_out;
	s->in = malloc(IN_CAP);
	int r = s->in ? detect(s) : -ENOMEM;
	if (r < 0) {
		istream_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

static ssize_t read_plain(struct istream *s, void *buf, size_t n)
{
	int r = refill(s);
	if (r < 0)
		return r;
	size_t avail = s->in_len - s->in_off;
	if (avail == 0)
		return 0;
	size_t k = n < avail ? n : avail;
	memcpy(buf, s->in + s->in_off, k);
	s->in_off += k;
	return (ssize_t)k;
}

/* Called at a gzip member end: another member may follow, nothing else. */
static int gzip_next_member(struct istream *s)
{
	int r = peek(s, 2);
	if (r < 0)
		return r;
	size_t avail = s->in_len - s->in_off;
	if (avail == 0) {
		s->done = true;
		return 0;
	}
	const uint8_t *p = s->in + s->in_off;
	if (avail < 2 || p[0] != 0x1f || p[1] != 0x8b)
		return fail(s, -EBADMSG, "trailing garbage after the gzip stream%s", NULL);
	if (inflateReset(&s->z) != Z_OK)
		return fail(s, -EBADMSG, "gzip: cannot reset the decoder%s", NULL);
	return 0;
}

static ssize_t read_gzip(struct istream *s, void *buf, size_t n)
{
	while (!s->done) {
		int r = refill(s);
		if (r < 0)
			return r;
		if (s->in_off == s->in_len && s->src_eof)
			return fail(s, -EBADMSG, "truncated gzip stream%s", NULL);
		s->z.next_in = s->in + s->in_off;
		s->z.avail_in = (uInt)(s->in_len - s->in_off);
		s->z.next_out = buf;
		s->z.avail_out = (uInt)(n > UINT32_MAX ? UINT32_MAX : n);
		int zr = inflate(&s->z, Z_NO_FLUSH);
		s->in_off = s->in_len - s->z.avail_in;
		size_t out = (size_t)((uint8_t *)s->z.next_out - (uint8_t *)buf);
		if (zr == Z_STREAM_END) {
			r = gzip_next_member(s);
			if (r < 0)
				return r;
		} else if (zr != Z_OK && zr != Z_BUF_ERROR) {
			return fail(s, -EBADMSG, "corrupt gzip stream: %s",
				    s->z.msg ? s->z.msg : "inflate error");
		}
		if (out > 0)
			return (ssize_t)out;
	}
	return 0;
}

static ssize_t read_zstd(struct istream *s, void *buf, size_t n)
{
	for (;;) {
		int r = refill(s);
		if (r < 0)
			return r;
		if (s->in_off == s->in_len && s->src_eof) {
			if (s->member_done)
				return 0;
			return fail(s, -EBADMSG, "truncated zstd stream%s", NULL);
		}
		ZSTD_inBuffer in = {s->in, s->in_len, s->in_off};
		ZSTD_outBuffer out = {buf, n, 0};
		size_t zr = ZSTD_decompressStream(s->zd, &out, &in);
		s->in_off = in.pos;
		if (ZSTD_isError(zr))
			return fail(s, -EBADMSG, "corrupt zstd stream: %s", ZSTD_getErrorName(zr));
		s->member_done = zr == 0;
		if (out.pos > 0)
			return (ssize_t)out.pos;
	}
}

ssize_t istream_read(struct istream *s, void *buf, size_t n)
{
	if (s->err)
		return s->err;
	if (n == 0)
		return 0;
	ssize_t k;
	switch (s->kind) {
	case ISTREAM_GZIP:
		k = read_gzip(s, buf, n);
		break;
	case ISTREAM_ZSTD:
		k = read_zstd(s, buf, n);
		break;
	default:
		k = read_plain(s, buf, n);
		break;
	}
	if (k <= 0)
		return k;
	s->total_out += (uint64_t)k;
	if (s->max_out && s->total_out > s->max_out)
		return fail(s, -EFBIG, "expanded layer exceeds the size limit%s", NULL);
	return k;
}

ssize_t istream_read_fn(void *ctx, void *buf, size_t n)
{
	return istream_read(ctx, buf, n);
}

enum istream_kind istream_kind(const struct istream *s)
{
	return s->kind;
}

const char *istream_kind_name(enum istream_kind k)
{
	switch (k) {
	case ISTREAM_GZIP:
		return "gzip";
	case ISTREAM_ZSTD:
		return "zstd";
	default:
		return "plain";
	}
}

const char *istream_error(const struct istream *s)
{
	return s->err ? s->msg : "no error";
}

const char *istream_error_fn(void *ctx)
{
	return istream_error(ctx);
}

uint64_t istream_total_out(const struct istream *s)
{
	return s->total_out;
}

struct istream *istream_free(struct istream *s)
{
	if (!s)
		return NULL;
	if (s->z_init)
		inflateEnd(&s->z);
	ZSTD_freeDStream(s->zd);
	free(s->in);
	free(s);
	return NULL;
}

ssize_t img_fd_read(void *ctx, void *buf, size_t n)
{
	ssize_t k = read(*(int *)ctx, buf, n);
	return k < 0 ? -errno : k;
}
