/* sbx_test.c — helpers of the sandbox tests (see sbx_test.h). The root
 * filesystem is /bin/busybox from Debian's busybox-static with a symlink per
 * applet, a passwd with root, nobody and user (1000), and the sbx_probe
 * helper as /bin/probe. */
#include "tests/sandbox/sbx_test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int sbxt_failed;

/* A static busybox: $STRATA_BUSYBOX or Debian's busybox-static. */
static const char *busybox(void)
{
	const char *b = getenv("STRATA_BUSYBOX");
	return b && *b ? b : "/bin/busybox";
}

static int copy_file(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (out < 0) {
		close(in);
		return -errno;
	}
	char buf[65536];
	ssize_t n;
	int r = 0;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n) {
			r = -EIO;
			break;
		}
	close(in);
	close(out);
	return n < 0 ? -errno : r;
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	if (!f)
		return -errno;
	fputs(text, f);
	return fclose(f) == 0 ? 0 : -errno;
}

static int link_applets(const char *root)
{
	char name[128], path[PATH_MAX];
	snprintf(path, sizeof(path), "%s --list", busybox());
	FILE *p = popen(path, "re");
	if (!p)
		return -errno;
	while (fgets(name, sizeof(name), p)) {
		name[strcspn(name, "\n")] = 0;
		if (!name[0] || !strcmp(name, "busybox"))
			continue;
		snprintf(path, sizeof(path), "%s/bin/%s", root, name);
		symlink("busybox", path);
	}
	return pclose(p) == 0 ? 0 : -EIO;
}

static int build_rootfs(const char *root)
{
	static const char *const dirs[] = {"bin",  "etc", "tmp", "root", "home", "home/user",
					   "proc", "dev", "sys", "usr",	 "var"};
	char p[PATH_MAX], probe[PATH_MAX];
	if (mkdir(root, 0755) < 0)
		return -errno;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
		if (mkdir(p, 0755) < 0)
			return -errno;
	}
	snprintf(p, sizeof(p), "%s/tmp", root);
	chmod(p, 01777);
	snprintf(p, sizeof(p), "%s/home/user", root);
	chown(p, 1000, 1000);
	snprintf(p, sizeof(p), "%s/bin/busybox", root);
	int r = copy_file(busybox(), p, 0755);
	if (r == 0)
		r = link_applets(root);
	const char *build = getenv("STRATA_BUILD");
	snprintf(probe, sizeof(probe), "%s/tests/sbx_probe", build ? build : ".");
	snprintf(p, sizeof(p), "%s/bin/probe", root);
	if (r == 0)
		r = copy_file(probe, p, 0755);
	snprintf(p, sizeof(p), "%s/etc/passwd", root);
	if (r == 0)
		r = write_text(p, "root:x:0:0:root:/root:/bin/sh\n"
				  "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
				  "user:x:1000:1000:user:/home/user:/bin/sh\n");
	snprintf(p, sizeof(p), "%s/etc/group", root);
	if (r == 0)
		r = write_text(p, "root:x:0:\nnogroup:x:65534:\nuser:x:1000:\n");
	/* A device node shipped in the image (a harmless copy of /dev/null):
	 * the sandbox must not be able to open it (nodev root). */
	snprintf(p, sizeof(p), "%s/devnode", root);
	if (r == 0 && mknod(p, S_IFCHR | 0666, makedev(1, 3)) < 0)
		r = -errno;
	return r;
}

int sbxt_setup_root(struct sbxt_env *e)
{
	memset(e, 0, sizeof(*e));
	if (geteuid() != 0) {
		fprintf(stderr, "skip: sandboxes need root\n");
		return 77;
	}
	if (access(busybox(), X_OK) < 0) {
		fprintf(stderr,
			"skip: %s missing (apt install busybox-static, or set STRATA_BUSYBOX)\n",
			busybox());
		return 77;
	}
	const char *bin = getenv("STRATA_BIN");
	snprintf(e->agent, sizeof(e->agent), "%s/strata-agent", bin ? bin : ".");
	/* $TMPDIR: the test VM's scratch disk (tests/vm/guest.sh), where the
	 * writable layers' image is on disk, not in guest memory. */
	const char *tmp = getenv("TMPDIR");
	snprintf(e->dir, sizeof(e->dir), "%s/strata-sbx-test-XXXXXX",
		 tmp && tmp[0] == '/' && strlen(tmp) < 200 ? tmp : "/tmp");
	if (!mkdtemp(e->dir))
		return 1;
	chmod(e->dir, 0755);
	snprintf(e->rootfs, sizeof(e->rootfs), "%s/rootfs", e->dir);
	snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
	snprintf(e->cgname, sizeof(e->cgname), "strata-test-%d", (int)getpid());
	int r = build_rootfs(e->rootfs);
	if (r < 0) {
		fprintf(stderr, "building the test rootfs failed: %s\n", strerror(-r));
		sbxt_teardown(e);
		return 1;
	}
	return 0;
}

