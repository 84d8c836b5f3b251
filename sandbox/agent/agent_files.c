/* agent_files.c — file operations of strata-agent (READ, WRITE, LIST, STAT,
 * MKDIR, REMOVE).
 *
 * Paths are interpreted in the agent's own root, which is the sandbox root:
 * ".." cannot climb out of it, so no path sanitising is needed beyond the
 * protocol's limits. Operations run as the agent (root in the sandbox, with
 * the sandbox's capabilities). Every reply starts with an i32 status; only
 * regular files are read or written, and opens use O_NONBLOCK so that a FIFO
 * cannot stall the agent's loop. */
#include "sandbox/agent/agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <linux/stat.h> /* struct statx: musl (which the agent may be built with) lacks it */
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void stat_to_ag(const struct stat *st, struct ag_stat *o)
{
	o->type = ag_file_type(st->st_mode);
	o->mode = st->st_mode & 07777;
	o->uid = st->st_uid;
	o->gid = st->st_gid;
	o->nlink = (uint32_t)st->st_nlink;
	o->size = (uint64_t)st->st_size;
	o->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* Reads the leading path of a request. NULL (and *r->err) if malformed. */
static char *read_path(struct ag_rd *r)
{
	char *s = ag_rd_strdup(r, AG_MAX_PATH);
	if (s && !s[0]) {
		free(s);
		r->err = -EINVAL;
		return NULL;
	}
	return s;
}

static int open_regular(const char *path, int flags, mode_t mode)
{
	int fd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		close(fd);
		return e;
	}
	return fd;
}

void ag_file_read(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	char *path = read_path(&r);
	uint64_t offset = ag_rd_u64(&r);
	uint32_t max = ag_rd_u32(&r);
	int fd = r.err ? r.err : open_regular(path, O_RDONLY, 0);
	free(path);
	if (fd < 0) {
		ag_reply_status(a, AG_T_READ, id, fd);
		return;
	}
	if (max > AG_MAX_DATA)
		max = AG_MAX_DATA;
	struct stat st;
	fstat(fd, &st);
	size_t off = ag_wr_begin(&a->out, AG_T_READ | AG_T_REPLY, id);
	ag_wr_u32(&a->out, 0);
	ag_wr_u64(&a->out, (uint64_t)st.st_size);
	size_t len_at = a->out.len;
	ag_wr_u32(&a->out, 0);
	ssize_t n = 0;
	uint8_t *buf = malloc(max ? max : 1);
	if (buf)
		n = pread(fd, buf, max, (off_t)offset);
	close(fd);
	if (!buf || n < 0) {
		int e = buf ? -errno : -ENOMEM;
		free(buf);
		a->out.len = off;
		ag_reply_status(a, AG_T_READ, id, e);
		return;
	}
	ag_wr_bytes(&a->out, buf, (size_t)n);
	free(buf);
	if (!a->out.err) {
		uint8_t *lp = a->out.data + len_at;
		for (int i = 0; i < 4; i++)
			lp[i] = (uint8_t)((uint64_t)n >> (8 * i));
	}
	ag_wr_end(&a->out, off);
}

void ag_file_write(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	uint32_t n = 0;
	ag_rd_init(&r, p, len);
	char *path = read_path(&r);
	uint32_t mode = ag_rd_u32(&r);
	uint32_t flags = ag_rd_u32(&r);
	uint64_t offset = ag_rd_u64(&r);
	const void *data = ag_rd_blob(&r, AG_MAX_DATA, &n);
	int fd = r.err;
	if (!fd) {
		int of = O_WRONLY | (flags & AG_WRITE_F_CREATE ? O_CREAT : 0) |
			 (flags & AG_WRITE_F_TRUNC ? O_TRUNC : 0) |
			 (flags & AG_WRITE_F_APPEND ? O_APPEND : 0) |
			 (flags & AG_WRITE_F_EXCL ? O_EXCL : 0);
		fd = open_regular(path, of, (mode_t)(mode & 07777));
	}
	free(path);
	ssize_t w = 0;
	if (fd >= 0) {
		w = flags & AG_WRITE_F_APPEND ? write(fd, data, n)
					      : pwrite(fd, data, n, (off_t)offset);
		if (w < 0)
			w = -errno;
		close(fd);
	}
	size_t off = ag_wr_begin(&a->out, AG_T_WRITE | AG_T_REPLY, id);
	ag_wr_u32(&a->out, (uint32_t)(fd < 0 ? fd : (w < 0 ? (int)w : 0)));
	ag_wr_u32(&a->out, w > 0 ? (uint32_t)w : 0);
	ag_wr_end(&a->out, off);
}

