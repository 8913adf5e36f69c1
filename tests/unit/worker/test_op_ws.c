/* test_op_ws.c: the model asks the backend for the working memory of every op it
 * and its step run, and reserves it once, before the first step (so that no CUDA
 * step allocates). A spy backend over the CPU's records each ws question and the
 * reserve call, and checks every op call it then runs against the questions: some
 * question about the same op must be at least as large in every field of the
 * call's shape (kern.h's kern_shape). Steps of a dot and a DCNv2 model, with
 * Adagrad and row-wise Adagrad and dirty-row tracking (and a table in a host
 * tier, whose moves between cache and staging are asked too), and the numeric
 * guards' sums of squares over every tensor, run through it. */
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/synth.h"
#include "../../../worker/plan.h"
#include "../../../worker/solo.h"
#include "small_model.h"

#define MAX_ASKED 64

static struct spy {
    struct kern_backend real; /* the cpu backend every op runs on */
    struct kern_shape asked[KERN_OP_COUNT_][MAX_ASKED];
    int nasked[KERN_OP_COUNT_];
    struct kern_ws answers; /* field-wise most of the answers given */
    int reserves;
    struct kern_ws reserved;
    int ran[KERN_OP_COUNT_];
    int uncovered; /* op calls no question covers */
    int ops_before_reserve[KERN_OP_COUNT_];
} S;

/* A made-up scratch size that grows with every field, so that reserve's argument
 * shows which answers it took. */
static size_t fake_scratch(enum kern_op op, const struct kern_shape *s)
{
    return (size_t)(op + 1) * 1000 + (size_t)(s->m + s->n + s->k + s->count);
}

static void spy_ws(void *ctx, enum kern_op op, const struct kern_shape *s, struct kern_ws *out)
{
    (void)ctx;
    S.real.i->ws(S.real.ctx, op, s, out);
    out->scratch = fake_scratch(op, s);
    kern_ws_max(&S.answers, out);
    if ((int)op >= 0 && op < KERN_OP_COUNT_ && S.nasked[op] < MAX_ASKED)
        S.asked[op][S.nasked[op]++] = *s;
}

static enum tr_status spy_reserve(void *ctx, const struct kern_ws *most)
{
    (void)ctx;
    S.reserves++;
    S.reserved = *most;
    return S.real.i->reserve(S.real.ctx, most);
}

/* Records a call of op with shape s; checks a question covers it. */
static void saw(enum kern_op op, int64_t m, int64_t n, int64_t k, int count)
{
    S.ran[op]++;
    if (!S.reserves)
        S.ops_before_reserve[op]++;
    for (int q = 0; q < S.nasked[op]; q++) {
        const struct kern_shape *a = &S.asked[op][q];
        if (m <= a->m && n <= a->n && k <= a->k && count <= a->count)
            return;
    }
    if (S.uncovered++ < 5)
        th_failf_(__FILE__, __LINE__, "op %s ran with shape (m %lld, n %lld, k %lld, count %d), which no ws question "
                                      "(%d of them) covers",
                  kern_op_name(op), (long long)m, (long long)n, (long long)k, count, S.nasked[op]);
}

#define FWD(op, argt)                                                                     \
    static enum tr_status spy_##op(void *ctx, const struct argt *a)                       \
    {                                                                                     \
        (void)ctx;                                                                        \
        shape_##op(a);                                                                    \
        return S.real.i->op(S.real.ctx, a);                                               \
    }
#define FWD_N(op, argt)                                                                   \
    static enum tr_status spy_##op(void *ctx, const struct argt *a, int n)                \
    {                                                                                     \
        (void)ctx;                                                                        \
        shape_##op(a, n);                                                                 \
        return S.real.i->op(S.real.ctx, a, n);                                            \
    }

