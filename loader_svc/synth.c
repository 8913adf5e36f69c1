/* synth.c: the synthetic dataset of synth.h. No state and no files: each value
 * is hashed from (seed, stream, counter) with kmath's counter-based generator. */
#define TR_SUBSYS TR_SUB_DATA
#include "synth.h"

#include <math.h>
#include <string.h>

#include "../common/check.h"
#include "../kernels/kmath.h"

#define ST_NUM 0x1000u
#define ST_CAT 0x2000u
#define ST_LABEL 0x3000u
#define ST_SPLIT 0x100000u
#define ST_T_NUM 0x4000u
#define ST_T_CAT 0x5000u
#define ST_T_VEC 0x6000u
#define ST_MH 0x7000u  /* multi-hot: the ids after a bag's first */
#define ST_LEN 0x8000u /* multi-hot, variable: a bag's length */
#define VEC_DIM 4
#define MAX_PAIRS 4

/* teacher scales: logit std ~ 2.4 in all (numerical ~1.6, ids ~1.5, pairs ~1) */
#define NUM_SIGMA 0.8
#define CAT_VAR_TOTAL 2.3
#define VEC_SIGMA 0.5
#define TEACHER_BIAS (-1.0)

static int64_t cat_id(const struct synth_cfg *c, enum batch_split split, int t, int64_t i)
{
    uint64_t r = km_rand3(c->seed, ST_CAT + (uint64_t)t + split * ST_SPLIT, (uint64_t)i);
    if (c->ids == SYNTH_IDS_UNIFORM)
        return (int64_t)((r >> 11) % (uint64_t)c->rows[t]);
    return km_powerlaw_id(r, c->rows[t]);
}

/* Hotness of table t (0: one-hot). */
static int64_t hot_of(const struct synth_cfg *c, int t)
{
    return c->hot ? c->hot[t] : 0;
}

/* Ids in sample i's bag of multi-hot table t. */
static int64_t bag_len(const struct synth_cfg *c, enum batch_split split, int t, int64_t i)
{
    const int64_t h = hot_of(c, t);
    if (!c->variable)
        return h;
    return (int64_t)((km_rand3(c->seed, ST_LEN + (uint64_t)t + split * ST_SPLIT, (uint64_t)i) >> 11) %
                     (uint64_t)(h + 1));
}

/* Id k of sample i's bag in multi-hot table t: the one-hot id first. */
static int64_t bag_id(const struct synth_cfg *c, enum batch_split split, int t, int64_t i, int64_t k)
{
    if (k == 0)
        return cat_id(c, split, t, i);
    uint64_t r = km_rand3(c->seed, ST_MH + (uint64_t)t + split * ST_SPLIT, (uint64_t)(i * hot_of(c, t) + k));
    if (c->ids == SYNTH_IDS_UNIFORM)
        return (int64_t)((r >> 11) % (uint64_t)c->rows[t]);
    return km_powerlaw_id(r, c->rows[t]);
}

/* The id the teacher sees of table t in sample i: the one-hot id, or -1 for an empty bag. */
static int64_t teacher_id(const struct synth_cfg *c, enum batch_split split, int t, int64_t i)
{
    return hot_of(c, t) && bag_len(c, split, t, i) == 0 ? -1 : cat_id(c, split, t, i);
}

static float num_value(const struct synth_cfg *c, enum batch_split split, int j, int64_t i)
{
    return 2.0f * km_u01(km_rand3(c->seed, ST_NUM + (uint64_t)j + split * ST_SPLIT, (uint64_t)i));
}

/* The teacher's weight of numerical feature j. */
static double num_weight(const struct synth_cfg *c, int j)
{
    return NUM_SIGMA * km_normal(km_rand3(c->seed, ST_T_NUM, (uint64_t)j));
}

