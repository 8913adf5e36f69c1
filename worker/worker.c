/* worker.c: terarec-worker's run: the training loop over the pieces of train.h
 * (its options are options.c's). */
#define TR_SUBSYS TR_SUB_TRAIN
#include "worker.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/check.h"
#include "ckpt.h"
#include "report.h"
#include "train.h"

/* A save after the step just done: every --checkpoint_every steps, or when the
 * source asks (SIGUSR1 to terarec-loader). */
static int save_due(const struct train *T, const struct batch *hdr)
{
    const int64_t every = T->c->checkpoint_every;
    return T->ck && ((hdr->flags & BATCH_F_CKPT) || (every > 0 && T->step % every == 0));
}

static enum tr_status run_train(struct train *T)
{
    TR_CHECK(train_ckpt_open(T));
    if (T->resumed && T->step >= T->total && T->dist.rank == 0) { /* a warning: it reaches the console */
        LOG_WARN("the checkpoint restored is of step %lld and the run has %lld steps: nothing to train",
                 (long long)T->step, (long long)T->total);
        LOG_HINT("--max_steps N (more than %lld) to train it further", (long long)T->step);
    }
    while (T->step < T->total) {
        struct batch hdr;
        TR_CHECK(train_step(T, &hdr));
        report_set_step(T->rep, T->step);
        report_set_device_mem(T->rep, T->be.i->mem_now ? T->be.i->mem_now(T->be.ctx) : -1);
        if (hdr.flags & BATCH_F_CKPT && !T->ck)
            LOG_RANK0("step %lld: checkpoint requested, but this run has no --checkpoint_dir: training goes on",
                      (long long)T->step);
        if (save_due(T, &hdr))
            TR_CHECK(train_ckpt_save(T));
        TR_CHECK(wckpt_events(T->ck, &T->ev));
        if (hdr.flags & BATCH_F_EVAL) {
            struct train_eval ev;
            TR_CHECK(train_evaluate(T, &ev));
        }
        if ((hdr.flags & BATCH_F_STOP) || T->stop)
            break;
    }
    /* the end (or a stop request): the last state is saved and committed */
    if (T->ck && wckpt_last_step(T->ck) != T->step)
        TR_CHECK(train_ckpt_save(T));
    TR_CHECK(wckpt_wait(T->ck));
    TR_CHECK(wckpt_events(T->ck, &T->ev));
    return train_report(T);
}

enum tr_status worker_run(const struct worker_cfg *c, struct worker_result *res)
{
    struct train T;
    enum tr_status rc = train_open(&T, c);
    if (rc == TR_OK)
        rc = train_ckpt_restore(&T);
    if (rc == TR_OK)
        report_set_step(T.rep, T.step);
    if (rc == TR_OK && T.resumed && T.dist.rank == 0) /* the launcher's record of where it resumed */
        report_set_resumed(T.rep, T.step, T.resume_pos.epoch, T.resume_pos.index);
    if (rc == TR_OK && c->mode == WORKER_MODE_EVAL) {
        struct train_eval ev;
        rc = train_evaluate(&T, &ev);
        if (rc == TR_OK)
            LOG_RANK0("Evaluation completed, AUC: %.6f, test_loss: %.6f", ev.auc, ev.logloss);
    } else if (rc == TR_OK && c->mode == WORKER_MODE_INFERENCE) {
        rc = train_infer(&T, c->job.max_steps >= 0 ? c->job.max_steps : 1000);
    } else if (rc == TR_OK) {
        rc = run_train(&T);
    }
    /* a failure only this rank knows about would leave the others waiting in
     * their next collective: end the whole job (the shared verdicts of
     * train_open stop every rank on their own); the launcher hears first */
    if (rc != TR_OK)
        report_error(T.rep, rc);
    if (rc != TR_OK && !T.together) {
        if (T.comm.i)
            comm_abort(&T.comm, rc);
        else
            dist_abort(&T.dist, tr_status_exit_code(rc), tr_strerror(rc));
    }
    if (res)
        *res = T.res;
    wckpt_close(&T.ck);
    report_bye(T.rep, tr_status_exit_code(rc)); /* train_close frees it */
    train_close(&T);
    return rc;
}
