/* test_embedding.c: parity tests of emb_fwd and emb_update (sparse SGD/Adagrad)
 * against naive double-precision references: one-hot and multi-hot bags, sum and
 * mean, I32 and I64 ids, column slices, odd widths, range errors, the workspace
 * contract, a finite-difference gradient check and a table of more than 2^31
 * elements. Runs on every backend: tables, ids, offsets, gradients, outputs, the
 * workspace are in backend memory; bad_pos is host memory. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"
#include "../../kernels/kern.h"
#include "../../kernels/kmath.h"
#include "kt_util.h"

static const int64_t widths[] = {1, 3, 7, 16, 17, 33, 128};

/* An int64 (bad_pos) in host memory, where the op writes it (kern.h), holding v;
 * release with free_i64. */
static int64_t *new_i64(int64_t v)
{
    int64_t *p = tr_malloc(sizeof *p);
    TR_ASSERT(p);
    *p = v;
    return p;
}

static int64_t get_i64(const int64_t *d)
{
    return *d;
}

static void set_i64(int64_t *d, int64_t v)
{
    *d = v;
}

static void free_i64(int64_t *d)
{
    tr_free(d);
}

/* ---- inputs ------------------------------------------------------------------------ */

/* A batch of ids: idx64 (nidx) and, for multi-hot, offsets (nbags + 1), on the host
 * and (d_*) in backend memory. */
struct batch {
    int64_t nbags, nidx;
    int64_t *idx64;
    int32_t *idx32;
    int64_t *offsets; /* NULL for one-hot */
    int64_t *d_idx64;
    int32_t *d_idx32;
    int64_t *d_offsets; /* NULL for one-hot */
};

/* Random bags of 0..maxlen ids in [0, rows); bags 0, 2 and the last are empty.
 * one-hot when maxlen == 0. */
static void batch_make(struct batch *b, struct kt_rng *r, int64_t nbags, int64_t rows, int64_t maxlen)
{
    memset(b, 0, sizeof *b);
    b->nbags = nbags;
    if (maxlen == 0) {
        b->nidx = nbags;
    } else {
        b->offsets = tr_malloc((size_t)(nbags + 1) * sizeof(int64_t));
        b->offsets[0] = 0;
        for (int64_t i = 0; i < nbags; i++) {
            int64_t len = kt_below(r, maxlen + 1);
            if (i == 0 || i == 2 || i == nbags - 1)
                len = 0;
            b->offsets[i + 1] = b->offsets[i] + len;
        }
        b->nidx = b->offsets[nbags];
    }
    b->idx64 = tr_malloc((size_t)(b->nidx + 1) * sizeof(int64_t));
    b->idx32 = tr_malloc((size_t)(b->nidx + 1) * sizeof(int32_t));
    for (int64_t i = 0; i < b->nidx; i++) {
        b->idx64[i] = kt_below(r, rows);
        if (i == 1)
            b->idx64[i] = rows - 1; /* the last row is always used */
        b->idx32[i] = (int32_t)b->idx64[i];
    }
    b->d_idx64 = kt_dev_dup(b->idx64, (size_t)(b->nidx + 1) * sizeof(int64_t));
    b->d_idx32 = kt_dev_dup(b->idx32, (size_t)(b->nidx + 1) * sizeof(int32_t));
    if (b->offsets)
        b->d_offsets = kt_dev_dup(b->offsets, (size_t)(nbags + 1) * sizeof(int64_t));
}

static void batch_free(struct batch *b)
{
    kt_dev_release(b->d_idx64, (size_t)(b->nidx + 1) * sizeof(int64_t));
    kt_dev_release(b->d_idx32, (size_t)(b->nidx + 1) * sizeof(int32_t));
    if (b->d_offsets)
        kt_dev_release(b->d_offsets, (size_t)(b->nbags + 1) * sizeof(int64_t));
    tr_free(b->idx64);
    tr_free(b->idx32);
    tr_free(b->offsets);
    memset(b, 0, sizeof *b);
}

/* The ids in backend memory as dtype t. */
static const void *batch_idx(const struct batch *b, enum kern_dtype t)
{
    return t == KERN_I32 ? (const void *)b->d_idx32 : (const void *)b->d_idx64;
}

/* ---- references -------------------------------------------------------------------- */

/* out (nbags, c1-c0) in double: sum (or mean) of the rows of each bag. */
static void ref_fwd(const float *table, int64_t ld, int64_t c0, int64_t c1, const struct batch *b, int mean,
                    double *out)
{
    const int64_t w = c1 - c0;
    for (int64_t bag = 0; bag < b->nbags; bag++) {
        int64_t p0 = b->offsets ? b->offsets[bag] : bag, p1 = b->offsets ? b->offsets[bag + 1] : bag + 1;
        for (int64_t c = 0; c < w; c++) {
            double s = 0.0;
            for (int64_t p = p0; p < p1; p++)
                s += table[b->idx64[p] * ld + c0 + c];
            if (mean && b->offsets)
                s = p1 > p0 ? s / (double)(p1 - p0) : 0.0;
            out[bag * w + c] = s;
        }
    }
}

/* The update in double: per row, g = grad_scale * sum over its positions (in
 * position order) of bag_scale * grad[bag]; then one SGD or Adagrad step.
 * tab/acc are (rows, ld)/(rows, accum_ld) doubles; touched[r] is set for used rows. */
static void ref_update(double *tab, int64_t ld, double *acc, int64_t accum_ld, int64_t rows, int64_t c0, int64_t c1,
                       const struct batch *b, int mean, const float *grad, int64_t grad_ld, double gs,
                       const struct kern_optim_hp *hp, char *touched)
{
    const int64_t w = c1 - c0;
    double *g = calloc((size_t)(rows * w), sizeof(double));
    memset(touched, 0, (size_t)rows);
    for (int64_t bag = 0; bag < b->nbags; bag++) {
        int64_t p0 = b->offsets ? b->offsets[bag] : bag, p1 = b->offsets ? b->offsets[bag + 1] : bag + 1;
        double sc = (mean && b->offsets && p1 > p0) ? 1.0 / (double)(p1 - p0) : 1.0;
        for (int64_t p = p0; p < p1; p++) {
            int64_t row = b->idx64[p];
            touched[row] = 1;
            for (int64_t c = 0; c < w; c++)
                g[row * w + c] += sc * grad[bag * grad_ld + c];
        }
    }
    for (int64_t row = 0; row < rows; row++) {
        if (!touched[row])
            continue;
        for (int64_t c = 0; c < w; c++) {
            double gg = gs * g[row * w + c];
            double *p = &tab[row * ld + c0 + c];
            if (hp->kind == KERN_OPT_SGD) {
                *p -= hp->lr * gg;
            } else {
                double *a = &acc[row * accum_ld + c0 + c];
                *a += gg * gg;
                *p -= hp->lr * gg / (sqrt(*a) + hp->eps);
            }
        }
    }
    free(g);
}

/* ---- emb_fwd ----------------------------------------------------------------------- */

/* Runs emb_fwd for one configuration and checks values, padding and guards.
 * aligned: w a multiple of 4 with the column slice, ld and out_ld 16-byte aligned
 * (a backend may then load rows in 16-byte vectors, as the CUDA one does); else
 * slices and strides that are not. */
