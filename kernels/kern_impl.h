/* kern_impl.h: what the backend registry (backend.c) needs from each backend,
 * shared by the files of kernels/ only (and the CUDA plugin's entry points). Each open fills *be with a new instance or
 * returns an error (logged unless `quiet`, which "auto" sets while probing). */
#ifndef TR_KERN_IMPL_H
#define TR_KERN_IMPL_H

#include "kern.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tr_status kern_cpu_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be) TR_WUR;
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
/* What the CUDA plugin (libterarec-cuda.so, kernels/cuda/) exports; the registry
 * finds them with dlsym and never links them. */
enum tr_status kern_cuda_plugin_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be) TR_WUR;
int kern_cuda_plugin_device_count(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
