/* interact.c: CPU dot interaction, forward and backward, in the seed's layout
 * ([bottom | strict lower triangle row-major | zero pad]). Per sample both
 * directions are small matrix products (Z = X X^T, dX = S X with S the
 * symmetric pair-gradient matrix) done by a 4-row x 16-column register-blocked
 * micro-kernel written with GCC vector extensions; every output element is one
 * sequential sum over its inner dimension, so results are bitwise independent of
 * the thread count (threads split the batch). It does not implement the concat
 * or cat-only interaction variants. */
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

typedef float v8f __attribute__((vector_size(32)));
/* the same vector, for unaligned loads and stores through any float pointer */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));

#define RB 4  /* rows per micro-tile */
#define CB 16 /* columns per micro-tile (two v8f) */

static inline v8f load8(const float *p)
{
    return *(const v8u *)p;
}

static inline void store8(float *p, v8f v)
{
    *(v8u *)p = v;
}

static inline v8f splat8(float a)
{
    v8f v = {a, a, a, a, a, a, a, a};
    return v;
}

/* c[r][0..16) = sum_k a[r][k] * b[k][0..16) for r < 4; a rows are a0..a3 (each
 * K long), b is (K, ldb). Each output is one sequential sum over k. */
static void tile_4x16(const float *a0, const float *a1, const float *a2, const float *a3, const float *b,
                      int64_t ldb, int K, float c[RB][CB])
{
    v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
    for (int k = 0; k < K; k++) {
        v8f b0 = load8(b + k * ldb), b1 = load8(b + k * ldb + 8);
        v8f x0 = splat8(a0[k]), x1 = splat8(a1[k]), x2 = splat8(a2[k]), x3 = splat8(a3[k]);
        c00 += x0 * b0;
        c01 += x0 * b1;
        c10 += x1 * b0;
        c11 += x1 * b1;
        c20 += x2 * b0;
        c21 += x2 * b1;
        c30 += x3 * b0;
        c31 += x3 * b1;
    }
    store8(c[0], c00);
    store8(c[0] + 8, c01);
    store8(c[1], c10);
    store8(c[1] + 8, c11);
    store8(c[2], c20);
    store8(c[2] + 8, c21);
    store8(c[3], c30);
    store8(c[3] + 8, c31);
}

/* Per-thread scratch: xt (d, npad) the transposed sample, s (ceil4(n), n) the
 * pair-gradient matrix, zero (max(d, n)) a row of zeros for padding tiles. */
struct scratch {
    float *xt, *s, *zero;
    int64_t npad;
};

static int scratch_get(struct scratch *sc, int n, int d)
{
    sc->npad = TR_CEIL_DIV(n, CB) * CB;
    int64_t n4 = TR_CEIL_DIV(n, RB) * RB;
    int64_t zn = TR_MAX(d, sc->npad) + CB;
    size_t floats = (size_t)(d * sc->npad + n4 * n + zn);
    float *p = tr_calloc(floats, sizeof(float));
    if (!p)
        return -1;
    sc->xt = p;
    sc->s = p + d * sc->npad;
    sc->zero = sc->s + n4 * n;
    return 0;
}

enum tr_status kern_cpu_interact_fwd(const struct kern_interact_fwd_args *a)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    const int64_t used = off + km_tri_count(n);
    if (n < 1 || d < 1 || a->out_w < used)
        return TR_ERR_ARG;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        struct scratch sc = {0};
        if (scratch_get(&sc, n, d) != 0) {
            failed = 1;
        } else {
#pragma omp for schedule(static)
            for (int64_t s = 0; s < a->batch; s++) {
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
        }
        tr_free(sc.xt);
    }
    return failed ? TR_ERR_NOMEM : TR_OK;
}

/* dx = S x with S_ij = dout[pair(max(i,j), min(i,j))], S_ii = 0; then the bottom
 * gradient dout[:, 0:d] is added into dx[:, 0, :]. */
enum tr_status kern_cpu_interact_bwd(const struct kern_interact_bwd_args *a)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    if (n < 1 || d < 1 || a->out_w < off + km_tri_count(n))
        return TR_ERR_ARG;
    const int dfull = d / CB * CB;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        struct scratch sc = {0};
        if (scratch_get(&sc, n, d) != 0) {
            failed = 1;
        } else {
#pragma omp for schedule(static)
            for (int64_t s = 0; s < a->batch; s++) {
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
        }
        tr_free(sc.xt);
    }
    return failed ? TR_ERR_NOMEM : TR_OK;
}
