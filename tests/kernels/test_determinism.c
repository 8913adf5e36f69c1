/* test_determinism.c: each op run twice on one instance gives the same bits, and
 * separate instances on 1, 2 and 3 threads agree, on every backend (kt_main; each
 * instance gets its own copy of the inputs in its memory). emb_update, interact
 * fwd/bwd, bias_act_bwd, bce, dense_update, fill and copy_rows are bitwise
 * thread-independent by construction (one thread reduces each output in a fixed
 * order, or there is no reduction): compared bitwise. gemm (oneDNN may split k by
 * thread count) and emb_fwd (no such promise in kern.h): within float rounding. */
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

/* The inputs of every op, in the memory of one instance (host originals below). */
struct dev_in {
    float *e_table, *e_grad;
    int64_t *e_idx, *e_off;
    float *d_x, *d_w, *d_b, *d_dy, *d_y;
    float *i_x, *i_dout;
    float *b_x, *b_y;
};

/* One op on fixed inputs: `init` sets the starting contents of the output's n floats
 * on the host (NULL: every byte 0 on one run and 0xff on the other, for ops that
 * overwrite all of it), then `run` runs the op on kt_be, writing its outputs (as
 * floats) into out[0..n) in backend memory. */
struct op {
    const char *name;
    int bitwise_across_threads;
    int64_t n; /* floats of output */
    void (*init)(float *out, int64_t n);
    void (*run)(const struct dev_in *in, float *out);
};

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

static void run_emb_fwd(const struct dev_in *in, float *out)
{
    struct kern_emb_fwd_args a = {.table = in->e_table, .rows = E_ROWS, .ld = E_LD, .c0 = 2, .c1 = 2 + E_W,
                                  .idx = in->e_idx, .idx_dtype = KERN_I64, .offsets = in->e_off, .nbags = E_BAGS,
                                  .comb = KERN_COMB_MEAN, .out = out, .out_ld = E_W};
    enum tr_status rc = kt_be.i->emb_fwd(kt_be.ctx, &a, 1);
    TR_ASSERT(rc == TR_OK);
}

/* Adagrad on a copy of the table; out = [table | accum]. */
static void init_emb_update(float *out, int64_t n)
{
    (void)n;
    memcpy(out, e_table, sizeof e_table);
    for (int i = 0; i < E_ROWS * E_LD; i++)
        out[E_ROWS * E_LD + i] = 0.1f;
}

static void run_emb_update(const struct dev_in *in, float *out)
{
    float *tab = out, *acc = out + E_ROWS * E_LD;
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, e_off[E_BAGS], E_W, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    struct kern_emb_update_args a = {.table = tab, .rows = E_ROWS, .ld = E_LD, .c0 = 2, .c1 = 2 + E_W,
                                     .accum = acc, .accum_ld = E_LD, .idx = in->e_idx, .idx_dtype = KERN_I64,
                                     .offsets = in->e_off, .nbags = E_BAGS, .comb = KERN_COMB_MEAN,
                                     .grad = in->e_grad, .grad_ld = E_W, .grad_scale = 0.37f,
                                     .hp = {KERN_OPT_ADAGRAD, 0.01f, 1e-8f}, .ws = ws, .ws_bytes = ws_bytes};
    enum tr_status rc = kt_be.i->emb_update(kt_be.ctx, &a, 1);
    TR_ASSERT(rc == TR_OK);
    /* one-hot SGD on top, all ~10000 ids as bags */
    a.offsets = NULL;
    a.nbags = e_off[E_BAGS];
    a.hp.kind = KERN_OPT_SGD;
    a.accum = NULL;
    rc = kt_be.i->emb_update(kt_be.ctx, &a, 1);
    TR_ASSERT(rc == TR_OK);
    kt_dev_release(ws, ws_bytes);
}

/* ---- gemm + bias_act: a 256 x 300 x 129 layer ------------------------------------------ */

enum { D_M = 256, D_K = 300, D_N = 129 };
static float d_x[D_M * D_K], d_w[D_K * D_N], d_b[D_N], d_dy[D_M * D_N], d_y[D_M * D_N];

static void dense_inputs(void)
{
    struct kt_rng r = kt_rng_seed(2);
    kt_fill(&r, d_x, D_M * D_K, -1, 1);
    kt_fill(&r, d_w, D_K * D_N, -0.1f, 0.1f);
    kt_fill(&r, d_b, D_N, -0.1f, 0.1f);
    kt_fill(&r, d_dy, D_M * D_N, -1, 1);
    /* a fixed forward output for bias_act_bwd (not through gemm) */
    for (int i = 0; i < D_M * D_N; i++)
        d_y[i] = d_dy[(i * 7) % (D_M * D_N)] > -0.3f ? fabsf(d_dy[(i * 7) % (D_M * D_N)]) : 0.0f;
}

