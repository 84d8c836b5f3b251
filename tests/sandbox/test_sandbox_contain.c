/* test_sandbox_contain.c — containment: what a hostile workload tries
 * inside a sandbox fails or is contained, the sandbox's agent survives, and
 * the host is unharmed (hostname, mount table, cgroups, processes).
 *   fork bomb (pids limit), memory bomb (memory limit, OOM kill of the
 *   workload only), filling the writable layer (tmpfs size), output flood
 *   (cap), and /bin/probe: mount, ptrace, raw and packet sockets, reboot,
 *   module loading, sysrq-trigger, /proc/kpagecgroup and kcore, user
 *   namespaces, bpf, keyctl, mknod of a disk, /proc/sys writes, network,
 *   changes to the shared read-only /dev (devshared), the chroot escape.
 * Needs root; exits 77 with a reason otherwise. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/sandbox/sbx_test.h"

/* Runs a command until the agent answers "ok" again (the sandbox recovers). */
static bool responsive(struct sbx *s)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	for (int i = 0; i < 50; i++) {
		if (sbxt_sh(s, "echo ok", 5000, &o, &r) == 0 && !strcmp(o.out, "ok\n"))
			return true;
		usleep(100000);
	}
	return false;
}

static void test_fork_bomb(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.pids_max = 64;
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	const char *pids = sbx_cgroup_path(s, "pids");
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", pids ? pids : "");
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_sh(s, "bomb() { bomb | bomb & }; bomb; sleep 2", 3000, &o, &r) == 0);
	long refused = sbxt_read_long(dir, "pids.events", "max");
	fprintf(stderr, "fork bomb: %s; forks refused at pids.max=64: %ld; pids now %ld\n",
		r.timed_out ? "killed at its timeout" : "ended", refused,
		sbxt_read_long(dir, "pids.current", NULL));
	CHECK(refused > 0);
	CHECK(sbxt_read_long(dir, "pids.current", NULL) <= 64);
	CHECK(responsive(s));
	CHECK(fork() == 0 ? (_exit(0), 0) : wait(NULL) > 0); /* host still forks */
	sbx_destroy(s);
}

static void test_memory_bomb(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.memory_bytes = 64ull << 20;
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_sh(s, "dd if=/dev/zero of=/dev/null bs=512M count=1", 20000, &o, &r) == 0);
	fprintf(stderr, "memory bomb: exit %d signal %d: %s", r.exit_code, r.signo, o.err);
	CHECK(r.signo == SIGKILL || r.exit_code != 0);
	CHECK(responsive(s)); /* the agent was not the OOM victim */
	sbx_destroy(s);
}

/* A busy loop under cpu_millis = 100 (a tenth of a core) gets throttled. */
static void test_cpu_limit(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.cpu_millis = 100;
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	const char *cg = sbx_cgroup_path(s, "cpu");
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", cg ? cg : "");
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_sh(s, "while :; do :; done", 1000, &o, &r) == 0 && r.timed_out);
	long throttled = -1;
	char p[4200], key[64];
	long v;
	snprintf(p, sizeof(p), "%s/cpu.stat", dir);
	FILE *f = fopen(p, "re");
	while (f && fscanf(f, "%63s %ld", key, &v) == 2)
		if (!strcmp(key, "nr_throttled"))
			throttled = v;
	if (f)
		fclose(f);
	fprintf(stderr, "cpu limit: busy loop throttled %ld times in 1 s at 100 millicores\n",
		throttled);
	CHECK(throttled > 0);
	sbx_destroy(s);
}

static void test_disk_fill(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.disk_bytes = 16ull << 20;
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_sh(s, "dd if=/dev/zero of=/big bs=1M count=64", 20000, &o, &r) == 0);
	fprintf(stderr, "disk fill: exit %d: %s", r.exit_code, o.err);
	CHECK(r.exit_code != 0 && strstr(o.err, "No space"));
	CHECK(sbxt_sh(s, "rm /big && echo gone", 5000, &o, &r) == 0 && !strcmp(o.out, "gone\n"));
	sbx_destroy(s);
}

static void test_probes(struct sbxt_env *e)
{
	static const char *const probes[] = {
	    "mount",	   "raw",   "packet",	     "reboot",	 "module",     "sysrq",
	    "kpagecgroup", "kcore", "userns",	     "bpf",	 "keyctl",     "mknod",
	    "sysctl",	   "net",   "chroot-escape", "agentmem", "devnode",    "devshared",
	    "projid",	   "caps",  "staging",	     "kconfig",	 "vmcoreinfo", "audit"};
	struct sbx_config cfg = sbxt_config(e);
	struct sbx *s = NULL;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		const char *argv[] = {"/bin/probe", probes[i], NULL};
		struct sbx_exec_opts opts = {.argv = argv, .timeout_ms = 10000};
		int rc = sbxt_exec(s, &opts, &o, &r);
		fprintf(stderr, "probe %-12s %s", probes[i], o.out);
		CHECK(rc == 0 && r.exit_code == 0);
	}
	/* ptrace of a process outside: our own host pid (not even visible inside). */
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	const char *argv[] = {"/bin/probe", "ptrace", pid, NULL};
	struct sbx_exec_opts opts = {.argv = argv, .timeout_ms = 10000};
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && r.exit_code == 0);
	fprintf(stderr, "probe ptrace       %s", o.out);
	CHECK(sbxt_sh(s, "echo h > /proc/sysrq-trigger", 5000, &o, &r) == 0 && r.exit_code != 0);
	CHECK(sbxt_sh(s, "mount -t tmpfs none /mnt", 5000, &o, &r) == 0 && r.exit_code != 0);
	/* Last: the chroot escape leaves this sandbox's root changed. */
	const char *chr[] = {"/bin/probe", "chroot", NULL};
	opts = (struct sbx_exec_opts){.argv = chr, .timeout_ms = 10000};
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && r.exit_code == 0);
	fprintf(stderr, "probe chroot       %s", o.out);
	char marker[400];
	snprintf(marker, sizeof(marker), "%s/escape-marker", e->rootfs);
	CHECK(access(marker, F_OK) < 0);
	sbx_destroy(s);
}

static int count_children(void)
{
	int n = 0;
	while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
		n++;
	return n;
}

int main(void)
{
	struct sbxt_env e;
	char host0[256], host1[256];
	gethostname(host0, sizeof(host0));
	int r = sbxt_setup(&e, 4);
	if (r)
		return r;
	test_probes(&e);
	test_fork_bomb(&e);
	test_memory_bomb(&e);
	test_disk_fill(&e);
	test_cpu_limit(&e);
	sbxt_teardown(&e);
	/* The host is unharmed: same hostname and mounts, nothing left over. */
	gethostname(host1, sizeof(host1));
	CHECK(!strcmp(host0, host1));
	CHECK(sbxt_mounts_with("strata-sbx-test") == 0);
	CHECK(count_children() == 0);
	return sbxt_failed;
}
