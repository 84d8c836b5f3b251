/* warm.c — the warm-start snapshot store (warm.h): keys, the manifest
 * codec, verified restores and crash-safe, race-safe saves.
 *
 * Invariants:
 *  1. ROOT/KEY, when it exists, was renamed there whole: its three files
 *     and the directory were fsynced before the rename.
 *  2. Nothing writes into ROOT/KEY; a saver writes only its own temp
 *     directory (mkdir decides whose it is), a remover renames ROOT/KEY
 *     aside before it unlinks.
 *  3. What vm_warm_restore hands out matched the manifest when read: the
 *     state was read through by us (the same open file QEMU then reads),
 *     the disk hashed as it was copied. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "fs/cleanup.h"
#include "fs/wire.h"
#include "sandbox/vm/warm.h"

#define IO_BYTES (1u << 20) /* a read of the state or the disk */
#define COPY_PAGE 4096u	    /* the holes of a disk copy */
#define TMP_PREFIX ".tmp-"
#define DEAD_PREFIX ".dead-"

static_assert(IO_BYTES % VM_WARM_BLOCK == 0, "reads hold whole blocks");
static_assert(VM_WARM_BLOCK % COPY_PAGE == 0, "blocks hold whole pages");
static_assert(sizeof(VM_WARM_MAGIC) - 1 == 8, "the magic is 8 bytes");

static atomic_uint name_seq; /* temp names of this process */

static void hex128(XXH128_hash_t h, char ret[VM_WARM_KEY_LEN + 1])
{
	snprintf(ret, VM_WARM_KEY_LEN + 1, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64,
		 (uint64_t)h.low64);
}

static bool is_hex(const char *s, size_t min)
{
	size_t n = 0;
	for (; s && s[n]; n++)
		if (!strchr("0123456789abcdef", s[n]))
			return false;
	return s && n >= min;
}

int vm_warm_key(const struct vm_warm_shape *s, char ret[VM_WARM_KEY_LEN + 1])
{
	const char *sums[] = {s->image, s->kernel, s->initrd, s->vmm};
	for (size_t i = 0; i < ARRAY_SIZE(sums); i++)
		if (!is_hex(sums[i], VM_WARM_KEY_LEN))
			return -EINVAL;
	/* a canonical text: every field named, so that no two shapes hash the
	 * same bytes; the major version in it, so that a new layout gets new keys */
	char text[1024];
	int n = snprintf(text, sizeof(text),
			 "strata-vm-warm %d\nimage %s\nkernel %s\ninitrd %s\nvmm %s\nvcpus %u\n"
			 "memory_mb %" PRIu64 "\ndisk_mb %" PRIu64 "\nkvm %d\n",
			 VM_WARM_MAJOR, s->image, s->kernel, s->initrd, s->vmm, s->vcpus,
			 s->memory_mb, s->disk_mb, s->kvm);
	if (n < 0 || (size_t)n >= sizeof(text))
		return -EINVAL;
	hex128(XXH3_128bits(text, (size_t)n), ret);
	return 0;
}

int vm_warm_file_sum(const char *path, char ret[VM_WARM_KEY_LEN + 1], struct strata_err *e)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = malloc(IO_BYTES);
	XXH3_state_t st;
	if (fd < 0)
		return strata_err_set(e, -errno, "cannot open %s: %s", path, strerror(errno));
	if (!buf)
		return -ENOMEM;
	XXH3_128bits_reset(&st);
	for (;;) {
		ssize_t k = read(fd, buf, IO_BYTES);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return strata_err_set(e, -errno, "cannot read %s: %s", path,
					      strerror(errno));
		if (k == 0)
			break;
		XXH3_128bits_update(&st, buf, (size_t)k);
	}
	hex128(XXH3_128bits_digest(&st), ret);
	return 0;
}

/* ---- the manifest ---------------------------------------------------------- */

void vm_warm_manifest_encode(const struct vm_warm_manifest *m, uint8_t *buf)
{
	memset(buf, 0, VM_WARM_MANIFEST_BYTES);
	memcpy(buf, VM_WARM_MAGIC, 8);
	le16_put(buf + 8, m->major);
	le16_put(buf + 10, m->minor);
	le32_put(buf + 12, VM_WARM_MANIFEST_BYTES);
	memcpy(buf + 16, m->key, VM_WARM_KEY_LEN);
	le64_put(buf + 48, m->state_bytes);
	le64_put(buf + 56, m->state_sum);
	le64_put(buf + 64, m->disk_bytes);
	le64_put(buf + 72, m->disk_sum);
	le64_put(buf + 80, m->saved_at);
	le64_put(buf + 88, XXH3_64bits(buf, 88));
}

