/* test_dlrm.c: the model as a whole: config validation, the interaction order,
 * the seed's initialiser statistics, a finite-difference check of every gradient
 * the backward pass produces (dense parameters and interaction input, with and
 * without a bottom MLP), bad batches, and memory accounting. The PyTorch golden
 * fixtures (tests/golden) check the same model against an independent reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../kernels/kmath.h"
#include "../../../loader_svc/synth.h"
#include "../../../worker/dlrm.h"

static const int64_t cards4[4] = {30, 7, 50, 7};

static struct dlrm_cfg small_cfg(int num_features)
{
    struct dlrm_cfg c;
    memset(&c, 0, sizeof c);
    c.num_features = num_features;
    c.ntables = 4;
    c.cards = cards4;
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

static void bad_configs(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 1);
    struct dlrm *m = NULL;
    struct dlrm_cfg c = small_cfg(13);
    c.bottom[1] = 4; /* must equal emb_dim */
    TH_CHECK(dlrm_new(&c, &be, &m) == TR_ERR_ARG && m == NULL);
    c = small_cfg(13);
    c.top[2] = 2;
    TH_CHECK(dlrm_new(&c, &be, &m) == TR_ERR_ARG);
    c = small_cfg(13);
    int64_t zc[4] = {30, 0, 5, 5};
    c.cards = zc;
    TH_CHECK(dlrm_new(&c, &be, &m) == TR_ERR_ARG);
    c = small_cfg(0);
    c.ntables = 0;
    TH_CHECK(dlrm_new(&c, &be, &m) == TR_ERR_ARG);
    c = small_cfg(13);
    c.max_batch = 0;
    TH_CHECK(dlrm_new(&c, &be, &m) == TR_ERR_ARG);
}

static void interaction_order(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 1);
    struct dlrm *m = NULL;
    struct dlrm_cfg c = small_cfg(13);
    TH_REQUIRE(dlrm_new(&c, &be, &m) == TR_OK);
    /* cardinality descending, ties by index: 50 (t2), 30 (t0), 7 (t1), 7 (t3) */
    TH_CHECK(m->tables[2].pos == 1);
    TH_CHECK(m->tables[0].pos == 2);
    TH_CHECK(m->tables[1].pos == 3);
    TH_CHECK(m->tables[3].pos == 4);
    TH_CHECK(m->n == 5 && m->num_ld == 16);
    TH_CHECK(m->top_in_w == 24); /* 8 + 10 pairs -> 18 -> 24 */
    TH_CHECK(m->bottom[0].in == 16 && m->top[0].in == 24);
    dlrm_free(&m);
    TH_CHECK(m == NULL);
    c = small_cfg(0); /* no bottom MLP: tables fill rows 0..3 */
    TH_REQUIRE(dlrm_new(&c, &be, &m) == TR_OK);
    TH_CHECK(m->tables[2].pos == 0 && m->tables[3].pos == 3);
    TH_CHECK(m->top_in_w == 8); /* 6 pairs -> 8 */
    dlrm_free(&m);
}

