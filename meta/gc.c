/* gc.c — a GC pass (see gc.h). Up to 64 items per pass, so a long queue
 * does not starve the shutdown; the next tick continues. */
#include <errno.h>
#include "gc.h"

#define GC_BATCH 64

int gc_pass(struct ns *ns, gc_remove_fn remove, void *ctx, int *ret_failed)
{
	struct ns_gc_item items[GC_BATCH];
	int n = ns_gc_list(ns, items, GC_BATCH);
	int done = 0, failed = 0;

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (remove(ctx, &items[i]) < 0 || ns_gc_done(ns, items[i].ino) < 0) {
			failed++;
			continue;
		}
		done++;
	}
	if (ret_failed)
		*ret_failed = failed;
	return done;
}
