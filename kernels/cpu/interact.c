/* interact.c: CPU dot interaction, forward and backward, in the seed's layout
 * ([bottom | strict lower triangle row-major | zero pad]), a pass over the batch.
 * Forward: per sample, the triangle is cut into tiles of VW pairs (4 rows x 4
 * columns with AVX-512's VW = 16, 2 x 4 with VW = 8); a tile's dot products run in
 * VW lanes along the vectors, each row's and column's vector loaded once a step
 * for all the tile's products, and one shuffle tree turns the VW accumulators into
 * the tile's VW sums; when the vectors are short (dim up to 32) and at most 4
 * vector widths of them, it transposes the sample instead (in registers, VW x VW
 * blocks) and computes each Gram row with one broadcast FMA a dimension
 * (fwd_gram), rows in blocks of 4 or 2, with no shuffle tree. Backward: dx = S x
 * (S the symmetric pair gradients, zero diagonal) by register tiles of up to 8
 * rows x 2 vectors or 4 x 4, the coefficients read straight from the pair
 * gradients. The loops are written once (interact_body.inc) and compiled per
 * instruction set; the set is chosen at run time. Every output element is a sum in a fixed order, so results
 * are bitwise independent of the thread count (threads split the batch). It does
 * not implement the concat or cat-only interaction variants. */
#define TR_SUBSYS TR_SUB_KERN
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
# include <immintrin.h>
#endif

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

#define INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
# define HAVE_AVX512_BODY 1
#endif

/* ---- vectors of 8 (the build's baseline: AVX2 on x86-64-v3) ---------------------- */
typedef float v8f __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
typedef int v8i __attribute__((vector_size(32)));

/* r[q] = sum of the lanes of a[bitrev3(q)]: three levels, each adding two shuffles of
 * a pair of vectors (halves, then quarters, then neighbours); the lane sums come
 * out in bit-reversed order of the accumulators, which fwd_tiles undoes (BITREV). */
INLINE v8f reduce8(const v8f *a)
{
    v8f u[4], v[2];
    for (int m = 0; m < 4; m++)
        u[m] = __builtin_shuffle(a[2 * m], a[2 * m + 1], (v8i){0, 1, 2, 3, 8, 9, 10, 11}) +
               __builtin_shuffle(a[2 * m], a[2 * m + 1], (v8i){4, 5, 6, 7, 12, 13, 14, 15});
    for (int m = 0; m < 2; m++)
        v[m] = __builtin_shuffle(u[2 * m], u[2 * m + 1], (v8i){0, 1, 8, 9, 4, 5, 12, 13}) +
               __builtin_shuffle(u[2 * m], u[2 * m + 1], (v8i){2, 3, 10, 11, 6, 7, 14, 15});
    return __builtin_shuffle(v[0], v[1], (v8i){0, 8, 2, 10, 4, 12, 6, 14}) +
           __builtin_shuffle(v[0], v[1], (v8i){1, 9, 3, 11, 5, 13, 7, 15});
}

/* r[0..8) transposed in place (r[k][j] = old r[j][k]): at block sizes 4, 2, 1, the
 * upper-right and lower-left blocks of each 2b x 2b block swapped. */
INLINE void transpose8(v8f *r)
{
    static const v8i m[3][2] = {{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}},
                                {{0, 1, 8, 9, 4, 5, 12, 13}, {2, 3, 10, 11, 6, 7, 14, 15}},
                                {{0, 8, 2, 10, 4, 12, 6, 14}, {1, 9, 3, 11, 5, 13, 7, 15}}};
    for (int l = 0, b = 4; l < 3; l++, b >>= 1)
        for (int j = 0; j < 8; j++)
            if (!(j & b)) {
                const v8f lo = __builtin_shuffle(r[j], r[j + b], m[l][0]);
                r[j + b] = __builtin_shuffle(r[j], r[j + b], m[l][1]);
                r[j] = lo;
            }
}

#define VW 8
#define VEC v8f
#define LOADV(p) (*(const v8u *)(p))
#define STOREV(p, v) (*(v8u *)(p) = (v))
#define SPLATV(s) ((v8f){(s), (s), (s), (s), (s), (s), (s), (s)})
#define REDUCE reduce8
#define TRANSPOSE transpose8
#define BITREV(q) ((((q) & 1) << 2) | ((q) & 2) | (((q) & 4) >> 2))
#define TILE_R 2
#define TILE_C 4
#if defined(__x86_64__) && defined(__AVX__)
# define STREAMV(p, v) _mm256_stream_ps((float *)(p), (__m256)(v))
#else
# define STREAMV(p, v) STOREV(p, v)
#endif
#define TARGET
#define SFX _v8
#include "interact_body.inc"
#undef VW
#undef VEC
#undef LOADV
#undef STOREV
#undef SPLATV
#undef REDUCE
#undef TRANSPOSE
#undef STREAMV
#undef BITREV
#undef TILE_R
#undef TILE_C
#undef TARGET
#undef SFX

