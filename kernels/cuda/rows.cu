/* rows.cu: CUDA move_rows, rows moved by index within device memory (a tier's
 * cache fills and write-backs: kern.h). One launch per block of the call, a warp
 * per row, 16-byte loads and stores where both rows and the width allow them. A
 * bitwise copy: no math, so nothing of kmath.h. It checks the arguments kern.h
 * names, never the indices. */
#include "../kern_check.h"
#include "cuda_internal.h"

#define MOVE_THREADS 256 /* 8 warps a block: 8 rows at a time */

static __global__ void __launch_bounds__(MOVE_THREADS)
    move_kernel(float *dst, int64_t ldd, const int64_t *dst_idx, const float *src, int64_t lds,
                const int64_t *src_idx, int64_t n, int64_t cols, int vec4)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (MOVE_THREADS / 32);
    for (int64_t i = (int64_t)blockIdx.x * (MOVE_THREADS / 32) + threadIdx.x / 32; i < n; i += warps) {
        const int64_t d = dst_idx ? dst_idx[i] : i, s = src_idx ? src_idx[i] : i;
        float *o = dst + d * ldd;
        const float *p = src + s * lds;
        if (vec4) {
            float4 *o4 = reinterpret_cast<float4 *>(o);
            const float4 *p4 = reinterpret_cast<const float4 *>(p);
            for (int64_t c = lane; c < cols / 4; c += 32)
                o4[c] = p4[c];
        } else {
            for (int64_t c = lane; c < cols; c += 32)
                o[c] = p[c];
        }
    }
}

enum tr_status kcu_move_rows(struct kcu_ctx *c, const struct kern_move_rows_args *a, int n)
{
    TR_CHECK(kern_check_move_rows(a, n));
    for (int k = 0; k < n; k++) {
        const struct kern_move_rows_args *b = &a[k];
        if (b->n == 0 || b->cols == 0)
            continue;
        if (c->sizing_only)
            return TR_ERR_UNSUPPORTED;
        /* float4 needs every row start 16-byte aligned: the bases, both strides and the width */
        const int vec4 = b->cols % 4 == 0 && b->ldd % 4 == 0 && b->lds % 4 == 0 &&
                         ((uintptr_t)b->dst & 15) == 0 && ((uintptr_t)b->src & 15) == 0;
        const unsigned blocks = kcu_blocks(c, (b->n + MOVE_THREADS / 32 - 1) / (MOVE_THREADS / 32) * 32, 32);
        move_kernel<<<blocks, MOVE_THREADS, 0, c->stream>>>(b->dst, b->ldd, b->dst_idx, b->src, b->lds, b->src_idx,
                                                          b->n, b->cols, vec4);
        KCU_LAUNCHED();
    }
    return TR_OK;
}
