/* dlrm_internal.h: the fields of struct dlrm and the dense passes on a local
 * slice. Included by the model (dlrm.c) and the training step (hybrid.c) only:
 * they alone index the model's backend memory. Every pointer below is in the
 * backend's memory unless its comment says host. */
#ifndef TR_DLRM_INTERNAL_H
#define TR_DLRM_INTERNAL_H

#include "dlrm.h"
#include "tier.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlrm_layer {
    int in, out;
    float *w, *b;   /* (in, out), (out): views into params */
    float *dw, *db; /* views into grads */
    float *y;       /* (rows, ldy) output (post-activation) */
    int64_t ldy;
    int relu;
    uint8_t *mask;  /* km_relu_mask bits of y (kern_bias_act_fwd_args), or NULL: y kept for the backward */
    char name[48];  /* "bottom_mlp_layer_0" */
};

/* A low-rank cross layer (dcnv2): y = x0 * (x V U + b) + x, width w = n*D. */
struct dlrm_cross {
    int w, r;
    float *v, *u, *b;    /* (w, r), (r, w), (w): views into params */
    float *dv, *du, *db; /* views into grads */
    const float *in;     /* (rows, w) x_l: m->x for layer 0, else the previous out */
    float *out;          /* (rows, w) x_{l+1}: m->top_in for the last layer */
    float *xv;           /* (rows, r) x_l V of the last forward */
    float *h;            /* (rows, w) x_l V U + b of the last forward */
    char name[48];       /* "cross_layer_0" */
};

struct dlrm_table {
    int id;          /* index in the config's table list */
    int pos;         /* row of the interaction input X holding this table */
    int64_t rows;
    int64_t col0;    /* first global column held */
    int64_t width;   /* columns held (0: held by another worker) */
    float *w;        /* (rows, width) */
    float *accum;    /* (rows, width) with Adagrad, (rows) with row-wise Adagrad
                        (a replica on every worker holding columns), else NULL */
    size_t bytes;    /* of w */
    size_t accum_bytes;
    int64_t slots;   /* rows of w and accum in the backend's memory: rows, or with `tiered`
                        its cache's (the tier owns them; the step reads them through the
                        tier's slot numbers) */
    int tiered;
};

struct dlrm {
    struct dlrm_cfg cfg;
    int64_t *rows;         /* host: owned copy of cfg.rows */
    int32_t *hot;          /* host: owned copy of cfg.hot (zeros when it was NULL) */
    uint8_t *mean;         /* host: owned copy of cfg.mean (zeros when it was NULL) */
    struct kern_backend be;
    int has_bottom;
    int n;                 /* interaction vectors: ntables + has_bottom */
    int num_ld;            /* padded numerical width */
    int64_t top_in_w;      /* interaction output width */
    int dp_bottom;         /* this process runs the bottom MLP on its own slice */
    int mp_bottom;         /* this process runs the bottom MLP for the whole global batch */
    int64_t top_param0;    /* first parameter after the bottom MLP (cross layers, then top MLP) */
    int rank;              /* of the shard plan (0 alone) */
    struct dlrm_layer bottom[DLRM_MAX_LAYERS];
    struct dlrm_layer top[DLRM_MAX_LAYERS];
    struct dlrm_cross cross[DLRM_MAX_LAYERS]; /* dcnv2: cfg.ncross of them */
    struct dlrm_table *tables; /* host: (ntables) in config order */

    float *params;  /* (nparams) flat dense parameters */
    float *grads;   /* (nparams) */
    float *accum;   /* (nparams) Adagrad state, or NULL */
    int64_t nparams;
    size_t dense_bytes;

    /* activations, one allocation (act_bytes) */
    float *x;       /* (max_batch, n, D) interaction input */
    float *dx;      /* (max_batch, n, D) dLoss/dX; after the backward row 0 holds the
                       gradient before the last bottom ReLU (that backward runs in place) */
    float *top_in;  /* (max_batch, top_in_w) */
    float *dtop_in; /* (max_batch, top_in_w) */
    float *dbuf[2]; /* (max_batch, max width) ping-pong gradient buffers; NULL with ReLU masks */
    float *dlogits; /* (max_batch) */
    float *cross_dy; /* dcnv2: (max_batch, n*D) gradient of the current cross layer's output */
    float *cross_dh; /* dcnv2: (max_batch, n*D) of its h */
    float *cross_dv; /* dcnv2: (max_batch, r) of its x_l V */
    void *emb_ws;
    size_t emb_ws_bytes;
    struct kern_ws ops_ws; /* host: what dlrm_new reserved (dlrm_bytes.ops) */
    double *emb_sumsq; /* row-wise Adagrad on column slices: each table's per-distinct-row
                          sums of squares, one after the other (room for max_global *
                          max(hot, 1) per table), all-reduced over the workers
                          (hybrid_update); NULL otherwise */
    int64_t emb_sumsq_n;
    int32_t *dx_bad;   /* (1) set by the dot interaction's backward when dx holds a NaN
                          or inf (dlrm_dx_nonfinite), at the end of the activations */
    size_t act_bytes;

    double t[DLRM_T_COUNT_]; /* host: seconds spent per phase since the last reset */
    struct tier *tier;       /* the tables held in a tier, or NULL (dlrm_tier.c) */
    struct tier_bytes tier_bytes;
};

/* The most row-copy blocks one copy_rows call of the step passes (hybrid.c) for
 * a world of W workers and T tables. */
