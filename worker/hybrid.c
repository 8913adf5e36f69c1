/* hybrid.c: the training step on top of the model's local passes.
 *   forward: gather this rank's columns/tables for the whole batch: its own slice
 *     straight into the interaction input X, the other ranks' slices into sbuf
 *     (sample-major, so each destination's slice is contiguous); all-to-all;
 *     place what the other ranks sent into X in the single-process order; then
 *     the dense part on the slice.
 *   backward: dense backward on the slice (logit gradients scaled by 1/global
 *     batch), all-reduce (sum) of the data-parallel gradients, pack the gradients
 *     of X for the other ranks, reverse all-to-all.
 *   update: sparse update by each table's owner, dense update; with row-wise
 *     Adagrad on column slices, first an all-reduce of every table's per-row
 *     sums of squares (each rank holds only some columns of a row).
 * A world of 1 runs the same code: its own slice is the whole batch, so nothing
 * is packed and the all-to-all moves nothing. Every byte of backend memory is
 * touched by backend ops or collectives; the host holds only the batch header.
 *
 * Overlap (hybrid_set_overlap, on by default): the same operations, with the
 * collectives split in two (start, wait) around work that does not depend on
 * them: the data-parallel bottom MLP runs while the forward all-to-all is in
 * flight; the top MLP's gradients are reduced while the interaction and the
 * bottom MLP run backward, and the backward all-to-all travels beside the bottom
 * MLP's backward. Nothing reads a buffer a collective in flight writes, so the
 * results are those of the serial order (the all-reduce runs on two ranges
 * instead of one, which can change the summation order of MPI's algorithm for
 * three or more ranks; two ranks sum the same way).
 * The batch the step trains on (its sharing, the one read ahead, the ids the
 * embedding ops read) is hybrid_batch.c's; the state both share, hybrid_internal.h. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "hybrid_internal.h"

#include <math.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"

/* Floats per sample that rank r sends in the forward all-to-all. */
static int64_t send_width(const struct shard_plan *p, int r, int ntables, int dim)
{
    if (p->mode == SHARD_COLUMNWISE)
        return (int64_t)ntables * shard_width(p, r);
    return (int64_t)shard_nvec(p, r) * dim;
}

/* The vectors rank q sends per sample, in send order; returns their count. */
static int rank_vectors(const struct hybrid *h, int q, struct vec *v)
{
    const struct shard_plan *p = h->p;
    const struct dlrm *m = h->m;
    const int T = p->ntables, D = p->dim;
    if (p->mode == SHARD_COLUMNWISE) {
        const int64_t w = shard_width(p, q);
        if (w == 0)
            return 0;
        for (int t = 0; t < T; t++)
            v[t] = (struct vec){t, (int64_t)m->tables[t].pos * D + p->col0[q], w, (int64_t)t * w};
        return T;
    }
    const int nv = shard_nvec(p, q);
    const int *ids = p->vec + p->vstart[q];
    for (int k = 0; k < nv; k++)
        v[k] = (struct vec){ids[k], (int64_t)(ids[k] < 0 ? 0 : m->tables[ids[k]].pos) * D, D, (int64_t)k * D};
    return nv;
}

/* The geometry of the shared batch on this rank. */
struct geom {
    int W, r;
    int64_t n, lo, nl; /* batch, first sample and size of this rank's slice */
    int64_t ws;        /* floats per sample this rank sends */
    int64_t ldx;       /* row stride of X */
    int direct;        /* the slice is the whole batch: every vector stays here */
};

static void geom_of(const struct hybrid *h, struct geom *g)
{
    const struct shard_plan *p = h->p;
    g->W = p->world;
    g->r = p->rank;
    g->n = h->hdr.n;
    g->lo = shard_slice_start(g->n, g->W, g->r);
    g->nl = shard_slice_start(g->n, g->W, g->r + 1) - g->lo;
    g->ws = send_width(p, g->r, p->ntables, p->dim);
    g->ldx = (int64_t)h->m->n * p->dim;
    g->direct = g->nl == g->n;
}

/* Bytes of the step's backend buffers for rank p->rank; the one sizing that both
 * the allocation and the memory plan use. */
struct bufsizes {
    size_t sbuf, rbuf, bot, glogits;
};

static void buffer_sizes(const struct shard_plan *p, int ntables, int dim, int64_t max_global, struct bufsizes *z)
{
    const int64_t local = shard_slice_start(max_global, p->world, 1); /* the largest slice is the first */
    int64_t others = 0;
    for (int q = 0; q < p->world; q++)
        if (q != p->rank)
            others += send_width(p, q, ntables, dim);
    z->sbuf = p->world > 1 ? (size_t)(max_global * send_width(p, p->rank, ntables, dim)) * sizeof(float) : 0;
    z->rbuf = (size_t)(local * others) * sizeof(float);
    z->bot = p->has_bottom && !p->dp_bottom && p->rank == 0 ? (size_t)(max_global * dim) * sizeof(float) : 0;
    z->glogits = p->rank == 0 ? (size_t)max_global * sizeof(float) : 0;
}

