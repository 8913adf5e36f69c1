/* bench_rows.c: the random-row limit that bench_train.c measures (bench_rows.h):
 * tables of a config's sizes (its own, or a model's), uniform random ids, gathers and RMWs by position or
 * by row, with several prefetch distances, on the step's threads. It does not run
 * the model. */
#include "bench_rows.h"

#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../kernels/kmath.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define ROW_LR 1e-6f /* keeps the tables sane under the RMW benchmark */
#define CACHE_LINE 64

void bench_fill_random(float *p, int64_t n, uint64_t stream)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        p[i] = km_u01(km_rand3(7, stream, (uint64_t)i)) - 0.5f;
}

void bench_probe_release(struct probe *p)
{
    for (int t = 0; p->w && p->bytes && t < p->T; t++)
        tr_big_free(p->w[t], p->bytes[t]);
    tr_free(p->w);
    tr_free(p->bytes);
    memset(p, 0, sizeof *p);
}

enum tr_status bench_probe_borrow(struct probe *p, const int64_t *rows, int T, int64_t D, float *const *w)
{
    memset(p, 0, sizeof *p);
    p->T = T;
    p->D = D;
    p->rows = rows;
    p->w = tr_calloc((size_t)T, sizeof *p->w);
    if (!p->w)
        return TR_ERR_NOMEM;
    memcpy(p->w, w, (size_t)T * sizeof *p->w);
    return TR_OK;
}

enum tr_status bench_probe_init(struct probe *p, const struct kern_backend *be, const int64_t *rows, int T,
                                 int64_t D)
{
    memset(p, 0, sizeof *p);
    p->T = T;
    p->D = D;
    p->rows = rows;
    p->w = tr_calloc((size_t)T, sizeof *p->w);
    p->bytes = tr_calloc((size_t)T, sizeof *p->bytes);
    if (!p->w || !p->bytes)
        return TR_ERR_NOMEM;
    for (int t = 0; t < T; t++) {
        p->bytes[t] = (size_t)(rows[t] * D) * sizeof(float);
        TR_CHECK(tr_big_alloc(p->bytes[t], (void **)&p->w[t]));
        struct kern_fill_args f = {.kind = KERN_FILL_UNIFORM, .dst = p->w[t], .rows = rows[t], .cols = D, .ld = D,
                                   .seed = 42, .stream = (uint64_t)t, .elem_ld = D, .a = 0.1f};
        TR_CHECK(be->i->fill(be->ctx, &f));
    }
    return TR_OK;
}

/* Uniform random ids for ROW_CHUNKS batches of every table, and the positions of each
 * (chunk, table) grouped by owner thread (thread o owns rows [o*rows/nt, (o+1)*rows/nt)),
 * so no two threads ever write the same row: within a group in position order (random
 * rows) or sorted by row (as the model's update visits them after its radix sort). */
struct row_ids {
    int nt, T;
    int64_t B;
    int32_t *ids;     /* (ROW_CHUNKS, T, B) */
    int32_t *pos;     /* (ROW_CHUNKS, T, B) positions b, grouped by owner */
    int32_t *spos;    /* (ROW_CHUNKS, T, B) the same, each group sorted by (row, position) */
    int64_t *off;     /* (ROW_CHUNKS, T, nt + 1) group starts */
};

