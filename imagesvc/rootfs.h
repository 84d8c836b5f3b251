/* rootfs.h — a sandbox root: an overlay with the shared (read-only) image
 * mount below and a fresh writable directory above. Creating one costs two
 * mkdirs and one mount(2); removing it an unmount and the removal of the
 * writable directory. Neither touches the image itself. */
#pragma once

/* Creates scratch/upper and scratch/work (scratch must not exist; its parent
 * must) and mounts overlay(lower, scratch/upper) on target (an existing
 * directory). Returns 0 or -errno; on failure nothing is left behind. */
int img_rootfs_create(const char *lower, const char *scratch, const char *target);
/* Unmounts target (lazily if busy) and removes scratch. Returns 0 or -errno
 * (the first failure; the rest is still attempted). */
int img_rootfs_remove(const char *scratch, const char *target);
