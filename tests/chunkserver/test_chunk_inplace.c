/* test_chunk_inplace.c — unit tests of the chunk engine's in-place writes
 * (chunkserver/chunk_inplace.c, chunk_journal.c, chunk_format.c):
 *  - cost: an append or an overwrite keeps the chunk's file (same inode) and
 *    writes about the bytes it writes, whatever the chunk's size; so do
 *    synced ones;
 *  - crash at every step: for appends, writes after a gap, overwrites inside
 *    and across the end, truncates both ways, whole rewrites, and a large
 *    chunk (two-page header slots), a child process is stopped at its n-th
 *    mutating step with that step's write torn (chunk_store_fault_after),
 *    for n = 1, 2, ... until the operation completes; each time the target
 *    reopened (journal replay) holds exactly the old or the new chunk, with
 *    its version, no block fails its checksum, and the chunk takes another
 *    write;
 *  - a journaled write whose new header slot was lost while the old slot was
 *    already marked superseded (a power cut) is finished from the journal;
 *  - a damaged current header reads as -EIO, not as the previous version;
 *  - the journal's checkpoint (more than its 64 MiB of overwrites), and a
 *    crash after it;
 *  - format 1: a chunk file of the old format is read, converted by a write;
 *    a target without <target>/format opens (and gets one); a target or
 *    journal of a newer format is refused with -EPROTONOSUPPORT. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "chunkserver/chunk_format.h"
#include "chunkserver/chunk_io.h"
#include "chunkserver/chunk_store.h"
#include "chunkserver/uring_pool.h"
#include "fs/cleanup.h"
#include "fs/wire.h"
#include "tests/testutil.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define BS CHUNK_BLOCK_SIZE

struct env {
	char dir[256];
	struct uring_pool *pool;
	struct chunk_store *cs;
	int corrupt;
};

static void count_corrupt(void *arg, const struct chunk_corruption *c)
{
	(void)c;
	((struct env *)arg)->corrupt++;
}

static void env_open(struct env *e)
{
	struct chunk_store_opts o = {.target_id = 7, .on_corrupt = count_corrupt, .arg = e};
	CHECK_EQ(chunk_store_open(e->dir, e->pool, &o, &e->cs), 0);
}

static void env_close(struct env *e)
{
	chunk_store_free(e->cs);
	e->cs = NULL;
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

static ino_t file_ino(const struct env *e, uint64_t ino, uint32_t index)
{
	char p[512];
	chunk_file(e, ino, index, p, sizeof(p));
	struct stat st;
	CHECK_EQ(stat(p, &st), 0);
	return st.st_ino;
}

/* A chunk's contents in memory, as the engine should hold it. */
struct model {
	uint8_t *b; /* CHUNK_STORE_MAX_LEN */
	uint32_t len;
	uint64_t version;
};

static void model_write(struct model *m, uint32_t off, uint32_t len, const uint8_t *data)
{
	if (off > m->len)
		memset(m->b + m->len, 0, off - m->len);
	memcpy(m->b + off, data, len);
	if (off + len > m->len)
		m->len = off + len;
	m->version++;
}

static void model_truncate(struct model *m, uint32_t len)
{
	if (len > m->len)
		memset(m->b + m->len, 0, len - m->len);
	m->len = len;
	m->version++;
}

static bool chunk_is(struct env *e, uint64_t ino, const struct model *m, uint8_t *buf)
{
	struct chunk_meta st;
	if (m->version == 0) /* none */
		return chunk_store_stat(e->cs, ino, 0, &st) == -ENOENT;
	if (chunk_store_stat(e->cs, ino, 0, &st) < 0 || st.version != m->version ||
	    st.length != m->len)
		return false;
	ssize_t n = chunk_store_read(e->cs, ino, 0, 0, CHUNK_STORE_MAX_LEN, buf);
	return n == (ssize_t)m->len && memcmp(buf, m->b, m->len) == 0;
}

/* ---- cost ------------------------------------------------------------------ */