int sbxt_setup(struct sbxt_env *e, unsigned pool)
{
	int r = sbxt_setup_root(e);
	if (r)
		return r;
	struct sbx_runtime_config cfg = {
	    .agent_path = e->agent,
	    .state_dir = e->state,
	    .cgroup_name = e->cgname,
	    .pool_size = pool,
	};
	r = sbx_runtime_new(&cfg, &e->rt);
	/* What the machine cannot do is a skip: no cgroup controllers, no
	 * namespaces (EPERM, ENOSYS in an unprivileged container), no overlay. */
	bool skip = r == -ENOTSUP || r == -EPERM || r == -ENOSYS || r == -ENODEV;
	if (r < 0) {
		fprintf(stderr, "%ssbx_runtime_new: %s%s\n", skip ? "skip: " : "", strerror(-r),
			r == -ENOTSUP ? " (no usable cgroup controllers)" : "");
		sbxt_teardown(e);
		return skip ? 77 : 1;
	}
	/* Set by the cgroup v2 run in a VM (tests/vm): a test that ran on
	 * another version would prove nothing there. */
	const char *want = getenv("STRATA_TEST_CGROUP_VERSION");
	if (want && atoi(want) != sbx_runtime_cgroup_version(e->rt)) {
		fprintf(stderr, "the runtime chose cgroup v%d, STRATA_TEST_CGROUP_VERSION is %s\n",
			sbx_runtime_cgroup_version(e->rt), want);
		sbxt_teardown(e);
		return 1;
	}
	return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	return flag == FTW_DP ? rmdir(p) : unlink(p);
}

void sbxt_teardown(struct sbxt_env *e)
{
	sbx_runtime_free(e->rt);
	e->rt = NULL;
	if (e->dir[0])
		nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

struct sbx_config sbxt_config(const struct sbxt_env *e)
{
	return (struct sbx_config){.rootfs = e->rootfs,
				   .hostname = "sbx-test",
				   .memory_bytes = 256ull << 20,
				   .pids_max = 256,
				   .disk_bytes = 64ull << 20};
}

static int collect(void *ud, int stream, const void *data, size_t len)
{
	struct sbxt_out *o = ud;
	char *buf = stream == 1 ? o->out : o->err;
	size_t *n = stream == 1 ? &o->out_len : &o->err_len;
	size_t room = sizeof(o->out) - 1 - *n;
	size_t k = len < room ? len : room;
	memcpy(buf + *n, data, k);
	*n += k;
	buf[*n] = 0;
	o->total += len;
	return 0;
}

int sbxt_exec(struct sbx *s, const struct sbx_exec_opts *opts, struct sbxt_out *o,
	      struct sbx_exec_result *res)
{
	static struct sbxt_out scratch;
	if (!o)
		o = &scratch;
	memset(o, 0, sizeof(*o));
	return sbx_exec(s, opts, collect, o, res);
}

int sbxt_sh(struct sbx *s, const char *cmd, uint32_t timeout_ms, struct sbxt_out *o,
	    struct sbx_exec_result *res)
{
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	struct sbx_exec_opts opts = {.argv = argv, .timeout_ms = timeout_ms};
	return sbxt_exec(s, &opts, o, res);
}

static int count_mounts(const char *s, bool all)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[8192];
	int n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, s) != NULL && (all || !strstr(line, "/state/layers "));
	fclose(f);
	return n;
}

int sbxt_mounts_with(const char *s)
{
	return count_mounts(s, false);
}

int sbxt_mounts_all_with(const char *s)
{
	return count_mounts(s, true);
}

long sbxt_read_long(const char *dir, const char *file, const char *key)
{
	char p[4200], k[64];
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	FILE *f = fopen(p, "re");
	long v = LONG_MIN;
	if (f && key && (fscanf(f, "%63s", k) != 1 || strcmp(k, key)))
		v = LONG_MIN + 1;
	else if (f && fscanf(f, "%ld", &v) != 1)
		v = LONG_MIN;
	if (f)
		fclose(f);
	return v;
}
