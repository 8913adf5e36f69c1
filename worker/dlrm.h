/* dlrm.h: the DLRM model of the seed (NVIDIA TF2 DLRM), on a kern backend.
 *
 *   numerical (B, F) -> zero-pad to (B, ceil8(F)) -> bottom MLP (ReLU on every layer)
 *   categorical ids  -> one embedding row per table (B, D)
 *   interaction input X (B, n, D): row 0 = bottom output, rows 1..T = tables in
 *       cardinality-descending order (stable) -- the seed's v2 single-GPU order
 *   dot interaction -> [bottom (D) | strict lower triangle | zero pad to 8k]
 *   top MLP (ReLU except the last, linear, layer of width 1) -> logit
 *   loss = mean BCE-with-logits over the batch
 *
 * Dense kernels are (in, out) row-major (Keras layout); all dense parameters live
 * in one flat buffer (so one all-reduce and one optimizer call cover them), in the
 * order bottom_mlp_layer_0_kernel, _bias, ..., top_mlp_layer_0_kernel, ....
 * Embedding tables are separate allocations and each may hold a column slice
 * [col0, col0 + width) of the full D columns, or nothing (another worker owns
 * it), as a shard plan says. Not thread-safe: one step at a time.
 *
 * Two levels of API: dlrm_forward/_loss/_backward/_update_* run a whole batch on
 * one process (every table whole); the *_dense and dlrm_bottom_* functions run
 * the dense part on a local slice whose interaction input the distributed step
 * (hybrid.c) has assembled. */
#ifndef TR_DLRM_H
#define TR_DLRM_H

#include <stdint.h>

#include "../common/status.h"
#include "../kernels/kern.h"
#include "../loader_svc/batch.h"
#include "shard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLRM_MAX_LAYERS 16

struct dlrm_cfg {
    int num_features;        /* numerical inputs; 0 = no bottom MLP */
    int ntables;
    const int64_t *cards;    /* (ntables) rows per table, borrowed */
    int emb_dim;             /* D */
    int nbottom;
    int bottom[DLRM_MAX_LAYERS]; /* output widths; the last must equal D */
    int ntop;
    int top[DLRM_MAX_LAYERS];    /* output widths; the last must be 1 */
    enum kern_optim optim;
    float adagrad_init;      /* initial accumulator value */
    float adagrad_eps;
    uint64_t seed;           /* initialisation seed */
    int64_t max_batch;       /* largest (local) batch the dense part will see */
    int64_t max_global;      /* largest global batch (embedding gathers, a model-parallel
                                bottom MLP); 0 = max_batch */
    const struct shard_plan *plan; /* NULL: one process holds everything */
};

struct dlrm_layer {
    int in, out;
    float *w, *b;   /* (in, out), (out): views into params */
    float *dw, *db; /* views into grads */
    float *y;       /* (max_batch, ldy) output (post-activation) */
    int64_t ldy;
    int relu;
    char name[48];  /* "bottom_mlp_layer_0" */
};

struct dlrm_table {
    int id;          /* index in the config's table list */
    int pos;         /* row of the interaction input X holding this table */
    int64_t rows;
    int64_t col0;    /* first global column held */
    int64_t width;   /* columns held (0: held by another worker) */
    float *w;        /* (rows, width) */
    float *accum;    /* (rows, width), Adagrad only */
    size_t bytes;    /* of w (and of accum) */
};

enum dlrm_phase {
    DLRM_T_EMB_FWD = 0,
    DLRM_T_BOTTOM_FWD,
    DLRM_T_INTERACT_FWD,
    DLRM_T_TOP_FWD,
    DLRM_T_LOSS,
    DLRM_T_TOP_BWD,
    DLRM_T_INTERACT_BWD,
    DLRM_T_BOTTOM_BWD,
    DLRM_T_EMB_UPDATE,
    DLRM_T_DENSE_UPDATE,
    DLRM_T_COUNT_
};

/* Name of a phase ("emb_fwd", ...). */
const char *dlrm_phase_name(enum dlrm_phase p);

/* Bytes held. The three totals (dense, embeddings, activations) include their
 * parts listed after them. */
struct dlrm_bytes {
    int64_t dense;       /* MLP parameters + gradients (+ Adagrad state) */
    int64_t embeddings;  /* tables held (+ Adagrad state) */
    int64_t activations; /* activations of the largest batch + embedding workspace */
    int64_t dense_state, emb_state, workspace;
};

struct dlrm {
    struct dlrm_cfg cfg;
    int64_t *cards;        /* owned copy of cfg.cards */
    struct kern_backend be;
    int has_bottom;
    int n;                 /* interaction vectors: ntables + has_bottom */
    int num_ld;            /* padded numerical width */
    int64_t top_in_w;      /* interaction output width */
    int dp_bottom;         /* this process runs the bottom MLP on its own slice */
    int mp_bottom;         /* this process runs the bottom MLP for the whole global batch */
    int64_t top_param0;    /* first top-MLP parameter in params (bottom ones come before) */
    int rank;              /* of the shard plan (0 alone) */
    struct dlrm_layer bottom[DLRM_MAX_LAYERS];
    struct dlrm_layer top[DLRM_MAX_LAYERS];
    struct dlrm_table *tables; /* (ntables) in config order */

    float *params;  /* (nparams) flat dense parameters */
    float *grads;   /* (nparams) */
    float *accum;   /* (nparams) Adagrad state, or NULL */
    int64_t nparams;
    size_t dense_bytes;

