/* job.h: the configuration of a training job, declared once: the dataset, batch,
 * model, training and parallelism options (the seed's flag names) that
 * terarec-worker, `terarec plan`, terarec-loader (and later `terarec train`)
 * all accept. Each program takes the groups it needs into its own option table,
 * so one flag means the same thing, with the same default and bounds, everywhere. */
#ifndef TR_JOB_H
#define TR_JOB_H

#include <stdint.h>

#include "param.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most layers an MLP may have (the model's limit too). */
#define JOB_MAX_LAYERS 16

enum job_dataset { JOB_DATA_SYNTHETIC = 0, JOB_DATA_SPLIT_BINARY = 1 /* 2, 3: its aliases tf_raw, raw */ };
/* ROWWISE_ADAGRAD: one Adagrad accumulator per embedding row (FBGEMM's
 * EXACT_ROWWISE_ADAGRAD); the MLPs keep element-wise Adagrad. It takes the same
 * --adagrad_* flags as ADAGRAD. */
enum job_optim { JOB_OPT_SGD = 0, JOB_OPT_ADAGRAD = 1, JOB_OPT_ROWWISE_ADAGRAD = 2 };
enum job_ids { JOB_IDS_POWERLAW = 0, JOB_IDS_UNIFORM = 1 };
enum job_nonfinite { JOB_NONFINITE_ERROR = 0, JOB_NONFINITE_ZERO = 1 };
enum job_interaction { JOB_INTERACT_DOT = 0, JOB_INTERACT_DCNV2 = 1 };
enum job_backend { JOB_BACKEND_AUTO = 0, JOB_BACKEND_CPU = 1, JOB_BACKEND_CUDA = 2 };
enum job_amp { JOB_AMP_OFF = 0, JOB_AMP_BF16 = 1, JOB_AMP_FP16 = 2 };
enum job_preset { JOB_PRESET_NONE = 0, JOB_PRESET_DLRM_DCNV2_MLPERF = 1, JOB_PRESET_CRITEO_TB_T0 = 2 };

struct job_cfg {
    /* JOB_DATA: where samples come from */
    int dataset_type;             /* enum job_dataset */
    char *dataset_path;
    char *feature_spec;
    struct tr_i64_list rows;      /* --synthetic_dataset_cardinalities: rows of each table */
    int num_numerical;            /* --synthetic_dataset_num_numerical_features */
    int64_t train_batches;        /* --synthetic_dataset_train_batches */
    int64_t test_batches;         /* --synthetic_dataset_valid_batches */
    int synthetic_ids;            /* enum job_ids */
    struct tr_i64_list multi_hot; /* --synthetic_dataset_multi_hot_sizes: ids per sample of each
                                     table (1: one-hot); empty: every table one-hot */
    int multi_hot_variable;       /* --synthetic_dataset_multi_hot_lengths variable: a bag of
                                     size h holds 0 to h ids */
    int nonfinite_inputs;         /* enum job_nonfinite: NaN/inf numerical inputs refused or zeroed */
    int shuffle_samples;          /* a seeded permutation of the training samples each epoch */
    int drop_last;                /* drop the last partial training batch (the seed's rule) */
    int shuffle_batches;          /* a seeded permutation of the training batches each epoch */
    char *start_position;         /* "EPOCH:BATCH" or a step number: where training data starts */
    /* JOB_BATCH */
    int64_t batch_size;           /* global training batch */
    int64_t test_batch_size;      /* --valid_batch_size; 0: batch_size */
    /* JOB_MODEL */
    int embedding_dim;
    struct tr_i64_list bottom, top;
    int optimizer;                /* enum job_optim */
    double adagrad_init, adagrad_eps;
    int interaction;              /* enum job_interaction */
    int dcn_num_layers;           /* low-rank cross layers (dcnv2) */
    int dcn_low_rank_dim;         /* their rank r (dcnv2) */
    char *pooling;                /* --pooling: sum or mean, for every table or one per table */
    int preset;                   /* enum job_preset: the defaults it gives the flags not given */
    /* JOB_TRAIN */
    double learning_rate;
    int64_t warmup_steps, decay_start_step, decay_steps;
    int epochs;
    int64_t max_steps;            /* -1: epochs x batches per epoch */
    double auc_threshold;
    int evals_per_epoch;
    int64_t seed;
    /* JOB_PARALLEL */
    int columnwise_split, data_parallel_bottom_mlp;
    int threads;                  /* per worker; 0: the node's CPUs divided among its workers */
    int backend;                  /* enum job_backend */
    int amp;                      /* enum job_amp: the GEMMs' reduced precision (cuda only) */
    int allow_tf32;               /* fp32 GEMMs may round to TF32 (cuda; off: exact fp32) */
    double loss_scale;            /* static loss scale of --amp fp16 (the seed's --loss_scale) */
    double collective_timeout;    /* seconds a collective waits for the other ranks (0: forever) */
    int comm;                     /* enum comm_choice (worker/comm.h): --comm auto|nccl|mpi */
    int overlap;                  /* overlap the step's collectives with compute */
    int gpus_per_node;            /* cuda: devices per node (0: every visible one) */
    char *table_store;            /* --table_store: memory, host or file:DIR (job_tier_of) */
    char *embedding_cache;        /* --embedding_cache: SIZE per worker or FRACTION of each tiered table */
    int tier_io_threads;          /* threads reading and writing a host or file store (0: its default) */
    /* not a flag: the program sets it when the job saves checkpoints, so that the
     * memory plan counts the host staging copy of what each worker saves */
    int ckpt_staging;
    /* the option table job_opts filled (borrowed, valid while the caller keeps
     * it): which flags were given, for job_check's conflicts; NULL: none known */
    const struct tr_opt *table;
};

