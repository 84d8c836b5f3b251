/* pool.c — persistent worker threads (pool.h).
 *
 * Invariants: a queued job has an idle thread that will take it (a job is
 * only queued when idle > queued, else a thread is started for it); idle
 * counts threads waiting on cond, queued the jobs not yet taken. Threads
 * are detached: the daemon's exit does not wait for an idle one; the pool
 * outlives sbd_pool_free until its last thread has left. */
#include "sandbox/sandboxd/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define POOL_KEEP 16   /* idle threads kept however long they idle */
#define POOL_IDLE_S 30 /* beyond those, an idle thread exits after this */

struct sbd_pool {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct sbd_job *head, **tail;
	unsigned threads, idle, queued;
	bool stopping; /* sbd_pool_free ran: the last thread out frees the pool */
};

struct sbd_pool *sbd_pool_new(void)
{
	struct sbd_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->tail = &p->head;
	return p;
}

static void pool_destroy(struct sbd_pool *p)
{
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cond);
	free(p);
}

void sbd_pool_free(struct sbd_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stopping = true;
	bool last = p->threads == 0;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
	if (last)
		pool_destroy(p);
}

static struct sbd_job *take(struct sbd_pool *p)
{
	struct sbd_job *j = p->head;
	p->head = j->next;
	if (!p->head)
		p->tail = &p->head;
	p->queued--;
	return j;
}

static void *worker(void *arg)
{
	struct sbd_job *j = arg; /* its first job */
	struct sbd_pool *p = j->pool;
	pthread_setname_np(pthread_self(), "sbd-worker");
	pthread_mutex_lock(&p->mu);
	for (;;) {
		pthread_mutex_unlock(&p->mu);
		j->fn(j); /* may free j */
		pthread_mutex_lock(&p->mu);
		p->idle++;
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += POOL_IDLE_S;
		while (!p->head && !p->stopping) {
			if (pthread_cond_timedwait(&p->cond, &p->mu, &until) != ETIMEDOUT)
				continue;
			if (p->threads > POOL_KEEP)
				break;
			until.tv_sec += POOL_IDLE_S;
		}
		p->idle--;
		if (!p->head)
			break; /* expired or stopping, and nothing came meanwhile */
		j = take(p);
	}
	bool last = --p->threads == 0 && p->stopping;
	pthread_mutex_unlock(&p->mu);
	if (last)
		pool_destroy(p);
	return NULL;
}

int sbd_pool_run(struct sbd_pool *p, struct sbd_job *job)
{
	if (!p)
		return -EINVAL;
	job->pool = p;
	pthread_mutex_lock(&p->mu);
	if (p->idle > p->queued) {
		job->next = NULL;
		*p->tail = job;
		p->tail = &job->next;
		p->queued++;
		pthread_mutex_unlock(&p->mu);
		/* after the unlock: the woken thread does not block on mu */
		pthread_cond_signal(&p->cond);
		return 0;
	}
	p->threads++;
	pthread_mutex_unlock(&p->mu);
	pthread_attr_t a;
	pthread_t t;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	int r = pthread_create(&t, &a, worker, job);
	pthread_attr_destroy(&a);
	if (r != 0) {
		pthread_mutex_lock(&p->mu);
		p->threads--;
		pthread_mutex_unlock(&p->mu);
		return -r;
	}
	return 0;
}
