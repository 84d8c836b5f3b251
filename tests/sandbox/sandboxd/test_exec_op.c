/* test_exec_op.c — the library's non-blocking exec (sbx_exec_op_*), as
 * sandboxd's loop drives it, against strata-agent as a plain child on a
 * socketpair (no namespaces, no root): output and exit, interactive stdin
 * with acknowledgements, a large up-front stdin while the command floods
 * its output back (no deadlock), kill, a command that cannot start, the
 * stream still aligned for the next request (exec, file stat), a dead
 * agent; many ops at once on the sandbox's channel with a file request
 * among them, and the limit of ops in flight; and the blocking sbx_exec
 * (built on the op) fed by sbx_exec_stdin from another thread. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/sandbox/spawn_agent.h"
#include "sandbox/container/strata_sandbox.h"
#include "tests/testutil.h"

static pid_t agent_pid;

/* ---- an op driven by a poll loop, as sandboxd's epoll loop does ------------ */

struct run {
	struct sbx_exec_op *op;
	char *out;
	size_t out_len, out_cap;
	int mode, acks, ack_status, r;
	uint32_t pending;
	bool exited;
	struct sbx_exec_result res;
};

static void c_started(void *ud, int mode)
{
	((struct run *)ud)->mode = mode;
}

static void c_output(void *ud, int stream, const void *d, size_t n)
{
	struct run *x = ud;
	if (x->out_len + n + 1 > x->out_cap) {
		x->out_cap = (x->out_len + n + 1) * 2;
		x->out = realloc(x->out, x->out_cap);
	}
	memcpy(x->out + x->out_len, d, n);
	x->out_len += n;
	x->out[x->out_len] = 0;
}

static void c_ack(void *ud, int status, uint32_t pending)
{
	struct run *x = ud;
	x->acks++;
	x->ack_status = status;
	x->pending = pending;
}

static void c_exit(void *ud, int r, const struct sbx_exec_result *res)
{
	struct run *x = ud;
	EXPECT(!x->exited); /* once */
	x->exited = true;
	x->r = r;
	if (res)
		x->res = *res;
}

static const struct sbx_exec_cbs cbs = {c_started, c_output, c_ack, c_exit};

/* Drives x until until() holds or the op is done; returns 1 when done. */
static int drive(struct sbx *s, struct run *x, bool (*until)(struct run *))
{
	for (int spins = 0; spins < 100000; spins++) {
		if (until && until(x))
			return 0;
		struct pollfd p = {.fd = sbx_agent_fd(s), .events = sbx_exec_op_events(x->op)};
		if (p.events && poll(&p, 1, 10000) <= 0) {
			EXPECT(!"the agent answered");
			return -1;
		}
		if (sbx_exec_op_io(x->op, p.revents) == 1)
			return 1;
	}
	return -1;
}

static bool started(struct run *x)
{
	return x->mode != 0;
}

static int acks_wanted;
static bool acked(struct run *x)
{
	return x->acks >= acks_wanted;
}

static int run_op(struct sbx *s, struct sbx_exec_opts *o, struct run *x)
{
	memset(x, 0, sizeof(*x));
	int r = sbx_exec_op_start(s, o, &cbs, x, &x->op);
	if (r < 0)
		return r;
	r = drive(s, x, NULL);
	sbx_exec_op_free(x->op);
	x->op = NULL;
	return r == 1 ? 0 : -EIO;
}

