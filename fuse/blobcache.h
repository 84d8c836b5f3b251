/* blobcache.h — verified lazy reads of image blobs and the node chunk cache.
 *
 * Image blobs (imagesvc/store.h) are regular files of the namespace, marked
 * at import with the xattr trusted.strata.blob (and the sticky bit, a cheap
 * filter) naming the inode of their chunk-digest table (blob, table and
 * xattr formats: fs/blob_format.h). When the kernel
 * reads such a file (EROFS reads its extra devices through the FUSE mount),
 * strata-fuse serves the read from here:
 *
 *  - the read is mapped onto the blob's chunks (table records: offset,
 *    length, SHA-256); bytes in padding or between records read as zeros;
 *  - a chunk not in the node cache is fetched whole from the store (one
 *    fetch call for a run of adjacent missing chunks), its SHA-256 checked
 *    before any byte is used (a mismatch is -EIO and a log line, never
 *    wrong bytes), and written to the cache;
 *  - the cache is a directory on local disk, one file per chunk named by
 *    its digest (DIR/chunks/XX/HEX, written tmp + rename), shared by every
 *    image and blob (a chunk is cached once), bounded in bytes with LRU
 *    eviction, and kept across restarts (rescanned at open; a chunk found
 *    on disk is re-verified on its first use after a restart).
 *
 * Pinned tables: the image service, which verified the image's signed
 * record, tells strata-fuse the SHA-256 of each blob's digest table by
 * setting the xattr SFS_BLOB_PIN_XATTR on the blob (32 bytes; root only, as
 * every trusted.* name). The value is kept here, in memory and in
 * DIR/pins/INO (local disk: a restarted or taking-over strata-fuse checks
 * the tables it loads again), never in strata-meta; a table whose SHA-256
 * differs from its pin is refused (-EIO and a log line), so the chain
 * signed record -> table -> chunk digests is closed. A table attached
 * before its pin and not matching it is retired (kept for the handles that
 * hold it, found no more) and loaded again.
 *
 * DIR/stats holds counters (text, rewritten after each read) for tools and
 * benchmarks: fetched_bytes, fetches, hits, misses, bad, evicted, bytes.
 *
 * Invariants:
 *  1. A cache file's content always has the SHA-256 of its name (written
 *     only after verification; renamed into place atomically).
 *  2. cached bytes <= limit after every insertion (the entry just inserted
 *     is evicted last).
 *  3. Tables attached to an inode are never freed before sfs_blobcache_free, so
 *     a pointer from sfs_blobcache_table() stays valid.
 *  4. The table sfs_blobcache_table() finds for a pinned inode has the
 *     pinned SHA-256 (checked before attaching, and when a pin is set). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/blob_format.h"

#define SFS_BLOB_TABLE_MAX (64u << 20) /* bytes of one digest table */
/* imagesvc/image_auth.h IMG_TABLE_PIN_XATTR: the same name. */
#define SFS_BLOB_PIN_XATTR "trusted.strata.blob_table_sha256"
#define SFS_BLOB_TABLES_MAX 65536 /* blobs attached at once */

struct sfs_blobcache;
struct sfs_blob_table;

/* Fetches len raw bytes of the blob at off from the store into buf.
 * Returns 0 or -errno. */
typedef int (*sfs_blob_fetch_fn)(void *ctx, uint64_t off, size_t len, void *buf);

/* Opens (creating) the cache in dir, limited to max_bytes. Returns 0 and
 * *ret, or -errno. */
int sfs_blobcache_open(const char *dir, uint64_t max_bytes, struct sfs_blobcache **ret);
/* Frees bc and every attached table; accepts NULL; returns NULL. */
struct sfs_blobcache *sfs_blobcache_free(struct sfs_blobcache *bc);

/* Parses a digest table (fs/blob_format.h) into a lookup table sorted by
 * offset (at most SFS_BLOB_TABLE_MAX bytes; overlapping records are refused).
 * Returns 0 and *ret, or -EBADMSG / -ENOMEM. */
int sfs_blob_table_parse(const void *buf, size_t len, struct sfs_blob_table **ret);
/* Frees t; accepts NULL; returns NULL. */
struct sfs_blob_table *sfs_blob_table_free(struct sfs_blob_table *t);
/* The SHA-256 of the bytes t was parsed from. */
const uint8_t *sfs_blob_table_sha(const struct sfs_blob_table *t);

/* Attaches t (ownership passes, also on failure) to inode ino. Returns 0,
 * -ENOSPC (too many tables) or -ENOMEM. An existing table is kept. */
int sfs_blobcache_attach(struct sfs_blobcache *bc, uint64_t ino, struct sfs_blob_table *t);
/* The table attached to ino, or NULL. */
const struct sfs_blob_table *sfs_blobcache_table(struct sfs_blobcache *bc, uint64_t ino);
/* Retires the table attached to ino: sfs_blobcache_table finds it no more,
 * pointers to it stay valid until sfs_blobcache_free (invariant 3). */
void sfs_blobcache_detach(struct sfs_blobcache *bc, uint64_t ino);

/* Pins the SHA-256 of ino's digest table (memory and DIR/pins). Returns 0
 * or -errno. */
int sfs_blobcache_pin(struct sfs_blobcache *bc, uint64_t ino, const uint8_t sha[32]);
/* Whether ino's table is pinned; its digest into ret_sha if so. */
bool sfs_blobcache_pinned(struct sfs_blobcache *bc, uint64_t ino, uint8_t ret_sha[32]);

/* Reads [off, off+len) of the blob described by t into buf (verified).
 * Returns 0 or -errno (-EIO on a digest mismatch). */
int sfs_blobcache_read(struct sfs_blobcache *bc, const struct sfs_blob_table *t, uint64_t off,
		       size_t len, void *buf, sfs_blob_fetch_fn fetch, void *ctx);

struct sfs_blobcache_stats {
	uint64_t fetched_bytes, fetches, hits, misses, bad, evicted, bytes, entries;
};
void sfs_blobcache_get_stats(struct sfs_blobcache *bc, struct sfs_blobcache_stats *ret);
