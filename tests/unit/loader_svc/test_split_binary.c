/* test_split_binary.c: FeatureSpec reading (the seed's yaml.dump shape, with
 * anchors and aliases), the DLRM checks, the writer round trip, and the
 * split-binary reader on files written byte by byte here: values, dtypes,
 * partial ranges, refusal of files whose sizes disagree, and the numeric guard:
 * NaN/inf numerical values and labels other than 0/1 refused with the file and
 * row named, or (--nonfinite_inputs zero) NaN/inf replaced by 0 and counted. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../kernels/kmath.h"
#include "../../../loader_svc/dataset.h"
#include "../../../loader_svc/feature_spec.h"
#include "../../../loader_svc/source.h"
#include "../../../loader_svc/split_binary.h"

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

static void write_text(const char *rel, const char *text)
{
    write_file(rel, text, strlen(text));
}

/* The shape the seed's yaml.dump produces: sorted keys, an anchor on the
 * numerical list reused by the source spec, flow-style maps. */
static const char *seed_yaml = "channel_spec:\n"
                               "  categorical: [cat_0.bin, cat_1.bin, cat_2.bin]\n"
                               "  label: [label]\n"
                               "  numerical: &id001 [num_0, num_1]\n"
                               "feature_spec:\n"
                               "  cat_0.bin: {cardinality: 5, dtype: int8}\n"
                               "  cat_1.bin: {cardinality: 200, dtype: int16}\n"
                               "  cat_2.bin: {cardinality: 70000, dtype: int32}\n"
                               "  label: {dtype: bool}\n"
                               "  num_0: {dtype: float16}\n"
                               "  num_1: {dtype: float16}\n"
                               "metadata: {}\n"
                               "source_spec:\n"
                               "  test:\n"
                               "  - features: *id001\n"
                               "    files: [test/numerical.bin]\n"
                               "    type: split_binary\n"
                               "  - features: [label]\n"
                               "    files: [test/label.bin]\n"
                               "    type: split_binary\n"
                               "  - {features: [cat_0.bin], files: [test/cat_0.bin], type: split_binary}\n"
                               "  - {features: [cat_1.bin], files: [test/cat_1.bin], type: split_binary}\n"
                               "  - {features: [cat_2.bin], files: [test/cat_2.bin], type: split_binary}\n"
                               "  train:\n"
                               "  - features: *id001\n"
                               "    files: [train/numerical.bin]\n"
                               "    type: split_binary\n"
                               "  - features: [label]\n"
                               "    files: [train/label.bin]\n"
                               "    type: split_binary\n"
                               "  - {features: [cat_0.bin], files: [train/cat_0.bin], type: split_binary}\n"
                               "  - {features: [cat_1.bin], files: [train/cat_1.bin], type: split_binary}\n"
                               "  - {features: [cat_2.bin], files: [train/cat_2.bin], type: split_binary}\n";

