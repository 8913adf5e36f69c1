/* test_cross.c: parity tests of the DCNv2 cross combine (cross_fwd, cross_bwd)
 * against naive double references written here from the definition
 * (y = x0 * h + xl; dh = dy * x0; dx0 (+)= dy * h (+ dy for the first layer)),
 * over odd shapes and row strides wider than the columns (the padding must stay
 * untouched), every accumulate/residual combination, the in-place forms kern.h
 * allows (y on xl, dh on dy), bitwise agreement of instances on 1, 2 and 5
 * threads, and argument errors. Runs on every backend (kt_main). */
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

/* (rows, cols) shapes; each runs with ld == cols and with ld == cols + 3 */
static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {17, 40}, {64, 129}, {5, 1000}, {0, 8}};

/* Fills columns [0, cols) of p (rows, ld) from r, leaving the padding as it is. */
static void fill_block(struct kt_rng *r, float *p, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t i = 0; i < rows; i++)
        kt_fill(r, p + i * ld, cols, -2, 2);
}

static void check_fwd(int64_t rows, int64_t cols, int64_t ld, int inplace, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t n = rows * ld;
    struct kt_buf x0, h, xl, y;
    kt_buf_init(&x0, n);
    kt_buf_init(&h, n);
    kt_buf_init(&xl, n);
    kt_buf_init(&y, n);
    fill_block(&r, x0.h, rows, cols, ld);
    fill_block(&r, h.h, rows, cols, ld);
    fill_block(&r, xl.h, rows, cols, ld);
    kt_upload(&x0);
    kt_upload(&h);
    kt_upload(&xl);
    double *ref = tr_malloc((size_t)(n ? n : 1) * sizeof(double));
    TH_REQUIRE(ref != NULL);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t k = i * ld + c;
            ref[k] = (double)x0.h[k] * (double)h.h[k] + (double)xl.h[k];
        }
    struct kt_buf *out = inplace ? &xl : &y;
    struct kern_cross_fwd_args a = {rows, cols, x0.d, ld, h.d, ld, xl.d, ld, out->d, ld};
    TH_EQ_ST(kt_be.i->cross_fwd(kt_be.ctx, &a), TR_OK);
    kt_download(out);
    char what[96];
    snprintf(what, sizeof what, "cross_fwd %lldx%lld ld %lld%s", (long long)rows, (long long)cols, (long long)ld,
             inplace ? " in place" : "");
    /* one product and one sum in float: within 2 ulps of the double result */
    KT_CLOSE2D(what, out->h, ld, ref, ld, rows, cols, 1e-6, 3e-7, 1e-12);
    TH_CHECKF(kt_buf_guard_ok(out), "%s: wrote outside its buffer", what);
    TH_CHECKF(kt_pad_ok(out->h, rows, cols, ld) || inplace, "%s: wrote into the padding", what);
    tr_free(ref);
    kt_buf_release(&y);
    kt_buf_release(&xl);
    kt_buf_release(&h);
    kt_buf_release(&x0);
}

static void test_fwd(void)
{
    KT_NEED_OP(KERN_OP_CROSS_FWD);
    uint64_t seed = 100;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int pad = 0; pad <= 3; pad += 3)
            for (int inplace = 0; inplace < 2; inplace++)
                check_fwd(shapes[s][0], shapes[s][1], shapes[s][1] + pad, inplace, seed++);
}

