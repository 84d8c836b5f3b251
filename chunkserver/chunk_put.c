/* chunk_put.c — a chunk put in pieces by a resync (chunk_store.h,
 * chunk_store_put_piece): the pieces go, in order, into a staging file
 * tmp/<ino>.<index>.put laid out as the final format-2 chunk file (data at
 * its place, the pieces' block checksums at theirs in slot 0), whose first
 * 64 bytes hold the transfer's state until the last piece; that one reads
 * the staged data back, checks it, writes slot 0 and renames the file over
 * the chunk (invariant 1: the old chunk or the new one). Every call holds
 * the chunk's stripe lock (invariant 4), so a piece, a write and a publish
 * of one chunk never overlap. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chunkserver/chunk_store-internal.h"
#include "fs/cleanup.h"
#include "fs/wire.h"

#define BS CHUNK_BLOCK_SIZE
#define STG_MAGIC 0x54555053u /* "SPUT": never a valid chunk header */
#define STG_FIXED 64
#define DATA_OFF CHUNK_V2_DATA_OFF

static void stage_path(char out[64], uint64_t ino, uint32_t index)
{
	snprintf(out, 64, "tmp/%016llx.%08x.put", (unsigned long long)ino, index);
}

static void stage_state_encode(uint8_t raw[STG_FIXED], const struct chunk_put_piece *p,
			       uint32_t next)
{
	memset(raw, 0, STG_FIXED);
	le32_put(raw + 0, STG_MAGIC);
	le16_put(raw + 4, CHUNK_FORMAT_V2);
	le64_put(raw + 8, p->version);
	le64_put(raw + 16, p->tag);
	le32_put(raw + 24, p->total);
	le32_put(raw + 28, next);
}

/* Opens the staging file for piece p: a new one for a first piece, else the
 * existing one if it belongs to p's transfer and p is its next piece. */
