/* backend_container.c — the "container" backend (alias "docker"), on the
 * strata_sandbox library (sandbox/container/strata_sandbox.h): overlay root,
 * namespaces, cgroups, seccomp, strata-agent as pid 1.
 *
 * Execs run on sandboxd's loop, without a thread: the library's exec ops
 * (sbx_exec_op_*) send the requests on the sandbox's channel, and the loop
 * watches the agent's stream (sbx_agent_fd) and drives the channel
 * (sbx_chan_io), whose callbacks hand output, stdin acknowledgements, the
 * start and the exit to each exec's sink. All execs of a sandbox run at
 * once (at most SBX_MAX_EXECS), and file operations (quick agent round
 * trips, inline) share the channel with them. Interactive stdin
 * (stdin_stream) goes through the op (a chunk given before the command
 * started waits for it). A client that is behind (sink.congested) takes
 * the stream's watch off for 5 ms: the agent's queue fills, it stops
 * reading the commands' pipes, and they block.
 *
 * Invariants:
 *  1. Every exec on box->execs has an op; box->w watches the agent's
 *     stream exactly while the box has execs (and is not throttled).
 *  2. A sink is called by nothing after its exec was cancelled or its exit
 *     handed over (detached); exits are handed over after the channel's
 *     I/O returned, last (box_reap).
 *  3. A cancelled exec (its client left, or the sandbox is deleted) is
 *     killed (SIGKILL to its process group only: what earlier execs left
 *     running stays) and driven on, silently, to its end.
 *  4. The agent must answer within an exec's timeout plus EXEC_GRACE_MS,
 *     checked at every tick, as sbx_exec does (-ETIMEDOUT).
 *
 * Sandboxes are created persistent: when sandboxd stops they run on
 * (release), and the next sandboxd re-attaches by the agent's pid kept in
 * the sandbox's state (adopt). One left without any sandboxd for
 * ORPHAN_TIMEOUT_MS ends by itself. Without the library (no strata_sandbox
 * target) the backend reports itself unavailable. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandboxd/sandboxd.h"

#ifndef STRATA_HAVE_CONTAINER

static void ct_caps(struct sbd_backend *b, struct sbd_caps *k)
{
	*k = (struct sbd_caps){0};
	strata_err_set(&k->why, -ENODEV, "this sandboxd was built without the container library");
}
static int ct_create(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e)
{
	return strata_err_set(e, -ENODEV, "this sandboxd was built without the container library");
}
static int ct_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ENODEV;
}
static int ct_exec(struct sbd_backend *b, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		   const struct sbd_exec_sink *sink, void **ret, struct strata_err *e)
{
	return ct_create(b, sb, e);
}
static void ct_exec_cancel(struct sbd_backend *b, void *h)
{
}
static int ct_file(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *r)
{
	return -ENODEV;
}
static int ct_op(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ENODEV;
}
static int ct_destroy(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return 0;
}
static void ct_free(struct sbd_backend *b)
{
	free(b);
}

struct sbx_runtime *sbd_backend_container_runtime(struct sbd_backend *b)
{
	return NULL;
}

int sbd_agent_box_attach(struct sbd_backend *container, struct sbd_sandbox *sb, struct sbx *s,
			 void *outer)
{
	return -ENODEV;
}

void *sbd_agent_box_outer(const struct sbd_sandbox *sb)
{
	return NULL;
}

void sbd_agent_box_destroy(struct sbd_sandbox *sb)
{
}

void sbd_agent_box_rechannel(struct sbd_sandbox *sb, struct sbx *s)
{
}

struct sbx *sbd_agent_box_sbx(const struct sbd_sandbox *sb)
{
	return NULL;
}

void sbd_agent_box_find_orphans(struct sbd_sandbox *sb)
{
}

void sbd_agent_box_ops(const struct sbd_backend *container, struct sbd_backend *b)
{
}

void sbd_backend_container_userns_probe(struct sbd_backend *b, const char *dir)
{
}

struct sbd_backend *sbd_backend_container_new(struct sbd_loop *loop, const char *state_dir,
					      bool fresh_netns, const struct sbd_disk_opts *disk)
{
	struct sbd_backend *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	*b = (struct sbd_backend){
	    .name = "container",
	    .loop = loop,
	    .caps = ct_caps,
	    .create = ct_create,
	    .adopt = ct_adopt,
	    .exec = ct_exec,
	    .exec_cancel = ct_exec_cancel,
	    .file = ct_file,
	    .pause = ct_op,
	    .resume = ct_op,
	    .destroy = ct_destroy,
	    .free = ct_free,
	};
	return b;
}

#else /* STRATA_HAVE_CONTAINER */

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "fs/cgroup_kill.h"
#include "fs/log.h"
#include "sandbox/container/strata_sandbox.h"
#include "sandbox/sandboxd/usage.h"
#include "sandbox/sandboxd/inroot.h"

#define ORPHAN_TIMEOUT_MS (15u * 60 * 1000)
#define EXEC_GRACE_MS 10000 /* beyond an exec's timeout, as sbx_exec waits */
#define KILL_WAIT_MS 5000   /* for the processes of a sandbox that cannot be adopted */

struct ct_exec;

struct ct_backend {
	struct sbd_backend b;
	struct sbx_runtime *rt;
	struct ct_box *busy;   /* boxes with execs: their deadlines, checked at tick */
	struct strata_err why; /* unavailable: the reason */
	bool userns;	       /* sbd_backend_container_userns_probe's answer */
	char userns_why[200];  /* and when false, why */
};

