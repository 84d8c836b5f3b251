/* nodes.c — the apiserver's view of the sandbox nodes: strata-meta's table
 * (MSG_MGMT_SBNODES) read every --refresh-ms by a thread, placement over it
 * (sandbox/cluster/placement.h, the real code), and the queue of creations
 * that wait for room.
 *
 * Between two reports a node's load is its report plus what this
 * apiserver placed there since: every pick is remembered with its time for
 * a while (PENDING_MS) and counted on top of any report older than it, so a
 * burst spreads instead of landing on the node that looked emptiest a
 * second ago. Other apiservers' picks are not seen until the nodes report
 * them; power of k choices is made for exactly that (stale loads). A
 * delete through this apiserver takes the node's oldest such pick off (a
 * short-lived sandbox, made and deleted within a report's lag, would
 * otherwise count for seconds: measured, a create + delete loop filled a
 * node's CPU budget with picks whose sandboxes were gone).
 *
 * A creation that finds no room waits on the condition variable until a
 * refresh, a delete through this apiserver or its deadline; at most
 * --queue-max wait at once (the next ones are refused at once). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include "fs/clock.h"
#include "fs/log.h"
#include "fs/meta_client.h"
#include "sandbox/apiserver/apiserver.h"
#include "sandbox/cluster/placement.h"

#define PENDING_MAX 4096
#define PENDING_MS 5000 /* longer than a report's lag: a second's tick + lease/3 */

struct pending {
	uint32_t node;
	uint32_t cpu;
	uint64_t mem;
	int64_t at_ms;
};

struct api_nodes {
	struct apiserver *a;
	pthread_mutex_t mu;
	pthread_cond_t room; /* a refresh or a release: try again */
	pthread_cond_t tick; /* the refresh thread's sleep (and its stop) */
	pthread_t thread;
	bool stop;
	struct meta_client *mc;
	struct sbnode_table t;	   /* the last table read */
	int64_t read_ms;	   /* when it was read */
	struct placement_node *pn; /* t.n entries, load counted as above */
	struct placement pl;
	struct pending pend[PENDING_MAX];
	uint32_t npend;
	int queued;
	int last_err;
};

static void pend_prune(struct api_nodes *n, int64_t now)
{
	uint32_t w = 0;
	for (uint32_t i = 0; i < n->npend; i++)
		if (now - n->pend[i].at_ms < PENDING_MS)
			n->pend[w++] = n->pend[i];
	n->npend = w;
}

/* pn from the table, with our picks newer than each report on top. */
static void rebuild(struct api_nodes *n)
{
	int64_t now = strata_mono_ms();
	pend_prune(n, now);
	for (uint32_t i = 0; i < n->t.n; i++) {
		const struct sbnode_entry *e = &n->t.nodes[i];
		struct placement_node *p = &n->pn[i];
		int64_t reported_at = n->read_ms - e->age_ms - 1000; /* the loop's tick */
		*p = (struct placement_node){.id = e->r.node_id,
					     .live = !e->lost,
					     .cpu_cap = e->r.cpu_cap,
					     .cpu_used = e->r.cpu_used,
					     .mem_cap = e->r.mem_cap,
					     .mem_used = e->r.mem_used,
					     .sbx_cap = e->r.sbx_cap,
					     .sbx_used = e->r.sandboxes};
		for (uint32_t k = 0; k < n->npend; k++)
			if (n->pend[k].node == e->r.node_id && n->pend[k].at_ms > reported_at) {
				p->cpu_used += n->pend[k].cpu;
				p->mem_used += n->pend[k].mem;
				p->sbx_used++;
			}
	}
	n->pl.nodes = n->pn;
	n->pl.n = n->t.n;
}

