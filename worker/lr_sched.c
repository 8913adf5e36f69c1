/* lr_sched.c: the seed's learning-rate schedule (lr_scheduler.py), unclamped. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "lr_sched.h"

#include "../common/log.h"

double lr_sched_at(const struct lr_sched *l, int64_t s)
{
    if (s < l->warmup_steps)
        return l->base * (1.0 - (double)(l->warmup_steps - s) / (double)l->warmup_steps);
    if (s < l->decay_start)
        return l->base;
    double f = (double)(l->decay_start + l->decay_steps - s) / (double)l->decay_steps;
    return l->base * f * f;
}

void lr_sched_check(const struct lr_sched *l, int64_t total_steps)
{
    int64_t end = l->decay_start + l->decay_steps;
    if (total_steps > end + 1)
        LOG_WARN("the run has %lld steps but the learning-rate decay ends at step %lld; like the seed's "
                 "schedule, the rate rises again after that",
                 (long long)total_steps, (long long)end);
}
