/* loop.c — epoll loop with embedded watches and deferred calls (loop.h).
 *
 * Invariant: a watch deleted while events for it are pending in the current
 * round is never called: sbd_watch_del clears it from the pending array. */
#include "sandbox/sandboxd/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 128

struct deferred {
	void (*fn)(void *);
	void *ctx;
	struct deferred *next;
};

struct sbd_loop {
	int epfd;
	struct epoll_event ev[MAX_EVENTS];
	int nev, cur;
	struct deferred *dq, **dq_tail;
};

struct sbd_loop *sbd_loop_new(void)
{
	struct sbd_loop *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		free(l);
		return NULL;
	}
	l->dq_tail = &l->dq;
	return l;
}

struct sbd_loop *sbd_loop_free(struct sbd_loop *l)
{
	if (!l)
		return NULL;
	while (l->dq) {
		struct deferred *d = l->dq;
		l->dq = d->next;
		free(d);
	}
	close(l->epfd);
	free(l);
	return NULL;
}

int sbd_watch_add(struct sbd_loop *l, struct sbd_watch *w, int fd, uint32_t events, sbd_io_fn fn,
		  void *ctx)
{
	struct epoll_event ev = {.events = events, .data.ptr = w};
	w->fd = fd;
	w->events = events;
	w->fn = fn;
	w->ctx = ctx;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		w->fd = -1;
		return -errno;
	}
	return 0;
}

int sbd_watch_mod(struct sbd_loop *l, struct sbd_watch *w, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = w};
	if (events == w->events) /* level-triggered: nothing to re-arm */
		return 0;
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
		return -errno;
	w->events = events;
	return 0;
}

void sbd_watch_del(struct sbd_loop *l, struct sbd_watch *w)
{
	if (w->fd < 0)
		return;
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
	w->fd = -1;
	for (int i = l->cur; i < l->nev; i++)
		if (l->ev[i].data.ptr == w)
			l->ev[i].data.ptr = NULL;
}

int sbd_defer(struct sbd_loop *l, void (*fn)(void *ctx), void *ctx)
{
	struct deferred *d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	*d = (struct deferred){fn, ctx, NULL};
	*l->dq_tail = d;
	l->dq_tail = &d->next;
	return 0;
}

static void run_deferred(struct sbd_loop *l)
{
	struct deferred *d = l->dq;
	l->dq = NULL;
	l->dq_tail = &l->dq;
	while (d) {
		struct deferred *next = d->next;
		d->fn(d->ctx);
		free(d);
		d = next;
	}
}

int sbd_loop_run_once(struct sbd_loop *l, int timeout_ms)
{
	if (l->dq)
		timeout_ms = 0;
	int n = epoll_wait(l->epfd, l->ev, MAX_EVENTS, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	l->nev = n;
	for (l->cur = 0; l->cur < l->nev; l->cur++) {
		struct sbd_watch *w = l->ev[l->cur].data.ptr;
		if (w && w->fd >= 0)
			w->fn(w->ctx, l->ev[l->cur].events);
	}
	l->nev = l->cur = 0;
	run_deferred(l);
	return 0;
}

int64_t sbd_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sbd_wall_s(void)
{
	return (int64_t)time(NULL);
}

int sbd_wakeup_add(struct sbd_loop *l, struct sbd_watch *w, sbd_io_fn fn, void *ctx)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = sbd_watch_add(l, w, fd, EPOLLIN | EPOLLET, fn, ctx);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

void sbd_wakeup_del(struct sbd_loop *l, struct sbd_watch *w, int fd)
{
	if (fd < 0)
		return;
	sbd_watch_del(l, w);
	close(fd);
}
