/* test_sandbox_adopt.c — persistent sandboxes outlive their host: release
 * one (as a restarting sandboxd would), adopt it again by pid, find its files
 * and background processes intact; a second adopter takes over; processes
 * inside cannot take the agent over; non-persistent sandboxes end with their
 * stream; execs running at the release run on, and the next host lists
 * them and collects their output and exit (sbx_execs_list,
 * sbx_exec_op_attach); nothing is left once all are destroyed; a fake agent
 * that root inside puts where the agent's socket was is never what the
 * adopter talks to, and adoption refuses a process that is not the
 * recorded agent or whose channel another process made (issue 14). Needs
 * root (77 otherwise). */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/sandbox/sbx_test.h"

/* Running (a zombie is not: it is ours to reap, or init's). */
static bool alive(pid_t pid)
{
	char p[64], st[512];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return false;
	bool run = fgets(st, sizeof(st), f) && strrchr(st, ')') && strrchr(st, ')')[2] != 'Z';
	fclose(f);
	return run;
}

static bool gone_within(pid_t pid, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		if (!alive(pid))
			return true;
		usleep(10000);
	}
	return false;
}

static void test_release_adopt(struct sbxt_env *e, char *cgdir, size_t cap)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	struct sbx_config cfg = sbxt_config(e);
	cfg.persist = true;
	cfg.orphan_timeout_ms = 20000; /* should this test die, its sandbox follows */
	struct sbx *s = NULL, *s2 = NULL, *s3 = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	pid_t pid = sbx_pid(s);
	struct sbx_agent_id id;
	CHECK(sbx_agent_id(s, &id) == 0 && id.pid == pid && id.start_time && id.pidns_ino);
	snprintf(cgdir, cap, "%s", sbx_cgroup_path(s, "memory"));
	CHECK(sbxt_sh(s, "echo 42 > /tmp/state; sleep 1000 >/dev/null 2>&1 &", 5000, &o, &r) == 0);
	sbx_release(s);
	usleep(200000);
	CHECK(alive(pid));

	CHECK(sbx_adopt(e->rt, &id, &s2) == 0);
	if (!s2)
		return;
	CHECK(sbxt_sh(s2, "cat /tmp/state; ps -o args | grep -c '^sleep 1000'", 5000, &o, &r) == 0);
	CHECK(!strcmp(o.out, "42\n1\n"));
	if (strcmp(o.out, "42\n1\n"))
		fprintf(stderr, "after adoption: %s", o.out);
	/* A process inside that escapes its chroot finds the socket, and is
	 * not served. */
	const char *hj[] = {"/bin/probe", "hijack", NULL};
	struct sbx_exec_opts opts = {.argv = hj, .timeout_ms = 10000};
	CHECK(sbxt_exec(s2, &opts, &o, &r) == 0 && r.exit_code == 0);
	fprintf(stderr, "probe hijack       %s", o.out);
	CHECK(sbxt_sh(s2, "echo still", 5000, &o, &r) == 0 && !strcmp(o.out, "still\n"));

	/* A second adopter takes over; the first one's stream ends. */
	CHECK(sbx_adopt(e->rt, &id, &s3) == 0);
	CHECK(sbxt_sh(s2, "true", 5000, &o, &r) < 0);
	sbx_release(s2);
	if (!s3)
		return;
	CHECK(sbxt_sh(s3, "cat /tmp/state", 5000, &o, &r) == 0 && !strcmp(o.out, "42\n"));
	sbx_destroy(s3);
	CHECK(gone_within(pid, 5000));
	CHECK(sbx_adopt(e->rt, &id, &s) == -ESRCH);
}

/* A persistent sandbox (its orphan timeout ends it should this test die)
 * and its agent's identity. */
static struct sbx *create_persistent(struct sbxt_env *e, struct sbx_agent_id *ret_id)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.persist = true;
	cfg.orphan_timeout_ms = 20000;
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (s)
		CHECK(sbx_agent_id(s, ret_id) == 0);
	return s;
}

