/* chunk_store-internal.h — what the parts of the chunk engine share:
 * chunk_store.c (open, reads, the choice of update path, removal, lists,
 * journal replay), chunk_update.c (the new block checksums of a write or
 * truncate), chunk_cow.c (a new file renamed over the chunk), chunk_inplace.c
 * (the chunk updated in place) and chunk_put.c (a chunk put in pieces).
 * Invariants at the top of chunk_store.c. */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "chunkserver/chunk_format.h"
#include "chunkserver/chunk_io.h"
#include "chunkserver/chunk_journal.h"
#include "chunkserver/chunk_store.h"

struct chunk_journal;
struct io_uring;

#define CS_NSTRIPES 256
#define CS_OPEN_LOCKS 64

/* An open chunk file and its verified current header (chunk_open_cache.c).
 * Refcounted: from cs_open_get until cs_open_put. */
struct chunk_open {
	int fd;
	int refs; /* __atomic */
	struct timespec ctime;
	struct chunk_hdr h;
};
struct chunk_open_slot;

struct chunk_store {
	char *path;
	int dirfd, lockfd;
	struct uring_pool *pool;
	struct chunk_store_opts opts;
	pthread_mutex_t stripes[CS_NSTRIPES]; /* writers of a chunk (invariant 4) */
	pthread_rwlock_t views[CS_NSTRIPES];  /* readers vs in-place updates (invariant 1) */
	struct chunk_journal *journal;
	struct chunk_fault fault;
	uint64_t inc_base, inc_next; /* incarnations: inc_next is __atomic */
	/* chunk_open_cache.c: open_slots[open_nslots] (0: no cache), each
	 * guarded by open_locks[slot % CS_OPEN_LOCKS]; view_gen[stripe]
	 * (__atomic) counts the changes of the stripe's chunks */
	uint64_t view_gen[CS_NSTRIPES];
	pthread_mutex_t open_locks[CS_OPEN_LOCKS];
	struct chunk_open_slot *open_slots;
	unsigned open_nslots;
	struct chunk_open_stats open_stats; /* __atomic */
};

/* ---- chunk_store.c ---------------------------------------------------------- */
int cs_report_corrupt(struct chunk_store *cs, uint64_t ino, uint32_t index, int64_t block,
		      const char *what);
void cs_chunk_path(char out[64], uint64_t ino, uint32_t index);
void cs_chunk_dir_path(char out[64], uint64_t ino);
void cs_tmp_path(char out[64], uint64_t ino, uint32_t index);
/* Opens the chunk file: fd, -ENOENT, or -errno. */
int cs_chunk_open(struct chunk_store *cs, uint64_t ino, uint32_t index, bool rw);
/* Reads and checks its current header; a damaged one is reported, -EIO. */
int cs_hdr_load(struct chunk_store *cs, int fd, uint64_t ino, uint32_t index,
		struct chunk_hdr *ret);
/* Checks block b (read into p) against h's checksum: 0 or -EIO, reported. */
int cs_verify_block(struct chunk_store *cs, const struct chunk_hdr *h, uint32_t b, const void *p);
/* A fresh incarnation for a new chunk file (never 0). */
uint64_t cs_new_incarnation(struct chunk_store *cs);
/* Locks the chunk's writer stripe (invariant 4); unlock with cs_unlockp. */
pthread_mutex_t *cs_lock_chunk(struct chunk_store *cs, uint64_t ino, uint32_t index);
void cs_unlockp(pthread_mutex_t **m);
/* The chunk's view lock: readers share it, in-place updates take it whole. */
pthread_rwlock_t *cs_view(struct chunk_store *cs, uint64_t ino, uint32_t index);
/* Renames the finished file at tmp (relative to the target) over the chunk,
 * creating the inode directory if needed; with sync, fsyncs the directory
 * (and its parent if it was made). */
int cs_publish(struct chunk_store *cs, const char *tmp, uint64_t ino, uint32_t index, bool sync);
int cs_mkdirat_ok(int dirfd, const char *p);

