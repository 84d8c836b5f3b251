/* http.c — request head parser and response writers (see http.h). */
#include "sandbox/sandboxd/http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A refused head: the status to answer in req, the errno that names it
 * returned, the reason in e. */
static int bad(struct sbd_http_req *req, struct strata_err *e, int status, const char *msg)
{
	int code = status == 413   ? -EFBIG
		   : status == 431 ? -EMSGSIZE
		   : status == 501 ? -EOPNOTSUPP
		   : status == 505 ? -EPROTONOSUPPORT
				   : -EBADMSG;
	req->status = status;
	return strata_err_set(e, code, "%s", msg);
}

static const char *find_crlf2(const char *b, size_t n)
{
	for (size_t i = 0; i + 3 < n; i++)
		if (b[i] == '\r' && b[i + 1] == '\n' && b[i + 2] == '\r' && b[i + 3] == '\n')
			return b + i;
	return NULL;
}

static int hexv(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decodes s[0..n) ('+' is a space when plus is set). NULL on a bad
 * escape or a NUL byte. */
static char *pct_decode(const char *s, size_t n, bool plus)
{
	char *o = malloc(n + 1);
	size_t k = 0;
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '%') {
			int a = i + 2 < n ? hexv(s[i + 1]) : -1;
			int b = i + 2 < n ? hexv(s[i + 2]) : -1;
			if (a < 0 || b < 0 || (a == 0 && b == 0)) {
				free(o);
				return NULL;
			}
			o[k++] = (char)(a * 16 + b);
			i += 2;
		} else if (c == '+' && plus) {
			o[k++] = ' ';
		} else if (c == 0) {
			free(o);
			return NULL;
		} else {
			o[k++] = c;
		}
	}
	o[k] = 0;
	return o;
}

static int parse_request_line(const char *b, size_t n, struct sbd_http_req *req,
			      struct strata_err *e)
{
	const char *sp1 = memchr(b, ' ', n);
	if (!sp1 || sp1 == b || (size_t)(sp1 - b) >= sizeof(req->method))
		return bad(req, e, 400, "malformed request line");
	memcpy(req->method, b, sp1 - b);
	req->method[sp1 - b] = 0;
	const char *t = sp1 + 1;
	const char *sp2 = memchr(t, ' ', n - (t - b));
	if (!sp2 || sp2 == t || *t != '/')
		return bad(req, e, 400, "malformed request target");
	size_t vlen = n - (sp2 + 1 - b);
	if (vlen != 8 || memcmp(sp2 + 1, "HTTP/1.", 7))
		return bad(req, e, 505, "only HTTP/1.x is supported");
	req->keep_alive = sp2[8] == '1';
	const char *q = memchr(t, '?', sp2 - t);
	const char *pend = q ? q : sp2;
	req->path = pct_decode(t, pend - t, false);
	req->query = q ? strndup(q + 1, sp2 - q - 1) : strdup("");
	if (!req->path || !req->query)
		return bad(req, e, 400, "bad percent-encoding in the path");
	return 0;
}

static bool hdr_is(const char *line, size_t n, const char *name, const char **val, size_t *vlen)
{
	size_t k = strlen(name);
	if (n <= k || line[k] != ':' || strncasecmp(line, name, k))
		return false;
	const char *v = line + k + 1, *e = line + n;
	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	*val = v;
	*vlen = e - v;
	return true;
}

static int parse_header(const char *line, size_t n, size_t max_body, struct sbd_http_req *req,
			bool *have_cl, struct strata_err *e)
{
	const char *v;
	size_t vl;
	if (!memchr(line, ':', n))
		return bad(req, e, 400, "malformed header line");
	if (hdr_is(line, n, "Content-Length", &v, &vl)) {
		if (*have_cl || vl == 0 || vl > 15)
			return bad(req, e, 400, "bad Content-Length");
		size_t x = 0;
		for (size_t i = 0; i < vl; i++) {
			if (v[i] < '0' || v[i] > '9')
				return bad(req, e, 400, "bad Content-Length");
			x = x * 10 + (size_t)(v[i] - '0');
		}
		*have_cl = true;
		req->content_length = x;
		if (x > max_body) {
			req->status = 413;
			return strata_err_set(e, -EFBIG,
					      "request body of %zu bytes is over the limit of %zu",
					      x, max_body);
		}
	} else if (hdr_is(line, n, "Transfer-Encoding", &v, &vl)) {
		if (vl == 7 && !strncasecmp(v, "chunked", 7))
			req->chunked = true;
		else if (vl != 8 || strncasecmp(v, "identity", 8))
			return bad(req, e, 501, "only the chunked transfer coding is supported");
	} else if (hdr_is(line, n, "Connection", &v, &vl)) {
		if (vl == 5 && !strncasecmp(v, "close", 5))
			req->keep_alive = false;
		else if (vl == 10 && !strncasecmp(v, "keep-alive", 10))
			req->keep_alive = true;
	} else if (hdr_is(line, n, "Expect", &v, &vl)) {
		if (vl == 12 && !strncasecmp(v, "100-continue", 12))
			req->expect_continue = true;
	} else if (hdr_is(line, n, "Authorization", &v, &vl)) {
		free(req->auth);
		req->auth = strndup(v, vl);
	}
	return 0;
}

