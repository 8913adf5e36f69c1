/* test_dense.c: parity tests of gemm (all transpose combinations, odd shapes,
 * padded leading dimensions) and of the fused bias + activation epilogue and its
 * backward, against naive double references; then a finite-difference check of
 * a whole layer y = relu(x W + b), on every backend (kt_main). It does not
 * benchmark the BLAS. */
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

/* ---- gemm ---------------------------------------------------------------------------- */

/* C = alpha op(A) op(B) + beta C in double; c holds the old C on entry. */
static void ref_gemm(const struct kern_gemm_args *g, const float *c_old, double *c)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double s = 0.0;
            for (int64_t p = 0; p < g->k; p++) {
                double av = g->trans_a ? g->a[p * g->lda + i] : g->a[i * g->lda + p];
                double bv = g->trans_b ? g->b[j * g->ldb + p] : g->b[p * g->ldb + j];
                s += av * bv;
            }
            double old = c_old[i * g->ldc + j];
            c[i * g->n + j] = (double)g->alpha * s + (g->beta == 0.0f ? 0.0 : (double)g->beta * old);
        }
}

/* epi: 0 a plain GEMM, 1 + bias, 2 + bias then ReLU, 3 ReLU alone (the epilogue of kern.h). */
static void gemm_case(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, uint64_t seed,
                      int epi)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
    const int64_t lda = acols + 3, ldb = bcols + 1, ldc = n + 5;
    struct kt_buf a, b, c, bias;
    kt_buf_init(&a, arows * lda);
    kt_buf_init(&b, brows * ldb);
    kt_buf_init(&c, m * ldc);
    kt_buf_init(&bias, n);
    kt_fill(&r, bias.h, n, -1, 1);
    kt_upload(&bias);
    float *c_old = tr_malloc((size_t)(m * ldc) * sizeof(float));
    double *ref = tr_malloc((size_t)(m * n) * sizeof(double));
    kt_fill(&r, a.h, arows * lda, -1, 1);
    kt_fill(&r, b.h, brows * ldb, -1, 1);
    for (int64_t i = 0; i < m; i++)
        kt_fill(&r, c.h + i * ldc, n, -1, 1); /* padding columns keep the sentinel */
    memcpy(c_old, c.h, (size_t)(m * ldc) * sizeof(float));
    kt_upload(&a);
    kt_upload(&b);
    kt_upload(&c);
    struct kern_gemm_args g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
                               .a = a.h, .lda = lda, .b = b.h, .ldb = ldb, .c = c.h, .ldc = ldc};
    ref_gemm(&g, c_old, ref); /* the same call on the host mirrors */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = ref[i * n + j] + (epi == 1 || epi == 2 ? (double)bias.h[j] : 0.0);
            ref[i * n + j] = (epi == 2 || epi == 3) && v < 0.0 ? 0.0 : v;
        }
    g.a = a.d;
    g.b = b.d;
    g.c = c.d;
    g.bias = epi == 1 || epi == 2 ? bias.d : NULL;
    g.act = epi >= 2 ? KERN_ACT_RELU : KERN_ACT_NONE;
    enum tr_status rc = kt_be.i->gemm(kt_be.ctx, &g);
    kt_download(&c);
    char what[112];
    snprintf(what, sizeof what, "gemm %c%c m=%lld n=%lld k=%lld alpha=%g beta=%g epilogue %d", ta ? 'T' : 'N',
             tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, (double)alpha, (double)beta, epi);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    /* float accumulation of k products of |x| <= 1: error grows like sqrt(k) eps */
    double atol = 1e-6 * (1.0 + sqrt((double)k)) * (fabs(alpha) + 1.0);
    KT_CLOSE2D(what, c.h, ldc, ref, n, m, n, atol, 1e-5, 1e-9);
    TH_CHECKF(kt_pad_ok(c.h, m, n, ldc), "%s: wrote into C's padding columns (ldc > n)", what);
    TH_CHECKF(kt_buf_guard_ok(&c), "%s: wrote outside C", what);
    tr_free(ref);
    tr_free(c_old);
    kt_buf_release(&bias);
    kt_buf_release(&c);
    kt_buf_release(&b);
    kt_buf_release(&a);
}

static void test_gemm(void)
{
    KT_NEED_OP(KERN_OP_GEMM);
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 3, 17}, {3, 1, 33}, {17, 33, 1}, {33, 17, 3}, {3, 3, 3},
        {17, 17, 17}, {33, 33, 33}, {64, 1, 128}, {1, 128, 64}, {128, 33, 17}, {5, 7, 300},
    };
    uint64_t seed = 1000;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.0f, seed++, 0);
                gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 0.75f, 0.5f, seed++, 0);
                gemm_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], -2.0f, 1.0f, seed++, 0);
            }
}

/* The optional epilogue: bias, bias + ReLU and ReLU alone after the product, with
 * and without beta (the layer forward of the model is the first kind with ReLU). */
static void test_gemm_epilogue(void)
{
    KT_NEED_OP(KERN_OP_GEMM);
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 17, 33}, {33, 5, 17}, {64, 128, 13}, {129, 65, 31}};
    uint64_t seed = 5000;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int epi = 1; epi <= 3; epi++)
            for (int t = 0; t < 4; t++) {
                gemm_case(t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f, 0.0f, seed++, epi);
                gemm_case(t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], 0.5f, 0.25f, seed++, epi);
            }
}

/* beta = 0 overwrites C (old values, however large, must not leak in); k = 0 gives
 * beta*C; m = 0 or n = 0 is a no-op; negative sizes are TR_ERR_ARG. */
