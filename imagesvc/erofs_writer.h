/* erofs_writer.h — writes the merged tree of an image as one EROFS metadata
 * image whose regular files are chunk-based inodes pointing into the layer
 * blobs (EROFS multi-device: blob k of the image is extra device k+1).
 *
 * The image holds the whole namespace (directories, inodes, xattrs, symlink
 * targets, chunk indexes) and, of regular file data, only the content of
 * small files the tree kept inline (IMG_INLINE_MAX). Mounting it needs the
 * blobs as devices, in the order of erofs_image_info.blobs:
 *
 *   mount -t erofs -o ro,device=BLOB0,device=BLOB1,... meta.img /mnt
 *
 * Output is deterministic for a given tree (no timestamps of the build, a
 * zero UUID). The format notes are in README.md. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "imagesvc/tree.h"

#define EROFS_MAX_DEVICES 4096

struct erofs_image_info {
	uint32_t *blobs; /* blob ids in device order; owned by the caller (free) */
	size_t n_blobs;
	uint64_t size;	 /* bytes of the metadata image */
	uint64_t inodes; /* distinct inodes written */
	uint32_t root_nid;
};

/* Writes the image of t to fd (from offset 0; the file is truncated to the
 * image size). Returns 0 and fills *ret, or a negative errno: -E2BIG (too
 * many blobs, root nid out of range), -EFBIG (a blob offset beyond the 32-bit
 * block range), -ENOMEM, or the write error. */
int erofs_write_image(struct tree *t, int fd, struct erofs_image_info *ret);
