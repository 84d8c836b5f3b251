/* worker.c — spawning workers (worker.h: what a worker is and the steps of
 * its set-up, in order; worker_cgroup.c: its cgroups).
 *
 * The host prepares everything the child needs before the clone (cgroup
 * directories and files opened, the seccomp program in memory, paths and
 * argv the caller's), because the child of a raw clone3 of a multi-threaded
 * host must not allocate: another thread may have held an allocator lock at
 * the clone, and no fork handler ran. The child then works through its
 * steps with system calls and a few formatted strings on its stack, and
 * execs; a step that fails ends it (die: a message on its fd 2, exit 126).
 *
 * Invariants:
 *  1. A worker execs its program only inside its cgroups with its limits
 *     written, its root and masks in place, its capabilities cut to
 *     caps_keep, no_new_privs set and (unless seccomp_deferred) the filter
 *     loaded; else it exits.
 *  2. Nothing of the host's but the descriptors it was given reaches it:
 *     every other fd is closed before its first mount, and it never
 *     returns into the host's code. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"
#include "sandbox/container/sbx_privs.h"
#include "sandbox/container/worker.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

struct sbx_workers {
	struct wcg cg;
	bool no_cgroups;
	struct sock_filter *filter; /* the library's seccomp program */
	unsigned short filter_len;
	char proc_masks[2048]; /* masks_proc_json */
};

/* ---- the set of workers --------------------------------------------------------- */

/* The seccomp program, read into memory (the child cannot allocate). */
static int filter_load(struct sbx_workers *ws)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r = sbx_seccomp_program(&fd);
	if (r == 0 && fstat(fd, &st) < 0)
		r = -errno;
	if (r == 0 && (st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter) ||
		       st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS))
		r = -EINVAL;
	if (r == 0 && !(ws->filter = malloc((size_t)st.st_size)))
		r = -ENOMEM;
	if (r == 0 && pread(fd, ws->filter, (size_t)st.st_size, 0) != st.st_size)
		r = -EIO;
	if (r == 0)
		ws->filter_len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
	return r;
}

int sbx_workers_new(const struct sbx_workers_config *cfg, struct sbx_workers **ret)
{
	struct sbx_workers *ws = calloc(1, sizeof(*ws));
	if (!ws)
		return -ENOMEM;
	int r = filter_load(ws);
	if (r == 0)
		r = masks_proc_json(ws->proc_masks, sizeof(ws->proc_masks));
	if (r < 0) {
		free(ws->filter);
		free(ws);
		return r;
	}
	ws->no_cgroups = cfg->no_cgroups;
	if (!cfg->no_cgroups)
		wcg_init(&ws->cg, cfg->cgroup_name ? cfg->cgroup_name : "strata-worker");
	*ret = ws;
	return 0;
}

void sbx_workers_free(struct sbx_workers *ws)
{
	if (!ws)
		return;
	wcg_done(&ws->cg);
	free(ws->filter);
	free(ws);
}

int sbx_workers_cgroup_version(const struct sbx_workers *ws)
{
	return ws->cg.version;
}

bool sbx_workers_have_cpu(const struct sbx_workers *ws)
{
	return ws->cg.version && ws->cg.has_cpu;
}

void sbx_workers_tick(struct sbx_workers *ws)
{
	wcg_retry(&ws->cg);
}

const char *sbx_workers_proc_masks(const struct sbx_workers *ws)
{
	return ws->proc_masks;
}

/* ---- the child (never returns) ------------------------------------------------- */

/* What the child needs, ready before the clone. */
struct worker_args {
	const struct sbx_workers *ws;
	const struct sbx_worker_config *cfg;
	struct wcg_dirs dirs;
	struct wcg_limits limits;
};

static _Noreturn void die(const struct worker_args *a, const char *what)
{
	dprintf(2, "%s: %s: %s\n", a->cfg->label ? a->cfg->label : "strata-worker", what,
		strerror(errno));
	_exit(126);
}

