/* test_move_rows.c: parity tests of move_rows (rows moved by index: a tier's
 * cache fills and write-backs) against the same moves done on the host: gathers
 * (source index only), scatters (destination index only), both, neither, several
 * blocks per call writing disjoint rows, widths that do and do not allow 16-byte
 * moves, padded strides, zero-size blocks; the whole destination is compared
 * bitwise, so every row not moved keeps its sentinel. Argument errors write
 * nothing. On every backend (kt_main). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "kt_util.h"

/* One block: n rows of cols floats, at offsets into one source and one
 * destination buffer; idx arrays (host) of n entries or NULL. */
struct mv {
    int64_t dst_off, ldd, src_off, lds, n, cols;
    const int64_t *dst_idx, *src_idx;
};

static void move_case(const char *what, const struct mv *bl, int nb, int64_t src_n, int64_t dst_n, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    struct kt_buf src, dst;
    kt_buf_init(&src, src_n);
    kt_buf_init(&dst, dst_n);
    kt_fill(&r, src.h, src_n, -1, 1);
    src.h[0] = -0.0f; /* a bitwise copy keeps the sign of zero */
    kt_upload(&src);
    float *want = tr_malloc((size_t)(dst_n + 1) * sizeof(float));
    struct kern_move_rows_args *a = tr_malloc((size_t)(nb + 1) * sizeof *a);
    void **didx = tr_calloc((size_t)(nb + 1), sizeof *didx), **sidx = tr_calloc((size_t)(nb + 1), sizeof *sidx);
    TH_REQUIRE(want && a && didx && sidx);
    kt_sentinel_fill(want, dst_n);
    for (int k = 0; k < nb; k++) {
        const struct mv *b = &bl[k];
        const size_t ib = (size_t)(b->n ? b->n : 1) * sizeof(int64_t);
        if (b->dst_idx)
            didx[k] = kt_dev_dup(b->dst_idx, ib);
        if (b->src_idx)
            sidx[k] = kt_dev_dup(b->src_idx, ib);
        a[k] = (struct kern_move_rows_args){.dst = dst.d + b->dst_off, .ldd = b->ldd, .dst_idx = didx[k],
                                            .src = src.d + b->src_off, .lds = b->lds, .src_idx = sidx[k],
                                            .n = b->n, .cols = b->cols};
        for (int64_t i = 0; i < b->n; i++) {
            const int64_t d = b->dst_idx ? b->dst_idx[i] : i, s = b->src_idx ? b->src_idx[i] : i;
            memcpy(want + b->dst_off + d * b->ldd, src.h + b->src_off + s * b->lds, (size_t)b->cols * sizeof(float));
        }
    }
    enum tr_status rc = kt_be.i->move_rows(kt_be.ctx, a, nb);
    TH_EQ_ST(kt_be.i->synchronize(kt_be.ctx), TR_OK);
    kt_download(&dst);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    KT_SAME_BITS(what, dst.h, want, dst_n);
    TH_CHECKF(kt_buf_guard_ok(&dst), "%s: wrote outside dst", what);
    for (int k = 0; k < nb; k++) {
        const size_t ib = (size_t)(bl[k].n ? bl[k].n : 1) * sizeof(int64_t);
        kt_dev_release(didx[k], bl[k].dst_idx ? ib : 0);
        kt_dev_release(sidx[k], bl[k].src_idx ? ib : 0);
    }
    tr_free(didx);
    tr_free(sidx);
    tr_free(a);
    tr_free(want);
    kt_buf_release(&dst);
    kt_buf_release(&src);
}

