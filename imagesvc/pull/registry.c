/* registry.c — the OCI distribution API client of registry.h.
 *
 * A pull is: (1) GET /v2/ to settle the scheme (https, or http when the
 * registry does not speak TLS and insecure was asked for); (2) GET the
 * manifest with an Accept header naming OCI and Docker v2 manifests and
 * lists, following indexes to the linux/amd64 manifest and checking each
 * document against the digest that named it; (3) the config blob into memory
 * and the layer blobs into the stage, hashed as they arrive. Every request
 * goes through reg_get(), which answers an authentication challenge once
 * (Bearer token or Basic) and follows redirects; transient failures
 * (connection refused, reset or stalled, 5xx) are retried with exponential
 * backoff by the callers, a blob resuming where it broke off. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fs/cleanup.h"
#include "imagesvc/pull/http.h"
#include "imagesvc/pull/oci-internal.h"
#include "imagesvc/pull/registry.h"

#define REG_MAX_REDIRECTS 5
#define REG_MAX_TOKEN 8192
#define REG_MAX_TOKEN_BODY (64 * 1024)
#define REG_MAX_NAME 255
#define REG_MAX_INDEX_DEPTH 2
#define REG_ACCEPT                                                                                 \
	"Accept: " OCI_MT_MANIFEST ", " OCI_MT_INDEX ", " DOCKER_MT_MANIFEST ", " DOCKER_MT_LIST

struct registry {
	struct registry_opts o;
	struct oci_limits lim;
	struct http_client *http;
	struct registry_ref ref;
	bool tls;
	char host[HTTP_MAX_HOST + 8]; /* API host[:port] */
	char *auth;		      /* "Authorization: ..." or NULL */
	bool auth_tried;
};

/* --- references ------------------------------------------------------------ */

void registry_ref_done(struct registry_ref *r)
{
	free(r->scheme);
	free(r->registry);
	free(r->repo);
	free(r->tag);
	free(r->digest);
	memset(r, 0, sizeof(*r));
}

static bool repo_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > REG_MAX_NAME || s[0] == '/' || s[n - 1] == '/' || strstr(s, "//"))
		return false;
	for (; *s; s++)
		if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) ||
		      strchr("._-/", *s)))
			return false;
	return true;
}

static bool tag_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 128 || s[0] == '.' || s[0] == '-')
		return false;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || strchr("._-", *s)))
			return false;
	return true;
}

static int ref_split(char *s, struct registry_ref *r)
{
	char *at = strchr(s, '@');
	if (at) {
		*at = 0;
		if (oci_digest_check(at + 1) < 0 || !(r->digest = strdup(at + 1)))
			return -EINVAL;
	}
	char *slash = strchr(s, '/');
	const char *reg = "docker.io";
	if (slash && (memchr(s, '.', (size_t)(slash - s)) || memchr(s, ':', (size_t)(slash - s)) ||
		      !strncmp(s, "localhost/", 10))) {
		*slash = 0;
		reg = s;
		s = slash + 1;
	}
	char *colon = strrchr(s, ':');
	if (colon && !strchr(colon, '/')) {
		*colon = 0;
		if (!tag_ok(colon + 1) || !(r->tag = strdup(colon + 1)))
			return -EINVAL;
	} else if (!r->digest && !(r->tag = strdup("latest"))) {
		return -ENOMEM;
	}
	bool hub = !strcmp(reg, "docker.io");
	if (asprintf(&r->repo, "%s%s", hub && !strchr(s, '/') ? "library/" : "", s) < 0) {
		r->repo = NULL;
		return -ENOMEM;
	}
	r->registry = strdup(reg);
	if (!r->registry)
		return -ENOMEM;
	return repo_ok(r->repo) && strlen(r->registry) < HTTP_MAX_HOST ? 0 : -EINVAL;
}

int registry_ref_parse(const char *s, struct registry_ref *ret, struct strata_err *e)
{
	struct registry_ref r = {0};
	const char *in = s;
	if (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)) {
		size_t n = s[4] == 's' ? 5 : 4;
		r.scheme = strndup(s, n);
		s += n + 3;
	}
	_cleanup_free_ char *copy = strlen(s) < 1024 ? strdup(s) : NULL;
	int k = copy ? ref_split(copy, &r) : -EINVAL;
	if (k < 0) {
		registry_ref_done(&r);
		return strata_err_set(e, k, "invalid image reference '%.200s'", in);
	}
	*ret = r;
	return 0;
}

