/* worker.c: the training loop of terarec-worker: option table, validation,
 * model construction, the step loop with the seed's schedule, periodic
 * evaluation (exact AUC, log loss), console output and the DLLogger log.
 * It runs one process; the distributed layer wraps these same phases. */
#include "worker.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/version.h"
#include "../kernels/kern.h"
#include "../kernels/metrics.h"
#include "../loader_svc/dataset.h"
#include "comm.h"
#include "dist.h"
#include "hybrid.h"
#include "plan.h"
#include "shard.h"
#include "dllog.h"
#include "dlrm.h"
#include "sched.h"

/* "tf_raw" (seed v2) and "raw" (seed v1) name the same split-binary format */
static const char *const dataset_choices[] = {"synthetic", "split_binary", "tf_raw", "raw", NULL};
static const char *const optim_choices[] = {"sgd", "adagrad", NULL};
static const char *const ids_choices[] = {"powerlaw", "uniform", NULL};

void worker_opts_fill(struct worker_cfg *c, struct tr_opt o[WORKER_MAX_OPTS])
{
    const struct tr_opt t[] = {
        {"dataset_type", TR_OPT_ENUM, &c->dataset_type, "synthetic",
         "where samples come from (split_binary needs --dataset_path)", 1, 0, dataset_choices, NULL, 0},
        {"dataset_path", TR_OPT_STRING, &c->dataset_path, NULL,
         "directory of a split-binary dataset (train/, test/ and the feature spec)", 1, 0, NULL, NULL, 0},
        {"feature_spec", TR_OPT_STRING, &c->feature_spec, "feature_spec.yaml",
         "FeatureSpec file name inside --dataset_path", 1, 0, NULL, NULL, 0},
        {"synthetic_dataset_cardinalities", TR_OPT_INT_LIST, &c->cards, "26x1000",
         "rows of each embedding table (one per categorical feature)", 1, 2147483647.0, NULL, NULL, 0},
        {"synthetic_dataset_num_numerical_features", TR_OPT_INT, &c->num_numerical, "13",
         "numerical features per sample (0: no bottom MLP)", 0, 1024, NULL, NULL, 0},
        {"synthetic_dataset_train_batches", TR_OPT_INT64, &c->train_batches, "64008",
         "distinct training batches in one epoch", 1, 1e15, NULL, NULL, 0},
        {"synthetic_dataset_valid_batches", TR_OPT_INT64, &c->valid_batches, "1350",
         "validation batches in one evaluation", 0, 1e15, NULL, NULL, 0},
        {"synthetic_ids", TR_OPT_ENUM, &c->synthetic_ids, "powerlaw",
         "distribution of synthetic categorical ids", 1, 0, ids_choices, NULL, 0},
        {"batch_size", TR_OPT_INT64, &c->batch_size, "65536", "global training batch", 1, 1e9, NULL, NULL, 0},
        {"valid_batch_size", TR_OPT_INT64, &c->valid_batch_size, "0",
         "evaluation batch (0: same as --batch_size)", 0, 1e9, NULL, NULL, 0},
        {"embedding_dim", TR_OPT_INT, &c->embedding_dim, "128", "width D of every embedding", 1, 65536, NULL,
         NULL, 0},
        {"bottom_mlp_dims", TR_OPT_INT_LIST, &c->bottom, "512,256,128",
         "bottom MLP widths; the last must equal --embedding_dim", 1, 1e6, NULL, NULL, 0},
        {"top_mlp_dims", TR_OPT_INT_LIST, &c->top, "1024,1024,512,256,1", "top MLP widths; the last must be 1",
         1, 1e6, NULL, NULL, 0},
        {"optimizer", TR_OPT_ENUM, &c->optimizer, "sgd", "optimizer of embeddings and MLPs", 1, 0, optim_choices,
         NULL, 0},
        {"learning_rate", TR_OPT_DOUBLE, &c->learning_rate, "24", "base learning rate", 0, 1e6, NULL, NULL, 0},
        {"warmup_steps", TR_OPT_INT64, &c->warmup_steps, "8000", "linear warm-up steps (lr 0 at step 0)", 0,
         1e15, NULL, NULL, 0},
        {"decay_start_step", TR_OPT_INT64, &c->decay_start_step, "48000", "first step of the polynomial decay",
         0, 1e15, NULL, NULL, 0},
        {"decay_steps", TR_OPT_INT64, &c->decay_steps, "24000", "length of the decay (power 2)", 1, 1e15, NULL,
         NULL, 0},
        {"adagrad_initial_accumulator_value", TR_OPT_DOUBLE, &c->adagrad_init, "0.1",
         "Adagrad accumulator start value (Keras default)", 0, 1e6, NULL, NULL, 0},
        {"adagrad_epsilon", TR_OPT_DOUBLE, &c->adagrad_eps, "1e-7", "Adagrad epsilon (Keras default)", 0, 1,
         NULL, NULL, 0},
        {"epochs", TR_OPT_INT, &c->epochs, "1", "passes over the training batches", 1, 1e6, NULL, NULL, 0},
        {"max_steps", TR_OPT_INT64, &c->max_steps, "-1",
         "run exactly this many steps (-1: epochs x batches per epoch)", -1, 1e15, NULL, NULL, 0},
        {"auc_threshold", TR_OPT_DOUBLE, &c->auc_threshold, "0",
         "stop once an evaluation reaches this AUC (0: never; the MLPerf rule)", 0, 1, NULL, NULL, 0},
        {"evals_per_epoch", TR_OPT_INT, &c->evals_per_epoch, "1",
         "evaluations spread over each epoch (one more runs at the end if needed)", 0, 1e6, NULL, NULL, 0},
        {"print_freq", TR_OPT_INT64, &c->print_freq, "1000", "steps between progress lines and log records", 1,
         1e15, NULL, NULL, 0},
        {"benchmark_warmup_steps", TR_OPT_INT64, &c->benchmark_warmup_steps, "100",
         "steps left out of the throughput figure", 0, 1e15, NULL, NULL, 0},
        {"seed", TR_OPT_INT64, &c->seed, "12345", "seed of initialisation and synthetic data", 0, 9.2e18, NULL,
         NULL, 0},
        {"columnwise_split", TR_OPT_BOOL, &c->columnwise_split, "false",
         "split every table by columns over all workers (default: whole tables, the seed's placement)", 1, 0,
         NULL, "experimental_columnwise_split", 0},
        {"data_parallel_bottom_mlp", TR_OPT_BOOL, &c->data_parallel_bottom_mlp, "false",
         "run the bottom MLP on every worker's slice (required with --columnwise_split)", 1, 0, NULL, NULL, 0},
        {"dump_weights", TR_OPT_STRING, &c->dump_weights, NULL,
         "after training, write each worker's weights to DIR/rank<r>.bin (for tests)", 1, 0, NULL, NULL, 0},
        {"threads", TR_OPT_INT, &c->threads, "0",
         "CPU threads per worker (0: this node's CPUs divided among its workers)", 0, 4096,
         NULL, NULL, 0},
        {"log_path", TR_OPT_STRING, &c->log_path, "dlrm_tf_log.json",
         "DLLogger JSON-lines log ('' disables it)", 1, 0, NULL, NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0},
    };
    TR_ASSERT(TR_ARRAY_SIZE(t) <= WORKER_MAX_OPTS);
    memcpy(o, t, sizeof t);
}

