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
 * the AUC of the teacher's own logits (synth_teacher_logit) bounds what is reachable.
 * Multi-hot tables (hot[t] = h > 0) hold a bag per sample: h ids (fixed), or a
 * length uniform on [0, h] (variable); its first id is the one-hot id above (so
 * the teacher and the labels are those of the one-hot dataset, an empty bag
 * giving the teacher nothing from that table), the others power-law draws of
 * their own. */
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
    const int32_t *hot;  /* (ntables) batch.h's hotness, borrowed; NULL: every table one-hot */
    int variable;        /* multi-hot bags of a length uniform on [0, hot[t]] instead of hot[t] */
};

/* Fills b with samples [first, first + n) of `split`; b must have room for n.
 * Returns TR_ERR_ARG if b's shape (hotness included) does not match cfg.
 * Thread-safe (uses OpenMP). */
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
