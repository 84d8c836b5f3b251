/* oci.c — OCI documents and the staged image (see oci.h, oci-internal.h).
 *
 * Parses manifests, indexes/manifest lists and image configs with json-c
 * under the size and count limits of struct oci_limits, selects the
 * linux/amd64 image of an index, hashes every blob with SHA-256 before it is
 * used, and writes the staged image directory: built in a temporary sibling
 * ("STAGE.tmp-XXXXXX"), renamed into place only when complete. It also reads
 * an OCI image layout directory (oci-layout, index.json, blobs/sha256/...),
 * where every blob is opened below the layout with O_NOFOLLOW and verified
 * against its descriptor while it is copied into the stage. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fs/cleanup.h"
#include "imagesvc/pull/oci-internal.h"

void oci_limits_default(struct oci_limits *ret)
{
	*ret = (struct oci_limits){
	    .max_manifest = 4u << 20,
	    .max_config = 8u << 20,
	    .max_layers = 256,
	    .max_index_entries = 1024,
	    .max_layer = 32ull << 30,
	    .max_archive_entries = 100000,
	};
}

static const struct oci_limits *limits_or_default(const struct oci_limits *lim,
						  struct oci_limits *buf)
{
	if (lim)
		return lim;
	oci_limits_default(buf);
	return buf;
}

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

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
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
		r = write_all(dst_fd, buf, (size_t)n);
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

/* --- JSON ---------------------------------------------------------------- */

int oci_json_parse(const char *what, const char *buf, size_t len, struct json_object **ret,
		   struct strata_err *e)
{
	if (len > INT_MAX)
		return strata_err_set(e, -EFBIG, "%s: too large", what);
	if (memchr(buf, 0, len))
		return strata_err_set(e, -EBADMSG, "%s: not JSON (NUL byte)", what);
	struct json_tokener *tok = json_tokener_new_ex(OCI_JSON_MAX_DEPTH);
	if (!tok)
		return strata_err_set(e, -ENOMEM, "%s: out of memory", what);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	struct json_object *o = json_tokener_parse_ex(tok, buf, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!o || jerr != json_tokener_success) {
		json_object_put(o);
		return strata_err_set(e, -EBADMSG, "%s: invalid JSON: %s", what,
				      json_tokener_error_desc(jerr));
	}
	while (end < len && strchr(" \t\r\n", buf[end]))
		end++;
	if (end != len || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return strata_err_set(e, -EBADMSG, "%s: not one JSON object", what);
	}
	*ret = o;
	return 0;
}

static int copy_short(char *dst, size_t cap, const char *src, const char *what,
		      struct strata_err *e)
{
	size_t n = strlen(src);
	if (n >= cap)
		return strata_err_set(e, -EBADMSG, "%s is too long (%zu bytes)", what, n);
	memcpy(dst, src, n + 1);
	return 0;
}

static int parse_platform(struct json_object *p, struct oci_desc *d, struct strata_err *e)
{
	if (!json_object_is_type(p, json_type_object))
		return strata_err_set(e, -EBADMSG, "descriptor platform is not an object");
	const char *os = oci_jstr(p, "os"), *arch = oci_jstr(p, "architecture"),
		   *var = oci_jstr(p, "variant");
	d->has_platform = true;
	int r = copy_short(d->os, sizeof(d->os), os ? os : "", "platform os", e);
	if (r == 0)
		r = copy_short(d->arch, sizeof(d->arch), arch ? arch : "", "platform architecture",
			       e);
	if (r == 0)
		r = copy_short(d->variant, sizeof(d->variant), var ? var : "", "platform variant",
			       e);
	return r;
}

