/* test_determinism.c: each op run twice on one thread count gives the same bits,
 * and runs on 1, 2 and 3 threads agree. emb_update, interact fwd/bwd, bias_act_bwd,
 * bce and dense_update are bitwise thread-independent by construction (one thread
 * reduces each output in a fixed order): compared bitwise. gemm (oneDNN may split k
 * by thread count) and emb_fwd (no such promise in kern.h): within float rounding. */
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

static const int thread_counts[] = {1, 2, 3};
#define NT ((int)TR_ARRAY_SIZE(thread_counts))

/* One op on fixed inputs: `run` writes its outputs (as floats) into out[0..n). */
struct op {
    const char *name;
    int bitwise_across_threads;
    int64_t n; /* floats of output */
    void (*run)(struct kern_backend *be, float *out);
};

static struct kern_backend cpu(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 0);
    return be;
}

/* ---- emb_fwd / emb_update: 20000 ids over 500 rows (about 40 duplicates each) --------- */

enum { E_ROWS = 500, E_W = 37, E_LD = 40, E_BAGS = 4000 };
static float e_table[E_ROWS * E_LD], e_grad[5 * E_BAGS * E_W]; /* rows: one per bag or per id */
static int64_t e_idx[5 * E_BAGS], e_off[E_BAGS + 1];

static void emb_inputs(void)
{
    struct kt_rng r = kt_rng_seed(1);
    kt_fill(&r, e_table, E_ROWS * E_LD, -1, 1);
    kt_fill(&r, e_grad, 5 * E_BAGS * E_W, -1, 1);
    e_off[0] = 0;
    for (int b = 0; b < E_BAGS; b++)
        e_off[b + 1] = e_off[b] + kt_below(&r, 6); /* 0..5 ids, about 10000 in all */
    for (int64_t i = 0; i < e_off[E_BAGS]; i++)
        e_idx[i] = kt_below(&r, E_ROWS) % (1 + kt_below(&r, E_ROWS)); /* skewed towards small ids */
}

static void run_emb_fwd(struct kern_backend *be, float *out)
{
    struct kern_emb_fwd_args a = {.table = e_table, .rows = E_ROWS, .ld = E_LD, .c0 = 2, .c1 = 2 + E_W,
                                  .idx = e_idx, .idx_dtype = KERN_I64, .offsets = e_off, .nbags = E_BAGS,
                                  .comb = KERN_COMB_MEAN, .out = out, .out_ld = E_W};
    enum tr_status rc = be->i->emb_fwd(be->ctx, &a, 1);
    TR_ASSERT(rc == TR_OK);
}

/* Adagrad on a copy of the table; out = [table | accum]. */
static void run_emb_update(struct kern_backend *be, float *out)
{
    float *tab = out, *acc = out + E_ROWS * E_LD;
    memcpy(tab, e_table, sizeof e_table);
    for (int i = 0; i < E_ROWS * E_LD; i++)
        acc[i] = 0.1f;
    size_t ws_bytes = be->i->emb_update_ws_bytes(be->ctx, e_off[E_BAGS], E_W, 1);
    void *ws = tr_malloc(ws_bytes);
    struct kern_emb_update_args a = {.table = tab, .rows = E_ROWS, .ld = E_LD, .c0 = 2, .c1 = 2 + E_W,
                                     .accum = acc, .accum_ld = E_LD, .idx = e_idx, .idx_dtype = KERN_I64,
                                     .offsets = e_off, .nbags = E_BAGS, .comb = KERN_COMB_MEAN, .grad = e_grad,
                                     .grad_ld = E_W, .grad_scale = 0.37f, .hp = {KERN_OPT_ADAGRAD, 0.01f, 1e-8f},
                                     .ws = ws, .ws_bytes = ws_bytes};
    enum tr_status rc = be->i->emb_update(be->ctx, &a, 1);
    TR_ASSERT(rc == TR_OK);
    /* one-hot SGD on top, all ~10000 ids as bags */
    a.offsets = NULL;
    a.nbags = e_off[E_BAGS];
    a.hp.kind = KERN_OPT_SGD;
    a.accum = NULL;
    rc = be->i->emb_update(be->ctx, &a, 1);
    TR_ASSERT(rc == TR_OK);
    tr_free(ws);
}

/* ---- gemm + bias_act: a 256 x 300 x 129 layer ------------------------------------------ */

