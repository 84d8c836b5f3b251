/* client.c — the client of the agent protocol over a sandbox's stream:
 * exec (with streamed output through callbacks) and the file operations.
 * Every sandbox has a channel (struct sbx_chan): its stream, shared by the
 * requests in flight, whose frames are routed by request id. Every
 * blocking wait has a deadline, so a stuck or dead agent yields -ETIMEDOUT
 * or -EPIPE, never a hang.
 *
 * An exec is an op (sbx_exec_op_*) that never blocks: the channel keeps
 * what the socket did not take and what it read of a frame, and is driven
 * by the caller's loop (sandboxd's epoll loop) or by sbx_exec's poll loop.
 * A synchronous file request queues its frame on the same channel and
 * drives it until its reply came, so it works while execs run.
 *
 * The one exception to "one thread per sandbox": sbx_exec_stdin feeds an
 * interactive exec from another thread while sbx_exec reads, between the
 * exec's start (on_stdin) and sbx_exec's return. The only frames that can
 * then be written at once are its STDIN and sbx_exec's SIGKILL, so those
 * two hold the stream's write lock (a table of locks hashed by fd) and
 * never interleave; the channel only tries the lock (a writer blocked on a
 * full stream needs sbx_exec to keep reading) and holds it until its
 * bytes are out. Nothing else takes it, so a caller's other sandboxes
 * never wait on it. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/agent/proto.h"
#include "sandbox/container/sandbox-internal.h"

#define FILE_TIMEOUT_MS 30000
#define EXEC_GRACE_MS 10000

_Static_assert((int)SBX_STEP_USER == AG_STEP_USER && (int)SBX_STEP_CWD == AG_STEP_CWD &&
		   (int)SBX_STEP_IDS == AG_STEP_IDS && (int)SBX_STEP_EXEC == AG_STEP_EXEC &&
		   (int)SBX_STEP_SETUP == AG_STEP_SETUP,
	       "the library's exec steps are the agent's");

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads exactly n bytes before the deadline (ms, -1 = none). */
static int read_full(int fd, uint8_t *p, size_t n, int64_t deadline)
{
	while (n) {
		int wait = deadline < 0 ? -1 : (int)STRATA_MAX(deadline - now_ms(), 0);
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = poll(&pfd, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		ssize_t k = read(fd, p, n);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EPIPE;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int read_frame_until(int fd, struct ag_hdr *h, uint8_t **buf, size_t *cap, int64_t deadline)
{
	uint8_t hdr[AG_HDR_SIZE];
	int r = read_full(fd, hdr, sizeof(hdr), deadline);
	if (r == 0)
		r = ag_hdr_decode(hdr, h);
	if (r < 0)
		return r;
	if (*cap < h->len + 1) {
		uint8_t *b = realloc(*buf, h->len + 1);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = h->len + 1;
	}
	return read_full(fd, *buf, h->len, deadline);
}

int client_read_frame(int fd, struct ag_hdr *h, uint8_t **buf, size_t *cap, int timeout_ms)
{
	return read_frame_until(fd, h, buf, cap, timeout_ms < 0 ? -1 : now_ms() + timeout_ms);
}

#define NWLOCKS 64
static pthread_mutex_t wlocks[NWLOCKS];
static pthread_once_t wlocks_once = PTHREAD_ONCE_INIT;

static void wlocks_init(void)
{
	for (int i = 0; i < NWLOCKS; i++)
		pthread_mutex_init(&wlocks[i], NULL);
}

static pthread_mutex_t *wlock(const struct sbx *s)
{
	pthread_once(&wlocks_once, wlocks_init);
	return &wlocks[(unsigned)s->ctl % NWLOCKS];
}

/* send() with MSG_NOSIGNAL: a sandbox that went away must give -EPIPE, not
 * kill the host with SIGPIPE. write() for streams that are not sockets. */
static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == ENOTSOCK)
			k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int send_wr(struct sbx *s, struct ag_wr *w)
{
	if (w->err)
		return w->err;
	return write_all(s->ctl, w->data, w->len);
}

/* A finished request/reply exchange: the reply's payload and its status. */
struct reply {
	uint8_t *buf;
	size_t cap;
	struct ag_hdr h;
	struct ag_rd rd;
};

static void reply_done(struct reply *r)
{
	free(r->buf);
}

/* ---- exec ------------------------------------------------------------------ */

static uint32_t count(const char *const *v)
{
	uint32_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

/* Encodes EXEC, and STDIN with the whole input, into w. */
static int encode_exec(struct ag_wr *w, const struct sbx_exec_opts *o, uint32_t id)
{
	struct ag_exec_req q = {
	    .flags = o->stdin_data || o->stdin_stream ? AG_EXEC_F_STDIN : 0,
	    .timeout_ms = o->timeout_ms,
	    .output_cap = o->output_cap,
	    .cwd = (char *)(o->cwd ? o->cwd : ""),
	    .user = (char *)(o->user ? o->user : ""),
	    .argc = count(o->argv),
	    .envc = count(o->env),
	    .argv = (char **)o->argv,
	    .env = (char **)o->env,
	};
	size_t off = ag_wr_begin(w, AG_T_EXEC, id);
	ag_exec_encode(w, &q);
	int r = ag_wr_end(w, off);
	if (r == 0 && o->stdin_data) {
		off = ag_wr_begin(w, AG_T_STDIN, id);
		ag_wr_u8(w, !o->stdin_stream);
		ag_wr_blob(w, o->stdin_data, (uint32_t)o->stdin_len);
		r = ag_wr_end(w, off);
	}
	return r;
}

int sbx_exec_stdin(struct sbx *s, uint32_t exec_id, const void *data, size_t len, bool eof,
		   bool ack)
{
	if (len > AG_MAX_DATA || (len && !data))
		return -EINVAL;
	struct ag_wr w;
	ag_wr_init(&w);
	size_t off = ag_wr_begin(&w, AG_T_STDIN, exec_id);
	ag_wr_u8(&w, eof);
	ag_wr_blob(&w, data, (uint32_t)len);
	if (ack)
		ag_wr_u8(&w, AG_STDIN_F_ACK);
	int r = ag_wr_end(&w, off);
	if (r == 0) {
		pthread_mutex_lock(wlock(s));
		r = send_wr(s, &w);
		pthread_mutex_unlock(wlock(s));
	}
	ag_wr_done(&w);
	return r;
}

/* ---- the channel: one per sandbox, every request in flight ----------------- */

/* A synchronous request waiting for its reply (sbx_file_*): the frame,
 * copied out of the stream when it comes. */
struct waiter {
	struct waiter *next;
	uint32_t id;
	uint16_t type; /* the reply's */
	struct reply *rp;
	int r; /* the reply's read status */
	bool done;
};

/* The sandbox's stream, shared by its requests: the frames not yet sent
 * (out.data[sent..out.len), whole frames only, so nothing interleaves) and
 * what was read and not yet handled (in[0..in_len), at most a part of one
 * frame between calls). Frames read are routed by id to the op or waiter
 * that owns it; frames of nobody (late ones of a freed op) are skipped.
 *
 * Invariants:
 *  1. Every op on ops has not been told its exit; op_exit unlinks it
 *     first, so an exit callback may free its op.
 *  2. err: the stream broke; every op and waiter in flight is told, and
 *     later ones fail at once.
 *  3. With shared_writes (sbx_exec of a stdin_stream exec, where
 *     sbx_exec_stdin writes from another thread) the channel writes only
 *     while it holds the stream's write lock, and keeps it until its bytes
 *     are all out, so that frames never interleave. */
struct sbx_chan {
	struct ag_wr out;
	size_t sent;
	uint8_t *in;
	size_t in_len, in_cap;
	int err;
	bool not_sock, locked;
	unsigned shared_writes;
	struct sbx_exec_op *ops;
	unsigned nexecs;
	struct waiter *waiters;
};

/* One exec in progress (sbx_exec_op_*), on its sandbox's channel. */
struct sbx_exec_op {
	struct sbx *s;
	struct sbx_exec_op *next; /* in chan->ops while linked */
	bool linked;
	uint32_t id;
	struct sbx_exec_cbs cb;
	void *ud;
	int32_t pid;
	uint8_t minor;
	bool started, exited, stdin_stream, stdin_closed, shared;
};

static struct sbx_chan *chan_get(struct sbx *s)
{
	if (!s->chan && (s->chan = calloc(1, sizeof(*s->chan))))
		ag_wr_init(&s->chan->out);
	return s->chan;
}

void client_chan_free(struct sbx *s)
{
	struct sbx_chan *ch = s->chan;
	if (!ch)
		return;
	if (ch->locked)
		pthread_mutex_unlock(wlock(s));
	for (struct sbx_exec_op *op = ch->ops; op; op = op->next)
		op->linked = false; /* the caller frees its ops */
	ag_wr_done(&ch->out);
	free(ch->in);
	free(ch);
	s->chan = NULL;
}

static void op_unlink(struct sbx_exec_op *op)
{
	struct sbx_chan *ch = op->s->chan;
	if (!op->linked)
		return;
	for (struct sbx_exec_op **p = &ch->ops; *p; p = &(*p)->next)
		if (*p == op) {
			*p = op->next;
			break;
		}
	op->linked = false;
	ch->nexecs--;
	if (op->shared)
		ch->shared_writes--;
}

static void op_exit(struct sbx_exec_op *op, int r, const struct sbx_exec_result *res)
{
	if (op->exited)
		return;
	op->exited = true;
	op_unlink(op);
	op->cb.exit(op->ud, r, res); /* may free op */
}

/* Sends what the socket takes now. */
static void chan_flush(struct sbx *s)
{
	struct sbx_chan *ch = s->chan;
	if (ch->err || ch->sent == ch->out.len)
		return;
	if (ch->shared_writes && !ch->locked) {
		if (pthread_mutex_trylock(wlock(s)) != 0)
			return; /* a stdin chunk is being written: later */
		ch->locked = true;
	}
	int fd = s->ctl;
	while (ch->sent < ch->out.len) {
		const uint8_t *p = ch->out.data + ch->sent;
		size_t n = ch->out.len - ch->sent;
		ssize_t k = -1;
		if (!ch->not_sock) {
			k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (k < 0 && errno == ENOTSOCK)
				ch->not_sock = true;
		}
		if (ch->not_sock) { /* a pipe or a tty: write only what poll allows */
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};
			k = poll(&pfd, 1, 0);
			if (k > 0 && !(pfd.revents & POLLOUT))
				k = 0;
			if (k > 0)
				k = write(fd, p, STRATA_MIN(n, (size_t)PIPE_BUF));
			else if (k == 0) {
				k = -1;
				errno = EAGAIN;
			}
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			break;
		if (k <= 0) {
			ch->err = k == 0 || errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno;
			break;
		}
		ch->sent += (size_t)k;
	}
	if (ch->sent == ch->out.len || ch->err) {
		ch->out.len = 0;
		ch->sent = 0;
		if (ch->locked)
			pthread_mutex_unlock(wlock(s));
		ch->locked = false;
	}
}

/* Appends the frame begun at off (by ag_wr_begin on ch->out) and sends
 * what the socket takes. A frame that cannot be encoded is dropped. */
static int chan_queue_end(struct sbx *s, size_t off)
{
	struct sbx_chan *ch = s->chan;
	int r = ag_wr_end(&ch->out, off);
	if (r < 0) { /* drop the frame, keep what was queued before it */
		ch->out.len = off;
		ch->out.err = 0;
		return r;
	}
	chan_flush(s);
	return 0;
}

static struct sbx_exec_op *chan_op(struct sbx_chan *ch, uint32_t id)
{
	for (struct sbx_exec_op *op = ch->ops; op; op = op->next)
		if (op->id == id)
			return op;
	return NULL;
}

/* A request id of the library's own (below SBX_EXEC_ID_CALLER). */
static uint32_t chan_next_id(struct sbx *s)
{
	s->next_id = (s->next_id + 1) & ~SBX_EXEC_ID_CALLER;
	if (!s->next_id)
		s->next_id = 1;
	return s->next_id;
}

/* One frame of an exec (its id checked by the caller). */
static void op_frame(struct sbx_exec_op *op, const struct ag_hdr *h, const uint8_t *p)
{
	struct ag_rd rd;
	ag_rd_init(&rd, p, h->len);
	if (h->type == (AG_T_EXEC | AG_T_REPLY) || h->type == (AG_T_ATTACH | AG_T_REPLY)) {
		int st = (int32_t)ag_rd_u32(&rd);
		uint32_t pid = st >= 0 && rd.off < rd.len ? ag_rd_u32(&rd) : 0;
		op->minor = h->minor;
		if (rd.err || st < 0) {
			struct sbx_exec_result res = {0}; /* 1.2: the step that failed */
			if (!rd.err && rd.off < rd.len)
				res.failed_step = (enum sbx_exec_step)ag_rd_u8(&rd);
			op_exit(op, rd.err ? rd.err : st, rd.err ? NULL : &res);
			return;
		}
		if (op->started)
			return;
		op->started = true;
		op->pid = (int32_t)pid;
		if (op->cb.started)
			op->cb.started(op->ud, op->minor >= 1 ? SBX_STDIN_STARTED
							      : SBX_STDIN_STARTED_NOACK);
	} else if (h->type == (AG_T_STDIN | AG_T_REPLY)) {
		int st = (int32_t)ag_rd_u32(&rd);
		uint32_t pending = ag_rd_u32(&rd);
		if (!rd.err && op->cb.stdin_ack)
			op->cb.stdin_ack(op->ud, st, pending);
	} else if (h->type == AG_T_OUTPUT) {
		uint8_t stream = ag_rd_u8(&rd);
		uint32_t n = 0;
		const void *d = ag_rd_blob(&rd, AG_MAX_PAYLOAD, &n);
		if (!d)
			op_exit(op, -EBADMSG, NULL);
		else if (op->cb.output)
			op->cb.output(op->ud, stream, d, n);
	} else if (h->type == AG_T_EXIT) {
		struct ag_exit e;
		int r = ag_exit_decode(p, h->len, &e);
		if (r < 0) {
			op_exit(op, r, NULL);
			return;
		}
		struct sbx_exec_result res = {
		    .exit_code = e.exit_code,
		    .signo = e.signo,
		    .timed_out = e.flags & AG_EXIT_F_TIMED_OUT,
		    .truncated = e.flags & AG_EXIT_F_TRUNCATED,
		    .stdout_bytes = e.stdout_bytes,
		    .stderr_bytes = e.stderr_bytes,
		    .duration_us = e.duration_us,
		    .oom_killed = e.flags & AG_EXIT_F_OOM_KILLED,
		};
		op_exit(op, 0, &res);
	}
}

/* A reply to a waiting synchronous request: copied for it. */
static bool waiter_frame(struct sbx_chan *ch, const struct ag_hdr *h, const uint8_t *p)
{
	for (struct waiter *w = ch->waiters; w; w = w->next) {
		if (w->done || w->id != h->id || w->type != h->type)
			continue;
		w->done = true;
		w->rp->h = *h;
		if (w->rp->cap < h->len + 1) {
			uint8_t *b = realloc(w->rp->buf, h->len + 1);
			if (!b) {
				w->r = -ENOMEM;
				return true;
			}
			w->rp->buf = b;
			w->rp->cap = h->len + 1;
		}
		memcpy(w->rp->buf, p, h->len);
		return true;
	}
	return false;
}

static void chan_frame(struct sbx_chan *ch, const struct ag_hdr *h, const uint8_t *p)
{
	if (waiter_frame(ch, h, p))
		return;
	struct sbx_exec_op *op = chan_op(ch, h->id);
	if (op)
		op_frame(op, h, p);
}

/* Reads once and routes every whole frame read. */
static void chan_read(struct sbx *s)
{
	struct sbx_chan *ch = s->chan;
	size_t want = 65536;
	if (ch->in_len >= AG_HDR_SIZE) {
		struct ag_hdr h;
		if (ag_hdr_decode(ch->in, &h) == 0)
			want = STRATA_MAX(want, AG_HDR_SIZE + (size_t)h.len);
	}
	if (ch->in_cap < want) {
		uint8_t *b = realloc(ch->in, want);
		if (!b) {
			ch->err = -ENOMEM;
			return;
		}
		ch->in = b;
		ch->in_cap = want;
	}
	int fd = s->ctl;
	ssize_t k = -1;
	if (!ch->not_sock) {
		k = recv(fd, ch->in + ch->in_len, ch->in_cap - ch->in_len, MSG_DONTWAIT);
		if (k < 0 && errno == ENOTSOCK)
			ch->not_sock = true;
	}
	if (ch->not_sock) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		k = poll(&pfd, 1, 0);
		if (k > 0)
			k = read(fd, ch->in + ch->in_len, ch->in_cap - ch->in_len);
		else if (k == 0) {
			k = -1;
			errno = EAGAIN;
		}
	}
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k <= 0) {
		ch->err = k == 0 || errno == ECONNRESET ? -EPIPE : -errno;
		return;
	}
	ch->in_len += (size_t)k;
	size_t off = 0;
	while (ch->in_len - off >= AG_HDR_SIZE) {
		struct ag_hdr h;
		int r = ag_hdr_decode(ch->in + off, &h);
		if (r < 0) {
			ch->err = r;
			return;
		}
		if (ch->in_len - off < AG_HDR_SIZE + (size_t)h.len)
			break;
		chan_frame(ch, &h, ch->in + off + AG_HDR_SIZE);
		off += AG_HDR_SIZE + (size_t)h.len;
	}
	memmove(ch->in, ch->in + off, ch->in_len - off);
	ch->in_len -= off;
}

/* The stream broke: every request in flight is told. */
static void chan_fail(struct sbx_chan *ch)
{
	for (struct waiter *w = ch->waiters; w; w = w->next)
		if (!w->done) {
			w->done = true;
			w->r = ch->err;
		}
	while (ch->ops)
		op_exit(ch->ops, ch->err, NULL);
}

short sbx_chan_events(struct sbx *s)
{
	struct sbx_chan *ch = s->chan;
	if (!ch)
		return 0;
	if (ch->err) /* to be reported by the next sbx_chan_io */
		return ch->ops || ch->waiters ? POLLIN | POLLOUT : 0;
	short ev = ch->ops || ch->waiters || ch->in_len ? POLLIN : 0;
	if (ch->sent < ch->out.len)
		ev |= POLLOUT;
	return ev;
}

int sbx_chan_io(struct sbx *s, short revents)
{
	struct sbx_chan *ch = s->chan;
	if (!ch)
		return 0;
	if (!ch->err && (revents & (POLLIN | POLLHUP | POLLERR)))
		chan_read(s);
	chan_flush(s); /* what the callbacks queued too */
	if (ch->err)
		chan_fail(ch);
	return ch->err;
}

unsigned sbx_chan_execs(const struct sbx *s)
{
	return s->chan ? s->chan->nexecs : 0;
}

/* Sends w (one frame of type/id) and drives the channel until its reply
 * came; returns the reply's status, leaving rp->rd positioned after it.
 * Other requests in flight on the channel go on meanwhile (their callbacks
 * run in here). */
static int roundtrip(struct sbx *s, struct ag_wr *w, uint16_t type, uint32_t id, struct reply *rp)
{
	struct sbx_chan *ch = chan_get(s);
	if (!ch)
		return -ENOMEM;
	if (w->err)
		return w->err;
	if (ch->err)
		return ch->err;
	int64_t deadline = now_ms() + FILE_TIMEOUT_MS;
	struct waiter wt = {.id = id, .type = type | AG_T_REPLY, .rp = rp, .next = ch->waiters};
	ch->waiters = &wt;
	ag_wr_bytes(&ch->out, w->data, w->len);
	int r = ch->out.err;
	if (r == 0)
		chan_flush(s);
	while (r == 0 && !wt.done) {
		struct pollfd pfd = {.fd = s->ctl, .events = sbx_chan_events(s)};
		int left = (int)STRATA_MAX(deadline - now_ms(), 0);
		int k = poll(&pfd, 1, left);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			r = k < 0 ? -errno : -ETIMEDOUT;
		else
			sbx_chan_io(s, pfd.revents);
	}
	for (struct waiter **p = &ch->waiters; *p; p = &(*p)->next)
		if (*p == &wt) {
			*p = wt.next;
			break;
		}
	if (r == 0)
		r = wt.r;
	if (r < 0)
		return r;
	ag_rd_init(&rp->rd, rp->buf, rp->h.len);
	int status = (int32_t)ag_rd_u32(&rp->rd);
	return rp->rd.err ? rp->rd.err : status;
}

/* ---- exec ops on the channel ----------------------------------------------- */

static void chan_link(struct sbx_chan *ch, struct sbx_exec_op *op)
{
	op->next = ch->ops;
	ch->ops = op;
	op->linked = true;
	ch->nexecs++;
}

short sbx_exec_op_events(const struct sbx_exec_op *op)
{
	return op->exited ? 0 : sbx_chan_events(op->s);
}

int sbx_exec_op_io(struct sbx_exec_op *op, short revents)
{
	if (op->exited)
		return 1;
	sbx_chan_io(op->s, revents); /* may call op's exit: op stays valid */
	return op->exited;
}

int32_t sbx_exec_op_pid(const struct sbx_exec_op *op)
{
	return op->pid;
}

uint32_t sbx_exec_op_id(const struct sbx_exec_op *op)
{
	return op->id;
}

int sbx_exec_op_start(struct sbx *s, const struct sbx_exec_opts *o, const struct sbx_exec_cbs *cbs,
		      void *ud, struct sbx_exec_op **ret)
{
	if (!o->argv || !o->argv[0] || o->stdin_len > AG_MAX_DATA || !cbs->exit)
		return -EINVAL;
	struct sbx_chan *ch = chan_get(s);
	if (!ch)
		return -ENOMEM;
	if (ch->nexecs >= SBX_MAX_EXECS)
		return -EAGAIN;
	if (o->id && (!(o->id & SBX_EXEC_ID_CALLER) || chan_op(ch, o->id)))
		return -EINVAL;
	struct sbx_exec_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct sbx_exec_op){.s = s,
				   .id = o->id ? o->id : chan_next_id(s),
				   .cb = *cbs,
				   .ud = ud,
				   .stdin_stream = o->stdin_stream};
	size_t before = ch->out.len;
	int r = encode_exec(&ch->out, o, op->id);
	if (r < 0) {
		ch->out.len = before;
		ch->out.err = 0;
		free(op);
		return r;
	}
	chan_link(ch, op);
	chan_flush(s);
	*ret = op;
	return 0;
}

