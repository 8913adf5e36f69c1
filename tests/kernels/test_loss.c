/* test_loss.c: parity tests of bce (binary cross-entropy with logits) against a
 * naive double reference for logits over [-50, 50] and labels 0/1: loss_sum,
 * dlogits with grad_scale, optional outputs, a finite-difference check of dlogits
 * and extreme logits, on every backend (loss_sum is a host pointer; the tensors are
 * in backend memory). It does not test the evaluation metrics (test_metrics.c). */
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

static void bce_case(int64_t n, float gs, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    struct kt_buf x, y, dl, dl2;
    kt_buf_init(&x, n);
    kt_buf_init(&y, n);
    kt_buf_init(&dl, n);
    kt_buf_init(&dl2, n);
    double *want = tr_malloc((size_t)(n + 1) * sizeof(double));
    make_inputs(&r, x.h, y.h, n);
    kt_upload(&x);
    kt_upload(&y);
    double want_sum = 0.0, abs_sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double l = ref_loss(x.h[i], y.h[i]);
        want_sum += l;
        abs_sum += fabs(l);
        want[i] = (double)gs * ref_grad(x.h[i], y.h[i]);
    }
    double loss = -1.0;
    struct kern_bce_args a = {.n = n, .logits = x.d, .labels = y.d, .loss_sum = &loss, .dlogits = dl.d,
                              .grad_scale = gs};
    char what[64];
    snprintf(what, sizeof what, "bce n=%lld gs=%g", (long long)n, (double)gs);
    enum tr_status rc = kt_be.i->bce(kt_be.ctx, &a);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    kt_download(&dl);
    /* per-sample losses are float: relative 1e-6 each (log1pf/expf are a few ulp) */
    TH_CHECKF(fabs(loss - want_sum) <= 1e-6 * abs_sum + 1e-12, "%s: loss_sum %.12g want %.12g", what, loss,
              want_sum);
    KT_CLOSE(what, dl.h, want, n, 1e-7 * fabs(gs), 1e-5, 1e-10);
    TH_CHECKF(kt_buf_guard_ok(&dl), "%s: wrote outside dlogits", what);
    /* dlogits NULL: the same loss; loss_sum NULL: the same gradient */
    double loss2 = -2.0;
    a.dlogits = NULL;
    a.loss_sum = &loss2;
    TH_EQ_ST(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
    TH_CHECKF(memcmp(&loss, &loss2, sizeof loss) == 0, "%s: loss_sum changes without dlogits: %.17g vs %.17g",
              what, loss, loss2);
    a.dlogits = dl2.d;
    a.loss_sum = NULL;
    TH_EQ_ST(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
    kt_download(&dl2);
    KT_SAME_BITS(what, dl.h, dl2.h, n);
    TH_CHECKF(kt_buf_guard_ok(&dl2), "%s: wrote outside dlogits (loss_sum NULL)", what);
    tr_free(want);
    kt_buf_release(&dl2);
    kt_buf_release(&dl);
    kt_buf_release(&y);
    kt_buf_release(&x);
}

static void test_bce(void)
{
    KT_NEED_OP(KERN_OP_BCE);
    const int64_t sizes[] = {1, 2, 17, 1023, 1024, 1025, 5000};
    const float scales[] = {1.0f, 1.0f / 4096, -0.5f};
    uint64_t seed = 10;
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(scales); j++)
            bce_case(sizes[i], scales[j], seed++);
}

