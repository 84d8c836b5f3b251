/* test_chunk_store.c — unit tests of the chunk engine (chunkserver/chunk_store.c):
 * partial and whole writes, reads, gaps, truncate, remove_file, versions,
 * checksum corruption (a byte flipped on disk -> -EIO and one report naming
 * the block), readers during whole rewrites and in-place overwrites (one
 * version each), leftover temp files, crash atomicity (a child killed mid-write
 * in a loop: the chunk is always some complete version, checked by replaying
 * the writes up to its version), ENOSPC on a 16 MiB tmpfs (skipped
 * without mount privileges), and chunks put in pieces (resync of chunks
 * above 4 MiB: staging, verification, atomic publish, interrupted and
 * stale transfers, expiry and start-up cleanup of staging files). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "chunkserver/chunk_format.h"
#include "chunkserver/chunk_store.h"
#include "tests/testutil.h"
#include "chunkserver/uring_pool.h"
#include "fs/wire.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define BS CHUNK_BLOCK_SIZE
#define DATA_OFF CHUNK_V2_DATA_OFF /* data byte 0 in a format-2 chunk file */

struct corrupt_log {
	int n;
	struct chunk_corruption last;
};

static void count_corrupt(void *arg, const struct chunk_corruption *c)
{
	struct corrupt_log *l = arg;
	l->n++;
	l->last = *c;
}

struct env {
	char dir[256];
	struct uring_pool *pool;
	struct chunk_store *cs;
	struct corrupt_log log;
};

static void env_open(struct env *e)
{
	struct chunk_store_opts o = {.target_id = 7, .on_corrupt = count_corrupt, .arg = &e->log};
	CHECK_EQ(chunk_store_open(e->dir, e->pool, &o, &e->cs), 0);
}

static void env_reopen(struct env *e)
{
	chunk_store_free(e->cs);
	env_open(e);
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 131 + seed * 7 + (i >> 12)) ^ seed);
}

static void chunk_file(const struct env *e, uint64_t ino, uint32_t index, char *out, size_t cap)
{
	snprintf(out, cap, "%s/chunks/%02x/%016llx/%08x", e->dir, (unsigned)(ino & 0xff),
		 (unsigned long long)ino, index);
}

/* Expects the chunk to read back exactly as model[0..len). */
static void expect_chunk(struct env *e, uint64_t ino, uint32_t index, const uint8_t *model,
			 uint32_t len)
{
	uint8_t *buf = malloc(len + 2 * BS);
	CHECK(buf);
	ssize_t n = chunk_store_read(e->cs, ino, index, 0, len + BS, buf);
	CHECK_EQ(n, len);
	CHECK(memcmp(buf, model, len) == 0);
	/* unaligned small reads across block edges */
	uint32_t offs[] = {0, 1, BS - 3, BS, 2 * BS + 17, len > 5 ? len - 5 : 0};
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		if (offs[i] >= len)
			continue;
		uint32_t want = len - offs[i] < 4096 ? len - offs[i] : 4096;
		CHECK_EQ(chunk_store_read(e->cs, ino, index, offs[i], 4096, buf), want);
		CHECK(memcmp(buf, model + offs[i], want) == 0);
	}
	free(buf);
}

