/* test_source.c: the in-process reader behind the source interface: the training
 * split in batches of batch_size in order, wrapping into the next epoch (the
 * partial last batch and --drop_last are tested on files in test_split_binary);
 * with --shuffle_samples every epoch a different order of the same samples, the
 * same for the same seed, resumable at any position; --shuffle_batches permutes
 * whole batches; --start_position starts where an uninterrupted run would be;
 * every batch carries its (epoch, index) and seed; the test split in batches of its own size (a
 * partial last batch is tested on files in test_split_binary); positions that
 * resume the same sequence (tell, seek); the
 * data equal to the dataset's own samples; a dataset smaller than one batch
 * refused. */
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/source.h"
#include "../../../loader_svc/synth.h"

static int64_t rows3[3] = {100, 7, 1000};

static void job(struct job_cfg *j, int64_t batch, int64_t test_batch)
{
    memset(j, 0, sizeof *j);
    j->dataset_type = JOB_DATA_SYNTHETIC;
    j->rows = (struct tr_i64_list){rows3, 3};
    j->num_numerical = 5;
    j->train_batches = 4;
    j->test_batches = 2;
    j->batch_size = batch;
    j->test_batch_size = test_batch;
    j->seed = 9;
}

static void sequence_and_positions(void)
{
    struct job_cfg j;
    job(&j, 10, 7); /* 40 train samples (4 batches), 14 test samples (batches of 7, 7) */
    struct source s;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ(s.num_features, 5);
    TH_EQ(s.ntables, 3);
    TH_EQ(s.rows[2], 1000);
    TH_EQ(s.nsamples[BATCH_TRAIN], 40);
    TH_EQ(s.nsamples[BATCH_TEST], 14);
    TH_EQ(s.nbatches[BATCH_TRAIN], 4);
    TH_EQ(s.nbatches[BATCH_TEST], 2);
    /* small synthetic splits are kept whole (and served from there: compared below
     * with samples synth_fill makes) */
    TH_EQ(s.cache_bytes, batch_bytes(40, 5, 3, NULL) + batch_bytes(14, 5, 3, NULL));
    struct batch *b = NULL, *ref = NULL;
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &ref), TR_OK);
    struct synth_cfg sc = {9, 5, 3, rows3, SYNTH_IDS_POWERLAW, NULL, 0};
    for (int k = 0; k < 6; k++) { /* one epoch and a half: indices 0 1 2 3 0 1 */
        struct source_pos pos;
        source_tell(&s, &pos);
        TH_EQ(pos.split, BATCH_TRAIN);
        TH_EQ(pos.epoch, k / 4);
        TH_EQ(pos.index, k % 4);
        TH_EQ_ST(source_next(&s, b), TR_OK);
        TH_EQ(b->n, 10);
        TH_EQ(b->index, k % 4);
        TH_EQ(b->split, BATCH_TRAIN);
        TH_EQ_ST(synth_fill(&sc, BATCH_TRAIN, (k % 4) * 10, 10, ref), TR_OK);
        TH_CHECKF(memcmp(batch_num(b), batch_num(ref), (size_t)(b->off_cat - b->off_num)) == 0 &&
                      memcmp(batch_cat(b), batch_cat(ref), 3 * 10 * sizeof(int32_t)) == 0,
                  "batch %d differs from the dataset's samples", k);
    }
    /* an evaluation pass, then back where training was */
    struct source_pos train, test0 = {BATCH_TEST, 0, 0};
    source_tell(&s, &train);
    TH_EQ_ST(source_seek(&s, &test0), TR_OK);
    TH_EQ_ST(source_next(&s, b), TR_OK);
    TH_EQ(b->n, 7);
    TH_EQ(b->split, BATCH_TEST);
    TH_EQ_ST(source_next(&s, b), TR_OK);
    TH_EQ(b->n, 7);
    TH_EQ(b->index, 1);
    TH_EQ_ST(synth_fill(&sc, BATCH_TEST, 7, 7, ref), TR_OK);
    TH_CHECK(memcmp(batch_labels(b), batch_labels(ref), 7 * sizeof(float)) == 0);
    TH_EQ_ST(source_seek(&s, &train), TR_OK);
    TH_EQ_ST(source_next(&s, b), TR_OK);
    TH_EQ(b->index, 2);
    TH_EQ(b->split, BATCH_TRAIN);
    /* positions outside the split are refused */
    struct source_pos bad = {BATCH_TRAIN, 0, 4};
    TH_EQ_ST(source_seek(&s, &bad), TR_ERR_RANGE);
    bad = (struct source_pos){5, 0, 0};
    TH_EQ_ST(source_seek(&s, &bad), TR_ERR_RANGE);
    batch_free(&b);
    batch_free(&ref);
    source_close(&s);
    source_close(&s);
}

