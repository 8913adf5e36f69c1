/* batch.c: allocation of struct tr_batch buffers (one block per batch). */
#include "batch.h"

#include <string.h>

#include "../common/alloc.h"

int64_t tr_batch_bytes(int64_t cap, int num_features, int ntables)
{
    int ld = (num_features + 7) / 8 * 8;
    return cap * ((int64_t)ld * 4 + 4 + (int64_t)ntables * 4);
}

enum tr_status tr_batch_init(struct tr_batch *b, int64_t cap, int num_features, int ntables)
{
    memset(b, 0, sizeof *b);
    if (cap < 0 || num_features < 0 || ntables < 0)
        return TR_ERR_ARG;
    int ld = (num_features + 7) / 8 * 8;
    size_t bytes = (size_t)tr_batch_bytes(cap, num_features, ntables);
    char *p = tr_calloc(1, bytes ? bytes : 1);
    if (!p)
        return TR_ERR_NOMEM;
    b->cap = cap;
    b->num_features = num_features;
    b->num_ld = ld;
    b->ntables = ntables;
    b->numerical = (float *)p;
    b->labels = b->numerical + cap * ld;
    b->cat = (int32_t *)(b->labels + cap);
    return TR_OK;
}

void tr_batch_release(struct tr_batch *b)
{
    tr_free(b->numerical);
    memset(b, 0, sizeof *b);
}
