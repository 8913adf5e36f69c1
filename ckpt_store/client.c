/* client.c: the checkpoint store client of client.h: opening a store (a local
 * path, served by direct calls to store.h, or a URL: its token and a curl multi
 * handle) and a run's objects (manifests, parts, LATEST, claims, the health check,
 * listing, gc). Requests run in client_http.c, chunks move in client_chunks.c. It
 * does not cache anything, and it never follows redirects. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "client_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"

/* ---- open and close ---------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

enum tr_status ckpt_client_open(const char *where, const struct ckpt_client_opts *o, struct ckpt_client **out)
{
    enum tr_status rc = TR_OK;
    struct ckpt_client_opts def = {0};
    char *token = NULL, *auth = NULL;
    if (!o)
        o = &def;
    *out = NULL;
    struct ckpt_client *c = tr_calloc(1, sizeof *c);
    if (!c)
        return TR_ERR_NOMEM;
    c->parallel = o->parallel > 0 ? o->parallel : 8;
    c->retries = o->retries == 0 ? 5 : o->retries < 0 ? 0 : o->retries;
    c->timeout = o->timeout > 0 ? o->timeout : 300;
    c->remote = !strncmp(where, "http://", 7) || !strncmp(where, "https://", 8);
    c->where = tr_strdup(where);
    if (!c->where) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    if (!c->remote) {
        TR_CHECK_GOTO(ckpt_fs_open(&c->fs, where), rc, fail);
        goto exit;
    }
    size_t len = strlen(c->where);
    while (len > 0 && c->where[len - 1] == '/')
        c->where[--len] = '\0';
    const char *host = strstr(c->where, "://") + 3;
    if (!*host || strchr(host, '/') || strpbrk(host, " \t\r\n?#")) {
        LOG_ERROR("bad store URL '%s': expected http://HOST:PORT", where);
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (!o->token_file || !*o->token_file) {
        LOG_ERROR("store '%s' is a URL and no token file was given", c->where);
        rc = TR_ERR_ARG;
        goto fail;
    }
    TR_CHECK_GOTO(tr_file_read_token(o->token_file, "token file", &token), rc, fail);
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        LOG_ERROR("cannot initialise libcurl: %s", curl_easy_strerror(curl_init_rc));
        rc = TR_ERR_UNSUPPORTED;
        goto fail;
    }
    size_t alen = strlen(token) + 32;
    auth = tr_malloc(alen);
    if (!auth) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    snprintf(auth, alen, "Authorization: Bearer %s", token);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    if (h)
        c->headers = h;
    if (!h || !(h = curl_slist_append(c->headers, "Expect:"))) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    c->headers = h;
    c->multi = curl_multi_init();
    c->pool = tr_calloc((size_t)c->parallel, sizeof *c->pool);
    c->pool_busy = tr_calloc((size_t)c->parallel, sizeof *c->pool_busy);
    if (!c->multi || !c->pool || !c->pool_busy) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)c->parallel);
exit:
    tr_free(token);
    tr_free(auth);
    if (rc == TR_OK)
        *out = c;
    return rc;
fail:
    ckpt_client_close(&c);
    goto exit;
}

void ckpt_client_close(struct ckpt_client **pc)
{
    struct ckpt_client *c = *pc;
    if (!c)
        return;
    for (int i = 0; c->pool && i < c->parallel; i++)
        if (c->pool[i])
            curl_easy_cleanup(c->pool[i]);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->headers);
    if (!c->remote && c->fs.root)
        ckpt_fs_close(&c->fs);
    tr_free(c->pool);
    tr_free(c->pool_busy);
    tr_free(c->where);
    tr_free(c);
    *pc = NULL;
}

const char *ckpt_client_where(const struct ckpt_client *c)
{
    return c->where;
}

int ckpt_client_remote(const struct ckpt_client *c)
{
    return c->remote;
}

char *ckpt_client_chunk_location(const struct ckpt_client *c, const char *hash)
{
    if (!c->remote)
        return ckpt_fs_chunk_path(&c->fs, hash);
    return ckpt_client_url(c, "/chunks/%s", hash);
}

/* ---- run objects --------------------------------------------------------------------- */

