/* backend_cuda.cu: the CUDA backend's instance: device choice (the PMIx local rank
 * modulo the visible devices, or an explicit ordinal), its stream, the cuBLAS and
 * cuBLASLt handles with their workspace, device memory, copies, scratch, and the
 * vtable that points at the ops of dense.cu, embedding.cu and interact.cu.
 * An instance owns one non-blocking stream; every op and copy is queued on it.
 * It does not do collectives (worker/comm_*) and does not pick GPUs for other
 * processes. A sizing-only instance (terarec plan on a login node) touches no
 * device and answers only ws and held_bytes. */
#define TR_SUBSYS TR_SUB_KERN
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../common/alloc.h"
#include "../kern_impl.h"
#include "cuda_internal.h"

/* Replaces the scratch with one of `want` bytes. */
static enum tr_status scratch_take(struct kcu_ctx *c, size_t want)
{
    /* earlier ops may still read the old buffer */
    TR_CHECK(kcu_sync(c));
    TR_CUDA_CHECK(cudaFree(c->scratch));
    kcu_account(c, -(int64_t)c->scratch_bytes);
    c->scratch = NULL;
    c->scratch_bytes = 0;
    if (cudaMalloc(&c->scratch, want) != cudaSuccess) {
        (void)cudaGetLastError();
        c->scratch = NULL;
        LOG_ERROR("out of cuda memory on device %d allocating op scratch: %zu bytes", c->device, want);
        return TR_ERR_NOMEM;
    }
    c->scratch_bytes = want;
    kcu_account(c, (int64_t)want);
    return TR_OK;
}

/* Replaces the staging buffer with one of `want` bytes. */
static enum tr_status pinned_take(struct kcu_ctx *c, size_t want)
{
    TR_CHECK(kcu_sync(c)); /* a queued copy may still read or write the old buffer */
    if (c->pinned) /* the runtime documents NULL as a no-op for cudaFree, not for cudaFreeHost */
        TR_CUDA_CHECK(cudaFreeHost(c->pinned));
    c->pinned = NULL;
    c->pinned_bytes = 0;
    if (cudaHostAlloc(&c->pinned, want, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        c->pinned = NULL;
        LOG_ERROR("out of pinned host memory allocating op results: %zu bytes", want);
        return TR_ERR_NOMEM;
    }
    c->pinned_bytes = want;
    return TR_OK;
}

enum tr_status kcu_scratch(struct kcu_ctx *c, size_t n, void **p)
{
    if (n > c->scratch_bytes) {
        /* the fallback: an op's ws answer fell short of what it takes */
        if (c->reserved && !c->scratch_warned) {
            c->scratch_warned = 1;
            LOG_WARN("op scratch grew inside a step: %zu bytes; the plan said %zu (device %d)", n,
                     c->planned.scratch, c->device);
        }
        TR_CHECK(scratch_take(c, n + n / 4)); /* room to grow a little without another round trip */
    }
    *p = c->scratch;
    return TR_OK;
}

enum tr_status kcu_pinned(struct kcu_ctx *c, size_t n, void **p)
{
    if (n > c->pinned_bytes) {
        if (c->reserved && !c->pinned_warned) {
            c->pinned_warned = 1;
            LOG_WARN("op staging grew inside a step: %zu bytes; the plan said %zu (device %d)", n,
                     c->planned.staging, c->device);
        }
        TR_CHECK(pinned_take(c, n < 4096 ? 4096 : n));
    }
    *p = c->pinned;
    return TR_OK;
}

enum tr_status kcu_sync(struct kcu_ctx *c)
{
    if (c->sizing_only)
        return TR_OK;
    TR_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return TR_OK;
}

/* ---- the vtable --------------------------------------------------------------------- */

/* Makes c's device the calling thread's current one (launches go to the current
 * device; a process may hold instances on several). TR_ERR_UNSUPPORTED for a
 * sizing-only instance, which runs no ops. */
static enum tr_status cu_enter(struct kcu_ctx *c)
{
    if (c->sizing_only)
        return TR_ERR_UNSUPPORTED;
    int d = -1;
    TR_CUDA_CHECK(cudaGetDevice(&d));
    if (d != c->device)
        TR_CUDA_CHECK(cudaSetDevice(c->device));
    return TR_OK;
}

static int cu_supports(void *ctx, enum kern_op op, enum kern_dtype dt)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    if (c->sizing_only || (int)op < 0 || op >= KERN_OP_COUNT_)
        return 0;
    if (dt == KERN_F32)
        return 1;
    /* bf16 / fp16 inputs exist inside the GEMMs only (fp32 in memory, see kern.h) */
    return (op == KERN_OP_GEMM || op == KERN_OP_INTERACT_FWD || op == KERN_OP_INTERACT_BWD) &&
           (dt == KERN_BF16 || dt == KERN_F16);
}

