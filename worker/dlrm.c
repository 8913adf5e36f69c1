/* dlrm.c: the DLRM model on a kern backend: configuration, sizing and one
 * allocation per lifetime (the dense parameters with their gradients and Adagrad
 * state, one block per embedding table held, one block of activations),
 * initialisation on the backend, and the dense passes on a local slice. Its
 * shape and its tensors, as others see them, are in dlrm_tensors.c. Gathering embeddings, the collectives and the
 * embedding update belong to the training step (hybrid.c); this file never reads
 * or writes backend memory from the host. */
#define TR_SUBSYS TR_SUB_MODEL
#include "dlrm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../kernels/kmath.h"
#include "../loader_svc/batch.h"

static const char *const phase_names[DLRM_T_COUNT_] = {
    "emb_fwd",  "bottom_fwd",   "interact_fwd", "top_fwd",    "loss",
    "top_bwd",  "interact_bwd", "bottom_bwd",   "emb_update", "dense_update",
};

const char *dlrm_phase_name(enum dlrm_phase p)
{
    return (int)p >= 0 && p < DLRM_T_COUNT_ ? phase_names[p] : "unknown";
}

double dlrm_clock(const struct dlrm *m)
{
    /* a failed synchronize surfaces at the op that follows; the timer stays honest */
    (void)m->be.i->synchronize(m->be.ctx);
    return tr_clock_now();
}

void dlrm_cfg_from_job(const struct job_cfg *job, int num_features, int ntables, const int64_t *rows,
                       const struct shard_plan *plan, struct dlrm_cfg *out)
{
    memset(out, 0, sizeof *out);
    out->num_features = num_features;
    out->ntables = ntables;
    out->rows = rows;
    out->emb_dim = job->embedding_dim;
    out->nbottom = num_features > 0 ? TR_MIN(job->bottom.n, DLRM_MAX_LAYERS) : 0;
    for (int l = 0; l < out->nbottom; l++)
        out->bottom[l] = (int)job->bottom.v[l];
    out->ntop = TR_MIN(job->top.n, DLRM_MAX_LAYERS);
    for (int l = 0; l < out->ntop; l++)
        out->top[l] = (int)job->top.v[l];
    out->optim = job->optimizer == JOB_OPT_ADAGRAD           ? KERN_OPT_ADAGRAD
                 : job->optimizer == JOB_OPT_ROWWISE_ADAGRAD ? KERN_OPT_ROWWISE_ADAGRAD
                                                             : KERN_OPT_SGD;
    if (job->interaction == JOB_INTERACT_DCNV2) {
        out->interaction = DLRM_INTERACT_DCNV2;
        out->ncross = job->dcn_num_layers;
        out->cross_rank = job->dcn_low_rank_dim;
    }
    out->adagrad_init = (float)job->adagrad_init;
    out->adagrad_eps = (float)job->adagrad_eps;
    out->loss_scale = job_loss_scale(job);
    out->seed = (uint64_t)job->seed;
    out->max_global = TR_MAX(job->batch_size, job_test_batch(job));
    out->max_batch = shard_slice_start(out->max_global, plan ? plan->world : 1, 1); /* the first slice is largest */
    out->plan = plan;
    if (job_tier_of(job, &out->tier) != TR_OK) /* job_check refused it already */
        out->tier.store = JOB_STORE_MEMORY;
}

/* Seeds' random streams: one per tensor, stable across versions. */
#define STREAM_BOTTOM_W 0x100u
#define STREAM_TOP_W 0x180u
#define STREAM_BOTTOM_B 0x200u
#define STREAM_TOP_B 0x280u
#define STREAM_CROSS_V 0x300u
#define STREAM_CROSS_U 0x380u

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
        if (c->rows[t] < 1) {
            LOG_ERROR("model: table %d has %lld rows; must be >= 1", t, (long long)c->rows[t]);
            return TR_ERR_ARG;
        }
        if (c->hot && (c->hot[t] < 0 || c->hot[t] > BATCH_MAX_HOT)) {
            LOG_ERROR("model: table %d has hotness %d; must be 0 (one-hot) to %d", t, (int)c->hot[t], BATCH_MAX_HOT);
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
    if (c->interaction == DLRM_INTERACT_DCNV2) {
        if (c->ncross < 1 || c->ncross > DLRM_MAX_LAYERS || c->cross_rank < 1) {
            LOG_ERROR("model: dcnv2 needs 1..%d cross layers and a low-rank dimension >= 1, got %d and %d",
                      DLRM_MAX_LAYERS, c->ncross, c->cross_rank);
            return TR_ERR_ARG;
        }
    } else if (c->interaction != DLRM_INTERACT_DOT) {
        LOG_ERROR("model: unknown interaction %d", (int)c->interaction);
        return TR_ERR_ARG;
    }
    if (c->optim != KERN_OPT_SGD && c->optim != KERN_OPT_ADAGRAD && c->optim != KERN_OPT_ROWWISE_ADAGRAD) {
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
            if (m->rows[u] > m->rows[t] || (m->rows[u] == m->rows[t] && u < t))
                rank++;
        m->tables[t].pos = m->has_bottom + rank;
    }
}

static enum tr_status fill(struct dlrm *m, const struct kern_fill_args *a)
{
    return a->rows && a->cols ? m->be.i->fill(m->be.ctx, a) : TR_OK;
}

