/* plan.c: per-worker bytes from the trainer's own sizing functions. It counts
 * what terarec allocates through tr_malloc/tr_big_alloc, not the memory of the
 * libraries it calls (MPI, oneDNN, CUDA context) nor memory-mapped dataset files. */
#include "plan.h"

#include <string.h>

#include "../common/check.h"
#include "../loader_svc/batch.h"
#include "hybrid.h"
#include "shard.h"

enum tr_status plan_worker_bytes(const struct plan_in *in, int rank, struct plan_worker *w)
{
    memset(w, 0, sizeof *w);
    w->rank = rank;
    struct shard_plan sp;
    TR_CHECK(shard_plan_make(&sp, in->columnwise ? SHARD_COLUMNWISE : SHARD_TABLEWISE, in->world, rank,
                             in->ntables, in->cards, in->emb_dim, in->num_features > 0, in->dp_bottom));
    struct dlrm_cfg mc;
    memset(&mc, 0, sizeof mc);
    mc.num_features = in->num_features;
    mc.ntables = in->ntables;
    mc.cards = in->cards;
    mc.emb_dim = in->emb_dim;
    mc.nbottom = in->num_features > 0 ? in->nbottom : 0;
    memcpy(mc.bottom, in->bottom, sizeof mc.bottom);
    mc.ntop = in->ntop;
    memcpy(mc.top, in->top, sizeof mc.top);
    mc.optim = in->optim;
    mc.max_global = TR_MAX(in->batch, in->valid_batch);
    mc.max_batch = shard_slice_start(mc.max_global, in->world, 1);
    mc.plan = &sp;
    struct kern_backend be;
    kern_backend_cpu(&be, in->threads > 0 ? in->threads : 1);
    struct dlrm_bytes b;
    dlrm_plan_bytes(&mc, &be, &b);
    for (int t = 0; t < in->ntables; t++) {
        int held = sp.mode == SHARD_COLUMNWISE ? shard_width(&sp, rank) > 0 : in->world == 1 || sp.owner[t] == rank;
        if (held) {
            w->tables_held++;
            w->rows_held += in->cards[t];
        }
    }
    w->embeddings = b.embeddings - b.emb_state;
    w->opt_state = b.emb_state + b.dense_state;
    w->mlp = b.dense - b.dense_state;
    w->workspace = b.workspace;
    w->activations = b.activations - b.workspace;
    w->alltoall = in->world > 1 ? hybrid_buffer_bytes(&sp, in->ntables, in->emb_dim, mc.max_global) : 0;
    w->data = tr_batch_bytes(in->batch, in->num_features, in->ntables) +
              tr_batch_bytes(in->valid_batch, in->num_features, in->ntables);
    w->eval = rank == 0 ? 2 * in->test_samples * (int64_t)sizeof(float) : 0;
    w->total = w->embeddings + w->opt_state + w->mlp + w->workspace + w->activations + w->alltoall + w->data +
               w->eval;
    shard_plan_release(&sp);
    return TR_OK;
}
