/* api_files.c — the file routes of a sandbox: read, write, list, stat,
 * mkdir and remove, and tar streams of a tree, with the query's path
 * normalised first.
 *
 * A backend with file_root (container) has its reads, writes and tar
 * streams done by transfers on worker threads (xfer.h) through the
 * sandbox's root (inroot.h): files of any size, in bounded memory, the
 * bytes moved by sendfile and splice. Other backends (and list, stat,
 * mkdir, remove everywhere) go through the backend's file operation,
 * whole files in one buffer of at most --max-body-mb (tar.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/api-internal.h"
#include "sandbox/sandboxd/http.h"
#include "sandbox/sandboxd/inroot.h"
#include "sandbox/sandboxd/tar.h"
#include "sandbox/sandboxd/xfer.h"

#define USER_MAX 64 /* the user= of an upload */

/* Normalises an absolute path: collapses "//" and ".", refuses "..",
 * relative paths and over-long ones. Returns a malloc'ed copy or NULL with
 * the reason in err. */
static char *clean_path(const char *p, struct strata_err *err)
{
	if (!p || p[0] != '/') {
		strata_err_set(err, -EINVAL, "path must be absolute");
		return NULL;
	}
	if (strlen(p) > 4095) {
		strata_err_set(err, -EINVAL, "path longer than 4095 bytes");
		return NULL;
	}
	char *out = malloc(strlen(p) + 2);
	if (!out)
		return NULL;
	size_t o = 0;
	const char *s = p;
	while (*s) {
		while (*s == '/')
			s++;
		const char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			strata_err_set(err, -EINVAL, "path may not contain '..'");
			free(out);
			return NULL;
		}
		if (n && !(n == 1 && s[0] == '.')) {
			out[o++] = '/';
			memcpy(out + o, s, n);
			o += n;
		}
		s = e;
	}
	if (!o)
		out[o++] = '/';
	out[o] = 0;
	return out;
}

/* An octal mode of 1 to 4 significant digits ("644", "0755", "4755"). */
static int parse_mode(const char *s, uint32_t *ret)
{
	uint32_t v = 0;
	size_t n = strlen(s);
	if (!n || n > 8)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -EINVAL;
		v = v * 8 + (uint32_t)(s[i] - '0');
	}
	if (v > 07777)
		return -EINVAL;
	*ret = v;
	return 0;
}

static void stat_json(struct jw *w, const struct sbd_stat *st, bool with_name)
{
	static const char *const types[] = {"other", "file", "dir", "symlink"};
	jw_obj(w);
	if (with_name)
		jw_kstr(w, "name", st->name);
	jw_kstr(w, "type", types[st->type <= SBD_FT_LNK ? st->type : 0]);
	jw_kint(w, "mode", st->mode & 07777);
	jw_kint(w, "size", (int64_t)st->size);
	jw_kint(w, "mtime", st->mtime_s);
	jw_obj_end(w);
}

static void files_reply(struct sbd_conn *c, struct sbd_file_req *f)
{
	struct jw w;
	jw_init(&w);
	switch (f->op) {
	case SBD_F_READ:
		sbd_conn_reply_raw(c, 200, "application/octet-stream", f->out_data, f->out_len);
		return;
	case SBD_F_STAT:
		stat_json(&w, &f->st, false);
		break;
	case SBD_F_LIST:
		jw_obj(&w);
		jw_key(&w, "entries");
		jw_arr(&w);
		for (size_t i = 0; i < f->nentries; i++)
			stat_json(&w, &f->entries[i], true);
		jw_arr_end(&w);
		jw_obj_end(&w);
		break;
	default:
		jw_obj(&w);
		jw_kbool(&w, "ok", true);
		if (f->op == SBD_F_WRITE) /* as a streamed upload answers */
			jw_kint(&w, "size", (int64_t)f->len);
		jw_obj_end(&w);
	}
	sbd_conn_reply_json(c, 200, &w);
}

