/* api.c — the routes of strata-sandboxd's HTTP API (documented in API.md)
 * and what the request families share: the mapping of negative errno to HTTP
 * errors, body parsing (unknown fields are refused by name), the env and
 * integer fields of create and exec, the sandbox's JSON; and the small
 * requests (list, get, delete, node, capabilities, images, health). The
 * families have a file each: api_create.c, api_exec.c, api_files.c,
 * api_sandbox.c (metrics, update), api_pause.c (pause, resume)
 * (api-internal.h).
 *
 * Error codes at this boundary (the SDK maps each to an exception):
 *   400 bad_request, unknown_field, invalid_path   401 unauthorized (server.c)
 *   403 forbidden, admin_only   404 not_found, image_not_found
 *   409 paused, not_paused   413 too_large   429 quota_exceeded   501 unsupported
 *   503 no_capacity, backend_unavailable   500 internal
 *
 * A tenant (auth.c) sees only its own sandboxes: the list leaves the others
 * out, and a route naming one of them answers 404 as for an id that does not
 * exist. /v1/node (every tenant's counts, the state dir) is an admin's. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/api-internal.h"
#include "sandbox/sandboxd/http.h"

/* ---- small helpers ------------------------------------------------------- */

void sbd_api_reply_errno(struct sbd_conn *c, int r, const char *what, const char *why)
{
	const char *msg = why && why[0] ? why : strerror(-r);
	switch (r) {
	case -ENOENT:
		sbd_conn_reply_error(c, 404, "not_found", "%s: %s", what, msg);
		break;
	case -ENODEV:
		sbd_conn_reply_error(c, 503, "backend_unavailable", "%s: %s", what, msg);
		break;
	case -EOPNOTSUPP:
		sbd_conn_reply_error(c, 501, "unsupported", "%s: %s", what, msg);
		break;
	case -ENOSPC:
		sbd_conn_reply_error(c, 503, "no_capacity", "%s: %s", what, msg);
		break;
	case -EDQUOT:
		sbd_conn_reply_error(c, 429, "quota_exceeded", "%s: %s", what, msg);
		break;
	case -EBUSY:
		sbd_conn_reply_error(
		    c, 409, "busy", "%s: %s", what,
		    why && why[0] ? why : "the sandbox is busy (an exec holds it); retry");
		break;
	case -EFBIG:
		sbd_conn_reply_error(c, 413, "too_large", "%s: %s", what, msg);
		break;
	case -EINVAL:
	case -ENOTDIR:
	case -EISDIR:
	case -EEXIST:
	case -ENOTEMPTY:
	case -ENAMETOOLONG:
	case -ELOOP:
	case -EXDEV:
		sbd_conn_reply_error(c, 400, "bad_request", "%s: %s", what, msg);
		break;
	case -EACCES:
	case -EPERM:
	case -EROFS:
		sbd_conn_reply_error(c, 403, "forbidden", "%s: %s", what, msg);
		break;
	default:
		sbd_conn_reply_error(c, 500, "internal", "%s: %s", what, msg);
	}
}

void sbd_api_reply_image_error(struct sbd_conn *c, int r, const char *what, const char *why)
{
	const char *msg = why && why[0] ? why : strerror(-r);
	if (r == -ENOENT)
		sbd_conn_reply_error(c, 404, "image_not_found", "%s", msg);
	else if (r == -ETIMEDOUT || r == -EAGAIN || r == -ENOTCONN)
		sbd_conn_reply_error(c, 503, "store_unavailable", "%s: %s", what, msg);
	else
		sbd_api_reply_errno(c, r, what, why);
}

/* Parses a JSON object body; replies 400 itself and returns NULL on error. */
struct json *sbd_api_parse_body(struct sbd_conn *c, const char *body, size_t len,
				const char *const *allowed)
{
	char err[200];
	if (len == 0) {
		sbd_conn_reply_error(c, 400, "bad_request", "a JSON object body is required");
		return NULL;
	}
	struct json *j = json_parse(body, len, err, sizeof(err));
	if (!j) {
		sbd_conn_reply_error(c, 400, "bad_request", "malformed JSON %s", err);
		return NULL;
	}
	if (j->type != JSON_OBJ) {
		sbd_conn_reply_error(c, 400, "bad_request", "the body must be a JSON object");
		return json_free(j);
	}
	const char *bad = json_unknown_field(j, allowed);
	if (bad) {
		sbd_conn_reply_error(c, 400, "unknown_field", "unknown field '%s'", bad);
		return json_free(j);
	}
	return j;
}

