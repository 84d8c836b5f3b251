/* test_blobcache.c — unit test of fuse/blobcache.c, the verified lazy read
 * path of image blobs: reads of every shape return the blob's bytes (zeros
 * in padding), repeated reads hit the cache, a chunk altered in the store
 * is -EIO (never wrong bytes), the cache survives a reopen (and re-verifies
 * what it finds on disk), a small size limit evicts in LRU order, and
 * pinned table digests persist and retire a table attached before them. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <openssl/sha.h>

#include "fuse/blobcache.h"
#include "imagesvc/image_auth.h"
#include "tests/testutil.h"
#include "fs/wire.h"

#define NREC 24

struct store {
	uint8_t *blob;
	size_t size;
	uint64_t fetched;
	int fetches;
};

static int fetch(void *ctx, uint64_t off, size_t len, void *buf)
{
	struct store *s = ctx;
	if (off + len > s->size)
		return -EIO;
	memcpy(buf, s->blob + off, len);
	s->fetched += len;
	s->fetches++;
	return 0;
}

/* Builds a blob of NREC chunks of varied sizes and its digest table. */
static uint8_t *build(struct store *s, size_t *tlen)
{
	static const uint32_t sizes[] = {1 << 20, 5000, 4096, 70000, 1, 300000, 12288, 999999};
	uint8_t *tab = calloc(1, BLOB_TABLE_HDR_SIZE + NREC * BLOB_TABLE_REC_SIZE);
	size_t off = 0;
	s->blob = calloc(1, 64 << 20);
	le32_put(tab, BLOB_TABLE_MAGIC);
	le16_put(tab + 4, 1);
	le16_put(tab + 6, BLOB_TABLE_HDR_SIZE);
	le32_put(tab + 8, BLOB_TABLE_REC_SIZE);
	for (int i = 0; i < NREC; i++) {
		uint32_t len = sizes[i % 8];
		for (uint32_t k = 0; k < len; k++)
			s->blob[off + k] = (uint8_t)(k * 31 + i * 7 + 1);
		uint8_t *r = tab + BLOB_TABLE_HDR_SIZE + i * BLOB_TABLE_REC_SIZE;
		SHA256(s->blob + off, len, r);
		le64_put(r + 32, off);
		le32_put(r + 40, len);
		off += (len + 4095) / 4096 * 4096;
		if (i == 10)
			off += 8192; /* a gap */
	}
	s->size = off;
	*tlen = BLOB_TABLE_HDR_SIZE + NREC * BLOB_TABLE_REC_SIZE;
	return tab;
}

static void check_range(struct sfs_blobcache *bc, const struct sfs_blob_table *t, struct store *s,
			uint64_t off, size_t len)
{
	uint8_t *buf = malloc(len);
	CHECK_EQ(sfs_blobcache_read(bc, t, off, len, buf, fetch, s), 0);
	CHECK(memcmp(buf, s->blob + off, len) == 0);
	free(buf);
}

struct par {
	struct sfs_blobcache *bc;
	const struct sfs_blob_table *t;
	struct store *s;
	int ok;
};

static void *par_read(void *arg)
{
	struct par *p = arg;
	uint8_t *buf = malloc(p->s->size);
	p->ok = buf && sfs_blobcache_read(p->bc, p->t, 0, p->s->size, buf, fetch, p->s) == 0 &&
		memcmp(buf, p->s->blob, p->s->size) == 0;
	free(buf);
	return NULL;
}