/* --- authentication ------------------------------------------------------- */

/* Reads one auth-param value (token or quoted-string) at *p. */
static int challenge_value(const char **p, char **ret)
{
	const char *s = *p;
	char buf[2048];
	size_t n = 0;
	if (*s == '"') {
		for (s++; *s && *s != '"'; s++) {
			if (*s == '\\' && s[1])
				s++;
			if (n + 1 >= sizeof(buf))
				return -EINVAL;
			buf[n++] = *s;
		}
		if (*s != '"')
			return -EINVAL;
		s++;
	} else {
		for (; *s && *s != ',' && *s != ' '; s++) {
			if (n + 1 >= sizeof(buf))
				return -EINVAL;
			buf[n++] = *s;
		}
	}
	buf[n] = 0;
	*p = s;
	*ret = strdup(buf);
	return *ret ? 0 : -ENOMEM;
}

static int challenge_params(const char *p, char **realm, char **service, char **scope)
{
	while (*p) {
		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		size_t kl = strcspn(p, "= ,");
		if (p[kl] != '=')
			return -EINVAL;
		char key[32];
		snprintf(key, sizeof(key), "%.*s", (int)STRATA_MIN(kl, sizeof(key) - 1), p);
		p += kl + 1;
		char *v = NULL;
		int r = challenge_value(&p, &v);
		if (r < 0)
			return r;
		char **slot = !strcasecmp(key, "realm")	    ? realm
			      : !strcasecmp(key, "service") ? service
			      : !strcasecmp(key, "scope")   ? scope
							    : NULL;
		if (slot && !*slot)
			*slot = v;
		else
			free(v);
	}
	return 0;
}

int registry_parse_challenge(const char *h, char *scheme, size_t cap, char **realm, char **service,
			     char **scope)
{
	*realm = *service = *scope = NULL;
	size_t sl = strcspn(h, " ");
	if (sl == 0 || sl >= cap)
		return -EINVAL;
	memcpy(scheme, h, sl);
	scheme[sl] = 0;
	int r = challenge_params(h + sl, realm, service, scope);
	if (r < 0) {
		free(*realm);
		free(*service);
		free(*scope);
		*realm = *service = *scope = NULL;
	}
	return r;
}

static int basic_header(const struct registry *reg, char **ret)
{
	_cleanup_free_ char *plain = NULL, *b64 = NULL;
	int n = asprintf(&plain, "%s:%s", reg->o.username, reg->o.password ? reg->o.password : "");
	if (n < 0 || n > 4096) {
		plain = NULL;
		return n < 0 ? -ENOMEM : -EINVAL;
	}
	b64 = malloc(4 * ((size_t)n / 3 + 1) + 1);
	if (!b64)
		return -ENOMEM;
	EVP_EncodeBlock((unsigned char *)b64, (unsigned char *)plain, n);
	if (asprintf(ret, "Authorization: Basic %s", b64) < 0)
		return -ENOMEM;
	return 0;
}

static char *url_escape(const char *s)
{
	char *out = malloc(strlen(s) * 3 + 1), *o = out;
	if (!out)
		return NULL;
	for (; *s; s++) {
		if (isalnum((unsigned char)*s) || strchr("-._~:/", *s))
			*o++ = *s;
		else
			o += sprintf(o, "%%%02X", (unsigned char)*s);
	}
	*o = 0;
	return out;
}

static bool token_ok(const char *t)
{
	size_t n = strlen(t);
	if (n == 0 || n > REG_MAX_TOKEN)
		return false;
	for (; *t; t++)
		if ((unsigned char)*t <= ' ' || (unsigned char)*t >= 0x7f)
			return false;
	return true;
}

