/* child.c — staging a sandbox: what the new process does between clone3 and
 * the exec of "strata-agent --stage".
 *
 * The clone gave it new pid and uts namespaces, an ipc one when no namespace
 * of a destroyed sandbox was free for reuse, and likewise a net one for
 * network "none".
 * Steps, in order; a failure reports {step, errno} (clone_vm: into the
 * parent's memory, child_args.status; clone3: to the error pipe) and exits
 * 127:
 *
 *   CGROUP    join the slot's v1 cgroups, writing "0" to each "tasks" file:
 *             this one thread (the whole process) moves, without the
 *             global cgroup_threadgroup_rwsem that a cgroup.procs write
 *             takes (v2: clone3 placed us already)
 *   IPCNS     join the reused IPC namespace (setns) if there is one
 *   NETNS     join the reused network namespace (setns), or bring lo up
 *             in the new one clone made
 *   CGROUPNS  unshare a cgroup namespace, so /proc/self/cgroup reads "/"
 *   MOUNTNS   join the runtime's template mount namespace (mntns_template:
 *             nothing but an empty, read-only tmpfs root with /s and /e,
 *             and the read-only /dev template /d)
 *             and unshare a copy of it: the host's mounts are never
 *             copied, made private or detached, whatever their number
 *   FDS       (cgroup v1: the child shares our fd table until here) take a
 *             private copy of only the fds below the highest one it still
 *             needs, which the parent keeps low (sandbox.c)
 *   TMPFS     mount a tmpfs on /s (private to this namespace); it will
 *             hold the writable layer and is resized at START; the rest
 *             is built in it, and the child chroots into it before exec
 *   DEV       /dev: a bind of the template's read-only /d (null zero full
 *             random urandom tty and the usual links, made once), with
 *             this sandbox's own devpts, shm and mqueue mounted on it
 *   PROC      /proc, with masked files and read-only kernel knobs
 *   SYS       read-only sysfs with firmware, powercap, debug, security masked
 *   CHROOT    chroot into /s (the agent's "/")
 *   FDS       fd 0-2 /dev/null, 3 the protocol socket, 4 the seccomp program
 *   EXEC      execveat(agent memfd, "--stage")
 *
 * Masked directories of /proc and /sys are bound from the template's /e
 * (empty, and read-only like the template, flags that travel with binds).
 *
 * The staged agent then waits; START (agent_stage.c) mounts the overlay root,
 * moves /proc, /dev and /sys into it, chroots and drops privileges. Every
 * mount lives in the sandbox's mount namespace and goes with it: teardown
 * unmounts nothing. The child must not allocate (see child_args), and must
 * write no global memory: on cgroup v1 it shares its parent's memory until
 * it execs (sandbox.c). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

enum {
	ST_CGROUP = 1,
	ST_IPCNS,
	ST_NETNS,
	ST_CGROUPNS,
	ST_MOUNTNS,
	ST_TMPFS,
	ST_CHROOT,
	ST_DEV,
	ST_PROC,
	ST_SYS,
	ST_FDS,
	ST_EXEC,
	ST_MAX
};

const char *child_step_name(int step)
{
	static const char *const names[ST_MAX] = {
	    [ST_CGROUP] = "join cgroup",
	    [ST_IPCNS] = "ipc namespace",
	    [ST_NETNS] = "network namespace",
	    [ST_CGROUPNS] = "cgroup namespace",
	    [ST_MOUNTNS] = "mount namespace",
	    [ST_TMPFS] = "staging tmpfs",
	    [ST_CHROOT] = "chroot",
	    [ST_DEV] = "/dev",
	    [ST_PROC] = "/proc",
	    [ST_SYS] = "/sys",
	    [ST_FDS] = "file descriptors",
	    [ST_EXEC] = "exec agent",
	};
	return step > 0 && step < ST_MAX && names[step] ? names[step] : "unknown step";
}

/* Thread-local, not global: the child may run in its parent's memory
 * (CLONE_VM|CLONE_VFORK, see sandbox.c), where it uses the TLS of the pool
 * thread that cloned it (suspended meanwhile) while other pool threads
 * stage their own children. */
static __thread int g_err_fd = -1;
static __thread int *g_status;

static _Noreturn void fail(int step)
{
	int v[2] = {step, errno};
	if (g_status) {
		/* clone_vm: the parent's memory, read once we have exited. */
		g_status[1] = v[1];
		__atomic_store_n(&g_status[0], step, __ATOMIC_RELEASE);
	} else {
		(void)!write(g_err_fd, v, sizeof(v));
	}
	_exit(127);
}

#define TRY(step, expr)                                                                            \
	do {                                                                                       \
		if ((expr) < 0)                                                                    \
			fail(step);                                                                \
	} while (0)

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

/* Builds the staging root in /s of a copy of the template namespace, with
 * the child's cwd there: the paths below are relative to it until the
 * chroot at the end of child_main. */
