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
#include <sys/file.h>
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

/* A packed disk being written: the non-zero blocks one after the other,
 * their offsets kept for the index. */
struct pack {
	int fd;
	uint64_t pos, n, cap;
	uint64_t *offs;
};

static int pack_block(struct pack *pk, uint64_t off, const uint8_t *p, size_t n)
{
	if (pk->n == pk->cap) {
		uint64_t cap = pk->cap ? 2 * pk->cap : 256;
		uint64_t *v = realloc(pk->offs, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		pk->offs = v, pk->cap = cap;
	}
	pk->offs[pk->n++] = off;
	int r = pwrite_all(pk->fd, p, n, pk->pos);
	pk->pos += n;
	return r;
}

/* Sums a non-zero block as the manifest's disk checksum counts it. */
static void sum_block(XXH3_state_t *h, uint64_t off, const uint8_t *p, size_t n)
{
	uint8_t le[8];
	le64_put(le, off);
	XXH3_64bits_update(h, le, 8);
	XXH3_64bits_update(h, p, n);
}

/* Reads [off, end) of from, sums its non-zero blocks and packs them. off
 * is block-aligned. */
static int pack_range(int from, struct pack *pk, uint64_t off, uint64_t end, uint8_t *buf,
		      XXH3_state_t *h)
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
				continue;
			sum_block(h, off + b, buf + b, n);
			int r = pack_block(pk, off + b, buf + b, n);
			if (r < 0)
				return r;
		}
		off += (uint64_t)k;
	}
	return 0;
}

/* The packed disk's index and trailer after its blocks. */
static int pack_finish(struct pack *pk, uint64_t size)
{
	uint8_t le[8], tr[VM_WARM_DISK_TRAILER];
	for (uint64_t i = 0; i < pk->n; i++) {
		le64_put(le, pk->offs[i]);
		int r = pwrite_all(pk->fd, le, 8, pk->pos + 8 * i);
		if (r < 0)
			return r;
	}
	memcpy(tr, VM_WARM_DISK_MAGIC, 8);
	le64_put(tr + 8, pk->n);
	le64_put(tr + 16, size);
	return pwrite_all(pk->fd, tr, sizeof(tr), pk->pos + 8 * pk->n);
}

/* Packs the disk from into to (warm.h: the non-zero blocks, their index,
 * the trailer) and sums it as the manifest's disk checksum. Skips the
 * holes of from where its filesystem says where they are (SEEK_DATA);
 * elsewhere it reads them (as zeros: the same sum). */
static int pack_disk(int from, int to, uint64_t *ret_sum, uint64_t *ret_bytes)
{
	_cleanup_free_ uint8_t *buf = malloc(IO_BYTES);
	struct pack pk = {.fd = to};
	struct stat st;
	XXH3_state_t h;
	if (!buf)
		return -ENOMEM;
	if (fstat(from, &st) < 0)
		return -errno;
	uint64_t size = (uint64_t)st.st_size, off = 0;
	XXH3_64bits_reset(&h);
	bool seek = true;
	int r = 0;
	while (r == 0 && off < size) {
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
		r = pack_range(from, &pk, start, end, buf, &h);
		off = end;
	}
	if (r == 0)
		r = pack_finish(&pk, size);
	free(pk.offs);
	*ret_sum = XXH3_64bits_digest(&h);
	*ret_bytes = size;
	return r;
}

/* The index of a packed disk of file_bytes, checked: offsets ascending,
 * block-aligned, inside the disk, and blocks + index + trailer exactly the
 * file. *ret (n offsets, caller frees). */
