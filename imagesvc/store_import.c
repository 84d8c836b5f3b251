/* store_import.c — converting an image into the store and publishing it.
 *
 * img_store_import() holds the store lock for the whole import:
 *   1. garbage-collects (clears tmp/ debris and unreferenced blobs), so blob
 *      ids can be allocated past the highest one present;
 *   2. loads every published digest table into the dedup index;
 *   3. applies the layers into a tree; new chunks go to staged blobs under
 *      tmp/ID/ (a blobstore implementation over the staging directory that
 *      deduplicates against the published index and the blobs of this import);
 *   4. writes the EROFS metadata image, the record and copies of the manifest
 *      and config into tmp/ID/image/;
 *   5. publishes: referenced new blobs are marked (xattr pointing at their
 *      table, mode 01444) and renamed into blobs/, then the image directory
 *      is renamed to images/HEX, then the ref is written (tmp + rename).
 * Any failure before step 5 removes tmp/ID, so nothing new is visible. */
#include "imagesvc/store-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "imagesvc/digest_index.h"
#include "imagesvc/erofs_writer.h"
#include "imagesvc/istream.h"
#include "imagesvc/tar.h"
#include "imagesvc/tree.h"

#define IMPORT_MAX_LAYER_BYTES (64ull << 30) /* expanded size of one layer */

struct staged_blob {
	uint32_t id;
	struct blob_files f;
};

struct import_bs {
	struct blobstore base;
	struct img_store *s;
	char dir[PATH_MAX]; /* tmp/ID */
	struct digest_index index;
	uint32_t next_id, first_id;
	struct staged_blob *blobs;
	size_t n_blobs;
	/* The SHA-256 of each published table as verified records name it
	 * (tsha[id], known[id] for id < first_id): only such tables feed the
	 * dedup index, and a new record names them with these digests. */
	uint8_t (*tsha)[32];
	uint8_t *known;
};

/* ---- dedup index: loaded from the published digest tables ---------------- */
struct load_ctx {
	struct import_bs *b;
	uint32_t blob;
	uint8_t sha[32]; /* of the table file (img_blobidx_read) */
};

static int load_rec(void *arg, size_t i, const struct blob_rec *rec)
{
	struct load_ctx *c = arg;
	if (i == 0 && memcmp(c->sha, c->b->tsha[c->blob], 32))
		return -ESTALE; /* not the table its records signed: not trusted */
	return digest_index_add(&c->b->index, rec->digest, (struct blob_loc){c->blob, rec->off});
}

/* Notes the table digests of every verified record (tsha, known). */
static int note_signed_tables(struct import_bs *b)
{
	char p[PATH_MAX];
	int r = img_store_image_path(b->s, "", NULL, p, sizeof(p));
	DIR *d = r < 0 ? NULL : opendir(p);
	b->tsha = calloc(b->first_id + 1, 32);
	b->known = calloc(b->first_id + 1, 1);
	if (!b->tsha || !b->known || !d) {
		if (d)
			closedir(d);
		return r < 0 ? r : d ? -ENOMEM : -errno;
	}
	for (struct dirent *de; (de = readdir(d));) {
		struct img_record rec;
		if (strlen(de->d_name) != 64 || img_store_record(b->s, de->d_name, &rec, NULL) < 0)
			continue; /* unsigned or rewritten: its tables are not trusted */
		for (uint32_t i = 0; i < rec.n_blobs; i++) {
			uint32_t id = rec.blobs[i];
			if (id < b->first_id && !b->known[id]) {
				memcpy(b->tsha[id], rec.tables[i], 32);
				b->known[id] = 1;
			}
		}
		img_record_done(&rec);
	}
	closedir(d);
	return 0;
}

/* Loads every published digest table that a signed record vouches for (the
 * store's digest index); the others are skipped, so a rewritten table can
 * never make an import reference bytes it did not check. */
static int load_index(struct import_bs *b, struct strata_err *e)
{
	int r = note_signed_tables(b);
	if (r < 0)
		return strata_err_set(e, r, "reading the image records: %s", strerror(-r));
	for (uint32_t id = 0; id < b->first_id; id++) {
		char p[PATH_MAX];
		struct load_ctx c = {b, id, {0}};
		if (!b->known[id])
			continue;
		r = img_store_blob_path(b->s, id, "idx", p, sizeof(p));
		if (r == 0)
			r = img_blobidx_read(p, load_rec, &c, c.sha);
		if (r == -ENOENT || r == -ESTALE) {
			b->known[id] = 0;
			continue;
		}
		if (r < 0)
			return strata_err_set(e, r, "digest table %s: %s", p,
					      r == -EBADMSG ? "corrupt" : strerror(-r));
	}
	return 0;
}

