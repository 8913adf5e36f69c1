/* dataset.c: dispatch between the synthetic generator and split-binary files. */
#define TR_SUBSYS TR_SUB_DATA
#include "dataset.h"

#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"

enum tr_status dataset_open_synthetic(struct dataset *d, const struct synth_cfg *cfg, int64_t ntrain,
                                      int64_t ntest)
{
    memset(d, 0, sizeof *d);
    d->kind = DATASET_SYNTHETIC;
    d->num_features = cfg->num_features;
    d->ntables = cfg->ntables;
    d->rows = tr_malloc((size_t)(cfg->ntables ? cfg->ntables : 1) * sizeof(int64_t));
    d->source = tr_strdup("synthetic");
    if (!d->rows || !d->source)
        return TR_ERR_NOMEM;
    memcpy(d->rows, cfg->rows, (size_t)cfg->ntables * sizeof(int64_t));
    d->synth = *cfg;
    d->synth.rows = d->rows;
    d->nsamples[BATCH_TRAIN] = ntrain;
    d->nsamples[BATCH_TEST] = ntest;
    return TR_OK;
}

enum tr_status dataset_open_split_binary(struct dataset *d, const char *dir, const char *spec_name)
{
    memset(d, 0, sizeof *d);
    d->kind = DATASET_SPLIT_BINARY;
    TR_CHECK(tr_file_join_to(dir, spec_name, &d->source));
    const char *path = d->source;
    enum tr_status rc = feature_spec_read(path, &d->fs);
    if (rc == TR_ERR_IO)
        LOG_HINT("--dataset_path must be a directory holding %s (write one with 'terarec data prepare')",
                 spec_name);
    TR_CHECK(rc);
    TR_CHECK(sb_open(&d->fs, "train", &d->sb[BATCH_TRAIN]));
    TR_CHECK(sb_open(&d->fs, "test", &d->sb[BATCH_TEST]));
    const struct feature_spec_split *L = &d->sb[BATCH_TRAIN].layout;
    d->num_features = L->nnumerical;
    d->ntables = L->ntables;
    d->rows = tr_malloc((size_t)(L->ntables ? L->ntables : 1) * sizeof(int64_t));
    if (!d->rows)
        return TR_ERR_NOMEM;
    memcpy(d->rows, L->rows, (size_t)L->ntables * sizeof(int64_t));
    d->nsamples[BATCH_TRAIN] = d->sb[BATCH_TRAIN].nsamples;
    d->nsamples[BATCH_TEST] = d->sb[BATCH_TEST].nsamples;
    return TR_OK;
}

void dataset_set_nonfinite(struct dataset *d, enum sb_nonfinite policy)
{
    d->sb[BATCH_TRAIN].nonfinite = policy;
    d->sb[BATCH_TEST].nonfinite = policy;
}

enum tr_status dataset_fill(struct dataset *d, enum batch_split s, int64_t first, int64_t n, struct batch *b)
{
    if (first < 0 || n < 0 || first + n > d->nsamples[s])
        return TR_ERR_ARG;
    b->split = (int32_t)s;
    if (d->kind == DATASET_SYNTHETIC)
        return synth_fill(&d->synth, s, first, n, b);
    return sb_fill(&d->sb[s], first, n, b, &d->nonfinite_replaced[s]);
}

enum tr_status dataset_gather(struct dataset *d, enum batch_split s, const int64_t *rows, int64_t n,
                              struct batch *b)
{
    for (int64_t k = 0; k < n; k++)
        if (rows[k] < 0 || rows[k] >= d->nsamples[s])
            return TR_ERR_ARG;
    b->split = (int32_t)s;
    if (d->kind == DATASET_SYNTHETIC)
        return synth_gather(&d->synth, s, rows, n, b);
    return sb_gather(&d->sb[s], rows, n, b, &d->nonfinite_replaced[s]);
}

void dataset_close(struct dataset *d)
{
    sb_close(&d->sb[BATCH_TRAIN]);
    sb_close(&d->sb[BATCH_TEST]);
    feature_spec_release(&d->fs);
    tr_free(d->rows);
    tr_free(d->source);
    memset(d, 0, sizeof *d);
}
