/* plan.h: the memory plan of a training job, per worker, before anything is
 * allocated: the same sizing code the trainer allocates with (dlrm_plan_bytes,
 * hybrid_buffer_bytes, tr_batch_bytes), evaluated for every rank of a cluster
 * shape. `terarec plan` prints it; the trainer logs it beside its measured peak. */
#ifndef TR_PLAN_H
#define TR_PLAN_H

#include <stdint.h>

#include "../common/status.h"
#include "../kernels/kern.h"
#include "dlrm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct plan_in {
    int ntables;
    const int64_t *cards;       /* (ntables), borrowed */
    int num_features;
    int emb_dim;
    int nbottom, bottom[DLRM_MAX_LAYERS];
    int ntop, top[DLRM_MAX_LAYERS];
    enum kern_optim optim;
    int64_t batch, valid_batch;  /* global */
    int64_t test_samples;        /* evaluation buffers on rank 0 */
    int world;
    int columnwise, dp_bottom;
    int threads;                 /* CPU threads per worker (embedding workspace slots) */
};

struct plan_worker {
    int rank;
    int tables_held;
    int64_t rows_held;           /* embedding rows held (a column slice counts its rows) */
    int64_t embeddings;          /* table values */
    int64_t opt_state;           /* Adagrad state: embeddings and MLPs */
    int64_t mlp;                 /* MLP replica: parameters and gradients */
    int64_t activations;         /* activations of the largest local batch */
    int64_t workspace;           /* embedding update workspace */
    int64_t alltoall;            /* all-to-all buffers (and a model-parallel bottom output) */
    int64_t data;                /* training and evaluation batch buffers */
    int64_t eval;                /* logits and labels of the test set (rank 0) */
    int64_t total;
};

/* Fills *w with rank `rank`'s bytes. TR_ERR_ARG on an impossible shape (logged,
 * naming the flag), TR_ERR_NOMEM. */
enum tr_status plan_worker_bytes(const struct plan_in *in, int rank, struct plan_worker *w) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