int sbx_exec_op_attach(struct sbx *s, uint32_t exec_id, const struct sbx_exec_cbs *cbs, void *ud,
		       struct sbx_exec_op **ret)
{
	struct sbx_chan *ch = chan_get(s);
	if (!ch)
		return -ENOMEM;
	if (!cbs->exit || !exec_id || chan_op(ch, exec_id))
		return -EINVAL;
	if (ch->nexecs >= SBX_MAX_EXECS)
		return -EAGAIN;
	struct sbx_exec_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct sbx_exec_op){.s = s, .id = exec_id, .cb = *cbs, .ud = ud};
	size_t off = ag_wr_begin(&ch->out, AG_T_ATTACH, exec_id);
	int r = chan_queue_end(s, off);
	if (r < 0) {
		free(op);
		return r;
	}
	chan_link(ch, op);
	*ret = op;
	return 0;
}

int sbx_exec_op_stdin(struct sbx_exec_op *op, const void *data, size_t len, bool eof)
{
	if (len > AG_MAX_DATA || (len && !data))
		return -EINVAL;
	if (!op->stdin_stream || !op->started || op->exited || op->stdin_closed || op->s->chan->err)
		return -EPIPE;
	struct sbx_chan *ch = op->s->chan;
	bool ack = op->minor >= 1;
	size_t off = ag_wr_begin(&ch->out, AG_T_STDIN, op->id);
	ag_wr_u8(&ch->out, eof);
	ag_wr_blob(&ch->out, data, (uint32_t)len);
	if (ack)
		ag_wr_u8(&ch->out, AG_STDIN_F_ACK);
	int r = chan_queue_end(op->s, off);
	if (r < 0)
		return r;
	op->stdin_closed = eof;
	return ack ? 0 : 1;
}

