/* test_sumsq.c: parity tests of sumsq (the numeric guards' sum of squares in
 * double) against a long double reference over odd shapes and padded strides,
 * values by hand, bitwise agreement across thread counts, NaN and inf anywhere
 * in a block (and never from the padding columns, which hold sentinel NaNs), and
 * its argument errors, on every backend (kt_main). */
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

/* sum of squares of x (rows, cols; stride ld) in long double. */
static long double ref_sumsq(const float *x, int64_t rows, int64_t cols, int64_t ld)
{
    long double s = 0.0L;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            s += (long double)x[r * ld + c] * (long double)x[r * ld + c];
    return s;
}

static void sumsq_case(int64_t rows, int64_t cols, int64_t ld, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    struct kt_buf x;
    kt_buf_init(&x, rows * ld);
    for (int64_t i = 0; i < rows; i++)
        kt_fill(&r, x.h + i * ld, cols, -3, 3); /* padding columns keep the sentinel NaN */
    kt_upload(&x);
    double got = -1.0;
    struct kern_sumsq_args a = {.x = x.d, .rows = rows, .cols = cols, .ld = ld, .out = &got};
    char what[80];
    snprintf(what, sizeof what, "sumsq %lldx%lld ld=%lld", (long long)rows, (long long)cols, (long long)ld);
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, &a, 1), TR_OK);
    const long double want = ref_sumsq(x.h, rows, cols, ld);
    /* double accumulation of at most 1e6 terms: relative error below 1e-10 */
    TH_CHECKF(fabsl((long double)got - want) <= 1e-10L * want + 1e-300L, "%s: got %.17g want %.17Lg", what, got,
              want);
    kt_download(&x);
    TH_CHECKF(kt_buf_guard_ok(&x) && kt_pad_ok(x.h, rows, cols, ld), "%s: wrote into its input", what);
    kt_buf_release(&x);
}

static void test_sumsq(void)
{
    KT_NEED_OP(KERN_OP_SUMSQ);
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 17, 17}, {3, 5, 8}, {7, 33, 33}, {100, 1, 3}, {1000, 37, 40}, {1, 100003, 100003},
        {2, 16384, 16384}, {3, 16385, 16390}, {40000, 26, 26},
    };
    uint64_t seed = 100;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        sumsq_case(shapes[s][0], shapes[s][1], shapes[s][2], seed++);
}

/* By hand: [[1, 2, (pad)], [3, -4, (pad)]] -> 1 + 4 + 9 + 16 = 30; several blocks
 * in one call each get their own sum; an empty block gives 0. */
static void test_known_values(void)
{
    KT_NEED_OP(KERN_OP_SUMSQ);
    struct kt_buf x;
    kt_buf_init(&x, 6);
    const float v[6] = {1, 2, 1e30f, 3, -4, 1e30f};
    memcpy(x.h, v, sizeof v);
    kt_upload(&x);
    double out[3] = {-1, -1, -1};
    struct kern_sumsq_args a[3] = {
        {.x = x.d, .rows = 2, .cols = 2, .ld = 3, .out = &out[0]},
        {.x = x.d + 3, .rows = 1, .cols = 2, .ld = 2, .out = &out[1]},
        {.x = x.d, .rows = 0, .cols = 2, .ld = 3, .out = &out[2]},
    };
    TH_EQ_ST_REQ(kt_be.i->sumsq(kt_be.ctx, a, 3), TR_OK);
    TH_NEAR(out[0], 30.0, 0.0, 0.0);
    TH_NEAR(out[1], 25.0, 0.0, 0.0);
    TH_NEAR(out[2], 0.0, 0.0, 0.0);
    /* FLT_MAX squared is finite in double: the sum of finite floats never overflows */
    x.h[0] = 3.4028234663852886e38f;
    x.h[1] = -3.4028234663852886e38f;
    kt_upload(&x);
    a[0].rows = 1;
    TH_EQ_ST_REQ(kt_be.i->sumsq(kt_be.ctx, a, 1), TR_OK);
    TH_CHECKF(isfinite(out[0]) && out[0] > 2.3e77, "sumsq of two FLT_MAX: %g", out[0]);
    kt_buf_release(&x);
}

