/* lease.c — the node's lease thread and its report (lease.h).
 *
 * The loop fills `next` under mu once a second; the thread copies it out
 * and sends it, so the report is at most a second old. Placement does not
 * rely on it being fresher: an apiserver counts its own placements on top
 * of the last report until the next one (sandbox/apiserver/README.md). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "fs/log.h"
#include "fs/meta_client.h"
#include "fs/sbnode_proto.h"
#include "sandbox/sandboxd/images.h"
#include "sandbox/sandboxd/lease.h"
#include "sandbox/sandboxd/sandboxd.h"

#define LEASE_RPC_TIMEOUT_MS 2000

struct sbd_lease {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;		   /* under mu */
	struct sbnode_report next; /* under mu: what the next renewal sends */
	bool have_next;		   /* under mu */
	atomic_bool reconcile;	   /* meta said so; the loop acts */
	struct meta_client *mc;
	const char *addr;     /* d->cfg.meta_addr */
	uint64_t incarnation; /* random, per start: tells a restart from a second sandboxd */
	uint32_t lease_ms;    /* meta's last answer (the thread's) */
};

/* The report's entry of image name (a new one; NULL past 32 images: the
 * report names the first ones only). */
static struct sbnode_image *image_of(struct sbnode_report *r, const char *name)
{
	for (uint32_t i = 0; i < r->nimages; i++)
		if (!strcmp(r->images[i].name, name))
			return &r->images[i];
	if (r->nimages == SBNODE_MAX_IMAGES || strlen(name) > SBNODE_IMAGE_NAME_MAX)
		return NULL;
	struct sbnode_image *im = &r->images[r->nimages++];
	snprintf(im->name, sizeof(im->name), "%s", name);
	return im;
}

static void image_count(struct sbnode_report *r, const char *name)
{
	struct sbnode_image *im = image_of(r, name);
	if (im)
		im->sandboxes++;
}

static void image_mounted(void *ctx, const char *name)
{
	struct sbnode_image *im = image_of(ctx, name);
	if (im)
		im->mounted = true;
}

/* d's state as the report says it: admitted against the budgets, creates
 * in flight included (they hold their share, api_create.c). */
static void fill_report(struct sandboxd *d, struct sbnode_report *r, uint64_t incarnation)
{
	const struct sandboxd_config *c = &d->cfg;
	double cpu = 0;

	memset(r, 0, sizeof(*r));
	r->node_id = (uint32_t)c->node_id;
	r->incarnation = incarnation;
	snprintf(r->api_addr, sizeof(r->api_addr), "%s", c->advertise);
	r->sandboxes = (uint32_t)(d->count + d->creating);
	r->sbx_cap = (uint32_t)c->max_sandboxes;
	r->creating = (uint32_t)d->creating;
	for (struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		cpu += sb->cpu;
		if (sb->image)
			image_count(r, sb->image);
	}
	sbd_images_each_mounted(d, image_mounted, r);
	r->cpu_used = (uint32_t)(cpu * 1000);
	r->cpu_cap = (uint32_t)c->cpu_budget_milli;
	r->mem_used = (uint64_t)(d->mem_used_mb + d->creating_mem_mb) << 20;
	r->mem_cap = (uint64_t)c->memory_budget_mb << 20;
}

void sbd_lease_tick(struct sandboxd *d, struct sbd_lease *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	fill_report(d, &l->next, l->incarnation);
	bool first = !l->have_next;
	l->have_next = true;
	if (first)
		pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
	if (!atomic_exchange(&l->reconcile, false))
		return;
	size_t n = 0;
	for (struct sbd_sandbox *sb = d->sandboxes, *next; sb; sb = next) {
		next = sb->next;
		sbd_registry_destroy(d, sb, "the cluster gave it up: this node's lease lapsed");
		n++;
	}
	log_warn("lease: this node's lease had lapsed and the cluster reported its sandboxes "
		 "lost: removed %zu",
		 n);
}

/* Waits until the next renewal is due (or the stop); false: stop. */
static bool wait_due(struct sbd_lease *l, int64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&l->mu);
	while (!l->stop && (!l->have_next || ms > 0)) {
		if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT)
			ms = 0;
	}
	bool go = !l->stop;
	pthread_mutex_unlock(&l->mu);
	return go;
}

static void renew(struct sbd_lease *l, int *last_err)
{
	struct sbnode_report r;
	bool reconcile = false;
	uint32_t lease = 0;

	pthread_mutex_lock(&l->mu);
	r = l->next;
	pthread_mutex_unlock(&l->mu);
	int e = mgmt_sbnode_report(l->mc, &r, &lease, &reconcile);
	if (e < 0 && e != *last_err)
		log_warn("lease: strata-meta at %s refused or missed node %u's renewal: %s",
			 l->addr, r.node_id, rpc_strerror(e));
	else if (e == 0 && *last_err)
		log_info("lease: node %u renewed with strata-meta at %s again", r.node_id, l->addr);
	*last_err = e;
	if (e == 0) {
		l->lease_ms = lease;
		if (reconcile)
			atomic_store(&l->reconcile, true);
	}
}

static void *lease_main(void *arg)
{
	struct sbd_lease *l = arg;
	int last_err = 0;
	int64_t wait = 0;

	while (wait_due(l, wait)) {
		renew(l, &last_err);
		/* a third of the lease: two renewals may be lost before it lapses */
		wait = l->lease_ms >= 600 ? l->lease_ms / 3 : 200;
	}
	return NULL;
}

struct sbd_lease *sbd_lease_start(struct sandboxd *d)
{
	struct sbd_lease *l = calloc(1, sizeof(*l));
	struct rpc_client_opts o = {.timeout_ms = LEASE_RPC_TIMEOUT_MS,
				    .connect_timeout_ms = LEASE_RPC_TIMEOUT_MS,
				    .max_conns = 1};

	if (!l)
		return NULL;
	pthread_mutex_init(&l->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	l->lease_ms = 3000;
	l->addr = d->cfg.meta_addr;
	if (getrandom(&l->incarnation, sizeof(l->incarnation), 0) != sizeof(l->incarnation))
		l->incarnation = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	l->mc = meta_client_new(d->cfg.meta_addr, "strata-sandboxd", &o);
	int e = l->mc ? pthread_create(&l->thread, NULL, lease_main, l) : ENOMEM;
	if (e) {
		log_error("lease: cannot start the lease thread: %s", strerror(e));
		meta_client_free(l->mc);
		free(l);
		errno = e;
		return NULL;
	}
	log_info("lease: node %lld reports to strata-meta at %s as %s", (long long)d->cfg.node_id,
		 d->cfg.meta_addr, d->cfg.advertise);
	return l;
}

void sbd_lease_stop(struct sbd_lease *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
	pthread_join(l->thread, NULL);
	meta_client_free(l->mc);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}