enum job_group {
    JOB_DATA = 1u << 0,
    JOB_BATCH = 1u << 1,
    JOB_MODEL = 1u << 2,
    JOB_TRAIN = 1u << 3,
    JOB_PARALLEL = 1u << 4,
    JOB_ALL = (1u << 5) - 1,
};

/* Writes the options of `groups`, bound to *c, into o[0 .. k) and returns k (at
 * most JOB_MAX_OPTS); the caller appends its own options and the TR_OPT_END entry,
 * parses with tr_opt_parse and frees with tr_opt_release (which frees c's strings
 * and lists). Sets c->table = o: o must start the table and outlive job_check. */
#define JOB_MAX_OPTS 72
int job_opts(struct job_cfg *c, unsigned groups, struct tr_opt *o);

/* The checkpoint store's flags, declared once for every program that takes them
 * (terarec-worker, terarec train, terarec plan, terarec ckpt): --checkpoint_dir, a
 * store URL or a directory, bound to *dir, and, when token_file is non-NULL,
 * --checkpoint_token_file bound to *token_file. Writes them into o[0 ..) and
 * returns how many (1 or 2); the caller appends the rest of its table as for
 * job_opts. */
int job_store_opts(char **dir, char **token_file, struct tr_opt *o);

/* Where embedding tables live (--table_store): the backend's memory, or a row cache
 * in it over host memory or over a file per table slice in a directory. */
enum job_store { JOB_STORE_MEMORY = 0, JOB_STORE_HOST = 1, JOB_STORE_FILE = 2 };
struct job_tier {
    int store;             /* enum job_store */
    const char *dir;       /* JOB_STORE_FILE: the directory (points into c->table_store) */
    double cache_fraction; /* --embedding_cache FRACTION: of each tiered table's rows (0: a size) */
    int64_t cache_bytes;   /* --embedding_cache SIZE: bytes of cache per worker (0: a fraction) */
    int io_threads;        /* --tier_io_threads; 0: the worker's threads */
};

/* --table_store and --embedding_cache as given: "memory", "host" or "file:DIR";
 * a FRACTION in (0, 1] ("0.05", "5%") or a SIZE ("4G", "1073741824"). TR_ERR_ARG
 * (logged naming the flag, with a hint) for text neither takes. */
enum tr_status job_tier_of(const struct job_cfg *c, struct job_tier *out) TR_WUR;

/* Name of a store kind ("memory", "host", "file"). */
const char *job_store_name(int store);

