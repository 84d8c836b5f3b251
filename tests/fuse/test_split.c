/* test_split.c — unit test of strata-fuse's data-path helpers (fuse/split.c):
 * cutting byte ranges at chunk boundaries and clamping reads to the file
 * length. Exits 0 on success, 1 on the first failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuse/fuse-internal.h"
#include "tests/testutil.h"

static void test_aligned(void)
{
	struct sfs_seg s[8];
	int n = sfs_split(1u << 20, 0, 1u << 20, s, 8);

	EXPECT(n == 1);
	EXPECT(s[0].index == 0 && s[0].off == 0 && s[0].len == (1u << 20) && s[0].bufoff == 0);
}

static void test_straddle(void)
{
	struct sfs_seg s[8];
	uint32_t cs = 64u << 10;
	int n = sfs_split(cs, cs - 10, 20, s, 8);

	EXPECT(n == 2);
	EXPECT(s[0].index == 0 && s[0].off == cs - 10 && s[0].len == 10 && s[0].bufoff == 0);
	EXPECT(s[1].index == 1 && s[1].off == 0 && s[1].len == 10 && s[1].bufoff == 10);
}

static void test_many(void)
{
	struct sfs_seg s[32];
	uint32_t cs = 64u << 10;
	uint64_t off = 3 * (uint64_t)cs + 5, len = 1u << 20, sum = 0;
	int n = sfs_split(cs, off, len, s, 32);

	EXPECT(n == 17);
	for (int i = 0; i < n; i++) {
		EXPECT(s[i].bufoff == sum);
		EXPECT(s[i].index == (off + sum) / cs);
		sum += s[i].len;
	}
	EXPECT(sum == len);
	EXPECT(sfs_split(cs, off, len, s, 16) == -EINVAL); /* too many segments */
}

static void test_edges(void)
{
	struct sfs_seg s[4];

	EXPECT(sfs_split(1u << 20, 123, 0, s, 4) == 0);
	EXPECT(sfs_split(3000, 0, 10, s, 4) == -EINVAL); /* not a power of two */
	EXPECT(sfs_split(0, 0, 10, s, 4) == -EINVAL);
	EXPECT(sfs_split(1u << 20, UINT64_MAX - 5, 10, s, 4) == -EINVAL); /* overflow */
	/* chunk index beyond 32 bits */
	EXPECT(sfs_split(64u << 10, (uint64_t)UINT32_MAX * (64u << 10) + (64u << 10), 1, s, 4) ==
	       -EINVAL);
}

static void test_clamp(void)
{
	EXPECT(sfs_clamp_read(100, 0, 4096) == 100);
	EXPECT(sfs_clamp_read(100, 100, 4096) == 0);
	EXPECT(sfs_clamp_read(100, 200, 4096) == 0);
	EXPECT(sfs_clamp_read(10000, 4096, 4096) == 4096);
	EXPECT(sfs_clamp_read(5000, 4096, 4096) == 904);
}

int main(void)
{
	test_aligned();
	test_straddle();
	test_many();
	test_edges();
	test_clamp();
	return test_result("test_fuse_split");
}