static int refresh(struct api_nodes *n)
{
	struct sbnode_table t;
	int e = mgmt_sbnodes(n->mc, &t);
	if (e < 0)
		return e;
	struct placement_node *pn = calloc(t.n ? t.n : 1, sizeof(*pn));
	if (!pn) {
		sbnode_table_done(&t);
		return -ENOMEM;
	}
	pthread_mutex_lock(&n->mu);
	sbnode_table_done(&n->t);
	free(n->pn);
	n->t = t;
	n->pn = pn;
	n->read_ms = strata_mono_ms();
	rebuild(n);
	pthread_cond_broadcast(&n->room);
	pthread_mutex_unlock(&n->mu);
	return 0;
}

static void *refresh_main(void *arg)
{
	struct api_nodes *n = arg;
	pthread_mutex_lock(&n->mu);
	while (!n->stop) {
		pthread_mutex_unlock(&n->mu);
		int e = refresh(n);
		if (e < 0 && e != n->last_err)
			log_warn("cannot read the node table from strata-meta at %s: %s",
				 n->a->cfg.meta_addr, rpc_strerror(e));
		else if (e == 0 && n->last_err)
			log_info("node table read from strata-meta again");
		n->last_err = e;
		pthread_mutex_lock(&n->mu);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t ns = ts.tv_nsec + n->a->cfg.refresh_ms * 1000000;
		ts.tv_sec += ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		if (!n->stop)
			pthread_cond_timedwait(&n->tick, &n->mu, &ts);
	}
	pthread_mutex_unlock(&n->mu);
	return NULL;
}

struct api_nodes *api_nodes_new(struct apiserver *a)
{
	struct api_nodes *n = calloc(1, sizeof(*n));
	struct rpc_client_opts o = {.timeout_ms = 2000, .connect_timeout_ms = 1000, .max_conns = 1};
	uint64_t seed = 0;
	if (!n)
		return NULL;
	pthread_mutex_init(&n->mu, NULL);
	pthread_cond_init(&n->room, NULL);
	pthread_cond_init(&n->tick, NULL);
	n->a = a;
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint64_t)time(NULL);
	placement_init(&n->pl, NULL, 0, seed);
	n->mc = meta_client_new(a->cfg.meta_addr, "strata-apiserver", &o);
	int e = n->mc ? refresh(n) : -ENOMEM;
	if (e < 0)
		log_warn("the node table is not read yet from strata-meta at %s: %s (retried)",
			 a->cfg.meta_addr, rpc_strerror(e));
	n->last_err = e;
	if (!n->mc || pthread_create(&n->thread, NULL, refresh_main, n)) {
		log_error("cannot start the node table's thread");
		meta_client_free(n->mc);
		free(n);
		return NULL;
	}
	return n;
}

void api_nodes_free(struct api_nodes *n)
{
	if (!n)
		return;
	pthread_mutex_lock(&n->mu);
	n->stop = true;
	pthread_cond_broadcast(&n->tick);
	pthread_mutex_unlock(&n->mu);
	pthread_join(n->thread, NULL);
	meta_client_free(n->mc);
	sbnode_table_done(&n->t);
	free(n->pn);
	free(n);
}

static int index_of(const struct api_nodes *n, uint32_t node)
{
	for (uint32_t i = 0; i < n->t.n; i++)
		if (n->t.nodes[i].r.node_id == node)
			return (int)i;
	return -1;
}

/* Holders of the image: nodes that have it mounted or run sandboxes of it,
 * the two least loaded. */
static unsigned holders_of(const struct api_nodes *n, const char *image, uint32_t *out)
{
	unsigned k = 0;
	for (uint32_t i = 0; image && i < n->t.n; i++) {
		const struct sbnode_report *r = &n->t.nodes[i].r;
		bool has = false;
		for (uint32_t j = 0; j < r->nimages && !has; j++)
			has = !strcmp(r->images[j].name, image) &&
			      (r->images[j].mounted || r->images[j].sandboxes);
		if (!has || !n->pn[i].live)
			continue;
		if (k < PLACEMENT_MAX_HOLDERS) {
			out[k++] = i;
			continue;
		}
		unsigned worst =
		    placement_load(&n->pn[out[0]]) > placement_load(&n->pn[out[1]]) ? 0 : 1;
		if (placement_load(&n->pn[i]) < placement_load(&n->pn[out[worst]]))
			out[worst] = i;
	}
	return k;
}

