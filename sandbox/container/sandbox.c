/* sandbox.c — staging, starting and destroying container sandboxes.
 *
 * A sandbox is made in two phases so that the expensive part can happen
 * before anyone asks for it (runtime.c keeps a pool of staged sandboxes):
 *
 *   sbx_stage   cgroup slot, socketpair, clone (new pid, uts, ipc and, for
 *               network "none", net namespaces, or a destroyed sandbox's
 *               ipc and network namespaces that the child joins; a pidfd; straight
 *               into the cgroup on v2), child.c unshares a copy of the
 *               runtime's template mount namespace, builds the staging
 *               root and execs "strata-agent --stage"; done at the agent's
 *               HELLO. Costs ~1 ms of CPU: namespaces, ~30 mounts, cgroup
 *               migration (v1 waits for an RCU grace period), exec.
 *   sbx_create  take a staged sandbox (or stage one inline), write the
 *               cgroup limits, clone the rootfs as a detached mount
 *               (open_tree) and send it with START; the agent mounts the
 *               overlay, chroots, drops privileges (agent_stage.c).
 *
 * sbx_destroy: SIGKILL through the pidfd kills the agent, and with it (pid 1)
 * every process of the sandbox, at once; the rest is the runtime's reaper's
 * (runtime.c): its epoll set holds the pidfd, which turns readable once
 * every process is gone and the mount namespace, with all the sandbox's
 * mounts, has been torn down (which costs an expedited RCU grace period or
 * two); then sbx_finish reaps the agent and removes the cgroup directories,
 * or keeps them and the network and IPC namespaces for the next staging.
 * sbx_runtime_free waits for all of that. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/agent/proto.h"
#include "sandbox/container/sandbox-internal.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
/* The staging tmpfs's limits are START's defaults (send_start: 256 MiB,
 * disk / 2048 inodes), so that the agent need not remount it for most
 * sandboxes (agent_stage.c). */
#define STAGE_TMPFS_OPTS "size=256m,nr_inodes=131072,mode=755"
/* With the layers on disk (layer.c) the staging tmpfs holds only mount
 * points and the agent's socket. */
#define STAGE_TMPFS_OPTS_DISK "size=1m,nr_inodes=64,mode=755"
#define START_TIMEOUT_MS 10000

