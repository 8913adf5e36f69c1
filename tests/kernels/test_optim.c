/* test_optim.c: parity tests of dense_update (SGD and Adagrad over a flat parameter
 * array, with grad_scale) against a double reference over several steps, and its
 * argument errors, on every backend. The sparse (embedding) optimizer is tested in
 * test_embedding.c. */
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

static void update_case(enum kern_optim kind, int64_t n, float gs, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    struct kt_buf p, acc, g;
    kt_buf_init(&p, n);
    kt_buf_init(&acc, n);
    kt_buf_init(&g, n);
    double *wp = tr_malloc((size_t)(n + 1) * sizeof(double)), *wa = tr_malloc((size_t)(n + 1) * sizeof(double));
    kt_fill(&r, p.h, n, -1, 1);
    kt_fill(&r, acc.h, n, 0, 0.5f);
    kt_upload(&p);
    kt_upload(&acc);
    for (int64_t i = 0; i < n; i++) {
        wp[i] = p.h[i];
        wa[i] = acc.h[i];
    }
    const struct kern_optim_hp hp = {kind, 0.05f, 1e-7f};
    char what[64];
    snprintf(what, sizeof what, "dense_update %s n=%lld gs=%g", kind == KERN_OPT_SGD ? "sgd" : "adagrad",
             (long long)n, (double)gs);
    for (int step = 0; step < 3; step++) {
        kt_fill(&r, g.h, n, -2, 2);
        if (n > 3)
            g.h[3] = 0.0f; /* a zero gradient: Adagrad must not divide 0 by 0 */
        kt_upload(&g);
        for (int64_t i = 0; i < n; i++) {
            double gg = (double)gs * g.h[i];
            if (kind == KERN_OPT_SGD) {
                wp[i] -= (double)hp.lr * gg;
            } else {
                wa[i] += gg * gg;
                wp[i] -= (double)hp.lr * gg / (sqrt(wa[i]) + (double)hp.eps);
            }
        }
        struct kern_dense_update_args a = {.n = n, .param = p.d, .grad = g.d,
                                           .accum = kind == KERN_OPT_ADAGRAD ? acc.d : NULL, .grad_scale = gs,
                                           .hp = hp};
        enum tr_status rc = kt_be.i->dense_update(kt_be.ctx, &a);
        TH_CHECKF(rc == TR_OK, "%s step %d: %s", what, step, tr_strerror(rc));
    }
    kt_download(&p);
    kt_download(&acc);
    KT_CLOSE(what, p.h, wp, n, 1e-6, 1e-5, 1e-10);
    if (kind == KERN_OPT_ADAGRAD)
        KT_CLOSE(what, acc.h, wa, n, 1e-7, 1e-5, 1e-10);
    TH_CHECKF(kt_buf_guard_ok(&p) && kt_buf_guard_ok(&acc), "%s: wrote outside param or accum", what);
    tr_free(wa);
    tr_free(wp);
    kt_buf_release(&g);
    kt_buf_release(&acc);
    kt_buf_release(&p);
}

static void test_sgd(void)
{
    KT_NEED_OP(KERN_OP_DENSE_UPDATE);
    const int64_t sizes[] = {1, 7, 17, 1037, 100003};
    uint64_t seed = 1;
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++) {
        update_case(KERN_OPT_SGD, sizes[i], 1.0f, seed++);
        update_case(KERN_OPT_SGD, sizes[i], 1.0f / 3, seed++);
    }
}

static void test_adagrad(void)
{
    KT_NEED_OP(KERN_OP_DENSE_UPDATE);
    const int64_t sizes[] = {1, 7, 17, 1037, 100003};
    uint64_t seed = 100;
    for (size_t i = 0; i < TR_ARRAY_SIZE(sizes); i++) {
        update_case(KERN_OPT_ADAGRAD, sizes[i], 1.0f, seed++);
        update_case(KERN_OPT_ADAGRAD, sizes[i], 0.25f, seed++);
    }
}

/* p, g and acc (one float each) in backend memory, set from the host. */
static void put3(struct kt_buf *p, float pv, struct kt_buf *g, float gv, struct kt_buf *acc, float av)
{
    p->h[0] = pv;
    g->h[0] = gv;
    acc->h[0] = av;
    kt_upload(p);
    kt_upload(g);
    kt_upload(acc);
}

