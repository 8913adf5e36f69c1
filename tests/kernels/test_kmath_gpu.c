/* test_kmath_gpu.c: the kmath.h functions evaluated on a CUDA device agree with
 * the same functions on the host (the CPU backend's arithmetic). SKIPs when the
 * build has no CUDA or the machine has no device (a failure under make test-gpu,
 * TR_TEST_GPU=1); a SKIP is not a pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../kernels/kmath_probe.h"

#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
/* kernels/cuda/kmath_device.cu's launcher, found in the CUDA plugin. */
typedef int (*kmath_eval_fn)(const float *in_host, int n, uint64_t seed, float *out_host);

static int kmath_eval(const float *in, int n, uint64_t seed, float *out)
{
    kmath_eval_fn f = (kmath_eval_fn)kern_cuda_plugin_symbol("kern_cuda_kmath_eval");
    if (!f) {
        printf("# the CUDA plugin has no kern_cuda_kmath_eval: %s\n",
               kern_cuda_plugin_error() ? kern_cuda_plugin_error() : "symbol missing");
        return -1;
    }
    return f(in, n, seed, out);
}

/* The host side: the same km_probe the device kernel runs. */
static void host_eval(const float *in, int n, uint64_t seed, float *out)
{
    for (int i = 0; i < n; i++)
        km_probe(in[i], seed, i, out + (int64_t)i * 16);
}
#endif

static void device_matches_host(void)
{
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    if (kern_cuda_device_count() == 0)
        TH_SKIP_NO_GPU("no CUDA device");
    enum { N = 4096 };
    float *in = malloc(N * sizeof(float)), *dev = malloc(N * 16 * sizeof(float)), *host = malloc(N * 16 * sizeof(float));
    TH_REQUIRE(in && dev && host);
    for (int i = 0; i < N; i++)
        in[i] = (km_u01(km_rand3(9, 9, (uint64_t)i)) - 0.5f) * 40.0f;
    TH_EQ_REQ(kmath_eval(in, N, 1234, dev), 0);
    host_eval(in, N, 1234, host);
    int bad = 0;
    for (int i = 0; i < N * 16; i++) {
        /* transcendental functions may differ by a few ulp between libm and CUDA */
        float d = fabsf(dev[i] - host[i]), tol = 1e-6f + 4e-6f * fabsf(host[i]);
        if (!(d <= tol) && bad++ < 5)
            printf("# sample %d slot %d: device %.9g host %.9g\n", i / 16, i % 16, dev[i], host[i]);
    }
    TH_CHECKF(bad == 0, "%d kmath values differ between device and host", bad);
    free(in);
    free(dev);
    free(host);
#else
    TH_SKIP("built without CUDA");
#endif
}

/* NaN, +-inf and -0 give the same class of result (NaN, inf of a sign, or a value
 * within tolerance) in every slot on the device as on the host. */
static void device_nonfinite_matches_host(void)
{
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    if (kern_cuda_device_count() == 0)
        TH_SKIP_NO_GPU("no CUDA device");
    const float in[4] = {NAN, INFINITY, -INFINITY, -0.0f};
    float dev[4 * 16], host[4 * 16];
    TH_EQ_REQ(kmath_eval(in, 4, 1234, dev), 0);
    host_eval(in, 4, 1234, host);
    int bad = 0;
    for (int i = 0; i < 4 * 16; i++) {
        float d = dev[i], h = host[i];
        int same = isnan(h) ? isnan(d) : isinf(h) ? d == h : isfinite(d) && fabsf(d - h) <= 1e-6f + 4e-6f * fabsf(h);
        if (!same && bad++ < 5)
            printf("# input %g slot %d: device %.9g host %.9g\n", (double)in[i / 16], i % 16, d, h);
    }
    TH_CHECKF(bad == 0, "%d kmath values differ in class between device and host", bad);
#else
    TH_SKIP("built without CUDA");
#endif
}

static const struct th_case cases[] = {
    {"device_matches_host", device_matches_host},
    {"device_nonfinite_matches_host", device_nonfinite_matches_host},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
