/* test_interact.c: parity tests of the dot interaction, forward and backward,
 * against naive double references over n in {1,2,3,5,8,27} and d in {1,3,8,16,17,64,128},
 * with and without the bottom vector and with out_w wider than needed (the padding
 * must be exact zeros), and over n up to 65 for the CPU's blocked row paths; one
 * feature (no pairs) with NaN, inf and negative inputs: dx is 0 + 0 * x as the CPU
 * sums it, bit for bit; a finite-difference check of the backward; argument
 * errors and failure of the ops' scratch allocation (CPU backend); the forward,
 * backward, blocked-row and finite-difference cases again with the CPU's 8-wide
 * body (TR_CPU_SIMD=avx2). Runs on every backend. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../kernels/kmath.h"
#include "kt_util.h"

static const int ns[] = {1, 2, 3, 5, 8, 27};
static const int ds[] = {1, 3, 8, 16, 17, 64, 128};

/* out (batch, out_w) in double: [x0 | x_i . x_j for i > j in row-major order | 0...]. */
static void ref_fwd(const float *x, int64_t batch, int n, int d, int hb, int64_t out_w, double *out)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d;
        double *o = out + s * out_w;
        for (int64_t c = 0; c < out_w; c++)
            o[c] = 0.0;
        int64_t k = 0;
        if (hb)
            for (int c = 0; c < d; c++)
                o[k++] = xs[c];
        for (int i = 1; i < n; i++)
            for (int j = 0; j < i; j++) {
                double dot = 0.0;
                for (int c = 0; c < d; c++)
                    dot += (double)xs[i * d + c] * xs[j * d + c];
                o[k++] = dot;
            }
    }
}

/* dx (batch, n, d) in double: dx_i = sum_{j != i} dout[pair(i,j)] x_j (+ dout[0:d] on x_0). */
static void ref_bwd(const float *x, const float *dout, int64_t batch, int n, int d, int hb, int64_t out_w,
                    double *dx)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d, *g = dout + s * out_w;
        double *dxs = dx + s * n * d;
        const int64_t off = hb ? d : 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < d; c++) {
                double acc = (hb && i == 0) ? g[c] : 0.0;
                for (int j = 0; j < n; j++) {
                    if (j == i)
                        continue;
                    int64_t p = i > j ? km_tri_index(i, j) : km_tri_index(j, i);
                    acc += (double)g[off + p] * xs[j * d + c];
                }
                dxs[i * d + c] = acc;
            }
    }
}

/* What every forward output must hold whatever the precision: the padding columns
 * exact +0, the bottom vector (has_bottom) copied bitwise from x, nothing written
 * outside out (downloaded). */
static void check_fwd_layout(const char *what, const struct kt_buf *out, const float *x, int64_t batch, int n, int d,
                             int hb, int64_t out_w)
{
    const int64_t used = (hb ? d : 0) + km_tri_count(n);
    int pad_ok = 1, bottom_ok = 1;
    for (int64_t s = 0; s < batch; s++) {
        for (int64_t c = used; c < out_w; c++)
            pad_ok &= out->h[s * out_w + c] == 0.0f && !signbit(out->h[s * out_w + c]);
        if (hb)
            bottom_ok &= memcmp(out->h + s * out_w, x + s * n * d, (size_t)d * sizeof(float)) == 0;
    }
    TH_CHECKF(pad_ok, "%s: padding columns are not exact +0", what);
    TH_CHECKF(bottom_ok, "%s: the bottom vector is not copied bitwise", what);
    TH_CHECKF(kt_buf_guard_ok(out), "%s: wrote outside out", what);
}

static void fwd_case(int n, int d, int hb, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t batch = 3, out_w = km_interact_width(n, d, hb) + 5;
    struct kt_buf x, out;
    kt_buf_init(&x, batch * n * d);
    kt_buf_init(&out, batch * out_w);
    double *ref = tr_malloc((size_t)(batch * out_w) * sizeof(double));
    kt_fill(&r, x.h, batch * n * d, -1, 1);
    kt_upload(&x);
    ref_fwd(x.h, batch, n, d, hb, out_w, ref);
    struct kern_interact_fwd_args a = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x.d, .out = out.d,
                                       .out_w = out_w};
    char what[64];
    snprintf(what, sizeof what, "interact_fwd n=%d d=%d bottom=%d", n, d, hb);
    enum tr_status rc = kt_be.i->interact_fwd(kt_be.ctx, &a);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    kt_download(&out);
    KT_CLOSE(what, out.h, ref, batch * out_w, 1e-6 * (1.0 + sqrt((double)d)), 1e-5, 1e-9);
    check_fwd_layout(what, &out, x.h, batch, n, d, hb, out_w);
    tr_free(ref);
    kt_buf_release(&out);
    kt_buf_release(&x);
}

static void test_fwd(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_FWD);
    uint64_t seed = 100;
    for (size_t i = 0; i < TR_ARRAY_SIZE(ns); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(ds); j++)
            for (int hb = 0; hb < 2; hb++)
                fwd_case(ns[i], ds[j], hb, seed++);
}