void ag_file_list(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	char *path = read_path(&r);
	DIR *d = r.err ? NULL : opendir(path);
	int err = r.err ? r.err : (d ? 0 : -errno);
	free(path);
	if (err) {
		ag_reply_status(a, AG_T_LIST, id, err);
		return;
	}
	size_t off = ag_wr_begin(&a->out, AG_T_LIST | AG_T_REPLY, id);
	ag_wr_u32(&a->out, 0);
	size_t count_at = a->out.len;
	ag_wr_u32(&a->out, 0);
	ag_wr_u8(&a->out, 0);
	uint32_t count = 0;
	uint8_t truncated = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (count >= AG_MAX_LIST || a->out.len - off > AG_MAX_DATA) {
			truncated = 1;
			break;
		}
		struct stat st;
		struct ag_stat s = {0};
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			stat_to_ag(&st, &s);
		ag_wr_str(&a->out, de->d_name);
		ag_stat_encode(&a->out, &s);
		count++;
	}
	closedir(d);
	if (!a->out.err) {
		uint8_t *cp = a->out.data + count_at;
		for (int i = 0; i < 4; i++)
			cp[i] = (uint8_t)(count >> (8 * i));
		cp[4] = truncated;
	}
	ag_wr_end(&a->out, off);
}

void ag_file_stat(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	char *path = read_path(&r);
	uint8_t follow = ag_rd_u8(&r);
	struct stat st;
	int err = r.err;
	if (!err && (follow ? stat(path, &st) : lstat(path, &st)) < 0)
		err = -errno;
	free(path);
	if (err) {
		ag_reply_status(a, AG_T_STAT, id, err);
		return;
	}
	struct ag_stat s;
	stat_to_ag(&st, &s);
	size_t off = ag_wr_begin(&a->out, AG_T_STAT | AG_T_REPLY, id);
	ag_wr_u32(&a->out, 0);
	ag_stat_encode(&a->out, &s);
	ag_wr_end(&a->out, off);
}

static int mkdir_parents(char *path, mode_t mode)
{
	for (char *s = path + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		int r = mkdir(path, mode);
		*s = '/';
		if (r < 0 && errno != EEXIST)
			return -errno;
	}
	if (mkdir(path, mode) < 0) {
		struct stat st;
		if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			return 0;
		return -errno;
	}
	return 0;
}

void ag_file_mkdir(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	char *path = read_path(&r);
	uint32_t mode = ag_rd_u32(&r);
	uint8_t parents = ag_rd_u8(&r);
	int err = r.err;
	if (!err)
		err = parents ? mkdir_parents(path, mode & 07777)
			      : (mkdir(path, mode & 07777) < 0 ? -errno : 0);
	free(path);
	ag_reply_status(a, AG_T_MKDIR, id, err);
}

/* Recursive remove, post-order, without leaving the file system of the
 * directory being removed. The walk does not compare st_dev (overlayfs
 * reports each non-directory's st_dev from its layer, so an st_dev test
 * such as nftw's FTW_MOUNT skips every file that came from the image or
 * the upper layer); it asks statx whether a sub-directory is a mount root
 * and refuses (-EBUSY) to remove one. Symlinks are removed, not followed.
 * Depth is bounded so that a hostile tree cannot exhaust fds or stack. */
#define RM_MAX_DEPTH 256

static int rm_tree_at(int dfd, const char *name, int depth);

static int rm_children(int fd, int depth)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = -errno;
		close(fd);
		return e;
	}
	int err = 0;
	struct dirent *de;
	errno = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int r = rm_tree_at(dirfd(d), de->d_name, depth + 1);
		if (r < 0 && !err && r != -ENOENT)
			err = r;
		errno = 0;
	}
	if (!err && errno)
		err = -errno;
	closedir(d);
	return err;
}

static int rm_tree_at(int dfd, const char *name, int depth)
{
	struct statx stx;
	if (syscall(SYS_statx, dfd, name, AT_SYMLINK_NOFOLLOW, STATX_TYPE, &stx) < 0)
		return -errno;
	if (!S_ISDIR(stx.stx_mode))
		return unlinkat(dfd, name, 0) < 0 ? -errno : 0;
	if ((stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
	    (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT))
		return -EBUSY;
	if (depth >= RM_MAX_DEPTH)
		return -ELOOP;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int err = rm_children(fd, depth);
	if (err < 0)
		return err;
	return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

void ag_file_remove(struct agent *a, uint32_t id, const void *p, size_t len)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	char *path = read_path(&r);
	uint8_t recursive = ag_rd_u8(&r);
	int err = r.err;
	struct stat st;
	if (!err && lstat(path, &st) < 0)
		err = -errno;
	if (!err && S_ISDIR(st.st_mode) && recursive) {
		err = rm_tree_at(AT_FDCWD, path, 0);
	} else if (!err && S_ISDIR(st.st_mode))
		err = rmdir(path) < 0 ? -errno : 0;
	else if (!err)
		err = unlink(path) < 0 ? -errno : 0;
	free(path);
	ag_reply_status(a, AG_T_REMOVE, id, err);
}
