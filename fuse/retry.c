/* retry.c — riding out restarts of strata-meta and the chunkservers.
 *
 * The rpc client drops a broken connection and dials a new one on the next
 * call, so a restarted server is reached again by simply calling again.
 * sfs_retry_again() decides whether to: transport failures are retried with
 * exponential backoff (10 ms doubling to 500 ms) until opts.retry_ms have
 * passed, after which the caller reports -EIO. -ESTALE and -EAGAIN (routing
 * changed, target syncing) are retried the same way.
 *
 * A call that is not idempotent (mkdir, create, unlink, rename, ...) is
 * retried only when it cannot have reached the server (-ECONNREFUSED,
 * -EHOSTUNREACH, -ENETUNREACH) or on the first attempt after a reset (the
 * usual case: a pooled connection that went stale when the server
 * restarted). A reset in the middle of a live call may, rarely, apply a
 * mutation twice; the second attempt then reports e.g. -EEXIST.
 *
 * Also here: the clocks, and starting helper threads with signals blocked. */
#include <errno.h>
#include <signal.h>
#include <time.h>

#include "fuse/fuse-internal.h"

uint64_t sfs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t sfs_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

bool sfs_is_transport_err(long r)
{
	switch (r) {
	case -ETIMEDOUT:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -ECONNABORTED:
	case -EPIPE:
	case -ENOTCONN:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EPROTO:
		return true;
	default:
		return false;
	}
}

static bool undelivered(long r)
{
	return r == -ECONNREFUSED || r == -EHOSTUNREACH || r == -ENETUNREACH;
}

static bool retryable(long r, bool idempotent, int attempt)
{
	if (r == -ESTALE || r == -EAGAIN)
		return true;
	if (!sfs_is_transport_err(r))
		return false;
	if (idempotent || undelivered(r))
		return true;
	return attempt == 0 && (r == -ECONNRESET || r == -EPIPE || r == -ENOTCONN);
}

bool sfs_retry_again(struct sfs *fs, struct sfs_retry *rt, long r, bool idempotent)
{
	uint64_t now, delay_ms;
	struct timespec ts;

	if (r >= 0 || !retryable(r, idempotent, rt->attempt))
		return false;
	now = sfs_now_ns();
	if (rt->attempt == 0)
		rt->deadline_ns = now + (uint64_t)fs->o.retry_ms * 1000000ull;
	if (now >= rt->deadline_ns)
		return false;
	delay_ms = rt->attempt == 0 ? 0 : 10ull << (rt->attempt < 6 ? rt->attempt - 1 : 5);
	if (delay_ms > 500)
		delay_ms = 500;
	rt->attempt++;
	ts.tv_sec = (time_t)(delay_ms / 1000);
	ts.tv_nsec = (long)(delay_ms % 1000) * 1000000l;
	if (delay_ms)
		nanosleep(&ts, NULL);
	return true;
}

long sfs_final_err(long r)
{
	if (r >= 0)
		return r;
	if (sfs_is_transport_err(r) || r == -EAGAIN)
		return -EIO;
	return r;
}

int sfs_thread_start(pthread_t *ret, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int r;

	/* Signals must reach libfuse's loop threads, not our helpers: the loop
	 * only notices SIGTERM when one of its own threads is interrupted. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	r = pthread_create(ret, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -r;
}
