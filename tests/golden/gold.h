/* gold.h: the golden fixtures' reader and the comparisons of the golden tests
 * (test_golden.c, test_golden_multihot.c): the fixture format the generators
 * write (gen_golden.py, gen_golden_multihot.py), each tensor compared by its
 * relative L2 error and its worst element. For the tests only: static functions,
 * a TH_* harness in the including file. */
#ifndef TR_TESTS_GOLD_H
#define TR_TESTS_GOLD_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/alloc.h"
#include "../../common/check.h"
#include "../../common/harness.h"

/* Fixture format (little-endian), see gen_golden.py:
 *   header: u32 magic 0x444C4F47 ('GOLD'), u32 version 1, u32 count, u32 reserved
 *   `count` records: u32 name_len, name (no NUL), u32 dtype (0 f32, 1 i32, 2 f64),
 *                    u32 ndim, u64 dims[ndim], raw row-major data */
#define GOLD_MAGIC 0x444C4F47u
#define GOLD_VERSION 1u
#define GOLD_MAX_NAME 127
#define GOLD_MAX_DIMS 8
#define GOLD_MAX_BYTES (64u << 20)

#define REL_TOL 1e-5 /* ||c - ref||_2 / ||ref||_2 */
#define ELEM_ATOL 1e-6 /* |c - ref| <= REL_TOL * max|ref| + ELEM_ATOL */


_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the fixture reader assumes a little-endian host");

enum gold_dtype { GOLD_F32 = 0, GOLD_I32 = 1, GOLD_F64 = 2 };

struct gold_rec {
    char name[GOLD_MAX_NAME + 1];
    uint32_t dtype, ndim;
    uint64_t dims[GOLD_MAX_DIMS];
    int64_t count;              /* elements */
    const unsigned char *data;  /* (count) of dtype, unaligned, into gold.buf */
};

struct gold {
    unsigned char *buf; /* whole file */
    size_t len;
    struct gold_rec *recs; /* (nrecs) */
    uint32_t nrecs;
    char path[1024];
};

/* ---- fixture reader ------------------------------------------------------------ */

static inline size_t dtype_size(uint32_t t)
{
    return t == GOLD_F64 ? 8 : 4;
}

static inline int take(const struct gold *g, size_t *off, size_t n, const unsigned char **p)
{
    if (n > g->len - *off)
        return -1;
    *p = g->buf + *off;
    *off += n;
    return 0;
}

static inline int take_u32(const struct gold *g, size_t *off, uint32_t *v)
{
    const unsigned char *p;
    if (take(g, off, 4, &p))
        return -1;
    memcpy(v, p, 4);
    return 0;
}

static inline void gold_release(struct gold *g)
{
    tr_free(g->buf);
    tr_free(g->recs);
    memset(g, 0, sizeof *g);
}

/* Parses g->buf (g->len bytes, owned by g) into g->recs. On a bad header or
 * record, writes a message to err and returns TR_ERR_FORMAT (TR_ERR_NOMEM if the
 * record table cannot be allocated). */
