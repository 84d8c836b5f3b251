/* xfer.c — transfers on worker threads with a borrowed socket (xfer.h).
 *
 * Invariants:
 *  1. While a transfer runs, its connection's socket belongs to the worker:
 *     the loop neither watches nor reads nor writes it (server.c, lent).
 *  2. A finished transfer is on xs->done until the loop takes it; the loop
 *     alone frees it, after done() and the give-back.
 *  3. The body is read no further than its end: what the read-ahead buffer
 *     holds past it goes back to the connection (a pipelined request). */
#include "sandbox/sandboxd/xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/clock.h"
#include "fs/json.h"
#include "sandbox/sandboxd/http.h"
#include "sandbox/sandboxd/sandboxd.h"

/* The transfers of one sandboxd (d->xfers), made at the first one. */
struct sbd_xfers {
	pthread_mutex_t mu; /* guards done, and the efd write against shutdown */
	pthread_cond_t cond;
	struct sbd_xfer *done;
	struct sbd_xfer *running; /* the loop's list (next links) */
	unsigned count;
	int efd;
	struct sbd_watch w;
};

/* ---- worker side: the socket ------------------------------------------ */

/* How long the next wait may be: the idle timeout, or less when the
 * transfer's average rate would fall under XFER_MIN_RATE before it ends
 * (<= 0: it already has). */
static int64_t wait_budget(const struct sbd_xfer *x, int64_t now)
{
	int64_t due =
	    x->started_ms + XFER_RATE_GRACE_MS + (int64_t)(x->moved / XFER_MIN_RATE) * 1000;
	return due - now < XFER_IDLE_MS ? due - now : XFER_IDLE_MS;
}

static int wait_sock(struct sbd_xfer *x, short events)
{
	struct pollfd p = {.fd = x->sock, .events = events};
	if (!x->started_ms) /* not from sbd_xfer_start (a test's): from now */
		x->started_ms = strata_mono_ms();
	for (;;) {
		int64_t budget = wait_budget(x, strata_mono_ms());
		int k = budget > 0 ? poll(&p, 1, (int)budget) : 0;
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0 && budget < XFER_IDLE_MS && !x->err.code)
			strata_err_set(
			    &x->err, -ETIMEDOUT,
			    "the client moved %llu bytes in %lld s, under the %d bytes/s "
			    "a transfer must average",
			    (unsigned long long)x->moved,
			    (long long)((strata_mono_ms() - x->started_ms) / 1000), XFER_MIN_RATE);
		if (k == 0)
			return -ETIMEDOUT;
		if (p.revents & (events | POLLHUP | POLLERR))
			return 0; /* the call that follows says which */
	}
}

static ssize_t recv_some(struct sbd_xfer *x, void *p, size_t n)
{
	for (;;) {
		ssize_t k = recv(x->sock, p, n, MSG_DONTWAIT);
		if (k > 0) {
			x->moved += (uint64_t)k;
			return k;
		}
		if (k == 0)
			return -ECONNRESET; /* the client left before the body's end */
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int r = wait_sock(x, POLLIN);
		if (r < 0)
			return r;
	}
}

int sbd_xfer_send(struct sbd_xfer *x, const void *p, size_t n)
{
	const char *s = p;
	while (n) {
		ssize_t k = send(x->sock, s, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k > 0) {
			s += k;
			n -= (size_t)k;
			x->moved += (uint64_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN) {
			x->broken = true;
			return -errno;
		}
		int r = wait_sock(x, POLLOUT);
		if (r < 0) {
			x->broken = true;
			return r;
		}
	}
	return 0;
}

int sbd_xfer_head(struct sbd_xfer *x, int status, const char *ctype, long long content_length)
{
	struct jw w;
	jw_init(&w);
	sbd_http_head(&w, status, ctype, content_length, x->keep_alive);
	int r = w.err ? -ENOMEM : sbd_xfer_send(x, w.buf, w.len);
	jw_done(&w);
	x->head_sent = true;
	return r;
}

int sbd_xfer_continue(struct sbd_xfer *x)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	if (!x->expect_continue)
		return 0;
	x->expect_continue = false;
	return sbd_xfer_send(x, cont, sizeof(cont) - 1);
}

int sbd_xfer_sendfile(struct sbd_xfer *x, int fd, uint64_t off, uint64_t n)
{
	off_t o = (off_t)off;
	while (n) {
		size_t want = n > (1u << 30) ? (1u << 30) : (size_t)n;
		ssize_t k = sendfile(x->sock, fd, &o, want);
		if (k > 0) {
			n -= (uint64_t)k;
			x->moved += (uint64_t)k;
			continue;
		}
		if (k == 0) {
			x->broken = true;
			return -ENODATA; /* shorter than the length we announced */
		}
		if (errno == EINTR)
			continue;
		int r = errno == EAGAIN ? wait_sock(x, POLLOUT) : -errno;
		if (r < 0) {
			x->broken = true;
			return r;
		}
	}
	return 0;
}

