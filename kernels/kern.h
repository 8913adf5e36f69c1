/* kern.h: the compute backend interface. A backend is a vtable of ops, each taking
 * one args struct (new fields never break a signature), opened by name from a
 * registry with per-instance state: `cpu` always exists; `cuda` is compiled in when
 * nvcc is found (TR_HAVE_CUDA), as a plugin loaded where an NVIDIA device exists.
 *
 * Memory and ordering belong to the backend. Pointers given to ops are in the
 * backend's memory (host memory for the CPU, device memory for CUDA) and every
 * byte between host and backend memory moves through `copy`. Ops and copies are
 * issued on the backend's queue (a CUDA stream; none on the CPU, whose ops have
 * finished when they return) and run in issue order; the host sees their results
 * only after `synchronize` (a copy to the host synchronizes by itself). Whoever
 * reads a clock to time queued work synchronizes first.
 *
 * Conventions for every op: tensors are row-major; `ld*` is the distance in
 * elements between consecutive rows; 64-bit sizes and offsets everywhere, so tables
 * beyond 2^31 elements work. An instance is not thread-safe (it runs one op at a
 * time and parallelises inside it); two instances are independent. */
#ifndef TR_KERN_H
#define TR_KERN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kern_op {
    KERN_OP_GEMM = 0,
    KERN_OP_BIAS_ACT_FWD,
    KERN_OP_BIAS_ACT_BWD,
    KERN_OP_EMB_FWD,
    KERN_OP_EMB_UPDATE,
    KERN_OP_INTERACT_FWD,
    KERN_OP_INTERACT_BWD,
    KERN_OP_BCE,
    KERN_OP_DENSE_UPDATE,
    KERN_OP_FILL,
    KERN_OP_COPY_ROWS,
    KERN_OP_SUMSQ,
    KERN_OP_EMB_ROWSQ,
    KERN_OP_CROSS_FWD,
    KERN_OP_CROSS_BWD,
    KERN_OP_MARK_ROWS,
    KERN_OP_METRICS,
    KERN_OP_MOVE_ROWS,
    KERN_OP_COUNT_ /* not an op; keep last */
};

/* Name of an op ("gemm", "emb_fwd", ...); never NULL. */
const char *kern_op_name(enum kern_op op);

enum kern_dtype {
    KERN_F32 = 0, KERN_I32 = 1, KERN_I64 = 2, KERN_F16 = 3, KERN_I8 = 4, KERN_I16 = 5, KERN_U8 = 6, KERN_F64 = 7,
    KERN_BF16 = 8,
};
/* Direction of a copy between host memory and the backend's memory. */
enum kern_copy_dir { KERN_H2D = 0, KERN_D2H = 1, KERN_D2D = 2 };
enum kern_act { KERN_ACT_NONE = 0, KERN_ACT_RELU = 1 };
/* What the GEMMs (and the interaction's products) multiply in; tensors stay fp32
 * in memory and sums are fp32 in every mode (master weights, embeddings and
 * optimizer state are always fp32):
 *   FP32  exact fp32 (TF32 off), so parity with the CPU holds to 1e-5
 *   TF32  fp32 inputs rounded to TF32 on tensor cores (--allow_tf32)
 *   BF16  inputs rounded to bf16 on tensor cores (--amp, --amp bf16)
 *   FP16  inputs rounded to fp16 on tensor cores (--amp fp16, with a loss scale)
 * The CPU backend has FP32 only (TF32 is accepted and means FP32 there). */
enum kern_precision { KERN_PREC_FP32 = 0, KERN_PREC_TF32 = 1, KERN_PREC_BF16 = 2, KERN_PREC_FP16 = 3 };

/* Name of a precision ("fp32", "tf32", "bf16", "fp16"); inline, so the CUDA files
 * link without the CPU half of the backend library. */
static inline const char *kern_precision_name(enum kern_precision p)
{
    switch (p) {
    case KERN_PREC_FP32: return "fp32";
    case KERN_PREC_TF32: return "tf32";
    case KERN_PREC_BF16: return "bf16";
    case KERN_PREC_FP16: return "fp16";
    }
    return "?";
}
enum kern_combiner { KERN_COMB_SUM = 0, KERN_COMB_MEAN = 1 };
/* ROWWISE_ADAGRAD: Adagrad with one accumulator per embedding row (FBGEMM's
 * EXACT_ROWWISE_ADAGRAD, see emb_update); dense parameters take element-wise
 * Adagrad under it (dense_update treats it as ADAGRAD). */
