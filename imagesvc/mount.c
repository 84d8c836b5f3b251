/* mount.c — the node mount manager (mount.h): copies an image's metadata to
 * the node cache, mounts it as file-backed EROFS with the blobs on the FUSE
 * mount as extra devices, and counts its users. The new mount API (fsopen /
 * fsconfig) is used so that the device list is not bounded by the one page
 * of mount(2) data and so the kernel's reason for a refusal can be shown.
 *
 * Invariants:
 *  1. CACHE/HEX/users is the number of references handed out and not yet
 *     released; CACHE/HEX/root is mounted iff it is > 0 (changed under
 *     CACHE/HEX/lock).
 *  2. meta.img in the cache is only ever the verified copy (tmp + rename). */
#include "imagesvc/mount.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "imagesvc/rootfs.h"
#include "imagesvc/store-internal.h"

#define EROFS_MAGIC 0xE0F5E1E2u

static int pathf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

static bool is_erofs(const char *dir)
{
	struct statfs sf;
	return statfs(dir, &sf) == 0 && (uint32_t)sf.f_type == EROFS_MAGIC;
}

static void kernel_msg(int fsfd, struct strata_err *e, int code, const char *what)
{
	char buf[256] = "";
	ssize_t n = read(fsfd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	strata_err_set(e, code, "%s: %s%s%s", what, strerror(-code), buf[0] ? "; kernel: " : "",
		       buf[0] ? buf + (n > 2 && buf[1] == ' ' ? 2 : 0) : "");
}

int img_erofs_mount(const char *meta, char *const *devices, size_t n, const char *dir,
		    struct strata_err *e)
{
	_cleanup_close_ int fsfd = fsopen("erofs", FSOPEN_CLOEXEC);
	if (fsfd < 0)
		return strata_err_set(e, -errno, "the kernel has no EROFS (fsopen: %m)");
	int r = fsconfig(fsfd, FSCONFIG_SET_STRING, "source", meta, 0);
	for (size_t i = 0; r == 0 && i < n; i++)
		r = fsconfig(fsfd, FSCONFIG_SET_STRING, "device", devices[i], 0);
	/* Direct I/O on the blob files: EROFS's reads reach strata-fuse as they
	 * are (no readahead of the blob file around them, no second copy of
	 * the data in the FUSE page cache). Older kernels lack the option. */
	if (r == 0 && getenv("STRATA_EROFS_BUFFERED") == NULL)
		fsconfig(fsfd, FSCONFIG_SET_FLAG, "directio", NULL, 0);
	if (r == 0)
		r = fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0);
	if (r < 0) {
		kernel_msg(fsfd, e, -errno, "mounting the EROFS image");
		return e ? e->code : -EIO;
	}
	_cleanup_close_ int mfd =
	    fsmount(fsfd, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV);
	if (mfd < 0 || move_mount(mfd, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return strata_err_set(e, -errno, "attaching the EROFS mount at %s: %m", dir);
	return 0;
}

/* Copies the metadata image into the cache and checks its digest. */
static int fetch_meta(struct img_store *s, const char *hex, const struct img_record *rec,
		      const char *dst, struct strata_err *e)
{
	char src[PATH_MAX], tmp[PATH_MAX + 16];
	uint8_t sha[32];
	if (access(dst, F_OK) == 0)
		return 0;
	int r = img_store_image_path(s, hex, "meta.img", src, sizeof(src));
	if (r < 0)
		return strata_err_set(e, r, "path too long");
	snprintf(tmp, sizeof(tmp), "%s.%d", dst, (int)getpid());
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (in < 0 || out < 0)
		return strata_err_set(e, -errno, "copying the metadata image of %.12s: %m", hex);
	char buf[1 << 16];
	for (ssize_t n; r == 0 && (n = strata_read_all(in, buf, sizeof(buf))) != 0;)
		r = n < 0 ? (int)n : strata_write_all(out, buf, (size_t)n);
	if (r == 0)
		r = img_sha256_file(tmp, sha, NULL);
	if (r == 0 && memcmp(sha, rec->meta_sha, 32))
		r = -EBADMSG;
	if (r == 0 && rename(tmp, dst) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return strata_err_set(e, r, "copying the metadata image of %.12s: %s", hex,
				      r == -EBADMSG ? "digest mismatch" : strerror(-r));
	}
	return 0;
}

static int mount_image(struct img_store *s, const char *dir, const char *hex, const char *root,
		       struct strata_err *e)
{
	struct img_record rec;
	char meta[PATH_MAX];
	int r = img_store_record(s, hex, &rec);
	if (r < 0)
		return strata_err_set(e, r, "image %.12s: record: %s", hex, strerror(-r));
	char **devs = calloc(rec.n_blobs + 1, sizeof(char *));
	r = devs ? pathf(meta, sizeof(meta), "%s/meta.img", dir) : -ENOMEM;
	for (uint32_t i = 0; r == 0 && i < rec.n_blobs; i++) {
		devs[i] = malloc(PATH_MAX);
		r = devs[i] ? img_store_blob_path(s, rec.blobs[i], "data", devs[i], PATH_MAX)
			    : -ENOMEM;
	}
	if (r < 0)
		strata_err_set(e, r, "image %.12s: %s", hex, strerror(-r));
	if (r == 0)
		r = fetch_meta(s, hex, &rec, meta, e);
	if (r == 0 && (mkdir(root, 0755) == 0 || errno == EEXIST))
		r = img_erofs_mount(meta, devs, rec.n_blobs, root, e);
	for (uint32_t i = 0; devs && i < rec.n_blobs; i++)
		free(devs[i]);
	free(devs);
	img_record_done(&rec);
	return r;
}

static int read_count(const char *path)
{
	char buf[32] = "";
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	return n > 0 ? atoi(buf) : 0;
}

static int write_count(const char *path, int n)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%d\n", n);
	return store_write_file(path, buf, strlen(buf));
}

static int lock_dir(const char *dir)
{
	char p[PATH_MAX];
	if (pathf(p, sizeof(p), "%s/lock", dir) < 0)
		return -ENAMETOOLONG;
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX) < 0) {
		close(fd);
		return -errno;
	}
	return fd;
}