enum tr_status dlrm_init_params(struct dlrm *m)
{
    const uint64_t seed = m->cfg.seed;
    const int64_t D = m->cfg.emb_dim;
    for (int t = 0; t < m->cfg.ntables; t++) {
        const struct dlrm_table *tb = &m->tables[t];
        if (!tb->w || tb->tiered) /* a tier's rows start as these same values (tier_store.c) */
            continue;
        /* element (r, c) of the slice is element r * D + col0 + c of the whole table */
        struct kern_fill_args a = {.kind = KERN_FILL_UNIFORM, .dst = tb->w, .rows = tb->rows, .cols = tb->width,
                                   .ld = tb->width, .seed = seed, .stream = (uint64_t)tb->id, .elem_ld = D,
                                   .elem0 = tb->col0, .a = sqrtf(1.0f / (float)tb->rows)};
        TR_CHECK(fill(m, &a));
        if (tb->accum) {
            a.kind = KERN_FILL_CONST;
            a.dst = tb->accum;
            a.value = m->cfg.adagrad_init;
            if (m->cfg.optim == KERN_OPT_ROWWISE_ADAGRAD)
                a.cols = a.ld = 1; /* (rows): one per row */
            TR_CHECK(fill(m, &a));
        }
    }
    if (m->tier)
        TR_CHECK(tier_reset(m->tier));
    for (int part = 0; part < 2; part++) {
        int nl = part ? m->cfg.ntop : (m->has_bottom ? m->cfg.nbottom : 0);
        const struct dlrm_layer *L = part ? m->top : m->bottom;
        for (int l = 0; l < nl; l++) {
            uint64_t sw = (part ? STREAM_TOP_W : STREAM_BOTTOM_W) + (uint64_t)l;
            uint64_t sb = (part ? STREAM_TOP_B : STREAM_BOTTOM_B) + (uint64_t)l;
            struct kern_fill_args w = {.kind = KERN_FILL_GLOROT, .dst = L[l].w, .rows = L[l].in, .cols = L[l].out,
                                       .ld = L[l].out, .seed = seed, .stream = sw, .elem_ld = L[l].out,
                                       .a = (float)L[l].in, .b = (float)L[l].out};
            TR_CHECK(fill(m, &w));
            struct kern_fill_args b = {.kind = KERN_FILL_NORMAL, .dst = L[l].b, .rows = 1, .cols = L[l].out,
                                       .ld = L[l].out, .seed = seed, .stream = sb, .a = (float)L[l].out};
            TR_CHECK(fill(m, &b));
        }
    }
    for (int l = 0; l < m->cfg.ncross; l++) {
        const struct dlrm_cross *X = &m->cross[l];
        struct kern_fill_args v = {.kind = KERN_FILL_GLOROT, .dst = X->v, .rows = X->w, .cols = X->r, .ld = X->r,
                                   .seed = seed, .stream = STREAM_CROSS_V + (uint64_t)l, .elem_ld = X->r,
                                   .a = (float)X->w, .b = (float)X->r};
        TR_CHECK(fill(m, &v));
        struct kern_fill_args u = {.kind = KERN_FILL_GLOROT, .dst = X->u, .rows = X->r, .cols = X->w, .ld = X->w,
                                   .seed = seed, .stream = STREAM_CROSS_U + (uint64_t)l, .elem_ld = X->w,
                                   .a = (float)X->r, .b = (float)X->w};
        TR_CHECK(fill(m, &u));
        struct kern_fill_args b = {.kind = KERN_FILL_CONST, .dst = X->b, .rows = 1, .cols = X->w, .ld = X->w};
        TR_CHECK(fill(m, &b));
    }
    if (m->accum) {
        struct kern_fill_args a = {.kind = KERN_FILL_CONST, .dst = m->accum, .rows = 1, .cols = m->nparams,
                                   .ld = m->nparams, .value = m->cfg.adagrad_init};
        TR_CHECK(fill(m, &a));
    }
    return TR_OK;
}

static void layer_setup(struct dlrm_layer *L, const char *kind, int idx, int in, int out, int relu)
{
    L->in = in;
    L->out = out;
    L->relu = relu;
    snprintf(L->name, sizeof L->name, "%s_mlp_layer_%d", kind, idx);
}

/* Everything dlrm_new sizes, computed from the config alone (shared by the
 * allocation and by dlrm_plan_bytes, so the plan is what gets allocated). */
struct sizes {
    int has_bottom, n, num_ld, dp_bottom, mp_bottom, rank;
    int64_t top_in_w, nparams, top_param0, maxw, bottom_rows, hidden_bottom, hidden_top;
    int64_t pstride;        /* nparams rounded up to 16 floats: where grads and accum start */
    int64_t cross_floats;   /* dcnv2 activations per local sample */
    int64_t emb_rows_bytes; /* embedding tables (+ Adagrad state) held here */
    int64_t emb_state_bytes; /* the Adagrad state among them */
    int64_t sumsq_n;        /* row-wise Adagrad on column slices: doubles of emb_sumsq */
    int64_t hmax;           /* the most ids one sample holds in one table (>= 1) */
    int ntables_held;
    int tiered;             /* tables held in a tier: their bytes above are their caches' */
    int64_t width_held;     /* widest column slice held */
    size_t dense_bytes, act_floats;
    size_t mask_bytes; /* the ReLU layers' masks (rows of out bits), each 64-byte aligned */
};

void dlrm_table_part(const struct dlrm_cfg *c, int t, int64_t *col0, int64_t *width)
{
    const struct shard_plan *p = c->plan;
    *col0 = 0;
    *width = c->emb_dim;
    if (!p || p->world == 1)
        return;
    if (p->mode == SHARD_COLUMNWISE) {
        *col0 = p->col0[p->rank];
        *width = p->col1[p->rank] - p->col0[p->rank];
    } else if (p->owner[t] != p->rank) {
        *width = 0;
    }
}

/* Floats of optimizer state of a table part (rows, width) held here. */
static int64_t table_state_numel(const struct dlrm_cfg *c, int64_t rows, int64_t width)
{
    if (width == 0)
        return 0;
    switch (c->optim) {
    case KERN_OPT_ADAGRAD: return rows * width;
    case KERN_OPT_ROWWISE_ADAGRAD: return rows;
    case KERN_OPT_SGD: break;
    }
    return 0;
}

/* slots (ntables): the rows each table keeps in the backend's memory (dlrm_tier_slots), or NULL: all.
 * masks: the backend records ReLU masks (kern_backend_i.relu_mask): the MLPs' input
 * gradients then take the place of the activations (grad_below), with no dbuf. */