static int stage_open(struct chunk_store *cs, const char *sp, const struct chunk_put_piece *p)
{
	if (p->flags & CHUNK_PUT_FIRST) {
		int fd = openat(cs->dirfd, sp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		int r = chunk_io_ftruncate(&cs->fault, fd, (uint64_t)DATA_OFF + p->total);
		if (r < 0) {
			close(fd);
			return r;
		}
		return fd;
	}
	int fd = openat(cs->dirfd, sp, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESTALE : -errno;
	uint8_t raw[STG_FIXED];
	int r = chunk_io_pread(fd, raw, sizeof(raw), 0);
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

/* Checks every staged block against its staged checksum, 16 at a time. */
static int stage_verify(int fd, const uint64_t *sums, uint32_t total)
{
	_cleanup_free_ uint8_t *buf = malloc(16 * BS);
	if (!buf)
		return -ENOMEM;
	uint32_t nb = chunk_nblocks(total);
	int r = 0;
	for (uint32_t b0 = 0; r == 0 && b0 < nb; b0 += 16) {
		uint64_t s = (uint64_t)b0 * BS, e = STRATA_MIN(s + 16 * BS, (uint64_t)total);
		r = chunk_io_pread(fd, buf, e - s, DATA_OFF + s);
		for (uint32_t b = b0; r == 0 && b < nb && b < b0 + 16; b++)
			if (chunk_block_sum(buf + (uint64_t)(b - b0) * BS,
					    chunk_block_len(total, b)) != sums[b])
				r = -EIO;
	}
	return r;
}

/* The last piece is in: reads every block back and checks it against its
 * checksum, checks the chunk checksum against the source's, writes slot 0
 * over the transfer state and renames the file over the chunk. */
static int stage_publish(struct chunk_store *cs, int fd, const char *sp, uint64_t ino,
			 uint32_t index, const struct chunk_put_piece *p, struct chunk_meta *ret)
{
	struct chunk_hdr h = {.nblocks = chunk_nblocks(p->total),
			      .ino = ino,
			      .index = index,
			      .version = p->version,
			      .data_len = p->total,
			      .incarnation = cs_new_incarnation(cs)};
	size_t slen = chunk_slot_len(h.nblocks);
	_cleanup_free_ uint64_t *sums = malloc(sizeof(uint64_t) * (h.nblocks ? h.nblocks : 1));
	_cleanup_free_ uint8_t *raw = malloc(slen);
	if (!sums || !raw)
		return -ENOMEM;
	int r = chunk_io_pread(fd, raw, slen - 8, 0);
	for (uint32_t b = 0; r == 0 && b < h.nblocks; b++)
		sums[b] = le64_get(raw + CHUNK_HDR_FIXED + 8 * b);
	if (r == 0)
		r = stage_verify(fd, sums, p->total);
	if (r < 0)
		return r;
	h.bcsum = sums;
	chunk_slot_encode(&h, 0, raw);
	if (h.checksum != p->checksum)
		return -EIO;
	r = chunk_io_pwrite(&cs->fault, fd, raw, slen, chunk_slot_off(0));
	if (r == 0)
		r = cs_publish(cs, sp, ino, index, false);
	if (r == 0 && ret)
		*ret = (struct chunk_meta){h.version, h.data_len, h.checksum};
	return r;
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

/* Stores piece p's data and block checksums in the staging file, and the
 * transfer's state unless it is the last piece. */
static int stage_piece(struct chunk_store *cs, int fd, const struct chunk_put_piece *p)
{
	uint32_t nb = chunk_nblocks(p->len);
	_cleanup_free_ uint8_t *sums = malloc(8 * (size_t)(nb ? nb : 1));
	if (!sums)
		return -ENOMEM;
	for (uint32_t i = 0; i < nb; i++) {
		uint32_t bl = STRATA_MIN(BS, p->len - i * BS);
		le64_put(sums + 8 * i,
			 p->sums ? p->sums[i]
				 : chunk_block_sum((const uint8_t *)p->data + (size_t)i * BS, bl));
	}
	int r = chunk_io_pwrite(&cs->fault, fd, p->data, p->len, (uint64_t)DATA_OFF + p->off);
	if (r == 0)
		r = chunk_io_pwrite(&cs->fault, fd, sums, 8 * (size_t)nb,
				    CHUNK_HDR_FIXED + 8 * (uint64_t)(p->off / BS));
	if (r == 0 && !(p->flags & CHUNK_PUT_LAST)) {
		uint8_t st[STG_FIXED];
		stage_state_encode(st, p, p->off + p->len);
		r = chunk_io_pwrite(&cs->fault, fd, st, sizeof(st), 0);
	}
	return r;
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
	_cleanup_(cs_unlockp) __attribute__((unused)) pthread_mutex_t *lk =
	    cs_lock_chunk(cs, ino, index);
	_cleanup_close_ int fd = stage_open(cs, sp, p);
	if (fd < 0)
		return fd; /* -ESTALE: someone else's staging file, left alone */
	r = stage_piece(cs, fd, p);
	if (r == 0 && (p->flags & CHUNK_PUT_LAST))
		r = stage_publish(cs, fd, sp, ino, index, p, ret);
	if (r < 0)
		unlinkat(cs->dirfd, sp, 0);
	return r;
}

int chunk_store_put_expire(struct chunk_store *cs, int max_age_s)
{
	int tfd = openat(cs->dirfd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = tfd < 0 ? NULL : fdopendir(tfd);
	if (!d) {
		int e = -errno;
		if (tfd >= 0)
			close(tfd);
		return e;
	}
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
		pthread_mutex_t *m = cs_lock_chunk(cs, ino, index);
		struct stat st;
		if (fstatat(fd, de->d_name, &st, 0) == 0 && st.st_mtime + max_age_s <= time(NULL) &&
		    unlinkat(fd, de->d_name, 0) == 0)
			n++;
		pthread_mutex_unlock(m);
	}
	closedir(d);
	return n;
}