static void fwd_case(int64_t w, enum kern_dtype t, int mean, int64_t maxlen, uint64_t seed, int aligned)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t rows = 37, c0 = aligned ? 4 * (w % 3) : w % 5, ld = c0 + w + (aligned ? 4 : 3), nbags = 29,
                  out_ld = w + 4;
    struct kt_buf table, out;
    kt_buf_init(&table, rows * ld);
    kt_fill(&r, table.h, rows * ld, -1.0f, 1.0f);
    kt_upload(&table);
    struct batch b;
    batch_make(&b, &r, nbags, rows, maxlen);
    kt_buf_init(&out, nbags * out_ld);
    double *ref = tr_malloc((size_t)(nbags * w) * sizeof(double));
    int64_t *bad_pos = new_i64(12345);
    struct kern_emb_fwd_args a = {
        .table = table.d, .rows = rows, .ld = ld, .c0 = c0, .c1 = c0 + w, .idx = batch_idx(&b, t), .idx_dtype = t,
        .offsets = b.d_offsets, .nbags = nbags, .comb = mean ? KERN_COMB_MEAN : KERN_COMB_SUM, .out = out.d,
        .out_ld = out_ld, .bad_pos = bad_pos,
    };
    enum tr_status rc = kt_be.i->emb_fwd(kt_be.ctx, &a, 1);
    kt_download(&out);
    char what[96];
    snprintf(what, sizeof what, "emb_fwd w=%lld dtype=%d mean=%d maxlen=%lld aligned=%d", (long long)w, (int)t, mean,
             (long long)maxlen, aligned);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    TH_CHECKF(get_i64(bad_pos) == -1, "%s: bad_pos %lld after success (want -1)", what,
              (long long)get_i64(bad_pos));
    ref_fwd(table.h, ld, c0, c0 + w, &b, mean, ref);
    if (!b.offsets) {
        /* one-hot is a copy: bitwise, whatever the combiner */
        for (int64_t bag = 0; bag < nbags; bag++)
            TH_CHECKF(memcmp(out.h + bag * out_ld, table.h + b.idx64[bag] * ld + c0, (size_t)w * sizeof(float)) == 0,
                      "%s: bag %lld is not an exact copy of row %lld", what, (long long)bag,
                      (long long)b.idx64[bag]);
    }
    KT_CLOSE2D(what, out.h, out_ld, ref, w, nbags, w, 1e-6, 1e-5, 1e-7);
    for (int64_t bag = 0; b.offsets && bag < nbags; bag++)
        if (b.offsets[bag] == b.offsets[bag + 1])
            for (int64_t c = 0; c < w; c++)
                TH_CHECKF(out.h[bag * out_ld + c] == 0.0f, "%s: empty bag %lld col %lld is %g", what, (long long)bag,
                          (long long)c, (double)out.h[bag * out_ld + c]);
    TH_CHECKF(kt_pad_ok(out.h, nbags, w, out_ld), "%s: wrote into the columns past c1-c0 (out_ld padding)", what);
    TH_CHECKF(kt_buf_guard_ok(&out), "%s: wrote outside out", what);
    free_i64(bad_pos);
    tr_free(ref);
    kt_buf_release(&out);
    batch_free(&b);
    kt_buf_release(&table);
}

static void test_fwd_onehot(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    for (size_t i = 0; i < TR_ARRAY_SIZE(widths); i++)
        for (int t = 0; t < 2; t++)
            for (int mean = 0; mean < 2; mean++)
                fwd_case(widths[i], t ? KERN_I64 : KERN_I32, mean, 0, 100 + i * 4 + (size_t)t * 2 + (size_t)mean, 0);
}

static void test_fwd_multihot(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    for (size_t i = 0; i < TR_ARRAY_SIZE(widths); i++)
        for (int t = 0; t < 2; t++)
            for (int mean = 0; mean < 2; mean++)
                fwd_case(widths[i], t ? KERN_I64 : KERN_I32, mean, 7, 200 + i * 4 + (size_t)t * 2 + (size_t)mean, 0);
}

/* Widths that are multiples of 4 with 16-byte aligned slices and strides, one-hot
 * and multi-hot: the layouts a backend may read in 16-byte vectors. */
static void test_fwd_vector_aligned(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    static const int64_t vw[] = {4, 16, 128, 132};
    for (size_t i = 0; i < TR_ARRAY_SIZE(vw); i++)
        for (int t = 0; t < 2; t++)
            for (int mh = 0; mh < 2; mh++)
                fwd_case(vw[i], t ? KERN_I64 : KERN_I32, mh, mh ? 7 : 0, 300 + i * 4 + (size_t)t * 2 + (size_t)mh, 1);
}

/* Bags need not start at position 0: bag b = idx[offsets[b] .. offsets[b+1]). */
static void test_fwd_offsets_base(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    const int64_t rows = 5, ld = 3;
    struct kt_buf table, out;
    kt_buf_init(&table, 15);
    kt_buf_init(&out, 9);
    for (int i = 0; i < 15; i++)
        table.h[i] = (float)(i + 1);
    kt_upload(&table);
    const int64_t idx[] = {4, 4, 0, 1, 2, 3, 0};
    const int64_t offsets[] = {2, 4, 4, 7};
    int64_t *d_idx = kt_dev_dup(idx, sizeof idx), *d_off = kt_dev_dup(offsets, sizeof offsets);
    struct kern_emb_fwd_args a = {.table = table.d, .rows = rows, .ld = ld, .c0 = 0, .c1 = 3, .idx = d_idx,
                                  .idx_dtype = KERN_I64, .offsets = d_off, .nbags = 3, .comb = KERN_COMB_SUM,
                                  .out = out.d, .out_ld = 3};
    TH_EQ_ST_REQ(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&out);
    /* bag 0 = rows 0,1; bag 1 empty; bag 2 = rows 2,3,0 */
    const float want[9] = {1 + 4, 2 + 5, 3 + 6, 0, 0, 0, 7 + 10 + 1, 8 + 11 + 2, 9 + 12 + 3};
    for (int i = 0; i < 9; i++)
        TH_CHECKF(out.h[i] == want[i], "out[%d] = %g, want %g", i, (double)out.h[i], (double)want[i]);
    TH_CHECK(kt_buf_guard_ok(&out));
    kt_dev_release(d_off, sizeof offsets);
    kt_dev_release(d_idx, sizeof idx);
    kt_buf_release(&out);
    kt_buf_release(&table);
}

