/* store.h — the image store on the cluster: blobs, digest tables, EROFS
 * metadata images, names and reference counts, kept as regular files in a
 * reserved part of the strata namespace (normally <mount>/.strata/images).
 *
 *   ROOT/lock                 flock()ed by every writer (import, rm, gc)
 *   ROOT/blobs/NNNNNNNN.data  a layer's new chunks (4 KiB aligned), mode
 *                             01444, xattr trusted.strata.blob -> its table
 *   ROOT/blobs/NNNNNNNN.idx   its chunk-digest table
 *   (blob, table and xattr formats: fs/blob_format.h)
 *   ROOT/images/HEX/          one image, HEX = manifest SHA-256:
 *        image                the record (img_record below, binary LE)
 *        meta.img             the EROFS metadata image
 *        manifest.json, config.json   as imported
 *        prefetch             the recorded prefetch list (prefetch.h), if any
 *   ROOT/refs/NAME            "sha256:HEX\n"; NAME is name:tag, '/' and '%'
 *                             escaped as %2f / %25
 *   ROOT/leases/NODE@HEX      the image is mounted on NODE (rm refuses it)
 *   ROOT/tmp/ID/              an import in progress (removed by the next writer)
 *
 * Dedup: every published digest table is loaded into an in-memory index at
 * import; a chunk known there is not stored again. The directory of tables
 * is the store's digest index: a table is published (renamed into blobs/)
 * together with its blob, so the index never names bytes that do not exist.
 *
 * Invariants:
 *  1. Nothing half-imported is visible: blobs and the image directory are
 *     written under tmp/ and renamed into place; blobs first, then the
 *     image, then the ref. A crash leaves only tmp/ debris and unreferenced
 *     blobs, which the next writer removes (under the lock).
 *  2. A blob is removed only when no image record lists it (reference count
 *     zero), and an image is removed only when no ref names it and no lease
 *     holds it.
 *  3. Blob and table files never change after publication.
 *
 * Errors: negative errno, with a one-line message in struct strata_err. */
#pragma once
#include "fs/err.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "imagesvc/blobstore.h"

#define IMG_STORE_SUBDIR ".strata/images"
#define IMG_REC_MAGIC 0x474d4953u /* "SIMG" */
#define IMG_REC_VERSION 1
#define IMG_REC_HDR 16
#define IMG_MAX_LAYERS 256
#define IMG_MAX_BLOBS 4096
#define IMG_NAME_MAX 200

/* An image record (ROOT/images/HEX/image):
 *   header 16 B: magic "SIMG", u16 version, u16 header len 16, u32 total len, u32 0
 *   body: manifest sha256[32], meta.img sha256[32], u64 meta size, u64 file
 *         bytes, u64 created (unix s), u64 chunks, u64 chunks_new, u32 n_blobs,
 *         u32 n_layers, u32 blob ids[n_blobs] (EROFS device order),
 *         layer sha256[32][n_layers] (as stored, compressed) */
struct img_record {
	uint8_t manifest[32];
	uint8_t meta_sha[32];
	uint64_t meta_size, bytes, created, chunks, chunks_new;
	uint32_t *blobs;
	uint32_t n_blobs;
	uint8_t (*layers)[32];
	uint32_t n_layers;
};

struct img_store;

/* Opens the store at root (created if missing). Returns 0 and *ret, or -errno. */
int img_store_open(const char *root, struct img_store **ret);
/* Frees s; accepts NULL; returns NULL. */
struct img_store *img_store_free(struct img_store *s);
const char *img_store_root(const struct img_store *s);

struct img_layer_src {
	const char *path;   /* the layer blob as delivered (gzip, zstd or tar) */
	const char *digest; /* "sha256:HEX" of those bytes */
};

struct img_import_req {
	const char *manifest_digest; /* "sha256:HEX" */
	const char *name;	     /* "name[:tag]" or NULL (then no ref) */
	const char *manifest_path;   /* copied into the image directory; may be NULL */
	const char *config_path;     /* same */
	const struct img_layer_src *layers;
	size_t n_layers;
};

struct img_import_stats {
	uint64_t entries, files, bytes, chunks, chunks_new, chunks_dedup, meta_size;
	uint32_t n_blobs, blobs_new;
	bool existed; /* the image was already stored (only the ref was set) */
};

/* Converts and publishes an image (see the invariants). Returns 0 or a
 * negative errno with e filled; on failure nothing new is visible. */
int img_store_import(struct img_store *s, const struct img_import_req *req,
		     struct img_import_stats *ret, struct strata_err *e);

/* Resolves REF: "sha256:HEX", a unique HEX prefix (>= 8), or name[:tag]
 * (tag "latest" when absent). Writes the 64-char hex into hex[65].
 * Returns 0, -ENOENT, -EINVAL or -EEXIST (ambiguous prefix). */
int img_store_resolve(struct img_store *s, const char *ref, char hex[65], struct strata_err *e);
/* Loads the record of image hex. Returns 0 and *ret (img_record_done it). */
int img_store_record(struct img_store *s, const char *hex, struct img_record *ret);
void img_record_done(struct img_record *r);

/* Path helpers (snprintf into buf[cap]); return 0 or -ENAMETOOLONG. */
int img_store_blob_path(const struct img_store *s, uint32_t blob, const char *ext, char *buf,
			size_t cap);
int img_store_image_path(const struct img_store *s, const char *hex, const char *file, char *buf,
			 size_t cap);

/* Calls fn for every ref (decoded name, hex) and then for every image with
 * no ref (name NULL). Returns 0 or the first negative value fn returned. */
int img_store_list(struct img_store *s, int (*fn)(void *ctx, const char *name, const char *hex),
		   void *ctx);
/* Names (refs) pointing at hex, as "a, b" into buf. */
void img_store_names_of(struct img_store *s, const char *hex, char *buf, size_t cap);

/* Removes REF: a name drops that ref only; the image itself (and blobs no
 * other image lists) go when no ref is left. -EBUSY if the image is mounted
 * (a lease exists) unless force. Returns 0 or -errno with e filled. */
int img_store_rm(struct img_store *s, const char *ref, bool force, struct strata_err *e);
/* Removes unreferenced blobs and import debris. Returns the number of blobs
 * removed or -errno. Takes the lock. */
int img_store_gc(struct img_store *s);

/* Leases: the image hex is mounted on node (a host name). */
int img_store_lease(struct img_store *s, const char *hex, const char *node, bool take);
/* Number of leases on hex; the first one's node into node[cap] if any. */
int img_store_leases(struct img_store *s, const char *hex, char *node, size_t cap);

/* Reads a chunk-digest table file (at most 256 MiB). Calls fn(ctx, i, rec)
 * for each record (blob_table_decode). Returns 0, -EBADMSG (corrupt), the
 * first negative value of fn, or -errno. */
int img_blobidx_read(const char *path, int (*fn)(void *ctx, size_t i, const struct blob_rec *rec),
		     void *ctx);

/* hex <-> binary SHA-256 helpers. parse accepts "sha256:HEX" or "HEX". */
int img_digest_parse(const char *s, uint8_t out[32]);
void img_digest_hex(const uint8_t d[32], char hex[65]);
/* SHA-256 of a file: 0 or -errno. */
int img_sha256_file(const char *path, uint8_t out[32], uint64_t *ret_size);
