/* backend_container.c — the "container" backend (alias "docker"), on the
 * strata_sandbox library (sandbox/container/strata_sandbox.h): overlay root,
 * namespaces, cgroups, seccomp, strata-agent as pid 1.
 *
 * The library's exec is synchronous (it waits for the command), and
 * sandboxd has one event-loop thread, so every exec runs on a worker thread
 * of pool.h (persistent: no thread start per exec): the thread calls sbx_exec and writes what it gets into a pipe as
 * frames (stream byte, u32 length, data; stream 0 ends with the result);
 * the loop reads the pipe and feeds the exec sink. A blocked pipe throttles
 * the thread, which is the backpressure. File operations are quick agent
 * round trips and run inline, but only when no exec holds the sandbox (the
 * library allows one thread per sandbox at a time): otherwise -EBUSY.
 *
 * Interactive stdin (stdin_stream) adds a writer thread per exec: the loop
 * hands it one chunk at a time, it sends it with sbx_exec_stdin (the one
 * library call allowed beside a running sbx_exec), and the agent's answer
 * comes back through the exec thread's on_stdin as a frame of stream 3
 * (an old agent that does not answer: the writer posts it). Frames reach the
 * pipe under pipe_mu, so the two threads' frames never interleave.
 *
 * Invariants:
 *  1. An exec is freed by whichever of the thread and the loop finishes last
 *     (a reference count of two); the writer is joined by the exec thread
 *     before it posts the result.
 *  2. destroy first kills the agent (which fails any sbx_exec in progress),
 *     then waits for the exec threads to finish with it (ex_wait), then calls
 *     sbx_destroy.
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

#include "sandboxd.h"

#ifndef STRATA_HAVE_CONTAINER

static void ct_caps(struct sbd_backend *b, struct sbd_caps *k)
{
	*k = (struct sbd_caps){0};
	snprintf(k->why, sizeof(k->why), "this sandboxd was built without the container library");
}
static int ct_create(struct sbd_backend *b, struct sbd_sandbox *sb, char *why, size_t cap)
{
	snprintf(why, cap, "this sandboxd was built without the container library");
	return -ENODEV;
}
static int ct_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ENODEV;
}
static int ct_exec(struct sbd_backend *b, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		   const struct sbd_exec_sink *sink, void **ret, char *why, size_t cap)
{
	return ct_create(b, sb, why, cap);
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
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>

#include "pool.h"
#include "strata_sandbox.h"

#define ORPHAN_TIMEOUT_MS (15u * 60 * 1000)

struct ct_backend {
	struct sbd_backend b;
	struct sbx_runtime *rt;
	unsigned ticks;
	char why[256];
};

struct ct_exec;

struct ct_box {
	struct sbx *s;
	char id[SBD_ID_LEN + 1];
	pthread_mutex_t mu; /* held by the exec thread for its sbx_exec */
	struct ct_exec *execs;
	bool paused_ever; /* may have a freezer cgroup / a frozen state to undo */
};

struct ct_exec {
	struct ct_box *box;
	struct sbd_job job; /* sbx_exec on a worker (pool.h) */
	struct sbd_watch w, w_retry; /* w_retry: while the sink is congested */
	int rfd, wfd, retry_fd;
	atomic_int refs;
	atomic_bool cancelled, running, finished;
	pthread_mutex_t pipe_mu; /* one frame at a time into wfd */
	/* interactive stdin: the writer thread and its one chunk in flight */
	bool stdin_stream, stdin_closed, has_writer;
	pthread_t writer;
	pthread_mutex_t in_mu;
	pthread_cond_t in_cond;
	uint32_t exec_id; /* in_mu: the agent's id, once started */
	int in_mode;	  /* in_mu: 0 not started, SBX_STDIN_STARTED(_NOACK) */
	bool in_stop, in_has;
	void *in_data;
	size_t in_len;
	bool in_eof;
	bool detached; /* cancelled: no longer watched by the loop */
	struct sbd_loop *loop;
	struct sbd_exec_sink sink;
	/* the request, copied for the thread */
	char **argv, **env;
	char *cwd, *user;
	void *stdin_data;
	size_t stdin_len;
	uint32_t timeout_ms;
	uint64_t output_cap;
	/* the loop's reassembly of frames */
	char *buf;
	size_t len, cap;
	struct ct_exec *next;
};

static char **dup_strv(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	char **o = calloc(n + 1, sizeof(char *));
	for (size_t i = 0; o && i < n; i++)
		o[i] = strdup(v[i]);
	return o;
}