/* Out-of-range ids: TR_ERR_RANGE, bad_pos = first bad position, no crash. */
static void test_fwd_range(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    const int64_t rows = 50, ld = 8, n = 20000;
    struct kt_buf table, out;
    kt_buf_init(&table, rows * ld);
    memset(table.h, 0, (size_t)(rows * ld) * sizeof(float));
    kt_upload(&table);
    kt_buf_init(&out, n * ld);
    int64_t *i64 = tr_malloc((size_t)n * sizeof(int64_t));
    int32_t *i32 = tr_malloc((size_t)n * sizeof(int32_t));
    int64_t *offsets = tr_malloc((size_t)(n / 4 + 1) * sizeof(int64_t));
    for (int64_t b = 0; b <= n / 4; b++)
        offsets[b] = 4 * b;
    int64_t *d_i64 = kt_dev_alloc((size_t)n * sizeof(int64_t));
    int32_t *d_i32 = kt_dev_alloc((size_t)n * sizeof(int32_t));
    int64_t *d_off = kt_dev_dup(offsets, (size_t)(n / 4 + 1) * sizeof(int64_t));
    int64_t *bad_pos = new_i64(-99);
    struct {
        int64_t pos1, val1, pos2, val2;
    } const bad[] = {
        {7, -1, 11, 50},      /* negative first */
        {11, 50, 13, -1},     /* == rows first */
        {9000, 1000, 15001, -7}, /* far in (several threads' chunks) */
        {15001, 1000, 19999, -1},
        {0, INT32_MIN, 5, INT32_MAX},
    };
    for (size_t k = 0; k < TR_ARRAY_SIZE(bad); k++) {
        for (int t = 0; t < 2; t++) {
            for (int multi = 0; multi < 2; multi++) {
                for (int64_t i = 0; i < n; i++) {
                    i64[i] = (i * 7) % rows;
                    i32[i] = (int32_t)i64[i];
                }
                i64[bad[k].pos1] = bad[k].val1;
                i64[bad[k].pos2] = bad[k].val2;
                i32[bad[k].pos1] = (int32_t)bad[k].val1;
                i32[bad[k].pos2] = (int32_t)bad[k].val2;
                kt_h2d(d_i64, i64, (size_t)n * sizeof(int64_t));
                kt_h2d(d_i32, i32, (size_t)n * sizeof(int32_t));
                set_i64(bad_pos, -99);
                struct kern_emb_fwd_args a = {.table = table.d, .rows = rows, .ld = ld, .c0 = 0, .c1 = ld,
                                              .idx = t ? (const void *)d_i64 : (const void *)d_i32,
                                              .idx_dtype = t ? KERN_I64 : KERN_I32,
                                              .offsets = multi ? d_off : NULL, .nbags = multi ? n / 4 : n,
                                              .comb = KERN_COMB_SUM, .out = out.d, .out_ld = ld, .bad_pos = bad_pos};
                enum tr_status rc = kt_be.i->emb_fwd(kt_be.ctx, &a, 1);
                TH_CHECKF(rc == TR_ERR_RANGE, "case %zu dtype %d multi %d: %s, want TR_ERR_RANGE", k, t, multi,
                          tr_strerror(rc));
                int64_t got = get_i64(bad_pos);
                TH_CHECKF(got == bad[k].pos1, "case %zu dtype %d multi %d: bad_pos %lld, want %lld", k, t, multi,
                          (long long)got, (long long)bad[k].pos1);
                a.bad_pos = NULL; /* optional */
                TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_ERR_RANGE);
            }
        }
    }
    /* I64 ids beyond 32 bits */
    for (int64_t i = 0; i < n; i++)
        i64[i] = 3;
    i64[100] = (int64_t)1 << 40;
    i64[200] = INT64_MIN;
    kt_h2d(d_i64, i64, (size_t)n * sizeof(int64_t));
    set_i64(bad_pos, -99);
    struct kern_emb_fwd_args a = {.table = table.d, .rows = rows, .ld = ld, .c0 = 0, .c1 = ld, .idx = d_i64,
                                  .idx_dtype = KERN_I64, .nbags = n, .comb = KERN_COMB_SUM, .out = out.d,
                                  .out_ld = ld, .bad_pos = bad_pos};
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_ERR_RANGE);
    TH_EQ(get_i64(bad_pos), 100);
    /* the boundary ids 0 and rows-1 are valid */
    i64[100] = 0;
    i64[200] = rows - 1;
    kt_h2d(d_i64, i64, (size_t)n * sizeof(int64_t));
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
    TH_EQ(get_i64(bad_pos), -1);
    kt_download(&out);
    TH_CHECK(kt_buf_guard_ok(&out));
    free_i64(bad_pos);
    kt_dev_release(d_off, (size_t)(n / 4 + 1) * sizeof(int64_t));
    kt_dev_release(d_i32, (size_t)n * sizeof(int32_t));
    kt_dev_release(d_i64, (size_t)n * sizeof(int64_t));
    tr_free(offsets);
    tr_free(i32);
    tr_free(i64);
    kt_buf_release(&out);
    kt_buf_release(&table);
}

/* Offsets that decrease, or start below 0, are rejected with TR_ERR_RANGE. */
static void test_fwd_offsets_bad(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    struct kt_buf table, out;
    kt_buf_init(&table, 4 * 2);
    kt_buf_init(&out, 4 * 2);
    memset(table.h, 0, 8 * sizeof(float));
    kt_upload(&table);
    const int64_t idx[] = {0, 1, 2, 3, 0, 1};
    const int64_t dec[] = {0, 2, 1, 4, 6};  /* offsets[2] < offsets[1] */
    const int64_t neg[] = {-1, 2, 3, 4, 6}; /* offsets[0] < 0 */
    const int64_t ok[] = {0, 2, 2, 4, 6};
    int64_t *d_idx = kt_dev_dup(idx, sizeof idx), *d_dec = kt_dev_dup(dec, sizeof dec);
    int64_t *d_neg = kt_dev_dup(neg, sizeof neg), *d_ok = kt_dev_dup(ok, sizeof ok);
    const int64_t *const sets[] = {d_dec, d_neg};
    const int64_t first_bad[] = {1, 0}; /* the first b with offsets[b+1] < offsets[b] or offsets[b] < 0 */
    int64_t *bad_pos = new_i64(-99);
    for (int k = 0; k < 2; k++) {
        set_i64(bad_pos, -99);
        struct kern_emb_fwd_args a = {.table = table.d, .rows = 4, .ld = 2, .c0 = 0, .c1 = 2, .idx = d_idx,
                                      .idx_dtype = KERN_I64, .offsets = sets[k], .nbags = 4, .comb = KERN_COMB_MEAN,
                                      .out = out.d, .out_ld = 2, .bad_pos = bad_pos};
        enum tr_status rc = kt_be.i->emb_fwd(kt_be.ctx, &a, 1);
        TH_CHECKF(rc == TR_ERR_RANGE, "offsets set %d: %s, want TR_ERR_RANGE", k, tr_strerror(rc));
        /* kern.h leaves open whether bad_pos names the bag b or the offsets entry b+1 */
        int64_t got = get_i64(bad_pos);
        TH_CHECKF(got == first_bad[k] || got == first_bad[k] + 1, "offsets set %d: bad_pos %lld, want %lld or %lld",
                  k, (long long)got, (long long)first_bad[k], (long long)first_bad[k] + 1);
    }
    struct kern_emb_fwd_args a = {.table = table.d, .rows = 4, .ld = 2, .c0 = 0, .c1 = 2, .idx = d_idx,
                                  .idx_dtype = KERN_I64, .offsets = d_ok, .nbags = 4, .comb = KERN_COMB_MEAN,
                                  .out = out.d, .out_ld = 2};
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
    /* no bags at all: nothing to do, nothing written */
    kt_sentinel_fill(out.h, 8);
    kt_upload(&out);
    a.nbags = 0;
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
    a.offsets = NULL;
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&out);
    int untouched = 1;
    for (int i = 0; i < 8; i++)
        untouched &= kt_is_sentinel(&out.h[i]);
    TH_CHECKF(untouched, "emb_fwd with no bags wrote into out");
    TH_CHECK(kt_buf_guard_ok(&out));
    /* a column slice outside the row, or an index dtype that is not I32/I64 */
    a.nbags = 2;
    a.c1 = 3;
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_ERR_ARG);
    a.c1 = 2;
    a.idx_dtype = KERN_F32;
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_ERR_ARG);
    free_i64(bad_pos);
    kt_dev_release(d_ok, sizeof ok);
    kt_dev_release(d_neg, sizeof neg);
    kt_dev_release(d_dec, sizeof dec);
    kt_dev_release(d_idx, sizeof idx);
    kt_buf_release(&out);
    kt_buf_release(&table);
}

/* ---- emb_update -------------------------------------------------------------------- */

/* Runs one update of nbags bags over a table of `rows` rows and compares table and
 * accumulator with the double reference: touched rows on [c0, c1) within 2e-6 +
 * rtol * |want| (the float sums' rounding), every other float bitwise unchanged. */
