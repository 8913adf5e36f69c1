/* test_loss.c: parity tests of bce (binary cross-entropy with logits) against a
 * naive double reference for logits over [-50, 50] and labels 0/1: loss_sum,
 * dlogits with grad_scale, optional outputs, a finite-difference check of dlogits
 * and extreme logits. It does not test the evaluation metrics (test_metrics.c). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../kernels/kmath.h"
#include "kt_util.h"

static struct kern_backend cpu(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 0);
    return be;
}

/* Per-sample loss in double: log(1 + e^x) - x y, written stably. */
static double ref_loss(double x, double y)
{
    return fmax(x, 0.0) - x * y + log1p(exp(-fabs(x)));
}

static double ref_grad(double x, double y)
{
    return 1.0 / (1.0 + exp(-x)) - y;
}

/* n logits spread over [-50, 50] (with the ends, 0 and small values) and labels 0/1. */
static void make_inputs(struct kt_rng *r, float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        x[i] = kt_uniform(r, -50.0f, 50.0f);
        if (i % 7 == 0)
            x[i] = kt_uniform(r, -3.0f, 3.0f);
        y[i] = (float)(kt_next(r) >> 63);
    }
    const float special[] = {-50.0f, 50.0f, 0.0f, -0.0f, 1e-7f, -1e-7f, 16.0f, -16.0f};
    for (size_t k = 0; k < TR_ARRAY_SIZE(special) && (int64_t)k < n; k++)
        x[k * 2] = special[k];
}

static void bce_case(struct kern_backend *be, int64_t n, float gs, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    float *x = tr_malloc((size_t)(n + 1) * sizeof(float));
    float *y = tr_malloc((size_t)(n + 1) * sizeof(float));
    float *dl = kt_guarded(n);
    double *want = tr_malloc((size_t)(n + 1) * sizeof(double));
    make_inputs(&r, x, y, n);
    double want_sum = 0.0, abs_sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double l = ref_loss(x[i], y[i]);
        want_sum += l;
        abs_sum += fabs(l);
        want[i] = (double)gs * ref_grad(x[i], y[i]);
    }
    double loss = -1.0;
    struct kern_bce_args a = {.n = n, .logits = x, .labels = y, .loss_sum = &loss, .dlogits = dl, .grad_scale = gs};
    char what[64];
    snprintf(what, sizeof what, "bce n=%lld gs=%g", (long long)n, (double)gs);
    TH_CHECKF(be->i->bce(be->ctx, &a) == TR_OK, "%s failed", what);
    /* per-sample losses are float: relative 1e-6 each (log1pf/expf are a few ulp) */
    TH_CHECKF(fabs(loss - want_sum) <= 1e-6 * abs_sum + 1e-12, "%s: loss_sum %.12g want %.12g", what, loss,
              want_sum);
    kt_close(what, dl, want, n, 1e-7 * fabs(gs), 1e-5, 1e-10);
    TH_CHECKF(kt_guard_ok(dl, n), "%s: wrote outside dlogits", what);
    /* dlogits NULL: the same loss; loss_sum NULL: the same gradient */
    double loss2 = -2.0;
    a.dlogits = NULL;
    a.loss_sum = &loss2;
    TH_CHECK(be->i->bce(be->ctx, &a) == TR_OK);
    TH_CHECKF(memcmp(&loss, &loss2, sizeof loss) == 0, "%s: loss_sum changes without dlogits", what);
    float *dl2 = tr_malloc((size_t)(n + 1) * sizeof(float));
    a.dlogits = dl2;
    a.loss_sum = NULL;
    TH_CHECK(be->i->bce(be->ctx, &a) == TR_OK);
    kt_same_bits(what, dl, dl2, n);
    tr_free(dl2);
    tr_free(want);
    kt_guarded_free(dl);
    tr_free(y);
    tr_free(x);
}

static void test_bce(void)
{
    struct kern_backend be = cpu();
    const int64_t sizes[] = {1, 2, 17, 1023, 1024, 1025, 5000};
    const float scales[] = {1.0f, 1.0f / 4096, -0.5f};
    uint64_t seed = 10;
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(scales); j++)
            bce_case(&be, sizes[i], scales[j], seed++);
}

