/* comm.c: dispatch, ordering and traffic accounting for the collectives, and the
 * single-process communicator (backend copies, or nothing at all). */
#define TR_SUBSYS TR_SUB_COMM
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "../common/check.h"
#include "../common/alloc.h"
#include "../common/clock.h"

/* ---- world of 1 ------------------------------------------------------------------ */

static enum tr_status self_copy(struct comm *c, void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src)
        return TR_OK;
    return c->be.i->copy(c->be.ctx, dst, src, bytes, KERN_D2D);
}

static enum tr_status self_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                     void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    if (scounts[0] != rcounts[0])
        return TR_ERR_ARG;
    size_t es = kern_dtype_size(t);
    return self_copy(c, (char *)recv + rdispls[0] * es, (const char *)send + sdispls[0] * es,
                     (size_t)scounts[0] * es);
}

static enum tr_status self_allreduce(struct comm *c, void *buf, int64_t n, enum kern_dtype t)
{
    (void)c;
    (void)buf;
    (void)n;
    (void)t;
    return TR_OK;
}

static enum tr_status self_bcast(struct comm *c, void *buf, int64_t bytes, int root)
{
    (void)c;
    (void)buf;
    (void)bytes;
    return root == 0 ? TR_OK : TR_ERR_ARG;
}

static enum tr_status self_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                                   const int64_t *rdispls, enum kern_dtype t, int root)
{
    if (root != 0 || rcounts[0] != scount)
        return TR_ERR_ARG;
    size_t es = kern_dtype_size(t);
    return self_copy(c, (char *)recv + rdispls[0] * es, send, (size_t)scount * es);
}

static enum tr_status self_nothing(struct comm *c)
{
    (void)c;
    return TR_OK;
}

static enum tr_status self_split(struct comm *c, int color, int key, struct comm *out)
{
    (void)color;
    (void)key;
    comm_open_self(&c->be, out);
    return TR_OK;
}

static void self_destroy(struct comm *c)
{
    (void)c;
}

static const struct comm_i self_iface = {
    .name = "self",
    .alltoallv = self_alltoallv,
    .allreduce_sum = self_allreduce,
    .bcast = self_bcast,
    .gatherv = self_gatherv,
    .barrier = self_nothing,
    .group_begin = self_nothing,
    .group_end = self_nothing,
    .split = self_split,
    .synchronize = self_nothing,
    .start = NULL,
    .wait = NULL,
    .abort = NULL,
    .destroy = self_destroy,
    .host_buffers = 0,
};

void comm_open_self(const struct kern_backend *be, struct comm *c)
{
    memset(c, 0, sizeof *c);
    c->i = &self_iface;
    c->be = *be; /* the copies go through the backend */
    c->rank = 0;
    c->size = 1;
}

const char *comm_resolve(int choice, const struct kern_backend *be, int world)
{
    if (choice == COMM_CHOICE_NCCL)
        return "nccl"; /* even for a world of 1: what the NCCL tests run */
    if (world <= 1)
        return "self";
    if (choice == COMM_CHOICE_MPI)
        return "mpi";
#if defined(TR_HAVE_NCCL) && TR_HAVE_NCCL
    if (be->i->queue(be->ctx) != NULL)
        return "nccl";
#else
    (void)be;
#endif
    return "mpi";
}

#if defined(TR_HAVE_NCCL) && TR_HAVE_NCCL
static enum tr_status share_blob(void *arg, const char *key, int root, void *blob, int bytes)
{
    return dist_share_blob((const struct dist_info *)arg, key, root, blob, bytes);
}

static void abort_job(void *arg, int code, const char *why)
{
    dist_abort((struct dist_info *)arg, code, why);
}

static enum tr_status open_nccl(const struct dist_info *d, const struct kern_backend *be, double timeout,
                                struct comm *c)
{
    if (be->i->queue(be->ctx) == NULL) {
        LOG_ERROR("--comm nccl: backend '%s' keeps its buffers in host memory; NCCL needs GPU memory", be->i->name);
        LOG_HINT("use --backend cuda on a machine with GPUs, or --comm mpi (auto picks it for the cpu backend)");
        return TR_ERR_UNSUPPORTED;
    }
    comm_nccl_open_fn open = (comm_nccl_open_fn)kern_cuda_plugin_symbol("comm_nccl_open");
    if (!open) {
        LOG_ERROR("--comm nccl: the CUDA plugin has no NCCL communicator (%s)",
                  kern_cuda_plugin_error() ? kern_cuda_plugin_error() : "comm_nccl_open not found");
        LOG_HINT("rebuild with NCCL installed (make prints nccl=1), or use --comm mpi");
        return TR_ERR_UNSUPPORTED;
    }
    const struct comm_nccl_env env = {
        .rank = d->world > 1 ? d->rank : 0, .world = d->world > 1 ? d->world : 1, .node = d->node, .host = d->host,
        .timeout = timeout, .share = share_blob, .abort_job = abort_job, .arg = (void *)d,
    };
    return open(&env, be, c);
}
#endif

