/* metrics.c: exact ROC AUC by radix-sorting (score, label) pairs and counting,
 * per group of tied scores, the negatives ranked below; log loss from logits.
 * It does not implement the seed's binned (8000-threshold) approximation. */
#define TR_SUBSYS TR_SUB_KERN
#include <math.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../kmath.h"
#include "../metrics.h"
#include "../sort.h"
#include "cpu_internal.h"

/* Maps a float to a uint32 whose unsigned order is the float order (-0 == +0). */
static uint32_t sortable(float f)
{
    if (f == 0.0f)
        f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
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
        a[i] = ((uint64_t)sortable(scores[i]) << 1) | (y == 1.0f ? 1u : 0u);
    }
    if (bad != INT64_MAX) {
        LOG_WARN("auc: sample %lld has %s", (long long)bad,
                 isnan(scores[bad]) ? "a NaN score" : "a label that is not 0 or 1");
        tr_free(a);
        return TR_ERR_ARG;
    }
    const uint64_t *sorted = kern_sort_radix(a, b, n, sizeof *a, 1, 33); /* by score; labels ride along */
    long double area = 0.0L;
    int64_t neg_below = 0, npos = 0, nneg = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i, gp = 0, gn = 0;
        while (j < n && (sorted[j] >> 1) == (sorted[i] >> 1)) {
            if (sorted[j] & 1u)
                gp++;
            else
                gn++;
            j++;
        }
        area += (long double)gp * (long double)neg_below + 0.5L * (long double)gp * (long double)gn;
        neg_below += gn;
        npos += gp;
        nneg += gn;
        i = j;
    }
    tr_free(a); /* b = a + n: one block */
    if (npos > 0 && nneg > 0)
        *auc = (double)(area / ((long double)npos * (long double)nneg));
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