/* Values by hand: x = 0 gives log 2 and gradient 1/2 - y. n = 0 gives 0. */
static void test_known_values(void)
{
    struct kern_backend be = cpu();
    const float x[2] = {0.0f, 0.0f}, y[2] = {0.0f, 1.0f};
    float dl[2];
    double loss = -1;
    struct kern_bce_args a = {.n = 2, .logits = x, .labels = y, .loss_sum = &loss, .dlogits = dl, .grad_scale = 2};
    TH_REQUIRE(be.i->bce(be.ctx, &a) == TR_OK);
    TH_CHECKF(fabs(loss - 2 * log(2.0)) < 1e-6, "loss %.9g", loss);
    TH_CHECK(dl[0] == 1.0f && dl[1] == -1.0f);
    a.n = 0;
    loss = -1;
    TH_CHECK(be.i->bce(be.ctx, &a) == TR_OK);
    TH_CHECK(loss == 0.0);
    a.n = -1;
    TH_CHECK(be.i->bce(be.ctx, &a) == TR_ERR_ARG);
}

/* ---- finite differences ----------------------------------------------------------------
 * d loss / d x from the kernel's own loss, one sample per call, central differences
 * with h = 1/32: the truncation error h^2/6 |l'''| <= 2e-5 and the float rounding of
 * the per-sample loss (half an ulp of |l| <= 8.001, i.e. 5e-7, divided by 2h) <= 1e-5
 * stay below the 1e-4 tolerance for |x| <= 8. */
static void test_fd(void)
{
    struct kern_backend be = cpu();
    struct kt_rng r = kt_rng_seed(77);
    const float h = 1.0f / 32, gs = 1.0f;
    int nbad = 0;
    for (int i = 0; i < 400; i++) {
        float x = kt_uniform(&r, -8.0f, 8.0f), y = (float)(i & 1), dl;
        double lp, lm;
        float xp = x + h, xm = x - h;
        struct kern_bce_args a = {.n = 1, .logits = &x, .labels = &y, .loss_sum = &lp, .dlogits = &dl,
                                  .grad_scale = gs};
        TH_REQUIRE(be.i->bce(be.ctx, &a) == TR_OK);
        a.dlogits = NULL;
        a.logits = &xp;
        TH_REQUIRE(be.i->bce(be.ctx, &a) == TR_OK);
        a.logits = &xm;
        a.loss_sum = &lm;
        TH_REQUIRE(be.i->bce(be.ctx, &a) == TR_OK);
        double fd = (lp - lm) / ((double)xp - (double)xm);
        if (!(fabs(fd - dl) <= 1e-4) && nbad++ < 5)
            th_failf_(__FILE__, __LINE__, "x=%g y=%g: dlogits %.7g, fd %.7g", (double)x, (double)y, (double)dl, fd);
    }
    TH_CHECK(nbad == 0);
}

/* Extreme logits give finite losses and gradients (no exp overflow, no inf - inf). */
static void test_extreme(void)
{
    struct kern_backend be = cpu();
    const float xs[] = {-FLT_MAX, -1e30f, -1e4f, -100.0f, -88.8f, 88.8f, 100.0f, 1e4f, 1e30f, FLT_MAX};
    for (size_t i = 0; i < TR_ARRAY_SIZE(xs); i++) {
        for (int yi = 0; yi < 2; yi++) {
            float x = xs[i], y = (float)yi, dl = NAN;
            double loss = NAN;
            struct kern_bce_args a = {.n = 1, .logits = &x, .labels = &y, .loss_sum = &loss, .dlogits = &dl,
                                      .grad_scale = 1.0f};
            TH_REQUIRE(be.i->bce(be.ctx, &a) == TR_OK);
            TH_CHECKF(isfinite(loss) && isfinite(dl), "x=%g y=%d: loss %g dlogits %g", (double)x, yi, loss,
                      (double)dl);
            double want = ref_loss(x, y), wg = ref_grad(x, y);
            TH_CHECKF(fabs(loss - want) <= 1e-6 * fabs(want) + 1e-30, "x=%g y=%d: loss %.9g want %.9g", (double)x, yi,
                      loss, want);
            TH_CHECKF(fabs(dl - wg) <= 1e-7, "x=%g y=%d: dlogits %.9g want %.9g", (double)x, yi, (double)dl, wg);
        }
    }
}

static const struct th_case cases[] = {
    {"bce", test_bce},
    {"known_values", test_known_values},
    {"fd", test_fd},
    {"extreme", test_extreme},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
