/* permute.c: the Feistel permutation of permute.h. Each round maps the halves
 * (L, R) to (R, L xor F(R)), F a keyed 64-bit mix cut to `half` bits: invertible
 * whatever F is, so the network is a bijection of [0, 4^half); cycle walking
 * restricts it to [0, n) (values >= n are fed through again until one lands
 * inside, at most a few rounds on average since 4^half < 4n). */
#include "permute.h"

#include "../kernels/kmath.h"

#define STREAM_PERM 0x5045524d00000000ULL /* "PERM" */

void perm_init(struct perm *p, uint64_t n, uint64_t seed, uint64_t stream)
{
    p->n = n;
    p->half = 0;
    while (p->half < 32 && ((uint64_t)1 << (2 * p->half)) < n)
        p->half++;
    p->mask = ((uint64_t)1 << p->half) - 1;
    for (int r = 0; r < PERM_ROUNDS; r++)
        p->key[r] = km_rand3(seed, STREAM_PERM ^ stream, (uint64_t)r);
}

static uint64_t feistel(const struct perm *p, uint64_t x)
{
    uint64_t l = x >> p->half, r = x & p->mask;
    for (int k = 0; k < PERM_ROUNDS; k++) {
        uint64_t t = l ^ (km_mix64(r ^ p->key[k]) & p->mask);
        l = r;
        r = t;
    }
    return (l << p->half) | r;
}

uint64_t perm_at(const struct perm *p, uint64_t i)
{
    if (p->n <= 1)
        return i;
    uint64_t x = i;
    do
        x = feistel(p, x);
    while (x >= p->n);
    return x;
}