static int parse_token(const char *body, size_t len, char **ret, struct strata_err *e)
{
	struct json_object *o = NULL;
	int r = oci_json_parse("token response", body, len, &o, e);
	if (r < 0)
		return r;
	struct json_object *v = NULL;
	const char *t = NULL;
	if ((json_object_object_get_ex(o, "token", &v) ||
	     json_object_object_get_ex(o, "access_token", &v)) &&
	    json_object_is_type(v, json_type_string))
		t = json_object_get_string(v);
	if (!t || !token_ok(t)) {
		json_object_put(o);
		return strata_err_set(e, -EACCES, "the token server sent no usable token");
	}
	r = asprintf(ret, "Authorization: Bearer %s", t) < 0 ? -ENOMEM : 0;
	json_object_put(o);
	return r;
}

static int fetch_token(struct registry *reg, const char *realm, const char *service,
		       const char *scope, struct strata_err *e)
{
	_cleanup_free_ char *svc = url_escape(service ? service : ""), *sc = NULL, *url = NULL,
			    *basic = NULL, *body = NULL;
	_cleanup_free_ char *dflt = NULL;
	if (!scope && asprintf(&dflt, "repository:%s:pull", reg->ref.repo) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	sc = url_escape(scope ? scope : dflt);
	if (!svc || !sc ||
	    asprintf(&url, "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?", svc,
		     sc) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	struct http_url u = {0};
	if (http_url_parse(url, &u) < 0)
		return strata_err_set(e, -EPROTO, "bad token realm '%.200s'", realm);
	int r = reg->o.username ? basic_header(reg, &basic) : 0;
	const char *hdrs[] = {basic, NULL};
	struct http_response resp = {0};
	if (r == 0)
		r = http_request(reg->http, "GET", &u, hdrs, &resp, e);
	http_url_done(&u);
	if (r < 0)
		return strata_err_set(e, r, "token server %.200s: %s", realm, strerror(-r));
	size_t len = 0;
	if (resp.status == 401 || resp.status == 403)
		r = strata_err_set(e, -EACCES, "token server refused the %s (HTTP %d)",
				   reg->o.username ? "credentials" : "anonymous request",
				   resp.status);
	else if (resp.status != 200)
		r = strata_err_set(e, -EPROTO, "token server answered HTTP %d", resp.status);
	else
		r = http_read_body_all(&resp, REG_MAX_TOKEN_BODY, &body, &len, e);
	http_response_done(&resp);
	if (r == 0) {
		free(reg->auth);
		reg->auth = NULL;
		r = parse_token(body, len, &reg->auth, e);
	}
	return r;
}

/* Answers the challenge of a 401 response by setting reg->auth. */
static int answer_challenge(struct registry *reg, const struct http_response *resp,
			    struct strata_err *e)
{
	const char *h = http_header(resp, "WWW-Authenticate");
	char scheme[16];
	_cleanup_free_ char *realm = NULL, *service = NULL, *scope = NULL;
	if (reg->auth_tried)
		return strata_err_set(e, -EACCES, "%s: authentication failed (HTTP 401)%s",
				      reg->host,
				      reg->o.username ? "" : "; the registry may need --user");
	reg->auth_tried = true;
	if (!h || registry_parse_challenge(h, scheme, sizeof(scheme), &realm, &service, &scope) < 0)
		return strata_err_set(e, -EACCES, "%s: HTTP 401 without a usable WWW-Authenticate",
				      reg->host);
	if (!strcasecmp(scheme, "Bearer") && realm)
		return fetch_token(reg, realm, service, scope, e);
	if (!strcasecmp(scheme, "Basic")) {
		if (!reg->o.username)
			return strata_err_set(
			    e, -EACCES, "%s: the registry wants credentials (--user)", reg->host);
		free(reg->auth);
		reg->auth = NULL;
		int r = basic_header(reg, &reg->auth);
		return r < 0 ? strata_err_set(e, r, "credentials: %s", strerror(-r)) : 0;
	}
	return strata_err_set(e, -EACCES, "%s: unsupported authentication scheme '%s'", reg->host,
			      scheme);
}

/* --- stored credentials ---------------------------------------------------- */

/* Strips a scheme and a path from a config.json auths key. */
static void auth_key_host(const char *key, char *buf, size_t cap)
{
	const char *s = strstr(key, "://") ? strstr(key, "://") + 3 : key;
	snprintf(buf, cap, "%.*s", (int)strcspn(s, "/"), s);
}

static int creds_from_entry(struct json_object *v, char **ret_user, char **ret_pass,
			    struct strata_err *e)
{
	const char *b64 = oci_jstr(v, "auth");
	const char *u = oci_jstr(v, "username"), *p = oci_jstr(v, "password");
	unsigned char plain[1024];
	if (b64) {
		size_t n = strlen(b64);
		if (n == 0 || n > 4 * (sizeof(plain) / 3) - 4)
			return strata_err_set(e, -EINVAL, "config.json: bad auth entry");
		int k = EVP_DecodeBlock(plain, (const unsigned char *)b64, (int)n);
		while (k > 0 && plain[k - 1] == 0)
			k--; /* base64 padding decodes to NULs */
		plain[k < 0 ? 0 : k] = 0;
		char *colon = strchr((char *)plain, ':');
		if (k <= 0 || !colon)
			return strata_err_set(e, -EINVAL, "config.json: bad auth entry");
		*colon = 0;
		u = (const char *)plain;
		p = colon + 1;
	}
	if (!u || !p)
		return -ENOENT;
	*ret_user = strdup(u);
	*ret_pass = strdup(p);
	explicit_bzero(plain, sizeof(plain));
	if (!*ret_user || !*ret_pass) {
		free(*ret_user);
		free(*ret_pass);
		return strata_err_set(e, -ENOMEM, "out of memory");
	}
	return 0;
}

int registry_creds_lookup(const char *path, const char *registry, char **ret_user, char **ret_pass,
			  struct strata_err *e)
{
	_cleanup_free_ char *dflt = NULL, *buf = NULL;
	const char *dir = getenv("DOCKER_CONFIG"), *home = getenv("HOME");
	if (!path && (dir || home) &&
	    asprintf(&dflt, "%s%s/config.json", dir ? dir : home, dir ? "" : "/.docker") < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	if (!(path = path ? path : dflt))
		return -ENOENT;
	size_t len = 0;
	struct strata_err ignore = {0};
	int r = oci_read_file_at(AT_FDCWD, path, 1 << 20, &buf, &len, &ignore);
	if (r < 0)
		return r == -ENOENT ? r : strata_err_set(e, r, "%s", ignore.msg);
	_cleanup_json_ struct json_object *o = NULL;
	struct json_object *auths;
	r = oci_json_parse(path, buf, len, &o, e);
	if (r < 0 || !json_object_object_get_ex(o, "auths", &auths) ||
	    !json_object_is_type(auths, json_type_object))
		return r < 0 ? r : -ENOENT;
	const char *want = strcmp(registry, "docker.io") ? registry : "index.docker.io";
	json_object_object_foreach(auths, key, v)
	{
		char host[HTTP_MAX_HOST];
		auth_key_host(key, host, sizeof(host));
		if (!strcmp(host, want))
			return creds_from_entry(v, ret_user, ret_pass, e);
	}
	return -ENOENT;
}

/* --- requests ----------------------------------------------------------------- */

static int reg_url(const struct registry *reg, const char *path, struct http_url *ret)
{
	_cleanup_free_ char *s = NULL;
	if (asprintf(&s, "%s://%s%s", reg->tls ? "https" : "http", reg->host, path) < 0)
		return -ENOMEM;
	return http_url_parse(s, ret);
}

static bool same_origin(const struct registry *reg, const struct http_url *u)
{
	char a[HTTP_MAX_HOST + 32], b[HTTP_MAX_HOST + 32];
	struct http_url base = {0};
	if (reg_url(reg, "/", &base) < 0)
		return false;
	http_url_origin(&base, a, sizeof(a));
	http_url_origin(u, b, sizeof(b));
	http_url_done(&base);
	return !strcmp(a, b);
}

static bool is_redirect(int status)
{
	return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

/* GETs path on the registry, answering one auth challenge and following
 * redirects. extra: an Accept or Range header line, or NULL. Returns 0 with
 * the final response (any status) or a negative errno. */
static int reg_get(struct registry *reg, const char *path, const char *extra,
		   struct http_response *ret, struct strata_err *e)
{
	struct http_url u = {0};
	int r = reg_url(reg, path, &u);
	if (r < 0)
		return strata_err_set(e, -EINVAL, "bad registry URL for %.200s", path);
	for (int hop = 0;; hop++) {
		bool ours = same_origin(reg, &u);
		const char *hdrs[] = {extra, ours ? reg->auth : NULL, NULL};
		if (!extra) {
			hdrs[0] = hdrs[1];
			hdrs[1] = NULL;
		}
		struct http_response resp = {0};
		r = http_request(reg->http, "GET", &u, hdrs, &resp, e);
		if (r < 0)
			break;
		if (resp.status == 401 && ours) {
			r = answer_challenge(reg, &resp, e);
			http_response_done(&resp);
			if (r < 0)
				break;
			continue;
		}
		if (ours)
			reg->auth_tried = false; /* a later 401 (an expired token) may retry */
		const char *loc = is_redirect(resp.status) ? http_header(&resp, "Location") : NULL;
		if (!loc) {
			*ret = resp;
			break;
		}
		struct http_url next = {0};
		r = hop >= REG_MAX_REDIRECTS ? -ELOOP : http_url_resolve(&u, loc, &next);
		http_response_done(&resp);
		if (r < 0) {
			r = strata_err_set(e, r == -ELOOP ? -ELOOP : -EPROTO,
					   r == -ELOOP ? "more than %d redirects"
						       : "bad redirect (%d)",
					   REG_MAX_REDIRECTS);
			break;
		}
		http_url_done(&u);
		u = next;
	}
	http_url_done(&u);
	return r;
}

/* Maps an unexpected HTTP status to an errno and a message. */
static int status_error(struct registry *reg, int status, const char *what, struct strata_err *e)
{
	if (status == 404)
		return strata_err_set(e, -ENOENT, "%s: not found in %s/%s (HTTP 404)", what,
				      reg->host, reg->ref.repo);
	if (status == 401 || status == 403)
		return strata_err_set(e, -EACCES, "%s: access denied (HTTP %d)", what, status);
	if (status >= 500)
		return strata_err_set(e, -EAGAIN, "%s: registry error (HTTP %d)", what, status);
	return strata_err_set(e, -EPROTO, "%s: unexpected HTTP %d", what, status);
}

static bool retryable(int r)
{
	return http_error_retryable(r) || r == -EAGAIN;
}

static void backoff(const struct registry *reg, int attempt)
{
	long ms = (long)reg->o.backoff_ms << STRATA_MIN(attempt, 10);
	ms = STRATA_MIN(ms, 5000L);
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* GETs a small document (manifest or config) into memory. */
static int get_small(struct registry *reg, const char *path, const char *accept, size_t max,
		     const char *what, char **ret, size_t *ret_len, char **ret_ctype,
		     struct strata_err *e)
{
	int r = 0;
	for (int attempt = 0; attempt < reg->o.max_attempts; attempt++) {
		struct strata_err ae = {0};
		struct http_response resp = {0};
		if (attempt > 0)
			backoff(reg, attempt - 1);
		r = reg_get(reg, path, accept, &resp, &ae);
		if (r == 0 && resp.status != 200)
			r = status_error(reg, resp.status, what, &ae);
		if (r == 0)
			r = http_read_body_all(&resp, max, ret, ret_len, &ae);
		if (r == 0 && ret_ctype) {
			const char *ct = http_header(&resp, "Content-Type");
			*ret_ctype = ct ? strndup(ct, strcspn(ct, ";")) : NULL;
		}
		http_response_done(&resp);
		if (r == 0 || !retryable(r) || attempt + 1 == reg->o.max_attempts) {
			bool named = !strncmp(ae.msg, what, strlen(what));
			if (r < 0)
				strata_err_set(e, r, "%s%s%s%s", named ? "" : what,
					       named ? "" : ": ", ae.msg,
					       attempt ? " (gave up after retries)" : "");
			return r;
		}
	}
	return r;
}

/* --- manifests ------------------------------------------------------------------ */

static int get_manifest(struct registry *reg, const char *ref, const struct oci_desc *want,
			char **ret, size_t *ret_len, char **ret_ctype, struct strata_err *e)
{
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "/v2/%s/manifests/%s", reg->ref.repo, ref) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	char what[320];
	snprintf(what, sizeof(what), "manifest %s:%s", reg->ref.repo, ref);
	int r = get_small(reg, path, REG_ACCEPT, reg->lim.max_manifest, what, ret, ret_len,
			  ret_ctype, e);
	if (r < 0)
		return r;
	char got[OCI_DIGEST_MAX];
	oci_sha256(*ret, *ret_len, got);
	if (want)
		r = oci_verify_bytes(what, *ret, *ret_len, want->digest, want->size, e);
	else if (!strncmp(ref, "sha256:", 7) && strcmp(ref, got) != 0)
		r = strata_err_set(e, -EBADMSG, "%s: content has digest %s", what, got);
	if (r < 0) {
		free(TAKE_PTR(*ret));
		free(TAKE_PTR(*ret_ctype));
	}
	return r;
}

/* Resolves the reference to an image manifest, through indexes. */
static int resolve_manifest(struct registry *reg, char **ret, size_t *ret_len, struct strata_err *e)
{
	const char *ref = reg->ref.digest ? reg->ref.digest : reg->ref.tag;
	_cleanup_free_ char *buf = NULL, *ctype = NULL;
	size_t len = 0;
	int r = get_manifest(reg, ref, NULL, &buf, &len, &ctype, e);
	for (int depth = 0; r == 0; depth++) {
		enum oci_doc_kind kind;
		r = oci_doc_kind(buf, len, ctype, &kind, e);
		if (r < 0)
			return r;
		if (kind == OCI_DOC_MANIFEST) {
			*ret = TAKE_PTR(buf);
			*ret_len = len;
			return 0;
		}
		_cleanup_free_ struct oci_desc *d = NULL;
		size_t n = 0, pick = 0;
		r = oci_parse_index(buf, len, &reg->lim, &d, &n, e);
		if (r == 0)
			r = oci_select(d, n, NULL, &pick, e);
		if (r == 0 && depth >= REG_MAX_INDEX_DEPTH)
			r = strata_err_set(e, -ELOOP, "indexes nested too deep");
		if (r < 0)
			return r;
		free(TAKE_PTR(buf));
		free(TAKE_PTR(ctype));
		r = get_manifest(reg, d[pick].digest, &d[pick], &buf, &len, &ctype, e);
	}
	return r;
}

/* --- blobs ------------------------------------------------------------------------ */

struct blob_dl {
	const struct oci_desc *d;
	const char *what;
	int fd;
	struct oci_hash h;
	uint64_t have;
};

static int restart_blob(struct blob_dl *b)
{
	char scratch[OCI_DIGEST_MAX];
	oci_hash_final(&b->h, scratch); /* resets the context */
	b->have = 0;
	if (ftruncate(b->fd, 0) < 0 || lseek(b->fd, 0, SEEK_SET) < 0)
		return -errno;
	return 0;
}

/* Checks a 206 answer continues at b->have ("bytes START-END/TOTAL"). */
static bool range_continues(const struct http_response *resp, const struct blob_dl *b)
{
	const char *cr = http_header(resp, "Content-Range");
	unsigned long long start;
	return cr && sscanf(cr, "bytes %llu-", &start) == 1 && start == b->have;
}

static int blob_body(struct blob_dl *b, struct http_response *resp, struct strata_err *e)
{
	if (resp->has_length && b->have + resp->length != b->d->size)
		return strata_err_set(e, -EBADMSG,
				      "%s: the registry sends %llu bytes, the manifest "
				      "says %llu",
				      b->what, (unsigned long long)(b->have + resp->length),
				      (unsigned long long)b->d->size);
	enum { BUF = 256 * 1024 };
	_cleanup_free_ char *buf = malloc(BUF);
	if (!buf)
		return strata_err_set(e, -ENOMEM, "out of memory");
	for (;;) {
		ssize_t k = http_read_body(resp, buf, BUF, e);
		if (k < 0)
			return (int)k;
		if (k == 0)
			break;
		if (b->have + (uint64_t)k > b->d->size)
			return strata_err_set(e, -EBADMSG,
					      "%s: longer than the %llu bytes the manifest "
					      "says",
					      b->what, (unsigned long long)b->d->size);
		for (ssize_t off = 0; off < k;) {
			ssize_t w = write(b->fd, buf + off, (size_t)(k - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				return strata_err_set(e, -errno, "%s: write: %s", b->what,
						      strerror(errno));
			off += w;
		}
		oci_hash_update(&b->h, buf, (size_t)k);
		b->have += (uint64_t)k;
	}
	if (b->have != b->d->size)
		return strata_err_set(e, -ECONNRESET, "%s: the body ended after %llu of %llu bytes",
				      b->what, (unsigned long long)b->have,
				      (unsigned long long)b->d->size);
	return 0;
}

static int blob_attempt(struct registry *reg, struct blob_dl *b, struct strata_err *e)
{
	_cleanup_free_ char *path = NULL;
	char range[64];
	snprintf(range, sizeof(range), "Range: bytes=%llu-", (unsigned long long)b->have);
	if (asprintf(&path, "/v2/%s/blobs/%s", reg->ref.repo, b->d->digest) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	struct http_response resp = {0};
	int r = reg_get(reg, path, b->have ? range : NULL, &resp, e);
	if (r < 0)
		return r;
	if (resp.status == 206 && b->have > 0 && range_continues(&resp, b))
		r = 0;
	else if (resp.status == 200)
		r = restart_blob(b);
	else
		r = status_error(reg, resp.status, b->what, e);
	if (r == 0)
		r = blob_body(b, &resp, e);
	http_response_done(&resp);
	return r;
}

/* Downloads blob d into fd, retrying transient failures, and verifies it. */
static int get_blob(struct registry *reg, const struct oci_desc *d, const char *what, int fd,
		    struct strata_err *e)
{
	struct blob_dl b = {.d = d, .what = what, .fd = fd};
	if (oci_hash_init(&b.h) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	int r = 0, attempt;
	struct strata_err ae = {0};
	for (attempt = 0; attempt < reg->o.max_attempts; attempt++) {
		if (attempt > 0)
			backoff(reg, attempt - 1);
		ae = (struct strata_err){0};
		r = blob_attempt(reg, &b, &ae);
		if (r == 0 || !retryable(r))
			break;
	}
	char got[OCI_DIGEST_MAX];
	oci_hash_final(&b.h, got);
	oci_hash_done(&b.h);
	if (r < 0 && retryable(r))
		return strata_err_set(
		    e, r, "%s: gave up after %d attempts (%llu of %llu bytes): %s", what, attempt,
		    (unsigned long long)b.have, (unsigned long long)d->size, ae.msg);
	if (r < 0)
		return strata_err_set(e, r, "%s", ae.msg);
	if (strcmp(got, d->digest) != 0)
		return strata_err_set(e, -EBADMSG, "%s: content has digest %s, expected %s", what,
				      got, d->digest);
	return 0;
}

static int get_config(struct registry *reg, const struct oci_desc *d, char **ret, size_t *ret_len,
		      struct strata_err *e)
{
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "/v2/%s/blobs/%s", reg->ref.repo, d->digest) < 0)
		return strata_err_set(e, -ENOMEM, "out of memory");
	int r = get_small(reg, path, NULL, reg->lim.max_config, "config", ret, ret_len, NULL, e);
	if (r == 0)
		r = oci_verify_bytes("config", *ret, *ret_len, d->digest, d->size, e);
	if (r < 0)
		free(TAKE_PTR(*ret));
	return r;
}

/* --- the pull -------------------------------------------------------------------- */

/* Settles the scheme with GET /v2/ (any HTTP answer will do). */
static int reg_ping(struct registry *reg, struct strata_err *e)
{
	reg->tls = !reg->ref.scheme || !strcmp(reg->ref.scheme, "https");
	for (int attempt = 0;; attempt++) {
		struct strata_err ae = {0};
		struct http_url u = {0};
		struct http_response resp = {0};
		int r = reg_url(reg, "/v2/", &u);
		if (r == 0)
			r = http_request(reg->http, "GET", &u, NULL, &resp, &ae);
		http_url_done(&u);
		http_response_done(&resp);
		if (r == -EPROTO && reg->tls && reg->o.insecure && !reg->ref.scheme) {
			reg->tls = false; /* an insecure registry that speaks plain http */
			continue;
		}
		bool plain = r == -EPROTO && reg->tls && strstr(ae.msg, "wrong version number");
		if (r == 0 || !retryable(r) || attempt + 1 >= reg->o.max_attempts)
			return r < 0 ? strata_err_set(e, r, "registry %s: %s%s", reg->host, ae.msg,
						      plain ? " (it may speak plain http: use "
							      "http://REF or --insecure)"
							    : "")
				     : 0;
		backoff(reg, attempt);
	}
}

static int pull_layers(struct registry *reg, struct oci_stage *st, const struct oci_manifest *m,
		       struct strata_err *e)
{
	for (size_t i = 0; i < m->n_layers; i++) {
		char what[128];
		snprintf(what, sizeof(what), "layer %zu (%s)", i, m->layers[i].digest);
		_cleanup_close_ int fd = -1;
		int r = oci_stage_layer_open(st, i, &fd, e);
		if (r == 0)
			r = get_blob(reg, &m->layers[i], what, fd, e);
		if (r < 0)
			return r;
	}
	return 0;
}

static int do_pull(struct registry *reg, const char *ref, const char *stage_dir,
		   struct strata_err *e)
{
	_cleanup_free_ char *man = NULL, *cfg = NULL, *source = NULL;
	size_t man_len = 0, cfg_len = 0;
	struct oci_manifest m = {0};
	struct oci_config c = {0};
	struct oci_stage st = {.dirfd = -1};
	int r = reg_ping(reg, e);
	if (r == 0)
		r = resolve_manifest(reg, &man, &man_len, e);
	if (r == 0)
		r = oci_parse_manifest(man, man_len, &reg->lim, &m, e);
	if (r == 0)
		r = get_config(reg, &m.config, &cfg, &cfg_len, e);
	if (r == 0)
		r = oci_parse_config(cfg, cfg_len, m.n_layers, &c, NULL, e);
	if (r == 0)
		r = oci_stage_begin(stage_dir, cfg, cfg_len, &st, e);
	if (r == 0)
		r = pull_layers(reg, &st, &m, e);
	if (r == 0 && asprintf(&source, "registry:%s\n", ref) < 0) {
		source = NULL;
		r = strata_err_set(e, -ENOMEM, "out of memory");
	}
	if (r == 0) {
		snprintf(st.name, sizeof(st.name), "%s/%s%s%s", reg->ref.registry, reg->ref.repo,
			 reg->ref.digest ? "@" : ":",
			 reg->ref.digest ? reg->ref.digest : reg->ref.tag);
		r = oci_stage_commit(&st, man, man_len, source, e);
	}
	oci_stage_abort(&st);
	oci_config_done(&c);
	oci_manifest_done(&m);
	return r;
}

static int registry_init(struct registry *reg, const char *ref, const struct registry_opts *o,
			 struct strata_err *e)
{
	reg->o = *o;
	if (reg->o.max_attempts <= 0)
		reg->o.max_attempts = 4;
	if (reg->o.backoff_ms <= 0)
		reg->o.backoff_ms = 250;
	if (o->lim)
		reg->lim = *o->lim;
	else
		oci_limits_default(&reg->lim);
	int r = registry_ref_parse(ref, &reg->ref, e);
	if (r < 0)
		return r;
	snprintf(reg->host, sizeof(reg->host), "%s",
		 !strcmp(reg->ref.registry, "docker.io") ? "registry-1.docker.io"
							 : reg->ref.registry);
	struct http_opts ho = {.insecure = o->insecure,
			       .ca_file = o->ca_file,
			       .timeout_ms = o->timeout_ms,
			       .max_header_bytes = o->max_header_bytes};
	return http_client_new(&ho, &reg->http, e);
}

int registry_pull(const char *ref, const char *stage_dir, const struct registry_opts *o,
		  struct strata_err *e)
{
	struct registry reg = {0};
	int r = registry_init(&reg, ref, o, e);
	if (r == 0)
		r = do_pull(&reg, ref, stage_dir, e);
	registry_ref_done(&reg.ref);
	http_client_free(reg.http);
	free(reg.auth);
	return r;
}