enum { D_M = 256, D_K = 300, D_N = 129 };
static float d_x[D_M * D_K], d_w[D_K * D_N], d_b[D_N], d_dy[D_M * D_N];

static void dense_inputs(void)
{
    struct kt_rng r = kt_rng_seed(2);
    kt_fill(&r, d_x, D_M * D_K, -1, 1);
    kt_fill(&r, d_w, D_K * D_N, -0.1f, 0.1f);
    kt_fill(&r, d_b, D_N, -0.1f, 0.1f);
    kt_fill(&r, d_dy, D_M * D_N, -1, 1);
}

static void run_gemm_bias_act(struct kern_backend *be, float *out)
{
    struct kern_gemm_args g = {.m = D_M, .n = D_N, .k = D_K, .alpha = 1, .beta = 0, .a = d_x, .lda = D_K,
                               .b = d_w, .ldb = D_N, .c = out, .ldc = D_N};
    enum tr_status rc = be->i->gemm(be->ctx, &g);
    TR_ASSERT(rc == TR_OK);
    struct kern_bias_act_fwd_args f = {.rows = D_M, .cols = D_N, .y = out, .ldy = D_N, .bias = d_b,
                                       .act = KERN_ACT_RELU};
    rc = be->i->bias_act_fwd(be->ctx, &f);
    TR_ASSERT(rc == TR_OK);
}

/* bias_act_bwd on a fixed forward output (not through gemm); out = [dy | dbias]. */
static void run_bias_act_bwd(struct kern_backend *be, float *out)
{
    static float y[D_M * D_N];
    for (int i = 0; i < D_M * D_N; i++)
        y[i] = d_dy[(i * 7) % (D_M * D_N)] > -0.3f ? fabsf(d_dy[(i * 7) % (D_M * D_N)]) : 0.0f;
    memcpy(out, d_dy, sizeof d_dy);
    float *db = out + D_M * D_N;
    for (int j = 0; j < D_N; j++)
        db[j] = 0.5f;
    struct kern_bias_act_bwd_args a = {.rows = D_M, .cols = D_N, .y = y, .ldy = D_N, .dy = out, .lddy = D_N,
                                       .dbias = db, .accumulate = 1, .act = KERN_ACT_RELU};
    enum tr_status rc = be->i->bias_act_bwd(be->ctx, &a);
    TR_ASSERT(rc == TR_OK);
}

/* ---- interaction: batch 64, n 27, d 17 (with bottom) ------------------------------------ */

enum { I_B = 64, I_N = 27, I_D = 17, I_W = 368 }; /* km_interact_width(27, 17, 1) = 368 */
static float i_x[I_B * I_N * I_D], i_dout[I_B * I_W];

static void interact_inputs(void)
{
    struct kt_rng r = kt_rng_seed(3);
    TR_ASSERT(km_interact_width(I_N, I_D, 1) == I_W);
    kt_fill(&r, i_x, I_B * I_N * I_D, -1, 1);
    kt_fill(&r, i_dout, I_B * I_W, -1, 1);
}

static void run_interact_fwd(struct kern_backend *be, float *out)
{
    struct kern_interact_fwd_args a = {.batch = I_B, .n = I_N, .d = I_D, .has_bottom = 1, .x = i_x, .out = out,
                                       .out_w = I_W};
    enum tr_status rc = be->i->interact_fwd(be->ctx, &a);
    TR_ASSERT(rc == TR_OK);
}

static void run_interact_bwd(struct kern_backend *be, float *out)
{
    struct kern_interact_bwd_args a = {.batch = I_B, .n = I_N, .d = I_D, .has_bottom = 1, .x = i_x,
                                       .dout = i_dout, .out_w = I_W, .dx = out};
    enum tr_status rc = be->i->interact_bwd(be->ctx, &a);
    TR_ASSERT(rc == TR_OK);
}

/* ---- bce: 10000 samples (10 blocks of the CPU's 1024) ------------------------------------ */

enum { B_N = 10000 };
static float b_x[B_N], b_y[B_N];

static void bce_inputs(void)
{
    struct kt_rng r = kt_rng_seed(4);
    kt_fill(&r, b_x, B_N, -10, 10);
    for (int i = 0; i < B_N; i++)
        b_y[i] = (float)(kt_next(&r) >> 63);
}