/* ---- the staged blob store --------------------------------------------------------- */
static struct staged_blob *find_blob(struct import_bs *b, uint32_t id)
{
	for (size_t i = 0; i < b->n_blobs; i++)
		if (b->blobs[i].id == id)
			return &b->blobs[i];
	return NULL;
}

static int staged_path(struct import_bs *b, uint32_t id, const char *ext, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/%08u.%s", b->dir, id, ext);
	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

static int ib_begin(struct blobstore *bs, uint32_t *ret)
{
	struct import_bs *b = (struct import_bs *)bs;
	char data[PATH_MAX], idx[PATH_MAX];
	struct staged_blob *nb = realloc(b->blobs, (b->n_blobs + 1) * sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	b->blobs = nb;
	uint32_t id = b->next_id;
	int r = staged_path(b, id, "data", data, sizeof(data));
	if (r == 0)
		r = staged_path(b, id, "idx", idx, sizeof(idx));
	if (r == 0)
		r = blob_files_create(data, idx, &b->blobs[b->n_blobs].f);
	if (r < 0)
		return r;
	b->blobs[b->n_blobs++].id = id;
	b->next_id++;
	*ret = id;
	return 0;
}

static int ib_put(struct blobstore *bs, uint32_t blob, const uint8_t *digest, const void *data,
		  uint32_t len, struct blob_loc *ret, bool *ret_new)
{
	struct import_bs *b = (struct import_bs *)bs;
	struct staged_blob *sb = find_blob(b, blob);
	return blob_files_put(sb ? &sb->f : NULL, &b->index, blob, digest, data, len, ret, ret_new);
}

static int ib_lookup(struct blobstore *bs, const uint8_t *digest, struct blob_loc *ret)
{
	return digest_index_lookup(&((struct import_bs *)bs)->index, digest, ret);
}

static int ib_end(struct blobstore *bs, uint32_t blob)
{
	struct staged_blob *sb = find_blob((struct import_bs *)bs, blob);
	if (!sb || sb->f.data_fd < 0)
		return -EBADF;
	return blob_files_close(&sb->f);
}

static int ib_path(struct blobstore *bs, uint32_t blob, char *buf, size_t cap)
{
	struct import_bs *b = (struct import_bs *)bs;
	return blob >= b->first_id ? staged_path(b, blob, "data", buf, cap)
				   : img_store_blob_path(b->s, blob, "data", buf, cap);
}

static void ib_free(struct blobstore *bs)
{
	struct import_bs *b = (struct import_bs *)bs;
	for (size_t i = 0; i < b->n_blobs; i++) {
		if (b->blobs[i].f.data_fd >= 0)
			close(b->blobs[i].f.data_fd);
		if (b->blobs[i].f.idx_fd >= 0)
			close(b->blobs[i].f.idx_fd);
	}
	free(b->blobs);
	free(b->tsha);
	free(b->known);
	digest_index_done(&b->index);
	free(b);
}

static const struct blobstore_ops import_ops = {
    .begin_blob = ib_begin,
    .put_chunk = ib_put,
    .lookup = ib_lookup,
    .end_blob = ib_end,
    .blob_path = ib_path,
    .free = ib_free,
};

/* ---- conversion ---------------------------------------------------------------------- */
static int apply_layer(struct tree *t, struct import_bs *b, const struct img_layer_src *l,
		       unsigned n, struct tree_stats *st, struct strata_err *e)
{
	_cleanup_close_ int fd = open(l->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return strata_err_set(e, -errno, "layer %u (%s): %m", n, l->path);
	struct istream *in = NULL;
	struct tar_reader *tr = NULL;
	uint32_t blob;
	int r = istream_open(img_fd_read, &fd, IMPORT_MAX_LAYER_BYTES, &in);
	if (r == 0)
		r = tar_reader_new(NULL, istream_read_fn, in, &tr);
	if (r == 0) {
		tar_reader_describe_source(tr, istream_error_fn);
		r = blobstore_begin_blob(&b->base, &blob);
	}
	if (r < 0) {
		strata_err_set(e, r, "layer %u (%s): %s", n, l->digest, strerror(-r));
	} else {
		r = tree_apply_layer(t, tr, &b->base, blob, n, st);
		if (r < 0)
			strata_err_set(e, r, "layer %u (%s, %s): %s", n, l->digest,
				       istream_kind_name(istream_kind(in)), tree_error(t));
		int r2 = blobstore_end_blob(&b->base, blob);
		if (r == 0 && r2 < 0)
			r = strata_err_set(e, r2, "layer %u: writing its blob: %s", n,
					   strerror(-r2));
	}
	tar_reader_free(tr);
	istream_free(in);
	return r;
}

static int copy_file(const char *from, const char *to)
{
	_cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char buf[65536];
	if (in < 0 || out < 0)
		return -errno;
	for (ssize_t n; (n = strata_read_all(in, buf, sizeof(buf))) != 0;) {
		if (n < 0)
			return (int)n;
		int r = strata_write_all(out, buf, (size_t)n);
		if (r < 0)
			return r;
	}
	return fsync(out) < 0 ? -errno : 0;
}

/* Copies the document from into dir/name and its SHA-256 into sha. */
static int copy_doc(const char *from, const char *dir, const char *name, uint8_t sha[32])
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int r = copy_file(from, p);
	return r < 0 ? r : img_sha256_file(p, sha, NULL);
}

/* The SHA-256 of each blob's table into rec->tables: a staged table is
 * hashed, a published one has the digest its signed records name
 * (load_index used nothing else). */
static int note_tables(struct import_bs *b, struct img_record *rec)
{
	rec->tables = calloc(rec->n_blobs + 1, 32);
	if (!rec->tables)
		return -ENOMEM;
	for (uint32_t i = 0; i < rec->n_blobs; i++) {
		uint32_t id = rec->blobs[i];
		char p[PATH_MAX];
		int r;
		if (id >= b->first_id) {
			if ((r = staged_path(b, id, "idx", p, sizeof(p))) < 0 ||
			    (r = img_sha256_file(p, rec->tables[i], NULL)) < 0)
				return r;
		} else if (b->known[id]) {
			memcpy(rec->tables[i], b->tsha[id], 32);
		} else {
			return -ESTALE; /* cannot be: dedup used only known tables */
		}
	}
	return 0;
}

/* Writes meta.img, the record and the documents into DIR/image. */
static int write_image_dir(struct import_bs *b, struct tree *t, const struct img_import_req *req,
			   const uint8_t manifest[32], struct img_record *rec,
			   struct img_import_stats *st, struct strata_err *e)
{
	char dir[PATH_MAX], p[PATH_MAX + 32];
	snprintf(dir, sizeof(dir), "%s/image", b->dir);
	if (mkdir(dir, 0755) < 0)
		return strata_err_set(e, -errno, "cannot create %s: %m", dir);
	snprintf(p, sizeof(p), "%s/meta.img", dir);
	_cleanup_close_ int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	struct erofs_image_info info = {0};
	int r = fd < 0 ? -errno : erofs_write_image(t, fd, &info);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r < 0) {
		free(info.blobs);
		return strata_err_set(e, r, "writing the EROFS metadata image: %s", strerror(-r));
	}
	memcpy(rec->manifest, manifest, 32);
	rec->blobs = info.blobs;
	rec->n_blobs = (uint32_t)info.n_blobs;
	rec->meta_size = info.size;
	st->meta_size = info.size;
	st->n_blobs = rec->n_blobs;
	if ((r = img_sha256_file(p, rec->meta_sha, NULL)) < 0)
		return strata_err_set(e, r, "hashing %s: %s", p, strerror(-r));
	if (req->manifest_path &&
	    (r = copy_doc(req->manifest_path, dir, "manifest.json", rec->manifest_doc)) < 0)
		return strata_err_set(e, r, "copying the manifest: %s", strerror(-r));
	if (req->config_path &&
	    (r = copy_doc(req->config_path, dir, "config.json", rec->config_doc)) < 0)
		return strata_err_set(e, r, "copying the config: %s", strerror(-r));
	rec->flags = (req->manifest_path ? IMG_REC_HAS_MANIFEST : 0) |
		     (req->config_path ? IMG_REC_HAS_CONFIG : 0);
	if ((r = note_tables(b, rec)) < 0)
		return strata_err_set(e, r, "hashing the digest tables: %s", strerror(-r));
	snprintf(p, sizeof(p), "%s/image", dir);
	return store_record_write(b->s, rec, p, e);
}

/* Marks a staged blob and renames it (data and table) into blobs/. */
static int publish_blob(struct import_bs *b, uint32_t id)
{
	char from[PATH_MAX], to[PATH_MAX], ifrom[PATH_MAX], ito[PATH_MAX];
	struct stat st;
	int r = staged_path(b, id, "data", from, sizeof(from));
	if (r == 0)
		r = staged_path(b, id, "idx", ifrom, sizeof(ifrom));
	if (r == 0)
		r = img_store_blob_path(b->s, id, "data", to, sizeof(to));
	if (r == 0)
		r = img_store_blob_path(b->s, id, "idx", ito, sizeof(ito));
	if (r < 0)
		return r;
	if (stat(ifrom, &st) < 0)
		return -errno;
	uint8_t x[BLOB_XATTR_SIZE];
	blob_xattr_encode((uint64_t)st.st_ino, x);
	if (setxattr(from, BLOB_XATTR_NAME, x, sizeof(x), 0) < 0 && errno != ENOTSUP)
		return -errno;
	if (chmod(from, 01444) < 0 || chmod(ifrom, 0444) < 0)
		return -errno;
	if (rename(ifrom, ito) < 0 || rename(from, to) < 0)
		return -errno;
	return 0;
}

static bool is_new_blob(struct import_bs *b, uint32_t id)
{
	return id >= b->first_id && id < b->next_id;
}

static int publish(struct import_bs *b, const struct img_record *rec, const char *hex,
		   const char *name, struct img_import_stats *st, struct strata_err *e)
{
	char from[PATH_MAX], to[PATH_MAX];
	int r = 0;
	for (uint32_t i = 0; r == 0 && i < rec->n_blobs; i++)
		if (is_new_blob(b, rec->blobs[i])) {
			r = publish_blob(b, rec->blobs[i]);
			st->blobs_new++;
		}
	if (r < 0)
		return strata_err_set(e, r, "publishing blobs: %s", strerror(-r));
	snprintf(from, sizeof(from), "%s/image", b->dir);
	if ((r = img_store_image_path(b->s, hex, NULL, to, sizeof(to))) < 0 || rename(from, to) < 0)
		return strata_err_set(e, r < 0 ? r : -errno, "publishing image %.12s: %s", hex,
				      strerror(r < 0 ? -r : errno));
	if (name && (r = img_store_set_ref(b->s, name, hex)) < 0)
		return strata_err_set(e, r, "writing the name '%s': %s", name, strerror(-r));
	return 0;
}

static int convert(struct import_bs *b, const struct img_import_req *req, const uint8_t man[32],
		   const char *hex, struct img_import_stats *st, struct strata_err *e)
{
	struct tree *t = NULL;
	struct tree_stats ts = {0};
	struct img_record rec = {.created = store_now_s(), .n_layers = (uint32_t)req->n_layers};
	int r = load_index(b, e);
	if (r == 0 && (r = tree_new(&t)) < 0)
		strata_err_set(e, r, "out of memory");
	rec.layers = calloc(req->n_layers + 1, 32);
	if (r == 0 && !rec.layers)
		r = strata_err_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; r == 0 && i < req->n_layers; i++) {
		if (img_digest_parse(req->layers[i].digest, rec.layers[i]) < 0)
			r = strata_err_set(e, -EINVAL, "bad layer digest '%s'",
					   req->layers[i].digest);
		else
			r = apply_layer(t, b, &req->layers[i], (unsigned)i, &ts, e);
	}
	rec.bytes = ts.bytes;
	rec.chunks = ts.chunks;
	rec.chunks_new = ts.chunks_new;
	*st = (struct img_import_stats){.entries = ts.entries,
					.files = ts.files,
					.bytes = ts.bytes,
					.chunks = ts.chunks,
					.chunks_new = ts.chunks_new,
					.chunks_dedup = ts.chunks_dedup};
	if (r == 0)
		r = write_image_dir(b, t, req, man, &rec, st, e);
	tree_free(t);
	if (r == 0)
		r = publish(b, &rec, hex, req->name, st, e);
	img_record_done(&rec);
	return r;
}

