/* dlrm_tensors.c: the model as others see it: its shape (dlrm_get_info and the
 * layer, cross and table getters), its tensor layout (dlrm_tensors: one view per
 * parameter, optimizer state and embedding slice, named as checkpoints name them)
 * and access to its tensors through backend copies and the sumsq op. It computes
 * nothing and never reads backend memory from the host. */
#define TR_SUBSYS TR_SUB_MODEL
#include "dlrm_internal.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h"

void dlrm_get_info(const struct dlrm *m, struct dlrm_info *o)
{
    memset(o, 0, sizeof *o);
    o->ntables = m->cfg.ntables;
    o->emb_dim = m->cfg.emb_dim;
    o->num_features = m->cfg.num_features;
    o->num_ld = m->num_ld;
    o->n = m->n;
    o->has_bottom = m->has_bottom;
    o->dp_bottom = m->dp_bottom;
    o->mp_bottom = m->mp_bottom;
    o->nbottom = m->cfg.nbottom;
    o->ntop = m->cfg.ntop;
    o->top_in_w = m->top_in_w;
    o->nparams = m->nparams;
    o->top_param0 = m->top_param0;
    o->interaction = m->cfg.ncross ? DLRM_INTERACT_DCNV2 : DLRM_INTERACT_DOT;
    o->ncross = m->cfg.ncross;
    o->cross_rank = m->cfg.ncross ? m->cfg.cross_rank : 0;
    o->max_batch = m->cfg.max_batch;
    o->max_global = m->cfg.max_global > 0 ? m->cfg.max_global : m->cfg.max_batch;
    o->optim = m->cfg.optim;
}

void dlrm_get_layer(const struct dlrm *m, int top, int l, struct dlrm_layer_info *o)
{
    TR_ASSERT(l >= 0 && l < (top ? m->cfg.ntop : m->cfg.nbottom));
    const struct dlrm_layer *L = top ? &m->top[l] : &m->bottom[l];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", L->name);
    o->in = L->in;
    o->out = L->out;
    o->relu = L->relu;
    o->w_off = L->w - m->params;
    o->b_off = L->b - m->params;
}

void dlrm_get_cross(const struct dlrm *m, int l, struct dlrm_cross_info *o)
{
    TR_ASSERT(l >= 0 && l < m->cfg.ncross);
    const struct dlrm_cross *X = &m->cross[l];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", X->name);
    o->width = X->w;
    o->rank = X->r;
    o->v_off = X->v - m->params;
    o->u_off = X->u - m->params;
    o->b_off = X->b - m->params;
}

void dlrm_get_table(const struct dlrm *m, int t, struct dlrm_table_info *o)
{
    TR_ASSERT(t >= 0 && t < m->cfg.ntables);
    const struct dlrm_table *tb = &m->tables[t];
    o->id = tb->id;
    o->pos = tb->pos;
    o->rows = tb->rows;
    o->col0 = tb->col0;
    o->width = tb->width;
    o->hot = m->hot[t];
    o->mean = m->mean[t];
}

/* Where tensor k lives and how many elements it has (NULL/0 when absent). */
static float *tensor(const struct dlrm *m, enum dlrm_tensor k, int index, int64_t *numel)
{
    const int64_t B = m->cfg.max_batch, nx = B * m->n * (int64_t)m->cfg.emb_dim, nt = B * m->top_in_w;
    const struct dlrm_table *tb = index >= 0 && index < m->cfg.ntables ? &m->tables[index] : NULL;
    switch (k) {
    case DLRM_PARAMS: *numel = m->nparams; return m->params;
    case DLRM_GRADS: *numel = m->nparams; return m->grads;
    case DLRM_PARAMS_STATE: *numel = m->accum ? m->nparams : 0; return m->accum;
    case DLRM_TABLE: *numel = tb && tb->w ? tb->rows * tb->width : 0; return tb ? tb->w : NULL;
    case DLRM_TABLE_STATE:
        if (tb && tb->tiered) /* the whole slice's, not its cache's */
            *numel = tb->accum ? tb->rows * dlrm_state_width(m->cfg.optim, tb->width) : 0;
        else
            *numel = tb && tb->accum ? (int64_t)(tb->accum_bytes / sizeof(float)) : 0;
        return tb ? tb->accum : NULL;
    case DLRM_X: *numel = nx; return m->x;
    case DLRM_DX: *numel = nx; return m->dx;
    case DLRM_TOP_IN: *numel = nt; return m->top_in;
    case DLRM_DTOP_IN: *numel = nt; return m->dtop_in;
    case DLRM_LOGITS: *numel = B; return dlrm_logits(m);
    case DLRM_TENSOR_COUNT_: break;
    }
    *numel = 0;
    return NULL;
}

