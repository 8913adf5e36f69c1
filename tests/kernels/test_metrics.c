/* test_metrics.c: kern_auc_exact against an O(n^2) pairwise reference (pairs with
 * pos > neg count 1, ties 1/2) on data with many ties, the degenerate cases
 * (all equal, perfect, reversed, one class, -0 vs +0), input errors and allocation
 * failure; kern_logloss against a double reference. These are host functions, not
 * backend ops: the file runs once, without the backend loop of kt_main. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kmath.h"
#include "../../kernels/metrics.h"
#include "kt_util.h"

/* Mann-Whitney by counting every (positive, negative) pair; NaN if a class is empty. */
static double ref_auc(const float *s, const float *y, int64_t n)
{
    double num = 0.0;
    int64_t np = 0, nn = 0;
    for (int64_t i = 0; i < n; i++) {
        if (y[i] == 1.0f)
            np++;
        else
            nn++;
    }
    if (np == 0 || nn == 0)
        return NAN;
    for (int64_t i = 0; i < n; i++) {
        if (y[i] != 1.0f)
            continue;
        for (int64_t j = 0; j < n; j++) {
            if (y[j] == 1.0f)
                continue;
            if (s[i] > s[j])
                num += 1.0;
            else if (s[i] == s[j])
                num += 0.5;
        }
    }
    return num / ((double)np * (double)nn);
}

static double auc_of(const float *s, const float *y, int64_t n)
{
    double auc = -1.0;
    enum tr_status rc = kern_auc_exact(s, y, n, &auc);
    TH_CHECKF(rc == TR_OK, "kern_auc_exact(n=%lld): %s", (long long)n, tr_strerror(rc));
    return auc;
}

/* Random scores quantised to `levels` values (many ties), including negative, zero
 * and large-magnitude scores; P(label = 1) = p1 + a score-dependent bias. */
static void test_random_ties(void)
{
    struct kt_rng r = kt_rng_seed(11);
    const int64_t sizes[] = {1, 2, 3, 10, 257, 3000};
    const int levels[] = {2, 5, 64, 0}; /* 0: continuous scores */
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++) {
        for (size_t l = 0; l < TR_ARRAY_SIZE(levels); l++) {
            const int64_t n = sizes[i];
            float *s = tr_malloc((size_t)n * sizeof(float)), *y = tr_malloc((size_t)n * sizeof(float));
            for (int64_t k = 0; k < n; k++) {
                float u = kt_uniform(&r, -1.0f, 1.0f);
                if (levels[l])
                    u = floorf(u * (float)levels[l]) / (float)levels[l] * 1e3f;
                s[k] = u;
                y[k] = kt_uniform(&r, 0.0f, 1.0f) < 0.3f + 0.2f * u / (levels[l] ? 1e3f : 1.0f) ? 1.0f : 0.0f;
            }
            if (n >= 3) { /* both classes present */
                y[0] = 1.0f;
                y[1] = 0.0f;
            }
            double want = ref_auc(s, y, n), got = auc_of(s, y, n);
            TH_CHECKF((isnan(want) && isnan(got)) || fabs(got - want) <= 1e-12, "n=%lld levels=%d: auc %.15g, want %.15g",
                      (long long)n, levels[l], got, want);
            tr_free(y);
            tr_free(s);
        }
    }
}

static void test_degenerate(void)
{
    enum { N = 100 };
    float s[N], y[N];
    for (int i = 0; i < N; i++) {
        s[i] = 0.25f;
        y[i] = (float)(i % 3 == 0);
    }
    TH_CHECKF(auc_of(s, y, N) == 0.5, "all scores equal: want 0.5");
    for (int i = 0; i < N; i++)
        s[i] = y[i] == 1.0f ? 2.0f + (float)i : -(float)i; /* every positive above every negative */
    TH_CHECKF(auc_of(s, y, N) == 1.0, "perfect separation: want 1");
    for (int i = 0; i < N; i++)
        s[i] = -s[i];
    TH_CHECKF(auc_of(s, y, N) == 0.0, "reversed: want 0");
    for (int i = 0; i < N; i++)
        y[i] = 1.0f;
    TH_CHECKF(isnan(auc_of(s, y, N)), "all labels 1: want NaN");
    for (int i = 0; i < N; i++)
        y[i] = 0.0f;
    TH_CHECKF(isnan(auc_of(s, y, N)), "all labels 0: want NaN");
    TH_CHECKF(isnan(auc_of(s, y, 0)), "n = 0: want NaN");
    /* infinities sort at the ends */
    const float si[4] = {-INFINITY, INFINITY, -FLT_MAX, FLT_MAX}, yi[4] = {0, 1, 0, 1};
    TH_NEAR(auc_of(si, yi, 4), 1.0, 0.0, 0.0);
}

