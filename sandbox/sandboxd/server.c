/* server.c — strata-sandboxd's HTTP connections: accept on the unix socket
 * (and optionally TCP with a bearer token), read a bounded request, hand it
 * to sbd_api_dispatch, queue and flush the response, stream chunked bodies.
 *
 * Invariants:
 *  1. A connection buffers at most SBD_HTTP_MAX_HEAD + cfg.max_body input bytes;
 *     a larger request is answered 413/431 and the connection closed.
 *  2. While a response streams, no further request on that connection is
 *     read; when the peer hangs up, the abort callback runs exactly once
 *     (cancelling the exec) and the connection is freed after it.
 *  3. Every request on TCP needs "Authorization: Bearer <token>".
 *  4. A lent connection (sbd_conn_lend: a file transfer on a worker owns
 *     the socket) is not watched, read or written by the loop until
 *     sbd_conn_give_back; an upload's body (sbd_api_body_streamed) is never
 *     buffered here, and nothing is read past the head of a request until
 *     the head says whether its body streams. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/http.h"
#include "fs/log.h"
#include "sandbox/sandboxd/sandboxd.h"

struct sbd_conn {
	struct sandboxd *d;
	struct sbd_watch w;
	bool tcp;
	char *in;
	size_t in_len, in_cap;
	struct sbd_http_req req;
	bool have_head, sent_continue;
	struct jw out;
	size_t out_off;
	bool close_after; /* close once out is flushed */
	bool streaming;
	bool keep_alive;
	bool dead;
	bool eof;      /* the peer sent FIN: nothing more to read */
	bool deferred; /* resume_after_stream is queued */
	void (*abort_fn)(void *);
	void *abort_ctx;
	bool streamed; /* the request's body goes to a transfer */
	bool lent;     /* the socket is a transfer's (xfer.h): not watched */
	int lent_fd;
};

static void conn_io(void *ctx, uint32_t events);

struct sandboxd *sbd_conn_daemon(struct sbd_conn *c)
{
	return c->d;
}

size_t sbd_conn_pending(const struct sbd_conn *c)
{
	return c->out.len - c->out_off;
}

/* Closing needs the fd, which sbd_watch_del forgets: keep it separately. */
static void conn_close(struct sbd_conn *c)
{
	int fd = c->w.fd;
	if (c->abort_fn && fd >= 0) {
		void (*fn)(void *) = c->abort_fn;
		c->abort_fn = NULL;
		fn(c->abort_ctx);
	}
	sbd_watch_del(c->d->loop, &c->w);
	if (fd >= 0)
		close(fd);
	c->dead = true;
	if (c->deferred)
		return; /* resume_after_stream frees it */
	sbd_http_req_done(&c->req);
	free(c->in);
	jw_done(&c->out);
	c->d->conns--;
	free(c);
}

static void flush_out(struct sbd_conn *c);

static void set_events(struct sbd_conn *c)
{
	uint32_t ev = EPOLLRDHUP;
	if (c->out_off < c->out.len)
		ev |= EPOLLOUT;
	if (!c->eof)
		ev |= EPOLLIN; /* always: to notice hang-ups while streaming */
	sbd_watch_mod(c->d->loop, &c->w, ev);
}

/* Sends what it can. Closes the connection (and returns) when it is done
 * with it; callers must not touch c after a call that may close it unless
 * they check through a deferred path. */
static void flush_out(struct sbd_conn *c)
{
	while (c->out_off < c->out.len) {
		ssize_t n = send(c->w.fd, c->out.buf + c->out_off, c->out.len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			c->dead = true;
			return;
		}
		c->out_off += (size_t)n;
	}
	if (c->out_off == c->out.len) {
		c->out.len = 0;
		c->out_off = 0;
	}
	set_events(c);
}

static void finish_response(struct sbd_conn *c)
{
	sbd_http_req_done(&c->req);
	c->have_head = false;
	c->sent_continue = false;
	if (!c->keep_alive)
		c->close_after = true;
}

void sbd_conn_reply_raw(struct sbd_conn *c, int status, const char *ctype, const void *p, size_t n)
{
	sbd_http_head(&c->out, status, ctype, (long long)n, c->keep_alive);
	jw_append(&c->out, p, n);
	finish_response(c);
}

void sbd_conn_reply_json(struct sbd_conn *c, int status, struct jw *body)
{
	jw_append(body, "\n", 1);
	if (body->err) {
		jw_done(body);
		sbd_conn_reply_error(c, 500, "internal", "out of memory");
		return;
	}
	sbd_conn_reply_raw(c, status, "application/json", body->buf, body->len);
	jw_done(body);
}

