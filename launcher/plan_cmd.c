/* plan_cmd.c: `terarec plan`: per-worker memory of a training job for a model,
 * its table cardinalities and a cluster shape, computed by the trainer's own
 * sizing code (worker/plan.c); refuses (exit 1, naming the worker and the
 * overflow) when a worker would not fit its memory. It does not look at the
 * machine it runs on. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "plan_cmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/param.h"
#include "../loader_svc/dataset.h"
#include "../loader_svc/feature_spec.h"
#include "../worker/plan.h"

static double gib(int64_t b)
{
    return (double)b / 1073741824.0;
}

void plan_cmd_opts(struct plan_cmd_cfg *c, struct tr_opt o[PLAN_CMD_MAX_OPTS])
{
    int k = job_opts(&c->job, PLAN_CMD_JOB_GROUPS, o);
    /* the workers' --checkpoint_dir: a job that saves counts the host staging
     * copy of what each worker saves (the store is not opened) */
    k += job_store_opts(&c->checkpoint_dir, NULL, o + k);
    const struct tr_opt own[] = {
        {"test_samples", TR_OPT_INT64, &c->test_samples, "0",
         "samples in the test split (rank 0 keeps their logits)", 0, 1e15, NULL, NULL, 0, NULL, 0},
        {"nodes", TR_OPT_INT, &c->nodes, "1", "nodes", 1, 1e6, NULL, NULL, 0, NULL, 0},
        {"workers_per_node", TR_OPT_INT, &c->per_node, "1",
         "workers (GPUs or CPU slots) per node (default: --gpus_per_node when given, else 1)", 1, 4096, NULL, NULL,
         0, NULL, 0},
        {"memory_per_worker", TR_OPT_BYTES, &c->memory, "0",
         "memory of one worker, e.g. 73G: its backend's (GPU memory on cuda; host memory on the cpu) (0: no limit)",
         0, 9.2e18, NULL, NULL, 0, NULL, 0},
        {"host_memory_per_node", TR_OPT_BYTES, &c->host_memory, "0",
         "host memory of one node, e.g. 2T, that its workers share (0: no limit)", 0, 9.2e18, NULL, NULL, 0, NULL, 0},
        {"disk_per_node", TR_OPT_BYTES, &c->disk, "0",
         "local disk of one node for --table_store file:DIR's files (0: no limit)", 0, 9.2e18, NULL, NULL, 0, NULL,
         0},
        {"fit", TR_OPT_BOOL, &c->fit, "false",
         "choose --table_store (memory, host, file:DIR) and the largest --embedding_cache that fit the limits", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"json", TR_OPT_BOOL, &c->json, "false", "print JSON instead of a table", 1, 0, NULL, NULL, 0, NULL, 0},
        /* the old spelling of --checkpoint_dir here: a boolean, not a store */
        {"checkpoints", TR_OPT_BOOL, &c->checkpoints, "false",
         "count checkpoint staging as if --checkpoint_dir were given (the older spelling)", 1, 0, NULL, NULL, 0,
         NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0},
    };
    TR_ASSERT(k + (int)TR_ARRAY_SIZE(own) <= PLAN_CMD_MAX_OPTS);
    memcpy(o + k, own, sizeof own);
}

