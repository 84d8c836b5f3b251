/* test_blob_format.c — unit test of fs/blob_format.c, the codec of image blob
 * digest tables and of the blob xattr: the exact bytes written (the format is
 * on disk in every image store, so it must not drift), round trips, and the
 * refusal of every malformed header, length and record. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs/blob_format.h"
#include "tests/testutil.h"

/* The bytes the image service has always written: header, then one record
 * (digest 0x11.., offset 0x2000, length 5000). */
static const uint8_t golden_hdr[BLOB_TABLE_HDR_SIZE] = {
    'S', 'B', 'L', 'I', 1, 0, 16, 0, 48, 0, 0, 0, 0, 0, 0, 0,
};
static const uint8_t golden_tail[16] = {
    0x00, 0x20, 0, 0, 0, 0, 0, 0, 0x88, 0x13, 0, 0, 0, 0, 0, 0,
};
static const uint8_t golden_xattr[BLOB_XATTR_SIZE] = {
    'S', 'B', 'L', 'X', 1, 0, 16, 0, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
};

static void test_golden(void)
{
	uint8_t hdr[BLOB_TABLE_HDR_SIZE], raw[BLOB_TABLE_REC_SIZE], x[BLOB_XATTR_SIZE];
	struct blob_rec r = {.off = 0x2000, .len = 5000};
	memset(r.digest, 0x11, sizeof(r.digest));
	blob_table_hdr_encode(hdr);
	CHECK(!memcmp(hdr, golden_hdr, sizeof(hdr)));
	blob_rec_encode(&r, raw);
	for (int i = 0; i < BLOB_DIGEST_LEN; i++)
		CHECK_EQ(raw[i], 0x11);
	CHECK(!memcmp(raw + BLOB_DIGEST_LEN, golden_tail, sizeof(golden_tail)));
	blob_xattr_encode(0x0123456789abcdefull, x);
	CHECK(!memcmp(x, golden_xattr, sizeof(x)));
}

struct seen {
	struct blob_rec v[4];
	size_t n;
	int fail_at; /* the callback's error at this index, or -1 */
};

static int collect(void *ctx, size_t i, const struct blob_rec *rec)
{
	struct seen *s = ctx;
	if ((int)i == s->fail_at)
		return -ENOSPC;
	CHECK_EQ(i, s->n);
	s->v[s->n++] = *rec;
	return 0;
}

/* A table of n records: record i at offset i * 8192, length 4096 + i. */
static size_t build(uint8_t *buf, size_t n)
{
	blob_table_hdr_encode(buf);
	for (size_t i = 0; i < n; i++) {
		struct blob_rec r = {.off = i * 8192, .len = 4096 + (uint32_t)i};
		memset(r.digest, (int)i + 1, sizeof(r.digest));
		blob_rec_encode(&r, buf + BLOB_TABLE_HDR_SIZE + i * BLOB_TABLE_REC_SIZE);
	}
	return BLOB_TABLE_HDR_SIZE + n * BLOB_TABLE_REC_SIZE;
}

static void test_table_roundtrip(void)
{
	uint8_t buf[BLOB_TABLE_HDR_SIZE + 4 * BLOB_TABLE_REC_SIZE];
	size_t len = build(buf, 4), n = 99;
	struct seen s = {.fail_at = -1};
	CHECK_EQ(blob_table_count(buf, len, &n), 0);
	CHECK_EQ(n, 4);
	CHECK_EQ(blob_table_decode(buf, len, collect, &s), 0);
	CHECK_EQ(s.n, 4);
	for (size_t i = 0; i < 4; i++) {
		CHECK_EQ(s.v[i].off, i * 8192);
		CHECK_EQ(s.v[i].len, 4096 + i);
		CHECK_EQ(s.v[i].digest[31], i + 1);
	}
	/* an empty table is valid */
	s.n = 0;
	CHECK_EQ(blob_table_decode(buf, BLOB_TABLE_HDR_SIZE, collect, &s), 0);
	CHECK_EQ(s.n, 0);
	/* the callback's error stops the walk and is returned */
	s = (struct seen){.fail_at = 2};
	CHECK_EQ(blob_table_decode(buf, len, collect, &s), -ENOSPC);
	CHECK_EQ(s.n, 2);
}

