/* test_plan.c: the memory plan against sizes worked out by hand for a tiny model
 * (two tables of 10 and 20 rows, dim 4, 3 numerical features, bottom 4, top 2,1,
 * global batch 5) on one worker and on two column-wise workers, the thread rule
 * shared with the worker, and the plan against what the model and the step
 * really allocate. tests/integration/t2005 checks the plan against the
 * allocator's peak in real runs. */
#include <stdlib.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/batch.h"
#include "../../../worker/plan.h"
#include "../../../worker/solo.h"

static const int64_t rows2[2] = {10, 20};

static void tiny_job(struct job_cfg *j, int64_t bottom[1], int64_t top[2])
{
    memset(j, 0, sizeof *j);
    j->embedding_dim = 4;
    bottom[0] = 4;
    top[0] = 2;
    top[1] = 1;
    j->bottom = (struct tr_i64_list){bottom, 1};
    j->top = (struct tr_i64_list){top, 2};
    j->optimizer = JOB_OPT_SGD;
    j->batch_size = 5;
    j->seed = 1;
    j->threads = 1;
}

static void by_hand(void)
{
    struct kern_backend be;
    struct kern_backend_opts o = {.threads = 1, .device = -1, .local_rank = 0};
    TH_EQ_ST_REQ(kern_backend_open("cpu", &o, &be), TR_OK);
    struct job_cfg j;
    int64_t bottom[1], top[2];
    tiny_job(&j, bottom, top);
    const struct plan_shape sh = {3, 2, rows2, 100, 0, NULL};
    struct plan_worker w;
    TH_EQ_ST_REQ(plan_worker_bytes(&j, &sh, &be, 1, 0, &w), TR_OK);
    /* dense: bottom 8x4+4, top 8x2+2 (interaction width 4 + 3 pairs -> 8), 2x1+1 = 57
     * parameters, each with a gradient; both blocks start 64-byte aligned (64 floats) */
    TH_EQ(w.mlp, 64 * 4 * 2);
    TH_EQ(w.opt_state, 0);
    TH_EQ(w.embeddings, (10 + 20) * 4 * 4);
    TH_EQ(w.tables_held, 2);
    TH_EQ(w.rows_held, 30);
    /* activations per sample: X and dX 2*3*4, interaction out and grad 2*8, dlogits 1,
     * top outputs 2+1 = 44 floats; 64 bytes of slack and 64 for dx's guard flag; the
     * cpu's ReLU masks, a bit per output of the bottom layer (5 rows of 4, a byte a
     * row) and of top layer 0 (5 of 2), each rounded up to 64 bytes, after 64 bytes
     * of slack (with them, the MLPs' gradients take the activations' place: no
     * ping-pong rows) */
    TH_EQ(w.activations, 5 * 44 * 4 + 64 + 64 + 64 + 2 * 64);
    TH_EQ(w.workspace, (int64_t)kern_emb_update_ws_bytes(&be, 5, 4, 2));
    /* the step: gathered logits (5) on rank 0, the loss sum, 6 counts per rank */
    TH_EQ(w.alltoall, 5 * 4 + 8 + 6 * 8);
    /* batch block: header 128, numerical 5x8 floats (192 aligned), labels (64), ids
     * 5x2 (64): 448 bytes, held twice on rank 0 (host block and the step's) */
    TH_EQ(batch_bytes(5, 3, 2, NULL), 448);
    TH_EQ(w.data, 2 * 448);
    TH_EQ(w.eval, 2 * 100 * 4 + 16 * 100); /* logits, labels; the cpu metrics' sort */
    /* the backend's own, as it answers: the cpu holds nothing, and its largest call
     * buffer is the interaction's, per thread: one vector, one sample (n x d) padded
     * to VW columns and its gradient, and the forward's transposed sample (a row for
     * each of the VW padded columns, of n rounded up to VW); VW = 16 floats with
     * AVX-512, else 8 */
    int vw = 8;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        vw = 16;
#endif
    const char *simd = getenv("TR_CPU_SIMD"); /* as the kernel reads it */
    if (simd && strcmp(simd, "avx2") == 0)
        vw = 8;
    TH_EQ(w.backend, (vw + 2 * 3 * vw + vw * vw) * 4);
    TH_EQ(w.device, 0);
    TH_EQ(w.total, w.mlp + w.embeddings + w.activations + w.workspace + w.alltoall + w.data + w.eval + w.ckpt_staging +
                       w.backend);

    /* two column-wise workers: each holds 2 of the 4 columns; rank 1 sends its
     * columns of all 5 samples but receives only for its slice of 2 (rank 0 has 3) */
    j.columnwise_split = 1;
    j.data_parallel_bottom_mlp = 1;
    struct plan_worker w1;
    TH_EQ_ST_REQ(plan_worker_bytes(&j, &sh, &be, 2, 1, &w1), TR_OK);
    TH_EQ(w1.embeddings, (10 + 20) * 2 * 4);
    TH_EQ(w1.alltoall, 5 * (2 * 2) * 4 + 3 * (2 * 2) * 4 + 8 + 2 * 6 * 8);
    TH_EQ(w1.data, 448);
    /* synthetic splits kept by rank 0's reader count on rank 0 only, in its host memory */
    const struct plan_shape kept = {3, 2, rows2, 100, 1000, NULL};
    struct plan_worker k0, k1;
    TH_EQ_ST_REQ(plan_worker_bytes(&j, &kept, &be, 2, 0, &k0), TR_OK);
    TH_EQ_ST_REQ(plan_worker_bytes(&j, &kept, &be, 2, 1, &k1), TR_OK);
    TH_EQ(k0.data, 2 * 448 + 1000);
    TH_EQ(k1.data, 448);
    TH_EQ(w1.eval, 0);
    TH_EQ(w1.activations, 3 * 44 * 4 + 64 + 64 + 64 + 2 * 64); /* the largest slice: 3 samples */
    kern_backend_close(&be);
}

