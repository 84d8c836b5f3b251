/* images.h — where strata-sandboxd's images come from: the image store of
 * the cluster (imagesvc/), mounted once per node and shared by every sandbox
 * of the image, and, as a fallback and for tests and benchmarks without a
 * cluster, root filesystem directories registered by name (--image NAME=DIR,
 * --images-dir).
 *
 * A reference resolves in this order:
 *   1. a registered directory of that name ("x" also matches "x:latest");
 *      registered names are the node operator's explicit choice and cost no
 *      round trip to the cluster;
 *   2. the image store at <mount>/.strata/images, the mount named by
 *      <home>/cluster.env (STRATA_MOUNT): name[:tag], sha256:HEX or a unique
 *      hex prefix. The image is mounted by imagesvc's node mount manager
 *      (<home>/cache/images/HEX/root, the same cache `strata image mount`
 *      uses) and that mount is the lower layer of every sandbox root.
 *
 * A sandbox holds its image by a handle (struct sbd_image, opaque here):
 * sbd_images_acquire hands it out, sbd_images_release takes it back, and the
 * backends key what they share per image (fncall's pools) by it. Handles
 * live as long as the sandboxd (until sbd_images_free).
 *
 * Store images are reference counted once, by imagesvc's node mount
 * manager (mount.h): every sandbox on a store image takes its own named
 * node reference (holder "sandboxd:" and a hash of the state directory)
 * and gives it back when it goes. The last one leaves the mount in place;
 * the tick sweeps mounts unused for IMAGES_LINGER_S (so create/delete loops
 * do not mount and unmount the image each time). A restarted sandboxd
 * re-adopts its sandboxes with their references, and at its first tick
 * gives back the references of sandboxes that vanished meanwhile.
 *
 * Invariants:
 *  1. Once reconciled, the references named by this sandboxd on hex are
 *     users: its sandboxes on the image (and creates in flight), plus one
 *     per mount in flight on a worker (dropped when its waiters took theirs).
 *  2. held only says the image was mounted when last seen (the hot path
 *     takes img_node_ref instead of mounting); it is no reference.
 *
 * images.c (registered directories) and image_store.c (the store) are one
 * module: this header is its interface, images-internal.h what its two
 * files share. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "fs/err.h"
#include "fs/json.h"

#define IMAGES_LINGER_S 30	    /* $STRATA_SANDBOXD_IMAGE_LINGER_S overrides (tests) */
#define IMAGES_CONFIG_MAX (1 << 20) /* bytes of an OCI image config we read */
/* A name resolved this recently is not looked up in the store again
 * (re-pointing a name takes effect within this time). */
#define IMAGES_REF_CACHE_MS 1000

struct sandboxd;
struct sbd_image; /* a handle on an image (images-internal.h) */

/* What an image gives its sandboxes by default (pointers into the image:
 * valid while the handle is). */
struct sbd_image_defaults {
	char *const *env;	/* NULL-terminated "K=V", or NULL */
	const char *cwd, *user; /* or NULL */
};

/* ---- registered directories (images.c) ---------------------------------- */
/* Registers "NAME=DIR". Returns 0 or -EINVAL/-ENOENT/-EEXIST/-ENOMEM. */
int sbd_images_add_spec(struct sandboxd *d, const char *spec);
/* Loads every *.json in dir ({"name":..,"rootfs":..,"env":[..],"cwd":..,
 * "user":..}). Returns the number loaded or -errno. */
int sbd_images_load_dir(struct sandboxd *d, const char *dir);
/* Finds a registered image by name; "x" also matches "x:latest". */
struct sbd_image *sbd_images_find(struct sandboxd *d, const char *name);
/* Frees the registered images and the store state (dropping node references
 * no sandbox uses; those of live sandboxes stay for the next sandboxd). */
void sbd_images_free(struct sandboxd *d);

/* ---- a handle ------------------------------------------------------------- */
/* The image's root directory (the lower layer of its sandboxes' roots). */
const char *sbd_image_rootfs(const struct sbd_image *im);
/* The name a sandbox shows: ref as the user gave it for a store image, the
 * registered name for a directory. */
const char *sbd_image_name(const struct sbd_image *im, const char *ref);
struct sbd_image_defaults sbd_image_defaults(const struct sbd_image *im);
/* The image's own command: a new NULL-terminated copy of Entrypoint + Cmd
 * (caller frees), or NULL if it has neither (or on allocation failure). im
 * may be NULL. */
char **sbd_image_default_cmd(struct sandboxd *d, struct sbd_image *im);

/* ---- references (image_store.c) ----------------------------------------- */
/* Resolves ref (registered first, then the store) and, for a store image,
 * takes a reference for one sandbox (mounting the image on first use).
 * Returns 0 and *ret, -EINPROGRESS and *ret when a worker mounts the image
 * first (no reference taken: sbd_images_wait, then acquire again), -ENOENT
 * (no such image; e says where it looked), -EINVAL (malformed reference)
 * or -errno, with e. */
int sbd_images_acquire(struct sandboxd *d, const char *ref, struct sbd_image **ret,
		       struct strata_err *e);
/* Waiting for an image that a worker mounts (sbd_images_acquire answered
 * -EINPROGRESS): fn is called once on the loop, when the mount ended (r 0:
 * acquire again, it is ready; r < 0: the mount failed, why in e). w stays
 * the caller's. */
struct sbd_image_waiter {
	void (*fn)(struct sbd_image_waiter *w, int r, const struct strata_err *e);
	struct sbd_image_waiter *next;
};
void sbd_images_wait(struct sbd_image *im, struct sbd_image_waiter *w);
/* Shutdown: waits for the mounts in flight and wakes their waiters (whose
 * creates may go on: before sbd_api_creates_drain). */
void sbd_images_drain(struct sandboxd *d);
/* Gives back a sandbox's reference (a no-op for a registered directory and
 * for NULL). */
void sbd_images_release(struct sandboxd *d, struct sbd_image *im);
/* The handle of a re-adopted sandbox whose root is rootfs, counted as one
 * of its users (it keeps the node reference it took); NULL when no image
 * has that root. */
struct sbd_image *sbd_images_adopt(struct sandboxd *d, const char *rootfs);
/* Once a second: at the first, gives back the references of sandboxes that
 * vanished while sandboxd was down; then unmounts the images unused for
 * IMAGES_LINGER_S. */
void sbd_images_tick(struct sandboxd *d);
/* Writes {"images": [...]}: registered directories and stored images. */
void sbd_images_to_json(struct sandboxd *d, struct jw *w);
