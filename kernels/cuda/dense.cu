/* dense.cu: the CUDA backend's dense ops: gemm through cuBLASLt (row-major
 * arguments mapped onto cuBLASLt's column-major view, the bias + ReLU epilogue
 * fused where cuBLASLt has a kernel for it, plans cached per shape), the bias +
 * activation epilogue and its backward, binary cross-entropy, the dense optimizer
 * step, fill, copy_rows, the sum of squares and the cross layer's element-wise
 * combine. Every reduction (dbias, the loss, sumsq) runs in a fixed order over
 * fixed-size chunks, so results do not depend on the launch configuration or the
 * device's SM count. It does not hold the embedding or interaction ops, nor the
 * instance's handles, stream, scratch or workspace (made elsewhere, at open).
 * Per-element math is kmath.h's. */
#define TR_SUBSYS TR_SUB_KERN
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../../common/alloc.h"
#include "cuda_internal.h"
#include "../kmath.h"

/* ---- launch shapes ------------------------------------------------------------------ */

/* Element-wise kernels over a strided (rows, cols) block: 32 columns per warp
 * (coalesced rows) times 8 row lanes, grid-stride in both directions. */
#define EW_X 32
#define EW_Y 8

static dim3 ew_grid(const struct kcu_ctx *c, int64_t rows, int64_t cols)
{
    const int64_t cap = (int64_t)(c->sm_count > 0 ? c->sm_count : 1) * 32;
    int64_t gx = TR_CEIL_DIV(cols, (int64_t)EW_X), gy = TR_CEIL_DIV(rows, (int64_t)EW_Y);
    gx = TR_MAX(1, TR_MIN(gx, cap));
    const int64_t ycap = TR_MIN((int64_t)65535, TR_MAX((int64_t)1, cap / gx));
    gy = TR_MAX(1, TR_MIN(gy, ycap));
    return dim3((unsigned)gx, (unsigned)gy, 1);
}

#define EW_ROWS(r, rows)                                                                  \
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < (rows);            \
         r += (int64_t)gridDim.y * blockDim.y)
#define EW_COLS(j, cols)                                                                  \
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < (cols);            \
         j += (int64_t)gridDim.x * blockDim.x)
#define GRID_STRIDE(i, n)                                                                 \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/* Reductions: a block of RED_THREADS sums one fixed chunk of RED_CHUNK elements
 * (thread t takes elements t, t + RED_THREADS, ... in order), then a fixed tree in
 * shared memory; partials are summed by one block in chunk order. */
#define RED_THREADS 256
#define RED_CHUNK 4096

/* Fixed-order tree sum of sh[0 .. RED_THREADS) into sh[0]; every thread of the
 * block must call it. */
static __device__ void block_tree_sum(double *sh)
{
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
}

/* *out = sum of part[0 .. n) in a fixed order: one block of RED_THREADS. */
static __global__ void k_reduce_partials(const double *part, int64_t n, double *out)
{
    __shared__ double sh[RED_THREADS];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += RED_THREADS)
        acc += part[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    block_tree_sum(sh);
    if (threadIdx.x == 0)
        *out = sh[0];
}

/* ---- element-wise kernels ------------------------------------------------------------- */

/* y = act(y + bias) in place (either part optional). */
static __global__ void k_bias_act_fwd(int64_t rows, int64_t cols, float *y, int64_t ld, const float *bias, int relu)
{
    EW_ROWS(r, rows) {
        float *yr = y + r * ld;
        EW_COLS(j, cols) {
            float v = yr[j];
            if (bias)
                v = v + bias[j];
            if (relu)
                v = km_relu(v);
            yr[j] = v;
        }
    }
}

/* dst (rows, cols; ldd) = the 16-bit operand of src (rows, cols; lds): bfloat16
 * (bf16 set) or binary16 bits, rounded to nearest even (kmath.h). */
static __global__ void k_to_16(int64_t rows, int64_t cols, const float *src, int64_t lds, uint16_t *dst, int64_t ldd,
                               int bf16)
{
    EW_ROWS(r, rows) {
        const float *sr = src + r * lds;
        uint16_t *dr = dst + r * ldd;
        EW_COLS(j, cols) dr[j] = bf16 ? km_float_to_bf16(sr[j]) : km_float_to_half(sr[j]);
    }
}

/* C = beta * C, with beta == 0 writing zeros (old values, NaN included, never leak
 * in): gemm with k == 0. */
static __global__ void k_scale(int64_t rows, int64_t cols, float *y, int64_t ld, float beta)
{
    EW_ROWS(r, rows) {
        float *yr = y + r * ld;
        EW_COLS(j, cols) yr[j] = beta == 0.0f ? 0.0f : beta * yr[j];
    }
}

static __global__ void k_fill(enum kern_fill_kind kind, float *dst, int64_t rows, int64_t cols, int64_t ld,
                              float value, uint64_t seed, uint64_t stream, int64_t elem_ld, int64_t elem0, float a,
                              float b)
{
    EW_ROWS(r, rows) {
        float *yr = dst + r * ld;
        const uint64_t e0 = (uint64_t)(r * elem_ld + elem0);
        EW_COLS(j, cols) {
            const uint64_t e = e0 + (uint64_t)j;
            float v;
            switch (kind) {
            case KERN_FILL_UNIFORM:
                v = km_init_embedding(seed, stream, e, a);
                break;
            case KERN_FILL_GLOROT:
                v = km_init_glorot(seed, stream, e, a, b);
                break;
            case KERN_FILL_NORMAL:
                v = km_init_bias(seed, stream, e, a);
                break;
            default:
                v = value;
                break;
            }
            yr[j] = v;
        }
    }
}

