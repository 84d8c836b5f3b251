/* images-internal.h — what the two files of sandboxd's image module share
 * (images.h): the handle's contents, entry helpers, and the store's part
 * of sbd_images_free. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "fs/json.h"
#include "sandbox/sandboxd/images.h"

struct sbd_image {
	char *name, *rootfs;
	char **env; /* image config env, NULL-terminated, may be NULL */
	char *cwd, *user;
	char **entrypoint, **cmd; /* image config, NULL-terminated, may be NULL */
	/* store images only (hex[0] == 0 for a registered directory) */
	char hex[65];
	char *last_ref;	     /* the reference last resolved to it ... */
	int64_t last_ref_ms; /* ... and when (names are cached briefly) */
	bool config_loaded;
	bool held;     /* seen mounted: a create takes img_node_ref, no mount */
	int64_t users; /* its sandboxes here, each with its own node reference */
	struct sbd_image *next;
};

/* Frees one image entry; accepts NULL. */
void sbd_image_free(struct sbd_image *im);
/* A NULL-terminated copy of a JSON array of strings (env entries must hold
 * '='), or NULL. */
char **sbd_images_str_array(const struct json *a, bool env);
/* Frees a NULL-terminated string array; accepts NULL. */
void sbd_images_strv_free(char **v);
/* Frees im's config (env, entrypoint, cmd, cwd, user): it has none then. */
void sbd_image_config_clear(struct sbd_image *im);
/* Replaces im's config with from's (from has none then). */
void sbd_image_config_move(struct sbd_image *im, struct sbd_image *from);
/* The store's part of sbd_images_free. */
void sbd_images_store_free(struct sandboxd *d);