static void test_ops(struct sbx *s)
{
	struct run x;
	const char *echo[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
	struct sbx_exec_opts o = {.argv = echo};
	EXPECT(run_op(s, &o, &x) == 0);
	EXPECT(x.exited && x.r == 0 && x.res.exit_code == 3);
	EXPECT(x.out && strstr(x.out, "out\n") && strstr(x.out, "err\n"));
	free(x.out);

	const char *nope[] = {"/no/such/binary", NULL};
	o = (struct sbx_exec_opts){.argv = nope};
	EXPECT(run_op(s, &o, &x) == 0);
	EXPECT(x.exited && x.r == -ENOENT);

	/* 1 MiB up front to cat, whose 1 MiB comes back meanwhile */
	size_t n = 1u << 20;
	char *big = malloc(n);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)('a' + i % 23);
	const char *cat[] = {"cat", NULL};
	o = (struct sbx_exec_opts){
	    .argv = cat, .stdin_data = big, .stdin_len = n, .output_cap = 4u << 20};
	EXPECT(run_op(s, &o, &x) == 0);
	EXPECT(x.r == 0 && x.res.exit_code == 0 && x.out_len == n);
	EXPECT(x.out && memcmp(x.out, big, n) == 0);
	free(x.out);

	/* interactive: chunks after the start, acknowledged; then eof */
	o = (struct sbx_exec_opts){.argv = cat, .stdin_stream = true};
	memset(&x, 0, sizeof(x));
	EXPECT(sbx_exec_op_start(s, &o, &cbs, &x, &x.op) == 0);
	EXPECT(sbx_exec_op_stdin(x.op, "x", 1, false) == -EPIPE); /* not started yet */
	EXPECT(drive(s, &x, started) == 0 && x.mode == SBX_STDIN_STARTED);
	EXPECT(sbx_exec_op_stdin(x.op, "hello ", 6, false) == 0);
	acks_wanted = 1;
	EXPECT(drive(s, &x, acked) == 0 && x.ack_status == 0);
	EXPECT(sbx_exec_op_stdin(x.op, big, n, false) == 0); /* 1 MiB more */
	acks_wanted = 2;
	EXPECT(drive(s, &x, acked) == 0 && x.ack_status == 0);
	EXPECT(sbx_exec_op_stdin(x.op, "world", 5, true) == 0);
	EXPECT(sbx_exec_op_stdin(x.op, "late", 4, false) == -EPIPE); /* after eof */
	EXPECT(drive(s, &x, NULL) == 1);
	EXPECT(x.exited && x.r == 0 && x.res.exit_code == 0);
	EXPECT(x.out_len == 6 + n + 5 && x.out && !memcmp(x.out, "hello ", 6) &&
	       !memcmp(x.out + 6, big, n) && !memcmp(x.out + 6 + n, "world", 5));
	sbx_exec_op_free(x.op);
	free(x.out);
	free(big);

	/* kill */
	const char *slp[] = {"sleep", "30", NULL};
	o = (struct sbx_exec_opts){.argv = slp};
	memset(&x, 0, sizeof(x));
	EXPECT(sbx_exec_op_start(s, &o, &cbs, &x, &x.op) == 0);
	sbx_exec_op_kill(x.op); /* sent after the request, before its answer */
	EXPECT(drive(s, &x, NULL) == 1);
	EXPECT(x.exited && x.r == 0 && x.res.signo == SIGKILL);
	sbx_exec_op_free(x.op);

	/* the stream is aligned for the next requests */
	struct sbx_stat st;
	EXPECT(sbx_file_stat(s, "/", &st) == 0 && st.type == 2);
	const char *t[] = {"true", NULL};
	o = (struct sbx_exec_opts){.argv = t};
	EXPECT(run_op(s, &o, &x) == 0 && x.r == 0 && x.res.exit_code == 0);
}

/* ---- the blocking exec fed from another thread ----------------------------- */

struct feeder {
	struct sbx *s;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	uint32_t id;
	int mode, acks, bad;
	pthread_t t;
};

static void on_stdin(void *ud, uint32_t id, int status, uint32_t pending)
{
	struct feeder *f = ud;
	pthread_mutex_lock(&f->mu);
	if (status == SBX_STDIN_STARTED || status == SBX_STDIN_STARTED_NOACK) {
		f->id = id;
		f->mode = status;
	} else {
		f->acks++;
		f->bad += status != 0;
	}
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->mu);
}