/* y may be xl or h (same ld): each element is read before it is written by the same thread. */
static __global__ void k_cross_fwd(int64_t rows, int64_t cols, const float *x0, int64_t ldx0, const float *h,
                                   int64_t ldh, const float *xl, int64_t ldxl, float *y, int64_t ldy)
{
    EW_ROWS(r, rows) {
        EW_COLS(j, cols) y[r * ldy + j] = km_cross_fwd(x0[r * ldx0 + j], h[r * ldh + j], xl[r * ldxl + j]);
    }
}

/* dh may be dy (same ld): dy is read first. */
static __global__ void k_cross_bwd(int64_t rows, int64_t cols, const float *x0, int64_t ldx0, const float *h,
                                   int64_t ldh, const float *dy, int64_t lddy, float *dh, int64_t lddh, float *dx0,
                                   int64_t lddx0, int acc, int res)
{
    EW_ROWS(r, rows) {
        EW_COLS(j, cols) {
            const float g = dy[r * lddy + j];
            float *d0 = &dx0[r * lddx0 + j];
            *d0 = km_cross_grad_x0(acc ? *d0 : 0.0f, g, h[r * ldh + j], res);
            dh[r * lddh + j] = km_cross_grad_h(g, x0[r * ldx0 + j]);
        }
    }
}

static __global__ void k_sgd(int64_t n, float *p, const float *g, float gs, float lr, float eps)
{
    const struct km_optim h = {lr, eps};
    GRID_STRIDE(i, n) km_sgd_step(&p[i], gs * g[i], &h);
}

static __global__ void k_adagrad(int64_t n, float *p, float *acc, const float *g, float gs, float lr, float eps)
{
    const struct km_optim h = {lr, eps};
    GRID_STRIDE(i, n) km_adagrad_step(&p[i], &acc[i], gs * g[i], &h);
}

/* ---- kcu_compute_type, state ---------------------------------------------------------- */

static cublasComputeType_t compute_type(enum kern_precision p)
{
    switch (p) {
    case KERN_PREC_TF32:
        return CUBLAS_COMPUTE_32F_FAST_TF32;
    case KERN_PREC_BF16:
        return CUBLAS_COMPUTE_32F_FAST_16BF;
    case KERN_PREC_FP16:
        return CUBLAS_COMPUTE_32F_FAST_16F;
    case KERN_PREC_FP32:
    default:
        return CUBLAS_COMPUTE_32F;
    }
}

cublasComputeType_t kcu_compute_type(const struct kcu_ctx *c)
{
    return compute_type(c->prec);
}

void kcu_note_fp32(struct kcu_ctx *c, const char *lib, const char *shape, ...)
{
    if (!TR_LOG_ON(TR_LOG_INFO, TR_SUB_KERN))
        return;
    char text[256];
    va_list ap;
    va_start(ap, shape);
    vsnprintf(text, sizeof text, shape, ap);
    va_end(ap);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *t = text; *t; t++)
        h = (h ^ (unsigned char)*t) * 0x100000001b3ull;
    if (h == 0) /* 0 marks a free slot */
        h = 1;
    for (int i = 0; i < KCU_FP32_NOTED; i++)
        if (c->fp32_noted[i] == h)
            return;
    c->fp32_noted[c->fp32_noted_next] = h;
    c->fp32_noted_next = (c->fp32_noted_next + 1) % KCU_FP32_NOTED;
    tr_log_write(TR_LOG_INFO, TR_SUB_KERN, "%s runs in fp32: %s has no %s algorithm for it", text, lib,
                 kern_precision_name(c->prec));
}

/* Epilogue kinds of a plan (bit 0: bias, bit 1: ReLU). */
enum { EPI_NONE = 0, EPI_BIAS = 1, EPI_RELU = 2, EPI_RELU_BIAS = 3 };

/* What a cuBLASLt plan depends on. Zeroed before filling (compared with memcmp);
 * the fields pack without padding. Pointer alignments are part of it because the
 * heuristic picks kernels by them. */
struct plan_key {
    int32_t trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    int32_t epi, beta0, prec;
    uint32_t align_a, align_b, align_c;
};

struct plan {
    int used;
    int ok; /* the heuristic found an algorithm (else: a remembered "none") */
    struct plan_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A, B and C (= D) */
    cublasLtMatmulAlgo_t algo;
};

/* A small table: a model has a handful of GEMM shapes (forward, both backward
 * products per layer), far fewer than the slots; eviction is round-robin. */
#define PLAN_SLOTS 64

struct dense_state {
    struct plan p[PLAN_SLOTS];
    int next;
};