enum tr_status comm_open(const struct dist_info *d, const struct kern_backend *be, int choice, double timeout,
                         struct comm *c)
{
    memset(c, 0, sizeof *c);
    const char *lib = comm_resolve(choice, be, d->world);
    enum tr_status rc = TR_OK;
    if (!strcmp(lib, "self")) {
        comm_open_self(be, c);
    } else if (!strcmp(lib, "nccl")) {
#if defined(TR_HAVE_NCCL) && TR_HAVE_NCCL
        rc = open_nccl(d, be, timeout, c);
#else
        LOG_ERROR("--comm nccl: this build has no NCCL (nccl.h was not found when it was built)");
        LOG_HINT("install NCCL beside the CUDA toolkit and rebuild (make prints nccl=1), or use --comm mpi");
        rc = TR_ERR_UNSUPPORTED;
#endif
    } else {
#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
        const char *env = getenv("TR_COMM_STAGE");
        const int stage = (env && !strcmp(env, "1")) || be->i->queue(be->ctx) != NULL;
        rc = comm_open_mpi(d, be, stage, c);
#else
        LOG_ERROR("a world of %d workers needs MPI, and this build has none", d->world);
        LOG_HINT("install libopenmpi-dev and rebuild (make deps && make)");
        rc = TR_ERR_UNSUPPORTED;
#endif
    }
    if (rc == TR_OK)
        c->timeout = timeout;
    return rc;
}

enum tr_status comm_split_node(struct comm *c, const struct dist_info *d, struct comm *out)
{
    memset(out, 0, sizeof *out);
    TR_CHECK(c->i->split(c, d->node, c->rank, out));
    out->be = c->be;
    return TR_OK;
}

void comm_close(struct comm *c)
{
    if (c->i)
        c->i->destroy(c);
    memset(c, 0, sizeof *c);
}

void comm_reset_stats(struct comm *c)
{
    memset(c->stat, 0, sizeof c->stat);
}

/* Host-memory communicators see the buffers only once the backend has finished
 * writing them. */
static enum tr_status before(struct comm *c, double *t0)
{
    if (c->i->host_buffers)
        TR_CHECK(c->be.i->synchronize(c->be.ctx));
    *t0 = tr_clock_now();
    return TR_OK;
}

/* Counts a collective; outside a group its queue is drained first so the time is
 * real (inside one, the calls only run at the group's end). */
static enum tr_status account(struct comm *c, enum comm_kind k, int64_t bytes, double t0)
{
    if (c->group_depth == 0)
        TR_CHECK(c->i->synchronize(c));
    c->stat[k].calls++;
    c->stat[k].bytes += bytes;
    c->stat[k].seconds += tr_clock_now() - t0;
    return TR_OK;
}

enum tr_status comm_alltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                              void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t)
{
    double t0;
    TR_CHECK(before(c, &t0));
    TR_CHECK(c->i->alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, t));
    int64_t n = 0;
    for (int r = 0; r < c->size; r++)
        if (r != c->rank)
            n += scounts[r];
    return account(c, COMM_ALLTOALL, n * (int64_t)kern_dtype_size(t), t0);
}

enum tr_status comm_allreduce_sum(struct comm *c, void *buf, int64_t n, enum kern_dtype t)
{
    double t0;
    TR_CHECK(before(c, &t0));
    TR_CHECK(c->i->allreduce_sum(c, buf, n, t));
    /* the payload; what the network carries depends on MPI's algorithm (a ring
     * sends 2 (N-1)/N times the payload per rank) */
    return account(c, COMM_ALLREDUCE, c->size > 1 ? n * (int64_t)kern_dtype_size(t) : 0, t0);
}

enum tr_status comm_bcast(struct comm *c, void *buf, int64_t bytes, int root)
{
    double t0;
    TR_CHECK(before(c, &t0));
    TR_CHECK(c->i->bcast(c, buf, bytes, root));
    return account(c, COMM_BCAST, c->rank == root ? bytes * (c->size - 1) : 0, t0);
}

