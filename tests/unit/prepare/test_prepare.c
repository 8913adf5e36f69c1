/* test_prepare.c: `terarec data prepare` (prepare_main, in process). The core
 * case writes a six-row Criteo TSV and compares every output file with bytes
 * worked out by hand from the seed's rules (ln(x + 3) as float16, threshold ids
 * by descending count, hash ids int(hex, 16) % M, dtypes by cardinality). Also:
 * the line parser, malformed lines and --strict, exact counting when the tables
 * spill, the shuffle in memory and through buckets, and allocation faults (no
 * crash, no output, no leak). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/file.h"
#include "../../../common/harness.h"
#include "../../../kernels/sort.h"
#include "../../../loader_svc/dataset.h"
#include "../../../loader_svc/feature_spec.h"
#include "../../../prepare/prepare.h"
#include "../../../prepare/prepare_internal.h"

static char tmpdir[256];

static void make_tmpdir_in(const char *base)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/tr-prep-XXXXXX", base);
    TR_ASSERT(mkdtemp(tmpdir));
}

static void make_tmpdir(void)
{
    make_tmpdir_in(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
}

static void remove_tmpdir(void)
{
    TR_ASSERT(tr_file_rm_rf(tmpdir) == TR_OK);
}

static void write_text(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    FILE *fp = fopen(path, "wb");
    TR_ASSERT(fp);
    TR_ASSERT(fwrite(text, 1, strlen(text), fp) == strlen(text));
    fclose(fp);
}

/* Runs prepare_main on a command line (words split at spaces; "@" stands for
 * tmpdir), with stdout (the summary lines) sent to /dev/null. */
