/* fuzz_tree.c — libFuzzer entry point for the whole conversion path: the
 * input (split in two at an offset chosen by its last byte) is applied as
 * two layers to a tree, then written as an EROFS image into a memfd. Chunks
 * go to an in-memory blob store that only hands out locations, which also
 * shows the blobstore interface working without files. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "imagesvc/blobstore.h"
#include "imagesvc/erofs_writer.h"
#include "imagesvc/tar.h"
#include "imagesvc/tree.h"

struct mem_store {
	struct blobstore base;
	uint8_t (*digests)[BLOB_DIGEST_LEN];
	struct blob_loc *locs;
	size_t n;
	uint64_t size;
};

static int mem_begin(struct blobstore *bs, uint32_t *ret)
{
	*ret = 7;
	return 0;
}

static int mem_lookup(struct blobstore *bs, const uint8_t *d, struct blob_loc *ret)
{
	struct mem_store *m = (struct mem_store *)bs;
	for (size_t i = 0; i < m->n; i++)
		if (!memcmp(m->digests[i], d, BLOB_DIGEST_LEN)) {
			*ret = m->locs[i];
			return 0;
		}
	return -ENOENT;
}

static int mem_put(struct blobstore *bs, uint32_t blob, const uint8_t *d, const void *data,
		   uint32_t len, struct blob_loc *ret, bool *ret_new)
{
	struct mem_store *m = (struct mem_store *)bs;
	*ret_new = mem_lookup(bs, d, ret) < 0;
	if (!*ret_new)
		return 0;
	void *nd = realloc(m->digests, (m->n + 1) * BLOB_DIGEST_LEN);
	if (!nd)
		return -ENOMEM;
	m->digests = nd;
	void *nl = realloc(m->locs, (m->n + 1) * sizeof(*m->locs));
	if (!nl)
		return -ENOMEM;
	m->locs = nl;
	memcpy(m->digests[m->n], d, BLOB_DIGEST_LEN);
	m->locs[m->n] = (struct blob_loc){blob, m->size};
	*ret = m->locs[m->n++];
	m->size += blob_padded(len);
	return 0;
}

static int mem_end(struct blobstore *bs, uint32_t blob)
{
	return 0;
}

static int mem_path(struct blobstore *bs, uint32_t blob, char *buf, size_t cap)
{
	return -ENOENT;
}

static void mem_free(struct blobstore *bs)
{
	struct mem_store *m = (struct mem_store *)bs;
	free(m->digests);
	free(m->locs);
}

static const struct blobstore_ops mem_ops = {mem_begin, mem_put,  mem_lookup,
					     mem_end,	mem_path, mem_free};

struct src {
	const uint8_t *p;
	size_t len, off;
};

static ssize_t src_read(void *ctx, void *buf, size_t n)
{
	struct src *s = ctx;
	size_t k = s->len - s->off < n ? s->len - s->off : n;
	if (k)
		memcpy(buf, s->p + s->off, k);
	s->off += k;
	return (ssize_t)k;
}

static void apply(struct tree *t, struct blobstore *bs, const uint8_t *p, size_t len,
		  unsigned layer)
{
	struct src s = {p, len, 0};
	struct tar_reader *r;
	if (tar_reader_new(NULL, src_read, &s, &r) < 0)
		return;
	(void)tree_apply_layer(t, r, bs, 7, layer, NULL);
	tar_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	/* The last byte picks where the second layer starts (0: one layer), so
	 * that plain tar files work as seeds. */
	size_t body = size - 1, split = (size_t)data[body] * 512;
	if (split >= body)
		split = 0;
	struct mem_store m = {.base.ops = &mem_ops};
	struct tree *t;
	if (tree_new(&t) < 0)
		return 0;
	if (split)
		apply(t, &m.base, data, split, 0);
	apply(t, &m.base, data + split, body - split, 1);
	int fd = memfd_create("fuzz-erofs", MFD_CLOEXEC);
	struct erofs_image_info info = {0};
	if (fd >= 0 && erofs_write_image(t, fd, &info) == 0)
		free(info.blobs);
	if (fd >= 0)
		close(fd);
	tree_free(t);
	mem_free(&m.base);
	return 0;
}
