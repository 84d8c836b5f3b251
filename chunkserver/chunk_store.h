/* chunk_store.h — the chunk engine of strata-chunkserver: one target (a
 * directory on a local disk) holding chunks identified by (ino, index), each
 * with a version, a length and an XXH3 checksum per 64 KiB block.
 *
 * Thread-safe: reads run concurrently with each other and with writes to
 * other chunks, and see one complete version of a chunk; writes to one chunk
 * are serialised and cost the bytes they write (in place, crash-atomic: see
 * chunk_store.c). All calls return a non-negative value or a negative errno;
 * the engine never logs, it reports corruption through opts.on_corrupt. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct uring_pool;
struct chunk_store;

#define CHUNK_BLOCK_SIZE (64u << 10)
#define CHUNK_STORE_MAX_LEN (64u << 20) /* STRATA_MAX_CHUNK_SIZE */
#define CHUNK_STORE_SYNC 0x1		/* write: durable before returning */

/* What a corruption report names. block is the 64 KiB block number, or -1
 * when the chunk's header is damaged. */
struct chunk_corruption {
	uint32_t target_id;
	uint64_t ino;
	uint32_t index;
	int64_t block;
	const char *what; /* "block checksum mismatch", "bad header", ... */
};

struct chunk_store_opts {
	uint32_t target_id; /* only used in corruption reports */
	/* Called once per detected corruption, on the calling thread. May be NULL. */
	void (*on_corrupt)(void *arg, const struct chunk_corruption *c);
	void *arg;
	/* Reopen every chunk file and reload its header on each read (the
	 * baseline of bench/chunk_reads): no open-file cache. */
	bool no_open_cache;
};

struct chunk_meta {
	uint64_t version;  /* 1 after the first write, +1 per write or truncate */
	uint32_t length;   /* bytes of data */
	uint64_t checksum; /* XXH3-64 over the block checksums (LE u64 each) */
};

/* Opens (creating if needed) the target at path: takes an exclusive lock on
 * it (-EBUSY if another process holds it), removes temp files a crash left
 * behind and finishes the writes a crash cut short from the target's
 * journal. A target of format 1 (no <target>/format) is read as it is; its
 * chunks are converted when written. The ring pool is borrowed and must
 * outlive the store. Returns 0 and *ret (free with chunk_store_free),
 * -EPROTONOSUPPORT (the target or its journal is of a newer format than
 * this code's), -EBADMSG (<target>/format is damaged), or -errno. */
int chunk_store_open(const char *path, struct uring_pool *pool, const struct chunk_store_opts *opts,
		     struct chunk_store **ret);
void chunk_store_free(struct chunk_store *cs);
const char *chunk_store_path(const struct chunk_store *cs);

/* Reads up to len bytes at off into buf. Returns the bytes read (short past
 * the chunk's end, 0 for a missing chunk), -EIO if a touched block (or the
 * header) fails its checksum, or -errno. */
ssize_t chunk_store_read(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t off,
			 uint32_t len, void *buf);
/* Writes data[0..len) at off, creating the chunk; a gap reads as zeros.
 * off + len must be <= CHUNK_STORE_MAX_LEN (else -EFBIG); len 0 changes
 * nothing (not even the length) and creates nothing. Atomic (old or new
 * content after a crash). flags: CHUNK_STORE_SYNC. Returns 0 and the new
 * state in *ret (may be NULL), -ENOSPC (old chunk untouched), -EIO (a block
 * that had to be merged is corrupt), or -errno. */
int chunk_store_write(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t off,
		      uint32_t len, const void *data, unsigned flags, struct chunk_meta *ret);
/* Same, with sums: the XXH3-64 of each 64 KiB piece of data (from data[0];
 * wire_data_hash), verified by the caller with the frame that brought the
 * data. Where off is block aligned, a block wholly replaced by a piece takes
 * that piece's sum as its checksum instead of hashing it again. NULL: as
 * chunk_store_write. */
int chunk_store_write_sums(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t off,
			   uint32_t len, const void *data, const uint64_t *sums, unsigned flags,
			   struct chunk_meta *ret);
/* Cuts or extends (with zeros) the chunk to len bytes. A missing chunk stays
 * missing (returns 0 with *ret zeroed). */
int chunk_store_truncate(struct chunk_store *cs, uint64_t ino, uint32_t index, uint32_t len,
			 struct chunk_meta *ret);
/* Removes one chunk; missing is not an error. Returns 1 if removed, 0 if absent. */
int chunk_store_remove(struct chunk_store *cs, uint64_t ino, uint32_t index);
/* Removes every chunk of ino with index >= first_index. Returns the count. */
int chunk_store_remove_file(struct chunk_store *cs, uint64_t ino, uint32_t first_index);
/* Makes every completed write on the target durable (syncfs). */
int chunk_store_sync(struct chunk_store *cs);
/* Returns 0 and the chunk's state, -ENOENT if missing, -EIO if its header is corrupt. */
int chunk_store_stat(struct chunk_store *cs, uint64_t ino, uint32_t index, struct chunk_meta *ret);
/* What the open-file cache (chunk_open_cache.c) did since the store opened:
 * reads served from an open file, files opened and loaded, and entries found
 * changed behind the store's back (unlinked, replaced or edited on disk). */
