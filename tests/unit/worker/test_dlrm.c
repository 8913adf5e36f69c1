/* test_dlrm.c: the model as a whole, driven through the one-process step
 * (worker/solo.h): config validation, the interaction order, the seed's
 * initialiser statistics, a finite-difference check of every gradient the
 * backward pass produces (dense parameters, embeddings; with and without a bottom
 * MLP), bad batches, memory accounting and the tensor walk. Tensors are read and written through
 * the backend (dlrm_tensor_read/_write). The PyTorch golden fixtures
 * (tests/golden) check the same model against an independent reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../kernels/kmath.h"
#include "../../../loader_svc/synth.h"
#include "../../../worker/dlrm_internal.h" /* dense_blocks_aligned looks at the layout */
#include "../../../worker/solo.h"

static const int64_t rows4[4] = {30, 7, 50, 7};

static struct dlrm_cfg small_cfg(int num_features)
{
    struct dlrm_cfg c;
    memset(&c, 0, sizeof c);
    c.num_features = num_features;
    c.ntables = 4;
    c.rows = rows4;
    c.emb_dim = 8;
    c.nbottom = 2;
    c.bottom[0] = 16;
    c.bottom[1] = 8;
    c.ntop = 3;
    c.top[0] = 16;
    c.top[1] = 8;
    c.top[2] = 1;
    c.optim = KERN_OPT_SGD;
    c.adagrad_init = 0.1f;
    c.adagrad_eps = 1e-7f;
    c.seed = 7;
    c.max_batch = 32;
    return c;
}

static struct kern_backend open_cpu(int threads)
{
    struct kern_backend be;
    struct kern_backend_opts o = {.threads = threads, .device = -1, .local_rank = 0};
    TR_ASSERT(kern_backend_open("cpu", &o, &be) == TR_OK);
    return be;
}

/* n floats of tensor k (index t) in a new host array, or NULL. */
static float *read_all(const struct dlrm *m, enum dlrm_tensor k, int t)
{
    int64_t n = dlrm_tensor_numel(m, k, t);
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (p && dlrm_tensor_read(m, k, t, 0, n, p) != TR_OK) {
        free(p);
        return NULL;
    }
    return p;
}

static void bad_configs(void)
{
    struct kern_backend be = open_cpu(1);
    struct dlrm *m = NULL;
    struct dlrm_cfg c = small_cfg(13);
    c.bottom[1] = 4; /* must equal emb_dim */
    TH_EQ_ST(dlrm_new(&c, &be, &m), TR_ERR_ARG);
    TH_CHECK(m == NULL);
    c = small_cfg(13);
    c.top[2] = 2;
    TH_EQ_ST(dlrm_new(&c, &be, &m), TR_ERR_ARG);
    c = small_cfg(13);
    int64_t zc[4] = {30, 0, 5, 5};
    c.rows = zc;
    TH_EQ_ST(dlrm_new(&c, &be, &m), TR_ERR_ARG);
    c = small_cfg(0);
    c.ntables = 0;
    TH_EQ_ST(dlrm_new(&c, &be, &m), TR_ERR_ARG);
    c = small_cfg(13);
    c.max_batch = 0;
    TH_EQ_ST(dlrm_new(&c, &be, &m), TR_ERR_ARG);
    kern_backend_close(&be);
}

static void interaction_order(void)
{
    struct kern_backend be = open_cpu(1);
    struct dlrm *m = NULL;
    struct dlrm_cfg c = small_cfg(13);
    TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
    /* cardinality descending, ties by index: 50 (t2), 30 (t0), 7 (t1), 7 (t3) */
    const int want[4] = {2, 3, 1, 4};
    for (int t = 0; t < 4; t++) {
        struct dlrm_table_info ti;
        dlrm_get_table(m, t, &ti);
        TH_EQ(ti.pos, want[t]);
    }
    struct dlrm_info mi;
    dlrm_get_info(m, &mi);
    TH_EQ(mi.n, 5);
    TH_EQ(mi.num_ld, 16);
    TH_EQ(mi.top_in_w, 24); /* 8 + 10 pairs -> 18 -> 24 */
    struct dlrm_layer_info b0, t0;
    dlrm_get_layer(m, 0, 0, &b0);
    dlrm_get_layer(m, 1, 0, &t0);
    TH_EQ(b0.in, 16);
    TH_EQ(t0.in, 24);
    TH_EQ_STR(b0.name, "bottom_mlp_layer_0");
    dlrm_free(&m);
    TH_CHECK(m == NULL);
    c = small_cfg(0); /* no bottom MLP: tables fill rows 0..3 */
    TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
    struct dlrm_table_info t2, t3;
    dlrm_get_table(m, 2, &t2);
    dlrm_get_table(m, 3, &t3);
    TH_EQ(t2.pos, 0);
    TH_EQ(t3.pos, 3);
    dlrm_get_info(m, &mi);
    TH_EQ(mi.top_in_w, 8); /* 6 pairs -> 8 */
    dlrm_free(&m);
    kern_backend_close(&be);
}