int sbd_api_parse_env(const struct json *e, char *const *base, char ***ret, struct strata_err *err)
{
	size_t nb = 0;
	while (base && base[nb])
		nb++;
	size_t ne = e ? e->len : 0;
	if (e && e->type != JSON_OBJ) {
		strata_err_set(err, -EINVAL, "env must be an object of strings");
		return -EINVAL;
	}
	if (ne > SBD_MAX_ENV) {
		strata_err_set(err, -EINVAL, "env has more than %d entries", SBD_MAX_ENV);
		return -EINVAL;
	}
	char **v = calloc(nb + ne + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < nb; i++)
		v[n++] = strdup(base[i]);
	for (struct json *c = e ? e->child : NULL; c; c = c->next) {
		const char *val = json_cstr(c);
		if (!val || !c->key[0] || strchr(c->key, '=') ||
		    strlen(c->key) + strlen(val) > 32768) {
			strata_err_set(err, -EINVAL,
				       "env '%s' must be a string (no '=' in the name)", c->key);
			for (size_t k = 0; k < n; k++)
				free(v[k]);
			free(v);
			return -EINVAL;
		}
		size_t kl = strlen(c->key);
		for (size_t k = 0; k < n; k++) /* a later value replaces an earlier one */
			if (v[k] && !strncmp(v[k], c->key, kl) && v[k][kl] == '=') {
				free(v[k]);
				v[k] = v[--n];
				v[n] = NULL;
				break;
			}
		if (asprintf(&v[n], "%s=%s", c->key, val) >= 0)
			n++;
	}
	*ret = v;
	return 0;
}

int sbd_api_parse_ints(const struct json *j, const struct sbd_api_int *f, size_t n,
		       struct strata_err *err)
{
	for (size_t i = 0; i < n; i++) {
		const struct json *v = json_get(j, f[i].name);
		if (!v || v->type == JSON_NULL)
			continue;
		if (!json_int(v, f[i].lo, f[i].hi, f[i].dst)) {
			strata_err_set(err, -EINVAL, "%s must be an integer in [%lld, %lld]",
				       f[i].name, (long long)f[i].lo, (long long)f[i].hi);
			return -EINVAL;
		}
	}
	return 0;
}

const char *sbd_api_opt_str(const struct json *j, const char *key, size_t max, bool *bad)
{
	const struct json *v = json_get(j, key);
	if (!v || v->type == JSON_NULL)
		return NULL;
	const char *s = json_cstr(v);
	if (!s || strlen(s) > max)
		*bad = true;
	return s;
}

void sbd_api_reply_sandbox(struct sbd_conn *c, int status, const struct sbd_sandbox *sb)
{
	struct jw w;
	jw_init(&w);
	sbd_sandbox_to_json(sb, (uint32_t)sbd_conn_daemon(c)->cfg.node_id, &w);
	sbd_conn_reply_json(c, status, &w);
}

bool sbd_api_refuse_paused(struct sbd_conn *c, const struct sbd_sandbox *sb)
{
	if (sb->state == SBD_FAILED) {
		sbd_conn_reply_error(c, 409, "failed", "sandbox %s failed: %s", sb->id,
				     sb->failed_reason ?: "?");
		return true;
	}
	if (sb->pause_wait) {
		sbd_conn_reply_error(c, 409, "paused", "sandbox %s is being paused", sb->id);
		return true;
	}
	if (sb->state != SBD_PAUSED)
		return false;
	sbd_conn_reply_error(c, 409, "paused", "sandbox %s is paused; resume it first", sb->id);
	return true;
}

bool sbd_api_query_bool(const char *query, const char *key)
{
	bool bad = false;
	_cleanup_free_ char *v = sbd_http_query_get(query, key, &bad);
	return v && (!strcmp(v, "1") || !strcmp(v, "true") || !v[0]);
}

/* ---- list, get, delete ---------------------------------------------------- */

