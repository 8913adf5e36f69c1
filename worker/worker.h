/* worker.h: terarec-worker, the training process. Today it runs as one process
 * (world size 1) over the synthetic dataset or a split-binary dataset; the flags
 * use the seed's names. */
#ifndef TR_WORKER_H
#define TR_WORKER_H

#include <stdint.h>

#include "../common/param.h"
#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum worker_dataset { WORKER_DATA_SYNTHETIC = 0, WORKER_DATA_SPLIT_BINARY = 1 /* also 2, 3: aliases */ };
enum worker_optim { WORKER_OPT_SGD = 0, WORKER_OPT_ADAGRAD = 1 };

struct worker_cfg {
    int dataset_type;
    char *dataset_path;
    char *feature_spec;
    double auc_threshold;
    struct tr_i64_list cards;     /* --synthetic_dataset_cardinalities */
    int num_numerical;            /* --synthetic_dataset_num_numerical_features */
    int64_t train_batches;        /* --synthetic_dataset_train_batches */
    int64_t valid_batches;        /* --synthetic_dataset_valid_batches */
    int synthetic_ids;            /* 0 powerlaw, 1 uniform */
    int64_t batch_size;
    int64_t valid_batch_size;     /* 0: same as batch_size */
    int embedding_dim;
    struct tr_i64_list bottom;
    struct tr_i64_list top;
    int optimizer;
    double learning_rate;
    int64_t warmup_steps;
    int64_t decay_start_step;
    int64_t decay_steps;
    double adagrad_init;
    double adagrad_eps;
    int epochs;
    int64_t max_steps;            /* -1: epochs * train_batches */
    int evals_per_epoch;
    int64_t print_freq;
    int64_t benchmark_warmup_steps;
    int64_t seed;
    int threads;
    char *log_path;
    int columnwise_split;
    int data_parallel_bottom_mlp;
    char *dump_weights;
};

#define WORKER_MAX_OPTS 64

/* Fills o with the option table bound to *cfg (parse it with tr_opt_parse,
 * release it with tr_opt_release). */
void worker_opts_fill(struct worker_cfg *cfg, struct tr_opt o[WORKER_MAX_OPTS]);

/* Checks relations between options (e.g. last bottom width == embedding dim).
 * Logs one error naming the flag and a hint; returns TR_ERR_ARG. */
enum tr_status worker_cfg_check(const struct worker_cfg *cfg) TR_WUR;

/* Trains as configured: console progress on rank 0, a DLLogger JSON log at
 * --log_path. Returns TR_OK, or the first error (already logged). */
enum tr_status worker_run(const struct worker_cfg *cfg) TR_WUR;

/* Summary of a finished run, filled by worker_run_ex. */
struct worker_result {
    int64_t steps;
    double first_loss, last_loss; /* mean loss of the first and last print interval */
    double best_auc, last_auc, last_logloss;
    double throughput;            /* samples/s over the timed steps */
    double mean_step_ms;
    int reached_threshold;        /* stopped early by --auc_threshold */
};

enum tr_status worker_run_ex(const struct worker_cfg *cfg, struct worker_result *res) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
