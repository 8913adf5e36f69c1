/* test_golden_multihot.c: the multi-hot path of the C DLRM (batch blocks with bags,
 * the training step's pooled gathers and sparse updates, over the self
 * communicator: what terarec-worker runs) against tests/golden/dlrm_multihot.gold,
 * written by gen_golden_multihot.py with nn.EmbeddingBag (offsets; sum and mean;
 * fixed and variable hotness, empty bags) and the DCNv2 cross layers: the forward,
 * every gradient (the tables' through the real sparse update), and all weights and
 * optimizer state after 3 steps of SGD, Adagrad and row-wise Adagrad, each tensor
 * to a relative error <= 1e-5 (gold.h). Needs no PyTorch; the fixture's initial
 * weights are loaded. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../loader_svc/batch.h"
#include "../../worker/lr_sched.h"
#include "../../worker/solo.h"

#include "gold.h"

#define MH_FILE "tests/golden/dlrm_multihot.gold"
#define NSTEPS 3
#define MAX_TABLES 16
#define MAX_VIEWS (7 * DLRM_MAX_LAYERS)

static const char *gold_backend = "cpu";

struct fx {
    struct gold g;
    struct kern_backend be;
    struct solo s;
    int open;
    struct batch *b[NSTEPS];
    int64_t rows[MAX_TABLES];
    int32_t hot[MAX_TABLES];
    uint8_t mean[MAX_TABLES];
    int T, B;
};

struct view {
    char name[64];
    int64_t off, n;
};

/* The dense tensors in parameter order: bottom, cross (v, u, bias), top. */
static int views(const struct dlrm *m, struct view *v)
{
    struct dlrm_info mi;
    dlrm_get_info(m, &mi);
    int nv = 0;
    for (int part = 0; part < 3; part++) {
        const int nl = part == 0 ? mi.nbottom : part == 1 ? mi.ncross : mi.ntop;
        for (int l = 0; l < nl; l++) {
            if (part == 1) {
                struct dlrm_cross_info c;
                dlrm_get_cross(m, l, &c);
                const int64_t wr = (int64_t)c.width * c.rank;
                snprintf(v[nv].name, sizeof v[nv].name, "%s_v_kernel", c.name);
                v[nv].off = c.v_off, v[nv++].n = wr;
                snprintf(v[nv].name, sizeof v[nv].name, "%s_u_kernel", c.name);
                v[nv].off = c.u_off, v[nv++].n = wr;
                snprintf(v[nv].name, sizeof v[nv].name, "%s_bias", c.name);
                v[nv].off = c.b_off, v[nv++].n = c.width;
                continue;
            }
            struct dlrm_layer_info L;
            dlrm_get_layer(m, part == 2, l, &L);
            snprintf(v[nv].name, sizeof v[nv].name, "%s_kernel", L.name);
            v[nv].off = L.w_off, v[nv++].n = (int64_t)L.in * L.out;
            snprintf(v[nv].name, sizeof v[nv].name, "%s_bias", L.name);
            v[nv].off = L.b_off, v[nv++].n = L.out;
        }
    }
    return nv;
}

static float *model_read(const struct dlrm *m, enum dlrm_tensor k, int t)
{
    const int64_t n = dlrm_tensor_numel(m, k, t);
    float *p = tr_malloc((size_t)(n ? n : 1) * sizeof(float));
    enum tr_status rc = p ? dlrm_tensor_read(m, k, t, 0, n, p) : TR_ERR_NOMEM;
    TH_CHECKF(rc == TR_OK, "reading tensor %d[%d]: %s", (int)k, t, tr_strerror(rc));
    if (rc != TR_OK) {
        tr_free(p);
        return NULL;
    }
    return p;
}

static struct cmp check_tensor(struct fx *f, const char *name, enum dlrm_tensor k, int t, int64_t n, int expect_ok)
{
    struct cmp r = {0};
    float *c = model_read(f->s.m, k, t);
    if (c)
        r = check_vs(&f->g, name, c, n, expect_ok);
    tr_free(c);
    return r;
}

static int ints(const struct gold *g, const char *name, int32_t *dst, int cap)
{
    const struct gold_rec *r = gold_find(g, name);
    TH_CHECKF(r && r->dtype == GOLD_I32 && r->count >= 1 && r->count <= cap, "record '%s' is missing or not an i32 "
              "vector of 1..%d entries", name, cap);
    if (!r || r->dtype != GOLD_I32 || r->count < 1 || r->count > cap)
        return -1;
    memcpy(dst, r->data, (size_t)r->count * 4);
    return (int)r->count;
}