static uint64_t wchar(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	char line[128];
	uint64_t v = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "wchar: %llu", (unsigned long long *)&v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* An append and an overwrite keep the file and write about their bytes
 * (main's copy-on-write engine made a new file of the whole chunk). */
static void test_cost(struct env *e)
{
	uint8_t *data = malloc(48 * MiB);
	CHECK(data);
	fill(data, 48 * MiB, 3);
	for (uint32_t off = 0; off < 48 * MiB; off += 4 * MiB)
		CHECK_EQ(chunk_store_write(e->cs, 10, 0, off, 4 * MiB, data + off, 0, NULL), 0);
	ino_t before = file_ino(e, 10, 0);
	uint64_t w0 = wchar();
	struct chunk_meta m;
	CHECK_EQ(chunk_store_write(e->cs, 10, 0, 48 * MiB, KiB, data, 0, &m), 0);
	uint64_t w1 = wchar();
	CHECK_EQ(m.length, 48 * MiB + KiB);
	CHECK_EQ(file_ino(e, 10, 0), before);
	/* the data and one header slot (8 B per 64 KiB block: 6 KiB) */
	fprintf(stderr, "cost: a 1 KiB append to a 48 MiB chunk wrote %llu bytes\n",
		(unsigned long long)(w1 - w0));
	CHECK(w1 - w0 < 16 * KiB);
	CHECK_EQ(chunk_store_write(e->cs, 10, 0, 20 * MiB + 3, 4 * KiB, data, 0, &m), 0);
	uint64_t w2 = wchar();
	fprintf(stderr, "cost: a 4 KiB overwrite wrote %llu bytes (journal and in place)\n",
		(unsigned long long)(w2 - w1));
	CHECK(w2 - w1 < 32 * KiB);
	CHECK_EQ(file_ino(e, 10, 0), before);
	CHECK_EQ(chunk_store_truncate(e->cs, 10, 0, 30 * MiB + 5, &m), 0);
	CHECK_EQ(file_ino(e, 10, 0), before);
	CHECK(wchar() - w2 < 16 * KiB);
	uint8_t *buf = malloc(64 * KiB);
	CHECK(buf);
	CHECK_EQ(chunk_store_read(e->cs, 10, 0, 20 * MiB, 64 * KiB, buf), 64 * KiB);
	CHECK(memcmp(buf, data + 20 * MiB, 3) == 0 && memcmp(buf + 3, data, 4 * KiB) == 0);
	CHECK(memcmp(buf + 3 + 4 * KiB, data + 20 * MiB + 3 + 4 * KiB, 64 * KiB - 3 - 4 * KiB) ==
	      0);
	CHECK_EQ(chunk_store_remove(e->cs, 10, 0), 1);
	free(buf);
	free(data);
}

/* Synced appends and overwrites (CHUNK_STORE_SYNC) are in place too. */
static void test_sync(struct env *e)
{
	uint8_t a[2 * BS], buf[3 * BS];
	fill(a, sizeof(a), 11);
	CHECK_EQ(chunk_store_write(e->cs, 11, 0, 0, BS + 5, a, CHUNK_STORE_SYNC, NULL), 0);
	ino_t fi = file_ino(e, 11, 0);
	CHECK_EQ(
	    chunk_store_write(e->cs, 11, 0, BS + 5, BS - 5, a + BS + 5, CHUNK_STORE_SYNC, NULL), 0);
	uint8_t b[100];
	fill(b, sizeof(b), 12);
	struct chunk_meta m;
	CHECK_EQ(chunk_store_write(e->cs, 11, 0, BS - 50, sizeof(b), b, CHUNK_STORE_SYNC, &m), 0);
	memcpy(a + BS - 50, b, sizeof(b));
	CHECK(m.version == 3 && m.length == 2 * BS);
	CHECK_EQ(file_ino(e, 11, 0), fi);
	CHECK_EQ(chunk_store_read(e->cs, 11, 0, 0, sizeof(buf), buf), 2 * BS);
	CHECK(memcmp(buf, a, 2 * BS) == 0);
	CHECK_EQ(chunk_store_remove(e->cs, 11, 0), 1);
}

/* ---- crash at every step ---------------------------------------------------- */

enum op_kind { OP_WRITE, OP_TRUNCATE };
struct scenario {
	const char *name;
	uint32_t old_len;
	int old_writes; /* the old chunk: written in this many pieces (in place after the first) */
	enum op_kind kind;
	uint32_t off, len; /* OP_WRITE: the range; OP_TRUNCATE: len */
	unsigned flags;	   /* OP_WRITE: CHUNK_STORE_SYNC */
};

static void make_old(struct env *e, uint64_t ino, const struct scenario *s, struct model *m)
{
	m->len = 0;
	m->version = 0;
	uint32_t piece = (s->old_len + s->old_writes - 1) / s->old_writes;
	for (uint32_t off = 0; off < s->old_len; off += piece) {
		uint32_t n = STRATA_MIN(piece, s->old_len - off);
		uint8_t *p = malloc(n);
		CHECK(p);
		fill(p, n, (uint32_t)ino + off);
		CHECK_EQ(chunk_store_write(e->cs, ino, 0, off, n, p, 0, NULL), 0);
		model_write(m, off, n, p);
		free(p);
	}
}

/* In a forked child: the target opened as a chunkserver would (exit 2 if
 * it cannot be). */
static struct chunk_store *child_store(const struct env *e)
{
	struct uring_pool *pool;
	struct chunk_store *cs;
	if (uring_pool_new(1, 16, &pool) < 0 || chunk_store_open(e->dir, pool, NULL, &cs) < 0)
		_exit(2);
	return cs;
}

/* Runs s's op in a child stopped at its step-th mutating step. Returns true
 * if the op completed (the child was not stopped). */
static bool run_child(struct env *e, uint64_t ino, const struct scenario *s, const uint8_t *data,
		      int step)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct chunk_store *cs = child_store(e);
		chunk_store_fault_after(cs, step);
		int r = s->kind == OP_WRITE
			    ? chunk_store_write(cs, ino, 0, s->off, s->len, data, s->flags, NULL)
			    : chunk_store_truncate(cs, ino, 0, s->len, NULL);
		_exit(r == 0 ? 0 : 3);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	CHECK(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == CHUNK_FAULT_EXIT);
	return WEXITSTATUS(st) == 0;
}

static void sweep(struct env *e, const struct scenario *s, uint64_t *next_ino, struct model *old,
		  struct model *new, uint8_t *buf)
{
	uint8_t *data = malloc(STRATA_MAX(s->len, 100u));
	CHECK(data);
	fill(data, STRATA_MAX(s->len, 100u), 999);
	int olds = 0, news = 0;
	for (int step = 1;; step++) {
		CHECK(step < 200);
		uint64_t ino = (*next_ino)++;
		make_old(e, ino, s, old);
		memcpy(new->b, old->b, old->len);
		new->len = old->len, new->version = old->version;
		if (s->kind == OP_WRITE)
			model_write(new, s->off, s->len, data);
		else
			model_truncate(new, s->len);
		env_close(e);
		bool done = run_child(e, ino, s, data, step);
		e->corrupt = 0;
		env_open(e);
		bool is_old = chunk_is(e, ino, old, buf), is_new = chunk_is(e, ino, new, buf);
		if (!(is_old || is_new) || e->corrupt)
			fprintf(stderr, "%s: crash at step %d: neither old nor new (%d reports)\n",
				s->name, step, e->corrupt);
		CHECK(is_old || is_new);
		CHECK(!done || is_new);
		CHECK_EQ(e->corrupt, 0);
		olds += is_old, news += is_new && !done;
		/* the recovered chunk takes another write */
		struct model *m = is_new ? new : old;
		uint32_t at = m->len > 10 ? m->len - 10 : 0;
		CHECK_EQ(chunk_store_write(e->cs, ino, 0, at, 100, data, 0, NULL), 0);
		model_write(m, at, 100, data);
		CHECK(chunk_is(e, ino, m, buf));
		CHECK_EQ(chunk_store_remove(e->cs, ino, 0), 1);
		if (done) {
			fprintf(stderr, "%-28s %2d steps: old after %d crashes, new after %d\n",
				s->name, step - 1, olds, news);
			break;
		}
	}
	free(data);
}

static void test_crash_steps(struct env *e)
{
	const uint32_t L = 3 * BS + 100;
	const struct scenario sc[] = {
	    {"append", L, 2, OP_WRITE, L, KiB},
	    {"append after a gap", L, 2, OP_WRITE, L + BS + 7, 5000},
	    {"overwrite inside", L, 2, OP_WRITE, BS - 100, 300},
	    {"overwrite across the end", L, 2, OP_WRITE, L - 50, 2 * BS},
	    {"overwrite whole blocks", L, 1, OP_WRITE, BS, 2 * BS},
	    {"truncate shorter", L, 2, OP_TRUNCATE, 0, BS + 3},
	    {"truncate longer", L, 2, OP_TRUNCATE, 0, L + 3 * BS + 5},
	    {"truncate to 0", L, 1, OP_TRUNCATE, 0, 0},
	    {"rewrite whole", L, 1, OP_WRITE, 0, L + 10},
	    {"new chunk", 0, 1, OP_WRITE, 100, 3000},
	    {"append, 40 MiB chunk", 40 * MiB, 4, OP_WRITE, 40 * MiB, KiB},
	    {"overwrite, 40 MiB chunk", 40 * MiB, 4, OP_WRITE, 33 * MiB - 9, 70000},
	    {"append, synced", L, 2, OP_WRITE, L, KiB, CHUNK_STORE_SYNC},
	    {"overwrite, synced", L, 2, OP_WRITE, 5, 3 * BS, CHUNK_STORE_SYNC},
	    {"new chunk, synced", 0, 1, OP_WRITE, 0, 3000, CHUNK_STORE_SYNC},
	};
	struct model old = {.b = malloc(CHUNK_STORE_MAX_LEN)},
		     new = {.b = malloc(CHUNK_STORE_MAX_LEN)};
	uint8_t *buf = malloc(CHUNK_STORE_MAX_LEN);
	CHECK(old.b && new.b &&buf);
	uint64_t ino = 1000;
	for (size_t i = 0; i < ARRAY_SIZE(sc); i++)
		sweep(e, &sc[i], &ino, &old, &new, buf);
	free(old.b);
	free(new.b);
	free(buf);
}

/* ---- superseded slot, damaged header ------------------------------------------- */

static int slot_with_magic(const char *path, const char *magic)
{
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	int found = -1;
	for (int s = 0; s < 2; s++) {
		char m[4];
		CHECK_EQ(pread(fd, m, 4, chunk_slot_off(s)), 4);
		if (memcmp(m, magic, 4) == 0)
			found = s;
	}
	close(fd);
	return found;
}

static void zero_slot(const char *path, int slot)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	static const uint8_t z[CHUNK_V2_SLOT_SIZE];
	CHECK_EQ(pwrite(fd, z, sizeof(z), chunk_slot_off(slot)), (ssize_t)sizeof(z));
	close(fd);
}

