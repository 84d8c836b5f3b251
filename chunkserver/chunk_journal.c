/* chunk_journal.c — the write-ahead journal of a target (chunk_journal.h).
 *
 * File layout (little-endian):
 *   [0, 64)      header: magic "SJNL", version 1, length 64, generation,
 *                XXH3-64 of the bytes before it (at 56)
 *   [4096, ...)  records, 8-byte aligned, one after the other:
 *     0 magic "SJRC"  4 version (1)  6 kind (1: write)  8 record length
 *     12 nsums  16 generation  24 sequence (1, 2, ... per generation)
 *     32 ino  40 index  44 off  48 len  52 data length  56 chunk version
 *     64 incarnation  72 first block  76 npieces  80 reserved
 *     88 checksum: XXH3-64 of the arrays seeded with XXH3-64 of bytes 0..87
 *     96 nsums block checksums, npieces data piece checksums (64 KiB pieces
 *        of the data, from its first byte), then len bytes of data
 *
 * Invariants:
 *  J1. Records are written one at a time under mu, each at the end of the
 *      previous one; the tail moves only past a complete record. A scan
 *      takes records while each has the header's generation, the next
 *      sequence number and matching checksums: a crash leaves a prefix of
 *      complete records, and at most one cut short after it.
 *  J2. The journal is reset (a new random generation in its header) only
 *      when no record is in flight and the target was synced after every
 *      record's in-place update: a record is dropped only once the journal
 *      is no longer needed to finish or keep its write.
 *  J3. A synced append returns after fdatasync of the journal, which also
 *      makes every earlier record durable (they precede it in the file). */
#include "chunkserver/chunk_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "chunkserver/chunk_format.h"
#include "chunkserver/chunk_io.h"
#include "fs/cleanup.h"
#include "fs/wire.h"

#define JNL_MAGIC 0x4c4e4a53u  /* "SJNL" */
#define JREC_MAGIC 0x43524a53u /* "SJRC" */
#define JNL_VERSION 1
#define JNL_HDR 64
#define JNL_START 4096u
#define JREC_FIXED 96
#define JREC_WRITE 1

struct chunk_journal {
	int fd, target_fd;
	struct chunk_fault *fault;
	pthread_mutex_t mu; /* everything below */
	pthread_cond_t idle;
	uint64_t gen, seq; /* seq: of the last record */
	uint64_t tail;
	int inflight; /* records appended whose in-place update is not done */
};

static uint64_t random_gen(void)
{
	uint64_t v = 0;
	while (v == 0)
		if (getrandom(&v, sizeof(v), 0) != sizeof(v))
			v = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
	return v;
}

static void hdr_encode(uint8_t raw[JNL_HDR], uint64_t gen)
{
	memset(raw, 0, JNL_HDR);
	le32_put(raw + 0, JNL_MAGIC);
	le16_put(raw + 4, JNL_VERSION);
	le32_put(raw + 8, JNL_HDR);
	le64_put(raw + 16, gen);
	le64_put(raw + 56, XXH3_64bits(raw, 56));
}

/* Writes a new generation's header and makes it durable (J2). */
static int write_gen(struct chunk_journal *j)
{
	uint8_t raw[JNL_HDR];
	uint64_t gen = random_gen();
	hdr_encode(raw, gen);
	int r = chunk_io_pwrite(j->fault, j->fd, raw, sizeof(raw), 0);
	if (r == 0)
		r = chunk_io_fdatasync(j->fault, j->fd);
	if (r < 0)
		return r;
	j->gen = gen;
	j->seq = 0;
	j->tail = JNL_START;
	return 0;
}

void chunk_journal_free(struct chunk_journal *j)
{
	if (!j)
		return;
	if (j->fd >= 0)
		close(j->fd);
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->idle);
	free(j);
}

/* Reads the header: 1 with *gen if valid, 0 if absent or torn (a reset cut
 * short, J2: nothing in the file is needed), -EPROTONOSUPPORT or -errno. */
