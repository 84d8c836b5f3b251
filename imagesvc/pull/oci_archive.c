/* oci_archive.c — importing a `docker save` tarball (see oci.h).
 *
 * The tarball (plain or gzip'd, read with istream.h and the hostile-safe
 * tar.h reader) is unpacked into a scratch directory next to the stage, but
 * only entries that can belong to a docker-save archive: at most three path
 * components of [A-Za-z0-9._-] (manifest.json, <id>/layer.tar,
 * blobs/sha256/<hex>, ...); anything else is skipped. Symlinks and hard links
 * between such entries (Docker links duplicate layers) become hard links in
 * the scratch directory, resolved lexically and never outside it; no symlink
 * is ever created there, so nothing written can escape it.
 *
 * Then: with oci-layout + index.json (Docker 25+ writes an OCI layout inside
 * the tarball) the layout importer takes over. Otherwise the classic form:
 * manifest.json names the config file "<hex>.json" (its name is its digest)
 * and the layer tars, each verified against the config's rootfs.diff_ids;
 * the stage receives an OCI manifest written here, since the tarball has
 * none. The scratch directory is removed in every case. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "imagesvc/istream.h"
#include "imagesvc/pull/oci-internal.h"
#include "imagesvc/tar.h"

#define ARCHIVE_MAX_COMPONENTS 3
#define ARCHIVE_MAX_ALIASES 4096

struct alias {
	char *name, *target; /* both relative to the scratch root */
};

struct unpack {
	int dfd; /* scratch root */
	struct alias *aliases;
	size_t n_aliases;
	size_t entries;
	const struct oci_limits *lim;
};

static bool name_ok(const char *p)
{
	int comps = 1;
	if (!*p)
		return false;
	for (const char *c = p; *c; c++) {
		if (*c == '/') {
			comps++;
			continue;
		}
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-'))
			return false;
	}
	return comps <= ARCHIVE_MAX_COMPONENTS && !strstr(p, "..") && p[0] != '.';
}

/* Creates the parent directories of path below dfd. */
static int mkparents(int dfd, const char *path)
{
	char buf[512];
	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (char *s = strchr(buf, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		if (mkdirat(dfd, buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return 0;
}

static int unpack_file(struct unpack *u, struct tar_reader *tr, const char *path,
		       struct strata_err *e)
{
	int r = mkparents(u->dfd, path);
	if (r < 0)
		return strata_err_set(e, r, "archive entry %s: %s", path, strerror(-r));
	unlinkat(u->dfd, path, 0);
	_cleanup_close_ int fd =
	    openat(u->dfd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return strata_err_set(e, -errno, "archive entry %s: %s", path, strerror(errno));
	enum { BUF = 128 * 1024 };
	_cleanup_free_ char *buf = malloc(BUF);
	if (!buf)
		return strata_err_set(e, -ENOMEM, "out of memory");
	for (;;) {
		ssize_t n = tar_read(tr, buf, BUF);
		if (n < 0)
			return strata_err_set(e, (int)n, "archive: %s", tar_error(tr));
		if (n == 0)
			return 0;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(fd, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				return strata_err_set(e, -errno, "archive entry %s: %s", path,
						      strerror(errno));
			off += w;
		}
	}
}

/* Resolves a symlink target lexically against the entry's directory. */
static int resolve_symlink(const char *entry, const char *target, char **ret)
{
	if (target[0] == '/')
		return -EINVAL;
	char buf[1024];
	size_t dirlen = strrchr(entry, '/') ? (size_t)(strrchr(entry, '/') - entry) : 0;
	if (dirlen + strlen(target) + 2 > sizeof(buf))
		return -ENAMETOOLONG;
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)dirlen, entry, dirlen ? "/" : "", target);
	char out[1024] = "";
	size_t olen = 0;
	for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, "..")) {
			if (olen == 0)
				return -EINVAL; /* climbs out of the archive */
			char *s = strrchr(out, '/');
			olen = s ? (size_t)(s - out) : 0;
			out[olen] = 0;
			continue;
		}
		olen +=
		    (size_t)snprintf(out + olen, sizeof(out) - olen, "%s%s", olen ? "/" : "", c);
	}
	*ret = strdup(out);
	return *ret ? 0 : -ENOMEM;
}

