/* manifest.c: a checkpoint's manifest (manifest.h): parsing and validation of
 * untrusted JSON (jansson; every field with its type and range, the stripe and
 * block rule in O(n log n)), writing it back, building and merging manifests.
 * It reads no chunk: whether the chunks exist is the store's business (store_run.c). */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "manifest.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"

#define MAX_CHUNKS (1 << 24)
#define MAX_ROWS (INT64_C(1) << 40)
#define MAX_AREA (INT64_C(1) << 58) /* elements of a tensor: its bytes fit in int64_t */
#define MAX_WORLD (1 << 20)

/* Logs the one error line of a refused manifest and returns TR_ERR_FORMAT. */
static enum tr_status bad(const char *what, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum tr_status bad(const char *what, const char *path, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    LOG_ERROR("%s: %s: %s", what, path, why);
    return TR_ERR_FORMAT;
}

static int name_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (n >= CKPT_NAME_MAX)
            return 0;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-' || c == '/'))
            return 0;
    }
    return n > 0;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* o[key] as an integer in [lo, hi]. `prefix` is the JSON path of o ("" at the top). */
static enum tr_status get_int(const json_t *o, const char *key, const char *prefix, int64_t lo, int64_t hi,
                              int64_t *out, const char *what)
{
    char path[128];
    snprintf(path, sizeof path, "%.100s%s%s", prefix, *prefix ? "." : "", key);
    const json_t *v = json_object_get(o, key);
    if (!v)
        return bad(what, path, "missing");
    if (!json_is_integer(v))
        return bad(what, path, "must be an integer, not %s", json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bad(what, path, "%lld is outside [%" PRId64 ", %" PRId64 "]", (long long)x, lo, hi);
    *out = (int64_t)x;
    return TR_OK;
}

/* o[key] as a string of at most cap - 1 bytes, copied into dst. */
static enum tr_status get_str(const json_t *o, const char *key, const char *prefix, char *dst, size_t cap,
                              const char *what)
{
    char path[128];
    snprintf(path, sizeof path, "%.100s%s%s", prefix, *prefix ? "." : "", key);
    const json_t *v = json_object_get(o, key);
    if (!v)
        return bad(what, path, "missing");
    if (!json_is_string(v))
        return bad(what, path, "must be a string, not %s", json_kind(v));
    size_t n = json_string_length(v);
    if (n >= cap)
        return bad(what, path, "longer than %zu bytes", cap - 1);
    memcpy(dst, json_string_value(v), n + 1);
    if (strlen(dst) != n)
        return bad(what, path, "holds a NUL character");
    return TR_OK;
}

/* v as [a, b] with lo <= a < b <= hi. */
static enum tr_status get_range(const json_t *o, const char *key, const char *prefix, int64_t hi, int64_t *a,
                                int64_t *b, const char *what)
{
    char path[128];
    snprintf(path, sizeof path, "%.100s.%s", prefix, key);
    const json_t *v = json_object_get(o, key);
    if (!v)
        return bad(what, path, "missing");
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)))
        return bad(what, path, "must be an array of two integers [begin, end]");
    json_int_t x = json_integer_value(json_array_get(v, 0)), y = json_integer_value(json_array_get(v, 1));
    if (x < 0 || y <= x || y > hi)
        return bad(what, path, "[%lld, %lld] is not a non-empty range inside [0, %" PRId64 "]", (long long)x,
                   (long long)y, hi);
    *a = (int64_t)x;
    *b = (int64_t)y;
    return TR_OK;
}

