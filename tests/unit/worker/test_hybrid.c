/* test_hybrid.c: the training step in a world of 1 (over the self communicator):
 * column-wise and table-wise placement train bitwise the same model; the shared
 * batch keeps its header (flags, step, index) and may be partial; the gathered
 * logits are the model's; a zero learning rate changes nothing; a plan that does
 * not match the communicator is refused. N-worker equivalence is
 * tests/integration/t2002 (mpirun) and t5001 (SLURM). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/synth.h"
#include "../../../worker/solo.h"
#include "small_model.h"

static struct kern_backend open_cpu(void)
{
    struct kern_backend be;
    struct kern_backend_opts o = {.threads = 2, .device = -1, .local_rank = 0};
    TR_ASSERT(kern_backend_open("cpu", &o, &be) == TR_OK);
    return be;
}

/* Batch k of 40 synthetic samples (n of them used). */
static struct batch *make_batch(int k, int64_t n)
{
    struct batch *b = NULL;
    struct synth_cfg sc = {5, 13, 5, small_model_rows, SYNTH_IDS_POWERLAW, NULL, 0};
    if (batch_new(40, 13, 5, NULL, &b) != TR_OK || synth_fill(&sc, BATCH_TRAIN, k * 40, n, b) != TR_OK)
        batch_free(&b);
    return b;
}

static int same_tensor(const struct dlrm *a, const struct dlrm *b, enum dlrm_tensor k, int t)
{
    int64_t n = dlrm_tensor_numel(a, k, t);
    if (n != dlrm_tensor_numel(b, k, t))
        return 0;
    float *x = malloc((size_t)(n ? n : 1) * 4), *y = malloc((size_t)(n ? n : 1) * 4);
    int same = x && y && dlrm_tensor_read(a, k, t, 0, n, x) == TR_OK && dlrm_tensor_read(b, k, t, 0, n, y) == TR_OK &&
               memcmp(x, y, (size_t)n * 4) == 0;
    free(x);
    free(y);
    return same;
}

/* Trains a and b on the same 5 batches (the last of last_n samples): the same loss
 * bits at every step, then the same parameters and tables (and, with Adagrad, opt,
 * their state). */
static void train_alike(struct solo *a, struct solo *b, int opt, int64_t last_n)
{
    for (int k = 0; k < 5; k++) {
        struct batch *bt = make_batch(k, k == 4 ? last_n : 40);
        TH_REQUIRE(bt);
        double l1 = 0, l2 = 0;
        TH_EQ_ST(solo_load(a, bt), TR_OK);
        TH_EQ_ST(hybrid_train_step(a->h, 0.5f, &l1), TR_OK);
        TH_EQ_ST(solo_load(b, bt), TR_OK);
        TH_EQ_ST(hybrid_train_step(b->h, 0.5f, &l2), TR_OK);
        TH_CHECKF(memcmp(&l1, &l2, sizeof l1) == 0, "step %d: loss %.17g vs %.17g", k, l1, l2);
        TH_CHECK(isfinite(l1) && l1 > 0);
        batch_free(&bt);
    }
    TH_CHECK(same_tensor(a->m, b->m, DLRM_PARAMS, 0));
    if (opt)
        TH_CHECK(same_tensor(a->m, b->m, DLRM_PARAMS_STATE, 0));
    for (int t = 0; t < 5; t++) {
        TH_CHECKF(same_tensor(a->m, b->m, DLRM_TABLE, t), "table %d", t);
        if (opt)
            TH_CHECKF(same_tensor(a->m, b->m, DLRM_TABLE_STATE, t), "table %d state", t);
    }
}

static void placement_does_not_matter(void)
{
    for (int opt = 0; opt < 2; opt++) {
        struct kern_backend be = open_cpu();
        struct dlrm_cfg c = small_model_cfg(opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD);
        struct solo col, tab;
        TH_EQ_ST_REQ(solo_open(&col, &c, &be, 1), TR_OK);
        TH_EQ_ST_REQ(solo_open(&tab, &c, &be, 0), TR_OK);
        train_alike(&col, &tab, opt, 40);
        solo_close(&col);
        solo_close(&tab);
        kern_backend_close(&be);
    }
}

/* The cpu's ReLU masks (kern_backend_i.relu_mask) change no bit: the model with
 * them (input gradients written over the activations they replace) and without
 * (the backward reading y, gradients in their own buffers) train the same losses,
 * parameters and tables; the masks are the difference in their activation bytes. */
static void masks_do_not_matter(void)
{
    for (int opt = 0; opt < 2; opt++) {
        struct kern_backend be = open_cpu();
        TH_REQUIRE(be.i->relu_mask);
        static struct kern_backend_i plain;
        plain = *be.i;
        plain.relu_mask = 0;
        struct kern_backend nomask = {&plain, be.ctx};
        struct dlrm_cfg c = small_model_cfg(opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD);
        struct solo with, without;
        TH_EQ_ST_REQ(solo_open(&with, &c, &be, 1), TR_OK);
        TH_EQ_ST_REQ(solo_open(&without, &c, &nomask, 1), TR_OK);
        struct dlrm_bytes bw, bo;
        dlrm_get_bytes(with.m, &bw);
        dlrm_get_bytes(without.m, &bo);
        /* a bit per output of bottom 16 and 8 and of top layer 0 (16), 40 rows, each
         * layer's rounded up to 64 bytes, + 64, against no ping-pong buffers (2 x 40
         * rows of the widest layer, 16) */
        TH_EQ(bw.activations - bo.activations, 128 + 64 + 128 + 64 - 2 * 40 * 16 * 4);
        train_alike(&with, &without, opt, 23);
        solo_close(&with);
        solo_close(&without);
        kern_backend_close(&be);
    }
}