static void test_gemm_edges(void)
{
    KT_NEED_OP(KERN_OP_GEMM);
    const float a0[6] = {1, 2, 3, 4, 5, 6}, b0[6] = {1, 0, 0, 1, 1, 1};
    struct kt_buf a, b, c;
    kt_buf_init(&a, 6);
    kt_buf_init(&b, 6);
    kt_buf_init(&c, 4);
    memcpy(a.h, a0, sizeof a0);
    memcpy(b.h, b0, sizeof b0);
    for (int i = 0; i < 4; i++)
        c.h[i] = 3e38f;
    kt_upload(&a);
    kt_upload(&b);
    kt_upload(&c);
    struct kern_gemm_args g = {.m = 2, .n = 2, .k = 3, .alpha = 1.0f, .beta = 0.0f, .a = a.d, .lda = 3, .b = b.d,
                               .ldb = 2, .c = c.d, .ldc = 2};
    TH_EQ_ST_REQ(kt_be.i->gemm(kt_be.ctx, &g), TR_OK);
    kt_download(&c);
    /* A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[1,1]] */
    const double want_ab[4] = {4, 5, 10, 11};
    KT_CLOSE("beta 0 overwrites C", c.h, want_ab, 4, 0.0, 0.0, 0.0);
    g.k = 0;
    g.beta = 0.5f;
    TH_EQ_ST_REQ(kt_be.i->gemm(kt_be.ctx, &g), TR_OK);
    kt_download(&c);
    const double want_half[4] = {2, 2.5, 5, 5.5};
    KT_CLOSE("k 0 gives beta C", c.h, want_half, 4, 0.0, 0.0, 0.0);
    g.beta = 0.0f;
    TH_EQ_ST_REQ(kt_be.i->gemm(kt_be.ctx, &g), TR_OK);
    kt_download(&c);
    const double want_zero[4] = {0, 0, 0, 0};
    KT_CLOSE("k 0 beta 0 gives 0", c.h, want_zero, 4, 0.0, 0.0, 0.0);
    for (int i = 0; i < 4; i++)
        c.h[i] = 9.0f;
    kt_upload(&c);
    g.k = 3;
    g.m = 0;
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &g), TR_OK);
    g.m = 2;
    g.n = 0;
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &g), TR_OK);
    kt_download(&c);
    const double want_nine[4] = {9, 9, 9, 9};
    KT_CLOSE("m 0 or n 0 is a no-op", c.h, want_nine, 4, 0.0, 0.0, 0.0);
    g.n = -1;
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &g), TR_ERR_ARG);
    g.n = 2;
    g.k = -3;
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &g), TR_ERR_ARG);
    TH_CHECK(kt_buf_guard_ok(&c));
    kt_buf_release(&c);
    kt_buf_release(&b);
    kt_buf_release(&a);
}

/* ---- reduced precision ------------------------------------------------------------------
 * gemm on an instance opened with kern_backend_opts.precision TF32, BF16 or FP16,
 * against the double reference of its fp32 inputs, within the bound kt_util.h's error
 * model gives each element (the operands' rounding, about 4u sum |a b|, plus fp32
 * sums and epilogue) and its NMSE limit; an FP32 instance within that model with
 * u = 0 and within gemm_case's fp32 tolerance. The CPU backend has fp32 and tf32 (which
 * it runs as fp32); bf16 and fp16 skip there. Inputs lie in [-1, 1] (fp16's range).
 * Shapes mix odd sizes (not multiples of 8 or 16: cuBLASLt's unaligned kernels, or
 * dense.cu's fp32 fallback), tight, odd and 16-byte aligned padded leading dimensions,
 * every transpose and epilogue, and m=512 n=384 with k=479 and 512, which tensor-core
 * kernels take. prec_model checks the tolerance itself on the host. */

/* A gemm problem: the call (on the host mirrors), its inputs and C before the call. */
struct gemm_prob {
    struct kern_gemm_args g; /* a, b, c, bias: host mirrors */
    struct kt_buf a, b, c, bias;
    float *c_old;            /* (m, ldc) */
    int epi;                 /* as gemm_case */
};

static int64_t round4(int64_t x)
{
    return (x + 3) / 4 * 4;
}

/* Inputs in [-1, 1] from seed. pad: 0 tight leading dimensions, 1 odd padding (+3,
 * +1, +5), 2 padding that keeps rows 16-byte aligned. Release with prob_release. */
static void prob_init(struct gemm_prob *q, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                      int epi, int pad, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
    const int64_t lda = pad == 0 ? acols : pad == 1 ? acols + 3 : round4(acols) + 4;
    const int64_t ldb = pad == 0 ? bcols : pad == 1 ? bcols + 1 : round4(bcols) + 8;
    const int64_t ldc = pad == 0 ? n : pad == 1 ? n + 5 : round4(n) + 4;
    memset(q, 0, sizeof *q);
    kt_buf_init(&q->a, arows * lda);
    kt_buf_init(&q->b, brows * ldb);
    kt_buf_init(&q->c, m * ldc);
    kt_buf_init(&q->bias, n);
    for (int64_t i = 0; i < arows; i++) /* padding columns keep the sentinel */
        kt_fill(&r, q->a.h + i * lda, acols, -1, 1);
    for (int64_t i = 0; i < brows; i++)
        kt_fill(&r, q->b.h + i * ldb, bcols, -1, 1);
    for (int64_t i = 0; i < m; i++)
        kt_fill(&r, q->c.h + i * ldc, n, -1, 1);
    kt_fill(&r, q->bias.h, n, -1, 1);
    q->c_old = tr_malloc((size_t)(m * ldc) * sizeof(float));
    memcpy(q->c_old, q->c.h, (size_t)(m * ldc) * sizeof(float));
    kt_upload(&q->a);
    kt_upload(&q->b);
    kt_upload(&q->c);
    kt_upload(&q->bias);
    q->epi = epi;
    struct kern_gemm_args g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
                               .a = q->a.h, .lda = lda, .b = q->b.h, .ldb = ldb, .c = q->c.h, .ldc = ldc,
                               .bias = epi == 1 || epi == 2 ? q->bias.h : NULL,
                               .act = epi >= 2 ? KERN_ACT_RELU : KERN_ACT_NONE};
    q->g = g;
}

static void prob_release(struct gemm_prob *q)
{
    tr_free(q->c_old);
    kt_buf_release(&q->bias);
    kt_buf_release(&q->c);
    kt_buf_release(&q->b);
    kt_buf_release(&q->a);
}

/* ref (m, n): the exact result of q in double; bnd (m, n): how far a GEMM in precision
 * t may be from it: |alpha| times the dot product's bound (kt_dot_bound), plus the
 * fp32 roundings of the epilogue (alpha times the sum, + beta C, + bias: gamma_4 of the
 * magnitudes added). A ReLU never widens an error. */
static void ref_gemm_bound(const struct gemm_prob *q, const struct kt_prec *t, double *ref, double *bnd)
{
    const struct kern_gemm_args *g = &q->g;
    const int64_t m = g->m, n = g->n, k = g->k;
    /* op(A) by rows and op(B) by columns, contiguous, with their operands' errors */
    double *ao = tr_malloc((size_t)(m * k) * sizeof(double)), *ae = tr_malloc((size_t)(m * k) * sizeof(double));
    double *bo = tr_malloc((size_t)(n * k) * sizeof(double)), *be = tr_malloc((size_t)(n * k) * sizeof(double));
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) {
            ao[i * k + p] = g->trans_a ? g->a[p * g->lda + i] : g->a[i * g->lda + p];
            ae[i * k + p] = kt_prec_err(t, ao[i * k + p]);
        }
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++) {
            bo[j * k + p] = g->trans_b ? g->b[j * g->ldb + p] : g->b[p * g->ldb + j];
            be[j * k + p] = kt_prec_err(t, bo[j * k + p]);
        }
    const double alpha = g->alpha, beta = g->beta;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            struct kt_dot d = {0.0, 0.0, 0.0, 0};
            for (int64_t p = 0; p < k; p++)
                kt_dot_add(&d, ao[i * k + p], ae[i * k + p], bo[j * k + p], be[j * k + p]);
            const double cv = g->beta == 0.0f ? 0.0 : beta * q->c_old[i * g->ldc + j];
            const double bv = g->bias ? (double)g->bias[j] : 0.0;
            const double v = alpha * d.s + cv + bv;
            ref[i * n + j] = g->act == KERN_ACT_RELU && v < 0.0 ? 0.0 : v;
            bnd[i * n + j] =
                fabs(alpha) * kt_dot_bound(&d) + kt_gamma(4) * (fabs(alpha) * (d.abs + d.err) + fabs(cv) + fabs(bv));
        }
    tr_free(be);
    tr_free(bo);
    tr_free(ae);
    tr_free(ao);
}

