/* test_sandbox_worker.c — the library's workers (sandbox/container/worker.h)
 * on the busybox rootfs, checked from inside (a shell script as the worker,
 * its output on a pipe) and from the host (its cgroups):
 *   contained: its own pid namespace (it is pid 1), uts (hostname) and
 *     network namespace (lo only), a read-only root with a writable /tmp,
 *     the library's masks of /proc and /sys, no capability, no_new_privs,
 *     seccomp on (a refused syscall: unshare);
 *   the template mode of fncall (caps_keep, seccomp_deferred): only the
 *     kept capabilities, no_new_privs, no filter loaded but the program at
 *     SBX_WORKER_FD_SECCOMP;
 *   memory: a worker over its limit is OOM-killed, and the kill is
 *     reported (SIGKILL when reaped, sbx_worker_oom_kills);
 *   pids: a fork bomb hits pids.max (pids.events) and the host forks on;
 *   children: a cgroup for the worker's own children with its own limits,
 *     joined through the fds the worker got, where a child's OOM kill is
 *     counted while the worker lives on; on v2 the worker in W/t;
 *   cpu: sbx_worker_set_cpu writes the quota;
 *   a failing step (exec of a missing program) is reported on fd 2, 126.
 * Needs root; exits 77 with a reason otherwise. STRATA_TEST_CGROUP_VERSION
 * (the cgroup v2 VM) fails it when the workers chose another version. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/container/worker.h"
#include "tests/sandbox/sbx_test.h"

struct run {
	char out[1 << 16];
	size_t len;
	siginfo_t si;
	struct sbx_worker w; /* freed by the caller (its cgroups are read after) */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs cfg (argv /bin/sh -c script unless set) with stdout and stderr on a
 * pipe, collects its output until EOF (30 s at most) and reaps it. Returns
 * sbx_worker_spawn's result. */
static int run(struct sbx_workers *ws, struct sbx_worker_config cfg, const char *script,
	       struct run *o)
{
	char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
	int p[2];
	memset(o, 0, sizeof(*o));
	o->w.pidfd = o->w.cpu_fd = -1;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int fds[] = {null, p[1], p[1]};
	if (!cfg.argv) {
		cfg.path = "/bin/sh";
		cfg.argv = argv;
	}
	cfg.fds = fds;
	cfg.nfds = 3;
	int r = sbx_worker_spawn(ws, &cfg, &o->w);
	close(p[1]);
	close(null);
	int64_t end = now_ms() + 30000;
	while (r == 0 && now_ms() < end) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		if (poll(&pf, 1, 1000) <= 0)
			continue;
		ssize_t n = read(p[0], o->out + o->len, sizeof(o->out) - 1 - o->len);
		if (n <= 0)
			break;
		o->len += (size_t)n;
	}
	o->out[o->len] = 0;
	close(p[0]);
	if (r == 0 && now_ms() >= end) {
		fprintf(stderr, "worker still running after 30 s: killed\n");
		syscall(SYS_pidfd_send_signal, o->w.pidfd, SIGKILL, NULL, 0);
		sbxt_failed = 1;
	}
	if (r == 0)
		CHECK(sbx_worker_reap(&o->w, true, &o->si) == 1);
	return r;
}

static struct sbx_worker_config base(const struct sbxt_env *e)
{
	return (struct sbx_worker_config){
	    .rootfs = e->rootfs, .memory_bytes = 128ull << 20, .pids_max = 64};
}

static bool exited(const struct run *o, int code)
{
	return o->si.si_code == CLD_EXITED && o->si.si_status == code;
}

/* The value of a line "key=..." of o's output, or "" (a static buffer). */
static const char *value(const struct run *o, const char *key)
{
	static char v[256];
	size_t kl = strlen(key);
	v[0] = 0;
	for (const char *p = o->out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			size_t n = strcspn(p + kl + 1, "\n");
			snprintf(v, sizeof(v), "%.*s", (int)(n < sizeof(v) ? n : sizeof(v) - 1),
				 p + kl + 1);
			break;
		}
	return v;
}

static long cg_long(const struct sbx_worker *w, const char *ctrl, bool children, const char *file,
		    const char *key)
{
	char dir[4096];
	if (sbx_worker_cgroup_path(w, ctrl, children, dir, sizeof(dir)) < 0)
		return LONG_MIN;
	return sbxt_read_long(dir, file, key);
}

