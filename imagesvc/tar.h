/* tar.h — a hostile-safe streaming tar reader for image layers.
 *
 * Formats: POSIX ustar (prefix + name), GNU (long names 'L', long link names
 * 'K', base-256 numbers), PAX extended headers ('x': path, linkpath, size,
 * uid, gid, mtime with fractions, SCHILY.xattr.*, SCHILY.devmajor/devminor;
 * 'g' global headers are validated and ignored), old V7 headers. Sparse files
 * (GNU 'S', GNU.sparse.* PAX keys), multi-volume and volume headers are
 * refused with -EOPNOTSUPP.
 *
 * Paths (entry names and hard-link targets) are normalized: leading '/' and
 * "." / empty components are dropped, so "/etc//./passwd" is "etc/passwd" and
 * "./" is "" (the root). Any ".." component is refused (-EINVAL): unlike Docker,
 * which cleans "a/../b" to "b", we never resolve "..", so no name can climb out
 * of the root. Symlink targets are data and kept verbatim (the tree never
 * follows symlinks).
 *
 * Every size is bounded by struct tar_limits, and hitting a limit is an error
 * with a clear message (tar_error()). Errors are negative errno:
 *   -EBADMSG  malformed or truncated archive      -EFBIG   size limit
 *   -ENAMETOOLONG name/component/target too long  -E2BIG   too many entries/xattrs
 *   -EINVAL   ".." or empty/NUL-containing names  -EOPNOTSUPP sparse etc. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "imagesvc/istream.h"

#define TAR_BLOCK 512

enum tar_type {
	TAR_REG = 1,
	TAR_HARDLINK,
	TAR_SYMLINK,
	TAR_CHR,
	TAR_BLK,
	TAR_DIR,
	TAR_FIFO,
};

struct tar_xattr {
	char *name;	/* full name, e.g. "security.capability" */
	uint8_t *value; /* binary */
	uint32_t len;
};

struct tar_entry {
	enum tar_type type;
	char *path;	/* normalized, relative; "" is the root directory */
	char *linkname; /* symlink: target verbatim; hard link: normalized path */
	uint32_t mode;	/* permission bits only (07777) */
	uint32_t uid, gid;
	int64_t mtime;
	uint32_t mtime_nsec;
	uint64_t size; /* bytes of data readable with tar_read() (regular files) */
	uint32_t devmajor, devminor;
	struct tar_xattr *xattrs;
	size_t n_xattrs;
};

struct tar_limits {
	size_t max_meta;	/* PAX / GNU long name payload (default 1 MiB) */
	size_t max_path;	/* bytes of a normalized path (default 4096) */
	size_t max_entries;	/* headers incl. PAX/GNU ones (default 4 Mi) */
	uint64_t max_total;	/* sum of entry data sizes (default 64 GiB) */
	size_t max_xattrs;	/* per entry (default 128) */
	size_t max_xattr_value; /* bytes (default 65535: EROFS stores a u16) */
	size_t max_xattr_total; /* names + values of one entry (default 192 KiB,
				 * so that EROFS's u16 inline xattr count fits) */
};

void tar_limits_default(struct tar_limits *ret);

struct tar_reader;

/* Creates a reader over fn/ctx (not owned). lim may be NULL for defaults.
 * Returns 0 and the reader in *ret (free with tar_reader_free) or -ENOMEM. */
int tar_reader_new(const struct tar_limits *lim, img_read_fn fn, void *ctx,
		   struct tar_reader **ret);
/* Lets tar_error() quote the source's own reason (e.g. istream_error) when a
 * read from the source fails. */
void tar_reader_describe_source(struct tar_reader *r, const char *(*why)(void *ctx));
/* Advances to the next entry, skipping unread data of the current one.
 * Returns 1 with *ret pointing to the entry (owned by r, valid until the next
 * call), 0 at the end of the archive (after draining the source, so a corrupt
 * compressed trailer is still reported), or a negative errno. */
int tar_next(struct tar_reader *r, const struct tar_entry **ret);
/* Reads data of the current regular entry. Returns bytes (>0), 0 at the end of
 * the entry's data, or a negative errno (-EBADMSG if the archive ends early). */
ssize_t tar_read(struct tar_reader *r, void *buf, size_t n);
/* Returns the last error in words, naming the entry when known. */
const char *tar_error(const struct tar_reader *r);
/* Frees r; accepts NULL; returns NULL. */
struct tar_reader *tar_reader_free(struct tar_reader *r);

/* Normalizes a tar path as described above into a new string in *ret (owned
 * by the caller). Returns 0, -EINVAL, -ENAMETOOLONG or -ENOMEM. */
int tar_normalize_path(const char *in, size_t len, size_t max_path, char **ret);