/* The device of the FUSE mount the image's blobs were opened on: a restart
 * of strata-fuse makes a new mount, and an EROFS mount over the old one can
 * no longer read its blobs (it is then replaced; roots on it are stale). */
static void note_fuse(struct img_store *s, const char *dir)
{
	char p[PATH_MAX + 16], buf[32];
	struct stat st;
	if (stat(img_store_root(s), &st) < 0)
		return;
	snprintf(p, sizeof(p), "%s/fusedev", dir);
	snprintf(buf, sizeof(buf), "%llu\n", (unsigned long long)st.st_dev);
	store_write_file(p, buf, strlen(buf));
}

static bool fuse_replaced(struct img_store *s, const char *dir)
{
	char p[PATH_MAX + 16], buf[32] = "";
	struct stat st;
	snprintf(p, sizeof(p), "%s/fusedev", dir);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) <= 0 || stat(img_store_root(s), &st) < 0)
		return false;
	return strtoull(buf, NULL, 10) != (unsigned long long)st.st_dev;
}

int img_node_acquire(struct img_store *s, const char *cache, const char *hex, char *root,
		     size_t cap, bool *ret_fresh, struct strata_err *e)
{
	char dir[PATH_MAX], users[PATH_MAX + 8], node[256];
	int r = pathf(dir, sizeof(dir), "%s/%s", cache, hex);
	if (r == 0)
		r = pathf(root, cap, "%s/root", dir);
	if (r == 0)
		r = store_mkdir_p(dir);
	if (r < 0)
		return strata_err_set(e, r, "node cache %s: %s", cache, strerror(-r));
	snprintf(users, sizeof(users), "%s/users", dir);
	_cleanup_close_ int lk = lock_dir(dir);
	if (lk < 0)
		return strata_err_set(e, lk, "locking %s: %s", dir, strerror(-lk));
	int n = read_count(users);
	bool fresh = n <= 0 || !is_erofs(root) || fuse_replaced(s, dir);
	store_node_name(node, sizeof(node));
	if (fresh) {
		umount2(root, MNT_DETACH); /* a stale one, if any */
		if ((r = img_store_lease(s, hex, node, true)) < 0)
			return strata_err_set(e, r, "taking a lease on %.12s: %s", hex,
					      strerror(-r));
		if ((r = mount_image(s, dir, hex, root, e)) < 0) {
			img_store_lease(s, hex, node, false);
			return r;
		}
		note_fuse(s, dir);
		n = 0;
	}
	if ((r = write_count(users, n + 1)) < 0)
		return strata_err_set(e, r, "writing %s: %s", users, strerror(-r));
	if (ret_fresh)
		*ret_fresh = fresh;
	return 0;
}

int img_node_release(struct img_store *s, const char *cache, const char *hex, struct strata_err *e)
{
	char dir[PATH_MAX], users[PATH_MAX + 8], root[PATH_MAX + 8], node[256];
	int r = pathf(dir, sizeof(dir), "%s/%s", cache, hex);
	if (r < 0)
		return strata_err_set(e, r, "path too long");
	snprintf(users, sizeof(users), "%s/users", dir);
	snprintf(root, sizeof(root), "%s/root", dir);
	_cleanup_close_ int lk = lock_dir(dir);
	if (lk < 0)
		return strata_err_set(e, lk, "locking %s: %s", dir, strerror(-lk));
	int n = read_count(users) - 1;
	if (n > 0)
		return write_count(users, n);
	if (umount2(root, 0) < 0 && errno != EINVAL && errno != ENOENT) {
		if (errno != EBUSY || umount2(root, MNT_DETACH) < 0)
			return strata_err_set(e, -errno, "unmounting %s: %m", root);
	}
	store_node_name(node, sizeof(node));
	img_store_lease(s, hex, node, false);
	unlink(users);
	return 0;
}

