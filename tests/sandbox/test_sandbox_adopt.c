/* test_sandbox_adopt.c — persistent sandboxes outlive their host: release
 * one (as a restarting sandboxd would), adopt it again by pid, find its files
 * and background processes intact; a second adopter takes over; processes
 * inside cannot take the agent over; non-persistent sandboxes end with their
 * stream; nothing is left once all are destroyed. Needs root (77 otherwise). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	snprintf(cgdir, cap, "%s", sbx_cgroup_path(s, "memory"));
	CHECK(sbxt_sh(s, "echo 42 > /tmp/state; sleep 1000 >/dev/null 2>&1 &", 5000, &o, &r) == 0);
	sbx_release(s);
	usleep(200000);
	CHECK(alive(pid));

	CHECK(sbx_adopt(e->rt, pid, &s2) == 0);
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
	CHECK(sbx_adopt(e->rt, pid, &s3) == 0);
	CHECK(sbxt_sh(s2, "true", 5000, &o, &r) < 0);
	sbx_release(s2);
	if (!s3)
		return;
	CHECK(sbxt_sh(s3, "cat /tmp/state", 5000, &o, &r) == 0 && !strcmp(o.out, "42\n"));
	sbx_destroy(s3);
	CHECK(gone_within(pid, 5000));
	CHECK(sbx_adopt(e->rt, pid, &s) == -ESRCH);
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
	CHECK(sbx_adopt(e->rt, pid, &s2) == -ENOTCONN);
	sbx_release(s);
	CHECK(gone_within(pid, 5000));
	CHECK(sbx_adopt(e->rt, getpid(), &s2) < 0); /* not a sandbox at all */
}

int main(void)
{
	struct sbxt_env e;
	char cgdir[4096] = "";
	int r = sbxt_setup(&e, 2);
	if (r)
		return r;
	test_release_adopt(&e, cgdir, sizeof(cgdir));
	test_not_persistent(&e);
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
