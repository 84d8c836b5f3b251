/* oci.h — getting OCI images into strata: the "staged image".
 *
 * Every way an image enters the system (an OCI image layout directory, a
 * `docker save` tarball, a registry pull, see registry.h) ends in the same
 * place: a staged image directory that the import command feeds into the
 * layer-conversion core. Everything in it has been verified against the
 * SHA-256 its descriptor names before it was written there:
 *
 *   STAGE/manifest.json    the image manifest, byte for byte (its SHA-256 is
 *                          the manifest digest; for an old-style docker-save
 *                          tarball, which has none, an OCI manifest written
 *                          by us from the tarball's manifest.json)
 *   STAGE/manifest.digest  "sha256:<hex>\n"
 *   STAGE/config.json      the image config blob, byte for byte
 *   STAGE/layers/NNN       the layer blobs in order (000 is the base), as
 *                          delivered: gzip, zstd or plain tar (see the media
 *                          type in manifest.json; decompression belongs to
 *                          istream.h)
 *   STAGE/source           where it came from, one line (informational)
 *   STAGE/name             the image's own reference when the source names
 *                          it (a docker-save RepoTag, the layout's
 *                          io.containerd.image.name, the pulled reference);
 *                          optional
 *
 * A stage is built in a temporary sibling directory and renamed into place
 * at the end, so a failed import leaves nothing behind; the target must not
 * exist yet. Manifest indexes and lists are resolved to their linux/amd64
 * manifest; an image only for another platform is refused.
 *
 * Errors: negative errno, and a message in struct strata_err for the boundary
 * (CLI, RPC reply). -EBADMSG malformed input or a digest mismatch, -EFBIG a
 * limit, -EOPNOTSUPP an unsupported format or media type, -ENOENT a missing
 * file, tag or platform, -EEXIST the stage exists. */
#pragma once
#include "fs/err.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OCI_DIGEST_MAX 72 /* "sha256:" + 64 hex + NUL, rounded up */

/* Limits on everything an image's author or a registry controls. */
struct oci_limits {
	size_t max_manifest;	    /* bytes of a manifest or index (default 4 MiB) */
	size_t max_config;	    /* bytes of the config blob (default 8 MiB) */
	size_t max_layers;	    /* layers per image (default 256) */
	size_t max_index_entries;   /* manifests per index (default 1024) */
	uint64_t max_layer;	    /* bytes of one layer blob (default 32 GiB) */
	size_t max_archive_entries; /* entries of a docker-save tarball (default 100000) */
};

void oci_limits_default(struct oci_limits *ret);

enum oci_compression { OCI_COMP_NONE, OCI_COMP_GZIP, OCI_COMP_ZSTD };

struct oci_layer {
	char digest[OCI_DIGEST_MAX]; /* of the blob as stored (compressed) */
	char *media_type;
	enum oci_compression compression;
	uint64_t size;
	char *path; /* STAGE/layers/NNN */
};

struct oci_config {
	char *os, *architecture;	 /* may be NULL when the config omits them */
	char **entrypoint, **cmd, **env; /* NULL-terminated, NULL when absent */
	char *working_dir, *user;	 /* NULL when absent */
};

struct oci_image {
	char *dir;
	char *name; /* the source's own reference ("busybox:latest"), or NULL */
	char manifest_digest[OCI_DIGEST_MAX];
	char config_digest[OCI_DIGEST_MAX];
	struct oci_config config;
	struct oci_layer *layers;
	size_t n_layers;
};

/* Imports an OCI image layout directory or a docker-save tarball (plain or
 * gzip'd; both the classic form and the OCI-in-docker-save form of Docker 25+)
 * into a new stage directory. tag selects the image (OCI layout: the
 * org.opencontainers.image.ref.name annotation; tarball: a RepoTags entry
 * "name:tag" or just "tag"); NULL takes the only image there is. lim may be
 * NULL. Returns 0 or a negative errno with e filled. */
int oci_import(const char *src, const char *tag, const char *stage_dir,
	       const struct oci_limits *lim, struct strata_err *e);

/* Loads a stage directory. verify re-hashes every layer (otherwise only the
 * manifest and config are re-hashed and layer sizes checked). Returns 0 and
 * the image in *ret (free with oci_image_free), or a negative errno. */
int oci_stage_load(const char *stage_dir, bool verify, struct oci_image **ret,
		   struct strata_err *e);

/* Frees img; accepts NULL; returns NULL. */
struct oci_image *oci_image_free(struct oci_image *img);

/* Returns the compression a layer media type implies, or -EOPNOTSUPP for a
 * media type that is not a layer strata can import (foreign or
 * non-distributable layers, unknown types). */
int oci_layer_compression(const char *media_type, enum oci_compression *ret);
