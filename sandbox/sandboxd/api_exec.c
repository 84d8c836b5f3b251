/* api_exec.c — an exec's life in the HTTP API: POST /v1/sandboxes/{id}/exec
 * (validation, the stream of newline-delimited JSON events: start, output,
 * then the exit, in a chunked response, back-pressure on a slow client),
 * background execs, and the routes of .../execs: the list, a signal, an
 * attach to the output stream from another client, a kill, interactive
 * stdin. Each exec is a record on its sandbox (sb->execs) with an
 * on-destroy hook (sandboxd.h), so that a sandbox that goes away ends its
 * streams with an exit event.
 *
 * A record is streamed to one client (c, its owner) at a time, and to at
 * most EXEC_FOLLOWERS_MAX followers: further clients attached to it
 * (.../execs/{n}/stream while it has an owner), which get its start and
 * its live output from then on, and the exit. A follower that falls
 * EXEC_FOLLOWER_BACKLOG behind is detached (its stream ends without an
 * exit) instead of holding the command back. An ordinary
 * exec is its client's: the client leaving kills it. A background exec
 * (background: true, or one found running after a sandboxd restart)
 * outlives its clients: while none is attached its events are kept (at
 * most keep_cap bytes, and within the daemon's budget for kept output,
 * cfg.exec_keep_budget, of which one sandbox may hold EXEC_KEEP_SHARE:
 * past either the output is dropped and the exit says truncated),
 * and once it ended its record stays, finished, until a client attached
 * and read the exit (at most EXEC_KEEP_FINISHED per sandbox, the oldest
 * dropped first).
 *
 * Exec ids are never given twice in a sandbox, across sandboxd restarts
 * too: they are reserved in blocks of EXEC_ID_BLOCK, each persisted in the
 * sandbox's state.json before its first id goes out, and an adopted
 * sandbox goes on after the last reserved block. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox/sandboxd/api-internal.h"
#include "sandbox/sandboxd/http.h"

#define SBD_STDIN_CHUNK_MAX (1u << 20) /* one POST .../stdin body */
#define EXEC_KEEP_FINISHED 64	       /* finished background execs kept per sandbox */
/* One sandbox keeps at most 1/EXEC_KEEP_SHARE of the daemon's budget for
 * kept output: one tenant cannot take it all from the others. */
#define EXEC_KEEP_SHARE 4
/* Exec ids reserved (and persisted) at a time: one state.json write per
 * this many execs, and a restart skips at most this many numbers. */
#define EXEC_ID_BLOCK 1024
#define EXEC_CMD_MAX 1024    /* bytes of the command line in the list */
#define EXEC_FOLLOWERS_MAX 8 /* further clients attached to one exec */
/* Output queued for a follower past which it is detached: a reader gone
 * silent must cost bounded memory, and must not stall the owner. */
#define EXEC_FOLLOWER_BACKLOG (4u << 20)

struct exec_ctx;

/* A further client attached to an exec (.../execs/{n}/stream). */
struct exec_follower {
	struct sbd_conn *c;
	struct exec_ctx *x;
	struct exec_follower *next;
};

struct exec_ctx {
	struct sbd_conn *c; /* the client streaming its events, or NULL */
	struct sandboxd *d;
	struct sbd_sandbox *sb;
	void *handle;	    /* the backend's, while it runs */
	bool running;	    /* the backend will call its sink */
	bool started;	    /* the chunked response began on c */
	bool background;    /* outlives its clients */
	bool reply_wait;    /* background: c waits for the start for its answer */
	bool stdin_stream;  /* interactive stdin: POST .../execs/{xid}/stdin */
	bool ended;	    /* exit holds its end, not yet read by a client */
	uint64_t xid;	    /* the exec's number in its sandbox (sb->exec_id_last) */
	int64_t pid;	    /* in the sandbox, once started (0: unknown) */
	int64_t started_at; /* wall seconds */
	char *cmd;	    /* the command line, for the list */
	struct jw keep;	    /* background, no client: events not yet read */
	size_t keep_cap;
	bool keep_dropped;
	struct sbd_exit exit;
	struct exec_follower *followers;
	unsigned n_followers;
	struct sbd_conn *stdin_c;	    /* a stdin request waiting for its acknowledgement */
	struct exec_ctx *next;		    /* in sb->execs */
	struct sbd_destroy_hook on_destroy; /* on sb: ends the stream */
};

static void follower_unlink(struct exec_follower *f)
{
	struct exec_ctx *x = f->x;
	for (struct exec_follower **p = &x->followers; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	x->n_followers--;
	free(f);
}

/* A follower's client went away. */
static void follower_abort(void *ctx)
{
	follower_unlink(ctx);
}

/* A follower too far behind: its stream ends without an exit event (the
 * client may attach again), the exec runs on. */
static void follower_detach(struct exec_follower *f)
{
	sbd_conn_set_abort(f->c, NULL, NULL);
	sbd_conn_stream_end(f->c);
	follower_unlink(f);
}

/* Answers a stdin request: status 0 (pending < 0: unknown), or why not. */
static void stdin_reply(struct sbd_conn *c, uint64_t xid, int status, int64_t pending)
{
	unsigned long long n = (unsigned long long)xid;
	if (status == 0) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_kbool(&w, "ok", true);
		if (pending >= 0)
			jw_kint(&w, "pending", pending);
		jw_obj_end(&w);
		sbd_conn_reply_json(c, 200, &w);
	} else if (status == -ENOBUFS)
		sbd_conn_reply_error(
		    c, 429, "stdin_full",
		    "exec %llu has %lld bytes of stdin it has not read yet (limit 4 "
		    "MiB): chunk dropped, retry later",
		    n, (long long)pending);
	else if (status == -ESRCH)
		sbd_conn_reply_error(c, 409, "exec_finished", "exec %llu has finished", n);
	else if (status == -EPIPE)
		sbd_conn_reply_error(c, 409, "stdin_closed", "exec %llu: its stdin is closed", n);
	else if (status == -EBUSY)
		sbd_conn_reply_error(
		    c, 409, "busy",
		    "exec %llu: a stdin chunk is in flight; send the next after its "
		    "answer",
		    n);
	else
		sbd_api_reply_errno(c, status, "stdin", NULL);
}

