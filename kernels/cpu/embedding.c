/* embedding.c: CPU embedding gather (one-hot and multi-hot, sum/mean, any column
 * slice) and the fused sparse backward + optimizer step (SGD, Adagrad, row-wise
 * Adagrad, whose per-row sums of squares over a column slice emb_rowsq writes
 * for the caller to add up over workers). The update sorts
 * (row, position) pairs with an LSD radix sort so that duplicates are summed in
 * position order and each distinct row is owned by one thread: no atomics, no
 * dense gradient, and bitwise the same result for any thread count.
 * It does not cache rows or handle tables that live on another device. */
#define TR_SUBSYS TR_SUB_KERN
#include <string.h>

#include "../../common/check.h"
#include "../kern_check.h"
#include "../kmath.h"
#include "../sort.h"
#include "cpu_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define PREFETCH_AHEAD 8

/* The update's gradient sums fetch the gradient rows this many positions ahead: a
 * row of the model's dx is a sample's slot, one of 27 at a stride of 27 rows, and
 * waited for its lines one at a time. Measured in bench_train's steps (2 threads, B
 * 2048, 3 pairs alternated): tiny's emb_update 1.05-1.09 against 1.33-1.59 ms,
 * mlperf's (scale 1/8) 2.35-2.66 against 3.25-4.38. */
#define GRAD_AHEAD 16

/* Prefetches the w floats at p, every cache line of them (rows of 256 or 512 bytes
 * would otherwise miss on all but the first line). */
static inline void prefetch_row(const float *p, int64_t w, int write)
{
    const char *c = (const char *)p, *end = (const char *)(p + w);
    for (; c < end; c += 64) {
        if (write)
            __builtin_prefetch(c, 1);
        else
            __builtin_prefetch(c, 0);
    }
}

/* Checks idx/offsets; on a bad entry sets *bad_pos and returns TR_ERR_RANGE.
 * Writes the position of the first index used into *base and their count into *nidx. */
static enum tr_status check_indices(const void *idx, enum kern_dtype t, const int64_t *offsets, int64_t nbags,
                                    int64_t rows, int64_t *base, int64_t *nidx, int64_t *bad_pos)
{
    if (bad_pos)
        *bad_pos = -1;
    if (t != KERN_I32 && t != KERN_I64)
        return TR_ERR_ARG;
    if (nbags < 0)
        return TR_ERR_ARG;
    int64_t b0 = 0, n = nbags;
    if (offsets) {
        for (int64_t b = 0; b < nbags; b++) {
            if (offsets[b + 1] < offsets[b] || offsets[b] < 0) {
                if (bad_pos)
                    *bad_pos = b;
                return TR_ERR_RANGE;
            }
        }
        b0 = nbags ? offsets[0] : 0;
        n = nbags ? offsets[nbags] - b0 : 0;
    }
    int64_t bad = INT64_MAX;
    if (t == KERN_I32) {
        const int32_t *p = (const int32_t *)idx + b0;
#pragma omp parallel for schedule(static) reduction(min : bad) if (n > 65536)
        for (int64_t i = 0; i < n; i++)
            if (p[i] < 0 || p[i] >= rows)
                bad = i < bad ? i : bad;
    } else {
        const int64_t *p = (const int64_t *)idx + b0;
#pragma omp parallel for schedule(static) reduction(min : bad) if (n > 65536)
        for (int64_t i = 0; i < n; i++)
            if (p[i] < 0 || p[i] >= rows)
                bad = i < bad ? i : bad;
    }
    *base = b0;
    *nidx = n;
    if (bad != INT64_MAX) {
        if (bad_pos)
            *bad_pos = b0 + bad;
        return TR_ERR_RANGE;
    }
    return TR_OK;
}

