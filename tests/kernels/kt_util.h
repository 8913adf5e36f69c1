/* kt_util.h: helpers shared by the kernel parity tests (tests/kernels/test_*.c):
 * the loop over every backend the build has (kt_main, kt_be), buffers with a host
 * mirror and a copy in the backend's memory (struct kt_buf), a seeded xorshift64*
 * generator, mixed-tolerance + NMSE comparison with NaN/inf agreement (STYLE rule 15),
 * sentinel guard regions around outputs, in backend memory too, and instances whose
 * GEMMs run in reduced precision with the error model their results are held to.
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

/* The comparison behind KT_CLOSE2D and KT_BOUNDED: element (r, c) must be within
 * bnd[r * ldr + c] of ref when bnd is given, else within atol + rtol * |ref|; NaN
 * and inf must agree exactly; the NMSE must be <= nmse_max. Returns the number of
 * elements out of bounds, plus one if the NMSE is over; reports up to five of them
 * (prefixed with `what`, as failures of the running case) when `report`, and
 * stores the NMSE in *nmse (may be NULL). */
static inline int kt_compare_(const char *file, int line, int report, const char *what, const float *got, int64_t ldg,
                              const double *ref, const double *bnd, int64_t ldr, int64_t rows, int64_t cols,
                              double atol, double rtol, double nmse_max, double *nmse)
{
    int bad = 0;
    double num = 0.0, den = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            const double g = got[r * ldg + c], e = ref[r * ldr + c];
            const double b = bnd ? bnd[r * ldr + c] : atol + rtol * fabs(e);
            int ok;
            if (isnan(e) || isnan(g))
                ok = isnan(e) && isnan(g);
            else if (isinf(e) || isinf(g))
                ok = g == e;
            else {
                ok = fabs(g - e) <= b;
                num += (g - e) * (g - e);
                den += e * e;
            }
            if (!ok) {
                if (report && bad < 5)
                    th_failf_(file, line, "%s: [%lld,%lld] got %.9g want %.9g (diff %.3g, bound %.3g)", what,
                              (long long)r, (long long)c, g, e, fabs(g - e), b);
                bad++;
            }
        }
    }
    if (report && bad > 5)
        th_failf_(file, line, "%s: %d elements out of bounds in all", what, bad);
    const double q = den > 0.0 ? num / den : num;
    if (nmse)
        *nmse = q;
    if (q > nmse_max) {
        if (report)
            th_failf_(file, line, "%s: nmse %.3g > %.3g", what, q, nmse_max);
        bad++;
    }
    return bad;
}

