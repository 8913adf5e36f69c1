/* backend_cuda.cu: the CUDA entry of the backend registry. The CUDA kernels are
 * not written yet, so opening it answers TR_ERR_UNSUPPORTED (saying whether a
 * device is visible); "auto" then falls back to the CPU. It allocates nothing. */
#define TR_SUBSYS TR_SUB_KERN
#include <cuda_runtime.h>
#include <string.h>

#include "../../common/check.h"
#include "../kern_impl.h"

extern "C" enum tr_status kern_cuda_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be)
{
    (void)o;
    memset(be, 0, sizeof *be);
    int n = kern_cuda_device_count();
    if (!quiet) {
        if (n == 0) {
            LOG_ERROR("backend 'cuda': no CUDA device is visible");
            LOG_HINT("use --backend cpu (or auto) on a machine without a GPU");
        } else {
            LOG_ERROR("backend 'cuda': not implemented yet (%d device(s) visible); the CUDA kernels are still to "
                      "come",
                      n);
            LOG_HINT("use --backend cpu (or auto)");
        }
    }
    return TR_ERR_UNSUPPORTED;
}