/* Where the child's descriptors go: the caller's at 0..nfds-1, its
 * children's cgroup files at SBX_WORKER_FD_JOIN_* and _OOM, the cgroup
 * directories at FD_DIRS.. for the cgroup step (closed after it). */
#define FD_DIRS 10
#define FD_MOVED (FD_DIRS + WCG_N + 2)
#define FD_PLACED (SBX_WORKER_FD_EXTRA + SBX_WORKER_EXTRA_MAX)
#define FD_TEMP FD_PLACED
_Static_assert(FD_MOVED <= SBX_WORKER_FD_EXTRA, "the extra fds come after the cgroups'");

static void place_fds(struct worker_args *a)
{
	struct wcg_dirs *d = &a->dirs;
	int *dirs[WCG_N + 2] = {&d->dir[0], &d->dir[1], &d->dir[2], &d->kids[0], &d->kids[1]};
	int src[FD_PLACED];
	for (int i = 0; i < FD_PLACED; i++)
		src[i] = -1;
	for (unsigned i = 0; i < a->cfg->nfds; i++)
		src[i] = a->cfg->fds[i];
	for (unsigned i = 0; i < a->cfg->nextra; i++)
		src[SBX_WORKER_FD_EXTRA + i] = a->cfg->extra_fds[i];
	src[SBX_WORKER_FD_JOIN_PIDS] = d->join[0];
	src[SBX_WORKER_FD_JOIN_MEMORY] = d->join[1];
	src[SBX_WORKER_FD_OOM] = d->oom;
	for (int i = 0; i < WCG_N + 2; i++)
		src[FD_DIRS + i] = *dirs[i];
	/* first out of the way of every target, then onto it (dup2: inherited
	 * across the exec; the directories are closed before it) */
	for (int i = 0; i < FD_PLACED; i++)
		if (src[i] >= 0 && (src[i] = fcntl(src[i], F_DUPFD, FD_TEMP)) < 0)
			die(a, "move a descriptor");
	for (int i = 0; i < FD_PLACED; i++) {
		if (src[i] < 0)
			close(i);
		else if (dup2(src[i], i) < 0)
			die(a, "place a descriptor");
	}
	syscall(SYS_close_range, (unsigned)FD_PLACED, ~0U, 0U);
	for (int i = 0; i < WCG_N + 2; i++)
		*dirs[i] = *dirs[i] >= 0 ? FD_DIRS + i : -1;
}

static void enter_cgroups(struct worker_args *a)
{
	if (wcg_enter(&a->ws->cg, &a->dirs, &a->limits) < 0)
		die(a, "join its cgroups and set their limits");
	syscall(SYS_close_range, (unsigned)FD_DIRS, (unsigned)FD_MOVED - 1, 0U);
	/* Its own cgroup namespace (/proc/self/cgroup shows "/"), after the
	 * limits: on a cgroup2 mounted with nsdelegate (systemd's way) the
	 * files of a namespace's root cgroup cannot be written from inside. */
	if (a->ws->cg.version && unshare(CLONE_NEWCGROUP) < 0)
		die(a, "unshare the cgroup namespace");
}

/* The seccomp program in a memfd at SBX_WORKER_FD_SECCOMP, for the worker's
 * own children. */
static void pass_filter(const struct worker_args *a)
{
	int fd = (int)syscall(SYS_memfd_create, "strata-seccomp", 1U /* MFD_CLOEXEC */);
	size_t n = (size_t)a->ws->filter_len * sizeof(*a->ws->filter);
	if (fd < 0 || pwrite(fd, a->ws->filter, n, 0) != (ssize_t)n)
		die(a, "pass the seccomp program");
	if (dup2(fd, SBX_WORKER_FD_SECCOMP) < 0)
		die(a, "place the seccomp program");
	close(fd);
}