enum kern_optim { KERN_OPT_SGD = 0, KERN_OPT_ADAGRAD = 1, KERN_OPT_ROWWISE_ADAGRAD = 2 };

/* Size in bytes of one element of `t`. */
size_t kern_dtype_size(enum kern_dtype t);

/* C (m, n) = act(alpha * op(A) op(B) + beta * C + bias), op = transpose when
 * trans_* is set. A is (m, k) or, transposed, (k, m); B is (k, n) or (n, k).
 * The epilogue (bias (n) added to every row, then act) is optional: without a bias
 * and with KERN_ACT_NONE the op is a plain GEMM. The CPU runs it as gemm followed by
 * bias_act_fwd; CUDA fuses it into the cuBLASLt call where cuBLASLt has a kernel for
 * it, whose ReLU is max(x, 0): a NaN before it becomes 0 there, where km_relu keeps
 * it (the numeric guards still see NaN weights and gradients, which no ReLU touches).
 * The precision of the multiply is the instance's (kern_backend_opts.precision). */
struct kern_bias_act_bwd_args;

struct kern_gemm_args {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *bias; /* (n) or NULL */
    enum kern_act act;
    /* A backward epilogue, or NULL: after the product, c goes through this
     * bias_act_bwd in place (then->dy == c, lddy == ldc, rows m, cols n; bias and
     * act above NULL and NONE), as if the op had been called next. The CPU runs it
     * on row blocks of c as they are made, while they are in cache. */
    const struct kern_bias_act_bwd_args *then;
    /* With act RELU, where the epilogue records which outputs passed (as
     * kern_bias_act_fwd_args.mask: m rows of n bits), or NULL. Only on a backend
     * with relu_mask set. */
    uint8_t *mask;
};

/* In place: y = act(y + bias) for y (rows, cols). bias (cols) may be NULL. */
struct kern_bias_act_fwd_args {
    int64_t rows, cols;
    float *y;
    int64_t ldy;
    const float *bias;
    enum kern_act act;
    /* With act RELU, or NULL: the output's km_relu_mask bits, bit c % 8 of byte
     * r * kern_relu_mask_ld(cols) + c / 8, so that the backward can do without y
     * (and y's memory take the input gradient). */
    uint8_t *mask;
};

/* Bytes of a row of cols outputs' ReLU mask. */
static inline int64_t kern_relu_mask_ld(int64_t cols)
{
    return (cols + 7) / 8;
}

/* Backward of bias_act_fwd: dy = act'(y) * dy in place, and dbias (cols) =
 * column sums of the new dy (overwritten, or added to when accumulate is set;
 * dbias may be NULL). The sum order is fixed, independent of the thread count. */
struct kern_bias_act_bwd_args {
    int64_t rows, cols;
    const float *y; /* (rows, cols): the forward output */
    int64_t ldy;
    float *dy;      /* (rows, cols) */
    int64_t lddy;
    float *dbias;
    int accumulate;
    enum kern_act act;
    /* The forward's mask bits (as kern_bias_act_fwd_args.mask) or NULL: with act
     * RELU they are read instead of y (y may then be NULL), giving the same bits. */
    const uint8_t *mask;
};

/* Gathers columns [c0, c1) of table rows into out (nbags, c1-c0):
 * one-hot when offsets is NULL (bag b = idx[b]), else bag b = idx[offsets[b] ..
 * offsets[b+1]) combined by sum or mean (an empty bag gives zeros).
 * Returns TR_ERR_RANGE and sets *bad_pos (if non-NULL) to the first index
 * position holding a value outside [0, rows), or, when the offsets are not
 * monotone or negative, to the first bag b whose offsets[b] > offsets[b+1]. */
struct kern_emb_fwd_args {
    const float *table; /* (rows, ld) */
    int64_t rows, ld, c0, c1;
    const void *idx;    /* (nidx) of idx_dtype, KERN_I32 or KERN_I64 */
    enum kern_dtype idx_dtype;
    const int64_t *offsets; /* (nbags + 1) or NULL */
    int64_t nbags;
    enum kern_combiner comb;
    float *out; /* (nbags, out_ld) */
    int64_t out_ld;
    int64_t *bad_pos; /* host memory (the op has finished when it reports a bad id), or NULL */
};

/* Optimizer hyper-parameters of one step. */
struct kern_optim_hp {
    enum kern_optim kind;
    float lr;
    float eps; /* Adagrad (both kinds) */
};

