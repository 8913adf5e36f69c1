/* embedding.cu: the CUDA embedding ops (contracts in kern.h): the table-batched
 * gather emb_fwd (one-hot and multi-hot, sum/mean, any column slice, I32/I64 ids,
 * float4 loads where the layout allows them), the fused sparse backward + optimizer
 * step emb_update (SGD, Adagrad, row-wise Adagrad), its phase 1 emb_rowsq, and
 * mark_rows (the dirty-row bitmap).
 *
 * Every call first validates the ids of all its tables on the device (one kernel,
 * integer atomicMin only) and decides the status on the host exactly as the CPU
 * backend does; nothing is gathered or updated unless every table passed.
 * The update sorts (row << posbits | position) keys with CUB, so duplicates of a row
 * form a run in position order; one warp owns a run and its lanes own columns, so
 * every column's sum is sequential over the run in position order (the CPU's order).
 * A run longer than SEG positions (a hot row: a table of 3 rows gets a third of the
 * batch each) is cut into chunks of SEG positions that warps sum in parallel, each
 * in position order, and its warp then adds the chunks' sums in chunk order: a
 * fixed tree, so still no floating-point atomics, no dense gradient, bitwise the
 * same on every run (such a row's rounding differs from the CPU's one long sum).
 * Per-element math comes from kmath.h. It does not cache rows, merge the tables of
 * an update into one sort, or handle tables that live on another device. */
#define TR_SUBSYS TR_SUB_KERN
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <string.h>

#include "cuda_internal.h"
#include "../kern_check.h"
#include "../kmath.h"

#define MAXT 32                     /* tables per launch (descriptors passed by value) */
#define NONE (~0ULL)                /* "no bad entry" in the validation results */
#define WS_ALIGN ((size_t)256)      /* every workspace array starts on 256 bytes (CUB's alignment) */
#define THREADS 256                 /* threads per block of every kernel here */
#define WARPS (THREADS / 32)
#define UPD_CH 4                    /* 32-column chunks a lane holds in registers: 128 columns per pass */
#define SEG 256                     /* positions per chunk of a long run (see above) */
#define FULL 0xffffffffu

static __device__ __forceinline__ int64_t load_id(const void *idx, int is64, int64_t p)
{
    return is64 ? ((const int64_t *)idx)[p] : (int64_t)((const int32_t *)idx)[p];
}

static int cols_ok(int64_t c0, int64_t c1, int64_t ld)
{
    return c0 >= 0 && c1 >= c0 && c1 <= ld;
}

static int ids_args_ok(enum kern_dtype t, int64_t nbags)
{
    return (t == KERN_I32 || t == KERN_I64) && nbags >= 0;
}

/* ---- index validation ------------------------------------------------------------------
 * Per table 4 words: the first bad bag (offsets), the first bad position (absolute),
 * then the first position used (base) and one past the last (end). Bad entries are
 * found with atomicMin over words initialised to all ones (NONE). */

struct val_tab {
    const void *idx;
    const int64_t *off; /* NULL: one-hot */
    int64_t nbags, rows;
    int is64;
};

struct val_params {
    struct val_tab t[MAXT];
};

/* Grid (x, tables): block row y validates table y, grid-stride over its bags
 * (ids == 0) or, in a second launch, over its ids (ids == 1). The ids are read only
 * when the first launch found the offsets fine, as the CPU does: offsets that are
 * not monotone may still have a first and last entry that name positions past the
 * end of idx, and reading there would be an illegal address, not TR_ERR_RANGE. */
static __global__ void __launch_bounds__(THREADS) validate_kernel(const __grid_constant__ struct val_params P,
                                                                  unsigned long long *res, int ids)
{
    const struct val_tab *d = &P.t[blockIdx.y];
    unsigned long long *r = res + 4 * (size_t)blockIdx.y;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (!ids) {
        int64_t base = 0, end = d->nbags;
        if (d->off) {
            const int64_t *o = d->off;
            for (int64_t b = tid; b < d->nbags; b += stride)
                if (o[b + 1] < o[b] || o[b] < 0)
                    atomicMin(&r[0], (unsigned long long)b);
            base = d->nbags ? o[0] : 0;
            end = d->nbags ? o[d->nbags] : 0;
        }
        if (tid == 0) {
            r[2] = (unsigned long long)base;
            r[3] = (unsigned long long)end;
        }
        return;
    }
    /* the first launch (ordered before this one on the stream) found bad offsets:
     * the ids they would name are not read */
    if (r[0] != NONE)
        return;
    const int64_t base = (int64_t)r[2], end = (int64_t)r[3]; /* 0 <= base <= end: offsets fine */
    for (int64_t i = base + tid; i < end; i += stride) {
        int64_t id = load_id(d->idx, d->is64, i);
        if (id < 0 || id >= d->rows)
            atomicMin(&r[1], (unsigned long long)i);
    }
}

/* Validates tables [0, n) of a (fields idx, idx_dtype, offsets, nbags, rows) and
 * leaves 4 words per table in pinned memory (*out, valid until the next kcu_pinned).
 * Tables with a bad dtype or nbags are not read (their words say "fine"). */
/* Scratch (and staging) bytes of validate_ids on n tables: 4 words each. */
static size_t check_bytes(int n)
{
    return (size_t)(n > 0 ? n : 1) * 4 * sizeof(unsigned long long);
}