static void gemm_prec_case(const struct kt_prec *t, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                           float beta, int epi, int pad, uint64_t seed)
{
    struct gemm_prob q;
    prob_init(&q, ta, tb, m, n, k, alpha, beta, epi, pad, seed);
    const int64_t ldc = q.g.ldc;
    double *ref = tr_malloc((size_t)(m * n) * sizeof(double)), *bnd = tr_malloc((size_t)(m * n) * sizeof(double));
    ref_gemm_bound(&q, t, ref, bnd);
    struct kern_gemm_args g = q.g;
    g.a = q.a.d;
    g.b = q.b.d;
    g.c = q.c.d;
    g.bias = q.g.bias ? q.bias.d : NULL;
    enum tr_status rc = kt_be.i->gemm(kt_be.ctx, &g);
    kt_download(&q.c);
    char what[160];
    snprintf(what, sizeof what, "%s gemm %c%c m=%lld n=%lld k=%lld ld %lld %lld %lld alpha=%g beta=%g epilogue %d",
             kern_precision_name(t->prec), ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k,
             (long long)g.lda, (long long)g.ldb, (long long)ldc, (double)alpha, (double)beta, epi);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    if (rc == TR_OK) {
        KT_BOUNDED(what, q.c.h, ldc, ref, bnd, n, m, n, t->nmse);
        if (t->prec == KERN_PREC_FP32) /* and as gemm_case asks of fp32 */
            KT_CLOSE2D(what, q.c.h, ldc, ref, n, m, n, 1e-6 * (1.0 + sqrt((double)k)) * (fabs(alpha) + 1.0), 1e-5,
                       1e-9);
    }
    TH_CHECKF(kt_pad_ok(q.c.h, m, n, ldc), "%s: wrote into C's padding columns (ldc > n)", what);
    TH_CHECKF(kt_buf_guard_ok(&q.c), "%s: wrote outside C", what);
    tr_free(bnd);
    tr_free(ref);
    prob_release(&q);
}

static void gemm_prec(enum kern_precision p)
{
    KT_NEED_OP(KERN_OP_GEMM);
    struct kern_backend be, outer;
    KT_ENTER_PREC(p, &be, &outer);
    const struct kt_prec t = kt_prec_of(p);
    static const int64_t shapes[][3] = {
        {1, 1, 1},     {3, 17, 33},  {17, 33, 1},  {33, 5, 17},  {7, 9, 300},   {64, 128, 13},
        {129, 65, 31}, {16, 16, 16}, {64, 64, 64}, {96, 40, 72}, {100, 36, 52}, {128, 96, 80},
    };
    uint64_t seed = 7000 + 1000 * (uint64_t)p;
    /* every transpose of every shape; the epilogue, padding and alpha/beta rotate */
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int tr = 0; tr < 4; tr++) {
            const int v = (int)s + tr, odd = v & 1;
            gemm_prec_case(&t, tr & 1, tr >> 1, shapes[s][0], shapes[s][1], shapes[s][2], odd ? 0.75f : 1.0f,
                           odd ? 0.5f : 0.0f, v % 4, v % 3, seed++);
        }
    /* large: an odd k (unaligned rows unless padded) in every transpose, then the
     * aligned shape of a layer's forward (fused bias + ReLU) and of its weight gradient */
    static const int big_epi[4] = {2, 0, 0, 1}, big_pad[4] = {2, 1, 2, 2};
    for (int tr = 0; tr < 4; tr++)
        gemm_prec_case(&t, tr & 1, tr >> 1, 512, 384, 479, 1.0f, 0.0f, big_epi[tr], big_pad[tr], seed++);
    gemm_prec_case(&t, 0, 0, 512, 384, 512, 1.0f, 0.0f, 2, 0, seed++);
    gemm_prec_case(&t, 1, 0, 512, 384, 512, 0.5f, 1.0f, 0, 0, seed++);
    kt_leave_prec(&outer, &be);
}

static void test_gemm_fp32(void)
{
    gemm_prec(KERN_PREC_FP32);
}

static void test_gemm_tf32(void)
{
    gemm_prec(KERN_PREC_TF32);
}

static void test_gemm_bf16(void)
{
    gemm_prec(KERN_PREC_BF16);
}

static void test_gemm_fp16(void)
{
    gemm_prec(KERN_PREC_FP16);
}

/* km_float_to_bf16 (the operands of a bf16 gemm on CUDA) is the upper half of
 * km_round_mantissa(x, 7, round to nearest even), written independently: on 2^20
 * random bit patterns and the edges (ties both ways, the largest finite values that
 * carry into inf, subnormals, inf); a NaN stays a NaN. Host code: the same on every
 * backend. */
static void test_bf16_bits(void)
{
    static const uint32_t edge[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f817fffu, 0x7f7fffffu, 0x7f7f8000u,
                                    0x7f7f7fffu, 0xff7fffffu, 0x00000001u, 0x00008000u, 0x00018000u, 0x7f800000u,
                                    0xff800000u, 0x80000000u, 0x00000000u, 0x3fffffffu};
    struct kt_rng r = kt_rng_seed(77);
    int bad = 0;
    for (int i = 0; i < (1 << 20) + (int)(sizeof edge / sizeof edge[0]); i++) {
        const uint32_t u = i < (int)(sizeof edge / sizeof edge[0]) ? edge[i] : (uint32_t)kt_next(&r);
        float x, ref;
        memcpy(&x, &u, sizeof x);
        const uint16_t got = km_float_to_bf16(x);
        if (isnan(x)) {
            if ((got & 0x7f80u) != 0x7f80u || (got & 0x7fu) == 0) {
                if (bad < 5)
                    th_failf_(__FILE__, __LINE__, "bf16 of NaN 0x%08x is 0x%04x, not a NaN", u, got);
                bad++;
            }
            continue;
        }
        ref = km_round_mantissa(x, 7, 0);
        uint32_t ru;
        memcpy(&ru, &ref, sizeof ru);
        if (got != (uint16_t)(ru >> 16) || (ru & 0xffffu) != 0) {
            if (bad < 5)
                th_failf_(__FILE__, __LINE__, "bf16 of 0x%08x: 0x%04x, want 0x%04x", u, got, (unsigned)(ru >> 16));
            bad++;
        }
    }
    TH_CHECKF(bad == 0, "%d values rounded differently", bad);
    TH_CHECKF(km_float_to_bf16(1.0f + 0x1p-8f) == 0x3f80u && km_float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82u,
              "ties to even");
}

