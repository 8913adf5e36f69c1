/* dlrm.h: the DLRM model of the seed (NVIDIA TF2 DLRM), on a kern backend.
 *
 *   numerical (B, F) -> zero-pad to (B, ceil8(F)) -> bottom MLP (ReLU on every layer)
 *   categorical ids  -> one embedding row per table (B, D); a multi-hot table's bag
 *                       of rows summed or averaged (--pooling), an empty bag zeros
 *   interaction input X (B, n, D): row 0 = bottom output, rows 1..T = tables in
 *       cardinality-descending order (stable) -- the seed's v2 single-GPU order
 *   interaction, one of
 *     dot:   [bottom (D) | strict lower triangle | zero pad to 8k]
 *     dcnv2: x0 = X flattened per sample (n*D); L low-rank cross layers
 *            x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l, V_l (n*D -> r), U_l (r -> n*D)
 *            with bias b_l; output x_L (n*D, no padding) -- DLRM v2 (MLPerf), TorchRec's
 *            LowRankCrossNet
 *   top MLP (ReLU except the last, linear, layer of width 1) -> logit
 *   loss = mean BCE-with-logits over the batch
 *
 * Dense kernels are (in, out) row-major (Keras layout); all dense parameters live
 * in one flat buffer (so one all-reduce and one optimizer call cover them), in the
 * order bottom_mlp_layer_0_kernel, _bias, ..., then (dcnv2) cross_layer_0_v_kernel
 * (n*D, r), _u_kernel (r, n*D), _bias (n*D), ..., then top_mlp_layer_0_kernel, ....
 * Everything from the first cross (or top) parameter on is data-parallel.
 * Embedding tables are separate allocations and each may hold a column slice
 * [col0, col0 + width) of the full D columns, or nothing (another worker owns
 * it), as a shard plan says.
 *
 * The model is opaque: it lives in the backend's memory and is computed by the
 * training step (hybrid.h), which alone sees its fields (dlrm_internal.h). Others
 * read and write its tensors through dlrm_tensor_read/_write (copies through the
 * backend), walk them through dlrm_tensors (dlrm_tensors.c) and read its shape
 * through dlrm_get_info. Not thread-safe. */
#ifndef TR_DLRM_H
#define TR_DLRM_H

#include <stdint.h>

#include "../common/job.h"
#include "../common/status.h"
#include "../kernels/kern.h"
#include "shard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLRM_MAX_LAYERS JOB_MAX_LAYERS

struct dlrm;

enum dlrm_interaction { DLRM_INTERACT_DOT = 0, DLRM_INTERACT_DCNV2 = 1 };

struct dlrm_cfg {
    int num_features;        /* numerical inputs; 0 = no bottom MLP */
    int ntables;
    const int64_t *rows;     /* (ntables) rows per table, borrowed */
    int emb_dim;             /* D */
    int nbottom;
    int bottom[DLRM_MAX_LAYERS]; /* output widths; the last must equal D */
    int ntop;
    int top[DLRM_MAX_LAYERS];    /* output widths; the last must be 1 */
    enum dlrm_interaction interaction;
    int ncross;              /* dcnv2: cross layers, 1..DLRM_MAX_LAYERS */
    int cross_rank;          /* dcnv2: low-rank dimension r, >= 1 */
    enum kern_optim optim;
    float adagrad_init;      /* initial accumulator value */
    float adagrad_eps;
    float loss_scale;        /* the loss gradient is scaled up by it and every parameter
                                gradient down before its step (--amp fp16); 0 or 1: none */
    uint64_t seed;           /* initialisation seed */
    int64_t max_batch;       /* largest (local) batch the dense part will see */
    int64_t max_global;      /* largest global batch (embedding gathers, a model-parallel
                                bottom MLP); 0 = max_batch */
    const struct shard_plan *plan; /* NULL: one process holds everything */
    /* where tables live (--table_store, --embedding_cache): tables a cache would not
     * hold whole go to a tier (tier.h) of this store; JOB_STORE_MEMORY: none */
    struct job_tier tier;    /* its dir is borrowed (copied by dlrm_new) */
    const char *store_tag;   /* in the store's file names (run id and rank); NULL: the pid */
    const int32_t *hot;      /* (ntables) each table's hotness (loader_svc/batch.h: 0 one-hot,
                                h > 0 bags of up to h ids), borrowed; NULL: every table one-hot */
    const uint8_t *mean;     /* (ntables) 1: a table's bags are averaged, 0: summed (--pooling),
                                borrowed; NULL: every bag summed */
};

