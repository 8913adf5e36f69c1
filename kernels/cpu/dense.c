/* dense.c: CPU GEMM (through the BLAS chosen at build time: oneDNN by default,
 * OpenBLAS or BLIS with BLAS=openblas|blis), the bias + activation epilogue and
 * its backward. A GEMM runs through dnnl_sgemm (or cblas_sgemm), its epilogue as
 * a second pass. Two fusions are there on request (TR_CPU_GEMM_FUSED): forward,
 * a matmul primitive whose bias and ReLU are fused into its output (primitives
 * cached per shape in the backend instance); backward, the epilogue on the
 * product's row blocks while they are in cache. It does not implement GEMM. */
#define TR_SUBSYS TR_SUB_KERN
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
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
#ifdef __AVX2__
#include <immintrin.h>
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

#if defined(TR_BLAS_DNNL)
/* One matmul primitive: c = act(op(a) op(b) + bias) for one shape and thread count. */
struct mm_prim {
    int used;
    int ta, tb, has_bias, relu, threads;
    int64_t m, n, k, lda, ldb, ldc;
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c, bias;
};

#define MM_SLOTS 64 /* a step has a few dozen GEMM shapes; evaluation adds its batch's */

struct kern_cpu_gemm_cache {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    int next; /* the slot the next new shape takes when all are used */
    struct mm_prim e[MM_SLOTS];
};

static void mm_release(struct mm_prim *e)
{
    if (e->p)
        dnnl_primitive_destroy(e->p);
    dnnl_memory_t *ms[4] = {&e->a, &e->b, &e->c, &e->bias};
    for (int i = 0; i < 4; i++)
        if (*ms[i])
            dnnl_memory_destroy(*ms[i]);
    memset(e, 0, sizeof *e);
}

void kern_cpu_gemm_cache_free(struct kern_cpu_gemm_cache **pc)
{
    struct kern_cpu_gemm_cache *c = *pc;
    if (!c)
        return;
    for (int i = 0; i < MM_SLOTS; i++)
        mm_release(&c->e[i]);
    if (c->st)
        dnnl_stream_destroy(c->st);
    if (c->eng)
        dnnl_engine_destroy(c->eng);
    tr_free(c);
    *pc = NULL;
}

static int mm_same(const struct mm_prim *e, const struct kern_gemm_args *a, int threads)
{
    return e->used && e->ta == a->trans_a && e->tb == a->trans_b && e->has_bias == (a->bias != NULL) &&
           e->relu == (a->act == KERN_ACT_RELU) && e->threads == threads && e->m == a->m && e->n == a->n &&
           e->k == a->k && e->lda == a->lda && e->ldb == a->ldb && e->ldc == a->ldc;
}

/* Builds slot e for a's shape: a (m, k) and b (k, n) as strided views of the
 * caller's row-major buffers, bias (1, n), ReLU as an eltwise post-op. Returns 0
 * on success; nonzero when oneDNN refuses (the caller then takes the plain path). */
