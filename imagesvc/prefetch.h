/* prefetch.h — recording what a sandbox start reads, and fetching it ahead.
 *
 * Recording walks the mounted image (the node's shared EROFS root) and asks
 * the page cache which pages of each file have been read (mincore): that is
 * what the first seconds of a root's use needed, plus the kernel's readahead
 * around it. The files and ranges are stored with the image
 * (ROOT/images/HEX/prefetch, written atomically):
 *
 *   header 16 B: magic "SPFL" (0x4c465053), u16 version 2, u16 header len 16,
 *                u32 0, u32 count
 *   entry:       u32 path length (<= 4096), u32 0, u64 offset, u64 length,
 *                the path relative to the image root (no NUL)
 *
 * Replaying reads those ranges through the mounted image with several
 * threads, so that strata-fuse fetches, verifies and caches the chunks under
 * them in bulk before (or while) a sandbox needs them. Eager mode reads every
 * chunk of every blob of the image instead (blob files, no readahead, pages
 * dropped after use). Files of at most IMG_INLINE_MAX bytes live in the
 * metadata image and are never recorded. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "imagesvc/store.h"

#define IMG_PREFETCH_MAGIC 0x4c465053u
#define IMG_PREFETCH_MAX (1u << 20) /* entries per list */
#define IMG_PREFETCH_VERSION 2

struct img_prefetch_stats {
	uint64_t chunks, bytes;
	double seconds;
};

/* Records the prefetch list of image hex from what this node has read of the
 * image mounted at root. Returns 0 or -errno with e filled. */
int img_prefetch_record(struct img_store *s, const char *hex, const char *root,
			struct img_prefetch_stats *ret, struct strata_err *e);
/* Fetches the recorded list through the image mounted at root (-ENOENT if
 * there is none) or, eager, every chunk of the image's blobs (root unused).
 * threads <= 0 picks a default. ret->bytes counts bytes read. */
int img_prefetch_run(struct img_store *s, const char *hex, const char *root, bool eager,
		     int threads, struct img_prefetch_stats *ret, struct strata_err *e);
/* True if image hex has a recorded list. */
bool img_prefetch_exists(struct img_store *s, const char *hex);
