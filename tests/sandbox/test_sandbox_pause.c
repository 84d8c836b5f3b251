/* test_sandbox_pause.c — sbx_pause and sbx_resume on cgroup v1 (the freezer
 * hierarchy) and v2 (cgroup.freeze): a sandbox running a busy loop and a
 * counter stops whole (the counter stands still, every process is in the
 * kernel's freezer, the kernel says the cgroup is frozen) and goes on
 * after the resume; a second pause and a resume of a running sandbox answer
 * -EALREADY; a paused sandbox is killed by sbx_destroy (on v1 a frozen task
 * dies only once thawed); one released paused is adopted paused (no channel
 * until the resume) and resumes with its processes; a process stuck in a
 * FUSE request (the server, this test, answers nothing) holds the freeze
 * off: the pause gives up at its deadline with -ETIMEDOUT and leaves the
 * sandbox running; and on v1 a sandbox that an older host froze in a
 * freezer cgroup of its own is adopted paused there and resumed. Needs
 * root (77 otherwise). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/sandbox/sbx_test.h"

#define MAX_PIDS 64

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}, NULL);
}

/* The processes of the sandbox (its pids cgroup: v2 the one cgroup). */
static int pids_of(struct sbx *s, pid_t *v, int cap)
{
	char p[PATH_MAX + 32];
	const char *dir = sbx_cgroup_path(s, "pids");
	if (!dir)
		return 0;
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	FILE *f = fopen(p, "re");
	int n = 0, pid;
	while (f && n < cap && fscanf(f, "%d", &pid) == 1)
		v[n++] = pid;
	if (f)
		fclose(f);
	return n;
}

static void read_proc(pid_t pid, const char *leaf, char *buf, size_t cap)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, leaf);
	buf[0] = 0;
	FILE *f = fopen(p, "re");
	if (f) {
		size_t n = fread(buf, 1, cap - 1, f);
		buf[n] = 0;
		fclose(f);
	}
}

/* The counter the sandbox's loop writes to /tmp/count, read from the host
 * through a process's root (nothing in the sandbox has to answer); -1
 * while empty (the loop truncates, then writes: it may freeze between). */
static long counter(struct sbx *s)
{
	char p[64], buf[32] = "";
	snprintf(p, sizeof(p), "/proc/%d/root/tmp/count", (int)sbx_pid(s));
	FILE *f = fopen(p, "re");
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
	}
	return buf[0] ? atol(buf) : -1;
}

/* Whether the counter moves within ms. */
static bool counter_moves(struct sbx *s, int ms)
{
	long c0 = counter(s);
	for (int t = 0; t < ms; t += 20) {
		sleep_ms(20);
		long c = counter(s);
		if (c > c0 && c0 >= 0)
			return true;
		if (c0 < 0)
			c0 = c;
	}
	return false;
}

/* What the kernel says of the sandbox's cgroup: v1 freezer.state FROZEN,
 * v2 cgroup.events "frozen 1". */
static bool cgroup_frozen(struct sbxt_env *e, struct sbx *s)
{
	char buf[512];
	bool v2 = sbx_runtime_cgroup_version(e->rt) == 2;
	const char *dir = sbx_cgroup_path(s, v2 ? "pids" : "freezer");
	if (!dir)
		return false;
	snprintf(buf, sizeof(buf), "%s/%s", dir, v2 ? "cgroup.events" : "freezer.state");
	FILE *f = fopen(buf, "re");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	return v2 ? strstr(buf, "frozen 1") != NULL : !strncmp(buf, "FROZEN", 6);
}

/* Every process of the sandbox sits in the kernel's freezer: not running
 * (a busy loop is R), and waiting in the freezer (v1 __refrigerator, in D;
 * v2 do_freezer_trap, which get_signal inlines, in S: a group stop would
 * be T). */
static bool all_in_freezer(struct sbx *s, int *ret_n)
{
	pid_t v[MAX_PIDS];
	int n = pids_of(s, v, MAX_PIDS);
	bool ok = n > 0;
	for (int i = 0; i < n; i++) {
		char stat[512], wchan[128];
		read_proc(v[i], "stat", stat, sizeof(stat));
		read_proc(v[i], "wchan", wchan, sizeof(wchan));
		char *q = strrchr(stat, ')');
		char state = q && q[1] ? q[2] : '?';
		bool frozen = state != 'R' && state != 'T' &&
			      (strstr(wchan, "refrigerator") || strstr(wchan, "freezer") ||
			       !strcmp(wchan, "get_signal"));
		if (!frozen) {
			fprintf(stderr, "pid %d not frozen: state %c, wchan %s\n", (int)v[i], state,
				wchan);
			ok = false;
		}
	}
	*ret_n = n;
	return ok;
}

