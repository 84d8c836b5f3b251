/* test_split.c — unit test of strata-fuse's data-path helpers (fuse/split.c):
 * cutting byte ranges at chunk boundaries and clamping reads to the file
 * length. Exits 0 on success, 1 on the first failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuse/fuse-internal.h"

static int failures;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static void test_aligned(void)
{
	struct sfs_seg s[8];
	int n = sfs_split(1u << 20, 0, 1u << 20, s, 8);

	CHECK(n == 1);
	CHECK(s[0].index == 0 && s[0].off == 0 && s[0].len == (1u << 20) && s[0].bufoff == 0);
}

static void test_straddle(void)
{
	struct sfs_seg s[8];
	uint32_t cs = 64u << 10;
	int n = sfs_split(cs, cs - 10, 20, s, 8);

	CHECK(n == 2);
	CHECK(s[0].index == 0 && s[0].off == cs - 10 && s[0].len == 10 && s[0].bufoff == 0);
	CHECK(s[1].index == 1 && s[1].off == 0 && s[1].len == 10 && s[1].bufoff == 10);
}

static void test_many(void)
{
	struct sfs_seg s[32];
	uint32_t cs = 64u << 10;
	uint64_t off = 3 * (uint64_t)cs + 5, len = 1u << 20, sum = 0;
	int n = sfs_split(cs, off, len, s, 32);

	CHECK(n == 17);
	for (int i = 0; i < n; i++) {
		CHECK(s[i].bufoff == sum);
		CHECK(s[i].index == (off + sum) / cs);
		sum += s[i].len;
	}
	CHECK(sum == len);
	CHECK(sfs_split(cs, off, len, s, 16) == -EINVAL); /* too many segments */
}

static void test_edges(void)
{
	struct sfs_seg s[4];

	CHECK(sfs_split(1u << 20, 123, 0, s, 4) == 0);
	CHECK(sfs_split(3000, 0, 10, s, 4) == -EINVAL); /* not a power of two */
	CHECK(sfs_split(0, 0, 10, s, 4) == -EINVAL);
	CHECK(sfs_split(1u << 20, UINT64_MAX - 5, 10, s, 4) == -EINVAL); /* overflow */
	/* chunk index beyond 32 bits */
	CHECK(sfs_split(64u << 10, (uint64_t)UINT32_MAX * (64u << 10) + (64u << 10), 1, s, 4) ==
	      -EINVAL);
}

static void test_clamp(void)
{
	CHECK(sfs_clamp_read(100, 0, 4096) == 100);
	CHECK(sfs_clamp_read(100, 100, 4096) == 0);
	CHECK(sfs_clamp_read(100, 200, 4096) == 0);
	CHECK(sfs_clamp_read(10000, 4096, 4096) == 4096);
	CHECK(sfs_clamp_read(5000, 4096, 4096) == 904);
}

int main(void)
{
	test_aligned();
	test_straddle();
	test_many();
	test_edges();
	test_clamp();
	if (failures) {
		fprintf(stderr, "test_fuse_split: %d failure(s)\n", failures);
		return 1;
	}
	return 0;
}