struct ct_box {
	struct sbx *s;
	struct ct_backend *cb;
	char id[SBD_ID_LEN + 1];
	struct ct_exec *execs;	  /* running: each has an op */
	struct sbd_watch w;	  /* the agent's stream, while execs run */
	struct sbd_watch w_retry; /* a running exec's client is behind */
	int retry_fd;
	bool throttled; /* w is off until the retry timer */
	struct ct_box *busy_next, **busy_prev;
	/* adopted: the execs the agent kept, until exec_orphans took them */
	struct sbx_exec_info *orphans;
	size_t norphans;
	struct stat root; /* the agent's root when it was made or adopted */
	void *outer;	  /* an agent box of another backend: its state */
};

struct ct_exec {
	struct ct_box *box;
	struct sbx_exec_op *op;
	struct sbd_exec_sink sink;
	/* cancelled, or its exit handed over: the sink is not called again */
	bool detached;
	bool done;	   /* the op told its exit: to be freed by box_reap */
	bool exit_pending; /* exit, for the sink once the channel's I/O returned */
	struct sbd_exit exit;
	int64_t deadline_ms; /* the agent must have answered by then (-1: none) */
	/* interactive stdin; a chunk given before the command started waits */
	bool stdin_stream, stdin_closed;
	int stdin_mode; /* 0 until started, SBX_STDIN_STARTED(_NOACK) */
	bool in_has, in_eof;
	void *in_data;
	size_t in_len;
	bool adopted;	  /* followed after a sandboxd restart (ct_exec_attach) */
	char **argv;	  /* for messages */
	char *cwd, *user; /* for messages: which one could not be entered */
	struct ct_exec *next;
};

static char **dup_strv(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	char **o = calloc(n + 1, sizeof(char *));
	for (size_t i = 0; o && i < n; i++)
		if (!(o[i] = strdup(v[i]))) {
			while (i--)
				free(o[i]);
			free(o);
			return NULL;
		}
	return o;
}