static void plan_release(struct plan *p)
{
    /* destruction failures leave nothing to do: ignored */
    if (p->desc)
        (void)cublasLtMatmulDescDestroy(p->desc);
    if (p->la)
        (void)cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        (void)cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        (void)cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

enum tr_status kcu_dense_init(struct kcu_ctx *c)
{
    if (c->dense_state)
        return TR_OK;
    c->dense_state = tr_calloc(1, sizeof(struct dense_state));
    return c->dense_state ? TR_OK : TR_ERR_NOMEM;
}

void kcu_dense_free(struct kcu_ctx *c)
{
    struct dense_state *s = (struct dense_state *)c->dense_state;
    if (!s)
        return;
    for (int i = 0; i < PLAN_SLOTS; i++)
        if (s->p[i].used)
            plan_release(&s->p[i]);
    tr_free(s);
    c->dense_state = NULL;
}

/* ---- gemm ------------------------------------------------------------------------------ */

static uint32_t ptr_align(const void *p)
{
    const uintptr_t u = (uintptr_t)p;
    return u % 16 == 0 ? 16u : u % 8 == 0 ? 8u : 4u;
}

#define LT_TRY(call)                                                                      \
    do {                                                                                  \
        if (!kcu_blas_ok_((call), TR_SUBSYS, #call, __FILE__, __LINE__)) {                 \
            rc = TR_ERR_CUDA;                                                             \
            goto fail;                                                                    \
        }                                                                                 \
    } while (0)

/* Builds the plan of key k into p (released on error). Row-major C (m, n; ldc) is
 * column-major C^T (n, m; ldc), so cuBLASLt computes C^T = op(B)^T op(A)^T with
 * our B as its A and our A as its B:
 *   its A: our B, row-major (k, n) untransposed = column-major (n, k; ldb), op N;
 *          transposed, stored (n, k) row-major = column-major (k, n; ldb), op T;
 *   its B: our A, row-major (m, k) = column-major (k, m; lda), op N;
 *          transposed, stored (k, m) row-major = column-major (m, k; lda), op T;
 *   C = D: column-major (n, m; ldc). The bias (n) runs along D's rows, i.e. it is
 *   added to every row of our row-major C. */
static enum tr_status plan_build(struct kcu_ctx *c, const struct plan_key *k, const float *bias, struct plan *p)
{
    enum tr_status rc = TR_OK;
    cublasLtMatmulPreference_t pref = NULL;
    memset(p, 0, sizeof *p);
    p->key = *k;
    const int32_t op_a = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our B */
    const int32_t op_b = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's B is our A */
    const uint64_t a_rows = (uint64_t)(k->trans_b ? k->k : k->n), a_cols = (uint64_t)(k->trans_b ? k->n : k->k);
    const uint64_t b_rows = (uint64_t)(k->trans_a ? k->m : k->k), b_cols = (uint64_t)(k->trans_a ? k->k : k->m);
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (k->epi == EPI_BIAS)
        epi = CUBLASLT_EPILOGUE_BIAS;
    else if (k->epi == EPI_RELU)
        epi = CUBLASLT_EPILOGUE_RELU;
    else if (k->epi == EPI_RELU_BIAS)
        epi = CUBLASLT_EPILOGUE_RELU_BIAS;
    /* bf16 and fp16 take 16-bit operands that kcu_gemm converted (fp32 operands
     * under CUBLAS_COMPUTE_32F_FAST_16BF / _16F leave the choice of kernel to
     * cuBLASLt, which on an H200 ran both as TF32: bitwise the same losses); the
     * sums and C stay fp32 */
    const int half = k->prec == KERN_PREC_BF16 || k->prec == KERN_PREC_FP16;
    const cudaDataType_t ab = k->prec == KERN_PREC_BF16 ? CUDA_R_16BF : k->prec == KERN_PREC_FP16 ? CUDA_R_16F
                                                                                                 : CUDA_R_32F;
    LT_TRY(cublasLtMatmulDescCreate(&p->desc, half ? CUBLAS_COMPUTE_32F : compute_type((enum kern_precision)k->prec),
                                    CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (k->epi != EPI_NONE) {
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (k->epi & EPI_BIAS) /* the heuristic reads its alignment; set again at every call */
            LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&p->la, ab, a_rows, a_cols, k->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, ab, b_rows, b_cols, k->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)k->n, (uint64_t)k->m, k->ldc));
    {
        const uint64_t ws = c->lt_ws_bytes;
        LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_b,
                                                    sizeof k->align_b));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_a,
                                                    sizeof k->align_a));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_c,
                                                    sizeof k->align_c));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_c,
                                                    sizeof k->align_c));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        memset(&res, 0, sizeof res);
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
                                                           &found);
        /* NOT_SUPPORTED: no kernel for this configuration. With an epilogue any refusal
         * means "not fused" (the caller falls back to the plain matmul); without one
         * only NOT_SUPPORTED is an answer, anything else an error. */
        if (k->epi == EPI_NONE && st != CUBLAS_STATUS_NOT_SUPPORTED)
            LT_TRY(st);
        p->ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS;
        if (p->ok)
            p->algo = res.algo;
        if (!p->ok)
            LOG_DEBUG(KERN, "cuBLASLt has no algorithm for gemm %c%c m=%lld n=%lld k=%lld epilogue %d (%s): %s",
                      k->trans_a ? 'T' : 'N', k->trans_b ? 'T' : 'N', (long long)k->m, (long long)k->n,
                      (long long)k->k, (int)k->epi, kern_precision_name((enum kern_precision)k->prec),
                      st == CUBLAS_STATUS_SUCCESS ? "no result" : cublasGetStatusName(st));
    }
    (void)cublasLtMatmulPreferenceDestroy(pref);
    p->used = 1;
    return TR_OK;
fail:
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    plan_release(p);
    return rc;
}

/* The cached plan of key k, built on a miss (round-robin eviction). */
static enum tr_status plan_get(struct kcu_ctx *c, const struct plan_key *k, const float *bias, struct plan **out)
{
    TR_CHECK(kcu_dense_init(c)); /* lazily, should the backend not have called it */
    struct dense_state *s = (struct dense_state *)c->dense_state;
    for (int i = 0; i < PLAN_SLOTS; i++)
        if (s->p[i].used && memcmp(&s->p[i].key, k, sizeof *k) == 0) {
            *out = &s->p[i];
            return TR_OK;
        }
    struct plan *p = &s->p[s->next];
    s->next = (s->next + 1) % PLAN_SLOTS;
    if (p->used)
        plan_release(p);
    TR_CHECK(plan_build(c, k, bias, p));
    *out = p;
    return TR_OK;
}