/* GET .../files/tar?path=DIR: the tree as a tar stream; PUT: unpack one. */
static void api_tar(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method,
		    const char *path, const char *body, size_t len)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct strata_err err = {0};
	if (sbd_api_refuse_paused(c, sb))
		return;
	sb->last_active_ms = sbd_now_ms();
	if (!strcmp(method, "GET")) {
		uint8_t *tar = NULL;
		size_t n = 0;
		int r =
		    sbd_tar_pack(sb->backend, sb, path, (uint64_t)d->cfg.max_body, &tar, &n, &err);
		if (r < 0)
			sbd_api_reply_errno(
			    c, r, path,
			    r == -EOPNOTSUPP ? "files are not supported by this backend" : err.msg);
		else
			sbd_conn_reply_raw(c, 200, "application/x-tar", tar, n);
		free(tar);
		return;
	}
	if (strcmp(method, "PUT")) {
		sbd_conn_reply_error(c, 405, "bad_request", "files/tar takes GET or PUT");
		return;
	}
	int r = sbd_tar_unpack(sb->backend, sb, path, (const uint8_t *)body, len, &err);
	if (r < 0) {
		sbd_api_reply_errno(c, r, path,
				    r == -EOPNOTSUPP ? "files are not supported by this backend"
						     : err.msg);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kint(&w, "files", r);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

/* ---- streamed transfers (backends with file_root) ------------------------ */

/* Whether query parameter key is given as "0" or "false". */
static bool query_false(const char *query, const char *key)
{
	bool bad = false;
	_cleanup_free_ char *v = sbd_http_query_get(query, key, &bad);
	return v && (!strcmp(v, "0") || !strcmp(v, "false"));
}

enum fx_kind { FX_GET, FX_PUT, FX_TAR_GET, FX_TAR_PUT };

struct file_xfer {
	enum fx_kind kind;
	int root;
	char *path, *user;
	uint32_t mode;
	bool set_mode, parents, append;
	uint64_t disk_bytes; /* the sandbox's disk limit, for the message */
	uint32_t base;	     /* the host id of its id 0 (user namespace), or 0 */
	int64_t count;	     /* bytes written, or tar members */
};

static int fx_get(struct sbd_xfer *x)
{
	struct file_xfer *f = x->op;
	struct stat st;
	_cleanup_close_ int fd = sbd_inroot_open_read(f->root, f->path, &st);
	if (fd < 0)
		return fd;
	int r = sbd_xfer_head(x, 200, "application/octet-stream", (long long)st.st_size);
	return r < 0 ? r : sbd_xfer_sendfile(x, fd, 0, (uint64_t)st.st_size);
}

/* The owner of what an upload creates, in host ids: user= looked up in
 * the sandbox; without one its root (in a user namespace: the host id of
 * its root, given to what is new; else whoever sandboxd is). */
static int fx_owner(struct sbd_xfer *x, struct file_xfer *f, struct sbd_owner *o)
{
	*o = (struct sbd_owner){.base = f->base};
	if (!f->user) {
		if (f->base)
			*o = (struct sbd_owner){.set = true,
						.only_new = true,
						.uid = f->base,
						.gid = f->base,
						.base = f->base};
		return 0;
	}
	int r = sbd_inroot_user(f->root, f->user, o);
	if (r == -ENOENT)
		return strata_err_set(&x->err, -EINVAL, "no user '%s' in the sandbox's /etc/passwd",
				      f->user);
	if (r < 0)
		return r;
	if (f->base && (o->uid >= SBD_IDS || o->gid >= SBD_IDS))
		return strata_err_set(&x->err, -EINVAL,
				      "user '%s' (%u:%u): the sandbox has the ids 0 to %u only",
				      f->user, (unsigned)o->uid, (unsigned)o->gid, SBD_IDS - 1);
	o->uid = sbd_id_to_host(f->base, o->uid);
	o->gid = sbd_id_to_host(f->base, o->gid);
	o->base = f->base;
	return 0;
}

/* A write of the sandbox's disk failed: ENOSPC/EDQUOT named as the limit. */
static int fx_write_error(struct sbd_xfer *x, struct file_xfer *f, int werr, uint64_t done)
{
	if (werr == ENOSPC || werr == EDQUOT)
		return strata_err_set(&x->err, -ENOSPC,
				      "the sandbox's disk is full (its limit is %llu MiB) after "
				      "%llu bytes of %s",
				      (unsigned long long)(f->disk_bytes >> 20),
				      (unsigned long long)done, f->path);
	return strata_err_set(&x->err, -werr, "writing %s: %s", f->path, strerror(werr));
}

static int fx_put(struct sbd_xfer *x)
{
	struct file_xfer *f = x->op;
	struct sbd_owner o;
	int r = fx_owner(x, f, &o);
	if (r < 0)
		return r;
	struct sbd_inroot_file out;
	r = sbd_inroot_file_open(f->root, f->path, f->mode, f->set_mode, f->parents, f->append, &o,
				 &out);
	if (r < 0)
		return r;
	if ((r = sbd_xfer_continue(x)) < 0) {
		sbd_inroot_file_abort(&out);
		return r;
	}
	int werr = 0;
	int64_t n = sbd_xfer_body_to_fd(x, out.fd, UINT64_MAX, &werr);
	if (n < 0) { /* the old file stays; the partial one is given back */
		sbd_inroot_file_abort(&out);
		return n == -EIO ? fx_write_error(x, f, werr, 0) : (int)n;
	}
	f->count = n;
	r = sbd_inroot_file_commit(&out);
	return r < 0 ? strata_err_set(&x->err, r, "putting %s in place: %s", f->path, strerror(-r))
		     : 0;
}

static int fx_tar_get(struct sbd_xfer *x)
{
	struct file_xfer *f = x->op;
	int64_t n = sbd_tar_stream_out(x, f->root, f->path, f->base);
	f->count = n > 0 ? n : 0;
	return n < 0 ? (int)n : 0;
}

static int fx_tar_put(struct sbd_xfer *x)
{
	struct file_xfer *f = x->op;
	struct sbd_owner o;
	int r = fx_owner(x, f, &o);
	if (r < 0)
		return r;
	int werr = 0;
	int64_t n = sbd_tar_stream_in(x, f->root, f->path, &o, &werr);
	if (n == -EIO)
		return fx_write_error(x, f, werr, 0);
	f->count = n > 0 ? n : 0;
	return n < 0 ? (int)n : 0;
}

static void fx_free(struct file_xfer *f)
{
	if (f->root >= 0)
		close(f->root);
	free(f->path);
	free(f->user);
	free(f);
}

static void fx_done(struct sbd_xfer *x, struct sbd_conn *c)
{
	struct file_xfer *f = x->op;
	int r = x->r;
	const char *why = x->err.code ? x->err.msg : NULL;
	if (x->head_sent) {
		/* the response went out (whole, or cut short: closed) */
	} else if (r == -ENOSPC || r == -EDQUOT) {
		sbd_conn_reply_error(c, 507, "disk_full", "%s",
				     why ? why : "the sandbox's disk is full");
	} else if (r == -ETIMEDOUT) {
		if (why)
			sbd_conn_reply_error(c, 408, "timeout", "%s: %s", f->path, why);
		else
			sbd_conn_reply_error(c, 408, "timeout",
					     "%s: the client sent nothing for %d s", f->path,
					     XFER_IDLE_MS / 1000);
	} else if (r == -EAGAIN) {
		sbd_conn_reply_error(c, 503, "unavailable", "%s: %s; retry", f->path,
				     why ? why
					 : "the path kept changing while it was looked up (renames "
					   "inside the sandbox), or its file is leased");
	} else if (r == -EPROTO) {
		sbd_conn_reply_error(c, 400, "bad_request", "%s: bad chunked body", f->path);
	} else if (r == -EXDEV) {
		sbd_conn_reply_error(c, 400, "bad_request",
				     "%s: on another mount than the sandbox's root filesystem "
				     "(its /proc, /dev or /sys): not served by the files API",
				     f->path);
	} else if (r == -ESRCH) {
		sbd_conn_reply_error(c, 409, "gone", "%s: the sandbox ended", f->path);
	} else if (r < 0) {
		sbd_api_reply_errno(c, r, f->path, why);
	} else {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		if (f->kind == FX_TAR_PUT)
			jw_kint(&w, "files", f->count);
		else {
			jw_kbool(&w, "ok", true);
			jw_kint(&w, "size", f->count);
		}
		jw_obj_end(&w);
		sbd_conn_reply_json(c, 200, &w);
	}
	fx_free(f);
}

bool sbd_api_body_streamed(struct sandboxd *d, const struct sbd_who *who, const char *method,
			   const char *path)
{
	static const char pre[] = "/v1/sandboxes/";
	if (strcmp(method, "PUT") || strncmp(path, pre, sizeof(pre) - 1))
		return false;
	const char *id = path + sizeof(pre) - 1;
	const char *slash = strchr(id, '/');
	if (!slash || (size_t)(slash - id) > SBD_ID_LEN ||
	    (strcmp(slash, "/files") && strcmp(slash, "/files/tar")))
		return false;
	char buf[SBD_ID_LEN + 1];
	memcpy(buf, id, (size_t)(slash - id));
	buf[slash - id] = 0;
	struct sbd_sandbox *sb = sbd_registry_find(d, buf);
	/* Another tenant's is buffered and refused as an unknown id is. */
	return sb && sbd_who_sees(who, sb) && sb->backend->file_root;
}

/* Starts a streamed transfer of kind for c. Replies itself on an error. */
static void fx_start(struct sbd_conn *c, struct sbd_sandbox *sb, enum fx_kind kind,
		     const char *path, const char *query, uint32_t mode, bool set_mode)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	bool bad = false;
	_cleanup_free_ char *user = sbd_http_query_get(query, "user", &bad);
	if (bad || (user && (!user[0] || strlen(user) > USER_MAX))) {
		sbd_conn_reply_error(c, 400, "bad_request", "query parameter 'user': 1 to %d bytes",
				     USER_MAX);
		return;
	}
	struct sbd_conn_body body;
	sbd_conn_body(c, &body);
	uint64_t disk = (uint64_t)sb->disk_mb << 20;
	if (kind == FX_PUT && !body.chunked && disk && body.length > disk) {
		sbd_conn_reply_error(c, 413, "disk_full",
				     "%s: %llu bytes do not fit the sandbox's disk of %lld MiB",
				     path, (unsigned long long)body.length, (long long)sb->disk_mb);
		return;
	}
	int root = -1;
	int r = sb->backend->file_root(sb->backend, sb, &root);
	if (r < 0) {
		sbd_api_reply_errno(c, r == -ESRCH ? -ENOENT : r, path,
				    r == -ESRCH ? "the sandbox's root is gone" : NULL);
		return;
	}
	struct file_xfer *f = calloc(1, sizeof(*f));
	struct sbd_xfer *x = calloc(1, sizeof(*x));
	if (f) {
		*f = (struct file_xfer){
		    .kind = kind,
		    .root = root,
		    .path = strdup(path),
		    .user = user ? strdup(user) : NULL,
		    .mode = mode,
		    .set_mode = set_mode,
		    .parents = !query_false(query, "parents"),
		    .append = sbd_api_query_bool(query, "append"),
		    .disk_bytes = disk,
		    .base = sb->backend->id_base ? sb->backend->id_base(sb->backend, sb) : 0};
		root = -1;
	}
	if (!f || !x || !f->path || (user && !f->user)) {
		if (f)
			fx_free(f);
		else
			close(root);
		free(x);
		sbd_conn_reply_error(c, 500, "internal", "out of memory");
		return;
	}
	static const sbd_xfer_fn runs[] = {fx_get, fx_put, fx_tar_get, fx_tar_put};
	x->run = runs[kind];
	x->done = fx_done;
	x->op = f;
	x->keep_alive = body.keep_alive;
	x->expect_continue = body.expect_continue;
	x->chunked = body.chunked;
	x->left = body.length;
	x->sandbox = sb;
	sb->last_active_ms = sbd_now_ms();
	r = sbd_xfer_start(d, c, x);
	if (r < 0) {
		fx_free(f);
		if (r == -EBUSY)
			sbd_conn_reply_error(c, 429, "too_many_transfers",
					     "%d file transfers are running; retry", XFER_MAX);
		else if (r == -EMFILE)
			sbd_conn_reply_error(c, 429, "too_many_transfers",
					     "the sandbox has %d file transfers running; retry",
					     XFER_PER_SANDBOX_MAX);
		else
			sbd_api_reply_errno(c, r, path, NULL);
	}
}

