/* interact.c: CPU dot interaction, forward and backward, in the seed's layout
 * ([bottom | strict lower triangle row-major | zero pad]). Samples are
 * independent, so threads split the batch and results do not depend on the
 * thread count. Dots use 16 fixed lanes (vectorisable without reassociation).
 * It does not implement the concat or cat-only interaction variants. */
#include <string.h>

#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

#define LANES 16

/* Four dot products of x with y0..y3 (length d), each summed over LANES lanes in
 * a fixed order. out[k] = x . yk. */
static void dot4(const float *x, const float *y0, const float *y1, const float *y2, const float *y3, int d,
                 float *out)
{
    float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
    int k = 0;
    for (; k + LANES <= d; k += LANES) {
        for (int l = 0; l < LANES; l++) {
            float xv = x[k + l];
            a0[l] += xv * y0[k + l];
            a1[l] += xv * y1[k + l];
            a2[l] += xv * y2[k + l];
            a3[l] += xv * y3[k + l];
        }
    }
    for (int l = 0; k + l < d; l++) {
        float xv = x[k + l];
        a0[l] += xv * y0[k + l];
        a1[l] += xv * y1[k + l];
        a2[l] += xv * y2[k + l];
        a3[l] += xv * y3[k + l];
    }
    for (int s = LANES / 2; s > 0; s /= 2)
        for (int l = 0; l < s; l++) {
            a0[l] += a0[l + s];
            a1[l] += a1[l + s];
            a2[l] += a2[l + s];
            a3[l] += a3[l + s];
        }
    out[0] = a0[0];
    out[1] = a1[0];
    out[2] = a2[0];
    out[3] = a3[0];
}

enum tr_status kern_cpu_interact_fwd(const struct kern_interact_fwd_args *a)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    const int64_t used = off + km_tri_count(n);
    if (n < 1 || d < 1 || a->out_w < used)
        return TR_ERR_ARG;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < a->batch; s++) {
        const float *x = a->x + s * (int64_t)n * d;
        float *o = a->out + s * a->out_w;
        if (a->has_bottom)
            memcpy(o, x, (size_t)d * sizeof(float));
        float *pairs = o + off;
        for (int i = 1; i < n; i++) {
            const float *xi = x + (int64_t)i * d;
            float *pi = pairs + km_tri_index(i, 0);
            int j = 0;
            for (; j + 4 <= i; j += 4)
                dot4(xi, x + (int64_t)j * d, x + (int64_t)(j + 1) * d, x + (int64_t)(j + 2) * d,
                     x + (int64_t)(j + 3) * d, d, pi + j);
            if (j < i) {
                float tmp[4];
                const float *y[4];
                for (int q = 0; q < 4; q++)
                    y[q] = x + (int64_t)(j + q < i ? j + q : j) * d;
                dot4(xi, y[0], y[1], y[2], y[3], d, tmp);
                for (int q = 0; j + q < i; q++)
                    pi[j + q] = tmp[q];
            }
        }
        for (int64_t c = used; c < a->out_w; c++)
            o[c] = 0.0f;
    }
    return TR_OK;
}

/* dx_i = sum_{j != i} S_ij x_j, S_ij = dout[pair(max(i,j), min(i,j))], computed
 * row by row in chunks of LANES columns; then the bottom gradient is added. */
enum tr_status kern_cpu_interact_bwd(const struct kern_interact_bwd_args *a)
{
    const int n = a->n, d = a->d;
    const int64_t off = a->has_bottom ? d : 0;
    if (n < 1 || d < 1 || a->out_w < off + km_tri_count(n))
        return TR_ERR_ARG;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < a->batch; s++) {
        const float *x = a->x + s * (int64_t)n * d;
        const float *g = a->dout + s * a->out_w + off;
        float *dx = a->dx + s * (int64_t)n * d;
        for (int i = 0; i < n; i++) {
            float *dxi = dx + (int64_t)i * d;
            for (int k = 0; k < d; k += LANES) {
                int m = d - k < LANES ? d - k : LANES;
                float acc[LANES] = {0};
                for (int j = 0; j < n; j++) {
                    if (j == i)
                        continue;
                    float sij = i > j ? g[km_tri_index(i, j)] : g[km_tri_index(j, i)];
                    const float *xj = x + (int64_t)j * d + k;
                    if (m == LANES)
                        for (int l = 0; l < LANES; l++)
                            acc[l] += sij * xj[l];
                    else
                        for (int l = 0; l < m; l++)
                            acc[l] += sij * xj[l];
                }
                for (int l = 0; l < m; l++)
                    dxi[k + l] = acc[l];
            }
        }
        if (a->has_bottom) {
            const float *gb = a->dout + s * a->out_w;
            for (int k = 0; k < d; k++)
                dx[k] += gb[k];
        }
    }
    return TR_OK;
}