static enum tr_status parse_chunk(const json_t *v, const struct ckpt_tensor *t, const char *path,
                                  struct ckpt_chunk *c, int version, const char *what)
{
    if (!json_is_object(v))
        return bad(what, path, "must be an object, not %s", json_kind(v));
    TR_CHECK(get_range(v, "rows", path, t->shape[0], &c->r0, &c->r1, what));
    TR_CHECK(get_range(v, "cols", path, t->shape[1], &c->c0, &c->c1, what));
    char hpath[128];
    TR_CHECK(get_str(v, "hash", path, c->hash, sizeof c->hash, what));
    snprintf(hpath, sizeof hpath, "%.100s.hash", path);
    if (!ckpt_hash_ok(c->hash))
        return bad(what, hpath, "'%s' is not 32 lowercase hex digits", c->hash);
    int64_t want = (c->r1 - c->r0) * (c->c1 - c->c0) * 4;
    TR_CHECK(get_int(v, "bytes", path, 0, INT64_MAX, &c->bytes, what));
    if (c->bytes != want) {
        snprintf(hpath, sizeof hpath, "%.100s.bytes", path);
        return bad(what, hpath, "%" PRId64 " where rows x cols x 4 = %" PRId64, c->bytes, want);
    }
    c->tag[0] = '\0';
    if (version >= 2) { /* the tag binds the bytes to this tensor and position */
        TR_CHECK(get_str(v, "tag", path, c->tag, sizeof c->tag, what));
        snprintf(hpath, sizeof hpath, "%.100s.tag", path);
        if (!ckpt_hash_ok(c->tag))
            return bad(what, hpath, "'%s' is not 32 lowercase hex digits", c->tag);
    }
    return TR_OK;
}

static enum tr_status parse_tensor(const json_t *v, int i, struct ckpt_tensor *t, int64_t *total, int version,
                                   const char *what)
{
    char path[96], sub[128];
    snprintf(path, sizeof path, "tensors[%d]", i);
    if (!json_is_object(v))
        return bad(what, path, "must be an object, not %s", json_kind(v));
    TR_CHECK(get_str(v, "name", path, t->name, sizeof t->name, what));
    snprintf(sub, sizeof sub, "%s.name", path);
    if (!name_ok(t->name))
        return bad(what, sub, "'%s' is not a tensor name (1 to %d characters of [A-Za-z0-9._/-])", t->name,
                   CKPT_NAME_MAX);
    char dtype[8];
    TR_CHECK(get_str(v, "dtype", path, dtype, sizeof dtype, what));
    if (strcmp(dtype, "f32") != 0) {
        snprintf(sub, sizeof sub, "%s.dtype", path);
        return bad(what, sub, "'%s' is not supported (only \"f32\")", dtype);
    }
    const json_t *shape = json_object_get(v, "shape");
    snprintf(sub, sizeof sub, "%s.shape", path);
    if (!shape)
        return bad(what, sub, "missing");
    size_t nd = json_is_array(shape) ? json_array_size(shape) : 0;
    if (nd < 1 || nd > 2)
        return bad(what, sub, "must be an array of one or two integers");
    t->ndim = (int)nd;
    t->shape[1] = 1;
    for (size_t d = 0; d < nd; d++) {
        const json_t *x = json_array_get(shape, d);
        if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > MAX_ROWS)
            return bad(what, sub, "dimension %zu must be an integer in [1, %" PRId64 "]", d, MAX_ROWS);
        t->shape[d] = (int64_t)json_integer_value(x);
    }
    if (t->shape[0] > MAX_AREA / t->shape[1])
        return bad(what, sub, "%" PRId64 " x %" PRId64 " elements are too many", t->shape[0], t->shape[1]);
    const json_t *chunks = json_object_get(v, "chunks");
    snprintf(sub, sizeof sub, "%s.chunks", path);
    if (!chunks)
        return bad(what, sub, "missing");
    if (!json_is_array(chunks))
        return bad(what, sub, "must be an array, not %s", json_kind(chunks));
    size_t n = json_array_size(chunks);
    if ((int64_t)n > MAX_CHUNKS - *total)
        return bad(what, sub, "more than %d chunks in the manifest", MAX_CHUNKS);
    *total += (int64_t)n;
    t->chunks = tr_calloc(n ? n : 1, sizeof *t->chunks);
    if (!t->chunks)
        return TR_ERR_NOMEM;
    t->cap = (int)n;
    for (size_t j = 0; j < n; j++) {
        snprintf(sub, sizeof sub, "%s.chunks[%zu]", path, j);
        TR_CHECK(parse_chunk(json_array_get(chunks, j), t, sub, &t->chunks[j], version, what));
        t->nchunks++;
    }
    return TR_OK;
}

