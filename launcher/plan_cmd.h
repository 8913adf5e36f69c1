/* plan_cmd.h: the `terarec plan` subcommand: per-worker memory of a job before
 * anything is allocated. Its model, batch, data and parallelism flags are the
 * job's own declarations (common/job.h), the ones terarec-worker takes. */
#ifndef TR_PLAN_CMD_H
#define TR_PLAN_CMD_H

#include <stdint.h>

#include "../common/job.h"
#include "../common/param.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The groups of job flags `terarec plan` takes. */
#define PLAN_CMD_JOB_GROUPS (JOB_DATA | JOB_BATCH | JOB_MODEL | JOB_PARALLEL)

struct plan_cmd_cfg {
    struct job_cfg job;
    int64_t test_samples;
    int nodes, per_node;
    int64_t memory;         /* per worker (its backend's memory: GPU memory on cuda); 0: no limit */
    int64_t host_memory;    /* host memory per node; 0: no limit */
    int64_t disk;           /* local disk per node for --table_store file:DIR; 0: no limit */
    int fit;                /* choose --table_store and --embedding_cache that fit */
    int json;
    char *checkpoint_dir; /* the workers' flag: the job saves checkpoints (plan.h counts their staging) */
    int checkpoints;      /* --checkpoints, its older spelling */
};

#define PLAN_CMD_MAX_OPTS (JOB_MAX_OPTS + 12)

/* Fills o with the option table bound to *c (parse with tr_opt_parse, release
 * with tr_opt_release). */
void plan_cmd_opts(struct plan_cmd_cfg *c, struct tr_opt o[PLAN_CMD_MAX_OPTS]);

/* Runs `terarec plan ARGS` (argv[0] = "plan"); returns the exit status
 * (tr_status_exit_code): 0 every worker fits, 1 one does not (or another
 * failure), 2 bad usage. With --fit it first chooses where the tables live and
 * their cache: the backend's memory when they fit there, else (given no
 * --table_store) a cache over host memory (a backend with memory of its own),
 * else over a local disk, each with the largest --embedding_cache that fits. */
int plan_cmd_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