/* A busy loop and a counter, in the background. */
static void start_loops(struct sbx *s)
{
	struct sbx_exec_result r;
	CHECK(sbxt_sh(s,
		      "(while :; do :; done) >/dev/null 2>&1 & "
		      "(i=0; while :; do i=$((i+1)); echo $i > /tmp/count; done) >/dev/null 2>&1 &",
		      5000, NULL, &r) == 0 &&
	      r.exit_code == 0);
	CHECK(counter_moves(s, 5000));
}

/* A sandbox on e's rootfs; a persistent one ends by itself 30 s after its
 * release should this test die. */
static struct sbx *create(struct sbxt_env *e, bool persist)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.persist = persist;
	cfg.orphan_timeout_ms = persist ? 30000 : 0;
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	return s;
}

static void test_pause_resume(struct sbxt_env *e)
{
	struct sbx *s = create(e, false);
	static struct sbxt_out o;
	struct sbx_exec_result r;
	if (!s)
		return;
	CHECK(!sbx_paused(s));
	CHECK(sbx_resume(s) == -EALREADY); /* running: nothing to do */
	start_loops(s);

	int64_t t0 = now_ms();
	CHECK(sbx_pause(s, 0) == 0);
	fprintf(stderr, "pause took %lld ms\n", (long long)(now_ms() - t0));
	CHECK(sbx_paused(s));
	CHECK(cgroup_frozen(e, s));
	int n = 0;
	CHECK(all_in_freezer(s, &n));
	CHECK(n >= 3); /* the agent, the loop, the counter */
	long c1 = counter(s);
	sleep_ms(300);
	CHECK(counter(s) == c1);
	CHECK(sbx_pause(s, 0) == -EALREADY); /* paused: nothing done, still frozen */
	CHECK(sbx_paused(s) && cgroup_frozen(e, s) && counter(s) == c1);

	CHECK(sbx_resume(s) == 0);
	CHECK(!sbx_paused(s) && !cgroup_frozen(e, s));
	CHECK(counter_moves(s, 2000));
	CHECK(sbxt_sh(s, "echo ok", 5000, &o, &r) == 0 && !strcmp(o.out, "ok\n"));
	CHECK(sbx_resume(s) == -EALREADY);

	/* In halves: start, poll until frozen. */
	int p = sbx_pause_start(s);
	for (int i = 0; p == -EINPROGRESS && i < 2000; i++) {
		sleep_ms(1);
		p = sbx_pause_poll(s, false);
	}
	CHECK(p == 0 && sbx_paused(s) && cgroup_frozen(e, s));
	CHECK(sbx_resume(s) == 0 && counter_moves(s, 2000));

	/* Paused, then destroyed: killed although frozen. */
	pid_t agent = sbx_pid(s);
	CHECK(sbx_pause(s, 0) == 0);
	sbx_destroy(s);
	bool gone = false;
	for (int i = 0; i < 500 && !gone; i++, sleep_ms(10))
		gone = kill(agent, 0) < 0 && errno == ESRCH;
	CHECK(gone);
}

/* Released paused (a host restart), adopted paused: no channel until the
 * resume, nothing runs meanwhile; then all of it goes on. */
static void test_adopt_paused(struct sbxt_env *e)
{
	struct sbx *s = create(e, true), *s2 = NULL, *s3 = NULL;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	struct sbx_agent_id id;
	if (!s)
		return;
	CHECK(sbx_agent_id(s, &id) == 0);
	start_loops(s);
	CHECK(sbx_pause(s, 0) == 0);
	sbx_release(s);
	CHECK(sbx_adopt(e->rt, &id, &s2) == 0);
	if (!s2)
		return;
	CHECK(sbx_paused(s2) && sbx_agent_fd(s2) < 0 && cgroup_frozen(e, s2));
	long c1 = counter(s2);
	sleep_ms(300);
	CHECK(counter(s2) == c1);
	CHECK(sbx_pause(s2, 0) == -EALREADY);
	CHECK(sbx_resume(s2) == 0);
	CHECK(!sbx_paused(s2) && sbx_agent_fd(s2) >= 0 && !cgroup_frozen(e, s2));
	CHECK(counter_moves(s2, 2000));
	CHECK(sbxt_sh(s2, "ps -o args | grep -c '[w]hile :'", 5000, &o, &r) == 0);
	CHECK(atoi(o.out) >= 2); /* the loop and the counter lived through it */
	/* Released running: adopted running, connected. */
	sbx_release(s2);
	CHECK(sbx_adopt(e->rt, &id, &s3) == 0);
	if (!s3)
		return;
	CHECK(!sbx_paused(s3) && sbx_agent_fd(s3) >= 0);
	CHECK(sbxt_sh(s3, "echo ok", 5000, &o, &r) == 0 && !strcmp(o.out, "ok\n"));
	sbx_destroy(s3);
}