static void test_batch_size(void)
{
    struct job_cfg j;
    job(&j, 10, 8); /* --valid_batch_size 8: 2 test batches are 16 samples */
    struct source s;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ(s.nbatches[BATCH_TEST], 2);
    source_close(&s);
    j.test_batch_size = 0;
    j.test_batches = 3; /* 30 test samples in batches of 10 */
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ(s.batch[BATCH_TEST], 10);
    TH_EQ(s.nbatches[BATCH_TEST], 3);
    source_close(&s);
}

static void too_small(void)
{
    struct job_cfg j;
    job(&j, 100, 0); /* 4 x 100 samples... */
    j.train_batches = 0; /* ...of none */
    struct source s;
    TH_EQ_ST(source_open_reader(&s, &j), TR_ERR_ARG);
    source_close(&s);
}

/* Sample number of each row of b: the training sample whose numerical values it
 * holds (the synthetic values are continuous, so they identify a sample). */
static void sample_ids(const struct batch *b, const struct batch *all, int64_t *ids)
{
    for (int64_t k = 0; k < b->n; k++) {
        ids[k] = -1;
        for (int64_t i = 0; i < all->n; i++)
            if (!memcmp(batch_num(b) + k * b->num_ld, batch_num(all) + i * all->num_ld, 5 * sizeof(float)))
                ids[k] = i;
    }
}

/* order[e][j]: the sample served at position j of epoch e (3 epochs of 40). */
static void read_epochs(int64_t seed, int64_t order[3][40])
{
    struct job_cfg j;
    job(&j, 10, 7);
    j.seed = seed;
    j.shuffle_samples = 1;
    struct source s;
    struct batch *b = NULL, *all = NULL;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(batch_new(40, 5, 3, NULL, &all), TR_OK);
    struct synth_cfg sc = {(uint64_t)seed, 5, 3, rows3, SYNTH_IDS_POWERLAW, NULL, 0};
    TH_EQ_ST_REQ(synth_fill(&sc, BATCH_TRAIN, 0, 40, all), TR_OK);
    for (int k = 0; k < 12; k++) {
        TH_EQ_ST_REQ(source_next(&s, b), TR_OK);
        TH_EQ(b->n, 10);
        sample_ids(b, all, &order[k / 4][(k % 4) * 10]);
    }
    /* a position taken mid-way resumes the same batches */
    struct source_pos p = {BATCH_TRAIN, 1, 2};
    int64_t again[10];
    TH_EQ_ST_REQ(source_seek(&s, &p), TR_OK);
    TH_EQ_ST_REQ(source_next(&s, b), TR_OK);
    sample_ids(b, all, again);
    TH_CHECK(memcmp(again, &order[1][20], sizeof again) == 0);
    /* the test split keeps its order */
    struct source_pos t = {BATCH_TEST, 0, 1};
    TH_EQ_ST_REQ(source_seek(&s, &t), TR_OK);
    TH_EQ_ST_REQ(source_next(&s, b), TR_OK);
    struct batch *ref = NULL;
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &ref), TR_OK);
    TH_EQ_ST_REQ(synth_fill(&sc, BATCH_TEST, 7, 7, ref), TR_OK);
    TH_CHECK(memcmp(batch_num(b), batch_num(ref), 7 * (size_t)b->num_ld * sizeof(float)) == 0);
    batch_free(&ref);
    batch_free(&b);
    batch_free(&all);
    source_close(&s);
}

static void shuffled_epochs(void)
{
    int64_t a[3][40], b[3][40];
    read_epochs(9, a);
    for (int e = 0; e < 3; e++) {
        int seen[40] = {0}, moved = 0;
        for (int i = 0; i < 40; i++) {
            TH_CHECKF(a[e][i] >= 0 && a[e][i] < 40, "epoch %d position %d: not a training sample", e, i);
            if (a[e][i] >= 0 && a[e][i] < 40)
                seen[a[e][i]]++;
            moved += a[e][i] != i;
        }
        for (int i = 0; i < 40; i++)
            TH_CHECKF(seen[i] == 1, "epoch %d serves sample %d %d times", e, i, seen[i]);
        TH_CHECKF(moved > 20, "epoch %d: only %d of 40 samples moved", e, moved);
    }
    TH_CHECK(memcmp(a[0], a[1], sizeof a[0]) != 0 && memcmp(a[1], a[2], sizeof a[0]) != 0);
    read_epochs(9, b);
    TH_CHECK(memcmp(a, b, sizeof a) == 0); /* the same seed, the same order */
    read_epochs(10, b);
    TH_CHECK(memcmp(a[0], b[0], sizeof a[0]) != 0); /* another seed, another order */
}

