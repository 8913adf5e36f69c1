/* kern_impl.h: what the backend registry (backend.c) needs from each backend,
 * shared by the files of kernels/ only (and the CUDA plugin's entry points). Each open fills *be with a new instance or
 * returns an error (logged unless `quiet`, which "auto" sets while probing). */
#ifndef TR_KERN_IMPL_H
#define TR_KERN_IMPL_H

#include <stdint.h>

#include "kern.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tr_status kern_cpu_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be) TR_WUR;
/* The build a backend plugin comes from. A plugin shares the program's structs
 * (kern.h) and calls back into it, so the registry refuses one whose api or git
 * differs from the program's own (kernels/backend.c), naming both. Bump
 * KERN_PLUGIN_API whenever kern.h's vtable, an args or options struct, or an entry
 * point below changes; the git hash (TR_GIT_HASH, the Makefile's version_gen.h)
 * tells apart builds of one api. */
#define KERN_PLUGIN_MAGIC 0x504b5254u /* "TRKP" */
#define KERN_PLUGIN_API 2
struct kern_plugin_id {
    uint32_t magic; /* KERN_PLUGIN_MAGIC */
    uint32_t api;   /* KERN_PLUGIN_API of the plugin's build */
    char git[48];   /* TR_GIT_HASH of the plugin's build, NUL-terminated */
};
#ifdef __cplusplus
static_assert(sizeof(struct kern_plugin_id) == 56, "kern_plugin_id is read across builds: keep its layout");
#else
_Static_assert(sizeof(struct kern_plugin_id) == 56, "kern_plugin_id is read across builds: keep its layout");
#endif

#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
/* What the CUDA plugin (libterarec-cuda.so, kernels/cuda/) exports; the registry
 * finds them with dlsym and never links them. */
extern const struct kern_plugin_id kern_cuda_plugin_id;
enum tr_status kern_cuda_plugin_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be) TR_WUR;
int kern_cuda_plugin_device_count(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