static enum tr_status cu_mem_alloc(void *ctx, size_t n, void **p)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    *p = NULL;
    TR_CHECK(cu_enter(c));
    if (n == 0)
        n = 1; /* a valid, distinct pointer, as the CPU's allocator gives */
    cudaError_t e = cudaMalloc(p, n);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            LOG_INFO(KERN, "device %d: %zu of %zu bytes free", c->device, free_b, total_b);
        (void)cudaGetLastError();
        *p = NULL;
        return TR_ERR_NOMEM; /* kern_alloc names the tensor */
    }
    TR_CUDA_CHECK(e);
    /* zero-filled, as kern.h promises, and finished before it is handed out: another
     * instance (another stream) may be the first to use it */
    cudaError_t z = cudaMemsetAsync(*p, 0, n, c->stream);
    if (z == cudaSuccess)
        z = cudaStreamSynchronize(c->stream);
    if (z != cudaSuccess) {
        (void)cudaFree(*p);
        *p = NULL;
        TR_CUDA_CHECK(z);
    }
    kcu_account(c, (int64_t)n);
    return TR_OK;
}

static void cu_mem_release(void *ctx, void *p, size_t n)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    (void)n;
    if (!p)
        return;
    /* queued work may still use it: cudaFree waits for the device, which is what we want */
    if (!TR_CUDA_OK_(cudaFree(p)))
        LOG_WARN("device %d: freeing %zu bytes failed", c->device, n);
    kcu_account(c, -(int64_t)(n ? n : 1));
}

/* page-locked, so copies on the stream run at the link's speed (staging for MPI) */
static enum tr_status cu_host_alloc(void *ctx, size_t n, void **p)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    *p = NULL;
    TR_CHECK(cu_enter(c));
    cudaError_t e = cudaHostAlloc(p, n ? n : 1, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        *p = NULL;
        LOG_ERROR("out of pinned host memory: %zu bytes", n);
        return TR_ERR_NOMEM;
    }
    TR_CUDA_CHECK(e);
    return TR_OK;
}

static void cu_host_release(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (p && !TR_CUDA_OK_(cudaFreeHost(p)))
        LOG_WARN("freeing %zu bytes of pinned host memory failed", n);
}

static enum tr_status cu_copy(void *ctx, void *dst, const void *src, size_t n, enum kern_copy_dir dir)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    if ((int)dir < KERN_H2D || dir > KERN_D2D)
        return TR_ERR_ARG;
    if (n == 0 || dst == src)
        return TR_OK;
    TR_CHECK(cu_enter(c));
    static const cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    TR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kinds[dir], c->stream));
    /* kern.h: when copy returns, an H2D source may be reused (an async copy from
     * pinned memory would still read it) and a D2H destination holds the data */
    if (dir != KERN_D2D)
        TR_CHECK(kcu_sync(c));
    return TR_OK;
}

/* Each op's working memory, from the file that implements it. */
static void cu_ws(void *ctx, enum kern_op op, const struct kern_shape *s, struct kern_ws *out)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    memset(out, 0, sizeof *out);
    switch (op) {
    case KERN_OP_INTERACT_FWD:
    case KERN_OP_INTERACT_BWD: out->scratch = kcu_interact_scratch_bytes(s->m, s->n); break;
    case KERN_OP_EMB_FWD:
    case KERN_OP_EMB_UPDATE:
    case KERN_OP_EMB_ROWSQ: kcu_emb_ws(c, op, s, out); break;
    case KERN_OP_METRICS: kcu_metrics_ws(s->m, out); break;
    default: kcu_dense_ws(op, s, out); break;
    }
}

static enum tr_status cu_reserve(void *ctx, const struct kern_ws *most)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    c->reserved = 1;
    kern_ws_max(&c->planned, most);
    if (c->sizing_only)
        return TR_OK;
    TR_CHECK(cu_enter(c));
    if (most->scratch > c->scratch_bytes)
        TR_CHECK(scratch_take(c, most->scratch));
    if (most->staging > c->pinned_bytes)
        TR_CHECK(pinned_take(c, most->staging < 4096 ? 4096 : most->staging));
    LOG_DEBUG(KERN, "device %d: op scratch %zu bytes, staging %zu bytes", c->device, c->scratch_bytes,
              c->pinned_bytes);
    return TR_OK;
}

/* The cuBLASLt workspace (taken at open) and the scratch reserve takes exactly. */
static size_t cu_held_bytes(void *ctx, const struct kern_ws *most)
{
    (void)ctx;
    return KCU_LT_WS_BYTES + most->scratch;
}

