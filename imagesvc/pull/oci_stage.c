/* oci_stage.c — the staged image directory (oci.h): writing it (built in a
 * temporary sibling "STAGE.tmp-XXXXXX", renamed into place only when
 * complete), loading it back (oci_stage_load, optionally re-verifying every
 * layer), and the SHA-256 verification every blob passes before it is used
 * (digest checks, hashing copies, bounded reads of files below a directory
 * with O_NOFOLLOW). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fs/cleanup.h"
#include "fs/fdio.h"
#include "imagesvc/pull/oci-internal.h"

/* --- digests ----------------------------------------------------------- */

int oci_digest_check(const char *d)
{
	if (strncmp(d, "sha256:", 7) != 0)
		return strchr(d, ':') ? -EOPNOTSUPP : -EINVAL;
	size_t i = 0;
	for (i = 7; d[i]; i++)
		if (!((d[i] >= '0' && d[i] <= '9') || (d[i] >= 'a' && d[i] <= 'f')))
			return -EINVAL;
	return i == 7 + 64 ? 0 : -EINVAL;
}

static void hex_digest(const unsigned char *md, char out[OCI_DIGEST_MAX])
{
	static const char hx[] = "0123456789abcdef";
	memcpy(out, "sha256:", 7);
	for (int i = 0; i < 32; i++) {
		out[7 + 2 * i] = hx[md[i] >> 4];
		out[8 + 2 * i] = hx[md[i] & 15];
	}
	out[7 + 64] = 0;
}

void oci_sha256(const void *buf, size_t len, char out[OCI_DIGEST_MAX])
{
	unsigned char md[32];
	EVP_Digest(buf, len, md, NULL, EVP_sha256(), NULL);
	hex_digest(md, out);
}

int oci_hash_init(struct oci_hash *h)
{
	h->ctx = EVP_MD_CTX_new();
	if (!h->ctx || !EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL)) {
		oci_hash_done(h);
		return -ENOMEM;
	}
	return 0;
}

void oci_hash_update(struct oci_hash *h, const void *buf, size_t len)
{
	EVP_DigestUpdate(h->ctx, buf, len);
}

void oci_hash_final(struct oci_hash *h, char out[OCI_DIGEST_MAX])
{
	unsigned char md[32];
	unsigned n = 0;
	EVP_DigestFinal_ex(h->ctx, md, &n);
	hex_digest(md, out);
	EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL);
}

void oci_hash_done(struct oci_hash *h)
{
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}

int oci_verify_bytes(const char *what, const void *buf, size_t len, const char *digest,
		     uint64_t size, struct strata_err *e)
{
	if (len != size)
		return strata_err_set(e, -EBADMSG, "%s: %zu bytes, but its descriptor says %llu",
				      what, len, (unsigned long long)size);
	char got[OCI_DIGEST_MAX];
	oci_sha256(buf, len, got);
	if (strcmp(got, digest) != 0)
		return strata_err_set(e, -EBADMSG, "%s: content has digest %s, expected %s", what,
				      got, digest);
	return 0;
}

int oci_copy_verified(int src_fd, int dst_fd, const char *what, const char *digest, uint64_t size,
		      struct strata_err *e)
{
	enum { BUF = 256 * 1024 };
	_cleanup_free_ char *buf = malloc(BUF);
	struct oci_hash h = {0};
	if (!buf || oci_hash_init(&h) < 0)
		return strata_err_set(e, -ENOMEM, "%s: out of memory", what);
	uint64_t total = 0;
	int r = 0;
	for (;;) {
		ssize_t n = read(src_fd, buf, BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = strata_err_set(e, -errno, "%s: read: %s", what, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		if (total > size) {
			r = strata_err_set(e, -EBADMSG,
					   "%s: longer than the %llu bytes its descriptor says",
					   what, (unsigned long long)size);
			break;
		}
		oci_hash_update(&h, buf, (size_t)n);
		r = strata_write_all(dst_fd, buf, (size_t)n);
		if (r < 0) {
			strata_err_set(e, r, "%s: write: %s", what, strerror(-r));
			break;
		}
	}
	char got[OCI_DIGEST_MAX];
	oci_hash_final(&h, got);
	oci_hash_done(&h);
	if (r < 0)
		return r;
	if (total != size)
		return strata_err_set(e, -EBADMSG, "%s: %llu bytes, but its descriptor says %llu",
				      what, (unsigned long long)total, (unsigned long long)size);
	if (strcmp(got, digest) != 0)
		return strata_err_set(e, -EBADMSG, "%s: content has digest %s, expected %s", what,
				      got, digest);
	return 0;
}

int oci_read_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len,
		     struct strata_err *e)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return strata_err_set(e, -errno, "%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0)
		return strata_err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return strata_err_set(e, -EBADMSG, "%s: not a regular file", path);
	if ((uint64_t)st.st_size > max)
		return strata_err_set(e, -EFBIG, "%s: %lld bytes, over the limit of %zu", path,
				      (long long)st.st_size, max);
	_cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return strata_err_set(e, -ENOMEM, "%s: out of memory", path);
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return strata_err_set(e, -errno, "%s: %s", path, strerror(errno));
		if (n == 0)
			break;
		got += (size_t)n;
	}
	buf[got] = 0;
	*ret = TAKE_PTR(buf);
	*ret_len = got;
	return 0;
}

