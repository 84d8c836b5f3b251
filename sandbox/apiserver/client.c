/* client.c — one client connection of strata-apiserver: its requests in
 * order (keep-alive, pipelining), who each is, and where it goes.
 *
 * Who: `Authorization: Bearer T` with T the --token (the operator, admin)
 * or a tenant's token of the tenants file (read again within a second of a
 * change, as sandboxd does: auth.c there); anything else is 401 and the
 * connection closed, before the body is read. The header goes on to the
 * node unchanged, and the node decides again what the caller may see: the
 * nodes and the apiservers share the operator's token and the tenants
 * file (`strata up` gives them the same home).
 *
 * Where (API.md "Cluster"): /v1/health and /v1/node are answered here
 * (the node table), POST and GET /v1/sandboxes by create.c and list.c,
 * /v1/sandboxes/{id}... go to the node the id names, and the rest
 * (capabilities, images, tenant) to any live node. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fs/clock.h"
#include "fs/log.h"
#include "sandbox/apiserver/apiserver.h"

#define CLIENT_IDLE_S 60

void api_reply_raw(struct api_client *c, int status, const char *body, size_t len)
{
	struct jw h;
	jw_init(&h);
	sbd_http_head(&h, status, "application/json", (long long)len, !c->close);
	jw_append(&h, body, len); /* one send: the client never sees a head alone */
	if (h.err || send_all(c->in.fd, h.buf, h.len) < 0)
		c->close = true;
	jw_done(&h);
}

void api_reply_json(struct api_client *c, int status, struct jw *w)
{
	jw_append(w, "\n", 1);
	if (w->err) {
		jw_done(w);
		api_reply_error(c, 500, "internal", "out of memory");
		return;
	}
	api_reply_raw(c, status, w->buf, w->len);
	jw_done(w);
}

void api_reply_error(struct api_client *c, int status, const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct jw w;
	jw_init(&w);
	jw_error_doc(&w, code, msg);
	if (!w.err)
		api_reply_raw(c, status, w.buf, w.len);
	jw_done(&w);
}

const char *api_req_header(const struct api_req *r, const char *name, char *buf, size_t cap)
{
	size_t k = strlen(name);
	const char *p = memchr(r->head, '\n', r->h.head_len), *end = r->head + r->h.head_len;
	while (p && ++p < end) {
		const char *e = memchr(p, '\n', (size_t)(end - p));
		if (!e)
			break;
		if ((size_t)(e - p) > k && !strncasecmp(p, name, k) && p[k] == ':') {
			const char *v = p + k + 1;
			while (v < e && (*v == ' ' || *v == '\t'))
				v++;
			size_t n = (size_t)(e - v);
			while (n && (v[n - 1] == '\r' || v[n - 1] == ' '))
				n--;
			if (n >= cap)
				return NULL;
			memcpy(buf, v, n);
			buf[n] = 0;
			return buf;
		}
		p = e;
	}
	return NULL;
}

int api_req_body(struct api_client *c, const struct api_req *r, size_t max, char **ret,
		 size_t *ret_len)
{
	if (r->h.chunked || r->h.content_length > max) {
		api_reply_error(c, r->h.chunked ? 501 : 413,
				r->h.chunked ? "unsupported" : "too_large",
				r->h.chunked ? "a chunked body is not taken here"
					     : "request body over %zu bytes",
				max);
		c->close = true;
		return -EFBIG;
	}
	ibuf_consume(&c->in, r->h.head_len);
	int e = read_body(&c->in, BODY_LEN, r->h.content_length, max, ret, ret_len);
	if (e < 0)
		c->close = true;
	return e;
}

/* The tenants file as it is now (read again when it changed, at most once
 * a second). */
static void tenants_reload(struct apiserver *a)
{
	int64_t now = strata_mono_ms();
	struct stat st;
	if (!a->cfg.tenants_path || now - a->tenants_checked_ms < 1000)
		return;
	a->tenants_checked_ms = now;
	if (stat(a->cfg.tenants_path, &st) < 0) {
		sbd_tenants_done(&a->tenants);
		memset(&a->tenants_st, 0, sizeof(a->tenants_st));
		return;
	}
	if (st.st_ino == a->tenants_st.st_ino && st.st_size == a->tenants_st.st_size &&
	    st.st_mtim.tv_sec == a->tenants_st.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == a->tenants_st.st_mtim.tv_nsec)
		return;
	struct sbd_tenants t = {0};
	struct strata_err e = {0};
	if (sbd_tenants_load(a->cfg.tenants_path, &t, &st, &e) < 0) {
		log_warn("tenants file %s: %s (the last one read is kept)", a->cfg.tenants_path,
			 e.msg);
		return;
	}
	sbd_tenants_done(&a->tenants);
	a->tenants = t;
	a->tenants_st = st;
}