static enum tr_status emb_fwd_one(const struct kern_emb_fwd_args *a)
{
    int64_t base, nidx;
    if (a->c0 < 0 || a->c1 < a->c0 || a->c1 > a->ld)
        return TR_ERR_ARG;
    TR_CHECK(check_indices(a->idx, a->idx_dtype, a->offsets, a->nbags, a->rows, &base, &nidx, a->bad_pos));
    const int64_t w = a->c1 - a->c0, nbags = a->nbags, ld = a->ld;
    const float *tab = a->table + a->c0;
    const int mean = a->comb == KERN_COMB_MEAN;
    (void)base;
    (void)nidx;
    if (!a->offsets) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nbags; b++) {
            if (b + PREFETCH_AHEAD < nbags)
                prefetch_row(tab + kern_cpu_idx(a->idx, a->idx_dtype, b + PREFETCH_AHEAD) * ld, w, 0);
            /* memcpy (the C library's widest copy), not 8-float vectors inline: on the
             * 2-core AVX-512 host, mlperf's 26 x 2048 rows of 128 floats 1.3 against 2.0
             * ms (64 floats 0.86 against 1.06, 16 floats 0.42 against 0.46) */
            const float *src = tab + kern_cpu_idx(a->idx, a->idx_dtype, b) * ld;
            memcpy(a->out + b * a->out_ld, src, (size_t)w * sizeof(float));
        }
        return TR_OK;
    }
    const int64_t pend = nbags ? a->offsets[nbags] : 0;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nbags; b++) {
        float *o = a->out + b * a->out_ld;
        int64_t p0 = a->offsets[b], p1 = a->offsets[b + 1];
        if (p0 == p1) {
            memset(o, 0, (size_t)w * sizeof(float));
            continue;
        }
        /* the rows PREFETCH_AHEAD ids on, whatever their bag: without it each bag's rows
         * were fetched one at a time (MLPerf's 214-id samples of 128 floats, 26 x 2048
         * bags on the kernel alone: 34 -> 12.5 ms) */
        for (int64_t p = p0; p < p1 && p + PREFETCH_AHEAD < pend; p++)
            prefetch_row(tab + kern_cpu_idx(a->idx, a->idx_dtype, p + PREFETCH_AHEAD) * ld, w, 0);
        memcpy(o, tab + kern_cpu_idx(a->idx, a->idx_dtype, p0) * ld, (size_t)w * sizeof(float));
        for (int64_t p = p0 + 1; p < p1; p++) {
            const float *src = tab + kern_cpu_idx(a->idx, a->idx_dtype, p) * ld;
            for (int64_t c = 0; c < w; c++)
                o[c] += src[c];
        }
        float s = km_bag_scale(p1 - p0, mean);
        if (s != 1.0f)
            for (int64_t c = 0; c < w; c++)
                o[c] *= s;
    }
    return TR_OK;
}

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Workspace of one table. */
static size_t ws_one(int64_t nidx, int64_t width)
{
    size_t n = (size_t)(nidx > 0 ? nidx : 1);
    size_t w = (size_t)(width > 0 ? width : 1);
    return align64(2 * n * sizeof(uint64_t))     /* keys, double buffer */
           + align64(n * sizeof(int64_t))         /* bag of each position (multi-hot) */
           + align64((n + 1) * sizeof(int64_t))   /* run starts */
           + align64(n * sizeof(int32_t))         /* slot (distinct-row number) of each position */
           + align64(n * w * sizeof(float)) + 64; /* one gradient accumulator per distinct row */
}

/* The update runs in four passes:
 *  1. sort (row << posbits | position) keys: equal rows become runs, in position order;
 *  2. give every position the number (slot) of its row's run;
 *  3. accumulate gradients per slot in position order -- gradient rows are read
 *     sequentially; each thread owns a range of slots and reads only its positions;
 *  4. apply the optimizer once per distinct row (one thread per row).
 * Every sum has a fixed order, so the result does not depend on the thread count. */
/* Updates one table, or with rowsq set, only writes its row-wise sums of squares
 * (pass 4 then writes a->row_sumsq instead of stepping); a->ws/ws_bytes is this
 * table's workspace. Indices were checked by the caller. */