/* Queues SIGNAL sig for exec id (its reply is nobody's: skipped). */
static int chan_signal(struct sbx *s, uint32_t id, int sig)
{
	struct sbx_chan *ch = chan_get(s);
	if (!ch)
		return -ENOMEM;
	if (ch->err)
		return ch->err;
	size_t off = ag_wr_begin(&ch->out, AG_T_SIGNAL, id);
	ag_wr_u32(&ch->out, (uint32_t)sig);
	return chan_queue_end(s, off);
}

void sbx_exec_op_kill(struct sbx_exec_op *op)
{
	sbx_exec_op_signal(op, SIGKILL);
}

int sbx_exec_op_signal(struct sbx_exec_op *op, int sig)
{
	if (sig <= 0 || sig >= 65)
		return -EINVAL;
	if (op->exited)
		return -ESRCH;
	return chan_signal(op->s, op->id, sig);
}

void sbx_exec_op_free(struct sbx_exec_op *op)
{
	if (!op)
		return;
	op_unlink(op); /* its later frames are nobody's */
	free(op);
}

/* ---- the blocking exec, on the op ----------------------------------------- */

struct exec_wait {
	const struct sbx_exec_opts *o;
	sbx_output_fn fn;
	void *ud;
	struct sbx_exec_op *op;
	int cb_err; /* what fn returned, once negative: the exec is killed */
	int r, mode;
	bool started, announced;
	struct sbx_exec_result res;
};