static void test_basic(struct env *e)
{
	uint32_t len = MiB;
	uint8_t *model = calloc(1, 4 * MiB), *data = malloc(4 * MiB);
	CHECK(model && data);
	struct chunk_meta m;
	uint8_t b;

	CHECK_EQ(chunk_store_read(e->cs, 1, 0, 0, 4096, data), 0); /* missing */
	CHECK_EQ(chunk_store_stat(e->cs, 1, 0, &m), -ENOENT);

	fill(data, len, 1); /* whole write */
	CHECK_EQ(chunk_store_write(e->cs, 1, 0, 0, len, data, 0, &m), 0);
	CHECK_EQ(m.version, 1);
	CHECK_EQ(m.length, len);
	memcpy(model, data, len);
	expect_chunk(e, 1, 0, model, len);

	fill(data, 5000, 2); /* partial write inside one block */
	CHECK_EQ(chunk_store_write(e->cs, 1, 0, 70000, 5000, data, 0, &m), 0);
	memcpy(model + 70000, data, 5000);
	CHECK_EQ(m.version, 2);
	expect_chunk(e, 1, 0, model, len);

	fill(data, 3 * BS + 10, 3); /* partial write spanning blocks, unaligned */
	CHECK_EQ(chunk_store_write(e->cs, 1, 0, BS - 5, 3 * BS + 10, data, 0, &m), 0);
	memcpy(model + BS - 5, data, 3 * BS + 10);
	expect_chunk(e, 1, 0, model, len);

	fill(data, 1000, 4); /* write past the end with a gap: gap reads zeros */
	CHECK_EQ(chunk_store_write(e->cs, 1, 0, len + 3 * BS + 7, 1000, data, 0, &m), 0);
	memcpy(model + len + 3 * BS + 7, data, 1000);
	len += 3 * BS + 7 + 1000;
	CHECK_EQ(m.length, len);
	expect_chunk(e, 1, 0, model, len);

	struct chunk_meta s;
	CHECK_EQ(chunk_store_stat(e->cs, 1, 0, &s), 0);
	CHECK_EQ(s.version, m.version);
	CHECK_EQ(s.checksum, m.checksum);

	/* new chunk starting with a gap */
	fill(data, 10, 5);
	CHECK_EQ(chunk_store_write(e->cs, 1, 1, 200000, 10, data, 0, &m), 0);
	CHECK_EQ(m.length, 200010);
	CHECK_EQ(chunk_store_read(e->cs, 1, 1, 199999, 100, data + 100), 11);
	CHECK_EQ(data[100], 0);
	CHECK(memcmp(data + 101, data, 10) == 0);

	/* truncate shrink (unaligned), then extend with zeros */
	CHECK_EQ(chunk_store_truncate(e->cs, 1, 0, 100000, &m), 0);
	CHECK_EQ(m.length, 100000);
	expect_chunk(e, 1, 0, model, 100000);
	CHECK_EQ(chunk_store_truncate(e->cs, 1, 0, 300000, &m), 0);
	memset(model + 100000, 0, 200000);
	expect_chunk(e, 1, 0, model, 300000);
	CHECK_EQ(chunk_store_truncate(e->cs, 1, 0, 0, &m), 0);
	CHECK_EQ(m.length, 0);
	CHECK_EQ(chunk_store_stat(e->cs, 1, 0, &s), 0); /* empty chunk kept */
	CHECK_EQ(chunk_store_read(e->cs, 1, 0, 0, 10, &b), 0);
	CHECK_EQ(chunk_store_truncate(e->cs, 1, 9, 100, &m), 0); /* missing: no-op */
	CHECK_EQ(chunk_store_stat(e->cs, 1, 9, &s), -ENOENT);

	/* limits */
	CHECK_EQ(chunk_store_write(e->cs, 1, 2, CHUNK_STORE_MAX_LEN, 1, data, 0, NULL), -EFBIG);
	/* an empty write changes nothing and creates nothing */
	CHECK_EQ(chunk_store_write(e->cs, 1, 2, 5000, 0, data, 0, &m), 0);
	CHECK_EQ(chunk_store_stat(e->cs, 1, 2, &s), -ENOENT);
	CHECK_EQ(chunk_store_write(e->cs, 1, 1, 900000, 0, data, 0, &m), 0);
	CHECK_EQ(m.length, 200010);

	/* remove_file from an index, then all */
	for (uint32_t i = 0; i < 6; i++)
		CHECK_EQ(chunk_store_write(e->cs, 2, i, 0, 100, data, CHUNK_STORE_SYNC, NULL), 0);
	CHECK_EQ(chunk_store_remove_file(e->cs, 2, 4), 2);
	CHECK_EQ(chunk_store_stat(e->cs, 2, 3, &s), 0);
	CHECK_EQ(chunk_store_stat(e->cs, 2, 4, &s), -ENOENT);
	CHECK_EQ(chunk_store_remove(e->cs, 2, 3), 1);
	CHECK_EQ(chunk_store_remove(e->cs, 2, 3), 0);
	CHECK_EQ(chunk_store_remove_file(e->cs, 2, 0), 3);
	CHECK_EQ(chunk_store_remove_file(e->cs, 2, 0), 0);
	char p[512];
	snprintf(p, sizeof(p), "%s/chunks/02/%016llx", e->dir, 2ull);
	CHECK(access(p, F_OK) != 0); /* inode directory removed */
	CHECK_EQ(chunk_store_write(e->cs, 2, 0, 0, 100, data, 0, NULL), 0); /* and recreated */
	CHECK_EQ(chunk_store_sync(e->cs), 0);

	uint64_t tot, fr;
	CHECK_EQ(chunk_store_space(e->cs, &tot, &fr), 0);
	CHECK(tot > 0 && fr <= tot);
	CHECK_EQ(e->log.n, 0);
	free(model);
	free(data);
}

/* chunk_store_write_sums: the data's piece sums (wire_data_hash, as a frame
 * brought them) stand in for the block checksums wherever a piece is a whole
 * block of the new version; the result is the chunk chunk_store_write makes.
 * Wrong sums are believed (the caller verified them with the frame): shown
 * by a read that then fails its check. */