/* One try under mu. Returns 0 with the index, or -ENOSPC. */
static int pick_locked(struct api_nodes *n, const struct api_place *p, uint32_t *ret_idx)
{
	uint32_t holders[PLACEMENT_MAX_HOLDERS];
	bool was[API_EXCLUDE_MAX];
	int idx[API_EXCLUDE_MAX];
	for (unsigned i = 0; i < p->nexclude; i++) /* refused it already: not a candidate */
		if ((idx[i] = index_of(n, p->exclude[i])) >= 0) {
			was[i] = n->pn[idx[i]].live;
			n->pn[idx[i]].live = false;
		}
	struct placement_req r = {.cpu = p->cpu_milli, .mem = p->mem, .holders = holders};
	r.nholders = holders_of(n, p->image, holders);
	int e = n->t.n ? placement_pick(&n->pl, &r, ret_idx) : -ENOSPC;
	for (unsigned i = p->nexclude; i-- > 0;)
		if (idx[i] >= 0)
			n->pn[idx[i]].live = was[i];
	if (e == 0) {
		placement_admit(&n->pl, *ret_idx, &r);
		if (n->npend < PENDING_MAX)
			n->pend[n->npend++] = (struct pending){n->pn[*ret_idx].id, p->cpu_milli,
							       p->mem, strata_mono_ms()};
	}
	return e;
}

static bool any_live(const struct api_nodes *n)
{
	for (uint32_t i = 0; i < n->t.n; i++)
		if (n->pn[i].live)
			return true;
	return false;
}

