/* digest_index.c — the dedup index of digest_index.h. SHA-256 digests are
 * uniformly distributed, so their first 8 bytes are the hash. */
#include "imagesvc/digest_index.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fs/wire.h"

static struct digest_slot *probe(const struct digest_index *x, const uint8_t *d)
{
	size_t mask = x->cap - 1;
	for (size_t i = le64_get(d) & mask;; i = (i + 1) & mask)
		if (!x->slots[i].used || !memcmp(x->slots[i].digest, d, BLOB_DIGEST_LEN))
			return &x->slots[i];
}

static const struct blob_loc *digest_index_find(const struct digest_index *x, const uint8_t *digest)
{
	if (!x->cap)
		return NULL;
	const struct digest_slot *sl = probe(x, digest);
	return sl->used ? &sl->loc : NULL;
}

int digest_index_lookup(const struct digest_index *x, const uint8_t *digest, struct blob_loc *ret)
{
	const struct blob_loc *loc = digest_index_find(x, digest);
	if (!loc)
		return -ENOENT;
	*ret = *loc;
	return 0;
}

static int grow(struct digest_index *x)
{
	size_t ocap = x->cap, ncap = ocap ? ocap * 2 : 1024;
	struct digest_slot *old = x->slots;
	x->slots = calloc(ncap, sizeof(*x->slots));
	if (!x->slots) {
		x->slots = old;
		return -ENOMEM;
	}
	x->cap = ncap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].used)
			*probe(x, old[i].digest) = old[i];
	free(old);
	return 0;
}

int digest_index_add(struct digest_index *x, const uint8_t *digest, struct blob_loc loc)
{
	if ((x->count + 1) * 2 > x->cap) {
		int r = grow(x);
		if (r < 0)
			return r;
	}
	struct digest_slot *sl = probe(x, digest);
	if (sl->used)
		return 0; /* the first location wins */
	memcpy(sl->digest, digest, BLOB_DIGEST_LEN);
	sl->loc = loc;
	sl->used = true;
	x->count++;
	return 0;
}

void digest_index_done(struct digest_index *x)
{
	free(x->slots);
	x->slots = NULL;
	x->cap = x->count = 0;
}