enum tr_status comm_gatherv(struct comm *c, const void *send, int64_t scount, void *recv, const int64_t *rcounts,
                            const int64_t *rdispls, enum kern_dtype t, int root)
{
    double t0;
    TR_CHECK(before(c, &t0));
    TR_CHECK(c->i->gatherv(c, send, scount, recv, rcounts, rdispls, t, root));
    return account(c, COMM_GATHER, c->rank == root ? 0 : scount * (int64_t)kern_dtype_size(t), t0);
}

enum tr_status comm_barrier(struct comm *c)
{
    double t0;
    TR_CHECK(before(c, &t0));
    TR_CHECK(c->i->barrier(c));
    return account(c, COMM_BARRIER, 0, t0);
}

enum tr_status comm_group_begin(struct comm *c)
{
    TR_CHECK(c->i->group_begin(c));
    c->group_depth++;
    return TR_OK;
}

enum tr_status comm_group_end(struct comm *c)
{
    if (c->group_depth < 1) {
        LOG_ERROR("comm_group_end without comm_group_begin");
        return TR_ERR_ARG;
    }
    c->group_depth--;
    TR_CHECK(c->i->group_end(c));
    /* like a single call outside a group: done when it returns (NCCL: waited for
     * with the communicator's error and timeout checks) */
    return c->group_depth == 0 ? c->i->synchronize(c) : TR_OK;
}

enum tr_status comm_synchronize(struct comm *c)
{
    return c->i->synchronize(c);
}

/* Starts op in a free slot, or runs it whole when the library has no split
 * phase; the caller counts the traffic. */
static enum tr_status istart(struct comm *c, const struct comm_op *op, struct comm_req *r)
{
    r->slot = -1;
    r->kind = op->kind;
    if (c->group_depth) {
        LOG_ERROR("a split-phase collective inside a group");
        return TR_ERR_ARG;
    }
    TR_CHECK(before(c, &r->t0));
    if (!c->i->start) {
        if (op->kind == COMM_ALLTOALL)
            return c->i->alltoallv(c, op->send, op->scounts, op->sdispls, op->buf, op->rcounts, op->rdispls, op->t);
        return c->i->allreduce_sum(c, op->buf, op->n, op->t);
    }
    int slot = 0;
    while (slot < COMM_SLOTS && (c->slots_busy & (1u << slot)))
        slot++;
    if (slot == COMM_SLOTS) {
        LOG_ERROR("more than %d split-phase collectives in flight", COMM_SLOTS);
        return TR_ERR_ARG;
    }
    TR_CHECK(c->i->start(c, op, slot));
    c->slots_busy |= 1u << slot;
    r->slot = slot;
    return TR_OK;
}

enum tr_status comm_ialltoallv(struct comm *c, const void *send, const int64_t *scounts, const int64_t *sdispls,
                               void *recv, const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t,
                               struct comm_req *r)
{
    const struct comm_op op = {.kind = COMM_ALLTOALL, .send = send, .buf = recv, .scounts = scounts,
                               .sdispls = sdispls, .rcounts = rcounts, .rdispls = rdispls, .t = t};
    TR_CHECK(istart(c, &op, r));
    int64_t n = 0;
    for (int q = 0; q < c->size; q++)
        if (q != c->rank)
            n += scounts[q];
    c->stat[COMM_ALLTOALL].calls++;
    c->stat[COMM_ALLTOALL].bytes += n * (int64_t)kern_dtype_size(t);
    c->stat[COMM_ALLTOALL].seconds += tr_clock_now() - r->t0;
    return TR_OK;
}

enum tr_status comm_iallreduce_sum(struct comm *c, void *buf, int64_t n, enum kern_dtype t, struct comm_req *r)
{
    const struct comm_op op = {.kind = COMM_ALLREDUCE, .buf = buf, .n = n, .t = t};
    TR_CHECK(istart(c, &op, r));
    c->stat[COMM_ALLREDUCE].calls++;
    c->stat[COMM_ALLREDUCE].bytes += c->size > 1 ? n * (int64_t)kern_dtype_size(t) : 0;
    c->stat[COMM_ALLREDUCE].seconds += tr_clock_now() - r->t0;
    return TR_OK;
}

enum tr_status comm_wait(struct comm *c, struct comm_req *r)
{
    if (r->slot < 0)
        return TR_OK;
    const double t0 = tr_clock_now();
    const int slot = r->slot;
    r->slot = -1;
    c->slots_busy &= ~(1u << slot);
    TR_CHECK(c->i->wait(c, slot));
    c->stat[r->kind].seconds += tr_clock_now() - t0;
    return TR_OK;
}