#define CU_WRAP(op, argt)                                                                 \
    static enum tr_status cu_##op(void *ctx, const struct argt *a)                        \
    {                                                                                     \
        struct kcu_ctx *c = (struct kcu_ctx *)ctx;                                        \
        TR_CHECK(cu_enter(c));                                                            \
        return kcu_##op(c, a);                                                            \
    }
#define CU_WRAP_N(op, argt)                                                               \
    static enum tr_status cu_##op(void *ctx, const struct argt *a, int n)                 \
    {                                                                                     \
        struct kcu_ctx *c = (struct kcu_ctx *)ctx;                                        \
        TR_CHECK(cu_enter(c));                                                            \
        return kcu_##op(c, a, n);                                                         \
    }
CU_WRAP(gemm, kern_gemm_args)
CU_WRAP(bias_act_fwd, kern_bias_act_fwd_args)
CU_WRAP(bias_act_bwd, kern_bias_act_bwd_args)
CU_WRAP(interact_fwd, kern_interact_fwd_args)
CU_WRAP(interact_bwd, kern_interact_bwd_args)
CU_WRAP(bce, kern_bce_args)
CU_WRAP(dense_update, kern_dense_update_args)
CU_WRAP(fill, kern_fill_args)
CU_WRAP(cross_fwd, kern_cross_fwd_args)
CU_WRAP(cross_bwd, kern_cross_bwd_args)
CU_WRAP_N(emb_fwd, kern_emb_fwd_args)
CU_WRAP_N(emb_update, kern_emb_update_args)
CU_WRAP_N(emb_rowsq, kern_emb_update_args)
CU_WRAP_N(copy_rows, kern_copy_rows_args)
CU_WRAP_N(sumsq, kern_sumsq_args)
CU_WRAP_N(mark_rows, kern_mark_rows_args)
CU_WRAP(metrics, kern_metrics_args)

static void *cu_queue(void *ctx)
{
    return (void *)((struct kcu_ctx *)ctx)->stream;
}

static enum tr_status cu_synchronize(void *ctx)
{
    return kcu_sync((struct kcu_ctx *)ctx);
}

static const char *cu_device_id(void *ctx)
{
    const struct kcu_ctx *c = (const struct kcu_ctx *)ctx;
    return c->uuid[0] ? c->uuid : NULL;
}

static int64_t cu_mem_peak(void *ctx)
{
    return ((struct kcu_ctx *)ctx)->mem_peak;
}

static void cu_destroy(void *ctx)
{
    struct kcu_ctx *c = (struct kcu_ctx *)ctx;
    if (!c)
        return;
    if (!c->sizing_only) {
        if (c->stream)
            (void)cudaStreamSynchronize(c->stream);
        kcu_dense_free(c);
        if (c->blas)
            (void)cublasDestroy(c->blas);
        if (c->lt)
            (void)cublasLtDestroy(c->lt);
        (void)cudaFree(c->lt_ws);
        (void)cudaFree(c->scratch);
        (void)cudaFreeHost(c->pinned);
        if (c->stream)
            (void)cudaStreamDestroy(c->stream);
        (void)cudaGetLastError();
    }
    tr_free(c);
}

static const struct kern_backend_i cuda_iface = {
    .name = "cuda",
    .supports = cu_supports,
    .mem_alloc = cu_mem_alloc,
    .mem_release = cu_mem_release,
    .host_alloc = cu_host_alloc,
    .host_release = cu_host_release,
    .copy = cu_copy,
    .ws = cu_ws,
    .reserve = cu_reserve,
    .held_bytes = cu_held_bytes,
    .gemm = cu_gemm,
    .bias_act_fwd = cu_bias_act_fwd,
    .bias_act_bwd = cu_bias_act_bwd,
    .emb_fwd = cu_emb_fwd,
    .emb_update = cu_emb_update,
    .emb_rowsq = cu_emb_rowsq,
    .interact_fwd = cu_interact_fwd,
    .interact_bwd = cu_interact_bwd,
    .bce = cu_bce,
    .dense_update = cu_dense_update,
    .fill = cu_fill,
    .copy_rows = cu_copy_rows,
    .sumsq = cu_sumsq,
    .cross_fwd = cu_cross_fwd,
    .cross_bwd = cu_cross_bwd,
    .mark_rows = cu_mark_rows,
    .metrics = cu_metrics,
    .queue = cu_queue,
    .device_id = cu_device_id,
    .synchronize = cu_synchronize,
    .mem_peak = cu_mem_peak,
    .destroy = cu_destroy,
};