/* Runs plan p on the operands opa, opb (a->a and a->b, or their 16-bit copies). */
static enum tr_status plan_run(struct kcu_ctx *c, struct plan *p, const struct kern_gemm_args *a, const void *opa,
                               const void *opb)
{
    if (p->key.epi & EPI_BIAS)
        KCU_BLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a->bias,
                                                      sizeof a->bias));
    /* C and D are the same matrix (in place), our B is cuBLASLt's A */
    KCU_BLAS_CHECK(cublasLtMatmul(c->lt, p->desc, &a->alpha, opb, p->la, opa, p->lb, &a->beta, a->c, p->lc, a->c,
                                  p->lc, &p->algo, c->lt_ws, c->lt_ws_bytes, c->stream));
    return TR_OK;
}

/* The 16-bit operands of a bf16 / fp16 gemm: A and B as stored (rows, cols), each
 * with its rows padded to 8 elements (16 bytes, what the tensor-core kernels want)
 * and B's block 256-byte aligned. */
struct half_ops {
    int64_t a_rows, a_cols, a_ld, b_rows, b_cols, b_ld;
    size_t a_bytes, bytes;
};

static struct half_ops half_ops_of(int ta, int tb, int64_t m, int64_t n, int64_t k)
{
    struct half_ops h;
    h.a_rows = ta ? k : m;
    h.a_cols = ta ? m : k;
    h.b_rows = tb ? n : k;
    h.b_cols = tb ? k : n;
    h.a_ld = TR_CEIL_DIV(h.a_cols, (int64_t)8) * 8;
    h.b_ld = TR_CEIL_DIV(h.b_cols, (int64_t)8) * 8;
    h.a_bytes = (size_t)TR_CEIL_DIV(h.a_rows * h.a_ld * 2, (int64_t)256) * 256;
    h.bytes = h.a_bytes + (size_t)(h.b_rows * h.b_ld * 2);
    return h;
}

size_t kcu_gemm_scratch_bytes(enum kern_precision prec, int64_t m, int64_t n, int64_t k)
{
    if ((prec != KERN_PREC_BF16 && prec != KERN_PREC_FP16) || m <= 0 || n <= 0 || k <= 0)
        return 0;
    /* the bound of every transpose: A's and B's padded blocks, each the larger of
     * its two ways of being stored */
    const struct half_ops x = half_ops_of(0, 0, m, n, k), y = half_ops_of(1, 1, m, n, k);
    const size_t a = x.a_bytes > y.a_bytes ? x.a_bytes : y.a_bytes;
    const size_t bx = x.bytes - x.a_bytes, by = y.bytes - y.a_bytes;
    return a + (bx > by ? bx : by);
}

static enum tr_status launch_bias_act(struct kcu_ctx *c, int64_t rows, int64_t cols, float *y, int64_t ld,
                                      const float *bias, int relu)
{
    if (rows == 0 || cols == 0 || (!bias && !relu))
        return TR_OK;
    k_bias_act_fwd<<<ew_grid(c, rows, cols), dim3(EW_X, EW_Y), 0, c->stream>>>(rows, cols, y, ld, bias, relu);
    KCU_LAUNCHED();
    return TR_OK;
}

