/* dlrm.c: DLRM forward, backward and update on a kern backend, one process
 * holding every table. Memory is a few large blocks: the dense parameters (+
 * gradients, + Adagrad state), one block per embedding table, one block of
 * activations. Sharded tables and the collectives between phases come from the
 * distributed layer; this file only computes. */
#include "dlrm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../kernels/kmath.h"

static const char *const phase_names[DLRM_T_COUNT_] = {
    "emb_fwd",  "bottom_fwd",   "interact_fwd", "top_fwd",    "loss",
    "top_bwd",  "interact_bwd", "bottom_bwd",   "emb_update", "dense_update",
};

const char *dlrm_phase_name(enum dlrm_phase p)
{
    return (int)p >= 0 && p < DLRM_T_COUNT_ ? phase_names[p] : "unknown";
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seeds' random streams: one per tensor, stable across versions. */
#define STREAM_BOTTOM_W 0x100u
#define STREAM_TOP_W 0x180u
#define STREAM_BOTTOM_B 0x200u
#define STREAM_TOP_B 0x280u

static enum tr_status check_cfg(const struct dlrm_cfg *c)
{
    if (c->ntables < 0 || c->num_features < 0 || c->emb_dim < 1 || c->max_batch < 1) {
        LOG_ERROR("model: ntables, num_features, emb_dim and max_batch must be positive");
        return TR_ERR_ARG;
    }
    if (c->ntables + (c->num_features > 0) < 1) {
        LOG_ERROR("model: needs at least one table or one numerical feature");
        return TR_ERR_ARG;
    }
    for (int t = 0; t < c->ntables; t++) {
        if (c->cards[t] < 1) {
            LOG_ERROR("model: table %d has cardinality %lld; must be >= 1", t, (long long)c->cards[t]);
            return TR_ERR_ARG;
        }
    }
    if (c->num_features > 0) {
        if (c->nbottom < 1 || c->nbottom > DLRM_MAX_LAYERS) {
            LOG_ERROR("model: bottom MLP needs 1..%d layers, got %d", DLRM_MAX_LAYERS, c->nbottom);
            return TR_ERR_ARG;
        }
        if (c->bottom[c->nbottom - 1] != c->emb_dim) {
            LOG_ERROR("model: last bottom MLP width %d must equal the embedding dim %d", c->bottom[c->nbottom - 1],
                      c->emb_dim);
            return TR_ERR_ARG;
        }
        for (int l = 0; l < c->nbottom; l++)
            if (c->bottom[l] < 1) {
                LOG_ERROR("model: bottom MLP width %d of layer %d must be >= 1", c->bottom[l], l);
                return TR_ERR_ARG;
            }
    }
    if (c->ntop < 1 || c->ntop > DLRM_MAX_LAYERS || c->top[c->ntop - 1] != 1) {
        LOG_ERROR("model: top MLP needs 1..%d layers and its last width must be 1", DLRM_MAX_LAYERS);
        return TR_ERR_ARG;
    }
    for (int l = 0; l < c->ntop; l++)
        if (c->top[l] < 1) {
            LOG_ERROR("model: top MLP width %d of layer %d must be >= 1", c->top[l], l);
            return TR_ERR_ARG;
        }
    if (c->optim != KERN_OPT_SGD && c->optim != KERN_OPT_ADAGRAD) {
        LOG_ERROR("model: unknown optimizer %d", (int)c->optim);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

/* Interaction row of each table: 1 + rank in (cardinality desc, index asc). */
static void assign_positions(struct dlrm *m)
{
    int T = m->cfg.ntables;
    for (int t = 0; t < T; t++) {
        int rank = 0;
        for (int u = 0; u < T; u++)
            if (m->cards[u] > m->cards[t] || (m->cards[u] == m->cards[t] && u < t))
                rank++;
        m->tables[t].pos = m->has_bottom + rank;
    }
}

void dlrm_init_params(struct dlrm *m)
{
    const uint64_t seed = m->cfg.seed;
    const int64_t D = m->cfg.emb_dim;
    for (int t = 0; t < m->cfg.ntables; t++) {
        struct dlrm_table *tb = &m->tables[t];
        const float bound = sqrtf(1.0f / (float)tb->rows);
        const int64_t w = tb->width, c0 = tb->col0;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < tb->rows; r++) {
            float *row = tb->w + r * w;
            for (int64_t c = 0; c < w; c++)
                row[c] = km_init_embedding(seed, (uint64_t)tb->id, (uint64_t)(r * D + c0 + c), bound);
            if (tb->accum) {
                float *st = tb->accum + r * w;
                for (int64_t c = 0; c < w; c++)
                    st[c] = m->cfg.adagrad_init;
            }
        }
    }
    for (int part = 0; part < 2; part++) {
        int nl = part ? m->cfg.ntop : (m->has_bottom ? m->cfg.nbottom : 0);
        struct dlrm_layer *L = part ? m->top : m->bottom;
        for (int l = 0; l < nl; l++) {
            uint64_t sw = (part ? STREAM_TOP_W : STREAM_BOTTOM_W) + (uint64_t)l;
            uint64_t sb = (part ? STREAM_TOP_B : STREAM_BOTTOM_B) + (uint64_t)l;
            int64_t nw = (int64_t)L[l].in * L[l].out;
            for (int64_t e = 0; e < nw; e++)
                L[l].w[e] = km_init_glorot(seed, sw, (uint64_t)e, (float)L[l].in, (float)L[l].out);
            for (int64_t e = 0; e < L[l].out; e++)
                L[l].b[e] = km_init_bias(seed, sb, (uint64_t)e, (float)L[l].out);
        }
    }
    if (m->accum)
        for (int64_t i = 0; i < m->nparams; i++)
            m->accum[i] = m->cfg.adagrad_init;
}

static void layer_setup(struct dlrm_layer *L, const char *kind, int idx, int in, int out, int relu)
{
    L->in = in;
    L->out = out;
    L->relu = relu;
    snprintf(L->name, sizeof L->name, "%s_mlp_layer_%d", kind, idx);
}

enum tr_status dlrm_new(const struct dlrm_cfg *cfg, const struct kern_backend *be, struct dlrm **out)
{
    enum tr_status rc = TR_OK;
    *out = NULL;
    TR_CHECK(check_cfg(cfg));
    struct dlrm *m = tr_calloc(1, sizeof *m);
    if (!m)
        return TR_ERR_NOMEM;
    m->cfg = *cfg;
    m->be = *be;
    const int T = cfg->ntables;
    const int64_t D = cfg->emb_dim, B = cfg->max_batch;
    m->cards = tr_malloc((size_t)(T ? T : 1) * sizeof(int64_t));
    m->tables = tr_calloc((size_t)(T ? T : 1), sizeof(struct dlrm_table));
    m->fwd_args = tr_calloc((size_t)(T ? T : 1), sizeof *m->fwd_args);
    m->upd_args = tr_calloc((size_t)(T ? T : 1), sizeof *m->upd_args);
    m->bad_pos = tr_calloc((size_t)(T ? T : 1), sizeof *m->bad_pos);
    if (!m->cards || !m->tables || !m->fwd_args || !m->upd_args || !m->bad_pos) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    memcpy(m->cards, cfg->cards, (size_t)T * sizeof(int64_t));
    m->cfg.cards = m->cards;
    m->has_bottom = cfg->num_features > 0;
    if (!m->has_bottom)
        m->cfg.nbottom = 0;
    m->n = T + m->has_bottom;
    m->num_ld = (cfg->num_features + 7) / 8 * 8;
    m->top_in_w = km_interact_width(m->n, D, m->has_bottom);

    /* dense parameter layout */
    int64_t np = 0, maxw = 1;
    for (int l = 0; l < m->cfg.nbottom; l++) {
        layer_setup(&m->bottom[l], "bottom", l, l ? cfg->bottom[l - 1] : m->num_ld, cfg->bottom[l], 1);
        np += (int64_t)m->bottom[l].in * m->bottom[l].out + m->bottom[l].out;
        maxw = TR_MAX(maxw, m->bottom[l].out);
    }
    for (int l = 0; l < cfg->ntop; l++) {
        layer_setup(&m->top[l], "top", l, l ? cfg->top[l - 1] : (int)m->top_in_w, cfg->top[l], l + 1 < cfg->ntop);
        np += (int64_t)m->top[l].in * m->top[l].out + m->top[l].out;
        maxw = TR_MAX(maxw, m->top[l].out);
    }
    m->nparams = np;
    int nblk = cfg->optim == KERN_OPT_ADAGRAD ? 3 : 2;
    m->dense_bytes = (size_t)np * sizeof(float) * (size_t)nblk;
    float *dense = NULL;
    TR_CHECK_GOTO(be->i->mem_alloc(be->ctx, m->dense_bytes, (void **)&dense), rc, fail);
    m->params = dense;
    m->grads = dense + np;
    m->accum = nblk == 3 ? dense + 2 * np : NULL;
    {
        int64_t o = 0;
        for (int part = 0; part < 2; part++) {
            int nl = part ? cfg->ntop : m->cfg.nbottom;
            struct dlrm_layer *L = part ? m->top : m->bottom;
            for (int l = 0; l < nl; l++) {
                L[l].w = m->params + o;
                L[l].dw = m->grads + o;
                o += (int64_t)L[l].in * L[l].out;
                L[l].b = m->params + o;
                L[l].db = m->grads + o;
                o += L[l].out;
            }
        }
        TR_ASSERT(o == np);
    }

    /* embedding tables, whole */
    for (int t = 0; t < T; t++) {
        struct dlrm_table *tb = &m->tables[t];
        tb->id = t;
        tb->rows = m->cards[t];
        tb->col0 = 0;
        tb->width = D;
        tb->bytes = (size_t)tb->rows * (size_t)tb->width * sizeof(float);
        TR_CHECK_GOTO(be->i->mem_alloc(be->ctx, tb->bytes, (void **)&tb->w), rc, fail);
        if (cfg->optim == KERN_OPT_ADAGRAD)
            TR_CHECK_GOTO(be->i->mem_alloc(be->ctx, tb->bytes, (void **)&tb->accum), rc, fail);
    }
    assign_positions(m);

    /* activations: one block carved by a size table */
    {
        int64_t hidden = 0;
        for (int l = 0; l + 1 < m->cfg.nbottom; l++)
            hidden += m->bottom[l].out;
        for (int l = 0; l < cfg->ntop; l++)
            hidden += m->top[l].out;
        size_t floats = (size_t)B * ((size_t)(2 * m->n * D) + 2 * (size_t)m->top_in_w + 2 * (size_t)maxw + 1 +
                                     (size_t)hidden);
        m->emb_ws_bytes = T ? be->i->emb_update_ws_bytes(be->ctx, B, D, T) : 0;
        m->act_bytes = floats * sizeof(float) + m->emb_ws_bytes + 64;
        char *act = NULL;
        TR_CHECK_GOTO(be->i->mem_alloc(be->ctx, m->act_bytes, (void **)&act), rc, fail);
        float *p = (float *)act;
        m->x = p, p += (size_t)B * m->n * D;
        m->dx = p, p += (size_t)B * m->n * D;
        m->top_in = p, p += (size_t)B * m->top_in_w;
        m->dtop_in = p, p += (size_t)B * m->top_in_w;
        m->dbuf[0] = p, p += (size_t)B * maxw;
        m->dbuf[1] = p, p += (size_t)B * maxw;
        m->dlogits = p, p += (size_t)B;
        for (int l = 0; l < m->cfg.nbottom; l++) {
            if (l + 1 == m->cfg.nbottom) { /* last bottom layer writes row 0 of X */
                m->bottom[l].y = m->x;
                m->bottom[l].ldy = (int64_t)m->n * D;
            } else {
                m->bottom[l].y = p;
                m->bottom[l].ldy = m->bottom[l].out;
                p += (size_t)B * m->bottom[l].out;
            }
        }
        for (int l = 0; l < cfg->ntop; l++) {
            m->top[l].y = p;
            m->top[l].ldy = m->top[l].out;
            p += (size_t)B * m->top[l].out;
        }
        m->emb_ws = p;
        TR_ASSERT((char *)p + m->emb_ws_bytes <= act + m->act_bytes);
    }
    dlrm_init_params(m);
    *out = m;
    return TR_OK;
fail:
    dlrm_free(&m);
    return rc;
}

void dlrm_free(struct dlrm **pm)
{
    struct dlrm *m = *pm;
    if (!m)
        return;
    const struct kern_backend *be = &m->be;
    if (m->tables) {
        for (int t = 0; t < m->cfg.ntables; t++) {
            be->i->mem_release(be->ctx, m->tables[t].w, m->tables[t].bytes);
            be->i->mem_release(be->ctx, m->tables[t].accum, m->tables[t].bytes);
        }
    }
    be->i->mem_release(be->ctx, m->params, m->dense_bytes);
    be->i->mem_release(be->ctx, m->x, m->act_bytes);
    tr_free(m->tables);
    tr_free(m->fwd_args);
    tr_free(m->upd_args);
    tr_free(m->bad_pos);
    tr_free(m->cards);
    tr_free(m);
    *pm = NULL;
}

static enum tr_status gemm(struct dlrm *m, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                           int64_t lda, const float *Bm, int64_t ldb, float beta, float *C, int64_t ldc)
{
    struct kern_gemm_args g = {ta, tb, M, N, K, 1.0f, beta, A, lda, Bm, ldb, C, ldc};
    return m->be.i->gemm(m->be.ctx, &g);
}

/* y = act(x W + b) for one layer. */
static enum tr_status layer_fwd(struct dlrm *m, struct dlrm_layer *L, int64_t B, const float *x, int64_t ldx)
{
    TR_CHECK(gemm(m, 0, 0, B, L->out, L->in, x, ldx, L->w, L->out, 0.0f, L->y, L->ldy));
    struct kern_bias_act_fwd_args a = {B, L->out, L->y, L->ldy, L->b, L->relu ? KERN_ACT_RELU : KERN_ACT_NONE};
    return m->be.i->bias_act_fwd(m->be.ctx, &a);
}

/* Given dy (B, out) of the layer output (modified in place into dz), fills dw, db
 * and, if dx is non-NULL, dx (B, in) = dz W^T. */
static enum tr_status layer_bwd(struct dlrm *m, struct dlrm_layer *L, int64_t B, const float *x, int64_t ldx,
                                float *dy, int64_t lddy, float *dx, int64_t lddx)
{
    struct kern_bias_act_bwd_args a = {B, L->out, L->y, L->ldy, dy, lddy, L->db, 0,
                                       L->relu ? KERN_ACT_RELU : KERN_ACT_NONE};
    TR_CHECK(m->be.i->bias_act_bwd(m->be.ctx, &a));
    TR_CHECK(gemm(m, 1, 0, L->in, L->out, B, x, ldx, dy, lddy, 0.0f, L->dw, L->out));
    if (dx)
        TR_CHECK(gemm(m, 0, 1, B, L->in, L->out, dy, lddy, L->w, L->out, 0.0f, dx, lddx));
    return TR_OK;
}

static enum tr_status check_batch(const struct dlrm *m, const struct tr_batch *b)
{
    if (b->n < 0 || b->n > m->cfg.max_batch || b->ntables != m->cfg.ntables ||
        b->num_features != m->cfg.num_features || b->num_ld != m->num_ld) {
        LOG_ERROR("model: batch of %lld samples, %d tables, %d numerical does not fit the model (max %lld, %d, %d)",
                  (long long)b->n, b->ntables, b->num_features, (long long)m->cfg.max_batch, m->cfg.ntables,
                  m->cfg.num_features);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

enum tr_status dlrm_forward(struct dlrm *m, const struct tr_batch *b)
{
    TR_CHECK(check_batch(m, b));
    const int64_t B = b->n, D = m->cfg.emb_dim, ldx = (int64_t)m->n * D;
    const struct kern_backend *be = &m->be;
    double t0 = now_sec();
    const int T = m->cfg.ntables;
    for (int t = 0; t < T; t++) {
        struct dlrm_table *tb = &m->tables[t];
        m->bad_pos[t] = -1;
        m->fwd_args[t] = (struct kern_emb_fwd_args){
            .table = tb->w, .rows = tb->rows, .ld = tb->width, .c0 = 0, .c1 = tb->width,
            .idx = b->cat + (int64_t)t * b->cap, .idx_dtype = KERN_I32, .offsets = NULL, .nbags = B,
            .comb = KERN_COMB_SUM, .out = m->x + (int64_t)tb->pos * D + tb->col0, .out_ld = ldx,
            .bad_pos = &m->bad_pos[t],
        };
    }
    enum tr_status rc = T ? be->i->emb_fwd(be->ctx, m->fwd_args, T) : TR_OK;
    for (int t = 0; rc == TR_ERR_RANGE && t < T; t++) {
        int64_t bad = m->bad_pos[t];
        if (bad >= 0) {
            LOG_ERROR("table %d: categorical id %d of sample %lld (batch %lld) is outside [0, %lld)", t,
                      (int)b->cat[(int64_t)t * b->cap + bad], (long long)bad, (long long)b->index,
                      (long long)m->tables[t].rows);
            LOG_HINT("the dataset's ids must be below the table cardinalities given to the model");
            break;
        }
    }
    TR_CHECK(rc);
    double t1 = now_sec();
    m->t[DLRM_T_EMB_FWD] += t1 - t0;
    for (int l = 0; l < m->cfg.nbottom; l++) {
        const float *in = l ? m->bottom[l - 1].y : b->numerical;
        int64_t ldin = l ? m->bottom[l - 1].ldy : b->num_ld;
        TR_CHECK(layer_fwd(m, &m->bottom[l], B, in, ldin));
    }
    double t2 = now_sec();
    m->t[DLRM_T_BOTTOM_FWD] += t2 - t1;
    struct kern_interact_fwd_args ia = {B, m->n, (int)D, m->has_bottom, m->x, m->top_in, m->top_in_w};
    TR_CHECK(be->i->interact_fwd(be->ctx, &ia));
    double t3 = now_sec();
    m->t[DLRM_T_INTERACT_FWD] += t3 - t2;
    for (int l = 0; l < m->cfg.ntop; l++) {
        const float *in = l ? m->top[l - 1].y : m->top_in;
        int64_t ldin = l ? m->top[l - 1].ldy : m->top_in_w;
        TR_CHECK(layer_fwd(m, &m->top[l], B, in, ldin));
    }
    m->t[DLRM_T_TOP_FWD] += now_sec() - t3;
    return TR_OK;
}

const float *dlrm_logits(const struct dlrm *m)
{
    return m->top[m->cfg.ntop - 1].y;
}

enum tr_status dlrm_loss(struct dlrm *m, const struct tr_batch *b, double *loss)
{
    double t0 = now_sec(), sum = 0.0;
    struct kern_bce_args a = {b->n, dlrm_logits(m), b->labels, &sum, m->dlogits,
                              b->n ? 1.0f / (float)b->n : 0.0f};
    TR_CHECK(m->be.i->bce(m->be.ctx, &a));
    *loss = b->n ? sum / (double)b->n : 0.0;
    m->t[DLRM_T_LOSS] += now_sec() - t0;
    return TR_OK;
}

enum tr_status dlrm_backward(struct dlrm *m, const struct tr_batch *b)
{
    const int64_t B = b->n, D = m->cfg.emb_dim, ldx = (int64_t)m->n * D;
    const struct kern_backend *be = &m->be;
    double t0 = now_sec();
    /* top MLP: dy of the last layer is dlogits; ping-pong through dbuf */
    float *dy = m->dlogits;
    int64_t lddy = 1;
    for (int l = m->cfg.ntop - 1; l >= 0; l--) {
        struct dlrm_layer *L = &m->top[l];
        const float *in = l ? m->top[l - 1].y : m->top_in;
        int64_t ldin = l ? m->top[l - 1].ldy : m->top_in_w;
        float *dx = l ? m->dbuf[l & 1] : m->dtop_in;
        int64_t lddx = l ? m->top[l - 1].out : m->top_in_w;
        TR_CHECK(layer_bwd(m, L, B, in, ldin, dy, lddy, dx, lddx));
        dy = dx;
        lddy = lddx;
    }
    double t1 = now_sec();
    m->t[DLRM_T_TOP_BWD] += t1 - t0;
    struct kern_interact_bwd_args ia = {B, m->n, (int)D, m->has_bottom, m->x, m->dtop_in, m->top_in_w, m->dx};
    TR_CHECK(be->i->interact_bwd(be->ctx, &ia));
    double t2 = now_sec();
    m->t[DLRM_T_INTERACT_BWD] += t2 - t1;
    /* bottom MLP: the last layer's gradient is row 0 of dx */
    dy = m->dx;
    lddy = ldx;
    for (int l = m->cfg.nbottom - 1; l >= 0; l--) {
        struct dlrm_layer *L = &m->bottom[l];
        const float *in = l ? m->bottom[l - 1].y : b->numerical;
        int64_t ldin = l ? m->bottom[l - 1].ldy : b->num_ld;
        float *dx = l ? m->dbuf[l & 1] : NULL;
        int64_t lddx = l ? m->bottom[l - 1].out : 0;
        TR_CHECK(layer_bwd(m, L, B, in, ldin, dy, lddy, dx, lddx));
        dy = dx;
        lddy = lddx;
    }
    m->t[DLRM_T_BOTTOM_BWD] += now_sec() - t2;
    return TR_OK;
}

enum tr_status dlrm_update_embeddings(struct dlrm *m, const struct tr_batch *b, float lr)
{
    const int64_t D = m->cfg.emb_dim, ldx = (int64_t)m->n * D;
    const struct kern_backend *be = &m->be;
    double t0 = now_sec();
    const int T = m->cfg.ntables;
    for (int t = 0; t < T; t++) {
        struct dlrm_table *tb = &m->tables[t];
        m->upd_args[t] = (struct kern_emb_update_args){
            .table = tb->w, .rows = tb->rows, .ld = tb->width, .c0 = 0, .c1 = tb->width,
            .accum = tb->accum, .accum_ld = tb->width,
            .idx = b->cat + (int64_t)t * b->cap, .idx_dtype = KERN_I32, .offsets = NULL, .nbags = b->n,
            .comb = KERN_COMB_SUM, .grad = m->dx + (int64_t)tb->pos * D + tb->col0, .grad_ld = ldx,
            .grad_scale = 1.0f, .hp = {m->cfg.optim, lr, m->cfg.adagrad_eps},
            .ws = m->emb_ws, .ws_bytes = m->emb_ws_bytes, .bad_pos = NULL,
        };
    }
    if (T)
        TR_CHECK(be->i->emb_update(be->ctx, m->upd_args, T));
    m->t[DLRM_T_EMB_UPDATE] += now_sec() - t0;
    return TR_OK;
}

enum tr_status dlrm_update_dense(struct dlrm *m, float lr)
{
    double t0 = now_sec();
    struct kern_dense_update_args a = {m->nparams, m->params, m->grads, m->accum, 1.0f,
                                       {m->cfg.optim, lr, m->cfg.adagrad_eps}};
    TR_CHECK(m->be.i->dense_update(m->be.ctx, &a));
    m->t[DLRM_T_DENSE_UPDATE] += now_sec() - t0;
    return TR_OK;
}

enum tr_status dlrm_train_step(struct dlrm *m, const struct tr_batch *b, float lr, double *loss)
{
    TR_CHECK(dlrm_forward(m, b));
    TR_CHECK(dlrm_loss(m, b, loss));
    TR_CHECK(dlrm_backward(m, b));
    TR_CHECK(dlrm_update_embeddings(m, b, lr));
    TR_CHECK(dlrm_update_dense(m, lr));
    return TR_OK;
}

void dlrm_get_bytes(const struct dlrm *m, struct dlrm_bytes *b)
{
    b->dense = (int64_t)m->dense_bytes;
    b->embeddings = 0;
    for (int t = 0; t < m->cfg.ntables; t++)
        b->embeddings += (int64_t)m->tables[t].bytes * (m->tables[t].accum ? 2 : 1);
    b->activations = (int64_t)m->act_bytes;
}

void dlrm_reset_timers(struct dlrm *m)
{
    memset(m->t, 0, sizeof m->t);
}