static void init_statistics(void)
{
    struct kern_backend be = open_cpu(2);
    struct dlrm *m = NULL, *m8 = NULL;
    int64_t rows[2] = {20000, 3};
    struct dlrm_cfg c = small_cfg(13);
    c.ntables = 2;
    c.rows = rows;
    c.emb_dim = 64;
    c.nbottom = 2;
    c.bottom[0] = 512;
    c.bottom[1] = 64;
    c.ntop = 2;
    c.top[0] = 256;
    c.top[1] = 1;
    TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
    /* embeddings: U[-b, b), b = sqrt(1/rows): mean 0, variance b^2/3 */
    for (int t = 0; t < 2; t++) {
        struct dlrm_table_info ti;
        dlrm_get_table(m, t, &ti);
        float *w = read_all(m, DLRM_TABLE, t);
        TH_REQUIRE(w);
        double b = sqrt(1.0 / (double)ti.rows), s = 0, s2 = 0;
        int64_t n = ti.rows * ti.width, out = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = w[i];
            out += v < -b || v >= b;
            s += v;
            s2 += v * v;
        }
        free(w);
        double mean = s / n, var = s2 / n - mean * mean;
        TH_CHECKF(out == 0, "table %d: %lld values outside +-%g", t, (long long)out, b);
        if (n > 10000) {
            TH_CHECKF(fabs(mean) < 0.01 * b, "table %d mean %g", t, mean);
            TH_NEAR(var / (b * b / 3.0), 1.0, 0.02, 0);
        }
    }
    /* kernels: Glorot truncated normal -> std sqrt(2/(fan_in+fan_out)), |w| <= 2 sigma */
    struct dlrm_layer_info L, T1;
    dlrm_get_layer(m, 0, 0, &L); /* 16 x 512 */
    dlrm_get_layer(m, 1, 1, &T1);
    float *p = read_all(m, DLRM_PARAMS, 0);
    TH_REQUIRE(p);
    const float *w = p + L.w_off, *bias = p + L.b_off;
    double sigma = sqrt(2.0 / (16 + 512)) / 0.87962566103423978;
    double s = 0, s2 = 0;
    int64_t n = (int64_t)L.in * L.out, out = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = w[i];
        out += fabs(v) > 2.0 * sigma * (1 + 1e-6);
        s += v;
        s2 += v * v;
    }
    double sd = sqrt(s2 / n - (s / n) * (s / n));
    TH_CHECKF(out == 0, "%lld kernel values beyond 2 sigma", (long long)out);
    TH_NEAR(sd / sqrt(2.0 / (16 + 512)), 1.0, 0.03, 0);
    /* biases: N(0, 1/units): the 512 biases of layer 0 have std ~ 1/sqrt(512) */
    s = s2 = 0;
    for (int i = 0; i < 512; i++) {
        s += bias[i];
        s2 += (double)bias[i] * bias[i];
    }
    sd = sqrt(s2 / 512 - (s / 512) * (s / 512));
    TH_NEAR(sd * sqrt(512.0), 1.0, 0.15, 0);
    /* the last top bias has units = 1: std 1, so it is not zero */
    TH_CHECK(p[T1.b_off] != 0.0f);
    /* re-initialising gives the same parameters; another seed does not */
    float w5 = w[5], e77;
    TH_EQ_ST(dlrm_tensor_read(m, DLRM_TABLE, 0, 77, 1, &e77), TR_OK);
    float junk[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    TH_EQ_ST(dlrm_tensor_write(m, DLRM_PARAMS, 0, L.w_off, 8, junk), TR_OK);
    TH_EQ_ST(dlrm_tensor_write(m, DLRM_TABLE, 0, 72, 8, junk), TR_OK);
    TH_EQ_ST(dlrm_init_params(m), TR_OK);
    float a, e;
    TH_EQ_ST(dlrm_tensor_read(m, DLRM_PARAMS, 0, L.w_off + 5, 1, &a), TR_OK);
    TH_EQ_ST(dlrm_tensor_read(m, DLRM_TABLE, 0, 77, 1, &e), TR_OK);
    TH_CHECK(a == w5 && e == e77);
    c.seed = 8;
    TH_EQ_ST_REQ(dlrm_new(&c, &be, &m8), TR_OK);
    TH_EQ_ST(dlrm_tensor_read(m8, DLRM_PARAMS, 0, L.w_off + 5, 1, &a), TR_OK);
    TH_EQ_ST(dlrm_tensor_read(m8, DLRM_TABLE, 0, 77, 1, &e), TR_OK);
    TH_CHECK(a != w5 && e != e77);
    /* out-of-range tensor access is refused */
    TH_EQ_ST(dlrm_tensor_read(m, DLRM_TABLE, 2, 0, 1, &a), TR_ERR_ARG);
    TH_EQ_ST(dlrm_tensor_read(m, DLRM_PARAMS, 0, dlrm_tensor_numel(m, DLRM_PARAMS, 0), 1, &a), TR_ERR_ARG);
    TH_EQ_ST(dlrm_tensor_read(m, DLRM_PARAMS_STATE, 0, 0, 1, &a), TR_ERR_ARG); /* SGD: no state */
    free(p);
    dlrm_free(&m8);
    dlrm_free(&m);
    kern_backend_close(&be);
}