static void shared_batch_and_logits(void)
{
    struct kern_backend be = open_cpu();
    struct dlrm_cfg c = small_model_cfg(KERN_OPT_SGD);
    struct solo s;
    TH_EQ_ST_REQ(solo_open(&s, &c, &be, 0), TR_OK);
    struct batch *b = make_batch(3, 23); /* a partial batch: 23 of 40 */
    TH_REQUIRE(b);
    b->flags = BATCH_F_EVAL | BATCH_F_STOP;
    b->step = 1234;
    b->index = 17;
    struct batch hdr;
    TH_EQ_ST_REQ(hybrid_share_batch(s.h, b, &hdr), TR_OK);
    TH_EQ(hdr.n, 23);
    TH_EQ(hdr.flags, BATCH_F_EVAL | BATCH_F_STOP);
    TH_EQ(hdr.step, 1234);
    TH_EQ(hdr.index, 17);
    TH_EQ(hdr.cap, 40);
    TH_EQ_ST_REQ(hybrid_forward(s.h), TR_OK);
    float gathered[40], model[40];
    TH_EQ_ST(hybrid_gather_logits(s.h, gathered, KERN_D2H), TR_OK);
    TH_EQ_ST(dlrm_tensor_read(s.m, DLRM_LOGITS, 0, 0, 23, model), TR_OK);
    TH_CHECK(memcmp(gathered, model, 23 * sizeof(float)) == 0);
    /* the loss is the mean over the 23 samples only: recompute it from the logits */
    double loss = 0, ref = 0;
    TH_EQ_ST(hybrid_backward(s.h, &loss), TR_OK);
    const float *y = batch_labels(b);
    for (int i = 0; i < 23; i++) {
        double z = model[i];
        ref += fmax(z, 0.0) - z * y[i] + log1p(exp(-fabs(z)));
    }
    TH_NEAR(loss, ref / 23, 0, 1e-6);
    /* a zero learning rate leaves every parameter as it was */
    int64_t np = dlrm_tensor_numel(s.m, DLRM_PARAMS, 0);
    float *p0 = malloc((size_t)np * 4), *p1 = malloc((size_t)np * 4);
    TH_REQUIRE(p0 && p1);
    TH_EQ_ST(dlrm_tensor_read(s.m, DLRM_PARAMS, 0, 0, np, p0), TR_OK);
    TH_EQ_ST(hybrid_update(s.h, 0.0f), TR_OK);
    TH_EQ_ST(dlrm_tensor_read(s.m, DLRM_PARAMS, 0, 0, np, p1), TR_OK);
    TH_CHECK(memcmp(p0, p1, (size_t)np * 4) == 0);
    /* and a step moves them, with every phase timed */
    dlrm_reset_timers(s.m);
    hybrid_reset_timers(s.h);
    TH_EQ_ST(hybrid_train_step(s.h, 1.0f, &loss), TR_OK);
    TH_EQ_ST(dlrm_tensor_read(s.m, DLRM_PARAMS, 0, 0, np, p1), TR_OK);
    TH_CHECK(memcmp(p0, p1, (size_t)np * 4) != 0);
    TH_CHECK(dlrm_phase_seconds(s.m, DLRM_T_EMB_FWD) > 0 && dlrm_phase_seconds(s.m, DLRM_T_TOP_BWD) > 0 &&
             dlrm_phase_seconds(s.m, DLRM_T_EMB_UPDATE) > 0);
    TH_CHECK(hybrid_seconds(s.h, HYBRID_T_EXCHANGE) >= 0 && hybrid_seconds(s.h, HYBRID_T_PACK) >= 0);
    free(p0);
    free(p1);
    batch_free(&b);
    solo_close(&s);
    kern_backend_close(&be);
}

static void plan_must_match(void)
{
    struct kern_backend be = open_cpu();
    struct dlrm_cfg c = small_model_cfg(KERN_OPT_SGD);
    struct comm self;
    comm_open_self(&be, &self);
    struct shard_plan p2;
    TH_EQ_ST_REQ(shard_plan_make(&p2, SHARD_COLUMNWISE, 2, 0, 5, small_model_rows, 8, 1, 1), TR_OK);
    c.plan = &p2;
    struct dlrm *m = NULL;
    struct hybrid *h = NULL;
    TH_EQ_ST_REQ(dlrm_new(&c, &be, &m), TR_OK);
    TH_EQ_ST(hybrid_new(m, &self, &p2, &h), TR_ERR_ARG); /* a plan of 2 workers on a communicator of 1 */
    TH_CHECK(h == NULL);
    dlrm_free(&m);
    shard_plan_release(&p2);
    comm_close(&self);
    kern_backend_close(&be);
}

static const struct th_case cases[] = {
    {"masks_do_not_matter", masks_do_not_matter},
    {"placement_does_not_matter", placement_does_not_matter},
    {"shared_batch_and_logits", shared_batch_and_logits},
    {"plan_must_match", plan_must_match},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