static int add_alias(struct unpack *u, const struct tar_entry *te, struct strata_err *e)
{
	if (u->n_aliases >= ARCHIVE_MAX_ALIASES)
		return strata_err_set(e, -EFBIG, "archive: more than %d links",
				      ARCHIVE_MAX_ALIASES);
	_cleanup_free_ char *target = NULL;
	int r = te->type == TAR_SYMLINK ? resolve_symlink(te->path, te->linkname, &target)
					: ((target = strdup(te->linkname)) ? 0 : -ENOMEM);
	if (r < 0 || !name_ok(target))
		return strata_err_set(e, r < 0 ? r : -EINVAL,
				      "archive: link %s -> %s points outside the archive", te->path,
				      te->linkname);
	struct alias *a = realloc(u->aliases, (u->n_aliases + 1) * sizeof(*a));
	if (!a)
		return strata_err_set(e, -ENOMEM, "out of memory");
	u->aliases = a;
	a[u->n_aliases].name = strdup(te->path);
	if (!a[u->n_aliases].name)
		return strata_err_set(e, -ENOMEM, "out of memory");
	a[u->n_aliases++].target = TAKE_PTR(target);
	return 0;
}

static int unpack_entry(struct unpack *u, struct tar_reader *tr, const struct tar_entry *te,
			struct strata_err *e)
{
	if (++u->entries > u->lim->max_archive_entries)
		return strata_err_set(e, -EFBIG, "archive: more than %zu entries",
				      u->lim->max_archive_entries);
	if (!name_ok(te->path))
		return 0; /* not part of a docker-save archive: skipped */
	switch (te->type) {
	case TAR_REG:
		return unpack_file(u, tr, te->path, e);
	case TAR_DIR:
		if (mkparents(u->dfd, te->path) < 0 ||
		    (mkdirat(u->dfd, te->path, 0755) < 0 && errno != EEXIST))
			return strata_err_set(e, -errno, "archive entry %s: %s", te->path,
					      strerror(errno));
		return 0;
	case TAR_SYMLINK:
	case TAR_HARDLINK:
		return add_alias(u, te, e);
	default:
		return 0;
	}
}

