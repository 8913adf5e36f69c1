/* test_rowwise.c: row-wise Adagrad (KERN_OPT_ROWWISE_ADAGRAD) of emb_update and
 * its phase 1, emb_rowsq, on every backend: the update against a double-precision
 * reference written from the definition (duplicates summed, one accumulator per
 * row, untouched rows bitwise unchanged), emb_rowsq's per-distinct-row sums,
 * thread-count independence, the split form (column slices whose partial sums are
 * added equal the whole-row update), argument errors, and the dense step that
 * row-wise Adagrad leaves element-wise. */
#include <math.h>
#include <string.h>

#include "../../common/check.h"
#include "../../common/harness.h"
#include "kt_util.h"

#define LR 0.1f
#define EPS 1e-7f

/* One table's ids for nbags bags: one-hot (offsets NULL) or bags of 0..maxlen ids,
 * drawn from `span` of the rows (so rows repeat and some are never touched). */
struct ids {
    int64_t nbags, nidx;
    int32_t *idx;     /* host (nidx) */
    int64_t *offsets; /* host (nbags + 1) or NULL */
    void *d_idx;      /* backend copies */
    int64_t *d_off;
};

static void ids_make(struct ids *s, struct kt_rng *r, int64_t nbags, int64_t span, int64_t maxlen)
{
    memset(s, 0, sizeof *s);
    s->nbags = nbags;
    if (maxlen > 0) {
        s->offsets = tr_malloc((size_t)(nbags + 1) * sizeof(int64_t));
        s->offsets[0] = 0;
        for (int64_t b = 0; b < nbags; b++)
            s->offsets[b + 1] = s->offsets[b] + kt_below(r, maxlen + 1);
        s->nidx = s->offsets[nbags];
    } else {
        s->nidx = nbags;
    }
    s->idx = tr_malloc((size_t)(s->nidx ? s->nidx : 1) * sizeof(int32_t));
    for (int64_t i = 0; i < s->nidx; i++)
        s->idx[i] = (int32_t)kt_below(r, span);
    s->d_idx = kt_dev_dup(s->idx, (size_t)(s->nidx ? s->nidx : 1) * sizeof(int32_t));
    if (s->offsets)
        s->d_off = kt_dev_dup(s->offsets, (size_t)(nbags + 1) * sizeof(int64_t));
}

static void ids_free(struct ids *s)
{
    kt_dev_release(s->d_idx, (size_t)(s->nidx ? s->nidx : 1) * sizeof(int32_t));
    if (s->d_off)
        kt_dev_release(s->d_off, (size_t)(s->nbags + 1) * sizeof(int64_t));
    tr_free(s->idx);
    tr_free(s->offsets);
}

/* The reference, in double, from the definition: g[r] = gs * sum over the
 * occurrences of r of bag_scale * grad[bag] (all dim columns); for every touched
 * r: acc[r] += sum(g^2) / dim; w[r][c] -= lr * g[c] / (sqrt(acc[r]) + eps).
 * tab (rows, dim), acc (rows), grad (nbags, dim); touched (rows) is set. Also
 * gives each touched row's sum of squares over columns [c0, c1) (sq, rows). */
static void ref_rowwise(double *tab, double *acc, int64_t rows, int64_t dim, const struct ids *s, int mean,
                        const float *grad, float gs, char *touched, int64_t c0, int64_t c1, double *sq)
{
    double *g = tr_calloc((size_t)(rows * dim), sizeof(double));
    memset(touched, 0, (size_t)rows);
    for (int64_t b = 0; b < s->nbags; b++) {
        int64_t p0 = s->offsets ? s->offsets[b] : b, p1 = s->offsets ? s->offsets[b + 1] : b + 1;
        double sc = km_bag_scale(p1 - p0, mean);
        for (int64_t p = p0; p < p1; p++) {
            int64_t row = s->idx[p];
            touched[row] = 1;
            for (int64_t c = 0; c < dim; c++)
                g[row * dim + c] += sc * grad[b * dim + c];
        }
    }
    for (int64_t row = 0; row < rows; row++) {
        sq[row] = 0.0;
        if (!touched[row])
            continue;
        double all = 0.0;
        for (int64_t c = 0; c < dim; c++) {
            double v = (double)gs * g[row * dim + c];
            all += v * v;
            if (c >= c0 && c < c1)
                sq[row] += v * v;
        }
        acc[row] += all / (double)dim;
        for (int64_t c = 0; c < dim; c++)
            tab[row * dim + c] -= LR * (double)gs * g[row * dim + c] / (sqrt(acc[row]) + EPS);
    }
    tr_free(g);
}