static bool label_match(const struct sbd_sandbox *sb, const char *filter)
{
	/* filter: "k=v,k2=v2" ("k" alone: the label exists) */
	const char *p = filter;
	while (*p) {
		const char *e = strchrnul(p, ',');
		const char *eq = memchr(p, '=', e - p);
		size_t kl = eq ? (size_t)(eq - p) : (size_t)(e - p);
		bool hit = false;
		for (size_t i = 0; i < sb->nlabels && !hit; i++)
			hit = strlen(sb->labels[i].key) == kl &&
			      !strncmp(sb->labels[i].key, p, kl) &&
			      (!eq || (strlen(sb->labels[i].value) == (size_t)(e - eq - 1) &&
				       !strncmp(sb->labels[i].value, eq + 1, e - eq - 1)));
		if (!hit)
			return false;
		p = *e ? e + 1 : e;
	}
	return true;
}

static void api_list(struct sbd_conn *c, const char *query)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	bool bad = false;
	_cleanup_free_ char *label = sbd_http_query_get(query, "label", &bad);
	_cleanup_free_ char *state = sbd_http_query_get(query, "state", &bad);
	_cleanup_free_ char *backend = sbd_http_query_get(query, "backend", &bad);
	_cleanup_free_ char *tenant = sbd_http_query_get(query, "tenant", &bad);
	if (bad || (state && strcmp(state, "running") && strcmp(state, "paused"))) {
		sbd_conn_reply_error(
		    c, 400, "bad_request",
		    "filters: label=k=v[,k=v], state=running|paused, backend=NAME, tenant=NAME");
		return;
	}
	const struct sbd_who *who = sbd_conn_who(c);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	for (struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		if (!sbd_who_sees(who, sb))
			continue;
		if (state && strcmp(state, sbd_state_name(sb->state)))
			continue;
		if (backend && strcmp(backend, sb->backend_name))
			continue;
		if (tenant && strcmp(tenant, sb->tenant ?: "")) /* "": the operator's */
			continue;
		if (label && !label_match(sb, label))
			continue;
		sbd_sandbox_to_json(sb, (uint32_t)d->cfg.node_id, &w);
	}
	jw_arr_end(&w);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

static void api_delete(struct sbd_conn *c, struct sbd_sandbox *sb)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	int r = sbd_registry_destroy(d, sb, "deleted by request");
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kbool(&w, "deleted", true);
	jw_kbool(&w, "clean", r == 0);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

/* ---- node ------------------------------------------------------------------- */

static long self_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* Answers 403 admin_only and returns true unless the request is an admin's. */
static bool refuse_non_admin(struct sbd_conn *c, const char *what)
{
	const struct sbd_who *who = sbd_conn_who(c);
	if (who->admin)
		return false;
	sbd_conn_reply_error(c, 403, "admin_only", "%s is for administrators only (tenant '%s')",
			     what, who->tenant);
	return true;
}

static void api_node(struct sbd_conn *c)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	size_t paused = 0;
	unsigned store_calls;
	uint64_t store_timeouts;
	if (refuse_non_admin(c, "GET /v1/node"))
		return;
	sbd_images_store_stats(d, &store_calls, &store_timeouts);
	for (struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next)
		paused += sb->state == SBD_PAUSED;
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kint(&w, "sandboxes", (int64_t)d->count);
	jw_kint(&w, "creating", (int64_t)d->creating);
	jw_kint(&w, "running", (int64_t)(d->count - paused));
	jw_kint(&w, "paused", (int64_t)paused);
	jw_kint(&w, "max_sandboxes", d->cfg.max_sandboxes);
	jw_kint(&w, "memory_admitted_mb", d->mem_used_mb);
	jw_kint(&w, "memory_budget_mb", d->cfg.memory_budget_mb);
	jw_kint(&w, "pids_admitted", d->pids_used);
	jw_kint(&w, "pids_budget", d->cfg.pids_budget);
	jw_kint(&w, "sandboxd_rss_kb", self_rss_kb());
	jw_kint(&w, "exec_kept_bytes", (int64_t)d->exec_kept);
	jw_kint(&w, "exec_keep_budget_bytes", d->cfg.exec_keep_budget);
	jw_kint(&w, "connections", d->conns);
	jw_kint(&w, "uptime_s", (sbd_now_ms() - d->started_ms) / 1000);
	jw_kint(&w, "creates_total", (int64_t)d->creates_total);
	jw_kint(&w, "deletes_total", (int64_t)d->deletes_total);
	jw_kint(&w, "execs_total", (int64_t)d->execs_total);
	jw_kint(&w, "refused_total", (int64_t)d->refused_total);
	jw_kint(&w, "reaped_total", (int64_t)d->reaped_total);
	jw_kint(&w, "store_calls", (int64_t)store_calls);
	jw_kint(&w, "store_timeouts_total", (int64_t)store_timeouts);
	jw_kint(&w, "store_timeout_ms", d->cfg.store_timeout_ms);
	jw_kstr(&w, "state_dir", d->cfg.state_dir);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

