/* json.c — strict recursive-descent JSON parser, an emitter with automatic
 * commas, and base64 (see json.h for the invariants). */
#include "fs/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
	const char *p;
	size_t len, off;
	char *err;
	size_t errcap;
	bool failed;
};

static void fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct parser *ps, const char *fmt, ...)
{
	if (ps->failed)
		return;
	ps->failed = true;
	if (!ps->err || !ps->errcap)
		return;
	int n = snprintf(ps->err, ps->errcap, "at byte %zu: ", ps->off);
	if (n < 0 || (size_t)n >= ps->errcap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ps->err + n, ps->errcap - n, fmt, ap);
	va_end(ap);
}

static void skip_ws(struct parser *ps)
{
	while (ps->off < ps->len) {
		char c = ps->p[ps->off];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		ps->off++;
	}
}

static int peek(struct parser *ps)
{
	return ps->off < ps->len ? (unsigned char)ps->p[ps->off] : -1;
}

static bool literal(struct parser *ps, const char *lit)
{
	size_t n = strlen(lit);
	if (ps->len - ps->off < n || memcmp(ps->p + ps->off, lit, n)) {
		fail(ps, "invalid literal");
		return false;
	}
	ps->off += n;
	return true;
}

static int hex4(struct parser *ps)
{
	if (ps->len - ps->off < 4) {
		fail(ps, "truncated \\u escape");
		return -1;
	}
	int v = 0;
	for (int i = 0; i < 4; i++) {
		char c = ps->p[ps->off++];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else {
			fail(ps, "bad hex digit in \\u escape");
			return -1;
		}
	}
	return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Decodes one escape after the backslash into o; returns bytes written or 0. */
static size_t escape(struct parser *ps, char *o)
{
	if (ps->off >= ps->len) {
		fail(ps, "truncated escape");
		return 0;
	}
	char c = ps->p[ps->off++];
	switch (c) {
	case '"':
	case '\\':
	case '/':
		*o = c;
		return 1;
	case 'b':
		*o = '\b';
		return 1;
	case 'f':
		*o = '\f';
		return 1;
	case 'n':
		*o = '\n';
		return 1;
	case 'r':
		*o = '\r';
		return 1;
	case 't':
		*o = '\t';
		return 1;
	case 'u':
		break;
	default:
		fail(ps, "bad escape '\\%c'", c);
		return 0;
	}
	int hi = hex4(ps);
	if (hi < 0)
		return 0;
	if (hi >= 0xdc00 && hi <= 0xdfff) {
		fail(ps, "lone low surrogate");
		return 0;
	}
	if (hi < 0xd800 || hi > 0xdbff)
		return put_utf8(o, (unsigned)hi);
	if (ps->len - ps->off < 2 || ps->p[ps->off] != '\\' || ps->p[ps->off + 1] != 'u') {
		fail(ps, "lone high surrogate");
		return 0;
	}
	ps->off += 2;
	int lo = hex4(ps);
	if (lo < 0)
		return 0;
	if (lo < 0xdc00 || lo > 0xdfff) {
		fail(ps, "bad surrogate pair");
		return 0;
	}
	return put_utf8(o, 0x10000u + (((unsigned)hi - 0xd800u) << 10) + ((unsigned)lo - 0xdc00u));
}

/* Parses a string at '"'; returns a malloc'ed copy and its length. */
static char *string(struct parser *ps, size_t *ret_len)
{
	ps->off++; /* opening quote */
	size_t start = ps->off, end = start;
	while (end < ps->len && ps->p[end] != '"') /* upper bound of the output */
		end += ps->p[end] == '\\' ? 2 : 1;
	char *out = malloc(end - start + 1);
	if (!out) {
		fail(ps, "out of memory");
		return NULL;
	}
	size_t n = 0;
	for (;;) {
		if (ps->off >= ps->len) {
			fail(ps, "unterminated string");
			break;
		}
		unsigned char c = (unsigned char)ps->p[ps->off];
		if (c == '"') {
			ps->off++;
			out[n] = 0;
			*ret_len = n;
			return out;
		}
		if (c < 0x20) {
			fail(ps, "control character in string");
			break;
		}
		if (c != '\\') {
			out[n++] = (char)c;
			ps->off++;
			continue;
		}
		ps->off++;
		size_t k = escape(ps, out + n);
		if (!k)
			break;
		n += k;
	}
	free(out);
	return NULL;
}

static bool number(struct parser *ps, double *ret)
{
	size_t s = ps->off, o = s;
	const char *p = ps->p;
	if (o < ps->len && p[o] == '-')
		o++;
	if (o >= ps->len || p[o] < '0' || p[o] > '9') {
		fail(ps, "invalid number");
		return false;
	}
	if (p[o] == '0')
		o++;
	else
		while (o < ps->len && p[o] >= '0' && p[o] <= '9')
			o++;
	if (o < ps->len && p[o] == '.') {
		o++;
		if (o >= ps->len || p[o] < '0' || p[o] > '9') {
			fail(ps, "invalid number");
			return false;
		}
		while (o < ps->len && p[o] >= '0' && p[o] <= '9')
			o++;
	}
	if (o < ps->len && (p[o] == 'e' || p[o] == 'E')) {
		o++;
		if (o < ps->len && (p[o] == '+' || p[o] == '-'))
			o++;
		if (o >= ps->len || p[o] < '0' || p[o] > '9') {
			fail(ps, "invalid number");
			return false;
		}
		while (o < ps->len && p[o] >= '0' && p[o] <= '9')
			o++;
	}
	char tmp[64];
	if (o - s >= sizeof(tmp)) {
		fail(ps, "number too long");
		return false;
	}
	memcpy(tmp, p + s, o - s);
	tmp[o - s] = 0;
	*ret = strtod(tmp, NULL);
	ps->off = o;
	if (!isfinite(*ret)) {
		fail(ps, "number out of range");
		return false;
	}
	return true;
}

static struct json *value(struct parser *ps, int depth);

static bool append_child(struct json *parent, struct json **tail, struct json *c)
{
	if (*tail)
		(*tail)->next = c;
	else
		parent->child = c;
	*tail = c;
	parent->len++;
	return true;
}

static bool container(struct parser *ps, struct json *j, int depth)
{
	bool obj = j->type == JSON_OBJ;
	char close = obj ? '}' : ']';
	struct json *tail = NULL;
	ps->off++;
	skip_ws(ps);
	if (peek(ps) == close) {
		ps->off++;
		return true;
	}
	for (;;) {
		char *key = NULL;
		size_t klen;
		skip_ws(ps);
		if (obj) {
			if (peek(ps) != '"') {
				fail(ps, "expected a member name");
				return false;
			}
			key = string(ps, &klen);
			if (!key)
				return false;
			if (strlen(key) != klen || json_get(j, key)) {
				fail(ps,
				     strlen(key) != klen ? "NUL in member name"
							 : "duplicate member '%s'",
				     key);
				free(key);
				return false;
			}
			skip_ws(ps);
			if (peek(ps) != ':') {
				free(key);
				fail(ps, "expected ':'");
				return false;
			}
			ps->off++;
		}
		struct json *c = value(ps, depth + 1);
		if (!c) {
			free(key);
			return false;
		}
		c->key = key;
		append_child(j, &tail, c);
		skip_ws(ps);
		int ch = peek(ps);
		ps->off++;
		if (ch == close)
			return true;
		if (ch != ',') {
			ps->off--;
			fail(ps, "expected ',' or '%c'", close);
			return false;
		}
	}
}

static struct json *value(struct parser *ps, int depth)
{
	if (depth > JSON_MAX_DEPTH) {
		fail(ps, "nested deeper than %d", JSON_MAX_DEPTH);
		return NULL;
	}
	skip_ws(ps);
	struct json *j = calloc(1, sizeof(*j));
	if (!j) {
		fail(ps, "out of memory");
		return NULL;
	}
	bool ok = false;
	switch (peek(ps)) {
	case '{':
		j->type = JSON_OBJ;
		ok = container(ps, j, depth);
		break;
	case '[':
		j->type = JSON_ARR;
		ok = container(ps, j, depth);
		break;
	case '"':
		j->type = JSON_STR;
		j->str = string(ps, &j->len);
		ok = j->str != NULL;
		break;
	case 't':
		j->type = JSON_BOOL;
		j->b = true;
		ok = literal(ps, "true");
		break;
	case 'f':
		j->type = JSON_BOOL;
		ok = literal(ps, "false");
		break;
	case 'n':
		j->type = JSON_NULL;
		ok = literal(ps, "null");
		break;
	case -1:
		fail(ps, "unexpected end of input");
		break;
	default:
		j->type = JSON_NUM;
		ok = number(ps, &j->num);
		break;
	}
	if (!ok)
		return json_free(j);
	return j;
}

struct json *json_parse(const char *buf, size_t len, char *err, size_t errcap)
{
	struct parser ps = {.p = buf, .len = len, .err = err, .errcap = errcap};
	if (err && errcap)
		err[0] = 0;
	struct json *j = value(&ps, 0);
	if (!j)
		return NULL;
	skip_ws(&ps);
	if (ps.off != len) {
		fail(&ps, "trailing data after the value");
		return json_free(j);
	}
	return j;
}

struct json *json_free(struct json *j)
{
	while (j) {
		struct json *next = j->next;
		json_free(j->child);
		free(j->str);
		free(j->key);
		free(j);
		j = next;
	}
	return NULL;
}

struct json *json_get(const struct json *j, const char *key)
{
	if (!j || j->type != JSON_OBJ)
		return NULL;
	for (struct json *c = j->child; c; c = c->next)
		if (c->key && !strcmp(c->key, key))
			return c;
	return NULL;
}

const char *json_cstr(const struct json *j)
{
	if (!j || j->type != JSON_STR || strlen(j->str) != j->len)
		return NULL;
	return j->str;
}

bool json_int(const struct json *j, int64_t lo, int64_t hi, int64_t *ret)
{
	if (!j || j->type != JSON_NUM || j->num != floor(j->num) || j->num < (double)lo ||
	    j->num > (double)hi)
		return false;
	*ret = (int64_t)j->num;
	return true;
}

const char *json_unknown_field(const struct json *j, const char *const *allowed)
{
	for (struct json *c = j->child; c; c = c->next) {
		bool ok = false;
		for (size_t i = 0; allowed[i] && !ok; i++)
			ok = !strcmp(c->key, allowed[i]);
		if (!ok)
			return c->key;
	}
	return NULL;
}

/* ---- emitter ------------------------------------------------------------- */

void jw_init(struct jw *w)
{
	memset(w, 0, sizeof(*w));
	w->first[0] = true;
}

void jw_done(struct jw *w)
{
	free(w->buf);
	w->buf = NULL;
	w->len = w->cap = 0;
}

char *jw_take(struct jw *w, size_t *ret_len)
{
	char *b = w->buf;
	if (ret_len)
		*ret_len = w->len;
	jw_init(w);
	return b;
}

void jw_append(struct jw *w, const void *p, size_t n)
{
	if (w->err)
		return;
	if (w->len + n + 1 > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < w->len + n + 1)
			cap *= 2;
		char *b = realloc(w->buf, cap);
		if (!b) {
			w->err = -ENOMEM;
			return;
		}
		w->buf = b;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, p, n);
	w->len += n;
	w->buf[w->len] = 0;
}

