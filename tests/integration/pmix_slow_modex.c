/* pmix_slow_modex.c: an LD_PRELOAD library for the SLURM tests. On the rank named
 * by TR_TEST_SLOW_MODEX_RANK, the release of Open MPI's modex fence (the first
 * PMIx_Fence_nb that Open MPI's PMIx component calls with PMIX_COLLECT_DATA) reaches
 * Open MPI TR_TEST_SLOW_MODEX_MS (default 2000) later, and the library says so on
 * stderr. That rank stays that long inside MPI_Init, where its receive callbacks
 * are not yet set, while the ranks of other nodes go on: what a loaded node does
 * now and then by chance, made certain. Built by `make` into
 * $(BUILD)/tests/lib/pmix_slow_modex.so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pmix.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef pmix_status_t (*fence_nb_fn)(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                                     size_t ninfo, pmix_op_cbfunc_t cbfunc, void *cbdata);

struct held {
    pmix_status_t status;
    pmix_op_cbfunc_t cb;
    void *cbdata;
    long ms;
};

static void *release_late(void *arg)
{
    struct held *h = arg;
    struct timespec ts = {h->ms / 1000, (h->ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    fprintf(stderr, "pmix_slow_modex: rank %s: Open MPI's modex fence released %ld ms late\n",
            getenv("PMIX_RANK"), h->ms);
    h->cb(h->status, h->cbdata);
    free(h);
    return NULL;
}

/* PMIx calls this from its progress thread: the wait runs in a thread of its own */
static void hold(pmix_status_t status, void *arg)
{
    struct held *h = arg;
    h->status = status;
    pthread_t t;
    if (pthread_create(&t, NULL, release_late, h) != 0) {
        h->cb(status, h->cbdata);
        free(h);
        return;
    }
    pthread_detach(t);
}

static int collects(const pmix_info_t info[], size_t ninfo)
{
    for (size_t i = 0; i < ninfo; i++)
        if (!strcmp(info[i].key, PMIX_COLLECT_DATA))
            return info[i].value.type != PMIX_BOOL || info[i].value.data.flag;
    return 0;
}

static int from_open_mpi(void *caller)
{
    Dl_info d;
    return dladdr(caller, &d) && d.dli_fname && strstr(d.dli_fname, "mca_pmix_");
}

pmix_status_t PMIx_Fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                            pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    static fence_nb_fn real;
    static int done;
    if (!real)
        real = (fence_nb_fn)dlsym(RTLD_NEXT, "PMIx_Fence_nb");
    const char *want = getenv("TR_TEST_SLOW_MODEX_RANK"), *me = getenv("PMIX_RANK");
    if (!done && cbfunc && want && me && !strcmp(want, me) && collects(info, ninfo) &&
        from_open_mpi(__builtin_return_address(0))) {
        struct held *h = calloc(1, sizeof *h);
        if (h) {
            done = 1;
            const char *ms = getenv("TR_TEST_SLOW_MODEX_MS");
            h->cb = cbfunc;
            h->cbdata = cbdata;
            h->ms = ms ? atol(ms) : 2000;
            pmix_status_t rc = real(procs, nprocs, info, ninfo, hold, h);
            if (rc != PMIX_SUCCESS)
                free(h);
            return rc;
        }
    }
    return real(procs, nprocs, info, ninfo, cbfunc, cbdata);
}