/* ---- a FUSE server that answers INIT and nothing else --------------------- */

struct fuse_in_hdr {
	uint32_t len, opcode;
	uint64_t unique, nodeid;
	uint32_t uid, gid, pid;
	uint16_t total_extlen, padding;
};
struct fuse_out_hdr {
	uint32_t len;
	int32_t error;
	uint64_t unique;
};
struct fuse_init_reply { /* fuse_init_out, protocol 7.31 (64 bytes) */
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write, time_gran;
	uint16_t max_pages, map_alignment;
	uint32_t flags2;
	uint32_t unused[7];
};
#define FUSE_INIT_OP 26

/* Mounts a FUSE filesystem served by fuse_fd at /home of the sandbox (a
 * child of ours joins its mount namespace; nothing inside can mount). */
static int mount_in_sandbox(struct sbx *s, int fuse_fd)
{
	char ns[64], opts[128];
	snprintf(ns, sizeof(ns), "/proc/%d/ns/mnt", (int)sbx_pid(s));
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other",
		 fuse_fd);
	int nsfd = open(ns, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0)
		return -errno;
	/* The agent's root: its namespace's root is the staging directory. */
	snprintf(ns, sizeof(ns), "/proc/%d/root", (int)sbx_pid(s));
	int rootfd = open(ns, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		close(nsfd);
		return -errno;
	}
	pid_t c = fork();
	if (c == 0) {
		if (setns(nsfd, CLONE_NEWNS) < 0 || fchdir(rootfd) < 0)
			_exit(100 + errno);
		if (mount("stall", "home", "fuse", 0, opts) < 0)
			_exit(errno);
		_exit(0);
	}
	close(nsfd);
	close(rootfd);
	int st = 0;
	if (c < 0 || waitpid(c, &st, 0) != c)
		return -ECHILD;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fprintf(stderr, "mount in the sandbox: %s%s\n",
			WEXITSTATUS(st) > 100 ? "setns: " : "", strerror(WEXITSTATUS(st) % 100));
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/* Reads the next request; answers it if it is INIT. Returns its opcode. */
static int fuse_serve_one(int fd)
{
	static uint8_t buf[1 << 17];
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n < (ssize_t)sizeof(struct fuse_in_hdr))
		return -1;
	struct fuse_in_hdr in;
	memcpy(&in, buf, sizeof(in));
	if (in.opcode != FUSE_INIT_OP)
		return (int)in.opcode;
	struct {
		struct fuse_out_hdr h;
		struct fuse_init_reply b;
	} out = {.h = {.len = sizeof(out), .unique = in.unique},
		 .b = {.major = 7,
		       .minor = 31,
		       .max_background = 16,
		       .congestion_threshold = 12,
		       .max_write = 4096,
		       .time_gran = 1,
		       .max_pages = 32}};
	return write(fd, &out, sizeof(out)) == (ssize_t)sizeof(out) ? FUSE_INIT_OP : -1;
}

static void test_pause_deadline(struct sbxt_env *e)
{
	struct sbx *s = create(e, false);
	struct sbx_exec_result r;
	if (!s)
		return;
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "no /dev/fuse (%s): the deadline is not tested\n", strerror(errno));
		/* The test VM loads fuse (scripts/testvm.sh): there it must run */
		CHECK(!getenv("STRATA_TEST_CGROUP_VERSION"));
		sbx_destroy(s);
		return;
	}
	int m = mount_in_sandbox(s, fd);
	CHECK(m == 0);
	CHECK(m == 0 && fuse_serve_one(fd) == FUSE_INIT_OP);
	start_loops(s);
	/* A stat that waits for our answer (LOOKUP), which never comes. */
	CHECK(sbxt_sh(s, "stat /home/x >/dev/null 2>&1 &", 5000, NULL, &r) == 0);
	int op = m == 0 ? fuse_serve_one(fd) : -1;
	CHECK(op > 0 && op != FUSE_INIT_OP); /* the LOOKUP is with us */

	int64_t t0 = now_ms();
	int p = sbx_pause(s, 300);
	int64_t took = now_ms() - t0;
	fprintf(stderr, "pause with a process in a FUSE request: %s after %lld ms\n", strerror(-p),
		(long long)took);
	CHECK(p == -ETIMEDOUT);
	CHECK(took >= 300 && took < 2000);
	CHECK(!sbx_paused(s) && !cgroup_frozen(e, s));
	CHECK(counter_moves(s, 2000)); /* thawed: whole or not at all */

	/* The same in halves, as an event loop does it: still freezing, a
	 * second start is refused, giving up thaws; a resume gives it up too. */
	CHECK(sbx_pause_start(s) == -EINPROGRESS);
	sleep_ms(50);
	CHECK(sbx_pause_poll(s, false) == -EINPROGRESS && !sbx_paused(s));
	CHECK(sbx_pause_start(s) == -EBUSY);
	CHECK(sbx_pause_poll(s, true) == -ETIMEDOUT && !sbx_paused(s));
	CHECK(sbx_pause_poll(s, false) == -EINVAL);
	CHECK(counter_moves(s, 2000));
	CHECK(sbx_pause_start(s) == -EINPROGRESS);
	CHECK(sbx_resume(s) == 0 && !sbx_paused(s) && !cgroup_frozen(e, s));
	CHECK(counter_moves(s, 2000));

	close(fd); /* the connection aborts: the stat fails, and nothing holds it off */
	sleep_ms(100);
	CHECK(sbx_pause(s, 0) == 0);
	CHECK(cgroup_frozen(e, s));
	CHECK(sbx_resume(s) == 0);
	sbx_destroy(s);
}