static inline enum tr_status gold_parse(struct gold *g, char *err, size_t errlen)
{
    size_t off = 0;
    uint32_t magic, version, count, reserved;
    if (take_u32(g, &off, &magic) || take_u32(g, &off, &version) || take_u32(g, &off, &count) ||
        take_u32(g, &off, &reserved)) {
        snprintf(err, errlen, "'%s' is too short for a header (%zu bytes)", g->path, g->len);
        return TR_ERR_FORMAT;
    }
    if (magic != GOLD_MAGIC) {
        snprintf(err, errlen, "'%s' is not a golden fixture: magic 0x%08x, expected 0x%08x ('GOLD')\n"
                 "# hint: regenerate it with /usr/bin/python3 tests/golden/gen_golden.py", g->path, magic,
                 GOLD_MAGIC);
        return TR_ERR_FORMAT;
    }
    if (version != GOLD_VERSION) {
        snprintf(err, errlen, "'%s' has fixture version %u; this test reads version %u\n"
                 "# hint: regenerate it with /usr/bin/python3 tests/golden/gen_golden.py", g->path, version,
                 GOLD_VERSION);
        return TR_ERR_FORMAT;
    }
    if (count > (g->len - off) / 12) { /* a record takes at least 12 bytes */
        snprintf(err, errlen, "'%s' claims %u records but has only %zu bytes after the header", g->path, count,
                 g->len - off);
        return TR_ERR_FORMAT;
    }
    g->recs = tr_calloc(count ? count : 1, sizeof *g->recs);
    if (!g->recs)
        return TR_ERR_NOMEM;
    for (uint32_t r = 0; r < count; r++) {
        struct gold_rec *rec = &g->recs[r];
        const unsigned char *p;
        uint32_t nlen;
        if (take_u32(g, &off, &nlen) || nlen == 0 || nlen > GOLD_MAX_NAME || take(g, &off, nlen, &p)) {
            snprintf(err, errlen, "'%s': record %u has a bad or truncated name (offset %zu)", g->path, r, off);
            return TR_ERR_FORMAT;
        }
        memcpy(rec->name, p, nlen);
        rec->name[nlen] = '\0';
        if (memchr(rec->name, '\0', nlen)) {
            snprintf(err, errlen, "'%s': record %u has a NUL in its name", g->path, r);
            return TR_ERR_FORMAT;
        }
        if (take_u32(g, &off, &rec->dtype) || take_u32(g, &off, &rec->ndim) || rec->dtype > GOLD_F64 ||
            rec->ndim > GOLD_MAX_DIMS) {
            snprintf(err, errlen, "'%s': record '%s' has a bad dtype or rank", g->path, rec->name);
            return TR_ERR_FORMAT;
        }
        uint64_t n = 1;
        for (uint32_t d = 0; d < rec->ndim; d++) {
            if (take(g, &off, 8, &p)) {
                snprintf(err, errlen, "'%s': record '%s' is truncated in its dims", g->path, rec->name);
                return TR_ERR_FORMAT;
            }
            memcpy(&rec->dims[d], p, 8);
            if (rec->dims[d] != 0 && n > (uint64_t)g->len / rec->dims[d]) {
                snprintf(err, errlen, "'%s': record '%s' is larger than the file", g->path, rec->name);
                return TR_ERR_FORMAT;
            }
            n *= rec->dims[d];
        }
        rec->count = (int64_t)n;
        if (n > (g->len - off) / dtype_size(rec->dtype) || take(g, &off, n * dtype_size(rec->dtype), &p)) {
            snprintf(err, errlen, "'%s': record '%s' is truncated (%llu elements, %zu bytes left)", g->path,
                     rec->name, (unsigned long long)n, g->len - off);
            return TR_ERR_FORMAT;
        }
        rec->data = p;
        for (uint32_t q = 0; q < r; q++)
            if (!strcmp(g->recs[q].name, rec->name)) {
                snprintf(err, errlen, "'%s': record '%s' appears twice", g->path, rec->name);
                return TR_ERR_FORMAT;
            }
        g->nrecs = r + 1;
    }
    if (off != g->len) {
        snprintf(err, errlen, "'%s' has %zu trailing bytes after %u records", g->path, g->len - off, count);
        return TR_ERR_FORMAT;
    }
    return TR_OK;
}

/* Finds and reads fixture `file`: $TR_ROOT/file, then file relative to the
 * working directory and up to three parents. TR_ERR_IO if none can be read. */