static int mm_build(struct kern_cpu_gemm_cache *c, struct mm_prim *e, const struct kern_gemm_args *a, int threads)
{
    dnnl_memory_desc_t amd, bmd, cmd, bimd;
    dnnl_dims_t ad = {a->m, a->k}, bd = {a->k, a->n}, cd = {a->m, a->n}, bid = {1, a->n};
    dnnl_dims_t as = {a->trans_a ? 1 : a->lda, a->trans_a ? a->lda : 1};
    dnnl_dims_t bs = {a->trans_b ? 1 : a->ldb, a->trans_b ? a->ldb : 1};
    dnnl_dims_t cs = {a->ldc, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int bad = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_f32, as) != dnnl_success ||
              dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, bs) != dnnl_success ||
              dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&bimd, 2, bid, dnnl_f32, dnnl_ab) != dnnl_success;
    dnnl_matmul_desc_t md;
    bad = bad || dnnl_matmul_desc_init(&md, &amd, &bmd, a->bias ? &bimd : NULL, &cmd) != dnnl_success ||
          dnnl_primitive_attr_create(&attr) != dnnl_success;
    if (!bad && a->act == KERN_ACT_RELU)
        bad = dnnl_post_ops_create(&po) != dnnl_success ||
              dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success ||
              dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success;
    bad = bad || dnnl_primitive_desc_create(&pd, &md, attr, c->eng, NULL) != dnnl_success ||
          dnnl_primitive_create(&e->p, pd) != dnnl_success ||
          dnnl_memory_create(&e->a, &amd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
          dnnl_memory_create(&e->b, &bmd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
          dnnl_memory_create(&e->c, &cmd, c->eng, DNNL_MEMORY_NONE) != dnnl_success ||
          (a->bias && dnnl_memory_create(&e->bias, &bimd, c->eng, DNNL_MEMORY_NONE) != dnnl_success);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (bad) {
        mm_release(e);
        return -1;
    }
    e->used = 1;
    e->ta = a->trans_a, e->tb = a->trans_b, e->has_bias = a->bias != NULL, e->relu = a->act == KERN_ACT_RELU;
    e->threads = threads, e->m = a->m, e->n = a->n, e->k = a->k, e->lda = a->lda, e->ldb = a->ldb, e->ldc = a->ldc;
    return 0;
}

/* c = act(a b + bias) through a cached matmul primitive. TR_ERR_UNSUPPORTED when
 * oneDNN has none for the shape (or no cache could be made): the caller runs the
 * plain GEMM and the epilogue pass instead. */
static enum tr_status gemm_fused(struct kern_cpu_gemm_cache **pc, const struct kern_gemm_args *a, int threads)
{
    struct kern_cpu_gemm_cache *c = *pc;
    if (!c) {
        c = tr_calloc(1, sizeof *c);
        if (!c)
            return TR_ERR_UNSUPPORTED;
        if (dnnl_engine_create(&c->eng, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&c->st, c->eng, dnnl_stream_default_flags) != dnnl_success) {
            kern_cpu_gemm_cache_free(&c);
            return TR_ERR_UNSUPPORTED;
        }
        *pc = c;
    }
    struct mm_prim *e = NULL;
    for (int i = 0; i < MM_SLOTS && !e; i++)
        if (mm_same(&c->e[i], a, threads))
            e = &c->e[i];
    if (!e) {
        e = &c->e[c->next];
        c->next = (c->next + 1) % MM_SLOTS;
        mm_release(e);
        if (mm_build(c, e, a, threads) != 0)
            return TR_ERR_UNSUPPORTED;
    }
    int bad = dnnl_memory_set_data_handle(e->a, (void *)a->a) != dnnl_success ||
              dnnl_memory_set_data_handle(e->b, (void *)a->b) != dnnl_success ||
              dnnl_memory_set_data_handle(e->c, a->c) != dnnl_success ||
              (e->bias && dnnl_memory_set_data_handle(e->bias, (void *)a->bias) != dnnl_success);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c},
                               {DNNL_ARG_BIAS, e->bias}};
    if (bad || dnnl_primitive_execute(e->p, c->st, e->bias ? 4 : 3, args) != dnnl_success ||
        dnnl_stream_wait(c->st) != dnnl_success) {
        LOG_WARN("the matmul primitive (%lld, %lld, %lld) failed; the GEMM runs unfused", (long long)a->m,
                 (long long)a->n, (long long)a->k);
        mm_release(e);
        return TR_ERR_UNSUPPORTED;
    }
    return TR_OK;
}
#else
void kern_cpu_gemm_cache_free(struct kern_cpu_gemm_cache **pc)
{
    *pc = NULL;
}
#endif

static enum tr_status gemm_then(struct kern_cpu_gemm_cache **cache, int threads, const struct kern_gemm_args *a);

/* Whether an epilogue is fused: only on request, TR_CPU_GEMM_FUSED=1 for both,
 * =fwd or =bwd for one (read at each call, so a test or a bench can switch it).
 * Measured in the training step (bench_train, runs alternated, this 2-core host):
 * tiny 31.5 ms a step unfused, 34.5 fused; mlperf's top MLP forward 34.1 against
 * 36.9 ms and its backward 74.0 against 79.5. dnnl_sgemm's blocking beats the
 * matmul primitive's for these shapes, and the backward's row blocks cost the
 * GEMM more than the epilogue's second pass over memory does. */
#define FUSE_FWD 1
#define FUSE_BWD 2
static int fused_wanted(int which)
{
    const char *e = getenv("TR_CPU_GEMM_FUSED");
    if (!e)
        return 0;
    if (strcmp(e, "1") == 0)
        return 1;
    return (which == FUSE_FWD && strcmp(e, "fwd") == 0) || (which == FUSE_BWD && strcmp(e, "bwd") == 0);
}

/* The GEMM and its optional epilogue: fused into one matmul with oneDNN (when it
 * has one for the shape), else the GEMM then a second pass; a backward epilogue
 * (a->then) on the product's row blocks (kern.h). */
