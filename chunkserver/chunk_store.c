/* chunk_store.c — the chunk engine: one target directory on a local disk.
 *
 * Layout of a target:
 *   <target>/LOCK                          flock'd by the owning process
 *   <target>/chunks/<ino%256 %02x>/<ino %016x>/<index %08x>   one file per chunk
 *   <target>/tmp/<ino %016x>.<index %08x>  a chunk being rewritten
 *   <target>/tmp/<ino %016x>.<index %08x>.put  a chunk being put in pieces (resync)
 *   <target>/target.id                     identity record (chunkserver/target_id.c)
 *
 * A chunk file is a header followed by the data (format in README.md):
 *   [0, hdr_len)              header: magic, format, hdr_len, nblocks, ino,
 *                             index, block size, version, data_len, overall
 *                             checksum, header checksum, then one XXH3-64 per
 *                             64 KiB block of data; padded to 4 KiB
 *   [hdr_len, hdr_len+len)    data (gaps are file holes and read as zeros)
 *
 * Invariants:
 *  1. A chunk file under chunks/ is never modified in place. Every mutation
 *     (write, truncate) builds a complete new file in tmp/ and rename()s it
 *     over the old one, so a reader that opened the chunk sees one consistent
 *     version, and a process crash leaves the old or the new chunk, never a mix.
 *  2. Every byte returned by a read was verified against its block checksum
 *     in the same open file as the header that holds the checksum; a mismatch
 *     is -EIO plus one corruption report, never wrong bytes.
 *  3. A block carried unchanged into a new version is copied with its old
 *     checksum (copy_file_range, no verification needed); a block that is
 *     partly rewritten is read and verified first, so corruption is never
 *     laundered into a fresh checksum.
 *  4. Writers of one chunk are serialised by a striped mutex (stripe =
 *     hash(ino, index)); readers take no lock (invariant 1).
 *  5. Files in tmp/ belong to a writer holding the chunk's stripe lock, or
 *     (tmp/<ino>.<index>.put) to a transfer of a chunk in pieces, touched
 *     only under that lock, until its last piece publishes it, a failed
 *     piece or the next first piece of the chunk drops it, or the expiry
 *     does (its sender went away); at open (before any writer exists) every
 *     file in tmp/ is a crash leftover and is deleted. A failed write
 *     (-ENOSPC, -EIO) deletes its temp file and leaves the old chunk
 *     untouched.
 *  6. Durability: nothing is fsync'd unless asked. CHUNK_STORE_SYNC does
 *     fdatasync(temp) before the rename and fsync(dir) after it;
 *     chunk_store_sync() is syncfs() of the target. After a power loss an
 *     un-synced rewrite may be lost or (if the filesystem persisted the rename
 *     before the data) fail its checksum: detected as -EIO, never served.
 *
 * Data I/O goes through io_uring (a ring borrowed per operation from the
 * uring_pool); reads touch only the 64 KiB blocks the range overlaps, and
 * blocks wholly covered by a read or write move straight between the caller's
 * buffer and the kernel. */
#include "chunkserver/chunk_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "fs/cleanup.h"
#include "chunkserver/uring_pool.h"
#include "fs/wire.h"

#define CHDR_MAGIC 0x4b484353u /* "SCHK" */
#define CHDR_FORMAT 1
#define CHDR_FIXED 64
#define CHDR_ALIGN 4096u
#define CHDR_MAX_BLOCKS (CHUNK_STORE_MAX_LEN / CHUNK_BLOCK_SIZE)
#define BS CHUNK_BLOCK_SIZE
_Static_assert(BS == WIRE_DATA_PIECE, "a frame's data pieces are chunk blocks");
#define NSTRIPES 256

_Static_assert(CHDR_FIXED + 8 * CHDR_MAX_BLOCKS <= 3 * CHDR_ALIGN, "header size");

struct chunk_store {
	char *path;
	int dirfd, lockfd;
	struct uring_pool *pool;
	struct chunk_store_opts opts;
	pthread_mutex_t stripes[NSTRIPES];
};

/* A decoded chunk header. */
struct chunk_hdr {
	uint32_t hdr_len, nblocks;
	uint64_t ino;
	uint32_t index;
	uint64_t version;
	uint32_t data_len;
	uint64_t checksum;
	uint64_t *bcsum; /* heap, nblocks entries */
};

static const uint8_t zero_block[BS];

static void chunk_hdr_done(struct chunk_hdr *h)
{
	free(h->bcsum);
	h->bcsum = NULL;
}

static uint32_t nblocks_for(uint64_t len)
{
	return (uint32_t)((len + BS - 1) / BS);
}

static uint32_t hdr_len_for(uint32_t nblocks)
{
	uint32_t n = CHDR_FIXED + 8 * nblocks;
	return (n + CHDR_ALIGN - 1) / CHDR_ALIGN * CHDR_ALIGN;
}

static uint64_t block_file_off(uint32_t hdr_len, uint32_t b)
{
	return (uint64_t)hdr_len + (uint64_t)b * BS;
}

/* Length of block b of a chunk holding len bytes (0 past the end). */
static uint32_t block_len(uint64_t len, uint32_t b)
{
	uint64_t start = (uint64_t)b * BS;
	return start >= len ? 0 : (uint32_t)STRATA_MIN((uint64_t)BS, len - start);
}

/* XXH3-64 of one data block: the AVX2 build where the CPU has it (wire.h),
 * bit-identical to the library's XXH3_64bits and about twice as fast. */
static uint64_t block_sum(const void *p, size_t len)
{
	return wire_xxh3_64(p, len, 0);
}

static uint64_t blocks_checksum(const uint8_t *raw, uint32_t nblocks)
{
	return XXH3_64bits(raw + CHDR_FIXED, (size_t)nblocks * 8);
}

static uint64_t hdr_checksum(const uint8_t *raw, uint32_t nblocks)
{
	return XXH3_64bits_withSeed(raw + CHDR_FIXED, (size_t)nblocks * 8, XXH3_64bits(raw, 56));
}

/* Encodes h (with its block checksums) into raw[0..h->hdr_len), zero padded,
 * and stores the overall checksum into h->checksum. */
