/* agent_exec.c — running commands inside the sandbox for strata-agent.
 *
 * An EXEC request starts a child (clone(CLONE_VM | CLONE_VFORK): it shares
 * the agent's memory until its exec) that becomes a session leader (so a timeout
 * or SIGNAL reaches its whole process group), switches to the requested
 * user, cwd and environment and execs argv. Output is forwarded as OUTPUT
 * chunks until the exec's output cap; past it the pipes are still drained
 * (the child never blocks on a full pipe) but the bytes are dropped and EXIT
 * carries AG_EXIT_F_TRUNCATED. Start failures (no such binary, bad cwd or
 * user) are the EXEC reply's status, with the step that failed (the child
 * reports step and errno through a close-on-exec pipe); after a successful
 * reply exactly one EXIT follows, flagged AG_EXIT_F_OOM_KILLED when the
 * command died of SIGKILL while the sandbox's OOM kill counter rose. While
 * no host follows an exec (its host went away) its frames are held
 * (agent.h, invariant 5) for the next host's ATTACH; EXECS lists the execs.
 *
 * The command's environment is Docker's: PATH (AG_DEFAULT_PATH), HOME (the
 * user's home in the sandbox's /etc/passwd, else "/", as runc), USER (the
 * user's name there, when it has an entry) and HOSTNAME, each replaced by
 * the request's own variable of that name. TERM is not set: there is no
 * terminal (Docker sets it only with a tty). */
#include "sandbox/agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* 32-bit ids where the plain calls take 16-bit ones (i386, arm). */
#ifdef SYS_setuid32
#define SYS_SETGROUPS SYS_setgroups32
#define SYS_SETGID SYS_setgid32
#define SYS_SETUID SYS_setuid32
#else
#define SYS_SETGROUPS SYS_setgroups
#define SYS_SETGID SYS_setgid
#define SYS_SETUID SYS_setuid
#endif

#define TAKE(fd)                                                                                   \
	({                                                                                         \
		int _t = (fd);                                                                     \
		(fd) = -1;                                                                         \
		_t;                                                                                \
	})

