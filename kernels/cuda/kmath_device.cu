/* kmath_device.cu: instantiates every kmath.h function in device code, so the
 * shared math is proven to compile for the GPU (make check-cuda), and exposes a
 * launcher that evaluates them on a device for the GPU parity tests. It does not
 * hold the CUDA backend's ops (those come with the CUDA backend). */
#include <cuda_runtime.h>

#include "../kmath.h"

/* out[i*16 + k]: the k-th kmath function evaluated at input i (see the host side
 * of the GPU parity test for the meaning of each slot). */
static __global__ void kmath_eval_kernel(const float *in, int n, uint64_t seed, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = in[i];
    float *o = out + (int64_t)i * 16;
    struct km_optim h = {0.1f, 1e-7f};
    float p = x, acc = 0.1f;
    o[0] = km_relu(x);
    o[1] = km_relu_grad(x, 2.0f);
    o[2] = km_sigmoid(x);
    o[3] = km_bce_logit(x, 1.0f);
    o[4] = km_bce_logit_grad(x, 0.0f);
    km_sgd_step(&p, x, &h);
    o[5] = p;
    p = x;
    km_adagrad_step(&p, &acc, x, &h);
    o[6] = p;
    o[7] = acc;
    o[8] = km_init_embedding(seed, 3, (uint64_t)i, 0.5f);
    o[9] = km_init_glorot(seed, 0x100, (uint64_t)i, 16.0f, 512.0f);
    o[10] = km_init_bias(seed, 0x200, (uint64_t)i, 512.0f);
    o[11] = (float)km_powerlaw_id(km_rand3(seed, 7, (uint64_t)i), 1000);
    o[12] = km_half_to_float(km_float_to_half(x));
    o[13] = (float)km_tri_index(i % 27 + 1, 0) + (float)km_tri_count(27) + (float)km_interact_width(27, 16, 1);
    o[14] = km_bag_scale(i % 5, 1) + km_u01_open(km_rand3(seed, 1, (uint64_t)i)) + km_normal(km_mix64((uint64_t)i));
    o[15] = 0.0f;
}

extern "C" int kern_cuda_kmath_eval(const float *in_host, int n, uint64_t seed, float *out_host);

/* Evaluates the kmath functions on device 0 for n inputs; returns 0 on success,
 * -1 on any CUDA error (including "no device"). Blocking; not thread-safe. */
extern "C" int kern_cuda_kmath_eval(const float *in_host, int n, uint64_t seed, float *out_host)
{
    float *in = NULL, *out = NULL;
    int rc = -1;
    if (cudaMalloc(&in, (size_t)n * sizeof(float)) != cudaSuccess)
        goto done;
    if (cudaMalloc(&out, (size_t)n * 16 * sizeof(float)) != cudaSuccess)
        goto done;
    if (cudaMemcpy(in, in_host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        goto done;
    kmath_eval_kernel<<<(n + 127) / 128, 128>>>(in, n, seed, out);
    if (cudaGetLastError() != cudaSuccess)
        goto done;
    if (cudaMemcpy(out_host, out, (size_t)n * 16 * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
        goto done;
    rc = 0;
done:
    cudaFree(in);
    cudaFree(out);
    cudaGetLastError();
    return rc;
}