static int parse_desc(struct json_object *o, const char *what, struct oci_desc *d,
		      struct strata_err *e)
{
	memset(d, 0, sizeof(*d));
	if (!json_object_is_type(o, json_type_object))
		return strata_err_set(e, -EBADMSG, "%s: descriptor is not an object", what);
	const char *mt = oci_jstr(o, "mediaType"), *dg = oci_jstr(o, "digest");
	struct json_object *sz, *v;
	if (!mt || !dg || !json_object_object_get_ex(o, "size", &sz) ||
	    !json_object_is_type(sz, json_type_int) || json_object_get_int64(sz) < 0)
		return strata_err_set(e, -EBADMSG, "%s: descriptor lacks mediaType, digest or size",
				      what);
	int r = oci_digest_check(dg);
	if (r < 0)
		return strata_err_set(e, r == -EOPNOTSUPP ? r : -EBADMSG,
				      "%s: digest '%.80s' is not sha256:<64 hex>", what, dg);
	d->size = (uint64_t)json_object_get_int64(sz);
	strcpy(d->digest, dg);
	r = copy_short(d->media_type, sizeof(d->media_type), mt, "mediaType", e);
	if (r < 0)
		return r;
	if (json_object_object_get_ex(o, "platform", &v)) {
		r = parse_platform(v, d, e);
		if (r < 0)
			return r;
	}
	if (json_object_object_get_ex(o, "annotations", &v)) {
		const char *ref = oci_jstr(v, "org.opencontainers.image.ref.name");
		const char *name = oci_jstr(v, "io.containerd.image.name");
		if (ref && strlen(ref) < sizeof(d->ref_name))
			strcpy(d->ref_name, ref);
		if (name && strlen(name) < sizeof(d->image_name))
			strcpy(d->image_name, name);
	}
	return 0;
}

int oci_doc_kind(const char *buf, size_t len, const char *content_type, enum oci_doc_kind *ret,
		 struct strata_err *e)
{
	_cleanup_json_ struct json_object *o = NULL;
	int r = oci_json_parse("manifest", buf, len, &o, e);
	if (r < 0)
		return r;
	const char *mt = oci_jstr(o, "mediaType");
	if (!mt || !*mt)
		mt = content_type;
	struct json_object *v;
	if (mt && (!strcmp(mt, OCI_MT_INDEX) || !strcmp(mt, DOCKER_MT_LIST)))
		*ret = OCI_DOC_INDEX;
	else if (mt && (!strcmp(mt, OCI_MT_MANIFEST) || !strcmp(mt, DOCKER_MT_MANIFEST)))
		*ret = OCI_DOC_MANIFEST;
	else if (mt && !strncmp(mt, DOCKER_MT_SCHEMA1, strlen(DOCKER_MT_SCHEMA1)))
		return strata_err_set(e, -EOPNOTSUPP,
				      "Docker schema 1 manifests are not supported");
	else if (json_object_object_get_ex(o, "manifests", &v))
		*ret = OCI_DOC_INDEX;
	else if (json_object_object_get_ex(o, "layers", &v))
		*ret = OCI_DOC_MANIFEST;
	else
		return strata_err_set(e, -EOPNOTSUPP, "unsupported manifest media type '%.100s'",
				      mt ? mt : "(none)");
	return 0;
}

static int check_schema2(struct json_object *o, const char *what, struct strata_err *e)
{
	struct json_object *v;
	if (!json_object_object_get_ex(o, "schemaVersion", &v) ||
	    !json_object_is_type(v, json_type_int) || json_object_get_int64(v) != 2)
		return strata_err_set(e, json_object_get_int64(v) == 1 ? -EOPNOTSUPP : -EBADMSG,
				      "%s: schemaVersion is not 2", what);
	return 0;
}

/* Parses the array member key of o into *ret (n entries, at most max). */
static int parse_desc_array(struct json_object *o, const char *key, size_t max,
			    struct oci_desc **ret, size_t *ret_n, struct strata_err *e)
{
	struct json_object *arr;
	if (!json_object_object_get_ex(o, key, &arr) || !json_object_is_type(arr, json_type_array))
		return strata_err_set(e, -EBADMSG, "'%s' is missing or not an array", key);
	size_t n = json_object_array_length(arr);
	if (n > max)
		return strata_err_set(e, -EFBIG, "%zu %s, over the limit of %zu", n, key, max);
	_cleanup_free_ struct oci_desc *d = calloc(n ? n : 1, sizeof(*d));
	if (!d)
		return strata_err_set(e, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		char what[64];
		snprintf(what, sizeof(what), "%s[%zu]", key, i);
		int r = parse_desc(json_object_array_get_idx(arr, i), what, &d[i], e);
		if (r < 0)
			return r;
	}
	*ret = TAKE_PTR(d);
	*ret_n = n;
	return 0;
}

int oci_parse_index(const char *buf, size_t len, const struct oci_limits *lim,
		    struct oci_desc **ret, size_t *ret_n, struct strata_err *e)
{
	struct oci_limits lb;
	lim = limits_or_default(lim, &lb);
	_cleanup_json_ struct json_object *o = NULL;
	int r = oci_json_parse("index", buf, len, &o, e);
	if (r == 0)
		r = check_schema2(o, "index", e);
	if (r == 0)
		r = parse_desc_array(o, "manifests", lim->max_index_entries, ret, ret_n, e);
	return r;
}