template <typename A>
static enum tr_status validate_ids(struct kcu_ctx *c, const A *a, int n, const unsigned long long **out)
{
    const size_t bytes = check_bytes(n);
    void *dres, *hres;
    TR_CHECK(kcu_scratch(c, bytes, &dres));
    TR_CHECK(kcu_pinned(c, bytes, &hres));
    unsigned long long *res = (unsigned long long *)dres;
    TR_CUDA_CHECK(cudaMemsetAsync(res, 0xff, bytes, c->stream));
    for (int t0 = 0; t0 < n; t0 += MAXT) {
        const int nt = n - t0 < MAXT ? n - t0 : MAXT;
        struct val_params P;
        memset(&P, 0, sizeof P); /* a zero descriptor reads nothing and reports fine */
        int64_t most = 1;
        for (int k = 0; k < nt; k++) {
            const A *x = &a[t0 + k];
            if (!ids_args_ok(x->idx_dtype, x->nbags))
                continue;
            P.t[k].idx = x->idx;
            P.t[k].off = x->offsets;
            P.t[k].nbags = x->nbags;
            P.t[k].rows = x->rows;
            P.t[k].is64 = x->idx_dtype == KERN_I64;
            /* a guess at the ids of a multi-hot table (only the block count depends on it) */
            int64_t est = x->nbags < ((int64_t)1 << 36) ? x->nbags * (x->offsets ? 8 : 1) : ((int64_t)1 << 40);
            most = est > most ? est : most;
        }
        dim3 grid(kcu_blocks(c, most, THREADS), (unsigned)nt);
        for (int ids = 0; ids < 2; ids++) { /* offsets first, then the ids they name */
            validate_kernel<<<grid, THREADS, 0, c->stream>>>(P, res + 4 * (size_t)t0, ids);
            KCU_LAUNCHED();
        }
    }
    TR_CUDA_CHECK(cudaMemcpyAsync(hres, res, bytes, cudaMemcpyDeviceToHost, c->stream));
    TR_CHECK(kcu_sync(c));
    *out = (const unsigned long long *)hres;
    return TR_OK;
}

/* The CPU's check_indices verdict for one table from its validation words r: sets
 * *bad_pos (-1 when fine), and *base / *nidx when the offsets are fine. */
static enum tr_status ids_verdict(const unsigned long long *r, enum kern_dtype dt, int64_t nbags, int64_t *bad_pos,
                                  int64_t *base, int64_t *nidx)
{
    if (bad_pos)
        *bad_pos = -1;
    if (!ids_args_ok(dt, nbags))
        return TR_ERR_ARG;
    if (r[0] != NONE) {
        if (bad_pos)
            *bad_pos = (int64_t)r[0];
        return TR_ERR_RANGE;
    }
    *base = (int64_t)r[2];
    *nidx = (int64_t)r[3] - *base;
    if (r[1] != NONE) {
        if (bad_pos)
            *bad_pos = (int64_t)r[1];
        return TR_ERR_RANGE;
    }
    return TR_OK;
}

/* ---- emb_fwd ------------------------------------------------------------------------------
 * One launch per 32 tables. Work is counted in warp units: a table whose row is nv
 * vector units wide (float4 or float) gets g = the power of two >= nv (at most 32)
 * lanes per bag, so a warp unit is 32 / g bags. */

struct fwd_tab {
    const float *tab;  /* table + c0 */
    const void *idx;
    const int64_t *off; /* NULL: one-hot */
    float *out;
    int64_t ld, out_ld; /* in vector units */
    int64_t nbags, nv;  /* nv: columns in vector units */
    int64_t unit0;      /* first warp unit of this table */
    int is64, mean, vec, gshift;
};

struct fwd_params {
    struct fwd_tab t[MAXT];
    int64_t units;
    int nt;
};

static __device__ __forceinline__ void vzero(float &a)
{
    a = 0.0f;
}
static __device__ __forceinline__ void vzero(float4 &a)
{
    a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
static __device__ __forceinline__ void vadd(float &a, float b)
{
    a += b;
}
static __device__ __forceinline__ void vadd(float4 &a, float4 b)
{
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
}
static __device__ __forceinline__ void vscale(float &a, float s)
{
    a *= s;
}
static __device__ __forceinline__ void vscale(float4 &a, float s)
{
    a.x *= s;
    a.y *= s;
    a.z *= s;
    a.w *= s;
}

/* Bag `bag` of table d by the l-th of g lanes: the CPU's order (first row, then +=
 * each further row, then *= the bag scale unless it is 1). */
template <typename T>
static __device__ void gather_bag(const struct fwd_tab *d, int64_t bag, int l, int g)
{
    const T *tab = (const T *)d->tab;
    T *o = (T *)d->out + bag * d->out_ld;
    if (!d->off) { /* one-hot: a copy, whatever the combiner */
        const T *src = tab + load_id(d->idx, d->is64, bag) * d->ld;
        for (int64_t v = l; v < d->nv; v += g)
            o[v] = src[v];
        return;
    }
    const int64_t p0 = d->off[bag], p1 = d->off[bag + 1];
    if (p0 == p1) {
        for (int64_t v = l; v < d->nv; v += g)
            vzero(o[v]);
        return;
    }
    const float s = km_bag_scale(p1 - p0, d->mean);
    for (int64_t v = l; v < d->nv; v += g) {
        T acc = tab[load_id(d->idx, d->is64, p0) * d->ld + v];
        for (int64_t p = p0 + 1; p < p1; p++)
            vadd(acc, tab[load_id(d->idx, d->is64, p) * d->ld + v]);
        if (s != 1.0f)
            vscale(acc, s);
        o[v] = acc;
    }
}

static __global__ void __launch_bounds__(THREADS) gather_kernel(const __grid_constant__ struct fwd_params P)
{
    const int lane = threadIdx.x & 31;
    const int64_t wstride = (int64_t)gridDim.x * WARPS;
    for (int64_t u = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5); u < P.units; u += wstride) {
        /* the last table whose first unit is <= u (tables without units share the
         * next one's unit0 and are never chosen) */
        int lo = 0, hi = P.nt - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (P.t[mid].unit0 <= u)
                lo = mid;
            else
                hi = mid - 1;
        }
        const struct fwd_tab *d = &P.t[lo];
        const int gsh = d->gshift;
        const int64_t bag = ((u - d->unit0) << (5 - gsh)) + (lane >> gsh);
        if (bag >= d->nbags)
            continue;
        const int g = 1 << gsh, l = lane & (g - 1);
        if (d->vec)
            gather_bag<float4>(d, bag, l, g);
        else
            gather_bag<float>(d, bag, l, g);
    }
}