static int read_index(int fd, uint64_t file_bytes, uint64_t size, uint64_t **ret, uint64_t *ret_n,
		      struct strata_err *e)
{
	uint8_t tr[VM_WARM_DISK_TRAILER];
	if (file_bytes < sizeof(tr) ||
	    pread(fd, tr, sizeof(tr), (off_t)(file_bytes - sizeof(tr))) != (ssize_t)sizeof(tr) ||
	    memcmp(tr, VM_WARM_DISK_MAGIC, 8))
		return strata_err_set(e, -EBADMSG, "its disk is cut short (no trailer)");
	uint64_t n = le64_get(tr + 8);
	if (le64_get(tr + 16) != size)
		return strata_err_set(
		    e, -EBADMSG, "its disk is of %" PRIu64 " bytes, the manifest says %" PRIu64,
		    le64_get(tr + 16), size);
	if (n > size / VM_WARM_BLOCK + 1 || 8 * n > file_bytes - sizeof(tr))
		return strata_err_set(e, -EBADMSG, "its disk's index of %" PRIu64 " is too long",
				      n);
	_cleanup_free_ uint8_t *raw = malloc(8 * n + 1);
	uint64_t *v = malloc(8 * n + 1), data = 0;
	if (!raw || !v) {
		free(v);
		return -ENOMEM;
	}
	off_t at = (off_t)(file_bytes - sizeof(tr) - 8 * n);
	int r = pread(fd, raw, 8 * n, at) == (ssize_t)(8 * n) ? 0 : -EBADMSG;
	for (uint64_t i = 0; r == 0 && i < n; i++) {
		v[i] = le64_get(raw + 8 * i);
		if (v[i] % VM_WARM_BLOCK || v[i] >= size || (i && v[i] <= v[i - 1]))
			r = -EBADMSG;
		else
			data += STRATA_MIN((uint64_t)VM_WARM_BLOCK, size - v[i]);
	}
	if (r == 0 && data + 8 * n + sizeof(tr) != file_bytes)
		r = -EBADMSG;
	if (r < 0) {
		free(v);
		return strata_err_set(e, r, "its disk is not as its index says");
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Unpacks the packed disk from into to (sparse: zero pages are holes),
 * summing it. */
static int unpack_disk(int from, int to, uint64_t size, uint64_t *ret_sum, struct strata_err *e)
{
	_cleanup_free_ uint8_t *buf = malloc(IO_BYTES);
	_cleanup_free_ uint64_t *offs = NULL;
	struct stat st;
	uint64_t n = 0, pos = 0;
	XXH3_state_t h;
	if (!buf)
		return -ENOMEM;
	if (fstat(from, &st) < 0)
		return -errno;
	int r = read_index(from, (uint64_t)st.st_size, size, &offs, &n, e);
	if (r < 0)
		return r;
	if (ftruncate(to, 0) < 0 || ftruncate(to, (off_t)size) < 0)
		return strata_err_set(e, -errno, "cannot size the VM's disk: %s", strerror(errno));
	XXH3_64bits_reset(&h);
	/* blocks are whole but for the disk's last one: a read of IO_BYTES
	 * holds whole blocks */
	for (uint64_t i = 0; i < n;) {
		uint64_t want = 0, j = i;
		for (; j < n && want + VM_WARM_BLOCK <= IO_BYTES; j++)
			want += STRATA_MIN((uint64_t)VM_WARM_BLOCK, size - offs[j]);
		ssize_t k = pread(from, buf, (size_t)want, (off_t)pos);
		if (k < 0 && errno == EINTR)
			continue;
		if (k != (ssize_t)want)
			return strata_err_set(e, -EBADMSG, "cannot read its disk: %s",
					      k < 0 ? strerror(errno) : "short");
		for (uint64_t b = 0; i < j; i++) {
			size_t len = (size_t)STRATA_MIN((uint64_t)VM_WARM_BLOCK, size - offs[i]);
			if (!all_zero(buf + b, len)) {
				sum_block(&h, offs[i], buf + b, len);
				if ((r = write_pages(to, buf + b, len, offs[i])) < 0)
					return strata_err_set(
					    e, r, "cannot write the VM's disk: %s", strerror(-r));
			}
			b += len;
		}
		pos += want;
	}
	*ret_sum = XXH3_64bits_digest(&h);
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
	/* Held shared for as long as the state is open (QEMU's copy of the fd
	 * too): eviction (vm_warm_evict) removes only what it can lock alone.
	 * Locked by an eviction now: as if not there (boot, nothing removed). */
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK)
		return strata_err_set(e, -ENOENT, "being evicted");
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
	uint64_t sum = 0;
	if (fd < 0)
		return strata_err_set(e, errno == ENOENT ? -EBADMSG : -errno, "no disk: %s",
				      strerror(errno));
	int r = unpack_disk(fd, disk_fd, m->disk_bytes, &sum, e);
	if (r < 0)
		return r;
	if (sum != m->disk_sum)
		return strata_err_set(e, -EBADMSG,
				      "its disk's checksum %016" PRIx64 " is not the manifest's "
				      "%016" PRIx64,
				      sum, m->disk_sum);
	return 0;
}

/* What identifies the snapshot directory dfd (struct vm_warm_seen). */
void vm_warm_seen_of(int dfd, struct vm_warm_seen *ret)
{
	struct stat st;
	uint8_t buf[VM_WARM_MANIFEST_MAX + 1];
	_cleanup_close_ int fd = openat(dfd, "manifest", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf), 0) : -1;
	*ret = (struct vm_warm_seen){0};
	if (fstat(dfd, &st) == 0)
		ret->dev = st.st_dev, ret->ino = st.st_ino;
	ret->manifest = n >= 0 ? XXH3_64bits(buf, (size_t)n) : 0;
}

int vm_warm_restore(const char *root, const char *key, int disk_fd, int *ret_state_fd,
		    struct vm_warm_seen *ret_seen, struct strata_err *e)
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
	if (ret_seen)
		vm_warm_seen_of(dfd, ret_seen);
	int r = read_manifest(dfd, key, &m, e);
	if (r == 0)
		r = open_state(dfd, &m, &sfd, e);
	if (r == 0)
		r = restore_disk(dfd, &m, disk_fd, e);
	if (r == 0) {
		*ret_state_fd = TAKE_FD(sfd);
		futimens(dfd, NULL); /* its last use: eviction's order (best effort) */
	}
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
	int r = pack_disk(disk_fd, s->disk_fd, &s->disk_sum, &s->disk_bytes);
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

int vm_warm_remove(const char *root, const char *key, const char *tag,
		   const struct vm_warm_seen *seen)
{
	char src[PATH_MAX], aside[PATH_MAX];
	struct vm_warm_seen now;
	if ((size_t)snprintf(src, sizeof(src), "%s/%s", root, key) >= sizeof(src))
		return -ENAMETOOLONG;
	int r = aside_name(aside, sizeof(aside), root, DEAD_PREFIX, key, tag);
	if (r < 0)
		return r;
	if (rename(src, aside) < 0)
		return -errno;
	/* Another directory than the one read is a fresh snapshot that replaced
	 * the bad one meanwhile. Back it goes (unless yet another arrived
	 * meanwhile: that one stays, this one goes). */
	_cleanup_close_ int dfd = seen ? open(aside, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (dfd >= 0)
		vm_warm_seen_of(dfd, &now);
	if (dfd >= 0 &&
	    (now.dev != seen->dev || now.ino != seen->ino || now.manifest != seen->manifest)) {
		if (rename(aside, src) == 0)
			return -ESTALE;
		remove_dir(aside);
		return -ESTALE;
	}
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
