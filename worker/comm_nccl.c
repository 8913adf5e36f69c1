/* comm_nccl.c: the collectives over NCCL, for buffers in GPU memory. Built into
 * the CUDA plugin (libterarec-cuda.so, which links NCCL); the worker finds it with
 * dlsym("comm_nccl_open") and hands it what it needs from the job (struct
 * comm_nccl_env): the rank, a way to share NCCL's unique id (PMIx put, fence, get)
 * and a way to end the job.
 *
 * Streams: the communicator runs on a stream of its own. Each collective first
 * makes that stream wait for the work queued so far on the backend's stream (an
 * event), then queues NCCL's kernels, then records a "done" event; the blocking
 * calls make the backend's stream wait on it (so work queued afterwards sees the
 * result), and comm.c then waits for the communicator (comm_synchronize), like
 * MPI's calls. The split-phase calls (start, wait) record their own events, so the
 * backend's stream keeps computing while the data travels; wait blocks the host
 * until the collective ends, then orders the backend's stream after it.
 *
 * Failure: the communicator is non-blocking (ncclConfig_t.blocking = 0), so no
 * NCCL call can hang the host: every wait polls the CUDA event together with
 * ncclCommGetAsyncError, and gives up after --collective_timeout. An error (a peer
 * that died and closed its sockets, a network error) ends the wait at once with
 * NCCL's own message; a silent peer ends it at the timeout. Either way the
 * communicator is aborted (ncclCommAbort releases the kernels still waiting on the
 * device) and the caller ends the job (comm_abort -> the env's abort_job). A
 * send or receive that NCCL refuses names the peer and its host; a transfer that
 * fails later shows NCCL's message and last error, and the launcher names the
 * rank that died. After an abort every call answers TR_ERR_NCCL at once. */
#define TR_SUBSYS TR_SUB_COMM
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "comm.h"

#define HOST_LEN 64
#define BLOCKING COMM_SLOTS
/* how long NCCL may take to set a communicator up when no timeout is given */
#define INIT_TIMEOUT 600.0

