/* fuzz_blob_format.c — libFuzzer target for the blob digest-table and xattr
 * decoders (fs/blob_format.h). Nothing may crash or read past the input;
 * whatever decodes must satisfy the format's rules and encode back to the
 * same bytes (reserved fields aside), and a table accepted whole must have
 * exactly the records blob_table_count announced. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/blob_format.h"

struct walk {
	const uint8_t *data;
	size_t n;
};

static int check_rec(void *ctx, size_t i, const struct blob_rec *rec)
{
	struct walk *w = ctx;
	uint8_t raw[BLOB_TABLE_REC_SIZE];
	const uint8_t *in = w->data + BLOB_TABLE_HDR_SIZE + i * BLOB_TABLE_REC_SIZE;
	if (i != w->n++ || rec->off % BLOB_ALIGN || rec->len == 0 || rec->len > BLOB_CHUNK_SIZE)
		abort();
	blob_rec_encode(rec, raw);
	if (memcmp(raw, in, BLOB_TABLE_REC_SIZE - 4)) /* all but the reserved u32 */
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n = 0;
	struct walk w = {data, 0};
	int counted = blob_table_count(data, size, &n);
	int r = blob_table_decode(data, size, check_rec, &w);
	if ((counted != 0 && r != -EBADMSG) || (r == 0 && w.n != n))
		abort();
	if (counted == 0) {
		uint8_t hdr[BLOB_TABLE_HDR_SIZE];
		blob_table_hdr_encode(hdr);
		if (memcmp(hdr, data, BLOB_TABLE_HDR_SIZE - 4)) /* all but the reserved u32 */
			abort();
	}

	uint64_t ino;
	if (blob_xattr_decode(data, size, &ino) == 0) {
		uint8_t x[BLOB_XATTR_SIZE];
		blob_xattr_encode(ino, x);
		if (size != BLOB_XATTR_SIZE || memcmp(x, data, BLOB_XATTR_SIZE))
			abort();
	}
	return 0;
}
