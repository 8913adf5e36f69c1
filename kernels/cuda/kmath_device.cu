/* kmath_device.cu: instantiates every kmath.h function in device code, so the
 * shared math is proven to compile for the GPU (make check-cuda), and exposes a
 * launcher that evaluates them on a device for the GPU parity tests. It does not
 * hold the CUDA backend's ops (those come with the CUDA backend). */
#include <cuda_runtime.h>

#include "../kmath_probe.h"

/* out[i*16 .. i*16+16): km_probe at input i. */
static __global__ void kmath_eval_kernel(const float *in, int n, uint64_t seed, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    km_probe(in[i], seed, i, out + (int64_t)i * 16);
}

extern "C" int kern_cuda_kmath_eval(const float *in_host, int n, uint64_t seed, float *out_host);

/* Evaluates the kmath functions on device 0 for n inputs; returns 0 on success,
 * -1 on any CUDA error (including "no device"). Blocking; not thread-safe. */
extern "C" int kern_cuda_kmath_eval(const float *in_host, int n, uint64_t seed, float *out_host)
{
    float *in = NULL, *out = NULL;
    int rc = -1;
    if (n <= 0)
        return n == 0 ? 0 : -1;
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
