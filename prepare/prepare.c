/* prepare.c: `terarec data prepare`: Criteo TSV (plain or gzip) to the seed's
 * split-binary dataset plus feature_spec.yaml. Options, checks of the inputs and
 * of the output directory, the passes (threshold mode: count, then write; hash
 * mode: write only; threshold mode with --test_fraction: rows, count, write), the
 * train/test split, the shuffle, the yaml, and the atomic
 * rename of OUT.tmp-PID into place. Parsing, threading, counting and shuffling
 * live in the sibling prepare_*.c files. The threshold vocabulary is counted on the
 * training rows only (the seed counts the test rows too, a leak). It writes no validation split (the seed
 * writes one but never reads it).
 *
 * Memory: the counting tables take --memory_limit / 2 (and as much again while a
 * spill sorts), a shuffle bucket at most --memory_limit / 2 plus --memory_limit / 4
 * of bucket buffers; on top come (2 * threads + 2) chunks of --chunk_size text and
 * their rows, and in threshold mode the dictionaries of kept values (~24 bytes each). */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the split-binary files are little-endian; this writer stores native integers"
#endif

#define MAX_OPTS 24

struct prepare_opts {
    char *output;
    int64_t frequency_threshold;
    int64_t max_ind_range;
    int test_files;
    double test_fraction;
    int shuffle;
    int64_t shuffle_seed;
    int threads;
    int64_t memory_limit;
    int64_t chunk_size;
    int strict, force, progress;
    int numerical_transform;   /* enum prepare_num_transform */
    int hash_missing;          /* HASH_MISSING_* */
};

enum { HASH_MISSING_SHARED = 0, HASH_MISSING_RESERVED = 1 };
static const char *const transform_choices[] = {"nvidia", "log1p", NULL};
static const char *const hash_missing_choices[] = {"shared", "reserved", NULL};

enum { PASS_ROWS, PASS_COUNT, PASS_WRITE };

/* State shared by the work threads (read-only during a pass) and the consumer. */
struct prepare_ctx {
    const struct prepare_opts *o;
    const struct prepare_input *inputs;
    int ninputs;
    int hash;                  /* hash mode */
    int pass;
    int reserved;              /* hash mode: id 0 only for missing, 1 + h % (R - 1) for the rest */
    uint64_t M;                /* hash mode modulus (R, or R - 1 when reserved) */
    uint64_t M_inv;            /* fastmod constant for 32-bit values */
    struct prepare_counter *counter;
    struct prepare_dict dict;
    size_t width[PREPARE_NCOL];
    int64_t card[PREPARE_CAT];
    int nthreads;
    /* consumer state */
    int cur_file;
    int64_t line_base, rows, nbad, nempty;
    int report, shown;
    int64_t n_train;           /* rows before the test split by position; -1 unknown */
    int64_t *chunk_row0;       /* (nchunks) rows before chunk seq, from the PASS_ROWS pass; NULL without one */
    int64_t nchunks, chunks_cap;
    struct prepare_sink train, test;
};

static const char *col_names[PREPARE_NCOL] = {
    "label.bin",  "numerical.bin", "cat_0.bin",  "cat_1.bin",  "cat_2.bin",  "cat_3.bin",  "cat_4.bin",
    "cat_5.bin",  "cat_6.bin",     "cat_7.bin",  "cat_8.bin",  "cat_9.bin",  "cat_10.bin", "cat_11.bin",
    "cat_12.bin", "cat_13.bin",    "cat_14.bin", "cat_15.bin", "cat_16.bin", "cat_17.bin", "cat_18.bin",
    "cat_19.bin", "cat_20.bin",    "cat_21.bin", "cat_22.bin", "cat_23.bin", "cat_24.bin", "cat_25.bin",
};

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
    "  exit status  0 done, 2 bad usage or input, 1 other failure, 130 interrupted";

