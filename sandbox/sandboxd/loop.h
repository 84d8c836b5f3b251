/* loop.h — the epoll event loop of strata-sandboxd.
 *
 * Everything in sandboxd runs on one thread: the HTTP connections, exec
 * output pipes, process exit (pidfds), timers and backend sockets are all
 * watches in one epoll set. A watch is embedded in the object that owns the
 * fd, so an idle sandbox costs no fd and no allocation here. Deferred calls
 * run after each round of events (for work that must not run inside the
 * callback that asked for it, e.g. refilling a warm pool). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct sbd_loop;
typedef void (*sbd_io_fn)(void *ctx, uint32_t events);

struct sbd_watch {
	int fd;		 /* -1 when not registered */
	uint32_t events; /* as registered: a mod to the same is skipped */
	sbd_io_fn fn;
	void *ctx;
};

/* Returns a new loop (caller frees with sbd_loop_free) or NULL. */
struct sbd_loop *sbd_loop_new(void);
struct sbd_loop *sbd_loop_free(struct sbd_loop *l);
/* Registers fd with events (EPOLLIN, ...). Returns 0 or -errno. */
int sbd_watch_add(struct sbd_loop *l, struct sbd_watch *w, int fd, uint32_t events, sbd_io_fn fn,
		  void *ctx);
int sbd_watch_mod(struct sbd_loop *l, struct sbd_watch *w, uint32_t events);
/* Unregisters (does not close the fd); accepts an unregistered watch. Events
 * already fetched for it in this round are dropped. */
void sbd_watch_del(struct sbd_loop *l, struct sbd_watch *w);
/* A wake-up of the loop by worker threads: an eventfd registered in w,
 * edge-triggered and never read (every write of 8 bytes is a new event; it
 * would take 2^64 of them to fill it), that calls fn(ctx). Returns the fd
 * the workers write to, or -errno. */
int sbd_wakeup_add(struct sbd_loop *l, struct sbd_watch *w, sbd_io_fn fn, void *ctx);
/* Unregisters w and closes fd (fd < 0: nothing to do). */
void sbd_wakeup_del(struct sbd_loop *l, struct sbd_watch *w, int fd);
/* Runs fn(ctx) after the current round of events. Returns 0 or -ENOMEM. */
int sbd_defer(struct sbd_loop *l, void (*fn)(void *ctx), void *ctx);
/* Runs one round: waits up to timeout_ms for events. Returns 0 or -errno. */
int sbd_loop_run_once(struct sbd_loop *l, int timeout_ms);
/* Monotonic milliseconds. */
int64_t sbd_now_ms(void);
/* Wall-clock seconds since the epoch. */
int64_t sbd_wall_s(void);
