/* test_sandbox_basic.c — container sandboxes on a busybox rootfs: exec
 * (output, exit codes, signals, stdin, env, cwd, users, timeouts, output
 * cap), file operations (confined to the sandbox's overlay), isolation
 * (the agent is pid 1, hostname, only lo, own cgroup namespace, sandboxes do
 * not see each other, /dev works: devices, private /dev/shm, mqueue, a pty)
 * and creation latency with and without the pools,
 * printed for the log. Needs root; exits 77 with a reason otherwise. */
#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/sandbox/sbx_test.h"

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void test_exec(struct sbx *s)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_sh(s, "echo hello; echo err >&2; exit 7", 0, &o, &r) == 0);
	CHECK(!strcmp(o.out, "hello\n") && !strcmp(o.err, "err\n") && r.exit_code == 7);
	CHECK(sbxt_sh(s, "kill -KILL $$", 0, &o, &r) == 0 && r.signo == SIGKILL);
	CHECK(sbxt_sh(s, "sleep 30", 300, &o, &r) == 0 && r.timed_out && r.duration_us < 3000000);

	const char *cat[] = {"cat", NULL};
	struct sbx_exec_opts opts = {.argv = cat, .stdin_data = "in\n", .stdin_len = 3};
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && !strcmp(o.out, "in\n"));

	const char *envcmd[] = {"/bin/sh", "-c", "echo $A-$B; pwd; id -u; id -g", NULL};
	const char *env[] = {"A=1", "B=two", NULL};
	opts = (struct sbx_exec_opts){.argv = envcmd, .env = env, .cwd = "/tmp", .user = "user"};
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && !strcmp(o.out, "1-two\n/tmp\n1000\n1000\n"));
	opts = (struct sbx_exec_opts){.argv = envcmd, .user = "1234:4321"};
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && strstr(o.out, "1234\n4321\n"));
	opts = (struct sbx_exec_opts){.argv = envcmd, .user = "1000"}; /* group from passwd */
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && strstr(o.out, "1000\n1000\n"));
	opts = (struct sbx_exec_opts){.argv = envcmd, .user = "1abc"};
	CHECK(sbxt_exec(s, &opts, &o, &r) == -ENOENT);
	opts = (struct sbx_exec_opts){.argv = envcmd, .user = "nosuchuser"};
	CHECK(sbxt_exec(s, &opts, &o, &r) == -ENOENT);
	const char *nope[] = {"nosuchcommand", NULL};
	opts = (struct sbx_exec_opts){.argv = nope};
	CHECK(sbxt_exec(s, &opts, &o, &r) == -ENOENT);
	/* Default environment: PATH finds busybox applets. */
	CHECK(sbxt_sh(s, "echo $PATH", 0, &o, &r) == 0 && strstr(o.out, "/bin"));
	/* A non-root user holds no capabilities. */
	opts = (struct sbx_exec_opts){
	    .argv = (const char *[]){"/bin/sh", "-c", "grep CapEff /proc/self/status", NULL},
	    .user = "user"};
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && strstr(o.out, "0000000000000000"));
}

/* The strata daemons raise their soft fd limit to the hard one (main()
 * does so here too, before staging); a sandbox still starts with 1024. */
static void test_fd_limit(struct sbx *s)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	struct rlimit host;
	char want[64];
	CHECK(getrlimit(RLIMIT_NOFILE, &host) == 0);
	if (host.rlim_max <= SBX_SANDBOX_NOFILE)
		return; /* nothing to give back */
	snprintf(want, sizeof(want), "%d\n%llu\n", SBX_SANDBOX_NOFILE,
		 (unsigned long long)host.rlim_max);
	CHECK(sbxt_sh(s, "ulimit -Sn; ulimit -Hn", 0, &o, &r) == 0 && r.exit_code == 0);
	CHECK(!strcmp(o.out, want));
}

