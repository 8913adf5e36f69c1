/* interact.cu: CUDA dot interaction, forward and backward, in the seed's layout
 * ([bottom | strict lower triangle row-major | zero pad], see kern.h). Any n and
 * any d: the products run as strided-batched cuBLAS GEMMs (Z = X X^T forward,
 * dX = S X backward, S the symmetric pair-gradient matrix), in the instance's
 * precision (kcu_compute_type: exact fp32, or TF32 / bf16 / fp16 on tensor cores;
 * tensors and sums stay fp32; a GEMM that cuBLAS refuses in the reduced precision
 * runs in fp32). Small kernels gather the triangle out of Z, build S
 * and add the bottom gradient. The batch runs in chunks so that the (chunk, n, n)
 * scratch stays near 64 MiB. It does not implement the concat or cat-only
 * interaction variants, and does not use the symmetry of Z to halve the GEMM. The
 * backward's guard flag (nonfinite) is one more pass over dx. */
#define TR_SUBSYS TR_SUB_KERN
#include "cuda_internal.h"

#include "../kmath.h"

#define THREADS 256
#define CHUNK_BYTES ((int64_t)64 << 20) /* target size of the Z / S scratch */
/* cuBLAS takes batchCount as int; we stay at 65535 (a grid dimension's size) to keep
 * clear of any per-launch batch limit of the batched kernels. The cap binds only for
 * n <= 16, where a batch over 65535 samples then takes more than one call. */
#define MAX_CHUNK ((int64_t)65535)

/* Row i of pair p in the row-major strict lower triangle: the largest i with
 * km_tri_index(i, 0) <= p. The sqrt guess is off by at most one either way for
 * any p that fits memory; the two loops fix it exactly. */
static __device__ __forceinline__ int64_t tri_row(int64_t p)
{
    int64_t i = (int64_t)((1.0 + sqrt(1.0 + 8.0 * (double)p)) * 0.5);
    if (i < 1)
        i = 1;
    while (i > 1 && km_tri_index(i, 0) > p)
        i--;
    while (km_tri_index(i + 1, 0) <= p)
        i++;
    return i;
}

/* out rows of cnt samples: [x_0 | z(i, j) for i > j | 0]. x (cnt, n, d) and out
 * (cnt, out_w) start at the chunk; z (cnt, n, n) with z[s][i * n + j] = x_i . x_j
 * (NULL when there are no pairs). One thread per output element: writes coalesce. */
static __global__ void fwd_gather(const float *x, const float *z, float *out, int64_t cnt, int n, int d, int64_t off,
                                  int64_t used, int64_t out_w)
{
    const int64_t total = cnt * out_w;
    const int64_t nd = (int64_t)n * d, nn = (int64_t)n * n;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = e / out_w, col = e - s * out_w;
        float v = 0.0f;
        if (col < off) {
            v = x[s * nd + col]; /* the bottom vector, bitwise */
        } else if (col < used) {
            const int64_t p = col - off;
            const int64_t i = tri_row(p);
            const int64_t j = p - km_tri_index(i, 0);
            v = z[s * nn + i * n + j];
        }
        out[e] = v;
    }
}

/* S (cnt, n, n) of cnt samples: S[s][r][c] = pair gradient of (max(r,c), min(r,c)),
 * zero on the diagonal. g is dout at the chunk's first sample, past the bottom
 * columns (row stride out_w). Both halves get the same float: S is exactly symmetric. */
static __global__ void bwd_build_s(const float *g, int64_t out_w, float *S, int64_t cnt, int n)
{
    const int64_t nn = (int64_t)n * n, total = cnt * nn;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = e / nn, rc = e - s * nn;
        const int64_t r = rc / n, c = rc - r * n;
        float v = 0.0f;
        if (r != c)
            v = g[s * out_w + (r > c ? km_tri_index(r, c) : km_tri_index(c, r))];
        S[e] = v;
    }
}

/* n == 1 (no pairs): dx = S x with S = [0], as the CPU sums it (0 + 0 * x): +0, and
 * NaN where x is NaN or inf. */
static __global__ void bwd_no_pairs(const float *x, float *dx, int64_t total)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x)
        dx[e] = 0.0f + 0.0f * x[e];
}

/* dx[s][0][k] += dout[s][k] for k < d (the bottom vector's own gradient). */
static __global__ void bwd_add_bottom(const float *dout, int64_t out_w, float *dx, int64_t batch, int n, int d)
{
    const int64_t total = batch * d, nd = (int64_t)n * d;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = e / d, k = e - s * d;
        dx[s * nd + k] += dout[s * out_w + k];
    }
}

/* *flag = 1 if any of dx's total elements is NaN or inf (the caller zeroed it):
 * the numeric guard of dx; racing stores all write 1. */
