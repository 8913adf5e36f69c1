/* test_metrics_op.c: the metrics op (kern.h) on every backend (kt_main): its AUC
 * against an O(n^2) pairwise count (small n) and bitwise against kern_auc_exact on
 * the host (every n, up to two million samples with many ties, so CUB's tiles and
 * the scans' carries are crossed), its log loss against kern_logloss (1e-12: the
 * same terms, another summation order) and a double reference (1e-6), the
 * non-finite count and position, one class, -0 against +0, n = 0, a bad label
 * (TR_ERR_ARG) and bad arguments, and the same bits on a second call. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../kernels/metrics.h"
#include "kt_util.h"

struct out {
    int64_t nonfinite, first;
    double auc, logloss;
};

/* Runs the op on host arrays s, y (n) copied into kt_be's memory. */
static enum tr_status op(const float *s, const float *y, int64_t n, struct out *o)
{
    const size_t b = (size_t)(n ? n : 1) * sizeof(float);
    float *ds = kt_dev_dup(s, b), *dy = kt_dev_dup(y, b);
    o->nonfinite = -7;
    o->first = -7;
    o->auc = -7.0;
    o->logloss = -7.0;
    struct kern_metrics_args a = {.n = n, .scores = ds, .labels = dy, .nonfinite = &o->nonfinite,
                                  .first_nonfinite = &o->first, .auc = &o->auc, .logloss = &o->logloss};
    enum tr_status rc = kt_be.i->metrics(kt_be.ctx, &a);
    kt_dev_release(ds, b);
    kt_dev_release(dy, b);
    return rc;
}

/* Pairs (positive, negative) with the positive above count 1, ties 1/2. */
static double ref_auc(const float *s, const float *y, int64_t n)
{
    double num = 0.0;
    int64_t np = 0, nn = 0;
    for (int64_t i = 0; i < n; i++)
        y[i] == 1.0f ? np++ : nn++;
    if (np == 0 || nn == 0)
        return NAN;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n && y[i] == 1.0f; j++)
            if (y[j] != 1.0f)
                num += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
    return num / ((double)np * (double)nn);
}

static double ref_logloss(const float *x, const float *y, int64_t n)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double xd = x[i];
        sum += fmax(xd, 0.0) - xd * y[i] + log1p(exp(-fabs(xd)));
    }
    return sum / (double)n;
}

/* Scores on `levels` values (0: continuous) over [-spread, spread), labels that
 * lean on the score. */
static void make(struct kt_rng *r, float *s, float *y, int64_t n, int levels, float spread)
{
    for (int64_t k = 0; k < n; k++) {
        float u = kt_uniform(r, -1.0f, 1.0f);
        if (levels)
            u = floorf(u * (float)levels) / (float)levels;
        s[k] = u * spread;
        y[k] = kt_uniform(r, 0.0f, 1.0f) < 0.3f + 0.2f * u ? 1.0f : 0.0f;
    }
    if (n >= 2) {
        y[0] = 1.0f;
        y[1] = 0.0f;
    }
}

static void check_case(const float *s, const float *y, int64_t n, int pairwise, const char *what)
{
    struct out o;
    TH_EQ_ST(op(s, y, n, &o), TR_OK);
    double host = NAN;
    TH_EQ_ST(kern_auc_exact(s, y, n, &host), TR_OK);
    TH_CHECKF(o.nonfinite == 0 && o.first == -1, "%s: nonfinite %lld first %lld, want 0 -1", what,
              (long long)o.nonfinite, (long long)o.first);
    TH_CHECKF((isnan(host) && isnan(o.auc)) || memcmp(&o.auc, &host, sizeof host) == 0,
              "%s: auc %.17g, kern_auc_exact %.17g (must be the same bits)", what, o.auc, host);
    if (pairwise) {
        double want = ref_auc(s, y, n);
        TH_CHECKF((isnan(want) && isnan(o.auc)) || fabs(o.auc - want) <= 1e-12, "%s: auc %.15g, pairwise %.15g",
                  what, o.auc, want);
    }
    /* kern_logloss's float terms (CUDA's expf and log1pf may differ from the host's
     * by an ulp), summed in double in the backend's order */
    double host_ll = kern_logloss(s, y, n), want = ref_logloss(s, y, n);
    TH_CHECKF(fabs(o.logloss - host_ll) <= 1e-6 * fabs(host_ll), "%s: logloss %.17g, kern_logloss %.17g", what,
              o.logloss, host_ll);
    TH_CHECKF(fabs(o.logloss - want) <= 1e-6 * fabs(want), "%s: logloss %.15g, double reference %.15g", what,
              o.logloss, want);
}

