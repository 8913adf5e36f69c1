/* train_guard.c: the numeric guards of a training run (issue 8): a run never
 * hides a NaN. They read the model through its tensor walk (dlrm_tensors) and
 * the backend's sumsq op, and take no decision but to stop the run.
 *
 * Every step: the loss (the same on every rank), this rank's embedding-vector
 * gradients (carried to every rank as a NaN loss by the step's all-reduce) and
 * the all-reduced dense gradients (the same on every rank), before the update
 * touches a weight. Every --print_freq steps and at the last step: the sum of
 * squares of the dense weights and of this rank's tables, with one all-reduce so
 * that every rank stops together. Failures name the step (counted from 1, as the
 * progress lines do) and the tensor; TR_ERR_RANGE. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "train_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"

const char *train_logit_layer(const struct train *T, struct dlrm_layer_info *li)
{
    struct dlrm_info mi;
    dlrm_get_info(T->m, &mi);
    dlrm_get_layer(T->m, 1, mi.ntop - 1, li);
    return li->name;
}

/* The hint after a divergence: an Adagrad that divides by a near-zero
 * accumulator before the learning rate, which is otherwise the usual cause. */
static void diverged_hint(const struct train *T, int inputs)
{
    const struct job_cfg *j = &T->c->job;
    if (j->optimizer != JOB_OPT_SGD && j->adagrad_eps == 0.0 && j->adagrad_init < 1e-3)
        LOG_HINT("--adagrad_epsilon 0 with --adagrad_initial_accumulator_value %g divides by an accumulator that "
                 "is tiny for rarely updated weights: keep the defaults (1e-7 and 0.1)",
                 j->adagrad_init);
    else
        LOG_HINT("lower --learning_rate (now %g) or lengthen --warmup_steps (now %lld)%s", j->learning_rate,
                 (long long)j->warmup_steps, inputs ? "; check the inputs (--nonfinite_inputs)" : "");
}

/* A search for the first dense parameter tensor inside [p0, p1) whose part of
 * tensor k holds NaN or inf: of the MLP layers, or (cross) of the cross layers. */
struct nonfinite_find {
    const struct dlrm *m;
    enum dlrm_tensor k;
    int64_t p0, p1;
    int cross;
    char *name;
    size_t len;
};

static enum tr_status nonfinite_visit(void *ctx, const struct dlrm_tensor_view *v)
{
    struct nonfinite_find *f = ctx;
    if (f->name[0] || v->role != DLRM_ROLE_PARAM || (v->group == DLRM_GROUP_CROSS) != f->cross)
        return TR_OK;
    const int64_t n = v->rows * v->cols;
    if (v->off < f->p0 || v->off + n > f->p1)
        return TR_OK;
    double sq = 0.0;
    TR_CHECK(dlrm_tensor_sumsq(f->m, f->k, 0, v->off, n, &sq));
    if (isfinite(sq))
        return TR_OK;
    char part[32]; /* "v_kernel" -> "v kernel" */
    snprintf(part, sizeof part, "%s", v->part);
    for (char *c = part; *c; c++)
        if (*c == '_')
            *c = ' ';
    if (v->ndim == 1)
        snprintf(f->name, f->len, "%s %s (%lld)", v->layer, part, (long long)v->rows);
    else
        snprintf(f->name, f->len, "%s %s (%lld x %lld)", v->layer, part, (long long)v->rows, (long long)v->cols);
    return TR_OK;
}

/* The first layer part (kernel or bias) of tensor k (DLRM_PARAMS or DLRM_GRADS)
 * inside [p0, p1) holding NaN or inf, as "top_mlp_layer_0 kernel (16 x 1)"; ""
 * when none does. The MLP layers are searched first (bottom, then top), then the
 * dcnv2 cross layers. */
static enum tr_status find_nonfinite_layer(const struct train *T, enum dlrm_tensor k, int64_t p0, int64_t p1,
                                           char *name, size_t len)
{
    name[0] = '\0';
    for (int cross = 0; cross < 2; cross++) {
        struct nonfinite_find f = {T->m, k, p0, p1, cross, name, len};
        TR_CHECK(dlrm_tensors(T->m, nonfinite_visit, &f));
    }
    return TR_OK;
}

