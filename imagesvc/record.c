/* record.c — the codec of image records (ROOT/images/HEX/image, format in
 * store.h): encoding and signing format 2, decoding formats 1 and 2, and
 * checking a format 2 record's MAC (image_auth.h). The decoder takes
 * hostile bytes (anyone who can write the store) and is fuzzed
 * (tests/imagesvc/fuzz_record.c). */
#include "imagesvc/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/wire.h"
#include "imagesvc/image_auth.h"

#define REC_V1_FIXED (32 + 32 + 5 * 8 + 4 + 4)
#define REC_V2_FIXED (32 + 32 + 32 + 32 + 5 * 8 + 4 + 4)

static size_t size_for(uint16_t version, uint32_t n_blobs, uint32_t n_layers)
{
	if (version == 1)
		return IMG_REC_HDR + REC_V1_FIXED + 4 * (size_t)n_blobs + 32 * (size_t)n_layers;
	return IMG_REC_HDR + REC_V2_FIXED + (4 + 32) * (size_t)n_blobs + 32 * (size_t)n_layers +
	       IMG_AUTH_MAC_SIZE;
}

size_t img_record_size(const struct img_record *rec)
{
	return size_for(IMG_REC_VERSION, rec->n_blobs, rec->n_layers);
}

int img_record_encode(const struct img_record *rec, const struct img_auth_key *k, uint8_t *b)
{
	size_t n = img_record_size(rec), o = IMG_REC_HDR;
	memset(b, 0, IMG_REC_HDR);
	le32_put(b, IMG_REC_MAGIC);
	le16_put(b + 4, IMG_REC_VERSION);
	le16_put(b + 6, IMG_REC_HDR);
	le32_put(b + 8, (uint32_t)n);
	le32_put(b + 12, rec->flags & (IMG_REC_HAS_MANIFEST | IMG_REC_HAS_CONFIG));
	const uint8_t *d[4] = {rec->manifest, rec->meta_sha, rec->manifest_doc, rec->config_doc};
	for (int i = 0; i < 4; i++, o += 32)
		memcpy(b + o, d[i], 32);
	const uint64_t v[5] = {rec->meta_size, rec->bytes, rec->created, rec->chunks,
			       rec->chunks_new};
	for (int i = 0; i < 5; i++, o += 8)
		le64_put(b + o, v[i]);
	le32_put(b + o, rec->n_blobs), o += 4;
	le32_put(b + o, rec->n_layers), o += 4;
	for (uint32_t i = 0; i < rec->n_blobs; i++, o += 4)
		le32_put(b + o, rec->blobs[i]);
	for (uint32_t i = 0; i < rec->n_blobs; i++, o += 32)
		memcpy(b + o, rec->tables[i], 32);
	for (uint32_t i = 0; i < rec->n_layers; i++, o += 32)
		memcpy(b + o, rec->layers[i], 32);
	return img_auth_record_mac(k, b, o, b + o);
}

/* Allocates the arrays of rec for its counts. */
static int alloc_arrays(struct img_record *rec)
{
	rec->blobs = calloc(rec->n_blobs + 1, sizeof(*rec->blobs));
	rec->tables = calloc(rec->n_blobs + 1, 32);
	rec->layers = calloc(rec->n_layers + 1, 32);
	if (rec->blobs && rec->tables && rec->layers)
		return 0;
	img_record_done(rec);
	return -ENOMEM;
}

int img_record_decode(const uint8_t *b, size_t n, struct img_record *ret)
{
	struct img_record rec = {0};
	size_t o = IMG_REC_HDR;
	if (n < IMG_REC_HDR + REC_V1_FIXED || le32_get(b) != IMG_REC_MAGIC ||
	    le16_get(b + 6) != IMG_REC_HDR || le32_get(b + 8) != n)
		return -EBADMSG;
	rec.version = le16_get(b + 4);
	if (rec.version != 1 && rec.version != IMG_REC_VERSION)
		return -EBADMSG;
	if (rec.version == IMG_REC_VERSION && n < IMG_REC_HDR + REC_V2_FIXED + IMG_AUTH_MAC_SIZE)
		return -EBADMSG;
	rec.flags = rec.version == 1 ? 0 : le32_get(b + 12);
	uint8_t *d[4] = {rec.manifest, rec.meta_sha, rec.manifest_doc, rec.config_doc};
	for (int i = 0; i < (rec.version == 1 ? 2 : 4); i++, o += 32)
		memcpy(d[i], b + o, 32);
	uint64_t *v[5] = {&rec.meta_size, &rec.bytes, &rec.created, &rec.chunks, &rec.chunks_new};
	for (int i = 0; i < 5; i++, o += 8)
		*v[i] = le64_get(b + o);
	rec.n_blobs = le32_get(b + o), o += 4;
	rec.n_layers = le32_get(b + o), o += 4;
	if (rec.n_blobs > IMG_MAX_BLOBS || rec.n_layers > IMG_MAX_LAYERS ||
	    size_for(rec.version, rec.n_blobs, rec.n_layers) != n ||
	    (rec.flags & ~(uint32_t)(IMG_REC_HAS_MANIFEST | IMG_REC_HAS_CONFIG)))
		return -EBADMSG;
	int r = alloc_arrays(&rec);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < rec.n_blobs; i++, o += 4)
		rec.blobs[i] = le32_get(b + o);
	for (uint32_t i = 0; rec.version == IMG_REC_VERSION && i < rec.n_blobs; i++, o += 32)
		memcpy(rec.tables[i], b + o, 32);
	for (uint32_t i = 0; i < rec.n_layers; i++, o += 32)
		memcpy(rec.layers[i], b + o, 32);
	*ret = rec;
	return 0;
}

int img_record_check_mac(const uint8_t *b, size_t n, const struct img_auth_key *k)
{
	uint8_t want[IMG_AUTH_MAC_SIZE];
	if (n < IMG_REC_HDR + IMG_AUTH_MAC_SIZE || le16_get(b + 4) != IMG_REC_VERSION)
		return -EKEYEXPIRED;
	int r = img_auth_record_mac(k, b, n - IMG_AUTH_MAC_SIZE, want);
	if (r < 0)
		return r;
	return img_auth_mac_equal(want, b + n - IMG_AUTH_MAC_SIZE) ? 0 : -EKEYREJECTED;
}

void img_record_done(struct img_record *r)
{
	free(r->blobs);
	free(r->tables);
	free(r->layers);
	r->blobs = NULL;
	r->tables = NULL;
	r->layers = NULL;
}
