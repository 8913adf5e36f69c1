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
    if (l->warmup_steps > 0 && total_steps < l->warmup_steps)
        LOG_WARN("--warmup_steps %lld is longer than the run (%lld steps): the learning rate ends at %.4g, %.3g%% "
                 "of --learning_rate %g",
                 (long long)l->warmup_steps, (long long)total_steps, lr_sched_at(l, total_steps - 1),
                 100.0 * (double)(total_steps - 1) / (double)l->warmup_steps, l->base);
    int64_t end = l->decay_start + l->decay_steps;
    if (total_steps > end + 1)
        LOG_WARN("the run has %lld steps but the learning-rate decay ends at step %lld; like the seed's "
                 "schedule, the rate rises again after that",
                 (long long)total_steps, (long long)end);
}