/* The loss of the model on the loaded batch (forward + backward; no update). */
static double loss_of(struct solo *s)
{
    double loss = NAN;
    if (hybrid_forward(s->h) != TR_OK || hybrid_backward(s->h, &loss) != TR_OK)
        return NAN;
    return loss;
}

/* Central difference of the loss along element i of tensor (k, t), at steps h
 * and h/2. When the two disagree a ReLU kink lies within h (the loss is not
 * smooth there) and the point is skipped; *ok says whether it was usable. */
static double central(struct solo *s, enum dlrm_tensor k, int t, int64_t i, float h, int *ok)
{
    float keep, v;
    TR_ASSERT(dlrm_tensor_read(s->m, k, t, i, 1, &keep) == TR_OK);
    double d[2];
    for (int j = 0; j < 2; j++) {
        float hk = j ? h / 2 : h;
        v = keep + hk;
        TR_ASSERT(dlrm_tensor_write(s->m, k, t, i, 1, &v) == TR_OK);
        double lp = loss_of(s);
        v = keep - hk;
        TR_ASSERT(dlrm_tensor_write(s->m, k, t, i, 1, &v) == TR_OK);
        double lm = loss_of(s);
        d[j] = (lp - lm) / (2.0 * (double)hk);
    }
    TR_ASSERT(dlrm_tensor_write(s->m, k, t, i, 1, &keep) == TR_OK);
    *ok = fabs(d[0] - d[1]) <= 0.01 * fmax(fabs(d[1]), 1e-3);
    return d[1];
}

/* Central differences in float with a step sized for float32 round-off; the
 * tolerance (2% relative to the gradient scale) reflects that, while a wrong
 * gradient (sign, index, missing term) is off by 100% or more. Points next to a
 * ReLU kink are skipped (at most 5% of them). */
