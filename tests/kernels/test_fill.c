/* test_fill.c: parity tests of the two memory ops of kernels/cpu/fill.c, on every
 * backend. fill: each kind against direct calls of the kmath.h initialisers (odd
 * shapes, padded ld, element numbers of a slice: a slice filled on its own equals
 * that region of the whole tensor), argument errors. copy_rows: several blocks per
 * call with padded strides, zero-size blocks, argument errors. Outputs are guarded
 * and their padding must keep its sentinels. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../kernels/kmath.h"
#include "kt_util.h"

/* ---- fill -------------------------------------------------------------------------- */

static const char *kind_name(enum kern_fill_kind k)
{
    switch (k) {
    case KERN_FILL_CONST: return "const";
    case KERN_FILL_UNIFORM: return "uniform";
    case KERN_FILL_GLOROT: return "glorot";
    case KERN_FILL_NORMAL: return "normal";
    }
    return "?";
}

/* Element number e of the tensor filled as a says, straight from kmath.h. */
static float ref_fill(const struct kern_fill_args *a, uint64_t e)
{
    switch (a->kind) {
    case KERN_FILL_CONST: return a->value;
    case KERN_FILL_UNIFORM: return km_init_embedding(a->seed, a->stream, e, a->a);
    case KERN_FILL_GLOROT: return km_init_glorot(a->seed, a->stream, e, a->a, a->b);
    case KERN_FILL_NORMAL: return km_init_bias(a->seed, a->stream, e, a->a);
    }
    return NAN;
}

/* The fill args of kind k with this file's parameters (dst, shape and numbering unset). */
static struct kern_fill_args fill_args(enum kern_fill_kind k, uint64_t seed)
{
    struct kern_fill_args a = {.kind = k, .value = -1.5f, .seed = seed, .stream = 3 + seed % 5};
    switch (k) {
    case KERN_FILL_CONST: break;
    case KERN_FILL_UNIFORM: a.a = 0.05f; break;           /* bound */
    case KERN_FILL_GLOROT: a.a = 300.0f, a.b = 67.0f; break; /* fan in, fan out */
    case KERN_FILL_NORMAL: a.a = 129.0f; break;            /* units */
    }
    return a;
}

/* Fills (rows, cols) with row stride cols + pad, numbered e = r * elem_ld + elem0 + c,
 * and compares with the host reference. CONST and UNIFORM have no transcendental
 * function: bitwise on every backend. GLOROT and NORMAL use logf/cosf/sqrtf, which
 * may differ by a few ulp between libm and a device (test_kmath_gpu's tolerance),
 * and are bitwise on the CPU backend, which runs the same host function. */
static void fill_case(enum kern_fill_kind k, int64_t rows, int64_t cols, int64_t pad, int64_t elem_ld,
                      int64_t elem0, uint64_t seed)
{
    const int64_t ld = cols + pad;
    struct kern_fill_args a = fill_args(k, seed);
    struct kt_buf dst;
    kt_buf_init(&dst, rows * ld);
    float *want = tr_malloc((size_t)(rows * cols + 1) * sizeof(float));
    float *got = tr_malloc((size_t)(rows * cols + 1) * sizeof(float));
    double *ref = tr_malloc((size_t)(rows * cols + 1) * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            want[r * cols + c] = ref_fill(&a, (uint64_t)(r * elem_ld + elem0 + c));
            ref[r * cols + c] = want[r * cols + c];
        }
    a.dst = dst.d;
    a.rows = rows;
    a.cols = cols;
    a.ld = ld;
    a.elem_ld = elem_ld;
    a.elem0 = elem0;
    enum tr_status rc = kt_be.i->fill(kt_be.ctx, &a);
    kt_download(&dst);
    char what[128];
    snprintf(what, sizeof what, "fill %s %lldx%lld ld=%lld elem_ld=%lld elem0=%lld", kind_name(k), (long long)rows,
             (long long)cols, (long long)ld, (long long)elem_ld, (long long)elem0);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    for (int64_t r = 0; r < rows; r++)
        memcpy(got + r * cols, dst.h + r * ld, (size_t)cols * sizeof(float));
    KT_CLOSE(what, got, ref, rows * cols, 1e-6, 4e-6, 1e-10);
    if (k == KERN_FILL_CONST || k == KERN_FILL_UNIFORM || !strcmp(kt_be.i->name, "cpu"))
        KT_SAME_BITS(what, got, want, rows * cols);
    TH_CHECKF(kt_pad_ok(dst.h, rows, cols, ld), "%s: wrote into the padding columns", what);
    TH_CHECKF(kt_buf_guard_ok(&dst), "%s: wrote outside dst", what);
    tr_free(ref);
    tr_free(got);
    tr_free(want);
    kt_buf_release(&dst);
}

