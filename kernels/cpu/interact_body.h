/* interact_body.h: the per-sample loops of the CPU dot interaction, written once
 * for a vector of VW floats and included by interact.c once per instruction set
 * (VW 16 with AVX-512, VW 8 otherwise). The includer defines VW, VEC (the vector
 * type), LOADV/STOREV (unaligned), SPLATV, TARGET (a function attribute), SFX (a
 * name suffix) and REDUCE (VW accumulators -> one vector of their lane sums, lanes
 * in bit-reversed order: see interact.c). Nothing here allocates or checks
 * arguments. */

#define FN3(a, b) a##b
#define FN2(a, b) FN3(a, b)
#define FN(name) FN2(name, SFX)

/* Forward of one sample: pairs[p] = x_i . x_j for the P pairs in row-major order
 * of the strict lower triangle. The pairs are taken VW at a time (a group); a
 * group is cut into segments of one row i and consecutive j (seg: i, j0, count,
 * first pair), so that x_i's vectors stay in registers while x_j streams by.
 * Each pair's dot product is a sum over k in VW lanes, written to slot
 * bitrev(q) of the group; REDUCE's fixed tree then sums each slot's lanes, and
 * its result is the group's VW pairs in order. x holds n rows of dp floats (dp a
 * multiple of VW). The same bits for any thread count. */
TARGET static void FN(fwd_pairs)(const float *x, int64_t dp, const struct seg *seg, int nseg, int64_t P,
                                 const uint8_t *brv, float *pairs, float *tmp)
{
    VEC acc[VW];
    int s = 0;
    for (int64_t p0 = 0; p0 < P; p0 += VW) {
        if (p0 + VW > P)
            for (int q = 0; q < VW; q++)
                acc[q] = SPLATV(0.0f);
        for (; s < nseg && seg[s].p < p0 + VW; s++) {
            const float *xi = x + seg[s].i * dp, *xj = x + seg[s].j0 * dp;
            const int q0 = (int)(seg[s].p - p0), cnt = seg[s].cnt;
            if (dp == 8 * VW) {
                VEC a0 = LOADV(xi), a1 = LOADV(xi + VW), a2 = LOADV(xi + 2 * VW), a3 = LOADV(xi + 3 * VW);
                VEC a4 = LOADV(xi + 4 * VW), a5 = LOADV(xi + 5 * VW), a6 = LOADV(xi + 6 * VW);
                VEC a7 = LOADV(xi + 7 * VW);
                for (int t = 0; t < cnt; t++, xj += dp) {
                    VEC v = a0 * LOADV(xj);
                    v += a1 * LOADV(xj + VW);
                    v += a2 * LOADV(xj + 2 * VW);
                    v += a3 * LOADV(xj + 3 * VW);
                    v += a4 * LOADV(xj + 4 * VW);
                    v += a5 * LOADV(xj + 5 * VW);
                    v += a6 * LOADV(xj + 6 * VW);
                    v += a7 * LOADV(xj + 7 * VW);
                    acc[brv[q0 + t]] = v;
                }
            } else if (dp == 4 * VW) {
                VEC a0 = LOADV(xi), a1 = LOADV(xi + VW), a2 = LOADV(xi + 2 * VW), a3 = LOADV(xi + 3 * VW);
                for (int t = 0; t < cnt; t++, xj += dp) {
                    VEC v = a0 * LOADV(xj);
                    v += a1 * LOADV(xj + VW);
                    v += a2 * LOADV(xj + 2 * VW);
                    v += a3 * LOADV(xj + 3 * VW);
                    acc[brv[q0 + t]] = v;
                }
            } else if (dp == 2 * VW) {
                VEC a0 = LOADV(xi), a1 = LOADV(xi + VW);
                for (int t = 0; t < cnt; t++, xj += dp) {
                    VEC v = a0 * LOADV(xj);
                    v += a1 * LOADV(xj + VW);
                    acc[brv[q0 + t]] = v;
                }
            } else if (dp == VW) {
                VEC a0 = LOADV(xi);
                for (int t = 0; t < cnt; t++, xj += dp)
                    acc[brv[q0 + t]] = a0 * LOADV(xj);
            } else {
                for (int t = 0; t < cnt; t++, xj += dp) {
                    VEC v = LOADV(xi) * LOADV(xj);
                    for (int64_t k = VW; k < dp; k += VW)
                        v += LOADV(xi + k) * LOADV(xj + k);
                    acc[brv[q0 + t]] = v;
                }
            }
        }
        VEC r = REDUCE(acc);
        if (p0 + VW <= P) {
            STOREV(pairs + p0, r);
        } else {
            STOREV(tmp, r);
            memcpy(pairs + p0, tmp, (size_t)(P - p0) * sizeof(float));
        }
    }
}

