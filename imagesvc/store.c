/* store.c — the image store on the cluster: layout, image records, names,
 * leases, removal with reference counts and garbage collection. Import
 * (conversion and publication) is in store_import.c. The layout and the
 * invariants are in store.h; every writer holds ROOT/lock (flock, node-local
 * on a FUSE mount, which is what a single-node cluster needs). */
#include "imagesvc/store-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "fs/cleanup.h"
#include "fs/wire.h"

static int path_fmt(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int path_fmt(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

int img_store_blob_path(const struct img_store *s, uint32_t blob, const char *ext, char *buf,
			size_t cap)
{
	return path_fmt(buf, cap, "%s/blobs/%08u.%s", s->root, blob, ext);
}

int img_store_image_path(const struct img_store *s, const char *hex, const char *file, char *buf,
			 size_t cap)
{
	return path_fmt(buf, cap, "%s/images/%s%s%s", s->root, hex, file ? "/" : "",
			file ? file : "");
}

/* Opens the directory ROOT/sub, its path written into p. Returns 0 and the
 * stream in *ret (closedir it), or -errno. */
static int open_sub(const struct img_store *s, const char *sub, char p[PATH_MAX], DIR **ret)
{
	int r = path_fmt(p, PATH_MAX, "%s/%s", s->root, sub);
	if (r < 0)
		return r;
	*ret = opendir(p);
	return *ret ? 0 : -errno;
}

const char *img_store_root(const struct img_store *s)
{
	return s->root;
}

int img_store_open(const char *root, struct img_store **ret)
{
	static const char *const sub[] = {"blobs", "images", "refs", "leases", "tmp"};
	char p[PATH_MAX];
	int r = store_mkdir_p(root);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(sub); i++) {
		if ((r = path_fmt(p, sizeof(p), "%s/%s", root, sub[i])) < 0)
			return r;
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
	}
	struct img_store *s = calloc(1, sizeof(*s));
	if (!s || !(s->root = strdup(root))) {
		free(s);
		return -ENOMEM;
	}
	s->lock_fd = -1;
	/* Without a key the store still lists and collects; what signs or
	 * verifies says why it cannot (store_need_key). */
	s->has_key = img_auth_default(&s->key, &s->key_err) == 0;
	*ret = s;
	return 0;
}

struct img_store *img_store_free(struct img_store *s)
{
	if (s) {
		if (s->lock_fd >= 0)
			close(s->lock_fd);
		OPENSSL_cleanse(&s->key, sizeof(s->key));
		free(s->root);
		free(s);
	}
	return NULL;
}

int store_mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return (mkdir(buf, 0755) < 0 && errno != EEXIST) ? -errno : 0;
}

int store_lock(struct img_store *s)
{
	char p[PATH_MAX];
	int r = path_fmt(p, sizeof(p), "%s/lock", s->root);
	if (r < 0)
		return r;
	if (s->lock_depth++ > 0)
		return 0;
	s->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_EX) < 0) {
		r = -errno;
		if (s->lock_fd >= 0)
			close(s->lock_fd);
		s->lock_fd = -1;
		s->lock_depth = 0;
		return r;
	}
	return 0;
}

void store_unlock(struct img_store *s)
{
	if (s->lock_depth > 0 && --s->lock_depth == 0) {
		close(s->lock_fd);
		s->lock_fd = -1;
	}
}