static void *feed(void *arg)
{
	struct feeder *f = arg;
	static char chunk[256 * 1024];
	memset(chunk, 'z', sizeof(chunk));
	pthread_mutex_lock(&f->mu);
	while (!f->mode)
		pthread_cond_wait(&f->cond, &f->mu);
	for (int i = 0; i < 8; i++) {
		pthread_mutex_unlock(&f->mu);
		EXPECT(sbx_exec_stdin(f->s, f->id, chunk, sizeof(chunk), i == 7, true) == 0);
		pthread_mutex_lock(&f->mu);
		while (f->acks < i + 1)
			pthread_cond_wait(&f->cond, &f->mu);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

static size_t got;
static int count(void *ud, int stream, const void *d, size_t n)
{
	got += n;
	return 0;
}

static void test_blocking_interactive(struct sbx *s)
{
	struct feeder f = {
	    .s = s, .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	const char *cat[] = {"cat", NULL};
	struct sbx_exec_opts o = {.argv = cat,
				  .stdin_stream = true,
				  .on_stdin = on_stdin,
				  .output_cap = 8u << 20,
				  .timeout_ms = 30000};
	struct sbx_exec_result r;
	EXPECT(pthread_create(&f.t, NULL, feed, &f) == 0);
	got = 0;
	o.stdin_data = "0123456789";
	o.stdin_len = 10;
	EXPECT(sbx_exec(s, &o, count, &f, &r) == 0);
	pthread_join(f.t, NULL);
	EXPECT(r.exit_code == 0 && got == 10 + 8 * 256 * 1024 && f.acks == 8 && f.bad == 0);
}

static void test_dead_agent(struct sbx *s)
{
	kill(agent_pid, SIGKILL);
	siginfo_t si;
	waitid(P_PID, (id_t)agent_pid, &si, WEXITED | WNOWAIT); /* sbx_destroy reaps it */
	struct run x;
	const char *t[] = {"true", NULL};
	struct sbx_exec_opts o = {.argv = t};
	EXPECT(run_op(s, &o, &x) == 0);
	EXPECT(x.exited && x.r == -EPIPE);
	struct sbx_exec_result r;
	EXPECT(sbx_exec(s, &o, NULL, NULL, &r) == -EPIPE);
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Many ops on one channel at once, driven together (sbx_chan_io), with a
 * synchronous file request between them; the limit of ops in flight. */
static void test_channel(struct sbx *s)
{
	enum { N = 4 };
	struct run x[N];
	const char *slp[] = {"sh", "-c", "sleep 0.4; echo done", NULL};
	struct sbx_exec_opts o = {.argv = slp};
	int64_t t0 = mono_ms();
	for (int i = 0; i < N; i++) {
		memset(&x[i], 0, sizeof(x[i]));
		EXPECT(sbx_exec_op_start(s, &o, &cbs, &x[i], &x[i].op) == 0);
	}
	EXPECT(sbx_chan_execs(s) == N);
	struct sbx_stat st;
	EXPECT(sbx_file_stat(s, "/", &st) == 0 && st.type == 2); /* while they run */
	int left = N;
	while (left && mono_ms() - t0 < 10000) {
		struct pollfd p = {.fd = sbx_agent_fd(s), .events = sbx_chan_events(s)};
		if (poll(&p, 1, 1000) > 0)
			sbx_chan_io(s, p.revents);
		left = 0;
		for (int i = 0; i < N; i++)
			left += !x[i].exited;
	}
	int64_t took = mono_ms() - t0;
	for (int i = 0; i < N; i++) {
		EXPECT(x[i].exited && x[i].r == 0 && x[i].out && !strcmp(x[i].out, "done\n"));
		EXPECT(sbx_exec_op_pid(x[i].op) > 0);
		sbx_exec_op_free(x[i].op);
		free(x[i].out);
	}
	EXPECT(took < 4 * 400); /* at once, not one after the other */
	EXPECT(sbx_chan_execs(s) == 0);

	/* the limit: SBX_MAX_EXECS in flight, then -EAGAIN */
	static struct run many[SBX_MAX_EXECS];
	const char *cat[] = {"cat", NULL};
	struct sbx_exec_opts oc = {.argv = cat, .stdin_stream = true};
	for (int i = 0; i < SBX_MAX_EXECS; i++)
		EXPECT(sbx_exec_op_start(s, &oc, &cbs, &many[i], &many[i].op) == 0);
	struct sbx_exec_op *extra = NULL;
	EXPECT(sbx_exec_op_start(s, &oc, &cbs, &many[0], &extra) == -EAGAIN);
	for (int i = 0; i < SBX_MAX_EXECS; i++)
		sbx_exec_op_kill(many[i].op);
	for (int spins = 0; spins < 1000 && sbx_chan_execs(s); spins++) {
		struct pollfd p = {.fd = sbx_agent_fd(s), .events = sbx_chan_events(s)};
		if (poll(&p, 1, 1000) > 0)
			sbx_chan_io(s, p.revents);
	}
	EXPECT(sbx_chan_execs(s) == 0);
	for (int i = 0; i < SBX_MAX_EXECS; i++) {
		EXPECT(many[i].exited);
		sbx_exec_op_free(many[i].op);
		free(many[i].out);
	}
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	struct sbx *s;
	int r = spawn_test_agent(&s, &agent_pid, NULL);
	if (r < 0) {
		fprintf(stderr, "skip: no strata-agent (set STRATA_BIN): %s\n", strerror(-r));
		return 77;
	}
	test_ops(s);
	test_channel(s);
	test_blocking_interactive(s);
	test_dead_agent(s);
	sbx_destroy(s);
	return test_result("sandboxd_exec_op");
}
