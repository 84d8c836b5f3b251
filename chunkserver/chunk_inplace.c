/* chunk_inplace.c — writes and truncates of a format-2 chunk in its own file
 * (chunk_store-internal.h), at a cost proportional to the bytes written.
 *
 * A write that only adds bytes past the chunk's end (an append, a
 * sequential stream, a write after a gap) writes them there and then the new
 * header into the slot not holding the current one: until that slot is
 * complete the current header still describes the old chunk, whose bytes
 * the write did not touch. A write that overwrites existing bytes is first
 * appended to the target's journal (chunk_journal.c) with the new header's
 * changes, then written in place, then committed the same way; a crash
 * between the journal and the commit is finished from the journal at the
 * next start (chunk_inplace_redo). The crash argument: chunkserver/README.md
 * "In-place writes". */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunkserver/chunk_journal.h"
#include "chunkserver/chunk_store-internal.h"
#include "fs/cleanup.h"

#define BS CHUNK_BLOCK_SIZE

static void unlock_viewp(pthread_rwlock_t **l)
{
	if (*l)
		pthread_rwlock_unlock(*l);
}
#define _cleanup_unlock_view_ _cleanup_(unlock_viewp) __attribute__((unused))

static pthread_rwlock_t *lock_view(struct chunk_update *u)
{
	pthread_rwlock_t *l = cs_view(u->cs, u->ino, u->index);
	pthread_rwlock_wrlock(l);
	cs_chunk_changed(u->cs, u->ino, u->index); /* no reader can hold the old header now */
	return l;
}

/* Cuts bytes past the chunk's data: what an update that never committed its
 * longer length left there, so that the chunk's growth reads zeros. */
static int trim_tail(struct chunk_store *cs, int fd, const struct chunk_hdr *h)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	uint64_t end = (uint64_t)h->data_off + h->data_len;
	return (uint64_t)st.st_size > end ? chunk_io_ftruncate(&cs->fault, fd, end) : 0;
}

/* Allocates [off, off + len) of the file where it has holes, so that the
 * in-place writes after the journal record cannot fail for space. */
static int reserve(int fd, uint64_t off, uint64_t len)
{
	if (len == 0 || fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0)
		return 0;
	return errno == EOPNOTSUPP || errno == ENOSYS ? 0 : -errno;
}

/* Writes h into the slot that does not hold the current header (cur), then
 * marks cur superseded: from then on a damaged new slot reads as a damaged
 * header (-EIO), not as the version before it. */
static int commit_slot(struct chunk_store *cs, int fd, struct chunk_hdr *h, int cur)
{
	size_t len = chunk_slot_len(h->nblocks);
	_cleanup_free_ uint8_t *raw = malloc(len);
	if (!raw)
		return -ENOMEM;
	int slot = 1 - cur;
	chunk_slot_encode(h, slot, raw);
	int r = chunk_io_pwrite(&cs->fault, fd, raw, len, chunk_slot_off(slot));
	uint8_t mark[4];
	chunk_slot_superseded_mark(mark);
	if (r == 0)
		r = chunk_io_pwrite(&cs->fault, fd, mark, sizeof(mark), chunk_slot_off(cur));
	return r;
}

static int reserve_slot(const struct chunk_update *u)
{
	return reserve(u->oldfd, chunk_slot_off(1 - u->old.slot), chunk_slot_len(u->new.nblocks));
}

static void meta_of(const struct chunk_hdr *h, struct chunk_meta *ret)
{
	if (ret)
		*ret = (struct chunk_meta){h->version, h->data_len, h->checksum};
}

/* Bytes past the end only: the data, (sync) fdatasync, the slot, (sync)
 * fdatasync. Readers never look past the committed length, so the data
 * goes in without the view lock; a failure leaves the old header. */
static int append(struct chunk_update *u, bool sync)
{
	struct chunk_store *cs = u->cs;
	uint64_t at = (uint64_t)u->old.data_off + u->off;
	int r = chunk_io_pwrite(&cs->fault, u->oldfd, u->data, u->len, at);
	if (r == 0 && sync)
		r = chunk_io_fdatasync(&cs->fault, u->oldfd);
	if (r == 0) {
		_cleanup_unlock_view_ pthread_rwlock_t *l = lock_view(u);
		r = commit_slot(cs, u->oldfd, &u->new, u->old.slot);
	}
	if (r == 0 && sync)
		r = chunk_io_fdatasync(&cs->fault, u->oldfd);
	if (r < 0 && r != -EIO)
		trim_tail(cs, u->oldfd, &u->old); /* best effort: it is garbage anyway */
	return r;
}

/* Overwrites existing bytes: journal first, then in place under the view
 * lock (readers see the old or the new chunk, never the update). */