/* A table (rows, dim) with its row-wise accumulator, random values. */
struct tab {
    struct kt_buf w, acc;
    float *w0, *acc0; /* host copies of the initial values */
    int64_t rows, dim;
};

static void tab_make(struct tab *t, struct kt_rng *r, int64_t rows, int64_t dim)
{
    t->rows = rows;
    t->dim = dim;
    kt_buf_init(&t->w, rows * dim);
    kt_buf_init(&t->acc, rows);
    kt_fill(r, t->w.h, rows * dim, -1.0f, 1.0f);
    kt_fill(r, t->acc.h, rows, 0.05f, 0.5f);
    t->w0 = tr_malloc((size_t)(rows * dim) * sizeof(float));
    t->acc0 = tr_malloc((size_t)rows * sizeof(float));
    memcpy(t->w0, t->w.h, (size_t)(rows * dim) * sizeof(float));
    memcpy(t->acc0, t->acc.h, (size_t)rows * sizeof(float));
    kt_upload(&t->w);
    kt_upload(&t->acc);
}

static void tab_free(struct tab *t)
{
    kt_buf_release(&t->w);
    kt_buf_release(&t->acc);
    tr_free(t->w0);
    tr_free(t->acc0);
}

static struct kern_emb_update_args args_of(struct tab *t, const struct ids *s, int mean, const float *d_grad, float gs)
{
    struct kern_emb_update_args a = {
        .table = t->w.d, .rows = t->rows, .ld = t->dim, .c0 = 0, .c1 = t->dim, .accum = t->acc.d, .accum_ld = 0,
        .idx = s->d_idx, .idx_dtype = KERN_I32, .offsets = s->d_off, .nbags = s->nbags,
        .comb = mean ? KERN_COMB_MEAN : KERN_COMB_SUM, .grad = d_grad, .grad_ld = t->dim, .grad_scale = gs,
        .hp = {KERN_OPT_ROWWISE_ADAGRAD, LR, EPS},
    };
    return a;
}

/* ---- the update against the reference ---------------------------------------------- */

/* ntables tables in one call (so small ones are spread over threads), one-hot or
 * multi-hot, sum or mean. */