static void test_small(void)
{
    KT_NEED_OP(KERN_OP_METRICS);
    struct kt_rng r = kt_rng_seed(31);
    const int64_t sizes[] = {1, 2, 3, 10, 257, 2500};
    const int levels[] = {2, 7, 64, 0};
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++)
        for (size_t l = 0; l < TR_ARRAY_SIZE(levels); l++) {
            const int64_t n = sizes[i];
            float *s = tr_malloc((size_t)n * sizeof(float)), *y = tr_malloc((size_t)n * sizeof(float));
            TH_REQUIRE(s && y);
            make(&r, s, y, n, levels[l], 8.0f);
            char what[64];
            snprintf(what, sizeof what, "n=%lld levels=%d", (long long)n, levels[l]);
            check_case(s, y, n, 1, what);
            tr_free(y);
            tr_free(s);
        }
}

/* Millions of samples: tied groups that span tiles, continuous scores, and the same
 * bits on a second call. */
static void test_large(void)
{
    KT_NEED_OP(KERN_OP_METRICS);
    struct kt_rng r = kt_rng_seed(32);
    const int64_t n = (2 << 20) + 4099;
    float *s = tr_malloc((size_t)n * sizeof(float)), *y = tr_malloc((size_t)n * sizeof(float));
    TH_REQUIRE(s && y);
    make(&r, s, y, n, 1000, 30.0f);
    const int64_t peak0 = kt_be.i->mem_peak(kt_be.ctx);
    check_case(s, y, n, 0, "n=2M levels=1000");
    const int64_t peak1 = kt_be.i->mem_peak(kt_be.ctx);
    /* backend memory counted by the backend (CUDA): the call's working memory plus
     * the test's two input copies stay within the backend's own answer (ws's call) */
    const struct kern_shape sh = {.m = n};
    struct kern_ws ws;
    kt_be.i->ws(kt_be.ctx, KERN_OP_METRICS, &sh, &ws);
    TH_CHECKF(ws.call >= (size_t)n * 16, "metrics on %lld samples: ws says %zu bytes for the call, under 16 a sample",
              (long long)n, ws.call);
    if (peak0 >= 0)
        TH_CHECKF(peak1 - peak0 <= 8 * n + (int64_t)ws.call,
                  "the call raised the backend's peak by %lld bytes, over 8 n + ws's call = %lld",
                  (long long)(peak1 - peak0), (long long)(8 * n + (int64_t)ws.call));
    struct out a, b;
    TH_EQ_ST(op(s, y, n, &a), TR_OK);
    TH_EQ_ST(op(s, y, n, &b), TR_OK);
    TH_CHECKF(memcmp(&a.auc, &b.auc, sizeof a.auc) == 0 && memcmp(&a.logloss, &b.logloss, sizeof a.logloss) == 0,
              "a second call gave other bits: auc %.17g vs %.17g, logloss %.17g vs %.17g", a.auc, b.auc, a.logloss,
              b.logloss);
    make(&r, s, y, n, 0, 30.0f);
    check_case(s, y, n, 0, "n=2M continuous");
    /* non-finite scores far apart: many blocks race for the first position */
    s[n - 5] = NAN;
    s[n / 2 + 17] = INFINITY;
    s[n / 3 + 1] = -INFINITY;
    TH_EQ_ST(op(s, y, n, &a), TR_OK);
    TH_CHECKF(a.nonfinite == 3 && a.first == n / 3 + 1 && isnan(a.auc) && isnan(a.logloss),
              "n=2M with 3 non-finite scores: nonfinite %lld first %lld (want 3, %lld), auc %g, logloss %g",
              (long long)a.nonfinite, (long long)a.first, (long long)(n / 3 + 1), a.auc, a.logloss);
    /* a bad label past the middle: refused, the non-finite scores still counted */
    y[n - 100] = 2.0f;
    TH_EQ_ST(op(s, y, n, &a), TR_ERR_ARG);
    TH_CHECKF(a.nonfinite == 3 && a.first == n / 3 + 1, "bad label at n=2M: nonfinite %lld first %lld",
              (long long)a.nonfinite, (long long)a.first);
    tr_free(y);
    tr_free(s);
}