/* file-order batch number of each batch of 3 epochs under --shuffle_batches */
static void shuffled_batches(void)
{
    struct job_cfg j;
    job(&j, 10, 7);
    j.shuffle_batches = 1;
    struct source s;
    struct batch *b = NULL, *ref = NULL;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &ref), TR_OK);
    struct synth_cfg sc = {9, 5, 3, rows3, SYNTH_IDS_POWERLAW, NULL, 0};
    int order[3][4], moved = 0;
    for (int k = 0; k < 12; k++) {
        TH_EQ_ST_REQ(source_next(&s, b), TR_OK);
        TH_EQ(b->epoch, k / 4);
        TH_EQ(b->index, k % 4);
        TH_EQ(b->seed, 9);
        order[k / 4][k % 4] = -1;
        for (int f = 0; f < 4; f++) {
            TH_EQ_ST_REQ(synth_fill(&sc, BATCH_TRAIN, f * 10, 10, ref), TR_OK);
            if (!memcmp(batch_num(b), batch_num(ref), 10 * (size_t)b->num_ld * sizeof(float)))
                order[k / 4][k % 4] = f;
        }
        moved += order[k / 4][k % 4] != k % 4;
    }
    for (int e = 0; e < 3; e++) {
        int seen[4] = {0};
        for (int i = 0; i < 4; i++)
            if (order[e][i] >= 0)
                seen[order[e][i]]++;
        TH_CHECKF(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1,
                  "epoch %d serves batches %d %d %d %d", e, order[e][0], order[e][1], order[e][2], order[e][3]);
    }
    TH_CHECKF(moved >= 4, "only %d of 12 batches away from their file position", moved);
    TH_CHECK(memcmp(order[0], order[1], sizeof order[0]) || memcmp(order[1], order[2], sizeof order[0]));
    batch_free(&b);
    batch_free(&ref);
    source_close(&s);
}

/* --start_position E:B and a step number start where an uninterrupted run is
 * then; past the last batch of an epoch is refused. */
static void start_position(void)
{
    struct job_cfg j;
    job(&j, 10, 7);
    j.shuffle_samples = 1;
    struct source s;
    struct batch *b = NULL, *want = NULL;
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(batch_new(10, 5, 3, NULL, &want), TR_OK);
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    for (int k = 0; k <= 6; k++) /* step 6 = epoch 1, batch 2 */
        TH_EQ_ST_REQ(source_next(&s, want), TR_OK);
    source_close(&s);
    const char *const forms[2] = {"1:2", "6"};
    for (int f = 0; f < 2; f++) {
        j.start_position = (char *)forms[f];
        TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
        TH_EQ_ST_REQ(source_next(&s, b), TR_OK);
        TH_EQ(b->epoch, 1);
        TH_EQ(b->index, 2);
        TH_CHECKF(memcmp(batch_num(b), batch_num(want), 10 * (size_t)b->num_ld * sizeof(float)) == 0 &&
                      memcmp(batch_cat(b), batch_cat(want), 3 * 10 * sizeof(int32_t)) == 0,
                  "--start_position %s: not the batch an uninterrupted run trains at step 6", forms[f]);
        source_close(&s);
    }
    j.start_position = "1:4"; /* 4 batches an epoch: 0..3 */
    TH_EQ_ST(source_open_reader(&s, &j), TR_ERR_ARG);
    source_close(&s);
    j.start_position = "1:x";
    TH_EQ_ST(source_open_reader(&s, &j), TR_ERR_ARG);
    source_close(&s);
    batch_free(&b);
    batch_free(&want);
}

static const struct th_case cases[] = {
    {"shuffled_batches", shuffled_batches},
    {"start_position", start_position},
    {"shuffled_epochs", shuffled_epochs},
    {"sequence_and_positions", sequence_and_positions},
    {"test_batch_size", test_batch_size},
    {"too_small", too_small},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
