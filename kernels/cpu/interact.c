/* interact.c: CPU dot interaction, forward and backward, in the seed's layout
 * ([bottom | strict lower triangle row-major | zero pad]). Per sample both
 * directions are small matrix products (Z = X X^T, dX = S X with S the
 * symmetric pair-gradient matrix) done by a 4-row x 16-column register-blocked
 * micro-kernel written with GCC vector extensions. The per-sample functions are
 * compiled twice (AVX-512 and the build's baseline) and chosen at load time.
 * Every output element is one sequential sum over its inner dimension, so
 * results are bitwise independent of the thread count (threads split the batch)
 * and of the clone chosen. It does not implement the concat or cat-only
 * interaction variants. */
#define TR_SUBSYS TR_SUB_KERN
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

typedef float v16f __attribute__((vector_size(64)));
/* the same vector, for unaligned loads and stores through any float pointer */
typedef float v16u __attribute__((vector_size(64), aligned(4), may_alias));

#define RB 4 /* rows per micro-tile */
#define CB 16 /* columns per micro-tile (one v16f) */

/* not under ASan or TSan: the clones' resolver runs while the program is relocated,
 * before the sanitizer's runtime is ready (under TSan it crashes there) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
# define CLONES __attribute__((target_clones("avx512f", "default")))
#else
# define CLONES
#endif

#define INLINE static inline __attribute__((always_inline))

/* unaligned vector load and store, and a broadcast (macros: vectors are not
 * passed through function boundaries, whose ABI differs with and without AVX-512) */
#define LOAD16(p) (*(const v16u *)(p))
#define STORE16(p, v) (*(v16u *)(p) = (v))
#define SPLAT16(a) ((v16f){(a), (a), (a), (a), (a), (a), (a), (a), (a), (a), (a), (a), (a), (a), (a), (a)})

/* c[r][0..16) = sum_k a[r][k] * b[k][0..16) for r < 4; a rows are a0..a3 (each
 * K long), b is (K, ldb). Each output is one sequential sum over k. */
INLINE void tile_4x16(const float *a0, const float *a1, const float *a2, const float *a3, const float *b, int64_t ldb,
                      int K, float c[RB][CB])
{
    v16f c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
    for (int k = 0; k < K; k++) {
        v16f bk = LOAD16(b + k * ldb);
        c0 += SPLAT16(a0[k]) * bk;
        c1 += SPLAT16(a1[k]) * bk;
        c2 += SPLAT16(a2[k]) * bk;
        c3 += SPLAT16(a3[k]) * bk;
    }
    STORE16(c[0], c0);
    STORE16(c[1], c1);
    STORE16(c[2], c2);
    STORE16(c[3], c3);
}

/* Per-thread scratch: xt (d, npad) the transposed sample, s (ceil4(n), n) the
 * pair-gradient matrix, zero (max(d, n)) a row of zeros for padding tiles. */
struct scratch {
    float *xt, *s, *zero;
    int64_t npad;
};

static size_t scratch_floats(int n, int d)
{
    const int64_t npad = TR_CEIL_DIV(n, CB) * CB, n4 = TR_CEIL_DIV(n, RB) * RB;
    const int64_t zn = TR_MAX(d, npad) + CB;
    return (size_t)(d * npad + n4 * n + zn);
}

size_t kern_cpu_interact_call_bytes(int n, int d, int threads)
{
    return n >= 1 && d >= 1 ? scratch_floats(n, d) * sizeof(float) * (size_t)(threads > 1 ? threads : 1) : 0;
}

static int scratch_get(struct scratch *sc, int n, int d)
{
    sc->npad = TR_CEIL_DIV(n, CB) * CB;
    int64_t n4 = TR_CEIL_DIV(n, RB) * RB;
    float *p = tr_calloc(scratch_floats(n, d), sizeof(float));
    if (!p)
        return -1;
    sc->xt = p;
    sc->s = p + d * sc->npad;
    sc->zero = sc->s + n4 * n;
    return 0;
}