static void update_case(int ntables, int64_t dim, int64_t maxlen, int mean, uint64_t seed)
{
    struct kt_rng r = kt_rng_seed(seed);
    const float gs = 0.5f;
    struct tab t[4];
    struct ids s[4];
    struct kt_buf grad[4];
    struct kern_emb_update_args a[4];
    int64_t max_nidx = 1;
    TR_ASSERT(ntables <= 4);
    for (int k = 0; k < ntables; k++) {
        const int64_t rows = 30 + 17 * k, nbags = 50 + 31 * k;
        tab_make(&t[k], &r, rows, dim);
        ids_make(&s[k], &r, nbags, rows - 5, maxlen); /* the last 5 rows are never touched */
        kt_buf_init(&grad[k], nbags * dim);
        kt_fill(&r, grad[k].h, nbags * dim, -1.0f, 1.0f);
        kt_upload(&grad[k]);
        a[k] = args_of(&t[k], &s[k], mean, grad[k].d, gs);
        max_nidx = TR_MAX(max_nidx, s[k].nidx);
    }
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, max_nidx, dim, ntables);
    void *ws = kt_dev_alloc(ws_bytes);
    a[0].ws = ws;
    a[0].ws_bytes = ws_bytes;
    char what[96];
    snprintf(what, sizeof what, "rowwise %d tables dim=%lld maxlen=%lld mean=%d", ntables, (long long)dim,
             (long long)maxlen, mean);
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, a, ntables), TR_OK);
    for (int k = 0; k < ntables; k++) {
        kt_download(&t[k].w);
        kt_download(&t[k].acc);
        const int64_t rows = t[k].rows;
        double *dt = tr_malloc((size_t)(rows * dim) * sizeof(double)), *da = tr_malloc((size_t)rows * sizeof(double));
        double *sq = tr_malloc((size_t)rows * sizeof(double));
        char *touched = tr_malloc((size_t)rows);
        for (int64_t i = 0; i < rows * dim; i++)
            dt[i] = t[k].w0[i];
        for (int64_t i = 0; i < rows; i++)
            da[i] = t[k].acc0[i];
        ref_rowwise(dt, da, rows, dim, &s[k], mean, grad[k].h, gs, touched, 0, dim, sq);
        int nbad = 0, ntouched = 0;
        for (int64_t row = 0; row < rows; row++) {
            ntouched += touched[row];
            if (!touched[row]) {
                if ((memcmp(t[k].w.h + row * dim, t[k].w0 + row * dim, (size_t)dim * sizeof(float)) ||
                     memcmp(&t[k].acc.h[row], &t[k].acc0[row], sizeof(float))) &&
                    nbad++ < 3)
                    th_failf_(__FILE__, __LINE__, "%s table %d: untouched row %lld changed", what, k, (long long)row);
                continue;
            }
            if (!(fabs(t[k].acc.h[row] - da[row]) <= 1e-6 * fabs(da[row])) && nbad++ < 3)
                th_failf_(__FILE__, __LINE__, "%s table %d: accum[%lld] = %.9g, want %.9g", what, k, (long long)row,
                         (double)t[k].acc.h[row], da[row]);
            for (int64_t c = 0; c < dim; c++) {
                double e = dt[row * dim + c], g = t[k].w.h[row * dim + c];
                if (!(fabs(g - e) <= 2e-6 + 1e-5 * fabs(e)) && nbad++ < 3)
                    th_failf_(__FILE__, __LINE__, "%s table %d: w[%lld][%lld] = %.9g, want %.9g", what, k, (long long)row,
                             (long long)c, g, e);
            }
        }
        TH_CHECKF(ntouched > 0 && ntouched < rows, "%s table %d: %d of %lld rows touched (the case needs both kinds)",
                  what, k, ntouched, (long long)rows);
        TH_CHECKF(kt_buf_guard_ok(&t[k].w) && kt_buf_guard_ok(&t[k].acc), "%s table %d: wrote outside", what, k);
        tr_free(touched);
        tr_free(sq);
        tr_free(da);
        tr_free(dt);
    }
    kt_dev_release(ws, ws_bytes);
    for (int k = 0; k < ntables; k++) {
        kt_buf_release(&grad[k]);
        ids_free(&s[k]);
        tab_free(&t[k]);
    }
}

static void test_update_reference(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    static const int64_t dims[] = {1, 7, 16, 33};
    uint64_t seed = 900;
    for (size_t d = 0; d < TR_ARRAY_SIZE(dims); d++)
        for (int ntables = 1; ntables <= 4; ntables += 3)
            for (int multi = 0; multi < 2; multi++)
                for (int mean = 0; mean < 1 + multi; mean++)
                    update_case(ntables, dims[d], multi ? 5 : 0, mean, seed++);
}

/* By hand: row 1 hit three times with gradient rows (1, 2), (1, 2), (1, 2) and
 * row 2 once with (3, -4), dim 2, acc 0.5, lr 0.1, eps 1e-7, gs 1:
 * row 1: g = (3, 6), acc = 0.5 + (9 + 36) / 2 = 23, w -= 0.1 * g / (sqrt(23) + eps);
 * row 2: g = (3, -4), acc = 0.5 + 25 / 2 = 13; row 0 untouched. */
