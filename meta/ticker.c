/* ticker.c — periodic background thread (see ticker.h). A condition
 * variable on CLOCK_MONOTONIC makes stop and kick immediate. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include "meta/ticker.h"

struct ticker {
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, kicked;
	int interval_ms;
	ticker_fn fn;
	void *ctx;
};

static void deadline(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static void *ticker_main(void *arg)
{
	struct ticker *t = arg;
	struct timespec ts;

	int next_ms = t->interval_ms;

	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		deadline(&ts, next_ms);
		while (!t->stop && !t->kicked &&
		       pthread_cond_timedwait(&t->cv, &t->mu, &ts) != ETIMEDOUT)
			;
		if (t->stop)
			break;
		t->kicked = false;
		pthread_mutex_unlock(&t->mu);
		int r = t->fn(t->ctx);
		next_ms = r >= 0 ? r : t->interval_ms;
		pthread_mutex_lock(&t->mu);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

int ticker_start(int interval_ms, ticker_fn fn, void *ctx, struct ticker **ret)
{
	struct ticker *t = calloc(1, sizeof(*t));
	pthread_condattr_t ca;
	int r;

	if (!t)
		return -ENOMEM;
	t->interval_ms = interval_ms;
	t->fn = fn;
	t->ctx = ctx;
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	r = pthread_create(&t->thr, NULL, ticker_main, t);
	if (r != 0) {
		pthread_cond_destroy(&t->cv);
		pthread_mutex_destroy(&t->mu);
		free(t);
		return -r;
	}
	*ret = t;
	return 0;
}

void ticker_kick(struct ticker *t)
{
	pthread_mutex_lock(&t->mu);
	t->kicked = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

void ticker_stop(struct ticker *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thr, NULL);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}
