/* device.cu: CUDA device discovery for the backend registry and the GPU tests.
 * A machine without a GPU (or without a driver) reports zero devices; nothing
 * here aborts. It does not select or initialise a device. */
#include <cuda_runtime.h>

#include "../kern_impl.h"

extern "C" int kern_cuda_plugin_device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear: "no device" and "no driver" are not errors here */
        return 0;
    }
    return n;
}
