/* chunk_format.h — the on-disk format of one chunk file (chunkserver/README.md
 * "Chunk file format"): its header codec, for format 2 (written) and format 1
 * (read only; a write converts the chunk), and the loading of a chunk's
 * current header from an open file.
 *
 * Format 2 keeps two header slots ahead of the data, each long enough for
 * the largest chunk's block checksums; a chunk is updated in place by writing
 * its data and then the slot not holding the current header, so the slot with
 * the higher version that passes its checksum is the current one and a torn
 * slot write leaves the previous header in the other (chunk_store.c,
 * invariant 1). Pure functions but chunk_hdr_read; nothing here logs. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunkserver/chunk_store.h"

#define CHUNK_MAX_BLOCKS (CHUNK_STORE_MAX_LEN / CHUNK_BLOCK_SIZE)
#define CHUNK_FORMAT_V1 1
#define CHUNK_FORMAT_V2 2
#define CHUNK_V2_SLOT_SIZE 12288u		   /* one header slot, 3 pages */
#define CHUNK_V2_DATA_OFF (2 * CHUNK_V2_SLOT_SIZE) /* data byte 0 */
#define CHUNK_HDR_FIXED 64			   /* fixed fields of a header */

/* A decoded chunk header (either format). */
struct chunk_hdr {
	uint16_t format;   /* CHUNK_FORMAT_V1 or _V2 */
	uint32_t data_off; /* file offset of data byte 0 */
	uint32_t nblocks;
	uint64_t ino;
	uint32_t index;
	uint64_t version;
	uint32_t data_len;
	uint64_t checksum;    /* XXH3-64 over the block checksums (LE u64 each) */
	uint64_t incarnation; /* format 2: chosen when the file was made */
	int slot;	      /* format 2: the slot it was read from (0, 1); v1: -1 */
	bool superseded;      /* format 2: a slot marked superseded (recovery only) */
	uint64_t *bcsum;      /* heap, max(nblocks, 1) entries */
};

/* Frees h->bcsum (h itself is the caller's). Accepts a zeroed h. */
void chunk_hdr_done(struct chunk_hdr *h);

static inline uint32_t chunk_nblocks(uint64_t len)
{
	return (uint32_t)((len + CHUNK_BLOCK_SIZE - 1) / CHUNK_BLOCK_SIZE);
}
/* Length of block b of a chunk holding len bytes (0 past the end). */
static inline uint32_t chunk_block_len(uint64_t len, uint32_t b)
{
	uint64_t start = (uint64_t)b * CHUNK_BLOCK_SIZE;
	return start >= len
		   ? 0
		   : (uint32_t)(len - start < CHUNK_BLOCK_SIZE ? len - start : CHUNK_BLOCK_SIZE);
}
/* Bytes of a format-2 slot for nblocks blocks: fixed part, sums, checksum. */
static inline size_t chunk_slot_len(uint32_t nblocks)
{
	return CHUNK_HDR_FIXED + 8 * (size_t)nblocks + 8;
}
static inline uint64_t chunk_slot_off(int slot)
{
	return (uint64_t)slot * CHUNK_V2_SLOT_SIZE;
}

/* XXH3-64 of one data block (AVX2 where the CPU has it, wire.h). */
uint64_t chunk_block_sum(const void *p, size_t len);
/* The chunk checksum of sums[0..n): XXH3-64 over them as LE u64. */
uint64_t chunk_sums_checksum(const uint64_t *sums, uint32_t n);

/* Encodes h (format 2, with its block checksums) as slot `slot` into
 * raw[0..chunk_slot_len(h->nblocks)) and sets h->checksum, h->slot. */
void chunk_slot_encode(struct chunk_hdr *h, int slot, uint8_t *raw);

/* Decodes a format-2 slot from raw[0..len): 0, or -EIO with *why (static
 * text) when it is not a complete valid slot `slot` of chunk (ino, index)
 * (one marked superseded counts only with superseded_ok). -ENOMEM. On
 * success ret owns its bcsum. */
int chunk_slot_decode(const uint8_t *raw, size_t len, int slot, uint64_t ino, uint32_t index,
		      bool superseded_ok, struct chunk_hdr *ret, const char **why);
/* Decodes a format-1 header from raw[0..len) (its hdr_len bytes): as above. */
int chunk_v1_decode(const uint8_t *raw, size_t len, uint64_t ino, uint32_t index,
		    struct chunk_hdr *ret, const char **why);

/* Reads the current header of the open chunk file fd: format 1 as it is; for
 * format 2 both slots, and the valid one with the higher version. A slot
 * marked superseded (chunk_slot_supersede) is not valid; with recovering it
 * is taken where the other slot is not valid (ret->superseded set). Returns
 * 0, -EIO with *why (no valid header, a file shorter than its header), or
 * -errno. */
int chunk_hdr_read(int fd, uint64_t ino, uint32_t index, bool recovering, struct chunk_hdr *ret,
		   const char **why);
/* The 4 bytes that mark a format-2 slot superseded (written over its magic,
 * at chunk_slot_off(slot)): its checksum still holds with the magic put
 * back, so recovery can use it when the slot that superseded it was lost. */
void chunk_slot_superseded_mark(uint8_t out[4]);
