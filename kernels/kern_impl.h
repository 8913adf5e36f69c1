/* kern_impl.h: what the backend registry (backend.c) needs from each backend,
 * shared by the files of kernels/ only. Each open fills *be with a new instance or
 * returns an error (logged unless `quiet`, which "auto" sets while probing). */
#ifndef TR_KERN_IMPL_H
#define TR_KERN_IMPL_H

#include "kern.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tr_status kern_cpu_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be) TR_WUR;
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
enum tr_status kern_cuda_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be) TR_WUR;
#endif

#ifdef __cplusplus
}
#endif
#endif
