/* oci-internal.h — what the files of imagesvc/pull share:
 *   oci_documents.c  OCI and Docker v2 media types, descriptor / manifest /
 *                    index / config parsing with json-c, platform selection,
 *                    the limits;
 *   oci_stage.c      SHA-256 digests (OpenSSL libcrypto) and verified copies,
 *                    the stage writer that builds a staged image directory
 *                    (see oci.h) atomically, and loading a stage back;
 *   oci_import.c     the import of an OCI layout and oci_import() itself;
 *   oci_archive.c    the import of a docker-save tarball;
 *   registry.c       pulls from a registry (over http.c).
 * Nothing here logs; errors are negative errno plus a message in struct
 * strata_err (fs/err.h). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "imagesvc/pull/oci.h"

#define OCI_MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define OCI_MT_INDEX "application/vnd.oci.image.index.v1+json"
#define OCI_MT_CONFIG "application/vnd.oci.image.config.v1+json"
#define OCI_MT_LAYER_TAR "application/vnd.oci.image.layer.v1.tar"
#define DOCKER_MT_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define DOCKER_MT_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define DOCKER_MT_SCHEMA1 "application/vnd.docker.distribution.manifest.v1"

#define OCI_WANT_OS "linux"
#define OCI_WANT_ARCH "amd64"
#define OCI_JSON_MAX_DEPTH 64
#define OCI_SHORT_MAX 256 /* media types, platform fields, tags */

struct oci_desc {
	char media_type[OCI_SHORT_MAX];
	char digest[OCI_DIGEST_MAX];
	uint64_t size;
	bool has_platform;
	char os[64], arch[64], variant[64];
	char ref_name[OCI_SHORT_MAX];	/* org.opencontainers.image.ref.name */
	char image_name[OCI_SHORT_MAX]; /* io.containerd.image.name */
};

struct oci_manifest {
	struct oci_desc config;
	struct oci_desc *layers;
	size_t n_layers;
};

enum oci_doc_kind { OCI_DOC_MANIFEST, OCI_DOC_INDEX };

/* --- JSON documents (oci_documents.c) --------------------------------- */

/* Returns lim, or the defaults (written into buf) when lim is NULL. */
const struct oci_limits *oci_limits_or_default(const struct oci_limits *lim,
					       struct oci_limits *buf);

static inline void oci_json_putp(struct json_object **o)
{
	if (*o)
		json_object_put(*o);
}
#define _cleanup_json_ __attribute__((cleanup(oci_json_putp)))