enum tr_status kern_cpu_gemm(struct kern_cpu_gemm_cache **cache, int threads, const struct kern_gemm_args *a)
{
    if (a->then)
        return gemm_then(cache, threads, a);
    const int epilogue = (a->bias || a->act != KERN_ACT_NONE) && a->m > 0 && a->n > 0;
#if defined(TR_BLAS_DNNL)
    if (epilogue && !a->mask && a->k > 0 && a->alpha == 1.0f && a->beta == 0.0f && fused_wanted(FUSE_FWD) &&
        gemm_fused(cache, a, threads) == TR_OK)
        return TR_OK;
#else
    (void)cache;
    (void)threads;
#endif
    TR_CHECK(gemm_plain(a));
    if (!epilogue)
        return TR_OK;
    struct kern_bias_act_fwd_args e = {a->m, a->n, a->c, a->ldc, a->bias, a->act, a->mask};
    return kern_cpu_bias_act_fwd(&e);
}

/* The mask bits of a row y of n outputs: bit c % 8 of mk[c / 8] = km_relu_mask(y[c]). */
static void mask_row(const float *y, int64_t n, unsigned char *mk)
{
    int64_t c = 0;
#ifdef __AVX2__
    const __m256 zero = _mm256_setzero_ps();
    for (; c + 8 <= n; c += 8) /* not (y <= 0), NaN included: km_relu_mask */
        mk[c / 8] = (unsigned char)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(y + c), zero, _CMP_NLE_UQ));
#endif
    for (; c < n; c += 8) {
        unsigned bits = 0;
        for (int64_t k = c; k < n && k < c + 8; k++)
            bits |= (unsigned)km_relu_mask(y[k]) << (k - c);
        mk[c / 8] = (unsigned char)bits;
    }
}

/* dy[c] = km_relu_grad_mask(bit c of mk, dy[c]) for c in [c0, c1). */
static void unmask_row(const unsigned char *mk, float *dy, int64_t c0, int64_t c1)
{
    int64_t c = c0;
    for (; c < c1 && c % 8; c++)
        dy[c] = km_relu_grad_mask((mk[c / 8] >> (c % 8)) & 1, dy[c]);
#ifdef __AVX2__
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (; c + 8 <= c1; c += 8) {
        const __m256i b = _mm256_and_si256(_mm256_set1_epi32(mk[c / 8]), bit);
        const __m256 keep = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
        _mm256_storeu_ps(dy + c, _mm256_and_ps(_mm256_loadu_ps(dy + c), keep));
    }
#endif
    for (; c < c1; c++)
        dy[c] = km_relu_grad_mask((mk[c / 8] >> (c % 8)) & 1, dy[c]);
}

enum tr_status kern_cpu_bias_act_fwd(const struct kern_bias_act_fwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols, ld = a->ldy;
    const float *bias = a->bias;
    const int relu = a->act == KERN_ACT_RELU;
    if (a->mask && !relu)
        return TR_ERR_ARG;
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
        if (a->mask) /* the row again while it is in L1 */
            mask_row(y, cols, a->mask + r * kern_relu_mask_ld(cols));
    }
    return TR_OK;
}

/* A bias gradient is summed in chunks of BWD_ROWS rows (each in row order), the
 * chunks' sums then added in chunk order: the same bits for any thread count, and
 * for the standalone op and a GEMM's backward epilogue, which makes the chunks as
 * row blocks of its product. */
#define BWD_ROWS 128

/* The chunks' partial sums of a (rows, cols) bias gradient: this many floats. */
static size_t bwd_partial_floats(int64_t rows, int64_t cols)
{
    return (size_t)(TR_CEIL_DIV(rows, BWD_ROWS) * cols);
}

/* Rows [r0, r1) (one chunk) and columns [c0, c1) of a: dy = act'(y) dy in place,
 * part[c] = the chunk's column sum (when part is not NULL). */
static void bwd_chunk(const struct kern_bias_act_bwd_args *a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                      float *part)
{
    const int relu = a->act == KERN_ACT_RELU;
    if (part)
        for (int64_t c = c0; c < c1; c++)
            part[c] = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        float *dy = a->dy + r * a->lddy;
        if (relu && a->mask) {
            unmask_row(a->mask + r * kern_relu_mask_ld(a->cols), dy, c0, c1);
        } else if (relu) {
            const float *y = a->y + r * a->ldy;
            for (int64_t c = c0; c < c1; c++)
                dy[c] = km_relu_grad(y[c], dy[c]);
        }
        if (part)
            for (int64_t c = c0; c < c1; c++)
                part[c] += dy[c];
    }
}