static int check_config(const struct sbx_config *c)
{
	struct stat st;
	if (!c->rootfs || c->rootfs[0] != '/')
		return -EINVAL;
	if (strlen(c->rootfs) >= PATH_MAX)
		return -ENAMETOOLONG;
	if (c->hostname && (strlen(c->hostname) > 64 || !c->hostname[0]))
		return -EINVAL;
	if (c->network != SBX_NET_NONE && c->network != SBX_NET_HOST)
		return -EINVAL;
	/* Below these a sandbox cannot even hold its agent. */
	if ((c->memory_bytes && c->memory_bytes < SBX_MIN_MEMORY) ||
	    (c->disk_bytes && c->disk_bytes < SBX_MIN_DISK) ||
	    (c->disk_inodes && c->disk_inodes < SBX_MIN_DISK_INODES) ||
	    (c->pids_max && c->pids_max < 2))
		return -EINVAL;
	if (stat(c->rootfs, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Reads the child's {step, errno} report; 0 when the pipe closed (exec). */
static int child_status(int fd)
{
	int v[2];
	ssize_t n;
	do
		n = read(fd, v, sizeof(v));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(v))
		return 0;
	return v[1] > 0 ? -v[1] : -EIO;
}

int sbx_wait_hello(struct sbx *s)
{
	struct ag_hdr h;
	uint8_t *buf = NULL;
	size_t cap = 0;
	int r = client_read_frame(s->ctl, &h, &buf, &cap, START_TIMEOUT_MS);
	if (r == 0 && h.type != AG_T_HELLO)
		r = -EPROTO;
	free(buf);
	return r;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int sbx_wait_reply(struct sbx *s, uint16_t type, uint32_t id, int timeout_ms, int *ret_status)
{
	struct ag_hdr h;
	uint8_t *buf = NULL;
	size_t cap = 0;
	int r;
	do
		r = client_read_frame(s->ctl, &h, &buf, &cap, timeout_ms);
	while (r == 0 && (h.type != (type | AG_T_REPLY) || h.id != id));
	if (r == 0)
		*ret_status = h.len >= 4 ? (int32_t)le32(buf) : -EBADMSG;
	free(buf);
	return r;
}

/* Reaps an exited agent through its pidfd. An adopted agent is not our
 * child: waitid then fails with ECHILD (its new parent reaps it). */
static void reap_pidfd(struct sbx *s)
{
	siginfo_t si;
	while (waitid((idtype_t)P_PIDFD, (id_t)s->pidfd, &si, WEXITED | __WALL) < 0 &&
	       errno == EINTR)
		;
	close(s->pidfd);
	s->pidfd = -1;
}

/* Kills the sandbox and waits until all its processes are gone: its pidfd
 * turns readable when the agent (pid 1 of its namespace) has exited, which
 * is after every other process of the namespace and after its mount
 * namespace was torn down. */
static void kill_wait(struct sbx *s)
{
	if (s->pidfd < 0)
		return;
	struct pollfd pfd = {.fd = s->pidfd, .events = POLLIN};
	syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
	sbx_thaw_killed(s);
	while (poll(&pfd, 1, 10000) < 0 && errno == EINTR)
		;
	reap_pidfd(s);
}

static void fill_args(struct sbx *s, struct child_args *a)
{
	struct sbx_runtime *rt = s->rt;
	a->mntns_fd = rt->mntns_fd;
	snprintf(a->tmpfs_opts, sizeof(a->tmpfs_opts), "%s",
		 s->layer.id ? STAGE_TMPFS_OPTS_DISK : STAGE_TMPFS_OPTS);
	a->netns_fd = s->netns.fd;
	a->ipcns_fd = s->ipc.ns_fd;
	a->new_netns = s->net == SBX_NET_NONE && s->netns.fd < 0;
	a->cgroupns = rt->cg.version != 0;
	a->agent_fd = rt->agent_fd;
	memcpy(a->masks_present, rt->masks_present, sizeof(a->masks_present));
	a->seccomp_fd = rt->seccomp_fd;
	for (int i = 0; i < CG_NCTRL; i++)
		a->procs_fd[i] = s->cg && rt->cg.version == 1 ? s->cg->procs_fd[i] : -1;
}

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ASAN 1
#endif
#endif
#ifdef STRATA_ASAN
#include <sanitizer/asan_interface.h>
#define ASAN_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define ASAN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Like fork (new namespaces, no SIGCHLD), but the child runs in our memory
 * until it execs the agent, as posix_spawn's child does: no copy of the
 * page tables of a large multi-threaded host (sandboxd), no copy-on-write
 * faults and TLB shootdowns in its other threads afterwards. CLONE_VFORK
 * suspends this thread until the exec (or the child's failure), so the
 * child may use this thread's TLS and the args on its stack; child.c writes
 * no global memory. Returns the pid (pidfd in *ret_pidfd), or -1 and errno. */
static long clone_vm(struct sbx_runtime *rt, uint64_t flags, int *ret_pidfd, struct child_args *a)
{
	size_t size = SBX_CHILD_STACK_SIZE;
	char *stack = NULL;
	/* A stack of an earlier staging (its child has exec'd or exited: the
	 * vfork is over), which saves an mmap, a munmap with its TLB
	 * shootdown and the page faults of a fresh stack. */
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_stacks)
		stack = rt->stacks[--rt->n_stacks];
	pthread_mutex_unlock(&rt->pool.lock);
	if (!stack) {
		stack = mmap(NULL, size, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (stack == MAP_FAILED)
			return -1;
	}
	long pid = clone(child_main_vm, stack + size,
			 (int)(flags | CLONE_VM | CLONE_VFORK | CLONE_FILES), a, ret_pidfd);
	int e = errno;
	/* child.c is built without ASan; anything it called that is
	 * instrumented may have left the shadow of this stack poisoned. */
	ASAN_UNPOISON(stack, size);
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_stacks < SBX_STAGING_MAX) {
		rt->stacks[rt->n_stacks++] = stack;
		stack = NULL;
	}
	pthread_mutex_unlock(&rt->pool.lock);
	if (stack)
		munmap(stack, size);
	errno = e;
	return pid;
}

static int clone_child(struct sbx *s, struct child_args *a)
{
	struct sbx_runtime *rt = s->rt;
	bool vm = rt->cg.version != 2; /* clone_vm: CLONE_VM | CLONE_VFORK | CLONE_FILES */
	int sp[2], ep[2] = {-1, -1};
	/* vm: the child reports a failure {step, errno} in our memory (it runs
	 * in it) and has exited when clone returns: no pipe, no read. */
	int st[2] = {0, 0};
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return -errno;
	if (!vm && pipe2(ep, O_CLOEXEC) < 0) {
		close(sp[0]);
		close(sp[1]);
		return -errno;
	}
	s->ctl = sp[0];
	/* v1: the child shares our fd table at first and then keeps a copy of
	 * its low part only (child.c): its end of the socket goes to a
	 * reserved low number (a placeholder of /dev/null until now) when one
	 * is free. */
	int t = vm ? rsv_take(rt) : -1;
	bool rsv = t >= 0 && dup3(sp[1], rt->rsv_fd[t], O_CLOEXEC) >= 0;
	if (rsv) {
		close(sp[1]);
		sp[1] = rt->rsv_fd[t];
	}
	a->sock_fd = sp[1];
	a->err_fd = ep[1];
	a->status = vm ? st : NULL;
	a->files_shared = vm;
	struct clone_args ca = {
	    /* No CLONE_NEWNS: the child unshares a copy of the template. */
	    .flags = CLONE_NEWPID | CLONE_NEWUTS | CLONE_PIDFD |
		     (a->ipcns_fd < 0 ? CLONE_NEWIPC : 0) | (a->new_netns ? CLONE_NEWNET : 0),
	    .pidfd = (uint64_t)(uintptr_t)&s->pidfd,
	    .exit_signal = 0, /* not SIGCHLD: a waitpid(-1) elsewhere cannot reap it */
	};
	long pid;
	if (!vm) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)s->cg->dir_fd[0];
		pid = syscall(SYS_clone3, &ca, sizeof(ca));
		if (pid == 0)
			child_main(a);
	} else {
		pid = clone_vm(rt, ca.flags, &s->pidfd, a);
	}
	int r = pid < 0 ? -errno : 0;
	if (rsv)
		dup3(rt->rsv_null, sp[1], O_CLOEXEC); /* the child has exec'd or failed */
	else
		close(sp[1]);
	if (t >= 0)
		rsv_give(rt, t);
	if (ep[1] >= 0)
		close(ep[1]);
	if (r == 0) {
		s->pid = (pid_t)pid;
		if (!vm)
			r = child_status(ep[0]);
		else if (__atomic_load_n(&st[0], __ATOMIC_ACQUIRE))
			r = st[1] > 0 ? -st[1] : -EIO;
	}
	/* Kept for reuse after the sandbox (a zombie has none: not reused). */
	if (r == 0 && a->new_netns) {
		char p[64];
		s->netns.fd = netns_open(s->pid);
		/* Holds the namespace's sysfs superblock for the sandboxes that
		 * will reuse the namespace (-1: they make their own). */
		snprintf(p, sizeof(p), "/proc/%d/root/sys", (int)s->pid);
		s->netns.sys_fd = open(p, O_PATH | O_CLOEXEC);
	}
	if (r == 0 && a->ipcns_fd < 0)
		(void)ipcns_open(s->pid, &s->ipc); /* else {-1, -1}: not reused */
	if (ep[0] >= 0)
		close(ep[0]);
	return r;
}

int sbx_stage(struct sbx_runtime *rt, enum sbx_network net, struct sbx **ret)
{
	struct child_args a = {0};
	struct sbx *s = calloc(1, sizeof(*s));
	int r = 0;
	if (!s)
		return -ENOMEM;
	s->rt = rt;
	s->pid = -1;
	s->pidfd = s->ctl = -1;
	s->net = net;
	s->layer.tree_fd = -1;
	netns_init(&s->netns);
	userns_init(&s->userns);
	/* The writable layer's directory and quota are made here, off the
	 * create's path; START only changes limits other than the defaults. */
	if (rt->layers.quota)
		r = layer_new(&rt->layers, &s->layer);
	if (net == SBX_NET_NONE)
		net_take(rt, &s->netns);
	s->ipc = ipc_take(rt);
	if (r == 0 && rt->cg.version && !(s->cg = slot_take(rt)))
		r = cg_slot_new(&rt->cg, __atomic_add_fetch(&rt->seq, 1, __ATOMIC_RELAXED), &s->cg);
	if (r == 0) {
		fill_args(s, &a);
		r = clone_child(s, &a);
	}
	if (r == 0)
		r = sbx_wait_hello(s);
	if (r < 0) {
		sbx_free_now(s);
		return r;
	}
	if (s->layer.id)
		layer_set_owner(&rt->layers, s->layer.id, s->pid);
	*ret = s;
	return 0;
}

/* Sends START with the rootfs tree in SCM_RIGHTS, then the layer's (when it
 * is on disk, after setting its quota) and the cgroup's OOM kill counter
 * (the agent tells from it which commands the OOM killer ended). */
static int send_start(struct sbx *s, const struct sbx_config *c, int tree, uint32_t id)
{
	uint64_t disk = c->disk_bytes ? c->disk_bytes : SBX_DEFAULT_DISK;
	uint64_t inodes = c->disk_inodes ? c->disk_inodes : STRATA_MAX(disk / 2048, 8192);
	_cleanup_close_ int oom = s->rt && s->cg ? cg_slot_oom_fd(&s->rt->cg, s->cg) : -1;
	int fds[4] = {tree};
	int nfds = 1;
	if (s->layer.id)
		fds[nfds++] = s->layer.tree_fd;
	if (oom >= 0)
		fds[nfds++] = oom;
	if (s->userns.fd >= 0)
		fds[nfds++] = s->userns.fd;
	struct ag_start_req q = {.disk_bytes = disk,
				 .disk_inodes = inodes,
				 .caps_keep = sbx_caps_keep(),
				 .flags = (c->persist ? AG_START_F_PERSIST : 0) |
					  (s->layer.id ? AG_START_F_LAYER : 0) |
					  (oom >= 0 ? AG_START_F_OOM_FD : 0) |
					  (s->userns.fd >= 0 ? AG_START_F_USERNS : 0),
				 .orphan_timeout_ms = c->orphan_timeout_ms,
				 .uid_base = userns_base(&s->userns)};
	if (s->layer.id) {
		int r = layer_limit(&s->rt->layers, &s->layer, disk, inodes);
		if (r < 0)
			return r;
	}
	snprintf(q.hostname, sizeof(q.hostname), "%s", c->hostname ? c->hostname : "sandbox");
	struct ag_wr w;
	ag_wr_init(&w);
	size_t off = ag_wr_begin(&w, AG_T_START, id);
	ag_start_encode(&w, &q);
	int r = ag_wr_end(&w, off);
	if (r < 0) {
		ag_wr_done(&w);
		return r;
	}
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(fds))];
	} u;
	memset(&u, 0, sizeof(u));
	struct iovec iov = {.iov_base = w.data, .iov_len = w.len};
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = u.b,
			   .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	ssize_t n = sendmsg(s->ctl, &m, MSG_NOSIGNAL);
	r = n < 0 ? -errno : ((size_t)n == w.len ? 0 : -EIO); /* a small frame: all or nothing */
	ag_wr_done(&w);
	return r;
}