int64_t hybrid_buffer_bytes(const struct shard_plan *p, int ntables, int dim, int64_t max_global)
{
    struct bufsizes z;
    buffer_sizes(p, ntables, dim, max_global, &z);
    /* and the loss sum, and the counts and displacements (host) */
    return (int64_t)(z.sbuf + z.rbuf + z.bot + z.glogits) + 8 + (int64_t)p->world * 6 * 8;
}

enum tr_status hybrid_new(struct dlrm *m, struct comm *c, const struct shard_plan *p, struct hybrid **out)
{
    enum tr_status rc = TR_OK;
    *out = NULL;
    if (c->size != p->world || c->rank != p->rank || m->rank != p->rank || m->cfg.ntables != p->ntables ||
        m->cfg.emb_dim != p->dim) {
        LOG_ERROR("step: the plan (rank %d of %d, %d tables, dim %d) does not match the communicator (rank %d of "
                  "%d) or the model (%d tables, dim %d)",
                  p->rank, p->world, p->ntables, p->dim, c->rank, c->size, m->cfg.ntables, m->cfg.emb_dim);
        return TR_ERR_ARG;
    }
    struct hybrid *h = tr_calloc(1, sizeof *h);
    if (!h)
        return TR_ERR_NOMEM;
    h->m = m;
    h->c = c;
    h->overlap = 1;
    h->p = p;
    const int T = p->ntables, D = p->dim, W = p->world;
    const int64_t G = m->cfg.max_global > 0 ? m->cfg.max_global : m->cfg.max_batch;
    h->max_global = G;
    struct bufsizes z;
    buffer_sizes(p, T, D, G, &z);
    TR_ASSERT((z.bot != 0) == (m->mp_bottom != 0)); /* the plan and the model agree on the bottom MLP */
    h->sbuf_bytes = z.sbuf;
    h->rbuf_bytes = z.rbuf;
    h->bot_bytes = z.bot;
    h->glogits_bytes = z.glogits;
    h->cp_cap = DLRM_COPY_BLOCKS(W, T);
    const size_t nt = (size_t)(T ? T : 1);
    h->cnt = tr_calloc((size_t)W * 6, sizeof(int64_t));
    h->vec = tr_calloc(nt + 1, sizeof *h->vec);
    h->fwd = tr_calloc(3 * nt, sizeof *h->fwd);
    h->fwd_table = tr_calloc(3 * nt, sizeof *h->fwd_table);
    h->fwd_first = tr_calloc(3 * nt, sizeof *h->fwd_first);
    h->bad_pos = tr_calloc(3 * nt, sizeof *h->bad_pos);
    h->upd = tr_calloc(nt, sizeof *h->upd);
    h->bad_upd = tr_calloc(nt, sizeof *h->bad_upd);
    h->cp = tr_calloc((size_t)h->cp_cap, sizeof *h->cp);
    h->idx = tr_calloc(nt, sizeof *h->idx);
    h->ids = tr_calloc(nt, sizeof *h->ids);
    if (!h->cnt || !h->vec || !h->fwd || !h->fwd_table || !h->fwd_first || !h->bad_pos || !h->upd || !h->bad_upd ||
        !h->cp || !h->idx || !h->ids) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    h->scnt = h->cnt;
    h->sdsp = h->cnt + W;
    h->rcnt = h->cnt + 2 * W;
    h->rdsp = h->cnt + 3 * W;
    h->gcnt = h->cnt + 4 * W;
    h->gdsp = h->cnt + 5 * W;

