/* http.c — the bounded HTTP/1.1 client of http.h.
 *
 * A connection is a TCP socket (connected with a poll()ed non-blocking
 * connect, then blocking with SO_RCVTIMEO/SO_SNDTIMEO as the stall limit),
 * optionally wrapped in an OpenSSL session, plus a 16 KiB read buffer. The
 * response parser reads lines from that buffer with a per-line and a
 * per-header-block budget, so a hostile server can make us hold at most
 * max_header_bytes of headers. Body framing follows RFC 9112 §6.3: no body
 * for HEAD/1xx/204/304, chunked when Transfer-Encoding ends in "chunked",
 * else Content-Length (conflicting values are an error), else until close. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "fs/cleanup.h"
#include "fs/clock.h"
#include "imagesvc/pull/http.h"

#define HTTP_LINE_MAX 8192
#define HTTP_MAX_HEADERS 128
#define HTTP_RBUF 16384

struct http_client {
	struct http_opts o;
	SSL_CTX *ctx; /* NULL until the first https request */
};

struct http_conn {
	int fd;
	SSL *ssl;
	int timeout_ms;
	int64_t deadline_ms; /* CLOCK_MONOTONIC; 0: only the per-read stall limit */
	char rbuf[HTTP_RBUF];
	size_t rpos, rlen;
};

/* --- URLs ------------------------------------------------------------------ */

static int split_hostport(const char *s, size_t len, bool tls, struct http_url *u)
{
	const char *end = s + len, *colon = NULL;
	if (len && s[0] == '[') { /* [v6]:port */
		const char *rb = memchr(s, ']', len);
		if (!rb || (size_t)(rb - s - 1) >= sizeof(u->host))
			return -EINVAL;
		memcpy(u->host, s + 1, (size_t)(rb - s - 1));
		u->host[rb - s - 1] = 0;
		colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
		if (!colon && rb + 1 != end)
			return -EINVAL;
	} else {
		colon = memchr(s, ':', len);
		size_t hl = colon ? (size_t)(colon - s) : len;
		if (hl == 0 || hl >= sizeof(u->host))
			return -EINVAL;
		memcpy(u->host, s, hl);
		u->host[hl] = 0;
	}
	for (const char *c = u->host; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr(".-_:", *c))
			return -EINVAL;
	if (!colon) {
		strcpy(u->port, tls ? "443" : "80");
		return 0;
	}
	size_t pl = (size_t)(end - colon - 1);
	if (pl == 0 || pl > 5)
		return -EINVAL;
	memcpy(u->port, colon + 1, pl);
	u->port[pl] = 0;
	long p = strtol(u->port, NULL, 10);
	if (strspn(u->port, "0123456789") != pl || p < 1 || p > 65535)
		return -EINVAL;
	return 0;
}

