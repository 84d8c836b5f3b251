/* fuzz_fuse_holder.c — libFuzzer target for the strata-fuse-holder message
 * decoder (fs/fuse_holder.h): nothing may crash or read past the input, and
 * a decoded message with a payload must be within the limits and encode back
 * to the same bytes (but the length: a newer minor may append fields). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fuse_holder.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	struct fuse_holder_info info;
	uint8_t out[FUSE_HOLDER_MSG_MAX];
	uint16_t type;

	memset(&info, 0, sizeof(info));
	if (fuse_holder_decode(data, n, &type, &info) < 0)
		return 0;
	if (info.init_len > FUSE_HOLDER_INIT_MAX || strlen(info.mount) > FUSE_HOLDER_MOUNT_MAX)
		abort();
	if (n <= FUSE_HOLDER_HDR || type != FUSE_HOLDER_DEPOSIT)
		return 0;
	int m = fuse_holder_encode(type, &info, out);
	/* an input without the appended conn id comes back 8 bytes longer */
	size_t same = m >= 8 && (size_t)m > n ? (size_t)m - 8 : (size_t)m;
	if (m < 0 || same > n || memcmp(out, data, 8) != 0 ||
	    memcmp(out + FUSE_HOLDER_HDR, data + FUSE_HOLDER_HDR, same - FUSE_HOLDER_HDR) != 0)
		abort();
	return 0;
}
