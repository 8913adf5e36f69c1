/* radix.c: a stable LSD radix sort of 64-bit keys on a bit range, 8 bits per
 * pass, shared by the embedding update (rows) and the exact AUC (scores). It is
 * single-threaded; callers sort per table or once per evaluation. */
#include <string.h>

#include "cpu_internal.h"

uint64_t *kern_cpu_radix_sort_u64(uint64_t *a, uint64_t *b, int64_t n, int lo, int hi, int64_t hist[256])
{
    for (int shift = lo; shift < hi; shift += 8) {
        memset(hist, 0, 256 * sizeof(int64_t));
        for (int64_t i = 0; i < n; i++)
            hist[(a[i] >> shift) & 0xff]++;
        int64_t sum = 0;
        for (int d = 0; d < 256; d++) {
            int64_t c = hist[d];
            hist[d] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++)
            b[hist[(a[i] >> shift) & 0xff]++] = a[i];
        uint64_t *t = a;
        a = b;
        b = t;
    }
    return a;
}
