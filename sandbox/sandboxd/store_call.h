/* store_call.h — calls into the image store off sandboxd's loop thread, each
 * with a deadline.
 *
 * The image store is a directory of the strata FUSE mount. While strata-fuse
 * is stopped, hung or dead (kill -9 before `strata up` starts its successor:
 * the holder keeps the connection, so every request waits for the next
 * daemon; fuse/README.md "Surviving a crash"), any stat, open or read there
 * waits, and so would the loop and with it every request of the node. So
 * sandboxd never touches the store on its loop: a name resolved, a record or
 * config read, a node reference taken, a mount swept or the store listed is a
 * store call, run on a worker thread of the pool (pool.h), its result handed
 * back to the loop (an eventfd).
 *
 *  - A deadline per call (--store-timeout, 5 s by default): past it, done()
 *    runs on the loop with -ETIMEDOUT (the request that waited answers 503
 *    store_unavailable) and the worker is abandoned: when its run() returns at
 *    last, late() runs on that thread to undo what it did (a node reference
 *    taken for a create that was answered already), and the call is freed
 *    there. The loop never waits for a worker.
 *  - A bound: at most SBD_STORE_CALLS_MAX calls in flight, abandoned ones
 *    included, so a dead store holds at most that many threads; past it a
 *    call is refused at once (-EAGAIN, 503 as well).
 *  - Shutdown (sbd_store_calls_stop) waits for the calls in flight at most a
 *    bound and abandons the rest: a thread stuck in a dead mount is never
 *    joined. While one is, the calls' state is left allocated (the thread
 *    still holds it) and the daemon ends with _exit (main.c).
 *
 * Invariants:
 *  1. done() runs exactly once per started call, on the loop: with 0 after
 *     run() returned, or -ETIMEDOUT when the deadline came first (abandoned).
 *  2. A call is freed once both sides are through with it: by the loop after
 *     done(0); after an abandonment, by whichever of done(-ETIMEDOUT) on
 *     the loop and late() on the worker ends last. done(-ETIMEDOUT) may
 *     run while late() does: it reads only the call's inputs, late() its
 *     results.
 *  3. in_flight counts started calls whose run() has not returned, or whose
 *     result the loop has not taken yet; it never exceeds the bound. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "sandbox/sandboxd/pool.h"

#define SBD_STORE_CALLS_MAX 16		  /* calls in flight, abandoned ones included */
#define SBD_STORE_TIMEOUT_MS_DEFAULT 5000 /* --store-timeout */
#define SBD_STORE_STOP_WAIT_MS 2000	  /* what shutdown waits for calls in flight */

struct sbd_loop;
struct sbd_store_calls;

struct sbd_store_call {
	/* the caller's */
	void (*run)(struct sbd_store_call *call);	  /* on a worker: the blocking part */
	void (*done)(struct sbd_store_call *call, int r); /* on the loop, once (invariant 1) */
	void (*late)(struct sbd_store_call *call);	  /* on the worker, abandoned; or NULL */
	void (*free)(struct sbd_store_call *call);	  /* frees it (either thread) */
	/* the module's */
	struct sbd_job job;
	struct sbd_store_calls *sc;
	int64_t deadline_ms;
	bool finished;			  /* run() returned (under sc's lock) */
	bool abandoned;			  /* done(-ETIMEDOUT) ran (under sc's lock) */
	int refs;			  /* abandoned: sides not through yet (under the lock) */
	struct sbd_store_call *next;	  /* in the finished list (under the lock) */
	struct sbd_store_call *wait_next; /* in the loop's list of calls it waits for */
};

/* A set of store calls on loop l, run on pool's threads, each with
 * timeout_ms. NULL on allocation failure. */
struct sbd_store_calls *sbd_store_calls_new(struct sbd_loop *l, struct sbd_pool *pool,
					    int64_t timeout_ms);
/* Starts call (run, done and free set; late may be NULL). Returns 0 (done
 * will run), -EAGAIN (SBD_STORE_CALLS_MAX in flight) or -errno (no thread,
 * no timer): then nothing ran and call is still the caller's. */
int sbd_store_call_start(struct sbd_store_calls *sc, struct sbd_store_call *call);
/* Calls in flight, abandoned ones included. */
unsigned sbd_store_calls_in_flight(struct sbd_store_calls *sc);
/* Calls abandoned at their deadline since sc was made. */
uint64_t sbd_store_calls_timeouts(const struct sbd_store_calls *sc);
/* The deadline of each call, in ms. */
int64_t sbd_store_calls_timeout_ms(const struct sbd_store_calls *sc);
/* Shutdown: waits up to wait_ms for the calls in flight (their done(0) runs
 * here, on the loop's thread, and may start others, which are waited for
 * too), then abandons those still running (done(-ETIMEDOUT)). Returns how
 * many are still running. */
unsigned sbd_store_calls_stop(struct sbd_store_calls *sc, int64_t wait_ms);
/* Frees sc, unless calls still run (then it stays allocated for them: they
 * hold it). Accepts NULL. */
void sbd_store_calls_free(struct sbd_store_calls *sc);