/* Returns the string member key of o, NULL if absent or not a string. */
static inline const char *oci_jstr(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

/* Parses buf[len] as one JSON object (nothing but whitespace after it).
 * what names the document in errors. Returns 0 and the object in *ret
 * (json_object_put it), or -EBADMSG. */
int oci_json_parse(const char *what, const char *buf, size_t len, struct json_object **ret,
		   struct strata_err *e);
/* Tells a manifest from an index/list by its mediaType, else the transport's
 * Content-Type (may be NULL), else its shape. Schema 1 is -EOPNOTSUPP. */
int oci_doc_kind(const char *buf, size_t len, const char *content_type, enum oci_doc_kind *ret,
		 struct strata_err *e);
/* Parses an index or manifest list. Returns 0 and the entries in *ret
 * (free()), or a negative errno. */
int oci_parse_index(const char *buf, size_t len, const struct oci_limits *lim,
		    struct oci_desc **ret, size_t *ret_n, struct strata_err *e);
/* Picks the entry to use: with tag, the one whose ref.name annotation is tag
 * (then, if that is itself an index, the caller recurses); without, the
 * linux/amd64 one, or the only one when no entry names a platform.
 * Returns 0 and its position, or -ENOENT naming what there was. */
int oci_select(const struct oci_desc *d, size_t n, const char *tag, size_t *ret,
	       struct strata_err *e);
/* Parses an image manifest (OCI or Docker v2 schema 2). Returns 0 and *ret
 * (oci_manifest_done it) or a negative errno. */
int oci_parse_manifest(const char *buf, size_t len, const struct oci_limits *lim,
		       struct oci_manifest *ret, struct strata_err *e);
void oci_manifest_done(struct oci_manifest *m);
/* Parses an image config; refuses one for another platform (-ENOENT) and
 * one whose rootfs.diff_ids disagree with n_layers (-EBADMSG). diff_ids, if
 * not NULL, receives a copy of rootfs.diff_ids (n_layers entries). */
int oci_parse_config(const char *buf, size_t len, size_t n_layers, struct oci_config *ret,
		     char (*diff_ids)[OCI_DIGEST_MAX], struct strata_err *e);
void oci_config_done(struct oci_config *c);

/* --- digests (oci_stage.c) -------------------------------------------- */

/* Returns 0 for "sha256:" + 64 lowercase hex, -EOPNOTSUPP for another
 * algorithm, -EINVAL otherwise. */
int oci_digest_check(const char *d);
/* Writes "sha256:<hex>" of buf[len] into out. */
void oci_sha256(const void *buf, size_t len, char out[OCI_DIGEST_MAX]);

struct oci_hash {
	void *ctx; /* EVP_MD_CTX */
};
int oci_hash_init(struct oci_hash *h);
void oci_hash_update(struct oci_hash *h, const void *buf, size_t len);
/* Writes "sha256:<hex>" into out and resets h for reuse. */
void oci_hash_final(struct oci_hash *h, char out[OCI_DIGEST_MAX]);
void oci_hash_done(struct oci_hash *h);

/* Checks that buf[len] has the descriptor's size and digest. */
int oci_verify_bytes(const char *what, const void *buf, size_t len, const char *digest,
		     uint64_t size, struct strata_err *e);
/* Copies src_fd to dst_fd (both at their offsets) while hashing; the bytes
 * must be exactly size long and hash to digest. */
int oci_copy_verified(int src_fd, int dst_fd, const char *what, const char *digest, uint64_t size,
		      struct strata_err *e);
/* Reads a whole regular file (path relative to dirfd, no symlinks followed
 * in the last component) of at most max bytes into *ret (NUL-terminated,
 * free()). */
int oci_read_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len,
		     struct strata_err *e);

/* --- the stage writer (oci_stage.c) ------------------------------------ */

struct oci_stage {
	char *final; /* the stage directory to create */
	char *tmp;   /* where it is built */
	int dirfd;
	char name[OCI_SHORT_MAX]; /* the image's own reference, "" if unknown */
};

/* Creates the temporary directory next to final (final must not exist) and
 * writes config[0..config_len) (verified by the caller) as config.json. */
int oci_stage_begin(const char *final, const char *config, size_t config_len, struct oci_stage *st,
		    struct strata_err *e);
int oci_stage_write(struct oci_stage *st, const char *name, const void *buf, size_t len,
		    struct strata_err *e);
/* Creates layers/NNN for writing. Returns 0 and the fd in *ret_fd. */
int oci_stage_layer_open(struct oci_stage *st, size_t idx, int *ret_fd, struct strata_err *e);
/* Writes manifest.json, manifest.digest, source and (when st->name is set)
 * name, syncs, renames into place (never over an existing directory). The stage is finished either
 * way (oci_stage_abort is a no-op). */
int oci_stage_commit(struct oci_stage *st, const char *manifest, size_t len, const char *source,
		     struct strata_err *e);
/* Removes the temporary directory; accepts a finished stage. */
void oci_stage_abort(struct oci_stage *st);

/* Removes a directory tree (no symlinks followed). Returns 0 or -errno. */
int oci_rm_tree(const char *path);

/* Imports a docker-save tarball (oci_archive.c). */
int oci_import_archive(const char *src, const char *tag, const char *stage_dir,
		       const struct oci_limits *lim, struct strata_err *e);
/* Imports an OCI layout at dirfd (oci_import.c); source names it in
 * STAGE/source. */
int oci_import_layout_at(int dirfd, const char *source, const char *tag, const char *stage_dir,
			 const struct oci_limits *lim, struct strata_err *e);