/* Values by hand: x = 0 gives log 2 and gradient 1/2 - y. n = 0 gives 0. */
static void test_known_values(void)
{
    KT_NEED_OP(KERN_OP_BCE);
    struct kt_buf x, y, dl;
    kt_buf_init(&x, 2);
    kt_buf_init(&y, 2);
    kt_buf_init(&dl, 2);
    x.h[0] = x.h[1] = 0.0f;
    y.h[0] = 0.0f;
    y.h[1] = 1.0f;
    kt_upload(&x);
    kt_upload(&y);
    double loss = -1;
    struct kern_bce_args a = {.n = 2, .logits = x.d, .labels = y.d, .loss_sum = &loss, .dlogits = dl.d,
                              .grad_scale = 2};
    TH_EQ_ST_REQ(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
    kt_download(&dl);
    TH_NEAR(loss, 2 * log(2.0), 1e-6, 0.0);
    const double want_dl[2] = {1.0, -1.0};
    KT_CLOSE("dlogits at x = 0", dl.h, want_dl, 2, 0.0, 0.0, 0.0);
    a.n = 0;
    loss = -1;
    TH_EQ_ST(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
    TH_NEAR(loss, 0.0, 0.0, 0.0);
    a.n = -1;
    TH_EQ_ST(kt_be.i->bce(kt_be.ctx, &a), TR_ERR_ARG);
    kt_download(&dl);
    TH_CHECK(kt_buf_guard_ok(&dl));
    kt_buf_release(&dl);
    kt_buf_release(&y);
    kt_buf_release(&x);
}

/* ---- finite differences ----------------------------------------------------------------
 * d loss / d x from the kernel's own loss, one sample per call, central differences
 * with h = 1/32: the truncation error h^2/6 |l'''| <= 2e-5 and the float rounding of
 * the per-sample loss (half an ulp of |l| <= 8.001, i.e. 5e-7, divided by 2h) <= 1e-5
 * stay below the 1e-4 tolerance for |x| <= 8. */
static void test_fd(void)
{
    KT_NEED_OP(KERN_OP_BCE);
    struct kt_rng r = kt_rng_seed(77);
    const float h = 1.0f / 32, gs = 1.0f;
    struct kt_buf xb, yb, dlb; /* one sample */
    kt_buf_init(&xb, 1);
    kt_buf_init(&yb, 1);
    kt_buf_init(&dlb, 1);
    int nbad = 0;
    for (int i = 0; i < 400; i++) {
        float x = kt_uniform(&r, -8.0f, 8.0f), y = (float)(i & 1), dl;
        double lp, lm;
        float xp = x + h, xm = x - h;
        kt_h2d(xb.d, &x, sizeof x);
        kt_h2d(yb.d, &y, sizeof y);
        struct kern_bce_args a = {.n = 1, .logits = xb.d, .labels = yb.d, .loss_sum = &lp, .dlogits = dlb.d,
                                  .grad_scale = gs};
        TH_EQ_ST_REQ(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
        kt_d2h(&dl, dlb.d, sizeof dl);
        a.dlogits = NULL;
        kt_h2d(xb.d, &xp, sizeof xp);
        TH_EQ_ST_REQ(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
        kt_h2d(xb.d, &xm, sizeof xm);
        a.loss_sum = &lm;
        TH_EQ_ST_REQ(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
        double fd = (lp - lm) / ((double)xp - (double)xm);
        if (!(fabs(fd - dl) <= 1e-4) && nbad++ < 5)
            th_failf_(__FILE__, __LINE__, "x=%g y=%g: dlogits %.7g, fd %.7g", (double)x, (double)y, (double)dl, fd);
    }
    TH_EQ(nbad, 0);
    kt_download(&dlb);
    TH_CHECK(kt_buf_guard_ok(&dlb));
    kt_buf_release(&dlb);
    kt_buf_release(&yb);
    kt_buf_release(&xb);
}

/* Extreme logits give finite losses and gradients (no exp overflow, no inf - inf). */
static void test_extreme(void)
{
    KT_NEED_OP(KERN_OP_BCE);
    const float xs[] = {-FLT_MAX, -1e30f, -1e4f, -100.0f, -88.8f, 88.8f, 100.0f, 1e4f, 1e30f, FLT_MAX};
    struct kt_buf xb, yb, dlb; /* one sample */
    kt_buf_init(&xb, 1);
    kt_buf_init(&yb, 1);
    kt_buf_init(&dlb, 1);
    for (size_t i = 0; i < TR_ARRAY_SIZE(xs); i++) {
        for (int yi = 0; yi < 2; yi++) {
            float x = xs[i], y = (float)yi, dl = NAN;
            double loss = NAN;
            kt_h2d(xb.d, &x, sizeof x);
            kt_h2d(yb.d, &y, sizeof y);
            kt_h2d(dlb.d, &dl, sizeof dl);
            struct kern_bce_args a = {.n = 1, .logits = xb.d, .labels = yb.d, .loss_sum = &loss, .dlogits = dlb.d,
                                      .grad_scale = 1.0f};
            TH_EQ_ST_REQ(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
            kt_d2h(&dl, dlb.d, sizeof dl);
            TH_CHECKF(isfinite(loss) && isfinite(dl), "x=%g y=%d: loss %g dlogits %g", (double)x, yi, loss,
                      (double)dl);
            double want = ref_loss(x, y), wg = ref_grad(x, y);
            TH_CHECKF(fabs(loss - want) <= 1e-6 * fabs(want) + 1e-30, "x=%g y=%d: loss %.9g want %.9g", (double)x, yi,
                      loss, want);
            TH_CHECKF(fabs(dl - wg) <= 1e-7, "x=%g y=%d: dlogits %.9g want %.9g", (double)x, yi, (double)dl, wg);
        }
    }
    kt_buf_release(&dlb);
    kt_buf_release(&yb);
    kt_buf_release(&xb);
}

static const struct th_case cases[] = {
    {"bce", test_bce},
    {"known_values", test_known_values},
    {"fd", test_fd},
    {"extreme", test_extreme},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