static void compute_sizes(const struct dlrm_cfg *c, const int64_t *slots, int masks, struct sizes *z)
{
    memset(z, 0, sizeof *z);
    const int64_t D = c->emb_dim, B = c->max_batch, G = c->max_global > 0 ? c->max_global : c->max_batch;
    const struct shard_plan *p = c->plan;
    z->hmax = 1;
    for (int t = 0; c->hot && t < c->ntables; t++)
        z->hmax = TR_MAX(z->hmax, (int64_t)c->hot[t]);
    z->has_bottom = c->num_features > 0;
    z->n = c->ntables + z->has_bottom;
    z->num_ld = (c->num_features + 7) / 8 * 8;
    const int dcn = c->interaction == DLRM_INTERACT_DCNV2;
    z->top_in_w = dcn ? z->n * D : km_interact_width(z->n, D, z->has_bottom);
    z->rank = p ? p->rank : 0;
    z->dp_bottom = z->has_bottom && (!p || p->dp_bottom);
    z->mp_bottom = z->has_bottom && !z->dp_bottom && z->rank == 0;
    z->bottom_rows = z->mp_bottom ? TR_MAX(B, G) : B;
    int64_t np = 0, maxw = 1, in = z->num_ld;
    for (int l = 0; z->has_bottom && l < c->nbottom; l++) {
        np += in * c->bottom[l] + c->bottom[l];
        maxw = TR_MAX(maxw, c->bottom[l]);
        if (l + 1 < c->nbottom)
            z->hidden_bottom += c->bottom[l];
        if (masks)
            z->mask_bytes += (size_t)TR_CEIL_DIV(z->bottom_rows * kern_relu_mask_ld(c->bottom[l]), 64) * 64;
        in = c->bottom[l];
    }
    z->top_param0 = np;
    if (dcn) {
        /* per layer V (w, r), U (r, w), b (w); activations per sample: x_1..x_{L-1}
         * (the last output is top_in), x_l V and h of every layer, and the backward's
         * dy, dh (w) and dv (r) */
        const int64_t w = z->n * D, r = c->cross_rank, L = c->ncross;
        np += L * (2 * w * r + w);
        z->cross_floats = (L - 1) * w + L * (r + w) + 2 * w + r;
    }
    in = z->top_in_w;
    for (int l = 0; l < c->ntop; l++) {
        np += in * c->top[l] + c->top[l];
        maxw = TR_MAX(maxw, c->top[l]);
        z->hidden_top += c->top[l];
        if (masks && l + 1 < c->ntop) /* the last layer, the logit, has no ReLU */
            z->mask_bytes += (size_t)TR_CEIL_DIV(B * kern_relu_mask_ld(c->top[l]), 64) * 64;
        in = c->top[l];
    }
    z->nparams = np;
    /* params, grads and state each start 64-byte aligned: the weight-gradient GEMMs
     * write into grads, and cuBLASLt's heuristics offer only its kernels for 4-byte
     * alignment (no vector loads) when a pointer has no more (dense.cu passes each
     * pointer's alignment) */
    z->pstride = (np + 15) / 16 * 16;
    z->maxw = maxw;
    z->dense_bytes = (size_t)z->pstride * sizeof(float) * (c->optim != KERN_OPT_SGD ? 3u : 2u);
    for (int t = 0; t < c->ntables; t++) {
        int64_t col0, width;
        dlrm_table_part(c, t, &col0, &width);
        if (width == 0)
            continue;
        z->ntables_held++;
        z->width_held = TR_MAX(z->width_held, width);
        const int64_t held = slots ? slots[t] : c->rows[t];
        const int64_t state = table_state_numel(c, held, width) * (int64_t)sizeof(float);
        z->emb_rows_bytes += held * width * (int64_t)sizeof(float) + state;
        z->tiered += held < c->rows[t];
        z->emb_state_bytes += state;
    }
    /* every worker of a column-wise split takes part in the all-reduce of the
     * row-wise sums, with or without columns: one double per id of every table */
    if (c->optim == KERN_OPT_ROWWISE_ADAGRAD && p && p->world > 1 && p->mode == SHARD_COLUMNWISE)
        for (int t = 0; t < c->ntables; t++) /* at most one distinct row per id */
            z->sumsq_n += TR_MAX(G, B) * (c->hot && c->hot[t] ? c->hot[t] : 1);
    /* x, dx (B, n, D); top_in, dtop_in (B, top_in_w); dbuf x2 (rows, maxw) unless
     * masks; dlogits (B); hidden bottom outputs (bottom_rows each); top outputs (B each) */
    const int64_t dbuf_w = masks ? 0 : maxw;
    z->act_floats = (size_t)B * (size_t)(2 * z->n * D + 2 * z->top_in_w + 1 + z->hidden_top + z->cross_floats) +
                    (size_t)z->bottom_rows * (size_t)(2 * dbuf_w + z->hidden_bottom);
}

static size_t ws_bytes_for(const struct dlrm_cfg *c, const struct sizes *z, const struct kern_backend *be)
{
    const int64_t G = c->max_global > 0 ? c->max_global : c->max_batch;
    return z->ntables_held
               ? kern_emb_update_ws_bytes(be, TR_MAX(G, c->max_batch) * z->hmax, z->width_held, z->ntables_held)
               : 0;
}

/* Adds the backend's working memory of op on shape (m, n, k, count) to *most. */
static void ask(const struct kern_backend *be, enum kern_op op, int64_t m, int64_t n, int64_t k, int count,
                struct kern_ws *most)
{
    const struct kern_shape s = {m, n, k, count};
    struct kern_ws w;
    be->i->ws(be->ctx, op, &s, &w);
    kern_ws_max(most, &w);
}

/* The working memory of every op the model (this file) and its step (hybrid.c)
 * run, asked of the backend once per op with the largest sizes of any of its
 * calls (kern_shape: a larger shape bounds a smaller call), field by field the
 * most. The numeric guards' sumsq may cover any one tensor (dlrm_tensor_sumsq).
 * tests/unit/worker/test_op_ws.c runs steps on a backend that checks every call
 * against these questions. */