static void update_case_rn(int64_t rows, int64_t nbags, int64_t w, enum kern_dtype t, int mean, int64_t maxlen,
                           enum kern_optim kind, uint64_t seed, double rtol)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t c0 = (w * 3) % 4, ld = c0 + w + 2, accum_ld = ld + 3, grad_ld = w + 1;
    const float gs = 0.5f;
    struct kt_buf table, accum, grad;
    kt_buf_init(&table, rows * ld);
    kt_buf_init(&accum, rows * accum_ld);
    kt_buf_init(&grad, nbags * grad_ld);
    float *table0 = tr_malloc((size_t)(rows * ld) * sizeof(float));
    float *accum0 = tr_malloc((size_t)(rows * accum_ld) * sizeof(float));
    double *dtab = tr_malloc((size_t)(rows * ld) * sizeof(double));
    double *dacc = tr_malloc((size_t)(rows * accum_ld) * sizeof(double));
    char *touched = tr_malloc((size_t)rows);
    kt_fill(&r, table.h, rows * ld, -1.0f, 1.0f);
    kt_fill(&r, accum.h, rows * accum_ld, 0.1f, 1.0f);
    kt_fill(&r, grad.h, nbags * grad_ld, -1.0f, 1.0f);
    kt_upload(&table);
    kt_upload(&accum);
    kt_upload(&grad);
    memcpy(table0, table.h, (size_t)(rows * ld) * sizeof(float));
    memcpy(accum0, accum.h, (size_t)(rows * accum_ld) * sizeof(float));
    for (int64_t i = 0; i < rows * ld; i++)
        dtab[i] = table.h[i];
    for (int64_t i = 0; i < rows * accum_ld; i++)
        dacc[i] = accum.h[i];
    struct batch b;
    batch_make(&b, &r, nbags, rows, maxlen);
    struct kern_optim_hp hp = {kind, 0.1f, 1e-8f};
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, b.nidx, w, 1);
    char *ws = kt_dev_alloc(ws_bytes + 8);
    int64_t *bad_pos = new_i64(777);
    struct kern_emb_update_args a = {
        .table = table.d, .rows = rows, .ld = ld, .c0 = c0, .c1 = c0 + w,
        .accum = kind == KERN_OPT_ADAGRAD ? accum.d : NULL, .accum_ld = accum_ld, .idx = batch_idx(&b, t),
        .idx_dtype = t, .offsets = b.d_offsets, .nbags = nbags, .comb = mean ? KERN_COMB_MEAN : KERN_COMB_SUM,
        .grad = grad.d, .grad_ld = grad_ld, .grad_scale = gs, .hp = hp,
        .ws = ws + 4, /* misaligned on purpose: the advertised size must cover alignment */
        .ws_bytes = ws_bytes, .bad_pos = bad_pos,
    };
    char what[112];
    snprintf(what, sizeof what, "emb_update %s rows=%lld nbags=%lld w=%lld dtype=%d mean=%d maxlen=%lld",
             kind == KERN_OPT_SGD ? "sgd" : "adagrad", (long long)rows, (long long)nbags, (long long)w, (int)t, mean,
             (long long)maxlen);
    enum tr_status rc = kt_be.i->emb_update(kt_be.ctx, &a, 1);
    kt_download(&table);
    kt_download(&accum);
    TH_CHECKF(rc == TR_OK, "%s: %s", what, tr_strerror(rc));
    TH_CHECKF(get_i64(bad_pos) == -1, "%s: bad_pos %lld after success", what, (long long)get_i64(bad_pos));
    ref_update(dtab, ld, dacc, accum_ld, rows, c0, c0 + w, &b, mean, grad.h, grad_ld, gs, &hp, touched);
    int64_t nbad = 0;
    for (int64_t row = 0; row < rows; row++) {
        for (int64_t c = 0; c < ld; c++) {
            int64_t i = row * ld + c;
            if (touched[row] && c >= c0 && c < c0 + w) {
                double e = dtab[i];
                if (!(fabs(table.h[i] - e) <= 2e-6 + rtol * fabs(e)) && nbad++ < 5)
                    th_failf_(__FILE__, __LINE__, "%s: table[%lld][%lld] = %.9g, want %.9g", what, (long long)row,
                              (long long)c, (double)table.h[i], e);
            } else if (memcmp(&table.h[i], &table0[i], sizeof(float)) != 0 && nbad++ < 5) {
                th_failf_(__FILE__, __LINE__, "%s: untouched table[%lld][%lld] changed", what, (long long)row,
                          (long long)c);
            }
        }
        for (int64_t c = 0; c < accum_ld; c++) {
            int64_t i = row * accum_ld + c;
            if (kind == KERN_OPT_ADAGRAD && touched[row] && c >= c0 && c < c0 + w) {
                double e = dacc[i];
                if (!(fabs(accum.h[i] - e) <= 2e-6 + rtol * fabs(e)) && nbad++ < 5)
                    th_failf_(__FILE__, __LINE__, "%s: accum[%lld][%lld] = %.9g, want %.9g", what, (long long)row,
                              (long long)c, (double)accum.h[i], e);
            } else if (memcmp(&accum.h[i], &accum0[i], sizeof(float)) != 0 && nbad++ < 5) {
                th_failf_(__FILE__, __LINE__, "%s: untouched accum[%lld][%lld] changed", what, (long long)row,
                          (long long)c);
            }
        }
    }
    TH_CHECKF(kt_buf_guard_ok(&table) && kt_buf_guard_ok(&accum), "%s: wrote outside table or accum", what);
    free_i64(bad_pos);
    kt_dev_release(ws, ws_bytes + 8);
    batch_free(&b);
    tr_free(touched);
    tr_free(dacc);
    tr_free(dtab);
    tr_free(accum0);
    tr_free(table0);
    kt_buf_release(&grad);
    kt_buf_release(&accum);
    kt_buf_release(&table);
}

static void update_case(int64_t w, enum kern_dtype t, int mean, int64_t maxlen, enum kern_optim kind, uint64_t seed)
{
    update_case_rn(40, 60, w, t, mean, maxlen, kind, seed, 1e-5);
}

static void update_sweep(enum kern_optim kind, uint64_t seed)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(widths); i++)
        for (int t = 0; t < 2; t++)
            for (int multi = 0; multi < 2; multi++)
                for (int mean = 0; mean < 1 + multi; mean++)
                    update_case(widths[i], t ? KERN_I64 : KERN_I32, mean, multi ? 6 : 0, kind,
                                seed + i * 8 + (size_t)t * 4 + (size_t)multi * 2 + (size_t)mean);
}

static void test_update_sgd(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    update_sweep(KERN_OPT_SGD, 300);
}

static void test_update_adagrad(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    update_sweep(KERN_OPT_ADAGRAD, 400);
}

/* Hot rows: 3 rows take thousands of ids each (a low-cardinality Criteo feature), so
 * CUDA sums them in chunks of 256 (kernels/cuda/embedding.cu), one-hot and multi-hot,
 * widths of one column, one 128-column pass and two passes. A row's gradient is a
 * float sum of about 800 to 2500 terms of either sign: the CPU's one long sum stays
 * within 2e-5 of the double reference here (1.35e-5 was seen); 5e-4 gives the GPU's
 * chunked sums (different rounding) room without hiding a lost or doubled term. */
static void test_update_hot_rows(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const int64_t ws[] = {1, 33, 200};
    for (size_t i = 0; i < TR_ARRAY_SIZE(ws); i++)
        for (int multi = 0; multi < 2; multi++)
            for (int opt = 0; opt < 2; opt++)
                update_case_rn(3, 2500, ws[i], multi ? KERN_I64 : KERN_I32, multi, multi ? 3 : 0,
                               opt ? KERN_OPT_ADAGRAD : KERN_OPT_SGD, 500 + i * 4 + (size_t)multi * 2 + (size_t)opt,
                               5e-4);
}

/* Mean combiner and grad_scale by hand: bags {0,0,1} {2} {} {1,3}, SGD lr=1, gs=2.
 * row 0: 2*(2/3 g0); row 1: 2*(1/3 g0 + 1/2 g3); row 2: 2*g1; row 3: 2*(1/2 g3). */
/* The chunked sum exactly (SGD, lr 1, grad_scale 1, one column, zero table): rows 0
 * and 49 get 512 ids each, the first with gradient 1 and 511 with 2^-25; rows 1..48
 * get 300 ids of 0.5 between them (short runs between the long ones). One sum in
 * position order rounds every 1 + 2^-25 back to 1 (the CPU: -1). CUDA's chunks of
 * 256 give 1 and exactly 256 x 2^-25 = 2^-17, so -(1 + 2^-17); a dropped chunk would
 * give -1 or -2^-17, a doubled one -(1 + 2^-16). */