/* What could go wrong in a GEMM, for prec_model. */
enum { RIGHT = 0, WRONG_TRANS_B, WRONG_NO_BIAS, WRONG_NO_RELU, WRONG_LDA, WRONG_COUNT_ };
static const char *const wrong_name[WRONG_COUNT_] = {"right", "B transposed", "no bias", "no ReLU",
                                                     "A's padding ignored"};

/* out (m, n): q computed as a GEMM in precision t computes it (the operands rounded
 * to nearest, or truncated when chop; the products summed in order in fp32, then the
 * epilogue in fp32), with the mistake `wrong`: B read the other way round (n == k),
 * no bias, no ReLU, or A read with its width as leading dimension. */
static void emulate_gemm(const struct gemm_prob *q, const struct kt_prec *t, int chop, int wrong, float *out)
{
    const struct kern_gemm_args *g = &q->g;
    const int64_t lda = wrong == WRONG_LDA ? (g->trans_a ? g->m : g->k) : g->lda;
    const int tb = wrong == WRONG_TRANS_B ? !g->trans_b : g->trans_b;
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < g->k; p++) {
                const float av = g->trans_a ? g->a[p * lda + i] : g->a[i * lda + p];
                const float bv = tb ? g->b[j * g->ldb + p] : g->b[p * g->ldb + j];
                acc += kt_prec_round(t, av, chop) * kt_prec_round(t, bv, chop);
            }
            float v = g->alpha * acc;
            if (g->beta != 0.0f)
                v += g->beta * q->c_old[i * g->ldc + j];
            if (g->bias && wrong != WRONG_NO_BIAS)
                v += g->bias[j];
            if (g->act == KERN_ACT_RELU && wrong != WRONG_NO_RELU)
                v = km_relu(v);
            out[i * g->n + j] = v;
        }
}

/* The tolerance itself, on the host (no backend op): for tf32, bf16 and fp16, GEMMs
 * emulated in that precision (operands rounded to nearest and truncated) and an exact
 * fp32 GEMM lie within the bounds; a bf16 GEMM does not pass for a tf32 one; and
 * wrong results (B transposed, no bias, no ReLU, A's padding ignored) fail even in
 * bf16. Two setups: a plain product (the largest relative rounding error) and one
 * with beta and bias + ReLU (a bias that is a small part of each output). The NMSE
 * seen are printed as TAP comments. */
static void test_prec_model(void)
{
    if (strcmp(kt_be.i->name, "cpu") != 0)
        TH_SKIP("a check of the tolerance on the host: it runs under [cpu]");
    static const int64_t shapes[][3] = {{96, 80, 80}, {64, 48, 479}};
    static const enum kern_precision precs[] = {KERN_PREC_TF32, KERN_PREC_BF16, KERN_PREC_FP16};
    const struct kt_prec fp32 = kt_prec_of(KERN_PREC_FP32), tf32 = kt_prec_of(KERN_PREC_TF32),
                         bf16 = kt_prec_of(KERN_PREC_BF16);
    uint64_t seed = 9000;
    for (int setup = 0; setup < 2; setup++)
        for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
            for (int tr = 0; tr < 4; tr += 3) {
                const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                struct gemm_prob q;
                prob_init(&q, tr & 1, tr >> 1, m, n, k, 1.0f, setup ? 0.5f : 0.0f, setup ? 2 : 0, 1, seed++);
                double *ref = tr_malloc((size_t)(m * n) * sizeof(double));
                double *bnd = tr_malloc((size_t)(m * n) * sizeof(double));
                float *out = tr_malloc((size_t)(m * n) * sizeof(float));
                char shape[64];
                snprintf(shape, sizeof shape, "%lldx%lldx%lld %c%c beta %g epilogue %d", (long long)m, (long long)n,
                         (long long)k, tr & 1 ? 'T' : 'N', tr >> 1 ? 'T' : 'N', (double)q.g.beta, q.epi);
                for (size_t pi = 0; pi < TR_ARRAY_SIZE(precs); pi++) {
                    const struct kt_prec t = kt_prec_of(precs[pi]);
                    const char *pn = kern_precision_name(t.prec);
                    char line[512];
                    int len;
                    double e;
                    ref_gemm_bound(&q, &t, ref, bnd);
                    emulate_gemm(&q, &fp32, 0, RIGHT, out);
                    TH_CHECKF(KT_COUNT_OUT_OF_BOUNDS(out, n, ref, bnd, n, m, n, t.nmse, &e) == 0,
                              "%s bound, %s: rejects an exact fp32 GEMM (nmse %.3g)", pn, shape, e);
                    len = snprintf(line, sizeof line, "# %s %s: nmse limit %.2g; fp32 %.2g", pn, shape, t.nmse, e);
                    for (int chop = 0; chop < 2; chop++) {
                        emulate_gemm(&q, &t, chop, RIGHT, out);
                        TH_CHECKF(KT_COUNT_OUT_OF_BOUNDS(out, n, ref, bnd, n, m, n, t.nmse, &e) == 0,
                                  "%s bound, %s: rejects a %s GEMM (operands %s): nmse %.3g", pn, shape, pn,
                                  chop ? "truncated" : "rounded", e);
                        len += snprintf(line + len, sizeof line - (size_t)len, ", %s %.2g",
                                        chop ? "truncated" : "rounded", e);
                    }
                    len += snprintf(line + len, sizeof line - (size_t)len, "; wrong (elements out, nmse):");
                    for (int w = RIGHT + 1; w < WRONG_COUNT_; w++) {
                        if ((w == WRONG_TRANS_B && n != k) || (w == WRONG_NO_BIAS && !q.g.bias) ||
                            (w == WRONG_NO_RELU && q.g.act != KERN_ACT_RELU))
                            continue;
                        emulate_gemm(&q, &t, 0, w, out);
                        const int bad = KT_COUNT_OUT_OF_BOUNDS(out, n, ref, bnd, n, m, n, t.nmse, &e);
                        TH_CHECKF(bad > 0, "%s bound, %s: accepts a GEMM with %s (nmse %.3g)", pn, shape, wrong_name[w],
                                  e);
                        len += snprintf(line + len, sizeof line - (size_t)len, " %s %d %.2g,", wrong_name[w],
                                        bad - (e > t.nmse), e);
                    }
                    printf("%s\n", line);
                }
                /* a tf32 instance whose GEMM ran in bf16 */
                double e;
                ref_gemm_bound(&q, &tf32, ref, bnd);
                emulate_gemm(&q, &bf16, 0, RIGHT, out);
                const int bad = KT_COUNT_OUT_OF_BOUNDS(out, n, ref, bnd, n, m, n, tf32.nmse, &e);
                TH_CHECKF(bad > 0, "tf32 bound, %s: accepts a bf16 GEMM (nmse %.3g)", shape, e);
                printf("# bf16 GEMM under the tf32 bound, %s: elements out %d, nmse %.2g\n", shape,
                       bad - (e > tf32.nmse), e);
                tr_free(out);
                tr_free(bnd);
                tr_free(ref);
                prob_release(&q);
            }
}