/* The CPU's blocked paths by their row counts: the forward's Gram rows of one to
 * four vectors (n up to 4 vector widths, 64 with AVX-512; d up to 32, padded or
 * not) in blocks of 4, 2 and 1 rows and their ends, and past them the pairs again
 * (n 65); the backward's 8-row tiles (rows of at most 2 vectors) and their
 * remainders. */
static const int gram_ns[] = {4, 9, 16, 17, 31, 32, 33, 40, 63, 64, 65};
static const int gram_ds[] = {8, 16, 17, 32};

static void test_fwd_rows(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_FWD);
    uint64_t seed = 300;
    for (size_t i = 0; i < TR_ARRAY_SIZE(gram_ns); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(gram_ds); j++, seed++)
            fwd_case(gram_ns[i], gram_ds[j], (int)(seed & 1), seed);
}

static void bwd_case_batch(int64_t batch, int n, int d, int hb, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t out_w = km_interact_width(n, d, hb) + 5;
    struct kt_buf x, dout, dx;
    kt_buf_init(&x, batch * n * d);
    kt_buf_init(&dout, batch * out_w);
    kt_buf_init(&dx, batch * n * d);
    double *ref = tr_malloc((size_t)(batch * n * d) * sizeof(double));
    kt_fill(&r, x.h, batch * n * d, -1, 1);
    kt_fill(&r, dout.h, batch * out_w, -1, 1); /* padding gradients too: they must be ignored */
    kt_upload(&x);
    kt_upload(&dout);
    ref_bwd(x.h, dout.h, batch, n, d, hb, out_w, ref);
    struct kern_interact_bwd_args a = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x.d, .dout = dout.d,
                                       .out_w = out_w, .dx = dx.d};
    char what[64];
    snprintf(what, sizeof what, "interact_bwd batch=%lld n=%d d=%d bottom=%d", (long long)batch, n, d, hb);
    enum tr_status rc = kt_be.i->interact_bwd(kt_be.ctx, &a);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    kt_download(&dx);
    KT_CLOSE(what, dx.h, ref, batch * n * d, 1e-6 * (1.0 + sqrt((double)n)), 1e-5, 1e-9);
    TH_CHECKF(kt_buf_guard_ok(&dx), "%s: wrote outside dx", what);
    tr_free(ref);
    kt_buf_release(&dx);
    kt_buf_release(&dout);
    kt_buf_release(&x);
}

static void bwd_case(int n, int d, int hb, uint64_t seed)
{
    bwd_case_batch(3, n, d, hb, seed);
}

static void test_bwd(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    uint64_t seed = 200;
    for (size_t i = 0; i < TR_ARRAY_SIZE(ns); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(ds); j++)
            for (int hb = 0; hb < 2; hb++)
                bwd_case(ns[i], ds[j], hb, seed++);
}

static void test_bwd_rows(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    uint64_t seed = 400;
    for (size_t i = 0; i < TR_ARRAY_SIZE(gram_ns); i++)
        for (size_t j = 0; j < TR_ARRAY_SIZE(gram_ds); j++, seed++)
            bwd_case(gram_ns[i], gram_ds[j], (int)(seed & 1), seed);
}

/* A dx of more than 8 MiB (kernels/cpu/interact.c's STREAM_DX_BYTES), which the
 * CPU stores past the cache when it is aligned to a vector (these are: kt_buf's
 * guard is 128 bytes): the embedding-bound and MLPerf-shaped widths, with and
 * without the bottom vector (added to row 0 before its store). */
static void test_bwd_stream(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    bwd_case_batch(1300, 27, 64, 1, 450);
    bwd_case_batch(1300, 27, 64, 0, 451);
    bwd_case_batch(700, 27, 128, 1, 452);
}

/* ---- reduced precision ------------------------------------------------------------------
 * Both ops on an instance opened with kern_backend_opts.precision TF32, BF16 or FP16
 * (and FP32), against the double reference of the fp32 inputs, each output within
 * the bound of kt_util.h's error model and under its NMSE limit: forward, x_i . x_j
 * is a dot product of d terms; backward, dx_i = sum_j S_ij x_j has n terms, S (the
 * pair gradients) being rounded too as the second GEMM's operand, plus the bottom
 * gradient added in fp32. The bottom copy stays bitwise and the padding +0 in every
 * precision; FP32 also keeps fwd_case's and bwd_case's tolerance. The CPU backend has
 * fp32 and tf32 (run as fp32); bf16 and fp16 skip there. Inputs lie in [-1, 1]. Sizes
 * include n and d that are not multiples of 8 and a batch of 128 at n = 27, d = 128
 * (the benchmark model's interaction). prec_model checks the tolerance on the host. */

/* ref (batch, out_w) as ref_fwd, and bnd (batch, out_w): how far an instance in
 * precision t may be from it (0 for the bottom copy and the padding). */