/* The shape of each call, as kern.h's kern_shape defines it. */
static void shape_gemm(const struct kern_gemm_args *a)
{
    saw(KERN_OP_GEMM, a->m, a->n, a->k, 1);
}
static void shape_bias_act_fwd(const struct kern_bias_act_fwd_args *a)
{
    saw(KERN_OP_BIAS_ACT_FWD, a->rows, a->cols, 0, 1);
}
static void shape_bias_act_bwd(const struct kern_bias_act_bwd_args *a)
{
    saw(KERN_OP_BIAS_ACT_BWD, a->rows, a->cols, 0, 1);
}
static void shape_cross_fwd(const struct kern_cross_fwd_args *a)
{
    saw(KERN_OP_CROSS_FWD, a->rows, a->cols, 0, 1);
}
static void shape_cross_bwd(const struct kern_cross_bwd_args *a)
{
    saw(KERN_OP_CROSS_BWD, a->rows, a->cols, 0, 1);
}
static void shape_fill(const struct kern_fill_args *a)
{
    saw(KERN_OP_FILL, a->rows, a->cols, 0, 1);
}
static void shape_interact_fwd(const struct kern_interact_fwd_args *a)
{
    saw(KERN_OP_INTERACT_FWD, a->batch, a->n, a->d, 1);
}
static void shape_interact_bwd(const struct kern_interact_bwd_args *a)
{
    saw(KERN_OP_INTERACT_BWD, a->batch, a->n, a->d, 1);
}
static void shape_bce(const struct kern_bce_args *a)
{
    saw(KERN_OP_BCE, a->n, 0, 0, 1);
}
static void shape_dense_update(const struct kern_dense_update_args *a)
{
    saw(KERN_OP_DENSE_UPDATE, a->n, 0, 0, 1);
}
static void shape_metrics(const struct kern_metrics_args *a)
{
    saw(KERN_OP_METRICS, a->n, 0, 0, 1);
}
/* ids of one table: its bags' (offsets hold host memory on the cpu) */
static int64_t nidx_of(const int64_t *offsets, int64_t nbags)
{
    return offsets ? offsets[nbags] - offsets[0] : nbags;
}
static void shape_emb_fwd(const struct kern_emb_fwd_args *a, int n)
{
    int64_t m = 0, w = 0;
    for (int t = 0; t < n; t++) {
        m = TR_MAX(m, nidx_of(a[t].offsets, a[t].nbags));
        w = TR_MAX(w, a[t].c1 - a[t].c0);
    }
    saw(KERN_OP_EMB_FWD, m, w, 0, n);
}
static void emb_update_shape(enum kern_op op, const struct kern_emb_update_args *a, int n)
{
    int64_t m = 0, w = 0;
    for (int t = 0; t < n; t++) {
        m = TR_MAX(m, nidx_of(a[t].offsets, a[t].nbags));
        w = TR_MAX(w, a[t].c1 - a[t].c0);
    }
    saw(op, m, w, 0, n);
    /* the caller's workspace is what the backend asked for */
    TH_CHECKF(n == 0 || a[0].ws_bytes >= kern_emb_update_ws_bytes(&S.real, m, w, n),
              "%s: ws of %zu bytes, the backend asks %zu", kern_op_name(op), a[0].ws_bytes,
              kern_emb_update_ws_bytes(&S.real, m, w, n));
}
static void shape_emb_update(const struct kern_emb_update_args *a, int n)
{
    emb_update_shape(KERN_OP_EMB_UPDATE, a, n);
}
static void shape_emb_rowsq(const struct kern_emb_update_args *a, int n)
{
    emb_update_shape(KERN_OP_EMB_ROWSQ, a, n);
}
static void shape_copy_rows(const struct kern_copy_rows_args *a, int n)
{
    int64_t m = 0, w = 0;
    for (int k = 0; k < n; k++) {
        m = TR_MAX(m, a[k].rows);
        w = TR_MAX(w, a[k].cols);
    }
    saw(KERN_OP_COPY_ROWS, m, w, 0, n);
}
static void shape_sumsq(const struct kern_sumsq_args *a, int n)
{
    int64_t m = 0;
    for (int k = 0; k < n; k++)
        m += a[k].rows * a[k].cols;
    saw(KERN_OP_SUMSQ, m, 0, 0, n);
}
static void shape_mark_rows(const struct kern_mark_rows_args *a, int n)
{
    int64_t m = 0;
    for (int k = 0; k < n; k++)
        m = TR_MAX(m, a[k].n);
    saw(KERN_OP_MARK_ROWS, m, 0, 0, n);
}