    if (batch_any_multi_hot(m->hot, T)) {
        h->want_bags = tr_calloc(nt, sizeof *h->want_bags);
        h->bags = tr_calloc(nt, sizeof *h->bags);
        if (!h->want_bags || !h->bags) {
            rc = TR_ERR_NOMEM;
            goto fail;
        }
    }
    if (batch_layout(G, m->cfg.num_features, T, m->hot, &h->want, h->want_bags) < 0) {
        rc = TR_ERR_ARG;
        goto fail;
    }
    const struct kern_backend *be = &m->be;
    TR_CHECK_GOTO(kern_alloc(be, (size_t)h->want.bytes, (void **)&h->blk, "the batch block"), rc, fail);
    if (h->sbuf_bytes)
        TR_CHECK_GOTO(kern_alloc(be, h->sbuf_bytes, (void **)&h->sbuf, "the all-to-all send buffer"), rc, fail);
    if (h->rbuf_bytes)
        TR_CHECK_GOTO(kern_alloc(be, h->rbuf_bytes, (void **)&h->rbuf, "the all-to-all receive buffer"), rc, fail);
    if (h->bot_bytes)
        TR_CHECK_GOTO(kern_alloc(be, h->bot_bytes, (void **)&h->bot, "the bottom MLP output buffer"), rc, fail);
    if (h->glogits_bytes)
        TR_CHECK_GOTO(kern_alloc(be, h->glogits_bytes, (void **)&h->glogits, "the gathered logits"), rc, fail);
    TR_CHECK_GOTO(kern_alloc(be, sizeof(double), (void **)&h->dloss, "the loss"), rc, fail);
    if ((h->tier = m->tier) != NULL) { /* batches are shared one ahead, so the tier sees the next one */
        TR_CHECK_GOTO(kern_alloc(be, (size_t)h->want.bytes, (void **)&h->blk_next, "the next batch block"), rc, fail);
        for (int k = 0; k < 2 && !be->i->host_memory; k++) {
            h->ids_host[k] = tr_malloc((size_t)(G * T) * sizeof(int32_t) + 1);
            if (!h->ids_host[k]) {
                rc = TR_ERR_NOMEM;
                goto fail;
            }
        }
    }
    *out = h;
    return TR_OK;
fail:
    hybrid_free(&h);
    return rc;
}

void hybrid_free(struct hybrid **ph)
{
    struct hybrid *h = *ph;
    if (!h)
        return;
    const struct kern_backend *be = &h->m->be;
    be->i->mem_release(be->ctx, h->blk, (size_t)h->want.bytes);
    be->i->mem_release(be->ctx, h->sbuf, h->sbuf_bytes);
    be->i->mem_release(be->ctx, h->rbuf, h->rbuf_bytes);
    be->i->mem_release(be->ctx, h->bot, h->bot_bytes);
    be->i->mem_release(be->ctx, h->glogits, h->glogits_bytes);
    be->i->mem_release(be->ctx, h->dloss, sizeof(double));
    be->i->mem_release(be->ctx, h->blk_next, h->blk_next ? (size_t)h->want.bytes : 0);
    tr_free(h->ids_host[0]);
    tr_free(h->ids_host[1]);
    tr_free(h->idx);
    tr_free(h->ids);
    tr_free(h->cnt);
    tr_free(h->vec);
    tr_free(h->fwd);
    tr_free(h->fwd_table);
    tr_free(h->fwd_first);
    tr_free(h->bad_pos);
    tr_free(h->upd);
    tr_free(h->bad_upd);
    tr_free(h->cp);
    tr_free(h->want_bags);
    tr_free(h->bags);
    for (int t = 0; h->dirty && t < h->p->ntables; t++)
        be->i->mem_release(be->ctx, h->dirty[t], (size_t)h->dirty_n[t]);
    tr_free(h->dirty);
    tr_free(h->dirty_n);
    tr_free(h->dirty_rows);
    tr_free(h->mark);
    tr_free(h);
    *ph = NULL;
}

static void set_counts(struct hybrid *h, const struct geom *g)
{
    const struct shard_plan *p = h->p;
    int64_t off = 0;
    for (int q = 0; q < g->W; q++) {
        int64_t s0 = shard_slice_start(g->n, g->W, q), s1 = shard_slice_start(g->n, g->W, q + 1);
        h->scnt[q] = q == g->r ? 0 : (s1 - s0) * g->ws;
        h->sdsp[q] = s0 * g->ws;
        h->rcnt[q] = q == g->r ? 0 : g->nl * send_width(p, q, p->ntables, p->dim);
        h->rdsp[q] = off;
        off += h->rcnt[q];
    }
}

/* Adds the row copies between X (or dX) and the all-to-all buffers for every
 * vector of every other rank (to_x: rbuf -> xbuf, else xbuf -> rbuf); returns the
 * new count. */
static int add_exchange_copies(struct hybrid *h, const struct geom *g, float *xbuf, int to_x, int k)
{
    const struct shard_plan *p = h->p;
    for (int q = 0; q < g->W; q++) {
        if (q == g->r)
            continue;
        const int64_t wq = send_width(p, q, p->ntables, p->dim);
        const int nv = rank_vectors(h, q, h->vec);
        for (int j = 0; j < nv; j++) {
            const struct vec *v = &h->vec[j];
            float *x = xbuf + v->xoff, *b = h->rbuf + h->rdsp[q] + v->soff;
            TR_ASSERT(k < h->cp_cap);
            h->cp[k++] = to_x ? (struct kern_copy_rows_args){x, g->ldx, b, wq, g->nl, v->width}
                              : (struct kern_copy_rows_args){b, wq, x, g->ldx, g->nl, v->width};
        }
    }
    return k;
}

static enum tr_status copy_rows(struct hybrid *h, int k)
{
    const struct kern_backend *be = &h->m->be;
    return k ? be->i->copy_rows(be->ctx, h->cp, k) : TR_OK;
}

