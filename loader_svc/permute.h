/* permute.h: a seeded pseudorandom permutation of [0, n), evaluated at any index
 * in constant time and memory. No table of n entries is built: the Criteo
 * Terabyte training split has 4.2e9 samples, and a position inside an epoch must
 * be resumable without replaying it. The permutation is a balanced Feistel network
 * over the smallest 4^h >= n (so under 4n values), walked until the value falls
 * inside [0, n) ("cycle walking"): a bijection of [0, n) whatever n is.
 *
 * Used by the reader (source.h) for --shuffle_samples: epoch e of a job with
 * --seed s serves training sample perm(s, e)(j) at position j. */
#ifndef TR_PERMUTE_H
#define TR_PERMUTE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PERM_ROUNDS 6

struct perm {
    uint64_t n;
    int half;      /* bits of each Feistel half (4^half >= n) */
    uint64_t mask; /* (1 << half) - 1 */
    uint64_t key[PERM_ROUNDS];
};

/* The permutation of [0, n) for (seed, stream); n may be 0. */
void perm_init(struct perm *p, uint64_t n, uint64_t seed, uint64_t stream);

/* Element i (< n) of the permutation: distinct i give distinct values in [0, n). */
uint64_t perm_at(const struct perm *p, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
