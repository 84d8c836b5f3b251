/* http.h — a small, bounded HTTP/1.1 client for the registry client.
 *
 * One request per connection (Connection: close): no pooling, no pipelining.
 * http:// over TCP and https:// over OpenSSL (certificate and host name
 * verified against the system's trust store and an optional extra CA file,
 * unless insecure). Response bodies with Content-Length, chunked transfer
 * encoding or read-until-close. Everything the server controls is bounded:
 * the status line and each header line (8 KiB), the header block (64 KiB by
 * default, http_opts.max_header_bytes), the number of headers (128), chunk
 * size lines, trailers, and every body read into memory (the caller's max).
 * Connect, read and write stall after timeout_ms.
 *
 * Errors are negative errno with a message in struct strata_err:
 *   -ECONNRESET  the connection broke (also an early end of a body)
 *   -ETIMEDOUT   the peer stalled        -ECONNREFUSED nobody listens
 *   -EPROTO      not HTTP, or a TLS failure (handshake, certificate)
 *   -EFBIG       a limit on headers or body    -EINVAL a bad URL
 * The first three are worth a retry (http_error_retryable). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "imagesvc/pull/oci.h"

#define HTTP_MAX_HOST 256
#define HTTP_MAX_URL 8192

struct http_url {
	bool tls;
	char host[HTTP_MAX_HOST]; /* without brackets for IPv6 literals */
	char port[8];
	char *path; /* path and query, starts with '/' (owned) */
};

/* Parses "http[s]://host[:port][/path?query]". Returns 0 or -EINVAL. */
int http_url_parse(const char *s, struct http_url *ret);
/* Resolves a Location header (absolute, "//host/..", "/path" or relative)
 * against base. Returns 0 or -EINVAL. */
int http_url_resolve(const struct http_url *base, const char *loc, struct http_url *ret);
void http_url_done(struct http_url *u);
/* Writes "scheme://host:port" into buf. */
void http_url_origin(const struct http_url *u, char *buf, size_t cap);

struct http_opts {
	bool insecure;		 /* skip TLS certificate verification */
	const char *ca_file;	 /* extra trusted CA certificates (PEM), may be NULL */
	int timeout_ms;		 /* connect / read / write stall limit (default 30 s) */
	size_t max_header_bytes; /* the whole response header block (default 64 KiB) */
};

struct http_client;

/* Returns 0 and a client (free with http_client_free), or -errno. */
int http_client_new(const struct http_opts *o, struct http_client **ret, struct strata_err *e);
struct http_client *http_client_free(struct http_client *c);

struct http_header {
	char *name, *value;
};

struct http_response {
	int status;
	struct http_header *headers;
	size_t n_headers;
	/* body framing */
	bool chunked, has_length, no_body;
	uint64_t length;    /* Content-Length when has_length */
	uint64_t remaining; /* bytes left of the body or of the current chunk */
	bool chunk_open, done;
	size_t trailer_bytes;
	/* the connection */
	struct http_conn *conn;
};

/* Sends "METHOD url" with the extra header lines (each "Name: value", no CRLF;
 * NULL-terminated list, may be NULL) and reads the status line and headers.
 * Returns 0 with *ret filled (http_response_done it), or a negative errno. */
int http_request(struct http_client *c, const char *method, const struct http_url *url,
		 const char *const *headers, struct http_response *ret, struct strata_err *e);
/* Returns the first header named name (case-insensitive), or NULL. */
const char *http_header(const struct http_response *r, const char *name);
/* Reads body bytes: >0, 0 at the end of the body, or a negative errno. */
ssize_t http_read_body(struct http_response *r, void *buf, size_t n, struct strata_err *e);
/* Reads the whole body, at most max bytes, into *ret (NUL-terminated,
 * free()). -EFBIG when it is longer. */
int http_read_body_all(struct http_response *r, size_t max, char **ret, size_t *ret_len,
		       struct strata_err *e);
/* Closes the connection and frees the headers. */
void http_response_done(struct http_response *r);

bool http_error_retryable(int err);

/* Reads a response from an already connected plain socket (fuzzing and
 * tests). Takes fd over, also on failure. Returns as http_request does. */
int http_response_from_fd(struct http_client *c, int fd, const char *method,
			  struct http_response *ret, struct strata_err *e);