static struct ag_execp *find_exec(struct agent *a, uint32_t id)
{
	for (struct ag_execp *e = a->execs; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* What the command runs as, from the sandbox's /etc/passwd. */
struct ag_user {
	uid_t uid;
	gid_t gid;
	char home[256]; /* "/" without an entry */
	char name[64];	/* "" without an entry */
};

/* Looks up a user in /etc/passwd: "name", "uid" or "uid:gid" (the agent is
 * static and has no NSS). A uid without an entry is fine (home "/"); a
 * name must exist. A bare uid takes the entry's primary group, like
 * Docker's --user. Returns 0 or -ENOENT. */
static int lookup_user(const char *user, struct ag_user *ret)
{
	uid_t *uid = &ret->uid;
	gid_t *gid = &ret->gid;
	char *home = ret->home;
	size_t home_cap = sizeof(ret->home);
	ret->name[0] = 0;
	char *end, line[1024];
	unsigned long u = strtoul(user, &end, 10);
	bool numeric = end != user && (*end == 0 || *end == ':');
	bool has_gid = numeric && *end == ':';
	if (numeric) {
		*uid = (uid_t)u;
		*gid = has_gid ? (gid_t)strtoul(end + 1, NULL, 10) : (gid_t)u;
		snprintf(home, home_cap, "/");
	}
	int r = numeric ? 0 : -ENOENT;
	FILE *f = fopen("/etc/passwd", "re");
	while (f && fgets(line, sizeof(line), f)) {
		char *fld[7] = {0}, *s = line;
		int n = 0;
		for (char *t; n < 7 && (t = strsep(&s, ":\n")); n++)
			fld[n] = t;
		if (n < 6)
			continue;
		bool match = numeric ? strtoul(fld[2], NULL, 10) == u : !strcmp(fld[0], user);
		if (!match)
			continue;
		*uid = (uid_t)strtoul(fld[2], NULL, 10);
		if (!has_gid)
			*gid = (gid_t)strtoul(fld[3], NULL, 10);
		snprintf(home, home_cap, "%s", fld[5]);
		snprintf(ret->name, sizeof(ret->name), "%s", fld[0]);
		r = 0;
		break;
	}
	if (f)
		fclose(f);
	return r;
}

/* What the child needs: it runs on its own stack in the agent's memory
 * (clone(CLONE_VM | CLONE_VFORK), as posix_spawn does) until it execs. */
struct child_args {
	const struct ag_exec_req *q;
	int in, out, err, errfd;
	uid_t uid;
	gid_t gid;
	bool ids;
	char **env;
};

/* What the child writes to errfd when its start fails. */
struct child_error {
	int step; /* AG_STEP_* */
	int err;  /* errno */
};

/* The child: never returns. Reports an errno through errfd. It shares the
 * agent's memory, which is suspended until the exec or _exit: no malloc, no
 * write to the agent's globals (environ included: execvpe takes the
 * environment), raw syscalls for the ids (no libc set-id broadcast). The
 * agent installs no signal handler (SIGCHLD & co. are blocked for its
 * signalfd, SIGPIPE is ignored), so unblocking signals here runs none of
 * its code; SIGPIPE goes back to its default for the command. */
static int child(void *arg)
{
	const struct child_args *c = arg;
	const struct ag_exec_req *q = c->q;
	sigset_t all;
	sigemptyset(&all);
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, &all, NULL);
	setsid();
	struct child_error e = {.step = AG_STEP_SETUP};
	if (dup2(c->in, 0) < 0 || dup2(c->out, 1) < 0 || dup2(c->err, 2) < 0)
		goto fail;
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "0", 1);
		close(fd);
	}
	e.step = AG_STEP_CWD;
	if (chdir(q->cwd[0] ? q->cwd : "/") < 0)
		goto fail;
	e.step = AG_STEP_IDS;
	if (c->ids && (syscall(SYS_SETGROUPS, 0, NULL) < 0 || syscall(SYS_SETGID, c->gid) < 0 ||
		       syscall(SYS_SETUID, c->uid) < 0))
		goto fail;
	e.step = AG_STEP_EXEC;
	execvpe(q->argv[0], q->argv, c->env);
fail:
	e.err = errno;
	(void)!write(c->errfd, &e, sizeof(e));
	_exit(127);
}

/* Is NAME= of entry (NAME=value) one of env's names? */
static bool env_has(char *const *env, const char *entry)
{
	size_t n = strcspn(entry, "=");
	for (char *const *p = env; p && *p; p++)
		if (!strncmp(*p, entry, n) && (*p)[n] == '=')
			return true;
	return false;
}

/* The command's environment (see the top of the file): a malloc'ed array
 * (the caller frees it, not its strings) of q's strings and the defaults,
 * written into home_env, user_env and host_env (cap bytes each). */
static char **exec_env(const struct ag_exec_req *q, const struct ag_user *u, char *home_env,
		       char *user_env, char *host_env, size_t cap)
{
	static char path_env[] = "PATH=" AG_DEFAULT_PATH;
	char **v = calloc(q->envc + 5, sizeof(char *));
	if (!v)
		return NULL;
	size_t n = 0;
	snprintf(home_env, cap, "HOME=%s", u->home);
	snprintf(user_env, cap, "USER=%s", u->name);
	memcpy(host_env, "HOSTNAME=", 9);
	if (gethostname(host_env + 9, cap - 9) < 0)
		host_env[9] = 0;
	host_env[cap - 1] = 0;
	char *defaults[] = {path_env, home_env, u->name[0] ? user_env : NULL, host_env};
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		if (defaults[i] && !env_has(q->env, defaults[i]))
			v[n++] = defaults[i];
	for (uint32_t i = 0; i < q->envc; i++)
		v[n++] = q->env[i];
	return v;
}