static void free_strv(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

static void ex_free(struct ct_exec *x)
{
	sbx_exec_op_free(x->op);
	free_strv(x->argv);
	free(x->cwd);
	free(x->user);
	free(x->in_data);
	free(x);
}

static void ex_unlist(struct ct_exec *x)
{
	struct ct_box *box = x->box;
	for (struct ct_exec **p = &box->execs; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
}

static void busy_add(struct ct_box *box)
{
	if (box->busy_prev)
		return;
	box->busy_next = box->cb->busy;
	if (box->busy_next)
		box->busy_next->busy_prev = &box->busy_next;
	box->busy_prev = &box->cb->busy;
	box->cb->busy = box;
}

static void busy_del(struct ct_box *box)
{
	if (!box->busy_prev)
		return;
	*box->busy_prev = box->busy_next;
	if (box->busy_next)
		box->busy_next->busy_prev = box->busy_prev;
	box->busy_prev = NULL;
	box->busy_next = NULL;
}

/* ---- the op's callbacks (inside sbx_chan_io, on the loop) ------------------- */

static void ex_started(void *ud, int mode)
{
	struct ct_exec *x = ud;
	x->stdin_mode = mode;
	if (!x->detached && x->sink.started)
		x->sink.started(x->sink.ctx, sbx_exec_op_pid(x->op));
	if (!x->in_has || x->detached)
		return;
	int r = sbx_exec_op_stdin(x->op, x->in_data, x->in_len, x->in_eof);
	free(x->in_data);
	x->in_data = NULL;
	x->in_has = false;
	if (r != 0 && !x->detached && x->sink.stdin_ack) /* no answer will come */
		x->sink.stdin_ack(x->sink.ctx, r == 1 ? 0 : -EPIPE, 0);
}

static void ex_output(void *ud, int stream, const void *data, size_t len)
{
	struct ct_exec *x = ud;
	if (!x->detached)
		x->sink.output(x->sink.ctx, stream, data, len);
}

static void ex_stdin_ack(void *ud, int status, uint32_t pending)
{
	struct ct_exec *x = ud;
	if (!x->detached && x->sink.stdin_ack)
		x->sink.stdin_ack(x->sink.ctx, status, pending);
}

struct sbd_exit sbd_exit_of(const struct sbx_exec_result *res)
{
	if (!res)
		return (struct sbd_exit){0};
	return (struct sbd_exit){.exit_code = res->exit_code,
				 .signo = res->signo,
				 .timed_out = res->timed_out,
				 .truncated = res->truncated,
				 .stdout_bytes = res->stdout_bytes,
				 .stderr_bytes = res->stderr_bytes,
				 .duration_us = (int64_t)res->duration_us,
				 .oom_killed = res->oom_killed};
}

/* The cause of a failed start, by step and errno: (error_code, text). */
static const char *start_failure(int err, int step, const char *cwd, const char *user, char *why,
				 size_t cap)
{
	switch (step) {
	case SBX_STEP_USER:
		snprintf(why, cap, "no such user '%s' in the sandbox's /etc/passwd", user ?: "?");
		return "no_such_user";
	case SBX_STEP_CWD:
		snprintf(why, cap, "%s '%s'",
			 err == ENOENT	  ? "no such directory"
			 : err == ENOTDIR ? "not a directory"
					  : strerror(err),
			 cwd ?: "?");
		return err == ENOENT	? "no_such_directory"
		       : err == ENOTDIR ? "not_a_directory"
					: "bad_cwd";
	case SBX_STEP_IDS:
		snprintf(why, cap, "cannot switch to user '%s': %s", user ?: "?", strerror(err));
		return "bad_user";
	case SBX_STEP_EXEC:
		if (err == ENOENT) {
			snprintf(why, cap, "command not found");
			return "command_not_found";
		}
		if (err == EACCES || err == ENOEXEC || err == EISDIR) {
			snprintf(why, cap, "not executable (%s)", strerror(err));
			return "not_executable";
		}
		break;
	}
	snprintf(why, cap, "%s", strerror(err));
	return "exec_failed";
}

void sbd_exit_cannot_start(struct sbd_exit *e, int r, int step, const char *argv0, const char *cwd,
			   const char *user)
{
	char why[sizeof(e->error)];
	const char *code = start_failure(-r, step, cwd, user, why, sizeof(why));
	snprintf(e->error_code, sizeof(e->error_code), "%s", code);
	e->exit_code = !strcmp(code, "command_not_found") ? 127 : 126;
	snprintf(e->error, sizeof(e->error), "cannot run '%.60s': %s", argv0, why);
}

/* The exit of an exec found running at a restart that the agent no longer
 * has when followed: it ran, but its end was not kept for us. */
static void exit_lost(struct sbd_exit *e, int r)
{
	*e = (struct sbd_exit){.exit_code = -1};
	snprintf(e->error_code, sizeof(e->error_code), "lost");
	snprintf(e->error, sizeof(e->error),
		 "result lost: the exec ran through a sandboxd restart and the agent no "
		 "longer had it (%.40s)",
		 strerror(-r));
}

static void ex_exit(void *ud, int r, const struct sbx_exec_result *res)
{
	struct ct_exec *x = ud;
	x->done = true;
	if (x->detached)
		return;
	struct sbd_exit e = sbd_exit_of(res);
	if (r < 0 && x->adopted)
		exit_lost(&e, r);
	else if (r < 0) /* res (when the agent answered) says which step failed */
		sbd_exit_cannot_start(&e, r, res ? (int)res->failed_step : SBX_STEP_UNKNOWN,
				      x->argv[0], x->cwd ? x->cwd : "/",
				      x->user && x->user[0] ? x->user : "root");
	x->exit = e;
	x->exit_pending = true;
	x->detached = true;
}

/* ---- driving the running execs --------------------------------------------- */

static void box_io(void *ctx, uint32_t ev);

/* Watches the agent's stream for what the channel needs, while execs run. */
static int box_watch(struct ct_box *box)
{
	if (!box->execs) {
		sbd_watch_del(box->cb->b.loop, &box->w);
		busy_del(box);
		return 0;
	}
	uint32_t ev = (uint32_t)sbx_chan_events(box->s);
	if (box->throttled)
		return 0; /* the retry timer watches again */
	if (box->w.fd < 0)
		return sbd_watch_add(box->cb->b.loop, &box->w, sbx_agent_fd(box->s), ev, box_io,
				     box);
	return sbd_watch_mod(box->cb->b.loop, &box->w, ev);
}

/* After the channel's I/O: frees the execs that ended, then hands their
 * exits over. Sinks are called last: they may not touch the box, but this
 * stays simple if nothing runs after them. */
static void box_reap(struct ct_box *box)
{
	struct ct_exec *ended = NULL;
	for (struct ct_exec **p = &box->execs; *p;) {
		struct ct_exec *x = *p;
		if (!x->done) {
			p = &x->next;
			continue;
		}
		*p = x->next;
		x->next = ended;
		ended = x;
	}
	box_watch(box);
	while (ended) {
		struct ct_exec *x = ended;
		ended = x->next;
		struct sbd_exec_sink sink = x->sink;
		struct sbd_exit e = x->exit;
		bool fire = x->exit_pending;
		ex_free(x);
		if (fire)
			sink.exit(sink.ctx, &e);
	}
}

static void box_retry(void *ctx, uint32_t ev)
{
	struct ct_box *box = ctx;
	uint64_t n;
	if (read(box->retry_fd, &n, sizeof(n)) < 0 && errno == EAGAIN)
		return;
	box->throttled = false;
	box_watch(box);
}

static bool box_congested(struct ct_box *box)
{
	for (struct ct_exec *x = box->execs; x; x = x->next)
		if (!x->detached && x->sink.congested && x->sink.congested(x->sink.ctx))
			return true;
	return false;
}

/* A client is behind: stop reading the agent's stream (the agent stops
 * reading the commands' pipes past 4 MiB queued, and they block) and look
 * again in 5 ms. The watch is taken off, not muted: a hang-up would still
 * be reported, again and again. */
static bool box_throttle(struct ct_box *box)
{
	if (!box_congested(box))
		return false;
	struct itimerspec its = {.it_value = {0, 5 * 1000000}};
	if (box->retry_fd < 0) {
		box->retry_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (box->retry_fd < 0 ||
		    sbd_watch_add(box->cb->b.loop, &box->w_retry, box->retry_fd, EPOLLIN, box_retry,
				  box) < 0) {
			if (box->retry_fd >= 0)
				close(box->retry_fd);
			box->retry_fd = -1;
			return false;
		}
	}
	timerfd_settime(box->retry_fd, 0, &its, NULL);
	sbd_watch_del(box->cb->b.loop, &box->w);
	box->throttled = true;
	return true;
}

static void box_io(void *ctx, uint32_t ev)
{
	struct ct_box *box = ctx;
	if (!box->execs) {
		sbd_watch_del(box->cb->b.loop, &box->w);
		return;
	}
	if (box_throttle(box))
		return;
	sbx_chan_io(box->s, (short)ev);
	box_reap(box);
}

/* Frees every exec of the box (it is being destroyed or released). */
static void box_drop_execs(struct ct_box *box)
{
	sbd_watch_del(box->cb->b.loop, &box->w);
	while (box->execs) {
		struct ct_exec *x = box->execs;
		ex_unlist(x);
		ex_free(x);
	}
	busy_del(box);
	sbx_exec_infos_free(box->orphans, box->norphans);
	box->orphans = NULL;
	box->norphans = 0;
	sbd_watch_del(box->cb->b.loop, &box->w_retry);
	if (box->retry_fd >= 0)
		close(box->retry_fd);
	box->retry_fd = -1;
	box->throttled = false;
}

static const struct sbx_exec_cbs ex_cbs = {ex_started, ex_output, ex_stdin_ack, ex_exit};

/* Puts x (its op started) on its box. */
static int ex_add(struct ct_exec *x)
{
	x->next = x->box->execs;
	x->box->execs = x;
	int r = box_watch(x->box);
	if (r < 0) {
		ex_unlist(x);
		return r;
	}
	busy_add(x->box);
	return 0;
}

/* Starts the op of x and puts it on its box. */
static int ex_start(struct ct_exec *x, const struct sbd_exec_req *req, struct strata_err *e)
{
	struct sbx_exec_opts o = {
	    .argv = (const char *const *)x->argv,
	    .env = (const char *const *)req->env,
	    .cwd = req->cwd,
	    .user = req->user && req->user[0] ? req->user : NULL,
	    .timeout_ms = req->timeout_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)req->timeout_ms,
	    .output_cap = req->output_cap ? req->output_cap : 1,
	    .stdin_data = req->stdin_data,
	    .stdin_len = req->stdin_len,
	    .stdin_stream = req->stdin_stream,
	    /* its number, found again after a restart (ct_exec_orphans) */
	    .id = req->xid ? SBX_EXEC_ID_CALLER | (uint32_t)(req->xid & ~SBX_EXEC_ID_CALLER) : 0,
	};
	int r = sbx_exec_op_start(x->box->s, &o, &ex_cbs, x, &x->op);
	if (r == -EAGAIN)
		return strata_err_set(e, -EAGAIN,
				      "sandbox %s runs %d execs already (the limit): wait for "
				      "one to end",
				      x->box->id, SBX_MAX_EXECS);
	if (r < 0)
		return r;
	x->deadline_ms = o.timeout_ms ? sbd_now_ms() + o.timeout_ms + EXEC_GRACE_MS : -1;
	return ex_add(x);
}

static int ct_exec(struct sbd_backend *b, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		   const struct sbd_exec_sink *sink, void **ret, struct strata_err *e)
{
	struct ct_box *box = sb->bpriv;
	if (req->stdin_len > (1u << 20))
		return strata_err_set(e, -EFBIG,
				      "stdin is limited to 1 MiB on the container backend");
	struct ct_exec *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	char *pyargv[] = {"python3", "-c", (char *)req->python, NULL};
	x->box = box;
	x->argv = dup_strv(req->python ? pyargv : req->argv);
	x->cwd = strdup(req->cwd ? req->cwd : "/");
	x->user = strdup(req->user ? req->user : "");
	if (!x->argv || !x->argv[0] || !x->cwd || !x->user) {
		ex_free(x);
		return -ENOMEM;
	}
	x->sink = *sink;
	x->stdin_stream = req->stdin_stream;
	int r = ex_start(x, req, e);
	if (r < 0) {
		ex_free(x);
		return r;
	}
	*ret = x;
	return 0;
}

static int ct_exec_stdin(struct sbd_backend *b, void *h, const void *p, size_t n, bool eof)
{
	struct ct_exec *x = h;
	if (!x->stdin_stream || x->stdin_closed || x->detached)
		return -EPIPE;
	if (n > SBX_STDIN_MAX_CHUNK)
		return -EFBIG;
	if (x->stdin_mode) {
		int r = sbx_exec_op_stdin(x->op, p, n, eof);
		if (r >= 0) {
			x->stdin_closed = eof;
			box_watch(x->box); /* what the socket did not take */
		}
		return r;
	}
	if (x->in_has) /* not started yet; the core sends one chunk at a time */
		return -EBUSY;
	x->in_data = malloc(n ? n : 1);
	if (!x->in_data)
		return -ENOMEM;
	memcpy(x->in_data, p, n);
	x->in_len = n;
	x->in_eof = eof;
	x->in_has = true;
	x->stdin_closed = eof;
	return 0;
}

/* Cancelled (its client left): SIGKILL to its process group, nothing
 * else of the sandbox; driven on to its end without a sink. */
static void ct_exec_cancel(struct sbd_backend *b, void *h)
{
	struct ct_exec *x = h;
	x->detached = true;
	x->exit_pending = false;
	sbx_exec_op_kill(x->op);
	box_watch(x->box);
}

static int ct_exec_orphans(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_orphan **ret,
			   size_t *ret_n)
{
	struct ct_box *box = sb->bpriv;
	*ret = NULL;
	*ret_n = 0;
	if (!box->norphans)
		return 0;
	struct sbd_orphan *v = calloc(box->norphans, sizeof(*v));
	if (!v)
		return -ENOMEM;
	int64_t now = (int64_t)time(NULL);
	for (size_t i = 0; i < box->norphans; i++) {
		const struct sbx_exec_info *e = &box->orphans[i];
		v[i] = (struct sbd_orphan){
		    .id = e->id,
		    .xid = e->id & SBX_EXEC_ID_CALLER ? e->id & ~SBX_EXEC_ID_CALLER : 0,
		    .pid = e->pid,
		    .running = e->running,
		    .started_at = now - (int64_t)(e->age_us / 1000000)};
		snprintf(v[i].cmd, sizeof(v[i].cmd), "%s", e->cmd);
	}
	*ret = v;
	*ret_n = box->norphans;
	sbx_exec_infos_free(box->orphans, box->norphans);
	box->orphans = NULL;
	box->norphans = 0;
	return 0;
}

static int ct_exec_attach(struct sbd_backend *b, struct sbd_sandbox *sb, uint32_t id,
			  const struct sbd_exec_sink *sink, void **ret, struct strata_err *e)
{
	struct ct_box *box = sb->bpriv;
	char *argv[] = {"(adopted exec)", NULL};
	struct ct_exec *x = calloc(1, sizeof(*x));
	if (!x || !(x->argv = dup_strv(argv))) {
		free(x);
		return -ENOMEM;
	}
	x->box = box;
	x->sink = *sink;
	x->deadline_ms = -1;
	x->adopted = true;
	int r = sbx_exec_op_attach(box->s, id, &ex_cbs, x, &x->op);
	if (r == 0)
		r = ex_add(x);
	if (r < 0) {
		ex_free(x);
		return strata_err_set(e, r, "cannot follow exec %u: %s", id, strerror(-r));
	}
	*ret = x;
	return 0;
}

static int ct_exec_signal(struct sbd_backend *b, void *h, int sig)
{
	struct ct_exec *x = h;
	int r = sbx_exec_op_signal(x->op, sig);
	box_watch(x->box);
	return r;
}

/* At every tick: an exec whose agent did not answer within its timeout
 * and a grace period fails, as sbx_exec would (-ETIMEDOUT). */
static void ct_deadlines(struct ct_backend *cb)
{
	int64_t now = sbd_now_ms();
	struct ct_box *box = cb->busy;
	while (box) {
		struct ct_box *next = box->busy_next;
		bool late = false;
		for (struct ct_exec *x = box->execs; x; x = x->next)
			if (!x->done && x->deadline_ms >= 0 && now > x->deadline_ms) {
				ex_exit(x, -ETIMEDOUT, NULL);
				late = true;
			}
		if (late)
			box_reap(box);
		box = next;
	}
}

static void ct_caps(struct sbd_backend *b, struct sbd_caps *k)
{
	struct ct_backend *cb = b->priv;
	*k = (struct sbd_caps){.available = cb->rt != NULL,
			       .exec = true,
			       .exec_stream = true,
			       .exec_stdin = true,
			       .exec_stdin_stream = true,
			       .python = true,
			       .files = true,
			       .tar = true,
			       .pause = true,
			       .persistent = true,
			       .network_host = true,
			       .limits_memory = true,
			       .limits_pids = true,
			       .limits_cpu = true,
			       .metrics = true};
	/* A tmpfs layer is memory: disk_mb caps it, but inside the memory
	 * limit, so it is no disk limit. */
	if (cb->rt)
		k->limits_disk = sbx_runtime_disk_quota(cb->rt, &k->disk_reason);
	k->userns = cb->userns;
	k->userns_reason = cb->userns ? NULL : cb->userns_why;
	k->why = cb->why;
}

static void box_init(struct ct_box *box, struct ct_backend *cb)
{
	box->cb = cb;
	box->w.fd = -1;
	box->w_retry.fd = -1;
	box->retry_fd = -1;
}

/* The identity of the agent's root, for file_root to tell it from the root
 * of a process that got the agent's pid after the agent died (an adopted
 * agent is not our child: nobody holds its pid for us). */
static void box_remember_root(struct ct_box *box)
{
	int fd = sbd_inroot_open_root(sbx_pid(box->s), NULL, &box->root);
	if (fd >= 0)
		close(fd);
}

static int ct_file_root(struct sbd_backend *b, struct sbd_sandbox *sb, int *ret_fd)
{
	struct ct_box *box = sb->bpriv;
	if (!box->root.st_ino)
		return -ESRCH;
	int fd = sbd_inroot_open_root(sbx_pid(box->s), &box->root, NULL);
	if (fd < 0)
		return fd;
	*ret_fd = fd;
	return 0;
}

static pid_t ct_net_pid(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	return box && box->s && !sb->net_host ? sbx_pid(box->s) : 0;
}

static uint32_t ct_id_base(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	return box && box->s ? sbx_uid_base(box->s) : 0;
}

/* Whether sb gets a user namespace: asked for, or by default where its
 * image's filesystem allows one (sbx_runtime_userns_check). */
static int want_userns(struct ct_backend *cb, struct sbd_sandbox *sb, struct strata_err *e)
{
	char why[200];
	sb->userns = false;
	if (sb->userns_req == 0 || !cb->rt)
		return 0;
	int r = sbx_runtime_userns_check(cb->rt, sb->rootfs, why, sizeof(why));
	if (r == 0)
		sb->userns = true;
	else if (sb->userns_req == 1)
		return strata_err_set(e, -EOPNOTSUPP, "no user namespace for image '%s': %s",
				      sb->image, why);
	return 0;
}

static int ct_create(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e)
{
	struct ct_backend *cb = b->priv;
	int r = want_userns(cb, sb, e);
	if (r < 0)
		return r;
	struct ct_box *box = calloc(1, sizeof(*box));
	if (!box)
		return -ENOMEM;
	struct sbx_config c = {.rootfs = sb->rootfs,
			       .hostname = "sandbox",
			       .memory_bytes = (uint64_t)sb->memory_mb << 20,
			       .cpu_millis = (uint32_t)(sb->cpu * 1000),
			       .pids_max = (uint32_t)sb->pids,
			       .disk_bytes = (uint64_t)sb->disk_mb << 20,
			       .network = sb->net_host ? SBX_NET_HOST : SBX_NET_NONE,
			       .persist = true,
			       .userns = sb->userns,
			       .orphan_timeout_ms = ORPHAN_TIMEOUT_MS};
	r = sbx_create(cb->rt, &c, &box->s);
	if (r == -EINVAL && sb->userns && sb->userns_req < 0) {
		/* The image refused the idmapped mount after all (a mount below
		 * its root that cannot take one): the default makes it without. */
		sb->userns = c.userns = false;
		r = sbx_create(cb->rt, &c, &box->s);
	}
	if (r < 0) {
		strata_err_set(e, r, "container create failed: %s", strerror(-r));
		free(box);
		return r;
	}
	box_init(box, cb);
	snprintf(box->id, sizeof(box->id), "%s", sb->id);
	box_remember_root(box);
	sb->bpriv = box;
	free(sb->bstate); /* what adopt needs: persisted with the sandbox */
	sb->bstate = NULL;
	const char *cg = sbx_cgroup_name(box->s);
	struct sbx_agent_id id;
	/* Who the agent is, so that the next sandboxd adopts nothing else */
	if (sbx_agent_id(box->s, &id) == 0 &&
	    asprintf(&sb->bstate,
		     "{\"agent_pid\":%d,\"agent_start\":%" PRIu64 ",\"agent_pidns\":%" PRIu64
		     ",\"cgroup\":\"%s\"}",
		     (int)id.pid, id.start_time, id.pidns_ino, cg ? cg : "") < 0)
		sb->bstate = NULL;
	return 0;
}

/* A sandbox that cannot be adopted is killed, frozen or not, when its agent
 * is still in the cgroup slot recorded at its create: with its state gone,
 * nothing could ever reach it again (a frozen one would never end, another
 * would run until its orphan timeout). A pid in any other cgroup is not
 * this sandbox's agent any more, and is left alone. */
static void kill_unadoptable(pid_t pid, const char *slot, const char *id)
{
	struct cgk_target t;
	if (!slot || !slot[0] || cgk_target_of_pid(pid, slot, false, &t) < 0)
		return;
	int r = cgk_kill(&t, KILL_WAIT_MS);
	if (r < 0)
		log_warn_errno(r, "Sandbox %s (agent %d) could not be killed", id, (int)pid);
	else
		log_info("sandbox %s (agent %d) killed: %d processes", id, (int)pid, r);
}

/* A sandbox whose agent could not be verified at adoption (sbx_adopt
 * -EPERM, or a channel that failed): kept, failed with the reason, never
 * served; a box without an agent (exec and files are refused for a failed
 * sandbox; delete removes it). The reason goes into its state, so that the
 * next sandboxd keeps it failed instead of trying again. */
static int adopt_refused(struct ct_backend *cb, struct sbd_sandbox *sb, const char *why)
{
	struct ct_box *box = calloc(1, sizeof(*box));
	char *st = NULL;
	if (!box || sbx_attach_agent(-1, 0, &box->s) < 0) {
		free(box);
		return -ENOMEM;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "refused", why);
	jw_obj_end(&w);
	st = jw_take(&w, NULL);
	if (st) {
		free(sb->bstate);
		sb->bstate = st;
	}
	box_init(box, cb);
	snprintf(box->id, sizeof(box->id), "%s", sb->id);
	sb->bpriv = box;
	free(sb->failed_reason);
	sb->failed_reason = strdup(why);
	sb->state = SBD_FAILED;
	log_warn("Sandbox %s not re-adopted: %s", sb->id, why);
	return 0;
}

static int ct_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_backend *cb = b->priv;
	if (!cb->rt || !sb->bstate)
		return -ENODEV;
	struct json *j = json_parse(sb->bstate, strlen(sb->bstate), NULL, 0);
	int64_t pid = 0, start = 0, pidns = 0;
	bool ok = json_int(json_get(j, "agent_pid"), 1, INT32_MAX, &pid);
	/* A record of before the agent's identity was kept: unverifiable */
	bool known = json_int(json_get(j, "agent_start"), 0, INT64_MAX, &start) &&
		     json_int(json_get(j, "agent_pidns"), 0, INT64_MAX, &pidns);
	char slot[64], why[256] = "";
	snprintf(slot, sizeof(slot), "%s", json_cstr(json_get(j, "cgroup")) ?: "");
	snprintf(why, sizeof(why), "%s", json_cstr(json_get(j, "refused")) ?: "");
	json_free(j);
	if (why[0]) /* refused by an earlier sandboxd */
		return adopt_refused(cb, sb, why);
	if (!ok)
		return -EINVAL;
	if (!known)
		return adopt_refused(cb, sb,
				     "its record has no agent identity (made by an older "
				     "sandboxd): cannot verify who answers");
	struct ct_box *box = calloc(1, sizeof(*box));
	if (!box)
		return -ENOMEM;
	struct sbx_agent_id id = {
	    .pid = (pid_t)pid, .start_time = (uint64_t)start, .pidns_ino = (uint64_t)pidns};
	/* A paused sandbox is adopted paused (the library finds it so): its
	 * frozen agent is connected to at resume. */
	int r = sbx_adopt(cb->rt, &id, &box->s);
	if (r < 0) {
		free(box);
		/* Whatever the pid is now, what is in the recorded slot is
		 * this sandbox's (kill_unadoptable looks there only). */
		if (r != -ESRCH)
			kill_unadoptable((pid_t)pid, slot, sb->id);
		if (r == -ESRCH || r == -ESTALE)
			return r; /* gone, or not this runtime's: its state goes */
		snprintf(why, sizeof(why), "agent %d could not be verified at re-adoption: %s",
			 (int)pid,
			 r == -EPERM ? "the process or its channel is not the recorded agent"
				     : strerror(-r));
		return adopt_refused(cb, sb, why);
	}
	box_init(box, cb);
	box_remember_root(box);
	bool paused = sbx_paused(box->s);
	if (paused != (sb->state == SBD_PAUSED)) /* a sandboxd that died between the two */
		log_warn("Sandbox %s was recorded %s but is %s: now %s", sb->id,
			 sbd_state_name(sb->state), paused ? "frozen" : "not frozen",
			 paused ? "paused" : "running");
	sb->state = paused ? SBD_PAUSED : SBD_RUNNING;
	/* what ran on meanwhile (an agent older than 1.2 cannot tell) */
	if (!paused && sbx_execs_list(box->s, &box->orphans, &box->norphans) < 0)
		box->norphans = 0; /* a paused one: at its resume */
	snprintf(box->id, sizeof(box->id), "%s", sb->id);
	sb->bpriv = box;
	return 0;
}