/* Backward of emb_fwd fused with a sparse optimizer step on the touched rows
 * only: for each distinct row r, g = grad_scale * sum over its occurrences (in
 * position order; CUDA cuts a row of over 256 occurrences into chunks of 256 and
 * adds the chunks' sums in order) of bag_scale * grad[bag], then SGD or Adagrad on columns
 * [c0, c1) of r (accum has the same layout as table, for Adagrad). Duplicate ids
 * are summed before the step; no dense gradient is formed. The result is bitwise
 * independent of the thread count. The workspace of a call is a[0].ws, holding
 * kern_emb_update_ws_bytes(be, max nidx, max width, n) bytes (the `args` of the
 * backend's ws answer; the ws fields of the other tables are ignored). Errors: TR_ERR_RANGE as in emb_fwd (checked for
 * every table first: on error no table is updated), TR_ERR_ARG if ws is too small
 * or a field below does not fit the optimizer.
 *
 * Row-wise Adagrad (hp.kind KERN_OPT_ROWWISE_ADAGRAD): accum is (rows), one float
 * per row of the whole table (accum_ld is ignored), and for each distinct row r
 *   accum[r] += S_r / dim,   S_r = sum over all dim columns of g^2 (in double),
 *   w[r][c] -= lr * g[c] / (sqrt(accum[r]) + eps)  for c in [c0, c1).
 * When the columns [c0, c1) are the whole row (dim == c1 - c0), row_sumsq is NULL
 * and the update computes S_r itself. When they are a slice of it (column-wise
 * sharding: each worker holds a slice of every row and sees every id), S_r needs
 * the other slices too, and the step has two phases around a sum over workers:
 *   1. emb_rowsq with the update's args writes this slice's part of S_r into
 *      row_sumsq[k] for the k-th distinct row in ascending row order (k <
 *      ndistinct), and 0 into row_sumsq[ndistinct .. nidx);
 *   2. the caller sums row_sumsq element-wise over the workers (an all-reduce:
 *      every worker sees the same ids, so entry k names the same row everywhere);
 *   3. emb_update with the same args reads the summed row_sumsq (and dim: the
 *      full width) and applies the step; every worker applies the same accumulator
 *      update to its replica of accum.
 * A slice of width 0 (a worker holding no columns) is allowed in phase 1 and
 * writes zeros, so such a worker can take part in the sum. Phase 1 computes the
 * same per-row sums, in the same column order, as the update does alone, so the
 * split form differs from the whole-row form only by the rounding of the added
 * partial sums. */
struct kern_emb_update_args {
    float *table; /* (rows, ld) */
    int64_t rows, ld, c0, c1;
    float *accum; /* (rows, accum_ld) for Adagrad, (rows) for row-wise Adagrad, NULL for SGD */
    int64_t accum_ld;
    const void *idx;
    enum kern_dtype idx_dtype;
    const int64_t *offsets;
    int64_t nbags;
    enum kern_combiner comb;
    const float *grad; /* (nbags, grad_ld) gradient of the loss w.r.t. out */
    int64_t grad_ld;
    float grad_scale;
    struct kern_optim_hp hp;
    void *ws;
    size_t ws_bytes;
    int64_t *bad_pos; /* host memory, or NULL */
    /* row-wise Adagrad only (ignored otherwise): */
    int64_t dim;        /* full row width the accumulator averages over; 0: c1 - c0 */
    double *row_sumsq;  /* (nidx) written by emb_rowsq, read by emb_update; NULL in
                           emb_update: computed from [c0, c1), which must be the whole row */
};

/* Dot interaction of n vectors of width d per sample (the seed's layout):
 * out (batch, out_w) = [x[:,0,:] if has_bottom | x_i . x_j for i > j in
 * row-major lower-triangle order | zeros up to out_w]. out_w must be at least the
 * used width (d if has_bottom, plus n(n-1)/2); the model passes km_interact_width.
 * Errors: TR_ERR_ARG (out_w too small, n or d < 1), TR_ERR_NOMEM (scratch). */
struct kern_interact_fwd_args {
    int64_t batch;
    int n, d;
    int has_bottom;
    const float *x; /* (batch, n, d) */
    float *out;     /* (batch, out_w) */
    int64_t out_w;
};

/* Backward: dx (batch, n, d) = sum_j S_ij x_j with S the symmetric matrix of pair
 * gradients (zero diagonal), plus dout[:, 0:d] added into dx[:,0,:] when
 * has_bottom. dx is overwritten. When nonfinite is not NULL, *nonfinite is set to 1
 * if any element of dx is NaN or inf, to 0 otherwise (the numeric guard of dx,
 * without a pass of its own). Errors as for the forward. */