static inline enum tr_status gold_load(struct gold *g, const char *file, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    char cand[5][1024];
    int nc = 0;
    const char *root = getenv("TR_ROOT");
    if (root && *root)
        snprintf(cand[nc++], sizeof cand[0], "%s/%s", root, file);
    snprintf(cand[nc++], sizeof cand[0], "%s", file);
    snprintf(cand[nc++], sizeof cand[0], "../%s", file);
    snprintf(cand[nc++], sizeof cand[0], "../../%s", file);
    snprintf(cand[nc++], sizeof cand[0], "../../../%s", file);
    FILE *f = NULL;
    for (int i = 0; i < nc && !f; i++) {
        f = fopen(cand[i], "rb");
        if (f)
            snprintf(g->path, sizeof g->path, "%s", cand[i]);
    }
    if (!f) {
        snprintf(err, errlen, "cannot find the golden fixture '%s' (TR_ROOT=%s)\n"
                 "# hint: it is committed; run from the repository root or set TR_ROOT", file,
                 root ? root : "unset");
        return TR_ERR_IO;
    }
    enum tr_status rc = TR_OK;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    if (len < 0 || (unsigned long)len > GOLD_MAX_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errlen, "cannot size '%s' (or it is over %u bytes)", g->path, GOLD_MAX_BYTES);
        rc = TR_ERR_IO;
        goto exit;
    }
    g->len = (size_t)len;
    g->buf = tr_malloc(g->len ? g->len : 1);
    if (!g->buf) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    if (fread(g->buf, 1, g->len, f) != g->len) {
        snprintf(err, errlen, "cannot read '%s'", g->path);
        rc = TR_ERR_IO;
        goto exit;
    }
    rc = gold_parse(g, err, errlen);
exit:
    fclose(f);
    if (rc != TR_OK)
        gold_release(g);
    return rc;
}

static inline const struct gold_rec *gold_find(const struct gold *g, const char *name)
{
    for (uint32_t r = 0; r < g->nrecs; r++)
        if (!strcmp(g->recs[r].name, name))
            return &g->recs[r];
    return NULL;
}

/* Copies record `name` (dtype, exactly n elements) into dst; on a missing or
 * mismatched record records a test failure and returns NULL. */
static inline const struct gold_rec *gold_get(const struct gold *g, const char *name, uint32_t dtype, int64_t n,
                                       void *dst)
{
    const struct gold_rec *r = gold_find(g, name);
    TH_CHECKF(r, "fixture '%s' has no record '%s'", g->path, name);
    if (!r)
        return NULL;
    TH_CHECKF(r->dtype == dtype && r->count == n,
              "fixture record '%s': dtype %u with %lld elements, expected %u with %lld", name, r->dtype,
              (long long)r->count, dtype, (long long)n);
    if (r->dtype != dtype || r->count != n)
        return NULL;
    memcpy(dst, r->data, (size_t)n * dtype_size(dtype));
    return r;
}

/* One integer of a shape-[1] i32 record, or -1 (failure recorded). */
static inline int gold_int(const struct gold *g, const char *name)
{
    int32_t v;
    return gold_get(g, name, GOLD_I32, 1, &v) ? v : -1;
}

static inline double gold_double(const struct gold *g, const char *name)
{
    double v;
    return gold_get(g, name, GOLD_F64, 1, &v) ? v : NAN;
}

/* ---- comparison ---------------------------------------------------------------- */

struct cmp {
    double rel;     /* ||c - ref||_2 / ||ref||_2 */
    double max_abs; /* max |c - ref| */
    double tol_abs; /* REL_TOL * max|ref| + ELEM_ATOL */
    double max_ref; /* max |ref| */
    int64_t worst;  /* element with the largest |c - ref| */
    int ok;
};

static inline struct cmp compare(const float *c, const float *ref, int64_t n)
{
    struct cmp r = {0};
    double dd = 0.0, rr = 0.0;
    int finite = 1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)c[i] - (double)ref[i]);
        if (!isfinite(c[i]) || !isfinite(d)) {
            if (finite)
                r.worst = i;
            finite = 0;
            continue;
        }
        dd += d * d;
        rr += (double)ref[i] * ref[i];
        r.max_ref = fmax(r.max_ref, fabs((double)ref[i]));
        if (d > r.max_abs) {
            r.max_abs = d;
            r.worst = i;
        }
    }
    r.rel = rr > 0.0 ? sqrt(dd / rr) : (dd > 0.0 ? INFINITY : 0.0);
    r.tol_abs = REL_TOL * r.max_ref + ELEM_ATOL;
    if (!finite)
        r.rel = r.max_abs = INFINITY;
    r.ok = finite && r.max_abs <= r.tol_abs && (r.rel <= REL_TOL || (rr == 0.0 && r.max_abs <= ELEM_ATOL));
    return r;
}