static int ct_file_op(struct ct_box *box, struct sbd_file_req *f);

static int ct_file(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *f)
{
	struct ct_box *box = sb->bpriv;
	int r = ct_file_op(box, f);
	box_reap(box); /* execs that ended while the file request waited */
	return r;
}

/* One file request: a round trip on the sandbox's channel, which drives
 * the execs in flight meanwhile (their callbacks run inside). */
static int ct_file_op(struct ct_box *box, struct sbd_file_req *f)
{
	int r = 0;
	switch (f->op) {
	case SBD_F_READ: {
		uint64_t size = 0, off = 0;
		do {
			void *d = NULL;
			size_t n = 0;
			r = sbx_file_read(box->s, f->path, off, 1u << 20, &d, &n, &size);
			if (r == 0 && size > f->max)
				r = -EFBIG;
			if (r == 0) {
				uint8_t *o = realloc(f->out_data, f->out_len + n + 1);
				if (o) {
					memcpy(o + f->out_len, d, n);
					f->out_data = o;
					f->out_len += n;
				} else
					r = -ENOMEM;
			}
			free(d);
			off += n;
			if (n == 0)
				break;
		} while (r == 0 && off < size);
		break;
	}
	case SBD_F_WRITE:
		r = f->append ? -EOPNOTSUPP
		    : f->len > (1u << 20)
			? -EFBIG
			: sbx_file_write(box->s, f->path, f->data, f->len, f->mode);
		break;
	case SBD_F_STAT: {
		struct sbx_stat st;
		r = sbx_file_stat(box->s, f->path, &st);
		if (r == 0)
			f->st = (struct sbd_stat){.type = st.type <= 3 ? (enum sbd_ftype)st.type
								       : SBD_FT_OTHER,
						  .mode = st.mode,
						  .size = st.size,
						  .mtime_s = st.mtime_ns / 1000000000};
		break;
	}
	case SBD_F_LIST: {
		struct sbx_dirent *d = NULL;
		size_t n = 0;
		r = sbx_file_list(box->s, f->path, &d, &n);
		if (r == 0 && !(f->entries = calloc(n + 1, sizeof(*f->entries))))
			r = -ENOMEM;
		for (size_t i = 0; r == 0 && i < n; i++) {
			struct sbd_stat *e = &f->entries[i];
			snprintf(e->name, sizeof(e->name), "%s", d[i].name);
			e->type = d[i].st.type <= 3 ? (enum sbd_ftype)d[i].st.type : SBD_FT_OTHER;
			e->mode = d[i].st.mode;
			e->size = d[i].st.size;
			e->mtime_s = d[i].st.mtime_ns / 1000000000;
		}
		if (r == 0)
			f->nentries = n;
		if (d)
			sbx_dirents_free(d, n);
		break;
	}
	case SBD_F_MKDIR:
		r = sbx_file_mkdir(box->s, f->path, f->mode, f->parents);
		break;
	case SBD_F_REMOVE:
		r = sbx_file_remove(box->s, f->path, f->recursive);
		break;
	}
	return r;
}