static void row_ids_release(struct row_ids *r)
{
    tr_free(r->ids);
    tr_free(r->pos);
    tr_free(r->spos);
    tr_free(r->off);
    memset(r, 0, sizeof *r);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static enum tr_status row_ids_init(struct row_ids *r, const struct probe *m, int64_t B, int nt)
{
    const int T = m->T;
    memset(r, 0, sizeof *r);
    r->nt = nt, r->T = T, r->B = B;
    size_t n = (size_t)ROW_CHUNKS * (size_t)T * (size_t)B;
    r->ids = tr_malloc(n * sizeof(int32_t));
    r->pos = tr_malloc(n * sizeof(int32_t));
    r->spos = tr_malloc(n * sizeof(int32_t));
    r->off = tr_malloc((size_t)ROW_CHUNKS * (size_t)T * (size_t)(nt + 1) * sizeof(int64_t));
    uint64_t *keys = tr_malloc((size_t)B * sizeof(uint64_t) * (size_t)ROW_CHUNKS * (size_t)T);
    if (!r->ids || !r->pos || !r->spos || !r->off || !keys) {
        tr_free(keys);
        row_ids_release(r);
        return TR_ERR_NOMEM;
    }
#pragma omp parallel for schedule(static)
    for (int ct = 0; ct < ROW_CHUNKS * T; ct++) {
        const int64_t rows = m->rows[ct % T];
        int32_t *id = r->ids + (int64_t)ct * B;
        int32_t *pos = r->pos + (int64_t)ct * B;
        int64_t *off = r->off + (int64_t)ct * (nt + 1);
        for (int64_t b = 0; b < B; b++)
            id[b] = (int32_t)((km_rand3(11, 0x7000u + (uint64_t)ct, (uint64_t)b) >> 11) % (uint64_t)rows);
        for (int o = 0; o <= nt; o++)
            off[o] = 0;
        for (int64_t b = 0; b < B; b++)
            off[(int64_t)id[b] * nt / rows + 1]++;
        for (int o = 0; o < nt; o++)
            off[o + 1] += off[o];
        int64_t fill[64];
        TR_ASSERT(nt <= 64);
        for (int o = 0; o < nt; o++)
            fill[o] = off[o];
        for (int64_t b = 0; b < B; b++)
            pos[fill[(int64_t)id[b] * nt / rows]++] = (int32_t)b;
        uint64_t *key = keys + (int64_t)ct * B;
        int32_t *spos = r->spos + (int64_t)ct * B;
        for (int64_t q = 0; q < B; q++)
            key[q] = (uint64_t)id[pos[q]] << 32 | (uint32_t)pos[q];
        for (int o = 0; o < nt; o++)
            qsort(key + off[o], (size_t)(off[o + 1] - off[o]), sizeof *key, cmp_u64);
        for (int64_t q = 0; q < B; q++)
            spos[q] = (int32_t)(key[q] & 0xffffffffu);
    }
    tr_free(keys);
    return TR_OK;
}

static void prefetch_row(const float *p, int64_t bytes, int write)
{
    for (int64_t o = 0; o < bytes; o += CACHE_LINE) {
        if (write)
            __builtin_prefetch((const char *)p + o, 1);
        else
            __builtin_prefetch((const char *)p + o, 0);
    }
}

/* Gathers table t's rows for chunk c into out (B, T, D) [b, t], prefetching `pf` rows
 * ahead (every cache line of a row). sorted = 0: this thread takes a static share of
 * the positions b, as emb_fwd does; sorted = 1: it gathers the rows it owns in row
 * order. Called by every thread of a parallel region. */
static void gather_one(const struct probe *m, const struct row_ids *r, int c, int t, float *out, int pf,
                       int sorted, int tid, int nthr)
{
    const int T = r->T, nt = r->nt;
    const int64_t B = r->B, D = m->D, bytes = D * (int64_t)sizeof(float);
    const int64_t ct = (int64_t)c * T + t;
    const int32_t *id = r->ids + ct * B;
    const float *tab = m->w[t];
    if (!sorted) {
        const int64_t b0 = B * tid / nthr, b1 = B * (tid + 1) / nthr;
        for (int64_t b = b0; b < b1; b++) {
            if (pf && b + pf < b1)
                prefetch_row(tab + (int64_t)id[b + pf] * D, bytes, 0);
            memcpy(out + (b * T + t) * D, tab + (int64_t)id[b] * D, (size_t)bytes);
        }
        return;
    }
    const int32_t *pos = r->spos + ct * B;
    const int64_t *off = r->off + ct * (nt + 1);
    for (int o = tid; o < nt; o += nthr) {
        for (int64_t q = off[o]; q < off[o + 1]; q++) {
            if (pf && q + pf < off[o + 1])
                prefetch_row(tab + (int64_t)id[pos[q + pf]] * D, bytes, 0);
            const int64_t b = pos[q];
            memcpy(out + (b * T + t) * D, tab + (int64_t)id[b] * D, (size_t)bytes);
        }
    }
}

/* Read-modify-writes table t's rows for chunk c: row -= lr * g (B, D) [b], each row
 * written only by its owner thread, in position order or (sorted) row order. g is small
 * enough to stay in cache, as the model's just-computed gradient is, so the pass
 * measures the table rows' traffic only. */
static void rmw_one(const struct probe *m, const struct row_ids *r, int c, int t, const float *g, int pf,
                    int sorted, int tid, int nthr)
{
    const int T = r->T, nt = r->nt;
    const int64_t B = r->B, D = m->D, bytes = D * (int64_t)sizeof(float);
    const int64_t ct = (int64_t)c * T + t;
    const int32_t *id = r->ids + ct * B;
    const int32_t *pos = (sorted ? r->spos : r->pos) + ct * B;
    const int64_t *off = r->off + ct * (nt + 1);
    float *tab = m->w[t];
    for (int o = tid; o < nt; o += nthr) {
        for (int64_t q = off[o]; q < off[o + 1]; q++) {
            if (pf && q + pf < off[o + 1])
                prefetch_row(tab + (int64_t)id[pos[q + pf]] * D, bytes, 1);
            const int64_t b = pos[q];
            float *row = tab + (int64_t)id[b] * D;
            const float *gr = g + b * D;
            for (int64_t k = 0; k < D; k++)
                row[k] -= ROW_LR * gr[k];
        }
    }
}

/* One pass over the ROW_CHUNKS batches of ids: ROWS_READ gathers every table,
 * ROWS_RMW updates every table, ROWS_STEP does per batch what a training step does:
 * gather all tables, then update the same rows (which may still be cached). The
 * threads meet only between the two halves of a step. For ROWS_STEP, t_half[0..1]
 * receive the seconds spent in the gather and update halves. Returns the rows read
 * (READ), updated (RMW) or both, counted once (STEP). */
static int64_t rows_pass(const struct probe *m, const struct row_ids *r, float *out, const float *g,
                         enum rows_op op, int pf, int sorted, double *t_half)
{
    const int T = r->T;
    double th[2] = {0.0, 0.0};
#pragma omp parallel num_threads(r->nt)
    {
        int tid = 0, nthr = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        nthr = omp_get_num_threads();
#endif
        for (int c = 0; c < ROW_CHUNKS; c++) {
            double t0 = tr_clock_now();
            if (op != ROWS_RMW)
                for (int t = 0; t < T; t++)
                    gather_one(m, r, c, t, out, pf, op == ROWS_STEP ? 0 : sorted, tid, nthr);
            if (op == ROWS_STEP) {
#pragma omp barrier
            }
            double t1 = tr_clock_now();
            if (op != ROWS_READ)
                for (int t = 0; t < T; t++)
                    rmw_one(m, r, c, t, g, pf, sorted, tid, nthr);
            if (op == ROWS_STEP) {
#pragma omp barrier
            }
            if (tid == 0) {
                th[0] += t1 - t0;
                th[1] += tr_clock_now() - t1;
            }
        }
    }
    if (t_half) {
        t_half[0] += th[0];
        t_half[1] += th[1];
    }
    return (int64_t)ROW_CHUNKS * T * r->B;
}

/* Rows/s of gathers, of RMWs and of step-shaped gather-then-update on the model's own
 * tables: each the best over visiting order (position or row order; the step always
 * gathers in position order, as emb_fwd) and a few prefetch distances, each measured
 * for at least limit_sec after one untimed pass. */
enum tr_status bench_rows_measure(const struct probe *m, int64_t B, int nt, double limit_sec,
                                  struct rows_rate rates[ROWS_NOPS_])
{
    static const int pfs[] = {0, 4, 8, 16, 32};
    enum tr_status rc = TR_OK;
    struct row_ids ri;
    const int64_t n = B * m->T * m->D, ng = B * m->D;
    float *out = NULL, *g = NULL;
    TR_CHECK(row_ids_init(&ri, m, B, nt));
    out = tr_malloc((size_t)n * sizeof(float));
    g = tr_malloc((size_t)ng * sizeof(float));
    if (!out || !g) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    bench_fill_random(out, n, 4);
    if (m->bytes)
        bench_fill_random(g, ng, 5);
    else /* a model's tables: an RMW of lr * 0 changes no bit of them */
        memset(g, 0, (size_t)ng * sizeof(float));
    memset(rates, 0, ROWS_NOPS_ * sizeof *rates);
    for (int op = 0; op < ROWS_NOPS_; op++) {
        for (int sorted = 0; sorted < 2; sorted++) {
            for (size_t i = 0; i < TR_ARRAY_SIZE(pfs); i++) {
                int64_t rows = 0;
                double half[2] = {0.0, 0.0}, dt;
                rows_pass(m, &ri, out, g, (enum rows_op)op, pfs[i], sorted, NULL);
                double t0 = tr_clock_now();
                do {
                    rows += rows_pass(m, &ri, out, g, (enum rows_op)op, pfs[i], sorted, half);
                    dt = tr_clock_now() - t0;
                } while (dt < limit_sec);
                struct rows_rate *best = &rates[op];
                double rate = (double)rows / dt;
                best->by_order[sorted] = TR_MAX(best->by_order[sorted], rate);
                if (rate > best->rate) {
                    best->rate = rate;
                    best->pf = pfs[i];
                    best->sorted = sorted;
                    best->gather_share = half[0] / (half[0] + half[1]);
                }
            }
        }
    }
exit:
    tr_free(out);
    tr_free(g);
    row_ids_release(&ri);
    return rc;
}