struct nccl_ctx {
    ncclComm_t comm;
    cudaStream_t stream;              /* the communicator's own */
    cudaStream_t compute;             /* the backend's (borrowed) */
    cudaEvent_t ready[COMM_SLOTS + 1]; /* the backend's work before a collective */
    cudaEvent_t done[COMM_SLOTS + 1];  /* a collective's end */
    int *one;                         /* device: one int, what a barrier reduces */
    int size, rank;
    int broken;                       /* aborted: destroy frees no more than memory */
    char *hosts;                      /* (size x HOST_LEN) */
    struct comm_nccl_env env;         /* share and abort_job (its host is not kept) */
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(double seconds)
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

static const char *host_of(const struct nccl_ctx *n, int rank)
{
    return n->hosts && rank >= 0 && rank < n->size && n->hosts[(size_t)rank * HOST_LEN]
               ? n->hosts + (size_t)rank * HOST_LEN
               : "?";
}

static int nccl_type(enum kern_dtype t, ncclDataType_t *out)
{
    switch (t) {
    case KERN_F32: *out = ncclFloat32; return 1;
    case KERN_F64: *out = ncclFloat64; return 1;
    case KERN_I32: *out = ncclInt32; return 1;
    case KERN_I64: *out = ncclInt64; return 1;
    case KERN_I8: *out = ncclInt8; return 1;
    case KERN_U8: *out = ncclUint8; return 1;
    case KERN_F16: *out = ncclFloat16; return 1;
    case KERN_BF16: *out = ncclBfloat16; return 1;
    case KERN_I16: *out = ncclFloat16; return 1; /* moved, never reduced: only the bits matter */
    }
    return 0;
}

/* Aborts the communicator after a failure (kernels waiting for a dead peer are
 * released) and logs what NCCL last said. */
static void n_break(struct nccl_ctx *n)
{
    if (n->broken)
        return;
    n->broken = 1;
    const char *last = ncclGetLastError(n->comm);
    if (last && *last)
        LOG_ERROR("NCCL's last error on rank %d (%s): %s", n->rank, host_of(n, n->rank), last);
    (void)ncclCommAbort(n->comm);
}

/* After a failure on comm: c's own communicator is broken (n_break); another one
 * (a split's new communicator, not yet c's) is aborted. */
static void n_fail(struct nccl_ctx *n, ncclComm_t comm)
{
    if (comm == n->comm) {
        n_break(n);
        return;
    }
    const char *last = ncclGetLastError(comm);
    if (last && *last)
        LOG_ERROR("NCCL's last error on rank %d (%s): %s", n->rank, host_of(n, n->rank), last);
    (void)ncclCommAbort(comm);
}

/* Waits until NCCL has accepted the calls queued on comm (a non-blocking
 * communicator answers ncclInProgress at first); logs a failure with the peer
 * (-1: none) and aborts comm (n_fail). */
static enum tr_status n_settle_on(struct comm *c, ncclComm_t comm, ncclResult_t r, const char *what, int peer)
{
    struct nccl_ctx *n = c->ctx;
    if (n->broken && comm == n->comm)
        return TR_ERR_NCCL;
    const double t0 = now(), limit = c->timeout > 0 ? c->timeout : INIT_TIMEOUT;
    while (r == ncclInProgress) {
        if (now() - t0 > limit) {
            LOG_ERROR("%s: NCCL still busy after %.3g s on rank %d (%s)", what, now() - t0, n->rank,
                      host_of(n, n->rank));
            n_fail(n, comm);
            return TR_ERR_TIMEOUT;
        }
        nap(50e-6);
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
            break;
    }
    if (r == ncclSuccess)
        return TR_OK;
    if (peer >= 0)
        LOG_ERROR("%s with rank %d (%s) failed on rank %d: %s", what, peer, host_of(n, peer), n->rank,
                  ncclGetErrorString(r));
    else
        LOG_ERROR("%s failed on rank %d (%s): %s", what, n->rank, host_of(n, n->rank), ncclGetErrorString(r));
    LOG_HINT("a peer that died or a broken network ends NCCL's collectives; see the other ranks' logs and "
             "NCCL_DEBUG=WARN's output");
    n_fail(n, comm);
    return TR_ERR_NCCL;
}

static enum tr_status n_settle(struct comm *c, ncclResult_t r, const char *what, int peer)
{
    return n_settle_on(c, ((struct nccl_ctx *)c->ctx)->comm, r, what, peer);
}

/* Polls ev (NULL: the communicator's stream) until it completes, an asynchronous
 * NCCL error arrives or the timeout passes (see the file comment). */
static enum tr_status n_poll(struct comm *c, cudaEvent_t ev, const char *what)
{
    struct nccl_ctx *n = c->ctx;
    if (n->broken)
        return TR_ERR_NCCL;
    const double t0 = now();
    double pause = 0.0;
    for (int spins = 0;; spins++) {
        cudaError_t q = ev ? cudaEventQuery(ev) : cudaStreamQuery(n->stream);
        if (q == cudaSuccess)
            return TR_OK;
        if (q != cudaErrorNotReady) {
            TR_CUDA_OK_(q);
            n_break(n);
            return TR_ERR_CUDA;
        }
        /* "not ready" is also left as the thread's last error, which the backend's
         * next launch check (cudaGetLastError) would report as its own failure */
        (void)cudaGetLastError();
        ncclResult_t a = ncclSuccess;
        if (ncclCommGetAsyncError(n->comm, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress)
            return n_settle(c, a, what, -1);
        const double waited = now() - t0;
        if (c->timeout > 0 && waited > c->timeout) {
            LOG_ERROR("%s: no progress for %.3g s on rank %d (%s) (--collective_timeout %.3g): a peer is dead, "
                      "stopped or cut off",
                      what, waited, n->rank, host_of(n, n->rank), c->timeout);
            LOG_HINT("the launcher names a rank that exited; otherwise check the hosts and the network between "
                     "them (NCCL_DEBUG=INFO shows the transport), or raise --collective_timeout");
            n_break(n);
            return TR_ERR_TIMEOUT;
        }
        if (spins > 1000) { /* most collectives end while spinning; then sleep, doubling up to 1 ms */
            pause = pause == 0.0 ? 20e-6 : (pause * 2 > 1e-3 ? 1e-3 : pause * 2);
            nap(pause);
        }
    }
}

/* The communicator's stream waits for the backend's queued work (slot k's event). */
static enum tr_status n_enter(struct nccl_ctx *n, int k)
{
    if (n->broken)
        return TR_ERR_NCCL;
    TR_CUDA_CHECK(cudaEventRecord(n->ready[k], n->compute));
    TR_CUDA_CHECK(cudaStreamWaitEvent(n->stream, n->ready[k], 0));
    return TR_OK;
}

/* After slot k's NCCL calls: its done event, and (blocking calls) the backend's
 * stream ordered after it. */
static enum tr_status n_leave(struct nccl_ctx *n, int k, int order)
{
    TR_CUDA_CHECK(cudaEventRecord(n->done[k], n->stream));
    if (order)
        TR_CUDA_CHECK(cudaStreamWaitEvent(n->compute, n->done[k], 0));
    return TR_OK;
}

/* The first call of a group that NCCL refused. */
struct refusal {
    ncclResult_t r;
    const char *what;
    int peer;
};

static void refused(struct refusal *no, ncclResult_t r, const char *what, int peer)
{
    if (r != ncclSuccess && r != ncclInProgress && !no->what)
        *no = (struct refusal){r, what, peer};
}

/* Opens a group of sends and receives (none on a broken communicator, so no
 * group is left open on the thread). */
static enum tr_status group_start(struct comm *c)
{
    if (((struct nccl_ctx *)c->ctx)->broken)
        return TR_ERR_NCCL;
    return n_settle(c, ncclGroupStart(), "ncclGroupStart", -1);
}

/* Ends a group of sends and receives; a refused call's error (naming its peer)
 * comes after the group is closed. */
static enum tr_status group_end(struct comm *c, const struct refusal *no, const char *what)
{
    const ncclResult_t r = ncclGroupEnd();
    if (no->what)
        return n_settle(c, no->r, no->what, no->peer);
    return n_settle(c, r, what, -1);
}

/* Queues an all-to-all with per-rank counts: grouped sends and receives. */
static enum tr_status q_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                  void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    struct nccl_ctx *n = c->ctx;
    ncclDataType_t dt;
    if (!nccl_type(t, &dt))
        return TR_ERR_ARG;
    const size_t es = kern_dtype_size(t);
    TR_CHECK(group_start(c));
    /* inside the group the calls only queue; one NCCL refuses ends the group
     * before the communicator is aborted */
    struct refusal no = {ncclSuccess, NULL, -1};
    for (int q = 0; q < n->size && !no.what; q++) {
        if (scounts[q] > 0)
            refused(&no, ncclSend((const char *)send + (size_t)sdispls[q] * es, (size_t)scounts[q], dt, q, n->comm,
                                  n->stream),
                    "ncclSend", q);
        if (rcounts[q] > 0 && !no.what)
            refused(&no, ncclRecv((char *)recv + (size_t)rdispls[q] * es, (size_t)rcounts[q], dt, q, n->comm,
                                  n->stream),
                    "ncclRecv", q);
    }
    return group_end(c, &no, "the all-to-all (ncclGroupEnd)");
}

static enum tr_status q_allreduce(struct comm *c, void *buf, int64_t count, enum kern_dtype t)
{
    struct nccl_ctx *n = c->ctx;
    ncclDataType_t dt;
    if ((t != KERN_F32 && t != KERN_F64 && t != KERN_I32 && t != KERN_I64) || !nccl_type(t, &dt) || count < 0)
        return TR_ERR_ARG;
    return n_settle(c, ncclAllReduce(buf, buf, (size_t)count, dt, ncclSum, n->comm, n->stream), "ncclAllReduce",
                    -1);
}

static enum tr_status n_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                  void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    struct nccl_ctx *n = c->ctx;
    TR_CHECK(n_enter(n, BLOCKING));
    TR_CHECK(q_alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, t));
    return n_leave(n, BLOCKING, 1);
}