/* 3 train samples, 2 test samples */
static void make_dataset(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/tr-sb-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    TR_ASSERT(mkdtemp(tmpdir));
    char p[512];
    snprintf(p, sizeof p, "%s/train", tmpdir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/test", tmpdir);
    mkdir(p, 0755);
    write_text("feature_spec.yaml", seed_yaml);
    const uint8_t lab[3] = {1, 0, 1};
    /* float16: 1.0 = 0x3c00, -2.0 = 0xc000, 0.5 = 0x3800, 0 = 0, 65504 = 0x7bff, 2^-24 = 0x0001 */
    const uint16_t num[6] = {0x3c00, 0xc000, 0x3800, 0x0000, 0x7bff, 0x0001};
    const int8_t c0[3] = {4, 0, 3};
    const int16_t c1[3] = {199, 7, 0};
    const int32_t c2[3] = {69999, 12345, 1};
    write_file("train/label.bin", lab, 3);
    write_file("train/numerical.bin", num, sizeof num);
    write_file("train/cat_0.bin", c0, sizeof c0);
    write_file("train/cat_1.bin", c1, sizeof c1);
    write_file("train/cat_2.bin", c2, sizeof c2);
    write_file("test/label.bin", lab, 2);
    write_file("test/numerical.bin", num, 8);
    write_file("test/cat_0.bin", c0, 2);
    write_file("test/cat_1.bin", c1, 4);
    write_file("test/cat_2.bin", c2, 8);
}

static void remove_dataset(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    TR_ASSERT(system(cmd) == 0);
}

static void read_seed_spec(void)
{
    make_dataset();
    struct feature_spec fs;
    char path[512];
    snprintf(path, sizeof path, "%s/feature_spec.yaml", tmpdir);
    TH_EQ_ST_REQ(feature_spec_read(path, &fs), TR_OK);
    TH_EQ(fs.ncategorical, 3);
    TH_EQ(fs.nnumerical, 2);
    TH_EQ(fs.nlabel, 1);
    TH_EQ(fs.nmappings, 2);
    TH_EQ(fs.nfeatures, 6);
    struct feature_spec_split sp;
    TH_EQ_ST_REQ(feature_spec_dlrm_split(&fs, "train", &sp), TR_OK);
    TH_EQ(sp.ntables, 3);
    TH_EQ(sp.nnumerical, 2);
    TH_EQ(sp.cat_dtype[0], KERN_I8);
    TH_EQ(sp.cat_dtype[1], KERN_I16);
    TH_EQ(sp.cat_dtype[2], KERN_I32);
    TH_EQ(sp.rows[0], 5);
    TH_EQ(sp.rows[1], 200);
    TH_EQ(sp.rows[2], 70000);
    TH_CHECK(strstr(sp.numerical_path, "/train/numerical.bin") != NULL); /* alias resolved */
    TH_CHECK(strstr(sp.cat_paths[2], "/train/cat_2.bin") != NULL);
    feature_spec_split_release(&sp);
    TH_EQ_ST(feature_spec_dlrm_split(&fs, "validation", &sp), TR_ERR_FORMAT);
    /* round trip through the writer */
    char out[512];
    snprintf(out, sizeof out, "%s/written.yaml", tmpdir);
    FILE *fp = fopen(out, "w");
    TH_REQUIRE(fp);
    TH_EQ_ST(feature_spec_write(&fs, fp), TR_OK);
    fclose(fp);
    struct feature_spec fs2;
    TH_EQ_ST_REQ(feature_spec_read(out, &fs2), TR_OK);
    TH_EQ(fs2.ncategorical, 3);
    TH_EQ(fs2.nfeatures, 6);
    TH_EQ(fs2.nmappings, 2);
    TH_EQ_ST_REQ(feature_spec_dlrm_split(&fs2, "test", &sp), TR_OK);
    TH_EQ(sp.rows[1], 200);
    TH_EQ(sp.cat_dtype[1], KERN_I16);
    feature_spec_split_release(&sp);
    feature_spec_release(&fs2);
    feature_spec_release(&fs);
    remove_dataset();
}

static void read_values(void)
{
    make_dataset();
    struct dataset ds;
    TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
    TH_EQ(ds.nsamples[BATCH_TRAIN], 3);
    TH_EQ(ds.nsamples[BATCH_TEST], 2);
    TH_EQ(ds.num_features, 2);
    TH_EQ(ds.ntables, 3);
    TH_EQ(ds.rows[2], 70000);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 2, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TRAIN, 0, 3, b), TR_OK);
    TH_EQ(b->n, 3);
    TH_EQ(b->num_ld, 8);
    TH_CHECK(batch_labels(b)[0] == 1.0f && batch_labels(b)[1] == 0.0f && batch_labels(b)[2] == 1.0f);
    TH_CHECK(batch_num(b)[0] == 1.0f && batch_num(b)[1] == -2.0f);
    TH_CHECK(batch_num(b)[8] == 0.5f && batch_num(b)[9] == 0.0f);
    TH_CHECK(batch_num(b)[16] == 65504.0f && batch_num(b)[17] == 5.9604644775390625e-08f);
    int pad_zero = 1;
    for (int k = 0; k < 3; k++)
        for (int j = 2; j < 8; j++)
            pad_zero &= batch_num(b)[k * 8 + j] == 0.0f;
    TH_CHECK(pad_zero);
    TH_EQ(batch_cat(b)[0], 4); /* int8 */
    TH_EQ(batch_cat(b)[1], 0);
    TH_EQ(batch_cat(b)[2], 3);
    TH_EQ(batch_cat(b)[4 + 0], 199); /* int16 */
    TH_EQ(batch_cat(b)[4 + 1], 7);
    TH_EQ(batch_cat(b)[4 + 2], 0);
    TH_EQ(batch_cat(b)[8 + 0], 69999); /* int32 */
    TH_EQ(batch_cat(b)[8 + 1], 12345);
    TH_EQ(batch_cat(b)[8 + 2], 1);
    /* a range in the middle, and the test split */
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TRAIN, 1, 2, b), TR_OK);
    TH_EQ(b->n, 2);
    TH_CHECK(batch_labels(b)[0] == 0.0f);
    TH_EQ(batch_cat(b)[8], 12345);
    TH_CHECK(batch_num(b)[0] == 0.5f);
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TEST, 0, 2, b), TR_OK);
    TH_CHECK(batch_labels(b)[1] == 0.0f);
    TH_EQ(batch_cat(b)[4 + 1], 7);
    TH_EQ_ST(dataset_fill(&ds, BATCH_TEST, 1, 2, b), TR_ERR_ARG); /* past the end */
    batch_free(&b);
    dataset_close(&ds);
    remove_dataset();
}

