/* kmath.h: every per-element and per-row formula of terarec, written once and
 * compiled both as C11 (CPU backend, tests) and as CUDA C++ (device code), so the
 * CPU tests exercise exactly the arithmetic the GPU runs.
 *
 * Rules: include only <math.h> and <stdint.h>; no restrict (KM_RESTRICT), no VLAs,
 * no compound literals, no _Generic; float literals and float functions. Loops over
 * a whole tensor and the order of reductions belong to the backends, not here. */
#ifndef TR_KMATH_H
#define TR_KMATH_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define KM_FN static __host__ __device__ __forceinline__
#define KM_RESTRICT __restrict__
#else
#define KM_FN static inline
#define KM_RESTRICT restrict
#endif

/* ---- counter-based random numbers ------------------------------------------
 * Values are pure functions of (seed, stream, counter), so any rank, thread or
 * device computes the same number for the same element without shared state:
 * an embedding row initialised on 1 worker equals the same row on 32 workers. */

/* The splitmix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer. */
KM_FN uint64_t km_mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

/* Hash of a seed, a stream id and a counter. */
KM_FN uint64_t km_rand3(uint64_t seed, uint64_t stream, uint64_t counter)
{
    uint64_t h = km_mix64(seed + 0x9e3779b97f4a7c15ULL);
    h = km_mix64(h ^ (stream * 0xd1b54a32d192ed03ULL));
    return km_mix64(h ^ (counter + 0x632be59bd9b4e019ULL));
}

/* Uniform float in [0, 1) with 24 random bits. */
KM_FN float km_u01(uint64_t r)
{
    return (float)(r >> 40) * (1.0f / 16777216.0f);
}

/* Uniform float in (0, 1]: safe under logf. */
KM_FN float km_u01_open(uint64_t r)
{
    return ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
}

/* Standard normal from one 64-bit draw (Box-Muller on its two 32-bit halves). */
KM_FN float km_normal(uint64_t r)
{
    float u1 = ((float)(r >> 40) + 1.0f) * (1.0f / 16777216.0f);
    float u2 = (float)((r >> 8) & 0xffffffULL) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
}

/* Embedding initialiser of the seed: U[-sqrt(1/rows), +sqrt(1/rows)). `elem` is
 * the element's global index row*D + col, so the value does not depend on sharding. */
KM_FN float km_init_embedding(uint64_t seed, uint64_t table, uint64_t elem, float bound)
{
    return (2.0f * km_u01(km_rand3(seed, 0x10000ULL + table, elem)) - 1.0f) * bound;
}

/* Keras GlorotNormal: truncated normal (cut at 2 sigma, redrawn), sigma =
 * sqrt(2/(fan_in+fan_out)) / 0.87962566103423978. `stream` names the tensor. */
KM_FN float km_init_glorot(uint64_t seed, uint64_t stream, uint64_t elem, float fan_in, float fan_out)
{
    float sigma = sqrtf(2.0f / (fan_in + fan_out)) / 0.87962566103423978f;
    for (uint64_t attempt = 0; attempt < 64; attempt++) {
        float z = km_normal(km_rand3(seed, stream, (elem << 6) | attempt));
        if (z >= -2.0f && z <= 2.0f)
            return z * sigma;
    }
    return 0.0f; /* probability 0.0455^64: unreachable in practice */
}

/* Dense bias initialiser of the seed: N(0, 1/units), not truncated. */
KM_FN float km_init_bias(uint64_t seed, uint64_t stream, uint64_t elem, float units)
{
    return km_normal(km_rand3(seed, stream, elem)) * sqrtf(1.0f / units);
}

/* Power-law (Zipf, exponent 1) id in [0, card): P(id) ~ 1/(id+1). Small ids are
 * the frequent ones, as in a frequency-ordered vocabulary. */
KM_FN int64_t km_powerlaw_id(uint64_t r, int64_t card)
{
    float u = km_u01(r);
    double x = exp((double)u * log((double)card + 1.0)) - 1.0;
    int64_t id = (int64_t)x;
    if (id >= card)
        id = card - 1;
    if (id < 0)
        id = 0;
    return id;
}

/* ---- activations -----------------------------------------------------------
 * NaN in, NaN out, as in PyTorch: a NaN must reach the loss and the guards of the
 * training loop, never be turned into a plausible 0 by a comparison (a comparison
 * with NaN is false, so `x > 0 ? x : 0` maps NaN to 0). */

/* max(x, 0) keeping NaN; -0 gives +0. */
KM_FN float km_relu(float x)
{
    return x > 0.0f ? x : (isnan(x) ? x : 0.0f);
}

/* Gradient through ReLU given its output y and the upstream gradient dy: 0 where
 * y <= 0, else dy (PyTorch's threshold_backward: a NaN output passes dy). */
KM_FN float km_relu_grad(float y, float dy)
{
    return y <= 0.0f ? 0.0f : dy;
}

/* The ReLU's mask bit of an output y: 1 where km_relu_grad passes the gradient
 * (NaN included). */