static void run_gemm_bias_act(const struct dev_in *in, float *out)
{
    struct kern_gemm_args g = {.m = D_M, .n = D_N, .k = D_K, .alpha = 1, .beta = 0, .a = in->d_x, .lda = D_K,
                               .b = in->d_w, .ldb = D_N, .c = out, .ldc = D_N};
    enum tr_status rc = kt_be.i->gemm(kt_be.ctx, &g);
    TR_ASSERT(rc == TR_OK);
    struct kern_bias_act_fwd_args f = {.rows = D_M, .cols = D_N, .y = out, .ldy = D_N, .bias = in->d_b,
                                       .act = KERN_ACT_RELU};
    rc = kt_be.i->bias_act_fwd(kt_be.ctx, &f);
    TR_ASSERT(rc == TR_OK);
}

/* out = [dy | dbias], accumulated onto 0.5. */
static void init_bias_act_bwd(float *out, int64_t n)
{
    (void)n;
    memcpy(out, d_dy, sizeof d_dy);
    for (int j = 0; j < D_N; j++)
        out[D_M * D_N + j] = 0.5f;
}

static void run_bias_act_bwd(const struct dev_in *in, float *out)
{
    struct kern_bias_act_bwd_args a = {.rows = D_M, .cols = D_N, .y = in->d_y, .ldy = D_N, .dy = out,
                                       .lddy = D_N, .dbias = out + D_M * D_N, .accumulate = 1, .act = KERN_ACT_RELU};
    enum tr_status rc = kt_be.i->bias_act_bwd(kt_be.ctx, &a);
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

static void run_interact_fwd(const struct dev_in *in, float *out)
{
    struct kern_interact_fwd_args a = {.batch = I_B, .n = I_N, .d = I_D, .has_bottom = 1, .x = in->i_x,
                                       .out = out, .out_w = I_W};
    enum tr_status rc = kt_be.i->interact_fwd(kt_be.ctx, &a);
    TR_ASSERT(rc == TR_OK);
}

static void run_interact_bwd(const struct dev_in *in, float *out)
{
    struct kern_interact_bwd_args a = {.batch = I_B, .n = I_N, .d = I_D, .has_bottom = 1, .x = in->i_x,
                                       .dout = in->i_dout, .out_w = I_W, .dx = out};
    enum tr_status rc = kt_be.i->interact_bwd(kt_be.ctx, &a);
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

/* out = [dlogits | loss_sum as two floats' worth of bits] (loss_sum is a host pointer) */
static void run_bce(const struct dev_in *in, float *out)
{
    double loss = 0;
    struct kern_bce_args a = {.n = B_N, .logits = in->b_x, .labels = in->b_y, .loss_sum = &loss, .dlogits = out,
                              .grad_scale = 1.0f / B_N};
    enum tr_status rc = kt_be.i->bce(kt_be.ctx, &a);
    TR_ASSERT(rc == TR_OK);
    kt_h2d(out + B_N, &loss, sizeof loss);
}

/* ---- dense_update: element-wise --------------------------------------------------------- */

/* out = [param | accum] */
static void init_dense_update(float *out, int64_t n)
{
    (void)n;
    memcpy(out, d_w, sizeof d_w);
    for (int i = 0; i < D_K * D_N; i++)
        out[D_K * D_N + i] = 0.01f;
}

static void run_dense_update(const struct dev_in *in, float *out)
{
    struct kern_dense_update_args a = {.n = D_K * D_N, .param = out, .grad = in->d_x, .accum = out + D_K * D_N,
                                       .grad_scale = 0.5f, .hp = {KERN_OPT_ADAGRAD, 0.01f, 1e-8f}};
    enum tr_status rc = kt_be.i->dense_update(kt_be.ctx, &a);
    TR_ASSERT(rc == TR_OK);
}

/* ---- fill and copy_rows: row-parallel memory ops ----------------------------------------- */

enum { F_ROWS = 2000, F_COLS = 67, F_LD = 70 };

/* Both ops leave padding alone: start from zeros, so that it compares equal. */
static void init_zero(float *out, int64_t n)
{
    memset(out, 0, (size_t)n * sizeof(float));
}

/* Glorot over [0, F_ROWS/2) and bias-normal over the rest, padded rows, a slice of a
 * larger tensor; out (F_ROWS, F_LD) keeps its padding. */
static void run_fill(const struct dev_in *in, float *out)
{
    (void)in;
    struct kern_fill_args a = {.kind = KERN_FILL_GLOROT, .dst = out, .rows = F_ROWS / 2, .cols = F_COLS,
                               .ld = F_LD, .seed = 7, .stream = 3, .elem_ld = F_COLS + 5, .elem0 = 11,
                               .a = 300, .b = 67};
    enum tr_status rc = kt_be.i->fill(kt_be.ctx, &a);
    TR_ASSERT(rc == TR_OK);
    a.kind = KERN_FILL_NORMAL;
    a.dst = out + (F_ROWS / 2) * F_LD;
    a.elem0 = 11 + (F_ROWS / 2) * (F_COLS + 5);
    rc = kt_be.i->fill(kt_be.ctx, &a);
    TR_ASSERT(rc == TR_OK);
}

/* Three blocks of the embedding table and the dense inputs into out, in one call. */
static void run_copy_rows(const struct dev_in *in, float *out)
{
    const struct kern_copy_rows_args b[3] = {
        {.dst = out, .ldd = E_W + 3, .src = in->e_table + 2, .lds = E_LD, .rows = E_ROWS, .cols = E_W},
        {.dst = out + E_ROWS * (E_W + 3), .ldd = D_K, .src = in->d_x, .lds = D_K, .rows = D_M, .cols = D_K},
        {.dst = out + E_ROWS * (E_W + 3) + D_M * D_K, .ldd = D_N, .src = in->d_w + 1, .lds = D_N, .rows = D_K - 1,
         .cols = D_N - 1},
    };
    enum tr_status rc = kt_be.i->copy_rows(kt_be.ctx, b, 3);
    TR_ASSERT(rc == TR_OK);
}

static const struct op ops[] = {
    {"emb_fwd", 0, E_BAGS * E_W, NULL, run_emb_fwd},
    {"emb_update", 1, 2 * E_ROWS * E_LD, init_emb_update, run_emb_update},
    {"gemm+bias_act_fwd", 0, D_M * D_N, NULL, run_gemm_bias_act},
    {"bias_act_bwd", 1, D_M * D_N + D_N, init_bias_act_bwd, run_bias_act_bwd},
    {"interact_fwd", 1, I_B * I_W, NULL, run_interact_fwd},
    {"interact_bwd", 1, I_B * I_N * I_D, NULL, run_interact_bwd},
    {"bce", 1, B_N + 2, NULL, run_bce},
    {"dense_update", 1, 2 * D_K * D_N, init_dense_update, run_dense_update},
    {"fill", 1, F_ROWS * F_LD, init_zero, run_fill},
    {"copy_rows", 1, E_ROWS * (E_W + 3) + D_M * D_K + (D_K - 1) * D_N, init_zero, run_copy_rows},
};
#define NOPS ((int)TR_ARRAY_SIZE(ops))

/* Every op of the list; the cases skip on a backend that lacks one. */
#define NEED_OPS()                                                                        \
    do {                                                                                  \
        KT_NEED_OP(KERN_OP_EMB_FWD);                                                      \
        KT_NEED_OP(KERN_OP_EMB_UPDATE);                                                   \
        KT_NEED_OP(KERN_OP_GEMM);                                                         \
        KT_NEED_OP(KERN_OP_BIAS_ACT_FWD);                                                 \
        KT_NEED_OP(KERN_OP_BIAS_ACT_BWD);                                                 \
        KT_NEED_OP(KERN_OP_INTERACT_FWD);                                                 \
        KT_NEED_OP(KERN_OP_INTERACT_BWD);                                                 \
        KT_NEED_OP(KERN_OP_BCE);                                                          \
        KT_NEED_OP(KERN_OP_DENSE_UPDATE);                                                 \
        KT_NEED_OP(KERN_OP_FILL);                                                         \
        KT_NEED_OP(KERN_OP_COPY_ROWS);                                                    \
    } while (0)

static void inputs(void)
{
    emb_inputs();
    dense_inputs();
    interact_inputs();
    bce_inputs();
}

/* ---- instances -------------------------------------------------------------------------- */

/* A new instance of kt_be's backend on `threads` threads with its own copy of the
 * inputs; kt_be points at it until inst_close. */
struct inst {
    struct kern_backend saved, be;
    struct dev_in in;
};

static void inst_open(struct inst *s, int threads)
{
    s->saved = kt_be;
    kt_open(threads, &s->be);
    kt_be = s->be;
    s->in.e_table = kt_dev_dup(e_table, sizeof e_table);
    s->in.e_grad = kt_dev_dup(e_grad, sizeof e_grad);
    s->in.e_idx = kt_dev_dup(e_idx, sizeof e_idx);
    s->in.e_off = kt_dev_dup(e_off, sizeof e_off);
    s->in.d_x = kt_dev_dup(d_x, sizeof d_x);
    s->in.d_w = kt_dev_dup(d_w, sizeof d_w);
    s->in.d_b = kt_dev_dup(d_b, sizeof d_b);
    s->in.d_dy = kt_dev_dup(d_dy, sizeof d_dy);
    s->in.d_y = kt_dev_dup(d_y, sizeof d_y);
    s->in.i_x = kt_dev_dup(i_x, sizeof i_x);
    s->in.i_dout = kt_dev_dup(i_dout, sizeof i_dout);
    s->in.b_x = kt_dev_dup(b_x, sizeof b_x);
    s->in.b_y = kt_dev_dup(b_y, sizeof b_y);
}

static void inst_close(struct inst *s)
{
    kt_dev_release(s->in.b_y, sizeof b_y);
    kt_dev_release(s->in.b_x, sizeof b_x);
    kt_dev_release(s->in.i_dout, sizeof i_dout);
    kt_dev_release(s->in.i_x, sizeof i_x);
    kt_dev_release(s->in.d_y, sizeof d_y);
    kt_dev_release(s->in.d_dy, sizeof d_dy);
    kt_dev_release(s->in.d_b, sizeof d_b);
    kt_dev_release(s->in.d_w, sizeof d_w);
    kt_dev_release(s->in.d_x, sizeof d_x);
    kt_dev_release(s->in.e_off, sizeof e_off);
    kt_dev_release(s->in.e_idx, sizeof e_idx);
    kt_dev_release(s->in.e_grad, sizeof e_grad);
    kt_dev_release(s->in.e_table, sizeof e_table);
    kt_be = s->saved;
    kern_backend_close(&s->be);
}

/* Runs op o on the current instance: host[0..n) is set to the byte `fill` (then
 * init), uploaded, run over, and downloaded again. */
static void run_op(const struct op *o, const struct dev_in *in, float *host, int fill)
{
    const size_t bytes = (size_t)o->n * sizeof(float);
    memset(host, fill, bytes);
    if (o->init)
        o->init(host, o->n);
    float *out = kt_dev_dup(host, bytes);
    o->run(in, out);
    kt_d2h(host, out, bytes);
    kt_dev_release(out, bytes);
}

/* Same instance, twice: identical bits for every op, gemm included. */
static void test_run_to_run(void)
{
    NEED_OPS();
    inputs();
    for (int t = 0; t < NT; t++) {
        struct inst s;
        inst_open(&s, thread_counts[t]);
        for (int o = 0; o < NOPS; o++) {
            float *a = tr_malloc((size_t)ops[o].n * sizeof(float)), *b = tr_malloc((size_t)ops[o].n * sizeof(float));
            run_op(&ops[o], &s.in, a, 0);
            run_op(&ops[o], &s.in, b, 0xff);
            char what[64];
            snprintf(what, sizeof what, "%s twice on %d threads", ops[o].name, thread_counts[t]);
            KT_SAME_BITS(what, a, b, ops[o].n);
            tr_free(b);
            tr_free(a);
        }
        inst_close(&s);
    }
}

/* An instance on 1 thread vs instances on 2 and 3: bitwise for the ops built for it,
 * float rounding otherwise. */
static void test_across_threads(void)
{
    NEED_OPS();
    inputs();
    float *base[NOPS];
    struct inst s;
    inst_open(&s, 1);
    for (int o = 0; o < NOPS; o++) {
        base[o] = tr_malloc((size_t)ops[o].n * sizeof(float));
        run_op(&ops[o], &s.in, base[o], 0);
    }
    inst_close(&s);
    for (int t = 1; t < NT; t++) {
        inst_open(&s, thread_counts[t]);
        for (int o = 0; o < NOPS; o++) {
            const int64_t n = ops[o].n;
            float *other = tr_malloc((size_t)n * sizeof(float));
            run_op(&ops[o], &s.in, other, 0);
            char what[64];
            snprintf(what, sizeof what, "%s on 1 vs %d threads", ops[o].name, thread_counts[t]);
            if (ops[o].bitwise_across_threads) {
                KT_SAME_BITS(what, base[o], other, n);
            } else {
                double *ref = tr_malloc((size_t)n * sizeof(double));
                for (int64_t i = 0; i < n; i++)
                    ref[i] = base[o][i];
                KT_CLOSE(what, other, ref, n, 1e-5, 1e-5, 1e-10);
                tr_free(ref);
            }
            tr_free(other);
        }
        inst_close(&s);
    }
    for (int o = 0; o < NOPS; o++)
        tr_free(base[o]);
}

static const struct th_case cases[] = {
    {"run_to_run", test_run_to_run},
    {"across_threads", test_across_threads},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
