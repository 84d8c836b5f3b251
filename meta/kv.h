/* kv.h — the small key-value interface strata-meta keeps its state behind.
 *
 * The namespace engine (ns_*.c) and the cluster map (cluster.c) see only
 * this: point reads, ordered scans of a key prefix, atomic write batches and
 * a durability barrier. kv_rocksdb.c implements it on an embedded RocksDB;
 * a distributed engine can replace that file later without touching callers.
 *
 * Contract:
 *  1. Keys compare bytewise (memcmp, shorter first on a tie), so big-endian
 *     integers in keys sort numerically.
 *  2. kv_write applies a batch atomically: after a crash either every put
 *     and delete of the batch is visible or none is.
 *  3. kv_write does not wait for the disk; the batch is in the WAL (page
 *     cache) when it returns, so it survives the death of the process but
 *     not of the machine until kv_sync returns.
 *  4. Reads see every batch whose kv_write has returned. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kv;
struct kv_batch;

/* Opens (creating if missing) the store in directory dir. Returns 0 and *ret
 * (free with kv_close), or -errno; *ret_why gets RocksDB's text (static
 * buffer owned by the caller: why[why_cap]) when non-NULL. */
int kv_open(const char *dir, struct kv **ret, char *why, size_t why_cap);
/* Flushes the WAL to disk and closes. NULL ok. */
void kv_close(struct kv *kv);

/* Returns 0 and a malloc'd copy of the value (*ret_val, owned by the caller;
 * may be NULL for an empty value), -ENOENT, or -EIO. */
int kv_get(struct kv *kv, const void *key, size_t klen, void **ret_val, size_t *ret_len);
/* Returns 0 if key exists, -ENOENT if not, -EIO. */
int kv_exists(struct kv *kv, const void *key, size_t klen);

/* Calls fn for each key starting with prefix[0..plen), in key order, from
 * the first key > start (or >= prefix when start is NULL). fn returns 0 to
 * continue, 1 to stop, or a negative errno to stop with that error.
 * Returns 0, the negative value of fn, or -EIO. */
typedef int (*kv_scan_fn)(void *ctx, const uint8_t *key, size_t klen, const uint8_t *val,
			  size_t vlen);
int kv_scan(struct kv *kv, const void *prefix, size_t plen, const void *start, size_t slen,
	    kv_scan_fn fn, void *ctx);

/* A batch of puts and deletes; values are copied. NULL on ENOMEM. */
struct kv_batch *kv_batch_new(void);
void kv_batch_free(struct kv_batch *b);
void kv_batch_put(struct kv_batch *b, const void *key, size_t klen, const void *val, size_t vlen);
void kv_batch_del(struct kv_batch *b, const void *key, size_t klen);
/* Number of operations in the batch. */
int kv_batch_count(const struct kv_batch *b);
/* Applies the batch atomically (contract 2, 3). Returns 0 or -EIO. */
int kv_write(struct kv *kv, struct kv_batch *b);
/* Makes every written batch durable (WAL fsync). Returns 0 or -EIO. */
int kv_sync(struct kv *kv);

/* A consistent read view (fsck): reads through it see exactly the batches
 * written before kv_snap_new, none after. NULL on ENOMEM. */
struct kv_snap;
struct kv_snap *kv_snap_new(struct kv *kv);
void kv_snap_free(struct kv *kv, struct kv_snap *s);
/* kv_get / kv_scan at snapshot s (NULL: the current state). */
int kv_get_at(struct kv *kv, const struct kv_snap *s, const void *key, size_t klen, void **ret_val,
	      size_t *ret_len);
int kv_scan_at(struct kv *kv, const struct kv_snap *s, const void *prefix, size_t plen,
	       const void *start, size_t slen, kv_scan_fn fn, void *ctx);

static inline void kv_batch_freep(struct kv_batch **b)
{
	kv_batch_free(*b);
}
#define _cleanup_batch_ __attribute__((cleanup(kv_batch_freep)))
