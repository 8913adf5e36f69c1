/* optim.c: CPU dense optimizer step (SGD, Adagrad) over a flat parameter array.
 * Element-wise, so any thread split gives the same bits. Row-wise Adagrad is an
 * embedding optimizer: dense parameters take element-wise Adagrad under it. */
#define TR_SUBSYS TR_SUB_KERN
#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

enum tr_status kern_cpu_dense_update(const struct kern_dense_update_args *a)
{
    if (a->n < 0 || (a->hp.kind != KERN_OPT_SGD && !a->accum))
        return TR_ERR_ARG;
    const struct km_optim h = {a->hp.lr, a->hp.eps};
    const float gs = a->grad_scale;
    float *p = a->param, *acc = a->accum;
    const float *g = a->grad;
    if (a->hp.kind == KERN_OPT_SGD) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < a->n; i++)
            km_sgd_step(&p[i], gs * g[i], &h);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < a->n; i++)
            km_adagrad_step(&p[i], &acc[i], gs * g[i], &h);
    }
    return TR_OK;
}