/* dx rows i0 .. i0+R-1, columns k0 .. k0 + C*VW of one sample: dx_i = sum over
 * j = 0..n-1, in that order, of S_ij x_j with S_ij the pair gradient g of (i, j)
 * (g[tri(i) + j] below the diagonal, g[tri(j) + i] above it) and S_ii = 0: the
 * diagonal term is 0 * x_i, so a NaN or inf in x_i reaches dx_i as the full
 * product S X would carry it. Rows i0 + r must be < n. *nf gains 0 * each output
 * (NaN once any output is NaN or inf). */
TARGET static inline __attribute__((always_inline)) void FN(bwd_tile)(const float *x, int64_t dp, int n, const float *g,
                                                                      int i0, int64_t k0, float *dx, VEC *nf,
                                                                      const int R, const int C)
{
    VEC acc[4][4];
    const float *lo[4]; /* row i0 + r's pairs below the diagonal: g + tri(i0 + r) */
    for (int r = 0; r < R; r++) {
        lo[r] = g + km_tri_index(i0 + r, 0);
        for (int c = 0; c < C; c++)
            acc[r][c] = SPLATV(0.0f);
    }
    int j = 0;
    for (; j < i0; j++) { /* every row of the tile is below the diagonal here */
        VEC xv[4];
        for (int c = 0; c < C; c++)
            xv[c] = LOADV(x + j * dp + k0 + c * VW);
        for (int r = 0; r < R; r++) {
            VEC s = SPLATV(lo[r][j]);
            for (int c = 0; c < C; c++)
                acc[r][c] += s * xv[c];
        }
    }
    for (; j < i0 + R; j++) { /* the tile's diagonal block */
        VEC xv[4];
        for (int c = 0; c < C; c++)
            xv[c] = LOADV(x + j * dp + k0 + c * VW);
        for (int r = 0; r < R; r++) {
            const int i = i0 + r;
            const float sv = j < i ? lo[r][j] : j > i ? g[km_tri_index(j, i)] : 0.0f;
            VEC s = SPLATV(sv);
            for (int c = 0; c < C; c++)
                acc[r][c] += s * xv[c];
        }
    }
    for (; j < n; j++) { /* above the diagonal: g[tri(j) + i0 + r] */
        VEC xv[4];
        const float *up = g + km_tri_index(j, i0);
        for (int c = 0; c < C; c++)
            xv[c] = LOADV(x + j * dp + k0 + c * VW);
        for (int r = 0; r < R; r++) {
            VEC s = SPLATV(up[r]);
            for (int c = 0; c < C; c++)
                acc[r][c] += s * xv[c];
        }
    }
    VEC z = *nf;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            STOREV(dx + (i0 + r) * dp + k0 + c * VW, acc[r][c]);
            z += acc[r][c] * 0.0f;
        }
    *nf = z;
}

/* The tile shapes, each compiled with its R and C known. */
#define BWD_TILE(R_, C_)                                                                                            \
    TARGET static void FN(bwd_tile_##R_##x##C_)(const float *x, int64_t dp, int n, const float *g, int i0,         \
                                               int64_t k0, float *dx, VEC *nf)                                     \
    {                                                                                                              \
        FN(bwd_tile)(x, dp, n, g, i0, k0, dx, nf, R_, C_);                                                         \
    }
BWD_TILE(4, 4)
BWD_TILE(4, 2)
BWD_TILE(4, 1)
BWD_TILE(2, 4)
BWD_TILE(2, 2)
BWD_TILE(2, 1)
BWD_TILE(1, 4)
BWD_TILE(1, 2)
BWD_TILE(1, 1)
#undef BWD_TILE

/* Backward of one sample over dp columns (a multiple of VW): row blocks of 4 (then
 * 2, then 1 for the rest), column blocks of 4 vectors (then 2, then 1). Returns
 * nonzero when an output is NaN or inf. */
TARGET static int FN(bwd_sample)(const float *x, int64_t dp, int n, const float *g, float *dx)
{
    typedef void (*tile_fn)(const float *, int64_t, int, const float *, int, int64_t, float *, VEC *);
    static const tile_fn tiles[3][3] = {
        {FN(bwd_tile_4x4), FN(bwd_tile_4x2), FN(bwd_tile_4x1)},
        {FN(bwd_tile_2x4), FN(bwd_tile_2x2), FN(bwd_tile_2x1)},
        {FN(bwd_tile_1x4), FN(bwd_tile_1x2), FN(bwd_tile_1x1)},
    };
    VEC nf = SPLATV(0.0f);
    int i0 = 0;
    for (int rb = 0; rb < 3; rb++) {
        const int R = 4 >> rb;
        for (; i0 + R <= n; i0 += R) {
            int64_t k0 = 0;
            for (int cb = 0; cb < 3; cb++) {
                const int64_t C = 4 >> cb;
                for (; k0 + C * VW <= dp; k0 += C * VW)
                    tiles[rb][cb](x, dp, n, g, i0, k0, dx, &nf);
            }
        }
    }
    int bad = 0;
    for (int q = 0; q < VW; q++)
        bad |= nf[q] != nf[q];
    return bad;
}

#undef FN
#undef FN2
#undef FN3