enum tr_status kcu_emb_fwd(struct kcu_ctx *c, const struct kern_emb_fwd_args *a, int n)
{
    if (n <= 0)
        return TR_OK;
    if (c->sizing_only)
        return TR_ERR_UNSUPPORTED;
    /* tables before the first one with bad arguments are validated on the device:
     * the first failing table (in table order) decides the status, as on the CPU */
    int nval = 0;
    while (nval < n && cols_ok(a[nval].c0, a[nval].c1, a[nval].ld) && ids_args_ok(a[nval].idx_dtype, a[nval].nbags))
        nval++;
    const unsigned long long *res = NULL;
    if (nval > 0)
        TR_CHECK(validate_ids(c, a, nval, &res));
    for (int t = 0; t < n; t++) {
        if (!cols_ok(a[t].c0, a[t].c1, a[t].ld))
            return TR_ERR_ARG;
        if (t >= nval) { /* a bad dtype or nbags */
            if (a[t].bad_pos)
                *a[t].bad_pos = -1;
            return TR_ERR_ARG;
        }
        int64_t base = 0, nidx = 0;
        TR_CHECK(ids_verdict(res + 4 * (size_t)t, a[t].idx_dtype, a[t].nbags, a[t].bad_pos, &base, &nidx));
    }
    for (int t0 = 0; t0 < n; t0 += MAXT) {
        const int nt = n - t0 < MAXT ? n - t0 : MAXT;
        struct fwd_params P;
        memset(&P, 0, sizeof P);
        int64_t units = 0;
        for (int k = 0; k < nt; k++) {
            const struct kern_emb_fwd_args *x = &a[t0 + k];
            struct fwd_tab *d = &P.t[k];
            const int64_t w = x->c1 - x->c0;
            const float *tab = x->table ? x->table + x->c0 : NULL;
            const int vec = w % 4 == 0 && x->ld % 4 == 0 && x->out_ld % 4 == 0 && (uintptr_t)tab % 16 == 0 &&
                            (uintptr_t)x->out % 16 == 0;
            const int vw = vec ? 4 : 1;
            d->tab = tab;
            d->idx = x->idx;
            d->off = x->offsets;
            d->out = x->out;
            d->ld = x->ld / vw;
            d->out_ld = x->out_ld / vw;
            d->nbags = x->nbags;
            d->nv = w / vw;
            d->is64 = x->idx_dtype == KERN_I64;
            d->mean = x->comb == KERN_COMB_MEAN;
            d->vec = vec;
            int gsh = 0;
            while (gsh < 5 && ((int64_t)1 << gsh) < d->nv)
                gsh++;
            d->gshift = gsh;
            d->unit0 = units;
            const int64_t per = (int64_t)32 >> gsh; /* bags per warp unit */
            if (d->nv > 0)
                units += (x->nbags + per - 1) / per;
        }
        if (units == 0)
            continue;
        P.units = units;
        P.nt = nt;
        gather_kernel<<<kcu_blocks(c, units, WARPS), THREADS, 0, c->stream>>>(P);
        KCU_LAUNCHED();
    }
    return TR_OK;
}

/* ---- emb_update / emb_rowsq: workspace ---------------------------------------------------
 * One table at a time reuses the workspace a[0].ws, carved as (each array on 256 bytes):
 *   keys, double buffer      2 x n uint64 (the sort; later the alternate half holds
 *                            the iota that DeviceSelect reads)
 *   bag of each position     n int64 (multi-hot)
 *   bag scale of each position n float (multi-hot)
 *   run starts               n int32, and the run count (one int64 in 256 bytes)
 *   chunks so far            n int64: per run, the chunks of the runs up to it
 *   chunk sums               (2 n / SEG + 1) x width floats: a run of L > SEG
 *                            positions has ceil(L / SEG) < 2 L / SEG chunks
 *   CUB temp storage         max(formula, CUB's own answer where a device is there)
 * plus 256 bytes so that a misaligned ws still fits, n = max(nidx, 1). Short runs
 * need no column workspace: a warp keeps a run's sums in registers (recomputing
 * them for row-wise Adagrad on rows over 128 columns); ntables does not enter.
 *
 * The formula for CUB's temp storage, 16 n + 2 MiB, bounds what this CUB version asks
 * for the keys-only DoubleBuffer radix sort of n 64-bit keys (onesweep: bins of at
 * most 8 portions x 8 passes x 256 digits, a lookback of 256 x 4 bytes per tile of
 * >= 256 keys; the older path: a spine of 256 digits x 4 bytes per tile of >= 128
 * keys) and for DeviceSelect::If and DeviceScan::InclusiveSum (a tile status word
 * per tile), with their 256-byte alignment slop. A sizing-only instance (no device)
 * answers with it alone. */

