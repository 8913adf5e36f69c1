/* test_backend.c: the backend registry and the CUDA/NCCL check macros. Backends
 * open by name with their own state (two CPU instances keep their own thread
 * counts, and opening one changes nothing in the process); unknown names and
 * backends this build or machine cannot run are refused with the documented
 * status; "auto" falls back to the CPU. TR_CUDA_CHECK and TR_NCCL_CHECK turn a
 * failing call into TR_ERR_CUDA / TR_ERR_NCCL and clear CUDA's last error; this
 * runs without a GPU (the calls fail for lack of a device or a valid argument). */
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if defined(TR_HAVE_NCCL) && TR_HAVE_NCCL
#include <nccl.h>
#endif
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../kernels/kern.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static void registry(void)
{
    int n = 0, has_cpu = 0;
    for (; kern_backend_name(n); n++)
        has_cpu |= !strcmp(kern_backend_name(n), "cpu");
    TH_CHECK(has_cpu);
    TH_CHECK(kern_backend_name(-1) == NULL);
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    TH_EQ(n, 2);
    TH_EQ_STR(kern_backend_name(0), "cuda");
#else
    TH_EQ(n, 1);
#endif
    struct kern_backend be;
    TH_EQ_ST(kern_backend_open("tpu", NULL, &be), TR_ERR_ARG);
    TH_CHECK(be.i == NULL);
    TH_EQ_ST(kern_backend_open(NULL, NULL, &be), TR_ERR_ARG);
    struct kern_backend_opts quiet = {.device = -1, .quiet = 1}; /* the same answers, without a message */
    TH_EQ_ST(kern_backend_open("tpu", &quiet, &be), TR_ERR_ARG);
    TH_EQ_ST(kern_backend_open("cuda", &quiet, &be), TR_ERR_UNSUPPORTED);
    /* cuda: not in this build, or not implemented yet (with or without a device) */
    TH_EQ_ST(kern_backend_open("cuda", NULL, &be), TR_ERR_UNSUPPORTED);
    TH_CHECK(be.i == NULL);
    TH_EQ_ST_REQ(kern_backend_open("auto", NULL, &be), TR_OK);
    TH_EQ_STR(be.i->name, "cpu"); /* until the CUDA backend lands */
    TH_CHECK(be.i->queue(be.ctx) == NULL);
    TH_EQ_ST(be.i->synchronize(be.ctx), TR_OK);
    kern_backend_close(&be);
    TH_CHECK(be.i == NULL);
    kern_backend_close(&be);
}

/* Two instances with different thread counts; opening them or sizing a
 * workspace on one never changes the process's OpenMP setting; each op runs on
 * its own instance's threads. */
static void instances_are_independent(void)
{
#ifdef _OPENMP
    omp_set_num_threads(3);
#endif
    struct kern_backend a, b;
    struct kern_backend_opts oa = {.threads = 1, .device = -1}, ob = {.threads = 2, .device = -1};
    TH_EQ_ST_REQ(kern_backend_open("cpu", &oa, &a), TR_OK);
    TH_EQ_ST_REQ(kern_backend_open("cpu", &ob, &b), TR_OK);
    size_t wa = kern_emb_update_ws_bytes(&a, 1000, 16, 8), wb = kern_emb_update_ws_bytes(&b, 1000, 16, 8);
    TH_CHECKF(wb > wa, "workspace for 2 threads (%zu) should exceed that for 1 (%zu)", wb, wa);
    /* the CPU takes no scratch (reserve has nothing to do): the interaction's buffers
     * are per thread and per call, host memory */
    const struct kern_shape is = {.m = 1000, .n = 27, .k = 16, .count = 1};
    struct kern_ws w1, w2;
    a.i->ws(a.ctx, KERN_OP_INTERACT_FWD, &is, &w1);
    b.i->ws(b.ctx, KERN_OP_INTERACT_FWD, &is, &w2);
    TH_CHECK(w1.scratch == 0 && w1.call > 0 && w2.call == 2 * w1.call);
    TH_CHECK(a.i->host_memory);
    TH_EQ_ST(a.i->reserve(a.ctx, &w2), TR_OK);
    TH_EQ(a.i->held_bytes(a.ctx, &w2), 0);
#ifdef _OPENMP
    TH_EQ(omp_get_max_threads(), 3);
#endif
    /* an op of each: both fill correctly whatever the other set */
    float x[64], y[64];
    struct kern_fill_args f = {.kind = KERN_FILL_CONST, .dst = x, .rows = 8, .cols = 8, .ld = 8, .value = 2.0f};
    TH_EQ_ST(a.i->fill(a.ctx, &f), TR_OK);
    f.dst = y;
    TH_EQ_ST(b.i->fill(b.ctx, &f), TR_OK);
    TH_CHECK(x[63] == 2.0f && y[0] == 2.0f);
    TH_CHECK(a.i->supports(a.ctx, KERN_OP_GEMM, KERN_F32));
    TH_CHECK(!a.i->supports(a.ctx, KERN_OP_GEMM, KERN_BF16));
    TH_CHECK(!a.i->supports(a.ctx, KERN_OP_COUNT_, KERN_F32));
    TH_EQ_ST(a.i->copy(a.ctx, y, x, sizeof x, (enum kern_copy_dir)7), TR_ERR_ARG);
    kern_backend_close(&a);
    kern_backend_close(&b);
}