static bool path_ok(const char *p)
{
	for (; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return false; /* no CR/LF/space injection into the request line */
	return true;
}

int http_url_parse(const char *s, struct http_url *ret)
{
	struct http_url u = {0};
	if (strlen(s) > HTTP_MAX_URL)
		return -EINVAL;
	if (!strncasecmp(s, "https://", 8)) {
		u.tls = true;
		s += 8;
	} else if (!strncasecmp(s, "http://", 7)) {
		s += 7;
	} else {
		return -EINVAL;
	}
	size_t hl = strcspn(s, "/?#");
	int r = split_hostport(s, hl, u.tls, &u);
	if (r < 0)
		return r;
	const char *rest = s + hl;
	size_t rl = strcspn(rest, "#");
	if (asprintf(&u.path, "%s%.*s", rest[0] == '/' ? "" : "/", (int)rl, rest) < 0)
		return -ENOMEM;
	if (!path_ok(u.path)) {
		free(u.path);
		return -EINVAL;
	}
	*ret = u;
	return 0;
}

void http_url_origin(const struct http_url *u, char *buf, size_t cap)
{
	bool v6 = strchr(u->host, ':') != NULL;
	snprintf(buf, cap, "%s://%s%s%s:%s", u->tls ? "https" : "http", v6 ? "[" : "", u->host,
		 v6 ? "]" : "", u->port);
}

int http_url_resolve(const struct http_url *base, const char *loc, struct http_url *ret)
{
	char origin[HTTP_MAX_HOST + 32];
	_cleanup_free_ char *abs = NULL;
	int n;
	if (!strncasecmp(loc, "http://", 7) || !strncasecmp(loc, "https://", 8))
		return http_url_parse(loc, ret);
	http_url_origin(base, origin, sizeof(origin));
	if (loc[0] == '/' && loc[1] == '/') {
		n = asprintf(&abs, "%s:%s", base->tls ? "https" : "http", loc);
	} else if (loc[0] == '/') {
		n = asprintf(&abs, "%s%s", origin, loc);
	} else { /* relative to the base path's directory */
		size_t dl = strcspn(base->path, "?");
		while (dl > 0 && base->path[dl - 1] != '/')
			dl--;
		n = asprintf(&abs, "%s%.*s%s", origin, (int)dl, base->path, loc);
	}
	if (n < 0) {
		abs = NULL;
		return -ENOMEM;
	}
	return http_url_parse(abs, ret);
}

void http_url_done(struct http_url *u)
{
	free(u->path);
	u->path = NULL;
}

/* --- client and TLS -------------------------------------------------------- */

int http_client_new(const struct http_opts *o, struct http_client **ret, struct strata_err *e)
{
	struct http_client *c = calloc(1, sizeof(*c));
	if (!c)
		return strata_err_set(e, -ENOMEM, "out of memory");
	c->o = *o;
	if (c->o.timeout_ms <= 0)
		c->o.timeout_ms = 30000;
	if (c->o.max_header_bytes == 0)
		c->o.max_header_bytes = 64 * 1024;
	*ret = c;
	return 0;
}

struct http_client *http_client_free(struct http_client *c)
{
	if (c) {
		SSL_CTX_free(c->ctx);
		free(c);
	}
	return NULL;
}

static const char *ssl_reason(void)
{
	unsigned long err = ERR_peek_last_error();
	const char *s = err ? ERR_reason_error_string(err) : NULL;
	return s ? s : "unknown TLS error";
}

static int tls_ctx(struct http_client *c, struct strata_err *e)
{
	if (c->ctx)
		return 0;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx)
		return strata_err_set(e, -ENOMEM, "TLS: %s", ssl_reason());
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	if (c->o.insecure) {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	} else {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		SSL_CTX_set_default_verify_paths(ctx);
		if (c->o.ca_file && SSL_CTX_load_verify_locations(ctx, c->o.ca_file, NULL) != 1) {
			SSL_CTX_free(ctx);
			return strata_err_set(e, -EINVAL, "TLS: cannot load CA file %s: %s",
					      c->o.ca_file, ssl_reason());
		}
	}
	c->ctx = ctx;
	return 0;
}

static int tls_handshake(struct http_client *c, struct http_conn *conn, const char *host,
			 struct strata_err *e)
{
	int r = tls_ctx(c, e);
	if (r < 0)
		return r;
	ERR_clear_error();
	conn->ssl = SSL_new(c->ctx);
	if (!conn->ssl)
		return strata_err_set(e, -ENOMEM, "TLS: %s", ssl_reason());
	SSL_set_fd(conn->ssl, conn->fd);
	unsigned char ip[16];
	bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	if (!is_ip)
		SSL_set_tlsext_host_name(conn->ssl, host);
	if (!c->o.insecure) {
		X509_VERIFY_PARAM *p = SSL_get0_param(conn->ssl);
		if (is_ip ? !X509_VERIFY_PARAM_set1_ip_asc(p, host)
			  : !SSL_set1_host(conn->ssl, host))
			return strata_err_set(e, -ENOMEM, "TLS: %s", ssl_reason());
	}
	if (SSL_connect(conn->ssl) == 1)
		return 0;
	long vr = SSL_get_verify_result(conn->ssl);
	if (vr != X509_V_OK)
		return strata_err_set(
		    e, -EPROTO,
		    "TLS: certificate of %s not trusted: %s (use --insecure to skip "
		    "verification)",
		    host, X509_verify_cert_error_string(vr));
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return strata_err_set(e, -ETIMEDOUT, "TLS handshake with %s timed out", host);
	return strata_err_set(e, -EPROTO, "TLS handshake with %s failed: %s", host, ssl_reason());
}