static int cmp_name_ptr(const void *a, const void *b)
{
    const struct ckpt_tensor *x = *(const struct ckpt_tensor *const *)a, *y = *(const struct ckpt_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* No two tensors have one name: the names sorted, neighbours compared. */
static enum tr_status check_names(const struct ckpt_manifest *m, const char *what)
{
    if (m->ntensors < 2)
        return TR_OK;
    const struct ckpt_tensor **v = tr_malloc((size_t)m->ntensors * sizeof *v);
    if (!v)
        return TR_ERR_NOMEM;
    for (int i = 0; i < m->ntensors; i++)
        v[i] = &m->tensors[i];
    qsort(v, (size_t)m->ntensors, sizeof *v, cmp_name_ptr);
    enum tr_status rc = TR_OK;
    for (int i = 1; i < m->ntensors && rc == TR_OK; i++) {
        if (strcmp(v[i]->name, v[i - 1]->name) == 0) {
            char path[64];
            int a = (int)(v[i - 1] - m->tensors), b = (int)(v[i] - m->tensors);
            snprintf(path, sizeof path, "tensors[%d].name", TR_MAX(a, b));
            rc = bad(what, path, "'%s' is also the name of tensors[%d]", v[i]->name, TR_MIN(a, b));
        }
    }
    tr_free(v);
    return rc;
}

enum tr_status ckpt_manifest_parse(const char *text, size_t n, const char *what, struct ckpt_manifest *m)
{
    enum tr_status rc = TR_OK;
    memset(m, 0, sizeof *m);
    json_error_t err;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        LOG_ERROR("%s: line %d column %d: not JSON: %s", what, err.line, err.column, err.text);
        return TR_ERR_FORMAT;
    }
    int64_t v = 0;
    char kind[16];
    if (!json_is_object(root)) {
        rc = bad(what, "(top)", "must be an object, not %s", json_kind(root));
        goto fail;
    }
    TR_CHECK_GOTO(get_int(root, "format_version", "", INT64_MIN, INT64_MAX, &v, what), rc, fail);
    if (v < 1 || v > CKPT_FORMAT_VERSION) {
        rc = bad(what, "format_version", "%" PRId64 " is not supported (this build reads 1 to %d)", v,
                 CKPT_FORMAT_VERSION);
        goto fail;
    }
    m->format_version = (int)v;
    TR_CHECK_GOTO(get_str(root, "kind", "", kind, sizeof kind, what), rc, fail);
    if (strcmp(kind, "manifest") != 0 && strcmp(kind, "part") != 0) {
        rc = bad(what, "kind", "'%s' is neither \"manifest\" nor \"part\"", kind);
        goto fail;
    }
    m->part = kind[0] == 'p';
    TR_CHECK_GOTO(get_str(root, "run", "", m->run, sizeof m->run, what), rc, fail);
    if (!ckpt_run_ok(m->run)) {
        rc = bad(what, "run", "'%s' is not a run name (1 to %d characters of [A-Za-z0-9._-], not starting with '.')",
                 m->run, CKPT_RUN_MAX);
        goto fail;
    }
    TR_CHECK_GOTO(get_int(root, "step", "", 0, INT64_C(999999999999999999), &m->step, what), rc, fail);
    TR_CHECK_GOTO(get_int(root, "world", "", 1, MAX_WORLD, &v, what), rc, fail);
    m->world = (int)v;
    TR_CHECK_GOTO(get_int(root, "rank", "", m->part ? 0 : -1, m->part ? m->world - 1 : -1, &v, what), rc, fail);
    m->rank = (int)v;
    TR_CHECK_GOTO(get_str(root, "split", "", m->split, sizeof m->split, what), rc, fail);
    if (strcmp(m->split, "columnwise") != 0 && strcmp(m->split, "tablewise") != 0) {
        rc = bad(what, "split", "'%s' is neither \"columnwise\" nor \"tablewise\"", m->split);
        goto fail;
    }
    TR_CHECK_GOTO(get_str(root, "created", "", m->created, sizeof m->created, what), rc, fail);
    for (const char *p = m->created; *p; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            rc = bad(what, "created", "holds a character that is not printable ASCII");
            goto fail;
        }
    }
    static const char *const objs[] = {"config", "state"};
    for (int i = 0; i < 2; i++) {
        json_t *o = json_object_get(root, objs[i]);
        if (!o || !json_is_object(o)) {
            rc = bad(what, objs[i], o ? "must be an object" : "missing");
            goto fail;
        }
        *(i == 0 ? &m->config : &m->state) = json_incref(o);
    }
    const json_t *tensors = json_object_get(root, "tensors");
    if (!tensors || !json_is_array(tensors)) {
        rc = bad(what, "tensors", tensors ? "must be an array" : "missing");
        goto fail;
    }
    size_t nt = json_array_size(tensors);
    if (nt > MAX_CHUNKS) {
        rc = bad(what, "tensors", "more than %d tensors", MAX_CHUNKS);
        goto fail;
    }
    m->tensors = tr_calloc(nt ? nt : 1, sizeof *m->tensors);
    if (!m->tensors) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    m->cap = (int)nt;
    int64_t total = 0;
    for (size_t i = 0; i < nt; i++) {
        m->ntensors++; /* counted first: its chunks are released on error */
        TR_CHECK_GOTO(parse_tensor(json_array_get(tensors, i), (int)i, &m->tensors[i], &total, m->format_version, what), rc, fail);
    }
    TR_CHECK_GOTO(check_names(m, what), rc, fail);
    TR_CHECK_GOTO(ckpt_manifest_check(m, what), rc, fail);
    json_decref(root);
    return TR_OK;
fail:
    json_decref(root);
    ckpt_manifest_release(m);
    return rc;
}