/* --- the stage writer ---------------------------------------------------- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int oci_rm_tree(const char *path)
{
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
		return errno == ENOENT ? 0 : -errno;
	return 0;
}

int oci_stage_begin(const char *final, const char *config, size_t config_len, struct oci_stage *st,
		    struct strata_err *e)
{
	*st = (struct oci_stage){.dirfd = -1};
	struct stat sb;
	if (lstat(final, &sb) == 0)
		return strata_err_set(e, -EEXIST, "%s: the stage directory exists already", final);
	if (asprintf(&st->tmp, "%s.tmp-XXXXXX", final) < 0) {
		st->tmp = NULL;
		return strata_err_set(e, -ENOMEM, "out of memory");
	}
	st->final = strdup(final);
	if (!st->final || !mkdtemp(st->tmp)) {
		int r = st->final ? -errno : -ENOMEM;
		free(st->tmp);
		free(st->final);
		*st = (struct oci_stage){.dirfd = -1};
		return strata_err_set(e, r, "%s: cannot create the stage: %s", final, strerror(-r));
	}
	st->dirfd = open(st->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->dirfd < 0 || fchmod(st->dirfd, 0755) < 0 ||
	    mkdirat(st->dirfd, "layers", 0755) < 0) {
		int r = -errno;
		oci_stage_abort(st);
		return strata_err_set(e, r, "%s: %s", final, strerror(-r));
	}
	int r = oci_stage_write(st, "config.json", config, config_len, e);
	if (r < 0)
		oci_stage_abort(st);
	return r;
}

int oci_stage_write(struct oci_stage *st, const char *name, const void *buf, size_t len,
		    struct strata_err *e)
{
	_cleanup_close_ int fd =
	    openat(st->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return strata_err_set(e, -errno, "stage %s: %s", name, strerror(errno));
	int r = strata_write_all(fd, buf, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r < 0)
		return strata_err_set(e, r, "stage %s: %s", name, strerror(-r));
	return 0;
}

int oci_stage_layer_open(struct oci_stage *st, size_t idx, int *ret_fd, struct strata_err *e)
{
	char name[32];
	snprintf(name, sizeof(name), "layers/%03zu", idx);
	int fd = openat(st->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return strata_err_set(e, -errno, "stage %s: %s", name, strerror(errno));
	*ret_fd = fd;
	return 0;
}

static int sync_layers(struct oci_stage *st)
{
	_cleanup_close_ int dfd = openat(st->dirfd, "layers", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	for (unsigned i = 0;; i++) {
		char name[16];
		snprintf(name, sizeof(name), "%03u", i);
		_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			break;
		if (fsync(fd) < 0)
			return -errno;
	}
	return fsync(dfd) < 0 ? -errno : 0;
}

int oci_stage_commit(struct oci_stage *st, const char *manifest, size_t len, const char *source,
		     struct strata_err *e)
{
	char digest[OCI_DIGEST_MAX + 1];
	oci_sha256(manifest, len, digest);
	strcat(digest, "\n");
	int r = oci_stage_write(st, "manifest.json", manifest, len, e);
	if (r == 0)
		r = oci_stage_write(st, "manifest.digest", digest, strlen(digest), e);
	if (r == 0)
		r = oci_stage_write(st, "source", source, strlen(source), e);
	if (r == 0 && st->name[0]) {
		char line[OCI_SHORT_MAX + 1];
		snprintf(line, sizeof(line), "%s\n", st->name);
		r = oci_stage_write(st, "name", line, strlen(line), e);
	}
	if (r == 0 && (r = sync_layers(st)) < 0)
		strata_err_set(e, r, "stage: sync: %s", strerror(-r));
	if (r == 0 && fsync(st->dirfd) < 0)
		r = strata_err_set(e, -errno, "stage: sync: %s", strerror(errno));
	if (r == 0 && renameat2(AT_FDCWD, st->tmp, AT_FDCWD, st->final, RENAME_NOREPLACE) < 0)
		r = strata_err_set(e, -errno, "%s: cannot move the stage into place: %s", st->final,
				   strerror(errno));
	if (r == 0) {
		free(st->tmp);
		st->tmp = NULL; /* nothing left to remove */
	}
	oci_stage_abort(st);
	return r;
}