/* ---- bias + activation ----------------------------------------------------------------- */

static void bias_act_case(int64_t rows, int64_t cols, int relu, int with_bias, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t ldy = cols + 3;
    struct kt_buf y, bias;
    kt_buf_init(&y, rows * ldy);
    kt_buf_init(&bias, cols);
    float *want = tr_malloc((size_t)(rows * ldy) * sizeof(float));
    for (int64_t i = 0; i < rows; i++)
        kt_fill(&r, y.h + i * ldy, cols, -1, 1);
    kt_fill(&r, bias.h, cols, -0.5f, 0.5f);
    memcpy(want, y.h, (size_t)(rows * ldy) * sizeof(float));
    /* one rounding per element (y + b), so the float reference is exact */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float v = want[i * ldy + j] + (with_bias ? bias.h[j] : 0.0f);
            want[i * ldy + j] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
    kt_upload(&y);
    kt_upload(&bias);
    struct kern_bias_act_fwd_args a = {.rows = rows, .cols = cols, .y = y.d, .ldy = ldy,
                                       .bias = with_bias ? bias.d : NULL, .act = relu ? KERN_ACT_RELU : KERN_ACT_NONE};
    TH_EQ_ST(kt_be.i->bias_act_fwd(kt_be.ctx, &a), TR_OK);
    kt_download(&y);
    char what[80];
    snprintf(what, sizeof what, "bias_act_fwd %lldx%lld relu=%d bias=%d", (long long)rows, (long long)cols, relu,
             with_bias);
    KT_SAME_BITS(what, y.h, want, rows * ldy); /* includes the untouched padding */
    TH_CHECKF(kt_buf_guard_ok(&y), "%s: wrote outside y", what);
    tr_free(want);
    kt_buf_release(&bias);
    kt_buf_release(&y);
}

static void test_bias_act_fwd(void)
{
    KT_NEED_OP(KERN_OP_BIAS_ACT_FWD);
    static const int64_t shapes[][2] = {{1, 1}, {1, 17}, {5, 3}, {7, 33}, {64, 100}, {3, 128}};
    uint64_t seed = 2000;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int relu = 0; relu < 2; relu++)
            for (int wb = 0; wb < 2; wb++)
                bias_act_case(shapes[s][0], shapes[s][1], relu, wb, seed++);
}

static void bias_act_bwd_case(int64_t rows, int64_t cols, int relu, int accumulate, int with_db, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t ldy = cols + 2, lddy = cols + 5;
    struct kt_buf y, dy, db;
    kt_buf_init(&y, rows * ldy);
    kt_buf_init(&dy, rows * lddy);
    kt_buf_init(&db, cols);
    float *db0 = tr_malloc((size_t)cols * sizeof(float));
    double *want_dy = tr_malloc((size_t)(rows * cols) * sizeof(double));
    double *want_db = tr_malloc((size_t)cols * sizeof(double));
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) {
            /* a forward output: a quarter of the entries are ReLU zeros */
            float v = kt_uniform(&r, -0.3f, 1.0f);
            y.h[i * ldy + j] = v > 0.0f ? v : 0.0f;
        }
        kt_fill(&r, dy.h + i * lddy, cols, -1, 1);
    }
    kt_fill(&r, db.h, cols, -1, 1);
    memcpy(db0, db.h, (size_t)cols * sizeof(float));
    for (int64_t j = 0; j < cols; j++)
        want_db[j] = accumulate ? db0[j] : 0.0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double g = dy.h[i * lddy + j];
            if (relu && !(y.h[i * ldy + j] > 0.0f))
                g = 0.0;
            want_dy[i * cols + j] = g;
            want_db[j] += g;
        }
    kt_upload(&y);
    kt_upload(&dy);
    kt_upload(&db);
    struct kern_bias_act_bwd_args a = {.rows = rows, .cols = cols, .y = y.d, .ldy = ldy, .dy = dy.d, .lddy = lddy,
                                       .dbias = with_db ? db.d : NULL, .accumulate = accumulate,
                                       .act = relu ? KERN_ACT_RELU : KERN_ACT_NONE};
    TH_EQ_ST(kt_be.i->bias_act_bwd(kt_be.ctx, &a), TR_OK);
    kt_download(&dy);
    kt_download(&db);
    char what[96];
    snprintf(what, sizeof what, "bias_act_bwd %lldx%lld relu=%d acc=%d db=%d", (long long)rows, (long long)cols,
             relu, accumulate, with_db);
    KT_CLOSE2D(what, dy.h, lddy, want_dy, cols, rows, cols, 0.0, 0.0, 0.0); /* a select: exact */
    if (with_db)
        KT_CLOSE(what, db.h, want_db, cols, 1e-6 * (1.0 + sqrt((double)rows)), 1e-5, 1e-9);
    else
        TH_CHECKF(memcmp(db.h, db0, (size_t)cols * sizeof(float)) == 0, "%s: dbias written although NULL", what);
    TH_CHECKF(kt_pad_ok(dy.h, rows, cols, lddy), "%s: wrote into dy's padding columns", what);
    TH_CHECKF(kt_buf_guard_ok(&dy) && kt_buf_guard_ok(&db), "%s: wrote outside dy or dbias", what);
    tr_free(want_db);
    tr_free(want_dy);
    tr_free(db0);
    kt_buf_release(&db);
    kt_buf_release(&dy);
    kt_buf_release(&y);
}

static void test_bias_act_bwd(void)
{
    KT_NEED_OP(KERN_OP_BIAS_ACT_BWD);
    static const int64_t shapes[][2] = {{1, 1}, {1, 17}, {5, 3}, {7, 33}, {64, 100}, {200, 16}, {3, 129}};
    uint64_t seed = 3000;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int relu = 0; relu < 2; relu++)
            for (int acc = 0; acc < 2; acc++)
                for (int wdb = 0; wdb < 2; wdb++)
                    bias_act_bwd_case(shapes[s][0], shapes[s][1], relu, acc, wdb, seed++);
}

/* A GEMM with a backward epilogue (kern_gemm_args.then) against a double reference
 * (dz = act'(y) * A B^T, dbias its column sums, on top of the old dbias with
 * accumulate) and against the GEMM and bias_act_bwd apart (the CPU makes the
 * product in row blocks, whose rounding may differ from one whole GEMM's: within
 * the GEMM's tolerance); exact zeros where the ReLU was off; rows past one block and
 * not a multiple of it; a mismatched epilogue refused. */
