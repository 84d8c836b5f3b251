/* blob_format.h — the on-disk contract between the image service, which
 * writes image blobs, their chunk-digest tables and the xattr that links a
 * blob to its table (imagesvc/store_import.c, imagesvc/blobstore_local.c),
 * and strata-fuse's blob cache, which reads and verifies them
 * (fuse/blobcache.c). Both sides use only this header, so the format has one
 * definition.
 *
 * A blob is a file of chunks, each at most BLOB_CHUNK_SIZE bytes, starting on
 * a BLOB_ALIGN boundary and zero-padded to the next one (an EROFS chunk index
 * addresses it as block offset / 4096 on an extra device).
 *
 * Digest table (a file of its own, little-endian):
 *   header 16 bytes: u32 magic "SBLI" (0x494c4253), u16 version 1,
 *                    u16 header length 16, u32 record size 48, u32 reserved 0
 *   record 48 bytes: digest[32] (SHA-256 of the chunk's bytes), u64 offset in
 *                    the blob (a multiple of BLOB_ALIGN), u32 length
 *                    (1..BLOB_CHUNK_SIZE), u32 reserved 0
 *   The file is the header and whole records, nothing else.
 *
 * Xattr BLOB_XATTR_NAME on the blob (16 bytes, little-endian): u32 magic
 * "SBLX" (0x584c4253), u16 version 1, u16 length 16, u64 inode of the
 * digest table.
 *
 * Decoders refuse anything else with -EBADMSG; reserved fields are written as
 * zero and ignored on reading. */
#pragma once
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define BLOB_CHUNK_SHIFT 20
#define BLOB_CHUNK_SIZE (1u << BLOB_CHUNK_SHIFT) /* 1 MiB: the largest chunk */
#define BLOB_ALIGN 4096u
#define BLOB_DIGEST_LEN 32

#define BLOB_TABLE_MAGIC 0x494c4253u /* "SBLI" */
#define BLOB_TABLE_VERSION 1
#define BLOB_TABLE_HDR_SIZE 16
#define BLOB_TABLE_REC_SIZE 48

#define BLOB_XATTR_NAME "trusted.strata.blob"
#define BLOB_XATTR_MAGIC 0x584c4253u /* "SBLX" */
#define BLOB_XATTR_VERSION 1
#define BLOB_XATTR_SIZE 16

static_assert(BLOB_TABLE_HDR_SIZE == 4 + 2 + 2 + 4 + 4, "magic, version, hdr len, rec size, rsvd");
static_assert(BLOB_TABLE_REC_SIZE == BLOB_DIGEST_LEN + 8 + 4 + 4,
	      "digest, offset, length, reserved");
static_assert(BLOB_XATTR_SIZE == 4 + 2 + 2 + 8, "magic, version, length, table inode");
static_assert(BLOB_CHUNK_SIZE % BLOB_ALIGN == 0, "whole chunks end on an alignment boundary");

/* One digest-table record: where a chunk lies in its blob and its SHA-256. */
struct blob_rec {
	uint8_t digest[BLOB_DIGEST_LEN];
	uint64_t off;
	uint32_t len;
};

/* Returns the bytes a chunk of len bytes takes in its blob (len rounded up to
 * BLOB_ALIGN). */
static inline uint64_t blob_padded(uint64_t len)
{
	return (len + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN;
}

/* Writes the table header into out. */
void blob_table_hdr_encode(uint8_t out[BLOB_TABLE_HDR_SIZE]);
/* Returns 0 if hdr is a version-1 table header, else -EBADMSG. */
int blob_table_hdr_check(const uint8_t hdr[BLOB_TABLE_HDR_SIZE]);
/* Writes record r into out. */
void blob_rec_encode(const struct blob_rec *r, uint8_t out[BLOB_TABLE_REC_SIZE]);
/* Decodes a record into *ret. Returns 0, or -EBADMSG (offset not aligned,
 * length 0 or above BLOB_CHUNK_SIZE; *ret is then unspecified). */
int blob_rec_decode(const uint8_t in[BLOB_TABLE_REC_SIZE], struct blob_rec *ret);

/* Checks the header and length of a whole table buf[0..len). Returns 0 and
 * the number of records in *ret_n, or -EBADMSG (*ret_n untouched). Records
 * are not looked at. */
int blob_table_count(const void *buf, size_t len, size_t *ret_n);
/* Decodes a whole table buf[0..len) and calls fn(ctx, i, rec) for each record
 * in file order. Returns 0, -EBADMSG (bad header, length or record: fn was
 * called for the records before it), or the first negative value fn returned. */
int blob_table_decode(const void *buf, size_t len,
		      int (*fn)(void *ctx, size_t i, const struct blob_rec *rec), void *ctx);

/* Writes the xattr value naming table inode table_ino into out. */
void blob_xattr_encode(uint64_t table_ino, uint8_t out[BLOB_XATTR_SIZE]);
/* Decodes an xattr value buf[0..len). Returns 0 and the table's inode in
 * *ret_ino, or -EBADMSG (*ret_ino untouched). */
int blob_xattr_decode(const void *buf, size_t len, uint64_t *ret_ino);