KM_FN unsigned km_relu_mask(float y)
{
    return y <= 0.0f ? 0u : 1u;
}

/* km_relu_grad from the mask bit: the same bits. */
KM_FN float km_relu_grad_mask(unsigned bit, float dy)
{
    return bit ? dy : 0.0f;
}

/* Logistic function without overflow; NaN takes the second branch and stays NaN. */
KM_FN float km_sigmoid(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* ---- loss ------------------------------------------------------------------ */

/* Binary cross-entropy on a logit x with label y in {0,1} (numerically stable):
 * max(x,0) - x*y + log(1 + exp(-|x|)). The max keeps NaN (km_relu, not fmaxf,
 * which returns the other operand); a non-finite logit gives a non-finite loss. */
KM_FN float km_bce_logit(float x, float y)
{
    return km_relu(x) - x * y + log1pf(expf(-fabsf(x)));
}

/* d bce / d x. */
KM_FN float km_bce_logit_grad(float x, float y)
{
    return km_sigmoid(x) - y;
}

/* ---- exact ROC AUC (kernels/cpu/metrics.c, kernels/cuda/metrics.cu) ---------
 * A sample is one 64-bit sort key: its score mapped to a uint32 whose unsigned
 * order is the float order, shifted left once, with the label (1 = positive) in
 * bit 0. Sorting the keys ascending over bits [0, 33) orders samples by score and,
 * within a group of tied scores, puts the negatives first. Then, with neg(i) the
 * negatives at sorted positions below i and h the first position of i's group, a
 * positive at i outranks neg(h) negatives and ties the group's neg(i) - neg(h):
 * twice its Mann-Whitney count is neg(h) + neg(i), an integer, so the sum over
 * positives is exact in any order and on any device. */

/* The sort key of (score, label); -0 and +0 map alike (a tie), NaN must not occur. */
KM_FN uint64_t km_score_key(float score, int positive)
{
    union {
        float f;
        uint32_t u;
    } cv;
    cv.f = score == 0.0f ? 0.0f : score;
    uint32_t k = (cv.u & 0x80000000u) ? ~cv.u : (cv.u | 0x80000000u);
    return ((uint64_t)k << 1) | (positive ? 1u : 0u);
}

/* Twice the Mann-Whitney count of the positive at sorted position i (see above). */
KM_FN uint64_t km_auc_term2(uint64_t neg_before_group, uint64_t neg_before_i)
{
    return neg_before_group + neg_before_i;
}

/* AUC from the summed km_auc_term2 over all positives; NaN when a class is empty.
 * Both backends call it on the host with their exact integer sums, so they agree
 * bitwise. */
KM_FN double km_auc_from_area2(uint64_t area2, int64_t npos, int64_t nneg)
{
    if (npos <= 0 || nneg <= 0)
        return (double)NAN;
    return (double)area2 / (2.0 * (double)npos * (double)nneg);
}

/* ---- optimizers ------------------------------------------------------------
 * SGD and Adagrad update one element; callers loop. Duplicated embedding ids must be summed
 * into one gradient before these are called (Adagrad is not additive). */

struct km_optim {
    float lr;  /* learning rate of this step */
    float eps; /* Adagrad epsilon added to sqrt(accum) */
};

KM_FN void km_sgd_step(float *KM_RESTRICT p, float g, const struct km_optim *h)
{
    *p -= h->lr * g;
}

KM_FN void km_adagrad_step(float *KM_RESTRICT p, float *KM_RESTRICT acc, float g, const struct km_optim *h)
{
    float a = *acc + g * g;
    *acc = a;
    *p -= h->lr * g / (sqrtf(a) + h->eps);
}

/* Row-wise Adagrad (FBGEMM/TorchRec EXACT_ROWWISE_ADAGRAD): one accumulator per
 * embedding row. km_rowwise_adagrad_row adds the mean square of the row's whole
 * gradient (sumsq: sum of g^2 over all dim columns, km_sumsq_add terms, possibly
 * summed over column slices held by several workers) to *acc and returns the
 * denominator sqrt(acc) + eps; km_rowwise_adagrad_step then updates each column
 * with it. Both compute what km_adagrad_step computes per element, with the
 * accumulator shared by the row. */
KM_FN float km_rowwise_adagrad_row(float *KM_RESTRICT acc, double sumsq, int64_t dim, const struct km_optim *h)
{
    float a = *acc + (float)(sumsq / (double)dim);
    *acc = a;
    return sqrtf(a) + h->eps;
}

KM_FN void km_rowwise_adagrad_step(float *KM_RESTRICT p, float g, float denom, const struct km_optim *h)
{
    *p -= h->lr * g / denom;
}

/* ---- reductions -------------------------------------------------------------
 * The numeric guards' sum of squares: each term in double, so a sum over finite
 * floats stays finite (FLT_MAX^2 < DBL_MAX / 2^900) and the sum is finite exactly
 * when every element is. The order of the terms belongs to the backends. */

KM_FN double km_sumsq_add(double acc, float x)
{
    double d = (double)x;
    return acc + d * d;
}

/* ---- dirty rows ------------------------------------------------------------
 * The checkpoint block of a row: rows [k * block_rows, (k + 1) * block_rows) form
 * block k (mark_rows). */

KM_FN int64_t km_row_block(int64_t row, int64_t block_rows)
{
    return row / block_rows;
}

/* ---- interaction ------------------------------------------------------------ */

/* Position of pair (i, j), i > j, in the row-major strict lower triangle. */
KM_FN int64_t km_tri_index(int64_t i, int64_t j)
{
    return i * (i - 1) / 2 + j;
}

/* Number of pairs among n vectors. */
KM_FN int64_t km_tri_count(int64_t n)
{
    return n * (n - 1) / 2;
}

/* Width of the top-MLP input: [bottom (d) if present | pairs | zero pad to a multiple of 8]. */
KM_FN int64_t km_interact_width(int64_t n, int64_t d, int has_bottom)
{
    int64_t w = km_tri_count(n) + (has_bottom ? d : 0);
    return (w + 7) / 8 * 8;
}

/* ---- low-rank cross layer (DCNv2) ---------------------------------------------
 * x_{l+1} = x0 * h + x_l per element, with h = U (V x_l) + b from the GEMMs (the
 * "cross combine"); x0 is the layer stack's input, x_l this layer's. */

/* One output element of a cross layer. */
KM_FN float km_cross_fwd(float x0, float h, float xl)
{
    return x0 * h + xl;
}

/* Gradient reaching h from dy = dLoss/dx_{l+1}. */
KM_FN float km_cross_grad_h(float dy, float x0)
{
    return dy * x0;
}

/* Gradient reaching x0 through the product (dy * h), added to acc; residual set
 * when x_l is x0 itself (the first layer), whose identity path adds dy too. */
KM_FN float km_cross_grad_x0(float acc, float dy, float h, int residual)
{
    return acc + dy * h + (residual ? dy : 0.0f);
}

/* ---- embedding combiners ---------------------------------------------------- */

/* Scale applied to a bag's summed rows: 1 for sum, 1/len for mean (0 for an empty bag). */
KM_FN float km_bag_scale(int64_t len, int mean)
{
    if (!mean)
        return 1.0f;
    return len > 0 ? 1.0f / (float)len : 0.0f;
}

/* ---- half precision (dataset numerical features are IEEE binary16) ---------- */

/* True when binary16 h is finite (its exponent is not all ones: not inf, not NaN). */
KM_FN int km_half_is_finite(uint16_t h)
{
    return (h & 0x7c00u) != 0x7c00u;
}

KM_FN float km_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while ((man & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    union {
        uint32_t u;
        float f;
    } cv;
    cv.u = bits;
    return cv.f;
}

/* Round-to-nearest-even float -> binary16 (overflow to inf, NaN kept). */
KM_FN uint16_t km_float_to_half(float f)
{
    union {
        float f;
        uint32_t u;
    } cv;
    cv.f = f;
    uint32_t x = cv.u;
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* ---- reduced-precision operands (what a tensor core sees of an fp32 value) ---- */

/* Round-to-nearest-even float -> bfloat16 bits (the upper half of a float: fp32's
 * range, 7 explicit mantissa bits); inf kept, NaN kept as a quiet NaN, a carry past
 * the largest bf16 gives inf. What --amp bf16's GEMM operands hold. */
KM_FN uint16_t km_float_to_bf16(float f)
{
    union {
        float f;
        uint32_t u;
    } cv;
    cv.f = f;
    const uint32_t x = cv.u;
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one (the low bits may hold its payload) */
        return (uint16_t)((x >> 16) | 0x40u);
    const uint32_t low = x & 0xffffu;
    uint32_t h = x >> 16;
    if (low > 0x8000u || (low == 0x8000u && (h & 1u)))
        h++; /* into the exponent when the mantissa is all ones: the next binade, or inf */
    return (uint16_t)h;
}

/* x with its mantissa cut to `bits` explicit bits (1..22), keeping fp32's exponent
 * range: bits 10 is TF32, bits 7 is bf16 (binary16 has its own range: km_float_to_half).
 * Rounds to nearest even, or toward zero when `chop` (a conversion that drops the
 * low bits). NaN and inf pass unchanged; a carry past the largest float gives inf.
 * No op rounds with it: the kernel tests emulate reduced-precision GEMMs with it. */
KM_FN float km_round_mantissa(float x, int bits, int chop)
{
    union {
        float f;
        uint32_t u;
    } cv;
    cv.f = x;
    if ((cv.u & 0x7f800000u) == 0x7f800000u) /* inf or nan */
        return x;
    const uint32_t drop = 23u - (uint32_t)bits;
    const uint32_t low = cv.u & ((1u << drop) - 1u), half = 1u << (drop - 1u);
    cv.u -= low;
    /* sign and magnitude: adding one unit to the magnitude carries into the exponent */
    if (!chop && (low > half || (low == half && ((cv.u >> drop) & 1u))))
        cv.u += 1u << drop;
    return cv.f;
}

#endif
