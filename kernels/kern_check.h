/* kern_check.h: the argument checks every backend runs before it queues any work,
 * written once so that the CPU and CUDA backends refuse exactly the same calls
 * (kern.h's contracts). Header-only (static inline), C11 and CUDA C++; for the
 * files of kernels/ only. It checks host-visible arguments, never tensor contents
 * (ids and offsets are checked where the data lives). */
#ifndef TR_KERN_CHECK_H
#define TR_KERN_CHECK_H

#include <stdint.h>

#include "kern.h"

/* Bits needed to hold the values 0..v (the radix-sort key widths of emb_update). */
static inline int kern_bits_for(uint64_t v)
{
    int b = 0;
    while (b < 64 && (v >> b) != 0)
        b++;
    return b;
}

/* TR_ERR_ARG unless the fields the optimizer of an emb_update (or, rowsq, phase 1
 * of a row-wise Adagrad step: emb_rowsq) reads fit it. */
static inline enum tr_status kern_check_emb_optim(const struct kern_emb_update_args *a, int rowsq)
{
    const int64_t w = a->c1 - a->c0;
    if (rowsq)
        return a->row_sumsq && (a->dim == 0 || a->dim >= w) ? TR_OK : TR_ERR_ARG;
    switch (a->hp.kind) {
    case KERN_OPT_SGD: return TR_OK;
    case KERN_OPT_ADAGRAD: return a->accum ? TR_OK : TR_ERR_ARG;
    case KERN_OPT_ROWWISE_ADAGRAD:
        if (!a->accum || a->dim < 0 || (a->dim > 0 && a->dim < w))
            return TR_ERR_ARG;
        /* without the other slices' sums, the columns must be the whole row */
        return a->row_sumsq || a->dim == 0 || a->dim == w ? TR_OK : TR_ERR_ARG;
    }
    return TR_ERR_ARG;
}

/* TR_ERR_ARG unless all n mark_rows blocks have valid sizes, pointers and id type. */
static inline enum tr_status kern_check_mark_rows(const struct kern_mark_rows_args *a, int n)
{
    if (n < 0)
        return TR_ERR_ARG;
    for (int k = 0; k < n; k++)
        if (a[k].n < 0 || a[k].rows < 0 || a[k].block_rows < 1 || (a[k].n > 0 && (!a[k].idx || !a[k].dirty)) ||
            (a[k].idx_dtype != KERN_I32 && a[k].idx_dtype != KERN_I64))
            return TR_ERR_ARG;
    return TR_OK;
}

/* TR_ERR_ARG unless all n move_rows blocks have sizes >= 0, strides of at least
 * cols and their pointers (when they move anything). */
static inline enum tr_status kern_check_move_rows(const struct kern_move_rows_args *a, int n)
{
    if (n < 0)
        return TR_ERR_ARG;
    for (int k = 0; k < n; k++)
        if (a[k].n < 0 || a[k].cols < 0 || a[k].ldd < a[k].cols || a[k].lds < a[k].cols ||
            (a[k].n > 0 && a[k].cols > 0 && (!a[k].dst || !a[k].src)))
            return TR_ERR_ARG;
    return TR_OK;
}

/* TR_ERR_ARG unless a metrics call has a size >= 0, its tensors (when n > 0) and
 * every output. */
static inline enum tr_status kern_check_metrics(const struct kern_metrics_args *a)
{
    if (!a || a->n < 0 || (a->n > 0 && (!a->scores || !a->labels)) || !a->nonfinite || !a->first_nonfinite ||
        !a->auc || !a->logloss)
        return TR_ERR_ARG;
    return TR_OK;
}

#endif
