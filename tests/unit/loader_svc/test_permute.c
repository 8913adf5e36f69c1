/* test_permute.c: the seeded Feistel permutation of [0, n): a bijection for every
 * n tried (powers of 4 and 2, primes, one above and below them, 0 and 1), the
 * same for the same (seed, stream) and different otherwise, and spread evenly
 * (where one element lands over many streams passes a chi-square test; no fixed
 * points beyond chance; neighbours land far apart). */
#include <math.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/permute.h"

static void bijection(void)
{
    const uint64_t ns[] = {0, 1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000, 4095, 4096, 4097, 100003};
    for (size_t c = 0; c < TR_ARRAY_SIZE(ns); c++) {
        const uint64_t n = ns[c];
        struct perm p;
        perm_init(&p, n, 12345, 7);
        unsigned char *seen = tr_calloc(n ? n : 1, 1);
        TR_ASSERT(seen);
        int ok = 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t v = perm_at(&p, i);
            if (v >= n || seen[v]++) {
                ok = 0;
                break;
            }
        }
        TH_CHECKF(ok, "n = %llu: not a permutation of [0, n)", (unsigned long long)n);
        tr_free(seen);
    }
}

static int same(uint64_t n, uint64_t s1, uint64_t e1, uint64_t s2, uint64_t e2)
{
    struct perm a, b;
    perm_init(&a, n, s1, e1);
    perm_init(&b, n, s2, e2);
    for (uint64_t i = 0; i < n; i++)
        if (perm_at(&a, i) != perm_at(&b, i))
            return 0;
    return 1;
}

static void seeded(void)
{
    TH_CHECK(same(1000, 1, 0, 1, 0));
    TH_CHECK(!same(1000, 1, 0, 1, 1)); /* another epoch */
    TH_CHECK(!same(1000, 1, 0, 2, 0)); /* another seed */
    struct perm p;
    perm_init(&p, 1000, 1, 0);
    int identity = 1;
    for (uint64_t i = 0; i < 1000 && identity; i++)
        identity = perm_at(&p, i) == i;
    TH_CHECK(!identity);
}

/* Over 4000 streams, element 0 of a permutation of 10 lands on each value about
 * 400 times: chi-square with 9 degrees of freedom below 27.9 (p = 0.001). Fixed
 * points of a permutation of 10000 average 1; adjacent elements land a third of
 * the range apart on average (uniform pairs: n/3). */
static void spread(void)
{
    int count[10] = {0};
    for (uint64_t e = 0; e < 4000; e++) {
        struct perm p;
        perm_init(&p, 10, 99, e);
        count[perm_at(&p, 0)]++;
    }
    double chi = 0;
    for (int v = 0; v < 10; v++)
        chi += (count[v] - 400.0) * (count[v] - 400.0) / 400.0;
    TH_CHECKF(chi < 27.9, "chi-square %.1f over 10 values", chi);
    struct perm p;
    perm_init(&p, 10000, 3, 0);
    int fixed = 0;
    double gap = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        fixed += perm_at(&p, i) == i;
        if (i)
            gap += fabs((double)perm_at(&p, i) - (double)perm_at(&p, i - 1));
    }
    gap /= 9999.0;
    TH_CHECKF(fixed <= 8, "%d fixed points", fixed);
    TH_CHECKF(gap > 3000 && gap < 3700, "mean distance of neighbours %.0f, expected about 3333", gap);
}

static const struct th_case cases[] = {
    {"bijection", bijection},
    {"seeded", seeded},
    {"spread", spread},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
