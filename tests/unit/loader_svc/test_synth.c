/* test_synth.c: the synthetic dataset is a pure function of (seed, split, sample):
 * deterministic, sliceable at any offset, ids in range with the promised
 * distribution, and labels that follow the teacher (so the data is learnable);
 * a dataset that keeps its splits in memory serves the same bytes. */
#include <math.h>
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../kernels/metrics.h"
#include "../../../loader_svc/dataset.h"
#include "../../../loader_svc/synth.h"

static const int64_t rows[4] = {1000, 7, 100000, 1};

static struct synth_cfg cfg(enum synth_ids ids)
{
    struct synth_cfg c = {42, 13, 4, rows, ids, NULL, 0};
    return c;
}

static void deterministic_and_sliceable(void)
{
    struct synth_cfg c = cfg(SYNTH_IDS_POWERLAW);
    struct batch *a = NULL, *b = NULL;
    TH_EQ_ST_REQ(batch_new(100, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(100, 13, 4, NULL, &b), TR_OK);
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, 1000, 100, a), TR_OK);
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, 1000, 100, b), TR_OK);
    TH_CHECK(memcmp(batch_num(a), batch_num(b), 100 * 16 * sizeof(float)) == 0);
    TH_CHECK(memcmp(batch_labels(a), batch_labels(b), 100 * sizeof(float)) == 0);
    TH_CHECK(memcmp(batch_cat(a), batch_cat(b), 4 * 100 * sizeof(int32_t)) == 0);
    /* samples 1050..1099 from a fill that starts at 1050 equal the second half */
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, 1050, 50, b), TR_OK);
    TH_CHECK(memcmp(batch_num(a) + 50 * 16, batch_num(b), 50 * 16 * sizeof(float)) == 0);
    TH_CHECK(memcmp(batch_labels(a) + 50, batch_labels(b), 50 * sizeof(float)) == 0);
    for (int t = 0; t < 4; t++)
        TH_CHECK(memcmp(batch_cat(a) + t * 100 + 50, batch_cat(b) + t * 100, 50 * sizeof(int32_t)) == 0);
    /* another seed and the validation split give other samples */
    TH_EQ_ST(synth_fill(&c, BATCH_TEST, 1000, 100, b), TR_OK);
    TH_CHECK(memcmp(batch_num(a), batch_num(b), 100 * 16 * sizeof(float)) != 0);
    c.seed = 43;
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, 1000, 100, b), TR_OK);
    TH_CHECK(memcmp(batch_num(a), batch_num(b), 100 * 16 * sizeof(float)) != 0);
    batch_free(&a);
    batch_free(&b);
}

static void value_ranges(void)
{
    struct synth_cfg c = cfg(SYNTH_IDS_POWERLAW);
    struct batch *a = NULL;
    const int64_t n = 20000;
    TH_EQ_ST_REQ(batch_new(n, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(synth_fill(&c, BATCH_TRAIN, 0, n, a), TR_OK);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < 16; j++) {
            float v = batch_num(a)[i * 16 + j];
            if (j < 13 ? !(v >= 0.0f && v < 2.0f) : v != 0.0f)
                bad++;
        }
        if (batch_labels(a)[i] != 0.0f && batch_labels(a)[i] != 1.0f)
            bad++;
        for (int t = 0; t < 4; t++)
            if (batch_cat(a)[t * n + i] < 0 || batch_cat(a)[t * n + i] >= rows[t])
                bad++;
    }
    TH_CHECKF(bad == 0, "%d values out of range", bad);
    batch_free(&a);
}

static void powerlaw_shape(void)
{
    struct synth_cfg c = cfg(SYNTH_IDS_POWERLAW);
    struct batch *a = NULL;
    const int64_t n = 50000;
    TH_EQ_ST_REQ(batch_new(n, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(synth_fill(&c, BATCH_TRAIN, 0, n, a), TR_OK);
    /* P(id <= x) = ln(x + 2) / ln(C + 1) for the continuous Zipf(1) law used */
    int64_t le0 = 0, le9 = 0, le99 = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = batch_cat(a)[i]; /* table 0, C = 1000 */
        le0 += id <= 0;
        le9 += id <= 9;
        le99 += id <= 99;
    }
    double L = log(1001.0);
    double f0 = (double)le0 / n, f9 = (double)le9 / n, f99 = (double)le99 / n;
    TH_CHECKF(fabs(f0 - log(2.0) / L) < 0.01, "P(id=0) %.4f, expected %.4f", f0, log(2.0) / L);
    TH_CHECKF(fabs(f9 - log(11.0) / L) < 0.01, "P(id<=9) %.4f, expected %.4f", f9, log(11.0) / L);
    TH_CHECKF(fabs(f99 - log(101.0) / L) < 0.01, "P(id<=99) %.4f, expected %.4f", f99, log(101.0) / L);
    /* a table of cardinality 1 always yields id 0 */
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++)
        nz += batch_cat(a)[3 * n + i] != 0;
    TH_EQ(nz, 0);
    batch_free(&a);
}