static void threads_rule(void)
{
    struct job_cfg j;
    memset(&j, 0, sizeof j);
    TH_EQ(plan_threads(&j, 16, 4), 4);
    TH_EQ(plan_threads(&j, 2, 4), 1);
    TH_EQ(plan_threads(&j, 16, 0), 16);
    j.threads = 3;
    TH_EQ(plan_threads(&j, 16, 4), 3);
}

/* The plan of a single worker is what the model and the step allocate. */
static void plan_is_allocation(void)
{
    struct kern_backend be;
    struct kern_backend_opts o = {.threads = 2, .device = -1, .local_rank = 0};
    TH_EQ_ST_REQ(kern_backend_open("cpu", &o, &be), TR_OK);
    struct job_cfg j;
    int64_t bottom[1], top[2];
    tiny_job(&j, bottom, top);
    j.optimizer = JOB_OPT_ADAGRAD;
    const struct plan_shape sh = {3, 2, rows2, 0, 0, NULL};
    struct plan_worker w;
    TH_EQ_ST_REQ(plan_worker_bytes(&j, &sh, &be, 1, 0, &w), TR_OK);
    struct tr_alloc_stats s0, s1;
    tr_alloc_get_stats(&s0);
    struct solo s;
    struct dlrm_cfg mc;
    dlrm_cfg_from_job(&j, sh.num_features, sh.ntables, sh.rows, NULL, &mc);
    TH_EQ_ST_REQ(solo_open(&s, &mc, &be, 0), TR_OK);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(5, 3, 2, NULL, &b), TR_OK);
    tr_alloc_get_stats(&s1);
    struct dlrm_bytes mb;
    dlrm_get_bytes(s.m, &mb);
    TH_EQ(w.embeddings + w.opt_state + w.mlp, mb.embeddings + mb.dense);
    TH_EQ(w.activations + w.workspace, mb.activations);
    /* everything planned is allocated; what is not planned is bookkeeping of a fixed
     * size (struct dlrm with its 32 layer slots, the step's argument arrays): about
     * 6 KiB here, the same for a model of a terabyte */
    const int64_t live = s1.live_bytes - s0.live_bytes;
    TH_CHECKF(live >= w.total && live - w.total < 16384, "allocated %lld bytes, planned %lld", (long long)live,
              (long long)w.total);
    batch_free(&b);
    solo_close(&s);
    kern_backend_close(&be);
}

/* Bags are counted: a table of hotness 3 holds 3 ids a sample in the batch blocks
 * and its offsets, and the update's workspace takes 3 ids a sample; the plan is
 * still what the model, the step and the block allocate. */
static void bags_counted(void)
{
    struct kern_backend be;
    struct kern_backend_opts o = {.threads = 2, .device = -1, .local_rank = 0};
    TH_EQ_ST_REQ(kern_backend_open("cpu", &o, &be), TR_OK);
    struct job_cfg j;
    int64_t bottom[1], top[2];
    tiny_job(&j, bottom, top);
    static const int32_t hot[2] = {0, 3};
    const struct plan_shape sh = {3, 2, rows2, 0, 0, hot};
    struct plan_worker w;
    TH_EQ_ST_REQ(plan_worker_bytes(&j, &sh, &be, 1, 0, &w), TR_OK);
    /* batch block: header 128, bag table 64, numerical 192, labels 64, ids 5 + 15 (128),
     * the offsets of table 1: 6 (64) = 640 bytes, twice on rank 0 */
    TH_EQ(batch_bytes(5, 3, 2, hot), 640);
    TH_EQ(w.data, 2 * 640);
    TH_EQ(w.workspace, (int64_t)kern_emb_update_ws_bytes(&be, 5 * 3, 4, 2));
    struct tr_alloc_stats s0, s1;
    tr_alloc_get_stats(&s0);
    struct solo s;
    struct dlrm_cfg mc;
    dlrm_cfg_from_job(&j, sh.num_features, sh.ntables, sh.rows, NULL, &mc);
    mc.hot = hot;
    TH_EQ_ST_REQ(solo_open(&s, &mc, &be, 0), TR_OK);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(5, 3, 2, hot, &b), TR_OK);
    tr_alloc_get_stats(&s1);
    const int64_t live = s1.live_bytes - s0.live_bytes;
    TH_CHECKF(live >= w.total && live - w.total < 16384, "allocated %lld bytes, planned %lld", (long long)live,
              (long long)w.total);
    batch_free(&b);
    solo_close(&s);
    kern_backend_close(&be);
}

static const struct th_case cases[] = {
    {"by_hand", by_hand},
    {"bags_counted", bags_counted},
    {"threads_rule", threads_rule},
    {"plan_is_allocation", plan_is_allocation},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
