/* hybrid.c: the distributed step on top of the model's local passes.
 *   forward: gather this rank's columns/tables for the whole batch into sbuf
 *     (sample-major, so each destination's slice is contiguous), all-to-all, and
 *     assemble the interaction input of the local slice in the single-process
 *     order; then the dense part on the slice.
 *   backward: dense backward on the slice (logit gradients scaled by 1/global
 *     batch), all-reduce (sum) of the data-parallel gradients, pack the
 *     interaction-input gradients, reverse all-to-all, sparse update by the owner.
 * It does not overlap communication with compute. */
#include "hybrid.h"

#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Floats per sample that rank r sends in the forward all-to-all. */
static int64_t send_width(const struct shard_plan *p, int r, int ntables, int dim)
{
    if (p->mode == SHARD_COLUMNWISE)
        return (int64_t)ntables * shard_width(p, r);
    return (int64_t)shard_nvec(p, r) * dim;
}

int64_t hybrid_buffer_bytes(const struct shard_plan *p, int ntables, int dim, int64_t max_global)
{
    int64_t local = shard_slice_start(max_global, p->world, 1); /* the largest slice is the first */
    int64_t bytes = max_global * send_width(p, p->rank, ntables, dim) * 4 + local * (ntables + 1) * dim * 4;
    if (p->has_bottom && !p->dp_bottom && p->rank == 0)
        bytes += max_global * dim * 4;
    return bytes + (int64_t)p->world * 4 * 8;
}

enum tr_status hybrid_new(struct dlrm *m, struct comm *c, const struct shard_plan *p, int64_t max_global,
                          struct hybrid **out)
{
    enum tr_status rc = TR_OK;
    *out = NULL;
    if (c->size != p->world || c->rank != p->rank || m->rank != p->rank || m->cfg.ntables != p->ntables ||
        m->cfg.emb_dim != p->dim)
        return TR_ERR_ARG;
    struct hybrid *h = tr_calloc(1, sizeof *h);
    if (!h)
        return TR_ERR_NOMEM;
    h->m = m;
    h->c = c;
    h->p = p;
    h->max_global = max_global;
    const int T = p->ntables, D = p->dim;
    int64_t local = shard_slice_start(max_global, p->world, 1);
    h->sbuf_bytes = (size_t)(max_global * send_width(p, p->rank, T, D)) * sizeof(float);
    h->rbuf_bytes = (size_t)(local * (T + 1) * D) * sizeof(float);
    h->bot_bytes = m->mp_bottom ? (size_t)(max_global * D) * sizeof(float) : 0;
    h->scnt = tr_calloc((size_t)p->world * 4, sizeof(int64_t));
    if (!h->scnt) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    h->sdsp = h->scnt + p->world;
    h->rcnt = h->sdsp + p->world;
    h->rdsp = h->rcnt + p->world;
    const struct kern_backend *be = &m->be;
    TR_CHECK_GOTO(be->i->mem_alloc(be->ctx, h->sbuf_bytes, (void **)&h->sbuf), rc, fail);
    TR_CHECK_GOTO(be->i->mem_alloc(be->ctx, h->rbuf_bytes, (void **)&h->rbuf), rc, fail);
    if (h->bot_bytes)
        TR_CHECK_GOTO(be->i->mem_alloc(be->ctx, h->bot_bytes, (void **)&h->bot), rc, fail);
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
    be->i->mem_release(be->ctx, h->sbuf, h->sbuf_bytes);
    be->i->mem_release(be->ctx, h->rbuf, h->rbuf_bytes);
    be->i->mem_release(be->ctx, h->bot, h->bot_bytes);
    tr_free(h->scnt);
    tr_free(h);
    *ph = NULL;
}

/* Counts and displacements of the forward all-to-all for a batch of n samples. */
static void set_counts(struct hybrid *h, int64_t n)
{
    const struct shard_plan *p = h->p;
    const int W = p->world, r = p->rank, T = p->ntables, D = p->dim;
    const int64_t ws = send_width(p, r, T, D);
    const int64_t nl = shard_slice_start(n, W, r + 1) - shard_slice_start(n, W, r);
    int64_t off = 0;
    for (int q = 0; q < W; q++) {
        int64_t s0 = shard_slice_start(n, W, q), s1 = shard_slice_start(n, W, q + 1);
        h->scnt[q] = (s1 - s0) * ws;
        h->sdsp[q] = s0 * ws;
        h->rcnt[q] = nl * send_width(p, q, T, D);
        h->rdsp[q] = off;
        off += h->rcnt[q];
    }
}

/* Moves vectors between the received buffer and the interaction input X (or its
 * gradient): to_x = 1 assembles X, 0 packs dX for the reverse all-to-all. */
