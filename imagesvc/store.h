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
 *   ROOT/refs/NAME            "sha256:HEX\nhmac-sha256:MAC\n" (MAC of the name
 *                             and the digest, image_auth.h); NAME is
 *                             name:tag, '/' and '%' escaped as %2f / %25
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
#include <sys/types.h>

#include "imagesvc/blobstore.h"

#define IMG_STORE_SUBDIR ".strata/images"
#define IMG_REC_MAGIC 0x474d4953u /* "SIMG" */
#define IMG_REC_VERSION 2	  /* 1: unsigned, from before; refused (resign) */
#define IMG_REC_HDR 16
#define IMG_REC_HAS_MANIFEST 1u /* flags: manifest.json stored (manifest_doc) */
#define IMG_REC_HAS_CONFIG 2u	/* config.json stored (config_doc) */
#define IMG_MAX_LAYERS 256
#define IMG_MAX_BLOBS 4096
#define IMG_NAME_MAX 200
/* The largest record: header, fixed fields, blobs with their table digests,
 * layers, MAC. */
#define IMG_REC_MAX (IMG_REC_HDR + 192 + 36 * IMG_MAX_BLOBS + 32 * IMG_MAX_LAYERS + 32)

/* An image record (ROOT/images/HEX/image), format 2, little-endian:
 *   header 16 B: magic "SIMG", u16 version 2, u16 header len 16, u32 total
 *                len, u32 flags (IMG_REC_HAS_*)
 *   body: manifest digest[32] (= HEX), meta.img sha256[32], manifest.json
 *         sha256[32], config.json sha256[32] (zero when its flag is clear),
 *         u64 meta size, u64 file bytes, u64 created (unix s), u64 chunks,
 *         u64 chunks_new, u32 n_blobs, u32 n_layers,
 *         u32 blob ids[n_blobs] (EROFS device order),
 *         sha256 of each blob's digest table [32][n_blobs] (same order),
 *         layer sha256[32][n_layers] (as stored, compressed),
 *         MAC[32] = HMAC(image key, "strata-image-record" || all bytes before)
 *                   (image_auth.h)
 * Format 1 (before signatures) had a zero u32 where the flags are, no
 * document or table digests and no MAC; it is decoded (gc counts its blobs,
 * `strata image resign` upgrades it) but never trusted. */
struct img_record {
	uint16_t version;
	uint32_t flags;
	uint8_t manifest[32];
	uint8_t meta_sha[32];
	uint8_t manifest_doc[32], config_doc[32];
	uint64_t meta_size, bytes, created, chunks, chunks_new;
	uint32_t *blobs;
	uint8_t (*tables)[32]; /* [n_blobs]; zero in a format 1 record */
	uint32_t n_blobs;
	uint8_t (*layers)[32];
	uint32_t n_layers;
};

/* ---- the record codec (record.c) ---- */
struct img_auth_key;
/* Bytes of rec encoded (format 2). */
size_t img_record_size(const struct img_record *rec);
/* Encodes rec as format 2 into buf[img_record_size(rec)], signed with k.
 * Returns 0 or -ENOMEM. */
int img_record_encode(const struct img_record *rec, const struct img_auth_key *k, uint8_t *buf);
/* Decodes a record of format 1 or 2 from buf[0..n) into *ret (the MAC is
 * not looked at: img_record_check_mac). Returns 0, -EBADMSG or -ENOMEM. */
int img_record_decode(const uint8_t *buf, size_t n, struct img_record *ret);
/* Checks the MAC of the record buf[0..n) under k. Returns 0, -EKEYEXPIRED
 * (format 1: unsigned), -EKEYREJECTED (wrong MAC) or -ENOMEM. */
int img_record_check_mac(const uint8_t *buf, size_t n, const struct img_auth_key *k);
/* Frees the arrays of r. */
void img_record_done(struct img_record *r);

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
 * A name's signature is checked (image_auth.h): -EKEYEXPIRED for an
 * unsigned one ("run strata image resign"), -EKEYREJECTED for a wrong one,
 * -ENOKEY without a key. Returns 0, -ENOENT, -EINVAL or -EEXIST (ambiguous
 * prefix), each with e saying so. */
int img_store_resolve(struct img_store *s, const char *ref, char hex[65], struct strata_err *e);
/* Loads and verifies the record of image hex: format 2, its MAC under the
 * store's key, its manifest digest hex. Returns 0 and *ret (img_record_done
 * it), or -errno with e saying what is wrong: -ENOENT, -EBADMSG (corrupt),
 * -EKEYEXPIRED (format 1: "run strata image resign"), -EKEYREJECTED (the
 * signature does not verify: rewritten), -ENOKEY (no key). */
int img_store_record(struct img_store *s, const char *hex, struct img_record *ret,
		     struct strata_err *e);
/* Reads ROOT/images/HEX/file ("manifest.json" or "config.json") into a new
 * buffer (free it) of at most max bytes, checked against its SHA-256 in rec.
 * Returns the length, or -ENOENT (the record has none), -EFBIG, -EKEYREJECTED
 * (digest mismatch) or -errno, with e filled. */
ssize_t img_store_read_doc(struct img_store *s, const struct img_record *rec, const char *file,
			   size_t max, char **ret, struct strata_err *e);

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

/* `strata image resign` (resign.c): checks and signs the records and names
 * written before image signatures; what is signed is left as it is, what
 * does not verify is refused (never re-signed). report(ctx, what, e) is
 * called for each refusal (what: the image's hex or the name). Returns 0
 * (refusals are counted, not failures) or -errno with e filled. */
struct img_resign_stats {
	unsigned images, names;			       /* signed now */
	unsigned signed_already, names_signed_already; /* left as they were */
	unsigned refused;
};
typedef void (*img_resign_report_fn)(void *ctx, const char *what, const struct strata_err *e);
int img_store_resign(struct img_store *s, img_resign_report_fn report, void *ctx,
		     struct img_resign_stats *ret, struct strata_err *e);

/* Leases: the image hex is mounted on node (a host name). */
int img_store_lease(struct img_store *s, const char *hex, const char *node, bool take);
/* Number of leases on hex; the first one's node into node[cap] if any. */
int img_store_leases(struct img_store *s, const char *hex, char *node, size_t cap);

/* Reads a chunk-digest table file (at most 256 MiB). Calls fn(ctx, i, rec)
 * for each record (blob_table_decode); with ret_sha, the SHA-256 of the
 * whole file goes there first (fn may compare it). Returns 0, -EBADMSG
 * (corrupt), the first negative value of fn, or -errno. */
int img_blobidx_read(const char *path, int (*fn)(void *ctx, size_t i, const struct blob_rec *rec),
		     void *ctx, uint8_t *ret_sha);

/* hex <-> binary SHA-256 helpers. parse accepts "sha256:HEX" or "HEX". */
int img_digest_parse(const char *s, uint8_t out[32]);
void img_digest_hex(const uint8_t d[32], char hex[65]);
/* SHA-256 of a file: 0 or -errno. */
int img_sha256_file(const char *path, uint8_t out[32], uint64_t *ret_size);