static void shape_move_rows(const struct kern_move_rows_args *a, int n)
{
    int64_t m = 0, w = 0;
    for (int k = 0; k < n; k++) {
        m = TR_MAX(m, a[k].n);
        w = TR_MAX(w, a[k].cols);
    }
    saw(KERN_OP_MOVE_ROWS, m, w, 0, n);
}

FWD(gemm, kern_gemm_args)
FWD(bias_act_fwd, kern_bias_act_fwd_args)
FWD(bias_act_bwd, kern_bias_act_bwd_args)
FWD(interact_fwd, kern_interact_fwd_args)
FWD(interact_bwd, kern_interact_bwd_args)
FWD(bce, kern_bce_args)
FWD(dense_update, kern_dense_update_args)
FWD(fill, kern_fill_args)
FWD(cross_fwd, kern_cross_fwd_args)
FWD(cross_bwd, kern_cross_bwd_args)
FWD(metrics, kern_metrics_args)
FWD_N(emb_fwd, kern_emb_fwd_args)
FWD_N(emb_update, kern_emb_update_args)
FWD_N(emb_rowsq, kern_emb_update_args)
FWD_N(copy_rows, kern_copy_rows_args)
FWD_N(sumsq, kern_sumsq_args)
FWD_N(mark_rows, kern_mark_rows_args)
FWD_N(move_rows, kern_move_rows_args)

static struct kern_backend_i spy_iface;

/* Opens the spy over a fresh cpu backend (the global S). */
static struct kern_backend spy_open(void)
{
    memset(&S, 0, sizeof S);
    struct kern_backend_opts o = {.threads = 2, .device = -1};
    TR_ASSERT(kern_backend_open("cpu", &o, &S.real) == TR_OK);
    spy_iface = *S.real.i;
    spy_iface.name = "spy";
    spy_iface.ws = spy_ws;
    spy_iface.reserve = spy_reserve;
#define SET(op) spy_iface.op = spy_##op
    SET(gemm), SET(bias_act_fwd), SET(bias_act_bwd), SET(interact_fwd), SET(interact_bwd), SET(bce);
    SET(dense_update), SET(fill), SET(cross_fwd), SET(cross_bwd), SET(metrics), SET(emb_fwd), SET(emb_update);
    SET(emb_rowsq), SET(copy_rows), SET(sumsq), SET(mark_rows), SET(move_rows);
#undef SET
    return (struct kern_backend){&spy_iface, S.real.ctx};
}

/* the step tests' small model, with DCNv2 when dcn */
static struct dlrm_cfg cfg_of(enum kern_optim opt, int dcn)
{
    struct dlrm_cfg c = small_model_cfg(opt);
    if (dcn) {
        c.interaction = DLRM_INTERACT_DCNV2;
        c.ncross = 2;
        c.cross_rank = 4;
    }
    return c;
}

/* Runs steps (and the guards' sums of squares over every tensor) of cfg through
 * the spy; checks reserve took the most of the answers, once, before any step op,
 * and that the plan of the model is what was reserved. */
