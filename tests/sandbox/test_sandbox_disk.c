/* test_sandbox_disk.c — the writable layer on disk with a quota per sandbox
 * (sandbox/container/layer.c): writing past disk_bytes gives the writer
 * ENOSPC while the sandbox lives on and its memory cgroup holds far less
 * than was written (tmpfs layers were memory: the writer was OOM-killed);
 * the inode limit; a sandbox cannot move its files out of its project; one sandbox's full layer
 * does not stop another's; a destroyed sandbox's directory and project go (no leak over many); a
 * persistent sandbox keeps its layer and quota across a new runtime; and
 * the runtime leaves no mount or loop device behind.
 *
 * Needs root and a machine that can hold the layers on disk (loop devices,
 * XFS with quotas, mkfs.xfs); elsewhere exit 77 with the reason, unless
 * STRATA_TEST_DISK_QUOTA=1 (the test VM, tests/vm) makes that a failure. */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/sandbox/sbx_test.h"

#define MIB (1ull << 20)

/* Layers in the runtime's layers directory (p<id>). */
static int count_layers(const struct sbxt_env *e)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/layers", e->state);
	DIR *d = opendir(p);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += de->d_name[0] == 'p';
	closedir(d);
	return n;
}

/* Waits (up to 10 s) for the reaper to bring the layers down to want. */
static int wait_layers(const struct sbxt_env *e, int want)
{
	int n = -1;
	for (int i = 0; i < 200 && (n = count_layers(e)) != want; i++)
		usleep(50000);
	return n;
}

/* The peak memory charged to s's cgroup (v2 memory.peak, v1
 * max_usage_in_bytes), or -1. */
static long memory_peak(struct sbx *s)
{
	const char *cg = sbx_cgroup_path(s, "memory");
	if (!cg)
		return -1;
	long v = sbxt_read_long(cg, "memory.peak", NULL);
	if (v < 0)
		v = sbxt_read_long(cg, "memory.max_usage_in_bytes", NULL);
	return v;
}

static struct sbx *make(struct sbxt_env *e, uint64_t mem, uint64_t disk, uint64_t inodes,
			bool persist)
{
	struct sbx_config cfg = sbxt_config(e);
	cfg.memory_bytes = mem;
	cfg.disk_bytes = disk;
	cfg.disk_inodes = inodes;
	cfg.persist = persist;
	struct sbx *s = NULL;
	int r = sbx_create(e->rt, &cfg, &s);
	if (r < 0)
		fprintf(stderr, "sbx_create: %s\n", strerror(-r));
	CHECK(r == 0);
	return s;
}

static bool alive(struct sbx *s)
{
	static struct sbxt_out o;
	struct sbx_exec_result r;
	memset(&o, 0, sizeof(o));
	return sbxt_sh(s, "echo alive", 5000, &o, &r) == 0 && !strcmp(o.out, "alive\n");
}

/* Fills s with count MiB in /fill; true when the writer got "No space". */
static bool fill(struct sbx *s, const char *file, unsigned count, struct sbx_exec_result *r)
{
	static struct sbxt_out o;
	char cmd[128];
	memset(&o, 0, sizeof(o));
	snprintf(cmd, sizeof(cmd), "dd if=/dev/zero of=%s bs=1M count=%u && sync", file, count);
	if (sbxt_sh(s, cmd, 60000, &o, r) != 0)
		return false;
	fprintf(stderr, "fill %u MiB: exit %d signal %d: %s", count, r->exit_code, r->signo, o.err);
	return r->exit_code != 0 && r->signo == 0 && strstr(o.err, "No space");
}

static void test_enospc(struct sbxt_env *e)
{
	/* 128 MiB of disk, 48 MiB of memory: on tmpfs the writer was killed
	 * at the memory limit; on disk it gets ENOSPC at the disk limit. */
	struct sbx *s = make(e, 48 * MIB, 128 * MIB, 0, false);
	if (!s)
		return;
	struct sbx_exec_result r;
	CHECK(fill(s, "/big", 256, &r));
	CHECK(alive(s));
	uint64_t bytes = 0, inodes = 0;
	CHECK(sbx_disk_usage(s, &bytes, &inodes) == 0);
	fprintf(stderr, "usage %llu MiB, %llu inodes; memory peak %ld MiB\n",
		(unsigned long long)(bytes >> 20), (unsigned long long)inodes,
		memory_peak(s) >> 20);
	CHECK(bytes >= 120 * MIB && bytes <= 128 * MIB);
	long peak = memory_peak(s);
	CHECK(peak > 0 && (uint64_t)peak < 64 * MIB); /* far below the 128 MiB written */
	static struct sbxt_out o;
	CHECK(sbxt_sh(s, "rm /big && echo gone", 5000, &o, &r) == 0 && !strcmp(o.out, "gone\n"));
	CHECK(sbx_disk_usage(s, &bytes, &inodes) == 0 && bytes < 8 * MIB);
	sbx_destroy(s);
}