/* The child's stack: the agent is single-threaded and suspended while the
 * child runs, so one static stack serves every spawn (no mmap per exec).
 * 128 KiB: glibc's execvpe (the agent without musl) puts a script's new
 * argv there (AG_MAX_ARGS pointers); only the pages used are ever touched. */
static char child_stack[128 * 1024] __attribute__((aligned(64)));

static int open_pipes(int p_out[2], int p_err[2], int p_in[2], int p_sync[2], bool want_in)
{
	if (pipe2(p_out, O_CLOEXEC) < 0 || pipe2(p_err, O_CLOEXEC) < 0 ||
	    pipe2(p_sync, O_CLOEXEC) < 0)
		return -errno;
	if (want_in) {
		if (pipe2(p_in, O_CLOEXEC) < 0)
			return -errno;
	} else {
		p_in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		p_in[1] = -1;
		if (p_in[0] < 0)
			return -errno;
	}
	fcntl(p_out[0], F_SETFL, O_NONBLOCK);
	fcntl(p_err[0], F_SETFL, O_NONBLOCK);
	if (p_in[1] >= 0)
		fcntl(p_in[1], F_SETFL, O_NONBLOCK);
	return 0;
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close_fd(&fds[i]);
}

/* Starts the child and waits for the exec (or its failure, and the step
 * that failed, into *ret_step) through a CLOEXEC pipe. Fills e on success. */
static int spawn(struct ag_exec_req *q, struct ag_execp *e, int *ret_step)
{
	bool ids = q->flags & AG_EXEC_F_UIDGID;
	char uid_s[32], home_env[300], user_env[300], host_env[300];
	struct ag_user u = {.uid = q->uid, .gid = q->gid};
	int fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1}; /* out, err, in, sync */
	int r;

	/* the user's entry: its ids (a name or uid given), its home and name */
	snprintf(uid_s, sizeof(uid_s), "%u:%u", (unsigned)u.uid, (unsigned)u.gid);
	*ret_step = AG_STEP_USER;
	r = lookup_user(q->user[0] ? q->user : ids ? uid_s : "0", &u);
	if (r < 0 && q->user[0])
		return r;
	ids = ids || q->user[0];
	*ret_step = AG_STEP_SETUP;
	char **env = exec_env(q, &u, home_env, user_env, host_env, sizeof(host_env));
	if (!env)
		return -ENOMEM;
	r = open_pipes(fds, fds + 2, fds + 4, fds + 6, q->flags & AG_EXEC_F_STDIN);
	if (r < 0)
		goto out;
	/* Not fork(): no copy of the page tables, no copy-on-write faults in
	 * either process and no teardown of the copy at the exec (~0.1 ms). */
	struct child_args ca = {.q = q,
				.in = fds[4],
				.out = fds[1],
				.err = fds[3],
				.errfd = fds[7],
				.uid = u.uid,
				.gid = u.gid,
				.ids = ids,
				.env = env};
	pid_t pid =
	    clone(child, child_stack + sizeof(child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &ca);
	if (pid < 0) {
		r = -errno;
		goto out;
	}
	close_fd(&fds[7]);
	struct child_error ce;
	ssize_t n;
	do
		n = read(fds[6], &ce, sizeof(ce));
	while (n < 0 && errno == EINTR);
	if (n == sizeof(ce)) {
		waitpid(pid, NULL, 0);
		*ret_step = ce.step;
		r = ce.err > 0 ? -ce.err : -EIO;
		goto out;
	}
	e->pid = pid;
	e->out_fd = TAKE(fds[0]);
	e->err_fd = TAKE(fds[2]);
	e->in_fd = TAKE(fds[5]);
	r = 0;
out:
	free(env);
	close_all(fds, 8);
	return r;
}

/* The sandbox's OOM kill count (the "oom_kill N" line of the counter START
 * gave), or 0 without one. */
static uint64_t oom_kills(const struct agent *a)
{
	char buf[512];
	if (a->oom_fd < 0)
		return 0;
	ssize_t n = pread(a->oom_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	for (const char *p = buf; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, "oom_kill ", 9))
			return strtoull(p + 9, NULL, 10);
	return 0;
}