static void test_write_sums(struct env *e)
{
	uint8_t *data = malloc(2 * MiB), *buf = malloc(2 * MiB);
	uint64_t sums[WIRE_MAX_PIECES];
	CHECK(data && buf);
	struct {
		uint32_t off, len;
	} w[] = {
	    {0, MiB},		/* whole aligned blocks */
	    {BS, 2 * BS + 100}, /* aligned, short last piece at the new end */
	    {0, BS + 100},	/* aligned, short last piece inside old data */
	    {BS - 5, 3 * BS},	/* unaligned: sums unusable, hashed */
	    {4 * BS, 3 * BS},	/* aligned, past the end with a gap */
	};
	for (uint32_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		struct chunk_meta a, b;
		fill(data, MiB, 100 + i); /* the same old chunk under both */
		CHECK_EQ(chunk_store_write(e->cs, 60, i, 0, 3 * BS + 7, data, 0, &a), 0);
		CHECK_EQ(chunk_store_write(e->cs, 61, i, 0, 3 * BS + 7, data, 0, &b), 0);
		fill(data, w[i].len, 200 + i);
		wire_data_hash(data, w[i].len, sums);
		CHECK_EQ(
		    chunk_store_write_sums(e->cs, 60, i, w[i].off, w[i].len, data, sums, 0, &a), 0);
		CHECK_EQ(chunk_store_write(e->cs, 61, i, w[i].off, w[i].len, data, 0, &b), 0);
		CHECK_EQ(a.length, b.length);
		CHECK(a.checksum == b.checksum);
		CHECK_EQ(chunk_store_read(e->cs, 60, i, 0, a.length, buf), a.length);
	}
	uint32_t before = e->log.n;
	fill(data, 2 * BS, 7);
	wire_data_hash(data, 2 * BS, sums);
	sums[1] ^= 1;
	CHECK_EQ(chunk_store_write_sums(e->cs, 62, 0, 0, 2 * BS, data, sums, 0, NULL), 0);
	CHECK_EQ(chunk_store_read(e->cs, 62, 0, 0, BS, buf), BS);
	CHECK_EQ(chunk_store_read(e->cs, 62, 0, BS, BS, buf), -EIO);
	CHECK_EQ(e->log.n, before + 1);
	free(data);
	free(buf);
}

/* Flips a byte behind the store's back. It waits a clock tick first, so the
 * file's ctime moves even where timestamps are coarse: that is how the open
 * file cache (chunk_open_cache.c) notices a change it did not make. */
static void flip_byte(const char *path, off_t off)
{
	usleep(10000);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	uint8_t v;
	CHECK_EQ(pread(fd, &v, 1, off), 1);
	v ^= 0x5a;
	CHECK_EQ(pwrite(fd, &v, 1, off), 1);
	close(fd);
}

/* The file offset of a format-2 chunk file's current header slot (the one
 * whose magic is "SCHK" and, of two, with the higher version). */
static uint64_t current_slot_off(const char *path)
{
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	uint8_t a[40], b[40];
	CHECK_EQ(pread(fd, a, sizeof(a), 0), (ssize_t)sizeof(a));
	CHECK_EQ(pread(fd, b, sizeof(b), CHUNK_V2_SLOT_SIZE), (ssize_t)sizeof(b));
	close(fd);
	bool va = memcmp(a, "SCHK", 4) == 0, vb = memcmp(b, "SCHK", 4) == 0;
	CHECK(va || vb);
	uint64_t vera = 0, verb = 0;
	memcpy(&vera, a + 32, 8);
	memcpy(&verb, b + 32, 8);
	return vb && (!va || verb > vera) ? CHUNK_V2_SLOT_SIZE : 0;
}

static void test_corruption(struct env *e)
{
	uint32_t len = 4 * BS;
	uint8_t *data = malloc(len), *buf = malloc(len);
	CHECK(data && buf);
	fill(data, len, 9);
	CHECK_EQ(chunk_store_write(e->cs, 3, 1, 0, len, data, 0, NULL), 0);
	char p[512];
	chunk_file(e, 3, 1, p, sizeof(p));
	flip_byte(p, DATA_OFF + 2 * BS + 5);

	e->log.n = 0;
	CHECK_EQ(chunk_store_read(e->cs, 3, 1, 100, 4096, buf), 4096); /* block 0: fine */
	CHECK(memcmp(buf, data + 100, 4096) == 0);
	CHECK_EQ(chunk_store_read(e->cs, 3, 1, 3 * BS, BS, buf), BS); /* block 3: fine */
	CHECK_EQ(e->log.n, 0);
	CHECK_EQ(chunk_store_read(e->cs, 3, 1, 2 * BS + 4000, 10, buf), -EIO);
	CHECK_EQ(e->log.n, 1);
	CHECK_EQ(e->log.last.block, 2);
	CHECK_EQ(e->log.last.ino, 3);
	CHECK_EQ(e->log.last.index, 1);
	CHECK_EQ(e->log.last.target_id, 7);
	CHECK_EQ(chunk_store_read(e->cs, 3, 1, 0, len, buf), -EIO);
	/* a partial write into the bad block must not launder it */
	CHECK_EQ(chunk_store_write(e->cs, 3, 1, 2 * BS + 10, 10, data, 0, NULL), -EIO);
	/* a write elsewhere carries the bad block with its old checksum */
	CHECK_EQ(chunk_store_write(e->cs, 3, 1, 10, 10, data + 10, 0, NULL), 0);
	CHECK_EQ(chunk_store_read(e->cs, 3, 1, 2 * BS, 10, buf), -EIO);
	/* overwriting the whole block heals it */
	CHECK_EQ(chunk_store_write(e->cs, 3, 1, 2 * BS, BS, data + 2 * BS, 0, NULL), 0);
	CHECK_EQ(chunk_store_read(e->cs, 3, 1, 0, len, buf), len);
	CHECK(memcmp(buf, data, len) == 0);

	/* a damaged header: the current slot's version field */
	chunk_file(e, 3, 1, p, sizeof(p));
	flip_byte(p, current_slot_off(p) + 33);
	e->log.n = 0;
	CHECK_EQ(chunk_store_read(e->cs, 3, 1, 0, 10, buf), -EIO);
	struct chunk_meta m;
	CHECK_EQ(chunk_store_stat(e->cs, 3, 1, &m), -EIO);
	CHECK_EQ(e->log.last.block, -1);
	CHECK(e->log.n >= 1);

	/* a truncated file */
	CHECK_EQ(chunk_store_write(e->cs, 3, 2, 0, len, data, 0, NULL), 0);
	chunk_file(e, 3, 2, p, sizeof(p));
	CHECK_EQ(truncate(p, DATA_OFF + BS + 100), 0);
	CHECK_EQ(chunk_store_read(e->cs, 3, 2, 0, 100, buf), 100);
	CHECK_EQ(chunk_store_read(e->cs, 3, 2, BS, 100, buf), -EIO);
	free(data);
	free(buf);
}

