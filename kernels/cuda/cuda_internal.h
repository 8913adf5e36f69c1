/* cuda_internal.h: the CUDA backend's instance state and op implementations,
 * shared by the files of kernels/cuda/ only (CUDA C++, included from .cu files).
 * Contracts are those of kern.h: every pointer an op gets is device memory except
 * the ones kern.h calls host memory (bad_pos, loss_sum, sumsq's out); ops are
 * queued on c->stream in issue order; an op that returns a host value (a status
 * decided on the device, a sum) synchronises the stream before it returns.
 *
 * Per-element math comes from kernels/kmath.h (KM_FN is __host__ __device__ under
 * nvcc), never written again here. Every CUDA call and every launch is checked
 * (TR_CUDA_CHECK; KCU_LAUNCHED after a <<<>>>). */
#ifndef TR_KERN_CUDA_INTERNAL_H
#define TR_KERN_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/check.h"
#include "../kern.h"

/* Shapes whose fp32 stand-in an instance remembers having logged (kcu_note_fp32). */
#define KCU_FP32_NOTED 64

struct kcu_ctx {
    int device;
    enum kern_precision prec;
    int sizing_only;          /* no device state below is valid */
    cudaStream_t stream;
    cublasLtHandle_t lt;      /* the MLP GEMMs */
    cublasHandle_t blas;      /* batched GEMMs (the interaction), on `stream` */
    void *lt_ws;              /* cuBLASLt workspace, sized once at open */
    size_t lt_ws_bytes;
    void *scratch;            /* device scratch: taken by reserve, grows only as a fallback (kcu_scratch) */
    size_t scratch_bytes;
    void *pinned;             /* pinned host memory for results the host reads (the staging buffer) */
    size_t pinned_bytes;
    int reserved;             /* reserve ran: a growth after it is logged, once each */
    struct kern_ws planned;   /* the most reserve was asked for */
    int scratch_warned, pinned_warned;
    int sm_count;
    char uuid[48];            /* the device's, as nvidia-smi shows it ("" before open) */
    size_t smem_optin;        /* the most dynamic shared memory a block may opt in to */
    void *dense_state;        /* dense.cu's own (its GEMM plan cache); kcu_dense_init/free */
    int64_t mem_now, mem_peak; /* device bytes held: tensors, scratch, the cuBLASLt workspace */
    uint64_t fp32_noted[KCU_FP32_NOTED]; /* hashes of the shapes kcu_note_fp32 logged (0: free) */
    int fp32_noted_next;       /* the slot the next one takes (round-robin) */
};

/* Counts delta bytes of device memory taken (> 0) or given back (< 0). */
static inline void kcu_account(struct kcu_ctx *c, int64_t delta)
{
    c->mem_now += delta;
    if (c->mem_now > c->mem_peak)
        c->mem_peak = c->mem_now;
}

/* The cuBLASLt workspace every GEMM may use (NVIDIA's recommendation for Hopper). */
#define KCU_LT_WS_BYTES ((size_t)32 << 20)

/* Device scratch of at least n bytes, valid until the next kcu_scratch call of
 * this instance. Work queued earlier that used the old scratch is ordered before
 * anything queued later, so reuse across ops needs no wait. reserve sizes it before
 * the first step (every op's n is what its ws answer says); should an op still need
 * more, it grows, which synchronises the device and reallocates, and after a
 * reserve warns once. TR_ERR_NOMEM (logged with the bytes), TR_ERR_CUDA. */
enum tr_status kcu_scratch(struct kcu_ctx *c, size_t n, void **p);

/* Pinned host memory of at least n bytes (same lifetime and growth rules as
 * kcu_scratch; reserve sizes it from the ws answers' staging). A caller copies
 * device results into it with cudaMemcpyAsync on c->stream, then synchronises
 * (kcu_sync) before reading. */
enum tr_status kcu_pinned(struct kcu_ctx *c, size_t n, void **p);

/* Waits for the instance's stream; TR_ERR_CUDA (logged) if a queued kernel failed. */
enum tr_status kcu_sync(struct kcu_ctx *c);

/* Blocks for a grid-stride loop over n items with `threads` threads per block:
 * at most 32 blocks per SM (never 0, so an empty launch is still valid). */
static inline unsigned kcu_blocks(const struct kcu_ctx *c, int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    int64_t cap = (int64_t)(c->sm_count > 0 ? c->sm_count : 1) * 32;
    if (b > cap)
        b = cap;
    return (unsigned)(b > 0 ? b : 1);
}

/* After every kernel launch: a bad configuration fails here, not three ops later. */
#define KCU_LAUNCHED() TR_CUDA_CHECK(cudaGetLastError())

/* cuBLAS / cuBLASLt calls: on an error, log the call and the status name and
 * return TR_ERR_CUDA. */
