/* tarbuild.h — builds tar streams in memory for the imagesvc tests: ustar
 * headers (with prefix), GNU long names, PAX records, and raw/broken headers
 * for the hostile cases; plus gzip/zstd compression of a whole buffer. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <zlib.h>
#include <zstd.h>

struct tb {
	uint8_t *p;
	size_t len, cap;
};

static inline void tb_raw(struct tb *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 4096;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static inline void tb_pad(struct tb *b)
{
	static const uint8_t z[512];
	if (b->len % 512)
		tb_raw(b, z, 512 - b->len % 512);
}

struct tb_hdr {
	const char *name, *prefix, *link;
	char type;
	unsigned mode, uid, gid;
	uint64_t size;
	int64_t mtime;
	unsigned major, minor;
	bool gnu_magic;
	bool bad_checksum;
};

/* len-1 octal digits (the value is truncated to fit), then a NUL. */
static inline void tb_octal(uint8_t *f, size_t len, uint64_t v)
{
	for (size_t i = len - 1; i-- > 0; v >>= 3)
		f[i] = (uint8_t)('0' + (v & 7));
	f[len - 1] = 0;
}

static inline void tb_header(struct tb *b, const struct tb_hdr *h)
{
	uint8_t blk[512] = {0};
	strncpy((char *)blk, h->name, 100);
	tb_octal(blk + 100, 8, h->mode ? h->mode : 0644);
	tb_octal(blk + 108, 8, h->uid);
	tb_octal(blk + 116, 8, h->gid);
	if (h->size >= (1ull << 33)) { /* base-256 */
		blk[124] = 0x80;
		for (int i = 0; i < 8; i++)
			blk[135 - i] = (uint8_t)(h->size >> (8 * i));
	} else {
		tb_octal(blk + 124, 12, h->size);
	}
	tb_octal(blk + 136, 12, (uint64_t)(h->mtime ? h->mtime : 1700000000));
	blk[156] = (uint8_t)(h->type ? h->type : '0');
	if (h->link)
		strncpy((char *)blk + 157, h->link, 100);
	memcpy(blk + 257, h->gnu_magic ? "ustar  " : "ustar\00000", 8);
	tb_octal(blk + 329, 8, h->major);
	tb_octal(blk + 337, 8, h->minor);
	if (h->prefix)
		strncpy((char *)blk + 345, h->prefix, 155);
	memset(blk + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += blk[i];
	if (h->bad_checksum)
		sum++;
	tb_octal(blk + 148, 7, sum);
	tb_raw(b, blk, 512);
}

static inline void tb_file(struct tb *b, const char *name, const void *data, size_t n)
{
	tb_header(b, &(struct tb_hdr){.name = name, .type = '0', .size = n});
	tb_raw(b, data, n);
	tb_pad(b);
}

static inline void tb_entry(struct tb *b, const char *name, char type, const char *link)
{
	tb_header(b,
		  &(struct tb_hdr){
		      .name = name, .type = type, .link = link, .mode = type == '5' ? 0755 : 0644});
}

/* One PAX record "<len> key=value\n" with the length computed. */
static inline void tb_pax_rec(struct tb *b, const char *key, const void *val, size_t vlen)
{
	size_t base = strlen(key) + vlen + 3, len = base;
	char num[24];
	for (;;) {
		size_t d = (size_t)snprintf(num, sizeof(num), "%zu", len);
		if (base + d == len)
			break;
		len = base + d;
	}
	tb_raw(b, num, strlen(num));
	tb_raw(b, " ", 1);
	tb_raw(b, key, strlen(key));
	tb_raw(b, "=", 1);
	tb_raw(b, val, vlen);
	tb_raw(b, "\n", 1);
}

/* A PAX 'x' (or 'g') header with payload recs[0..n). */
static inline void tb_pax(struct tb *b, char type, const struct tb *recs)
{
	tb_header(b, &(struct tb_hdr){.name = "PaxHeader", .type = type, .size = recs->len});
	tb_raw(b, recs->p, recs->len);
	tb_pad(b);
}

static inline void tb_gnu_long(struct tb *b, char type, const char *name)
{
	size_t n = strlen(name) + 1;
	tb_header(b, &(struct tb_hdr){
			 .name = "././@LongLink", .type = type, .size = n, .gnu_magic = true});
	tb_raw(b, name, n);
	tb_pad(b);
}

static inline void tb_end(struct tb *b)
{
	static const uint8_t z[1024];
	tb_raw(b, z, sizeof(z));
}

static inline void tb_free(struct tb *b)
{
	free(b->p);
	*b = (struct tb){0};
}

/* A layer of one file of size bytes of fill whose 4 KiB blocks (and so
 * its chunks) all differ. */
static inline struct tb tb_layer(const char *file, size_t size, char fill)
{
	struct tb b = {0};
	char *data = malloc(size);
	memset(data, fill, size);
	for (size_t i = 0; i < size; i += 4096)
		data[i] = (char)((i >> 12) + (i >> 20) * 7);
	tb_file(&b, file, data, size);
	tb_end(&b);
	free(data);
	return b;
}

static inline struct tb tb_gzip(const struct tb *in)
{
	struct tb out = {0};
	uLongf n = compressBound(in->len) + 64;
	out.p = malloc(n);
	z_stream z = {0};
	deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
	z.next_in = in->p;
	z.avail_in = (uInt)in->len;
	z.next_out = out.p;
	z.avail_out = (uInt)n;
	deflate(&z, Z_FINISH);
	out.len = z.total_out;
	deflateEnd(&z);
	out.cap = n;
	return out;
}

static inline struct tb tb_zstd(const struct tb *in)
{
	struct tb out = {0};
	size_t n = ZSTD_compressBound(in->len);
	out.p = malloc(n);
	ZSTD_CCtx *c = ZSTD_createCCtx();
	ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1); /* as the zstd CLI does */
	out.len = ZSTD_compress2(c, out.p, n, in->p, in->len);
	ZSTD_freeCCtx(c);
	out.cap = n;
	return out;
}

/* A memory source for img_read_fn, handing out at most `chunk` bytes a call. */
struct memsrc {
	const uint8_t *p;
	size_t len, off, chunk;
};

static inline ssize_t memsrc_read(void *ctx, void *buf, size_t n)
{
	struct memsrc *s = ctx;
	size_t k = s->len - s->off;
	if (k > n)
		k = n;
	if (s->chunk && k > s->chunk)
		k = s->chunk;
	if (k == 0)
		return 0;
	memcpy(buf, s->p + s->off, k);
	s->off += k;
	return (ssize_t)k;
}