static void opts_fill(struct prepare_opts *o, struct tr_opt t[MAX_OPTS])
{
    const struct tr_opt tab[] = {
        {"output", TR_OPT_PATH, &o->output, NULL, "output directory (required)", 1, 0, NULL, NULL, 0, NULL},
        {"frequency_threshold", TR_OPT_INT64, &o->frequency_threshold, "15",
         "threshold mode: keep values seen at least T times (T <= 1 keeps all)", 0, 1e18, NULL, NULL, 0, NULL},
        {"max_ind_range", TR_OPT_INT64, &o->max_ind_range, "0",
         "hash mode when > 0: id = int(hex, 16) % M, cardinality M", 0, 2147483647.0, NULL, NULL, 0, NULL},
        {"test_files", TR_OPT_INT, &o->test_files, "0", "the last K input files are the test split", 0, 1e6,
         NULL, NULL, 0, NULL},
        {"test_fraction", TR_OPT_DOUBLE, &o->test_fraction, "0",
         "the last F of all rows (by position) are the test split, 0 < F < 1", 0, 1, NULL, NULL, 0, NULL},
        {"shuffle", TR_OPT_BOOL, &o->shuffle, "true", "shuffle the training rows (seeded permutation)", 1, 0,
         NULL, NULL, 0, NULL},
        {"shuffle_seed", TR_OPT_INT64, &o->shuffle_seed, "0", "seed of the training-row permutation", 0,
         9.2e18, NULL, NULL, 0, NULL},
        {"threads", TR_OPT_INT, &o->threads, "0", "parsing threads (0: every CPU); the output does not depend on it",
         0, 4096, NULL, NULL, 0, NULL},
        {"memory_limit", TR_OPT_BYTES, &o->memory_limit, "4G",
         "memory for counting tables and the shuffle; beyond it: spill to disk", 16384, 9.2e18, NULL, NULL, 0, NULL},
        {"chunk_size", TR_OPT_BYTES, &o->chunk_size, "8M", "text per parallel work unit", 256, 1073741824.0,
         NULL, NULL, 0, NULL},
        {"strict", TR_OPT_BOOL, &o->strict, "false", "a malformed line is fatal (exit 2, nothing written)", 1,
         0, NULL, NULL, 0, NULL},
        {"force", TR_OPT_BOOL, &o->force, "false", "replace an existing non-empty output directory", 1, 0, NULL,
         NULL, 0, NULL},
        {"progress", TR_OPT_BOOL, &o->progress, "true", "progress bar on stderr when it is a terminal", 1, 0,
         NULL, NULL, 0, NULL},
        {"numerical_transform", TR_OPT_ENUM, &o->numerical_transform, "nvidia",
         "nvidia: ln(x + 3), x <= -3 gives 0 (the seed); log1p: ln(1 + max(x, 0)) (dlrm, TorchRec, MLPerf)", 1, 0,
         transform_choices, NULL, 0, NULL},
        {"hash_missing", TR_OPT_ENUM, &o->hash_missing, "shared",
         "hash mode: shared: missing gives 0, which values hashing to 0 share; reserved: missing gives 0, "
         "others 1 + h % (M - 1)",
         1, 0, hash_missing_choices, NULL, 0, NULL},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL},
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

/* ---- work functions (any thread) -------------------------------------------------------- */

static void note_bad(struct prepare_chunk *c, int64_t line, const char *s, size_t n, enum prepare_bad why, int field)
{
    if (c->nerrs < PREPARE_MAX_ERRS) {
        struct prepare_err *e = &c->errs[c->nerrs++];
        e->line = line;
        prepare_describe_bad(s, n, why, field, e->msg, sizeof e->msg);
    }
    c->nbad++;
}

/* Splits chunk c into lines; counts empty and malformed ones (the first few kept
 * with their line numbers) and calls fn(arg, row) for each valid row, in order.
 * Sets c->nlines. Stops at fn's first error. */
static enum tr_status each_row(struct prepare_chunk *c, enum tr_status (*fn)(void *arg, const struct prepare_row *row),
                               void *arg)
{
    const char *p = c->buf, *end = c->buf + c->len;
    int64_t line = 0;
    struct prepare_row row;
    while (p < end) {
        const char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q)
            q = end;
        size_t n = (size_t)(q - p);
        line++;
        if (n && p[n - 1] == '\r')
            n--;
        if (n == 0) {
            c->nempty++;
        } else {
            int field;
            enum prepare_bad why = prepare_parse_line(p, n, &row, &field);
            if (why != PREPARE_LINE_OK)
                note_bad(c, line, p, n, why, field);
            else
                TR_CHECK(fn(arg, &row));
        }
        p = q + 1;
    }
    c->nlines = line;
    return TR_OK;
}