static void ops_ws(const struct dlrm_cfg *c, const struct sizes *z, const struct kern_backend *be,
                   struct kern_ws *most)
{
    memset(most, 0, sizeof *most);
    const int64_t D = c->emb_dim, B = c->max_batch, G = TR_MAX(c->max_global > 0 ? c->max_global : B, B);
    const int64_t rows = TR_MAX(B, z->bottom_rows), T = c->ntables, n = z->n;
    const int dcn = c->interaction == DLRM_INTERACT_DCNV2;
    /* every width a layer reads or writes: MLP layers, the interaction's output,
     * the padded numerical input, the cross layers' n*D and r */
    const int64_t wide = TR_MAX(TR_MAX(z->maxw, z->top_in_w),
                                TR_MAX((int64_t)z->num_ld, dcn ? TR_MAX(n * D, (int64_t)c->cross_rank) : 0));
    ask(be, KERN_OP_GEMM, rows, wide, wide, 1, most); /* forward (rows, out, in), input gradients (rows, in, out) */
    ask(be, KERN_OP_GEMM, wide, wide, rows, 1, most); /* weight gradients (in, out, rows) */
    ask(be, KERN_OP_BIAS_ACT_FWD, rows, wide, 0, 1, most);
    ask(be, KERN_OP_BIAS_ACT_BWD, rows, wide, 0, 1, most);
    if (dcn) {
        ask(be, KERN_OP_CROSS_FWD, B, n * D, 0, 1, most);
        ask(be, KERN_OP_CROSS_BWD, B, n * D, 0, 1, most);
    } else {
        ask(be, KERN_OP_INTERACT_FWD, B, n, D, 1, most);
        ask(be, KERN_OP_INTERACT_BWD, B, n, D, 1, most);
    }
    ask(be, KERN_OP_BCE, B, 0, 0, 1, most);
    ask(be, KERN_OP_DENSE_UPDATE, z->nparams, 0, 0, 1, most);
    /* tensors: the tables (and their state) held, the dense blocks, the activations */
    int64_t table_rows = 1, table_numel = 0;
    for (int t = 0; t < c->ntables; t++) {
        table_rows = TR_MAX(table_rows, c->rows[t]);
        table_numel = TR_MAX(table_numel, c->rows[t] * z->width_held);
    }
    const int64_t act = B * TR_MAX(n * D, z->top_in_w);
    /* the initial values: tables (rows, width), layers (in, out), the dense state (1, nparams) */
    ask(be, KERN_OP_FILL, TR_MAX(table_rows, wide), TR_MAX(TR_MAX(D, z->nparams), wide), 0, 1, most);
    ask(be, KERN_OP_SUMSQ, TR_MAX(TR_MAX(table_numel, z->pstride), act), 0, 0, 1, most);
    if (T > 0) {
        const int W = c->plan ? c->plan->world : 1;
        ask(be, KERN_OP_COPY_ROWS, G, TR_MAX(D, n * D), 0, DLRM_COPY_BLOCKS(W, (int)T), most);
        /* the step gathers each vector in up to three sample ranges; a table holds
         * up to hmax ids a sample */
        const int64_t nid = G * z->hmax;
        ask(be, KERN_OP_EMB_FWD, nid, z->width_held, 0, 3 * (int)T, most);
        ask(be, KERN_OP_EMB_UPDATE, nid, z->width_held, 0, (int)T, most);
        if (z->sumsq_n)
            ask(be, KERN_OP_EMB_ROWSQ, nid, z->width_held, 0, (int)T, most);
        ask(be, KERN_OP_MARK_ROWS, nid, 0, 0, (int)T, most);
        if (z->tiered) /* a tier's moves between its caches and staging: a row and its state */
            ask(be, KERN_OP_MOVE_ROWS, nid, z->width_held, 0, 2, most);
    } else {
        ask(be, KERN_OP_COPY_ROWS, B, n * D, 0, 1, most); /* the cross backward's one copy */
    }
}

/* Bytes of the activation block: the floats, then (8-byte aligned) the row-wise
 * sums, then the embedding workspace of ws bytes, then dx's guard flag, then (with
 * masks) the ReLU masks. */
static size_t act_bytes_of(const struct sizes *z, size_t ws)
{
    return z->act_floats * sizeof(float) + (z->sumsq_n ? 8 + (size_t)z->sumsq_n * sizeof(double) : 0) + ws + 64 +
           64 /* dx_bad */ + (z->mask_bytes ? z->mask_bytes + 64 : 0);
}

enum tr_status dlrm_plan_bytes(const struct dlrm_cfg *cfg, const struct kern_backend *be, struct dlrm_bytes *b)
{
    memset(b, 0, sizeof *b);
    int64_t *slots = tr_malloc((size_t)(cfg->ntables ? cfg->ntables : 1) * sizeof *slots);
    if (!slots)
        return TR_ERR_NOMEM;
    enum tr_status rc = dlrm_tier_slots(cfg, slots);
    struct tier_bytes tb = {0};
    if (rc == TR_OK)
        rc = dlrm_tier_plan_bytes(cfg, slots, be->i->host_memory, &tb);
    struct sizes z;
    compute_sizes(cfg, slots, be->i->relu_mask, &z);
    tr_free(slots);
    TR_CHECK(rc);
    b->tables_tiered = z.tiered;
    b->tier_cache = tb.cache;
    b->tier_host = tb.host;
    b->tier_backend = tb.backend;
    b->tier_disk = tb.disk;
    b->dense = (int64_t)z.dense_bytes;
    b->dense_state = cfg->optim != KERN_OPT_SGD ? z.pstride * (int64_t)sizeof(float) : 0;
    b->dense_params = z.nparams;
    b->embeddings = z.emb_rows_bytes;
    b->emb_state = z.emb_state_bytes;
    b->workspace = (int64_t)ws_bytes_for(cfg, &z, be) + z.sumsq_n * (int64_t)sizeof(double);
    b->activations = (int64_t)act_bytes_of(&z, ws_bytes_for(cfg, &z, be));
    ops_ws(cfg, &z, be, &b->ops);
    return TR_OK;
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
    m->rows = tr_malloc((size_t)(T ? T : 1) * sizeof(int64_t));
    m->hot = tr_calloc((size_t)(T ? T : 1), sizeof(int32_t));
    m->mean = tr_calloc((size_t)(T ? T : 1), sizeof(uint8_t));
    m->tables = tr_calloc((size_t)(T ? T : 1), sizeof(struct dlrm_table));
    int64_t *slots = tr_malloc((size_t)(T ? T : 1) * sizeof(int64_t));
    if (!m->rows || !m->hot || !m->mean || !m->tables || !slots) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    TR_CHECK_GOTO(dlrm_tier_slots(cfg, slots), rc, fail);
    struct sizes z;
    compute_sizes(cfg, slots, be->i->relu_mask, &z);
    memcpy(m->rows, cfg->rows, (size_t)T * sizeof(int64_t));
    if (cfg->hot)
        memcpy(m->hot, cfg->hot, (size_t)T * sizeof(int32_t));
    if (cfg->mean)
        memcpy(m->mean, cfg->mean, (size_t)T * sizeof(uint8_t));
    m->cfg.rows = m->rows;
    m->cfg.hot = m->hot;
    m->cfg.mean = m->mean;
    m->cfg.plan = NULL; /* borrowed only during construction */
    m->cfg.tier.dir = m->cfg.store_tag = NULL;
    m->has_bottom = z.has_bottom;
    if (!m->has_bottom)
        m->cfg.nbottom = 0;
    m->n = z.n;
    m->num_ld = z.num_ld;
    m->top_in_w = z.top_in_w;
    m->dp_bottom = z.dp_bottom;
    m->mp_bottom = z.mp_bottom;
    m->top_param0 = z.top_param0;
    m->rank = z.rank;