static void hdr_encode(struct chunk_hdr *h, uint8_t *raw)
{
	memset(raw, 0, h->hdr_len);
	le32_put(raw + 0, CHDR_MAGIC);
	le16_put(raw + 4, CHDR_FORMAT);
	le32_put(raw + 8, h->hdr_len);
	le32_put(raw + 12, h->nblocks);
	le64_put(raw + 16, h->ino);
	le32_put(raw + 24, h->index);
	le32_put(raw + 28, BS);
	le64_put(raw + 32, h->version);
	le32_put(raw + 40, h->data_len);
	for (uint32_t b = 0; b < h->nblocks; b++)
		le64_put(raw + CHDR_FIXED + 8 * b, h->bcsum[b]);
	h->checksum = blocks_checksum(raw, h->nblocks);
	le64_put(raw + 48, h->checksum);
	le64_put(raw + 56, hdr_checksum(raw, h->nblocks));
}

/* Validates the fixed part; returns the full header length or -EIO. */
static int hdr_peek_len(const uint8_t *raw)
{
	if (le32_get(raw) != CHDR_MAGIC || le16_get(raw + 4) != CHDR_FORMAT ||
	    le32_get(raw + 28) != BS)
		return -EIO;
	uint32_t nb = le32_get(raw + 12), len = le32_get(raw + 8);
	if (nb > CHDR_MAX_BLOCKS || len != hdr_len_for(nb))
		return -EIO;
	return (int)len;
}

/* Decodes a header whose full hdr_len bytes are in raw. Returns 0 or -EIO. */
static int hdr_decode(const uint8_t *raw, uint64_t ino, uint32_t index, struct chunk_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->hdr_len = le32_get(raw + 8);
	h->nblocks = le32_get(raw + 12);
	h->ino = le64_get(raw + 16);
	h->index = le32_get(raw + 24);
	h->version = le64_get(raw + 32);
	h->data_len = le32_get(raw + 40);
	h->checksum = le64_get(raw + 48);
	if (le64_get(raw + 56) != hdr_checksum(raw, h->nblocks) || h->ino != ino ||
	    h->index != index || h->data_len > CHUNK_STORE_MAX_LEN ||
	    h->nblocks != nblocks_for(h->data_len) ||
	    h->checksum != blocks_checksum(raw, h->nblocks))
		return -EIO;
	h->bcsum = malloc(sizeof(uint64_t) * (h->nblocks ? h->nblocks : 1));
	if (!h->bcsum)
		return -ENOMEM;
	for (uint32_t b = 0; b < h->nblocks; b++)
		h->bcsum[b] = le64_get(raw + CHDR_FIXED + 8 * b);
	return 0;
}

static int report_corrupt(struct chunk_store *cs, uint64_t ino, uint32_t index, int64_t block,
			  const char *what)
{
	if (cs->opts.on_corrupt) {
		struct chunk_corruption c = {.target_id = cs->opts.target_id,
					     .ino = ino,
					     .index = index,
					     .block = block,
					     .what = what};
		cs->opts.on_corrupt(cs->opts.arg, &c);
	}
	return -EIO;
}

static int read_at(struct io_uring *ring, int fd, void *buf, size_t len, uint64_t off)
{
	struct uring_op op = {.fd = fd, .kind = URING_READ, .iovcnt = 1, .off = off};
	op.iov[0] = (struct iovec){buf, len};
	return uring_run(ring, &op, 1);
}

/* Reads and verifies the header of the open chunk file fd. */
static int hdr_load(struct chunk_store *cs, struct io_uring *ring, int fd, uint64_t ino,
		    uint32_t index, struct chunk_hdr *ret)
{
	uint8_t first[CHDR_ALIGN];
	int r = read_at(ring, fd, first, sizeof(first), 0);
	if (r == -EIO)
		return report_corrupt(cs, ino, index, -1, "chunk file shorter than its header");
	if (r < 0)
		return r;
	int len = hdr_peek_len(first);
	if (len < 0)
		return report_corrupt(cs, ino, index, -1, "bad header");
	_cleanup_free_ uint8_t *raw = malloc(len);
	if (!raw)
		return -ENOMEM;
	memcpy(raw, first, sizeof(first));
	if (len > (int)sizeof(first)) {
		r = read_at(ring, fd, raw + sizeof(first), len - sizeof(first), sizeof(first));
		if (r == -EIO)
			return report_corrupt(cs, ino, index, -1,
					      "chunk file shorter than its header");
		if (r < 0)
			return r;
	}
	r = hdr_decode(raw, ino, index, ret);
	if (r == -EIO)
		return report_corrupt(cs, ino, index, -1, "header checksum mismatch");
	return r;
}

/* ---- paths and locks --------------------------------------------------- */

static void chunk_dir_path(char out[64], uint64_t ino)
{
	snprintf(out, 64, "chunks/%02x/%016llx", (unsigned)(ino & 0xff), (unsigned long long)ino);
}

static void chunk_path(char out[64], uint64_t ino, uint32_t index)
{
	snprintf(out, 64, "chunks/%02x/%016llx/%08x", (unsigned)(ino & 0xff),
		 (unsigned long long)ino, index);
}

static void tmp_path(char out[64], uint64_t ino, uint32_t index)
{
	snprintf(out, 64, "tmp/%016llx.%08x", (unsigned long long)ino, index);
}

static pthread_mutex_t *stripe(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	uint64_t h = (ino * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)index * 0xC2B2AE3D27D4EB4Full);
	return &cs->stripes[(h >> 32) % NSTRIPES];
}

static void unlockp(pthread_mutex_t **m)
{
	if (*m)
		pthread_mutex_unlock(*m);
}
#define _cleanup_unlock_ _cleanup_(unlockp) __attribute__((unused))

static pthread_mutex_t *lock_chunk(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	pthread_mutex_t *m = stripe(cs, ino, index);
	pthread_mutex_lock(m);
	return m;
}

struct ring_guard {
	struct uring_pool *pool;
	struct io_uring *ring;
};
static void ring_putp(struct ring_guard *g)
{
	if (g->ring)
		uring_pool_put(g->pool, g->ring);
}
#define RING_GUARD(name, cs)                                                                       \
	_cleanup_(ring_putp) struct ring_guard name = {(cs)->pool, uring_pool_get((cs)->pool)}

