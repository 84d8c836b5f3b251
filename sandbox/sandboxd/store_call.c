/* store_call.c — image store calls on worker threads, with a deadline and a
 * bound (store_call.h).
 *
 * A call goes: started on the loop (in_flight + 1, into the loop's waiting
 * list, the deadline timer armed) -> run() on a pool thread -> either
 *   finished first: into the finished list, the eventfd written; the loop
 *     takes it, in_flight - 1, done(0), frees it;
 *   or the deadline first: the loop marks it abandoned and runs
 *     done(-ETIMEDOUT); the worker, when run() returns, runs late(),
 *     in_flight - 1; the last of the two to be through frees it (refs).
 * The lock decides which of the two came first (finished vs abandoned);
 * nothing else is shared. done(-ETIMEDOUT) may run while the worker is in
 * late(): done reads only the call's inputs there, late only its results. */
#include "sandbox/sandboxd/store_call.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/sandboxd/loop.h"

struct sbd_store_calls {
	struct sbd_loop *loop;
	struct sbd_pool *pool;
	int64_t timeout_ms;
	pthread_mutex_t mu;
	pthread_cond_t cond;		 /* a call finished (for stop) */
	struct sbd_store_call *finished; /* under mu: results for the loop, newest first */
	unsigned in_flight;		 /* under mu (invariant 3) */
	struct sbd_store_call *waiting;	 /* the loop's: started, done() not run yet */
	int efd, tfd;
	struct sbd_watch w_wake, w_timer;
	int64_t armed_ms;  /* the timer's expiry, 0: disarmed */
	uint64_t timeouts; /* calls abandoned (the loop's) */
};

static struct sbd_store_call *call_of(struct sbd_job *job)
{
	return (struct sbd_store_call *)((char *)job - offsetof(struct sbd_store_call, job));
}

static void unwait(struct sbd_store_calls *sc, struct sbd_store_call *call)
{
	for (struct sbd_store_call **p = &sc->waiting; *p; p = &(*p)->wait_next)
		if (*p == call) {
			*p = call->wait_next;
			return;
		}
}

