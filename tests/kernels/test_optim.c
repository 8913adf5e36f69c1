/* test_optim.c: parity tests of dense_update (SGD and Adagrad over a flat parameter
 * array, with grad_scale) against a double reference over several steps, and its
 * argument errors. The sparse (embedding) optimizer is tested in test_embedding.c. */
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

static void update_case(struct kern_backend *be, enum kern_optim kind, int64_t n, float gs, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    float *p = kt_guarded(n), *acc = kt_guarded(n), *g = tr_malloc((size_t)(n + 1) * sizeof(float));
    double *wp = tr_malloc((size_t)(n + 1) * sizeof(double)), *wa = tr_malloc((size_t)(n + 1) * sizeof(double));
    kt_fill(&r, p, n, -1, 1);
    kt_fill(&r, acc, n, 0, 0.5f);
    for (int64_t i = 0; i < n; i++) {
        wp[i] = p[i];
        wa[i] = acc[i];
    }
    const struct kern_optim_hp hp = {kind, 0.05f, 1e-7f};
    char what[64];
    snprintf(what, sizeof what, "dense_update %s n=%lld gs=%g", kind == KERN_OPT_SGD ? "sgd" : "adagrad",
             (long long)n, (double)gs);
    for (int step = 0; step < 3; step++) {
        kt_fill(&r, g, n, -2, 2);
        if (n > 3)
            g[3] = 0.0f; /* a zero gradient: Adagrad must not divide 0 by 0 */
        for (int64_t i = 0; i < n; i++) {
            double gg = (double)gs * g[i];
            if (kind == KERN_OPT_SGD) {
                wp[i] -= (double)hp.lr * gg;
            } else {
                wa[i] += gg * gg;
                wp[i] -= (double)hp.lr * gg / (sqrt(wa[i]) + (double)hp.eps);
            }
        }
        struct kern_dense_update_args a = {.n = n, .param = p, .grad = g,
                                           .accum = kind == KERN_OPT_ADAGRAD ? acc : NULL, .grad_scale = gs,
                                           .hp = hp};
        TH_CHECKF(be->i->dense_update(be->ctx, &a) == TR_OK, "%s step %d failed", what, step);
    }
    kt_close(what, p, wp, n, 1e-6, 1e-5, 1e-10);
    if (kind == KERN_OPT_ADAGRAD)
        kt_close(what, acc, wa, n, 1e-7, 1e-5, 1e-10);
    TH_CHECKF(kt_guard_ok(p, n) && kt_guard_ok(acc, n), "%s: wrote outside param or accum", what);
    tr_free(wa);
    tr_free(wp);
    tr_free(g);
    kt_guarded_free(acc);
    kt_guarded_free(p);
}

static void test_sgd(void)
{
    struct kern_backend be = cpu();
    const int64_t sizes[] = {1, 7, 17, 1037, 100003};
    uint64_t seed = 1;
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++) {
        update_case(&be, KERN_OPT_SGD, sizes[i], 1.0f, seed++);
        update_case(&be, KERN_OPT_SGD, sizes[i], 1.0f / 3, seed++);
    }
}

static void test_adagrad(void)
{
    struct kern_backend be = cpu();
    const int64_t sizes[] = {1, 7, 17, 1037, 100003};
    uint64_t seed = 100;
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++) {
        update_case(&be, KERN_OPT_ADAGRAD, sizes[i], 1.0f, seed++);
        update_case(&be, KERN_OPT_ADAGRAD, sizes[i], 0.25f, seed++);
    }
}

/* By hand: SGD p = 1, g = 2, gs = 0.5, lr = 0.25 -> 0.75. Adagrad acc = 3, g = 1
 * -> acc 4, p = 1 - 0.5 * 1 / (2 + 0) = 0.75. */
static void test_known_values(void)
{
    struct kern_backend be = cpu();
    float p = 1.0f, g = 2.0f, acc = 3.0f;
    struct kern_dense_update_args a = {.n = 1, .param = &p, .grad = &g, .grad_scale = 0.5f,
                                       .hp = {KERN_OPT_SGD, 0.25f, 0.0f}};
    TH_REQUIRE(be.i->dense_update(be.ctx, &a) == TR_OK);
    TH_CHECK(p == 0.75f);
    p = 1.0f;
    a.accum = &acc;
    a.hp = (struct kern_optim_hp){KERN_OPT_ADAGRAD, 0.5f, 0.0f};
    TH_REQUIRE(be.i->dense_update(be.ctx, &a) == TR_OK);
    TH_CHECK(acc == 4.0f && p == 0.75f);
    /* SGD ignores accum */
    a.hp.kind = KERN_OPT_SGD;
    TH_REQUIRE(be.i->dense_update(be.ctx, &a) == TR_OK);
    TH_CHECK(acc == 4.0f);
}

/* Adagrad without accum and n < 0 are TR_ERR_ARG and change nothing; n = 0 is fine. */
static void test_args(void)
{
    struct kern_backend be = cpu();
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
    struct kern_dense_update_args a = {.n = 4, .param = p, .grad = g, .accum = NULL, .grad_scale = 1.0f,
                                       .hp = {KERN_OPT_ADAGRAD, 0.1f, 1e-8f}};
    TH_CHECK(be.i->dense_update(be.ctx, &a) == TR_ERR_ARG);
    TH_CHECK(p[0] == 1 && p[1] == 2 && p[2] == 3 && p[3] == 4);
    a.hp.kind = KERN_OPT_SGD;
    a.n = -1;
    TH_CHECK(be.i->dense_update(be.ctx, &a) == TR_ERR_ARG);
    a.n = 0;
    TH_CHECK(be.i->dense_update(be.ctx, &a) == TR_OK);
    TH_CHECK(p[0] == 1 && p[1] == 2 && p[2] == 3 && p[3] == 4);
}

static const struct th_case cases[] = {
    {"sgd", test_sgd},
    {"adagrad", test_adagrad},
    {"known_values", test_known_values},
    {"args", test_args},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