static void exec_free(struct ag_execp *e)
{
	ag_wr_done(&e->in_buf);
	ag_wr_done(&e->held);
	free(e->cmd);
	free(e);
}

static void exec_unlink(struct agent *a, struct ag_execp *e)
{
	for (struct ag_execp **pp = &a->execs; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			a->nexecs--;
			exec_free(e);
			return;
		}
}

/* Makes room for a new exec: forgets the ended held exec that started
 * first. Returns false when every exec still runs. */
static bool drop_oldest_ended(struct agent *a)
{
	struct ag_execp *old = NULL;
	for (struct ag_execp *e = a->execs; e; e = e->next)
		if (e->ended && (!old || e->start_us < old->start_us))
			old = e;
	if (old)
		exec_unlink(a, old);
	return old != NULL;
}

/* argv joined by spaces, at most AG_MAX_CMD bytes (malloc'ed). */
static char *join_argv(char *const *argv)
{
	char *s = malloc(AG_MAX_CMD + 1);
	size_t n = 0;
	if (!s)
		return NULL;
	s[0] = 0;
	for (size_t i = 0; argv[i] && n < AG_MAX_CMD; i++)
		n += (size_t)snprintf(s + n, AG_MAX_CMD + 1 - n, "%s%s", i ? " " : "", argv[i]);
	return s;
}

int ag_exec_start(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_exec_req *q = NULL;
	if (a->nexecs >= AG_MAX_EXECS && !drop_oldest_ended(a))
		return -EAGAIN;
	if (find_exec(a, id))
		return -EEXIST;
	int r = ag_exec_decode(p, len, &q);
	if (r < 0)
		return r;
	struct ag_execp *e = calloc(1, sizeof(*e));
	if (!e) {
		free(q);
		return -ENOMEM;
	}
	e->id = id;
	e->cap = q->output_cap ? q->output_cap : AG_DEFAULT_OUTPUT_CAP;
	e->start_us = ag_now_us();
	e->deadline_us = q->timeout_ms ? e->start_us + (uint64_t)q->timeout_ms * 1000 : 0;
	ag_wr_init(&e->in_buf);
	e->oom_kills = oom_kills(a);
	ag_wr_init(&e->held);
	e->cmd = join_argv(q->argv);
	int step = AG_STEP_UNKNOWN;
	r = e->cmd ? spawn(q, e, &step) : -ENOMEM;
	free(q);
	if (r < 0) { /* the reply, with the step that failed (1.2) */
		exec_free(e);
		size_t off = ag_wr_begin(&a->out, AG_T_EXEC | AG_T_REPLY, id);
		ag_wr_u32(&a->out, (uint32_t)r);
		ag_wr_u8(&a->out, (uint8_t)step);
		ag_wr_end(&a->out, off);
		return 0;
	}
	e->next = a->execs;
	a->execs = e;
	a->nexecs++;
	size_t off = ag_wr_begin(&a->out, AG_T_EXEC | AG_T_REPLY, id);
	ag_wr_u32(&a->out, 0);
	ag_wr_u32(&a->out, (uint32_t)e->pid);
	ag_wr_end(&a->out, off);
	return 0;
}

static void stdin_ack(struct agent *a, uint32_t id, int status, size_t pending)
{
	size_t off = ag_wr_begin(&a->out, AG_T_STDIN | AG_T_REPLY, id);
	ag_wr_u32(&a->out, (uint32_t)status);
	ag_wr_u32(&a->out, (uint32_t)pending);
	ag_wr_end(&a->out, off);
}

