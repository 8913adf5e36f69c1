/* prepare.c: `terarec data prepare`: Criteo TSV (plain or gzip) to the seed's
 * split-binary dataset plus feature_spec.yaml. Options, checks of the inputs and
 * of the output directory, the order of the passes (threshold mode: count, then
 * write; hash mode: write only; threshold mode with --test_fraction: rows, count,
 * write), the shuffle, and the atomic rename of OUT.tmp-PID into place. The passes
 * themselves and the train/test split are in prepare_pass.c, the staging folders
 * and the yaml in prepare_output.c; parsing, threading, counting and shuffling
 * live in the other prepare_*.c files. The threshold vocabulary is counted on the
 * training rows only (the seed counts the test rows too, a leak). It writes no
 * validation split (the seed writes one but never reads it).
 *
 * Memory: the counting tables take --memory_limit / 2 (and as much again while a
 * spill sorts), a shuffle bucket at most --memory_limit / 2 plus --memory_limit / 4
 * of bucket buffers; on top come (2 * threads + 2) chunks of --chunk_size text and
 * their rows, and in threshold mode the dictionaries of kept values (~24 bytes each). */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../common/param.h"
#include "../common/version.h"
#include "../kernels/kern.h"
#include "../loader_svc/dataset.h"
#include "../loader_svc/feature_spec.h"
#include "prepare_internal.h"

#define MAX_OPTS 24

enum { HASH_MISSING_SHARED = 0, HASH_MISSING_RESERVED = 1 };
static const char *const transform_choices[] = {"nvidia", "log1p", NULL};
static const char *const hash_missing_choices[] = {"shared", "reserved", NULL};
static const char *const distribution_choices[] = {"uniform", NULL};

static const char usage[] =
    "usage: terarec data prepare [options] --output DIR INPUT...\n"
    "\n"
    "Converts Criteo TSV files (plain or gzip: label, I1..I13, C1..C26, tab-separated, empty = missing)\n"
    "into the seed's split-binary dataset: DIR/train/ and DIR/test/ with label.bin (bool),\n"
    "numerical.bin (float16 [N, 13]) and cat_0.bin..cat_25.bin (int8/int16/int32 by cardinality),\n"
    "and DIR/feature_spec.yaml. The output is written to DIR.tmp-PID and renamed to DIR on success.\n"
    "\n"
    "  numerical    --numerical_transform nvidia (default): float16(ln(x + 3)); missing and x <= -3\n"
    "               give 0 (the seed's Spark rule); log1p: float16(ln(1 + max(x, 0))), missing gives 0\n"
    "               (facebookresearch/dlrm, TorchRec, MLPerf)\n"
    "  categorical  1 to 16 hex digits of either case, compared as integers (the data always has 8);\n"
    "               missing gives id 0. Two modes:\n"
    "    threshold  (default) exact counts over the TRAINING rows only (the seed also counts the test\n"
    "               rows, a leak); values seen >= --frequency_threshold times get ids 1..K by descending\n"
    "               count, ties by ascending value; rare, missing and test-only values give 0;\n"
    "               cardinality K + 1; feature_spec.yaml records metadata: {vocabulary_rows: train}.\n"
    "               Two passes over the text (three with --test_fraction: the rows are counted first).\n"
    "               Counting tables that outgrow --memory_limit SPILL to sorted runs on disk that are\n"
    "               merged at the end: counts stay exact (no sketch). The kept values must fit in memory.\n"
    "    hash       (--max_ind_range M) id = int(hex, 16) % M, missing gives 0 (facebookresearch/dlrm's\n"
    "               rule); every cardinality is M; one pass over the text. --hash_missing reserved\n"
    "               keeps id 0 for missing values only: id = 1 + int(hex, 16) % (M - 1), M >= 2.\n"
    "  split        --test_files K: the last K input files are the test split (the seed's day_23), or\n"
    "               --test_fraction F: the last round(F * N) of the N valid rows, by position\n"
    "  shuffle      training row g (0-based, input order) goes to the rank of its key\n"
    "               mix(g + mix(seed + 0x9e3779b97f4a7c15)) (mix = the splitmix64 finaliser), keys\n"
    "               ascending; test rows keep input order. The bytes never depend on --threads; rows\n"
    "               beyond --memory_limit go through bucket files with the same result.\n"
    "  malformed    lines that are not 40 fields, a label other than 0/1, a non-integer I or a bad C are\n"
    "               skipped and counted, the first 5 shown as file:line; --strict stops at the first\n"
    "               (exit 2, nothing written). Empty lines are skipped silently (counted in the summary).\n"
    "  lists        --list_columns 3,20: those fields hold lists of hex values (--list_separator, default\n"
    "               ','; up to --max_hotness; empty: an empty list), each value taken as one would be; the\n"
    "               column becomes a feature of variable hotness: its ids one after the other and a file of\n"
    "               per-sample lengths (cat_<i>_lengths.bin; docs/formats.md)\n"
    "  multi-hot    --multi_hot_sizes 3,2,1,... (26 sizes; MLPerf DLRM-DCNv2's: 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,\n"
    "               1,1,1,12,100,27,10,3,1,1): as MLPerf's reference materializes Criteo 1TB, table t of R\n"
    "               rows and size h > 1 gets a lookup whose row r is [r, h - 1 ids uniform on [0, R)], drawn\n"
    "               row after row, table after table, from numpy's RandomState(--multi_hot_seed, the\n"
    "               reference's 0) with np.random.randint (the same draws, bit for bit); each id r of the\n"
    "               table becomes that row: cat_t.bin holds h ids a sample (hotness: h in feature_spec.yaml,\n"
    "               format_version 2). One lookup is in memory at a time (R x (h - 1) x 4 bytes, at most\n"
    "               --memory_limit)\n"
    "  exit status  0 done, 2 bad usage or input, 1 other failure, 130 interrupted";

