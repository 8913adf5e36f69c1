/* test_mark_rows.c: parity tests of mark_rows (the dirty-row bitmap of incremental
 * checkpoints) against a reference computed here: random ids over odd table sizes
 * and block sizes (the last block partial), I32 and I64 ids, ids outside the table
 * skipped, several tables sharing one call, a bitmap that is only ever set, and the
 * argument errors (nothing written), on every backend (kt_main). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "kt_util.h"

static void mark_case(int64_t rows, int64_t block, int64_t n, int i64, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t nb = (rows + block - 1) / block;
    int64_t *ids = tr_malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    int32_t *ids32 = tr_malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    uint8_t *want = tr_calloc((size_t)(nb ? nb : 1), 1), *got = tr_calloc((size_t)(nb ? nb : 1), 1);
    TH_REQUIRE(ids && ids32 && want && got);
    for (int64_t i = 0; i < n; i++) {
        /* mostly a power-law-like head, some tail, a few ids outside the table */
        int64_t v = kt_below(&r, 8) == 0 ? kt_below(&r, rows + 5) - 2 : kt_below(&r, rows < 16 ? rows : 16);
        ids[i] = v;
        ids32[i] = (int32_t)v;
        if (v >= 0 && v < rows)
            want[v / block] = 1;
    }
    const size_t ib = (size_t)(n ? n : 1) * (i64 ? sizeof(int64_t) : sizeof(int32_t));
    void *d_ids = kt_dev_dup(i64 ? (const void *)ids : (const void *)ids32, ib);
    uint8_t pre = nb > 1 ? 1 : 0; /* a block set before the call stays set */
    uint8_t *init = tr_calloc((size_t)(nb ? nb : 1), 1);
    TH_REQUIRE(init);
    if (pre)
        init[nb - 1] = want[nb - 1] = 1;
    uint8_t *d_dirty = kt_dev_dup(init, (size_t)(nb ? nb : 1));
    struct kern_mark_rows_args a = {.idx = d_ids, .idx_dtype = i64 ? KERN_I64 : KERN_I32, .n = n, .rows = rows,
                                    .block_rows = block, .dirty = d_dirty};
    TH_EQ_ST(kt_be.i->mark_rows(kt_be.ctx, &a, 1), TR_OK);
    TH_EQ_ST(kt_be.i->synchronize(kt_be.ctx), TR_OK);
    kt_d2h(got, d_dirty, (size_t)(nb ? nb : 1));
    TH_CHECKF(memcmp(got, want, (size_t)nb) == 0, "mark_rows rows=%lld block=%lld n=%lld %s: bitmap differs",
              (long long)rows, (long long)block, (long long)n, i64 ? "i64" : "i32");
    kt_dev_release(d_ids, ib);
    kt_dev_release(d_dirty, (size_t)(nb ? nb : 1));
    tr_free(ids);
    tr_free(ids32);
    tr_free(want);
    tr_free(got);
    tr_free(init);
}

static void shapes(void)
{
    static const int64_t cases[][3] = {{1, 1, 1}, {10, 3, 50}, {1000, 64, 4096}, {1000, 1000, 10}, {999, 7, 333},
                                       {100000, 4096, 20000}, {5, 2, 0}};
    for (size_t k = 0; k < TR_ARRAY_SIZE(cases); k++)
        for (int i64 = 0; i64 < 2; i64++)
            mark_case(cases[k][0], cases[k][1], cases[k][2], i64, 17 + k);
}

/* Two tables in one call, each with its own bitmap; ids by hand. */
static void two_tables(void)
{
    const int32_t a_ids[] = {0, 9, 9, 4}, b_ids[] = {3, 99, -1};
    uint8_t z[4] = {0}, ga[4], gb[4];
    void *da = kt_dev_dup(a_ids, sizeof a_ids), *db = kt_dev_dup(b_ids, sizeof b_ids);
    uint8_t *ba = kt_dev_dup(z, 4), *bb = kt_dev_dup(z, 4);
    struct kern_mark_rows_args a[2] = {
        {.idx = da, .idx_dtype = KERN_I32, .n = 4, .rows = 10, .block_rows = 3, .dirty = ba},
        {.idx = db, .idx_dtype = KERN_I32, .n = 3, .rows = 8, .block_rows = 2, .dirty = bb},
    };
    TH_EQ_ST(kt_be.i->mark_rows(kt_be.ctx, a, 2), TR_OK);
    TH_EQ_ST(kt_be.i->synchronize(kt_be.ctx), TR_OK);
    kt_d2h(ga, ba, 4);
    kt_d2h(gb, bb, 4);
    const uint8_t wa[4] = {1, 1, 0, 1}, wb[4] = {0, 1, 0, 0}; /* 99 and -1 are outside table b */
    TH_CHECK(memcmp(ga, wa, 4) == 0);
    TH_CHECK(memcmp(gb, wb, 4) == 0);
    /* argument errors write nothing */
    struct kern_mark_rows_args bad = a[0];
    bad.block_rows = 0;
    TH_EQ_ST(kt_be.i->mark_rows(kt_be.ctx, &bad, 1), TR_ERR_ARG);
    bad = a[0];
    bad.idx_dtype = KERN_F32;
    TH_EQ_ST(kt_be.i->mark_rows(kt_be.ctx, &bad, 1), TR_ERR_ARG);
    kt_d2h(ga, ba, 4);
    TH_CHECK(memcmp(ga, wa, 4) == 0);
    kt_dev_release(da, sizeof a_ids);
    kt_dev_release(db, sizeof b_ids);
    kt_dev_release(ba, 4);
    kt_dev_release(bb, 4);
}

int main(int argc, char **argv)
{
    static const struct th_case cases[] = {
        {"shapes", shapes},
        {"two_tables", two_tables},
    };
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