static void uniform_ids(void)
{
    struct synth_cfg c = cfg(SYNTH_IDS_UNIFORM);
    struct batch *a = NULL;
    const int64_t n = 50000;
    TH_EQ_ST_REQ(batch_new(n, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(synth_fill(&c, BATCH_TRAIN, 0, n, a), TR_OK);
    double mean = 0.0;
    for (int64_t i = 0; i < n; i++)
        mean += batch_cat(a)[2 * n + i]; /* table 2, C = 100000 */
    mean /= n;
    TH_CHECKF(fabs(mean - 49999.5) < 1000.0, "mean id %.1f, expected 49999.5", mean);
    batch_free(&a);
}

static void labels_follow_teacher(void)
{
    struct synth_cfg c = cfg(SYNTH_IDS_POWERLAW);
    struct batch *a = NULL;
    const int64_t n = 40000;
    TH_EQ_ST_REQ(batch_new(n, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(synth_fill(&c, BATCH_TEST, 0, n, a), TR_OK);
    float *z = malloc((size_t)n * sizeof(float));
    TH_REQUIRE(z != NULL);
    double mean_p = 0.0, mean_y = 0.0;
    for (int64_t i = 0; i < n; i++) {
        z[i] = (float)synth_teacher_logit(&c, BATCH_TEST, i);
        mean_p += 1.0 / (1.0 + exp(-z[i]));
        mean_y += batch_labels(a)[i];
    }
    mean_p /= n;
    mean_y /= n;
    TH_CHECKF(fabs(mean_p - mean_y) < 0.01, "label rate %.4f vs teacher mean probability %.4f", mean_y, mean_p);
    TH_CHECKF(mean_y > 0.15 && mean_y < 0.6, "label rate %.4f", mean_y);
    double auc = 0.0;
    TH_EQ_ST(kern_auc_exact(z, batch_labels(a), n, &auc), TR_OK);
    TH_CHECKF(auc > 0.8, "the teacher's own AUC is %.4f: the labels carry too little signal", auc);
    free(z);
    batch_free(&a);
}

static void bad_shapes(void)
{
    struct synth_cfg c = cfg(SYNTH_IDS_POWERLAW);
    struct batch *a = NULL;
    TH_EQ_ST_REQ(batch_new(10, 13, 3, NULL, &a), TR_OK);
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, 0, 10, a), TR_ERR_ARG); /* 3 tables vs 4 */
    batch_free(&a);
    TH_EQ_ST_REQ(batch_new(10, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, 0, 11, a), TR_ERR_ARG); /* more than cap */
    int64_t zero[4] = {1000, 0, 5, 5};
    c.rows = zero;
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, 0, 10, a), TR_ERR_ARG);
    batch_free(&a);
}

/* dataset_fill and dataset_gather of a kept dataset (made whole on first use) give
 * the bytes that synth_fill / synth_gather make for the same samples, in both
 * splits, for ranges anywhere (the last, partial one too) and any order. */