static size_t align_up(size_t x)
{
    return (x + WS_ALIGN - 1) & ~(WS_ALIGN - 1);
}

static size_t ws_fixed(int64_t nidx)
{
    const size_t n = (size_t)(nidx > 0 ? nidx : 1);
    return WS_ALIGN + 4 * align_up(n * sizeof(uint64_t)) + 2 * align_up(n * sizeof(int32_t)) + WS_ALIGN;
}

/* The most chunks of long runs that n ids can make, and their sums' bytes. */
static int64_t max_chunks(int64_t nidx)
{
    return 2 * (nidx > 0 ? nidx : 1) / SEG + 1;
}

static size_t ws_chunk_sums(int64_t nidx, int64_t width)
{
    return align_up((size_t)max_chunks(nidx) * (size_t)(width > 0 ? width : 1) * sizeof(float));
}

static size_t cub_formula(int64_t nidx)
{
    const size_t n = (size_t)(nidx > 0 ? nidx : 1);
    return align_up(16 * n + ((size_t)2 << 20));
}

/* A run of equal rows starts at sorted index i. */
struct run_head {
    const uint64_t *keys;
    int posbits;
    __host__ __device__ bool operator()(const int32_t &i) const
    {
        return i == 0 || (keys[i] >> posbits) != (keys[i - 1] >> posbits);
    }
};

/* CUB's temp bytes for the sort (end_bit), the run selection and the chunk scan of n items. */
static enum tr_status cub_bytes(struct kcu_ctx *c, int64_t n, int end_bit, size_t *bytes)
{
    size_t s = 0, f = 0, q = 0;
    cub::DoubleBuffer<uint64_t> db(NULL, NULL);
    TR_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(NULL, s, db, (int)n, 0, end_bit, c->stream));
    run_head h = {NULL, 0};
    TR_CUDA_CHECK(cub::DeviceSelect::If(NULL, f, (const int32_t *)NULL, (int32_t *)NULL, (int64_t *)NULL,
                                        (int64_t)n, h, c->stream));
    TR_CUDA_CHECK(cub::DeviceScan::InclusiveSum(NULL, q, (int64_t *)NULL, (int64_t)n, c->stream));
    *bytes = s > f ? s : f;
    *bytes = q > *bytes ? q : *bytes;
    return TR_OK;
}

/* The CUB temp region a table of at most nidx ids gets. */
static size_t temp_bytes(struct kcu_ctx *c, int64_t nidx)
{
    size_t t = cub_formula(nidx), q = 0;
    if (!c->sizing_only && nidx <= INT32_MAX && cub_bytes(c, nidx > 0 ? nidx : 1, 64, &q) == TR_OK && q > t)
        t = align_up(q);
    return t;
}

size_t kcu_emb_update_ws_bytes(struct kcu_ctx *c, int64_t nidx, int64_t width, int ntables)
{
    (void)ntables; /* tables run one after another in the same workspace */
    return ws_fixed(nidx) + ws_chunk_sums(nidx, width) + temp_bytes(c, nidx);
}

void kcu_emb_ws(struct kcu_ctx *c, enum kern_op op, const struct kern_shape *s, struct kern_ws *out)
{
    if (s->count < 1 || (op != KERN_OP_EMB_FWD && op != KERN_OP_EMB_UPDATE && op != KERN_OP_EMB_ROWSQ))
        return; /* mark_rows takes no working memory */
    out->scratch = out->staging = check_bytes(s->count); /* the ids' check, before anything else */
    if (op != KERN_OP_EMB_FWD)
        out->args = kcu_emb_update_ws_bytes(c, s->m, s->n, s->count);
}

struct ws_carve {
    uint64_t *k0, *k1;
    int64_t *bag_of;
    float *sc_of;
    int32_t *runs;
    int64_t *nruns;
    int64_t *chunks; /* (n) */
    float *sums;     /* (max_chunks(n), width) */
    void *temp;
    size_t temp_bytes;
};

/* Carves ws (ws_bytes >= ws_fixed(nidx) + ws_chunk_sums(nidx, width) checked by the
 * caller) for tables of at most nidx ids and width columns. */
static void ws_carve(void *ws, size_t ws_bytes, int64_t nidx, int64_t width, struct ws_carve *W)
{
    const size_t n = (size_t)(nidx > 0 ? nidx : 1);
    char *p = (char *)(((uintptr_t)ws + WS_ALIGN - 1) & ~(uintptr_t)(WS_ALIGN - 1));
    W->k0 = (uint64_t *)p;
    p += align_up(n * sizeof(uint64_t));
    W->k1 = (uint64_t *)p;
    p += align_up(n * sizeof(uint64_t));
    W->bag_of = (int64_t *)p;
    p += align_up(n * sizeof(int64_t));
    W->sc_of = (float *)p;
    p += align_up(n * sizeof(float));
    W->runs = (int32_t *)p;
    p += align_up(n * sizeof(int32_t));
    W->nruns = (int64_t *)p;
    p += WS_ALIGN;
    W->chunks = (int64_t *)p;
    p += align_up(n * sizeof(int64_t));
    W->sums = (float *)p;
    p += ws_chunk_sums(nidx, width);
    W->temp = p;
    W->temp_bytes = ws_bytes - (size_t)(p - (char *)ws);
}

