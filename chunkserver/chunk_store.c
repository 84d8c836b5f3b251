/* chunk_store.c — the chunk engine: one target directory on a local disk.
 *
 * Layout of a target:
 *   <target>/LOCK                          flock'd by the owning process
 *   <target>/format                        the target's chunk format (2)
 *   <target>/journal                       write-ahead journal (chunk_journal.c)
 *   <target>/chunks/<ino%256 %02x>/<ino %016x>/<index %08x>   one file per chunk
 *   <target>/tmp/<ino %016x>.<index %08x>  a chunk being made as a new file
 *   <target>/tmp/<ino %016x>.<index %08x>.put  a chunk being put in pieces (resync)
 *   <target>/target.id                     identity record (chunkserver/target_id.c)
 *
 * A chunk file (format 2, chunk_format.c; README.md "Chunk file format") is
 * two header slots followed by the data: each slot holds the version, the
 * length, one XXH3-64 per 64 KiB block and a checksum over itself; the
 * current header is the valid slot with the higher version.
 *
 * A write or truncate takes one of two paths (write_path):
 *  - a new file built in tmp/ and renamed over the chunk (chunk_cow.c): a
 *    new chunk, a write replacing all of the data, a resync's put, a
 *    format-1 chunk (converted), a write too large for the journal;
 *  - in place (chunk_inplace.c): bytes past the end written straight, bytes
 *    over existing data journaled first; then the new header in the other
 *    slot. Either costs the bytes written (and 8 bytes of header per 64 KiB
 *    block of the chunk), not the chunk.
 *
 * Invariants:
 *  1. Atomicity. A chunk's current header describes one complete version:
 *     a new file is renamed in whole; an in-place update writes only bytes
 *     past the current length (which no header covers) or bytes whose new
 *     values are in a complete journal record, before it writes the slot
 *     that is not current; a torn slot fails its checksum and the other one
 *     stays current. So a crash leaves the old version, the new one, or the
 *     old header with a complete journal record that the next open finishes
 *     (invariant 7). Readers hold the chunk's view lock shared while they
 *     read its header and data; in-place overwrites and every slot write
 *     hold it exclusively, so a read sees one version.
 *  2. Every byte a read returns was verified against its block checksum
 *     from the same open file and header; a mismatch is -EIO plus one
 *     corruption report, never wrong bytes.
 *  3. A block a write leaves is kept with its old checksum (in place, or
 *     copy_file_range into a new file); a block that is partly rewritten is
 *     read and verified first, so corruption is never laundered into a
 *     fresh checksum.
 *  4. Writers of one chunk are serialised by a striped mutex (stripe =
 *     hash(ino, index)), held from loading the old header to the commit.
 *  5. Files in tmp/ belong to a writer holding the chunk's stripe lock, or
 *     (tmp/<ino>.<index>.put) to a transfer of a chunk in pieces, touched
 *     only under that lock, until its last piece publishes it, a failed
 *     piece or the next first piece of the chunk drops it, or the expiry
 *     does (its sender went away); at open (before any writer exists) every
 *     file in tmp/ is a crash leftover and is deleted. A failed write
 *     (-ENOSPC, -EIO) before its commit leaves the old chunk readable: a new
 *     file is deleted; bytes an append left past the end are cut by the next
 *     update that grows the chunk; an overwrite reserves its range (and the
 *     slot) with fallocate before its journal record, so the in-place
 *     writes after it do not run out of space.
 *  6. Durability: nothing is synced unless asked. CHUNK_STORE_SYNC makes
 *     the write durable before it returns: a new file fdatasync'd before
 *     its rename and the directory after it; an append fdatasync'd before
 *     and after its slot; an overwrite's journal record fdatasync'd (its
 *     in-place bytes are durable by the checkpoint that drops the record,
 *     J2 in chunk_journal.c). chunk_store_sync() is syncfs() of the target.
 *     After a power loss an un-synced write may be lost or fail its
 *     checksum: detected as -EIO, never served.
 *  7. At open, before any writer, the journal's last record of each chunk is
 *     finished where the chunk's current header is the one it was written
 *     against (same incarnation, version one below): its bytes rewritten,
 *     the new header committed, the file fdatasync'd; then the journal
 *     starts a new generation. A chunk file's incarnation is chosen when the
 *     file is made, so a record never lands on a chunk that was removed,
 *     put or rewritten as a new file since.
 *  8. A chunk file kept open with its header (chunk_open_cache.c) is still
 *     the chunk's current file: every rename over a chunk, removal and
 *     in-place header change drops the entry and bumps the stripe's
 *     generation, and a loaded file is cached only if the generation did
 *     not move between its open and its insertion.
 *
 * Reads touch only the 64 KiB blocks the range overlaps (one preadv on the
 * calling worker, or io_uring on a ring borrowed from the uring_pool when
 * the range needs several), and blocks wholly covered by a read move
 * straight into the caller's buffer. */
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
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "chunkserver/chunk_journal.h"
#include "chunkserver/chunk_store-internal.h"
#include "chunkserver/uring_pool.h"
#include "fs/cleanup.h"
#include "fs/wire.h"