static void init_statistics(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 2);
    struct dlrm *m = NULL;
    int64_t cards[2] = {20000, 3};
    struct dlrm_cfg c = small_cfg(13);
    c.ntables = 2;
    c.cards = cards;
    c.emb_dim = 64;
    c.nbottom = 2;
    c.bottom[0] = 512;
    c.bottom[1] = 64;
    c.ntop = 2;
    c.top[0] = 256;
    c.top[1] = 1;
    TH_REQUIRE(dlrm_new(&c, &be, &m) == TR_OK);
    /* embeddings: U[-b, b), b = sqrt(1/rows): mean 0, variance b^2/3 */
    for (int t = 0; t < 2; t++) {
        const struct dlrm_table *tb = &m->tables[t];
        double b = sqrt(1.0 / (double)tb->rows), s = 0, s2 = 0;
        int64_t n = tb->rows * tb->width, out = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = tb->w[i];
            out += v < -b || v >= b;
            s += v;
            s2 += v * v;
        }
        double mean = s / n, var = s2 / n - mean * mean;
        TH_CHECKF(out == 0, "table %d: %lld values outside +-%g", t, (long long)out, b);
        if (n > 10000) {
            TH_CHECKF(fabs(mean) < 0.01 * b, "table %d mean %g", t, mean);
            TH_CHECKF(fabs(var / (b * b / 3.0) - 1.0) < 0.02, "table %d variance %g, expected %g", t, var,
                      b * b / 3.0);
        }
    }
    /* kernels: Glorot truncated normal -> std sqrt(2/(fan_in+fan_out)), |w| <= 2 sigma */
    const struct dlrm_layer *L = &m->bottom[0]; /* 16 x 512 */
    double sigma = sqrt(2.0 / (16 + 512)) / 0.87962566103423978;
    double s = 0, s2 = 0;
    int64_t n = (int64_t)L->in * L->out, out = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = L->w[i];
        out += fabs(v) > 2.0 * sigma * (1 + 1e-6);
        s += v;
        s2 += v * v;
    }
    double sd = sqrt(s2 / n - (s / n) * (s / n));
    TH_CHECKF(out == 0, "%lld kernel values beyond 2 sigma", (long long)out);
    TH_CHECKF(fabs(sd / sqrt(2.0 / (16 + 512)) - 1.0) < 0.03, "kernel std %g, expected %g", sd,
              sqrt(2.0 / (16 + 512)));
    /* biases: N(0, 1/units): the 512 biases of layer 0 have std ~ 1/sqrt(512) */
    s = s2 = 0;
    for (int i = 0; i < 512; i++) {
        s += L->b[i];
        s2 += (double)L->b[i] * L->b[i];
    }
    sd = sqrt(s2 / 512 - (s / 512) * (s / 512));
    TH_CHECKF(fabs(sd * sqrt(512.0) - 1.0) < 0.15, "bias std %g, expected %g", sd, 1.0 / sqrt(512.0));
    /* the last top bias has units = 1: std 1, so it is not zero */
    TH_CHECK(m->top[1].b[0] != 0.0f);
    /* the same seed gives the same parameters; another seed does not */
    float w0 = L->w[5], e0 = m->tables[0].w[77];
    dlrm_init_params(m);
    TH_CHECK(L->w[5] == w0 && m->tables[0].w[77] == e0);
    m->cfg.seed = 8;
    dlrm_init_params(m);
    TH_CHECK(L->w[5] != w0 && m->tables[0].w[77] != e0);
    dlrm_free(&m);
}

/* Loss of the model on b in double precision via the float forward. */
static double loss_of(struct dlrm *m, const struct tr_batch *b)
{
    double loss = NAN;
    if (dlrm_forward(m, b) != TR_OK || dlrm_loss(m, b, &loss) != TR_OK)
        return NAN;
    return loss;
}

/* Central difference of the loss along one float, at steps h and h/2. When the
 * two disagree a ReLU kink lies within h (the loss is not smooth there) and the
 * point is skipped; *ok says whether it was usable. */
static double central(struct dlrm *m, const struct tr_batch *b, float *w, float h, int *ok)
{
    float keep = *w;
    double d[2];
    for (int k = 0; k < 2; k++) {
        float hk = k ? h / 2 : h;
        *w = keep + hk;
        double lp = loss_of(m, b);
        *w = keep - hk;
        double lm = loss_of(m, b);
        d[k] = (lp - lm) / (2.0 * (double)hk);
    }
    *w = keep;
    *ok = fabs(d[0] - d[1]) <= 0.01 * fmax(fabs(d[1]), 1e-3);
    return d[1];
}

/* Central differences in float with a step sized for float32 round-off; the
 * tolerance (2% relative to the gradient scale) reflects that, while a wrong
 * gradient (sign, index, missing term) is off by 100% or more. Points next to a
 * ReLU kink are skipped (at most 5% of them). */