/* ---- the stripe and block rule ----------------------------------------------------- */

struct span {
    int64_t c0, c1, r0, r1;
    int idx;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->c0 != y->c0)
        return x->c0 < y->c0 ? -1 : 1;
    if (x->c1 != y->c1)
        return x->c1 < y->c1 ? -1 : 1;
    if (x->r0 != y->r0)
        return x->r0 < y->r0 ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* One tensor; s is scratch room for its chunks. */
static enum tr_status check_tensor(const struct ckpt_tensor *t, int ti, int whole, struct span *s, const char *what)
{
    char path[96];
    const int n = t->nchunks;
    const int64_t rows = t->shape[0], cols = t->shape[1];
    snprintf(path, sizeof path, "tensors[%d].chunks", ti);
    if (n == 0)
        return whole ? bad(what, path, "tensor '%s' has no chunks", t->name) : TR_OK;
    for (int j = 0; j < n; j++) {
        const struct ckpt_chunk *c = &t->chunks[j];
        s[j] = (struct span){c->c0, c->c1, c->r0, c->r1, j};
    }
    qsort(s, (size_t)n, sizeof *s, cmp_span);
    for (int j = 0; j < n; j++) {
        const struct span *c = &s[j], *p = j > 0 ? &s[j - 1] : NULL;
        snprintf(path, sizeof path, "tensors[%d].chunks[%d]", ti, c->idx);
        if (!p || p->c0 != c->c0 || p->c1 != c->c1) { /* a new stripe */
            if (p && c->c0 < p->c1)
                return bad(what, path, "tensor '%s': cols [%" PRId64 ", %" PRId64 ") overlap the stripe of chunks[%d], "
                           "cols [%" PRId64 ", %" PRId64 ")", t->name, c->c0, c->c1, p->idx, p->c0, p->c1);
            if (whole && p && p->r1 != rows)
                return bad(what, path, "tensor '%s': rows [%" PRId64 ", %" PRId64 ") of cols [%" PRId64 ", %" PRId64
                           ") are in no chunk", t->name, p->r1, rows, p->c0, p->c1);
            if (whole && c->c0 != (p ? p->c1 : 0))
                return bad(what, path, "tensor '%s': cols [%" PRId64 ", %" PRId64 ") are in no chunk", t->name,
                           p ? p->c1 : 0, c->c0);
            if (whole && c->r0 != 0)
                return bad(what, path, "tensor '%s': rows [0, %" PRId64 ") of cols [%" PRId64 ", %" PRId64
                           ") are in no chunk", t->name, c->r0, c->c0, c->c1);
        } else if (c->r0 < p->r1) {
            return bad(what, path, "tensor '%s': rows [%" PRId64 ", %" PRId64 ") overlap chunks[%d], rows [%" PRId64
                       ", %" PRId64 ") (cols [%" PRId64 ", %" PRId64 "))", t->name, c->r0, c->r1, p->idx, p->r0,
                       p->r1, c->c0, c->c1);
        } else if (whole && c->r0 != p->r1) {
            return bad(what, path, "tensor '%s': rows [%" PRId64 ", %" PRId64 ") of cols [%" PRId64 ", %" PRId64
                       ") are in no chunk", t->name, p->r1, c->r0, c->c0, c->c1);
        }
    }
    const struct span *last = &s[n - 1];
    snprintf(path, sizeof path, "tensors[%d].chunks[%d]", ti, last->idx);
    if (whole && last->r1 != rows)
        return bad(what, path, "tensor '%s': rows [%" PRId64 ", %" PRId64 ") of cols [%" PRId64 ", %" PRId64
                   ") are in no chunk", t->name, last->r1, rows, last->c0, last->c1);
    if (whole && last->c1 != cols)
        return bad(what, path, "tensor '%s': cols [%" PRId64 ", %" PRId64 ") are in no chunk", t->name, last->c1,
                   cols);
    return TR_OK;
}