static enum tr_status n_allreduce(struct comm *c, void *buf, int64_t count, enum kern_dtype t)
{
    struct nccl_ctx *n = c->ctx;
    TR_CHECK(n_enter(n, BLOCKING));
    TR_CHECK(q_allreduce(c, buf, count, t));
    return n_leave(n, BLOCKING, 1);
}

static enum tr_status n_bcast(struct comm *c, void *buf, int64_t bytes, int root)
{
    struct nccl_ctx *n = c->ctx;
    if (root < 0 || root >= n->size || bytes < 0)
        return TR_ERR_ARG;
    TR_CHECK(n_enter(n, BLOCKING));
    TR_CHECK(n_settle(c, ncclBroadcast(buf, buf, (size_t)bytes, ncclUint8, root, n->comm, n->stream),
                      "ncclBroadcast", root == n->rank ? -1 : root));
    return n_leave(n, BLOCKING, 1);
}

static enum tr_status n_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                                const int64_t *rdispls, enum kern_dtype t, int root)
{
    struct nccl_ctx *n = c->ctx;
    ncclDataType_t dt;
    if (root < 0 || root >= n->size || !nccl_type(t, &dt))
        return TR_ERR_ARG;
    const size_t es = kern_dtype_size(t);
    TR_CHECK(n_enter(n, BLOCKING));
    TR_CHECK(group_start(c));
    struct refusal no = {ncclSuccess, NULL, -1};
    if (scount > 0)
        refused(&no, ncclSend(send, (size_t)scount, dt, root, n->comm, n->stream), "ncclSend (gather)", root);
    for (int q = 0; n->rank == root && q < n->size && !no.what; q++)
        if (rcounts[q] > 0)
            refused(&no, ncclRecv((char *)recv + (size_t)rdispls[q] * es, (size_t)rcounts[q], dt, q, n->comm,
                                  n->stream),
                    "ncclRecv (gather)", q);
    TR_CHECK(group_end(c, &no, "the gather (ncclGroupEnd)"));
    return n_leave(n, BLOCKING, 1);
}