struct row_arg {
    struct prepare_ctx *x;
    struct prepare_chunk *c;
    int thread;
};

static enum tr_status rows_row(void *arg, const struct prepare_row *row)
{
    (void)row;
    ((struct row_arg *)arg)->c->nrows++;
    return TR_OK;
}

static enum tr_status rows_work(void *vctx, int thread, struct prepare_chunk *c)
{
    struct row_arg a = {vctx, c, thread};
    return each_row(c, rows_row, &a);
}

/* 1 if the row about to be numbered c->nrows in chunk c belongs to the test split */
static int in_test(const struct prepare_ctx *x, const struct prepare_chunk *c)
{
    if (x->o->test_files > 0)
        return c->file >= x->ninputs - x->o->test_files;
    if (c->seq >= x->nchunks) /* the inputs grew since the rows pass; the consumer stops the run */
        return 1;
    return x->chunk_row0[c->seq] + c->nrows >= x->n_train;
}

static enum tr_status count_row(void *arg, const struct prepare_row *row)
{
    struct row_arg *a = arg;
    int test = in_test(a->x, a->c);
    a->c->nrows++;
    return test ? TR_OK : prepare_counter_add(a->x->counter, a->thread, row); /* the vocabulary: train rows only */
}

static enum tr_status count_work(void *vctx, int thread, struct prepare_chunk *c)
{
    struct row_arg a = {vctx, c, thread};
    return each_row(c, count_row, &a);
}

static enum tr_status ensure_rows(struct prepare_chunk *c, const size_t *width, int64_t need)
{
    if (need <= c->rows_cap)
        return TR_OK;
    for (int k = 0; k < PREPARE_NCOL; k++) {
        uint8_t *np = tr_realloc(c->col[k], (size_t)need * width[k]);
        if (!np)
            return TR_ERR_NOMEM;
        c->col[k] = np;
    }
    c->rows_cap = need;
    return TR_OK;
}

/* a % m for a < 2^32, m < 2^32 with one multiplication pair (Lemire's fastmod) */
static inline uint32_t fastmod32(uint32_t a, uint64_t m_inv, uint32_t m)
{
    return (uint32_t)(((unsigned __int128)(m_inv * a) * m) >> 64);
}

static inline void store_id(uint8_t *col, size_t w, int64_t k, uint32_t id)
{
    if (w == 1) {
        col[k] = (uint8_t)id;
    } else if (w == 2) {
        uint16_t v = (uint16_t)id;
        memcpy(col + 2 * k, &v, 2);
    } else {
        memcpy(col + 4 * k, &id, 4);
    }
}

static enum tr_status write_row(void *arg, const struct prepare_row *row)
{
    struct row_arg *a = arg;
    struct prepare_ctx *x = a->x;
    struct prepare_chunk *c = a->c;
    const int64_t k = c->nrows;
    if (k == c->rows_cap)
        TR_CHECK(ensure_rows(c, x->width, 2 * c->rows_cap));
    c->col[PREPARE_COL_LABEL][k] = row->label;
    memcpy(c->col[PREPARE_COL_NUM] + (size_t)k * (2 * PREPARE_NUM), row->num, 2 * PREPARE_NUM);
    if (x->hash) {
        for (int i = 0; i < PREPARE_CAT; i++) { /* a missing value is 0, and 0 % M = 0 */
            uint64_t v = row->cat[i];
            uint32_t id = (v >> 32) == 0 ? fastmod32((uint32_t)v, x->M_inv, (uint32_t)x->M) : (uint32_t)(v % x->M);
            if (x->reserved)
                id = (row->cat_present >> i) & 1u ? id + 1 : 0;
            store_id(c->col[PREPARE_COL_CAT0 + i], x->width[PREPARE_COL_CAT0 + i], k, id);
        }
    } else {
        for (int i = 0; i < PREPARE_CAT; i++) {
            uint32_t id = (row->cat_present >> i) & 1u ? prepare_dict_lookup(&x->dict, i, row->cat[i]) : 0;
            store_id(c->col[PREPARE_COL_CAT0 + i], x->width[PREPARE_COL_CAT0 + i], k, id);
        }
    }
    c->nrows = k + 1;
    return TR_OK;
}

