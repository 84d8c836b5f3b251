/* resign.c — `strata image resign`: upgrading a store written before image
 * signatures (format 1 records, unsigned refs) to signed ones (store.h,
 * image_auth.h).
 *
 * Under the store lock, every image whose record is format 1 is checked
 * before it is signed: the record's manifest digest is its directory's,
 * meta.img has the SHA-256 the record names, every digest table decodes
 * and every chunk of every blob has the SHA-256 its table names (a blob
 * shared by several images is read once). The record is then rewritten as
 * format 2 with the SHA-256 of each table, of manifest.json and of
 * config.json, signed. Then every unsigned ref that names a signed image is
 * signed.
 *
 * What is signed already (a format 2 record, a ref with a MAC) is left as
 * it is, and one whose signature does not verify is refused, never
 * re-signed: resign upgrades old artifacts, it does not bless rewritten
 * ones. It cannot tell whether an unsigned ref was rewritten before the
 * upgrade (nothing recorded what it was): on a store you do not trust,
 * import the images again instead. */
#include "imagesvc/store-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "fs/cleanup.h"

struct resign {
	struct img_store *s;
	img_resign_report_fn report;
	void *ctx;
	struct img_resign_stats st;
	uint8_t *checked; /* blob ids whose chunks were verified */
	uint32_t max_blob;
};

struct chunk_ctx {
	int fd;
	uint8_t *buf;
	uint32_t bad_at; /* index of the first bad chunk + 1 */
};

static int check_chunk(void *arg, size_t i, const struct blob_rec *rec)
{
	struct chunk_ctx *c = arg;
	uint8_t sha[32];
	ssize_t n = pread(c->fd, c->buf, rec->len, (off_t)rec->off);
	if (n < 0)
		return -errno;
	if ((size_t)n != rec->len)
		return -EBADMSG;
	SHA256(c->buf, rec->len, sha);
	if (memcmp(sha, rec->digest, 32)) {
		c->bad_at = (uint32_t)i + 1;
		return -EBADMSG;
	}
	return 0;
}

static int no_rec(void *arg, size_t i, const struct blob_rec *rec)
{
	return 0;
}

