/* test_multihot.c: multi-hot features through the data path, on values written
 * here byte by byte: the batch block's layout with bags (worked out by hand), its
 * checks and copies; FeatureSpec hotness (fixed, variable with per-sample
 * lengths, format_version 2) read, refused and written back; the split-binary
 * reader's bags for ranges and shuffled rows; the synthetic source's bags (the
 * one-hot id first, fixed and variable lengths). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/batch.h"
#include "../../../loader_svc/dataset.h"
#include "../../../loader_svc/feature_spec.h"
#include "../../../loader_svc/synth.h"

/* ---- the block ------------------------------------------------------------------ */

static void block_layout(void)
{
    /* 3 samples, 2 features (ld 8), tables: one-hot, hotness 4, one-hot:
     * header 128, bag table 3 * 32 = 96 -> 128, numerical 3*8*4 = 96 -> 128,
     * labels 12 -> 64, ids (3 + 12 + 3) * 4 = 72 -> 128, offsets of table 1:
     * 4 * 8 = 32 -> 64 */
    const int32_t hot[3] = {0, 4, 0};
    TH_EQ(batch_bytes(3, 2, 3, hot), 128 + 128 + 128 + 64 + 128 + 64);
    TH_EQ(batch_bytes(3, 2, 3, NULL), 128 + 128 + 64 + 64); /* one-hot: version 2's layout */
    const int32_t zero[3] = {0, 0, 0};
    TH_EQ(batch_bytes(3, 2, 3, zero), batch_bytes(3, 2, 3, NULL));
    const int32_t neg[3] = {0, -1, 0}, big[3] = {0, BATCH_MAX_HOT + 1, 0};
    TH_EQ(batch_bytes(3, 2, 3, neg), -1);
    TH_EQ(batch_bytes(3, 2, 3, big), -1);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(3, 2, 3, hot, &b), TR_OK);
    TH_EQ(b->off_bags, 128);
    TH_EQ(b->off_num, 256);
    TH_EQ(b->off_labels, 384);
    TH_EQ(b->off_cat, 448);
    const struct batch_bag *g = batch_bags(b);
    TH_REQUIRE(g);
    TH_EQ(g[0].ids, 448);
    TH_EQ(g[1].ids, 448 + 12);
    TH_EQ(g[2].ids, 448 + 12 + 48);
    TH_EQ(g[0].offsets, 0);
    TH_EQ(g[1].offsets, 576);
    TH_EQ(g[2].offsets, 0);
    TH_EQ(g[1].hot, 4);
    TH_EQ(batch_hot(b, 1), 4);
    TH_CHECK(batch_offsets(b, 0) == NULL && batch_offsets(b, 1) != NULL);
    TH_EQ((uintptr_t)batch_offsets(b, 1) & 63, 0);
    TH_EQ(b->bytes, 640);
    TH_EQ_ST(batch_check(b, b->bytes, "test"), TR_OK);
    /* a header and bag table made without a block agree with the block */
    struct batch hdr;
    struct batch_bag bags[3];
    TH_EQ(batch_layout(3, 2, 3, hot, &hdr, bags), 640);
    TH_CHECK(hdr.off_bags == b->off_bags && hdr.off_cat == b->off_cat && !memcmp(bags, g, sizeof bags));
    TH_EQ_ST(batch_check_parts(&hdr, bags, 640, "parts"), TR_OK);
    TH_EQ_ST(batch_check_parts(&hdr, NULL, 640, "parts"), TR_ERR_FORMAT); /* the bag table is needed */
    batch_free(&b);
}

