/* client.c — the client of the agent protocol over a sandbox's stream:
 * exec (with streamed output through callbacks) and the file operations.
 * One request at a time per sandbox; frames for other ids (late ones of an
 * earlier request) are skipped. Every blocking wait has a deadline, so a
 * stuck or dead agent yields -ETIMEDOUT or -EPIPE, never a hang.
 *
 * An exec is an op (sbx_exec_op_*) that never blocks: it keeps what the
 * socket did not take and what it read of a frame, and is driven by the
 * caller's loop (sandboxd's epoll loop) or by sbx_exec's poll loop.
 *
 * The one exception to "one thread per sandbox": sbx_exec_stdin feeds an
 * interactive exec from another thread while sbx_exec reads, between the
 * exec's start (on_stdin) and sbx_exec's return. The only frames that can
 * then be written at once are its STDIN and sbx_exec's SIGKILL, so those
 * two hold the stream's write lock (a table of locks hashed by fd: struct
 * sbx is not this file's to extend) and never interleave; sbx_exec only
 * tries the lock (a writer blocked on a full stream needs sbx_exec to keep
 * reading) and holds it until its frame is out. Nothing else takes it, so a
 * caller's other sandboxes never wait on it. */
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

/* Sends w (one frame of type/id) and waits for its reply; returns the
 * reply's status, leaving rp->rd positioned after it. */
static int roundtrip(struct sbx *s, struct ag_wr *w, uint16_t type, uint32_t id, struct reply *rp)
{
	int64_t deadline = now_ms() + FILE_TIMEOUT_MS;
	int r = send_wr(s, w);
	while (r == 0) {
		r = read_frame_until(s->ctl, &rp->h, &rp->buf, &rp->cap, deadline);
		if (r < 0)
			return r;
		if (rp->h.type == (type | AG_T_REPLY) && rp->h.id == id)
			break;
	}
	if (r < 0)
		return r;
	ag_rd_init(&rp->rd, rp->buf, rp->h.len);
	int status = (int32_t)ag_rd_u32(&rp->rd);
	return rp->rd.err ? rp->rd.err : status;
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
	if (r == 0)
		r = send_wr(s, &w);
	ag_wr_done(&w);
	return r;
}

/* One exec in progress (sbx_exec_op_*). The frames not yet sent are
 * out.data[sent..out.len); in[0..in_len) holds what was read and not yet
 * handled (at most a part of one frame between calls).
 *
 * Invariants:
 *  1. exit is called once, and no callback after it.
 *  2. done = exit called, nothing left to send and no part of a frame
 *     read: the next request starts on a frame boundary. (After a stream
 *     error the stream is broken whatever we do: done at once.)
 *  3. With shared_writes (sbx_exec of a stdin_stream exec, where
 *     sbx_exec_stdin writes from another thread) the op writes only while
 *     it holds the stream's write lock, and keeps it until its bytes are
 *     all out, so that frames never interleave. */
struct sbx_exec_op {
	struct sbx *s;
	uint32_t id;
	struct sbx_exec_cbs cb;
	void *ud;
	struct ag_wr out;
	size_t sent;
	uint8_t *in;
	size_t in_len, in_cap;
	int err; /* the stream failed: reported by exit */
	uint8_t minor;
	bool started, exited, stdin_stream, stdin_closed, not_sock;
	bool shared_writes, locked;
};

static short op_events(const struct sbx_exec_op *op)
{
	if (op->exited && (op->err || (op->sent == op->out.len && op->in_len == 0)))
		return 0;
	short ev = op->exited && op->in_len == 0 ? 0 : POLLIN;
	if (op->sent < op->out.len || (op->err && !op->exited))
		ev |= POLLOUT;
	return ev;
}

short sbx_exec_op_events(const struct sbx_exec_op *op)
{
	return op_events(op);
}

/* Sends what the socket takes now. */
static void op_flush(struct sbx_exec_op *op)
{
	if (op->err || op->sent == op->out.len)
		return;
	if (op->shared_writes && !op->locked) {
		if (pthread_mutex_trylock(wlock(op->s)) != 0)
			return; /* a stdin chunk is being written: later */
		op->locked = true;
	}
	int fd = op->s->ctl;
	while (op->sent < op->out.len) {
		const uint8_t *p = op->out.data + op->sent;
		size_t n = op->out.len - op->sent;
		ssize_t k = -1;
		if (!op->not_sock) {
			k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (k < 0 && errno == ENOTSOCK)
				op->not_sock = true;
		}
		if (op->not_sock) { /* a pipe or a tty: write only what poll allows */
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
			op->err = k == 0 || errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno;
			break;
		}
		op->sent += (size_t)k;
	}
	if (op->sent == op->out.len || op->err) {
		op->out.len = 0;
		op->sent = 0;
		if (op->locked)
			pthread_mutex_unlock(wlock(op->s));
		op->locked = false;
	}
}

static void op_exit(struct sbx_exec_op *op, int r, const struct sbx_exec_result *res)
{
	if (op->exited)
		return;
	op->exited = true;
	op->cb.exit(op->ud, r, res);
}

