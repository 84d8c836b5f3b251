/* api_exec.c — POST /v1/sandboxes/{id}/exec and its interactive stdin:
 * the exec request's validation, the stream of newline-delimited JSON
 * events (output, then the exit) in a chunked response, back-pressure on a
 * slow client, and POST .../execs/{n}/stdin. An exec in flight registers an
 * on-destroy hook on its sandbox (sandboxd.h), so that a sandbox that goes
 * away ends its streams with an exit event. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandboxd/api-internal.h"
#include "sandbox/sandboxd/http.h"

#define SBD_STDIN_CHUNK_MAX (1u << 20) /* one POST .../stdin body */

struct exec_ctx {
	struct sbd_conn *c;
	struct sandboxd *d;
	struct sbd_sandbox *sb;
	void *handle;
	bool started;			    /* the chunked response began */
	bool stdin_stream;		    /* interactive stdin: POST .../execs/{xid}/stdin */
	uint64_t xid;			    /* the exec's number in its sandbox (sb->execs_total) */
	int64_t pid;			    /* in the sandbox, once started (0: unknown) */
	struct sbd_conn *stdin_c;	    /* a stdin request waiting for its acknowledgement */
	struct exec_ctx *next;		    /* in sb->execs */
	struct sbd_destroy_hook on_destroy; /* on sb: ends the stream */
};

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

static void exec_unlink(struct exec_ctx *x)
{
	if (!x->sb)
		return;
	for (struct exec_ctx **p = (struct exec_ctx **)&x->sb->execs; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
	sbd_sandbox_hook_del(x->sb, &x->on_destroy);
	x->sb->running_execs--;
	x->sb->last_active_ms = sbd_now_ms();
	x->sb = NULL;
	stdin_answer(x, -ESRCH, 0);
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

/* The "start" event: the exec's number (for .../execs/{n}/...) and pid. */
static void emit_start(struct exec_ctx *x)
{
	char ev[128];
	int n = snprintf(ev, sizeof(ev), "{\"type\":\"start\",\"exec_id\":\"%llu\"",
			 (unsigned long long)x->xid);
	if (x->pid > 0)
		n += snprintf(ev + n, sizeof(ev) - (size_t)n, ",\"pid\":%lld", (long long)x->pid);
	n += snprintf(ev + n, sizeof(ev) - (size_t)n, "}\n");
	sbd_conn_stream_chunk(x->c, ev, (size_t)n);
}

/* The command started: the stream's head goes out now, with its start
 * event, so that a client has its handle before any output (a silent
 * server too). An interactive exec sent its start event already. */
static void exec_started(void *ctx, int64_t pid)
{
	struct exec_ctx *x = ctx;
	x->pid = pid;
	if (x->started)
		return;
	exec_start_stream(x);
	emit_start(x);
}

static void exec_output(void *ctx, int stream, const void *p, size_t n)
{
	struct exec_ctx *x = ctx;
	exec_start_stream(x);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "type", stream == 2 ? "stderr" : "stdout");
	jw_key(&w, "data");
	jw_b64(&w, p, n);
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	if (!w.err)
		sbd_conn_stream_chunk(x->c, w.buf, w.len);
	jw_done(&w);
}

/* A client that does not read its stream holds its exec back (bounded
 * memory here, a blocked pipe for the command) instead of growing our
 * buffer up to the output cap. */
#define EXEC_BACKLOG (1u << 20)

static bool exec_congested(void *ctx)
{
	struct exec_ctx *x = ctx;
	return sbd_conn_pending(x->c) > EXEC_BACKLOG;
}

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
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	sbd_conn_stream_end_with(c, w.buf, w.err ? 0 : w.len);
	jw_done(&w);
}

static void exec_exit(void *ctx, const struct sbd_exit *e)
{
	struct exec_ctx *x = ctx;
	exec_unlink(x);
	exec_start_stream(x);
	emit_exit(x->c, e);
	free(x);
}

/* The client went away mid-stream: kill the command. */
static void exec_abort(void *ctx)
{
	struct exec_ctx *x = ctx;
	if (x->sb)
		x->sb->backend->exec_cancel(x->sb->backend, x->handle);
	exec_unlink(x);
	free(x);
}