/* The three sample ranges of a gathered vector: before this rank's slice (to
 * sbuf), the slice (to X), after it (to sbuf). */
static void vector_ranges(const struct geom *g, int64_t r[3][2])
{
    r[0][0] = 0, r[0][1] = g->lo;
    r[1][0] = g->lo, r[1][1] = g->lo + g->nl;
    r[2][0] = g->lo + g->nl, r[2][1] = g->n;
}

static float *range_dst(const struct hybrid *h, const struct geom *g, const struct vec *v, int part, int64_t s0,
                        int64_t *ld)
{
    if (part == 1) {
        *ld = g->ldx;
        return h->m->x + (s0 - g->lo) * g->ldx + v->xoff;
    }
    *ld = g->ws;
    return h->sbuf + s0 * g->ws + v->soff;
}

enum tr_status hybrid_forward(struct hybrid *h)
{
    struct dlrm *m = h->m;
    const struct kern_backend *be = &m->be;
    struct geom g;
    geom_of(h, &g);
    if (g.n > h->max_global || g.nl > m->cfg.max_batch)
        return TR_ERR_ARG;
    int64_t rg[3][2];
    vector_ranges(&g, rg);

    /* 1. this rank's columns / tables for every sample of the batch */
    double t0 = dlrm_clock(m);
    const int nv = rank_vectors(h, g.r, h->vec);
    int na = 0;
    for (int j = 0; j < nv; j++) {
        const struct vec *v = &h->vec[j];
        if (v->table < 0)
            continue;
        const struct dlrm_table *tb = &m->tables[v->table];
        for (int part = 0; part < 3; part++) {
            const int64_t s0 = rg[part][0], s1 = rg[part][1];
            if (s1 <= s0)
                continue;
            int64_t ld;
            float *out = range_dst(h, &g, v, part, s0, &ld);
            h->bad_pos[na] = -1;
            h->fwd_table[na] = v->table;
            h->fwd_first[na] = s0;
            const int64_t *off = blk_offsets(h, v->table); /* bags: offsets into all the table's ids */
            h->fwd[na] = (struct kern_emb_fwd_args){
                .table = tb->w, .rows = tb->slots, .ld = tb->width, .c0 = 0, .c1 = tb->width,
                .idx = off ? h->idx[v->table] : h->idx[v->table] + s0, .idx_dtype = KERN_I32,
                .offsets = off ? off + s0 : NULL, .nbags = s1 - s0, .comb = table_comb(h, v->table), .out = out,
                .out_ld = ld, .bad_pos = &h->bad_pos[na],
            };
            na++;
        }
    }
    enum tr_status rc = na ? be->i->emb_fwd(be->ctx, h->fwd, na) : TR_OK;
    if (rc == TR_ERR_RANGE)
        TR_CHECK(hybrid_report_bad_id(h, na));
    TR_CHECK(rc);
    m->t[DLRM_T_EMB_FWD] += dlrm_clock(m) - t0;
    if (m->mp_bottom) { /* rank 0 runs the bottom MLP for the whole batch: its vector 0 */
        const int64_t D = h->p->dim;
        TR_CHECK(dlrm_bottom_forward(m, blk_num(h), h->hdr.num_ld, g.n, h->bot, D));
        int k = 0;
        for (int part = 0; part < 3; part++) {
            const int64_t s0 = rg[part][0], s1 = rg[part][1];
            if (s1 <= s0)
                continue;
            int64_t ld;
            float *dst = range_dst(h, &g, &h->vec[0], part, s0, &ld);
            h->cp[k++] = (struct kern_copy_rows_args){dst, ld, h->bot + s0 * D, D, s1 - s0, D};
        }
        TR_CHECK(copy_rows(h, k));
    }

    /* 2. exchange: each rank receives its slice of every other rank's vectors
     * (with overlap, the data-parallel bottom MLP runs meanwhile: it writes row 0
     * of X, the exchange only the tables' rows) */
    set_counts(h, &g);
    const float *num = blk_num(h) + g.lo * h->hdr.num_ld;
    double t1 = dlrm_clock(m), t2;
    if (h->overlap) {
        struct comm_req r;
        TR_CHECK(comm_ialltoallv(h->c, h->sbuf, h->scnt, h->sdsp, h->rbuf, h->rcnt, h->rdsp, KERN_F32, &r));
        double tb = dlrm_clock(m);
        TR_CHECK(dlrm_forward_bottom_dp(m, num, h->hdr.num_ld, g.nl));
        double tc = dlrm_clock(m);
        TR_CHECK(comm_wait(h->c, &r));
        t2 = dlrm_clock(m);
        h->t[HYBRID_T_EXCHANGE] += (tb - t1) + (t2 - tc);
    } else {
        TR_CHECK(comm_alltoallv(h->c, h->sbuf, h->scnt, h->sdsp, h->rbuf, h->rcnt, h->rdsp, KERN_F32));
        t2 = dlrm_clock(m);
        h->t[HYBRID_T_EXCHANGE] += t2 - t1;
    }
    TR_CHECK(copy_rows(h, add_exchange_copies(h, &g, m->x, 1, 0)));
    h->t[HYBRID_T_PACK] += dlrm_clock(m) - t2;