static __global__ void bwd_flag_nonfinite(const float *dx, int64_t total, int32_t *flag)
{
    int bad = 0;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x)
        bad |= !isfinite(dx[e]);
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        *flag = 1;
}

/* Samples per chunk: the (chunk, n, n) scratch near CHUNK_BYTES (at least one
 * sample, however large n is), at most MAX_CHUNK and at most batch. */
static int64_t chunk_of(int64_t batch, int n)
{
    const int64_t per = (int64_t)n * n * (int64_t)sizeof(float);
    int64_t chunk = CHUNK_BYTES / per;
    if (chunk < 1)
        chunk = 1;
    if (chunk > MAX_CHUNK)
        chunk = MAX_CHUNK;
    if (chunk > batch)
        chunk = batch;
    return chunk;
}

size_t kcu_interact_scratch_bytes(int64_t batch, int64_t n)
{
    if (n <= 1 || batch <= 0 || n > INT32_MAX)
        return 0; /* no pairs: no GEMM, no scratch (an n beyond int is refused by the op) */
    return (size_t)(chunk_of(batch, (int)n) * n * n) * sizeof(float);
}

/* cnt strided-batched GEMMs C_s = op(A_s) op(B_s) (alpha 1, beta 0: C is only
 * written; cuBLAS's column-major view) in the instance's precision. When cuBLAS
 * refuses that compute type for the call (CUBLAS_STATUS_NOT_SUPPORTED, or
 * ARCH_MISMATCH on a device without tensor cores for the format), the call runs in
 * fp32 (CUBLAS_COMPUTE_32F: exact) instead, as dense.cu's gemm does, said once per
 * shape by kcu_note_fp32. `what` names the op in messages. TR_ERR_CUDA (logged) on
 * any other cuBLAS error, or when fp32 is refused too. */
static enum tr_status batched_gemm(struct kcu_ctx *c, const char *what, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const float *a, int lda, long long stride_a, const float *b,
                                   int ldb, long long stride_b, float *cm, int ldc, long long stride_c, int cnt)
{
    const float one = 1.0f, zero = 0.0f;
    const cublasComputeType_t ct = kcu_compute_type(c);
    cublasStatus_t st = cublasGemmStridedBatchedEx(c->blas, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, stride_a, b,
                                                   CUDA_R_32F, ldb, stride_b, &zero, cm, CUDA_R_32F, ldc, stride_c,
                                                   cnt, ct, CUBLAS_GEMM_DEFAULT);
    const int refused = st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH;
    if (refused && ct != CUBLAS_COMPUTE_32F) {
        LOG_DEBUG(KERN, "%s: cublasGemmStridedBatchedEx m=%d n=%d k=%d in %s: %s; again in fp32", what, m, n, k,
                  kern_precision_name(c->prec), cublasGetStatusName(st));
        st = cublasGemmStridedBatchedEx(c->blas, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, stride_a, b, CUDA_R_32F,
                                        ldb, stride_b, &zero, cm, CUDA_R_32F, ldc, stride_c, cnt, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT);
        if (st == CUBLAS_STATUS_SUCCESS) /* the key leaves out cnt: a batch's last chunk is the same shape */
            kcu_note_fp32(c, "cuBLAS", "%s batched gemm %c%c m=%d n=%d k=%d (ld %d %d %d)", what,
                          ta == CUBLAS_OP_T ? 'T' : 'N', tb == CUBLAS_OP_T ? 'T' : 'N', m, n, k, lda, ldb, ldc);
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        tr_log_write(TR_LOG_ERROR, TR_SUBSYS, "%s: cublasGemmStridedBatchedEx m=%d n=%d k=%d batch %d (%s) failed: %s",
                     what, m, n, k, cnt, refused ? "fp32" : kern_precision_name(c->prec), cublasGetStatusName(st));
        return TR_ERR_CUDA;
    }
    return TR_OK;
}

static int args_ok(int n, int d, int has_bottom, int64_t out_w)
{
    const int64_t off = has_bottom ? d : 0;
    return n >= 1 && d >= 1 && out_w >= off + km_tri_count(n);
}

/* Per sample, X is row-major (n, d), i.e. column-major (d, n) with ld d: call it Xc
 * = X^T. cuBLAS (column-major) computes Zc = Xc^T Xc = X X^T, an (n, n) matrix with
 * ld n; Zc(row j, col i) sits at z[i * n + j] and is x_j . x_i = x_i . x_j, so the
 * gather reads z[i * n + j] for i > j. */
