/* train_internal.h: what the files of a training run share (train.c, its numeric
 * guards in train_guard.c, its report in train_report.c). Included by
 * worker/train*.c only. */
#ifndef TR_TRAIN_INTERNAL_H
#define TR_TRAIN_INTERNAL_H

#include <stdint.h>

#include "plan.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The run saves checkpoints (ckpt.h): its plan counts their staging memory. */
int train_saves_checkpoints(const struct train *T);

/* What the memory plan needs to know of the data: its shape, and what rank 0's
 * source keeps in memory. */
struct plan_shape train_src_shape(const struct train *T);

/* The name of the layer that writes the logits (the last top layer), in li. */
const char *train_logit_layer(const struct train *T, struct dlrm_layer_info *li);

/* The numeric guards (train_guard.c), each TR_ERR_RANGE (logged, naming the step
 * and the tensor, with T->together set) when it fails, or the errors of the
 * backend's sumsq op:
 *   train_check_gradients   after the backward of step s (0-based), before the
 *                           update: the loss, the embedding and dense gradients
 *   train_check_divergence  a finite loss that runs away from the first step's
 *   train_check_weights     the weights after the update (collective) */
enum tr_status train_check_gradients(struct train *T, int64_t s, double loss) TR_WUR;
enum tr_status train_check_divergence(struct train *T, int64_t s, double loss) TR_WUR;
enum tr_status train_check_weights(struct train *T, int64_t s) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
