/* mount.c — the node mount manager (mount.h): copies an image's metadata to
 * the node cache, mounts it as file-backed EROFS with the blobs on the FUSE
 * mount as extra devices, and counts its users. The new mount API (fsopen /
 * fsconfig) is used so that the device list is not bounded by the one page
 * of mount(2) data and so the kernel's reason for a refusal can be shown.
 *
 * Invariants (all under CACHE/HEX/lock):
 *  1. The first line of CACHE/HEX/users is the number of references handed
 *     out and not yet released (0 when the file is missing); while it is
 *     > 0, CACHE/HEX/root is mounted (an acquire that finds nothing mounted
 *     starts the count afresh: it is from before a reboot).
 *  2. A named reference (img_node_acquire_as / img_node_ref with a holder)
 *     is also counted on its holder's line "COUNT HOLDER" below the total,
 *     and releasing it counts it out there; releasing for a holder that has
 *     none changes nothing. So a
 *     holder can always find, and give back, exactly the references it has.
 *  3. The last anonymous release unmounts at once; the last named one
 *     leaves the mount (and the store lease) in place with the users file's
 *     mtime as its release time, and img_node_sweep unmounts it when it has
 *     been unused for the given age. A mounted root with no users holds the
 *     lease until then.
 *  4. meta.img in the cache is only ever the verified copy (tmp + rename). */
#include "imagesvc/mount.h"

#include <dirent.h>
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
#include <sys/uio.h>
#include <sys/xattr.h>
#include <time.h>
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

/* Tells strata-fuse the SHA-256 the signed record names for the digest
 * table of the blob at path (fuse/README.md "Pinned digest tables"): it
 * loads and checks the table now, and refuses the blob's reads if it
 * differs, so that the chain record -> table -> chunks is closed. */
static int pin_table(const char *hex, uint32_t blob, const char *path, const uint8_t sha[32],
		     struct strata_err *e)
{
	if (setxattr(path, IMG_TABLE_PIN_XATTR, sha, 32, 0) == 0)
		return 0;
	int r = -errno;
	if (r == -EIO)
		return strata_err_set(e, r,
				      "image %.12s: blob %08u: its digest table does not match the "
				      "SHA-256 the signed record names (rewritten?); import the "
				      "image again",
				      hex, blob);
	if (r == -ENOTSUP || r == -EOPNOTSUPP)
		return strata_err_set(e, r,
				      "image %.12s: the strata mount cannot check digest tables "
				      "(strata-fuse without --cache-dir, or older than image "
				      "signatures): refusing to mount unverified blobs",
				      hex);
	return strata_err_set(e, r, "image %.12s: blob %08u: pinning its digest table: %s", hex,
			      blob, strerror(-r));
}

static int mount_image(struct img_store *s, const char *dir, const char *hex, const char *root,
		       struct strata_err *e)
{
	struct img_record rec;
	char meta[PATH_MAX];
	int r = img_store_record(s, hex, &rec, e);
	if (r < 0)
		return r;
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
	for (uint32_t i = 0; r == 0 && i < rec.n_blobs; i++)
		r = pin_table(hex, rec.blobs[i], devs[i], rec.tables[i], e);
	if (r == 0 && (mkdir(root, 0755) == 0 || errno == EEXIST))
		r = img_erofs_mount(meta, devs, rec.n_blobs, root, e);
	for (uint32_t i = 0; devs && i < rec.n_blobs; i++)
		free(devs[i]);
	free(devs);
	img_record_done(&rec);
	return r;
}

/* CACHE/HEX/users: "N\n" and then one line "COUNT HOLDER" per holder of
 * named references (one that may have to find its references again, e.g. a
 * restarted sandboxd); N also counts the anonymous ones. A line per holder,
 * not per reference, keeps the file a few lines long however many
 * sandboxes share the image: it is read and rewritten on every create and
 * delete. Read and written under CACHE/HEX/lock. */
#define USERS_MAX_HOLDERS 64
#define USERS_HOLDER_MAX 128 /* bytes of a holder's name, NUL included */

struct users_holder {
	char name[USERS_HOLDER_MAX];
	int n;
};

struct users {
	int n;
	size_t n_holders;
	struct users_holder h[USERS_MAX_HOLDERS];
};

/* Forgets every reference (the count of a mount from before a reboot). */
static void users_reset(struct users *u)
{
	u->n = 0;
	u->n_holders = 0;
}

static void users_parse_holders(struct users *u, char *line)
{
	while (line && *line && u->n_holders < USERS_MAX_HOLDERS) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		char *sp = strchr(line, ' ');
		int n = atoi(line);
		if (sp && n > 0 && strlen(sp + 1) < USERS_HOLDER_MAX) {
			struct users_holder *h = &u->h[u->n_holders++];
			snprintf(h->name, sizeof(h->name), "%s", sp + 1);
			h->n = n;
		}
		line = nl ? nl + 1 : NULL;
	}
}