#ifdef HAVE_AVX512_BODY
/* ---- vectors of 16 (AVX-512, when the processor has it) -------------------------- */
typedef float v16f __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4), may_alias));
typedef int v16i __attribute__((vector_size(64)));

/* As reduce8, four levels: r[q] = sum of the lanes of a[bitrev4(q)]. */
__attribute__((target("avx512f"))) INLINE v16f reduce16(const v16f *a)
{
    static const v16i h0 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    static const v16i h1 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    static const v16i q0 = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
    static const v16i q1 = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
    static const v16i e0 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
    static const v16i e1 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
    static const v16i n0 = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
    static const v16i n1 = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
    v16f u[8], v[4], w[2];
    for (int m = 0; m < 8; m++)
        u[m] = __builtin_shuffle(a[2 * m], a[2 * m + 1], h0) + __builtin_shuffle(a[2 * m], a[2 * m + 1], h1);
    for (int m = 0; m < 4; m++)
        v[m] = __builtin_shuffle(u[2 * m], u[2 * m + 1], q0) + __builtin_shuffle(u[2 * m], u[2 * m + 1], q1);
    for (int m = 0; m < 2; m++)
        w[m] = __builtin_shuffle(v[2 * m], v[2 * m + 1], e0) + __builtin_shuffle(v[2 * m], v[2 * m + 1], e1);
    return __builtin_shuffle(w[0], w[1], n0) + __builtin_shuffle(w[0], w[1], n1);
}