static void print_json(const struct plan_cmd_cfg *c, int world, int64_t rows, int largest_table, int fits,
                       const struct plan_worker *w)
{
    json_t *j = json_object();
    json_object_set_new(j, "table_store", json_string(c->job.table_store ? c->job.table_store : "memory"));
    json_object_set_new(j, "embedding_cache", json_string(c->job.embedding_cache ? c->job.embedding_cache : ""));
    json_object_set_new(j, "host_memory_per_node", json_integer(c->host_memory));
    json_object_set_new(j, "disk_per_node", json_integer(c->disk));
    json_object_set_new(j, "world", json_integer(world));
    json_object_set_new(j, "mode", json_string(world == 1 ? "single" : c->job.columnwise_split ? "column-wise"
                                                                                              : "table-wise"));
    json_object_set_new(j, "embedding_rows", json_integer(rows));
    json_object_set_new(j, "largest_table", json_integer(largest_table));
    json_object_set_new(j, "memory_per_worker", json_integer(c->memory));
    json_object_set_new(j, "fits", json_boolean(fits));
    json_t *arr = json_array();
    for (int r = 0; r < world; r++) {
        json_t *e = json_object();
        json_object_set_new(e, "rank", json_integer(r));
        json_object_set_new(e, "tables", json_integer(w[r].tables_held));
        json_object_set_new(e, "embeddings", json_integer(w[r].embeddings));
        json_object_set_new(e, "optimizer_state", json_integer(w[r].opt_state));
        json_object_set_new(e, "mlp", json_integer(w[r].mlp));
        json_object_set_new(e, "dense_params", json_integer(w[r].dense_params));
        json_object_set_new(e, "activations", json_integer(w[r].activations));
        json_object_set_new(e, "workspace", json_integer(w[r].workspace));
        json_object_set_new(e, "alltoall", json_integer(w[r].alltoall));
        json_object_set_new(e, "data", json_integer(w[r].data));
        json_object_set_new(e, "eval", json_integer(w[r].eval));
        json_object_set_new(e, "checkpoint_staging", json_integer(w[r].ckpt_staging));
        json_object_set_new(e, "tables_tiered", json_integer(w[r].tables_tiered));
        json_object_set_new(e, "tier_host", json_integer(w[r].tier_host));
        json_object_set_new(e, "tier_disk", json_integer(w[r].tier_disk));
        json_object_set_new(e, "host", json_integer(w[r].host));
        json_object_set_new(e, "total", json_integer(w[r].total));
        json_object_set_new(e, "backend", json_integer(w[r].backend));
        if (w[r].device > 0)
            json_object_set_new(e, "device", json_integer(w[r].device));
        json_array_append_new(arr, e);
    }
    json_object_set_new(j, "workers", arr);
    char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (s)
        puts(s);
    free(s);
}

static void print_table(const struct plan_cmd_cfg *c, int world, int threads, const char *backend,
                        const struct plan_shape *sh, int64_t rows, int largest_table, const struct plan_worker *w,
                        int worst)
{
    const struct job_cfg *job = &c->job;
    printf("plan: %d tables, %lld embedding rows, dim %d, %s; %d node(s) x %d worker(s), %s, global batch %lld; "
           "backend %s, %d thread(s) per worker\n",
           sh->ntables, (long long)rows, job->embedding_dim, job_optim_name(job->optimizer), c->nodes,
           c->per_node, world == 1 ? "one worker" : job->columnwise_split ? "column-wise" : "table-wise",
           (long long)job->batch_size, backend, threads);
    printf("largest table: %d (%lld rows, %.2f GiB at dim %d)\n", largest_table, (long long)sh->rows[largest_table],
           gib(sh->rows[largest_table] * (int64_t)job->embedding_dim * 4), job->embedding_dim);
    printf("%5s %6s %12s %12s %10s %10s %10s %10s %9s %9s %9s %12s\n", "rank", "tables", "embed GiB", "optstate GiB",
           "mlp MiB", "activ MiB", "wspace MiB", "a2a MiB", "data MiB", "eval MiB", "ckpt GiB", "total GiB");
    for (int r = 0; r < world; r++)
        printf("%5d %6d %12.3f %12.3f %10.1f %10.1f %10.1f %10.1f %9.1f %9.1f %9.3f %12.3f\n", r, w[r].tables_held,
               gib(w[r].embeddings), gib(w[r].opt_state), w[r].mlp / 1048576.0, w[r].activations / 1048576.0,
               w[r].workspace / 1048576.0, w[r].alltoall / 1048576.0, w[r].data / 1048576.0, w[r].eval / 1048576.0,
               gib(w[r].ckpt_staging), gib(w[r].total));
    const int64_t most = w[worst].device > 0 ? w[worst].device : w[worst].total; /* what --memory_per_worker limits */
    const char *of = w[worst].device > 0 ? " of GPU memory" : "";
    if (c->memory)
        printf("largest worker: rank %d, %.3f GiB%s of %.3f GiB\n", worst, gib(most), of, gib(c->memory));
    else
        printf("largest worker: rank %d, %.3f GiB%s\n", worst, gib(most), of);
    int dworst = 0;
    for (int r = 1; r < world; r++)
        if (w[r].device > w[dworst].device)
            dworst = r;
    int tiered = 0;
    for (int r = 0; r < world; r++)
        tiered |= w[r].tables_tiered > 0;
    if (tiered) {
        printf("table store %s, --embedding_cache %s: embeddings and optimizer state above are the caches of the "
               "tables held in it\n",
               job->table_store, job->embedding_cache);
        printf("%5s %7s %14s %13s %13s\n", "rank", "tiered", "tier host GiB", "disk GiB", "host GiB");
        for (int r = 0; r < world; r++)
            printf("%5d %7d %14.3f %13.3f %13.3f\n", r, w[r].tables_tiered, gib(w[r].tier_host), gib(w[r].tier_disk),
                   gib(w[r].host));
    }
    if (w[dworst].device > 0) /* the cuda backend: what each GPU holds */
        printf("GPU memory: rank %d holds the most, %.3f GiB (embeddings %.3f, optimizer state %.3f, MLPs %.3f, "
               "activations and buffers %.3f, backend %.3f; the CUDA context comes on top)\n",
               dworst, gib(w[dworst].device), gib(w[dworst].embeddings), gib(w[dworst].opt_state),
               gib(w[dworst].mlp),
               gib(w[dworst].device - w[dworst].embeddings - w[dworst].opt_state - w[dworst].mlp -
                   w[dworst].backend),
               gib(w[dworst].backend));
}