    for (int l = 0; l < m->cfg.nbottom; l++)
        layer_setup(&m->bottom[l], "bottom", l, l ? cfg->bottom[l - 1] : m->num_ld, cfg->bottom[l], 1);
    for (int l = 0; l < cfg->ntop; l++)
        layer_setup(&m->top[l], "top", l, l ? cfg->top[l - 1] : (int)m->top_in_w, cfg->top[l], l + 1 < cfg->ntop);
    if (cfg->interaction != DLRM_INTERACT_DCNV2)
        m->cfg.ncross = 0;
    for (int l = 0; l < m->cfg.ncross; l++) {
        m->cross[l].w = (int)(m->n * D);
        m->cross[l].r = cfg->cross_rank;
        snprintf(m->cross[l].name, sizeof m->cross[l].name, "cross_layer_%d", l);
    }
    m->nparams = z.nparams;
    m->dense_bytes = z.dense_bytes;
    float *dense = NULL;
    TR_CHECK_GOTO(kern_alloc(be, m->dense_bytes, (void **)&dense, "the MLP parameters, gradients and state"), rc,
                  fail);
    m->params = dense;
    m->grads = dense + z.pstride;
    m->accum = cfg->optim != KERN_OPT_SGD ? dense + 2 * z.pstride : NULL;
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
            if (part == 0) { /* the cross layers sit between bottom and top */
                TR_ASSERT(o == z.top_param0);
                for (int l = 0; l < cfg->ncross && cfg->interaction == DLRM_INTERACT_DCNV2; l++) {
                    struct dlrm_cross *X = &m->cross[l];
                    const int64_t wr = (int64_t)X->w * X->r;
                    X->v = m->params + o, X->dv = m->grads + o, o += wr;
                    X->u = m->params + o, X->du = m->grads + o, o += wr;
                    X->b = m->params + o, X->db = m->grads + o, o += X->w;
                }
            }
        }
        TR_ASSERT(o == z.nparams);
    }

    /* embedding tables: whole, a column slice, or (held elsewhere) nothing */
    for (int t = 0; t < T; t++) {
        struct dlrm_table *tb = &m->tables[t];
        tb->id = t;
        tb->rows = m->rows[t];
        dlrm_table_part(cfg, t, &tb->col0, &tb->width);
        tb->bytes = (size_t)tb->rows * (size_t)tb->width * sizeof(float);
        tb->accum_bytes = (size_t)table_state_numel(cfg, tb->rows, tb->width) * sizeof(float);
        tb->slots = tb->rows; /* dlrm_tier_open gives a tiered table its cache's */
        if (tb->width == 0 || slots[t] < tb->rows) /* held elsewhere, or in the tier (below) */
            continue;
        TR_CHECK_GOTO(kern_alloc(be, tb->bytes, (void **)&tb->w, "embedding table %d (%lld x %lld)", t,
                                 (long long)tb->rows, (long long)tb->width),
                      rc, fail);
        if (tb->accum_bytes)
            TR_CHECK_GOTO(kern_alloc(be, tb->accum_bytes, (void **)&tb->accum, "the Adagrad state of table %d", t),
                          rc, fail);
    }
    assign_positions(m);
    TR_CHECK_GOTO(dlrm_tier_open(m, cfg, slots), rc, fail);
    m->cfg.tier.dir = m->cfg.store_tag = NULL; /* borrowed; the tier keeps copies */

    /* activations: one block carved by the size table of compute_sizes */
    {
        const int64_t R = z.bottom_rows, maxw = z.maxw;
        m->emb_ws_bytes = ws_bytes_for(cfg, &z, be);
        m->emb_sumsq_n = z.sumsq_n;
        /* the sums first (8-byte aligned after the floats' block), then the workspace */
        m->act_bytes = act_bytes_of(&z, m->emb_ws_bytes);
        char *act = NULL;
        TR_CHECK_GOTO(kern_alloc(be, m->act_bytes, (void **)&act, "the activations"), rc, fail);
        float *p = (float *)act;
        m->x = p, p += (size_t)B * m->n * D;
        m->dx = p, p += (size_t)B * m->n * D;
        m->top_in = p, p += (size_t)B * m->top_in_w;
        m->dtop_in = p, p += (size_t)B * m->top_in_w;
        if (!be->i->relu_mask) {
            m->dbuf[0] = p, p += (size_t)R * maxw;
            m->dbuf[1] = p, p += (size_t)R * maxw;
        }
        m->dlogits = p, p += (size_t)B;
        for (int l = 0; l < m->cfg.nbottom; l++) {
            if (l + 1 == m->cfg.nbottom) { /* the last bottom layer writes where it is told */
                m->bottom[l].y = m->x;
                m->bottom[l].ldy = (int64_t)m->n * D;
            } else {
                m->bottom[l].y = p;
                m->bottom[l].ldy = m->bottom[l].out;
                p += (size_t)R * m->bottom[l].out;
            }
        }
        for (int l = 0; l < cfg->ntop; l++) {
            m->top[l].y = p;
            m->top[l].ldy = m->top[l].out;
            p += (size_t)B * m->top[l].out;
        }
        for (int l = 0; l < m->cfg.ncross; l++) {
            struct dlrm_cross *X = &m->cross[l];
            X->in = l ? m->cross[l - 1].out : m->x;
            if (l + 1 < m->cfg.ncross) {
                X->out = p;
                p += (size_t)B * X->w;
            } else {
                X->out = m->top_in;
            }
            X->xv = p, p += (size_t)B * X->r;
            X->h = p, p += (size_t)B * X->w;
        }
        if (m->cfg.ncross) {
            const size_t w = (size_t)m->cross[0].w;
            m->cross_dy = p, p += (size_t)B * w;
            m->cross_dh = p, p += (size_t)B * w;
            m->cross_dv = p, p += (size_t)B * (size_t)m->cfg.cross_rank;
        }
        TR_ASSERT((size_t)(p - (float *)act) == z.act_floats);
        char *q = (char *)(((uintptr_t)p + 7) & ~(uintptr_t)7);
        m->emb_sumsq = z.sumsq_n ? (double *)q : NULL;
        q += (size_t)z.sumsq_n * sizeof(double);
        m->emb_ws = q;
        q += m->emb_ws_bytes;
        m->dx_bad = (int32_t *)(((uintptr_t)q + 63) & ~(uintptr_t)63);
        TR_ASSERT((char *)(m->dx_bad + 1) <= act + m->act_bytes);
        if (z.mask_bytes) { /* after dx_bad's 64 bytes, each layer's 64-byte aligned */
            uint8_t *mk = (uint8_t *)(((uintptr_t)m->dx_bad + 64 + 63) & ~(uintptr_t)63);
            for (int l = 0; l < m->cfg.nbottom; l++) {
                m->bottom[l].mask = mk;
                mk += TR_CEIL_DIV(R * kern_relu_mask_ld(m->bottom[l].out), 64) * 64;
            }
            for (int l = 0; l + 1 < cfg->ntop; l++) {
                m->top[l].mask = mk;
                mk += TR_CEIL_DIV(B * kern_relu_mask_ld(m->top[l].out), 64) * 64;
            }
            TR_ASSERT((char *)mk <= act + m->act_bytes);
        }
    }
    /* every op's working memory now, so that no step allocates */
    ops_ws(cfg, &z, be, &m->ops_ws);
    TR_CHECK_GOTO(be->i->reserve(be->ctx, &m->ops_ws), rc, fail);
    TR_CHECK_GOTO(dlrm_init_params(m), rc, fail);
    tr_free(slots);
    *out = m;
    return TR_OK;
