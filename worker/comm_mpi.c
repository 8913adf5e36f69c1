/* comm_mpi.c: the collectives over Open MPI (CPU backend: buffers in host memory).
 * Each communicator holds its own MPI_Comm (a duplicate of MPI_COMM_WORLD, or a
 * split of one), so terarec's traffic never mixes with another library's, and a
 * second duplicate for control messages (liveness probes after a timeout).
 *
 * Every collective is started non-blocking (MPI_Ibcast, MPI_Ialltoallv, ...) and
 * waited for by m_wait: MPI_Test in a loop that spins for a short while (most
 * collectives end within it), then sleeps between tests, so a rank waiting on a
 * slow or stopped peer costs no CPU. A wait longer than the communicator's
 * timeout (--collective_timeout) ends in a diagnosis: the waiting rank asks every
 * other rank over the control communicator whether it is alive; ranks waiting in
 * a collective answer with how many collectives they have started; the ones that
 * do not answer are named as silent, and the call fails with TR_ERR_TIMEOUT. A
 * collective that timed out cannot be cancelled: the communicator is then broken
 * and the caller ends the job (comm_abort).
 *
 * Counts and displacements are converted to MPI's int; messages beyond INT_MAX
 * elements per peer are refused (TR_ERR_UNSUPPORTED) rather than silently
 * truncated. It does not overlap communication with compute. */
#define TR_SUBSYS TR_SUB_COMM
#define _POSIX_C_SOURCE 200809L
#include "comm.h"

#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"

/* Waiting: spin this long, then sleep between tests, from SLEEP0 doubling to SLEEP1. */
#define WAIT_SPIN 5e-3
#define WAIT_SLEEP0 20e-6
#define WAIT_SLEEP1 500e-6
#define HOST_LEN 64

enum { TAG_PROBE = 1, TAG_ALIVE = 2 };

struct mpi_ctx {
    MPI_Comm comm, ctl;     /* collectives; control messages */
    int size;
    int *sc, *sd, *rc, *rd; /* (size) int copies of counts and displacements */
    int finalize;           /* this communicator called MPI_Init: its close finalizes */
    int broken;             /* a collective timed out or failed: never free or finalize */
    int64_t seq;            /* collectives started on this communicator */
    int64_t *answer;        /* (size) the last ALIVE answer to each rank (read by its Isend) */
    MPI_Request *answer_req; /* (size) */
    char *hosts;            /* (size x HOST_LEN) host of each rank, for messages */
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

static void nap(double seconds)
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

static const char *host_of(const struct mpi_ctx *m, int rank)
{
    return m->hosts && m->hosts[(size_t)rank * HOST_LEN] ? m->hosts + (size_t)rank * HOST_LEN : "?";
}

/* Answers the liveness probes that arrived ("alive, with `seq` collectives
 * started"); marks the probers alive in `alive` with their position in `seq`
 * (when given): a prober is alive too. One answer per peer is in flight at a time: a peer with one pending needs
 * no second. */
static void answer_probes(struct mpi_ctx *m, char *alive, int64_t *seq)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PROBE, m->ctl, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        const int q = st.MPI_SOURCE;
        int64_t their = 0;
        MPI_Recv(&their, 1, MPI_INT64_T, q, TAG_PROBE, m->ctl, MPI_STATUS_IGNORE);
        if (alive) {
            alive[q] = 1;
            seq[q] = their; /* a prober waits in its collective number `their` */
        }
        int done = 1;
        if (m->answer_req[q] != MPI_REQUEST_NULL)
            MPI_Test(&m->answer_req[q], &done, MPI_STATUS_IGNORE);
        if (!done)
            continue;
        m->answer[q] = m->seq;
        MPI_Isend(&m->answer[q], 1, MPI_INT64_T, q, TAG_ALIVE, m->ctl, &m->answer_req[q]);
    }
}

/* After a timeout: which ranks are alive? Probes every other rank and collects
 * answers for a grace period; logs the silent ones. Always TR_ERR_TIMEOUT. */