static void test_fill_kinds(void)
{
    KT_NEED_OP(KERN_OP_FILL);
    static const int64_t shapes[][2] = {{1, 1}, {1, 33}, {3, 17}, {33, 31}, {7, 129}, {100, 3}, {257, 64}};
    const int64_t big = ((int64_t)1 << 33) + 7; /* element numbers past 2^32 */
    uint64_t seed = 1;
    for (int k = KERN_FILL_CONST; k <= KERN_FILL_NORMAL; k++)
        for (size_t s = 0; s < TR_ARRAY_SIZE(shapes); s++) {
            const int64_t rows = shapes[s][0], cols = shapes[s][1];
            fill_case((enum kern_fill_kind)k, rows, cols, 0, cols, 0, seed++);     /* the whole tensor */
            fill_case((enum kern_fill_kind)k, rows, cols, 3, cols, 0, seed++);     /* padded rows */
            fill_case((enum kern_fill_kind)k, rows, cols, 1, cols + 9, 5, seed++); /* columns of a wider one */
            fill_case((enum kern_fill_kind)k, rows, cols, 0, cols, big, seed++);   /* rows far into one */
        }
}

/* A constant is written as given, bit for bit: -0.0f stays negative, a NaN keeps
 * its payload, and the largest float is not rounded. */
static void test_fill_const_bits(void)
{
    KT_NEED_OP(KERN_OP_FILL);
    const uint32_t bits[] = {0x80000000u, 0x7fc01234u, 0x7f7fffffu, 0x00000001u};
    struct kt_buf dst;
    kt_buf_init(&dst, 5 * 8);
    for (size_t k = 0; k < TR_ARRAY_SIZE(bits); k++) {
        struct kern_fill_args a = {.kind = KERN_FILL_CONST, .dst = dst.d, .rows = 5, .cols = 7, .ld = 8};
        memcpy(&a.value, &bits[k], sizeof a.value);
        TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_OK);
        kt_download(&dst);
        int same = 1;
        for (int r = 0; r < 5; r++)
            for (int c = 0; c < 7; c++)
                same &= memcmp(&dst.h[r * 8 + c], &bits[k], sizeof bits[k]) == 0;
        TH_CHECKF(same, "fill const 0x%08x: not written bit for bit", (unsigned)bits[k]);
        TH_CHECKF(kt_pad_ok(dst.h, 5, 7, 8), "fill const 0x%08x: wrote into the padding", (unsigned)bits[k]);
    }
    TH_CHECK(kt_buf_guard_ok(&dst));
    kt_buf_release(&dst);
}

/* A tensor (R, C) filled at once, and the same tensor filled region by region with
 * elem_ld = C and elem0 = r0 * C + c0 into separate buffers (each with its own padded
 * ld): every region equals that part of the whole, bitwise (same backend, same
 * per-element function), whatever the kind. */
static void test_fill_slices(void)
{
    KT_NEED_OP(KERN_OP_FILL);
    const int64_t R = 45, C = 37, ldw = C + 2;
    static const int64_t regions[][4] = {
        /* r0, r1, c0, c1 */
        {0, 45, 0, 37},  {0, 1, 0, 37},  {44, 45, 0, 37}, {10, 30, 0, 37}, {0, 45, 36, 37},
        {0, 45, 5, 21},  {17, 18, 9, 10}, {3, 40, 1, 36},  {20, 20, 0, 37}, {5, 9, 30, 30},
    };
    for (int k = KERN_FILL_CONST; k <= KERN_FILL_NORMAL; k++) {
        struct kern_fill_args a = fill_args((enum kern_fill_kind)k, 40 + (uint64_t)k);
        struct kt_buf whole;
        kt_buf_init(&whole, R * ldw);
        a.dst = whole.d;
        a.rows = R;
        a.cols = C;
        a.ld = ldw;
        a.elem_ld = C;
        a.elem0 = 0;
        TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_OK);
        kt_download(&whole);
        for (size_t g = 0; g < TR_ARRAY_SIZE(regions); g++) {
            const int64_t r0 = regions[g][0], r1 = regions[g][1], c0 = regions[g][2], c1 = regions[g][3];
            const int64_t rows = r1 - r0, cols = c1 - c0, ld = cols + 3;
            struct kt_buf part;
            kt_buf_init(&part, rows * ld + 1);
            struct kern_fill_args p = a;
            p.dst = part.d;
            p.rows = rows;
            p.cols = cols;
            p.ld = ld;
            p.elem_ld = C;
            p.elem0 = r0 * C + c0;
            enum tr_status rc = kt_be.i->fill(kt_be.ctx, &p);
            kt_download(&part);
            char what[96];
            snprintf(what, sizeof what, "fill %s rows [%lld,%lld) cols [%lld,%lld) of %lldx%lld",
                     kind_name((enum kern_fill_kind)k), (long long)r0, (long long)r1, (long long)c0, (long long)c1,
                     (long long)R, (long long)C);
            TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
            for (int64_t r = 0; r < rows; r++) {
                char row_what[128];
                snprintf(row_what, sizeof row_what, "%s, row %lld", what, (long long)(r0 + r));
                KT_SAME_BITS(row_what, part.h + r * ld, whole.h + (r0 + r) * ldw + c0, cols);
            }
            TH_CHECKF(kt_pad_ok(part.h, rows, cols, ld) && kt_is_sentinel(&part.h[rows * ld]),
                      "%s: wrote into the padding", what);
            TH_CHECKF(kt_buf_guard_ok(&part), "%s: wrote outside the region's buffer", what);
            kt_buf_release(&part);
        }
        TH_CHECKF(kt_pad_ok(whole.h, R, C, ldw) && kt_buf_guard_ok(&whole), "fill %s: whole tensor out of bounds",
                  kind_name((enum kern_fill_kind)k));
        kt_buf_release(&whole);
    }
}

