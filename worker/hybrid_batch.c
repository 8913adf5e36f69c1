/* hybrid_batch.c: the batch the step trains on: rank 0's block broadcast into the
 * step's block and checked (layout, bag table), the next batch shared ahead for a
 * tier (hybrid_share_next, hybrid_advance), the ids the embedding ops read (the
 * block's, or the tier's slots), and the messages naming a bad id. It runs no
 * step. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "hybrid_internal.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"

int64_t hybrid_batch_bytes(const struct hybrid *h)
{
    return h->want.bytes;
}

/* TR_ERR_FORMAT (logged) unless b (with its bag table g) has the step's layout. */
static enum tr_status check_layout(const struct hybrid *h, const struct batch *b, const struct batch_bag *g,
                                   const char *which)
{
    const struct batch *w = &h->want;
    int same = b && b->bytes == w->bytes && b->cap == w->cap && b->num_features == w->num_features &&
               b->ntables == w->ntables && b->off_bags == w->off_bags && b->off_cat == w->off_cat;
    for (int t = 0; same && h->want_bags && t < w->ntables; t++)
        same = g[t].hot == h->want_bags[t].hot && g[t].ids == h->want_bags[t].ids &&
               g[t].offsets == h->want_bags[t].offsets;
    if (same)
        return TR_OK;
    LOG_ERROR("step: %s holds %lld samples of %d numerical and %d categorical features%s; the step expects %lld, %d "
              "and %d%s",
              which, b ? (long long)b->cap : -1LL, b ? b->num_features : -1, b ? b->ntables : -1,
              b && b->off_bags ? " (multi-hot)" : "", (long long)w->cap, w->num_features, w->ntables,
              w->off_bags ? " (multi-hot)" : "");
    if (b && b->off_bags != w->off_bags)
        LOG_HINT("the data's tables and the model's must have the same hotness");
    return TR_ERR_FORMAT;
}

/* Logs an id outside its table: the step's own words for it, whoever found it. */
static void log_bad_id(const struct hybrid *h, int t, int64_t sample, int64_t id)
{
    LOG_ERROR("table %d: categorical id %lld of sample %lld (batch %lld) is outside [0, %lld)", t, (long long)id,
              (long long)sample, (long long)h->hdr.index, (long long)h->m->tables[t].rows);
    LOG_HINT("the dataset's ids must be below the table cardinalities given to the model");
}

/* Broadcasts rank 0's batch into block `into` and checks it; *hdr (host) its header. */
static enum tr_status share_into(struct hybrid *h, struct batch *into, const struct batch *host, struct batch *hdr)
{
    const struct kern_backend *be = &h->m->be;
    if (h->c->rank == 0) {
        TR_CHECK(check_layout(h, host, host ? batch_bags(host) : NULL, "the batch to share"));
        TR_CHECK(be->i->copy(be->ctx, into, host, (size_t)host->bytes, KERN_H2D));
    }
    TR_CHECK(comm_bcast(h->c, into, h->want.bytes, 0));
    TR_CHECK(be->i->copy(be->ctx, hdr, into, sizeof *hdr, KERN_D2H));
    /* the id counts of this batch (multi-hot: never with a tier, so never ahead) */
    TR_ASSERT(into == h->blk || !h->want_bags);
    if (h->want_bags && hdr->off_bags == h->want.off_bags)
        TR_CHECK(be->i->copy(be->ctx, h->bags, (const char *)into + h->want.off_bags,
                             (size_t)h->want.ntables * sizeof *h->bags, KERN_D2H));
    TR_CHECK(batch_check_parts(hdr, hdr->off_bags == h->want.off_bags ? h->bags : NULL, h->want.bytes, "step"));
    return check_layout(h, hdr, h->bags, "the shared batch block");
}

/* The tier's view of block b (header hdr): its ids on the host (k: which copy). */
static enum tr_status tier_view(struct hybrid *h, const struct batch *b, const struct batch *hdr, int k,
                                uint64_t key, struct tier_batch *tb)
{
    const struct kern_backend *be = &h->m->be;
    const int T = h->p->ntables;
    const int32_t *cat = (const int32_t *)((const char *)b + hdr->off_cat);
    if (h->ids_host[k]) { /* the backend's memory is its own: a copy */
        TR_CHECK(be->i->copy(be->ctx, h->ids_host[k], cat, (size_t)(hdr->cap * T) * sizeof(int32_t), KERN_D2H));
        cat = h->ids_host[k];
    }
    for (int t = 0; t < T; t++)
        h->ids[t] = cat + (int64_t)t * hdr->cap;
    *tb = (struct tier_batch){.ids = h->ids, .n = hdr->n, .key = key, .train = hdr->split == BATCH_TRAIN};
    return TR_OK;
}

/* The ids the step reads for the batch now in h->blk: the block's, and for the
 * tables in the tier their slots, every row resident (tier_begin). */
