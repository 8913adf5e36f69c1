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

int batch_any_multi_hot(const int32_t *hot, int ntables)
{
    for (int t = 0; hot && t < ntables; t++)
        if (hot[t] != 0)
            return 1;
    return 0;
}

struct lay {
    int64_t off_bags, off_num, off_labels, off_cat;
};

/* The layout of a block: offsets of its arrays and (g non-NULL) the bag table it
 * should hold, and the total size; -1 for bad sizes. Table t's hotness is
 * hot[t * stride] (hot NULL: all one-hot), so that the hot fields of a block's own
 * bag table can be read in place (stride 8). */
static int64_t layout(int64_t cap, int num_features, int ntables, const int32_t *hot, size_t stride,
                      struct lay *L, struct batch_bag *g)
{
    if (cap < 0 || num_features < 0 || ntables < 0)
        return -1;
    int bags = 0;
    for (int t = 0; hot && t < ntables; t++) {
        const int32_t h = hot[(size_t)t * stride];
        if (h < 0 || h > BATCH_MAX_HOT || cap * (h ? h : 1) > INT32_MAX)
            return -1;
        bags |= h != 0;
    }
    const int64_t ld = (num_features + 7) / 8 * 8;
    int64_t o = align64((int64_t)sizeof(struct batch));
    L->off_bags = bags ? o : 0;
    if (bags)
        o += align64((int64_t)ntables * (int64_t)sizeof(struct batch_bag));
    L->off_num = o;
    o += align64(cap * ld * 4);
    L->off_labels = o;
    o += align64(cap * 4);
    L->off_cat = o;
    int64_t nid = 0;
    for (int t = 0; t < ntables; t++) {
        const int32_t h = bags ? hot[(size_t)t * stride] : 0;
        if (g)
            g[t] = (struct batch_bag){.ids = o + nid * 4, .hot = h};
        nid += cap * (h ? h : 1);
    }
    o += align64(nid * 4);
    for (int t = 0; bags && t < ntables; t++) {
        if (!hot[(size_t)t * stride])
            continue;
        if (g)
            g[t].offsets = o;
        o += align64((cap + 1) * 8);
    }
    return o;
}

int64_t batch_bytes(int64_t cap, int num_features, int ntables, const int32_t *hot)
{
    struct lay L;
    return layout(cap, num_features, ntables, hot, 1, &L, NULL);
}

enum tr_status batch_format(void *mem, int64_t bytes, int64_t cap, int num_features, int ntables,
                            const int32_t *hot)
{
    struct batch hdr;
    const int64_t need = batch_layout(cap, num_features, ntables, hot, &hdr, NULL);
    if (need < 0 || need > bytes || ((uintptr_t)mem & 63))
        return TR_ERR_ARG;
    memset(mem, 0, (size_t)need);
    struct batch *b = mem;
    *b = hdr;
    if (b->off_bags)
        (void)batch_layout(cap, num_features, ntables, hot, &hdr, batch_bags(b));
    return TR_OK;
}

