/* source.h: where the trainer gets its batches: one interface (next, seek, tell)
 * with the in-process reader as its first implementation (the loader service's
 * shared-memory ring will be the second). A source serves two splits as ordered
 * sequences of batch blocks:
 *   train: batches of batch_size samples, in order (with --shuffle_samples, in
 *          the order of a permutation of the samples drawn from --seed and the
 *          epoch; with --shuffle_batches, the file-order batches in a permuted
 *          order); the last batch of an epoch may be partial, unless --drop_last
 *          drops it (the seed's rule); after the last batch the next epoch begins;
 *          the first batch served is --start_position's (default 0:0);
 *   test:  batches of test_batch_size samples covering the split, the last one
 *          partial; after the last batch the pass starts again.
 * A position names the next batch to be served, so a saved position resumes the
 * exact sequence. */
#ifndef TR_SOURCE_H
#define TR_SOURCE_H

#include <stdint.h>

#include "../common/job.h"
#include "../common/status.h"
#include "batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The next batch a source will serve. */
struct source_pos {
    int32_t split;  /* enum batch_split */
    int64_t epoch;  /* passes over the split completed */
    int64_t index;  /* batch number within the pass */
};

struct source_i {
    const char *name;
    /* Fills b (a block of at least the source's batch size, same shape) with the
     * batch at the current position and advances. Sets b->n, index, epoch, seed and split,
     * and flags to what the source requests (stop, checkpoint, evaluate: batch.h;
     * 0 from the reader); leaves step to the caller. */
    enum tr_status (*next)(void *ctx, struct batch *b);
    /* Moves to pos. TR_ERR_RANGE when the position is outside the split. */
    enum tr_status (*seek)(void *ctx, const struct source_pos *pos);
    void (*tell)(void *ctx, struct source_pos *pos);
    void (*close)(void *ctx);
};

struct source {
    const struct source_i *i;
    void *ctx;
    /* the shape of the samples it serves */
    int num_features;
    int ntables;
    const int64_t *rows;      /* (ntables) rows of each table; valid while open */
    int64_t nsamples[2];      /* per split */
    int64_t batch[2];         /* samples per batch: batch_size, test batch size */
    int64_t nbatches[2];      /* batches per pass */
    const char *desc;         /* "synthetic" or the FeatureSpec path, for messages */
    const int64_t *nonfinite_replaced; /* (2) per split: NaN/inf numerical values replaced by 0 so far
                                          (--nonfinite_inputs zero); valid while open */
    int64_t cache_bytes;      /* what it keeps in this process's memory: the reader's synthetic
                                 splits (DATASET_CACHE_BYTES); 0 for the loader's ring */
    const int32_t *hot;       /* (ntables) each table's hotness (batch.h: 0 one-hot, h > 0 bags
                                 of up to h ids); the blocks it fills are formatted with it;
                                 valid while open */
};

/* The in-process reader of the job's dataset (synthetic, or split binary with its
 * FeatureSpec), with the job's batch sizes and --nonfinite_inputs policy (next
 * then returns TR_ERR_FORMAT, logged with the file and row, for a refused value
 * or a label other than 0/1). Errors (logged, naming the file and
 * the flag): TR_ERR_IO, TR_ERR_FORMAT, TR_ERR_ARG (a dataset smaller than one
 * training batch), TR_ERR_NOMEM. Close with source_close whatever the result. */
enum tr_status source_open_reader(struct source *s, const struct job_cfg *job) TR_WUR;

/* The loader service's ring "/terarec-<name>" (ring.h), attached as its one
 * consumer: waits up to timeout seconds for it to appear (or until *stop, which
 * may be NULL, turns non-zero), checks its header, then checks the job's flags
 * that the loader also took (batch sizes, --shuffle_samples, --drop_last, --seed):
 * a mismatch is TR_ERR_ARG, logged naming the flag. The shape (tables, rows,
 * sample and batch counts) comes from the ring, so the dataset is never opened.
 * next serves the train stream in order; seek to {test, 0, 0} asks the loader for
 * one evaluation pass, served by the following next calls; seek to a training
 * position resumes training there (at another position than the next one, the
 * loader is asked to seek, and the batches it had queued are dropped; TR_ERR_RANGE
 * outside the split); any other seek is TR_ERR_UNSUPPORTED (logged). A dead or failed loader makes next return
 * TR_ERR_REMOTE (or the loader's error), logged naming the loader. Errors of
 * ring_attach as documented there. Close with source_close whatever the result
 * (it tells the loader to stop). Not thread-safe. */
enum tr_status source_open_ring(struct source *s, const char *name, double timeout, const struct job_cfg *job,
                                volatile int *stop) TR_WUR;

/* Releases a source; safe on a zeroed one. */
void source_close(struct source *s);

static inline enum tr_status source_next(struct source *s, struct batch *b)
{
    return s->i->next(s->ctx, b);
}
static inline enum tr_status source_seek(struct source *s, const struct source_pos *pos)
{
    return s->i->seek(s->ctx, pos);
}
static inline void source_tell(struct source *s, struct source_pos *pos)
{
    s->i->tell(s->ctx, pos);
}

#ifdef __cplusplus
}
#endif
#endif
