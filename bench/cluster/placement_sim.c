/* placement_sim.c — a cluster-scale simulation of sandbox placement that
 * drives the real placement code (sandbox/cluster/placement.c).
 *
 * 160 nodes, 5,000 creations per simulated second for 10 simulated minutes;
 * lifetimes lognormal around a 17-minute median (sigma 1); images drawn from
 * a Zipf popularity (s = 1) over 1,000 images; each node's chunk cache holds
 * the last CACHE_SLOTS images placed on it (LRU), and the holders offered to
 * a placement are the latest nodes an image was placed on that still hold
 * it. The same workload (same seed) runs under power of two choices with
 * affinity and under the uniform-random baseline, and the program prints for
 * each: placement latency p50/p99 (clock_gettime around the real call),
 * imbalance (max/mean load) at the end and the worst from t = 10 s, the
 * affinity hit rate (the chosen node held the image) and the cores needed
 * to place 5,000/s.
 *
 * Usage: placement_sim [--seconds N] [--check]
 *   --check: exit 1 unless p2c's worst imbalance <= 1.1 and its hit rate
 *   beats random's (the ctest cluster_placement_sim). */
#include "sandbox/cluster/placement.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NODES 160
#define RATE 5000
#define IMAGES 1000
#define CACHE_SLOTS 24
#define HOLDER_MEMO 4
#define MEDIAN_LIFE 1020.0 /* s */
#define SIGMA_LIFE 1.0
#define GIB (1ull << 30)

struct live {
	double end;
	uint32_t node;
	uint32_t cpu;
	uint64_t mem;
};

struct heap {
	struct live *v;
	size_t n, cap;
};

static void heap_push(struct heap *h, struct live x)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 1 << 16;
		h->v = realloc(h->v, h->cap * sizeof(*h->v));
		if (!h->v)
			abort();
	}
	size_t i = h->n++;
	while (i) {
		size_t p = (i - 1) / 2;
		if (h->v[p].end <= x.end)
			break;
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = x;
}

static struct live heap_pop(struct heap *h)
{
	struct live top = h->v[0], x = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1].end < h->v[c].end)
			c++;
		if (x.end <= h->v[c].end)
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = x;
	return top;
}