enum tr_status batch_new(int64_t cap, int num_features, int ntables, const int32_t *hot, struct batch **out)
{
    *out = NULL;
    int64_t bytes = batch_bytes(cap, num_features, ntables, hot);
    if (bytes < 0)
        return TR_ERR_ARG;
    void *p = tr_malloc((size_t)bytes);
    if (!p)
        return TR_ERR_NOMEM;
    enum tr_status rc = batch_format(p, bytes, cap, num_features, ntables, hot);
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

/* What is wrong with a bag table g of header b, or NULL. */
static const char *check_bags(const struct batch *b, const struct batch_bag *g)
{
    for (int t = 0; t < b->ntables; t++) {
        if (g[t].hot < 0 || g[t].hot > BATCH_MAX_HOT)
            return "a table's hotness is out of range";
        if (g[t].hot && (g[t].nids < 0 || g[t].nids > b->n * g[t].hot))
            return "a table holds more ids than its samples can";
    }
    return NULL;
}

int64_t batch_layout(int64_t cap, int num_features, int ntables, const int32_t *hot, struct batch *hdr,
                     struct batch_bag *bags)
{
    struct lay L;
    const int64_t bytes = layout(cap, num_features, ntables, hot, 1, &L, bags);
    if (bytes < 0)
        return -1;
    memset(hdr, 0, sizeof *hdr);
    hdr->magic = BATCH_MAGIC;
    hdr->version = BATCH_VERSION;
    hdr->hdr_bytes = sizeof(struct batch);
    hdr->bytes = bytes;
    hdr->cap = cap;
    hdr->step = -1;
    hdr->num_features = num_features;
    hdr->num_ld = (num_features + 7) / 8 * 8;
    hdr->ntables = ntables;
    hdr->off_num = L.off_num;
    hdr->off_labels = L.off_labels;
    hdr->off_cat = L.off_cat;
    hdr->off_bags = L.off_bags;
    return bytes;
}

enum tr_status batch_check_parts(const struct batch *b, const struct batch_bag *g, int64_t avail, const char *what)
{
    const char *bad = NULL;
    struct lay L = {0, 0, 0, 0};
    if (b->magic != BATCH_MAGIC)
        bad = "bad magic (not a batch block)";
    else if (b->version != BATCH_VERSION)
        bad = "unsupported version";
    else if (b->hdr_bytes != sizeof *b)
        bad = "unexpected header size";
    else if (b->ntables < 0 || b->off_bags < 0 || (b->off_bags && (!g || b->off_bags != align64((int64_t)sizeof *b))))
        bad = "its bag table is not where a block's is";
    else if (b->bytes < 0 || b->bytes > avail ||
             layout(b->cap, b->num_features, b->ntables, b->off_bags ? &g->hot : NULL, 8, &L, NULL) != b->bytes)
        bad = "sizes do not match its bytes";
    else if (b->off_num != L.off_num || b->off_labels != L.off_labels || b->off_cat != L.off_cat ||
             b->off_bags != L.off_bags || b->num_ld != (b->num_features + 7) / 8 * 8)
        bad = "payload offsets do not match its layout";
    else if (b->n < 0 || b->n > b->cap)
        bad = "more samples than its capacity";
    else if (b->split != BATCH_TRAIN && b->split != BATCH_TEST)
        bad = "unknown split";
    if (!bad && b->off_bags) {
        /* the ids and offsets of every table where the layout puts them */
        int64_t o = L.off_cat;
        for (int t = 0; t < b->ntables && !bad; t++) {
            if (g[t].ids != o || (g[t].hot == 0) != (g[t].offsets == 0) ||
                (g[t].offsets && (g[t].offsets < L.off_cat || g[t].offsets + (b->cap + 1) * 8 > b->bytes)))
                bad = "a table's ids or offsets are not where its layout puts them";
            o += b->cap * (g[t].hot ? g[t].hot : 1) * 4;
        }
        if (!bad)
            bad = check_bags(b, g);
    }
    if (!bad)
        return TR_OK;
    LOG_ERROR("%s: batch block rejected: %s (magic 0x%08x, version %u, cap %lld, n %lld, %lld bytes)", what, bad,
              b->magic, b->version, (long long)b->cap, (long long)b->n, (long long)b->bytes);
    LOG_HINT("every process of a job must run the same terarec version with the same batch flags");
    return TR_ERR_FORMAT;
}

enum tr_status batch_check(const struct batch *b, int64_t avail, const char *what)
{
    const char *bad = NULL;
    if (avail < (int64_t)sizeof *b)
        bad = "the block is shorter than its header";
    else if (b->off_bags && (b->off_bags < (int64_t)sizeof *b || b->ntables < 0 ||
                             b->off_bags + (int64_t)b->ntables * (int64_t)sizeof(struct batch_bag) > avail))
        bad = "its bag table is outside the block";
    if (!bad)
        return batch_check_parts(b, batch_bags(b), avail, what);
    LOG_ERROR("%s: batch block rejected: %s (%lld bytes available)", what, bad, (long long)avail);
    LOG_HINT("every process of a job must run the same terarec version with the same batch flags");
    return TR_ERR_FORMAT;
}

int batch_same_hot(const struct batch *a, const struct batch *b)
{
    if (a->ntables != b->ntables)
        return 0;
    for (int t = 0; t < a->ntables; t++)
        if (batch_hot(a, t) != batch_hot(b, t))
            return 0;
    return 1;
}

int batch_same_layout(const struct batch *a, const struct batch *b)
{
    return a->bytes == b->bytes && a->cap == b->cap && a->num_features == b->num_features &&
           a->ntables == b->ntables && a->off_bags == b->off_bags && batch_same_hot(a, b);
}

int batch_same_samples(const struct batch *a, const struct batch *b)
{
    if (a->n != b->n || a->split != b->split || a->num_features != b->num_features || !batch_same_hot(a, b))
        return 0;
    if (memcmp(batch_num(a), batch_num(b), (size_t)(a->n * a->num_ld) * sizeof(float)) ||
        memcmp(batch_labels(a), batch_labels(b), (size_t)a->n * sizeof(float)))
        return 0;
    for (int t = 0; t < a->ntables; t++) {
        const int64_t *oa = batch_offsets(a, t), *ob = batch_offsets(b, t);
        int64_t nids = a->n;
        if (oa) {
            if (memcmp(oa, ob, (size_t)(a->n + 1) * sizeof(int64_t)) || batch_bags(a)[t].nids != batch_bags(b)[t].nids)
                return 0;
            nids = oa[a->n];
        }
        if (memcmp(batch_ids(a, t), batch_ids(b, t), (size_t)nids * sizeof(int32_t)))
            return 0;
    }
    return 1;
}

/* Copies the bags of samples rows[0 .. n) (or first + k) of multi-hot table t;
 * TR_ERR_FORMAT when src's offsets of those samples are not bags of at most its
 * hotness. */
static enum tr_status copy_bags(struct batch *dst, const struct batch *src, int t, int64_t first, const int64_t *rows,
                                int64_t n)
{
    const int64_t h = batch_hot(src, t), *so = batch_offsets(src, t), scap = src->cap * h;
    const int32_t *sid = batch_ids(src, t);
    int64_t *dof = batch_offsets(dst, t);
    int32_t *did = batch_ids(dst, t);
    dof[0] = 0;
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = rows ? rows[k] : first + k, len = so[i + 1] - so[i];
        if (so[i] < 0 || len < 0 || len > h || so[i + 1] > scap)
            return TR_ERR_FORMAT;
        dof[k + 1] = dof[k] + len;
    }
    if (!rows) {
        memcpy(did, sid + so[first], (size_t)dof[n] * sizeof(int32_t));
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < n; k++)
            memcpy(did + dof[k], sid + so[rows[k]], (size_t)(dof[k + 1] - dof[k]) * sizeof(int32_t));
    }
    batch_bags(dst)[t].nids = dof[n];
    return TR_OK;
}

