/* sbnode_proto.h — the sandbox nodes' lease in strata-meta (issue 17): what
 * a strata-sandboxd reports about itself (MSG_MGMT_SBNODE_REPORT, renewed
 * every lease/3) and the node table strata-meta answers with
 * (MSG_MGMT_SBNODES), which strata-apiserver places sandboxes from and
 * `strata admin nodes` prints.
 *
 * A node is named by the operator's --node-id (1..SBNODE_ID_MAX): sandbox
 * ids carry it (sb-NNNN...), so that any apiserver routes a sandbox's
 * requests to its node without a lookup. The table lives in strata-meta's
 * memory only: a node that reports again within a lease after a restart of
 * strata-meta is back in it.
 *
 * Encoding (wire.h's little-endian codec, fields appended, never reordered):
 *   report  node_id u32, incarnation u64, api_addr str, sandboxes u32,
 *           sbx_cap u32, creating u32, cpu_used u32, cpu_cap u32 (millicores),
 *           mem_used u64, mem_cap u64 (bytes), nimages u32, then per image
 *           name str, sandboxes u32, mounted u8, cached_bytes u64
 *   reply   lease_ms u32, reconcile u8
 *   table   lease_ms u32, n u32, then per node: a report, age_ms i64, lost u8
 * Decoders return 0 or -EBADMSG and never read past the payload. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "fs/wire.h"

#define SBNODE_ID_MAX 0xffffu
#define SBNODE_ADDR_MAX 63
#define SBNODE_IMAGE_NAME_MAX 127
#define SBNODE_MAX_IMAGES 32
#define SBNODE_MAX_NODES 4096

struct sbnode_image {
	char name[SBNODE_IMAGE_NAME_MAX + 1];
	uint32_t sandboxes;    /* live sandboxes of the image on the node */
	bool mounted;	       /* a store image mounted on the node */
	uint64_t cached_bytes; /* of its data in the node's chunk cache (0: unknown) */
};

struct sbnode_report {
	uint32_t node_id;		    /* 1..SBNODE_ID_MAX */
	uint64_t incarnation;		    /* random per start of sandboxd */
	char api_addr[SBNODE_ADDR_MAX + 1]; /* HOST:PORT of its TCP API */
	uint32_t sandboxes, sbx_cap, creating;
	uint32_t cpu_used, cpu_cap; /* millicores admitted / the node's budget */
	uint64_t mem_used, mem_cap; /* bytes admitted / the node's budget */
	uint32_t nimages;
	struct sbnode_image images[SBNODE_MAX_IMAGES];
};

/* One row of the table strata-meta holds. */
struct sbnode_entry {
	struct sbnode_report r;
	int64_t age_ms; /* since its last report */
	bool lost;	/* its lease lapsed: its sandboxes are given up */
};

struct sbnode_table {
	uint32_t lease_ms;
	uint32_t n;
	struct sbnode_entry *nodes; /* heap, n entries: sbnode_table_done */
};

void sbnode_report_put(struct wbuf *b, const struct sbnode_report *r);
/* Reads a report (no rbuf_done: it is also a piece of the table). */
void sbnode_report_read(struct rbuf *b, struct sbnode_report *ret);
/* Returns 0 or -EBADMSG (also for a node id outside 1..SBNODE_ID_MAX or
 * more than SBNODE_MAX_IMAGES images). */
int sbnode_report_get(struct rbuf *b, struct sbnode_report *ret);

void sbnode_reply_put(struct wbuf *b, uint32_t lease_ms, bool reconcile);
int sbnode_reply_get(struct rbuf *b, uint32_t *ret_lease_ms, bool *ret_reconcile);

void sbnode_table_put(struct wbuf *b, const struct sbnode_table *t);
/* Fills *ret (heap array) or returns -EBADMSG / -ENOMEM with *ret empty. */
int sbnode_table_get(struct rbuf *b, struct sbnode_table *ret);
void sbnode_table_done(struct sbnode_table *t);

/* The members of one node's JSON object (the caller opens and closes it):
 * node, addr, state (live/lost), age_ms, sandboxes, max_sandboxes,
 * creating, cpu_milli, cpu_budget_milli, memory_bytes, memory_budget_bytes,
 * images [{name, sandboxes, mounted, cached_bytes}]. */
struct jw;
void sbnode_entry_json(struct jw *w, const struct sbnode_entry *e);