static void free_strv(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

static void ex_unref(struct ct_exec *x)
{
	if (atomic_fetch_sub(&x->refs, 1) != 1)
		return;
	free_strv(x->argv);
	free_strv(x->env);
	free(x->cwd);
	free(x->user);
	free(x->stdin_data);
	free(x->in_data);
	free(x->buf);
	pthread_mutex_destroy(&x->pipe_mu);
	pthread_mutex_destroy(&x->in_mu);
	pthread_cond_destroy(&x->in_cond);
	free(x);
}

static int write_frame(int fd, int stream, const void *p, size_t n)
{
	uint8_t h[5] = {(uint8_t)stream, (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
			(uint8_t)(n >> 24)};
	struct iovec iov[2] = {{h, 5}, {(void *)p, n}};
	size_t total = 5 + n, done = 0;
	while (done < total) {
		ssize_t k = writev(fd, iov, 2);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		done += (size_t)k;
		for (int i = 0; i < 2; i++) {
			size_t t = (size_t)k < iov[i].iov_len ? (size_t)k : iov[i].iov_len;
			iov[i].iov_base = (char *)iov[i].iov_base + t;
			iov[i].iov_len -= t;
			k -= (ssize_t)t;
		}
	}
	return 0;
}

static int post_frame(struct ct_exec *x, int stream, const void *p, size_t n)
{
	pthread_mutex_lock(&x->pipe_mu);
	int r = write_frame(x->wfd, stream, p, n);
	pthread_mutex_unlock(&x->pipe_mu);
	return r;
}

static int on_output(void *ud, int stream, const void *data, size_t len)
{
	struct ct_exec *x = ud;
	if (atomic_load(&x->cancelled))
		return -ECANCELED;
	const char *p = data;
	while (len) {
		size_t n = len > 65536 ? 65536 : len;
		if (post_frame(x, stream, p, n) < 0)
			return -EPIPE;
		p += n;
		len -= n;
	}
	return 0;
}

/* Stream 3 of the pipe: the answer to one stdin chunk. */
struct stdin_ack {
	int32_t status;
	uint32_t pending;
};

static void post_ack(struct ct_exec *x, int status, uint32_t pending)
{
	struct stdin_ack a = {status, pending};
	post_frame(x, 3, &a, sizeof(a));
}

/* On the exec thread (inside sbx_exec). */
static void on_stdin(void *ud, uint32_t exec_id, int status, uint32_t pending)
{
	struct ct_exec *x = ud;
	if (status == SBX_STDIN_STARTED || status == SBX_STDIN_STARTED_NOACK) {
		pthread_mutex_lock(&x->in_mu);
		x->exec_id = exec_id;
		x->in_mode = status;
		pthread_cond_signal(&x->in_cond);
		pthread_mutex_unlock(&x->in_mu);
		return;
	}
	post_ack(x, status, pending);
}

/* The writer: sends the chunks the loop hands over, one at a time, once
 * the command started; ends when the exec does. */
static void *writer_thread(void *arg)
{
	struct ct_exec *x = arg;
	pthread_mutex_lock(&x->in_mu);
	for (;;) {
		while (!x->in_stop && !(x->in_has && x->in_mode))
			pthread_cond_wait(&x->in_cond, &x->in_mu);
		if (x->in_stop)
			break;
		void *data = x->in_data;
		size_t len = x->in_len;
		bool eof = x->in_eof, ack = x->in_mode == SBX_STDIN_STARTED;
		uint32_t id = x->exec_id;
		x->in_data = NULL;
		x->in_has = false;
		pthread_mutex_unlock(&x->in_mu);
		int r = sbx_exec_stdin(x->box->s, id, data, len, eof, ack);
		free(data);
		if (r < 0 || !ack) /* no answer from the agent will come */
			post_ack(x, r < 0 ? -EPIPE : 0, 0);
		pthread_mutex_lock(&x->in_mu);
	}
	pthread_mutex_unlock(&x->in_mu);
	return NULL;
}

static void writer_stop(struct ct_exec *x)
{
	if (!x->has_writer)
		return;
	pthread_mutex_lock(&x->in_mu);
	x->in_stop = true;
	pthread_cond_signal(&x->in_cond);
	pthread_mutex_unlock(&x->in_mu);
	pthread_join(x->writer, NULL);
	x->has_writer = false;
}

/* finished is set under ex_mu too, for ex_wait. */
static pthread_mutex_t ex_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ex_cond = PTHREAD_COND_INITIALIZER;

/* Waits until x's thread no longer uses the sandbox (it may still hold x:
 * its reference). */
static void ex_wait(struct ct_exec *x)
{
	pthread_mutex_lock(&ex_mu);
	while (!atomic_load(&x->finished))
		pthread_cond_wait(&ex_cond, &ex_mu);
	pthread_mutex_unlock(&ex_mu);
}

static void exec_run(struct sbd_job *job)
{
	struct ct_exec *x = (struct ct_exec *)((char *)job - offsetof(struct ct_exec, job));
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
	    .on_stdin = on_stdin,
	};
	struct sbx_exec_result res = {0};
	pthread_mutex_lock(&x->box->mu);
	atomic_store(&x->running, true);
	int r =
	    atomic_load(&x->cancelled) ? -ECANCELED : sbx_exec(x->box->s, &o, on_output, x, &res);
	atomic_store(&x->running, false);
	writer_stop(x); /* before the sandbox may be reused by the next exec */
	pthread_mutex_unlock(&x->box->mu);
	struct sbd_exit e = {.exit_code = res.exit_code,
			     .signo = res.signo,
			     .timed_out = res.timed_out,
			     .truncated = res.truncated,
			     .stdout_bytes = res.stdout_bytes,
			     .stderr_bytes = res.stderr_bytes,
			     .duration_us = (int64_t)res.duration_us};
	if (r < 0) {
		e.exit_code = r == -ENOENT ? 127 : 126;
		snprintf(e.error, sizeof(e.error), "cannot run '%s': %s", x->argv[0], strerror(-r));
	}
	post_frame(x, 0, &e, sizeof(e));
	close(x->wfd);
	pthread_mutex_lock(&ex_mu);
	atomic_store(&x->finished, true);
	pthread_cond_broadcast(&ex_cond);
	pthread_mutex_unlock(&ex_mu);
	ex_unref(x);
}

static void ex_unlist(struct ct_exec *x)
{
	for (struct ct_exec **p = &x->box->execs; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
}

/* Stops watching the pipe; x is freed once its thread ended too. */
static void ex_detach(struct ct_exec *x)
{
	sbd_watch_del(x->loop, &x->w);
	if (x->rfd >= 0)
		close(x->rfd);
	x->rfd = -1;
	sbd_watch_del(x->loop, &x->w_retry);
	if (x->retry_fd >= 0)
		close(x->retry_fd);
	x->retry_fd = -1;
	x->detached = true;
}

/* Drops cancelled execs whose threads have ended (all of them, waiting, if
 * wait). */
static void ex_reap(struct ct_box *box, bool wait)
{
	struct ct_exec *x = box->execs;
	while (x) {
		struct ct_exec *next = x->next;
		if (x->detached && (wait || atomic_load(&x->finished))) {
			ex_wait(x);
			ex_unlist(x);
			ex_unref(x);
		}
		x = next;
	}
}

/* Kills every process of the sandbox but its agent: how a cancelled exec
 * (whose client went away) is stopped, since the library's synchronous exec
 * cannot be interrupted otherwise. Execs of one sandbox are serialised, so
 * this hits the cancelled command and what it left in the background. */
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

/* Hands complete frames to the sink; returns true once the exec ended. */
static bool ex_frames(struct ct_exec *x)
{
	size_t off = 0;
	bool done = false;
	while (!done && x->len - off >= 5) {
		uint8_t *h = (uint8_t *)x->buf + off;
		size_t n = h[1] | (size_t)h[2] << 8 | (size_t)h[3] << 16 | (size_t)h[4] << 24;
		if (x->len - off < 5 + n)
			break;
		if (h[0] == 0) {
			struct sbd_exit e;
			memcpy(&e, h + 5, sizeof(e));
			struct sbd_exec_sink sink = x->sink;
			ex_detach(x);
			ex_unlist(x);
			ex_unref(x);
			sink.exit(sink.ctx, &e);
			return true;
		}
		if (h[0] == 3 && n == sizeof(struct stdin_ack)) {
			struct stdin_ack a;
			memcpy(&a, h + 5, sizeof(a));
			if (x->sink.stdin_ack)
				x->sink.stdin_ack(x->sink.ctx, a.status, a.pending);
		} else if (h[0] != 3)
			x->sink.output(x->sink.ctx, h[0], h + 5, n);
		off += 5 + n;
	}
	memmove(x->buf, x->buf + off, x->len - off);
	x->len -= off;
	return done;
}

static void ex_io(void *ctx, uint32_t ev);

static void ex_retry_io(void *ctx, uint32_t ev)
{
	struct ct_exec *x = ctx;
	uint64_t n;
	if (read(x->retry_fd, &n, sizeof(n)) < 0 && errno == EAGAIN)
		return;
	sbd_watch_mod(x->loop, &x->w, EPOLLIN);
	ex_io(x, EPOLLIN);
}

/* The client is behind: stop reading the thread's frames (it blocks, and
 * so does the command's output) and look again in 5 ms. */
static bool ex_throttle(struct ct_exec *x)
{
	if (!x->sink.congested || !x->sink.congested(x->sink.ctx))
		return false;
	struct itimerspec its = {.it_value = {0, 5 * 1000000}};
	if (x->retry_fd < 0) {
		x->retry_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (x->retry_fd < 0 ||
		    sbd_watch_add(x->loop, &x->w_retry, x->retry_fd, EPOLLIN, ex_retry_io, x) < 0) {
			if (x->retry_fd >= 0)
				close(x->retry_fd);
			x->retry_fd = -1;
			return false;
		}
	}
	timerfd_settime(x->retry_fd, 0, &its, NULL);
	sbd_watch_mod(x->loop, &x->w, 0);
	return true;
}

static void ex_io(void *ctx, uint32_t ev)
{
	struct ct_exec *x = ctx;
	for (;;) {
		if (ex_throttle(x))
			return;
		if (x->cap - x->len < 65536) {
			char *b = realloc(x->buf, x->cap + 131072);
			if (!b)
				return;
			x->buf = b;
			x->cap += 131072;
		}
		ssize_t n = read(x->rfd, x->buf + x->len, x->cap - x->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		x->len += (size_t)n;
		if (ex_frames(x))
			return;
	}
}

static int ct_exec(struct sbd_backend *b, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		   const struct sbd_exec_sink *sink, void **ret, char *why, size_t cap)
{
	struct ct_box *box = sb->bpriv;
	ex_reap(box, false);
	struct ct_exec *x = calloc(1, sizeof(*x));
	int p[2];
	if (!x)
		return -ENOMEM;
	if (req->stdin_len > (1u << 20)) {
		free(x);
		snprintf(why, cap, "stdin is limited to 1 MiB on the container backend");
		return -EFBIG;
	}
	char *pyargv[] = {"python3", "-c", (char *)req->python, NULL};
	x->argv = dup_strv(req->python ? pyargv : req->argv);
	x->env = dup_strv(req->env);
	x->cwd = strdup(req->cwd);
	x->user = strdup(req->user ? req->user : "");
	x->stdin_data = req->stdin_len ? malloc(req->stdin_len) : NULL;
	if (x->stdin_data)
		memcpy(x->stdin_data, req->stdin_data, req->stdin_len);
	x->stdin_len = req->stdin_len;
	x->timeout_ms = req->timeout_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)req->timeout_ms;
	x->output_cap = req->output_cap ? req->output_cap : 1;
	x->box = box;
	x->loop = b->loop;
	x->sink = *sink;
	x->w.fd = -1;
	x->w_retry.fd = -1;
	x->retry_fd = -1;
	x->stdin_stream = req->stdin_stream;
	pthread_mutex_init(&x->pipe_mu, NULL);
	pthread_mutex_init(&x->in_mu, NULL);
	pthread_cond_init(&x->in_cond, NULL);
	atomic_init(&x->refs, 2);
	if (pipe2(p, O_CLOEXEC) < 0) {
		x->refs = 1;
		ex_unref(x);
		return -errno;
	}
	x->rfd = p[0];
	x->wfd = p[1];
	fcntl(x->rfd, F_SETFL, O_NONBLOCK);
	int r = sbd_watch_add(b->loop, &x->w, x->rfd, EPOLLIN, ex_io, x);
	if (r == 0 && x->stdin_stream) {
		r = -pthread_create(&x->writer, NULL, writer_thread, x);
		x->has_writer = r == 0;
	}
	x->job.fn = exec_run;
	if (r == 0 && (r = sbd_pool_run(&x->job)) < 0)
		writer_stop(x);
	if (r < 0)
		sbd_watch_del(b->loop, &x->w);
	if (r < 0) {
		close(p[0]);
		close(p[1]);
		x->refs = 1;
		ex_unref(x);
		return r;
	}
	x->next = box->execs;
	box->execs = x;
	*ret = x;
	return 0;
}

static int ct_exec_stdin(struct sbd_backend *b, void *h, const void *p, size_t n, bool eof)
{
	struct ct_exec *x = h;
	if (!x->stdin_stream || x->stdin_closed || atomic_load(&x->finished))
		return -EPIPE;
	if (n > SBX_STDIN_MAX_CHUNK)
		return -EFBIG;
	void *copy = malloc(n ? n : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, p, n);
	pthread_mutex_lock(&x->in_mu);
	int r = x->in_has ? -EBUSY : 0;
	if (r == 0) {
		x->in_data = copy;
		x->in_len = n;
		x->in_eof = eof;
		x->in_has = true;
		x->stdin_closed = eof;
		pthread_cond_signal(&x->in_cond);
	}
	pthread_mutex_unlock(&x->in_mu);
	if (r < 0)
		free(copy);
	return r;
}

static void ct_exec_cancel(struct sbd_backend *b, void *h)
{
	struct ct_exec *x = h;
	atomic_store(&x->cancelled, true);
	ex_detach(x); /* its next output fails: EPIPE */
	if (atomic_load(&x->running))
		kill_all_but_agent(x->box); /* one that prints nothing */
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
			       .pause = true,
			       .persistent = true,
			       .network_host = true,
			       .limits_memory = true,
			       .limits_pids = true,
			       .limits_cpu = true,
			       .limits_disk = true};
	snprintf(k->why, sizeof(k->why), "%s", cb->why);
}

static int ct_create(struct sbd_backend *b, struct sbd_sandbox *sb, char *why, size_t cap)
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
		snprintf(why, cap, "container create failed: %s", strerror(-r));
		free(box);
		return r;
	}
	pthread_mutex_init(&box->mu, NULL);
	snprintf(box->id, sizeof(box->id), "%s", sb->id);
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
	pthread_mutex_init(&box->mu, NULL);
	box->paused_ever = true; /* by an earlier sandboxd, perhaps */
	snprintf(box->id, sizeof(box->id), "%s", sb->id);
	sb->bpriv = box;
	return 0;
}