static void gemm_then_case(int64_t m, int64_t n, int64_t k, int relu, int accumulate, int with_db, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t ldc = n + 3;
    struct kt_buf a, b, y, c1, db1;
    kt_buf_init(&a, m * k);
    kt_buf_init(&b, n * k); /* (n, k): the product takes it transposed, as dX = dY W^T */
    kt_buf_init(&y, m * n);
    kt_buf_init(&c1, m * ldc);
    kt_buf_init(&db1, n);
    double *want = tr_malloc((size_t)(m * n) * sizeof(double)), *want_db = tr_malloc((size_t)n * sizeof(double));
    float *db0 = tr_malloc((size_t)n * sizeof(float));
    kt_fill(&r, a.h, m * k, -1, 1);
    kt_fill(&r, b.h, n * k, -1, 1);
    for (int64_t i = 0; i < m * n; i++) {
        float v = kt_uniform(&r, -0.5f, 1.0f);
        y.h[i] = v > 0.0f ? v : 0.0f;
    }
    kt_fill(&r, db1.h, n, -1, 1);
    memcpy(db0, db1.h, (size_t)n * sizeof(float));
    for (int64_t j = 0; j < n; j++)
        want_db[j] = accumulate ? db0[j] : 0.0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double z = 0.0;
            for (int64_t p = 0; p < k; p++)
                z += (double)a.h[i * k + p] * b.h[j * k + p];
            if (relu && !(y.h[i * n + j] > 0.0f))
                z = 0.0;
            want[i * n + j] = z;
            want_db[j] += z;
        }
    kt_upload(&a);
    kt_upload(&b);
    kt_upload(&y);
    kt_upload(&db1);
    const enum kern_act act = relu ? KERN_ACT_RELU : KERN_ACT_NONE;
    struct kern_bias_act_bwd_args e1 = {m, n, y.d, n, c1.d, ldc, with_db ? db1.d : NULL, accumulate, act, NULL};
    struct kern_gemm_args g1 = {0, 1, m, n, k, 1.0f, 0.0f, a.d, k, b.d, k, c1.d, ldc, NULL, KERN_ACT_NONE, &e1, NULL};
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &g1), TR_OK);
    kt_download(&c1);
    kt_download(&db1);
    char what[96];
    snprintf(what, sizeof what, "gemm then %lldx%lldx%lld relu=%d acc=%d db=%d", (long long)m, (long long)n,
             (long long)k, relu, accumulate, with_db);
    KT_CLOSE2D(what, c1.h, ldc, want, n, m, n, 1e-5, 1e-5, 1e-9);
    int zeros = 1;
    for (int64_t i = 0; i < m && relu; i++)
        for (int64_t j = 0; j < n; j++)
            if (!(y.h[i * n + j] > 0.0f) && c1.h[i * ldc + j] != 0.0f)
                zeros = 0;
    TH_CHECKF(zeros, "%s: dz not exactly 0 where the ReLU was off", what);
    if (with_db)
        KT_CLOSE(what, db1.h, want_db, n, 1e-5 * (1.0 + sqrt((double)m)), 1e-5, 1e-9);
    else
        TH_CHECKF(memcmp(db1.h, db0, (size_t)n * sizeof(float)) == 0, "%s: dbias written although NULL", what);
    TH_CHECKF(kt_pad_ok(c1.h, m, n, ldc), "%s: wrote into c's padding columns", what);
    TH_CHECK(kt_buf_guard_ok(&c1) && kt_buf_guard_ok(&db1));
    struct kern_bias_act_bwd_args bad = e1;
    bad.lddy = n; /* not c's stride */
    g1.then = &bad;
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &g1), TR_ERR_ARG);
    tr_free(db0);
    tr_free(want_db);
    tr_free(want);
    kt_buf_release(&db1);
    kt_buf_release(&c1);
    kt_buf_release(&y);
    kt_buf_release(&b);
    kt_buf_release(&a);
}

static void test_gemm_then(void)
{
    KT_NEED_OP(KERN_OP_GEMM);
    KT_NEED_OP(KERN_OP_BIAS_ACT_BWD);
    /* the last: 128-row blocks of its product (1 MiB each at most) */
    static const int64_t shapes[][3] = {{1, 1, 1},     {5, 7, 3},     {128, 16, 8},
                                        {300, 37, 19}, {513, 64, 33}, {300, 2100, 5}};
    uint64_t seed = 4100;
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++)
        for (int relu = 0; relu < 2; relu++)
            for (int acc = 0; acc < 2; acc++)
                gemm_then_case(shapes[s][0], shapes[s][1], shapes[s][2], relu, acc, s % 2 == 0 || relu, seed++);
}

/* The CPU's opt-in fusions (TR_CPU_GEMM_FUSED=1: the forward epilogue in a oneDNN
 * matmul primitive, the backward one on the product's row blocks) pass the same
 * cases; other backends run them as they are. */
static void test_gemm_fused(void)
{
    setenv("TR_CPU_GEMM_FUSED", "1", 1);
    test_gemm_epilogue();
    test_gemm_then();
    unsetenv("TR_CPU_GEMM_FUSED");
}

/* ---- finite differences of a layer ------------------------------------------------------
 * y = relu(x W + b), L = sum R .* y with a random R. The kernels give dy' = relu'(y) R
 * (bias_act_bwd, which also gives db), dW = x^T dy' and dx = dy' W^T (gemm).
 * The finite differences are taken in double of a double re-implementation of the
 * forward, not in float through the kernels: L is piecewise linear, so central
 * differences in double with h = 1e-6 are exact up to ~1e-10, and the tolerance then
 * only has to cover the float rounding of the kernels' gradients (~1e-6). Float
 * differences would need h ~ 1e-2 to beat rounding, which makes ReLU kinks fall
 * inside the step. The kernels' forward is checked against the same double forward,
 * so both directions are tied to one definition. Inputs are chosen so that no
 * pre-activation lies within 1e-4 of the kink (required below). */

struct layer {
    int64_t bsz, kin, nout;
    double *x, *w, *b, *r; /* (bsz, kin), (kin, nout), (nout), (bsz, nout) */
};

static double layer_loss(const struct layer *l)
{
    double loss = 0.0;
    for (int64_t i = 0; i < l->bsz; i++)
        for (int64_t j = 0; j < l->nout; j++) {
            double z = l->b[j];
            for (int64_t p = 0; p < l->kin; p++)
                z += l->x[i * l->kin + p] * l->w[p * l->nout + j];
            loss += l->r[i * l->nout + j] * (z > 0.0 ? z : 0.0);
        }
    return loss;
}

static double fd_entry(const struct layer *l, double *v)
{
    const double h = 1e-6, old = *v;
    *v = old + h;
    double lp = layer_loss(l);
    *v = old - h;
    double lm = layer_loss(l);
    *v = old;
    return (lp - lm) / (2 * h);
}

