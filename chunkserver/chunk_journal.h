/* chunk_journal.h — the write-ahead journal of one target (<target>/journal):
 * the new bytes of every chunk write that overwrites data in place, written
 * (and, for a synced write, made durable) before the chunk file is touched,
 * so that a crash in the middle of the in-place update is finished from the
 * journal at the next start (chunk_store.c, invariants 1 and 7; format and
 * crash argument in chunkserver/README.md "In-place writes").
 *
 * Records are appended one at a time under the journal's mutex, each with a
 * generation, a sequence number and a checksum over everything in it, so a
 * scan stops at the first record a crash cut short. When the journal is full
 * it is checkpointed: once every record's in-place update is done
 * (chunk_journal_applied), the target is synced (syncfs) and the journal
 * starts over under a new generation. Thread-safe. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct chunk_journal;
struct chunk_fault;

#define CHUNK_JOURNAL_SIZE (64u << 20)	   /* file size: a checkpoint per 64 MiB */
#define CHUNK_JOURNAL_MAX_DATA (16u << 20) /* larger writes do not go through it */
#define CHUNK_JOURNAL_MAX_RECORDS                                                                  \
	65536 /* a checkpoint per 64 Ki records: bounds                                            \
	       * the chunks a replay at start-up opens */

/* One in-place write: its chunk (and the file's incarnation), the version it
 * makes, the new data length, the written range and its bytes, and the new
 * checksums of the blocks first_block .. first_block + nsums - 1 (every
 * block whose checksum the write changes). */
struct chunk_jrec {
	uint64_t ino;
	uint32_t index;
	uint64_t incarnation;
	uint64_t version;
	uint32_t data_len;
	uint32_t off, len;
	uint32_t first_block, nsums;
	const uint64_t *sums;
	const void *data;
	const uint64_t *piece_sums; /* XXH3-64 of each 64 KiB piece of data, or NULL */
};

/* Opens <target_fd>/journal, creating it if missing; fault (chunk_io.h, the
 * store's) is borrowed. Returns 0 and *ret (free with chunk_journal_free) or
 * -errno; -EPROTONOSUPPORT for a journal of a newer version than this
 * code's. */
int chunk_journal_open(int target_fd, struct chunk_fault *fault, struct chunk_journal **ret);
void chunk_journal_free(struct chunk_journal *j);

/* Calls apply for the last valid record of each chunk in the journal, in
 * journal order, stopping at the first record a crash cut short (records
 * are complete, so r->sums, r->data point into memory valid for the call).
 * Before any writer runs (at open). Returns the number of records passed to
 * apply, or the first negative value apply returned, or -errno. */
int chunk_journal_replay(struct chunk_journal *j,
			 int (*apply)(void *arg, const struct chunk_jrec *r), void *arg);
/* Starts a new generation: every record so far is dropped. The caller has
 * made their in-place updates durable. Returns 0 or -errno. */
int chunk_journal_reset(struct chunk_journal *j);

/* Appends r (r->len <= CHUNK_JOURNAL_MAX_DATA), checkpointing first when the
 * journal is full; with sync, the record is durable on return. The caller
 * must then update the chunk in place and call chunk_journal_applied once,
 * whether that succeeded or not. Returns 0 (the record counts as in flight),
 * -EFBIG, or -errno (nothing in flight). */
int chunk_journal_append(struct chunk_journal *j, const struct chunk_jrec *r, bool sync);
void chunk_journal_applied(struct chunk_journal *j);