/* Sets up the device state of c on c->device; on error the caller destroys c. */
static enum tr_status open_device(struct kcu_ctx *c)
{
    TR_CUDA_CHECK(cudaSetDevice(c->device));
    cudaDeviceProp p;
    TR_CUDA_CHECK(cudaGetDeviceProperties(&p, c->device));
    c->sm_count = p.multiProcessorCount;
    c->smem_optin = p.sharedMemPerBlockOptin;
    /* nvidia-smi's form of the UUID: GPU-8-4-4-4-12 hex digits */
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(c->uuid, sizeof c->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
             u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    if (c->prec == KERN_PREC_BF16 && p.major < 8) {
        LOG_ERROR("backend 'cuda': --amp bf16 needs compute capability 8.0 or newer; device %d (%s) is %d.%d",
                  c->device, p.name, p.major, p.minor);
        LOG_HINT("use --amp fp16 on this GPU");
        return TR_ERR_UNSUPPORTED;
    }
    TR_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    KCU_BLAS_CHECK(cublasLtCreate(&c->lt));
    KCU_BLAS_CHECK(cublasCreate(&c->blas));
    KCU_BLAS_CHECK(cublasSetStream(c->blas, c->stream));
    /* fp32 means fp32: the default math mode never rounds CUBLAS_COMPUTE_32F to TF32
     * (NVIDIA_TF32_OVERRIDE aside); the calls name their compute type themselves */
    KCU_BLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    if (cudaMalloc(&c->lt_ws, KCU_LT_WS_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();
        c->lt_ws = NULL;
        LOG_ERROR("out of cuda memory on device %d allocating the cuBLASLt workspace: %zu bytes", c->device,
                  KCU_LT_WS_BYTES);
        return TR_ERR_NOMEM;
    }
    c->lt_ws_bytes = KCU_LT_WS_BYTES;
    kcu_account(c, (int64_t)KCU_LT_WS_BYTES);
    TR_CHECK(kcu_dense_init(c));
    LOG_INFO(KERN, "backend cuda: device %d (%s, sm_%d%d, %d SMs, %.1f GiB), gemm precision %s", c->device, p.name,
             p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / 1073741824.0,
             kern_precision_name(c->prec));
    return TR_OK;
}

extern "C" enum tr_status kern_cuda_plugin_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be)
{
    memset(be, 0, sizeof *be);
    if (o->precision < KERN_PREC_FP32 || o->precision > KERN_PREC_FP16)
        return TR_ERR_ARG;
    struct kcu_ctx *c = (struct kcu_ctx *)tr_calloc(1, sizeof *c);
    if (!c)
        return TR_ERR_NOMEM;
    c->prec = (enum kern_precision)o->precision;
    if (o->sizing_only) {
        c->sizing_only = 1;
        c->device = -1;
        be->i = &cuda_iface;
        be->ctx = c;
        return TR_OK;
    }
    int n = kern_cuda_plugin_device_count();
    if (n == 0) {
        tr_free(c);
        if (!quiet) {
            LOG_ERROR("backend 'cuda': no CUDA device is visible");
            LOG_HINT("use --backend cpu (or auto) on a machine without a GPU; check CUDA_VISIBLE_DEVICES and "
                     "nvidia-smi");
        }
        return TR_ERR_UNSUPPORTED;
    }
    /* a task that sees one device was bound to it by the scheduler (srun
     * --gpus-per-task=1): that one is its own, and the worker checks its node's
     * workers against --gpus_per_node by the devices' UUIDs; a view of more than
     * one device but fewer than --gpus_per_node is a mistake */
    const int bound = o->device < 0 && n == 1;
    if (o->device < 0 && o->gpus > n && !bound) {
        tr_free(c);
        if (!quiet) {
            char host[64] = "this node";
            gethostname(host, sizeof host - 1);
            LOG_ERROR("--gpus_per_node %d, but %d CUDA device(s) are visible on %s", o->gpus, n, host);
            LOG_HINT("check CUDA_VISIBLE_DEVICES, the allocation's --gpus-per-node and nvidia-smi; or lower "
                     "--gpus_per_node");
        }
        return TR_ERR_ARG;
    }
    const int per_node = o->gpus > 0 && !bound ? o->gpus : n;
    c->device = o->device >= 0 ? o->device : (o->local_rank > 0 ? o->local_rank : 0) % per_node;
    if (c->device >= n) {
        tr_free(c);
        if (!quiet) {
            LOG_ERROR("backend 'cuda': device %d asked for, but %d device(s) are visible", o->device, n);
            LOG_HINT("device ordinals are 0..%d (after CUDA_VISIBLE_DEVICES)", n - 1);
        }
        return TR_ERR_ARG;
    }
    enum tr_status rc = open_device(c);
    if (rc != TR_OK) {
        cu_destroy(c);
        return rc;
    }
    be->i = &cuda_iface;
    be->ctx = c;
    return TR_OK;
}
