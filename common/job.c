/* job.c: the job's option declarations (one table, tagged by group), the checks
 * between flags, and the dataset type a --dataset_path alone means (the only
 * place it looks at a file: whether the directory holds a dataset). It does not
 * read datasets: callers check the model against a dataset's shape with
 * job_check_shape. */
#define TR_SUBSYS TR_SUB_INIT
#include "job.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "check.h"
#include "file.h"
#include "log.h"

/* "tf_raw" (seed v2) and "raw" (seed v1) name the same split-binary format */
static const char *const dataset_choices[] = {"synthetic", "split_binary", "tf_raw", "raw", NULL};
static const char *const optim_choices[] = {"sgd", "adagrad", "rowwise_adagrad", NULL};
static const char *const ids_choices[] = {"powerlaw", "uniform", NULL};
static const char *const nonfinite_choices[] = {"error", "zero", NULL};
static const char *const interaction_choices[] = {"dot", "dcnv2", NULL};
static const char *const backend_choices[] = {"auto", "cpu", "cuda", NULL};
static const char *const amp_choices[] = {"off", "bf16", "fp16", NULL};
static const char *const comm_choices[] = {"auto", "nccl", "mpi", NULL}; /* enum comm_choice's order */
static const char *const lengths_choices[] = {"fixed", "variable", NULL};
static const char *const preset_choices[] = {"none", "dlrm_dcnv2_mlperf", "criteo_tb_t0", NULL}; /* enum job_preset */

struct job_decl {
    unsigned group;
    size_t off;        /* of the field in struct job_cfg */
    struct tr_opt opt; /* dst is set from off */
};