struct kern_interact_bwd_args {
    int64_t batch;
    int n, d;
    int has_bottom;
    const float *x;      /* (batch, n, d) */
    const float *dout;   /* (batch, out_w) */
    int64_t out_w;
    float *dx;           /* (batch, n, d) */
    int32_t *nonfinite;  /* (1) backend memory, or NULL */
};

/* Binary cross-entropy with logits over n samples: *loss_sum = sum of per-sample
 * losses (accumulated in double, fixed order); dlogits (n) = grad_scale *
 * (sigmoid(x) - y) when non-NULL. */
struct kern_bce_args {
    int64_t n;
    const float *logits;
    const float *labels;
    double *loss_sum; /* host pointer */
    float *dlogits;
    float grad_scale;
};

/* Dense optimizer step over n parameters: p -= step(grad_scale * g). Row-wise
 * Adagrad steps element-wise here (as TorchRec does for dense parameters). */
struct kern_dense_update_args {
    int64_t n;
    float *param;
    const float *grad;
    float *accum; /* Adagrad state (n) (both Adagrad kinds) or NULL */
    float grad_scale;
    struct kern_optim_hp hp;
};

/* Fills dst (rows, cols; row stride ld) with a constant or with the seeded
 * initialisers of kmath.h. Element (r, c) has the number e = r * elem_ld + elem0 + c
 * (its index in the whole tensor, so a slice of a tensor gets the values the whole
 * tensor would have there):
 *   KERN_FILL_CONST    value
 *   KERN_FILL_UNIFORM  km_init_embedding(seed, stream, e, a)       a = bound
 *   KERN_FILL_GLOROT   km_init_glorot(seed, stream, e, a, b)       a, b = fan in, out
 *   KERN_FILL_NORMAL   km_init_bias(seed, stream, e, a)            a = units */
enum kern_fill_kind { KERN_FILL_CONST = 0, KERN_FILL_UNIFORM = 1, KERN_FILL_GLOROT = 2, KERN_FILL_NORMAL = 3 };
struct kern_fill_args {
    enum kern_fill_kind kind;
    float *dst; /* (rows, ld) */
    int64_t rows, cols, ld;
    float value;
    uint64_t seed, stream;
    int64_t elem_ld, elem0;
    float a, b;
};

/* Copies a block of rows within backend memory: dst (rows, cols; stride ldd) =
 * src (rows, cols; stride lds), strides at least cols (TR_ERR_ARG otherwise). The
 * blocks of one call must not write overlapping memory; they run in any order. */
struct kern_copy_rows_args {
    float *dst;
    int64_t ldd;
    const float *src;
    int64_t lds;
    int64_t rows, cols;
};

/* Moves rows by index within backend memory (a tier's cache fills and write-backs):
 * for i in [0, n), row (dst_idx ? dst_idx[i] : i) of dst (row stride ldd) gets the
 * cols floats of row (src_idx ? src_idx[i] : i) of src (row stride lds). The index
 * arrays (int64, backend memory) may repeat a source row but never a destination
 * row, and no destination row may overlap a source row of the same call; the
 * blocks of one call run in any order and must not write each other's rows. A
 * bitwise copy. TR_ERR_ARG for negative sizes, strides below cols or a missing
 * pointer (nothing written then); indices are not checked (the caller's own). */
struct kern_move_rows_args {
    float *dst;
    int64_t ldd;
    const int64_t *dst_idx; /* (n) or NULL */
    const float *src;
    int64_t lds;
    const int64_t *src_idx; /* (n) or NULL */
    int64_t n, cols;
};

/* Sum of squares of a block x (rows, cols; row stride ld >= cols), accumulated in
 * double (km_sumsq_add) in a fixed order that does not depend on the thread count:
 * *out (host memory) is finite exactly when every element is, which is what the
 * numeric guards ask (a NaN or inf anywhere gives NaN or inf). TR_ERR_ARG for
 * negative sizes or ld < cols (no output written then). */
struct kern_sumsq_args {
    const float *x; /* (rows, ld) */
    int64_t rows, cols, ld;
    double *out;    /* host */
};

/* Dirty-row tracking for incremental checkpoints: for each id of a table's batch
 * that lies in [0, rows), dirty[km_row_block(id, block_rows)] = 1 (rows are
 * grouped in blocks of block_rows, the rows of one checkpoint chunk). Ids outside
 * the table are skipped (the update refuses them). dirty (backend memory, one
 * byte per block) is only ever set, never cleared, so the blocks of one call may
 * share a bitmap and run in any order. TR_ERR_ARG for negative sizes or
 * block_rows < 1 (nothing written then). */