static bool is_wanted_platform(const struct oci_desc *d)
{
	return d->has_platform && !strcmp(d->os, OCI_WANT_OS) && !strcmp(d->arch, OCI_WANT_ARCH);
}

static bool is_manifest_type(const char *mt)
{
	return !strcmp(mt, OCI_MT_MANIFEST) || !strcmp(mt, DOCKER_MT_MANIFEST) ||
	       !strcmp(mt, OCI_MT_INDEX) || !strcmp(mt, DOCKER_MT_LIST);
}

static int no_platform_error(const struct oci_desc *d, size_t n, struct strata_err *e)
{
	char have[512] = "";
	size_t used = 0;
	for (size_t i = 0; i < n && used + 1 < sizeof(have); i++) {
		if (!d[i].has_platform)
			continue;
		int k = snprintf(have + used, sizeof(have) - used, "%s%s/%s%s%s", used ? ", " : "",
				 d[i].os, d[i].arch, d[i].variant[0] ? "/" : "", d[i].variant);
		if (k < 0)
			break;
		used += (size_t)k;
	}
	return strata_err_set(e, -ENOENT, "no %s/%s image in the index (it has: %s)", OCI_WANT_OS,
			      OCI_WANT_ARCH, used ? have : "nothing");
}

int oci_select(const struct oci_desc *d, size_t n, const char *tag, size_t *ret,
	       struct strata_err *e)
{
	if (tag) {
		for (size_t i = 0; i < n; i++) {
			if (strcmp(d[i].ref_name, tag) != 0)
				continue;
			if (d[i].has_platform && !is_wanted_platform(&d[i]))
				continue;
			*ret = i;
			return 0;
		}
		bool any = false;
		for (size_t i = 0; i < n; i++)
			any = any || !strcmp(d[i].ref_name, tag);
		if (any)
			return no_platform_error(d, n, e);
		return strata_err_set(e, -ENOENT, "no image tagged '%s' in the index", tag);
	}
	size_t with_platform = 0, only = SIZE_MAX;
	for (size_t i = 0; i < n; i++) {
		if (!is_manifest_type(d[i].media_type))
			continue; /* attestations, signatures... */
		if (is_wanted_platform(&d[i])) {
			*ret = i;
			return 0;
		}
		with_platform += d[i].has_platform;
		if (!d[i].has_platform)
			only = only == SIZE_MAX ? i : SIZE_MAX - 1;
	}
	if (with_platform == 0 && only < SIZE_MAX - 1) {
		*ret = only;
		return 0;
	}
	if (with_platform == 0 && only == SIZE_MAX - 1)
		return strata_err_set(e, -ENOENT,
				      "the index holds several images; name one by tag");
	return no_platform_error(d, n, e);
}

int oci_parse_manifest(const char *buf, size_t len, const struct oci_limits *lim,
		       struct oci_manifest *ret, struct strata_err *e)
{
	struct oci_limits lb;
	lim = limits_or_default(lim, &lb);
	_cleanup_json_ struct json_object *o = NULL;
	int r = oci_json_parse("manifest", buf, len, &o, e);
	if (r == 0)
		r = check_schema2(o, "manifest", e);
	if (r < 0)
		return r;
	struct oci_manifest m = {0};
	struct json_object *cfg;
	if (!json_object_object_get_ex(o, "config", &cfg))
		return strata_err_set(e, -EBADMSG, "manifest: no config descriptor");
	r = parse_desc(cfg, "manifest config", &m.config, e);
	if (r == 0)
		r = parse_desc_array(o, "layers", lim->max_layers, &m.layers, &m.n_layers, e);
	if (r < 0)
		return r;
	for (size_t i = 0; i < m.n_layers; i++) {
		enum oci_compression c;
		if (oci_layer_compression(m.layers[i].media_type, &c) < 0) {
			strata_err_set(e, -EOPNOTSUPP, "layer %zu: unsupported media type '%s'", i,
				       m.layers[i].media_type);
			oci_manifest_done(&m);
			return -EOPNOTSUPP;
		}
		if (m.layers[i].size > lim->max_layer) {
			strata_err_set(e, -EFBIG, "layer %zu: %llu bytes, over the limit of %llu",
				       i, (unsigned long long)m.layers[i].size,
				       (unsigned long long)lim->max_layer);
			oci_manifest_done(&m);
			return -EFBIG;
		}
	}
	if (m.config.size > lim->max_config) {
		oci_manifest_done(&m);
		return strata_err_set(e, -EFBIG, "config: %llu bytes, over the limit of %zu",
				      (unsigned long long)m.config.size, lim->max_config);
	}
	*ret = m;
	return 0;
}