static void w_started(void *ud, int mode)
{
	struct exec_wait *w = ud;
	w->started = true;
	w->mode = mode; /* announced to on_stdin once our request is out */
}

static void w_output(void *ud, int stream, const void *data, size_t len)
{
	struct exec_wait *w = ud;
	if (w->fn && !w->cb_err && (w->cb_err = w->fn(w->ud, stream, data, len)) < 0)
		sbx_exec_op_kill(w->op);
}

static void w_stdin_ack(void *ud, int status, uint32_t pending)
{
	struct exec_wait *w = ud;
	if (w->o->on_stdin)
		w->o->on_stdin(w->ud, w->op->id, status, pending);
}

static void w_exit(void *ud, int r, const struct sbx_exec_result *res)
{
	struct exec_wait *w = ud;
	w->r = r;
	if (res)
		w->res = *res;
}

int sbx_exec(struct sbx *s, const struct sbx_exec_opts *o, sbx_output_fn fn, void *ud,
	     struct sbx_exec_result *ret)
{
	static const struct sbx_exec_cbs cbs = {w_started, w_output, w_stdin_ack, w_exit};
	struct exec_wait w = {.o = o, .fn = fn, .ud = ud};
	int64_t deadline = o->timeout_ms ? now_ms() + o->timeout_ms + EXEC_GRACE_MS : -1;
	int r = sbx_exec_op_start(s, o, &cbs, &w, &w.op);
	if (r < 0)
		return r;
	/* sbx_exec_stdin may write from another thread once announced */
	if (o->stdin_stream && o->on_stdin) {
		w.op->shared = true;
		s->chan->shared_writes++;
	}
	for (;;) {
		short ev = sbx_exec_op_events(w.op);
		if (w.started && !w.announced && !(ev & POLLOUT) && !w.op->exited) {
			w.announced = true; /* after our request is out: stdin may follow */
			if (o->stdin_stream && o->on_stdin)
				o->on_stdin(ud, w.op->id, w.mode, 0);
			ev = sbx_exec_op_events(w.op);
		}
		struct pollfd pfd = {.fd = s->ctl, .events = ev};
		int wait = deadline < 0 ? -1 : (int)STRATA_MAX(deadline - now_ms(), 0);
		int k = ev ? poll(&pfd, 1, wait) : 1;
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			r = k < 0 ? -errno : -ETIMEDOUT;
			break;
		}
		if (sbx_exec_op_io(w.op, ev ? pfd.revents : 0) == 1) {
			r = w.r;
			break;
		}
	}
	sbx_exec_op_free(w.op);
	if (r < 0 && w.res.failed_step)
		*ret = w.res; /* which step of the start failed */
	if (r < 0)
		return r;
	if (w.cb_err < 0)
		return w.cb_err;
	*ret = w.res;
	return 0;
}