void sbd_api_files(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method, const char *sub,
		   const char *query, const char *body, size_t len)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct strata_err err = {0};
	bool bad = false;
	_cleanup_free_ char *raw = sbd_http_query_get(query, "path", &bad);
	_cleanup_free_ char *mode_s = sbd_http_query_get(query, "mode", &bad);
	_cleanup_free_ char *path = raw && !bad ? clean_path(raw, &err) : NULL;
	if (!path) {
		sbd_conn_reply_error(c, 400, "invalid_path", "query parameter 'path': %s",
				     err.code ? err.msg
					      : "required, percent-encoded, without NUL bytes");
		return;
	}
	struct sbd_file_req f = {.path = path, .mode = 0644, .max = (uint64_t)d->cfg.max_body};
	if (mode_s && parse_mode(mode_s, &f.mode) < 0) {
		sbd_conn_reply_error(c, 400, "bad_request",
				     "query parameter 'mode': octal digits, at most 7777");
		return;
	}
	bool get = !strcmp(method, "GET"), put = !strcmp(method, "PUT");
	if (sb->backend->file_root && (get || put) && (!strcmp(sub, "") || !strcmp(sub, "tar"))) {
		if (sbd_api_refuse_paused(c, sb))
			return;
		enum fx_kind k =
		    !strcmp(sub, "") ? (get ? FX_GET : FX_PUT) : (get ? FX_TAR_GET : FX_TAR_PUT);
		fx_start(c, sb, k, path, query, f.mode, mode_s != NULL);
		return;
	}
	if (!strcmp(sub, "tar")) {
		api_tar(c, sb, method, path, body, len);
		return;
	}
	if (!strcmp(sub, "") && !strcmp(method, "GET"))
		f.op = SBD_F_READ;
	else if (!strcmp(sub, "") && !strcmp(method, "PUT")) {
		f.op = SBD_F_WRITE;
		f.data = (const uint8_t *)body;
		f.len = len;
		f.append = sbd_api_query_bool(query, "append");
	} else if (!strcmp(sub, "") && !strcmp(method, "DELETE")) {
		f.op = SBD_F_REMOVE;
		f.recursive = sbd_api_query_bool(query, "recursive");
	} else if (!strcmp(sub, "list") && !strcmp(method, "GET"))
		f.op = SBD_F_LIST;
	else if (!strcmp(sub, "stat") && !strcmp(method, "GET"))
		f.op = SBD_F_STAT;
	else if (!strcmp(sub, "mkdir") && !strcmp(method, "POST")) {
		f.op = SBD_F_MKDIR;
		f.parents = sbd_api_query_bool(query, "parents");
		if (!mode_s)
			f.mode = 0755;
	} else {
		sbd_conn_reply_error(c, 405, "bad_request", "no route %s .../files%s%s", method,
				     sub[0] ? "/" : "", sub);
		return;
	}
	if (sbd_api_refuse_paused(c, sb))
		return;
	sb->last_active_ms = sbd_now_ms();
	int r = sb->backend->file(sb->backend, sb, &f);
	if (r < 0)
		sbd_api_reply_errno(c, r, path,
				    r == -EOPNOTSUPP ? "files are not supported by this backend"
						     : NULL);
	else
		files_reply(c, &f);
	free(f.out_data);
	free(f.entries);
}