static enum tr_status emb_update_one(const struct kern_emb_update_args *a, int rowsq)
{
    int64_t base = a->offsets && a->nbags ? a->offsets[0] : 0;
    int64_t nidx = a->offsets ? (a->nbags ? a->offsets[a->nbags] - base : 0) : a->nbags;
    if (rowsq && a->c1 == a->c0) { /* no columns here: nothing to add to the sums */
        if (nidx)
            memset(a->row_sumsq, 0, (size_t)nidx * sizeof(double));
        return TR_OK;
    }
    if (nidx == 0 || a->c1 == a->c0)
        return TR_OK;
    const int64_t w = a->c1 - a->c0, dim = a->dim > 0 ? a->dim : w;
    const int posbits = kern_bits_for((uint64_t)(nidx - 1));
    const int rowbits = kern_bits_for((uint64_t)(a->rows - 1));
    if (posbits + rowbits > 64 || nidx > INT32_MAX)
        return TR_ERR_UNSUPPORTED;

    /* carve the workspace */
    size_t need = ws_one(nidx, w);
    if (!a->ws || a->ws_bytes < need)
        return TR_ERR_ARG;
    char *ws = (char *)(((uintptr_t)a->ws + 63) & ~(uintptr_t)63);
    uint64_t *k0 = (uint64_t *)ws;
    uint64_t *k1 = k0 + nidx;
    ws += align64(2 * (size_t)nidx * sizeof(uint64_t));
    int64_t *bag_of = (int64_t *)ws;
    ws += align64((size_t)nidx * sizeof(int64_t));
    int64_t *runs = (int64_t *)ws;
    ws += align64(((size_t)nidx + 1) * sizeof(int64_t));
    int32_t *slot_of = (int32_t *)ws;
    ws += align64((size_t)nidx * sizeof(int32_t));
    float *acc = (float *)ws;