static enum tr_status write_work(void *vctx, int thread, struct prepare_chunk *c)
{
    struct row_arg a = {vctx, c, thread};
    TR_CHECK(ensure_rows(c, a.x->width, (int64_t)(c->len / 160) + 64));
    c->nrows = 0;
    return each_row(c, write_row, &a);
}

/* ---- the consumer (calling thread, chunks in input order) -------------------------------- */

static enum tr_status consume(void *vctx, struct prepare_chunk *c)
{
    struct prepare_ctx *x = vctx;
    if (c->file != x->cur_file) {
        x->cur_file = c->file;
        x->line_base = 0;
    }
    const char *path = x->inputs[c->file].path;
    if (x->report && c->nbad) {
        if (x->o->strict) {
            prepare_progress_clear();
            LOG_ERROR("%s:%lld: %s", path, (long long)(x->line_base + c->errs[0].line), c->errs[0].msg);
            LOG_HINT("without --strict malformed lines are skipped and counted");
            return TR_ERR_ARG;
        }
        for (int i = 0; i < c->nerrs && x->shown < PREPARE_MAX_ERRS; i++, x->shown++) {
            prepare_progress_clear();
            LOG_WARN("%s:%lld: %s (line skipped)", path, (long long)(x->line_base + c->errs[i].line),
                     c->errs[i].msg);
        }
    }
    x->line_base += c->nlines;
    x->nbad += c->nbad;
    x->nempty += c->nempty;
    if (x->pass == PASS_ROWS) {
        if (x->nchunks == x->chunks_cap) {
            int64_t cap = x->chunks_cap ? 2 * x->chunks_cap : 256;
            int64_t *np = tr_realloc(x->chunk_row0, (size_t)cap * sizeof *np);
            if (!np)
                return TR_ERR_NOMEM;
            x->chunk_row0 = np;
            x->chunks_cap = cap;
        }
        TR_ASSERT(c->seq == x->nchunks);
        x->chunk_row0[x->nchunks++] = x->rows;
    } else if (x->pass == PASS_COUNT && x->chunk_row0 &&
               (c->seq >= x->nchunks || x->chunk_row0[c->seq] != x->rows)) {
        prepare_progress_clear();
        LOG_ERROR("the inputs changed while they were prepared (chunk %lld starts at row %lld, then %lld)",
                  (long long)c->seq, (long long)(c->seq < x->nchunks ? x->chunk_row0[c->seq] : -1),
                  (long long)x->rows);
        return TR_ERR_ARG;
    }
    if (x->pass == PASS_WRITE) {
        int64_t r0 = x->rows, n = c->nrows;
        if (x->o->test_files > 0) {
            struct prepare_sink *s = c->file >= x->ninputs - x->o->test_files ? &x->test : &x->train;
            TR_CHECK(prepare_sink_put(s, c, 0, n, x->width));
        } else if (x->n_train >= 0) {
            int64_t k = TR_MAX((int64_t)0, TR_MIN(n, x->n_train - r0));
            TR_CHECK(prepare_sink_put(&x->train, c, 0, k, x->width));
            TR_CHECK(prepare_sink_put(&x->test, c, k, n - k, x->width));
        } else {
            TR_CHECK(prepare_sink_put(&x->train, c, 0, n, x->width)); /* the tail moves to test at the end */
        }
    }
    x->rows += c->nrows;
    return TR_OK;
}

