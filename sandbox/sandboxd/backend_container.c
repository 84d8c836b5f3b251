/* backend_container.c — the "container" backend (alias "docker"), on the
 * strata_sandbox library (sandbox/container/strata_sandbox.h): overlay root,
 * namespaces, cgroups, seccomp, strata-agent as pid 1.
 *
 * Execs run on sandboxd's loop, without a thread: the library's exec op
 * (sbx_exec_op_*) sends the request, and the loop watches the agent's
 * stream (sbx_agent_fd) and feeds the op, whose callbacks hand output,
 * stdin acknowledgements and the exit to the exec sink. Interactive stdin
 * (stdin_stream) goes through the same op (a chunk given before the command
 * started waits for it). A client that is behind (sink.congested) takes the
 * stream's watch off for 5 ms: the agent's queue fills, it stops reading
 * the command's pipes, and the command blocks. The library serves one
 * request at a time per sandbox, so execs of one sandbox run one after the
 * other (a FIFO per sandbox, the head running) and file operations (quick
 * agent round trips, inline) answer -EBUSY while an exec runs.
 *
 * Invariants:
 *  1. Only the head of box->execs has an op; box->w watches the agent's
 *     stream exactly while the head has one (and the box is not throttled).
 *  2. A sink is called by nothing after its exec was cancelled or its exit
 *     handed over (detached); exit is handed over after the op's I/O
 *     returned, last.
 *  3. A cancelled exec (its client left, or the sandbox is deleted) is
 *     killed (SIGKILL to its process group, and every process of the
 *     sandbox but the agent) and driven on, silently, to its end: the next
 *     request must start on a frame boundary of the stream.
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

#include "sandbox/sandboxd/kfile.h"
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

struct sbd_backend *sbd_backend_container_new(struct sbd_loop *loop, const char *state_dir,
					      bool fresh_netns)
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
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/container/strata_sandbox.h"
#include "sandbox/sandboxd/inroot.h"

#define ORPHAN_TIMEOUT_MS (15u * 60 * 1000)
#define EXEC_GRACE_MS 10000 /* beyond an exec's timeout, as sbx_exec waits */

struct ct_exec;

struct ct_backend {
	struct sbd_backend b;
	struct sbx_runtime *rt;
	unsigned ticks;
	struct ct_box *busy;   /* boxes with execs: their deadlines, checked at tick */
	struct strata_err why; /* unavailable: the reason */
};

struct ct_box {
	struct sbx *s;
	struct ct_backend *cb;
	char id[SBD_ID_LEN + 1];
	/* FIFO of execs: the head runs (has an op), the rest wait for it */
	struct ct_exec *execs, **tail;
	struct sbd_watch w;	  /* the agent's stream, while an exec runs */
	struct sbd_watch w_retry; /* the running exec's client is behind */
	int retry_fd;
	bool throttled; /* w is off until the retry timer */
	struct ct_box *busy_next, **busy_prev;
	bool paused_ever; /* may have a freezer cgroup / a frozen state to undo */
	struct stat root; /* the agent's root when it was made or adopted */
};

struct ct_exec {
	struct ct_box *box;
	struct sbx_exec_op *op; /* NULL while waiting for the exec before it */
	struct sbd_exec_sink sink;
	/* cancelled, or its exit handed over: the sink is not called again */
	bool detached;
	bool exit_pending; /* exit, for the sink once the op's I/O returned */
	struct sbd_exit exit;
	int64_t deadline_ms; /* the agent must have answered by then (-1: none) */
	/* interactive stdin; a chunk given before the command started waits */
	bool stdin_stream, stdin_closed;
	int stdin_mode; /* 0 until started, SBX_STDIN_STARTED(_NOACK) */
	bool in_has, in_eof;
	void *in_data;
	size_t in_len;
	/* the request, kept until the op starts (argv for messages) */
	char **argv, **env;
	char *cwd, *user;
	void *stdin_data;
	size_t stdin_len;
	uint32_t timeout_ms;
	uint64_t output_cap;
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
	free_strv(x->env);
	free(x->cwd);
	free(x->user);
	free(x->stdin_data);
	free(x->in_data);
	free(x);
}