/* A power cut after a journaled overwrite can keep the old slot's superseded
 * mark and lose the new slot: the journal finishes the write. Without the
 * journal's record, or for a damaged current slot, the chunk reads -EIO and
 * never as its previous version. */
static void test_superseded(struct env *e)
{
	uint8_t a[3 * BS], b[5000], buf[3 * BS];
	fill(a, sizeof(a), 5);
	fill(b, sizeof(b), 6);
	CHECK_EQ(chunk_store_write(e->cs, 20, 0, 0, sizeof(a), a, 0, NULL), 0);
	CHECK_EQ(chunk_store_write(e->cs, 20, 0, sizeof(a), 10, a, 0, NULL), 0); /* slot 1 */
	env_close(e);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) { /* the overwrite, then a crash before any checkpoint */
		struct chunk_store *cs = child_store(e);
		_exit(chunk_store_write(cs, 20, 0, 100, sizeof(b), b, 0, NULL) == 0 ? 0 : 3);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char p[512];
	chunk_file(e, 20, 0, p, sizeof(p));
	int cur = slot_with_magic(p, "SCHK");
	CHECK_EQ(slot_with_magic(p, "SCHX"), 1 - cur);
	zero_slot(p, cur); /* lost in the power cut */
	env_open(e);
	struct chunk_meta m;
	CHECK_EQ(chunk_store_stat(e->cs, 20, 0, &m), 0);
	CHECK_EQ(m.version, 3);
	CHECK_EQ(chunk_store_read(e->cs, 20, 0, 0, sizeof(buf), buf), sizeof(buf));
	memcpy(a + 100, b, sizeof(b));
	CHECK(memcmp(buf, a, sizeof(a)) == 0);
	CHECK_EQ(e->corrupt, 0);

	/* the current slot damaged, no journal record for it: -EIO, not version 2 */
	CHECK_EQ(chunk_store_write(e->cs, 20, 0, 7, 10, b, 0, NULL), 0);
	cur = slot_with_magic(p, "SCHK");
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, "\xff", 1, chunk_slot_off(cur) + 33), 1);
	close(fd);
	CHECK_EQ(chunk_store_stat(e->cs, 20, 0, &m), -EIO);
	CHECK_EQ(chunk_store_read(e->cs, 20, 0, 0, 10, buf), -EIO);
	CHECK(e->corrupt > 0);
	/* the write's record is still in the journal: the next open rewrites
	 * the slot from it (the superseded one is its base) */
	env_close(e);
	env_open(e);
	CHECK_EQ(chunk_store_stat(e->cs, 20, 0, &m), 0);
	CHECK_EQ(m.version, 4);
	memcpy(a + 7, b, 10);
	CHECK_EQ(chunk_store_read(e->cs, 20, 0, 0, sizeof(buf), buf), sizeof(buf));
	CHECK(memcmp(buf, a, sizeof(a)) == 0);
	/* without a record (the journal was reset by that open) it stays -EIO */
	cur = slot_with_magic(p, "SCHK");
	fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, "\xff", 1, chunk_slot_off(cur) + 33), 1);
	close(fd);
	env_close(e);
	env_open(e);
	CHECK_EQ(chunk_store_stat(e->cs, 20, 0, &m), -EIO);
	/* a resync's put replaces the damaged chunk */
	CHECK_EQ(chunk_store_put(e->cs, 20, 0, a, sizeof(a), 9, &m), 0);
	CHECK_EQ(chunk_store_read(e->cs, 20, 0, 0, sizeof(buf), buf), sizeof(buf));
	CHECK_EQ(chunk_store_remove(e->cs, 20, 0), 1);
	e->corrupt = 0;
}

