/* comm_mpi.c: the collectives over Open MPI (CPU backend: buffers in host memory).
 * Each communicator holds its own MPI_Comm (a duplicate of MPI_COMM_WORLD, or a
 * split of one), so terarec's traffic never mixes with another library's.
 * Counts and displacements are converted to MPI's int; messages beyond INT_MAX
 * elements per peer are refused (TR_ERR_UNSUPPORTED) rather than silently
 * truncated. It does not overlap communication with compute. */
#define TR_SUBSYS TR_SUB_COMM
#include "comm.h"

#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"

struct mpi_ctx {
    MPI_Comm comm;
    int size;
    int *sc, *sd, *rc, *rd; /* (size) int copies of counts and displacements */
    int finalize;           /* this communicator called MPI_Init: its close finalizes */
};

static enum tr_status mpi_fail(const char *what, int err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    LOG_ERROR("%s failed: %.*s", what, len, msg);
    return TR_ERR_MPI;
}

static MPI_Datatype mpi_type(enum kern_dtype t)
{
    switch (t) {
    case KERN_F32: return MPI_FLOAT;
    case KERN_I32: return MPI_INT32_T;
    case KERN_I64: return MPI_INT64_T;
    case KERN_I8: return MPI_INT8_T;
    case KERN_U8: return MPI_UINT8_T;
    case KERN_I16: return MPI_INT16_T;
    case KERN_F16: return MPI_UINT16_T;
    case KERN_BF16: return MPI_UINT16_T;
    case KERN_F64: return MPI_DOUBLE;
    }
    return MPI_BYTE;
}

static int to_int(const int64_t *in, int *out, int n)
{
    for (int i = 0; i < n; i++) {
        if (in[i] < 0 || in[i] > INT_MAX)
            return -1;
        out[i] = (int)in[i];
    }
    return 0;
}

static enum tr_status m_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                  void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    struct mpi_ctx *m = c->ctx;
    if (to_int(scounts, m->sc, m->size) || to_int(sdispls, m->sd, m->size) || to_int(rcounts, m->rc, m->size) ||
        to_int(rdispls, m->rd, m->size))
        return TR_ERR_UNSUPPORTED;
    int err = MPI_Alltoallv(send, m->sc, m->sd, mpi_type(t), recv, m->rc, m->rd, mpi_type(t), m->comm);
    return err == MPI_SUCCESS ? TR_OK : mpi_fail("MPI_Alltoallv", err);
}

static enum tr_status m_allreduce(struct comm *c, void *buf, int64_t n, enum kern_dtype t)
{
    struct mpi_ctx *m = c->ctx;
    if (t != KERN_F32 && t != KERN_F64 && t != KERN_I64 && t != KERN_I32)
        return TR_ERR_ARG;
    MPI_Datatype dt = mpi_type(t);
    size_t es = kern_dtype_size(t);
    for (int64_t off = 0; off < n;) { /* chunks of at most INT_MAX elements */
        int cnt = (int)TR_MIN(n - off, (int64_t)INT_MAX);
        int err = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * es, cnt, dt, MPI_SUM, m->comm);
        if (err != MPI_SUCCESS)
            return mpi_fail("MPI_Allreduce", err);
        off += cnt;
    }
    return TR_OK;
}

static enum tr_status m_bcast(struct comm *c, void *buf, int64_t bytes, int root)
{
    struct mpi_ctx *m = c->ctx;
    for (int64_t off = 0; off < bytes;) {
        int cnt = (int)TR_MIN(bytes - off, (int64_t)INT_MAX);
        int err = MPI_Bcast((char *)buf + off, cnt, MPI_BYTE, root, m->comm);
        if (err != MPI_SUCCESS)
            return mpi_fail("MPI_Bcast", err);
        off += cnt;
    }
    return TR_OK;
}

static enum tr_status m_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                                const int64_t *rdispls, enum kern_dtype t, int root)
{
    struct mpi_ctx *m = c->ctx;
    if (scount > INT_MAX)
        return TR_ERR_UNSUPPORTED;
    if (c->rank == root && (to_int(rcounts, m->rc, m->size) || to_int(rdispls, m->rd, m->size)))
        return TR_ERR_UNSUPPORTED;
    int err = MPI_Gatherv(send, (int)scount, mpi_type(t), recv, m->rc, m->rd, mpi_type(t), root, m->comm);
    return err == MPI_SUCCESS ? TR_OK : mpi_fail("MPI_Gatherv", err);
}