static enum tr_status set_ids(struct hybrid *h)
{
    for (int t = 0; t < h->p->ntables; t++)
        h->idx[t] = blk_cat(h, t);
    if (!h->tier)
        return TR_OK;
    const double t0 = dlrm_clock(h->m);
    struct tier_batch tb;
    TR_CHECK(tier_view(h, h->blk, &h->hdr, 0, h->key, &tb));
    struct tier_bad bad;
    enum tr_status rc = tier_begin(h->tier, &tb, h->idx, &bad);
    if (rc == TR_ERR_RANGE)
        log_bad_id(h, bad.table, bad.pos, bad.id);
    hybrid_timer_add(h, HYBRID_T_TIER, dlrm_clock(h->m) - t0);
    return rc;
}

enum tr_status hybrid_share_batch(struct hybrid *h, const struct batch *host, struct batch *hdr)
{
    h->has_next = 0;
    const double t0 = dlrm_clock(h->m);
    TR_CHECK(share_into(h, h->blk, host, &h->hdr));
    hybrid_timer_add(h, HYBRID_T_BATCH, dlrm_clock(h->m) - t0);
    h->key = ++h->seq;
    TR_CHECK(set_ids(h));
    if (hdr)
        *hdr = h->hdr;
    return TR_OK;
}

int hybrid_shares_ahead(const struct hybrid *h)
{
    return h->tier != NULL;
}

enum tr_status hybrid_share_next(struct hybrid *h, const struct batch *host, struct batch *hdr)
{
    if (!h->tier)
        return TR_ERR_ARG;
    double t0 = dlrm_clock(h->m);
    TR_CHECK(share_into(h, h->blk_next, host, &h->hdr_next));
    hybrid_timer_add(h, HYBRID_T_BATCH, dlrm_clock(h->m) - t0);
    h->key_next = ++h->seq;
    h->has_next = 1;
    if (hdr)
        *hdr = h->hdr_next;
    t0 = dlrm_clock(h->m);
    struct tier_batch tb;
    TR_CHECK(tier_view(h, h->blk_next, &h->hdr_next, 1, h->key_next, &tb));
    TR_CHECK(tier_prefetch(h->tier, &tb));
    hybrid_timer_add(h, HYBRID_T_TIER, dlrm_clock(h->m) - t0);
    return TR_OK;
}

enum tr_status hybrid_advance(struct hybrid *h, struct batch *hdr)
{
    if (!h->has_next)
        return TR_ERR_ARG;
    struct batch *b = h->blk;
    h->blk = h->blk_next;
    h->blk_next = b;
    h->hdr = h->hdr_next;
    h->key = h->key_next;
    h->has_next = 0;
    int32_t *ih = h->ids_host[0];
    h->ids_host[0] = h->ids_host[1];
    h->ids_host[1] = ih;
    TR_CHECK(set_ids(h));
    if (hdr)
        *hdr = h->hdr;
    return TR_OK;
}

void hybrid_drop_next(struct hybrid *h)
{
    h->has_next = 0;
}

/* Logs the first out-of-range id the last gathers recorded (a multi-hot table's
 * gather reports the position of the id in the table's ids, or the bag whose
 * offsets decrease). */
enum tr_status hybrid_report_bad_id(const struct hybrid *h, int nargs)
{
    const struct kern_backend *be = &h->m->be;
    for (int k = 0; k < nargs; k++) {
        if (h->bad_pos[k] < 0)
            continue;
        const int t = h->fwd_table[k];
        const int64_t *off = blk_offsets(h, t);
        int64_t sample = h->fwd_first[k] + h->bad_pos[k], pos = sample;
        if (off) { /* the bag holding position bad_pos */
            const int64_t n = h->hdr.n;
            int64_t *ho = tr_malloc((size_t)(n + 1) * sizeof *ho);
            if (!ho)
                return TR_ERR_NOMEM;
            enum tr_status rc = be->i->copy(be->ctx, ho, off, (size_t)(n + 1) * sizeof *ho, KERN_D2H);
            pos = h->bad_pos[k];
            sample = -1;
            for (int64_t i = 0; rc == TR_OK && i < n && sample < 0; i++)
                if (ho[i + 1] < ho[i])
                    sample = -2 - i; /* decreasing offsets at bag i */
                else if (pos >= ho[i] && pos < ho[i + 1])
                    sample = i;
            tr_free(ho);
            TR_CHECK(rc);
            if (sample <= -2) {
                LOG_ERROR("table %d: the offsets of batch %lld decrease at sample %lld", t, (long long)h->hdr.index,
                          (long long)(-2 - sample));
                LOG_HINT("a sample's ids are offsets[i] .. offsets[i + 1]: check the data source");
                break;
            }
        }
        int32_t id = 0;
        TR_CHECK(be->i->copy(be->ctx, &id, blk_cat(h, t) + pos, sizeof id, KERN_D2H));
        log_bad_id(h, t, sample, id);
        break;
    }
    return TR_OK;
}

/* Counts and displacements of the forward all-to-all (nothing to or from itself). */
