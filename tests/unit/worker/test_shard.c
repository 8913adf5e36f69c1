/* test_shard.c: the sharding rules against the seed's documented examples
 * (distribute_to_buckets on Criteo FL=15 for 2 and 8 GPUs, seed spec section
 * 3.2), column ranges with remainders and with more workers than columns, and
 * batch slices. */
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../worker/shard.h"

/* Criteo FL=15 cardinalities, cat_0 .. cat_25 (seed spec section 2.4) */
static const int64_t fl15[26] = {7912889, 33823, 17139, 7339, 20046, 4,      7105,    1382,   63,
                                 5554114, 582469, 245828, 11, 2209,  10667,  104,     4,      968,
                                 15,      8165896, 2675940, 7156453, 302516, 12022, 97, 35};

static int same_list(const struct shard_plan *p, int r, const int *want, int n)
{
    if (shard_nvec(p, r) != n)
        return 0;
    return memcmp(p->vec + p->vstart[r], want, (size_t)n * sizeof(int)) == 0;
}

static void seed_two_gpus(void)
{
    struct shard_plan p;
    /* 2 workers, data-parallel bottom MLP: both ranks hold tables */
    TH_EQ_ST_REQ(shard_plan_make(&p, SHARD_TABLEWISE, 2, 0, 26, fl15, 128, 1, 1), TR_OK);
    const int r0[] = {0, 21, 10, 22, 11, 1, 4, 2, 23, 14, 3, 6, 13};
    const int r1[] = {19, 9, 20, 7, 17, 15, 24, 8, 25, 18, 12, 5, 16};
    TH_CHECK(same_list(&p, 0, r0, 13));
    TH_CHECK(same_list(&p, 1, r1, 13));
    TH_EQ(p.owner[19], 1);
    TH_EQ(p.owner[0], 0);
    shard_plan_release(&p);
}

static void seed_eight_gpus(void)
{
    struct shard_plan p;
    /* 8 workers, model-parallel bottom MLP: rank 0 holds only the bottom MLP */
    TH_EQ_ST_REQ(shard_plan_make(&p, SHARD_TABLEWISE, 8, 3, 26, fl15, 128, 1, 0), TR_OK);
    const int want[8][4] = {{-1}, {22, 11, 1, 4}, {10, 2, 23, 14}, {20, 3, 6, 13},
                            {9, 7, 17, 15}, {21, 24, 8, 25}, {0, 18, 12, 5}, {19, 16}};
    const int n[8] = {1, 4, 4, 4, 4, 4, 4, 2};
    for (int r = 0; r < 8; r++)
        TH_CHECKF(same_list(&p, r, want[r], n[r]), "rank %d", r);
    TH_CHECK(!p.dp_bottom);
    shard_plan_release(&p);
    /* the same with a data-parallel bottom MLP: 8 buckets, no bottom vector */
    TH_EQ_ST_REQ(shard_plan_make(&p, SHARD_TABLEWISE, 8, 0, 26, fl15, 128, 1, 1), TR_OK);
    int total = 0;
    for (int r = 0; r < 8; r++) {
        total += shard_nvec(&p, r);
        TH_CHECK(shard_nvec(&p, r) <= 4); /* ceil(26 / 8) */
    }
    TH_EQ(total, 26);
    shard_plan_release(&p);
    /* 4 workers, model-parallel bottom: rank 0 holds the bottom output and tables */
    TH_EQ_ST_REQ(shard_plan_make(&p, SHARD_TABLEWISE, 4, 0, 26, fl15, 128, 1, 0), TR_OK);
    TH_EQ(p.vec[p.vstart[0]], -1);
    TH_CHECK(shard_nvec(&p, 0) > 1);
    shard_plan_release(&p);
}

static void columns(void)
{
    struct shard_plan p;
    TH_EQ_ST_REQ(shard_plan_make(&p, SHARD_COLUMNWISE, 3, 0, 26, fl15, 16, 1, 1), TR_OK);
    TH_EQ(p.col0[0], 0);
    TH_EQ(p.col1[0], 6);
    TH_EQ(p.col0[1], 6);
    TH_EQ(p.col1[1], 11);
    TH_EQ(p.col1[2], 16);
    shard_plan_release(&p);
    TH_EQ_ST_REQ(shard_plan_make(&p, SHARD_COLUMNWISE, 8, 0, 2, fl15, 5, 0, 0), TR_OK); /* N > D */
    int w[8];
    for (int r = 0; r < 8; r++)
        w[r] = shard_width(&p, r);
    TH_EQ(w[0], 1);
    TH_EQ(w[4], 1);
    TH_EQ(w[5], 0);
    TH_EQ(w[7], 0);
    shard_plan_release(&p);
    /* the seed refuses column-wise with a model-parallel bottom MLP */
    TH_EQ_ST(shard_plan_make(&p, SHARD_COLUMNWISE, 2, 0, 26, fl15, 16, 1, 0), TR_ERR_ARG);
}

static void slices(void)
{
    TH_EQ(shard_slice_start(10, 3, 0), 0);
    TH_EQ(shard_slice_start(10, 3, 1), 4);
    TH_EQ(shard_slice_start(10, 3, 2), 7);
    TH_EQ(shard_slice_start(10, 3, 3), 10);
    TH_EQ(shard_slice_start(2, 4, 3), 2);
    TH_EQ(shard_slice_start(2, 4, 4), 2);
}

static const struct th_case cases[] = {
    {"seed_two_gpus", seed_two_gpus},
    {"seed_eight_gpus", seed_eight_gpus},
    {"columns", columns},
    {"slices", slices},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