static void test_fd_layer(void)
{
    KT_NEED_OP(KERN_OP_GEMM);
    KT_NEED_OP(KERN_OP_BIAS_ACT_FWD);
    KT_NEED_OP(KERN_OP_BIAS_ACT_BWD);
    const int64_t bsz = 6, kin = 17, nout = 9;
    struct kt_rng r = kt_rng_seed(4000);
    struct kt_buf x, w, b, y, dy, dw, dx, db;
    kt_buf_init(&x, bsz * kin);
    kt_buf_init(&w, kin * nout);
    kt_buf_init(&b, nout);
    kt_buf_init(&y, bsz * nout);
    kt_buf_init(&dy, bsz * nout);
    kt_buf_init(&dw, kin * nout);
    kt_buf_init(&dx, bsz * kin);
    kt_buf_init(&db, nout);
    double dx_[6 * 17], dw_[17 * 9], db_[9], rr[6 * 9], yref[6 * 9], fd_x[6 * 17], fd_w[17 * 9], fd_b[9];
    kt_fill(&r, x.h, bsz * kin, -1, 1);
    kt_fill(&r, w.h, kin * nout, -0.5f, 0.5f);
    kt_fill(&r, b.h, nout, -0.2f, 0.2f);
    for (int64_t i = 0; i < bsz * nout; i++)
        rr[i] = kt_uniform(&r, -1, 1);
    for (int64_t i = 0; i < bsz * kin; i++)
        dx_[i] = x.h[i];
    for (int64_t i = 0; i < kin * nout; i++)
        dw_[i] = w.h[i];
    for (int64_t i = 0; i < nout; i++)
        db_[i] = b.h[i];
    struct layer l = {bsz, kin, nout, dx_, dw_, db_, rr};
    double min_abs_z = INFINITY;
    for (int64_t i = 0; i < bsz; i++)
        for (int64_t j = 0; j < nout; j++) {
            double z = db_[j];
            for (int64_t p = 0; p < kin; p++)
                z += dx_[i * kin + p] * dw_[p * nout + j];
            min_abs_z = fmin(min_abs_z, fabs(z));
            yref[i * nout + j] = z > 0.0 ? z : 0.0;
        }
    TH_REQUIRE(min_abs_z > 1e-4); /* no kink within reach of the step or of float rounding */
    kt_upload(&x);
    kt_upload(&w);
    kt_upload(&b);
    /* forward through the kernels */
    struct kern_gemm_args g = {.m = bsz, .n = nout, .k = kin, .alpha = 1, .beta = 0, .a = x.d, .lda = kin,
                               .b = w.d, .ldb = nout, .c = y.d, .ldc = nout};
    TH_EQ_ST_REQ(kt_be.i->gemm(kt_be.ctx, &g), TR_OK);
    struct kern_bias_act_fwd_args fa = {.rows = bsz, .cols = nout, .y = y.d, .ldy = nout, .bias = b.d,
                                        .act = KERN_ACT_RELU};
    TH_EQ_ST_REQ(kt_be.i->bias_act_fwd(kt_be.ctx, &fa), TR_OK);
    kt_download(&y);
    KT_CLOSE("layer forward", y.h, yref, bsz * nout, 1e-5, 1e-5, 1e-9);
    /* backward through the kernels */
    for (int64_t i = 0; i < bsz * nout; i++)
        dy.h[i] = (float)rr[i];
    kt_upload(&dy);
    struct kern_bias_act_bwd_args ba = {.rows = bsz, .cols = nout, .y = y.d, .ldy = nout, .dy = dy.d,
                                        .lddy = nout, .dbias = db.d, .accumulate = 0, .act = KERN_ACT_RELU};
    TH_EQ_ST_REQ(kt_be.i->bias_act_bwd(kt_be.ctx, &ba), TR_OK);
    struct kern_gemm_args gw = {.trans_a = 1, .m = kin, .n = nout, .k = bsz, .alpha = 1, .beta = 0, .a = x.d,
                                .lda = kin, .b = dy.d, .ldb = nout, .c = dw.d, .ldc = nout};
    TH_EQ_ST_REQ(kt_be.i->gemm(kt_be.ctx, &gw), TR_OK);
    struct kern_gemm_args gx = {.trans_b = 1, .m = bsz, .n = kin, .k = nout, .alpha = 1, .beta = 0, .a = dy.d,
                                .lda = nout, .b = w.d, .ldb = nout, .c = dx.d, .ldc = kin};
    TH_EQ_ST_REQ(kt_be.i->gemm(kt_be.ctx, &gx), TR_OK);
    kt_download(&dx);
    kt_download(&dw);
    kt_download(&db);
    for (int64_t i = 0; i < bsz * kin; i++)
        fd_x[i] = fd_entry(&l, &dx_[i]);
    for (int64_t i = 0; i < kin * nout; i++)
        fd_w[i] = fd_entry(&l, &dw_[i]);
    for (int64_t i = 0; i < nout; i++)
        fd_b[i] = fd_entry(&l, &db_[i]);
    KT_CLOSE("layer dL/dx", dx.h, fd_x, bsz * kin, 1e-5, 1e-4, 1e-8);
    KT_CLOSE("layer dL/dW", dw.h, fd_w, kin * nout, 1e-5, 1e-4, 1e-8);
    KT_CLOSE("layer dL/db", db.h, fd_b, nout, 1e-5, 1e-4, 1e-8);
    kt_buf_release(&db);
    kt_buf_release(&dx);
    kt_buf_release(&dw);
    kt_buf_release(&dy);
    kt_buf_release(&y);
    kt_buf_release(&b);
    kt_buf_release(&w);
    kt_buf_release(&x);
}

/* ReLU masks (kern_backend_i.relu_mask): the forward's epilogue writes the same
 * outputs with a mask as without and the mask bits are km_relu_mask of each; the
 * backward reads the mask in place of y for the same bits, as its own op and as a
 * GEMM's backward epilogue (whole, and by row blocks with TR_CPU_GEMM_FUSED=bwd).
 * Row 0 of A is NaN, so its outputs are NaN and pass the gradient. */
