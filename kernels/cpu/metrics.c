/* metrics.c: exact ROC AUC by radix-sorting (score, label) keys and counting,
 * per group of tied scores, the negatives ranked below (kmath.h's integer
 * formula, which kernels/cuda/metrics.cu computes too); log loss from logits; and
 * the CPU's metrics op. It does not implement the seed's binned (8000-threshold)
 * approximation. */
#define TR_SUBSYS TR_SUB_KERN
#include <math.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../kern_check.h"
#include "../kmath.h"
#include "../metrics.h"
#include "../sort.h"
#include "cpu_internal.h"

size_t kern_cpu_metrics_call_bytes(int64_t n)
{
    return n > 0 ? (size_t)n * 2 * sizeof(uint64_t) : 0; /* kern_auc_exact's keys and their sort */
}

enum tr_status kern_auc_exact(const float *scores, const float *labels, int64_t n, double *auc)
{
    *auc = NAN;
    if (n <= 0)
        return TR_OK;
    uint64_t *a = tr_malloc((size_t)n * 2 * sizeof(uint64_t));
    if (!a)
        return TR_ERR_NOMEM;
    uint64_t *b = a + n;
    int64_t bad = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : bad)
    for (int64_t i = 0; i < n; i++) {
        float y = labels[i];
        if (isnan(scores[i]) || (y != 0.0f && y != 1.0f))
            bad = i < bad ? i : bad;
        a[i] = km_score_key(scores[i], y == 1.0f);
    }
    if (bad != INT64_MAX) {
        LOG_WARN("auc: sample %lld has %s", (long long)bad,
                 isnan(scores[bad]) ? "a NaN score" : "a label that is not 0 or 1");
        tr_free(a);
        return TR_ERR_ARG;
    }
    /* by score, negatives first among ties (kmath.h); then one pass over the groups */
    const uint64_t *sorted = kern_sort_radix(a, b, n, sizeof *a, 0, 33);
    uint64_t area2 = 0, neg_below = 0;
    int64_t npos = 0;
    for (int64_t i = 0; i < n;) {
        const uint64_t score = sorted[i] >> 1;
        uint64_t gn = 0;
        int64_t j = i;
        for (; j < n && sorted[j] == score << 1; j++) /* the group's negatives */
            gn++;
        for (; j < n && sorted[j] >> 1 == score; j++) { /* then its positives */
            area2 += km_auc_term2(neg_below, neg_below + gn);
            npos++;
        }
        neg_below += gn;
        i = j;
    }
    tr_free(a); /* b = a + n: one block */
    *auc = km_auc_from_area2(area2, npos, (int64_t)neg_below);
    return TR_OK;
}

double kern_logloss(const float *logits, const float *labels, int64_t n)
{
    if (n <= 0)
        return 0.0;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)km_bce_logit(logits[i], labels[i]);
    return s / (double)n;
}

enum tr_status kern_cpu_metrics(const struct kern_metrics_args *a)
{
    TR_CHECK(kern_check_metrics(a));
    const int64_t n = a->n;
    int64_t cnt = 0, lo = INT64_MAX, bad = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(+ : cnt) reduction(min : lo, bad)
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a->scores[i])) {
            cnt++;
            lo = i < lo ? i : lo;
        }
        if (a->labels[i] != 0.0f && a->labels[i] != 1.0f)
            bad = i < bad ? i : bad;
    }
    *a->nonfinite = cnt;
    *a->first_nonfinite = cnt ? lo : -1;
    *a->auc = NAN;
    *a->logloss = NAN;
    if (bad != INT64_MAX) {
        LOG_ERROR("metrics: sample %lld has label %g, not 0 or 1", (long long)bad, (double)a->labels[bad]);
        return TR_ERR_ARG;
    }
    if (cnt)
        return TR_OK;
    TR_CHECK(kern_auc_exact(a->scores, a->labels, n, a->auc));
    *a->logloss = n ? kern_logloss(a->scores, a->labels, n) : NAN;
    return TR_OK;
}
