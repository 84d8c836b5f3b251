/* layer.c — the writable layers of container sandboxes on disk, each with a
 * project quota (as Docker's overlay2 does on XFS).
 *
 * One filesystem holds the upper and work directories of every sandbox of a
 * runtime: an operator's directory on XFS or ext4 mounted with project
 * quotas (sbx_runtime_config.disk_dir), or else a sparse image file
 * (state_dir/layers.img unless disk_image says where; made with mkfs.xfs
 * on first use) attached to a loop device (autoclear) and mounted with
 * prjquota on state_dir/layers. Each sandbox gets a directory p<id> there
 * whose project id is id (FS_IOC_FSSETXATTR with the inherit flag, so that
 * everything made below it is charged to it), holding u (upper) and w
 * (work), with a block and an inode hard limit (quotactl Q_XSETQLIM).
 * XFS answers a write past the limit with ENOSPC (ext4 with EDQUOT), root
 * included: overlayfs writes with the mounter's credentials less
 * CAP_SYS_RESOURCE, and XFS exempts nobody. Its pages are page cache, not
 * tmpfs: the layer no longer counts against the sandbox's memory limit.
 *
 * Invariants:
 *   1. A project id is in use exactly while its directory p<id> exists:
 *      mkdir allocates it (EEXIST: taken, by us or another runtime on the
 *      same filesystem), the removal of the directory is the last step of
 *      freeing it. Nothing of a project lives outside its directory (the
 *      sandbox sees only u through its overlay), so an id whose directory
 *      is gone has no usage left and may be given out again.
 *   2. A sandbox reaches its layer only through a detached bind of p<id>
 *      (open_tree clone, nosuid, nodev) that the agent mounts on /q of its
 *      staging root at START (agent_stage.c): no host path is visible to
 *      it, and a process that escapes its chroot finds only its own layer.
 *   3. The directory of a sandbox is removed after its mount namespace is
 *      gone (the reaper, runtime.c), never while it may still write there.
 *      A persistent sandbox released by its host keeps its directory; the
 *      next runtime finds its id again from the agent (layer_adopt).
 *   4. The runtime's mount is removed when it is freed with no directory
 *      left in it; the loop device goes with its last mount (autoclear).
 *
 * Where none of this works (no loop device, no mkfs.xfs, a kernel without
 * XFS quotas, an image that would sit in memory) the layers stay on the
 * sandbox's staging tmpfs, counted against its memory, and the runtime
 * says why (sbx_runtime_disk). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/quota.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif
#ifndef PRJQUOTA
#define PRJQUOTA 2
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif

/* The default image: sparse, so its size is a ceiling, not an allocation;
 * at most this, and at most LAYER_IMAGE_FREE_PCT of what its filesystem
 * has free when it is made (mkfs.xfs needs 300 MiB at least). */
#define LAYER_IMAGE_DEFAULT (64ull << 30)
#define LAYER_IMAGE_MIN (512ull << 20)
#define LAYER_IMAGE_FREE_PCT 90
/* Project ids given out: 1..LAYER_MAX_ID (0 is "no project", never limited). */
#define LAYER_MAX_ID (1u << 24)
/* A directory without an owner (made by a staging that crashed) older than
 * this is swept at start; younger ones may be another runtime's staging. */
#define LAYER_ORPHAN_AGE_S 60
/* How deep the removal recurses before it moves a subtree up to the top of
 * the layer (so that a hostile deep tree costs no more fds than this). */
#define LAYER_RM_DEPTH 32
/* Names .rm<n> tried for one moved subtree before giving up: the sandbox
 * may have made some of them itself, but not this many in a row cheaply. */
#define LAYER_RM_TRIES 4096
#define LAYER_OWNER_XATTR "trusted.strata.owner"
#define LAYER_LOOP_TRIES 8

static void why(struct layer_fs *L, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(L->reason, sizeof(L->reason), fmt, ap);
	va_end(ap);
}