static int load_tensor(struct fx *f, const char *name, enum dlrm_tensor k, int t, int64_t off, int64_t n)
{
    int64_t cols;
    float *v = gold_dup(&f->g, name, n, &cols);
    if (!v)
        return 0;
    enum tr_status rc = dlrm_tensor_write(f->s.m, k, t, off, n, v);
    TH_CHECKF(rc == TR_OK, "writing '%s' into the model: %s", name, tr_strerror(rc));
    tr_free(v);
    return rc == TR_OK;
}

static void fx_release(struct fx *f)
{
    for (int k = 0; k < NSTEPS; k++)
        batch_free(&f->b[k]);
    if (f->open)
        solo_close(&f->s);
    kern_backend_close(&f->be);
    gold_release(&f->g);
}

/* Batch k of the fixture as a block with the tables' bags. */
static int load_batch(struct fx *f, int k)
{
    const struct gold *g = &f->g;
    const int B = f->B, T = f->T;
    char name[96];
    TH_EQ_ST(batch_new(B, 13, T, f->hot, &f->b[k]), TR_OK);
    struct batch *b = f->b[k];
    if (!b)
        return 0;
    b->n = B;
    b->index = k;
    float num[64 * 13];
    TH_CHECK(B <= 64);
    if (B > 64)
        return 0;
    snprintf(name, sizeof name, "mh/batch%d/numerical", k);
    if (!gold_get(g, name, GOLD_F32, (int64_t)B * 13, num))
        return 0;
    for (int i = 0; i < B; i++)
        memcpy(batch_num(b) + (int64_t)i * b->num_ld, num + i * 13, 13 * sizeof(float));
    snprintf(name, sizeof name, "mh/batch%d/labels", k);
    if (!gold_get(g, name, GOLD_F32, B, batch_labels(b)))
        return 0;
    for (int t = 0; t < T; t++) {
        snprintf(name, sizeof name, "mh/batch%d/ids_%d", k, t);
        const struct gold_rec *ids = gold_find(g, name);
        TH_CHECKF(ids && ids->dtype == GOLD_I32 && ids->count <= (int64_t)B * (f->hot[t] ? f->hot[t] : 1),
                  "record '%s'", name);
        if (!ids || ids->dtype != GOLD_I32 || ids->count > (int64_t)B * (f->hot[t] ? f->hot[t] : 1))
            return 0;
        memcpy(batch_ids(b, t), ids->data, (size_t)ids->count * 4);
        if (!f->hot[t])
            continue;
        int32_t off[65];
        snprintf(name, sizeof name, "mh/batch%d/offsets_%d", k, t);
        if (!gold_get(g, name, GOLD_I32, B + 1, off))
            return 0;
        for (int i = 0; i <= B; i++)
            batch_offsets(b, t)[i] = off[i];
        batch_bags(b)[t].nids = off[B];
        TH_CHECK(off[B] == ids->count);
    }
    return 1;
}

/* Loads the fixture, builds the model and its step with optimizer opt (pooling as
 * the fixture says, or every table summed with sum_all), loads the initial
 * weights and the batches; 1 on success. */