/* ---- digests ---------------------------------------------------------------- */
static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int img_digest_parse(const char *s, uint8_t out[32])
{
	if (!strncmp(s, "sha256:", 7))
		s += 7;
	if (strlen(s) != 64)
		return -EINVAL;
	for (int i = 0; i < 32; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void img_digest_hex(const uint8_t d[32], char hex[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

int img_sha256_file(const char *path, uint8_t out[32], uint64_t *ret_size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	_cleanup_free_ uint8_t *buf = malloc(1 << 20);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint64_t total = 0;
	int r = (buf && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) ? 0 : -ENOMEM;
	for (ssize_t n; r == 0 && (n = read(fd, buf, 1 << 20)) != 0; total += (uint64_t)n) {
		if (n < 0)
			r = errno == EINTR ? 0 : -errno;
		else
			EVP_DigestUpdate(ctx, buf, (size_t)n);
	}
	if (r == 0)
		EVP_DigestFinal_ex(ctx, out, NULL);
	EVP_MD_CTX_free(ctx);
	if (r == 0 && ret_size)
		*ret_size = total;
	return r;
}

/* ---- digest tables ------------------------------------------------------------ */
int img_blobidx_read(const char *path, int (*fn)(void *ctx, size_t i, const struct blob_rec *rec),
		     void *ctx, uint8_t *ret_sha)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size < BLOB_TABLE_HDR_SIZE ||
	    (st.st_size - BLOB_TABLE_HDR_SIZE) % BLOB_TABLE_REC_SIZE || st.st_size > (256 << 20))
		return -EBADMSG;
	_cleanup_free_ uint8_t *buf = malloc((size_t)st.st_size);
	if (!buf)
		return -ENOMEM;
	if (strata_read_all(fd, buf, (size_t)st.st_size) != st.st_size)
		return -EIO;
	if (ret_sha)
		SHA256(buf, (size_t)st.st_size, ret_sha);
	return blob_table_decode(buf, (size_t)st.st_size, fn, ctx);
}

/* Writes data to path atomically (tmp + fsync + rename). */
int store_write_file(const char *path, const void *data, size_t n)
{
	char tmp[PATH_MAX];
	int r = path_fmt(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	if (r < 0)
		return r;
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = strata_write_all(fd, data, n);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

/* ---- image records ------------------------------------------------------------ */
int store_need_key(struct img_store *s, struct strata_err *e)
{
	if (s->has_key)
		return 0;
	if (e)
		*e = s->key_err;
	return s->key_err.code ? s->key_err.code : -ENOKEY;
}

int store_record_write(struct img_store *s, const struct img_record *rec, const char *path,
		       struct strata_err *e)
{
	int r = store_need_key(s, e);
	if (r < 0)
		return r;
	size_t n = img_record_size(rec);
	_cleanup_free_ uint8_t *buf = malloc(n);
	if (!buf || img_record_encode(rec, &s->key, buf) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	if ((r = store_write_file(path, buf, n)) < 0)
		return strata_err_set(e, r, "writing the image record: %s", strerror(-r));
	return 0;
}

/* The message of a signature that does not verify (r: -EKEYEXPIRED,
 * unsigned; -EKEYREJECTED, wrong) of what ("the name 'x'"). Returns r. */
static int signature_error(struct strata_err *e, int r, const char *what)
{
	if (r == -EKEYEXPIRED)
		return strata_err_set(e, r,
				      "%s is unsigned (from before image signatures): run strata "
				      "image resign",
				      what);
	if (r == -EKEYREJECTED)
		return strata_err_set(e, r,
				      "%s does not carry a valid signature (rewritten, or signed "
				      "with another cluster key); import the image again",
				      what);
	return r == -ENOMEM ? strata_err_set(e, r, "out of memory") : r;
}

int store_record_load(struct img_store *s, const char *hex, struct img_record *ret, uint8_t *buf,
		      size_t *ret_n)
{
	char p[PATH_MAX];
	int r = img_store_image_path(s, hex, "image", p, sizeof(p));
	if (r < 0)
		return r;
	_cleanup_free_ uint8_t *own = buf ? NULL : malloc(IMG_REC_MAX + 1);
	uint8_t *b = buf ? buf : own;
	if (!b)
		return -ENOMEM;
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = strata_read_all(fd, b, IMG_REC_MAX + 1);
	if (n < 0)
		return (int)n;
	if (n > IMG_REC_MAX)
		return -EBADMSG;
	if (ret_n)
		*ret_n = (size_t)n;
	return img_record_decode(b, (size_t)n, ret);
}

int img_store_record(struct img_store *s, const char *hex, struct img_record *ret,
		     struct strata_err *e)
{
	_cleanup_free_ uint8_t *buf = malloc(IMG_REC_MAX + 1);
	struct img_record rec;
	size_t n = 0;
	char mine[65];
	if (!buf)
		return strata_err_set(e, -ENOMEM, "out of memory");
	int r = store_record_load(s, hex, &rec, buf, &n);
	if (r < 0)
		return strata_err_set(e, r, "image %.12s: record: %s", hex,
				      r == -EBADMSG ? "corrupt" : strerror(-r));
	if ((r = store_need_key(s, e)) == 0)
		r = img_record_check_mac(buf, n, &s->key);
	img_digest_hex(rec.manifest, mine);
	if (r == 0 && strcmp(mine, hex))
		r = -EKEYREJECTED; /* a signed record moved to another image's place */
	if (r == 0) {
		*ret = rec;
		return 0;
	}
	img_record_done(&rec);
	char what[48];
	snprintf(what, sizeof(what), "image %.12s: its record", hex);
	return signature_error(e, r, what);
}

ssize_t img_store_read_doc(struct img_store *s, const struct img_record *rec, const char *file,
			   size_t max, char **ret, struct strata_err *e)
{
	bool config = !strcmp(file, "config.json");
	char hex[65], p[PATH_MAX];
	uint8_t sha[32];
	if (!(rec->flags & (config ? IMG_REC_HAS_CONFIG : IMG_REC_HAS_MANIFEST)))
		return strata_err_set(e, -ENOENT, "the image has no %s", file);
	img_digest_hex(rec->manifest, hex);
	int r = img_store_image_path(s, hex, file, p, sizeof(p));
	if (r < 0)
		return strata_err_set(e, r, "path too long");
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ char *buf = fd < 0 ? NULL : malloc(max + 1);
	if (fd < 0 || !buf)
		return strata_err_set(e, fd < 0 ? -errno : -ENOMEM, "image %.12s: %s: %m", hex,
				      file);
	ssize_t n = strata_read_all(fd, buf, max + 1);
	if (n < 0)
		return strata_err_set(e, (int)n, "image %.12s: reading %s: %s", hex, file,
				      strerror((int)-n));
	if ((size_t)n > max)
		return strata_err_set(e, -EFBIG, "image %.12s: %s is larger than %zu bytes", hex,
				      file, max);
	SHA256((const uint8_t *)buf, (size_t)n, sha);
	if (memcmp(sha, config ? rec->config_doc : rec->manifest_doc, 32))
		return strata_err_set(
		    e, -EKEYREJECTED,
		    "image %.12s: %s does not match the SHA-256 its signed record "
		    "names (rewritten?); import the image again",
		    hex, file);
	*ret = buf;
	buf = NULL;
	return n;
}

/* ---- names -------------------------------------------------------------------- */
/* name[:tag] -> escaped file name "name:tag" with '/' -> %2f, '%' -> %25. */
int store_ref_file(const char *name, char *out, size_t cap)
{
	const char *colon = strrchr(name, ':');
	bool has_tag = colon && !strchr(colon, '/');
	size_t o = 0, len = strlen(name);
	if (len == 0 || len > IMG_NAME_MAX)
		return -EINVAL;
	for (const char *p = name; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x21 || c == 0x7f)
			return -EINVAL;
		if (o + 4 >= cap)
			return -ENAMETOOLONG;
		if (c == '/' || c == '%')
			o += (size_t)snprintf(out + o, cap - o, "%%%02x", c);
		else
			out[o++] = (char)c;
	}
	if (!has_tag) {
		if (o + 8 >= cap)
			return -ENAMETOOLONG;
		memcpy(out + o, ":latest", 7), o += 7;
	}
	out[o] = '\0';
	return (out[0] == '.' || (colon == name)) ? -EINVAL : 0;
}

void store_ref_decode(const char *file, char *out, size_t cap)
{
	size_t o = 0;
	for (const char *p = file; *p && o + 1 < cap; p++) {
		int hi, lo;
		if (p[0] == '%' && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			p += 2;
		} else {
			out[o++] = *p;
		}
	}
	out[o] = '\0';
}

#define REF_MAC_PREFIX "hmac-sha256:"

/* The MAC of the ref in file (an escaped name) naming digest d. */
static int ref_mac(struct img_store *s, const char *file, const uint8_t d[32], uint8_t out[32])
{
	char name[NAME_MAX + 1];
	store_ref_decode(file, name, sizeof(name));
	return img_auth_ref_mac(&s->key, name, d, out);
}

/* Reads the ref in file: "sha256:HEX\n" then, when signed,
 * "hmac-sha256:MAC\n". With verify, its MAC is checked: -ENOKEY,
 * -EKEYEXPIRED (unsigned), -EKEYREJECTED (wrong MAC). Else 0 and hex, or
 * -EBADMSG / -errno. */
int store_read_ref(struct img_store *s, const char *file, char hex[65], bool verify)
{
	char p[PATH_MAX], buf[192];
	int r = path_fmt(p, sizeof(p), "%s/refs/%s", s->root, file);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = strata_read_all(fd, buf, sizeof(buf) - 1);
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	uint8_t d[32], mac[32], want[32];
	char *sig = buf + strcspn(buf, "\n");
	if (*sig)
		*sig++ = '\0';
	sig[strcspn(sig, "\n")] = '\0';
	if (img_digest_parse(buf, d) < 0)
		return -EBADMSG;
	if (verify) {
		if ((r = store_need_key(s, NULL)) < 0)
			return r;
		if (strncmp(sig, REF_MAC_PREFIX, strlen(REF_MAC_PREFIX)))
			return *sig ? -EKEYREJECTED : -EKEYEXPIRED;
		if (img_digest_parse(sig + strlen(REF_MAC_PREFIX), mac) < 0)
			return -EKEYREJECTED;
		if ((r = ref_mac(s, file, d, want)) < 0)
			return r;
		if (!img_auth_mac_equal(mac, want))
			return -EKEYREJECTED;
	}
	img_digest_hex(d, hex);
	return 0;
}

static bool image_exists(struct img_store *s, const char *hex)
{
	char p[PATH_MAX];
	return img_store_image_path(s, hex, "image", p, sizeof(p)) == 0 && access(p, F_OK) == 0;
}

/* Looks for a unique image whose hex starts with prefix. */
static int resolve_prefix(struct img_store *s, const char *prefix, char hex[65])
{
	char p[PATH_MAX];
	DIR *d;
	int r = open_sub(s, "images", p, &d), found = 0;
	if (r < 0)
		return r;
	for (struct dirent *de; (de = readdir(d));) {
		if (strlen(de->d_name) == 64 && !strncmp(de->d_name, prefix, strlen(prefix))) {
			found++;
			memcpy(hex, de->d_name, 65);
		}
	}
	closedir(d);
	return found == 1 ? 0 : found ? -EEXIST : -ENOENT;
}

/* img_store_resolve; without verify a name's signature is not checked (rm
 * must be able to remove a rewritten or unsigned name). */
static int resolve_as(struct img_store *s, const char *ref, bool verify, char hex[65],
		      struct strata_err *e)
{
	uint8_t d[32];
	if (img_digest_parse(ref, d) == 0) {
		img_digest_hex(d, hex);
		if (image_exists(s, hex))
			return 0;
		return strata_err_set(e, -ENOENT, "no image with digest %s", ref);
	}
	size_t len = strlen(ref);
	if (len >= 8 && len < 64 && strspn(ref, "0123456789abcdef") == len) {
		int r = resolve_prefix(s, ref, hex);
		if (r == 0 || r == -EEXIST)
			return r == 0 ? 0
				      : strata_err_set(e, r, "digest prefix %s is ambiguous", ref);
	}
	char file[NAME_MAX + 1];
	int r = store_ref_file(ref, file, sizeof(file));
	if (r < 0)
		return strata_err_set(e, r, "invalid image reference '%s'", ref);
	r = store_read_ref(s, file, hex, verify);
	if (r == -ENOENT || (r == 0 && !image_exists(s, hex)))
		return strata_err_set(e, -ENOENT, "no image named '%s' (see strata image ls)", ref);
	if (r == -EKEYEXPIRED || r == -EKEYREJECTED) {
		char what[IMG_NAME_MAX + 16];
		snprintf(what, sizeof(what), "the name '%s'", ref);
		return signature_error(e, r, what);
	}
	if (r == -ENOKEY)
		return store_need_key(s, e);
	return r < 0 ? strata_err_set(e, r, "cannot read ref '%s': %s", ref, strerror(-r)) : 0;
}

int img_store_resolve(struct img_store *s, const char *ref, char hex[65], struct strata_err *e)
{
	return resolve_as(s, ref, true, hex, e);
}

int img_store_set_ref(struct img_store *s, const char *name, const char *hex)
{
	char file[NAME_MAX + 1], p[PATH_MAX], text[192], mac[65];
	uint8_t d[32], m[32];
	int r = store_ref_file(name, file, sizeof(file));
	if (r == 0)
		r = path_fmt(p, sizeof(p), "%s/refs/%s", s->root, file);
	if (r == 0)
		r = img_digest_parse(hex, d);
	if (r == 0)
		r = store_need_key(s, NULL);
	if (r == 0)
		r = ref_mac(s, file, d, m);
	if (r < 0)
		return r;
	img_digest_hex(m, mac);
	snprintf(text, sizeof(text), "sha256:%s\n" REF_MAC_PREFIX "%s\n", hex, mac);
	return store_write_file(p, text, strlen(text));
}

/* Calls fn(ctx, ref file, hex) for every ref. */
int store_for_each_ref(struct img_store *s, int (*fn)(void *, const char *, const char *),
		       void *ctx)
{
	char p[PATH_MAX], hex[65];
	DIR *d;
	int r = open_sub(s, "refs", p, &d);
	if (r < 0)
		return r;
	for (struct dirent *de; r >= 0 && (de = readdir(d));) {
		if (de->d_name[0] == '.' || strstr(de->d_name, ".tmp."))
			continue;
		/* As stored (a name counts, and lists, signed or not: only
		 * resolving trusts it). */
		if (store_read_ref(s, de->d_name, hex, false) == 0)
			r = fn(ctx, de->d_name, hex);
	}
	closedir(d);
	return r < 0 ? r : 0;
}

struct list_ctx {
	int (*fn)(void *, const char *, const char *);
	void *ctx;
	const char *want; /* for names_of / unnamed checks */
	char *buf;
	size_t cap;
	int hits;
};

static int list_ref(void *arg, const char *file, const char *hex)
{
	struct list_ctx *c = arg;
	char name[NAME_MAX + 1];
	store_ref_decode(file, name, sizeof(name));
	return c->fn(c->ctx, name, hex);
}

static int count_ref(void *arg, const char *file, const char *hex)
{
	struct list_ctx *c = arg;
	if (strcmp(hex, c->want))
		return 0;
	if (c->buf) {
		char name[NAME_MAX + 1];
		size_t o = strlen(c->buf);
		store_ref_decode(file, name, sizeof(name));
		snprintf(c->buf + o, c->cap - o, "%s%s", o ? ", " : "", name);
	}
	c->hits++;
	return 0;
}

void img_store_names_of(struct img_store *s, const char *hex, char *buf, size_t cap)
{
	struct list_ctx c = {.want = hex, .buf = buf, .cap = cap};
	buf[0] = '\0';
	store_for_each_ref(s, count_ref, &c);
}

static int refs_to(struct img_store *s, const char *hex)
{
	struct list_ctx c = {.want = hex};
	int r = store_for_each_ref(s, count_ref, &c);
	return r < 0 ? r : c.hits;
}

int img_store_list(struct img_store *s, int (*fn)(void *ctx, const char *name, const char *hex),
		   void *ctx)
{
	struct list_ctx c = {.fn = fn, .ctx = ctx};
	int r = store_for_each_ref(s, list_ref, &c);
	char p[PATH_MAX];
	DIR *d;
	if (r < 0 || (r = open_sub(s, "images", p, &d)) < 0)
		return r;
	for (struct dirent *de; r >= 0 && (de = readdir(d));)
		if (strlen(de->d_name) == 64 && refs_to(s, de->d_name) == 0)
			r = fn(ctx, NULL, de->d_name);
	closedir(d);
	return r < 0 ? r : 0;
}

/* ---- leases ---------------------------------------------------------------------- */
int img_store_lease(struct img_store *s, const char *hex, const char *node, bool take)
{
	char p[PATH_MAX];
	int r = path_fmt(p, sizeof(p), "%s/leases/%s@%s", s->root, node, hex);
	if (r < 0)
		return r;
	if (!take)
		return (unlink(p) < 0 && errno != ENOENT) ? -errno : 0;
	return store_write_file(p, node, strlen(node));
}

int img_store_leases(struct img_store *s, const char *hex, char *node, size_t cap)
{
	char p[PATH_MAX];
	DIR *d;
	int r = open_sub(s, "leases", p, &d), n = 0;
	if (r < 0)
		return r;
	for (struct dirent *de; (de = readdir(d));) {
		const char *at = strrchr(de->d_name, '@');
		if (!at || strcmp(at + 1, hex))
			continue;
		if (n++ == 0 && node)
			snprintf(node, cap, "%.*s", (int)(at - de->d_name), de->d_name);
	}
	closedir(d);
	return n;
}

/* ---- removal ------------------------------------------------------------------------ */
int store_rm_rf(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode)) {
		DIR *d = opendir(path);
		if (!d)
			return -errno;
		for (struct dirent *de; (de = readdir(d));) {
			char p[PATH_MAX];
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			if (path_fmt(p, sizeof(p), "%s/%s", path, de->d_name) == 0)
				store_rm_rf(p);
		}
		closedir(d);
		return rmdir(path) < 0 ? -errno : 0;
	}
	return unlink(path) < 0 ? -errno : 0;
}

/* Marks in used[] every blob some image record lists. */
static int mark_used(struct img_store *s, uint8_t *used, uint32_t max)
{
	char p[PATH_MAX];
	DIR *d;
	int r = open_sub(s, "images", p, &d);
	if (r < 0)
		return r;
	for (struct dirent *de; r == 0 && (de = readdir(d));) {
		struct img_record rec;
		if (strlen(de->d_name) != 64)
			continue;
		/* Not verified: the blobs of any record, signed or not, are kept. */
		int k = store_record_load(s, de->d_name, &rec, NULL, NULL);
		if (k < 0) { /* an unreadable record keeps everything: never guess */
			r = k == -ENOENT ? 0 : k;
			continue;
		}
		for (uint32_t i = 0; i < rec.n_blobs; i++)
			if (rec.blobs[i] < max)
				used[rec.blobs[i]] = 1;
		img_record_done(&rec);
	}
	closedir(d);
	return r;
}

static int clear_tmp(struct img_store *s)
{
	char p[PATH_MAX];
	DIR *d;
	int r = open_sub(s, "tmp", p, &d);
	if (r < 0)
		return r;
	for (struct dirent *de; (de = readdir(d));) {
		char q[PATH_MAX];
		if (de->d_name[0] != '.' && path_fmt(q, sizeof(q), "%s/%s", p, de->d_name) == 0)
			store_rm_rf(q);
	}
	closedir(d);
	return 0;
}

uint32_t store_max_blob(struct img_store *s)
{
	char p[PATH_MAX];
	uint32_t max = 0;
	DIR *d;
	if (open_sub(s, "blobs", p, &d) < 0)
		return 0;
	for (struct dirent *de; (de = readdir(d));) {
		unsigned id;
		if (sscanf(de->d_name, "%8u.", &id) == 1 && id + 1 > max)
			max = id + 1;
	}
	closedir(d);
	return max;
}

int store_gc_locked(struct img_store *s)
{
	uint32_t max = store_max_blob(s);
	_cleanup_free_ uint8_t *used = calloc(max + 1, 1);
	int r = used ? mark_used(s, used, max) : -ENOMEM, removed = 0;
	clear_tmp(s);
	for (uint32_t b = 0; r == 0 && b < max; b++) {
		char p[PATH_MAX];
		if (used[b] || img_store_blob_path(s, b, "data", p, sizeof(p)) < 0)
			continue;
		bool had = access(p, F_OK) == 0;
		unlink(p);
		if (img_store_blob_path(s, b, "idx", p, sizeof(p)) == 0)
			unlink(p);
		removed += had;
	}
	return r < 0 ? r : removed;
}

int img_store_gc(struct img_store *s)
{
	int r = store_lock(s);
	if (r < 0)
		return r;
	r = store_gc_locked(s);
	store_unlock(s);
	return r;
}

struct drop_ctx {
	struct img_store *s;
	const char *hex;
};

static int drop_ref(void *arg, const char *file, const char *hex)
{
	struct drop_ctx *c = arg;
	char p[PATH_MAX];
	if (!strcmp(hex, c->hex) && path_fmt(p, sizeof(p), "%s/refs/%s", c->s->root, file) == 0)
		unlink(p);
	return 0;
}

static int rm_image_locked(struct img_store *s, const char *hex, bool force, struct strata_err *e)
{
	char node[256] = "", p[PATH_MAX];
	int n = img_store_leases(s, hex, node, sizeof(node));
	if (n > 0 && !force)
		return strata_err_set(e, -EBUSY,
				      "image %.12s is mounted on %s (strata image umount first)",
				      hex, node);
	int r = img_store_image_path(s, hex, NULL, p, sizeof(p));
	if (r < 0)
		return strata_err_set(e, r, "path too long");
	char dead[PATH_MAX];
	/* Rename first, so that the record vanishes atomically. */
	if (path_fmt(dead, sizeof(dead), "%s/tmp/rm-%s", s->root, hex) == 0 && rename(p, dead) == 0)
		store_rm_rf(dead);
	else
		store_rm_rf(p);
	r = store_gc_locked(s);
	return r < 0 ? strata_err_set(e, r, "garbage collection failed: %s", strerror(-r)) : 0;
}

int img_store_rm(struct img_store *s, const char *ref, bool force, struct strata_err *e)
{
	char hex[65], file[NAME_MAX + 1], p[PATH_MAX];
	int r = store_lock(s);
	if (r < 0)
		return strata_err_set(e, r, "cannot lock the store: %s", strerror(-r));
	r = resolve_as(s, ref, false, hex, e);
	bool by_name = r == 0 && img_digest_parse(ref, (uint8_t[32]){0}) < 0 &&
		       store_ref_file(ref, file, sizeof(file)) == 0 &&
		       path_fmt(p, sizeof(p), "%s/refs/%s", s->root, file) == 0 &&
		       access(p, F_OK) == 0;
	if (r == 0 && by_name) {
		int left = refs_to(s, hex);
		if (left == 1 && !force && img_store_leases(s, hex, NULL, 0) > 0)
			r = rm_image_locked(s, hex, false, e); /* refuses: mounted */
		else if (unlink(p) < 0)
			r = strata_err_set(e, -errno, "cannot remove ref '%s': %m", ref);
		else if (left == 1)
			r = rm_image_locked(s, hex, force, e);
	} else if (r == 0) {
		int left = refs_to(s, hex);
		if (left > 0 && !force)
			r = strata_err_set(
			    e, -EBUSY,
			    "image %.12s still has %d name(s); remove them or use --force", hex,
			    left);
		else
			r = rm_image_locked(s, hex, force, e);
		if (r == 0 && left > 0) /* forced: drop the names too */
			store_for_each_ref(s, drop_ref, &(struct drop_ctx){s, hex});
	}
	store_unlock(s);
	return r;
}

/* Node name for leases: the host name. */
void store_node_name(char *buf, size_t cap)
{
	if (gethostname(buf, cap) < 0 || !buf[0])
		snprintf(buf, cap, "localhost");
	buf[cap - 1] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '/' || *p == '@')
			*p = '_';
}

uint64_t store_now_s(void)
{
	return (uint64_t)time(NULL);
}