int vm_warm_manifest_decode(const uint8_t *buf, size_t n, struct vm_warm_manifest *ret,
			    struct strata_err *e)
{
	if (n < 16 || memcmp(buf, VM_WARM_MAGIC, 8))
		return strata_err_set(e, -EBADMSG, "the manifest is not one (bad magic)");
	uint16_t major = le16_get(buf + 8);
	uint32_t len = le32_get(buf + 12);
	if (major != VM_WARM_MAJOR)
		return strata_err_set(e, -EPROTO, "the manifest is of version %u (we read %d)",
				      major, VM_WARM_MAJOR);
	if (len < VM_WARM_MANIFEST_BYTES || len > VM_WARM_MANIFEST_MAX || len != n)
		return strata_err_set(
		    e, -EBADMSG, "the manifest's length %" PRIu32 " is not its size %zu", len, n);
	if (le64_get(buf + len - 8) != XXH3_64bits(buf, len - 8))
		return strata_err_set(e, -EBADMSG, "the manifest's checksum does not match");
	struct vm_warm_manifest m = {.major = major, .minor = le16_get(buf + 10)};
	memcpy(m.key, buf + 16, VM_WARM_KEY_LEN);
	m.key[VM_WARM_KEY_LEN] = 0;
	if (!is_hex(m.key, VM_WARM_KEY_LEN))
		return strata_err_set(e, -EBADMSG, "the manifest's key is not hex");
	m.state_bytes = le64_get(buf + 48);
	m.state_sum = le64_get(buf + 56);
	m.disk_bytes = le64_get(buf + 64);
	m.disk_sum = le64_get(buf + 72);
	m.saved_at = le64_get(buf + 80);
	*ret = m;
	return 0;
}

/* ---- reading and copying ----------------------------------------------------- */

/* XXH3-64 of the whole file and its size (pread: the offset stays). */
static int sum_file(int fd, uint64_t *ret_sum, uint64_t *ret_bytes)
{
	_cleanup_free_ uint8_t *buf = malloc(IO_BYTES);
	XXH3_state_t st;
	uint64_t off = 0;
	if (!buf)
		return -ENOMEM;
	XXH3_64bits_reset(&st);
	for (;;) {
		ssize_t k = pread(fd, buf, IO_BYTES, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		XXH3_64bits_update(&st, buf, (size_t)k);
		off += (uint64_t)k;
	}
	*ret_sum = XXH3_64bits_digest(&st);
	*ret_bytes = off;
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		p += k, n -= (size_t)k, off += (uint64_t)k;
	}
	return 0;
}

/* Writes the pages of p that are not all zero (the copy as sparse as a
 * page-wise cp would make it: a block the checksum counts may be mostly
 * holes). */