/* The source interface over these files: 3 training samples in batches of 2 is
 * one batch (the partial one is dropped, every epoch); 2 test samples in batches
 * of 3 is one partial batch. */
static void source_over_files(void)
{
    make_dataset();
    struct job_cfg j;
    memset(&j, 0, sizeof j);
    j.dataset_type = JOB_DATA_SPLIT_BINARY;
    j.dataset_path = tmpdir;
    j.feature_spec = "feature_spec.yaml";
    j.batch_size = 2;
    j.test_batch_size = 3;
    struct source s;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ(s.nbatches[BATCH_TRAIN], 2); /* 3 samples: a batch of 2 and the last one of 1 */
    TH_EQ(s.nbatches[BATCH_TEST], 1);
    TH_EQ(s.rows[1], 200);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(3, 2, 3, NULL, &b), TR_OK);
    TH_EQ_ST(source_next(&s, b), TR_OK);
    TH_EQ(b->n, 2);
    TH_EQ(batch_cat(b)[2 * 3 + 1], 12345);
    TH_EQ_ST(source_next(&s, b), TR_OK); /* the partial batch is trained */
    TH_EQ(b->n, 1);
    TH_EQ(b->index, 1);
    TH_EQ(batch_cat(b)[2 * 3 + 0], 1);
    TH_EQ(batch_cat(b)[1 * 3 + 0], 0);
    struct source_pos pos;
    source_tell(&s, &pos);
    TH_EQ(pos.epoch, 1);
    TH_EQ(pos.index, 0);
    TH_EQ_ST(source_next(&s, b), TR_OK); /* the second epoch starts over */
    TH_EQ(batch_cat(b)[2 * 3 + 0], 69999);
    struct source_pos test0 = {BATCH_TEST, 0, 0};
    TH_EQ_ST(source_seek(&s, &test0), TR_OK);
    TH_EQ_ST(source_next(&s, b), TR_OK);
    TH_EQ(b->n, 2);
    TH_EQ(b->split, BATCH_TEST);
    TH_CHECK(batch_labels(b)[1] == 0.0f);
    TH_EQ(batch_cat(b)[3 + 1], 7);
    source_close(&s);
    j.drop_last = 1; /* the seed's rule: one batch of 2, the third sample never trained */
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ(s.nbatches[BATCH_TRAIN], 1);
    TH_EQ_ST(source_next(&s, b), TR_OK);
    source_tell(&s, &pos);
    TH_EQ(pos.epoch, 1);
    source_close(&s);
    j.batch_size = 4; /* more than the 3 training samples: one partial batch, or none under --drop_last */
    TH_EQ_ST(source_open_reader(&s, &j), TR_ERR_ARG);
    source_close(&s);
    j.drop_last = 0;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ(s.nbatches[BATCH_TRAIN], 1);
    source_close(&s);
    batch_free(&b);
    remove_dataset();
}