/* The tables and numerical features to plan for: a preset, a dataset's
 * FeatureSpec, or the flags (which must then name the tables). */
static enum tr_status plan_shape_of(const struct plan_cmd_cfg *c, struct tr_opt *opts, struct feature_spec *fs,
                                    struct feature_spec_split *split, struct plan_shape *sh)
{
    const struct job_cfg *job = &c->job;
    /* the three sources of tables exclude each other (--preset criteo_tb_t0 gives
     * only tables, job_check refuses it beside the others), and a dataset's spec
     * gives its numerical features too */
    if (job->preset == JOB_PRESET_CRITEO_TB_T0) {
        TR_CHECK(tr_opt_exclusive(opts, "preset", "synthetic_dataset_cardinalities",
                                  "--preset criteo_tb_t0 gives the tables; drop one of them"));
        TR_CHECK(tr_opt_exclusive(opts, "preset", "dataset_path",
                                  "--preset criteo_tb_t0 and a dataset each give the tables; drop one"));
        TR_CHECK(tr_opt_exclusive(opts, "preset", "feature_spec", "--feature_spec names a file in --dataset_path"));
    }
    TR_CHECK(tr_opt_exclusive(opts, "dataset_path", "synthetic_dataset_cardinalities",
                              "the dataset's feature spec gives the tables; drop one of them"));
    TR_CHECK(tr_opt_exclusive(opts, "dataset_path", "synthetic_dataset_num_numerical_features",
                              "the dataset's feature spec gives the numerical features; drop one of them"));
    if (tr_opt_given(opts, "feature_spec") && !job->dataset_path) {
        LOG_ERROR("--feature_spec needs --dataset_path");
        LOG_HINT("--feature_spec names the FeatureSpec file inside --dataset_path");
        return TR_ERR_ARG;
    }
    if (job->dataset_type != JOB_DATA_SYNTHETIC && !job->dataset_path) {
        LOG_ERROR("--dataset_type %s needs --dataset_path", tr_opt_find(opts, "dataset_type")->choices[job->dataset_type]);
        LOG_HINT("point --dataset_path at the output directory of 'terarec data prepare'");
        return TR_ERR_ARG;
    }
    if (job->dataset_path && tr_opt_given(opts, "dataset_type") && job->dataset_type == JOB_DATA_SYNTHETIC)
        return tr_opt_exclusive(opts, "dataset_path", "dataset_type",
                                "--dataset_path plans for that dataset; drop --dataset_type synthetic");
    sh->num_features = job->num_numerical;
    sh->test_samples = c->test_samples;
    if (job->dataset_path) {
        char *path;
        TR_CHECK(tr_file_join_to(job->dataset_path, job->feature_spec, &path));
        enum tr_status rc = feature_spec_read(path, fs);
        tr_free(path);
        TR_CHECK(rc);
        TR_CHECK(feature_spec_dlrm_split(fs, "train", split));
        sh->rows = split->rows;
        sh->hot = split->hot;
        sh->ntables = split->ntables;
        sh->num_features = split->nnumerical;
        return TR_OK;
    }
    if (tr_opt_find(opts, "synthetic_dataset_cardinalities")->set_by == 0 && job->preset == JOB_PRESET_NONE) {
        LOG_ERROR("no tables: give --synthetic_dataset_cardinalities, --dataset_path or --preset");
        return TR_ERR_ARG;
    }
    sh->rows = job->rows.v;
    sh->ntables = job->rows.n;
    return TR_OK;
}