fail:
    tr_free(slots);
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
            if (m->tables[t].tiered) /* the tier's caches */
                continue;
            be->i->mem_release(be->ctx, m->tables[t].w, m->tables[t].bytes);
            be->i->mem_release(be->ctx, m->tables[t].accum, m->tables[t].accum_bytes);
        }
    }
    tier_free(&m->tier);
    be->i->mem_release(be->ctx, m->params, m->dense_bytes);
    be->i->mem_release(be->ctx, m->x, m->act_bytes);
    tr_free(m->tables);
    tr_free(m->rows);
    tr_free(m->hot);
    tr_free(m->mean);
    tr_free(m);
    *pm = NULL;
}

static enum tr_status gemm(struct dlrm *m, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                           int64_t lda, const float *Bm, int64_t ldb, float beta, float *C, int64_t ldc)
{
    struct kern_gemm_args g = {ta, tb, M, N, K, 1.0f, beta, A, lda, Bm, ldb, C, ldc, NULL, KERN_ACT_NONE, NULL, NULL};
    return m->be.i->gemm(m->be.ctx, &g);
}

/* y = act(x W + b) for one layer: one GEMM with the bias and activation as its
 * epilogue (fused on CUDA). */
static enum tr_status layer_fwd(struct dlrm *m, struct dlrm_layer *L, int64_t B, const float *x, int64_t ldx)
{
    struct kern_gemm_args g = {0, 0, B, L->out, L->in, 1.0f, 0.0f, x, ldx, L->w, L->out, L->y, L->ldy, L->b,
                               L->relu ? KERN_ACT_RELU : KERN_ACT_NONE, NULL, L->relu ? L->mask : NULL};
    return m->be.i->gemm(m->be.ctx, &g);
}

float dlrm_grad_unscale(const struct dlrm *m)
{
    return m->cfg.loss_scale > 0.0f ? 1.0f / m->cfg.loss_scale : 1.0f;
}

/* The backward epilogue of layer L for B rows of dy: dy = act'(y) dy in place, db =
 * its column sums. */
static struct kern_bias_act_bwd_args layer_epilogue(const struct dlrm_layer *L, int64_t B, float *dy, int64_t lddy)
{
    return (struct kern_bias_act_bwd_args){B, L->out, L->y, L->ldy, dy, lddy, L->db, 0,
                                           L->relu ? KERN_ACT_RELU : KERN_ACT_NONE, L->relu ? L->mask : NULL};
}

/* Given dy (B, out) of the layer output (modified in place into dz), fills dw, db
 * and, if dx is non-NULL, dx (B, in) = dz W^T. done says dy went through this
 * layer's epilogue already (the layer above made it with its dx). When prev is not
 * NULL (the layer below, whose output is x), dx comes out of the GEMM through
 * prev's epilogue: dx is then prev's dz, and prev's db is written. */
static enum tr_status layer_bwd(struct dlrm *m, struct dlrm_layer *L, int64_t B, const float *x, int64_t ldx,
                                float *dy, int64_t lddy, float *dx, int64_t lddx, int done,
                                const struct dlrm_layer *prev)
{
    if (!done) {
        struct kern_bias_act_bwd_args a = layer_epilogue(L, B, dy, lddy);
        TR_CHECK(m->be.i->bias_act_bwd(m->be.ctx, &a));
    }
    /* the weight gradient first: with prev's mask, dx is written over x (grad_below) */
    TR_CHECK(gemm(m, 1, 0, L->in, L->out, B, x, ldx, dy, lddy, 0.0f, L->dw, L->out));
    if (!dx)
        return TR_OK;
    if (!prev)
        return gemm(m, 0, 1, B, L->in, L->out, dy, lddy, L->w, L->out, 0.0f, dx, lddx);
    struct kern_bias_act_bwd_args e = layer_epilogue(prev, B, dx, lddx);
    struct kern_gemm_args g = {0, 1, B, L->in, L->out, 1.0f, 0.0f, dy, lddy, L->w, L->out, dx, lddx, NULL,
                               KERN_ACT_NONE, &e, NULL};
    return m->be.i->gemm(m->be.ctx, &g);
}

/* Where layer L's input gradient goes when it comes out through the epilogue of
 * prev, the layer below: with prev's ReLU mask, over prev's output y, which the
 * backward does not read again once L's weight gradient (the GEMM before, in
 * layer_bwd) has read it, and whose lines that GEMM left in the cache; without
 * one, into buf. */
static float *grad_below(const struct dlrm_layer *prev, float *buf, int64_t *ld)
{
    if (prev->mask) {
        *ld = prev->ldy;
        return prev->y;
    }
    TR_ASSERT(buf);
    *ld = prev->out;
    return buf;
}

enum tr_status dlrm_bottom_forward(struct dlrm *m, const float *num, int64_t ldnum, int64_t n, float *out,
                                   int64_t ldout)
{
    const int nb = m->cfg.nbottom;
    if (nb == 0)
        return TR_OK;
    m->bottom[nb - 1].y = out;
    m->bottom[nb - 1].ldy = ldout;
    double t0 = dlrm_clock(m);
    for (int l = 0; l < nb; l++) {
        const float *in = l ? m->bottom[l - 1].y : num;
        int64_t ldin = l ? m->bottom[l - 1].ldy : ldnum;
        TR_CHECK(layer_fwd(m, &m->bottom[l], n, in, ldin));
    }
    m->t[DLRM_T_BOTTOM_FWD] += dlrm_clock(m) - t0;
    return TR_OK;
}

