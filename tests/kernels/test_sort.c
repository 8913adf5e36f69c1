/* test_sort.c: kern_sort_radix (kernels/sort.h) against a stable reference (qsort
 * by the key bits, ties by input position) for 8- and 16-byte records, sizes on
 * both sides of the insertion-sort cut-off, bit ranges that are whole bytes, odd
 * and empty, keys with many ties and keys whose digits are constant; guard words
 * after both buffers catch writes past n. It is a host utility, not a kern_op, so
 * it has no backend parity half. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/sort.h"
#include "kt_util.h"

#define GUARD 0x5a5a5a5a5a5a5a5aULL

struct ref {
    uint64_t field, pos;
};

static int ref_cmp(const void *a, const void *b)
{
    const struct ref *x = a, *y = b;
    if (x->field != y->field)
        return x->field < y->field ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static uint64_t field_of(uint64_t k, int lo, int hi)
{
    int bits = hi - lo;
    if (bits == 0)
        return 0;
    return (k >> lo) & (bits >= 64 ? ~0ULL : (1ULL << bits) - 1);
}

enum kind { RANDOM, TIES, CONSTANT_HIGH, ALL_EQUAL };

static uint64_t gen_key(struct kt_rng *r, enum kind kind)
{
    uint64_t x = kt_next(r);
    switch (kind) {
    case RANDOM: return x;
    case TIES: return (x % 7) * 0x0101010101010101ULL ^ (x & 0xf0f0);
    case CONSTANT_HIGH: return 0xabcdef0000000000ULL | (x & 0xff00ff); /* digits 2 and 4..7 never vary */
    case ALL_EQUAL: return 0x123456789abcdef0ULL;
    }
    return x;
}

/* Sorts one case and compares with the reference; 1 if it matched. */
static int one_case(int64_t n, size_t rec, int lo, int hi, enum kind kind, uint64_t seed)
{
    const size_t w = rec / 8; /* uint64 words per record */
    uint64_t *a = tr_malloc(((size_t)n * w + 1) * sizeof *a);
    uint64_t *t = tr_malloc(((size_t)n * w + 1) * sizeof *t);
    uint64_t *in = tr_malloc(((size_t)n * w + 1) * sizeof *in);
    struct ref *ref = tr_malloc(((size_t)n + 1) * sizeof *ref);
    TR_ASSERT(a && t && in && ref);
    struct kt_rng r = kt_rng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        in[(size_t)i * w] = gen_key(&r, kind);
        if (w == 2)
            in[(size_t)i * w + 1] = (uint64_t)i * 0x9e3779b97f4a7c15ULL; /* payload */
        ref[i] = (struct ref){field_of(in[(size_t)i * w], lo, hi), (uint64_t)i};
    }
    memcpy(a, in, (size_t)n * rec);
    a[(size_t)n * w] = t[(size_t)n * w] = GUARD;
    qsort(ref, (size_t)n, sizeof *ref, ref_cmp);

    const uint64_t *s = kern_sort_radix(a, t, n, rec, lo, hi);
    int ok = s == a || s == t;
    for (int64_t i = 0; ok && i < n; i++) {
        const uint64_t *want = in + ref[i].pos * w, *got = s + (size_t)i * w;
        ok = memcmp(want, got, rec) == 0;
    }
    ok = ok && a[(size_t)n * w] == GUARD && t[(size_t)n * w] == GUARD;
    TH_CHECKF(ok, "n=%lld rec=%zu bits [%d, %d) kind %d: wrong order, or a write past n", (long long)n, rec, lo,
              hi, (int)kind);
    tr_free(a);
    tr_free(t);
    tr_free(in);
    tr_free(ref);
    return ok;
}

static void test_matches_stable_reference(void)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 47, 48, 49, 255, 256, 1000, 70001};
    static const int ranges[][2] = {{0, 64}, {1, 33}, {5, 19}, {13, 14}, {20, 20}, {56, 64}, {60, 64}, {0, 8}};
    int cases = 0, ok = 0;
    for (size_t rec = 8; rec <= 16; rec += 8)
        for (size_t si = 0; si < TR_ARRAY_SIZE(sizes); si++)
            for (size_t ri = 0; ri < TR_ARRAY_SIZE(ranges); ri++)
                for (int kind = RANDOM; kind <= ALL_EQUAL; kind++) {
                    cases++;
                    ok += one_case(sizes[si], rec, ranges[ri][0], ranges[ri][1], (enum kind)kind,
                                   (uint64_t)(si * 131 + ri * 7 + (size_t)kind + rec));
                }
    printf("# %d of %d cases match the stable reference\n", ok, cases);
}

/* Passes whose digit never varies move nothing, so they are skipped: equal keys
 * stay in a, and keys that differ in one digit only take exactly one pass (tmp). */
static void test_constant_digits_skip_passes(void)
{
    enum { N = 1000 };
    static uint64_t a[N], t[N];
    for (int i = 0; i < N; i++)
        a[i] = 0x1111111111111111ULL;
    TH_CHECK(kern_sort_radix(a, t, N, 8, 0, 64) == (void *)a);
    for (int i = 0; i < N; i++)
        a[i] = 0x1111111111111111ULL ^ ((uint64_t)((i * 37) % 256) << 24);
    const uint64_t *s = kern_sort_radix(a, t, N, 8, 0, 64);
    TH_CHECK(s == t);
    int sorted = 1;
    for (int i = 1; i < N; i++)
        sorted &= s[i - 1] <= s[i];
    TH_CHECK(sorted);
}

int main(int argc, char **argv)
{
    static const struct th_case cases[] = {
        {"matches_stable_reference", test_matches_stable_reference},
        {"constant_digits_skip_passes", test_constant_digits_skip_passes},
    };
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