/* Every worker's bytes of the job as c's flags say. */
static enum tr_status plan_all(const struct plan_cmd_cfg *c, const struct plan_shape *sh, const struct kern_backend *be,
                               int world, struct plan_worker *w)
{
    for (int r = 0; r < world; r++)
        TR_CHECK(plan_worker_bytes(&c->job, sh, be, world, r, &w[r]));
    return TR_OK;
}

/* What does not fit the limits: kind 0 nothing, 1 a worker's memory (the
 * backend's: w.device on a backend with memory of its own, else w.total), 2 a
 * node's host memory, 3 a node's disk; who the worker or node, need and limit in
 * bytes. With slack, the worker's own headroom (plan.h) is added to each need. */
struct verdict {
    int kind, who;
    int64_t need, limit;
};

static int64_t slacked(int64_t need, int slack)
{
    return slack ? need + PLAN_SLACK_BYTES + (int64_t)((double)need * PLAN_SLACK_FRACTION) : need;
}

static void judge(const struct plan_cmd_cfg *c, int world, const struct plan_worker *w, int own_memory, int slack,
                  struct verdict *v)
{
    memset(v, 0, sizeof *v);
    for (int r = 0; r < world && c->memory; r++) {
        const int64_t need = own_memory ? w[r].device : w[r].total;
        if (slacked(need, slack) > c->memory) {
            *v = (struct verdict){1, r, need, c->memory};
            return;
        }
    }
    for (int n = 0; n < c->nodes; n++) {
        int64_t host = 0, disk = 0;
        for (int r = n * c->per_node; r < (n + 1) * c->per_node && r < world; r++)
            host += w[r].host, disk += w[r].tier_disk;
        if (c->host_memory && slacked(host, slack) > c->host_memory) {
            *v = (struct verdict){2, n, host, c->host_memory};
            return;
        }
        if (c->disk && disk > c->disk) {
            *v = (struct verdict){3, n, disk, c->disk};
            return;
        }
    }
}

/* Replaces an option's string (owned by the table: tr_opt_release frees it). */
static enum tr_status set_text(char **dst, const char *text)
{
    char *d = text ? tr_strdup(text) : NULL;
    if (text && !d)
        return TR_ERR_NOMEM;
    tr_free(*dst);
    *dst = d;
    return TR_OK;
}

/* Plans the job with --embedding_cache f and judges it (with the workers' slack). */
static enum tr_status try_fraction(struct plan_cmd_cfg *c, const struct plan_shape *sh, const struct kern_backend *be,
                                   int world, struct plan_worker *w, double f, int *fits)
{
    char text[32];
    snprintf(text, sizeof text, "%.6f", f);
    TR_CHECK(set_text(&c->job.embedding_cache, text));
    TR_CHECK(plan_all(c, sh, be, world, w));
    struct verdict v;
    judge(c, world, w, !be->i->host_memory, 1, &v);
    *fits = v.kind == 0;
    return TR_OK;
}

/* --fit: where the tables live and their cache, the first that fits of: the
 * backend's memory, a cache over host memory (only where the backend's memory is
 * its own: on the cpu a host cache would hold the rows twice), a cache over a
 * local disk; or only the store --table_store names. Each cache is the largest
 * fraction of the tables' rows (to 1e-6) that fits. c's flags are left as chosen
 * and w holds their plan; *chosen says whether any fits. */