/* ---- files ----------------------------------------------------------------- */

static void stat_from_ag(const struct ag_stat *a, struct sbx_stat *o)
{
	*o = (struct sbx_stat){.type = a->type,
			       .mode = a->mode,
			       .uid = a->uid,
			       .gid = a->gid,
			       .nlink = a->nlink,
			       .size = a->size,
			       .mtime_ns = a->mtime_ns};
}

/* Begins a request frame with a path; the caller appends the rest. */
static size_t begin_path(struct ag_wr *w, uint16_t type, uint32_t id, const char *path)
{
	ag_wr_init(w);
	size_t off = ag_wr_begin(w, type, id);
	ag_wr_str(w, path);
	return off;
}

static int path_ok(const char *path)
{
	return path && path[0] && strlen(path) <= AG_MAX_PATH ? 0 : -EINVAL;
}

int sbx_file_read(struct sbx *s, const char *path, uint64_t offset, uint32_t max, void **ret_data,
		  size_t *ret_len, uint64_t *ret_size)
{
	if (path_ok(path) < 0 || max > AG_MAX_DATA)
		return -EINVAL;
	uint32_t id = chan_next_id(s);
	struct ag_wr w;
	struct reply rp = {0};
	size_t off = begin_path(&w, AG_T_READ, id, path);
	ag_wr_u64(&w, offset);
	ag_wr_u32(&w, max);
	int r = ag_wr_end(&w, off);
	if (r == 0)
		r = roundtrip(s, &w, AG_T_READ, id, &rp);
	ag_wr_done(&w);
	uint64_t size = ag_rd_u64(&rp.rd);
	uint32_t n = 0;
	const void *d = r == 0 ? ag_rd_blob(&rp.rd, AG_MAX_DATA, &n) : NULL;
	if (r == 0 && !d)
		r = -EBADMSG;
	void *copy = r == 0 ? malloc(n ? n : 1) : NULL;
	if (r == 0 && !copy)
		r = -ENOMEM;
	if (r == 0) {
		memcpy(copy, d, n);
		*ret_data = copy;
		*ret_len = n;
		if (ret_size)
			*ret_size = size;
	}
	reply_done(&rp);
	return r;
}

