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
 * re-adopts its sandboxes with their references, and before it serves
 * gives back the references of sandboxes that vanished meanwhile.
 *
 * Nothing here touches the store on the loop thread: the store is on the
 * FUSE mount, where a stopped or dead strata-fuse makes every call wait.
 * Resolving a name, reading an image's record and config, taking a node
 * reference (its lock, the stat of the mount), mounting, sweeping and
 * listing are store calls on worker threads with a deadline
 * (store_call.h, --store-timeout): the functions that need them answer
 * -EINPROGRESS and call back on the loop; past the deadline with
 * -ETIMEDOUT (503 store_unavailable), and past SBD_STORE_CALLS_MAX calls
 * waiting with -EAGAIN. A node reference given back goes to a worker too
 * (its lock may be held by a call stuck in the store).
 *
 * Invariants:
 *  1. Once reconciled (sbd_images_reconcile, before the loop serves), the
 *     references named by this sandboxd on hex are its sandboxes on the
 *     image (users), plus one per acquire call that took one and whose
 *     result the loop has not taken yet, minus the releases queued.
 *  2. held only says the image was mounted when last seen (a create then
 *     takes img_node_ref instead of resolving and mounting); it is no
 *     reference, and a worker that finds it wrong mounts.
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
/* Frees the registered images and the store state (the references of live
 * sandboxes stay for the next sandboxd; sbd_images_drain swept the unused
 * mounts). What a call stuck in the store still uses stays allocated. */
void sbd_images_free(struct sandboxd *d);

/* ---- a handle ------------------------------------------------------------- */
/* The image's root directory (the lower layer of its sandboxes' roots). */
const char *sbd_image_rootfs(const struct sbd_image *im);
/* The name a sandbox shows: ref as the user gave it for a store image, the
 * registered name for a directory. */
const char *sbd_image_name(const struct sbd_image *im, const char *ref);
struct sbd_image_defaults sbd_image_defaults(const struct sbd_image *im);
/* Whether im is an image of the store (its root the node's EROFS mount of
 * it), not a registered directory. */
bool sbd_image_is_store(const struct sbd_image *im);
/* A store image's digest (64 hex digits, the image's content address:
 * the same on every node), or NULL for a registered directory. */
const char *sbd_image_digest(const struct sbd_image *im);
/* A store image's EROFS files as the node mounts them, for a VM that
 * attaches them as disks: meta the node cache's metadata copy
 * (CACHE/HEX/meta.img), *ret_blobs (n paths, caller frees each and the
 * array) its blob files on the strata mount, in the order of its device
 * table. Reads the image's record (a store call: never on the loop; a
 * create's worker thread, with the image held, so mounted and its blobs'
 * digest tables pinned: the VM's reads are verified too). Returns 0,
 * -ENOENT (not a store image), -EAGAIN (the store is not open), -errno
 * with e. */
int sbd_image_erofs(struct sandboxd *d, const struct sbd_image *im, char *meta, size_t cap,
		    char ***ret_blobs, size_t *ret_n, struct strata_err *e);
/* The image's own command: a new NULL-terminated copy of Entrypoint + Cmd
 * (caller frees), or NULL if it has neither (or on allocation failure). im
 * may be NULL. */
char **sbd_image_default_cmd(struct sandboxd *d, struct sbd_image *im);

/* The cluster's mount as the image store names it (STRATA_MOUNT of
 * <home>/cluster.env, else <home>/mnt) into buf: whether anything is
 * mounted there is the caller's to see. Reads a local file (a FIFO there
 * blocks: never on the loop). Returns 0, -ENOENT (no store state). */
int sbd_images_cluster_mount(struct sandboxd *d, char *buf, size_t cap);