static void test_edges(void)
{
    KT_NEED_OP(KERN_OP_METRICS);
    struct out o;
    /* -0 and +0 tie: [-1(neg), -0(pos), +0(neg), 1(pos)] -> (1 + 0.5 + 1 + 1) / 4 */
    const float s1[4] = {-1.0f, -0.0f, 0.0f, 1.0f}, y1[4] = {0, 1, 0, 1};
    TH_EQ_ST(op(s1, y1, 4, &o), TR_OK);
    TH_CHECKF(o.auc == 0.875, "mixed zeros: auc %.17g, want 0.875", o.auc);
    /* infinities are not finite scores: counted, first position, no AUC or log loss */
    float s2[8] = {0.1f, 0.2f, 0.3f, INFINITY, 0.5f, NAN, 0.7f, -INFINITY}, y2[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    TH_EQ_ST(op(s2, y2, 8, &o), TR_OK);
    TH_CHECKF(o.nonfinite == 3 && o.first == 3, "nonfinite %lld first %lld, want 3 and 3", (long long)o.nonfinite,
              (long long)o.first);
    TH_CHECKF(isnan(o.auc) && isnan(o.logloss), "non-finite scores: auc %g logloss %g, want NaN", o.auc, o.logloss);
    /* one class: no AUC, a log loss */
    const float s3[3] = {0.5f, -1.0f, 2.0f}, y3[3] = {1, 1, 1};
    TH_EQ_ST(op(s3, y3, 3, &o), TR_OK);
    TH_CHECKF(isnan(o.auc) && fabs(o.logloss - kern_logloss(s3, y3, 3)) <= 1e-6 * kern_logloss(s3, y3, 3),
              "one class: auc %g logloss %g",
              o.auc, o.logloss);
    /* n = 0 */
    TH_EQ_ST(op(s3, y3, 0, &o), TR_OK);
    TH_CHECKF(o.nonfinite == 0 && o.first == -1 && isnan(o.auc) && isnan(o.logloss), "n = 0: %lld %lld %g %g",
              (long long)o.nonfinite, (long long)o.first, o.auc, o.logloss);
    /* a label other than 0/1 */
    const float y4[4] = {0, 1, 0.5f, 1};
    TH_EQ_ST(op(s1, y4, 4, &o), TR_ERR_ARG);
    /* bad arguments: nothing run */
    int64_t k = 0, f = 0;
    double au = 0, ll = 0;
    struct kern_metrics_args bad = {.n = -1, .nonfinite = &k, .first_nonfinite = &f, .auc = &au, .logloss = &ll};
    TH_EQ_ST(kt_be.i->metrics(kt_be.ctx, &bad), TR_ERR_ARG);
    bad.n = 4; /* no tensors */
    TH_EQ_ST(kt_be.i->metrics(kt_be.ctx, &bad), TR_ERR_ARG);
    bad.n = 0;
    bad.auc = NULL;
    TH_EQ_ST(kt_be.i->metrics(kt_be.ctx, &bad), TR_ERR_ARG);
}

static const struct th_case cases[] = {
    {"metrics_small", test_small},
    {"metrics_large", test_large},
    {"metrics_edges", test_edges},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