/* out = [dlogits | loss_sum as two floats' worth of bits] */
static void run_bce(struct kern_backend *be, float *out)
{
    double loss = 0;
    struct kern_bce_args a = {.n = B_N, .logits = b_x, .labels = b_y, .loss_sum = &loss, .dlogits = out,
                              .grad_scale = 1.0f / B_N};
    enum tr_status rc = be->i->bce(be->ctx, &a);
    TR_ASSERT(rc == TR_OK);
    memcpy(out + B_N, &loss, sizeof loss);
}

/* ---- dense_update: element-wise --------------------------------------------------------- */

static void run_dense_update(struct kern_backend *be, float *out)
{
    float *p = out, *acc = out + D_K * D_N;
    memcpy(p, d_w, sizeof d_w);
    for (int i = 0; i < D_K * D_N; i++)
        acc[i] = 0.01f;
    struct kern_dense_update_args a = {.n = D_K * D_N, .param = p, .grad = d_x, .accum = acc, .grad_scale = 0.5f,
                                       .hp = {KERN_OPT_ADAGRAD, 0.01f, 1e-8f}};
    enum tr_status rc = be->i->dense_update(be->ctx, &a);
    TR_ASSERT(rc == TR_OK);
}

static const struct op ops[] = {
    {"emb_fwd", 0, E_BAGS * E_W, run_emb_fwd},
    {"emb_update", 1, 2 * E_ROWS * E_LD, run_emb_update},
    {"gemm+bias_act_fwd", 0, D_M * D_N, run_gemm_bias_act},
    {"bias_act_bwd", 1, D_M * D_N + D_N, run_bias_act_bwd},
    {"interact_fwd", 1, I_B * I_W, run_interact_fwd},
    {"interact_bwd", 1, I_B * I_N * I_D, run_interact_bwd},
    {"bce", 1, B_N + 2, run_bce},
    {"dense_update", 1, 2 * D_K * D_N, run_dense_update},
};

static void inputs(void)
{
    emb_inputs();
    dense_inputs();
    interact_inputs();
    bce_inputs();
}

/* Same thread count, twice: identical bits for every op, gemm included. */
static void test_run_to_run(void)
{
    struct kern_backend be = cpu();
    inputs();
    for (size_t o = 0; o < TR_ARRAY_SIZE(ops); o++) {
        float *a = tr_malloc((size_t)ops[o].n * sizeof(float)), *b = tr_malloc((size_t)ops[o].n * sizeof(float));
        for (int t = 0; t < NT; t++) {
            be.i->set_threads(be.ctx, thread_counts[t]);
            memset(a, 0, (size_t)ops[o].n * sizeof(float));
            memset(b, 0xff, (size_t)ops[o].n * sizeof(float));
            ops[o].run(&be, a);
            ops[o].run(&be, b);
            char what[64];
            snprintf(what, sizeof what, "%s twice on %d threads", ops[o].name, thread_counts[t]);
            TH_CHECK(kt_same_bits(what, a, b, ops[o].n));
        }
        tr_free(b);
        tr_free(a);
    }
    be.i->set_threads(be.ctx, 0);
}

/* 1 thread vs 2 and 3: bitwise for the ops built for it, float rounding otherwise. */
static void test_across_threads(void)
{
    struct kern_backend be = cpu();
    inputs();
    for (size_t o = 0; o < TR_ARRAY_SIZE(ops); o++) {
        const int64_t n = ops[o].n;
        float *base = tr_malloc((size_t)n * sizeof(float)), *other = tr_malloc((size_t)n * sizeof(float));
        double *ref = tr_malloc((size_t)n * sizeof(double));
        be.i->set_threads(be.ctx, 1);
        ops[o].run(&be, base);
        for (int64_t i = 0; i < n; i++)
            ref[i] = base[i];
        for (int t = 1; t < NT; t++) {
            be.i->set_threads(be.ctx, thread_counts[t]);
            memset(other, 0, (size_t)n * sizeof(float));
            ops[o].run(&be, other);
            char what[64];
            snprintf(what, sizeof what, "%s on 1 vs %d threads", ops[o].name, thread_counts[t]);
            if (ops[o].bitwise_across_threads)
                TH_CHECK(kt_same_bits(what, base, other, n));
            else
                kt_close(what, other, ref, n, 1e-5, 1e-5, 1e-10);
        }
        tr_free(ref);
        tr_free(other);
        tr_free(base);
    }
    be.i->set_threads(be.ctx, 0);
}

static const struct th_case cases[] = {
    {"run_to_run", test_run_to_run},
    {"across_threads", test_across_threads},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