static void caps_json(struct jw *w, const struct sbd_caps *k)
{
	jw_obj(w);
	jw_kbool(w, "available", k->available);
	jw_key(w, "reason");
	jw_str(w, k->available ? NULL : k->why.msg);
	jw_kbool(w, "exec", k->exec);
	jw_kbool(w, "exec_stream", k->exec_stream);
	jw_kbool(w, "exec_stdin", k->exec_stdin);
	jw_kbool(w, "exec_stdin_stream", k->exec_stdin_stream);
	jw_kbool(w, "python", k->python);
	jw_kbool(w, "files", k->files);
	jw_kbool(w, "tar", k->tar);
	jw_kbool(w, "pause", k->pause);
	jw_kbool(w, "persistent", k->persistent);
	jw_kbool(w, "network_host", k->network_host);
	jw_kbool(w, "limits_memory", k->limits_memory);
	jw_kbool(w, "limits_pids", k->limits_pids);
	jw_kbool(w, "limits_cpu", k->limits_cpu);
	jw_kbool(w, "limits_disk", k->limits_disk);
	jw_kbool(w, "metrics", k->metrics);
	if (k->disk_reason)
		jw_kstr(w, "disk_reason", k->disk_reason);
	jw_kbool(w, "userns", k->userns);
	if (!k->userns)
		jw_kstr(w, "userns_reason",
			k->userns_reason ?: "sandboxes of this backend have no user namespace");
	jw_obj_end(w);
}

static void api_caps(struct sbd_conn *c)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "backends");
	jw_obj(&w);
	for (size_t i = 0; i < ARRAY_SIZE(d->backends); i++) {
		struct sbd_backend *b = d->backends[i];
		struct sbd_caps k = {0};
		if (!b)
			continue;
		b->caps(b, &k);
		jw_key(&w, b->name);
		caps_json(&w, &k);
	}
	jw_obj_end(&w);
	jw_key(&w, "aliases");
	jw_obj(&w);
	jw_kstr(&w, "docker", "container");
	jw_obj_end(&w);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

/* GET /v1/images: the store is listed on a worker (images.h). */
struct images_req {
	struct sbd_images_listing l;
	struct sbd_conn *c; /* NULL once its client left */
};

static void images_abort(void *ctx)
{
	((struct images_req *)ctx)->c = NULL;
}

static void images_listed(struct sbd_images_listing *l, int r, const struct strata_err *e)
{
	struct images_req *q = (struct images_req *)((char *)l - offsetof(struct images_req, l));
	struct sbd_conn *c = q->c;
	if (c) {
		sbd_conn_set_abort(c, NULL, NULL);
		if (r < 0)
			sbd_api_reply_image_error(c, r, "images", e->msg);
		else
			sbd_conn_reply_json(c, 200, &q->l.w); /* takes the buffer */
		sbd_conn_hold_done(c);
	} else if (r == 0) {
		jw_done(&q->l.w);
	}
	free(q);
}

static void api_images(struct sbd_conn *c)
{
	struct strata_err e = {0};
	struct images_req *q = calloc(1, sizeof(*q));
	if (!q) {
		sbd_conn_reply_error(c, 500, "internal", "out of memory");
		return;
	}
	*q = (struct images_req){.l = {.fn = images_listed}, .c = c};
	int r = sbd_images_list(sbd_conn_daemon(c), &q->l, &e);
	if (r != -EINPROGRESS) {
		free(q);
		sbd_api_reply_image_error(c, r, "images", e.msg);
		return;
	}
	sbd_conn_hold(c, true);
	sbd_conn_set_abort(c, images_abort, q);
}

