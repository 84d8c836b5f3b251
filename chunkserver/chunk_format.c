/* chunk_format.c — the chunk file's header codec (chunk_format.h; the
 * layout in chunkserver/README.md "Chunk file format").
 *
 * Format 2 slot (little-endian), at file offset 0 (slot 0) or 12288 (slot 1):
 *   0 magic "SCHK"  4 format (2)  6 flags (0)  8 data offset (24576)
 *   12 nblocks  16 ino  24 index  28 block size  32 version  40 data length
 *   44 slot number  48 chunk checksum  56 incarnation
 *   64 XXH3-64 of each block (8 x nblocks)
 *   64 + 8 nblocks: XXH3-64 of the slot's bytes from 4 up to it
 * A slot replaced by a newer one in the other slot gets the magic "SCHX"
 * (superseded): not a header any more, but recovery can still take it if
 * the newer slot was lost in a power failure (chunk_hdr_read).
 * Format 1 (one header at offset 0, data at its hdr_len) is decoded for
 * chunks written before format 2; nothing writes it any more. */
#include "chunkserver/chunk_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "chunkserver/chunk_io.h"
#include "fs/cleanup.h"
#include "fs/wire.h"

#define CHDR_MAGIC 0x4b484353u	    /* "SCHK" */
#define CHDR_SUPERSEDED 0x58484353u /* "SCHX": a slot a newer one replaced */
#define V1_ALIGN 4096u
#define BS CHUNK_BLOCK_SIZE

_Static_assert(CHUNK_BLOCK_SIZE == WIRE_DATA_PIECE, "a frame's data pieces are chunk blocks");
_Static_assert(CHUNK_HDR_FIXED + 8 * CHUNK_MAX_BLOCKS + 8 <= CHUNK_V2_SLOT_SIZE,
	       "a slot holds the largest chunk's checksums");
_Static_assert(CHUNK_V2_SLOT_SIZE % 4096 == 0, "slots are whole pages");

void chunk_hdr_done(struct chunk_hdr *h)
{
	free(h->bcsum);
	h->bcsum = NULL;
}

uint64_t chunk_block_sum(const void *p, size_t len)
{
	return wire_xxh3_64(p, len, 0);
}

uint64_t chunk_sums_checksum(const uint64_t *sums, uint32_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return XXH3_64bits(sums, (size_t)n * 8);
#else
	_cleanup_free_ uint8_t *raw = malloc((size_t)n * 8 + 1);
	if (!raw)
		abort();
	for (uint32_t b = 0; b < n; b++)
		le64_put(raw + 8 * b, sums[b]);
	return XXH3_64bits(raw, (size_t)n * 8);
#endif
}

static int bad(const char **why, const char *what)
{
	*why = what;
	return -EIO;
}

/* The fields both formats keep at the same offsets. */
static struct chunk_hdr fixed_fields(const uint8_t *raw)
{
	return (struct chunk_hdr){.nblocks = le32_get(raw + 12),
				  .ino = le64_get(raw + 16),
				  .index = le32_get(raw + 24),
				  .version = le64_get(raw + 32),
				  .data_len = le32_get(raw + 40),
				  .checksum = le64_get(raw + 48)};
}

static int take_sums(const uint8_t *raw, struct chunk_hdr *h)
{
	h->bcsum = malloc(sizeof(uint64_t) * (h->nblocks ? h->nblocks : 1));
	if (!h->bcsum)
		return -ENOMEM;
	for (uint32_t b = 0; b < h->nblocks; b++)
		h->bcsum[b] = le64_get(raw + CHUNK_HDR_FIXED + 8 * b);
	return 0;
}

/* The slot's checksum: over its bytes from 4 on (not the magic, which
 * marks a superseded slot). */
static uint64_t slot_checksum(const uint8_t *raw, size_t body)
{
	return XXH3_64bits(raw + 4, body - 4);
}

