/* digest_index.h — an in-memory map from a chunk's SHA-256 to where it is
 * stored (blob id + offset): the dedup index of a blob store. Open
 * addressing with linear probing, grown at half load; the first location
 * added for a digest wins. Not thread-safe (one writer per store). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "imagesvc/blobstore.h"

struct digest_slot {
	uint8_t digest[BLOB_DIGEST_LEN];
	struct blob_loc loc;
	bool used;
};

struct digest_index {
	struct digest_slot *slots;
	size_t cap, count;
};

/* Copies the location of digest into *ret. Returns 0 or -ENOENT. */
int digest_index_lookup(const struct digest_index *x, const uint8_t *digest, struct blob_loc *ret);
/* Adds digest -> loc unless the digest is present. Returns 0 or -ENOMEM. */
int digest_index_add(struct digest_index *x, const uint8_t *digest, struct blob_loc loc);
/* Frees the table; x is empty afterwards. */
void digest_index_done(struct digest_index *x);