/* --preset: gives each flag the preset sets (job.c lists them, each traced to its
 * source) its value, unless the flag was given (c->table: the environment or the
 * command line), so that a given flag always wins. Call it once after parsing,
 * before the config is read; a second call changes nothing. TR_ERR_NOMEM. */
enum tr_status job_apply_preset(struct job_cfg *c) TR_WUR;
/* Name of a preset ("none", "dlrm_dcnv2_mlperf", "criteo_tb_t0"). */
const char *job_preset_name(int preset);

/* The synthetic dataset's tables' hotness in batch.h's terms: hot[t] = 0 for a
 * one-hot table (size 1 or no --synthetic_dataset_multi_hot_sizes), else its
 * size. hot: (c->rows.n). */
void job_synthetic_hot(const struct job_cfg *c, int32_t *hot);

/* --pooling for ntables tables: mean[t] = 1 where table t's bags are averaged, 0
 * where they are summed (mean may be NULL: a check). TR_ERR_ARG (logged naming the
 * flag) for a word other than sum or mean, or a list whose length is neither 1 nor
 * ntables (ntables < 0: not known yet, the words only). */
enum tr_status job_pooling(const struct job_cfg *c, int ntables, uint8_t *mean) TR_WUR;

/* The test batch size in effect (--valid_batch_size, or --batch_size when 0). */
int64_t job_test_batch(const struct job_cfg *c);

/* Name of an optimizer choice ("sgd", "adagrad", "rowwise_adagrad"). */
const char *job_optim_name(int optimizer);

/* The factor the loss gradient is multiplied by, and the parameter gradients
 * divided by: --loss_scale under --amp fp16, else 1. */
float job_loss_scale(const struct job_cfg *c);

/* Name of a backend choice ("auto", "cpu", "cuda"). */
const char *job_backend_name(int backend);

/* Relations between the flags of `groups` that single flags cannot check: a
 * split-binary dataset needs --dataset_path; the top MLP ends in 1; with the
 * synthetic dataset the bottom MLP ends in --embedding_dim. Flags given (c->table)
 * that the others make meaningless are conflicts: a --synthetic_dataset_* flag
 * with a split-binary dataset, --dataset_path or --feature_spec with the synthetic
 * one, an --adagrad_* flag with --optimizer sgd, a --dcn_* flag with --interaction
 * dot, --max_steps with --epochs, --embedding_cache or --tier_io_threads with
 * --table_store memory. --table_store and --embedding_cache must parse
 * (job_tier_of). Logs one error naming both flags (or the flag)
 * and a hint; TR_ERR_ARG. */
enum tr_status job_check(const struct job_cfg *c, unsigned groups) TR_WUR;

/* The dataset a --dataset_path given without --dataset_type means (the seed's
 * commands give only the path): split_binary when the directory `here` (the path
 * as this machine sees it; NULL: c->dataset_path) holds the FeatureSpec
 * (--feature_spec) or the seed's split-binary layout (train/label.bin); sets
 * c->dataset_type, says so in an info line and sets *inferred (may be NULL) to 1.
 * Does nothing (TR_OK, *inferred 0) when --dataset_type was given (c->table) or
 * --dataset_path was not. A directory holding neither, or a path that is not
 * one: one error naming the path and a hint, TR_ERR_ARG. Not thread-safe (logs). */
enum tr_status job_infer_dataset_type(struct job_cfg *c, const char *here, int *inferred) TR_WUR;

/* The training position --start_position names, for a split of nbatches batches
 * an epoch: EPOCH:BATCH as given (BATCH < nbatches), or step k as (k / nbatches,
 * k mod nbatches); (0, 0) when not given. TR_ERR_ARG (logged naming the flag). */
enum tr_status job_start_position(const struct job_cfg *c, int64_t nbatches, int64_t *epoch,
                                  int64_t *index) TR_WUR;

/* The model flags against a dataset's shape (num_features numerical inputs,
 * ntables tables; `source` names the dataset in messages). TR_ERR_ARG (logged). */
enum tr_status job_check_shape(const struct job_cfg *c, int num_features, int ntables, const char *source) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