#define F(field) offsetof(struct job_cfg, field)
static const struct job_decl decls[] = {
    {JOB_DATA, F(dataset_type), {"dataset_type", TR_OPT_ENUM, NULL, "synthetic",
        "where samples come from (split_binary needs --dataset_path)", 1, 0, dataset_choices, NULL, 0, NULL,
        TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(dataset_path), {"dataset_path", TR_OPT_PATH, NULL, NULL,
        "directory of a split-binary dataset (train/, test/ and the feature spec)", 1, 0, NULL, NULL, 0, NULL,
        TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(feature_spec), {"feature_spec", TR_OPT_PATH, NULL, "feature_spec.yaml",
        "FeatureSpec file name inside --dataset_path", 1, 0, NULL, NULL, 0, NULL, TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(rows), {"synthetic_dataset_cardinalities", TR_OPT_INT_LIST, NULL, "26x1000",
        "rows of each embedding table (one per categorical feature)", 1, 2147483647.0, NULL, "cardinalities", 0, NULL,
        TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(num_numerical), {"synthetic_dataset_num_numerical_features", TR_OPT_INT, NULL, "13",
        "numerical features per sample (0: no bottom MLP)", 0, 1024, NULL, "num_numerical_features", 0, NULL,
        TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(train_batches), {"synthetic_dataset_train_batches", TR_OPT_INT64, NULL, "64008",
        "distinct training batches in one epoch", 1, 1e15, NULL, NULL, 0, NULL, TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(test_batches), {"synthetic_dataset_valid_batches", TR_OPT_INT64, NULL, "1350",
        "test batches in one evaluation", 0, 1e15, NULL, NULL, 0, NULL, TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(synthetic_ids), {"synthetic_ids", TR_OPT_ENUM, NULL, "powerlaw",
        "distribution of synthetic categorical ids", 1, 0, ids_choices, NULL, 0, NULL, TR_OPT_LOADER}},
    {JOB_DATA, F(multi_hot), {"synthetic_dataset_multi_hot_sizes", TR_OPT_INT_LIST, NULL, NULL,
        "ids per sample of each table (1: one-hot; e.g. MLPerf's 3,2,1,...; empty: every table one-hot)", 1, 65535,
        NULL, NULL, 0, NULL, TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(multi_hot_variable), {"synthetic_dataset_multi_hot_lengths", TR_OPT_ENUM, NULL, "fixed",
        "a multi-hot table of size h: h ids in every sample (fixed), or 0 to h, uniform (variable)", 1, 0,
        lengths_choices, NULL, 0, NULL, TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_DATA, F(nonfinite_inputs), {"nonfinite_inputs", TR_OPT_ENUM, NULL, "error",
        "NaN or inf in numerical.bin: stop naming the file and row, or replace with 0 and count them", 1, 0,
        nonfinite_choices, NULL, 0, NULL, TR_OPT_LOADER}},
    {JOB_DATA, F(shuffle_samples), {"shuffle_samples", TR_OPT_BOOL, NULL, "false",
        "train on a new permutation of the training samples every epoch (from --seed and the epoch)", 1, 0, NULL,
        NULL, 0, NULL, TR_OPT_LOADER}},
    {JOB_DATA, F(drop_last), {"drop_last", TR_OPT_BOOL, NULL, "false",
        "drop the last partial training batch of each epoch (the seed's rule; default: train it)", 1, 0, NULL, NULL,
        0, NULL, TR_OPT_LOADER}},
    {JOB_DATA, F(shuffle_batches), {"shuffle_batches", TR_OPT_BOOL, NULL, "false",
        "train on the batches in a new order every epoch (from --seed and the epoch; the seed's --batch_shuffle)", 1,
        0, NULL, "batch_shuffle", 0, NULL, TR_OPT_LOADER}},
    {JOB_DATA, F(start_position), {"start_position", TR_OPT_STRING, NULL, NULL,
        "where the training data starts: EPOCH:BATCH (a batch header's position) or a step number", 1, 0, NULL, NULL,
        0, NULL, TR_OPT_LOADER}},
    {JOB_BATCH, F(batch_size), {"batch_size", TR_OPT_INT64, NULL, "65536", "global training batch", 1, 1e9, NULL,
        NULL, 0, NULL, TR_OPT_LOADER}},
    {JOB_BATCH, F(test_batch_size), {"valid_batch_size", TR_OPT_INT64, NULL, "0",
        "evaluation batch (0: same as --batch_size)", 0, 1e9, NULL, NULL, 0, NULL, TR_OPT_LOADER}},
    {JOB_MODEL, F(embedding_dim), {"embedding_dim", TR_OPT_INT, NULL, "128", "width D of every embedding", 1,
        65536, NULL, NULL, 0, NULL, TR_OPT_SHAPES_JOB}},
    {JOB_MODEL, F(bottom), {"bottom_mlp_dims", TR_OPT_INT_LIST, NULL, "512,256,128",
        "bottom MLP widths; the last must equal --embedding_dim", 1, 1e6, NULL, NULL, 0, NULL, TR_OPT_SHAPES_JOB}},
    {JOB_MODEL, F(top), {"top_mlp_dims", TR_OPT_INT_LIST, NULL, "1024,1024,512,256,1",
        "top MLP widths; the last must be 1", 1, 1e6, NULL, NULL, 0, NULL, TR_OPT_SHAPES_JOB}},
    {JOB_MODEL, F(optimizer), {"optimizer", TR_OPT_ENUM, NULL, "sgd",
        "optimizer of embeddings and MLPs (adagrad doubles the state; rowwise_adagrad keeps one accumulator per "
        "embedding row and element-wise Adagrad for the MLPs)", 1, 0, optim_choices, NULL, 0, NULL, 0}},
    {JOB_MODEL, F(adagrad_init), {"adagrad_initial_accumulator_value", TR_OPT_DOUBLE, NULL, "0.1",
        "Adagrad accumulator start value (Keras default)", 0, 1e6, NULL, NULL, 0, NULL, 0}},
    {JOB_MODEL, F(adagrad_eps), {"adagrad_epsilon", TR_OPT_DOUBLE, NULL, "1e-7", "Adagrad epsilon (Keras default)",
        0, 1, NULL, NULL, 0, NULL, 0}},
    {JOB_MODEL, F(interaction), {"interaction", TR_OPT_ENUM, NULL, "dot",
        "feature interaction: dot (pairwise dot products, DLRM v1) or dcnv2 (low-rank cross layers, DLRM v2)", 1,
        0, interaction_choices, NULL, 0, NULL, TR_OPT_SHAPES_JOB}},
    {JOB_MODEL, F(dcn_num_layers), {"dcn_num_layers", TR_OPT_INT, NULL, "3",
        "cross layers of --interaction dcnv2", 1, JOB_MAX_LAYERS, NULL, NULL, 0, NULL, TR_OPT_SHAPES_JOB}},
    {JOB_MODEL, F(dcn_low_rank_dim), {"dcn_low_rank_dim", TR_OPT_INT, NULL, "512",
        "rank of each cross layer's weight (V: n*D -> r, U: r -> n*D) with --interaction dcnv2", 1, 65536, NULL,
        NULL, 0, NULL, TR_OPT_SHAPES_JOB}},
    {JOB_MODEL, F(pooling), {"pooling", TR_OPT_STRING, NULL, "sum",
        "how a multi-hot table's bag of ids becomes one vector: sum or mean, for every table or a list with one "
        "per table", 1, 0, NULL, NULL, 0, NULL, TR_OPT_SHAPES_JOB}},
    {JOB_MODEL, F(preset), {"preset", TR_OPT_ENUM, NULL, "none",
        "defaults for the flags not given: dlrm_dcnv2_mlperf (MLPerf Training's DLRM-DCNv2: its dims, multi-hot "
        "sizes, cross layers, Adagrad and schedule), criteo_tb_t0 (Criteo Terabyte's tables, no frequency limit, "
        "882 M rows)", 1, 0, preset_choices, NULL, 0, NULL, TR_OPT_LOADER | TR_OPT_SHAPES_JOB}},
    {JOB_TRAIN, F(learning_rate), {"learning_rate", TR_OPT_DOUBLE, NULL, "24", "base learning rate", 0, 1e6, NULL,
        NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(warmup_steps), {"warmup_steps", TR_OPT_INT64, NULL, "8000",
        "linear warm-up steps (lr 0 at step 0)", 0, 1e15, NULL, NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(decay_start_step), {"decay_start_step", TR_OPT_INT64, NULL, "48000",
        "first step of the polynomial decay", 0, 1e15, NULL, NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(decay_steps), {"decay_steps", TR_OPT_INT64, NULL, "24000", "length of the decay (power 2)", 1,
        1e15, NULL, NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(epochs), {"epochs", TR_OPT_INT, NULL, "1", "passes over the training batches", 1, 1e6, NULL,
        NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(max_steps), {"max_steps", TR_OPT_INT64, NULL, "-1",
        "run exactly this many steps (-1: epochs x batches per epoch)", -1, 1e15, NULL, NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(auc_threshold), {"auc_threshold", TR_OPT_DOUBLE, NULL, "0",
        "stop once an evaluation reaches this AUC (0: never; the MLPerf rule)", 0, 1, NULL, NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(evals_per_epoch), {"evals_per_epoch", TR_OPT_INT, NULL, "1",
        "evaluations spread over each epoch (one more runs at the end if needed)", 0, 1e6, NULL, NULL, 0, NULL, 0}},
    {JOB_TRAIN, F(seed), {"seed", TR_OPT_INT64, NULL, "12345", "seed of initialisation and synthetic data", 0,
        9.2e18, NULL, NULL, 0, NULL, TR_OPT_LOADER}},
    {JOB_PARALLEL, F(columnwise_split), {"columnwise_split", TR_OPT_BOOL, NULL, "false",
        "split every table by columns over all workers (default: whole tables, the seed's placement)", 1, 0, NULL,
        "experimental_columnwise_split", 0, NULL, 0}},
    {JOB_PARALLEL, F(data_parallel_bottom_mlp), {"data_parallel_bottom_mlp", TR_OPT_BOOL, NULL, "false",
        "run the bottom MLP on every worker's slice (required with --columnwise_split)", 1, 0, NULL, NULL, 0, NULL, 0}},
    {JOB_PARALLEL, F(threads), {"threads", TR_OPT_INT, NULL, "0",
        "CPU threads per worker (0: the node's CPUs divided among its workers)", 0, 4096, NULL, NULL, 0, NULL,
        TR_OPT_RANK_LOCAL}},
    {JOB_PARALLEL, F(backend), {"backend", TR_OPT_ENUM, NULL, "auto",
        "compute backend: cpu, cuda, or auto (cuda when it opens, else cpu)", 1, 0, backend_choices, NULL, 0, NULL, 0}},
    {JOB_PARALLEL, F(amp), {"amp", TR_OPT_ENUM, NULL, "off",
        "mixed precision (cuda): bf16 (what a bare --amp means) or fp16 GEMM inputs on tensor cores, fp32 master "
        "weights, embeddings and sums", 1, 0, amp_choices, NULL, 0, "bf16", 0}},
    {JOB_PARALLEL, F(allow_tf32), {"allow_tf32", TR_OPT_BOOL, NULL, "false",
        "let fp32 GEMMs round their inputs to TF32 on tensor cores (cuda; faster, parity with cpu only to ~1e-3)",
        1, 0, NULL, NULL, 0, NULL, 0}},
    {JOB_PARALLEL, F(loss_scale), {"loss_scale", TR_OPT_DOUBLE, NULL, "1024",
        "static loss scale of --amp fp16 (the seed's default; bf16 and fp32 need none)", 1, 16777216, NULL, NULL,
        0, NULL, 0}},
    {JOB_PARALLEL, F(comm), {"comm", TR_OPT_ENUM, NULL, "auto",
        "collectives between workers: nccl (GPU memory), mpi (Open MPI; GPU buffers staged through pinned host "
        "memory unless it is CUDA-aware), or auto (nccl on the cuda backend when built with it, else mpi)", 1, 0,
        comm_choices, NULL, 0, NULL, 0}},
    {JOB_PARALLEL, F(overlap), {"overlap", TR_OPT_BOOL, NULL, "true",
        "overlap the all-to-alls and the dense all-reduce with compute (bottom MLP during the all-to-all, top MLP "
        "gradients reduced during the rest of the backward); results are the same either way", 1, 0, NULL, NULL, 0,
        NULL, 0}},
    {JOB_PARALLEL, F(gpus_per_node), {"gpus_per_node", TR_OPT_INT, NULL, "0",
        "cuda: GPUs each node uses, local rank -> device local_rank mod N (a task bound to one GPU uses it); "
        "refused when a node's workers see or use fewer (0: every visible device)", 0, 1024, NULL, NULL, 0, NULL, 0}},
    {JOB_PARALLEL, F(table_store), {"table_store", TR_OPT_STRING, NULL, "memory",
        "where embedding tables live: memory (the backend's), host (a row cache in the backend's memory over host "
        "memory) or file:DIR (a row cache over one file per table slice in DIR, a local disk); rows a step needs "
        "are fetched before it, and training is bitwise the same", 1, 0, NULL, NULL, 0, NULL, 0}},
    {JOB_PARALLEL, F(embedding_cache), {"embedding_cache", TR_OPT_STRING, NULL, "0.1",
        "the row cache of --table_store host or file:DIR: a SIZE per worker (e.g. 4G) or a FRACTION of each "
        "table's rows (e.g. 0.05 or 5%); a table the cache would hold whole stays in memory", 1, 0, NULL, NULL, 0,
        NULL, 0}},
    {JOB_PARALLEL, F(tier_io_threads), {"tier_io_threads", TR_OPT_INT, NULL, "0",
        "threads that read and write a host or file table store (0: as many as --threads: its reads compute "
        "the rows never written, and on a machine with few CPUs more threads take them from the step)", 0, 256,
        NULL, NULL, 0, NULL, TR_OPT_RANK_LOCAL}},
    {JOB_PARALLEL, F(collective_timeout), {"collective_timeout", TR_OPT_DOUBLE, NULL, "300",
        "seconds a collective waits for the other ranks before the job ends naming the silent ones (0: forever)",
        0, 1e9, NULL, NULL, 0, NULL, 0}},
};
#undef F
_Static_assert(sizeof decls / sizeof decls[0] <= JOB_MAX_OPTS, "raise JOB_MAX_OPTS");

int job_opts(struct job_cfg *c, unsigned groups, struct tr_opt *o)
{
    int k = 0;
    for (size_t i = 0; i < TR_ARRAY_SIZE(decls); i++) {
        if (!(decls[i].group & groups))
            continue;
        o[k] = decls[i].opt;
        o[k].dst = (char *)c + decls[i].off;
        k++;
    }
    c->table = o;
    return k;
}

int job_store_opts(char **dir, char **token_file, struct tr_opt *o)
{
    /* terarec train serves a store of its own, or passes the workers the
     * absolute path or URL of the one given, with its token */
    const struct tr_opt decl[] = {
        {"checkpoint_dir", TR_OPT_PATH, NULL, NULL,
         "the checkpoint store: a terarec-ckpt URL (http://HOST:PORT) or a directory", 1, 0, NULL,
         "save_checkpoint_path", 0, NULL, TR_OPT_LAUNCHER_MAPS},
        {"checkpoint_token_file", TR_OPT_PATH, NULL, NULL,
         "file holding the store's bearer token (needed with a URL)", 1, 0, NULL, NULL, 0, NULL,
         TR_OPT_LAUNCHER_MAPS},
    };
    o[0] = decl[0];
    o[0].dst = dir;
    if (!token_file)
        return 1;
    o[1] = decl[1];
    o[1].dst = token_file;
    return 2;
}

int64_t job_test_batch(const struct job_cfg *c)
{
    return c->test_batch_size ? c->test_batch_size : c->batch_size;
}

const char *job_optim_name(int optimizer)
{
    return optimizer >= 0 && optimizer < (int)TR_ARRAY_SIZE(optim_choices) - 1 ? optim_choices[optimizer] : "unknown";
}

float job_loss_scale(const struct job_cfg *c)
{
    return c->amp == JOB_AMP_FP16 ? (float)c->loss_scale : 1.0f;
}

const char *job_backend_name(int backend)
{
    return backend >= 0 && backend < (int)TR_ARRAY_SIZE(backend_choices) - 1 ? backend_choices[backend] : "?";
}

static const char *const store_names[] = {"memory", "host", "file"};

const char *job_store_name(int store)
{
    return store >= 0 && store < (int)TR_ARRAY_SIZE(store_names) ? store_names[store] : "?";
}

/* --embedding_cache's text: a fraction in (0, 1] or a percentage, else a size. */
static enum tr_status parse_cache(const char *text, struct job_tier *t)
{
    char *end = NULL;
    const double v = strtod(text, &end);
    if (end != text && *end == '%' && end[1] == '\0' && v > 0.0 && v <= 100.0) {
        t->cache_fraction = v / 100.0;
        return TR_OK;
    }
    if (end != text && *end == '\0' && v > 0.0 && v <= 1.0) {
        t->cache_fraction = v;
        return TR_OK;
    }
    int64_t b = 0;
    if (tr_opt_parse_bytes(text, &b) == 0 && b > 1) {
        t->cache_bytes = b;
        return TR_OK;
    }
    LOG_ERROR("--embedding_cache '%s': expected a size per worker (e.g. 4G) or a fraction of each table's rows in "
              "(0, 1] (e.g. 0.05 or 5%%)",
              text);
    LOG_HINT("'terarec plan --fit' chooses a cache that fits the workers' memory");
    return TR_ERR_ARG;
}

enum tr_status job_tier_of(const struct job_cfg *c, struct job_tier *t)
{
    memset(t, 0, sizeof *t);
    const char *s = c->table_store && *c->table_store ? c->table_store : "memory";
    if (!strcmp(s, "memory")) {
        t->store = JOB_STORE_MEMORY;
    } else if (!strcmp(s, "host")) {
        t->store = JOB_STORE_HOST;
    } else if (!strncmp(s, "file:", 5) && s[5]) {
        t->store = JOB_STORE_FILE;
        t->dir = s + 5;
    } else {
        LOG_ERROR("--table_store '%s': expected memory, host or file:DIR", s);
        LOG_HINT("file:DIR keeps the tables in files under DIR, a directory on a local disk (e.g. "
                 "file:/local_nvme/terarec)");
        return TR_ERR_ARG;
    }
    t->io_threads = c->tier_io_threads; /* 0: the worker's threads (train.c), 2 where they are unknown */
    return parse_cache(c->embedding_cache && *c->embedding_cache ? c->embedding_cache : "0.1", t);
}

/* The synthetic dataset's own flags, meaningless with a split-binary one. */
static const char *const synthetic_flags[] = {"synthetic_dataset_cardinalities",
                                              "synthetic_dataset_num_numerical_features",
                                              "synthetic_dataset_train_batches", "synthetic_dataset_valid_batches",
                                              "synthetic_ids", "synthetic_dataset_multi_hot_sizes",
                                              "synthetic_dataset_multi_hot_lengths"};

/* "--name" or "TR_NAME", as the user gave option `name`. */
static void flag_text(const struct job_cfg *c, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "--%s", name);
    for (const struct tr_opt *o = c->table; o && o->type != TR_OPT_END; o++)
        if (!strcmp(o->name, name))
            tr_opt_source(o, buf, n);
}

/* The first of flags[0 .. n) given although `option` is `value`, which makes them
 * meaningless: one error naming both ("--x and --option value cannot be used
 * together", or "--x is given but <what> is value (the default of --option)" when
 * option was not given) and the hint; TR_ERR_ARG. TR_OK when none was given. */
static enum tr_status refuse_given(const struct job_cfg *c, const char *const *flags, size_t n, const char *option,
                                   const char *what, const char *value, const char *hint)
{
    char a[160], b[160];
    for (size_t i = 0; i < n; i++) {
        if (!tr_opt_given(c->table, flags[i]))
            continue;
        flag_text(c, flags[i], a, sizeof a);
        flag_text(c, option, b, sizeof b);
        if (tr_opt_given(c->table, option))
            LOG_ERROR("%s and %s %s cannot be used together", a, b, value);
        else
            LOG_ERROR("%s is given but %s is %s (the default of --%s)", a, what, value, option);
        LOG_HINT("%s", hint);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

static enum tr_status check_conflicts(const struct job_cfg *c, unsigned groups)
{
    const struct tr_opt *t = c->table;
    char a[160], b[160];
    if (!t)
        return TR_OK;
    if (groups & JOB_DATA) {
        const int split = c->dataset_type != JOB_DATA_SYNTHETIC;
        for (size_t i = 0; i < TR_ARRAY_SIZE(synthetic_flags); i++) {
            const char *f = synthetic_flags[i];
            if (!tr_opt_given(t, f))
                continue;
            flag_text(c, f, a, sizeof a);
            if (tr_opt_given(t, "dataset_path")) {
                flag_text(c, "dataset_path", b, sizeof b);
                LOG_ERROR("%s and %s cannot be used together", a, b);
            } else if (split) {
                flag_text(c, "dataset_type", b, sizeof b);
                LOG_ERROR("%s and %s %s cannot be used together", a, b, dataset_choices[c->dataset_type]);
            } else {
                continue;
            }
            LOG_HINT("a split-binary dataset's feature spec gives the tables and features; drop %s, or train on "
                     "synthetic data without --dataset_path",
                     a);
            return TR_ERR_ARG;
        }
        const char *const file_flags[] = {"dataset_path", "feature_spec"};
        if (!split)
            TR_CHECK(refuse_given(c, file_flags, TR_ARRAY_SIZE(file_flags), "dataset_type", "the dataset type",
                                  "synthetic",
                                  "add --dataset_type split_binary to train on the files at --dataset_path"));
    }
    if ((groups & JOB_MODEL) && c->optimizer == JOB_OPT_SGD) {
        const char *const adagrad_flags[] = {"adagrad_initial_accumulator_value", "adagrad_epsilon"};
        TR_CHECK(refuse_given(c, adagrad_flags, TR_ARRAY_SIZE(adagrad_flags), "optimizer", "the optimizer", "sgd",
                              "the Adagrad settings apply only with --optimizer adagrad or rowwise_adagrad"));
    }
    if ((groups & JOB_MODEL) && c->interaction == JOB_INTERACT_DOT) {
        const char *const dcn_flags[] = {"dcn_num_layers", "dcn_low_rank_dim"};
        TR_CHECK(refuse_given(c, dcn_flags, TR_ARRAY_SIZE(dcn_flags), "interaction", "the interaction", "dot",
                              "the cross layers' settings apply only with --interaction dcnv2"));
    }
    if ((groups & JOB_PARALLEL) && (!c->table_store || !strcmp(c->table_store, "memory"))) {
        const char *const tier_flags[] = {"embedding_cache", "tier_io_threads"};
        TR_CHECK(refuse_given(c, tier_flags, TR_ARRAY_SIZE(tier_flags), "table_store", "the table store", "memory",
                              "the row cache applies to --table_store host or file:DIR"));
    }
    if ((groups & JOB_DATA) && c->shuffle_samples && c->shuffle_batches)
        return tr_opt_exclusive(t, "shuffle_samples", "shuffle_batches",
                                "--shuffle_samples already reorders every sample; --shuffle_batches only permutes "
                                "whole batches: pick one");
    if ((groups & JOB_TRAIN) && tr_opt_given(t, "max_steps") && tr_opt_given(t, "epochs") && c->max_steps >= 0)
        return tr_opt_exclusive(t, "max_steps", "epochs",
                                "--max_steps sets the length of the run by itself; drop --epochs (or pass "
                                "--max_steps -1 to train --epochs epochs)");
    return TR_OK;
}

/* --start_position's text: "EPOCH:BATCH" (*b = BATCH) or "STEP" (*b = -1), decimal
 * digits only. TR_ERR_ARG, logged naming the flag. */
static enum tr_status parse_position(const char *text, int64_t *a, int64_t *b)
{
    const size_t n1 = strspn(text, "0123456789");
    const size_t n2 = text[n1] == ':' ? strspn(text + n1 + 1, "0123456789") : 0;
    const int ok = n1 > 0 && n1 <= 18 && (text[n1] == '\0' || (n2 > 0 && n2 <= 18 && text[n1 + 1 + n2] == '\0'));
    if (!ok) {
        LOG_ERROR("--start_position: '%s' is neither EPOCH:BATCH nor a step number", text);
        LOG_HINT("give the position of a batch header (e.g. 3:120) or the step to resume at (e.g. 48000)");
        return TR_ERR_ARG;
    }
    *a = strtoll(text, NULL, 10);
    *b = text[n1] == ':' ? strtoll(text + n1 + 1, NULL, 10) : -1;
    return TR_OK;
}

enum tr_status job_start_position(const struct job_cfg *c, int64_t nbatches, int64_t *epoch, int64_t *index)
{
    *epoch = *index = 0;
    if (!c->start_position || !*c->start_position)
        return TR_OK;
    int64_t a, b;
    TR_CHECK(parse_position(c->start_position, &a, &b));
    if (b < 0) { /* a step: nbatches a pass */
        *epoch = nbatches ? a / nbatches : 0;
        *index = nbatches ? a % nbatches : 0;
        return TR_OK;
    }
    if (b >= nbatches) {
        LOG_ERROR("--start_position %s: an epoch has batches 0 to %lld, not %lld", c->start_position,
                  (long long)(nbatches - 1), (long long)b);
        LOG_HINT("the batch number counts from 0 within the epoch; check --batch_size and --drop_last");
        return TR_ERR_ARG;
    }
    *epoch = a;
    *index = b;
    return TR_OK;
}

enum tr_status job_check(const struct job_cfg *c, unsigned groups)
{
    if (groups & JOB_PARALLEL) {
        struct job_tier t;
        TR_CHECK(job_tier_of(c, &t));
    }
    TR_CHECK(check_conflicts(c, groups));
    if ((groups & JOB_DATA) && c->start_position && *c->start_position) {
        int64_t a, b;
        TR_CHECK(parse_position(c->start_position, &a, &b));
    }
    if ((groups & JOB_DATA) && c->dataset_type != JOB_DATA_SYNTHETIC && (!c->dataset_path || !*c->dataset_path)) {
        LOG_ERROR("--dataset_type split_binary needs --dataset_path");
        LOG_HINT("point --dataset_path at the output directory of 'terarec data prepare'");
        return TR_ERR_ARG;
    }
    if ((groups & JOB_MODEL) && c->optimizer != JOB_OPT_SGD && c->adagrad_eps == 0.0 && c->adagrad_init == 0.0) {
        LOG_ERROR("--adagrad_epsilon 0 with --adagrad_initial_accumulator_value 0 divides 0 by 0 for every weight "
                  "whose gradient is 0 at the first step (NaN)");
        LOG_HINT("give either a positive value (the defaults are 1e-7 and 0.1)");
        return TR_ERR_ARG;
    }
    if ((groups & JOB_MODEL) && (c->top.n < 1 || c->top.n > JOB_MAX_LAYERS || c->top.v[c->top.n - 1] != 1)) {
        LOG_ERROR("--top_mlp_dims: needs 1 to %d layers and the last width must be 1 (the logit)", JOB_MAX_LAYERS);
        LOG_HINT("for example --top_mlp_dims 1024,1024,512,256,1");
        return TR_ERR_ARG;
    }
    if ((groups & JOB_DATA) && c->multi_hot.n && c->multi_hot.n != c->rows.n &&
        c->dataset_type == JOB_DATA_SYNTHETIC) {
        LOG_ERROR("--synthetic_dataset_multi_hot_sizes: %d sizes for %d tables (--synthetic_dataset_cardinalities)",
                  c->multi_hot.n, c->rows.n);
        LOG_HINT("give one size per table (1: one-hot), e.g. %dx1", c->rows.n);
        return TR_ERR_ARG;
    }
    if ((groups & JOB_DATA) && c->preset == JOB_PRESET_CRITEO_TB_T0) {
        TR_CHECK(tr_opt_exclusive(c->table, "preset", "synthetic_dataset_cardinalities",
                                  "--preset criteo_tb_t0 gives the tables; drop one of them"));
        TR_CHECK(tr_opt_exclusive(c->table, "preset", "dataset_path",
                                  "--preset criteo_tb_t0 and a dataset each give the tables; drop one"));
    }
    if (groups & JOB_MODEL) { /* the words; their number too when the tables are known here */
        const int known = (groups & JOB_DATA) && c->dataset_type == JOB_DATA_SYNTHETIC;
        TR_CHECK(job_pooling(c, known ? c->rows.n : -1, NULL));
    }
    if ((groups & JOB_DATA) && (groups & JOB_MODEL) && c->dataset_type == JOB_DATA_SYNTHETIC)
        return job_check_shape(c, c->num_numerical, c->rows.n, "--synthetic_dataset_cardinalities");
    return TR_OK;
}

void job_synthetic_hot(const struct job_cfg *c, int32_t *hot)
{
    for (int t = 0; t < c->rows.n; t++)
        hot[t] = t < c->multi_hot.n && c->multi_hot.v[t] > 1 ? (int32_t)c->multi_hot.v[t] : 0;
}

/* The pooling word w[0, n): 0 sum, 1 mean, -1 neither. */
static int pooling_word(const char *w, size_t n)
{
    if (n == 3 && !strncmp(w, "sum", 3))
        return 0;
    if (n == 4 && !strncmp(w, "mean", 4))
        return 1;
    return -1;
}

enum tr_status job_pooling(const struct job_cfg *c, int ntables, uint8_t *mean)
{
    const char *p = c->pooling && *c->pooling ? c->pooling : "sum";
    int n = 0;
    for (const char *q = p;; q++) {
        const char *e = strchr(q, ',');
        const size_t len = e ? (size_t)(e - q) : strlen(q);
        const int v = pooling_word(q, len);
        if (v < 0) {
            LOG_ERROR("--pooling %s: '%.*s' is neither sum nor mean", p, (int)TR_MIN(len, (size_t)64), q);
            LOG_HINT("give sum or mean, for every table, or a comma-separated list with one per table");
            return TR_ERR_ARG;
        }
        if (mean && n < ntables)
            mean[n] = (uint8_t)v;
        n++;
        if (!e)
            break;
        q = e;
    }
    if (n == 1) {
        for (int t = 1; mean && t < ntables; t++)
            mean[t] = mean[0];
        return TR_OK;
    }
    if (ntables >= 0 && n != ntables) {
        LOG_ERROR("--pooling %s: %d words for %d tables", p, n, ntables);
        LOG_HINT("give one word for every table, or one per table");
        return TR_ERR_ARG;
    }
    return TR_OK;
}

enum tr_status job_check_shape(const struct job_cfg *c, int num_features, int ntables, const char *source)
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
        if (c->bottom.n < 1 || c->bottom.n > JOB_MAX_LAYERS) {
            LOG_ERROR("--bottom_mlp_dims: needs 1 to %d layers, got %d", JOB_MAX_LAYERS, c->bottom.n);
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

/* Is `name` inside directory dir a regular file? */
static int dir_has_file(const char *dir, const char *name)
{
    char *path = NULL;
    struct stat st;
    int yes = tr_file_join_to(dir, name, &path) == TR_OK && stat(path, &st) == 0 && S_ISREG(st.st_mode);
    tr_free(path);
    return yes;
}

enum tr_status job_infer_dataset_type(struct job_cfg *c, const char *here, int *inferred)
{
    if (inferred)
        *inferred = 0;
    if (!c->dataset_path || !*c->dataset_path || tr_opt_given(c->table, "dataset_type"))
        return TR_OK;
    const char *dir = here ? here : c->dataset_path;
    const char *spec = c->feature_spec && *c->feature_spec ? c->feature_spec : "feature_spec.yaml";
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        LOG_ERROR("--dataset_path %s: %s", c->dataset_path, stat(dir, &st) != 0 ? strerror(errno) : strerror(ENOTDIR));
        LOG_HINT("give the directory 'terarec data prepare --output' wrote");
        return TR_ERR_ARG;
    }
    const char *why = dir_has_file(dir, spec) ? spec : dir_has_file(dir, "train/label.bin") ? "train/label.bin" : NULL;
    if (!why) {
        LOG_ERROR("--dataset_path %s: holds no dataset (no %s, no train/label.bin)", c->dataset_path, spec);
        LOG_HINT("give the directory 'terarec data prepare --output' wrote, or --dataset_type");
        return TR_ERR_ARG;
    }
    c->dataset_type = JOB_DATA_SPLIT_BINARY;
    if (inferred)
        *inferred = 1;
    /* shown at the default level: the user did not say it, the files did */
    if (TR_LOG_ON(TR_LOG_WARN, TR_SUB_DATA))
        tr_log_write(TR_LOG_INFO, TR_SUB_DATA, "--dataset_path %s holds %s: --dataset_type split_binary",
                     c->dataset_path, why);
    return TR_OK;
}