/* ---- emb_update / emb_rowsq: kernels ------------------------------------------------------ */

static __global__ void __launch_bounds__(THREADS) keys_kernel(const void *idx, int is64, int64_t base, int64_t n,
                                                              int posbits, uint64_t *keys)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        keys[i] = ((uint64_t)load_id(idx, is64, base + i) << posbits) | (uint64_t)i;
}

/* The bag of every position and its scale (km_bag_scale), positions relative to base. */
static __global__ void __launch_bounds__(THREADS) bags_kernel(const int64_t *off, int64_t nbags, int64_t base,
                                                              int mean, int64_t *bag_of, float *sc_of)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < nbags; b += stride) {
        const int64_t p0 = off[b] - base, p1 = off[b + 1] - base;
        const float sc = km_bag_scale(p1 - p0, mean);
        for (int64_t p = p0; p < p1; p++) {
            bag_of[p] = b;
            sc_of[p] = sc;
        }
    }
}

static __global__ void __launch_bounds__(THREADS) iota_kernel(int32_t *out, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = (int32_t)i;
}

struct upd_params {
    float *tab;            /* table + c0 (NULL in rowsq mode without a table) */
    float *acc;            /* Adagrad: accum + c0; row-wise: accum (one per row); SGD: NULL */
    const float *grad;
    const uint64_t *keys;  /* sorted */
    const int64_t *bag_of; /* NULL: one-hot, the bag is the position */
    const float *sc_of;
    const int32_t *runs;
    const int64_t *nruns;
    const int64_t *chunks; /* inclusive sum over the runs of their chunk counts */
    const float *sums;     /* (chunks, w): each chunk's sums */
    double *row_sumsq;
    int64_t ld, accum_ld, grad_ld, w, dim, nidx;
    struct km_optim h;
    float gs;
    int posbits, kind, rowsq;
};

/* acc[q] = sum over sorted positions [r0, r1), in position order, of
 * scale * grad[bag][cb + 32 q + lane]. Unrolled so that several positions' loads
 * are in flight at once; the additions keep their order. */
static __device__ __forceinline__ void seq_sum(const struct upd_params *P, int64_t r0, int64_t r1, int64_t cb,
                                               int lane, uint64_t posmask, float acc[UPD_CH])
{
#pragma unroll
    for (int q = 0; q < UPD_CH; q++)
        acc[q] = 0.0f;
#pragma unroll 4
    for (int64_t j = r0; j < r1; j++) {
        const int64_t pos = (int64_t)(P->keys[j] & posmask);
        int64_t bag = pos;
        float sc = 1.0f;
        if (P->bag_of) {
            bag = P->bag_of[pos];
            sc = P->sc_of[pos];
        }
        const float *gr = P->grad + bag * P->grad_ld;
#pragma unroll
        for (int q = 0; q < UPD_CH; q++) {
            const int64_t col = cb + 32 * q + lane;
            if (col < P->w)
                acc[q] += gr[col] * sc;
        }
    }
}

/* The chunks of run k: the first one's index and their number (0: a short run, or
 * no chunks at all in this call). */
static __device__ __forceinline__ void run_chunks(const struct upd_params *P, int64_t k, int64_t *ch0, int64_t *nch)
{
    *ch0 = 0;
    *nch = 0;
    if (P->chunks) {
        *ch0 = k ? P->chunks[k - 1] : 0;
        *nch = P->chunks[k] - *ch0;
    }
}

/* g[q] = gs * (the sum of run k = sorted positions [r0, r1), whose chunks run_chunks
 * gave) for column cb + 32 q + lane: seq_sum over the run, or for a long run its
 * chunks' sums in chunk order. */
static __device__ __forceinline__ void run_sum(const struct upd_params *P, int64_t ch0, int64_t nch, int64_t r0,
                                               int64_t r1, int64_t cb, int lane, uint64_t posmask, float g[UPD_CH])
{
    float acc[UPD_CH];
    if (nch == 0) {
        seq_sum(P, r0, r1, cb, lane, posmask, acc);
    } else {
#pragma unroll
        for (int q = 0; q < UPD_CH; q++)
            acc[q] = 0.0f;
        for (int64_t m = 0; m < nch; m++) {
            const float *cs = P->sums + (ch0 + m) * P->w;
#pragma unroll
            for (int q = 0; q < UPD_CH; q++) {
                const int64_t col = cb + 32 * q + lane;
                if (col < P->w)
                    acc[q] += cs[col];
            }
        }
    }
#pragma unroll
    for (int q = 0; q < UPD_CH; q++)
        g[q] = P->gs * acc[q];
}

/* chunks[k] = the chunks of run k: ceil(len / SEG) for a run of more than SEG
 * positions, 0 for a shorter one and past the last run (the inclusive sum that
 * follows then counts every chunk). */
static __global__ void __launch_bounds__(THREADS) chunks_kernel(const int32_t *runs, const int64_t *nruns,
                                                                int64_t nidx, int64_t *chunks)
{
    const int64_t nr = *nruns;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < nidx; k += stride) {
        int64_t c = 0;
        if (k < nr) {
            const int64_t len = (k + 1 < nr ? (int64_t)runs[k + 1] : nidx) - (int64_t)runs[k];
            c = len > SEG ? (len + SEG - 1) / SEG : 0;
        }
        chunks[k] = c;
    }
}