static void ex_unlist(struct ct_exec *x)
{
	struct ct_box *box = x->box;
	for (struct ct_exec **p = &box->execs; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			if (box->tail == &x->next)
				box->tail = p;
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

/* ---- the op's callbacks (inside sbx_exec_op_io, on the loop) --------------- */

static void ex_started(void *ud, int mode)
{
	struct ct_exec *x = ud;
	x->stdin_mode = mode;
	if (!x->in_has)
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
				 .duration_us = (int64_t)res->duration_us};
}

static void ex_exit(void *ud, int r, const struct sbx_exec_result *res)
{
	struct ct_exec *x = ud;
	if (x->detached)
		return;
	struct sbd_exit e = sbd_exit_of(res);
	if (r < 0) {
		e.exit_code = r == -ENOENT ? 127 : 126;
		snprintf(e.error, sizeof(e.error), "cannot run '%s': %s", x->argv[0], strerror(-r));
	}
	x->exit = e;
	x->exit_pending = true;
	x->detached = true;
}

/* ---- driving the running exec ---------------------------------------------- */

static void box_io(void *ctx, uint32_t ev);

/* Watches the agent's stream for what the running op needs. */
static int box_watch(struct ct_box *box)
{
	struct ct_exec *x = box->execs;
	uint32_t ev = x && x->op ? (uint32_t)sbx_exec_op_events(x->op) : 0;
	if (box->throttled)
		return 0; /* the retry timer watches again */
	if (box->w.fd < 0)
		return sbd_watch_add(box->cb->b.loop, &box->w, sbx_agent_fd(box->s), ev, box_io,
				     box);
	return sbd_watch_mod(box->cb->b.loop, &box->w, ev);
}

/* Starts the op of x, the head of its box. */
static int ex_start(struct ct_exec *x)
{
	struct sbx_exec_opts o = {
	    .argv = (const char *const *)x->argv,
	    .env = (const char *const *)x->env,
	    .cwd = x->cwd,
	    .user = x->user && x->user[0] ? x->user : NULL,
	    .timeout_ms = x->timeout_ms,
	    .output_cap = x->output_cap,
	    .stdin_data = x->stdin_data,
	    .stdin_len = x->stdin_len,
	    .stdin_stream = x->stdin_stream,
	};
	static const struct sbx_exec_cbs cbs = {ex_started, ex_output, ex_stdin_ack, ex_exit};
	int r = sbx_exec_op_start(x->box->s, &o, &cbs, x, &x->op);
	if (r < 0)
		return r;
	free(x->stdin_data); /* encoded into the op */
	x->stdin_data = NULL;
	x->deadline_ms = x->timeout_ms ? sbd_now_ms() + x->timeout_ms + EXEC_GRACE_MS : -1;
	r = box_watch(x->box);
	if (r < 0) {
		sbx_exec_op_free(x->op);
		x->op = NULL;
		return r;
	}
	busy_add(x->box);
	return 0;
}

/* The head ended (or was given up): frees it and starts the next exec.
 * Sinks are called last: they may not touch the box, but this stays
 * simple if nothing runs after them. */
static void box_next(struct ct_box *box)
{
	struct ct_exec *x = box->execs;
	if (x) {
		ex_unlist(x);
		ex_free(x);
	}
	while ((x = box->execs) && !x->op) {
		int r = ex_start(x);
		if (r == 0)
			return;
		ex_unlist(x);
		if (!x->detached) {
			struct sbd_exit e = {.exit_code = 126};
			snprintf(e.error, sizeof(e.error), "cannot run '%s': %s", x->argv[0],
				 strerror(-r));
			x->sink.exit(x->sink.ctx, &e);
		}
		ex_free(x);
	}
	if (!box->execs) {
		sbd_watch_del(box->cb->b.loop, &box->w);
		busy_del(box);
	}
}

/* After the op's I/O: hands the exit over, moves on when the op is done. */
static void box_after(struct ct_box *box, struct ct_exec *x, bool done)
{
	struct sbd_exec_sink sink = x->sink;
	struct sbd_exit e = x->exit;
	bool fire = x->exit_pending;
	x->exit_pending = false;
	if (done)
		box_next(box);
	else
		box_watch(box);
	if (fire)
		sink.exit(sink.ctx, &e);
}

static void box_retry(void *ctx, uint32_t ev)
{
	struct ct_box *box = ctx;
	uint64_t n;
	if (read(box->retry_fd, &n, sizeof(n)) < 0 && errno == EAGAIN)
		return;
	box->throttled = false;
	if (box->execs && box->execs->op)
		box_watch(box);
}

/* The client is behind: stop reading the agent's stream (the agent stops
 * reading the command's pipes past 4 MiB queued, and the command blocks)
 * and look again in 5 ms. The watch is taken off, not muted: a hang-up
 * would still be reported, again and again. */
static bool box_throttle(struct ct_box *box, struct ct_exec *x)
{
	if (x->detached || !x->sink.congested || !x->sink.congested(x->sink.ctx))
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
	struct ct_exec *x = box->execs;
	if (!x || !x->op) {
		sbd_watch_del(box->cb->b.loop, &box->w);
		return;
	}
	if (box_throttle(box, x))
		return;
	box_after(box, x, sbx_exec_op_io(x->op, (short)ev) == 1);
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
	sbd_watch_del(box->cb->b.loop, &box->w_retry);
	if (box->retry_fd >= 0)
		close(box->retry_fd);
	box->retry_fd = -1;
	box->throttled = false;
}

/* Kills every process of the sandbox but its agent: how a cancelled exec
 * (whose client went away) and what it left in the background are stopped.
 * Execs of one sandbox are serialised, so this hits only the cancelled one. */
static void kill_all_but_agent(struct ct_box *box)
{
	char p[PATH_MAX];
	const char *cg = sbx_cgroup_path(box->s, "pids");
	if (!cg)
		return;
	snprintf(p, sizeof(p), "%s/cgroup.procs", cg);
	FILE *f = fopen(p, "re");
	long pid;
	pid_t agent = sbx_pid(box->s);
	while (f && fscanf(f, "%ld", &pid) == 1)
		if ((pid_t)pid != agent)
			kill((pid_t)pid, SIGKILL);
	if (f)
		fclose(f);
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
	x->env = dup_strv(req->env);
	x->cwd = strdup(req->cwd);
	x->user = strdup(req->user ? req->user : "");
	x->stdin_data = req->stdin_len ? malloc(req->stdin_len) : NULL;
	if (!x->argv || !x->argv[0] || !x->env || !x->cwd || !x->user ||
	    (req->stdin_len && !x->stdin_data)) {
		ex_free(x);
		return -ENOMEM;
	}
	if (x->stdin_data)
		memcpy(x->stdin_data, req->stdin_data, req->stdin_len);
	x->stdin_len = req->stdin_len;
	x->timeout_ms = req->timeout_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)req->timeout_ms;
	x->output_cap = req->output_cap ? req->output_cap : 1;
	x->sink = *sink;
	x->stdin_stream = req->stdin_stream;
	*box->tail = x; /* the head, or waiting for the execs before it */
	box->tail = &x->next;
	if (box->execs == x) {
		int r = ex_start(x);
		if (r < 0) {
			ex_unlist(x);
			ex_free(x);
			return r;
		}
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
	if (x->op && x->stdin_mode) {
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

static void ct_exec_cancel(struct sbd_backend *b, void *h)
{
	struct ct_exec *x = h;
	struct ct_box *box = x->box;
	x->detached = true;
	x->exit_pending = false;
	if (!x->op) { /* still waiting: it never ran */
		ex_unlist(x);
		ex_free(x);
		return;
	}
	/* the running one: killed, driven on to its end without a sink */
	sbx_exec_op_kill(x->op);
	kill_all_but_agent(box); /* and what it left in the background */
	box_watch(box);
}

/* At every tick: an exec whose agent did not answer within its timeout
 * and a grace period fails, as sbx_exec would (-ETIMEDOUT). */
static void ct_deadlines(struct ct_backend *cb)
{
	int64_t now = sbd_now_ms();
	struct ct_box *box = cb->busy;
	while (box) {
		struct ct_box *next = box->busy_next;
		struct ct_exec *x = box->execs;
		if (x && x->op && x->deadline_ms >= 0 && now > x->deadline_ms) {
			ex_exit(x, -ETIMEDOUT, NULL);
			box_after(box, x, true);
		}
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
			       .limits_disk = true};
	k->why = cb->why;
}

static void box_init(struct ct_box *box, struct ct_backend *cb)
{
	box->cb = cb;
	box->tail = &box->execs;
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

static int ct_create(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e)
{
	struct ct_backend *cb = b->priv;
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
			       .orphan_timeout_ms = ORPHAN_TIMEOUT_MS};
	int r = sbx_create(cb->rt, &c, &box->s);
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
	if (asprintf(&sb->bstate, "{\"agent_pid\":%d}", (int)sbx_pid(box->s)) < 0)
		sb->bstate = NULL;
	return 0;
}

static int ct_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_backend *cb = b->priv;
	if (!cb->rt || !sb->bstate)
		return -ENODEV;
	struct json *j = json_parse(sb->bstate, strlen(sb->bstate), NULL, 0);
	int64_t pid = 0;
	bool ok = json_int(json_get(j, "agent_pid"), 1, INT32_MAX, &pid);
	json_free(j);
	if (!ok)
		return -EINVAL;
	struct ct_box *box = calloc(1, sizeof(*box));
	if (!box)
		return -ENOMEM;
	int r = sbx_adopt(cb->rt, (pid_t)pid, &box->s);
	if (r < 0) {
		free(box);
		return r;
	}
	box_init(box, cb);
	box_remember_root(box);
	box->paused_ever = true; /* by an earlier sandboxd, perhaps */
	snprintf(box->id, sizeof(box->id), "%s", sb->id);
	sb->bpriv = box;
	return 0;
}

/* A cancelled exec, or one whose exit went out, ends soon: drive it to its
 * end here (at most 300 ms of the loop) rather than fail at once. Returns
 * true when no exec is left. */
static bool box_settle(struct ct_box *box)
{
	int64_t until = sbd_now_ms() + 300;
	struct ct_exec *x;
	while ((x = box->execs) && x->detached && x->op) {
		int left = (int)(until - sbd_now_ms());
		if (left <= 0)
			break;
		struct pollfd pfd = {.fd = sbx_agent_fd(box->s),
				     .events = sbx_exec_op_events(x->op)};
		int k = pfd.events ? poll(&pfd, 1, left) : 1;
		if (k < 0 && errno != EINTR)
			break;
		if (k > 0)
			box_after(box, x, sbx_exec_op_io(x->op, pfd.revents) == 1);
	}
	return !box->execs;
}

static int ct_file(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *f)
{
	struct ct_box *box = sb->bpriv;
	/* the library serves one request at a time per sandbox */
	if (box->execs && !box_settle(box))
		return -EBUSY;
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

/* cgroup v1 freezer: the library's cgroups are memory, pids and cpu, so the
 * freezer cgroup is ours: created at the first pause, every process of the
 * sandbox moved into it (children of the agent inherit it from then on),
 * removed at destroy. On v2 the sandbox's own cgroup.freeze is used. */
#define FREEZER_ROOT "/sys/fs/cgroup/freezer/strata-sandboxd"

static int freezer_join(struct ct_box *box, const char *dir)
{
	char p[PATH_MAX], line[32];
	const char *src = sbx_cgroup_path(box->s, "pids");
	if (!src)
		return -EOPNOTSUPP;
	if ((mkdir(FREEZER_ROOT, 0755) < 0 && errno != EEXIST) ||
	    (mkdir(dir, 0755) < 0 && errno != EEXIST))
		return errno == ENOENT ? -EOPNOTSUPP : -errno;
	snprintf(p, sizeof(p), "%s/cgroup.procs", src);
	FILE *f = fopen(p, "re");
	if (!f)
		return -errno;
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	int r = 0;
	while (r == 0 && fgets(line, sizeof(line), f))
		r = sbd_kfile_write(p, line);
	fclose(f);
	return r;
}

static int freeze(struct ct_backend *cb, struct ct_box *box, bool on)
{
	char p[PATH_MAX], dir[PATH_MAX];
	if (sbx_runtime_cgroup_version(cb->rt) == 2) {
		const char *cg = sbx_cgroup_path(box->s, "cpu");
		if (!cg)
			return -EOPNOTSUPP;
		snprintf(p, sizeof(p), "%s/cgroup.freeze", cg);
		return sbd_kfile_write(p, on ? "1" : "0");
	}
	snprintf(dir, sizeof(dir), FREEZER_ROOT "/%s", box->id);
	int r = on ? freezer_join(box, dir) : 0;
	if (r < 0)
		return r;
	snprintf(p, sizeof(p), "%s/freezer.state", dir);
	r = sbd_kfile_write(p, on ? "FROZEN" : "THAWED");
	return r == -ENOENT && !on ? 0 : r;
}

static void freezer_remove(struct ct_box *box)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), FREEZER_ROOT "/%s", box->id);
	rmdir(dir); /* EBUSY while the killed processes linger: ct_tick retries */
}

