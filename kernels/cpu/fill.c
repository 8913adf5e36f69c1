/* fill.c: the CPU fill (constants and the seeded initialisers of kmath.h), the
 * batched row copy and the row move by index (a tier's cache fills). All are
 * memory-bound loops split over rows; none depends on the thread count for its
 * values. */
#define TR_SUBSYS TR_SUB_KERN
#include <string.h>

#include "../../common/check.h"
#include "../kern_check.h"
#include "../kmath.h"
#include "cpu_internal.h"

enum tr_status kern_cpu_fill(const struct kern_fill_args *a)
{
    if (a->rows < 0 || a->cols < 0 || (a->rows > 0 && a->ld < a->cols) || (int)a->kind < KERN_FILL_CONST ||
        a->kind > KERN_FILL_NORMAL)
        return TR_ERR_ARG;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < a->rows; r++) {
        float *y = a->dst + r * a->ld;
        const uint64_t e0 = (uint64_t)(r * a->elem_ld + a->elem0);
        switch (a->kind) {
        case KERN_FILL_CONST:
            for (int64_t c = 0; c < a->cols; c++)
                y[c] = a->value;
            break;
        case KERN_FILL_UNIFORM:
            for (int64_t c = 0; c < a->cols; c++)
                y[c] = km_init_embedding(a->seed, a->stream, e0 + (uint64_t)c, a->a);
            break;
        case KERN_FILL_GLOROT:
            for (int64_t c = 0; c < a->cols; c++)
                y[c] = km_init_glorot(a->seed, a->stream, e0 + (uint64_t)c, a->a, a->b);
            break;
        case KERN_FILL_NORMAL:
            for (int64_t c = 0; c < a->cols; c++)
                y[c] = km_init_bias(a->seed, a->stream, e0 + (uint64_t)c, a->a);
            break;
        }
    }
    return TR_OK;
}

/* One parallel region for all blocks; each block's rows are split statically
 * without a barrier between blocks (they write disjoint memory), so a thread
 * keeps the same row range of every block and the rows it touched stay in its cache. */
enum tr_status kern_cpu_copy_rows(const struct kern_copy_rows_args *a, int n)
{
    for (int k = 0; k < n; k++) /* rows may not overlap */
        if (a[k].rows < 0 || a[k].cols < 0 || (a[k].rows > 1 && (a[k].ldd < a[k].cols || a[k].lds < a[k].cols)))
            return TR_ERR_ARG;
#pragma omp parallel
    {
        for (int k = 0; k < n; k++) {
            const struct kern_copy_rows_args *b = &a[k];
            const size_t bytes = (size_t)b->cols * sizeof(float);
            if (bytes == 0)
                continue;
#pragma omp for schedule(static) nowait
            for (int64_t r = 0; r < b->rows; r++)
                memcpy(b->dst + r * b->ldd, b->src + r * b->lds, bytes);
        }
    }
    return TR_OK;
}

/* Rows by index: one parallel region for all blocks, each block's rows split
 * statically (destination rows are distinct, so threads never share one). */
enum tr_status kern_cpu_move_rows(const struct kern_move_rows_args *a, int n)
{
    TR_CHECK(kern_check_move_rows(a, n));
#pragma omp parallel
    {
        for (int k = 0; k < n; k++) {
            const struct kern_move_rows_args *b = &a[k];
            const size_t bytes = (size_t)b->cols * sizeof(float);
            if (bytes == 0)
                continue;
#pragma omp for schedule(static) nowait
            for (int64_t i = 0; i < b->n; i++) {
                const int64_t d = b->dst_idx ? b->dst_idx[i] : i, s = b->src_idx ? b->src_idx[i] : i;
                memcpy(b->dst + d * b->ldd, b->src + s * b->lds, bytes);
            }
        }
    }
    return TR_OK;
}
