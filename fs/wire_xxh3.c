/* wire_xxh3.c — the frame checksum (XXH3-64) computed with AVX2 when the CPU
 * has it. Debian's libxxhash is built for baseline x86-64 (SSE2, about
 * 16 GB/s here); the AVX2 kernel of the same header-only code runs at about
 * 34 GB/s, and every 1 MiB chunk frame is hashed once by each side. The
 * result is bit-identical (XXH3 is defined independently of the vector unit),
 * so peers built either way agree. wire.c picks this or the library at run
 * time (wire_xxh3_avx2_ok). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "fs/wire.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
#include <immintrin.h>
#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

uint64_t wire_xxh3_avx2(uint64_t seed, const struct iovec *iov, int iovcnt)
{
	if (iovcnt == 1)
		return XXH3_64bits_withSeed(iov[0].iov_base, iov[0].iov_len, seed);
	XXH3_state_t st;
	XXH3_64bits_reset_withSeed(&st, seed);
	for (int i = 0; i < iovcnt; i++)
		XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
	return XXH3_64bits_digest(&st);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

bool wire_xxh3_avx2_ok(void)
{
	return __builtin_cpu_supports("avx2");
}
#else
uint64_t wire_xxh3_avx2(uint64_t seed, const struct iovec *iov, int iovcnt)
{
	(void)seed, (void)iov, (void)iovcnt;
	return 0;
}

bool wire_xxh3_avx2_ok(void)
{
	return false;
}
#endif
