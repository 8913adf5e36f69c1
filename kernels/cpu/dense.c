/* dense.c: CPU GEMM (through the BLAS chosen at build time: oneDNN's sgemm by
 * default, OpenBLAS or BLIS with BLAS=openblas|blis) and the fused bias +
 * activation epilogue and its backward. It does not implement GEMM itself. */
#define TR_SUBSYS TR_SUB_KERN
#include <stdio.h>
#include <string.h>

#include "../../common/check.h"
#include "../kmath.h"
#include "cpu_internal.h"

#if defined(TR_BLAS_DNNL)
#include <dnnl.h>
#elif defined(TR_BLAS_BLIS)
#include <blis/blis.h>
#include <blis/cblas.h>
#else
#include <cblas.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

void kern_cpu_blas_set_threads(int threads)
{
#if defined(TR_BLAS_OPENBLAS)
    openblas_set_num_threads(threads);
#elif defined(TR_BLAS_BLIS)
    bli_thread_set_num_threads(threads);
#else
    (void)threads; /* oneDNN follows omp_set_num_threads */
#endif
}

const char *kern_cpu_blas_name(void)
{
#if defined(TR_BLAS_DNNL)
    static char buf[64];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    return buf;
#elif defined(TR_BLAS_BLIS)
    return "BLIS";
#else
    return openblas_get_config();
#endif
}

static enum tr_status gemm_plain(const struct kern_gemm_args *a)
{
    if (a->m < 0 || a->n < 0 || a->k < 0)
        return TR_ERR_ARG;
    if (a->m == 0 || a->n == 0)
        return TR_OK;
    if (a->k == 0) {
        for (int64_t i = 0; i < a->m; i++)
            for (int64_t j = 0; j < a->n; j++)
                a->c[i * a->ldc + j] = a->beta == 0.0f ? 0.0f : a->beta * a->c[i * a->ldc + j];
        return TR_OK;
    }
#if defined(TR_BLAS_DNNL)
    dnnl_status_t st = dnnl_sgemm(a->trans_a ? 'T' : 'N', a->trans_b ? 'T' : 'N', a->m, a->n, a->k, a->alpha,
                                  a->a, a->lda, a->b, a->ldb, a->beta, a->c, a->ldc);
    if (st != dnnl_success) {
        LOG_WARN("dnnl_sgemm(%lld, %lld, %lld) failed with status %d", (long long)a->m, (long long)a->n,
                 (long long)a->k, (int)st);
        return TR_ERR_ARG;
    }
#else
    if (a->m > INT32_MAX || a->n > INT32_MAX || a->k > INT32_MAX || a->lda > INT32_MAX || a->ldb > INT32_MAX ||
        a->ldc > INT32_MAX)
        return TR_ERR_UNSUPPORTED;
    cblas_sgemm(CblasRowMajor, a->trans_a ? CblasTrans : CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans,
                (int)a->m, (int)a->n, (int)a->k, a->alpha, a->a, (int)a->lda, a->b, (int)a->ldb, a->beta, a->c,
                (int)a->ldc);
#endif
    return TR_OK;
}

/* The GEMM, then its optional epilogue as a second pass (kern.h). */
enum tr_status kern_cpu_gemm(const struct kern_gemm_args *a)
{
    TR_CHECK(gemm_plain(a));
    if ((!a->bias && a->act == KERN_ACT_NONE) || a->m == 0 || a->n == 0)
        return TR_OK;
    struct kern_bias_act_fwd_args e = {a->m, a->n, a->c, a->ldc, a->bias, a->act};
    return kern_cpu_bias_act_fwd(&e);
}

enum tr_status kern_cpu_bias_act_fwd(const struct kern_bias_act_fwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols, ld = a->ldy;
    const float *bias = a->bias;
    const int relu = a->act == KERN_ACT_RELU;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *y = a->y + r * ld;
        if (bias && relu) {
            for (int64_t c = 0; c < cols; c++)
                y[c] = km_relu(y[c] + bias[c]);
        } else if (bias) {
            for (int64_t c = 0; c < cols; c++)
                y[c] = y[c] + bias[c];
        } else if (relu) {
            for (int64_t c = 0; c < cols; c++)
                y[c] = km_relu(y[c]);
        }
    }
    return TR_OK;
}

/* Columns are split over threads in blocks of 16; every column is summed over all
 * rows in row order by one thread, so the sums do not depend on the thread count. */
enum tr_status kern_cpu_bias_act_bwd(const struct kern_bias_act_bwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    const int relu = a->act == KERN_ACT_RELU;
    const int64_t nblk = TR_CEIL_DIV(cols, 16);
    if (a->dbias && !a->accumulate)
        memset(a->dbias, 0, (size_t)cols * sizeof(float));
#pragma omp parallel
    {
        int64_t t, nt;
        kern_cpu_thread(&t, &nt);
        int64_t b0 = nblk * t / nt, b1 = nblk * (t + 1) / nt;
        int64_t c0 = b0 * 16, c1 = TR_MIN(b1 * 16, cols);
        float *db = a->dbias;
        for (int64_t r = 0; r < rows && c0 < c1; r++) {
            const float *y = a->y + r * a->ldy;
            float *dy = a->dy + r * a->lddy;
            if (relu)
                for (int64_t c = c0; c < c1; c++)
                    dy[c] = km_relu_grad(y[c], dy[c]);
            if (db)
                for (int64_t c = c0; c < c1; c++)
                    db[c] += dy[c];
        }
    }
    return TR_OK;
}