/* The timer at the earliest deadline of the calls waited for. */
static void arm(struct sbd_store_calls *sc)
{
	int64_t first = 0;
	for (struct sbd_store_call *c = sc->waiting; c; c = c->wait_next)
		if (!first || c->deadline_ms < first)
			first = c->deadline_ms;
	if (first == sc->armed_ms)
		return;
	struct itimerspec its = {0};
	if (first) {
		its.it_value.tv_sec = first / 1000;
		its.it_value.tv_nsec = (first % 1000) * 1000000;
	}
	if (timerfd_settime(sc->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		sc->armed_ms = first;
}

/* On a worker. */
static void call_run(struct sbd_job *job)
{
	struct sbd_store_call *call = call_of(job);
	struct sbd_store_calls *sc = call->sc;
	uint64_t one = 1;
	call->run(call);
	pthread_mutex_lock(&sc->mu);
	call->finished = true;
	bool abandoned = call->abandoned;
	if (!abandoned) { /* the loop's now: it may free call once mu is released */
		call->next = sc->finished;
		sc->finished = call;
		(void)!write(sc->efd, &one, sizeof(one));
	}
	pthread_cond_broadcast(&sc->cond);
	pthread_mutex_unlock(&sc->mu);
	if (!abandoned)
		return;
	if (call->late)
		call->late(call);
	pthread_mutex_lock(&sc->mu);
	bool last = --call->refs == 0;
	sc->in_flight--;
	pthread_cond_broadcast(&sc->cond);
	pthread_mutex_unlock(&sc->mu); /* sc may be freed from here on */
	if (last)
		call->free(call);
}

/* On the loop: the results of the calls that finished, oldest first. */
static void take_finished(struct sbd_store_calls *sc)
{
	pthread_mutex_lock(&sc->mu);
	struct sbd_store_call *list = sc->finished, *rev = NULL;
	unsigned n = 0;
	sc->finished = NULL;
	for (struct sbd_store_call *c = list; c; c = c->next)
		n++;
	sc->in_flight -= n; /* before done(): it may start the next call */
	pthread_mutex_unlock(&sc->mu);
	while (list) {
		struct sbd_store_call *next = list->next;
		list->next = rev;
		rev = list;
		list = next;
	}
	while (rev) {
		struct sbd_store_call *c = rev;
		rev = c->next;
		unwait(sc, c);
		c->done(c, 0);
		c->free(c);
	}
	arm(sc);
}

/* On the loop: the calls waited for past their deadline (before: all of
 * them) are abandoned. */
static void expire(struct sbd_store_calls *sc, int64_t before)
{
	struct sbd_store_call *gone = NULL;
	for (struct sbd_store_call **p = &sc->waiting; *p;) {
		struct sbd_store_call *c = *p;
		bool fin = true;
		if (c->deadline_ms <= before) {
			pthread_mutex_lock(&sc->mu);
			fin = c->finished; /* else its result is in the finished list */
			c->abandoned = !fin;
			pthread_mutex_unlock(&sc->mu);
		}
		if (fin) {
			p = &c->wait_next;
			continue;
		}
		*p = c->wait_next;
		c->wait_next = gone;
		gone = c;
		sc->timeouts++;
	}
	/* After the walk: done() may start calls (into sc->waiting). */
	while (gone) {
		struct sbd_store_call *c = gone;
		gone = c->wait_next;
		c->done(c, -ETIMEDOUT);
		pthread_mutex_lock(&sc->mu);
		bool last = --c->refs == 0;
		pthread_mutex_unlock(&sc->mu);
		if (last)
			c->free(c);
	}
	arm(sc);
}

static void wake_io(void *ctx, uint32_t ev)
{
	take_finished(ctx);
}

static void timer_io(void *ctx, uint32_t ev)
{
	struct sbd_store_calls *sc = ctx;
	uint64_t x;
	if (read(sc->tfd, &x, sizeof(x)) < 0 && errno != EAGAIN)
		return;
	sc->armed_ms = 0;  /* a one-shot: arm() sets it again */
	take_finished(sc); /* a result that came with its deadline counts */
	expire(sc, sbd_now_ms());
}

struct sbd_store_calls *sbd_store_calls_new(struct sbd_loop *l, struct sbd_pool *pool,
					    int64_t timeout_ms)
{
	struct sbd_store_calls *sc = calloc(1, sizeof(*sc));
	pthread_condattr_t ca;
	if (!sc)
		return NULL;
	sc->loop = l;
	sc->pool = pool;
	sc->timeout_ms = timeout_ms > 0 ? timeout_ms : SBD_STORE_TIMEOUT_MS_DEFAULT;
	pthread_mutex_init(&sc->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sc->cond, &ca);
	pthread_condattr_destroy(&ca);
	sc->w_wake.fd = sc->w_timer.fd = -1;
	sc->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	sc->efd = sbd_wakeup_add(l, &sc->w_wake, wake_io, sc);
	if (sc->tfd < 0 || sc->efd < 0 ||
	    sbd_watch_add(l, &sc->w_timer, sc->tfd, EPOLLIN, timer_io, sc) < 0) {
		sbd_store_calls_free(sc);
		return NULL;
	}
	return sc;
}

int sbd_store_call_start(struct sbd_store_calls *sc, struct sbd_store_call *call)
{
	pthread_mutex_lock(&sc->mu);
	bool full = sc->in_flight >= SBD_STORE_CALLS_MAX;
	if (!full)
		sc->in_flight++;
	pthread_mutex_unlock(&sc->mu);
	if (full)
		return -EAGAIN;
	call->sc = sc;
	call->finished = call->abandoned = false;
	call->refs = 2; /* the loop's and the worker's, for an abandoned call */
	call->next = NULL;
	call->deadline_ms = sbd_now_ms() + sc->timeout_ms;
	call->job.fn = call_run;
	call->wait_next = sc->waiting; /* before the run: it may finish at once */
	sc->waiting = call;
	int r = sbd_pool_run(sc->pool, &call->job);
	if (r < 0) {
		sc->waiting = call->wait_next;
		pthread_mutex_lock(&sc->mu);
		sc->in_flight--;
		pthread_mutex_unlock(&sc->mu);
		return r;
	}
	arm(sc);
	return 0;
}

unsigned sbd_store_calls_in_flight(struct sbd_store_calls *sc)
{
	pthread_mutex_lock(&sc->mu);
	unsigned n = sc->in_flight;
	pthread_mutex_unlock(&sc->mu);
	return n;
}

uint64_t sbd_store_calls_timeouts(const struct sbd_store_calls *sc)
{
	return sc->timeouts;
}

int64_t sbd_store_calls_timeout_ms(const struct sbd_store_calls *sc)
{
	return sc->timeout_ms;
}

static struct timespec mono_at(int64_t ms)
{
	return (struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
}

unsigned sbd_store_calls_stop(struct sbd_store_calls *sc, int64_t wait_ms)
{
	if (!sc)
		return 0;
	int64_t until = sbd_now_ms() + wait_ms;
	struct timespec ts = mono_at(until);
	for (;;) {
		take_finished(sc);
		if (!sc->waiting)
			break;
		if (sbd_now_ms() >= until) {
			expire(sc, INT64_MAX); /* may start calls: abandoned next round */
			continue;
		}
		pthread_mutex_lock(&sc->mu);
		if (!sc->finished)
			pthread_cond_timedwait(&sc->cond, &sc->mu, &ts);
		pthread_mutex_unlock(&sc->mu);
	}
	/* The abandoned ones, within what is left of the wait. */
	pthread_mutex_lock(&sc->mu);
	while (sc->in_flight && sbd_now_ms() < until)
		pthread_cond_timedwait(&sc->cond, &sc->mu, &ts);
	unsigned n = sc->in_flight;
	pthread_mutex_unlock(&sc->mu);
	return n;
}

void sbd_store_calls_free(struct sbd_store_calls *sc)
{
	if (!sc || sbd_store_calls_in_flight(sc))
		return; /* a thread still holds it (store_call.h) */
	sbd_wakeup_del(sc->loop, &sc->w_wake, sc->efd);
	sbd_watch_del(sc->loop, &sc->w_timer);
	if (sc->tfd >= 0)
		close(sc->tfd);
	pthread_mutex_destroy(&sc->mu);
	pthread_cond_destroy(&sc->cond);
	free(sc);
}
