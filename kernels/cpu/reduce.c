/* reduce.c: CPU sum of squares (the numeric guards' norm) over strided blocks.
 * Each block is cut into fixed chunks of rows whose partial sums are added in
 * chunk order, so the result is bitwise independent of the thread count. It does
 * not implement other reductions (the loss sum lives in loss.c). */
#define TR_SUBSYS TR_SUB_KERN
#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

#define CHUNK_ELEMS 16384 /* elements per partial sum (at least one row) */

static double sumsq_block(const struct kern_sumsq_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (rows == 0 || cols == 0)
        return 0.0;
    if (a->ld == cols) { /* contiguous: one long row, chunked the same way */
        const int64_t n = rows * cols, nchunk = TR_CEIL_DIV(n, CHUNK_ELEMS);
        double total = 0.0;
#pragma omp parallel for schedule(static) ordered
        for (int64_t c = 0; c < nchunk; c++) {
            const int64_t i0 = c * CHUNK_ELEMS, i1 = TR_MIN(n, i0 + CHUNK_ELEMS);
            double part = 0.0;
            for (int64_t i = i0; i < i1; i++)
                part = km_sumsq_add(part, a->x[i]);
#pragma omp ordered
            total += part;
        }
        return total;
    }
    const int64_t per = TR_MAX(1, CHUNK_ELEMS / cols), nchunk = TR_CEIL_DIV(rows, per);
    double total = 0.0;
#pragma omp parallel for schedule(static) ordered
    for (int64_t c = 0; c < nchunk; c++) {
        const int64_t r0 = c * per, r1 = TR_MIN(rows, r0 + per);
        double part = 0.0;
        for (int64_t r = r0; r < r1; r++) {
            const float *x = a->x + r * a->ld;
            for (int64_t j = 0; j < cols; j++)
                part = km_sumsq_add(part, x[j]);
        }
#pragma omp ordered
        total += part;
    }
    return total;
}

enum tr_status kern_cpu_sumsq(const struct kern_sumsq_args *a, int n)
{
    if (n < 0)
        return TR_ERR_ARG;
    for (int k = 0; k < n; k++)
        if (a[k].rows < 0 || a[k].cols < 0 || a[k].ld < a[k].cols || !a[k].out)
            return TR_ERR_ARG;
    for (int k = 0; k < n; k++)
        *a[k].out = sumsq_block(&a[k]);
    return TR_OK;
}