void oci_manifest_done(struct oci_manifest *m)
{
	free(m->layers);
	m->layers = NULL;
	m->n_layers = 0;
}

int oci_layer_compression(const char *mt, enum oci_compression *ret)
{
	static const struct {
		const char *mt;
		enum oci_compression c;
	} known[] = {
	    {"application/vnd.oci.image.layer.v1.tar", OCI_COMP_NONE},
	    {"application/vnd.oci.image.layer.v1.tar+gzip", OCI_COMP_GZIP},
	    {"application/vnd.oci.image.layer.v1.tar+zstd", OCI_COMP_ZSTD},
	    {"application/vnd.docker.image.rootfs.diff.tar.gzip", OCI_COMP_GZIP},
	    {"application/vnd.docker.image.rootfs.diff.tar", OCI_COMP_NONE},
	    {"application/vnd.docker.image.rootfs.diff.tar.zstd", OCI_COMP_ZSTD},
	};
	for (size_t i = 0; i < ARRAY_SIZE(known); i++) {
		if (!strcmp(mt, known[i].mt)) {
			*ret = known[i].c;
			return 0;
		}
	}
	return -EOPNOTSUPP;
}

/* Copies the string array member key (or NULL) into *ret (NULL-terminated). */
static int strv_member(struct json_object *o, const char *key, char ***ret, struct strata_err *e)
{
	struct json_object *arr;
	*ret = NULL;
	if (!o || !json_object_object_get_ex(o, key, &arr) ||
	    json_object_is_type(arr, json_type_null))
		return 0;
	if (!json_object_is_type(arr, json_type_array))
		return strata_err_set(e, -EBADMSG, "config: %s is not an array", key);
	size_t n = json_object_array_length(arr);
	char **v = calloc(n + 1, sizeof(*v));
	if (!v)
		return strata_err_set(e, -ENOMEM, "out of memory");
	*ret = v;
	for (size_t i = 0; i < n; i++) {
		struct json_object *s = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(s, json_type_string))
			return strata_err_set(e, -EBADMSG, "config: %s[%zu] is not a string", key,
					      i);
		v[i] = strdup(json_object_get_string(s));
		if (!v[i])
			return strata_err_set(e, -ENOMEM, "out of memory");
	}
	return 0;
}

static int str_member(struct json_object *o, const char *key, char **ret, struct strata_err *e)
{
	const char *s = oci_jstr(o, key);
	*ret = NULL;
	if (!s)
		return 0;
	*ret = strdup(s);
	return *ret ? 0 : strata_err_set(e, -ENOMEM, "out of memory");
}

static int config_diff_ids(struct json_object *o, size_t n_layers, char (*diff_ids)[OCI_DIGEST_MAX],
			   struct strata_err *e)
{
	struct json_object *rootfs, *ids;
	if (!json_object_object_get_ex(o, "rootfs", &rootfs) ||
	    !json_object_object_get_ex(rootfs, "diff_ids", &ids)) {
		if (diff_ids)
			return strata_err_set(e, -EBADMSG, "config: no rootfs.diff_ids");
		return 0;
	}
	if (!json_object_is_type(ids, json_type_array) || json_object_array_length(ids) != n_layers)
		return strata_err_set(
		    e, -EBADMSG, "config: rootfs.diff_ids does not list one id per layer (%zu)",
		    n_layers);
	for (size_t i = 0; diff_ids && i < n_layers; i++) {
		struct json_object *s = json_object_array_get_idx(ids, i);
		const char *d =
		    json_object_is_type(s, json_type_string) ? json_object_get_string(s) : "";
		if (oci_digest_check(d) < 0)
			return strata_err_set(e, -EBADMSG,
					      "config: diff_ids[%zu] is not a sha256 digest", i);
		strcpy(diff_ids[i], d);
	}
	return 0;
}