/* The open file cache never serves what was changed or removed: by a remove,
 * an in-place overwrite, a rewrite as a new file, a resync's put, or behind
 * the store's back (unlinked, replaced by another file). */
static void test_open_cache(struct env *e)
{
	uint32_t len = 3 * BS;
	uint8_t *a = malloc(len), *b = malloc(len), *buf = malloc(len);
	CHECK(a && b && buf);
	fill(a, len, 21);
	fill(b, len, 22);
	struct chunk_meta m;
	struct chunk_open_stats base, st0, st1;
	chunk_store_open_stats(e->cs, &base);
	CHECK_EQ(chunk_store_write(e->cs, 40, 0, 0, len, a, 0, NULL), 0);
	expect_chunk(e, 40, 0, a, len);
	CHECK_EQ(chunk_store_remove(e->cs, 40, 0), 1);
	CHECK_EQ(chunk_store_read(e->cs, 40, 0, 0, 100, buf), 0);
	CHECK_EQ(chunk_store_stat(e->cs, 40, 0, &m), -ENOENT);

	CHECK_EQ(chunk_store_write(e->cs, 40, 0, 0, len, a, 0, NULL), 0);
	expect_chunk(e, 40, 0, a, len);
	CHECK_EQ(chunk_store_write(e->cs, 40, 0, BS + 7, 100, b, 0, &m), 0); /* in place */
	memcpy(a + BS + 7, b, 100);
	expect_chunk(e, 40, 0, a, len);
	struct chunk_meta now;
	CHECK_EQ(chunk_store_stat(e->cs, 40, 0, &now), 0);
	CHECK_EQ(now.version, m.version);
	CHECK_EQ(chunk_store_truncate(e->cs, 40, 0, BS, NULL), 0);
	CHECK_EQ(chunk_store_read(e->cs, 40, 0, 0, len, buf), BS);
	CHECK_EQ(chunk_store_write(e->cs, 40, 0, 0, len, b, 0, NULL), 0); /* a new file */
	expect_chunk(e, 40, 0, b, len);
	CHECK_EQ(chunk_store_put(e->cs, 40, 0, a, len, 90, NULL), 0);
	expect_chunk(e, 40, 0, a, len);
	CHECK_EQ(chunk_store_stat(e->cs, 40, 0, &now), 0);
	CHECK_EQ(now.version, 90);

	/* our own changes dropped their entries: none was found stale, and a
	 * read of an unchanged chunk is served from the open file */
	chunk_store_open_stats(e->cs, &st0);
	CHECK_EQ(st0.stale, base.stale);
	CHECK_EQ(chunk_store_read(e->cs, 40, 0, 5, 100, buf), 100);
	chunk_store_open_stats(e->cs, &st1);
	CHECK_EQ(st1.hits, st0.hits + 1);
	CHECK_EQ(st1.loads, st0.loads);

	char p[512], q[512];
	chunk_file(e, 40, 0, p, sizeof(p));
	CHECK_EQ(unlink(p), 0); /* an operator's rm */
	CHECK_EQ(chunk_store_read(e->cs, 40, 0, 0, 100, buf), 0);
	chunk_store_open_stats(e->cs, &st0);
	CHECK_EQ(st0.stale, base.stale + 1);
	CHECK_EQ(chunk_store_write(e->cs, 40, 0, 0, len, a, 0, NULL), 0);
	CHECK_EQ(chunk_store_write(e->cs, 40, 1, 0, len, b, 0, NULL), 0);
	expect_chunk(e, 40, 0, a, len);
	chunk_file(e, 40, 1, q, sizeof(q));
	CHECK_EQ(unlink(p), 0);
	CHECK_EQ(link(q, p), 0);
	/* the file of chunk 1 under chunk 0's name: a bad header (other index) */
	e->log.n = 0;
	CHECK_EQ(chunk_store_read(e->cs, 40, 0, 0, 100, buf), -EIO);
	CHECK_EQ(e->log.n, 1);
	CHECK_EQ(chunk_store_remove_file(e->cs, 40, 0), 2);
	free(a);
	free(b);
	free(buf);
}

