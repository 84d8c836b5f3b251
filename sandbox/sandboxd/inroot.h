/* inroot.h — a sandbox's files reached from the host, through its root as
 * its agent sees it (/proc/<agent pid>/root): the container backend's fast
 * path for file transfers, which sandboxd's workers drive with sendfile and
 * splice instead of moving every byte through the agent protocol.
 *
 * A sandbox is hostile: it may swap any component of a path for a symlink
 * at any moment. Every path is therefore resolved by the kernel in one
 * openat2 call under the root's fd, with RESOLVE_IN_ROOT (absolute symlinks
 * and ".." stay inside the root), RESOLVE_NO_MAGICLINKS (no /proc/self/fd
 * jumps) and RESOLVE_NO_XDEV (the root's own filesystem only: not the
 * sandbox's /proc, /sys or /dev, whose files sandboxd, with the host's
 * privileges, could write where the sandbox cannot); every later call works
 * on the fd it gave (fchown, fchmod, *at with the last name), never on the
 * path again.
 *
 * All functions return an fd or 0, or a negative errno; they may block
 * (they run on worker threads) and touch nothing but their arguments. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Who owns what a write creates: the caller's (root) unless set. */
struct sbd_owner {
	bool set;
	uid_t uid;
	gid_t gid;
};

/* Opens the root directory of process pid as that process sees it (an
 * O_PATH fd). When want (dev and ino of an earlier call, may be NULL) is
 * given, a root that is not that directory is refused with -ESRCH: the
 * pid was recycled by another process. *ret_st (may be NULL): its stat. */
int sbd_inroot_open_root(pid_t pid, const struct stat *want, struct stat *ret_st);

/* Opens the regular file at path (absolute, in the root) for reading;
 * *ret_st its stat. -EISDIR for a directory, -EINVAL for anything else
 * that is not a regular file, -EXDEV when it lies on another mount. */
int sbd_inroot_open_read(int root, const char *path, struct stat *ret_st);

/* Creates the missing directories of path itself (mode 0755 or mode for
 * the last, owned by owner). Returns a read-only fd of the directory
 * (for fchown, fchmod, futimens). */
int sbd_inroot_mkdirs(int root, const char *path, uint32_t mode, const struct sbd_owner *owner);

/* Opens the parent directory of path (O_PATH), creating the missing ones
 * when parents; *ret_name: the last component (points into path). -EINVAL
 * for "/" (no parent). */
int sbd_inroot_open_parent(int root, const char *path, bool parents, const struct sbd_owner *owner,
			   const char **ret_name);

/* Opens path for writing: created with mode (truncated, or appended to
 * with append), its parents made first when parents, owned by owner.
 * set_mode: also give an existing file mode. Returns the fd. */
int sbd_inroot_open_write(int root, const char *path, uint32_t mode, bool set_mode, bool parents,
			  bool append, const struct sbd_owner *owner);

/* Looks user ("name", "uid" or "uid:gid") up in the sandbox's own
 * /etc/passwd (read through the root, as a process inside sees it).
 * -ENOENT (with a name): no such user. */
int sbd_inroot_user(int root, const char *user, struct sbd_owner *ret);