static void test_inodes(struct sbxt_env *e)
{
	struct sbx *s = make(e, 64 * MIB, 16 * MIB, 64, false);
	if (!s)
		return;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	memset(&o, 0, sizeof(o));
	/* Shell redirections, no fork per file. */
	/* Shell redirections, no fork per file; echo, not the special builtin
	 * ":", whose failed redirection would end the shell. */
	CHECK(sbxt_sh(s, "i=0; while [ $i -lt 200 ] && echo -n >/f$i; do i=$((i+1)); done; echo $i",
		      10000, &o, &r) == 0);
	int made = atoi(o.out);
	fprintf(stderr, "inode limit 64: %d files made; %s", made, o.err);
	CHECK(made > 16 && made < 64);
	CHECK(strstr(o.err, "No space") || strstr(o.err, "quota"));
	uint64_t bytes = 0, inodes = 0;
	CHECK(sbx_disk_usage(s, &bytes, &inodes) == 0 && inodes <= 64 && inodes > 16);
	CHECK(alive(s));
	sbx_destroy(s);
}

/* A sandbox cannot take its files out of its project (seccomp refuses the
 * ioctls that set project ids and the inherit flag; tests/sandbox/sbx_probe.c). */
static void test_projid_locked(struct sbxt_env *e)
{
	struct sbx *s = make(e, 64 * MIB, 16 * MIB, 0, false);
	if (!s)
		return;
	static struct sbxt_out o;
	struct sbx_exec_result r;
	memset(&o, 0, sizeof(o));
	CHECK(sbxt_sh(s, "/bin/probe projid", 5000, &o, &r) == 0);
	fprintf(stderr, "%s", o.out);
	CHECK(r.exit_code == 0 && strstr(o.out, "FS_IOC_FSGETXATTR: allowed"));
	sbx_destroy(s);
}

static void test_per_sandbox(struct sbxt_env *e)
{
	struct sbx *a = make(e, 64 * MIB, 32 * MIB, 0, false);
	struct sbx *b = make(e, 64 * MIB, 32 * MIB, 0, false);
	if (a && b) {
		struct sbx_exec_result r;
		CHECK(fill(a, "/full", 64, &r));
		CHECK(!fill(b, "/half", 16, &r) && r.exit_code == 0);
		uint64_t ua = 0, ub = 0, i;
		CHECK(sbx_disk_usage(a, &ua, &i) == 0 && sbx_disk_usage(b, &ub, &i) == 0);
		fprintf(stderr, "a full: %llu MiB, b: %llu MiB\n", (unsigned long long)(ua >> 20),
			(unsigned long long)(ub >> 20));
		CHECK(ua >= 28 * MIB && ua <= 32 * MIB && ub >= 16 * MIB && ub < 20 * MIB);
	}
	sbx_destroy(a);
	sbx_destroy(b);
}

static void test_no_leak(struct sbxt_env *e)
{
	int before = wait_layers(e, 0);
	CHECK(before == 0);
	for (int i = 0; i < 20; i++) {
		struct sbx *s = make(e, 64 * MIB, 8 * MIB, 0, false);
		if (!s)
			return;
		struct sbx_exec_result r;
		/* Also a tree deeper than the removal's recursion (layer.c). */
		static struct sbxt_out o;
		CHECK(
		    sbxt_sh(s,
			    "dd if=/dev/zero of=/f bs=1M count=2 2>/dev/null; d=/deep; i=0; "
			    "while [ $i -lt 40 ]; do mkdir -p $d/x && cd $d/x && d=.; i=$((i+1)); "
			    "done; : >leaf",
			    10000, &o, &r) == 0 &&
		    r.exit_code == 0);
		sbx_destroy(s);
	}
	int n = wait_layers(e, 0);
	fprintf(stderr, "after 20 create/write/destroy: %d layers left\n", n);
	CHECK(n == 0);
}

