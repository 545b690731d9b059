/* The monotonic clock, for every process: one definition of "now" for timeouts, expiries
 * and durations. Inline: the worker reads it once per received batch (the vDSO answers
 * CLOCK_MONOTONIC without a system call). */
#ifndef TG_COMMON_MONO_H
#define TG_COMMON_MONO_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds (the unit of shm records' times). */
static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline uint64_t mono_ms(void)
{
	return mono_ns() / 1000000u;
}

/* CLOCK_MONOTONIC in seconds (the master's supervision clocks). */
static inline double mono_s(void)
{
	return (double)mono_ns() / 1e9;
}

#endif