static enum tr_status m_barrier(struct comm *c)
{
    struct mpi_ctx *m = c->ctx;
    int err = MPI_Barrier(m->comm);
    return err == MPI_SUCCESS ? TR_OK : mpi_fail("MPI_Barrier", err);
}

/* MPI calls are blocking: there is nothing to group and nothing queued. */
static enum tr_status m_nothing(struct comm *c)
{
    (void)c;
    return TR_OK;
}

static void m_destroy(struct comm *c)
{
    struct mpi_ctx *m = c->ctx;
    if (!m)
        return;
    int fin = m->finalize, done = 0;
    MPI_Finalized(&done);
    if (!done && m->comm != MPI_COMM_NULL)
        MPI_Comm_free(&m->comm);
    tr_free(m->sc);
    tr_free(m);
    c->ctx = NULL;
    if (fin && !done)
        MPI_Finalize();
}

static enum tr_status wrap(MPI_Comm comm, int finalize, struct comm *c);

static enum tr_status m_split(struct comm *c, int color, int key, struct comm *out)
{
    struct mpi_ctx *m = c->ctx;
    MPI_Comm sub = MPI_COMM_NULL;
    int err = MPI_Comm_split(m->comm, color, key, &sub);
    if (err != MPI_SUCCESS)
        return mpi_fail("MPI_Comm_split", err);
    enum tr_status rc = wrap(sub, 0, out);
    if (rc != TR_OK)
        MPI_Comm_free(&sub);
    return rc;
}

static const struct comm_i mpi_iface = {
    .name = "mpi",
    .alltoallv = m_alltoallv,
    .allreduce_sum = m_allreduce,
    .bcast = m_bcast,
    .gatherv = m_gatherv,
    .barrier = m_barrier,
    .group_begin = m_nothing,
    .group_end = m_nothing,
    .split = m_split,
    .synchronize = m_nothing,
    .destroy = m_destroy,
    .host_buffers = 1,
};

/* A struct comm around an MPI communicator it now owns. */
static enum tr_status wrap(MPI_Comm comm, int finalize, struct comm *c)
{
    memset(c, 0, sizeof *c);
    int rank, size;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    struct mpi_ctx *m = tr_calloc(1, sizeof *m);
    int *ints = tr_malloc((size_t)size * 4 * sizeof(int));
    if (!m || !ints) {
        tr_free(m);
        tr_free(ints);
        return TR_ERR_NOMEM;
    }
    m->comm = comm;
    m->size = size;
    m->sc = ints;
    m->sd = ints + size;
    m->rc = ints + 2 * size;
    m->rd = ints + 3 * size;
    m->finalize = finalize;
    c->i = &mpi_iface;
    c->ctx = m;
    c->rank = rank;
    c->size = size;
    return TR_OK;
}

enum tr_status comm_open_mpi(const struct dist_info *d, const struct kern_backend *be, struct comm *c)
{
    memset(c, 0, sizeof *c);
    if (be->i->queue(be->ctx) != NULL) {
        LOG_ERROR("backend '%s' keeps its buffers in device memory; the MPI collectives need host memory",
                  be->i->name);
        LOG_HINT("use --backend cpu with several workers until the NCCL collectives exist");
        return TR_ERR_UNSUPPORTED;
    }
    int inited = 0, provided = 0, err;
    MPI_Initialized(&inited);
    if (!inited && (err = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
        return mpi_fail("MPI_Init_thread", err);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != d->rank || size != d->world) {
        LOG_ERROR("MPI says rank %d of %d but PMIx says rank %d of %d", rank, size, d->rank, d->world);
        LOG_HINT("launch with 'mpirun' or 'srun --mpi=pmix' (one launcher for the whole job)");
        if (!inited)
            MPI_Finalize();
        return TR_ERR_MPI;
    }
    MPI_Comm dup = MPI_COMM_NULL;
    if ((err = MPI_Comm_dup(MPI_COMM_WORLD, &dup)) != MPI_SUCCESS) {
        enum tr_status rc = mpi_fail("MPI_Comm_dup", err);
        if (!inited)
            MPI_Finalize();
        return rc;
    }
    enum tr_status rc = wrap(dup, !inited, c);
    if (rc != TR_OK) {
        MPI_Comm_free(&dup);
        if (!inited)
            MPI_Finalize();
        return rc;
    }
    c->be = *be;
    return TR_OK;
}
#endif