/* Instances on 1, 2 and 3 threads give the same bits. */
static void test_threads(void)
{
    KT_NEED_OP(KERN_OP_SUMSQ);
    const int64_t rows = 5000, cols = 37, ld = 41;
    struct kt_rng r = kt_rng_seed(7);
    float *h = tr_malloc((size_t)(rows * ld) * sizeof(float));
    TH_REQUIRE(h);
    kt_fill(&r, h, rows * ld, -1, 1);
    const struct kern_backend saved = kt_be;
    double got[3][2];
    for (int t = 0; t < 3; t++) {
        struct kern_backend be;
        kt_open(t + 1, &be);
        kt_be = be;
        float *d = kt_dev_dup(h, (size_t)(rows * ld) * sizeof(float));
        struct kern_sumsq_args a[2] = {{.x = d, .rows = rows, .cols = cols, .ld = ld, .out = &got[t][0]},
                                       {.x = d, .rows = 1, .cols = rows * ld, .ld = rows * ld, .out = &got[t][1]}};
        TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, a, 2), TR_OK);
        kt_dev_release(d, (size_t)(rows * ld) * sizeof(float));
        kt_be = saved;
        kern_backend_close(&be);
    }
    for (int t = 1; t < 3; t++)
        TH_CHECKF(memcmp(got[t], got[0], sizeof got[0]) == 0, "%d threads: %.17g %.17g, 1 thread: %.17g %.17g",
                  t + 1, got[t][0], got[t][1], got[0][0], got[0][1]);
    tr_free(h);
}

/* One NaN, +inf or -inf anywhere in the block makes the sum NaN or +inf; inf and
 * NaN together give NaN. The padding columns hold NaNs (sentinels) that must not
 * count. */
static void test_nonfinite(void)
{
    KT_NEED_OP(KERN_OP_SUMSQ);
    const int64_t rows = 300, cols = 70, ld = 73;
    const int64_t where[] = {0, cols - 1, 150 * ld + 33, (rows - 1) * ld + cols - 1};
    struct kt_rng r = kt_rng_seed(9);
    struct kt_buf x;
    kt_buf_init(&x, rows * ld);
    for (int64_t i = 0; i < rows; i++)
        kt_fill(&r, x.h + i * ld, cols, -1, 1);
    kt_upload(&x);
    double out = -1.0;
    struct kern_sumsq_args a = {.x = x.d, .rows = rows, .cols = cols, .ld = ld, .out = &out};
    TH_EQ_ST_REQ(kt_be.i->sumsq(kt_be.ctx, &a, 1), TR_OK);
    TH_CHECKF(isfinite(out), "finite block (NaN padding) gives %g", out);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t w = 0; w < TR_ARRAY_SIZE(where); w++) {
        for (size_t b = 0; b < TR_ARRAY_SIZE(bad); b++) {
            const float keep = x.h[where[w]];
            kt_h2d(x.d + where[w], &bad[b], sizeof(float));
            out = 0.0;
            TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, &a, 1), TR_OK);
            if (isnan(bad[b]))
                TH_CHECKF(isnan(out), "NaN at %lld: sum %g", (long long)where[w], out);
            else
                TH_CHECKF(isinf(out) && out > 0, "%g at %lld: sum %g", (double)bad[b], (long long)where[w], out);
            kt_h2d(x.d + where[w], &keep, sizeof(float));
        }
    }
    const float inf = INFINITY, nan = NAN;
    kt_h2d(x.d + where[0], &inf, sizeof inf);
    kt_h2d(x.d + where[3], &nan, sizeof nan);
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, &a, 1), TR_OK);
    TH_CHECKF(isnan(out), "inf and NaN: sum %g", out);
    kt_buf_release(&x);
}

/* Negative sizes, ld < cols or a NULL output are TR_ERR_ARG with nothing written. */
static void test_args(void)
{
    KT_NEED_OP(KERN_OP_SUMSQ);
    struct kt_buf x;
    kt_buf_init(&x, 4);
    for (int i = 0; i < 4; i++)
        x.h[i] = 1.0f;
    kt_upload(&x);
    double out = -7.0, out2 = -7.0;
    struct kern_sumsq_args a[2] = {{.x = x.d, .rows = 2, .cols = 2, .ld = 2, .out = &out2},
                                   {.x = x.d, .rows = -1, .cols = 2, .ld = 2, .out = &out}};
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, a, 2), TR_ERR_ARG);
    a[1].rows = 1;
    a[1].cols = -2;
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, a, 2), TR_ERR_ARG);
    a[1].cols = 3;
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, a, 2), TR_ERR_ARG); /* ld 2 < cols 3 */
    a[1].cols = 2;
    a[1].out = NULL;
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, a, 2), TR_ERR_ARG);
    TH_NEAR(out, -7.0, 0.0, 0.0);
    TH_NEAR(out2, -7.0, 0.0, 0.0);
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, a, 0), TR_OK);
    TH_EQ_ST(kt_be.i->sumsq(kt_be.ctx, a, -1), TR_ERR_ARG);
    kt_download(&x);
    TH_CHECK(kt_buf_guard_ok(&x));
    kt_buf_release(&x);
}

static const struct th_case cases[] = {
    {"sumsq", test_sumsq},
    {"known_values", test_known_values},
    {"threads", test_threads},
    {"nonfinite", test_nonfinite},
    {"args", test_args},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