struct kern_mark_rows_args {
    const void *idx;           /* (n) ids */
    enum kern_dtype idx_dtype; /* KERN_I32 or KERN_I64 */
    int64_t n;
    int64_t rows, block_rows;
    uint8_t *dirty;            /* (ceil(rows / block_rows)) */
};

/* Evaluation metrics of a whole test set held in backend memory, for the host:
 *   *nonfinite, *first_nonfinite  how many scores are NaN or inf, and the position
 *                                 of the first (-1 when none);
 *   *auc      exact ROC AUC (Mann-Whitney, a tie between a positive and a negative
 *             worth 1/2: kmath.h's integer count, so every backend gives the same
 *             bits); NaN when a class is empty, n is 0 or a score is not finite;
 *   *logloss  mean km_bce_logit of the scores (logits), summed in double in an order
 *             fixed for the backend and the device; NaN when n is 0 or a score is
 *             not finite.
 * Returns when the outputs (host memory) are written. Errors: TR_ERR_ARG for a
 * label other than 0 or 1 (logged with its position) or bad arguments,
 * TR_ERR_NOMEM (working memory, allocated and freed inside the call: the `call`
 * bytes of the backend's ws answer; about 40 bytes a sample on CUDA, 16 on the CPU). */
struct kern_metrics_args {
    int64_t n;
    const float *scores; /* (n) logits */
    const float *labels; /* (n) 0 or 1 */
    int64_t *nonfinite;       /* host */
    int64_t *first_nonfinite; /* host */
    double *auc;              /* host */
    double *logloss;          /* host */
};

/* The element-wise "cross combine" of a low-rank cross layer (DCNv2, TorchRec's
 * LowRankCrossNet): x_{l+1} = x0 * (U (V x_l) + b) + x_l. The model runs the two
 * GEMMs and the bias with gemm and bias_act_fwd; this op finishes the layer:
 * y (rows, cols) = km_cross_fwd(x0, h, xl) per element, with h = U (V x_l) + b.
 * y may be the same memory as xl or h (same ld); otherwise blocks must not overlap.
 * Element-wise, so bitwise independent of the thread count. TR_ERR_ARG for
 * negative sizes or an ld below cols (nothing written then). */
struct kern_cross_fwd_args {
    int64_t rows, cols;
    const float *x0; /* (rows, ldx0) the cross stack's input */
    int64_t ldx0;
    const float *h;  /* (rows, ldh) U (V x_l) + b */
    int64_t ldh;
    const float *xl; /* (rows, ldxl) this layer's input */
    int64_t ldxl;
    float *y;        /* (rows, ldy) x_{l+1} */
    int64_t ldy;
};

/* Backward of cross_fwd, given dy = dLoss/dx_{l+1} (rows, cols), per element:
 *   dh  = km_cross_grad_h(dy, x0)                      (overwritten)
 *   dx0 = km_cross_grad_x0(accumulate ? dx0 : 0, dy, h, residual)
 * residual is set for the first layer, where x_l is x0 and the identity path's dy
 * belongs to dx0 too; the gradient through x_l of other layers (dy + dh V^T ...)
 * is the model's GEMMs' business. dh may be the same memory as dy (same ld); dx0
 * must not overlap the others. Bitwise independent of the thread count.
 * TR_ERR_ARG for negative sizes or an ld below cols (nothing written then). */
struct kern_cross_bwd_args {
    int64_t rows, cols;
    const float *x0; /* (rows, ldx0) */
    int64_t ldx0;
    const float *h;  /* (rows, ldh) the forward's U (V x_l) + b */
    int64_t ldh;
    const float *dy; /* (rows, lddy) */
    int64_t lddy;
    float *dh;       /* (rows, lddh) */
    int64_t lddh;
    float *dx0;      /* (rows, lddx0) */
    int64_t lddx0;
    int accumulate;
    int residual;
};