/* The model of a job: its flags, a dataset shape (num_features inputs, ntables
 * tables of rows[t] rows, borrowed) and the plan of a world of `world` workers.
 * The largest local batch is the first worker's slice of the larger of the
 * training and test batches. The tables' hotness and pooling are left NULL (one-hot,
 * summed): the caller sets them (hot from the data source, mean from job_pooling). */
void dlrm_cfg_from_job(const struct job_cfg *job, int num_features, int ntables, const int64_t *rows,
                       const struct shard_plan *plan, struct dlrm_cfg *out);

/* The table store's activity since dlrm_new (all zero when no table is in a tier). */
struct tier_stats;
void dlrm_tier_stats(const struct dlrm *m, struct tier_stats *out);

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
    int64_t embeddings;  /* tables held (+ Adagrad state: per element, or per row) */
    int64_t activations; /* activations of the largest batch + embedding workspace
                            (+ the row-wise sums of squares of column slices) */
    int64_t dense_state, emb_state, workspace;
    int64_t dense_params; /* parameters in dense (each of its blocks starts 64-byte aligned) */
    int tables_tiered;    /* tables held here in a tier: their embeddings and state above are
                             their caches (backend memory) */
    int64_t tier_cache;   /* of embeddings: the caches of the tables in a tier */
    int64_t tier_host;    /* the tier's host memory: its maps and staging, and the rows
                             themselves with --table_store host */
    int64_t tier_backend; /* backend memory the tier holds beyond the caches (staging, on a
                             backend with memory of its own) */
    int64_t tier_disk;    /* the files of --table_store file:DIR */
    struct kern_ws ops;   /* the backend's working memory of the ops the model and its step
                             (hybrid.h) run, field by field the largest (kern_ws_max): what
                             dlrm_new reserves on the backend (not the metrics op's, which
                             the evaluation runs) */
};

/* Validates cfg and allocates the model on `be` (borrowed; it must outlive the
 * model): every table whole, or this rank's part of each as cfg->plan says, then
 * reserves the backend's working memory of every op the model and its step run
 * (dlrm_bytes.ops), so that no step allocates. Parameters are initialised as the
 * seed does (dlrm_init_params). Errors:
 * TR_ERR_ARG (bad config, message logged naming the field), TR_ERR_NOMEM, and
 * what the backend returns. */
enum tr_status dlrm_new(const struct dlrm_cfg *cfg, const struct kern_backend *be, struct dlrm **out) TR_WUR;
void dlrm_free(struct dlrm **m);

/* Initialises every parameter from cfg.seed on the backend: embeddings
 * U(+-sqrt(1/rows)), dense kernels truncated-normal Glorot, biases N(0, 1/units);
 * cross layers' V and U truncated-normal Glorot (each its own stream), their
 * biases 0 (as TorchRec's LowRankCrossNet);
 * Adagrad accumulators to adagrad_init. The values depend only on (seed, tensor,
 * element), never on sharding. Errors from the backend. */
enum tr_status dlrm_init_params(struct dlrm *m) TR_WUR;

/* Bytes dlrm_new allocates for cfg on be, without allocating (the memory plan).
 * TR_ERR_NOMEM (logged) when an --embedding_cache SIZE is too small for the
 * tables the tier would hold (tier_plan_slots). */
enum tr_status dlrm_plan_bytes(const struct dlrm_cfg *cfg, const struct kern_backend *be,
                               struct dlrm_bytes *b) TR_WUR;
void dlrm_get_bytes(const struct dlrm *m, struct dlrm_bytes *b);