void oci_stage_abort(struct oci_stage *st)
{
	if (st->dirfd >= 0)
		close(st->dirfd);
	st->dirfd = -1;
	if (st->tmp)
		oci_rm_tree(st->tmp);
	free(st->tmp);
	free(st->final);
	st->tmp = st->final = NULL;
}

/* --- loading a stage -------------------------------------------------------- */

static int load_layers(struct oci_image *img, const struct oci_manifest *m, bool verify,
		       struct strata_err *e)
{
	img->layers = calloc(m->n_layers ? m->n_layers : 1, sizeof(*img->layers));
	if (!img->layers)
		return strata_err_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_layers; i++) {
		struct oci_layer *l = &img->layers[i];
		img->n_layers++;
		strcpy(l->digest, m->layers[i].digest);
		l->size = m->layers[i].size;
		oci_layer_compression(m->layers[i].media_type, &l->compression);
		l->media_type = strdup(m->layers[i].media_type);
		if (!l->media_type || asprintf(&l->path, "%s/layers/%03zu", img->dir, i) < 0) {
			l->path = NULL;
			return strata_err_set(e, -ENOMEM, "out of memory");
		}
		_cleanup_close_ int fd = open(l->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		struct stat sb;
		if (fd < 0 || fstat(fd, &sb) < 0)
			return strata_err_set(e, -errno, "%s: %s", l->path, strerror(errno));
		if ((uint64_t)sb.st_size != l->size)
			return strata_err_set(e, -EBADMSG, "%s: %lld bytes, the manifest says %llu",
					      l->path, (long long)sb.st_size,
					      (unsigned long long)l->size);
		if (verify) {
			_cleanup_close_ int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
			int r = oci_copy_verified(fd, null, l->path, l->digest, l->size, e);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int load_name(int dfd, struct oci_image *img, struct strata_err *e)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	struct strata_err ignore = {0};
	int r = oci_read_file_at(dfd, "name", OCI_SHORT_MAX, &buf, &len, &ignore);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return strata_err_set(e, r, "name: %s", ignore.msg);
	buf[strcspn(buf, "\n")] = 0;
	img->name = buf[0] ? TAKE_PTR(buf) : NULL;
	return 0;
}

static int stage_load(int dfd, struct oci_image *img, bool verify, struct strata_err *e)
{
	struct oci_limits lim;
	oci_limits_default(&lim);
	_cleanup_free_ char *man = NULL, *dg = NULL, *cfg = NULL;
	size_t man_len = 0, dg_len = 0, cfg_len = 0;
	struct oci_manifest m = {0};
	int r = oci_read_file_at(dfd, "manifest.json", lim.max_manifest, &man, &man_len, e);
	if (r == 0)
		r = oci_read_file_at(dfd, "manifest.digest", 128, &dg, &dg_len, e);
	if (r < 0)
		return r;
	dg[strcspn(dg, "\n")] = 0;
	if (oci_digest_check(dg) < 0)
		return strata_err_set(e, -EBADMSG, "manifest.digest: not a digest");
	r = oci_verify_bytes("manifest.json", man, man_len, dg, man_len, e);
	if (r == 0)
		r = oci_parse_manifest(man, man_len, &lim, &m, e);
	if (r == 0)
		r = oci_read_file_at(dfd, "config.json", lim.max_config, &cfg, &cfg_len, e);
	if (r == 0)
		r = oci_verify_bytes("config.json", cfg, cfg_len, m.config.digest, m.config.size,
				     e);
	if (r == 0)
		r = oci_parse_config(cfg, cfg_len, m.n_layers, &img->config, NULL, e);
	if (r == 0)
		r = load_layers(img, &m, verify, e);
	if (r == 0)
		r = load_name(dfd, img, e);
	if (r == 0) {
		strcpy(img->manifest_digest, dg);
		strcpy(img->config_digest, m.config.digest);
	}
	oci_manifest_done(&m);
	return r;
}

int oci_stage_load(const char *stage_dir, bool verify, struct oci_image **ret, struct strata_err *e)
{
	_cleanup_close_ int dfd = open(stage_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return strata_err_set(e, -errno, "%s: %s", stage_dir, strerror(errno));
	struct oci_image *img = calloc(1, sizeof(*img));
	if (!img || !(img->dir = strdup(stage_dir))) {
		free(img);
		return strata_err_set(e, -ENOMEM, "out of memory");
	}
	int r = stage_load(dfd, img, verify, e);
	if (r < 0) {
		oci_image_free(img);
		return r;
	}
	*ret = img;
	return 0;
}

struct oci_image *oci_image_free(struct oci_image *img)
{
	if (!img)
		return NULL;
	for (size_t i = 0; i < img->n_layers; i++) {
		free(img->layers[i].media_type);
		free(img->layers[i].path);
	}
	free(img->layers);
	oci_config_done(&img->config);
	free(img->name);
	free(img->dir);
	free(img);
	return NULL;
}