/* The rootfs as a detached, read-only, nosuid, nodev mount tree: the lower
 * layer must never be written, even by a process that escapes the sandbox's
 * chroot into the staging tmpfs (agent_stage.c). With a user namespace
 * (userns >= 0) the tree is idmapped into it: the image's files, owned by
 * host ids 0..65535, are those ids inside (root's are root's). The
 * filesystem must allow idmapped mounts (ext4, XFS, btrfs, tmpfs, EROFS,
 * overlayfs do): -EINVAL otherwise, and the sandbox cannot have one. */
static int rootfs_tree_of(const char *rootfs, int userns, unsigned recursive)
{
	struct {
		uint64_t attr_set, attr_clr, propagation, userns_fd;
	} attr = {.attr_set = 0x1 | 0x2 | 0x4}; /* MOUNT_ATTR_RDONLY | NOSUID | NODEV */
	if (userns >= 0) {
		attr.attr_set |= 0x00100000; /* MOUNT_ATTR_IDMAP */
		attr.userns_fd = (uint64_t)userns;
	}
	int fd =
	    (int)syscall(SYS_open_tree, AT_FDCWD, rootfs, OPEN_TREE_CLONE | O_CLOEXEC | recursive);
	if (fd < 0)
		return -errno;
	if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | recursive, &attr, sizeof(attr)) <
	    0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int rootfs_tree(const char *rootfs, int userns)
{
	return rootfs_tree_of(rootfs, userns, AT_RECURSIVE);
}