static void check_bwd(int64_t rows, int64_t cols, int64_t ld, int acc, int res, int inplace, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t n = rows * ld;
    struct kt_buf x0, h, dy, dh, dx0;
    kt_buf_init(&x0, n);
    kt_buf_init(&h, n);
    kt_buf_init(&dy, n);
    kt_buf_init(&dh, n);
    kt_buf_init(&dx0, n);
    fill_block(&r, x0.h, rows, cols, ld);
    fill_block(&r, h.h, rows, cols, ld);
    fill_block(&r, dy.h, rows, cols, ld);
    fill_block(&r, dx0.h, rows, cols, ld); /* the accumulator's old value (ignored unless acc) */
    kt_upload(&x0);
    kt_upload(&h);
    kt_upload(&dy);
    kt_upload(&dx0);
    size_t bytes = (size_t)(n ? n : 1) * sizeof(double);
    double *ref_dh = tr_malloc(bytes), *ref_dx0 = tr_malloc(bytes);
    TH_REQUIRE(ref_dh && ref_dx0);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t k = i * ld + c;
            double g = dy.h[k];
            ref_dh[k] = g * (double)x0.h[k];
            ref_dx0[k] = (acc ? (double)dx0.h[k] : 0.0) + g * (double)h.h[k] + (res ? g : 0.0);
        }
    struct kt_buf *dhb = inplace ? &dy : &dh;
    struct kern_cross_bwd_args a = {rows, cols, x0.d, ld, h.d, ld, dy.d, ld, dhb->d, ld, dx0.d, ld, acc, res};
    TH_EQ_ST(kt_be.i->cross_bwd(kt_be.ctx, &a), TR_OK);
    kt_download(dhb);
    kt_download(&dx0);
    char what[128];
    snprintf(what, sizeof what, "cross_bwd %lldx%lld ld %lld acc %d res %d%s: dh", (long long)rows,
             (long long)cols, (long long)ld, acc, res, inplace ? " (dh on dy)" : "");
    KT_CLOSE2D(what, dhb->h, ld, ref_dh, ld, rows, cols, 1e-6, 3e-7, 1e-12);
    TH_CHECKF(kt_buf_guard_ok(dhb) && (inplace || kt_pad_ok(dhb->h, rows, cols, ld)), "%s: wrote outside", what);
    what[strlen(what) - 2] = '\0';
    strcat(what, "dx0");
    /* up to three terms summed in float */
    KT_CLOSE2D(what, dx0.h, ld, ref_dx0, ld, rows, cols, 2e-6, 6e-7, 1e-12);
    TH_CHECKF(kt_buf_guard_ok(&dx0) && kt_pad_ok(dx0.h, rows, cols, ld), "%s: wrote outside", what);
    tr_free(ref_dh);
    tr_free(ref_dx0);
    kt_buf_release(&dx0);
    kt_buf_release(&dh);
    kt_buf_release(&dy);
    kt_buf_release(&h);
    kt_buf_release(&x0);
}

static void test_bwd(void)
{
    KT_NEED_OP(KERN_OP_CROSS_BWD);
    uint64_t seed = 200;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int pad = 0; pad <= 3; pad += 3)
            for (int mode = 0; mode < 8; mode++)
                check_bwd(shapes[s][0], shapes[s][1], shapes[s][1] + pad, mode & 1, (mode >> 1) & 1, mode >> 2,
                          seed++);
}

/* Separate instances on 1, 2 and 5 threads give the same bits (a row split that
 * changed any element's arithmetic would show here). */