static void ref_fwd_bound(const float *x, int64_t batch, int n, int d, int hb, int64_t out_w, const struct kt_prec *t,
                          double *ref, double *bnd)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d;
        double *o = ref + s * out_w, *b = bnd + s * out_w;
        for (int64_t c = 0; c < out_w; c++)
            o[c] = b[c] = 0.0;
        int64_t k = 0;
        if (hb)
            for (int c = 0; c < d; c++)
                o[k++] = xs[c];
        for (int i = 1; i < n; i++)
            for (int j = 0; j < i; j++) {
                struct kt_dot dot = {0.0, 0.0, 0.0, 0};
                for (int c = 0; c < d; c++) {
                    const double a = xs[i * d + c], v = xs[j * d + c];
                    kt_dot_add(&dot, a, kt_prec_err(t, a), v, kt_prec_err(t, v));
                }
                b[k] = kt_dot_bound(&dot);
                o[k++] = dot.s;
            }
    }
}

/* ref (batch, n, d) as ref_bwd, and bnd: how far an instance in precision t may be
 * from it: the bound of the n-term product S x (the diagonal's zero terms included),
 * plus the fp32 rounding of adding the bottom gradient. */
static void ref_bwd_bound(const float *x, const float *dout, int64_t batch, int n, int d, int hb, int64_t out_w,
                          const struct kt_prec *t, double *ref, double *bnd)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d, *g = dout + s * out_w;
        const int64_t off = hb ? d : 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < d; c++) {
                struct kt_dot dot = {0.0, 0.0, 0.0, 0};
                for (int j = 0; j < n; j++) {
                    const double sv = j == i ? 0.0 : g[off + (i > j ? km_tri_index(i, j) : km_tri_index(j, i))];
                    const double xv = xs[j * d + c];
                    kt_dot_add(&dot, sv, kt_prec_err(t, sv), xv, kt_prec_err(t, xv));
                }
                const double bottom = hb && i == 0 ? g[c] : 0.0;
                ref[s * n * d + i * d + c] = dot.s + bottom;
                bnd[s * n * d + i * d + c] =
                    kt_dot_bound(&dot) + (hb && i == 0 ? kt_gamma(1) * (fabs(bottom) + dot.abs + dot.err) : 0.0);
            }
    }
}

static void fwd_prec_case(const struct kt_prec *t, int n, int d, int hb, int64_t batch, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t out_w = km_interact_width(n, d, hb) + 5;
    struct kt_buf x, out;
    kt_buf_init(&x, batch * n * d);
    kt_buf_init(&out, batch * out_w);
    double *ref = tr_malloc((size_t)(batch * out_w) * sizeof(double));
    double *bnd = tr_malloc((size_t)(batch * out_w) * sizeof(double));
    kt_fill(&r, x.h, batch * n * d, -1, 1);
    kt_upload(&x);
    ref_fwd_bound(x.h, batch, n, d, hb, out_w, t, ref, bnd);
    struct kern_interact_fwd_args a = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x.d, .out = out.d,
                                       .out_w = out_w};
    char what[96];
    snprintf(what, sizeof what, "%s interact_fwd n=%d d=%d bottom=%d batch=%lld", kern_precision_name(t->prec), n, d,
             hb, (long long)batch);
    enum tr_status rc = kt_be.i->interact_fwd(kt_be.ctx, &a);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    kt_download(&out);
    if (rc == TR_OK) {
        KT_BOUNDED(what, out.h, out_w, ref, bnd, out_w, batch, out_w, t->nmse);
        if (t->prec == KERN_PREC_FP32)
            KT_CLOSE(what, out.h, ref, batch * out_w, 1e-6 * (1.0 + sqrt((double)d)), 1e-5, 1e-9);
    }
    check_fwd_layout(what, &out, x.h, batch, n, d, hb, out_w);
    tr_free(bnd);
    tr_free(ref);
    kt_buf_release(&out);
    kt_buf_release(&x);
}

static void bwd_prec_case(const struct kt_prec *t, int n, int d, int hb, int64_t batch, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t out_w = km_interact_width(n, d, hb) + 5;
    struct kt_buf x, dout, dx;
    kt_buf_init(&x, batch * n * d);
    kt_buf_init(&dout, batch * out_w);
    kt_buf_init(&dx, batch * n * d);
    double *ref = tr_malloc((size_t)(batch * n * d) * sizeof(double));
    double *bnd = tr_malloc((size_t)(batch * n * d) * sizeof(double));
    kt_fill(&r, x.h, batch * n * d, -1, 1);
    kt_fill(&r, dout.h, batch * out_w, -1, 1); /* padding gradients too: they must be ignored */
    kt_upload(&x);
    kt_upload(&dout);
    ref_bwd_bound(x.h, dout.h, batch, n, d, hb, out_w, t, ref, bnd);
    struct kern_interact_bwd_args a = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x.d, .dout = dout.d,
                                       .out_w = out_w, .dx = dx.d};
    char what[96];
    snprintf(what, sizeof what, "%s interact_bwd n=%d d=%d bottom=%d batch=%lld", kern_precision_name(t->prec), n, d,
             hb, (long long)batch);
    enum tr_status rc = kt_be.i->interact_bwd(kt_be.ctx, &a);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    kt_download(&dx);
    if (rc == TR_OK) {
        KT_BOUNDED(what, dx.h, n * d, ref, bnd, n * d, batch, n * d, t->nmse);
        if (t->prec == KERN_PREC_FP32)
            KT_CLOSE(what, dx.h, ref, batch * n * d, 1e-6 * (1.0 + sqrt((double)n)), 1e-5, 1e-9);
    }
    TH_CHECKF(kt_buf_guard_ok(&dx), "%s: wrote outside dx", what);
    tr_free(bnd);
    tr_free(ref);
    kt_buf_release(&dx);
    kt_buf_release(&dout);
    kt_buf_release(&x);
}

