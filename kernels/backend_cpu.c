/* backend_cpu.c: the CPU backend. Memory is host memory from tr_big_alloc, copies
 * are memmove, there is no queue (every op has finished when it returns), and
 * ops run on OpenMP threads shared with the BLAS. Each instance keeps its own
 * thread count and applies it when one of its ops starts, so opening an instance
 * (e.g. to size a workspace for a plan) changes nothing in the process. */
#define TR_SUBSYS TR_SUB_KERN
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "cpu/cpu_internal.h"
#include "kern_impl.h"

#ifdef _OPENMP
#include <omp.h>
#endif

struct cpu_ctx {
    int threads;
    struct kern_cpu_gemm_cache *gemms; /* made by the first fused GEMM */
};

static const char *const op_names[KERN_OP_COUNT_] = {
    [KERN_OP_GEMM] = "gemm",
    [KERN_OP_BIAS_ACT_FWD] = "bias_act_fwd",
    [KERN_OP_BIAS_ACT_BWD] = "bias_act_bwd",
    [KERN_OP_EMB_FWD] = "emb_fwd",
    [KERN_OP_EMB_UPDATE] = "emb_update",
    [KERN_OP_INTERACT_FWD] = "interact_fwd",
    [KERN_OP_INTERACT_BWD] = "interact_bwd",
    [KERN_OP_BCE] = "bce",
    [KERN_OP_DENSE_UPDATE] = "dense_update",
    [KERN_OP_FILL] = "fill",
    [KERN_OP_COPY_ROWS] = "copy_rows",
    [KERN_OP_SUMSQ] = "sumsq",
    [KERN_OP_EMB_ROWSQ] = "emb_rowsq",
    [KERN_OP_CROSS_FWD] = "cross_fwd",
    [KERN_OP_CROSS_BWD] = "cross_bwd",
    [KERN_OP_MARK_ROWS] = "mark_rows",
    [KERN_OP_METRICS] = "metrics",
    [KERN_OP_MOVE_ROWS] = "move_rows",
};

const char *kern_op_name(enum kern_op op)
{
    if ((int)op < 0 || op >= KERN_OP_COUNT_ || !op_names[op])
        return "unknown";
    return op_names[op];
}

size_t kern_dtype_size(enum kern_dtype t)
{
    switch (t) {
    case KERN_F32: return 4;
    case KERN_I32: return 4;
    case KERN_I64: return 8;
    case KERN_F16: return 2;
    case KERN_I8: return 1;
    case KERN_I16: return 2;
    case KERN_U8: return 1;
    case KERN_F64: return 8;
    case KERN_BF16: return 2;
    }
    return 0;
}

int kern_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    return 1;
}

const char *kern_blas_info(void)
{
    return kern_cpu_blas_name();
}

/* Makes this instance's thread count the one OpenMP and the BLAS use. */
static void cpu_enter(const struct cpu_ctx *c)
{
#ifdef _OPENMP
    if (omp_get_max_threads() != c->threads) {
        omp_set_num_threads(c->threads);
        kern_cpu_blas_set_threads(c->threads);
    }
#else
    (void)c;
#endif
}

static int cpu_supports(void *ctx, enum kern_op op, enum kern_dtype dt)
{
    (void)ctx;
    return (int)op >= 0 && op < KERN_OP_COUNT_ && dt == KERN_F32;
}

static enum tr_status cpu_mem_alloc(void *ctx, size_t n, void **p)
{
    (void)ctx;
    return tr_big_alloc(n, p);
}

static void cpu_mem_release(void *ctx, void *p, size_t n)
{
    (void)ctx;
    tr_big_free(p, n);
}

/* host memory is the CPU's memory: staging needs nothing special */
static enum tr_status cpu_host_alloc(void *ctx, size_t n, void **p)
{
    (void)ctx;
    *p = tr_malloc(n ? n : 1);
    return *p ? TR_OK : TR_ERR_NOMEM;
}

static void cpu_host_release(void *ctx, void *p, size_t n)
{
    (void)ctx;
    (void)n;
    tr_free(p);
}

static enum tr_status cpu_copy(void *ctx, void *dst, const void *src, size_t n, enum kern_copy_dir dir)
{
    (void)ctx;
    if ((int)dir < KERN_H2D || dir > KERN_D2D)
        return TR_ERR_ARG;
    if (n && dst != src)
        memmove(dst, src, n);
    return TR_OK;
}

/* The CPU's ops take no scratch: the embedding update's workspace is the caller's,
 * and the interaction and metrics allocate host memory for the call. */
static void cpu_ws(void *ctx, enum kern_op op, const struct kern_shape *s, struct kern_ws *out)
{
    const struct cpu_ctx *c = ctx;
    memset(out, 0, sizeof *out);
    switch (op) {
    case KERN_OP_EMB_UPDATE:
    case KERN_OP_EMB_ROWSQ: out->args = kern_cpu_emb_update_ws_bytes(s->m, s->n, s->count, c->threads); break;
    case KERN_OP_INTERACT_FWD:
    case KERN_OP_INTERACT_BWD:
        out->call = s->n <= INT_MAX && s->k <= INT_MAX
                        ? kern_cpu_interact_call_bytes((int)s->n, (int)s->k, c->threads)
                        : SIZE_MAX;
        break;
    case KERN_OP_METRICS: out->call = kern_cpu_metrics_call_bytes(s->m); break;
    case KERN_OP_GEMM: /* a backward epilogue's partial sums (m, n) */
    case KERN_OP_BIAS_ACT_BWD: out->call = kern_cpu_bias_act_bwd_call_bytes(s->m, s->n); break;
    default: break;
    }
}