static enum tr_status fit(struct plan_cmd_cfg *c, struct tr_opt *opts, const struct plan_shape *sh,
                          const struct kern_backend *be, int world, struct plan_worker *w, int *chosen)
{
    const char *stores[3];
    int n = 0;
    char given[TR_OPT_PATH_MAX + 8] = "";
    if (tr_opt_given(opts, "table_store")) {
        snprintf(given, sizeof given, "%s", c->job.table_store);
        stores[n++] = given;
    } else {
        stores[n++] = "memory";
        if (!be->i->host_memory)
            stores[n++] = "host";
        stores[n++] = "file:DIR";
    }
    *chosen = 0;
    for (int k = 0; k < n && !*chosen; k++) {
        TR_CHECK(set_text(&c->job.table_store, stores[k]));
        if (!strcmp(stores[k], "memory")) {
            TR_CHECK(set_text(&c->job.embedding_cache, NULL));
            TR_CHECK(plan_all(c, sh, be, world, w));
            struct verdict v;
            judge(c, world, w, !be->i->host_memory, 1, &v);
            *chosen = v.kind == 0;
            continue;
        }
        /* the largest fraction that fits: the plan grows with it */
        int ok = 0;
        TR_CHECK(try_fraction(c, sh, be, world, w, 1e-6, &ok));
        if (!ok)
            continue;
        double lo = 1e-6, hi = 1.0;
        TR_CHECK(try_fraction(c, sh, be, world, w, hi, &ok));
        if (ok)
            lo = hi;
        while (hi - lo > 1e-6) {
            const double m = 0.5 * (lo + hi);
            TR_CHECK(try_fraction(c, sh, be, world, w, m, &ok));
            *(ok ? &lo : &hi) = m;
        }
        lo = floor(lo * 1e6) / 1e6;
        TR_CHECK(try_fraction(c, sh, be, world, w, lo, &ok));
        TR_ASSERT(ok);
        *chosen = 1;
    }
    return TR_OK;
}