static void test_update_chunks_exact(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    enum { ROWS = 50, HOT = 512, MID = 300, N = 2 * HOT + MID };
    int32_t ids[N];
    float grad[N];
    for (int i = 0; i < HOT; i++) {
        ids[i] = 0;
        ids[HOT + MID + i] = ROWS - 1;
        grad[i] = grad[HOT + MID + i] = i == 0 ? 1.0f : 0x1p-25f;
    }
    for (int i = 0; i < MID; i++) {
        ids[HOT + i] = 1 + i % (ROWS - 2);
        grad[HOT + i] = 0.5f;
    }
    struct kt_buf table, g;
    kt_buf_init(&table, ROWS);
    kt_buf_init(&g, N);
    memset(table.h, 0, ROWS * sizeof(float));
    memcpy(g.h, grad, sizeof grad);
    kt_upload(&table);
    kt_upload(&g);
    void *d_idx = kt_dev_dup(ids, sizeof ids);
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, N, 1, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    struct kern_emb_update_args a = {.table = table.d, .rows = ROWS, .ld = 1, .c0 = 0, .c1 = 1, .idx = d_idx,
                                     .idx_dtype = KERN_I32, .nbags = N, .grad = g.d, .grad_ld = 1, .grad_scale = 1.0f,
                                     .hp = {KERN_OPT_SGD, 1.0f, 0.0f}, .ws = ws, .ws_bytes = ws_bytes};
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&table);
    const int chunked = !strcmp(kt_be.i->name, "cuda");
    const float hot = chunked ? -(1.0f + 0x1p-17f) : -1.0f;
    TH_CHECKF(table.h[0] == hot && table.h[ROWS - 1] == hot, "%s: hot rows %.9g and %.9g, want %.9g (%s)",
              kt_be.i->name, (double)table.h[0], (double)table.h[ROWS - 1], (double)hot,
              chunked ? "chunks of 256 summed in order" : "one sum in position order");
    for (int r = 1; r < ROWS - 1; r++) {
        const int cnt = MID / (ROWS - 2) + (r - 1 < MID % (ROWS - 2));
        TH_CHECKF(table.h[r] == -0.5f * (float)cnt, "row %d: %.9g, want %.9g", r, (double)table.h[r],
                  (double)(-0.5f * (float)cnt));
    }
    kt_dev_release(ws, ws_bytes);
    kt_dev_release(d_idx, sizeof ids);
    kt_buf_release(&g);
    kt_buf_release(&table);
}

static void test_update_mean_scaling(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const float grad0[4 * 2] = {3, 6, 5, -1, 100, 100, 4, 8};
    const int32_t idx[] = {0, 0, 1, 2, 1, 3};
    const int64_t offsets[] = {0, 3, 4, 4, 6};
    struct kt_buf table, grad;
    kt_buf_init(&table, 5 * 2);
    kt_buf_init(&grad, 4 * 2);
    memset(table.h, 0, 10 * sizeof(float));
    memcpy(grad.h, grad0, sizeof grad0);
    kt_upload(&table);
    kt_upload(&grad);
    int32_t *d_idx = kt_dev_dup(idx, sizeof idx);
    int64_t *d_off = kt_dev_dup(offsets, sizeof offsets);
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, 6, 2, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    struct kern_emb_update_args a = {.table = table.d, .rows = 5, .ld = 2, .c0 = 0, .c1 = 2, .idx = d_idx,
                                     .idx_dtype = KERN_I32, .offsets = d_off, .nbags = 4, .comb = KERN_COMB_MEAN,
                                     .grad = grad.d, .grad_ld = 2, .grad_scale = 2.0f,
                                     .hp = {KERN_OPT_SGD, 1.0f, 0.0f}, .ws = ws, .ws_bytes = ws_bytes};
    TH_EQ_ST_REQ(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&table);
    const double want[5 * 2] = {-2 * (2.0 / 3 * 3), -2 * (2.0 / 3 * 6), -2 * (1.0 / 3 * 3 + 0.5 * 4),
                                -2 * (1.0 / 3 * 6 + 0.5 * 8), -2 * 5.0, -2 * -1.0, -2 * (0.5 * 4), -2 * (0.5 * 8),
                                0, 0};
    KT_CLOSE("mean scaling", table.h, want, 10, 1e-5, 1e-6, 1e-12);
    TH_CHECKF(table.h[8] == 0.0f && table.h[9] == 0.0f && !signbit(table.h[8]),
              "untouched row 4 is (%g, %g), want (+0, 0)", (double)table.h[8], (double)table.h[9]);
    /* the same with the sum combiner: bag scales are 1 */
    memset(table.h, 0, 10 * sizeof(float));
    kt_upload(&table);
    a.comb = KERN_COMB_SUM;
    TH_EQ_ST_REQ(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&table);
    const double want_sum[5 * 2] = {-2 * 6.0, -2 * 12.0, -2 * 7.0, -2 * 14.0, -2 * 5.0, -2 * -1.0, -2 * 4.0,
                                    -2 * 8.0, 0, 0};
    KT_CLOSE("sum combiner", table.h, want_sum, 10, 1e-5, 1e-6, 1e-12);
    TH_CHECK(kt_buf_guard_ok(&table));
    kt_dev_release(ws, ws_bytes);
    kt_dev_release(d_off, sizeof offsets);
    kt_dev_release(d_idx, sizeof idx);
    kt_buf_release(&grad);
    kt_buf_release(&table);
}

/* Duplicates are summed before the step; for Adagrad this differs from one step
 * per occurrence: one row hit 3 times with g = 1 gets acc += 9, p -= lr*3/(sqrt(acc)+eps). */
static void test_update_duplicates_adagrad(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const int64_t idx[] = {1, 2, 1, 1};
    struct kt_buf table, accum, grad;
    kt_buf_init(&table, 3);
    kt_buf_init(&accum, 3);
    kt_buf_init(&grad, 4);
    for (int i = 0; i < 3; i++) {
        table.h[i] = 1.0f;
        accum.h[i] = 0.5f;
    }
    for (int i = 0; i < 4; i++)
        grad.h[i] = 1.0f;
    kt_upload(&table);
    kt_upload(&accum);
    kt_upload(&grad);
    int64_t *d_idx = kt_dev_dup(idx, sizeof idx);
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, 4, 1, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    struct kern_emb_update_args a = {.table = table.d, .rows = 3, .ld = 1, .c0 = 0, .c1 = 1, .accum = accum.d,
                                     .accum_ld = 1, .idx = d_idx, .idx_dtype = KERN_I64, .nbags = 4,
                                     .grad = grad.d, .grad_ld = 1, .grad_scale = 1.0f,
                                     .hp = {KERN_OPT_ADAGRAD, 0.25f, 1e-3f}, .ws = ws, .ws_bytes = ws_bytes};
    TH_EQ_ST_REQ(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&table);
    kt_download(&accum);
    const double want_t[3] = {1.0, 1.0 - 0.25 * 3 / (sqrt(9.5) + 1e-3), 1.0 - 0.25 * 1 / (sqrt(1.5) + 1e-3)};
    const double want_a[3] = {0.5, 9.5, 1.5};
    KT_CLOSE("adagrad duplicates: table", table.h, want_t, 3, 1e-6, 1e-6, 1e-12);
    KT_CLOSE("adagrad duplicates: accum", accum.h, want_a, 3, 0.0, 0.0, 0.0);
    TH_CHECK(kt_buf_guard_ok(&table) && kt_buf_guard_ok(&accum));
    kt_dev_release(ws, ws_bytes);
    kt_dev_release(d_idx, sizeof idx);
    kt_buf_release(&grad);
    kt_buf_release(&accum);
    kt_buf_release(&table);
}

/* The workspace contract: NULL or smaller than the one-thread size -> TR_ERR_ARG,
 * and nothing is updated. The one-thread size comes from an instance opened on one
 * thread, which also runs the final call with exactly that size. */