static int ct_usage(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_usage *ret)
{
	struct ct_box *box = sb->bpriv;
	if (!box)
		return -ENOENT;
	/* sbx_cgroup_path formats into one buffer of the sandbox: copy the first */
	char mem[PATH_MAX];
	const char *m = sbx_cgroup_path(box->s, "memory");
	if (!m || snprintf(mem, sizeof(mem), "%s", m) >= (int)sizeof(mem))
		return -ENOENT;
	int r = sbd_usage_read(mem, sbx_cgroup_path(box->s, "pids"), sbx_pid(box->s), ret);
	/* The layer's own count (its project quota on disk), where it has one */
	uint64_t bytes, inodes;
	if (r == 0 && sbx_disk_usage(box->s, &bytes, &inodes) == 0)
		ret->disk_bytes = (int64_t)bytes;
	return r;
}

static void ct_tick(struct sbd_backend *b)
{
	ct_deadlines(b->priv);
}

/* The library freezes it whole or not at all; the core polls (pause_poll)
 * until it is frozen or its deadline passed. */
static int ct_pause(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	return sbx_pause_start(box->s);
}

static int ct_pause_poll(struct sbd_backend *b, struct sbd_sandbox *sb, bool give_up)
{
	struct ct_box *box = sb->bpriv;
	return sbx_pause_poll(box->s, give_up);
}

