/* tenants.c — the tenants file (tenants.h): its codec, its atomic write,
 * and tokens (made from getrandom, stored as a salted SHA-256, matched in
 * constant time). A library of its own (strata_tenants) so that the CLI
 * links it without the rest of sandboxd. */
#include "sandbox/sandboxd/tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/json.h"

bool sbd_tenant_name_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > SBD_TENANT_NAME_MAX || name[0] == '-' || name[0] == '_')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return false;
	}
	return true;
}

static void hex_encode(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = 0;
}

static int hex_value(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes exactly n bytes of lower-case hex. */
static bool hex_decode(const char *s, uint8_t *out, size_t n)
{
	if (!s || strlen(s) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

/* SHA-256 of a || b. */
static bool sha256_two(const void *a, size_t an, const void *b, size_t bn,
		       uint8_t out[SBD_TENANT_HASH])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned len = 0;
	bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
		  EVP_DigestUpdate(ctx, a, an) && EVP_DigestUpdate(ctx, b, bn) &&
		  EVP_DigestFinal_ex(ctx, out, &len) && len == SBD_TENANT_HASH;
	EVP_MD_CTX_free(ctx);
	return ok;
}

bool sbd_secret_equal(const char *a, const char *b)
{
	uint8_t ha[SBD_TENANT_HASH], hb[SBD_TENANT_HASH];
	if (!sha256_two("", 0, a, strlen(a), ha) || !sha256_two("", 0, b, strlen(b), hb))
		return false;
	return CRYPTO_memcmp(ha, hb, sizeof(ha)) == 0;
}

/* ---- the table ------------------------------------------------------------ */

void sbd_tenants_done(struct sbd_tenants *t)
{
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

struct sbd_tenant *sbd_tenants_find(const struct sbd_tenants *t, const char *name)
{
	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->v[i].name, name))
			return &t->v[i];
	return NULL;
}

int sbd_tenants_add(struct sbd_tenants *t, const struct sbd_tenant *tn)
{
	if (!sbd_tenant_name_valid(tn->name))
		return -EINVAL;
	if (sbd_tenants_find(t, tn->name))
		return -EEXIST;
	if (t->n >= SBD_TENANTS_MAX)
		return -E2BIG;
	struct sbd_tenant *v = realloc(t->v, (t->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	t->v = v;
	v[t->n++] = *tn;
	return 0;
}

int sbd_tenants_remove(struct sbd_tenants *t, const char *name)
{
	struct sbd_tenant *tn = sbd_tenants_find(t, name);
	if (!tn)
		return -ENOENT;
	size_t i = (size_t)(tn - t->v);
	memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof(*tn));
	t->n--;
	return 0;
}

/* ---- tokens ---------------------------------------------------------------- */

int sbd_tenant_new_token(struct sbd_tenant *tn, char ret_token[SBD_TENANT_TOKEN_MAX])
{
	uint8_t secret[SBD_TENANT_SECRET], salt[SBD_TENANT_SALT];
	if (getrandom(secret, sizeof(secret), 0) != (ssize_t)sizeof(secret) ||
	    getrandom(salt, sizeof(salt), 0) != (ssize_t)sizeof(salt))
		return errno ? -errno : -EIO;
	char hex[2 * SBD_TENANT_SECRET + 1];
	hex_encode(secret, sizeof(secret), hex);
	explicit_bzero(secret, sizeof(secret));
	char token[SBD_TENANT_TOKEN_MAX];
	snprintf(token, sizeof(token), "%s.%s", tn->name, hex);
	explicit_bzero(hex, sizeof(hex));
	uint8_t hash[SBD_TENANT_HASH];
	if (!sha256_two(salt, sizeof(salt), token, strlen(token), hash)) {
		explicit_bzero(token, sizeof(token));
		return -EIO;
	}
	memcpy(tn->salt, salt, sizeof(salt));
	memcpy(tn->hash, hash, sizeof(hash));
	memcpy(ret_token, token, sizeof(token));
	explicit_bzero(token, sizeof(token));
	return 0;
}

const struct sbd_tenant *sbd_tenants_match(const struct sbd_tenants *t, const char *token)
{
	const char *dot = strchr(token, '.');
	size_t nl = dot ? (size_t)(dot - token) : 0;
	if (!dot || nl == 0 || nl > SBD_TENANT_NAME_MAX)
		return NULL;
	char name[SBD_TENANT_NAME_MAX + 1];
	memcpy(name, token, nl);
	name[nl] = 0;
	const struct sbd_tenant *tn = sbd_tenants_find(t, name);
	uint8_t hash[SBD_TENANT_HASH];
	if (!tn || !sha256_two(tn->salt, sizeof(tn->salt), token, strlen(token), hash))
		return NULL;
	return CRYPTO_memcmp(hash, tn->hash, sizeof(hash)) == 0 ? tn : NULL;
}

/* ---- the file ----------------------------------------------------------------- */

/* A quota: null or absent is no limit. */
static bool quota_int(const struct json *j, const char *key, int64_t *ret)
{
	const struct json *v = json_get(j, key);
	*ret = -1;
	return !v || v->type == JSON_NULL || json_int(v, 0, INT64_MAX / 4, ret);
}

static int parse_one(const struct json *o, struct sbd_tenant *tn, struct strata_err *e)
{
	const char *name = json_cstr(json_get(o, "name"));
	if (o->type != JSON_OBJ || !name || !sbd_tenant_name_valid(name))
		return strata_err_set(e, -EINVAL, "an entry without a valid name");
	snprintf(tn->name, sizeof(tn->name), "%s", name);
	const struct json *admin = json_get(o, "admin"), *cpu = json_get(o, "cpu");
	tn->admin = admin && admin->type == JSON_BOOL && admin->b;
	tn->cpu = -1;
	tn->created_at = 0;
	json_int(json_get(o, "created_at"), 0, INT64_MAX, &tn->created_at);
	if (!hex_decode(json_cstr(json_get(o, "salt")), tn->salt, sizeof(tn->salt)) ||
	    !hex_decode(json_cstr(json_get(o, "hash")), tn->hash, sizeof(tn->hash)))
		return strata_err_set(e, -EINVAL, "tenant '%s': salt or hash is not hex", name);
	if (cpu && cpu->type == JSON_NUM && cpu->num >= 0 && cpu->num <= 1e9)
		tn->cpu = cpu->num;
	else if (cpu && cpu->type != JSON_NULL)
		return strata_err_set(e, -EINVAL, "tenant '%s': cpu is not a number of cores",
				      name);
	if (!quota_int(o, "max_sandboxes", &tn->max_sandboxes) ||
	    !quota_int(o, "memory_mb", &tn->memory_mb))
		return strata_err_set(e, -EINVAL,
				      "tenant '%s': max_sandboxes and memory_mb must be integers "
				      ">= 0 or null",
				      name);
	return 0;
}

int sbd_tenants_parse(const char *buf, size_t len, struct sbd_tenants *ret, struct strata_err *e)
{
	char err[160];
	*ret = (struct sbd_tenants){0};
	struct json *j = json_parse(buf, len, err, sizeof(err));
	if (!j)
		return strata_err_set(e, -EINVAL, "malformed JSON %s", err);
	const struct json *list = json_get(j, "tenants");
	int64_t version = 0;
	int r = 0;
	if (!json_int(json_get(j, "version"), 1, 1, &version) || !list || list->type != JSON_ARR)
		r = strata_err_set(e, -EINVAL, "not a tenants file of version 1");
	for (const struct json *o = list ? list->child : NULL; r == 0 && o; o = o->next) {
		struct sbd_tenant tn;
		if ((r = parse_one(o, &tn, e)) < 0)
			break;
		if ((r = sbd_tenants_add(ret, &tn)) < 0) /* a file that says so is malformed */
			r = strata_err_set(e, r == -ENOMEM ? r : -EINVAL, "tenant '%s': %s",
					   tn.name, r == -EEXIST ? "listed twice" : strerror(-r));
	}
	json_free(j);
	return r;
}

int sbd_tenants_load(const char *path, struct sbd_tenants *ret, struct stat *ret_st,
		     struct strata_err *e)
{
	*ret = (struct sbd_tenants){0};
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0) {
		int r = -errno;
		return r == -ENOENT ? r : strata_err_set(e, r, "%s: %s", path, strerror(-r));
	}
	if (fstat(fd, &st) < 0)
		return strata_err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode) || (st.st_mode & 022) ||
	    (st.st_uid != 0 && st.st_uid != geteuid()))
		return strata_err_set(e, -EPERM,
				      "%s: refused: not a regular file owned by root or us and "
				      "writable by its owner only (chmod 600)",
				      path);
	if (st.st_size > (off_t)SBD_TENANTS_FILE_MAX)
		return strata_err_set(e, -EFBIG, "%s: over %u bytes", path, SBD_TENANTS_FILE_MAX);
	_cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return strata_err_set(e, n < 0 ? -errno : -EIO, "%s: short read", path);
		got += (size_t)n;
	}
	int r = sbd_tenants_parse(buf, got, ret, e);
	if (r < 0)
		return strata_err_set(e, r, "%s", path);
	if (ret_st)
		*ret_st = st;
	return 0;
}

