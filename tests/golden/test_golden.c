/* test_golden.c: checks the C DLRM (worker/dlrm.c driven by the training step,
 * worker/hybrid.c, over the self communicator on the CPU backend: the path
 * terarec-worker runs) against the PyTorch reference tests/golden/dlrm_small.gold
 * written by gen_golden.py: forward logits and loss, every gradient, and all
 * weights (and Adagrad state) after 3 SGD and 3 Adagrad steps, each tensor to a
 * relative error <= 1e-5. It needs no PyTorch and does not test the C
 * initialiser: the fixture's initial weights are loaded. Model tensors are read
 * and written through the backend (dlrm_tensor_read/_write). */
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

#define GOLD_FILE "tests/golden/dlrm_small.gold"
/* The backend the cases run on (main runs them once per backend of the build). */
static const char *gold_backend = "cpu";
#define NSTEPS 3
#define MAX_TABLES 64

/* ---- the model under test ------------------------------------------------------ */

struct fx {
    struct gold g;
    struct kern_backend be;
    struct solo s;
    int open;
    struct batch *b[NSTEPS];
    int64_t rows[MAX_TABLES];
    int B;
};

/* One dense tensor of the model: name and offset/size in the flat buffers. */
struct dense_view {
    char name[64];
    int64_t off, n;
};

static int dense_views(const struct dlrm *m, struct dense_view *v)
{
    struct dlrm_info mi;
    dlrm_get_info(m, &mi);
    int nv = 0;
    for (int part = 0; part < 2; part++) {
        int nl = part ? mi.ntop : mi.nbottom;
        for (int l = 0; l < nl; l++) {
            struct dlrm_layer_info L;
            dlrm_get_layer(m, part, l, &L);
            snprintf(v[nv].name, sizeof v[nv].name, "%s_kernel", L.name);
            v[nv].off = L.w_off;
            v[nv++].n = (int64_t)L.in * L.out;
            snprintf(v[nv].name, sizeof v[nv].name, "%s_bias", L.name);
            v[nv].off = L.b_off;
            v[nv++].n = L.out;
        }
    }
    return nv;
}

/* A host copy (tr_malloc) of tensor k (index t) of the model, or NULL (failure recorded). */
static float *model_read(const struct dlrm *m, enum dlrm_tensor k, int t)
{
    int64_t n = dlrm_tensor_numel(m, k, t);
    float *p = tr_malloc((size_t)(n ? n : 1) * sizeof(float));
    enum tr_status rc = p ? dlrm_tensor_read(m, k, t, 0, n, p) : TR_ERR_NOMEM;
    TH_CHECKF(rc == TR_OK, "reading tensor %d[%d]: %s", (int)k, t, tr_strerror(rc));
    if (rc != TR_OK) {
        tr_free(p);
        return NULL;
    }
    return p;
}