static void test_update_ws_small(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const int64_t rows = 10, w = 17, n = 64;
    float table0[10 * 17], grad0[64 * 17];
    int64_t idx[64];
    struct kt_buf table, grad;
    kt_buf_init(&table, rows * w);
    kt_buf_init(&grad, n * w);
    struct kt_rng r = kt_rng_seed(5);
    kt_fill(&r, table0, rows * w, -1, 1);
    kt_fill(&r, grad0, n * w, -1, 1);
    for (int64_t i = 0; i < n; i++)
        idx[i] = kt_below(&r, rows);
    memcpy(table.h, table0, sizeof table0);
    memcpy(grad.h, grad0, sizeof grad0);
    kt_upload(&table);
    kt_upload(&grad);
    int64_t *d_idx = kt_dev_dup(idx, sizeof idx);
    struct kern_backend all = kt_be, one;
    kt_open(1, &one);
    size_t need = kern_emb_update_ws_bytes(&one, n, w, 1);
    char *ws = kt_dev_alloc(need);
    struct kern_emb_update_args a = {.table = table.d, .rows = rows, .ld = w, .c0 = 0, .c1 = w, .idx = d_idx,
                                     .idx_dtype = KERN_I64, .nbags = n, .grad = grad.d, .grad_ld = w,
                                     .grad_scale = 1.0f, .hp = {KERN_OPT_SGD, 0.1f, 0.0f}};
    const size_t sizes[] = {0, 1, 64, need / 2, need - 1};
    for (size_t k = 0; k < TR_ARRAY_SIZE(sizes); k++) {
        a.ws = sizes[k] ? ws : NULL;
        a.ws_bytes = sizes[k];
        enum tr_status rc = kt_be.i->emb_update(kt_be.ctx, &a, 1);
        TH_CHECKF(rc == TR_ERR_ARG, "ws_bytes %zu (need %zu): %s, want TR_ERR_ARG", sizes[k], need, tr_strerror(rc));
        a.ws = ws; /* a non-NULL pointer with a too-small size */
        rc = kt_be.i->emb_update(kt_be.ctx, &a, 1);
        TH_CHECKF(rc == TR_ERR_ARG, "ws_bytes %zu (need %zu): %s, want TR_ERR_ARG", sizes[k], need, tr_strerror(rc));
    }
    kt_download(&table);
    TH_CHECKF(memcmp(table.h, table0, sizeof table0) == 0, "table changed by an update with a too small workspace");
    /* Adagrad without an accumulator */
    a.ws = ws;
    a.ws_bytes = need;
    a.hp.kind = KERN_OPT_ADAGRAD;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_ERR_ARG);
    kt_download(&table);
    TH_CHECKF(memcmp(table.h, table0, sizeof table0) == 0, "table changed by Adagrad without an accumulator");
    kt_dev_release(ws, need);
    kt_dev_release(d_idx, sizeof idx);
    kt_buf_release(&grad);
    kt_buf_release(&table);
    /* exactly the one-thread size works, on 1 thread (the same inputs, in its memory) */
    kt_be = one;
    kt_buf_init(&table, rows * w);
    kt_buf_init(&grad, n * w);
    memcpy(table.h, table0, sizeof table0);
    memcpy(grad.h, grad0, sizeof grad0);
    kt_upload(&table);
    kt_upload(&grad);
    d_idx = kt_dev_dup(idx, sizeof idx);
    ws = kt_dev_alloc(need);
    a.table = table.d;
    a.grad = grad.d;
    a.idx = d_idx;
    a.ws = ws;
    a.hp.kind = KERN_OPT_SGD;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&table);
    TH_CHECK(kt_buf_guard_ok(&table));
    kt_dev_release(ws, need);
    kt_dev_release(d_idx, sizeof idx);
    kt_buf_release(&grad);
    kt_buf_release(&table);
    kt_be = all;
    kern_backend_close(&one);
}

/* Out-of-range ids or bad offsets: TR_ERR_RANGE and NOTHING updated, even when
 * the bad id comes after many good ones. */
static void test_update_range(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const int64_t rows = 30, w = 9, n = 5000;
    struct kt_buf table, accum, grad;
    kt_buf_init(&table, rows * w);
    kt_buf_init(&accum, rows * w);
    kt_buf_init(&grad, n * w);
    float *table0 = tr_malloc((size_t)(rows * w) * sizeof(float));
    float *accum0 = tr_malloc((size_t)(rows * w) * sizeof(float));
    int64_t *i64 = tr_malloc((size_t)n * sizeof(int64_t));
    int32_t *i32 = tr_malloc((size_t)n * sizeof(int32_t));
    int64_t *offsets = tr_malloc((size_t)(n / 5 + 1) * sizeof(int64_t));
    const size_t off_bytes = (size_t)(n / 5 + 1) * sizeof(int64_t);
    struct kt_rng r = kt_rng_seed(77);
    kt_fill(&r, table.h, rows * w, -1, 1);
    kt_fill(&r, accum.h, rows * w, 0, 1);
    kt_fill(&r, grad.h, n * w, -1, 1);
    kt_upload(&table);
    kt_upload(&accum);
    kt_upload(&grad);
    memcpy(table0, table.h, (size_t)(rows * w) * sizeof(float));
    memcpy(accum0, accum.h, (size_t)(rows * w) * sizeof(float));
    for (int64_t b = 0; b <= n / 5; b++)
        offsets[b] = 5 * b;
    int64_t *d_i64 = kt_dev_alloc((size_t)n * sizeof(int64_t));
    int32_t *d_i32 = kt_dev_alloc((size_t)n * sizeof(int32_t));
    int64_t *d_off = kt_dev_dup(offsets, off_bytes);
    int64_t *bad_pos = new_i64(-99);
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, n, w, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    const int64_t bad_at[] = {0, 2500, n - 1};
    const int64_t bad_val[] = {-1, 30, 1000000};
    for (int kind = 0; kind < 2; kind++)
        for (int t = 0; t < 2; t++)
            for (int multi = 0; multi < 2; multi++)
                for (size_t k = 0; k < TR_ARRAY_SIZE(bad_at); k++) {
                    for (int64_t i = 0; i < n; i++) {
                        i64[i] = kt_below(&r, rows);
                        i32[i] = (int32_t)i64[i];
                    }
                    i64[bad_at[k]] = bad_val[k];
                    i32[bad_at[k]] = (int32_t)bad_val[k];
                    kt_h2d(d_i64, i64, (size_t)n * sizeof(int64_t));
                    kt_h2d(d_i32, i32, (size_t)n * sizeof(int32_t));
                    set_i64(bad_pos, -99);
                    struct kern_emb_update_args a = {
                        .table = table.d, .rows = rows, .ld = w, .c0 = 0, .c1 = w,
                        .accum = kind ? accum.d : NULL, .accum_ld = w,
                        .idx = t ? (const void *)d_i64 : (const void *)d_i32, .idx_dtype = t ? KERN_I64 : KERN_I32,
                        .offsets = multi ? d_off : NULL, .nbags = multi ? n / 5 : n, .comb = KERN_COMB_MEAN,
                        .grad = grad.d, .grad_ld = w, .grad_scale = 1.0f,
                        .hp = {kind ? KERN_OPT_ADAGRAD : KERN_OPT_SGD, 0.1f, 1e-8f}, .ws = ws,
                        .ws_bytes = ws_bytes, .bad_pos = bad_pos};
                    enum tr_status rc = kt_be.i->emb_update(kt_be.ctx, &a, 1);
                    TH_CHECKF(rc == TR_ERR_RANGE, "kind %d dtype %d multi %d bad at %lld: %s", kind, t, multi,
                              (long long)bad_at[k], tr_strerror(rc));
                    int64_t got = get_i64(bad_pos);
                    TH_CHECKF(got == bad_at[k], "bad_pos %lld want %lld", (long long)got, (long long)bad_at[k]);
                }
    kt_download(&table);
    kt_download(&accum);
    TH_CHECKF(memcmp(table.h, table0, (size_t)(rows * w) * sizeof(float)) == 0, "table changed by a failed update");
    TH_CHECKF(memcmp(accum.h, accum0, (size_t)(rows * w) * sizeof(float)) == 0, "accum changed by a failed update");
    /* decreasing offsets */
    for (int64_t i = 0; i < n; i++)
        i64[i] = i % rows;
    kt_h2d(d_i64, i64, (size_t)n * sizeof(int64_t));
    offsets[100] = offsets[101] + 1;
    kt_h2d(d_off, offsets, off_bytes);
    struct kern_emb_update_args a = {.table = table.d, .rows = rows, .ld = w, .c0 = 0, .c1 = w, .idx = d_i64,
                                     .idx_dtype = KERN_I64, .offsets = d_off, .nbags = n / 5,
                                     .comb = KERN_COMB_SUM, .grad = grad.d, .grad_ld = w, .grad_scale = 1.0f,
                                     .hp = {KERN_OPT_SGD, 0.1f, 0.0f}, .ws = ws, .ws_bytes = ws_bytes};
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_ERR_RANGE);
    kt_download(&table);
    TH_CHECKF(memcmp(table.h, table0, (size_t)(rows * w) * sizeof(float)) == 0,
              "table changed by an update with decreasing offsets");
    /* empty input: no bags, or only empty bags, changes nothing */
    for (int64_t b = 0; b <= n / 5; b++)
        offsets[b] = 0;
    kt_h2d(d_off, offsets, off_bytes);
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    a.nbags = 0;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    a.offsets = NULL;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&table);
    TH_CHECKF(memcmp(table.h, table0, (size_t)(rows * w) * sizeof(float)) == 0, "table changed by an empty update");
    TH_CHECK(kt_buf_guard_ok(&table) && kt_buf_guard_ok(&accum));
    kt_dev_release(ws, ws_bytes);
    free_i64(bad_pos);
    kt_dev_release(d_off, off_bytes);
    kt_dev_release(d_i32, (size_t)n * sizeof(int32_t));
    kt_dev_release(d_i64, (size_t)n * sizeof(int64_t));
    tr_free(offsets);
    tr_free(i32);
    tr_free(i64);
    tr_free(accum0);
    tr_free(table0);
    kt_buf_release(&grad);
    kt_buf_release(&accum);
    kt_buf_release(&table);
}

