/* train_ckpt.c: a training run's checkpoints (train.h): feeds the checkpoint
 * module (ckpt.h) the pieces of struct train it needs, and applies what a
 * restore brought back to the run: its step, its data position (the source's
 * seek, or the check of the loader's first batch) and its results so far. The
 * saving and restoring themselves are ckpt.c's and ckpt_restore.c's. */
#define TR_SUBSYS TR_SUB_CKPT
#include "train.h"

#include <math.h>

#include "../common/check.h"
#include "ckpt.h"

/* The run, as the checkpoints see it (pointers into T, valid while T is open). */
static void ckpt_run(struct train *T, struct wckpt_run *r)
{
    *r = (struct wckpt_run){.c = T->c, .rank = T->dist.rank, .world = T->dist.world, .run_id = T->run_id,
                            .columnwise = T->plan.mode == SHARD_COLUMNWISE, .num_features = T->src.num_features,
                            .ntables = T->src.ntables, .rows = T->src.rows, .step = T->step, .m = T->m, .h = T->h};
}

enum tr_status train_ckpt_open(struct train *T)
{
    struct wckpt_run r;
    ckpt_run(T, &r);
    return wckpt_open(&r, &T->ck);
}

enum tr_status train_ckpt_save(struct train *T)
{
    struct wckpt_state st = {.step = T->step, .first_loss = T->res.first_loss, .best_auc = T->res.best_auc};
    if (T->dist.rank == 0) {
        struct source_pos p = {0, 0, 0};
        train_data_pos(T, &p);
        st.epoch = p.epoch;
        st.index = p.index;
    }
    return wckpt_save(T->ck, &st);
}

enum tr_status train_ckpt_restore(struct train *T)
{
    const struct worker_cfg *c = T->c;
    if (!c->resume && !(c->restore && *c->restore))
        return TR_OK;
    struct wckpt_run r;
    struct wckpt_restored out;
    ckpt_run(T, &r);
    enum tr_status rc = wckpt_restore(&r, &out);
    if (rc == TR_OK && out.restored) {
        T->step = out.st.step;
        T->resume_pos.split = BATCH_TRAIN;
        T->resume_pos.epoch = out.st.epoch;
        T->resume_pos.index = out.st.index;
        T->resumed = 1;
        if (!isnan(out.st.first_loss))
            T->res.first_loss = out.st.first_loss;
        if (!isnan(out.st.best_auc))
            T->res.best_auc = out.st.best_auc;
    }
    if (rc == TR_OK && out.restored && T->dist.rank == 0) {
        /* the reader seeks; terarec-loader's ring asks the loader to seek */
        if ((rc = source_seek(&T->src, &T->resume_pos)) != TR_OK) {
            LOG_ERROR("restore: the checkpoint's data position (epoch %lld, batch %lld) is outside this dataset",
                      (long long)T->resume_pos.epoch, (long long)T->resume_pos.index);
            LOG_HINT("restore with the dataset and --batch_size the checkpoint was trained with");
        }
    }
    /* every rank read the same manifest, but a chunk or the seek may fail on one */
    return comm_vote(&T->comm, rc, "could not restore the checkpoint", &T->together);
}