static void fd_check(int num_features)
{
    struct kern_backend be = open_cpu(1);
    struct solo s;
    struct dlrm_cfg c = small_cfg(num_features);
    c.max_batch = 16;
    struct batch *b = NULL;
    float *grads = NULL, *dx = NULL;
    TH_EQ_ST_REQ(solo_open(&s, &c, &be, 0), TR_OK);
    TH_EQ_ST_REQ(batch_new(16, num_features, 4, NULL, &b), TR_OK);
    struct synth_cfg sc = {3, num_features, 4, rows4, SYNTH_IDS_POWERLAW, NULL, 0};
    TH_EQ_ST_REQ(synth_fill(&sc, BATCH_TRAIN, 0, 16, b), TR_OK);
    TH_EQ_ST_REQ(solo_load(&s, b), TR_OK);
    double loss = 0;
    TH_EQ_ST_REQ(hybrid_forward(s.h), TR_OK);
    TH_EQ_ST_REQ(hybrid_backward(s.h, &loss), TR_OK);
    struct dlrm_info mi;
    dlrm_get_info(s.m, &mi);
    grads = read_all(s.m, DLRM_GRADS, 0);
    dx = read_all(s.m, DLRM_DX, 0);
    TH_REQUIRE(grads && dx);
    double gmax = 0;
    for (int64_t i = 0; i < mi.nparams; i++)
        gmax = fmax(gmax, fabs(grads[i]));
    int bad = 0, checked = 0, kinks = 0, ok;
    const float h = 4e-3f;
    for (int64_t i = 0; i < mi.nparams; i += 3) {
        double fd = central(&s, DLRM_PARAMS, 0, i, h, &ok);
        if (!ok) {
            kinks++;
            continue;
        }
        checked++;
        if (fabs(fd - grads[i]) > 0.02 * gmax + 0.02 * fabs(fd)) {
            if (bad++ < 5)
                printf("# param %lld: backward %g, finite difference %g\n", (long long)i, grads[i], fd);
        }
    }
    TH_CHECKF(bad == 0, "%d of %d dense gradients disagree with finite differences", bad, checked);
    printf("# %d dense gradients checked, %d skipped at kinks\n", checked, kinks);
    int dense_checked = checked;
    /* embedding gradients: d loss / d table[t][r][k] = sum over samples using r of dx[s][pos][k] */
    bad = checked = 0;
    const int32_t *cat = batch_cat(b);
    for (int t = 0; t < 4; t++) {
        struct dlrm_table_info ti;
        dlrm_get_table(s.m, t, &ti);
        int32_t r = cat[t * b->cap + 0];
        for (int k = 0; k < c.emb_dim; k += 3) {
            double g = 0, gm = 1e-9;
            for (int j = 0; j < 16; j++) {
                double v = dx[((int64_t)j * mi.n + ti.pos) * c.emb_dim + k];
                gm = fmax(gm, fabs(v));
                if (cat[t * b->cap + j] == r)
                    g += v;
            }
            double fd = central(&s, DLRM_TABLE, t, (int64_t)r * ti.width + k, h, &ok);
            if (!ok) {
                kinks++;
                continue;
            }
            checked++;
            if (fabs(fd - g) > 0.02 * gm + 0.02 * fabs(fd)) {
                if (bad++ < 5)
                    printf("# table %d row %d col %d: backward %g, finite difference %g\n", t, r, k, g, fd);
            }
        }
    }
    TH_CHECKF(bad == 0, "%d of %d embedding gradients disagree with finite differences", bad, checked);
    TH_CHECKF(kinks * 20 < dense_checked + checked, "%d points skipped next to ReLU kinks, %d checked", kinks,
              dense_checked + checked);
    free(grads);
    free(dx);
    batch_free(&b);
    solo_close(&s);
    kern_backend_close(&be);
}

static void fd_with_bottom(void)
{
    fd_check(13);
}

static void fd_without_bottom(void)
{
    fd_check(0);
}

/* Batches the step must refuse: another layout, a damaged header, ids outside
 * their table. Nothing is trained on a refused batch. */