/* A permutation of [0, n) (Fisher-Yates), and its first k entries as an index. */
static void perm(struct kt_rng *r, int64_t *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = kt_below(r, i + 1), t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

static void test_gather_scatter(void)
{
    KT_NEED_OP(KERN_OP_MOVE_ROWS);
    struct kt_rng r = kt_rng_seed(7);
    enum { SLOTS = 700, N = 300 };
    int64_t *slots = tr_malloc(SLOTS * sizeof(int64_t)), *rep = tr_malloc(N * sizeof(int64_t));
    TH_REQUIRE(slots && rep);
    perm(&r, slots, SLOTS); /* distinct destination rows: the first N of a permutation */
    for (int64_t i = 0; i < N; i++)
        rep[i] = kt_below(&r, 40); /* source rows may repeat */
    static const int64_t widths[] = {1, 3, 4, 16, 17, 64, 129};
    for (size_t w = 0; w < TR_ARRAY_SIZE(widths); w++) {
        const int64_t c = widths[w], ld = c + (w % 2 ? 3 : 0); /* padded strides for some */
        char what[96];
        /* scatter: staging (N, c) dense -> slots of a cache (SLOTS, ld) */
        const struct mv sc = {0, ld, 0, c, N, c, slots, NULL};
        snprintf(what, sizeof what, "scatter %d rows of %lld", N, (long long)c);
        move_case(what, &sc, 1, (int64_t)N * c, (int64_t)SLOTS * ld, 10 + w);
        /* gather: slots of a cache -> staging, with repeats */
        const struct mv ga = {0, c, 0, ld, N, c, NULL, rep};
        snprintf(what, sizeof what, "gather %d rows of %lld", N, (long long)c);
        move_case(what, &ga, 1, (int64_t)SLOTS * ld, (int64_t)N * c, 20 + w);
        /* both indices, and neither (a plain block copy) */
        const struct mv both = {0, ld, 0, ld, N, c, slots, rep};
        move_case("both indices", &both, 1, (int64_t)SLOTS * ld, (int64_t)SLOTS * ld, 30 + w);
        const struct mv none = {0, ld, 0, ld, N, c, NULL, NULL};
        move_case("no index", &none, 1, (int64_t)N * ld, (int64_t)N * ld, 40 + w);
    }
    tr_free(slots);
    tr_free(rep);
}

/* A tier's scatter of a record (row | optimizer state) into two slabs: two blocks
 * from one interleaved staging buffer, plus zero-size blocks; odd offsets defeat
 * the 16-byte path for some. */
static void test_blocks(void)
{
    KT_NEED_OP(KERN_OP_MOVE_ROWS);
    struct kt_rng r = kt_rng_seed(3);
    enum { C = 90, N = 50, W = 8, S = 1, REC = W + S };
    int64_t *slots = tr_malloc(C * sizeof(int64_t));
    TH_REQUIRE(slots);
    perm(&r, slots, C);
    /* dst: the row slab at 0 (C, W), the state slab at 1000 (C, S); src: (N, REC) */
    const struct mv bl[] = {
        {0, W, 0, REC, N, W, slots, NULL},
        {1000, S, W, REC, N, S, slots, NULL},
        {0, W, 0, REC, 0, W, slots, NULL}, /* no rows */
        {0, W, 0, REC, N, 0, slots, NULL}, /* no columns */
    };
    move_case("row and state slabs", bl, (int)TR_ARRAY_SIZE(bl), (int64_t)N * REC, 1000 + C * S, 5);
    const struct mv odd[] = {{1, 4, 3, 8, N, 4, slots, NULL}};
    move_case("misaligned rows", odd, 1, 3 + (int64_t)N * 8, 1 + (int64_t)C * 4, 6);
    move_case("no blocks", NULL, 0, 4, 4, 7);
    tr_free(slots);
}

/* Negative sizes, a stride below cols or a missing pointer in any block is
 * TR_ERR_ARG, and nothing is written. */
static void test_args(void)
{
    KT_NEED_OP(KERN_OP_MOVE_ROWS);
    struct kt_buf src, dst;
    kt_buf_init(&src, 64);
    kt_buf_init(&dst, 64);
    struct kern_move_rows_args b[2];
    for (int k = 0; k < 2; k++)
        b[k] = (struct kern_move_rows_args){.dst = dst.d + 32 * k, .ldd = 4, .src = src.d + 32 * k, .lds = 4,
                                            .n = 4, .cols = 3};
    for (int bad = 0; bad < 2; bad++) {
        struct kern_move_rows_args c[2];
        memcpy(c, b, sizeof c);
        c[bad].n = -1;
        TH_EQ_ST(kt_be.i->move_rows(kt_be.ctx, c, 2), TR_ERR_ARG);
        c[bad].n = 4;
        c[bad].cols = -1;
        TH_EQ_ST(kt_be.i->move_rows(kt_be.ctx, c, 2), TR_ERR_ARG);
        c[bad].cols = 5;
        TH_EQ_ST(kt_be.i->move_rows(kt_be.ctx, c, 2), TR_ERR_ARG);
        c[bad].cols = 3;
        c[bad].src = NULL;
        TH_EQ_ST(kt_be.i->move_rows(kt_be.ctx, c, 2), TR_ERR_ARG);
    }
    TH_EQ_ST(kt_be.i->move_rows(kt_be.ctx, b, -1), TR_ERR_ARG);
    kt_download(&dst);
    int untouched = 1;
    for (int64_t i = 0; i < dst.n; i++)
        untouched &= kt_is_sentinel(&dst.h[i]);
    TH_CHECK(untouched);
    kt_buf_release(&dst);
    kt_buf_release(&src);
}

int main(int argc, char **argv)
{
    static const struct th_case cases[] = {
        {"gather_scatter", test_gather_scatter},
        {"blocks", test_blocks},
        {"args", test_args},
    };
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
