/* plan_cmd.c: `terarec plan`: per-worker memory of a training job for a model,
 * its table cardinalities and a cluster shape, computed by the trainer's own
 * sizing code (worker/plan.c); refuses (exit 1, naming the worker and the
 * overflow) when a worker would not fit its memory. It does not look at the
 * machine it runs on. */
#include "plan_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/param.h"
#include "../loader_svc/feature_spec.h"
#include "../worker/plan.h"

/* Criteo Terabyte without a frequency threshold, the seed's "extra large" data
 * (882 million rows in all, 292 million in the largest table; the seed gives only
 * these two figures). Per-table counts are derived from peers.md section 7's
 * TorchRec list (frequency threshold 0, the closest published per-table counts):
 * tables under 1 M rows there are kept (their vocabularies are exhausted), the
 * largest (cat_19) is set to the seed's 292 M, and the other large tables are
 * scaled by one factor (4.599) so that the total is the seed's 882 M. */
static const int64_t criteo_tb_t0[26] = {210783335, 36746, 17245, 7413,      20243, 3,        7114,
                                         1441,      62,    134634691, 7230317, 345138,    10,       2209,
                                         11267,     128,   4,         974,     14,        292000000, 52045081,
                                         184391716, 452104, 12606,    104,     35};

struct plan_opts {
    struct tr_i64_list cards, bottom, top;
    char *preset, *dataset_path, *feature_spec;
    int64_t memory;
    int num_features, emb_dim, optimizer, nodes, per_node, columnwise, dp_bottom, threads, json;
    int64_t batch, valid_batch, test_samples;
};

static const char *const optim_choices[] = {"sgd", "adagrad", NULL};
static const char *const preset_choices[] = {"none", "criteo_tb_t0", NULL};

static double gib(int64_t b)
{
    return (double)b / 1073741824.0;
}

