/* blobstore_local.c — the blob store on a local directory.
 *
 * DIR/blob-NNNNNNNN.data holds the chunks of one layer, each at a 4 KiB
 * aligned offset and zero-padded; DIR/blob-NNNNNNNN.idx is its chunk-digest
 * table (format in fs/blob_format.h). At open, every table is read into an
 * in-memory dedup index (open addressing on the digest), so a chunk stored by
 * any earlier layer or image is found again. Later the same files will live
 * in a reserved part of the strata namespace and be read through FUSE.
 *
 * Invariants:
 *  1. A digest is in the index only after its bytes were written to the blob
 *     and its record appended to the table.
 *  2. Blob sizes are always multiples of BLOB_ALIGN.
 *  3. Tables are trusted only after their header and length check out; a
 *     corrupt one fails the open with -EBADMSG. */
#include "imagesvc/blobstore.h"
#include "fs/fdio.h"
#include "imagesvc/digest_index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"

struct open_blob {
	uint32_t id;
	struct blob_files f;
};

struct local_store {
	struct blobstore base;
	char *dir;
	struct digest_index index;
	uint32_t next_id;
	struct open_blob *open;
	size_t n_open;
};

static int blob_file(struct local_store *s, uint32_t id, const char *ext, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/blob-%08u.%s", s->dir, id, ext);
	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

static int load_table(struct local_store *s, uint32_t id)
{
	char path[4096];
	int r = blob_file(s, id, "idx", path, sizeof(path));
	if (r < 0)
		return r;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint8_t hdr[BLOB_TABLE_HDR_SIZE];
	if (read(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr) || blob_table_hdr_check(hdr) < 0)
		return -EBADMSG;
	uint8_t raw[BLOB_TABLE_REC_SIZE];
	ssize_t n;
	while ((n = read(fd, raw, sizeof(raw))) == (ssize_t)sizeof(raw)) {
		struct blob_rec rec;
		if (blob_rec_decode(raw, &rec) < 0)
			return -EBADMSG;
		r = digest_index_add(&s->index, rec.digest, (struct blob_loc){id, rec.off});
		if (r < 0)
			return r;
	}
	return n == 0 ? 0 : n < 0 ? -errno : -EBADMSG;
}

static int scan_dir(struct local_store *s)
{
	DIR *d = opendir(s->dir);
	if (!d)
		return -errno;
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		unsigned id;
		char ext[8];
		if (sscanf(de->d_name, "blob-%8u.%7s", &id, ext) != 2)
			continue;
		if (id >= s->next_id)
			s->next_id = id + 1;
		if (!strcmp(ext, "idx"))
			r = load_table(s, id);
	}
	closedir(d);
	return r;
}

static struct open_blob *find_open(struct local_store *s, uint32_t id)
{
	for (size_t i = 0; i < s->n_open; i++)
		if (s->open[i].id == id)
			return &s->open[i];
	return NULL;
}