int sbx_file_write(struct sbx *s, const char *path, const void *data, size_t len, uint32_t mode)
{
	return sbx_file_write_at(s, path, 0, data, len, mode, true);
}

int sbx_file_write_at(struct sbx *s, const char *path, uint64_t offset, const void *data,
		      size_t len, uint32_t mode, bool create)
{
	if (path_ok(path) < 0 || len > AG_MAX_DATA)
		return -EINVAL;
	uint32_t id = chan_next_id(s);
	struct ag_wr w;
	struct reply rp = {0};
	size_t off = begin_path(&w, AG_T_WRITE, id, path);
	ag_wr_u32(&w, mode);
	ag_wr_u32(&w, create ? AG_WRITE_F_CREATE | AG_WRITE_F_TRUNC : 0);
	ag_wr_u64(&w, offset);
	ag_wr_blob(&w, data, (uint32_t)len);
	int r = ag_wr_end(&w, off);
	if (r == 0)
		r = roundtrip(s, &w, AG_T_WRITE, id, &rp);
	uint32_t written = ag_rd_u32(&rp.rd);
	if (r == 0 && written != len)
		r = -EIO;
	ag_wr_done(&w);
	reply_done(&rp);
	return r;
}

/* TAR_OUT or TAR_IN with its two paths: the reply in rp (caller frees). */
static int tar_roundtrip(struct sbx *s, uint16_t type, const char *a, const char *b,
			 struct reply *rp)
{
	if (path_ok(a) < 0 || path_ok(b) < 0)
		return -EINVAL;
	uint32_t id = chan_next_id(s);
	struct ag_wr w;
	size_t off = begin_path(&w, type, id, a);
	ag_wr_str(&w, b);
	int r = ag_wr_end(&w, off);
	if (r == 0)
		r = roundtrip(s, &w, type, id, rp);
	ag_wr_done(&w);
	return r;
}