static void test_update_by_hand(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    const int32_t idx[] = {1, 2, 1, 1};
    const float g[] = {1, 2, 3, -4, 1, 2, 1, 2};
    struct kt_buf w, acc, grad;
    kt_buf_init(&w, 6);
    kt_buf_init(&acc, 3);
    kt_buf_init(&grad, 8);
    for (int i = 0; i < 6; i++)
        w.h[i] = 1.0f;
    for (int i = 0; i < 3; i++)
        acc.h[i] = 0.5f;
    memcpy(grad.h, g, sizeof g);
    kt_upload(&w);
    kt_upload(&acc);
    kt_upload(&grad);
    void *d_idx = kt_dev_dup(idx, sizeof idx);
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, 4, 2, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    struct kern_emb_update_args a = {.table = w.d, .rows = 3, .ld = 2, .c0 = 0, .c1 = 2, .accum = acc.d,
                                     .idx = d_idx, .idx_dtype = KERN_I32, .nbags = 4, .grad = grad.d, .grad_ld = 2,
                                     .grad_scale = 1.0f, .hp = {KERN_OPT_ROWWISE_ADAGRAD, 0.1f, 1e-7f}, .ws = ws,
                                     .ws_bytes = ws_bytes};
    TH_EQ_ST_REQ(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&w);
    kt_download(&acc);
    const double d1 = sqrt(23.0) + 1e-7, d2 = sqrt(13.0) + 1e-7;
    const double want_w[6] = {1, 1, 1 - 0.1 * 3 / d1, 1 - 0.1 * 6 / d1, 1 - 0.1 * 3 / d2, 1 + 0.1 * 4 / d2};
    const double want_acc[3] = {0.5, 23, 13};
    KT_CLOSE("by hand: table", w.h, want_w, 6, 1e-7, 1e-6, 1e-12);
    KT_CLOSE("by hand: accum", acc.h, want_acc, 3, 0.0, 0.0, 0.0);
    TH_CHECK(kt_buf_guard_ok(&w) && kt_buf_guard_ok(&acc));
    kt_dev_release(ws, ws_bytes);
    kt_dev_release(d_idx, sizeof idx);
    kt_buf_release(&grad);
    kt_buf_release(&acc);
    kt_buf_release(&w);
}

/* ---- phase 1: emb_rowsq ---------------------------------------------------------- */

/* The k-th distinct row in ascending order gets its sum over [c0, c1); the rest
 * of the buffer is 0. */
static void test_rowsq_output(void)
{
    KT_NEED_OP(KERN_OP_EMB_ROWSQ);
    struct kt_rng r = kt_rng_seed(77);
    const int64_t rows = 40, dim = 12, c0 = 3, c1 = 10;
    const float gs = 0.25f;
    for (int multi = 0; multi < 2; multi++) {
        struct tab t;
        struct ids s;
        tab_make(&t, &r, rows, dim);
        ids_make(&s, &r, 60, rows - 7, multi ? 4 : 0);
        struct kt_buf grad;
        kt_buf_init(&grad, s.nbags * dim);
        kt_fill(&r, grad.h, s.nbags * dim, -2.0f, 2.0f);
        kt_upload(&grad);
        struct kern_emb_update_args a = args_of(&t, &s, multi, grad.d, gs);
        a.c0 = c0;
        a.c1 = c1;
        a.dim = dim;
        a.grad = grad.d + c0; /* the gradient of the gathered slice: (nbags, c1 - c0), stride dim */
        size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, s.nidx, c1 - c0, 1);
        a.ws = kt_dev_alloc(ws_bytes);
        a.ws_bytes = ws_bytes;
        size_t sq_bytes = (size_t)s.nidx * sizeof(double);
        a.row_sumsq = kt_dev_alloc(sq_bytes);
        double *got = tr_malloc(sq_bytes), *want = tr_calloc((size_t)s.nidx, sizeof(double));
        for (int64_t i = 0; i < s.nidx; i++)
            got[i] = NAN;
        kt_h2d(a.row_sumsq, got, sq_bytes); /* every entry must be written */
        TH_EQ_ST(kt_be.i->emb_rowsq(kt_be.ctx, &a, 1), TR_OK);
        kt_d2h(got, a.row_sumsq, sq_bytes);
        /* table and accumulator are not touched */
        kt_download(&t.w);
        kt_download(&t.acc);
        TH_CHECK(!memcmp(t.w.h, t.w0, (size_t)(rows * dim) * sizeof(float)) &&
                 !memcmp(t.acc.h, t.acc0, (size_t)rows * sizeof(float)));
        double *dt = tr_calloc((size_t)(rows * dim), sizeof(double)), *da = tr_calloc((size_t)rows, sizeof(double));
        double *sq = tr_malloc((size_t)rows * sizeof(double));
        char *touched = tr_malloc((size_t)rows);
        ref_rowwise(dt, da, rows, dim, &s, multi, grad.h, gs, touched, c0, c1, sq);
        int64_t k = 0;
        for (int64_t row = 0; row < rows; row++)
            if (touched[row])
                want[k++] = sq[row];
        int nbad = 0;
        for (int64_t i = 0; i < s.nidx; i++)
            if (!(fabs(got[i] - want[i]) <= 1e-6 * fabs(want[i]) + (i < k ? 1e-12 : 0.0)) && nbad++ < 3)
                th_failf_(__FILE__, __LINE__, "rowsq multi=%d: entry %lld of %lld (%lld distinct) = %.12g, want %.12g", multi,
                         (long long)i, (long long)s.nidx, (long long)k, got[i], want[i]);
        TH_CHECKF(k > 1 && k < s.nidx, "rowsq multi=%d: %lld distinct rows of %lld ids: the case needs repeats",
                  multi, (long long)k, (long long)s.nidx);
        tr_free(touched);
        tr_free(sq);
        tr_free(da);
        tr_free(dt);
        tr_free(want);
        tr_free(got);
        kt_dev_release(a.row_sumsq, sq_bytes);
        kt_dev_release(a.ws, ws_bytes);
        kt_buf_release(&grad);
        ids_free(&s);
        tab_free(&t);
    }
}