/* Relations between the model flags and the data's shape (numerical features
 * and tables come from the dataset for split_binary). */
static enum tr_status check_model_flags(const struct worker_cfg *c, int num_features, int ntables,
                                        const char *source)
{
    if (ntables < 1 && num_features < 1) {
        LOG_ERROR("%s: no tables and no numerical features: nothing to train", source);
        return TR_ERR_ARG;
    }
    if (ntables > 1024) {
        LOG_ERROR("%s: %d tables; at most 1024 are supported", source, ntables);
        return TR_ERR_ARG;
    }
    if (num_features > 0) {
        if (c->bottom.n < 1 || c->bottom.n > DLRM_MAX_LAYERS) {
            LOG_ERROR("--bottom_mlp_dims: needs 1 to %d layers, got %d", DLRM_MAX_LAYERS, c->bottom.n);
            return TR_ERR_ARG;
        }
        if (c->bottom.v[c->bottom.n - 1] != c->embedding_dim) {
            LOG_ERROR("--bottom_mlp_dims: last width %lld must equal --embedding_dim %d",
                      (long long)c->bottom.v[c->bottom.n - 1], c->embedding_dim);
            LOG_HINT("the bottom MLP output joins the embeddings in the interaction, e.g. --bottom_mlp_dims "
                     "512,256,%d",
                     c->embedding_dim);
            return TR_ERR_ARG;
        }
    }
    return TR_OK;
}