int oci_parse_config(const char *buf, size_t len, size_t n_layers, struct oci_config *ret,
		     char (*diff_ids)[OCI_DIGEST_MAX], struct strata_err *e)
{
	_cleanup_json_ struct json_object *o = NULL;
	int r = oci_json_parse("config", buf, len, &o, e);
	if (r < 0)
		return r;
	const char *os = oci_jstr(o, "os"), *arch = oci_jstr(o, "architecture");
	if ((os && strcmp(os, OCI_WANT_OS)) || (arch && strcmp(arch, OCI_WANT_ARCH)))
		return strata_err_set(e, -ENOENT, "the image is for %.60s/%.60s, not %s/%s",
				      os ? os : "?", arch ? arch : "?", OCI_WANT_OS, OCI_WANT_ARCH);
	r = config_diff_ids(o, n_layers, diff_ids, e);
	if (r < 0)
		return r;
	struct oci_config c = {0};
	struct json_object *cc = NULL;
	json_object_object_get_ex(o, "config", &cc);
	if (cc && !json_object_is_type(cc, json_type_object))
		cc = NULL;
	r = str_member(o, "os", &c.os, e);
	if (r == 0)
		r = str_member(o, "architecture", &c.architecture, e);
	if (r == 0)
		r = strv_member(cc, "Entrypoint", &c.entrypoint, e);
	if (r == 0)
		r = strv_member(cc, "Cmd", &c.cmd, e);
	if (r == 0)
		r = strv_member(cc, "Env", &c.env, e);
	if (r == 0)
		r = str_member(cc, "WorkingDir", &c.working_dir, e);
	if (r == 0)
		r = str_member(cc, "User", &c.user, e);
	if (r < 0) {
		oci_config_done(&c);
		return r;
	}
	*ret = c;
	return 0;
}

static void strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

void oci_config_done(struct oci_config *c)
{
	free(c->os);
	free(c->architecture);
	strv_free(c->entrypoint);
	strv_free(c->cmd);
	strv_free(c->env);
	free(c->working_dir);
	free(c->user);
	memset(c, 0, sizeof(*c));
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

int oci_stage_begin(const char *final, struct oci_stage *st, struct strata_err *e)
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
	return 0;
}