static void move_vectors(struct hybrid *h, int64_t nl, float *xbuf, int to_x)
{
    const struct shard_plan *p = h->p;
    const struct dlrm *m = h->m;
    const int W = p->world, T = p->ntables, D = p->dim;
    const int64_t ldx = (int64_t)m->n * D;
    for (int q = 0; q < W; q++) {
        const int64_t wq = send_width(p, q, T, D);
        if (wq == 0)
            continue;
        float *base = h->rbuf + h->rdsp[q];
        if (p->mode == SHARD_COLUMNWISE) {
            const int64_t w = shard_width(p, q), c0 = p->col0[q];
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < nl; i++) {
                for (int t = 0; t < T; t++) {
                    float *x = xbuf + i * ldx + (int64_t)m->tables[t].pos * D + c0;
                    float *v = base + i * wq + (int64_t)t * w;
                    if (to_x)
                        memcpy(x, v, (size_t)w * sizeof(float));
                    else
                        memcpy(v, x, (size_t)w * sizeof(float));
                }
            }
        } else {
            const int nv = shard_nvec(p, q);
            const int *vec = p->vec + p->vstart[q];
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < nl; i++) {
                for (int k = 0; k < nv; k++) {
                    int row = vec[k] < 0 ? 0 : m->tables[vec[k]].pos;
                    float *x = xbuf + i * ldx + (int64_t)row * D;
                    float *v = base + i * wq + (int64_t)k * D;
                    if (to_x)
                        memcpy(x, v, (size_t)D * sizeof(float));
                    else
                        memcpy(v, x, (size_t)D * sizeof(float));
                }
            }
        }
    }
}

/* Copies n rows of width D between a dense (n, D) block and a strided slot. */
static void copy_rows(float *dst, int64_t lddst, const float *src, int64_t ldsrc, int64_t n, int D)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + i * lddst, src + i * ldsrc, (size_t)D * sizeof(float));
}

enum tr_status hybrid_forward(struct hybrid *h, const struct tr_batch *b)
{
    struct dlrm *m = h->m;
    const struct shard_plan *p = h->p;
    const struct kern_backend *be = &m->be;
    const int W = p->world, r = p->rank, T = p->ntables, D = p->dim;
    const int64_t n = b->n, lo = shard_slice_start(n, W, r), nl = shard_slice_start(n, W, r + 1) - lo;
    const int64_t ws = send_width(p, r, T, D);
    if (n > h->max_global || nl > m->cfg.max_batch || b->ntables != T)
        return TR_ERR_ARG;

    /* 1. this rank's columns / tables for every sample of the batch */
    double t0 = now_sec();
    int k = 0;
    if (p->mode == SHARD_COLUMNWISE) {
        const int64_t w = shard_width(p, r);
        for (int t = 0; t < T && w > 0; t++) {
            struct dlrm_table *tb = &m->tables[t];
            m->bad_pos[t] = -1;
            m->fwd_args[k++] = (struct kern_emb_fwd_args){
                .table = tb->w, .rows = tb->rows, .ld = w, .c0 = 0, .c1 = w, .idx = b->cat + (int64_t)t * b->cap,
                .idx_dtype = KERN_I32, .nbags = n, .comb = KERN_COMB_SUM, .out = h->sbuf + (int64_t)t * w,
                .out_ld = ws, .bad_pos = &m->bad_pos[t],
            };
        }
    } else {
        const int nv = shard_nvec(p, r);
        const int *vec = p->vec + p->vstart[r];
        for (int t = 0; t < T; t++)
            m->bad_pos[t] = -1;
        for (int j = 0; j < nv; j++) {
            if (vec[j] < 0)
                continue;
            struct dlrm_table *tb = &m->tables[vec[j]];
            m->fwd_args[k++] = (struct kern_emb_fwd_args){
                .table = tb->w, .rows = tb->rows, .ld = D, .c0 = 0, .c1 = D,
                .idx = b->cat + (int64_t)vec[j] * b->cap, .idx_dtype = KERN_I32, .nbags = n,
                .comb = KERN_COMB_SUM, .out = h->sbuf + (int64_t)j * D, .out_ld = ws, .bad_pos = &m->bad_pos[vec[j]],
            };
        }
    }
    enum tr_status rc = k ? be->i->emb_fwd(be->ctx, m->fwd_args, k) : TR_OK;
    if (rc == TR_ERR_RANGE)
        dlrm_report_bad_id(m, b->cat, b->cap, b->index);
    TR_CHECK(rc);
    m->t[DLRM_T_EMB_FWD] += now_sec() - t0;
    if (m->mp_bottom) { /* rank 0 runs the bottom MLP for the whole batch: vector 0 */
        TR_CHECK(dlrm_bottom_forward(m, b->numerical, b->num_ld, n, h->bot, D));
        copy_rows(h->sbuf, ws, h->bot, D, n, D);
    }

    /* 2. exchange: each rank receives its slice of every other rank's vectors */
    set_counts(h, n);
    double t1 = now_sec();
    TR_CHECK(comm_alltoallv(h->c, h->sbuf, h->scnt, h->sdsp, h->rbuf, h->rcnt, h->rdsp, KERN_F32));
    double t2 = now_sec();
    move_vectors(h, nl, m->x, 1);
    double t3 = now_sec();
    h->t_exchange += t2 - t1;
    h->t_pack += t3 - t2;