static int setup(struct fx *f, enum kern_optim opt, int sum_all)
{
    memset(f, 0, sizeof *f);
    char err[2048] = "";
    enum tr_status rc = gold_load(&f->g, MH_FILE, err, sizeof err);
    TH_CHECKF(rc == TR_OK, "%s (%s)", err, tr_strerror(rc));
    if (rc != TR_OK)
        return 0;
    const struct gold *g = &f->g;
    struct dlrm_cfg cfg = {0};
    int32_t rows[MAX_TABLES], mean[MAX_TABLES], bottom[DLRM_MAX_LAYERS], top[DLRM_MAX_LAYERS];
    f->T = ints(g, "mh/cfg/cards", rows, MAX_TABLES);
    const int nh = ints(g, "mh/cfg/hot", f->hot, MAX_TABLES), nm = ints(g, "mh/cfg/mean", mean, MAX_TABLES);
    cfg.nbottom = ints(g, "mh/cfg/bottom", bottom, DLRM_MAX_LAYERS);
    cfg.ntop = ints(g, "mh/cfg/top", top, DLRM_MAX_LAYERS);
    cfg.emb_dim = gold_int(g, "mh/cfg/emb_dim");
    cfg.num_features = gold_int(g, "mh/cfg/num_features");
    cfg.ncross = gold_int(g, "mh/cfg/cross_layers");
    cfg.cross_rank = gold_int(g, "mh/cfg/cross_rank");
    f->B = gold_int(g, "mh/cfg/batch");
    if (f->T < 1 || nh != f->T || nm != f->T || cfg.nbottom < 1 || cfg.ntop < 1 || cfg.num_features != 13 ||
        f->B < 1 || cfg.ncross < 1)
        return 0;
    for (int t = 0; t < f->T; t++) {
        f->rows[t] = rows[t];
        f->mean[t] = (uint8_t)(mean[t] && !sum_all);
    }
    for (int l = 0; l < cfg.nbottom; l++)
        cfg.bottom[l] = bottom[l];
    for (int l = 0; l < cfg.ntop; l++)
        cfg.top[l] = top[l];
    cfg.ntables = f->T;
    cfg.rows = f->rows;
    cfg.hot = f->hot;
    cfg.mean = f->mean;
    cfg.interaction = DLRM_INTERACT_DCNV2;
    cfg.optim = opt;
    cfg.adagrad_init = (float)gold_double(g, "mh/cfg/adagrad_init");
    cfg.adagrad_eps = (float)gold_double(g, "mh/cfg/adagrad_eps");
    cfg.seed = 7;
    cfg.max_batch = f->B;
    rc = kern_backend_open(gold_backend, NULL, &f->be);
    if (rc == TR_OK) {
        f->open = 1;
        rc = solo_open(&f->s, &cfg, &f->be, 0);
    }
    TH_CHECKF(rc == TR_OK, "the multi-hot DCNv2 model from the fixture's config: %s", tr_strerror(rc));
    if (rc != TR_OK)
        return 0;
    struct view v[MAX_VIEWS];
    const int nv = views(f->s.m, v);
    struct dlrm_info mi;
    dlrm_get_info(f->s.m, &mi);
    int64_t total = 0;
    char name[128];
    for (int i = 0; i < nv; i++) {
        total += v[i].n;
        snprintf(name, sizeof name, "mh/init/%.63s", v[i].name);
        if (!load_tensor(f, name, DLRM_PARAMS, 0, v[i].off, v[i].n))
            return 0;
    }
    TH_CHECKF(total == mi.nparams, "the views cover %lld of %lld parameters", (long long)total,
              (long long)mi.nparams);
    for (int t = 0; t < f->T; t++) {
        struct dlrm_table_info ti;
        dlrm_get_table(f->s.m, t, &ti);
        TH_CHECK(ti.hot == f->hot[t] && ti.mean == f->mean[t]);
        snprintf(name, sizeof name, "mh/init/table_%d", t);
        if (!load_tensor(f, name, DLRM_TABLE, t, 0, ti.rows * ti.width))
            return 0;
    }
    for (int k = 0; k < NSTEPS; k++)
        if (!load_batch(f, k))
            return 0;
    return 1;
}

/* Every dense tensor of kind k and every table (or its state) against records
 * "<prefix>[accum_]<name>". */
static void check_model(struct fx *f, const char *prefix, enum dlrm_tensor k, int tables)
{
    const int accum = k == DLRM_PARAMS_STATE;
    struct view v[MAX_VIEWS];
    const int nv = views(f->s.m, v);
    char name[200];
    float *flat = model_read(f->s.m, k, 0);
    for (int i = 0; flat && i < nv; i++) {
        snprintf(name, sizeof name, "%s%s%.63s", prefix, accum ? "accum_" : "", v[i].name);
        check_vs(&f->g, name, flat + v[i].off, v[i].n, 1);
    }
    tr_free(flat);
    for (int t = 0; tables && t < f->T; t++) {
        snprintf(name, sizeof name, "%s%stable_%d", prefix, accum ? "accum_" : "", t);
        const enum dlrm_tensor kt = accum ? DLRM_TABLE_STATE : DLRM_TABLE;
        check_tensor(f, name, kt, t, dlrm_tensor_numel(f->s.m, kt, t), 1);
    }
}

static enum tr_status forward_backward(struct fx *f, int k, double *loss)
{
    TR_CHECK(solo_load(&f->s, f->b[k]));
    TR_CHECK(hybrid_forward(f->s.h));
    return hybrid_backward(f->s.h, loss);
}