/* The shape of a model, for reports, tests and checkpoints. */
struct dlrm_info {
    int ntables, emb_dim, num_features;
    int num_ld;            /* padded numerical width */
    int n;                 /* interaction vectors: ntables + has_bottom */
    int has_bottom;
    int dp_bottom;         /* this process runs the bottom MLP on its own slice */
    int mp_bottom;         /* this process runs the bottom MLP for the whole global batch */
    int nbottom, ntop;
    int64_t top_in_w;      /* interaction output width */
    int64_t nparams;       /* dense parameters */
    int64_t top_param0;    /* first parameter after the bottom MLP (cross layers, then the
                              top MLP): where the data-parallel parameters start */
    enum dlrm_interaction interaction;
    int ncross, cross_rank;  /* dcnv2 (0 with dot) */
    int64_t max_batch, max_global;
    enum kern_optim optim;
};
struct dlrm_layer_info {
    char name[48];         /* "bottom_mlp_layer_0" */
    int in, out, relu;
    int64_t w_off, b_off;  /* of its kernel (in, out) and bias (out) in DLRM_PARAMS */
};
struct dlrm_table_info {
    int id;                /* index in the config's table list */
    int pos;               /* row of the interaction input X holding this table */
    int64_t rows;
    int64_t col0, width;   /* columns held: [col0, col0 + width); width 0: none */
    int hot;               /* its hotness (0: one-hot) */
    int mean;              /* its bags are averaged (else summed) */
};
void dlrm_get_info(const struct dlrm *m, struct dlrm_info *out);
/* Layer l of the bottom (top = 0) or top (top = 1) MLP. */
void dlrm_get_layer(const struct dlrm *m, int top, int l, struct dlrm_layer_info *out);
void dlrm_get_table(const struct dlrm *m, int t, struct dlrm_table_info *out);
/* Cross layer l (dcnv2) of the interaction: x_{l+1} = x0 * (x_l V U + b) + x_l. */
struct dlrm_cross_info {
    char name[48];         /* "cross_layer_0" */
    int width, rank;       /* n*D and r */
    int64_t v_off, u_off, b_off; /* of V (width, rank), U (rank, width), b (width) in DLRM_PARAMS */
};
void dlrm_get_cross(const struct dlrm *m, int l, struct dlrm_cross_info *out);

/* The tensors of a model, in the backend's memory. */
enum dlrm_tensor {
    DLRM_PARAMS = 0,   /* (nparams) flat dense parameters */
    DLRM_GRADS,        /* (nparams) their gradients from the last backward */
    DLRM_PARAMS_STATE, /* (nparams) Adagrad accumulators; absent with SGD */
    DLRM_TABLE,        /* table `index`: (rows, width) the columns held here */
    DLRM_TABLE_STATE,  /* table `index`: its Adagrad accumulators, (rows, width); with
                          row-wise Adagrad (rows), one per row of the whole table */
    DLRM_X,            /* (max_batch, n, D) interaction input of the last forward */
    DLRM_DX,           /* (max_batch, n, D) its gradient after a backward */
    DLRM_TOP_IN,       /* (max_batch, top_in_w) interaction output (dcnv2: x_L) */
    DLRM_DTOP_IN,      /* (max_batch, top_in_w) its gradient */
    DLRM_LOGITS,       /* (max_batch) logits of the last forward */
    DLRM_TENSOR_COUNT_
};

/* Elements of tensor k (index: the table, for the table tensors); 0 when this
 * model does not hold it. */
int64_t dlrm_tensor_numel(const struct dlrm *m, enum dlrm_tensor k, int index);

/* Copies elements [off, off + n) of tensor k to or from host memory, through the
 * backend (a table held in a tier: through the tier, tier_read and tier_write:
 * as training left it, its changed cache rows stored first). TR_ERR_ARG (logged) when the range is outside the tensor or it is
 * absent; errors of the backend's copy. */
enum tr_status dlrm_tensor_read(const struct dlrm *m, enum dlrm_tensor k, int index, int64_t off, int64_t n,
                                float *host) TR_WUR;
enum tr_status dlrm_tensor_write(struct dlrm *m, enum dlrm_tensor k, int index, int64_t off, int64_t n,
                                 const float *host) TR_WUR;

