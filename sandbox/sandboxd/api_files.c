/* api_files.c — the file routes of a sandbox: read, write, list, stat,
 * mkdir and remove through the backend's file operation, and tar streams of
 * a tree (tar.h), with the query's path normalised first. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/api-internal.h"
#include "sandbox/sandboxd/http.h"
#include "sandbox/sandboxd/tar.h"

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
	if (mode_s)
		f.mode = (uint32_t)strtoul(mode_s, NULL, 8) & 07777;
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
