/* oci_documents.c — the OCI and Docker v2 documents of an image: manifests,
 * indexes / manifest lists and image configs, parsed with json-c under the
 * size and count limits of struct oci_limits, and the choice of the entry of
 * an index to use (by tag, else the linux/amd64 image). Pure parsing: no
 * file or network I/O; the importers (oci_import.c, oci_archive.c,
 * registry.c) fetch the bytes and verify their digests first. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"
#include "imagesvc/pull/oci-internal.h"

/* --- limits --------------------------------------------------------------- */

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

const struct oci_limits *oci_limits_or_default(const struct oci_limits *lim, struct oci_limits *buf)
{
	if (lim)
		return lim;
	oci_limits_default(buf);
	return buf;
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
	lim = oci_limits_or_default(lim, &lb);
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
	lim = oci_limits_or_default(lim, &lb);
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