/* ---- the journal's checkpoint --------------------------------------------------------- */

static uint64_t file_size(const char *dir, const char *name)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	struct stat st;
	CHECK_EQ(stat(p, &st), 0);
	return (uint64_t)st.st_size;
}

/* 100 MiB of overwrites go through the 64 MiB journal (at least one
 * checkpoint); the journal stays within its size, the chunk is right, and
 * it is right after a crash that follows the checkpoint. */
static void test_checkpoint(struct env *e)
{
	struct model m = {.b = malloc(8 * MiB)};
	uint8_t *data = malloc(MiB), *buf = malloc(8 * MiB);
	CHECK(m.b && data && buf);
	fill(m.b, 8 * MiB, 8);
	CHECK_EQ(chunk_store_write(e->cs, 22, 0, 0, 8 * MiB, m.b, 0, NULL), 0);
	m.len = 8 * MiB, m.version = 1;
	for (int i = 0; i < 100; i++) {
		uint32_t off = (uint32_t)(i * 77777) % (7 * MiB);
		fill(data, MiB, 100 + i);
		CHECK_EQ(chunk_store_write(e->cs, 22, 0, off, MiB, data, 0, NULL), 0);
		model_write(&m, off, MiB, data);
	}
	CHECK(file_size(e->dir, "journal") <= 64 * MiB);
	CHECK(chunk_is(e, 22, &m, buf));
	env_close(e);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct chunk_store *cs = child_store(e);
		for (int i = 0; i < 70; i++) { /* past one checkpoint */
			fill(data, MiB, 300 + i);
			if (chunk_store_write(cs, 22, 0, (uint32_t)i * 100000, MiB, data, 0, NULL) <
			    0)
				_exit(3);
		}
		/* the next overwrite: its record (steps 1, 2) complete, torn in place */
		chunk_store_fault_after(cs, 3);
		fill(data, MiB, 400);
		chunk_store_write(cs, 22, 0, 5, MiB, data, 0, NULL);
		_exit(4);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == CHUNK_FAULT_EXIT);
	for (int i = 0; i < 70; i++) {
		fill(data, MiB, 300 + i);
		model_write(&m, (uint32_t)i * 100000, MiB, data);
	}
	env_open(e);
	fill(data, MiB, 400);
	struct model n = {.b = malloc(8 * MiB), .len = m.len, .version = m.version};
	CHECK(n.b);
	memcpy(n.b, m.b, m.len);
	model_write(&n, 5, MiB, data);
	CHECK(chunk_is(e, 22, &n, buf)); /* its journal record was complete */
	CHECK_EQ(e->corrupt, 0);
	CHECK_EQ(chunk_store_remove(e->cs, 22, 0), 1);
	free(n.b);
	free(m.b);
	free(data);
	free(buf);
}

