/* hybrid_internal.h: the step's state (struct hybrid) and the batch block's
 * accessors, shared by worker/hybrid.c (the step) and worker/hybrid_batch.c (the
 * batch it trains on: sharing, the next one shared ahead, the tier's ids). Nothing
 * outside worker/hybrid*.c includes it. */
#ifndef TR_WORKER_HYBRID_INTERNAL_H
#define TR_WORKER_HYBRID_INTERNAL_H

#include "hybrid.h"

#include "dlrm_internal.h"

struct hybrid {
    struct dlrm *m;             /* borrowed */
    struct comm *c;             /* borrowed */
    const struct shard_plan *p; /* borrowed */
    int64_t max_global;
    struct batch *blk;          /* the shared batch block (backend memory), want.bytes long */
    struct batch want;          /* host: the layout every shared block must have */
    struct batch_bag *want_bags; /* host: (ntables) its bag table, when a table is multi-hot */
    struct batch hdr;           /* host: header of the shared batch */
    const int32_t **idx;        /* host: (ntables) the ids the embedding ops read: the block's,
                                   or for a table in the tier its slot numbers (tier_begin) */
    /* with a tier (the model's): the next batch, shared ahead (hybrid_share_next) */
    struct tier *tier;          /* borrowed from the model, or NULL */
    struct batch *blk_next;     /* (backend memory) want.bytes */
    struct batch hdr_next;
    int has_next;
    uint64_t seq, key, key_next; /* every shared batch's number: the tier's key */
    int32_t *ids_host[2];       /* host: the categorical ids of blk and blk_next, on a backend
                                   whose memory is its own (copies), else NULL */
    const int32_t **ids;        /* host: (ntables) pointers into a block's ids, for the tier */
    struct batch_bag *bags;     /* host: (ntables) its bag table (the id counts), or NULL */
    float *sbuf;                /* (max_global, ws): this rank's vectors, the other ranks' samples */
    float *rbuf;                /* (max slice, sum of the other ranks' widths): what they sent */
    float *bot;                 /* (max_global, D): model-parallel bottom output (rank 0), or NULL */
    float *glogits;             /* (max_global): the batch's logits gathered on rank 0 */
    double *dloss;              /* (1): the loss sum being all-reduced */
    struct hybrid_guard guard;  /* host: numeric guards of the last backward */
    size_t sbuf_bytes, rbuf_bytes, bot_bytes, glogits_bytes;
    int64_t *cnt;               /* host: (6 * world) counts and displacements: */
    int64_t *scnt, *sdsp, *rcnt, *rdsp, *gcnt, *gdsp;
    struct vec *vec;            /* host: (ntables + 1) scratch list of one rank's vectors */
    struct kern_emb_fwd_args *fwd;    /* host: (3 * ntables) gathers of one forward */
    int *fwd_table;             /* host: (3 * ntables) table of each gather */
    int64_t *fwd_first;         /* host: (3 * ntables) first sample of each gather */
    int64_t *bad_pos;           /* host: (3 * ntables) */
    struct kern_emb_update_args *upd; /* host: (ntables) */
    int64_t *bad_upd;           /* host: (ntables) bad_pos of the updates (unused: the
                                   forward checked the same ids) */
    struct kern_copy_rows_args *cp;   /* host: (cp_cap) row copies of one pass */
    int cp_cap;
    uint8_t **dirty;            /* (ntables) backend memory, (dirty_n[t]) bytes each, or NULL: */
    int64_t *dirty_n, *dirty_rows; /*   the touched row blocks of each table held (hybrid_track_dirty) */
    struct kern_mark_rows_args *mark; /* host: (ntables) */
    int overlap;                /* split the collectives around independent work */
    double t[HYBRID_T_COUNT_];
};

/* One vector a rank sends per sample: a table's slice or the bottom output. */
struct vec {
    int table;    /* -1: the model-parallel bottom output */
    int64_t xoff; /* where it sits in a row of X */
    int64_t width;
    int64_t soff; /* where it sits in the rank's send row */
};

/* Payload of the shared block, from the host copy of its header. */
static inline const float *blk_num(const struct hybrid *h)
{
    return (const float *)((const char *)h->blk + h->hdr.off_num);
}
static inline const float *blk_labels(const struct hybrid *h)
{
    return (const float *)((const char *)h->blk + h->hdr.off_labels);
}
/* Table t's ids: (cap) one-hot, (cap * hot) in bags. */
static inline const int32_t *blk_cat(const struct hybrid *h, int t)
{
    if (h->want_bags)
        return (const int32_t *)((const char *)h->blk + h->want_bags[t].ids);
    return (const int32_t *)((const char *)h->blk + h->hdr.off_cat) + (int64_t)t * h->hdr.cap;
}
/* Table t's offsets ((cap + 1) i64) when it is multi-hot, else NULL. */
static inline const int64_t *blk_offsets(const struct hybrid *h, int t)
{
    if (!h->want_bags || !h->want_bags[t].offsets)
        return NULL;
    return (const int64_t *)((const char *)h->blk + h->want_bags[t].offsets);
}
/* Ids table t holds in the shared batch. */
static inline int64_t blk_nids(const struct hybrid *h, int t)
{
    return h->want_bags && h->want_bags[t].offsets ? h->bags[t].nids : h->hdr.n;
}
static inline enum kern_combiner table_comb(const struct hybrid *h, int t)
{
    return h->m->mean[t] ? KERN_COMB_MEAN : KERN_COMB_SUM;
}

static inline void hybrid_timer_add(struct hybrid *h, int k, double s)
{
    h->t[k] += s;
}

/* Logs the first out-of-range id the last nargs gathers recorded (hybrid_batch.c).
 * TR_ERR_NOMEM, backend errors. */
enum tr_status hybrid_report_bad_id(const struct hybrid *h, int nargs);

#endif
