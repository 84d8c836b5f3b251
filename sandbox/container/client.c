/* client.c — a synchronous client of the agent protocol over a sandbox's
 * stream: exec (with streamed output through a callback) and the file
 * operations. One request at a time per sandbox; frames for other ids
 * (there should be none) are skipped. Every wait has a deadline, so a stuck
 * or dead agent yields -ETIMEDOUT or -EPIPE, never a hang.
 *
 * The one exception to "one thread per sandbox": sbx_exec_stdin feeds an
 * interactive exec from another thread while sbx_exec reads, between the
 * exec's start (on_stdin) and sbx_exec's return. The only frames that can
 * then be written at once are its STDIN and sbx_exec's SIGKILL, so those
 * two hold the stream's write lock (a table of locks hashed by fd: struct
 * sbx is not this file's to extend) and never interleave; sbx_exec only
 * tries the lock (a writer blocked on a full stream needs sbx_exec to keep
 * reading). Nothing else takes it, so a caller's other sandboxes never wait
 * on it. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"
#include "sandbox-internal.h"

#define FILE_TIMEOUT_MS 30000
#define EXEC_GRACE_MS 10000

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

/* Returns 0, -errno, or 1 when a stdin writer holds the stream (retry
 * after reading a frame). */
static int send_kill(struct sbx *s, uint32_t id)
{
	if (pthread_mutex_trylock(wlock(s)) != 0)
		return 1;
	struct ag_wr w;
	ag_wr_init(&w);
	size_t off = ag_wr_begin(&w, AG_T_SIGNAL, id);
	ag_wr_u32(&w, SIGKILL);
	ag_wr_end(&w, off);
	int r = w.err ? w.err : write_all(s->ctl, w.data, w.len);
	pthread_mutex_unlock(wlock(s));
	ag_wr_done(&w);
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

/* One exec in progress. */
struct exec_ctx {
	struct sbx *s;
	uint32_t id;
	sbx_output_fn fn;
	void *ud;
	const struct sbx_exec_opts *o;
	int cb_err;  /* what the callback returned, once negative */
	int started; /* 0; 1 EXEC answered; 2 announced to on_stdin */
	uint8_t agent_minor;
	bool kill_wanted; /* the callback gave up: SIGKILL once the request is out */
	bool exited;
	struct sbx_exec_result res;
	struct reply rp;
	int64_t deadline;
};

/* Reads and handles one frame of the exec. */
static int exec_read_one(struct exec_ctx *x)
{
	struct reply *rp = &x->rp;
	int r = read_frame_until(x->s->ctl, &rp->h, &rp->buf, &rp->cap, x->deadline);
	if (r < 0 || rp->h.id != x->id)
		return r;
	struct ag_rd rd;
	ag_rd_init(&rd, rp->buf, rp->h.len);
	if (rp->h.type == (AG_T_EXEC | AG_T_REPLY)) {
		int st = (int32_t)ag_rd_u32(&rd);
		x->agent_minor = rp->h.minor;
		if (!rd.err && st >= 0 && !x->started)
			x->started = 1;
		return rd.err ? rd.err : (st < 0 ? st : 0);
	}
	if (rp->h.type == (AG_T_STDIN | AG_T_REPLY)) {
		int st = (int32_t)ag_rd_u32(&rd);
		uint32_t pending = ag_rd_u32(&rd);
		if (!rd.err && x->o->on_stdin)
			x->o->on_stdin(x->ud, x->id, st, pending);
		return 0;
	}
	if (rp->h.type == AG_T_OUTPUT) {
		uint8_t stream = ag_rd_u8(&rd);
		uint32_t n = 0;
		const void *d = ag_rd_blob(&rd, AG_MAX_PAYLOAD, &n);
		if (!d)
			return -EBADMSG;
		if (x->fn && !x->cb_err && (x->cb_err = x->fn(x->ud, stream, d, n)) < 0)
			x->kill_wanted = true;
		return 0;
	}
	if (rp->h.type == AG_T_EXIT) {
		struct ag_exit e;
		r = ag_exit_decode(rp->buf, rp->h.len, &e);
		if (r < 0)
			return r;
		x->res = (struct sbx_exec_result){
		    .exit_code = e.exit_code,
		    .signo = e.signo,
		    .timed_out = e.flags & AG_EXIT_F_TIMED_OUT,
		    .truncated = e.flags & AG_EXIT_F_TRUNCATED,
		    .stdout_bytes = e.stdout_bytes,
		    .stderr_bytes = e.stderr_bytes,
		    .duration_us = e.duration_us,
		};
		x->exited = true;
	}
	return 0;
}

/* Sends the request while reading what the agent sends meanwhile: with a
 * large stdin and a command that floods its output, the agent stops
 * reading the stream once its queue is full, and a client that only wrote
 * would wait for it forever. */
static int exec_send(struct exec_ctx *x, const uint8_t *p, size_t n)
{
	while (n) {
		struct pollfd pfd = {.fd = x->s->ctl, .events = POLLIN | POLLOUT};
		int wait = x->deadline < 0 ? -1 : (int)STRATA_MAX(x->deadline - now_ms(), 0);
		int r = poll(&pfd, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ETIMEDOUT;
		if (pfd.revents & POLLIN) {
			r = exec_read_one(x);
			if (r < 0)
				return r;
			continue;
		}
		if (pfd.revents & (POLLHUP | POLLERR))
			return -EPIPE;
		ssize_t k = send(x->s->ctl, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && errno != EAGAIN && errno != EINTR)
			return errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno;
		if (k > 0) {
			p += k;
			n -= (size_t)k;
		}
	}
	return 0;
}

int sbx_exec(struct sbx *s, const struct sbx_exec_opts *o, sbx_output_fn fn, void *ud,
	     struct sbx_exec_result *ret)
{
	if (!o->argv || !o->argv[0] || o->stdin_len > AG_MAX_DATA)
		return -EINVAL;
	struct exec_ctx x = {.s = s, .id = ++s->next_id, .fn = fn, .ud = ud, .o = o};
	x.deadline = o->timeout_ms ? now_ms() + o->timeout_ms + EXEC_GRACE_MS : -1;
	struct ag_wr w;
	ag_wr_init(&w);
	int r = encode_exec(&w, o, x.id);
	if (r == 0)
		r = exec_send(&x, w.data, w.len);
	ag_wr_done(&w);
	while (r == 0 && !x.exited) {
		if (x.started == 1 && o->stdin_stream && o->on_stdin) {
			x.started = 2; /* after our request is out: stdin may follow */
			o->on_stdin(
			    ud, x.id,
			    x.agent_minor >= 1 ? SBX_STDIN_STARTED : SBX_STDIN_STARTED_NOACK, 0);
		}
		if (x.kill_wanted) {
			r = send_kill(s, x.id);
			x.kill_wanted = r == 1;
			if (r <= 0)
				continue;
			r = 0;
		}
		r = exec_read_one(&x);
	}
	reply_done(&x.rp);
	if (r < 0)
		return r;
	if (x.cb_err < 0)
		return x.cb_err;
	*ret = x.res;
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
