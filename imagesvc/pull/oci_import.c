/* oci_import.c — driving an import into a stage: oci_import() tells an OCI
 * image layout directory from a docker-save tarball (oci_archive.c) and
 * imports the layout itself: oci-layout and index.json checked, the manifest
 * chosen (oci_documents.c), and every blob opened below the layout with
 * O_NOFOLLOW and verified against its descriptor while it is copied into the
 * stage (oci_stage.c). Registry pulls drive the same stage from registry.c. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "imagesvc/pull/oci-internal.h"

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
	lim = oci_limits_or_default(lim, &lb);
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
		r = oci_stage_begin(stage_dir, cfg, cfg_len, &st, e);
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