struct rw_ctx {
	struct env *e;
	uint64_t ino;
	int stop; /* __atomic */
	int torn, reads;
};

/* Reads the first MiB of chunk (x->ino, 0) over and over; every read must
 * see one uniform version. */
static void *uniform_reader(void *arg)
{
	struct rw_ctx *x = arg;
	uint8_t *buf = malloc(MiB);
	while (!__atomic_load_n(&x->stop, __ATOMIC_ACQUIRE) && buf) {
		ssize_t n = chunk_store_read(x->e->cs, x->ino, 0, 0, MiB, buf);
		if (n <= 0)
			continue;
		x->reads++;
		for (ssize_t i = 1; i < n; i++)
			if (buf[i] != buf[0]) {
				x->torn++;
				break;
			}
	}
	free(buf);
	return NULL;
}

/* Writers of the chunk's first MiB, each with one byte value, while two
 * readers read it: chunk_len 1 MiB makes every write a whole rewrite (a new
 * file), 2 MiB an overwrite in place. */
static void concurrent_read(struct env *e, uint64_t ino, uint32_t chunk_len)
{
	uint8_t *data = calloc(1, chunk_len);
	CHECK(data);
	CHECK_EQ(chunk_store_write(e->cs, ino, 0, 0, chunk_len, data, 0, NULL), 0);
	struct rw_ctx x = {.e = e, .ino = ino};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, uniform_reader, &x), 0);
	for (int v = 1; v <= 150; v++) {
		memset(data, v, MiB);
		CHECK_EQ(chunk_store_write(e->cs, ino, 0, 0, MiB, data, 0, NULL), 0);
	}
	__atomic_store_n(&x.stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(x.torn, 0);
	CHECK(x.reads > 0);
	free(data);
}

/* Invariant 1: readers never see a half-written chunk, whether it is
 * replaced by a new file or overwritten in place. */
static void test_concurrent_read(struct env *e)
{
	concurrent_read(e, 6, MiB);
	concurrent_read(e, 7, 2 * MiB);
}

static void test_leftover_tmp(struct env *e)
{
	uint8_t data[100];
	fill(data, sizeof(data), 11);
	CHECK_EQ(chunk_store_write(e->cs, 4, 0, 0, sizeof(data), data, 0, NULL), 0);
	char p[512];
	snprintf(p, sizeof(p), "%s/tmp/%016llx.%08x", e->dir, 4ull, 0u);
	int fd = open(p, O_CREAT | O_WRONLY, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "half a chunk", 12), 12);
	close(fd);
	env_reopen(e);
	CHECK(access(p, F_OK) != 0);
	uint8_t buf[100];
	CHECK_EQ(chunk_store_read(e->cs, 4, 0, 0, 100, buf), 100);
	CHECK(memcmp(buf, data, 100) == 0);
}

/* Write number v (1-based) of the crash loop: deterministic range and bytes. */
static void crash_op(uint32_t v, uint32_t *off, uint32_t *len, uint8_t *data)
{
	uint32_t r = v * 2654435761u;
	if (v % 3 == 1) {
		*off = 0;
		*len = MiB;
	} else {
		*off = r % (MiB - 1);
		*len = 1 + (r >> 7) % (MiB - *off);
		if (*len > 300 * KiB)
			*len = 300 * KiB;
	}
	fill(data, *len, v);
}

static void crash_child(struct env *e)
{
	struct uring_pool *pool;
	struct chunk_store *cs;
	if (uring_pool_new(1, 16, &pool) < 0 || chunk_store_open(e->dir, pool, NULL, &cs) < 0)
		_exit(2);
	struct chunk_meta m = {0};
	chunk_store_stat(cs, 5, 0, &m);
	uint8_t *data = malloc(MiB);
	for (uint32_t v = (uint32_t)m.version + 1;; v++) {
		uint32_t off, len;
		crash_op(v, &off, &len, data);
		if (chunk_store_write(cs, 5, 0, off, len, data, 0, NULL) < 0)
			_exit(3);
	}
}

static int count_files(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	FILE *f = popen(cmd, "r");
	int n = -1;
	if (f) {
		if (fscanf(f, "%d", &n) != 1)
			n = -1;
		pclose(f);
	}
	return n;
}

/* ---- chunks put in pieces (chunk_store_put_piece) ------------------------- */

static int put_piece(struct env *e, uint64_t ino, uint32_t index, uint64_t version, uint64_t tag,
		     uint64_t checksum, const uint8_t *data, uint32_t total, uint32_t off,
		     uint32_t len, unsigned flags, const uint64_t *sums, struct chunk_meta *m)
{
	struct chunk_put_piece p = {.version = version,
				    .tag = tag,
				    .checksum = checksum,
				    .total = total,
				    .off = off,
				    .len = len,
				    .data = data + off,
				    .sums = sums,
				    .flags = flags};
	return chunk_store_put_piece(e->cs, ino, index, &p, m);
}

