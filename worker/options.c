/* options.c: terarec-worker's option table (the job's declarations, common/job.h,
 * the checkpoint store's, and the worker's own, each with its properties for
 * terarec train and the ranks' agreement), what --resume means once parsed, and
 * the check that the outputs can be written. It does not train: worker.c does. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "options.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"

static const char *const mode_choices[] = {"train", "eval", "inference", NULL};

void worker_opts_fill(struct worker_cfg *c, struct tr_opt o[WORKER_MAX_OPTS])
{
    int k = job_opts(&c->job, JOB_ALL, o);
    struct tr_opt store[2]; /* --checkpoint_dir, --checkpoint_token_file: every program's */
    const int nstore = job_store_opts(&c->checkpoint_dir, &c->checkpoint_token_file, store);
    TR_ASSERT(nstore == 2);
    const struct tr_opt own[] = {
        {"print_freq", TR_OPT_INT64, &c->print_freq, "1000", "steps between progress lines and log records", 1,
         1e15, NULL, NULL, 0, NULL, 0},
        {"benchmark_warmup_steps", TR_OPT_INT64, &c->benchmark_warmup_steps, "100",
         "steps left out of the throughput figure and the phase split (ms/step)", 0, 1e15, NULL, NULL, 0, NULL, 0},
        {"dump_weights", TR_OPT_PATH, &c->dump_weights, NULL,
         "after training, write each worker's weights to DIR/rank<r>.bin (for tests)", 1, 0, NULL, NULL, 0, NULL, 0},
        {"log_path", TR_OPT_PATH, &c->log_path, "dlrm_tf_log.json", "DLLogger JSON-lines log ('' disables it)", 1,
         0, NULL, NULL, 0, NULL, TR_OPT_LAUNCHER_MAPS},
        {"loader", TR_OPT_STRING, &c->loader, NULL,
         "shm:NAME: take batches from 'terarec-loader --ring NAME' (default: rank 0 reads the dataset itself)", 1, 0,
         NULL, NULL, 0, NULL, TR_OPT_LAUNCHER_SETS},
        {"loader_timeout", TR_OPT_DOUBLE, &c->loader_timeout, "60", "seconds rank 0 waits for the loader's ring", 0,
         1e9, NULL, NULL, 0, NULL, 0},
        {"mode", TR_OPT_ENUM, &c->mode, "train",
         "train; eval: one evaluation of the (restored) model on the test split; inference: the latency benchmark "
         "over --max_steps test batches (default 1000)",
         TR_OPT_NOBOUNDS, mode_choices, NULL, 0, NULL, 0},
        store[0],
        store[1],
        {"checkpoint_every", TR_OPT_INT64, &c->checkpoint_every, "0",
         "steps between checkpoints to --checkpoint_dir (0: at the end only; a run also saves at its end and on a "
         "stop request)",
         0, 1e15, NULL, NULL, 0, NULL, 0},
        {"full_checkpoint_every", TR_OPT_INT64, &c->full_checkpoint_every, "10",
         "every N-th save copies and hashes everything (the others only the row blocks that changed)", 1, 1e9, NULL,
         NULL, 0, NULL, 0},
        {"checkpoint_async", TR_OPT_BOOL, &c->checkpoint_async, "true",
         "hash and store checkpoints on a background thread while training goes on",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"checkpoint_incremental", TR_OPT_BOOL, &c->checkpoint_incremental, "true",
         "save only the embedding row blocks updated since the last save", TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"checkpoint_chunk_bytes", TR_OPT_BYTES, &c->checkpoint_chunk_bytes, "1M",
         "bytes of a checkpoint chunk (rows of a table slice are grouped to about this size)", 4096, 1073741824.0,
         NULL, NULL, 0, NULL, 0},
        {"checkpoint_timeout", TR_OPT_DOUBLE, &c->checkpoint_timeout, "600",
         "seconds rank 0 waits for every rank's part of a checkpoint (0: forever)", 0, 1e9, NULL, NULL, 0, NULL, 0},
        {"keep_checkpoints", TR_OPT_INT64, &c->keep_checkpoints, "3",
         "after each commit the store keeps this run's N newest committed checkpoints and removes the older "
         "manifests (never the latest; their chunks go with the next `terarec ckpt gc`); 0: keep all",
         0, 1e6, NULL, NULL, 0, NULL, 0},
        /* terarec train sets these two on its workers (the checkpoint run of its
         * history's run) and declares its own: --run_name, --resume RUN */
        {"run_name", TR_OPT_STRING, &c->run_name, NULL,
         "the run's name in the checkpoint store (default: a generated id, printed at start)", TR_OPT_NOBOUNDS, NULL,
         "name", 0, NULL, TR_OPT_LAUNCHER_SETS},
        {"resume", TR_OPT_STRING, &c->resume_arg, NULL,
         "[RUN]: continue run RUN (bare: --run_name) from its last committed checkpoint in --checkpoint_dir, saving "
         "to it (from step 0 when it has none); --resume RUN is --run_name RUN --resume",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, "true", TR_OPT_LAUNCHER_SETS},
        {"restore", TR_OPT_STRING, &c->restore, NULL,
         "URL_or_PATH#RUN@STEP: start from that checkpoint (@STEP optional: the run's latest; #RUN optional when "
         "the store holds one run)",
         TR_OPT_NOBOUNDS, NULL, "restore_checkpoint_path", 0, NULL, 0},
        {"events_addr", TR_OPT_STRING, &c->events_addr, NULL,
         "the launcher's address (tcp:HOST:PORT or unix:PATH): every rank says hello and beats every second, rank 0 "
         "sends its events; terarec train sets it",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, TR_OPT_LAUNCHER_SETS},
        {"events_token_file", TR_OPT_PATH, &c->events_token_file, NULL,
         "file holding the launcher's token, sent in the hello (needed with --events_addr)", 1, 0, NULL, NULL, 0,
         NULL, TR_OPT_LAUNCHER_SETS},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0},
    };
    TR_ASSERT(k + (int)TR_ARRAY_SIZE(own) <= WORKER_MAX_OPTS);
    memcpy(o + k, own, sizeof own);
}