/* sb_gather: samples in the order asked, every dtype; an index outside refused. */
static void gather_rows(void)
{
    make_dataset();
    struct dataset ds;
    TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 2, 3, NULL, &b), TR_OK);
    const int64_t rows[4] = {2, 0, 2, 1};
    TH_EQ_ST_REQ(dataset_gather(&ds, BATCH_TRAIN, rows, 4, b), TR_OK);
    TH_EQ(b->n, 4);
    const int32_t want[3][4] = {{3, 4, 3, 0}, {0, 199, 0, 7}, {1, 69999, 1, 12345}};
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < 4; k++)
            TH_EQ(batch_cat(b)[t * 4 + k], want[t][k]);
    TH_CHECK(batch_labels(b)[0] == 1.0f && batch_labels(b)[1] == 1.0f && batch_labels(b)[3] == 0.0f);
    TH_CHECK(batch_num(b)[0] == 65504.0f && batch_num(b)[1] == 0x1p-24f);     /* sample 2 */
    TH_CHECK(batch_num(b)[8] == 1.0f && batch_num(b)[9] == -2.0f);            /* sample 0 */
    TH_CHECK(batch_num(b)[3 * 8] == 0.5f && batch_num(b)[3 * 8 + 1] == 0.0f); /* sample 1 */
    const int64_t bad[2] = {0, 3};
    TH_EQ_ST(dataset_gather(&ds, BATCH_TRAIN, bad, 2, b), TR_ERR_ARG);
    const int64_t neg[1] = {-1};
    TH_EQ_ST(dataset_gather(&ds, BATCH_TEST, neg, 1, b), TR_ERR_ARG);
    batch_free(&b);
    dataset_close(&ds);
    remove_dataset();
}

static void size_mismatch_refused(void)
{
    make_dataset();
    const int16_t c1[2] = {1, 2}; /* train has 3 samples; 2 written */
    write_file("train/cat_1.bin", c1, sizeof c1);
    struct dataset ds;
    TH_EQ_ST(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_ERR_FORMAT);
    dataset_close(&ds);
    remove_dataset();
    make_dataset();
    const uint16_t num[5] = {0};
    write_file("train/numerical.bin", num, sizeof num); /* 3 x 2 halves expected */
    TH_EQ_ST(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_ERR_FORMAT);
    dataset_close(&ds);
    remove_dataset();
    make_dataset();
    char p[512];
    snprintf(p, sizeof p, "%s/test/cat_0.bin", tmpdir);
    unlink(p);
    TH_EQ_ST(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_ERR_IO);
    dataset_close(&ds);
    TH_EQ_ST(dataset_open_split_binary(&ds, "/nonexistent-dir", "feature_spec.yaml"), TR_ERR_ARG); /* exit 2 */
    dataset_close(&ds);
    remove_dataset();
}

/* replace the first occurrence of `from` in the seed yaml by `to` and read it */
static enum tr_status read_edited(const char *from, const char *to)
{
    char buf[8192];
    const char *at = strstr(seed_yaml, from);
    TR_ASSERT(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - seed_yaml), seed_yaml, to, at + strlen(from));
    write_text("feature_spec.yaml", buf);
    struct dataset ds;
    enum tr_status rc = dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml");
    dataset_close(&ds);
    return rc;
}