static int resolve_aliases(struct unpack *u, struct strata_err *e)
{
	/* A link may name another link: a few rounds resolve chains. */
	for (int round = 0; round < 8; round++) {
		size_t left = 0;
		for (size_t i = 0; i < u->n_aliases; i++) {
			struct alias *a = &u->aliases[i];
			if (!a->name)
				continue;
			struct stat sb;
			if (fstatat(u->dfd, a->target, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISREG(sb.st_mode)) {
				left++;
				continue;
			}
			int r = mkparents(u->dfd, a->name);
			unlinkat(u->dfd, a->name, 0);
			if (r < 0 || linkat(u->dfd, a->target, u->dfd, a->name, 0) < 0)
				return strata_err_set(e, r < 0 ? r : -errno, "archive link %s: %s",
						      a->name, strerror(r < 0 ? -r : errno));
			free(a->name);
			a->name = NULL;
		}
		if (!left)
			return 0;
	}
	return 0; /* dangling links: only an error if something needs them */
}

static int unpack_archive(const char *src, struct unpack *u, struct strata_err *e)
{
	_cleanup_close_ int fd = open(src, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return strata_err_set(e, -errno, "%s: %s", src, strerror(errno));
	struct istream *is = NULL;
	struct tar_reader *tr = NULL;
	struct tar_limits tl;
	tar_limits_default(&tl);
	tl.max_entries = u->lim->max_archive_entries * 2 + 16;
	int r = istream_open(img_fd_read, &fd, 0, &is);
	if (r == 0)
		r = tar_reader_new(&tl, istream_read_fn, is, &tr);
	if (r < 0) {
		istream_free(is);
		return strata_err_set(e, r, "%s: %s", src, strerror(-r));
	}
	tar_reader_describe_source(tr, istream_error_fn);
	for (;;) {
		const struct tar_entry *te;
		r = tar_next(tr, &te);
		if (r < 0)
			r = strata_err_set(e, r, "%s: %s", src, tar_error(tr));
		if (r <= 0)
			break;
		r = unpack_entry(u, tr, te, e);
		if (r < 0)
			break;
	}
	tar_reader_free(tr);
	istream_free(is);
	return r < 0 ? r : resolve_aliases(u, e);
}

/* --- the classic docker-save form ---------------------------------------- */

/* Returns the RepoTags entry of img that is tag or ends in ":tag" (with
 * tag NULL: the first one), or NULL. */
static const char *repotag_find(struct json_object *img, const char *tag)
{
	struct json_object *tags;
	if (!json_object_object_get_ex(img, "RepoTags", &tags) ||
	    !json_object_is_type(tags, json_type_array))
		return NULL;
	size_t tl = tag ? strlen(tag) : 0;
	for (size_t i = 0; i < json_object_array_length(tags); i++) {
		const char *t = json_object_get_string(json_object_array_get_idx(tags, i));
		size_t n = t ? strlen(t) : 0;
		if (t && (!tag || !strcmp(t, tag) ||
			  (n > tl && t[n - tl - 1] == ':' && !strcmp(t + n - tl, tag))))
			return t;
	}
	return NULL;
}

static int pick_image(struct json_object *arr, const char *tag, struct json_object **ret,
		      struct strata_err *e)
{
	size_t n = json_object_array_length(arr);
	if (!tag) {
		if (n != 1)
			return strata_err_set(e, -ENOENT,
					      "manifest.json holds %zu images; name one by tag", n);
		*ret = json_object_array_get_idx(arr, 0);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (repotag_find(json_object_array_get_idx(arr, i), tag)) {
			*ret = json_object_array_get_idx(arr, i);
			return 0;
		}
	}
	return strata_err_set(e, -ENOENT, "no image tagged '%s' in manifest.json", tag);
}

/* Verifies the config file, whose base name (minus ".json") is its digest. */
static int classic_config(int dfd, const char *path, const struct oci_limits *lim, char **ret,
			  size_t *ret_len, char digest[OCI_DIGEST_MAX], struct strata_err *e)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	snprintf(digest, OCI_DIGEST_MAX, "sha256:%.64s", base);
	if (oci_digest_check(digest) < 0)
		return strata_err_set(e, -EBADMSG,
				      "manifest.json: config name '%.80s' is not a digest", path);
	int r = oci_read_file_at(dfd, path, lim->max_config, ret, ret_len, e);
	if (r == 0)
		r = oci_verify_bytes("config", *ret, *ret_len, digest, *ret_len, e);
	return r;
}

static int classic_layer(int dfd, struct oci_stage *st, const char *path, size_t i,
			 const char *diff_id, uint64_t *ret_size, struct strata_err *e)
{
	char what[128];
	snprintf(what, sizeof(what), "layer %zu (%.60s)", i, path);
	_cleanup_close_ int src = openat(dfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat sb;
	if (src < 0 || fstat(src, &sb) < 0)
		return strata_err_set(e, -errno, "%s: %s", what, strerror(errno));
	_cleanup_close_ int dst = -1;
	int r = oci_stage_layer_open(st, i, &dst, e);
	if (r == 0)
		r = oci_copy_verified(src, dst, what, diff_id, (uint64_t)sb.st_size, e);
	*ret_size = (uint64_t)sb.st_size;
	return r;
}

/* Writes the OCI manifest the classic form lacks. */
static int classic_manifest(const char *cfg_digest, size_t cfg_len,
			    char (*diff_ids)[OCI_DIGEST_MAX], const uint64_t *sizes, size_t n,
			    char **ret, size_t *ret_len, struct strata_err *e)
{
	_cleanup_json_ struct json_object *m = json_object_new_object();
	struct json_object *cfg = json_object_new_object(), *layers = json_object_new_array();
	if (!m || !cfg || !layers) {
		json_object_put(cfg);
		json_object_put(layers);
		return strata_err_set(e, -ENOMEM, "out of memory");
	}
	json_object_object_add(m, "schemaVersion", json_object_new_int(2));
	json_object_object_add(m, "mediaType", json_object_new_string(OCI_MT_MANIFEST));
	json_object_object_add(cfg, "mediaType", json_object_new_string(OCI_MT_CONFIG));
	json_object_object_add(cfg, "digest", json_object_new_string(cfg_digest));
	json_object_object_add(cfg, "size", json_object_new_int64((int64_t)cfg_len));
	json_object_object_add(m, "config", cfg);
	for (size_t i = 0; i < n; i++) {
		struct json_object *l = json_object_new_object();
		if (!l)
			return strata_err_set(e, -ENOMEM, "out of memory");
		json_object_object_add(l, "mediaType", json_object_new_string(OCI_MT_LAYER_TAR));
		json_object_object_add(l, "digest", json_object_new_string(diff_ids[i]));
		json_object_object_add(l, "size", json_object_new_int64((int64_t)sizes[i]));
		json_object_array_add(layers, l);
	}
	json_object_object_add(m, "layers", layers);
	const char *s = json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);
	*ret = s ? strdup(s) : NULL;
	if (!*ret)
		return strata_err_set(e, -ENOMEM, "out of memory");
	*ret_len = strlen(*ret);
	return 0;
}

struct classic {
	char *cfg;
	size_t cfg_len;
	char cfg_digest[OCI_DIGEST_MAX];
	char (*diff_ids)[OCI_DIGEST_MAX];
	uint64_t *sizes;
	size_t n;
	struct json_object *layers;
	struct json_object *img; /* the chosen manifest.json entry */
	const char *tag;
};

static int classic_layers(int dfd, struct classic *c, const char *src, const char *stage_dir,
			  struct strata_err *e)
{
	struct oci_stage st = {.dirfd = -1};
	_cleanup_free_ char *man = NULL, *source = NULL;
	size_t man_len = 0;
	int r = oci_stage_begin(stage_dir, c->cfg, c->cfg_len, &st, e);
	for (size_t i = 0; r == 0 && i < c->n; i++) {
		const char *p = json_object_get_string(json_object_array_get_idx(c->layers, i));
		r = p ? classic_layer(dfd, &st, p, i, c->diff_ids[i], &c->sizes[i], e)
		      : strata_err_set(e, -EBADMSG, "manifest.json: Layers[%zu] is not a string",
				       i);
	}
	if (r == 0)
		r = classic_manifest(c->cfg_digest, c->cfg_len, c->diff_ids, c->sizes, c->n, &man,
				     &man_len, e);
	if (r == 0 && asprintf(&source, "docker-archive:%s\n", src) < 0) {
		source = NULL;
		r = strata_err_set(e, -ENOMEM, "out of memory");
	}
	const char *name = repotag_find(c->img, c->tag);
	if (name && strlen(name) < sizeof(st.name))
		strcpy(st.name, name);
	if (r == 0)
		r = oci_stage_commit(&st, man, man_len, source, e);
	oci_stage_abort(&st);
	return r;
}

static int import_classic(int dfd, const char *src, const char *tag, const char *stage_dir,
			  const struct oci_limits *lim, struct strata_err *e)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	_cleanup_json_ struct json_object *arr = NULL;
	int r = oci_read_file_at(dfd, "manifest.json", lim->max_manifest, &buf, &len, e);
	if (r < 0)
		return strata_err_set(e, r, "%s: neither an OCI layout nor a docker-save archive",
				      src);
	enum json_tokener_error jerr;
	arr = json_tokener_parse_verbose(buf, &jerr);
	if (!arr || !json_object_is_type(arr, json_type_array))
		return strata_err_set(e, -EBADMSG, "%s: manifest.json is not a JSON array", src);
	struct json_object *img = NULL;
	r = pick_image(arr, tag, &img, e);
	if (r < 0)
		return r;
	const char *cfg_path = oci_jstr(img, "Config");
	struct classic c = {.img = img, .tag = tag};
	if (!cfg_path || !json_object_object_get_ex(img, "Layers", &c.layers) ||
	    !json_object_is_type(c.layers, json_type_array))
		return strata_err_set(e, -EBADMSG, "%s: manifest.json lacks Config or Layers", src);
	c.n = json_object_array_length(c.layers);
	if (c.n > lim->max_layers)
		return strata_err_set(e, -EFBIG, "%s: %zu layers, over the limit of %zu", src, c.n,
				      lim->max_layers);
	struct oci_config conf = {0};
	c.diff_ids = calloc(c.n + 1, sizeof(*c.diff_ids));
	c.sizes = calloc(c.n + 1, sizeof(*c.sizes));
	r = c.diff_ids && c.sizes ? 0 : strata_err_set(e, -ENOMEM, "out of memory");
	if (r == 0)
		r = classic_config(dfd, cfg_path, lim, &c.cfg, &c.cfg_len, c.cfg_digest, e);
	if (r == 0)
		r = oci_parse_config(c.cfg, c.cfg_len, c.n, &conf, c.diff_ids, e);
	if (r == 0)
		r = classic_layers(dfd, &c, src, stage_dir, e);
	oci_config_done(&conf);
	free(c.cfg);
	free(c.diff_ids);
	free(c.sizes);
	return r;
}