    /* 3. the dense part on the local slice */
    if (h->overlap)
        return dlrm_forward_top(m, g.nl);
    return dlrm_forward_dense(m, num, h->hdr.num_ld, g.nl);
}

/* Where the gradient of vector v lives after the backward, for all n samples. */
static float *vector_grad(const struct hybrid *h, const struct geom *g, const struct vec *v, int64_t *ld)
{
    *ld = g->direct ? g->ldx : g->ws;
    return g->direct ? h->m->dx + v->xoff : h->sbuf + v->soff;
}

/* After the backward all-to-all, the model-parallel bottom MLP (rank 0, the whole
 * batch): vector 0 came back as its output's gradient. Nothing otherwise. */
static enum tr_status mp_bottom_backward(struct hybrid *h, const struct geom *g)
{
    if (!h->m->mp_bottom)
        return TR_OK;
    rank_vectors(h, g->r, h->vec);
    int64_t ld;
    float *grad = vector_grad(h, g, &h->vec[0], &ld);
    return dlrm_bottom_backward(h->m, blk_num(h), h->hdr.num_ld, g->n, grad, ld);
}

/* The row copies that pack the gradients of X for the backward all-to-all: the
 * other ranks' vectors into rbuf, this rank's own slice into sbuf beside what the
 * others send back (unless the slice is the whole batch: then the update reads
 * dX itself). Returns how many. */
static int pack_dx(struct hybrid *h, const struct geom *g)
{
    struct dlrm *m = h->m;
    int k = add_exchange_copies(h, g, m->dx, 0, 0);
    if (!g->direct) {
        const int nv = rank_vectors(h, g->r, h->vec);
        for (int j = 0; j < nv; j++) {
            const struct vec *v = &h->vec[j];
            TR_ASSERT(k < h->cp_cap);
            h->cp[k++] = (struct kern_copy_rows_args){h->sbuf + g->lo * g->ws + v->soff, g->ws, m->dx + v->xoff,
                                                      g->ldx, g->nl, v->width};
        }
    }
    return k;
}

/* The numeric guard of the last backward (see hybrid_get_guard): NaN for the loss
 * sum when this rank's gradients of X are not finite. */
static enum tr_status guard_dx(struct hybrid *h, const struct geom *g, double *lsum)
{
    int bad = 0;
    const double t0 = dlrm_clock(h->m);
    TR_CHECK(dlrm_dx_nonfinite(h->m, g->nl, &bad));
    hybrid_timer_add(h, HYBRID_T_GUARD, dlrm_clock(h->m) - t0);
    h->guard.local_loss_sum = *lsum;
    h->guard.emb_grad_nonfinite = bad;
    if (h->guard.emb_grad_nonfinite)
        *lsum = NAN;
    return TR_OK;
}

/* hybrid_backward with its collectives overlapped (see the file comment). The
 * order of the starts is the same on every rank: the top MLP's gradients, the
 * all-to-all, the remaining data-parallel gradients, the loss sum. */
static enum tr_status backward_overlapped(struct hybrid *h, const struct geom *g, double lsum, double *loss)
{
    struct dlrm *m = h->m;
    const struct kern_backend *be = &m->be;
    const float *num = blk_num(h) + g->lo * h->hdr.num_ld;
    const int64_t p0 = m->dp_bottom || !m->has_bottom ? 0 : m->top_param0, p1 = dlrm_top_mlp_param0(m);
    struct comm_req rtop = {.slot = -1}, ra2a = {.slot = -1}, rrest = {.slot = -1}, rloss = {.slot = -1};
    double tx = 0.0, ta;

    TR_CHECK(dlrm_backward_top(m, g->nl));
    ta = dlrm_clock(m);
    if (p1 < m->nparams)
        TR_CHECK(comm_iallreduce_sum(h->c, m->grads + p1, m->nparams - p1, KERN_F32, &rtop));
    tx += dlrm_clock(m) - ta;
    TR_CHECK(dlrm_backward_interact(m, g->nl));

    double t1 = dlrm_clock(m);
    TR_CHECK(copy_rows(h, pack_dx(h, g)));
    double t2 = dlrm_clock(m);
    h->t[HYBRID_T_PACK] += t2 - t1;
    TR_CHECK(comm_ialltoallv(h->c, h->rbuf, h->rcnt, h->rdsp, h->sbuf, h->scnt, h->sdsp, KERN_F32, &ra2a));
    tx += dlrm_clock(m) - t2;
    TR_CHECK(dlrm_backward_bottom_dp(m, num, h->hdr.num_ld, g->nl));
    TR_CHECK(guard_dx(h, g, &lsum));