static enum tr_status n_barrier(struct comm *c)
{
    struct nccl_ctx *n = c->ctx;
    TR_CHECK(n_allreduce(c, n->one, 1, KERN_I32));
    return n_poll(c, n->done[BLOCKING], "the barrier (ncclAllReduce)");
}

static enum tr_status n_group_begin(struct comm *c)
{
    if (((struct nccl_ctx *)c->ctx)->broken)
        return TR_ERR_NCCL;
    return n_settle(c, ncclGroupStart(), "ncclGroupStart", -1);
}

/* The group's collectives are queued only now: their done event, and the
 * backend's stream after it (comm.c then waits for them, as for a single call). */
static enum tr_status n_group_end(struct comm *c)
{
    TR_CHECK(n_settle(c, ncclGroupEnd(), "ncclGroupEnd", -1));
    return n_leave(c->ctx, BLOCKING, 1);
}

static enum tr_status n_synchronize(struct comm *c)
{
    return n_poll(c, NULL, "a collective");
}

static enum tr_status n_start(struct comm *c, const struct comm_op *op, int slot)
{
    struct nccl_ctx *n = c->ctx;
    TR_CHECK(n_enter(n, slot));
    if (op->kind == COMM_ALLTOALL)
        TR_CHECK(q_alltoallv(c, op->send, op->scounts, op->sdispls, op->buf, op->rcounts, op->rdispls, op->t));
    else
        TR_CHECK(q_allreduce(c, op->buf, op->n, op->t));
    return n_leave(n, slot, 0);
}

static enum tr_status n_wait(struct comm *c, int slot)
{
    struct nccl_ctx *n = c->ctx;
    TR_CHECK(n_poll(c, n->done[slot], "a split-phase collective"));
    TR_CUDA_CHECK(cudaStreamWaitEvent(n->compute, n->done[slot], 0));
    return TR_OK;
}

static void n_abort(struct comm *c, int code)
{
    struct nccl_ctx *n = c->ctx;
    n_break(n);
    fflush(stdout);
    fflush(stderr);
    if (n->env.abort_job)
        n->env.abort_job(n->env.arg, code, "a worker failed");
}