/* The answer to a waiting stdin request: the backend acknowledged its
 * chunk, or the exec ended first. */
static void stdin_answer(struct exec_ctx *x, int status, uint64_t pending)
{
	struct sbd_conn *c = x->stdin_c;
	if (!c)
		return;
	x->stdin_c = NULL;
	sbd_conn_set_abort(c, NULL, NULL);
	stdin_reply(c, x->xid,
		    status == 0 || status == -ENOBUFS || status == -ESRCH ? status : -EPIPE,
		    (int64_t)pending);
	sbd_conn_hold_done(c);
}

static void exec_stdin_ack(void *ctx, int status, uint64_t pending)
{
	stdin_answer(ctx, status, pending);
}

/* The client of a waiting stdin request went away. */
static void stdin_abort(void *ctx)
{
	struct exec_ctx *x = ctx;
	x->stdin_c = NULL;
}

/* The exec ended (its sink is called no more). */
static void exec_ended(struct exec_ctx *x)
{
	if (!x->running)
		return;
	x->running = false;
	x->handle = NULL;
	x->sb->running_execs--;
	x->sb->last_active_ms = sbd_now_ms();
	stdin_answer(x, -ESRCH, 0);
}

/* The bytes x's keep buffer grows by to take n more (jw_append doubles its
 * capacity): what the budget is charged. */
static size_t keep_growth(const struct exec_ctx *x, size_t n)
{
	const struct jw *k = &x->keep;
	if (k->len + n + 1 <= k->cap)
		return 0;
	size_t cap = k->cap ? k->cap : 256;
	while (cap < k->len + n + 1)
		cap *= 2;
	return cap - k->cap;
}

/* Keeps event line n of x (no client attached) if it fits its cap, the
 * daemon's budget and its sandbox's share of it; else drops it. */
static void keep_event(struct exec_ctx *x, const void *line, size_t n)
{
	size_t budget = (size_t)x->d->cfg.exec_keep_budget, grow = keep_growth(x, n);
	if (x->keep.len + n > x->keep_cap || x->d->exec_kept + grow > budget ||
	    x->sb->exec_kept + grow > budget / EXEC_KEEP_SHARE) {
		x->keep_dropped = true;
		return;
	}
	size_t before = x->keep.cap;
	jw_append(&x->keep, line, n);
	x->d->exec_kept += x->keep.cap - before;
	x->sb->exec_kept += x->keep.cap - before;
}

/* Frees what x kept, and gives it back to the budget. */
static void keep_release(struct exec_ctx *x)
{
	x->d->exec_kept -= x->keep.cap;
	x->sb->exec_kept -= x->keep.cap;
	jw_done(&x->keep);
	jw_init(&x->keep);
}

/* Removes the record (the exec ended or was cancelled). */
static void exec_drop(struct exec_ctx *x)
{
	exec_ended(x);
	while (x->followers) /* none left by the paths that end an exec */
		follower_detach(x->followers);
	for (struct exec_ctx **p = (struct exec_ctx **)&x->sb->execs; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
	sbd_sandbox_hook_del(x->sb, &x->on_destroy);
	keep_release(x);
	free(x->cmd);
	free(x);
}

/* Kills a running exec for good: its sink is called no more. */
static void exec_cancel(struct exec_ctx *x)
{
	if (x->running)
		x->sb->backend->exec_cancel(x->sb->backend, x->handle);
	exec_ended(x);
}

/* The stream starts with the command's start (or, from a backend that does
 * not tell it, the first event), so that an exec that cannot start is
 * answered with a typed HTTP error instead. */
static void exec_start_stream(struct exec_ctx *x)
{
	if (!x->started)
		sbd_conn_stream_begin(x->c, 200, "application/x-ndjson");
	x->started = true;
}

/* One event line to every follower. */
static void followers_emit(struct exec_ctx *x, const void *line, size_t n)
{
	for (struct exec_follower *f = x->followers, *next; f; f = next) {
		next = f->next;
		if (sbd_conn_pending(f->c) > EXEC_FOLLOWER_BACKLOG)
			follower_detach(f);
		else
			sbd_conn_stream_chunk(f->c, line, n);
	}
}

/* One event line: to the client streaming, else kept (background); and
 * to the followers. */
static void exec_emit(struct exec_ctx *x, const void *line, size_t n)
{
	followers_emit(x, line, n);
	if (x->c && !x->reply_wait) {
		exec_start_stream(x);
		sbd_conn_stream_chunk(x->c, line, n);
	} else if (!x->background) {
		return;
	} else {
		keep_event(x, line, n);
	}
}

/* The "start" event on c: the exec's number (for .../execs/{n}/...) and
 * pid; begins c's stream. */
static void start_event(struct exec_ctx *x, struct sbd_conn *c)
{
	char ev[128];
	int n = snprintf(ev, sizeof(ev), "{\"type\":\"start\",\"exec_id\":\"%llu\"",
			 (unsigned long long)x->xid);
	if (x->pid > 0)
		n += snprintf(ev + n, sizeof(ev) - (size_t)n, ",\"pid\":%lld", (long long)x->pid);
	n += snprintf(ev + n, sizeof(ev) - (size_t)n, "}\n");
	if (c == x->c)
		exec_start_stream(x);
	else
		sbd_conn_stream_begin(c, 200, "application/x-ndjson");
	sbd_conn_stream_chunk(c, ev, (size_t)n);
}

/* The start event to the owner. */
static void emit_start(struct exec_ctx *x)
{
	start_event(x, x->c);
}

/* A background exec's answer: its number and pid; its client is let go. */
static void background_reply(struct exec_ctx *x)
{
	struct sbd_conn *c = x->c;
	struct jw w;
	char id[24];
	snprintf(id, sizeof(id), "%llu", (unsigned long long)x->xid);
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "exec_id", id);
	jw_key(&w, "pid");
	if (x->pid > 0)
		jw_int(&w, x->pid);
	else
		jw_null(&w);
	jw_obj_end(&w);
	x->c = NULL;
	x->reply_wait = false;
	sbd_conn_set_abort(c, NULL, NULL);
	sbd_conn_reply_json(c, 200, &w);
	sbd_conn_hold_done(c);
}