/* {n, d, batch} */
static const int prec_shapes[][3] = {{2, 1, 3},   {3, 3, 3},   {5, 8, 3},   {5, 17, 3},   {16, 16, 4},
                                     {27, 16, 3}, {27, 17, 3}, {13, 33, 5}, {40, 64, 32}, {27, 128, 128}};

static void interact_prec(enum kern_precision p)
{
    KT_NEED_OP(KERN_OP_INTERACT_FWD);
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    struct kern_backend be, outer;
    KT_ENTER_PREC(p, &be, &outer);
    const struct kt_prec t = kt_prec_of(p);
    uint64_t seed = 500 + 100 * (uint64_t)p;
    for (size_t s = 0; s < TR_ARRAY_SIZE(prec_shapes); s++)
        for (int hb = 0; hb < 2; hb++) {
            fwd_prec_case(&t, prec_shapes[s][0], prec_shapes[s][1], hb, prec_shapes[s][2], seed++);
            bwd_prec_case(&t, prec_shapes[s][0], prec_shapes[s][1], hb, prec_shapes[s][2], seed++);
        }
    kt_leave_prec(&outer, &be);
}

static void test_fp32(void)
{
    interact_prec(KERN_PREC_FP32);
}

static void test_tf32(void)
{
    interact_prec(KERN_PREC_TF32);
}

static void test_bf16(void)
{
    interact_prec(KERN_PREC_BF16);
}

static void test_fp16(void)
{
    interact_prec(KERN_PREC_FP16);
}

/* What could go wrong in the interaction, for prec_model. */
enum { RIGHT = 0, WRONG_PAIR_ORDER, WRONG_NO_BOTTOM, WRONG_HALF_S, WRONG_COUNT_ };
static const char *const wrong_name[WRONG_COUNT_] = {"right", "pairs in column order", "no bottom gradient",
                                                     "S lower half only"};

/* out (batch, out_w): the forward as an instance in precision t computes it (x rounded
 * to nearest, or truncated when chop; products summed in order in fp32), or with the
 * pairs in column-major order of the triangle (WRONG_PAIR_ORDER). */
static void emulate_fwd(const float *x, int64_t batch, int n, int d, int hb, int64_t out_w, const struct kt_prec *t,
                        int chop, int wrong, float *out)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d;
        float *o = out + s * out_w;
        int64_t k = 0;
        for (int64_t c = 0; c < out_w; c++)
            o[c] = 0.0f;
        if (hb)
            for (int c = 0; c < d; c++)
                o[k++] = xs[c];
        for (int i = 1; i < n; i++)
            for (int j = 0; j < i; j++) {
                /* column order visits (j + 1 + ..., j) column by column */
                int a = i, b = j;
                if (wrong == WRONG_PAIR_ORDER) {
                    int64_t p = km_tri_index(i, j), col = 0;
                    while (p >= n - 1 - col) {
                        p -= n - 1 - col;
                        col++;
                    }
                    a = (int)(col + 1 + p);
                    b = (int)col;
                }
                float acc = 0.0f;
                for (int c = 0; c < d; c++)
                    acc += kt_prec_round(t, xs[a * d + c], chop) * kt_prec_round(t, xs[b * d + c], chop);
                o[k++] = acc;
            }
    }
}

/* dx (batch, n, d): the backward as an instance in precision t computes it, or
 * without the bottom gradient (WRONG_NO_BOTTOM), or with only the pairs j < i
 * (WRONG_HALF_S: S not symmetric). */
static void emulate_bwd(const float *x, const float *dout, int64_t batch, int n, int d, int hb, int64_t out_w,
                        const struct kt_prec *t, int chop, int wrong, float *dx)
{
    for (int64_t s = 0; s < batch; s++) {
        const float *xs = x + s * n * d, *g = dout + s * out_w;
        const int64_t off = hb ? d : 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < d; c++) {
                float acc = 0.0f;
                for (int j = 0; j < (wrong == WRONG_HALF_S ? i : n); j++) {
                    const float sv = j == i ? 0.0f : g[off + (i > j ? km_tri_index(i, j) : km_tri_index(j, i))];
                    acc += kt_prec_round(t, sv, chop) * kt_prec_round(t, xs[j * d + c], chop);
                }
                if (hb && i == 0 && wrong != WRONG_NO_BOTTOM)
                    acc += g[c];
                dx[s * n * d + i * d + c] = acc;
            }
    }
}