/* The name of a filesystem type for messages ("0x..." when unknown). */
static const char *fs_name(long t, char *buf, size_t cap)
{
	static const struct {
		long t;
		const char *name;
	} names[] = {{0xEF53, "ext4"},		{0x58465342, "XFS"},
		     {0x9123683E, "btrfs"},	{0x01021994, "tmpfs"},
		     {0x9FA0, "proc"},		{0xE0F5E1E2, "EROFS"},
		     {0x794C7630, "overlayfs"}, {0x01021997, "9p"},
		     {0x65735546, "FUSE"},	{0x6969, "NFS"},
		     {0x73717368, "squashfs"},	{0x2FC12FC1, "ZFS"},
		     {0x858458F6, "ramfs"},	{0xFF534D42, "CIFS"},
		     {0x5346544E, "NTFS"},	{0x4D44, "FAT"}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].t == t)
			return names[i].name;
	snprintf(buf, cap, "0x%lx", (unsigned long)t);
	return buf;
}

/* Whether this kernel's overlayfs takes idmapped lower layers (5.19). */
static int overlay_takes_idmap(char *why, size_t cap)
{
	struct utsname u;
	unsigned major = 0, minor = 0;
	if (uname(&u) < 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2)
		return 0; /* unknown: let the first create tell */
	if (major > 5 || (major == 5 && minor >= 19))
		return 0;
	snprintf(why, cap, "Linux %s: overlayfs takes idmapped lower layers from 5.19 on",
		 u.release);
	return -EOPNOTSUPP;
}