static void test_forward(void)
{
    struct fx f;
    worst_reset();
    if (setup(&f, KERN_OPT_SGD, 0)) {
        double loss = 0.0;
        enum tr_status rc = forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward and loss: %s", tr_strerror(rc));
        struct dlrm_info mi;
        dlrm_get_info(f.s.m, &mi);
        const int64_t nx = (int64_t)f.B * mi.n * mi.emb_dim;
        check_tensor(&f, "mh/fwd/interaction_input", DLRM_X, 0, nx, 1);
        check_tensor(&f, "mh/fwd/interaction_output", DLRM_TOP_IN, 0, (int64_t)f.B * mi.top_in_w, 1);
        check_tensor(&f, "mh/fwd/logits", DLRM_LOGITS, 0, f.B, 1);
        check_scalar("mh/fwd/loss", loss, gold_double(&f.g, "mh/fwd/loss"), REL_TOL);
        worst_print("multi-hot forward");
    }
    fx_release(&f);
}

/* Dense gradients, dLoss/dX (row 0 masked by the last bottom ReLU: the backward
 * turns it in place into the gradient before that ReLU), and the tables'
 * gradients through the sparse update: on zeroed tables an SGD step with lr -1
 * leaves each touched row's summed, bag-scaled gradient. */
static void test_gradients(void)
{
    struct fx f;
    worst_reset();
    if (setup(&f, KERN_OPT_SGD, 0)) {
        struct dlrm *m = f.s.m;
        double loss = 0.0;
        enum tr_status rc = forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward/loss/backward: %s", tr_strerror(rc));
        check_model(&f, "mh/grad/", DLRM_GRADS, 0);
        struct dlrm_info mi;
        dlrm_get_info(m, &mi);
        const int64_t D = mi.emb_dim, nd = (int64_t)mi.n * D, nx = (int64_t)f.B * nd;
        int64_t cols = 1;
        float *ref = gold_dup(&f.g, "mh/grad/interaction_input", nx, &cols);
        float *x = model_read(m, DLRM_X, 0), *mdx = model_read(m, DLRM_DX, 0);
        if (ref && x && mdx) {
            for (int64_t i = 0; i < f.B; i++)
                for (int64_t k = 0; k < D; k++)
                    if (!(x[i * nd + k] > 0.0f))
                        ref[i * nd + k] = 0.0f;
            check_arr("mh/grad/interaction_input (dX, row 0 masked)", mdx, ref, nx, cols, 1);
        }
        tr_free(ref);
        tr_free(x);
        tr_free(mdx);
        for (int t = 0; t < f.T; t++) {
            const int64_t n = dlrm_tensor_numel(m, DLRM_TABLE, t);
            float *zero = tr_calloc((size_t)n, sizeof(float));
            TH_REQUIRE(zero);
            TH_EQ_ST(dlrm_tensor_write(m, DLRM_TABLE, t, 0, n, zero), TR_OK);
            tr_free(zero);
        }
        rc = hybrid_update(f.s.h, -1.0f);
        TH_CHECKF(rc == TR_OK, "hybrid_update: %s", tr_strerror(rc));
        char name[64];
        for (int t = 0; t < f.T; t++) {
            snprintf(name, sizeof name, "mh/grad/table_%d", t);
            check_tensor(&f, name, DLRM_TABLE, t, dlrm_tensor_numel(m, DLRM_TABLE, t), 1);
        }
        worst_print("multi-hot gradients");
    }
    fx_release(&f);
}

static void run_steps(enum kern_optim opt)
{
    const char *kind = opt == KERN_OPT_SGD ? "sgd" : opt == KERN_OPT_ADAGRAD ? "adagrad" : "rowwise_adagrad";
    struct fx f;
    worst_reset();
    if (setup(&f, opt, 0)) {
        struct lr_sched s;
        double ref_loss[NSTEPS], ref_lr[NSTEPS];
        char name[96];
        snprintf(name, sizeof name, "mh/cfg/lr_base_%s", opt == KERN_OPT_SGD ? "sgd" : "adagrad");
        s.base = gold_double(&f.g, name);
        s.warmup_steps = gold_int(&f.g, "mh/cfg/warmup");
        s.decay_start = gold_int(&f.g, "mh/cfg/decay_start");
        s.decay_steps = gold_int(&f.g, "mh/cfg/decay_steps");
        snprintf(name, sizeof name, "mh/%s/loss", kind);
        int ok = isfinite(s.base) && s.decay_steps >= 1 && gold_get(&f.g, name, GOLD_F64, NSTEPS, ref_loss);
        snprintf(name, sizeof name, "mh/%s/lr", kind);
        ok = ok && gold_get(&f.g, name, GOLD_F64, NSTEPS, ref_lr);
        for (int i = 0; ok && i < NSTEPS; i++) {
            double loss = 0.0;
            snprintf(name, sizeof name, "%s lr of step %d", kind, i);
            check_scalar(name, lr_sched_at(&s, i), ref_lr[i], 1e-7);
            enum tr_status rc = solo_load(&f.s, f.b[i]);
            if (rc == TR_OK)
                rc = hybrid_train_step(f.s.h, (float)lr_sched_at(&s, i), &loss);
            TH_CHECKF(rc == TR_OK, "training step %d: %s", i, tr_strerror(rc));
            snprintf(name, sizeof name, "%s loss of step %d", kind, i);
            check_scalar(name, loss, ref_loss[i], REL_TOL);
        }
        if (ok) {
            snprintf(name, sizeof name, "mh/%s/after3/", kind);
            check_model(&f, name, DLRM_PARAMS, 1);
            if (opt != KERN_OPT_SGD)
                check_model(&f, name, DLRM_PARAMS_STATE, 1);
        }
        snprintf(name, sizeof name, "multi-hot %s after 3 steps", kind);
        worst_print(name);
    }
    fx_release(&f);
}