/* Removes the freezer cgroups that have no process left (the kernel refuses
 * to remove the others, so live sandboxes keep theirs). */
static void freezer_sweep(void)
{
	DIR *dp = opendir(FREEZER_ROOT);
	struct dirent *de;
	while (dp && (de = readdir(dp)))
		if (!strncmp(de->d_name, "sb-", 3))
			unlinkat(dirfd(dp), de->d_name, AT_REMOVEDIR);
	if (dp)
		closedir(dp);
}

static void ct_tick(struct sbd_backend *b)
{
	struct ct_backend *cb = b->priv;
	ct_deadlines(cb);
	if (++cb->ticks % 10 == 0)
		freezer_sweep();
}

static int ct_pause(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	box->paused_ever = true;
	return freeze(b->priv, box, true);
}

static int ct_resume(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return freeze(b->priv, sb->bpriv, false);
}

static int ct_destroy(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	if (!box)
		return 0;
	/* else nothing to thaw or remove: no file access */
	if (box->paused_ever)
		freeze(b->priv, box, false); /* a frozen agent cannot die */
	box_drop_execs(box);		     /* cancelled by the core already */
	sbx_destroy(box->s);
	if (box->paused_ever)
		freezer_remove(box);
	free(box);
	sb->bpriv = NULL;
	return 0;
}