/* Puts data[0..total) in pieces of `piece` bytes; stops before the piece at
 * stop_at (total: all). Returns the last piece's status. */
static int put_all(struct env *e, uint64_t ino, uint32_t index, uint64_t version, uint64_t tag,
		   uint64_t checksum, const uint8_t *data, uint32_t total, uint32_t piece,
		   uint32_t stop_at, struct chunk_meta *m)
{
	int r = 0;
	for (uint32_t off = 0; r == 0 && off < total && off < stop_at; off += piece) {
		uint32_t n = total - off < piece ? total - off : piece;
		unsigned fl =
		    (off == 0 ? CHUNK_PUT_FIRST : 0) | (off + n == total ? CHUNK_PUT_LAST : 0);
		uint64_t *sums = NULL;
		if ((off / piece) % 2) { /* every other piece with the frame's sums */
			sums = malloc(sizeof(uint64_t) * (n / BS + 1));
			CHECK(sums);
			for (uint32_t i = 0; i * BS < n; i++)
				sums[i] = XXH3_64bits(data + off + i * BS,
						      n - i * BS < BS ? n - i * BS : BS);
		}
		r = put_piece(e, ino, index, version, tag, checksum, data, total, off, n, fl, sums,
			      m);
		free(sums);
	}
	return r;
}

static int count_tmp(const struct env *e)
{
	char p[300];
	snprintf(p, sizeof(p), "%s/tmp", e->dir);
	return count_files(p);
}

static void stage_file(const struct env *e, uint64_t ino, uint32_t index, char *out, size_t cap)
{
	snprintf(out, cap, "%s/tmp/%016llx.%08x.put", e->dir, (unsigned long long)ino, index);
}

