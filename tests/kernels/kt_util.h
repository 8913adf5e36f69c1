/* kt_util.h: helpers shared by the kernel parity tests (tests/kernels/test_*.c):
 * a seeded xorshift64* generator, mixed-tolerance + NMSE comparison with NaN/inf
 * agreement (STYLE rule 15), and sentinel guard regions around outputs.
 * Header-only (static inline) so that each test binary stays one .c file; it is
 * not a module and nothing outside tests/kernels/ includes it. */
#ifndef TR_TESTS_KT_UTIL_H
#define TR_TESTS_KT_UTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/harness.h"
#include "../../kernels/kmath.h"

/* ---- random inputs from a fixed seed ------------------------------------------ */

struct kt_rng {
    uint64_t s;
};

static inline struct kt_rng kt_rng_seed(uint64_t seed)
{
    struct kt_rng r;
    r.s = km_mix64(seed) | 1u;
    return r;
}

/* xorshift64* (Vigna 2016). */
static inline uint64_t kt_next(struct kt_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

/* Uniform float in [lo, hi). */
static inline float kt_uniform(struct kt_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * km_u01(kt_next(r));
}

/* Uniform integer in [0, n), n > 0. */
static inline int64_t kt_below(struct kt_rng *r, int64_t n)
{
    return (int64_t)(kt_next(r) % (uint64_t)n);
}

static inline void kt_fill(struct kt_rng *r, float *p, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = kt_uniform(r, lo, hi);
}

/* ---- comparisons ----------------------------------------------------------------- */

/* Compares got (rows, cols; row stride ldg) with the reference ref (row stride ldr):
 * every element must satisfy |got - ref| <= atol + rtol*|ref|, NaN and inf must agree
 * exactly, and the NMSE sum (got-ref)^2 / sum ref^2 must be <= nmse_max. Reports up to
 * five mismatches, prefixed with `what`. Returns 1 when everything passed. */
static inline int kt_close2d(const char *what, const float *got, int64_t ldg, const double *ref, int64_t ldr,
                             int64_t rows, int64_t cols, double atol, double rtol, double nmse_max)
{
    int bad = 0;
    double num = 0.0, den = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            double g = got[r * ldg + c], e = ref[r * ldr + c];
            int ok;
            if (isnan(e) || isnan(g))
                ok = isnan(e) && isnan(g);
            else if (isinf(e) || isinf(g))
                ok = g == e;
            else {
                ok = fabs(g - e) <= atol + rtol * fabs(e);
                num += (g - e) * (g - e);
                den += e * e;
            }
            if (!ok) {
                if (bad < 5)
                    th_failf_(__FILE__, __LINE__, "%s: [%lld,%lld] got %.9g want %.9g (diff %.3g, tol %.3g)", what,
                              (long long)r, (long long)c, g, e, fabs(g - e), atol + rtol * fabs(e));
                bad++;
            }
        }
    }
    if (bad > 5)
        th_failf_(__FILE__, __LINE__, "%s: %d mismatches in all", what, bad);
    double nmse = den > 0.0 ? num / den : num;
    if (nmse > nmse_max) {
        th_failf_(__FILE__, __LINE__, "%s: nmse %.3g > %.3g", what, nmse, nmse_max);
        bad++;
    }
    return bad == 0;
}

static inline int kt_close(const char *what, const float *got, const double *ref, int64_t n, double atol,
                           double rtol, double nmse_max)
{
    return kt_close2d(what, got, n, ref, n, n ? 1 : 0, n, atol, rtol, nmse_max);
}

/* Bitwise equality of n floats; reports the first difference. */
static inline int kt_same_bits(const char *what, const float *a, const float *b, int64_t n)
{
    if (n <= 0 || memcmp(a, b, (size_t)n * sizeof(float)) == 0)
        return 1;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            th_failf_(__FILE__, __LINE__, "%s: first bitwise difference at %lld: %.9g vs %.9g", what, (long long)i,
                      (double)a[i], (double)b[i]);
            break;
        }
    }
    return 0;
}

/* ---- sentinel guard regions ---------------------------------------------------
 * A NaN with a payload no kernel produces: writes past an output's end, or into the
 * padding columns between rows, show up as a changed sentinel. */

#define KT_GUARD 32
#define KT_SENTINEL 0x7fbadbadu

static inline void kt_sentinel_fill(float *p, int64_t n)
{
    uint32_t s = KT_SENTINEL;
    for (int64_t i = 0; i < n; i++)
        memcpy(&p[i], &s, sizeof s);
}

static inline int kt_is_sentinel(const float *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u == KT_SENTINEL;
}

/* Returns n floats (contents = sentinel) with KT_GUARD sentinel floats on each side;
 * NULL on allocation failure. Free with kt_guarded_free. */
static inline float *kt_guarded(int64_t n)
{
    float *raw = tr_malloc((size_t)(n + 2 * KT_GUARD) * sizeof(float));
    if (!raw)
        return NULL;
    kt_sentinel_fill(raw, n + 2 * KT_GUARD);
    return raw + KT_GUARD;
}

/* True if both guard regions around the n floats at p are intact. */
static inline int kt_guard_ok(const float *p, int64_t n)
{
    for (int64_t i = 1; i <= KT_GUARD; i++)
        if (!kt_is_sentinel(p - i) || !kt_is_sentinel(p + n - 1 + i))
            return 0;
    return 1;
}

static inline void kt_guarded_free(float *p)
{
    if (p)
        tr_free(p - KT_GUARD);
}

#endif
