/* dataset.h: what the trainer reads samples from, whatever their source: the
 * synthetic generator or a split-binary directory with a FeatureSpec. Two
 * splits: train and test (the seed evaluates on "test"). */
#ifndef TR_DATASET_H
#define TR_DATASET_H

#include <stdint.h>

#include "../common/status.h"
#include "batch.h"
#include "feature_spec.h"
#include "split_binary.h"
#include "synth.h"

#ifdef __cplusplus
extern "C" {
#endif

enum dataset_kind { DATASET_SYNTHETIC = 0, DATASET_SPLIT_BINARY = 1 };

struct dataset {
    enum dataset_kind kind;
    int num_features;
    int ntables;
    int64_t *rows;       /* (ntables) rows of each table, owned */
    int32_t *hot;        /* (ntables) each table's hotness (batch.h: 0 one-hot), owned */
    int variable;        /* synthetic: multi-hot bags of variable length */
    int64_t nsamples[2];  /* per split */
    char *source;         /* "synthetic" or the FeatureSpec path, for messages */
    struct synth_cfg synth;
    struct feature_spec fs;
    struct sb_split sb[2];
    int64_t nonfinite_replaced[2]; /* per split: non-finite numerical values replaced by 0 so far */
    int keep[2];                   /* per split: a synthetic split small enough to keep */
    struct batch *cache[2];        /* per split kept: all its samples, made on its first read */
};

/* A synthetic split is generated once and kept when it fits in this many bytes (the
 * training split first, then the test split in what is left): a sample costs about a
 * hundred hashes to make and a copy to serve, so a run that goes over a few synthetic
 * batches many times (a benchmark's --synthetic_dataset_train_batches 4) pays the
 * copy only. A larger split is generated batch by batch. */
#define DATASET_CACHE_BYTES ((int64_t)256 << 20)

/* Which synthetic splits of these sizes are kept (keep[s], may be NULL) and the bytes
 * they take: what `terarec plan` counts on the first node. hot: the tables'
 * hotness (batch.h; NULL: one-hot). */
int64_t dataset_synthetic_cache_bytes(int num_features, int ntables, const int32_t *hot, const int64_t nsamples[2],
                                      int keep[2]);

/* The synthetic dataset with ntrain / ntest samples. cfg->rows and cfg->hot are
 * copied. Its splits are kept in memory when they fit DATASET_CACHE_BYTES. */
enum tr_status dataset_open_synthetic(struct dataset *d, const struct synth_cfg *cfg, int64_t ntrain,
                                      int64_t ntest) TR_WUR;

/* A split-binary dataset: reads dir/spec_name and maps its train and test splits.
 * Errors (logged naming the file): TR_ERR_IO, TR_ERR_FORMAT, TR_ERR_NOMEM. */
enum tr_status dataset_open_split_binary(struct dataset *d, const char *dir, const char *spec_name) TR_WUR;

/* What a split-binary dataset does with NaN or inf numerical values (sb_fill):
 * refuse them (the default) or replace them with 0, counted in nonfinite_replaced.
 * The synthetic dataset has none. */
void dataset_set_nonfinite(struct dataset *d, enum sb_nonfinite policy);

/* Fills b with samples [first, first + n) of split s (n <= b->cap). Errors of
 * sb_fill (TR_ERR_FORMAT for a bad label or a refused non-finite value, logged). */
enum tr_status dataset_fill(struct dataset *d, enum batch_split s, int64_t first, int64_t n,
                            struct batch *b) TR_WUR;

/* Fills b with samples rows[0 .. n) of split s, in that order; TR_ERR_ARG when
 * one is outside the split. Errors as dataset_fill. */
enum tr_status dataset_gather(struct dataset *d, enum batch_split s, const int64_t *rows, int64_t n,
                              struct batch *b) TR_WUR;

/* Releases everything; safe on a zeroed or partly opened dataset. */
void dataset_close(struct dataset *d);

#ifdef __cplusplus
}
#endif
#endif