/* A tree deep enough that its removal moves subtrees up in more than one
 * pass (80 > 2 x LAYER_RM_DEPTH): the names of the second pass must not
 * fall on those of the first (each then failed, and the layer stayed). */
static void test_deep_tree(struct sbxt_env *e)
{
	CHECK(wait_layers(e, 0) == 0);
	struct sbx *s = make(e, 64 * MIB, 8 * MIB, 0, false);
	if (!s)
		return;
	struct sbx_exec_result r;
	static struct sbxt_out o;
	CHECK(sbxt_sh(s,
		      "cd / && i=0; while [ $i -lt 80 ]; do mkdir d && cd d; i=$((i+1)); done; "
		      ": >leaf && echo made",
		      10000, &o, &r) == 0 &&
	      !strcmp(o.out, "made\n"));
	sbx_destroy(s);
	int n = wait_layers(e, 0);
	fprintf(stderr, "a tree 80 deep, destroyed: %d layers left\n", n);
	CHECK(n == 0);
}

static void test_adopt(struct sbxt_env *e)
{
	struct sbx *s = make(e, 64 * MIB, 32 * MIB, 0, true);
	if (!s)
		return;
	struct sbx_exec_result r;
	static struct sbxt_out o;
	CHECK(sbxt_sh(s, "dd if=/dev/zero of=/kept bs=1M count=8 2>/dev/null && sync", 10000, &o,
		      &r) == 0 &&
	      r.exit_code == 0);
	struct sbx_agent_id id;
	CHECK(sbx_agent_id(s, &id) == 0);
	sbx_release(s);
	sbx_runtime_free(e->rt); /* the layer stays: its mount too */
	e->rt = NULL;
	struct sbx_runtime_config cfg = {.agent_path = e->agent,
					 .state_dir = e->state,
					 .cgroup_name = e->cgname,
					 .disk_mode = SBX_DISK_QUOTA};
	int rr = sbx_runtime_new(&cfg, &e->rt);
	if (rr < 0)
		fprintf(stderr, "a new runtime on the same state dir: %s\n", strerror(-rr));
	CHECK(rr == 0);
	if (!e->rt)
		return;
	s = NULL;
	CHECK(sbx_adopt(e->rt, &id, &s) == 0);
	if (!s)
		return;
	uint64_t bytes = 0, inodes = 0;
	CHECK(sbx_disk_usage(s, &bytes, &inodes) == 0);
	fprintf(stderr, "adopted: %llu MiB used\n", (unsigned long long)(bytes >> 20));
	CHECK(bytes >= 8 * MIB && bytes < 10 * MIB);
	CHECK(fill(s, "/more", 64, &r)); /* its quota is still 32 MiB */
	sbx_destroy(s);
	CHECK(wait_layers(e, 0) == 0);
}

/* Loop devices whose backing file is below dir. */
static int loops_with(const char *dir)
{
	glob_t g;
	int n = 0;
	if (glob("/sys/block/loop*/loop/backing_file", 0, NULL, &g) != 0)
		return 0;
	for (size_t i = 0; i < g.gl_pathc; i++) {
		char b[512] = {0};
		FILE *f = fopen(g.gl_pathv[i], "r");
		if (f && fgets(b, sizeof(b), f) && strstr(b, dir))
			n++;
		if (f)
			fclose(f);
	}
	globfree(&g);
	return n;
}

int main(void)
{
	struct sbxt_env e;
	int r = sbxt_setup(&e, 0);
	if (r)
		return r;
	const char *why = NULL;
	if (!sbx_runtime_disk_quota(e.rt, &why)) {
		const char *must = getenv("STRATA_TEST_DISK_QUOTA");
		fprintf(stderr, "%swritable layers not on disk here: %s\n",
			must && atoi(must) ? "" : "skip: ", why);
		sbxt_teardown(&e);
		return must && atoi(must) ? 1 : 77;
	}
	fprintf(stderr, "layers: %s\n", why);
	test_enospc(&e);
	test_inodes(&e);
	test_projid_locked(&e);
	test_per_sandbox(&e);
	test_no_leak(&e);
	test_deep_tree(&e);
	test_adopt(&e);
	sbx_runtime_free(e.rt);
	e.rt = NULL;
	CHECK(sbxt_mounts_all_with(e.dir) == 0); /* the image's mount went with the runtime */
	CHECK(loops_with(e.dir) == 0);
	sbxt_teardown(&e);
	if (!sbxt_failed)
		fprintf(stderr, "sandbox_disk: ok\n");
	return sbxt_failed;
}