static int ct_file(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *f)
{
	struct ct_box *box = sb->bpriv;
	/* An exec ending (or a cancelled one being killed) lets go soon: wait a
	 * little rather than fail at once. The loop waits at most this long. */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 300 * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	if (pthread_mutex_timedlock(&box->mu, &until) != 0)
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
	pthread_mutex_unlock(&box->mu);
	return r;
}

/* cgroup v1 freezer: the library's cgroups are memory, pids and cpu, so the
 * freezer cgroup is ours: created at the first pause, every process of the
 * sandbox moved into it (children of the agent inherit it from then on),
 * removed at destroy. On v2 the sandbox's own cgroup.freeze is used. */
#define FREEZER_ROOT "/sys/fs/cgroup/freezer/strata-sandboxd"

static int write_str(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = write(fd, v, strlen(v)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

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
		r = write_str(p, line);
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
		return write_str(p, on ? "1" : "0");
	}
	snprintf(dir, sizeof(dir), FREEZER_ROOT "/%s", box->id);
	int r = on ? freezer_join(box, dir) : 0;
	if (r < 0)
		return r;
	snprintf(p, sizeof(p), "%s/freezer.state", dir);
	r = write_str(p, on ? "FROZEN" : "THAWED");
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
	if (box->paused_ever) /* else nothing to thaw or remove: no file access */
		freeze(b->priv, box, false); /* a frozen agent cannot die */
	if (box->execs) {
		kill(sbx_pid(box->s), SIGKILL); /* fails every sbx_exec in progress */
		for (struct ct_exec *x = box->execs; x; x = x->next)
			if (!x->detached)
				ct_exec_cancel(b, x);
		ex_reap(box, true);
	}
	sbx_destroy(box->s);
	if (box->paused_ever)
		freezer_remove(box);
	pthread_mutex_destroy(&box->mu);
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
	if (box->execs) { /* cannot let go while a thread uses it: stop them */
		kill_all_but_agent(box);
		for (struct ct_exec *x = box->execs; x; x = x->next)
			if (!x->detached)
				ct_exec_cancel(b, x);
		ex_reap(box, true);
	}
	sbx_release(box->s);
	pthread_mutex_destroy(&box->mu);
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
	    .pause = ct_pause,
	    .resume = ct_resume,
	    .destroy = ct_destroy,
	    .release = ct_release,
	    .tick = ct_tick,
	    .free = ct_free,
	};
	snprintf(dir, sizeof(dir), "%s/container", state_dir);
	int r = agent_path(agent, sizeof(agent));
	struct sbx_runtime_config rc = {
	    .agent_path = agent,
	    .state_dir = dir,
	    .cgroup_name = "strata-sandbox",
	    .pool_size = 8,
	    .fresh_netns = fresh_netns};
	if (r == 0)
		r = sbx_runtime_new(&rc, &cb->rt);
	if (r < 0)
		snprintf(cb->why, sizeof(cb->why), "container runtime unavailable: %s (agent %s)",
			 strerror(-r), agent);
	else
		freezer_sweep();
	return &cb->b;
}

#endif /* STRATA_HAVE_CONTAINER */