/* A temporary buffer in the backend's memory. */
static enum tr_status stage(struct comm *c, size_t bytes, void **p)
{
    *p = NULL;
    return kern_alloc(&c->be, bytes ? bytes : 1, p, "a staging buffer of a collective");
}

enum tr_status comm_bcast_host(struct comm *c, void *buf, int64_t bytes, int root)
{
    void *d = NULL;
    TR_CHECK(stage(c, (size_t)bytes, &d));
    const struct kern_backend *be = &c->be;
    enum tr_status rc = TR_OK;
    if (c->rank == root)
        TR_CHECK_GOTO(be->i->copy(be->ctx, d, buf, (size_t)bytes, KERN_H2D), rc, exit);
    TR_CHECK_GOTO(comm_bcast(c, d, bytes, root), rc, exit);
    if (c->rank != root)
        TR_CHECK_GOTO(be->i->copy(be->ctx, buf, d, (size_t)bytes, KERN_D2H), rc, exit);
exit:
    be->i->mem_release(be->ctx, d, (size_t)(bytes ? bytes : 1));
    return rc;
}

enum tr_status comm_gatherv_host(struct comm *c, const void *send, int64_t scount, void *recv,
                                 const int64_t *rcounts, const int64_t *rdispls, enum kern_dtype t, int root)
{
    const struct kern_backend *be = &c->be;
    const size_t es = kern_dtype_size(t);
    int64_t total = 0;
    for (int q = 0; c->rank == root && q < c->size; q++)
        total = TR_MAX(total, rdispls[q] + rcounts[q]);
    const size_t sbytes = (size_t)scount * es, rbytes = (size_t)total * es;
    void *ds = NULL, *dr = NULL;
    enum tr_status rc = TR_OK;
    TR_CHECK_GOTO(stage(c, sbytes, &ds), rc, exit);
    if (c->rank == root)
        TR_CHECK_GOTO(stage(c, rbytes, &dr), rc, exit);
    if (sbytes)
        TR_CHECK_GOTO(be->i->copy(be->ctx, ds, send, sbytes, KERN_H2D), rc, exit);
    TR_CHECK_GOTO(comm_gatherv(c, ds, scount, dr, rcounts, rdispls, t, root), rc, exit);
    if (c->rank == root && rbytes)
        TR_CHECK_GOTO(be->i->copy(be->ctx, recv, dr, rbytes, KERN_D2H), rc, exit);
exit:
    be->i->mem_release(be->ctx, ds, sbytes ? sbytes : 1);
    be->i->mem_release(be->ctx, dr, rbytes ? rbytes : 1);
    return rc;
}

enum tr_status comm_gather_host(struct comm *c, const void *mine, int64_t bytes, void *all, int root)
{
    const int W = c->size;
    int64_t *cnt = tr_malloc((size_t)W * 2 * sizeof(int64_t));
    if (!cnt)
        return TR_ERR_NOMEM;
    for (int q = 0; q < W; q++) {
        cnt[q] = bytes;
        cnt[W + q] = bytes * q;
    }
    enum tr_status rc = comm_gatherv_host(c, mine, bytes, all, cnt, cnt + W, KERN_U8, root);
    tr_free(cnt);
    return rc;
}

void comm_abort(struct comm *c, enum tr_status st)
{
    c->failed = 1;
    if (!c->i || !c->i->abort || c->size < 2)
        return;
    const int code = tr_status_exit_code(st);
    LOG_ERROR("rank %d of %d failed (%s): ending the job on every rank (exit code %d)", c->rank, c->size,
              tr_strerror(st), code);
    c->i->abort(c, code);
}

enum tr_status comm_vote(struct comm *c, enum tr_status mine, const char *what, int *together)
{
    int64_t verdict = mine;
    if (c->size > 1) {
        const int W = c->size;
        int64_t *all = c->rank == 0 ? tr_calloc((size_t)W, sizeof(int64_t)) : NULL;
        if (c->rank == 0 && !all)
            return TR_ERR_NOMEM;
        enum tr_status rc = comm_gather_host(c, &verdict, sizeof verdict, all, 0);
        if (rc == TR_OK && c->rank == 0) {
            char who[256];
            size_t o = 0;
            who[0] = 0;
            for (int q = 0; q < W; q++) {
                if (all[q] == TR_OK)
                    continue;
                if (verdict == TR_OK)
                    verdict = all[q];
                if (o < sizeof who - 16)
                    o += (size_t)snprintf(who + o, sizeof who - o, "%s%d", o ? ", " : "", q);
            }
            if (what && mine == TR_OK && verdict != TR_OK)
                LOG_ERROR("rank(s) %s %s (their logs say why): stopping every rank", who, what);
        }
        tr_free(all);
        if (rc == TR_OK)
            rc = comm_bcast_host(c, &verdict, sizeof verdict, 0);
        if (rc != TR_OK)
            return rc;
    }
    if (verdict != TR_OK)
        *together = 1;
    return (enum tr_status)verdict;
}