    const uint64_t posmask = posbits ? (~0ULL >> (64 - posbits)) : 0;
    const int mean = a->comb == KERN_COMB_MEAN;
    const struct km_optim h = {a->hp.lr, a->hp.eps};
    const float gs = a->grad_scale;
    const uint64_t *sorted = NULL;
    int64_t nruns = 0;
#pragma omp parallel
    {
        int64_t t, nt;
        kern_cpu_thread(&t, &nt);
        /* 1. keys: row << posbits | position (positions already ascending) */
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nidx; i++)
            k0[i] = ((uint64_t)kern_cpu_idx(a->idx, a->idx_dtype, base + i) << posbits) | (uint64_t)i;
        if (a->offsets) {
#pragma omp for schedule(static)
            for (int64_t b = 0; b < a->nbags; b++)
                for (int64_t p = a->offsets[b]; p < a->offsets[b + 1]; p++)
                    bag_of[p - base] = b;
        }
        /* 2. sort; runs of equal rows; the slot (run number) of each position */
#pragma omp single
        {
            sorted = kern_sort_radix(k0, k1, nidx, sizeof *k0, posbits, posbits + rowbits);
            for (int64_t i = 0; i < nidx; i++) {
                if (i == 0 || (sorted[i] >> posbits) != (sorted[i - 1] >> posbits))
                    runs[nruns++] = i;
                slot_of[sorted[i] & posmask] = (int32_t)(nruns - 1);
            }
            runs[nruns] = nidx;
        }
        /* 3. per-slot gradient sums in position order; each thread owns the slots
         * holding about 1/nt of the positions (a hot row stays with one thread) */
        int32_t s0 = t == 0 ? 0 : slot_of[sorted[nidx * t / nt] & posmask];
        int32_t s1 = t + 1 == nt ? (int32_t)nruns : slot_of[sorted[nidx * (t + 1) / nt] & posmask];
        if (s1 > s0)
            memset(acc + (int64_t)s0 * w, 0, (size_t)(s1 - s0) * (size_t)w * sizeof(float));
        for (int64_t pos = 0; pos < nidx && s1 > s0; pos++) {
            if (pos + GRAD_AHEAD < nidx && slot_of[pos + GRAD_AHEAD] >= s0 && slot_of[pos + GRAD_AHEAD] < s1) {
                const int64_t nb = a->offsets ? bag_of[pos + GRAD_AHEAD] : pos + GRAD_AHEAD;
                prefetch_row(a->grad + nb * a->grad_ld, w, 0); /* a row this thread sums */
            }
            int32_t sl = slot_of[pos];
            if (sl < s0 || sl >= s1)
                continue;
            int64_t bag = a->offsets ? bag_of[pos] : pos;
            float sc = a->offsets ? km_bag_scale(a->offsets[bag + 1] - a->offsets[bag], mean) : 1.0f;
            const float *restrict g = a->grad + bag * a->grad_ld;
            float *restrict ac = acc + (int64_t)sl * w;
            for (int64_t c = 0; c < w; c++)
                ac[c] += g[c] * sc;
        }
#pragma omp barrier
        /* 4. one optimizer step per distinct row, or (rowsq) its sum of squares */
        if (rowsq) {
#pragma omp for schedule(static)
            for (int64_t r = 0; r < nidx; r++) {
                double sq = 0.0;
                for (int64_t c = 0; r < nruns && c < w; c++)
                    sq = km_sumsq_add(sq, gs * acc[r * w + c]);
                a->row_sumsq[r] = sq;
            }
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < (rowsq ? 0 : nruns); r++) {
            if (r + PREFETCH_AHEAD < nruns) {
                int64_t nrow = (int64_t)(sorted[runs[r + PREFETCH_AHEAD]] >> posbits);
                prefetch_row(a->table + nrow * a->ld + a->c0, w, 1);
                if (a->accum && a->hp.kind == KERN_OPT_ADAGRAD)
                    prefetch_row(a->accum + nrow * a->accum_ld + a->c0, w, 1);
            }
            int64_t row = (int64_t)(sorted[runs[r]] >> posbits);
            const float *restrict ac = acc + r * w;
            float *restrict p = a->table + row * a->ld + a->c0;
            if (a->hp.kind == KERN_OPT_SGD) {
                for (int64_t c = 0; c < w; c++)
                    km_sgd_step(&p[c], gs * ac[c], &h);
            } else if (a->hp.kind == KERN_OPT_ROWWISE_ADAGRAD) {
                double sq = 0.0; /* the same sum as the rowsq pass, in the same order */
                if (a->row_sumsq)
                    sq = a->row_sumsq[r];
                else
                    for (int64_t c = 0; c < w; c++)
                        sq = km_sumsq_add(sq, gs * ac[c]);
                const float den = km_rowwise_adagrad_row(&a->accum[row], sq, dim, &h);
                for (int64_t c = 0; c < w; c++)
                    km_rowwise_adagrad_step(&p[c], gs * ac[c], den, &h);
            } else {
                float *restrict st = a->accum + row * a->accum_ld + a->c0;
                for (int64_t c = 0; c < w; c++)
                    km_adagrad_step(&p[c], &st[c], gs * ac[c], &h);
            }
        }
    }
    return TR_OK;
}

/* ---- table-batched entry points ------------------------------------------------------ */

/* A table is small when one thread does it in a few microseconds: then tables
 * are spread over threads instead of threads over a table. */
#define SMALL_TABLE_WORK ((int64_t)1 << 16)

static int64_t nidx_of(const void *offsets, int64_t nbags)
{
    const int64_t *o = offsets;
    return o ? (nbags ? o[nbags] - o[0] : 0) : nbags;
}

static int spread_tables(int n, int64_t max_work)
{
    int nt = 1;
#ifdef _OPENMP
    nt = omp_get_max_threads();
#endif
    return n > 1 && nt > 1 && (max_work < SMALL_TABLE_WORK || n >= 4 * nt);
}