void ag_exec_stdin(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	uint32_t n = 0;
	ag_rd_init(&r, p, len);
	uint8_t eof = ag_rd_u8(&r);
	const void *data = ag_rd_blob(&r, AG_MAX_DATA, &n);
	uint8_t flags = r.off < r.len ? ag_rd_u8(&r) : 0; /* 1.1 */
	bool ack = !r.err && (flags & AG_STDIN_F_ACK);
	struct ag_execp *e = find_exec(a, id);
	if (r.err || !e || e->in_fd < 0 || e->in_eof) {
		if (ack) /* stdin for a finished exec is dropped, like a closed pipe */
			stdin_ack(a, id, -EPIPE, 0);
		return;
	}
	if (e->in_buf.len + n > AG_STDIN_MAX) {
		if (ack) { /* the host is told and may retry: stdin stays open */
			stdin_ack(a, id, -ENOBUFS, e->in_buf.len);
			return;
		}
		close_fd(&e->in_fd); /* the child does not read: give it EOF/EPIPE */
		return;
	}
	ag_wr_bytes(&e->in_buf, data, n);
	e->in_eof = eof;
	ag_exec_feed(e);
	if (ack)
		stdin_ack(a, id, 0, e->in_buf.len);
}

void ag_exec_feed(struct ag_execp *e)
{
	while (e->in_fd >= 0 && e->in_buf.len) {
		ssize_t n = write(e->in_fd, e->in_buf.data, e->in_buf.len);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			close_fd(&e->in_fd); /* EPIPE: reader is gone */
			break;
		}
		ag_wr_consume(&e->in_buf, (size_t)n);
	}
	if (e->in_eof && !e->in_buf.len)
		close_fd(&e->in_fd);
}

int ag_exec_signal(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	int sig = (int)ag_rd_u32(&r);
	if (r.err || sig < 0 || sig >= 65)
		return -EINVAL;
	struct ag_execp *e = find_exec(a, id);
	if (!e || e->ended)
		return -ESRCH;
	if (kill(-e->pid, sig) < 0 && kill(e->pid, sig) < 0)
		return -errno;
	e->killed |= sig == SIGKILL; /* its SIGKILL is then not an OOM kill */
	return 0;
}

static void send_output(struct agent *a, struct ag_execp *e, int stream, const void *p, size_t n)
{
	if (stream == AG_STREAM_STDOUT)
		e->out_bytes += n;
	else
		e->err_bytes += n;
	if (e->sent >= e->cap) {
		e->truncated = true;
		return;
	}
	if (n > e->cap - e->sent) {
		n = (size_t)(e->cap - e->sent);
		e->truncated = true;
	}
	e->sent += n;
	struct ag_wr *w = e->detached ? &e->held : &a->out;
	size_t off = ag_wr_begin(w, AG_T_OUTPUT, e->id);
	ag_wr_u8(w, (uint8_t)stream);
	ag_wr_blob(w, p, (uint32_t)n);
	ag_wr_end(w, off);
}

