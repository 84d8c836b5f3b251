/* placement.h — where a new sandbox runs, among the sandbox nodes of a cluster.
 *
 * Power of two choices with cache affinity: a placement looks at two live
 * nodes drawn at random plus up to PLACEMENT_MAX_HOLDERS "holders" of the
 * sandbox's image (nodes whose chunk cache already holds it), and takes the
 * candidate of least score among those that can admit the sandbox. The
 * score is the node's load after admission — the larger of its admitted
 * CPU and memory fractions — less PLACEMENT_AFFINITY (5 %) of it for a
 * holder, so a holder wins unless it is clearly busier. When no candidate
 * can admit, a scan over every node takes the least loaded one that can;
 * when none can, the call fails with -ENOSPC.
 *
 * Admission limits per node: CPU (millicores), memory (bytes) and a
 * sandbox count; a node that is not live is never chosen.
 *
 * The code is pure and deterministic given the seed of its RNG: no clock, no
 * allocation, no locks (the caller serialises calls on one struct
 * placement). The node array belongs to the caller. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define PLACEMENT_MAX_HOLDERS 2
#define PLACEMENT_AFFINITY 0.05 /* a holder's score is its load * (1 - this) */

struct placement_node {
	uint32_t id;	   /* the caller's node id (not used by placement) */
	bool live;	   /* false: never chosen */
	uint32_t cpu_cap;  /* millicores a node admits */
	uint32_t cpu_used; /* millicores admitted */
	uint64_t mem_cap;  /* bytes a node admits */
	uint64_t mem_used; /* bytes admitted */
	uint32_t sbx_cap;  /* sandboxes a node admits (0: no limit) */
	uint32_t sbx_used; /* live sandboxes */
};

struct placement_req {
	uint32_t cpu; /* millicores */
	uint64_t mem; /* bytes */
	/* indices into the node array of up to PLACEMENT_MAX_HOLDERS nodes
	 * whose cache holds the image (more are ignored) */
	const uint32_t *holders;
	unsigned nholders;
};

struct placement {
	struct placement_node *nodes; /* the caller's array */
	uint32_t n;
	uint64_t rng; /* RNG state; placement_init seeds it */
};

/* Sets up p over the caller's array of n nodes with the RNG seeded by seed. */
void placement_init(struct placement *p, struct placement_node *nodes, uint32_t n, uint64_t seed);

/* Returns a node's load: max(cpu_used/cpu_cap, mem_used/mem_cap), 0..1. */
double placement_load(const struct placement_node *nd);

/* Returns true when nd is live and has room for r under its three limits. */
bool placement_can_admit(const struct placement_node *nd, const struct placement_req *r);

/* Chooses a node for r by power of two choices plus the holders. Returns 0
 * with its index in *ret_idx (the node is not changed: see
 * placement_admit), or -ENOSPC when no node can admit r (*ret_idx
 * untouched). */
int placement_pick(struct placement *p, const struct placement_req *r, uint32_t *ret_idx);

/* The baseline: a node drawn uniformly at random among those that can admit
 * r (the holders are ignored). Returns 0 or -ENOSPC like placement_pick. */
int placement_pick_random(struct placement *p, const struct placement_req *r, uint32_t *ret_idx);

/* Counts r against node idx (after a pick), and takes it off again. */
void placement_admit(struct placement *p, uint32_t idx, const struct placement_req *r);
void placement_release(struct placement *p, uint32_t idx, const struct placement_req *r);