static inline int kcu_blas_ok_(cublasStatus_t s, unsigned subsys, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 1;
    tr_log_write(TR_LOG_ERROR, subsys, "%s:%d %s failed: %s", file, line, call, cublasGetStatusName(s));
    return 0;
}
#define KCU_BLAS_CHECK(call)                                                              \
    do {                                                                                  \
        if (!kcu_blas_ok_((call), TR_SUBSYS, #call, __FILE__, __LINE__))                   \
            return TR_ERR_CUDA;                                                           \
    } while (0)

/* The cuBLAS compute type of the instance's precision: FP32 CUBLAS_COMPUTE_32F
 * (never TF32), TF32 ..._32F_FAST_TF32, BF16 ..._32F_FAST_16BF, FP16 ..._32F_FAST_16F;
 * A, B and C stay CUDA_R_32F in every mode. */
cublasComputeType_t kcu_compute_type(const struct kcu_ctx *c);

/* Says at info level (subsystem kern), once per shape, that a GEMM which the
 * instance's reduced precision asks for runs in fp32 (exact, but no faster: an --amp
 * run should hear of it, not at every step) because `lib` ("cuBLASLt", "cuBLAS") has
 * no algorithm for it in that precision: "<shape> runs in fp32: <lib> has no bf16
 * algorithm for it". `shape` (printf format and arguments) names the call and its
 * sizes; the text is the key. The instance remembers the last KCU_FP32_NOTED shapes
 * it logged (a 64-bit hash of each), so an older one logs again. Formats nothing
 * when info is off for kern. For dense.cu's gemm and interact.cu's batched GEMMs. */
void kcu_note_fp32(struct kcu_ctx *c, const char *lib, const char *shape, ...) __attribute__((format(printf, 3, 4)));

/* ---- ops (kernels/cuda/<file>.cu); contracts in kern.h ------------------------------ */

/* Working memory of each op (the backend's ws answer), written once beside the op
 * that uses it: each adds its op's fields to *out (zeroed by the caller). */
/* gemm (bf16 / fp16 operands), bias_act_bwd, bce, sumsq */
void kcu_dense_ws(const struct kcu_ctx *c, enum kern_op op, const struct kern_shape *s, struct kern_ws *out);
/* Scratch of a bf16 / fp16 gemm (m, n, k), any transposes: its operands converted
 * to 16 bits, rows padded to 8; 0 for other precisions. */
size_t kcu_gemm_scratch_bytes(enum kern_precision prec, int64_t m, int64_t n, int64_t k);
void kcu_emb_ws(struct kcu_ctx *c, enum kern_op op, const struct kern_shape *s, struct kern_ws *out);
void kcu_metrics_ws(int64_t n, struct kern_ws *out);
/* The interaction's (chunk, n, n) products of a batch of n vectors a sample. */
size_t kcu_interact_scratch_bytes(int64_t batch, int64_t n);

/* dense.cu; kcu_dense_init runs at open after the handles and the stream exist,
 * kcu_dense_free at destroy (safe after a failed or no init). */
enum tr_status kcu_dense_init(struct kcu_ctx *c);
void kcu_dense_free(struct kcu_ctx *c);
enum tr_status kcu_gemm(struct kcu_ctx *c, const struct kern_gemm_args *a);
enum tr_status kcu_bias_act_fwd(struct kcu_ctx *c, const struct kern_bias_act_fwd_args *a);
enum tr_status kcu_bias_act_bwd(struct kcu_ctx *c, const struct kern_bias_act_bwd_args *a);
enum tr_status kcu_bce(struct kcu_ctx *c, const struct kern_bce_args *a);
enum tr_status kcu_dense_update(struct kcu_ctx *c, const struct kern_dense_update_args *a);
enum tr_status kcu_fill(struct kcu_ctx *c, const struct kern_fill_args *a);
enum tr_status kcu_copy_rows(struct kcu_ctx *c, const struct kern_copy_rows_args *a, int n);
enum tr_status kcu_sumsq(struct kcu_ctx *c, const struct kern_sumsq_args *a, int n);
enum tr_status kcu_cross_fwd(struct kcu_ctx *c, const struct kern_cross_fwd_args *a);
enum tr_status kcu_cross_bwd(struct kcu_ctx *c, const struct kern_cross_bwd_args *a);

/* embedding.cu */
size_t kcu_emb_update_ws_bytes(struct kcu_ctx *c, int64_t nidx, int64_t width, int ntables);
enum tr_status kcu_emb_fwd(struct kcu_ctx *c, const struct kern_emb_fwd_args *a, int n);
enum tr_status kcu_emb_update(struct kcu_ctx *c, const struct kern_emb_update_args *a, int n);
enum tr_status kcu_emb_rowsq(struct kcu_ctx *c, const struct kern_emb_update_args *a, int n);
enum tr_status kcu_mark_rows(struct kcu_ctx *c, const struct kern_mark_rows_args *a, int n);

/* metrics.cu */
enum tr_status kcu_metrics(struct kcu_ctx *c, const struct kern_metrics_args *a);

/* rows.cu */
enum tr_status kcu_move_rows(struct kcu_ctx *c, const struct kern_move_rows_args *a, int n);

/* interact.cu */
enum tr_status kcu_interact_fwd(struct kcu_ctx *c, const struct kern_interact_fwd_args *a);
enum tr_status kcu_interact_bwd(struct kcu_ctx *c, const struct kern_interact_bwd_args *a);

#endif