int sbx_runtime_userns_check(struct sbx_runtime *rt, const char *rootfs, char *why, size_t cap)
{
	struct statfs sf;
	char tname[24];
	if (cap)
		why[0] = 0;
	int r = overlay_takes_idmap(why, cap);
	if (r < 0)
		return r;
	if (rootfs && statfs(rootfs, &sf) < 0) {
		r = -errno;
		snprintf(why, cap, "%s: %s", rootfs, strerror(-r));
		return r;
	}
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->userns_make_r < 0) {
		r = rt->userns_make_r;
		snprintf(why, cap, "%s", rt->userns_make_why);
		pthread_mutex_unlock(&rt->pool.lock);
		return r;
	}
	for (unsigned i = 0; rootfs && i < rt->n_userns_fs; i++)
		if (rt->userns_fs[i].f_type == (long)sf.f_type) {
			r = rt->userns_fs[i].r;
			snprintf(why, cap, "%s", rt->userns_fs[i].why);
			pthread_mutex_unlock(&rt->pool.lock);
			return r;
		}
	pthread_mutex_unlock(&rt->pool.lock);
	struct userns u;
	userns_init(&u);
	r = userns_take(rt, &u);
	if (r < 0) {
		snprintf(why, cap, "no user namespace for the sandbox: %s", strerror(-r));
		/* A shortage (every range taken, no fd or memory) may pass; the
		 * kernel's refusal (EPERM, EINVAL, ENOSPC: max_user_namespaces)
		 * does not. */
		if (r != -EUSERS && r != -EMFILE && r != -ENFILE && r != -ENOMEM && r != -EAGAIN) {
			pthread_mutex_lock(&rt->pool.lock);
			rt->userns_make_r = r;
			snprintf(rt->userns_make_why, sizeof(rt->userns_make_why), "%s", why);
			pthread_mutex_unlock(&rt->pool.lock);
		}
		return r;
	}
	if (!rootfs) { /* the kernel's part only */
		userns_recycle(rt, &u);
		return 0;
	}
	int tree = rootfs_tree(rootfs, u.fd);
	/* A mount below rootfs that refuses (the image's own filesystem
	 * takes it): that rootfs's answer, not its filesystem type's. */
	int top = tree < 0 ? rootfs_tree_of(rootfs, u.fd, 0) : -1;
	userns_recycle(rt, &u); /* it served nobody: nothing of a sandbox in it */
	r = tree < 0 ? tree : 0;
	if (tree >= 0)
		close(tree);
	if (top >= 0) {
		close(top);
		snprintf(why, cap, "a mount below %s does not support idmapped mounts", rootfs);
		return r;
	}
	const char *fs = fs_name((long)sf.f_type, tname, sizeof(tname));
	if (r == -ENOSYS)
		snprintf(why, cap, "the kernel has no mount_setattr (idmapped mounts: Linux 5.12)");
	else if (r == -EINVAL || r == -EPERM || r == -EOPNOTSUPP)
		snprintf(why, cap, "the image's %s filesystem does not support idmapped mounts",
			 fs);
	else if (r < 0)
		snprintf(why, cap, "idmapping %s (%s): %s", rootfs, fs, strerror(-r));
	if (r < 0 && r != -ENOSYS && r != -EINVAL && r != -EPERM && r != -EOPNOTSUPP)
		return r; /* something else (ENOENT, EMFILE): not the filesystem's answer */
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_userns_fs < SBX_USERNS_FS_TYPES) {
		struct userns_fs *f = &rt->userns_fs[rt->n_userns_fs++];
		f->f_type = (long)sf.f_type;
		f->r = r;
		snprintf(f->why, sizeof(f->why), "%s", why);
	}
	pthread_mutex_unlock(&rt->pool.lock);
	return r;
}