/* A bag table that disagrees with the layout it implies is refused. */
static void block_damaged(void)
{
    const int32_t hot[2] = {3, 0};
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 1, 2, hot, &b), TR_OK);
    b->n = 2;
    batch_bags(b)[0].nids = 6;
    TH_EQ_ST(batch_check(b, b->bytes, "test"), TR_OK);
    const struct batch_bag good = batch_bags(b)[0];
    static const char *const what[] = {"hot", "ids", "offsets", "nids", "hot of a one-hot", "short"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(what); i++) {
        struct batch_bag *g = batch_bags(b);
        int64_t avail = b->bytes;
        switch (i) {
        case 0: g[0].hot = 2; break;         /* another layout than the sizes say */
        case 1: g[0].ids += 4; break;
        case 2: g[0].offsets = 0; break;     /* a multi-hot table without offsets */
        case 3: g[0].nids = 7; break;        /* 2 samples of at most 3 ids */
        case 4: g[1].hot = 1; break;
        case 5: avail = 150; break;          /* the bag table is cut */
        }
        TH_CHECKF(batch_check(b, avail, what[i]) == TR_ERR_FORMAT, "a damaged %s was accepted", what[i]);
        g[0] = good;
        g[1].hot = 0;
    }
    batch_free(&b);
}

/* Samples copied by range and by rows keep their bags; offsets that are not bags
 * are refused. */