static void cached_equals_generated(void)
{
    struct synth_cfg c = cfg(SYNTH_IDS_POWERLAW);
    struct dataset d;
    TH_EQ_ST_REQ(dataset_open_synthetic(&d, &c, 1000, 300), TR_OK);
    TH_CHECK(d.keep[BATCH_TRAIN] && d.keep[BATCH_TEST]);
    TH_CHECK(d.cache[BATCH_TRAIN] == NULL && d.cache[BATCH_TEST] == NULL); /* nothing made before a read */
    struct batch *a = NULL, *b = NULL;
    TH_EQ_ST_REQ(batch_new(128, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(128, 13, 4, NULL, &b), TR_OK);
    const int64_t firsts[] = {0, 128, 872, 999};
    for (int s = 0; s < 2; s++) {
        const int64_t ns = d.nsamples[s];
        for (size_t k = 0; k < TR_ARRAY_SIZE(firsts); k++) {
            const int64_t first = TR_MIN(firsts[k], ns - 1), n = TR_MIN(128, ns - first);
            TH_EQ_ST(dataset_fill(&d, (enum batch_split)s, first, n, a), TR_OK);
            TH_EQ_ST(synth_fill(&c, (enum batch_split)s, first, n, b), TR_OK);
            TH_CHECKF(batch_same_samples(a, b), "split %d, samples [%lld, +%lld)", s, (long long)first, (long long)n);
        }
        TH_CHECK(d.cache[s] != NULL && d.cache[s]->n == ns);
        int64_t idx[128];
        for (int k = 0; k < 128; k++)
            idx[k] = (int64_t)((uint64_t)(k * 7919 + 13 * s) % (uint64_t)ns);
        idx[0] = ns - 1;
        TH_EQ_ST(dataset_gather(&d, (enum batch_split)s, idx, 128, a), TR_OK);
        TH_EQ_ST(synth_gather(&c, (enum batch_split)s, idx, 128, b), TR_OK);
        TH_CHECKF(batch_same_samples(a, b), "split %d, gathered", s);
        idx[5] = ns; /* outside the split */
        TH_EQ_ST(dataset_gather(&d, (enum batch_split)s, idx, 128, a), TR_ERR_ARG);
        TH_EQ_ST(dataset_fill(&d, (enum batch_split)s, ns - 10, 11, a), TR_ERR_ARG);
    }
    /* a block of another shape is refused, not overrun */
    struct batch *small = NULL;
    TH_EQ_ST_REQ(batch_new(128, 13, 3, NULL, &small), TR_OK);
    TH_EQ_ST(dataset_fill(&d, BATCH_TRAIN, 0, 10, small), TR_ERR_ARG);
    TH_EQ_ST(dataset_fill(&d, BATCH_TRAIN, 0, 129, a), TR_ERR_ARG);
    batch_free(&small);
    batch_free(&a);
    batch_free(&b);
    dataset_close(&d);
}

/* A split that does not fit DATASET_CACHE_BYTES (the training split first, the test
 * split in what is left) is generated batch by batch, with the same samples. */
static void large_not_kept(void)
{
    const int64_t per = (batch_bytes(1024, 13, 4, NULL) - batch_bytes(0, 13, 4, NULL)) / 1024; /* bytes a sample */
    TH_CHECK(per > 0);
    const int64_t half = DATASET_CACHE_BYTES / per / 2;
    int keep[2];
    int64_t fits[2] = {half / 2, half / 2};
    TH_EQ(dataset_synthetic_cache_bytes(13, 4, NULL, fits, keep), batch_bytes(half / 2, 13, 4, NULL) * 2);
    TH_CHECK(keep[0] && keep[1]);
    int64_t test_over[2] = {half, half + 4096}; /* the test split is over what the train split left */
    TH_EQ(dataset_synthetic_cache_bytes(13, 4, NULL, test_over, keep), batch_bytes(half, 13, 4, NULL));
    TH_CHECK(keep[0] && !keep[1]);
    int64_t train_over[2] = {2 * half + 4096, 300};
    TH_EQ(dataset_synthetic_cache_bytes(13, 4, NULL, train_over, keep), batch_bytes(300, 13, 4, NULL));
    TH_CHECK(!keep[0] && keep[1]);
    int64_t huge[2] = {(int64_t)1 << 40, -1};
    TH_EQ(dataset_synthetic_cache_bytes(13, 4, NULL, huge, keep), 0);
    TH_CHECK(!keep[0] && !keep[1]);
    struct synth_cfg c = cfg(SYNTH_IDS_POWERLAW);
    struct dataset d;
    TH_EQ_ST_REQ(dataset_open_synthetic(&d, &c, train_over[0], train_over[1]), TR_OK);
    TH_CHECK(!d.keep[BATCH_TRAIN] && d.keep[BATCH_TEST]);
    struct batch *a = NULL, *b = NULL;
    TH_EQ_ST_REQ(batch_new(64, 13, 4, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(64, 13, 4, NULL, &b), TR_OK);
    TH_EQ_ST(dataset_fill(&d, BATCH_TRAIN, train_over[0] - 64, 64, a), TR_OK);
    TH_EQ_ST(synth_fill(&c, BATCH_TRAIN, train_over[0] - 64, 64, b), TR_OK);
    TH_CHECK(batch_same_samples(a, b));
    TH_CHECK(d.cache[BATCH_TRAIN] == NULL);
    TH_EQ_ST(dataset_fill(&d, BATCH_TEST, 236, 64, a), TR_OK);
    TH_EQ_ST(synth_fill(&c, BATCH_TEST, 236, 64, b), TR_OK);
    TH_CHECK(batch_same_samples(a, b));
    TH_CHECK(d.cache[BATCH_TEST] != NULL);
    batch_free(&a);
    batch_free(&b);
    dataset_close(&d);
}

static const struct th_case cases[] = {
    {"deterministic_and_sliceable", deterministic_and_sliceable},
    {"value_ranges", value_ranges},
    {"powerlaw_shape", powerlaw_shape},
    {"uniform_ids", uniform_ids},
    {"labels_follow_teacher", labels_follow_teacher},
    {"bad_shapes", bad_shapes},
    {"cached_equals_generated", cached_equals_generated},
    {"large_not_kept", large_not_kept},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