static void opts_fill(struct prepare_opts *o, struct tr_opt t[MAX_OPTS])
{
    const struct tr_opt tab[] = {
        {"output", TR_OPT_PATH, &o->output, NULL, "output directory (required)", 1, 0, NULL, NULL, 0, NULL, 0},
        {"frequency_threshold", TR_OPT_INT64, &o->frequency_threshold, "15",
         "threshold mode: keep values seen at least T times (T <= 1 keeps all)", 0, 1e18, NULL, NULL, 0, NULL, 0},
        {"max_ind_range", TR_OPT_INT64, &o->max_ind_range, "0",
         "hash mode when > 0: id = int(hex, 16) % M, cardinality M", 0, 2147483647.0, NULL, NULL, 0, NULL, 0},
        {"test_files", TR_OPT_INT, &o->test_files, "0", "the last K input files are the test split", 0, 1e6,
         NULL, NULL, 0, NULL, 0},
        {"test_fraction", TR_OPT_DOUBLE, &o->test_fraction, "0",
         "the last F of all rows (by position) are the test split, 0 < F < 1", 0, 1, NULL, NULL, 0, NULL, 0},
        {"shuffle", TR_OPT_BOOL, &o->shuffle, "true", "shuffle the training rows (seeded permutation)", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"shuffle_seed", TR_OPT_INT64, &o->shuffle_seed, "0", "seed of the training-row permutation", 0,
         9.2e18, NULL, NULL, 0, NULL, 0},
        {"threads", TR_OPT_INT, &o->threads, "0", "parsing threads (0: every CPU); the output does not depend on it",
         0, 4096, NULL, NULL, 0, NULL, 0},
        {"memory_limit", TR_OPT_BYTES, &o->memory_limit, "4G",
         "memory for counting tables and the shuffle; beyond it: spill to disk", 16384, 9.2e18, NULL, NULL, 0, NULL, 0},
        {"chunk_size", TR_OPT_BYTES, &o->chunk_size, "8M", "text per parallel work unit", 256, 1073741824.0,
         NULL, NULL, 0, NULL, 0},
        {"strict", TR_OPT_BOOL, &o->strict, "false", "a malformed line is fatal (exit 2, nothing written)", 1,
         0, NULL, NULL, 0, NULL, 0},
        {"force", TR_OPT_BOOL, &o->force, "false", "replace an existing non-empty output directory", 1, 0, NULL,
         NULL, 0, NULL, 0},
        {"progress", TR_OPT_BOOL, &o->progress, "true", "progress bar on stderr when it is a terminal", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"numerical_transform", TR_OPT_ENUM, &o->numerical_transform, "nvidia",
         "nvidia: ln(x + 3), x <= -3 gives 0 (the seed); log1p: ln(1 + max(x, 0)) (dlrm, TorchRec, MLPerf)", 1, 0,
         transform_choices, NULL, 0, NULL, 0},
        {"hash_missing", TR_OPT_ENUM, &o->hash_missing, "shared",
         "hash mode: shared: missing gives 0, which values hashing to 0 share; reserved: missing gives 0, "
         "others 1 + h % (M - 1)",
         1, 0, hash_missing_choices, NULL, 0, NULL, 0},
        {"list_columns", TR_OPT_INT_LIST, &o->list_columns, NULL,
         "categorical columns (0..25: cat_<i>, C<i+1>) whose fields are lists of hex values (multi-hot TSV): "
         "each becomes a feature of variable hotness", 0, 25, NULL, NULL, 0, NULL, 0},
        {"list_separator", TR_OPT_STRING, &o->list_separator, ",", "the separator of a list column's values", 1,
         0, NULL, NULL, 0, NULL, 0},
        {"max_hotness", TR_OPT_INT, &o->max_hotness, "64",
         "the most values a list column's field may hold (a longer one is a malformed line)", 1, PREPARE_LIST_MAX,
         NULL, NULL, 0, NULL, 0},
        {"multi_hot_sizes", TR_OPT_INT_LIST, &o->multi_hot_sizes, NULL,
         "make the tables multi-hot as MLPerf's DLRM-DCNv2 reference does: ids a sample of each of the 26 (1: "
         "one-hot)", 1, 65535, NULL, NULL, 0, NULL, 0},
        {"multi_hot_distribution", TR_OPT_ENUM, &o->multi_hot_distribution, "uniform",
         "how the ids after a bag's first are drawn (the reference's --multi_hot_distribution_type uniform)", 1,
         0, distribution_choices, "multi_hot_distribution_type", 0, NULL, 0},
        {"multi_hot_seed", TR_OPT_INT64, &o->multi_hot_seed, "0",
         "seed of the multi-hot draws (numpy's RandomState; the reference seeds 0)", 0, 4294967295.0, NULL, NULL, 0,
         NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0},
    };
    TR_ASSERT(TR_ARRAY_SIZE(tab) <= MAX_OPTS);
    memcpy(t, tab, sizeof tab);
}