static void bad_specs_refused(void)
{
    make_dataset();
    TH_EQ_ST(read_edited("cardinality: 5, dtype: int8", "cardinality: 5, dtype: float32"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("cardinality: 5, ", ""), TR_ERR_FORMAT); /* no cardinality */
    TH_EQ_ST(read_edited("cardinality: 5,", "cardinality: -5,"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("label: {dtype: bool}", "label: {dtype: int8}"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("label: [label]", "label: [label, num_0]"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("files: [train/cat_1.bin], type: split_binary", "files: [train/cat_1.bin], type: parquet"),
             TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("files: [train/cat_2.bin]", "files: [train/cat_2.bin, x.bin]"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("  train:\n", "  training:\n"), TR_ERR_FORMAT); /* no train split */
    TH_EQ_ST(read_edited("channel_spec:\n", "channel_spec: [\n"), TR_ERR_FORMAT); /* yaml syntax */
    TH_EQ_ST(read_edited("source_spec:\n", "source_spec: 3\nx:\n"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("  train:\n  - features: *id001", "  train:\n  - features: [num_1, num_0]"),
             TR_ERR_FORMAT); /* numerical chunk order differs from the channel */
    TH_EQ_ST(read_edited("  train:\n  - features: *id001", "  train:\n  - features: [num_0]"),
             TR_ERR_FORMAT); /* a numerical feature missing from the chunk */
    remove_dataset();
}

/* ---- numeric guard ------------------------------------------------------------- */

/* What the code under test writes to stderr (the log) between begin and end:
 * returned by end as a malloc'd string (test code). */
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
    fputs(buf, stderr); /* still visible in the test log */
    return buf;
}

/* train/numerical.bin of make_dataset with `bad` written at sample `row`, feature `col`. */
static void poke_numerical(int row, int col, uint16_t bad)
{
    uint16_t num[6] = {0x3c00, 0xc000, 0x3800, 0x0000, 0x7bff, 0x0001};
    num[row * 2 + col] = bad;
    write_file("train/numerical.bin", num, sizeof num);
}

/* NaN, +inf and -inf at each row are refused with the file, the row and the
 * feature named, also when the batch starts after row 0. */
static void nonfinite_refused(void)
{
    const uint16_t bad[3] = {0x7e00 /* NaN */, 0x7c00 /* +inf */, 0xfc00 /* -inf */};
    const char *const name[3] = {"NaN", "+inf", "-inf"};
    make_dataset();
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 2, 3, NULL, &b), TR_OK);
    for (int row = 0; row < 3; row++) {
        for (int k = 0; k < 3; k++) {
            poke_numerical(row, row & 1, bad[k]);
            struct dataset ds;
            TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
            capture_begin();
            enum tr_status rc = dataset_fill(&ds, BATCH_TRAIN, 0, 3, b);
            char *log = capture_end();
            TH_EQ_ST(rc, TR_ERR_FORMAT);
            char want[128];
            snprintf(want, sizeof want, "train/numerical.bin': row %d (sample %d), numerical feature %d of 2 is %s",
                     row, row, row & 1, name[k]);
            TH_CHECKF(strstr(log, want) != NULL, "row %d %s: the log lacks \"%s\": %s", row, name[k], want, log);
            TH_CHECKF(strstr(log, "--nonfinite_inputs zero") != NULL, "no hint naming the option: %s", log);
            free(log);
            if (row > 0) { /* the row is the sample index in the file, not in the batch */
                capture_begin();
                rc = dataset_fill(&ds, BATCH_TRAIN, row, 1, b);
                log = capture_end();
                TH_EQ_ST(rc, TR_ERR_FORMAT);
                TH_CHECKF(strstr(log, want) != NULL, "fill from row %d: the log lacks \"%s\": %s", row, want, log);
                free(log);
                TH_EQ_ST(dataset_fill(&ds, BATCH_TRAIN, 0, row, b), TR_OK); /* rows before it are fine */
            }
            TH_EQ(ds.nonfinite_replaced[BATCH_TRAIN], 0);
            dataset_close(&ds);
        }
    }
    batch_free(&b);
    remove_dataset();
}

/* With SB_NONFINITE_ZERO the values become 0, everything else is as read, and the
 * count grows with every batch that holds one. */
static void nonfinite_zeroed_and_counted(void)
{
    make_dataset();
    uint16_t num[6] = {0x3c00, 0x7e00, 0x3800, 0x0000, 0xfc00, 0x7c00};
    write_file("train/numerical.bin", num, sizeof num);
    struct dataset ds;
    TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
    dataset_set_nonfinite(&ds, SB_NONFINITE_ZERO);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 2, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TRAIN, 0, 3, b), TR_OK);
    const float *x = batch_num(b);
    TH_CHECKF(x[0] == 1.0f && x[1] == 0.0f && x[8] == 0.5f && x[9] == 0.0f && x[16] == 0.0f && x[17] == 0.0f,
              "zeroed batch: %g %g | %g %g | %g %g", (double)x[0], (double)x[1], (double)x[8], (double)x[9],
              (double)x[16], (double)x[17]);
    TH_CHECK(!signbit(x[16])); /* -inf became +0 */
    TH_EQ(ds.nonfinite_replaced[BATCH_TRAIN], 3);
    TH_EQ(ds.nonfinite_replaced[BATCH_TEST], 0);
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TRAIN, 2, 1, b), TR_OK);
    TH_EQ(ds.nonfinite_replaced[BATCH_TRAIN], 5);
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TEST, 0, 2, b), TR_OK); /* the test split is clean */
    TH_EQ(ds.nonfinite_replaced[BATCH_TEST], 0);
    dataset_close(&ds);

    /* the same through the source and --nonfinite_inputs zero (JOB_NONFINITE_ZERO) */
    struct job_cfg j;
    memset(&j, 0, sizeof j);
    j.dataset_type = JOB_DATA_SPLIT_BINARY;
    j.dataset_path = tmpdir;
    j.feature_spec = "feature_spec.yaml";
    j.batch_size = 3;
    j.nonfinite_inputs = JOB_NONFINITE_ZERO;
    struct source s;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_REQUIRE(s.nonfinite_replaced != NULL);
    TH_EQ_ST(source_next(&s, b), TR_OK);
    TH_EQ(s.nonfinite_replaced[BATCH_TRAIN], 3);
    source_close(&s);
    j.nonfinite_inputs = JOB_NONFINITE_ERROR;
    TH_EQ_ST_REQ(source_open_reader(&s, &j), TR_OK);
    TH_EQ_ST(source_next(&s, b), TR_ERR_FORMAT);
    source_close(&s);
    batch_free(&b);
    remove_dataset();
}