enum tr_status batch_copy_samples(struct batch *dst, const struct batch *src, int64_t first, const int64_t *rows,
                                  int64_t n)
{
    if (n < 0 || n > dst->cap || dst->num_features != src->num_features || !batch_same_hot(dst, src) ||
        (!rows && (first < 0 || first > src->n - n)))
        return TR_ERR_ARG;
    if (rows)
        for (int64_t k = 0; k < n; k++)
            if (rows[k] < 0 || rows[k] >= src->n)
                return TR_ERR_ARG;
    const int64_t ld = src->num_ld; /* the same in dst: it depends on num_features only */
    const float *snum = batch_num(src), *slab = batch_labels(src);
    float *dnum = batch_num(dst), *dlab = batch_labels(dst);
    const int T = src->ntables;
    for (int t = 0; t < T; t++)
        if (batch_hot(src, t))
            TR_CHECK(copy_bags(dst, src, t, first, rows, n));
    if (!rows) { /* a range: one copy per array (and per one-hot table) */
        memcpy(dnum, snum + first * ld, (size_t)(n * ld) * sizeof(float));
        memcpy(dlab, slab + first, (size_t)n * sizeof(float));
        for (int t = 0; t < T; t++)
            if (!batch_hot(src, t))
                memcpy(batch_ids(dst, t), batch_ids(src, t) + first, (size_t)n * sizeof(int32_t));
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < n; k++) {
            const int64_t i = rows[k];
            memcpy(dnum + k * ld, snum + i * ld, (size_t)ld * sizeof(float));
            dlab[k] = slab[i];
        }
        for (int t = 0; t < T; t++) {
            if (batch_hot(src, t))
                continue;
            const int32_t *sid = batch_ids(src, t);
            int32_t *did = batch_ids(dst, t);
#pragma omp parallel for schedule(static)
            for (int64_t k = 0; k < n; k++)
                did[k] = sid[rows[k]];
        }
    }
    dst->n = n;
    dst->split = src->split;
    return TR_OK;
}