#define BS CHUNK_BLOCK_SIZE
#define FORMAT_MAGIC 0x544d4653u /* "SFMT" */
#define FORMAT_LEN 32
#define TARGET_FORMAT CHUNK_FORMAT_V2

int cs_report_corrupt(struct chunk_store *cs, uint64_t ino, uint32_t index, int64_t block,
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

int cs_hdr_load(struct chunk_store *cs, int fd, uint64_t ino, uint32_t index, struct chunk_hdr *ret)
{
	const char *why = "bad header";
	int r = chunk_hdr_read(fd, ino, index, false, ret, &why);
	return r == -EIO ? cs_report_corrupt(cs, ino, index, -1, why) : r;
}

int cs_verify_block(struct chunk_store *cs, const struct chunk_hdr *h, uint32_t b, const void *p)
{
	if (chunk_block_sum(p, chunk_block_len(h->data_len, b)) == h->bcsum[b])
		return 0;
	return cs_report_corrupt(cs, h->ino, h->index, b, "block checksum mismatch");
}

uint64_t cs_new_incarnation(struct chunk_store *cs)
{
	uint64_t z = cs->inc_base +
		     __atomic_add_fetch(&cs->inc_next, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; /* splitmix64 */
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return z ? z : 1;
}

/* ---- paths and locks --------------------------------------------------- */

void cs_chunk_dir_path(char out[64], uint64_t ino)
{
	snprintf(out, 64, "chunks/%02x/%016llx", (unsigned)(ino & 0xff), (unsigned long long)ino);
}

void cs_chunk_path(char out[64], uint64_t ino, uint32_t index)
{
	snprintf(out, 64, "chunks/%02x/%016llx/%08x", (unsigned)(ino & 0xff),
		 (unsigned long long)ino, index);
}

void cs_tmp_path(char out[64], uint64_t ino, uint32_t index)
{
	snprintf(out, 64, "tmp/%016llx.%08x", (unsigned long long)ino, index);
}

unsigned cs_stripe_of(uint64_t ino, uint32_t index)
{
	uint64_t h = (ino * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)index * 0xC2B2AE3D27D4EB4Full);
	return (unsigned)((h >> 32) % CS_NSTRIPES);
}

void cs_unlockp(pthread_mutex_t **m)
{
	if (*m)
		pthread_mutex_unlock(*m);
}
#define _cleanup_unlock_ _cleanup_(cs_unlockp) __attribute__((unused))

pthread_mutex_t *cs_lock_chunk(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	pthread_mutex_t *m = &cs->stripes[cs_stripe_of(ino, index)];
	pthread_mutex_lock(m);
	return m;
}

pthread_rwlock_t *cs_view(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	return &cs->views[cs_stripe_of(ino, index)];
}

static void unlock_viewp(pthread_rwlock_t **l)
{
	if (*l)
		pthread_rwlock_unlock(*l);
}

static pthread_rwlock_t *read_view(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	pthread_rwlock_t *l = cs_view(cs, ino, index);
	pthread_rwlock_rdlock(l);
	return l;
}
#define READ_VIEW(name, cs, ino, index)                                                            \
	_cleanup_(unlock_viewp) __attribute__((unused)) pthread_rwlock_t *name =                   \
	    read_view(cs, ino, index)

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

int cs_chunk_open(struct chunk_store *cs, uint64_t ino, uint32_t index, bool rw)
{
	char p[64];
	cs_chunk_path(p, ino, index);
	int fd = openat(cs->dirfd, p, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int cs_mkdirat_ok(int dirfd, const char *p)
{
	return mkdirat(dirfd, p, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static int fsync_path(int dirfd, const char *p)
{
	_cleanup_close_ int fd = openat(dirfd, p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return -errno;
	return 0;
}

int cs_publish(struct chunk_store *cs, const char *tmp, uint64_t ino, uint32_t index, bool sync)
{
	char cp[64], dp[64];
	cs_chunk_path(cp, ino, index);
	cs_chunk_dir_path(dp, ino);
	bool made_dir = false;
	chunk_io_step(&cs->fault);
	for (int tries = 0;; tries++) {
		if (renameat(cs->dirfd, tmp, cs->dirfd, cp) == 0) {
			cs_chunk_changed(cs, ino, index);
			break;
		}
		if (errno != ENOENT || tries == 3)
			return -errno;
		int r = cs_mkdirat_ok(cs->dirfd, dp);
		if (r < 0)
			return r;
		made_dir = true;
	}
	if (!sync)
		return 0;
	int r = fsync_path(cs->dirfd, dp);
	if (r == 0 && made_dir) {
		char pp[16];
		snprintf(pp, sizeof(pp), "chunks/%02x", (unsigned)(ino & 0xff));
		r = fsync_path(cs->dirfd, pp);
	}
	return r;
}

/* ---- open / close ------------------------------------------------------ */

static int make_dirs(int dirfd)
{
	int r = cs_mkdirat_ok(dirfd, "chunks");
	if (r == 0)
		r = cs_mkdirat_ok(dirfd, "tmp");
	for (int i = 0; r == 0 && i < 256; i++) {
		char p[32];
		snprintf(p, sizeof(p), "chunks/%02x", i);
		r = cs_mkdirat_ok(dirfd, p);
	}
	return r;
}

/* Deletes every file in tmp/ (invariant 5). */
static int clean_tmp(int target_fd)
{
	int fd = openat(target_fd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		int e = -errno;
		if (fd >= 0)
			close(fd);
		return e;
	}
	int r = 0;
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

/* <target>/format: magic "SFMT", version 1, length 32, the chunk format,
 * XXH3-64 of bytes 0..23 at 24. A target without one holds format-1 chunks
 * (or none): they are read as they are and converted when written, and the
 * record is written. A newer format is refused (-EPROTONOSUPPORT), a
 * damaged record is -EBADMSG. */
static int format_check(int dirfd)
{
	uint8_t raw[FORMAT_LEN];
	_cleanup_close_ int fd = openat(dirfd, "format", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (chunk_io_pread(fd, raw, sizeof(raw), 0) < 0 || le32_get(raw) != FORMAT_MAGIC ||
		    le32_get(raw + 8) != FORMAT_LEN || le64_get(raw + 24) != XXH3_64bits(raw, 24))
			return -EBADMSG;
		return le32_get(raw + 12) > TARGET_FORMAT ? -EPROTONOSUPPORT : 0;
	}
	if (errno != ENOENT)
		return -errno;
	memset(raw, 0, sizeof(raw));
	le32_put(raw, FORMAT_MAGIC);
	le16_put(raw + 4, 1);
	le32_put(raw + 8, FORMAT_LEN);
	le32_put(raw + 12, TARGET_FORMAT);
	le64_put(raw + 24, XXH3_64bits(raw, 24));
	_cleanup_close_ int tfd =
	    openat(dirfd, "format.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (tfd < 0)
		return -errno;
	int r = chunk_io_pwrite(NULL, tfd, raw, sizeof(raw), 0);
	if (r == 0 && (fsync(tfd) < 0 || renameat(dirfd, "format.tmp", dirfd, "format") < 0 ||
		       fsync(dirfd) < 0))
		r = -errno;
	return r;
}

/* Invariant 7, for one record. */
static int replay_one(void *arg, const struct chunk_jrec *r)
{
	struct chunk_store *cs = arg;
	_cleanup_close_ int fd = cs_chunk_open(cs, r->ino, r->index, true);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	_cleanup_(chunk_hdr_done) struct chunk_hdr h = {0};
	const char *why;
	int e = chunk_hdr_read(fd, r->ino, r->index, true, &h, &why);
	if (e == -EIO)
		return 0; /* damaged: reads say so, a resync repairs it */
	if (e < 0)
		return e;
	e = chunk_inplace_redo(cs, fd, &h, r);
	return e < 0 ? e : 0;
}

static int open_journal(struct chunk_store *cs)
{
	int r = chunk_journal_open(cs->dirfd, &cs->fault, &cs->journal);
	if (r == 0)
		r = chunk_journal_replay(cs->journal, replay_one, cs);
	if (r >= 0)
		r = chunk_journal_reset(cs->journal);
	return r;
}

void chunk_store_free(struct chunk_store *cs)
{
	if (!cs)
		return;
	chunk_journal_free(cs->journal);
	cs_open_cache_free(cs);
	for (int i = 0; i < CS_NSTRIPES; i++) {
		pthread_mutex_destroy(&cs->stripes[i]);
		pthread_rwlock_destroy(&cs->views[i]);
	}
	if (cs->lockfd >= 0)
		close(cs->lockfd);
	if (cs->dirfd >= 0)
		close(cs->dirfd);
	free(cs->path);
	free(cs);
}

static struct chunk_store *store_new(struct uring_pool *pool, const struct chunk_store_opts *opts)
{
	struct chunk_store *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return NULL;
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	/* an update waits for the reads under way, not for every later one */
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	for (int i = 0; i < CS_NSTRIPES; i++) {
		pthread_mutex_init(&cs->stripes[i], NULL);
		pthread_rwlock_init(&cs->views[i], &a);
	}
	pthread_rwlockattr_destroy(&a);
	cs->lockfd = cs->dirfd = -1;
	cs->pool = pool;
	if (opts)
		cs->opts = *opts;
	if (getrandom(&cs->inc_base, sizeof(cs->inc_base), 0) != sizeof(cs->inc_base))
		cs->inc_base = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	if (cs_open_cache_init(cs) < 0) {
		chunk_store_free(cs);
		return NULL;
	}
	return cs;
}

int chunk_store_open(const char *path, struct uring_pool *pool, const struct chunk_store_opts *opts,
		     struct chunk_store **ret)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	struct chunk_store *cs = store_new(pool, opts);
	if (!cs)
		return -ENOMEM;
	cs->path = strdup(path);
	cs->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = !cs->path ? -ENOMEM : cs->dirfd < 0 ? -errno : 0;
	if (r == 0)
		r = cs->lockfd = lock_target(cs->dirfd);
	if (r >= 0)
		r = format_check(cs->dirfd);
	if (r >= 0)
		r = make_dirs(cs->dirfd);
	if (r >= 0)
		r = clean_tmp(cs->dirfd);
	if (r >= 0)
		r = open_journal(cs);
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

void chunk_store_fault_after(struct chunk_store *cs, int steps)
{
	__atomic_store_n(&cs->fault.countdown, steps, __ATOMIC_RELEASE);
}

/* ---- read -------------------------------------------------------------- */

static bool covers(uint64_t lo, uint64_t hi, uint64_t bstart, uint64_t bend)
{
	return lo <= bstart && hi >= bend;
}

static struct uring_op read_op(int fd, const struct chunk_hdr *h, uint32_t b, void *buf, size_t len)
{
	return (struct uring_op){.fd = fd,
				 .kind = URING_READ,
				 .iovcnt = 1,
				 .off = h->data_off + (uint64_t)b * BS,
				 .iov = {{buf, len}}};
}

/* A thread's scratch for the partial first and last blocks of a read: kept,
 * not malloc'd per read (2 x 64 KiB is at glibc's mmap threshold). */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void scratch_key_make(void)
{
	pthread_key_create(&scratch_key, free);
}
static uint8_t *read_scratch(void)
{
	pthread_once(&scratch_once, scratch_key_make);
	uint8_t *p = pthread_getspecific(scratch_key);
	if (!p && (p = malloc(2 * BS)) && pthread_setspecific(scratch_key, p) != 0) {
		free(p);
		p = NULL;
	}
	return p;
}

/* One read runs on the calling thread (a worker: blocking is its job, and a
 * ring would hand a buffered read that misses the page cache to an io-wq
 * thread anyway); several run together on a borrowed ring. */
static int run_reads(struct chunk_store *cs, struct uring_op *ops, int nops)
{
	if (nops == 1)
		return uring_run_inline(ops, nops);
	RING_GUARD(g, cs);
	return uring_run(g.ring, ops, nops);
}

/* Reads [off, off+n) (within data_len, n > 0) into buf: whole blocks straight
 * into buf, the partial first/last block into scratch; verifies every touched
 * block. */
static int read_range(struct chunk_store *cs, int fd, const struct chunk_hdr *h, uint32_t off,
		      uint32_t n, uint8_t *buf)
{
	uint64_t end = (uint64_t)off + n;
	uint32_t b0 = off / BS, b1 = (uint32_t)((end - 1) / BS);
	uint64_t b0s = (uint64_t)b0 * BS, b1s = (uint64_t)b1 * BS;
	bool head_part = !covers(off, end, b0s, b0s + chunk_block_len(h->data_len, b0));
	bool tail_part = b1 != b0 && !covers(off, end, b1s, b1s + chunk_block_len(h->data_len, b1));
	uint8_t *scratch = NULL;
	if ((head_part || tail_part) && !(scratch = read_scratch()))
		return -ENOMEM;
	uint8_t *head = scratch, *tail = scratch ? scratch + BS : NULL;
	struct uring_op ops[3];
	int nops = 0;
	if (head_part)
		ops[nops++] = read_op(fd, h, b0, head, chunk_block_len(h->data_len, b0));
	uint32_t m0 = b0 + head_part, m1 = b1 - tail_part; /* whole blocks m0..m1 */
	if (m0 <= m1 && !(head_part && b0 == b1)) {
		uint64_t ms = (uint64_t)m0 * BS,
			 me = (uint64_t)m1 * BS + chunk_block_len(h->data_len, m1);
		ops[nops++] = read_op(fd, h, m0, buf + (ms - off), me - ms);
	}
	if (tail_part)
		ops[nops++] = read_op(fd, h, b1, tail, chunk_block_len(h->data_len, b1));
	int r = run_reads(cs, ops, nops);
	if (r == -EIO)
		return cs_report_corrupt(cs, h->ino, h->index, -1,
					 "chunk file shorter than its data");
	if (r < 0)
		return r;
	for (uint32_t b = b0; b <= b1; b++) {
		const uint8_t *p = b == b0 && head_part	  ? head
				   : b == b1 && tail_part ? tail
							  : buf + ((uint64_t)b * BS - off);
		r = cs_verify_block(cs, h, b, p);
		if (r < 0)
			return r;
	}
	if (head_part)
		memcpy(buf, head + (off - b0s), STRATA_MIN(end, b0s + BS) - off);
	if (tail_part)
		memcpy(buf + (b1s - off), tail, end - b1s);
	return 0;
}

static void open_putp(struct chunk_open **o)
{
	cs_open_put(*o);
}
#define _cleanup_open_put_ _cleanup_(open_putp)

ssize_t chunk_store_read(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t off,
			 uint32_t len, void *buf)
{
	READ_VIEW(view, cs, ino, index);
	_cleanup_open_put_ struct chunk_open *o = NULL;
	int r = cs_open_get(cs, ino, index, &o);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	if (off >= o->h.data_len || len == 0)
		return 0;
	uint32_t n = (uint32_t)STRATA_MIN((uint64_t)len, (uint64_t)o->h.data_len - off);
	r = read_range(cs, o->fd, &o->h, off, n, buf);
	return r < 0 ? r : (ssize_t)n;
}

int chunk_store_stat(struct chunk_store *cs, uint64_t ino, uint32_t index, struct chunk_meta *ret)
{
	READ_VIEW(view, cs, ino, index);
	_cleanup_open_put_ struct chunk_open *o = NULL;
	int r = cs_open_get(cs, ino, index, &o);
	if (r < 0)
		return r;
	*ret = (struct chunk_meta){o->h.version, o->h.data_len, o->h.checksum};
	return 0;
}

/* ---- write and truncate -------------------------------------------------- */

/* Opens and loads the current version, if any, for an update. */
static int load_old(struct chunk_update *u)
{
	u->oldfd = cs_chunk_open(u->cs, u->ino, u->index, true);
	if (u->oldfd == -ENOENT) {
		u->oldfd = -1;
		return 0;
	}
	if (u->oldfd < 0) {
		int r = u->oldfd;
		u->oldfd = -1;
		return r;
	}
	return cs_hdr_load(u->cs, u->oldfd, u->ino, u->index, &u->old);
}

/* The whole new version as a new file (chunk_cow.c). */
static int write_new_file(struct chunk_update *u, unsigned flags, struct chunk_meta *ret)
{
	chunk_hdr_done(&u->new);
	free(u->scratch);
	u->scratch = NULL;
	int r = chunk_update_plan(u, 0, u->old.version + 1);
	return r < 0 ? r : chunk_cow_run(u, flags, ret);
}

/* Chooses the update's path (the file header's comment). */
static int write_path(struct chunk_update *u, unsigned flags, struct chunk_meta *ret)
{
	bool replaces_all = u->off == 0 && u->new_len == u->len;
	if (u->oldfd < 0 || u->old.format != CHUNK_FORMAT_V2 || replaces_all)
		return write_new_file(u, flags, ret);
	int r = chunk_inplace_write(u, flags, ret);
	return r == -EAGAIN ? write_new_file(u, flags, ret) : r;
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
	_cleanup_unlock_ pthread_mutex_t *m = cs_lock_chunk(cs, ino, index);
	RING_GUARD(g, cs);
	_cleanup_(chunk_update_done) struct chunk_update u = {.cs = cs,
							      .ring = g.ring,
							      .ino = ino,
							      .index = index,
							      .off = off,
							      .len = len,
							      .data = data,
							      .sums = sums,
							      .oldfd = -1};
	int r = load_old(&u);
	if (r < 0)
		return r;
	u.new_len = (uint32_t)STRATA_MAX((uint64_t)u.old.data_len, (uint64_t)off + len);
	return write_path(&u, flags, ret);
}

int chunk_store_truncate(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t len,
			 struct chunk_meta *ret)
{
	if (len > CHUNK_STORE_MAX_LEN)
		return -EFBIG;
	_cleanup_unlock_ pthread_mutex_t *m = cs_lock_chunk(cs, ino, index);
	RING_GUARD(g, cs);
	_cleanup_(chunk_update_done) struct chunk_update u = {
	    .cs = cs, .ring = g.ring, .ino = ino, .index = index, .oldfd = -1};
	int r = load_old(&u);
	if (r < 0)
		return r;
	if (u.oldfd < 0 || u.old.data_len == len) {
		if (ret)
			*ret = (struct chunk_meta){u.old.version, u.old.data_len, u.old.checksum};
		return 0;
	}
	u.new_len = len;
	if (u.old.format != CHUNK_FORMAT_V2)
		return write_new_file(&u, 0, ret);
	return chunk_inplace_truncate(&u, ret);
}

int chunk_store_put(struct chunk_store *cs, uint64_t ino, uint32_t index, const void *data,
		    uint32_t len, uint64_t version, struct chunk_meta *ret)
{
	if (len > CHUNK_STORE_MAX_LEN)
		return -EFBIG;
	if (version == 0)
		return -EINVAL;
	_cleanup_unlock_ pthread_mutex_t *m = cs_lock_chunk(cs, ino, index);
	RING_GUARD(g, cs);
	/* No old version is loaded: every block comes from data (or is a hole
	 * when len is 0), so a damaged old chunk is simply replaced. */
	_cleanup_(chunk_update_done) struct chunk_update u = {.cs = cs,
							      .ring = g.ring,
							      .ino = ino,
							      .index = index,
							      .off = 0,
							      .len = len,
							      .new_len = len,
							      .data = data,
							      .oldfd = -1};
	int r = chunk_update_plan(&u, 0, version);
	return r < 0 ? r : chunk_cow_run(&u, 0, ret);
}

/* ---- remove, sync, space ----------------------------------------------- */

int chunk_store_remove(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	char p[64];
	cs_chunk_path(p, ino, index);
	_cleanup_unlock_ pthread_mutex_t *m = cs_lock_chunk(cs, ino, index);
	chunk_io_step(&cs->fault);
	if (unlinkat(cs->dirfd, p, 0) == 0) {
		cs_chunk_changed(cs, ino, index);
		return 1;
	}
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
	cs_chunk_dir_path(dp, ino);
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
	if (first_index == 0)
		chunk_store_rmdir_ino(cs, ino);
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

/* ---- lists (resync) ------------------------------------------------------- */

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
	cs_chunk_dir_path(dp, ino);
	unlinkat(cs->dirfd, dp, AT_REMOVEDIR); /* ENOTEMPTY: a racing writer; fine */
}

/* Appends every chunk index of inode ino to *v. */
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
