/* test_nonfinite.c: NaN and inf propagate through every op the way PyTorch
 * propagates them (issue 8: a NaN must reach the loss and the guards, never
 * become a plausible number), on every backend (kt_main): relu(NaN) = NaN and
 * relu(+inf) = +inf with -inf -> 0; ReLU's backward passes dy where the output is
 * NaN and keeps a NaN dy where the output is positive; gemm, the interaction,
 * embedding gathers, the sparse and dense optimizers and the loss carry a NaN
 * from any input to the outputs that depend on it, and only to those. The kmath
 * functions themselves are checked on the host at the end. Finite parity lives
 * in the other test files. */
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

/* ---- bias + activation ------------------------------------------------------------ */

static void test_bias_act_fwd(void)
{
    KT_NEED_OP(KERN_OP_BIAS_ACT_FWD);
    /* y (1, 6) + bias: [NaN, +inf, -inf, 1, -1, -0] + [0, 0, 0, NaN, 0, 0] */
    const float y0[6] = {NAN, INFINITY, -INFINITY, 1.0f, -1.0f, -0.0f};
    const float b0[6] = {0, 0, 0, NAN, 0, 0};
    struct kt_buf y, b;
    kt_buf_init(&y, 6);
    kt_buf_init(&b, 6);
    for (int relu = 0; relu < 2; relu++) {
        memcpy(y.h, y0, sizeof y0);
        memcpy(b.h, b0, sizeof b0);
        kt_upload(&y);
        kt_upload(&b);
        struct kern_bias_act_fwd_args a = {.rows = 1, .cols = 6, .y = y.d, .ldy = 6, .bias = b.d,
                                           .act = relu ? KERN_ACT_RELU : KERN_ACT_NONE};
        TH_EQ_ST_REQ(kt_be.i->bias_act_fwd(kt_be.ctx, &a), TR_OK);
        kt_download(&y);
        TH_CHECKF(isnan(y.h[0]), "relu=%d: NaN input gives %g", relu, (double)y.h[0]);
        TH_CHECKF(isinf(y.h[1]) && y.h[1] > 0, "relu=%d: +inf gives %g", relu, (double)y.h[1]);
        if (relu)
            TH_CHECKF(y.h[2] == 0.0f && !signbit(y.h[2]), "relu: -inf gives %g", (double)y.h[2]);
        else
            TH_CHECKF(isinf(y.h[2]) && y.h[2] < 0, "linear: -inf gives %g", (double)y.h[2]);
        TH_CHECKF(isnan(y.h[3]), "relu=%d: a NaN bias gives %g", relu, (double)y.h[3]);
        TH_CHECKF(y.h[4] == (relu ? 0.0f : -1.0f), "relu=%d: -1 gives %g", relu, (double)y.h[4]);
        /* -0 stays a zero; ReLU gives +0 (as before the NaN fix: bitwise unchanged) */
        TH_CHECKF(y.h[5] == 0.0f && (!relu || !signbit(y.h[5])), "relu=%d: -0 gives %g (sign %d)", relu,
                  (double)y.h[5], (int)!!signbit(y.h[5]));
        TH_CHECK(kt_buf_guard_ok(&y));
    }
    /* without a bias: NaN still propagates */
    memcpy(y.h, y0, sizeof y0);
    kt_upload(&y);
    struct kern_bias_act_fwd_args a = {.rows = 2, .cols = 3, .y = y.d, .ldy = 3, .bias = NULL,
                                       .act = KERN_ACT_RELU};
    TH_EQ_ST_REQ(kt_be.i->bias_act_fwd(kt_be.ctx, &a), TR_OK);
    kt_download(&y);
    TH_CHECKF(isnan(y.h[0]) && isinf(y.h[1]) && y.h[2] == 0.0f, "relu without bias: %g %g %g", (double)y.h[0],
              (double)y.h[1], (double)y.h[2]);
    kt_buf_release(&b);
    kt_buf_release(&y);
}