static enum tr_status put_text(struct ckpt_client *c, char *url, const char *text, size_t n)
{
    long code = 0;
    TR_CHECK(ckpt_http_one(c, CKPT_REQ_PUT, url, text, n, 0, &code, NULL, NULL));
    return code >= 200 && code < 300 ? TR_OK : ckpt_http_status(code);
}

static enum tr_status get_text(struct ckpt_client *c, char *url, int quiet_404, char **text, size_t *n)
{
    long code = 0;
    *text = NULL;
    TR_CHECK(ckpt_http_one(c, CKPT_REQ_GET, url, NULL, 0, quiet_404, &code, text, n));
    return code >= 200 && code < 300 ? TR_OK : ckpt_http_status(code);
}

static enum tr_status check_run(const char *run)
{
    if (ckpt_run_ok(run))
        return TR_OK;
    LOG_ERROR("'%s' is not a run name", run);
    return TR_ERR_ARG;
}

enum tr_status ckpt_put_manifest(struct ckpt_client *c, const char *run, int64_t step, const char *text, size_t n)
{
    if (!c->remote)
        return ckpt_fs_manifest_put(&c->fs, run, step, text, n);
    TR_CHECK(check_run(run));
    return put_text(c, ckpt_client_url(c, "/runs/%s/manifests/%" PRId64 ".json", run, step), text, n);
}

enum tr_status ckpt_get_manifest(struct ckpt_client *c, const char *run, int64_t step, char **text, size_t *n)
{
    if (!c->remote)
        return ckpt_fs_manifest_get(&c->fs, run, step, text, n);
    TR_CHECK(check_run(run));
    return get_text(c, ckpt_client_url(c, "/runs/%s/manifests/%" PRId64 ".json", run, step), 0, text, n);
}

enum tr_status ckpt_put_part(struct ckpt_client *c, const char *run, int64_t step, int rank, const char *text,
                             size_t n)
{
    if (!c->remote)
        return ckpt_fs_part_put(&c->fs, run, step, rank, text, n);
    TR_CHECK(check_run(run));
    return put_text(c, ckpt_client_url(c, "/runs/%s/parts/%" PRId64 "/%d.json", run, step, rank), text, n);
}

enum tr_status ckpt_get_part(struct ckpt_client *c, const char *run, int64_t step, int rank, char **text, size_t *n)
{
    if (!c->remote)
        return ckpt_fs_part_get(&c->fs, run, step, rank, text, n);
    TR_CHECK(check_run(run));
    return get_text(c, ckpt_client_url(c, "/runs/%s/parts/%" PRId64 "/%d.json", run, step, rank), 1, text, n);
}

enum tr_status ckpt_commit_keep(struct ckpt_client *c, const char *run, int64_t step, int keep)
{
    if (!c->remote)
        return ckpt_fs_commit_keep(&c->fs, run, step, keep);
    TR_CHECK(check_run(run));
    char body[32];
    int n = snprintf(body, sizeof body, "%" PRId64, step);
    char *url = keep > 0 ? ckpt_client_url(c, "/runs/%s/LATEST?keep=%d", run, keep)
                         : ckpt_client_url(c, "/runs/%s/LATEST", run);
    return put_text(c, url, body, (size_t)n);
}

enum tr_status ckpt_commit(struct ckpt_client *c, const char *run, int64_t step)
{
    return ckpt_commit_keep(c, run, step, 0);
}

enum tr_status ckpt_claim(struct ckpt_client *c, const char *run, const char *owner)
{
    char holder[300] = "";
    enum tr_status rc;
    TR_CHECK(check_run(run));
    if (!c->remote) {
        rc = ckpt_fs_claim(&c->fs, run, owner, holder, sizeof holder);
    } else {
        struct ckpt_req r;
        memset(&r, 0, sizeof r);
        r.method = CKPT_REQ_POST;
        r.url = ckpt_client_url(c, "/runs/%s/claim", run);
        r.body = owner;
        r.body_len = (int64_t)strlen(owner);
        r.grow = 1;
        r.quiet_4xx = 1;
        if (!r.url)
            return TR_ERR_NOMEM;
        rc = ckpt_http_run(c, &r, 1, NULL);
        if (rc == TR_OK && r.status == 409) {
            snprintf(holder, sizeof holder, "%.299s", ckpt_req_reason(&r));
            rc = TR_ERR_RANGE;
        } else if (rc == TR_OK && (r.status < 200 || r.status >= 300)) {
            LOG_ERROR("POST %s: %ld %s", r.url, r.status, ckpt_req_reason(&r));
            rc = ckpt_http_status(r.status);
        }
        ckpt_req_release(&r);
    }
    if (rc == TR_ERR_RANGE) {
        if (c->remote)
            LOG_ERROR("checkpoint store %s refused run name '%s': 409 %s", c->where, run, holder);
        else
            LOG_ERROR("run name '%s' is in use in the checkpoint store %s (claimed by %s)", run, c->where, holder);
        LOG_HINT("to continue that run pass --resume; to start a new one pick another --run_name");
    }
    return rc;
}