/* Whether image hex is stored as signed: its record verifies and each of
 * its digest tables has the SHA-256 the record names. */
static bool stored_intact(struct img_store *s, const char *hex)
{
	struct img_record rec = {0};
	bool ok = img_store_record(s, hex, &rec, NULL) == 0;
	for (uint32_t i = 0; ok && i < rec.n_blobs; i++) {
		char p[PATH_MAX];
		uint8_t sha[32];
		ok = img_store_blob_path(s, rec.blobs[i], "idx", p, sizeof(p)) == 0 &&
		     img_sha256_file(p, sha, NULL) == 0 && !memcmp(sha, rec.tables[i], 32);
	}
	img_record_done(&rec);
	return ok;
}

/* Removes the image directory of hex (atomically: renamed away first) and
 * collects the blobs nothing else lists. */
static int drop_image_locked(struct img_store *s, const char *hex)
{
	char p[PATH_MAX], dead[PATH_MAX + 80];
	int r = img_store_image_path(s, hex, NULL, p, sizeof(p));
	if (r < 0)
		return r;
	snprintf(dead, sizeof(dead), "%s/tmp/damaged-%d-%s", img_store_root(s), (int)getpid(), hex);
	if (rename(p, dead) < 0)
		return -errno;
	store_rm_rf(dead);
	r = store_gc_locked(s);
	return r < 0 ? r : 0;
}