enum tr_status worker_cfg_check(const struct worker_cfg *c)
{
    if (c->dataset_type != WORKER_DATA_SYNTHETIC && (!c->dataset_path || !*c->dataset_path)) {
        LOG_ERROR("--dataset_type split_binary needs --dataset_path");
        LOG_HINT("point --dataset_path at the output directory of 'terarec data prepare'");
        return TR_ERR_ARG;
    }
    if (c->top.n < 1 || c->top.n > DLRM_MAX_LAYERS || c->top.v[c->top.n - 1] != 1) {
        LOG_ERROR("--top_mlp_dims: needs 1 to %d layers and the last width must be 1 (the logit)",
                  DLRM_MAX_LAYERS);
        LOG_HINT("for example --top_mlp_dims 1024,1024,512,256,1");
        return TR_ERR_ARG;
    }
    if (c->dataset_type == WORKER_DATA_SYNTHETIC)
        return check_model_flags(c, c->num_numerical, c->cards.n, "--synthetic_dataset_cardinalities");
    return TR_OK;
}

/* A JSON number, or null for NaN and infinities (which JSON cannot hold). */
static json_t *json_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The PARAMETER record: every option's effective value. */
static json_t *params_json(struct tr_opt *opts, int threads)
{
    json_t *d = json_object();
    char buf[4096];
    for (struct tr_opt *o = opts; o->type != TR_OPT_END; o++) {
        tr_opt_format(o, buf, sizeof buf);
        switch (o->type) {
        case TR_OPT_INT: json_object_set_new(d, o->name, json_integer(*(int *)o->dst)); break;
        case TR_OPT_INT64: json_object_set_new(d, o->name, json_integer(*(int64_t *)o->dst)); break;
        case TR_OPT_DOUBLE: json_object_set_new(d, o->name, json_num(*(double *)o->dst)); break;
        case TR_OPT_BOOL: json_object_set_new(d, o->name, json_boolean(*(int *)o->dst)); break;
        case TR_OPT_INT_LIST: {
            json_t *a = json_array();
            const struct tr_i64_list *l = o->dst;
            for (int i = 0; i < l->n; i++)
                json_array_append_new(a, json_integer(l->v[i]));
            json_object_set_new(d, o->name, a);
            break;
        }
        default: json_object_set_new(d, o->name, json_string(buf)); break;
        }
    }
    json_object_set_new(d, "effective_threads", json_integer(threads));
    json_object_set_new(d, "terarec_version", json_string(tr_version()));
    json_object_set_new(d, "blas", json_string(kern_blas_info()));
    return d;
}

struct eval_out {
    double auc, logloss, seconds;
    int64_t samples;
};

/* Everything one run holds; released by run_release whatever happened. */
struct run {
    const struct worker_cfg *c;
    struct dist_info dist;
    struct comm comm;
    struct shard_plan plan;
    struct dataset ds;          /* opened on rank 0; other ranks hold its shape only */
    struct dlrm *m;
    struct hybrid *h;           /* NULL in a world of 1 */
    struct tr_batch train, valid;
    struct dllog log;
    float *scores, *labels;     /* (test samples) on rank 0 */
    int64_t *gcnt, *gdsp;       /* (world) logit gather counts */
    int threads;
    int64_t B, VB;
    double a2a_bytes, ar_bytes, a2a_sec, ar_sec; /* training steps only */
    char run_id[128];
};

/* Forward over the whole test split in batches of VB (the last one partial), the
 * logits gathered on rank 0, then exact AUC and log loss over every sample there;
 * the AUC is broadcast so every rank takes the same decisions. */
static enum tr_status evaluate(struct run *R, struct eval_out *out)
{
    const int64_t n = R->ds.nsamples[DS_TEST], VB = R->VB;
    const int W = R->dist.world, rank = R->dist.rank;
    double t0 = now_sec();
    memset(out, 0, sizeof *out);
    out->auc = NAN;
    if (n == 0)
        return TR_OK;
    for (int64_t first = 0, k = 0; first < n; first += VB, k++) {
        int64_t cnt = TR_MIN(VB, n - first);
        if (rank == 0)
            TR_CHECK(dataset_fill(&R->ds, DS_TEST, first, cnt, &R->valid));
        R->valid.n = cnt;
        R->valid.index = k;
        if (!R->h) {
            TR_CHECK(dlrm_forward(R->m, &R->valid));
            memcpy(R->scores + first, dlrm_logits(R->m), (size_t)cnt * sizeof(float));
            memcpy(R->labels + first, R->valid.labels, (size_t)cnt * sizeof(float));
            continue;
        }
        TR_CHECK(hybrid_bcast_batch(&R->comm, &R->valid));
        TR_CHECK(hybrid_forward(R->h, &R->valid));
        for (int q = 0; q < W; q++) {
            R->gdsp[q] = shard_slice_start(cnt, W, q);
            R->gcnt[q] = shard_slice_start(cnt, W, q + 1) - R->gdsp[q];
        }
        TR_CHECK(comm_gatherv(&R->comm, dlrm_logits(R->m), R->gcnt[rank], rank == 0 ? R->scores + first : NULL,
                              R->gcnt, R->gdsp, KERN_F32, 0));
        if (rank == 0)
            memcpy(R->labels + first, R->valid.labels, (size_t)cnt * sizeof(float));
    }
    double res[2] = {NAN, NAN};
    if (rank == 0) {
        TR_CHECK(kern_auc_exact(R->scores, R->labels, n, &res[0]));
        res[1] = kern_logloss(R->scores, R->labels, n);
    }
    if (R->h)
        TR_CHECK(comm_bcast(&R->comm, res, sizeof res, 0));
    out->auc = res[0];
    out->logloss = res[1];
    out->samples = n;
    out->seconds = now_sec() - t0;
    return TR_OK;
}