/* GET /v1/tenant: who the caller is, its quotas and what it holds. */
static void api_tenant(struct sbd_conn *c)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	const struct sbd_who *who = sbd_conn_who(c);
	const struct sbd_tenant *tn =
	    who->tenant[0] ? sbd_tenants_find(&d->tenants, who->tenant) : NULL;
	struct sbd_tenant_usage u;
	sbd_tenant_usage(d, who, &u);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "tenant");
	jw_str(&w, who->tenant[0] ? who->tenant : NULL);
	jw_kbool(&w, "admin", who->admin);
	jw_key(&w, "quotas");
	jw_obj(&w);
	sbd_tenant_quotas_json(&w, tn);
	jw_obj_end(&w);
	jw_key(&w, "usage");
	jw_obj(&w);
	jw_kint(&w, "sandboxes", u.sandboxes);
	jw_key(&w, "cpu");
	jw_num(&w, u.cpu);
	jw_kint(&w, "memory_mb", u.memory_mb);
	jw_obj_end(&w);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

static void api_health(struct sbd_conn *c)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "status", "ok");
	jw_kint(&w, "api_version", 1);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

/* ---- routing ---------------------------------------------------------------- */

static bool is(const char *method, const char *want)
{
	return !strcmp(method, want);
}

static void route_sandbox(struct sbd_conn *c, const char *method, const char *rest,
			  const char *query, const char *body, size_t len)
{
	char id[SBD_ID_LEN + 2];
	const char *slash = strchrnul(rest, '/');
	size_t n = (size_t)(slash - rest);
	if (n == 0 || n > SBD_ID_LEN) {
		sbd_conn_reply_error(c, 404, "not_found", "no such sandbox");
		return;
	}
	memcpy(id, rest, n);
	id[n] = 0;
	struct sbd_sandbox *sb = sbd_registry_find(sbd_conn_daemon(c), id);
	/* Another tenant's sandbox is one that does not exist: same answer. */
	if (!sb || !sbd_who_sees(sbd_conn_who(c), sb)) {
		sbd_conn_reply_error(c, 404, "not_found", "no sandbox '%s'", id);
		return;
	}
	const char *action = *slash ? slash + 1 : "";
	if (!*action && is(method, "GET"))
		sbd_api_reply_sandbox(c, 200, sb);
	else if (!*action && is(method, "DELETE"))
		api_delete(c, sb);
	else if (!*action && is(method, "PATCH"))
		sbd_api_update(c, sb, body, len);
	else if (!strcmp(action, "network"))
		sbd_api_network(c, sb, method, "", query, body, len);
	else if (!strncmp(action, "network/", 8))
		sbd_api_network(c, sb, method, action + 8, query, body, len);
	else if (!strcmp(action, "metrics") && is(method, "GET"))
		sbd_api_metrics(c, sb);
	else if (!strcmp(action, "exec") && is(method, "POST"))
		sbd_api_exec(c, sb, body, len);
	else if (!strcmp(action, "execs") || !strncmp(action, "execs/", 6))
		sbd_api_execs(c, sb, method, action[5] ? action + 6 : "", query, body, len);
	else if (!strcmp(action, "pause") && is(method, "POST"))
		sbd_api_pause(c, sb, true);
	else if (!strcmp(action, "resume") && is(method, "POST"))
		sbd_api_pause(c, sb, false);
	else if (!strcmp(action, "files"))
		sbd_api_files(c, sb, method, "", query, body, len);
	else if (!strncmp(action, "files/", 6))
		sbd_api_files(c, sb, method, action + 6, query, body, len);
	else
		sbd_conn_reply_error(c, 404, "not_found", "no route %s /v1/sandboxes/%s/%s", method,
				     id, action);
}

void sbd_api_dispatch(struct sbd_conn *c, const char *method, const char *path, const char *query,
		      const char *body, size_t len)
{
	if (!strcmp(path, "/v1/health") && is(method, "GET"))
		api_health(c);
	else if ((!strcmp(path, "/v1/node") || !strcmp(path, "/v1/metrics")) && is(method, "GET"))
		api_node(c);
	else if (!strcmp(path, "/v1/tenant") && is(method, "GET"))
		api_tenant(c);
	else if (!strcmp(path, "/v1/capabilities") && is(method, "GET"))
		api_caps(c);
	else if (!strcmp(path, "/v1/images") && is(method, "GET"))
		api_images(c);
	else if (!strcmp(path, "/v1/sandboxes") && is(method, "POST"))
		sbd_api_create(c, query, body, len);
	else if (!strcmp(path, "/v1/sandboxes") && is(method, "GET"))
		api_list(c, query);
	else if (!strncmp(path, "/v1/sandboxes/", 14))
		route_sandbox(c, method, path + 14, query, body, len);
	else
		sbd_conn_reply_error(c, 404, "not_found", "no route %s %s", method, path);
}