static int run(const char *fmt, ...)
{
    char line[2048], expanded[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t k = 0;
    for (const char *p = line; *p && k + 300 < sizeof expanded; p++) {
        if (*p == '@')
            k += (size_t)snprintf(expanded + k, sizeof expanded - k, "%s", tmpdir);
        else
            expanded[k++] = *p;
    }
    expanded[k] = '\0';
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"prepare";
    for (char *tok = strtok(expanded, " "); tok && argc < 63; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    fflush(stdout);
    int saved = dup(1), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    close(null);
    int rc = prepare_main(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    return rc;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    TR_ASSERT(b);
    TR_ASSERT(fread(b, 1, (size_t)len, fp) == (size_t)len);
    fclose(fp);
    *n = (size_t)len;
    return b;
}

/* Compares tmpdir/rel with the expected bytes; prints both on a mismatch. */
static int same_bytes(const char *rel, const uint8_t *want, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    size_t got_n = 0;
    uint8_t *got = slurp(path, &got_n);
    int ok = got && got_n == n && (n == 0 || memcmp(got, want, n) == 0);
    if (!ok) {
        printf("# %s: %zu bytes, expected %zu\n#   got ", rel, got ? got_n : 0, n);
        for (size_t i = 0; got && i < got_n && i < 64; i++)
            printf("%02x ", got[i]);
        printf("\n#  want ");
        for (size_t i = 0; i < n && i < 64; i++)
            printf("%02x ", want[i]);
        printf("\n");
    }
    free(got);
    return ok;
}

/* Compares out/train/<file> and out/test/<file> with the expected bytes. */
static void same_split_bytes(const char *file, const uint8_t *train, size_t ntrain, const uint8_t *test,
                             size_t ntest)
{
    char rel[128];
    snprintf(rel, sizeof rel, "out/train/%s", file);
    TH_CHECKF(same_bytes(rel, train, ntrain), "%s differs", rel);
    snprintf(rel, sizeof rel, "out/test/%s", file);
    TH_CHECKF(same_bytes(rel, test, ntest), "%s differs", rel);
}

static int same_files(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    uint8_t *x = slurp(a, &na), *y = slurp(b, &nb);
    int ok = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return ok;
}

static const char *const files[PREPARE_NCOL] = {
    "label.bin",  "numerical.bin", "cat_0.bin",  "cat_1.bin",  "cat_2.bin",  "cat_3.bin",  "cat_4.bin",
    "cat_5.bin",  "cat_6.bin",     "cat_7.bin",  "cat_8.bin",  "cat_9.bin",  "cat_10.bin", "cat_11.bin",
    "cat_12.bin", "cat_13.bin",    "cat_14.bin", "cat_15.bin", "cat_16.bin", "cat_17.bin", "cat_18.bin",
    "cat_19.bin", "cat_20.bin",    "cat_21.bin", "cat_22.bin", "cat_23.bin", "cat_24.bin", "cat_25.bin",
};

/* Every output file of two directories under tmpdir is identical. */
static int same_outputs(const char *a, const char *b)
{
    int ok = 1;
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < PREPARE_NCOL; c++) {
            char pa[600], pb[600];
            snprintf(pa, sizeof pa, "%s/%s/%s/%s", tmpdir, a, s ? "test" : "train", files[c]);
            snprintf(pb, sizeof pb, "%s/%s/%s/%s", tmpdir, b, s ? "test" : "train", files[c]);
            if (!same_files(pa, pb)) {
                printf("# %s differs from %s\n", pa, pb);
                ok = 0;
            }
        }
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s/feature_spec.yaml", tmpdir, a);
    snprintf(pb, sizeof pb, "%s/%s/feature_spec.yaml", tmpdir, b);
    return ok && same_files(pa, pb);
}

static int exists(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    return stat(path, &st) == 0;
}

/* No "*.tmp-*" directory is left in tmpdir. */
static int no_leftovers(void)
{
    DIR *d = opendir(tmpdir);
    TR_ASSERT(d);
    int ok = 1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp-"))
            ok = 0;
    closedir(d);
    return ok;
}

/* One TSV line: label, I1..I4, I13, C1..C3, C26 as given; every other field empty. */
static void add_row(char *buf, size_t cap, const char *label, const char *i1, const char *i2, const char *i3,
                    const char *i4, const char *i13, const char *c1, const char *c2, const char *c3,
                    const char *c26, const char *eol)
{
    size_t k = strlen(buf);
    k += (size_t)snprintf(buf + k, cap - k, "%s\t%s\t%s\t%s\t%s", label, i1, i2, i3, i4);
    for (int j = 5; j <= 12; j++)
        k += (size_t)snprintf(buf + k, cap - k, "\t");
    k += (size_t)snprintf(buf + k, cap - k, "\t%s\t%s\t%s\t%s", i13, c1, c2, c3);
    for (int c = 4; c <= 25; c++)
        k += (size_t)snprintf(buf + k, cap - k, "\t");
    snprintf(buf + k, cap - k, "\t%s%s", c26, eol);
}

/* The hand-checked input. Rows 1-4 in a.tsv, an empty line and rows 5-6 in b.tsv
 * (row 5 ends in CRLF). all.tsv holds the same six rows in one file.
 *
 *  row label  I1    I2     I3            I4       I13   C1        C2        C3        C26
 *   1    0    -     0      -2            1        -     0000000a  deadBEEF  -         -
 *   2    1    -3    -5     5             1000000  7     0000000a  0000ffff  00000001  -
 *   3    1    2     65535  123456789012  -        -1    0000000b  DEADBEEF  00000001  -
 *   4    0    0     -      -             -        -     0000000b  -         00000002  -
 *   5    0    3     -      -             -        -     0000000a  12345678  00000002  -
 *   6    1    -     -      -             -        100   0000000c  0000ffff  00000001  ffffffff
 */
static void write_hand_input(void)
{
    char a[4096] = "", b[4096] = "";
    add_row(a, sizeof a, "0", "", "0", "-2", "1", "", "0000000a", "deadBEEF", "", "", "\n");
    add_row(a, sizeof a, "1", "-3", "-5", "5", "1000000", "7", "0000000a", "0000ffff", "00000001", "", "\n");
    add_row(a, sizeof a, "1", "2", "65535", "123456789012", "", "-1", "0000000b", "DEADBEEF", "00000001", "", "\n");
    add_row(a, sizeof a, "0", "0", "", "", "", "", "0000000b", "", "00000002", "", "\n");
    strcpy(b, "\n");
    add_row(b, sizeof b, "0", "3", "", "", "", "", "0000000a", "12345678", "00000002", "", "\r\n");
    add_row(b, sizeof b, "1", "", "", "", "", "100", "0000000c", "0000ffff", "00000001", "ffffffff", ""); /* no final LF */
    write_text("a.tsv", a);
    write_text("b.tsv", b);
    char all[8192];
    snprintf(all, sizeof all, "%s%s", a, b);
    write_text("all.tsv", all);
}

/* float16 bits, little-endian byte pairs. ln(x + 3) rounded to float, then to half
 * (10 mantissa bits, round to nearest even): value = 2^e * (1 + m / 1024).
 *   x = 0:      ln 3       = 1.098612  = 2^0 (1 + 100.979/1024)  -> m 101 -> 0x3c65
 *   x = 1:      ln 4       = 1.386294  = 2^0 (1 + 395.565/1024)  -> m 396 -> 0x3d8c
 *   x = 2:      ln 5       = 1.609438  = 2^0 (1 + 624.064/1024)  -> m 624 -> 0x3e70
 *   x = 3:      ln 6       = 1.791759  = 2^0 (1 + 810.762/1024)  -> m 811 -> 0x3f2b
 *   x = 5:      ln 8       = 2.079442  = 2^1 (1 + 40.674/1024)   -> m 41  -> 0x4029
 *   x = 7:      ln 10      = 2.302585  = 2^1 (1 + 154.924/1024)  -> m 155 -> 0x409b
 *   x = 100:    ln 103     = 4.634729  = 2^2 (1 + 162.491/1024)  -> m 162 -> 0x44a2
 *   x = 65535:  ln 65538   = 11.090385 = 2^3 (1 + 395.569/1024)  -> m 396 -> 0x498c
 *   x = 10^6:   ln 1000003 = 13.815514 = 2^3 (1 + 744.386/1024)  -> m 744 -> 0x4ae8
 *   x = 123456789012: ln   = 25.539157 = 2^4 (1 + 610.506/1024)  -> m 611 -> 0x4e63
 *   x = -1:     ln 2       = 0.693147  = 2^-1 (1 + 395.565/1024) -> m 396 -> 0x398c
 *   x = -2:     ln 1 = 0 -> 0x0000;  x = -3, -5: x + 3 <= 0 -> null -> 0;  missing -> 0
 * (exponent bits e + 15 at bit 10: 2^0 -> 0x3c00, 2^1 -> 0x4000, 2^2 -> 0x4400,
 * 2^3 -> 0x4800, 2^4 -> 0x4c00, 2^-1 -> 0x3800) */
#define H(x) (uint8_t)((x)&0xff), (uint8_t)((x) >> 8)
#define Z H(0)
#define Z8 Z, Z, Z, Z, Z, Z, Z, Z
static const uint8_t num_rows[6][26] = {
    /* I1       I2         I3         I4         I5..I12  I13 */
    {Z,         H(0x3c65), Z,         H(0x3d8c), Z8,      Z},         /* row 1: -, 0, -2, 1, - */
    {Z,         Z,         H(0x4029), H(0x4ae8), Z8,      H(0x409b)}, /* row 2: -3, -5, 5, 1000000, 7 */
    {H(0x3e70), H(0x498c), H(0x4e63), Z,         Z8,      H(0x398c)}, /* row 3: 2, 65535, 123456789012, -, -1 */
    {H(0x3c65), Z,         Z,         Z,         Z8,      Z},         /* row 4: 0 */
    {H(0x3f2b), Z,         Z,         Z,         Z8,      Z},         /* row 5: 3 */
    {Z,         Z,         Z,         Z,         Z8,      H(0x44a2)}, /* row 6: I13 100 */
};

static void check_numerical(const char *rel, int first, int n)
{
    uint8_t want[6 * 26];
    for (int r = 0; r < n; r++)
        memcpy(want + 26 * r, num_rows[first + r], 26);
    TH_CHECK(same_bytes(rel, want, (size_t)(26 * n)));
}

/* Columns nobody fills: n rows of zeros of `w` bytes each. */
static void check_zero_columns(const char *split, int n, int w, int skip_c26)
{
    static const uint8_t zeros[64];
    for (int c = 3; c < 26; c++) {
        if (c == 25 && skip_c26)
            continue;
        char rel[64];
        snprintf(rel, sizeof rel, "out/%s/cat_%d.bin", split, c);
        TH_CHECK(same_bytes(rel, zeros, (size_t)(n * w)));
    }
}

/* out/feature_spec.yaml: C1..C3 have cardinality card_c123, C4..C26 card_rest (of
 * dtype `dtype`, or the dtype their cardinality implies when NULL), and the
 * dataset loads with ntrain + ntest rows. */
static void check_spec(int64_t card_c123, int64_t card_rest, const char *dtype, int64_t ntrain, int64_t ntest)
{
    int64_t card[26];
    for (int i = 0; i < 26; i++)
        card[i] = i < 3 ? card_c123 : card_rest;
    char path[512];
    snprintf(path, sizeof path, "%s/out/feature_spec.yaml", tmpdir);
    struct feature_spec fs;
    TH_EQ_ST_REQ(feature_spec_read(path, &fs), TR_OK);
    struct feature_spec_split sp;
    TH_EQ_ST_REQ(feature_spec_dlrm_split(&fs, "train", &sp), TR_OK);
    TH_EQ(sp.ntables, 26);
    TH_EQ(sp.nnumerical, 13);
    for (int i = 0; i < 26 && i < sp.ntables; i++) {
        TH_CHECKF(sp.rows[i] == card[i], "cat_%d: cardinality %lld, expected %lld", i,
                  (long long)sp.rows[i], (long long)card[i]);
        TH_EQ_STR(feature_spec_dtype_name(sp.cat_dtype[i]),
                  i < 3 || !dtype ? feature_spec_dtype_name(feature_spec_cat_dtype(card[i])) : dtype);
    }
    feature_spec_split_release(&sp);
    feature_spec_release(&fs);
    struct dataset ds;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/out", tmpdir);
    TH_EQ_ST(dataset_open_split_binary(&ds, dir, "feature_spec.yaml"), TR_OK);
    TH_EQ(ds.nsamples[BATCH_TRAIN], ntrain);
    TH_EQ(ds.nsamples[BATCH_TEST], ntest);
    dataset_close(&ds);
}

/* Threshold T = 2 counted on the training rows only (the seed also counts the test
 * rows). --test_fraction 0.5: round(0.5 * 6) = 3 test rows: rows 1-3 train, 4-6 test.
 *   C1: train 0xa x2 -> 1, 0xb x1 -> 0 (rare; twice over all rows); test 0xc -> 0  card 2
 *   C2: train 0xdeadbeef x2 (either case) -> 1, 0xffff x1 -> 0; test 0x12345678
 *       (only in test) -> 0; missing -> 0                                        card 2
 *   C3: train 0x1 x2 -> 1, missing -> 0; test 0x2 x2 (only in test, >= T there:
 *       the leak this rule removes) -> 0                                         card 2
 *   C26: 0xffffffff only in test -> 0;  C4..C25 all missing                       card 1
 * The feature spec records metadata: {vocabulary_rows: train}. */
static void hand_threshold(void)
{
    make_tmpdir();
    write_hand_input();
    TH_EQ_REQ(run("--output @/out --frequency_threshold 2 --test_fraction 0.5 --no_shuffle @/all.tsv"), 0);
    static const uint8_t lab_tr[] = {0x00, 0x01, 0x01}, lab_te[] = {0x00, 0x00, 0x01};
    same_split_bytes("label.bin", lab_tr, 3, lab_te, 3);
    check_numerical("out/train/numerical.bin", 0, 3);
    check_numerical("out/test/numerical.bin", 3, 3);
    static const uint8_t c0_tr[] = {0x01, 0x01, 0x00}, c0_te[] = {0x00, 0x01, 0x00};
    static const uint8_t c1_tr[] = {0x01, 0x00, 0x01}, c1_te[] = {0x00, 0x00, 0x00};
    static const uint8_t c2_tr[] = {0x00, 0x01, 0x01}, c2_te[] = {0x00, 0x00, 0x01};
    same_split_bytes("cat_0.bin", c0_tr, 3, c0_te, 3);
    same_split_bytes("cat_1.bin", c1_tr, 3, c1_te, 3);
    same_split_bytes("cat_2.bin", c2_tr, 3, c2_te, 3);
    check_zero_columns("train", 3, 1, 0);
    check_zero_columns("test", 3, 1, 0);
    check_spec(2, 1, "int8", 3, 3);
    {
        char path[512];
        struct feature_spec fs;
        snprintf(path, sizeof path, "%s/out/feature_spec.yaml", tmpdir);
        TH_EQ_ST_REQ(feature_spec_read(path, &fs), TR_OK);
        TH_EQ_STR(fs.vocabulary_rows ? fs.vocabulary_rows : "(none)", "train");
        feature_spec_release(&fs);
    }
    TH_CHECK(!exists("out/.scratch") && no_leftovers());
    remove_tmpdir();
}

/* Hash M = 1000 (card 1000 -> int16, little-endian), --test_files 1: a.tsv (rows
 * 1-4) is train, b.tsv (rows 5-6) is test.
 *   C1: 0xa = 10, 0xb = 11, 0xc = 12
 *   C2: 0xdeadbeef = 3735928559 % 1000 = 559 = 0x022f; 0xffff = 65535 % 1000 = 535
 *       = 0x0217; 0x12345678 = 305419896 % 1000 = 896 = 0x0380; missing -> 0
 *   C3: 1, 2, missing -> 0;  C26: 0xffffffff = 4294967295 % 1000 = 295 = 0x0127 */
static void hand_hash16(void)
{
    make_tmpdir();
    write_hand_input();
    TH_EQ_REQ(run("--output @/out --max_ind_range 1000 --test_files 1 --no_shuffle @/a.tsv @/b.tsv"), 0);
    static const uint8_t lab_tr[] = {0x00, 0x01, 0x01, 0x00}, lab_te[] = {0x00, 0x01};
    same_split_bytes("label.bin", lab_tr, 4, lab_te, 2);
    check_numerical("out/train/numerical.bin", 0, 4);
    check_numerical("out/test/numerical.bin", 4, 2);
    static const uint8_t c0_tr[] = {H(10), H(10), H(11), H(11)}, c0_te[] = {H(10), H(12)};
    static const uint8_t c1_tr[] = {0x2f, 0x02, 0x17, 0x02, 0x2f, 0x02, 0x00, 0x00}, c1_te[] = {0x80, 0x03, 0x17, 0x02};
    static const uint8_t c2_tr[] = {H(0), H(1), H(1), H(2)}, c2_te[] = {H(2), H(1)};
    static const uint8_t c25_tr[] = {H(0), H(0), H(0), H(0)}, c25_te[] = {0x00, 0x00, 0x27, 0x01};
    same_split_bytes("cat_0.bin", c0_tr, 8, c0_te, 4);
    same_split_bytes("cat_1.bin", c1_tr, 8, c1_te, 4);
    same_split_bytes("cat_2.bin", c2_tr, 8, c2_te, 4);
    same_split_bytes("cat_25.bin", c25_tr, 8, c25_te, 4);
    check_zero_columns("train", 4, 2, 1);
    check_zero_columns("test", 2, 2, 1);
    check_spec(1000, 1000, "int16", 4, 2);
    remove_tmpdir();
}

/* Hash M = 2^31 - 1 (int32), --test_fraction 0.5 (rows 1-3 train, 4-6 test):
 *   0xdeadbeef = 3735928559 - 2147483647 = 1588444912 = 0x5eadbef0; 0xffff = 65535;
 *   0x12345678 < M stays; 0xffffffff = 4294967295 - 2 * 2147483647 = 1 */
static void hand_hash32(void)
{
    make_tmpdir();
    write_hand_input();
    TH_EQ_REQ(run("--output @/out --max_ind_range 2147483647 --test_fraction 0.5 --no_shuffle @/all.tsv"), 0);
    static const uint8_t c1_tr[] = {0xf0, 0xbe, 0xad, 0x5e, 0xff, 0xff, 0x00, 0x00, 0xf0, 0xbe, 0xad, 0x5e};
    static const uint8_t c1_te[] = {0x00, 0x00, 0x00, 0x00, 0x78, 0x56, 0x34, 0x12, 0xff, 0xff, 0x00, 0x00};
    static const uint8_t c0_te[] = {0x0b, 0, 0, 0, 0x0a, 0, 0, 0, 0x0c, 0, 0, 0};
    static const uint8_t c25_te[] = {0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0};
    same_split_bytes("cat_1.bin", c1_tr, 12, c1_te, 12);
    TH_CHECK(same_bytes("out/test/cat_0.bin", c0_te, 12));
    TH_CHECK(same_bytes("out/test/cat_25.bin", c25_te, 12));
    check_numerical("out/test/numerical.bin", 3, 3);
    check_spec(2147483647, 2147483647, "int32", 3, 3);
    remove_tmpdir();
}

/* List columns (--list_columns): C2 and C26 lists of ',' separated hex values. */
static void parse_list_rules(void)
{
    prepare_parse_init();
    prepare_parse_set_lists((1u << 1) | (1u << 25), ',', 3);
    char line[1024];
    struct prepare_row row;
    int field = -1;
    line[0] = '\0';
    add_row(line, sizeof line, "1", "", "", "", "", "", "0a", "ff,1,Ab", "7", "", "");
    TH_EQ_REQ(prepare_parse_line(line, strlen(line), &row, &field), PREPARE_LINE_OK);
    TH_EQ(row.list_n[1], 3);
    TH_CHECK(row.list_v[row.list_at[1]] == 0xff && row.list_v[row.list_at[1] + 1] == 1 &&
             row.list_v[row.list_at[1] + 2] == 0xab);
    TH_EQ(row.list_n[25], 0); /* empty: an empty list */
    TH_EQ(row.cat_present & (1u << 1), 0);
    TH_CHECK((row.cat_present & 1u) && row.cat[0] == 10 && row.cat[2] == 7);
    line[0] = '\0';
    add_row(line, sizeof line, "0", "", "", "", "", "", "", "5", "", "1,2", "");
    TH_EQ_REQ(prepare_parse_line(line, strlen(line), &row, &field), PREPARE_LINE_OK);
    TH_CHECK(row.list_n[1] == 1 && row.list_v[row.list_at[1]] == 5 && row.list_n[25] == 2 &&
             row.list_v[row.list_at[25] + 1] == 2);
    static const struct {
        const char *c2, *c26;
        enum prepare_bad why;
    } bad[] = {
        {"1,2,3,4", "", PREPARE_BAD_LIST}, /* over max_hotness 3 */
        {"1,", "", PREPARE_BAD_HEX},       /* a separator at the end */
        {",1", "", PREPARE_BAD_HEX},
        {"1,,2", "", PREPARE_BAD_HEX},
        {"1;2", "", PREPARE_BAD_HEX},
        {"", "12345678901234567", PREPARE_BAD_HEX}, /* 17 digits */
        {"", "g", PREPARE_BAD_HEX},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        line[0] = '\0';
        add_row(line, sizeof line, "1", "", "", "", "", "", "", bad[i].c2, "", bad[i].c26, "");
        enum prepare_bad why = prepare_parse_line(line, strlen(line), &row, &field);
        TH_CHECKF(why == bad[i].why && field == (bad[i].c2[0] ? 15 : 39), "'%s' / '%s': %d (field %d)", bad[i].c2,
                  bad[i].c26, (int)why, field);
        char msg[192];
        prepare_describe_bad(line, strlen(line), why, field, msg, sizeof msg);
        printf("# %s\n", msg);
    }
    prepare_parse_set_lists(0, ',', 1);
}

static void parse_line_rules(void)
{
    prepare_parse_init();
    TH_EQ(prepare_num_half(-2), 0x0000);
    TH_EQ(prepare_num_half(-3), 0);
    TH_EQ(prepare_num_half(-1000), 0);
    TH_EQ(prepare_num_half(0), 0x3c65);
    TH_EQ(prepare_num_half(1), 0x3d8c);
    TH_EQ(prepare_num_half(-1), 0x398c);
    TH_EQ(prepare_num_half(1000000), 0x4ae8);
    TH_EQ(prepare_num_half(123456789012LL), 0x4e63);
    TH_EQ(prepare_num_half(INT64_MIN), 0);
    TH_EQ(prepare_num_half(INT64_MAX), 0x5175); /* ln(2^63) = 43.668 = 2^5 (1 + 373.38/1024) */
    prepare_parse_init_transform(PREPARE_NUM_LOG1P); /* ln(1 + max(x, 0)) */
    TH_EQ(prepare_num_half(0), 0);
    TH_EQ(prepare_num_half(-5), 0);
    TH_EQ(prepare_num_half(INT64_MIN), 0);
    TH_EQ(prepare_num_half(1), 0x398c);     /* ln 2 = 0.6931 */
    TH_EQ(prepare_num_half(7), 0x4029);     /* ln 8 = 2.0794 */
    TH_EQ(prepare_num_half(1000000), 0x4ae8); /* ln(1e6 + 1) rounds as ln(1e6 + 3) */
    prepare_parse_init();
    TH_EQ(prepare_num_half(1), 0x3d8c);

    char line[1024];
    struct prepare_row row;
    int field = -1;
    line[0] = '\0';
    add_row(line, sizeof line, "1", "-7", "007", "", "+4", "9223372036854775807", "AbCdEf01", "0", "",
            "ffffffffffffffff", "");
    TH_EQ_REQ(prepare_parse_line(line, strlen(line), &row, &field), PREPARE_LINE_OK);
    TH_EQ(row.label, 1);
    TH_EQ(row.num[0], 0);
    TH_EQ(row.num[1], prepare_num_half(7));
    TH_EQ(row.num[3], prepare_num_half(4));
    TH_EQ(row.num[12], prepare_num_half(INT64_MAX));
    TH_EQ(row.cat[0], 0xabcdef01u);
    TH_EQ(row.cat[1], 0);
    TH_EQ(row.cat[25], UINT64_MAX); /* TH_EQ would print it as -1 */
    TH_EQ(row.cat_present, (1u << 0) | (1u << 1) | (1u << 25));

    struct {
        const char *label, *i1, *c1, *c26;
        enum prepare_bad want;
        int field;
    } bad[] = {
        {"2", "", "", "", PREPARE_BAD_LABEL, 0},
        {"", "", "", "", PREPARE_BAD_LABEL, 0},
        {"01", "", "", "", PREPARE_BAD_LABEL, 0},
        {"0", "1.5", "", "", PREPARE_BAD_INT, 1},
        {"0", "-", "", "", PREPARE_BAD_INT, 1},
        {"0", "1e3", "", "", PREPARE_BAD_INT, 1},
        {"0", " 1", "", "", PREPARE_BAD_INT, 1},
        {"0", "9223372036854775808", "", "", PREPARE_BAD_RANGE, 1},
        {"0", "99999999999999999999", "", "", PREPARE_BAD_RANGE, 1},
        {"0", "", "xyz", "", PREPARE_BAD_HEX, 14},
        {"0", "", "0x12", "", PREPARE_BAD_HEX, 14},
        {"0", "", "", "10000000000000000", PREPARE_BAD_HEX, 39},
        {"0", "", "", "abc ", PREPARE_BAD_HEX, 39},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        line[0] = '\0';
        add_row(line, sizeof line, bad[i].label, bad[i].i1, "", "", "", "", bad[i].c1, "", "", bad[i].c26, "");
        enum prepare_bad why = prepare_parse_line(line, strlen(line), &row, &field);
        TH_CHECKF(why == bad[i].want && field == bad[i].field, "case %zu: reason %d field %d", i, (int)why, field);
    }
    TH_EQ(prepare_num_half(-9223372036854775807LL - 1), 0);
    line[0] = '\0';
    add_row(line, sizeof line, "0", "-9223372036854775808", "", "", "", "", "", "", "", "", "");
    TH_EQ(prepare_parse_line(line, strlen(line), &row, &field), PREPARE_LINE_OK);
    TH_EQ(row.num[0], 0);
    /* field counts: 39 and 41 fields */
    line[0] = '\0';
    add_row(line, sizeof line, "0", "", "", "", "", "", "", "", "", "", "\tx");
    TH_EQ(prepare_parse_line(line, strlen(line), &row, &field), PREPARE_BAD_FIELDS);
    TH_EQ(field, 41);
    TH_EQ(prepare_parse_line(line, strlen(line) - 3, &row, &field), PREPARE_BAD_FIELDS);
    TH_EQ(field, 39);
    char msg[192];
    prepare_describe_bad(line, strlen(line), PREPARE_BAD_FIELDS, 41, msg, sizeof msg);
    TH_EQ_STR(msg, "expected 40 tab-separated fields, found 41");
}

/* Malformed lines are skipped; the rest matches the clean input. --strict stops at the first. */
static void malformed(void)
{
    make_tmpdir();
    write_hand_input();
    char text[8192] = "";
    add_row(text, sizeof text, "0", "", "0", "-2", "1", "", "0000000a", "deadBEEF", "", "", "\n");
    strcat(text, "0\t1\t2\n");                                                                  /* 3 fields */
    add_row(text, sizeof text, "1", "-3", "-5", "5", "1000000", "7", "0000000a", "0000ffff", "00000001", "", "\n");
    add_row(text, sizeof text, "x", "", "", "", "", "", "", "", "", "", "\n");                   /* bad label */
    add_row(text, sizeof text, "1", "2", "65535", "123456789012", "", "-1", "0000000b", "DEADBEEF", "00000001", "",
            "\n");
    add_row(text, sizeof text, "1", "2.5", "", "", "", "", "", "", "", "", "\n");                /* non-integer */
    add_row(text, sizeof text, "0", "0", "", "", "", "", "0000000b", "", "00000002", "", "\n");
    add_row(text, sizeof text, "0", "", "", "", "", "", "zz", "", "", "", "\n");                 /* bad hex */
    add_row(text, sizeof text, "0", "3", "", "", "", "", "0000000a", "12345678", "00000002", "", "\n");
    add_row(text, sizeof text, "1", "", "", "", "", "100", "0000000c", "0000ffff", "00000001", "ffffffff", "\n");
    write_text("bad.tsv", text);
    TH_EQ_REQ(run("--output @/ref --frequency_threshold 2 --test_fraction 0.5 --no_shuffle @/all.tsv"), 0);
    TH_EQ(run("--output @/out --frequency_threshold 2 --test_fraction 0.5 --no_shuffle --threads 2 --chunk_size "
              "256 @/bad.tsv"),
          0);
    TH_CHECK(same_outputs("ref", "out"));
    TH_EQ(run("--output @/strict --strict --test_fraction 0.5 @/bad.tsv"), 2);
    TH_EQ(run("--output @/strict --strict --max_ind_range 10 --test_fraction 0.5 @/bad.tsv"), 2);
    TH_CHECK(!exists("strict") && no_leftovers());
    write_text("junk.tsv", "hello\nworld\n");
    TH_EQ(run("--output @/junk --test_fraction 0.5 @/junk.tsv"), 2); /* no valid row at all */
    TH_CHECK(!exists("junk") && no_leftovers());
    remove_tmpdir();
}

/* A deterministic pseudo-random Criteo-like input: values from small pools with
 * skewed frequencies, so that a threshold keeps some and drops others. */
static void write_random_input(const char *rel, int rows, uint64_t seed)
{
    size_t cap = (size_t)rows * 400 + 1;
    char *buf = malloc(cap);
    TR_ASSERT(buf);
    size_t k = 0;
    uint64_t s = seed;
    for (int r = 0; r < rows; r++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        k += (size_t)snprintf(buf + k, cap - k, "%d", (int)((s >> 33) & 1));
        for (int j = 0; j < 13; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t v = s >> 33;
            if (v % 7 == 0)
                k += (size_t)snprintf(buf + k, cap - k, "\t");
            else
                k += (size_t)snprintf(buf + k, cap - k, "\t%lld", (long long)(v % 300) - 3);
        }
        for (int c = 0; c < 26; c++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t v = s >> 33, pool = 1 + (uint64_t)c * 40;
            if (v % 11 == 0)
                k += (size_t)snprintf(buf + k, cap - k, "\t");
            else /* squaring a uniform draw skews towards small values */
                k += (size_t)snprintf(buf + k, cap - k, "\t%08llx",
                                      (unsigned long long)(((v % pool) * (v % pool) / pool) * 2654435761u % 0xffffffffu));
        }
        buf[k++] = '\n';
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    FILE *fp = fopen(path, "wb");
    TR_ASSERT(fp && fwrite(buf, 1, k, fp) == k);
    fclose(fp);
    free(buf);
}

/* Counting with a tiny memory limit spills sorted runs; the result is identical. */
static void spill_exact(void)
{
    make_tmpdir();
    write_random_input("r1.tsv", 3000, 1);
    write_random_input("r2.tsv", 1000, 2);
    TH_EQ_REQ(run("--output @/ref --frequency_threshold 3 --test_files 1 --threads 1 @/r1.tsv @/r2.tsv"), 0);
    TH_EQ_REQ(run("--output @/spill --frequency_threshold 3 --test_files 1 --threads 2 --memory_limit 16K "
                  "--chunk_size 4K @/r1.tsv @/r2.tsv"),
              0);
    TH_CHECK(same_outputs("ref", "spill"));
    /* the counter alone: the same dictionary with and without spilling, and it did spill */
    struct prepare_counter *big = NULL, *small = NULL;
    TH_EQ_ST_REQ(prepare_counter_new(1, 1 << 30, tmpdir, &big), TR_OK);
    TH_EQ_ST_REQ(prepare_counter_new(1, 16 << 10, tmpdir, &small), TR_OK);
    struct prepare_row row;
    memset(&row, 0, sizeof row);
    uint64_t s = 5;
    for (int r = 0; r < 20000; r++) {
        row.cat_present = 0;
        for (int c = 0; c < 26; c++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t v = (s >> 33) % 5000;
            row.cat[c] = v * v / 5000;
            if (v % 9)
                row.cat_present |= 1u << c;
        }
        TH_EQ_ST_REQ(prepare_counter_add(big, 0, &row), TR_OK);
        TH_EQ_ST_REQ(prepare_counter_add(small, 0, &row), TR_OK);
    }
    TH_EQ(prepare_counter_spills(big), 0);
    TH_CHECK(prepare_counter_spills(small) > 10);
    struct prepare_dict d1, d2;
    TH_EQ_ST_REQ(prepare_counter_finish(big, 4, &d1), TR_OK);
    TH_EQ_ST_REQ(prepare_counter_finish(small, 4, &d2), TR_OK);
    int same = 1;
    for (int c = 0; c < 26; c++) {
        same &= d1.nkept[c] == d2.nkept[c] && d1.nkept[c] > 10;
        for (uint64_t v = 0; v < 5000; v++)
            same &= prepare_dict_lookup(&d1, c, v) == prepare_dict_lookup(&d2, c, v);
    }
    TH_CHECK(same);
    /* ids are 1..K by descending count: id 1 is the most frequent value (0 in this skew) */
    TH_EQ(prepare_dict_lookup(&d1, 0, 0), 1);
    prepare_dict_release(&d1);
    prepare_dict_release(&d2);
    prepare_counter_free(&big);
    prepare_counter_free(&small);
    TH_CHECK(big == NULL && small == NULL);
    remove_tmpdir();
}

/* The shuffle: a permutation of the unshuffled rows in the documented key order,
 * the same in memory and through buckets, for 1 and 2 threads; another seed differs. */
static void shuffle_permutation(void)
{
    make_tmpdir();
    write_random_input("r.tsv", 5000, 3);
    TH_EQ_REQ(run("--output @/plain --max_ind_range 100000 --test_fraction 0.2 --no_shuffle @/r.tsv"), 0);
    TH_EQ_REQ(run("--output @/s1 --max_ind_range 100000 --test_fraction 0.2 --shuffle_seed 9 --threads 1 @/r.tsv"), 0);
    TH_EQ_REQ(run("--output @/s2 --max_ind_range 100000 --test_fraction 0.2 --shuffle_seed 9 --threads 2 --chunk_size "
                  "2K --memory_limit 64K @/r.tsv"),
              0);
    TH_EQ_REQ(run("--output @/s3 --max_ind_range 100000 --test_fraction 0.2 --shuffle_seed 10 @/r.tsv"), 0);
    TH_CHECK(same_outputs("s1", "s2"));
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/s1/train/numerical.bin", tmpdir);
    snprintf(pb, sizeof pb, "%s/s3/train/numerical.bin", tmpdir);
    TH_CHECK(!same_files(pa, pb));
    for (int c = 0; c < PREPARE_NCOL; c++) { /* row g of plain is row rank(key(g)) of s1 */
        char p0[600], p1[600];
        snprintf(p0, sizeof p0, "%s/plain/train/%s", tmpdir, files[c]);
        snprintf(p1, sizeof p1, "%s/s1/train/%s", tmpdir, files[c]);
        size_t n0, n1;
        uint8_t *a = slurp(p0, &n0), *b = slurp(p1, &n1);
        TH_REQUIRE(a && b && n0 == n1);
        size_t n = 4000, w = n0 / n;
        TH_EQ_REQ(n0, n * w);
        struct prepare_kv *kv = malloc(n * sizeof *kv), *tmp = malloc(n * sizeof *tmp);
        uint64_t s = prepare_shuffle_seed(9);
        for (size_t g = 0; g < n; g++)
            kv[g] = (struct prepare_kv){prepare_shuffle_key(s, g), g};
        const struct prepare_kv *sorted = kern_sort_radix(kv, tmp, (int64_t)n, sizeof *kv, 0, 64);
        int ok = 1;
        for (size_t i = 0; i < n; i++)
            ok &= memcmp(b + i * w, a + sorted[i].val * w, w) == 0;
        TH_CHECKF(ok, "%s is not the documented permutation", files[c]);
        free(kv);
        free(tmp);
        free(a);
        free(b);
    }
    for (int c = 0; c < PREPARE_NCOL; c++) { /* the test split keeps input order */
        snprintf(pa, sizeof pa, "%s/plain/test/%s", tmpdir, files[c]);
        snprintf(pb, sizeof pb, "%s/s2/test/%s", tmpdir, files[c]);
        TH_CHECK(same_files(pa, pb));
    }
    remove_tmpdir();
}

/* Usage errors exit 2 and write nothing; an existing output needs --force. */
static void usage_errors(void)
{
    make_tmpdir();
    write_hand_input();
    TH_EQ(run("--output @/out --test_fraction 0.5 @/missing.tsv"), 2);
    TH_EQ(run("--output @/out @/all.tsv"), 2);
    TH_EQ(run("--output @/out --test_fraction 0.5 --test_files 1 @/a.tsv @/b.tsv"), 2);
    TH_EQ(run("--output @/out --test_files 2 @/a.tsv @/b.tsv"), 2);
    TH_EQ(run("--output @/out --test_fraction 1 @/all.tsv"), 2);
    TH_EQ(run("--output @/out --test_fraction 0.5 --max_ind_range 5 --frequency_threshold 2 @/all.tsv"), 2);
    TH_EQ(run("--output @/out --test_fraction 0.5 --memory_limit 1Q @/all.tsv"), 2);
    TH_EQ(run("--output @/out --test_fraction 0.5 --no_such_flag @/all.tsv"), 2);
    TH_EQ(run("--test_fraction 0.5 @/all.tsv"), 2);
    TH_EQ(run("--output @/out --test_fraction 0.5"), 2);
    TH_EQ(run("--output @/out --test_fraction 0.5 @/all.tsv --threads"), 2);
    TH_CHECK(!exists("out") && no_leftovers());
    /* options after the inputs work too */
    TH_EQ(run("@/all.tsv --output @/out --test_fraction 0.5"), 0);
    TH_EQ(run("--output @/out --test_fraction 0.5 @/all.tsv"), 2); /* exists, not empty */
    TH_CHECK(exists("out/feature_spec.yaml"));
    TH_EQ(run("--output @/out --test_fraction 0.5 --max_ind_range 7 --force @/all.tsv"), 0);
    TH_CHECK(exists("out/feature_spec.yaml") && no_leftovers());
    char empty[512];
    snprintf(empty, sizeof empty, "%s/empty", tmpdir);
    TH_EQ(mkdir(empty, 0755), 0);
    TH_EQ(run("--output @/empty --test_fraction 0.5 @/all.tsv"), 0); /* an empty directory is fine */
    write_text("file", "x");
    TH_EQ(run("--output @/file --test_fraction 0.5 --force @/all.tsv"), 2);
    remove_tmpdir();
}

/* Allocation N fails, for N = 1, 2, ... until a run succeeds: every failing run
 * exits non-zero, leaves no output, and frees everything it allocated. */
static void alloc_faults(void)
{
    /* ~1700 runs that each create and remove ~90 files: tmpfs when there is one
     * (ten times faster than a disk file system) */
    if (access("/dev/shm", W_OK) == 0)
        make_tmpdir_in("/dev/shm");
    else
        make_tmpdir();
    write_random_input("r.tsv", 300, 4);
    int n = 1, done = 0, leaks = 0;
    for (; n < 5000 && !done; n++) {
        struct tr_alloc_stats before, after;
        tr_alloc_get_stats(&before);
        tr_alloc_fail_at(n);
        int rc = run("--output @/out --frequency_threshold 2 --test_fraction 0.3 --threads 2 --chunk_size 8K "
                     "--memory_limit 32K @/r.tsv");
        int fired = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        tr_alloc_get_stats(&after);
        if (after.live_bytes != before.live_bytes && leaks++ < 3)
            printf("# allocation %d failing leaks %lld bytes\n", n, (long long)(after.live_bytes - before.live_bytes));
        if (!fired) {
            TH_EQ(rc, 0);
            TH_CHECK(exists("out/feature_spec.yaml"));
            done = 1;
        } else {
            TH_CHECKF(rc != 0, "allocation %d failed but the run succeeded", n);
            TH_CHECKF(!exists("out") && no_leftovers(), "allocation %d: output left behind", n);
        }
    }
    printf("# %d allocations, each made to fail once\n", n - 2);
    TH_CHECK(done);
    TH_EQ(leaks, 0);
    remove_tmpdir();
}

int main(int argc, char **argv)
{
    static const struct th_case cases[] = {
        {"parse_line_rules", parse_line_rules},
        {"parse_list_rules", parse_list_rules},
        {"hand_threshold", hand_threshold},
        {"hand_hash16", hand_hash16},
        {"hand_hash32", hand_hash32},
        {"malformed", malformed},
        {"spill_exact", spill_exact},
        {"shuffle_permutation", shuffle_permutation},
        {"usage_errors", usage_errors},
        {"alloc_faults", alloc_faults},
    };
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