/* ---- the split form ------------------------------------------------------------------ */

/* The whole-row update equals the update of column slices [0, k1), [k1, k2), [k2,
 * dim) (one of them may be empty) held in separate tables, each with its own
 * replica of the accumulator, when their emb_rowsq sums are added (the all-reduce
 * of column-wise training, done here on the host) and fed to emb_update. nbags
 * bags of ids in [0, span). */
static void split_case_n(int64_t dim, int64_t k1, int64_t k2, int multi, uint64_t seed, int64_t nbags, int64_t span)
{
    struct kt_rng r = kt_rng_seed(seed);
    const int64_t rows = 50;
    const float gs = 0.75f;
    struct tab whole, part[3];
    struct ids s;
    tab_make(&whole, &r, rows, dim);
    ids_make(&s, &r, nbags, span, multi ? 4 : 0);
    struct kt_buf grad;
    kt_buf_init(&grad, s.nbags * dim);
    kt_fill(&r, grad.h, s.nbags * dim, -1.0f, 1.0f);
    kt_upload(&grad);
    const int64_t cut[4] = {0, k1, k2, dim};
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, TR_MAX(s.nidx, 1), dim, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    /* the whole row at once */
    struct kern_emb_update_args a = args_of(&whole, &s, multi, grad.d, gs);
    a.ws = ws;
    a.ws_bytes = ws_bytes;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_OK);
    kt_download(&whole.w);
    kt_download(&whole.acc);
    /* three slices: phase 1, host sum, phase 2 */
    const size_t sq_bytes = (size_t)TR_MAX(s.nidx, 1) * sizeof(double);
    double *sum = tr_calloc((size_t)TR_MAX(s.nidx, 1), sizeof(double)), *one = tr_malloc(sq_bytes);
    struct kern_emb_update_args pa[3];
    for (int p = 0; p < 3; p++) {
        const int64_t w = cut[p + 1] - cut[p];
        part[p].rows = rows;
        part[p].dim = w;
        kt_buf_init(&part[p].w, rows * TR_MAX(w, 1));
        kt_buf_init(&part[p].acc, rows);
        part[p].w0 = part[p].acc0 = NULL;
        for (int64_t row = 0; row < rows; row++)
            for (int64_t c = 0; c < w; c++)
                part[p].w.h[row * w + c] = whole.w0[row * dim + cut[p] + c];
        memcpy(part[p].acc.h, whole.acc0, (size_t)rows * sizeof(float));
        kt_upload(&part[p].w);
        kt_upload(&part[p].acc);
        pa[p] = args_of(&part[p], &s, multi, grad.d, gs);
        pa[p].table = w ? part[p].w.d : NULL; /* a worker without columns holds no table */
        pa[p].ld = TR_MAX(w, 1);
        pa[p].c0 = 0;
        pa[p].c1 = w;
        pa[p].grad = grad.d + cut[p];
        pa[p].grad_ld = dim;
        pa[p].dim = dim;
        pa[p].ws = ws;
        pa[p].ws_bytes = ws_bytes;
        pa[p].row_sumsq = kt_dev_alloc(sq_bytes);
        TH_EQ_ST(kt_be.i->emb_rowsq(kt_be.ctx, &pa[p], 1), TR_OK);
        kt_d2h(one, pa[p].row_sumsq, sq_bytes);
        for (int64_t i = 0; i < s.nidx; i++)
            sum[i] += one[i];
    }
    char what[80];
    snprintf(what, sizeof what, "split dim=%lld at %lld,%lld multi=%d", (long long)dim, (long long)k1,
             (long long)k2, multi);
    double *want = tr_malloc((size_t)(rows * dim) * sizeof(double)), *want_acc = tr_malloc((size_t)rows * sizeof(double));
    for (int64_t i = 0; i < rows * dim; i++)
        want[i] = whole.w.h[i];
    for (int64_t i = 0; i < rows; i++)
        want_acc[i] = whole.acc.h[i];
    for (int p = 0; p < 3; p++) {
        const int64_t w = cut[p + 1] - cut[p];
        kt_h2d(pa[p].row_sumsq, sum, sq_bytes);
        if (w > 0) /* a worker without columns has nothing to update */
            TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &pa[p], 1), TR_OK);
        kt_download(&part[p].w);
        kt_download(&part[p].acc);
        if (w == 0)
            continue;
        KT_CLOSE2D(what, part[p].w.h, w, want + cut[p], dim, rows, w, 0.0, 1e-7, 1e-14);
        KT_CLOSE(what, part[p].acc.h, want_acc, rows, 0.0, 1e-7, 1e-14);
        TH_CHECKF(kt_buf_guard_ok(&part[p].w) && kt_buf_guard_ok(&part[p].acc), "%s: slice %d wrote outside", what,
                  p);
    }
    /* the replicas of the accumulator agree bitwise: every worker applies the same update */
    for (int p = 1; p < 3; p++)
        if (cut[p + 1] > cut[p] && cut[1] > 0)
            KT_SAME_BITS(what, part[p].acc.h, part[0].acc.h, rows);
    for (int p = 0; p < 3; p++) {
        kt_dev_release(pa[p].row_sumsq, sq_bytes);
        kt_buf_release(&part[p].w);
        kt_buf_release(&part[p].acc);
    }
    tr_free(want_acc);
    tr_free(want);
    tr_free(one);
    tr_free(sum);
    kt_dev_release(ws, ws_bytes);
    kt_buf_release(&grad);
    ids_free(&s);
    tab_free(&whole);
}