/* ---- worker side: the request body ------------------------------------ */

/* Reads more into the read-ahead buffer (compacting it first). */
static int fill(struct sbd_xfer *x)
{
	if (x->in_off == x->in_len)
		x->in_off = x->in_len = 0;
	if (x->in_len == XFER_BUF) {
		memmove(x->in, x->in + x->in_off, x->in_len - x->in_off);
		x->in_len -= x->in_off;
		x->in_off = 0;
	}
	ssize_t k = recv_some(x, x->in + x->in_len, XFER_BUF - x->in_len);
	if (k < 0)
		return (int)k;
	x->in_len += (size_t)k;
	return 0;
}

/* One CRLF-terminated line of the chunked framing, NUL-terminated into
 * line (at most XFER_CHUNK_LINE_MAX): its length (a line may hold a NUL,
 * so the length, not line[0], says whether it is empty), or -errno. */
static int read_line(struct sbd_xfer *x, char *line)
{
	for (;;) {
		char *s = x->in + x->in_off;
		size_t avail = x->in_len - x->in_off;
		char *lf = memchr(s, '\n', avail);
		if (lf) {
			size_t n = (size_t)(lf - s);
			if (n == 0 || s[n - 1] != '\r' || n > XFER_CHUNK_LINE_MAX)
				return -EPROTO;
			memcpy(line, s, n - 1);
			line[n - 1] = 0;
			x->in_off += n + 1;
			return (int)n - 1;
		}
		if (avail > XFER_CHUNK_LINE_MAX)
			return -EPROTO;
		int r = fill(x);
		if (r < 0)
			return r;
	}
}

/* At a chunk's end: the CRLF after its data (unless it is the first), then
 * the next chunk-size line; the last chunk's trailers are skipped. */
static int next_chunk(struct sbd_xfer *x, bool first)
{
	char line[XFER_CHUNK_LINE_MAX + 1];
	int r = first ? 0 : read_line(x, line);
	if (r != 0) /* the CRLF after the data: an empty line */
		return r < 0 ? r : -EPROTO;
	int len = read_line(x, line);
	if (len < 0)
		return len;
	uint64_t v = 0;
	size_t i = 0;
	for (; (int)i < len && line[i] != ';' && line[i] != ' ' && line[i] != '\t'; i++) {
		int h = line[i] >= '0' && line[i] <= '9' ? line[i] - '0'
			: (line[i] | 0x20) >= 'a' && (line[i] | 0x20) <= 'f'
			    ? (line[i] | 0x20) - 'a' + 10
			    : -1;
		if (h < 0 || i >= 15)
			return -EPROTO;
		v = v * 16 + (uint64_t)h;
	}
	if (i == 0)
		return -EPROTO;
	x->left = v;
	if (v)
		return 0;
	do /* trailers, up to the empty line */
		r = read_line(x, line);
	while (r > 0);
	x->body_done = r == 0;
	return r;
}

/* Makes x->left > 0 (the payload that comes next) or body_done. */
static int body_next(struct sbd_xfer *x)
{
	if (x->body_done || x->left)
		return 0;
	if (!x->chunked) {
		x->body_done = true;
		return 0;
	}
	bool first = !x->chunk_seen;
	x->chunk_seen = true;
	return next_chunk(x, first);
}

ssize_t sbd_xfer_read(struct sbd_xfer *x, void *p, size_t n)
{
	int r = body_next(x);
	if (r < 0 || x->body_done)
		return r;
	size_t want = n < x->left ? n : (size_t)x->left;
	ssize_t k;
	if (x->in_off < x->in_len) {
		size_t avail = x->in_len - x->in_off;
		k = (ssize_t)(want < avail ? want : avail);
		memcpy(p, x->in + x->in_off, (size_t)k);
		x->in_off += (size_t)k;
	} else if ((k = recv_some(x, p, want)) < 0) {
		return k;
	}
	x->left -= (uint64_t)k;
	return k;
}