/* The model's tensor layout, for the code that walks it from outside (the
 * checkpoints, the numeric guards, the weight dump, the benchmark): one view per
 * parameter tensor, optimizer state and embedding slice this model holds. */
enum dlrm_role {
    DLRM_ROLE_PARAM = 0, /* a dense parameter tensor (a layer's kernel or bias) */
    DLRM_ROLE_STATE,     /* the optimizer state of a dense tensor (Adagrad) */
    DLRM_ROLE_EMB,       /* the slice of an embedding table held here */
    DLRM_ROLE_EMB_STATE, /* its optimizer state: per element, or (row-wise Adagrad) one
                            value per row, replicated on every worker holding a slice */
};
enum dlrm_group { DLRM_GROUP_BOTTOM = 0, DLRM_GROUP_CROSS, DLRM_GROUP_TOP, DLRM_GROUP_EMB };

struct dlrm_tensor_view {
    const char *name;      /* as checkpoints name it (ckpt_store/manifest.h): "dense/
                              bottom_mlp_layer_0/kernel", "dense/cross_layer_0/v_kernel",
                              ".../adagrad", "emb/3", "emb/3/adagrad"; valid during the call */
    const char *layer;     /* "bottom_mlp_layer_0", "cross_layer_0"; "" for a table */
    const char *part;      /* "kernel", "bias", "v_kernel", "u_kernel"; "" for a table */
    enum dlrm_role role;
    enum dlrm_group group;
    int layer_index;       /* the layer's index in its group; the table's for DLRM_GROUP_EMB */
    enum kern_dtype dtype; /* of its elements (KERN_F32) */
    int ndim;              /* 1 or 2 */
    int64_t rows, cols;    /* the whole tensor's shape (cols 1 when ndim is 1) */
    int64_t c0, c1;        /* the columns held here: [c0, c1) of every row */
    int64_t table_col0;    /* tables: the first column of the slice this worker holds
                              (row-wise state: 0 < table_col0 on a replica), else 0 */
    enum dlrm_tensor k;    /* where: elements [off, off + rows * (c1 - c0)) of tensor (k, */
    int index;             /* index), row-major (rows, c1 - c0) */
    int64_t off;
    void *buf;             /* the backend's memory of its first element: pass it to the
                              backend only; valid while the model lives (a table in a
                              tier: its cache, not the tensor) */
    int tiered;            /* a table slice (or its state) held in a tier (tier.h): reading it
                              reads its store, maybe a disk; not something to copy whole
                              into host memory (checkpoints stream it) */
};

/* Calls fn(ctx, view) for each tensor of the model, in a fixed order: the dense
 * parameters in DLRM_PARAMS order (bottom MLP, cross layers, top MLP; each kernel
 * then bias, each followed by its state with Adagrad), then each table held (in
 * config order) followed by its state. Tables not held here are left out. Stops
 * at and returns the first status other than TR_OK that fn returns. Not
 * thread-safe with a step that runs. */
typedef enum tr_status (*dlrm_tensor_fn)(void *ctx, const struct dlrm_tensor_view *v);
enum tr_status dlrm_tensors(const struct dlrm *m, dlrm_tensor_fn fn, void *ctx) TR_WUR;

/* *out (host) = sum of squares, in double, of elements [off, off + n) of tensor k
 * through the backend's sumsq op: finite exactly when every element is (the
 * numeric guards). A table held in a tier is summed over the rows in its cache
 * whatever the range: the rows training changes pass through it, and its store
 * holds rows that were checked there or never changed. TR_ERR_ARG (logged) when the range is outside the tensor or
 * it is absent; errors of the backend. */
enum tr_status dlrm_tensor_sumsq(const struct dlrm *m, enum dlrm_tensor k, int index, int64_t off, int64_t n,
                                 double *out) TR_WUR;

/* Seconds spent per phase since the last reset (the backend synchronised before
 * each reading of the clock). */
double dlrm_phase_seconds(const struct dlrm *m, enum dlrm_phase p);
void dlrm_reset_timers(struct dlrm *m);

#ifdef __cplusplus
}
#endif
#endif