/* The command started: the stream's head goes out now, with its start
 * event, so that a client has its handle before any output (a silent
 * server too). An interactive exec sent its start event already. */
static void exec_started(void *ctx, int64_t pid)
{
	struct exec_ctx *x = ctx;
	x->pid = pid;
	if (x->reply_wait)
		background_reply(x);
	else if (x->c && !x->started)
		emit_start(x);
}

static void exec_output(void *ctx, int stream, const void *p, size_t n)
{
	struct exec_ctx *x = ctx;
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "type", stream == 2 ? "stderr" : "stdout");
	jw_key(&w, "data");
	jw_b64(&w, p, n);
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	if (!w.err)
		exec_emit(x, w.buf, w.len);
	jw_done(&w);
}

/* A client that does not read its stream holds its exec back (bounded
 * memory here, a blocked pipe for the command) instead of growing our
 * buffer up to the output cap. */
#define EXEC_BACKLOG (1u << 20)

static bool exec_congested(void *ctx)
{
	struct exec_ctx *x = ctx;
	return x->c && !x->reply_wait && sbd_conn_pending(x->c) > EXEC_BACKLOG;
}

/* Ends c's stream with the exit event. */
static void emit_exit(struct sbd_conn *c, const struct sbd_exit *e)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "type", "exit");
	jw_key(&w, "exit_code");
	if (e->signo)
		jw_null(&w);
	else
		jw_int(&w, e->exit_code);
	jw_key(&w, "signal");
	if (e->signo)
		jw_int(&w, e->signo);
	else
		jw_null(&w);
	jw_kbool(&w, "timed_out", e->timed_out);
	jw_kbool(&w, "truncated", e->truncated);
	jw_kint(&w, "stdout_bytes", (int64_t)e->stdout_bytes);
	jw_kint(&w, "stderr_bytes", (int64_t)e->stderr_bytes);
	jw_kint(&w, "duration_us", e->duration_us);
	jw_key(&w, "error");
	jw_str(&w, e->error[0] ? e->error : NULL);
	jw_key(&w, "error_code");
	jw_str(&w, e->error[0] && e->error_code[0] ? e->error_code : NULL);
	jw_kbool(&w, "oom_killed", e->oom_killed);
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	sbd_conn_set_abort(c, NULL, NULL);
	sbd_conn_stream_end_with(c, w.buf, w.err ? 0 : w.len);
	jw_done(&w);
}

/* Ends every follower's stream with e (the exit, or why the exec ends). */
static void followers_end(struct exec_ctx *x, const struct sbd_exit *e)
{
	while (x->followers) {
		struct exec_follower *f = x->followers;
		emit_exit(f->c, e);
		follower_unlink(f);
	}
}

/* The exit event of an exec cancelled by sandboxd (its sink says no more). */
static struct sbd_exit cancelled_exit(const char *code, const char *fmt, const char *why)
{
	struct sbd_exit e = {.exit_code = -1, .signo = SIGKILL};
	snprintf(e.error, sizeof(e.error), fmt, why);
	snprintf(e.error_code, sizeof(e.error_code), "%s", code);
	return e;
}

/* Keeps at most EXEC_KEEP_FINISHED finished records on sb: drops the
 * oldest (the list is newest first). */
static void keep_finished_bound(struct sbd_sandbox *sb)
{
	struct exec_ctx *oldest = NULL;
	int n = 0;
	for (struct exec_ctx *x = sb->execs; x; x = x->next)
		if (x->ended) {
			n++;
			oldest = x;
		}
	if (n > EXEC_KEEP_FINISHED)
		exec_drop(oldest);
}