static enum tr_status run_pass(struct prepare_ctx *x, int pass, int report, int64_t *tsv_bytes)
{
    x->pass = pass;
    x->report = report;
    x->cur_file = -1;
    x->line_base = x->rows = x->nbad = x->nempty = 0;
    struct prepare_pipe_cfg pc = {
        .inputs = x->inputs,
        .ninputs = x->ninputs,
        .threads = x->nthreads,
        .chunk_size = (size_t)x->o->chunk_size,
        .work = pass == PASS_ROWS ? rows_work : pass == PASS_COUNT ? count_work : write_work,
        .consume = consume,
        .ctx = x,
        .label = pass == PASS_ROWS ? "rows" : pass == PASS_COUNT ? "count" : "write",
        .progress = x->o->progress && isatty(2),
    };
    return prepare_pipe_run(&pc, tsv_bytes);
}

/* ---- checks, the feature spec, the output directory -------------------------------------- */

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

/* 1 if dir exists and holds anything, 0 if empty or absent, -1 if it is not a directory */
static int dir_state(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    if (!S_ISDIR(st.st_mode))
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return 1;
    int any = 0;
    struct dirent *e;
    while (!any && (e = readdir(d)) != NULL)
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

/* The host name a staging folder's owner wrote into DIR.tmp-PID/.scratch/owner;
 * "" when there is none (an older run, or one past its scratch stage). */
static enum tr_status staging_owner(const char *stage_dir, char *host, size_t n)
{
    host[0] = '\0';
    char *scratch = tr_file_join(stage_dir, ".scratch"), *p = scratch ? tr_file_join(scratch, "owner") : NULL;
    if (!p) {
        tr_free(scratch);
        return TR_ERR_NOMEM;
    }
    FILE *fp = fopen(p, "r");
    if (fp) {
        if (!fgets(host, (int)n, fp))
            host[0] = '\0';
        host[strcspn(host, "\n")] = '\0';
        fclose(fp);
    }
    tr_free(p);
    tr_free(scratch);
    return TR_OK;
}

/* Removes the staging folders OUT.tmp-PID (and OUT.tmp-PID.old) that runs killed
 * before they could clean up left next to `out`: those whose process no longer
 * exists on this host. Folders of live processes, of this process and of other
 * hosts are left alone. Prints one line for each folder removed. Failing to
 * remove one is a warning, not an error: the run does not need it gone.
 * TR_ERR_NOMEM. */
static enum tr_status remove_stale_staging(const char *out)
{
    enum tr_status rc = TR_OK;
    const char *slash = strrchr(out, '/');
    char *parent = tr_strdup(slash ? out : ".");
    const char *base = slash ? slash + 1 : out;
    if (!parent)
        return TR_ERR_NOMEM;
    if (slash)
        parent[slash == out ? 1 : slash - out] = '\0';
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    const size_t nb = strlen(base);
    DIR *d = opendir(parent);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        if (strncmp(name, base, nb) != 0 || strncmp(name + nb, ".tmp-", 5) != 0)
            continue;
        char *end;
        errno = 0;
        long pid = strtol(name + nb + 5, &end, 10);
        if (errno || end == name + nb + 5 || pid <= 0 || (*end && strcmp(end, ".old") != 0))
            continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* ours (removed by the caller), alive, or not ours to judge */
        char *path = tr_file_join(parent, name), owner[256];
        if (!path || (rc = staging_owner(path, owner, sizeof owner)) != TR_OK) {
            tr_free(path);
            rc = TR_ERR_NOMEM;
            break;
        }
        if (owner[0] && strcmp(owner, host) != 0) {
            LOG_WARN("leaving staging folder '%s' alone: it belongs to process %ld on host '%s'", path, pid, owner);
        } else if (tr_file_rm_rf(path) == TR_OK) {
            printf("removed stale staging folder '%s' of process %ld, which no longer runs\n", path, pid);
            fflush(stdout);
        } else {
            LOG_WARN("cannot remove stale staging folder '%s' of process %ld", path, pid);
        }
        tr_free(path);
    }
    if (d)
        closedir(d);
    tr_free(parent);
    return rc;
}