/* dy' = relu'(y) dy: y NaN passes dy (PyTorch's threshold_backward), a NaN dy
 * survives where y > 0 and is cut where y <= 0; dbias sums carry the NaN. */
static void test_bias_act_bwd(void)
{
    KT_NEED_OP(KERN_OP_BIAS_ACT_BWD);
    /* 2 rows x 4 cols */
    const float y0[8] = {NAN, 1.0f, 0.0f, INFINITY, 2.0f, 0.0f, 3.0f, 1.0f};
    const float dy0[8] = {5.0f, NAN, NAN, 1.0f, 1.0f, 1.0f, 1.0f, INFINITY};
    struct kt_buf y, dy, db;
    kt_buf_init(&y, 8);
    kt_buf_init(&dy, 8);
    kt_buf_init(&db, 4);
    memcpy(y.h, y0, sizeof y0);
    memcpy(dy.h, dy0, sizeof dy0);
    kt_upload(&y);
    kt_upload(&dy);
    struct kern_bias_act_bwd_args a = {.rows = 2, .cols = 4, .y = y.d, .ldy = 4, .dy = dy.d, .lddy = 4,
                                       .dbias = db.d, .accumulate = 0, .act = KERN_ACT_RELU};
    TH_EQ_ST_REQ(kt_be.i->bias_act_bwd(kt_be.ctx, &a), TR_OK);
    kt_download(&dy);
    kt_download(&db);
    TH_CHECKF(dy.h[0] == 5.0f, "y NaN: dy' %g, want dy (5)", (double)dy.h[0]);
    TH_CHECKF(isnan(dy.h[1]), "y > 0, dy NaN: dy' %g", (double)dy.h[1]);
    TH_CHECKF(dy.h[2] == 0.0f, "y = 0, dy NaN: dy' %g, want 0", (double)dy.h[2]);
    TH_CHECKF(dy.h[3] == 1.0f, "y inf: dy' %g", (double)dy.h[3]);
    TH_CHECKF(isinf(dy.h[7]), "y > 0, dy inf: dy' %g", (double)dy.h[7]);
    TH_CHECKF(db.h[0] == 6.0f && isnan(db.h[1]) && db.h[2] == 1.0f && isinf(db.h[3]), "dbias %g %g %g %g",
              (double)db.h[0], (double)db.h[1], (double)db.h[2], (double)db.h[3]);
    TH_CHECK(kt_buf_guard_ok(&dy) && kt_buf_guard_ok(&db));
    kt_buf_release(&db);
    kt_buf_release(&dy);
    kt_buf_release(&y);
}

/* ---- gemm -------------------------------------------------------------------------- */

/* C (4, 5) = A (4, 3) B (3, 5) with A[1][2] = NaN and B[0][3] = inf: row 1 of C is
 * NaN, column 3 of the other rows is +-inf or NaN, every other element finite. */
static void test_gemm(void)
{
    KT_NEED_OP(KERN_OP_GEMM);
    struct kt_rng r = kt_rng_seed(5);
    struct kt_buf a, b, c;
    kt_buf_init(&a, 12);
    kt_buf_init(&b, 15);
    kt_buf_init(&c, 20);
    kt_fill(&r, a.h, 12, 0.5f, 1.0f); /* positive, so inf * a is never NaN */
    kt_fill(&r, b.h, 15, 0.5f, 1.0f);
    a.h[1 * 3 + 2] = NAN;
    b.h[0 * 5 + 3] = INFINITY;
    kt_upload(&a);
    kt_upload(&b);
    struct kern_gemm_args g = {.m = 4, .n = 5, .k = 3, .alpha = 1.0f, .beta = 0.0f, .a = a.d, .lda = 3, .b = b.d,
                               .ldb = 5, .c = c.d, .ldc = 5};
    TH_EQ_ST_REQ(kt_be.i->gemm(kt_be.ctx, &g), TR_OK);
    kt_download(&c);
    int bad = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            float v = c.h[i * 5 + j];
            int ok = i == 1 ? isnan(v) : j == 3 ? isinf(v) && v > 0 : isfinite(v);
            if (!ok && bad++ < 5)
                th_failf_(__FILE__, __LINE__, "gemm C[%d][%d] = %g", i, j, (double)v);
        }
    TH_EQ(bad, 0);
    TH_CHECK(kt_buf_guard_ok(&c));
    kt_buf_release(&c);
    kt_buf_release(&b);
    kt_buf_release(&a);
}