static void split_case(int64_t dim, int64_t k1, int64_t k2, int multi, uint64_t seed)
{
    split_case_n(dim, k1, k2, multi, seed, 120, 47);
}

static void test_split_equals_whole(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    KT_NEED_OP(KERN_OP_EMB_ROWSQ);
    uint64_t seed = 1200;
    for (int multi = 0; multi < 2; multi++) {
        split_case(16, 8, 16, multi, seed++);  /* two halves, a third slice without columns */
        split_case(13, 5, 9, multi, seed++);   /* three uneven slices */
        split_case(7, 0, 3, multi, seed++);    /* the first worker holds no columns */
        split_case(64, 21, 43, multi, seed++);
        /* hot rows: 2000 bags over 3 ids, so CUDA sums them in chunks (phase 1 and
         * the update must cut them alike); 200 columns, two 128-column passes */
        split_case_n(200, 70, 150, multi, seed++, 2000, 3);
    }
}

/* ---- thread-count independence ------------------------------------------------------ */

/* The update (one large table, parallel inside it, and several small ones,
 * spread over threads) and emb_rowsq give the same bits on 1, 2 and 3 threads. */
static void test_across_threads(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    KT_NEED_OP(KERN_OP_EMB_ROWSQ);
    const struct kern_backend saved = kt_be;
    const int threads[] = {1, 2, 3};
    const int ntables = 5;
    const int64_t dim = 24;
    float *ref_w[5] = {0}, *ref_acc[5] = {0};
    double *ref_sq[5] = {0};
    for (int ti = 0; ti < 3; ti++) {
        struct kern_backend be;
        kt_be = saved;
        kt_open(threads[ti], &be);
        kt_be = be;
        struct kt_rng r = kt_rng_seed(4242);
        struct tab t[5];
        struct ids s[5];
        struct kt_buf grad[5];
        struct kern_emb_update_args a[5];
        int64_t max_nidx = 1;
        for (int k = 0; k < ntables; k++) {
            const int64_t rows = k == 0 ? 3000 : 40 + k, nbags = k == 0 ? 6000 : 90;
            tab_make(&t[k], &r, rows, dim);
            ids_make(&s[k], &r, nbags, rows, k == 2 ? 3 : 0);
            kt_buf_init(&grad[k], nbags * dim);
            kt_fill(&r, grad[k].h, nbags * dim, -1.0f, 1.0f);
            kt_upload(&grad[k]);
            a[k] = args_of(&t[k], &s[k], 0, grad[k].d, 1.0f);
            a[k].row_sumsq = kt_dev_alloc((size_t)s[k].nidx * sizeof(double));
            max_nidx = TR_MAX(max_nidx, s[k].nidx);
        }
        size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, max_nidx, dim, ntables);
        a[0].ws = kt_dev_alloc(ws_bytes);
        a[0].ws_bytes = ws_bytes;
        TH_EQ_ST(kt_be.i->emb_rowsq(kt_be.ctx, a, ntables), TR_OK);
        struct kern_emb_update_args u[5];
        memcpy(u, a, sizeof u);
        for (int k = 0; k < ntables; k++)
            u[k].row_sumsq = NULL; /* whole rows: the update sums by itself */
        TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, u, ntables), TR_OK);
        for (int k = 0; k < ntables; k++) {
            kt_download(&t[k].w);
            kt_download(&t[k].acc);
            const size_t nsq = (size_t)s[k].nidx;
            double *sq = tr_malloc(nsq * sizeof(double));
            kt_d2h(sq, a[k].row_sumsq, nsq * sizeof(double));
            char what[64];
            snprintf(what, sizeof what, "table %d on %d threads vs 1", k, threads[ti]);
            if (ti == 0) {
                ref_w[k] = tr_malloc((size_t)(t[k].rows * dim) * sizeof(float));
                ref_acc[k] = tr_malloc((size_t)t[k].rows * sizeof(float));
                memcpy(ref_w[k], t[k].w.h, (size_t)(t[k].rows * dim) * sizeof(float));
                memcpy(ref_acc[k], t[k].acc.h, (size_t)t[k].rows * sizeof(float));
                ref_sq[k] = sq;
            } else {
                KT_SAME_BITS(what, t[k].w.h, ref_w[k], t[k].rows * dim);
                KT_SAME_BITS(what, t[k].acc.h, ref_acc[k], t[k].rows);
                TH_CHECKF(!memcmp(sq, ref_sq[k], nsq * sizeof(double)), "%s: emb_rowsq sums differ", what);
                tr_free(sq);
            }
            kt_dev_release(a[k].row_sumsq, nsq * sizeof(double));
        }
        kt_dev_release(a[0].ws, ws_bytes);
        for (int k = 0; k < ntables; k++) {
            kt_buf_release(&grad[k]);
            ids_free(&s[k]);
            tab_free(&t[k]);
        }
        kt_be = saved;
        kern_backend_close(&be);
    }
    for (int k = 0; k < ntables; k++) {
        tr_free(ref_w[k]);
        tr_free(ref_acc[k]);
        tr_free(ref_sq[k]);
    }
}

