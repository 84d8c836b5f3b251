/* cgroup_kill.c — ending every process of a sandbox's cgroup, frozen or not
 * (cgroup_kill.h): the cgroup from /proc/<pid>/cgroup, the hierarchies'
 * mount points from /proc/self/mounts, SIGKILL then thaw, and a wait until
 * cgroup.procs is empty. */
#include "fs/cgroup_kill.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/clock.h"
#include "fs/fdio.h"

#define CGK_POLL_MS 5
#define CGK_MAX_PIDS 4096 /* read per round; a round that kills them reads again */

/* Is word one of the comma-separated words of list? */
static bool in_list(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == 0))
			return true;
	return false;
}

/* The mount point of the v1 hierarchy carrying ctrl, or of cgroup2 when ctrl
 * is "". */
static int mount_point(const char *ctrl, char *buf, size_t cap)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	char dev[256], point[PATH_MAX], type[32], opts[1024];
	int r = -ENOENT;
	if (!f)
		return -errno;
	while (r < 0 && fscanf(f, "%255s %4095s %31s %1023s %*d %*d", dev, point, type, opts) == 4)
		if (ctrl[0] ? !strcmp(type, "cgroup") && in_list(opts, ctrl)
			    : !strcmp(type, "cgroup2"))
			r = snprintf(buf, cap, "%s", point) < (int)cap ? 0 : -ENAMETOOLONG;
	fclose(f);
	return r;
}

/* From the lines of /proc/<pid>/cgroup ("id:controllers:path"): the path of
 * the v1 hierarchy with ctrl, or of the v2 one ("0::path") when ctrl is "". */
static int cgroup_path(const char *lines, const char *ctrl, char *buf, size_t cap)
{
	char line[PATH_MAX + 128];
	for (const char *p = lines; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		snprintf(line, sizeof(line), "%.*s", (int)strcspn(p, "\n"), p);
		char *ctrls = strchr(line, ':');
		char *path = ctrls ? strchr(ctrls + 1, ':') : NULL;
		if (!path)
			continue;
		*ctrls++ = 0;
		*path++ = 0;
		if (ctrl[0] ? in_list(ctrls, ctrl) : !strcmp(line, "0") && !ctrls[0])
			return snprintf(buf, cap, "%s", path) < (int)cap ? 0 : -ENAMETOOLONG;
	}
	return -ENOENT;
}

/* The directory of hierarchy ctrl's cgroup in lines, under its mount. */
static int cgroup_dir(const char *lines, const char *ctrl, char *buf, size_t cap)
{
	char mnt[PATH_MAX], path[PATH_MAX];
	int r = cgroup_path(lines, ctrl, path, sizeof(path));
	if (r == 0)
		r = mount_point(ctrl, mnt, sizeof(mnt));
	if (r == 0 && snprintf(buf, cap, "%s%s", mnt, strcmp(path, "/") ? path : "") >= (int)cap)
		r = -ENAMETOOLONG;
	return r;
}

int cgk_target_of_pid(pid_t pid, const char *name, bool prefix, struct cgk_target *ret)
{
	char file[64], lines[8192];
	snprintf(file, sizeof(file), "/proc/%d/cgroup", (int)pid);
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n = read(fd, lines, sizeof(lines) - 1);
	close(fd);
	if (n <= 0)
		return n == 0 ? -ESRCH : -errno;
	lines[n] = 0;
	struct cgk_target t = {.v2 = false};
	int r = cgroup_dir(lines, "pids", t.dir, sizeof(t.dir));
	if (r < 0) {
		t.v2 = true;
		r = cgroup_dir(lines, "", t.dir, sizeof(t.dir));
	}
	if (r < 0)
		return r;
	const char *last = strrchr(t.dir, '/');
	last = last ? last + 1 : t.dir;
	if (prefix ? strncmp(last, name, strlen(name)) : strcmp(last, name))
		return -ESTALE;
	if (!t.v2 && cgroup_dir(lines, "freezer", t.freezer_dir, sizeof(t.freezer_dir)) == 0) {
		char mnt[PATH_MAX];
		if (mount_point("freezer", mnt, sizeof(mnt)) == 0 && !strcmp(mnt, t.freezer_dir))
			t.freezer_dir[0] = 0; /* the root cgroup cannot be frozen */
	}
	*ret = t;
	return 0;
}

static int write_file(const char *dir, const char *file, const char *v)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	_cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
	return fd < 0 ? -errno : strata_write_all(fd, v, strlen(v));
}

/* SIGKILL to each process in dir's cgroup.procs. Returns how many it read. */
static int kill_procs(const char *dir)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	FILE *f = fopen(p, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	long pid;
	int n = 0;
	while (n < CGK_MAX_PIDS && fscanf(f, "%ld", &pid) == 1) {
		kill((pid_t)pid, SIGKILL);
		n++;
	}
	fclose(f);
	return n;
}

int cgk_kill(const struct cgk_target *t, int wait_ms)
{
	int64_t deadline = strata_mono_ms() + wait_ms;
	int first = -1;
	for (;;) {
		int n = kill_procs(t->dir);
		if (first < 0)
			first = n < 0 ? 0 : n;
		if (n <= 0)
			return n < 0 ? n : first;
		if (t->v2)
			write_file(t->dir, "cgroup.kill", "1"); /* absent before Linux 5.14 */
		/* killed first, thawed second: nothing runs its own code again */
		if (t->v2)
			write_file(t->dir, "cgroup.freeze", "0");
		else if (t->freezer_dir[0])
			write_file(t->freezer_dir, "freezer.state", "THAWED");
		if (strata_mono_ms() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&(struct timespec){0, CGK_POLL_MS * 1000000L}, NULL);
	}
}