/* Teacher logit of one sample; a = num_weight(c, j) for every j. */
static double teacher(const struct synth_cfg *c, const double *a, const float *num, const int64_t *ids)
{
    double z = TEACHER_BIAS;
    for (int j = 0; j < c->num_features; j++)
        z += a[j] * (num[j] - 1.0);
    double cs = c->ntables ? sqrt(CAT_VAR_TOTAL / c->ntables) : 0.0;
    for (int t = 0; t < c->ntables; t++)
        if (ids[t] >= 0) /* -1: an empty bag says nothing */
            z += cs * km_normal(km_rand3(c->seed, ST_T_CAT + (uint64_t)t, (uint64_t)ids[t]));
    for (int p = 0; p < MAX_PAIRS && 2 * p + 1 < c->ntables; p++) {
        int t1 = 2 * p, t2 = 2 * p + 1;
        if (ids[t1] < 0 || ids[t2] < 0)
            continue;
        double dot = 0.0;
        for (int k = 0; k < VEC_DIM; k++) {
            double v1 = VEC_SIGMA * km_normal(km_rand3(c->seed, ST_T_VEC + (uint64_t)t1, (uint64_t)ids[t1] * VEC_DIM + k));
            double v2 = VEC_SIGMA * km_normal(km_rand3(c->seed, ST_T_VEC + (uint64_t)t2, (uint64_t)ids[t2] * VEC_DIM + k));
            dot += v1 * v2;
        }
        z += 2.0 * dot;
    }
    return z;
}

double synth_teacher_logit(const struct synth_cfg *c, enum batch_split split, int64_t i)
{
    float num[256];
    double a[256];
    int64_t ids[1024];
    int nf = c->num_features < 256 ? c->num_features : 256;
    int nt = c->ntables < 1024 ? c->ntables : 1024;
    struct synth_cfg cc = *c;
    cc.num_features = nf;
    cc.ntables = nt;
    for (int j = 0; j < nf; j++) {
        num[j] = num_value(c, split, j, i);
        a[j] = num_weight(c, j);
    }
    for (int t = 0; t < nt; t++)
        ids[t] = teacher_id(c, split, t, i);
    return teacher(&cc, a, num, ids);
}

/* Sample k of the batch is sample rows[k], or first + k when rows is NULL. */
static enum tr_status fill_samples(const struct synth_cfg *c, enum batch_split split, int64_t first,
                                   const int64_t *rows, int64_t n, struct batch *b)
{
    if (n < 0 || n > b->cap || b->num_features != c->num_features || b->ntables != c->ntables ||
        c->num_features > 256 || c->ntables > 1024)
        return TR_ERR_ARG;
    for (int t = 0; t < c->ntables; t++)
        if (c->rows[t] < 1 || c->rows[t] > INT32_MAX || batch_hot(b, t) != hot_of(c, t))
            return TR_ERR_ARG;
    b->n = n;
    b->split = (int32_t)split;
    float *labels = batch_labels(b);
    /* the bags' offsets first (a variable length moves every later bag) */
    for (int t = 0; t < c->ntables; t++) {
        int64_t *off = batch_offsets(b, t);
        if (!off)
            continue;
        off[0] = 0;
        for (int64_t k = 0; k < n; k++)
            off[k + 1] = off[k] + bag_len(c, split, t, rows ? rows[k] : first + k);
        batch_bags(b)[t].nids = off[n];
    }
    double a[256];
    for (int j = 0; j < c->num_features; j++)
        a[j] = num_weight(c, j);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = rows ? rows[k] : first + k;
        float *num = batch_num(b) + k * b->num_ld;
        int64_t ids[1024];
        for (int j = 0; j < c->num_features; j++)
            num[j] = num_value(c, split, j, i);
        for (int j = c->num_features; j < b->num_ld; j++)
            num[j] = 0.0f;
        for (int t = 0; t < c->ntables; t++) {
            const int64_t *off = batch_offsets(b, t);
            int32_t *dst = batch_ids(b, t);
            ids[t] = cat_id(c, split, t, i);
            if (!off) {
                dst[k] = (int32_t)ids[t];
                continue;
            }
            for (int64_t j = 0; j < off[k + 1] - off[k]; j++)
                dst[off[k] + j] = (int32_t)bag_id(c, split, t, i, j);
            if (off[k + 1] == off[k])
                ids[t] = -1;
        }
        double z = teacher(c, a, num, ids);
        double p = 1.0 / (1.0 + exp(-z));
        float u = km_u01(km_rand3(c->seed, ST_LABEL + split * ST_SPLIT, (uint64_t)i));
        labels[k] = u < p ? 1.0f : 0.0f;
    }
    return TR_OK;
}

enum tr_status synth_fill(const struct synth_cfg *c, enum batch_split split, int64_t first, int64_t n,
                          struct batch *b)
{
    return fill_samples(c, split, first, NULL, n, b);
}

enum tr_status synth_gather(const struct synth_cfg *c, enum batch_split split, const int64_t *rows, int64_t n,
                            struct batch *b)
{
    for (int64_t k = 0; k < n; k++)
        if (rows[k] < 0)
            return TR_ERR_ARG;
    return fill_samples(c, split, 0, rows, n, b);
}