static int local_begin_blob(struct blobstore *bs, uint32_t *ret_blob)
{
	struct local_store *s = (struct local_store *)bs;
	char data[4096], idx[4096];
	uint32_t id = s->next_id;
	struct open_blob *nb = realloc(s->open, (s->n_open + 1) * sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	s->open = nb;
	int r = blob_file(s, id, "data", data, sizeof(data));
	if (r == 0)
		r = blob_file(s, id, "idx", idx, sizeof(idx));
	if (r == 0)
		r = blob_files_create(data, idx, &s->open[s->n_open].f);
	if (r < 0)
		return r;
	s->open[s->n_open++].id = id;
	s->next_id++;
	*ret_blob = id;
	return 0;
}

int blob_files_create(const char *data_path, const char *idx_path, struct blob_files *ret)
{
	_cleanup_close_ int dfd = open(data_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (dfd < 0)
		return -errno;
	_cleanup_close_ int ifd =
	    open(idx_path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
	if (ifd < 0)
		return -errno;
	uint8_t hdr[BLOB_TABLE_HDR_SIZE];
	blob_table_hdr_encode(hdr);
	int r = strata_write_all(ifd, hdr, sizeof(hdr));
	if (r < 0)
		return r;
	*ret = (struct blob_files){TAKE_FD(dfd), TAKE_FD(ifd), 0};
	return 0;
}

/* Appends one chunk at byte off of a blob: its data padded to BLOB_ALIGN in
 * data_fd, and its record at the end of the digest table idx_fd. Returns 0
 * and the offset after the padded chunk in *ret_next, or -errno. */
static int append_chunk(int data_fd, int idx_fd, uint64_t off, const uint8_t *digest,
			const void *data, uint32_t len, uint64_t *ret_next)
{
	static const uint8_t zeros[BLOB_ALIGN];
	uint32_t pad = (uint32_t)(blob_padded(len) - len);
	int r = strata_pwrite_all(data_fd, data, len, off);
	if (r == 0 && pad)
		r = strata_pwrite_all(data_fd, zeros, pad, off + len);
	if (r < 0)
		return r;
	struct blob_rec rec = {.off = off, .len = len};
	uint8_t raw[BLOB_TABLE_REC_SIZE];
	memcpy(rec.digest, digest, BLOB_DIGEST_LEN);
	blob_rec_encode(&rec, raw);
	r = strata_write_all(idx_fd, raw, sizeof(raw));
	if (r < 0)
		return r;
	*ret_next = off + len + pad;
	return 0;
}

int blob_files_put(struct blob_files *f, struct digest_index *ix, uint32_t blob,
		   const uint8_t digest[BLOB_DIGEST_LEN], const void *data, uint32_t len,
		   struct blob_loc *ret, bool *ret_new)
{
	if (len == 0 || len > BLOB_CHUNK_SIZE)
		return -EINVAL;
	if (digest_index_lookup(ix, digest, ret) == 0) {
		*ret_new = false;
		return 0;
	}
	if (!f || f->data_fd < 0)
		return -EBADF;
	struct blob_loc loc = {blob, f->size};
	int r = append_chunk(f->data_fd, f->idx_fd, f->size, digest, data, len, &f->size);
	if (r == 0)
		r = digest_index_add(ix, digest, loc);
	if (r < 0)
		return r;
	*ret = loc;
	*ret_new = true;
	return 0;
}

int blob_files_close(struct blob_files *f)
{
	int r = 0;
	if (fsync(f->data_fd) < 0 || fsync(f->idx_fd) < 0)
		r = -errno;
	close(f->data_fd);
	close(f->idx_fd);
	f->data_fd = f->idx_fd = -1;
	return r;
}

static int local_put_chunk(struct blobstore *bs, uint32_t blob, const uint8_t *digest,
			   const void *data, uint32_t len, struct blob_loc *ret, bool *ret_new)
{
	struct local_store *s = (struct local_store *)bs;
	struct open_blob *b = find_open(s, blob);
	return blob_files_put(b ? &b->f : NULL, &s->index, blob, digest, data, len, ret, ret_new);
}

static int local_lookup(struct blobstore *bs, const uint8_t *digest, struct blob_loc *ret)
{
	return digest_index_lookup(&((struct local_store *)bs)->index, digest, ret);
}

static int local_end_blob(struct blobstore *bs, uint32_t blob)
{
	struct local_store *s = (struct local_store *)bs;
	struct open_blob *b = find_open(s, blob);
	if (!b)
		return -EBADF;
	int r = blob_files_close(&b->f);
	*b = s->open[--s->n_open];
	return r;
}

static int local_blob_path(struct blobstore *bs, uint32_t blob, char *buf, size_t cap)
{
	struct local_store *s = (struct local_store *)bs;
	if (blob >= s->next_id)
		return -ENOENT;
	return blob_file(s, blob, "data", buf, cap);
}

static void local_free(struct blobstore *bs)
{
	struct local_store *s = (struct local_store *)bs;
	for (size_t i = 0; i < s->n_open; i++) {
		close(s->open[i].f.data_fd);
		close(s->open[i].f.idx_fd);
	}
	free(s->open);
	digest_index_done(&s->index);
	free(s->dir);
	free(s);
}

static const struct blobstore_ops local_ops = {
    .begin_blob = local_begin_blob,
    .put_chunk = local_put_chunk,
    .lookup = local_lookup,
    .end_blob = local_end_blob,
    .blob_path = local_blob_path,
    .free = local_free,
};

int blobstore_local_open(const char *dir, struct blobstore **ret)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	struct local_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &local_ops;
	s->dir = strdup(dir);
	int r = s->dir ? scan_dir(s) : -ENOMEM;
	if (r < 0) {
		local_free(&s->base);
		return r;
	}
	*ret = &s->base;
	return 0;
}
