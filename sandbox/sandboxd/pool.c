/* pool.c — persistent worker threads (pool.h).
 *
 * Invariants: a queued job has an idle thread that will take it (a job is
 * only queued when idle > queued, else a thread is started for it); idle
 * counts threads waiting on cond, queued the jobs not yet taken. Threads
 * are detached: the daemon's exit does not wait for an idle one. */
#include "sandbox/sandboxd/pool.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define POOL_KEEP 16   /* idle threads kept however long they idle */
#define POOL_IDLE_S 30 /* beyond those, an idle thread exits after this */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct sbd_job *head, **tail;
	unsigned threads, idle, queued;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, &pool.head, 0, 0, 0};

static struct sbd_job *take(void)
{
	struct sbd_job *j = pool.head;
	pool.head = j->next;
	if (!pool.head)
		pool.tail = &pool.head;
	pool.queued--;
	return j;
}

static void *worker(void *arg)
{
	struct sbd_job *j = arg; /* its first job */
	pthread_setname_np(pthread_self(), "sbd-worker");
	pthread_mutex_lock(&pool.mu);
	for (;;) {
		pthread_mutex_unlock(&pool.mu);
		j->fn(j); /* may free j */
		pthread_mutex_lock(&pool.mu);
		pool.idle++;
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += POOL_IDLE_S;
		while (!pool.head) {
			if (pthread_cond_timedwait(&pool.cond, &pool.mu, &until) != ETIMEDOUT)
				continue;
			if (pool.threads > POOL_KEEP)
				break;
			until.tv_sec += POOL_IDLE_S;
		}
		pool.idle--;
		if (!pool.head)
			break; /* expired, and nothing came meanwhile */
		j = take();
	}
	pool.threads--;
	pthread_mutex_unlock(&pool.mu);
	return NULL;
}

int sbd_pool_run(struct sbd_job *job)
{
	pthread_mutex_lock(&pool.mu);
	if (pool.idle > pool.queued) {
		job->next = NULL;
		*pool.tail = job;
		pool.tail = &job->next;
		pool.queued++;
		pthread_mutex_unlock(&pool.mu);
		/* after the unlock: the woken thread does not block on mu */
		pthread_cond_signal(&pool.cond);
		return 0;
	}
	pool.threads++;
	pthread_mutex_unlock(&pool.mu);
	pthread_attr_t a;
	pthread_t t;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	int r = pthread_create(&t, &a, worker, job);
	pthread_attr_destroy(&a);
	if (r != 0) {
		pthread_mutex_lock(&pool.mu);
		pool.threads--;
		pthread_mutex_unlock(&pool.mu);
		return -r;
	}
	return 0;
}
