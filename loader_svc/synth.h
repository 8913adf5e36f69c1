/* synth.h: a learnable synthetic CTR dataset. Every value is a pure function of
 * (seed, split, global sample index, feature), so any process can produce any
 * batch, in any order, without state:
 *   - categorical ids: power-law (Zipf, exponent 1) over each table's cardinality,
 *     small ids most frequent (like a frequency-ordered vocabulary);
 *   - numerical features: uniform on [0, 2);
 *   - labels: Bernoulli(sigmoid(teacher logit)), where the fixed random teacher has
 *     a linear term on the numerical features, a scalar effect per categorical id
 *     and dot products of 4-dim id vectors for a few table pairs.
 * A model that learns lowers the loss and reaches a validation AUC well above 0.5;
 * the AUC of the teacher's own logits (synth_teacher_logit) bounds what is reachable. */
#ifndef TR_SYNTH_H
#define TR_SYNTH_H

#include <stdint.h>

#include "../common/status.h"
#include "batch.h"

#ifdef __cplusplus
extern "C" {
#endif

enum synth_ids { SYNTH_IDS_POWERLAW = 0, SYNTH_IDS_UNIFORM = 1 };

struct synth_cfg {
    uint64_t seed;
    int num_features;
    int ntables;
    const int64_t *rows; /* (ntables), borrowed: valid while the cfg is used */
    enum synth_ids ids;
};

/* Fills b with samples [first, first + n) of `split`; b must have room for n.
 * Returns TR_ERR_ARG if b's shape does not match cfg. Thread-safe (uses OpenMP). */
enum tr_status synth_fill(const struct synth_cfg *cfg, enum batch_split split, int64_t first, int64_t n,
                          struct batch *b) TR_WUR;

/* As synth_fill, for samples rows[0 .. n) in that order (a shuffled batch);
 * TR_ERR_ARG for a negative index. */
enum tr_status synth_gather(const struct synth_cfg *cfg, enum batch_split split, const int64_t *rows, int64_t n,
                            struct batch *b) TR_WUR;

/* The teacher's logit for sample `i` of `split` (what the labels are drawn from). */
double synth_teacher_logit(const struct synth_cfg *cfg, enum batch_split split, int64_t i);

#ifdef __cplusplus
}
#endif
#endif
