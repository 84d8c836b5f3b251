/* ticker.h — a thread that calls fn(ctx) every interval_ms until stopped.
 * strata-meta runs three: the WAL sync timer (100 ms), the lease check and
 * the chunk garbage collector (gc.c), which sets its own pace through fn's
 * return value. */
#pragma once

struct ticker;
/* Returns the delay in ms before the next call (0: at once), or a negative
 * value for the ticker's interval. */
typedef int (*ticker_fn)(void *ctx);
/* Returns 0 and *ret (stop and free with ticker_stop), or -errno. */
int ticker_start(int interval_ms, ticker_fn fn, void *ctx, struct ticker **ret);
/* Wakes fn now instead of at the next tick. */
void ticker_kick(struct ticker *t);
/* Stops (waits for a running fn), joins and frees. NULL ok. */
void ticker_stop(struct ticker *t);