static void test_flood(struct sbx *s)
{
	const char *yes[] = {"yes", NULL};
	struct sbx_exec_opts opts = {.argv = yes, .timeout_ms = 1500, .output_cap = 1 << 20};
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0);
	CHECK(r.truncated && r.timed_out && o.total == 1 << 20 && r.stdout_bytes > (1 << 20));
	fprintf(stderr, "flood: yes produced %llu bytes in 1.5 s, %zu forwarded\n",
		(unsigned long long)r.stdout_bytes, o.total);
}

static void test_files(struct sbxt_env *e, struct sbx *s)
{
	void *d = NULL;
	size_t n = 0;
	char host[PATH_MAX + 64];
	CHECK(sbx_file_write(s, "/tmp/x", "payload", 7, 0600) == 0);
	CHECK(sbx_file_read(s, "/tmp/x", 0, 64, &d, &n, NULL) == 0 && n == 7 &&
	      !memcmp(d, "payload", 7));
	free(d);
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_sh(s, "cat /tmp/x", 0, &o, &r) == 0 && !strcmp(o.out, "payload"));
	CHECK(sbx_file_mkdir(s, "/data/a/b", 0755, true) == 0);
	struct sbx_stat st;
	CHECK(sbx_file_stat(s, "/data/a/b", &st) == 0 && st.type == 2);
	struct sbx_dirent *ents = NULL;
	size_t ne = 0;
	CHECK(sbx_file_list(s, "/bin", &ents, &ne) == 0 && ne > 100);
	sbx_dirents_free(ents, ne);
	CHECK(sbx_file_remove(s, "/data", true) == 0);
	CHECK(sbx_file_stat(s, "/data", &st) == -ENOENT);
	/* ".." cannot leave the sandbox root, and writes never reach the lower layer. */
	CHECK(sbx_file_write(s, "/../../../../etc/strata-escape", "x", 1, 0644) == 0);
	CHECK(access("/etc/strata-escape", F_OK) < 0);
	snprintf(host, sizeof(host), "%s/etc/strata-escape", e->rootfs);
	CHECK(access(host, F_OK) < 0);
	CHECK(sbx_file_remove(s, "/etc/group", false) == 0); /* a whiteout in upper */
	CHECK(sbx_file_stat(s, "/etc/group", &st) == -ENOENT);
	snprintf(host, sizeof(host), "%s/etc/group", e->rootfs);
	CHECK(access(host, F_OK) == 0);
}

static void test_isolation(struct sbxt_env *e, struct sbx *a, struct sbx *b)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	char host[256];
	gethostname(host, sizeof(host));
	CHECK(sbxt_sh(
		  a,
		  "cat /proc/1/comm; hostname; ls /sys/class/net; cat /proc/self/cgroup | head -1",
		  0, &o, &r) == 0);
	fprintf(stderr, "inside: %s", o.out);
	CHECK(!strncmp(o.out, "strata-agent\nsbx-test\nlo\n", 24));
	CHECK(strstr(o.out, ":/\n") != NULL);
	CHECK(sbxt_sh(a, "ps -o pid,comm | wc -l", 0, &o, &r) == 0 && atoi(o.out) <= 5);
	CHECK(sbxt_sh(a, "ip -o link | grep -c UP", 0, &o, &r) == 0 && atoi(o.out) == 1);
	CHECK(sbxt_sh(a, "echo a > /tmp/only-a", 0, &o, &r) == 0 && r.exit_code == 0);
	CHECK(sbxt_sh(b, "test -e /tmp/only-a", 0, &o, &r) == 0 && r.exit_code == 1);
	CHECK(sbxt_sh(a, "ls /dev | tr '\\n' ' '", 0, &o, &r) == 0);
	fprintf(stderr, "/dev: %s\n", o.out);
	CHECK(strstr(o.out, "null") && strstr(o.out, "pts") && !strstr(o.out, "sda") &&
	      !strstr(o.out, "vda"));
	CHECK(sbxt_sh(a, "echo x > /dev/null && head -c 4 /dev/urandom | wc -c", 0, &o, &r) == 0 &&
	      atoi(o.out) == 4);
	/* Devices, shm, mqueue and a pty work; /dev/shm is private. */
	const char *devok[] = {"/bin/probe", "devok", NULL};
	struct sbx_exec_opts dopts = {.argv = devok, .timeout_ms = 10000};
	CHECK(sbxt_exec(a, &dopts, &o, &r) == 0 && r.exit_code == 0);
	fprintf(stderr, "%s", o.out);
	CHECK(sbxt_sh(b, "test -e /dev/shm/probe-shm", 0, &o, &r) == 0 && r.exit_code == 1);
	char hn[256];
	gethostname(hn, sizeof(hn));
	CHECK(!strcmp(hn, host));
	(void)e;
}

