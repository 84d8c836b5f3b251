/* inroot.c — a sandbox's files from the host, every path resolved by
 * openat2 under the sandbox's root (see inroot.h). */
#include "sandbox/sandboxd/inroot.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/clock.h"

#define INROOT_RESOLVE (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define PASSWD_MAX (4u << 20) /* a larger /etc/passwd is refused, not read */
/* EAGAIN from openat2: a rename inside the root raced the lookup (a
 * sandbox can make that happen in a loop), or a lease on the file is being
 * broken (O_NONBLOCK: up to the kernel's 45 s lease-break-time). The first
 * retries are at once (a race is over in microseconds), the later ones
 * INROOT_RETRY_SLEEP_MS apart, for at most INROOT_RETRY_MS in all: then
 * -EAGAIN (503 busy), the worker free again. */
#define INROOT_FAST_RETRIES 16
#define INROOT_RETRY_SLEEP_MS 5
#define INROOT_RETRY_MS 2000
#define INROOT_TMP_TRIES 16 /* temporary names tried before giving up */

static int open_in(int root, const char *path, int flags, mode_t mode)
{
	struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
			       .mode = (flags & O_CREAT) ? mode : 0,
			       .resolve = INROOT_RESOLVE};
	int64_t start = 0;
	for (unsigned tries = 0;; tries++) {
		long fd = syscall(SYS_openat2, root, path, &how, sizeof(how));
		if (fd >= 0)
			return (int)fd;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		if (tries < INROOT_FAST_RETRIES)
			continue;
		int64_t now = strata_mono_ms();
		if (!start)
			start = now;
		else if (now - start >= INROOT_RETRY_MS)
			return -EAGAIN;
		nanosleep(&(struct timespec){.tv_nsec = INROOT_RETRY_SLEEP_MS * 1000000L}, NULL);
	}
}