int64_t dlrm_tensor_numel(const struct dlrm *m, enum dlrm_tensor k, int index)
{
    int64_t n;
    return tensor(m, k, index, &n) ? n : 0;
}

/* The slice of a table held in the tier, for tensor k (a table or its state); -1: not. */
static int tiered_slice(const struct dlrm *m, enum dlrm_tensor k, int index)
{
    if ((k != DLRM_TABLE && k != DLRM_TABLE_STATE) || index < 0 || index >= m->cfg.ntables ||
        !m->tables[index].tiered)
        return -1;
    return tier_slice_of(m->tier, index);
}

static float *tensor_range(const struct dlrm *m, enum dlrm_tensor k, int index, int64_t off, int64_t n)
{
    int64_t numel;
    float *p = tensor(m, k, index, &numel);
    if (!p || off < 0 || n < 0 || off > numel || n > numel - off) {
        LOG_ERROR("model: tensor %d[%d] has %lld elements; [%lld, %lld) is outside it", (int)k, index,
                  (long long)(p ? numel : 0), (long long)off, (long long)(off + n));
        return NULL;
    }
    return p + off;
}

enum tr_status dlrm_tensor_read(const struct dlrm *m, enum dlrm_tensor k, int index, int64_t off, int64_t n,
                                float *host)
{
    const int ts = tiered_slice(m, k, index);
    if (ts >= 0) /* its rows as training left them: the cache's changes first go to the store */
        return tier_read(m->tier, ts, k == DLRM_TABLE_STATE, off, n, host);
    float *p = tensor_range(m, k, index, off, n);
    if (!p)
        return TR_ERR_ARG;
    return n ? m->be.i->copy(m->be.ctx, host, p, (size_t)n * sizeof(float), KERN_D2H) : TR_OK;
}

enum tr_status dlrm_tensor_write(struct dlrm *m, enum dlrm_tensor k, int index, int64_t off, int64_t n,
                                 const float *host)
{
    const int ts = tiered_slice(m, k, index);
    if (ts >= 0)
        return tier_write(m->tier, ts, k == DLRM_TABLE_STATE, off, n, host);
    float *p = tensor_range(m, k, index, off, n);
    if (!p)
        return TR_ERR_ARG;
    return n ? m->be.i->copy(m->be.ctx, p, host, (size_t)n * sizeof(float), KERN_H2D) : TR_OK;
}

enum tr_status dlrm_tensor_sumsq(const struct dlrm *m, enum dlrm_tensor k, int index, int64_t off, int64_t n,
                                 double *out)
{
    *out = 0.0;
    const int ts = tiered_slice(m, k, index);
    if (ts >= 0) { /* the rows in its cache: all that training changes (dlrm.h) */
        float *w, *st;
        int64_t slots;
        tier_cache(m->tier, ts, &w, &st, &slots);
        const struct dlrm_table *tb = &m->tables[index];
        const int64_t cnt = slots * (k == DLRM_TABLE ? tb->width : dlrm_state_width(m->cfg.optim, tb->width));
        struct kern_sumsq_args a = {.x = k == DLRM_TABLE ? w : st, .rows = 1, .cols = cnt, .ld = cnt, .out = out};
        return cnt ? m->be.i->sumsq(m->be.ctx, &a, 1) : TR_OK;
    }
    const float *p = tensor_range(m, k, index, off, n);
    if (!p)
        return TR_ERR_ARG;
    struct kern_sumsq_args a = {.x = p, .rows = 1, .cols = n, .ld = n, .out = out};
    return n ? m->be.i->sumsq(m->be.ctx, &a, 1) : TR_OK;
}

/* ---- the tensor visitor -------------------------------------------------------- */

/* A walk in progress: the callback and the name buffer of the current view. */
struct walk {
    const struct dlrm *m;
    dlrm_tensor_fn fn;
    void *ctx;
    char name[128];
};

