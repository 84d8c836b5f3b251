/* blobstore.h — where the chunks of image layers live.
 *
 * Every regular file of a layer is cut into chunks of BLOB_CHUNK_SIZE bytes
 * (file-aligned; the last chunk may be shorter), each named by its SHA-256.
 * A chunk is stored once: put_chunk() first looks the digest up in the dedup
 * index (all blobs ever written to this store, any layer of any image) and
 * only appends the chunk to the layer's blob when it is new.
 *
 * A blob is an append-only file of chunks, each starting on a 4 KiB boundary
 * and zero-padded to the next one, so that an EROFS chunk index can address
 * it as a block number (offset / 4096) on an extra device. Next to it travels
 * the blob's chunk-digest table; both formats are in fs/blob_format.h.
 *
 * The store is an interface with two implementations: the image store's
 * staged import (store_import.c, blobs in the strata namespace) and
 * blobstore_local_open(), a local directory (img_mkimage and unit tests).
 * Blob ids are store-wide (uint32); an image refers to blobs by id. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/blob_format.h"

struct blob_loc {
	uint32_t blob;
	uint64_t off; /* byte offset in the blob, a multiple of BLOB_ALIGN */
};

struct blobstore;

struct blobstore_ops {
	/* Starts a new blob for one layer. Returns 0 and its id, or -errno. */
	int (*begin_blob)(struct blobstore *bs, uint32_t *ret_blob);
	/* Stores chunk data[0..len) (len <= BLOB_CHUNK_SIZE) with the given digest
	 * into `blob` unless the digest is already known. Returns 0 with the
	 * location in *ret and *ret_new (whether bytes were written), or -errno. */
	int (*put_chunk)(struct blobstore *bs, uint32_t blob, const uint8_t digest[BLOB_DIGEST_LEN],
			 const void *data, uint32_t len, struct blob_loc *ret, bool *ret_new);
	/* Returns 0 and the location of a known digest, or -ENOENT. */
	int (*lookup)(struct blobstore *bs, const uint8_t digest[BLOB_DIGEST_LEN],
		      struct blob_loc *ret);
	/* Makes the blob durable (data and digest table). Returns 0 or -errno. */
	int (*end_blob)(struct blobstore *bs, uint32_t blob);
	/* Writes the path of the blob's data file into buf[cap]. Returns 0,
	 * -ENAMETOOLONG or -ENOENT. */
	int (*blob_path)(struct blobstore *bs, uint32_t blob, char *buf, size_t cap);
	void (*free)(struct blobstore *bs);
};

struct blobstore {
	const struct blobstore_ops *ops;
};

static inline int blobstore_begin_blob(struct blobstore *bs, uint32_t *ret_blob)
{
	return bs->ops->begin_blob(bs, ret_blob);
}
static inline int blobstore_put_chunk(struct blobstore *bs, uint32_t blob,
				      const uint8_t digest[BLOB_DIGEST_LEN], const void *data,
				      uint32_t len, struct blob_loc *ret, bool *ret_new)
{
	return bs->ops->put_chunk(bs, blob, digest, data, len, ret, ret_new);
}
static inline int blobstore_lookup(struct blobstore *bs, const uint8_t digest[BLOB_DIGEST_LEN],
				   struct blob_loc *ret)
{
	return bs->ops->lookup(bs, digest, ret);
}
static inline int blobstore_end_blob(struct blobstore *bs, uint32_t blob)
{
	return bs->ops->end_blob(bs, blob);
}
static inline int blobstore_blob_path(struct blobstore *bs, uint32_t blob, char *buf, size_t cap)
{
	return bs->ops->blob_path(bs, blob, buf, cap);
}
/* Frees bs; accepts NULL; returns NULL. */
static inline struct blobstore *blobstore_free(struct blobstore *bs)
{
	if (bs)
		bs->ops->free(bs);
	return NULL;
}

/* Opens (creating if needed) a local-directory store: DIR/blob-NNNNNNNN.data
 * and DIR/blob-NNNNNNNN.idx. Loads every digest table into the dedup index.
 * Returns 0 and the store in *ret, or -errno (-EBADMSG for a corrupt table). */
int blobstore_local_open(const char *dir, struct blobstore **ret);

/* ---- for implementations: the files of one blob being written ---- */
struct digest_index;

struct blob_files {
	int data_fd, idx_fd; /* -1 once closed */
	uint64_t size;	     /* bytes in the data file, a multiple of BLOB_ALIGN */
};

/* Creates the data file and the digest table (O_EXCL: a second writer fails
 * instead of interleaving) and writes the table header. Returns 0 and the
 * open files in *ret, or -errno. */
int blob_files_create(const char *data_path, const char *idx_path, struct blob_files *ret);
/* put_chunk over a dedup index: -EINVAL for a bad len; a digest known to ix
 * gives its location (*ret_new false); else the chunk is appended to f (the
 * open blob `blob`; -EBADF when f is NULL or closed) and added to ix.
 * Returns 0 or -errno (the blob is then unusable). */
int blob_files_put(struct blob_files *f, struct digest_index *ix, uint32_t blob,
		   const uint8_t digest[BLOB_DIGEST_LEN], const void *data, uint32_t len,
		   struct blob_loc *ret, bool *ret_new);
/* Syncs and closes both files (closed either way). Returns 0 or -errno. */
int blob_files_close(struct blob_files *f);