    TR_CHECK(be->i->copy(be->ctx, h->dloss, &lsum, sizeof lsum, KERN_H2D));
    ta = dlrm_clock(m);
    if (p0 < p1)
        TR_CHECK(comm_iallreduce_sum(h->c, m->grads + p0, p1 - p0, KERN_F32, &rrest));
    TR_CHECK(comm_iallreduce_sum(h->c, h->dloss, 1, KERN_F64, &rloss));
    TR_CHECK(comm_wait(h->c, &rtop));
    TR_CHECK(comm_wait(h->c, &ra2a));
    TR_CHECK(comm_wait(h->c, &rrest));
    TR_CHECK(comm_wait(h->c, &rloss));
    tx += dlrm_clock(m) - ta;
    h->t[HYBRID_T_EXCHANGE] += tx;
    TR_CHECK(be->i->copy(be->ctx, &lsum, h->dloss, sizeof lsum, KERN_D2H));
    *loss = g->n ? lsum / (double)g->n : 0.0;

    return mp_bottom_backward(h, g);
}

enum tr_status hybrid_backward(struct hybrid *h, double *loss)
{
    struct dlrm *m = h->m;
    const struct kern_backend *be = &m->be;
    struct geom g;
    geom_of(h, &g);

    /* loss: mean over the global batch, so gradients are those of one process */
    double lsum = 0.0;
    TR_CHECK(dlrm_loss_dense(m, blk_labels(h) + g.lo, g.nl, g.n ? 1.0f / (float)g.n : 0.0f, &lsum));
    if (h->overlap)
        return backward_overlapped(h, &g, lsum, loss);
    TR_CHECK(dlrm_backward_dense(m, blk_num(h) + g.lo * h->hdr.num_ld, h->hdr.num_ld, g.nl));

    /* numeric guard: this rank's gradients of X (one pass over the slice); a NaN
     * or inf there travels to every rank as a NaN loss */
    TR_CHECK(guard_dx(h, &g, &lsum));

    /* data-parallel gradients (top MLP, and the bottom MLP when data-parallel) and
     * the loss sum: one group, so a backend that can fuses them into one launch */
    TR_CHECK(be->i->copy(be->ctx, h->dloss, &lsum, sizeof lsum, KERN_H2D));
    double t0 = dlrm_clock(m);
    const int64_t p0 = m->dp_bottom || !m->has_bottom ? 0 : m->top_param0;
    TR_CHECK(comm_group_begin(h->c));
    TR_CHECK(comm_allreduce_sum(h->c, m->grads + p0, m->nparams - p0, KERN_F32));
    TR_CHECK(comm_allreduce_sum(h->c, h->dloss, 1, KERN_F64));
    TR_CHECK(comm_group_end(h->c));
    TR_CHECK(be->i->copy(be->ctx, &lsum, h->dloss, sizeof lsum, KERN_D2H));
    *loss = g.n ? lsum / (double)g.n : 0.0;

    /* embedding gradients back to their owners */
    double t1 = dlrm_clock(m);
    TR_CHECK(copy_rows(h, pack_dx(h, &g)));
    double t2 = dlrm_clock(m);
    TR_CHECK(comm_alltoallv(h->c, h->rbuf, h->rcnt, h->rdsp, h->sbuf, h->scnt, h->sdsp, KERN_F32));
    double t3 = dlrm_clock(m);
    h->t[HYBRID_T_EXCHANGE] += (t1 - t0) + (t3 - t2);
    h->t[HYBRID_T_PACK] += t2 - t1;

    return mp_bottom_backward(h, &g);
}

void hybrid_set_overlap(struct hybrid *h, int on)
{
    h->overlap = on != 0;
}

void hybrid_get_guard(const struct hybrid *h, struct hybrid_guard *g)
{
    *g = h->guard;
}

enum tr_status hybrid_find_nonfinite_grad(struct hybrid *h, int *table)
{
    struct dlrm *m = h->m;
    const struct kern_backend *be = &m->be;
    struct geom g;
    geom_of(h, &g);
    const int64_t D = h->p->dim;
    *table = -2;
    for (int pos = 0; pos < m->n; pos++) { /* the vectors of X in row order */
        double sq = 0.0;
        struct kern_sumsq_args a = {.x = m->dx + pos * D, .rows = g.nl, .cols = D, .ld = g.ldx, .out = &sq};
        TR_CHECK(be->i->sumsq(be->ctx, &a, 1));
        if (isfinite(sq))
            continue;
        *table = -1; /* row 0 is the bottom output when there is one */
        for (int t = 0; t < m->cfg.ntables; t++)
            if (m->tables[t].pos == pos)
                *table = t;
        return TR_OK;
    }
    return TR_OK;
}