int img_node_root(const char *cache, const char *hex, char *root, size_t cap)
{
	int r = pathf(root, cap, "%s/%s/root", cache, hex);
	return r < 0 ? r : is_erofs(root) ? 0 : -ENOENT;
}

/* ---- `strata image mount DIR` records ----------------------------------------------- */
static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static int bind_paths(const char *cache, const char *dir, char *rec, char *scratch)
{
	uint64_t k = fnv1a(dir);
	int r = pathf(rec, PATH_MAX, "%s/binds/%016llx", cache, (unsigned long long)k);
	if (r == 0)
		r = pathf(scratch, PATH_MAX, "%s/roots/%016llx", cache, (unsigned long long)k);
	return r;
}

static int attach(const char *root, const char *scratch, const char *dir, bool writable)
{
	if (writable)
		return img_rootfs_create(root, scratch, dir);
	if (mount(root, dir, NULL, MS_BIND, NULL) < 0)
		return -errno;
	if (mount(NULL, dir, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0) {
		int r = -errno;
		umount2(dir, MNT_DETACH);
		return r;
	}
	return 0;
}

int img_node_mount(struct img_store *s, const char *cache, const char *hex, const char *dir,
		   bool writable, bool *ret_fresh, struct strata_err *e)
{
	char real[PATH_MAX], rec[PATH_MAX], scratch[PATH_MAX], root[PATH_MAX], text[PATH_MAX + 128];
	if (!realpath(dir, real))
		return strata_err_set(e, -errno, "mount point %s: %m", dir);
	int r = bind_paths(cache, real, rec, scratch);
	if (r == 0 && access(rec, F_OK) == 0)
		return strata_err_set(e, -EBUSY, "an image is already mounted at %s", real);
	char sub[PATH_MAX];
	if (r == 0 && (r = pathf(sub, sizeof(sub), "%s/binds", cache)) == 0)
		r = store_mkdir_p(sub);
	if (r == 0 && (r = pathf(sub, sizeof(sub), "%s/roots", cache)) == 0)
		r = store_mkdir_p(sub);
	if (r < 0)
		return strata_err_set(e, r, "node cache %s: %s", cache, strerror(-r));
	if ((r = img_node_acquire(s, cache, hex, root, sizeof(root), ret_fresh, e)) < 0)
		return r;
	if ((r = attach(root, scratch, real, writable)) < 0) {
		img_node_release(s, cache, hex, NULL);
		return strata_err_set(e, r, "mounting at %s: %s", real, strerror(-r));
	}
	snprintf(text, sizeof(text), "%s %s %s\n", hex, writable ? "overlay" : "bind", real);
	if ((r = store_write_file(rec, text, strlen(text))) < 0) {
		img_rootfs_remove(scratch, real);
		img_node_release(s, cache, hex, NULL);
		return strata_err_set(e, r, "recording the mount: %s", strerror(-r));
	}
	return 0;
}

int img_node_umount(struct img_store *s, const char *cache, const char *dir, struct strata_err *e)
{
	char real[PATH_MAX], rec[PATH_MAX], scratch[PATH_MAX], text[PATH_MAX + 128];
	char hex[65], kind[16];
	if (!realpath(dir, real))
		return strata_err_set(e, -errno, "%s: %m", dir);
	int r = bind_paths(cache, real, rec, scratch);
	_cleanup_close_ int fd = r < 0 ? -1 : open(rec, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return strata_err_set(e, -ENOENT, "no image is mounted at %s", real);
	ssize_t n = strata_read_all(fd, text, sizeof(text) - 1);
	text[n > 0 ? n : 0] = '\0';
	if (sscanf(text, "%64s %15s", hex, kind) != 2)
		return strata_err_set(e, -EBADMSG, "corrupt mount record %s", rec);
	if (!strcmp(kind, "overlay"))
		r = img_rootfs_remove(scratch, real);
	else if (umount2(real, 0) < 0 && errno != EINVAL)
		r = (errno == EBUSY && umount2(real, MNT_DETACH) == 0) ? 0 : -errno;
	if (r < 0)
		return strata_err_set(e, r, "unmounting %s: %s", real, strerror(-r));
	unlink(rec);
	return img_node_release(s, cache, hex, e);
}
