/* batch.c: layout, allocation, checking and copying of batch blocks. It does not
 * read samples (the readers in dataset.c do) nor move blocks between processes
 * (the worker and the loader do). */
#define TR_SUBSYS TR_SUB_DATA
#include "batch.h"

#include <stddef.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"

static int64_t align64(int64_t x)
{
    return (x + 63) / 64 * 64;
}

/* Offsets of the three payload arrays and the total size. */
static int64_t layout(int64_t cap, int num_features, int ntables, int64_t *off)
{
    if (cap < 0 || num_features < 0 || ntables < 0)
        return -1;
    const int64_t ld = (num_features + 7) / 8 * 8;
    off[0] = align64((int64_t)sizeof(struct batch));
    off[1] = off[0] + align64(cap * ld * 4);
    off[2] = off[1] + align64(cap * 4);
    return off[2] + align64(cap * (int64_t)ntables * 4);
}

int64_t batch_bytes(int64_t cap, int num_features, int ntables)
{
    int64_t off[3];
    return layout(cap, num_features, ntables, off);
}

enum tr_status batch_format(void *mem, int64_t bytes, int64_t cap, int num_features, int ntables)
{
    int64_t off[3];
    int64_t need = layout(cap, num_features, ntables, off);
    if (need < 0 || need > bytes || ((uintptr_t)mem & 63))
        return TR_ERR_ARG;
    memset(mem, 0, (size_t)need);
    struct batch *b = mem;
    b->magic = BATCH_MAGIC;
    b->version = BATCH_VERSION;
    b->hdr_bytes = sizeof(struct batch);
    b->bytes = need;
    b->cap = cap;
    b->step = -1;
    b->num_features = num_features;
    b->num_ld = (num_features + 7) / 8 * 8;
    b->ntables = ntables;
    b->off_num = off[0];
    b->off_labels = off[1];
    b->off_cat = off[2];
    return TR_OK;
}

enum tr_status batch_new(int64_t cap, int num_features, int ntables, struct batch **out)
{
    *out = NULL;
    int64_t bytes = batch_bytes(cap, num_features, ntables);
    if (bytes < 0)
        return TR_ERR_ARG;
    void *p = tr_malloc((size_t)bytes);
    if (!p)
        return TR_ERR_NOMEM;
    enum tr_status rc = batch_format(p, bytes, cap, num_features, ntables);
    if (rc != TR_OK) {
        tr_free(p);
        return rc;
    }
    *out = p;
    return TR_OK;
}

void batch_free(struct batch **b)
{
    tr_free(*b);
    *b = NULL;
}

enum tr_status batch_check(const struct batch *b, int64_t avail, const char *what)
{
    const char *bad = NULL;
    int64_t off[3] = {0, 0, 0};
    if (avail < (int64_t)sizeof *b)
        bad = "the block is shorter than its header";
    else if (b->magic != BATCH_MAGIC)
        bad = "bad magic (not a batch block)";
    else if (b->version != BATCH_VERSION)
        bad = "unsupported version";
    else if (b->hdr_bytes != sizeof *b)
        bad = "unexpected header size";
    else if (b->bytes < 0 || layout(b->cap, b->num_features, b->ntables, off) != b->bytes || b->bytes > avail)
        bad = "sizes do not match its bytes";
    else if (b->off_num != off[0] || b->off_labels != off[1] || b->off_cat != off[2] ||
             b->num_ld != (b->num_features + 7) / 8 * 8)
        bad = "payload offsets do not match its layout";
    else if (b->n < 0 || b->n > b->cap)
        bad = "more samples than its capacity";
    else if (b->split != BATCH_TRAIN && b->split != BATCH_TEST)
        bad = "unknown split";
    if (!bad)
        return TR_OK;
    LOG_ERROR("%s: batch block rejected: %s (magic 0x%08x, version %u, cap %lld, n %lld, %lld bytes)", what, bad,
              b->magic, b->version, (long long)b->cap, (long long)b->n, (long long)b->bytes);
    LOG_HINT("every process of a job must run the same terarec version with the same batch flags");
    return TR_ERR_FORMAT;
}

int batch_same_layout(const struct batch *a, const struct batch *b)
{
    return a->bytes == b->bytes && a->cap == b->cap && a->num_features == b->num_features &&
           a->ntables == b->ntables;
}

int batch_same_samples(const struct batch *a, const struct batch *b)
{
    if (a->n != b->n || a->split != b->split || a->num_features != b->num_features || a->ntables != b->ntables)
        return 0;
    if (memcmp(batch_num(a), batch_num(b), (size_t)(a->n * a->num_ld) * sizeof(float)) ||
        memcmp(batch_labels(a), batch_labels(b), (size_t)a->n * sizeof(float)))
        return 0;
    for (int t = 0; t < a->ntables; t++)
        if (memcmp(batch_cat(a) + t * a->cap, batch_cat(b) + t * b->cap, (size_t)a->n * sizeof(int32_t)))
            return 0;
    return 1;
}

enum tr_status batch_copy_samples(struct batch *dst, const struct batch *src, int64_t first, const int64_t *rows,
                                  int64_t n)
{
    if (n < 0 || n > dst->cap || dst->num_features != src->num_features || dst->ntables != src->ntables ||
        (!rows && (first < 0 || first > src->n - n)))
        return TR_ERR_ARG;
    if (rows)
        for (int64_t k = 0; k < n; k++)
            if (rows[k] < 0 || rows[k] >= src->n)
                return TR_ERR_ARG;
    const int64_t ld = src->num_ld; /* the same in dst: it depends on num_features only */
    const float *snum = batch_num(src), *slab = batch_labels(src);
    const int32_t *scat = batch_cat(src);
    float *dnum = batch_num(dst), *dlab = batch_labels(dst);
    int32_t *dcat = batch_cat(dst);
    if (!rows) { /* a range: one copy per array (and per table) */
        memcpy(dnum, snum + first * ld, (size_t)(n * ld) * sizeof(float));
        memcpy(dlab, slab + first, (size_t)n * sizeof(float));
        for (int t = 0; t < src->ntables; t++)
            memcpy(dcat + t * dst->cap, scat + t * src->cap + first, (size_t)n * sizeof(int32_t));
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < n; k++) {
            const int64_t i = rows[k];
            memcpy(dnum + k * ld, snum + i * ld, (size_t)ld * sizeof(float));
            dlab[k] = slab[i];
            for (int t = 0; t < src->ntables; t++)
                dcat[t * dst->cap + k] = scat[t * src->cap + i];
        }
    }
    dst->n = n;
    dst->split = src->split;
    return TR_OK;
}