/* The tolerance itself, on the host (no backend op), as test_dense.c's prec_model:
 * for tf32, bf16 and fp16, both ops emulated in that precision (x and S rounded to
 * nearest and truncated) and computed exactly in fp32 lie within the bounds, and
 * wrong results (the pairs in column order, no bottom gradient, half of S) fail. */
static void test_prec_model(void)
{
    if (strcmp(kt_be.i->name, "cpu") != 0)
        TH_SKIP("a check of the tolerance on the host: it runs under [cpu]");
    static const enum kern_precision precs[] = {KERN_PREC_TF32, KERN_PREC_BF16, KERN_PREC_FP16};
    static const int shapes[][3] = {{27, 128, 16}, {13, 33, 16}};
    const struct kt_prec fp32 = kt_prec_of(KERN_PREC_FP32);
    for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++) {
        const int n = shapes[s][0], d = shapes[s][1], hb = 1;
        const int64_t batch = shapes[s][2], out_w = km_interact_width(n, d, hb) + 3, nx = batch * n * d;
        struct kt_rng r = kt_rng_seed(600 + s);
        float *x = tr_malloc((size_t)nx * sizeof(float)), *dout = tr_malloc((size_t)(batch * out_w) * sizeof(float));
        float *out = tr_malloc((size_t)(batch * out_w) * sizeof(float)), *dx = tr_malloc((size_t)nx * sizeof(float));
        double *ref = tr_malloc((size_t)(batch * out_w) * sizeof(double));
        double *bnd = tr_malloc((size_t)(batch * out_w) * sizeof(double));
        double *dref = tr_malloc((size_t)nx * sizeof(double)), *dbnd = tr_malloc((size_t)nx * sizeof(double));
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, dout, batch * out_w, -1, 1);
        for (size_t pi = 0; pi < TR_ARRAY_SIZE(precs); pi++) {
            const struct kt_prec t = kt_prec_of(precs[pi]);
            const char *pn = kern_precision_name(t.prec);
            char line[512];
            int len = snprintf(line, sizeof line, "# %s n=%d d=%d: nmse limit %.2g; fwd, bwd:", pn, n, d, t.nmse);
            ref_fwd_bound(x, batch, n, d, hb, out_w, &t, ref, bnd);
            ref_bwd_bound(x, dout, batch, n, d, hb, out_w, &t, dref, dbnd);
            static const char *const mode_name[3] = {"in fp32", "rounded", "truncated"};
            for (int mode = 0; mode < 3; mode++) {
                const struct kt_prec *e = mode == 0 ? &fp32 : &t;
                double qf, qb;
                emulate_fwd(x, batch, n, d, hb, out_w, e, mode == 2, RIGHT, out);
                emulate_bwd(x, dout, batch, n, d, hb, out_w, e, mode == 2, RIGHT, dx);
                TH_CHECKF(KT_COUNT_OUT_OF_BOUNDS(out, out_w, ref, bnd, out_w, batch, out_w, t.nmse, &qf) == 0,
                          "%s bound, n=%d d=%d: rejects a forward %s (nmse %.3g)", pn, n, d, mode_name[mode], qf);
                TH_CHECKF(KT_COUNT_OUT_OF_BOUNDS(dx, n * d, dref, dbnd, n * d, batch, n * d, t.nmse, &qb) == 0,
                          "%s bound, n=%d d=%d: rejects a backward %s (nmse %.3g)", pn, n, d, mode_name[mode], qb);
                len += snprintf(line + len, sizeof line - (size_t)len, " %s %.2g %.2g,", mode_name[mode], qf, qb);
            }
            len += snprintf(line + len, sizeof line - (size_t)len, " wrong (elements out, nmse):");
            for (int w = RIGHT + 1; w < WRONG_COUNT_; w++) {
                double q;
                int bad;
                if (w == WRONG_PAIR_ORDER) {
                    emulate_fwd(x, batch, n, d, hb, out_w, &t, 0, w, out);
                    bad = KT_COUNT_OUT_OF_BOUNDS(out, out_w, ref, bnd, out_w, batch, out_w, t.nmse, &q);
                } else {
                    emulate_bwd(x, dout, batch, n, d, hb, out_w, &t, 0, w, dx);
                    bad = KT_COUNT_OUT_OF_BOUNDS(dx, n * d, dref, dbnd, n * d, batch, n * d, t.nmse, &q);
                }
                TH_CHECKF(bad > 0, "%s bound, n=%d d=%d: accepts %s (nmse %.3g)", pn, n, d, wrong_name[w], q);
                len += snprintf(line + len, sizeof line - (size_t)len, " %s %d %.2g,", wrong_name[w],
                                bad - (q > t.nmse), q);
            }
            printf("%s\n", line);
        }
        tr_free(dbnd);
        tr_free(dref);
        tr_free(bnd);
        tr_free(ref);
        tr_free(dx);
        tr_free(out);
        tr_free(dout);
        tr_free(x);
    }
}

