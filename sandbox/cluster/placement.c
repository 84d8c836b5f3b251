/* placement.c — power of two choices with cache affinity (see placement.h).
 *
 * Invariants:
 *  1. A chosen node can admit the request (placement_can_admit).
 *  2. The result depends only on the node array, the request and the RNG
 *     state: the same seed and the same calls give the same choices.
 *  3. No allocation and a bounded number of draws per call: a scan over the
 *     nodes only when every candidate is full or not live. */
#include "sandbox/cluster/placement.h"

#include <errno.h>

/* Draws before a random candidate gives up and the scan takes over. */
#define PLACEMENT_DRAWS 8

void placement_init(struct placement *p, struct placement_node *nodes, uint32_t n, uint64_t seed)
{
	p->nodes = nodes;
	p->n = n;
	p->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
}

/* splitmix64: small, fast, good enough to draw nodes. */
static uint64_t rng_next(struct placement *p)
{
	uint64_t z = (p->rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t rng_below(struct placement *p, uint32_t n)
{
	return (uint32_t)(((rng_next(p) >> 32) * (uint64_t)n) >> 32);
}

static double frac(uint64_t used, uint64_t cap)
{
	return cap ? (double)used / (double)cap : 1.0;
}

double placement_load(const struct placement_node *nd)
{
	double c = frac(nd->cpu_used, nd->cpu_cap), m = frac(nd->mem_used, nd->mem_cap);
	return c > m ? c : m;
}

bool placement_can_admit(const struct placement_node *nd, const struct placement_req *r)
{
	if (!nd->live)
		return false;
	if ((uint64_t)nd->cpu_used + r->cpu > nd->cpu_cap)
		return false;
	if (nd->mem_used > nd->mem_cap || r->mem > nd->mem_cap - nd->mem_used)
		return false;
	if (nd->sbx_cap && nd->sbx_used >= nd->sbx_cap)
		return false;
	return true;
}

/* The load of nd once r is admitted. */
static double load_after(const struct placement_node *nd, const struct placement_req *r)
{
	double c = frac((uint64_t)nd->cpu_used + r->cpu, nd->cpu_cap);
	double m = frac(nd->mem_used + r->mem, nd->mem_cap);
	return c > m ? c : m;
}

/* A live node that can admit r, drawn at random; UINT32_MAX after
 * PLACEMENT_DRAWS misses. */
static uint32_t draw(struct placement *p, const struct placement_req *r)
{
	for (int i = 0; i < PLACEMENT_DRAWS; i++) {
		uint32_t k = rng_below(p, p->n);
		if (placement_can_admit(&p->nodes[k], r))
			return k;
	}
	return UINT32_MAX;
}

/* The least loaded node that can admit r (lowest index on ties), or
 * UINT32_MAX. */
static uint32_t scan(const struct placement *p, const struct placement_req *r)
{
	uint32_t best = UINT32_MAX;
	double best_score = 0;
	for (uint32_t k = 0; k < p->n; k++) {
		if (!placement_can_admit(&p->nodes[k], r))
			continue;
		double s = load_after(&p->nodes[k], r);
		if (best == UINT32_MAX || s < best_score) {
			best = k;
			best_score = s;
		}
	}
	return best;
}

int placement_pick(struct placement *p, const struct placement_req *r, uint32_t *ret_idx)
{
	uint32_t best = UINT32_MAX;
	double best_score = 0;
	if (!p->n)
		return -ENOSPC;
	unsigned nh = r->nholders < PLACEMENT_MAX_HOLDERS ? r->nholders : PLACEMENT_MAX_HOLDERS;
	for (unsigned i = 0; i < nh; i++) {
		uint32_t k = r->holders[i];
		if (k >= p->n || !placement_can_admit(&p->nodes[k], r))
			continue;
		double s = load_after(&p->nodes[k], r) * (1.0 - PLACEMENT_AFFINITY);
		if (best == UINT32_MAX || s < best_score) {
			best = k;
			best_score = s;
		}
	}
	for (int i = 0; i < 2; i++) {
		uint32_t k = draw(p, r);
		if (k == UINT32_MAX)
			continue;
		double s = load_after(&p->nodes[k], r);
		if (best == UINT32_MAX || s < best_score) {
			best = k;
			best_score = s;
		}
	}
	if (best == UINT32_MAX)
		best = scan(p, r);
	if (best == UINT32_MAX)
		return -ENOSPC;
	*ret_idx = best;
	return 0;
}

int placement_pick_random(struct placement *p, const struct placement_req *r, uint32_t *ret_idx)
{
	if (!p->n)
		return -ENOSPC;
	uint32_t k = draw(p, r);
	if (k == UINT32_MAX)
		k = scan(p, r);
	if (k == UINT32_MAX)
		return -ENOSPC;
	*ret_idx = k;
	return 0;
}

void placement_admit(struct placement *p, uint32_t idx, const struct placement_req *r)
{
	struct placement_node *nd = &p->nodes[idx];
	nd->cpu_used += r->cpu;
	nd->mem_used += r->mem;
	nd->sbx_used++;
}

void placement_release(struct placement *p, uint32_t idx, const struct placement_req *r)
{
	struct placement_node *nd = &p->nodes[idx];
	nd->cpu_used = nd->cpu_used > r->cpu ? nd->cpu_used - r->cpu : 0;
	nd->mem_used = nd->mem_used > r->mem ? nd->mem_used - r->mem : 0;
	nd->sbx_used = nd->sbx_used ? nd->sbx_used - 1 : 0;
}
