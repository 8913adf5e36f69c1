/* kt_util.h: helpers shared by the kernel parity tests (tests/kernels/test_*.c):
 * the loop over every backend the build has (kt_main, kt_be), buffers with a host
 * mirror and a copy in the backend's memory (struct kt_buf), a seeded xorshift64*
 * generator, mixed-tolerance + NMSE comparison with NaN/inf agreement (STYLE rule 15)
 * and sentinel guard regions around outputs, in backend memory too.
 * Header-only (static inline) so that each test binary stays one .c file; it is
 * not a module and nothing outside tests/kernels/ includes it. Test code: a helper
 * whose allocation or copy fails bails out of the binary (TAP "Bail out!"). */
#ifndef TR_TESTS_KT_UTIL_H
#define TR_TESTS_KT_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
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

/* ---- comparisons -----------------------------------------------------------------
 * Macros, so that a failure names the test's own file and line. */

/* Compares got (rows, cols; row stride ldg) with the reference ref (row stride ldr):
 * every element must satisfy |got - ref| <= atol + rtol*|ref|, NaN and inf must agree
 * exactly, and the NMSE sum (got-ref)^2 / sum ref^2 must be <= nmse_max. Reports up to
 * five mismatches, prefixed with `what`. Evaluates to 1 when everything passed. */
#define KT_CLOSE2D(what, got, ldg, ref, ldr, rows, cols, atol, rtol, nmse_max)                        \
    kt_close2d_(__FILE__, __LINE__, what, got, ldg, ref, ldr, rows, cols, atol, rtol, nmse_max)
/* KT_CLOSE2D of n contiguous floats. */
#define KT_CLOSE(what, got, ref, n, atol, rtol, nmse_max)                                             \
    kt_close_(__FILE__, __LINE__, what, got, ref, n, atol, rtol, nmse_max)
/* Bitwise equality of n floats; reports the first difference. Evaluates to 1 if equal. */
#define KT_SAME_BITS(what, a, b, n) kt_same_bits_(__FILE__, __LINE__, what, a, b, n)

static inline int kt_close2d_(const char *file, int line, const char *what, const float *got, int64_t ldg,
                              const double *ref, int64_t ldr, int64_t rows, int64_t cols, double atol, double rtol,
                              double nmse_max)
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
                    th_failf_(file, line, "%s: [%lld,%lld] got %.9g want %.9g (diff %.3g, tol %.3g)", what,
                              (long long)r, (long long)c, g, e, fabs(g - e), atol + rtol * fabs(e));
                bad++;
            }
        }
    }
    if (bad > 5)
        th_failf_(file, line, "%s: %d mismatches in all", what, bad);
    double nmse = den > 0.0 ? num / den : num;
    if (nmse > nmse_max) {
        th_failf_(file, line, "%s: nmse %.3g > %.3g", what, nmse, nmse_max);
        bad++;
    }
    return bad == 0;
}

static inline int kt_close_(const char *file, int line, const char *what, const float *got, const double *ref,
                            int64_t n, double atol, double rtol, double nmse_max)
{
    return kt_close2d_(file, line, what, got, n, ref, n, n ? 1 : 0, n, atol, rtol, nmse_max);
}