/* Forward of sample s. */
CLONES static void fwd_sample(const struct kern_interact_fwd_args *a, int64_t s, const struct scratch *sc_)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    const int64_t used = off + km_tri_count(n);
    struct scratch sc = *sc_;
    const float *x = a->x + s * (int64_t)n * d;
    float *o = a->out + s * a->out_w;
    if (a->has_bottom)
        memcpy(o, x, (size_t)d * sizeof(float));
    float *pairs = o + off;
    for (int j = 0; j < n; j++) /* transpose; padding columns stay zero */
        for (int k = 0; k < d; k++)
            sc.xt[(int64_t)k * sc.npad + j] = x[(int64_t)j * d + k];
    for (int i0 = 1; i0 < n; i0 += RB) {
        const float *r[RB];
        for (int q = 0; q < RB; q++)
            r[q] = i0 + q < n ? x + (int64_t)(i0 + q) * d : sc.zero;
        int ihi = TR_MIN(i0 + RB - 1, n - 1);
        for (int j0 = 0; j0 < ihi; j0 += CB) {
            float c[RB][CB];
            tile_4x16(r[0], r[1], r[2], r[3], sc.xt + j0, sc.npad, d, c);
            for (int q = 0; q < RB && i0 + q < n; q++) {
                int i = i0 + q;
                int jn = TR_MIN(CB, i - j0);
                if (jn > 0)
                    memcpy(pairs + km_tri_index(i, j0), c[q], (size_t)jn * sizeof(float));
            }
        }
    }
    for (int64_t c = used; c < a->out_w; c++)
        o[c] = 0.0f;
}

/* Backward of sample s. */
CLONES static void bwd_sample(const struct kern_interact_bwd_args *a, int64_t s, const struct scratch *sc_)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    const int dfull = d / CB * CB;
    struct scratch sc = *sc_;
    const float *x = a->x + s * (int64_t)n * d;
    const float *g = a->dout + s * a->out_w + off;
    float *dx = a->dx + s * (int64_t)n * d;
    float *S = sc.s;
    for (int i = 0; i < n; i++) {
        S[(int64_t)i * n + i] = 0.0f;
        for (int j = 0; j < i; j++) {
            float v = g[km_tri_index(i, j)];
            S[(int64_t)i * n + j] = v;
            S[(int64_t)j * n + i] = v;
        }
    }
    for (int i0 = 0; i0 < n; i0 += RB) {
        /* rows past n read zero rows of S (scratch padding is zero) */
        const float *r0 = S + (int64_t)i0 * n, *r1 = r0 + n, *r2 = r1 + n, *r3 = r2 + n;
        for (int k0 = 0; k0 < dfull; k0 += CB) {
            float c[RB][CB];
            tile_4x16(r0, r1, r2, r3, x + k0, d, n, c);
            for (int q = 0; q < RB && i0 + q < n; q++)
                memcpy(dx + (int64_t)(i0 + q) * d + k0, c[q], CB * sizeof(float));
        }
        for (int q = 0; q < RB && i0 + q < n; q++) { /* column tail */
            const float *sr = S + (int64_t)(i0 + q) * n;
            float *dr = dx + (int64_t)(i0 + q) * d;
            for (int k = dfull; k < d; k++) {
                float acc = 0.0f;
                for (int j = 0; j < n; j++)
                    acc += sr[j] * x[(int64_t)j * d + k];
                dr[k] = acc;
            }
        }
    }
    if (a->has_bottom) {
        const float *gb = a->dout + s * a->out_w;
        for (int k = 0; k < d; k++)
            dx[k] += gb[k];
    }
}

/* Runs fn(args, s, scratch) for every sample s of the batch, threads splitting
 * the batch, each with its own scratch. TR_ERR_NOMEM if a scratch cannot be had. */
static enum tr_status for_each_sample(int64_t batch, int n, int d, const void *args,
                                      void (*fn)(const void *, int64_t, const struct scratch *))
{
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        struct scratch sc = {0};
        if (scratch_get(&sc, n, d) != 0) {
            failed = 1;
        } else {
#pragma omp for schedule(static)
            for (int64_t s = 0; s < batch; s++)
                fn(args, s, &sc);
        }
        tr_free(sc.xt);
    }
    return failed ? TR_ERR_NOMEM : TR_OK;
}

static void fwd_one(const void *a, int64_t s, const struct scratch *sc)
{
    fwd_sample(a, s, sc);
}

static void bwd_one(const void *a, int64_t s, const struct scratch *sc)
{
    bwd_sample(a, s, sc);
}

enum tr_status kern_cpu_interact_fwd(const struct kern_interact_fwd_args *a)
{
    const int64_t off = a->has_bottom ? a->d : 0;
    if (a->n < 1 || a->d < 1 || a->out_w < off + km_tri_count(a->n))
        return TR_ERR_ARG;
    return for_each_sample(a->batch, a->n, a->d, a, fwd_one);
}

/* dx = S x with S_ij = dout[pair(max(i,j), min(i,j))], S_ii = 0; then the bottom
 * gradient dout[:, 0:d] is added into dx[:, 0, :]. */
enum tr_status kern_cpu_interact_bwd(const struct kern_interact_bwd_args *a)
{
    const int64_t off = a->has_bottom ? a->d : 0;
    if (a->n < 1 || a->d < 1 || a->out_w < off + km_tri_count(a->n))
        return TR_ERR_ARG;
    return for_each_sample(a->batch, a->n, a->d, a, bwd_one);
}