enum tr_status hybrid_sum_ranks(struct hybrid *h, double *v)
{
    const struct kern_backend *be = &h->m->be;
    TR_CHECK(be->i->copy(be->ctx, h->dloss, v, sizeof *v, KERN_H2D));
    TR_CHECK(comm_allreduce_sum(h->c, h->dloss, 1, KERN_F64));
    return be->i->copy(be->ctx, v, h->dloss, sizeof *v, KERN_D2H);
}

/* Row-wise Adagrad on column slices: every worker (with columns or not) writes
 * its slice's per-distinct-row sums of squares of every table, in table order,
 * into m->emb_sumsq (table t after the ids of the tables before it: at most one
 * distinct row per id), the sums are added over the workers, and the update below
 * reads them. Every worker sees the same ids, so entry k of a table names the same
 * row on all. */
static enum tr_status rowwise_sums(struct hybrid *h, const struct geom *g, float lr)
{
    struct dlrm *m = h->m;
    const struct kern_backend *be = &m->be;
    const int T = h->p->ntables;
    const int nv = rank_vectors(h, g->r, h->vec); /* column-wise: table t is vector t, or none here */
    TR_ASSERT(m->emb_sumsq && (nv == 0 || nv == T));
    int64_t at = 0;
    for (int t = 0; t < T; t++) {
        const struct dlrm_table *tb = &m->tables[t];
        int64_t ld = 0;
        const float *grad = nv ? vector_grad(h, g, &h->vec[t], &ld) : NULL;
        h->upd[t] = (struct kern_emb_update_args){
            .table = tb->w, .rows = tb->slots, .ld = tb->width, .c0 = 0, .c1 = tb->width, .accum = tb->accum,
            .idx = h->idx[t], .idx_dtype = KERN_I32, .offsets = blk_offsets(h, t), .nbags = g->n,
            .comb = table_comb(h, t), .grad = grad, .grad_ld = ld, .grad_scale = dlrm_grad_unscale(m),
            .hp = {m->cfg.optim, lr, m->cfg.adagrad_eps}, .ws = m->emb_ws, .ws_bytes = m->emb_ws_bytes,
            .bad_pos = &h->bad_upd[t], .dim = h->p->dim, .row_sumsq = m->emb_sumsq + at,
        };
        at += blk_nids(h, t);
    }
    TR_ASSERT(at <= m->emb_sumsq_n);
    TR_CHECK(be->i->emb_rowsq(be->ctx, h->upd, T));
    /* counted in the emb_update phase, whose part it is */
    return comm_allreduce_sum(h->c, m->emb_sumsq, at, KERN_F64);
}

enum tr_status hybrid_update(struct hybrid *h, float lr)
{
    struct dlrm *m = h->m;
    const struct kern_backend *be = &m->be;
    struct geom g;
    geom_of(h, &g);
    double t0 = dlrm_clock(m);
    const int nv = m->emb_sumsq ? 0 : rank_vectors(h, g.r, h->vec);
    int nu = 0;
    if (m->emb_sumsq) { /* row-wise Adagrad on column slices: h->upd holds every table */
        TR_CHECK(rowwise_sums(h, &g, lr));
        nu = shard_width(h->p, g.r) > 0 ? h->p->ntables : 0;
    }
    for (int j = 0; j < nv; j++) {
        const struct vec *v = &h->vec[j];
        if (v->table < 0)
            continue;
        struct dlrm_table *tb = &m->tables[v->table];
        int64_t ld;
        const float *grad = vector_grad(h, &g, v, &ld);
        h->upd[nu++] = (struct kern_emb_update_args){
            .table = tb->w, .rows = tb->slots, .ld = tb->width, .c0 = 0, .c1 = tb->width, .accum = tb->accum,
            .accum_ld = tb->width, .idx = h->idx[v->table], .idx_dtype = KERN_I32,
            .offsets = blk_offsets(h, v->table), .nbags = g.n, .comb = table_comb(h, v->table), .grad = grad,
            .grad_ld = ld, .grad_scale = dlrm_grad_unscale(m),
            .hp = {m->cfg.optim, lr, m->cfg.adagrad_eps}, .ws = m->emb_ws, .ws_bytes = m->emb_ws_bytes,
            .dim = tb->width, /* a whole row: row-wise Adagrad sums its squares itself */
        };
    }
    if (nu)
        TR_CHECK(be->i->emb_update(be->ctx, h->upd, nu));
    if (h->dirty) { /* the rows the update touched, for incremental checkpoints */
        int nm = 0;
        for (int t = 0; t < h->p->ntables; t++)
            if (h->dirty[t])
                h->mark[nm++] = (struct kern_mark_rows_args){.idx = blk_cat(h, t), .idx_dtype = KERN_I32,
                                                             .n = blk_nids(h, t),
                                                             .rows = m->tables[t].rows,
                                                             .block_rows = h->dirty_rows[t], .dirty = h->dirty[t]};
        if (nm)
            TR_CHECK(be->i->mark_rows(be->ctx, h->mark, nm));
    }
    m->t[DLRM_T_EMB_UPDATE] += dlrm_clock(m) - t0;
    /* a rank that does not run a model-parallel bottom MLP leaves its (unused) copy alone */
    const int64_t u0 = m->has_bottom && !m->dp_bottom && !m->mp_bottom ? m->top_param0 : 0;
    return dlrm_update_dense_range(m, lr, u0, m->nparams);
}

