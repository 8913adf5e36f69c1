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
 * Split-phase calls (comm_ialltoallv, comm_iallreduce_sum) are the same
 * non-blocking collectives, started in a slot of their own (with their own count
 * arrays, which MPI reads until completion) and waited for by comm_wait.
 *
 * Staging: over a backend with device memory, and unless Open MPI is CUDA-aware
 * (Debian's is not), every collective copies its send side into page-locked host
 * buffers (the backend's host_alloc; one pair per slot, grown as needed), runs on
 * those, and copies the received segments back into device memory when it ends.
 * Only the segments: the gaps between them in the receive buffer stay untouched.
 *
 * Counts and displacements are converted to MPI's int; messages beyond INT_MAX
 * elements per peer are refused (TR_ERR_UNSUPPORTED) rather than silently
 * truncated. */
#define TR_SUBSYS TR_SUB_COMM
#define _POSIX_C_SOURCE 200809L
#include "comm.h"

#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h> /* MPIX_Query_cuda_support */
#endif
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

/* One collective in flight: the blocking calls use slot BLOCKING, split-phase
 * ones the slots below it. */
#define BLOCKING COMM_SLOTS
struct slot {
    MPI_Request req;
    int *sc, *sd, *rc, *rd;  /* (size) int copies of counts and displacements */
    void *hs, *hr;           /* staging: host send and receive buffers */
    size_t hs_cap, hr_cap;
    enum comm_kind kind;     /* what it ends with (staging: which copy back) */
    void *dst;               /* staging: the device buffer the result goes to */
    int64_t n;               /* all-reduce: elements */
    size_t es;               /* element size */
    const char *what;        /* the MPI call, for messages */
};

struct mpi_ctx {
    MPI_Comm comm, ctl;     /* collectives; control messages */
    int size;
    int stage;              /* copy through host buffers (see the file comment) */
    struct slot slot[COMM_SLOTS + 1];
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

/* A started MPI call: counts it, and marks the communicator broken on an error. */
static enum tr_status issued(struct comm *c, int err, const char *what)
{
    struct mpi_ctx *m = c->ctx;
    m->seq++;
    if (err != MPI_SUCCESS) {
        m->broken = 1;
        return mpi_fail(what, err);
    }
    return TR_OK;
}

/* Host staging buffer *p of at least `need` bytes (grows; contents not kept). */
static enum tr_status host_buf(struct comm *c, void **p, size_t *cap, size_t need)
{
    if (*cap >= need && *p)
        return TR_OK;
    const struct kern_backend *be = &c->be;
    if (*p)
        be->i->host_release(be->ctx, *p, *cap);
    *p = NULL;
    *cap = 0;
    size_t want = TR_MAX(need, (size_t)4096);
    TR_CHECK(be->i->host_alloc(be->ctx, want, p));
    *cap = want;
    return TR_OK;
}

static int64_t extent(const int64_t *cnt, const int64_t *dsp, int n)
{
    int64_t e = 0;
    for (int q = 0; q < n; q++)
        if (cnt[q] > 0)
            e = TR_MAX(e, dsp[q] + cnt[q]);
    return e;
}

/* Device -> host staging (the copy is ordered after the backend's queued work and
 * the data is there when it returns). */
static enum tr_status to_host(struct comm *c, void *h, const void *d, size_t bytes)
{
    return bytes ? c->be.i->copy(c->be.ctx, h, d, bytes, KERN_D2H) : TR_OK;
}

/* Host staging -> device, segment by segment (adjacent ones in one copy). */
static enum tr_status segs_to_dev(struct comm *c, char *dst, const char *h, const int *cnt, const int *dsp, int n,
                                  size_t es)
{
    for (int q = 0; q < n;) {
        if (cnt[q] <= 0) {
            q++;
            continue;
        }
        int64_t a = dsp[q], b = a + cnt[q];
        for (q++; q < n && cnt[q] > 0 && dsp[q] == b; q++)
            b += cnt[q];
        TR_CHECK(c->be.i->copy(c->be.ctx, dst + (size_t)a * es, h + (size_t)a * es, (size_t)(b - a) * es, KERN_H2D));
    }
    return TR_OK;
}

/* Starts op in slot k (see struct slot). */
static enum tr_status m_start(struct comm *c, const struct comm_op *op, int k)
{
    struct mpi_ctx *m = c->ctx;
    struct slot *s = &m->slot[k];
    const size_t es = kern_dtype_size(op->t);
    const MPI_Datatype dt = mpi_type(op->t);
    s->kind = op->kind;
    s->dst = op->buf;
    s->es = es;
    s->req = MPI_REQUEST_NULL;
    if (op->kind == COMM_ALLTOALL) {
        if (to_int(op->scounts, s->sc, m->size) || to_int(op->sdispls, s->sd, m->size) ||
            to_int(op->rcounts, s->rc, m->size) || to_int(op->rdispls, s->rd, m->size))
            return TR_ERR_UNSUPPORTED;
        const void *sb = op->send;
        void *rb = op->buf;
        if (m->stage) {
            const size_t sbytes = (size_t)extent(op->scounts, op->sdispls, m->size) * es;
            const size_t rbytes = (size_t)extent(op->rcounts, op->rdispls, m->size) * es;
            TR_CHECK(host_buf(c, &s->hs, &s->hs_cap, sbytes));
            TR_CHECK(host_buf(c, &s->hr, &s->hr_cap, rbytes));
            TR_CHECK(to_host(c, s->hs, op->send, sbytes));
            sb = s->hs;
            rb = s->hr;
        }
        s->what = "MPI_Ialltoallv";
        return issued(c, MPI_Ialltoallv(sb, s->sc, s->sd, dt, rb, s->rc, s->rd, dt, m->comm, &s->req), s->what);
    }
    if (op->t != KERN_F32 && op->t != KERN_F64 && op->t != KERN_I64 && op->t != KERN_I32)
        return TR_ERR_ARG;
    if (op->n < 0 || op->n > INT_MAX)
        return TR_ERR_UNSUPPORTED; /* the blocking call splits it into chunks */
    s->n = op->n;
    void *b = op->buf;
    if (m->stage) {
        TR_CHECK(host_buf(c, &s->hs, &s->hs_cap, (size_t)op->n * es));
        TR_CHECK(to_host(c, s->hs, op->buf, (size_t)op->n * es));
        b = s->hs;
    }
    s->what = "MPI_Iallreduce";
    return issued(c, MPI_Iallreduce(MPI_IN_PLACE, b, (int)op->n, dt, MPI_SUM, m->comm, &s->req), s->what);
}

/* Waits for slot k and, when staging, copies its result into device memory. */
static enum tr_status m_finish(struct comm *c, int k)
{
    struct mpi_ctx *m = c->ctx;
    struct slot *s = &m->slot[k];
    TR_CHECK(m_wait(c, &s->req, s->what));
    if (!m->stage)
        return TR_OK;
    if (s->kind == COMM_ALLTOALL)
        return segs_to_dev(c, s->dst, s->hr, s->rc, s->rd, m->size, s->es);
    return s->n ? c->be.i->copy(c->be.ctx, s->dst, s->hs, (size_t)s->n * s->es, KERN_H2D) : TR_OK;
}

static enum tr_status m_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                  void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    const struct comm_op op = {.kind = COMM_ALLTOALL, .send = send, .buf = recv, .scounts = scounts,
                               .sdispls = sdispls, .rcounts = rcounts, .rdispls = rdispls, .t = t};
    TR_CHECK(m_start(c, &op, BLOCKING));
    return m_finish(c, BLOCKING);
}

static enum tr_status m_allreduce(struct comm *c, void *buf, int64_t n, enum kern_dtype t)
{
    size_t es = kern_dtype_size(t);
    for (int64_t off = 0; off < n;) { /* chunks of at most INT_MAX elements */
        const int64_t cnt = TR_MIN(n - off, (int64_t)INT_MAX);
        const struct comm_op op = {.kind = COMM_ALLREDUCE, .buf = (char *)buf + off * es, .n = cnt, .t = t};
        TR_CHECK(m_start(c, &op, BLOCKING));
        TR_CHECK(m_finish(c, BLOCKING));
        off += cnt;
    }
    return TR_OK;
}

static enum tr_status m_bcast(struct comm *c, void *buf, int64_t bytes, int root)
{
    struct mpi_ctx *m = c->ctx;
    struct slot *s = &m->slot[BLOCKING];
    for (int64_t off = 0; off < bytes;) {
        int cnt = (int)TR_MIN(bytes - off, (int64_t)INT_MAX);
        char *b = (char *)buf + off;
        if (m->stage) {
            TR_CHECK(host_buf(c, &s->hs, &s->hs_cap, (size_t)cnt));
            if (c->rank == root)
                TR_CHECK(to_host(c, s->hs, b, (size_t)cnt));
            b = s->hs;
        }
        s->req = MPI_REQUEST_NULL;
        TR_CHECK(issued(c, MPI_Ibcast(b, cnt, MPI_BYTE, root, m->comm, &s->req), "MPI_Ibcast"));
        TR_CHECK(m_wait(c, &s->req, "MPI_Ibcast"));
        if (m->stage && c->rank != root)
            TR_CHECK(c->be.i->copy(c->be.ctx, (char *)buf + off, s->hs, (size_t)cnt, KERN_H2D));
        off += cnt;
    }
    return TR_OK;
}

static enum tr_status m_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                                const int64_t *rdispls, enum kern_dtype t, int root)
{
    struct mpi_ctx *m = c->ctx;
    struct slot *s = &m->slot[BLOCKING];
    const size_t es = kern_dtype_size(t);
    if (scount < 0 || scount > INT_MAX)
        return TR_ERR_UNSUPPORTED;
    if (c->rank == root && (to_int(rcounts, s->rc, m->size) || to_int(rdispls, s->rd, m->size)))
        return TR_ERR_UNSUPPORTED;
    const void *sb = send;
    void *rb = recv;
    if (m->stage) {
        TR_CHECK(host_buf(c, &s->hs, &s->hs_cap, (size_t)scount * es));
        TR_CHECK(to_host(c, s->hs, send, (size_t)scount * es));
        sb = s->hs;
        if (c->rank == root) {
            TR_CHECK(host_buf(c, &s->hr, &s->hr_cap, (size_t)extent(rcounts, rdispls, m->size) * es));
            rb = s->hr;
        }
    }
    s->req = MPI_REQUEST_NULL;
    TR_CHECK(issued(c, MPI_Igatherv(sb, (int)scount, mpi_type(t), rb, s->rc, s->rd, mpi_type(t), root, m->comm,
                                    &s->req),
                    "MPI_Igatherv"));
    TR_CHECK(m_wait(c, &s->req, "MPI_Igatherv"));
    if (m->stage && c->rank == root)
        TR_CHECK(segs_to_dev(c, recv, s->hr, s->rc, s->rd, m->size, es));
    return TR_OK;
}

static enum tr_status m_barrier(struct comm *c)
{
    struct mpi_ctx *m = c->ctx;
    MPI_Request r = MPI_REQUEST_NULL;
    TR_CHECK(issued(c, MPI_Ibarrier(m->comm, &r), "MPI_Ibarrier"));
    return m_wait(c, &r, "MPI_Ibarrier");
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
    for (int k = 0; k <= COMM_SLOTS; k++) {
        struct slot *sl = &m->slot[k];
        if (c->be.i && sl->hs)
            c->be.i->host_release(c->be.ctx, sl->hs, sl->hs_cap);
        if (c->be.i && sl->hr)
            c->be.i->host_release(c->be.ctx, sl->hr, sl->hr_cap);
        tr_free(sl->sc);
    }
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

static enum tr_status wrap(MPI_Comm comm, int finalize, int stage, struct comm *c);
static void gather_hosts(struct comm *c, const char *host);

static enum tr_status m_split(struct comm *c, int color, int key, struct comm *out)
{
    struct mpi_ctx *m = c->ctx;
    MPI_Comm sub = MPI_COMM_NULL;
    int err = MPI_Comm_split(m->comm, color, key, &sub);
    if (err != MPI_SUCCESS)
        return mpi_fail("MPI_Comm_split", err);
    enum tr_status rc = wrap(sub, 0, m->stage, out);
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
    .start = m_start,
    .wait = m_finish,
    .abort = m_abort,
    .destroy = m_destroy,
    .host_buffers = 1,
};

/* The same, staging through host buffers: the copies order themselves after the
 * backend's queued work, so nothing needs synchronising first (set up by wrap). */
static struct comm_i mpi_staged_iface;

/* A struct comm around an MPI communicator it now owns (collective over it:
 * duplicates it for control messages). */
static enum tr_status wrap(MPI_Comm comm, int finalize, int stage, struct comm *c)
{
    memset(c, 0, sizeof *c);
    int rank, size, err;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    struct mpi_ctx *m = tr_calloc(1, sizeof *m);
    int64_t *answer = tr_calloc((size_t)size, sizeof(int64_t));
    MPI_Request *areq = tr_malloc((size_t)size * sizeof(MPI_Request));
    int nomem = !m || !answer || !areq;
    for (int k = 0; !nomem && k <= COMM_SLOTS; k++) {
        int *ints = tr_malloc((size_t)size * 4 * sizeof(int));
        struct slot *sl = &m->slot[k];
        sl->sc = ints;
        sl->sd = ints ? ints + size : NULL;
        sl->rc = ints ? ints + 2 * size : NULL;
        sl->rd = ints ? ints + 3 * size : NULL;
        sl->req = MPI_REQUEST_NULL;
        nomem = !ints;
    }
    if (nomem) {
        for (int k = 0; m && k <= COMM_SLOTS; k++)
            tr_free(m->slot[k].sc);
        tr_free(m);
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
    m->stage = stage;
    m->finalize = finalize;
    if (stage) {
        mpi_staged_iface = mpi_iface;
        mpi_staged_iface.host_buffers = 0;
    }
    c->i = stage ? &mpi_staged_iface : &mpi_iface;
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

/* Whether this Open MPI reads and writes CUDA device memory itself (checked after
 * MPI_Init: the answer can depend on the runtime's configuration). */
static int cuda_aware(void)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return 0;
#endif
}

enum tr_status comm_open_mpi(const struct dist_info *d, const struct kern_backend *be, int stage, struct comm *c)
{
    memset(c, 0, sizeof *c);
    int inited = 0, provided = 0, err;
    MPI_Initialized(&inited);
    if (!inited && (err = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
        return mpi_fail("MPI_Init_thread", err);
    /* No rank sends before every rank is out of MPI_Init. Open MPI 4.1 registers
     * its receive callbacks after the modex fence and counts on the empty fence
     * that ends MPI_Init to hold the other ranks back; under srun that fence does
     * not hold the ranks of another node (dist_barrier), and their first message
     * then met a NULL callback: a segfault of one rank at start (2 jobs in about
     * 1,400 of 4 ranks on two nodes; t5001 makes it certain). */
    if (!inited && dist_barrier(d, "mpi_init") != TR_OK) {
        MPI_Finalize();
        return TR_ERR_MPI;
    }
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
    const int device = be->i->queue(be->ctx) != NULL;
    if (device && cuda_aware()) {
        stage = 0;
        if (d->rank == 0)
            LOG_INFO(COMM, "Open MPI is CUDA-aware: the collectives read and write GPU memory directly");
    } else if (device && d->rank == 0) {
        LOG_INFO(COMM, "Open MPI is not CUDA-aware: the collectives are staged through page-locked host memory");
    }
    enum tr_status rc = wrap(dup, !inited, stage, c);
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
