/* image_auth.h — signatures of the image store's names and records.
 *
 * Anyone who can write files in the store (<mount>/.strata/images) could
 * rewrite a ref so that `busybox:latest` names another image, or a record so
 * that it lists other blobs. Refs and records are therefore signed with an
 * HMAC-SHA256 under a key derived from the cluster key (fs/rpc_auth.h, the
 * 32 bytes `strata up` writes into the home, mode 0600):
 *
 *   image key = HMAC-SHA256(cluster key, "strata image v1")
 *
 * a subkey of its own, so that an image MAC can never be replayed as an RPC
 * handshake MAC or the other way round. Each MAC starts with a label naming
 * what it covers:
 *
 *   ref     HMAC(image key, "strata-image-ref" || name || 0 || manifest sha256)
 *           (name = "name:tag" as decoded: a signed ref copied to another
 *           name does not verify)
 *   record  HMAC(image key, "strata-image-record" || the record's bytes up to
 *           the MAC) (store.h: format 2 carries the SHA-256 of each digest
 *           table, of the manifest and of the config)
 *
 * The chain a mount verifies: ref (MAC) -> manifest digest -> record (MAC,
 * and its own digest must be the directory's) -> meta.img, manifest, config
 * (SHA-256 in the record) and digest tables (SHA-256 in the record, checked
 * by strata-fuse: fuse/README.md "Pinned digest tables") -> chunks (SHA-256
 * in the tables, checked by strata-fuse at every fetch).
 *
 * The key of a process: img_auth_set_default, else derived from the RPC
 * process credential (rpc_auth_default), else loaded from $STRATA_KEY.
 * MACs are compared in constant time. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/err.h"
#include "fs/rpc_auth.h"

#define IMG_AUTH_KEY_SIZE 32
#define IMG_AUTH_MAC_SIZE 32
#define IMG_AUTH_SUBKEY_LABEL "strata image v1"
/* Set by the node mount manager on each blob file of an image it mounts
 * (value: the 32-byte SHA-256 of the blob's digest table, from the signed
 * record); strata-fuse keeps it node-locally and checks the table against
 * it (fuse/blobcache.h SFS_BLOB_PIN_XATTR, the same name). */
#define IMG_TABLE_PIN_XATTR "trusted.strata.blob_table_sha256"

struct img_auth_key {
	uint8_t b[IMG_AUTH_KEY_SIZE];
};

/* Derives the image key from the cluster key into *ret. */
void img_auth_derive(const struct rpc_key *cluster, struct img_auth_key *ret);
/* Makes the image key derived from the cluster key file at path the
 * process's (before any thread: parsed configuration). Returns 0 or -errno
 * with e naming the file and the problem (rpc_key_load). */
int img_auth_load(const char *path, struct strata_err *e);
/* Sets (k) or forgets (NULL) the process's image key. */
void img_auth_set_default(const struct img_auth_key *k);
/* The process's image key into *ret (see the header). Returns 0, or -ENOKEY
 * with e saying how to give one (or the key file's problem). */
int img_auth_default(struct img_auth_key *ret, struct strata_err *e);

/* The MAC of a ref: name ("name:tag") naming the image with manifest
 * digest manifest. Returns 0, or -ENOMEM (out is then no MAC: the caller
 * refuses, it never compares it). */
int img_auth_ref_mac(const struct img_auth_key *k, const char *name, const uint8_t manifest[32],
		     uint8_t out[IMG_AUTH_MAC_SIZE]);
/* The MAC of a record's bytes buf[0..n) (everything before its MAC).
 * Returns 0 or -ENOMEM, as img_auth_ref_mac. */
int img_auth_record_mac(const struct img_auth_key *k, const void *buf, size_t n,
			uint8_t out[IMG_AUTH_MAC_SIZE]);
/* Constant-time comparison of two MACs. */
bool img_auth_mac_equal(const uint8_t a[IMG_AUTH_MAC_SIZE], const uint8_t b[IMG_AUTH_MAC_SIZE]);