static int users_read(const char *path, struct users *u)
{
	char buf[64 + USERS_MAX_HOLDERS * (USERS_HOLDER_MAX + 16)];
	users_reset(u);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	ssize_t k = strata_read_all(fd, buf, sizeof(buf) - 1);
	if (k < 0)
		return (int)k;
	buf[k] = '\0';
	u->n = atoi(buf);
	char *nl = strchr(buf, '\n');
	users_parse_holders(u, nl ? nl + 1 : NULL);
	return 0;
}

/* In place, no fsync: after a crash of the node the mounts are gone and the
 * next acquire starts the count afresh (invariant 1). No tmp + rename
 * either: ext4 flushes a file renamed over another (auto_da_alloc), which
 * made a reference cost a millisecond. Only the holders of the lock read
 * the holders; a reader without it sees the count line whole (one write). */
static int users_write(const char *path, const struct users *u)
{
	char buf[64 + USERS_MAX_HOLDERS * (USERS_HOLDER_MAX + 16)];
	size_t n = (size_t)snprintf(buf, sizeof(buf), "%d\n", u->n);
	for (size_t i = 0; i < u->n_holders; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%d %s\n", u->h[i].n, u->h[i].name);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	ssize_t k = pwrite(fd, buf, n, 0);
	if (k < 0)
		return -errno;
	if ((size_t)k != n)
		return -EIO;
	return ftruncate(fd, (off_t)n) < 0 ? -errno : 0;
}

static struct users_holder *users_find(struct users *u, const char *holder)
{
	for (size_t i = 0; i < u->n_holders; i++)
		if (!strcmp(u->h[i].name, holder))
			return &u->h[i];
	return NULL;
}

/* One more reference, of holder (NULL: anonymous). Returns 0, -EINVAL for
 * a name that does not fit a line, -EUSERS past USERS_MAX_HOLDERS. */
static int users_add(struct users *u, const char *holder)
{
	if (holder) {
		if (!holder[0] || strchr(holder, '\n') || strlen(holder) >= USERS_HOLDER_MAX)
			return -EINVAL;
		struct users_holder *h = users_find(u, holder);
		if (!h) {
			if (u->n_holders == USERS_MAX_HOLDERS)
				return -EUSERS;
			h = &u->h[u->n_holders++];
			snprintf(h->name, sizeof(h->name), "%s", holder);
			h->n = 0;
		}
		h->n++;
	}
	u->n++;
	return 0;
}

/* Removes one reference of holder (false: it holds none) and counts it out. */
static bool users_remove(struct users *u, const char *holder)
{
	struct users_holder *h = users_find(u, holder);
	if (!h)
		return false;
	if (--h->n == 0)
		*h = u->h[--u->n_holders];
	u->n--;
	return true;
}

static int users_count(struct users *u, const char *holder)
{
	struct users_holder *h = users_find(u, holder);
	return h ? h->n : 0;
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

/* The paths of image hex in the node cache, and its lock taken. */
struct node_img {
	char dir[PATH_MAX], users[PATH_MAX + 8], root[PATH_MAX + 8];
	int lk;
};

static int node_lock(const char *cache, const char *hex, bool create, struct node_img *ni,
		     struct strata_err *e)
{
	int r = pathf(ni->dir, sizeof(ni->dir), "%s/%s", cache, hex);
	ni->lk = -1;
	if (r == 0 && create)
		r = store_mkdir_p(ni->dir);
	if (r < 0)
		return strata_err_set(e, r, "node cache %s: %s", cache, strerror(-r));
	snprintf(ni->users, sizeof(ni->users), "%s/users", ni->dir);
	snprintf(ni->root, sizeof(ni->root), "%s/root", ni->dir);
	if ((ni->lk = lock_dir(ni->dir)) < 0)
		return strata_err_set(e, ni->lk, "locking %s: %s", ni->dir, strerror(-ni->lk));
	return 0;
}

static void node_unlock(struct node_img *ni)
{
	if (ni->lk >= 0)
		close(ni->lk);
}

/* Unmounts ni's root and drops the lease (the lock is held). */
static int unmount_locked(struct img_store *s, const char *hex, struct node_img *ni,
			  struct strata_err *e)
{
	char node[256];
	if (umount2(ni->root, 0) < 0 && errno != EINVAL && errno != ENOENT) {
		if (errno != EBUSY || umount2(ni->root, MNT_DETACH) < 0)
			return strata_err_set(e, -errno, "unmounting %s: %m", ni->root);
	}
	store_node_name(node, sizeof(node));
	if (s)
		img_store_lease(s, hex, node, false);
	unlink(ni->users);
	return 0;
}

int img_node_acquire_as(struct img_store *s, const char *cache, const char *hex, const char *holder,
			char *root, size_t cap, bool *ret_fresh, struct strata_err *e)
{
	_cleanup_(node_unlock) struct node_img ni = {.lk = -1};
	struct users u = {0};
	char node[256];
	int r = node_lock(cache, hex, true, &ni, e);
	if (r < 0)
		return r;
	if ((r = pathf(root, cap, "%s", ni.root)) < 0 || (r = users_read(ni.users, &u)) < 0)
		return strata_err_set(e, r, "%s: %s", ni.users, strerror(-r));
	bool mounted = is_erofs(ni.root), fresh = !mounted || fuse_replaced(s, ni.dir);
	store_node_name(node, sizeof(node));
	if (fresh) {
		umount2(ni.root, MNT_DETACH); /* a stale one, if any */
		if ((r = img_store_lease(s, hex, node, true)) < 0)
			return strata_err_set(e, r, "taking a lease on %.12s: %s", hex,
					      strerror(-r));
		if ((r = mount_image(s, ni.dir, hex, ni.root, e)) < 0) {
			if (u.n <= 0)
				img_store_lease(s, hex, node, false);
			return r;
		}
		note_fuse(s, ni.dir);
		/* Nothing was mounted: the count is from before a reboot. A
		 * replaced mount keeps its users (they still hold the old one). */
		if (!mounted)
			users_reset(&u);
	}
	if ((r = users_add(&u, holder)) < 0 || (r = users_write(ni.users, &u)) < 0)
		return strata_err_set(e, r, "writing %s: %s", ni.users, strerror(-r));
	if (ret_fresh)
		*ret_fresh = fresh;
	return 0;
}

int img_node_acquire(struct img_store *s, const char *cache, const char *hex, char *root,
		     size_t cap, bool *ret_fresh, struct strata_err *e)
{
	return img_node_acquire_as(s, cache, hex, NULL, root, cap, ret_fresh, e);
}

int img_node_ref(const char *cache, const char *hex, const char *holder, struct strata_err *e)
{
	_cleanup_(node_unlock) struct node_img ni = {.lk = -1};
	struct users u = {0};
	int r = node_lock(cache, hex, false, &ni, e);
	if (r < 0)
		return r;
	if (!is_erofs(ni.root))
		return strata_err_set(e, -ENOENT, "image %.12s is not mounted", hex);
	if ((r = users_read(ni.users, &u)) < 0 || (r = users_add(&u, holder)) < 0 ||
	    (r = users_write(ni.users, &u)) < 0)
		return strata_err_set(e, r, "%s: %s", ni.users, strerror(-r));
	return 0;
}

int img_node_release_as(struct img_store *s, const char *cache, const char *hex, const char *holder,
			struct strata_err *e)
{
	_cleanup_(node_unlock) struct node_img ni = {.lk = -1};
	struct users u = {0};
	int r = node_lock(cache, hex, false, &ni, e);
	if (r < 0)
		return r;
	if ((r = users_read(ni.users, &u)) < 0)
		return strata_err_set(e, r, "%s: %s", ni.users, strerror(-r));
	if (!holder) {
		if (--u.n > 0)
			return users_write(ni.users, &u);
		return unmount_locked(s, hex, &ni, e);
	}
	if (!users_remove(&u, holder))
		return 0; /* not (or no longer, the mount was renewed) its reference */
	if (u.n < 0)
		u.n = 0;
	/* The last one leaves the mount for the sweep (the write's mtime is
	 * when it became unused). */
	return users_write(ni.users, &u);
}

int img_node_release(struct img_store *s, const char *cache, const char *hex, struct strata_err *e)
{
	return img_node_release_as(s, cache, hex, NULL, e);
}

int img_node_holds(const char *cache, const char *hex, const char *holder)
{
	_cleanup_(node_unlock) struct node_img ni = {.lk = -1};
	struct users u = {0};
	int r = node_lock(cache, hex, false, &ni, NULL);
	if (r == 0)
		r = users_read(ni.users, &u);
	return r < 0 ? r : users_count(&u, holder);
}

int img_node_sweep_one(struct img_store *s, const char *cache, const char *hex, int64_t idle_ms,
		       struct strata_err *e)
{
	_cleanup_(node_unlock) struct node_img ni = {.lk = -1};
	struct users u = {0};
	struct stat st;
	int r = node_lock(cache, hex, false, &ni, NULL);
	if (r < 0)
		return r == -ENOENT ? 0
				    : strata_err_set(e, r, "locking %s: %s", ni.dir, strerror(-r));
	if ((r = users_read(ni.users, &u)) < 0 || u.n > 0 || !is_erofs(ni.root))
		return r;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	int64_t since = stat(ni.users, &st) < 0 ? 0
						: (int64_t)(now.tv_sec - st.st_mtim.tv_sec) * 1000 +
						      (now.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
	if (since < idle_ms)
		return 0;
	return (r = unmount_locked(s, hex, &ni, e)) < 0 ? r : 1;
}

int img_node_sweep(struct img_store *s, const char *cache, int64_t idle_ms, struct strata_err *e)
{
	DIR *dp = opendir(cache);
	int n = 0, r = 0;
	for (struct dirent *de; dp && (de = readdir(dp));) {
		if (strlen(de->d_name) != 64 || strspn(de->d_name, "0123456789abcdef") != 64)
			continue;
		int k = img_node_sweep_one(s, cache, de->d_name, idle_ms, e);
		if (k < 0 && r == 0)
			r = k;
		n += k > 0;
	}
	if (dp)
		closedir(dp);
	return r < 0 ? r : n;
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
