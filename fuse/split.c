/* split.c — pure helpers of the data path: cutting a byte range of a file
 * into per-chunk pieces, and clamping reads to the file length. No I/O and
 * no libfuse here, so tests/fuse/test_split.c can check them alone. */
#include <errno.h>
#include <stdint.h>

#include "fuse/fuse-internal.h"

static bool is_pow2(uint32_t v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

int sfs_split(uint32_t chunk_size, uint64_t off, uint64_t len, struct sfs_seg *segs, int max)
{
	uint64_t end, pos;
	int n = 0;

	if (!is_pow2(chunk_size) || max < 0)
		return -EINVAL;
	if (__builtin_add_overflow(off, len, &end))
		return -EINVAL;
	for (pos = off; pos < end; n++) {
		uint64_t index = pos / chunk_size;
		uint32_t in = (uint32_t)(pos % chunk_size);
		uint64_t take = chunk_size - in;

		if (index > UINT32_MAX || n >= max)
			return -EINVAL;
		if (take > end - pos)
			take = end - pos;
		segs[n] = (struct sfs_seg){.index = (uint32_t)index,
					   .off = in,
					   .len = (uint32_t)take,
					   .bufoff = pos - off};
		pos += take;
	}
	return n;
}

uint64_t sfs_clamp_read(uint64_t size, uint64_t off, uint64_t len)
{
	if (off >= size)
		return 0;
	return size - off < len ? size - off : len;
}