static int write_all_fd(int fd, const char *p, size_t n, int *ret_werr)
{
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			*ret_werr = k < 0 ? errno : EIO;
			return -EIO;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Up to max bytes of an unframed (Content-Length) body, socket -> pipe ->
 * fd: the payload is copied once, into the file's pages. */
static int64_t splice_body(struct sbd_xfer *x, int fd, int pipefd[2], uint64_t max, int *ret_werr)
{
	int64_t total = 0;
	uint64_t lim = x->left < max ? x->left : max;
	while ((uint64_t)total < lim) {
		uint64_t rest = lim - (uint64_t)total;
		size_t want = rest > XFER_BUF ? XFER_BUF : (size_t)rest;
		ssize_t k =
		    splice(x->sock, NULL, pipefd[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (k == 0)
			return -ECONNRESET;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			int r = errno == EAGAIN ? wait_sock(x, POLLIN) : -errno;
			if (r < 0)
				return r;
			continue;
		}
		x->left -= (uint64_t)k;
		x->moved += (uint64_t)k;
		for (ssize_t m = k; m > 0;) {
			ssize_t w = splice(pipefd[0], NULL, fd, NULL, (size_t)m, SPLICE_F_MOVE);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				*ret_werr = w < 0 ? errno : EIO;
				return -EIO;
			}
			m -= w;
		}
		total += k;
	}
	return total;
}

int64_t sbd_xfer_body_to_fd(struct sbd_xfer *x, int fd, uint64_t max, int *ret_werr)
{
	uint64_t total = 0;
	int pipefd[2] = {-1, -1};
	int r = 0;
	/* splice refuses a file opened O_APPEND (EINVAL): those go by write */
	int fl = fcntl(fd, F_GETFL);
	bool can_splice = fl >= 0 && !(fl & O_APPEND);
	while (r == 0 && total < max && !(r = body_next(x)) && !x->body_done) {
		size_t avail = x->in_len - x->in_off;
		uint64_t want = x->left < max - total ? x->left : max - total;
		if (avail) { /* read ahead, or chunked: from the buffer */
			size_t k = avail < want ? avail : (size_t)want;
			r = write_all_fd(fd, x->in + x->in_off, k, ret_werr);
			x->in_off += k;
			x->left -= k;
			total += k;
		} else if (can_splice && !x->chunked &&
			   (pipefd[0] >= 0 || pipe2(pipefd, O_CLOEXEC) == 0)) {
			(void)!fcntl(pipefd[1], F_SETPIPE_SZ, XFER_BUF);
			int64_t k = splice_body(x, fd, pipefd, want, ret_werr);
			r = k < 0 ? (int)k : 0;
			total += k > 0 ? (uint64_t)k : 0;
		} else {
			r = fill(x);
		}
	}
	if (pipefd[0] >= 0) {
		close(pipefd[0]);
		close(pipefd[1]);
	}
	return r < 0 ? r : (int64_t)total;
}

/* ---- the loop side ------------------------------------------------------ */

static void xfer_free(struct sbd_xfer *x)
{
	free(x->in);
	free(x->out_pre);
	free(x);
}

/* A finished transfer: the socket back to its connection, the answer. */
static void xfer_finish(struct sbd_xfers *xs, struct sbd_xfer *x)
{
	for (struct sbd_xfer **p = &xs->running; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
	xs->count--;
	bool keep = x->keep_alive && x->body_done && !x->broken && !x->cancelled;
	size_t extra = x->body_done ? x->in_len - x->in_off : 0;
	sbd_conn_give_back(x->c, x->in + x->in_off, extra, keep);
	x->done(x, x->c);
	sbd_conn_answered(x->c, x->head_sent);
	xfer_free(x);
}

static void xfers_io(void *ctx, uint32_t ev)
{
	struct sbd_xfers *xs = ctx;
	pthread_mutex_lock(&xs->mu);
	struct sbd_xfer *x = xs->done;
	xs->done = NULL;
	pthread_mutex_unlock(&xs->mu);
	while (x) {
		struct sbd_xfer *next = x->done_next;
		xfer_finish(xs, x);
		x = next;
	}
}

/* Hands a finished x to the loop (the wake-up runs xfers_io). */
static void xfer_post(struct sbd_xfer *x)
{
	struct sbd_xfers *xs = x->d->xfers;
	uint64_t one = 1;
	pthread_mutex_lock(&xs->mu);
	x->finished = true;
	x->done_next = xs->done;
	xs->done = x;
	(void)!write(xs->efd, &one, sizeof(one));
	pthread_cond_broadcast(&xs->cond);
	pthread_mutex_unlock(&xs->mu);
}

static void xfer_job(struct sbd_job *job)
{
	struct sbd_xfer *x = (struct sbd_xfer *)job;
	x->r = x->out_pre_len ? sbd_xfer_send(x, x->out_pre, x->out_pre_len) : 0;
	if (x->r == 0)
		x->r = x->run(x);
	xfer_post(x);
}

/* Waits on xs->cond (xs->mu held) until the monotonic time until_ms. */
static void wait_until(struct sbd_xfers *xs, int64_t until_ms)
{
	struct timespec ts = {.tv_sec = (time_t)(until_ms / 1000),
			      .tv_nsec = (long)(until_ms % 1000) * 1000000L};
	pthread_cond_timedwait(&xs->cond, &xs->mu, &ts);
}

static struct sbd_xfers *xfers_of(struct sandboxd *d)
{
	if (d->xfers)
		return d->xfers;
	struct sbd_xfers *xs = calloc(1, sizeof(*xs));
	if (!xs)
		return NULL;
	xs->w.fd = -1;
	xs->efd = sbd_wakeup_add(d->loop, &xs->w, xfers_io, xs);
	if (xs->efd < 0) {
		free(xs);
		return NULL;
	}
	pthread_mutex_init(&xs->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* strata_mono_ms's clock */
	pthread_cond_init(&xs->cond, &ca);
	pthread_condattr_destroy(&ca);
	d->xfers = xs;
	return xs;
}

int sbd_xfer_start(struct sandboxd *d, struct sbd_conn *c, struct sbd_xfer *x)
{
	struct sbd_xfers *xs = xfers_of(d);
	int r = !xs ? -ENOMEM : xs->count >= XFER_MAX ? -EBUSY : 0;
	unsigned mine = 0;
	for (struct sbd_xfer *o = xs ? xs->running : NULL; o; o = o->next)
		mine += x->sandbox && o->sandbox == x->sandbox;
	if (r == 0 && mine >= XFER_PER_SANDBOX_MAX)
		r = -EMFILE;
	struct sbd_conn_body body = {0};
	const char *pre = NULL;
	size_t pre_len = 0;
	if (r == 0) {
		sbd_conn_body(c, &body);
		pre = body.pre;
		pre_len = body.pre_len;
		x->in = malloc(pre_len > XFER_BUF ? pre_len : XFER_BUF);
		r = x->in ? 0 : -ENOMEM;
	}
	if (r < 0 || pre_len > XFER_BUF) {
		xfer_free(x);
		return r < 0 ? r : -EMSGSIZE;
	}
	memcpy(x->in, pre, pre_len);
	x->in_len = pre_len;
	x->d = d;
	x->c = c;
	x->body_done = !x->chunked && x->left == 0;
	x->job.fn = xfer_job;
	x->started_ms = strata_mono_ms();
	x->sock = sbd_conn_lend(c, &x->out_pre, &x->out_pre_len);
	x->next = xs->running;
	xs->running = x;
	xs->count++;
	if (sbd_pool_run(d->pool, &x->job) < 0) {
		/* no thread: answered 503 (never run here, which would block the
		 * loop for the whole transfer); the connection closes after */
		x->r = strata_err_set(&x->err, -EAGAIN, "no worker thread could be started");
		x->broken = true;
		xfer_post(x);
	}
	return 0;
}

int sbd_xfer_cancel(struct sandboxd *d, const void *sandbox)
{
	struct sbd_xfers *xs = d->xfers;
	if (!xs || !sandbox)
		return 0;
	bool any = false;
	for (struct sbd_xfer *x = xs->running; x; x = x->next)
		if (x->sandbox == sandbox) {
			x->sandbox = NULL;
			x->cancelled = any = true;
			shutdown(x->sock, SHUT_RDWR);
		}
	if (!any)
		return 0;
	int64_t until = strata_mono_ms() + XFER_CANCEL_WAIT_MS;
	int left;
	pthread_mutex_lock(&xs->mu);
	for (;;) {
		left = 0;
		for (struct sbd_xfer *x = xs->running; x; x = x->next)
			left += x->cancelled && !x->finished;
		if (!left || strata_mono_ms() >= until)
			break;
		wait_until(xs, until);
	}
	pthread_mutex_unlock(&xs->mu);
	return left;
}

void sbd_xfer_shutdown(struct sandboxd *d)
{
	struct sbd_xfers *xs = d->xfers;
	if (!xs)
		return;
	/* wake the workers that wait for a client: their I/O fails at once */
	for (struct sbd_xfer *x = xs->running; x; x = x->next)
		shutdown(x->sock, SHUT_RDWR);
	int64_t until = strata_mono_ms() + XFER_SHUTDOWN_WAIT_MS;
	bool all = false;
	pthread_mutex_lock(&xs->mu);
	for (;;) {
		unsigned n = 0;
		for (struct sbd_xfer *x = xs->done; x; x = x->done_next)
			n++;
		all = n == xs->count;
		if (all || strata_mono_ms() >= until)
			break;
		wait_until(xs, until);
	}
	pthread_mutex_unlock(&xs->mu);
	if (!all)
		return; /* a worker still holds xs: left to the process's exit */
	xfers_io(xs, 0);
	sbd_wakeup_del(d->loop, &xs->w, xs->efd);
	pthread_mutex_destroy(&xs->mu);
	pthread_cond_destroy(&xs->cond);
	free(xs);
	d->xfers = NULL;
}
