/* gc.h — one pass of the garbage collector over the GC queue (ns_gc_list):
 * for each queued inode call remove(ctx, item) to delete its chunks, and on
 * success drop the queue entry (ns_gc_done); failures stay queued for the
 * next pass. strata-meta runs a pass every second on a ticker. */
#pragma once
#include "ns.h"

typedef int (*gc_remove_fn)(void *ctx, const struct ns_gc_item *item);
/* Returns the number of inodes collected, or -errno if the queue could not
 * be read. *ret_failed (may be NULL) gets the number that failed. */
int gc_pass(struct ns *ns, gc_remove_fn remove, void *ctx, int *ret_failed);
