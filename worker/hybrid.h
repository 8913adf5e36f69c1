/* hybrid.h: the training step (DESIGN.md section 3), the one path for every world
 * size: embeddings model-parallel (column-wise or table-wise), MLPs data-parallel,
 * an all-to-all between them; a world of 1 runs it over the self communicator.
 * Every rank holds the same global batch (rank 0 loads it, the step broadcasts
 * it); rank r computes the dense part for its slice [b0(r), b0(r+1)); the loss is
 * the mean over the global batch, so N workers train the same model as one.
 *
 * The batch the step reads is a batch block (loader_svc/batch.h) in the backend's
 * memory, sized for the model's largest global batch; hybrid_share_batch fills it
 * on every rank. The step is opaque and not thread-safe. */
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

struct hybrid;

/* Per-rank bytes of the step's own buffers for a plan: the all-to-all buffers, a
 * model-parallel bottom output and the gathered logits (the memory plan uses it;
 * the batch block is batch_bytes(max_global, ...)). */
int64_t hybrid_buffer_bytes(const struct shard_plan *p, int ntables, int dim, int64_t max_global);

/* Creates the step for model m (built with plan p) on communicator c; all three
 * are borrowed and must outlive the step. TR_ERR_NOMEM; TR_ERR_ARG when the plan,
 * the communicator and the model disagree. */
enum tr_status hybrid_new(struct dlrm *m, struct comm *c, const struct shard_plan *p, struct hybrid **out) TR_WUR;
void hybrid_free(struct hybrid **h);

/* Overlap the step's collectives with compute (hybrid.c explains what with what):
 * on by default; off runs every collective to its end where it is called. */
void hybrid_set_overlap(struct hybrid *h, int on);

/* Bytes of the step's batch block: batch_bytes(max_global, num_features, ntables). */
int64_t hybrid_batch_bytes(const struct hybrid *h);

/* Collective: rank 0 passes the batch it read (host memory, a block of
 * hybrid_batch_bytes bytes), the other ranks NULL; afterwards every rank's step
 * holds that batch in backend memory and *hdr (host) a copy of its header.
 * Errors: TR_ERR_FORMAT (rank 0's block has another layout, or the received
 * header is not a valid block; logged), collective errors. */
enum tr_status hybrid_share_batch(struct hybrid *h, const struct batch *host, struct batch *hdr) TR_WUR;

/* Look-ahead, for a model with tables in a tier (tier.h): the trainer shares the
 * next batch while this one trains, so that the tier fetches its rows meanwhile.
 *   hybrid_shares_ahead  whether the step wants it (the model has a tier)
 *   hybrid_share_next    collective like hybrid_share_batch, into a second block: the
 *                        batch the next hybrid_advance makes current; the tier starts
 *                        fetching its rows (TR_ERR_ARG without a tier)
 *   hybrid_advance       makes that batch the shared one, its rows resident (*hdr its
 *                        header); TR_ERR_ARG when none was shared ahead
 *   hybrid_drop_next     forgets it (an evaluation comes between; hybrid_share_batch
 *                        forgets it too)
 * With a tier, hybrid_share_batch and hybrid_advance make every row of their batch
 * resident (tier_begin): TR_ERR_RANGE there for an id outside its table (logged as
 * hybrid_forward logs it), TR_ERR_IO from the store. The results are those of
 * sharing each batch when it is trained. */
int hybrid_shares_ahead(const struct hybrid *h);
enum tr_status hybrid_share_next(struct hybrid *h, const struct batch *host, struct batch *hdr) TR_WUR;
enum tr_status hybrid_advance(struct hybrid *h, struct batch *hdr) TR_WUR;
void hybrid_drop_next(struct hybrid *h);

/* Forward over the shared batch: on return this rank's slice of logits is in the
 * model (DLRM_LOGITS). TR_ERR_RANGE: a categorical id outside its table (logged
 * with the table, the sample, the value and the batch), collective errors. */
enum tr_status hybrid_forward(struct hybrid *h) TR_WUR;