static void setup_root(const struct child_args *a)
{
	static const char *const dirs[] = {"u", "w", "m", "lower", "proc", "dev", "sys"};
	TRY(ST_TMPFS, mount("tmpfs", "/s", "tmpfs", MS_NOSUID | MS_NODEV, a->tmpfs_opts));
	TRY(ST_TMPFS, chdir("/s"));
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
		TRY(ST_TMPFS, mkdir(dirs[i], 0755));
}

/* /dev: the template's read-only /d (device nodes and links, made once per
 * runtime by template_dev), bound; its flags (read-only, nosuid, noexec)
 * travel with the bind. On it, this sandbox's own devpts, shm and mqueue. */
static void setup_dev(void)
{
	const unsigned long nsne = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	TRY(ST_DEV, mount("/d", "dev", NULL, MS_BIND, NULL));
	TRY(ST_DEV, mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
			  "newinstance,ptmxmode=0666,mode=0620,gid=5"));
	TRY(ST_DEV, mount("shm", "dev/shm", "tmpfs", nsne, "mode=1777,size=65536k"));
	TRY(ST_DEV, mount("mqueue", "dev/mqueue", "mqueue", nsne, NULL));
}

/* /proc and /sys with what is masked or made read-only there (masks.c,
 * relative to the staging root): files under its /dev/null, directories
 * under the template's empty read-only /e (flags that travel with binds).
 * mntns_template found once which of them this kernel has (a fresh proc and
 * sysfs instance show the same entries as a sandbox's), so that staging
 * tries no mount on an absent one. */
static void setup_proc(const struct child_args *a)
{
	const char *empty = "/e";
	TRY(ST_PROC, mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL));
	TRY(ST_PROC, masks_proc("dev/null", &empty, a->masks_present));
}