/* The exact example of the seed's layout: n = 3, d = 2, bottom = x0.
 * x0 = (1,2), x1 = (3,4), x2 = (5,6): out = [1, 2, x1.x0, x2.x0, x2.x1, 0, 0, 0]. */
static void test_layout(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_FWD);
    const float x0[6] = {1, 2, 3, 4, 5, 6};
    struct kt_buf x, out;
    kt_buf_init(&x, 6);
    kt_buf_init(&out, 8);
    memcpy(x.h, x0, sizeof x0);
    kt_upload(&x);
    struct kern_interact_fwd_args a = {.batch = 1, .n = 3, .d = 2, .has_bottom = 1, .x = x.d, .out = out.d,
                                       .out_w = 8};
    TH_EQ_REQ(km_interact_width(3, 2, 1), 8);
    TH_EQ_ST_REQ(kt_be.i->interact_fwd(kt_be.ctx, &a), TR_OK);
    kt_download(&out);
    const float want[8] = {1, 2, 11, 17, 39, 0, 0, 0};
    for (int i = 0; i < 8; i++)
        TH_CHECKF(out.h[i] == want[i], "out[%d] = %g, want %g", i, (double)out.h[i], (double)want[i]);
    TH_CHECK(kt_buf_guard_ok(&out));
    kt_buf_release(&out);
    kt_buf_release(&x);
}

/* ---- finite differences ---------------------------------------------------------------
 * L(x) = sum R .* out with a random R over all of out (padding included: it carries no
 * gradient). L is a quadratic in x, so central differences have no truncation error
 * at any step; h = 1/32 keeps the float rounding of out (~1e-7 * n relative) far
 * below the tolerance. Both L and the gradient come from the kernels. */
static double fd_loss(const struct kern_interact_fwd_args *a, struct kt_buf *out, const float *rw)
{
    enum tr_status rc = kt_be.i->interact_fwd(kt_be.ctx, a);
    TR_ASSERT(rc == TR_OK);
    kt_download(out);
    double l = 0.0;
    for (int64_t i = 0; i < a->batch * a->out_w; i++)
        l += (double)rw[i] * out->h[i];
    return l;
}

static void fd_case(int n, int d, int hb, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t batch = 2, out_w = km_interact_width(n, d, hb) + 3;
    struct kt_buf x, out, rw, dx;
    kt_buf_init(&x, batch * n * d);
    kt_buf_init(&out, batch * out_w);
    kt_buf_init(&rw, batch * out_w);
    kt_buf_init(&dx, batch * n * d);
    double *fd = tr_malloc((size_t)(batch * n * d) * sizeof(double));
    kt_fill(&r, x.h, batch * n * d, -1, 1);
    kt_fill(&r, rw.h, batch * out_w, -1, 1);
    kt_upload(&x);
    kt_upload(&rw);
    struct kern_interact_fwd_args fa = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x.d, .out = out.d,
                                        .out_w = out_w};
    struct kern_interact_bwd_args ba = {.batch = batch, .n = n, .d = d, .has_bottom = hb, .x = x.d, .dout = rw.d,
                                        .out_w = out_w, .dx = dx.d};
    TH_EQ_ST_REQ(kt_be.i->interact_bwd(kt_be.ctx, &ba), TR_OK);
    kt_download(&dx);
    const float h = 1.0f / 32;
    for (int64_t i = 0; i < batch * n * d; i++) {
        float orig = x.h[i], tp = orig + h, tm = orig - h;
        kt_h2d(x.d + i, &tp, sizeof tp);
        double lp = fd_loss(&fa, &out, rw.h);
        kt_h2d(x.d + i, &tm, sizeof tm);
        double lm = fd_loss(&fa, &out, rw.h);
        kt_h2d(x.d + i, &orig, sizeof orig);
        fd[i] = (lp - lm) / ((double)tp - (double)tm);
    }
    char what[64];
    snprintf(what, sizeof what, "interact fd n=%d d=%d bottom=%d", n, d, hb);
    KT_CLOSE(what, dx.h, fd, batch * n * d, 1e-4, 1e-4, 1e-8);
    tr_free(fd);
    kt_buf_release(&dx);
    kt_buf_release(&rw);
    kt_buf_release(&out);
    kt_buf_release(&x);
}

static void test_fd(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_FWD);
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    fd_case(2, 1, 1, 300);
    fd_case(3, 17, 0, 301);
    fd_case(5, 17, 1, 302);
    fd_case(27, 3, 1, 303);
    fd_case(4, 33, 0, 304);
}

