/* chunk_client.h — client of the chunkservers: reads and writes chunks by
 * (inode, chunk index) with routing resolved from strata-meta.
 *
 * A chunk is identified by struct chunk_id. Its target comes from the file's
 * layout and the routing table (layout_chain_for_chunk, then the chain's
 * head for writes and any serving replica for reads). The client caches the
 * routing table and refetches it when a chunkserver answers -ESTALE or a
 * target is unknown.
 *
 * Thread-safe; one rpc_client per chunkserver address, pooled. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "fs/types.h"
#include "fs/meta_client.h"

struct chunk_id {
	uint64_t ino;
	uint32_t index; /* chunk number within the file: offset / chunk_size */
};

struct chunk_client;
/* The meta client is borrowed (used to fetch routing) and must outlive cc. */
struct chunk_client *chunk_client_new(struct meta_client *mc, const struct rpc_client_opts *opts);
void chunk_client_free(struct chunk_client *cc);
/* Pins the routing table to a copy of r and never fetches it from strata-meta
 * (tests, tools that already hold a table; mc may then be NULL). Returns 0 or
 * -ENOMEM. */
int chunk_client_set_routing(struct chunk_client *cc, const struct strata_routing *r);

/* Reads up to len bytes at off within the chunk into buf. Returns the number
 * of bytes that exist (short when the chunk is shorter; 0 when the chunk was
 * never written: a hole, the caller zero-fills), or -EIO when the stored
 * bytes fail their checksum (never wrong bytes), or another -errno. */
ssize_t chunk_read(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		   uint32_t off, uint32_t len, void *buf);
/* One read of a batch (chunk_read_many): a range within one chunk. */
struct chunk_read_one {
	const struct strata_layout *layout;
	struct chunk_id id;
	uint32_t off, len; /* len <= CHUNK_IO_MAX */
	void *buf;
	ssize_t result; /* out: what chunk_read would return */
};
/* Reads every range of reads[0..n), the ranges served by one chunkserver
 * asked in one request (MSG_CHUNK_READ_MANY) and answered in one reply,
 * so that n small reads cost the client and the server one round trip
 * instead of n. A range the batch could not answer (a replica failing
 * over, a pending write, a lost connection, a server that predates
 * READ_MANY) is read again on its own with chunk_read, with its retries;
 * so each result is what chunk_read would return. */
void chunk_read_many(struct chunk_client *cc, struct chunk_read_one *reads, int n);
/* What the reads of this client cost, counted since it was made (relaxed
 * atomics): READ requests sent (chunk_read's, and chunk_read_many's ranges
 * read on their own among them), READ_MANY requests and the ranges they
 * carried, and of those the ranges read again on their own. */
struct chunk_client_stats {
	uint64_t reads, read_many, read_many_ranges, read_many_retried;
};
void chunk_client_stats(struct chunk_client *cc, struct chunk_client_stats *ret);
/* Writes len bytes at off within the chunk (creating it; a gap before off
 * reads as zeros). Atomic: after a crash the chunk holds the old or the new
 * content. flags: CHUNK_WRITE_SYNC makes it durable before returning.
 * Returns 0, -ENOSPC, -EIO, ... */
#define CHUNK_WRITE_SYNC 0x1
int chunk_write(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		uint32_t off, uint32_t len, const void *buf, unsigned flags);
/* Cuts the chunk to len bytes (0 keeps an empty chunk). Missing is not an error. */
int chunk_truncate(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		   uint32_t len);
/* The same, exactly once across the caller's own retries. One call retries
 * a failed write with the same request id only within its failover window
 * (chunk_client_set_retry_ms); a caller that tries again after that (as
 * strata-fuse does) passes the same *ids to every attempt of one logical
 * write: 0 before the first, which picks the ids and stores them there. A
 * replica that applied an attempt already then answers the next from its
 * dedup table instead of applying it again. */
int chunk_write_ids(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		    uint32_t off, uint32_t len, const void *buf, unsigned flags, uint64_t *ids);
int chunk_truncate_ids(struct chunk_client *cc, const struct strata_layout *layout,
		       struct chunk_id id, uint32_t len, uint64_t *ids);
/* Removes every chunk of ino with index >= first_index on every chain of the
 * layout's table (truncate and unlink). Missing chunks are not an error. */
int chunk_remove_file(struct chunk_client *cc, const struct strata_layout *layout, uint64_t ino,
		      uint32_t first_index);
/* Makes all writes on every target of the layout's table durable. */
int chunk_sync(struct chunk_client *cc, const struct strata_layout *layout);

struct chunk_stat {
	uint64_t version;
	uint32_t length;
	uint64_t checksum; /* XXH3-64 over the chunk's block checksums */
};
int chunk_stat(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
	       struct chunk_stat *ret);

/* ---- replication ---------------------------------------------------------
 * Per-call timeouts are capped at 5 s (reads: 2 s, then the next replica) and one call retries
 * through a chain failover for up to 4 s (same request id: exactly once) before returning the last
 * error (-EAGAIN, -ESTALE or a transport error). */
enum chunk_read_policy {
	CHUNK_READ_ANY = 0,  /* any serving replica, spread by chunk (default) */
	CHUNK_READ_TAIL = 1, /* always the tail (benchmark baseline) */
};
void chunk_client_set_read_policy(struct chunk_client *cc, enum chunk_read_policy p);
/* The failover window of one call in ms (0: no retries). */
void chunk_client_set_retry_ms(struct chunk_client *cc, int ms);
/* STAT of the chunk on one given target of its chain (replica comparison).
 * Returns 0, -ENOENT (missing there), or -errno. */
int chunk_stat_target(struct chunk_client *cc, const struct strata_layout *layout,
		      struct chunk_id id, uint32_t target_id, struct chunk_stat *ret);
