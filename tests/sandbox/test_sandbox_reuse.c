/* test_sandbox_reuse.c — what the runtime reuses between sandboxes leaks
 * nothing from one to the next: network namespaces (network "none") go from
 * a destroyed sandbox to a later one only when nothing of the first is left
 * in them (netns.c), and cgroup slots are reset (cgroup.c).
 *
 * Each sandbox first checks, from inside, that it sees nothing of earlier
 * ones (/bin/probe netclean: no socket in any /proc/net table, sockstat
 * empty, only lo and as set up, the ports and unix name the previous one
 * held are free, no file it left in /tmp or /dev/shm), then leaves all it
 * can (probe netdirty: listening, bound and connected sockets with unread
 * data, loopback traffic, files) and is destroyed with that running. A
 * later sandbox that reads lo's traffic counters above zero runs in a reused
 * namespace: at least one must. Then sandboxes that leave a TIME_WAIT socket
 * and an IPv6 flow label (which outlive their processes): the next ones must
 * not see them. IPC namespaces likewise (probe ipcclean / ipcdirty): SysV
 * segments, message queues, semaphores and POSIX message queues left by a
 * sandbox, or a changed /dev/mqueue, are never seen by a later one, and at
 * least one sandbox runs in a reused IPC namespace (its first SysV id is
 * not 0). Both also with user namespaces (sandboxes of different id
 * ranges in the reused namespaces; root inside cannot chmod /dev/mqueue). Also: a reused cgroup
 * slot has the new sandbox's limits, and a runtime freed leaves alone the slots of another one of
 * the process under the same cgroup name. Needs root; exits 77 with a reason otherwise. */
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/sandbox/sbx_test.h"

/* Runs netclean in a new sandbox; *reused: lo had carried traffic. Returns
 * the sandbox (or NULL). */
static struct sbx *create_clean(struct sbxt_env *e, const struct sbx_config *cfg, bool *reused)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	struct sbx *s = NULL;
	*reused = false;
	CHECK(sbx_create(e->rt, cfg, &s) == 0);
	if (!s)
		return NULL;
	const char *argv[] = {"/bin/probe", "netclean", NULL};
	struct sbx_exec_opts opts = {.argv = argv, .timeout_ms = 10000};
	int rc = sbxt_exec(s, &opts, &o, &r);
	CHECK(rc == 0 && r.exit_code == 0);
	if (rc != 0 || r.exit_code != 0)
		fprintf(stderr, "%s", o.out);
	const char *rx = strstr(o.out, "rx_bytes ");
	*reused = rx && atol(rx + 9) > 0;
	return s;
}

static void test_netns_reuse(struct sbxt_env *e, bool userns)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.userns = userns;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	int reused = 0, rounds = 0;
	for (; rounds < 40 && reused < 3; rounds++) {
		bool re;
		struct sbx *s = create_clean(e, &cfg, &re);
		if (!s)
			return;
		reused += re;
		/* Leave everything running; the probe says when it holds it. */
		CHECK(sbxt_sh(s,
			      "/bin/probe netdirty >/tmp/ready 2>&1 </dev/null & "
			      "while [ ! -s /tmp/ready ]; do usleep 1000; done; cat /tmp/ready",
			      10000, &o, &r) == 0 &&
		      strstr(o.out, "holding sockets"));
		sbx_destroy(s);
		usleep(20000); /* teardown is asynchronous */
	}
	fprintf(stderr, "netns reuse%s: %d of %d sandboxes ran in a reused namespace\n",
		userns ? " (user namespaces)" : "", reused, rounds);
	CHECK(reused >= 1);

	/* Leftovers that outlive the processes: the namespace must not be reused. */
	for (int i = 0; i < 6; i++) {
		bool re;
		struct sbx *s = create_clean(e, &cfg, &re);
		if (!s)
			return;
		const char *argv[] = {"/bin/probe", "netdirty", "linger", NULL};
		struct sbx_exec_opts opts = {.argv = argv, .timeout_ms = 10000};
		CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && r.exit_code == 0);
		if (i == 0)
			fprintf(stderr, "%s", o.out);
		sbx_destroy(s);
		usleep(20000);
	}
	bool re;
	struct sbx *s = create_clean(e, &cfg, &re);
	sbx_destroy(s);
}

/* Runs ipcclean in sandbox s; returns the id of its segment (> 0: the IPC
 * namespace was used before), or -1 if it saw something of an earlier one. */