static enum tr_status diagnose(struct comm *c, const char *what, double waited, double timeout)
{
    struct mpi_ctx *m = c->ctx;
    const int W = m->size, me = c->rank;
    m->broken = 1;
    char *alive = tr_calloc((size_t)W, 1);
    int64_t *seq = tr_calloc((size_t)W, sizeof(int64_t));
    MPI_Request *req = tr_malloc((size_t)W * sizeof(MPI_Request));
    if (!alive || !seq || !req) {
        LOG_ERROR("%s: no progress for %.3g s (--collective_timeout %.3g)", what, waited, timeout);
        tr_free(alive);
        tr_free(seq);
        tr_free(req);
        return TR_ERR_TIMEOUT;
    }
    int64_t mine = m->seq;
    for (int q = 0; q < W; q++) {
        req[q] = MPI_REQUEST_NULL;
        if (q != me)
            MPI_Isend(&mine, 1, MPI_INT64_T, q, TAG_PROBE, m->ctl, &req[q]);
    }
    alive[me] = 1;
    seq[me] = mine;
    const double grace = TR_MIN(10.0, TR_MAX(1.0, timeout / 10.0));
    const double t_end = tr_clock_now() + grace;
    int answered = 1;
    while (answered < W && tr_clock_now() < t_end) {
        answer_probes(m, alive, seq);
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ALIVE, m->ctl, &flag, &st) == MPI_SUCCESS && flag) {
            int64_t s = 0;
            MPI_Recv(&s, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_ALIVE, m->ctl, MPI_STATUS_IGNORE);
            alive[st.MPI_SOURCE] = 1;
            seq[st.MPI_SOURCE] = s;
            continue;
        }
        answered = 0;
        for (int q = 0; q < W; q++)
            answered += alive[q];
        nap(1e-3);
    }
    /* the silent ranks, with their hosts; the answering ones with their position */
    char silent[1024], waiting[1024];
    size_t ns = 0, nw = 0;
    int nsilent = 0;
    silent[0] = waiting[0] = 0;
    for (int q = 0; q < W; q++) {
        if (!alive[q]) {
            nsilent++;
            if (ns < sizeof silent - 64)
                ns += (size_t)snprintf(silent + ns, sizeof silent - ns, "%s%d (%s)", ns ? ", " : "", q, host_of(m, q));
        } else if (nw < sizeof waiting - 64) {
            nw += (size_t)snprintf(waiting + nw, sizeof waiting - nw, "%s%d@%lld", nw ? " " : "", q,
                                   (long long)seq[q]);
        }
    }
    int ahead = 0;
    for (int q = 0; q < W; q++)
        ahead += alive[q] && seq[q] > mine;
    if (nsilent) {
        LOG_ERROR("%s: no progress for %.3g s (--collective_timeout %.3g); silent rank(s): %s; waiting "
                  "(rank@collectives started): %s",
                  what, waited, timeout, silent, waiting);
        LOG_HINT("a silent rank is stopped, hung, dead, or busy outside collectives for longer than the timeout: "
                 "check its host, or raise --collective_timeout");
    } else if (ahead) {
        LOG_ERROR("%s: no progress for %.3g s (--collective_timeout %.3g); every rank answered, %d of them from a "
                  "later collective (rank@collectives started: %s): this rank fell behind",
                  what, waited, timeout, ahead, waiting);
        LOG_HINT("this rank was stopped or starved for longer than the timeout, or a peer has already ended: see the "
                 "other ranks' logs");
    } else {
        LOG_ERROR("%s: no progress for %.3g s (--collective_timeout %.3g), yet every rank answered from this "
                  "collective (rank@collectives started: %s): the data is not arriving",
                  what, waited, timeout, waiting);
        LOG_HINT("check the network between the ranks' hosts (OMPI_MCA_btl_tcp_if_include), or report it with "
                 "every rank's log");
    }
    for (int q = 0; q < W; q++)
        if (req[q] != MPI_REQUEST_NULL) {
            MPI_Cancel(&req[q]);
            MPI_Request_free(&req[q]);
        }
    tr_free(alive);
    tr_free(seq);
    tr_free(req);
    return TR_ERR_TIMEOUT;
}

/* Waits for a started collective (see the file comment). */
static enum tr_status m_wait(struct comm *c, MPI_Request *req, const char *what)
{
    struct mpi_ctx *m = c->ctx;
    const double t0 = tr_clock_now();
    double nap_s = 0.0, next_poll = t0 + WAIT_SPIN;
    for (;;) {
        int done = 0, err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) {
            m->broken = 1;
            return mpi_fail(what, err);
        }
        if (done)
            return TR_OK;
        double now = tr_clock_now();
        if (now < next_poll)
            continue; /* spinning */
        answer_probes(m, NULL, NULL);
        if (c->timeout > 0 && now - t0 > c->timeout)
            return diagnose(c, what, now - t0, c->timeout);
        nap_s = nap_s == 0.0 ? WAIT_SLEEP0 : TR_MIN(WAIT_SLEEP1, 2 * nap_s);
        nap(nap_s);
        next_poll = 0; /* from now on, poll and sleep on every round */
    }
}

static enum tr_status started(struct comm *c, int err, MPI_Request *req, const char *what)
{
    struct mpi_ctx *m = c->ctx;
    m->seq++;
    if (err != MPI_SUCCESS) {
        m->broken = 1;
        return mpi_fail(what, err);
    }
    return m_wait(c, req, what);
}

static enum tr_status m_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                  void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    struct mpi_ctx *m = c->ctx;
    if (to_int(scounts, m->sc, m->size) || to_int(sdispls, m->sd, m->size) || to_int(rcounts, m->rc, m->size) ||
        to_int(rdispls, m->rd, m->size))
        return TR_ERR_UNSUPPORTED;
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Ialltoallv(send, m->sc, m->sd, mpi_type(t), recv, m->rc, m->rd, mpi_type(t), m->comm, &r);
    return started(c, err, &r, "MPI_Ialltoallv");
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
        MPI_Request r = MPI_REQUEST_NULL;
        int err = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * es, cnt, dt, MPI_SUM, m->comm, &r);
        TR_CHECK(started(c, err, &r, "MPI_Iallreduce"));
        off += cnt;
    }
    return TR_OK;
}

