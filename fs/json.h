/* json.h — the small JSON parser and emitter shared by strata-sandboxd's HTTP API and the CLI.
 *
 * Why our own: the API needs a strict parser (exact errors, limits on depth,
 * size and string length, duplicate keys refused) and a streaming-friendly
 * emitter; both fit in a few hundred lines, so no external dependency.
 *
 * The parser builds a tree of nodes from a byte buffer that need not be
 * NUL-terminated. Invariants:
 *  1. Input is valid RFC 8259 JSON or the parse fails with a position and a
 *     reason; trailing garbage, bad escapes, lone surrogates, control bytes in
 *     strings, depth over JSON_MAX_DEPTH and duplicate object keys are errors.
 *  2. Every string is NUL-terminated UTF-8 with its length kept (it may hold
 *     a NUL from "\u0000": callers that need C strings use json_cstr, which
 *     refuses those).
 *  3. The emitter never fails half-way: after an allocation failure jw.err is
 *     -ENOMEM and further calls do nothing. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 32

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ };

struct json {
	enum json_type type;
	bool b;
	double num;
	char *str;  /* JSON_STR: value; NUL-terminated */
	size_t len; /* JSON_STR: bytes; JSON_ARR/OBJ: number of children */
	char *key;  /* member name when the parent is an object */
	struct json *child, *next;
};

/* Parses buf[0..len). Returns the root (caller frees with json_free) or NULL
 * with a message in err[errcap] ("at byte 12: expected ':'"). */
struct json *json_parse(const char *buf, size_t len, char *err, size_t errcap);
/* Frees a tree; accepts NULL; returns NULL. */
struct json *json_free(struct json *j);

/* Member of an object by name, or NULL (also when j is not an object). */
struct json *json_get(const struct json *j, const char *key);
/* The string of a JSON_STR without embedded NUL bytes, else NULL. */
const char *json_cstr(const struct json *j);
/* Returns true and the value if j is a number that is an integer in
 * [lo, hi]. */
bool json_int(const struct json *j, int64_t lo, int64_t hi, int64_t *ret);
/* Checks that every member name of object j is in the NULL-terminated list
 * allowed. Returns NULL or the first member name that is not. */
const char *json_unknown_field(const struct json *j, const char *const *allowed);

/* ---- emitter ------------------------------------------------------------ */
struct jw {
	char *buf;
	size_t len, cap;
	int err;
	int depth;
	bool first[JSON_MAX_DEPTH + 1];
	bool after_key;
};
void jw_init(struct jw *w);
void jw_done(struct jw *w); /* frees the buffer; accepts a zeroed jw */
/* Hands the buffer out (caller frees); the writer is reset. */
char *jw_take(struct jw *w, size_t *ret_len);
void jw_obj(struct jw *w);
void jw_obj_end(struct jw *w);
void jw_arr(struct jw *w);
void jw_arr_end(struct jw *w);
void jw_key(struct jw *w, const char *k);
void jw_str(struct jw *w, const char *s);
void jw_strn(struct jw *w, const char *s, size_t n); /* escapes; bytes >= 0x80 are
						      * passed through as they are */
void jw_int(struct jw *w, int64_t v);
void jw_num(struct jw *w, double v);
void jw_bool(struct jw *w, bool v);
void jw_null(struct jw *w);
/* Inserts already-encoded JSON text as one value. */
void jw_raw(struct jw *w, const char *s, size_t n);
/* Emits a parsed tree as one value. */
void json_emit(struct jw *w, const struct json *j);
/* Convenience: key then value. */
void jw_kstr(struct jw *w, const char *k, const char *v);
void jw_kint(struct jw *w, const char *k, int64_t v);
void jw_kbool(struct jw *w, const char *k, bool v);
/* The error document of the sandbox APIs (sandboxd, strata-apiserver):
 * {"error":{"code":code,"message":msg}} and a newline. */
void jw_error_doc(struct jw *w, const char *code, const char *msg);
/* Appends raw bytes (not a JSON value: for framing such as "\n"). */
void jw_append(struct jw *w, const void *p, size_t n);

/* Base64 (RFC 4648, padded). Encodes n bytes of p as a JSON string value. */
void jw_b64(struct jw *w, const void *p, size_t n);
/* Decodes a base64 string into a malloc'ed buffer. Returns 0 or -EINVAL,
 * -ENOMEM. */
int b64_decode(const char *s, size_t n, uint8_t **ret, size_t *ret_len);