static int write_pages(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	for (size_t i = 0; i < n; i += COPY_PAGE) {
		size_t k = STRATA_MIN((size_t)COPY_PAGE, n - i);
		int r = all_zero(p + i, k) ? 0 : pwrite_all(fd, p + i, k, off + i);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Reads [off, end) of from, hashes its non-zero blocks and writes them to
 * to (when >= 0). off is block-aligned. */
static int copy_range(int from, int to, uint64_t off, uint64_t end, uint8_t *buf, XXH3_state_t *h)
{
	while (off < end) {
		size_t want = (size_t)STRATA_MIN((uint64_t)IO_BYTES, end - off);
		ssize_t k = pread(from, buf, want, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -ENODATA; /* shorter than it said */
		for (size_t b = 0; b < (size_t)k; b += VM_WARM_BLOCK) {
			size_t n = STRATA_MIN((size_t)VM_WARM_BLOCK, (size_t)k - b);
			if (all_zero(buf + b, n))
				continue; /* a hole in the copy, not in the sum */
			uint8_t le[8];
			le64_put(le, off + b);
			XXH3_64bits_update(h, le, 8);
			XXH3_64bits_update(h, buf + b, n);
			int r = to >= 0 ? write_pages(to, buf + b, n, off + b) : 0;
			if (r < 0)
				return r;
		}
		off += (uint64_t)k;
	}
	return 0;
}

/* Copies the bytes of from into to (the copy sparse: zero blocks are
 * holes) and sums them as the manifest's disk checksum. Skips the holes of
 * from where its filesystem says where they are (SEEK_DATA); elsewhere it
 * reads them (as zeros: the same sum). */
static int copy_disk(int from, int to, uint64_t *ret_sum, uint64_t *ret_bytes)
{
	_cleanup_free_ uint8_t *buf = malloc(IO_BYTES);
	struct stat st;
	XXH3_state_t h;
	if (!buf)
		return -ENOMEM;
	if (fstat(from, &st) < 0)
		return -errno;
	uint64_t size = (uint64_t)st.st_size, off = 0;
	XXH3_64bits_reset(&h);
	if (to >= 0 && ftruncate(to, 0) < 0)
		return -errno;
	bool seek = true;
	while (off < size) {
		off_t d = seek ? lseek(from, (off_t)off, SEEK_DATA) : (off_t)off;
		if (d < 0 && errno == ENXIO)
			break; /* a hole to the end */
		if (d < 0) {
			seek = false; /* no SEEK_DATA here: read everything */
			continue;
		}
		uint64_t start = STRATA_MAX(off, (uint64_t)d / VM_WARM_BLOCK * VM_WARM_BLOCK);
		off_t hole = seek ? lseek(from, d, SEEK_HOLE) : (off_t)size;
		uint64_t end = hole < 0 ? size : (uint64_t)hole;
		end = STRATA_MIN(size, (end + VM_WARM_BLOCK - 1) / VM_WARM_BLOCK * VM_WARM_BLOCK);
		int r = copy_range(from, to, start, end, buf, &h);
		if (r < 0)
			return r;
		off = end;
	}
	if (to >= 0 && ftruncate(to, (off_t)size) < 0)
		return -errno;
	*ret_sum = XXH3_64bits_digest(&h);
	*ret_bytes = size;
	return 0;
}

/* ---- restoring ---------------------------------------------------------------- */

static int read_manifest(int dfd, const char *key, struct vm_warm_manifest *m, struct strata_err *e)
{
	_cleanup_close_ int fd = openat(dfd, "manifest", O_RDONLY | O_CLOEXEC);
	uint8_t buf[VM_WARM_MANIFEST_MAX + 1];
	if (fd < 0)
		return strata_err_set(e, errno == ENOENT ? -EBADMSG : -errno, "no manifest: %s",
				      strerror(errno));
	ssize_t n = pread(fd, buf, sizeof(buf), 0);
	if (n < 0)
		return strata_err_set(e, -errno, "cannot read its manifest: %s", strerror(errno));
	int r = vm_warm_manifest_decode(buf, (size_t)n, m, e);
	if (r == -EPROTO)
		r = -EBADMSG; /* another layout's: not ours to restore */
	if (r == 0 && strcmp(m->key, key))
		r = strata_err_set(e, -EBADMSG, "its manifest is of key %s (a foreign snapshot)",
				   m->key);
	return r;
}

static int open_state(int dfd, const struct vm_warm_manifest *m, int *ret_fd, struct strata_err *e)
{
	_cleanup_close_ int fd = openat(dfd, "state", O_RDONLY | O_CLOEXEC);
	uint64_t sum = 0, bytes = 0;
	if (fd < 0)
		return strata_err_set(e, errno == ENOENT ? -EBADMSG : -errno, "no state: %s",
				      strerror(errno));
	int r = sum_file(fd, &sum, &bytes);
	if (r < 0)
		return strata_err_set(e, r, "cannot read its state: %s", strerror(-r));
	if (bytes != m->state_bytes)
		return strata_err_set(e, -EBADMSG,
				      "its state is %" PRIu64 " bytes, the manifest says %" PRIu64,
				      bytes, m->state_bytes);
	if (sum != m->state_sum)
		return strata_err_set(e, -EBADMSG,
				      "its state's checksum %016" PRIx64 " is not the manifest's "
				      "%016" PRIx64,
				      sum, m->state_sum);
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static int restore_disk(int dfd, const struct vm_warm_manifest *m, int disk_fd,
			struct strata_err *e)
{
	_cleanup_close_ int fd = openat(dfd, "disk", O_RDONLY | O_CLOEXEC);
	uint64_t sum = 0, bytes = 0;
	if (fd < 0)
		return strata_err_set(e, errno == ENOENT ? -EBADMSG : -errno, "no disk: %s",
				      strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size != m->disk_bytes)
		return strata_err_set(e, -EBADMSG,
				      "its disk is %" PRIu64 " bytes, the manifest says %" PRIu64,
				      (uint64_t)st.st_size, m->disk_bytes);
	int r = copy_disk(fd, disk_fd, &sum, &bytes);
	if (r == -ENODATA)
		return strata_err_set(e, -EBADMSG, "its disk ended early");
	if (r < 0)
		return strata_err_set(e, r, "cannot copy its disk: %s", strerror(-r));
	if (sum != m->disk_sum)
		return strata_err_set(e, -EBADMSG,
				      "its disk's checksum %016" PRIx64 " is not the manifest's "
				      "%016" PRIx64,
				      sum, m->disk_sum);
	return 0;
}

int vm_warm_restore(const char *root, const char *key, int disk_fd, int *ret_state_fd,
		    struct strata_err *e)
{
	char dir[PATH_MAX];
	struct vm_warm_manifest m;
	if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", root, key) >= sizeof(dir))
		return -ENAMETOOLONG;
	/* one directory fd: the three files are of the same snapshot even if
	 * ROOT/KEY is replaced meanwhile */
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int sfd = -1;
	if (dfd < 0)
		return errno == ENOENT
			   ? -ENOENT
			   : strata_err_set(e, -errno, "cannot open %s: %s", dir, strerror(errno));
	int r = read_manifest(dfd, key, &m, e);
	if (r == 0)
		r = open_state(dfd, &m, &sfd, e);
	if (r == 0)
		r = restore_disk(dfd, &m, disk_fd, e);
	if (r == 0)
		*ret_state_fd = TAKE_FD(sfd);
	return r;
}

/* ---- saving -------------------------------------------------------------------- */

struct vm_warm_save {
	char root[PATH_MAX], key[VM_WARM_KEY_LEN + 1], tmp[PATH_MAX];
	int dfd, state_fd, disk_fd;
	uint64_t disk_sum, disk_bytes;
};

/* Removes the files of directory path and the directory. */
static void remove_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(path);
}

/* ROOT/<prefix>KEY-TAG-PID-N: a name no other saver makes. */
static int aside_name(char *buf, size_t cap, const char *root, const char *prefix, const char *key,
		      const char *tag)
{
	unsigned n = atomic_fetch_add(&name_seq, 1);
	if ((size_t)snprintf(buf, cap, "%s/%s%s-%s-%d-%u", root, prefix, key, tag, (int)getpid(),
			     n) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

int vm_warm_save_begin(const char *root, const char *key, const char *tag,
		       struct vm_warm_save **ret, struct strata_err *e)
{
	struct vm_warm_save *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dfd = s->state_fd = s->disk_fd = -1;
	snprintf(s->root, sizeof(s->root), "%s", root);
	snprintf(s->key, sizeof(s->key), "%s", key);
	int r = aside_name(s->tmp, sizeof(s->tmp), root, TMP_PREFIX, key, tag);
	if (r == 0 && mkdir(root, 0700) < 0 && errno != EEXIST)
		r = strata_err_set(e, -errno, "cannot make %s: %s", root, strerror(errno));
	if (r == 0 && mkdir(s->tmp, 0700) < 0)
		r = strata_err_set(e, -errno, "cannot make %s: %s", s->tmp, strerror(errno));
	if (r == 0 && (s->dfd = open(s->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = -errno;
	if (r == 0 && (s->state_fd = openat(s->dfd, "state", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
					    0600)) < 0)
		r = strata_err_set(e, -errno, "cannot make %s/state: %s", s->tmp, strerror(errno));
	if (r < 0) {
		vm_warm_save_abort(s);
		return r;
	}
	*ret = s;
	return 0;
}

int vm_warm_save_state_fd(const struct vm_warm_save *s)
{
	return s->state_fd;
}

int vm_warm_save_disk(struct vm_warm_save *s, int disk_fd, struct strata_err *e)
{
	s->disk_fd = openat(s->dfd, "disk", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (s->disk_fd < 0)
		return strata_err_set(e, -errno, "cannot make %s/disk: %s", s->tmp,
				      strerror(errno));
	int r = copy_disk(disk_fd, s->disk_fd, &s->disk_sum, &s->disk_bytes);
	if (r < 0)
		return strata_err_set(e, r, "cannot copy the VM's disk: %s", strerror(-r));
	return 0;
}

static int write_manifest(struct vm_warm_save *s, struct strata_err *e)
{
	struct vm_warm_manifest m = {.major = VM_WARM_MAJOR,
				     .minor = VM_WARM_MINOR,
				     .disk_bytes = s->disk_bytes,
				     .disk_sum = s->disk_sum,
				     .saved_at = (uint64_t)time(NULL)};
	snprintf(m.key, sizeof(m.key), "%s", s->key);
	int r = sum_file(s->state_fd, &m.state_sum, &m.state_bytes);
	if (r < 0)
		return strata_err_set(e, r, "cannot read back the state: %s", strerror(-r));
	if (m.state_bytes == 0)
		return strata_err_set(e, -ENODATA, "the state is empty");
	uint8_t buf[VM_WARM_MANIFEST_BYTES];
	vm_warm_manifest_encode(&m, buf);
	_cleanup_close_ int fd =
	    openat(s->dfd, "manifest", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || pwrite_all(fd, buf, sizeof(buf), 0) < 0 || fsync(fd) < 0)
		return strata_err_set(e, -errno, "cannot write %s/manifest: %s", s->tmp,
				      strerror(errno));
	return 0;
}

static int fsync_path(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 || fsync(fd) < 0 ? -errno : 0;
}

int vm_warm_save_commit(struct vm_warm_save *s, struct strata_err *e)
{
	char dst[PATH_MAX];
	int r = s->disk_fd >= 0 ? 0 : strata_err_set(e, -EINVAL, "no disk was saved");
	if (r == 0 && (fsync(s->state_fd) < 0 || fsync(s->disk_fd) < 0))
		r = strata_err_set(e, -errno, "cannot sync %s: %s", s->tmp, strerror(errno));
	if (r == 0)
		r = write_manifest(s, e);
	if (r == 0 && fsync(s->dfd) < 0)
		r = strata_err_set(e, -errno, "cannot sync %s: %s", s->tmp, strerror(errno));
	if (r == 0 && (size_t)snprintf(dst, sizeof(dst), "%s/%s", s->root, s->key) >= sizeof(dst))
		r = -ENAMETOOLONG;
	if (r == 0 && rename(s->tmp, dst) < 0) {
		if (errno == ENOTEMPTY || errno == EEXIST)
			r = 1; /* another saver's is there: the first rename wins */
		else
			r = strata_err_set(e, -errno, "cannot rename %s to %s: %s", s->tmp, dst,
					   strerror(errno));
	}
	if (r == 0) {
		s->tmp[0] = 0; /* published: not ours to remove */
		if (fsync_path(s->root) < 0)
			r = strata_err_set(e, -errno, "cannot sync %s: %s", s->root,
					   strerror(errno));
	}
	vm_warm_save_abort(s);
	return r;
}

void vm_warm_save_abort(struct vm_warm_save *s)
{
	if (!s)
		return;
	int fds[] = {s->state_fd, s->disk_fd, s->dfd};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (s->tmp[0])
		remove_dir(s->tmp);
	free(s);
}

/* ---- removing ------------------------------------------------------------------ */

int vm_warm_remove(const char *root, const char *key, const char *tag)
{
	char src[PATH_MAX], aside[PATH_MAX];
	if ((size_t)snprintf(src, sizeof(src), "%s/%s", root, key) >= sizeof(src))
		return -ENAMETOOLONG;
	int r = aside_name(aside, sizeof(aside), root, DEAD_PREFIX, key, tag);
	if (r < 0)
		return r;
	if (rename(src, aside) < 0)
		return -errno;
	remove_dir(aside);
	return 0;
}

/* Whether entry name of root is a saver's leftover to remove: ours (tag in
 * it) or older than max_age_s. */
static bool leftover(int dfd, const char *name, const char *tag, int64_t max_age_s)
{
	char mine[64];
	struct stat st;
	if (strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) &&
	    strncmp(name, DEAD_PREFIX, strlen(DEAD_PREFIX)))
		return false;
	snprintf(mine, sizeof(mine), "-%s-", tag);
	if (strstr(name, mine))
		return true;
	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       (int64_t)time(NULL) - (int64_t)st.st_mtime > max_age_s;
}

int vm_warm_sweep(const char *root, const char *tag, int64_t max_age_s)
{
	char p[PATH_MAX];
	int n = 0;
	DIR *d = opendir(root);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (leftover(dirfd(d), de->d_name, tag, max_age_s) &&
		    (size_t)snprintf(p, sizeof(p), "%s/%s", root, de->d_name) < sizeof(p)) {
			remove_dir(p);
			n++;
		}
	if (d)
		closedir(d);
	return n;
}