/* ---- references (image_store.c) ----------------------------------------- */
/* The answer of a store call: r 0 and im (sbd_images_acquire: with a node
 * reference for the caller, to give back with sbd_images_release), or r < 0
 * and why in e (-ETIMEDOUT / -EAGAIN / -ENOTCONN: the store is unavailable;
 * -ENOENT: no such image). Called once, on the loop; w stays the caller's
 * and must live until then. */
struct sbd_image_waiter {
	void (*fn)(struct sbd_image_waiter *w, int r, struct sbd_image *im,
		   const struct strata_err *e);
};
/* Resolves ref: a registered directory at once (returns 0 and *ret, no
 * reference), else in the store on a worker, taking a reference for one
 * sandbox (mounting the image on first use): returns -EINPROGRESS and
 * w->fn follows. Returns -EAGAIN (too many store calls waiting), -ENOMEM
 * or -EOPNOTSUPP (no loop) with e when nothing was started. */
int sbd_images_acquire(struct sandboxd *d, const char *ref, struct sbd_image **ret,
		       struct sbd_image_waiter *w, struct strata_err *e);
/* A store image's config (sbd_image_defaults, sbd_image_default_cmd) is read
 * at its first acquire; an image known from re-adoption only has none yet.
 * Returns 0 when im's config is there (or im is a registered directory),
 * -EINPROGRESS when a worker reads it (w->fn follows, with im) or -errno
 * with e. */
int sbd_images_config(struct sandboxd *d, struct sbd_image *im, struct sbd_image_waiter *w,
		      struct strata_err *e);
/* The store calls in flight now (stuck ones included) and those that ran
 * past their deadline since the start (GET /v1/node). */
void sbd_images_store_stats(struct sandboxd *d, unsigned *ret_in_flight, uint64_t *ret_timeouts);
/* Shutdown, before sbd_api_creates_drain: waits (bounded) for the store
 * calls in flight and hands their results on (the creates that waited may
 * go on), abandons those that are stuck, then unmounts the images no
 * sandbox uses (a store call too). Returns the number of calls still
 * running (stuck in the store: the daemon cannot free their state). */
unsigned sbd_images_drain(struct sandboxd *d);
/* Gives back a sandbox's reference, on a worker (a no-op for a registered
 * directory and for NULL). */
void sbd_images_release(struct sandboxd *d, struct sbd_image *im);
/* The handle of a re-adopted sandbox whose root is rootfs, counted as one
 * of its users (it keeps the node reference it took); NULL when no image
 * has that root. */
struct sbd_image *sbd_images_adopt(struct sandboxd *d, const char *rootfs);
/* Once, after the re-adoption and before the loop serves: the references
 * of this holder on each image are made as many as its sandboxes, giving
 * back those of sandboxes that vanished while sandboxd was down (the node
 * cache's files only; an earlier sandboxd's anonymous reference goes on a
 * worker). */
void sbd_images_reconcile(struct sandboxd *d);
/* Once a second: starts the sweep of the images unused for IMAGES_LINGER_S
 * (on a worker, one at a time) and fails the sandboxes whose image mounts
 * lost the strata mount. */
void sbd_images_tick(struct sandboxd *d);
/* Calls fn for every image of the store mounted on this node now (its
 * reference last resolved, or its digest), on the loop; no store access.
 * The node's lease reports them (lease.c): a warm cache for placement. */
void sbd_images_each_mounted(struct sandboxd *d, void (*fn)(void *ctx, const char *name),
			     void *ctx);
/* GET /v1/images, {"images": [...]}: the registered directories and the
 * images of the store, listed on a worker. */
struct sbd_images_listing {
	/* r 0: w holds the answer (the caller's to send or free); r < 0: why
	 * in e (as sbd_image_waiter). Once, on the loop. */
	void (*fn)(struct sbd_images_listing *l, int r, const struct strata_err *e);
	struct jw w;
};
/* Returns -EINPROGRESS (l->fn follows) or -errno with e. */
int sbd_images_list(struct sandboxd *d, struct sbd_images_listing *l, struct strata_err *e);
