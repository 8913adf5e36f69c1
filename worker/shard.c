/* shard.c: column ranges, the seed's greedy table placement
 * (distributed_utils.distribute_to_buckets / get_device_mapping) and batch
 * slices. Pure functions of their inputs: every rank computes the same plan. */
#define TR_SUBSYS TR_SUB_MODEL
#include "shard.h"

#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"

int64_t shard_slice_start(int64_t n, int world, int r)
{
    int64_t base = n / world, extra = n % world;
    return (int64_t)r * base + (r < extra ? r : extra);
}

int shard_nvec(const struct shard_plan *p, int r)
{
    return p->vstart[r + 1] - p->vstart[r];
}

int shard_width(const struct shard_plan *p, int r)
{
    return p->col1[r] - p->col0[r];
}

enum tr_status shard_distribute_to_buckets(const int64_t *rows, int ntables, int nbuckets, int *bucket_of,
                                           int *order, int *start)
{
    enum tr_status rc = TR_OK;
    int *visit = tr_malloc((size_t)(ntables + 1) * sizeof(int));
    int *list = tr_malloc((size_t)nbuckets * sizeof(int));  /* open buckets, ascending by sum */
    int *final = tr_malloc((size_t)nbuckets * sizeof(int)); /* filled buckets, in fill order */
    int *count = tr_calloc((size_t)nbuckets, sizeof(int));
    int64_t *sum = tr_calloc((size_t)nbuckets, sizeof(int64_t));
    int *members = tr_malloc((size_t)nbuckets * (size_t)(ntables + 1) * sizeof(int));
    int *rank_of = tr_malloc((size_t)nbuckets * sizeof(int));
    if (!visit || !list || !final || !count || !sum || !members || !rank_of) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* tables by cardinality descending, ties by index ascending */
    for (int t = 0; t < ntables; t++)
        visit[t] = t;
    for (int i = 1; i < ntables; i++) { /* insertion sort: stable, tables are few */
        int v = visit[i], j = i - 1;
        while (j >= 0 && rows[visit[j]] < rows[v]) {
            visit[j + 1] = visit[j];
            j--;
        }
        visit[j + 1] = v;
    }
    const int max_size = (ntables + nbuckets - 1) / nbuckets;
    int nopen = nbuckets, nfinal = 0;
    for (int b = 0; b < nbuckets; b++)
        list[b] = b;
    for (int i = 0; i < ntables; i++) {
        int t = visit[i], cur = list[0];
        members[cur * (ntables + 1) + count[cur]++] = t;
        sum[cur] += rows[t];
        for (int k = 1; k < nopen; k++) { /* stable re-sort ascending by sum */
            int v = list[k], j = k - 1;
            while (j >= 0 && sum[list[j]] > sum[v]) {
                list[j + 1] = list[j];
                j--;
            }
            list[j + 1] = v;
        }
        /* a bucket that never moves keeps its place, so re-sorting all is correct */
        if (count[cur] == max_size) {
            int k = 0;
            while (list[k] != cur)
                k++;
            memmove(list + k, list + k + 1, (size_t)(nopen - k - 1) * sizeof(int));
            nopen--;
            final[nfinal++] = cur;
        }
    }
    for (int k = 0; k < nopen; k++)
        final[nfinal++] = list[k];
    TR_ASSERT(nfinal == nbuckets);
    int o = 0;
    for (int r = 0; r < nbuckets; r++) {
        int b = final[r];
        rank_of[b] = r;
        start[r] = o;
        for (int k = 0; k < count[b]; k++) {
            int t = members[b * (ntables + 1) + k];
            order[o++] = t;
            bucket_of[t] = r;
        }
    }
    start[nbuckets] = o;
exit:
    tr_free(visit);
    tr_free(list);
    tr_free(final);
    tr_free(count);
    tr_free(sum);
    tr_free(members);
    tr_free(rank_of);
    return rc;
}

enum tr_status shard_plan_make(struct shard_plan *p, enum shard_mode mode, int world, int rank, int ntables,
                               const int64_t *rows, int dim, int has_bottom, int dp_bottom)
{
    enum tr_status rc = TR_OK;
    memset(p, 0, sizeof *p);
    if (world < 1 || rank < 0 || rank >= world || ntables < 0 || dim < 1)
        return TR_ERR_ARG;
    if (mode == SHARD_COLUMNWISE && has_bottom && !dp_bottom && world > 1) {
        LOG_ERROR("--columnwise_split needs --data_parallel_bottom_mlp when there are numerical features");
        LOG_HINT("add --data_parallel_bottom_mlp (the seed requires the same)");
        return TR_ERR_ARG;
    }
    p->mode = mode;
    p->world = world;
    p->rank = rank;
    p->ntables = ntables;
    p->dim = dim;
    p->has_bottom = has_bottom;
    p->dp_bottom = mode == SHARD_COLUMNWISE || world == 1 || !has_bottom ? 1 : dp_bottom;
    p->col0 = tr_calloc((size_t)world, sizeof(int));
    p->col1 = tr_calloc((size_t)world, sizeof(int));
    p->owner = tr_calloc((size_t)(ntables ? ntables : 1), sizeof(int));
    p->vstart = tr_calloc((size_t)world + 1, sizeof(int));
    p->vec = tr_calloc((size_t)(ntables + 1), sizeof(int));
    if (!p->col0 || !p->col1 || !p->owner || !p->vstart || !p->vec) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    if (mode == SHARD_COLUMNWISE) {
        int base = dim / world, extra = dim % world, c = 0;
        for (int r = 0; r < world; r++) {
            p->col0[r] = c;
            c += base + (r < extra);
            p->col1[r] = c;
        }
        for (int t = 0; t < ntables; t++)
            p->owner[t] = -1;
        return TR_OK;
    }
    for (int r = 0; r < world; r++) {
        p->col0[r] = 0;
        p->col1[r] = dim;
    }
    const int mp_bottom = !p->dp_bottom;
    /* the seed: > 4 workers and a model-parallel bottom MLP: rank 0 holds only it */
    const int skip0 = mp_bottom && world > 4;
    const int nb = world - skip0;
    int *order = tr_malloc((size_t)(ntables + 1) * sizeof(int));
    int *start = tr_malloc((size_t)(nb + 1) * sizeof(int));
    if (!order || !start) {
        tr_free(order);
        tr_free(start);
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    rc = shard_distribute_to_buckets(rows, ntables, nb, p->owner, order, start);
    if (rc == TR_OK) {
        int o = 0;
        for (int r = 0; r < world; r++) {
            p->vstart[r] = o;
            if (r == 0 && mp_bottom)
                p->vec[o++] = -1;
            int b = r - skip0;
            if (b >= 0)
                for (int k = start[b]; k < start[b + 1]; k++)
                    p->vec[o++] = order[k];
        }
        p->vstart[world] = o;
        for (int t = 0; t < ntables; t++)
            p->owner[t] += skip0;
    }
    tr_free(order);
    tr_free(start);
    if (rc != TR_OK)
        goto fail;
    return TR_OK;
fail:
    shard_plan_release(p);
    return rc;
}

void shard_plan_release(struct shard_plan *p)
{
    tr_free(p->col0);
    tr_free(p->col1);
    tr_free(p->owner);
    tr_free(p->vstart);
    tr_free(p->vec);
    memset(p, 0, sizeof *p);
}