/* Eight readers of the whole blob at once: every chunk is fetched once. */
static void check_parallel(const char *dir, const uint8_t *tab, size_t tlen, struct store *s)
{
	struct sfs_blobcache *bc;
	struct sfs_blob_table *t;
	struct sfs_blobcache_stats st;
	pthread_t tid[8];
	struct par p[8];
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s/chunks", dir);
	CHECK_EQ(system(cmd), 0);
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);
	CHECK_EQ(sfs_blob_table_parse(tab, tlen, &t), 0);
	CHECK_EQ(sfs_blobcache_attach(bc, 7, t), 0);
	for (int i = 0; i < 8; i++) {
		p[i] = (struct par){bc, t, s, 0};
		CHECK_EQ(pthread_create(&tid[i], NULL, par_read, &p[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(tid[i], NULL);
		CHECK(p[i].ok);
	}
	sfs_blobcache_get_stats(bc, &st);
	CHECK_EQ(st.misses, NREC);
	CHECK(st.fetched_bytes <= s->size);
	sfs_blobcache_free(bc);
}

/* Pinned table digests (blobcache.h): the table's SHA-256, the pin kept
 * across a reopen (a successor checks too), and a retired table found no
 * more while its pointer stays valid. */
static void check_pins(const char *dir, const uint8_t *tab, size_t tlen)
{
	struct sfs_blobcache *bc;
	struct sfs_blob_table *t;
	uint8_t sha[32], got[32], other[32];
	CHECK(!strcmp(SFS_BLOB_PIN_XATTR, IMG_TABLE_PIN_XATTR)); /* one contract */
	SHA256(tab, tlen, sha);
	memset(other, 0x11, sizeof(other));
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);
	CHECK_EQ(sfs_blob_table_parse(tab, tlen, &t), 0);
	CHECK(!memcmp(sfs_blob_table_sha(t), sha, 32));
	CHECK(!sfs_blobcache_pinned(bc, 77, got));
	CHECK_EQ(sfs_blobcache_pin(bc, 77, other), 0);
	CHECK_EQ(sfs_blobcache_pin(bc, 78, sha), 0);
	CHECK(sfs_blobcache_pinned(bc, 77, got) && !memcmp(got, other, 32));
	CHECK_EQ(sfs_blobcache_attach(bc, 77, t), 0);
	sfs_blobcache_detach(bc, 77);
	CHECK(sfs_blobcache_table(bc, 77) == NULL);
	CHECK(sfs_blob_table_sha(t)[0] == sha[0]); /* retired, not freed */
	sfs_blobcache_free(bc);
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);
	CHECK(sfs_blobcache_pinned(bc, 77, got) && !memcmp(got, other, 32));
	CHECK(sfs_blobcache_pinned(bc, 78, got) && !memcmp(got, sha, 32));
	CHECK_EQ(sfs_blobcache_pin(bc, 77, sha), 0); /* a new pin replaces the old */
	CHECK(sfs_blobcache_pinned(bc, 77, got) && !memcmp(got, sha, 32));
	sfs_blobcache_free(bc);
}