/* ---- finite differences ---------------------------------------------------------------
 * L(T) = sum_b w_b . out_b with out = emb_fwd(T). An SGD update with lr = 1 and
 * grad = w moves every entry by exactly -dL/dT, which is compared with central
 * differences of L computed through emb_fwd. L is linear in T, so the differences
 * have no truncation error; the step h = 1/64 keeps float rounding of out (~1e-7
 * relative) well below the 1e-4 tolerance. The actual float step (T+h) - (T-h) is
 * used as the denominator. */

static double fd_loss(const struct kern_emb_fwd_args *a, struct kt_buf *out, const float *w, int64_t wd)
{
    enum tr_status rc = kt_be.i->emb_fwd(kt_be.ctx, a, 1);
    TR_ASSERT(rc == TR_OK);
    kt_download(out);
    double l = 0.0;
    for (int64_t b = 0; b < a->nbags; b++)
        for (int64_t c = 0; c < wd; c++)
            l += (double)w[b * wd + c] * out->h[b * a->out_ld + c];
    return l;
}

static void fd_case(int64_t maxlen, int mean, enum kern_dtype t, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t rows = 12, c0 = 2, wd = 5, ld = 9, nbags = 16;
    struct kt_buf table, upd, out, w;
    kt_buf_init(&table, rows * ld);
    kt_buf_init(&upd, rows * ld);
    kt_buf_init(&out, nbags * wd);
    kt_buf_init(&w, nbags * wd);
    kt_fill(&r, table.h, rows * ld, -1, 1);
    kt_fill(&r, w.h, nbags * wd, -1, 1);
    memcpy(upd.h, table.h, (size_t)(rows * ld) * sizeof(float));
    kt_upload(&table);
    kt_upload(&upd);
    kt_upload(&w);
    struct batch b;
    batch_make(&b, &r, nbags, rows - 2, maxlen); /* rows 10, 11 are never used: gradient 0 */
    struct kern_emb_fwd_args fa = {.table = table.d, .rows = rows, .ld = ld, .c0 = c0, .c1 = c0 + wd,
                                   .idx = batch_idx(&b, t), .idx_dtype = t, .offsets = b.d_offsets, .nbags = nbags,
                                   .comb = mean ? KERN_COMB_MEAN : KERN_COMB_SUM, .out = out.d, .out_ld = wd};
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, b.nidx, wd, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    struct kern_emb_update_args ua = {.table = upd.d, .rows = rows, .ld = ld, .c0 = c0, .c1 = c0 + wd,
                                      .idx = batch_idx(&b, t), .idx_dtype = t, .offsets = b.d_offsets,
                                      .nbags = nbags, .comb = fa.comb, .grad = w.d, .grad_ld = wd, .grad_scale = 1.0f,
                                      .hp = {KERN_OPT_SGD, 1.0f, 0.0f}, .ws = ws, .ws_bytes = ws_bytes};
    TH_EQ_ST_REQ(kt_be.i->emb_update(kt_be.ctx, &ua, 1), TR_OK);
    kt_download(&upd);
    const float h = 1.0f / 64;
    int nbad = 0;
    for (int64_t row = 0; row < rows; row++) {
        for (int64_t c = c0; c < c0 + wd; c++) {
            float *p = &table.d[row * ld + c], orig = table.h[row * ld + c];
            float tp = orig + h, tm = orig - h;
            kt_h2d(p, &tp, sizeof tp);
            double lp = fd_loss(&fa, &out, w.h, wd);
            kt_h2d(p, &tm, sizeof tm);
            double lm = fd_loss(&fa, &out, w.h, wd);
            kt_h2d(p, &orig, sizeof orig);
            double fd = (lp - lm) / ((double)tp - (double)tm);
            double step = (double)orig - (double)upd.h[row * ld + c]; /* = dL/dT */
            if (!(fabs(step - fd) <= 1e-4 + 1e-4 * fabs(fd)) && nbad++ < 5)
                th_failf_(__FILE__, __LINE__, "fd maxlen=%lld mean=%d: dL/dT[%lld][%lld] update %.7g, fd %.7g",
                          (long long)maxlen, mean, (long long)row, (long long)c, step, fd);
        }
    }
    TH_EQ(nbad, 0);
    /* columns outside the slice have zero gradient and are never touched */
    for (int64_t row = 0; row < rows; row++)
        for (int64_t c = 0; c < ld; c++)
            if (c < c0 || c >= c0 + wd)
                TH_CHECKF(memcmp(&upd.h[row * ld + c], &table.h[row * ld + c], sizeof(float)) == 0,
                          "fd maxlen=%lld mean=%d: [%lld][%lld] outside the slice changed: %.9g, was %.9g",
                          (long long)maxlen, mean, (long long)row, (long long)c, (double)upd.h[row * ld + c],
                          (double)table.h[row * ld + c]);
    TH_CHECK(kt_buf_guard_ok(&upd) && kt_buf_guard_ok(&out));
    kt_dev_release(ws, ws_bytes);
    batch_free(&b);
    kt_buf_release(&w);
    kt_buf_release(&out);
    kt_buf_release(&upd);
    kt_buf_release(&table);
}

static void test_fd_grad(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    fd_case(0, 0, KERN_I64, 900);
    fd_case(4, 0, KERN_I32, 901);
    fd_case(4, 1, KERN_I64, 902);
}

/* ---- beyond 2^31 elements --------------------------------------------------------------
 * rows = 2^25 + 3, ld = 65: 2,181,038,275 elements (8.7 GB) from the backend's
 * mem_alloc (on the CPU an anonymous mmap with MAP_NORESERVE: only the touched pages
 * use RAM). The last rows sit past element 2^31, where any 32-bit offset would wrap.
 * Rows move between the host and the table one at a time. */