size_t kern_cpu_emb_update_ws_bytes(int64_t nidx, int64_t width, int ntables, int threads)
{
    int slots = ntables < threads ? ntables : threads;
    return ws_one(nidx, width) * (size_t)(slots > 1 ? slots : 1);
}

enum tr_status kern_cpu_emb_fwd(const struct kern_emb_fwd_args *a, int n)
{
    int64_t max_work = 0;
    for (int t = 0; t < n; t++)
        max_work = TR_MAX(max_work, nidx_of(a[t].offsets, a[t].nbags) * (a[t].c1 - a[t].c0));
    if (!spread_tables(n, max_work)) {
        for (int t = 0; t < n; t++)
            TR_CHECK(emb_fwd_one(&a[t]));
        return TR_OK;
    }
    /* the first failing table (in table order) decides the status */
    int first_bad = n;
    enum tr_status bad_rc = TR_OK;
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < n; t++) {
        enum tr_status rc = emb_fwd_one(&a[t]);
        if (rc != TR_OK) {
#pragma omp critical(emb_fwd_err)
            if (t < first_bad) {
                first_bad = t;
                bad_rc = rc;
            }
        }
    }
    return bad_rc;
}

static enum tr_status emb_update_n(const struct kern_emb_update_args *a, int n, int rowsq)
{
    if (n < 1)
        return TR_OK;
    int64_t max_nidx = 0, max_w = 0;
    for (int t = 0; t < n; t++) {
        int64_t base, nidx;
        if (a[t].c0 < 0 || a[t].c1 < a[t].c0 || a[t].c1 > a[t].ld)
            return TR_ERR_ARG;
        TR_CHECK(kern_check_emb_optim(&a[t], rowsq));
        TR_CHECK(check_indices(a[t].idx, a[t].idx_dtype, a[t].offsets, a[t].nbags, a[t].rows, &base, &nidx,
                               a[t].bad_pos));
        if (nidx > INT32_MAX)
            return TR_ERR_UNSUPPORTED;
        max_nidx = TR_MAX(max_nidx, nidx);
        max_w = TR_MAX(max_w, a[t].c1 - a[t].c0);
    }
    if (rowsq && max_w == 0) { /* no columns here at all: zeros, no workspace needed */
        for (int t = 0; t < n; t++)
            TR_CHECK(emb_update_one(&a[t], 1));
        return TR_OK;
    }
    const size_t slot = ws_one(max_nidx, max_w);
    if (!a[0].ws || a[0].ws_bytes < slot)
        return TR_ERR_ARG;
    if (!spread_tables(n, max_nidx * max_w)) {
        for (int t = 0; t < n; t++) {
            struct kern_emb_update_args one = a[t];
            one.ws = a[0].ws;
            one.ws_bytes = a[0].ws_bytes;
            TR_CHECK(emb_update_one(&one, rowsq));
        }
        return TR_OK;
    }
    int nslots = (int)(a[0].ws_bytes / slot);
    if (nslots < 1)
        nslots = 1;
    int nt = 1;
#ifdef _OPENMP
    nt = omp_get_max_threads();
#endif
    if (nt > nslots)
        nt = nslots;
    enum tr_status bad_rc = TR_OK;
#pragma omp parallel num_threads(nt)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < n; t++) {
            struct kern_emb_update_args one = a[t];
            one.ws = (char *)a[0].ws + (size_t)tid * slot;
            one.ws_bytes = slot;
            enum tr_status rc = emb_update_one(&one, rowsq);
            if (rc != TR_OK) {
#pragma omp critical(emb_update_err)
                bad_rc = rc;
            }
        }
    }
    return bad_rc;
}

enum tr_status kern_cpu_emb_update(const struct kern_emb_update_args *a, int n)
{
    return emb_update_n(a, n, 0);
}

enum tr_status kern_cpu_emb_rowsq(const struct kern_emb_update_args *a, int n)
{
    return emb_update_n(a, n, 1);
}
