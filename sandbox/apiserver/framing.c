/* framing.c — HTTP/1.1 bodies as they pass through the apiserver: sized,
 * chunked (exec streams, file transfers) or to the end of the connection,
 * copied as they arrive so that a stream is never held back; and the head
 * of a node's answer, which says how its body is framed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "sandbox/apiserver/apiserver.h"

int ibuf_init(struct ibuf *in, int fd, size_t cap)
{
	in->fd = fd;
	in->len = 0;
	in->cap = cap;
	in->b = malloc(cap);
	return in->b ? 0 : -ENOMEM;
}

void ibuf_done(struct ibuf *in)
{
	free(in->b);
	in->b = NULL;
}

ssize_t ibuf_fill(struct ibuf *in)
{
	if (in->len == in->cap)
		return -ENOBUFS;
	for (;;) {
		ssize_t n = recv(in->fd, in->b + in->len, in->cap - in->len, 0);
		if (n >= 0) {
			in->len += (size_t)n;
			return n;
		}
		if (errno != EINTR)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
	}
}

void ibuf_consume(struct ibuf *in, size_t n)
{
	memmove(in->b, in->b + n, in->len - n);
	in->len -= n;
}

int send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EPIPE;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ---- the head of an answer --------------------------------------------------- */

static const char *find_end(const char *b, size_t n)
{
	for (size_t i = 0; i + 3 < n; i++)
		if (!memcmp(b + i, "\r\n\r\n", 4))
			return b + i + 4;
	return NULL;
}

static bool header_is(const char *line, size_t n, const char *name, const char **ret_v)
{
	size_t k = strlen(name);
	if (n <= k || strncasecmp(line, name, k) || line[k] != ':')
		return false;
	const char *v = line + k + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	*ret_v = v;
	return true;
}

static int parse_resp(const char *b, size_t head_len, bool head_request, struct resp_head *r)
{
	if (head_len < 12 || strncmp(b, "HTTP/1.", 7))
		return -EBADMSG;
	r->status = atoi(b + 9);
	r->kind = BODY_EOF;
	r->close = b[7] == '0';
	bool sized = false;
	for (const char *p = memchr(b, '\n', head_len) + 1; p < b + head_len - 2;) {
		const char *e = memchr(p, '\n', (size_t)(b + head_len - p));
		const char *v;
		if (!e)
			break;
		size_t n = (size_t)(e - p);
		if (header_is(p, n, "Content-Length", &v)) {
			r->length = strtoull(v, NULL, 10);
			sized = true;
		} else if (header_is(p, n, "Transfer-Encoding", &v) &&
			   !strncasecmp(v, "chunked", 7)) {
			r->kind = BODY_CHUNKED;
		} else if (header_is(p, n, "Connection", &v)) {
			r->close = !strncasecmp(v, "close", 5);
		}
		p = e + 1;
	}
	if (r->kind != BODY_CHUNKED && sized)
		r->kind = BODY_LEN;
	if (head_request || r->status == 204 || r->status == 304 || r->status / 100 == 1)
		r->kind = BODY_NONE;
	if (r->kind == BODY_EOF)
		r->close = true;
	r->head_len = head_len;
	return r->status >= 100 && r->status < 600 ? 0 : -EBADMSG;
}

int resp_head_read(struct ibuf *in, bool head_request, struct resp_head *ret)
{
	const char *end;
	memset(ret, 0, sizeof(*ret));
	while (!(end = find_end(in->b, in->len))) {
		if (in->len >= SBD_HTTP_MAX_HEAD)
			return -EBADMSG;
		ssize_t n = ibuf_fill(in);
		if (n <= 0)
			return n == 0 ? -ECONNRESET : (int)n;
	}
	return parse_resp(in->b, (size_t)(end - in->b), head_request, ret);
}

/* ---- chunked bodies -------------------------------------------------------- */

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TBOL, CH_TLINE, CH_END_LF };

struct chunked {
	int st;
	uint64_t left;
	int digits;
};

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch |= 0x20;
	return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* One byte of framing (not data). Returns 1 at the end, 0, or -EBADMSG. */
static int chunked_byte(struct chunked *c, char ch)
{
	switch (c->st) {
	case CH_SIZE:
		if (hexval(ch) >= 0 && c->digits < 15) {
			c->left = c->left * 16 + (uint64_t)hexval(ch);
			c->digits++;
			return 0;
		}
		if (!c->digits || (ch != ';' && ch != '\r'))
			return -EBADMSG;
		c->st = ch == ';' ? CH_EXT : CH_SIZE_LF;
		return 0;
	case CH_EXT:
		if (ch == '\r')
			c->st = CH_SIZE_LF;
		return 0;
	case CH_SIZE_LF:
		if (ch != '\n')
			return -EBADMSG;
		c->st = c->left ? CH_DATA : CH_TBOL;
		return 0;
	case CH_DATA_CR:
		c->st = CH_DATA_LF;
		return ch == '\r' ? 0 : -EBADMSG;
	case CH_DATA_LF:
		*c = (struct chunked){.st = CH_SIZE};
		return ch == '\n' ? 0 : -EBADMSG;
	case CH_TBOL:
		c->st = ch == '\r' ? CH_END_LF : CH_TLINE;
		return 0;
	case CH_TLINE:
		if (ch == '\n')
			c->st = CH_TBOL;
		return 0;
	case CH_END_LF:
		return ch == '\n' ? 1 : -EBADMSG;
	}
	return -EBADMSG;
}

