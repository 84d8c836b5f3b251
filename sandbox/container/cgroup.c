/* cgroup.c — per-sandbox cgroups for memory, cpu, pids (and devices and
 * the freezer on v1: freezer.c pauses through it).
 *
 * Version detection: if cgroup v1 hierarchies carry the memory and pids
 * controllers we use v1 (this is what a machine with v1 controllers mounted
 * has, even with an empty cgroup2 mount beside them); otherwise a cgroup2
 * mount whose root offers memory and pids means v2. Our subtree is created
 * below the cgroup our own process is in (per hierarchy on v1), so sandboxes
 * stay accounted to whoever runs us; on v2 a process alone in its cgroup
 * first moves into a leaf of it (sbx_cgroup_v2_base: a cgroup that holds a
 * process cannot delegate controllers, the case of a systemd service).
 *
 * A slot is one sandbox's set of directories, made ahead of time by the pool
 * (mkdir, devices whitelist, open fds); at create time only the limits are
 * written (cg_slot_apply) and the child joins: on v1 it writes "0" to the
 * pre-opened "tasks" files, on v2 clone3(CLONE_INTO_CGROUP) places it.
 * "tasks" moves the writing thread alone, which for the single-threaded
 * child is the whole process, and the kernel then takes no
 * cgroup_threadgroup_rwsem (a "0" written to cgroup.procs takes it for
 * writing: an RCU grace period inside cgroup_mutex when its rcu_sync is
 * idle, and every fork and exit of the machine waits meanwhile).
 * Slots are reused: when a destroyed sandbox's slot is empty (no process
 * left, little memory still charged) the runtime keeps it for the next
 * staging (cg_slot_recyclable), which saves a mkdir and an rmdir per
 * hierarchy and the memory cgroup's online/offline work, the largest single
 * cost of staging after fork. A reused slot keeps its devices whitelist;
 * cg_slot_apply resets the limits it may have carried (memsw, cpu quota),
 * and writes nothing when the slot already holds the limits asked for
 * (the usual case: every sandbox of a pool has the same), unless its path
 * was handed out (sbx_cgroup_path) since. Its statistics carry over
 * (failcnt; cpu time, which sandboxd does not read from the cgroup), but
 * not the memory peak, which sandboxd reports: v1's max_usage is reset,
 * and a v2 slot whose memory.peak went over SLOT_REUSE_MAX_CHARGE is not
 * reused (cg_slot_recyclable). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

static const char *const ctrl_names[CG_NCTRL] = {"memory", "cpu", "pids", "devices", "freezer"};

int cg_ctrl_index(const char *name)
{
	for (int i = 0; i < CG_NCTRL; i++)
		if (!strcmp(name, ctrl_names[i]))
			return i;
	return -1;
}

static bool has_option(const char *opts, const char *want)
{
	size_t n = strlen(want);
	for (const char *p = opts; p && *p;) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		if (len == n && !strncmp(p, want, n))
			return true;
		p = c ? c + 1 : NULL;
	}
	return false;
}

/* The cgroup of a process (file: /proc/<pid>/cgroup) in the hierarchy whose
 * controller list contains ctrl ("" = the v2 line "0::"). */
static int proc_cgroup(const char *file, const char *ctrl, char *buf, size_t cap)
{
	_cleanup_(fclosep) FILE *f = fopen(file, "re");
	char line[PATH_MAX + 128];
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		char *ctrls = strchr(line, ':');
		char *path = ctrls ? strchr(ctrls + 1, ':') : NULL;
		if (!path)
			continue;
		*ctrls++ = 0;
		*path++ = 0;
		bool match = ctrl[0] ? has_option(ctrls, ctrl) : (!strcmp(line, "0") && !ctrls[0]);
		if (match) {
			snprintf(buf, cap, "%s", path);
			return 0;
		}
	}
	return -ENOENT;
}

/* Finds the mount point of the v1 hierarchy with ctrl (or the cgroup2 mount
 * when ctrl is NULL), from /proc/self/mountinfo. */
