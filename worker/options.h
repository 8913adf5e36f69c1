/* options.h: terarec-worker's configuration: struct worker_cfg, its option table
 * (the job's flags from common/job.h plus the worker's own: progress, log file,
 * weight dumps, checkpoints, the launcher) and the checks made on it before a run.
 * A leaf of the worker: it includes neither worker.h nor train.h, so both (and
 * terarec train, which passes these flags on) take it without taking each other. */
#ifndef TR_WORKER_OPTIONS_H
#define TR_WORKER_OPTIONS_H

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
    char *resume_arg;      /* --resume [RUN] as given: NULL not given, "true" bare, a boolean's word, or RUN */
    int resume;            /* not a flag: worker_opts_resolve sets it from resume_arg */
    char *restore;         /* URL_or_PATH#RUN@STEP */
    /* the launcher (report.h) */
    char *events_addr;     /* tcp:HOST:PORT or unix:PATH; NULL: no launcher */
    char *events_token_file;
};

enum worker_mode { WORKER_MODE_TRAIN = 0, WORKER_MODE_EVAL = 1, WORKER_MODE_INFERENCE = 2 };

#define WORKER_MAX_OPTS (JOB_MAX_OPTS + 24)

/* Fills o with the option table bound to *cfg (parse it with tr_opt_parse,
 * release it with tr_opt_release, then call worker_opts_resolve). */
void worker_opts_fill(struct worker_cfg *cfg, struct tr_opt o[WORKER_MAX_OPTS]);

/* What the parsed flags mean together, after tr_opt_parse: --resume [RUN] (the
 * old boolean's words too: --resume=true, --no_resume, TR_RESUME=false) sets
 * cfg->resume; --resume RUN continues run RUN, the same as --run_name RUN
 * --resume (cfg->run_name becomes a copy of RUN, freed by tr_opt_release); a
 * --dataset_path without --dataset_type takes the type its files mean
 * (job_infer_dataset_type). TR_ERR_ARG (logged) when --run_name names another
 * run or the path holds no dataset; TR_ERR_NOMEM. */
enum tr_status worker_opts_resolve(struct worker_cfg *cfg) TR_WUR;

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

#ifdef __cplusplus
}
#endif
#endif
