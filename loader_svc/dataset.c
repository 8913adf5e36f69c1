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
    d->hot = tr_calloc((size_t)(cfg->ntables ? cfg->ntables : 1), sizeof(int32_t));
    d->source = tr_strdup("synthetic");
    if (!d->rows || !d->hot || !d->source)
        return TR_ERR_NOMEM;
    memcpy(d->rows, cfg->rows, (size_t)cfg->ntables * sizeof(int64_t));
    if (cfg->hot)
        memcpy(d->hot, cfg->hot, (size_t)cfg->ntables * sizeof(int32_t));
    d->synth = *cfg;
    d->synth.rows = d->rows;
    d->synth.hot = d->hot;
    d->variable = cfg->variable;
    d->nsamples[BATCH_TRAIN] = ntrain;
    d->nsamples[BATCH_TEST] = ntest;
    (void)dataset_synthetic_cache_bytes(cfg->num_features, cfg->ntables, d->hot, d->nsamples, d->keep);
    return TR_OK;
}

int64_t dataset_synthetic_cache_bytes(int num_features, int ntables, const int32_t *hot, const int64_t nsamples[2],
                                      int keep[2])
{
    int64_t total = 0;
    for (int s = 0; s < 2; s++) { /* BATCH_TRAIN first */
        /* a sample takes at least 4 bytes (its label): more samples than that never fit */
        const int64_t b = nsamples[s] > 0 && nsamples[s] <= DATASET_CACHE_BYTES / 4
                              ? batch_bytes(nsamples[s], num_features, ntables, hot)
                              : -1;
        const int k = b >= 0 && b <= DATASET_CACHE_BYTES - total;
        if (k)
            total += b;
        if (keep)
            keep[s] = k;
    }
    return total;
}

/* Split s of the synthetic dataset kept whole (made now on its first use), or NULL
 * in *out when it is generated batch by batch. */
static enum tr_status synth_cached(struct dataset *d, enum batch_split s, struct batch **out)
{
    *out = NULL;
    if (!d->keep[s])
        return TR_OK;
    if (!d->cache[s]) {
        struct batch *c;
        TR_CHECK(batch_new(d->nsamples[s], d->num_features, d->ntables, d->hot, &c));
        enum tr_status rc = synth_fill(&d->synth, s, 0, d->nsamples[s], c);
        if (rc != TR_OK) {
            batch_free(&c);
            return rc;
        }
        d->cache[s] = c;
    }
    *out = d->cache[s];
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
    d->hot = tr_calloc((size_t)(L->ntables ? L->ntables : 1), sizeof(int32_t));
    if (!d->rows || !d->hot)
        return TR_ERR_NOMEM;
    memcpy(d->rows, L->rows, (size_t)L->ntables * sizeof(int64_t));
    memcpy(d->hot, L->hot, (size_t)L->ntables * sizeof(int32_t));

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
    if (d->kind == DATASET_SYNTHETIC) {
        struct batch *c;
        TR_CHECK(synth_cached(d, s, &c));
        return c ? batch_copy_samples(b, c, first, NULL, n) : synth_fill(&d->synth, s, first, n, b);
    }
    return sb_fill(&d->sb[s], first, n, b, &d->nonfinite_replaced[s]);
}

enum tr_status dataset_gather(struct dataset *d, enum batch_split s, const int64_t *rows, int64_t n,
                              struct batch *b)
{
    for (int64_t k = 0; k < n; k++)
        if (rows[k] < 0 || rows[k] >= d->nsamples[s])
            return TR_ERR_ARG;
    b->split = (int32_t)s;
    if (d->kind == DATASET_SYNTHETIC) {
        struct batch *c;
        TR_CHECK(synth_cached(d, s, &c));
        return c ? batch_copy_samples(b, c, 0, rows, n) : synth_gather(&d->synth, s, rows, n, b);
    }
    return sb_gather(&d->sb[s], rows, n, b, &d->nonfinite_replaced[s]);
}

void dataset_close(struct dataset *d)
{
    sb_close(&d->sb[BATCH_TRAIN]);
    sb_close(&d->sb[BATCH_TEST]);
    feature_spec_release(&d->fs);
    batch_free(&d->cache[BATCH_TRAIN]);
    batch_free(&d->cache[BATCH_TEST]);
    tr_free(d->rows);
    tr_free(d->hot);
    tr_free(d->source);
    memset(d, 0, sizeof *d);
}
