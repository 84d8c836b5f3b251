/* agent_stage.c — the last step of starting a container sandbox, done by the
 * agent itself ("strata-agent --stage").
 *
 * The container backend pre-starts sandboxes (sandbox/container/child.c):
 * namespaces, cgroup, a private tmpfs (the agent's root, by chroot; it sits
 * at /s of an otherwise empty read-only namespace root) holding /u and /w
 * (the writable layer), /lower (empty), /m (the future root) and a finished
 * /proc, /dev and /sys, then execs the agent with fd 4 holding the seccomp
 * BPF program. The
 * staged agent keeps its privileges, serves only START and PING, and on
 * START (with the rootfs as a detached mount tree in SCM_RIGHTS, and with
 * AG_START_F_OOM_FD the sandbox's OOM kill counter after it, kept for
 * agent_exec.c):
 *
 *   1. attaches the rootfs at /lower (move_mount)
 *   2. with a layer on disk (AG_START_F_LAYER: a second detached mount,
 *      the sandbox's project-quota directory, sandbox/container/layer.c)
 *      attaches it at /q and mounts the overlay lower=/lower upper=/q/u
 *      work=/q/w on /m; else the overlay takes upper=/u work=/w on the
 *      staging tmpfs (nodev either way; the lower tree arrives read-only,
 *      nosuid, nodev)
 *   3. tmpfs layer: resizes the tmpfs (the writable layer's limit), unless
 *      it has that size already (staging mounts it with the default one)
 *   4. moves /proc, /dev, /sys into /m, makes /m the root (pivot_root) and
 *      detaches the staging tmpfs
 *   5. sets the hostname; a persistent sandbox (AG_START_F_PERSIST) also
 *      makes the channel of a host that re-adopts it after a restart, a
 *      nameless socketpair whose host end is at AG_HOST_FD
 *   6. with AG_START_F_USERNS (the sandbox's user namespace as the last
 *      fd, uid_base the host id of root inside): before the mounts, owns
 *      the upper layer's root by uid_base (the lower tree arrives idmapped
 *      into that namespace); after them, enters the namespace and becomes
 *      its root (uid and gid 0 inside, uid_base outside, no groups), so
 *      that every process of the sandbox is an unprivileged id outside
 *      and its capabilities count only in a namespace that owns nothing
 *      (its mount, pid, net, ipc, uts and cgroup namespaces stay the
 *      host's user namespace's: no root inside can mount, change a
 *      sysctl or configure the network)
 *   7. drops capabilities (bounding, ambient, effective/permitted/inheritable
 *      to the kept set), sets no_new_privs, loads the seccomp filter
 *
 * pivot_root and a detached staging root rather than a chroot: a chroot
 * leaves the staging tmpfs (the lower mount, the upper layer, once the
 * agent's socket) a `..` away from any root process that can chroot, and
 * /proc/<pid>/root/.. leads there too. After the pivot nothing of it has a
 * path; above the new root there is only the template's empty read-only
 * root (child.c), and CAP_SYS_CHROOT is dropped anyway (seccomp.c). The
 * detach costs the unmount's RCU grace period on START (0.2-0.6 ms of
 * create p50, sandbox/README.md). A failure replies the errno and exits (ending the
 * sandbox). */
#include "sandbox/agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "sandbox/container/sbx_privs.h"

#define STAGE_SECCOMP_FD 4
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

int ag_stage_init(struct agent *a)
{
	struct stat st;
	if (fstat(STAGE_SECCOMP_FD, &st) < 0)
		return -errno;
	if (st.st_size <= 0 || st.st_size > 65536 || st.st_size % sizeof(struct sock_filter))
		return -EINVAL;
	a->seccomp = malloc((size_t)st.st_size);
	if (!a->seccomp)
		return -ENOMEM;
	if (pread(STAGE_SECCOMP_FD, a->seccomp, (size_t)st.st_size, 0) != st.st_size)
		return -EIO;
	a->seccomp_len = (size_t)st.st_size;
	close(STAGE_SECCOMP_FD);
	/* Held for the next host's channel (persistent sandboxes): no other
	 * fd may take the number meanwhile. */
	if (dup3(0, AG_HOST_FD, O_CLOEXEC) < 0) /* fd 0 is /dev/null */
		return -errno;
	a->staged = true;
	return 0;
}

/* Images have /proc, /dev and /sys as a rule: the directory is made only
 * when the move finds none. */
int ag_move_into(const char *from, const char *to)
{
	if (mount(from, to, NULL, MS_MOVE, NULL) == 0)
		return 0;
	if (errno != ENOENT || (mkdir(to, 0755) < 0 && errno != EEXIST))
		return -errno;
	return mount(from, to, NULL, MS_MOVE, NULL) < 0 ? -errno : 0;
}

/* Persistent sandboxes: the channel of the next host, at AG_HOST_FD
 * (ag_spare_make; nothing with a name, so nothing in the sandbox can find,
 * rename or replace it). */
static int keep_for_hosts(struct agent *a, uint32_t q_orphan_ms)
{
	a->orphan_timeout_ms = q_orphan_ms;
	return ag_spare_make(a);
}

/* The writable layer: on disk (AG_START_F_LAYER: a detached bind of its
 * directory, attached at /q, quota set by the host), or on the staging
 * tmpfs, resized to the limit. */
