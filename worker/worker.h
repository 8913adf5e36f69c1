/* worker.h: terarec-worker, the training process: one per GPU or CPU slot, rank
 * and world from PMIx. Its flags are the job's (common/job.h, the seed's names)
 * plus a few of its own (progress, log file, weight dumps). */
#ifndef TR_WORKER_H
#define TR_WORKER_H

#include <stdint.h>

#include "../common/job.h"
#include "../common/param.h"
#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct worker_cfg {
    struct job_cfg job;
    int64_t print_freq;
    int64_t benchmark_warmup_steps;
    char *log_path;
    char *dump_weights;
    char *loader;          /* --loader shm:NAME: batches from terarec-loader's ring; NULL: read in-process */
    double loader_timeout; /* seconds rank 0 waits for the ring to appear */
    int mode;              /* enum worker_mode */
    /* checkpoints (ckpt.h) */
    char *checkpoint_dir;  /* URL or path; NULL: no saves */
    char *checkpoint_token_file;
    int64_t checkpoint_every;       /* steps between saves (0: at the end only) */
    int64_t full_checkpoint_every;  /* saves between full saves */
    int checkpoint_async, checkpoint_incremental;
    int64_t checkpoint_chunk_bytes;
    double checkpoint_timeout;      /* seconds rank 0 waits for the other ranks' parts */
    int64_t keep_checkpoints;       /* committed manifests the store keeps for the run (0: all) */
    char *run_name;
    int resume;
    char *restore;         /* URL_or_PATH#RUN@STEP */
    /* the launcher (report.h) */
    char *events_addr;     /* tcp:HOST:PORT or unix:PATH; NULL: no launcher */
    char *events_token_file;
};

enum worker_mode { WORKER_MODE_TRAIN = 0, WORKER_MODE_EVAL = 1, WORKER_MODE_INFERENCE = 2 };

#define WORKER_MAX_OPTS (JOB_MAX_OPTS + 24)

/* Fills o with the option table bound to *cfg (parse it with tr_opt_parse,
 * release it with tr_opt_release). */
void worker_opts_fill(struct worker_cfg *cfg, struct tr_opt o[WORKER_MAX_OPTS]);

/* Checks at start-up, before anything large is allocated, that the outputs can
 * be written: the directory of --dump_weights is created if missing and a probe
 * of this process's dump file (its temporary name) is created and removed; the
 * --log_path file (rank 0's) is opened for writing, created and removed if it did
 * not exist, its directory created: on rank 0 only, its one writer (ranks
 * probing one file at once would race). Each rank's result is then voted on
 * (comm_vote), so all ranks stop alike.
 * TR_ERR_ARG (a path that cannot be written or is too long: logged naming the
 * file and the errno text), TR_ERR_NOMEM. */
enum tr_status worker_check_outputs(const struct worker_cfg *cfg, int rank) TR_WUR;

/* Summary of a finished run. */
struct worker_result {
    int64_t steps;
    double first_loss, last_loss; /* mean loss of the first and last print interval */
    double best_auc, last_auc, last_logloss;
    double throughput;            /* samples/s over the timed steps */
    double mean_step_ms;
    int reached_threshold;        /* stopped early by --auc_threshold */
};

/* Trains as configured: console progress on rank 0, events to the DLLogger log at
 * --log_path. Returns TR_OK, or the first error (already logged); *res (if
 * non-NULL) gets the summary. */
enum tr_status worker_run(const struct worker_cfg *cfg, struct worker_result *res) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