static int ct_resume(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	bool connected = sbx_agent_fd(box->s) >= 0; /* else adopted paused */
	int r = sbx_resume(box->s);
	/* what ran on before the pause, held by the agent since */
	if (r == 0 && !connected && sbx_execs_list(box->s, &box->orphans, &box->norphans) < 0)
		box->norphans = 0;
	return r;
}

static int ct_destroy(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	if (!box)
		return 0;
	box_drop_execs(box); /* cancelled by the core already */
	sbx_destroy(box->s); /* a paused one is killed, then thawed */
	free(box);
	sb->bpriv = NULL;
	return 0;
}

/* sandboxd is stopping: the sandbox runs on (it is persistent) and the next
 * sandboxd adopts it by its agent's pid. Execs in flight run on too; this
 * sandboxd stops following them. */
static void ct_release(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	if (!box)
		return;
	box_drop_execs(box);
	sbx_release(box->s);
	free(box);
	sb->bpriv = NULL;
}

/* ---- agent boxes of other backends (backend.h) ----------------------------- */

int sbd_agent_box_attach(struct sbd_backend *container, struct sbd_sandbox *sb, struct sbx *s,
			 void *outer)
{
	struct ct_box *box = calloc(1, sizeof(*box));
	if (!box)
		return -ENOMEM;
	box_init(box, container->priv);
	box->s = s;
	box->outer = outer;
	snprintf(box->id, sizeof(box->id), "%s", sb->id);
	sb->bpriv = box;
	return 0;
}