/* Steps within an epoch after which the seed evaluates:
 * round(linspace(0, nb - 1, evals + 1)[1:]). */
static int is_eval_step(int64_t step_in_epoch, int64_t nb, int evals)
{
    for (int e = 1; e <= evals; e++) {
        double p = (double)(nb - 1) * (double)e / (double)evals;
        if ((int64_t)llround(p) == step_in_epoch)
            return 1;
    }
    return 0;
}

/* Rank 0 opens the dataset; the others learn its shape (tables, cardinalities,
 * sample counts) by broadcast. A failure on rank 0 is broadcast too, so every
 * rank stops instead of waiting. */
static enum tr_status open_dataset(struct run *R)
{
    const struct worker_cfg *c = R->c;
    enum tr_status rc = TR_OK;
    if (R->dist.rank == 0) {
        if (c->dataset_type == WORKER_DATA_SYNTHETIC) {
            struct synth_cfg sc = {(uint64_t)c->seed, c->num_numerical, c->cards.n, c->cards.v,
                                   c->synthetic_ids == 1 ? SYNTH_IDS_UNIFORM : SYNTH_IDS_POWERLAW};
            rc = dataset_open_synthetic(&R->ds, &sc, c->train_batches * R->B, c->valid_batches * R->VB);
        } else {
            rc = dataset_open_split_binary(&R->ds, c->dataset_path, c->feature_spec);
        }
    }
    if (R->dist.world == 1)
        return rc;
    int64_t hdr[5] = {rc, R->ds.num_features, R->ds.ntables, R->ds.nsamples[0], R->ds.nsamples[1]};
    TR_CHECK(comm_bcast(&R->comm, hdr, sizeof hdr, 0));
    if (hdr[0] != TR_OK)
        return (enum tr_status)hdr[0];
    if (R->dist.rank != 0) {
        R->ds.num_features = (int)hdr[1];
        R->ds.ntables = (int)hdr[2];
        R->ds.nsamples[0] = hdr[3];
        R->ds.nsamples[1] = hdr[4];
        R->ds.cards = tr_malloc((size_t)(hdr[2] ? hdr[2] : 1) * sizeof(int64_t));
        R->ds.source = tr_strdup(c->dataset_type == WORKER_DATA_SYNTHETIC ? "synthetic" : c->dataset_path);
        if (!R->ds.cards || !R->ds.source)
            return TR_ERR_NOMEM; /* a rank that cannot hold a few bytes: the job aborts */
    }
    return comm_bcast(&R->comm, R->ds.cards, (int64_t)R->ds.ntables * (int64_t)sizeof(int64_t), 0);
}

/* Writes this rank's weights to DIR/rank<r>.bin (a debugging and test aid, not a
 * checkpoint): header {u32 magic 'TRWD', u32 version 1, u32 rank, u32 world,
 * u32 ntables, u32 0, u64 nparams}, the dense parameters, then per table held
 * {i32 id, i32 0, i64 rows, i64 col0, i64 width} and its rows. */
static enum tr_status dump_weights(const struct run *R, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%d.bin", dir, R->dist.rank);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        LOG_ERROR("cannot create '%s': %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    const struct dlrm *m = R->m;
    uint32_t h32[6] = {0x44575254u, 1, (uint32_t)R->dist.rank, (uint32_t)R->dist.world, (uint32_t)m->cfg.ntables, 0};
    uint64_t np = (uint64_t)m->nparams;
    int bad = fwrite(h32, sizeof h32, 1, fp) != 1 || fwrite(&np, sizeof np, 1, fp) != 1 ||
              fwrite(m->params, sizeof(float), (size_t)np, fp) != (size_t)np;
    for (int t = 0; t < m->cfg.ntables && !bad; t++) {
        const struct dlrm_table *tb = &m->tables[t];
        if (!tb->w)
            continue;
        int32_t id[2] = {t, 0};
        int64_t dims[3] = {tb->rows, tb->col0, tb->width};
        size_t cnt = (size_t)(tb->rows * tb->width);
        bad = fwrite(id, sizeof id, 1, fp) != 1 || fwrite(dims, sizeof dims, 1, fp) != 1 ||
              fwrite(tb->w, sizeof(float), cnt, fp) != cnt;
    }
    if (fclose(fp) != 0 || bad) {
        LOG_ERROR("cannot write '%s'", path);
        return TR_ERR_IO;
    }
    return TR_OK;
}

