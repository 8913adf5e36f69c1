/* comm.c: dispatch and traffic accounting for the collectives, and the
 * single-process communicator (copies, or nothing at all). */
#include "comm.h"

#include <string.h>
#include <time.h>

#include "../common/check.h"

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- world of 1 ------------------------------------------------------------------ */

static enum tr_status self_alltoallv(void *ctx, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                     void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    (void)ctx;
    if (scounts[0] != rcounts[0])
        return TR_ERR_ARG;
    size_t es = kern_dtype_size(t);
    if (scounts[0] && (const char *)send + sdispls[0] * es != (char *)recv + rdispls[0] * es)
        memmove((char *)recv + rdispls[0] * es, (const char *)send + sdispls[0] * es, (size_t)scounts[0] * es);
    return TR_OK;
}

static enum tr_status self_allreduce(void *ctx, void *buf, int64_t n, enum kern_dtype t)
{
    (void)ctx;
    (void)buf;
    (void)n;
    (void)t;
    return TR_OK;
}

static enum tr_status self_bcast(void *ctx, void *buf, int64_t bytes, int root)
{
    (void)ctx;
    (void)buf;
    (void)bytes;
    return root == 0 ? TR_OK : TR_ERR_ARG;
}

static enum tr_status self_gatherv(void *ctx, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                                   const int64_t *rdispls, enum kern_dtype t, int root)
{
    (void)ctx;
    if (root != 0 || rcounts[0] != scount)
        return TR_ERR_ARG;
    size_t es = kern_dtype_size(t);
    if (scount)
        memmove((char *)recv + rdispls[0] * es, send, (size_t)scount * es);
    return TR_OK;
}

static enum tr_status self_barrier(void *ctx)
{
    (void)ctx;
    return TR_OK;
}

static void self_destroy(void *ctx)
{
    (void)ctx;
}

static const struct comm_i self_iface = {
    .name = "self",
    .alltoallv = self_alltoallv,
    .allreduce_sum = self_allreduce,
    .bcast = self_bcast,
    .gatherv = self_gatherv,
    .barrier = self_barrier,
    .destroy = self_destroy,
};

void comm_open_self(struct comm *c)
{
    memset(c, 0, sizeof *c);
    c->i = &self_iface;
    c->rank = 0;
    c->size = 1;
}

enum tr_status comm_open(const struct dist_info *d, struct comm *c)
{
    if (d->world <= 1) {
        comm_open_self(c);
        return TR_OK;
    }
#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
    return comm_open_mpi(d, c);
#else
    LOG_ERROR("a world of %d workers needs MPI, and this build has none", d->world);
    LOG_HINT("install libopenmpi-dev and rebuild (make deps && make)");
    return TR_ERR_UNSUPPORTED;
#endif
}

void comm_close(struct comm *c)
{
    if (c->i)
        c->i->destroy(c->ctx);
    memset(c, 0, sizeof *c);
}

void comm_reset_stats(struct comm *c)
{
    memset(c->stat, 0, sizeof c->stat);
}

static void account(struct comm *c, enum comm_kind k, int64_t bytes, double t0)
{
    c->stat[k].calls++;
    c->stat[k].bytes += bytes;
    c->stat[k].seconds += now_sec() - t0;
}

enum tr_status comm_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                              void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    double t0 = now_sec();
    TR_CHECK(c->i->alltoallv(c->ctx, send, scounts, sdispls, recv, rcounts, rdispls, t));
    int64_t n = 0;
    for (int r = 0; r < c->size; r++)
        if (r != c->rank)
            n += scounts[r];
    account(c, COMM_ALLTOALL, n * (int64_t)kern_dtype_size(t), t0);
    return TR_OK;
}

enum tr_status comm_allreduce_sum(struct comm *c, void *buf, int64_t n, enum kern_dtype t)
{
    double t0 = now_sec();
    TR_CHECK(c->i->allreduce_sum(c->ctx, buf, n, t));
    /* the payload; what the network carries depends on MPI's algorithm (a ring
     * sends 2 (N-1)/N times the payload per rank) */
    account(c, COMM_ALLREDUCE, c->size > 1 ? n * (int64_t)kern_dtype_size(t) : 0, t0);
    return TR_OK;
}

enum tr_status comm_bcast(struct comm *c, void *buf, int64_t bytes, int root)
{
    double t0 = now_sec();
    TR_CHECK(c->i->bcast(c->ctx, buf, bytes, root));
    account(c, COMM_BCAST, c->rank == root ? bytes * (c->size - 1) : 0, t0);
    return TR_OK;
}

enum tr_status comm_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                            const int64_t *rdispls, enum kern_dtype t, int root)
{
    double t0 = now_sec();
    TR_CHECK(c->i->gatherv(c->ctx, send, scount, recv, rcounts, rdispls, t, root));
    account(c, COMM_GATHER, c->rank == root ? 0 : scount * (int64_t)kern_dtype_size(t), t0);
    return TR_OK;
}

enum tr_status comm_barrier(struct comm *c)
{
    double t0 = now_sec();
    TR_CHECK(c->i->barrier(c->ctx));
    account(c, COMM_BARRIER, 0, t0);
    return TR_OK;
}