/* One warp per chunk of a long run: sums[ch] = seq_sum over its SEG positions (the
 * last chunk of a run may be shorter), every column. */
static __global__ void __launch_bounds__(THREADS) chunk_sum_kernel(const __grid_constant__ struct upd_params P,
                                                                   float *sums)
{
    const int lane = threadIdx.x & 31;
    const int64_t wstride = (int64_t)gridDim.x * WARPS;
    const int64_t nr = *P.nruns;
    const int64_t total = nr > 0 ? P.chunks[nr - 1] : 0;
    const uint64_t posmask = P.posbits ? (~0ULL >> (64 - P.posbits)) : 0;
    for (int64_t ch = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5); ch < total; ch += wstride) {
        int64_t lo = 0, hi = nr - 1; /* the run: the first k with chunks[k] > ch */
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (P.chunks[mid] > ch)
                hi = mid;
            else
                lo = mid + 1;
        }
        const int64_t first = lo ? P.chunks[lo - 1] : 0;
        const int64_t r0 = (int64_t)P.runs[lo] + (ch - first) * SEG;
        const int64_t rend = lo + 1 < nr ? (int64_t)P.runs[lo + 1] : P.nidx;
        const int64_t r1 = r0 + SEG < rend ? r0 + SEG : rend;
        for (int64_t cb = 0; cb < P.w; cb += 32 * UPD_CH) {
            float acc[UPD_CH];
            seq_sum(&P, r0, r1, cb, lane, posmask, acc);
#pragma unroll
            for (int q = 0; q < UPD_CH; q++) {
                const int64_t col = cb + 32 * q + lane;
                if (col < P.w)
                    sums[ch * P.w + col] = acc[q];
            }
        }
    }
}

/* One warp per distinct row k (runs in ascending row order), lanes over columns.
 * rowsq: row_sumsq[k] = the row's sum of squares over [c0, c1) for k < nruns, 0 for
 * k in [nruns, nidx). Otherwise one optimizer step per distinct row. */
static __global__ void __launch_bounds__(THREADS) run_kernel(const __grid_constant__ struct upd_params P)
{
    const int lane = threadIdx.x & 31;
    const int64_t wstride = (int64_t)gridDim.x * WARPS;
    const int64_t nruns = *P.nruns;
    const uint64_t posmask = P.posbits ? (~0ULL >> (64 - P.posbits)) : 0;
    const int64_t kend = P.rowsq ? P.nidx : nruns;
    const int64_t bw = 32 * UPD_CH; /* columns per pass */
    const int need_sq = P.rowsq || (P.kind == KERN_OPT_ROWWISE_ADAGRAD && !P.row_sumsq);
    for (int64_t k = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5); k < kend; k += wstride) {
        if (k >= nruns) { /* rowsq only: no such distinct row */
            if (lane == 0)
                P.row_sumsq[k] = 0.0;
            continue;
        }
        const int64_t r0 = P.runs[k], r1 = k + 1 < nruns ? P.runs[k + 1] : P.nidx;
        const int64_t row = (int64_t)(P.keys[r0] >> P.posbits);
        int64_t ch0, nch;
        run_chunks(&P, k, &ch0, &nch);
        float g[UPD_CH];
        double sq = 0.0;
        if (need_sq) {
            /* every lane adds the columns in order 0, 1, ..., w-1 (the CPU's order),
             * each value broadcast from the lane that holds it */
            for (int64_t cb = 0; cb < P.w; cb += bw) {
                run_sum(&P, ch0, nch, r0, r1, cb, lane, posmask, g);
#pragma unroll
                for (int q = 0; q < UPD_CH; q++)
                    for (int l = 0; l < 32; l++) {
                        const float v = __shfl_sync(FULL, g[q], l);
                        if (cb + 32 * q + l < P.w)
                            sq = km_sumsq_add(sq, v);
                    }
            }
            if (P.rowsq) {
                if (lane == 0)
                    P.row_sumsq[k] = sq;
                continue;
            }
        }
        float den = 0.0f;
        if (P.kind == KERN_OPT_ROWWISE_ADAGRAD) {
            if (P.row_sumsq)
                sq = P.row_sumsq[k];
            if (lane == 0)
                den = km_rowwise_adagrad_row(&P.acc[row], sq, P.dim, &P.h);
            den = __shfl_sync(FULL, den, 0);
        }
        float *p = P.tab + row * P.ld;
        for (int64_t cb = 0; cb < P.w; cb += bw) {
            if (!need_sq || P.w > bw) /* else g still holds the one pass of the sum */
                run_sum(&P, ch0, nch, r0, r1, cb, lane, posmask, g);
#pragma unroll
            for (int q = 0; q < UPD_CH; q++) {
                const int64_t col = cb + 32 * q + lane;
                if (col >= P.w)
                    continue;
                if (P.kind == KERN_OPT_SGD)
                    km_sgd_step(&p[col], g[q], &P.h);
                else if (P.kind == KERN_OPT_ROWWISE_ADAGRAD)
                    km_rowwise_adagrad_step(&p[col], g[q], den, &P.h);
                else
                    km_adagrad_step(&p[col], &P.acc[row * P.accum_ld + col], g[q], &P.h);
            }
        }
    }
}

/* ---- emb_update / emb_rowsq: host ------------------------------------------------------------ */

/* Sorts, finds the runs and steps (or, rowsq, writes the sums) for one table of nidx > 0
 * ids from base and w > 0 columns; bits and workspace were checked by the caller. */