/* A label byte other than 0 or 1 is refused whatever the non-finite policy. */
static void bad_label_refused(void)
{
    make_dataset();
    const uint8_t lab[3] = {1, 0, 2};
    write_file("train/label.bin", lab, 3);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 2, 3, NULL, &b), TR_OK);
    for (int policy = 0; policy < 2; policy++) {
        struct dataset ds;
        TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
        dataset_set_nonfinite(&ds, policy ? SB_NONFINITE_ZERO : SB_NONFINITE_ERROR);
        capture_begin();
        enum tr_status rc = dataset_fill(&ds, BATCH_TRAIN, 0, 3, b);
        char *log = capture_end();
        TH_EQ_ST(rc, TR_ERR_FORMAT);
        TH_CHECKF(strstr(log, "train/label.bin': row 2 (sample 2) holds label 2") != NULL, "policy %d: %s", policy,
                  log);
        free(log);
        TH_EQ_ST(dataset_fill(&ds, BATCH_TRAIN, 0, 2, b), TR_OK);
        dataset_close(&ds);
    }
    batch_free(&b);
    remove_dataset();
}

/* A spec naming one file, feature or split twice loses an input silently unless
 * it is refused. Each edit below is checked to be the only change: the spec as
 * written reads (read_seed_spec). */