/* --- connections ------------------------------------------------------------ */

/* OpenSSL writes with write(2), so a peer that went away raises SIGPIPE.
 * A library must not change the process's signal dispositions: SIGPIPE is
 * blocked in this thread around TLS writes and a SIGPIPE they raised is
 * consumed before the old mask returns. */
struct sigpipe_guard {
	sigset_t old;
	bool was_pending;
};

static void sigpipe_block(struct sigpipe_guard *g)
{
	sigset_t pipe_set, pending;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&pending);
	g->was_pending = sigismember(&pending, SIGPIPE) == 1;
	pthread_sigmask(SIG_BLOCK, &pipe_set, &g->old);
}

static void sigpipe_restore(struct sigpipe_guard *g)
{
	sigset_t pipe_set, pending;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&pending);
	if (!g->was_pending && sigismember(&pending, SIGPIPE) == 1) {
		struct timespec zero = {0};
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static void conn_free(struct http_conn *conn)
{
	if (!conn)
		return;
	if (conn->ssl) {
		struct sigpipe_guard g;
		sigpipe_block(&g);
		SSL_shutdown(conn->ssl);
		sigpipe_restore(&g);
		SSL_free(conn->ssl);
	}
	if (conn->fd >= 0)
		close(conn->fd);
	free(conn);
}

static int connect_one(const struct addrinfo *ai, int timeout_ms)
{
	_cleanup_close_ int fd =
	    socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS)
			return -errno;
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int n = poll(&p, 1, timeout_ms);
		if (n == 0)
			return -ETIMEDOUT;
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			return -errno;
		if (soerr)
			return -soerr;
	}
	int fl = fcntl(fd, F_GETFL);
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	int one = 1;
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return TAKE_FD(fd);
}

static int conn_open(struct http_client *c, const struct http_url *u, struct http_conn **ret,
		     struct strata_err *e)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	int g = getaddrinfo(u->host, u->port, &hints, &res);
	if (g != 0)
		return strata_err_set(e, -EHOSTUNREACH, "cannot resolve %s: %s", u->host,
				      gai_strerror(g));
	int fd = -ENOENT;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
		fd = connect_one(ai, c->o.timeout_ms);
	freeaddrinfo(res);
	if (fd < 0)
		return strata_err_set(e, fd, "cannot connect to %s:%s: %s", u->host, u->port,
				      strerror(-fd));
	struct http_conn *conn = calloc(1, sizeof(*conn));
	if (!conn) {
		close(fd);
		return strata_err_set(e, -ENOMEM, "out of memory");
	}
	conn->fd = fd;
	conn->timeout_ms = c->o.timeout_ms;
	int r = u->tls ? tls_handshake(c, conn, u->host, e) : 0;
	if (r < 0) {
		conn_free(conn);
		return r;
	}
	*ret = conn;
	return 0;
}

static int io_errno(int err)
{
	if (err == EAGAIN || err == EWOULDBLOCK)
		return -ETIMEDOUT;
	if (err == EPIPE || err == 0)
		return -ECONNRESET;
	return -err;
}

