/* shard.h: how a model is split over the workers of a job (the seed's rules).
 *   column-wise: every table is split by columns over all ranks; rank r holds
 *     columns [col0[r], col1[r]) of every table; the first D mod N ranks get one
 *     extra column; when N > D the last ranks hold none. The bottom MLP is
 *     data-parallel.
 *   table-wise: whole tables, placed by the seed's greedy distribute_to_buckets;
 *     with a model-parallel bottom MLP (no --data_parallel_bottom_mlp) rank 0
 *     runs it for the whole batch, and for N > 4 rank 0 holds only the bottom MLP.
 * The global batch of B samples is split into contiguous slices, rank r owning
 * samples [b0[r], b0[r+1]) (the first B mod N ranks get one more). */
#ifndef TR_SHARD_H
#define TR_SHARD_H

#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum shard_mode { SHARD_TABLEWISE = 0, SHARD_COLUMNWISE = 1 };

struct shard_plan {
    enum shard_mode mode;
    int world, rank;
    int ntables, dim;
    int has_bottom;    /* the model has numerical features */
    int dp_bottom;     /* bottom MLP data-parallel (always, in column-wise mode) */
    int *col0, *col1;  /* (world) column ranges (column-wise; [0, D) on every rank otherwise) */
    int *owner;        /* (ntables) owning rank (table-wise; -1 in column-wise mode) */
    int *vstart;       /* (world + 1) per-rank vector lists, table-wise: */
    int *vec;          /*   vec[vstart[r] .. vstart[r+1]): table ids in send order; -1 = bottom output */
};

/* Plans a model of `ntables` tables of `rows` rows and dimension `dim` on
 * `world` workers. Errors (logged, naming the flag): TR_ERR_ARG when column-wise
 * mode is asked with a model-parallel bottom MLP and numerical features (as the
 * seed refuses it). Release with shard_plan_release. */
enum tr_status shard_plan_make(struct shard_plan *p, enum shard_mode mode, int world, int rank, int ntables,
                               const int64_t *rows, int dim, int has_bottom, int dp_bottom) TR_WUR;
void shard_plan_release(struct shard_plan *p);

/* Vectors rank r sends per sample in table-wise mode (its tables, plus the bottom
 * output on rank 0 with a model-parallel bottom MLP). */
int shard_nvec(const struct shard_plan *p, int r);

/* Columns rank r holds of each table (column-wise) or D (table-wise owner). */
int shard_width(const struct shard_plan *p, int r);

/* First sample of rank r's slice of a batch of n samples (r = world gives n). */
int64_t shard_slice_start(int64_t n, int world, int r);

/* The seed's distribute_to_buckets: places tables (rows, ntables) into nbuckets
 * buckets; bucket_of[t] receives the bucket of table t and order[] (ntables) the
 * tables in each bucket's append order, bucket by bucket (bucket b's tables are
 * order[start[b] .. start[b+1])). TR_ERR_NOMEM. */
enum tr_status shard_distribute_to_buckets(const int64_t *rows, int ntables, int nbuckets, int *bucket_of,
                                           int *order, int *start) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