/* Moves options (with their values) before the inputs so both orders work:
 * *out = argv0, options..., "--", inputs... (*outc entries; free *out with
 * tr_free). TR_ERR_ARG (logged: an unknown option, an option without its value),
 * TR_ERR_NOMEM; *out is NULL on error. */
static enum tr_status reorder_args(struct tr_opt *opts, int argc, char **argv, char ***out_args, int *outc)
{
    enum tr_status rc = TR_OK;
    char **out = tr_calloc((size_t)argc + 2, sizeof *out);
    char **pos = tr_calloc((size_t)argc + 1, sizeof *pos);
    *out_args = NULL;
    if (!out || !pos) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    int n = 0, np = 0, dashdash = 0;
    out[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (dashdash || a[0] != '-' || a[1] == '\0') {
            pos[np++] = argv[i];
            continue;
        }
        if (!strcmp(a, "--")) {
            dashdash = 1;
            continue;
        }
        if (a[1] != '-' && strcmp(a, "-h") && strcmp(a, "-V")) {
            LOG_ERROR("unknown option '%s'", a);
            LOG_HINT("options start with --; see --help");
            rc = TR_ERR_ARG;
            goto fail;
        }
        out[n++] = argv[i];
        if (a[1] == '-' && !strchr(a, '=')) {
            char name[128];
            size_t k = 0;
            for (const char *p = a + 2; *p && k + 1 < sizeof name; p++)
                name[k++] = *p == '-' ? '_' : *p;
            name[k] = '\0';
            struct tr_opt *o = tr_opt_find(opts, name);
            if (o && o->type != TR_OPT_BOOL) {
                if (i + 1 >= argc) {
                    LOG_ERROR("--%s: missing value", o->name);
                    rc = TR_ERR_ARG;
                    goto fail;
                }
                out[n++] = argv[++i];
            }
        }
    }
    static char dd[] = "--";
    out[n++] = dd;
    for (int i = 0; i < np; i++)
        out[n++] = pos[i];
    *out_args = out;
    *outc = n;
exit:
    tr_free(pos);
    return rc;
fail:
    tr_free(out);
    goto exit;
}
/* ---- checks of the options and the inputs ------------------------------------------------ */