/* The length of line k of text (lines end at '\n'), and where it starts. */
static const char *line_at(const char *text, int64_t k, size_t *len)
{
    const char *p = text;
    for (int64_t i = 0; i < k && p; i++) {
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    if (!p || !*p) {
        *len = 0;
        return NULL;
    }
    const char *e = strchr(p, '\n');
    *len = e ? (size_t)(e - p) : strlen(p);
    return p;
}

/* The first line where a and b differ (-1: none). */
static int64_t first_diff(const char *a, const char *b)
{
    for (int64_t k = 0;; k++) {
        size_t la, lb;
        const char *pa = line_at(a, k, &la), *pb = line_at(b, k, &lb);
        if (!pa && !pb)
            return -1;
        if (!pa || !pb || la != lb || memcmp(pa, pb, la) != 0)
            return k;
    }
}

/* What a differing rank reports to rank 0: its first differing line. */
struct agree_rec {
    int64_t line; /* -1: agrees */
    char text[248];
};

enum tr_status comm_agree(struct comm *c, const char *what, const char *text)
{
    if (c->size < 2)
        return TR_OK;
    const int W = c->size, me = c->rank;
    uint64_t mine = XXH3_64bits(text, strlen(text)), root = mine;
    TR_CHECK(comm_bcast_host(c, &root, sizeof root, 0));
    /* every rank learns whether any differs */
    int differ = 0;
    enum tr_status rc = comm_vote(c, root != mine ? TR_ERR_ARG : TR_OK, NULL, &differ);
    if (!differ)
        return rc; /* TR_OK, or a failed collective */

    /* a mismatch: rank 0's text to all, each rank's first differing line back */
    int64_t len = (int64_t)strlen(text);
    TR_CHECK(comm_bcast_host(c, &len, sizeof len, 0));
    char *ref = tr_malloc((size_t)len + 1);
    struct agree_rec rec = {.line = -1}, *all = me == 0 ? tr_calloc((size_t)W, sizeof *all) : NULL;
    if (!ref || (me == 0 && !all)) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    if (me == 0)
        memcpy(ref, text, (size_t)len);
    ref[len] = 0;
    TR_CHECK_GOTO(comm_bcast_host(c, ref, len, 0), rc, exit);
    rec.line = first_diff(ref, text);
    if (rec.line >= 0) {
        size_t l = 0;
        const char *p = line_at(text, rec.line, &l);
        snprintf(rec.text, sizeof rec.text, "%.*s", p ? (int)TR_MIN(l, sizeof rec.text - 1) : 0, p ? p : "");
    }
    TR_CHECK_GOTO(comm_gather_host(c, &rec, sizeof rec, all, 0), rc, exit);
    if (me == 0) {
        int first = -1, n = 0;
        for (int q = 1; q < W; q++)
            if (all[q].line >= 0) {
                n++;
                if (first < 0)
                    first = q;
            }
        if (first > 0) {
            size_t l = 0;
            const char *p = line_at(ref, all[first].line, &l);
            char others[32] = "";
            if (n > 1)
                snprintf(others, sizeof others, " (%d ranks differ)", n);
            const char *o = all[first].text, *eq0 = p ? memchr(p, '=', l) : NULL, *eq1 = strchr(o, '=');
            if (eq0 && eq1 && eq0 - p == eq1 - o && memcmp(p, o, (size_t)(eq0 - p)) == 0)
                LOG_ERROR("the ranks disagree on %s: --%.*s is '%.*s' on rank 0 but '%s' on rank %d%s", what,
                          (int)(eq0 - p), p, (int)(l - (size_t)(eq0 - p) - 1), eq0 + 1, eq1 + 1, first, others);
            else
                LOG_ERROR("the ranks disagree on %s: rank 0 has '%.*s', rank %d has '%s'%s", what,
                          p ? (int)l : (int)strlen("(nothing)"), p ? p : "(nothing)", first, o[0] ? o : "(nothing)",
                          others);
            LOG_HINT("start every rank with the same options and the same terarec build");
        }
    }
    rc = TR_ERR_ARG;
exit:
    tr_free(ref);
    tr_free(all);
    return rc;
}