static int hdr_read(int fd, uint64_t *gen)
{
	uint8_t raw[JNL_HDR];
	int r = chunk_io_pread(fd, raw, sizeof(raw), 0);
	if (r == -EIO)
		return 0;
	if (r < 0)
		return r;
	if (le32_get(raw) != JNL_MAGIC || le64_get(raw + 56) != XXH3_64bits(raw, 56))
		return 0;
	if (le16_get(raw + 4) > JNL_VERSION)
		return -EPROTONOSUPPORT;
	*gen = le64_get(raw + 16);
	return 1;
}

int chunk_journal_open(int target_fd, struct chunk_fault *fault, struct chunk_journal **ret)
{
	struct chunk_journal *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->idle, NULL);
	j->target_fd = target_fd;
	j->fault = fault;
	j->fd = openat(target_fd, "journal", O_RDWR | O_CLOEXEC);
	bool made = j->fd < 0 && errno == ENOENT;
	if (made)
		j->fd = openat(target_fd, "journal", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	int r = j->fd < 0 ? -errno : 0;
	if (r == 0 && made && (r = write_gen(j)) == 0 && fsync(target_fd) < 0)
		r = -errno;
	if (r == 0 && !made) {
		r = hdr_read(j->fd, &j->gen);
		if (r == 0)
			j->gen = 0; /* matches no record: the scan finds none */
		r = r < 0 ? r : 0;
		j->tail = JNL_START;
	}
	if (r < 0) {
		chunk_journal_free(j);
		return r;
	}
	*ret = j;
	return 0;
}

/* ---- records ------------------------------------------------------------ */

static size_t rec_arrays(uint32_t nsums, uint32_t npieces)
{
	return 8 * ((size_t)nsums + npieces);
}

static size_t rec_len(uint32_t nsums, uint32_t npieces, uint32_t len)
{
	size_t n = JREC_FIXED + rec_arrays(nsums, npieces) + len;
	return (n + 7) & ~(size_t)7;
}

static uint64_t rec_checksum(const uint8_t *raw, size_t arrays)
{
	return XXH3_64bits_withSeed(raw + JREC_FIXED, arrays, XXH3_64bits(raw, 88));
}

/* Encodes r's fixed part and arrays into raw (JREC_FIXED + arrays bytes). */
static void rec_encode(const struct chunk_journal *j, const struct chunk_jrec *r,
		       const uint64_t *pieces, uint32_t npieces, uint8_t *raw)
{
	memset(raw, 0, JREC_FIXED);
	le32_put(raw + 0, JREC_MAGIC);
	le16_put(raw + 4, JNL_VERSION);
	le16_put(raw + 6, JREC_WRITE);
	le32_put(raw + 8, (uint32_t)rec_len(r->nsums, npieces, r->len));
	le32_put(raw + 12, r->nsums);
	le64_put(raw + 16, j->gen);
	le64_put(raw + 24, j->seq + 1);
	le64_put(raw + 32, r->ino);
	le32_put(raw + 40, r->index);
	le32_put(raw + 44, r->off);
	le32_put(raw + 48, r->len);
	le32_put(raw + 52, r->data_len);
	le64_put(raw + 56, r->version);
	le64_put(raw + 64, r->incarnation);
	le32_put(raw + 72, r->first_block);
	le32_put(raw + 76, npieces);
	uint8_t *a = raw + JREC_FIXED;
	for (uint32_t i = 0; i < r->nsums; i++)
		le64_put(a + 8 * i, r->sums[i]);
	for (uint32_t i = 0; i < npieces; i++)
		le64_put(a + 8 * ((size_t)r->nsums + i), pieces[i]);
	le64_put(raw + 88, rec_checksum(raw, rec_arrays(r->nsums, npieces)));
}

/* Waits until no record is in flight, syncs the target and starts a new
 * generation (J2). Called with mu held. */
static int checkpoint(struct chunk_journal *j)
{
	while (j->inflight > 0)
		pthread_cond_wait(&j->idle, &j->mu);
	chunk_io_step(j->fault);
	if (syncfs(j->target_fd) < 0)
		return -errno;
	return write_gen(j);
}