/* ---- interaction --------------------------------------------------------------------- */

enum { I_B = 3, I_N = 5, I_D = 7 };

/* NaN in x[1, 2, 3]: in sample 1 the pairs with vector 2 are NaN and every other
 * output is finite; samples 0 and 2 are untouched. With the NaN in vector 0 (the
 * bottom output) the copied bottom part carries it too. Backward: a NaN pair
 * gradient (i, j) makes dx rows i and j NaN in that sample only. */
static void test_interact(void)
{
    KT_NEED_OP(KERN_OP_INTERACT_FWD);
    KT_NEED_OP(KERN_OP_INTERACT_BWD);
    const int64_t out_w = km_interact_width(I_N, I_D, 1), xn = (int64_t)I_B * I_N * I_D;
    struct kt_rng r = kt_rng_seed(11);
    struct kt_buf x, out, dout, dx;
    kt_buf_init(&x, xn);
    kt_buf_init(&out, I_B * out_w);
    kt_buf_init(&dout, I_B * out_w);
    kt_buf_init(&dx, xn);
    for (int vec = 0; vec < 3; vec += 2) {
        kt_fill(&r, x.h, xn, -1, 1);
        x.h[(1 * I_N + vec) * I_D + 3] = NAN;
        kt_upload(&x);
        struct kern_interact_fwd_args fa = {I_B, I_N, I_D, 1, x.d, out.d, out_w};
        TH_EQ_ST_REQ(kt_be.i->interact_fwd(kt_be.ctx, &fa), TR_OK);
        kt_download(&out);
        int bad = 0;
        for (int s = 0; s < I_B; s++)
            for (int64_t c = 0; c < out_w; c++) {
                float v = out.h[s * out_w + c];
                int want_nan = 0;
                if (s == 1 && c < I_D)
                    want_nan = vec == 0 && c == 3;
                else if (s == 1 && c < I_D + km_tri_count(I_N))
                    for (int i = 1; i < I_N; i++)
                        for (int j = 0; j < i; j++)
                            if (km_tri_index(i, j) == c - I_D)
                                want_nan = i == vec || j == vec;
                if ((want_nan ? !isnan(v) : !isfinite(v)) && bad++ < 5)
                    th_failf_(__FILE__, __LINE__, "NaN in vector %d: out[%d][%lld] = %g", vec, s, (long long)c,
                              (double)v);
            }
        TH_EQ(bad, 0);
    }
    /* backward: finite x, a NaN pair gradient (3, 1) in sample 2 */
    kt_fill(&r, x.h, xn, -1, 1);
    kt_fill(&r, dout.h, I_B * out_w, -1, 1);
    dout.h[2 * out_w + I_D + km_tri_index(3, 1)] = NAN;
    kt_upload(&x);
    kt_upload(&dout);
    /* the guard flag, in backend memory: 1 here, and 0 after a clean backward (it
     * is set, not only raised) */
    int32_t *flag = NULL, fh = -1;
    TH_EQ_ST_REQ(kt_be.i->mem_alloc(kt_be.ctx, sizeof *flag, (void **)&flag), TR_OK);
    struct kern_interact_bwd_args ba = {I_B, I_N, I_D, 1, x.d, dout.d, out_w, dx.d, flag};
    TH_EQ_ST_REQ(kt_be.i->interact_bwd(kt_be.ctx, &ba), TR_OK);
    TH_EQ_ST(kt_be.i->copy(kt_be.ctx, &fh, flag, sizeof fh, KERN_D2H), TR_OK);
    TH_CHECKF(fh == 1, "the guard flag of a backward with a NaN pair gradient is %d, want 1", (int)fh);
    kt_download(&dx);
    int bad = 0;
    for (int s = 0; s < I_B; s++)
        for (int i = 0; i < I_N; i++)
            for (int k = 0; k < I_D; k++) {
                float v = dx.h[(s * I_N + i) * I_D + k];
                int want_nan = s == 2 && (i == 3 || i == 1);
                if ((want_nan ? !isnan(v) : !isfinite(v)) && bad++ < 5)
                    th_failf_(__FILE__, __LINE__, "NaN pair gradient: dx[%d][%d][%d] = %g", s, i, k, (double)v);
            }
    TH_EQ(bad, 0);
    dout.h[2 * out_w + I_D + km_tri_index(3, 1)] = 0.5f;
    kt_upload(&dout);
    TH_EQ_ST(kt_be.i->interact_bwd(kt_be.ctx, &ba), TR_OK);
    TH_EQ_ST(kt_be.i->copy(kt_be.ctx, &fh, flag, sizeof fh, KERN_D2H), TR_OK);
    TH_CHECKF(fh == 0, "the guard flag of a finite backward is %d, want 0", (int)fh);
    x.h[5] = INFINITY; /* an inf input: 0 * inf on the diagonal makes its row NaN */
    kt_upload(&x);
    TH_EQ_ST(kt_be.i->interact_bwd(kt_be.ctx, &ba), TR_OK);
    TH_EQ_ST(kt_be.i->copy(kt_be.ctx, &fh, flag, sizeof fh, KERN_D2H), TR_OK);
    TH_CHECKF(fh == 1, "the guard flag of a backward with an inf input is %d, want 1", (int)fh);
    kt_be.i->mem_release(kt_be.ctx, flag, sizeof *flag);
    TH_CHECK(kt_buf_guard_ok(&out) && kt_buf_guard_ok(&dx));
    kt_buf_release(&dx);
    kt_buf_release(&dout);
    kt_buf_release(&out);
    kt_buf_release(&x);
}