/* out_w below what the layout needs, n < 1 or d < 1: TR_ERR_ARG. */
static void test_args(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_FWD);
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    struct kt_buf x, out, dx;
    kt_buf_init(&x, 5 * 17);
    kt_buf_init(&out, 200);
    kt_buf_init(&dx, 5 * 17);
    memset(x.h, 0, 5 * 17 * sizeof(float));
    kt_upload(&x);
    for (int hb = 0; hb < 2; hb++) {
        const int64_t used = (hb ? 17 : 0) + km_tri_count(5);
        struct kern_interact_fwd_args f = {.batch = 1, .n = 5, .d = 17, .has_bottom = hb, .x = x.d, .out = out.d,
                                           .out_w = used - 1};
        struct kern_interact_bwd_args b = {.batch = 1, .n = 5, .d = 17, .has_bottom = hb, .x = x.d,
                                           .dout = out.d, .out_w = used - 1, .dx = dx.d};
        enum tr_status rc = kt_be.i->interact_fwd(kt_be.ctx, &f);
        TH_CHECKF(rc == TR_ERR_ARG, "fwd accepted out_w %lld < %lld (bottom %d): %s", (long long)f.out_w,
                  (long long)used, hb, tr_strerror(rc));
        rc = kt_be.i->interact_bwd(kt_be.ctx, &b);
        TH_CHECKF(rc == TR_ERR_ARG, "bwd accepted out_w %lld < %lld (bottom %d): %s", (long long)b.out_w,
                  (long long)used, hb, tr_strerror(rc));
        f.out_w = b.out_w = 0;
        TH_EQ_ST(kt_be.i->interact_fwd(kt_be.ctx, &f), TR_ERR_ARG);
        TH_EQ_ST(kt_be.i->interact_bwd(kt_be.ctx, &b), TR_ERR_ARG);
        f.out_w = b.out_w = km_interact_width(5, 17, hb);
        TH_EQ_ST(kt_be.i->interact_fwd(kt_be.ctx, &f), TR_OK);
        memset(out.h, 0, 200 * sizeof(float));
        kt_upload(&out);
        TH_EQ_ST(kt_be.i->interact_bwd(kt_be.ctx, &b), TR_OK);
        f.n = b.n = 0;
        TH_EQ_ST(kt_be.i->interact_fwd(kt_be.ctx, &f), TR_ERR_ARG);
        TH_EQ_ST(kt_be.i->interact_bwd(kt_be.ctx, &b), TR_ERR_ARG);
        f.n = b.n = 5;
        f.d = b.d = 0;
        TH_EQ_ST(kt_be.i->interact_fwd(kt_be.ctx, &f), TR_ERR_ARG);
        TH_EQ_ST(kt_be.i->interact_bwd(kt_be.ctx, &b), TR_ERR_ARG);
    }
    /* an empty batch is fine */
    struct kern_interact_fwd_args f = {.batch = 0, .n = 5, .d = 17, .x = x.d, .out = out.d, .out_w = 16};
    TH_EQ_ST(kt_be.i->interact_fwd(kt_be.ctx, &f), TR_OK);
    kt_download(&out);
    kt_download(&dx);
    TH_CHECK(kt_buf_guard_ok(&out) && kt_buf_guard_ok(&dx));
    kt_buf_release(&dx);
    kt_buf_release(&out);
    kt_buf_release(&x);
}

/* ---- allocation failure ------------------------------------------------------------------
 * On the CPU backend both ops take per-thread scratch through tr_calloc. When it fails
 * they must return TR_ERR_NOMEM without crashing or leaking. Each attempt runs in a
 * child process, on a new one-thread instance (so no OpenMP pool crosses the fork), so
 * that a crash is reported as a failure of this case instead of killing the binary.
 * Other backends keep their scratch in their own memory: the case skips there. Child exit code: 20 + the
 * status (so that a sanitizer's exit code 1 cannot pass for TR_ERR_NOMEM), plus 100
 * if live_bytes did not return to its start, plus 50 if no allocation failed. */
static int run_child_nomem(int bwd, int fail_at)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        struct kern_backend be;
        kt_open(1, &be);
        kt_be = be; /* this process only */
        float *x = kt_dev_alloc(2 * 5 * 17 * sizeof(float)), *out = kt_dev_alloc(2 * 32 * sizeof(float));
        float *dx = kt_dev_alloc(2 * 5 * 17 * sizeof(float));
        struct tr_alloc_stats st0, st;
        tr_alloc_get_stats(&st0);
        tr_alloc_fail_at(fail_at);
        enum tr_status rc;
        if (bwd) {
            struct kern_interact_bwd_args b = {.batch = 2, .n = 5, .d = 17, .has_bottom = 1, .x = x, .dout = out,
                                               .out_w = 32, .dx = dx};
            rc = kt_be.i->interact_bwd(kt_be.ctx, &b);
        } else {
            struct kern_interact_fwd_args f = {.batch = 2, .n = 5, .d = 17, .has_bottom = 1, .x = x, .out = out,
                                               .out_w = 32};
            rc = kt_be.i->interact_fwd(kt_be.ctx, &f);
        }
        int fired = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        tr_alloc_get_stats(&st);
        _exit(20 + (int)rc + (st.live_bytes != st0.live_bytes ? 100 : 0) + (fired ? 0 : 50));
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    if (WIFSIGNALED(status))
        return -1000 - WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_nomem(void)
{
    if (strcmp(kt_be.i->name, "cpu") != 0)
        TH_SKIP("the op scratch that tr_alloc's fault hook fails is the CPU backend's");
    for (int bwd = 0; bwd < 2; bwd++) {
        int code = run_child_nomem(bwd, 1);
        if (code <= -1000)
            TH_CHECKF(0, "interact_%s with its scratch allocation failing: killed by signal %d", bwd ? "bwd" : "fwd",
                      -code - 1000);
        else
            TH_CHECKF(code == 20 + TR_ERR_NOMEM, "interact_%s with its scratch allocation failing: child exit %d, "
                      "want %d (20 + TR_ERR_NOMEM; +100 = leak, +50 = no allocation made)",
                      bwd ? "bwd" : "fwd", code, 20 + TR_ERR_NOMEM);
        code = run_child_nomem(bwd, 2); /* the op's only allocation succeeds */
        TH_CHECKF(code == 20 + TR_OK + 50, "interact_%s with no allocation failing: child exit %d, want 70 "
                  "(TR_OK, no fault fired)", bwd ? "bwd" : "fwd", code);
    }
}

