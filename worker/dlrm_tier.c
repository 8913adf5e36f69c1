/* dlrm_tier.c: the model's tables in a tier (tier.h): which tables a cache would
 * not hold whole and how many rows each cache gets (one answer for dlrm_new and
 * the memory plan), and the tier those tables live in. The step reads them
 * through the tier (hybrid.c), the tensor accessors go through it
 * (dlrm_tensors.c); nothing here runs a step. */
#define TR_SUBSYS TR_SUB_MODEL
#include "dlrm_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"

int64_t dlrm_state_width(enum kern_optim o, int64_t width)
{
    switch (o) {
    case KERN_OPT_ADAGRAD: return width;
    case KERN_OPT_ROWWISE_ADAGRAD: return width ? 1 : 0;
    case KERN_OPT_SGD: break;
    }
    return 0;
}

/* The ids of one table one batch holds at most (one-hot: a sample each). */
static int64_t max_ids(const struct dlrm_cfg *c)
{
    return TR_MAX(c->max_global > 0 ? c->max_global : c->max_batch, c->max_batch);
}

enum tr_status dlrm_tier_slots(const struct dlrm_cfg *c, int64_t *slots)
{
    const int T = c->ntables;
    for (int t = 0; t < T; t++)
        slots[t] = c->rows[t];
    if (c->tier.store == JOB_STORE_MEMORY || T == 0)
        return TR_OK;
    for (int t = 0; c->hot && t < T; t++)
        if (c->hot[t] > 0) { /* the tier maps a sample's one id a table (tier.h) */
            LOG_ERROR("--table_store %s: table %d is multi-hot (bags of up to %d ids); a table store takes one-hot "
                      "tables only",
                      job_store_name(c->tier.store), t, (int)c->hot[t]);
            LOG_HINT("--table_store memory for a model with multi-hot features");
            return TR_ERR_UNSUPPORTED;
        }
    int64_t *bpr = tr_calloc((size_t)T, sizeof *bpr);
    if (!bpr)
        return TR_ERR_NOMEM;
    const struct shard_plan *p = c->plan;
    for (int t = 0; t < T; t++) {
        /* column-wise, every worker sizes by the first worker's slice (the widest), so
         * that all give a table the same slots and its rows the same slot numbers */
        int64_t w = c->emb_dim;
        if (p && p->world > 1)
            w = p->mode == SHARD_COLUMNWISE ? p->col1[0] - p->col0[0] : p->owner[t] == p->rank ? c->emb_dim : 0;
        bpr[t] = w ? (w + dlrm_state_width(c->optim, w)) * (int64_t)sizeof(float) : 0;
    }
    const enum tr_status rc = tier_plan_slots(&c->tier, T, c->rows, bpr, max_ids(c), slots);
    tr_free(bpr);
    return rc;
}

int dlrm_tier_tables(const struct dlrm_cfg *c, const int64_t *slots, struct tier_table *d)
{
    int n = 0;
    for (int t = 0; t < c->ntables; t++) {
        int64_t col0, width;
        dlrm_table_part(c, t, &col0, &width);
        if (width == 0 || slots[t] >= c->rows[t])
            continue;
        d[n++] = (struct tier_table){.table = t, .rows = c->rows[t], .width = width,
                                     .state_width = dlrm_state_width(c->optim, width), .slots = slots[t],
                                     .col0 = col0, .dim = c->emb_dim, .bound = sqrtf(1.0f / (float)c->rows[t]),
                                     .state_init = c->adagrad_init};
    }
    return n;
}

static void tier_cfg_of(const struct dlrm_cfg *c, struct tier_cfg *tc)
{
    *tc = (struct tier_cfg){.store = c->tier.store, .dir = c->tier.dir, .tag = c->store_tag, .seed = c->seed,
                            .max_ids = max_ids(c), .io_threads = c->tier.io_threads > 0 ? c->tier.io_threads : 2};
}

enum tr_status dlrm_tier_plan_bytes(const struct dlrm_cfg *c, const int64_t *slots, int host_memory,
                                    struct tier_bytes *out)
{
    memset(out, 0, sizeof *out);
    struct tier_table *d = tr_calloc((size_t)(c->ntables ? c->ntables : 1), sizeof *d);
    if (!d)
        return TR_ERR_NOMEM;
    const int n = dlrm_tier_tables(c, slots, d);
    struct tier_cfg tc;
    tier_cfg_of(c, &tc);
    if (n)
        tier_plan_bytes(&tc, d, n, host_memory, out);
    tr_free(d);
    return TR_OK;
}

enum tr_status dlrm_tier_open(struct dlrm *m, const struct dlrm_cfg *cfg, const int64_t *slots)
{
    const int T = m->cfg.ntables;
    struct tier_table *d = tr_calloc((size_t)(T ? T : 1), sizeof *d);
    if (!d)
        return TR_ERR_NOMEM;
    const int n = dlrm_tier_tables(cfg, slots, d);
    enum tr_status rc = TR_OK;
    if (n > 0) {
        struct tier_cfg tc;
        tier_cfg_of(cfg, &tc);
        tier_plan_bytes(&tc, d, n, m->be.i->host_memory, &m->tier_bytes);
        rc = tier_new(&tc, d, n, &m->be, &m->tier);
    }
    for (int i = 0; i < n && rc == TR_OK; i++) {
        struct dlrm_table *tb = &m->tables[d[i].table];
        TR_ASSERT(tb->width == d[i].width && !tb->w); /* dlrm_new allocated nothing for it */
        tier_cache(m->tier, i, &tb->w, &tb->accum, &tb->slots);
        tb->tiered = 1;
        tb->bytes = (size_t)(tb->slots * tb->width) * sizeof(float);
        tb->accum_bytes = (size_t)(tb->slots * d[i].state_width) * sizeof(float);
    }
    if (rc == TR_OK && n > 0) {
        int64_t rows = 0, cached = 0;
        for (int i = 0; i < n; i++)
            rows += d[i].rows, cached += d[i].slots;
        LOG_RANK0("table store %s%s%s: %d of %d tables in a row cache of %lld of their %lld rows on rank 0 (%.1f MiB "
                  "of cache; %.1f MiB of host memory%s%.1f MiB of files)",
                  job_store_name(cfg->tier.store), cfg->tier.dir ? ":" : "", cfg->tier.dir ? cfg->tier.dir : "", n,
                  cfg->ntables, (long long)cached, (long long)rows, m->tier_bytes.cache / 1048576.0,
                  m->tier_bytes.host / 1048576.0, cfg->tier.store == JOB_STORE_HOST ? " with the rows; " : ", ",
                  m->tier_bytes.disk / 1048576.0);
    }
    tr_free(d);
    return rc;
}

void dlrm_tier_stats(const struct dlrm *m, struct tier_stats *out)
{
    if (m->tier)
        tier_get_stats(m->tier, out);
    else
        memset(out, 0, sizeof *out);
}
