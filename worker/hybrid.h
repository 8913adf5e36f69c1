/* hybrid.h: the hybrid-parallel training step (DESIGN.md section 3): embeddings
 * model-parallel (column-wise or table-wise), MLPs data-parallel, an all-to-all
 * between them. Every rank holds the same global batch (rank 0 broadcasts it);
 * rank r computes the dense part for its slice [b0(r), b0(r+1)); the loss is the
 * mean over the global batch, so N workers train the same model as one. */
#ifndef TR_HYBRID_H
#define TR_HYBRID_H

#include <stdint.h>

#include "../common/status.h"
#include "../loader_svc/batch.h"
#include "comm.h"
#include "dlrm.h"
#include "shard.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hybrid {
    struct dlrm *m;               /* borrowed */
    struct comm *c;               /* borrowed */
    const struct shard_plan *p;   /* borrowed */
    int64_t max_global;
    float *sbuf;                  /* (max_global, send width): this rank's gathered columns/tables */
    float *rbuf;                  /* (max local slice, n * D): what the other ranks sent */
    float *bot;                   /* (max_global, D): model-parallel bottom output (rank 0), or NULL */
    size_t sbuf_bytes, rbuf_bytes, bot_bytes;
    int64_t *scnt, *sdsp, *rcnt, *rdsp; /* (world) all-to-all counts and displacements */
    double t_exchange;            /* seconds in collectives (all-to-all, all-reduce) */
    double t_pack;                /* seconds assembling and packing all-to-all buffers */
};

/* Per-rank bytes of the all-to-all buffers for a plan (the memory plan uses it). */
int64_t hybrid_buffer_bytes(const struct shard_plan *p, int ntables, int dim, int64_t max_global);

/* Creates the step for model m (built with the same plan) on communicator c.
 * TR_ERR_NOMEM; TR_ERR_ARG when the plan and the model disagree. */
enum tr_status hybrid_new(struct dlrm *m, struct comm *c, const struct shard_plan *p, int64_t max_global,
                          struct hybrid **out) TR_WUR;
void hybrid_free(struct hybrid **h);

/* Forward over the global batch b (the same on every rank): on return this rank's
 * slice of logits is dlrm_logits(m), shard_slice_start(b->n, ...) apart. */
enum tr_status hybrid_forward(struct hybrid *h, const struct tr_batch *b) TR_WUR;

/* One training step on the global batch b; *loss is the global mean loss, the
 * same on every rank. Errors from the kernels (TR_ERR_RANGE: a bad id, logged)
 * and from the collectives. */
enum tr_status hybrid_train_step(struct hybrid *h, const struct tr_batch *b, float lr, double *loss) TR_WUR;

/* Broadcasts batch b from rank 0 to every rank (b must have the same capacity and
 * shape everywhere). */
enum tr_status hybrid_bcast_batch(struct comm *c, struct tr_batch *b) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