static void sep(struct jw *w)
{
	if (w->after_key) {
		w->after_key = false;
		return;
	}
	if (!w->first[w->depth])
		jw_append(w, ",", 1);
	w->first[w->depth] = false;
}

static void open_(struct jw *w, const char *c)
{
	sep(w);
	jw_append(w, c, 1);
	if (w->depth < JSON_MAX_DEPTH)
		w->first[++w->depth] = true;
}

static void close_(struct jw *w, const char *c)
{
	if (w->depth > 0)
		w->depth--;
	jw_append(w, c, 1);
}

void jw_obj(struct jw *w)
{
	open_(w, "{");
}
void jw_obj_end(struct jw *w)
{
	close_(w, "}");
}
void jw_arr(struct jw *w)
{
	open_(w, "[");
}
void jw_arr_end(struct jw *w)
{
	close_(w, "]");
}

static void quoted(struct jw *w, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	jw_append(w, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		jw_append(w, s + run, i - run);
		run = i + 1;
		char e[7] = {'\\', 0};
		switch (c) {
		case '"':
			e[1] = '"';
			break;
		case '\\':
			e[1] = '\\';
			break;
		case '\n':
			e[1] = 'n';
			break;
		case '\r':
			e[1] = 'r';
			break;
		case '\t':
			e[1] = 't';
			break;
		default:
			memcpy(e + 1, "u00", 3);
			e[4] = hex[c >> 4];
			e[5] = hex[c & 15];
		}
		jw_append(w, e, strlen(e));
	}
	jw_append(w, s + run, n - run);
	jw_append(w, "\"", 1);
}