static void setup_sys(const struct child_args *a)
{
	const char *empty = "/e";
	TRY(ST_SYS,
	    mount("sysfs", "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL));
	TRY(ST_SYS, masks_sys("dev/null", &empty, a->masks_present));
}

/* fd 0-2 /dev/null, 3 socket, 4 seccomp program (inherited by the agent),
 * 5 agent memfd (CLOEXEC), 6 error pipe (CLOEXEC; clone3 only). */
static void setup_fds(const struct child_args *a)
{
	bool pipe = a->err_fd >= 0;
	int s = fcntl(a->sock_fd, F_DUPFD_CLOEXEC, 10);
	int f = fcntl(a->seccomp_fd, F_DUPFD_CLOEXEC, 10);
	int m = fcntl(a->agent_fd, F_DUPFD_CLOEXEC, 10);
	int e = pipe ? fcntl(a->err_fd, F_DUPFD_CLOEXEC, 10) : 0;
	int n = open("/dev/null", O_RDWR | O_CLOEXEC);
	TRY(ST_FDS, s | f | m | e | n);
	n = fcntl(n, F_DUPFD_CLOEXEC, 10);
	TRY(ST_FDS, n);
	if (pipe)
		g_err_fd = e;
	TRY(ST_FDS, dup2(n, 0) | dup2(n, 1) | dup2(n, 2) | dup2(s, 3) | dup2(f, 4) | dup2(m, 5) |
			(pipe ? dup2(e, 6) : 0));
	if (pipe)
		g_err_fd = 6;
	TRY(ST_FDS, fcntl(5, F_SETFD, FD_CLOEXEC) | (pipe ? fcntl(6, F_SETFD, FD_CLOEXEC) : 0));
	TRY(ST_FDS, syscall(SYS_close_range, pipe ? 7 : 6, ~0U, 0));
}

int child_main_vm(void *arg)
{
	child_main(arg);
}

int child_userns_wait(void *arg)
{
	char c;
	(void)!syscall(SYS_read, *(const int *)arg, &c, 1);
	syscall(SYS_exit, 0);
	return 0;
}

_Noreturn void child_main(const struct child_args *a)
{
	static char *const argv[] = {"strata-agent", "--stage", NULL};
	static char *const envp[] = {NULL};
	static const char oom[] = "-999";

	g_err_fd = a->err_fd;
	g_status = a->status;
	umask(0);
	for (int i = 0; i < CG_NCTRL; i++)
		if (a->procs_fd[i] >= 0)
			TRY(ST_CGROUP, write(a->procs_fd[i], "0", 1));
	if (a->ipcns_fd >= 0)
		TRY(ST_IPCNS, setns(a->ipcns_fd, CLONE_NEWIPC));
	if (a->netns_fd >= 0)
		TRY(ST_NETNS, setns(a->netns_fd, CLONE_NEWNET));
	else if (a->new_netns)
		TRY(ST_NETNS, netns_lo_up());
	if (a->cgroupns)
		TRY(ST_CGROUPNS, unshare(CLONE_NEWCGROUP));
	TRY(ST_MOUNTNS, setns(a->mntns_fd, CLONE_NEWNS));
	TRY(ST_MOUNTNS, unshare(CLONE_NEWNS));
	if (a->files_shared) {
		/* Our own fd table, holding only fds below the highest we still
		 * need (the parent keeps those low): a copy of the host's whole
		 * table, and closing it again, cost O(its fds) per staging. */
		unsigned k = (unsigned)STRATA_MAX(STRATA_MAX(a->sock_fd, a->err_fd),
						  STRATA_MAX(a->agent_fd, a->seccomp_fd));
		TRY(ST_FDS, syscall(SYS_close_range, k + 1, ~0U, CLOSE_RANGE_UNSHARE));
	}
	setup_root(a);
	setup_dev();
	setup_proc(a);
	setup_sys(a);
	/* The agent is what keeps the sandbox alive: make the OOM killer pick
	 * the workload instead (the agent resets it to 0 for its children). */
	int fd = open("proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, oom, sizeof(oom) - 1);
		close(fd);
	}
	setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
	sbx_sandbox_fd_limit();
	/* The agent's "/" is the staging tmpfs; the namespace's root above it
	 * is the template's, empty and read-only (what a chroot escape finds). */
	TRY(ST_CHROOT, chroot("."));
	TRY(ST_CHROOT, chdir("/"));
	setup_fds(a);
	umask(022);
	syscall(SYS_execveat, 5, "", argv, envp, AT_EMPTY_PATH);
	fail(ST_EXEC);
}

/* ---- the template mount namespace (made once per runtime) ----------------- */

/* The template's /d, what every sandbox's /dev is a bind of: a tmpfs
 * (nosuid, noexec, not nodev) with the device nodes and links, and empty
 * directories where each sandbox mounts its own devpts, shm and mqueue;
 * then read-only (the superblock: nothing inside can change it). */
static int template_dev(void)
{
	static const struct {
		const char *path;
		unsigned maj, min;
	} devs[] = {{"null", 1, 3},   {"zero", 1, 5},	 {"full", 1, 7},
		    {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
	static const char *const links[][2] = {
	    {"/proc/self/fd", "fd"},	   {"/proc/self/fd/0", "stdin"},
	    {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
	    {"pts/ptmx", "ptmx"},
	};
	static const char *const dirs[] = {"pts", "shm", "mqueue"};
	const unsigned long fl = MS_NOSUID | MS_NOEXEC;

	if (mkdir("d", 0755) < 0 ||
	    mount("tmpfs", "d", "tmpfs", fl, "size=4k,nr_inodes=32,mode=755") < 0 || chdir("d") < 0)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(devs); i++)
		if (mknod(devs[i].path, S_IFCHR | 0666, makedev(devs[i].maj, devs[i].min)) < 0)
			return -1;
	for (size_t i = 0; i < ARRAY_SIZE(links); i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			return -1;
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
		if (mkdir(dirs[i], i == 1 ? 01777 : 0755) < 0)
			return -1;
	if (chdir("..") < 0 || mount(NULL, "d", NULL, MS_REMOUNT | MS_RDONLY | fl, NULL) < 0)
		return -1;
	return 0;
}

/* In the helper process: a namespace whose only mounts are a read-only
 * tmpfs root holding the empty directories /s and /e, and the read-only
 * /d (template_dev). Returns 0 or an errno. */
static int template_setup(const char *dir, uint32_t present[MASK_LISTS])
{
	umask(0);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return errno;
	masks_scan(dir, present);
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "size=4k,nr_inodes=8,mode=755") < 0 ||
	    chdir(dir) < 0 || mkdir("s", 0755) < 0 || mkdir("e", 0555) < 0 || template_dev() < 0 ||
	    mount(NULL, ".", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  NULL) < 0 ||
	    syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return errno;
	return 0;
}

int mntns_template(const char *dir, int *ret_fd, uint32_t present[MASK_LISTS])
{
	int ready[2], done[2];
	if (pipe2(ready, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(done, O_CLOEXEC) < 0) {
		int r = -errno;
		close(ready[0]);
		close(ready[1]);
		return r;
	}
	/* A plain fork: the helper makes only system calls, then holds the
	 * namespace until we have an fd of it. */
	pid_t pid = fork();
	if (pid == 0) {
		close(ready[0]);
		close(done[1]); /* else the read below never sees the end */
		struct {
			int e;
			uint32_t present[MASK_LISTS];
		} msg;
		msg.e = template_setup(dir, msg.present);
		char c;
		(void)!write(ready[1], &msg, sizeof(msg));
		(void)!read(done[0], &c, 1);
		_exit(0);
	}
	int r = pid < 0 ? -errno : 0;
	struct {
		int e;
		uint32_t present[MASK_LISTS];
	} msg = {.e = EIO};
	close(ready[1]);
	close(done[0]);
	if (r == 0 && read(ready[0], &msg, sizeof(msg)) != sizeof(msg))
		r = -EIO;
	if (r == 0 && msg.e)
		r = -msg.e;
	if (r == 0)
		memcpy(present, msg.present, sizeof(msg.present));
	if (r == 0) {
		char p[64];
		snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)pid);
		*ret_fd = open(p, O_RDONLY | O_CLOEXEC);
		r = *ret_fd < 0 ? -errno : 0;
	}
	close(done[1]);
	close(ready[0]);
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	return r;
}

void sbx_sandbox_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > SBX_SANDBOX_NOFILE) {
		rl.rlim_cur = SBX_SANDBOX_NOFILE;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}