/* Negative sizes, ld < cols and an unknown kind are TR_ERR_ARG and write nothing;
 * rows = 0 or cols = 0 is a no-op. */
static void test_fill_args(void)
{
    KT_NEED_OP(KERN_OP_FILL);
    struct kt_buf dst;
    kt_buf_init(&dst, 4 * 6);
    const struct kern_fill_args base = {.kind = KERN_FILL_UNIFORM, .dst = dst.d, .rows = 4, .cols = 5, .ld = 6,
                                        .seed = 1, .elem_ld = 5, .a = 1.0f};
    struct kern_fill_args a = base;
    a.rows = -1;
    TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_ERR_ARG);
    a = base;
    a.cols = -1;
    TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_ERR_ARG);
    a = base;
    a.ld = 4;
    TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_ERR_ARG);
    a = base;
    a.kind = (enum kern_fill_kind)7;
    TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_ERR_ARG);
    a = base;
    a.kind = (enum kern_fill_kind)-1;
    TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_ERR_ARG);
    a = base;
    a.rows = 0;
    TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_OK);
    a = base;
    a.cols = 0;
    TH_EQ_ST(kt_be.i->fill(kt_be.ctx, &a), TR_OK);
    kt_download(&dst);
    int untouched = 1;
    for (int i = 0; i < 4 * 6; i++)
        untouched &= kt_is_sentinel(&dst.h[i]);
    TH_CHECKF(untouched, "a rejected or empty fill wrote into dst");
    TH_CHECK(kt_buf_guard_ok(&dst));
    kt_buf_release(&dst);
}

/* ---- copy_rows ----------------------------------------------------------------------- */

/* Blocks given as offsets into one source and one destination buffer. */
struct blk {
    int64_t dst_off, ldd, src_off, lds, rows, cols;
};

/* Runs the blocks in one call, from src (random) to dst (sentinels), and compares the
 * whole of dst bitwise with the same copies done on the host: the blocks' regions
 * equal the source, everything else (padding, gaps, guards) keeps its sentinel. */
static void copy_case(const char *what, const struct blk *bl, int n, int64_t src_n, int64_t dst_n, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    struct kt_buf src, dst;
    kt_buf_init(&src, src_n);
    kt_buf_init(&dst, dst_n);
    kt_fill(&r, src.h, src_n, -1, 1);
    kt_upload(&src);
    float *want = tr_malloc((size_t)(dst_n + 1) * sizeof(float));
    kt_sentinel_fill(want, dst_n);
    struct kern_copy_rows_args *a = tr_malloc((size_t)(n + 1) * sizeof *a);
    for (int k = 0; k < n; k++) {
        a[k] = (struct kern_copy_rows_args){.dst = dst.d + bl[k].dst_off, .ldd = bl[k].ldd,
                                            .src = src.d + bl[k].src_off, .lds = bl[k].lds, .rows = bl[k].rows,
                                            .cols = bl[k].cols};
        for (int64_t row = 0; row < bl[k].rows; row++)
            memcpy(want + bl[k].dst_off + row * bl[k].ldd, src.h + bl[k].src_off + row * bl[k].lds,
                   (size_t)bl[k].cols * sizeof(float));
    }
    enum tr_status rc = kt_be.i->copy_rows(kt_be.ctx, a, n);
    kt_download(&dst);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    KT_SAME_BITS(what, dst.h, want, dst_n);
    TH_CHECKF(kt_buf_guard_ok(&dst), "%s: wrote outside dst", what);
    tr_free(a);
    tr_free(want);
    kt_buf_release(&dst);
    kt_buf_release(&src);
}