int chunk_journal_append(struct chunk_journal *j, const struct chunk_jrec *r, bool sync)
{
	if (r->len > CHUNK_JOURNAL_MAX_DATA || r->nsums > CHUNK_MAX_BLOCKS)
		return -EFBIG;
	uint32_t npieces = (uint32_t)wire_data_pieces(r->len);
	size_t arrays = rec_arrays(r->nsums, npieces), len = rec_len(r->nsums, npieces, r->len);
	_cleanup_free_ uint8_t *raw = malloc(JREC_FIXED + arrays);
	_cleanup_free_ uint64_t *own = NULL;
	if (!raw)
		return -ENOMEM;
	const uint64_t *pieces = r->piece_sums;
	if (!pieces) {
		if (!(own = malloc(sizeof(uint64_t) * (npieces ? npieces : 1))))
			return -ENOMEM;
		wire_data_hash(r->data, r->len, own);
		pieces = own;
	}
	pthread_mutex_lock(&j->mu);
	int e = 0;
	if (j->tail + len > CHUNK_JOURNAL_SIZE || j->seq >= CHUNK_JOURNAL_MAX_RECORDS)
		e = checkpoint(j);
	uint64_t at = j->tail;
	if (e == 0) {
		rec_encode(j, r, pieces, npieces, raw);
		e = chunk_io_pwrite(j->fault, j->fd, r->data, r->len, at + JREC_FIXED + arrays);
	}
	if (e == 0)
		e = chunk_io_pwrite(j->fault, j->fd, raw, JREC_FIXED + arrays, at);
	if (e == 0) {
		j->tail += len;
		j->seq++;
		j->inflight++;
	}
	pthread_mutex_unlock(&j->mu);
	if (e == 0 && sync && (e = chunk_io_fdatasync(j->fault, j->fd)) < 0)
		chunk_journal_applied(j);
	return e;
}

void chunk_journal_applied(struct chunk_journal *j)
{
	pthread_mutex_lock(&j->mu);
	if (--j->inflight == 0)
		pthread_cond_broadcast(&j->idle);
	pthread_mutex_unlock(&j->mu);
}

int chunk_journal_reset(struct chunk_journal *j)
{
	pthread_mutex_lock(&j->mu);
	int r = write_gen(j);
	pthread_mutex_unlock(&j->mu);
	return r;
}

/* ---- replay ---------------------------------------------------------------- */

struct jpos {
	uint64_t ino;
	uint32_t index;
	uint64_t at;
};

/* Reads and checks the record at `at` (J1): 1 and its bytes in *ret_raw
 * (heap) if it is the next one, 0 where the journal ends, or -errno. */
static int rec_load(struct chunk_journal *j, uint64_t at, uint64_t seq, uint8_t **ret_raw)
{
	uint8_t fx[JREC_FIXED];
	if (at + JREC_FIXED > CHUNK_JOURNAL_SIZE)
		return 0;
	int r = chunk_io_pread(j->fd, fx, sizeof(fx), at);
	if (r == -EIO)
		return 0;
	if (r < 0)
		return r;
	uint32_t len = le32_get(fx + 8), nsums = le32_get(fx + 12), dlen = le32_get(fx + 48);
	uint32_t npieces = le32_get(fx + 76);
	if (le32_get(fx) != JREC_MAGIC || le16_get(fx + 4) != JNL_VERSION ||
	    le16_get(fx + 6) != JREC_WRITE || le64_get(fx + 16) != j->gen ||
	    le64_get(fx + 24) != seq || nsums > CHUNK_MAX_BLOCKS || dlen > CHUNK_JOURNAL_MAX_DATA ||
	    npieces != wire_data_pieces(dlen) || len != rec_len(nsums, npieces, dlen) ||
	    at + len > CHUNK_JOURNAL_SIZE)
		return 0;
	_cleanup_free_ uint8_t *raw = malloc(len);
	if (!raw)
		return -ENOMEM;
	r = chunk_io_pread(j->fd, raw, len, at);
	if (r == -EIO)
		return 0;
	if (r < 0)
		return r;
	size_t arrays = rec_arrays(nsums, npieces);
	if (le64_get(raw + 88) != rec_checksum(raw, arrays))
		return 0;
	const uint8_t *data = raw + JREC_FIXED + arrays, *ps = raw + JREC_FIXED + 8 * nsums;
	for (uint32_t i = 0; i < npieces; i++) {
		size_t o = (size_t)i * WIRE_DATA_PIECE;
		size_t n = STRATA_MIN((size_t)WIRE_DATA_PIECE, dlen - o);
		if (chunk_block_sum(data + o, n) != le64_get(ps + 8 * i))
			return 0;
	}
	*ret_raw = TAKE_PTR(raw);
	return 1;
}