static int mount_layer(int layer, const struct ag_start_req *q)
{
	char opts[96];
	if (layer >= 0) {
		if ((mkdir("/q", 0755) < 0 && errno != EEXIST) ||
		    syscall(SYS_move_mount, layer, "", AT_FDCWD, "/q", MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return -errno;
		return mount("overlay", "/m", "overlay", MS_NODEV,
			     "lowerdir=/lower,upperdir=/q/u,workdir=/q/w") < 0
			   ? -errno
			   : 0;
	}
	/* nodev: device nodes shipped in an image cannot be opened (cgroup v2
	 * has no devices controller here); /dev is a separate tmpfs. */
	if (mount("overlay", "/m", "overlay", MS_NODEV, "lowerdir=/lower,upperdir=/u,workdir=/w") <
	    0)
		return -errno;
	/* Staging mounted the tmpfs with the default limits (nosuid, nodev,
	 * sandbox.c STAGE_TMPFS_OPTS), which most sandboxes keep: then a
	 * remount (the superblock's s_umount, option parsing, a dcache
	 * shrink) would change nothing. */
	struct statfs sf;
	if (statfs("/", &sf) < 0 || (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize != q->disk_bytes ||
	    (uint64_t)sf.f_files != q->disk_inodes) {
		snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%llu",
			 (unsigned long long)q->disk_bytes, (unsigned long long)q->disk_inodes);
		if (mount(NULL, "/", NULL, MS_REMOUNT | MS_NOSUID | MS_NODEV, opts) < 0)
			return -errno;
	}
	return 0;
}

static int enter_root(struct agent *a, int tree, int layer, const struct ag_start_req *q)
{
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, "/lower", MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return -errno;
	int e = mount_layer(layer, q);
	if (e < 0)
		return e;
	int r = ag_move_into("/proc", "/m/proc");
	if (r == 0)
		r = ag_move_into("/dev", "/m/dev");
	if (r == 0)
		r = ag_move_into("/sys", "/m/sys");
	if (r == 0 && (q->flags & AG_START_F_PERSIST))
		r = keep_for_hosts(a, q->orphan_timeout_ms);
	if (r < 0)
		return r;
	/* The overlay becomes the root of every process of the sandbox
	 * (pivot_root moves our root, the staging tmpfs, onto "." and puts the
	 * overlay in its place), and the staging tmpfs, with /lower and /q on
	 * it, is detached: no path, chroot or /proc link inside leads back to
	 * it. The overlay keeps its own references to its layers. */
	if (chdir("/m") < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return -errno;
	if (sethostname(q->hostname, strlen(q->hostname)) < 0)
		return -errno;
	return 0;
}

/* The upper layer's root (the overlay's root directory) owned by root of
 * the sandbox's user namespace, as the image's root directory is through
 * the idmapped lower: files made in / inside get the range's ids. A layer
 * on disk is not attached yet (enter_root puts it at /q): its "u" is
 * reached through the layer's tree. */
static int own_upper(int layer, uint32_t uid_base)
{
	int r = layer >= 0 ? fchownat(layer, "u", uid_base, uid_base, AT_SYMLINK_NOFOLLOW)
			   : chown("/u", uid_base, uid_base);
	return r < 0 ? -errno : 0;
}

/* Enters the sandbox's user namespace as its root: setns gives all
 * capabilities there (none outside) but keeps uid 0 of the host, which is
 * no id inside; uid and gid 0 inside are uid_base outside. The agent stays
 * undumpable (a uid change never makes a process dumpable), and its memory
 * belongs to the host's user namespace (it was exec'd there): root inside
 * cannot ptrace it. */
static int enter_userns(int userns)
{
	if (setns(userns, CLONE_NEWUSER) < 0 || syscall(SYS_setgroups, 0, NULL) < 0 ||
	    syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0)
		return -errno;
	return 0;
}

/* sbx_privs.h: the kept capabilities, no_new_privs, the seccomp filter. */
static int drop_privileges(struct agent *a, uint64_t keep)
{
	return sbx_drop_privileges(keep, a->seccomp,
				   (unsigned short)(a->seccomp_len / sizeof(struct sock_filter)));
}

void ag_stage_start(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_start_req q;
	int tree = ag_take_fd(a), layer = -1, userns = -1;
	int r = tree < 0 ? -EBADF : ag_start_decode(p, len, &q);
	if (r == 0 && (q.flags & AG_START_F_LAYER) && (layer = ag_take_fd(a)) < 0)
		r = -EBADF;
	if (r == 0 && (q.flags & AG_START_F_OOM_FD))
		a->oom_fd = ag_take_fd(a); /* kept: read at every exec's start and end */
	if (r == 0 && (q.flags & AG_START_F_USERNS) && (userns = ag_take_fd(a)) < 0)
		r = -EBADF;
	if (r == 0 && userns >= 0)
		r = own_upper(layer, q.uid_base);
	if (r == 0)
		r = enter_root(a, tree, layer, &q);
	if (tree >= 0)
		close(tree);
	if (layer >= 0)
		close(layer);
	if (r == 0 && userns >= 0)
		r = enter_userns(userns);
	if (userns >= 0)
		close(userns);
	if (r == 0)
		r = drop_privileges(a, q.caps_keep);
	ag_reply_status(a, AG_T_START, id, r);
	if (r < 0) {
		/* Half set up and still privileged: say why, then end the sandbox. */
		fcntl(a->ctl, F_SETFL, 0);
		(void)!write(a->ctl, a->out.data, a->out.len);
		_exit(1);
	}
	a->staged = false;
	free(a->seccomp);
	a->seccomp = NULL;
}