void jw_key(struct jw *w, const char *k)
{
	sep(w);
	quoted(w, k, strlen(k));
	jw_append(w, ":", 1);
	w->after_key = true;
}

void jw_strn(struct jw *w, const char *s, size_t n)
{
	sep(w);
	quoted(w, s, n);
}

void jw_str(struct jw *w, const char *s)
{
	if (!s) {
		jw_null(w);
		return;
	}
	jw_strn(w, s, strlen(s));
}

void jw_raw(struct jw *w, const char *s, size_t n)
{
	sep(w);
	jw_append(w, s, n);
}

void jw_int(struct jw *w, int64_t v)
{
	char b[32];
	int n = snprintf(b, sizeof(b), "%lld", (long long)v);
	jw_raw(w, b, (size_t)n);
}

void jw_num(struct jw *w, double v)
{
	char b[40];
	int n = snprintf(b, sizeof(b), "%.17g", isfinite(v) ? v : 0.0);
	jw_raw(w, b, (size_t)n);
}

void jw_bool(struct jw *w, bool v)
{
	jw_raw(w, v ? "true" : "false", v ? 4 : 5);
}
void jw_null(struct jw *w)
{
	jw_raw(w, "null", 4);
}

void jw_kstr(struct jw *w, const char *k, const char *v)
{
	jw_key(w, k);
	jw_str(w, v);
}