/* Loss and backward of the last forward: *loss (host) is the global mean loss, the
 * same on every rank; the dense gradients are summed over the ranks and the
 * embedding gradients are back with their owners. No parameter changes. */
enum tr_status hybrid_backward(struct hybrid *h, double *loss) TR_WUR;

/* Numeric guards of the last backward, on this rank: its own loss sum before the
 * all-reduce, and whether its gradients of the interaction input (dX: every
 * embedding vector and the bottom output of its slice, what the embedding
 * gradients are made of) hold NaN or inf. A rank whose dX is not finite adds NaN
 * to the loss all-reduce, so the loss of hybrid_backward is NaN on every rank and
 * every rank stops at the same step (no extra collective). */
struct hybrid_guard {
    double local_loss_sum;
    int emb_grad_nonfinite;
};
void hybrid_get_guard(const struct hybrid *h, struct hybrid_guard *g);

/* After a backward whose guard says emb_grad_nonfinite: *table = the first table
 * (config order) whose gradient on this rank holds NaN or inf, -1 for the bottom
 * MLP output, -2 when none does. Errors of the backend. */
enum tr_status hybrid_find_nonfinite_grad(struct hybrid *h, int *table) TR_WUR;

/* Collective: *v (host) = the sum of every rank's *v, through the step's
 * one-double buffer (the communicator counts it like any all-reduce). For rare
 * control decisions, e.g. the periodic weight check. Collective errors. */
enum tr_status hybrid_sum_ranks(struct hybrid *h, double *v) TR_WUR;

/* The optimizer step of the last backward with learning rate lr: the sparse
 * embedding update by each table's owner and the dense update. Collective with
 * row-wise Adagrad on column slices (the per-row sums of squares are added over
 * the ranks), local otherwise. */
enum tr_status hybrid_update(struct hybrid *h, float lr) TR_WUR;

/* forward + backward + update. */
enum tr_status hybrid_train_step(struct hybrid *h, float lr, double *loss) TR_WUR;

/* Collective, after a forward: rank 0 receives the logits of the whole batch in
 * dst (n floats of the shared batch): host memory with KERN_D2H, the backend's
 * memory with KERN_D2D; other ranks pass NULL. */
enum tr_status hybrid_gather_logits(struct hybrid *h, float *dst, enum kern_copy_dir dir) TR_WUR;

/* Dirty-row tracking for incremental checkpoints: from now on, every update
 * marks, for each table held here (a slice or whole), the blocks of
 * block_rows[t] rows its batch touched (mark_rows), one byte per block in
 * backend memory. TR_ERR_ARG when already tracking; TR_ERR_NOMEM, backend errors. */
enum tr_status hybrid_track_dirty(struct hybrid *h, const int64_t *block_rows) TR_WUR;
/* Blocks of table t's bitmap (0: not tracked, or a table not held here). */
int64_t hybrid_dirty_blocks(const struct hybrid *h, int t);
/* Copies table t's bitmap to host (hybrid_dirty_blocks bytes) and clears it from
 * zero (host, as many zero bytes). TR_ERR_ARG when t is not tracked; backend errors. */
enum tr_status hybrid_take_dirty(struct hybrid *h, int t, uint8_t *host, uint8_t *zero) TR_WUR;

enum hybrid_timer {
    HYBRID_T_EXCHANGE = 0, /* collectives of the step (all-to-all, all-reduce) */
    HYBRID_T_PACK,         /* assembling and packing all-to-all buffers */
    HYBRID_T_BATCH,        /* the batch into the shared block and its broadcast */
    HYBRID_T_GUARD,        /* the numeric guard of the backward (dx finite) */
    HYBRID_T_TIER,         /* making a batch's rows resident in the tier and starting the
                              next one's fetch (the step's wait on the table store) */
    HYBRID_T_COUNT_
};
/* Seconds since the last reset (the backend synchronised before each reading). */
double hybrid_seconds(const struct hybrid *h, enum hybrid_timer t);
void hybrid_reset_timers(struct hybrid *h);

#ifdef __cplusplus
}
#endif
#endif
