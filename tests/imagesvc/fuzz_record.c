/* fuzz_record.c — libFuzzer entry point for the image record decoder
 * (imagesvc/record.c): any bytes are decoded as a record of format 1 or 2
 * (limits, lengths, counts) and have their MAC checked; a record that
 * decodes is encoded again as format 2 under a fixed key, and that must
 * decode to the same fields and verify, while the input's own MAC (made
 * with no key the fuzzer knows) must not. The first run writes seed records
 * (an empty image, and one of 3 blobs and 2 layers) into the corpus. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imagesvc/image_auth.h"
#include "imagesvc/store.h"

static const struct img_auth_key key = {{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
					 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}};

static void same(const struct img_record *a, const struct img_record *b)
{
	assert(a->n_blobs == b->n_blobs && a->n_layers == b->n_layers);
	assert(!memcmp(a->manifest, b->manifest, 32) && !memcmp(a->meta_sha, b->meta_sha, 32));
	assert(a->meta_size == b->meta_size && a->bytes == b->bytes && a->chunks == b->chunks);
	assert(!memcmp(a->blobs, b->blobs, 4 * (size_t)a->n_blobs));
	assert(!memcmp(a->tables, b->tables, 32 * (size_t)a->n_blobs));
	assert(!memcmp(a->layers, b->layers, 32 * (size_t)a->n_layers));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct img_record rec, again;
	int r = img_record_check_mac(data, size, &key);
	assert(r == 0 || r == -EKEYEXPIRED || r == -EKEYREJECTED);
	if (img_record_decode(data, size, &rec) < 0)
		return 0;
	assert(rec.version == 1 || rec.version == IMG_REC_VERSION);
	size_t n = img_record_size(&rec);
	uint8_t *buf = malloc(n);
	assert(buf && img_record_encode(&rec, &key, buf) == 0);
	assert(img_record_check_mac(buf, n, &key) == 0);
	assert(img_record_decode(buf, n, &again) == 0 && again.version == IMG_REC_VERSION);
	if (rec.version == IMG_REC_VERSION)
		same(&rec, &again);
	img_record_done(&again);
	img_record_done(&rec);
	free(buf);
	return 0;
}

/* Seeds: written into the working directory's corpus on the first call. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static uint32_t blobs[3] = {0, 5, 9};
	static uint8_t tables[3][32], layers[2][32];
	struct img_record recs[2] = {{.n_blobs = 0},
				     {.blobs = blobs,
				      .tables = tables,
				      .n_blobs = 3,
				      .layers = layers,
				      .n_layers = 2,
				      .flags = IMG_REC_HAS_CONFIG}};
	memset(tables, 0xab, sizeof(tables));
	for (int i = 0; i < 2; i++) {
		char p[64];
		size_t n = img_record_size(&recs[i]);
		uint8_t *b = malloc(n);
		snprintf(p, sizeof(p), "imagesvc_fuzz_record_corpus/seed%d", i);
		FILE *f = b && img_record_encode(&recs[i], &key, b) == 0 ? fopen(p, "wb") : NULL;
		if (f) {
			fwrite(b, 1, n, f);
			fclose(f);
		}
		free(b);
	}
	return 0;
}