static void block_copy(void)
{
    const int32_t hot[2] = {0, 3};
    struct batch *a = NULL, *b = NULL, *c = NULL;
    TH_EQ_ST_REQ(batch_new(5, 1, 2, hot, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(8, 1, 2, hot, &b), TR_OK);
    TH_EQ_ST_REQ(batch_new(8, 1, 2, NULL, &c), TR_OK);
    /* bags of 2, 0, 3, 1, 3 ids */
    static const int64_t off[6] = {0, 2, 2, 5, 6, 9};
    static const int32_t ids[9] = {10, 11, 20, 21, 22, 30, 40, 41, 42};
    a->n = 5;
    memcpy(batch_offsets(a, 1), off, sizeof off);
    memcpy(batch_ids(a, 1), ids, sizeof ids);
    batch_bags(a)[1].nids = 9;
    for (int i = 0; i < 5; i++)
        batch_ids(a, 0)[i] = 100 + i;
    TH_EQ_ST(batch_copy_samples(b, a, 1, NULL, 3), TR_OK); /* samples 1, 2, 3 */
    TH_EQ(b->n, 3);
    const int64_t *o = batch_offsets(b, 1);
    TH_CHECK(o[0] == 0 && o[1] == 0 && o[2] == 3 && o[3] == 4);
    TH_EQ(batch_bags(b)[1].nids, 4);
    TH_CHECK(batch_ids(b, 1)[0] == 20 && batch_ids(b, 1)[2] == 22 && batch_ids(b, 1)[3] == 30);
    TH_EQ(batch_ids(b, 0)[0], 101);
    const int64_t rows[3] = {4, 0, 2};
    TH_EQ_ST(batch_copy_samples(b, a, 0, rows, 3), TR_OK);
    o = batch_offsets(b, 1);
    TH_CHECK(o[0] == 0 && o[1] == 3 && o[2] == 5 && o[3] == 8);
    static const int32_t want[8] = {40, 41, 42, 10, 11, 20, 21, 22};
    TH_CHECK(!memcmp(batch_ids(b, 1), want, sizeof want));
    TH_CHECK(batch_ids(b, 0)[0] == 104 && batch_ids(b, 0)[2] == 102);
    /* the same samples through another block of another capacity */
    struct batch *d = NULL;
    TH_EQ_ST_REQ(batch_new(3, 1, 2, hot, &d), TR_OK);
    TH_EQ_ST(batch_copy_samples(d, b, 0, NULL, 3), TR_OK);
    TH_CHECK(batch_same_samples(d, b));
    batch_ids(d, 1)[7] = 0;
    TH_CHECK(!batch_same_samples(d, b));
    TH_EQ_ST(batch_copy_samples(c, a, 0, NULL, 2), TR_ERR_ARG); /* another hotness */
    batch_offsets(a, 1)[3] = 1;                                  /* decreasing: bag 2 of -1 ids */
    TH_EQ_ST(batch_copy_samples(b, a, 0, NULL, 5), TR_ERR_FORMAT);
    batch_offsets(a, 1)[3] = 6; /* bag 2 of 4 ids, hotness 3 */
    TH_EQ_ST(batch_copy_samples(b, a, 0, NULL, 5), TR_ERR_FORMAT);
    batch_free(&a);
    batch_free(&b);
    batch_free(&c);
    batch_free(&d);
}

/* ---- FeatureSpec and split-binary files ------------------------------------------- */

static char tmpdir[256];

static void write_file(const char *rel, const void *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    FILE *fp = fopen(path, "wb");
    TR_ASSERT(fp);
    if (n)
        TR_ASSERT(fwrite(data, 1, n, fp) == n);
    fclose(fp);
}

/* cat_0: fixed hotness 3 (int8); cat_1: variable, up to 4 (int16, uint8 lengths);
 * cat_2: one-hot (int32). 4 train samples, 2 test. */
static const char *mh_yaml = "channel_spec:\n"
                             "  categorical: [cat_0, cat_1, cat_2]\n"
                             "  label: [label]\n"
                             "  numerical: [num_0]\n"
                             "feature_spec:\n"
                             "  cat_0: {cardinality: 10, dtype: int8, hotness: 3}\n"
                             "  cat_1: {cardinality: 300, dtype: int16, hotness: variable, lengths_dtype: uint8, "
                             "max_hotness: 4}\n"
                             "  cat_2: {cardinality: 70000, dtype: int32}\n"
                             "  label: {dtype: bool}\n"
                             "  num_0: {dtype: float16}\n"
                             "metadata: {format_version: 2}\n"
                             "source_spec:\n"
                             "  test:\n"
                             "  - {features: [num_0], files: [test/numerical.bin], type: split_binary}\n"
                             "  - {features: [label], files: [test/label.bin], type: split_binary}\n"
                             "  - {features: [cat_0], files: [test/cat_0.bin], type: split_binary}\n"
                             "  - {features: [cat_1], files: [test/cat_1.bin, test/cat_1_lengths.bin], type: "
                             "split_binary}\n"
                             "  - {features: [cat_2], files: [test/cat_2.bin], type: split_binary}\n"
                             "  train:\n"
                             "  - {features: [num_0], files: [train/numerical.bin], type: split_binary}\n"
                             "  - {features: [label], files: [train/label.bin], type: split_binary}\n"
                             "  - {features: [cat_0], files: [train/cat_0.bin], type: split_binary}\n"
                             "  - {features: [cat_1], files: [train/cat_1.bin, train/cat_1_lengths.bin], type: "
                             "split_binary}\n"
                             "  - {features: [cat_2], files: [train/cat_2.bin], type: split_binary}\n";

static const int8_t c0_train[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2};
static const int16_t c1_train[7] = {100, 200, 1, 2, 3, 299, 7};
static const uint8_t l1_train[4] = {2, 0, 4, 1};
static const int32_t c2_train[4] = {5, 6, 7, 69999};

static void make_dataset(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/tr-mh-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    TR_ASSERT(mkdtemp(tmpdir));
    char p[512];
    snprintf(p, sizeof p, "%s/train", tmpdir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/test", tmpdir);
    mkdir(p, 0755);
    write_file("feature_spec.yaml", mh_yaml, strlen(mh_yaml));
    const uint8_t lab[4] = {1, 0, 1, 1};
    const uint16_t num[4] = {0x3c00, 0x3800, 0, 0xc000};
    write_file("train/label.bin", lab, 4);
    write_file("train/numerical.bin", num, 8);
    write_file("train/cat_0.bin", c0_train, sizeof c0_train);
    write_file("train/cat_1.bin", c1_train, sizeof c1_train);
    write_file("train/cat_1_lengths.bin", l1_train, sizeof l1_train);
    write_file("train/cat_2.bin", c2_train, sizeof c2_train);
    const int8_t c0[6] = {9, 9, 9, 0, 0, 0};
    const int16_t c1[4] = {10, 11, 12, 13};
    const uint8_t l1[2] = {1, 3};
    const int32_t c2[2] = {1, 2};
    write_file("test/label.bin", lab, 2);
    write_file("test/numerical.bin", num, 4);
    write_file("test/cat_0.bin", c0, sizeof c0);
    write_file("test/cat_1.bin", c1, sizeof c1);
    write_file("test/cat_1_lengths.bin", l1, sizeof l1);
    write_file("test/cat_2.bin", c2, sizeof c2);
}

static void remove_dataset(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    TR_ASSERT(system(cmd) == 0);
}

/* What the code under test logs between begin and end (a malloc'd string). */
static int saved_stderr = -1;
static char capture_path[300];

static void capture_begin(void)
{
    snprintf(capture_path, sizeof capture_path, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    TR_ASSERT(fd >= 0 && saved_stderr >= 0);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *fp = fopen(capture_path, "rb");
    TR_ASSERT(fp);
    char *buf = calloc(1, 65536);
    TR_ASSERT(buf);
    size_t got = fread(buf, 1, 65535, fp);
    buf[got] = '\0';
    fclose(fp);
    fputs(buf, stderr);
    return buf;
}

static void spec_read_and_written(void)
{
    make_dataset();
    char path[512];
    snprintf(path, sizeof path, "%s/feature_spec.yaml", tmpdir);
    struct feature_spec fs;
    TH_EQ_ST_REQ(feature_spec_read(path, &fs), TR_OK);
    TH_EQ(fs.format_version, 2);
    TH_EQ(fs.features[0].hotness, 3);
    TH_EQ(fs.features[1].variable, 1);
    TH_EQ(fs.features[1].max_hotness, 4);
    TH_CHECK(fs.features[1].lengths_dtype && !strcmp(fs.features[1].lengths_dtype, "uint8"));
    TH_EQ(fs.features[2].hotness, 0); /* absent: one-hot */
    TH_EQ(fs.features[2].variable, 0);
    struct feature_spec_split sp;
    TH_EQ_ST_REQ(feature_spec_dlrm_split(&fs, "train", &sp), TR_OK);
    TH_CHECK(sp.hot[0] == 3 && sp.hot[1] == 4 && sp.hot[2] == 0);
    TH_CHECK(!sp.variable[0] && sp.variable[1] && !sp.variable[2]);
    TH_EQ(sp.len_size[1], 1);
    TH_CHECK(sp.len_paths[1] && strstr(sp.len_paths[1], "train/cat_1_lengths.bin") && !sp.len_paths[0]);
    feature_spec_split_release(&sp);
    /* written back and read again: the same features */
    snprintf(path, sizeof path, "%s/written.yaml", tmpdir);
    FILE *fp = fopen(path, "w");
    TH_REQUIRE(fp);
    TH_EQ_ST(feature_spec_write(&fs, fp), TR_OK);
    fclose(fp);
    struct feature_spec back;
    TH_EQ_ST_REQ(feature_spec_read(path, &back), TR_OK);
    TH_EQ(back.format_version, 2);
    for (int i = 0; i < 3; i++)
        TH_CHECKF(back.features[i].hotness == fs.features[i].hotness &&
                      back.features[i].variable == fs.features[i].variable &&
                      back.features[i].max_hotness == fs.features[i].max_hotness,
                  "feature %d: hotness %d/%d", i, back.features[i].hotness, fs.features[i].hotness);
    feature_spec_release(&back);
    feature_spec_release(&fs);
    remove_dataset();
}

/* mh_yaml with `from` replaced by `to`, opened as a dataset: its status, and the
 * log names `name` (the feature or file at fault). */
static void refused(const char *from, const char *to, enum tr_status want, const char *name)
{
    char buf[8192];
    const char *at = strstr(mh_yaml, from);
    TR_ASSERT(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - mh_yaml), mh_yaml, to, at + strlen(from));
    write_file("feature_spec.yaml", buf, strlen(buf));
    struct dataset ds;
    capture_begin();
    enum tr_status rc = dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml");
    char *log = capture_end();
    dataset_close(&ds);
    TH_CHECKF(rc == want, "'%s' -> '%s': %s, expected %s", from, to, tr_strerror(rc), tr_strerror(want));
    TH_CHECKF(strstr(log, name) != NULL, "'%s' -> '%s': the error does not name '%s': %s", from, to, name, log);
    free(log);
}

static void specs_refused(void)
{
    make_dataset();
    refused("metadata: {format_version: 2}", "metadata: {}", TR_ERR_FORMAT, "'cat_0' is multi-hot");
    refused("format_version: 2", "format_version: 3", TR_ERR_FORMAT, "format_version 3 is newer");
    refused("hotness: 3", "hotness: many", TR_ERR_FORMAT, "'cat_0'");
    refused("hotness: 3", "hotness: 0", TR_ERR_FORMAT, "'cat_0'");
    refused("hotness: 3", "hotness: 70000", TR_ERR_FORMAT, "'cat_0'");
    refused(", max_hotness: 4", "", TR_ERR_FORMAT, "'cat_1' has hotness 'variable' but no max_hotness");
    refused("lengths_dtype: uint8", "lengths_dtype: float32", TR_ERR_FORMAT, "'cat_1'");
    refused("hotness: 3", "hotness: 3, lengths_dtype: uint8", TR_ERR_FORMAT, "'cat_0'");
    refused("files: [train/cat_1.bin, train/cat_1_lengths.bin]", "files: [train/cat_1.bin]", TR_ERR_FORMAT,
            "chunk of 'cat_1' lists 1 files");
    refused("files: [train/cat_0.bin]", "files: [train/cat_0.bin, train/extra.bin]", TR_ERR_FORMAT,
            "chunk of 'cat_0' lists 2 files");
    refused("num_0: {dtype: float16}", "num_0: {dtype: float16, hotness: 2}", TR_ERR_FORMAT, "'num_0'");
    refused("lengths_dtype: uint8, max_hotness: 4", "lengths_dtype: uint8, max_hotness: 300", TR_ERR_FORMAT,
            "'cat_1' has max_hotness 300");
    /* files: a length above max_hotness, ids that do not add up, a fixed feature's size */
    const uint8_t l_bad[4] = {2, 0, 5, 1};
    write_file("train/cat_1_lengths.bin", l_bad, sizeof l_bad);
    refused("x", "x", TR_ERR_FORMAT, "train/cat_1_lengths.bin': row 2 (sample 2) has length 5");
    write_file("train/cat_1_lengths.bin", l1_train, sizeof l1_train);
    write_file("train/cat_1.bin", c1_train, sizeof c1_train - 2);
    refused("x", "x", TR_ERR_FORMAT, "train/cat_1.bin' has 12 bytes; its lengths");
    write_file("train/cat_1.bin", c1_train, sizeof c1_train);
    write_file("train/cat_0.bin", c0_train, sizeof c0_train - 1);
    refused("x", "x", TR_ERR_FORMAT, "train/cat_0.bin");
    write_file("train/cat_0.bin", c0_train, sizeof c0_train);
    refused("x", "x", TR_OK, ""); /* all mended */
    remove_dataset();
}

static void read_bags(void)
{
    make_dataset();
    struct dataset ds;
    TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
    TH_CHECK(ds.nsamples[BATCH_TRAIN] == 4 && ds.nsamples[BATCH_TEST] == 2);
    TH_CHECK(ds.hot[0] == 3 && ds.hot[1] == 4 && ds.hot[2] == 0);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 1, 3, ds.hot, &b), TR_OK);
    /* samples 1..3 */
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TRAIN, 1, 3, b), TR_OK);
    const int64_t *o0 = batch_offsets(b, 0), *o1 = batch_offsets(b, 1);
    TH_CHECK(o0[0] == 0 && o0[1] == 3 && o0[3] == 9 && batch_bags(b)[0].nids == 9);
    TH_CHECK(batch_ids(b, 0)[0] == 4 && batch_ids(b, 0)[8] == 2);
    TH_CHECK(o1[0] == 0 && o1[1] == 0 && o1[2] == 4 && o1[3] == 5 && batch_bags(b)[1].nids == 5);
    static const int32_t w1[5] = {1, 2, 3, 299, 7};
    TH_CHECK(!memcmp(batch_ids(b, 1), w1, sizeof w1));
    TH_CHECK(batch_ids(b, 2)[0] == 6 && batch_ids(b, 2)[2] == 69999);
    /* shuffled rows: 3, 0, 2 (the sparse index finds each bag) */
    const int64_t rows[3] = {3, 0, 2};
    TH_EQ_ST_REQ(dataset_gather(&ds, BATCH_TRAIN, rows, 3, b), TR_OK);
    o1 = batch_offsets(b, 1);
    TH_CHECK(o1[1] == 1 && o1[2] == 3 && o1[3] == 7);
    static const int32_t w2[7] = {7, 100, 200, 1, 2, 3, 299};
    TH_CHECK(!memcmp(batch_ids(b, 1), w2, sizeof w2));
    TH_CHECK(batch_ids(b, 0)[0] == 0 && batch_ids(b, 0)[3] == 1 && batch_ids(b, 0)[8] == 9);
    TH_EQ_ST(batch_check(b, b->bytes, "read"), TR_OK);
    /* the test split */
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TEST, 0, 2, b), TR_OK);
    TH_CHECK(batch_offsets(b, 1)[2] == 4 && batch_ids(b, 1)[3] == 13 && batch_ids(b, 0)[2] == 9);
    /* a block of another hotness is refused */
    struct batch *one = NULL;
    TH_EQ_ST_REQ(batch_new(4, 1, 3, NULL, &one), TR_OK);
    TH_EQ_ST(dataset_fill(&ds, BATCH_TRAIN, 0, 2, one), TR_ERR_ARG);
    batch_free(&one);
    batch_free(&b);
    dataset_close(&ds);
    remove_dataset();
}