static enum tr_status check_opts(const struct prepare_opts *o, struct tr_opt *opts, int ninputs)
{
    if (!o->output || !*o->output) {
        LOG_ERROR("--output is required");
        LOG_HINT("usage: terarec data prepare [options] --output DIR INPUT...");
        return TR_ERR_ARG;
    }
    if (ninputs < 1) {
        LOG_ERROR("no input files");
        LOG_HINT("usage: terarec data prepare [options] --output DIR INPUT...");
        return TR_ERR_ARG;
    }
    if (o->test_files > 0 && o->test_fraction > 0) {
        LOG_ERROR("--test_files and --test_fraction are alternatives; give one");
        return TR_ERR_ARG;
    }
    if (o->test_files == 0 && o->test_fraction == 0) {
        LOG_ERROR("no test split: give --test_files or --test_fraction");
        LOG_HINT("--test_files 1 makes the last input file (e.g. day_23) the test split; --test_fraction 0.1 "
                 "the last 10%% of the rows");
        return TR_ERR_ARG;
    }
    if (o->test_fraction >= 1) {
        LOG_ERROR("--test_fraction: '%g' must be below 1", o->test_fraction);
        return TR_ERR_ARG;
    }
    if (o->test_files >= ninputs) {
        LOG_ERROR("--test_files: %d of %d input files leaves no training file", o->test_files, ninputs);
        LOG_HINT("give the training files first and the test files last");
        return TR_ERR_ARG;
    }
    if (o->max_ind_range > 0 && tr_opt_find(opts, "frequency_threshold")->set_by == 2) {
        LOG_ERROR("--frequency_threshold and --max_ind_range are alternatives; give one");
        LOG_HINT("--max_ind_range selects the hash mode, --frequency_threshold the (default) threshold mode");
        return TR_ERR_ARG;
    }
    if (o->hash_missing == HASH_MISSING_RESERVED && o->max_ind_range == 0) {
        LOG_ERROR("--hash_missing reserved needs the hash mode (--max_ind_range M)");
        return TR_ERR_ARG;
    }
    if (o->multi_hot_sizes.n && o->multi_hot_sizes.n != PREPARE_CAT) {
        LOG_ERROR("--multi_hot_sizes: %d sizes; Criteo has %d categorical columns", o->multi_hot_sizes.n,
                  PREPARE_CAT);
        LOG_HINT("give one size per column, 1 for one-hot (MLPerf: 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,"
                 "27,10,3,1,1)");
        return TR_ERR_ARG;
    }
    const char *lflag = tr_opt_given(opts, "list_separator") ? "list_separator"
                        : tr_opt_given(opts, "max_hotness")  ? "max_hotness"
                                                             : NULL;
    if (!o->list_columns.n && lflag) {
        LOG_ERROR("--%s needs --list_columns", lflag);
        LOG_HINT("--list_columns names the categorical columns whose fields are lists");
        return TR_ERR_ARG;
    }
    const char *sep = o->list_separator ? o->list_separator : ",";
    if (strlen(sep) != 1 || sep[0] == '\t' || sep[0] == '\n' || sep[0] == '\r' || isxdigit((unsigned char)sep[0])) {
        LOG_ERROR("--list_separator: '%s' must be one character, neither a tab, a line end nor a hex digit", sep);
        return TR_ERR_ARG;
    }
    uint32_t seen = 0;
    for (int k = 0; k < o->list_columns.n; k++) {
        const int i = (int)o->list_columns.v[k];
        if ((seen >> i) & 1u) {
            LOG_ERROR("--list_columns: %d is given twice", i);
            return TR_ERR_ARG;
        }
        seen |= 1u << i;
        if (o->multi_hot_sizes.n == PREPARE_CAT && o->multi_hot_sizes.v[i] > 1) {
            LOG_ERROR("--multi_hot_sizes: cat_%d is a list column (--list_columns): its bags come from the data, "
                      "size %lld cannot be materialized for it",
                      i, (long long)o->multi_hot_sizes.v[i]);
            LOG_HINT("give the list columns size 1 in --multi_hot_sizes");
            return TR_ERR_ARG;
        }
    }
    if ((int64_t)o->max_hotness * o->list_columns.n > PREPARE_LIST_MAX) {
        LOG_ERROR("--max_hotness %d x %d list columns: a line would hold over %d list values", o->max_hotness,
                  o->list_columns.n, PREPARE_LIST_MAX);
        LOG_HINT("lower --max_hotness");
        return TR_ERR_ARG;
    }
    const char *mh_flag = tr_opt_given(opts, "multi_hot_seed")           ? "multi_hot_seed"
                          : tr_opt_given(opts, "multi_hot_distribution") ? "multi_hot_distribution"
                                                                         : NULL;
    if (!o->multi_hot_sizes.n && mh_flag) {
        LOG_ERROR("--%s needs --multi_hot_sizes", mh_flag);
        LOG_HINT("--multi_hot_sizes makes the tables multi-hot; the seed and the distribution are its draws'");
        return TR_ERR_ARG;
    }
    if (o->hash_missing == HASH_MISSING_RESERVED && o->max_ind_range < 2) {
        LOG_ERROR("--max_ind_range: %lld leaves no id for present values with --hash_missing reserved; "
                  "give M >= 2", (long long)o->max_ind_range);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

static enum tr_status check_inputs(struct prepare_input *in, int n)
{
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(in[i].path, &st) != 0) {
            LOG_ERROR("cannot open input '%s': %s", in[i].path, strerror(errno));
            return TR_ERR_ARG;
        }
        if (!S_ISREG(st.st_mode)) {
            LOG_ERROR("input '%s' is not a regular file", in[i].path);
            return TR_ERR_ARG;
        }
        if (access(in[i].path, R_OK) != 0) {
            LOG_ERROR("cannot open input '%s': %s", in[i].path, strerror(errno));
            return TR_ERR_ARG;
        }
        in[i].bytes = (int64_t)st.st_size;
    }
    return TR_OK;
}

