/* worker.c: terarec-worker's options (the job's, from common/job.h, plus its own)
 * and the training loop over the pieces of train.h. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "worker.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "train.h"

void worker_opts_fill(struct worker_cfg *c, struct tr_opt o[WORKER_MAX_OPTS])
{
    int k = job_opts(&c->job, JOB_ALL, o);
    const struct tr_opt own[] = {
        {"print_freq", TR_OPT_INT64, &c->print_freq, "1000", "steps between progress lines and log records", 1,
         1e15, NULL, NULL, 0},
        {"benchmark_warmup_steps", TR_OPT_INT64, &c->benchmark_warmup_steps, "100",
         "steps left out of the throughput figure", 0, 1e15, NULL, NULL, 0},
        {"dump_weights", TR_OPT_PATH, &c->dump_weights, NULL,
         "after training, write each worker's weights to DIR/rank<r>.bin (for tests)", 1, 0, NULL, NULL, 0},
        {"log_path", TR_OPT_PATH, &c->log_path, "dlrm_tf_log.json", "DLLogger JSON-lines log ('' disables it)", 1,
         0, NULL, NULL, 0},
        {"loader", TR_OPT_STRING, &c->loader, NULL,
         "shm:NAME: take batches from 'terarec-loader --ring NAME' (default: rank 0 reads the dataset itself)", 1, 0,
         NULL, NULL, 0},
        {"loader_timeout", TR_OPT_DOUBLE, &c->loader_timeout, "60", "seconds rank 0 waits for the loader's ring", 0,
         1e9, NULL, NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0},
    };
    TR_ASSERT(k + (int)TR_ARRAY_SIZE(own) <= WORKER_MAX_OPTS);
    memcpy(o + k, own, sizeof own);
}

enum tr_status worker_check_outputs(const struct worker_cfg *c, int rank)
{
    enum tr_status rc = TR_OK;
    if (rank == 0 && c->log_path && *c->log_path)
        rc = tr_file_probe_write(c->log_path, "--log_path");
    if (rc == TR_OK && c->dump_weights && *c->dump_weights) {
        /* the longest name a rank's dump takes: rank<r>.bin.tmp-<pid> (file.h) */
        char name[64], *path;
        snprintf(name, sizeof name, "rank%d.bin.tmp-%ld", INT32_MAX, (long)getpid());
        rc = tr_file_join_to(c->dump_weights, name, &path);
        if (rc == TR_OK) {
            rc = tr_file_probe_write(path, "--dump_weights");
            tr_free(path);
        }
    }
    /* a flag that names a place this process cannot write is bad input (exit 2) */
    return rc == TR_ERR_IO ? TR_ERR_ARG : rc;
}

enum tr_status worker_run(const struct worker_cfg *c, struct worker_result *res)
{
    struct train T;
    enum tr_status rc = train_open(&T, c);
    while (rc == TR_OK && T.step < T.total) {
        struct batch hdr;
        TR_CHECK_GOTO(train_step(&T, &hdr), rc, exit);
        if (hdr.flags & BATCH_F_CKPT)
            LOG_RANK0("step %lld: checkpoint requested, but this build has no checkpoint store yet: training goes on",
                      (long long)T.step);
        if (hdr.flags & BATCH_F_EVAL) {
            struct train_eval ev;
            TR_CHECK_GOTO(train_evaluate(&T, &ev), rc, exit);
        }
        if ((hdr.flags & BATCH_F_STOP) || T.stop)
            break;
    }
    if (rc == TR_OK)
        rc = train_report(&T);
exit:
    /* a failure only this rank knows about would leave the others waiting in
     * their next collective: end the whole job (the shared verdicts of
     * train_open stop every rank on their own) */
    if (rc != TR_OK && !T.together) {
        if (T.comm.i)
            comm_abort(&T.comm, rc);
        else
            dist_abort(&T.dist, tr_status_exit_code(rc), tr_strerror(rc));
    }
    if (res)
        *res = T.res;
    train_close(&T);
    return rc;
}
