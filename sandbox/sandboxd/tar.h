/* tar.h — directory trees in and out of a sandbox as tar streams (ustar,
 * plus pax extended headers (path, linkpath, size, uid, gid, mtime) and GNU
 * long-name records on input), built on a
 * backend's file operations so that every backend with files gets them.
 *
 * Limits (each a clear -errno): entries per archive TAR_MAX_ENTRIES
 * (-E2BIG), depth TAR_MAX_DEPTH (-ELOOP), total size the caller's max
 * (-EFBIG). Names in an uploaded archive are joined under the destination
 * and normalised; absolute names are made relative, and any ".." refuses
 * the whole archive (-EINVAL) before anything is written. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sandbox/sandboxd/backend.h"
#include "sandbox/sandboxd/inroot.h"

#define TAR_MAX_ENTRIES 100000
#define TAR_MAX_DEPTH 64

/* Builds a tar of the tree at dir (entries relative to it). Returns 0 and a
 * malloc'ed archive (caller frees) or -errno; e names the failing path (when
 * it is below dir). */
int sbd_tar_pack(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, uint64_t max,
		 uint8_t **ret, size_t *ret_len, struct strata_err *e);
/* Unpacks archive p[0..n) under dir (created). Returns the number of files
 * written or -errno with the reason in e. */
int sbd_tar_unpack(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, const uint8_t *p,
		   size_t n, struct strata_err *e);

/* ---- the format (shared by the buffered and the streamed archives) ----- */

/* One ustar header's fields. Sizes and ids past the octal fields' range are
 * written in GNU base-256. */
struct sbd_tar_hdr {
	const char *name; /* <= 99 bytes are kept (a longer one needs an 'L' record) */
	const char *link; /* symlink target or hard link name, or NULL */
	char type;
	uint32_t mode;
	uint64_t uid, gid, size;
	int64_t mtime;
};
/* Encodes h into the 512-byte block b. */
void sbd_tar_encode(char b[512], const struct sbd_tar_hdr *h);
/* Decodes block b: 0 (h filled, name and link into name[257] and
 * link[101]), 1 (an all-zero block: the archive's end), -EINVAL (a bad
 * checksum). */
int sbd_tar_decode(const char b[512], struct sbd_tar_hdr *h, char *name, char *link);
/* The value of key in pax extended header data p[0..n), malloc'ed, or NULL. */
char *sbd_tar_pax_value(const char *p, size_t n, const char *key);

/* What a pax extended header ('x') says of the member that follows it:
 * the numbers ustar's octal fields cannot hold (Python's tarfile and GNU
 * tar put a size of 8 GiB or more, uids/gids of 2^21 or more only here,
 * with 0 in the ustar field), a name or link target of any length. */
struct sbd_tar_pax {
	bool has_size, has_uid, has_gid, has_mtime;
	uint64_t size, uid, gid;
	int64_t mtime;	       /* whole seconds (a fraction is dropped) */
	char *path, *linkpath; /* malloc'ed, or NULL */
};
/* Parses pax data p[0..n) into *x (keys given again replace earlier ones).
 * 0, -EINVAL (a malformed size, uid, gid or mtime, which must not be
 * guessed at: the size places the next header) or -ENOMEM. */
int sbd_tar_pax_parse(const char *p, size_t n, struct sbd_tar_pax *x);
/* Gives h the numbers x has (path and linkpath are the caller's). */
void sbd_tar_pax_apply(const struct sbd_tar_pax *x, struct sbd_tar_hdr *h);
/* Frees what x holds and zeroes it (for the next member). */
void sbd_tar_pax_clear(struct sbd_tar_pax *x);
/* name joined under dir and normalised (malloc'ed), or NULL when it has "..". */
char *sbd_tar_join(const char *dir, const char *name);

/* ---- streamed, on a transfer's worker (tar_stream.c) ------------------- */
struct sbd_xfer;
/* Sends the tree at dir under root as a chunked tar response (head
 * included), its owners as the sandbox sees them (base: the host id of
 * its id 0, sbd_id_from_host). Returns the number of members, or -errno
 * (after the head: the stream is cut, x->broken). */
int64_t sbd_tar_stream_out(struct sbd_xfer *x, int root, const char *dir, uint32_t base);
/* Unpacks the request body under dir (created), owned by owner when it is
 * set (and not only_new), else as the archive says (its ids the sandbox's,
 * shifted by owner->base). Returns the number of files written, or
 * -errno with the reason in x->err (-EIO: a write failed, errno in
 * *ret_werr). */
int64_t sbd_tar_stream_in(struct sbd_xfer *x, int root, const char *dir,
			  const struct sbd_owner *owner, int *ret_werr);