static enum tr_status list_add(char ***v, int *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static enum tr_status list_add(char ***v, int *n, const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **nv = tr_realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv)
        return TR_ERR_NOMEM;
    *v = nv;
    if (!(nv[*n] = tr_strdup(buf)))
        return TR_ERR_NOMEM;
    (*n)++;
    return TR_OK;
}

static int feature_cmp(const void *a, const void *b)
{
    return strcmp(((const struct feature_spec_feature *)a)->name, ((const struct feature_spec_feature *)b)->name);
}

/* The seed's DLRM FeatureSpec: features sorted by name (as yaml.dump), mappings test then train. */
static enum tr_status build_spec(struct feature_spec *fs, const int64_t *card)
{
    memset(fs, 0, sizeof *fs);
    for (int j = 0; j < PREPARE_NUM; j++)
        TR_CHECK(list_add(&fs->numerical, &fs->nnumerical, "num_%d", j));
    for (int i = 0; i < PREPARE_CAT; i++)
        TR_CHECK(list_add(&fs->categorical, &fs->ncategorical, "cat_%d.bin", i));
    TR_CHECK(list_add(&fs->label, &fs->nlabel, "label"));

    int nf = PREPARE_NUM + PREPARE_CAT + 1;
    fs->features = tr_calloc((size_t)nf, sizeof *fs->features);
    if (!fs->features)
        return TR_ERR_NOMEM;
    for (int f = 0; f < nf; f++) {
        struct feature_spec_feature *ft = &fs->features[f];
        const char *name, *dtype;
        ft->cardinality = -1;
        if (f < PREPARE_NUM) {
            name = fs->numerical[f];
            dtype = "float16";
        } else if (f < PREPARE_NUM + PREPARE_CAT) {
            name = fs->categorical[f - PREPARE_NUM];
            ft->cardinality = card[f - PREPARE_NUM];
            dtype = feature_spec_dtype_name(feature_spec_cat_dtype(ft->cardinality));
        } else {
            name = "label";
            dtype = "bool";
        }
        ft->name = tr_strdup(name);
        ft->dtype = tr_strdup(dtype);
        fs->nfeatures = f + 1;
        if (!ft->name || !ft->dtype)
            return TR_ERR_NOMEM;
    }
    qsort(fs->features, (size_t)nf, sizeof *fs->features, feature_cmp);

    static const char *const splits[2] = {"test", "train"};
    fs->mappings = tr_calloc(2, sizeof *fs->mappings);
    if (!fs->mappings)
        return TR_ERR_NOMEM;
    for (int m = 0; m < 2; m++) {
        struct feature_spec_mapping *mp = &fs->mappings[m];
        fs->nmappings = m + 1;
        if (!(mp->name = tr_strdup(splits[m])))
            return TR_ERR_NOMEM;
        mp->chunks = tr_calloc(PREPARE_NCOL, sizeof *mp->chunks);
        if (!mp->chunks)
            return TR_ERR_NOMEM;
        for (int k = 0; k < PREPARE_NCOL; k++) {
            struct feature_spec_chunk *ch = &mp->chunks[k];
            mp->nchunks = k + 1;
            if (!(ch->type = tr_strdup("split_binary")))
                return TR_ERR_NOMEM;
            /* chunk order as the seed: numerical, label, cat_0..cat_25 */
            int col = k == 0 ? PREPARE_COL_NUM : k == 1 ? PREPARE_COL_LABEL : k;
            if (col == PREPARE_COL_NUM) {
                for (int j = 0; j < PREPARE_NUM; j++)
                    TR_CHECK(list_add(&ch->features, &ch->nfeatures, "num_%d", j));
            } else if (col == PREPARE_COL_LABEL) {
                TR_CHECK(list_add(&ch->features, &ch->nfeatures, "label"));
            } else {
                TR_CHECK(list_add(&ch->features, &ch->nfeatures, "cat_%d.bin", col - PREPARE_COL_CAT0));
            }
            TR_CHECK(list_add(&ch->files, &ch->nfiles, "%s/%s", splits[m], col_names[col]));
        }
    }
    return TR_OK;
}