/* The sizes of one op call that its working memory depends on, for the backend's
 * ws answer. Each op reads the fields listed for it (the others are 0); for an op
 * that takes n tables or blocks at once, count is n and the sizes are those of the
 * largest (sumsq: m counts the elements of all its blocks together). A shape at
 * least as large in every field bounds the working memory of a smaller call, so a
 * caller may ask once with the largest sizes it will use.
 *   GEMM                                m, n, k of the call
 *   BIAS_ACT_FWD, BIAS_ACT_BWD,         m rows, n cols (bias_act_bwd: as if dbias is
 *   CROSS_FWD, CROSS_BWD, FILL          asked for)
 *   EMB_FWD, EMB_UPDATE, EMB_ROWSQ,     count tables, m ids of one table (nidx), n its
 *   MARK_ROWS                           columns (c1 - c0)
 *   INTERACT_FWD, INTERACT_BWD          m batch, n vectors per sample, k their width d
 *   BCE, DENSE_UPDATE, METRICS          m samples (dense_update: parameters)
 *   COPY_ROWS, MOVE_ROWS                count blocks, m rows, n cols
 *   SUMSQ                               count blocks, m elements of all of them */
struct kern_shape {
    int64_t m, n, k;
    int count;
};

/* The working memory of an op call, in bytes, by who holds it. */
struct kern_ws {
    size_t args;    /* backend memory the caller hands the op in its args: emb_update's
                       and emb_rowsq's a[0].ws */
    size_t scratch; /* backend memory the op borrows from the instance's scratch, one
                       buffer that every op shares (reserve sizes it) */
    size_t staging; /* host memory the op borrows from the instance's staging buffer, for
                       results the host reads (CUDA: page-locked; reserve sizes it) */
    size_t call;    /* memory the op allocates for the call and frees before it returns
                       (CUDA's metrics on the device; the CPU's per-thread buffers) */
};

/* acc = the field-wise maximum of acc and w: what the ops of a run need at most,
 * for reserve. */
static inline void kern_ws_max(struct kern_ws *acc, const struct kern_ws *w)
{
    acc->args = acc->args > w->args ? acc->args : w->args;
    acc->scratch = acc->scratch > w->scratch ? acc->scratch : w->scratch;
    acc->staging = acc->staging > w->staging ? acc->staging : w->staging;
    acc->call = acc->call > w->call ? acc->call : w->call;
}