static const char CONTAINED[] =
    "echo pid=$$\n"
    "echo pidns=$(readlink /proc/self/ns/pid)\n"
    "echo hostname=$(hostname)\n"
    "echo net=$(ls /sys/class/net | tr '\\n' ' ')\n"
    "grep -E '^(CapEff|CapPrm|CapBnd|CapInh|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status |"
    " tr -d ' \\t' | tr : =\n"
    "echo kcore=$(stat -c %t:%T /proc/kcore 2>/dev/null || echo absent)\n"
    "echo kallsyms=$(stat -c %t:%T /proc/kallsyms)\n"
    "echo vmcoreinfo=$(stat -c %t:%T /sys/kernel/vmcoreinfo 2>/dev/null || echo absent)\n"
    "echo firmware=$(ls -A /sys/firmware 2>/dev/null | wc -l)\n"
    "echo acpi=$(ls -A /proc/acpi 2>/dev/null | wc -l)\n"
    "echo procsys=$(echo x 2>/dev/null > /proc/sys/kernel/hostname && echo written || echo "
    "refused)\n"
    "echo sysro=$(touch /sys/probe 2>/dev/null && echo written || echo refused)\n"
    "echo rootro=$(touch /probe 2>/dev/null && echo written || echo refused)\n"
    "echo tmp=$(touch /tmp/probe && echo written || echo refused)\n"
    "echo dev=$(head -c 4 /dev/zero | wc -c)$(touch /dev/probe 2>/dev/null && echo written)\n"
    "echo unshare=$(unshare -U true 2>/dev/null && echo ran || echo refused)\n"
    "echo fds=$(ls /proc/self/fd | tr '\\n' ' ')\n";

static void test_contained(const struct sbxt_env *e, struct sbx_workers *ws)
{
	static struct run o;
	CHECK(run(ws, base(e), CONTAINED, &o) == 0);
	fprintf(stderr, "contained worker:\n%s", o.out);
	CHECK(exited(&o, 0));
	char host_pidns[64] = "";
	CHECK(readlink("/proc/self/ns/pid", host_pidns, sizeof(host_pidns) - 1) > 0);
	CHECK(!strcmp(value(&o, "pid"), "1"));
	CHECK(value(&o, "pidns")[0] && strcmp(value(&o, "pidns"), host_pidns) != 0);
	CHECK(!strcmp(value(&o, "hostname"), "sandbox"));
	CHECK(!strcmp(value(&o, "net"), "lo"));
	for (const char *const *k =
		 (const char *const[]){"CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb", NULL};
	     *k; k++)
		CHECK(!strcmp(value(&o, *k), "0000000000000000"));
	CHECK(!strcmp(value(&o, "NoNewPrivs"), "1"));
	CHECK(!strcmp(value(&o, "Seccomp"), "2"));
	/* /dev/null over each (kcore and vmcoreinfo: where the kernel has them) */
	CHECK(!strcmp(value(&o, "kcore"), "1:3") || !strcmp(value(&o, "kcore"), "absent"));
	CHECK(!strcmp(value(&o, "kallsyms"), "1:3"));
	CHECK(!strcmp(value(&o, "vmcoreinfo"), "1:3") ||
	      !strcmp(value(&o, "vmcoreinfo"), "absent"));
	CHECK(!strcmp(value(&o, "firmware"), "0"));
	CHECK(!strcmp(value(&o, "acpi"), "0"));
	CHECK(!strcmp(value(&o, "procsys"), "refused"));
	CHECK(!strcmp(value(&o, "sysro"), "refused"));
	CHECK(!strcmp(value(&o, "rootro"), "refused"));
	CHECK(!strcmp(value(&o, "tmp"), "written"));
	CHECK(!strcmp(value(&o, "dev"), "4")); /* /dev/zero reads, /dev takes no file */
	CHECK(!strcmp(value(&o, "unshare"), "refused"));
	CHECK(!strcmp(value(&o, "fds"), "0 1 2 3")); /* 3: ls's own directory */
	sbx_worker_free(&o.w);
}

/* fncall's template: two capabilities kept, the filter handed over. */
static void test_template_mode(const struct sbxt_env *e, struct sbx_workers *ws)
{
	static struct run o;
	struct sbx_worker_config c = base(e);
	c.caps_keep = (1ull << CAP_SYS_ADMIN) | (1ull << CAP_SETPCAP);
	c.seccomp_deferred = true;
	CHECK(
	    run(ws, c,
		"grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -d ' \\t' |"
		" tr : =\n"
		"echo filter=$(wc -c < /proc/self/fd/6)\n",
		&o) == 0);
	fprintf(stderr, "template-mode worker:\n%s", o.out);
	CHECK(exited(&o, 0));
	CHECK(!strcmp(value(&o, "CapEff"), "0000000000200100"));
	CHECK(!strcmp(value(&o, "CapBnd"), "0000000000200100"));
	CHECK(!strcmp(value(&o, "NoNewPrivs"), "1"));
	CHECK(!strcmp(value(&o, "Seccomp"), "0"));
	long n = atol(value(&o, "filter"));
	CHECK(n > 0 && n % 8 == 0); /* struct sock_filter[] */
	sbx_worker_free(&o.w);
}

