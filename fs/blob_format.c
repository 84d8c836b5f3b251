/* blob_format.c — the little-endian codec of image blob digest tables and of
 * the blob xattr (the format is described in blob_format.h). Pure functions
 * over byte buffers: no I/O, no allocation, so both the image service and
 * strata-fuse (and the fuzzer) use the same checks. */
#include "fs/blob_format.h"

#include <errno.h>
#include <string.h>

#include "fs/wire.h"

void blob_table_hdr_encode(uint8_t out[BLOB_TABLE_HDR_SIZE])
{
	memset(out, 0, BLOB_TABLE_HDR_SIZE);
	le32_put(out, BLOB_TABLE_MAGIC);
	le16_put(out + 4, BLOB_TABLE_VERSION);
	le16_put(out + 6, BLOB_TABLE_HDR_SIZE);
	le32_put(out + 8, BLOB_TABLE_REC_SIZE);
}

int blob_table_hdr_check(const uint8_t hdr[BLOB_TABLE_HDR_SIZE])
{
	if (le32_get(hdr) != BLOB_TABLE_MAGIC || le16_get(hdr + 4) != BLOB_TABLE_VERSION ||
	    le16_get(hdr + 6) != BLOB_TABLE_HDR_SIZE || le32_get(hdr + 8) != BLOB_TABLE_REC_SIZE)
		return -EBADMSG;
	return 0;
}

void blob_rec_encode(const struct blob_rec *r, uint8_t out[BLOB_TABLE_REC_SIZE])
{
	memcpy(out, r->digest, BLOB_DIGEST_LEN);
	le64_put(out + 32, r->off);
	le32_put(out + 40, r->len);
	le32_put(out + 44, 0);
}

int blob_rec_decode(const uint8_t in[BLOB_TABLE_REC_SIZE], struct blob_rec *ret)
{
	memcpy(ret->digest, in, BLOB_DIGEST_LEN);
	ret->off = le64_get(in + 32);
	ret->len = le32_get(in + 40);
	if (ret->off % BLOB_ALIGN || ret->len == 0 || ret->len > BLOB_CHUNK_SIZE)
		return -EBADMSG;
	return 0;
}

int blob_table_count(const void *buf, size_t len, size_t *ret_n)
{
	if (len < BLOB_TABLE_HDR_SIZE || (len - BLOB_TABLE_HDR_SIZE) % BLOB_TABLE_REC_SIZE ||
	    blob_table_hdr_check(buf) < 0)
		return -EBADMSG;
	*ret_n = (len - BLOB_TABLE_HDR_SIZE) / BLOB_TABLE_REC_SIZE;
	return 0;
}

int blob_table_decode(const void *buf, size_t len,
		      int (*fn)(void *ctx, size_t i, const struct blob_rec *rec), void *ctx)
{
	size_t n;
	int r = blob_table_count(buf, len, &n);
	for (size_t i = 0; r == 0 && i < n; i++) {
		struct blob_rec rec;
		r = blob_rec_decode(
		    (const uint8_t *)buf + BLOB_TABLE_HDR_SIZE + i * BLOB_TABLE_REC_SIZE, &rec);
		if (r == 0)
			r = fn(ctx, i, &rec);
	}
	return r;
}

void blob_xattr_encode(uint64_t table_ino, uint8_t out[BLOB_XATTR_SIZE])
{
	le32_put(out, BLOB_XATTR_MAGIC);
	le16_put(out + 4, BLOB_XATTR_VERSION);
	le16_put(out + 6, BLOB_XATTR_SIZE);
	le64_put(out + 8, table_ino);
}

int blob_xattr_decode(const void *buf, size_t len, uint64_t *ret_ino)
{
	const uint8_t *b = buf;
	if (len != BLOB_XATTR_SIZE || le32_get(b) != BLOB_XATTR_MAGIC ||
	    le16_get(b + 4) != BLOB_XATTR_VERSION || le16_get(b + 6) != BLOB_XATTR_SIZE)
		return -EBADMSG;
	*ret_ino = le64_get(b + 8);
	return 0;
}