static void run_model(const struct dlrm_cfg *c, int columnwise)
{
    struct kern_backend be = spy_open();
    struct dlrm_bytes planned;
    TH_EQ_ST(dlrm_plan_bytes(c, &be, &planned), TR_OK);
    const struct kern_ws plan_most = S.answers;
    memset(S.nasked, 0, sizeof S.nasked);
    memset(&S.answers, 0, sizeof S.answers);
    struct solo s;
    TH_EQ_ST_REQ(solo_open(&s, c, &be, columnwise), TR_OK);
    TH_EQ(S.reserves, 1);
    TH_CHECK(memcmp(&S.reserved, &S.answers, sizeof S.answers) == 0);
    TH_CHECK(memcmp(&S.reserved, &planned.ops, sizeof planned.ops) == 0); /* the plan is the reservation */
    TH_CHECK(memcmp(&plan_most, &planned.ops, sizeof planned.ops) == 0);
    struct dlrm_bytes got;
    dlrm_get_bytes(s.m, &got);
    TH_CHECK(memcmp(&got.ops, &planned.ops, sizeof planned.ops) == 0);
    for (int op = 0; op < KERN_OP_COUNT_; op++)
        TH_CHECKF(S.ops_before_reserve[op] == 0, "op %s ran %d time(s) before the reserve",
                  kern_op_name((enum kern_op)op), S.ops_before_reserve[op]);
    int64_t block_rows[5] = {4, 4, 8, 4, 64};
    TH_EQ_ST_REQ(hybrid_track_dirty(s.h, block_rows), TR_OK);
    struct synth_cfg sc = {5, 13, 5, small_model_rows, SYNTH_IDS_POWERLAW, c->hot, 1};
    for (int k = 0; k < 3; k++) {
        struct batch *b = NULL;
        TH_EQ_ST_REQ(batch_new(40, 13, 5, c->hot, &b), TR_OK);
        TH_EQ_ST_REQ(synth_fill(&sc, BATCH_TRAIN, k * 40, k == 2 ? 23 : 40, b), TR_OK);
        double loss = 0.0;
        TH_EQ_ST(solo_load(&s, b), TR_OK);
        TH_EQ_ST(hybrid_train_step(s.h, 0.1f, &loss), TR_OK);
        int t = 0;
        TH_EQ_ST(hybrid_find_nonfinite_grad(s.h, &t), TR_OK);
        batch_free(&b);
    }
    /* the numeric guards: a sum of squares over any one tensor */
    for (int k = 0; k < DLRM_TENSOR_COUNT_; k++)
        for (int t = 0; t < (k == DLRM_TABLE || k == DLRM_TABLE_STATE ? 5 : 1); t++) {
            const int64_t n = dlrm_tensor_numel(s.m, (enum dlrm_tensor)k, t);
            double sq = 0.0;
            if (n > 0)
                TH_EQ_ST(dlrm_tensor_sumsq(s.m, (enum dlrm_tensor)k, t, 0, n, &sq), TR_OK);
        }
    TH_EQ(S.uncovered, 0);
    TH_EQ(S.reserves, 1); /* once: steps never reserve again */
    /* the ops a step runs on the cpu (the gemm's epilogue runs inside the cpu's gemm) */
    static const enum kern_op common_ops[] = {KERN_OP_GEMM,   KERN_OP_BIAS_ACT_BWD, KERN_OP_EMB_FWD,
                                              KERN_OP_EMB_UPDATE, KERN_OP_BCE,   KERN_OP_DENSE_UPDATE,
                                              KERN_OP_FILL,   KERN_OP_SUMSQ,        KERN_OP_MARK_ROWS};
    for (size_t k = 0; k < TR_ARRAY_SIZE(common_ops); k++)
        TH_CHECKF(S.ran[common_ops[k]] > 0, "op %s never ran", kern_op_name(common_ops[k]));
    TH_CHECK(!S.ran[KERN_OP_MOVE_ROWS] == (c->tier.store == JOB_STORE_MEMORY)); /* a tier's moves, only then */
    if (c->interaction == DLRM_INTERACT_DCNV2)
        TH_CHECK(S.ran[KERN_OP_CROSS_FWD] && S.ran[KERN_OP_CROSS_BWD] && S.ran[KERN_OP_BIAS_ACT_FWD] &&
                 S.ran[KERN_OP_COPY_ROWS] && !S.ran[KERN_OP_INTERACT_FWD]);
    else
        TH_CHECK(S.ran[KERN_OP_INTERACT_FWD] && S.ran[KERN_OP_INTERACT_BWD] && !S.ran[KERN_OP_CROSS_FWD]);
    solo_close(&s);
    kern_backend_close(&S.real);
}