/* 1 MiB through stdin and back, in one exec. */
static void test_big_stdin(struct sbx *s)
{
	size_t n = 1 << 20;
	char *in = malloc(n);
	for (size_t i = 0; i < n; i++)
		in[i] = (char)('a' + i % 26);
	const char *argv[] = {"/bin/sh", "-c", "cat | md5sum; wc -c < /dev/null", NULL};
	struct sbx_exec_opts opts = {.argv = argv, .stdin_data = in, .stdin_len = n};
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && r.exit_code == 0 && strlen(o.out) > 32);
	const char *wc[] = {"wc", "-c", NULL};
	opts.argv = wc;
	CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && atoi(o.out) == (int)n);
	free(in);
}

static void test_host_network(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.network = SBX_NET_HOST;
	struct sbx *s = NULL;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	CHECK(sbx_create(e->rt, &cfg, &s) == 0);
	if (!s)
		return;
	/* The host's network namespace itself, not a copy (the interface count
	 * cannot tell: a VM may have lo alone). */
	char host_ns[64] = "";
	ssize_t n = readlink("/proc/self/ns/net", host_ns, sizeof(host_ns) - 1);
	CHECK(n > 0);
	CHECK(sbxt_sh(s, "readlink /proc/self/ns/net", 0, &o, &r) == 0 &&
	      strncmp(o.out, host_ns, strlen(host_ns)) == 0 && o.out[strlen(host_ns)] == '\n');
	sbx_destroy(s);
	cfg.network = SBX_NET_NONE;
	cfg.memory_bytes = 1 << 20;
	CHECK(sbx_create(e->rt, &cfg, &s) == -EINVAL);
	cfg.memory_bytes = 0;
	cfg.rootfs = "relative/path";
	CHECK(sbx_create(e->rt, &cfg, &s) == -EINVAL);
	cfg.rootfs = "/nonexistent-rootfs";
	CHECK(sbx_create(e->rt, &cfg, &s) == -ENOENT);
}

struct worker {
	struct sbxt_env *e;
	int n, ok, in_cgroups;
};

/* Whether pid is listed in the cgroup.procs of the sandbox's cgroup of
 * every controller (the staging child joined them). */
static bool in_own_cgroups(struct sbx *s)
{
	static const char *const ctrl[] = {"memory", "cpu", "pids"};
	char p[PATH_MAX + 32], line[32];
	for (size_t i = 0; i < sizeof(ctrl) / sizeof(ctrl[0]); i++) {
		const char *dir = sbx_cgroup_path(s, ctrl[i]);
		if (!dir)
			return false;
		snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
		FILE *f = fopen(p, "re");
		bool found = false;
		while (f && fgets(line, sizeof(line), f))
			found |= atoi(line) == (int)sbx_pid(s);
		if (f)
			fclose(f);
		if (!found)
			return false;
	}
	return true;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct sbx_config cfg = sbxt_config(w->e);
	for (int i = 0; i < w->n; i++) {
		struct sbx *s = NULL;
		struct sbx_exec_result r;
		const char *argv[] = {"true", NULL};
		struct sbx_exec_opts opts = {.argv = argv};
		int rc = sbx_create(w->e->rt, &cfg, &s);
		if (rc < 0) {
			fprintf(stderr, "concurrent: create: %s\n", strerror(-rc));
			continue;
		}
		w->in_cgroups += in_own_cgroups(s);
		rc = sbx_exec(s, &opts, NULL, NULL, &r);
		if (rc == 0 && r.exit_code == 0)
			w->ok++;
		else
			fprintf(stderr, "concurrent: exec: %s, exit %d\n", strerror(-rc),
				r.exit_code);
		sbx_destroy(s);
	}
	return NULL;
}