static void test_sgd_3_steps(void)
{
    run_steps(KERN_OPT_SGD);
}

static void test_adagrad_3_steps(void)
{
    run_steps(KERN_OPT_ADAGRAD);
}

static void test_rowwise_adagrad_3_steps(void)
{
    run_steps(KERN_OPT_ROWWISE_ADAGRAD);
}

/* The comparison must be able to fail: the same model with table 1's bags summed
 * instead of averaged gives other pooled vectors (row 3 of X holds table 1, the
 * tables being in cardinality order 2, 0, 1, 3), logits and table gradients; and a
 * one-hot model refuses the multi-hot batches. */
static void test_negative_control(void)
{
    struct fx f;
    if (setup(&f, KERN_OPT_SGD, 1)) {
        double loss = 0.0;
        enum tr_status rc = forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward/loss/backward: %s", tr_strerror(rc));
        struct dlrm_info mi;
        dlrm_get_info(f.s.m, &mi);
        struct cmp c = check_tensor(&f, "mh/fwd/interaction_input", DLRM_X, 0, (int64_t)f.B * mi.n * mi.emb_dim, 0);
        TH_CHECKF(!c.ok, "summing table 1's bags instead of averaging them was not detected in X (rel %.3e)", c.rel);
        c = check_tensor(&f, "mh/fwd/logits", DLRM_LOGITS, 0, f.B, 0);
        TH_CHECKF(!c.ok, "summing table 1's bags was not detected in the logits (rel %.3e)", c.rel);
    }
    fx_release(&f);
    /* the model of one-hot tables and a block of bags */
    if (setup(&f, KERN_OPT_SGD, 0)) {
        struct dlrm_cfg cfg = {0};
        cfg.num_features = 13;
        cfg.ntables = f.T;
        cfg.rows = f.rows;
        cfg.emb_dim = 8;
        cfg.nbottom = 2;
        cfg.bottom[0] = 16;
        cfg.bottom[1] = 8;
        cfg.ntop = 1;
        cfg.top[0] = 1;
        cfg.max_batch = f.B;
        struct solo one;
        TH_EQ_ST_REQ(solo_open(&one, &cfg, &f.be, 0), TR_OK);
        TH_EQ_ST(solo_load(&one, f.b[0]), TR_ERR_FORMAT);
        solo_close(&one);
    }
    fx_release(&f);
}

static const struct th_case cases[] = {
    {"forward", test_forward},
    {"gradients", test_gradients},
    {"sgd_3_steps", test_sgd_3_steps},
    {"adagrad_3_steps", test_adagrad_3_steps},
    {"rowwise_adagrad_3_steps", test_rowwise_adagrad_3_steps},
    {"negative_control", test_negative_control},
};

static void enter_backend(void *arg)
{
    gold_backend = arg;
}

/* Every case on every backend of the build; the CUDA group is one SKIP without a
 * device (a failure under make test-gpu). */
int main(int argc, char **argv)
{
    struct th_group groups[4];
    size_t ng = 0;
    for (int k = 0; ng < TR_ARRAY_SIZE(groups) && kern_backend_name(k); k++) {
        const char *name = kern_backend_name(k);
        groups[ng] = (struct th_group){.tag = name, .enter = enter_backend, .arg = (void *)name};
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
        if (!strcmp(name, "cuda") && kern_cuda_device_count() == 0) {
            groups[ng].skip = "cuda backend: no CUDA device";
            groups[ng].needs_gpu = 1;
        }
#endif
        ng++;
    }
    return th_main_groups(cases, TR_ARRAY_SIZE(cases), groups, ng, argc, argv);
}