/* After the backward of step s (0-based), before the update. */
enum tr_status train_check_gradients(struct train *T, int64_t s, double loss)
{
    const long long step = (long long)s + 1;
    if (!isfinite(loss)) {
        struct hybrid_guard g;
        hybrid_get_guard(T->h, &g);
        if (g.emb_grad_nonfinite) {
            int t = -2;
            TR_CHECK(hybrid_find_nonfinite_grad(T->h, &t));
            if (t >= 0)
                LOG_ERROR("step %lld: the gradient of embedding table %d holds NaN or inf; training diverged", step,
                          t);
            else
                LOG_ERROR("step %lld: the gradient of the bottom MLP output (interaction input) holds NaN or inf; "
                          "training diverged",
                          step);
        } else if (!isfinite(g.local_loss_sum) || T->dist.world == 1) {
            LOG_ERROR("step %lld: loss is %g; training diverged", step, loss);
        } else {
            LOG_ERROR("step %lld: another rank found a NaN or inf loss or embedding gradient (its log names it); "
                      "stopping with it",
                      step);
        }
        diverged_hint(T, 1);
        T->together = 1; /* the all-reduced loss: every rank stops here */
        return TR_ERR_RANGE;
    }
    /* the all-reduced dense gradients: the whole buffer, but a model-parallel
     * bottom MLP's part (rank 0 alone, after the all-reduce: the weight check
     * catches it with every rank) */
    struct dlrm_info mi;
    dlrm_get_info(T->m, &mi);
    const int64_t p0 = mi.has_bottom && !mi.dp_bottom ? mi.top_param0 : 0;
    double sq = 0.0;
    TR_CHECK(dlrm_tensor_sumsq(T->m, DLRM_GRADS, 0, p0, mi.nparams - p0, &sq));
    if (isfinite(sq))
        return TR_OK;
    char name[96];
    TR_CHECK(find_nonfinite_layer(T, DLRM_GRADS, p0, mi.nparams, name, sizeof name));
    LOG_ERROR("step %lld: the gradient of %s holds NaN or inf (loss %g); training diverged", step,
              name[0] ? name : "the dense parameters", loss);
    diverged_hint(T, 0);
    T->together = 1; /* all-reduced gradients: every rank stops here */
    return TR_ERR_RANGE;
}

/* The sums of squares of the tables this rank holds, and the first table (in
 * config order) holding NaN or inf. */
struct table_norms {
    const struct dlrm *m;
    double sum;
    int bad_table;
};

static enum tr_status table_norms_visit(void *ctx, const struct dlrm_tensor_view *v)
{
    struct table_norms *tn = ctx;
    if (v->role != DLRM_ROLE_EMB)
        return TR_OK;
    double sq = 0.0;
    const int64_t n = v->rows * (v->c1 - v->c0);
    if (n > 0)
        TR_CHECK(dlrm_tensor_sumsq(tn->m, v->k, v->index, v->off, n, &sq));
    if (!isfinite(sq) && tn->bad_table < 0)
        tn->bad_table = v->index;
    tn->sum += sq;
    return TR_OK;
}

/* The weight norm after the update of step s (0-based). Collective. */
enum tr_status train_check_weights(struct train *T, int64_t s)
{
    const long long step = (long long)s + 1;
    struct dlrm_info mi;
    dlrm_get_info(T->m, &mi);
    double dense = 0.0;
    TR_CHECK(dlrm_tensor_sumsq(T->m, DLRM_PARAMS, 0, 0, mi.nparams, &dense));
    struct table_norms tn = {T->m, 0.0, -1};
    TR_CHECK(dlrm_tensors(T->m, table_norms_visit, &tn));
    const double emb = tn.sum;
    const int bad_table = tn.bad_table;
    double bad = isfinite(dense) && isfinite(emb) ? 0.0 : 1.0;
    TR_CHECK(hybrid_sum_ranks(T->h, &bad));
    LOG_DEBUG(TRAIN, "step %lld: weight norms: dense %.6g, embeddings %.6g (this rank)", step, sqrt(dense),
              sqrt(emb));
    if (bad == 0.0)
        return TR_OK;
    if (!isfinite(dense)) {
        char name[96];
        TR_CHECK(find_nonfinite_layer(T, DLRM_PARAMS, 0, mi.nparams, name, sizeof name));
        LOG_ERROR("step %lld: the weights of %s hold NaN or inf; training diverged", step,
                  name[0] ? name : "the dense layers");
    } else if (bad_table >= 0) {
        LOG_ERROR("step %lld: the weights of embedding table %d hold NaN or inf; training diverged", step, bad_table);
    } else {
        LOG_ERROR("step %lld: another rank found NaN or inf weights (its log names them); stopping with it", step);
    }
    diverged_hint(T, 0);
    T->together = 1; /* an all-reduced verdict */
    return TR_ERR_RANGE;
}

/* A loss that stays finite but runs away: BCE starts near ln 2 (0.69); a mean
 * loss over DIVERGE_MIN nats a sample and DIVERGE_FACTOR times the first step's
 * means the logits saturate on the wrong side, and the run will end at AUC 0.5. */
#define DIVERGE_FACTOR 100.0
#define DIVERGE_MIN 10.0

enum tr_status train_check_divergence(struct train *T, int64_t s, double loss)
{
    const double first = s == 0 ? loss : T->res.first_loss;
    if (!(loss > DIVERGE_MIN && loss > DIVERGE_FACTOR * first))
        return TR_OK;
    struct dlrm_layer_info li;
    LOG_ERROR("step %lld: diverged at step %lld: the loss is %.4g, over %.0f times the first step's %.4g (the "
              "logits of %s saturate)",
              (long long)s + 1, (long long)s + 1, loss, DIVERGE_FACTOR, first, train_logit_layer(T, &li));
    diverged_hint(T, 0);
    T->together = 1; /* the all-reduced loss: every rank stops here */
    return TR_ERR_RANGE;
}