void *sbd_agent_box_outer(const struct sbd_sandbox *sb)
{
	const struct ct_box *box = sb->bpriv;
	return box ? box->outer : NULL;
}

void sbd_agent_box_destroy(struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	if (!box)
		return;
	box_drop_execs(box);
	sbx_destroy(box->s);
	free(box);
	sb->bpriv = NULL;
}

void sbd_agent_box_rechannel(struct sbd_sandbox *sb, struct sbx *s)
{
	struct ct_box *box = sb->bpriv;
	box_drop_execs(box);
	sbx_destroy(box->s);
	box->s = s;
}

void sbd_agent_box_ops(const struct sbd_backend *container, struct sbd_backend *b)
{
	b->exec = container->exec;
	b->exec_stdin = container->exec_stdin;
	b->exec_cancel = container->exec_cancel;
	b->exec_signal = container->exec_signal;
	b->file = container->file;
	b->tar_out = sbd_agent_tar_out;
	b->tar_in = sbd_agent_tar_in;
	b->exec_orphans = container->exec_orphans;
	b->exec_attach = container->exec_attach;
}

void sbd_agent_box_find_orphans(struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	sbx_exec_infos_free(box->orphans, box->norphans);
	box->orphans = NULL;
	if (sbx_execs_list(box->s, &box->orphans, &box->norphans) < 0)
		box->norphans = 0;
}