enum tr_status ckpt_manifest_check(const struct ckpt_manifest *m, const char *what)
{
    int most = 0;
    for (int i = 0; i < m->ntensors; i++)
        most = TR_MAX(most, m->tensors[i].nchunks);
    struct span *s = tr_malloc((size_t)(most ? most : 1) * sizeof *s);
    if (!s)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    for (int i = 0; i < m->ntensors && rc == TR_OK; i++)
        rc = check_tensor(&m->tensors[i], i, !m->part, s, what);
    tr_free(s);
    return rc;
}

/* ---- writing ---------------------------------------------------------------------- */

struct buf {
    char *p;
    size_t n, cap;
    int oom;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = tr_realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    TR_ASSERT(k >= 0 && (size_t)k < sizeof tmp);
    buf_add(b, tmp, (size_t)k);
}

/* A JSON value through jansson (strings escaped, objects as given). */
static void buf_json(struct buf *b, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (!s) {
        b->oom = 1;
        return;
    }
    buf_add(b, s, strlen(s));
    free(s);
}

enum tr_status ckpt_manifest_dump(const struct ckpt_manifest *m, char **text, size_t *n)
{
    struct buf b = {0};
    *text = NULL;
    *n = 0;
    /* version 2 when every chunk has its tag; else version 1 without tags */
    int version = m->format_version >= 2 ? 2 : 1;
    for (int i = 0; i < m->ntensors && version == 2; i++)
        for (int j = 0; j < m->tensors[i].nchunks; j++)
            if (!m->tensors[i].chunks[j].tag[0])
                version = 1;
    buf_printf(&b, "{\"format_version\": %d, \"kind\": \"%s\", \"run\": \"%s\", \"step\": %" PRId64
               ", \"rank\": %d, \"world\": %d, \"split\": \"%s\", \"created\": ",
               version, m->part ? "part" : "manifest", m->run, m->step, m->rank, m->world, m->split);
    json_t *created = json_string(m->created);
    buf_json(&b, created);
    json_decref(created);
    buf_add(&b, ",\n \"config\": ", 13);
    if (m->config)
        buf_json(&b, m->config);
    else
        buf_add(&b, "{}", 2);
    buf_add(&b, ",\n \"state\": ", 12);
    if (m->state)
        buf_json(&b, m->state);
    else
        buf_add(&b, "{}", 2);
    buf_add(&b, ",\n \"tensors\": [", 15);
    for (int i = 0; i < m->ntensors; i++) {
        const struct ckpt_tensor *t = &m->tensors[i];
        buf_printf(&b, "%s\n  {\"name\": \"%s\", \"dtype\": \"f32\", \"shape\": [%" PRId64, i ? "," : "", t->name,
                   t->shape[0]);
        if (t->ndim == 2)
            buf_printf(&b, ", %" PRId64, t->shape[1]);
        buf_add(&b, "], \"chunks\": [", 14);
        for (int j = 0; j < t->nchunks; j++) {
            const struct ckpt_chunk *c = &t->chunks[j];
            buf_printf(&b, "%s\n   {\"rows\": [%" PRId64 ", %" PRId64 "], \"cols\": [%" PRId64 ", %" PRId64
                       "], \"hash\": \"%s\", \"bytes\": %" PRId64,
                       j ? "," : "", c->r0, c->r1, c->c0, c->c1, c->hash, c->bytes);
            if (version >= 2)
                buf_printf(&b, ", \"tag\": \"%s\"", c->tag);
            buf_add(&b, "}", 1);
        }
        buf_add(&b, "]}", 2);
    }
    buf_add(&b, "]}\n", 3);
    if (b.oom) {
        tr_free(b.p);
        return TR_ERR_NOMEM;
    }
    *text = b.p;
    *n = b.n;
    return TR_OK;
}