void sbd_conn_reply_error(struct sbd_conn *c, int status, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "error");
	jw_obj(&w);
	jw_kstr(&w, "code", code);
	jw_kstr(&w, "message", msg);
	jw_obj_end(&w);
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	sbd_conn_reply_raw(c, status, "application/json", w.buf ? w.buf : "", w.len);
	jw_done(&w);
}

void sbd_conn_hold(struct sbd_conn *c, bool hold)
{
	c->streaming = hold;
}

/* The head waits for the first chunk (which follows at once): one send,
 * one wake-up of the client, instead of two. */
void sbd_conn_stream_begin(struct sbd_conn *c, int status, const char *ctype)
{
	sbd_http_head(&c->out, status, ctype, -1, c->keep_alive);
	c->streaming = true;
}

void sbd_conn_stream_chunk(struct sbd_conn *c, const void *p, size_t n)
{
	if (!n || c->dead)
		return;
	sbd_http_chunk(&c->out, p, n);
	flush_out(c);
}

static void conn_process(struct sbd_conn *c);
static bool head_refused(struct sbd_conn *c);
static void dispatch_streamed(struct sbd_conn *c);

static void resume_after_stream(void *ctx)
{
	struct sbd_conn *c = ctx;
	c->deferred = false;
	if (c->dead && c->w.fd < 0) {
		conn_close(c); /* already closed: only frees */
		return;
	}
	if (c->dead || (c->close_after && c->out_off == c->out.len)) {
		conn_close(c);
		return;
	}
	conn_process(c);
}

void sbd_conn_stream_end_with(struct sbd_conn *c, const void *p, size_t n)
{
	if (n && !c->dead)
		sbd_http_chunk(&c->out, p, n); /* sent with the end: one send */
	sbd_conn_stream_end(c);
}

void sbd_conn_stream_end(struct sbd_conn *c)
{
	c->abort_fn = NULL;
	c->streaming = false;
	sbd_http_chunk(&c->out, NULL, 0);
	finish_response(c);
	flush_out(c);
	/* The exec that ends the stream runs inside a backend callback: carry on
	 * with this connection after it returned. */
	if (!c->deferred && sbd_defer(c->d->loop, resume_after_stream, c) == 0)
		c->deferred = true;
}

void sbd_conn_hold_done(struct sbd_conn *c)
{
	c->abort_fn = NULL;
	c->streaming = false;
	flush_out(c);
	if (!c->deferred && sbd_defer(c->d->loop, resume_after_stream, c) == 0)
		c->deferred = true;
}

void sbd_conn_set_abort(struct sbd_conn *c, void (*fn)(void *ctx), void *ctx)
{
	c->abort_fn = fn;
	c->abort_ctx = ctx;
}

static bool check_auth(struct sbd_conn *c)
{
	if (!c->tcp)
		return true;
	const char *a = c->req.auth;
	return a && !strncmp(a, "Bearer ", 7) && c->d->cfg.token && !strcmp(a + 7, c->d->cfg.token);
}