int plan_main(int argc, char **argv)
{
    struct plan_opts o;
    memset(&o, 0, sizeof o);
    int preset = 0;
    struct tr_opt opts[] = {
        {"preset", TR_OPT_ENUM, &preset, "none",
         "known cardinalities: criteo_tb_t0 (Criteo Terabyte, no frequency limit, 882 M rows)", 1, 0,
         preset_choices, NULL, 0},
        {"synthetic_dataset_cardinalities", TR_OPT_INT_LIST, &o.cards, NULL, "rows of each table", 1,
         9.2e18, NULL, "cardinalities", 0},
        {"dataset_path", TR_OPT_STRING, &o.dataset_path, NULL,
         "take cardinalities, numerical features and test size from this dataset", 1, 0, NULL, NULL, 0},
        {"feature_spec", TR_OPT_STRING, &o.feature_spec, "feature_spec.yaml", "FeatureSpec file in --dataset_path",
         1, 0, NULL, NULL, 0},
        {"synthetic_dataset_num_numerical_features", TR_OPT_INT, &o.num_features, "13", "numerical features", 0,
         1024, NULL, "num_numerical_features", 0},
        {"embedding_dim", TR_OPT_INT, &o.emb_dim, "128", "embedding width D", 1, 65536, NULL, NULL, 0},
        {"bottom_mlp_dims", TR_OPT_INT_LIST, &o.bottom, "512,256,128", "bottom MLP widths", 1, 1e6, NULL, NULL, 0},
        {"top_mlp_dims", TR_OPT_INT_LIST, &o.top, "1024,1024,512,256,1", "top MLP widths", 1, 1e6, NULL, NULL,
         0},
        {"optimizer", TR_OPT_ENUM, &o.optimizer, "sgd", "optimizer (adagrad doubles the state)", 1, 0,
         optim_choices, NULL, 0},
        {"batch_size", TR_OPT_INT64, &o.batch, "65536", "global training batch", 1, 1e12, NULL, NULL, 0},
        {"valid_batch_size", TR_OPT_INT64, &o.valid_batch, "0", "evaluation batch (0: --batch_size)", 0, 1e12,
         NULL, NULL, 0},
        {"test_samples", TR_OPT_INT64, &o.test_samples, "0", "samples in the test split (rank 0 keeps their logits)",
         0, 1e15, NULL, NULL, 0},
        {"nodes", TR_OPT_INT, &o.nodes, "1", "nodes", 1, 1e6, NULL, NULL, 0},
        {"workers_per_node", TR_OPT_INT, &o.per_node, "1", "workers (GPUs or CPU slots) per node", 1, 4096, NULL,
         "gpus_per_node", 0},
        {"memory_per_worker", TR_OPT_BYTES, &o.memory, "0", "memory limit of one worker, e.g. 73G (0: no limit)",
         0, 9.2e18, NULL, NULL, 0},
        {"columnwise_split", TR_OPT_BOOL, &o.columnwise, "false", "split every table by columns", 1, 0, NULL,
         "experimental_columnwise_split", 0},
        {"data_parallel_bottom_mlp", TR_OPT_BOOL, &o.dp_bottom, "false", "bottom MLP on every worker", 1, 0, NULL,
         NULL, 0},
        {"threads", TR_OPT_INT, &o.threads, "1", "CPU threads per worker", 1, 4096, NULL, NULL, 0},
        {"json", TR_OPT_BOOL, &o.json, "false", "print JSON instead of a table", 1, 0, NULL, NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0},
    };
    int want = 0, rc = 2;
    struct feature_spec fs = {0};
    struct fs_dlrm_split split = {0};
    struct plan_worker *w = NULL;
    if (tr_opt_parse(opts, argc, argv, NULL, &want) != TR_OK)
        goto exit;
    if (want & TR_OPT_WANT_HELP) {
        tr_opt_print_help(opts,
                          "usage: terarec plan [options]\n\nper-worker memory of a training job before anything is "
                          "allocated; exits 1 when a worker would not fit --memory_per_worker",
                          stdout);
        rc = 0;
        goto exit;
    }
    const int64_t limit = o.memory;
    const int64_t *cards = o.cards.v;
    int ntables = o.cards.n;
    int64_t test_samples = o.test_samples;
    if (preset == 1) {
        cards = criteo_tb_t0;
        ntables = 26;
    } else if (o.dataset_path) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", o.dataset_path, o.feature_spec);
        if (feature_spec_read(path, &fs) != TR_OK || feature_spec_dlrm_split(&fs, "train", &split) != TR_OK)
            goto exit;
        cards = split.cardinality;
        ntables = split.ncat;
        o.num_features = split.nnumerical;
    }
    if (ntables < 1 && o.num_features < 1) {
        LOG_ERROR("no tables: give --synthetic_dataset_cardinalities, --dataset_path or --preset");
        goto exit;
    }
    if (o.bottom.n > DLRM_MAX_LAYERS || o.top.n < 1 || o.top.n > DLRM_MAX_LAYERS ||
        (o.num_features > 0 && (o.bottom.n < 1 || o.bottom.v[o.bottom.n - 1] != o.emb_dim))) {
        LOG_ERROR("--bottom_mlp_dims / --top_mlp_dims: the bottom MLP must end in --embedding_dim %d and both "
                  "need 1 to %d layers",
                  o.emb_dim, DLRM_MAX_LAYERS);
        goto exit;
    }
    struct plan_in in;
    memset(&in, 0, sizeof in);
    in.ntables = ntables;
    in.cards = cards;
    in.num_features = o.num_features;
    in.emb_dim = o.emb_dim;
    in.nbottom = o.bottom.n;
    for (int l = 0; l < o.bottom.n; l++)
        in.bottom[l] = (int)o.bottom.v[l];
    in.ntop = o.top.n;
    for (int l = 0; l < o.top.n; l++)
        in.top[l] = (int)o.top.v[l];
    in.optim = o.optimizer ? KERN_OPT_ADAGRAD : KERN_OPT_SGD;
    in.batch = o.batch;
    in.valid_batch = o.valid_batch ? o.valid_batch : o.batch;
    in.test_samples = test_samples;
    in.world = o.nodes * o.per_node;
    in.columnwise = o.columnwise;
    in.dp_bottom = o.dp_bottom;
    in.threads = o.threads;
    w = tr_calloc((size_t)in.world, sizeof *w);
    if (!w) {
        rc = 1;
        goto exit;
    }
    int worst = 0, largest_table = 0;
    int64_t rows = 0;
    for (int t = 0; t < ntables; t++) {
        rows += cards[t];
        if (cards[t] > cards[largest_table])
            largest_table = t;
    }
    for (int r = 0; r < in.world; r++) {
        if (plan_worker_bytes(&in, r, &w[r]) != TR_OK)
            goto exit;
        if (w[r].total > w[worst].total)
            worst = r;
    }
    const int fits = limit == 0 || w[worst].total <= limit;
    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "world", json_integer(in.world));
        json_object_set_new(j, "mode", json_string(in.world == 1 ? "single" : o.columnwise ? "column-wise"
                                                                                          : "table-wise"));
        json_object_set_new(j, "embedding_rows", json_integer(rows));
        json_object_set_new(j, "largest_table", json_integer(largest_table));
        json_object_set_new(j, "memory_per_worker", json_integer(limit));
        json_object_set_new(j, "fits", json_boolean(fits));
        json_t *arr = json_array();
        for (int r = 0; r < in.world; r++) {
            json_t *e = json_object();
            json_object_set_new(e, "rank", json_integer(r));
            json_object_set_new(e, "tables", json_integer(w[r].tables_held));
            json_object_set_new(e, "embeddings", json_integer(w[r].embeddings));
            json_object_set_new(e, "optimizer_state", json_integer(w[r].opt_state));
            json_object_set_new(e, "mlp", json_integer(w[r].mlp));
            json_object_set_new(e, "activations", json_integer(w[r].activations));
            json_object_set_new(e, "workspace", json_integer(w[r].workspace));
            json_object_set_new(e, "alltoall", json_integer(w[r].alltoall));
            json_object_set_new(e, "data", json_integer(w[r].data));
            json_object_set_new(e, "eval", json_integer(w[r].eval));
            json_object_set_new(e, "total", json_integer(w[r].total));
            json_array_append_new(arr, e);
        }
        json_object_set_new(j, "workers", arr);
        char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        json_decref(j);
        if (s)
            puts(s);
        free(s);
    } else {
        printf("plan: %d tables, %lld embedding rows, dim %d, %s; %d node(s) x %d worker(s), %s, global batch %lld\n",
               ntables, (long long)rows, o.emb_dim, o.optimizer ? "adagrad" : "sgd", o.nodes, o.per_node,
               in.world == 1 ? "one worker" : o.columnwise ? "column-wise" : "table-wise", (long long)in.batch);
        printf("largest table: %d (%lld rows, %.2f GiB at dim %d)\n", largest_table,
               (long long)cards[largest_table], gib(cards[largest_table] * (int64_t)o.emb_dim * 4), o.emb_dim);
        printf("%5s %6s %12s %12s %10s %10s %10s %10s %9s %9s %12s\n", "rank", "tables", "embed GiB", "optstate GiB",
               "mlp MiB", "activ MiB", "wspace MiB", "a2a MiB", "data MiB", "eval MiB", "total GiB");
        for (int r = 0; r < in.world; r++)
            printf("%5d %6d %12.3f %12.3f %10.1f %10.1f %10.1f %10.1f %9.1f %9.1f %12.3f\n", r, w[r].tables_held,
                   gib(w[r].embeddings), gib(w[r].opt_state), w[r].mlp / 1048576.0, w[r].activations / 1048576.0,
                   w[r].workspace / 1048576.0, w[r].alltoall / 1048576.0, w[r].data / 1048576.0,
                   w[r].eval / 1048576.0, gib(w[r].total));
        if (limit)
            printf("largest worker: rank %d, %.3f GiB of %.3f GiB\n", worst, gib(w[worst].total), gib(limit));
        else
            printf("largest worker: rank %d, %.3f GiB\n", worst, gib(w[worst].total));
    }
    if (!fits) {
        LOG_ERROR("worker %d needs %.2f GiB, over --memory_per_worker %.2f GiB by %.2f GiB (embeddings %.2f GiB, "
                  "optimizer state %.2f GiB)",
                  worst, gib(w[worst].total), gib(limit), gib(w[worst].total - limit), gib(w[worst].embeddings),
                  gib(w[worst].opt_state));
        LOG_HINT("%s", o.columnwise ? "add workers, or use sgd (adagrad doubles the embedding memory)"
                                    : "try --columnwise_split: table-wise cannot split a table larger than a worker");
        rc = 1;
        goto exit;
    }
    if (!o.json)
        printf("fits: yes\n");
    rc = 0;
exit:
    tr_free(w);
    fs_dlrm_split_release(&split);
    feature_spec_release(&fs);
    tr_opt_release(opts);
    return rc;
}
