/* inroot.c — a sandbox's files from the host, every path resolved by
 * openat2 under the sandbox's root (see inroot.h). */
#include "sandbox/sandboxd/inroot.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs/cleanup.h"

#define INROOT_RESOLVE (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define PASSWD_MAX (4u << 20) /* a larger /etc/passwd is refused, not read */

static int open_in(int root, const char *path, int flags, mode_t mode)
{
	struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
			       .mode = (flags & O_CREAT) ? mode : 0,
			       .resolve = INROOT_RESOLVE};
	for (;;) {
		long fd = syscall(SYS_openat2, root, path, &how, sizeof(how));
		if (fd >= 0)
			return (int)fd;
		/* EAGAIN: a rename raced the lookup (RESOLVE_IN_ROOT retries
		 * are the caller's); EINTR: a signal. Both are transient. */
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
	}
}

int sbd_inroot_open_root(pid_t pid, const struct stat *want, struct stat *ret_st)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/root", (int)pid);
	_cleanup_close_ int fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == EACCES ? -ESRCH : -errno;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (want && want->st_ino && (st.st_dev != want->st_dev || st.st_ino != want->st_ino))
		return -ESRCH;
	if (ret_st)
		*ret_st = st;
	return TAKE_FD(fd);
}

int sbd_inroot_open_read(int root, const char *path, struct stat *ret_st)
{
	/* O_NONBLOCK: a FIFO planted by the sandbox must not hang the open. */
	_cleanup_close_ int fd = open_in(root, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
	if (fd < 0)
		return fd;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	*ret_st = st;
	return TAKE_FD(fd);
}

static void give(int fd, const struct sbd_owner *o)
{
	if (o && o->set)
		(void)!fchown(fd, o->uid, o->gid);
}

/* The parent of path in buf (a copy), "/" for a top-level name; the last
 * component in *ret_name (into path). */
static int split(const char *path, char *buf, size_t cap, const char **ret_name)
{
	const char *slash = strrchr(path, '/');
	if (!slash || !slash[1])
		return -EINVAL;
	size_t n = (size_t)(slash - path);
	if (n + 2 > cap)
		return -ENAMETOOLONG;
	memcpy(buf, path, n);
	buf[n ? n : 1] = 0;
	if (!n)
		buf[0] = '/';
	*ret_name = slash + 1;
	return 0;
}

/* path[0..n) as a string in buf (PATH_MAX), "/" for n == 0. */
static const char *prefix(char *buf, const char *path, size_t n)
{
	memcpy(buf, path, n);
	buf[n ? n : 1] = 0;
	if (!n)
		buf[0] = '/';
	return buf;
}

int sbd_inroot_mkdirs(int root, const char *path, uint32_t mode, const struct sbd_owner *owner)
{
	char buf[4096];
	size_t len = strlen(path);
	if (len >= sizeof(buf))
		return -ENAMETOOLONG;
	/* up to the deepest directory that exists (a loop, not recursion: a
	 * path of 2,000 components must not take 2,000 stack frames) */
	size_t have = len;
	int fd;
	while ((fd = open_in(root, prefix(buf, path, have), O_RDONLY | O_DIRECTORY, 0)) ==
		   -ENOENT &&
	       have > 0)
		while (have > 0 && path[--have] != '/')
			;
	if (fd < 0 || have == len)
		return fd;
	close(fd);
	/* then down, one component at a time, each made in its parent's fd */
	while (have < len) {
		size_t next = have + 1;
		while (next < len && path[next] != '/')
			next++;
		_cleanup_close_ int pfd =
		    open_in(root, prefix(buf, path, have), O_PATH | O_DIRECTORY, 0);
		if (pfd < 0)
			return pfd;
		memcpy(buf, path + have + 1, next - have - 1);
		buf[next - have - 1] = 0;
		bool last = next == len;
		if (mkdirat(pfd, buf, last ? mode : 0755) < 0 && errno != EEXIST)
			return -errno;
		/* the name is resolved again: the sandbox may have replaced it by
		 * a symlink meanwhile, which openat2 follows inside the root only */
		fd = open_in(root, prefix(buf, path, next), O_RDONLY | O_DIRECTORY, 0);
		if (fd < 0)
			return fd;
		give(fd, owner);
		if (last && mode != 0755)
			(void)!fchmod(fd, mode);
		if (!last)
			close(fd);
		have = next;
	}
	return fd;
}

int sbd_inroot_open_parent(int root, const char *path, bool parents, const struct sbd_owner *owner,
			   const char **ret_name)
{
	char parent[4096];
	int r = split(path, parent, sizeof(parent), ret_name);
	if (r < 0)
		return r;
	return parents ? sbd_inroot_mkdirs(root, parent, 0755, owner)
		       : open_in(root, parent, O_PATH | O_DIRECTORY, 0);
}

int sbd_inroot_open_write(int root, const char *path, uint32_t mode, bool set_mode, bool parents,
			  bool append, const struct sbd_owner *owner)
{
	int flags = O_WRONLY | O_CREAT | O_NOCTTY | O_NONBLOCK | (append ? O_APPEND : O_TRUNC);
	int fd = open_in(root, path, flags, mode);
	if (fd == -ENOENT && parents) {
		const char *name;
		_cleanup_close_ int pfd = sbd_inroot_open_parent(root, path, true, owner, &name);
		if (pfd < 0)
			return pfd;
		fd = open_in(root, path, flags, mode);
	}
	if (fd < 0)
		return fd;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		close(fd);
		return r;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	give(fd, owner);
	if (set_mode || (owner && owner->set)) /* fchown drops set-id bits */
		(void)!fchmod(fd, mode);
	return fd;
}

/* Parses a decimal id; false if s is not one. */
static bool parse_id(const char *s, size_t n, unsigned *ret)
{
	unsigned long v = 0;
	if (!n || n > 10)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v > UINT32_MAX - 1)
		return false;
	*ret = (unsigned)v;
	return true;
}