/* dbias = (accumulate ? dbias : 0) + the chunks' sums in chunk order. */
static void bwd_sum_chunks(const struct kern_bias_act_bwd_args *a, const float *part)
{
    const int64_t nchunk = TR_CEIL_DIV(a->rows, BWD_ROWS), cols = a->cols;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < cols; c++) {
        float s = a->accumulate ? a->dbias[c] : 0.0f;
        for (int64_t k = 0; k < nchunk; k++)
            s += part[k * cols + c];
        a->dbias[c] = s;
    }
}

enum tr_status kern_cpu_bias_act_bwd(const struct kern_bias_act_bwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    if (rows < 0 || cols < 0 || (a->mask && a->act != KERN_ACT_RELU))
        return TR_ERR_ARG;
    if (cols == 0)
        return TR_OK;
    float *part = NULL;
    if (a->dbias) {
        part = tr_malloc(bwd_partial_floats(rows, cols) * sizeof(float));
        if (!part)
            return TR_ERR_NOMEM;
    }
    const int64_t nchunk = TR_CEIL_DIV(rows, BWD_ROWS);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nchunk; k++)
        bwd_chunk(a, k * BWD_ROWS, TR_MIN(rows, (k + 1) * BWD_ROWS), 0, cols, part ? part + k * cols : NULL);
    if (part) {
        bwd_sum_chunks(a, part);
        tr_free(part);
    } else if (a->dbias && !a->accumulate) {
        memset(a->dbias, 0, (size_t)cols * sizeof(float));
    }
    return TR_OK;
}

size_t kern_cpu_bias_act_bwd_call_bytes(int64_t rows, int64_t cols)
{
    return rows > 0 && cols > 0 ? bwd_partial_floats(rows, cols) * sizeof(float) : 0;
}

/* Bytes of a product's row block: about what the cores' L2 caches keep while its
 * epilogue reads it back (larger blocks keep the GEMM's own efficiency). */
#define THEN_BLOCK_BYTES ((int64_t)1 << 20)

/* The product by row blocks (whole chunks of BWD_ROWS, about THEN_BLOCK_BYTES), each
 * block's backward epilogue right after it while it is in cache: chunk by chunk,
 * columns split over threads in runs of 16. */
static enum tr_status gemm_then(struct kern_cpu_gemm_cache **cache, int threads, const struct kern_gemm_args *a)
{
    const struct kern_bias_act_bwd_args *e = a->then;
    if (e->dy != a->c || e->lddy != a->ldc || e->rows != a->m || e->cols != a->n || a->bias ||
        a->act != KERN_ACT_NONE || a->mask || (e->mask && e->act != KERN_ACT_RELU))
        return TR_ERR_ARG;
    const int64_t rows = a->m, cols = a->n;
    if (rows <= 0 || cols <= 0 || !fused_wanted(FUSE_BWD)) { /* the product whole, then the op */
        struct kern_gemm_args g = *a;
        g.then = NULL;
        TR_CHECK(kern_cpu_gemm(cache, threads, &g));
        return kern_cpu_bias_act_bwd(e);
    }
    float *part = NULL;
    if (e->dbias) {
        part = tr_malloc(bwd_partial_floats(rows, cols) * sizeof(float));
        if (!part)
            return TR_ERR_NOMEM;
    }
    enum tr_status rc = TR_OK;
    const int64_t nblk = TR_CEIL_DIV(cols, 16);
    const int64_t step = TR_MAX(1, THEN_BLOCK_BYTES / (cols * (int64_t)sizeof(float)) / BWD_ROWS) * BWD_ROWS;
    for (int64_t b0 = 0; b0 < rows && rc == TR_OK; b0 += step) {
        const int64_t b1 = TR_MIN(rows, b0 + step);
        struct kern_gemm_args g = *a;
        g.m = b1 - b0;
        g.a = a->trans_a ? a->a + b0 : a->a + b0 * a->lda;
        g.c = a->c + b0 * a->ldc;
        g.then = NULL;
        rc = kern_cpu_gemm(cache, threads, &g);
        if (rc != TR_OK)
            break;
#pragma omp parallel
        {
            int64_t t, nt;
            kern_cpu_thread(&t, &nt);
            const int64_t c0 = nblk * t / nt * 16, c1 = TR_MIN(nblk * (t + 1) / nt * 16, cols);
            for (int64_t r0 = b0; r0 < b1 && c0 < c1; r0 += BWD_ROWS)
                bwd_chunk(e, r0, TR_MIN(b1, r0 + BWD_ROWS), c0, c1, part ? part + (r0 / BWD_ROWS) * cols : NULL);
        }
    }
    if (rc == TR_OK && part)
        bwd_sum_chunks(e, part);
    tr_free(part);
    return rc;
}
