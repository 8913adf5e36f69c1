/* backend.c: the backend registry: names, open by name (or "auto"), close, and the
 * loading of the CUDA plugin (its only state: the handle, loaded once). Every open
 * makes a new instance. */
#define TR_SUBSYS TR_SUB_KERN
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "kern_impl.h"

typedef enum tr_status (*open_fn)(const struct kern_backend_opts *o, int quiet, struct kern_backend *be);

#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
/* ---- the CUDA plugin ------------------------------------------------------------------
 * libterarec-cuda.so holds the CUDA backend and everything that links cuBLAS and the
 * CUDA runtime. It is loaded on first need, and only on a machine with an NVIDIA
 * device node, so CPU nodes never map those libraries (nor need them installed). */
static void *cuda_plugin;
static int cuda_plugin_tried;
static char cuda_plugin_why[512];

/* True when the machine has an NVIDIA driver's device node (bare metal and GPU
 * containers: /dev/nvidiactl; WSL2: /dev/dxg). */
static int nvidia_present(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
}

/* Loads the plugin from, in order: lib/ beside the program's bin/ (a bundle, an
 * install), this build's lib/ (TR_CUDA_PLUGIN_DIR: test programs sit deeper), then
 * the loader's own search (LD_LIBRARY_PATH). Explicit paths, because a dlopen that
 * a sanitizer intercepts no longer searches the program's RUNPATH. Keeps the error
 * of the first candidate that exists (a missing dependency, say). */
static void load_plugin(void)
{
    char exe[PATH_MAX], paths[3][PATH_MAX + 64];
    int n = 0;
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(paths[n++], sizeof paths[0], "%s/../lib/%s", exe, TR_CUDA_PLUGIN);
        }
    }
    snprintf(paths[n++], sizeof paths[0], "%s/%s", TR_CUDA_PLUGIN_DIR, TR_CUDA_PLUGIN);
    snprintf(paths[n++], sizeof paths[0], "%s", TR_CUDA_PLUGIN);
    for (int i = 0; i < n && !cuda_plugin; i++) {
        const int last = i + 1 == n, exists = strchr(paths[i], '/') ? access(paths[i], F_OK) == 0 : 1;
        if (!exists && !last)
            continue;
        cuda_plugin = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!cuda_plugin && !cuda_plugin_why[0]) {
            const char *e = dlerror();
            snprintf(cuda_plugin_why, sizeof cuda_plugin_why, "%s", e ? e : "dlopen failed");
        }
    }
    if (cuda_plugin)
        cuda_plugin_why[0] = '\0';
}

void *kern_cuda_plugin_symbol(const char *name)
{
    if (!cuda_plugin_tried) {
        cuda_plugin_tried = 1;
        load_plugin();
    }
    return cuda_plugin ? dlsym(cuda_plugin, name) : NULL;
}

const char *kern_cuda_plugin_error(void)
{
    return cuda_plugin_why[0] ? cuda_plugin_why : NULL;
}

int kern_cuda_device_count(void)
{
    if (!nvidia_present())
        return 0;
    int (*count)(void) = (int (*)(void))kern_cuda_plugin_symbol("kern_cuda_plugin_device_count");
    return count ? count() : 0;
}

static enum tr_status cuda_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be)
{
    if (!o->sizing_only && !nvidia_present()) {
        if (!quiet) {
            LOG_ERROR("backend 'cuda': no CUDA device is visible (no NVIDIA driver device node)");
            LOG_HINT("use --backend cpu (or auto) on a machine without a GPU; check CUDA_VISIBLE_DEVICES and "
                     "nvidia-smi");
        }
        return TR_ERR_UNSUPPORTED;
    }
    open_fn open = (open_fn)kern_cuda_plugin_symbol("kern_cuda_plugin_open");
    if (!open) {
        if (!quiet) {
            LOG_ERROR("backend 'cuda': cannot load %s: %s", TR_CUDA_PLUGIN,
                      kern_cuda_plugin_error() ? kern_cuda_plugin_error() : "it lacks kern_cuda_plugin_open");
            LOG_HINT("the plugin sits in lib/ beside bin/ (make builds it, make bundle carries it) and needs the "
                     "CUDA runtime and cuBLAS libraries");
        }
        return TR_ERR_UNSUPPORTED;
    }
    return open(o, quiet, be);
}
#endif

/* The CPU computes in fp32 only: --amp's precisions are refused (logged unless quiet). */
static enum tr_status cpu_precision_ok(const struct kern_backend_opts *o, int quiet)
{
    if (o->precision != KERN_PREC_BF16 && o->precision != KERN_PREC_FP16)
        return TR_OK;
    if (!quiet) {
        LOG_ERROR("backend 'cpu': computes in fp32 only; --amp (%s GEMMs) needs the cuda backend",
                  kern_precision_name((enum kern_precision)o->precision));
        LOG_HINT("drop --amp on a machine without a GPU, or run with --backend cuda on one");
    }
    return TR_ERR_UNSUPPORTED;
}

static enum tr_status cpu_open(const struct kern_backend_opts *o, int quiet, struct kern_backend *be)
{
    memset(be, 0, sizeof *be);
    TR_CHECK(cpu_precision_ok(o, quiet));
    return kern_cpu_open(o, quiet, be);
}