int sbd_inroot_open_dir(int root, const char *path)
{
	return open_in(root, path, O_RDONLY | O_DIRECTORY, 0);
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

uint32_t sbd_id_to_host(uint32_t base, uint64_t id)
{
	if (!base)
		return (uint32_t)id;
	return base + (uint32_t)(id < SBD_IDS ? id : SBD_ID_NOBODY);
}

uint32_t sbd_id_from_host(uint32_t base, uint32_t id)
{
	if (!base)
		return id;
	return id >= base && id - base < SBD_IDS ? id - base : SBD_ID_NOBODY;
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

/* Makes the missing directories of path (see sbd_inroot_mkdirs); *made:
 * the offset in path of the '/' before the first one it made (strlen(path)
 * when none). */
static int mkdirs(int root, const char *path, uint32_t mode, const struct sbd_owner *owner,
		  size_t *made)
{
	char buf[4096];
	size_t len = strlen(path);
	*made = len;
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
	/* then down, one component at a time, each made and opened in its
	 * parent's fd: the new name is never resolved by path again, and
	 * O_NOFOLLOW refuses a symlink the sandbox put in its place (which
	 * would otherwise get the owner's fchown) */
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
		bool made_it = mkdirat(pfd, buf, last ? mode : 0755) == 0;
		if (!made_it && errno != EEXIST)
			return -errno;
		if (made_it && *made == len)
			*made = have;
		fd = openat(pfd, buf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ELOOP ? -ENOTDIR : -errno;
		if (made_it) { /* not one the sandbox made meanwhile */
			give(fd, owner);
			if (last && mode != 0755)
				(void)!fchmod(fd, mode);
		}
		if (!last)
			close(fd);
		have = next;
	}
	return fd;
}

int sbd_inroot_mkdirs(int root, const char *path, uint32_t mode, const struct sbd_owner *owner)
{
	size_t made;
	return mkdirs(root, path, mode, owner, &made);
}

int sbd_inroot_open_parent(int root, const char *path, bool parents, const struct sbd_owner *owner,
			   const char **ret_name, size_t *ret_made)
{
	char parent[4096];
	size_t made = strlen(path);
	int r = split(path, parent, sizeof(parent), ret_name);
	if (r == 0)
		r = parents ? mkdirs(root, parent, 0755, owner, &made)
			    : open_in(root, parent, O_PATH | O_DIRECTORY, 0);
	if (ret_made)
		*ret_made = made == strlen(parent) ? strlen(path) : made;
	return r;
}

/* A name of its own in dfd for the file's new contents. */
static int open_tmp(struct sbd_inroot_file *f)
{
	for (int i = 0; i < INROOT_TMP_TRIES; i++) {
		uint64_t rnd = 0;
		if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) < 0)
			rnd = (uint64_t)strata_mono_ms() * 2654435761u + (uint64_t)i;
		snprintf(f->tmp, sizeof(f->tmp), ".strata-upload.%016llx", (unsigned long long)rnd);
		int fd =
		    openat(f->dfd, f->tmp,
			   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd >= 0 ? fd : -errno;
	}
	return -EEXIST;
}

/* Appends to name in place (an upload with append: what it adds stays,
 * also when it fails). An existing file keeps its owner and mode. */
static int open_append(struct sbd_inroot_file *f, uint32_t mode, bool set_mode,
		       const struct sbd_owner *o)
{
	/* O_NONBLOCK: a FIFO planted by the sandbox must not hang the open */
	const int flags = O_WRONLY | O_APPEND | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
	f->tmp[0] = 0;
	bool made = false;
	int fd = openat(f->dfd, f->name, flags);
	if (fd < 0 && errno == ENOENT) {
		fd = openat(f->dfd, f->name, flags | O_CREAT | O_EXCL, 0600);
		made = fd >= 0;
		if (fd < 0 && errno == EEXIST) /* made meanwhile: once more, as existing */
			fd = openat(f->dfd, f->name, flags);
	}
	if (fd < 0)
		return errno == ENXIO ? -EINVAL : -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	(void)!fcntl(fd, F_SETFL, O_APPEND);
	if (made)
		give(fd, o);
	if (made || (set_mode && st.st_nlink == 1)) /* not through a hard link made inside */
		(void)!fchmod(fd, mode);
	return fd;
}

int sbd_inroot_file_at(int dfd, const char *name, uint32_t mode, bool set_mode, bool append,
		       const struct sbd_owner *o, struct sbd_inroot_file *f)
{
	*f = (struct sbd_inroot_file){.fd = -1, .dfd = -1};
	if (strlen(name) >= sizeof(f->name) || !name[0] || strchr(name, '/'))
		return -EINVAL;
	strcpy(f->name, name);
	if ((f->dfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3)) < 0)
		return -errno;
	int fd;
	if (append) {
		fd = open_append(f, mode, set_mode, o);
	} else {
		/* the new contents under a temporary name, renamed over name by
		 * commit: a failed upload leaves the old file whole */
		struct stat st;
		bool old = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
		if (old && S_ISDIR(st.st_mode))
			fd = -EISDIR;
		else if (old && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
			fd = -EINVAL;
		else if ((fd = open_tmp(f)) >= 0) {
			bool keep = old && S_ISREG(st.st_mode);
			if (o && o->set && !(keep && o->only_new))
				give(fd, o);
			else if (keep) /* a replaced file keeps its owner */
				(void)!fchown(fd, st.st_uid, st.st_gid);
			/* after fchown, which drops set-id bits */
			(void)!fchmod(fd, keep && !set_mode ? st.st_mode & 07777 : mode);
		}
	}
	if (fd < 0) {
		f->tmp[0] = 0;
		sbd_inroot_file_abort(f);
		return fd;
	}
	f->fd = fd;
	return 0;
}

int sbd_inroot_file_open(int root, const char *path, uint32_t mode, bool set_mode, bool parents,
			 bool append, const struct sbd_owner *o, struct sbd_inroot_file *f)
{
	const char *name;
	_cleanup_close_ int pfd = sbd_inroot_open_parent(root, path, parents, o, &name, NULL);
	if (pfd < 0) {
		*f = (struct sbd_inroot_file){.fd = -1, .dfd = -1};
		return pfd;
	}
	return sbd_inroot_file_at(pfd, name, mode, set_mode, append, o, f);
}

int sbd_inroot_file_commit(struct sbd_inroot_file *f)
{
	int r = 0;
	if (f->tmp[0] && renameat(f->dfd, f->tmp, f->dfd, f->name) < 0)
		r = -errno;
	if (r == 0)
		f->tmp[0] = 0;
	sbd_inroot_file_abort(f);
	return r;
}

void sbd_inroot_file_abort(struct sbd_inroot_file *f)
{
	if (f->tmp[0] && f->dfd >= 0)
		unlinkat(f->dfd, f->tmp, 0);
	f->tmp[0] = 0;
	if (f->fd >= 0)
		close(f->fd);
	if (f->dfd >= 0)
		close(f->dfd);
	f->fd = f->dfd = -1;
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
