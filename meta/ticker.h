/* ticker.h — a thread that calls fn(ctx) every interval_ms until stopped.
 * strata-meta runs two: the WAL sync timer (100 ms) and the lease check. */
#pragma once

struct ticker;
typedef void (*ticker_fn)(void *ctx);
/* Returns 0 and *ret (stop and free with ticker_stop), or -errno. */
int ticker_start(int interval_ms, ticker_fn fn, void *ctx, struct ticker **ret);
/* Wakes fn now instead of at the next tick. */
void ticker_kick(struct ticker *t);
/* Stops (waits for a running fn), joins and frees. NULL ok. */
void ticker_stop(struct ticker *t);