enum tr_status kcu_interact_fwd(struct kcu_ctx *c, const struct kern_interact_fwd_args *a)
{
    if (!args_ok(a->n, a->d, a->has_bottom, a->out_w))
        return TR_ERR_ARG;
    if (a->batch <= 0)
        return TR_OK;
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0, used = off + km_tri_count(n);
    const int64_t nd = (int64_t)n * d, nn = (int64_t)n * n;
    if (n == 1) { /* no pairs: bottom copy and zeros only, no GEMM, no scratch */
        fwd_gather<<<kcu_blocks(c, a->batch * a->out_w, THREADS), THREADS, 0, c->stream>>>(a->x, NULL, a->out, a->batch,
                                                                                           n, d, off, used, a->out_w);
        KCU_LAUNCHED();
        return TR_OK;
    }
    const int64_t chunk = chunk_of(a->batch, n);
    void *scr = NULL;
    enum tr_status rc = kcu_scratch(c, kcu_interact_scratch_bytes(a->batch, n), &scr);
    if (rc != TR_OK)
        return rc;
    float *z = (float *)scr;
    for (int64_t s0 = 0; s0 < a->batch; s0 += chunk) {
        const int64_t cnt = a->batch - s0 < chunk ? a->batch - s0 : chunk;
        const float *x = a->x + s0 * nd;
        /* C (n x n, ldc n) = op(A) (n x d) op(B) (d x n): A = B = Xc (d x n, ld d), transa T, transb N */
        TR_CHECK(batched_gemm(c, "interact_fwd", CUBLAS_OP_T, CUBLAS_OP_N, n, n, d, x, d, (long long)nd, x, d,
                              (long long)nd, z, n, (long long)nn, (int)cnt));
        fwd_gather<<<kcu_blocks(c, cnt * a->out_w, THREADS), THREADS, 0, c->stream>>>(x, z, a->out + s0 * a->out_w, cnt,
                                                                                      n, d, off, used, a->out_w);
        KCU_LAUNCHED();
    }
    return TR_OK;
}

/* Row-major dX (n, d) = S X is column-major (d, n) dXc = (S X)^T = X^T S^T = Xc S
 * (S symmetric). cuBLAS: C = dXc (d x n, ldc d) = A (Xc, d x n, lda d, no trans)
 * times B (S, n x n, ldb n, no trans); beta 0 overwrites dx without reading it. */
enum tr_status kcu_interact_bwd(struct kcu_ctx *c, const struct kern_interact_bwd_args *a)
{
    if (!args_ok(a->n, a->d, a->has_bottom, a->out_w))
        return TR_ERR_ARG;
    if (a->batch <= 0) {
        if (a->nonfinite)
            TR_CUDA_CHECK(cudaMemsetAsync(a->nonfinite, 0, sizeof *a->nonfinite, c->stream));
        return TR_OK;
    }
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    const int64_t nd = (int64_t)n * d, nn = (int64_t)n * n;
    if (n == 1) { /* no pairs: the pair part of dx is zero times x */
        bwd_no_pairs<<<kcu_blocks(c, a->batch * nd, THREADS), THREADS, 0, c->stream>>>(a->x, a->dx, a->batch * nd);
        KCU_LAUNCHED();
    } else {
        const int64_t chunk = chunk_of(a->batch, n);
        void *scr = NULL;
        enum tr_status rc = kcu_scratch(c, kcu_interact_scratch_bytes(a->batch, n), &scr);
        if (rc != TR_OK)
            return rc;
        float *S = (float *)scr;
        for (int64_t s0 = 0; s0 < a->batch; s0 += chunk) {
            const int64_t cnt = a->batch - s0 < chunk ? a->batch - s0 : chunk;
            bwd_build_s<<<kcu_blocks(c, cnt * nn, THREADS), THREADS, 0, c->stream>>>(a->dout + s0 * a->out_w + off,
                                                                                     a->out_w, S, cnt, n);
            KCU_LAUNCHED();
            /* C (d x n, ldc d) = A (d x n, lda d) B (n x n, ldb n), both untransposed */
            TR_CHECK(batched_gemm(c, "interact_bwd", CUBLAS_OP_N, CUBLAS_OP_N, d, n, n, a->x + s0 * nd, d,
                                  (long long)nd, S, n, (long long)nn, a->dx + s0 * nd, d, (long long)nd, (int)cnt));
        }
    }
    if (a->has_bottom) {
        bwd_add_bottom<<<kcu_blocks(c, a->batch * d, THREADS), THREADS, 0, c->stream>>>(a->dout, a->out_w, a->dx,
                                                                                        a->batch, n, d);
        KCU_LAUNCHED();
    }
    if (a->nonfinite) {
        TR_CUDA_CHECK(cudaMemsetAsync(a->nonfinite, 0, sizeof *a->nonfinite, c->stream));
        bwd_flag_nonfinite<<<kcu_blocks(c, a->batch * nd, THREADS), THREADS, 0, c->stream>>>(a->dx, a->batch * nd,
                                                                                             a->nonfinite);
        KCU_LAUNCHED();
    }
    return TR_OK;
}
