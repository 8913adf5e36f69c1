/* prepare_pass.c: one pass of `terarec data prepare` over the text
 * (prepare_run_pass): the work functions, run on any thread per chunk (rows:
 * count the valid rows; count: the training rows' values into the counter;
 * write: rows into columns of ids), and the consumer, on the calling thread in
 * input order, which reports malformed lines and sends each row to the train or
 * the test sink. It opens no file and decides nothing about the output directory. */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the split-binary files are little-endian; this writer stores native integers"
#endif

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

/* The id of present value v of column i, by mode. */
static inline uint32_t id_of(const struct prepare_ctx *x, int i, uint64_t v)
{
    if (!x->hash)
        return prepare_dict_lookup(&x->dict, i, v);
    uint32_t id = (v >> 32) == 0 ? fastmod32((uint32_t)v, x->M_inv, (uint32_t)x->M) : (uint32_t)(v % x->M);
    return x->reserved ? id + 1 : id;
}

/* A list column's row: its length (u32), then max_hotness ids of x->idw[i] bytes
 * (the unused ones 0), as prepare_lists.c reads them. */
static void store_list(const struct prepare_ctx *x, uint8_t *col, int64_t k, int i, const struct prepare_row *row)
{
    uint8_t *r = col + (size_t)k * x->width[PREPARE_COL_CAT0 + i];
    const uint32_t n = row->list_n[i];
    memcpy(r, &n, 4);
    memset(r + 4, 0, x->width[PREPARE_COL_CAT0 + i] - 4);
    for (uint32_t j = 0; j < n; j++)
        store_id(r + 4, x->idw[i], j, id_of(x, i, row->list_v[row->list_at[i] + j]));
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
    for (int i = 0; i < PREPARE_CAT; i++) {
        if ((x->lists >> i) & 1u) {
            store_list(x, c->col[PREPARE_COL_CAT0 + i], k, i, row);
            continue;
        }
        /* a missing value is 0 (as 0 % M; reserved: 0 only for missing) */
        const uint32_t id = (row->cat_present >> i) & 1u ? id_of(x, i, row->cat[i]) : 0;
        store_id(c->col[PREPARE_COL_CAT0 + i], x->width[PREPARE_COL_CAT0 + i], k, id);
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
    if (x->pass == PREPARE_PASS_ROWS) {
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
    } else if (x->pass == PREPARE_PASS_COUNT && x->chunk_row0 &&
               (c->seq >= x->nchunks || x->chunk_row0[c->seq] != x->rows)) {
        prepare_progress_clear();
        LOG_ERROR("the inputs changed while they were prepared (chunk %lld starts at row %lld, then %lld)",
                  (long long)c->seq, (long long)(c->seq < x->nchunks ? x->chunk_row0[c->seq] : -1),
                  (long long)x->rows);
        return TR_ERR_ARG;
    }
    if (x->pass == PREPARE_PASS_WRITE) {
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

enum tr_status prepare_run_pass(struct prepare_ctx *x, int pass, int report, int64_t *tsv_bytes)
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
        .work = pass == PREPARE_PASS_ROWS ? rows_work : pass == PREPARE_PASS_COUNT ? count_work : write_work,
        .consume = consume,
        .ctx = x,
        .label = pass == PREPARE_PASS_ROWS ? "rows" : pass == PREPARE_PASS_COUNT ? "count" : "write",
        .progress = x->o->progress && isatty(2),
    };
    return prepare_pipe_run(&pc, tsv_bytes);
}