/* The allocator's peak on every rank next to the memory plan for the same job
 * (rank 0 gets both arrays as JSON in *out). */
static enum tr_status memory_report(struct run *R, const struct dlrm_cfg *mc, json_t **out)
{
    const int W = R->dist.world;
    struct tr_alloc_stats st;
    tr_alloc_get_stats(&st);
    int64_t *peaks = tr_calloc((size_t)W * 3, sizeof(int64_t));
    if (!peaks)
        return TR_ERR_NOMEM;
    int64_t *cnt = peaks + W, *dsp = peaks + 2 * W;
    for (int q = 0; q < W; q++) {
        cnt[q] = 1;
        dsp[q] = q;
    }
    enum tr_status rc = TR_OK;
    if (W > 1)
        rc = comm_gatherv(&R->comm, &st.peak_bytes, 1, peaks, cnt, dsp, KERN_I64, 0);
    else
        peaks[0] = st.peak_bytes;
    if (rc == TR_OK && R->dist.rank == 0) {
        struct plan_in in;
        memset(&in, 0, sizeof in);
        in.ntables = mc->ntables;
        in.cards = mc->cards;
        in.num_features = mc->num_features;
        in.emb_dim = mc->emb_dim;
        in.nbottom = mc->nbottom;
        memcpy(in.bottom, mc->bottom, sizeof in.bottom);
        in.ntop = mc->ntop;
        memcpy(in.top, mc->top, sizeof in.top);
        in.optim = mc->optim;
        in.batch = R->B;
        in.valid_batch = R->VB;
        in.test_samples = R->ds.nsamples[DS_TEST];
        in.world = W;
        in.columnwise = R->c->columnwise_split;
        in.dp_bottom = R->c->data_parallel_bottom_mlp;
        in.threads = R->threads;
        json_t *m = json_object(), *pk = json_array(), *pl = json_array();
        for (int q = 0; q < W && rc == TR_OK; q++) {
            struct plan_worker pw;
            rc = plan_worker_bytes(&in, q, &pw);
            json_array_append_new(pk, json_integer(peaks[q]));
            json_array_append_new(pl, json_integer(pw.total));
            if (q == 0)
                LOG_RANK0("memory: rank 0 peak %.1f MiB allocated by terarec, plan %.1f MiB", peaks[0] / 1048576.0,
                          pw.total / 1048576.0);
        }
        json_object_set_new(m, "peak_bytes", pk);
        json_object_set_new(m, "plan_bytes", pl);
        *out = m;
    }
    tr_free(peaks);
    return rc;
}

static void run_release(struct run *R)
{
    hybrid_free(&R->h);
    dlrm_free(&R->m);
    tr_batch_release(&R->train);
    tr_batch_release(&R->valid);
    dataset_close(&R->ds);
    dllog_close(&R->log);
    tr_free(R->scores);
    tr_free(R->labels);
    tr_free(R->gcnt);
    shard_plan_release(&R->plan);
    comm_close(&R->comm);
    dist_finalize(&R->dist);
}

static enum tr_status run(struct run *R, struct worker_result *res)
{
    const struct worker_cfg *c = R->c;
    enum tr_status rc = TR_OK;
    TR_CHECK(dist_init(&R->dist));
    tr_log_set_rank(R->dist.world > 1 ? R->dist.rank : -1);
    /* a run id made by rank 0 and shared through PMIx (Put/Commit/Fence/Get): the
     * path an NCCL unique id takes on GPU backends, exercised by every run */
    if (R->dist.rank == 0)
        snprintf(R->run_id, sizeof R->run_id, "%s-%ld-%lld", R->dist.host, (long)getpid(), (long long)time(NULL));
    TR_CHECK(dist_share_blob(&R->dist, "run_id", 0, R->run_id, (int)sizeof R->run_id));
    TR_CHECK(comm_open(&R->dist, &R->comm));
    const int W = R->dist.world, rank = R->dist.rank;
    LOG_INFO(INIT, "run %s: rank %d of %d (local %d of %d) on node %d of %d, host %s", R->run_id, rank, W,
             R->dist.local_rank, R->dist.local_world, R->dist.node, R->dist.nnodes, R->dist.host);
    /* threads: as asked, else this node's CPUs shared by its workers */
    R->threads = c->threads > 0 ? c->threads : TR_MAX(1, kern_cpu_count() / TR_MAX(1, R->dist.local_world));
    struct kern_backend be;
    kern_backend_cpu(&be, R->threads);
    R->B = c->batch_size;
    R->VB = c->valid_batch_size ? c->valid_batch_size : c->batch_size;
    const int64_t B = R->B, VB = R->VB;