static void fd_check(int num_features)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 1);
    struct dlrm *m = NULL;
    struct dlrm_cfg c = small_cfg(num_features);
    c.max_batch = 16;
    TH_REQUIRE(dlrm_new(&c, &be, &m) == TR_OK);
    struct tr_batch b;
    TH_REQUIRE(tr_batch_init(&b, 16, num_features, 4) == TR_OK);
    struct synth_cfg sc = {3, num_features, 4, cards4, SYNTH_IDS_POWERLAW};
    TH_REQUIRE(synth_fill(&sc, SYNTH_TRAIN, 0, 16, &b) == TR_OK);
    double loss = 0;
    TH_REQUIRE(dlrm_forward(m, &b) == TR_OK);
    TH_REQUIRE(dlrm_loss(m, &b, &loss) == TR_OK);
    TH_REQUIRE(dlrm_backward(m, &b) == TR_OK);
    float *grads = malloc((size_t)m->nparams * sizeof(float));
    const int64_t nx = 16 * (int64_t)m->n * c.emb_dim;
    float *dx = malloc((size_t)nx * sizeof(float));
    TH_REQUIRE(grads && dx);
    memcpy(grads, m->grads, (size_t)m->nparams * sizeof(float));
    memcpy(dx, m->dx, (size_t)nx * sizeof(float));
    double gmax = 0;
    for (int64_t i = 0; i < m->nparams; i++)
        gmax = fmax(gmax, fabs(grads[i]));
    int bad = 0, checked = 0, kinks = 0, ok;
    const float h = 4e-3f;
    for (int64_t i = 0; i < m->nparams; i += 3) {
        double fd = central(m, &b, &m->params[i], h, &ok);
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
    for (int t = 0; t < 4; t++) {
        struct dlrm_table *tb = &m->tables[t];
        int32_t r = b.cat[t * b.cap + 0];
        for (int k = 0; k < c.emb_dim; k += 3) {
            double g = 0, gm = 1e-9;
            for (int s = 0; s < 16; s++) {
                double v = dx[((int64_t)s * m->n + tb->pos) * c.emb_dim + k];
                gm = fmax(gm, fabs(v));
                if (b.cat[t * b.cap + s] == r)
                    g += v;
            }
            double fd = central(m, &b, &tb->w[(int64_t)r * tb->width + k], h, &ok);
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
    tr_batch_release(&b);
    dlrm_free(&m);
}

static void fd_with_bottom(void)
{
    fd_check(13);
}

static void fd_without_bottom(void)
{
    fd_check(0);
}

static void bad_batches(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 1);
    struct dlrm *m = NULL;
    struct dlrm_cfg c = small_cfg(13);
    TH_REQUIRE(dlrm_new(&c, &be, &m) == TR_OK);
    struct tr_batch b;
    TH_REQUIRE(tr_batch_init(&b, 64, 13, 4) == TR_OK);
    b.n = 33; /* more than max_batch 32 */
    TH_CHECK(dlrm_forward(m, &b) == TR_ERR_ARG);
    b.n = 8;
    b.cat[1 * b.cap + 5] = 7; /* table 1 has 7 rows */
    TH_CHECK(dlrm_forward(m, &b) == TR_ERR_RANGE);
    b.cat[1 * b.cap + 5] = -1;
    TH_CHECK(dlrm_forward(m, &b) == TR_ERR_RANGE);
    b.cat[1 * b.cap + 5] = 6;
    TH_CHECK(dlrm_forward(m, &b) == TR_OK);
    tr_batch_release(&b);
    TH_REQUIRE(tr_batch_init(&b, 8, 12, 4) == TR_OK); /* wrong numerical width */
    TH_CHECK(dlrm_forward(m, &b) == TR_ERR_ARG);
    tr_batch_release(&b);
    dlrm_free(&m);
}

static void memory_accounting(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 1);
    for (int opt = 0; opt < 2; opt++) {
        struct tr_alloc_stats s0, s1;
        tr_alloc_get_stats(&s0);
        struct dlrm *m = NULL;
        struct dlrm_cfg c = small_cfg(13);
        c.optim = opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD;
        TH_REQUIRE(dlrm_new(&c, &be, &m) == TR_OK);
        tr_alloc_get_stats(&s1);
        struct dlrm_bytes mb;
        dlrm_get_bytes(m, &mb);
        int64_t model = mb.dense + mb.embeddings + mb.activations;
        int64_t live = s1.live_bytes - s0.live_bytes;
        /* the big blocks are the model; the rest is bookkeeping (struct, table list) */
        TH_CHECKF(live >= model && live - model < 8192, "allocated %lld, model reports %lld", (long long)live,
                  (long long)model);
        dlrm_free(&m);
        tr_alloc_get_stats(&s1);
        TH_CHECK(s1.live_bytes == s0.live_bytes);
    }
}

static void alloc_failures(void)
{
    struct kern_backend be;
    kern_backend_cpu(&be, 1);
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
            TH_CHECK(rc == TR_OK);
        }
        dlrm_free(&m);
        tr_alloc_get_stats(&s1);
        TH_CHECKF(s1.live_bytes == s0.live_bytes, "leak after failing allocation %d: %lld bytes", k,
                  (long long)(s1.live_bytes - s0.live_bytes));
    }
    TH_CHECK(failures >= 5);
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
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