static int ipc_clean(struct sbx *s)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	const char *argv[] = {"/bin/probe", "ipcclean", NULL};
	struct sbx_exec_opts opts = {.argv = argv, .timeout_ms = 10000};
	int rc = sbxt_exec(s, &opts, &o, &r);
	CHECK(rc == 0 && r.exit_code == 0);
	if (rc != 0 || r.exit_code != 0) {
		fprintf(stderr, "%s", o.out);
		return -1;
	}
	const char *id = strstr(o.out, "shm id ");
	return id ? atoi(id + 7) : -1;
}

/* Every other sandbox leaves SysV objects and a POSIX queue (every fourth
 * also chmods /dev/mqueue): its IPC namespace must not be reused, and no
 * later sandbox may see any of it. Clean ones are reused. */
static void test_ipcns_reuse(struct sbxt_env *e, bool userns)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.userns = userns;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	int reused = 0, rounds = 0;
	for (; rounds < 40 && (reused < 3 || rounds < 12); rounds++) {
		struct sbx *s = NULL;
		CHECK(sbx_create(e->rt, &cfg, &s) == 0);
		if (!s)
			return;
		int id = ipc_clean(s);
		reused += id > 0;
		if (rounds % 2) {
			const char *argv[] = {"/bin/probe", "ipcdirty",
					      rounds % 4 == 3 ? "chmod" : NULL, NULL};
			struct sbx_exec_opts opts = {.argv = argv, .timeout_ms = 10000};
			CHECK(sbxt_exec(s, &opts, &o, &r) == 0 && r.exit_code == 0);
			if (rounds < 4)
				fprintf(stderr, "%s", o.out);
		}
		sbx_destroy(s);
		usleep(20000); /* teardown is asynchronous */
	}
	fprintf(stderr, "ipcns reuse%s: %d of %d sandboxes ran in a reused namespace\n",
		userns ? " (user namespaces)" : "", reused, rounds);
	CHECK(reused >= 1);
}

/* With fresh_netns, no sandbox ever runs in an earlier one's network or
 * IPC namespace. */
static void test_fresh_netns(struct sbxt_env *e)
{
	char state[400], cg[80];
	snprintf(state, sizeof(state), "%s/fresh", e->state);
	snprintf(cg, sizeof(cg), "%s-fresh", e->cgname);
	struct sbx_runtime_config rc = {.agent_path = e->agent,
					.state_dir = state,
					.cgroup_name = cg,
					.pool_size = 2,
					.fresh_netns = true};
	struct sbx_runtime *rt = NULL;
	CHECK(sbx_runtime_new(&rc, &rt) == 0);
	if (!rt)
		return;
	struct sbx_runtime *keep = e->rt;
	e->rt = rt;
	struct sbx_config cfg = sbxt_config(e);
	static struct sbxt_out o;
	struct sbx_exec_result r;
	int reused = 0;
	for (int i = 0; i < 8; i++) {
		bool re;
		struct sbx *s = create_clean(e, &cfg, &re);
		if (!s)
			break;
		reused += re;
		CHECK(ipc_clean(s) == 0); /* a fresh IPC namespace too */
		CHECK(sbxt_sh(s,
			      "/bin/probe netdirty >/tmp/ready 2>&1 </dev/null & "
			      "while [ ! -s /tmp/ready ]; do usleep 1000; done",
			      10000, &o, &r) == 0);
		sbx_destroy(s);
		usleep(20000);
	}
	CHECK(reused == 0);
	e->rt = keep;
	sbx_runtime_free(rt);
}

/* A cgroup file of sandbox s, found from /proc/<pid>/cgroup and the v1
 * mount point: not through sbx_cgroup_path, which makes the runtime
 * rewrite the slot's limits for the next sandbox (cg_slot_apply). */
static long cg_read(struct sbx *s, const char *ctrl, const char *file)
{
	char p[4200], line[4096], dir[4200] = "";
	snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)sbx_pid(s));
	FILE *f = fopen(p, "re");
	while (f && fgets(line, sizeof(line), f)) {
		char *c = strchr(line, ':'), *q = c ? strchr(c + 1, ':') : NULL;
		if (!q)
			continue;
		*q = 0;
		if (strstr(c + 1, ctrl)) {
			q[1 + strcspn(q + 1, "\n")] = 0;
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s", ctrl, q + 1);
		}
	}
	if (f)
		fclose(f);
	return sbxt_read_long(dir, file, NULL);
}

/* A reused cgroup slot carries the new sandbox's limits, not the old ones;
 * one with the same limits is not rewritten (and need not be). */