static inline int kt_close2d_(const char *file, int line, const char *what, const float *got, int64_t ldg,
                              const double *ref, int64_t ldr, int64_t rows, int64_t cols, double atol, double rtol,
                              double nmse_max)
{
    return kt_compare_(file, line, 1, what, got, ldg, ref, NULL, ldr, rows, cols, atol, rtol, nmse_max, NULL) == 0;
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

/* Opens another instance of kt_be's backend, on every CPU, whose GEMMs run in
 * `prec` (kern_backend_opts.precision), quietly: TR_ERR_UNSUPPORTED when the backend
 * lacks that precision (the CPU for bf16 and fp16), or another status of
 * kern_backend_open. Close it with kern_backend_close. */
static inline enum tr_status kt_open_prec(enum kern_precision prec, struct kern_backend *be)
{
    struct kern_backend_opts o = kt_opts(0);
    o.quiet = 1;
    o.precision = (int)prec;
    return kern_backend_open(kt_be.i->name, &o, be);
}

static inline const char *kt_no_prec_(enum kern_precision prec, enum tr_status rc)
{
    static char why[112];
    snprintf(why, sizeof why, "%s backend has no %s GEMMs (%s)", kt_be.i->name, kern_precision_name(prec),
             tr_strerror(rc));
    return why;
}

/* In a case: saves kt_be in *outer and points kt_be at a new instance *be of its
 * backend with GEMMs in `prec`; skips the case when the backend lacks the precision
 * and fails it when the instance does not open. Every path out of the case after
 * it goes through kt_leave_prec. */
#define KT_ENTER_PREC(prec, be, outer)                                                    \
    do {                                                                                  \
        enum tr_status kt_rc_ = kt_open_prec((prec), (be));                               \
        if (kt_rc_ == TR_ERR_UNSUPPORTED)                                                 \
            TH_SKIP(kt_no_prec_((prec), kt_rc_));                                         \
        if (kt_rc_ != TR_OK) {                                                            \
            th_failf_(__FILE__, __LINE__, "cannot open backend '%s' with %s GEMMs: %s",   \
                      kt_be.i->name, kern_precision_name(prec), tr_strerror(kt_rc_));     \
            return;                                                                       \
        }                                                                                 \
        *(outer) = kt_be;                                                                 \
        kt_be = *(be);                                                                    \
    } while (0)

/* Puts kt_be back to *outer and closes the instance of KT_ENTER_PREC. */
static inline void kt_leave_prec(const struct kern_backend *outer, struct kern_backend *be)
{
    kt_be = *outer;
    kern_backend_close(be);
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

/* ---- the error model of reduced-precision GEMMs ----------------------------------------
 * An instance opened with precision TF32, BF16 or FP16 rounds the operands of its GEMMs
 * (gemm, and the interaction's products) to that format and sums the products in fp32
 * (kern.h); the tests compare with a double reference of the fp32 inputs. One operand x
 * rounded to p explicit mantissa bits, unit roundoff u = 2^-(p+1), is off by
 *     |fl(x) - x| <= e(x) = 2u |x|   where |x| >= tiny (its format's normal range),
 *                           |x|      below that (a subnormal, or flushed to zero):
 *   tf32  p = 10: u = 2^-11, fp32's exponent, tiny = 2^-126
 *   bf16  p = 7:  u = 2^-8,  fp32's exponent, tiny = 2^-126
 *   fp16  p = 10: u = 2^-11, but a 5-bit exponent: tiny = 2^-14, and values over
 *         65504 overflow, so the tests keep fp16 operands in [-1, 1]
 *   fp32  operands exact (u = 0).
 * Round-to-nearest is off by u|x| at most; the model allows 2u, one whole unit in
 * the last place, because a conversion that drops the low bits (truncation: tensor
 * cores fed raw fp32 words ignore them) is off by up to that, and the tests must not
 * depend on which one cuBLAS does. The product of two rounded operands is then off by
 *     |fl(a) fl(b) - a b| <= e(a)|b| + |a|e(b) + e(a)e(b)   (about 4u |a b|),
 * and the fp32 sum of k such products adds at most gamma_k = k u32 / (1 - k u32)
 * (u32 = 2^-24) times the sum of their magnitudes, for any order of summation (the
 * depth of any summation tree is below k). A dot product's bound is the sum of both
 * over its terms (struct kt_dot), so it follows the inputs element by element; a
 * result must lie within it everywhere, and its NMSE below kt_prec.nmse:
 *     nmse = 8 u^2   (tf32, fp16: 1.9e-6; bf16: 1.2e-4)
 * The worst-case bound alone would pass a result whose bias is missing once k is
 * large (a bias in [-1, 1] against 4u sum |a b| ~ u k); the NMSE does not: random
 * rounding errors give about 0.3 u^2 when rounding to nearest and 2 u^2 when
 * truncating (the prec_model cases of test_dense.c and test_interact.c measure both
 * with km_round_mantissa and km_float_to_half, and print them), while an output of k
 * products (variance k/9) missing a bias in [-1, 1] (variance 1/3) has an NMSE near
 * 3/k (0.006 at k = 479), far above it. A bf16 GEMM does not pass the tf32 limit. */

struct kt_prec {
    enum kern_precision prec;
    double u;    /* unit roundoff of an operand; 0: exact (fp32) */
    double tiny; /* below this magnitude an operand may lose all its bits */
    double nmse; /* the most NMSE a result may have */
};

static inline struct kt_prec kt_prec_of(enum kern_precision p)
{
    struct kt_prec t = {p, 0.0, 0.0, 1e-9};
    switch (p) {
    case KERN_PREC_TF32:
        t.u = 0x1p-11;
        t.tiny = 0x1p-126;
        break;
    case KERN_PREC_BF16:
        t.u = 0x1p-8;
        t.tiny = 0x1p-126;
        break;
    case KERN_PREC_FP16:
        t.u = 0x1p-11;
        t.tiny = 0x1p-14;
        break;
    case KERN_PREC_FP32: break;
    }
    if (t.u > 0.0)
        t.nmse = 8.0 * t.u * t.u;
    return t;
}

/* e(x) of the model: how far x may be from what the GEMM multiplies. */
static inline double kt_prec_err(const struct kt_prec *t, double x)
{
    x = fabs(x);
    if (t->u == 0.0)
        return 0.0;
    return x < t->tiny ? x : 2.0 * t->u * x;
}

/* x as an operand of a GEMM in precision t: rounded to nearest even, or truncated
 * when chop (fp16 truncation is emulated with 10 bits in fp32's range); x itself
 * for fp32. For emulating such a GEMM on the host. */
static inline float kt_prec_round(const struct kt_prec *t, float x, int chop)
{
    switch (t->prec) {
    case KERN_PREC_TF32: return km_round_mantissa(x, 10, chop);
    case KERN_PREC_BF16: return km_round_mantissa(x, 7, chop);
    case KERN_PREC_FP16: return chop ? km_round_mantissa(x, 10, 1) : km_half_to_float(km_float_to_half(x));
    case KERN_PREC_FP32: break;
    }
    return x;
}

/* gamma_k = k u32 / (1 - k u32): the relative error of an fp32 sum of k terms. */
static inline double kt_gamma(int64_t k)
{
    const double ku = (double)k * 0x1p-24;
    return ku / (1.0 - ku);
}

/* A dot product sum_p a_p b_p of fp32 inputs: its exact value, the sum of its
 * terms' magnitudes and the bound of the operands' rounding, term by term. */
struct kt_dot {
    double s, abs, err;
    int64_t k;
};

/* Adds the term a b, whose operands may be off by ea and eb (kt_prec_err). */
static inline void kt_dot_add(struct kt_dot *d, double a, double ea, double b, double eb)
{
    d->s += a * b;
    d->abs += fabs(a * b);
    d->err += ea * fabs(b) + fabs(a) * eb + ea * eb;
    d->k++;
}

/* How far a GEMM in precision t may compute the dot product from d->s. */
static inline double kt_dot_bound(const struct kt_dot *d)
{
    return d->err + kt_gamma(d->k) * (d->abs + d->err);
}

/* got (rows, cols; row stride ldg) against ref, each element within its own bound
 * bnd (ref and bnd with row stride ldr), as kt_compare_. */
static inline int kt_bounded_(const char *file, int line, int report, const char *what, const float *got, int64_t ldg,
                              const double *ref, const double *bnd, int64_t ldr, int64_t rows, int64_t cols,
                              double nmse_max, double *nmse)
{
    return kt_compare_(file, line, report, what, got, ldg, ref, bnd, ldr, rows, cols, 0.0, 0.0, nmse_max, nmse);
}

static inline int kt_bounded_ok_(const char *file, int line, const char *what, const float *got, int64_t ldg,
                                 const double *ref, const double *bnd, int64_t ldr, int64_t rows, int64_t cols,
                                 double nmse_max)
{
    return kt_bounded_(file, line, 1, what, got, ldg, ref, bnd, ldr, rows, cols, nmse_max, NULL) == 0;
}

/* kt_bounded_ reporting failures at the caller's line; evaluates to 1 when all passed. */
#define KT_BOUNDED(what, got, ldg, ref, bnd, ldr, rows, cols, nmse_max)                                \
    kt_bounded_ok_(__FILE__, __LINE__, what, got, ldg, ref, bnd, ldr, rows, cols, nmse_max)
/* kt_bounded_ without reports: the number of failures (for tests of the tolerance). */
#define KT_COUNT_OUT_OF_BOUNDS(got, ldg, ref, bnd, ldr, rows, cols, nmse_max, nmse)                     \
    kt_bounded_(__FILE__, __LINE__, 0, "", got, ldg, ref, bnd, ldr, rows, cols, nmse_max, nmse)

#endif