/* The uid and gid fields of name's line in passwd text p[0..n). */
static int passwd_find(const char *p, size_t n, const char *name, struct sbd_owner *ret)
{
	size_t nl = strlen(name);
	for (const char *line = p; line < p + n;) {
		const char *end = memchr(line, '\n', (size_t)(p + n - line));
		if (!end)
			end = p + n;
		const char *f[4];
		size_t k = 0;
		f[k++] = line;
		for (const char *c = line; c < end && k < 4; c++)
			if (*c == ':')
				f[k++] = c + 1;
		if (k == 4 && (size_t)(f[1] - 1 - line) == nl && !memcmp(line, name, nl)) {
			const char *gend = memchr(f[3], ':', (size_t)(end - f[3]));
			unsigned uid, gid;
			if (!gend || !parse_id(f[2], (size_t)(f[3] - 1 - f[2]), &uid) ||
			    !parse_id(f[3], (size_t)(gend - f[3]), &gid))
				return -EINVAL;
			*ret = (struct sbd_owner){.set = true, .uid = uid, .gid = gid};
			return 0;
		}
		line = end + 1;
	}
	return -ENOENT;
}

int sbd_inroot_user(int root, const char *user, struct sbd_owner *ret)
{
	const char *colon = strchr(user, ':');
	unsigned uid, gid;
	if (colon && parse_id(user, (size_t)(colon - user), &uid) &&
	    parse_id(colon + 1, strlen(colon + 1), &gid)) {
		*ret = (struct sbd_owner){.set = true, .uid = uid, .gid = gid};
		return 0;
	}
	if (parse_id(user, strlen(user), &uid)) { /* as the agent: gid = uid */
		*ret = (struct sbd_owner){.set = true, .uid = uid, .gid = uid};
		return 0;
	}
	struct stat st;
	_cleanup_close_ int fd = sbd_inroot_open_read(root, "/etc/passwd", &st);
	if (fd < 0)
		return fd == -ENOENT ? -ENOENT : fd;
	if ((uint64_t)st.st_size > PASSWD_MAX)
		return -EFBIG;
	_cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	ssize_t n = pread(fd, buf, (size_t)st.st_size, 0);
	if (n < 0)
		return -errno;
	return passwd_find(buf, (size_t)n, user, ret);
}