static void exec_exit(void *ctx, const struct sbd_exit *e)
{
	struct exec_ctx *x = ctx;
	exec_ended(x);
	x->exit = *e;
	x->exit.truncated |= x->keep_dropped;
	followers_end(x, &x->exit);
	if (x->reply_wait) /* it ended before it started: the exit says why */
		background_reply(x);
	if (x->c) {
		exec_start_stream(x);
		emit_exit(x->c, &x->exit);
		x->c = NULL;
	} else if (x->background) {
		x->ended = true; /* for a client to collect */
		keep_finished_bound(x->sb);
		return;
	}
	exec_drop(x);
}

/* The streaming client went away: an ordinary exec is killed, a
 * background one runs on without it. */
static void exec_abort(void *ctx)
{
	struct exec_ctx *x = ctx;
	x->c = NULL;
	x->started = false;
	x->reply_wait = false;
	if (x->background)
		return;
	exec_cancel(x);
	struct sbd_exit e = cancelled_exit("client_gone", "%s",
					   "killed: the client that ran it went away (an "
					   "ordinary exec ends with its client; use "
					   "background: true to outlive it)");
	followers_end(x, &e);
	exec_drop(x);
}

/* The sandbox goes away (on_destroy): kill the command and end the stream
 * with an exit event that says why. */
static void exec_sandbox_gone(struct sbd_destroy_hook *h, struct sbd_sandbox *sb, const char *why)
{
	struct exec_ctx *x = (struct exec_ctx *)((char *)h - offsetof(struct exec_ctx, on_destroy));
	struct sbd_exit e = cancelled_exit("sandbox_exited", "sandbox exited: %s", why);
	exec_cancel(x);
	followers_end(x, &e);
	if (x->reply_wait) {
		x->reply_wait = false;
		sbd_conn_set_abort(x->c, NULL, NULL);
		sbd_conn_reply_error(x->c, 404, "not_found", "sandbox exited: %s", why);
		sbd_conn_hold_done(x->c);
	} else if (x->c) {
		exec_start_stream(x);
		emit_exit(x->c, &e);
	}
	exec_drop(x);
}

static const char *const exec_fields[] = {
    "cmd",	    "python",  "env",	     "cwd",	   "user", "stdin",
    "stdin_stream", "timeout", "output_cap", "background", NULL};

struct exec_args {
	struct sbd_exec_req req;
	char **argv, **env;
	uint8_t *stdin_buf;
};

static void exec_args_done(struct exec_args *a)
{
	for (char **p = a->argv; p && *p; p++)
		free(*p);
	free(a->argv);
	for (char **p = a->env; p && *p; p++)
		free(*p);
	free(a->env);
	free(a->stdin_buf);
}

/* The optional boolean field key of j into *ret (left alone when absent
 * or null). Returns 0 or -EINVAL with err. */
static int opt_bool(const struct json *j, const char *key, bool *ret, struct strata_err *err)
{
	const struct json *v = json_get(j, key);
	if (!v || v->type == JSON_NULL)
		return 0;
	if (v->type != JSON_BOOL)
		return strata_err_set(err, -EINVAL, "%s must be a boolean", key);
	*ret = v->b;
	return 0;
}