static const struct {
    const char *name;
    open_fn open;
} registry[] = {
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    {"cuda", cuda_open},
#endif
    {"cpu", cpu_open},
};
#define NREG ((int)TR_ARRAY_SIZE(registry))

const char *kern_backend_name(int k)
{
    return k >= 0 && k < NREG ? registry[k].name : NULL;
}

enum tr_status kern_backend_open(const char *name, const struct kern_backend_opts *o, struct kern_backend *be)
{
    static const struct kern_backend_opts defaults = {0, -1, 0, 0, KERN_PREC_FP32, 0, 0};
    memset(be, 0, sizeof *be);
    if (!o)
        o = &defaults;
    if (name && !strcmp(name, "auto")) {
        for (int k = 0; k < NREG; k++) {
            enum tr_status rc = registry[k].open(o, 1, be);
            if (rc == TR_OK) {
                LOG_INFO(KERN, "backend auto: %s", registry[k].name);
                return TR_OK;
            }
            LOG_INFO(KERN, "backend auto: %s not used (%s)", registry[k].name, tr_strerror(rc));
            if (rc == TR_ERR_NOMEM)
                return rc;
        }
        /* only when the options fit no backend (--amp on a machine without a GPU) */
        if (!o->quiet) {
            LOG_ERROR("backend auto: no backend of this build opens with %s GEMMs here",
                      kern_precision_name((enum kern_precision)o->precision));
            LOG_HINT("--amp needs a CUDA device; drop it to train on the cpu backend");
        }
        return TR_ERR_UNSUPPORTED;
    }
    for (int k = 0; name && k < NREG; k++)
        if (!strcmp(name, registry[k].name))
            return registry[k].open(o, o->quiet, be);
    if (name && !strcmp(name, "cuda")) {
        if (o->quiet)
            return TR_ERR_UNSUPPORTED;
        LOG_ERROR("backend 'cuda': this build has no CUDA backend (nvcc was not found when it was built)");
        LOG_HINT("use --backend cpu, or rebuild with nvcc on PATH (make CUDA=1)");
        return TR_ERR_UNSUPPORTED;
    }
    if (o->quiet)
        return TR_ERR_ARG;
    LOG_ERROR("unknown backend '%s'", name ? name : "(null)");
    LOG_HINT("backends: cpu, cuda, auto");
    return TR_ERR_ARG;
}

enum tr_status kern_backend_check(const char *name, const struct kern_backend_opts *o)
{
    const int reduced = o->precision == KERN_PREC_BF16 || o->precision == KERN_PREC_FP16;
    int devices = 0;
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    devices = kern_cuda_device_count();
#endif
    if (!strcmp(name, "cpu"))
        return cpu_precision_ok(o, 0);
    if (!strcmp(name, "cuda") || (!strcmp(name, "auto") && reduced)) {
        if (devices > 0)
            return TR_OK;
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
        LOG_ERROR("backend '%s'%s: no CUDA device is visible on this machine", name, reduced ? " with --amp" : "");
        LOG_HINT("run where the GPUs are (or inside the SLURM allocation); --backend cpu without --amp runs here");
#else
        LOG_ERROR("backend '%s'%s: this build has no CUDA backend (nvcc was not found when it was built)", name,
                  reduced ? " with --amp" : "");
        LOG_HINT("use --backend cpu without --amp, or rebuild with nvcc on PATH (make CUDA=1)");
#endif
        return TR_ERR_UNSUPPORTED;
    }
    return TR_OK;
}

void kern_backends_print(FILE *fp, int parsable)
{
    int devices = -1;
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    devices = kern_cuda_device_count();
#endif
    fprintf(fp, parsable ? "backends:" : "backends: ");
    for (int k = 0; k < NREG; k++) {
        fprintf(fp, "%s%s", k ? (parsable ? "," : ", ") : "", registry[k].name);
        if (!parsable && !strcmp(registry[k].name, "cuda"))
            fprintf(fp, " (%d device%s visible)", devices, devices == 1 ? "" : "s");
    }
    fprintf(fp, "\n");
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
    if (kern_cuda_plugin_error())
        fprintf(fp, parsable ? "cuda_plugin_error:%s\n" : "cuda plugin: %s\n", kern_cuda_plugin_error());
#endif
    if (parsable && devices >= 0)
        fprintf(fp, "cuda_devices:%d\n", devices);
}

void kern_backend_close(struct kern_backend *be)
{
    if (be->i && be->i->destroy)
        be->i->destroy(be->ctx);
    memset(be, 0, sizeof *be);
}

enum tr_status kern_alloc(const struct kern_backend *be, size_t bytes, void **p, const char *what, ...)
{
    enum tr_status rc = be->i->mem_alloc(be->ctx, bytes, p);
    if (rc == TR_ERR_NOMEM) {
        char name[160];
        va_list ap;
        va_start(ap, what);
        vsnprintf(name, sizeof name, what, ap);
        va_end(ap);
        LOG_ERROR("out of %s memory allocating %s: %zu bytes (%.2f GiB)", be->i->name, name, bytes,
                  (double)bytes / 1073741824.0);
    }
    return rc;
}

size_t kern_emb_update_ws_bytes(const struct kern_backend *be, int64_t nidx, int64_t width, int ntables)
{
    const struct kern_shape s = {.m = nidx, .n = width, .count = ntables};
    struct kern_ws w;
    be->i->ws(be->ctx, KERN_OP_EMB_UPDATE, &s, &w);
    return w.args;
}