#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
static enum tr_status bad_cuda_call(void)
{
    TR_CUDA_CHECK(cudaSetDevice(-1));
    return TR_OK;
}
#endif
#if defined(TR_HAVE_NCCL) && TR_HAVE_NCCL
static enum tr_status bad_nccl_call(void)
{
    TR_NCCL_CHECK(ncclGetVersion(NULL));
    return TR_OK;
}
#endif

static void check_macros(void)
{
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    TH_EQ_ST(bad_cuda_call(), TR_ERR_CUDA);
    /* with a driver, an invalid device is an ordinary error that the macro clears;
     * without one every call reports the missing driver */
    if (kern_cuda_device_count() > 0)
        TH_EQ((int)cudaGetLastError(), (int)cudaSuccess);
#if defined(TR_HAVE_NCCL) && TR_HAVE_NCCL
    TH_EQ_ST(bad_nccl_call(), TR_ERR_NCCL);
#endif
#else
    TH_SKIP("built without CUDA");
#endif
}

/* The CUDA backend is a plugin found through the program's RUNPATH; it loads (every
 * symbol it takes from the program resolves) and answers without a device. */
static void cuda_plugin_loads(void)
{
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    int (*count)(void) = (int (*)(void))kern_cuda_plugin_symbol("kern_cuda_plugin_device_count");
    TH_CHECKF(count != NULL, "libterarec-cuda.so: %s",
              kern_cuda_plugin_error() ? kern_cuda_plugin_error() : "no kern_cuda_plugin_device_count");
    TH_CHECK(kern_cuda_plugin_symbol("kern_cuda_plugin_open") != NULL);
    TH_CHECK(kern_cuda_plugin_symbol("no_such_symbol") == NULL);
    if (count)
        TH_EQ(count(), kern_cuda_device_count());
    /* a sizing-only instance needs no device: what terarec plan --backend cuda opens */
    struct kern_backend be;
    struct kern_backend_opts o = {.device = -1, .sizing_only = 1};
    TH_EQ_ST_REQ(kern_backend_open("cuda", &o, &be), TR_OK);
    TH_CHECK(kern_emb_update_ws_bytes(&be, 1000, 16, 4) > 0);
    TH_EQ_ST(be.i->synchronize(be.ctx), TR_OK);
    /* and answers every op's working memory from its real chunking, without a device */
    TH_CHECK(!be.i->host_memory);
    struct kern_ws w, most = {0};
    const struct kern_shape one = {.m = 1, .n = 27, .k = 64, .count = 1}, big = {.m = 1 << 20, .n = 27, .k = 64};
    be.i->ws(be.ctx, KERN_OP_INTERACT_FWD, &one, &w);
    TH_EQ(w.scratch, (size_t)27 * 27 * 4); /* one sample's (n, n) products */
    be.i->ws(be.ctx, KERN_OP_INTERACT_BWD, &big, &w);
    TH_CHECKF(w.scratch >= ((size_t)64 << 20) - 27 * 27 * 4 && w.scratch <= (size_t)64 << 20,
              "a batch of 1 Mi samples: the products in chunks near 64 MiB, not %zu bytes", w.scratch);
    kern_ws_max(&most, &w);
    const struct kern_shape single = {.m = 1 << 20, .n = 1, .k = 64};
    be.i->ws(be.ctx, KERN_OP_INTERACT_FWD, &single, &w);
    TH_EQ(w.scratch, 0); /* no pairs, no products */
    const struct kern_shape gemm = {.m = 4096, .n = 1024, .k = 1024, .count = 1};
    be.i->ws(be.ctx, KERN_OP_GEMM, &gemm, &w);
    TH_CHECK(w.scratch == 0 && w.call == 0 && w.args == 0); /* the cuBLASLt workspace is held from open */
    const struct kern_shape rows = {.m = 100000, .n = 64};
    be.i->ws(be.ctx, KERN_OP_BIAS_ACT_BWD, &rows, &w);
    TH_CHECK(w.scratch > 0);
    const struct kern_shape emb = {.m = 4096, .n = 16, .count = 26};
    be.i->ws(be.ctx, KERN_OP_EMB_UPDATE, &emb, &w);
    TH_CHECK(w.args == kern_emb_update_ws_bytes(&be, 4096, 16, 26) && w.scratch > 0 && w.staging > 0);
    const struct kern_shape test = {.m = 1000000};
    be.i->ws(be.ctx, KERN_OP_METRICS, &test, &w);
    TH_CHECK(w.call >= 16 * (size_t)1000000 && w.scratch == 0);
    TH_EQ_ST(be.i->reserve(be.ctx, &most), TR_OK); /* sizing-only: records, allocates nothing */
    TH_EQ(be.i->held_bytes(be.ctx, &most), ((size_t)32 << 20) + most.scratch);
    kern_backend_close(&be);
#else
    TH_SKIP("built without CUDA");
#endif
}

static const struct th_case cases[] = {
    {"registry", registry},
    {"cuda_plugin_loads", cuda_plugin_loads},
    {"instances_are_independent", instances_are_independent},
    {"check_macros", check_macros},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