enum tr_status hybrid_train_step(struct hybrid *h, float lr, double *loss)
{
    TR_CHECK(hybrid_forward(h));
    TR_CHECK(hybrid_backward(h, loss));
    return hybrid_update(h, lr);
}

enum tr_status hybrid_gather_logits(struct hybrid *h, float *dst, enum kern_copy_dir dir)
{
    if (dir != KERN_D2H && dir != KERN_D2D)
        return TR_ERR_ARG;
    const struct kern_backend *be = &h->m->be;
    struct geom g;
    geom_of(h, &g);
    for (int q = 0; q < g.W; q++) {
        h->gdsp[q] = shard_slice_start(g.n, g.W, q);
        h->gcnt[q] = shard_slice_start(g.n, g.W, q + 1) - h->gdsp[q];
    }
    TR_CHECK(comm_gatherv(h->c, dlrm_logits(h->m), g.nl, h->glogits, h->gcnt, h->gdsp, KERN_F32, 0));
    if (g.r == 0 && g.n)
        TR_CHECK(be->i->copy(be->ctx, dst, h->glogits, (size_t)g.n * sizeof(float), dir));
    return TR_OK;
}

enum tr_status hybrid_track_dirty(struct hybrid *h, const int64_t *block_rows)
{
    const struct kern_backend *be = &h->m->be;
    const int T = h->p->ntables;
    if (h->dirty)
        return TR_ERR_ARG;
    h->dirty = tr_calloc((size_t)T, sizeof *h->dirty);
    h->dirty_n = tr_calloc((size_t)T, sizeof *h->dirty_n);
    h->dirty_rows = tr_calloc((size_t)T, sizeof *h->dirty_rows);
    h->mark = tr_calloc((size_t)T, sizeof *h->mark);
    if (!h->dirty || !h->dirty_n || !h->dirty_rows || !h->mark)
        return TR_ERR_NOMEM;
    uint8_t *zero = NULL;
    enum tr_status rc = TR_OK;
    for (int t = 0; t < T && rc == TR_OK; t++) {
        const struct dlrm_table *tb = &h->m->tables[t];
        if (tb->width == 0 || block_rows[t] < 1)
            continue;
        const int64_t n = (tb->rows + block_rows[t] - 1) / block_rows[t];
        h->dirty_rows[t] = block_rows[t];
        h->dirty_n[t] = n > 0 ? n : 1;
        void *d = NULL;
        rc = kern_alloc(be, (size_t)h->dirty_n[t], &d, "the touched-row bitmap of table %d", t);
        if (rc != TR_OK)
            break;
        h->dirty[t] = d;
        tr_free(zero);
        zero = tr_calloc((size_t)h->dirty_n[t], 1);
        rc = zero ? be->i->copy(be->ctx, d, zero, (size_t)h->dirty_n[t], KERN_H2D) : TR_ERR_NOMEM;
    }
    tr_free(zero);
    return rc;
}

int64_t hybrid_dirty_blocks(const struct hybrid *h, int t)
{
    return h->dirty && t >= 0 && t < h->p->ntables && h->dirty[t] ? h->dirty_n[t] : 0;
}

enum tr_status hybrid_take_dirty(struct hybrid *h, int t, uint8_t *host, uint8_t *zero)
{
    const struct kern_backend *be = &h->m->be;
    const int64_t n = hybrid_dirty_blocks(h, t);
    if (n == 0)
        return TR_ERR_ARG;
    TR_CHECK(be->i->copy(be->ctx, host, h->dirty[t], (size_t)n, KERN_D2H));
    return be->i->copy(be->ctx, h->dirty[t], zero, (size_t)n, KERN_H2D);
}

double hybrid_seconds(const struct hybrid *h, enum hybrid_timer t)
{
    return (int)t >= 0 && t < HYBRID_T_COUNT_ ? h->t[t] : 0.0;
}

void hybrid_reset_timers(struct hybrid *h)
{
    memset(h->t, 0, sizeof h->t);
}