    TR_CHECK(open_dataset(R));
    struct dataset *ds = &R->ds;
    TR_CHECK(check_model_flags(c, ds->num_features, ds->ntables, ds->source));
    /* the seed drops the last partial training batch; a dataset smaller than one
     * batch would train zero steps (seed issue #1316): refuse it */
    const int64_t nb = ds->nsamples[DS_TRAIN] / B;
    if (nb < 1) {
        LOG_ERROR("%s: %lld training samples, fewer than one batch of --batch_size %lld", ds->source,
                  (long long)ds->nsamples[DS_TRAIN], (long long)B);
        LOG_HINT("lower --batch_size or use a larger dataset");
        return TR_ERR_ARG;
    }
    TR_CHECK(shard_plan_make(&R->plan, c->columnwise_split ? SHARD_COLUMNWISE : SHARD_TABLEWISE, W, rank,
                             ds->ntables, ds->cards, c->embedding_dim, ds->num_features > 0,
                             c->data_parallel_bottom_mlp));

    struct dlrm_cfg mc = {0};
    mc.num_features = ds->num_features;
    mc.ntables = ds->ntables;
    mc.cards = ds->cards;
    mc.emb_dim = c->embedding_dim;
    mc.nbottom = ds->num_features > 0 ? c->bottom.n : 0;
    for (int l = 0; l < mc.nbottom; l++)
        mc.bottom[l] = (int)c->bottom.v[l];
    mc.ntop = c->top.n;
    for (int l = 0; l < mc.ntop; l++)
        mc.top[l] = (int)c->top.v[l];
    mc.optim = c->optimizer == WORKER_OPT_ADAGRAD ? KERN_OPT_ADAGRAD : KERN_OPT_SGD;
    mc.adagrad_init = (float)c->adagrad_init;
    mc.adagrad_eps = (float)c->adagrad_eps;
    mc.seed = (uint64_t)c->seed;
    mc.max_global = TR_MAX(B, VB);
    mc.max_batch = shard_slice_start(mc.max_global, W, 1); /* the largest slice is the first */
    mc.plan = &R->plan;

    const struct lr_sched sched = {c->learning_rate, c->warmup_steps, c->decay_start_step, c->decay_steps};
    const int64_t total = c->max_steps >= 0 ? c->max_steps : (int64_t)c->epochs * nb;
    if (rank == 0)
        lr_sched_check(&sched, total);

    TR_CHECK(dllog_open(&R->log, rank == 0 ? c->log_path : NULL));
    {
        struct worker_cfg tmp = *c; /* a table bound to a copy: it is only read, never released */
        struct tr_opt o[WORKER_MAX_OPTS];
        worker_opts_fill(&tmp, o);
        json_t *pj = params_json(o, R->threads);
        json_t *cj = json_array();
        for (int t = 0; t < ds->ntables; t++)
            json_array_append_new(cj, json_integer(ds->cards[t]));
        json_object_set_new(pj, "table_cardinalities", cj);
        json_object_set_new(pj, "train_samples", json_integer(ds->nsamples[DS_TRAIN]));
        json_object_set_new(pj, "test_samples", json_integer(ds->nsamples[DS_TEST]));
        json_object_set_new(pj, "world_size", json_integer(W));
        json_object_set_new(pj, "run_id", json_string(R->run_id));
        TR_CHECK(dllog_write(&R->log, json_string("PARAMETER"), pj));
    }

