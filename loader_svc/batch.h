/* batch.h: one batch of training samples in host memory, as every reader and
 * the synthetic generator produce it and as the worker consumes it. */
#ifndef TR_BATCH_H
#define TR_BATCH_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_batch {
    int64_t cap;        /* samples the buffers hold */
    int64_t n;          /* samples in this batch (n <= cap; a last partial batch has fewer) */
    int num_features;   /* numerical features per sample */
    int num_ld;         /* row stride of numerical: num_features rounded up to 8 */
    int ntables;
    float *numerical;   /* (cap, num_ld) row-major; columns >= num_features are zero */
    float *labels;      /* (cap) 0 or 1 */
    int32_t *cat;       /* (ntables, cap) table-major: cat[t * cap + i] */
    int64_t index;      /* batch number within its split, for logs */
};

/* Allocates buffers for `cap` samples (zero-filled). Pairs with tr_batch_release.
 * Returns TR_ERR_NOMEM or TR_ERR_ARG (negative sizes). */
enum tr_status tr_batch_init(struct tr_batch *b, int64_t cap, int num_features, int ntables) TR_WUR;
void tr_batch_release(struct tr_batch *b);

/* Bytes tr_batch_init allocates. */
int64_t tr_batch_bytes(int64_t cap, int num_features, int ntables);

#ifdef __cplusplus
}
#endif
#endif