bool ag_exec_pump(struct agent *a, struct ag_execp *e, int stream)
{
	static uint8_t buf[AG_OUTPUT_CHUNK];
	int *fd = stream == AG_STREAM_STDOUT ? &e->out_fd : &e->err_fd;
	for (int i = 0; i < 8 && *fd >= 0; i++) {
		ssize_t n = read(*fd, buf, sizeof(buf));
		if (n > 0) {
			send_output(a, e, stream, buf, (size_t)n);
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return true;
		close_fd(fd);
		return false;
	}
	return *fd >= 0;
}

/* Reports the exit. Returns true when e is done with (else it is held). */
static bool finish(struct agent *a, struct ag_execp *e, int status)
{
	/* Invariant 3: forward what the pipes hold right now, then report. */
	ag_exec_pump(a, e, AG_STREAM_STDOUT);
	ag_exec_pump(a, e, AG_STREAM_STDERR);
	if (e->timed_out || e->killed)
		kill(-e->pid, SIGKILL); /* stragglers of a killed group */
	/* SIGKILL (or a shell's 137 for it) while the cgroup counted an OOM
	 * kill: the kernel cannot say whose, the timing and the signal can */
	bool sigkill = WIFSIGNALED(status)
			   ? WTERMSIG(status) == SIGKILL
			   : WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL;
	bool oom = sigkill && !e->timed_out && !e->killed && oom_kills(a) > e->oom_kills;
	struct ag_exit x = {
	    .exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1,
	    .signo = WIFSIGNALED(status) ? WTERMSIG(status) : 0,
	    .flags = (e->timed_out ? AG_EXIT_F_TIMED_OUT : 0) |
		     (e->truncated ? AG_EXIT_F_TRUNCATED : 0) | (oom ? AG_EXIT_F_OOM_KILLED : 0),
	    .stdout_bytes = e->out_bytes,
	    .stderr_bytes = e->err_bytes,
	    .duration_us = ag_now_us() - e->start_us,
	};
	struct ag_wr *w = e->detached ? &e->held : &a->out;
	size_t off = ag_wr_begin(w, AG_T_EXIT, e->id);
	ag_exit_encode(w, &x);
	ag_wr_end(w, off);
	close_fd(&e->out_fd);
	close_fd(&e->err_fd);
	close_fd(&e->in_fd);
	ag_wr_done(&e->in_buf);
	e->ended = true;
	e->deadline_us = 0;
	return !e->detached;
}

void ag_reap(struct agent *a)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0)
			return;
		for (struct ag_execp *e = a->execs; e; e = e->next) {
			if (e->pid != pid || e->ended)
				continue;
			if (finish(a, e, status))
				exec_unlink(a, e);
			break;
		}
	}
}

int ag_exec_timeouts(struct agent *a)
{
	uint64_t now = ag_now_us(), next = 0;
	for (struct ag_execp *e = a->execs; e; e = e->next) {
		if (!e->deadline_us)
			continue;
		if (e->deadline_us <= now) {
			e->timed_out = true;
			e->deadline_us = 0;
			kill(-e->pid, SIGKILL);
			kill(e->pid, SIGKILL);
			continue;
		}
		if (!next || e->deadline_us < next)
			next = e->deadline_us;
	}
	if (!next)
		return -1;
	return (int)((next - now + 999) / 1000);
}

void ag_exec_detach_all(struct agent *a)
{
	for (struct ag_execp *e = a->execs; e; e = e->next)
		e->detached = true;
}

void ag_exec_list(struct agent *a, uint32_t id)
{
	static struct ag_exec_info info; /* AG_MAX_CMD on the agent's small stack: no */
	uint64_t now = ag_now_us();
	size_t off = ag_wr_begin(&a->out, AG_T_EXECS | AG_T_REPLY, id);
	ag_wr_u32(&a->out, 0);
	ag_wr_u32(&a->out, a->nexecs);
	for (struct ag_execp *e = a->execs; e; e = e->next) {
		info.id = e->id;
		info.pid = (uint32_t)e->pid;
		info.state = e->ended ? AG_EXEC_ENDED : AG_EXEC_RUNNING;
		info.held = e->detached;
		info.age_us = now - e->start_us;
		snprintf(info.cmd, sizeof(info.cmd), "%s", e->cmd ? e->cmd : "");
		ag_exec_info_encode(&a->out, &info);
	}
	ag_wr_end(&a->out, off);
}

/* The host follows exec id from now on: its held frames first. */
void ag_exec_attach(struct agent *a, uint32_t id)
{
	struct ag_execp *e = find_exec(a, id);
	if (!e) {
		ag_reply_status(a, AG_T_ATTACH, id, -ESRCH);
		return;
	}
	size_t off = ag_wr_begin(&a->out, AG_T_ATTACH | AG_T_REPLY, id);
	ag_wr_u32(&a->out, 0);
	ag_wr_u32(&a->out, (uint32_t)e->pid);
	ag_wr_end(&a->out, off);
	ag_wr_bytes(&a->out, e->held.data, e->held.len);
	ag_wr_done(&e->held);
	ag_wr_init(&e->held);
	e->detached = false;
	if (e->ended) /* its EXIT went out with the held frames */
		exec_unlink(a, e);
}