/* Decodes a loaded record; its arrays are copied into sums (the caller's,
 * nsums entries). */
static void rec_decode(const uint8_t *raw, struct chunk_jrec *r, uint64_t *sums)
{
	uint32_t nsums = le32_get(raw + 12), npieces = le32_get(raw + 76);
	for (uint32_t i = 0; i < nsums; i++)
		sums[i] = le64_get(raw + JREC_FIXED + 8 * i);
	*r = (struct chunk_jrec){.ino = le64_get(raw + 32),
				 .index = le32_get(raw + 40),
				 .off = le32_get(raw + 44),
				 .len = le32_get(raw + 48),
				 .data_len = le32_get(raw + 52),
				 .version = le64_get(raw + 56),
				 .incarnation = le64_get(raw + 64),
				 .first_block = le32_get(raw + 72),
				 .nsums = nsums,
				 .sums = sums,
				 .data = raw + JREC_FIXED + rec_arrays(nsums, npieces)};
}

static int cmp_key_at(const void *a, const void *b)
{
	const struct jpos *x = a, *y = b;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->index != y->index)
		return x->index < y->index ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

static int cmp_at(const void *a, const void *b)
{
	const struct jpos *x = a, *y = b;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* Every complete record's chunk and place, in journal order (J1). */
static int scan(struct chunk_journal *j, struct jpos **ret, size_t *ret_n)
{
	struct jpos *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t at = JNL_START;
	int r;
	for (uint64_t seq = 1;; seq++) {
		uint8_t *raw = NULL;
		if ((r = rec_load(j, at, seq, &raw)) <= 0)
			break;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			struct jpos *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(raw);
				r = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[n++] = (struct jpos){le64_get(raw + 32), le32_get(raw + 40), at};
		at += le32_get(raw + 8);
		free(raw);
	}
	if (r < 0) {
		free(v);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Keeps the last record of each chunk, back in journal order. */
static size_t last_per_chunk(struct jpos *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_key_at);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (i + 1 == n || v[i + 1].ino != v[i].ino || v[i + 1].index != v[i].index)
			v[k++] = v[i];
	qsort(v, k, sizeof(*v), cmp_at);
	return k;
}

int chunk_journal_replay(struct chunk_journal *j,
			 int (*apply)(void *arg, const struct chunk_jrec *r), void *arg)
{
	_cleanup_free_ struct jpos *v = NULL;
	size_t n = 0;
	int r = scan(j, &v, &n);
	if (r < 0)
		return r;
	n = last_per_chunk(v, n);
	_cleanup_free_ uint64_t *sums = malloc(sizeof(uint64_t) * CHUNK_MAX_BLOCKS);
	if (!sums)
		return -ENOMEM;
	int applied = 0;
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ uint8_t *raw = NULL;
		uint64_t seq = 0;
		/* rec_load wants the sequence number: read it from the record
		 * itself, whose place the scan already checked */
		uint8_t fx[32];
		if ((r = chunk_io_pread(j->fd, fx, sizeof(fx), v[i].at)) < 0)
			return r;
		seq = le64_get(fx + 24);
		if ((r = rec_load(j, v[i].at, seq, &raw)) <= 0)
			return r < 0 ? r : -EIO;
		struct chunk_jrec rec;
		rec_decode(raw, &rec, sums);
		if ((r = apply(arg, &rec)) < 0)
			return r;
		applied++;
	}
	return applied;
}
