/* cross.c: CPU "cross combine" of a low-rank cross layer (DCNv2), forward and
 * backward: the element-wise part, threads splitting the rows, each element one
 * call of the kmath.h formula (so results do not depend on the thread count). The
 * layer's GEMMs and bias are the dense ops' (dense.c); nothing here reduces. */
#define TR_SUBSYS TR_SUB_KERN
#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

enum tr_status kern_cpu_cross_fwd(const struct kern_cross_fwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (rows < 0 || cols < 0 || a->ldx0 < cols || a->ldh < cols || a->ldxl < cols || a->ldy < cols)
        return TR_ERR_ARG;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *x0 = a->x0 + r * a->ldx0, *h = a->h + r * a->ldh, *xl = a->xl + r * a->ldxl;
        float *y = a->y + r * a->ldy;
        for (int64_t c = 0; c < cols; c++)
            y[c] = km_cross_fwd(x0[c], h[c], xl[c]);
    }
    return TR_OK;
}

enum tr_status kern_cpu_cross_bwd(const struct kern_cross_bwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (rows < 0 || cols < 0 || a->ldx0 < cols || a->ldh < cols || a->lddy < cols || a->lddh < cols ||
        a->lddx0 < cols)
        return TR_ERR_ARG;
    const int acc = a->accumulate != 0, res = a->residual != 0;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *x0 = a->x0 + r * a->ldx0, *h = a->h + r * a->ldh, *dy = a->dy + r * a->lddy;
        float *dh = a->dh + r * a->lddh, *dx0 = a->dx0 + r * a->lddx0;
        for (int64_t c = 0; c < cols; c++) {
            float g = dy[c]; /* read first: dh may be dy */
            dx0[c] = km_cross_grad_x0(acc ? dx0[c] : 0.0f, g, h[c], res);
            dh[c] = km_cross_grad_h(g, x0[c]);
        }
    }
    return TR_OK;
}