    /* activations, one allocation (act_bytes) */
    float *x;       /* (max_batch, n, D) interaction input */
    float *dx;      /* (max_batch, n, D) dLoss/dX; after dlrm_backward row 0 holds the
                       gradient before the last bottom ReLU (that backward runs in place) */
    float *top_in;  /* (max_batch, top_in_w) */
    float *dtop_in; /* (max_batch, top_in_w) */
    float *dbuf[2]; /* (max_batch, max width) ping-pong gradient buffers */
    float *dlogits; /* (max_batch) */
    void *emb_ws;
    size_t emb_ws_bytes;
    struct kern_emb_fwd_args *fwd_args;    /* (ntables) per-step op arguments */
    struct kern_emb_update_args *upd_args; /* (ntables) */
    int64_t *bad_pos;                      /* (ntables) */
    size_t act_bytes;

    double t[DLRM_T_COUNT_]; /* seconds spent per phase since the last reset */
};

/* Validates cfg and allocates the model on `be`: every table whole, or this
 * rank's part of each as cfg->plan says. Parameters are initialised as the seed
 * does (dlrm_init_params). Errors: TR_ERR_ARG (bad config, message logged naming
 * the field), TR_ERR_NOMEM. */
enum tr_status dlrm_new(const struct dlrm_cfg *cfg, const struct kern_backend *be, struct dlrm **out) TR_WUR;
void dlrm_free(struct dlrm **m);

/* Initialises every parameter from cfg.seed: embeddings U(+-sqrt(1/rows)), dense
 * kernels truncated-normal Glorot, biases N(0, 1/units); Adagrad accumulators to
 * adagrad_init. The values depend only on (seed, tensor, element), never on sharding. */
void dlrm_init_params(struct dlrm *m);

/* Bytes dlrm_new allocates for cfg on be, without allocating (the memory plan). */
void dlrm_plan_bytes(const struct dlrm_cfg *cfg, const struct kern_backend *be, struct dlrm_bytes *b);

/* Dense part on a local slice of n samples: the bottom MLP (if this process runs
 * it data-parallel) writes row 0 of m->x from num (n, ldnum); then interaction and
 * top MLP. m->x rows of the tables must hold the embeddings. */
enum tr_status dlrm_forward_dense(struct dlrm *m, const float *num, int64_t ldnum, int64_t n) TR_WUR;

/* Loss over n samples of the last forward: *loss_sum = sum of per-sample BCE;
 * m->dlogits = grad_scale * d loss / d logit. */
enum tr_status dlrm_loss_dense(struct dlrm *m, const float *labels, int64_t n, float grad_scale,
                               double *loss_sum) TR_WUR;

/* Backward of the dense part: top MLP, interaction (m->dx), and the bottom MLP when
 * data-parallel. Gradients go to m->grads. */
enum tr_status dlrm_backward_dense(struct dlrm *m, const float *num, int64_t ldnum, int64_t n) TR_WUR;

/* The bottom MLP alone over n samples, its output written to out (n, ldout): the
 * model-parallel bottom MLP of table-wise mode. Backward from dout (n, lddout)
 * (modified in place) into the bottom gradients. */
enum tr_status dlrm_bottom_forward(struct dlrm *m, const float *num, int64_t ldnum, int64_t n, float *out,
                                   int64_t ldout) TR_WUR;
enum tr_status dlrm_bottom_backward(struct dlrm *m, const float *num, int64_t ldnum, int64_t n, float *dout,
                                    int64_t lddout) TR_WUR;

/* Optimizer step on parameters [p0, p1) of the flat dense buffer. */
enum tr_status dlrm_update_dense_range(struct dlrm *m, float lr, int64_t p0, int64_t p1) TR_WUR;

/* Forward pass over b->n samples; on return logits are in m->top[ntop-1].y (n, 1).
 * Errors: TR_ERR_RANGE (a categorical id outside its table; logged with table,
 * sample and value), TR_ERR_ARG (batch larger than max_batch or wrong shape). */
enum tr_status dlrm_forward(struct dlrm *m, const struct tr_batch *b) TR_WUR;

/* Loss of the last forward: *loss = mean BCE over b->n samples; also fills the
 * logit gradients (scaled by 1/n). */
enum tr_status dlrm_loss(struct dlrm *m, const struct tr_batch *b, double *loss) TR_WUR;

/* Backward through the dense part into m->grads and m->dx. */
enum tr_status dlrm_backward(struct dlrm *m, const struct tr_batch *b) TR_WUR;

/* Applies the sparse embedding update (fused backward + optimizer) from m->dx. */
enum tr_status dlrm_update_embeddings(struct dlrm *m, const struct tr_batch *b, float lr) TR_WUR;

/* Applies the optimizer to the dense parameters from m->grads. */
enum tr_status dlrm_update_dense(struct dlrm *m, float lr) TR_WUR;

/* One training step: forward, loss, backward, both updates. */
enum tr_status dlrm_train_step(struct dlrm *m, const struct tr_batch *b, float lr, double *loss) TR_WUR;

/* Logs the first out-of-range id recorded in m->bad_pos by the last emb_fwd
 * (cat is table-major with row stride cap), with a hint. */
void dlrm_report_bad_id(const struct dlrm *m, const int32_t *cat, int64_t cap, int64_t batch_index);

/* Logits of the last forward: (n) with stride 1. */
const float *dlrm_logits(const struct dlrm *m);

void dlrm_get_bytes(const struct dlrm *m, struct dlrm_bytes *b);

void dlrm_reset_timers(struct dlrm *m);

#ifdef __cplusplus
}
#endif
#endif