enum tr_status kcu_gemm(struct kcu_ctx *c, const struct kern_gemm_args *a)
{
    if (a->m < 0 || a->n < 0 || a->k < 0 || (a->act != KERN_ACT_NONE && a->act != KERN_ACT_RELU))
        return TR_ERR_ARG;
    if (a->m == 0 || a->n == 0)
        return TR_OK;
    if (a->ldc < a->n)
        return TR_ERR_ARG;
    if (a->k > 0 && (a->lda < (a->trans_a ? a->m : a->k) || a->ldb < (a->trans_b ? a->k : a->n)))
        return TR_ERR_ARG;
    const int relu = a->act == KERN_ACT_RELU;
    if (a->k == 0) { /* C = beta C, then the epilogue; cuBLASLt is not asked about k = 0 */
        k_scale<<<ew_grid(c, a->m, a->n), dim3(EW_X, EW_Y), 0, c->stream>>>(a->m, a->n, a->c, a->ldc, a->beta);
        KCU_LAUNCHED();
        return launch_bias_act(c, a->m, a->n, a->c, a->ldc, a->bias, relu);
    }
    struct plan_key key;
    memset(&key, 0, sizeof key);
    key.trans_a = a->trans_a != 0;
    key.trans_b = a->trans_b != 0;
    key.m = a->m;
    key.n = a->n;
    key.k = a->k;
    key.lda = a->lda;
    key.ldb = a->ldb;
    key.ldc = a->ldc;
    key.beta0 = a->beta == 0.0f;
    key.prec = (int32_t)c->prec;
    key.align_a = ptr_align(a->a);
    key.align_b = ptr_align(a->b);
    key.align_c = ptr_align(a->c);
    struct plan *p;
    const int epi = (a->bias ? EPI_BIAS : 0) | (relu ? EPI_RELU : 0);
    if (c->prec == KERN_PREC_BF16 || c->prec == KERN_PREC_FP16) {
        /* the operands converted to 16 bits in the scratch, then the same plans on
         * them; a shape cuBLASLt refuses in 16 bits runs in fp32 below */
        const struct half_ops h = half_ops_of(key.trans_a, key.trans_b, a->m, a->n, a->k);
        void *s16;
        TR_CHECK(kcu_scratch(c, h.bytes, &s16));
        uint16_t *a16 = (uint16_t *)s16, *b16 = (uint16_t *)((char *)s16 + h.a_bytes);
        const int bf = c->prec == KERN_PREC_BF16;
        k_to_16<<<ew_grid(c, h.a_rows, h.a_cols), dim3(EW_X, EW_Y), 0, c->stream>>>(h.a_rows, h.a_cols, a->a, a->lda,
                                                                                  a16, h.a_ld, bf);
        KCU_LAUNCHED();
        k_to_16<<<ew_grid(c, h.b_rows, h.b_cols), dim3(EW_X, EW_Y), 0, c->stream>>>(h.b_rows, h.b_cols, a->b, a->ldb,
                                                                                  b16, h.b_ld, bf);
        KCU_LAUNCHED();
        struct plan_key hk = key;
        hk.lda = h.a_ld;
        hk.ldb = h.b_ld;
        hk.align_a = ptr_align(a16);
        hk.align_b = ptr_align(b16);
        if (epi != EPI_NONE && (!a->bias || ptr_align(a->bias) == 16)) {
            hk.epi = epi;
            TR_CHECK(plan_get(c, &hk, a->bias, &p));
            if (p->ok)
                return plan_run(c, p, a, a16, b16);
        }
        hk.epi = EPI_NONE;
        TR_CHECK(plan_get(c, &hk, NULL, &p));
        if (p->ok) {
            TR_CHECK(plan_run(c, p, a, a16, b16));
            return launch_bias_act(c, a->m, a->n, a->c, a->ldc, a->bias, relu);
        }
        key.prec = KERN_PREC_FP32; /* the fp32 operands below: exact */
        kcu_note_fp32(c, "cuBLASLt", "gemm %c%c m=%lld n=%lld k=%lld (ld %lld %lld %lld)", a->trans_a ? 'T' : 'N',
                      a->trans_b ? 'T' : 'N', (long long)a->m, (long long)a->n, (long long)a->k, (long long)a->lda,
                      (long long)a->ldb, (long long)a->ldc);
    }
    /* fused epilogue first; a bias that is not 16-byte aligned is never handed to cuBLASLt */
    if (epi != EPI_NONE && (!a->bias || ptr_align(a->bias) == 16)) {
        key.epi = epi;
        TR_CHECK(plan_get(c, &key, a->bias, &p));
        if (p->ok)
            return plan_run(c, p, a, a->a, a->b);
    }
    /* plain matmul, then the epilogue as bias_act_fwd */
    key.epi = EPI_NONE;
    TR_CHECK(plan_get(c, &key, NULL, &p));
    if (!p->ok && key.prec != KERN_PREC_FP32) {
        /* a shape the reduced-precision kernels do not take (an odd K, say) runs in
         * fp32, which is exact, rather than not at all */
        key.prec = KERN_PREC_FP32;
        TR_CHECK(plan_get(c, &key, NULL, &p));
        if (p->ok)
            kcu_note_fp32(c, "cuBLASLt", "gemm %c%c m=%lld n=%lld k=%lld (ld %lld %lld %lld)", a->trans_a ? 'T' : 'N',
                          a->trans_b ? 'T' : 'N', (long long)a->m, (long long)a->n, (long long)a->k,
                          (long long)a->lda, (long long)a->ldb, (long long)a->ldc);
    }
    if (!p->ok) {
        tr_log_write(TR_LOG_ERROR, TR_SUBSYS, "cuBLASLt has no algorithm for gemm %c%c m=%lld n=%lld k=%lld (%s)",
                     a->trans_a ? 'T' : 'N', a->trans_b ? 'T' : 'N', (long long)a->m, (long long)a->n,
                     (long long)a->k, kern_precision_name(c->prec));
        return TR_ERR_CUDA;
    }
    TR_CHECK(plan_run(c, p, a, a->a, a->b));
    return launch_bias_act(c, a->m, a->n, a->c, a->ldc, a->bias, relu);
}

/* ---- bias + activation ------------------------------------------------------------------ */

enum tr_status kcu_bias_act_fwd(struct kcu_ctx *c, const struct kern_bias_act_fwd_args *a)
{
    if (a->mask) /* no ReLU masks here (kern_backend_i.relu_mask 0) */
        return TR_ERR_UNSUPPORTED;
    if (a->rows < 0 || a->cols < 0 || (a->rows > 0 && a->ldy < a->cols) ||
        (a->act != KERN_ACT_NONE && a->act != KERN_ACT_RELU))
        return TR_ERR_ARG;
    return launch_bias_act(c, a->rows, a->cols, a->y, a->ldy, a->bias, a->act == KERN_ACT_RELU);
}

/* Backward: a block owns BW_X columns of one chunk of BW_ROWS rows (a fixed size,
 * so the partition does not depend on the grid); its BW_Y row lanes walk the
 * chunk's rows strided by BW_Y (coalesced across the columns), then the lanes are
 * added in a fixed tree. One chunk: the sum goes to dbias directly; more: each
 * chunk's sum goes to part (nchunk, cols) and k_colsum adds them in chunk order. */
#define BW_X 32
#define BW_Y 8
#define BW_ROWS 512