/* nthreads threads create, exec and destroy at once: the runtime is
 * shared. With more of them than stagings may run at once
 * (SBX_STAGING_MAX, 12), callers of an empty pool wait for it or stage
 * inline; every create must still succeed, each agent in its own cgroups. */
static void test_concurrent(struct sbxt_env *e, int nthreads, int each)
{
	pthread_t t[64];
	struct worker w[64];
	uint64_t t0 = now_us();
	for (int i = 0; i < nthreads; i++) {
		w[i] = (struct worker){.e = e, .n = each};
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	int ok = 0, in_cg = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		ok += w[i].ok;
		in_cg += w[i].in_cgroups;
	}
	double s = (now_us() - t0) / 1e6;
	fprintf(stderr, "concurrent: %d threads, %d of %d create+exec+destroy in %.2f s (%.0f/s)\n",
		nthreads, ok, nthreads * each, s, ok / s);
	CHECK(ok == nthreads * each);
	CHECK(in_cg == nthreads * each);
}

/* The cgroup v2 driver, whatever this machine mounts: a sandbox with its
 * limits written, or -ENOTSUP (no v2 controllers) with nothing left over. */
static void test_cgroup_v2(struct sbxt_env *e)
{
	char state[400], gone[2][300];
	snprintf(state, sizeof(state), "%s/state-v2", e->dir);
	struct sbx_runtime_config rc = {.agent_path = e->agent,
					.state_dir = state,
					.cgroup_name = e->cgname,
					.cgroup_version = 2};
	struct sbx_runtime *rt = NULL;
	int r = sbx_runtime_new(&rc, &rt);
	snprintf(gone[0], sizeof(gone[0]), "/sys/fs/cgroup/unified/%s", e->cgname);
	snprintf(gone[1], sizeof(gone[1]), "/sys/fs/cgroup/%s", e->cgname);
	if (r == -ENOTSUP) {
		fprintf(stderr, "cgroup v2: no memory/pids controllers on v2 here\n");
		CHECK(access(gone[0], F_OK) < 0 && access(gone[1], F_OK) < 0);
		return;
	}
	CHECK(r == 0 && sbx_runtime_cgroup_version(rt) == 2);
	struct sbx_config cfg = sbxt_config(e);
	cfg.memory_bytes = 64ull << 20;
	struct sbx *s = NULL;
	CHECK(rt && sbx_create(rt, &cfg, &s) == 0);
	if (s) {
		char p[4200];
		static struct sbxt_out o;
		struct sbx_exec_result er;
		snprintf(p, sizeof(p), "%s/memory.max", sbx_cgroup_path(s, "memory"));
		FILE *f = fopen(p, "re");
		long long v = 0;
		CHECK(f && fscanf(f, "%lld", &v) == 1 && v == 64ll << 20);
		if (f)
			fclose(f);
		CHECK(sbxt_sh(s, "cat /proc/self/cgroup", 0, &o, &er) == 0 &&
		      !strcmp(o.out, "0::/\n"));
		sbx_destroy(s);
		fprintf(stderr, "cgroup v2: sandbox ran with memory.max %lld\n", v);
	}
	sbx_runtime_free(rt);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Creates and destroys n sandboxes one after the other, reporting p50/p99. */
static void measure(struct sbxt_env *e, const char *label, int n)
{
	uint64_t *c = calloc((size_t)n, sizeof(*c)), *d = calloc((size_t)n, sizeof(*d));
	struct sbx_config cfg = sbxt_config(e);
	int ok = 0;
	for (int i = 0; i < n; i++) {
		struct sbx *s = NULL;
		uint64_t t0 = now_us();
		int r = sbx_create(e->rt, &cfg, &s);
		uint64_t t1 = now_us();
		if (r < 0) {
			fprintf(stderr, "create: %s\n", strerror(-r));
			CHECK(r == 0);
			break;
		}
		sbx_destroy(s);
		c[ok] = t1 - t0;
		d[ok++] = now_us() - t1;
		usleep(2000); /* let the pool thread refill, as between requests */
	}
	if (ok) {
		qsort(c, (size_t)ok, sizeof(*c), cmp_u64);
		qsort(d, (size_t)ok, sizeof(*d), cmp_u64);
		fprintf(stderr,
			"latency %s: n=%d create p50 %.2f ms p99 %.2f ms; destroy (kill; teardown "
			"continues in the background) p50 %.2f ms p99 %.2f ms\n",
			label, ok, c[ok / 2] / 1000.0, c[(ok * 99) / 100] / 1000.0,
			d[ok / 2] / 1000.0, d[(ok * 99) / 100] / 1000.0);
	}
	free(c);
	free(d);
}

/* The writable layer's size limit: the staging tmpfs is made with START's
 * default (256 MiB, 131072 inodes), which the agent then keeps without a
 * remount (agent_stage.c); any other size is a remount. df in the sandbox
 * sees the upper layer's tmpfs: the size asked for, either way (filling
 * the layer: test_sandbox_contain). */
static void test_disk_sizes(struct sbxt_env *e)
{
	static const struct {
		uint64_t bytes;
		const char *kib, *inodes;
	} sizes[] = {{0, " 262144 ", " 131072 "},
		     {256ull << 20, " 262144 ", " 131072 "},
		     {64ull << 20, " 65536 ", " 32768 "},
		     {300ull << 20, " 307200 ", " 153600 "}};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct sbx_config cfg = sbxt_config(e);
		cfg.disk_bytes = sizes[i].bytes;
		struct sbx *s = NULL;
		static struct sbxt_out o;
		struct sbx_exec_result r;
		CHECK(sbx_create(e->rt, &cfg, &s) == 0);
		if (!s)
			continue;
		CHECK(sbxt_sh(s, "df -k / | tail -1; df -i / | tail -1", 0, &o, &r) == 0 &&
		      strstr(o.out, sizes[i].kib) && strstr(o.out, sizes[i].inodes));
		if (!strstr(o.out, sizes[i].kib) || !strstr(o.out, sizes[i].inodes))
			fprintf(stderr, "disk %llu: %s", (unsigned long long)sizes[i].bytes, o.out);
		sbx_destroy(s);
	}
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	struct sbxt_env e;
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) { /* as daemon_raise_fd_limit() */
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	int fds0 = count_fds();
	int r = sbxt_setup(&e, 8);
	if (r)
		return r;
	fprintf(stderr, "cgroup v%d\n", sbx_runtime_cgroup_version(e.rt));
	struct sbx_config cfg = sbxt_config(&e);
	struct sbx *a = NULL, *b = NULL;
	r = sbx_create(e.rt, &cfg, &a);
	if (r == 0)
		r = sbx_create(e.rt, &cfg, &b);
	if (r < 0) {
		fprintf(stderr, "sbx_create: %s\n", strerror(-r));
		sbx_destroy(a);
		sbxt_teardown(&e);
		return 1;
	}
	test_exec(a);
	test_fd_limit(a);
	test_flood(a);
	test_files(&e, a);
	test_isolation(&e, a, b);
	test_big_stdin(b);
	/* The sandboxes' mounts are invisible to the host. */
	CHECK(sbxt_mounts_with(e.dir) == 0);
	sbx_destroy(a);
	sbx_destroy(b);
	test_host_network(&e);
	test_disk_sizes(&e);
	test_cgroup_v2(&e);
	test_concurrent(&e, 4, 8);
	test_concurrent(&e, 32, 3);
	measure(&e, "pooled", 100);
	sbxt_teardown(&e);

	r = sbxt_setup(&e, 0);
	if (r)
		return r;
	measure(&e, "no pool", 30);
	sbxt_teardown(&e);
	CHECK(sbxt_mounts_with("strata-sbx-test") == 0);
	CHECK(count_fds() == fds0); /* every fd of every sandbox was closed */
	return sbxt_failed;
}