static void test_copy_rows(void)
{
    KT_NEED_OP(KERN_OP_COPY_ROWS);
    /* one block, padded on both sides, rows not a multiple of anything */
    const struct blk one[] = {{0, 40, 3, 45, 1000, 37}};
    copy_case("one block 1000x37 lds=45 ldd=40", one, 1, 1000 * 45, 1000 * 40, 1);
    /* one row, one column, dense strides */
    const struct blk tiny[] = {{0, 1, 0, 1, 1, 1}};
    copy_case("one element", tiny, 1, 1, 1, 2);
    /* several blocks of different shapes into disjoint parts of dst, from overlapping
     * parts of src, with zero-row and zero-column blocks among them */
    const struct blk many[] = {
        {0, 20, 0, 33, 17, 17},       /* dst [0, 340) */
        {340, 5, 100, 33, 0, 5},      /* no rows */
        {340, 9, 10, 33, 31, 7},      /* dst [340, 619) */
        {619, 3, 5, 33, 4, 0},        /* no columns */
        {700, 129, 0, 129, 3, 129},   /* dense rows, dst [700, 1087) */
        {1100, 2, 900, 1, 50, 1},     /* a column, dst [1100, 1199) */
        {1200, 64, 40, 33, 20, 33},   /* dst [1200, 2480) */
    };
    copy_case("seven blocks with zero-size ones", many, (int)TR_ARRAY_SIZE(many), 2000, 2600, 3);
    /* many small blocks, as a batch gather would issue */
    struct blk small[100];
    for (int k = 0; k < 100; k++)
        small[k] = (struct blk){k * 12, 6, (k * 37) % 500, 11, 2, 5};
    copy_case("100 blocks of 2x5", small, 100, 600, 1200, 4);
    /* no blocks at all */
    copy_case("no blocks", NULL, 0, 4, 4, 5);
}

/* Negative rows or cols, or a stride shorter than a row (rows that overlap), in
 * any block is TR_ERR_ARG, and nothing is copied. */
static void test_copy_rows_args(void)
{
    KT_NEED_OP(KERN_OP_COPY_ROWS);
    struct kt_buf src, dst;
    kt_buf_init(&src, 64);
    kt_buf_init(&dst, 64);
    struct kern_copy_rows_args b[3];
    for (int k = 0; k < 3; k++)
        b[k] = (struct kern_copy_rows_args){.dst = dst.d + 20 * k, .ldd = 4, .src = src.d + 20 * k, .lds = 4,
                                            .rows = 4, .cols = 3};
    for (int bad = 0; bad < 3; bad++) {
        struct kern_copy_rows_args c[3];
        memcpy(c, b, sizeof c);
        c[bad].rows = -1;
        TH_EQ_ST(kt_be.i->copy_rows(kt_be.ctx, c, 3), TR_ERR_ARG);
        c[bad].rows = 4;
        c[bad].cols = -2;
        TH_EQ_ST(kt_be.i->copy_rows(kt_be.ctx, c, 3), TR_ERR_ARG);
        c[bad].cols = 5; /* wider than ldd = lds = 4 */
        TH_EQ_ST(kt_be.i->copy_rows(kt_be.ctx, c, 3), TR_ERR_ARG);
        c[bad].cols = 3;
        c[bad].lds = 2;
        TH_EQ_ST(kt_be.i->copy_rows(kt_be.ctx, c, 3), TR_ERR_ARG);
    }
    kt_download(&dst); /* nothing was copied: still all sentinel */
    int untouched = 1;
    for (int64_t i = 0; i < dst.n; i++)
        untouched &= kt_is_sentinel(&dst.h[i]);
    TH_CHECK(untouched && kt_buf_guard_ok(&dst));
    TH_EQ_ST(kt_be.i->copy_rows(kt_be.ctx, b, 3), TR_OK);
    kt_download(&dst);
    TH_CHECK(kt_buf_guard_ok(&dst));
    kt_buf_release(&dst);
    kt_buf_release(&src);
}

static const struct th_case cases[] = {
    {"fill_kinds", test_fill_kinds},
    {"fill_const_bits", test_fill_const_bits},
    {"fill_slices", test_fill_slices},
    {"fill_args", test_fill_args},
    {"copy_rows", test_copy_rows},
    {"copy_rows_args", test_copy_rows_args},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