static void test_relu_mask(void)
{
    if (!kt_be.i->relu_mask)
        TH_SKIP("this backend records no ReLU masks (kern_backend_i.relu_mask 0)");
    const int64_t m = 300, n = 41, k = 19;
    const size_t fb = (size_t)(m * n) * sizeof(float);
    struct kt_rng r = kt_rng_seed(4100);
    float *a = tr_malloc((size_t)(m * k) * sizeof(float)), *b = tr_malloc((size_t)(k * n) * sizeof(float));
    float *bias = tr_malloc((size_t)n * sizeof(float)), *g = tr_malloc(fb), *y1 = tr_malloc(fb);
    float *y2 = tr_malloc(fb), *o1 = tr_malloc(fb), *o2 = tr_malloc(fb), *db1 = tr_malloc(2 * (size_t)n * 4);
    float *db2 = db1 + n;
    const size_t mb = (size_t)(m * kern_relu_mask_ld(n));
    unsigned char *mk = tr_malloc(mb);
    TH_REQUIRE(a && b && bias && g && y1 && y2 && o1 && o2 && db1 && mk);
    kt_fill(&r, a, m * k, -1.0f, 1.0f);
    kt_fill(&r, b, k * n, -1.0f, 1.0f);
    kt_fill(&r, bias, n, -0.5f, 0.5f);
    kt_fill(&r, g, m * n, -1.0f, 1.0f);
    for (int64_t j = 0; j < k; j++)
        a[j] = NAN;
    float *da = kt_dev_dup(a, (size_t)(m * k) * sizeof(float)), *dbm = kt_dev_dup(b, (size_t)(k * n) * sizeof(float));
    float *dbias = kt_dev_dup(bias, (size_t)n * sizeof(float)), *dy1 = kt_dev_alloc(fb), *dy2 = kt_dev_alloc(fb);
    float *dg1 = kt_dev_alloc(fb), *dg2 = kt_dev_alloc(fb), *ddb = kt_dev_alloc(2 * (size_t)n * sizeof(float));
    unsigned char *dmk = kt_dev_alloc(mb);

    /* forward: y = relu(a b + bias), without and with the mask */
    struct kern_gemm_args f = {.m = m, .n = n, .k = k, .alpha = 1.0f, .a = da, .lda = k, .b = dbm, .ldb = n,
                               .c = dy1, .ldc = n, .bias = dbias, .act = KERN_ACT_RELU};
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &f), TR_OK);
    f.c = dy2;
    f.mask = dmk;
    TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &f), TR_OK);
    kt_d2h(y1, dy1, fb);
    kt_d2h(y2, dy2, fb);
    kt_d2h(mk, dmk, mb);
    KT_SAME_BITS("relu mask: forward output", y1, y2, m * n);
    int64_t wrong = 0, ones = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const unsigned bit = (mk[i * kern_relu_mask_ld(n) + j / 8] >> (j % 8)) & 1;
            wrong += bit != km_relu_mask(y1[i * n + j]);
            ones += bit;
        }
    TH_EQ(wrong, 0);
    TH_CHECKF(ones > n && ones < m * n, "relu mask: %lld of %lld outputs passed", (long long)ones,
              (long long)(m * n)); /* row 0 (NaN) and some others pass, not all */
    struct kern_bias_act_fwd_args nf = {.rows = m, .cols = n, .y = dy2, .ldy = n, .act = KERN_ACT_NONE, .mask = dmk};
    TH_EQ_ST(kt_be.i->bias_act_fwd(kt_be.ctx, &nf), TR_ERR_ARG); /* a mask needs the ReLU */

    /* backward: dy = relu'(y) g, db its column sums, from y and from the mask */
    kt_h2d(dg1, g, fb);
    kt_h2d(dg2, g, fb);
    struct kern_bias_act_bwd_args e1 = {.rows = m, .cols = n, .y = dy1, .ldy = n, .dy = dg1, .lddy = n,
                                        .dbias = ddb, .act = KERN_ACT_RELU};
    struct kern_bias_act_bwd_args e2 = e1;
    e2.y = NULL;
    e2.mask = dmk;
    e2.dy = dg2;
    e2.dbias = ddb + n;
    TH_EQ_ST(kt_be.i->bias_act_bwd(kt_be.ctx, &e1), TR_OK);
    TH_EQ_ST(kt_be.i->bias_act_bwd(kt_be.ctx, &e2), TR_OK);
    kt_d2h(o1, dg1, fb);
    kt_d2h(o2, dg2, fb);
    kt_d2h(db1, ddb, 2 * (size_t)n * sizeof(float));
    KT_SAME_BITS("relu mask: bias_act_bwd dy", o1, o2, m * n);
    KT_SAME_BITS("relu mask: bias_act_bwd dbias", db1, db2, n);

    /* as a GEMM's backward epilogue: (m, n) = g[:, :k] b^T-shaped product of a (m, k)
     * and b (k, n), then the epilogue, whole and by row blocks */
    for (int blocks = 0; blocks < 2; blocks++) {
        if (blocks)
            setenv("TR_CPU_GEMM_FUSED", "bwd", 1);
        struct kern_bias_act_bwd_args t1 = e1, t2 = e2;
        t1.dy = dg1;
        t2.dy = dg2;
        struct kern_gemm_args p1 = {.m = m, .n = n, .k = k, .alpha = 1.0f, .a = da + k, .lda = k, .b = dbm,
                                    .ldb = n, .c = dg1, .ldc = n, .then = &t1};
        struct kern_gemm_args p2 = p1;
        p2.c = dg2;
        p2.then = &t2;
        p1.m = p2.m = t1.rows = t2.rows = m - 1; /* a's rows 1.. (row 0 is NaN) */
        TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &p1), TR_OK);
        TH_EQ_ST(kt_be.i->gemm(kt_be.ctx, &p2), TR_OK);
        unsetenv("TR_CPU_GEMM_FUSED");
        kt_d2h(o1, dg1, fb);
        kt_d2h(o2, dg2, fb);
        kt_d2h(db1, ddb, 2 * (size_t)n * sizeof(float));
        KT_SAME_BITS(blocks ? "relu mask: gemm then, by row blocks" : "relu mask: gemm then", o1, o2, (m - 1) * n);
        KT_SAME_BITS("relu mask: gemm then dbias", db1, db2, n);
    }
    kt_dev_release(dmk, mb);
    kt_dev_release(ddb, 2 * (size_t)n * sizeof(float));
    kt_dev_release(dg2, fb);
    kt_dev_release(dg1, fb);
    kt_dev_release(dy2, fb);
    kt_dev_release(dy1, fb);
    kt_dev_release(dbias, (size_t)n * sizeof(float));
    kt_dev_release(dbm, (size_t)(k * n) * sizeof(float));
    kt_dev_release(da, (size_t)(m * k) * sizeof(float));
    tr_free(mk);
    tr_free(db1);
    tr_free(o2);
    tr_free(o1);
    tr_free(y2);
    tr_free(y1);
    tr_free(g);
    tr_free(bias);
    tr_free(b);
    tr_free(a);
}

static const struct th_case cases[] = {
    {"gemm", test_gemm},
    {"gemm_edges", test_gemm_edges},
    {"gemm_epilogue", test_gemm_epilogue},
    {"gemm_then", test_gemm_then},
    {"gemm_fused", test_gemm_fused},
    {"gemm_fp32", test_gemm_fp32},
    {"gemm_tf32", test_gemm_tf32},
    {"gemm_bf16", test_gemm_bf16},
    {"gemm_fp16", test_gemm_fp16},
    {"prec_model", test_prec_model},
    {"bias_act_fwd", test_bias_act_fwd},
    {"bias_act_bwd", test_bias_act_bwd},
    {"relu_mask", test_relu_mask},
    {"fd_layer", test_fd_layer},
    {"bf16_bits", test_bf16_bits},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
