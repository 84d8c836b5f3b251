/* tree.h — the merged file tree of an image, built layer by layer.
 *
 * tree_apply_layer() reads one layer tar and applies it on top of what the
 * earlier layers built, with OCI semantics: ".wh.NAME" deletes NAME from lower
 * layers, ".wh..wh..opq" makes its directory opaque (lower-layer children
 * vanish, same-layer ones stay; other ".wh..wh." names are AUFS bookkeeping
 * and skipped, as Docker does), a directory entry over an existing directory
 * only updates its metadata, anything else replaces what was there (a whole
 * subtree if need be). Missing parent directories are created (0755, root).
 * A parent that exists but is not a directory is an error (-ENOTDIR): the
 * tree never follows symlinks, so nothing can be placed outside the root.
 * Hard links may point to any non-directory already in the tree (this layer
 * or a lower one) and share its inode.
 *
 * Regular file data is cut into BLOB_CHUNK_SIZE chunks, named by SHA-256 and
 * stored in the layer's blob (deduplicated by the blob store). The inode
 * keeps one extent per chunk; all-zero chunks become holes (blob ==
 * IMG_HOLE) and are not stored at all. Only small files (IMG_INLINE_MAX,
 * within IMG_INLINE_BUDGET) keep their bytes in memory.
 *
 * Xattrs are kept for the namespaces EROFS can name (user., trusted.,
 * security., system.posix_acl_access/default); others are dropped and
 * counted in tree_stats.xattrs_dropped. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "imagesvc/blobstore.h"
#include "imagesvc/tar.h"

#define IMG_HOLE UINT32_MAX
/* Regular files of at most IMG_INLINE_MAX bytes keep their content in the
 * tree (and end up inline in the EROFS metadata image) instead of costing a
 * 4 KiB-aligned chunk in a blob each; at most IMG_INLINE_BUDGET bytes per
 * tree, later small files are chunked like the rest. */
#define IMG_INLINE_MAX 2048u
#define IMG_INLINE_BUDGET (256u << 20)

struct tree_extent {
	uint32_t blob; /* IMG_HOLE for a hole */
	uint32_t len;  /* bytes of file data in this chunk */
	uint64_t off;  /* offset in the blob (multiple of BLOB_ALIGN) */
};

struct tree_xattr {
	char *name;
	uint8_t *value;
	uint32_t len;
};

struct tree_dentry;

struct tree_inode {
	uint32_t mode; /* S_IFMT | permissions */
	uint32_t uid, gid;
	int64_t mtime;
	uint32_t mtime_nsec;
	uint32_t rdev_major, rdev_minor;
	uint64_t size;
	char *symlink;
	struct tree_xattr *xattrs;
	size_t n_xattrs;
	struct tree_extent *extents; /* ceil(size / BLOB_CHUNK_SIZE) entries */
	size_t n_extents;
	uint8_t *data;		      /* small regular files: the content (then no extents) */
	uint32_t nlink;		      /* dentries that refer to this inode */
	struct tree_dentry *children; /* directories: doubly-linked list */
	size_t n_children;
	uint64_t scratch; /* free for the writer (EROFS: inode index + 1) */
};

struct tree_dentry {
	char *name;
	struct tree_inode *inode;
	struct tree_inode *parent;
	struct tree_dentry *next, *prev; /* siblings */
	struct tree_dentry *hnext;	 /* hash chain */
	unsigned layer;
};

struct tree_stats {
	uint64_t entries, files, bytes, chunks, chunks_new, chunks_dedup, holes;
	uint64_t whiteouts, xattrs_dropped, inlined;
};

struct tree;

/* Returns 0 and an empty tree (a root directory 0755 root:root) or -ENOMEM. */
int tree_new(struct tree **ret);
/* Frees t; accepts NULL; returns NULL. */
struct tree *tree_free(struct tree *t);
/* Applies layer number `layer` (0 for the base, increasing) read from r;
 * new chunks go to blob `blob` of bs. Adds to *stats if non-NULL. Returns 0 or
 * a negative errno; tree_error() or tar_error() say why. On error the tree is
 * in a consistent but partially applied state. */
int tree_apply_layer(struct tree *t, struct tar_reader *r, struct blobstore *bs, uint32_t blob,
		     unsigned layer, struct tree_stats *stats);
struct tree_inode *tree_root(struct tree *t);
/* Looks up a normalized path ("" = root). Returns the inode or NULL. */
struct tree_inode *tree_lookup(struct tree *t, const char *path);
const char *tree_error(const struct tree *t);