static int parse_cmd(const struct json *cmd, char ***ret, struct strata_err *err)
{
	if (cmd->type == JSON_STR) { /* a shell command line */
		const char *s = json_cstr(cmd);
		char **v = calloc(4, sizeof(char *));
		if (!s || !v) {
			free(v);
			strata_err_set(err, -EINVAL, "cmd contains a NUL byte");
			return -EINVAL;
		}
		v[0] = strdup("/bin/sh");
		v[1] = strdup("-c");
		v[2] = strdup(s);
		*ret = v;
		return 0;
	}
	if (cmd->type != JSON_ARR || !cmd->len || cmd->len > 4096) {
		strata_err_set(err, -EINVAL,
			       "cmd must be a non-empty array of strings (or a shell string)");
		return -EINVAL;
	}
	char **v = calloc(cmd->len + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	size_t i = 0;
	for (struct json *a = cmd->child; a; a = a->next) {
		const char *s = json_cstr(a);
		if (!s || !(v[i++] = strdup(s))) {
			strata_err_set(err, -EINVAL, "cmd[%zu] must be a string without NUL bytes",
				       i - 1);
			*ret = v;
			return -EINVAL;
		}
	}
	*ret = v;
	return 0;
}

static int parse_exec(struct sandboxd *d, struct sbd_sandbox *sb, const struct json *j,
		      struct exec_args *a, struct strata_err *err)
{
	const struct json *cmd = json_get(j, "cmd"), *py = json_get(j, "python");
	struct sbd_exec_req *q = &a->req;
	if (cmd && py) {
		strata_err_set(err, -EINVAL, "give exactly one of 'cmd' and 'python'");
		return -EINVAL;
	}
	/* Neither: the image's own command (OCI Entrypoint + Cmd), if it has one. */
	if (!cmd && !py && !(a->argv = sbd_image_default_cmd(d, sb->img))) {
		strata_err_set(
		    err, -EINVAL,
		    "give one of 'cmd' and 'python' (the image has no Entrypoint or Cmd)");
		return -EINVAL;
	}
	int r = cmd ? parse_cmd(cmd, &a->argv, err) : 0;
	if (r < 0)
		return r;
	if (py && !(q->python = json_cstr(py))) {
		strata_err_set(err, -EINVAL, "python must be a string without NUL bytes");
		return -EINVAL;
	}
	r = sbd_api_parse_env(json_get(j, "env"), sb->env, &a->env, err);
	if (r < 0)
		return r;
	bool bad = false;
	q->cwd = sbd_api_opt_str(j, "cwd", 4095, &bad) ?: sb->cwd;
	q->user = sbd_api_opt_str(j, "user", 64, &bad) ?: sb->user;
	if (bad || q->cwd[0] != '/') {
		strata_err_set(err, -EINVAL,
			       "cwd must be an absolute path and user a short string");
		return -EINVAL;
	}
	const struct json *in = json_get(j, "stdin");
	if (in && in->type != JSON_NULL) {
		if (in->type != JSON_STR ||
		    b64_decode(in->str, in->len, &a->stdin_buf, &q->stdin_len) < 0) {
			strata_err_set(err, -EINVAL, "stdin must be base64");
			return -EINVAL;
		}
		q->stdin_data = a->stdin_buf;
	}
	r = opt_bool(j, "stdin_stream", &q->stdin_stream, err);
	if (r < 0)
		return r;
	const struct json *t = json_get(j, "timeout");
	q->timeout_ms = d->cfg.default_timeout_ms;
	if (t && t->type != JSON_NULL) {
		if (t->type != JSON_NUM || t->num <= 0 ||
		    t->num * 1000 > (double)d->cfg.max_timeout_ms) {
			strata_err_set(err, -EINVAL, "timeout must be seconds in (0, %lld]",
				       (long long)d->cfg.max_timeout_ms / 1000);
			return -EINVAL;
		}
		q->timeout_ms = (int64_t)(t->num * 1000) ?: 1;
	}
	int64_t oc = d->cfg.default_output_cap;
	struct sbd_api_int f[] = {{"output_cap", &oc, 0, d->cfg.max_output_cap}};
	r = sbd_api_parse_ints(j, f, 1, err);
	q->output_cap = (uint64_t)oc;
	q->argv = a->argv;
	q->env = a->env;
	return r;
}

/* The command line of argv for the list: its words joined by spaces, at
 * most EXEC_CMD_MAX bytes. Caller frees. */
static char *cmd_line(char *const *argv)
{
	size_t n = 0;
	char *s = malloc(EXEC_CMD_MAX + 1);
	if (!s)
		return NULL;
	s[0] = 0;
	for (size_t i = 0; argv && argv[i] && n < EXEC_CMD_MAX; i++)
		n += (size_t)snprintf(s + n, EXEC_CMD_MAX + 1 - n, "%s%s", i ? " " : "", argv[i]);
	return s;
}

/* The next exec id of sb into *ret: past the reserved block, the next block
 * is persisted first. Returns 0 or -errno (nothing given). */
static int exec_id_next(struct sandboxd *d, struct sbd_sandbox *sb, uint64_t *ret)
{
	if (sb->exec_id_last >= sb->exec_ids_reserved) {
		uint64_t old = sb->exec_ids_reserved;
		sb->exec_ids_reserved = sb->exec_id_last + EXEC_ID_BLOCK;
		int r = sbd_registry_persist(d, sb);
		if (r < 0) {
			sb->exec_ids_reserved = old;
			return r;
		}
	}
	*ret = ++sb->exec_id_last;
	return 0;
}

/* An id from before a restart (an adopted exec's): later ones go past it. */
static void exec_id_seen(struct sbd_sandbox *sb, uint64_t xid)
{
	if (sb->exec_id_last < xid)
		sb->exec_id_last = xid;
	if (sb->exec_ids_reserved < xid)
		sb->exec_ids_reserved = xid;
	if (sb->execs_total < xid)
		sb->execs_total = xid;
}

/* A new record for the exec of req (running once the backend took it),
 * numbered xid, or the next id when xid is 0. NULL with *err. */
static struct exec_ctx *exec_new(struct sandboxd *d, struct sbd_conn *c, struct sbd_sandbox *sb,
				 const struct sbd_exec_req *q, bool background, uint64_t xid,
				 int *err)
{
	*err = -ENOMEM;
	struct exec_ctx *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	if (xid) {
		exec_id_seen(sb, xid);
	} else if ((*err = exec_id_next(d, sb, &xid)) < 0) {
		free(x);
		return NULL;
	} else {
		sb->execs_total++;
		d->execs_total++;
	}
	char *pyargv[] = {"python3", "-c", "...", NULL};
	*x = (struct exec_ctx){.c = c,
			       .d = d,
			       .sb = sb,
			       .stdin_stream = q->stdin_stream,
			       .background = background,
			       .reply_wait = background,
			       .started_at = (int64_t)time(NULL),
			       .cmd = cmd_line(q->python ? pyargv : q->argv),
			       .keep_cap = (size_t)q->output_cap * 2 + 4096}; /* base64, framing */
	jw_init(&x->keep);
	x->xid = xid;
	if (!x->cmd) {
		*err = -ENOMEM;
		free(x);
		return NULL;
	}
	x->next = sb->execs;
	sb->execs = x;
	x->on_destroy.fn = exec_sandbox_gone;
	sbd_sandbox_hook_add(sb, &x->on_destroy);
	x->running = true;
	sb->running_execs++;
	sb->last_active_ms = sbd_now_ms();
	return x;
}

static const struct sbd_exec_sink exec_sink = {exec_output, exec_exit,	    exec_congested,
					       NULL,	    exec_stdin_ack, exec_started};

/* The execs an adopted sandbox ran on through a sandboxd restart become
 * background execs here, followed from now on (their held output and
 * exit come first). Once per adopted sandbox: later calls find none. */
static void execs_adopt(struct sandboxd *d, struct sbd_sandbox *sb)
{
	struct sbd_orphan *v = NULL;
	size_t n = 0;
	if (!sb->backend->exec_orphans || sb->backend->exec_orphans(sb->backend, sb, &v, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		char *argv[] = {v[i].cmd, NULL};
		struct sbd_exec_req q = {.argv = argv,
					 .output_cap = (uint64_t)d->cfg.max_output_cap};
		int why; /* its number from before the restart, if it has one */
		struct exec_ctx *x = exec_new(d, NULL, sb, &q, true, v[i].xid, &why);
		if (!x)
			break;
		x->reply_wait = false;
		x->pid = v[i].pid;
		x->started_at = v[i].started_at;
		struct sbd_exec_sink sink = exec_sink;
		struct strata_err err = {0};
		sink.ctx = x;
		if (sb->backend->exec_attach(sb->backend, sb, v[i].id, &sink, &x->handle, &err) < 0)
			exec_drop(x);
	}
	free(v);
}

/* An exec of the image's own command (neither cmd nor python) in a sandbox
 * whose store image's config is not read yet (re-adopted after a restart):
 * the config is read on a worker (images.h) and the request taken up again
 * from the start then, the sandbox found again by its id. */
struct config_wait {
	struct sbd_image_waiter w;
	struct sbd_conn *c; /* NULL once its client left */
	char id[SBD_ID_LEN + 1];
	size_t len;
	char body[]; /* a copy: the connection's buffer moves on */
};

static void config_wait_abort(void *ctx)
{
	((struct config_wait *)ctx)->c = NULL;
}

static void config_ready(struct sbd_image_waiter *w, int r, struct sbd_image *im,
			 const struct strata_err *e)
{
	struct config_wait *cw =
	    (struct config_wait *)((char *)w - offsetof(struct config_wait, w));
	struct sbd_conn *c = cw->c;
	if (c) {
		sbd_conn_set_abort(c, NULL, NULL);
		sbd_conn_hold(c, false);
		struct sbd_sandbox *sb = sbd_registry_find(sbd_conn_daemon(c), cw->id);
		if (r < 0)
			sbd_api_reply_image_error(c, r, "exec", e->msg);
		else if (!sb || !sbd_who_sees(sbd_conn_who(c), sb))
			sbd_conn_reply_error(c, 404, "not_found", "no sandbox '%s'", cw->id);
		else
			sbd_api_exec(c, sb, cw->body, cw->len);
		if (!sbd_conn_held(c)) /* answered, not streaming */
			sbd_conn_hold_done(c);
	}
	free(cw);
}

/* Holds c while the config of sb's image is read, when it must be. True
 * when c was held or answered. */
static bool exec_wait_config(struct sbd_conn *c, struct sbd_sandbox *sb, const char *body,
			     size_t len)
{
	struct strata_err e = {0};
	struct config_wait *cw = malloc(sizeof(*cw) + len);
	if (!cw) {
		sbd_conn_reply_error(c, 500, "internal", "out of memory");
		return true;
	}
	*cw = (struct config_wait){.w = {.fn = config_ready}, .c = c, .len = len};
	snprintf(cw->id, sizeof(cw->id), "%s", sb->id);
	memcpy(cw->body, body, len);
	int r = sbd_images_config(sbd_conn_daemon(c), sb->img, &cw->w, &e);
	if (r == -EINPROGRESS) {
		sbd_conn_hold(c, true);
		sbd_conn_set_abort(c, config_wait_abort, cw);
		return true;
	}
	free(cw);
	if (r < 0)
		sbd_api_reply_image_error(c, r, "exec", e.msg);
	return r < 0;
}

void sbd_api_exec(struct sbd_conn *c, struct sbd_sandbox *sb, const char *body, size_t len)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct strata_err err = {0};
	struct json *j = sbd_api_parse_body(c, body, len, exec_fields);
	if (!j)
		return;
	struct exec_args a = {0};
	bool background = false;
	if (!json_get(j, "cmd") && !json_get(j, "python") && exec_wait_config(c, sb, body, len)) {
		json_free(j);
		return;
	}
	int r = parse_exec(d, sb, j, &a, &err);
	if (r == 0)
		r = opt_bool(j, "background", &background, &err);
	if (r < 0) {
		sbd_api_reply_errno(c, r, "exec", err.msg);
		goto out;
	}
	if (sbd_api_refuse_paused(c, sb))
		goto out;
	struct sbd_caps caps = {0};
	sb->backend->caps(sb->backend, &caps);
	if (a.req.stdin_stream && (!caps.exec_stdin_stream || !sb->backend->exec_stdin)) {
		sbd_conn_reply_error(
		    c, 501, "unsupported",
		    "exec: backend '%s' has no interactive stdin (stdin_stream); give "
		    "stdin up front",
		    sb->backend_name);
		goto out;
	}
	if (background && !sb->backend->exec_signal) {
		sbd_conn_reply_error(c, 501, "unsupported",
				     "exec: backend '%s' has no background execs",
				     sb->backend_name);
		goto out;
	}
	execs_adopt(d, sb);
	struct exec_ctx *x = exec_new(d, c, sb, &a.req, background, 0, &r);
	if (!x) {
		sbd_api_reply_errno(
		    c, r, "exec",
		    r == -ENOMEM ? NULL : "its id could not be reserved in the sandbox's state");
		goto out;
	}
	struct sbd_exec_sink sink = exec_sink;
	sink.ctx = x;
	a.req.xid = x->xid;
	sbd_conn_set_abort(c, exec_abort, x);
	sbd_conn_hold(c, true);
	r = sb->backend->exec(sb->backend, sb, &a.req, &sink, &x->handle, &err);
	if (r < 0) { /* nothing ran: the sink was not called */
		sbd_conn_set_abort(c, NULL, NULL);
		sbd_conn_hold(c, false);
		exec_drop(x);
		if (r == -EAGAIN)
			sbd_conn_reply_error(c, 429, "too_many_execs", "exec: %s",
					     err.msg[0] ? err.msg
							: "too many execs in this sandbox");
		else
			sbd_api_reply_errno(c, r, "exec", err.msg);
	} else if (x->stdin_stream && !x->started && !x->background) {
		emit_start(x); /* the client needs the id for stdin */
	}
out:
	exec_args_done(&a);
	json_free(j);
}

/* POST /v1/sandboxes/{id}/execs/{exec_id}/stdin[?eof=1], the body the raw
 * bytes: one chunk of an interactive exec's stdin, answered once the
 * sandbox took it (at most one in flight per exec). */
static void exec_stdin(struct sbd_conn *c, struct sbd_sandbox *sb, unsigned long long xid,
		       const char *query, const char *body, size_t len)
{
	struct exec_ctx *x = sb->execs;
	while (x && x->xid != xid)
		x = x->next;
	if ((!x || !x->running) && xid >= 1 && xid <= sb->exec_id_last) {
		stdin_reply(c, xid, -ESRCH, -1);
		return;
	}
	if (!x) {
		sbd_conn_reply_error(c, 404, "not_found", "no exec %llu in sandbox %s", xid,
				     sb->id);
		return;
	}
	if (!x->stdin_stream) {
		sbd_conn_reply_error(
		    c, 409, "stdin_closed",
		    "exec %llu was not started with stdin_stream: its stdin is closed", xid);
		return;
	}
	if (len > SBD_STDIN_CHUNK_MAX) {
		sbd_conn_reply_error(c, 413, "too_large",
				     "a stdin chunk is limited to %u bytes (got %zu); split it",
				     SBD_STDIN_CHUNK_MAX, len);
		return;
	}
	if (x->stdin_c) {
		stdin_reply(c, xid, -EBUSY, -1);
		return;
	}
	if (sbd_api_refuse_paused(c, sb))
		return;
	sb->last_active_ms = sbd_now_ms();
	int r = sb->backend->exec_stdin(sb->backend, x->handle, body, len,
					sbd_api_query_bool(query, "eof"));
	if (r != 0) {
		stdin_reply(c, xid, r == 1 ? 0 : r, -1);
	} else {
		x->stdin_c = c;
		sbd_conn_hold(c, true);
		sbd_conn_set_abort(c, stdin_abort, x);
	}
}

/* ---- the routes of .../execs ------------------------------------------------ */

static void exec_json(struct jw *w, const struct exec_ctx *x)
{
	char id[24];
	snprintf(id, sizeof(id), "%llu", (unsigned long long)x->xid);
	jw_obj(w);
	jw_kstr(w, "exec_id", id);
	jw_kstr(w, "cmd", x->cmd);
	jw_key(w, "pid");
	if (x->pid > 0)
		jw_int(w, x->pid);
	else
		jw_null(w);
	jw_kint(w, "started_at", x->started_at);
	jw_kbool(w, "running", x->running);
	jw_kbool(w, "background", x->background);
	jw_kbool(w, "attached", x->c != NULL);
	jw_kint(w, "followers", x->n_followers);
	jw_key(w, "exit_code");
	if (x->running || x->exit.signo)
		jw_null(w);
	else
		jw_int(w, x->exit.exit_code);
	jw_key(w, "signal");
	if (!x->running && x->exit.signo)
		jw_int(w, x->exit.signo);
	else
		jw_null(w);
	jw_obj_end(w);
}

/* GET .../execs: the execs of the sandbox, running or finished and not yet
 * collected, newest first. */
static void execs_list(struct sbd_conn *c, struct sbd_sandbox *sb)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "execs");
	jw_arr(&w);
	for (struct exec_ctx *x = sb->execs; x; x = x->next)
		exec_json(&w, x);
	jw_arr_end(&w);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

