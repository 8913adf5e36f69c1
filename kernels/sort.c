/* sort.c: the stable LSD radix sort of kernels/sort.h. One generic body,
 * instantiated for 8- and 16-byte records so that the compiler turns each record
 * copy into plain loads and stores; one counting pass fills the histograms of all
 * digits, then one scatter pass per digit that varies. It is single-threaded and
 * does not sort by anything but the key bits (no comparator, no float keys). */
#include "sort.h"

#include <string.h>

#include "../common/check.h"

#define SMALL_N 48 /* below this, an insertion sort */

static inline uint64_t key_of(const unsigned char *r)
{
    uint64_t k;
    memcpy(&k, r, sizeof k);
    return k;
}

/* rec is a compile-time constant at both call sites (always inlined). */
static inline __attribute__((always_inline)) void *radix_body(void *a, void *tmp, int64_t n, const size_t rec,
                                                              int lo, int hi)
{
    const int bits = hi - lo;
    const uint64_t fmask = bits >= 64 ? ~0ULL : (1ULL << bits) - 1; /* the key bits, shifted down by lo */
    unsigned char *src = a, *dst = tmp;
    if (n < 2 || bits == 0)
        return a;
    if (n < SMALL_N) {
        for (int64_t i = 1; i < n; i++) {
            unsigned char x[16];
            memcpy(x, src + (size_t)i * rec, rec);
            const uint64_t fx = (key_of(x) >> lo) & fmask;
            int64_t j = i;
            for (; j > 0 && ((key_of(src + (size_t)(j - 1) * rec) >> lo) & fmask) > fx; j--)
                memcpy(src + (size_t)j * rec, src + (size_t)(j - 1) * rec, rec);
            memcpy(src + (size_t)j * rec, x, rec);
        }
        return a;
    }
    const int passes = (bits + 7) / 8;
    int64_t cnt[8][256];
    memset(cnt, 0, (size_t)passes * sizeof cnt[0]);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t f = (key_of(src + (size_t)i * rec) >> lo) & fmask;
        for (int d = 0; d < passes; d++)
            cnt[d][(f >> (8 * d)) & 0xff]++;
    }
    const uint64_t f0 = (key_of(src) >> lo) & fmask;
    for (int d = 0; d < passes; d++) {
        int64_t *c = cnt[d];
        if (c[(f0 >> (8 * d)) & 0xff] == n)
            continue; /* every key has this digit: the pass would not move anything */
        int64_t sum = 0;
        for (int b = 0; b < 256; b++) {
            const int64_t k = c[b];
            c[b] = sum;
            sum += k;
        }
        const int shift = lo + 8 * d;
        const uint64_t dmask = (fmask >> (8 * d)) & 0xff; /* the last digit may be narrower */
        for (int64_t i = 0; i < n; i++) {
            const unsigned char *r = src + (size_t)i * rec;
            memcpy(dst + (size_t)c[(key_of(r) >> shift) & dmask]++ * rec, r, rec);
        }
        unsigned char *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

void *kern_sort_radix(void *a, void *tmp, int64_t n, size_t rec_bytes, int lo_bit, int hi_bit)
{
    TR_ASSERT(lo_bit >= 0 && lo_bit <= hi_bit && hi_bit <= 64);
    switch (rec_bytes) {
    case 8: return radix_body(a, tmp, n, 8, lo_bit, hi_bit);
    case 16: return radix_body(a, tmp, n, 16, lo_bit, hi_bit);
    default: TR_BUG("kern_sort_radix: %zu-byte records (8 or 16 only)", rec_bytes);
    }
}