/* Parses and dispatches requests that are complete in the input buffer. */
static void conn_process(struct sbd_conn *c)
{
	while (!c->streaming && !c->close_after && !c->dead) {
		if (!c->have_head) {
			struct strata_err e;
			strata_err_clear(&e);
			int r = sbd_http_parse_head(c->in, c->in_len, SIZE_MAX, &c->req, &e);
			if (r == -EAGAIN)
				break;
			c->keep_alive = r == 0 && c->req.keep_alive;
			if (r < 0) {
				int st = c->req.status;
				sbd_conn_reply_error(c, st, st == 413 ? "too_large" : "bad_request",
						     "%s", e.msg);
				c->close_after = true;
				break;
			}
			c->have_head = true;
			if (head_refused(c))
				break;
			if (c->streamed) {
				dispatch_streamed(c);
				if (c->lent)
					return;
				break;
			}
		}
		size_t need = c->req.head_len + c->req.content_length;
		if (c->in_len < need) {
			if (c->req.expect_continue && !c->sent_continue) {
				jw_append(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
				c->sent_continue = true;
			}
			break;
		}
		if (!check_auth(c)) {
			sbd_conn_reply_error(c, 401, "unauthorized",
					     "missing or wrong bearer token");
			c->close_after = true;
		} else {
			sbd_api_dispatch(c, c->req.method, c->req.path, c->req.query,
					 c->in + c->req.head_len, c->req.content_length);
			if (c->lent)
				return; /* a transfer took the rest: sbd_conn_give_back */
		}
		memmove(c->in, c->in + need, c->in_len - need);
		c->in_len -= need;
	}
	if (c->eof && !c->streaming)
		c->close_after = true;
	flush_out(c);
	if (c->dead || (c->close_after && c->out_off == c->out.len && !c->streaming))
		conn_close(c);
}

/* The limits of a buffered body, once the head is known: an upload to a
 * sandbox's files streams (any size, chunked too); the rest is buffered up
 * to --max-body-mb. Returns true after refusing the request. */
static bool head_refused(struct sbd_conn *c)
{
	size_t max = (size_t)c->d->cfg.max_body;
	c->streamed = sbd_api_body_streamed(c->d, c->req.method, c->req.path);
	if (c->streamed)
		return false;
	if (c->req.chunked)
		sbd_conn_reply_error(c, 501, "unsupported",
				     "chunked request bodies are taken by file uploads only; "
				     "send Content-Length");
	else if (c->req.content_length > max)
		sbd_conn_reply_error(c, 413, "too_large",
				     "request body of %zu bytes is over the limit of %zu",
				     c->req.content_length, max);
	else
		return false;
	c->close_after = true;
	return true;
}

/* A request whose body a transfer streams: dispatched on its head. A route
 * that answers at once (an error) closes the connection after the answer:
 * the unread body cannot be told from a next request. */
static void dispatch_streamed(struct sbd_conn *c)
{
	if (!check_auth(c)) {
		sbd_conn_reply_error(c, 401, "unauthorized", "missing or wrong bearer token");
		c->close_after = true;
		return;
	}
	c->keep_alive = false;
	sbd_api_dispatch(c, c->req.method, c->req.path, c->req.query, NULL, c->req.content_length);
	if (!c->lent)
		c->close_after = true;
}

void sbd_conn_body(const struct sbd_conn *c, struct sbd_conn_body *ret)
{
	*ret = (struct sbd_conn_body){.pre = c->in + c->req.head_len,
				      .pre_len = c->in_len - c->req.head_len,
				      .length = c->req.content_length,
				      .chunked = c->req.chunked,
				      .keep_alive = c->req.keep_alive,
				      .expect_continue = c->req.expect_continue};
}

int sbd_conn_lend(struct sbd_conn *c, char **ret_out, size_t *ret_out_len)
{
	*ret_out_len = c->out.len - c->out_off;
	*ret_out = NULL;
	if (*ret_out_len && (*ret_out = malloc(*ret_out_len)))
		memcpy(*ret_out, c->out.buf + c->out_off, *ret_out_len);
	if (!*ret_out)
		*ret_out_len = 0;
	c->out.len = c->out_off = 0;
	c->lent_fd = c->w.fd;
	sbd_watch_del(c->d->loop, &c->w);
	c->lent = true;
	c->streaming = true;
	return c->lent_fd;
}

void sbd_conn_give_back(struct sbd_conn *c, const void *extra, size_t n, bool keep)
{
	c->lent = false;
	if (sbd_watch_add(c->d->loop, &c->w, c->lent_fd, EPOLLIN | EPOLLRDHUP, conn_io, c) < 0)
		c->dead = true;
	c->w.fd = c->lent_fd; /* conn_close closes it, also when the add failed */
	char *b = n > c->in_cap ? realloc(c->in, n) : c->in;
	if (b && n) {
		c->in = b;
		c->in_cap = n > c->in_cap ? n : c->in_cap;
		memmove(c->in, extra, n);
	}
	c->in_len = b ? n : 0;
	c->keep_alive = keep;
	if (!keep)
		c->close_after = true;
}

void sbd_conn_answered(struct sbd_conn *c, bool sent)
{
	if (sent)
		finish_response(c);
	else if (c->have_head)
		sbd_conn_reply_error(c, 500, "internal", "the transfer gave no answer");
	sbd_conn_hold_done(c);
}

static int read_in(struct sbd_conn *c)
{
	size_t limit = SBD_HTTP_MAX_HEAD + (size_t)c->d->cfg.max_body;
	for (;;) {
		if (c->in_len == c->in_cap) {
			if (c->in_cap >= limit)
				return 0; /* the parser answers 413/431 */
			size_t cap = c->in_cap ? c->in_cap * 2 : 4096;
			if (cap > limit)
				cap = limit;
			char *b = realloc(c->in, cap);
			if (!b)
				return -ENOMEM;
			c->in = b;
			c->in_cap = cap;
		}
		size_t room = c->in_cap - c->in_len;
		ssize_t n = recv(c->w.fd, c->in + c->in_len, room, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n <= 0)
			return -ECONNRESET;
		c->in_len += (size_t)n;
		/* A head is complete: whether its body is buffered here or
		 * streamed by a worker is for conn_process to decide first. */
		if (!c->have_head && memmem(c->in, c->in_len, "\r\n\r\n", 4))
			return 0;
		/* Short: the socket is most likely empty. The watch is
		 * level-triggered, so anything more (or the peer's EOF) is
		 * reported again: no recv that only says EAGAIN per request. */
		if ((size_t)n < room)
			return 0;
	}
}

static void conn_io(void *ctx, uint32_t events)
{
	struct sbd_conn *c = ctx;
	if (events & EPOLLOUT)
		flush_out(c);
	if (c->dead) {
		conn_close(c);
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		if (c->streaming || c->close_after) {
			/* Not reading requests now: only notice the peer leaving. */
			char b[512];
			ssize_t n = recv(c->w.fd, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK);
			/* EPOLLHUP: the peer closed both ways (unix sockets
			 * say so; over TCP the next write fails instead). A
			 * bare EOF is a half-close: keep answering. */
			if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
			    (events & (EPOLLHUP | EPOLLERR))) {
				conn_close(c);
				return;
			}
			if (n == 0) {
				c->eof = true;
				set_events(c);
				return;
			}
			if (n > 0 && c->in_len < SBD_HTTP_MAX_HEAD)
				read_in(c);
			return;
		}
		int r = read_in(c);
		if (r < 0 && r != -ECONNRESET) {
			conn_close(c);
			return;
		}
		if (r == -ECONNRESET) {
			/* The peer finished sending (half-close) or left: answer
			 * what it sent, then close. */
			c->eof = true;
			sbd_watch_mod(c->d->loop, &c->w, EPOLLOUT);
		}
		conn_process(c);
		return;
	}
	if (c->close_after && c->out_off == c->out.len && !c->streaming)
		conn_close(c);
}