/* The sandbox goes away (on_destroy): kill the command and end the stream
 * with an exit event that says why. */
static void exec_sandbox_gone(struct sbd_destroy_hook *h, struct sbd_sandbox *sb, const char *why)
{
	struct exec_ctx *x = (struct exec_ctx *)((char *)h - offsetof(struct exec_ctx, on_destroy));
	sb->backend->exec_cancel(sb->backend, x->handle);
	exec_unlink(x);
	sbd_conn_set_abort(x->c, NULL, NULL);
	exec_start_stream(x);
	struct sbd_exit e = {.exit_code = -1, .signo = 9};
	snprintf(e.error, sizeof(e.error), "sandbox exited: %s", why);
	emit_exit(x->c, &e);
	free(x);
}

static const char *const exec_fields[] = {"cmd",   "python",	   "env",     "cwd",	    "user",
					  "stdin", "stdin_stream", "timeout", "output_cap", NULL};

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
	const struct json *ss = json_get(j, "stdin_stream");
	if (ss && ss->type != JSON_NULL) {
		if (ss->type != JSON_BOOL) {
			strata_err_set(err, -EINVAL, "stdin_stream must be a boolean");
			return -EINVAL;
		}
		q->stdin_stream = ss->b;
	}
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

void sbd_api_exec(struct sbd_conn *c, struct sbd_sandbox *sb, const char *body, size_t len)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct strata_err err = {0};
	struct json *j = sbd_api_parse_body(c, body, len, exec_fields);
	if (!j)
		return;
	struct exec_args a = {0};
	int r = parse_exec(d, sb, j, &a, &err);
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
	struct exec_ctx *x = calloc(1, sizeof(*x));
	if (!x) {
		sbd_conn_reply_error(c, 500, "internal", "out of memory");
		goto out;
	}
	*x = (struct exec_ctx){.c = c, .d = d, .sb = sb, .stdin_stream = a.req.stdin_stream};
	struct sbd_exec_sink sink = {exec_output, exec_exit,	  exec_congested,
				     x,		  exec_stdin_ack, exec_started};
	x->next = sb->execs;
	sb->execs = x;
	x->on_destroy.fn = exec_sandbox_gone;
	sbd_sandbox_hook_add(sb, &x->on_destroy);
	sb->running_execs++;
	x->xid = ++sb->execs_total;
	d->execs_total++;
	sb->last_active_ms = sbd_now_ms();
	sbd_conn_set_abort(c, exec_abort, x);
	sbd_conn_hold(c, true);
	r = sb->backend->exec(sb->backend, sb, &a.req, &sink, &x->handle, &err);
	if (r < 0) { /* nothing ran: the sink was not called */
		sbd_conn_set_abort(c, NULL, NULL);
		sbd_conn_hold(c, false);
		exec_unlink(x);
		free(x);
		if (r == -EAGAIN)
			sbd_conn_reply_error(c, 429, "too_many_execs", "exec: %s",
					     err.msg[0] ? err.msg
							: "too many execs in this sandbox");
		else
			sbd_api_reply_errno(c, r, "exec", err.msg);
	} else if (x->stdin_stream && !x->started) { /* the client needs the id for stdin */
		exec_start_stream(x);
		emit_start(x);
	}
out:
	exec_args_done(&a);
	json_free(j);
}

/* POST /v1/sandboxes/{id}/execs/{exec_id}/stdin[?eof=1], the body the raw
 * bytes: one chunk of an interactive exec's stdin, answered once the
 * sandbox took it (at most one in flight per exec). */
void sbd_api_exec_stdin(struct sbd_conn *c, struct sbd_sandbox *sb, const char *sub,
			const char *query, const char *body, size_t len)
{
	char *end;
	unsigned long long xid = strtoull(sub, &end, 10);
	if (end == sub || strcmp(end, "/stdin") != 0) {
		sbd_conn_reply_error(c, 404, "not_found", "no route .../execs/%s", sub);
		return;
	}
	struct exec_ctx *x = sb->execs;
	while (x && x->xid != xid)
		x = x->next;
	if (!x && xid >= 1 && xid <= sb->execs_total) {
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