static enum tr_status write_spec(const char *dir, const int64_t *card, const char *vocabulary_rows)
{
    enum tr_status rc = TR_OK;
    struct feature_spec fs;
    FILE *fp = NULL;
    char *path;
    TR_CHECK(tr_file_join_to(dir, "feature_spec.yaml", &path));
    TR_CHECK_GOTO(build_spec(&fs, card), rc, exit);
    if (vocabulary_rows && !(fs.vocabulary_rows = tr_strdup(vocabulary_rows))) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    fp = fopen(path, "w");
    if (!fp) {
        LOG_ERROR("cannot create '%s': %s", path, strerror(errno));
        rc = TR_ERR_IO;
        goto exit;
    }
    errno = 0;
    rc = feature_spec_write(&fs, fp);
    int e = errno;
    if (fclose(fp) != 0 || rc != TR_OK) {
        LOG_ERROR("cannot write '%s': %s", path, strerror(rc != TR_OK && e ? e : errno ? errno : EIO));
        rc = TR_ERR_IO;
    }
exit:
    feature_spec_release(&fs);
    tr_free(path);
    return rc;
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
    int64_t memory_limit = o->memory_limit;

    /* the output directory: refuse to clobber, write next to it, rename at the end */
    out = tr_strdup(o->output);
    if (!out) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/';)
        out[--n] = '\0';
    int st = dir_state(out);
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
    TR_CHECK_GOTO(remove_stale_staging(out), rc, fail);
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
            TR_CHECK_GOTO(run_pass(&x, PASS_ROWS, 1, &tsv_bytes), rc, fail);
            x.n_train = x.rows - llround(o->test_fraction * (double)x.rows);
        }
        TR_CHECK_GOTO(prepare_counter_new(x.nthreads, memory_limit / 2, scratch, &x.counter), rc, fail);
        TR_CHECK_GOTO(run_pass(&x, PASS_COUNT, o->test_fraction == 0, &tsv_bytes), rc, fail);
        pass1_rows = x.rows;
        spills = prepare_counter_spills(x.counter);
        TR_CHECK_GOTO(prepare_counter_finish(x.counter, o->frequency_threshold, &x.dict), rc, fail);
        prepare_counter_free(&x.counter);
        for (int i = 0; i < PREPARE_CAT; i++)
            x.card[i] = x.dict.nkept[i] + 1;
    }
    x.width[PREPARE_COL_LABEL] = 1;
    x.width[PREPARE_COL_NUM] = 2 * PREPARE_NUM;
    for (int i = 0; i < PREPARE_CAT; i++) {
        enum kern_dtype t = feature_spec_cat_dtype(x.card[i]);
        x.width[PREPARE_COL_CAT0 + i] = t == KERN_I8 ? 1 : t == KERN_I16 ? 2 : 4;
    }

    /* the write pass */
    TR_CHECK_GOTO(prepare_sink_open(&x.train, o->shuffle ? stage : train_dir, col_names), rc, fail);
    TR_CHECK_GOTO(prepare_sink_open(&x.test, test_dir, col_names), rc, fail);
    TR_CHECK_GOTO(run_pass(&x, PASS_WRITE, x.hash, &tsv_bytes), rc, fail);
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
            .names = col_names,
            .width = x.width,
            .nrows = train_rows,
            .seed = (uint64_t)o->shuffle_seed,
            .memory_limit = memory_limit,
            .progress = o->progress && isatty(2),
        };
        TR_CHECK_GOTO(prepare_shuffle(&sc, &nbuckets, &train_bytes), rc, fail);
    }
    TR_CHECK_GOTO(write_spec(tmp, x.card, x.hash ? NULL : "train"), rc, fail);
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
    if (dir_state(out) > 0 || access(out, F_OK) == 0) {
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