static void test_slot_reuse(struct sbxt_env *e)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	static const uint32_t pids[] = {0, 40, 40, 0, 0, 40, 33, 0};
	for (size_t i = 0; i < sizeof(pids) / sizeof(pids[0]); i++) {
		struct sbx_config cfg = sbxt_config(e);
		cfg.pids_max = pids[i];
		cfg.cpu_millis = pids[i] ? 250 : 0;
		struct sbx *s = NULL;
		CHECK(sbx_create(e->rt, &cfg, &s) == 0);
		if (!s)
			return;
		CHECK(cg_read(s, "pids", "pids.max") == (pids[i] ? pids[i] : 1024));
		long quota = cg_read(s, "cpu", "cpu.cfs_quota_us");
		CHECK(quota == LONG_MIN || quota == (pids[i] ? 25000 : -1));
		CHECK(sbxt_sh(s, "true", 5000, &o, &r) == 0 && r.exit_code == 0);
		if (i == 4) {
			/* Someone with the path changes a limit: the next sandbox in
			 * the slot must not keep it. */
			const char *cg = sbx_cgroup_path(s, "pids");
			char p[4200];
			snprintf(p, sizeof(p), "%s/pids.max", cg ? cg : "");
			FILE *f = fopen(p, "we");
			CHECK(f && fputs("77", f) >= 0);
			if (f)
				fclose(f);
		}
		sbx_destroy(s);
		usleep(20000);
	}
}

/* The sbx-* directories in a cgroup directory. */
static int count_slots(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += !strncmp(de->d_name, "sbx-", 4);
	if (d)
		closedir(d);
	return n;
}

/* Two runtimes of one process under the same cgroup name: their slots
 * must not collide, and freeing one must leave the other's (in use, or
 * empty in its spare list) alone; each kept slot is used again below. */
static void test_shared_subtree(struct sbxt_env *e)
{
	struct sbx_config cfg = sbxt_config(e);
	static struct sbxt_out o;
	struct sbx_exec_result r;
	struct sbx *s = NULL, *held[6] = {NULL};
	/* Six alive at once, then none: their slots wait in e->rt's spare
	 * list (the pool, full meanwhile, takes none of them). */
	for (int i = 0; i < 6; i++)
		CHECK(sbx_create(e->rt, &cfg, &held[i]) == 0);
	char base[4096] = "";
	const char *slot = held[0] ? sbx_cgroup_path(held[0], "pids") : NULL;
	snprintf(base, sizeof(base), "%s", slot ? slot : "/nonexistent");
	*strrchr(base, '/') = 0;
	for (int i = 0; i < 6; i++)
		sbx_destroy(held[i]);
	usleep(200000);
	int slots = count_slots(base);
	char state[400];
	snprintf(state, sizeof(state), "%s/twin", e->state);
	struct sbx_runtime_config rc = {
	    .agent_path = e->agent, .state_dir = state, .cgroup_name = e->cgname, .pool_size = 2};
	struct sbx_runtime *twin = NULL;
	CHECK(sbx_runtime_new(&rc, &twin) == 0);
	if (!twin)
		return;
	struct sbx *t = NULL;
	CHECK(sbx_create(twin, &cfg, &t) == 0);
	CHECK(t && sbxt_sh(t, "true", 5000, &o, &r) == 0 && r.exit_code == 0);
	sbx_destroy(t);
	sbx_runtime_free(twin);
	int after = count_slots(base);
	fprintf(stderr, "shared subtree: %d slot directories before the twin, %d after it\n", slots,
		after);
	CHECK(slots >= 6 && after == slots);
	for (int i = 0; i < 8; i++) {
		int rc2 = sbx_create(e->rt, &cfg, &s);
		CHECK(rc2 == 0);
		if (rc2) {
			fprintf(stderr, "shared subtree: create %d after the twin: %s\n", i,
				strerror(-rc2));
			continue;
		}
		CHECK(sbxt_sh(s, "true", 5000, &o, &r) == 0 && r.exit_code == 0);
		sbx_destroy(s);
	}
}

int main(void)
{
	struct sbxt_env e;
	int r = sbxt_setup(&e, 2);
	if (r)
		return r;
	test_netns_reuse(&e, false);
	test_ipcns_reuse(&e, false);
	/* The same with user namespaces: root inside is not the owner of
	 * what the host made (/dev/mqueue), and sandboxes of different id
	 * ranges share the recycled namespaces. */
	char why[200];
	if (sbx_runtime_userns_check(e.rt, e.rootfs, why, sizeof(why)) == 0) {
		test_netns_reuse(&e, true);
		test_ipcns_reuse(&e, true);
	} else {
		fprintf(stderr, "no user namespaces here (%s): reuse with them not tested\n", why);
	}
	test_fresh_netns(&e);
	test_shared_subtree(&e);
	if (sbx_runtime_cgroup_version(e.rt) == 1)
		test_slot_reuse(&e);
	sbxt_teardown(&e);
	CHECK(sbxt_mounts_with("strata-sbx-test") == 0);
	return sbxt_failed;
}
