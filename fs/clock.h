/* clock.h — the monotonic clock in the units strata's timers use.
 *
 * Deadlines, leases, retry back-off and rate limits are measured on
 * CLOCK_MONOTONIC (never the wall clock, which an operator or NTP may step).
 * Header-only so that the static strata-agent can use it without strata_fs. */
#pragma once
#include <stdint.h>
#include <time.h>

/* Returns milliseconds since an arbitrary fixed point (boot). */
static inline int64_t strata_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