/* Maps a tag like "name:tag" to the ref.name annotation "tag". */
static const char *layout_tag(const char *tag)
{
	if (!tag)
		return NULL;
	const char *c = strrchr(tag, ':');
	return c && !strchr(c, '/') ? c + 1 : tag;
}

static int import_unpacked(int dfd, const char *src, const char *tag, const char *stage_dir,
			   const struct oci_limits *lim, struct strata_err *e)
{
	struct stat sb;
	if (fstatat(dfd, "oci-layout", &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
	    fstatat(dfd, "index.json", &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		_cleanup_free_ char *source = NULL;
		if (asprintf(&source, "docker-archive:%s\n", src) < 0)
			return strata_err_set(e, -ENOMEM, "out of memory");
		return oci_import_layout_at(dfd, source, layout_tag(tag), stage_dir, lim, e);
	}
	return import_classic(dfd, src, tag, stage_dir, lim, e);
}

int oci_import_archive(const char *src, const char *tag, const char *stage_dir,
		       const struct oci_limits *lim, struct strata_err *e)
{
	struct oci_limits lb;
	if (!lim) {
		oci_limits_default(&lb);
		lim = &lb;
	}
	_cleanup_free_ char *scratch = NULL;
	if (asprintf(&scratch, "%s.src-XXXXXX", stage_dir) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	if (!mkdtemp(scratch))
		return strata_err_set(e, -errno, "%s: cannot create a scratch directory: %s",
				      stage_dir, strerror(errno));
	struct unpack u = {.dfd = open(scratch, O_RDONLY | O_DIRECTORY | O_CLOEXEC), .lim = lim};
	int r = u.dfd < 0 ? strata_err_set(e, -errno, "%s: %s", scratch, strerror(errno)) : 0;
	if (r == 0)
		r = unpack_archive(src, &u, e);
	if (r == 0)
		r = import_unpacked(u.dfd, src, tag, stage_dir, lim, e);
	for (size_t i = 0; i < u.n_aliases; i++) {
		free(u.aliases[i].name);
		free(u.aliases[i].target);
	}
	free(u.aliases);
	if (u.dfd >= 0)
		close(u.dfd);
	oci_rm_tree(scratch);
	return r;
}