enum tr_status dlrm_bottom_backward(struct dlrm *m, const float *num, int64_t ldnum, int64_t n, float *dout,
                                    int64_t lddout)
{
    double t0 = dlrm_clock(m);
    float *dy = dout;
    int64_t lddy = lddout;
    for (int l = m->cfg.nbottom - 1; l >= 0; l--) {
        struct dlrm_layer *L = &m->bottom[l];
        const float *in = l ? m->bottom[l - 1].y : num;
        int64_t ldin = l ? m->bottom[l - 1].ldy : ldnum;
        int64_t lddx = 0;
        float *dx = l ? grad_below(&m->bottom[l - 1], m->dbuf[l & 1], &lddx) : NULL;
        /* below the last layer, the input gradient comes out through the next layer's epilogue */
        TR_CHECK(layer_bwd(m, L, n, in, ldin, dy, lddy, dx, lddx, l + 1 < m->cfg.nbottom,
                           l ? &m->bottom[l - 1] : NULL));
        dy = dx;
        lddy = lddx;
    }
    m->t[DLRM_T_BOTTOM_BWD] += dlrm_clock(m) - t0;
    return TR_OK;
}

/* The dcnv2 interaction over n samples: x_{l+1} = x0 * (x_l V U + b) + x_l for
 * every cross layer, x0 = m->x flattened (n, w), the last output into m->top_in. */
static enum tr_status cross_forward(struct dlrm *m, int64_t n)
{
    const struct kern_backend *be = &m->be;
    for (int l = 0; l < m->cfg.ncross; l++) {
        struct dlrm_cross *X = &m->cross[l];
        TR_CHECK(gemm(m, 0, 0, n, X->r, X->w, X->in, X->w, X->v, X->r, 0.0f, X->xv, X->r));
        TR_CHECK(gemm(m, 0, 0, n, X->w, X->r, X->xv, X->r, X->u, X->w, 0.0f, X->h, X->w));
        struct kern_bias_act_fwd_args ba = {n, X->w, X->h, X->w, X->b, KERN_ACT_NONE, NULL};
        TR_CHECK(be->i->bias_act_fwd(be->ctx, &ba));
        struct kern_cross_fwd_args ca = {n, X->w, m->x, X->w, X->h, X->w, X->in, X->w, X->out, X->w};
        TR_CHECK(be->i->cross_fwd(be->ctx, &ca));
    }
    return TR_OK;
}

/* Backward of cross_forward from m->dtop_in (left as it is) into m->dx and the
 * cross layers' gradients. Per layer, from dy = dLoss/dx_{l+1}: dh = dy * x0,
 * dx0 += dy * h (the cross_bwd op), db = column sums of dh, dU = (x_l V)^T dh,
 * d(x_l V) = dh U^T, dV = x_l^T d(x_l V), and dLoss/dx_l = dy + d(x_l V) V^T
 * (in place over dy); for layer 0, x_l is x0 and that last term goes to m->dx. */
static enum tr_status cross_backward(struct dlrm *m, int64_t n)
{
    const struct kern_backend *be = &m->be;
    const int L = m->cfg.ncross;
    const int64_t w = m->cross[0].w;
    float *dy = m->cross_dy;
    struct kern_copy_rows_args cp = {dy, w, m->dtop_in, m->top_in_w, n, w};
    TR_CHECK(be->i->copy_rows(be->ctx, &cp, 1));
    for (int l = L - 1; l >= 0; l--) {
        struct dlrm_cross *X = &m->cross[l];
        const int64_t r = X->r;
        struct kern_cross_bwd_args cb = {n,  w, m->x, w, X->h, w, dy, w, m->cross_dh, w, m->dx, w,
                                         l < L - 1, l == 0};
        TR_CHECK(be->i->cross_bwd(be->ctx, &cb));
        struct kern_bias_act_bwd_args bb = {n, w, m->cross_dh, w, m->cross_dh, w, X->db, 0, KERN_ACT_NONE, NULL};
        TR_CHECK(be->i->bias_act_bwd(be->ctx, &bb));
        TR_CHECK(gemm(m, 1, 0, r, w, n, X->xv, r, m->cross_dh, w, 0.0f, X->du, w));
        TR_CHECK(gemm(m, 0, 1, n, r, w, m->cross_dh, w, X->u, w, 0.0f, m->cross_dv, r));
        TR_CHECK(gemm(m, 1, 0, w, r, n, X->in, w, m->cross_dv, r, 0.0f, X->dv, r));
        TR_CHECK(gemm(m, 0, 1, n, w, r, m->cross_dv, r, X->v, r, 1.0f, l ? dy : m->dx, w));
    }
    return TR_OK;
}

enum tr_status dlrm_forward_bottom_dp(struct dlrm *m, const float *num, int64_t ldnum, int64_t n)
{
    if (n < 0 || n > m->cfg.max_batch)
        return TR_ERR_ARG;
    if (!m->dp_bottom)
        return TR_OK;
    return dlrm_bottom_forward(m, num, ldnum, n, m->x, (int64_t)m->n * m->cfg.emb_dim);
}

enum tr_status dlrm_forward_top(struct dlrm *m, int64_t n)
{
    const int64_t D = m->cfg.emb_dim;
    if (n < 0 || n > m->cfg.max_batch)
        return TR_ERR_ARG;
    double t2 = dlrm_clock(m);
    if (m->cfg.ncross) {
        TR_CHECK(cross_forward(m, n));
    } else {
        struct kern_interact_fwd_args ia = {n, m->n, (int)D, m->has_bottom, m->x, m->top_in, m->top_in_w};
        TR_CHECK(m->be.i->interact_fwd(m->be.ctx, &ia));
    }
    double t3 = dlrm_clock(m);
    m->t[DLRM_T_INTERACT_FWD] += t3 - t2;
    for (int l = 0; l < m->cfg.ntop; l++) {
        const float *in = l ? m->top[l - 1].y : m->top_in;
        int64_t ldin = l ? m->top[l - 1].ldy : m->top_in_w;
        TR_CHECK(layer_fwd(m, &m->top[l], n, in, ldin));
    }
    m->t[DLRM_T_TOP_FWD] += dlrm_clock(m) - t3;
    return TR_OK;
}

enum tr_status dlrm_forward_dense(struct dlrm *m, const float *num, int64_t ldnum, int64_t n)
{
    TR_CHECK(dlrm_forward_bottom_dp(m, num, ldnum, n));
    return dlrm_forward_top(m, n);
}

