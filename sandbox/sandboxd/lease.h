/* lease.h — this node's lease in the cluster (issue 17): with --meta, a
 * thread of its own renews it with strata-meta every lease/3
 * (MSG_MGMT_SBNODE_REPORT, fs/sbnode_proto.h), reporting what placement
 * needs; the loop hands it a fresh report every second (sbd_lease_tick).
 *
 * The thread, not the loop, waits on strata-meta: a slow or dead meta
 * never holds a request. When meta answers "reconcile" (the node's lease
 * had lapsed, so the cluster reported its sandboxes lost and gave up on
 * them), the loop removes the sandboxes it had at that moment. */
#pragma once
#include <stdbool.h>

struct sandboxd;
struct sbd_lease;

/* Starts the lease thread towards meta_addr for d's node (d->cfg.node_id,
 * advertise). Returns the handle, or NULL with errno set (the reason
 * logged). */
struct sbd_lease *sbd_lease_start(struct sandboxd *d);
/* On the loop, every second: builds the report of d's state for the next
 * renewal, and removes the sandboxes the cluster gave up on when meta said
 * so. */
void sbd_lease_tick(struct sandboxd *d, struct sbd_lease *l);
/* Stops and joins the thread (bounded by one RPC's timeout); NULL is a
 * no-op. */
void sbd_lease_stop(struct sbd_lease *l);