static void test_table_refused(void)
{
	uint8_t buf[BLOB_TABLE_HDR_SIZE + 4 * BLOB_TABLE_REC_SIZE];
	size_t len = build(buf, 4), n = 7;
	struct seen s = {.fail_at = -1};
	CHECK_EQ(blob_table_count(buf, BLOB_TABLE_HDR_SIZE - 1, &n), -EBADMSG);
	CHECK_EQ(blob_table_count(buf, len - 1, &n), -EBADMSG);
	CHECK_EQ(n, 7);			  /* untouched on failure */
	for (int at = 0; at < 12; at++) { /* magic, version, header length, record size */
		build(buf, 4);
		buf[at] ^= 0x40;
		CHECK_EQ(blob_table_decode(buf, len, collect, &s), -EBADMSG);
	}
	build(buf, 4);
	buf[12] = 0xff; /* reserved: ignored */
	CHECK_EQ(blob_table_count(buf, len, &n), 0);

	uint8_t *rec2 = buf + BLOB_TABLE_HDR_SIZE + 2 * BLOB_TABLE_REC_SIZE;
	struct blob_rec r = {.off = 4096, .len = BLOB_CHUNK_SIZE};
	blob_rec_encode(&r, rec2);
	CHECK_EQ(blob_rec_decode(rec2, &r), 0); /* the largest chunk */
	r = (struct blob_rec){.off = 4095, .len = 1};
	blob_rec_encode(&r, rec2);
	CHECK_EQ(blob_rec_decode(rec2, &r), -EBADMSG); /* unaligned */
	s.n = 0;
	CHECK_EQ(blob_table_decode(buf, len, collect, &s), -EBADMSG);
	CHECK_EQ(s.n, 2); /* the records before the bad one were delivered */
	r = (struct blob_rec){.off = 0, .len = 0};
	blob_rec_encode(&r, rec2);
	CHECK_EQ(blob_rec_decode(rec2, &r), -EBADMSG);
	r = (struct blob_rec){.off = 0, .len = BLOB_CHUNK_SIZE + 1};
	blob_rec_encode(&r, rec2);
	CHECK_EQ(blob_rec_decode(rec2, &r), -EBADMSG);
}

static void test_xattr(void)
{
	uint8_t x[BLOB_XATTR_SIZE + 1];
	uint64_t ino = 5;
	blob_xattr_encode(77, x);
	CHECK_EQ(blob_xattr_decode(x, BLOB_XATTR_SIZE, &ino), 0);
	CHECK_EQ(ino, 77);
	CHECK_EQ(blob_xattr_decode(x, BLOB_XATTR_SIZE - 1, &ino), -EBADMSG);
	CHECK_EQ(blob_xattr_decode(x, BLOB_XATTR_SIZE + 1, &ino), -EBADMSG);
	for (int at = 0; at < 8; at++) {
		blob_xattr_encode(77, x);
		x[at] ^= 1;
		ino = 5;
		CHECK_EQ(blob_xattr_decode(x, BLOB_XATTR_SIZE, &ino), -EBADMSG);
		CHECK_EQ(ino, 5);
	}
}

static void test_padded(void)
{
	CHECK_EQ(blob_padded(1), 4096);
	CHECK_EQ(blob_padded(4096), 4096);
	CHECK_EQ(blob_padded(4097), 8192);
	CHECK_EQ(blob_padded(BLOB_CHUNK_SIZE), BLOB_CHUNK_SIZE);
}

int main(void)
{
	test_golden();
	test_table_roundtrip();
	test_table_refused();
	test_xattr();
	test_padded();
	printf("blob_format: ok\n");
	return 0;
}