/* Attaches c as a follower of x: its start, then its live output. */
static void follow(struct sbd_conn *c, struct exec_ctx *x)
{
	struct exec_follower *f = NULL;
	if (!x->running) {
		sbd_conn_reply_error(c, 409, "exec_finished", "exec %llu has finished",
				     (unsigned long long)x->xid);
		return;
	}
	if (x->n_followers >= EXEC_FOLLOWERS_MAX || !(f = calloc(1, sizeof(*f)))) {
		sbd_conn_reply_error(c, 429, "too_many_attached",
				     "exec %llu already has %u clients attached besides its own "
				     "(at most %d)",
				     (unsigned long long)x->xid, x->n_followers,
				     EXEC_FOLLOWERS_MAX);
		return;
	}
	*f = (struct exec_follower){.c = c, .x = x, .next = x->followers};
	x->followers = f;
	x->n_followers++;
	sbd_conn_hold(c, true);
	sbd_conn_set_abort(c, follower_abort, f);
	start_event(x, c);
}

/* GET .../execs/{n}/stream: attaches c to the exec's events. A background
 * exec without a client takes c as its owner: its start, what was kept
 * while nobody was attached, then on to the exit. Otherwise c follows. */
static void exec_attach(struct sbd_conn *c, struct exec_ctx *x)
{
	if (x->c || !x->background) {
		follow(c, x);
		return;
	}
	x->c = c;
	x->started = false;
	sbd_conn_hold(c, true);
	sbd_conn_set_abort(c, exec_abort, x);
	emit_start(x);
	if (x->keep.len)
		sbd_conn_stream_chunk(c, x->keep.buf, x->keep.len);
	keep_release(x);
	if (x->ended) { /* collected: the record goes */
		emit_exit(c, &x->exit);
		x->c = NULL;
		exec_drop(x);
	}
}