/* -0.0 and +0.0 are the same score: a tie worth 1/2. */
static void test_signed_zero(void)
{
    const float s1[2] = {-0.0f, 0.0f}, y1[2] = {1, 0};
    const float s2[2] = {0.0f, -0.0f}, y2[2] = {1, 0};
    TH_CHECKF(auc_of(s1, y1, 2) == 0.5, "pos -0, neg +0: want 0.5");
    TH_CHECKF(auc_of(s2, y2, 2) == 0.5, "pos +0, neg -0: want 0.5");
    /* mixed with other values: [-1(neg), -0(pos), +0(neg), 1(pos)] -> (1 + 0.5 + 1 + 1) / 4 */
    const float s3[4] = {-1.0f, -0.0f, 0.0f, 1.0f}, y3[4] = {0, 1, 0, 1};
    TH_CHECKF(auc_of(s3, y3, 4) == 0.875, "mixed zeros: want 0.875");
}

/* A NaN score or a label other than 0/1 is TR_ERR_ARG. */
static void test_bad_input(void)
{
    float s[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}, y[5] = {0, 1, 0, 1, 0};
    double auc = 0;
    s[3] = NAN;
    TH_EQ_ST(kern_auc_exact(s, y, 5, &auc), TR_ERR_ARG);
    s[3] = 0.4f;
    y[2] = 0.5f;
    TH_EQ_ST(kern_auc_exact(s, y, 5, &auc), TR_ERR_ARG);
    y[2] = NAN;
    TH_EQ_ST(kern_auc_exact(s, y, 5, &auc), TR_ERR_ARG);
    y[2] = 2.0f;
    TH_EQ_ST(kern_auc_exact(s, y, 5, &auc), TR_ERR_ARG);
    y[2] = 0.0f;
    TH_EQ_ST(kern_auc_exact(s, y, 5, &auc), TR_OK);
}

/* Every allocation failure gives TR_ERR_NOMEM and leaks nothing. */
static void test_nomem(void)
{
    float s[64], y[64];
    struct kt_rng r = kt_rng_seed(3);
    for (int i = 0; i < 64; i++) {
        s[i] = kt_uniform(&r, -1, 1);
        y[i] = (float)(i & 1);
    }
    struct tr_alloc_stats st0, st;
    tr_alloc_get_stats(&st0);
    int fired = 0;
    for (int k = 1; k <= 16; k++) {
        double auc = 0;
        tr_alloc_fail_at(k);
        enum tr_status rc = kern_auc_exact(s, y, 64, &auc);
        int f = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        if (!f) {
            TH_EQ_ST(rc, TR_OK);
            break;
        }
        fired++;
        TH_CHECKF(rc == TR_ERR_NOMEM, "allocation %d failed: %s, want TR_ERR_NOMEM", k, tr_strerror(rc));
        tr_alloc_get_stats(&st);
        TH_CHECKF(st.live_bytes == st0.live_bytes, "allocation %d failed: %lld bytes leaked", k,
                  (long long)(st.live_bytes - st0.live_bytes));
    }
    TH_CHECKF(fired >= 1, "kern_auc_exact made no allocation that could fail (%d fired)", fired);
}

static void test_logloss(void)
{
    struct kt_rng r = kt_rng_seed(21);
    enum { N = 4099 };
    float *x = tr_malloc(N * sizeof(float)), *y = tr_malloc(N * sizeof(float));
    double want = 0.0;
    for (int i = 0; i < N; i++) {
        x[i] = kt_uniform(&r, -20, 20);
        y[i] = (float)(kt_next(&r) >> 63);
        double xd = x[i];
        want += fmax(xd, 0.0) - xd * y[i] + log1p(exp(-fabs(xd)));
    }
    want /= N;
    double got = kern_logloss(x, y, N);
    TH_CHECKF(fabs(got - want) <= 1e-6 * want, "logloss %.12g want %.12g", got, want);
    TH_NEAR(kern_logloss(x, y, 0), 0.0, 0.0, 0.0);
    const float x0[2] = {0, 0}, y0[2] = {0, 1};
    TH_NEAR(kern_logloss(x0, y0, 2), log(2.0), 1e-7, 0.0);
    tr_free(y);
    tr_free(x);
}

static const struct th_case cases[] = {
    {"auc_random_ties", test_random_ties},
    {"auc_degenerate", test_degenerate},
    {"auc_signed_zero", test_signed_zero},
    {"auc_bad_input", test_bad_input},
    {"auc_nomem", test_nomem},
    {"logloss", test_logloss},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