static void test_memory_limit(const struct sbxt_env *e, struct sbx_workers *ws)
{
	static struct run o;
	char *argv[] = {"dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1", NULL};
	struct sbx_worker_config c = base(e);
	c.memory_bytes = 32ull << 20;
	c.path = "/bin/dd";
	c.argv = argv;
	CHECK(run(ws, c, NULL, &o) == 0);
	uint64_t kills = 0;
	CHECK(sbx_worker_oom_kills(&o.w, false, &kills) == 0);
	fprintf(stderr, "memory hog: code %d status %d, oom kills %llu: %s", o.si.si_code,
		o.si.si_status, (unsigned long long)kills, o.out);
	CHECK(o.si.si_code == CLD_KILLED && o.si.si_status == SIGKILL);
	CHECK(kills >= 1);
	CHECK(cg_long(&o.w, "memory", false,
		      sbx_workers_cgroup_version(ws) == 2 ? "memory.max" : "memory.limit_in_bytes",
		      NULL) == 32l << 20);
	sbx_worker_free(&o.w);
}

static void test_fork_bomb(const struct sbxt_env *e, struct sbx_workers *ws)
{
	static struct run o;
	struct sbx_worker_config c = base(e);
	c.pids_max = 16;
	CHECK(run(ws, c, "bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 2; echo survived",
		  &o) == 0);
	long refused = cg_long(&o.w, "pids", false, "pids.events", "max");
	fprintf(stderr, "fork bomb: %s, forks refused at pids.max=16: %ld\n",
		exited(&o, 0) ? "ended" : "killed", refused);
	CHECK(exited(&o, 0) && strstr(o.out, "survived"));
	CHECK(refused > 0);
	CHECK(cg_long(&o.w, "pids", false, "pids.max", NULL) == 16);
	CHECK(fork() == 0 ? (_exit(0), 0) : wait(NULL) > 0); /* the host still forks */
	sbx_worker_free(&o.w);
}

/* The worker's own children in C (the fncall model): a child joins C
 * through fds 7 (and 8 on v1), runs out of C's memory and is OOM-killed
 * there, while the worker, whose W allows more, reports it. */
static void test_children_cgroup(const struct sbxt_env *e, struct sbx_workers *ws)
{
	static struct run o;
	struct sbx_worker_config c = base(e);
	c.children = true;
	c.children_memory_bytes = 32ull << 20;
	c.children_pids_max = 8;
	CHECK(run(ws, c,
		  "sh -c 'echo 0 >&7; [ -e /proc/self/fd/8 ] && echo 0 >&8;"
		  " exec dd if=/dev/zero of=/dev/null bs=256M count=1' 2>/dev/null\n"
		  "echo child=$?\n"
		  "echo oomfd=$(grep -c '^oom_kill ' /proc/self/fd/9)\n",
		  &o) == 0);
	uint64_t kills = 0, w_kills = 0;
	CHECK(sbx_worker_oom_kills(&o.w, true, &kills) == 0);
	fprintf(stderr, "children cgroup: %soom kills in C %llu\n", o.out,
		(unsigned long long)kills);
	CHECK(exited(&o, 0));
	CHECK(!strcmp(value(&o, "child"), "137")); /* 128 + SIGKILL */
	CHECK(!strcmp(value(&o, "oomfd"), "1"));
	CHECK(kills >= 1);
	int v = sbx_workers_cgroup_version(ws);
	const char *mem = v == 2 ? "memory.max" : "memory.limit_in_bytes";
	CHECK(cg_long(&o.w, "memory", true, mem, NULL) == 32l << 20);
	CHECK(cg_long(&o.w, "memory", false, mem, NULL) == 128l << 20);
	CHECK(cg_long(&o.w, "pids", true, "pids.max", NULL) == 8);
	CHECK(cg_long(&o.w, "pids", false, "pids.max", NULL) == 64);
	if (v == 1) { /* on v1 the worker's own counter saw nothing (not hierarchical) */
		CHECK(sbx_worker_oom_kills(&o.w, false, &w_kills) == 0);
		CHECK(w_kills == 0);
	}
	sbx_worker_free(&o.w);
}

/* On v2 the worker itself sits in W/t beside C (W has processes below it
 * only); on v1 in W. Checked from the host while it waits on its stdin. */