static int import_locked(struct img_store *s, const struct img_import_req *req,
			 const uint8_t man[32], const char *hex, struct img_import_stats *st,
			 struct strata_err *e)
{
	char p[PATH_MAX];
	int r = store_gc_locked(s);
	if (r < 0)
		return strata_err_set(e, r, "cleaning the store: %s", strerror(-r));
	if (img_store_image_path(s, hex, "image", p, sizeof(p)) == 0 && access(p, F_OK) == 0) {
		if (stored_intact(s, hex)) {
			st->existed = true;
			r = req->name ? img_store_set_ref(s, req->name, hex) : 0;
			return r < 0 ? strata_err_set(e, r, "writing the name: %s", strerror(-r))
				     : 0;
		}
		/* Unsigned, rewritten, or a table changed under it: converted
		 * anew, its blobs collected unless another image lists them. */
		if ((r = drop_image_locked(s, hex)) < 0)
			return strata_err_set(e, r, "replacing the damaged image %.12s: %s", hex,
					      strerror(-r));
	}
	struct import_bs *b = calloc(1, sizeof(*b));
	if (!b)
		return strata_err_set(e, -ENOMEM, "out of memory");
	b->base.ops = &import_ops;
	b->s = s;
	b->first_id = b->next_id = store_max_blob(s);
	snprintf(b->dir, sizeof(b->dir), "%s/tmp/import-%d-%s", img_store_root(s), (int)getpid(),
		 hex);
	if (mkdir(b->dir, 0755) < 0)
		r = strata_err_set(e, -errno, "cannot create %s: %m", b->dir);
	if (r == 0)
		r = convert(b, req, man, hex, st, e);
	store_rm_rf(b->dir); /* debris: unpublished blobs, or nothing */
	ib_free(&b->base);
	return r;
}

int img_store_import(struct img_store *s, const struct img_import_req *req,
		     struct img_import_stats *ret, struct strata_err *e)
{
	uint8_t man[32];
	char hex[65], file[NAME_MAX + 1];
	struct img_import_stats st = {0};
	if (img_digest_parse(req->manifest_digest, man) < 0)
		return strata_err_set(e, -EINVAL, "bad manifest digest '%s'", req->manifest_digest);
	if (req->n_layers > IMG_MAX_LAYERS)
		return strata_err_set(e, -E2BIG, "%zu layers (at most %d)", req->n_layers,
				      IMG_MAX_LAYERS);
	if (req->name && store_ref_file(req->name, file, sizeof(file)) < 0)
		return strata_err_set(e, -EINVAL, "invalid image name '%s'", req->name);
	img_digest_hex(man, hex);
	int r = store_need_key(s, e); /* nothing is converted that cannot be signed */
	if (r < 0)
		return r;
	r = store_lock(s);
	if (r < 0)
		return strata_err_set(e, r, "cannot lock the store: %s", strerror(-r));
	r = import_locked(s, req, man, hex, &st, e);
	store_unlock(s);
	if (r == 0 && ret)
		*ret = st;
	return r;
}