enum tr_status ckpt_client_check(struct ckpt_client *c)
{
    if (!c->remote)
        return TR_OK;
    struct ckpt_req r;
    memset(&r, 0, sizeof r);
    r.method = CKPT_REQ_GET;
    r.url = ckpt_client_url(c, "/healthz");
    r.grow = 1;
    r.quiet_4xx = 1;
    if (!r.url)
        return TR_ERR_NOMEM;
    enum tr_status rc = ckpt_http_run(c, &r, 1, NULL);
    if (rc == TR_OK && (r.status == 401 || r.status == 403)) {
        LOG_ERROR("checkpoint store %s refused the token: %ld %s", c->where, r.status, ckpt_req_reason(&r));
        LOG_HINT("--checkpoint_token_file must hold the token the store was started with (terarec-ckpt --token_file)");
        rc = TR_ERR_ARG;
    } else if (rc == TR_OK && (r.status < 200 || r.status >= 300)) {
        LOG_ERROR("checkpoint store %s: GET /healthz: %ld %s", c->where, r.status, ckpt_req_reason(&r));
        rc = ckpt_http_status(r.status);
    } else if (rc != TR_OK) {
        LOG_HINT("is the checkpoint store %s running and reachable from this node?", c->where);
    }
    ckpt_req_release(&r);
    return rc;
}

enum tr_status ckpt_get_latest(struct ckpt_client *c, const char *run, int64_t *step)
{
    if (!c->remote)
        return ckpt_fs_latest(&c->fs, run, step);
    TR_CHECK(check_run(run));
    char *text = NULL;
    size_t n = 0;
    TR_CHECK(get_text(c, ckpt_client_url(c, "/runs/%s/LATEST", run), 1, &text, &n));
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    enum tr_status rc = TR_OK;
    if (end == text || errno || v < 0 || (*end && *end != '\n')) {
        LOG_ERROR("GET %s/runs/%s/LATEST: '%.40s' is not a step", c->where, run, text);
        rc = TR_ERR_FORMAT;
    } else {
        *step = v;
    }
    tr_free(text);
    return rc;
}

/* The JSON answer of url, its member `key` an array. */
static enum tr_status get_json_array(struct ckpt_client *c, char *url, const char *key, json_t **root,
                                     json_t **arr)
{
    char *text = NULL;
    size_t n = 0;
    char *u = url ? tr_strdup(url) : NULL;
    enum tr_status rc = get_text(c, url, 0, &text, &n);
    if (rc == TR_OK) {
        json_error_t err;
        *root = json_loadb(text, n, 0, &err);
        *arr = *root ? json_object_get(*root, key) : NULL;
        if (!*arr || !json_is_array(*arr)) {
            LOG_ERROR("GET %s: not a JSON object with an array '%s'", u ? u : "?", key);
            json_decref(*root);
            *root = NULL;
            rc = TR_ERR_FORMAT;
        }
    }
    tr_free(text);
    tr_free(u);
    return rc;
}