static enum tr_status m_bcast(struct comm *c, void *buf, int64_t bytes, int root)
{
    struct mpi_ctx *m = c->ctx;
    for (int64_t off = 0; off < bytes;) {
        int cnt = (int)TR_MIN(bytes - off, (int64_t)INT_MAX);
        MPI_Request r = MPI_REQUEST_NULL;
        int err = MPI_Ibcast((char *)buf + off, cnt, MPI_BYTE, root, m->comm, &r);
        TR_CHECK(started(c, err, &r, "MPI_Ibcast"));
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
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Igatherv(send, (int)scount, mpi_type(t), recv, m->rc, m->rd, mpi_type(t), root, m->comm, &r);
    return started(c, err, &r, "MPI_Igatherv");
}

static enum tr_status m_barrier(struct comm *c)
{
    struct mpi_ctx *m = c->ctx;
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Ibarrier(m->comm, &r);
    return started(c, err, &r, "MPI_Ibarrier");
}

/* MPI calls complete before they return: there is nothing to group and nothing queued. */
static enum tr_status m_nothing(struct comm *c)
{
    (void)c;
    return TR_OK;
}

/* Ends every process of the job (the launcher reports the rank and the code). */
static void m_abort(struct comm *c, int code)
{
    (void)c;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
}

static void m_destroy(struct comm *c)
{
    struct mpi_ctx *m = c->ctx;
    if (!m)
        return;
    int fin = m->finalize, broken = m->broken, done = 0;
    MPI_Finalized(&done);
    if (!done && !m->broken) {
        for (int q = 0; m->answer_req && q < m->size; q++)
            if (m->answer_req[q] != MPI_REQUEST_NULL) {
                MPI_Cancel(&m->answer_req[q]);
                MPI_Request_free(&m->answer_req[q]);
            }
        if (m->ctl != MPI_COMM_NULL)
            MPI_Comm_free(&m->ctl);
        if (m->comm != MPI_COMM_NULL)
            MPI_Comm_free(&m->comm);
    }
    tr_free(m->sc);
    tr_free(m->answer);
    tr_free(m->answer_req);
    tr_free(m->hosts);
    tr_free(m);
    c->ctx = NULL;
    /* MPI_Finalize waits for every rank: after a failure, or with a collective
     * still pending, it would hang the rank (comm_abort ends the job instead) */
    if (fin && !done && !c->failed && !broken)
        MPI_Finalize();
}

static enum tr_status wrap(MPI_Comm comm, int finalize, struct comm *c);
static void gather_hosts(struct comm *c, const char *host);

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
    else
        gather_hosts(out, host_of(m, c->rank));
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
    .abort = m_abort,
    .destroy = m_destroy,
    .host_buffers = 1,
};

/* A struct comm around an MPI communicator it now owns (collective over it:
 * duplicates it for control messages). */
static enum tr_status wrap(MPI_Comm comm, int finalize, struct comm *c)
{
    memset(c, 0, sizeof *c);
    int rank, size, err;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    struct mpi_ctx *m = tr_calloc(1, sizeof *m);
    int *ints = tr_malloc((size_t)size * 4 * sizeof(int));
    int64_t *answer = tr_calloc((size_t)size, sizeof(int64_t));
    MPI_Request *areq = tr_malloc((size_t)size * sizeof(MPI_Request));
    if (!m || !ints || !answer || !areq) {
        tr_free(m);
        tr_free(ints);
        tr_free(answer);
        tr_free(areq);
        return TR_ERR_NOMEM;
    }
    for (int q = 0; q < size; q++)
        areq[q] = MPI_REQUEST_NULL;
    m->comm = comm;
    m->ctl = MPI_COMM_NULL;
    m->answer = answer;
    m->answer_req = areq;
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
    if ((err = MPI_Comm_dup(comm, &m->ctl)) != MPI_SUCCESS) {
        m->ctl = MPI_COMM_NULL;
        m->comm = MPI_COMM_NULL; /* the caller frees it */
        m->finalize = 0;
        m_destroy(c);
        memset(c, 0, sizeof *c);
        return mpi_fail("MPI_Comm_dup", err);
    }
    MPI_Comm_set_errhandler(m->ctl, MPI_ERRORS_RETURN);
    return TR_OK;
}

/* Every rank's host name, for messages about other ranks (one allgather at startup). */
static void gather_hosts(struct comm *c, const char *host)
{
    struct mpi_ctx *m = c->ctx;
    char mine[HOST_LEN] = {0};
    snprintf(mine, sizeof mine, "%s", host);
    m->hosts = tr_calloc((size_t)m->size, HOST_LEN);
    if (m->hosts && MPI_Allgather(mine, HOST_LEN, MPI_CHAR, m->hosts, HOST_LEN, MPI_CHAR, m->comm) != MPI_SUCCESS) {
        tr_free(m->hosts);
        m->hosts = NULL;
    }
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
    gather_hosts(c, d->host);
    return TR_OK;
}
#endif
