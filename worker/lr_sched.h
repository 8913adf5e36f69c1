/* lr_sched.h: the seed's learning-rate schedule: linear warm-up from 0, constant,
 * then polynomial (power 2) decay. Like the seed it is not clamped: past
 * decay_start + decay_steps the factor grows again (lr_sched_check warns). */
#ifndef TR_LR_SCHED_H
#define TR_LR_SCHED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct lr_sched {
    double base;          /* --learning_rate */
    int64_t warmup_steps; /* lr = base * s / warmup for s < warmup (0 at s = 0) */
    int64_t decay_start;  /* lr = base for warmup <= s < decay_start */
    int64_t decay_steps;  /* lr = base * ((decay_start + decay_steps - s) / decay_steps)^2 after; >= 1 */
};

/* Learning rate of step s (0-based, counted over all epochs). */
double lr_sched_at(const struct lr_sched *l, int64_t s);

/* Logs a warning when a run of total_steps goes past the end of the decay,
 * where the seed's unclamped schedule makes the rate rise again. */
void lr_sched_check(const struct lr_sched *l, int64_t total_steps);

#ifdef __cplusplus
}
#endif
#endif