    /* 3. the dense part on the local slice */
    return dlrm_forward_dense(m, b->numerical + lo * b->num_ld, b->num_ld, nl);
}

enum tr_status hybrid_train_step(struct hybrid *h, const struct tr_batch *b, float lr, double *loss)
{
    struct dlrm *m = h->m;
    const struct shard_plan *p = h->p;
    const struct kern_backend *be = &m->be;
    const int W = p->world, r = p->rank, T = p->ntables, D = p->dim;
    const int64_t n = b->n, lo = shard_slice_start(n, W, r), nl = shard_slice_start(n, W, r + 1) - lo;
    const int64_t ws = send_width(p, r, T, D);
    TR_CHECK(hybrid_forward(h, b));

    /* loss: mean over the global batch, so gradients are those of one process */
    double lsum = 0.0;
    TR_CHECK(dlrm_loss_dense(m, b->labels + lo, nl, n ? 1.0f / (float)n : 0.0f, &lsum));
    TR_CHECK(dlrm_backward_dense(m, b->numerical + lo * b->num_ld, b->num_ld, nl));

    /* data-parallel gradients: top MLP, and the bottom MLP when data-parallel */
    double t0 = now_sec();
    const int64_t p0 = m->dp_bottom || !m->has_bottom ? 0 : m->top_param0;
    TR_CHECK(comm_allreduce_sum(h->c, m->grads + p0, m->nparams - p0, KERN_F32));
    TR_CHECK(comm_allreduce_sum(h->c, &lsum, 1, KERN_F64));
    *loss = n ? lsum / (double)n : 0.0;

    /* embedding gradients back to their owners */
    double t1 = now_sec();
    move_vectors(h, nl, m->dx, 0);
    double t2 = now_sec();
    TR_CHECK(comm_alltoallv(h->c, h->rbuf, h->rcnt, h->rdsp, h->sbuf, h->scnt, h->sdsp, KERN_F32));
    double t3 = now_sec();
    h->t_exchange += (t1 - t0) + (t3 - t2);
    h->t_pack += t2 - t1;

    double t4 = now_sec();
    int k = 0;
    if (p->mode == SHARD_COLUMNWISE) {
        const int64_t w = shard_width(p, r);
        for (int t = 0; t < T && w > 0; t++) {
            struct dlrm_table *tb = &m->tables[t];
            m->upd_args[k++] = (struct kern_emb_update_args){
                .table = tb->w, .rows = tb->rows, .ld = w, .c0 = 0, .c1 = w, .accum = tb->accum, .accum_ld = w,
                .idx = b->cat + (int64_t)t * b->cap, .idx_dtype = KERN_I32, .nbags = n, .comb = KERN_COMB_SUM,
                .grad = h->sbuf + (int64_t)t * w, .grad_ld = ws, .grad_scale = 1.0f,
                .hp = {m->cfg.optim, lr, m->cfg.adagrad_eps}, .ws = m->emb_ws, .ws_bytes = m->emb_ws_bytes,
            };
        }
    } else {
        const int nv = shard_nvec(p, r);
        const int *vec = p->vec + p->vstart[r];
        for (int j = 0; j < nv; j++) {
            if (vec[j] < 0)
                continue;
            struct dlrm_table *tb = &m->tables[vec[j]];
            m->upd_args[k++] = (struct kern_emb_update_args){
                .table = tb->w, .rows = tb->rows, .ld = D, .c0 = 0, .c1 = D, .accum = tb->accum, .accum_ld = D,
                .idx = b->cat + (int64_t)vec[j] * b->cap, .idx_dtype = KERN_I32, .nbags = n,
                .comb = KERN_COMB_SUM, .grad = h->sbuf + (int64_t)j * D, .grad_ld = ws, .grad_scale = 1.0f,
                .hp = {m->cfg.optim, lr, m->cfg.adagrad_eps}, .ws = m->emb_ws, .ws_bytes = m->emb_ws_bytes,
            };
        }
    }
    if (k)
        TR_CHECK(be->i->emb_update(be->ctx, m->upd_args, k));
    m->t[DLRM_T_EMB_UPDATE] += now_sec() - t4;
    if (m->mp_bottom) /* vector 0 came back as the bottom output's gradient */
        TR_CHECK(dlrm_bottom_backward(m, b->numerical, b->num_ld, n, h->sbuf, ws));
    /* a rank that does not run a model-parallel bottom MLP leaves its (unused) copy alone */
    const int64_t u0 = m->has_bottom && !m->dp_bottom && !m->mp_bottom ? m->top_param0 : 0;
    return dlrm_update_dense_range(m, lr, u0, m->nparams);
}

enum tr_status hybrid_bcast_batch(struct comm *c, struct tr_batch *b)
{
    int64_t hdr[2] = {b->n, b->index};
    TR_CHECK(comm_bcast(c, hdr, sizeof hdr, 0));
    b->n = hdr[0];
    b->index = hdr[1];
    /* the batch is one block: numerical, labels, categorical ids */
    return comm_bcast(c, b->numerical, tr_batch_bytes(b->cap, b->num_features, b->ntables), 0);
}