int main(void)
{
	char dir[] = "/tmp/test_blobcache.XXXXXX";
	struct store s = {0};
	struct sfs_blobcache *bc;
	struct sfs_blob_table *t;
	size_t tlen;
	uint8_t *tab = build(&s, &tlen);
	struct sfs_blobcache_stats st;

	CHECK(mkdtemp(dir));
	CHECK_EQ(sfs_blob_table_parse(tab, tlen, &t), 0);
	CHECK_EQ(sfs_blob_table_parse(tab, tlen - 1, &(struct sfs_blob_table *){0}), -EBADMSG);
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);
	CHECK_EQ(sfs_blobcache_attach(bc, 42, t), 0);
	CHECK(sfs_blobcache_table(bc, 42) == t);
	CHECK(sfs_blobcache_table(bc, 43) == NULL);

	/* Reads of every shape, then the whole blob: all from the store once. */
	srand(7);
	for (int i = 0; i < 300; i++) {
		uint64_t off = (uint64_t)rand() % s.size;
		size_t len = 1 + (size_t)rand() % (1 << 20);
		if (off + len > s.size)
			len = s.size - off;
		check_range(bc, t, &s, off, len);
	}
	for (uint64_t off = 0; off < s.size; off += 1 << 20)
		check_range(bc, t, &s, off, off + (1 << 20) > s.size ? s.size - off : 1 << 20);
	uint64_t before = s.fetched;
	for (uint64_t off = 0; off < s.size; off += 131072)
		check_range(bc, t, &s, off, off + 131072 > s.size ? s.size - off : 131072);
	CHECK_EQ(s.fetched, before); /* everything was cached */
	sfs_blobcache_get_stats(bc, &st);
	CHECK(st.hits > 0 && st.bad == 0 && st.entries == NREC);

	/* Reopen: the cache is still there and serves without fetching. */
	sfs_blobcache_free(bc);
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);
	CHECK_EQ(sfs_blob_table_parse(tab, tlen, &t), 0);
	CHECK_EQ(sfs_blobcache_attach(bc, 42, t), 0);
	sfs_blobcache_get_stats(bc, &st);
	CHECK_EQ(st.entries, NREC);
	before = s.fetched;
	check_range(bc, t, &s, 0, (size_t)s.size);
	CHECK_EQ(s.fetched, before);

	/* A cache file damaged on disk is re-verified after a restart: refetched. */
	sfs_blobcache_free(bc);
	{
		char p[512], hex[65];
		const uint8_t *d = tab + BLOB_TABLE_HDR_SIZE + 3 * BLOB_TABLE_REC_SIZE;
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", d[i]);
		snprintf(p, sizeof(p), "%s/chunks/%.2s/%s", dir, hex, hex);
		int fd = open(p, O_WRONLY);
		CHECK(fd >= 0);
		CHECK(pwrite(fd, "X", 1, 10) == 1);
		close(fd);
	}
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);
	CHECK_EQ(sfs_blob_table_parse(tab, tlen, &t), 0);
	CHECK_EQ(sfs_blobcache_attach(bc, 42, t), 0);
	before = s.fetched;
	check_range(bc, t, &s, le64_get(tab + BLOB_TABLE_HDR_SIZE + 3 * BLOB_TABLE_REC_SIZE + 32),
		    4096);
	CHECK(s.fetched > before);

	/* A chunk altered in the store (not cached yet): EIO, never wrong bytes. */
	sfs_blobcache_free(bc);
	CHECK_EQ(system("rm -rf /tmp/test_blobcache.*/chunks"), 0);
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);
	CHECK_EQ(sfs_blob_table_parse(tab, tlen, &t), 0);
	CHECK_EQ(sfs_blobcache_attach(bc, 42, t), 0);
	uint64_t off5 = le64_get(tab + BLOB_TABLE_HDR_SIZE + 5 * BLOB_TABLE_REC_SIZE + 32);
	s.blob[off5 + 100] ^= 0xff;
	uint8_t *buf = malloc(1 << 20);
	memset(buf, 0xaa, 1 << 20);
	CHECK_EQ(sfs_blobcache_read(bc, t, off5, 4096, buf, fetch, &s), -EIO);
	CHECK_EQ(sfs_blobcache_read(bc, t, off5 + 200000, 4096, buf, fetch, &s), -EIO);
	sfs_blobcache_get_stats(bc, &st);
	CHECK(st.bad >= 2);
	s.blob[off5 + 100] ^= 0xff;
	check_range(bc, t, &s, off5, 4096);

	sfs_blobcache_free(bc);
	check_parallel(dir, tab, tlen, &s);
	CHECK_EQ(sfs_blobcache_open(dir, 1ull << 30, &bc), 0);

	/* Eviction: a 2.5 MiB limit holds at most that; reads stay correct. */
	sfs_blobcache_free(bc);
	CHECK_EQ(sfs_blobcache_open(dir, 5u << 19, &bc), 0);
	sfs_blobcache_get_stats(bc, &st);
	CHECK(st.bytes <= (5u << 19));
	CHECK_EQ(sfs_blob_table_parse(tab, tlen, &t), 0);
	CHECK_EQ(sfs_blobcache_attach(bc, 42, t), 0);
	for (int pass = 0; pass < 2; pass++)
		check_range(bc, t, &s, 0, (size_t)s.size);
	sfs_blobcache_get_stats(bc, &st);
	CHECK(st.bytes <= (5u << 19));
	CHECK(st.evicted > 0);

	free(buf);
	sfs_blobcache_free(bc);
	check_pins(dir, tab, tlen);
	free(tab);
	free(s.blob);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
	printf("blobcache: ok\n");
	return 0;
}
