/* chunk_update.c — the block checksums of a chunk's new version
 * (chunk_store-internal.h), for both ways of writing it (chunk_cow.c,
 * chunk_inplace.c): which blocks the mutation rewrites wholly, which it
 * leaves, which become zeros, and which mix old bytes with new ones; the
 * old bytes of a mixed block are read and verified first (invariant 3). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunkserver/chunk_store-internal.h"
#include "chunkserver/uring_pool.h"
#include "fs/cleanup.h"

#define BS CHUNK_BLOCK_SIZE

/* How block b of the new version gets its bytes. */
enum bkind {
	B_DIRECT, /* wholly overwritten: straight from the caller's buffer */
	B_COPY,	  /* unchanged and same length: old bytes, old checksum */
	B_ZERO,	  /* beyond the old data and not written: zeros */
	B_BUILD,  /* old bytes (verified) + zeros + new bytes */
};

static const uint8_t zero_block[BS];

static bool covers(uint64_t lo, uint64_t hi, uint64_t bstart, uint64_t bend)
{
	return lo <= bstart && hi >= bend;
}

static enum bkind classify(const struct chunk_update *u, uint32_t b)
{
	uint64_t bs = (uint64_t)b * BS, be = bs + chunk_block_len(u->new_len, b);
	uint64_t wlo = STRATA_MAX((uint64_t)u->off, bs);
	uint64_t whi = STRATA_MIN((uint64_t)u->off + u->len, be);
	uint32_t old_blen = chunk_block_len(u->old.data_len, b);
	if (u->len > 0 && covers(u->off, (uint64_t)u->off + u->len, bs, be))
		return B_DIRECT;
	if (u->len == 0 || wlo >= whi) {
		if (old_blen == be - bs)
			return B_COPY;
		if (old_blen == 0)
			return B_ZERO;
	}
	return B_BUILD;
}

bool chunk_update_unchanged(const struct chunk_update *u, uint32_t b)
{
	return classify(u, b) == B_COPY;
}

/* The checksum of blen zero bytes; the whole block's is computed once. */
static uint64_t zero_sum(uint32_t blen)
{
	static uint64_t whole; /* __atomic; 0 until computed */
	if (blen != BS)
		return chunk_block_sum(zero_block, blen);
	uint64_t v = __atomic_load_n(&whole, __ATOMIC_RELAXED);
	if (!v) {
		v = chunk_block_sum(zero_block, BS);
		__atomic_store_n(&whole, v, __ATOMIC_RELAXED);
	}
	return v;
}

/* The checksum of direct block b (blen bytes, wholly from the caller's
 * buffer): the sum of the same bytes that came with the data, where the
 * data's pieces are this chunk's blocks (block-aligned offset, same length),
 * else hashed here. */
static uint64_t direct_sum(const struct chunk_update *u, uint32_t b, uint32_t blen)
{
	uint64_t at = (uint64_t)b * BS - u->off;
	if (u->sums && u->off % BS == 0 && at % BS == 0 &&
	    STRATA_MIN((uint64_t)BS, u->len - at) == blen)
		return u->sums[at / BS];
	return chunk_block_sum(u->data + at, blen);
}

/* Fills the built blocks in scratch: reads their old bytes (one batch),
 * verifies them, zero-pads, overlays the new bytes and checksums them. */
static int build_blocks(struct chunk_update *u)
{
	struct uring_op ops[ARRAY_SIZE(u->build)];
	int nops = 0;
	for (int i = 0; i < u->nbuild; i++) {
		uint32_t olen = chunk_block_len(u->old.data_len, u->build[i]);
		if (olen > 0)
			ops[nops++] =
			    (struct uring_op){.fd = u->oldfd,
					      .kind = URING_READ,
					      .iovcnt = 1,
					      .off = u->old.data_off + (uint64_t)u->build[i] * BS,
					      .iov = {{u->scratch + (size_t)i * BS, olen}}};
	}
	int r = uring_run(u->ring, ops, nops);
	if (r == -EIO)
		return cs_report_corrupt(u->cs, u->ino, u->index, -1,
					 "chunk file shorter than its data");
	for (int i = 0; r == 0 && i < u->nbuild; i++) {
		uint32_t b = u->build[i], olen = chunk_block_len(u->old.data_len, b);
		uint8_t *p = u->scratch + (size_t)i * BS;
		if (olen > 0 && (r = cs_verify_block(u->cs, &u->old, b, p)) < 0)
			break;
		memset(p + olen, 0, BS - olen);
		uint64_t bs = (uint64_t)b * BS, be = bs + chunk_block_len(u->new_len, b);
		uint64_t wlo = STRATA_MAX((uint64_t)u->off, bs);
		uint64_t whi = STRATA_MIN((uint64_t)u->off + u->len, be);
		if (u->len > 0 && wlo < whi)
			memcpy(p + (wlo - bs), u->data + (wlo - u->off), whi - wlo);
		memset(p + (be - bs), 0, BS - (be - bs));
		u->new.bcsum[b] = chunk_block_sum(p, be - bs);
	}
	return r;
}

/* Classifies blocks first.. of the new version; checksums the direct, zero
 * and unchanged ones, lists the built ones. */
static int classify_blocks(struct chunk_update *u, uint32_t first)
{
	bool any_direct = false;
	for (uint32_t b = first; b < u->new.nblocks; b++) {
		uint32_t blen = chunk_block_len(u->new_len, b);
		switch (classify(u, b)) {
		case B_DIRECT:
			if (!any_direct)
				u->d0 = b, any_direct = true;
			u->d1 = b;
			u->new.bcsum[b] = direct_sum(u, b, blen);
			break;
		case B_ZERO:
			u->new.bcsum[b] = zero_sum(blen);
			break;
		case B_COPY:
			u->new.bcsum[b] = u->old.bcsum[b];
			break;
		case B_BUILD:
			/* at most 3: the written range's two edges and the old last block */
			if (u->nbuild == (int)ARRAY_SIZE(u->build))
				return -EINVAL;
			u->build[u->nbuild++] = b;
			break;
		}
	}
	return 0;
}

int chunk_update_plan(struct chunk_update *u, uint32_t first, uint64_t version)
{
	u->new = (struct chunk_hdr){.format = CHUNK_FORMAT_V2,
				    .data_off = CHUNK_V2_DATA_OFF,
				    .nblocks = chunk_nblocks(u->new_len),
				    .ino = u->ino,
				    .index = u->index,
				    .version = version,
				    .data_len = u->new_len,
				    .incarnation = u->old.incarnation,
				    .slot = -1};
	u->d0 = 1, u->d1 = 0, u->nbuild = 0;
	u->new.bcsum = malloc(sizeof(uint64_t) * (u->new.nblocks ? u->new.nblocks : 1));
	if (!u->new.bcsum)
		return -ENOMEM;
	first = STRATA_MIN(first, u->new.nblocks);
	if (first > 0)
		memcpy(u->new.bcsum, u->old.bcsum, sizeof(uint64_t) * first);
	int r = classify_blocks(u, first);
	if (r < 0 || u->nbuild == 0)
		return r;
	u->scratch = malloc((size_t)u->nbuild * BS);
	return u->scratch ? build_blocks(u) : -ENOMEM;
}

void chunk_update_done(struct chunk_update *u)
{
	if (u->oldfd >= 0)
		close(u->oldfd);
	u->oldfd = -1;
	chunk_hdr_done(&u->old);
	chunk_hdr_done(&u->new);
	free(u->scratch);
	u->scratch = NULL;
}