int oci_stage_write(struct oci_stage *st, const char *name, const void *buf, size_t len,
		    struct strata_err *e)
{
	_cleanup_close_ int fd =
	    openat(st->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return strata_err_set(e, -errno, "stage %s: %s", name, strerror(errno));
	int r = write_all(fd, buf, len);
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

/* --- OCI image layout ------------------------------------------------------ */

/* Reads blobs/sha256/<hex> of d (at most max bytes) and verifies it. */
static int layout_read_blob(int dirfd, const struct oci_desc *d, size_t max, const char *what,
			    char **ret, size_t *ret_len, struct strata_err *e)
{
	char path[128];
	snprintf(path, sizeof(path), "blobs/sha256/%s", d->digest + 7);
	if (d->size > max)
		return strata_err_set(e, -EFBIG, "%s %s: %llu bytes, over the limit of %zu", what,
				      d->digest, (unsigned long long)d->size, max);
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r = oci_read_file_at(dirfd, path, max, &buf, &len, e);
	if (r == 0)
		r = oci_verify_bytes(what, buf, len, d->digest, d->size, e);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

static int layout_check(int dirfd, struct strata_err *e)
{
	_cleanup_free_ char *buf = NULL;
	_cleanup_json_ struct json_object *o = NULL;
	size_t len = 0;
	int r = oci_read_file_at(dirfd, "oci-layout", 64 * 1024, &buf, &len, e);
	if (r == 0)
		r = oci_json_parse("oci-layout", buf, len, &o, e);
	if (r < 0)
		return r;
	const char *v = oci_jstr(o, "imageLayoutVersion");
	if (!v || strncmp(v, "1.", 2) != 0)
		return strata_err_set(e, -EOPNOTSUPP,
				      "oci-layout: unsupported imageLayoutVersion '%.40s'",
				      v ? v : "(none)");
	return 0;
}

/* Follows index.json (and nested indexes, at most 4 deep) to the manifest. */
static int layout_find_manifest(int dirfd, const char *tag, const struct oci_limits *lim,
				char **ret, size_t *ret_len, char name[OCI_SHORT_MAX],
				struct strata_err *e)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r = oci_read_file_at(dirfd, "index.json", lim->max_manifest, &buf, &len, e);
	for (int depth = 0; r == 0; depth++) {
		_cleanup_free_ struct oci_desc *d = NULL;
		size_t n = 0, pick = 0;
		r = oci_parse_index(buf, len, lim, &d, &n, e);
		if (r == 0)
			r = oci_select(d, n, depth == 0 ? tag : NULL, &pick, e);
		if (r == 0 && depth >= 4)
			r = strata_err_set(e, -ELOOP, "indexes nested too deep");
		if (r < 0)
			return r;
		free(TAKE_PTR(buf));
		if (depth == 0)
			strcpy(name, d[pick].image_name);
		r = layout_read_blob(dirfd, &d[pick], lim->max_manifest, "manifest", &buf, &len, e);
		enum oci_doc_kind kind;
		if (r == 0)
			r = oci_doc_kind(buf, len, d[pick].media_type, &kind, e);
		if (r == 0 && kind == OCI_DOC_MANIFEST) {
			*ret = TAKE_PTR(buf);
			*ret_len = len;
			return 0;
		}
	}
	return r;
}

/* Copies and verifies layer i of m from the layout into the stage. */
static int layout_copy_layer(int dirfd, struct oci_stage *st, const struct oci_manifest *m,
			     size_t i, struct strata_err *e)
{
	char path[128], what[128];
	snprintf(path, sizeof(path), "blobs/sha256/%s", m->layers[i].digest + 7);
	snprintf(what, sizeof(what), "layer %zu (%s)", i, m->layers[i].digest);
	_cleanup_close_ int src = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (src < 0)
		return strata_err_set(e, -errno, "%s: %s: %s", what, path, strerror(errno));
	_cleanup_close_ int dst = -1;
	int r = oci_stage_layer_open(st, i, &dst, e);
	if (r == 0)
		r = oci_copy_verified(src, dst, what, m->layers[i].digest, m->layers[i].size, e);
	return r;
}

int oci_import_layout_at(int dirfd, const char *source, const char *tag, const char *stage_dir,
			 const struct oci_limits *lim, struct strata_err *e)
{
	struct oci_limits lb;
	lim = limits_or_default(lim, &lb);
	_cleanup_free_ char *man = NULL, *cfg = NULL;
	size_t man_len = 0, cfg_len = 0;
	struct oci_manifest m = {0};
	struct oci_config c = {0};
	struct oci_stage st = {.dirfd = -1};
	char name[OCI_SHORT_MAX] = "";
	int r = layout_check(dirfd, e);
	if (r == 0)
		r = layout_find_manifest(dirfd, tag, lim, &man, &man_len, name, e);
	if (r == 0)
		r = oci_parse_manifest(man, man_len, lim, &m, e);
	if (r == 0)
		r = layout_read_blob(dirfd, &m.config, lim->max_config, "config", &cfg, &cfg_len,
				     e);
	if (r == 0)
		r = oci_parse_config(cfg, cfg_len, m.n_layers, &c, NULL, e);
	if (r == 0)
		r = oci_stage_begin(stage_dir, &st, e);
	if (r == 0)
		r = oci_stage_write(&st, "config.json", cfg, cfg_len, e);
	for (size_t i = 0; r == 0 && i < m.n_layers; i++)
		r = layout_copy_layer(dirfd, &st, &m, i, e);
	if (r == 0) {
		strcpy(st.name, name);
		r = oci_stage_commit(&st, man, man_len, source, e);
	}
	oci_stage_abort(&st);
	oci_config_done(&c);
	oci_manifest_done(&m);
	return r;
}

static int import_any(const char *src, const char *tag, const char *stage_dir,
		      const struct oci_limits *lim, struct strata_err *e)
{
	struct stat sb, stage_sb;
	if (stat(src, &sb) < 0)
		return strata_err_set(e, -errno, "%s", strerror(errno));
	if (lstat(stage_dir, &stage_sb) == 0)
		return strata_err_set(e, -EEXIST, "%s: the stage directory exists already",
				      stage_dir);
	if (S_ISREG(sb.st_mode))
		return oci_import_archive(src, tag, stage_dir, lim, e);
	if (!S_ISDIR(sb.st_mode))
		return strata_err_set(e, -EINVAL, "neither an OCI layout nor a tarball");
	_cleanup_close_ int dfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return strata_err_set(e, -errno, "%s", strerror(errno));
	_cleanup_free_ char *source = NULL;
	if (asprintf(&source, "oci-layout:%s\n", src) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	return oci_import_layout_at(dfd, source, tag, stage_dir, lim, e);
}

int oci_import(const char *src, const char *tag, const char *stage_dir,
	       const struct oci_limits *lim, struct strata_err *e)
{
	int r = import_any(src, tag, stage_dir, lim, e);
	if (r < 0 && e && e->code == r && strncmp(e->msg, src, strlen(src)) != 0) {
		char msg[sizeof(e->msg)];
		snprintf(msg, sizeof(msg), "%s: %s", src, e->msg);
		memcpy(e->msg, msg, sizeof(msg));
	}
	return r;
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