static enum tr_status update_one(struct kcu_ctx *c, const struct kern_emb_update_args *a, const struct ws_carve *W,
                                 int64_t base, int64_t nidx, int rowsq)
{
    const int64_t w = a->c1 - a->c0;
    const int posbits = kern_bits_for((uint64_t)(nidx - 1));
    const int rowbits = kern_bits_for((uint64_t)(a->rows - 1));
    keys_kernel<<<kcu_blocks(c, nidx, THREADS), THREADS, 0, c->stream>>>(a->idx, a->idx_dtype == KERN_I64, base, nidx,
                                                                          posbits, W->k0);
    KCU_LAUNCHED();
    if (a->offsets) {
        bags_kernel<<<kcu_blocks(c, a->nbags, THREADS), THREADS, 0, c->stream>>>(
            a->offsets, a->nbags, base, a->comb == KERN_COMB_MEAN, W->bag_of, W->sc_of);
        KCU_LAUNCHED();
    }
    cub::DoubleBuffer<uint64_t> db(W->k0, W->k1);
    if (nidx > 1) { /* one key is sorted (and 0 key bits would be an empty sort) */
        size_t tb = W->temp_bytes;
        TR_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(W->temp, tb, db, (int)nidx, 0, posbits + rowbits, c->stream));
    }
    /* the sorted index of every run start, in ascending row order; the input is an
     * iota in the half of the double buffer the sort left free */
    int32_t *iota = (int32_t *)db.Alternate();
    iota_kernel<<<kcu_blocks(c, nidx, THREADS), THREADS, 0, c->stream>>>(iota, nidx);
    KCU_LAUNCHED();
    run_head h = {db.Current(), posbits};
    size_t tb = W->temp_bytes;
    TR_CUDA_CHECK(cub::DeviceSelect::If(W->temp, tb, (const int32_t *)iota, W->runs, W->nruns, nidx, h, c->stream));

    struct upd_params P;
    memset(&P, 0, sizeof P);
    P.tab = a->table && !rowsq ? a->table + a->c0 : NULL;
    if (!rowsq && a->hp.kind == KERN_OPT_ADAGRAD)
        P.acc = a->accum + a->c0;
    else if (!rowsq && a->hp.kind == KERN_OPT_ROWWISE_ADAGRAD)
        P.acc = a->accum;
    P.grad = a->grad;
    P.keys = db.Current();
    P.bag_of = a->offsets ? W->bag_of : NULL;
    P.sc_of = a->offsets ? W->sc_of : NULL;
    P.runs = W->runs;
    P.nruns = W->nruns;
    if (nidx > SEG) { /* else no run is long: no chunks */
        P.chunks = W->chunks;
        P.sums = W->sums;
    }
    P.row_sumsq = rowsq || a->hp.kind == KERN_OPT_ROWWISE_ADAGRAD ? a->row_sumsq : NULL;
    P.ld = a->ld;
    P.accum_ld = a->accum_ld;
    P.grad_ld = a->grad_ld;
    P.w = w;
    P.dim = a->dim > 0 ? a->dim : w;
    P.nidx = nidx;
    P.h.lr = a->hp.lr;
    P.h.eps = a->hp.eps;
    P.gs = a->grad_scale;
    P.posbits = posbits;
    P.kind = (int)a->hp.kind;
    P.rowsq = rowsq;
    /* the long runs' chunks: counted, summed over the runs, then summed one warp each
     * (max_chunks(nidx) warps bound their number, read from the device) */
    if (P.chunks) {
        chunks_kernel<<<kcu_blocks(c, nidx, THREADS), THREADS, 0, c->stream>>>(W->runs, W->nruns, nidx, W->chunks);
        KCU_LAUNCHED();
        tb = W->temp_bytes;
        TR_CUDA_CHECK(cub::DeviceScan::InclusiveSum(W->temp, tb, W->chunks, nidx, c->stream));
        chunk_sum_kernel<<<kcu_blocks(c, max_chunks(nidx), WARPS), THREADS, 0, c->stream>>>(P, W->sums);
        KCU_LAUNCHED();
    }
    /* nidx warps bound the run count (the kernel reads the count from the device) */
    run_kernel<<<kcu_blocks(c, nidx, WARPS), THREADS, 0, c->stream>>>(P);
    KCU_LAUNCHED();
    return TR_OK;
}

