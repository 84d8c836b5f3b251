/* mount.h — the node mount manager: one EROFS mount per image per node,
 * shared by every sandbox and every `strata image mount` of that image.
 *
 * Node cache (normally <home>/cache/images):
 *   CACHE/HEX/meta.img   the image's EROFS metadata, copied from the store
 *                        and checked against the SHA-256 in its record
 *   CACHE/HEX/root       where it is mounted (file-backed EROFS through the
 *                        new mount API; extra devices = the blob files on
 *                        the strata FUSE mount, read lazily)
 *   CACHE/HEX/users      reference count ("N\n", then "COUNT HOLDER" per
 *                        holder of named references), under CACHE/HEX/lock;
 *                        at 0 its mtime is when the image became unused
 *   CACHE/HEX/fusedev    device of the FUSE mount the blobs were opened on: if
 *                        strata-fuse was restarted since, the next acquire
 *                        replaces the (now unreadable) EROFS mount
 *   CACHE/binds/KEY      what `strata image mount` put at a directory: "HEX
 *                        KIND DIR" (KIND bind | overlay), KEY a hash of DIR
 *   CACHE/roots/KEY      the writable layer of an overlay mount
 *
 * The first reference mounts and takes a lease in the store (so rm refuses
 * the image); the last anonymous one unmounts and drops the lease, the last
 * named one leaves both until img_node_sweep finds the image unused for long
 * enough (so a create/delete loop does not mount the image each time). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "imagesvc/store.h"

/* Takes a reference on image hex, mounting it if needed. Writes the shared
 * root into root[cap]; *ret_fresh says whether this call mounted it.
 * Returns 0 or -errno with e filled. */
int img_node_acquire(struct img_store *s, const char *cache, const char *hex, char *root,
		     size_t cap, bool *ret_fresh, struct strata_err *e);
/* Drops a reference; the last one unmounts. Returns 0 or -errno. */
int img_node_release(struct img_store *s, const char *cache, const char *hex, struct strata_err *e);

/* Named references: holder (one line of text) names who holds it, so that
 * it can count and give back what it holds after a restart. */
int img_node_acquire_as(struct img_store *s, const char *cache, const char *hex, const char *holder,
			char *root, size_t cap, bool *ret_fresh, struct strata_err *e);
/* The cheap one for an image already mounted: one more reference, no mount
 * and no check of the FUSE mount (the caller watches it). -ENOENT when
 * nothing is mounted. */
int img_node_ref(const char *cache, const char *hex, const char *holder, struct strata_err *e);
/* Drops one reference of holder (none held: nothing happens); the last
 * leaves the mount for img_node_sweep. Returns 0 or -errno. */
int img_node_release_as(struct img_store *s, const char *cache, const char *hex, const char *holder,
			struct strata_err *e);
/* How many references holder has on hex, or -errno. */
int img_node_holds(const char *cache, const char *hex, const char *holder);
/* Unmounts hex (dropping its lease) if it has no references and has had
 * none for idle_ms. Returns 1 (unmounted), 0 or -errno. */
int img_node_sweep_one(struct img_store *s, const char *cache, const char *hex, int64_t idle_ms,
		       struct strata_err *e);
/* img_node_sweep_one for every image of the cache: the number unmounted or
 * -errno (the first failure; the others are still swept). */
int img_node_sweep(struct img_store *s, const char *cache, int64_t idle_ms, struct strata_err *e);
/* Mounts the EROFS image meta (a regular file) with the given device files
 * at dir. Returns 0 or -errno with the kernel's message in e. */
int img_erofs_mount(const char *meta, char *const *devices, size_t n, const char *dir,
		    struct strata_err *e);

/* `strata image mount`: makes image hex visible at dir, read-only (bind of
 * the shared root) or writable (an overlay, rootfs.h). */
int img_node_mount(struct img_store *s, const char *cache, const char *hex, const char *dir,
		   bool writable, bool *ret_fresh, struct strata_err *e);
/* `strata image umount`: undoes img_node_mount at dir. */
int img_node_umount(struct img_store *s, const char *cache, const char *dir, struct strata_err *e);
/* The shared root of hex if it is mounted on this node: 0 or -ENOENT. */
int img_node_root(const char *cache, const char *hex, char *root, size_t cap);