int sbd_http_parse_head(const char *buf, size_t len, size_t max_body, struct sbd_http_req *req,
			struct strata_err *e)
{
	memset(req, 0, sizeof(*req));
	const char *end = find_crlf2(buf, len);
	if (!end)
		return len > SBD_HTTP_MAX_HEAD ? bad(req, e, 431, "request head too large")
					       : -EAGAIN;
	if ((size_t)(end - buf) + 4 > SBD_HTTP_MAX_HEAD)
		return bad(req, e, 431, "request head too large");
	req->head_len = (size_t)(end - buf) + 4;
	const char *line = buf;
	/* Every line ends at a CR that a LF follows; end + 2 is the last line's
	 * CR, so memchr always finds one, but a bare CR just before it leaves
	 * the next line starting past it (found by sandboxd_fuzz_http). */
	const char *nl = memchr(line, '\r', end + 2 - line);
	int r = nl[1] == '\n' ? parse_request_line(line, nl - line, req, e)
			      : bad(req, e, 400, "bare CR in request line");
	bool have_cl = false;
	int count = 0;
	while (r == 0 && nl < end) {
		line = nl + 2;
		nl = memchr(line, '\r', end + 2 - line);
		if (!nl || nl[1] != '\n')
			r = bad(req, e, 400, "bare CR in header");
		else if (++count > SBD_HTTP_MAX_HEADERS)
			r = bad(req, e, 431, "too many headers");
		else
			r = parse_header(line, nl - line, max_body, req, &have_cl, e);
	}
	if (r == 0 && req->chunked && have_cl)
		r = bad(req, e, 400, "Content-Length and chunked together");
	if (r < 0)
		sbd_http_req_done(req);
	return r;
}

void sbd_http_req_done(struct sbd_http_req *req)
{
	free(req->path);
	free(req->query);
	free(req->auth);
	req->path = req->query = req->auth = NULL;
}

char *sbd_http_query_get(const char *query, const char *key, bool *bad)
{
	size_t kl = strlen(key);
	const char *p = query;
	while (p && *p) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);
		if (n >= kl && !strncmp(p, key, kl) && (n == kl || p[kl] == '=')) {
			const char *v = n == kl ? p + n : p + kl + 1;
			char *d = pct_decode(v, n - (v - p), true);
			if (!d)
				*bad = true;
			return d;
		}
		p = amp ? amp + 1 : NULL;
	}
	return NULL;
}

const char *sbd_http_reason(int status)
{
	switch (status) {
	case 100:
		return "Continue";
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 204:
		return "No Content";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 409:
		return "Conflict";
	case 411:
		return "Length Required";
	case 413:
		return "Content Too Large";
	case 422:
		return "Unprocessable Content";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	case 505:
		return "HTTP Version Not Supported";
	case 507:
		return "Insufficient Storage";
	default:
		return "Unknown";
	}
}

void sbd_http_head(struct jw *out, int status, const char *content_type, long long content_length,
		   bool keep_alive)
{
	char b[320];
	int n = snprintf(b, sizeof(b), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s", status,
			 sbd_http_reason(status), content_type,
			 keep_alive ? "" : "Connection: close\r\n",
			 content_length < 0 ? "Transfer-Encoding: chunked\r\n" : "");
	jw_append(out, b, (size_t)n);
	if (content_length >= 0) {
		n = snprintf(b, sizeof(b), "Content-Length: %lld\r\n", content_length);
		jw_append(out, b, (size_t)n);
	}
	jw_append(out, "\r\n", 2);
}

void sbd_http_chunk(struct jw *out, const void *p, size_t n)
{
	char b[32];
	int k = snprintf(b, sizeof(b), "%zx\r\n", n);
	jw_append(out, b, (size_t)k);
	if (n)
		jw_append(out, p, n);
	jw_append(out, "\r\n", 2);
}
