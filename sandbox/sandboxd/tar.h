/* tar.h — directory trees in and out of a sandbox as tar streams (ustar,
 * plus the pax "path" and GNU long-name records on input), built on a
 * backend's file operations so that every backend with files gets them.
 *
 * Limits (each a clear -errno): entries per archive TAR_MAX_ENTRIES
 * (-E2BIG), depth TAR_MAX_DEPTH (-ELOOP), total size the caller's max
 * (-EFBIG). Names in an uploaded archive are joined under the destination
 * and normalised; absolute names are made relative, and any ".." refuses
 * the whole archive (-EINVAL) before anything is written. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "sandbox/sandboxd/backend.h"

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