/* ---- format 1 --------------------------------------------------------------------- */

/* Writes a format-1 chunk file (the layout before format 2: one header at 0,
 * data at its length rounded up to 4 KiB) holding data[0..len) at version. */
static void write_v1(const char *dir, uint64_t ino, uint32_t index, const uint8_t *data,
		     uint32_t len, uint64_t version)
{
	uint32_t nb = chunk_nblocks(len), hl = (64 + 8 * nb + 4095) / 4096 * 4096;
	uint8_t *raw = calloc(1, hl);
	CHECK(raw);
	le32_put(raw, 0x4b484353u);
	le16_put(raw + 4, 1);
	le32_put(raw + 8, hl);
	le32_put(raw + 12, nb);
	le64_put(raw + 16, ino);
	le32_put(raw + 24, index);
	le32_put(raw + 28, BS);
	le64_put(raw + 32, version);
	le32_put(raw + 40, len);
	for (uint32_t b = 0; b < nb; b++)
		le64_put(raw + 64 + 8 * b,
			 XXH3_64bits(data + (size_t)b * BS, chunk_block_len(len, b)));
	le64_put(raw + 48, XXH3_64bits(raw + 64, 8 * (size_t)nb));
	le64_put(raw + 56, XXH3_64bits_withSeed(raw + 64, 8 * (size_t)nb, XXH3_64bits(raw, 56)));
	char p[512];
	snprintf(p, sizeof(p), "%s/chunks", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/chunks/%02x", dir, (unsigned)(ino & 0xff));
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/chunks/%02x/%016llx", dir, (unsigned)(ino & 0xff),
		 (unsigned long long)ino);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/chunks/%02x/%016llx/%08x", dir, (unsigned)(ino & 0xff),
		 (unsigned long long)ino, index);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, raw, hl, 0), (ssize_t)hl);
	CHECK_EQ(pwrite(fd, data, len, hl), (ssize_t)len);
	close(fd);
	free(raw);
}