static void test_put_pieces(struct env *e)
{
	const uint32_t total = 20 * MiB - 1000, piece = 4 * MiB;
	uint8_t *data = malloc(total), *old = malloc(MiB);
	CHECK(data && old);
	fill(data, total, 61);
	fill(old, MiB, 62);
	/* the checksum the source would have: the same bytes written normally */
	struct chunk_meta src, m, st;
	for (uint32_t off = 0; off < total; off += piece)
		CHECK_EQ(chunk_store_write(e->cs, 51, 0, off,
					   total - off < piece ? total - off : piece, data + off, 0,
					   &src),
			 0);
	CHECK_EQ(src.length, total);
	CHECK_EQ(chunk_store_write(e->cs, 50, 3, 0, MiB, old, 0, NULL), 0);

	/* a whole transfer: the old chunk stays readable until the last piece */
	CHECK_EQ(put_all(e, 50, 3, 9, 1001, src.checksum, data, total, piece, 3 * piece, &m), 0);
	CHECK_EQ(m.version, 0); /* nothing published yet */
	CHECK_EQ(chunk_store_stat(e->cs, 50, 3, &st), 0);
	CHECK(st.version == 1 && st.length == MiB);
	expect_chunk(e, 50, 3, old, MiB);
	CHECK_EQ(count_tmp(e), 1);
	for (uint32_t off = 3 * piece; off < total; off += piece) {
		uint32_t n = total - off < piece ? total - off : piece;
		CHECK_EQ(put_piece(e, 50, 3, 9, 1001, src.checksum, data, total, off, n,
				   off + n == total ? CHUNK_PUT_LAST : 0, NULL, &m),
			 0);
	}
	CHECK(m.version == 9 && m.length == total && m.checksum == src.checksum);
	CHECK_EQ(chunk_store_stat(e->cs, 50, 3, &st), 0);
	CHECK(st.version == 9 && st.length == total && st.checksum == src.checksum);
	expect_chunk(e, 50, 3, data, total);
	CHECK_EQ(count_tmp(e), 0);

	/* pieces that break the rules */
	CHECK_EQ(put_piece(e, 52, 0, 1, 1, 0, data, total, 100, piece, CHUNK_PUT_FIRST, NULL, &m),
		 -EINVAL); /* first not at 0 */
	CHECK_EQ(put_piece(e, 52, 0, 1, 1, 0, data, total, 0, piece - 1, CHUNK_PUT_FIRST, NULL, &m),
		 -EINVAL); /* not whole blocks */
	CHECK_EQ(put_piece(e, 52, 0, 1, 1, 0, data, total, 0, piece,
			   CHUNK_PUT_FIRST | CHUNK_PUT_LAST, NULL, &m),
		 -EINVAL); /* last but not at the end */
	CHECK_EQ(put_piece(e, 52, 0, 0, 1, 0, data, total, 0, piece, CHUNK_PUT_FIRST, NULL, &m),
		 -EINVAL); /* version 0 */
	CHECK_EQ(put_piece(e, 52, 0, 1, 1, 0, data, 65 * MiB, 0, piece, CHUNK_PUT_FIRST, NULL, &m),
		 -EFBIG);
	CHECK_EQ(put_piece(e, 52, 0, 1, 1, 0, data, total, piece, piece, 0, NULL, &m),
		 -ESTALE); /* no transfer started */
	CHECK_EQ(count_tmp(e), 0);

	/* another transfer's, an out-of-order and a repeated piece are refused
	 * and leave the transfer going */
	CHECK_EQ(put_all(e, 52, 0, 4, 77, src.checksum, data, total, piece, 2 * piece, &m), 0);
	CHECK_EQ(
	    put_piece(e, 52, 0, 4, 78, src.checksum, data, total, 2 * piece, piece, 0, NULL, &m),
	    -ESTALE); /* other tag */
	CHECK_EQ(
	    put_piece(e, 52, 0, 5, 77, src.checksum, data, total, 2 * piece, piece, 0, NULL, &m),
	    -ESTALE); /* other version */
	CHECK_EQ(
	    put_piece(e, 52, 0, 4, 77, src.checksum, data, total, 3 * piece, piece, 0, NULL, &m),
	    -ESTALE); /* skips a piece */
	CHECK_EQ(put_piece(e, 52, 0, 4, 77, src.checksum, data, total, piece, piece, 0, NULL, &m),
		 -ESTALE); /* again */
	CHECK_EQ(count_tmp(e), 1);
	/* an interrupted transfer is replaced by the next first piece */
	CHECK_EQ(put_all(e, 52, 0, 4, 79, src.checksum, data, total, piece, total, &m), 0);
	CHECK(m.version == 4 && m.checksum == src.checksum);
	expect_chunk(e, 52, 0, data, total);
	CHECK_EQ(count_tmp(e), 0);

	/* the source's checksum does not match: nothing published, staging gone */
	CHECK_EQ(put_all(e, 50, 3, 10, 1002, src.checksum ^ 1, data, total, piece, total, &m),
		 -EIO);
	CHECK_EQ(chunk_store_stat(e->cs, 50, 3, &st), 0);
	CHECK(st.version == 9 && st.checksum == src.checksum);
	CHECK_EQ(count_tmp(e), 0);
	/* staged bytes damaged on disk before the last piece: found by the
	 * read-back, nothing published */
	CHECK_EQ(put_all(e, 50, 3, 10, 1003, src.checksum, data, total, piece, 4 * piece, &m), 0);
	char sp[512];
	stage_file(e, 50, 3, sp, sizeof(sp));
	flip_byte(sp, DATA_OFF + 5 * MiB + 3);
	CHECK_EQ(put_piece(e, 50, 3, 10, 1003, src.checksum, data, total, 4 * piece,
			   total - 4 * piece, CHUNK_PUT_LAST, NULL, &m),
		 -EIO);
	CHECK_EQ(chunk_store_stat(e->cs, 50, 3, &st), 0);
	CHECK_EQ(st.version, 9);
	expect_chunk(e, 50, 3, data, total);
	CHECK_EQ(count_tmp(e), 0);

	/* a transfer whose sender went away: dropped by the expiry (when old
	 * enough) and at start-up */
	CHECK_EQ(put_all(e, 53, 1, 2, 5, src.checksum, data, total, piece, piece, &m), 0);
	CHECK_EQ(chunk_store_put_expire(e->cs, 3600), 0);
	CHECK_EQ(count_tmp(e), 1);
	stage_file(e, 53, 1, sp, sizeof(sp));
	struct timespec past[2] = {{time(NULL) - 600, 0}, {time(NULL) - 600, 0}};
	CHECK_EQ(utimensat(AT_FDCWD, sp, past, 0), 0);
	CHECK_EQ(chunk_store_put_expire(e->cs, 120), 1);
	CHECK_EQ(put_piece(e, 53, 1, 2, 5, src.checksum, data, total, piece, piece, 0, NULL, &m),
		 -ESTALE);
	CHECK_EQ(put_all(e, 53, 1, 2, 6, src.checksum, data, total, piece, 2 * piece, &m), 0);
	CHECK_EQ(count_tmp(e), 1);
	env_reopen(e);
	CHECK_EQ(count_tmp(e), 0);
	CHECK_EQ(chunk_store_stat(e->cs, 53, 1, &st), -ENOENT);
	expect_chunk(e, 50, 3, data, total);
	free(data);
	free(old);
}