void chunk_slot_encode(struct chunk_hdr *h, int slot, uint8_t *raw)
{
	memset(raw, 0, CHUNK_HDR_FIXED);
	h->format = CHUNK_FORMAT_V2;
	h->data_off = CHUNK_V2_DATA_OFF;
	h->slot = slot;
	le32_put(raw + 0, CHDR_MAGIC);
	le16_put(raw + 4, CHUNK_FORMAT_V2);
	le32_put(raw + 8, CHUNK_V2_DATA_OFF);
	le32_put(raw + 12, h->nblocks);
	le64_put(raw + 16, h->ino);
	le32_put(raw + 24, h->index);
	le32_put(raw + 28, BS);
	le64_put(raw + 32, h->version);
	le32_put(raw + 40, h->data_len);
	le32_put(raw + 44, (uint32_t)slot);
	le64_put(raw + 56, h->incarnation);
	for (uint32_t b = 0; b < h->nblocks; b++)
		le64_put(raw + CHUNK_HDR_FIXED + 8 * b, h->bcsum[b]);
	h->checksum = XXH3_64bits(raw + CHUNK_HDR_FIXED, (size_t)h->nblocks * 8);
	le64_put(raw + 48, h->checksum);
	size_t body = CHUNK_HDR_FIXED + 8 * (size_t)h->nblocks;
	le64_put(raw + body, slot_checksum(raw, body));
}

void chunk_slot_superseded_mark(uint8_t out[4])
{
	le32_put(out, CHDR_SUPERSEDED);
}

static bool is_superseded(const uint8_t *raw)
{
	return le32_get(raw) == CHDR_SUPERSEDED;
}

/* The slot's length by its fixed part, or 0 if that is not a format-2 slot
 * (current or superseded). */
static size_t slot_peek(const uint8_t *raw, int slot)
{
	uint32_t nb = le32_get(raw + 12);
	if ((le32_get(raw) != CHDR_MAGIC && !is_superseded(raw)) ||
	    le16_get(raw + 4) != CHUNK_FORMAT_V2 || le32_get(raw + 8) != CHUNK_V2_DATA_OFF ||
	    le32_get(raw + 28) != BS || le32_get(raw + 44) != (uint32_t)slot ||
	    nb > CHUNK_MAX_BLOCKS)
		return 0;
	return chunk_slot_len(nb);
}

int chunk_slot_decode(const uint8_t *raw, size_t len, int slot, uint64_t ino, uint32_t index,
		      bool superseded_ok, struct chunk_hdr *ret, const char **why)
{
	memset(ret, 0, sizeof(*ret));
	size_t need = len >= CHUNK_HDR_FIXED ? slot_peek(raw, slot) : 0;
	if (need == 0 || need > len)
		return bad(why, "bad header");
	if (is_superseded(raw) && !superseded_ok)
		return bad(why, "only a superseded header");
	size_t body = need - 8;
	struct chunk_hdr h = fixed_fields(raw);
	h.format = CHUNK_FORMAT_V2;
	h.data_off = CHUNK_V2_DATA_OFF;
	h.incarnation = le64_get(raw + 56);
	h.slot = slot;
	h.superseded = is_superseded(raw);
	if (le64_get(raw + body) != slot_checksum(raw, body))
		return bad(why, "header checksum mismatch");
	if (h.ino != ino || h.index != index || h.data_len > CHUNK_STORE_MAX_LEN ||
	    h.nblocks != chunk_nblocks(h.data_len) ||
	    h.checksum != XXH3_64bits(raw + CHUNK_HDR_FIXED, (size_t)h.nblocks * 8))
		return bad(why, "header does not match its chunk");
	int r = take_sums(raw, &h);
	if (r == 0)
		*ret = h;
	return r;
}

static uint32_t v1_hdr_len(uint32_t nblocks)
{
	uint32_t n = CHUNK_HDR_FIXED + 8 * nblocks;
	return (n + V1_ALIGN - 1) / V1_ALIGN * V1_ALIGN;
}

static uint64_t v1_hdr_checksum(const uint8_t *raw, uint32_t nblocks)
{
	return XXH3_64bits_withSeed(raw + CHUNK_HDR_FIXED, (size_t)nblocks * 8,
				    XXH3_64bits(raw, 56));
}

/* The v1 header's length by its fixed part, or 0 if it is not one. */
static uint32_t v1_peek(const uint8_t *raw)
{
	uint32_t nb = le32_get(raw + 12), len = le32_get(raw + 8);
	if (le32_get(raw) != CHDR_MAGIC || le16_get(raw + 4) != CHUNK_FORMAT_V1 ||
	    le32_get(raw + 28) != BS || nb > CHUNK_MAX_BLOCKS || len != v1_hdr_len(nb))
		return 0;
	return len;
}

