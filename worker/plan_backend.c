/* plan_backend.c: how a job's flags map onto its backend (plan.h): the threads
 * of a worker, and the options it opens its backend with (devices per node,
 * GEMM precision). The one place of the plan that knows the backends' options;
 * it sizes nothing (plan.c does). */
#include "plan.h"

#include <stdio.h>

#include "../common/check.h"
#include "../common/cpus.h"

int plan_threads(const struct job_cfg *job, int cpus, int workers_per_node)
{
    return job->threads > 0 ? job->threads : TR_MAX(1, cpus / TR_MAX(1, workers_per_node));
}

struct kern_backend_opts plan_backend_opts(const struct job_cfg *job, int threads, int local_rank, int sizing_only)
{
    struct kern_backend_opts o = {.threads = threads, .device = -1, .local_rank = local_rank};
    o.precision = job->amp == JOB_AMP_BF16   ? KERN_PREC_BF16
                  : job->amp == JOB_AMP_FP16 ? KERN_PREC_FP16
                  : job->allow_tf32          ? KERN_PREC_TF32
                                             : KERN_PREC_FP32;
    o.sizing_only = sizing_only;
    o.gpus = job->gpus_per_node;
    return o;
}

int plan_threads_local(const struct job_cfg *job, int workers_per_node, char *why, size_t n)
{
    if (job->threads > 0) {
        if (why && n)
            snprintf(why, n, "--threads %d", job->threads);
        return job->threads;
    }
    struct tr_cpus_in in;
    tr_cpus_detect(&in, workers_per_node);
    return tr_cpus_threads(&in, why, n);
}