/* ---- building ---------------------------------------------------------------------- */

enum tr_status ckpt_manifest_init(struct ckpt_manifest *m, const char *run, int64_t step, int rank, int world,
                                  const char *split)
{
    memset(m, 0, sizeof *m);
    if (!ckpt_run_ok(run) || step < 0 || world < 1 || rank >= world || rank < -1 || !split ||
        (strcmp(split, "columnwise") != 0 && strcmp(split, "tablewise") != 0))
        return TR_ERR_ARG;
    m->format_version = CKPT_FORMAT_VERSION;
    m->part = rank >= 0;
    snprintf(m->run, sizeof m->run, "%s", run);
    m->step = step;
    m->rank = rank;
    m->world = world;
    snprintf(m->split, sizeof m->split, "%s", split);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(m->created, sizeof m->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    m->config = json_object();
    m->state = json_object();
    if (!m->config || !m->state) {
        ckpt_manifest_release(m);
        return TR_ERR_NOMEM;
    }
    return TR_OK;
}

void ckpt_manifest_release(struct ckpt_manifest *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->ntensors; i++)
        tr_free(m->tensors[i].chunks);
    tr_free(m->tensors);
    json_decref(m->config);
    json_decref(m->state);
    memset(m, 0, sizeof *m);
}

struct ckpt_tensor *ckpt_manifest_find(const struct ckpt_manifest *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

enum tr_status ckpt_manifest_add_tensor(struct ckpt_manifest *m, const char *name, int ndim, int64_t rows,
                                        int64_t cols, struct ckpt_tensor **out)
{
    *out = NULL;
    if (ndim == 1)
        cols = 1;
    if (!name_ok(name) || (ndim != 1 && ndim != 2) || rows < 1 || rows > MAX_ROWS || cols < 1 || cols > MAX_ROWS ||
        rows > MAX_AREA / cols) {
        LOG_ERROR("cannot add tensor '%.*s' (%d-D, %" PRId64 " x %" PRId64 ") to the manifest of run '%s' step %" PRId64
                  ": bad name or shape", CKPT_NAME_MAX, name, ndim, rows, cols, m->run, m->step);
        return TR_ERR_ARG;
    }
    struct ckpt_tensor *t = ckpt_manifest_find(m, name);
    if (t) {
        if (t->ndim != ndim || t->shape[0] != rows || t->shape[1] != cols) {
            LOG_ERROR("tensor '%s' is %" PRId64 " x %" PRId64 " in the manifest of run '%s' step %" PRId64
                      ", not %" PRId64 " x %" PRId64, name, t->shape[0], t->shape[1], m->run, m->step, rows, cols);
            return TR_ERR_ARG;
        }
        *out = t;
        return TR_OK;
    }
    if (m->ntensors == m->cap) {
        int nc = m->cap ? 2 * m->cap : 16;
        struct ckpt_tensor *nt = tr_realloc(m->tensors, (size_t)nc * sizeof *nt);
        if (!nt)
            return TR_ERR_NOMEM;
        m->tensors = nt;
        m->cap = nc;
    }
    t = &m->tensors[m->ntensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = cols;
    *out = t;
    return TR_OK;
}

enum tr_status ckpt_tensor_add_chunk(struct ckpt_tensor *t, const struct ckpt_chunk *c)
{
    if (c->r0 < 0 || c->r1 <= c->r0 || c->r1 > t->shape[0] || c->c0 < 0 || c->c1 <= c->c0 || c->c1 > t->shape[1] ||
        t->nchunks >= MAX_CHUNKS) {
        LOG_ERROR("tensor '%s' (%" PRId64 " x %" PRId64 "): chunk rows [%" PRId64 ", %" PRId64 ") cols [%" PRId64
                  ", %" PRId64 ") lies outside it", t->name, t->shape[0], t->shape[1], c->r0, c->r1, c->c0, c->c1);
        return TR_ERR_ARG;
    }
    if (t->nchunks == t->cap) {
        int nc = t->cap ? 2 * t->cap : 8;
        struct ckpt_chunk *nv = tr_realloc(t->chunks, (size_t)nc * sizeof *nv);
        if (!nv)
            return TR_ERR_NOMEM;
        t->chunks = nv;
        t->cap = nc;
    }
    t->chunks[t->nchunks++] = *c;
    return TR_OK;
}

enum tr_status ckpt_manifest_merge(struct ckpt_manifest *dst, const struct ckpt_manifest *part)
{
    if (strcmp(dst->run, part->run) != 0 || dst->step != part->step) {
        LOG_ERROR("cannot merge the part of rank %d (run '%s' step %" PRId64 ") into run '%s' step %" PRId64,
                  part->rank, part->run, part->step, dst->run, dst->step);
        return TR_ERR_FORMAT;
    }
    for (int i = 0; i < part->ntensors; i++) {
        const struct ckpt_tensor *pt = &part->tensors[i];
        struct ckpt_tensor *t = ckpt_manifest_find(dst, pt->name);
        if (t && (t->ndim != pt->ndim || t->shape[0] != pt->shape[0] || t->shape[1] != pt->shape[1])) {
            LOG_ERROR("cannot merge the part of rank %d: tensor '%s' is %" PRId64 " x %" PRId64 " there and %" PRId64
                      " x %" PRId64 " in the manifest", part->rank, pt->name, pt->shape[0], pt->shape[1],
                      t->shape[0], t->shape[1]);
            return TR_ERR_FORMAT;
        }
        if (!t) {
            enum tr_status rc = ckpt_manifest_add_tensor(dst, pt->name, pt->ndim, pt->shape[0], pt->shape[1], &t);
            if (rc != TR_OK)
                return rc == TR_ERR_ARG ? TR_ERR_FORMAT : rc;
        }
        for (int j = 0; j < pt->nchunks; j++) {
            enum tr_status rc = ckpt_tensor_add_chunk(t, &pt->chunks[j]);
            if (rc != TR_OK)
                return rc == TR_ERR_ARG ? TR_ERR_FORMAT : rc;
        }
    }
    return TR_OK;
}

struct hash_bytes {
    char hash[CKPT_HASH_LEN + 1];
    int64_t bytes;
};

static int cmp_hash_bytes(const void *a, const void *b)
{
    return strcmp(((const struct hash_bytes *)a)->hash, ((const struct hash_bytes *)b)->hash);
}

enum tr_status ckpt_manifest_totals(const struct ckpt_manifest *m, struct ckpt_manifest_totals *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < m->ntensors; i++)
        t->chunks += m->tensors[i].nchunks;
    if (t->chunks == 0)
        return TR_OK;
    struct hash_bytes *v = tr_malloc((size_t)t->chunks * sizeof *v);
    if (!v)
        return TR_ERR_NOMEM;
    size_t k = 0;
    for (int i = 0; i < m->ntensors; i++) {
        for (int j = 0; j < m->tensors[i].nchunks; j++) {
            const struct ckpt_chunk *c = &m->tensors[i].chunks[j];
            memcpy(v[k].hash, c->hash, sizeof v[k].hash);
            v[k++].bytes = c->bytes;
            t->bytes += c->bytes;
        }
    }
    qsort(v, k, sizeof *v, cmp_hash_bytes);
    for (size_t i = 0; i < k; i++) {
        if (i == 0 || strcmp(v[i].hash, v[i - 1].hash) != 0) {
            t->distinct_chunks++;
            t->distinct_bytes += v[i].bytes;
        }
    }
    tr_free(v);
    return TR_OK;
}
