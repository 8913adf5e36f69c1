/* backend_cpu.c: the CPU backend vtable. Memory is host memory from tr_big_alloc,
 * copies are memcpy, and threads are OpenMP threads shared with the BLAS. */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "cpu/cpu_internal.h"
#include "kern.h"

#ifdef _OPENMP
#include <omp.h>
#endif

struct cpu_ctx {
    int threads;
};

static struct cpu_ctx cpu_ctx_default = {1};

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

static int cpu_supports(void *ctx, enum kern_op op)
{
    (void)ctx;
    return (int)op >= 0 && op < KERN_OP_COUNT_;
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

static enum tr_status cpu_copy(void *ctx, void *dst, const void *src, size_t n, int dir)
{
    (void)ctx;
    (void)dir;
    if (n)
        memmove(dst, src, n);
    return TR_OK;
}

static size_t cpu_emb_ws(void *ctx, int64_t nidx, int64_t width, int ntables)
{
    struct cpu_ctx *c = ctx;
    return kern_cpu_emb_update_ws_bytes(nidx, width, ntables, c->threads);
}

static enum tr_status cpu_emb_fwd(void *ctx, const struct kern_emb_fwd_args *a, int n)
{
    (void)ctx;
    return kern_cpu_emb_fwd(a, n);
}

static enum tr_status cpu_emb_update(void *ctx, const struct kern_emb_update_args *a, int n)
{
    (void)ctx;
    return kern_cpu_emb_update(a, n);
}

#define CPU_WRAP(op, argt)                                                                \
    static enum tr_status cpu_##op(void *ctx, const struct argt *a)                       \
    {                                                                                     \
        (void)ctx;                                                                        \
        return kern_cpu_##op(a);                                                          \
    }
CPU_WRAP(gemm, kern_gemm_args)
CPU_WRAP(bias_act_fwd, kern_bias_act_fwd_args)
CPU_WRAP(bias_act_bwd, kern_bias_act_bwd_args)
CPU_WRAP(interact_fwd, kern_interact_fwd_args)
CPU_WRAP(interact_bwd, kern_interact_bwd_args)
CPU_WRAP(bce, kern_bce_args)
CPU_WRAP(dense_update, kern_dense_update_args)

static enum tr_status cpu_synchronize(void *ctx)
{
    (void)ctx;
    return TR_OK;
}

static void cpu_set_threads(void *ctx, int threads)
{
    struct cpu_ctx *c = ctx;
    if (threads <= 0)
        threads = kern_cpu_count();
    c->threads = threads;
#ifdef _OPENMP
    omp_set_num_threads(threads);
    omp_set_max_active_levels(1); /* table-batched ops run inner regions on one thread */
#endif
    kern_cpu_blas_set_threads(threads);
}

static const struct kern_backend_i cpu_iface = {
    .name = "cpu",
    .supports = cpu_supports,
    .mem_alloc = cpu_mem_alloc,
    .mem_release = cpu_mem_release,
    .copy = cpu_copy,
    .emb_update_ws_bytes = cpu_emb_ws,
    .gemm = cpu_gemm,
    .bias_act_fwd = cpu_bias_act_fwd,
    .bias_act_bwd = cpu_bias_act_bwd,
    .emb_fwd = cpu_emb_fwd,
    .emb_update = cpu_emb_update,
    .interact_fwd = cpu_interact_fwd,
    .interact_bwd = cpu_interact_bwd,
    .bce = cpu_bce,
    .dense_update = cpu_dense_update,
    .synchronize = cpu_synchronize,
    .set_threads = cpu_set_threads,
};

void kern_backend_cpu(struct kern_backend *be, int threads)
{
    be->i = &cpu_iface;
    be->ctx = &cpu_ctx_default;
    cpu_set_threads(be->ctx, threads);
}
