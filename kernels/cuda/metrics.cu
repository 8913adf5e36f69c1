/* metrics.cu: the CUDA metrics op (contract in kern.h): a test set's exact ROC AUC
 * and log loss on the device, the same numbers as the CPU's kernels/cpu/metrics.c.
 *
 * One kernel checks every sample (non-finite scores counted, the first of them and
 * the first label other than 0/1 found with integer atomics) and writes its sort
 * key (kmath.h's km_score_key) and its log loss term (km_bce_logit, in double).
 * CUB then sums the terms, radix-sorts the keys on their 33 bits (by score, the
 * negatives first among ties), and scans the sorted samples twice in place: an
 * exclusive sum of the negatives and an inclusive max of the groups' first
 * positions. A last kernel writes each positive's km_auc_term2; CUB sums those in
 * uint64, exactly, so the AUC has the CPU's bits (both call km_auc_from_area2 on
 * the host). The log loss sum is CUB's fixed order on this device, not the CPU's.
 *
 * Working memory (four arrays of 8 bytes per sample, CUB's temporary storage and
 * the results) is allocated for the call, counted in the instance's peak, and
 * freed before it returns: kcu_metrics_ws's `call` is its bound (CUB's part, mostly
 * the sort's look-back state, is about 0.18 bytes a sample on sm_90). The host waits
 * twice: after the check (a bad label or a non-finite score ends the call there)
 * and for the results. */
#define TR_SUBSYS TR_SUB_KERN
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <string.h>

#include "cuda_internal.h"
#include "../kern_check.h"
#include "../kmath.h"

#define THREADS 256
#define NONE (~0ULL)
#define ALIGN ((size_t)256) /* every array starts on 256 bytes (CUB's alignment) */

/* The words the host reads after the check, and the results it reads at the end. */
struct check_words {
    unsigned long long nonfinite, first_nonfinite, first_bad_label;
};
struct results {
    double loss_sum;
    unsigned long long area2, nneg;
};

static size_t align_up(size_t n)
{
    return (n + ALIGN - 1) & ~(ALIGN - 1);
}

/* Per sample: the check, the sort key, the log loss term. A non-finite score gets
 * the key of 0 (the keys are not sorted then: the call ends after the check). */
static __global__ void __launch_bounds__(THREADS) check_kernel(const float *s, const float *y, int64_t n,
                                                               uint64_t *key, double *loss, struct check_words *w)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = s[i], l = y[i];
        const int fin = isfinite(x);
        if (!fin) {
            atomicAdd(&w->nonfinite, 1ULL);
            atomicMin(&w->first_nonfinite, (unsigned long long)i);
        }
        if (l != 0.0f && l != 1.0f)
            atomicMin(&w->first_bad_label, (unsigned long long)i);
        key[i] = km_score_key(fin ? x : 0.0f, l == 1.0f);
        loss[i] = (double)km_bce_logit(x, l);
    }
}

/* On the sorted keys: neg[i] = 1 for a negative, head[i] = i where a group of tied
 * scores starts (0 elsewhere: the inclusive max scan spreads it over the group). */
static __global__ void __launch_bounds__(THREADS) flags_kernel(const uint64_t *k, int64_t n, uint64_t *neg,
                                                               int64_t *head)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        neg[i] = (k[i] & 1u) ? 0u : 1u;
        head[i] = (i == 0 || (k[i] >> 1) != (k[i - 1] >> 1)) ? i : 0;
    }
}

/* term[i] = km_auc_term2 for a positive, 0 for a negative; term may be head (each
 * thread reads head[i] before it writes term[i], and no other thread reads head[i]).
 * The last sample also gives the number of negatives. */
static __global__ void __launch_bounds__(THREADS) term_kernel(const uint64_t *k, const uint64_t *negpre,
                                                              const int64_t *head, int64_t n, uint64_t *term,
                                                              struct results *r)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int pos = (int)(k[i] & 1u);
        const uint64_t t = pos ? km_auc_term2(negpre[head[i]], negpre[i]) : 0u;
        if (i == n - 1)
            r->nneg = negpre[i] + (pos ? 0u : 1u);
        term[i] = t;
    }
}

struct max_i64 {
    __host__ __device__ int64_t operator()(const int64_t &a, const int64_t &b) const
    {
        return a > b ? a : b;
    }
};

/* The CUB temporary storage every step below needs (the most of them). */
static enum tr_status temp_bytes(struct kcu_ctx *c, int64_t n, size_t *out)
{
    size_t t[5] = {0, 0, 0, 0, 0};
    cub::DoubleBuffer<uint64_t> db(NULL, NULL);
    TR_CUDA_CHECK(cub::DeviceReduce::Sum(NULL, t[0], (const double *)NULL, (double *)NULL, n, c->stream));
    TR_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(NULL, t[1], db, n, 0, 33, c->stream));
    TR_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(NULL, t[2], (uint64_t *)NULL, n, c->stream));
    TR_CUDA_CHECK(cub::DeviceScan::InclusiveScan(NULL, t[3], (int64_t *)NULL, max_i64(), n, c->stream));
    TR_CUDA_CHECK(cub::DeviceReduce::Sum(NULL, t[4], (const uint64_t *)NULL, (unsigned long long *)NULL, n,
                                         c->stream));
    size_t m = 0;
    for (int i = 0; i < 5; i++)
        m = t[i] > m ? t[i] : m;
    *out = align_up(m ? m : 1);
    return TR_OK;
}

