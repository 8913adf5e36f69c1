/* source.c: the source interface's in-process reader: batches cut from a dataset
 * (dataset.h) in order, or in the order of a per-epoch permutation of the
 * training samples or batches (permute.h), from --start_position, at a position
 * that can be saved and restored. It
 * reads in the caller's thread; prefetching belongs to the loader service. */
#define TR_SUBSYS TR_SUB_DATA
#include "source.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "dataset.h"
#include "permute.h"

struct reader {
    struct dataset ds;
    struct source_pos pos;
    int64_t batch[2], nbatches[2];
    int shuffle;        /* --shuffle_samples */
    int shuffle_batches; /* --shuffle_batches */
    uint64_t seed;
    struct perm perm;   /* of the training epoch perm_epoch: of samples, or of batches */
    int64_t perm_epoch; /* -1: none yet */
    int64_t *rows;      /* (batch[BATCH_TRAIN]) sample indices of a shuffled batch */
};

/* The permutation of the current training epoch: of its samples (stream: the
 * epoch) or of its batches (stream: the epoch with the top bit set). */
static const struct perm *epoch_perm(struct reader *r)
{
    if (r->perm_epoch != r->pos.epoch) {
        const uint64_t e = (uint64_t)r->pos.epoch;
        if (r->shuffle)
            perm_init(&r->perm, (uint64_t)r->ds.nsamples[BATCH_TRAIN], r->seed, e);
        else
            perm_init(&r->perm, (uint64_t)r->nbatches[BATCH_TRAIN], r->seed, e | (1ULL << 63));
        r->perm_epoch = r->pos.epoch;
    }
    return &r->perm;
}

/* Samples [first, first + n) of the pass, through the epoch's permutation. */
static enum tr_status fill_shuffled(struct reader *r, int64_t first, int64_t n, struct batch *b)
{
    epoch_perm(r);
    for (int64_t k = 0; k < n; k++)
        r->rows[k] = (int64_t)perm_at(&r->perm, (uint64_t)(first + k));
    return dataset_gather(&r->ds, BATCH_TRAIN, r->rows, n, b);
}

static enum tr_status r_next(void *ctx, struct batch *b)
{
    struct reader *r = ctx;
    const int s = r->pos.split;
    if (r->nbatches[s] == 0)
        return TR_ERR_RANGE;
    /* --shuffle_batches: position j of the epoch serves file-order batch perm(j) */
    const int64_t batch = r->shuffle_batches && s == BATCH_TRAIN
                              ? (int64_t)perm_at(epoch_perm(r), (uint64_t)r->pos.index)
                              : r->pos.index;
    const int64_t first = batch * r->batch[s];
    const int64_t n = TR_MIN(r->batch[s], r->ds.nsamples[s] - first);
    if (n > b->cap)
        return TR_ERR_ARG;
    if (r->shuffle && s == BATCH_TRAIN)
        TR_CHECK(fill_shuffled(r, first, n, b));
    else
        TR_CHECK(dataset_fill(&r->ds, (enum batch_split)s, first, n, b));
    b->flags = 0; /* the reader requests nothing */
    b->index = r->pos.index;
    b->epoch = r->pos.epoch;
    b->seed = r->seed;
    if (++r->pos.index == r->nbatches[s]) {
        r->pos.index = 0;
        r->pos.epoch++;
    }
    return TR_OK;
}

static enum tr_status r_seek(void *ctx, const struct source_pos *pos)
{
    struct reader *r = ctx;
    if ((pos->split != BATCH_TRAIN && pos->split != BATCH_TEST) || pos->epoch < 0 || pos->index < 0 ||
        pos->index >= TR_MAX(r->nbatches[pos->split], 1))
        return TR_ERR_RANGE;
    r->pos = *pos;
    return TR_OK;
}

static void r_tell(void *ctx, struct source_pos *pos)
{
    const struct reader *r = ctx;
    *pos = r->pos;
}

static void r_close(void *ctx)
{
    struct reader *r = ctx;
    dataset_close(&r->ds);
    tr_free(r->rows);
    tr_free(r);
}

static const struct source_i reader_iface = {
    .name = "reader",
    .next = r_next,
    .seek = r_seek,
    .tell = r_tell,
    .close = r_close,
};