/* Issue 14's takeover: root inside tries to escape its root and put a fake
 * agent where the host used to find the agent; after a release (a host
 * restart) the adopter must reach the real agent: real output, and the
 * timeout enforced. */
static void test_fake_agent(struct sbxt_env *e)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	struct sbx_agent_id id;
	struct sbx *s = create_persistent(e, &id), *s2 = NULL;
	if (!s)
		return;
	/* First (the fake's own socket would be found after it) */
	const char *stg[] = {"/bin/probe", "staging", NULL};
	struct sbx_exec_opts opts = {.argv = stg, .timeout_ms = 10000};
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && r.exit_code == 0);
	fprintf(stderr, "probe staging      %s", o.out);
	const char *fake[] = {"/bin/probe", "fakeagent", NULL};
	opts.argv = fake;
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && r.exit_code == 0);
	fprintf(stderr, "probe fakeagent    %s", o.out);
	sbx_release(s);
	int rc = sbx_adopt(e->rt, &id, &s2);
	CHECK(rc == 0);
	if (!s2)
		return;
	CHECK(sbxt_sh(s2, "echo real", 5000, &o, &r) == 0 && !strcmp(o.out, "real\n"));
	if (strcmp(o.out, "real\n"))
		fprintf(stderr, "after adoption 'echo real' printed: %s", o.out);
	const char *slp[] = {"sleep", "5", NULL};
	opts = (struct sbx_exec_opts){.argv = slp, .timeout_ms = 300};
	CHECK(sbxt_exec(s2, &opts, &o, &r) == 0 && r.timed_out && r.exit_code == -1);
	sbx_destroy(s2);
}

/* The identity of a process (what sbx_agent_id records), read here. */
static struct sbx_agent_id id_of(pid_t pid)
{
	char p[64], st[1024] = {0};
	struct stat ns;
	struct sbx_agent_id id = {.pid = pid};
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "re");
	char *q = f && fgets(st, sizeof(st), f) ? strrchr(st, ')') : NULL;
	for (int field = 2; q && field < 22; field++)
		q = strchr(q + 1, ' ');
	id.start_time = q ? strtoull(q + 1, NULL, 10) : 0;
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "/proc/%d/ns/pid", (int)pid);
	id.pidns_ino = stat(p, &ns) == 0 ? ns.st_ino : 0;
	return id;
}

/* Adoption takes only what the recorded agent itself holds: a process with
 * the right pid but another start time is refused, and so is a process that
 * looks like an agent (pid 1 of its pid namespace, a socket at AG_HOST_FD)
 * whose channel another process made. */
static void test_peer_check(struct sbxt_env *e)
{
	struct sbx_agent_id id, wrong;
	struct sbx *s = create_persistent(e, &id), *s2 = NULL;
	if (!s)
		return;
	sbx_release(s);
	wrong = id;
	wrong.start_time++;
	CHECK(sbx_adopt(e->rt, &wrong, &s2) == -EPERM);
	wrong = id;
	wrong.pidns_ino++;
	CHECK(sbx_adopt(e->rt, &wrong, &s2) == -EPERM);
	CHECK(sbx_adopt(e->rt, &id, &s2) == 0); /* the agent itself still is */
	sbx_destroy(s2);

	/* The impostor: pid 1 of a new pid namespace holding, at fd 4, one
	 * end of a socketpair this process made. */
	int sp[2], pp[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0 && pipe(pp) == 0);
	pid_t mid = fork();
	if (mid == 0) {
		if (unshare(CLONE_NEWPID) < 0)
			_exit(1);
		pid_t imp = fork();
		if (imp == 0) {
			dup2(sp[1], 4);
			for (;;)
				pause();
		}
		(void)!write(pp[1], &imp, sizeof(imp));
		waitpid(imp, NULL, 0);
		_exit(0);
	}
	pid_t imp = -1;
	CHECK(read(pp[0], &imp, sizeof(imp)) == sizeof(imp) && imp > 0);
	char p[64], l[64] = "";
	snprintf(p, sizeof(p), "/proc/%d/fd/4", (int)imp);
	for (int i = 0; i < 200 && strncmp(l, "socket:", 7); i++) {
		ssize_t n = readlink(p, l, sizeof(l) - 1); /* until its dup2 */
		l[n > 0 ? n : 0] = 0;
		if (strncmp(l, "socket:", 7))
			usleep(10000);
	}
	CHECK(!strncmp(l, "socket:", 7));
	if (imp > 0) {
		struct sbx_agent_id iid = id_of(imp);
		CHECK(iid.start_time && iid.pidns_ino);
		CHECK(sbx_adopt(e->rt, &iid, &s2) == -EPERM);
		char c;
		CHECK(recv(sp[0], &c, 1, MSG_DONTWAIT) < 0); /* nothing was written to it */
		kill(imp, SIGKILL);
	}
	waitpid(mid, NULL, 0);
	close(sp[0]);
	close(sp[1]);
	close(pp[0]);
	close(pp[1]);
}