enum tr_status worker_opts_resolve(struct worker_cfg *c)
{
    /* --dataset_path alone: its files say which type (the seed's commands) */
    TR_CHECK(job_infer_dataset_type(&c->job, NULL, NULL));
    TR_CHECK(job_apply_preset(&c->job)); /* --preset: the flags not given */
    const char *arg = c->resume_arg;
    c->resume = 0;
    if (!arg)
        return TR_OK;
    c->resume = 1;
    if (!*arg || tr_opt_parse_bool(arg, &c->resume) == 0) /* bare, or the boolean it was */
        return TR_OK;
    if (c->run_name && *c->run_name && strcmp(c->run_name, arg) != 0) {
        LOG_ERROR("--resume %s and --run_name %s name different runs", arg, c->run_name);
        LOG_HINT("--resume RUN continues run RUN and saves to it: drop --run_name, or give --run_name %s --resume",
                 arg);
        return TR_ERR_ARG;
    }
    char *run = tr_strdup(arg);
    if (!run)
        return TR_ERR_NOMEM;
    tr_free(c->run_name);
    c->run_name = run;
    return TR_OK;
}

enum tr_status worker_check_outputs(const struct worker_cfg *c, int rank)
{
    enum tr_status rc = TR_OK;
    if (rank == 0 && c->log_path && *c->log_path)
        rc = tr_file_probe_write(c->log_path, "--log_path");
    if (rc == TR_OK && c->dump_weights && *c->dump_weights) {
        /* the longest name a rank's dump takes: rank<r>.bin.tmp-<pid>-<n> (file.h) */
        char name[80], *path;
        snprintf(name, sizeof name, "rank%d.bin.tmp-%ld-%llu", INT32_MAX, (long)getpid(), ULLONG_MAX);
        rc = tr_file_join_to(c->dump_weights, name, &path);
        if (rc == TR_OK) {
            rc = tr_file_probe_write(path, "--dump_weights");
            tr_free(path);
        }
    }
    /* a flag that names a place this process cannot write is bad input (exit 2) */
    return rc == TR_ERR_IO ? TR_ERR_ARG : rc;
}