/* /dev: a small tmpfs with the host's null, zero, full, random, urandom and
 * tty bound in and the usual links, then read-only (shared by whatever the
 * worker runs: nothing written there may outlive one of its children). */
static void mount_dev(const struct worker_args *a)
{
	static const char *const devs[] = {"null", "zero", "full", "random", "urandom", "tty"};
	static const char *const links[][2] = {{"/proc/self/fd", "dev/fd"},
					       {"/proc/self/fd/0", "dev/stdin"},
					       {"/proc/self/fd/1", "dev/stdout"},
					       {"/proc/self/fd/2", "dev/stderr"}};
	int src_fd[ARRAY_SIZE(devs)];
	if (access("dev", F_OK) < 0)
		return;
	/* the host's nodes, opened before the tmpfs hides them (with the host's
	 * root as the image, "/dev/null" is below it after) */
	for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
		char src[32];
		snprintf(src, sizeof(src), "/dev/%s", devs[i]);
		src_fd[i] = open(src, O_PATH | O_CLOEXEC);
	}
	if (mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755") < 0)
		die(a, "mount /dev");
	for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
		char src[32], dst[32];
		snprintf(src, sizeof(src), "/proc/self/fd/%d", src_fd[i]);
		snprintf(dst, sizeof(dst), "dev/%s", devs[i]);
		int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
		if (fd >= 0)
			close(fd);
		if (src_fd[i] < 0 || mount(src, dst, NULL, MS_BIND, NULL) < 0)
			unlink(dst);
		if (src_fd[i] >= 0)
			close(src_fd[i]);
	}
	for (size_t i = 0; i < ARRAY_SIZE(links); i++)
		(void)!symlink(links[i][0], links[i][1]);
	mkdir("dev/shm", 01777);
	if (mount(NULL, "dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
		die(a, "make /dev read-only");
}

/* /proc with the library's masks (masks.c; the first masked directory an
 * empty read-only tmpfs, bound over the others, /proc's and /sys's). */
static void mount_proc(const struct worker_args *a, const char **empty)
{
	if (access("proc", F_OK) < 0)
		return;
	if (mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die(a, "mount /proc");
	if (masks_proc("/dev/null", empty, NULL) < 0)
		die(a, "mask /proc");
}

/* /sys: a read-only sysfs of the worker's network namespace (hiding, for an
 * image that is the host's root, the host's /sys and what is mounted below
 * it), masked. With network "host" and the host's root as the image, that
 * sysfs is the one already mounted there, and the kernel refuses a
 * filesystem on a mount point of its own (EBUSY): the host's /sys tree is
 * detached from the private mount namespace first. */
static void mount_sys(const struct worker_args *a, const char **empty)
{
	const unsigned long fl = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	if (access("sys", F_OK) < 0)
		return;
	if (mount("sysfs", "sys", "sysfs", fl, NULL) < 0 &&
	    (errno != EBUSY || umount2("sys", MNT_DETACH) < 0 ||
	     mount("sysfs", "sys", "sysfs", fl, NULL) < 0))
		die(a, "mount /sys");
	if (masks_sys("/dev/null", empty, NULL) < 0)
		die(a, "mask /sys");
}

struct mount_attr_ {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

static void enter_root(const struct worker_args *a)
{
	const char *rootfs = a->cfg->rootfs;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die(a, "make mounts private");
	/* The host's own root as an image (tests, trusted tools): no pivot,
	 * the same read-only treatment in the private mount namespace. */
	bool host = !strcmp(rootfs, "/");
	if (!host && mount(rootfs, rootfs, NULL, MS_BIND | MS_REC, NULL) < 0)
		die(a, "bind the image root");
	struct mount_attr_ ma = {.attr_set = 0x1 /* MOUNT_ATTR_RDONLY */ | 0x2 /* NOSUID */};
	if (syscall(SYS_mount_setattr, AT_FDCWD, rootfs, 0x8000 /* AT_RECURSIVE */, &ma,
		    sizeof(ma)) < 0)
		die(a, "make the image root read-only");
	if (chdir(rootfs) < 0)
		die(a, "chdir to the image root");
	if (access("tmp", F_OK) == 0 &&
	    mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777") < 0)
		die(a, "mount /tmp");
	const char *empty = NULL;
	mount_proc(a, &empty);
	mount_sys(a, &empty);
	mount_dev(a);
	if (host)
		return;
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		die(a, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		die(a, "detach the old root");
	if (chdir("/") < 0)
		die(a, "chdir /");
}

static void set_oom_score_adj(int v)
{
	char b[16];
	int n = snprintf(b, sizeof(b), "%d", v);
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, b, (size_t)n); /* best effort (lowering needs CAP_SYS_RESOURCE) */
		close(fd);
	}
}

static _Noreturn void worker_main(struct worker_args *a)
{
	const struct sbx_worker_config *c = a->cfg;
	if (!c->survive_parent)
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	place_fds(a);
	enter_cgroups(a);
	if (c->seccomp_deferred)
		pass_filter(a);
	signal(SIGPIPE, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	umask(022);
	/* before the root: its /proc/sys is read-only, and netns_lo_up also
	 * opens low ports and ICMP echo to every id there, as in a sandbox */
	if (c->network == SBX_NET_NONE && netns_lo_up() < 0)
		die(a, "bring lo up");
	enter_root(a);
	const char *host = c->hostname ? c->hostname : "sandbox";
	if (sethostname(host, strlen(host)) < 0)
		die(a, "set the hostname");
	sbx_sandbox_fd_limit();
	setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
	if (c->oom_score_adj)
		set_oom_score_adj(c->oom_score_adj);
	int r = sbx_drop_privileges(c->caps_keep, c->seccomp_deferred ? NULL : a->ws->filter,
				    a->ws->filter_len);
	if (r < 0) {
		errno = -r;
		die(a, "drop privileges");
	}
	static char *const no_env[] = {NULL};
	execve(c->path, c->argv, c->envp ? c->envp : no_env);
	die(a, "exec");
}

/* ---- spawning --------------------------------------------------------------------- */

static int check_config(const struct sbx_workers *ws, const struct sbx_worker_config *c)
{
	if (!c->rootfs || c->rootfs[0] != '/' || !c->path || c->path[0] != '/' || !c->argv ||
	    !c->argv[0] || c->nfds > SBX_WORKER_FDS || (c->nfds && !c->fds) ||
	    c->nextra > SBX_WORKER_EXTRA_MAX || (c->nextra && !c->extra_fds))
		return -EINVAL;
	if (c->network != SBX_NET_NONE && c->network != SBX_NET_HOST)
		return -EINVAL;
	if (c->hostname && (!c->hostname[0] || strlen(c->hostname) > 64))
		return -EINVAL;
	if (!ws->cg.version)
		return ws->no_cgroups ? 0 : -ENOTSUP;
	if (c->memory_bytes < SBX_MIN_MEMORY || !c->pids_max ||
	    (c->children && (c->children_memory_bytes < SBX_MIN_MEMORY || !c->children_pids_max)))
		return -EINVAL;
	return 0;
}

int sbx_worker_spawn(struct sbx_workers *ws, const struct sbx_worker_config *cfg,
		     struct sbx_worker *ret)
{
	int r = check_config(ws, cfg);
	if (r < 0)
		return r;
	struct worker_args a = {
	    .ws = ws,
	    .cfg = cfg,
	    .limits = {.memory = cfg->memory_bytes,
		       .pids = cfg->pids_max,
		       .children_memory = cfg->children_memory_bytes,
		       .children_pids = cfg->children_pids_max},
	};
	wcg_dirs_init(&a.dirs);
	struct sbx_worker w = {.pid = -1, .pidfd = -1, .id = ++ws->cg.next_id, .ws = ws};
	r = wcg_prepare(&ws->cg, w.id, cfg->children, &a.dirs);
	w.cpu_fd = a.dirs.cpu_fd;
	a.dirs.cpu_fd = -1; /* the worker's, not the child's */
	if (r == 0 && cfg->cpu_millis)
		r = sbx_worker_set_cpu(&w, cfg->cpu_millis);
	struct clone_args ca = {
	    .flags = CLONE_PIDFD | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC |
		     (cfg->network == SBX_NET_NONE ? CLONE_NEWNET : 0),
	    .pidfd = (uint64_t)(uintptr_t)&w.pidfd,
	    .exit_signal = SIGCHLD,
	};
	if (a.dirs.into >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)a.dirs.into;
	}
	long pid = r < 0 ? -1 : syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == 0)
		worker_main(&a);
	if (r == 0 && pid < 0)
		r = -errno;
	wcg_dirs_close(&a.dirs);
	if (r < 0) {
		sbx_worker_free(&w);
		return r;
	}
	w.pid = (pid_t)pid;
	*ret = w;
	return 0;
}

int sbx_worker_set_cpu(struct sbx_worker *w, uint32_t millis)
{
	char b[48];
	if (w->cpu_fd < 0)
		return -ENOTSUP;
	if (millis == w->cpu)
		return 0;
	int n = cg_cpu_value(w->ws->cg.version, millis, b, sizeof(b));
	if (n < 0)
		return n;
	ssize_t k = pwrite(w->cpu_fd, b, (size_t)n, 0);
	if (k != n)
		return k < 0 ? -errno : -EIO;
	w->cpu = millis;
	return 0;
}

int sbx_worker_reap(struct sbx_worker *w, bool wait, siginfo_t *ret)
{
	siginfo_t si = {0};
	if (w->pidfd < 0)
		return -ECHILD;
	while (waitid((idtype_t)P_PIDFD, (id_t)w->pidfd, &si, WEXITED | (wait ? 0 : WNOHANG)) < 0)
		if (errno != EINTR)
			return -errno;
	if (!si.si_pid)
		return 0;
	close(w->pidfd);
	w->pidfd = -1;
	if (ret)
		*ret = si;
	return 1;
}

void sbx_worker_free(struct sbx_worker *w)
{
	if (w->pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, w->pidfd, SIGKILL, NULL, 0);
		sbx_worker_reap(w, true, NULL);
	}
	if (w->cpu_fd >= 0)
		close(w->cpu_fd);
	w->cpu_fd = -1;
	if (w->ws && w->id)
		wcg_remove(&w->ws->cg, w->id);
	w->id = 0;
}

void sbx_worker_release(struct sbx_worker *w)
{
	if (w->pidfd >= 0)
		close(w->pidfd);
	w->pidfd = -1;
	if (w->cpu_fd >= 0)
		close(w->cpu_fd);
	w->cpu_fd = -1;
	w->id = 0;
}

int sbx_worker_cgroup_path(const struct sbx_worker *w, const char *ctrl, bool children, char *buf,
			   size_t cap)
{
	return wcg_path(&w->ws->cg, w->id, ctrl, children, buf, cap);
}

int sbx_worker_oom_kills(const struct sbx_worker *w, bool children, uint64_t *ret)
{
	char dir[PATH_MAX], p[PATH_MAX + 32], buf[512];
	int r = sbx_worker_cgroup_path(w, "memory", children, dir, sizeof(dir));
	if (r < 0)
		return r;
	snprintf(p, sizeof(p), "%s/%s", dir,
		 w->ws->cg.version == 2 ? "memory.events" : "memory.oom_control");
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	const char *k = strstr(buf, "oom_kill ");
	if (!k)
		return -ENOENT;
	*ret = strtoull(k + strlen("oom_kill "), NULL, 10);
	return 0;
}