static inline int kt_same_bits_(const char *file, int line, const char *what, const float *a, const float *b,
                                int64_t n)
{
    if (n <= 0 || memcmp(a, b, (size_t)n * sizeof(float)) == 0)
        return 1;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            th_failf_(file, line, "%s: first bitwise difference at %lld: %.9g vs %.9g", what, (long long)i,
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

/* ---- the backends ----------------------------------------------------------------
 * kt_main runs every case once per backend of kern_backend_name(), with kt_be set
 * to an instance of it opened on all threads. Cases give every op kt_be and put its
 * tensors in kt_be's memory (struct kt_buf, kt_dev_*). A case may point kt_be at an
 * instance it opened itself (kt_open), and must put it back before closing that
 * instance; kt_main sets it again before every case. */

static struct kern_backend kt_be;

#define KT_MAX_BACKENDS 8

/* What kt_main opens a backend with, but `threads` threads (0: every CPU). */
static inline struct kern_backend_opts kt_opts(int threads)
{
    struct kern_backend_opts o = {.threads = threads, .device = -1, .local_rank = 0, .quiet = 0};
    return o;
}

static inline void kt_bail_(const char *what, size_t bytes, enum tr_status rc)
{
    printf("Bail out! %s (%zu bytes) on backend '%s': %s\n", what, bytes, kt_be.i ? kt_be.i->name : "?",
           tr_strerror(rc));
    fflush(stdout);
    exit(1);
}

/* Opens another instance of kt_be's backend on `threads` threads; bails out if it
 * cannot. Close it with kern_backend_close. */
static inline void kt_open(int threads, struct kern_backend *be)
{
    struct kern_backend_opts o = kt_opts(threads);
    enum tr_status rc = kern_backend_open(kt_be.i->name, &o, be);
    if (rc != TR_OK)
        kt_bail_("kern_backend_open", 0, rc);
}

/* Skips the case when kt_be does not implement `op` for float tensors. */
#define KT_NEED_OP(op)                                                                    \
    do {                                                                                  \
        if (!kt_be.i->supports(kt_be.ctx, (op), KERN_F32))                                \
            TH_SKIP(kt_unsupported_(op));                                                 \
    } while (0)

static inline const char *kt_unsupported_(enum kern_op op)
{
    static char why[96];
    snprintf(why, sizeof why, "%s backend does not support %s", kt_be.i->name, kern_op_name(op));
    return why;
}

static inline void kt_enter_(void *arg)
{
    kt_be = *(const struct kern_backend *)arg;
}

/* main() of a kernel test: opens every backend this build has (on all threads) and
 * runs every case against each, named "name [backend]"; the name filter argv[1]
 * matches those names. A backend that cannot be opened is one skipped case
 * "all cases [name]" (a failure when TR_TEST_GPU=1 requires the GPU backends). */
static inline int kt_main(const struct th_case *cases, size_t n, int argc, char **argv)
{
    const char *names[KT_MAX_BACKENDS + 1] = {NULL};
    for (int k = 0; k < KT_MAX_BACKENDS && (names[k] = kern_backend_name(k)); k++)
        ;
    struct kern_backend be[KT_MAX_BACKENDS];
    struct th_group groups[KT_MAX_BACKENDS];
    char why[KT_MAX_BACKENDS][160];
    size_t nb = 0;
    for (; names[nb] && nb < KT_MAX_BACKENDS; nb++) {
        struct kern_backend_opts o = kt_opts(0);
        o.quiet = 1; /* the reason becomes the SKIP line */
        enum tr_status rc = kern_backend_open(names[nb], &o, &be[nb]);
        memset(&groups[nb], 0, sizeof groups[nb]);
        groups[nb].tag = names[nb];
        groups[nb].enter = kt_enter_;
        groups[nb].arg = &be[nb];
        if (rc != TR_OK) {
            snprintf(why[nb], sizeof why[nb], "%s backend: not available (%s)", names[nb], tr_strerror(rc));
#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
            if (!strcmp(names[nb], "cuda")) {
                /* a skip under make test; `make test-gpu` (TR_TEST_GPU=1) fails it */
                int dev = kern_cuda_device_count();
                groups[nb].needs_gpu = 1;
                snprintf(why[nb], sizeof why[nb], "cuda backend: not available (%s)",
                         dev == 0 ? "no CUDA device" : tr_strerror(rc));
            }
#endif
            groups[nb].skip = why[nb];
        }
    }
    int rc = th_main_groups(cases, n, groups, nb, argc, argv);
    for (size_t k = 0; k < nb; k++)
        kern_backend_close(&be[k]);
    memset(&kt_be, 0, sizeof kt_be);
    return rc;
}

/* ---- backend memory ----------------------------------------------------------------
 * Every pointer an op gets is in kt_be's memory; the host sees results only through
 * a D2H copy. These bail out on failure (test code). */

/* bytes of kt_be's memory, zero-filled. Release with kt_dev_release(p, bytes). */
static inline void *kt_dev_alloc(size_t bytes)
{
    void *p = NULL;
    enum tr_status rc = kt_be.i->mem_alloc(kt_be.ctx, bytes, &p);
    if (rc != TR_OK || !p)
        kt_bail_("mem_alloc", bytes, rc != TR_OK ? rc : TR_ERR_NOMEM);
    return p;
}

static inline void kt_dev_release(void *p, size_t bytes)
{
    kt_be.i->mem_release(kt_be.ctx, p, bytes);
}

static inline void kt_h2d(void *d, const void *h, size_t bytes)
{
    enum tr_status rc = kt_be.i->copy(kt_be.ctx, d, h, bytes, KERN_H2D);
    if (rc != TR_OK)
        kt_bail_("copy H2D", bytes, rc);
}

static inline void kt_d2h(void *h, const void *d, size_t bytes)
{
    enum tr_status rc = kt_be.i->copy(kt_be.ctx, h, d, bytes, KERN_D2H);
    if (rc != TR_OK)
        kt_bail_("copy D2H", bytes, rc);
}

/* A copy of host[0..bytes) in kt_be's memory. Release with kt_dev_release. */
static inline void *kt_dev_dup(const void *host, size_t bytes)
{
    void *d = kt_dev_alloc(bytes);
    kt_h2d(d, host, bytes);
    return d;
}

/* A tensor of n floats in two places: `h`, the host mirror that the test fills and
 * reads, and `d`, the copy in kt_be's memory that ops get. Both have KT_GUARD sentinel
 * floats on each side; the backend's guards come back with every download, so
 * kt_buf_guard_ok after kt_download checks the backend's memory. */
struct kt_buf {
    float *h; /* (n) host */
    float *d; /* (n) backend */
    int64_t n;
};

/* Both copies all sentinel, guards included. Release with kt_buf_release. */
static inline void kt_buf_init(struct kt_buf *b, int64_t n)
{
    const size_t bytes = (size_t)(n + 2 * KT_GUARD) * sizeof(float);
    b->n = n;
    b->h = kt_guarded(n);
    if (!b->h)
        kt_bail_("host mirror", bytes, TR_ERR_NOMEM);
    b->d = (float *)kt_dev_dup(b->h - KT_GUARD, bytes) + KT_GUARD;
}

/* h[0, n) to the backend (the backend's guards are left alone). */
static inline void kt_upload(const struct kt_buf *b)
{
    kt_h2d(b->d, b->h, (size_t)b->n * sizeof(float));
}

/* The backend's n floats and both its guard regions into the host mirror. */
static inline void kt_download(struct kt_buf *b)
{
    kt_d2h(b->h - KT_GUARD, b->d - KT_GUARD, (size_t)(b->n + 2 * KT_GUARD) * sizeof(float));
}

/* True if both guard regions were intact at the last download. */
static inline int kt_buf_guard_ok(const struct kt_buf *b)
{
    return kt_guard_ok(b->h, b->n);
}

/* True if columns [cols, ld) of every row of p (rows, ld) are sentinels. */
static inline int kt_pad_ok(const float *p, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = cols; c < ld; c++)
            if (!kt_is_sentinel(&p[r * ld + c]))
                return 0;
    return 1;
}

static inline void kt_buf_release(struct kt_buf *b)
{
    if (b->d)
        kt_dev_release(b->d - KT_GUARD, (size_t)(b->n + 2 * KT_GUARD) * sizeof(float));
    kt_guarded_free(b->h);
    memset(b, 0, sizeof *b);
}

#endif