static void test_crash(struct env *e)
{
	chunk_store_free(e->cs);
	e->cs = NULL;
	uint8_t *model = malloc(MiB), *data = malloc(MiB), *buf = malloc(MiB);
	CHECK(model && data && buf);
	srand((unsigned)time(NULL));
	int rounds = 40, mid_write = 0;
	uint32_t mver = 0, mlen = 0; /* model holds the content at version mver */
	memset(model, 0, MiB);
	for (int round = 0; round < rounds; round++) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			crash_child(e);
		usleep(20000 + rand() % 30000);
		kill(pid, SIGKILL);
		int st;
		CHECK_EQ(waitpid(pid, &st, 0), pid);
		CHECK(WIFSIGNALED(st));
		char tmpdir[300];
		snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", e->dir);
		mid_write += count_files(tmpdir) > 0;

		env_open(e);
		CHECK_EQ(count_files(tmpdir), 0);
		e->log.n = 0;
		struct chunk_meta m;
		int r = chunk_store_stat(e->cs, 5, 0, &m);
		if (r == -ENOENT) {
			chunk_store_free(e->cs);
			continue;
		}
		CHECK_EQ(r, 0);
		CHECK(m.version >= mver);
		for (; mver < m.version; mver++) { /* replay writes mver+1..version */
			uint32_t off, len;
			crash_op(mver + 1, &off, &len, data);
			memcpy(model + off, data, len);
			if (off + len > mlen)
				mlen = off + len;
		}
		CHECK_EQ(m.length, mlen);
		CHECK_EQ(chunk_store_read(e->cs, 5, 0, 0, MiB, buf), mlen);
		CHECK(memcmp(buf, model, mlen) == 0);
		CHECK_EQ(e->log.n, 0);
		chunk_store_free(e->cs);
	}
	e->cs = NULL;
	env_open(e);
	struct chunk_meta m;
	CHECK_EQ(chunk_store_stat(e->cs, 5, 0, &m), 0);
	fprintf(stderr, "crash loop: %d kills (%d left a temp file), chunk reached version %llu\n",
		rounds, mid_write, (unsigned long long)m.version);
	CHECK(m.version > 1);
	free(model);
	free(data);
	free(buf);
}

/* Returns 0, or 77 when a tmpfs cannot be mounted. */
static int test_enospc(struct uring_pool *pool)
{
	char mnt[] = "/tmp/strata-enospc-XXXXXX";
	CHECK(mkdtemp(mnt));
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=16m") < 0) {
		fprintf(stderr, "skip ENOSPC test: cannot mount a tmpfs: %s\n", strerror(errno));
		rmdir(mnt);
		return 77;
	}
	struct env e = {.pool = pool};
	snprintf(e.dir, sizeof(e.dir), "%s/t", mnt);
	env_open(&e);
	uint8_t *a = malloc(MiB), *buf = malloc(MiB);
	CHECK(a && buf);
	fill(a, MiB, 21);
	CHECK_EQ(chunk_store_write(e.cs, 9, 0, 0, MiB, a, 0, NULL), 0);
	int r = 0;
	uint32_t i, sizes[] = {MiB, 64 * KiB, 4 * KiB};
	for (size_t s = 0; s < 3; s++)
		for (i = 1; i < 100000 && (r = chunk_store_write(e.cs, 10 + s, i, 0, sizes[s], buf,
								 0, NULL)) == 0;
		     i++)
			;
	CHECK_EQ(r, -ENOSPC);
	fprintf(stderr, "ENOSPC after filling the 16 MiB tmpfs\n");
	char tmpdir[300];
	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", e.dir);
	CHECK_EQ(count_files(tmpdir), 0);
	memset(buf, 0xee, MiB);
	CHECK_EQ(chunk_store_write(e.cs, 9, 0, 0, MiB, buf, 0, NULL), -ENOSPC);
	CHECK_EQ(chunk_store_write(e.cs, 9, 0, 5, 3 * BS, buf, 0, NULL), -ENOSPC);
	CHECK_EQ(count_files(tmpdir), 0);
	CHECK_EQ(chunk_store_read(e.cs, 9, 0, 0, MiB, buf), MiB);
	CHECK(memcmp(buf, a, MiB) == 0);
	/* freeing space makes the write succeed */
	CHECK(chunk_store_remove_file(e.cs, 10, 0) > 0);
	CHECK_EQ(chunk_store_write(e.cs, 9, 0, 0, MiB, buf, 0, NULL), 0);
	chunk_store_free(e.cs);
	umount2(mnt, MNT_DETACH);
	rmdir(mnt);
	free(a);
	free(buf);
	return 0;
}

/* `test_chunk_store` runs everything but the ENOSPC test; `test_chunk_store
 * enospc` runs only that one (77 without mount privileges). */
int main(int argc, char **argv)
{
	struct env e = {0};
	int r = uring_pool_new(2, 32, &e.pool);
	if (r < 0) {
		fprintf(stderr, "skip: io_uring unavailable: %s\n", strerror(-r));
		return 77;
	}
	if (argc > 1 && strcmp(argv[1], "enospc") == 0) {
		r = test_enospc(e.pool);
		uring_pool_free(e.pool);
		return r;
	}
	snprintf(e.dir, sizeof(e.dir), "/tmp/strata-chunk-store-XXXXXX");
	CHECK(mkdtemp(e.dir));
	env_open(&e);
	struct chunk_store *other;
	CHECK_EQ(chunk_store_open(e.dir, e.pool, NULL, &other), -EBUSY);

	test_basic(&e);
	test_corruption(&e);
	test_open_cache(&e);
	test_write_sums(&e);
	test_concurrent_read(&e);
	test_leftover_tmp(&e);
	test_put_pieces(&e);
	test_crash(&e);
	chunk_store_free(e.cs);
	uring_pool_free(e.pool);

	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e.dir);
	CHECK_EQ(system(cmd), 0);
	return 0;
}