static void bad_batches(void)
{
    struct kern_backend be = open_cpu(1);
    struct solo s;
    struct dlrm_cfg c = small_cfg(13);
    struct batch *b = NULL, *wide = NULL, *narrow = NULL;
    TH_EQ_ST_REQ(solo_open(&s, &c, &be, 0), TR_OK);
    TH_EQ(hybrid_batch_bytes(s.h), batch_bytes(32, 13, 4, NULL));
    TH_EQ_ST_REQ(batch_new(32, 13, 4, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(batch_new(64, 13, 4, NULL, &wide), TR_OK);
    TH_EQ_ST_REQ(batch_new(32, 12, 4, NULL, &narrow), TR_OK);
    TH_EQ_ST(solo_load(&s, wide), TR_ERR_FORMAT);   /* room for more than the step's batch */
    TH_EQ_ST(solo_load(&s, narrow), TR_ERR_FORMAT); /* another numerical width */
    b->n = 8;
    b->magic ^= 1;
    TH_EQ_ST(solo_load(&s, b), TR_ERR_FORMAT);
    b->magic ^= 1;
    b->n = 33;
    TH_EQ_ST(solo_load(&s, b), TR_ERR_FORMAT); /* more samples than its capacity */
    b->n = 8;
    float before[8], after[8];
    TH_EQ_ST(dlrm_tensor_read(s.m, DLRM_TABLE, 1, 0, 8, before), TR_OK);
    int32_t *cat = batch_cat(b);
    cat[1 * b->cap + 5] = 7; /* table 1 has 7 rows */
    TH_EQ_ST(solo_load(&s, b), TR_OK);
    TH_EQ_ST(hybrid_forward(s.h), TR_ERR_RANGE);
    cat[1 * b->cap + 5] = -1;
    TH_EQ_ST(solo_load(&s, b), TR_OK);
    TH_EQ_ST(hybrid_forward(s.h), TR_ERR_RANGE);
    TH_EQ_ST(dlrm_tensor_read(s.m, DLRM_TABLE, 1, 0, 8, after), TR_OK);
    TH_CHECK(memcmp(before, after, sizeof before) == 0);
    cat[1 * b->cap + 5] = 6;
    TH_EQ_ST(solo_load(&s, b), TR_OK);
    TH_EQ_ST(hybrid_forward(s.h), TR_OK);
    batch_free(&b);
    batch_free(&wide);
    batch_free(&narrow);
    solo_close(&s);
    kern_backend_close(&be);
}

static void memory_accounting(void)
{
    struct kern_backend be = open_cpu(1);
    for (int opt = 0; opt < 2; opt++) {
        struct tr_alloc_stats s0, s1;
        tr_alloc_get_stats(&s0);
        struct dlrm *m = NULL;
        struct dlrm_cfg c = small_cfg(13);
        c.optim = opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD;
        TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
        tr_alloc_get_stats(&s1);
        struct dlrm_bytes mb, pb;
        dlrm_get_bytes(m, &mb);
        TH_EQ_ST(dlrm_plan_bytes(&c, &be, &pb), TR_OK);
        TH_CHECK(memcmp(&mb, &pb, sizeof mb) == 0); /* the plan is what gets allocated */
        int64_t model = mb.dense + mb.embeddings + mb.activations;
        int64_t live = s1.live_bytes - s0.live_bytes;
        /* the big blocks are the model; the rest is bookkeeping (struct, table list) */
        TH_CHECKF(live >= model && live - model < 8192, "allocated %lld, model reports %lld", (long long)live,
                  (long long)model);
        dlrm_free(&m);
        tr_alloc_get_stats(&s1);
        TH_EQ(s1.live_bytes, s0.live_bytes);
    }
    kern_backend_close(&be);
}

/* The dense parameters, their gradients and their Adagrad state each start 64-byte
 * aligned whatever the parameter count (odd here: the last layer's bias of 1), so the
 * weight-gradient GEMMs write to aligned memory. */
static void dense_blocks_aligned(void)
{
    struct kern_backend be = open_cpu(1);
    for (int opt = 0; opt < 2; opt++) {
        struct dlrm *m = NULL;
        struct dlrm_cfg c = small_cfg(13);
        c.optim = opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD;
        TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
        TH_CHECKF(m->nparams % 2 == 1, "%lld parameters: the case needs an odd count", (long long)m->nparams);
        TH_CHECK(((uintptr_t)m->params & 63) == 0);
        TH_CHECK(((uintptr_t)m->grads & 63) == 0);
        TH_CHECK(m->grads >= m->params + m->nparams);
        if (opt) {
            TH_CHECK(m->accum && ((uintptr_t)m->accum & 63) == 0);
            TH_CHECK(m->accum >= m->grads + m->nparams);
        }
        dlrm_free(&m);
    }
    kern_backend_close(&be);
}

static void alloc_failures(void)
{
    struct kern_backend be = open_cpu(1);
    struct tr_alloc_stats s0, s1;
    tr_alloc_get_stats(&s0);
    int failures = 0;
    for (int k = 1; k < 40; k++) {
        struct dlrm *m = NULL;
        struct dlrm_cfg c = small_cfg(13);
        c.optim = KERN_OPT_ADAGRAD;
        tr_alloc_fail_at(k);
        enum tr_status rc = dlrm_new(&c, &be, &m);
        int fired = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        if (fired) {
            failures++;
            TH_CHECKF(rc == TR_ERR_NOMEM && m == NULL, "allocation %d failed but dlrm_new returned %d", k, rc);
        } else {
            TH_EQ_ST(rc, TR_OK);
        }
        dlrm_free(&m);
        tr_alloc_get_stats(&s1);
        TH_CHECKF(s1.live_bytes == s0.live_bytes, "leak after failing allocation %d: %lld bytes", k,
                  (long long)(s1.live_bytes - s0.live_bytes));
    }
    TH_CHECK(failures >= 5);
    kern_backend_close(&be);
}

/* The tensor walk (dlrm_tensors): every view, in order. */
struct walk_rec {
    int n, stop_at;
    char name[64][64];
    struct dlrm_tensor_view v[64];
};

static enum tr_status walk_collect(void *ctx, const struct dlrm_tensor_view *v)
{
    struct walk_rec *w = ctx;
    if (w->n == w->stop_at)
        return TR_ERR_IO;
    TR_ASSERT(w->n < 64);
    snprintf(w->name[w->n], sizeof w->name[0], "%s", v->name);
    w->v[w->n++] = *v;
    return TR_OK;
}

/* Checks the view of a dense part at position i against the getters' offsets. */
static void check_dense_view(const struct walk_rec *w, int i, const char *name, enum dlrm_role role, int64_t off,
                             int64_t rows, int64_t cols, int ndim)
{
    TH_EQ_STR(w->name[i], name);
    TH_EQ(w->v[i].role, role);
    TH_EQ(w->v[i].k, role == DLRM_ROLE_PARAM ? DLRM_PARAMS : DLRM_PARAMS_STATE);
    TH_EQ(w->v[i].off, off);
    TH_EQ(w->v[i].rows, rows);
    TH_EQ(w->v[i].cols, cols);
    TH_EQ(w->v[i].ndim, ndim);
    TH_EQ(w->v[i].c0, 0);
    TH_EQ(w->v[i].c1, cols);
    TH_EQ(w->v[i].dtype, KERN_F32);
    TH_CHECK(w->v[i].buf != NULL);
}

static void tensor_walk(void)
{
    struct kern_backend be = open_cpu(1);
    struct dlrm *m = NULL;
    struct dlrm_cfg c = small_cfg(13);
    c.optim = KERN_OPT_ADAGRAD;
    c.interaction = DLRM_INTERACT_DCNV2;
    c.ncross = 1;
    c.cross_rank = 2;
    TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
    struct walk_rec *w = calloc(1, sizeof *w);
    TH_REQUIRE(w != NULL);
    w->stop_at = -1;
    TH_EQ_ST(dlrm_tensors(m, walk_collect, w), TR_OK);
    /* 2 bottom + 3 top layers (kernel, bias) and 1 cross layer (v, u, bias), each
     * with its Adagrad state, then 4 tables with theirs */
    TH_EQ(w->n, (2 * 2 + 3 * 2 + 3) * 2 + 4 * 2);
    int i = 0;
    char name[96];
    for (int top = 0; top < 2; top++) {
        for (int l = 0; l < (top ? 3 : 2); l++) {
            struct dlrm_layer_info L;
            dlrm_get_layer(m, top, l, &L);
            TH_EQ(w->v[i].group, top ? DLRM_GROUP_TOP : DLRM_GROUP_BOTTOM);
            TH_EQ(w->v[i].layer_index, l);
            TH_EQ_STR(w->v[i].part, "kernel");
            snprintf(name, sizeof name, "dense/%s/kernel", L.name);
            check_dense_view(w, i++, name, DLRM_ROLE_PARAM, L.w_off, L.in, L.out, 2);
            snprintf(name, sizeof name, "dense/%s/kernel/adagrad", L.name);
            check_dense_view(w, i++, name, DLRM_ROLE_STATE, L.w_off, L.in, L.out, 2);
            snprintf(name, sizeof name, "dense/%s/bias", L.name);
            check_dense_view(w, i++, name, DLRM_ROLE_PARAM, L.b_off, L.out, 1, 1);
            snprintf(name, sizeof name, "dense/%s/bias/adagrad", L.name);
            check_dense_view(w, i++, name, DLRM_ROLE_STATE, L.b_off, L.out, 1, 1);
        }
        if (top)
            continue;
        struct dlrm_cross_info X; /* the cross layers come between the bottom and top MLPs */
        dlrm_get_cross(m, 0, &X);
        TH_EQ(w->v[i].group, DLRM_GROUP_CROSS);
        TH_EQ_STR(w->v[i].layer, "cross_layer_0");
        check_dense_view(w, i++, "dense/cross_layer_0/v_kernel", DLRM_ROLE_PARAM, X.v_off, X.width, X.rank, 2);
        check_dense_view(w, i++, "dense/cross_layer_0/v_kernel/adagrad", DLRM_ROLE_STATE, X.v_off, X.width, X.rank,
                         2);
        check_dense_view(w, i++, "dense/cross_layer_0/u_kernel", DLRM_ROLE_PARAM, X.u_off, X.rank, X.width, 2);
        check_dense_view(w, i++, "dense/cross_layer_0/u_kernel/adagrad", DLRM_ROLE_STATE, X.u_off, X.rank, X.width,
                         2);
        check_dense_view(w, i++, "dense/cross_layer_0/bias", DLRM_ROLE_PARAM, X.b_off, X.width, 1, 1);
        check_dense_view(w, i++, "dense/cross_layer_0/bias/adagrad", DLRM_ROLE_STATE, X.b_off, X.width, 1, 1);
    }
    for (int t = 0; t < 4; t++) {
        for (int st = 0; st < 2; st++, i++) {
            snprintf(name, sizeof name, st ? "emb/%d/adagrad" : "emb/%d", t);
            TH_EQ_STR(w->name[i], name);
            TH_EQ(w->v[i].role, st ? DLRM_ROLE_EMB_STATE : DLRM_ROLE_EMB);
            TH_EQ(w->v[i].k, st ? DLRM_TABLE_STATE : DLRM_TABLE);
            TH_EQ(w->v[i].group, DLRM_GROUP_EMB);
            TH_EQ(w->v[i].index, t);
            TH_EQ(w->v[i].rows, rows4[t]);
            TH_EQ(w->v[i].cols, 8);
            TH_EQ(w->v[i].c0, 0);
            TH_EQ(w->v[i].c1, 8);
            TH_EQ(w->v[i].rows * (w->v[i].c1 - w->v[i].c0), dlrm_tensor_numel(m, w->v[i].k, t));
        }
    }
    /* the first error of the callback stops the walk */
    memset(w, 0, sizeof *w);
    w->stop_at = 3;
    TH_EQ_ST(dlrm_tensors(m, walk_collect, w), TR_ERR_IO);
    TH_EQ(w->n, 3);
    dlrm_free(&m);
    /* row-wise Adagrad: one state value per row of each table */
    c = small_cfg(13);
    c.optim = KERN_OPT_ROWWISE_ADAGRAD;
    TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
    memset(w, 0, sizeof *w);
    w->stop_at = -1;
    TH_EQ_ST(dlrm_tensors(m, walk_collect, w), TR_OK);
    int nstate = 0;
    for (int j = 0; j < w->n; j++) {
        if (w->v[j].role != DLRM_ROLE_EMB_STATE)
            continue;
        nstate++;
        TH_EQ(w->v[j].ndim, 1);
        TH_EQ(w->v[j].cols, 1);
        TH_EQ(w->v[j].c1 - w->v[j].c0, 1);
        TH_EQ(w->v[j].rows, dlrm_tensor_numel(m, DLRM_TABLE_STATE, w->v[j].index));
    }
    TH_EQ(nstate, 4);
    free(w);
    dlrm_free(&m);
    kern_backend_close(&be);
}

static const struct th_case cases[] = {
    {"bad_configs", bad_configs},
    {"interaction_order", interaction_order},
    {"init_statistics", init_statistics},
    {"fd_with_bottom", fd_with_bottom},
    {"fd_without_bottom", fd_without_bottom},
    {"bad_batches", bad_batches},
    {"memory_accounting", memory_accounting},
    {"alloc_failures", alloc_failures},
    {"dense_blocks_aligned", dense_blocks_aligned},
    {"tensor_walk", tensor_walk},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
