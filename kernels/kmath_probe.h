/* kmath_probe.h: one evaluation of every kmath.h function on one input, into 16
 * slots. The host (tests/kernels/test_kmath_gpu.c) and the device
 * (kernels/cuda/kmath_device.cu) run this same function, so the GPU parity test
 * compares the very expressions the backends use. */
#ifndef TR_KMATH_PROBE_H
#define TR_KMATH_PROBE_H

#include "kmath.h"

/* o[16]: the kmath functions at x (sample i, random seed `seed`). */
KM_FN void km_probe(float x, uint64_t seed, int64_t i, float *o)
{
    struct km_optim h = {0.1f, 1e-7f};
    float p = x, acc = 0.1f;
    o[0] = km_relu(x);
    o[1] = km_relu_grad(x, 2.0f);
    o[2] = km_sigmoid(x);
    o[3] = km_bce_logit(x, 1.0f);
    o[4] = km_bce_logit_grad(x, 0.0f);
    km_sgd_step(&p, x, &h);
    o[5] = p;
    p = x;
    km_adagrad_step(&p, &acc, x, &h);
    o[6] = p;
    o[7] = acc;
    o[8] = km_init_embedding(seed, 3, (uint64_t)i, 0.5f);
    o[9] = km_init_glorot(seed, 0x100, (uint64_t)i, 16.0f, 512.0f);
    o[10] = km_init_bias(seed, 0x200, (uint64_t)i, 512.0f);
    uint64_t key = km_score_key(x, (int)(i & 1)); /* 16 of its bits, exact in a float */
    o[11] = (float)km_powerlaw_id(km_rand3(seed, 7, (uint64_t)i), 1000) +
            (float)((key ^ (key >> 17) ^ km_auc_term2(key >> 40, (uint64_t)i)) & 0xffffu);
    o[12] = km_half_to_float(km_float_to_half(x)) + km_round_mantissa(x, 7, 0) + km_round_mantissa(x, 10, 1) +
            (float)km_float_to_bf16(x);
    o[13] = (float)km_tri_index(i % 27 + 1, 0) + (float)km_tri_count(27) + (float)km_interact_width(27, 16, 1);
    o[14] = km_bag_scale(i % 5, 1) + km_u01_open(km_rand3(seed, 1, (uint64_t)i)) + km_normal(km_mix64((uint64_t)i)) +
            km_cross_fwd(x, 0.75f, 0.5f) + km_cross_grad_h(x, -0.25f) + km_cross_grad_x0(0.125f, x, 1.5f, (int)(i & 1));
    float racc = 0.1f, den = km_rowwise_adagrad_row(&racc, km_sumsq_add(km_sumsq_add(0.0, x), 0.5f), 3, &h);
    p = x;
    km_rowwise_adagrad_step(&p, x, den, &h);
    o[15] = (float)km_sumsq_add(0.5, x) + (float)km_half_is_finite(km_float_to_half(x)) + p + racc;
}

#endif