/* Returns bytes read (>0), 0 at the end of the stream, or -errno. */
static ssize_t conn_recv(struct http_conn *conn, void *buf, size_t n)
{
	for (;;) {
		if (!conn->ssl) {
			ssize_t k = recv(conn->fd, buf, n, 0);
			if (k < 0 && errno == EINTR)
				continue;
			return k < 0 ? io_errno(errno) : k;
		}
		ERR_clear_error();
		int k = SSL_read(conn->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
		if (k > 0)
			return k;
		int se = SSL_get_error(conn->ssl, k);
		if (se == SSL_ERROR_ZERO_RETURN)
			return 0;
		if (se == SSL_ERROR_SYSCALL && errno == EINTR)
			continue;
		if (se == SSL_ERROR_SYSCALL)
			return io_errno(errno);
		return -ECONNRESET;
	}
}

static int conn_send(struct http_conn *conn, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t k;
		if (conn->ssl) {
			struct sigpipe_guard g;
			ERR_clear_error();
			sigpipe_block(&g);
			int w = SSL_write(conn->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
			int werr = errno;
			sigpipe_restore(&g);
			if (w <= 0)
				return SSL_get_error(conn->ssl, w) == SSL_ERROR_SYSCALL
					   ? io_errno(werr)
					   : -ECONNRESET;
			k = w;
		} else {
			k = send(conn->fd, buf, n, MSG_NOSIGNAL);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return io_errno(errno);
		}
		buf += k;
		n -= (size_t)k;
	}
	return 0;
}

static void set_rcvtimeo(struct http_conn *conn, int64_t ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	setsockopt(conn->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Refills the read buffer, within the deadline when one is set. */
static ssize_t conn_fill(struct http_conn *conn)
{
	if (conn->deadline_ms) {
		int64_t left = conn->deadline_ms - strata_mono_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		set_rcvtimeo(conn, STRATA_MIN(left, (int64_t)conn->timeout_ms));
	}
	ssize_t k = conn_recv(conn, conn->rbuf, sizeof(conn->rbuf));
	if (k > 0) {
		conn->rpos = 0;
		conn->rlen = (size_t)k;
	}
	return k;
}

/* Reads a line (without CRLF) into buf[cap]. Charges its bytes to *budget.
 * Returns its length, -EFBIG over cap or budget, -ECONNRESET at EOF. */
static ssize_t conn_line(struct http_conn *conn, char *buf, size_t cap, size_t *budget)
{
	size_t len = 0;
	for (;;) {
		if (conn->rpos == conn->rlen) {
			ssize_t k = conn_fill(conn);
			if (k <= 0)
				return k == 0 ? -ECONNRESET : k;
		}
		char ch = conn->rbuf[conn->rpos++];
		if (*budget == 0)
			return -EFBIG;
		(*budget)--;
		if (ch == '\n') {
			if (len > 0 && buf[len - 1] == '\r')
				len--;
			buf[len] = 0;
			return (ssize_t)len;
		}
		if (len + 1 >= cap)
			return -EFBIG;
		buf[len++] = ch;
	}
}

/* Reads raw body bytes: first the buffered ones, then from the socket. */
static ssize_t conn_read(struct http_conn *conn, void *buf, size_t n)
{
	if (conn->rpos < conn->rlen) {
		size_t k = STRATA_MIN(n, conn->rlen - conn->rpos);
		memcpy(buf, conn->rbuf + conn->rpos, k);
		conn->rpos += k;
		return (ssize_t)k;
	}
	return conn_recv(conn, buf, n);
}

/* --- requests and responses ------------------------------------------------ */

static int send_request(struct http_conn *conn, const char *method, const struct http_url *u,
			const char *const *headers)
{
	char hostport[HTTP_MAX_HOST + 16];
	bool v6 = strchr(u->host, ':') != NULL;
	bool dflt = !strcmp(u->port, u->tls ? "443" : "80");
	snprintf(hostport, sizeof(hostport), "%s%s%s%s%s", v6 ? "[" : "", u->host, v6 ? "]" : "",
		 dflt ? "" : ":", dflt ? "" : u->port);
	size_t cap = strlen(u->path) + strlen(hostport) + 256;
	for (size_t i = 0; headers && headers[i]; i++)
		cap += strlen(headers[i]) + 2;
	_cleanup_free_ char *req = malloc(cap);
	if (!req)
		return -ENOMEM;
	size_t n =
	    (size_t)snprintf(req, cap,
			     "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: strata-imagepull/1\r\n"
			     "Connection: close\r\n",
			     method, u->path, hostport);
	for (size_t i = 0; headers && headers[i]; i++) {
		if (strpbrk(headers[i], "\r\n"))
			return -EINVAL;
		n += (size_t)snprintf(req + n, cap - n, "%s\r\n", headers[i]);
	}
	n += (size_t)snprintf(req + n, cap - n, "\r\n");
	return conn_send(conn, req, n);
}

static int add_header(struct http_response *r, const char *line)
{
	const char *colon = strchr(line, ':');
	if (!colon || colon == line || strpbrk(line, " \t") < colon)
		return -EPROTO;
	if (r->n_headers >= HTTP_MAX_HEADERS)
		return -EFBIG;
	const char *v = colon + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	size_t vl = strlen(v);
	while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
		vl--;
	struct http_header *h = realloc(r->headers, (r->n_headers + 1) * sizeof(*h));
	if (!h)
		return -ENOMEM;
	r->headers = h;
	h[r->n_headers].name = strndup(line, (size_t)(colon - line));
	h[r->n_headers].value = strndup(v, vl);
	if (!h[r->n_headers].name || !h[r->n_headers].value) {
		free(h[r->n_headers].name);
		free(h[r->n_headers].value);
		return -ENOMEM;
	}
	r->n_headers++;
	return 0;
}

const char *http_header(const struct http_response *r, const char *name)
{
	for (size_t i = 0; i < r->n_headers; i++)
		if (!strcasecmp(r->headers[i].name, name))
			return r->headers[i].value;
	return NULL;
}

static int parse_status(const char *line, int *ret)
{
	if (strncmp(line, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)line[7]) || line[8] != ' ')
		return -EPROTO;
	if (!isdigit((unsigned char)line[9]) || !isdigit((unsigned char)line[10]) ||
	    !isdigit((unsigned char)line[11]) || (line[12] != ' ' && line[12] != 0))
		return -EPROTO;
	*ret = atoi(line + 9);
	return *ret >= 100 && *ret <= 599 ? 0 : -EPROTO;
}

static int parse_u64(const char *s, uint64_t *ret)
{
	if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 18)
		return -EPROTO;
	*ret = strtoull(s, NULL, 10);
	return 0;
}

/* Decides how the body is framed (RFC 9112 §6.3). */
static int body_framing(struct http_response *r, const char *method)
{
	if (!strcmp(method, "HEAD") || r->status < 200 || r->status == 204 || r->status == 304) {
		r->no_body = r->done = true;
		return 0;
	}
	const char *te = http_header(r, "Transfer-Encoding");
	if (te) {
		size_t n = strlen(te);
		if (n < 7 || strcasecmp(te + n - 7, "chunked") != 0)
			return -EPROTO; /* no length: we would not know where it ends */
		r->chunked = true;
		return 0;
	}
	for (size_t i = 0; i < r->n_headers; i++) {
		if (strcasecmp(r->headers[i].name, "Content-Length") != 0)
			continue;
		uint64_t v;
		if (parse_u64(r->headers[i].value, &v) < 0 || (r->has_length && v != r->length))
			return -EPROTO;
		r->has_length = true;
		r->length = r->remaining = v;
	}
	if (r->has_length && r->length == 0)
		r->done = true;
	return 0;
}

static int read_head_lines(struct http_client *c, struct http_response *r, char *line,
			   struct strata_err *e)
{
	size_t budget = c->o.max_header_bytes;
	for (;;) { /* skip 1xx interim responses */
		ssize_t n = conn_line(r->conn, line, HTTP_LINE_MAX, &budget);
		int k = n < 0 ? (int)n : parse_status(line, &r->status);
		for (; k == 0;) {
			n = conn_line(r->conn, line, HTTP_LINE_MAX, &budget);
			if (n <= 0) {
				k = (int)n;
				break;
			}
			if (line[0] == ' ' || line[0] == '\t')
				k = -EPROTO; /* obsolete line folding */
			else
				k = add_header(r, line);
		}
		if (k == -EFBIG)
			return strata_err_set(
			    e, -EFBIG,
			    "response headers over the limit (%zu bytes, %d headers, "
			    "%d bytes a line)",
			    c->o.max_header_bytes, HTTP_MAX_HEADERS, HTTP_LINE_MAX);
		if (k == -EPROTO)
			return strata_err_set(e, -EPROTO, "malformed HTTP response");
		if (k < 0)
			return strata_err_set(e, k, "reading the response: %s", strerror(-k));
		if (r->status >= 200 || r->status == 101)
			break;
		for (size_t i = 0; i < r->n_headers; i++) {
			free(r->headers[i].name);
			free(r->headers[i].value);
		}
		r->n_headers = 0;
	}
	return 0;
}

static int read_head(struct http_client *c, struct http_response *r, const char *method,
		     struct strata_err *e)
{
	_cleanup_free_ char *line = malloc(HTTP_LINE_MAX);
	if (!line)
		return strata_err_set(e, -ENOMEM, "out of memory");
	/* The whole header block must arrive within one stall limit: a server
	 * trickling a byte at a time cannot hold us longer. */
	r->conn->deadline_ms = strata_mono_ms() + c->o.timeout_ms;
	int k = read_head_lines(c, r, line, e);
	r->conn->deadline_ms = 0;
	set_rcvtimeo(r->conn, c->o.timeout_ms);
	if (k < 0)
		return k;
	if (body_framing(r, method) < 0)
		return strata_err_set(e, -EPROTO,
				      "malformed body framing (Content-Length or "
				      "Transfer-Encoding)");
	return 0;
}

int http_request(struct http_client *c, const char *method, const struct http_url *url,
		 const char *const *headers, struct http_response *ret, struct strata_err *e)
{
	struct http_response r = {0};
	int k = conn_open(c, url, &r.conn, e);
	if (k < 0)
		return k;
	k = send_request(r.conn, method, url, headers);
	if (k < 0)
		strata_err_set(e, k, "sending the request to %s: %s", url->host, strerror(-k));
	else
		k = read_head(c, &r, method, e);
	if (k < 0) {
		http_response_done(&r);
		return k;
	}
	*ret = r;
	return 0;
}

int http_response_from_fd(struct http_client *c, int fd, const char *method,
			  struct http_response *ret, struct strata_err *e)
{
	struct http_response r = {0};
	r.conn = calloc(1, sizeof(*r.conn));
	if (!r.conn) {
		close(fd);
		return strata_err_set(e, -ENOMEM, "out of memory");
	}
	r.conn->fd = fd;
	r.conn->timeout_ms = c->o.timeout_ms;
	int k = read_head(c, &r, method, e);
	if (k < 0) {
		http_response_done(&r);
		return k;
	}
	*ret = r;
	return 0;
}

/* Reads the next chunk-size line, or the trailers after the last chunk. */
static int next_chunk(struct http_response *r, struct strata_err *e)
{
	char line[256];
	size_t budget = 4096;
	if (r->chunk_open) { /* the CRLF after the previous chunk's data */
		ssize_t n = conn_line(r->conn, line, sizeof(line), &budget);
		if (n != 0)
			return strata_err_set(e, n < 0 && n != -EFBIG ? (int)n : -EPROTO,
					      "malformed chunked body");
	}
	ssize_t n = conn_line(r->conn, line, sizeof(line), &budget);
	if (n < 0)
		return strata_err_set(e, n == -EFBIG ? -EPROTO : (int)n, "malformed chunked body");
	size_t hex = strspn(line, "0123456789abcdefABCDEF");
	if (hex == 0 || hex > 15 || (line[hex] && line[hex] != ';' && line[hex] != ' '))
		return strata_err_set(e, -EPROTO, "malformed chunk size line");
	r->remaining = strtoull(line, NULL, 16);
	r->chunk_open = true;
	if (r->remaining > 0)
		return 0;
	for (;;) { /* trailers: bounded, ignored */
		budget = 16384 - STRATA_MIN(r->trailer_bytes, 16384);
		size_t before = budget;
		n = conn_line(r->conn, line, sizeof(line), &budget);
		r->trailer_bytes += before - budget;
		if (n < 0)
			return strata_err_set(e, n == -EFBIG ? -EFBIG : (int)n,
					      "chunked body trailers too long or cut");
		if (n == 0)
			break;
	}
	r->done = true;
	return 0;
}

ssize_t http_read_body(struct http_response *r, void *buf, size_t n, struct strata_err *e)
{
	if (r->done || n == 0)
		return 0;
	if (r->chunked && r->remaining == 0) {
		int k = next_chunk(r, e);
		if (k < 0)
			return k;
		if (r->done)
			return 0;
	}
	size_t want = (r->chunked || r->has_length) ? STRATA_MIN(n, r->remaining) : n;
	ssize_t k = conn_read(r->conn, buf, want);
	if (k < 0)
		return strata_err_set(e, (int)k, "reading the body: %s", strerror((int)-k));
	if (k == 0 && (r->chunked || r->has_length))
		return strata_err_set(e, -ECONNRESET,
				      "the connection closed %llu bytes before the "
				      "end of the body",
				      (unsigned long long)r->remaining);
	if (k == 0) {
		r->done = true;
		return 0;
	}
	if (r->chunked || r->has_length)
		r->remaining -= (uint64_t)k;
	if (r->has_length && r->remaining == 0)
		r->done = true;
	return k;
}

int http_read_body_all(struct http_response *r, size_t max, char **ret, size_t *ret_len,
		       struct strata_err *e)
{
	if (r->has_length && r->length > max)
		return strata_err_set(e, -EFBIG,
				      "response body of %llu bytes, over the limit of %zu",
				      (unsigned long long)r->length, max);
	size_t cap = r->has_length ? (size_t)r->length + 1 : 4096, len = 0;
	_cleanup_free_ char *buf = malloc(cap);
	if (!buf)
		return strata_err_set(e, -ENOMEM, "out of memory");
	for (;;) {
		if (len + 1 >= cap) {
			if (cap > max + 1)
				return strata_err_set(
				    e, -EFBIG, "response body over the limit of %zu bytes", max);
			cap = STRATA_MIN(cap * 2, max + 2);
			char *nb = realloc(buf, cap);
			if (!nb)
				return strata_err_set(e, -ENOMEM, "out of memory");
			buf = nb;
		}
		ssize_t k = http_read_body(r, buf + len, cap - len - 1, e);
		if (k < 0)
			return (int)k;
		if (k == 0)
			break;
		len += (size_t)k;
		if (len > max)
			return strata_err_set(e, -EFBIG,
					      "response body over the limit of %zu bytes", max);
	}
	buf[len] = 0;
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

void http_response_done(struct http_response *r)
{
	for (size_t i = 0; i < r->n_headers; i++) {
		free(r->headers[i].name);
		free(r->headers[i].value);
	}
	free(r->headers);
	conn_free(r->conn);
	memset(r, 0, sizeof(*r));
}

bool http_error_retryable(int err)
{
	return err == -ECONNRESET || err == -ETIMEDOUT || err == -ECONNREFUSED ||
	       err == -ECONNABORTED || err == -EPIPE || err == -EHOSTUNREACH;
}