/* the workload's own RNG (the placement has its own) */
static uint64_t wl_state;
static uint64_t wl_next(void)
{
	uint64_t z = (wl_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
static double wl_unit(void)
{
	return ((wl_next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double zipf_cdf[IMAGES];
static uint32_t zipf_draw(void)
{
	double u = wl_unit();
	uint32_t lo = 0, hi = IMAGES - 1;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (zipf_cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct cache {
	uint32_t img[CACHE_SLOTS];
	uint64_t used[CACHE_SLOTS];
	unsigned n;
};

static bool cache_has(const struct cache *c, uint32_t img)
{
	for (unsigned i = 0; i < c->n; i++)
		if (c->img[i] == img)
			return true;
	return false;
}

static void cache_touch(struct cache *c, uint32_t img, uint64_t tick)
{
	unsigned lru = 0;
	for (unsigned i = 0; i < c->n; i++) {
		if (c->img[i] == img) {
			c->used[i] = tick;
			return;
		}
		if (c->used[i] < c->used[lru])
			lru = i;
	}
	unsigned slot = c->n < CACHE_SLOTS ? c->n++ : lru;
	c->img[slot] = img;
	c->used[slot] = tick;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static double imbalance(const struct placement_node *nd)
{
	double max = 0, sum = 0;
	for (int i = 0; i < NODES; i++) {
		double l = placement_load(&nd[i]);
		max = l > max ? l : max;
		sum += l;
	}
	return sum > 0 ? max / (sum / NODES) : 1.0;
}

struct result {
	uint32_t p50, p99;
	double mean_ns, imb_end, imb_worst, hit_rate, load_end;
	unsigned long placed, enospc;
};

static struct result run(bool p2c, int seconds, uint32_t *lat)
{
	static struct placement_node nd[NODES];
	static struct cache cache[NODES];
	static uint32_t memo[IMAGES][HOLDER_MEMO];
	static unsigned nmemo[IMAGES];
	struct heap h = {0};
	struct placement p;
	struct result res = {0};
	memset(nd, 0, sizeof(nd));
	memset(cache, 0, sizeof(cache));
	memset(nmemo, 0, sizeof(nmemo));
	for (int i = 0; i < NODES; i++) {
		nd[i].id = i + 1;
		nd[i].live = true;
		/* sized for ~70 % load after 10 minutes (~2.5 M live sandboxes) */
		nd[i].cpu_cap = 22000u * 1000u;
		nd[i].mem_cap = 44ull * 1024 * GIB;
	}
	placement_init(&p, nd, NODES, 12345);
	wl_state = 777;
	unsigned long hits = 0, n = 0;
	double sum_ns = 0;
	static const uint32_t cpus[4] = {250, 500, 1000, 2000};
	static const uint64_t mems[4] = {GIB / 2, GIB, 2 * GIB, 4 * GIB};
	double warm = seconds > 20 ? 10 : seconds / 2.0;
	res.imb_worst = 0;
	for (int s = 0; s < seconds; s++) {
		for (int j = 0; j < RATE; j++) {
			double now = s + (double)j / RATE;
			while (h.n && h.v[0].end <= now) {
				struct live x = heap_pop(&h);
				struct placement_req rr = {.cpu = x.cpu, .mem = x.mem};
				placement_release(&p, x.node, &rr);
			}
			uint32_t img = zipf_draw();
			uint32_t holders[PLACEMENT_MAX_HOLDERS];
			unsigned nh = 0;
			for (unsigned m = 0; m < nmemo[img] && nh < PLACEMENT_MAX_HOLDERS; m++)
				if (cache_has(&cache[memo[img][m]], img))
					holders[nh++] = memo[img][m];
			unsigned sz = wl_next() & 3;
			struct placement_req r = {
			    .cpu = cpus[sz], .mem = mems[sz], .holders = holders, .nholders = nh};
			uint32_t k;
			struct timespec t0, t1;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			int rc =
			    p2c ? placement_pick(&p, &r, &k) : placement_pick_random(&p, &r, &k);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			uint32_t ns = (uint32_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll +
						 (t1.tv_nsec - t0.tv_nsec));
			lat[n] = ns;
			sum_ns += ns;
			n++;
			double life = MEDIAN_LIFE * exp(SIGMA_LIFE * sqrt(-2 * log(wl_unit())) *
							cos(2 * M_PI * wl_unit()));
			if (rc) {
				res.enospc++;
				continue;
			}
			res.placed++;
			if (cache_has(&cache[k], img))
				hits++;
			cache_touch(&cache[k], img, n);
			/* k becomes the image's newest holder */
			unsigned m = 0;
			while (m < nmemo[img] && memo[img][m] != k)
				m++;
			if (m == nmemo[img] && nmemo[img] < HOLDER_MEMO)
				nmemo[img]++;
			if (m == HOLDER_MEMO)
				m--;
			memmove(&memo[img][1], &memo[img][0], m * sizeof(uint32_t));
			memo[img][0] = k;
			placement_admit(&p, k, &r);
			heap_push(&h,
				  (struct live){
				      .end = now + life, .node = k, .cpu = r.cpu, .mem = r.mem});
		}
		if (s + 1 >= warm) {
			double imb = imbalance(nd);
			res.imb_worst = imb > res.imb_worst ? imb : res.imb_worst;
		}
	}
	res.imb_end = imbalance(nd);
	double sum = 0;
	for (int i = 0; i < NODES; i++)
		sum += placement_load(&nd[i]);
	res.load_end = sum / NODES;
	res.hit_rate = res.placed ? (double)hits / res.placed : 0;
	res.mean_ns = n ? sum_ns / n : 0;
	qsort(lat, n, sizeof(*lat), cmp_u32);
	res.p50 = n ? lat[n / 2] : 0;
	res.p99 = n ? lat[n * 99 / 100] : 0;
	free(h.v);
	return res;
}

static void print(const char *name, const struct result *r)
{
	printf("%-14s p50 %5u ns  p99 %5u ns  imbalance %.3f (worst %.3f)  hit rate %.3f  "
	       "cores for %d/s %.5f  mean load %.2f  enospc %lu\n",
	       name, r->p50, r->p99, r->imb_end, r->imb_worst, r->hit_rate, RATE,
	       r->mean_ns * RATE / 1e9, r->load_end, r->enospc);
}

int main(int argc, char **argv)
{
	int seconds = 600;
	bool check = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--check"))
			check = true;
		else {
			fprintf(stderr, "usage: placement_sim [--seconds N] [--check]\n");
			return 2;
		}
	}
	if (seconds < 1 || seconds > 3600) {
		fprintf(stderr, "placement_sim: --seconds 1..3600\n");
		return 2;
	}
	double z = 0;
	for (int i = 0; i < IMAGES; i++)
		z += 1.0 / (i + 1);
	double c = 0;
	for (int i = 0; i < IMAGES; i++) {
		c += 1.0 / (i + 1) / z;
		zipf_cdf[i] = c;
	}
	zipf_cdf[IMAGES - 1] = 1.0;
	uint32_t *lat = malloc((size_t)seconds * RATE * sizeof(*lat));
	if (!lat)
		return 1;
	printf("placement_sim: %d nodes, %d creations/s for %d s, lifetimes lognormal median "
	       "%.0f s, %d images Zipf(1), %d-image LRU cache per node\n",
	       NODES, RATE, seconds, MEDIAN_LIFE, IMAGES, CACHE_SLOTS);
	struct result a = run(true, seconds, lat);
	print("p2c+affinity", &a);
	struct result b = run(false, seconds, lat);
	print("random", &b);
	free(lat);
	if (check) {
		if (a.imb_worst > 1.1 || a.hit_rate <= b.hit_rate || a.enospc) {
			fprintf(stderr, "placement_sim: check failed\n");
			return 1;
		}
		printf("placement_sim: check ok\n");
	}
	return 0;
}