int sbx_tar_out(struct sbx *s, const char *dir, const char *archive, uint64_t *ret_size,
		uint32_t *ret_members)
{
	struct reply rp = {0};
	int r = tar_roundtrip(s, AG_T_TAR_OUT, dir, archive, &rp);
	*ret_size = ag_rd_u64(&rp.rd);
	*ret_members = ag_rd_u32(&rp.rd);
	if (r == 0 && rp.rd.err)
		r = -EBADMSG;
	reply_done(&rp);
	return r;
}

int sbx_tar_in(struct sbx *s, const char *archive, const char *dir, uint32_t *ret_members)
{
	struct reply rp = {0};
	int r = tar_roundtrip(s, AG_T_TAR_IN, archive, dir, &rp);
	*ret_members = ag_rd_u32(&rp.rd);
	reply_done(&rp);
	return r;
}

int sbx_file_stat(struct sbx *s, const char *path, struct sbx_stat *ret)
{
	if (path_ok(path) < 0)
		return -EINVAL;
	uint32_t id = chan_next_id(s);
	struct ag_wr w;
	struct reply rp = {0};
	size_t off = begin_path(&w, AG_T_STAT, id, path);
	ag_wr_u8(&w, 0);
	int r = ag_wr_end(&w, off);
	if (r == 0)
		r = roundtrip(s, &w, AG_T_STAT, id, &rp);
	struct ag_stat st;
	ag_stat_decode(&rp.rd, &st);
	if (r == 0 && rp.rd.err)
		r = rp.rd.err;
	if (r == 0)
		stat_from_ag(&st, ret);
	ag_wr_done(&w);
	reply_done(&rp);
	return r;
}