    double t_init = now_sec();
    TR_CHECK(dlrm_new(&mc, &be, &R->m));
    struct dlrm *m = R->m;
    if (W > 1)
        TR_CHECK(hybrid_new(m, &R->comm, &R->plan, mc.max_global, &R->h));
    {
        struct dlrm_bytes mb;
        dlrm_get_bytes(m, &mb);
        int64_t rows = 0;
        for (int t = 0; t < mc.ntables; t++)
            rows += mc.cards[t];
        LOG_RANK0("data: %s, %lld train samples (%lld batches of %lld), %lld test samples", ds->source,
                  (long long)ds->nsamples[DS_TRAIN], (long long)nb, (long long)B, (long long)ds->nsamples[DS_TEST]);
        LOG_RANK0("model: %d tables, %lld embedding rows, dim %d, %lld dense parameters; rank 0 memory: embeddings "
                  "%.1f MiB, dense %.1f MiB, activations %.1f MiB; init %.2f s; %d worker(s) %s, %d thread(s) each, "
                  "blas %s",
                  mc.ntables, (long long)rows, mc.emb_dim, (long long)m->nparams, mb.embeddings / 1048576.0,
                  mb.dense / 1048576.0, mb.activations / 1048576.0, now_sec() - t_init, W,
                  W == 1 ? "" : c->columnwise_split ? "column-wise" : "table-wise", R->threads, kern_blas_info());
    }
    TR_CHECK(tr_batch_init(&R->train, B, ds->num_features, ds->ntables));
    TR_CHECK(tr_batch_init(&R->valid, VB, ds->num_features, ds->ntables));
    const int64_t ntest = ds->nsamples[DS_TEST];
    R->gcnt = tr_calloc((size_t)W * 2, sizeof(int64_t));
    if (!R->gcnt)
        return TR_ERR_NOMEM;
    R->gdsp = R->gcnt + W;
    if (rank == 0 && ntest > 0) {
        R->scores = tr_malloc((size_t)ntest * sizeof(float));
        R->labels = tr_malloc((size_t)ntest * sizeof(float));
        if (!R->scores || !R->labels)
            return TR_ERR_NOMEM;
    }