int chunk_v1_decode(const uint8_t *raw, size_t len, uint64_t ino, uint32_t index,
		    struct chunk_hdr *ret, const char **why)
{
	memset(ret, 0, sizeof(*ret));
	uint32_t need = len >= CHUNK_HDR_FIXED ? v1_peek(raw) : 0;
	if (need == 0)
		return bad(why, "bad header");
	if (need > len)
		return bad(why, "chunk file shorter than its header");
	struct chunk_hdr h = fixed_fields(raw);
	h.format = CHUNK_FORMAT_V1;
	h.data_off = need;
	h.slot = -1;
	if (le64_get(raw + 56) != v1_hdr_checksum(raw, h.nblocks) || h.ino != ino ||
	    h.index != index || h.data_len > CHUNK_STORE_MAX_LEN ||
	    h.nblocks != chunk_nblocks(h.data_len) ||
	    h.checksum != XXH3_64bits(raw + CHUNK_HDR_FIXED, (size_t)h.nblocks * 8))
		return bad(why, "header checksum mismatch");
	int r = take_sums(raw, &h);
	if (r == 0)
		*ret = h;
	return r;
}

/* Decodes slot `slot` of a format-2 file; head holds its first `have` bytes
 * (the rest is read from fd when its checksums need them). */
static int slot_load(int fd, const uint8_t *head, size_t have, int slot, uint64_t ino,
		     uint32_t index, bool superseded_ok, struct chunk_hdr *ret, const char **why)
{
	size_t need = have >= CHUNK_HDR_FIXED ? slot_peek(head, slot) : 0;
	if (need == 0 || need <= have)
		return chunk_slot_decode(head, have, slot, ino, index, superseded_ok, ret, why);
	_cleanup_free_ uint8_t *raw = malloc(need);
	if (!raw)
		return -ENOMEM;
	memcpy(raw, head, have);
	ssize_t n = chunk_io_pread_most(fd, raw + have, need - have, chunk_slot_off(slot) + have);
	if (n < 0)
		return (int)n;
	return chunk_slot_decode(raw, have + (size_t)n, slot, ino, index, superseded_ok, ret, why);
}

/* Of two decoded slots (r: their results), the current one: the valid one
 * with the higher version, a superseded one only if the other is not valid. */
static int pick_slot(const int r[2], const struct chunk_hdr h[2])
{
	if (r[0] < 0 || r[1] < 0)
		return r[0] < 0 ? 1 : 0;
	if (h[0].superseded != h[1].superseded)
		return h[0].superseded ? 1 : 0;
	return h[1].version > h[0].version;
}

int chunk_hdr_read(int fd, uint64_t ino, uint32_t index, bool recovering, struct chunk_hdr *ret,
		   const char **why)
{
	/* slot 0 whole and slot 1's first page in one read (holes read fast) */
	enum { HEAD = CHUNK_V2_SLOT_SIZE + 4096 };
	_cleanup_free_ uint8_t *buf = malloc(HEAD);
	if (!buf)
		return -ENOMEM;
	ssize_t n = chunk_io_pread_most(fd, buf, HEAD, 0);
	if (n < 0)
		return (int)n;
	if (n >= CHUNK_HDR_FIXED && le16_get(buf + 4) == CHUNK_FORMAT_V1)
		return chunk_v1_decode(buf, (size_t)n, ino, index, ret, why);
	if ((size_t)n < HEAD)
		return bad(why, "chunk file shorter than its header");
	struct chunk_hdr h[2] = {{0}, {0}};
	const char *w[2] = {NULL, NULL};
	int r[2];
	r[0] = slot_load(fd, buf, CHUNK_V2_SLOT_SIZE, 0, ino, index, recovering, &h[0], &w[0]);
	r[1] =
	    slot_load(fd, buf + CHUNK_V2_SLOT_SIZE, 4096, 1, ino, index, recovering, &h[1], &w[1]);
	for (int i = 0; i < 2; i++)
		if (r[i] < 0 && r[i] != -EIO) {
			chunk_hdr_done(&h[0]);
			chunk_hdr_done(&h[1]);
			return r[i];
		}
	if (r[0] < 0 && r[1] < 0)
		return bad(why, w[0]);
	int pick = pick_slot(r, h);
	chunk_hdr_done(&h[1 - pick]);
	*ret = h[pick];
	return 0;
}