/* ---- errors ------------------------------------------------------------------------------ */

static void test_bad_args(void)
{
    KT_NEED_OP(KERN_OP_EMB_UPDATE);
    KT_NEED_OP(KERN_OP_EMB_ROWSQ);
    struct kt_rng r = kt_rng_seed(3);
    struct tab t;
    struct ids s;
    tab_make(&t, &r, 20, 8);
    ids_make(&s, &r, 30, 20, 0);
    struct kt_buf grad;
    kt_buf_init(&grad, 30 * 8);
    kt_fill(&r, grad.h, 30 * 8, -1.0f, 1.0f);
    kt_upload(&grad);
    size_t ws_bytes = kern_emb_update_ws_bytes(&kt_be, 30, 8, 1);
    void *ws = kt_dev_alloc(ws_bytes);
    double *sq = kt_dev_alloc(30 * sizeof(double));
    struct kern_emb_update_args good = args_of(&t, &s, 0, grad.d, 1.0f), a;
    good.ws = ws;
    good.ws_bytes = ws_bytes;
    a = good;
    a.accum = NULL;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_ERR_ARG); /* no accumulator */
    a = good;
    a.dim = 4;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_ERR_ARG); /* dim narrower than the columns */
    a = good;
    a.c1 = 4;
    a.dim = 8;
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_ERR_ARG); /* a slice without the summed squares */
    a = good;
    TH_EQ_ST(kt_be.i->emb_rowsq(kt_be.ctx, &a, 1), TR_ERR_ARG); /* phase 1 without an output */
    a.row_sumsq = sq;
    a.ws = NULL;
    TH_EQ_ST(kt_be.i->emb_rowsq(kt_be.ctx, &a, 1), TR_ERR_ARG); /* no workspace */
    /* a bad id: TR_ERR_RANGE, nothing written */
    s.idx[7] = 20;
    kt_h2d(s.d_idx, s.idx, (size_t)s.nidx * sizeof(int32_t));
    int64_t *bad = kt_dev_alloc(sizeof(int64_t)); /* host memory on the CPU; only read there */
    a = good;
    a.row_sumsq = sq;
    if (!strcmp(kt_be.i->name, "cpu"))
        a.bad_pos = bad;
    TH_EQ_ST(kt_be.i->emb_rowsq(kt_be.ctx, &a, 1), TR_ERR_RANGE);
    TH_EQ_ST(kt_be.i->emb_update(kt_be.ctx, &a, 1), TR_ERR_RANGE);
    if (a.bad_pos)
        TH_EQ(*a.bad_pos, 7);
    kt_download(&t.w);
    kt_download(&t.acc);
    TH_CHECK(!memcmp(t.w.h, t.w0, 20 * 8 * sizeof(float)) && !memcmp(t.acc.h, t.acc0, 20 * sizeof(float)));
    kt_dev_release(bad, sizeof(int64_t));
    kt_dev_release(sq, 30 * sizeof(double));
    kt_dev_release(ws, ws_bytes);
    kt_buf_release(&grad);
    ids_free(&s);
    tab_free(&t);
}