/* A persistent sandbox nobody adopts ends after its orphan timeout. */
static void test_orphan_timeout(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.persist = true;
	cfg.orphan_timeout_ms = 300;
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	pid_t pid = sbx_pid(s);
	sbx_release(s);
	usleep(100000);
	CHECK(alive(pid));
	CHECK(gone_within(pid, 5000));
	waitpid(pid, NULL, __WALL); /* we are its parent: reap it */
	/* Its empty cgroups go when the runtime is freed (or the next starts). */
}

static void test_not_persistent(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	struct sbx *s = NULL, *s2 = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	pid_t pid = sbx_pid(s);
	struct sbx_agent_id id;
	CHECK(sbx_agent_id(s, &id) == 0);
	CHECK(sbx_adopt(e->rt, &id, &s2) == -ENOTCONN);
	sbx_release(s);
	CHECK(gone_within(pid, 5000));
	struct sbx_agent_id me = {.pid = getpid()};
	CHECK(sbx_adopt(e->rt, &me, &s2) == -EPERM); /* not a sandbox at all */
}

/* An exec followed by a poll loop: its output and exit. */
struct follow {
	char out[256];
	size_t len;
	int r, exit_code;
	bool started, exited;
};

static void f_started(void *ud, int mode)
{
	((struct follow *)ud)->started = true;
}

static void f_output(void *ud, int stream, const void *d, size_t n)
{
	struct follow *f = ud;
	n = n < sizeof(f->out) - 1 - f->len ? n : sizeof(f->out) - 1 - f->len;
	memcpy(f->out + f->len, d, n);
	f->len += n;
}

static void f_exit(void *ud, int r, const struct sbx_exec_result *res)
{
	struct follow *f = ud;
	f->exited = true;
	f->r = r;
	f->exit_code = res ? res->exit_code : -1;
}

static const struct sbx_exec_cbs follow_cbs = {f_started, f_output, NULL, f_exit};

/* Drives s's channel until done() or 10 s. */
static void drive(struct sbx *s, bool (*done)(struct follow *), struct follow *f)
{
	for (int i = 0; i < 1000 && !done(f); i++) {
		struct pollfd p = {.fd = sbx_agent_fd(s), .events = sbx_chan_events(s)};
		if (poll(&p, 1, 10) > 0)
			sbx_chan_io(s, p.revents);
	}
}

static bool f_is_started(struct follow *f)
{
	return f->started || f->exited;
}

static bool f_is_exited(struct follow *f)
{
	return f->exited;
}

/* Two execs run through a release: one ends while no host follows it,
 * one runs on; the adopter lists both and collects output and exits. */