static int quotactl_fd(int fd, int cmd, uint32_t id, void *addr)
{
	return syscall(SYS_quotactl_fd, fd, QCMD(cmd, PRJQUOTA), id, addr) < 0 ? -errno : 0;
}

/* True when fd's filesystem enforces project quotas. */
static bool enforces_prjquota(int fd)
{
	struct fs_quota_statv st = {.qs_version = FS_QSTATV_VERSION1};
	return quotactl_fd(fd, Q_XGETQSTATV, 0, &st) == 0 && (st.qs_flags & FS_QUOTA_PDQ_ENFD);
}

/* Runs mkfs.xfs on path (a new sparse file). */
static int run_mkfs(const char *path)
{
	static const char *const tries[] = {"/usr/sbin/mkfs.xfs", "/sbin/mkfs.xfs",
					    "/usr/local/sbin/mkfs.xfs"};
	const char *bin = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(tries) && !bin; i++)
		if (access(tries[i], X_OK) == 0)
			bin = tries[i];
	if (!bin)
		return -ENOENT;
	char *const argv[] = {(char *)bin, "-q", "-f", (char *)path, NULL};
	char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int r = -posix_spawn(&pid, bin, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (r < 0)
		return r;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/* Makes the sparse image (under a temporary name, renamed when whole). */
static int make_image(struct layer_fs *L, const char *path, uint64_t size)
{
	char tmp[PATH_MAX + 16];
	struct statvfs sv;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = slash == dir ? (slash[1] = 0, '/') : 0;
	if (!size) {
		size = LAYER_IMAGE_DEFAULT;
		if (statvfs(slash ? dir : ".", &sv) == 0) {
			uint64_t fr =
			    (uint64_t)sv.f_bavail * sv.f_frsize / 100 * LAYER_IMAGE_FREE_PCT;
			size = STRATA_MIN(size, fr);
		}
	}
	if (size < LAYER_IMAGE_MIN) {
		why(L, "no room for a layer image of %" PRIu64 " MiB in %s", size >> 20, dir);
		return -ENOSPC;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int r = ftruncate(fd, (off_t)size) < 0 ? -errno : 0;
	close(fd);
	if (r == 0 && (r = run_mkfs(tmp)) < 0)
		why(L, "mkfs.xfs %s: %s", tmp,
		    r == -ENOENT ? "not installed (xfsprogs)" : "failed");
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

/* Attaches the image to a free loop device (autoclear: it detaches itself
 * when its last mount goes) and mounts it with project quotas on L->dir. */
static int mount_image(struct layer_fs *L, const char *image)
{
	_cleanup_close_ int img = open(image, O_RDWR | O_CLOEXEC);
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (img < 0 || ctl < 0) {
		int r = -errno;
		why(L, "%s: %s", img < 0 ? image : "/dev/loop-control", strerror(-r));
		return r;
	}
	for (int t = 0; t < LAYER_LOOP_TRIES; t++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0) {
			why(L, "no free loop device: %s", strerror(errno));
			return -errno;
		}
		char dev[32];
		snprintf(dev, sizeof(dev), "/dev/loop%d", n);
		_cleanup_close_ int lo = open(dev, O_RDWR | O_CLOEXEC);
		if (lo < 0)
			continue;
		/* Direct I/O: the image's pages are not cached a second time
		 * below the layer's own page cache. */
		struct loop_config lc = {
		    .fd = (uint32_t)img,
		    .info = {.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO}};
		if (ioctl(lo, LOOP_CONFIGURE, &lc) < 0) {
			lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
			if (errno == EBUSY || ioctl(lo, LOOP_CONFIGURE, &lc) < 0)
				continue; /* taken by someone else meanwhile */
		}
		if (mount(dev, L->dir, "xfs", MS_NOSUID | MS_NODEV | MS_NOATIME, "prjquota") == 0)
			return 0;
		int r = -errno;
		ioctl(lo, LOOP_CLR_FD, 0);
		why(L, "mount of %s (xfs, prjquota) on %s: %s", image, L->dir, strerror(-r));
		return r;
	}
	why(L, "no loop device could be attached");
	return -EBUSY;
}

/* Why this kernel cannot do it, before anything is made. */
static bool kernel_can(struct layer_fs *L)
{
	if (access("/dev/loop-control", F_OK) < 0) {
		why(L, "no loop devices (/dev/loop-control)");
		return false;
	}
	/* /proc/fs/xfs exists once XFS is loaded; xqm only with its quotas. */
	if (access("/proc/fs/xfs", F_OK) == 0 && access("/proc/fs/xfs/xqm", F_OK) < 0) {
		why(L, "the kernel's XFS has no quota support (CONFIG_XFS_QUOTA)");
		return false;
	}
	return true;
}

static bool in_memory(const char *path)
{
	struct statfs sf;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = 0;
	return statfs(dir, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
}

/* The runtime's image mounted on L->dir (or already there: a restart). */
static int setup_image(struct layer_fs *L, const struct sbx_runtime_config *cfg,
		       const char *state_dir)
{
	char image[PATH_MAX];
	snprintf(L->dir, sizeof(L->dir), "%s/layers", state_dir);
	if (cfg->disk_image)
		snprintf(image, sizeof(image), "%s", cfg->disk_image);
	else
		snprintf(image, sizeof(image), "%s/layers.img", state_dir);
	if (mkdir(L->dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	_cleanup_close_ int fd = open(L->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct statfs sf;
	if (fd >= 0 && fstatfs(fd, &sf) == 0 && sf.f_type == XFS_SUPER_MAGIC &&
	    enforces_prjquota(fd)) {
		L->mounted = true; /* an earlier runtime's, with its sandboxes' layers */
		return 0;
	}
	if (!kernel_can(L))
		return -ENOTSUP;
	if (in_memory(image)) {
		why(L, "the layer image %s would be in memory (tmpfs): give an image path on disk",
		    image);
		return -ENOTSUP;
	}
	int r = 0;
	if (access(image, F_OK) < 0)
		r = make_image(L, image, cfg->disk_image_bytes);
	if (r == 0)
		r = mount_image(L, image);
	if (r < 0)
		return r;
	L->mounted = true;
	snprintf(L->image, sizeof(L->image), "%s", image);
	return 0;
}

/* A new open file of directory fd for readdir: a dup would share fd's
 * offset, and a second listing through it would find nothing. */
static int reopen_dir(int fd)
{
	return openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Moves subtree n of dir_fd up to top as .rm<seq>, the next name free
 * there. seq counts across the passes of one layer_free: a name of an
 * earlier pass may still be there (being one of dir_fd's own ancestors),
 * and so may one the sandbox made itself. */
static int move_up(int dir_fd, const char *n, int top, unsigned *seq)
{
	for (unsigned tries = 0; tries < LAYER_RM_TRIES; tries++) {
		char up[32];
		snprintf(up, sizeof(up), ".rm%u", (*seq)++);
		if (renameat2(dir_fd, n, top, up, RENAME_NOREPLACE) == 0)
			return 0;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* Removes what is below dir_fd (the directory itself stays). Subtrees
 * deeper than LAYER_RM_DEPTH are moved up to top (the layer's own
 * directory) and removed from there by the caller's next pass; *moved
 * counts them, *seq names them. */
static int rm_below(int dir_fd, int top, int depth, unsigned *moved, unsigned *seq)
{
	int fd = reopen_dir(dir_fd);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		if (unlinkat(dir_fd, n, 0) == 0)
			continue;
		if (errno != EISDIR && errno != EPERM) {
			r = -errno;
			continue;
		}
		if (depth >= LAYER_RM_DEPTH) {
			int e = move_up(dir_fd, n, top, seq);
			if (e < 0)
				r = e;
			else
				(*moved)++;
			continue;
		}
		int sub = openat(dir_fd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			r = -errno;
			continue;
		}
		int e = rm_below(sub, top, depth + 1, moved, seq);
		close(sub);
		if (e < 0)
			r = e;
		else if (unlinkat(dir_fd, n, AT_REMOVEDIR) < 0)
			r = -errno;
	}
	closedir(d);
	return r;
}

static int set_limits(const struct layer_fs *L, uint32_t id, uint64_t bytes, uint64_t inodes)
{
	struct fs_disk_quota q = {
	    .d_version = FS_DQUOT_VERSION,
	    .d_flags = FS_PROJ_QUOTA,
	    .d_fieldmask = FS_DQ_BSOFT | FS_DQ_BHARD | FS_DQ_ISOFT | FS_DQ_IHARD,
	    .d_id = id,
	    .d_blk_hardlimit = bytes / 512,
	    .d_ino_hardlimit = inodes,
	};
	return quotactl_fd(L->dir_fd, Q_XSETQLIM, id, &q);
}

int layer_free(struct layer_fs *L, uint32_t id)
{
	char name[16];
	snprintf(name, sizeof(name), "p%" PRIu32, id);
	int fd = openat(L->dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	unsigned moved = 1, seq = 0;
	int r = 0;
	/* Each pass removes what it can; subtrees moved up get the next one. */
	for (unsigned pass = 0; moved && pass < 1024; pass++) {
		moved = 0;
		r = rm_below(fd, fd, 0, &moved, &seq);
	}
	close(fd);
	if (r < 0)
		return r; /* kept: its id stays taken (invariant 1) */
	(void)set_limits(L, id, 0, 0);
	return unlinkat(L->dir_fd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

/* The pid that owns layer name (written at staging), or 0. */
static pid_t owner_of(int dir_fd, const char *name)
{
	char p[32], v[16] = {0};
	snprintf(p, sizeof(p), "%s", name);
	int fd = openat(dir_fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = fgetxattr(fd, LAYER_OWNER_XATTR, v, sizeof(v) - 1);
	close(fd);
	return n > 0 ? (pid_t)atoi(v) : 0;
}

/* The project id of the writable layer of the running agent pid: that of
 * its root's upper directory, which overlayfs answers FS_IOC_FSGETXATTR with
 * (0 on a tmpfs layer). The agent's /q, where the layer's bind was
 * attached, went with its staging root (agent_stage.c detaches it). */
static int agent_projid(pid_t pid, uint32_t *ret)
{
	char p[64];
	struct fsxattr fx;
	snprintf(p, sizeof(p), "/proc/%d/root", (int)pid);
	_cleanup_close_ int fd = pid > 0 ? open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (fd < 0)
		return pid > 0 && errno != ENOENT ? -errno : -ESRCH;
	if (ioctl(fd, FS_IOC_FSGETXATTR, &fx) < 0)
		return errno == ENOTTY || errno == EOPNOTSUPP ? -ENOENT : -errno;
	*ret = fx.fsx_projid;
	return 0;
}

/* True when the agent with host pid holds layer id. */
static bool agent_holds(pid_t pid, uint32_t id)
{
	uint32_t got;
	return agent_projid(pid, &got) == 0 && got == id;
}

/* Removes the layers of sandboxes that are gone (their runtime crashed):
 * those whose owner no longer holds them, and ownerless ones older than
 * LAYER_ORPHAN_AGE_S. */
static void sweep(struct layer_fs *L)
{
	int fd = reopen_dir(L->dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *de;
	uint32_t ids[256];
	size_t n = 0;
	time_t now = time(NULL);
	while ((de = readdir(d)) && n < ARRAY_SIZE(ids)) {
		char *end;
		struct stat st;
		if (de->d_name[0] != 'p')
			continue;
		unsigned long id = strtoul(de->d_name + 1, &end, 10);
		if (*end || !id || id > LAYER_MAX_ID ||
		    fstatat(L->dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		pid_t pid = owner_of(L->dir_fd, de->d_name);
		if (pid ? !agent_holds(pid, (uint32_t)id) : now - st.st_ctime > LAYER_ORPHAN_AGE_S)
			ids[n++] = (uint32_t)id;
	}
	closedir(d);
	for (size_t i = 0; i < n; i++)
		(void)layer_free(L, ids[i]);
}

void layer_fs_init(struct layer_fs *L, const struct sbx_runtime_config *cfg, const char *state_dir)
{
	*L = (struct layer_fs){.dir_fd = -1,
			       .lock_fd = -1,
			       .next_id = 1,
			       .disk_dir_given = cfg->disk_dir != NULL,
			       .stage_bytes = SBX_DEFAULT_DISK,
			       .stage_inodes = SBX_DEFAULT_DISK_INODES};
	if (cfg->disk_mode == SBX_DISK_TMPFS) {
		why(L, "in memory (tmpfs) as configured");
		return;
	}
	/* One runtime at a time sets up (or finds) the mount of a state dir
	 * (a lock on the directory itself: no file is left behind). */
	L->lock_fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (L->lock_fd >= 0)
		flock(L->lock_fd, LOCK_EX);
	int r = 0;
	if (cfg->disk_dir)
		snprintf(L->dir, sizeof(L->dir), "%s", cfg->disk_dir);
	else
		r = setup_image(L, cfg, state_dir);
	if (r == 0 && (L->dir_fd = open(L->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = -errno;
		why(L, "%s: %s", L->dir, strerror(-r));
	}
	struct statfs sf;
	struct stat st;
	if (r == 0 && (fstatfs(L->dir_fd, &sf) < 0 || fstat(L->dir_fd, &st) < 0 ||
		       !enforces_prjquota(L->dir_fd))) {
		r = -ENOTSUP;
		why(L, "%s does not enforce project quotas (XFS or ext4 mounted with prjquota)",
		    L->dir);
	}
	if (r == 0) {
		L->quota = true;
		L->dev = st.st_dev;
		L->edquot = sf.f_type != XFS_SUPER_MAGIC;
		why(L, "%s project quotas on %s%s%s", L->edquot ? "ext4" : "XFS", L->dir,
		    L->image[0] ? ", image " : "", L->image);
		sweep(L);
	}
	if (L->lock_fd >= 0)
		flock(L->lock_fd, LOCK_UN);
	if (r < 0 && !cfg->disk_dir)
		(void)rmdir(L->dir); /* the mount point setup_image made, if empty */
	if (r < 0) {
		char b[sizeof(L->reason)];
		snprintf(b, sizeof(b), "%s", L->reason);
		why(L, "in memory (tmpfs, counted against the memory limit): %.200s", b);
		if (L->dir_fd >= 0)
			close(L->dir_fd);
		L->dir_fd = -1;
		L->failed = cfg->disk_mode == SBX_DISK_QUOTA;
	}
}

/* True when some sandbox still has a layer here. */
static bool any_layer(const struct layer_fs *L)
{
	int fd = reopen_dir(L->dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return true;
	}
	bool any = false;
	struct dirent *de;
	while (!any && (de = readdir(d)))
		any = de->d_name[0] == 'p';
	closedir(d);
	return any;
}

void layer_fs_done(struct layer_fs *L)
{
	if (L->quota && L->mounted && !L->disk_dir_given && !any_layer(L)) {
		/* No layer left (none of a persistent sandbox either): the mount
		 * and with it (autoclear) the loop device go. */
		close(L->dir_fd);
		L->dir_fd = -1;
		if (umount2(L->dir, 0) == 0)
			(void)rmdir(L->dir);
	}
	if (L->dir_fd >= 0)
		close(L->dir_fd);
	if (L->lock_fd >= 0)
		close(L->lock_fd);
	L->dir_fd = L->lock_fd = -1;
}

int layer_new(struct layer_fs *L, struct layer *ret)
{
	char name[16];
	uint32_t id = 0;
	int r = -EEXIST;
	for (unsigned t = 0; t < LAYER_MAX_ID && r == -EEXIST; t++) {
		id = __atomic_fetch_add(&L->next_id, 1, __ATOMIC_RELAXED) % LAYER_MAX_ID;
		if (!id)
			continue;
		snprintf(name, sizeof(name), "p%" PRIu32, id);
		r = mkdirat(L->dir_fd, name, 0755) < 0 ? -errno : 0;
	}
	if (r < 0)
		return r;
	int fd = openat(L->dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct fsxattr fx;
	if (fd < 0 || ioctl(fd, FS_IOC_FSGETXATTR, &fx) < 0)
		r = -errno;
	if (r == 0) {
		fx.fsx_projid = id;
		fx.fsx_xflags |= FS_XFLAG_PROJINHERIT;
		r = ioctl(fd, FS_IOC_FSSETXATTR, &fx) < 0 ? -errno : 0;
	}
	uint64_t bytes = __atomic_load_n(&L->stage_bytes, __ATOMIC_RELAXED);
	uint64_t inodes = __atomic_load_n(&L->stage_inodes, __ATOMIC_RELAXED);
	if (r == 0)
		r = set_limits(L, id, bytes, inodes);
	if (r == 0 && (mkdirat(fd, "u", 0755) < 0 || mkdirat(fd, "w", 0755) < 0))
		r = -errno;
	int tree = -1;
	if (r == 0) {
		struct {
			uint64_t attr_set, attr_clr, propagation, userns_fd;
		} attr = {.attr_set = 0x2 | 0x4}; /* MOUNT_ATTR_NOSUID | NODEV */
		tree = (int)syscall(SYS_open_tree, fd, "",
				    OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH);
		if (tree < 0 ||
		    syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
			r = -errno;
	}
	if (fd >= 0)
		close(fd);
	if (r < 0) {
		if (tree >= 0)
			close(tree);
		(void)layer_free(L, id);
		return r;
	}
	*ret = (struct layer){.id = id, .tree_fd = tree, .bytes = bytes, .inodes = inodes};
	return 0;
}

void layer_set_owner(struct layer_fs *L, uint32_t id, pid_t pid)
{
	char name[16], v[16];
	snprintf(name, sizeof(name), "p%" PRIu32, id);
	int n = snprintf(v, sizeof(v), "%d", (int)pid);
	int fd = openat(L->dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		(void)fsetxattr(fd, LAYER_OWNER_XATTR, v, (size_t)n, 0);
		close(fd);
	}
}

int layer_limit(struct layer_fs *L, struct layer *l, uint64_t bytes, uint64_t inodes)
{
	__atomic_store_n(&L->stage_bytes, bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&L->stage_inodes, inodes, __ATOMIC_RELAXED);
	if (l->bytes == bytes && l->inodes == inodes)
		return 0; /* staging set these (those of the last create) */
	int r = set_limits(L, l->id, bytes, inodes);
	if (r == 0) {
		l->bytes = bytes;
		l->inodes = inodes;
	}
	return r;
}

int layer_usage(const struct layer_fs *L, uint32_t id, uint64_t *ret_bytes, uint64_t *ret_inodes)
{
	struct fs_disk_quota q = {0};
	int r = quotactl_fd(L->dir_fd, Q_XGETQUOTA, id, &q);
	if (r < 0)
		return r;
	*ret_bytes = q.d_bcount * 512;
	*ret_inodes = q.d_icount;
	return 0;
}

int layer_adopt(const struct layer_fs *L, pid_t pid, struct layer *ret)
{
	uint32_t id = 0;
	char name[32];
	int r = agent_projid(pid, &id);
	if (r < 0)
		return r;
	if (!id)
		return -ENOENT; /* a layer on its tmpfs */
	snprintf(name, sizeof(name), "p%u", id);
	if (!L->quota || owner_of(L->dir_fd, name) != pid)
		return -ESTALE; /* not one of this runtime's layers */
	struct fs_disk_quota q = {0};
	r = quotactl_fd(L->dir_fd, Q_XGETQUOTA, id, &q);
	if (r < 0)
		return r;
	*ret = (struct layer){
	    .id = id, .tree_fd = -1, .bytes = q.d_blk_hardlimit * 512, .inodes = q.d_ino_hardlimit};
	return 0;
}