/* ---- a sandbox frozen by an older host (v1) -------------------------------- */

static int write_file(const char *dir, const char *file, const char *v)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = write(fd, v, strlen(v)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* Moves every process of the sandbox into dir (cgroup.procs). */
static int move_all(struct sbx *s, const char *dir)
{
	pid_t v[MAX_PIDS];
	char pid[16];
	int n = pids_of(s, v, MAX_PIDS), r = 0;
	for (int i = 0; i < n && r == 0; i++) {
		snprintf(pid, sizeof(pid), "%d", (int)v[i]);
		r = write_file(dir, "cgroup.procs", pid);
	}
	return r;
}

/* sandboxds before the library paused froze a sandbox in a freezer cgroup
 * of their own, and their slots had no freezer directory: such a sandbox
 * is adopted paused, in that cgroup, and pauses and resumes there. */
static void test_adopt_foreign_freezer(struct sbxt_env *e)
{
	struct sbx *s = create(e, true), *s2 = NULL;
	struct sbx_agent_id id;
	char slot_fz[PATH_MAX], old[PATH_MAX + 64];
	if (!s)
		return;
	CHECK(sbx_agent_id(s, &id) == 0);
	start_loops(s);
	const char *fz = sbx_cgroup_path(s, "freezer");
	CHECK(fz != NULL);
	if (!fz) {
		sbx_destroy(s);
		return;
	}
	snprintf(slot_fz, sizeof(slot_fz), "%s", fz);
	/* Beside the runtime's subtree: <freezer>/<own cgroup>/<subtree>-legacy-<pid> */
	snprintf(old, sizeof(old), "%s", slot_fz);
	*strrchr(old, '/') = 0;
	snprintf(old + strlen(old), sizeof(old) - strlen(old), "-legacy-%d", (int)getpid());
	CHECK(mkdir(old, 0755) == 0);
	CHECK(move_all(s, old) == 0);
	CHECK(write_file(old, "freezer.state", "FROZEN") == 0);
	sleep_ms(100);
	sbx_release(s);
	CHECK(rmdir(slot_fz) == 0); /* as an older host's slot: no freezer of its own */
	CHECK(sbx_adopt(e->rt, &id, &s2) == 0);
	if (s2) {
		CHECK(sbx_paused(s2) && sbx_agent_fd(s2) < 0);
		CHECK(sbx_resume(s2) == 0 && sbx_agent_fd(s2) >= 0);
		CHECK(counter_moves(s2, 2000));
		CHECK(sbx_pause(s2, 0) == 0);
		long c1 = counter(s2);
		sleep_ms(200);
		CHECK(counter(s2) == c1);
		sbx_destroy(s2); /* killed, then thawed */
	}
	bool gone = false;
	for (int i = 0; i < 500 && !gone; i++, sleep_ms(10))
		gone = kill(id.pid, 0) < 0 && errno == ESRCH;
	CHECK(gone);
	for (int i = 0; i < 100 && rmdir(old) < 0 && errno == EBUSY; i++)
		sleep_ms(20);
	CHECK(access(old, F_OK) < 0);
}

int main(void)
{
	struct sbxt_env e;
	int r = sbxt_setup(&e, 2);
	if (r)
		return r;
	int v = sbx_runtime_cgroup_version(e.rt);
	fprintf(stderr, "cgroup v%d\n", v);
	test_pause_resume(&e);
	test_adopt_paused(&e);
	test_pause_deadline(&e);
	if (v == 1)
		test_adopt_foreign_freezer(&e);
	sbxt_teardown(&e);
	return sbxt_failed;
}