/* The stripe of a chunk: its writer mutex, view lock and generation. */
unsigned cs_stripe_of(uint64_t ino, uint32_t index);

/* ---- chunk_open_cache.c: open chunk files and their headers ---------------- */
int cs_open_cache_init(struct chunk_store *cs);
void cs_open_cache_free(struct chunk_store *cs);
/* The chunk's open file and current header (the caller holds its view lock
 * shared): 0 and *ret (release with cs_open_put), -ENOENT, -EIO (a damaged
 * header, reported), or -errno. */
int cs_open_get(struct chunk_store *cs, uint64_t ino, uint32_t index, struct chunk_open **ret);
void cs_open_put(struct chunk_open *o);
/* To be called after the chunk's file was replaced or removed, or under its
 * view lock held exclusively before its header changes in place. */
void cs_chunk_changed(struct chunk_store *cs, uint64_t ino, uint32_t index);

/* ---- chunk_update.c: the new version's block checksums ------------------------ */
/* One mutation of a chunk: the written range [off, off + len) (len 0 for a
 * truncate) and the new length, from the old version (old, read from
 * oldfd; none when oldfd < 0). */
struct chunk_update {
	struct chunk_store *cs;
	struct io_uring *ring;
	uint64_t ino;
	uint32_t index;
	uint32_t off, len, new_len;
	const uint8_t *data;
	const uint64_t *sums; /* XXH3-64 of each 64 KiB piece of data, or NULL */
	int oldfd;
	struct chunk_hdr old, new;
	/* filled by chunk_update_plan: */
	uint32_t build[8]; /* blocks made of old bytes, zeros and new bytes */
	int nbuild;
	uint8_t *scratch; /* nbuild blocks: their new contents */
	uint32_t d0, d1;  /* blocks wholly from data, d0..d1 (none: d0 > d1) */
};
/* Makes u->new (version, length, checksums) from u->old for the blocks
 * from first on (those before keep their old checksums): checksums the
 * written, zero and built blocks, reading and verifying the old bytes a
 * built block keeps. Returns 0, -EIO (such a block is corrupt), -ENOMEM. */
int chunk_update_plan(struct chunk_update *u, uint32_t first, uint64_t version);
/* Closes oldfd and frees what the update holds (accepts a zeroed one with
 * oldfd -1). */
void chunk_update_done(struct chunk_update *u);
/* True if block b of the new version is unchanged from the old one. */
bool chunk_update_unchanged(const struct chunk_update *u, uint32_t b);

/* ---- chunk_cow.c: a new file over the chunk -------------------------------- */
/* Builds the new version (u planned from block 0, or with no old file: put)
 * in tmp/ as a format-2 file of a new incarnation and renames it over the
 * chunk. flags: CHUNK_STORE_SYNC. Returns 0 and the new state, or -errno
 * (the temp file removed, the old chunk untouched). */
int chunk_cow_run(struct chunk_update *u, unsigned flags, struct chunk_meta *ret);

/* ---- chunk_inplace.c: the chunk updated in place ------------------------------ */
/* Writes u (planned, a format-2 chunk open read-write as oldfd) in place:
 * through the journal when it overwrites data, straight when it only adds
 * past the end; then commits the new header in the other slot. Returns 0,
 * -EAGAIN (too large for the journal: use chunk_cow_run), or -errno. */
int chunk_inplace_write(struct chunk_update *u, unsigned flags, struct chunk_meta *ret);
/* Truncates a format-2 chunk (u planned with len 0) in place. */
int chunk_inplace_truncate(struct chunk_update *u, struct chunk_meta *ret);
/* Finishes a journal record's write on an open format-2 chunk whose header
 * is h, if the chunk lacks it (chunk_store_open's replay). Returns 1 if
 * applied, 0 if not needed, or -errno. */
int chunk_inplace_redo(struct chunk_store *cs, int fd, const struct chunk_hdr *h,
		       const struct chunk_jrec *r);