/* A signal by number (1..64) or name ("TERM", "SIGTERM"). */
static int parse_signal(const struct json *v)
{
	static const struct {
		const char *name;
		int sig;
	} names[] = {{"HUP", SIGHUP},	{"INT", SIGINT},   {"QUIT", SIGQUIT},  {"KILL", SIGKILL},
		     {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},  {"CONT", SIGCONT},
		     {"STOP", SIGSTOP}, {"ALRM", SIGALRM}, {"WINCH", SIGWINCH}};
	if (v && v->type == JSON_NUM && v->num >= 1 && v->num <= 64 && v->num == (int)v->num)
		return (int)v->num;
	const char *s = v ? json_cstr(v) : NULL;
	if (s && !strncmp(s, "SIG", 3))
		s += 3;
	for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(s, names[i].name))
			return names[i].sig;
	return -EINVAL;
}

static void reply_ok(struct sbd_conn *c)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kbool(&w, "ok", true);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

/* POST .../execs/{n}/signal {"signal": 15 | "TERM"}: to the exec's process
 * group. DELETE .../execs/{n} is SIGKILL, and forgets a finished one. */
static void exec_signal(struct sbd_conn *c, struct exec_ctx *x, int sig)
{
	if (sig < 0) {
		sbd_conn_reply_error(c, 400, "bad_request",
				     "signal must be a number in 1..64 or a name such as "
				     "\"TERM\"");
		return;
	}
	if (!x->running) {
		sbd_conn_reply_error(c, 409, "exec_finished", "exec %llu has finished",
				     (unsigned long long)x->xid);
		return;
	}
	int r = x->sb->backend->exec_signal(x->sb->backend, x->handle, sig);
	if (r < 0)
		sbd_api_reply_errno(c, r, "signal", NULL);
	else
		reply_ok(c);
}