/* One frame of the stream (id and type checked here). */
static void op_frame(struct sbx_exec_op *op, const struct ag_hdr *h, const uint8_t *p)
{
	if (h->id != op->id || op->exited)
		return; /* another request's late frames, or ours after EXIT */
	struct ag_rd rd;
	ag_rd_init(&rd, p, h->len);
	if (h->type == (AG_T_EXEC | AG_T_REPLY)) {
		int st = (int32_t)ag_rd_u32(&rd);
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

/* Reads once and handles every whole frame read. */
static void op_read(struct sbx_exec_op *op)
{
	size_t want = 65536;
	if (op->in_len >= AG_HDR_SIZE) {
		struct ag_hdr h;
		if (ag_hdr_decode(op->in, &h) == 0)
			want = STRATA_MAX(want, AG_HDR_SIZE + (size_t)h.len);
	}
	if (op->in_cap < want) {
		uint8_t *b = realloc(op->in, want);
		if (!b) {
			op->err = -ENOMEM;
			return;
		}
		op->in = b;
		op->in_cap = want;
	}
	int fd = op->s->ctl;
	ssize_t k = -1;
	if (!op->not_sock) {
		k = recv(fd, op->in + op->in_len, op->in_cap - op->in_len, MSG_DONTWAIT);
		if (k < 0 && errno == ENOTSOCK)
			op->not_sock = true;
	}
	if (op->not_sock) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		k = poll(&pfd, 1, 0);
		if (k > 0)
			k = read(fd, op->in + op->in_len, op->in_cap - op->in_len);
		else if (k == 0) {
			k = -1;
			errno = EAGAIN;
		}
	}
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k <= 0) {
		op->err = k == 0 || errno == ECONNRESET ? -EPIPE : -errno;
		return;
	}
	op->in_len += (size_t)k;
	size_t off = 0;
	while (op->in_len - off >= AG_HDR_SIZE) {
		struct ag_hdr h;
		int r = ag_hdr_decode(op->in + off, &h);
		if (r < 0) {
			op->err = r;
			return;
		}
		if (op->in_len - off < AG_HDR_SIZE + (size_t)h.len)
			break;
		op_frame(op, &h, op->in + off + AG_HDR_SIZE);
		off += AG_HDR_SIZE + (size_t)h.len;
	}
	memmove(op->in, op->in + off, op->in_len - off);
	op->in_len -= off;
}

int sbx_exec_op_io(struct sbx_exec_op *op, short revents)
{
	if (!op->err && (revents & (POLLIN | POLLHUP | POLLERR)) && (!op->exited || op->in_len))
		op_read(op);
	op_flush(op); /* what the callbacks queued too */
	if (op->err)
		op_exit(op, op->err, NULL);
	return op_events(op) == 0;
}

/* Appends one frame (type, id) whose payload the caller writes between
 * the two calls. */
static int op_queue_end(struct sbx_exec_op *op, size_t off)
{
	int r = ag_wr_end(&op->out, off);
	if (r < 0) { /* drop the frame, keep what was queued before it */
		op->out.len = off;
		op->out.err = 0;
		return r;
	}
	op_flush(op);
	return 0;
}

int sbx_exec_op_start(struct sbx *s, const struct sbx_exec_opts *o, const struct sbx_exec_cbs *cbs,
		      void *ud, struct sbx_exec_op **ret)
{
	if (!o->argv || !o->argv[0] || o->stdin_len > AG_MAX_DATA || !cbs->exit)
		return -EINVAL;
	struct sbx_exec_op *op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct sbx_exec_op){
	    .s = s, .id = ++s->next_id, .cb = *cbs, .ud = ud, .stdin_stream = o->stdin_stream};
	ag_wr_init(&op->out);
	int r = encode_exec(&op->out, o, op->id);
	if (r < 0) {
		ag_wr_done(&op->out);
		free(op);
		return r;
	}
	op_flush(op);
	*ret = op;
	return 0;
}

int sbx_exec_op_stdin(struct sbx_exec_op *op, const void *data, size_t len, bool eof)
{
	if (len > AG_MAX_DATA || (len && !data))
		return -EINVAL;
	if (!op->stdin_stream || !op->started || op->exited || op->stdin_closed || op->err)
		return -EPIPE;
	bool ack = op->minor >= 1;
	size_t off = ag_wr_begin(&op->out, AG_T_STDIN, op->id);
	ag_wr_u8(&op->out, eof);
	ag_wr_blob(&op->out, data, (uint32_t)len);
	if (ack)
		ag_wr_u8(&op->out, AG_STDIN_F_ACK);
	int r = op_queue_end(op, off);
	if (r < 0)
		return r;
	op->stdin_closed = eof;
	return ack ? 0 : 1;
}

void sbx_exec_op_kill(struct sbx_exec_op *op)
{
	if (op->exited || op->err)
		return;
	size_t off = ag_wr_begin(&op->out, AG_T_SIGNAL, op->id);
	ag_wr_u32(&op->out, SIGKILL);
	op_queue_end(op, off);
}

void sbx_exec_op_free(struct sbx_exec_op *op)
{
	if (!op)
		return;
	if (op->locked)
		pthread_mutex_unlock(wlock(op->s));
	ag_wr_done(&op->out);
	free(op->in);
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
	w.op->shared_writes = o->stdin_stream && o->on_stdin;
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
		if (sbx_exec_op_io(w.op, pfd.revents) == 1) {
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
	uint32_t id = ++s->next_id;
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
	if (path_ok(path) < 0 || len > AG_MAX_DATA)
		return -EINVAL;
	uint32_t id = ++s->next_id;
	struct ag_wr w;
	struct reply rp = {0};
	size_t off = begin_path(&w, AG_T_WRITE, id, path);
	ag_wr_u32(&w, mode);
	ag_wr_u32(&w, AG_WRITE_F_CREATE | AG_WRITE_F_TRUNC);
	ag_wr_u64(&w, 0);
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

int sbx_file_stat(struct sbx *s, const char *path, struct sbx_stat *ret)
{
	if (path_ok(path) < 0)
		return -EINVAL;
	uint32_t id = ++s->next_id;
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
	uint32_t id = ++s->next_id;
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
	uint32_t id = ++s->next_id;
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