/* How many of p[0..n) belong to the body; *done at its end. */
static ssize_t chunked_feed(struct chunked *c, const char *p, size_t n, bool *done)
{
	size_t i = 0;
	*done = false;
	while (i < n) {
		if (c->st == CH_DATA) {
			size_t k = n - i < c->left ? n - i : (size_t)c->left;
			i += k;
			c->left -= k;
			if (!c->left)
				c->st = CH_DATA_CR;
			continue;
		}
		int r = chunked_byte(c, p[i++]);
		if (r < 0)
			return r;
		if (r == 1) {
			*done = true;
			break;
		}
	}
	return (ssize_t)i;
}

/* ---- pumps ------------------------------------------------------------------ */

/* The body bytes at the front of in (at most what is there): *ret_n, and
 * *ret_done when the body ends with them. */
static int body_piece(struct ibuf *in, enum body_kind kind, uint64_t *left, struct chunked *ch,
		      size_t *ret_n, bool *ret_done)
{
	if (kind == BODY_LEN) {
		*ret_n = in->len < *left ? in->len : (size_t)*left;
		*left -= *ret_n;
		*ret_done = *left == 0;
		return 0;
	}
	if (kind == BODY_EOF) {
		*ret_n = in->len;
		*ret_done = false;
		return 0;
	}
	ssize_t n = chunked_feed(ch, in->b, in->len, ret_done);
	if (n < 0)
		return (int)n;
	*ret_n = (size_t)n;
	return 0;
}

int pump_body(struct ibuf *in, int out_fd, enum body_kind kind, uint64_t length)
{
	struct chunked ch = {.st = CH_SIZE};
	uint64_t left = length;
	bool done = kind == BODY_NONE || (kind == BODY_LEN && !length);
	bool out_ok = true;

	while (!done) {
		if (!in->len) {
			ssize_t r = ibuf_fill(in);
			if (r == 0 && kind == BODY_EOF)
				return out_ok ? 0 : -EPIPE;
			if (r <= 0)
				return r == 0 ? -ECONNRESET : (int)r;
		}
		size_t n = 0;
		int e = body_piece(in, kind, &left, &ch, &n, &done);
		if (e < 0)
			return e;
		if (out_ok && out_fd >= 0 && send_all(out_fd, in->b, n) < 0)
			return -EPIPE; /* the reader left: the caller closes both */
		ibuf_consume(in, n);
	}
	return 0;
}

int read_body(struct ibuf *in, enum body_kind kind, uint64_t length, size_t max, char **ret,
	      size_t *ret_len)
{
	struct chunked ch = {.st = CH_SIZE};
	uint64_t left = length;
	bool done = kind == BODY_NONE || (kind == BODY_LEN && !length);
	size_t cap = 4096, len = 0;
	char *out = malloc(cap);

	while (out && !done) {
		if (!in->len) {
			ssize_t r = ibuf_fill(in);
			if (r == 0 && kind == BODY_EOF)
				break;
			if (r <= 0) {
				free(out);
				return r == 0 ? -ECONNRESET : (int)r;
			}
		}
		size_t n = 0;
		int e = body_piece(in, kind, &left, &ch, &n, &done);
		if (e < 0 || len + n > max) {
			free(out);
			return e < 0 ? e : -EFBIG;
		}
		if (len + n + 1 > cap) {
			while (len + n + 1 > cap)
				cap *= 2;
			char *o = realloc(out, cap);
			if (!o)
				break;
			out = o;
		}
		memcpy(out + len, in->b, n);
		len += n;
		ibuf_consume(in, n);
	}
	if (!out || !done) {
		if (out && kind == BODY_EOF)
			done = true;
		if (!done) {
			free(out);
			return -ENOMEM;
		}
	}
	/* a chunked body keeps its framing: decode the chunks' data */
	if (kind == BODY_CHUNKED) {
		size_t w = 0;
		for (size_t r = 0; r < len;) {
			uint64_t sz = strtoull(out + r, NULL, 16);
			char *nl = memchr(out + r, '\n', len - r);
			if (!nl || !sz)
				break;
			r = (size_t)(nl - out) + 1;
			memmove(out + w, out + r, sz);
			w += sz;
			r += sz + 2;
		}
		len = w;
	}
	out[len] = 0;
	*ret = out;
	*ret_len = len;
	return 0;
}