/* Opens a chunk file read-only: fd, -ENOENT, or -errno. */
static int chunk_open(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	char p[64];
	chunk_path(p, ino, index);
	int fd = openat(cs->dirfd, p, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* ---- open / close ------------------------------------------------------ */

static int mkdirat_ok(int dirfd, const char *p)
{
	return mkdirat(dirfd, p, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static int make_dirs(int dirfd)
{
	int r = mkdirat_ok(dirfd, "chunks");
	if (r == 0)
		r = mkdirat_ok(dirfd, "tmp");
	for (int i = 0; r == 0 && i < 256; i++) {
		char p[32];
		snprintf(p, sizeof(p), "chunks/%02x", i);
		r = mkdirat_ok(dirfd, p);
	}
	return r;
}

/* The target's tmp/ as a directory stream (dirfd() of it for the *at
 * calls), or NULL and errno. */
static DIR *open_tmp_dir(int target_fd)
{
	int fd = openat(target_fd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d && fd >= 0) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return d;
}

/* Deletes every file in tmp/ (invariant 5). */
static int clean_tmp(int target_fd)
{
	DIR *d = open_tmp_dir(target_fd);
	if (!d)
		return -errno;
	int fd = dirfd(d), r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (unlinkat(fd, de->d_name, 0) < 0 && errno != ENOENT && r == 0)
			r = -errno;
	}
	closedir(d);
	return r;
}

static int lock_target(int dirfd)
{
	int fd = openat(dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return r;
	}
	return fd;
}

void chunk_store_free(struct chunk_store *cs)
{
	if (!cs)
		return;
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_destroy(&cs->stripes[i]);
	if (cs->lockfd >= 0)
		close(cs->lockfd);
	if (cs->dirfd >= 0)
		close(cs->dirfd);
	free(cs->path);
	free(cs);
}

int chunk_store_open(const char *path, struct uring_pool *pool, const struct chunk_store_opts *opts,
		     struct chunk_store **ret)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	struct chunk_store *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&cs->stripes[i], NULL);
	cs->lockfd = -1;
	cs->pool = pool;
	if (opts)
		cs->opts = *opts;
	cs->path = strdup(path);
	cs->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = !cs->path ? -ENOMEM : cs->dirfd < 0 ? -errno : 0;
	if (r == 0)
		r = cs->lockfd = lock_target(cs->dirfd);
	if (r >= 0)
		r = make_dirs(cs->dirfd);
	if (r >= 0)
		r = clean_tmp(cs->dirfd);
	if (r < 0) {
		chunk_store_free(cs);
		return r;
	}
	*ret = cs;
	return 0;
}

const char *chunk_store_path(const struct chunk_store *cs)
{
	return cs->path;
}

/* ---- read -------------------------------------------------------------- */

static int verify_block(struct chunk_store *cs, const struct chunk_hdr *h, uint32_t b,
			const void *p)
{
	if (block_sum(p, block_len(h->data_len, b)) == h->bcsum[b])
		return 0;
	return report_corrupt(cs, h->ino, h->index, b, "block checksum mismatch");
}

/* A block's destination during a read: the caller's buffer when the range
 * covers it wholly, otherwise a scratch buffer. */
static bool covers(uint64_t lo, uint64_t hi, uint64_t bstart, uint64_t bend)
{
	return lo <= bstart && hi >= bend;
}

/* Reads [off, off+n) (within data_len, n > 0) into buf: whole blocks straight
 * into buf, the partial first/last block into scratch; verifies every touched
 * block. */
static int read_range(struct chunk_store *cs, struct io_uring *ring, int fd,
		      const struct chunk_hdr *h, uint32_t off, uint32_t n, uint8_t *buf)
{
	uint64_t end = (uint64_t)off + n;
	uint32_t b0 = off / BS, b1 = (uint32_t)((end - 1) / BS);
	uint64_t b0s = (uint64_t)b0 * BS, b1s = (uint64_t)b1 * BS;
	bool head_part = !covers(off, end, b0s, b0s + block_len(h->data_len, b0));
	bool tail_part = b1 != b0 && !covers(off, end, b1s, b1s + block_len(h->data_len, b1));
	_cleanup_free_ uint8_t *scratch = NULL;
	if (head_part || tail_part) {
		scratch = malloc(2 * BS);
		if (!scratch)
			return -ENOMEM;
	}
	uint8_t *head = scratch, *tail = scratch ? scratch + BS : NULL;
	struct uring_op ops[3];
	int nops = 0;
	if (head_part)
		ops[nops++] = (struct uring_op){.fd = fd,
						.kind = URING_READ,
						.iovcnt = 1,
						.off = block_file_off(h->hdr_len, b0),
						.iov = {{head, block_len(h->data_len, b0)}}};
	uint32_t m0 = b0 + head_part, m1 = b1 - tail_part; /* whole blocks m0..m1 */
	if (m0 <= m1 && !(head_part && b0 == b1)) {
		uint64_t ms = (uint64_t)m0 * BS,
			 me = (uint64_t)m1 * BS + block_len(h->data_len, m1);
		ops[nops++] = (struct uring_op){.fd = fd,
						.kind = URING_READ,
						.iovcnt = 1,
						.off = block_file_off(h->hdr_len, m0),
						.iov = {{buf + (ms - off), me - ms}}};
	}
	if (tail_part)
		ops[nops++] = (struct uring_op){.fd = fd,
						.kind = URING_READ,
						.iovcnt = 1,
						.off = block_file_off(h->hdr_len, b1),
						.iov = {{tail, block_len(h->data_len, b1)}}};
	int r = uring_run(ring, ops, nops);
	if (r == -EIO)
		return report_corrupt(cs, h->ino, h->index, -1, "chunk file shorter than its data");
	if (r < 0)
		return r;
	for (uint32_t b = b0; b <= b1; b++) {
		const uint8_t *p = b == b0 && head_part	  ? head
				   : b == b1 && tail_part ? tail
							  : buf + ((uint64_t)b * BS - off);
		r = verify_block(cs, h, b, p);
		if (r < 0)
			return r;
	}
	if (head_part)
		memcpy(buf, head + (off - b0s), STRATA_MIN(end, b0s + BS) - off);
	if (tail_part)
		memcpy(buf + (b1s - off), tail, end - b1s);
	return 0;
}

ssize_t chunk_store_read(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t off,
			 uint32_t len, void *buf)
{
	_cleanup_close_ int fd = chunk_open(cs, ino, index);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	RING_GUARD(g, cs);
	_cleanup_(chunk_hdr_done) struct chunk_hdr h = {0};
	int r = hdr_load(cs, g.ring, fd, ino, index, &h);
	if (r < 0)
		return r;
	if (off >= h.data_len || len == 0)
		return 0;
	uint32_t n = (uint32_t)STRATA_MIN((uint64_t)len, (uint64_t)h.data_len - off);
	r = read_range(cs, g.ring, fd, &h, off, n, buf);
	return r < 0 ? r : (ssize_t)n;
}

int chunk_store_stat(struct chunk_store *cs, uint64_t ino, uint32_t index, struct chunk_meta *ret)
{
	_cleanup_close_ int fd = chunk_open(cs, ino, index);
	if (fd < 0)
		return fd;
	RING_GUARD(g, cs);
	_cleanup_(chunk_hdr_done) struct chunk_hdr h = {0};
	int r = hdr_load(cs, g.ring, fd, ino, index, &h);
	if (r < 0)
		return r;
	*ret = (struct chunk_meta){h.version, h.data_len, h.checksum};
	return 0;
}

/* ---- copy-on-write update (write and truncate) ------------------------- */

/* How block b of the new version gets its bytes. */
enum bkind {
	B_DIRECT, /* wholly overwritten: straight from the caller's buffer */
	B_COPY,	  /* unchanged and same length: copy_file_range, old checksum */
	B_ZERO,	  /* beyond the old data and not written: a hole */
	B_BUILD,  /* old bytes (verified) + zeros + new bytes, in a scratch block */
};

/* One mutation: new length, and the written range [off, off+len) (len 0 for
 * a truncate). */
struct cow {
	struct chunk_store *cs;
	struct io_uring *ring;
	uint64_t ino;
	uint32_t index;
	uint32_t off, len, new_len;
	const uint8_t *data;
	const uint64_t *sums; /* XXH3-64 of each 64 KiB piece of data, or NULL */
	int oldfd, tmpfd;
	struct chunk_hdr old, new;
	uint8_t *scratch; /* nbuild * BS */
	uint8_t *hdr_raw; /* new header bytes */
	bool have_old;
	uint64_t set_version; /* chunk_store_put: the version to publish; 0 = old + 1 */
};

static enum bkind classify(const struct cow *c, uint32_t b)
{
	uint64_t bs = (uint64_t)b * BS, be = bs + block_len(c->new_len, b);
	uint64_t wlo = STRATA_MAX((uint64_t)c->off, bs);
	uint64_t whi = STRATA_MIN((uint64_t)c->off + c->len, be);
	uint32_t old_blen = block_len(c->old.data_len, b);
	if (c->len > 0 && covers(c->off, (uint64_t)c->off + c->len, bs, be))
		return B_DIRECT;
	if (c->len == 0 || wlo >= whi) {
		if (old_blen == be - bs)
			return B_COPY;
		if (old_blen == 0)
			return B_ZERO;
	}
	return B_BUILD;
}

/* Copies left bytes through a buffer, for filesystems without
 * copy_file_range. Returns 0, 0-length progress as -EIO, or -errno. */
static int copy_bounce(int from, loff_t *in, int to, loff_t *out, uint64_t left)
{
	_cleanup_free_ uint8_t *buf = malloc(BS);
	if (!buf)
		return -ENOMEM;
	while (left > 0) {
		ssize_t k = pread(from, buf, STRATA_MIN(left, (uint64_t)BS), *in);
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		for (ssize_t w = 0; w < k;) {
			ssize_t n = pwrite(to, buf + w, (size_t)(k - w), *out + w);
			if (n <= 0)
				return n < 0 ? -errno : -ENOSPC;
			w += n;
		}
		*in += k, *out += k, left -= (uint64_t)k;
	}
	return 0;
}

/* Copies [start, end) of the data from the old file into the temp file. */
static int copy_run(struct cow *c, uint64_t start, uint64_t end)
{
	loff_t in = (loff_t)(c->old.hdr_len + start), out = (loff_t)(c->new.hdr_len + start);
	uint64_t left = end - start;
	int r = 0;
	while (left > 0 && r == 0) {
		ssize_t k = copy_file_range(c->oldfd, &in, c->tmpfd, &out, left, 0);
		if (k > 0)
			left -= (uint64_t)k;
		else if (k == 0)
			r = -EIO;
		else if (errno == EXDEV || errno == EOPNOTSUPP || errno == ENOSYS ||
			 errno == EINVAL)
			r = copy_bounce(c->oldfd, &in, c->tmpfd, &out, left), left = 0;
		else if (errno != EINTR)
			r = -errno;
	}
	if (r == -EIO)
		return report_corrupt(c->cs, c->ino, c->index, (int64_t)(start / BS),
				      "chunk file shorter than its data");
	return r;
}

/* Copies every run of B_COPY blocks. */
static int copy_unchanged(struct cow *c)
{
	for (uint32_t b = 0; b < c->new.nblocks;) {
		if (classify(c, b) != B_COPY) {
			b++;
			continue;
		}
		uint32_t e = b;
		while (e < c->new.nblocks && classify(c, e) == B_COPY)
			c->new.bcsum[e] = c->old.bcsum[e], e++;
		int r = copy_run(c, (uint64_t)b * BS,
				 (uint64_t)(e - 1) * BS + block_len(c->new_len, e - 1));
		if (r < 0)
			return r;
		b = e;
	}
	return 0;
}

/* Fills the B_BUILD blocks in scratch: reads their old bytes (one batch),
 * verifies them, zero-pads, overlays the new bytes and checksums them. */
static int build_blocks(struct cow *c, const uint32_t *blocks, int n)
{
	struct uring_op ops[8];
	int nops = 0;
	for (int i = 0; i < n; i++) {
		uint32_t olen = block_len(c->old.data_len, blocks[i]);
		if (olen > 0)
			ops[nops++] =
			    (struct uring_op){.fd = c->oldfd,
					      .kind = URING_READ,
					      .iovcnt = 1,
					      .off = block_file_off(c->old.hdr_len, blocks[i]),
					      .iov = {{c->scratch + (size_t)i * BS, olen}}};
	}
	int r = uring_run(c->ring, ops, nops);
	if (r == -EIO)
		return report_corrupt(c->cs, c->ino, c->index, -1,
				      "chunk file shorter than its data");
	for (int i = 0; r == 0 && i < n; i++) {
		uint32_t b = blocks[i], olen = block_len(c->old.data_len, b);
		uint8_t *p = c->scratch + (size_t)i * BS;
		if (olen > 0 && (r = verify_block(c->cs, &c->old, b, p)) < 0)
			break;
		memset(p + olen, 0, BS - olen);
		uint64_t bs = (uint64_t)b * BS, be = bs + block_len(c->new_len, b);
		uint64_t wlo = STRATA_MAX((uint64_t)c->off, bs);
		uint64_t whi = STRATA_MIN((uint64_t)c->off + c->len, be);
		if (c->len > 0 && wlo < whi)
			memcpy(p + (wlo - bs), c->data + (wlo - c->off), whi - wlo);
		memset(p + (be - bs), 0, BS - (be - bs));
		c->new.bcsum[b] = block_sum(p, be - bs);
	}
	return r;
}

/* The blocks of a new version that are not copied. */
struct cow_plan {
	uint32_t build[8]; /* B_BUILD blocks (at most 3: the two edges of the
			    * written range and the old last block) */
	int nbuild;
	uint32_t d0, d1; /* B_DIRECT blocks d0..d1 (contiguous); d0 > d1 if none */
};

/* The checksum of direct block b (blen bytes, wholly from the caller's
 * buffer): the sum of the same bytes that came with the data, where the
 * data's pieces are this chunk's blocks (block-aligned offset, same length),
 * else hashed here. */
static uint64_t direct_sum(const struct cow *c, uint32_t b, uint32_t blen)
{
	uint64_t at = (uint64_t)b * BS - c->off;
	if (c->sums && c->off % BS == 0 && at % BS == 0 &&
	    STRATA_MIN((uint64_t)BS, c->len - at) == blen)
		return c->sums[at / BS];
	return block_sum(c->data + at, blen);
}

/* Classifies the blocks; checksums the direct ones (from the caller's
 * buffer) and the zero ones. */
static int cow_plan(struct cow *c, struct cow_plan *p)
{
	*p = (struct cow_plan){.d0 = 1, .d1 = 0};
	bool any_direct = false;
	for (uint32_t b = 0; b < c->new.nblocks; b++) {
		uint32_t blen = block_len(c->new_len, b);
		switch (classify(c, b)) {
		case B_DIRECT:
			if (!any_direct)
				p->d0 = b, any_direct = true;
			p->d1 = b;
			c->new.bcsum[b] = direct_sum(c, b, blen);
			break;
		case B_ZERO:
			c->new.bcsum[b] = block_sum(zero_block, blen);
			break;
		case B_BUILD:
			if (p->nbuild == (int)ARRAY_SIZE(p->build))
				return -EINVAL; /* cannot happen */
			p->build[p->nbuild++] = b;
			break;
		case B_COPY:
			break;
		}
	}
	return 0;
}

/* Writes the header, the direct run and the built blocks in one batch, on
 * this thread (buffered writes: io_uring would hand each to io-wq). */
static int cow_submit(struct cow *c, const struct cow_plan *p)
{
	struct uring_op ops[2 + ARRAY_SIZE(p->build)];
	int nops = 0;
	ops[nops++] = (struct uring_op){.fd = c->tmpfd,
					.kind = URING_WRITE,
					.iovcnt = 1,
					.off = 0,
					.iov = {{c->hdr_raw, c->new.hdr_len}}};
	if (p->d0 <= p->d1) {
		uint64_t s = (uint64_t)p->d0 * BS;
		uint64_t e = (uint64_t)p->d1 * BS + block_len(c->new_len, p->d1);
		ops[nops++] = (struct uring_op){.fd = c->tmpfd,
						.kind = URING_WRITE,
						.iovcnt = 1,
						.off = c->new.hdr_len + s,
						.iov = {{(void *)(c->data + (s - c->off)), e - s}}};
	}
	for (int i = 0; i < p->nbuild; i++)
		ops[nops++] = (struct uring_op){
		    .fd = c->tmpfd,
		    .kind = URING_WRITE,
		    .iovcnt = 1,
		    .off = block_file_off(c->new.hdr_len, p->build[i]),
		    .iov = {{c->scratch + (size_t)i * BS, block_len(c->new_len, p->build[i])}}};
	return uring_run_inline(ops, nops);
}

/* Produces every non-copied block and the header in the temp file. */
static int write_new(struct cow *c)
{
	struct cow_plan p;
	int r = cow_plan(c, &p);
	if (r < 0)
		return r;
	c->scratch = p.nbuild ? malloc((size_t)p.nbuild * BS) : NULL;
	if (p.nbuild && !c->scratch)
		return -ENOMEM;
	r = build_blocks(c, p.build, p.nbuild);
	if (r < 0)
		return r;
	c->hdr_raw = malloc(c->new.hdr_len);
	if (!c->hdr_raw)
		return -ENOMEM;
	hdr_encode(&c->new, c->hdr_raw);
	return cow_submit(c, &p);
}

static int fsync_path(int dirfd, const char *p)
{
	_cleanup_close_ int fd = openat(dirfd, p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return -errno;
	return 0;
}

/* Renames the finished temp file over the chunk, creating the inode
 * directory if needed (remove_file may rmdir it at any time). */
static int publish(struct cow *c, bool sync)
{
	char tp[64], cp[64], dp[64];
	tmp_path(tp, c->ino, c->index);
	chunk_path(cp, c->ino, c->index);
	chunk_dir_path(dp, c->ino);
	bool made_dir = false;
	for (int tries = 0;; tries++) {
		if (renameat(c->cs->dirfd, tp, c->cs->dirfd, cp) == 0)
			break;
		if (errno != ENOENT || tries == 3)
			return -errno;
		int r = mkdirat_ok(c->cs->dirfd, dp);
		if (r < 0)
			return r;
		made_dir = true;
	}
	if (!sync)
		return 0;
	int r = fsync_path(c->cs->dirfd, dp);
	if (r == 0 && made_dir) {
		char pp[16];
		snprintf(pp, sizeof(pp), "chunks/%02x", (unsigned)(c->ino & 0xff));
		r = fsync_path(c->cs->dirfd, pp);
	}
	return r;
}

/* Builds the new version in tmp/ and publishes it. c->old is loaded. */
static int cow_run(struct cow *c, unsigned flags, struct chunk_meta *ret)
{
	char tp[64];
	tmp_path(tp, c->ino, c->index);
	c->new = (struct chunk_hdr){.nblocks = nblocks_for(c->new_len),
				    .ino = c->ino,
				    .index = c->index,
				    .version = c->set_version ? c->set_version : c->old.version + 1,
				    .data_len = c->new_len};
	c->new.hdr_len = hdr_len_for(c->new.nblocks);
	c->new.bcsum = calloc(c->new.nblocks ? c->new.nblocks : 1, sizeof(uint64_t));
	if (!c->new.bcsum)
		return -ENOMEM;
	c->tmpfd = openat(c->cs->dirfd, tp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (c->tmpfd < 0)
		return -errno;
	int r = ftruncate(c->tmpfd, (off_t)c->new.hdr_len + c->new_len) < 0 ? -errno : 0;
	if (r == 0)
		r = copy_unchanged(c);
	if (r == 0)
		r = write_new(c);
	if (r == 0 && (flags & CHUNK_STORE_SYNC)) {
		struct uring_op op = {.fd = c->tmpfd, .kind = URING_FDATASYNC};
		r = uring_run(c->ring, &op, 1);
	}
	if (r == 0)
		r = publish(c, flags & CHUNK_STORE_SYNC);
	if (r < 0) {
		unlinkat(c->cs->dirfd, tp, 0);
		return r;
	}
	if (ret)
		*ret = (struct chunk_meta){c->new.version, c->new.data_len, c->new.checksum};
	return 0;
}

static void cow_done(struct cow *c)
{
	if (c->oldfd >= 0)
		close(c->oldfd);
	if (c->tmpfd >= 0)
		close(c->tmpfd);
	chunk_hdr_done(&c->old);
	chunk_hdr_done(&c->new);
	free(c->scratch);
	free(c->hdr_raw);
}

/* Opens and loads the current version, if any, into c. */
static int cow_load_old(struct cow *c)
{
	c->oldfd = chunk_open(c->cs, c->ino, c->index);
	if (c->oldfd == -ENOENT) {
		c->oldfd = -1;
		return 0;
	}
	if (c->oldfd < 0)
		return c->oldfd;
	c->have_old = true;
	return hdr_load(c->cs, c->ring, c->oldfd, c->ino, c->index, &c->old);
}

int chunk_store_write(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t off,
		      uint32_t len, const void *data, unsigned flags, struct chunk_meta *ret)
{
	return chunk_store_write_sums(cs, ino, index, off, len, data, NULL, flags, ret);
}

int chunk_store_write_sums(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t off,
			   uint32_t len, const void *data, const uint64_t *sums, unsigned flags,
			   struct chunk_meta *ret)
{
	if ((uint64_t)off + len > CHUNK_STORE_MAX_LEN)
		return -EFBIG;
	if (len == 0) { /* like write(2): nothing changes, not even the length */
		int r = chunk_store_stat(cs, ino, index, ret ? ret : &(struct chunk_meta){0});
		if (r == -ENOENT && ret)
			*ret = (struct chunk_meta){0};
		return r == -ENOENT ? 0 : r;
	}
	_cleanup_unlock_ pthread_mutex_t *m = lock_chunk(cs, ino, index);
	RING_GUARD(g, cs);
	_cleanup_(cow_done) struct cow c = {.cs = cs,
					    .ring = g.ring,
					    .ino = ino,
					    .index = index,
					    .off = off,
					    .len = len,
					    .data = data,
					    .sums = sums,
					    .oldfd = -1,
					    .tmpfd = -1};
	int r = cow_load_old(&c);
	if (r < 0)
		return r;
	c.new_len = (uint32_t)STRATA_MAX((uint64_t)c.old.data_len, (uint64_t)off + len);
	return cow_run(&c, flags, ret);
}

int chunk_store_truncate(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t len,
			 struct chunk_meta *ret)
{
	if (len > CHUNK_STORE_MAX_LEN)
		return -EFBIG;
	_cleanup_unlock_ pthread_mutex_t *m = lock_chunk(cs, ino, index);
	RING_GUARD(g, cs);
	_cleanup_(cow_done) struct cow c = {
	    .cs = cs, .ring = g.ring, .ino = ino, .index = index, .oldfd = -1, .tmpfd = -1};
	int r = cow_load_old(&c);
	if (r < 0)
		return r;
	if (!c.have_old || c.old.data_len == len) {
		if (ret)
			*ret = (struct chunk_meta){c.old.version, c.old.data_len, c.old.checksum};
		return 0;
	}
	c.new_len = len;
	return cow_run(&c, 0, ret);
}

/* ---- remove, sync, space ----------------------------------------------- */

int chunk_store_remove(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	char p[64];
	chunk_path(p, ino, index);
	_cleanup_unlock_ pthread_mutex_t *m = lock_chunk(cs, ino, index);
	if (unlinkat(cs->dirfd, p, 0) == 0)
		return 1;
	return errno == ENOENT ? 0 : -errno;
}

/* Parses an 8-hex-digit chunk file name. */
static bool parse_index(const char *name, uint32_t *ret)
{
	if (strlen(name) != 8)
		return false;
	uint32_t v = 0;
	for (int i = 0; i < 8; i++) {
		char ch = name[i];
		int d = ch >= '0' && ch <= '9'	 ? ch - '0'
			: ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
						 : -1;
		if (d < 0)
			return false;
		v = v << 4 | (uint32_t)d;
	}
	*ret = v;
	return true;
}

/* Lists the chunk indexes >= first of ino into a heap array. */
static int list_chunks(struct chunk_store *cs, uint64_t ino, uint32_t first, uint32_t **ret,
		       size_t *ret_n)
{
	char dp[64];
	chunk_dir_path(dp, ino);
	int fd = openat(cs->dirfd, dp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	uint32_t *v = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	struct dirent *de;
	uint32_t idx;
	while ((de = readdir(d))) {
		if (!parse_index(de->d_name, &idx) || idx < first)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			uint32_t *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[n++] = idx;
	}
	closedir(d);
	if (r < 0) {
		free(v);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int chunk_store_remove_file(struct chunk_store *cs, uint64_t ino, uint32_t first_index)
{
	_cleanup_free_ uint32_t *idx = NULL;
	size_t n = 0;
	int r = list_chunks(cs, ino, first_index, &idx, &n);
	if (r < 0)
		return r;
	int removed = 0;
	for (size_t i = 0; i < n; i++) {
		r = chunk_store_remove(cs, ino, idx[i]);
		if (r < 0)
			return r;
		removed += r;
	}
	if (first_index == 0) {
		char dp[64];
		chunk_dir_path(dp, ino);
		unlinkat(cs->dirfd, dp, AT_REMOVEDIR); /* ENOTEMPTY: a racing writer; fine */
	}
	return removed;
}

int chunk_store_sync(struct chunk_store *cs)
{
	return syncfs(cs->dirfd) < 0 ? -errno : 0;
}

int chunk_store_space(struct chunk_store *cs, uint64_t *ret_total, uint64_t *ret_free)
{
	struct statvfs st;
	if (fstatvfs(cs->dirfd, &st) < 0)
		return -errno;
	*ret_total = (uint64_t)st.f_blocks * st.f_frsize;
	*ret_free = (uint64_t)st.f_bavail * st.f_frsize;
	return 0;
}

/* ---- resync: replace wholesale, list ------------------------------------ */

int chunk_store_list_ino(struct chunk_store *cs, uint64_t ino, uint32_t first_index, uint32_t **ret,
			 size_t *ret_n)
{
	*ret = NULL;
	*ret_n = 0;
	return list_chunks(cs, ino, first_index, ret, ret_n);
}

void chunk_store_rmdir_ino(struct chunk_store *cs, uint64_t ino)
{
	char dp[64];
	chunk_dir_path(dp, ino);
	unlinkat(cs->dirfd, dp, AT_REMOVEDIR); /* ENOTEMPTY: a racing writer; fine */
}

int chunk_store_put(struct chunk_store *cs, uint64_t ino, uint32_t index, const void *data,
		    uint32_t len, uint64_t version, struct chunk_meta *ret)
{
	if (len > CHUNK_STORE_MAX_LEN)
		return -EFBIG;
	if (version == 0)
		return -EINVAL;
	_cleanup_unlock_ pthread_mutex_t *m = lock_chunk(cs, ino, index);
	RING_GUARD(g, cs);
	/* No old version is loaded: every block comes from data (or is a hole
	 * when len is 0), so a damaged old chunk is simply replaced. */
	_cleanup_(cow_done) struct cow c = {.cs = cs,
					    .ring = g.ring,
					    .ino = ino,
					    .index = index,
					    .off = 0,
					    .len = len,
					    .new_len = len,
					    .data = data,
					    .oldfd = -1,
					    .tmpfd = -1,
					    .set_version = version};
	return cow_run(&c, 0, ret);
}

/* Appends every chunk index of directory dp (inode ino) to *v. */
static int list_ino_dir(struct chunk_store *cs, uint64_t ino, struct chunk_key **v, size_t *n,
			size_t *cap)
{
	uint32_t *idx = NULL;
	size_t ni = 0;
	int r = list_chunks(cs, ino, 0, &idx, &ni);
	for (size_t i = 0; r == 0 && i < ni; i++) {
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 256;
			struct chunk_key *nv = realloc(*v, nc * sizeof(**v));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			*v = nv;
			*cap = nc;
		}
		(*v)[(*n)++] = (struct chunk_key){ino, idx[i]};
	}
	free(idx);
	return r;
}

static bool parse_ino(const char *name, uint64_t *ret)
{
	if (strlen(name) != 16)
		return false;
	char *end;
	*ret = strtoull(name, &end, 16);
	return *end == 0;
}

static int cmp_key(const void *a, const void *b)
{
	const struct chunk_key *x = a, *y = b;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

int chunk_store_list(struct chunk_store *cs, struct chunk_key **ret, size_t *ret_n)
{
	struct chunk_key *v = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	for (int d = 0; d < 256 && r == 0; d++) {
		char dp[16];
		snprintf(dp, sizeof(dp), "chunks/%02x", d);
		int fd = openat(cs->dirfd, dp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		DIR *dir = fdopendir(fd);
		if (!dir) {
			close(fd);
			r = -errno;
			break;
		}
		struct dirent *de;
		uint64_t ino;
		while (r == 0 && (de = readdir(dir)))
			if (parse_ino(de->d_name, &ino))
				r = list_ino_dir(cs, ino, &v, &n, &cap);
		closedir(dir);
	}
	if (r < 0) {
		free(v);
		return r;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_key);
	*ret = v;
	*ret_n = n;
	return 0;
}

/* ---- resync: a chunk in pieces (chunk_store.h) -------------------------- */
/* The staging file tmp/<ino>.<index>.put has the final chunk's layout; until
 * the last piece its first 64 bytes hold the transfer's state (below), and
 * the block checksums of the pieces received so far are already in place
 * (64 + 8 b). Every call holds the chunk's stripe lock (invariant 4), so a
 * piece, a write and a publish of one chunk never overlap. */
#define STG_MAGIC 0x54555053u /* "SPUT": never a valid chunk header */
#define STG_FIXED 64

static void stage_path(char out[64], uint64_t ino, uint32_t index)
{
	snprintf(out, 64, "tmp/%016llx.%08x.put", (unsigned long long)ino, index);
}

/* Positioned I/O of all len bytes (a short write is -ENOSPC, a short read
 * -EIO: the staging file ends early). */
static int pio_all(int fd, void *buf, size_t len, uint64_t off, bool is_write)
{
	uint8_t *p = buf;
	while (len > 0) {
		ssize_t n =
		    is_write ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : is_write ? -ENOSPC : -EIO;
		p += n, len -= (size_t)n, off += (uint64_t)n;
	}
	return 0;
}

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	return pio_all(fd, (void *)buf, len, off, true);
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	return pio_all(fd, buf, len, off, false);
}

static void stage_state_encode(uint8_t raw[STG_FIXED], const struct chunk_put_piece *p,
			       uint32_t next)
{
	memset(raw, 0, STG_FIXED);
	le32_put(raw + 0, STG_MAGIC);
	le16_put(raw + 4, CHDR_FORMAT);
	le64_put(raw + 8, p->version);
	le64_put(raw + 16, p->tag);
	le32_put(raw + 24, p->total);
	le32_put(raw + 28, next);
}

/* Opens the staging file for piece p: a new one for a first piece, else the
 * existing one if it belongs to p's transfer and p is its next piece. */
static int stage_open(struct chunk_store *cs, const char *sp, const struct chunk_put_piece *p,
		      uint32_t hdr_len)
{
	if (p->flags & CHUNK_PUT_FIRST) {
		int fd = openat(cs->dirfd, sp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		if (ftruncate(fd, (off_t)hdr_len + p->total) < 0) {
			int r = -errno;
			close(fd);
			return r;
		}
		return fd;
	}
	int fd = openat(cs->dirfd, sp, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESTALE : -errno;
	uint8_t raw[STG_FIXED];
	int r = pread_all(fd, raw, sizeof(raw), 0);
	if (r == 0 && (le32_get(raw) != STG_MAGIC || le64_get(raw + 8) != p->version ||
		       le64_get(raw + 16) != p->tag || le32_get(raw + 24) != p->total ||
		       le32_get(raw + 28) != p->off))
		r = -ESTALE;
	if (r < 0) {
		close(fd);
		return r == -EIO ? -ESTALE : r;
	}
	return fd;
}

/* The last piece is in: reads every block back and checks it against its
 * checksum, checks the chunk checksum against the source's, writes the
 * header over the transfer state and renames the file over the chunk. */
static int stage_publish(struct chunk_store *cs, int fd, const char *sp, uint64_t ino,
			 uint32_t index, const struct chunk_put_piece *p, struct chunk_meta *ret)
{
	struct chunk_hdr h = {.nblocks = nblocks_for(p->total),
			      .ino = ino,
			      .index = index,
			      .version = p->version,
			      .data_len = p->total};
	h.hdr_len = hdr_len_for(h.nblocks);
	_cleanup_free_ uint64_t *sums = malloc(sizeof(uint64_t) * (h.nblocks ? h.nblocks : 1));
	_cleanup_free_ uint8_t *raw = malloc(h.hdr_len);
	_cleanup_free_ uint8_t *buf = malloc(16 * BS);
	if (!sums || !raw || !buf)
		return -ENOMEM;
	int r = pread_all(fd, raw, h.hdr_len, 0);
	for (uint32_t b = 0; r == 0 && b < h.nblocks; b++)
		sums[b] = le64_get(raw + CHDR_FIXED + 8 * b);
	for (uint32_t b0 = 0; r == 0 && b0 < h.nblocks; b0 += 16) {
		uint64_t s = (uint64_t)b0 * BS, e = STRATA_MIN(s + 16 * BS, (uint64_t)p->total);
		r = pread_all(fd, buf, e - s, h.hdr_len + s);
		for (uint32_t b = b0; r == 0 && b < h.nblocks && b < b0 + 16; b++)
			if (block_sum(buf + (uint64_t)(b - b0) * BS, block_len(p->total, b)) !=
			    sums[b])
				r = -EIO;
	}
	if (r < 0)
		return r;
	h.bcsum = sums;
	hdr_encode(&h, raw);
	if (h.checksum != p->checksum)
		return -EIO;
	r = pwrite_all(fd, raw, h.hdr_len, 0);
	if (r < 0)
		return r;
	char cp[64], dp[64];
	chunk_path(cp, ino, index);
	chunk_dir_path(dp, ino);
	for (int tries = 0;; tries++) {
		if (renameat(cs->dirfd, sp, cs->dirfd, cp) == 0)
			break;
		if (errno != ENOENT || tries == 3)
			return -errno;
		if ((r = mkdirat_ok(cs->dirfd, dp)) < 0)
			return r;
	}
	if (ret)
		*ret = (struct chunk_meta){h.version, h.data_len, h.checksum};
	return 0;
}

static int piece_check(const struct chunk_put_piece *p)
{
	uint64_t end = (uint64_t)p->off + p->len;
	if (p->total > CHUNK_STORE_MAX_LEN)
		return -EFBIG;
	if (p->version == 0 || p->off % BS || end > p->total || (p->len && !p->data))
		return -EINVAL;
	if ((p->flags & CHUNK_PUT_FIRST) && p->off != 0)
		return -EINVAL;
	if (p->flags & CHUNK_PUT_LAST)
		return end == p->total ? 0 : -EINVAL;
	return p->len > 0 && p->len % BS == 0 && end < p->total ? 0 : -EINVAL;
}

int chunk_store_put_piece(struct chunk_store *cs, uint64_t ino, uint32_t index,
			  const struct chunk_put_piece *p, struct chunk_meta *ret)
{
	if (ret)
		*ret = (struct chunk_meta){0};
	int r = piece_check(p);
	if (r < 0)
		return r;
	char sp[64];
	stage_path(sp, ino, index);
	uint32_t nb = nblocks_for(p->len), hdr_len = hdr_len_for(nblocks_for(p->total));
	_cleanup_unlock_ pthread_mutex_t *m = lock_chunk(cs, ino, index);
	_cleanup_close_ int fd = stage_open(cs, sp, p, hdr_len);
	if (fd < 0)
		return fd; /* -ESTALE: someone else's staging file, left alone */
	_cleanup_free_ uint8_t *sums = malloc(8 * (size_t)(nb ? nb : 1));
	if (!sums)
		r = -ENOMEM;
	for (uint32_t i = 0; r == 0 && i < nb; i++) {
		uint32_t bl = STRATA_MIN(BS, p->len - i * BS);
		le64_put(sums + 8 * i,
			 p->sums ? p->sums[i]
				 : block_sum((const uint8_t *)p->data + (size_t)i * BS, bl));
	}
	if (r == 0)
		r = pwrite_all(fd, p->data, p->len, (uint64_t)hdr_len + p->off);
	if (r == 0)
		r = pwrite_all(fd, sums, 8 * (size_t)nb, CHDR_FIXED + 8 * (uint64_t)(p->off / BS));
	if (r == 0 && !(p->flags & CHUNK_PUT_LAST)) {
		uint8_t st[STG_FIXED];
		stage_state_encode(st, p, p->off + p->len);
		r = pwrite_all(fd, st, sizeof(st), 0);
	}
	if (r == 0 && (p->flags & CHUNK_PUT_LAST))
		r = stage_publish(cs, fd, sp, ino, index, p, ret);
	if (r < 0)
		unlinkat(cs->dirfd, sp, 0);
	return r;
}

int chunk_store_put_expire(struct chunk_store *cs, int max_age_s)
{
	DIR *d = open_tmp_dir(cs->dirfd);
	if (!d)
		return -errno;
	int fd = dirfd(d), n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		unsigned long long ino;
		unsigned index;
		char tail[8], sp[64];
		if (sscanf(de->d_name, "%16llx.%8x.%3s", &ino, &index, tail) != 3 ||
		    strcmp(tail, "put") != 0)
			continue;
		stage_path(sp, ino, index);
		if (strcmp(sp + 4, de->d_name) != 0)
			continue;
		pthread_mutex_t *m = lock_chunk(cs, ino, index);
		struct stat st;
		if (fstatat(fd, de->d_name, &st, 0) == 0 && st.st_mtime + max_age_s <= time(NULL) &&
		    unlinkat(fd, de->d_name, 0) == 0)
			n++;
		pthread_mutex_unlock(m);
	}
	closedir(d);
	return n;
}