struct sbx *sbd_agent_box_sbx(const struct sbd_sandbox *sb)
{
	const struct ct_box *box = sb->bpriv;
	return box ? box->s : NULL;
}

static void ct_free(struct sbd_backend *b)
{
	struct ct_backend *cb = b->priv;
	sbx_runtime_free(cb->rt); /* its sandboxes were released first */
	free(cb);
}

struct sbx_runtime *sbd_backend_container_runtime(struct sbd_backend *b)
{
	return ((struct ct_backend *)b->priv)->rt;
}

void sbd_backend_container_userns_probe(struct sbd_backend *b, const char *dir)
{
	struct ct_backend *cb = b->priv;
	cb->userns = cb->rt && sbx_runtime_userns_check(cb->rt, dir, cb->userns_why,
							sizeof(cb->userns_why)) == 0;
	if (!cb->rt)
		snprintf(cb->userns_why, sizeof(cb->userns_why), "%s", cb->why.msg);
}

/* Sandboxds before the library paused sandboxes froze them in freezer
 * cgroups of their own, <v1 freezer>/strata-sandboxd/sb-<id>: those left
 * empty are removed (a paused sandbox of theirs is adopted in its own: the
 * library finds it there). */
#define LEGACY_FREEZER_ROOT "/sys/fs/cgroup/freezer/strata-sandboxd"
static void legacy_freezer_sweep(void)
{
	DIR *dp = opendir(LEGACY_FREEZER_ROOT);
	struct dirent *de;
	while (dp && (de = readdir(dp)))
		if (!strncmp(de->d_name, "sb-", 3))
			unlinkat(dirfd(dp), de->d_name, AT_REMOVEDIR);
	if (dp) {
		closedir(dp);
		rmdir(LEGACY_FREEZER_ROOT); /* fails while one is in use */
	}
}

static int agent_path(char *buf, size_t cap)
{
	const char *env = getenv("STRATA_AGENT");
	if (env && env[0]) {
		snprintf(buf, cap, "%s", env);
		return 0;
	}
	ssize_t n = readlink("/proc/self/exe", buf, cap - 32);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	char *slash = strrchr(buf, '/');
	strcpy(slash ? slash + 1 : buf, "strata-agent");
	return 0;
}

struct sbd_backend *sbd_backend_container_new(struct sbd_loop *loop, const char *state_dir,
					      bool fresh_netns, const struct sbd_disk_opts *disk)
{
	struct ct_backend *cb = calloc(1, sizeof(*cb));
	char agent[PATH_MAX], dir[PATH_MAX];
	if (!cb)
		return NULL;
	cb->b = (struct sbd_backend){
	    .name = "container",
	    .loop = loop,
	    .priv = cb,
	    .create_threaded = true, /* sbx_create: a thread-safe runtime, sb only */
	    .caps = ct_caps,
	    .create = ct_create,
	    .adopt = ct_adopt,
	    .exec = ct_exec,
	    .exec_stdin = ct_exec_stdin,
	    .exec_cancel = ct_exec_cancel,
	    .exec_signal = ct_exec_signal,
	    .exec_orphans = ct_exec_orphans,
	    .exec_attach = ct_exec_attach,
	    .file = ct_file,
	    .file_root = ct_file_root,
	    .id_base = ct_id_base,
	    .net_pid = ct_net_pid,
	    .pause = ct_pause,
	    .pause_poll = ct_pause_poll,
	    .resume = ct_resume,
	    .destroy = ct_destroy,
	    .release = ct_release,
	    .usage = ct_usage,
	    .tick = ct_tick,
	    .free = ct_free,
	};
	snprintf(dir, sizeof(dir), "%s/container", state_dir);
	int r = agent_path(agent, sizeof(agent));
	struct sbx_runtime_config rc = {.agent_path = agent,
					.state_dir = dir,
					.cgroup_name = "strata-sandbox",
					.pool_size = 8,
					.fresh_netns = fresh_netns,
					.disk_mode = disk ? disk->mode : 0,
					.disk_dir = disk ? disk->dir : NULL,
					.disk_image = disk ? disk->image : NULL};
	if (r == 0)
		r = sbx_runtime_new(&rc, &cb->rt);
	if (r < 0)
		strata_err_set(&cb->why, -ENODEV, "container runtime unavailable: %s (agent %s)",
			       strerror(-r), agent);
	else
		legacy_freezer_sweep();
	return &cb->b;
}

#endif /* STRATA_HAVE_CONTAINER */
