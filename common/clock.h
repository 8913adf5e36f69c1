/* clock.h: the one clock helper: monotonic seconds for durations, wall seconds for
 * timestamps. Reading a clock does not synchronise any backend queue: code that
 * times queued work synchronises first (kern.h, comm.h). */
#ifndef TR_CLOCK_H
#define TR_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin; only differences mean anything).
 * Thread-safe. */
double tr_clock_now(void);

/* Seconds since the Unix epoch (CLOCK_REALTIME), microsecond resolution or better.
 * Thread-safe. */
double tr_clock_wall(void);

#ifdef __cplusplus
}
#endif
#endif