/* ---- dense parameters ---------------------------------------------------------------- */

/* Under row-wise Adagrad the dense step is element-wise Adagrad, bit for bit;
 * without an accumulator it is refused. */
static void test_dense_is_elementwise(void)
{
    KT_NEED_OP(KERN_OP_DENSE_UPDATE);
    struct kt_rng r = kt_rng_seed(11);
    const int64_t n = 1000;
    struct kt_buf p[2], acc[2], g;
    kt_buf_init(&g, n);
    kt_fill(&r, g.h, n, -1.0f, 1.0f);
    kt_upload(&g);
    for (int k = 0; k < 2; k++) {
        struct kt_rng r2 = kt_rng_seed(12);
        kt_buf_init(&p[k], n);
        kt_buf_init(&acc[k], n);
        kt_fill(&r2, p[k].h, n, -1.0f, 1.0f);
        kt_fill(&r2, acc[k].h, n, 0.1f, 0.2f);
        kt_upload(&p[k]);
        kt_upload(&acc[k]);
        struct kern_dense_update_args a = {.n = n, .param = p[k].d, .grad = g.d, .accum = acc[k].d,
                                           .grad_scale = 0.5f,
                                           .hp = {k ? KERN_OPT_ROWWISE_ADAGRAD : KERN_OPT_ADAGRAD, LR, EPS}};
        TH_EQ_ST(kt_be.i->dense_update(kt_be.ctx, &a), TR_OK);
        kt_download(&p[k]);
        kt_download(&acc[k]);
        if (k) {
            a.accum = NULL;
            TH_EQ_ST(kt_be.i->dense_update(kt_be.ctx, &a), TR_ERR_ARG);
        }
    }
    KT_SAME_BITS("dense params, rowwise vs adagrad", p[1].h, p[0].h, n);
    KT_SAME_BITS("dense accum, rowwise vs adagrad", acc[1].h, acc[0].h, n);
    for (int k = 0; k < 2; k++) {
        kt_buf_release(&p[k]);
        kt_buf_release(&acc[k]);
    }
    kt_buf_release(&g);
}

static const struct th_case cases[] = {
    {"update_reference", test_update_reference},
    {"update_by_hand", test_update_by_hand},
    {"rowsq_output", test_rowsq_output},
    {"split_equals_whole", test_split_equals_whole},
    {"across_threads", test_across_threads},
    {"bad_args", test_bad_args},
    {"dense_is_elementwise", test_dense_is_elementwise},
};

int main(int argc, char **argv)
{
    return kt_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