static void emit_quota(struct jw *w, const char *key, int64_t v)
{
	jw_key(w, key);
	if (v < 0)
		jw_null(w);
	else
		jw_int(w, v);
}

void sbd_tenant_quotas_json(struct jw *w, const struct sbd_tenant *tn)
{
	emit_quota(w, "max_sandboxes", tn ? tn->max_sandboxes : -1);
	jw_key(w, "cpu");
	if (tn && tn->cpu >= 0)
		jw_num(w, tn->cpu);
	else
		jw_null(w);
	emit_quota(w, "memory_mb", tn ? tn->memory_mb : -1);
}

void sbd_tenants_to_json(const struct sbd_tenants *t, struct jw *w)
{
	jw_obj(w);
	jw_kint(w, "version", 1);
	jw_key(w, "tenants");
	jw_arr(w);
	for (size_t i = 0; i < t->n; i++) {
		const struct sbd_tenant *tn = &t->v[i];
		char salt[2 * SBD_TENANT_SALT + 1], hash[2 * SBD_TENANT_HASH + 1];
		hex_encode(tn->salt, sizeof(tn->salt), salt);
		hex_encode(tn->hash, sizeof(tn->hash), hash);
		jw_obj(w);
		jw_kstr(w, "name", tn->name);
		jw_kstr(w, "salt", salt);
		jw_kstr(w, "hash", hash);
		jw_kbool(w, "admin", tn->admin);
		sbd_tenant_quotas_json(w, tn);
		jw_kint(w, "created_at", tn->created_at);
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_obj_end(w);
}

int sbd_tenants_save(const char *path, const struct sbd_tenants *t)
{
	struct jw w;
	jw_init(&w);
	sbd_tenants_to_json(t, &w);
	jw_append(&w, "\n", 1);
	char tmp[4200];
	int r = w.err;
	if (r == 0 &&
	    snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid()) >= (int)sizeof(tmp))
		r = -ENAMETOOLONG;
	if (r == 0) {
		unlink(tmp); /* one a crashed writer of our pid left */
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			r = -errno;
		else {
			if (fchmod(fd, 0600) < 0 || write(fd, w.buf, w.len) != (ssize_t)w.len ||
			    fsync(fd) < 0)
				r = errno ? -errno : -EIO;
			if (close(fd) < 0 && r == 0)
				r = -errno;
			if (r == 0 && rename(tmp, path) < 0)
				r = -errno;
			if (r < 0)
				unlink(tmp);
		}
	}
	jw_done(&w);
	return r;
}
