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
 * openat2 answers EAGAIN while a rename in the root races the lookup (and
 * for a file whose lease is being broken): retried for at most 2 s, then
 * -EAGAIN.
 *
 * All functions return an fd or 0, or a negative errno; they may block
 * (they run on worker threads) and touch nothing but their arguments. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Who owns what a write creates, in host ids: the caller's (root) unless
 * set. only_new: the owner is only the default of what is new (a replaced
 * file keeps its own, a tar member gets the archive's). base: the host id
 * that is id 0 in the sandbox (its user namespace maps ids 0..SBD_IDS-1
 * to base..), 0 when its ids are the host's; a tar member's owner is
 * shifted by it. */
struct sbd_owner {
	bool set, only_new;
	uid_t uid;
	gid_t gid;
	uint32_t base;
};

#define SBD_IDS 65536u	    /* the ids of a sandbox in a user namespace */
#define SBD_ID_NOBODY 65534 /* what it sees of the ids it does not have */

/* Id id of a sandbox (as its processes see it) on the host: base + id;
 * one it does not have (>= SBD_IDS) is its nobody. Without a user
 * namespace (base 0) the same id. */
uint32_t sbd_id_to_host(uint32_t base, uint64_t id);
/* Host id id as the sandbox sees it: id - base, SBD_ID_NOBODY for an id
 * outside its range (as the kernel shows it inside). base 0: the same. */
uint32_t sbd_id_from_host(uint32_t base, uint32_t id);

/* Opens the root directory of process pid as that process sees it (an
 * O_PATH fd). When want (dev and ino of an earlier call, may be NULL) is
 * given, a root that is not that directory is refused with -ESRCH: the
 * pid was recycled by another process. *ret_st (may be NULL): its stat. */
int sbd_inroot_open_root(pid_t pid, const struct stat *want, struct stat *ret_st);

/* Opens the regular file at path (absolute, in the root) for reading;
 * *ret_st its stat. -EISDIR for a directory, -EINVAL for anything else
 * that is not a regular file, -EXDEV when it lies on another mount. */
int sbd_inroot_open_read(int root, const char *path, struct stat *ret_st);

/* Opens the directory at path (a read-only fd: for a walk or futimens). */
int sbd_inroot_open_dir(int root, const char *path);

/* Creates the missing directories of path itself (mode 0755 or mode for
 * the last, owned by owner). Each is made by mkdirat in its parent's fd
 * and opened from there with O_NOFOLLOW (a symlink swapped in gets
 * -ENOTDIR, never the owner); only directories it made are given owner
 * and mode. Returns a read-only fd of the directory (for fchown, fchmod,
 * futimens). */
int sbd_inroot_mkdirs(int root, const char *path, uint32_t mode, const struct sbd_owner *owner);

/* Opens the parent directory of path (O_PATH), creating the missing ones
 * when parents; *ret_name: the last component (points into path). -EINVAL
 * for "/" (no parent). *ret_made (may be NULL): the offset in path of the
 * '/' before the first directory it made, strlen(path) when it made none
 * (so that a caller can remove them again). */
int sbd_inroot_open_parent(int root, const char *path, bool parents, const struct sbd_owner *owner,
			   const char **ret_name, size_t *ret_made);

/* A file being written by an upload. Without append its new contents go
 * to a temporary name in the same directory (".strata-upload.<random>",
 * created O_EXCL) that commit renames over the name: a failed upload
 * (client gone, disk full, timeout) leaves the old file as it was, and the
 * final name is never opened, so a symlink the sandbox put there is
 * replaced, not followed. A replaced file's owner and mode are kept unless
 * owner / set_mode say otherwise (a replaced hard link is a new inode: its
 * other names keep the old contents). With append the file is opened in
 * place with O_NOFOLLOW (-ELOOP for a symlink) and what is written stays;
 * an existing file keeps its owner (and its mode when it has other hard
 * links); a new one gets mode and owner. */
struct sbd_inroot_file {
	int fd;	 /* write the contents here */
	int dfd; /* the directory */
	char name[256];
	char tmp[40]; /* "" when written in place */
};

/* Opens name in directory dfd for writing as described above (mode: of a
 * new file, or of any with set_mode). -EISDIR for a directory, -EINVAL
 * for another non-regular file. On success the caller ends it with commit
 * or abort. */
int sbd_inroot_file_at(int dfd, const char *name, uint32_t mode, bool set_mode, bool append,
		       const struct sbd_owner *owner, struct sbd_inroot_file *ret);
/* The same for path under root, its parents made first when parents. */
int sbd_inroot_file_open(int root, const char *path, uint32_t mode, bool set_mode, bool parents,
			 bool append, const struct sbd_owner *owner, struct sbd_inroot_file *ret);
/* Puts the written file in place (renameat) and closes it. 0 or -errno
 * (the temporary file is removed then). */
int sbd_inroot_file_commit(struct sbd_inroot_file *f);
/* Drops the upload: the temporary file is removed (the old one stays), an
 * append keeps what it wrote. Closes everything; harmless twice. */
void sbd_inroot_file_abort(struct sbd_inroot_file *f);

/* Looks user ("name", "uid" or "uid:gid") up in the sandbox's own
 * /etc/passwd (read through the root, as a process inside sees it).
 * -ENOENT (with a name): no such user. */
int sbd_inroot_user(int root, const char *user, struct sbd_owner *ret);
