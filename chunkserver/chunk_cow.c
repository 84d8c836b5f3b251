/* chunk_cow.c — a chunk's new version as a new file (chunk_store-internal.h):
 * built whole in tmp/<ino>.<index> and renamed over the chunk, so a crash
 * leaves the old or the new file (invariant 1). The engine takes this path
 * where it costs no more than the bytes written (a new chunk, a write that
 * replaces all of it, a resync's put) and where an in-place update cannot
 * be made (a format-1 chunk, converted here; a write too large for the
 * journal). Unchanged blocks are carried over by copy_file_range (reflinks
 * on XFS/btrfs) with their old checksums (invariant 3). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunkserver/chunk_store-internal.h"
#include "fs/cleanup.h"

#define BS CHUNK_BLOCK_SIZE

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
static int copy_run(struct chunk_update *u, int tmpfd, uint64_t start, uint64_t end)
{
	loff_t in = (loff_t)(u->old.data_off + start), out = (loff_t)(u->new.data_off + start);
	uint64_t left = end - start;
	int r = 0;
	while (left > 0 && r == 0) {
		ssize_t k = copy_file_range(u->oldfd, &in, tmpfd, &out, left, 0);
		if (k > 0)
			left -= (uint64_t)k;
		else if (k == 0)
			r = -EIO;
		else if (errno == EXDEV || errno == EOPNOTSUPP || errno == ENOSYS ||
			 errno == EINVAL)
			r = copy_bounce(u->oldfd, &in, tmpfd, &out, left), left = 0;
		else if (errno != EINTR)
			r = -errno;
	}
	if (r == -EIO)
		return cs_report_corrupt(u->cs, u->ino, u->index, (int64_t)(start / BS),
					 "chunk file shorter than its data");
	return r;
}

/* Copies every run of unchanged blocks. */
static int copy_unchanged(struct chunk_update *u, int tmpfd)
{
	if (u->oldfd < 0)
		return 0;
	for (uint32_t b = 0; b < u->new.nblocks;) {
		if (!chunk_update_unchanged(u, b)) {
			b++;
			continue;
		}
		uint32_t e = b;
		while (e < u->new.nblocks && chunk_update_unchanged(u, e))
			e++;
		int r = copy_run(u, tmpfd, (uint64_t)b * BS,
				 (uint64_t)(e - 1) * BS + chunk_block_len(u->new_len, e - 1));
		if (r < 0)
			return r;
		b = e;
	}
	return 0;
}

/* Writes slot 0, the direct run and the built blocks into the temp file. */
static int write_new(struct chunk_update *u, int tmpfd)
{
	struct chunk_fault *f = &u->cs->fault;
	_cleanup_free_ uint8_t *slot = malloc(chunk_slot_len(u->new.nblocks));
	if (!slot)
		return -ENOMEM;
	chunk_slot_encode(&u->new, 0, slot);
	int r = 0;
	if (u->d0 <= u->d1) {
		uint64_t s = (uint64_t)u->d0 * BS;
		uint64_t e = (uint64_t)u->d1 * BS + chunk_block_len(u->new_len, u->d1);
		r = chunk_io_pwrite(f, tmpfd, u->data + (s - u->off), e - s, u->new.data_off + s);
	}
	for (int i = 0; r == 0 && i < u->nbuild; i++)
		r = chunk_io_pwrite(f, tmpfd, u->scratch + (size_t)i * BS,
				    chunk_block_len(u->new_len, u->build[i]),
				    u->new.data_off + (uint64_t)u->build[i] * BS);
	if (r == 0)
		r = chunk_io_pwrite(f, tmpfd, slot, chunk_slot_len(u->new.nblocks),
				    chunk_slot_off(0));
	return r;
}

int chunk_cow_run(struct chunk_update *u, unsigned flags, struct chunk_meta *ret)
{
	struct chunk_store *cs = u->cs;
	char tp[64];
	cs_tmp_path(tp, u->ino, u->index);
	u->new.incarnation = cs_new_incarnation(cs);
	_cleanup_close_ int tmpfd =
	    openat(cs->dirfd, tp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (tmpfd < 0)
		return -errno;
	int r = chunk_io_ftruncate(&cs->fault, tmpfd, (uint64_t)u->new.data_off + u->new_len);
	if (r == 0)
		r = copy_unchanged(u, tmpfd);
	if (r == 0)
		r = write_new(u, tmpfd);
	if (r == 0 && (flags & CHUNK_STORE_SYNC))
		r = chunk_io_fdatasync(&cs->fault, tmpfd);
	if (r == 0)
		r = cs_publish(cs, tp, u->ino, u->index, flags & CHUNK_STORE_SYNC);
	if (r < 0) {
		unlinkat(cs->dirfd, tp, 0);
		return r;
	}
	if (ret)
		*ret = (struct chunk_meta){u->new.version, u->new.data_len, u->new.checksum};
	return 0;
}