static void n_destroy(struct comm *c)
{
    struct nccl_ctx *n = c->ctx;
    if (!n)
        return;
    if (n->comm) {
        if (!n->broken && !c->failed) {
            /* finalize flushes what is still queued; it may answer ncclInProgress */
            ncclResult_t r = ncclCommFinalize(n->comm);
            if (n_settle(c, r, "ncclCommFinalize", -1) == TR_OK)
                (void)ncclCommDestroy(n->comm);
        } else if (!n->broken) {
            (void)ncclCommAbort(n->comm);
        }
    }
    for (int k = 0; k <= COMM_SLOTS; k++) {
        if (n->ready[k])
            (void)cudaEventDestroy(n->ready[k]);
        if (n->done[k])
            (void)cudaEventDestroy(n->done[k]);
    }
    if (n->one)
        (void)cudaFree(n->one);
    if (n->stream)
        (void)cudaStreamDestroy(n->stream);
    tr_free(n->hosts);
    tr_free(n);
    c->ctx = NULL;
}

static enum tr_status wrap(struct comm *c, const struct comm_nccl_env *env, cudaStream_t compute, ncclComm_t comm,
                           const char *host);

static enum tr_status n_split(struct comm *c, int color, int key, struct comm *out)
{
    struct nccl_ctx *n = c->ctx;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t sub = NULL;
    if (n->broken)
        return TR_ERR_NCCL;
    ncclResult_t r = ncclCommSplit(n->comm, color, key, &sub, &cfg);
    /* non-blocking: until the new communicator exists, the parent carries the
     * split's state (NCCL may hand the new one out only at the end) */
    if (!sub || r != ncclInProgress)
        TR_CHECK(n_settle(c, r == ncclSuccess ? ncclInProgress : r, "ncclCommSplit", -1));
    /* NCCL may store the new communicator from its own thread, before the parent
     * settled: read it again through a volatile load */
    sub = *(ncclComm_t volatile *)&sub;
    if (!sub) {
        LOG_ERROR("ncclCommSplit gave rank %d (%s) no communicator (color %d)", n->rank, host_of(n, n->rank),
                  color);
        return TR_ERR_NCCL;
    }
    /* then the new one is ready when it says so */
    ncclResult_t a = ncclInProgress;
    if (ncclCommGetAsyncError(sub, &a) != ncclSuccess)
        a = ncclInternalError;
    TR_CHECK(n_settle_on(c, sub, a, "ncclCommSplit (the new communicator)", -1));
    memset(out, 0, sizeof *out);
    out->timeout = c->timeout;
    return wrap(out, &n->env, n->compute, sub, host_of(n, n->rank));
}

static const struct comm_i nccl_iface = {
    .name = "nccl",
    .alltoallv = n_alltoallv,
    .allreduce_sum = n_allreduce,
    .bcast = n_bcast,
    .gatherv = n_gatherv,
    .barrier = n_barrier,
    .group_begin = n_group_begin,
    .group_end = n_group_end,
    .split = n_split,
    .synchronize = n_synchronize,
    .start = n_start,
    .wait = n_wait,
    .abort = n_abort,
    .destroy = n_destroy,
    .host_buffers = 0,
};

/* A struct comm around an NCCL communicator it now owns: its stream, events,
 * and every rank's host name (an all-gather). On failure the communicator is
 * aborted here (once) and c is zeroed. */
