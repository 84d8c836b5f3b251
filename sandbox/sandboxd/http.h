/* http.h — the HTTP/1.1 subset strata-sandboxd speaks: an incremental,
 * bounded request parser and response/chunk writers.
 *
 * Requests carry a body with Content-Length or chunked (which the caller
 * refuses where it does not stream the body); responses are sized or
 * chunked. Invariants:
 *  1. Nothing is read past the limits: headers over SBD_HTTP_MAX_HEAD give 431, a
 *     body over the caller's limit gives 413 before any of it is buffered.
 *  2. The parser never keeps pointers into a buffer it does not own: a parsed
 *     request holds copies (sbd_http_req_done frees them). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include "fs/err.h"
#include "fs/json.h"

#define SBD_HTTP_MAX_HEAD 16384
#define SBD_HTTP_MAX_HEADERS 64

struct sbd_http_req {
	char method[8];
	char *path;  /* decoded path, NUL-free */
	char *query; /* raw query string after '?', or "" */
	char *auth;  /* Authorization header value or NULL */
	size_t content_length;
	bool keep_alive;
	bool expect_continue;
	bool chunked;	 /* Transfer-Encoding: chunked (content_length is 0) */
	size_t head_len; /* bytes of request line and headers */
	int status;	 /* a head refused: the HTTP status to answer */
};

/* Parses the head of a request in buf[0..len). Returns 0 and *req when the
 * head is complete, -EAGAIN when more bytes are needed, or a negative errno
 * for a head it refuses, with the HTTP status to answer in req->status and
 * the reason in e: -EBADMSG 400 (malformed), -EFBIG 413 (Content-Length over
 * max_body), -EMSGSIZE 431 (head too large, too many headers), -EOPNOTSUPP
 * 501 (a transfer coding other than chunked), -EPROTONOSUPPORT 505 (not
 * HTTP/1.x). Content-Length together with chunked is 400. */
int sbd_http_parse_head(const char *buf, size_t len, size_t max_body, struct sbd_http_req *req,
			struct strata_err *e);
void sbd_http_req_done(struct sbd_http_req *req);

/* Value of query parameter key, percent-decoded, malloc'ed (caller frees), or
 * NULL if absent. *bad is set when the encoding is invalid or holds a NUL. */
char *sbd_http_query_get(const char *query, const char *key, bool *bad);

/* Standard reason phrase of a status code. */
const char *sbd_http_reason(int status);
/* Appends a response head. content_length < 0 means chunked. */
void sbd_http_head(struct jw *out, int status, const char *content_type, long long content_length,
		   bool keep_alive);
/* Appends one chunk (n > 0) of a chunked body, or the last chunk when n == 0. */
void sbd_http_chunk(struct jw *out, const void *p, size_t n);