/* ---- embeddings ---------------------------------------------------------------------- */

/* Table (4, 3) with row 2 = [1, NaN, inf]: a bag holding row 2 gets NaN and inf in
 * those columns (sum and mean); bags without it stay finite. */
static void test_emb_fwd(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    struct kt_buf tab, out;
    kt_buf_init(&tab, 12);
    kt_buf_init(&out, 9);
    for (int i = 0; i < 12; i++)
        tab.h[i] = (float)i * 0.25f;
    tab.h[2 * 3 + 1] = NAN;
    tab.h[2 * 3 + 2] = INFINITY;
    kt_upload(&tab);
    const int64_t idx_h[5] = {0, 2, 1, 3, 2}, off_h[4] = {0, 2, 4, 5};
    int64_t *idx = kt_dev_dup(idx_h, sizeof idx_h), *off = kt_dev_dup(off_h, sizeof off_h);
    for (int comb = 0; comb < 2; comb++) {
        int64_t badpos = -5;
        struct kern_emb_fwd_args a = {.table = tab.d, .rows = 4, .ld = 3, .c0 = 0, .c1 = 3, .idx = idx,
                                      .idx_dtype = KERN_I64, .offsets = off, .nbags = 3,
                                      .comb = comb ? KERN_COMB_MEAN : KERN_COMB_SUM, .out = out.d, .out_ld = 3,
                                      .bad_pos = &badpos};
        TH_EQ_ST_REQ(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
        kt_download(&out);
        /* bags: {0, 2}, {1, 3}, {2} */
        for (int b = 0; b < 3; b++) {
            const int has2 = b != 1;
            TH_CHECKF(isfinite(out.h[b * 3]), "comb %d bag %d col 0: %g", comb, b, (double)out.h[b * 3]);
            TH_CHECKF(has2 ? isnan(out.h[b * 3 + 1]) : isfinite(out.h[b * 3 + 1]), "comb %d bag %d col 1: %g", comb,
                      b, (double)out.h[b * 3 + 1]);
            TH_CHECKF(has2 ? isinf(out.h[b * 3 + 2]) : isfinite(out.h[b * 3 + 2]), "comb %d bag %d col 2: %g", comb,
                      b, (double)out.h[b * 3 + 2]);
        }
    }
    TH_CHECK(kt_buf_guard_ok(&out));
    kt_dev_release(off, sizeof off_h);
    kt_dev_release(idx, sizeof idx_h);
    kt_buf_release(&out);
    kt_buf_release(&tab);
}

/* A NaN in one bag's gradient reaches exactly the rows that bag touches (SGD and
 * Adagrad, weights and accumulators); the other rows stay finite. */
static void test_emb_update(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const int64_t rows = 6, w = 2, nbags = 4;
    const int64_t idx_h[4] = {1, 3, 1, 4}; /* one-hot: bag b = row idx[b] */
    int64_t *idx = kt_dev_dup(idx_h, sizeof idx_h);
    for (int opt = 0; opt < 2; opt++) {
        struct kt_buf tab, acc, grad;
        kt_buf_init(&tab, rows * w);
        kt_buf_init(&acc, rows * w);
        kt_buf_init(&grad, nbags * w);
        for (int64_t i = 0; i < rows * w; i++) {
            tab.h[i] = 0.5f;
            acc.h[i] = 0.1f;
        }
        for (int64_t i = 0; i < nbags * w; i++)
            grad.h[i] = 0.25f;
        grad.h[2 * w + 1] = NAN; /* bag 2 (row 1), column 1 */
        grad.h[3 * w + 0] = INFINITY; /* bag 3 (row 4), column 0 */
        kt_upload(&tab);
        kt_upload(&acc);
        kt_upload(&grad);
        size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, nbags, w, 1);
        void *ws = kt_dev_alloc(ws_bytes);
        int64_t badpos = -5;
        struct kern_emb_update_args a = {.table = tab.d, .rows = rows, .ld = w, .c0 = 0, .c1 = w,
                                         .accum = opt ? acc.d : NULL, .accum_ld = w, .idx = idx,
                                         .idx_dtype = KERN_I64, .offsets = NULL, .nbags = nbags,
                                         .comb = KERN_COMB_SUM, .grad = grad.d, .grad_ld = w, .grad_scale = 1.0f,
                                         .hp = {opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD, 0.1f, 1e-7f}, .ws = ws,
                                         .ws_bytes = ws_bytes, .bad_pos = &badpos};
        TH_EQ_ST_REQ(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
        kt_download(&tab);
        kt_download(&acc);
        for (int64_t rr = 0; rr < rows; rr++)
            for (int64_t c = 0; c < w; c++) {
                float v = tab.h[rr * w + c];
                const int nan_expected = rr == 1 && c == 1;
                const int inf_expected = rr == 4 && c == 0; /* SGD: -inf; Adagrad: inf/inf = NaN */
                if (nan_expected)
                    TH_CHECKF(isnan(v), "%s: row %lld col %lld = %g, want NaN", opt ? "adagrad" : "sgd",
                              (long long)rr, (long long)c, (double)v);
                else if (inf_expected)
                    TH_CHECKF(!isfinite(v), "%s: row %lld col %lld = %g, want non-finite", opt ? "adagrad" : "sgd",
                              (long long)rr, (long long)c, (double)v);
                else
                    TH_CHECKF(isfinite(v), "%s: row %lld col %lld = %g, want finite", opt ? "adagrad" : "sgd",
                              (long long)rr, (long long)c, (double)v);
            }
        if (opt)
            TH_CHECKF(isnan(acc.h[1 * w + 1]) && isinf(acc.h[4 * w]) && isfinite(acc.h[3 * w]),
                      "adagrad accumulators %g %g %g", (double)acc.h[1 * w + 1], (double)acc.h[4 * w],
                      (double)acc.h[3 * w]);
        TH_CHECK(kt_buf_guard_ok(&tab) && kt_buf_guard_ok(&acc));
        kt_dev_release(ws, ws_bytes);
        kt_buf_release(&grad);
        kt_buf_release(&acc);
        kt_buf_release(&tab);
    }
    kt_dev_release(idx, sizeof idx_h);
}

/* ---- dense optimizer ------------------------------------------------------------------ */

static void test_dense_update(void)
{
    KT_NEED_OP(KERN_OP_DENSE_UPDATE);
    const float g0[4] = {NAN, INFINITY, -INFINITY, 1.0f};
    for (int opt = 0; opt < 2; opt++) {
        struct kt_buf p, g, acc;
        kt_buf_init(&p, 4);
        kt_buf_init(&g, 4);
        kt_buf_init(&acc, 4);
        for (int i = 0; i < 4; i++) {
            p.h[i] = 1.0f;
            acc.h[i] = 0.1f;
        }
        memcpy(g.h, g0, sizeof g0);
        kt_upload(&p);
        kt_upload(&g);
        kt_upload(&acc);
        struct kern_dense_update_args a = {.n = 4, .param = p.d, .grad = g.d, .accum = opt ? acc.d : NULL,
                                           .grad_scale = 1.0f, .hp = {opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD, 0.5f,
                                                                      1e-7f}};
        TH_EQ_ST_REQ(kt_be.i->dense_update(kt_be.ctx, &a), TR_OK);
        kt_download(&p);
        const char *name = opt ? "adagrad" : "sgd";
        TH_CHECKF(isnan(p.h[0]), "%s: NaN gradient gives %g", name, (double)p.h[0]);
        TH_CHECKF(!isfinite(p.h[1]) && !isfinite(p.h[2]), "%s: inf gradients give %g %g", name, (double)p.h[1],
                  (double)p.h[2]);
        if (!opt)
            TH_CHECKF(p.h[1] < 0 && p.h[2] > 0, "sgd: p - lr * (+-inf) gives %g %g", (double)p.h[1],
                      (double)p.h[2]);
        TH_CHECKF(isfinite(p.h[3]), "%s: finite gradient gives %g", name, (double)p.h[3]);
        TH_CHECK(kt_buf_guard_ok(&p));
        kt_buf_release(&acc);
        kt_buf_release(&g);
        kt_buf_release(&p);
    }
}

/* ---- loss ------------------------------------------------------------------------------- */

/* A NaN logit makes the loss sum and its gradient NaN; an infinite logit makes the
 * loss sum non-finite wherever the label disagrees or the product x*y is inf-inf. */
static void test_bce(void)
{
    KT_NEED_OP(KERN_OP_BCE);
    struct kt_buf x, y, dl;
    kt_buf_init(&x, 3);
    kt_buf_init(&y, 3);
    kt_buf_init(&dl, 3);
    const float xs[] = {NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < TR_ARRAY_SIZE(xs); k++) {
        for (int lab = 0; lab < 2; lab++) {
            x.h[0] = 0.5f;
            x.h[1] = xs[k];
            x.h[2] = -0.25f;
            y.h[0] = y.h[1] = y.h[2] = (float)lab;
            kt_upload(&x);
            kt_upload(&y);
            double loss = 0.0;
            struct kern_bce_args a = {.n = 3, .logits = x.d, .labels = y.d, .loss_sum = &loss, .dlogits = dl.d,
                                      .grad_scale = 1.0f};
            TH_EQ_ST_REQ(kt_be.i->bce(kt_be.ctx, &a), TR_OK);
            kt_download(&dl);
            if (isnan(xs[k]))
                TH_CHECKF(isnan(loss) && isnan(dl.h[1]), "NaN logit, label %d: loss %g dlogit %g", lab, loss,
                          (double)dl.h[1]);
            /* x = -inf, y = 1: +inf; the other three hold inf - inf or inf * 0: NaN
             * (PyTorch gives NaN or +inf there); never a finite loss */
            else
                TH_CHECKF(!isfinite(loss), "logit %g, label %d: loss %g", (double)xs[k], lab, loss);
            TH_CHECKF(isfinite(dl.h[0]) && isfinite(dl.h[2]), "finite logits' gradients %g %g", (double)dl.h[0],
                      (double)dl.h[2]);
        }
    }
    TH_CHECK(kt_buf_guard_ok(&dl));
    kt_buf_release(&dl);
    kt_buf_release(&y);
    kt_buf_release(&x);
}

/* ---- the kmath functions themselves (host) -------------------------------------------- */

static void test_kmath(void)
{
    TH_CHECK(isnan(km_relu(NAN)));
    TH_CHECK(isinf(km_relu(INFINITY)) && km_relu(-INFINITY) == 0.0f);
    TH_CHECK(km_relu(-0.0f) == 0.0f && !signbit(km_relu(-0.0f)));
    TH_CHECK(km_relu(2.5f) == 2.5f && km_relu(-2.5f) == 0.0f);
    TH_CHECK(km_relu_grad(NAN, 3.0f) == 3.0f);
    TH_CHECK(isnan(km_relu_grad(1.0f, NAN)));
    TH_CHECK(km_relu_grad(0.0f, NAN) == 0.0f && km_relu_grad(-1.0f, 4.0f) == 0.0f);
    TH_CHECK(isnan(km_sigmoid(NAN)));
    TH_CHECK(km_sigmoid(INFINITY) == 1.0f && km_sigmoid(-INFINITY) == 0.0f);
    TH_CHECK(isnan(km_bce_logit(NAN, 0.0f)) && isnan(km_bce_logit(NAN, 1.0f)));
    TH_CHECK(isnan(km_bce_logit_grad(NAN, 1.0f)));
    /* inf * 0 is NaN: x = +inf, y = 0 gives NaN (PyTorch: +inf); both are non-finite */
    TH_CHECK(!isfinite(km_bce_logit(INFINITY, 0.0f)) && isinf(km_bce_logit(-INFINITY, 1.0f)));
    struct km_optim h = {0.1f, 1e-7f};
    float p = 1.0f, acc = 0.1f;
    km_sgd_step(&p, NAN, &h);
    TH_CHECK(isnan(p));
    p = 1.0f;
    km_adagrad_step(&p, &acc, NAN, &h);
    TH_CHECK(isnan(p) && isnan(acc));
    TH_CHECK(isnan(km_sumsq_add(0.0, NAN)) && isinf(km_sumsq_add(1.0, -INFINITY)));
    TH_CHECK(isfinite(km_sumsq_add(1e300, 3.4028234663852886e38f)));
    TH_CHECK(!km_half_is_finite(0x7c00u) && !km_half_is_finite(0xfc00u) && !km_half_is_finite(0x7e00u) &&
             !km_half_is_finite(0x7c01u));
    TH_CHECK(km_half_is_finite(0x7bffu) && km_half_is_finite(0x0000u) && km_half_is_finite(0x8001u) &&
             km_half_is_finite(0x3c00u));
}

static const struct th_case cases[] = {
    {"bias_act_fwd", test_bias_act_fwd},
    {"bias_act_bwd", test_bias_act_bwd},
    {"gemm", test_gemm},
    {"interact", test_interact},
    {"emb_fwd", test_emb_fwd},
    {"emb_update", test_emb_update},
    {"dense_update", test_dense_update},
    {"bce", test_bce},
    {"kmath", test_kmath},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