int plan_cmd_main(int argc, char **argv)
{
    struct plan_cmd_cfg c;
    memset(&c, 0, sizeof c);
    struct tr_opt opts[PLAN_CMD_MAX_OPTS];
    plan_cmd_opts(&c, opts);
    const struct job_cfg *job = &c.job;
    int want = 0;
    enum tr_status rc = TR_OK;
    struct feature_spec fs = {0};
    struct feature_spec_split split = {0};
    struct plan_worker *w = NULL;
    struct kern_backend be = {0};
    int32_t *hot = NULL;
    TR_CHECK_GOTO(tr_opt_parse(opts, argc, argv, NULL, &want), rc, exit);
    if (want & TR_OPT_WANT_HELP) {
        tr_opt_print_help(opts,
                          "usage: terarec plan [options]\n\nper-worker memory of a training job before anything is "
                          "allocated; exits 1 when a worker would not fit --memory_per_worker",
                          stdout);
        goto exit;
    }
    /* --dataset_path alone: its files say which type (as the workers decide) */
    TR_CHECK_GOTO(job_infer_dataset_type(&c.job, NULL, NULL), rc, exit);
    TR_CHECK_GOTO(job_apply_preset(&c.job), rc, exit);
    c.job.ckpt_staging = c.checkpoints || (c.checkpoint_dir && *c.checkpoint_dir);
    /* --gpus_per_node (the workers' flag: one worker per GPU) gives the workers of a node */
    if (job->gpus_per_node > 0) {
        if (tr_opt_given(opts, "workers_per_node") && c.per_node != job->gpus_per_node) {
            LOG_ERROR("--workers_per_node %d and --gpus_per_node %d disagree: a worker per GPU", c.per_node,
                      job->gpus_per_node);
            LOG_HINT("give one of them");
            rc = TR_ERR_ARG;
            goto exit;
        }
        c.per_node = job->gpus_per_node;
    }
    struct plan_shape sh = {0};
    TR_CHECK_GOTO(plan_shape_of(&c, opts, &fs, &split, &sh), rc, exit);
    TR_CHECK_GOTO(job_check(job, JOB_DATA | JOB_MODEL), rc, exit);
    if (!job->dataset_path) { /* the synthetic tables' bags */
        if (!(hot = tr_calloc((size_t)(sh.ntables ? sh.ntables : 1), sizeof *hot))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        job_synthetic_hot(job, hot);
        sh.hot = hot;
    }
    if (!job->dataset_path && job->batch_size > 0 && job->train_batches <= INT64_MAX / job->batch_size &&
        job->test_batches <= INT64_MAX / job_test_batch(job)) {
        /* synthetic data small enough to keep (DATASET_CACHE_BYTES) is kept on the
         * first node: by the loader, or by rank 0 when it reads in-process */
        const int64_t n[2] = {job->train_batches * job->batch_size, job->test_batches * job_test_batch(job)};
        sh.source_cache = dataset_synthetic_cache_bytes(sh.num_features, sh.ntables, sh.hot, n, NULL);
    }
    TR_CHECK_GOTO(job_check(job, JOB_MODEL | JOB_PARALLEL), rc, exit);
    TR_CHECK_GOTO(job_check_shape(job, sh.num_features, sh.ntables, "the model"), rc, exit);
    const int world = c.nodes * c.per_node;
    /* the workers' backend, opened here only to ask its workspace sizes (a cuda
     * plan needs no GPU: it is made on login nodes) */
    const int threads = plan_threads(job, kern_cpu_count(), c.per_node);
    const int sizing_only = kern_backend_uses_device(job_backend_name(job->backend)) == 1;
    struct kern_backend_opts bo = plan_backend_opts(job, threads, 0, sizing_only);
    TR_CHECK_GOTO(kern_backend_open(job_backend_name(job->backend), &bo, &be), rc, exit);
    w = tr_calloc((size_t)world, sizeof *w);
    if (!w) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    int worst = 0, largest_table = 0;
    int64_t rows = 0;
    for (int t = 0; t < sh.ntables; t++) {
        rows += sh.rows[t];
        if (sh.rows[t] > sh.rows[largest_table])
            largest_table = t;
    }
    if (c.fit) {
        int chosen = 0;
        TR_CHECK_GOTO(fit(&c, opts, &sh, &be, world, w, &chosen), rc, exit);
        if (!chosen) {
            LOG_ERROR("--fit: no table store fits: the tables' least caches (two batches of ids a table) do not fit "
                      "--memory_per_worker, or their rows do not fit --host_memory_per_node or --disk_per_node");
            LOG_HINT("add workers or nodes, or lower --batch_size (the least cache holds two batches' ids)");
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        if (!c.json)
            printf("fit: --table_store %s%s%s\n", job->table_store, job->embedding_cache ? " --embedding_cache " : "",
                   job->embedding_cache ? job->embedding_cache : "");
    } else {
        TR_CHECK_GOTO(plan_all(&c, &sh, &be, world, w), rc, exit);
    }
    for (int r = 1; r < world; r++)
        if ((be.i->host_memory ? w[r].total : w[r].device) >
            (be.i->host_memory ? w[worst].total : w[worst].device))
            worst = r;
    struct verdict v;
    judge(&c, world, w, !be.i->host_memory, 0, &v);
    const int fits = v.kind == 0;
    if (c.json)
        print_json(&c, world, rows, largest_table, fits, w);
    else
        print_table(&c, world, threads, be.i->name, &sh, rows, largest_table, w, worst);
    if (v.kind == 1) {
        LOG_ERROR("worker %d needs %.2f GiB%s, over --memory_per_worker %.2f GiB by %.2f GiB (embeddings %.2f GiB, "
                  "optimizer state %.2f GiB)",
                  v.who, gib(v.need), be.i->host_memory ? "" : " of GPU memory", gib(c.memory), gib(v.need - c.memory),
                  gib(w[v.who].embeddings), gib(w[v.who].opt_state));
        LOG_HINT("%s", job->columnwise_split
                           ? "add workers, or use rowwise_adagrad (one accumulator per row) or sgd (adagrad doubles "
                             "the embedding memory), or a row cache: --table_store host or file:DIR (terarec plan --fit)"
                           : "try --columnwise_split: table-wise cannot split a table larger than a worker");
        rc = TR_ERR_NOMEM; /* the plan predicts that an allocation would fail */
    } else if (v.kind == 2 || v.kind == 3) {
        LOG_ERROR("node %d's workers need %.2f GiB of %s together, over %s %.2f GiB by %.2f GiB", v.who, gib(v.need),
                  v.kind == 2 ? "host memory" : "local disk for --table_store's files",
                  v.kind == 2 ? "--host_memory_per_node" : "--disk_per_node", gib(v.limit), gib(v.need - v.limit));
        LOG_HINT("%s", v.kind == 2 ? "--table_store file:DIR keeps the rows on a local disk; or add nodes"
                                   : "add nodes, or give file: a larger disk");
        rc = v.kind == 2 ? TR_ERR_NOMEM : TR_ERR_IO;
    } else if (!c.json) {
        printf("fits: yes\n");
    }
exit:
    kern_backend_close(&be);
    tr_free(w);
    tr_free(hot);
    feature_spec_split_release(&split);
    feature_spec_release(&fs);
    tr_opt_release(opts);
    return tr_status_exit_code(rc);
}