static void duplicates_refused(void)
{
    make_dataset();
    TH_EQ_ST(read_edited("", ""), TR_OK); /* the unedited spec loads */
    /* cat_1's chunk reads cat_0's file */
    TH_EQ_ST(read_edited("files: [train/cat_1.bin]", "files: [train/cat_0.bin]"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("files: [train/cat_1.bin]", "files: [./train/cat_0.bin]"), TR_ERR_FORMAT);
    /* one feature name twice in feature_spec */
    TH_EQ_ST(read_edited("  num_1: {dtype: float16}\n", "  num_1: {dtype: float16}\n  num_0: {dtype: float16}\n"),
             TR_ERR_FORMAT);
    /* a feature in two channels, and twice in one */
    TH_EQ_ST(read_edited("label: [label]", "label: [cat_0.bin]"), TR_ERR_FORMAT);
    TH_EQ_ST(read_edited("categorical: [cat_0.bin, cat_1.bin, cat_2.bin]",
                         "categorical: [cat_0.bin, cat_1.bin, cat_2.bin, cat_1.bin]"),
             TR_ERR_FORMAT);
    /* a feature in two chunks of one split */
    TH_EQ_ST(read_edited("{features: [cat_1.bin], files: [train/cat_1.bin]",
                         "{features: [cat_0.bin], files: [train/cat_1.bin]"),
             TR_ERR_FORMAT);
    /* a split twice */
    TH_EQ_ST(read_edited("  train:\n", "  test:\n"), TR_ERR_FORMAT);
    remove_dataset();
}

/* A short label.bin is refused (which file the message blames is checked by
 * tests/integration/t0002-bad-input.sh). */
static void truncated_label_refused(void)
{
    make_dataset();
    char p[600];
    snprintf(p, sizeof p, "%s/train/label.bin", tmpdir);
    TH_REQUIRE(truncate(p, 2) == 0); /* 3 samples -> 2 */
    struct dataset ds;
    TH_EQ_ST(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_ERR_FORMAT);
    dataset_close(&ds);
    remove_dataset();
}

static void dtype_rule(void)
{
    TH_EQ(feature_spec_cat_dtype(1), KERN_I8);
    TH_EQ(feature_spec_cat_dtype(126), KERN_I8);
    TH_EQ(feature_spec_cat_dtype(127), KERN_I16); /* strict < iinfo(int8).max */
    TH_EQ(feature_spec_cat_dtype(32766), KERN_I16);
    TH_EQ(feature_spec_cat_dtype(32767), KERN_I32);
    TH_EQ(feature_spec_cat_dtype(2147483646), KERN_I32);
}

/* A file truncated or rewritten in place after the split was opened: the next
 * fill refuses, naming the file and its sizes, instead of faulting on the map. */
static void changed_during_run(void)
{
    make_dataset();
    struct dataset ds;
    TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
    struct batch *b = NULL;
    TH_EQ_ST_REQ(batch_new(4, 2, 3, NULL, &b), TR_OK);
    TH_EQ_ST_REQ(dataset_fill(&ds, BATCH_TRAIN, 0, 3, b), TR_OK);
    char p[512];
    snprintf(p, sizeof p, "%s/train/cat_2.bin", tmpdir);
    TH_REQUIRE(truncate(p, 8) == 0);
    capture_begin();
    enum tr_status rc = dataset_fill(&ds, BATCH_TRAIN, 0, 1, b);
    char *log = capture_end();
    TH_EQ_ST(rc, TR_ERR_IO);
    TH_CHECKF(strstr(log, "train/cat_2.bin' changed during the run: it now ends at byte 8, it had 12 bytes") != NULL,
              "log: %s", log);
    free(log);
    dataset_close(&ds);
    /* the same size, rewritten: caught by the modification time */
    remove_dataset();
    make_dataset();
    TH_EQ_ST_REQ(dataset_open_split_binary(&ds, tmpdir, "feature_spec.yaml"), TR_OK);
    struct timespec later[2] = {{0, UTIME_OMIT}, {0, 0}};
    clock_gettime(CLOCK_REALTIME, &later[1]);
    later[1].tv_sec += 5;
    snprintf(p, sizeof p, "%s/train/label.bin", tmpdir);
    TH_REQUIRE(utimensat(AT_FDCWD, p, later, 0) == 0);
    capture_begin();
    rc = dataset_fill(&ds, BATCH_TEST, 0, 1, b); /* the test split is untouched */
    TH_EQ_ST(rc, TR_OK);
    rc = dataset_fill(&ds, BATCH_TRAIN, 0, 1, b);
    log = capture_end();
    TH_EQ_ST(rc, TR_ERR_IO);
    TH_CHECKF(strstr(log, "train/label.bin' changed during the run: 3 bytes now, 3 when opened (rewritten in place)") !=
                  NULL,
              "log: %s", log);
    free(log);
    batch_free(&b);
    dataset_close(&ds);
    remove_dataset();
}

static const struct th_case cases[] = {
    {"changed_during_run", changed_during_run},
    {"read_seed_spec", read_seed_spec},
    {"read_values", read_values},
    {"source_over_files", source_over_files},
    {"gather_rows", gather_rows},
    {"size_mismatch_refused", size_mismatch_refused},
    {"bad_specs_refused", bad_specs_refused},
    {"dtype_rule", dtype_rule},
    {"nonfinite_refused", nonfinite_refused},
    {"nonfinite_zeroed_and_counted", nonfinite_zeroed_and_counted},
    {"bad_label_refused", bad_label_refused},
    {"duplicates_refused", duplicates_refused},
    {"truncated_label_refused", truncated_label_refused},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