static int start(struct sbx *s, const struct sbx_config *c)
{
	if (c->userns && s->userns.fd < 0) {
		int e = userns_take(s->rt, &s->userns);
		if (e < 0)
			return e;
	}
	_cleanup_close_ int tree = rootfs_tree(c->rootfs, s->userns.fd);
	if (tree < 0)
		return tree;
	uint32_t id = ++s->next_id;
	int status = 0;
	int r = send_start(s, c, tree, id);
	if (r == 0)
		r = sbx_wait_reply(s, AG_T_START, id, START_TIMEOUT_MS, &status);
	if (r == 0)
		r = status;
	if (r == 0 && s->userns.fd >= 0)
		userns_set_owner(&s->userns, s->pid);
	/* The agent has mounted it (or failed): the mount lives on in its
	 * namespace, the fd is not needed any more. */
	if (s->layer.tree_fd >= 0)
		close(s->layer.tree_fd);
	s->layer.tree_fd = -1;
	return r;
}

int sbx_create(struct sbx_runtime *rt, const struct sbx_config *c, struct sbx **ret)
{
	int r = check_config(c);
	if (r < 0)
		return r;
	bool inl = false;
	struct sbx *s = c->network == SBX_NET_NONE ? pool_take(rt, &inl) : NULL;
	bool pooled = s != NULL;
	for (;;) {
		if (!s) {
			r = sbx_stage(rt, c->network, &s);
			if (inl) {
				pool_inline_done(rt);
				inl = false;
			}
			if (r < 0)
				break;
		}
		r = rt->cg.version ? cg_slot_apply(&rt->cg, s->cg, c) : 0;
		if (r == 0)
			r = start(s, c);
		if (r == 0) {
			s->persist = c->persist;
			break;
		}
		sbx_free_now(s);
		s = NULL;
		/* A staged sandbox that died while it waited (killed from
		 * outside): stage a fresh one, once. */
		if (!pooled || r != -EPIPE)
			break;
		pooled = false;
	}
	pool_kick(rt);
	if (r < 0)
		return r;
	*ret = s;
	return 0;
}