/* ---- the synthetic source ------------------------------------------------------------ */

static void synthetic_bags(void)
{
    static const int64_t rows[3] = {50, 1000, 7};
    const int32_t hot[3] = {0, 5, 2};
    struct synth_cfg one = {11, 3, 3, rows, SYNTH_IDS_POWERLAW, NULL, 0};
    struct synth_cfg fixed = one, var = one;
    fixed.hot = var.hot = hot;
    var.variable = 1;
    struct batch *a = NULL, *f = NULL, *v = NULL, *v2 = NULL;
    TH_EQ_ST_REQ(batch_new(200, 3, 3, NULL, &a), TR_OK);
    TH_EQ_ST_REQ(batch_new(200, 3, 3, hot, &f), TR_OK);
    TH_EQ_ST_REQ(batch_new(200, 3, 3, hot, &v), TR_OK);
    TH_EQ_ST_REQ(batch_new(100, 3, 3, hot, &v2), TR_OK);
    TH_EQ_ST(synth_fill(&one, BATCH_TRAIN, 0, 200, a), TR_OK);
    TH_EQ_ST(synth_fill(&fixed, BATCH_TRAIN, 0, 200, f), TR_OK);
    TH_EQ_ST(synth_fill(&var, BATCH_TRAIN, 0, 200, v), TR_OK);
    TH_EQ_ST(synth_fill(&fixed, BATCH_TRAIN, 0, 200, a), TR_ERR_ARG); /* a one-hot block */
    int first_ok = 1, range_ok = 1, lengths_ok = 1, empty = 0, full = 0, labels_same = 1;
    for (int i = 0; i < 200; i++) {
        labels_same &= batch_labels(f)[i] == batch_labels(a)[i];
        TH_EQ(batch_ids(f, 0)[i], batch_ids(a, 0)[i]); /* a one-hot table stays one-hot */
        for (int t = 1; t < 3; t++) {
            const int64_t *of = batch_offsets(f, t), *ov = batch_offsets(v, t);
            lengths_ok &= of[i + 1] - of[i] == hot[t];
            const int64_t len = ov[i + 1] - ov[i];
            lengths_ok &= len >= 0 && len <= hot[t];
            empty += len == 0;
            full += len == hot[t];
            first_ok &= batch_ids(f, t)[of[i]] == batch_ids(a, t)[i]; /* the one-hot id first */
            if (len)
                first_ok &= batch_ids(v, t)[ov[i]] == batch_ids(a, t)[i];
            for (int64_t k = of[i]; k < of[i + 1]; k++)
                range_ok &= batch_ids(f, t)[k] >= 0 && batch_ids(f, t)[k] < rows[t];
        }
    }
    TH_CHECK(first_ok && range_ok && lengths_ok && labels_same);
    TH_CHECKF(empty > 10 && full > 10, "variable lengths: %d empty bags, %d full ones of 400", empty, full);
    /* a bag's ids beyond the first are power-law: small ids most frequent */
    int small = 0, n = 0;
    for (int64_t k = 0; k < batch_bags(f)[1].nids; k++)
        if (k % 5) {
            small += batch_ids(f, 1)[k] < 100;
            n++;
        }
    TH_CHECKF(small > n / 2, "%d of %d ids below 100 of 1000 rows", small, n);
    /* any sample is a pure function of its index: samples 100..199 alone match */
    TH_EQ_ST(synth_fill(&var, BATCH_TRAIN, 100, 100, v2), TR_OK);
    struct batch *tail = NULL;
    TH_EQ_ST_REQ(batch_new(100, 3, 3, hot, &tail), TR_OK);
    TH_EQ_ST(batch_copy_samples(tail, v, 100, NULL, 100), TR_OK);
    TH_CHECK(batch_same_samples(tail, v2));
    batch_free(&tail);
    batch_free(&a);
    batch_free(&f);
    batch_free(&v);
    batch_free(&v2);
}