static void format_cards(const int64_t *card, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < PREPARE_CAT && k + 24 < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ",%lld" : "%lld", (long long)card[i]);
}

/* ---- the run ------------------------------------------------------------------------------- */

static enum tr_status prepare_run(const struct prepare_opts *o, struct tr_opt *opts, char **files, int nfiles)
{
    enum tr_status rc = TR_OK;
    double t0 = tr_clock_now();
    struct prepare_ctx x;
    memset(&x, 0, sizeof x);
    x.o = o;
    char *out = NULL, *tmp = NULL, *scratch = NULL, *stage = NULL, *train_dir = NULL, *test_dir = NULL,
         *old = NULL;
    struct prepare_input *inputs = tr_calloc((size_t)nfiles, sizeof *inputs);
    int made_tmp = 0;
    int64_t tsv_bytes = 0, pass1_rows = -1;
    int nbuckets = 0, spills = 0;
    if (!inputs)
        return TR_ERR_NOMEM;
    TR_CHECK_GOTO(check_opts(o, opts, nfiles), rc, fail);
    for (int i = 0; i < nfiles; i++)
        inputs[i].path = files[i];
    TR_CHECK_GOTO(check_inputs(inputs, nfiles), rc, fail);
    x.inputs = inputs;
    x.ninputs = nfiles;
    x.nthreads = o->threads > 0 ? o->threads : (int)TR_MAX(1L, sysconf(_SC_NPROCESSORS_ONLN));
    x.hash = o->max_ind_range > 0;
    x.n_train = -1;
    for (int k = 0; k < o->list_columns.n; k++)
        x.lists |= 1u << o->list_columns.v[k];
    prepare_parse_set_lists(x.lists, o->list_separator ? o->list_separator[0] : ',', o->max_hotness);
    int64_t memory_limit = o->memory_limit;

