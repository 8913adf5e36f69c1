/* plan.c: per-worker bytes from the trainer's own sizing functions. It counts
 * what terarec allocates through tr_malloc/tr_big_alloc and its backend, not the
 * memory of the libraries it calls (MPI, oneDNN, CUDA context) nor memory-mapped
 * dataset files. */
#define TR_SUBSYS TR_SUB_TRAIN
#include "plan.h"

#include <string.h>

#include "../common/check.h"
#include "../loader_svc/batch.h"
#include "dlrm.h"
#include "hybrid.h"
#include "shard.h"

int plan_threads(const struct job_cfg *job, int cpus, int workers_per_node)
{
    return job->threads > 0 ? job->threads : TR_MAX(1, cpus / TR_MAX(1, workers_per_node));
}

enum tr_status plan_worker_bytes(const struct job_cfg *job, const struct plan_shape *s, const struct kern_backend *be,
                                 int world, int rank, struct plan_worker *w)
{
    memset(w, 0, sizeof *w);
    w->rank = rank;
    struct shard_plan sp;
    TR_CHECK(shard_plan_make(&sp, job->columnwise_split ? SHARD_COLUMNWISE : SHARD_TABLEWISE, world, rank,
                             s->ntables, s->rows, job->embedding_dim, s->num_features > 0,
                             job->data_parallel_bottom_mlp));
    struct dlrm_cfg mc;
    dlrm_cfg_from_job(job, s->num_features, s->ntables, s->rows, &sp, &mc);
    struct dlrm_bytes b;
    dlrm_plan_bytes(&mc, be, &b);
    for (int t = 0; t < s->ntables; t++) {
        int held = sp.mode == SHARD_COLUMNWISE ? shard_width(&sp, rank) > 0 : world == 1 || sp.owner[t] == rank;
        if (held) {
            w->tables_held++;
            w->rows_held += s->rows[t];
        }
    }
    w->embeddings = b.embeddings - b.emb_state;
    w->opt_state = b.emb_state + b.dense_state;
    w->mlp = b.dense - b.dense_state;
    w->workspace = b.workspace;
    w->activations = b.activations - b.workspace;
    w->alltoall = hybrid_buffer_bytes(&sp, s->ntables, job->embedding_dim, mc.max_global);
    w->data = batch_bytes(mc.max_global, s->num_features, s->ntables) * (rank == 0 ? 2 : 1);
    w->eval = rank == 0 ? 2 * s->test_samples * (int64_t)sizeof(float) : 0;
    w->total = w->embeddings + w->opt_state + w->mlp + w->workspace + w->activations + w->alltoall + w->data +
               w->eval;
    shard_plan_release(&sp);
    return TR_OK;
}