static void test_placement(const struct sbxt_env *e, struct sbx_workers *ws)
{
	int in[2];
	CHECK(pipe2(in, O_CLOEXEC) == 0);
	char *argv[] = {"cat", NULL};
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	int fds[] = {in[0], null, null};
	struct sbx_worker_config c = base(e);
	c.path = "/bin/cat";
	c.argv = argv;
	c.fds = fds;
	c.nfds = 3;
	c.children = true;
	c.children_memory_bytes = 32ull << 20;
	c.children_pids_max = 8;
	struct sbx_worker w;
	CHECK(sbx_worker_spawn(ws, &c, &w) == 0);
	close(in[0]);
	close(null);
	char dir[4096], file[64], line[4200], want[4200];
	int v = sbx_workers_cgroup_version(ws);
	CHECK(sbx_worker_cgroup_path(&w, "memory", false, dir, sizeof(dir)) == 0);
	snprintf(want, sizeof(want), "%s%s", strrchr(dir, '/'), v == 2 ? "/t" : "");
	snprintf(file, sizeof(file), "/proc/%d/cgroup", (int)w.pid);
	bool found = false;
	for (int i = 0; i < 100 && !found; i++) { /* v1: until it joined */
		FILE *f = fopen(file, "re");
		while (f && fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = 0;
			bool mem =
			    v == 2 ? !strncmp(line, "0::", 3) : strstr(line, ":memory:") != NULL;
			size_t n = strlen(line), k = strlen(want);
			if (mem && n >= k && !strcmp(line + n - k, want))
				found = true;
		}
		if (f)
			fclose(f);
		if (!found)
			usleep(20000);
	}
	fprintf(stderr, "placement: %s in %s (v%d)\n", found ? "found" : "NOT found", want, v);
	CHECK(found);
	CHECK(sbx_worker_set_cpu(&w, 200) == 0 || !sbx_workers_have_cpu(ws));
	if (sbx_workers_have_cpu(ws)) {
		long q = v == 2 ? cg_long(&w, "cpu", false, "cpu.max", NULL)
				: cg_long(&w, "cpu", false, "cpu.cfs_quota_us", NULL);
		CHECK(q == 20000);
	}
	close(in[1]); /* cat ends */
	CHECK(sbx_worker_reap(&w, true, NULL) == 1);
	sbx_worker_free(&w);
}

static void test_failure_reported(const struct sbxt_env *e, struct sbx_workers *ws)
{
	static struct run o;
	char *argv[] = {"nothing", NULL};
	struct sbx_worker_config c = base(e);
	c.path = "/bin/nothing-here";
	c.argv = argv;
	c.label = "strata-test";
	CHECK(run(ws, c, NULL, &o) == 0);
	fprintf(stderr, "failing worker: %s", o.out);
	CHECK(exited(&o, 126));
	CHECK(strstr(o.out, "strata-test: exec: No such file or directory") != NULL);
	sbx_worker_free(&o.w);
	struct sbx_worker w;
	c.memory_bytes = 1 << 20; /* below SBX_MIN_MEMORY */
	CHECK(sbx_worker_spawn(ws, &c, &w) == -EINVAL);
}

int main(void)
{
	struct sbxt_env e;
	int r = sbxt_setup_root(&e);
	if (r)
		return r;
	char name[64];
	snprintf(name, sizeof(name), "strata-test-worker-%d", (int)getpid());
	struct sbx_workers *ws = NULL;
	r = sbx_workers_new(&(struct sbx_workers_config){.cgroup_name = name}, &ws);
	if (r < 0) {
		fprintf(stderr, "sbx_workers_new: %s\n", strerror(-r));
		sbxt_teardown(&e);
		return 1;
	}
	int v = sbx_workers_cgroup_version(ws);
	const char *want = getenv("STRATA_TEST_CGROUP_VERSION");
	if (!v || (want && atoi(want) != v)) {
		fprintf(stderr, "%sthe workers chose cgroup v%d (STRATA_TEST_CGROUP_VERSION %s)\n",
			v ? "" : "skip: ", v, want ? want : "unset");
		sbx_workers_free(ws);
		sbxt_teardown(&e);
		return v ? 1 : 77;
	}
	fprintf(stderr, "workers on cgroup v%d%s\n", v, sbx_workers_have_cpu(ws) ? ", cpu" : "");
	test_contained(&e, ws);
	test_template_mode(&e, ws);
	test_memory_limit(&e, ws);
	test_fork_bomb(&e, ws);
	test_children_cgroup(&e, ws);
	test_placement(&e, ws);
	test_failure_reported(&e, ws);
	sbx_workers_free(ws);
	sbxt_teardown(&e);
	fprintf(stderr, "%s\n", sbxt_failed ? "FAIL" : "PASS");
	return sbxt_failed;
}