static void accept_io(struct sandboxd *d, int lfd, bool tcp)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				log_warn_errno(-errno, "accept failed");
			return;
		}
		struct sbd_conn *c = calloc(1, sizeof(*c));
		if (!c || sbd_watch_add(d->loop, &c->w, fd, EPOLLIN | EPOLLRDHUP, conn_io, c) < 0) {
			free(c);
			close(fd);
			continue;
		}
		c->d = d;
		c->tcp = tcp;
		jw_init(&c->out);
		d->conns++;
	}
}

static void listen_io(void *ctx, uint32_t events)
{
	struct sandboxd *d = ctx;
	accept_io(d, d->listen_fd, false);
}

static void tcp_io(void *ctx, uint32_t events)
{
	struct sandboxd *d = ctx;
	accept_io(d, d->tcp_fd, true);
}

static int listen_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A stale socket from a dead sandboxd is replaced; a live one is not. */
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(probe);
		return -EADDRINUSE;
	}
	if (probe >= 0)
		close(probe);
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0660) < 0 ||
	    listen(fd, 1024) < 0)
		return -errno;
	return TAKE_FD(fd);
}

static int listen_tcp(const char *hostport)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	if (!colon || (size_t)(colon - hostport) >= sizeof(host))
		return -EINVAL;
	memcpy(host, hostport, colon - hostport);
	host[colon - hostport] = 0;
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE},
			*ai = NULL;
	if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai) != 0 || !ai)
		return -EINVAL;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	int r = 0;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0)
		r = -errno;
	freeaddrinfo(ai);
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	return fd;
}

int sbd_server_listen(struct sandboxd *d)
{
	int fd = listen_unix(d->cfg.socket_path);
	if (fd < 0)
		return log_error_errno(fd, "Failed to listen on %s", d->cfg.socket_path);
	d->listen_fd = fd;
	int r = sbd_watch_add(d->loop, &d->w_listen, fd, EPOLLIN, listen_io, d);
	if (r < 0)
		return r;
	if (!d->cfg.tcp_listen)
		return 0;
	if (!d->cfg.token)
		return log_error_errno(-EINVAL,
				       "--listen-tcp needs --token (or STRATA_SANDBOXD_TOKEN)");
	fd = listen_tcp(d->cfg.tcp_listen);
	if (fd < 0)
		return log_error_errno(fd, "Failed to listen on %s", d->cfg.tcp_listen);
	d->tcp_fd = fd;
	return sbd_watch_add(d->loop, &d->w_tcp, fd, EPOLLIN, tcp_io, d);
}

void sbd_server_close(struct sandboxd *d)
{
	if (d->listen_fd >= 0) {
		sbd_watch_del(d->loop, &d->w_listen);
		close(d->listen_fd);
		unlink(d->cfg.socket_path);
		d->listen_fd = -1;
	}
	if (d->tcp_fd >= 0) {
		sbd_watch_del(d->loop, &d->w_tcp);
		close(d->tcp_fd);
		d->tcp_fd = -1;
	}
}