static int find_mount(const char *ctrl, char *mnt, size_t cap, char *root, size_t rcap)
{
	_cleanup_(fclosep) FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char mroot[PATH_MAX], point[PATH_MAX], fstype[64], super[1024];
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, point) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", fstype, super) != 2)
			continue;
		bool ok = ctrl ? !strcmp(fstype, "cgroup") && has_option(super, ctrl)
			       : !strcmp(fstype, "cgroup2");
		if (ok) {
			snprintf(mnt, cap, "%s", point);
			snprintf(root, rcap, "%s", mroot);
			return 0;
		}
	}
	return -ENOENT;
}

int cg_write_at(int dirfd, const char *file, const char *val)
{
	_cleanup_close_ int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, val, strlen(val));
	if (n < 0)
		return -errno;
	return 0;
}

/* ---- limits (shared with worker_cgroup.c; no malloc: a clone child writes
 * its own) ---- */

int cg_limit_memory(int version, int dirfd, uint64_t mem, bool lift_swap)
{
	char v[32];
	snprintf(v, sizeof(v), "%" PRIu64, mem);
	if (version == 2) {
		int r = cg_write_at(dirfd, "memory.max", v);
		if (r == 0)
			cg_write_at(dirfd, "memory.swap.max", "0"); /* absent without swap */
		return r;
	}
	/* memsw >= limit at every step: lift an earlier one's memsw first. */
	int r = lift_swap ? cg_write_at(dirfd, "memory.memsw.limit_in_bytes", "-1") : 0;
	if (r == 0 || r == -ENOENT)
		r = cg_write_at(dirfd, "memory.limit_in_bytes", v);
	if (r == 0) {
		r = cg_write_at(dirfd, "memory.memsw.limit_in_bytes", v);
		r = r == -ENOENT ? 0 : r; /* no swap accounting */
	}
	return r;
}

int cg_limit_pids(int dirfd, uint32_t pids)
{
	char v[16];
	snprintf(v, sizeof(v), "%" PRIu32, pids);
	return cg_write_at(dirfd, "pids.max", v);
}

const char *cg_cpu_file(int version)
{
	return version == 2 ? "cpu.max" : "cpu.cfs_quota_us";
}

int cg_cpu_value(int version, uint32_t millis, char *buf, size_t cap)
{
	/* a 100 ms period (v1's default): millis * 100 us of it */
	uint64_t q = (uint64_t)millis * 100;
	int n;
	if (version == 2)
		n = millis ? snprintf(buf, cap, "%" PRIu64 " 100000", q)
			   : snprintf(buf, cap, "max 100000");
	else
		n = millis ? snprintf(buf, cap, "%" PRIu64, q) : snprintf(buf, cap, "-1");
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : n;
}

/* The directory of cgroup path own (from /proc/<pid>/cgroup) under a
 * hierarchy's mount point mnt, whose root is mroot (not "/" when the mount
 * shows a subtree, as in a container). */
