/* metrics.h: evaluation metrics computed on the host over a whole test set:
 * exact ROC AUC (sort-based, ties handled by average ranks) and log loss. */
#ifndef TR_KERN_METRICS_H
#define TR_KERN_METRICS_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exact ROC AUC of scores (n) against labels (n, 0 or 1), by the Mann-Whitney
 * statistic with average ranks for tied scores; scores may be logits (AUC is
 * invariant under sigmoid). Memory: 16 bytes per sample, allocated inside.
 * Sets *auc to NaN when all labels are equal. Returns TR_ERR_ARG on a NaN score
 * or a label other than 0/1, TR_ERR_NOMEM. Not thread-safe w.r.t. its inputs;
 * uses OpenMP threads inside. */
enum tr_status kern_auc_exact(const float *scores, const float *labels, int64_t n, double *auc) TR_WUR;

/* Mean binary cross-entropy of logits against labels (0 if n == 0), in double,
 * fixed summation order. */
double kern_logloss(const float *logits, const float *labels, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