/* The steps after the allocation; the caller frees the memory whatever this returns. */
static enum tr_status run(struct kcu_ctx *c, const struct kern_metrics_args *a, char *mem, size_t tb)
{
    const int64_t n = a->n;
    const size_t arr = align_up((size_t)n * 8);
    uint64_t *key = (uint64_t *)mem, *alt = (uint64_t *)(mem + arr);
    double *loss = (double *)(mem + 2 * arr);
    int64_t *head = (int64_t *)(mem + 3 * arr);
    void *temp = mem + 4 * arr;
    struct check_words *w = (struct check_words *)(mem + 4 * arr + tb);
    struct results *r = (struct results *)(mem + 4 * arr + tb + ALIGN);
    void *pin;
    TR_CHECK(kcu_pinned(c, sizeof(struct check_words) + sizeof(struct results), &pin)); /* the largest copy back */

    /* 1. the check, the keys and the loss terms */
    TR_CUDA_CHECK(cudaMemsetAsync(w, 0xff, sizeof *w, c->stream));
    TR_CUDA_CHECK(cudaMemsetAsync(&w->nonfinite, 0, sizeof w->nonfinite, c->stream));
    check_kernel<<<kcu_blocks(c, n, THREADS), THREADS, 0, c->stream>>>(a->scores, a->labels, n, key, loss, w);
    KCU_LAUNCHED();
    TR_CUDA_CHECK(cudaMemcpyAsync(pin, w, sizeof *w, cudaMemcpyDeviceToHost, c->stream));
    TR_CHECK(kcu_sync(c));
    const struct check_words cw = *(const struct check_words *)pin;
    *a->nonfinite = (int64_t)cw.nonfinite;
    *a->first_nonfinite = cw.nonfinite ? (int64_t)cw.first_nonfinite : -1;
    if (cw.first_bad_label != NONE) {
        float l = 0.0f;
        TR_CUDA_CHECK(cudaMemcpyAsync(pin, a->labels + cw.first_bad_label, sizeof l, cudaMemcpyDeviceToHost,
                                      c->stream));
        TR_CHECK(kcu_sync(c));
        memcpy(&l, pin, sizeof l);
        LOG_ERROR("metrics: sample %llu has label %g, not 0 or 1", cw.first_bad_label, (double)l);
        return TR_ERR_ARG;
    }
    if (cw.nonfinite)
        return TR_OK; /* no AUC or log loss of a model that gave NaN or inf */

    /* 2. the log loss sum, then the AUC's sort, scans and sum */
    size_t t = tb;
    TR_CUDA_CHECK(cub::DeviceReduce::Sum(temp, t, (const double *)loss, &r->loss_sum, n, c->stream));
    cub::DoubleBuffer<uint64_t> db(key, alt);
    t = tb;
    TR_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp, t, db, n, 0, 33, c->stream));
    const uint64_t *sorted = db.Current();
    uint64_t *neg = (uint64_t *)loss; /* the loss terms are summed (ordered before this on the stream) */
    const unsigned blocks = kcu_blocks(c, n, THREADS);
    flags_kernel<<<blocks, THREADS, 0, c->stream>>>(sorted, n, neg, head);
    KCU_LAUNCHED();
    t = tb;
    TR_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, t, neg, n, c->stream));
    t = tb;
    TR_CUDA_CHECK(cub::DeviceScan::InclusiveScan(temp, t, head, max_i64(), n, c->stream));
    uint64_t *term = (uint64_t *)head;
    term_kernel<<<blocks, THREADS, 0, c->stream>>>(sorted, neg, head, n, term, r);
    KCU_LAUNCHED();
    t = tb;
    TR_CUDA_CHECK(cub::DeviceReduce::Sum(temp, t, (const uint64_t *)term, &r->area2, n, c->stream));
    TR_CUDA_CHECK(cudaMemcpyAsync(pin, r, sizeof *r, cudaMemcpyDeviceToHost, c->stream));
    TR_CHECK(kcu_sync(c));
    struct results res;
    memcpy(&res, pin, sizeof res);
    *a->auc = km_auc_from_area2((uint64_t)res.area2, n - (int64_t)res.nneg, (int64_t)res.nneg);
    *a->logloss = res.loss_sum / (double)n;
    return TR_OK;
}

void kcu_metrics_ws(int64_t n, struct kern_ws *out)
{
    if (n <= 0)
        return;
    /* four 8-byte arrays, CUB's temporary storage (the sort's look-back state: about
     * 0.18 bytes a sample on sm_90, asked of CUB on the device at the call) and the
     * results: bounded here without a device, for plans */
    out->call = (size_t)n * 40 + ((size_t)16 << 20);
    out->staging = sizeof(struct check_words) + sizeof(struct results);
}

enum tr_status kcu_metrics(struct kcu_ctx *c, const struct kern_metrics_args *a)
{
    TR_CHECK(kern_check_metrics(a));
    *a->nonfinite = 0;
    *a->first_nonfinite = -1;
    *a->auc = NAN;
    *a->logloss = NAN;
    if (a->n == 0)
        return TR_OK;
    size_t tb;
    TR_CHECK(temp_bytes(c, a->n, &tb));
    const size_t bytes = 4 * align_up((size_t)a->n * 8) + tb + 2 * ALIGN;
    void *mem = NULL;
    if (cudaMalloc(&mem, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        LOG_ERROR("out of cuda memory on device %d allocating the metrics' working memory for %lld samples: %zu bytes",
                  c->device, (long long)a->n, bytes);
        return TR_ERR_NOMEM;
    }
    kcu_account(c, (int64_t)bytes);
    enum tr_status rc = run(c, a, (char *)mem, tb);
    /* cudaFree waits for the device, so nothing queued above still uses it */
    if (!TR_CUDA_OK_(cudaFree(mem)) && rc == TR_OK)
        rc = TR_ERR_CUDA;
    kcu_account(c, -(int64_t)bytes);
    return rc;
}
