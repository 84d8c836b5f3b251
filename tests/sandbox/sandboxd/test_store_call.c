/* test_store_call.c — unit test of sandboxd's image store calls
 * (store_call.h) with calls that block as a call into a stopped strata-fuse
 * would: each run() reads one byte of a pipe nobody writes until the test
 * lets it go. Checks the deadline (done(-ETIMEDOUT) on time, the loop free
 * meanwhile), the bound (the 17th call refused at once, abandoned calls
 * still counted), late() on the worker once an abandoned run returns, a
 * quick call's done(0), and a shutdown that abandons a stuck call within
 * its wait. Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sandbox/sandboxd/loop.h"
#include "sandbox/sandboxd/pool.h"
#include "sandbox/sandboxd/store_call.h"
#include "tests/testutil.h"

#define TIMEOUT_MS 200

static int gate[2]; /* a byte written lets one blocked run() return */
static atomic_int lates, frees;

struct tcall {
	struct sbd_store_call call;
	bool block;
	int done_r, dones;
	int64_t done_at;
};

static void t_run(struct sbd_store_call *c)
{
	char b;
	if (((struct tcall *)c)->block)
		CHECK(read(gate[0], &b, 1) == 1);
}

static void t_done(struct sbd_store_call *c, int r)
{
	struct tcall *t = (struct tcall *)c;
	t->done_r = r;
	t->dones++;
	t->done_at = sbd_now_ms();
}

static void t_late(struct sbd_store_call *c)
{
	atomic_fetch_add(&lates, 1);
}

static void t_free(struct sbd_store_call *c)
{
	atomic_fetch_add(&frees, 1); /* the test owns the memory */
}

static void init(struct tcall *t, bool block)
{
	*t = (struct tcall){.block = block, .done_r = 1};
	t->call =
	    (struct sbd_store_call){.run = t_run, .done = t_done, .late = t_late, .free = t_free};
}

static void run_loop(struct sbd_loop *l, int64_t ms)
{
	int64_t until = sbd_now_ms() + ms;
	while (sbd_now_ms() < until)
		CHECK_EQ(sbd_loop_run_once(l, 10), 0);
}

static void wait_in_flight(struct sbd_store_calls *sc, unsigned want)
{
	for (int i = 0; i < 500 && sbd_store_calls_in_flight(sc) != want; i++)
		usleep(10000);
	CHECK_EQ(sbd_store_calls_in_flight(sc), want);
}

int main(void)
{
	struct sbd_loop *l = sbd_loop_new();
	struct sbd_pool *pool = sbd_pool_new();
	CHECK(l && pool && pipe(gate) == 0);
	struct sbd_store_calls *sc = sbd_store_calls_new(l, pool, TIMEOUT_MS);
	CHECK(sc);
	static struct tcall stuck[SBD_STORE_CALLS_MAX], extra, quick;

	/* The bound: SBD_STORE_CALLS_MAX wait, the next is refused at once. */
	int64_t t0 = sbd_now_ms();
	for (int i = 0; i < SBD_STORE_CALLS_MAX; i++) {
		init(&stuck[i], true);
		CHECK_EQ(sbd_store_call_start(sc, &stuck[i].call), 0);
	}
	init(&extra, false);
	CHECK_EQ(sbd_store_call_start(sc, &extra.call), -EAGAIN);
	CHECK_EQ(sbd_store_calls_in_flight(sc), SBD_STORE_CALLS_MAX);

	/* The deadline: each answered -ETIMEDOUT once, on time. */
	run_loop(l, TIMEOUT_MS + 300);
	for (int i = 0; i < SBD_STORE_CALLS_MAX; i++) {
		CHECK_EQ(stuck[i].dones, 1);
		CHECK_EQ(stuck[i].done_r, -ETIMEDOUT);
		CHECK(stuck[i].done_at - t0 >= TIMEOUT_MS - 5);
		CHECK(stuck[i].done_at - t0 < TIMEOUT_MS + 250);
	}
	CHECK_EQ(sbd_store_calls_timeouts(sc), SBD_STORE_CALLS_MAX);
	/* Abandoned, still running: still counted, nothing freed yet. */
	CHECK_EQ(sbd_store_calls_in_flight(sc), SBD_STORE_CALLS_MAX);
	CHECK_EQ(sbd_store_call_start(sc, &extra.call), -EAGAIN);
	CHECK_EQ(atomic_load(&frees), 0);

	/* Half return at last: late() on their worker, then freed there. */
	CHECK(write(gate[1], "xxxxxxxx", SBD_STORE_CALLS_MAX / 2) == SBD_STORE_CALLS_MAX / 2);
	wait_in_flight(sc, SBD_STORE_CALLS_MAX / 2);
	CHECK_EQ(atomic_load(&lates), SBD_STORE_CALLS_MAX / 2);
	CHECK_EQ(atomic_load(&frees), SBD_STORE_CALLS_MAX / 2);

	/* Room again: a quick call's result comes back on the loop. */
	init(&quick, false);
	CHECK_EQ(sbd_store_call_start(sc, &quick.call), 0);
	for (int i = 0; i < 200 && !quick.dones; i++)
		CHECK_EQ(sbd_loop_run_once(l, 10), 0);
	CHECK_EQ(quick.dones, 1);
	CHECK_EQ(quick.done_r, 0);
	CHECK_EQ(atomic_load(&lates), SBD_STORE_CALLS_MAX / 2); /* no late() for it */

	/* Shutdown with a call stuck and waited for: abandoned within the
	 * wait, the stuck ones reported, sc kept for them. */
	init(&extra, true);
	CHECK_EQ(sbd_store_call_start(sc, &extra.call), 0);
	t0 = sbd_now_ms();
	CHECK_EQ(sbd_store_calls_stop(sc, 150), SBD_STORE_CALLS_MAX / 2 + 1);
	CHECK(sbd_now_ms() - t0 < 400);
	CHECK_EQ(extra.dones, 1);
	CHECK_EQ(extra.done_r, -ETIMEDOUT);

	/* The rest return: sc can go. */
	CHECK(write(gate[1], "xxxxxxxxx", SBD_STORE_CALLS_MAX / 2 + 1) ==
	      SBD_STORE_CALLS_MAX / 2 + 1);
	wait_in_flight(sc, 0);
	CHECK_EQ(atomic_load(&frees), SBD_STORE_CALLS_MAX + 2);
	sbd_store_calls_free(sc);
	sbd_pool_free(pool);
	sbd_loop_free(l);
	printf("ok\n");
	return 0;
}