static void dot_sgd(void)
{
    const struct dlrm_cfg c = cfg_of(KERN_OPT_SGD, 0);
    run_model(&c, 0);
}

static void dot_adagrad_columnwise(void)
{
    const struct dlrm_cfg c = cfg_of(KERN_OPT_ADAGRAD, 0);
    run_model(&c, 1);
}

static void dcnv2_rowwise(void)
{
    const struct dlrm_cfg c = cfg_of(KERN_OPT_ROWWISE_ADAGRAD, 1);
    run_model(&c, 0);
}

/* the 1000-row table in a host tier of the least cache (80 slots for batches of 40) */
static void dot_rowwise_tiered(void)
{
    struct dlrm_cfg c = cfg_of(KERN_OPT_ROWWISE_ADAGRAD, 0);
    c.tier = (struct job_tier){.store = JOB_STORE_HOST, .cache_fraction = 0.01, .io_threads = 1};
    run_model(&c, 0);
}

/* multi-hot tables: a table's gathers and updates take up to hot ids a sample */
static void dcnv2_multihot(void)
{
    static const int32_t hot[5] = {3, 0, 7, 2, 0};
    static const uint8_t mean[5] = {1, 0, 0, 1, 0};
    struct dlrm_cfg c = cfg_of(KERN_OPT_ADAGRAD, 1);
    c.hot = hot;
    c.mean = mean;
    run_model(&c, 1);
}

/* The plan counts what the backend answers: its held bytes after the reserve and
 * the largest per-call memory of an op, and, on rank 0, the metrics op's. */
static void plan_asks_the_backend(void)
{
    struct kern_backend be = spy_open();
    struct job_cfg j;
    memset(&j, 0, sizeof j);
    int64_t bottom[2] = {16, 8}, top[2] = {16, 1};
    j.embedding_dim = 8;
    j.optimizer = JOB_OPT_SGD;
    j.bottom = (struct tr_i64_list){bottom, 2};
    j.top = (struct tr_i64_list){top, 2};
    j.batch_size = 40;
    j.seed = 1;
    j.threads = 2;
    const struct plan_shape sh = {13, 5, small_model_rows, 1000, 0, NULL};
    struct plan_worker w;
    TH_EQ_ST_REQ(plan_worker_bytes(&j, &sh, &be, 1, 0, &w), TR_OK);
    TH_CHECK(S.nasked[KERN_OP_METRICS] == 1 && S.asked[KERN_OP_METRICS][0].m == 1000);
    const struct kern_shape ms = {.m = 1000};
    struct kern_ws mw;
    S.real.i->ws(S.real.ctx, KERN_OP_METRICS, &ms, &mw);
    TH_EQ(w.eval, 2 * 1000 * 4 + (int64_t)mw.call);
    struct kern_ws most = {0};
    for (int op = 0; op < KERN_OP_COUNT_; op++)
        for (int q = 0; q < S.nasked[op]; q++)
            if (op != KERN_OP_METRICS) {
                struct kern_ws a;
                S.real.i->ws(S.real.ctx, (enum kern_op)op, &S.asked[op][q], &a);
                kern_ws_max(&most, &a);
            }
    TH_CHECK(most.call > 0); /* the cpu's interaction buffers */
    TH_EQ(w.backend, (int64_t)most.call); /* the cpu holds nothing of its own */
    kern_backend_close(&S.real);
}

static const struct th_case cases[] = {
    {"dot_sgd", dot_sgd},
    {"dot_adagrad_columnwise", dot_adagrad_columnwise},
    {"dcnv2_rowwise", dcnv2_rowwise},
    {"dot_rowwise_tiered", dot_rowwise_tiered},
    {"dcnv2_multihot", dcnv2_multihot},
    {"plan_asks_the_backend", plan_asks_the_backend},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