static enum tr_status wrap(struct comm *c, const struct comm_nccl_env *env, cudaStream_t compute, ncclComm_t comm,
                           const char *host)
{
    struct nccl_ctx *n = tr_calloc(1, sizeof *n);
    if (!n) {
        (void)ncclCommAbort(comm);
        return TR_ERR_NOMEM;
    }
    n->comm = comm;
    n->compute = compute;
    n->env = *env;
    n->env.host = NULL;
    c->i = &nccl_iface;
    c->ctx = n;
    enum tr_status rc = TR_OK;
    TR_NCCL_CHECK_GOTO(ncclCommCount(comm, &n->size), rc, fail);
    TR_NCCL_CHECK_GOTO(ncclCommUserRank(comm, &n->rank), rc, fail);
    c->rank = n->rank;
    c->size = n->size;
    TR_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking), rc, fail);
    for (int k = 0; k <= COMM_SLOTS; k++) {
        TR_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&n->ready[k], cudaEventDisableTiming), rc, fail);
        TR_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&n->done[k], cudaEventDisableTiming), rc, fail);
    }
    TR_CUDA_CHECK_GOTO(cudaMalloc((void **)&n->one, HOST_LEN * (size_t)(n->size + 1)), rc, fail);
    /* host names: an all-gather through device memory (n->one is big enough) */
    char mine[HOST_LEN] = {0};
    snprintf(mine, sizeof mine, "%s", host ? host : "?");
    n->hosts = tr_calloc((size_t)n->size, HOST_LEN);
    if (!n->hosts) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    char *dev = (char *)n->one;
    TR_CUDA_CHECK_GOTO(cudaMemcpyAsync(dev + (size_t)n->size * HOST_LEN, mine, HOST_LEN, cudaMemcpyHostToDevice,
                                       n->stream),
                       rc, fail);
    TR_CHECK_GOTO(n_settle(c, ncclAllGather(dev + (size_t)n->size * HOST_LEN, dev, HOST_LEN, ncclUint8, comm,
                                            n->stream),
                           "ncclAllGather (host names)", -1),
                  rc, fail);
    /* polled first: the copy into pageable memory below blocks the host until
     * the stream gets there, out of reach of n_poll's timeout */
    TR_CHECK_GOTO(n_poll(c, NULL, "the host-name exchange"), rc, fail);
    TR_CUDA_CHECK_GOTO(cudaMemcpyAsync(n->hosts, dev, (size_t)n->size * HOST_LEN, cudaMemcpyDeviceToHost, n->stream),
                       rc, fail);
    TR_CHECK_GOTO(n_poll(c, NULL, "the host-name exchange"), rc, fail);
    TR_CUDA_CHECK_GOTO(cudaMemsetAsync(n->one, 0, sizeof(int), n->stream), rc, fail);
    TR_CHECK_GOTO(n_poll(c, NULL, "the host-name exchange"), rc, fail);
    return TR_OK;
fail:
    if (!n->broken)
        (void)ncclCommAbort(comm);
    n->comm = NULL;
    n_destroy(c);
    memset(c, 0, sizeof *c);
    return rc;
}

enum tr_status comm_nccl_open(const struct comm_nccl_env *env, const struct kern_backend *be, struct comm *c);

enum tr_status comm_nccl_open(const struct comm_nccl_env *env, const struct kern_backend *be, struct comm *c)
{
    memset(c, 0, sizeof *c);
    cudaStream_t compute = (cudaStream_t)be->i->queue(be->ctx);
    if (!compute) {
        LOG_ERROR("NCCL: backend '%s' has no CUDA stream", be->i->name);
        return TR_ERR_UNSUPPORTED;
    }
    /* NCCL takes the calling thread's current device: the backend stream's */
    int dev = -1;
    TR_CUDA_CHECK(cudaStreamGetDevice(compute, &dev));
    TR_CUDA_CHECK(cudaSetDevice(dev));
    int version = 0;
    (void)ncclGetVersion(&version);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (env->rank == 0)
        TR_NCCL_CHECK(ncclGetUniqueId(&id));
    TR_CHECK(env->share(env->arg, "nccl_world_id", 0, &id, (int)sizeof id));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, env->world, id, env->rank, &cfg);
    /* settle through a bare struct comm (no hosts known yet) */
    struct nccl_ctx tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.comm = comm;
    tmp.rank = env->rank;
    tmp.size = env->world;
    c->ctx = &tmp;
    c->timeout = env->timeout;
    enum tr_status rc = comm ? n_settle(c, r, "ncclCommInitRankConfig", -1) : TR_ERR_NCCL;
    c->ctx = NULL;
    if (rc != TR_OK) {
        if (!comm)
            LOG_ERROR("ncclCommInitRankConfig failed on rank %d: %s", env->rank, ncclGetErrorString(r));
        else if (!tmp.broken)
            (void)ncclCommAbort(comm);
        return rc;
    }
    c->be = *be;
    c->timeout = env->timeout;
    TR_CHECK(wrap(c, env, compute, comm, env->host));
    if (env->rank == 0)
        LOG_INFO(COMM, "NCCL %d.%d.%d: %d ranks", version / 10000, version / 100 % 100, version % 100, env->world);
    return TR_OK;
}