static __global__ void k_bias_act_bwd(int64_t rows, int64_t cols, const float *y, int64_t ldy, float *dy,
                                      int64_t lddy, int relu, int want_sum, float *part, float *dbias, int accumulate)
{
    __shared__ float sh[BW_Y][BW_X];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t ntiles = TR_CEIL_DIV(cols, (int64_t)BW_X), nchunk = TR_CEIL_DIV(rows, (int64_t)BW_ROWS);
    for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const int64_t col = tile * BW_X + tx;
        for (int64_t ch = blockIdx.y; ch < nchunk; ch += gridDim.y) {
            const int64_t r0 = ch * BW_ROWS, r1 = TR_MIN(rows, r0 + BW_ROWS);
            float s = 0.0f;
            if (col < cols)
                for (int64_t r = r0 + ty; r < r1; r += BW_Y) {
                    float g = dy[r * lddy + col];
                    if (relu) {
                        g = km_relu_grad(y[r * ldy + col], g);
                        dy[r * lddy + col] = g;
                    }
                    s += g;
                }
            if (!want_sum) /* uniform over the block: no barrier is skipped by a part of it */
                continue;
            sh[ty][tx] = s;
            __syncthreads();
            for (int st = BW_Y / 2; st > 0; st >>= 1) {
                if (ty < st)
                    sh[ty][tx] += sh[ty + st][tx];
                __syncthreads();
            }
            if (ty == 0 && col < cols) {
                if (part)
                    part[ch * cols + col] = sh[0][tx];
                else
                    dbias[col] = accumulate ? dbias[col] + sh[0][tx] : sh[0][tx];
            }
            __syncthreads(); /* sh is reused by the next chunk */
        }
    }
}

static __global__ void k_colsum(const float *part, int64_t nchunk, int64_t cols, float *dbias, int accumulate)
{
    GRID_STRIDE(j, cols) {
        float s = 0.0f;
        for (int64_t ch = 0; ch < nchunk; ch++)
            s += part[ch * cols + j];
        dbias[j] = accumulate ? dbias[j] + s : s;
    }
}

/* Scratch of a bias_act_bwd with dbias: the chunks' column sums, when there are
 * more chunks than one. */
static size_t bias_bwd_scratch(int64_t rows, int64_t cols)
{
    const int64_t nchunk = TR_CEIL_DIV(rows, (int64_t)BW_ROWS);
    return nchunk > 1 && cols > 0 ? (size_t)nchunk * (size_t)cols * sizeof(float) : 0;
}

enum tr_status kcu_bias_act_bwd(struct kcu_ctx *c, const struct kern_bias_act_bwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (a->mask)
        return TR_ERR_UNSUPPORTED;
    if (rows < 0 || cols < 0 || (rows > 0 && (a->ldy < cols || a->lddy < cols)) ||
        (a->act != KERN_ACT_NONE && a->act != KERN_ACT_RELU))
        return TR_ERR_ARG;
    const int relu = a->act == KERN_ACT_RELU;
    if (cols == 0)
        return TR_OK;
    if (rows == 0) { /* empty column sums */
        if (a->dbias && !a->accumulate)
            TR_CUDA_CHECK(cudaMemsetAsync(a->dbias, 0, (size_t)cols * sizeof(float), c->stream));
        return TR_OK;
    }
    if (!relu && !a->dbias)
        return TR_OK;
    const int64_t ntiles = TR_CEIL_DIV(cols, (int64_t)BW_X), nchunk = TR_CEIL_DIV(rows, (int64_t)BW_ROWS);
    float *part = NULL;
    if (a->dbias && nchunk > 1) {
        void *p;
        TR_CHECK(kcu_scratch(c, bias_bwd_scratch(rows, cols), &p));
        part = (float *)p;
    }
    const int64_t cap = (int64_t)(c->sm_count > 0 ? c->sm_count : 1) * 16;
    const int64_t gx = TR_MAX(1, TR_MIN(ntiles, cap));
    const int64_t gy = TR_MAX(1, TR_MIN(nchunk, TR_MIN((int64_t)65535, TR_MAX((int64_t)1, cap / gx))));
    k_bias_act_bwd<<<dim3((unsigned)gx, (unsigned)gy), dim3(BW_X, BW_Y), 0, c->stream>>>(
        rows, cols, a->y, a->ldy, a->dy, a->lddy, relu, a->dbias != NULL, part, a->dbias, a->accumulate != 0);
    KCU_LAUNCHED();
    if (part) {
        k_colsum<<<kcu_blocks(c, cols, 256), 256, 0, c->stream>>>(part, nchunk, cols, a->dbias, a->accumulate != 0);
        KCU_LAUNCHED();
    }
    return TR_OK;
}

/* ---- loss -------------------------------------------------------------------------------- */

/* One block per chunk (grid-stride over chunks): dlogits element-wise, and the
 * chunk's loss sum in double into part[chunk] when part is set. */
static __global__ void k_bce(int64_t n, const float *x, const float *y, float *dl, float gs, double *part)
{
    __shared__ double sh[RED_THREADS];
    const int64_t nchunk = TR_CEIL_DIV(n, (int64_t)RED_CHUNK);
    for (int64_t ch = blockIdx.x; ch < nchunk; ch += gridDim.x) {
        const int64_t i1 = TR_MIN(n, (ch + 1) * RED_CHUNK);
        double acc = 0.0;
        for (int64_t i = ch * RED_CHUNK + threadIdx.x; i < i1; i += RED_THREADS) {
            const float xv = x[i], yv = y[i];
            if (part)
                acc += (double)km_bce_logit(xv, yv);
            if (dl)
                dl[i] = gs * km_bce_logit_grad(xv, yv);
        }
        if (!part)
            continue;
        sh[threadIdx.x] = acc;
        __syncthreads();
        block_tree_sum(sh);
        if (threadIdx.x == 0)
            part[ch] = sh[0];
        __syncthreads(); /* sh is reused by the next chunk */
    }
}