/* As transpose8, block sizes 8, 4, 2, 1 (the same masks as reduce16's). */
__attribute__((target("avx512f"))) INLINE void transpose16(v16f *r)
{
    static const v16i m[4][2] = {
        {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
         {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
        {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
         {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
        {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
         {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
        {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
         {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}}};
    for (int l = 0, b = 8; l < 4; l++, b >>= 1)
        for (int j = 0; j < 16; j++)
            if (!(j & b)) {
                const v16f lo = __builtin_shuffle(r[j], r[j + b], m[l][0]);
                r[j + b] = __builtin_shuffle(r[j], r[j + b], m[l][1]);
                r[j] = lo;
            }
}

#define VW 16
#define VEC v16f
#define LOADV(p) (*(const v16u *)(p))
#define STOREV(p, v) (*(v16u *)(p) = (v))
#define SPLATV(s) ((v16f){(s), (s), (s), (s), (s), (s), (s), (s), (s), (s), (s), (s), (s), (s), (s), (s)})
#define REDUCE reduce16
#define TRANSPOSE transpose16
#define BITREV(q) ((((q) & 1) << 3) | (((q) & 2) << 1) | (((q) & 4) >> 1) | (((q) & 8) >> 3))
#define TILE_R 4
#define TILE_C 4
#define STREAMV(p, v) _mm512_stream_ps((float *)(p), (__m512)(v))
#define TARGET __attribute__((target("avx512f")))
#define SFX _v16
#include "interact_body.inc"
#undef VW
#undef VEC
#undef LOADV
#undef STOREV
#undef SPLATV
#undef REDUCE
#undef TRANSPOSE
#undef STREAMV
#undef BITREV
#undef TILE_R
#undef TILE_C
#undef TARGET
#undef SFX
#endif

/* The vector width: 16 when the processor has AVX-512, else 8; TR_CPU_SIMD=avx2
 * makes it 8 anyway (tests run both bodies on one machine; read at every call). */
static int vector_width(void)
{
#ifdef HAVE_AVX512_BODY
    static _Atomic int hw;
    int w = atomic_load(&hw);
    if (!w) {
        __builtin_cpu_init();
        w = __builtin_cpu_supports("avx512f") ? 16 : 8;
        atomic_store(&hw, w);
    }
    const char *e = getenv("TR_CPU_SIMD");
    return e && strcmp(e, "avx2") == 0 ? 8 : w;
#else
    return 8;
#endif
}

static int64_t round_up(int64_t v, int64_t m)
{
    return (v + m - 1) / m * m;
}

/* Per-thread scratch: for widths that are not a multiple of the vector, one sample
 * padded with zero columns (xs) and its gradient (dxs); tmp holds one vector. */
struct scratch {
    char *mem;
    float *xs, *dxs, *tmp;
    float *xt; /* the transposed sample of fwd_gram, when it applies */
    int64_t dp;
};

/* fwd_gram applies: at most 4 vectors a Gram row and at most GRAM_DIM columns
 * (each a step of every row's FMA chain). Measured on the kernel alone (2 threads,
 * B 2048, n 27, ms): AVX-512 d 16: 0.29 against 0.79 by pairs, d 32: 0.75 against
 * 1.05, d 64: 1.99 against 1.25; AVX2 d 16: 0.27 against 0.52, d 32: 0.59 against
 * 0.67, d 64: 1.63 against 1.01. */
#define GRAM_DIM 32
static int gram_fits(int n, int64_t dp, int vw)
{
    return dp <= GRAM_DIM && n <= 4 * vw;
}

static size_t scratch_bytes(int n, int d, int vw)
{
    const int64_t dp = round_up(d, vw);
    const int64_t pad = dp == d ? 0 : 2 * (int64_t)n * dp;
    const int64_t xt = gram_fits(n, dp, vw) ? dp * round_up(n, vw) : 0;
    return (size_t)(pad + vw + xt) * sizeof(float);
}

size_t kern_cpu_interact_call_bytes(int n, int d, int threads)
{
    return n >= 1 && d >= 1 ? scratch_bytes(n, d, vector_width()) * (size_t)(threads > 1 ? threads : 1) : 0;
}

static int scratch_get(struct scratch *sc, int n, int d, int vw)
{
    const int64_t dp = round_up(d, vw);
    sc->mem = tr_malloc(scratch_bytes(n, d, vw));
    if (!sc->mem)
        return -1;
    sc->tmp = (float *)sc->mem;
    sc->xs = dp == d ? NULL : sc->tmp + vw;
    sc->dxs = dp == d ? NULL : sc->xs + (int64_t)n * dp;
    sc->xt = !gram_fits(n, dp, vw) ? NULL : sc->dxs ? sc->dxs + (int64_t)n * dp : sc->tmp + vw; /* after the rest */
    sc->dp = dp;
    if (sc->xs)
        memset(sc->xs, 0, (size_t)(2 * (int64_t)n * dp) * sizeof(float));
    return 0;
}

/* x's sample, or its copy padded to dp columns with zeros. */
static const float *padded(const float *x, int n, int d, const struct scratch *sc)
{
    if (!sc->xs)
        return x;
    for (int i = 0; i < n; i++)
        memcpy(sc->xs + i * sc->dp, x + (int64_t)i * d, (size_t)d * sizeof(float));
    return sc->xs;
}

/* Forward of sample s. Before it, the next sample's x is fetched into the cache:
 * measured in bench_train's steps (2 threads, B 2048, n 27), mlperf's d 128
 * (13.5 KiB a sample) 1.20-1.25 against 2.20-2.33 ms; the kernel alone at d 16 and
 * 64 within the noise either way. */
static void fwd_sample(const struct kern_interact_fwd_args *a, int64_t s, const struct scratch *sc, int vw)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0, P = km_tri_count(n);
    const float *x = a->x + s * (int64_t)n * d;
    float *o = a->out + s * a->out_w;
    if (s + 1 < a->batch) /* the tiles touch rows out of order: the next sample's lines first */
        for (int64_t q = 0; q < (int64_t)n * d; q += 64 / (int64_t)sizeof(float))
            __builtin_prefetch(x + (int64_t)n * d + q, 0, 3);
    if (a->has_bottom)
        memcpy(o, x, (size_t)d * sizeof(float));
    if (P > 0) {
        const float *xp = padded(x, n, d, sc);
        float *pairs = o + off;
#ifdef HAVE_AVX512_BODY
        if (vw == 16) {
            if (sc->xt)
                fwd_gram_v16(xp, sc->dp, n, P, sc->xt, pairs, sc->tmp);
            else
                fwd_tiles_v16(xp, sc->dp, n, pairs, sc->tmp);
        } else
#endif
        {
            if (sc->xt)
                fwd_gram_v8(xp, sc->dp, n, P, sc->xt, pairs, sc->tmp);
            else
                fwd_tiles_v8(xp, sc->dp, n, pairs, sc->tmp);
        }
    }
    for (int64_t c = off + P; c < a->out_w; c++)
        o[c] = 0.0f;
}

/* A sample's dx of at least this many bytes has the next sample's lines fetched
 * before its stores, which would otherwise each wait for its line. Measured on the
 * kernel alone (2 threads, B 2048, n 27): d 128 (13.5 KiB a sample) 3.0 against
 * 4.1 ms; d 16 and 64 within the noise either way. */
#define PREFETCH_DX_BYTES 8192

/* A dx of at least this many bytes is stored past the cache (when its rows need no
 * padding and it is aligned to a vector): it would not stay there until the
 * embedding update reads it, and a store to a line not in the cache first reads
 * it. Measured in bench_train's steps (2 threads, B 2048, n 27): embbound (d 64,
 * 13.5 MiB) 0.95-1.05 against 1.95-2.09 ms. */
#define STREAM_DX_BYTES (8 << 20)

/* Backward of sample s; returns nonzero when its dx holds a NaN or inf. stream:
 * dx's stores bypass the cache (only when sc has no padded copy). */
static int bwd_sample(const struct kern_interact_bwd_args *a, int64_t s, const struct scratch *sc, int vw, int stream)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    const float *x = a->x + s * (int64_t)n * d;
    const float *g = a->dout + s * a->out_w + off;
    const float *gb = a->has_bottom ? a->dout + s * a->out_w : NULL;
    float *dx = a->dx + s * (int64_t)n * d;
    if (!stream && s + 1 < a->batch && (int64_t)n * d * (int64_t)sizeof(float) >= PREFETCH_DX_BYTES)
        for (int64_t o = 0; o < (int64_t)n * d; o += 64 / (int64_t)sizeof(float))
            __builtin_prefetch(dx + (int64_t)n * d + o, 1, 3);
    const float *xp = padded(x, n, d, sc);
    float *dxp = sc->dxs ? sc->dxs : dx;
    const float *gbp = sc->dxs ? NULL : gb; /* padded rows: added below */
    int bad;
#ifdef HAVE_AVX512_BODY
    if (vw == 16)
        bad = bwd_sample_v16(xp, sc->dp, n, g, dxp, gbp, stream);
    else
#endif
        bad = bwd_sample_v8(xp, sc->dp, n, g, dxp, gbp, stream);
    if (sc->dxs) { /* the padding columns are not outputs: look at the real ones */
        bad = 0;
        for (int i = 0; i < n; i++) {
            memcpy(dx + (int64_t)i * d, sc->dxs + i * sc->dp, (size_t)d * sizeof(float));
            for (int k = 0; k < d; k++)
                bad |= !isfinite(dx[(int64_t)i * d + k]);
        }
        if (gb)
            for (int k = 0; k < d; k++) {
                dx[k] += gb[k];
                bad |= !isfinite(dx[k]);
            }
    }
    return bad;
}

/* Runs the forward (fwd) or backward of every sample, threads splitting the batch,
 * each with its own scratch; stream as for bwd_sample. TR_ERR_NOMEM if a scratch
 * cannot be had. */
static enum tr_status for_each_sample(int64_t batch, int n, int d, const void *args, int fwd, int stream)
{
    const int vw = vector_width();
    int failed = 0, bad = 0;
#pragma omp parallel reduction(| : failed, bad)
    {
        struct scratch sc = {0};
        if (scratch_get(&sc, n, d, vw) != 0) {
            failed = 1;
        } else if (fwd) {
#pragma omp for schedule(static)
            for (int64_t s = 0; s < batch; s++)
                fwd_sample(args, s, &sc, vw);
        } else {
#pragma omp for schedule(static) nowait
            for (int64_t s = 0; s < batch; s++)
                bad |= bwd_sample(args, s, &sc, vw, stream && !sc.dxs);
#if defined(__x86_64__) && defined(__GNUC__)
            if (stream)
                _mm_sfence(); /* this thread's streaming stores, before the region's end */
#endif
        }
        tr_free(sc.mem);
    }
    if (!fwd && ((const struct kern_interact_bwd_args *)args)->nonfinite)
        *((const struct kern_interact_bwd_args *)args)->nonfinite = bad;
    return failed ? TR_ERR_NOMEM : TR_OK;
}

enum tr_status kern_cpu_interact_fwd(const struct kern_interact_fwd_args *a)
{
    const int64_t off = a->has_bottom ? a->d : 0;
    if (a->n < 1 || a->d < 1 || a->out_w < off + km_tri_count(a->n))
        return TR_ERR_ARG;
    return for_each_sample(a->batch, a->n, a->d, a, 1, 0);
}

/* dx = S x with S_ij = dout[pair(max(i,j), min(i,j))], S_ii = 0; then the bottom
 * gradient dout[:, 0:d] is added into dx[:, 0, :]. */
enum tr_status kern_cpu_interact_bwd(const struct kern_interact_bwd_args *a)
{
    const int64_t off = a->has_bottom ? a->d : 0;
    if (a->n < 1 || a->d < 1 || a->out_w < off + km_tri_count(a->n))
        return TR_ERR_ARG;
    const int vw = vector_width();
    const int stream = a->d % vw == 0 && (uintptr_t)a->dx % ((uintptr_t)vw * sizeof(float)) == 0 &&
                       a->batch * a->n * a->d * (int64_t)sizeof(float) >= STREAM_DX_BYTES;
    return for_each_sample(a->batch, a->n, a->d, a, 0, stream);
}