enum tr_status ckpt_list_runs(struct ckpt_client *c, char ***names, int *n)
{
    if (!c->remote)
        return ckpt_fs_list_runs(&c->fs, names, n);
    *names = NULL;
    *n = 0;
    json_t *root = NULL, *arr = NULL;
    TR_CHECK(get_json_array(c, ckpt_client_url(c, "/runs"), "runs", &root, &arr));
    enum tr_status rc = TR_OK;
    size_t m = json_array_size(arr);
    char **v = m ? tr_calloc(m, sizeof *v) : NULL;
    if (m && !v)
        rc = TR_ERR_NOMEM;
    for (size_t i = 0; rc == TR_OK && i < m; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (!s || !ckpt_run_ok(s)) {
            LOG_ERROR("GET %s/runs: runs[%zu] is not a run name", c->where, i);
            rc = TR_ERR_FORMAT;
        } else if (!(v[i] = tr_strdup(s))) {
            rc = TR_ERR_NOMEM;
        }
    }
    json_decref(root);
    if (rc != TR_OK) {
        ckpt_free_names(v, (int)m);
        return rc;
    }
    *names = v;
    *n = (int)m;
    return TR_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

enum tr_status ckpt_list_steps(struct ckpt_client *c, const char *run, int64_t **steps, int *n)
{
    if (!c->remote)
        return ckpt_fs_list_steps(&c->fs, run, steps, n);
    *steps = NULL;
    *n = 0;
    TR_CHECK(check_run(run));
    json_t *root = NULL, *arr = NULL;
    enum tr_status rc = get_json_array(c, ckpt_client_url(c, "/runs/%s/manifests", run), "steps", &root, &arr);
    if (rc == TR_ERR_NOT_FOUND)
        return TR_OK; /* a missing run lists no steps */
    TR_CHECK(rc);
    size_t m = json_array_size(arr);
    int64_t *v = m ? tr_malloc(m * sizeof *v) : NULL;
    if (m && !v)
        rc = TR_ERR_NOMEM;
    for (size_t i = 0; rc == TR_OK && i < m; i++) {
        json_t *e = json_array_get(arr, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0) {
            LOG_ERROR("GET %s/runs/%s/manifests: steps[%zu] is not a step", c->where, run, i);
            rc = TR_ERR_FORMAT;
        } else {
            v[i] = json_integer_value(e);
        }
    }
    json_decref(root);
    if (rc != TR_OK) {
        tr_free(v);
        return rc;
    }
    if (m)
        qsort(v, m, sizeof *v, cmp_i64);
    *steps = v;
    *n = (int)m;
    return TR_OK;
}

enum tr_status ckpt_gc(struct ckpt_client *c, const struct ckpt_gc_opts *o, struct ckpt_gc_stats *st)
{
    if (!c->remote)
        return ckpt_fs_gc(&c->fs, o, st);
    const int keep = o->keep;
    if (keep < 0 || !(o->grace_s >= 0)) {
        LOG_ERROR("gc: keep %d or grace %g is below 0", keep, o->grace_s);
        return TR_ERR_ARG;
    }
    char *text = NULL;
    size_t n = 0;
    long code = 0;
    char *url = ckpt_client_url(c, "/gc?keep=%d&grace=%lld", keep, (long long)ceil(o->grace_s));
    TR_CHECK(ckpt_http_one(c, CKPT_REQ_POST, url, NULL, 0, 0, &code, &text, &n));
    if (code < 200 || code >= 300)
        return ckpt_http_status(code);
    json_error_t err;
    json_t *root = json_loadb(text, n, 0, &err);
    tr_free(text);
    struct {
        const char *name;
        int64_t *dst;
    } f[] = {{"manifests_kept", &st->manifests_kept},   {"manifests_removed", &st->manifests_removed},
             {"chunks_kept", &st->chunks_kept},         {"chunks_removed", &st->chunks_removed},
             {"bytes_removed", &st->bytes_removed},     {"parts_removed", &st->parts_removed},
             {"temps_removed", &st->temps_removed}};
    enum tr_status rc = root && json_is_object(root) ? TR_OK : TR_ERR_FORMAT;
    memset(st, 0, sizeof *st);
    for (size_t i = 0; rc == TR_OK && i < TR_ARRAY_SIZE(f); i++) {
        json_t *v = json_object_get(root, f[i].name);
        if (v && json_is_integer(v))
            *f[i].dst = json_integer_value(v);
        else if (v)
            rc = TR_ERR_FORMAT;
    }
    if (rc != TR_OK)
        LOG_ERROR("POST %s/gc?keep=%d: the answer is not gc statistics as JSON", c->where, keep);
    json_decref(root);
    return rc;
}