/* sandboxd is stopping: the sandbox runs on (it is persistent) and the next
 * sandboxd adopts it by its agent's pid. Execs in flight are dropped. */
static void ct_release(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct ct_box *box = sb->bpriv;
	if (!box)
		return;
	if (box->execs) /* its commands are stopped, their output dropped */
		kill_all_but_agent(box);
	box_drop_execs(box);
	sbx_release(box->s);
	free(box);
	sb->bpriv = NULL;
}

static void ct_free(struct sbd_backend *b)
{
	struct ct_backend *cb = b->priv;
	sbx_runtime_free(cb->rt); /* its sandboxes were released first */
	if (cb->rt) {
		freezer_sweep();
		rmdir(FREEZER_ROOT); /* kept while a paused sandbox lives on */
	}
	free(cb);
}

struct sbx_runtime *sbd_backend_container_runtime(struct sbd_backend *b)
{
	return ((struct ct_backend *)b->priv)->rt;
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
					      bool fresh_netns)
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
	    .file = ct_file,
	    .file_root = ct_file_root,
	    .pause = ct_pause,
	    .resume = ct_resume,
	    .destroy = ct_destroy,
	    .release = ct_release,
	    .tick = ct_tick,
	    .free = ct_free,
	};
	snprintf(dir, sizeof(dir), "%s/container", state_dir);
	int r = agent_path(agent, sizeof(agent));
	struct sbx_runtime_config rc = {.agent_path = agent,
					.state_dir = dir,
					.cgroup_name = "strata-sandbox",
					.pool_size = 8,
					.fresh_netns = fresh_netns};
	if (r == 0)
		r = sbx_runtime_new(&rc, &cb->rt);
	if (r < 0)
		strata_err_set(&cb->why, -ENODEV, "container runtime unavailable: %s (agent %s)",
			       strerror(-r), agent);
	else
		freezer_sweep();
	return &cb->b;
}

#endif /* STRATA_HAVE_CONTAINER */
