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
 *  3. Every request head is authenticated before anything else is done for
 *     it (auth.c: a token, or the unix socket's root): a refused one is
 *     answered 401 and the connection closed; every request on TCP needs
 *     "Authorization: Bearer <token>".
 *  4. A lent connection (sbd_conn_lend: a file transfer on a worker owns
 *     the socket) is not watched, read or written by the loop until
 *     sbd_conn_give_back; an upload's body (sbd_api_body_streamed) is never
 *     buffered here, and nothing is read past the head of a request until
 *     the head says whether its body streams.
 *  5. Limits against many and slow clients (sandboxd.h's SBD_*_DEFAULT,
 *     options of main.c): at most cfg.max_conns connections are served and
 *     cfg.max_conns_per_peer of one peer (peers.h); one more is answered
 *     503 overloaded and closed. Every connection not lent or streaming
 *     has a deadline (conn_expiry, checked by the sweep timer): its request
 *     head, its buffered body, its idle keep-alive or its unread answer.
 *     Buffered bodies of all connections together stay within
 *     cfg.max_body_total, reserved from Content-Length before any is read.
 *  6. accept failing for want of descriptors stops the listeners for
 *     ACCEPT_BACKOFF_MS (no spinning on a listener that stays readable);
 *     refusals, timeouts and accept errors are logged at most once per
 *     LOG_INTERVAL_MS, with a count.
 *  7. The output buffer is compacted as it drains (OUT_COMPACT_MIN), so a
 *     reader slightly behind holds about what it has not read yet:
 *     sbd_conn_pending is always out.len - out_off. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/http.h"
#include "fs/log.h"
#include "sandbox/sandboxd/peers.h"
#include "sandbox/sandboxd/sandboxd.h"

/* The input buffer before a head is complete: the largest head and a
 * little of what follows it in the same read. */
#define IN_HEAD_CAP (SBD_HTTP_MAX_HEAD + 4096)
/* Compact the output buffer once this much of it was sent and it is at
 * least half sent: each byte is moved at most about once. */
#define OUT_COMPACT_MIN (64u << 10)
/* A drained output buffer larger than this is freed (a big answer does not
 * pin its memory for the connection's life). */
#define OUT_KEEP (256u << 10)
/* How often deadlines are checked: their resolution. */
#define SWEEP_MS 250
/* accept out of descriptors (EMFILE, ENFILE): not tried again for this
 * long (the sweep ends it: one period). The listener stays readable
 * meanwhile, so retrying at once spun a core and wrote a log line per try;
 * 4 tries a second cost nothing, and deadlines and closes free
 * descriptors meanwhile. */
#define ACCEPT_BACKOFF_MS SWEEP_MS
/* Log lines of a kind (refusals, timeouts, accept errors): one per
 * interval at most, with the count since the last. */
#define LOG_INTERVAL_MS 10000
/* An error answer (503, 408, 401, 413, 431) is followed by a half-close
 * and what the client still sends is read and dropped for up to this
 * long, so that closing with unread input (a TCP reset) does not destroy
 * the answer before the client read it. At most LINGER_MAX connections
 * linger at once; past that they are closed at once. */
#define LINGER_MS 1000
#define LINGER_MAX 256
/* At the global cap, a new connection takes the place of the oldest one
 * that has waited this long for a request head (or idles between
 * requests): a real client sends its head at once, so many slow ones from
 * many peers cannot lock the others out. Without such a connection the
 * new one is refused. */
#define EVICT_MIN_MS 1000

/* A log line of a kind, rate-limited: n events since the last line. */
struct ratelog {
	int64_t next_ms;
	uint64_t n;
};

/* The connections of one sandboxd and their limits (d->server). */
struct sbd_server {
	struct sbd_conn *conns;	 /* every connection, also lent and lingering: newest first */
	struct sbd_conn *oldest; /* the list's tail */
	size_t lingering;	 /* of conns, half-closed, being drained */
	int64_t body_total;	 /* bytes reserved for buffered bodies */
	struct sbd_peers *peers;
	int timer_fd; /* the sweep, armed while there are connections or backoff */
	struct sbd_watch w_timer;
	bool timer_armed;
	int64_t backoff_until; /* accept paused until (0: not paused) */
	struct ratelog log_refused, log_timeout, log_accept;
	int accept_errno; /* the last accept error, for the log line */
};

struct sbd_conn {
	struct sandboxd *d;
	struct sbd_watch w;
	struct sbd_conn *prev, *next; /* in d->server->conns */
	struct sbd_peer *peer;	      /* its count in the per-peer table */
	int64_t phase_ms;	      /* the current head, body or idle wait began */
	int64_t sent_ms;	      /* the answer was queued or last made progress */
	int64_t body_reserved;	      /* of d->server->body_total */
	unsigned served;	      /* requests answered */
	bool body_wait;		      /* a head whose buffered body is being read */
	bool linger;		      /* half-close and drain before closing (LINGER_MS) */
	bool lingering;
	int64_t linger_until;
	bool tcp;
	uint32_t uid;	    /* the unix socket peer's (SO_PEERCRED) */
	struct sbd_who who; /* who sent the current request (auth.c) */
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
static void sweep_arm(struct sbd_server *s, bool on);

struct sandboxd *sbd_conn_daemon(struct sbd_conn *c)
{
	return c->d;
}

size_t sbd_conn_pending(const struct sbd_conn *c)
{
	return c->out.len - c->out_off;
}

/* Counts an event of r's kind; returns how many to log when a line is due
 * (the first at once, then at most one per LOG_INTERVAL_MS), else 0. */
static uint64_t ratelog_hit(struct ratelog *r, int64_t now)
{
	r->n++;
	if (now < r->next_ms)
		return 0;
	r->next_ms = now + LOG_INTERVAL_MS;
	uint64_t n = r->n;
	r->n = 0;
	return n;
}

/* The events not logged yet when their interval is over (the sweep). */
static uint64_t ratelog_due(struct ratelog *r, int64_t now)
{
	if (!r->n || now < r->next_ms)
		return 0;
	r->n--; /* ratelog_hit counts one more */
	return ratelog_hit(r, now);
}

static void body_release(struct sbd_conn *c)
{
	c->d->server->body_total -= c->body_reserved;
	c->body_reserved = 0;
}

/* Closing needs the fd, which sbd_watch_del forgets: keep it separately. */
static void conn_close(struct sbd_conn *c)
{
	struct sbd_server *s = c->d->server;
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
	if (c->lingering)
		s->lingering--;
	body_release(c);
	sbd_peers_put(s->peers, c->peer);
	*(c->prev ? &c->prev->next : &s->conns) = c->next;
	*(c->next ? &c->next->prev : &s->oldest) = c->prev;
	sbd_http_req_done(&c->req);
	free(c->in);
	jw_done(&c->out);
	c->d->conns--;
	free(c);
}

/* The input buffer's limit now: a head, or the head and buffered body of
 * a request being read. */
static size_t in_limit(const struct sbd_conn *c)
{
	size_t need = c->body_wait ? c->req.head_len + c->req.content_length : 0;
	return need > IN_HEAD_CAP ? need : IN_HEAD_CAP;
}

/* Level-triggered: EPOLLIN only while the connection would read (else a
 * readable socket it does not read is reported without end), EPOLLRDHUP
 * until the peer's EOF was seen (hang-ups and errors are always reported). */
static void set_events(struct sbd_conn *c)
{
	uint32_t ev = 0;
	if (c->out_off < c->out.len)
		ev |= EPOLLOUT;
	if (!c->eof) {
		ev |= EPOLLRDHUP;
		if (c->lingering || c->in_len < in_limit(c))
			ev |= EPOLLIN;
	}
	sbd_watch_mod(c->d->loop, &c->w, ev);
}

/* After a send: the buffer keeps only what is not sent yet (invariant 7). */
static void out_compact(struct sbd_conn *c)
{
	if (c->out_off == c->out.len) {
		c->out.len = c->out_off = 0;
		if (c->out.cap > OUT_KEEP)
			jw_done(&c->out);
	} else if (c->out_off >= OUT_COMPACT_MIN && c->out_off * 2 >= c->out.len) {
		memmove(c->out.buf, c->out.buf + c->out_off, c->out.len - c->out_off);
		c->out.len -= c->out_off;
		c->out_off = 0;
	}
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
		c->sent_ms = sbd_now_ms();
	}
	out_compact(c);
	set_events(c);
}

/* c is done with: closed, or first half-closed and drained (LINGER_MS)
 * when it answered an error to a client that may still be sending. */
static void conn_done(struct sbd_conn *c)
{
	struct sbd_server *s = c->d->server;
	if (!c->dead && c->out_off < c->out.len) {
		c->close_after = true; /* conn_io comes back once it is sent */
		return;
	}
	if (c->dead || !c->linger || c->eof || c->lingering || s->lingering >= LINGER_MAX ||
	    shutdown(c->w.fd, SHUT_WR) < 0) {
		conn_close(c);
		return;
	}
	c->lingering = true;
	s->lingering++;
	c->linger_until = sbd_now_ms() + LINGER_MS;
	body_release(c);
	set_events(c);
}

static void finish_response(struct sbd_conn *c)
{
	sbd_http_req_done(&c->req);
	c->have_head = false;
	c->body_wait = false;
	c->sent_continue = false;
	c->served++;
	c->phase_ms = c->sent_ms = sbd_now_ms();
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
	jw_error_doc(&w, code, msg);
	sbd_conn_reply_raw(c, status, "application/json", w.buf ? w.buf : "", w.len);
	jw_done(&w);
}

/* An error answered by the server itself (not the API): the connection
 * closes after it, lingering (conn_done). */
static void reply_fatal(struct sbd_conn *c, int status, const char *code, const char *msg)
{
	c->keep_alive = false;
	sbd_conn_reply_error(c, status, code, "%s", msg);
	c->close_after = true;
	c->linger = true;
}

void sbd_conn_hold(struct sbd_conn *c, bool hold)
{
	c->streaming = hold;
}

bool sbd_conn_held(const struct sbd_conn *c)
{
	return c->streaming;
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
		conn_done(c);
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

const struct sbd_who *sbd_conn_who(const struct sbd_conn *c)
{
	return &c->who;
}

/* A request whose head is complete: refused (401 on TCP without the token,
 * body limits), dispatched on its head (a streamed body), or waiting for
 * its buffered body. Returns false when conn_process must stop. */
static bool head_done(struct sbd_conn *c)
{
	c->have_head = true;
	c->phase_ms = sbd_now_ms();
	/* Before anything else, so that a client without the token holds
	 * nothing: no body read, no reservation, no slot past this answer. */
	const char *why = NULL;
	if (sbd_auth_request(c->d, c->tcp, c->uid, c->req.auth, &c->who, &why) < 0) {
		reply_fatal(c, 401, "unauthorized", why);
		return false;
	}
	if (head_refused(c))
		return false;
	if (c->streamed) {
		dispatch_streamed(c);
		return false;
	}
	c->body_wait = true;
	return true;
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
				reply_fatal(c, st, st == 413 ? "too_large" : "bad_request", e.msg);
				break;
			}
			if (!head_done(c)) {
				if (c->lent)
					return; /* a transfer took the rest: sbd_conn_give_back */
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
		c->body_wait = false;
		sbd_api_dispatch(c, c->req.method, c->req.path, c->req.query,
				 c->in + c->req.head_len, c->req.content_length);
		if (c->lent)
			return; /* a transfer took the rest: sbd_conn_give_back */
		memmove(c->in, c->in + need, c->in_len - need);
		c->in_len -= need;
		body_release(c);
		if (c->in_cap > IN_HEAD_CAP && c->in_len <= IN_HEAD_CAP) {
			char *b = realloc(c->in, IN_HEAD_CAP); /* a big body is gone */
			if (b) {
				c->in = b;
				c->in_cap = IN_HEAD_CAP;
			}
		}
	}
	if (c->eof && !c->streaming)
		c->close_after = true;
	flush_out(c);
	if (c->dead || (c->close_after && c->out_off == c->out.len && !c->streaming))
		conn_done(c);
}

/* The limits of a buffered body, once the head is known: an upload to a
 * sandbox's files streams (any size, chunked too); the rest is buffered up
 * to --max-body-mb, and all connections' together up to
 * --max-body-total-mb (reserved here, before any of it is read). Returns
 * true after refusing the request. */
static bool head_refused(struct sbd_conn *c)
{
	struct sbd_server *s = c->d->server;
	size_t max = (size_t)c->d->cfg.max_body;
	char msg[256];
	c->streamed = sbd_api_body_streamed(c->d, &c->who, c->req.method, c->req.path);
	if (c->streamed)
		return false;
	if (c->req.chunked) {
		reply_fatal(c, 501, "unsupported",
			    "chunked request bodies are taken by file uploads only; "
			    "send Content-Length");
		return true;
	}
	if (c->req.content_length > max) {
		snprintf(msg, sizeof(msg), "request body of %zu bytes is over the limit of %zu",
			 c->req.content_length, max);
		reply_fatal(c, 413, "too_large", msg);
		return true;
	}
	int64_t len = (int64_t)c->req.content_length;
	if (len > 0 && s->body_total + len > c->d->cfg.max_body_total) {
		snprintf(msg, sizeof(msg),
			 "request bodies being received hold %lld of %lld bytes "
			 "(--max-body-total-mb): this one of %lld does not fit; retry later",
			 (long long)s->body_total, (long long)c->d->cfg.max_body_total,
			 (long long)len);
		reply_fatal(c, 503, "overloaded", msg);
		return true;
	}
	c->body_reserved = len;
	s->body_total += len;
	return false;
}

/* A request whose body a transfer streams: dispatched on its head. A route
 * that answers at once (an error) closes the connection after the answer:
 * the unread body cannot be told from a next request. It lingers: a
 * client still sending that body would otherwise get EPIPE or a reset in
 * place of the answer. */
static void dispatch_streamed(struct sbd_conn *c)
{
	c->keep_alive = false;
	sbd_api_dispatch(c, c->req.method, c->req.path, c->req.query, NULL, c->req.content_length);
	if (!c->lent) {
		c->close_after = true;
		c->linger = true;
	}
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
	if (!keep) { /* the body may be unread: as dispatch_streamed */
		c->close_after = true;
		c->linger = true;
	}
}

void sbd_conn_answered(struct sbd_conn *c, bool sent)
{
	if (sent)
		finish_response(c);
	else if (c->have_head)
		sbd_conn_reply_error(c, 500, "internal", "the transfer gave no answer");
	sbd_conn_hold_done(c);
}

/* Reads what fits under in_limit. Returns 0, -EPIPE at the peer's EOF,
 * -ECONNRESET on an error, -ENOMEM. */
static int read_in(struct sbd_conn *c)
{
	size_t limit = in_limit(c);
	for (;;) {
		if (c->in_len >= c->in_cap) {
			if (c->in_cap >= limit)
				return 0; /* the parser answers 431, or the request is whole */
			/* A body's buffer at once (reserved already, and its pages
			 * resident only as bytes arrive): no copies of doubling. */
			size_t cap = c->body_wait ? limit : c->in_cap ? c->in_cap * 2 : 4096;
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
			return n == 0 ? -EPIPE : -ECONNRESET;
		/* The first byte of a keep-alive connection's next request:
		 * its head's deadline starts (conn_expiry); a new connection's
		 * started at its accept. */
		if (c->in_len == 0 && !c->have_head && c->served)
			c->phase_ms = sbd_now_ms();
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

/* A lingering connection: what the client still sends is dropped; its EOF,
 * an error or LINGER_MS (the sweep) closes it. */
static void linger_io(struct sbd_conn *c, uint32_t events)
{
	char b[4096];
	for (int i = 0; i < 16; i++) { /* then the rest is reported again */
		ssize_t n = recv(c->w.fd, b, sizeof(b), MSG_DONTWAIT);
		if (n > 0 || (n < 0 && errno == EINTR))
			continue;
		if (n < 0 && errno == EAGAIN && !(events & (EPOLLHUP | EPOLLERR)))
			return;
		conn_close(c);
		return;
	}
}

static void conn_io(void *ctx, uint32_t events)
{
	struct sbd_conn *c = ctx;
	if (c->lingering) {
		linger_io(c, events);
		return;
	}
	if (events & EPOLLOUT)
		flush_out(c);
	if (c->dead) {
		conn_close(c);
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		if (c->streaming || c->close_after) {
			/* Not reading requests now: read ahead (bounded) and notice
			 * the peer leaving. EPOLLHUP: the peer closed both ways
			 * (unix sockets say so; over TCP the next write fails
			 * instead). A bare EOF is a half-close: keep answering. */
			int r = read_in(c);
			if ((r < 0 && r != -EPIPE) || (events & (EPOLLHUP | EPOLLERR))) {
				conn_close(c);
				return;
			}
			if (r == -EPIPE)
				c->eof = true;
			set_events(c);
			if (c->close_after && c->out_off == c->out.len && !c->streaming)
				conn_done(c);
			return;
		}
		int r = read_in(c);
		if (r < 0 && r != -EPIPE && r != -ECONNRESET) {
			conn_close(c);
			return;
		}
		if (r < 0) {
			/* The peer finished sending (half-close) or left: answer
			 * what it sent, then close. */
			c->eof = true;
			set_events(c);
		}
		conn_process(c);
		return;
	}
	if (c->close_after && c->out_off == c->out.len && !c->streaming)
		conn_done(c);
}

/* ---- deadlines -------------------------------------------------------------- */

enum expiry { EXP_NONE, EXP_CLOSE, EXP_408 };

/* What c's deadline says at now (invariant 5), and for a 408 its message. */
static enum expiry conn_expiry(const struct sbd_conn *c, int64_t now, const char **ret_why)
{
	const struct sandboxd_config *k = &c->d->cfg;
	if (c->lent || c->dead || c->deferred)
		return EXP_NONE;
	if (c->lingering)
		return now >= c->linger_until ? EXP_CLOSE : EXP_NONE;
	if (c->streaming) /* an exec or a create: deadlines of their own */
		return EXP_NONE;
	if (c->out_off < c->out.len || c->close_after) /* an answer the client does not read */
		return now - c->sent_ms >= k->idle_conn_timeout_ms ? EXP_CLOSE : EXP_NONE;
	if (c->have_head) {
		int64_t t = k->body_timeout_ms +
			    (int64_t)(c->req.content_length / SBD_BODY_MIN_RATE) * 1000;
		*ret_why = "the request body did not arrive in time";
		return now - c->phase_ms >= t ? EXP_408 : EXP_NONE;
	}
	if (c->in_len == 0 && c->served)
		return now - c->phase_ms >= k->idle_conn_timeout_ms ? EXP_CLOSE : EXP_NONE;
	*ret_why = "the request head did not arrive in time";
	return now - c->phase_ms >= k->head_timeout_ms ? EXP_408 : EXP_NONE;
}

static void conn_expire(struct sbd_conn *c, enum expiry x, const char *why, int64_t now)
{
	struct sbd_server *s = c->d->server;
	uint64_t n = ratelog_hit(&s->log_timeout, now);
	if (n)
		log_info("closed %llu connections past a deadline (the last: %s)",
			 (unsigned long long)n, x == EXP_408 ? why : "idle or not reading");
	if (x == EXP_CLOSE) {
		conn_close(c);
		return;
	}
	if (c->have_head)
		sbd_http_req_done(&c->req);
	reply_fatal(c, 408, "timeout", why);
	flush_out(c);
	conn_done(c);
}

static void accept_resume(struct sandboxd *d);

/* The sweep timer: deadlines, the end of an accept backoff, and the log
 * lines that are due. */
static void sweep_io(void *ctx, uint32_t events)
{
	struct sandboxd *d = ctx;
	struct sbd_server *s = d->server;
	uint64_t x;
	if (read(s->timer_fd, &x, sizeof(x)) < 0 && errno != EAGAIN)
		return;
	int64_t now = sbd_now_ms();
	for (struct sbd_conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		const char *why = NULL;
		enum expiry e = conn_expiry(c, now, &why);
		if (e != EXP_NONE)
			conn_expire(c, e, why, now);
	}
	if (s->backoff_until && now >= s->backoff_until)
		accept_resume(d);
	uint64_t n;
	if ((n = ratelog_due(&s->log_refused, now)))
		log_warn("refused %llu connections over the connection caps in the last %d s",
			 (unsigned long long)n, LOG_INTERVAL_MS / 1000);
	if ((n = ratelog_due(&s->log_timeout, now)))
		log_info("closed %llu connections past a deadline in the last %d s",
			 (unsigned long long)n, LOG_INTERVAL_MS / 1000);
	if ((n = ratelog_due(&s->log_accept, now)))
		log_warn_errno(-s->accept_errno, "accept failed %llu times in the last %d s",
			       (unsigned long long)n, LOG_INTERVAL_MS / 1000);
	if (!s->conns && !s->backoff_until)
		sweep_arm(s, false);
}

static void sweep_arm(struct sbd_server *s, bool on)
{
	if (s->timer_armed == on || s->timer_fd < 0)
		return;
	struct itimerspec its = {0};
	if (on)
		its.it_interval.tv_nsec = its.it_value.tv_nsec = SWEEP_MS * 1000000L;
	if (timerfd_settime(s->timer_fd, 0, &its, NULL) == 0)
		s->timer_armed = on;
}

/* ---- accept ----------------------------------------------------------------- */

static void listeners_poll(struct sandboxd *d, bool on)
{
	uint32_t ev = on ? EPOLLIN : 0;
	if (d->listen_fd >= 0)
		sbd_watch_mod(d->loop, &d->w_listen, ev);
	if (d->tcp_fd >= 0)
		sbd_watch_mod(d->loop, &d->w_tcp, ev);
}

static void accept_resume(struct sandboxd *d)
{
	d->server->backoff_until = 0;
	listeners_poll(d, true);
}

/* accept failed with err: out of descriptors or memory backs off
 * (invariant 6); the rest (a peer that left before accept) goes on.
 * Returns whether to go on accepting. */
static bool accept_failed(struct sandboxd *d, int err)
{
	struct sbd_server *s = d->server;
	if (err == EAGAIN || err == EINTR || err == ECONNABORTED)
		return err == ECONNABORTED;
	int64_t now = sbd_now_ms();
	s->accept_errno = err;
	uint64_t n = ratelog_hit(&s->log_accept, now);
	if (n)
		log_warn_errno(-err, "accept failed (%llu times): not accepting for %d ms",
			       (unsigned long long)n, ACCEPT_BACKOFF_MS);
	s->backoff_until = now + ACCEPT_BACKOFF_MS;
	listeners_poll(d, false);
	sweep_arm(s, true);
	return false;
}

/* Answers 503 on a connection over a cap and closes it (lingering). */
static void conn_refuse(struct sbd_conn *c, const char *msg, int64_t now)
{
	struct sbd_server *s = c->d->server;
	uint64_t n = ratelog_hit(&s->log_refused, now);
	if (n)
		log_warn("refused %llu connections over the connection caps (the last: %s)",
			 (unsigned long long)n, msg);
	reply_fatal(c, 503, "overloaded", msg);
	flush_out(c);
	conn_done(c);
}

/* At the global cap: the oldest connection waiting for a head or idle
 * for EVICT_MIN_MS at least is answered 408 and closed. Returns whether
 * there was one. */
static bool evict_one(struct sbd_server *s, int64_t now)
{
	for (struct sbd_conn *c = s->oldest; c; c = c->prev) {
		if (c->lent || c->streaming || c->dead || c->deferred || c->lingering ||
		    c->close_after || c->have_head || c->out_off < c->out.len ||
		    now - c->phase_ms < EVICT_MIN_MS)
			continue;
		bool idle = c->in_len == 0 && c->served; /* no 408 taken for an answer */
		conn_expire(c, idle ? EXP_CLOSE : EXP_408,
			    "closed for a new connection: no request head in time", now);
		return true;
	}
	return false;
}

/* A new connection on fd: served, or refused over a cap (invariant 5). */
static void conn_new(struct sandboxd *d, int fd, bool tcp)
{
	struct sbd_server *s = d->server;
	struct sbd_conn *c = calloc(1, sizeof(*c));
	if (!c || sbd_watch_add(d->loop, &c->w, fd, EPOLLIN | EPOLLRDHUP, conn_io, c) < 0) {
		free(c);
		close(fd);
		return;
	}
	int64_t now = sbd_now_ms();
	c->d = d;
	c->tcp = tcp;
	c->phase_ms = c->sent_ms = now;
	jw_init(&c->out);
	c->next = s->conns;
	*(s->conns ? &s->conns->prev : &s->oldest) = c;
	s->conns = c;
	d->conns++;
	sweep_arm(s, true);
	char msg[256], who[INET6_ADDRSTRLEN + 8];
	struct sbd_peer_key k;
	bool at_cap = false;
	int peer_r = sbd_peer_of(fd, tcp, &k);
	if (peer_r == 0 && !tcp)
		memcpy(&c->uid, k.addr, sizeof(c->uid)); /* auth.c: root is the operator */
	if ((size_t)d->conns - s->lingering > (size_t)d->cfg.max_conns && !evict_one(s, now)) {
		snprintf(msg, sizeof(msg),
			 "sandboxd serves %lld connections already (--max-connections); "
			 "retry later",
			 (long long)d->cfg.max_conns);
		conn_refuse(c, msg, now);
	} else if (peer_r < 0) {
		conn_close(c); /* the peer left already */
	} else if (!(c->peer = sbd_peers_take(s->peers, &k, (size_t)d->cfg.max_conns_per_peer,
					      &at_cap))) {
		sbd_peer_str(&k, who, sizeof(who));
		snprintf(msg, sizeof(msg),
			 "%s holds %lld connections already (--max-connections-per-peer); "
			 "close some or retry later",
			 who, (long long)d->cfg.max_conns_per_peer);
		if (at_cap)
			conn_refuse(c, msg, now);
		else
			conn_close(c);
	}
}

static void accept_io(struct sandboxd *d, int lfd, bool tcp)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (accept_failed(d, errno))
				continue;
			return;
		}
		conn_new(d, fd, tcp);
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

/* The connection cap fits the descriptor limit: connections (and the
 * lingering ones) get at most half of it, the rest is for sandboxes,
 * agents, transfers and images. */
static void fit_fd_limit(struct sandboxd *d)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return;
	int64_t fit = ((int64_t)rl.rlim_cur - LINGER_MAX) / 2;
	if (fit < 16)
		fit = 16;
	if (d->cfg.max_conns > fit) {
		log_warn("--max-connections %lld lowered to %lld: half of the open file limit %llu",
			 (long long)d->cfg.max_conns, (long long)fit,
			 (unsigned long long)rl.rlim_cur);
		d->cfg.max_conns = fit;
		/* The default share of one peer shrinks with it. */
		if (d->cfg.max_conns_per_peer == SBD_MAX_CONNS_PER_PEER_DEFAULT)
			d->cfg.max_conns_per_peer = fit / 4 > 0 ? fit / 4 : 1;
	}
}

static int server_new(struct sandboxd *d)
{
	struct sbd_server *s = calloc(1, sizeof(*s));
	if (!s || !(s->peers = sbd_peers_new())) {
		free(s);
		return -ENOMEM;
	}
	s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (s->timer_fd < 0 ||
	    sbd_watch_add(d->loop, &s->w_timer, s->timer_fd, EPOLLIN, sweep_io, d) < 0) {
		int r = -errno;
		if (s->timer_fd >= 0)
			close(s->timer_fd);
		sbd_peers_free(s->peers);
		free(s);
		return r;
	}
	d->server = s;
	fit_fd_limit(d);
	return 0;
}

int sbd_server_listen(struct sandboxd *d)
{
	int r = server_new(d);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the server");
	/* TCP first: a client that waits for the unix socket (a supervisor,
	 * the tests' harness) may use the TCP port as soon as that answers. */
	if (d->cfg.tcp_listen) {
		if (!d->cfg.token && !d->tenants_file)
			return log_error_errno(-EINVAL,
					       "--listen-tcp needs --token (or "
					       "STRATA_SANDBOXD_TOKEN) or a tenants file (%s: "
					       "strata tenant add)",
					       d->cfg.tenants_path);
		int fd = listen_tcp(d->cfg.tcp_listen);
		if (fd < 0)
			return log_error_errno(fd, "Failed to listen on %s", d->cfg.tcp_listen);
		d->tcp_fd = fd;
		r = sbd_watch_add(d->loop, &d->w_tcp, fd, EPOLLIN, tcp_io, d);
		if (r < 0)
			return r;
	}
	int fd = listen_unix(d->cfg.socket_path);
	if (fd < 0)
		return log_error_errno(fd, "Failed to listen on %s", d->cfg.socket_path);
	d->listen_fd = fd;
	return sbd_watch_add(d->loop, &d->w_listen, fd, EPOLLIN, listen_io, d);
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
	/* The connections are left as they are (their execs go on in their
	 * sandboxes); the sweep stops. */
	if (d->server && d->server->timer_fd >= 0) {
		sbd_watch_del(d->loop, &d->server->w_timer);
		close(d->server->timer_fd);
		d->server->timer_fd = -1;
	}
}