/* Every allocation of opening the multi-hot dataset and reading a shuffled batch
 * made to fail in turn: an error, nothing leaked, never a crash. */
static void alloc_faults(void)
{
    make_dataset();
    int n = 1, done = 0, leaks = 0;
    for (; n < 2000 && !done; n++) {
        struct tr_alloc_stats before, after;
        tr_alloc_get_stats(&before);
        tr_alloc_fail_at(n);
        struct dataset ds;
        struct batch *b = NULL;
        enum tr_status rc = dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml");
        if (rc == TR_OK)
            rc = batch_new(4, 1, 3, ds.hot, &b);
        const int64_t rows[3] = {3, 0, 2};
        if (rc == TR_OK)
            rc = dataset_gather(&ds, BATCH_TRAIN, rows, 3, b);
        const int fired = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        batch_free(&b);
        dataset_close(&ds);
        tr_alloc_get_stats(&after);
        if (after.live_bytes != before.live_bytes && leaks++ < 3)
            printf("# allocation %d failing leaks %lld bytes\n", n, (long long)(after.live_bytes - before.live_bytes));
        if (!fired) {
            TH_EQ_ST(rc, TR_OK);
            done = 1;
        } else {
            TH_CHECKF(rc != TR_OK, "allocation %d failed but the open succeeded", n);
        }
    }
    printf("# %d allocations, each made to fail once\n", n - 2);
    TH_CHECK(done);
    TH_EQ(leaks, 0);
    remove_dataset();
}

static const struct th_case cases[] = {
    {"alloc_faults", alloc_faults},
    {"block_layout", block_layout},
    {"block_damaged", block_damaged},
    {"block_copy", block_copy},
    {"spec_read_and_written", spec_read_and_written},
    {"specs_refused", specs_refused},
    {"read_bags", read_bags},
    {"synthetic_bags", synthetic_bags},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