/* Fills r's caller from its Authorization header. Returns false (401). */
static bool authenticate(struct apiserver *a, struct api_req *r)
{
	const char *tok = r->h.auth && !strncmp(r->h.auth, "Bearer ", 7) ? r->h.auth + 7 : NULL;
	if (!tok || strlen(r->h.auth) >= sizeof(r->auth))
		return false;
	snprintf(r->auth, sizeof(r->auth), "%s", r->h.auth);
	pthread_mutex_lock(&a->tmu);
	tenants_reload(a);
	const struct sbd_tenant *tn = sbd_tenants_match(&a->tenants, tok);
	if (tn) {
		r->admin = tn->admin;
		snprintf(r->tenant, sizeof(r->tenant), "%s", tn->name);
	}
	pthread_mutex_unlock(&a->tmu);
	if (tn)
		return true;
	r->admin = a->cfg.token && sbd_secret_equal(tok, a->cfg.token);
	return r->admin;
}

static void health(struct api_client *c, const struct api_req *r)
{
	uint32_t ids[1], lost[1];
	char addrs[1][API_ADDR_MAX];
	int nlost;
	struct jw w;
	(void)r;
	int live = api_nodes_list(c->a->nodes, ids, addrs, 1, lost, &nlost, 1);
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "status", "ok");
	jw_kint(&w, "api_version", 1);
	jw_kbool(&w, "apiserver", true);
	jw_kbool(&w, "nodes_live", live > 0);
	jw_obj_end(&w);
	api_reply_json(c, 200, &w);
}

static void node_view(struct api_client *c)
{
	struct apiserver *a = c->a;
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kbool(&w, "apiserver", true);
	jw_kint(&w, "creates_total", (int64_t)atomic_load(&a->creates_total));
	jw_kint(&w, "proxied_total", (int64_t)atomic_load(&a->proxied_total));
	jw_kint(&w, "queued_total", (int64_t)atomic_load(&a->queued_total));
	jw_kint(&w, "no_capacity_total", (int64_t)atomic_load(&a->no_capacity_total));
	jw_kint(&w, "connections", atomic_load(&a->conns));
	api_nodes_json(a->nodes, &w);
	jw_obj_end(&w);
	api_reply_json(c, 200, &w);
}

/* Anything not about one sandbox: to a live node (the first of the
 * table's; they answer alike). */
static void to_any_node(struct api_client *c, const struct api_req *r)
{
	uint32_t ids[8], lost[8];
	char addrs[8][API_ADDR_MAX];
	int nlost, status;
	int n = api_nodes_list(c->a->nodes, ids, addrs, 8, lost, &nlost, 8);
	for (int i = 0; i < n; i++)
		if (api_proxy(c, r, addrs[i], &status) == 0)
			return;
	api_reply_error(c, 503, "no_capacity", "no sandbox node is live in the cluster");
	c->close = true; /* its body, if any, was not read */
}

static void dispatch(struct api_client *c, struct api_req *r)
{
	const char *m = r->h.method, *p = r->h.path;
	if (!strcmp(p, "/v1/health") && !strcmp(m, "GET")) {
		ibuf_consume(&c->in, r->h.head_len);
		health(c, r);
	} else if ((!strcmp(p, "/v1/node") || !strcmp(p, "/v1/metrics")) && !strcmp(m, "GET")) {
		ibuf_consume(&c->in, r->h.head_len);
		if (r->admin)
			node_view(c);
		else
			api_reply_error(c, 403, "admin_only",
					"the node table is for administrators");
	} else if (!strcmp(p, "/v1/sandboxes") && !strcmp(m, "POST")) {
		api_create(c, r);
	} else if (!strcmp(p, "/v1/sandboxes") && !strcmp(m, "GET")) {
		ibuf_consume(&c->in, r->h.head_len);
		api_list(c, r);
	} else if (!strncmp(p, "/v1/sandboxes/", 14)) {
		api_route_sandbox(c, r, p + 14);
	} else {
		to_any_node(c, r);
	}
}

/* Reads the next request head into *r. Returns 0, -ECONNRESET (closed),
 * or -errno after answering a refused head. */
static int next_head(struct api_client *c, struct api_req *r)
{
	struct strata_err e = {0};
	memset(r, 0, sizeof(*r));
	for (;;) {
		int k = sbd_http_parse_head(c->in.b, c->in.len, SIZE_MAX / 2, &r->h, &e);
		if (k == 0) {
			r->head = c->in.b;
			return 0;
		}
		if (k != -EAGAIN) {
			api_reply_error(c, r->h.status ? r->h.status : 400, "bad_request", "%s",
					e.msg);
			return k;
		}
		ssize_t n = ibuf_fill(&c->in);
		if (n <= 0)
			return n == 0 ? -ECONNRESET : (int)n;
	}
}

void api_client_serve(struct apiserver *a, int fd, const char *peer)
{
	struct api_client c = {.a = a};
	struct timeval tv = {.tv_sec = CLIENT_IDLE_S};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	snprintf(c.peer, sizeof(c.peer), "%s", peer);
	if (ibuf_init(&c.in, fd, 4 * SBD_HTTP_MAX_HEAD) < 0) {
		close(fd);
		return;
	}
	while (!c.close) {
		struct api_req r;
		if (next_head(&c, &r) < 0)
			break;
		if (!authenticate(a, &r)) {
			c.close = true;
			api_reply_error(&c, 401, "unauthorized", "missing or wrong bearer token");
		} else {
			if (!r.h.keep_alive)
				c.close = true;
			dispatch(&c, &r);
		}
		sbd_http_req_done(&r.h);
	}
	shutdown(fd, SHUT_WR);
	ibuf_done(&c.in);
	close(fd);
}