static int overwrite(struct chunk_update *u, bool sync)
{
	struct chunk_store *cs = u->cs;
	uint32_t b0 = u->off / BS, b1 = (uint32_t)(((uint64_t)u->off + u->len - 1) / BS);
	struct chunk_jrec rec = {.ino = u->ino,
				 .index = u->index,
				 .incarnation = u->old.incarnation,
				 .version = u->new.version,
				 .data_len = u->new.data_len,
				 .off = u->off,
				 .len = u->len,
				 .first_block = b0,
				 .nsums = b1 - b0 + 1,
				 .sums = u->new.bcsum + b0,
				 .data = u->data,
				 .piece_sums = u->sums};
	int r = reserve(u->oldfd, (uint64_t)u->old.data_off + u->off, u->len);
	if (r == 0)
		r = chunk_journal_append(cs->journal, &rec, sync);
	if (r < 0)
		return r;
	{
		_cleanup_unlock_view_ pthread_rwlock_t *l = lock_view(u);
		r = chunk_io_pwrite(&cs->fault, u->oldfd, u->data, u->len,
				    (uint64_t)u->old.data_off + u->off);
		if (r == 0)
			r = commit_slot(cs, u->oldfd, &u->new, u->old.slot);
	}
	chunk_journal_applied(cs->journal);
	return r;
}

int chunk_inplace_write(struct chunk_update *u, unsigned flags, struct chunk_meta *ret)
{
	bool journaled = u->off < u->old.data_len;
	if (journaled && u->len > CHUNK_JOURNAL_MAX_DATA)
		return -EAGAIN;
	uint32_t first = STRATA_MIN(u->off, u->old.data_len) / BS;
	int r = chunk_update_plan(u, first, u->old.version + 1);
	if (r == 0 && u->new_len > u->old.data_len)
		r = trim_tail(u->cs, u->oldfd, &u->old);
	if (r == 0)
		r = reserve_slot(u);
	if (r == 0)
		r = journaled ? overwrite(u, flags & CHUNK_STORE_SYNC)
			      : append(u, flags & CHUNK_STORE_SYNC);
	if (r == 0)
		meta_of(&u->new, ret);
	return r;
}

int chunk_inplace_truncate(struct chunk_update *u, struct chunk_meta *ret)
{
	struct chunk_store *cs = u->cs;
	uint64_t end = (uint64_t)u->old.data_off + u->new_len;
	uint32_t first = STRATA_MIN(u->new_len, u->old.data_len) / BS;
	int r = chunk_update_plan(u, first, u->old.version + 1);
	if (r == 0)
		r = reserve_slot(u);
	bool grow = u->new_len > u->old.data_len;
	if (r == 0 && grow && (r = trim_tail(cs, u->oldfd, &u->old)) == 0)
		r = chunk_io_ftruncate(&cs->fault, u->oldfd, end); /* zeros */
	if (r == 0) {
		_cleanup_unlock_view_ pthread_rwlock_t *l = lock_view(u);
		r = commit_slot(cs, u->oldfd, &u->new, u->old.slot);
	}
	if (r == 0 && !grow)
		chunk_io_ftruncate(&cs->fault, u->oldfd,
				   end); /* past the end: garbage if it fails */
	if (r == 0)
		meta_of(&u->new, ret);
	return r;
}

/* ---- replay ------------------------------------------------------------------ */

/* True if r is a journaled write (it overwrites data the chunk h had) whose
 * checksums name exactly the blocks it changes. */
static bool redo_fits(const struct chunk_hdr *h, const struct chunk_jrec *r)
{
	uint64_t end = (uint64_t)r->off + r->len;
	if (r->len == 0 || r->off >= h->data_len || end > CHUNK_STORE_MAX_LEN ||
	    r->data_len != STRATA_MAX((uint64_t)h->data_len, end))
		return false;
	uint32_t b0 = r->off / BS, b1 = (uint32_t)((end - 1) / BS);
	/* blocks the write adds past the old ones are all in its range */
	return r->first_block == b0 && r->nsums == b1 - b0 + 1 &&
	       chunk_nblocks(r->data_len) <= STRATA_MAX(h->nblocks, b1 + 1);
}

int chunk_inplace_redo(struct chunk_store *cs, int fd, const struct chunk_hdr *h,
		       const struct chunk_jrec *r)
{
	if (h->format != CHUNK_FORMAT_V2 || h->incarnation != r->incarnation ||
	    r->version != h->version + 1 || !redo_fits(h, r))
		return 0; /* the chunk has it, or was replaced since */
	struct chunk_hdr n = *h;
	n.version = r->version;
	n.data_len = r->data_len;
	n.nblocks = chunk_nblocks(r->data_len);
	n.bcsum = malloc(sizeof(uint64_t) * (n.nblocks ? n.nblocks : 1));
	if (!n.bcsum)
		return -ENOMEM;
	for (uint32_t b = 0; b < n.nblocks; b++)
		n.bcsum[b] = b >= r->first_block && b < r->first_block + r->nsums
				 ? r->sums[b - r->first_block]
				 : h->bcsum[b];
	int e = chunk_io_pwrite(&cs->fault, fd, r->data, r->len, (uint64_t)h->data_off + r->off);
	if (e == 0)
		e = commit_slot(cs, fd, &n, h->slot);
	if (e == 0)
		e = chunk_io_fdatasync(&cs->fault, fd);
	chunk_hdr_done(&n);
	return e < 0 ? e : 1;
}
