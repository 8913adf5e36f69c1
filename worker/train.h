/* train.h: the pieces of a training run, in the order the worker calls them:
 *   train_open      bootstrap (PMIx, backend, communicator), the data source on
 *                   rank 0, the plan, the model, the step, the event sinks
 *   train_step      one step: rank 0 reads the next batch and sets its flags
 *                   (evaluate, stop), every rank trains on it; progress events
 *   train_evaluate  a pass over the test split: exact AUC and log loss
 *   train_report    the summary (console, events), the memory report, the
 *                   weight dump
 *   train_close     releases everything, whatever happened before.
 * The loop between them lives in worker.c; checkpoints and the loader service
 * plug in here. */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include <stdint.h>

#include "../common/status.h"
#include "../kernels/kern.h"
#include "../loader_svc/batch.h"
#include "../loader_svc/source.h"
#include "comm.h"
#include "dist.h"
#include "dlrm.h"
#include "events.h"
#include "hybrid.h"
#include "lr_sched.h"
#include "options.h"
#include "report.h"
#include "shard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Summary of a finished run. */
struct worker_result {
    int64_t steps;
    double first_loss, last_loss; /* mean loss of the first and last print interval */
    double best_auc, last_auc, last_logloss;
    double throughput;            /* samples/s over the timed steps */
    double mean_step_ms;
    int reached_threshold;        /* stopped early by --auc_threshold */
};

struct train {
    const struct worker_cfg *c;
    struct worker_result res;
    struct dist_info dist;
    struct kern_backend be;
    struct comm comm;
    struct shard_plan plan;
    struct source src;          /* rank 0 reads; the other ranks know its shape only */
    int64_t *rows;              /* (ntables) on ranks other than 0: the tables' rows */
    int32_t *hot;               /* (ntables) on ranks other than 0: the tables' hotness */
    uint8_t *mean;              /* (ntables) the tables' pooling (--pooling): 1 mean, 0 sum */
    struct dlrm *m;
    struct hybrid *h;
    struct batch *blk;          /* rank 0: the host block batches are read into, in the
                                   backend's host memory (page-locked on CUDA: its copy to
                                   the GPU runs at the link's speed) */
    struct batch *blk_ahead;    /* rank 0, with a tier (hybrid_shares_ahead): the block of the
                                   batch read and shared ahead */
    int64_t blk_bytes;          /* their allocation */
    int ahead;                  /* the next batch to train is shared already (every rank) */
    uint32_t carry_flags;       /* rank 0: the flags of a batch read ahead and dropped */
    struct batch hdr;           /* header of the last shared batch */
    struct events ev;
    struct report *rep;         /* the launcher (--events_addr); NULL without one */
    struct lr_sched sched;
    float *scores, *labels;     /* (test samples) on rank 0, in the backend's memory */
    int64_t eval_cap;           /* their length */
    int64_t step;               /* steps done */
    int64_t total;              /* steps to run */
    int threads;
    char threads_why[192]; /* what the thread count was made from (plan_threads_local) */
    int stop;                   /* an evaluation reached --auc_threshold */
    int together;               /* the last error was reached by every rank alike (a shared
                                   verdict): they stop together, without comm_abort */
    /* measurements of the training steps */
    double t_run0, t_timed, t_data, interval_loss;
    int64_t timed_steps, interval_n;
    double a2a_bytes, ar_bytes, a2a_sec, ar_sec;
    char run_id[128];
    struct comm_setup comm_setup; /* which library carries the collectives (comm_choose) */
    /* checkpoints (ckpt.h) */
    struct wckpt *ck;           /* NULL: the run does not save */
    int resumed;                /* the state came from a checkpoint */
    struct source_pos resume_pos; /* its data position */
};

struct train_eval {
    double auc, logloss, seconds;
    int64_t samples;
};

/* Opens everything a run needs (see above). Before anything large is allocated,
 * every rank checks that all ranks run the same options and build (comm_agree)
 * and that every rank's memory plan fits the memory left to it (MemAvailable,
 * cgroup, ulimit). Errors are logged; call train_close whatever it returns (and,
 * on a world of several ranks, comm_abort first unless T->together). */
enum tr_status train_open(struct train *T, const struct worker_cfg *c) TR_WUR;

/* Runs the next step; *hdr (host) gets the header of its batch, whose flags say
 * what comes next (BATCH_F_EVAL, BATCH_F_STOP), the same on every rank. */
enum tr_status train_step(struct train *T, struct batch *hdr) TR_WUR;

/* Rank 0: the position of the next batch to train (the source's, or of the batch
 * read ahead), what a checkpoint saves. */
void train_data_pos(struct train *T, struct source_pos *p);

/* Evaluates on the whole test split (nothing when it is empty); every rank gets
 * the same result and the same decision to stop (T->stop). */
enum tr_status train_evaluate(struct train *T, struct train_eval *out) TR_WUR;

/* --mode inference: the seed's benchmark over up to nbatches test batches (the
 * pass wraps around): per-batch latency from taking the batch to the logits on
 * rank 0, the first 10 left out; mean throughput, mean and p90/p95/p99 latency
 * and the AUC of the scored samples, on the console and as an event. Collective. */
enum tr_status train_infer(struct train *T, int64_t nbatches) TR_WUR;

/* The end of a run: summary line and event, memory report, weight dump. */
enum tr_status train_report(struct train *T) TR_WUR;

/* Checkpoints (train_ckpt.c, over ckpt.h). train_ckpt_open opens T->ck
 * (wckpt_open; NULL when the run does not save); train_ckpt_save starts a save of
 * the state after T->step steps (wckpt_save). train_ckpt_restore restores the
 * model, T->step, the data position and the first loss from --resume or
 * --restore, when either is given (wckpt_restore), and seeks the data source to
 * the position (rank 0; on terarec-loader's ring, a seek request to the loader).
 * Collective: every rank returns the same status. Errors: those of ckpt.h, and
 * source_seek's for a position outside the dataset (logged). */
enum tr_status train_ckpt_open(struct train *T) TR_WUR;
enum tr_status train_ckpt_save(struct train *T) TR_WUR;
enum tr_status train_ckpt_restore(struct train *T) TR_WUR;

void train_close(struct train *T);

#ifdef __cplusplus
}
#endif
#endif