/* Worst errors seen by the running case (printed at its end). */
static struct {
    double rel, elem; /* elem: max |c - ref| / max |ref| */
    char rel_name[160], elem_name[160];
} worst;

static inline void worst_reset(void)
{
    memset(&worst, 0, sizeof worst);
}

static inline void worst_print(const char *what)
{
    printf("# %s: worst relative L2 error %.3e (%s), worst element error / max|ref| %.3e (%s)\n", what, worst.rel,
           worst.rel_name, worst.elem, worst.elem_name);
}

/* Compares c with ref (n floats each, contiguous; rows of `cols` for messages)
 * under `name`. With expect_ok, records a failure naming the tensor, the worst
 * element and both values, and updates the case's worst errors. */
static inline struct cmp check_arr(const char *name, const float *c, const float *ref, int64_t n, int64_t cols,
                            int expect_ok)
{
    struct cmp r = compare(c, ref, n);
    cols = cols > 0 ? cols : 1;
    printf("# %-44s rel %.3e  max|d| %.3e (tol %.3e) at [%lld, %lld]%s\n", name, r.rel, r.max_abs, r.tol_abs,
           (long long)(r.worst / cols), (long long)(r.worst % cols), r.ok ? "" : "  MISMATCH");
    if (!expect_ok)
        return r;
    TH_CHECKF(r.ok, "'%s' differs from the reference: rel L2 %.3e (limit %.0e); worst element %lld "
              "(row %lld, col %lld): c = %.9g, ref = %.9g, |d| = %.3e (limit %.3e)",
              name, r.rel, REL_TOL, (long long)r.worst, (long long)(r.worst / cols), (long long)(r.worst % cols),
              (double)c[r.worst], (double)ref[r.worst], r.max_abs, r.tol_abs);
    if (r.rel > worst.rel) {
        worst.rel = r.rel;
        snprintf(worst.rel_name, sizeof worst.rel_name, "%s", name);
    }
    double e = r.max_ref > 0.0 ? r.max_abs / r.max_ref : r.max_abs;
    if (e > worst.elem) {
        worst.elem = e;
        snprintf(worst.elem_name, sizeof worst.elem_name, "%s", name);
    }
    return r;
}

/* A copy of f32 record `name` (n elements) from tr_malloc, or NULL (failure
 * recorded). *cols gets its last dimension. */
static inline float *gold_dup(const struct gold *g, const char *name, int64_t n, int64_t *cols)
{
    float *ref = tr_malloc((size_t)(n ? n : 1) * sizeof(float));
    TH_CHECK(ref != NULL);
    const struct gold_rec *rec = ref ? gold_get(g, name, GOLD_F32, n, ref) : NULL;
    if (!rec) {
        tr_free(ref);
        return NULL;
    }
    *cols = rec->ndim ? (int64_t)rec->dims[rec->ndim - 1] : 1;
    return ref;
}

/* Compares c (n floats, contiguous) with fixture record `name` (check_arr). The
 * result has ok = 0 also when the record is missing. */
static inline struct cmp check_vs(const struct gold *g, const char *name, const float *c, int64_t n, int expect_ok)
{
    struct cmp r = {0};
    int64_t cols = 1;
    float *ref = gold_dup(g, name, n, &cols);
    if (ref)
        r = check_arr(name, c, ref, n, cols, expect_ok);
    tr_free(ref);
    return r;
}

/* Relative check of a double scalar (loss, lr). */
static inline void check_scalar(const char *what, double c, double ref, double tol)
{
    double rel = fabs(c - ref) / fmax(fabs(ref), 1e-30);
    printf("# %-44s c %.12g ref %.12g rel %.3e\n", what, c, ref, rel);
    TH_CHECKF(rel <= tol, "%s: c = %.12g, ref = %.12g, relative error %.3e > %.0e", what, c, ref, rel, tol);
    if (rel > worst.rel) {
        worst.rel = rel;
        snprintf(worst.rel_name, sizeof worst.rel_name, "%s", what);
    }
}

#endif
