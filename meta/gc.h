/* gc.h — the chunk garbage collector of strata-meta. Files deleted for good
 * are queued as G(ino) entries (ns_gc_list); the collector removes their
 * chunks on the chunkservers and then drops the entries.
 *
 * gc_pass() takes one batch of up to GC_BATCH queued inodes after a cursor,
 * calls remove(ctx, item) for them on up to GC_WORKERS threads at once (so
 * removals on different chunkservers proceed in parallel), and drops the
 * entries of every success in one write batch (ns_gc_done_many).
 *
 * gc_start() runs passes on a thread: back to back while full batches come
 * out (no pause between them), then, at the end of the queue (a "sweep"),
 * waits idle_ms before looking again, or a growing backoff (doubling up to
 * backoff_max_ms) while sweeps keep failing.
 *
 * Invariants:
 *  1. A G entry is deleted only after remove() succeeded for its inode, so a
 *     failure (chunkserver down) leaves it queued for a later sweep.
 *  2. The entries collected by one pass are deleted in one write batch.
 *  3. A pass stops handing out items once GC_WORKERS removals failed (the
 *     rest stay queued), and when gc_stop() is called: stopping waits for at
 *     most the removals already in flight. */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include "meta/ns.h"

#define GC_BATCH 1024 /* inodes per pass */
#define GC_WORKERS 8  /* removals in flight at once */

typedef int (*gc_remove_fn)(void *ctx, const struct ns_gc_item *item);

struct gc_stats {
	int listed;	   /* items read from the queue */
	int done;	   /* removed and dropped from the queue */
	int failed;	   /* remove() or the queue update failed: still queued */
	strata_ino_t last; /* highest inode listed (the next pass's cursor) */
};

/* One pass over up to max (<= GC_BATCH) items with ino > after (0: from the
 * start), nworkers removals at once. stop (may be NULL) is polled before each
 * removal. Returns 0 and *ret, or -errno if the queue could not be read. */
int gc_pass(struct ns *ns, strata_ino_t after, int max, int nworkers, gc_remove_fn remove,
	    void *ctx, const atomic_bool *stop, struct gc_stats *ret);

/* Called at the end of every sweep with its totals (for logging). */
typedef void (*gc_report_fn)(void *ctx, int read_error, const struct gc_stats *sweep,
			     int next_wait_ms);

struct gc_opts {
	gc_remove_fn remove;
	gc_report_fn report; /* may be NULL */
	void *ctx;
	int idle_ms;	    /* wait after a clean sweep; 0 = 500 */
	int backoff_max_ms; /* longest wait after failing sweeps; 0 = 16000 */
};

struct gc;
/* Starts the collector thread. Returns 0 and *ret (stop with gc_stop), or
 * -errno. */
int gc_start(struct ns *ns, const struct gc_opts *o, struct gc **ret);
/* Starts a sweep now instead of after the current wait. */
void gc_kick(struct gc *g);
/* Stops the thread (waits for the removals in flight), frees. NULL ok. */
void gc_stop(struct gc *g);