/* By hand: SGD p = 1, g = 2, gs = 0.5, lr = 0.25 -> 0.75. Adagrad acc = 3, g = 1
 * -> acc 4, p = 1 - 0.5 * 1 / (2 + 0) = 0.75. */
static void test_known_values(void)
{
    KT_NEED_OP(KERN_OP_DENSE_UPDATE);
    struct kt_buf p, g, acc;
    kt_buf_init(&p, 1);
    kt_buf_init(&g, 1);
    kt_buf_init(&acc, 1);
    put3(&p, 1.0f, &g, 2.0f, &acc, 3.0f);
    struct kern_dense_update_args a = {.n = 1, .param = p.d, .grad = g.d, .grad_scale = 0.5f,
                                       .hp = {KERN_OPT_SGD, 0.25f, 0.0f}};
    TH_EQ_ST_REQ(kt_be.i->dense_update(kt_be.ctx, &a), TR_OK);
    kt_download(&p);
    TH_NEAR(p.h[0], 0.75, 0.0, 0.0);
    /* Adagrad from p = 1, acc = 3 with gs * g = 1 */
    put3(&p, 1.0f, &g, 2.0f, &acc, 3.0f);
    a.accum = acc.d;
    a.hp = (struct kern_optim_hp){KERN_OPT_ADAGRAD, 0.5f, 0.0f};
    TH_EQ_ST_REQ(kt_be.i->dense_update(kt_be.ctx, &a), TR_OK);
    kt_download(&p);
    kt_download(&acc);
    TH_NEAR(acc.h[0], 4.0, 0.0, 0.0);
    TH_NEAR(p.h[0], 0.75, 0.0, 0.0);
    /* SGD ignores accum */
    a.hp.kind = KERN_OPT_SGD;
    TH_EQ_ST_REQ(kt_be.i->dense_update(kt_be.ctx, &a), TR_OK);
    kt_download(&acc);
    TH_NEAR(acc.h[0], 4.0, 0.0, 0.0);
    TH_CHECK(kt_buf_guard_ok(&p) && kt_buf_guard_ok(&acc));
    kt_buf_release(&acc);
    kt_buf_release(&g);
    kt_buf_release(&p);
}

/* Adagrad without accum and n < 0 are TR_ERR_ARG and change nothing; n = 0 is fine. */
static void test_args(void)
{
    KT_NEED_OP(KERN_OP_DENSE_UPDATE);
    const double p0[4] = {1, 2, 3, 4};
    struct kt_buf p, g;
    kt_buf_init(&p, 4);
    kt_buf_init(&g, 4);
    for (int i = 0; i < 4; i++) {
        p.h[i] = (float)p0[i];
        g.h[i] = 1.0f;
    }
    kt_upload(&p);
    kt_upload(&g);
    struct kern_dense_update_args a = {.n = 4, .param = p.d, .grad = g.d, .accum = NULL, .grad_scale = 1.0f,
                                       .hp = {KERN_OPT_ADAGRAD, 0.1f, 1e-8f}};
    TH_EQ_ST(kt_be.i->dense_update(kt_be.ctx, &a), TR_ERR_ARG);
    kt_download(&p);
    KT_CLOSE("param after adagrad without accum", p.h, p0, 4, 0.0, 0.0, 0.0);
    a.hp.kind = KERN_OPT_SGD;
    a.n = -1;
    TH_EQ_ST(kt_be.i->dense_update(kt_be.ctx, &a), TR_ERR_ARG);
    a.n = 0;
    TH_EQ_ST(kt_be.i->dense_update(kt_be.ctx, &a), TR_OK);
    kt_download(&p);
    KT_CLOSE("param after n < 0 and n = 0", p.h, p0, 4, 0.0, 0.0, 0.0);
    TH_CHECK(kt_buf_guard_ok(&p));
    kt_buf_release(&g);
    kt_buf_release(&p);
}

static const struct th_case cases[] = {
    {"sgd", test_sgd},
    {"adagrad", test_adagrad},
    {"known_values", test_known_values},
    {"args", test_args},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