/* n = 1: no pairs, so dx is the bottom gradient (hb) plus 0 * x: exactly +0 (or
 * the gradient's bits) where x is finite, NaN where x is NaN or inf, on every backend. */
static void test_one_feature(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    const int d = 4;
    const int64_t batch = 2;
    const float xv[8] = {-2.0f, NAN, INFINITY, 0.5f, -0.0f, -INFINITY, 3.0f, -1e30f};
    for (int hb = 0; hb < 2; hb++) {
        const int64_t out_w = km_interact_width(1, d, hb) + 3;
        struct kt_buf x, dout, dx;
        kt_buf_init(&x, batch * d);
        kt_buf_init(&dout, batch * out_w);
        kt_buf_init(&dx, batch * d);
        memcpy(x.h, xv, sizeof xv);
        struct kt_rng r = kt_rng_seed(77 + (uint64_t)hb);
        kt_fill(&r, dout.h, batch * out_w, -1, 1);
        kt_upload(&x);
        kt_upload(&dout);
        struct kern_interact_bwd_args a = {.batch = batch, .n = 1, .d = d, .has_bottom = hb, .x = x.d,
                                           .dout = dout.d, .out_w = out_w, .dx = dx.d};
        TH_EQ_ST(kt_be.i->interact_bwd(kt_be.ctx, &a), TR_OK);
        kt_download(&dx);
        for (int64_t s = 0; s < batch; s++)
            for (int k = 0; k < d; k++) {
                const float xk = xv[s * d + k], got = dx.h[s * d + k];
                const float want = hb ? dout.h[s * out_w + k] : 0.0f;
                if (isfinite(xk))
                    TH_CHECKF(memcmp(&got, &want, sizeof got) == 0, "bottom=%d sample %lld column %d: dx %a, want %a",
                              hb, (long long)s, k, (double)got, (double)want);
                else
                    TH_CHECKF(isnan(got), "bottom=%d sample %lld column %d: x %g gives dx %g, want NaN", hb,
                              (long long)s, k, (double)xk, (double)got);
            }
        TH_CHECK(kt_buf_guard_ok(&dx));
        kt_buf_release(&dx);
        kt_buf_release(&dout);
        kt_buf_release(&x);
    }
}

/* The same cases with the CPU's 8-wide body (TR_CPU_SIMD=avx2), which a processor
 * with AVX-512 would not run otherwise; other backends run them as they are. */
#define WITH_AVX2(fn)                                                                                              \
    static void fn##_avx2(void)                                                                                    \
    {                                                                                                              \
        setenv("TR_CPU_SIMD", "avx2", 1);                                                                          \
        fn();                                                                                                      \
        unsetenv("TR_CPU_SIMD");                                                                                   \
    }
WITH_AVX2(test_fwd)
WITH_AVX2(test_bwd)
WITH_AVX2(test_bwd_stream)
WITH_AVX2(test_fwd_rows)
WITH_AVX2(test_bwd_rows)
WITH_AVX2(test_one_feature)
WITH_AVX2(test_fd)

static const struct th_case cases[] = {
    {"fwd", test_fwd},
    {"one_feature", test_one_feature},
    {"bwd", test_bwd},
    {"bwd_stream", test_bwd_stream},
    {"fwd_rows", test_fwd_rows},
    {"bwd_rows", test_bwd_rows},
    {"fp32", test_fp32},
    {"tf32", test_tf32},
    {"bf16", test_bf16},
    {"fp16", test_fp16},
    {"prec_model", test_prec_model},
    {"layout", test_layout},
    {"fd", test_fd},
    {"args", test_args},
    {"nomem", test_nomem},
    {"fwd_avx2", test_fwd_avx2},
    {"bwd_avx2", test_bwd_avx2},
    {"bwd_stream_avx2", test_bwd_stream_avx2},
    {"fwd_rows_avx2", test_fwd_rows_avx2},
    {"bwd_rows_avx2", test_bwd_rows_avx2},
    {"one_feature_avx2", test_one_feature_avx2},
    {"fd_avx2", test_fd_avx2},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