#define DLRM_COPY_BLOCKS(W, T) ((W) * ((T) + 1) + 4)

/* The tier (dlrm_tier.c): slots[t] (ntables) the rows of table t's cache, rows[t]
 * when it is held whole (tier_plan_slots with cfg's store); then the tier of the
 * tables held here with fewer slots than rows (cfg: dlrm_new's, with its plan),
 * their tables bound to its caches.
 * Errors of tier_plan_slots and tier_new. */
enum tr_status dlrm_tier_slots(const struct dlrm_cfg *c, int64_t *slots) TR_WUR;
enum tr_status dlrm_tier_open(struct dlrm *m, const struct dlrm_cfg *cfg, const int64_t *slots) TR_WUR;
/* The slices held here that go to the tier (slots below rows), in d (ntables
 * entries at most); returns how many. */
int dlrm_tier_tables(const struct dlrm_cfg *c, const int64_t *slots, struct tier_table *d);
/* tier_plan_bytes of those slices on a backend (host_memory as its flag). TR_ERR_NOMEM. */
enum tr_status dlrm_tier_plan_bytes(const struct dlrm_cfg *c, const int64_t *slots, int host_memory,
                                    struct tier_bytes *out) TR_WUR;
/* The columns a worker holds of table t: [col0, col0 + width); width 0: none. */
void dlrm_table_part(const struct dlrm_cfg *c, int t, int64_t *col0, int64_t *width);
/* Optimizer state floats a row of a table slice of `width` columns has. */
int64_t dlrm_state_width(enum kern_optim o, int64_t width);

/* The clock for phase timers: synchronizes the backend first, so queued work is
 * counted where it ran. */
double dlrm_clock(const struct dlrm *m);

/* Logits of the last forward: (n) with stride 1. */
float *dlrm_logits(const struct dlrm *m);
/* The factor every parameter gradient is multiplied by before its step: 1 / the
 * loss scale (--amp fp16), else 1. */
float dlrm_grad_unscale(const struct dlrm *m);

/* Dense part on a local slice of n samples: the bottom MLP (if this process runs
 * it data-parallel) writes row 0 of m->x from num (n, ldnum); then interaction and
 * top MLP. m->x rows of the tables must hold the embeddings. */
enum tr_status dlrm_forward_dense(struct dlrm *m, const float *num, int64_t ldnum, int64_t n) TR_WUR;

/* dlrm_forward_dense in two parts, for a caller that overlaps the all-to-all with
 * the first: the data-parallel bottom MLP (nothing unless m->dp_bottom; it writes
 * only row 0 of m->x), then interaction and top MLP. */
enum tr_status dlrm_forward_bottom_dp(struct dlrm *m, const float *num, int64_t ldnum, int64_t n) TR_WUR;
enum tr_status dlrm_forward_top(struct dlrm *m, int64_t n) TR_WUR;

/* Loss over n samples of the last forward: *loss_sum (host) = sum of per-sample
 * BCE; m->dlogits = grad_scale * d loss / d logit. */
enum tr_status dlrm_loss_dense(struct dlrm *m, const float *labels, int64_t n, float grad_scale,
                               double *loss_sum) TR_WUR;

/* Backward of the dense part: top MLP, interaction (m->dx), and the bottom MLP when
 * data-parallel. Gradients go to m->grads. */
enum tr_status dlrm_backward_dense(struct dlrm *m, const float *num, int64_t ldnum, int64_t n) TR_WUR;

/* dlrm_backward_dense in three parts, for a caller that overlaps collectives with
 * them: the top MLP (its gradients are final afterwards: from
 * dlrm_top_mlp_param0 to nparams), the interaction or cross layers (m->dx and
 * the cross gradients), then the data-parallel bottom MLP (nothing unless
 * m->dp_bottom; it modifies row 0 of m->dx in place). */
enum tr_status dlrm_backward_top(struct dlrm *m, int64_t n) TR_WUR;
enum tr_status dlrm_backward_interact(struct dlrm *m, int64_t n) TR_WUR;
/* After the backward of n samples: *bad = whether dx holds a NaN or inf. The dot
 * interaction's backward found it while writing dx (no pass of its own); the DCNv2
 * interaction's dx is summed (sumsq). Synchronizes the backend. */
enum tr_status dlrm_dx_nonfinite(struct dlrm *m, int64_t n, int *bad) TR_WUR;
enum tr_status dlrm_backward_bottom_dp(struct dlrm *m, const float *num, int64_t ldnum, int64_t n) TR_WUR;
/* The first parameter of the top MLP (after the bottom MLP and any cross layers). */
int64_t dlrm_top_mlp_param0(const struct dlrm *m);

/* The bottom MLP alone over n samples, its output written to out (n, ldout): the
 * model-parallel bottom MLP of table-wise mode. Backward from dout (n, lddout)
 * (modified in place) into the bottom gradients. */
enum tr_status dlrm_bottom_forward(struct dlrm *m, const float *num, int64_t ldnum, int64_t n, float *out,
                                   int64_t ldout) TR_WUR;
enum tr_status dlrm_bottom_backward(struct dlrm *m, const float *num, int64_t ldnum, int64_t n, float *dout,
                                    int64_t lddout) TR_WUR;

/* Optimizer step on parameters [p0, p1) of the flat dense buffer. */
enum tr_status dlrm_update_dense_range(struct dlrm *m, float lr, int64_t p0, int64_t p1) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