static void write_format(const char *dir, uint32_t format)
{
	uint8_t raw[32] = {0};
	le32_put(raw, 0x544d4653u);
	le16_put(raw + 4, 1);
	le32_put(raw + 8, 32);
	le32_put(raw + 12, format);
	le64_put(raw + 24, XXH3_64bits(raw, 24));
	char p[512];
	snprintf(p, sizeof(p), "%s/format", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
	close(fd);
}

/* A target of the old format (chunk files of format 1, no <target>/format)
 * opens; its chunks read and stat as they were; a write converts one; a
 * target or journal of a newer format is refused. */
static void test_format1(struct uring_pool *pool)
{
	struct env e = {.pool = pool};
	snprintf(e.dir, sizeof(e.dir), "/tmp/strata-chunk-v1-XXXXXX");
	CHECK(mkdtemp(e.dir));
	uint32_t len = 600 * BS + 123; /* a v1 header of 2 pages */
	uint8_t *data = malloc(len + KiB), *buf = malloc(len + KiB);
	CHECK(data && buf);
	fill(data, len, 42);
	write_v1(e.dir, 5, 2, data, len, 17);
	write_v1(e.dir, 5, 3, data, 100, 4);
	env_open(&e);
	CHECK(file_size(e.dir, "format") == 32);
	struct chunk_meta m, m2;
	CHECK_EQ(chunk_store_stat(e.cs, 5, 2, &m), 0);
	CHECK(m.version == 17 && m.length == len);
	CHECK_EQ(chunk_store_read(e.cs, 5, 2, 0, len, buf), len);
	CHECK(memcmp(buf, data, len) == 0);
	CHECK_EQ(chunk_store_read(e.cs, 5, 2, 300 * BS + 5, 100, buf), 100);
	CHECK(memcmp(buf, data + 300 * BS + 5, 100) == 0);
	/* the same bytes written now: same checksum (resync compares them) */
	CHECK_EQ(chunk_store_put(e.cs, 6, 0, data, len, 17, &m2), 0);
	CHECK(m2.checksum == m.checksum);
	/* an append converts the chunk to format 2 */
	fill(data + len, KiB, 43);
	CHECK_EQ(chunk_store_write(e.cs, 5, 2, len, KiB, data + len, 0, &m), 0);
	CHECK(m.version == 18 && m.length == len + KiB);
	char p[512];
	chunk_file(&e, 5, 2, p, sizeof(p));
	CHECK_EQ(slot_with_magic(p, "SCHK"), 0);
	CHECK_EQ(chunk_store_read(e.cs, 5, 2, 0, len + KiB, buf), len + KiB);
	CHECK(memcmp(buf, data, len + KiB) == 0);
	CHECK_EQ(chunk_store_truncate(e.cs, 5, 3, 50, &m), 0);
	CHECK(m.version == 5 && m.length == 50);
	CHECK_EQ(chunk_store_read(e.cs, 5, 3, 0, 100, buf), 50);
	CHECK(memcmp(buf, data, 50) == 0);
	CHECK_EQ(e.corrupt, 0);
	env_close(&e);

	write_format(e.dir, 3);
	struct chunk_store *cs;
	CHECK_EQ(chunk_store_open(e.dir, pool, NULL, &cs), -EPROTONOSUPPORT);
	write_format(e.dir, 2);
	char jp[512];
	snprintf(jp, sizeof(jp), "%s/journal", e.dir);
	int fd = open(jp, O_RDWR);
	CHECK(fd >= 0);
	uint8_t jh[64];
	CHECK_EQ(pread(fd, jh, 64, 0), 64);
	le16_put(jh + 4, 2); /* a newer journal */
	le64_put(jh + 56, XXH3_64bits(jh, 56));
	CHECK_EQ(pwrite(fd, jh, 64, 0), 64);
	close(fd);
	CHECK_EQ(chunk_store_open(e.dir, pool, NULL, &cs), -EPROTONOSUPPORT);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e.dir);
	CHECK_EQ(system(cmd), 0);
	free(data);
	free(buf);
}

int main(void)
{
	struct env e = {0};
	int r = uring_pool_new(2, 32, &e.pool);
	if (r < 0) {
		fprintf(stderr, "skip: io_uring unavailable: %s\n", strerror(-r));
		return 77;
	}
	snprintf(e.dir, sizeof(e.dir), "/tmp/strata-chunk-inplace-XXXXXX");
	CHECK(mkdtemp(e.dir));
	env_open(&e);
	test_cost(&e);
	test_sync(&e);
	test_superseded(&e);
	test_checkpoint(&e);
	test_crash_steps(&e);
	env_close(&e);
	test_format1(e.pool);
	uring_pool_free(e.pool);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e.dir);
	CHECK_EQ(system(cmd), 0);
	return 0;
}