struct kern_backend_i {
    const char *name;
    /* 1 when the backend's memory is host memory (the CPU: tr_big_alloc, which the
     * process's allocator counts), 0 when it is its own (GPU memory on CUDA). */
    int host_memory;
    /* 1 when gemm and bias_act_fwd record ReLU masks and bias_act_bwd reads them
     * (the .mask fields); 0: they must be NULL. */
    int relu_mask;
    /* True if the op is implemented for floating tensors of type dt. */
    int (*supports)(void *ctx, enum kern_op op, enum kern_dtype dt);
    /* n bytes of the backend's memory, zero-filled. TR_ERR_NOMEM. */
    enum tr_status (*mem_alloc)(void *ctx, size_t n, void **p);
    /* Releases what mem_alloc returned (n as allocated); NULL is ignored. */
    void (*mem_release)(void *ctx, void *p, size_t n);
    /* n bytes of host memory that copy() moves to and from the backend's memory
     * fastest (page-locked on CUDA), for staging; not zero-filled. TR_ERR_NOMEM. */
    enum tr_status (*host_alloc)(void *ctx, size_t n, void **p);
    /* Releases what host_alloc returned (n as allocated); NULL is ignored. */
    void (*host_release)(void *ctx, void *p, size_t n);
    /* Copies n bytes, queued after earlier work. When it returns, an H2D source may
     * be reused and a D2H destination holds the data. */
    enum tr_status (*copy)(void *ctx, void *dst, const void *src, size_t n, enum kern_copy_dir dir);
    /* Fills *out with the working memory of op on a call of shape s (kern_shape
     * names the fields each op reads); all zero for an op that needs none, or an
     * unknown one. Allocates nothing. A sizing-only instance answers as an open one
     * would (where an open one asks the device, CUB's temporary storage, it answers
     * a bound instead). The planner and the model size memory by it; they never
     * know a backend's own sizes. */
    void (*ws)(void *ctx, enum kern_op op, const struct kern_shape *s, struct kern_ws *out);
    /* Takes, now, the scratch and staging buffers that ops of working memory up to
     * `most` need (the field-wise maximum of their ws answers, kern_ws_max), so that
     * no later op allocates: on CUDA an allocation or a free waits for the whole
     * device, collectives on other streams included, and a dead peer's collective
     * never ends. Called once after the model is built, before the first step; a
     * later call only grows them. An op that needs more still runs: the buffer grows
     * and the backend warns once. Errors: TR_ERR_NOMEM (logged with the bytes),
     * TR_ERR_CUDA. Nothing to do on the CPU (its ops allocate per call) and on a
     * sizing-only instance. */
    enum tr_status (*reserve)(void *ctx, const struct kern_ws *most);
    /* Backend memory the instance holds for itself, outside mem_alloc, once
     * reserve(most) ran: its fixed buffers (CUDA: the cuBLASLt workspace) and the
     * scratch; 0 on the CPU. A sizing-only instance answers too (plans). */
    size_t (*held_bytes)(void *ctx, const struct kern_ws *most);
    enum tr_status (*gemm)(void *ctx, const struct kern_gemm_args *a);
    enum tr_status (*bias_act_fwd)(void *ctx, const struct kern_bias_act_fwd_args *a);
    enum tr_status (*bias_act_bwd)(void *ctx, const struct kern_bias_act_bwd_args *a);
    /* The embedding ops take n tables at once (a[0..n)), like a table-batched
     * embedding: the backend spreads small tables over threads (or one launch) and
     * parallelises inside large ones. Results do not depend on that choice. */
    enum tr_status (*emb_fwd)(void *ctx, const struct kern_emb_fwd_args *a, int n);
    enum tr_status (*emb_update)(void *ctx, const struct kern_emb_update_args *a, int n);
    /* Phase 1 of a row-wise Adagrad step on column slices (see emb_update): writes
     * a[t].row_sumsq for every table; reads the ids, offsets, grad, grad_scale, c0,
     * c1 and ws (table and accum are not touched, and may be NULL when c0 == c1).
     * Errors as for emb_update (no output written on TR_ERR_RANGE). */
    enum tr_status (*emb_rowsq)(void *ctx, const struct kern_emb_update_args *a, int n);
    enum tr_status (*interact_fwd)(void *ctx, const struct kern_interact_fwd_args *a);
    enum tr_status (*interact_bwd)(void *ctx, const struct kern_interact_bwd_args *a);
    enum tr_status (*bce)(void *ctx, const struct kern_bce_args *a);
    enum tr_status (*dense_update)(void *ctx, const struct kern_dense_update_args *a);
    enum tr_status (*fill)(void *ctx, const struct kern_fill_args *a);
    enum tr_status (*copy_rows)(void *ctx, const struct kern_copy_rows_args *a, int n);
    /* n blocks, each with its own *out; returns when every *out is written. */
    enum tr_status (*sumsq)(void *ctx, const struct kern_sumsq_args *a, int n);
    enum tr_status (*cross_fwd)(void *ctx, const struct kern_cross_fwd_args *a);
    enum tr_status (*cross_bwd)(void *ctx, const struct kern_cross_bwd_args *a);
    enum tr_status (*mark_rows)(void *ctx, const struct kern_mark_rows_args *a, int n);
    enum tr_status (*metrics)(void *ctx, const struct kern_metrics_args *a);
    enum tr_status (*move_rows)(void *ctx, const struct kern_move_rows_args *a, int n);
    /* The native handle of the queue (a cudaStream_t), NULL on the CPU. Collectives
     * (comm.h) order themselves after work queued on it. */
    void *(*queue)(void *ctx);
    /* The device this instance computes on, by the identity nvidia-smi shows
     * ("GPU-<uuid>"), which CUDA_VISIBLE_DEVICES and the scheduler's GPU binding
     * do not change; NULL on the CPU. How workers find out they share a GPU. */
    const char *(*device_id)(void *ctx);
    /* Waits until everything queued so far has finished. */
    enum tr_status (*synchronize)(void *ctx);
    /* The most backend memory this instance has held at once, its own buffers
     * included (GPU memory on CUDA); -1 when its memory is host memory that the
     * process allocator already counts (the CPU). */
    int64_t (*mem_peak)(void *ctx);
    /* The backend memory this instance holds now, as mem_peak counts it; -1 on
     * the CPU. Read by the instance's own thread (the system metrics). */
    int64_t (*mem_now)(void *ctx);
    /* Frees the instance. */
    void (*destroy)(void *ctx);
};

/* An open backend instance: its vtable and its state. */
struct kern_backend {
    const struct kern_backend_i *i;
    void *ctx;
};

/* How to open a backend (kern_backend_open with NULL: all CPUs, device by local
 * rank 0, errors logged). */