    double t_run0 = now_sec(), t_timed = 0.0, t_data = 0.0, interval_loss = 0.0;
    int64_t timed_steps = 0, interval_n = 0;
    for (int64_t s = 0; s < total; s++) {
        int64_t k = s % nb;
        double ts0 = now_sec();
        if (rank == 0)
            TR_CHECK(dataset_fill(ds, DS_TRAIN, k * B, B, &R->train));
        R->train.n = B;
        R->train.index = k;
        if (R->h)
            TR_CHECK(hybrid_bcast_batch(&R->comm, &R->train));
        double ts1 = now_sec();
        float lr = (float)lr_sched_at(&sched, s);
        double loss = 0.0;
        if (R->h) {
            struct comm_stat a0 = R->comm.stat[COMM_ALLTOALL], r0 = R->comm.stat[COMM_ALLREDUCE];
            TR_CHECK(hybrid_train_step(R->h, &R->train, lr, &loss));
            R->a2a_bytes += (double)(R->comm.stat[COMM_ALLTOALL].bytes - a0.bytes);
            R->ar_bytes += (double)(R->comm.stat[COMM_ALLREDUCE].bytes - r0.bytes);
            R->a2a_sec += R->comm.stat[COMM_ALLTOALL].seconds - a0.seconds;
            R->ar_sec += R->comm.stat[COMM_ALLREDUCE].seconds - r0.seconds;
        } else
            TR_CHECK(dlrm_train_step(m, &R->train, lr, &loss));
        double ts2 = now_sec();
        if (!isfinite(loss)) {
            LOG_ERROR("step %lld: loss is %f; training diverged", (long long)s, loss);
            LOG_HINT("lower --learning_rate or lengthen --warmup_steps");
            return TR_ERR_INTERNAL;
        }
        t_data += ts1 - ts0;
        if (s >= c->benchmark_warmup_steps || total <= c->benchmark_warmup_steps) {
            t_timed += ts2 - ts0;
            timed_steps++;
        }
        if (s == 0)
            res->first_loss = loss;
        interval_loss += loss;
        interval_n++;
        res->steps = s + 1;
        if ((s + 1) % c->print_freq == 0 || s + 1 == total) {
            double mean = interval_loss / (double)interval_n;
            double step_ms = 1e3 * (ts2 - ts0);
            LOG_RANK0("step=%lld, throughput=%.3fM, step_time=%.3f ms, learning_rate=%.4f, loss=%.8f,",
                      (long long)(s + 1), (double)B / (ts2 - ts0) / 1e6, step_ms, lr, mean);
            json_t *d = json_object();
            json_object_set_new(d, "loss", json_num(mean));
            json_object_set_new(d, "learning_rate", json_num(lr));
            json_object_set_new(d, "step_time_ms", json_num(step_ms));
            TR_CHECK(dllog_write(&R->log, json_integer(s + 1), d));
            res->last_loss = mean;
            interval_loss = 0.0;
            interval_n = 0;
        }
        int eval_now = c->evals_per_epoch > 0 && is_eval_step(k, nb, c->evals_per_epoch);
        if ((eval_now || s + 1 == total) && ntest > 0) {
            struct eval_out ev;
            TR_CHECK(evaluate(R, &ev));
            res->last_auc = ev.auc;
            res->last_logloss = ev.logloss;
            if (isnan(res->best_auc) || ev.auc > res->best_auc)
                res->best_auc = ev.auc;
            LOG_RANK0("validation: step=%lld, auc=%.6f, logloss=%.6f, samples=%lld, eval_time=%.3f s",
                      (long long)(s + 1), ev.auc, ev.logloss, (long long)ev.samples, ev.seconds);
            json_t *d = json_object();
            json_object_set_new(d, "auc", json_num(ev.auc));
            json_object_set_new(d, "logloss", json_num(ev.logloss));
            json_object_set_new(d, "eval_samples", json_integer(ev.samples));
            TR_CHECK(dllog_write(&R->log, json_integer(s + 1), d));
            if (c->auc_threshold > 0 && ev.auc >= c->auc_threshold) {
                LOG_RANK0("auc %.6f reached --auc_threshold %.6f at step %lld: stopping", ev.auc, c->auc_threshold,
                          (long long)(s + 1));
                res->reached_threshold = 1;
                break;
            }
        }
    }
    res->mean_step_ms = timed_steps ? 1e3 * t_timed / (double)timed_steps : NAN;
    res->throughput = t_timed > 0 ? (double)B * (double)timed_steps / t_timed : NAN;
    LOG_RANK0("Training run completed, elapsed: %.0f [s]", now_sec() - t_run0);
    {
        const double per = res->steps ? 1e3 / (double)res->steps : 0.0;
        char phases[640];
        size_t o = 0;
        for (int p = 0; p < DLRM_T_COUNT_ && o < sizeof phases; p++)
            o += (size_t)snprintf(phases + o, sizeof phases - o, "%s%s=%.2f", p ? " " : "", dlrm_phase_name(p),
                                  per * m->t[p]);
        if (R->h && o < sizeof phases)
            snprintf(phases + o, sizeof phases - o, " exchange=%.2f pack=%.2f", per * R->h->t_exchange,
                     per * R->h->t_pack);
        LOG_RANK0("summary: steps=%lld, throughput=%.1f samples/s, mean_step_time_ms=%.3f, best_auc=%.6f; "
                  "ms/step: data=%.2f %s",
                  (long long)res->steps, res->throughput, res->mean_step_ms, res->best_auc, per * t_data, phases);
        json_t *d = json_object();
        json_object_set_new(d, "throughput", json_num(res->throughput));
        json_object_set_new(d, "mean_step_time_ms", json_num(res->mean_step_ms));
        json_object_set_new(d, "auc", json_num(res->best_auc));
        json_object_set_new(d, "steps", json_integer(res->steps));
        json_t *ph = json_object();
        json_object_set_new(ph, "data", json_num(per * t_data));
        for (int p = 0; p < DLRM_T_COUNT_; p++)
            json_object_set_new(ph, dlrm_phase_name(p), json_num(per * m->t[p]));
        if (R->h) {
            json_object_set_new(ph, "exchange", json_num(per * R->h->t_exchange));
            json_object_set_new(ph, "pack", json_num(per * R->h->t_pack));
            /* traffic of the training steps (evaluation excluded: counted before it) */
            json_t *cj = json_object();
            json_object_set_new(cj, "alltoall_bytes_per_step", json_num(R->a2a_bytes / (double)res->steps));
            json_object_set_new(cj, "allreduce_payload_bytes_per_step",
                                json_num(R->ar_bytes / (double)res->steps));
            json_object_set_new(cj, "alltoall_ms_per_step", json_num(per * R->a2a_sec));
            json_object_set_new(cj, "allreduce_ms_per_step", json_num(per * R->ar_sec));
            json_object_set_new(d, "comm", cj);
        }
        json_object_set_new(d, "phase_ms_per_step", ph);
        json_t *mem = NULL;
        TR_CHECK(memory_report(R, &mc, &mem));
        if (mem)
            json_object_set_new(d, "memory", mem);
        TR_CHECK(dllog_write(&R->log, NULL, d));
    }
    if (c->dump_weights && *c->dump_weights)
        TR_CHECK(dump_weights(R, c->dump_weights));
    return rc;
}

enum tr_status worker_run_ex(const struct worker_cfg *c, struct worker_result *res)
{
    memset(res, 0, sizeof *res);
    res->best_auc = res->last_auc = NAN;
    TR_CHECK(worker_cfg_check(c));
    struct run R;
    memset(&R, 0, sizeof R);
    R.c = c;
    enum tr_status rc = run(&R, res);
    run_release(&R);
    return rc;
}

enum tr_status worker_run(const struct worker_cfg *c)
{
    struct worker_result r;
    return worker_run_ex(c, &r);
}
