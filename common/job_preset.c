/* job_preset.c: --preset, defaults for the flags a user does not give: the MLPerf
 * Training DLRM-DCNv2 benchmark model (every value traced to the line of the
 * reference that sets it) and the tables of Criteo Terabyte. It sets only flags
 * that were not given, never marks them given (so a flag's conflicts stay the
 * user's), and does not read datasets. */
#define TR_SUBSYS TR_SUB_INIT
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "job.h"

/* The references, as stored at these commits (lines counted in those files):
 *   [R]  mlcommons/training@3e2f731 recommendation_v2/torchrec_dlrm/README.MD, "Running the
 *        MLPerf DLRM v2 benchmark", steps 3 and 4
 *   [M]  mlcommons/training@3264b4f recommendation_v2/torchrec_dlrm/dlrm_main.py */
static const int64_t mlperf_rows[26] = {
    /* [R]:161 and [R]:177 --num_embeddings_per_feature */
    40000000, 39060, 17295, 7424, 20265, 3,        7122,     1543,     63,     40000000, 3067956, 405282, 10,
    2209,     11938, 155,   4,    976,   14,       40000000, 40000000, 40000000, 590152, 12973,   108,    36,
};
static const int64_t mlperf_hot[26] = {
    /* [R]:162 --multi_hot_sizes (materialized with --multi_hot_distribution_type uniform, [R]:163) */
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
};
static const int64_t mlperf_bottom[] = {512, 256, 128};          /* [R]:174 --dense_arch_layer_sizes */
static const int64_t mlperf_top[] = {1024, 1024, 512, 256, 1};   /* [R]:175 --over_arch_layer_sizes */

/* Criteo Terabyte without a frequency threshold, the seed's "extra large" data
 * (882 million rows in all, 292 million in the largest table; the seed gives only
 * these two figures). Per-table counts are derived from peers.md section 7's
 * TorchRec list (frequency threshold 0, the closest published per-table counts):
 * tables under 1 M rows there are kept (their vocabularies are exhausted), the
 * largest (cat_19) is set to the seed's 292 M, and the other large tables are
 * scaled by one factor (4.599) so that the total is the seed's 882 M. */
static const int64_t criteo_tb_t0[26] = {210783335, 36746, 17245, 7413,      20243, 3,        7114,
                                         1441,      62,    134634691, 7230317, 345138,    10,       2209,
                                         11267,     128,   4,         974,     14,        292000000, 52045081,
                                         184391716, 452104, 12606,    104,     35};

const char *job_preset_name(int preset)
{
    switch (preset) {
    case JOB_PRESET_NONE: return "none";
    case JOB_PRESET_DLRM_DCNV2_MLPERF: return "dlrm_dcnv2_mlperf";
    case JOB_PRESET_CRITEO_TB_T0: return "criteo_tb_t0";
    }
    return "?";
}

static int given(const struct job_cfg *c, const char *name)
{
    return c->table && tr_opt_given(c->table, name);
}

static enum tr_status set_list(struct job_cfg *c, const char *name, struct tr_i64_list *l, const int64_t *v, int n)
{
    if (given(c, name))
        return TR_OK;
    int64_t *p = tr_malloc((size_t)n * sizeof *p);
    if (!p)
        return TR_ERR_NOMEM;
    memcpy(p, v, (size_t)n * sizeof *p);
    tr_free(l->v);
    l->v = p;
    l->n = n;
    return TR_OK;
}

#define SET(name, field, value)                                                                                    \
    do {                                                                                                           \
        if (!given(c, name))                                                                                       \
            c->field = (value);                                                                                    \
    } while (0)

static enum tr_status mlperf(struct job_cfg *c)
{
    /* the data: Criteo 1TB made multi-hot ([R] step 3); the synthetic source's shape
     * when no dataset is given */
    TR_CHECK(set_list(c, "synthetic_dataset_cardinalities", &c->rows, mlperf_rows, 26));
    TR_CHECK(set_list(c, "synthetic_dataset_multi_hot_sizes", &c->multi_hot, mlperf_hot, 26));
    SET("synthetic_dataset_multi_hot_lengths", multi_hot_variable, 0); /* materialized: fixed sizes */
    SET("synthetic_dataset_num_numerical_features", num_numerical, 13); /* Criteo's I1..I13 */
    /* the model */
    SET("embedding_dim", embedding_dim, 128); /* [R]:173 --embedding_dim 128 */
    TR_CHECK(set_list(c, "bottom_mlp_dims", &c->bottom, mlperf_bottom, 3));
    TR_CHECK(set_list(c, "top_mlp_dims", &c->top, mlperf_top, 5));
    SET("interaction", interaction, JOB_INTERACT_DCNV2); /* [R]:183 --interaction_type=dcn */
    SET("dcn_num_layers", dcn_num_layers, 3);           /* [R]:184 --dcn_num_layers=3 (also [M]:187's default) */
    SET("dcn_low_rank_dim", dcn_low_rank_dim, 512);     /* [R]:185 --dcn_low_rank_dim=512 ([M]:193) */
    /* pooling: [M]'s EmbeddingBagConfig(...) in main() gives none: TorchRec's
     * default, sum -- already --pooling's default */
    /* the optimizer: Adagrad for the embeddings (fused, FBGEMM's EXACT_ADAGRAD:
     * per element) and the MLPs (torch.optim.Adagrad), p -= lr g / (sqrt(acc) + eps) */
    SET("optimizer", optimizer, JOB_OPT_ADAGRAD);                  /* [R]:186 --adagrad */
    SET("learning_rate", learning_rate, 0.005);                    /* [R]:187 --learning_rate 0.005 */
    SET("adagrad_initial_accumulator_value", adagrad_init, 0.0);   /* [M]:74 ADAGRAD_INIT_ACC = 0 */
    SET("adagrad_epsilon", adagrad_eps, 1e-10);                    /* [M]:75 ADAGRAD_EPS = 1e-10 */
    /* the schedule: none ([M]:306, [M]:311, [M]:316: --lr_warmup_steps, --lr_decay_start
     * and --lr_decay_steps default to 0, which the reference's LRPolicyScheduler
     * takes for a constant rate): no warm-up, a decay that starts after any run */
    SET("warmup_steps", warmup_steps, 0);
    SET("decay_start_step", decay_start_step, (int64_t)1000000000000000);
    SET("decay_steps", decay_steps, 1);
    SET("batch_size", batch_size, 65536);  /* [R]:170 GLOBAL_BATCH_SIZE=65536 */
    SET("epochs", epochs, 1);              /* [R]:179 --epochs 1 */
    SET("evals_per_epoch", evals_per_epoch, 20); /* [R]:178 TOTAL_TRAINING_SAMPLES / (GLOBAL_BATCH_SIZE * 20) */
    SET("auc_threshold", auc_threshold, 0.8030); /* [R]:189 "The proposed target AUROC ... is 0.8030" */
    return TR_OK;
}

enum tr_status job_apply_preset(struct job_cfg *c)
{
    switch (c->preset) {
    case JOB_PRESET_DLRM_DCNV2_MLPERF: return mlperf(c);
    case JOB_PRESET_CRITEO_TB_T0: return set_list(c, "synthetic_dataset_cardinalities", &c->rows, criteo_tb_t0, 26);
    default: return TR_OK;
    }
}