struct kern_backend_opts {
    int threads;     /* CPU: threads inside ops (0: every CPU this process may run on) */
    int device;      /* CUDA: device ordinal; -1: local_rank mod the device count */
    int local_rank;  /* CUDA with device -1: this process's rank on its node */
    int quiet;       /* do not log why a backend cannot open (the status says it) */
    int precision;   /* enum kern_precision of the GEMMs; TR_ERR_UNSUPPORTED when the
                        backend lacks it (the CPU has FP32 and TF32-as-FP32 only) */
    int sizing_only; /* an instance that only answers ws and held_bytes (terarec plan
                        on a machine without the device): no device, no memory, no ops */
    int gpus;        /* CUDA with device -1: devices per node (--gpus_per_node), the device
                        is local_rank mod gpus; more than are visible is refused (0: all),
                        except by a process that sees one device (bound to it by the
                        scheduler), which takes that one */
};

/* Name of the k-th backend this build has, in preference order ("cuda", "cpu"
 * when built with CUDA), or NULL past the last one. Static storage. */
const char *kern_backend_name(int k);

/* Opens backend `name`: "cpu", "cuda", or "auto" (the first of
 * kern_backend_name(0, 1, ...) that opens; "auto" logs which one at info level and why
 * the others did not). Each instance has its own state (threads, device, queue);
 * opening one never changes another. Errors (logged with a hint, except inside
 * "auto"): TR_ERR_ARG (an unknown name), TR_ERR_UNSUPPORTED (a backend this build
 * lacks, a machine without the device, or a backend not implemented yet),
 * TR_ERR_NOMEM. On error *be is zeroed. Not thread-safe. */
enum tr_status kern_backend_open(const char *name, const struct kern_backend_opts *o, struct kern_backend *be) TR_WUR;

/* Whether kern_backend_open(name, o) could succeed on this machine, without opening
 * anything (no device context): the build has the backend, a CUDA device is visible,
 * the precision fits. Logs what open would log (error and hint) when it could not.
 * For launchers that check a job before starting its workers on this machine. */
enum tr_status kern_backend_check(const char *name, const struct kern_backend_opts *o) TR_WUR;

/* Whether backend `name` computes on a device rather than the host CPUs, asked by
 * name alone (whether or not this build has it, with nothing opened): 1 ("cuda"),
 * 0 ("cpu"), -1 when it depends on the machine ("auto") or the name is unknown.
 * For launchers and planners that decide without the backend. Thread-safe. */
int kern_backend_uses_device(const char *name);

/* Whether backend `name` (or "auto") may compute on a device this machine's driver
 * shows (for cuda: /dev/nvidiactl), whether or not this build has the backend: a
 * launcher starting a container whose image does. 1 or 0. Thread-safe. */
int kern_backend_device_on_host(const char *name);

/* Releases an instance opened by kern_backend_open; safe on a zeroed one. */
void kern_backend_close(struct kern_backend *be);

/* be->i->mem_alloc for a named tensor: on failure logs "out of <backend> memory
 * allocating <what>: N bytes" (what: printf format and arguments), so an
 * out-of-memory names the tensor and the size asked for. */
enum tr_status kern_alloc(const struct kern_backend *be, size_t bytes, void **p, const char *what, ...) TR_WUR
    __attribute__((format(printf, 4, 5)));

/* The bytes an emb_update (or emb_rowsq) call on ntables tables of at most nidx ids
 * and width columns each needs in a[0].ws: the `args` of be's ws answer. */
size_t kern_emb_update_ws_bytes(const struct kern_backend *be, int64_t nidx, int64_t width, int ntables);

/* Prints the line "backends: cuda (N devices visible), cpu" (parsable: one
 * "backends:cuda,cpu" and one "cuda_devices:N" line) for --version. */
void kern_backends_print(FILE *fp, int parsable);

/* Number of CPUs this process may run on (sched_getaffinity). */
int kern_cpu_count(void);

/* Name and version of the BLAS the CPU backend was built with ("OpenBLAS 0.3.21 ..."). */
const char *kern_blas_info(void);

#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
/* Number of visible CUDA devices: 0 when none, when the machine has no NVIDIA
 * device node (then nothing of CUDA is loaded) or when the CUDA plugin cannot be
 * loaded (kern_cuda_plugin_error says why). */
int kern_cuda_device_count(void);

/* Why the CUDA plugin could not be loaded (dlerror's words), or NULL when it was,
 * or was not needed yet. */
const char *kern_cuda_plugin_error(void);

/* A symbol of the CUDA plugin (libterarec-cuda.so), loading it on first use; NULL
 * when it cannot be loaded or lacks the name. For the GPU tests. */
void *kern_cuda_plugin_symbol(const char *name);
#endif

#ifdef __cplusplus
}
#endif
#endif