int api_nodes_pick(struct api_nodes *n, const struct api_place *p, int64_t deadline_ms,
		   uint32_t *ret_node, char ret_addr[API_ADDR_MAX], int64_t *ret_waited_ms)
{
	int64_t t0 = strata_mono_ms();
	uint32_t i;
	int e;
	bool queued = false;
	pthread_mutex_lock(&n->mu);
	while ((e = pick_locked(n, p, &i)) == -ENOSPC) {
		int64_t now = strata_mono_ms();
		if (now >= deadline_ms) {
			e = any_live(n) ? -ETIMEDOUT : -ENODEV;
			break;
		}
		if (!queued) {
			if (n->queued >= n->a->cfg.queue_max) {
				e = -EBUSY;
				break;
			}
			n->queued++;
			queued = true;
			atomic_fetch_add(&n->a->queued_total, 1);
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t wait = deadline_ms - now < 100 ? deadline_ms - now : 100; /* recheck */
		int64_t ns = ts.tv_nsec + wait * 1000000;
		ts.tv_sec += ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		pthread_cond_timedwait(&n->room, &n->mu, &ts);
	}
	if (queued)
		n->queued--;
	if (e == 0) {
		*ret_node = n->pn[i].id;
		snprintf(ret_addr, API_ADDR_MAX, "%s", n->t.nodes[i].r.api_addr);
	}
	pthread_mutex_unlock(&n->mu);
	*ret_waited_ms = strata_mono_ms() - t0;
	return e;
}

void api_nodes_unpick(struct api_nodes *n, uint32_t node, const struct api_place *p)
{
	pthread_mutex_lock(&n->mu);
	for (uint32_t k = n->npend; k-- > 0;)
		if (n->pend[k].node == node && n->pend[k].cpu == p->cpu_milli &&
		    n->pend[k].mem == p->mem) {
			n->pend[k] = n->pend[--n->npend];
			break;
		}
	rebuild(n);
	pthread_cond_broadcast(&n->room);
	pthread_mutex_unlock(&n->mu);
}

static void mark(struct api_nodes *n, uint32_t node, bool down)
{
	pthread_mutex_lock(&n->mu);
	int i = index_of(n, node);
	if (i >= 0 && down)
		n->pn[i].live = false; /* until the next refresh says otherwise */
	else if (i >= 0)
		n->pn[i].sbx_used = n->pn[i].sbx_cap ? n->pn[i].sbx_cap : UINT32_MAX;
	pthread_mutex_unlock(&n->mu);
}

void api_nodes_full(struct api_nodes *n, uint32_t node)
{
	mark(n, node, false);
}

void api_nodes_down(struct api_nodes *n, uint32_t node)
{
	mark(n, node, true);
}

void api_nodes_released(struct api_nodes *n, uint32_t node)
{
	int oldest = -1;
	pthread_mutex_lock(&n->mu);
	/* A pick not reported yet whose sandbox is gone already (a create and
	 * a delete within a report's lag, as a short-lived sandbox is) must not
	 * be counted any more: the oldest of the node's picks goes. */
	for (uint32_t k = 0; k < n->npend; k++)
		if (n->pend[k].node == node &&
		    (oldest < 0 || n->pend[k].at_ms < n->pend[oldest].at_ms))
			oldest = (int)k;
	if (oldest >= 0) {
		n->pend[oldest] = n->pend[--n->npend];
		rebuild(n);
	}
	int i = index_of(n, node);
	if (i >= 0 && oldest < 0 && n->pn[i].sbx_used)
		n->pn[i].sbx_used--;
	pthread_cond_broadcast(&n->room);
	pthread_mutex_unlock(&n->mu);
}

int api_nodes_route(struct api_nodes *n, uint32_t node, char ret_addr[API_ADDR_MAX])
{
	pthread_mutex_lock(&n->mu);
	int i = index_of(n, node), e = -ENOENT;
	if (i >= 0) {
		e = n->t.nodes[i].lost ? -EHOSTDOWN : 0;
		snprintf(ret_addr, API_ADDR_MAX, "%s", n->t.nodes[i].r.api_addr);
	}
	pthread_mutex_unlock(&n->mu);
	return e;
}

int api_nodes_list(struct api_nodes *n, uint32_t *ids, char (*addrs)[API_ADDR_MAX], int max,
		   uint32_t *lost, int *nlost, int maxlost)
{
	int k = 0;
	*nlost = 0;
	pthread_mutex_lock(&n->mu);
	for (uint32_t i = 0; i < n->t.n; i++) {
		const struct sbnode_entry *e = &n->t.nodes[i];
		if (e->lost && *nlost < maxlost)
			lost[(*nlost)++] = e->r.node_id;
		else if (!e->lost && k < max) {
			ids[k] = e->r.node_id;
			snprintf(addrs[k++], API_ADDR_MAX, "%s", e->r.api_addr);
		}
	}
	pthread_mutex_unlock(&n->mu);
	return k;
}

int api_nodes_queued(struct api_nodes *n)
{
	pthread_mutex_lock(&n->mu);
	int q = n->queued;
	pthread_mutex_unlock(&n->mu);
	return q;
}

void api_nodes_json(struct api_nodes *n, struct jw *w)
{
	pthread_mutex_lock(&n->mu);
	jw_kint(w, "lease_ms", n->t.lease_ms);
	jw_kint(w, "queued", n->queued);
	jw_key(w, "nodes");
	jw_arr(w);
	for (uint32_t i = 0; i < n->t.n; i++) {
		jw_obj(w);
		sbnode_entry_json(w, &n->t.nodes[i]);
		jw_kint(w, "placed", n->pn[i].sbx_used); /* with our picks since the report */
		jw_key(w, "load");
		jw_num(w, placement_load(&n->pn[i]));
		jw_obj_end(w);
	}
	jw_arr_end(w);
	pthread_mutex_unlock(&n->mu);
}