/* Scratch of a bce that sums the loss: the sum, then one partial per chunk. */
static size_t bce_scratch(int64_t n)
{
    return n > 0 ? (size_t)(TR_CEIL_DIV(n, (int64_t)RED_CHUNK) + 1) * sizeof(double) : 0;
}

enum tr_status kcu_bce(struct kcu_ctx *c, const struct kern_bce_args *a)
{
    const int64_t n = a->n;
    if (n < 0)
        return TR_ERR_ARG;
    if (n == 0) {
        if (a->loss_sum)
            *a->loss_sum = 0.0;
        return TR_OK;
    }
    if (!a->loss_sum && !a->dlogits)
        return TR_OK;
    const int64_t nchunk = TR_CEIL_DIV(n, (int64_t)RED_CHUNK);
    double *part = NULL, *dsum = NULL, *hsum = NULL;
    if (a->loss_sum) { /* scratch: [sum | part (nchunk)] */
        void *d, *h;
        TR_CHECK(kcu_scratch(c, bce_scratch(n), &d));
        TR_CHECK(kcu_pinned(c, sizeof(double), &h));
        dsum = (double *)d;
        part = dsum + 1;
        hsum = (double *)h;
    }
    k_bce<<<kcu_blocks(c, nchunk, 1), RED_THREADS, 0, c->stream>>>(n, a->logits, a->labels, a->dlogits,
                                                                   a->grad_scale, part);
    KCU_LAUNCHED();
    if (!a->loss_sum)
        return TR_OK;
    k_reduce_partials<<<1, RED_THREADS, 0, c->stream>>>(part, nchunk, dsum);
    KCU_LAUNCHED();
    TR_CUDA_CHECK(cudaMemcpyAsync(hsum, dsum, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    TR_CHECK(kcu_sync(c));
    *a->loss_sum = *hsum;
    return TR_OK;
}

/* ---- optimizer, fill, copy ------------------------------------------------------------------ */

enum tr_status kcu_dense_update(struct kcu_ctx *c, const struct kern_dense_update_args *a)
{
    if (a->n < 0 || (a->hp.kind != KERN_OPT_SGD && !a->accum))
        return TR_ERR_ARG;
    if (a->n == 0)
        return TR_OK;
    const unsigned nb = kcu_blocks(c, a->n, 256);
    if (a->hp.kind == KERN_OPT_SGD)
        k_sgd<<<nb, 256, 0, c->stream>>>(a->n, a->param, a->grad, a->grad_scale, a->hp.lr, a->hp.eps);
    else /* both Adagrad kinds step element-wise on dense parameters */
        k_adagrad<<<nb, 256, 0, c->stream>>>(a->n, a->param, a->accum, a->grad, a->grad_scale, a->hp.lr, a->hp.eps);
    KCU_LAUNCHED();
    return TR_OK;
}

enum tr_status kcu_fill(struct kcu_ctx *c, const struct kern_fill_args *a)
{
    if (a->rows < 0 || a->cols < 0 || (a->rows > 0 && a->ld < a->cols) || (int)a->kind < KERN_FILL_CONST ||
        (int)a->kind > KERN_FILL_NORMAL)
        return TR_ERR_ARG;
    if (a->rows == 0 || a->cols == 0)
        return TR_OK;
    k_fill<<<ew_grid(c, a->rows, a->cols), dim3(EW_X, EW_Y), 0, c->stream>>>(
        a->kind, a->dst, a->rows, a->cols, a->ld, a->value, a->seed, a->stream, a->elem_ld, a->elem0, a->a, a->b);
    KCU_LAUNCHED();
    return TR_OK;
}

enum tr_status kcu_copy_rows(struct kcu_ctx *c, const struct kern_copy_rows_args *a, int n)
{
    /* n < 0: no blocks, as on the CPU (kern_cpu_copy_rows answers TR_OK) */
    for (int k = 0; k < n; k++) /* every block is checked before anything is copied */
        if (a[k].rows < 0 || a[k].cols < 0 || (a[k].rows > 1 && (a[k].ldd < a[k].cols || a[k].lds < a[k].cols)))
            return TR_ERR_ARG;
    for (int k = 0; k < n; k++) {
        const struct kern_copy_rows_args *b = &a[k];
        const size_t width = (size_t)b->cols * sizeof(float);
        if (b->rows == 0 || width == 0)
            continue;
        if (b->rows == 1) /* one row: its strides are never used (and may be below cols) */
            TR_CUDA_CHECK(cudaMemcpyAsync(b->dst, b->src, width, cudaMemcpyDeviceToDevice, c->stream));
        else
            TR_CUDA_CHECK(cudaMemcpy2DAsync(b->dst, (size_t)b->ldd * sizeof(float), b->src,
                                            (size_t)b->lds * sizeof(float), width, (size_t)b->rows,
                                            cudaMemcpyDeviceToDevice, c->stream));
    }
    return TR_OK;
}

/* ---- sum of squares ---------------------------------------------------------------------------- */

/* part[ch] = the sum of squares of elements [ch * RED_CHUNK, (ch + 1) * RED_CHUNK)
 * of the block read row by row (element i is x[i / cols][i % cols]). */
static __global__ void k_sumsq(const float *x, int64_t rows, int64_t cols, int64_t ld, double *part)
{
    __shared__ double sh[RED_THREADS];
    const int64_t n = rows * cols, nchunk = TR_CEIL_DIV(n, (int64_t)RED_CHUNK);
    for (int64_t ch = blockIdx.x; ch < nchunk; ch += gridDim.x) {
        const int64_t i1 = TR_MIN(n, (ch + 1) * RED_CHUNK);
        double acc = 0.0;
        for (int64_t i = ch * RED_CHUNK + threadIdx.x; i < i1; i += RED_THREADS) {
            if (ld == cols) { /* contiguous: no division */
                acc = km_sumsq_add(acc, x[i]);
            } else {
                const int64_t r = i / cols, j = i - r * cols;
                acc = km_sumsq_add(acc, x[r * ld + j]);
            }
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        block_tree_sum(sh);
        if (threadIdx.x == 0)
            part[ch] = sh[0];
        __syncthreads(); /* sh is reused by the next chunk */
    }
}

enum tr_status kcu_sumsq(struct kcu_ctx *c, const struct kern_sumsq_args *a, int n)
{
    if (n < 0)
        return TR_ERR_ARG;
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        if (a[k].rows < 0 || a[k].cols < 0 || a[k].ld < a[k].cols || !a[k].out)
            return TR_ERR_ARG;
        total += TR_CEIL_DIV(a[k].rows * a[k].cols, (int64_t)RED_CHUNK);
    }
    if (n == 0)
        return TR_OK;
    /* scratch: [sums (n) | partials of block 0 | of block 1 | ...] */
    void *d, *h;
    TR_CHECK(kcu_scratch(c, (size_t)(n + total) * sizeof(double), &d));
    TR_CHECK(kcu_pinned(c, (size_t)n * sizeof(double), &h));
    double *sums = (double *)d, *part = sums + n, *hs = (double *)h;
    for (int k = 0; k < n; k++) {
        const int64_t nchunk = TR_CEIL_DIV(a[k].rows * a[k].cols, (int64_t)RED_CHUNK);
        if (nchunk > 0) {
            k_sumsq<<<kcu_blocks(c, nchunk, 1), RED_THREADS, 0, c->stream>>>(a[k].x, a[k].rows, a[k].cols, a[k].ld,
                                                                              part);
            KCU_LAUNCHED();
        }
        k_reduce_partials<<<1, RED_THREADS, 0, c->stream>>>(part, nchunk, &sums[k]); /* 0 when empty */
        KCU_LAUNCHED();
        part += nchunk;
    }
    TR_CUDA_CHECK(cudaMemcpyAsync(hs, sums, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    TR_CHECK(kcu_sync(c));
    for (int k = 0; k < n; k++)
        *a[k].out = hs[k];
    return TR_OK;
}

/* ---- cross combine -------------------------------------------------------------------------------- */

enum tr_status kcu_cross_fwd(struct kcu_ctx *c, const struct kern_cross_fwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (rows < 0 || cols < 0 || a->ldx0 < cols || a->ldh < cols || a->ldxl < cols || a->ldy < cols)
        return TR_ERR_ARG;
    if (rows == 0 || cols == 0)
        return TR_OK;
    k_cross_fwd<<<ew_grid(c, rows, cols), dim3(EW_X, EW_Y), 0, c->stream>>>(rows, cols, a->x0, a->ldx0, a->h, a->ldh,
                                                                             a->xl, a->ldxl, a->y, a->ldy);
    KCU_LAUNCHED();
    return TR_OK;
}

enum tr_status kcu_cross_bwd(struct kcu_ctx *c, const struct kern_cross_bwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (rows < 0 || cols < 0 || a->ldx0 < cols || a->ldh < cols || a->lddy < cols || a->lddh < cols ||
        a->lddx0 < cols)
        return TR_ERR_ARG;
    if (rows == 0 || cols == 0)
        return TR_OK;
    k_cross_bwd<<<ew_grid(c, rows, cols), dim3(EW_X, EW_Y), 0, c->stream>>>(
        rows, cols, a->x0, a->ldx0, a->h, a->ldh, a->dy, a->lddy, a->dh, a->lddh, a->dx0, a->lddx0,
        a->accumulate != 0, a->residual != 0);
    KCU_LAUNCHED();
    return TR_OK;
}

/* ---- working memory ------------------------------------------------------------------------ */

void kcu_dense_ws(const struct kcu_ctx *c, enum kern_op op, const struct kern_shape *s, struct kern_ws *out)
{
    switch (op) {
    case KERN_OP_GEMM: /* bf16 / fp16: the 16-bit operands (the cuBLASLt workspace is held from open) */
        out->scratch = kcu_gemm_scratch_bytes(c->prec, s->m, s->n, s->k);
        break;
    case KERN_OP_BIAS_ACT_BWD: out->scratch = bias_bwd_scratch(s->m, s->n); break;
    case KERN_OP_BCE:
        out->scratch = bce_scratch(s->m);
        out->staging = s->m > 0 ? sizeof(double) : 0;
        break;
    case KERN_OP_SUMSQ:
        if (s->count > 0) {
            /* [sums (count) | partials]: the blocks' ceil(elements / RED_CHUNK) add up to
             * at most ceil(m / RED_CHUNK) + count - 1 (kcu_sumsq takes the exact sum) */
            const int64_t parts = TR_CEIL_DIV(TR_MAX(s->m, (int64_t)0), (int64_t)RED_CHUNK) + s->count - 1;
            out->scratch = (size_t)(s->count + parts) * sizeof(double);
            out->staging = (size_t)s->count * sizeof(double);
        }
        break;
    default: break;
    }
}
