/* sbnodes.c — the sandbox node table (sbnodes.h): a sorted array of the
 * nodes' last reports, each with the monotonic time it came, under one
 * mutex. Liveness is computed when asked (age against the lease), so no
 * timer is needed: a node is lost from the moment its lease runs out. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "fs/clock.h"
#include "meta/sbnodes.h"

struct slot {
	struct sbnode_report r;
	int64_t heard_ms; /* strata_mono_ms of the last report */
};

struct sbnodes {
	pthread_mutex_t mu;
	uint32_t lease_ms;
	struct slot *v; /* sorted by node id */
	uint32_t n, cap;
};

struct sbnodes *sbnodes_new(uint32_t lease_ms)
{
	struct sbnodes *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	pthread_mutex_init(&t->mu, NULL);
	t->lease_ms = lease_ms;
	return t;
}

void sbnodes_free(struct sbnodes *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->mu);
	free(t->v);
	free(t);
}

void sbnodes_set_lease(struct sbnodes *t, uint32_t lease_ms)
{
	pthread_mutex_lock(&t->mu);
	t->lease_ms = lease_ms;
	pthread_mutex_unlock(&t->mu);
}

uint32_t sbnodes_lease_ms(struct sbnodes *t)
{
	pthread_mutex_lock(&t->mu);
	uint32_t l = t->lease_ms;
	pthread_mutex_unlock(&t->mu);
	return l;
}

/* The index of node id, or where it would go. */
static uint32_t find(const struct sbnodes *t, uint32_t id)
{
	uint32_t lo = 0, hi = t->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (t->v[mid].r.node_id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int insert_at(struct sbnodes *t, uint32_t i)
{
	if (t->n == SBNODE_MAX_NODES)
		return -ENOSPC;
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 8;
		struct slot *v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof(*t->v));
	memset(&t->v[i], 0, sizeof(*t->v));
	t->n++;
	return 0;
}

static int report_locked(struct sbnodes *t, const struct sbnode_report *r, bool *ret_reconcile)
{
	int64_t now = strata_mono_ms();
	uint32_t i = find(t, r->node_id);
	int e;

	*ret_reconcile = false;
	if (i < t->n && t->v[i].r.node_id == r->node_id) {
		struct slot *s = &t->v[i];
		bool live = now - s->heard_ms < (int64_t)t->lease_ms;
		if (live && s->r.incarnation != r->incarnation &&
		    strcmp(s->r.api_addr, r->api_addr))
			return -EEXIST;
		*ret_reconcile = !live;
	} else if ((e = insert_at(t, i)) < 0) {
		return e;
	}
	t->v[i].r = *r;
	t->v[i].heard_ms = now;
	return 0;
}

int sbnodes_report(struct sbnodes *t, const struct sbnode_report *r, bool *ret_reconcile)
{
	pthread_mutex_lock(&t->mu);
	int e = report_locked(t, r, ret_reconcile);
	pthread_mutex_unlock(&t->mu);
	return e;
}

int sbnodes_list(struct sbnodes *t, struct sbnode_table *ret)
{
	int64_t now = strata_mono_ms();

	memset(ret, 0, sizeof(*ret));
	pthread_mutex_lock(&t->mu);
	ret->lease_ms = t->lease_ms;
	ret->nodes = calloc(t->n ? t->n : 1, sizeof(*ret->nodes));
	if (!ret->nodes) {
		pthread_mutex_unlock(&t->mu);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < t->n; i++) {
		struct sbnode_entry *e = &ret->nodes[i];
		e->r = t->v[i].r;
		e->age_ms = now - t->v[i].heard_ms;
		e->lost = e->age_ms >= (int64_t)t->lease_ms;
	}
	ret->n = t->n;
	pthread_mutex_unlock(&t->mu);
	return 0;
}