static int cgroup_dir(const char *mnt, const char *mroot, const char *own, char *path, size_t cap)
{
	const char *rel = own;
	size_t rl = strlen(mroot);
	if (strcmp(mroot, "/") && !strncmp(own, mroot, rl))
		rel = own + rl;
	int n = snprintf(path, cap, "%s%s", mnt, strcmp(rel, "/") ? rel : "");
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The directory of our own cgroup in the v1 hierarchy of ctrl, or with
 * at_root that hierarchy's root. */
static int own_dir(const char *ctrl, bool at_root, char *path, size_t cap)
{
	char mnt[PATH_MAX], mroot[PATH_MAX], own[PATH_MAX] = "/";
	int r = find_mount(ctrl[0] ? ctrl : NULL, mnt, sizeof(mnt), mroot, sizeof(mroot));
	if (r == 0 && !at_root)
		r = proc_cgroup("/proc/self/cgroup", ctrl, own, sizeof(own));
	return r < 0 ? r : cgroup_dir(mnt, mroot, at_root ? mroot : own, path, cap);
}

int cg_own_dir(const char *ctrl, char *path, size_t cap)
{
	return own_dir(ctrl, false, path, cap);
}

/* Opens (creating) <mount>/<own cgroup>/<name> for one hierarchy, or
 * <mount>/<name> with at_root. */
static int open_base(const char *ctrl, const char *name, bool at_root, char *path, size_t cap)
{
	char dir[PATH_MAX];
	int r = own_dir(ctrl, at_root, dir, sizeof(dir));
	if (r < 0)
		return r;
	int n = snprintf(path, cap, "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(path, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int init_v1(struct cg_driver *d, const char *name)
{
	for (int i = 0; i < CG_NCTRL; i++) {
		d->base_fd[i] =
		    open_base(ctrl_names[i], name, false, d->base[i], sizeof(d->base[i]));
		d->has[i] = d->base_fd[i] >= 0;
		/* optional: without them no cpu limit, no device list, no pause */
		if (!d->has[i] && i != CG_DEVICES && i != CG_CPU && i != CG_FREEZER)
			return d->base_fd[i];
	}
	d->memsw = faccessat(d->base_fd[CG_MEMORY], "memory.memsw.limit_in_bytes", F_OK, 0) == 0;
	d->version = 1;
	return 0;
}

/* One controller at a time: a combined write is all or nothing. */
static void enable_controllers(int dirfd)
{
	static const char *const want[] = {"+memory", "+pids", "+cpu"};
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		cg_write_at(dirfd, "cgroup.subtree_control", want[i]);
}

/* Whether the cgroup dirfd has memory and pids enabled for its children
 * (and in *cpu, cpu). */
static bool delegates(int dirfd, bool *cpu)
{
	char ctl[128] = "";
	_cleanup_close_ int fd = openat(dirfd, "cgroup.subtree_control", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, ctl, sizeof(ctl) - 1) : -1;
	ctl[n > 0 ? n : 0] = 0;
	if (cpu)
		*cpu = strstr(ctl, "cpu ") || strstr(ctl, "cpu\n");
	return strstr(ctl, "memory") && strstr(ctl, "pids");
}

/* Whether the cgroup directory dir holds a process (or cannot be read). */
static bool holds_processes(const char *dir)
{
	char p[PATH_MAX + 16], buf[16];
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	return fd < 0 || read(fd, buf, sizeof(buf)) != 0;
}

/* Moves this whole process (every thread: v2 moves processes) into the
 * leaf dir/SBX_CGROUP_SELF. */
static int move_self_to_leaf(const char *dir)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/" SBX_CGROUP_SELF, dir);
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return -errno;
	_cleanup_close_ int fd = open(p, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : cg_write_at(fd, "cgroup.procs", "0");
}

int sbx_cgroup_v2_base(char *buf, size_t cap)
{
	char mnt[PATH_MAX], mroot[PATH_MAX], own[PATH_MAX];
	int r = find_mount(NULL, mnt, sizeof(mnt), mroot, sizeof(mroot));
	if (r == 0)
		r = proc_cgroup("/proc/self/cgroup", "", own, sizeof(own));
	if (r < 0)
		return r;
	/* Already in our leaf (an earlier call): build beside it. */
	char *last = strrchr(own, '/');
	if (last && last != own && !strcmp(last + 1, SBX_CGROUP_SELF))
		*last = 0;
	r = cgroup_dir(mnt, mroot, own, buf, cap);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = open(buf, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* The root cgroup (no cgroup.type) may hold processes and still
	 * delegate; any other must be left by its processes first, before a
	 * controller is enabled (the kernel lets threaded ones, cpu and pids,
	 * be enabled beside processes, and such a cgroup then refuses the move
	 * with EOPNOTSUPP). A cgroup namespace's root is not the root. */
	bool root = faccessat(fd, "cgroup.type", F_OK, 0) < 0 && errno == ENOENT;
	if (!root && holds_processes(buf)) {
		r = move_self_to_leaf(buf);
		if (r < 0)
			return r;
		if (holds_processes(buf))
			return -EBUSY; /* others share our cgroup: not ours to manage */
	}
	enable_controllers(fd);
	return 0;
}

/* The v2 subtree <base>/<name>: base is the directory sbx_cgroup_v2_base
 * gives, or with at_root the hierarchy's root (a process whose cgroup
 * others share). */
static int try_v2(struct cg_driver *d, const char *name, bool at_root)
{
	char parent[PATH_MAX], mroot[PATH_MAX];
	int r = at_root ? find_mount(NULL, parent, sizeof(parent), mroot, sizeof(mroot))
			: sbx_cgroup_v2_base(parent, sizeof(parent));
	if (r < 0) /* below our own cgroup: not possible, try the root */
		return at_root ? r : -ENOTSUP;
	if (at_root) {
		_cleanup_close_ int pfd = open(parent, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
		if (pfd >= 0)
			enable_controllers(pfd);
	}
	int n = snprintf(d->base[0], sizeof(d->base[0]), "%s/%s", parent, name);
	if (n < 0 || (size_t)n >= sizeof(d->base[0]))
		return -ENAMETOOLONG;
	if (mkdir(d->base[0], 0755) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(d->base[0], O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	enable_controllers(fd);
	if (!delegates(fd, &d->has[CG_CPU])) {
		close(fd);
		rmdir(d->base[0]);
		return -ENOTSUP;
	}
	d->base_fd[0] = fd;
	d->has[CG_MEMORY] = d->has[CG_PIDS] = true;
	d->version = 2;
	return 0;
}

/* Below our own cgroup (sbx_cgroup_v2_base: moving into a leaf of it if
 * we sit in it alone, the systemd Delegate=yes way), else below the root
 * of the hierarchy (root only; a cgroup that others' processes share
 * cannot enable controllers for its children). */
static int init_v2(struct cg_driver *d, const char *name)
{
	int r = try_v2(d, name, false);
	return r == -ENOTSUP ? try_v2(d, name, true) : r;
}

/* Removes the empty sbx-* directories of our subtree: sandboxes that ended
 * without their host (a persistent one past its orphan timeout, or any
 * after a crash). A cgroup with processes cannot be removed, so live
 * sandboxes (waiting to be adopted) stay. Slots made by a process that is
 * still alive (their name carries its pid) may be empty for a moment before
 * their sandbox joins, or wait empty in its spare list, so they are left
 * alone; with own, this driver's (its prefix) go too, and never those of
 * another runtime of this process that shares the subtree. */
static void sweep(const struct cg_driver *d, bool own)
{
	size_t plen = strlen(d->prefix);
	for (int i = 0; i < CG_NCTRL; i++) {
		if (d->base_fd[i] < 0)
			continue;
		int fd = openat(d->base_fd[i], ".", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
		DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
		if (!dir) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		struct dirent *de;
		while ((de = readdir(dir))) {
			int pid = 0;
			if (sscanf(de->d_name, "sbx-%d-", &pid) != 1 || pid <= 0)
				continue;
			bool ours = own && plen && !strncmp(de->d_name, d->prefix, plen);
			bool dead = pid != getpid() && kill(pid, 0) < 0 && errno != EPERM;
			if (ours || dead)
				unlinkat(d->base_fd[i], de->d_name, AT_REMOVEDIR);
		}
		closedir(dir);
	}
}

int cg_detect_version(void)
{
	char mnt[PATH_MAX], root[PATH_MAX];
	if (find_mount("memory", mnt, sizeof(mnt), root, sizeof(root)) == 0 &&
	    find_mount("pids", mnt, sizeof(mnt), root, sizeof(root)) == 0)
		return 1;
	return find_mount(NULL, mnt, sizeof(mnt), root, sizeof(root)) == 0 ? 2 : 0;
}

int cg_driver_init(struct cg_driver *d, const char *name, int version)
{
	memset(d, 0, sizeof(*d));
	for (int i = 0; i < CG_NCTRL; i++)
		d->base_fd[i] = -1;
	bool v1 = version ? version == 1 : cg_detect_version() == 1;
	int r = v1 ? init_v1(d, name) : init_v2(d, name);
	if (r < 0) {
		cg_driver_done(d);
		return r == -ENOENT ? -ENOTSUP : r;
	}
	static unsigned drivers;
	snprintf(d->prefix, sizeof(d->prefix), "sbx-%d-%u-", (int)getpid(),
		 __atomic_add_fetch(&drivers, 1, __ATOMIC_RELAXED));
	sweep(d, false);
	return 0;
}

void cg_driver_done(struct cg_driver *d)
{
	sweep(d, true);
	for (int i = 0; i < CG_NCTRL; i++) {
		if (d->base_fd[i] < 0)
			continue;
		close(d->base_fd[i]);
		d->base_fd[i] = -1;
		rmdir(d->base[i]); /* fails while others still use the subtree: fine */
	}
	d->version = 0;
}

static const char *const dev_allow[] = {
    "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm",
    "c 1:8 rwm", "c 1:9 rwm",		     /* null zero full random urandom */
    "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm", /* tty ptmx pts */
};

static int setup_devices(int fd)
{
	int r = cg_write_at(fd, "devices.deny", "a");
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(dev_allow); i++)
		r = cg_write_at(fd, "devices.allow", dev_allow[i]);
	return r;
}

static int slot_mkdir(int base, const char *name, int *ret_fd)
{
	if (mkdirat(base, name, 0755) < 0) /* EEXIST too: never share a cgroup */
		return -errno;
	*ret_fd = openat(base, name, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	return *ret_fd < 0 ? -errno : 0;
}

int cg_slot_new(struct cg_driver *d, uint64_t seq, struct cg_slot **ret)
{
	struct cg_slot *s = calloc(1, sizeof(*s));
	int r = 0;
	if (!s)
		return -ENOMEM;
	for (int i = 0; i < CG_NCTRL; i++)
		s->dir_fd[i] = s->procs_fd[i] = -1;
	snprintf(s->name, sizeof(s->name), "%s%" PRIu64, d->prefix, seq);
	int n = d->version == 2 ? 1 : CG_NCTRL;
	for (int i = 0; i < n && r == 0; i++) {
		if (!d->has[i] && d->version == 1)
			continue;
		r = slot_mkdir(d->base_fd[i], s->name, &s->dir_fd[i]);
		if (r == 0 && d->version == 1) {
			/* see the head of this file: "tasks", not cgroup.procs */
			s->procs_fd[i] = openat(s->dir_fd[i], "tasks", O_WRONLY | O_CLOEXEC);
			r = s->procs_fd[i] < 0 ? -errno : 0;
		}
		if (r == 0 && i == CG_DEVICES)
			r = setup_devices(s->dir_fd[i]);
	}
	if (r < 0) {
		cg_slot_free(d, s);
		return r;
	}
	*ret = s;
	return 0;
}

static int apply_v1(struct cg_driver *d, struct cg_slot *s, uint64_t mem, uint32_t cpu,
		    uint32_t pids)
{
	char v[32];
	int r = cg_limit_memory(1, s->dir_fd[CG_MEMORY], mem, s->reused && d->memsw);
	if (r == 0)
		r = cg_limit_pids(s->dir_fd[CG_PIDS], pids);
	if (r == 0 && (cpu || s->reused) && d->has[CG_CPU] &&
	    (r = cg_cpu_value(1, cpu, v, sizeof(v))) >= 0)
		r = cg_write_at(s->dir_fd[CG_CPU], cg_cpu_file(1), v);
	/* As on v2: whoever had the path may have frozen it. */
	if (r == 0 && s->reused && s->exposed && s->dir_fd[CG_FREEZER] >= 0)
		r = cg_write_at(s->dir_fd[CG_FREEZER], "freezer.state", "THAWED");
	return r;
}

static int apply_v2(struct cg_driver *d, struct cg_slot *s, uint64_t mem, uint32_t cpu,
		    uint32_t pids)
{
	char v[48];
	int r = cg_limit_memory(2, s->dir_fd[0], mem, false);
	if (r == 0)
		r = cg_limit_pids(s->dir_fd[0], pids);
	if (r == 0 && (cpu || s->reused) && d->has[CG_CPU] &&
	    (r = cg_cpu_value(2, cpu, v, sizeof(v))) >= 0)
		r = cg_write_at(s->dir_fd[0], cg_cpu_file(2), v);
	/* A host may have frozen the previous sandbox (sandboxd does, through
	 * the path sbx_cgroup_path gave it): never start one frozen. */
	if (r == 0 && s->reused && s->exposed) {
		int f = cg_write_at(s->dir_fd[0], "cgroup.freeze", "0");
		r = f == -ENOENT ? 0 : f;
	}
	return r;
}

int cg_slot_apply(struct cg_driver *d, struct cg_slot *s, const struct sbx_config *c)
{
	uint64_t mem = c->memory_bytes ? c->memory_bytes : 512ull << 20;
	uint32_t pids = c->pids_max ? c->pids_max : 1024;
	if (s->applied && !s->exposed && s->mem == mem && s->cpu == c->cpu_millis &&
	    s->pids == pids)
		return 0;
	int r = d->version == 2 ? apply_v2(d, s, mem, c->cpu_millis, pids)
				: apply_v1(d, s, mem, c->cpu_millis, pids);
	s->applied = r == 0;
	s->exposed = false;
	s->mem = mem;
	s->cpu = c->cpu_millis;
	s->pids = pids;
	return r;
}

/* Reads a small cgroup file into buf (NUL-terminated). Returns its length
 * or -errno. */
ssize_t cg_read_at(int dirfd, const char *file, char *buf, size_t cap)
{
	_cleanup_close_ int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, cap - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return n;
}

/* A slot is kept for reuse only if it charges less than this: what a dead
 * sandbox leaves charged (page cache of files it read) counts against the
 * next one's limit. */
#define SLOT_REUSE_MAX_CHARGE (4ull << 20)

bool cg_slot_recyclable(const struct cg_driver *d, const struct cg_slot *s)
{
	char buf[64];
	int n = d->version == 2 ? 1 : CG_NCTRL;
	/* Only slots this runtime made: an adopted one has no "tasks" fds
	 * to join through, and one named after a dead runtime may be swept
	 * (removed) by the next runtime that starts while it waits here. */
	if (strncmp(s->name, d->prefix, strlen(d->prefix)) != 0)
		return false;
	for (int i = 0; i < n; i++) {
		if (s->dir_fd[i] < 0)
			continue;
		if (d->version == 1 && s->procs_fd[i] < 0)
			return false;
		if (cg_read_at(s->dir_fd[i], "cgroup.procs", buf, sizeof(buf)) != 0)
			return false; /* a process left, or unreadable */
	}
	int mfd = s->dir_fd[d->version == 2 ? 0 : CG_MEMORY];
	const char *usage = d->version == 2 ? "memory.current" : "memory.usage_in_bytes";
	if (mfd < 0 || cg_read_at(mfd, usage, buf, sizeof(buf)) <= 0)
		return false;
	if (strtoull(buf, NULL, 10) >= SLOT_REUSE_MAX_CHARGE)
		return false;
	/* sandboxd reports the peak as the sandbox's own (its metrics): on v1
	 * the next one's starts from what is charged now; v2's memory.peak
	 * cannot be reset for other readers (a write resets it for the writer's
	 * fd alone, 6.12+), so a slot that peaked high is not reused. */
	if (d->version == 1)
		return cg_write_at(mfd, "memory.max_usage_in_bytes", "0") == 0;
	if (cg_read_at(mfd, "memory.peak", buf, sizeof(buf)) > 0 &&
	    strtoull(buf, NULL, 10) >= SLOT_REUSE_MAX_CHARGE)
		return false;
	return true;
}

static void rmdir_retry(int base, const char *name)
{
	for (int i = 0; i < 200; i++) {
		if (unlinkat(base, name, AT_REMOVEDIR) == 0 || errno != EBUSY)
			return;
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
}

void cg_slot_free(struct cg_driver *d, struct cg_slot *s)
{
	if (!s)
		return;
	for (int i = 0; i < CG_NCTRL; i++) {
		if (s->procs_fd[i] >= 0)
			close(s->procs_fd[i]);
		if (s->dir_fd[i] < 0)
			continue;
		close(s->dir_fd[i]);
		rmdir_retry(d->base_fd[i], s->name);
	}
	free(s);
}

void cg_slot_close(struct cg_slot *s)
{
	if (!s)
		return;
	for (int i = 0; i < CG_NCTRL; i++) {
		if (s->procs_fd[i] >= 0)
			close(s->procs_fd[i]);
		if (s->dir_fd[i] >= 0)
			close(s->dir_fd[i]);
	}
	free(s);
}

int cg_slot_adopt(struct cg_driver *d, pid_t pid, struct cg_slot **ret)
{
	char file[64], path[PATH_MAX];
	snprintf(file, sizeof(file), "/proc/%d/cgroup", (int)pid);
	int r = proc_cgroup(file, d->version == 2 ? "" : "memory", path, sizeof(path));
	if (r < 0)
		return r;
	const char *name = strrchr(path, '/');
	name = name ? name + 1 : path;
	if (strncmp(name, "sbx-", 4) || strlen(name) >= sizeof(((struct cg_slot *)0)->name))
		return -ESTALE; /* not one of ours (any more) */
	struct cg_slot *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	snprintf(s->name, sizeof(s->name), "%s", name);
	for (int i = 0; i < CG_NCTRL; i++)
		s->dir_fd[i] = s->procs_fd[i] = -1;
	int n = d->version == 2 ? 1 : CG_NCTRL;
	for (int i = 0; i < n && r == 0; i++) {
		if (d->base_fd[i] < 0)
			continue;
		s->dir_fd[i] = openat(d->base_fd[i], name, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
		r = s->dir_fd[i] < 0 ? (errno == ENOENT ? -ESTALE : -errno) : 0;
		/* A slot made before the freezer was one of its hierarchies */
		if (r == -ESTALE && i == CG_FREEZER) {
			r = cg_slot_adopt_freezer(d, pid, s);
			r = r == -ENOENT ? 0 : r;
		}
	}
	if (r < 0) {
		cg_slot_close(s);
		return r;
	}
	*ret = s;
	return 0;
}

int cg_slot_oom_fd(const struct cg_driver *d, const struct cg_slot *s)
{
	if (!s || s->dir_fd[CG_MEMORY] < 0)
		return -ENOENT;
	int fd =
	    openat(s->dir_fd[CG_MEMORY], d->version == 2 ? "memory.events" : "memory.oom_control",
		   O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int cg_slot_path(const struct cg_driver *d, const struct cg_slot *s, int ctrl, char *buf,
		 size_t cap)
{
	int i = d->version == 2 ? 0 : ctrl;
	if (i < 0 || i >= CG_NCTRL || s->dir_fd[i] < 0 || (i == CG_FREEZER && s->foreign_freezer))
		return -ENOENT;
	int n = snprintf(buf, cap, "%s/%s", d->base[i], s->name);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The pids listed in the cgroup file dirfd/file (cgroup.procs), sorted, in
 * *ret (malloc'ed) and *ret_n. */
static int read_pids(int dirfd, const char *file, pid_t **ret, size_t *ret_n)
{
	_cleanup_(fclosep) FILE *f = NULL;
	int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || !(f = fdopen(fd, "re"))) {
		int r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	pid_t *v = NULL;
	size_t n = 0, cap = 0;
	int pid;
	while (fscanf(f, "%d", &pid) == 1) {
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			pid_t *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = pid;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

static bool has_pid(const pid_t *v, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == pid)
			return true;
	return false;
}

int cg_slot_adopt_freezer(struct cg_driver *d, pid_t pid, struct cg_slot *s)
{
	char file[64], own[PATH_MAX], mnt[PATH_MAX], mroot[PATH_MAX], dir[PATH_MAX];
	snprintf(file, sizeof(file), "/proc/%d/cgroup", (int)pid);
	int r = proc_cgroup(file, "freezer", own, sizeof(own));
	if (r == 0)
		r = find_mount("freezer", mnt, sizeof(mnt), mroot, sizeof(mroot));
	if (r == 0)
		r = cgroup_dir(mnt, mroot, own, dir, sizeof(dir));
	if (r < 0)
		return r;
	if (!strcmp(dir, mnt) || s->dir_fd[CG_PIDS] < 0)
		return -ENOENT; /* in the root: never frozen by anyone */
	_cleanup_close_ int fd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	_cleanup_free_ pid_t *in = NULL;
	_cleanup_free_ pid_t *ours = NULL;
	size_t n_in = 0, n_ours = 0;
	r = read_pids(fd, "cgroup.procs", &in, &n_in);
	if (r == 0)
		r = read_pids(s->dir_fd[CG_PIDS], "cgroup.procs", &ours, &n_ours);
	for (size_t i = 0; r == 0 && i < n_in; i++)
		if (!has_pid(ours, n_ours, in[i]))
			r = -ENOENT; /* shared with others: not the sandbox's to freeze */
	if (r < 0)
		return r;
	s->dir_fd[CG_FREEZER] = TAKE_FD(fd);
	s->foreign_freezer = true;
	return 0;
}