void sbx_kill(struct sbx *s)
{
	if (s->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
	sbx_thaw_killed(s);
	if (s->ctl >= 0)
		close(s->ctl);
	s->ctl = -1;
}

void sbx_destroy(struct sbx *s)
{
	if (!s)
		return;
	sbx_kill(s);
	if (s->rt && pool_reap(s->rt, s) == 0)
		return;
	sbx_free_now(s);
}

void sbx_free_now(struct sbx *s)
{
	if (!s)
		return;
	kill_wait(s);
	sbx_finish(s);
}

void sbx_finish(struct sbx *s)
{
	client_chan_free(s);
	if (s->pidfd >= 0)
		reap_pidfd(s);
	if (s->ctl >= 0)
		close(s->ctl);
	if (s->layer.tree_fd >= 0)
		close(s->layer.tree_fd);
	if (s->rt) {
		/* The mount namespace is gone: nothing writes there any more. */
		if (s->layer.id)
			(void)layer_free(&s->rt->layers, s->layer.id);
		slot_recycle(s->rt, s->cg);
		net_recycle(s->rt, &s->netns);
		ipc_recycle(s->rt, &s->ipc);
		userns_recycle(s->rt, &s->userns);
	} else {
		netns_close(&s->netns);
		ipcns_close(&s->ipc);
		userns_free(&s->userns);
	}
	free(s);
}

uint32_t sbx_uid_base(const struct sbx *s)
{
	return userns_base(&s->userns);
}

pid_t sbx_pid(const struct sbx *s)
{
	return s->pid;
}

int sbx_agent_fd(const struct sbx *s)
{
	return s->ctl;
}

const char *sbx_cgroup_path(const struct sbx *s, const char *ctrl)
{
	struct sbx *m = (struct sbx *)s; /* caches the formatted path */
	int i = cg_ctrl_index(ctrl);
	if (!s->rt || !s->cg || i < 0 ||
	    cg_slot_path(&s->rt->cg, s->cg, i, m->cg_path, sizeof(m->cg_path)) < 0)
		return NULL;
	m->cg->exposed = true; /* the next sandbox in this slot rewrites its limits */
	return m->cg_path;
}

const char *sbx_cgroup_name(const struct sbx *s)
{
	return s->cg ? s->cg->name : NULL;
}

int sbx_attach_agent(int fd, pid_t pid, struct sbx **ret)
{
	struct sbx *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->pid = pid;
	s->ctl = fd;
	s->layer.tree_fd = -1;
	netns_init(&s->netns);
	userns_init(&s->userns);
	s->ipc = (struct ipcns){-1, -1};
	s->pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	if (pid > 0 && s->pidfd < 0) {
		int r = -errno;
		free(s);
		return r;
	}
	*ret = s;
	return 0;
}

void sbx_release(struct sbx *s)
{
	if (!s)
		return;
	if (!s->persist) {
		sbx_destroy(s); /* it would end with its stream anyway */
		return;
	}
	client_chan_free(s);
	if (s->ctl >= 0)
		close(s->ctl);
	if (s->pidfd >= 0)
		close(s->pidfd);
	if (s->layer.tree_fd >= 0)
		close(s->layer.tree_fd); /* its layer stays, for an adopter */
	netns_close(&s->netns);		 /* still in use: never reused */
	ipcns_close(&s->ipc);
	userns_close(&s->userns); /* its range stays recorded for an adopter */
	cg_slot_close(s->cg);
	free(s);
}

int sbx_disk_usage(struct sbx *s, uint64_t *ret_bytes, uint64_t *ret_inodes)
{
	if (s->rt && s->layer.id)
		return layer_usage(&s->rt->layers, s->layer.id, ret_bytes, ret_inodes);
	/* On its staging tmpfs, now detached (agent_stage.c): the overlay
	 * root answers statfs with its upper layer's figures. */
	char p[64];
	struct statfs sf;
	snprintf(p, sizeof(p), "/proc/%d/root", (int)s->pid);
	if (s->pid <= 0 || statfs(p, &sf) < 0)
		return errno == ENOENT || s->pid <= 0 ? -ESRCH : -errno;
	*ret_bytes = (uint64_t)(sf.f_blocks - sf.f_bfree) * (uint64_t)sf.f_bsize;
	*ret_inodes = (uint64_t)(sf.f_files - sf.f_ffree);
	return 0;
}
