/* loss.c: CPU binary cross-entropy with logits. The loss is summed in double in
 * fixed blocks, so it does not depend on the thread count. */
#define TR_SUBSYS TR_SUB_KERN
#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

#define BLOCK 1024

enum tr_status kern_cpu_bce(const struct kern_bce_args *a)
{
    const int64_t n = a->n;
    if (n < 0)
        return TR_ERR_ARG;
    const int64_t nblk = TR_CEIL_DIV(n, BLOCK);
    double total = 0.0;
    /* each block's partial sum is fixed; blocks are then added in order */
#pragma omp parallel for schedule(static) ordered
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * BLOCK, i1 = TR_MIN(n, i0 + BLOCK);
        double part = 0.0;
        for (int64_t i = i0; i < i1; i++) {
            float x = a->logits[i], y = a->labels[i];
            part += (double)km_bce_logit(x, y);
            if (a->dlogits)
                a->dlogits[i] = a->grad_scale * km_bce_logit_grad(x, y);
        }
#pragma omp ordered
        total += part;
    }
    if (a->loss_sum)
        *a->loss_sum = total;
    return TR_OK;
}