static void exec_route(struct sbd_conn *c, struct sbd_sandbox *sb, struct exec_ctx *x,
		       const char *method, const char *what, const char *body, size_t len)
{
	static const char *const sig_fields[] = {"signal", NULL};
	if (!strcmp(what, "") && !strcmp(method, "GET")) {
		struct jw w;
		jw_init(&w);
		exec_json(&w, x);
		sbd_conn_reply_json(c, 200, &w);
	} else if (!strcmp(what, "") && !strcmp(method, "DELETE")) {
		if (!x->running) {
			exec_drop(x);
			reply_ok(c);
		} else {
			exec_signal(c, x, SIGKILL);
		}
	} else if (!strcmp(what, "/signal") && !strcmp(method, "POST")) {
		struct json *j = sbd_api_parse_body(c, body, len, sig_fields);
		if (!j)
			return;
		exec_signal(c, x, parse_signal(json_get(j, "signal")));
		json_free(j);
	} else if (!strcmp(what, "/stream") && !strcmp(method, "GET")) {
		exec_attach(c, x);
	} else {
		sbd_conn_reply_error(c, 404, "not_found", "no route %s .../execs/%llu%s", method,
				     (unsigned long long)x->xid, what);
	}
}

void sbd_api_execs(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method, const char *sub,
		   const char *query, const char *body, size_t len)
{
	execs_adopt(sbd_conn_daemon(c), sb);
	if (!*sub && !strcmp(method, "GET")) {
		execs_list(c, sb);
		return;
	}
	char *end;
	unsigned long long xid = strtoull(sub, &end, 10);
	if (end == sub) {
		sbd_conn_reply_error(c, 404, "not_found", "no route %s .../execs/%s", method, sub);
		return;
	}
	if (!strcmp(end, "/stdin") && !strcmp(method, "POST")) {
		exec_stdin(c, sb, xid, query, body, len);
		return;
	}
	struct exec_ctx *x = sb->execs;
	while (x && x->xid != xid)
		x = x->next;
	if (!x) {
		sbd_conn_reply_error(
		    c, 404, "not_found", "no exec %llu in sandbox %s%s", xid, sb->id,
		    xid <= sb->exec_id_last ? " (it ended and was collected)" : "");
		return;
	}
	if (!sb->backend->exec_signal) {
		sbd_conn_reply_error(c, 501, "unsupported", "backend '%s' cannot follow its execs",
				     sb->backend_name);
		return;
	}
	exec_route(c, sb, x, method, end, body, len);
}