struct chunk_open_stats {
	uint64_t hits, loads, stale;
};
void chunk_store_open_stats(struct chunk_store *cs, struct chunk_open_stats *ret);
/* Capacity of the filesystem holding the target. */
int chunk_store_space(struct chunk_store *cs, uint64_t *ret_total, uint64_t *ret_free);

/* ---- resync (replica.c, resync.c) ---------------------------------------- */
/* Replaces the chunk with data[0..len) published at `version` (the source
 * replica's), whatever was there before (including a damaged chunk).
 * Returns 0 and the new state in *ret (may be NULL), or -errno. */
int chunk_store_put(struct chunk_store *cs, uint64_t ino, uint32_t index, const void *data,
		    uint32_t len, uint64_t version, struct chunk_meta *ret);
/* The chunk indexes >= first_index of ino, unsorted, into a heap array
 * (free()); none is 0 with *ret NULL. Returns 0 or -errno. */
int chunk_store_list_ino(struct chunk_store *cs, uint64_t ino, uint32_t first_index, uint32_t **ret,
			 size_t *ret_n);
/* Removes ino's (empty) chunk directory, if it is empty. */
void chunk_store_rmdir_ino(struct chunk_store *cs, uint64_t ino);
struct chunk_key {
	uint64_t ino;
	uint32_t index;
};
/* Every chunk of the target, sorted by (ino, index), into a heap array
 * (owned by the caller, free()). Returns 0 or -errno. */
int chunk_store_list(struct chunk_store *cs, struct chunk_key **ret, size_t *ret_n);

/* ---- resync of chunks larger than one message (resync.c) ------------------ */
/* A chunk above CHUNK_IO_MAX is put in pieces of one transfer: the pieces go,
 * in order, into a staging file tmp/<ino>.<index>.put laid out as the final
 * chunk file (its first 64 bytes hold the transfer's state meanwhile: version,
 * tag, total, bytes received); the last piece reads the staged data back,
 * checks every block against its checksum and the chunk checksum against the
 * source's, writes the header and renames the file over the chunk (atomic:
 * the old chunk or the new one, as for a write). A first piece drops any
 * partial staging file of the chunk (an interrupted transfer); so do a
 * failed piece, chunk_store_put_expire, and start-up (tmp/ is emptied). */
#define CHUNK_PUT_FIRST 0x1 /* the first piece (off 0): starts a new staging file */
#define CHUNK_PUT_LAST 0x2  /* the last piece (ends at total): verify and publish */
struct chunk_put_piece {
	uint64_t version;  /* published with the last piece (the source's version, > 0) */
	uint64_t tag;	   /* the transfer, chosen by the sender; every piece carries it */
	uint64_t checksum; /* the source's chunk checksum; the staged chunk must match it */
	uint32_t total;	   /* the chunk's length, <= CHUNK_STORE_MAX_LEN */
	uint32_t off, len; /* this piece: data[0..len) at off (block aligned; a piece
			    * but the last is a whole number of blocks) */
	const void *data;
	const uint64_t *sums; /* XXH3-64 of each 64 KiB piece of data (wire_data_hash), or NULL */
	unsigned flags;	      /* CHUNK_PUT_FIRST, CHUNK_PUT_LAST */
};
/* Stores one piece. Returns 0 (with the last piece: the published chunk's
 * state in *ret, which may be NULL; before: *ret zeroed), -EINVAL (a piece
 * that breaks the rules above), -ESTALE (no staging file of this transfer
 * here, or not the next piece: start over with a first piece), -EIO (the
 * staged chunk does not match its block checksums or the source's
 * checksum; the staging file is dropped), -EFBIG, -ENOSPC or -errno (the
 * staging file is dropped). */
int chunk_store_put_piece(struct chunk_store *cs, uint64_t ino, uint32_t index,
			  const struct chunk_put_piece *p, struct chunk_meta *ret);
/* Drops staging files untouched for max_age_s seconds or more (transfers
 * whose sender went away). Returns how many, or -errno. */
int chunk_store_put_expire(struct chunk_store *cs, int max_age_s);

/* ---- tests ----------------------------------------------------------------- */
/* Fault point (chunk_io.h): the steps-th mutating step of the store from now
 * (a write, truncate, rename, unlink or sync of a chunk, a temp file or the
 * journal) tears its write (only its first half of pages lands) and ends the
 * process with status 86, as kill -9 would. 0 disables it. */
void chunk_store_fault_after(struct chunk_store *cs, int steps);