static void test_execs_survive(struct sbxt_env *e)
{
	struct sbx_agent_id id;
	struct sbx *s = create_persistent(e, &id), *s2 = NULL;
	if (!s)
		return;
	const char *quick[] = {"sh", "-c", "sleep 0.3; echo held; exit 3", NULL};
	const char *slow[] = {"sh", "-c", "sleep 1.5; echo later; exit 4", NULL};
	struct sbx_exec_opts o1 = {.argv = quick, .id = SBX_EXEC_ID_CALLER | 1};
	struct sbx_exec_opts o2 = {.argv = slow, .id = SBX_EXEC_ID_CALLER | 2};
	struct follow a = {0}, b = {0};
	struct sbx_exec_op *op1 = NULL, *op2 = NULL;
	CHECK(sbx_exec_op_start(s, &o1, &follow_cbs, &a, &op1) == 0);
	CHECK(sbx_exec_op_start(s, &o2, &follow_cbs, &b, &op2) == 0);
	if (!op1 || !op2)
		return;
	drive(s, f_is_started, &a);
	drive(s, f_is_started, &b);
	CHECK(a.started && b.started && !a.exited);
	sbx_exec_op_free(op1);
	sbx_exec_op_free(op2);
	sbx_release(s); /* the host restarts: both run on */
	usleep(800000); /* the quick one ends meanwhile, held */

	CHECK(sbx_adopt(e->rt, &id, &s2) == 0);
	if (!s2)
		return;
	struct sbx_exec_info *v = NULL;
	size_t n = 0;
	CHECK(sbx_execs_list(s2, &v, &n) == 0);
	CHECK(n == 2);
	for (size_t i = 0; i < n; i++) {
		bool is_quick = v[i].id == (SBX_EXEC_ID_CALLER | 1);
		CHECK(is_quick || v[i].id == (SBX_EXEC_ID_CALLER | 2));
		CHECK(v[i].running == !is_quick);
		CHECK(v[i].pid > 1 && strstr(v[i].cmd, is_quick ? "held" : "later"));
	}
	sbx_exec_infos_free(v, n);
	struct follow a2 = {0}, b2 = {0};
	CHECK(sbx_exec_op_attach(s2, SBX_EXEC_ID_CALLER | 1, &follow_cbs, &a2, &op1) == 0);
	CHECK(sbx_exec_op_attach(s2, SBX_EXEC_ID_CALLER | 2, &follow_cbs, &b2, &op2) == 0);
	drive(s2, f_is_exited, &a2);
	drive(s2, f_is_exited, &b2);
	CHECK(a2.exited && a2.r == 0 && a2.exit_code == 3 && !strcmp(a2.out, "held\n"));
	CHECK(b2.exited && b2.r == 0 && b2.exit_code == 4 && !strcmp(b2.out, "later\n"));
	sbx_exec_op_free(op1);
	sbx_exec_op_free(op2);
	/* collected: gone from the list; an unknown id is -ESRCH */
	CHECK(sbx_execs_list(s2, &v, &n) == 0 && n == 0);
	sbx_exec_infos_free(v, n);
	struct follow c = {0};
	CHECK(sbx_exec_op_attach(s2, 77, &follow_cbs, &c, &op1) == 0);
	drive(s2, f_is_exited, &c);
	CHECK(c.exited && c.r == -ESRCH);
	sbx_exec_op_free(op1);
	sbx_destroy(s2);
}

int main(void)
{
	struct sbxt_env e;
	char cgdir[4096] = "";
	int r = sbxt_setup(&e, 2);
	if (r)
		return r;
	test_release_adopt(&e, cgdir, sizeof(cgdir));
	test_execs_survive(&e);
	test_not_persistent(&e);
	test_fake_agent(&e);
	test_peer_check(&e);
	test_orphan_timeout(&e);
	sbxt_teardown(&e);
	/* Everything went: the sandbox's cgroup and our subtree. */
	char *slash = strrchr(cgdir, '/');
	CHECK(cgdir[0] && access(cgdir, F_OK) < 0);
	if (slash)
		*slash = 0;
	CHECK(cgdir[0] && access(cgdir, F_OK) < 0);
	CHECK(sbxt_mounts_with("strata-sbx-test") == 0);
	return sbxt_failed;
}