static void test_threads(void)
{
    KT_NEED_OP(KERN_OP_CROSS_FWD);
    KT_NEED_OP(KERN_OP_CROSS_BWD);
    const int64_t rows = 301, cols = 77, n = rows * cols;
    float *in = tr_malloc((size_t)(4 * n) * sizeof(float)), *got[3] = {NULL, NULL, NULL};
    TH_REQUIRE(in != NULL);
    struct kt_rng r = kt_rng_seed(7);
    kt_fill(&r, in, 4 * n, -3, 3);
    static const int threads[3] = {1, 2, 5};
    const struct kern_backend all = kt_be;
    for (int t = 0; t < 3; t++) {
        struct kern_backend be;
        kt_open(threads[t], &be);
        kt_be = be;
        /* x0 | h | dy | dx0 in, then y | dh | dx0 out */
        float *d = kt_dev_dup(in, (size_t)(4 * n) * sizeof(float));
        float *y = kt_dev_alloc((size_t)(2 * n) * sizeof(float));
        struct kern_cross_fwd_args f = {rows, cols, d, cols, d + n, cols, d + 2 * n, cols, y, cols};
        struct kern_cross_bwd_args b = {rows,      cols, d,    cols, d + n, cols, d + 2 * n, cols,
                                        y + n, cols, d + 3 * n, cols, 1,    1};
        TH_EQ_ST(kt_be.i->cross_fwd(kt_be.ctx, &f), TR_OK);
        TH_EQ_ST(kt_be.i->cross_bwd(kt_be.ctx, &b), TR_OK);
        got[t] = tr_malloc((size_t)(3 * n) * sizeof(float));
        TH_REQUIRE(got[t] != NULL);
        kt_d2h(got[t], y, (size_t)(2 * n) * sizeof(float));
        kt_d2h(got[t] + 2 * n, d + 3 * n, (size_t)n * sizeof(float));
        kt_dev_release(y, (size_t)(2 * n) * sizeof(float));
        kt_dev_release(d, (size_t)(4 * n) * sizeof(float));
        kt_be = all;
        kern_backend_close(&be);
    }
    for (int t = 1; t < 3; t++) {
        char what[64];
        snprintf(what, sizeof what, "cross fwd+bwd on %d threads vs 1", threads[t]);
        TH_CHECK(KT_SAME_BITS(what, got[t], got[0], 3 * n));
    }
    for (int t = 0; t < 3; t++)
        tr_free(got[t]);
    tr_free(in);
}

/* Negative sizes and strides below the width: TR_ERR_ARG, nothing written. */
static void test_args(void)
{
    KT_NEED_OP(KERN_OP_CROSS_FWD);
    KT_NEED_OP(KERN_OP_CROSS_BWD);
    struct kt_buf a, o;
    kt_buf_init(&a, 64);
    kt_buf_init(&o, 64);
    memset(a.h, 0, 64 * sizeof(float));
    kt_upload(&a);
    struct kern_cross_fwd_args f = {4, 8, a.d, 8, a.d, 8, a.d, 8, o.d, 8};
    struct kern_cross_bwd_args b = {4, 8, a.d, 8, a.d, 8, a.d, 8, o.d, 8, o.d + 32, 8, 0, 0};
    f.rows = -1;
    TH_EQ_ST(kt_be.i->cross_fwd(kt_be.ctx, &f), TR_ERR_ARG);
    f.rows = 4;
    f.cols = -2;
    TH_EQ_ST(kt_be.i->cross_fwd(kt_be.ctx, &f), TR_ERR_ARG);
    f.cols = 8;
    f.ldh = 7;
    TH_EQ_ST(kt_be.i->cross_fwd(kt_be.ctx, &f), TR_ERR_ARG);
    f.ldh = 8;
    f.ldy = 3;
    TH_EQ_ST(kt_be.i->cross_fwd(kt_be.ctx, &f), TR_ERR_ARG);
    b.lddx0 = 7;
    TH_EQ_ST(kt_be.i->cross_bwd(kt_be.ctx, &b), TR_ERR_ARG);
    b.lddx0 = 8;
    b.ldx0 = 1;
    TH_EQ_ST(kt_be.i->cross_bwd(kt_be.ctx, &b), TR_ERR_ARG);
    b.ldx0 = 8;
    b.rows = -3;
    TH_EQ_ST(kt_be.i->cross_bwd(kt_be.ctx, &b), TR_ERR_ARG);
    kt_download(&o);
    for (int i = 0; i < 64; i++)
        TH_CHECKF(kt_is_sentinel(&o.h[i]), "a refused call wrote element %d", i);
    TH_CHECK(kt_buf_guard_ok(&o));
    kt_buf_release(&o);
    kt_buf_release(&a);
}

static const struct th_case cases[] = {
    {"fwd", test_fwd},
    {"bwd", test_bwd},
    {"threads", test_threads},
    {"args", test_args},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