void sbx_exec_infos_free(struct sbx_exec_info *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].cmd);
	free(v);
}

static int decode_execs(struct sbx *s, struct ag_rd *rd, struct sbx_exec_info **ret, size_t *ret_n)
{
	static struct ag_exec_info e; /* AG_MAX_CMD: not on the stack */
	uint32_t n = ag_rd_u32(rd);
	if (rd->err || n > SBX_MAX_EXECS * 4u)
		return -EBADMSG;
	struct sbx_exec_info *v = calloc(n ? n : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		if (ag_exec_info_decode(rd, &e) < 0 || !(v[i].cmd = strdup(e.cmd))) {
			sbx_exec_infos_free(v, i);
			return rd->err ? rd->err : -ENOMEM;
		}
		v[i].id = e.id;
		v[i].pid = (int32_t)e.pid;
		v[i].running = e.state == AG_EXEC_RUNNING;
		v[i].age_us = e.age_us;
		if (!(e.id & SBX_EXEC_ID_CALLER) && e.id > s->next_id)
			s->next_id = e.id; /* ours: never reused */
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int sbx_execs_list(struct sbx *s, struct sbx_exec_info **ret, size_t *ret_n)
{
	uint32_t id = chan_next_id(s);
	struct ag_wr w;
	struct reply rp = {0};
	ag_wr_init(&w);
	size_t off = ag_wr_begin(&w, AG_T_EXECS, id);
	int r = ag_wr_end(&w, off);
	if (r == 0)
		r = roundtrip(s, &w, AG_T_EXECS, id, &rp);
	if (r == 0)
		r = decode_execs(s, &rp.rd, ret, ret_n);
	ag_wr_done(&w);
	reply_done(&rp);
	return r;
}

void sbx_dirents_free(struct sbx_dirent *d, size_t n)
{
	for (size_t i = 0; d && i < n; i++)
		free(d[i].name);
	free(d);
}

static int decode_list(struct ag_rd *rd, struct sbx_dirent **ret, size_t *ret_n)
{
	uint32_t n = ag_rd_u32(rd);
	ag_rd_u8(rd); /* truncated: the caller sees fewer entries than exist */
	if (rd->err || n > AG_MAX_LIST)
		return -EBADMSG;
	struct sbx_dirent *d = calloc(n ? n : 1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct ag_stat st;
		d[i].name = ag_rd_strdup(rd, AG_MAX_PATH);
		ag_stat_decode(rd, &st);
		if (rd->err) {
			sbx_dirents_free(d, i + 1);
			return rd->err;
		}
		stat_from_ag(&st, &d[i].st);
	}
	*ret = d;
	*ret_n = n;
	return 0;
}

int sbx_file_list(struct sbx *s, const char *path, struct sbx_dirent **ret, size_t *ret_n)
{
	if (path_ok(path) < 0)
		return -EINVAL;
	uint32_t id = chan_next_id(s);
	struct ag_wr w;
	struct reply rp = {0};
	size_t off = begin_path(&w, AG_T_LIST, id, path);
	int r = ag_wr_end(&w, off);
	if (r == 0)
		r = roundtrip(s, &w, AG_T_LIST, id, &rp);
	if (r == 0)
		r = decode_list(&rp.rd, ret, ret_n);
	ag_wr_done(&w);
	reply_done(&rp);
	return r;
}

static int simple_op(struct sbx *s, uint16_t type, const char *path, uint32_t mode, bool has_mode,
		     uint8_t flag)
{
	if (path_ok(path) < 0)
		return -EINVAL;
	uint32_t id = chan_next_id(s);
	struct ag_wr w;
	struct reply rp = {0};
	size_t off = begin_path(&w, type, id, path);
	if (has_mode)
		ag_wr_u32(&w, mode);
	ag_wr_u8(&w, flag);
	int r = ag_wr_end(&w, off);
	if (r == 0)
		r = roundtrip(s, &w, type, id, &rp);
	ag_wr_done(&w);
	reply_done(&rp);
	return r;
}

int sbx_file_mkdir(struct sbx *s, const char *path, uint32_t mode, bool parents)
{
	return simple_op(s, AG_T_MKDIR, path, mode, true, parents);
}

int sbx_file_remove(struct sbx *s, const char *path, bool recursive)
{
	return simple_op(s, AG_T_REMOVE, path, 0, false, recursive);
}