void jw_kint(struct jw *w, const char *k, int64_t v)
{
	jw_key(w, k);
	jw_int(w, v);
}

void jw_kbool(struct jw *w, const char *k, bool v)
{
	jw_key(w, k);
	jw_bool(w, v);
}

void jw_error_doc(struct jw *w, const char *code, const char *msg)
{
	jw_obj(w);
	jw_key(w, "error");
	jw_obj(w);
	jw_kstr(w, "code", code);
	jw_kstr(w, "message", msg);
	jw_obj_end(w);
	jw_obj_end(w);
	jw_append(w, "\n", 1);
}

/* ---- base64 -------------------------------------------------------------- */
static const char b64c[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void jw_b64(struct jw *w, const void *p, size_t n)
{
	const uint8_t *s = p;
	sep(w);
	jw_append(w, "\"", 1);
	char out[256];
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)s[i + 1] << 8;
		if (i + 2 < n)
			v |= s[i + 2];
		out[o++] = b64c[(v >> 18) & 63];
		out[o++] = b64c[(v >> 12) & 63];
		out[o++] = i + 1 < n ? b64c[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? b64c[v & 63] : '=';
		if (o + 4 > sizeof(out)) {
			jw_append(w, out, o);
			o = 0;
		}
	}
	jw_append(w, out, o);
	jw_append(w, "\"", 1);
}

static int b64v(char c)
{
	const char *q = c ? strchr(b64c, c) : NULL;
	return q ? (int)(q - b64c) : -1;
}

int b64_decode(const char *s, size_t n, uint8_t **ret, size_t *ret_len)
{
	if (n % 4)
		return -EINVAL;
	uint8_t *out = malloc(n / 4 * 3 + 1);
	if (!out)
		return -ENOMEM;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		bool last = i + 4 == n;
		for (int k = 0; k < 4; k++) {
			v[k] = s[i + k] == '=' && last && k >= 2 ? 0 : b64v(s[i + k]);
			if (v[k] < 0) {
				free(out);
				return -EINVAL;
			}
		}
		if (last && s[i + 2] == '=' && s[i + 3] != '=') {
			free(out);
			return -EINVAL;
		}
		uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
			     (uint32_t)v[3];
		out[o++] = (uint8_t)(x >> 16);
		if (!(last && s[i + 2] == '='))
			out[o++] = (uint8_t)(x >> 8);
		if (!(last && s[i + 3] == '='))
			out[o++] = (uint8_t)x;
	}
	*ret = out;
	*ret_len = o;
	return 0;
}

void json_emit(struct jw *w, const struct json *j)
{
	switch (j->type) {
	case JSON_NULL:
		jw_null(w);
		break;
	case JSON_BOOL:
		jw_bool(w, j->b);
		break;
	case JSON_NUM:
		jw_num(w, j->num);
		break;
	case JSON_STR:
		jw_strn(w, j->str, j->len);
		break;
	case JSON_ARR:
	case JSON_OBJ:
		if (j->type == JSON_ARR)
			jw_arr(w);
		else
			jw_obj(w);
		for (const struct json *c = j->child; c; c = c->next) {
			if (j->type == JSON_OBJ)
				jw_key(w, c->key);
			json_emit(w, c);
		}
		if (j->type == JSON_ARR)
			jw_arr_end(w);
		else
			jw_obj_end(w);
		break;
	}
}