/* Compares tensor k (index t) of the model, its first n elements, with a record. */
static struct cmp check_tensor(struct fx *f, const char *name, enum dlrm_tensor k, int t, int64_t n, int expect_ok)
{
    struct cmp r = {0};
    float *c = model_read(f->s.m, k, t);
    if (c)
        r = check_vs(&f->g, name, c, n, expect_ok);
    tr_free(c);
    return r;
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

static int load_fixture(struct gold *g)
{
    char err[2048] = "";
    enum tr_status rc = gold_load(g, GOLD_FILE, err, sizeof err);
    TH_CHECKF(rc == TR_OK, "%s (%s)", err, tr_strerror(rc));
    return rc == TR_OK;
}

/* Reads an i32 vector record of at most cap entries; returns its length or -1. */
static int gold_ints(const struct gold *g, const char *name, int32_t *dst, int cap)
{
    const struct gold_rec *r = gold_find(g, name);
    TH_CHECKF(r && r->dtype == GOLD_I32 && r->count >= 1 && r->count <= cap, "fixture record '%s' is missing or "
              "not an i32 vector of 1..%d entries", name, cap);
    if (!r || r->dtype != GOLD_I32 || r->count < 1 || r->count > cap)
        return -1;
    memcpy(dst, r->data, (size_t)r->count * 4);
    return (int)r->count;
}

/* Copies f32 record `name` (n elements) into tensor k (index t) at element off. */
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

#define DCN_MAX_VIEWS (7 * DLRM_MAX_LAYERS)
static int dcn_views(const struct dlrm *m, struct dense_view *v);

/* Loads the fixture, builds the model and its step from its config with
 * optimizer `opt` (dcn: the DCNv2 model of the dcn/ records), loads the initial
 * weights and the batches. Returns 1 on success (failures are recorded). */
static int model_setup(struct fx *f, enum kern_optim opt, int dcn)
{
    memset(f, 0, sizeof *f);
    if (!load_fixture(&f->g))
        return 0;
    const struct gold *g = &f->g;
    const char *const pre = dcn ? "dcn/" : "";
    char name[160];
#define KEY(k) (snprintf(name, sizeof name, "%s%s", pre, k), name)
    struct dlrm_cfg cfg = {0};
    int32_t rows[MAX_TABLES], bottom[DLRM_MAX_LAYERS], top[DLRM_MAX_LAYERS];
    int T = gold_ints(g, KEY("cfg/cards"), rows, MAX_TABLES);
    cfg.nbottom = gold_ints(g, KEY("cfg/bottom"), bottom, DLRM_MAX_LAYERS);
    cfg.ntop = gold_ints(g, KEY("cfg/top"), top, DLRM_MAX_LAYERS);
    cfg.emb_dim = gold_int(g, KEY("cfg/emb_dim"));
    cfg.num_features = gold_int(g, KEY("cfg/num_features"));
    f->B = gold_int(g, KEY("cfg/batch"));
    if (dcn) {
        cfg.interaction = DLRM_INTERACT_DCNV2;
        cfg.ncross = gold_int(g, "dcn/cfg/cross_layers");
        cfg.cross_rank = gold_int(g, "dcn/cfg/cross_rank");
        if (cfg.ncross < 1 || cfg.cross_rank < 1)
            return 0;
    }
#undef KEY
    if (T < 1 || cfg.nbottom < 1 || cfg.ntop < 1 || cfg.emb_dim < 1 || cfg.num_features < 1 || f->B < 1)
        return 0;
    for (int t = 0; t < T; t++)
        f->rows[t] = rows[t];
    for (int l = 0; l < cfg.nbottom; l++)
        cfg.bottom[l] = bottom[l];
    for (int l = 0; l < cfg.ntop; l++)
        cfg.top[l] = top[l];
    cfg.ntables = T;
    cfg.rows = f->rows;
    cfg.optim = opt;
    cfg.adagrad_init = (float)gold_double(g, "cfg/adagrad_init");
    cfg.adagrad_eps = (float)gold_double(g, "cfg/adagrad_eps");
    cfg.seed = 12345;
    cfg.max_batch = f->B;
    enum tr_status rc = kern_backend_open(gold_backend, NULL, &f->be);
    if (rc == TR_OK) {
        f->open = 1;
        rc = solo_open(&f->s, &cfg, &f->be, 0);
    }
    TH_CHECKF(rc == TR_OK, "the %s model and its step from the fixture's config: %s", dcn ? "DCNv2" : "dot",
              tr_strerror(rc));
    if (rc != TR_OK)
        return 0;
    struct dlrm *m = f->s.m;
    struct dlrm_info mi;
    dlrm_get_info(m, &mi);
    TH_CHECKF(mi.n == T + 1 && mi.num_ld == (cfg.num_features + 7) / 8 * 8, "model shape: n %d, num_ld %d", mi.n,
              mi.num_ld);
    if (dcn)
        TH_CHECKF(mi.interaction == DLRM_INTERACT_DCNV2 && mi.ncross == cfg.ncross &&
                      mi.top_in_w == (int64_t)mi.n * cfg.emb_dim,
                  "dcnv2 model shape: interaction %d, %d cross layers, top input %lld", (int)mi.interaction,
                  mi.ncross, (long long)mi.top_in_w);

    /* initial values replace the C initialiser's (Adagrad accumulators start at
     * adagrad_init, as dlrm_new left them); the views must cover every parameter */
    struct dense_view v[DCN_MAX_VIEWS];
    int nv = dcn ? dcn_views(m, v) : dense_views(m, v);
    int64_t total = 0;
    for (int i = 0; i < nv; i++) {
        total += v[i].n;
        snprintf(name, sizeof name, "%sinit/%.63s", pre, v[i].name);
        if (!load_tensor(f, name, DLRM_PARAMS, 0, v[i].off, v[i].n))
            return 0;
    }
    TH_CHECKF(total == mi.nparams, "the views cover %lld of %lld dense parameters", (long long)total,
              (long long)mi.nparams);
    for (int t = 0; t < T; t++) {
        struct dlrm_table_info ti;
        dlrm_get_table(m, t, &ti);
        TH_CHECK(ti.id == t && ti.col0 == 0 && ti.width == cfg.emb_dim);
        snprintf(name, sizeof name, "%sinit/table_%d", pre, t);
        if (!load_tensor(f, name, DLRM_TABLE, t, 0, ti.rows * ti.width))
            return 0;
    }

    /* batches (shared by both models): numerical (B, F) padded with zeros to
     * num_ld, cat (T, B) table-major */
    const int B = f->B, nf = cfg.num_features;
    float *num = tr_malloc((size_t)B * (size_t)nf * sizeof(float));
    TH_CHECK(num != NULL);
    if (!num)
        return 0;
    int ok = 1;
    for (int k = 0; k < NSTEPS && ok; k++) {
        rc = batch_new(B, nf, T, NULL, &f->b[k]);
        TH_CHECKF(rc == TR_OK, "batch_new: %s", tr_strerror(rc));
        if (rc != TR_OK) {
            ok = 0;
            break;
        }
        struct batch *b = f->b[k];
        b->n = B;
        b->index = k;
        snprintf(name, sizeof name, "batch%d/numerical", k);
        ok = gold_get(g, name, GOLD_F32, (int64_t)B * nf, num) != NULL;
        for (int i = 0; ok && i < B; i++)
            memcpy(batch_num(b) + (int64_t)i * b->num_ld, num + (int64_t)i * nf, (size_t)nf * sizeof(float));
        snprintf(name, sizeof name, "batch%d/labels", k);
        ok = ok && gold_get(g, name, GOLD_F32, B, batch_labels(b));
        snprintf(name, sizeof name, "batch%d/cat", k);
        ok = ok && gold_get(g, name, GOLD_I32, (int64_t)T * B, batch_cat(b));
    }
    tr_free(num);
    return ok;
}

static int fx_setup(struct fx *f, enum kern_optim opt)
{
    return model_setup(f, opt, 0);
}

/* Compares every dense tensor (of params, grads or accum: kind k) and every table
 * (or its accumulator) with records "<prefix><name>"; tables are skipped when
 * !tables. */
static void check_model(struct fx *f, const char *prefix, enum dlrm_tensor k, int tables)
{
    const int accum = k == DLRM_PARAMS_STATE;
    struct dense_view v[4 * DLRM_MAX_LAYERS];
    int nv = dense_views(f->s.m, v);
    char name[200];
    float *flat = model_read(f->s.m, k, 0);
    for (int i = 0; flat && i < nv; i++) {
        snprintf(name, sizeof name, "%s%s%.63s", prefix, accum ? "accum_" : "", v[i].name);
        check_vs(&f->g, name, flat + v[i].off, v[i].n, 1);
    }
    tr_free(flat);
    struct dlrm_info mi;
    dlrm_get_info(f->s.m, &mi);
    for (int t = 0; tables && t < mi.ntables; t++) {
        snprintf(name, sizeof name, "%s%stable_%d", prefix, accum ? "accum_" : "", t);
        const enum dlrm_tensor kt = accum ? DLRM_TABLE_STATE : DLRM_TABLE; /* row-wise state: (rows) */
        check_tensor(f, name, kt, t, dlrm_tensor_numel(f->s.m, kt, t), 1);
    }
}

/* Forward and backward of batch k through the step; *loss gets the batch's loss. */
static enum tr_status fx_forward_backward(struct fx *f, int k, double *loss)
{
    TR_CHECK(solo_load(&f->s, f->b[k]));
    TR_CHECK(hybrid_forward(f->s.h));
    return hybrid_backward(f->s.h, loss);
}

/* ---- cases ----------------------------------------------------------------------- */

static void test_fixture_format(void)
{
    struct gold g;
    if (!load_fixture(&g))
        return;
    printf("# fixture '%s': %zu bytes, %u records\n", g.path, g.len, g.nrecs);
    TH_CHECK(g.nrecs > 50);
    TH_CHECK(gold_find(&g, "fwd/logits") && gold_find(&g, "adagrad/after3/accum_table_0"));
    /* corrupted copies must be rejected with TR_ERR_FORMAT */
    static const struct {
        const char *what;
        size_t at;
        unsigned char byte;
        int truncate;
    } bad[] = {
        {"magic", 0, 0x00, 0},
        {"version", 4, 0x02, 0},
        {"record count", 10, 0xff, 0},
        {"first name length", 16, 0xff, 0},
        {"truncated by one byte", 0, 0, 1},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        struct gold c = {0};
        c.len = g.len - (size_t)bad[i].truncate;
        c.buf = tr_malloc(g.len);
        TH_REQUIRE(c.buf != NULL);
        memcpy(c.buf, g.buf, c.len);
        if (!bad[i].truncate)
            c.buf[bad[i].at] = bad[i].byte;
        snprintf(c.path, sizeof c.path, "corrupt copy (%s)", bad[i].what);
        char err[2048] = "";
        enum tr_status rc = gold_parse(&c, err, sizeof err);
        TH_CHECKF(rc == TR_ERR_FORMAT, "a corrupt %s was accepted (%s)", bad[i].what, tr_strerror(rc));
        TH_CHECKF(strstr(err, c.path) != NULL, "message for a corrupt %s does not name the file: '%s'",
                  bad[i].what, err);
        printf("# rejected: %s\n", strtok(err, "\n"));
        gold_release(&c);
    }
    gold_release(&g);
}

static void test_forward(void)
{
    struct fx f;
    worst_reset();
    if (fx_setup(&f, KERN_OPT_SGD)) {
        double loss = 0.0;
        enum tr_status rc = fx_forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward and loss: %s", tr_strerror(rc));
        struct dlrm_info mi;
        dlrm_get_info(f.s.m, &mi);
        const int64_t B = f.B, nd = (int64_t)mi.n * mi.emb_dim;
        check_tensor(&f, "fwd/interaction_input", DLRM_X, 0, B * nd, 1);
        check_tensor(&f, "fwd/interaction_output", DLRM_TOP_IN, 0, B * mi.top_in_w, 1);
        check_tensor(&f, "fwd/logits", DLRM_LOGITS, 0, B, 1);
        check_scalar("fwd/loss", loss, gold_double(&f.g, "fwd/loss"), REL_TOL);
        worst_print("forward");
    }
    fx_release(&f);
}

/* The tail of a gradients test (prefix "" or "dcn/"): the model's dX against
 * <prefix>grad/interaction_input (rows 1..T are dLoss/dX, what the embedding update
 * reads; the backward turns row 0 in place into the gradient of the last bottom
 * layer's pre-activation, i.e. dLoss/dX[:,0,:] masked by ReLU'(X[:,0,:]), X as
 * saved by the forward), then the embedding gradients through the real sparse
 * path: on zeroed tables an SGD step with lr = -1 leaves exactly the summed
 * gradient of each touched row. */
static void check_dx_and_table_grads(struct fx *f, const float *x, const char *prefix)
{
    struct dlrm *m = f->s.m;
    struct dlrm_info mi;
    dlrm_get_info(m, &mi);
    const int64_t D = mi.emb_dim, nd = (int64_t)mi.n * D, nx = (int64_t)f->B * nd;
    char name[96];
    int64_t cols = 1;
    snprintf(name, sizeof name, "%sgrad/interaction_input", prefix);
    float *ref = gold_dup(&f->g, name, nx, &cols);
    float *mdx = model_read(m, DLRM_DX, 0);
    if (ref && mdx) {
        for (int64_t i = 0; i < f->B; i++)
            for (int64_t k = 0; k < D; k++)
                if (!(x[i * nd + k] > 0.0f))
                    ref[i * nd + k] = 0.0f;
        snprintf(name, sizeof name, "%sgrad/interaction_input (dX, row 0 masked)", prefix);
        check_arr(name, mdx, ref, nx, cols, 1);
    }
    tr_free(mdx);
    tr_free(ref);
    for (int t = 0; t < mi.ntables; t++) {
        int64_t n = dlrm_tensor_numel(m, DLRM_TABLE, t);
        float *zero = tr_calloc((size_t)n, sizeof(float));
        TH_REQUIRE(zero);
        TH_EQ_ST(dlrm_tensor_write(m, DLRM_TABLE, t, 0, n, zero), TR_OK);
        tr_free(zero);
    }
    enum tr_status rc = hybrid_update(f->s.h, -1.0f);
    TH_CHECKF(rc == TR_OK, "hybrid_update: %s", tr_strerror(rc));
    for (int t = 0; t < mi.ntables; t++) {
        snprintf(name, sizeof name, "%sgrad/table_%d", prefix, t);
        check_tensor(f, name, DLRM_TABLE, t, dlrm_tensor_numel(m, DLRM_TABLE, t), 1);
    }
}

static void test_gradients(void)
{
    struct fx f;
    worst_reset();
    if (fx_setup(&f, KERN_OPT_SGD)) {
        struct dlrm *m = f.s.m;
        const struct kern_backend *be = &f.be;
        double loss = 0.0;
        enum tr_status rc = fx_forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward/loss/backward: %s", tr_strerror(rc));
        check_model(&f, "grad/", DLRM_GRADS, 0);
        /* dLoss/dX as the interaction backward produces it: the backend's
         * interact_bwd rerun on the saved forward (the backward leaves X and the
         * interaction output's gradient as they were) */
        struct dlrm_info mi;
        dlrm_get_info(m, &mi);
        const int64_t D = mi.emb_dim, nd = (int64_t)mi.n * D, nx = (int64_t)f.B * nd;
        const size_t xbytes = (size_t)nx * sizeof(float), tbytes = (size_t)(f.B * mi.top_in_w) * sizeof(float);
        float *x = model_read(m, DLRM_X, 0), *dtop = model_read(m, DLRM_DTOP_IN, 0);
        float *dx = tr_malloc(xbytes);
        void *dev_x = NULL, *dev_dtop = NULL, *dev_dx = NULL;
        TH_REQUIRE(x && dtop && dx);
        rc = be->i->mem_alloc(be->ctx, xbytes, &dev_x);
        if (rc == TR_OK)
            rc = be->i->mem_alloc(be->ctx, tbytes, &dev_dtop);
        if (rc == TR_OK)
            rc = be->i->mem_alloc(be->ctx, xbytes, &dev_dx);
        if (rc == TR_OK)
            rc = be->i->copy(be->ctx, dev_x, x, xbytes, KERN_H2D);
        if (rc == TR_OK)
            rc = be->i->copy(be->ctx, dev_dtop, dtop, tbytes, KERN_H2D);
        struct kern_interact_bwd_args ia = {f.B, mi.n, (int)D, mi.has_bottom, dev_x, dev_dtop, mi.top_in_w, dev_dx, NULL};
        if (rc == TR_OK)
            rc = be->i->interact_bwd(be->ctx, &ia);
        if (rc == TR_OK)
            rc = be->i->copy(be->ctx, dx, dev_dx, xbytes, KERN_D2H);
        TH_CHECKF(rc == TR_OK, "interact_bwd: %s", tr_strerror(rc));
        if (rc == TR_OK)
            check_vs(&f.g, "grad/interaction_input", dx, nx, 1);
        be->i->mem_release(be->ctx, dev_x, xbytes);
        be->i->mem_release(be->ctx, dev_dtop, tbytes);
        be->i->mem_release(be->ctx, dev_dx, xbytes);
        check_dx_and_table_grads(&f, x, "");
        tr_free(x);
        tr_free(dtop);
        tr_free(dx);
        worst_print("gradients");
    }
    fx_release(&f);
}

static int sched_from_fixture(const struct gold *g, const char *base_rec, struct lr_sched *s)
{
    s->base = gold_double(g, base_rec);
    s->warmup_steps = gold_int(g, "cfg/warmup");
    s->decay_start = gold_int(g, "cfg/decay_start");
    s->decay_steps = gold_int(g, "cfg/decay_steps");
    return isfinite(s->base) && s->warmup_steps >= 0 && s->decay_start >= 0 && s->decay_steps >= 1;
}

static void test_lr_schedule(void)
{
    struct gold g;
    if (!load_fixture(&g))
        return;
    static const char *const kinds[] = {"sgd", "adagrad"};
    for (int k = 0; k < 2; k++) {
        char name[64];
        struct lr_sched s;
        double ref[NSTEPS];
        snprintf(name, sizeof name, "cfg/lr_base_%s", kinds[k]);
        if (!sched_from_fixture(&g, name, &s))
            break;
        snprintf(name, sizeof name, "%s/lr", kinds[k]);
        if (!gold_get(&g, name, GOLD_F64, NSTEPS, ref))
            break;
        for (int i = 0; i < NSTEPS; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s lr of step %d", kinds[k], i);
            check_scalar(what, lr_sched_at(&s, i), ref[i], 1e-7);
        }
    }
    gold_release(&g);
}

/* Three training steps with `opt`, then every parameter (and Adagrad state). */
static void run_steps(enum kern_optim opt)
{
    const char *kind = opt == KERN_OPT_SGD ? "sgd" : opt == KERN_OPT_ADAGRAD ? "adagrad" : "rowwise_adagrad";
    struct fx f;
    worst_reset();
    if (fx_setup(&f, opt)) {
        struct lr_sched s;
        double ref_loss[NSTEPS];
        char name[64];
        snprintf(name, sizeof name, "cfg/lr_base_%s", kind);
        int ok = sched_from_fixture(&f.g, name, &s);
        snprintf(name, sizeof name, "%s/loss", kind);
        ok = ok && gold_get(&f.g, name, GOLD_F64, NSTEPS, ref_loss);
        for (int i = 0; ok && i < NSTEPS; i++) {
            double loss = 0.0;
            enum tr_status rc = solo_load(&f.s, f.b[i]);
            if (rc == TR_OK)
                rc = hybrid_train_step(f.s.h, (float)lr_sched_at(&s, i), &loss);
            TH_CHECKF(rc == TR_OK, "training step %d: %s", i, tr_strerror(rc));
            snprintf(name, sizeof name, "%s loss of step %d", kind, i);
            check_scalar(name, loss, ref_loss[i], REL_TOL);
        }
        if (ok) {
            snprintf(name, sizeof name, "%s/after3/", kind);
            check_model(&f, name, DLRM_PARAMS, 1);
            if (opt != KERN_OPT_SGD)
                check_model(&f, name, DLRM_PARAMS_STATE, 1);
        }
        worst_print(opt == KERN_OPT_SGD       ? "SGD after 3 steps"
                    : opt == KERN_OPT_ADAGRAD ? "Adagrad after 3 steps"
                                              : "row-wise Adagrad after 3 steps");
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

/* Row-wise Adagrad: weights and per-row accumulators against the definition
 * written out in gen_golden.py (MLPs element-wise). */
static void test_rowwise_adagrad_3_steps(void)
{
    run_steps(KERN_OPT_ROWWISE_ADAGRAD);
}

/* The comparison must be able to fail: one initial weight off by a relative 1e-3
 * must show up in the logits, the loss and the first bottom layer's gradient.
 * The weight is the one of the last bottom layer with the largest |w * dLoss/dw|
 * in the reference (a weight feeding a ReLU that is off for the whole batch
 * changes nothing), so the error has to cross the interaction. */
static void test_negative_control(void)
{
    struct fx f;
    if (fx_setup(&f, KERN_OPT_SGD)) {
        struct dlrm *m = f.s.m;
        struct dlrm_info mi;
        dlrm_get_info(m, &mi);
        struct dlrm_layer_info L, L0;
        dlrm_get_layer(m, 0, mi.nbottom - 1, &L);
        dlrm_get_layer(m, 0, 0, &L0);
        const int64_t nw = (int64_t)L.in * L.out;
        int64_t at = 0, cols = 1;
        char name[96];
        snprintf(name, sizeof name, "grad/%s_kernel", L.name);
        float *g = gold_dup(&f.g, name, nw, &cols);
        float *p = model_read(m, DLRM_PARAMS, 0);
        TH_REQUIRE(g != NULL && p != NULL);
        const float *w = p + L.w_off;
        for (int64_t i = 1; i < nw; i++) /* largest first-order change of the loss */
            if (fabsf(g[i] * w[i]) > fabsf(g[at] * w[at]))
                at = i;
        tr_free(g);
        float before = w[at], after = before * (1.0f + 1e-3f);
        TH_EQ_ST(dlrm_tensor_write(m, DLRM_PARAMS, 0, L.w_off + at, 1, &after), TR_OK);
        tr_free(p);
        printf("# perturbed %s_kernel[%lld]: %.9g -> %.9g\n", L.name, (long long)at, (double)before, (double)after);
        double loss = 0.0;
        enum tr_status rc = fx_forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward/loss/backward: %s", tr_strerror(rc));
        struct cmp c = check_tensor(&f, "fwd/logits", DLRM_LOGITS, 0, f.B, 0);
        TH_CHECKF(!c.ok, "a 1e-3 change of one weight was not detected in the logits (rel %.3e)", c.rel);
        double ref_loss = gold_double(&f.g, "fwd/loss");
        double rel = fabs(loss - ref_loss) / fabs(ref_loss);
        printf("# perturbed loss rel %.3e\n", rel);
        TH_CHECKF(rel > REL_TOL, "a 1e-3 change of one weight was not detected in the loss (rel %.3e)", rel);
        snprintf(name, sizeof name, "grad/%s_kernel", L0.name);
        float *grads = model_read(m, DLRM_GRADS, 0);
        TH_REQUIRE(grads != NULL);
        c = check_vs(&f.g, name, grads + L0.w_off, (int64_t)L0.in * L0.out, 0);
        tr_free(grads);
        TH_CHECKF(!c.ok, "a 1e-3 change of one weight was not detected in '%s' (rel %.3e)", name, c.rel);
    }
    fx_release(&f);
}

/* ---- the DCNv2 model (records under dcn/) ------------------------------------------
 * The same checks for the model with --interaction dcnv2: its own config, initial
 * weights and references in the fixture; the batches and lr schedule are shared. */

/* Dense views of a model in parameter order: bottom, cross (v, u, bias), top. */
static int dcn_views(const struct dlrm *m, struct dense_view *v)
{
    struct dlrm_info mi;
    dlrm_get_info(m, &mi);
    struct dense_view all[4 * DLRM_MAX_LAYERS];
    int na = dense_views(m, all), nv = 0, nbottom = 2 * mi.nbottom;
    for (int i = 0; i < nbottom; i++)
        v[nv++] = all[i];
    for (int l = 0; l < mi.ncross; l++) {
        struct dlrm_cross_info c;
        dlrm_get_cross(m, l, &c);
        const int64_t wr = (int64_t)c.width * c.rank;
        snprintf(v[nv].name, sizeof v[nv].name, "%s_v_kernel", c.name);
        v[nv].off = c.v_off, v[nv++].n = wr;
        snprintf(v[nv].name, sizeof v[nv].name, "%s_u_kernel", c.name);
        v[nv].off = c.u_off, v[nv++].n = wr;
        snprintf(v[nv].name, sizeof v[nv].name, "%s_bias", c.name);
        v[nv].off = c.b_off, v[nv++].n = c.width;
    }
    for (int i = nbottom; i < na; i++)
        v[nv++] = all[i];
    return nv;
}

/* fx_setup for the dcn/ records. */
static int dcn_setup(struct fx *f, enum kern_optim opt)
{
    return model_setup(f, opt, 1);
}

/* check_model over the DCNv2 model's tensors, records "<prefix>[accum_]<name>". */
static void dcn_check_model(struct fx *f, const char *prefix, enum dlrm_tensor k, int tables)
{
    const int accum = k == DLRM_PARAMS_STATE;
    struct dense_view v[DCN_MAX_VIEWS];
    int nv = dcn_views(f->s.m, v);
    char name[200];
    float *flat = model_read(f->s.m, k, 0);
    for (int i = 0; flat && i < nv; i++) {
        snprintf(name, sizeof name, "%s%s%.63s", prefix, accum ? "accum_" : "", v[i].name);
        check_vs(&f->g, name, flat + v[i].off, v[i].n, 1);
    }
    tr_free(flat);
    struct dlrm_info mi;
    dlrm_get_info(f->s.m, &mi);
    for (int t = 0; tables && t < mi.ntables; t++) {
        snprintf(name, sizeof name, "%s%stable_%d", prefix, accum ? "accum_" : "", t);
        check_tensor(f, name, accum ? DLRM_TABLE_STATE : DLRM_TABLE, t, dlrm_tensor_numel(f->s.m, DLRM_TABLE, t), 1);
    }
}

static void test_dcn_forward(void)
{
    struct fx f;
    worst_reset();
    if (dcn_setup(&f, KERN_OPT_SGD)) {
        double loss = 0.0;
        enum tr_status rc = fx_forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward and loss: %s", tr_strerror(rc));
        struct dlrm_info mi;
        dlrm_get_info(f.s.m, &mi);
        const int64_t B = f.B, nd = (int64_t)mi.n * mi.emb_dim;
        check_tensor(&f, "dcn/fwd/interaction_input", DLRM_X, 0, B * nd, 1);
        check_tensor(&f, "dcn/fwd/interaction_output", DLRM_TOP_IN, 0, B * nd, 1);
        check_tensor(&f, "dcn/fwd/logits", DLRM_LOGITS, 0, B, 1);
        check_scalar("dcn/fwd/loss", loss, gold_double(&f.g, "dcn/fwd/loss"), REL_TOL);
        worst_print("dcnv2 forward");
    }
    fx_release(&f);
}

/* Every dense gradient, dLoss/dX as the model leaves it (row 0 masked by the
 * last bottom ReLU, as for the dot model) and the embedding gradients through
 * the sparse update (an SGD step with lr -1 on zeroed tables). */
static void test_dcn_gradients(void)
{
    struct fx f;
    worst_reset();
    if (dcn_setup(&f, KERN_OPT_SGD)) {
        struct dlrm *m = f.s.m;
        double loss = 0.0;
        enum tr_status rc = fx_forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward/loss/backward: %s", tr_strerror(rc));
        dcn_check_model(&f, "dcn/grad/", DLRM_GRADS, 0);
        float *x = model_read(m, DLRM_X, 0);
        TH_REQUIRE(x);
        check_dx_and_table_grads(&f, x, "dcn/");
        tr_free(x);
        worst_print("dcnv2 gradients");
    }
    fx_release(&f);
}

static void dcn_run_steps(enum kern_optim opt)
{
    const char *kind = opt == KERN_OPT_SGD ? "sgd" : "adagrad";
    struct fx f;
    worst_reset();
    if (dcn_setup(&f, opt)) {
        struct lr_sched s;
        double ref_loss[NSTEPS];
        char name[64];
        snprintf(name, sizeof name, "cfg/lr_base_%s", kind);
        int ok = sched_from_fixture(&f.g, name, &s);
        snprintf(name, sizeof name, "dcn/%s/loss", kind);
        ok = ok && gold_get(&f.g, name, GOLD_F64, NSTEPS, ref_loss);
        for (int i = 0; ok && i < NSTEPS; i++) {
            double loss = 0.0;
            enum tr_status rc = solo_load(&f.s, f.b[i]);
            if (rc == TR_OK)
                rc = hybrid_train_step(f.s.h, (float)lr_sched_at(&s, i), &loss);
            TH_CHECKF(rc == TR_OK, "training step %d: %s", i, tr_strerror(rc));
            snprintf(name, sizeof name, "dcn %s loss of step %d", kind, i);
            check_scalar(name, loss, ref_loss[i], REL_TOL);
        }
        if (ok) {
            snprintf(name, sizeof name, "dcn/%s/after3/", kind);
            dcn_check_model(&f, name, DLRM_PARAMS, 1);
            if (opt == KERN_OPT_ADAGRAD)
                dcn_check_model(&f, name, DLRM_PARAMS_STATE, 1);
        }
        worst_print(opt == KERN_OPT_SGD ? "dcnv2 SGD after 3 steps" : "dcnv2 Adagrad after 3 steps");
    }
    fx_release(&f);
}

static void test_dcn_sgd_3_steps(void)
{
    dcn_run_steps(KERN_OPT_SGD);
}

static void test_dcn_adagrad_3_steps(void)
{
    dcn_run_steps(KERN_OPT_ADAGRAD);
}

/* The DCNv2 comparison must be able to fail: one element of the first cross
 * layer's V off by a relative 1e-2 shows in the logits, the loss and the first
 * bottom layer's gradient (the change has to cross both cross layers; at 1e-3 the
 * loss moves by only 1.2e-5 relative, too close to REL_TOL to be a sure signal). */
static void test_dcn_negative_control(void)
{
    struct fx f;
    if (dcn_setup(&f, KERN_OPT_SGD)) {
        struct dlrm *m = f.s.m;
        struct dlrm_cross_info c;
        dlrm_get_cross(m, 0, &c);
        const int64_t nw = (int64_t)c.width * c.rank;
        int64_t at = 0, cols = 1;
        float *g = gold_dup(&f.g, "dcn/grad/cross_layer_0_v_kernel", nw, &cols);
        float *p = model_read(m, DLRM_PARAMS, 0);
        TH_REQUIRE(g != NULL && p != NULL);
        const float *w = p + c.v_off;
        for (int64_t i = 1; i < nw; i++)
            if (fabsf(g[i] * w[i]) > fabsf(g[at] * w[at]))
                at = i;
        tr_free(g);
        float after = w[at] * (1.0f + 1e-2f);
        TH_EQ_ST(dlrm_tensor_write(m, DLRM_PARAMS, 0, c.v_off + at, 1, &after), TR_OK);
        tr_free(p);
        double loss = 0.0;
        enum tr_status rc = fx_forward_backward(&f, 0, &loss);
        TH_CHECKF(rc == TR_OK, "forward/loss/backward: %s", tr_strerror(rc));
        struct cmp r = check_tensor(&f, "dcn/fwd/logits", DLRM_LOGITS, 0, f.B, 0);
        TH_CHECKF(!r.ok, "a 1e-2 change of one V weight was not detected in the logits (rel %.3e)", r.rel);
        double ref_loss = gold_double(&f.g, "dcn/fwd/loss"), rel = fabs(loss - ref_loss) / fabs(ref_loss);
        printf("# perturbed %s_v_kernel[%lld]: loss rel %.3e\n", c.name, (long long)at, rel);
        TH_CHECKF(rel > REL_TOL, "a 1e-2 change of one V weight was not detected in the loss (rel %.3e)", rel);
        struct dlrm_layer_info L0;
        dlrm_get_layer(m, 0, 0, &L0);
        float *grads = model_read(m, DLRM_GRADS, 0);
        TH_REQUIRE(grads != NULL);
        r = check_vs(&f.g, "dcn/grad/bottom_mlp_layer_0_kernel", grads + L0.w_off, (int64_t)L0.in * L0.out, 0);
        tr_free(grads);
        TH_CHECKF(!r.ok, "a 1e-2 change of one V weight was not detected in the bottom gradient (rel %.3e)", r.rel);
    }
    fx_release(&f);
}

static const struct th_case cases[] = {
    {"fixture_format", test_fixture_format},
    {"forward", test_forward},
    {"gradients", test_gradients},
    {"lr_schedule", test_lr_schedule},
    {"sgd_3_steps", test_sgd_3_steps},
    {"adagrad_3_steps", test_adagrad_3_steps},
    {"rowwise_adagrad_3_steps", test_rowwise_adagrad_3_steps},
    {"negative_control", test_negative_control},
    {"dcn_forward", test_dcn_forward},
    {"dcn_gradients", test_dcn_gradients},
    {"dcn_sgd_3_steps", test_dcn_sgd_3_steps},
    {"dcn_adagrad_3_steps", test_dcn_adagrad_3_steps},
    {"dcn_negative_control", test_dcn_negative_control},
};

static void enter_backend(void *arg)
{
    gold_backend = arg;
}

/* Every case on every backend of the build ("forward [cuda]"); the CUDA group is
 * one SKIP without a device (a failure under make test-gpu). */
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