enum tr_status source_open_reader(struct source *s, const struct job_cfg *job)
{
    memset(s, 0, sizeof *s);
    struct reader *r = tr_calloc(1, sizeof *r);
    if (!r)
        return TR_ERR_NOMEM;
    s->i = &reader_iface;
    s->ctx = r;
    r->batch[BATCH_TRAIN] = job->batch_size;
    r->batch[BATCH_TEST] = job_test_batch(job);
    if (job->dataset_type == JOB_DATA_SYNTHETIC) {
        int32_t *hot = tr_calloc((size_t)(job->rows.n ? job->rows.n : 1), sizeof *hot);
        if (!hot)
            return TR_ERR_NOMEM;
        job_synthetic_hot(job, hot);
        struct synth_cfg sc = {(uint64_t)job->seed, job->num_numerical, job->rows.n, job->rows.v,
                               job->synthetic_ids == JOB_IDS_UNIFORM ? SYNTH_IDS_UNIFORM : SYNTH_IDS_POWERLAW, hot,
                               job->multi_hot_variable};
        enum tr_status rc = dataset_open_synthetic(&r->ds, &sc, job->train_batches * r->batch[BATCH_TRAIN],
                                                   job->test_batches * r->batch[BATCH_TEST]);
        tr_free(hot); /* the dataset keeps its copy */
        TR_CHECK(rc);
    } else {
        TR_CHECK(dataset_open_split_binary(&r->ds, job->dataset_path, job->feature_spec));
        dataset_set_nonfinite(&r->ds, job->nonfinite_inputs == JOB_NONFINITE_ZERO ? SB_NONFINITE_ZERO
                                                                                  : SB_NONFINITE_ERROR);
    }
    const struct dataset *d = &r->ds;
    /* the last partial training batch is trained unless --drop_last (the seed's
     * rule, under which a dataset smaller than one batch would train zero steps,
     * seed issue #1316: refused) */
    r->nbatches[BATCH_TRAIN] = job->drop_last ? d->nsamples[BATCH_TRAIN] / r->batch[BATCH_TRAIN]
                                              : TR_CEIL_DIV(d->nsamples[BATCH_TRAIN], r->batch[BATCH_TRAIN]);
    if (r->nbatches[BATCH_TRAIN] < 1) {
        LOG_ERROR("%s: %lld training samples, %s", d->source, (long long)d->nsamples[BATCH_TRAIN],
                  d->nsamples[BATCH_TRAIN] ? "fewer than one batch under --drop_last" : "nothing to train on");
        LOG_HINT(d->nsamples[BATCH_TRAIN] ? "lower --batch_size, drop --drop_last or use a larger dataset"
                                          : "prepare the dataset with training rows (terarec data prepare)");
        return TR_ERR_ARG;
    }
    r->shuffle = job->shuffle_samples;
    r->shuffle_batches = job->shuffle_batches;
    r->seed = (uint64_t)job->seed;
    r->perm_epoch = -1;
    r->pos.split = BATCH_TRAIN;
    TR_CHECK(job_start_position(job, r->nbatches[BATCH_TRAIN], &r->pos.epoch, &r->pos.index));
    if (r->shuffle && !(r->rows = tr_malloc((size_t)r->batch[BATCH_TRAIN] * sizeof(int64_t))))
        return TR_ERR_NOMEM;
    r->nbatches[BATCH_TEST] = TR_CEIL_DIV(d->nsamples[BATCH_TEST], r->batch[BATCH_TEST]);
    s->num_features = d->num_features;
    s->ntables = d->ntables;
    s->rows = d->rows;
    s->hot = d->hot;
    s->desc = d->source;
    s->nonfinite_replaced = d->nonfinite_replaced;
    if (d->kind == DATASET_SYNTHETIC)
        s->cache_bytes = dataset_synthetic_cache_bytes(d->num_features, d->ntables, d->hot, d->nsamples, NULL);
    for (int k = 0; k < 2; k++) {
        s->nsamples[k] = d->nsamples[k];
        s->batch[k] = r->batch[k];
        s->nbatches[k] = r->nbatches[k];
    }
    return TR_OK;
}

void source_close(struct source *s)
{
    if (s->i)
        s->i->close(s->ctx);
    memset(s, 0, sizeof *s);
}