/* Verifies every chunk of blob id against its table; its SHA-256 into sha. */
static int check_blob(struct resign *x, uint32_t id, uint8_t sha[32], struct strata_err *e)
{
	char data[PATH_MAX], idx[PATH_MAX];
	int r = img_store_blob_path(x->s, id, "data", data, sizeof(data));
	if (r == 0)
		r = img_store_blob_path(x->s, id, "idx", idx, sizeof(idx));
	if (r < 0)
		return strata_err_set(e, r, "blob %08u: path too long", id);
	if (id < x->max_blob && x->checked[id]) /* its chunks were read already */
		return img_blobidx_read(idx, no_rec, NULL, sha) == 0 ? 0 : -EBADMSG;
	_cleanup_close_ int fd = open(data, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = malloc(BLOB_CHUNK_SIZE);
	if (fd < 0 || !buf)
		return strata_err_set(e, fd < 0 ? -errno : -ENOMEM, "blob %08u: %s: %m", id, data);
	struct chunk_ctx c = {fd, buf, 0};
	r = img_blobidx_read(idx, check_chunk, &c, sha);
	if (r < 0 && c.bad_at)
		return strata_err_set(e, r,
				      "blob %08u: chunk %u does not have the SHA-256 its digest "
				      "table names",
				      id, c.bad_at - 1);
	if (r < 0)
		return strata_err_set(e, r, "blob %08u: digest table %s: %s", id, idx,
				      r == -EBADMSG ? "corrupt" : strerror(-r));
	if (id < x->max_blob)
		x->checked[id] = 1;
	return 0;
}

/* The SHA-256 of images/HEX/name into sha, and *has: whether it exists. */
static int hash_doc(struct img_store *s, const char *hex, const char *name, uint8_t sha[32],
		    bool *has)
{
	char p[PATH_MAX];
	int r = img_store_image_path(s, hex, name, p, sizeof(p));
	if (r == 0)
		r = img_sha256_file(p, sha, NULL);
	*has = r == 0;
	return r == -ENOENT ? 0 : r;
}

/* Checks the content of the format 1 record rec of hex and signs it anew. */
static int upgrade(struct resign *x, const char *hex, struct img_record *rec, struct strata_err *e)
{
	char mine[65], p[PATH_MAX];
	uint8_t sha[32];
	bool has_m, has_c;
	img_digest_hex(rec->manifest, mine);
	if (strcmp(mine, hex))
		return strata_err_set(e, -EBADMSG, "its record names another image (%.12s)", mine);
	int r = img_store_image_path(x->s, hex, "meta.img", p, sizeof(p));
	if (r == 0)
		r = img_sha256_file(p, sha, NULL);
	if (r < 0 || memcmp(sha, rec->meta_sha, 32))
		return strata_err_set(e, r < 0 ? r : -EBADMSG,
				      "meta.img does not match its record (%s)",
				      r < 0 ? strerror(-r) : "SHA-256 differs");
	for (uint32_t i = 0; i < rec->n_blobs; i++)
		if ((r = check_blob(x, rec->blobs[i], rec->tables[i], e)) < 0)
			return r;
	if ((r = hash_doc(x->s, hex, "manifest.json", rec->manifest_doc, &has_m)) < 0 ||
	    (r = hash_doc(x->s, hex, "config.json", rec->config_doc, &has_c)) < 0)
		return strata_err_set(e, r, "hashing its documents: %s", strerror(-r));
	rec->flags = (has_m ? IMG_REC_HAS_MANIFEST : 0) | (has_c ? IMG_REC_HAS_CONFIG : 0);
	if ((r = img_store_image_path(x->s, hex, "image", p, sizeof(p))) < 0)
		return strata_err_set(e, r, "path too long");
	return store_record_write(x->s, rec, p, e);
}

static void refuse(struct resign *x, const char *what, const struct strata_err *e)
{
	x->st.refused++;
	if (x->report)
		x->report(x->ctx, what, e);
}

static void resign_image(struct resign *x, const char *hex)
{
	struct strata_err e = {0};
	struct img_record rec = {0};
	int r = store_record_load(x->s, hex, &rec, NULL, NULL);
	if (r < 0) {
		strata_err_set(&e, r, "unreadable record: %s",
			       r == -EBADMSG ? "corrupt" : strerror(-r));
	} else if (rec.version != 1) {
		struct img_record ok = {0};
		r = img_store_record(x->s, hex, &ok, &e);
		if (r == 0)
			x->st.signed_already++;
		img_record_done(&ok);
	} else if ((r = upgrade(x, hex, &rec, &e)) == 0) {
		x->st.images++;
	}
	img_record_done(&rec);
	if (r < 0)
		refuse(x, hex, &e);
}

/* Signs the ref in file if it is unsigned and names a signed image. */
static int resign_ref(void *arg, const char *file, const char *hex)
{
	struct resign *x = arg;
	struct strata_err e = {0};
	char name[NAME_MAX + 1], ignored[65];
	struct img_record rec;
	store_ref_decode(file, name, sizeof(name));
	int r = store_read_ref(x->s, file, ignored, true);
	if (r == 0) {
		x->st.names_signed_already++;
		return 0;
	}
	if (r != -EKEYEXPIRED) {
		strata_err_set(&e, r, "the name '%s' %s", name,
			       r == -EKEYREJECTED ? "carries a wrong signature (rewritten?)"
						  : strerror(-r));
		refuse(x, name, &e);
		return 0;
	}
	if ((r = img_store_record(x->s, hex, &rec, &e)) < 0) {
		refuse(x, name, &e);
		return 0;
	}
	img_record_done(&rec);
	if ((r = img_store_set_ref(x->s, name, hex)) < 0) {
		strata_err_set(&e, r, "the name '%s': writing it: %s", name, strerror(-r));
		refuse(x, name, &e);
		return 0;
	}
	x->st.names++;
	return 0;
}

static int resign_locked(struct resign *x, struct strata_err *e)
{
	char p[PATH_MAX];
	int r = img_store_image_path(x->s, "", NULL, p, sizeof(p));
	DIR *d = r < 0 ? NULL : opendir(p);
	if (!d)
		return strata_err_set(e, r < 0 ? r : -errno, "cannot read %s: %m", p);
	x->max_blob = store_max_blob(x->s);
	x->checked = calloc(x->max_blob + 1, 1);
	for (struct dirent *de; x->checked && (de = readdir(d));)
		if (strlen(de->d_name) == 64 && strspn(de->d_name, "0123456789abcdef") == 64)
			resign_image(x, de->d_name);
	closedir(d);
	if (!x->checked)
		return strata_err_set(e, -ENOMEM, "out of memory");
	free(x->checked);
	x->checked = NULL;
	return store_for_each_ref(x->s, resign_ref, x);
}

int img_store_resign(struct img_store *s, img_resign_report_fn report, void *ctx,
		     struct img_resign_stats *ret, struct strata_err *e)
{
	struct resign x = {.s = s, .report = report, .ctx = ctx};
	int r = store_need_key(s, e);
	if (r < 0)
		return r;
	if ((r = store_lock(s)) < 0)
		return strata_err_set(e, r, "cannot lock the store: %s", strerror(-r));
	r = resign_locked(&x, e);
	store_unlock(s);
	if (r == 0 && ret)
		*ret = x.st;
	return r;
}