static enum tr_status emb_update_n(struct kcu_ctx *c, const struct kern_emb_update_args *a, int n, int rowsq)
{
    if (n < 1)
        return TR_OK;
    if (c->sizing_only)
        return TR_ERR_UNSUPPORTED;
    /* the CPU checks table by table and stops at the first failure: validate the ids
     * of the tables before the first one whose arguments are bad */
    int nval = 0;
    while (nval < n && cols_ok(a[nval].c0, a[nval].c1, a[nval].ld) && kern_check_emb_optim(&a[nval], rowsq) == TR_OK &&
           ids_args_ok(a[nval].idx_dtype, a[nval].nbags))
        nval++;
    const unsigned long long *res = NULL;
    if (nval > 0)
        TR_CHECK(validate_ids(c, a, nval, &res));
    int64_t max_nidx = 0, max_w = 0;
    for (int t = 0; t < n; t++) {
        if (!cols_ok(a[t].c0, a[t].c1, a[t].ld))
            return TR_ERR_ARG;
        TR_CHECK(kern_check_emb_optim(&a[t], rowsq));
        if (t >= nval) { /* a bad dtype or nbags */
            if (a[t].bad_pos)
                *a[t].bad_pos = -1;
            return TR_ERR_ARG;
        }
        int64_t base = 0, nidx = 0;
        TR_CHECK(ids_verdict(res + 4 * (size_t)t, a[t].idx_dtype, a[t].nbags, a[t].bad_pos, &base, &nidx));
        if (nidx > INT32_MAX)
            return TR_ERR_UNSUPPORTED;
        max_nidx = nidx > max_nidx ? nidx : max_nidx;
        max_w = a[t].c1 - a[t].c0 > max_w ? a[t].c1 - a[t].c0 : max_w;
    }
    /* every table passed: res (pinned, untouched until the next kcu_pinned) holds base, end */
    if (rowsq && max_w == 0) { /* no columns here at all: zeros, no workspace needed */
        for (int t = 0; t < n; t++) {
            const int64_t nidx = (int64_t)res[4 * (size_t)t + 3] - (int64_t)res[4 * (size_t)t + 2];
            if (nidx > 0)
                TR_CUDA_CHECK(cudaMemsetAsync(a[t].row_sumsq, 0, (size_t)nidx * sizeof(double), c->stream));
        }
        return TR_OK;
    }
    const size_t need = ws_fixed(max_nidx) + ws_chunk_sums(max_nidx, max_w) + temp_bytes(c, max_nidx);
    if (!a[0].ws || a[0].ws_bytes < need)
        return TR_ERR_ARG;
    struct ws_carve W;
    ws_carve(a[0].ws, a[0].ws_bytes, max_nidx, max_w, &W);
    /* everything that can still fail is checked before the first table is touched */
    for (int t = 0; t < n; t++) {
        const int64_t nidx = (int64_t)res[4 * (size_t)t + 3] - (int64_t)res[4 * (size_t)t + 2];
        if (nidx == 0 || a[t].c1 == a[t].c0)
            continue;
        const int bits = kern_bits_for((uint64_t)(nidx - 1)) + kern_bits_for((uint64_t)(a[t].rows - 1));
        if (bits > 64)
            return TR_ERR_UNSUPPORTED;
        size_t q = 0;
        TR_CHECK(cub_bytes(c, nidx, bits > 0 ? bits : 1, &q)); /* 0 bits: one id, never sorted */
        if (q > W.temp_bytes) /* CUB asks more than the formula allowed: refuse, never overrun */
            return TR_ERR_ARG;
    }
    for (int t = 0; t < n; t++) {
        const int64_t base = (int64_t)res[4 * (size_t)t + 2];
        const int64_t nidx = (int64_t)res[4 * (size_t)t + 3] - base;
        if (rowsq && a[t].c1 == a[t].c0) { /* no columns: nothing to add to the sums */
            if (nidx > 0)
                TR_CUDA_CHECK(cudaMemsetAsync(a[t].row_sumsq, 0, (size_t)nidx * sizeof(double), c->stream));
            continue;
        }
        if (nidx == 0 || a[t].c1 == a[t].c0)
            continue;
        TR_CHECK(update_one(c, &a[t], &W, base, nidx, rowsq));
    }
    return TR_OK;
}

enum tr_status kcu_emb_update(struct kcu_ctx *c, const struct kern_emb_update_args *a, int n)
{
    return emb_update_n(c, a, n, 0);
}

enum tr_status kcu_emb_rowsq(struct kcu_ctx *c, const struct kern_emb_update_args *a, int n)
{
    return emb_update_n(c, a, n, 1);
}

/* ---- mark_rows ------------------------------------------------------------------------------
 * One launch per 32 tables, block row y over the ids of table y. Many threads may
 * store the same byte 1: idempotent, no atomics needed. */

struct mark_tab {
    const void *idx;
    uint8_t *dirty;
    int64_t n, rows, block_rows;
    int is64;
};

struct mark_params {
    struct mark_tab t[MAXT];
};

static __global__ void __launch_bounds__(THREADS) mark_kernel(const __grid_constant__ struct mark_params P)
{
    const struct mark_tab *d = &P.t[blockIdx.y];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < d->n; i += stride) {
        const int64_t id = load_id(d->idx, d->is64, i);
        if (id >= 0 && id < d->rows)
            d->dirty[km_row_block(id, d->block_rows)] = 1;
    }
}

enum tr_status kcu_mark_rows(struct kcu_ctx *c, const struct kern_mark_rows_args *a, int n)
{
    TR_CHECK(kern_check_mark_rows(a, n));
    if (n == 0)
        return TR_OK;
    if (c->sizing_only)
        return TR_ERR_UNSUPPORTED;
    for (int t0 = 0; t0 < n; t0 += MAXT) {
        const int nt = n - t0 < MAXT ? n - t0 : MAXT;
        struct mark_params P;
        memset(&P, 0, sizeof P);
        int64_t most = 0;
        for (int k = 0; k < nt; k++) {
            const struct kern_mark_rows_args *x = &a[t0 + k];
            P.t[k].idx = x->idx;
            P.t[k].dirty = x->dirty;
            P.t[k].n = x->n;
            P.t[k].rows = x->rows;
            P.t[k].block_rows = x->block_rows;
            P.t[k].is64 = x->idx_dtype == KERN_I64;
            most = x->n > most ? x->n : most;
        }
        if (most == 0)
            continue;
        dim3 grid(kcu_blocks(c, most, THREADS), (unsigned)nt);
        mark_kernel<<<grid, THREADS, 0, c->stream>>>(P);
        KCU_LAUNCHED();
    }
    return TR_OK;
}