float *dlrm_logits(const struct dlrm *m)
{
    return m->top[m->cfg.ntop - 1].y;
}

enum tr_status dlrm_loss_dense(struct dlrm *m, const float *labels, int64_t n, float grad_scale, double *loss_sum)
{
    double t0 = dlrm_clock(m), sum = 0.0;
    if (m->cfg.loss_scale > 0.0f)
        grad_scale *= m->cfg.loss_scale; /* undone by dlrm_grad_unscale in every update */
    struct kern_bce_args a = {n, dlrm_logits(m), labels, &sum, m->dlogits, grad_scale};
    TR_CHECK(m->be.i->bce(m->be.ctx, &a));
    *loss_sum = sum;
    m->t[DLRM_T_LOSS] += dlrm_clock(m) - t0;
    return TR_OK;
}

enum tr_status dlrm_backward_top(struct dlrm *m, int64_t n)
{
    double t0 = dlrm_clock(m);
    /* top MLP: dy of the last layer is dlogits; over the activations, or ping-pong
     * through dbuf */
    float *dy = m->dlogits;
    int64_t lddy = 1;
    for (int l = m->cfg.ntop - 1; l >= 0; l--) {
        struct dlrm_layer *L = &m->top[l];
        const float *in = l ? m->top[l - 1].y : m->top_in;
        int64_t ldin = l ? m->top[l - 1].ldy : m->top_in_w;
        int64_t lddx = m->top_in_w;
        float *dx = l ? grad_below(&m->top[l - 1], m->dbuf[l & 1], &lddx) : m->dtop_in;
        TR_CHECK(layer_bwd(m, L, n, in, ldin, dy, lddy, dx, lddx, l + 1 < m->cfg.ntop, l ? &m->top[l - 1] : NULL));
        dy = dx;
        lddy = lddx;
    }
    m->t[DLRM_T_TOP_BWD] += dlrm_clock(m) - t0;
    return TR_OK;
}

enum tr_status dlrm_backward_interact(struct dlrm *m, int64_t n)
{
    const int64_t D = m->cfg.emb_dim;
    double t1 = dlrm_clock(m);
    if (m->cfg.ncross) {
        TR_CHECK(cross_backward(m, n));
    } else {
        struct kern_interact_bwd_args ia = {n,       m->n,        (int)D, m->has_bottom, m->x,
                                            m->dtop_in, m->top_in_w, m->dx,  m->dx_bad};
        TR_CHECK(m->be.i->interact_bwd(m->be.ctx, &ia));
    }
    m->t[DLRM_T_INTERACT_BWD] += dlrm_clock(m) - t1;
    return TR_OK;
}

enum tr_status dlrm_dx_nonfinite(struct dlrm *m, int64_t n, int *bad)
{
    if (!m->cfg.ncross) {
        int32_t flag = 0;
        TR_CHECK(m->be.i->copy(m->be.ctx, &flag, m->dx_bad, sizeof flag, KERN_D2H));
        TR_CHECK(m->be.i->synchronize(m->be.ctx));
        *bad = flag != 0;
        return TR_OK;
    }
    const int64_t w = (int64_t)m->n * m->cfg.emb_dim;
    double sq = 0.0;
    struct kern_sumsq_args a = {.x = m->dx, .rows = n, .cols = w, .ld = w, .out = &sq};
    TR_CHECK(m->be.i->sumsq(m->be.ctx, &a, 1));
    *bad = !isfinite(sq);
    return TR_OK;
}

enum tr_status dlrm_backward_bottom_dp(struct dlrm *m, const float *num, int64_t ldnum, int64_t n)
{
    /* the bottom output's gradient is row 0 of dx */
    if (!m->dp_bottom)
        return TR_OK;
    return dlrm_bottom_backward(m, num, ldnum, n, m->dx, (int64_t)m->n * m->cfg.emb_dim);
}

enum tr_status dlrm_backward_dense(struct dlrm *m, const float *num, int64_t ldnum, int64_t n)
{
    TR_CHECK(dlrm_backward_top(m, n));
    TR_CHECK(dlrm_backward_interact(m, n));
    return dlrm_backward_bottom_dp(m, num, ldnum, n);
}

int64_t dlrm_top_mlp_param0(const struct dlrm *m)
{
    return m->cfg.ntop > 0 ? (int64_t)(m->top[0].w - m->params) : m->nparams;
}

enum tr_status dlrm_update_dense_range(struct dlrm *m, float lr, int64_t p0, int64_t p1)
{
    if (p0 < 0 || p1 > m->nparams || p0 > p1)
        return TR_ERR_ARG;
    double t0 = dlrm_clock(m);
    struct kern_dense_update_args a = {p1 - p0, m->params + p0, m->grads + p0, m->accum ? m->accum + p0 : NULL,
                                       dlrm_grad_unscale(m), {m->cfg.optim, lr, m->cfg.adagrad_eps}};
    TR_CHECK(m->be.i->dense_update(m->be.ctx, &a));
    m->t[DLRM_T_DENSE_UPDATE] += dlrm_clock(m) - t0;
    return TR_OK;
}

void dlrm_get_bytes(const struct dlrm *m, struct dlrm_bytes *b)
{
    memset(b, 0, sizeof *b);
    b->dense = (int64_t)m->dense_bytes;
    b->dense_state = m->accum ? (int64_t)(m->dense_bytes / 3) : 0;
    b->dense_params = m->nparams;
    for (int t = 0; t < m->cfg.ntables; t++) {
        const int64_t state = m->tables[t].accum ? (int64_t)m->tables[t].accum_bytes : 0;
        b->embeddings += (int64_t)m->tables[t].bytes + state;
        b->emb_state += state;
    }
    b->activations = (int64_t)m->act_bytes;
    b->workspace = (int64_t)m->emb_ws_bytes + m->emb_sumsq_n * (int64_t)sizeof(double);
    b->ops = m->ops_ws;
    for (int t = 0; t < m->cfg.ntables; t++)
        b->tables_tiered += m->tables[t].tiered;
    b->tier_cache = m->tier_bytes.cache;
    b->tier_host = m->tier_bytes.host;
    b->tier_backend = m->tier_bytes.backend;
    b->tier_disk = m->tier_bytes.disk;
}

void dlrm_reset_timers(struct dlrm *m)
{
    memset(m->t, 0, sizeof m->t);
}

double dlrm_phase_seconds(const struct dlrm *m, enum dlrm_phase p)
{
    return (int)p >= 0 && p < DLRM_T_COUNT_ ? m->t[p] : 0.0;
}
