/* solo.h: a training step for one process, assembled from the real parts: the
 * self communicator over a backend, a shard plan of a world of 1, the model and
 * the step (hybrid.h). What tests and benchmarks drive when they need the exact
 * path terarec-worker runs, without a launcher. */
#ifndef TR_SOLO_H
#define TR_SOLO_H

#include "../common/status.h"
#include "../kernels/kern.h"
#include "../loader_svc/batch.h"
#include "comm.h"
#include "dlrm.h"
#include "hybrid.h"
#include "shard.h"

#ifdef __cplusplus
extern "C" {
#endif

struct solo {
    const struct kern_backend *be; /* borrowed */
    struct comm comm;
    struct shard_plan plan;
    struct dlrm *m;
    struct hybrid *h;
};

/* Builds the model of cfg (its plan field is ignored) and its step on backend be
 * (borrowed; it must outlive the solo). columnwise picks the split mode, which a
 * world of 1 must not notice. Errors of dlrm_new and hybrid_new. Call solo_close
 * whatever it returns. */
enum tr_status solo_open(struct solo *s, const struct dlrm_cfg *cfg, const struct kern_backend *be,
                         int columnwise) TR_WUR;
void solo_close(struct solo *s);

/* Shares a host batch block with the step (hybrid_share_batch); b must have the
 * step's layout: a capacity of the model's max_global (max_batch when 0). */
enum tr_status solo_load(struct solo *s, const struct batch *b) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