static void test_large_table(void)
{
    KT_NEED_OP(KERN_OP_EMB_FWD);
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const int64_t rows = ((int64_t)1 << 25) + 3, ld = 65;
    const size_t bytes = (size_t)rows * (size_t)ld * sizeof(float);
    TH_REQUIRE((uint64_t)rows * (uint64_t)ld > ((uint64_t)1 << 31));
    void *mem = NULL;
    if (kt_be.i->mem_alloc(kt_be.ctx, bytes, &mem) != TR_OK || !mem)
        TH_SKIP("cannot allocate 8.7 GB of backend memory for the >2^31-element table (ulimit -v, sanitizer limit "
                "or device memory)");
    float *table = mem; /* (rows, ld) in backend memory */
    const int64_t used[] = {0, 1, ((int64_t)1 << 24) + 5, rows - 3, rows - 2, rows - 1};
    const int nused = (int)TR_ARRAY_SIZE(used);
    float vals[6 * 65]; /* used row k as written */
    for (int k = 0; k < nused; k++) {
        for (int64_t c = 0; c < ld; c++)
            vals[k * ld + c] = (float)(k + 1) + (float)c / 128.0f;
        kt_h2d(table + used[k] * ld, vals + k * ld, (size_t)ld * sizeof(float));
    }
    /* one-hot gather, full width and the slice [60, 65), I64 and I32 ids */
    int64_t i64[6];
    int32_t i32[6];
    for (int k = 0; k < nused; k++) {
        i64[k] = used[nused - 1 - k];
        i32[k] = (int32_t)i64[k];
    }
    int64_t *d_i64 = kt_dev_dup(i64, sizeof i64);
    int32_t *d_i32 = kt_dev_dup(i32, sizeof i32);
    struct kt_buf out;
    kt_buf_init(&out, 6 * 65);
    for (int t = 0; t < 2; t++) {
        for (int slice = 0; slice < 2; slice++) {
            int64_t c0 = slice ? 60 : 0;
            memset(out.h, 0, 6 * 65 * sizeof(float));
            kt_upload(&out);
            struct kern_emb_fwd_args a = {.table = table, .rows = rows, .ld = ld, .c0 = c0, .c1 = ld,
                                          .idx = t ? (const void *)d_i64 : (const void *)d_i32,
                                          .idx_dtype = t ? KERN_I64 : KERN_I32, .nbags = nused,
                                          .comb = KERN_COMB_SUM, .out = out.d, .out_ld = ld};
            TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
            kt_download(&out);
            for (int k = 0; k < nused; k++)
                TH_CHECKF(memcmp(out.h + k * ld, vals + (nused - 1 - k) * ld + c0,
                                 (size_t)(ld - c0) * sizeof(float)) == 0,
                          "large table: gathered row %lld (dtype %d, c0 %lld) is wrong", (long long)i64[k], t,
                          (long long)c0);
        }
    }
    /* multi-hot: bag 0 = last + first row, bag 1 = the two rows before the last */
    const int64_t mi[] = {rows - 1, 0, rows - 3, rows - 2};
    const int64_t mo[] = {0, 2, 4};
    int64_t *d_mi = kt_dev_dup(mi, sizeof mi), *d_mo = kt_dev_dup(mo, sizeof mo);
    struct kern_emb_fwd_args a = {.table = table, .rows = rows, .ld = ld, .c0 = 0, .c1 = ld, .idx = d_mi,
                                  .idx_dtype = KERN_I64, .offsets = d_mo, .nbags = 2, .comb = KERN_COMB_SUM,
                                  .out = out.d, .out_ld = ld};
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&out);
    double want_bags[2 * 65];
    for (int64_t c = 0; c < ld; c++) {
        want_bags[c] = vals[5 * ld + c] + vals[0 * ld + c];       /* rows-1 + 0, in float */
        want_bags[ld + c] = vals[3 * ld + c] + vals[4 * ld + c];  /* rows-3 + rows-2 */
    }
    KT_CLOSE("large table: multi-hot sums", out.h, want_bags, 2 * ld, 0.0, 0.0, 0.0);
    /* out of range just past the end */
    int64_t past = rows;
    int64_t *d_past = kt_dev_dup(&past, sizeof past), *bad_pos = new_i64(-1);
    a.idx = d_past;
    a.offsets = NULL;
    a.nbags = 1;
    a.bad_pos = bad_pos;
    TH_EQ_ST(kt_be.i->emb_fwd(kt_be.ctx, &a, 1), TR_ERR_RANGE);
    TH_EQ(get_i64(bad_pos), 0);
    /* SGD update, lr = 1, grad 1: exactly the used rows (all columns) drop by 1 per use */
    const int64_t ui[] = {rows - 1, rows - 1, ((int64_t)1 << 24) + 5, rows - 3};
    int32_t ui32[4];
    for (int k = 0; k < 4; k++)
        ui32[k] = (int32_t)ui[k];
    int64_t *d_ui = kt_dev_dup(ui, sizeof ui);
    int32_t *d_ui32 = kt_dev_dup(ui32, sizeof ui32);
    struct kt_buf grad;
    kt_buf_init(&grad, 4 * 65);
    for (int i = 0; i < 4 * 65; i++)
        grad.h[i] = 1.0f;
    kt_upload(&grad);
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, 4, ld, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    for (int t = 0; t < 2; t++) {
        struct kern_emb_update_args u = {.table = table, .rows = rows, .ld = ld, .c0 = 0, .c1 = ld,
                                         .idx = t ? (const void *)d_ui : (const void *)d_ui32,
                                         .idx_dtype = t ? KERN_I64 : KERN_I32, .nbags = 4, .grad = grad.d,
                                         .grad_ld = ld, .grad_scale = 1.0f, .hp = {KERN_OPT_SGD, 1.0f, 0.0f},
                                         .ws = ws, .ws_bytes = ws_bytes};
        TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &u, 1), TR_OK);
    }
    /* two updates: rows-1 used twice per update, 2^24+5 and rows-3 once */
    const float drop[6] = {0, 0, 2, 2, 0, 4};
    float row[65];
    for (int k = 0; k < nused; k++) {
        kt_d2h(row, table + used[k] * ld, sizeof row);
        for (int64_t c = 0; c < ld; c++)
            TH_CHECKF(row[c] == vals[k * ld + c] - drop[k], "large table: row %lld col %lld is %g, want %g",
                      (long long)used[k], (long long)c, (double)row[c], (double)(vals[k * ld + c] - drop[k]));
    }
    /* neighbours of the touched rows and a few far rows are still zero */
    const int64_t zero_rows[] = {2, ((int64_t)1 << 24) + 4, ((int64_t)1 << 24) + 6, ((int64_t)1 << 31) / 65 + 1,
                                 rows - 4};
    for (size_t k = 0; k < TR_ARRAY_SIZE(zero_rows); k++) {
        kt_d2h(row, table + zero_rows[k] * ld, sizeof row);
        for (int64_t c = 0; c < ld; c++)
            TH_CHECKF(row[c] == 0.0f, "large table: untouched row %lld changed (col %lld is %g)",
                      (long long)zero_rows[k], (long long)c, (double)row[c]);
    }
    TH_CHECK(kt_buf_guard_ok(&out));
    kt_dev_release(ws, ws_bytes);
    kt_buf_release(&grad);
    kt_dev_release(d_ui32, sizeof ui32);
    kt_dev_release(d_ui, sizeof ui);
    free_i64(bad_pos);
    kt_dev_release(d_past, sizeof past);
    kt_dev_release(d_mo, sizeof mo);
    kt_dev_release(d_mi, sizeof mi);
    kt_buf_release(&out);
    kt_dev_release(d_i32, sizeof i32);
    kt_dev_release(d_i64, sizeof i64);
    kt_be.i->mem_release(kt_be.ctx, mem, bytes);
}

static const struct th_case cases[] = {
    {"fwd_onehot", test_fwd_onehot},
    {"fwd_multihot", test_fwd_multihot},
    {"fwd_vector_aligned", test_fwd_vector_aligned},
    {"fwd_offsets_base", test_fwd_offsets_base},
    {"fwd_range", test_fwd_range},
    {"fwd_offsets_bad", test_fwd_offsets_bad},
    {"update_sgd", test_update_sgd},
    {"update_adagrad", test_update_adagrad},
    {"update_hot_rows", test_update_hot_rows},
    {"update_chunks_exact", test_update_chunks_exact},
    {"update_mean_scaling", test_update_mean_scaling},
    {"update_duplicates_adagrad", test_update_duplicates_adagrad},
    {"update_ws_small", test_update_ws_small},
    {"update_range", test_update_range},
    {"fd_grad", test_fd_grad},
    {"large_table", test_large_table},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
