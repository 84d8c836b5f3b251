/* fuzz_tar.c — libFuzzer entry point for the tar reader: header fields
 * (octal/base-256 numbers, checksums, ustar prefix), GNU long names and PAX
 * records, driven through the full reader over the fuzz input as a stream. */
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "imagesvc/tar.h"

struct src {
	const uint8_t *p;
	size_t len, off;
};

static ssize_t src_read(void *ctx, void *buf, size_t n)
{
	struct src *s = ctx;
	size_t k = s->len - s->off < n ? s->len - s->off : n;
	if (k > 1000)
		k = 1000; /* short reads exercise the re-read paths */
	memcpy(buf, s->p + s->off, k);
	s->off += k;
	return (ssize_t)k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct src s = {data, size, 0};
	struct tar_limits lim;
	tar_limits_default(&lim);
	lim.max_meta = 64 << 10;
	struct tar_reader *r;
	if (tar_reader_new(&lim, src_read, &s, &r) < 0)
		return 0;
	const struct tar_entry *e;
	uint8_t buf[4096];
	while (tar_next(r, &e) == 1)
		while (tar_read(r, buf, sizeof(buf)) > 0)
			;
	(void)tar_error(r);
	tar_reader_free(r);
	return 0;
}
