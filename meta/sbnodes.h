/* sbnodes.h — strata-meta's table of sandbox nodes (issue 17): the lease
 * each strata-sandboxd renews with MSG_MGMT_SBNODE_REPORT, and the view
 * apiservers and `strata admin nodes` read (MSG_MGMT_SBNODES).
 *
 * In memory only: a lease is renewed every lease/3, so after a restart of
 * strata-meta the table is whole again within one period. A node is live
 * while its last report is younger than the lease; past it, it is lost
 * (apiservers report its sandboxes `lost` and place nothing there). The
 * next report of a node that was lost is answered "reconcile": the cluster
 * gave up on the sandboxes it had, and the node removes them. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "fs/sbnode_proto.h"

struct sbnodes;

/* Returns an empty table for leases of lease_ms, or NULL (ENOMEM). */
struct sbnodes *sbnodes_new(uint32_t lease_ms);
void sbnodes_free(struct sbnodes *t);
void sbnodes_set_lease(struct sbnodes *t, uint32_t lease_ms);
uint32_t sbnodes_lease_ms(struct sbnodes *t);

/* Records r as the node's lease, renewed now. *ret_reconcile: the node had
 * been lost (its previous report is older than the lease). Returns 0,
 * -EEXIST when another live incarnation holds the node id at another
 * address (two sandboxds given the same --node-id), -ENOSPC past
 * SBNODE_MAX_NODES. */
int sbnodes_report(struct sbnodes *t, const struct sbnode_report *r, bool *ret_reconcile);

/* Fills *ret with a copy of the table, ordered by node id (release with
 * sbnode_table_done). Returns 0 or -ENOMEM. */
int sbnodes_list(struct sbnodes *t, struct sbnode_table *ret);