static enum tr_status cpu_reserve(void *ctx, const struct kern_ws *most)
{
    (void)ctx;
    (void)most;
    return TR_OK;
}

static size_t cpu_held_bytes(void *ctx, const struct kern_ws *most)
{
    (void)ctx;
    (void)most;
    return 0;
}

/* Every op: apply the instance's threads, then run the CPU implementation. */
#define CPU_WRAP(op, argt)                                                                \
    static enum tr_status cpu_##op(void *ctx, const struct argt *a)                       \
    {                                                                                     \
        cpu_enter(ctx);                                                                   \
        return kern_cpu_##op(a);                                                          \
    }
#define CPU_WRAP_N(op, argt)                                                              \
    static enum tr_status cpu_##op(void *ctx, const struct argt *a, int n)                \
    {                                                                                     \
        cpu_enter(ctx);                                                                   \
        return kern_cpu_##op(a, n);                                                       \
    }
static enum tr_status cpu_gemm(void *ctx, const struct kern_gemm_args *a)
{
    struct cpu_ctx *c = ctx;
    cpu_enter(c);
    return kern_cpu_gemm(&c->gemms, c->threads, a);
}
CPU_WRAP(bias_act_fwd, kern_bias_act_fwd_args)
CPU_WRAP(bias_act_bwd, kern_bias_act_bwd_args)
CPU_WRAP(interact_fwd, kern_interact_fwd_args)
CPU_WRAP(interact_bwd, kern_interact_bwd_args)
CPU_WRAP(bce, kern_bce_args)
CPU_WRAP(dense_update, kern_dense_update_args)
CPU_WRAP(fill, kern_fill_args)
CPU_WRAP(cross_fwd, kern_cross_fwd_args)
CPU_WRAP(cross_bwd, kern_cross_bwd_args)
CPU_WRAP_N(emb_fwd, kern_emb_fwd_args)
CPU_WRAP_N(emb_update, kern_emb_update_args)
CPU_WRAP_N(emb_rowsq, kern_emb_update_args)
CPU_WRAP_N(copy_rows, kern_copy_rows_args)
CPU_WRAP_N(sumsq, kern_sumsq_args)
CPU_WRAP_N(mark_rows, kern_mark_rows_args)
CPU_WRAP_N(move_rows, kern_move_rows_args)
CPU_WRAP(metrics, kern_metrics_args)

static void *cpu_queue(void *ctx)
{
    (void)ctx;
    return NULL;
}

static const char *cpu_device_id(void *ctx)
{
    (void)ctx;
    return NULL;
}

static enum tr_status cpu_synchronize(void *ctx)
{
    (void)ctx;
    return TR_OK;
}

static int64_t cpu_mem_peak(void *ctx)
{
    (void)ctx;
    return -1; /* tr_big_alloc's bytes are in tr_alloc_get_stats */
}

static int64_t cpu_mem_now(void *ctx)
{
    (void)ctx;
    return -1;
}

static void cpu_destroy(void *ctx)
{
    struct cpu_ctx *c = ctx;
    if (c)
        kern_cpu_gemm_cache_free(&c->gemms);
    tr_free(ctx);
}

static const struct kern_backend_i cpu_iface = {
    .name = "cpu",
    .host_memory = 1,
    .relu_mask = 1,
    .supports = cpu_supports,
    .mem_alloc = cpu_mem_alloc,
    .mem_release = cpu_mem_release,
    .host_alloc = cpu_host_alloc,
    .host_release = cpu_host_release,
    .copy = cpu_copy,
    .ws = cpu_ws,
    .reserve = cpu_reserve,
    .held_bytes = cpu_held_bytes,
    .gemm = cpu_gemm,
    .bias_act_fwd = cpu_bias_act_fwd,
    .bias_act_bwd = cpu_bias_act_bwd,
    .emb_fwd = cpu_emb_fwd,
    .emb_update = cpu_emb_update,
    .emb_rowsq = cpu_emb_rowsq,
    .interact_fwd = cpu_interact_fwd,
    .interact_bwd = cpu_interact_bwd,
    .bce = cpu_bce,
    .dense_update = cpu_dense_update,
    .fill = cpu_fill,
    .copy_rows = cpu_copy_rows,
    .sumsq = cpu_sumsq,
    .cross_fwd = cpu_cross_fwd,
    .cross_bwd = cpu_cross_bwd,
    .mark_rows = cpu_mark_rows,
    .metrics = cpu_metrics,
    .move_rows = cpu_move_rows,
    .queue = cpu_queue,
    .device_id = cpu_device_id,
    .synchronize = cpu_synchronize,
    .mem_peak = cpu_mem_peak,
    .mem_now = cpu_mem_now,
    .destroy = cpu_destroy,
};

enum tr_status kern_cpu_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be)
{
    (void)quiet;
    memset(be, 0, sizeof *be);
    if (o->precision == KERN_PREC_BF16 || o->precision == KERN_PREC_FP16)
        return TR_ERR_UNSUPPORTED; /* the registry says why (backend.c) */
    struct cpu_ctx *c = tr_calloc(1, sizeof *c);
    if (!c)
        return TR_ERR_NOMEM;
    c->threads = o->threads > 0 ? o->threads : kern_cpu_count();
#ifdef _OPENMP
    omp_set_max_active_levels(1); /* table-batched ops run inner regions on one thread */
#endif
    be->i = &cpu_iface;
    be->ctx = c;
    return TR_OK;
}