/* A dense tensor (a part of layer `layer`) and, with Adagrad, its state. */
static enum tr_status walk_dense(struct walk *w, enum dlrm_group g, int idx, const char *layer, const char *part,
                                 int64_t off, int64_t rows, int64_t cols, int ndim)
{
    const struct dlrm *m = w->m;
    struct dlrm_tensor_view v = {.name = w->name, .layer = layer, .part = part, .role = DLRM_ROLE_PARAM,
                                 .group = g, .layer_index = idx, .dtype = KERN_F32, .ndim = ndim, .rows = rows,
                                 .cols = ndim == 1 ? 1 : cols, .c0 = 0, .k = DLRM_PARAMS, .index = 0, .off = off,
                                 .buf = m->params + off};
    v.c1 = v.cols;
    snprintf(w->name, sizeof w->name, "dense/%s/%s", layer, part);
    TR_CHECK(w->fn(w->ctx, &v));
    if (!m->accum)
        return TR_OK;
    snprintf(w->name, sizeof w->name, "dense/%s/%s/adagrad", layer, part);
    v.role = DLRM_ROLE_STATE;
    v.k = DLRM_PARAMS_STATE;
    v.buf = m->accum + off;
    return w->fn(w->ctx, &v);
}

static enum tr_status walk_layer(struct walk *w, const struct dlrm_layer *L, enum dlrm_group g, int idx)
{
    TR_CHECK(walk_dense(w, g, idx, L->name, "kernel", L->w - w->m->params, L->in, L->out, 2));
    return walk_dense(w, g, idx, L->name, "bias", L->b - w->m->params, L->out, 1, 1);
}

enum tr_status dlrm_tensors(const struct dlrm *m, dlrm_tensor_fn fn, void *ctx)
{
    struct walk w = {.m = m, .fn = fn, .ctx = ctx};
    for (int l = 0; l < m->cfg.nbottom; l++)
        TR_CHECK(walk_layer(&w, &m->bottom[l], DLRM_GROUP_BOTTOM, l));
    for (int l = 0; l < m->cfg.ncross; l++) {
        const struct dlrm_cross *X = &m->cross[l];
        TR_CHECK(walk_dense(&w, DLRM_GROUP_CROSS, l, X->name, "v_kernel", X->v - m->params, X->w, X->r, 2));
        TR_CHECK(walk_dense(&w, DLRM_GROUP_CROSS, l, X->name, "u_kernel", X->u - m->params, X->r, X->w, 2));
        TR_CHECK(walk_dense(&w, DLRM_GROUP_CROSS, l, X->name, "bias", X->b - m->params, X->w, 1, 1));
    }
    for (int l = 0; l < m->cfg.ntop; l++)
        TR_CHECK(walk_layer(&w, &m->top[l], DLRM_GROUP_TOP, l));
    for (int t = 0; t < m->cfg.ntables; t++) {
        const struct dlrm_table *tb = &m->tables[t];
        if (tb->width == 0)
            continue;
        struct dlrm_tensor_view v = {.name = w.name, .layer = "", .part = "", .role = DLRM_ROLE_EMB,
                                     .group = DLRM_GROUP_EMB, .layer_index = t, .dtype = KERN_F32, .ndim = 2,
                                     .rows = tb->rows, .cols = m->cfg.emb_dim, .c0 = tb->col0,
                                     .c1 = tb->col0 + tb->width, .table_col0 = tb->col0, .k = DLRM_TABLE,
                                     .index = t, .off = 0, .buf = tb->w, .tiered = tb->tiered};
        snprintf(w.name, sizeof w.name, "emb/%d", t);
        TR_CHECK(fn(ctx, &v));
        const int64_t ns = dlrm_tensor_numel(m, DLRM_TABLE_STATE, t);
        snprintf(w.name, sizeof w.name, "emb/%d/adagrad", t);
        v.role = DLRM_ROLE_EMB_STATE;
        v.k = DLRM_TABLE_STATE;
        v.buf = tb->accum;
        if (ns == tb->rows * tb->width && m->cfg.optim != KERN_OPT_ROWWISE_ADAGRAD) {
            TR_CHECK(fn(ctx, &v));
        } else if (ns == tb->rows) { /* row-wise: one value per row */
            v.ndim = 1;
            v.cols = 1;
            v.c0 = 0;
            v.c1 = 1;
            TR_CHECK(fn(ctx, &v));
        }
    }
    return TR_OK;
}