    /* the output directory: refuse to clobber, write next to it, rename at the end */
    out = tr_strdup(o->output);
    if (!out) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/';)
        out[--n] = '\0';
    int st = prepare_dir_state(out);
    if (st < 0) {
        LOG_ERROR("--output: '%s' exists and is not a directory", out);
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (st > 0 && !o->force) {
        LOG_ERROR("--output: directory '%s' exists and is not empty", out);
        LOG_HINT("add --force to replace it, or choose another --output");
        rc = TR_ERR_ARG;
        goto fail;
    }
    {
        char suffix[48];
        snprintf(suffix, sizeof suffix, ".tmp-%ld", (long)getpid());
        size_t n = strlen(out);
        tmp = tr_malloc(n + strlen(suffix) + 1);
        if (!tmp) {
            rc = TR_ERR_NOMEM;
            goto fail;
        }
        memcpy(tmp, out, n);
        strcpy(tmp + n, suffix);
    }
    TR_CHECK_GOTO(prepare_remove_stale_staging(out), rc, fail);
    TR_CHECK_GOTO(tr_file_rm_rf(tmp), rc, fail); /* a leftover of a dead process with our pid */
    made_tmp = 1;
    TR_CHECK_GOTO(tr_file_join_to(tmp, ".scratch", &scratch), rc, fail);
    TR_CHECK_GOTO(tr_file_join_to(scratch, "stage", &stage), rc, fail);
    TR_CHECK_GOTO(tr_file_join_to(tmp, "train", &train_dir), rc, fail);
    TR_CHECK_GOTO(tr_file_join_to(tmp, "test", &test_dir), rc, fail);
    TR_CHECK_GOTO(tr_file_mkdir_p(train_dir), rc, fail);
    TR_CHECK_GOTO(tr_file_mkdir_p(test_dir), rc, fail);
    TR_CHECK_GOTO(tr_file_mkdir_p(o->shuffle ? stage : scratch), rc, fail);
    { /* who owns this staging folder, for a later run that finds it left behind */
        char host[256] = "", *owner;
        if (gethostname(host, sizeof host - 2) != 0)
            host[0] = '\0';
        strcat(host, "\n");
        TR_CHECK_GOTO(tr_file_join_to(scratch, "owner", &owner), rc, fail);
        rc = tr_file_write_atomic(owner, host, strlen(host));
        tr_free(owner);
        TR_CHECK_GOTO(rc, rc, fail);
    }

    /* threshold mode: pass 1 counts, then the dictionaries give the cardinalities */
    if (x.hash) {
        x.reserved = o->hash_missing == HASH_MISSING_RESERVED;
        x.M = (uint64_t)o->max_ind_range - (uint64_t)x.reserved;
        x.M_inv = UINT64_MAX / x.M + 1;
        for (int i = 0; i < PREPARE_CAT; i++)
            x.card[i] = o->max_ind_range;
    } else {
        /* the vocabulary comes from the training rows; by fraction their number is known only
           after a first pass, which also records where each chunk's rows start */
        if (o->test_fraction > 0) {
            TR_CHECK_GOTO(prepare_run_pass(&x, PREPARE_PASS_ROWS, 1, &tsv_bytes), rc, fail);
            x.n_train = x.rows - llround(o->test_fraction * (double)x.rows);
        }
        TR_CHECK_GOTO(prepare_counter_new(x.nthreads, memory_limit / 2, scratch, &x.counter), rc, fail);
        prepare_counter_set_lists(x.counter, x.lists);
        TR_CHECK_GOTO(prepare_run_pass(&x, PREPARE_PASS_COUNT, o->test_fraction == 0, &tsv_bytes), rc, fail);
        pass1_rows = x.rows;
        spills = prepare_counter_spills(x.counter);
        TR_CHECK_GOTO(prepare_counter_finish(x.counter, o->frequency_threshold, &x.dict), rc, fail);
        prepare_counter_free(&x.counter);
        for (int i = 0; i < PREPARE_CAT; i++)
            x.card[i] = x.dict.nkept[i] + 1;
    }
    if (o->multi_hot_sizes.n) /* before the write pass: each table's lookup must fit */
        TR_CHECK_GOTO(prepare_multihot_check(x.card, o->multi_hot_sizes.v, memory_limit), rc, fail);
    x.width[PREPARE_COL_LABEL] = 1;
    x.width[PREPARE_COL_NUM] = 2 * PREPARE_NUM;
    for (int i = 0; i < PREPARE_CAT; i++) {
        enum kern_dtype t = feature_spec_cat_dtype(x.card[i]);
        x.idw[i] = t == KERN_I8 ? 1 : t == KERN_I16 ? 2 : 4;
        /* a list: its length, then room for the longest (prepare_lists.c makes it compact) */
        x.width[PREPARE_COL_CAT0 + i] = (x.lists >> i) & 1u ? 4 + (size_t)o->max_hotness * x.idw[i] : x.idw[i];
    }

    /* the write pass */
    TR_CHECK_GOTO(prepare_sink_open(&x.train, o->shuffle ? stage : train_dir, prepare_col_names), rc, fail);
    TR_CHECK_GOTO(prepare_sink_open(&x.test, test_dir, prepare_col_names), rc, fail);
    TR_CHECK_GOTO(prepare_run_pass(&x, PREPARE_PASS_WRITE, x.hash, &tsv_bytes), rc, fail);
    if (pass1_rows >= 0 && pass1_rows != x.rows) {
        LOG_ERROR("the inputs changed while they were prepared (%lld rows, then %lld)", (long long)pass1_rows,
                  (long long)x.rows);
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (x.rows == 0) {
        LOG_ERROR("no valid rows in the input (%lld malformed, %lld empty lines)", (long long)x.nbad,
                  (long long)x.nempty);
        LOG_HINT("the input must be Criteo TSV: label, 13 integers and 26 hex values per line, tab-separated");
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (o->test_fraction > 0 && x.n_train < 0) /* hash mode: the row count is known only now */
        TR_CHECK_GOTO(prepare_sink_move_tail(&x.train, &x.test, llround(o->test_fraction * (double)x.rows),
                                             x.width),
                      rc, fail);
    if (x.train.rows == 0) {
        LOG_ERROR("the training split is empty (%lld rows in all, %lld in the test split)", (long long)x.rows,
                  (long long)x.test.rows);
        LOG_HINT("lower --test_fraction or --test_files");
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (x.test.rows == 0)
        LOG_WARN("the test split is empty");
    int64_t train_rows = x.train.rows, test_rows = x.test.rows;
    int64_t train_bytes = x.train.bytes, test_bytes = x.test.bytes;
    TR_CHECK_GOTO(prepare_sink_close(&x.train), rc, fail);
    TR_CHECK_GOTO(prepare_sink_close(&x.test), rc, fail);
    prepare_dict_release(&x.dict);

    if (o->shuffle) {
        struct prepare_shuffle_cfg sc = {
            .src_dir = stage,
            .dst_dir = train_dir,
            .scratch_dir = scratch,
            .names = prepare_col_names,
            .width = x.width,
            .nrows = train_rows,
            .seed = (uint64_t)o->shuffle_seed,
            .memory_limit = memory_limit,
            .progress = o->progress && isatty(2),
        };
        TR_CHECK_GOTO(prepare_shuffle(&sc, &nbuckets, &train_bytes), rc, fail);
    }
    int32_t most[PREPARE_CAT] = {0};
    if (x.lists) {
        int64_t lbytes = 0;
        TR_CHECK_GOTO(prepare_lists_compact(tmp, x.lists, x.idw, o->max_hotness, most, &lbytes), rc, fail);
        for (int i = 0; i < PREPARE_CAT; i++)
            if ((x.lists >> i) & 1u)
                printf("cat_%d: lists of up to %d ids (max_hotness %d)\n", i, most[i], most[i]);
    }
    if (o->multi_hot_sizes.n) {
        const struct prepare_mh_cfg mc = {tmp, x.card, o->multi_hot_sizes.v, x.idw,
                                          (uint32_t)o->multi_hot_seed, o->progress && isatty(2)};
        double tm = tr_clock_now();
        int64_t mh_bytes = 0;
        TR_CHECK_GOTO(prepare_multihot(&mc, &mh_bytes), rc, fail);
        printf("multi-hot: %lld bytes of bags written in %.2f s (numpy RandomState(%lld), MLPerf's rule)\n",
               (long long)mh_bytes, tr_clock_now() - tm, (long long)o->multi_hot_seed);
    }
    TR_CHECK_GOTO(prepare_write_spec(tmp, x.card, x.hash ? NULL : "train",
                                     o->multi_hot_sizes.n ? o->multi_hot_sizes.v : NULL, x.lists ? most : NULL),
                  rc, fail);
    TR_CHECK_GOTO(tr_file_rm_rf(scratch), rc, fail);
    { /* the reader the trainer uses must accept the result */
        struct dataset ds;
        memset(&ds, 0, sizeof ds);
        enum tr_status vrc = dataset_open_split_binary(&ds, tmp, "feature_spec.yaml");
        int ok = vrc == TR_OK && ds.nsamples[BATCH_TRAIN] == train_rows && ds.nsamples[BATCH_TEST] == test_rows;
        dataset_close(&ds);
        if (vrc == TR_ERR_NOMEM) {
            rc = vrc;
            goto fail;
        }
        if (!ok) {
            LOG_ERROR("the dataset written to '%s' does not load back", tmp);
            rc = TR_ERR_INTERNAL;
            goto fail;
        }
    }

    /* into place: an existing (empty, or --force) directory is moved aside first, removed last */
    if (prepare_dir_state(out) > 0 || access(out, F_OK) == 0) {
        size_t n = strlen(tmp);
        old = tr_malloc(n + 8);
        if (!old) {
            rc = TR_ERR_NOMEM;
            goto fail;
        }
        snprintf(old, n + 8, "%s.old", tmp);
        if (rename(out, old) != 0) {
            LOG_ERROR("cannot move '%s' aside: %s", out, strerror(errno));
            rc = TR_ERR_IO;
            goto fail;
        }
    }
    if (rename(tmp, out) != 0) {
        LOG_ERROR("cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        if (old && rename(old, out) != 0)
            LOG_ERROR("the previous output is now '%s'", old);
        rc = TR_ERR_IO;
        goto fail;
    }
    made_tmp = 0;
    if (old && tr_file_rm_rf(old) != TR_OK)
        LOG_WARN("cannot remove the previous output, now '%s'", old);

    double dt = tr_clock_now() - t0;
    double mbs = dt > 0 ? (double)tsv_bytes / 1e6 / dt : 0.0;
    char cards[26 * 12];
    format_cards(x.card, cards, sizeof cards);
    if (x.nbad)
        LOG_WARN("skipped %lld malformed line%s (the first %d shown above)", (long long)x.nbad,
                 x.nbad == 1 ? "" : "s", x.shown);
    if (spills)
        printf("counting spilled %d sorted run%s to disk (counts stay exact)\n", spills, spills == 1 ? "" : "s");
    if (nbuckets > 1)
        printf("shuffle went through %d bucket files\n", nbuckets);
    for (int s = 0; s < 2; s++)
        printf("%s: %lld rows, %lld bytes, cardinalities %s; %.2f s, %.1f MB/s of TSV (%.1f MB/s per thread, %d "
               "threads)\n",
               s ? "test" : "train", (long long)(s ? test_rows : train_rows),
               (long long)(s ? test_bytes : train_bytes), cards, dt, mbs, mbs / x.nthreads, x.nthreads);
    printf("prepared %lld rows (%lld bytes of TSV, %lld malformed and %lld empty lines skipped) into '%s'\n",
           (long long)x.rows, (long long)tsv_bytes, (long long)x.nbad, (long long)x.nempty, out);
    fflush(stdout);
exit:
    prepare_counter_free(&x.counter);
    prepare_dict_release(&x.dict);
    tr_free(x.chunk_row0);
    TR_CHECK_IGNORE(prepare_sink_close(&x.train), rc);
    TR_CHECK_IGNORE(prepare_sink_close(&x.test), rc);
    if (made_tmp && tr_file_rm_rf(tmp) != TR_OK)
        LOG_WARN("cannot remove the temporary directory '%s'", tmp);
    tr_free(inputs);
    tr_free(out);
    tr_free(tmp);
    tr_free(scratch);
    tr_free(stage);
    tr_free(train_dir);
    tr_free(test_dir);
    tr_free(old);
    return rc;
fail:
    goto exit;
}

static void on_signal(int sig)
{
    (void)sig;
    prepare_interrupted = 1;
}

int prepare_main(int argc, char **argv)
{
    struct prepare_opts o;
    memset(&o, 0, sizeof o);
    struct tr_opt opts[MAX_OPTS];
    char **args = NULL;
    int want = 0, rest = 0, nargs = 0;
    tr_log_init();
    prepare_parse_init();
    opts_fill(&o, opts);
    enum tr_status rc = reorder_args(opts, argc, argv, &args, &nargs);
    if (rc == TR_OK)
        rc = tr_opt_parse(opts, nargs, args, &rest, &want);
    if (rc == TR_OK && (want & TR_OPT_WANT_HELP)) {
        tr_opt_print_help(opts, usage, stdout);
    } else if (rc == TR_OK && (want & TR_OPT_WANT_VERSION)) {
        tr_version_print(stdout, "terarec data prepare", want & TR_OPT_WANT_PARSABLE, kern_blas_info());
    } else if (rc == TR_OK) {
        prepare_parse_init_transform((enum prepare_num_transform)o.numerical_transform);
        struct sigaction sa, old_int, old_term;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        prepare_interrupted = 0;
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        rc = prepare_run(&o, opts, args + rest, nargs - rest);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    if (rc == TR_ERR_NOMEM) {
        LOG_ERROR("data prepare: out of memory");
        LOG_HINT("lower --threads, --chunk_size or --memory_limit");
    } else if (rc == TR_ERR_INTERRUPTED) {
        LOG_ERROR("data prepare: interrupted; nothing was written");
    } else if (rc == TR_ERR_INTERNAL) {
        LOG_ERROR("data prepare failed: %s", tr_strerror(rc));
    }
    tr_opt_release(opts);
    tr_free(args);
    return tr_status_exit_code(rc);
}
