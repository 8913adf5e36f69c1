/* client.c: the checkpoint store client of client.h. A local path is served by
 * direct calls to store.h; a URL by libcurl: one multi handle, a pool of easy
 * handles reused across requests (their connections stay open), `parallel`
 * transfers in flight, retries with backoff on 5xx and connection errors. It
 * does not cache anything, and it never follows redirects. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "client.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/file.h"
#include "../common/log.h"

#define ERRBODY_MAX 512
#define TEXT_MAX ((int64_t)4 << 30) /* largest manifest or listing accepted */

struct ckpt_client {
    char *where;          /* the URL without a trailing '/', or the path */
    int remote;
    struct ckpt_fs fs;    /* local mode */
    int parallel, retries;
    double timeout;
    struct curl_slist *headers;
    CURLM *multi;
    CURL **pool;          /* (parallel) easy handles, NULL until first used */
    int *pool_busy;
};

/* ---- one HTTP request ------------------------------------------------------------ */

enum req_method { M_HEAD, M_GET, M_PUT, M_POST };
static const char *const method_names[] = {"HEAD", "GET", "PUT", "POST"};

struct req {
    enum req_method method;
    char *url;             /* owned */
    const char *body;      /* PUT: sent from memory */
    int64_t body_len, body_off;
    char *dst;             /* GET: into a fixed buffer of dst_cap bytes ... */
    int64_t dst_cap;
    int grow;              /* ... or a growing tr_malloc'd one (text answers) */
    int64_t got;
    int overflow;
    int64_t range_off, range_len; /* range_len > 0: a Range request */
    char err[ERRBODY_MAX];  /* the body of an error answer, first bytes */
    size_t err_len;
    int quiet_404;         /* a 404 is an answer, not an error to log */
    int quiet_4xx;         /* no 4xx is logged here: the caller says it */
    /* outcome */
    long status;           /* HTTP status; 0 when none came */
    CURLcode cc;
    int attempts;
    double ready_at;
    int slot;              /* pool slot while in flight, else -1 */
    int done;
};

static void req_release(struct req *r)
{
    tr_free(r->url);
    if (r->grow)
        tr_free(r->dst);
    r->url = NULL;
    r->dst = NULL;
}

/* The body of an answer: error answers go to r->err (first bytes), successful
 * ones to the caller's buffer, bounds-checked (more than expected is an error). */
static size_t body_cb(char *p, size_t size, size_t nmemb, void *arg)
{
    CURL *e = arg;
    struct req *r = NULL;
    size_t n = size * nmemb;
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300) {
        size_t k = TR_MIN(n, sizeof r->err - 1 - r->err_len);
        memcpy(r->err + r->err_len, p, k);
        r->err_len += k;
        r->err[r->err_len] = '\0';
        return n;
    }
    if (!r->grow && !r->dst)
        return n; /* an answer nobody asked to keep (PUT, POST) */
    if (r->grow) {
        if (r->got + (int64_t)n + 1 > r->dst_cap) {
            int64_t cap = TR_MAX(r->dst_cap * 2, r->got + (int64_t)n + 1);
            if (cap < 4096)
                cap = 4096;
            if (cap > TEXT_MAX) {
                r->overflow = 1;
                return 0;
            }
            char *q = tr_realloc(r->dst, (size_t)cap);
            if (!q) {
                r->overflow = 1;
                return 0;
            }
            r->dst = q;
            r->dst_cap = cap;
        }
    } else if (r->got + (int64_t)n > r->dst_cap) {
        r->overflow = 1;
        return 0;
    }
    if (n)
        memcpy(r->dst + r->got, p, n);
    r->got += (int64_t)n;
    return n;
}

static size_t read_cb(char *p, size_t size, size_t nmemb, void *arg)
{
    struct req *r = arg;
    size_t n = TR_MIN(size * nmemb, (size_t)(r->body_len - r->body_off));
    if (n)
        memcpy(p, r->body + r->body_off, n);
    r->body_off += (int64_t)n;
    return n;
}

/* libcurl rewinds a body it must send again (a reused connection that was
 * closed under it). */
static int seek_cb(void *arg, curl_off_t off, int origin)
{
    struct req *r = arg;
    if (origin != SEEK_SET || off < 0 || off > r->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    r->body_off = (int64_t)off;
    return CURL_SEEKFUNC_OK;
}

static int retryable(const struct req *r)
{
    if (r->cc == CURLE_OK)
        return r->status >= 500 && r->status != 507; /* a full disk stays full */
    switch (r->cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
        return 1;
    default:
        return 0;
    }
}

static CURL *pool_handle(struct ckpt_client *c, int slot)
{
    if (!c->pool[slot])
        c->pool[slot] = curl_easy_init();
    else
        curl_easy_reset(c->pool[slot]);
    return c->pool[slot];
}

static enum tr_status req_start(struct ckpt_client *c, struct req *r, int slot)
{
    CURL *e = pool_handle(c, slot);
    if (!e)
        return TR_ERR_NOMEM;
    r->slot = slot;
    r->got = 0;
    r->overflow = 0;
    r->body_off = 0;
    r->err_len = 0;
    r->err[0] = '\0';
    r->status = 0;
    r->cc = CURLE_OK;
    r->attempts++;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)(c->timeout + 0.999));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->timeout * 1000));
    /* large buffers: chunks are megabytes, and each callback is a copy and a hash update */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)e);
    switch (r->method) {
    case M_HEAD:
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        break;
    case M_GET:
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        if (r->range_len > 0) {
            char range[64];
            snprintf(range, sizeof range, "%" PRId64 "-%" PRId64, r->range_off, r->range_off + r->range_len - 1);
            curl_easy_setopt(e, CURLOPT_RANGE, range); /* copied by libcurl */
        }
        break;
    case M_PUT:
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(e, CURLOPT_READDATA, (void *)r);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, seek_cb);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, (void *)r);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
        break;
    case M_POST:
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(r->body ? r->body_len : 0));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "");
        break;
    }
    if (curl_multi_add_handle(c->multi, e) != CURLM_OK)
        return TR_ERR_NOMEM;
    c->pool_busy[slot] = 1;
    return TR_OK;
}

/* The server's reason: the first line of an error answer. */
static const char *reason_of(struct req *r)
{
    char *nl = strpbrk(r->err, "\r\n");
    if (nl)
        *nl = '\0';
    return r->err_len ? r->err : "(no reason given)";
}

/* Runs n requests, `parallel` at a time, retrying as client.h says. Each request
 * ends with an answer (r->status; any 2xx, 4xx) or a failure (r->cc, or 5xx
 * after the retries). Returns TR_OK when every request got an answer below 500
 * without a transfer error; otherwise the first failure (logged), after the
 * requests in flight finish; requests not started then stay undone. A 4xx is
 * logged here (but a 404 with quiet_404) and left to the caller to map. */
static enum tr_status http_run(struct ckpt_client *c, struct req *reqs, int n, struct ckpt_xfer_stats *st)
{
    enum tr_status rc = TR_OK;
    int next = 0, inflight = 0, finished = 0;
    int *retry = NULL, nretry = 0;
    if (n == 0)
        return TR_OK;
    retry = tr_malloc((size_t)n * sizeof *retry);
    if (!retry)
        return TR_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        reqs[i].slot = -1;
        reqs[i].attempts = 0;
        reqs[i].done = 0;
    }
    while (finished < n) {
        const double now = tr_clock_now();
        double wake = now + 1.0;
        /* start what is ready while slots are free */
        for (int slot = 0; slot < c->parallel && rc == TR_OK; slot++) {
            if (c->pool_busy[slot])
                continue;
            struct req *r = NULL;
            for (int k = 0; k < nretry; k++) {
                if (reqs[retry[k]].ready_at <= now) {
                    r = &reqs[retry[k]];
                    retry[k] = retry[--nretry];
                    break;
                }
            }
            if (!r && next < n)
                r = &reqs[next++];
            if (!r)
                break;
            enum tr_status s = req_start(c, r, slot);
            if (s != TR_OK) {
                rc = s;
                break;
            }
            inflight++;
            if (st)
                st->requests++;
        }
        for (int k = 0; k < nretry; k++)
            wake = TR_MIN(wake, reqs[retry[k]].ready_at);
        if (rc != TR_OK && inflight == 0)
            break;
        if (inflight == 0 && nretry == 0 && (rc != TR_OK || next >= n))
            break;
        int running = 0;
        curl_multi_perform(c->multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(c->multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            CURL *e = msg->easy_handle;
            struct req *r = NULL;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
            r->cc = msg->data.result;
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
            curl_multi_remove_handle(c->multi, e);
            c->pool_busy[r->slot] = 0;
            r->slot = -1;
            inflight--;
            if (r->overflow && r->cc == CURLE_WRITE_ERROR) {
                LOG_ERROR("%s %s: %s answer", method_names[r->method], r->url,
                          r->grow ? "an oversized or unstorable" : "a longer than expected");
                r->done = 1;
                finished++;
                if (rc == TR_OK)
                    rc = r->grow ? TR_ERR_NOMEM : TR_ERR_FORMAT;
                continue;
            }
            if (retryable(r) && r->attempts <= c->retries && rc == TR_OK) {
                double delay = 0.1 * (double)(1 << TR_MIN(r->attempts - 1, 10));
                LOG_INFO(CKPT, "%s %s: %s; retry %d in %.1f s", method_names[r->method], r->url,
                         r->cc != CURLE_OK ? curl_easy_strerror(r->cc) : "server error", r->attempts, delay);
                r->ready_at = tr_clock_now() + delay;
                retry[nretry++] = (int)(r - reqs);
                if (st)
                    st->retries++;
                continue;
            }
            r->done = 1;
            finished++;
            if (r->cc != CURLE_OK) {
                LOG_ERROR("%s %s: %s (after %d attempt%s)", method_names[r->method], r->url,
                          curl_easy_strerror(r->cc), r->attempts, r->attempts == 1 ? "" : "s");
                if (rc == TR_OK)
                    rc = r->cc == CURLE_OPERATION_TIMEDOUT ? TR_ERR_TIMEOUT : TR_ERR_REMOTE;
            } else if (r->status >= 500 || r->status < 100) {
                LOG_ERROR("%s %s: %ld %s (after %d attempt%s)", method_names[r->method], r->url, r->status,
                          reason_of(r), r->attempts, r->attempts == 1 ? "" : "s");
                if (rc == TR_OK)
                    rc = TR_ERR_REMOTE;
            } else if (r->status >= 400 && !(r->status == 404 && r->quiet_404) && !r->quiet_4xx) {
                LOG_ERROR("%s %s: %ld %s", method_names[r->method], r->url, r->status, reason_of(r));
            } else if (st && r->status < 300) {
                st->bytes_received += r->got;
            }
        }
        if (finished >= n)
            break;
        int ms = (int)((wake - tr_clock_now()) * 1000);
        ms = TR_MAX(0, TR_MIN(ms, 100));
        curl_multi_poll(c->multi, NULL, 0, ms, NULL);
    }
    /* a failure stopped the loop: nothing is in flight (inflight reached 0) */
    TR_ASSERT(inflight == 0 || rc == TR_OK);
    tr_free(retry);
    return rc;
}

/* The status of an answer the caller did not expect (logged by http_run). */
static enum tr_status status_of(long code)
{
    if (code == 404 || code == 409)
        return TR_ERR_NOT_FOUND;
    if (code == 400 || code == 422)
        return TR_ERR_FORMAT;
    if (code == 507)
        return TR_ERR_IO;
    if (code == 413 || code == 416)
        return TR_ERR_RANGE;
    if (code == 401 || code == 403 || (code >= 400 && code < 500))
        return TR_ERR_ARG;
    return TR_ERR_REMOTE;
}

static char *url_of(const struct ckpt_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *url_of(const struct ckpt_client *c, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    size_t n = strlen(c->where) + strlen(path) + 1;
    char *s = tr_malloc(n);
    if (s)
        snprintf(s, n, "%s%s", c->where, path);
    return s;
}

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
    return url_of(c, "/chunks/%s", hash);
}

/* ---- chunks -------------------------------------------------------------------------- */

static void free_reqs(struct req *reqs, int n)
{
    for (int i = 0; reqs && i < n; i++)
        req_release(&reqs[i]);
    tr_free(reqs);
}

/* ---- local mode: items spread over `parallel` threads -------------------------------
 * A chunk's write ends in two fsyncs; several in flight let the device merge them,
 * as the HTTP mode's parallel transfers do. */

struct local_job {
    struct ckpt_client *c;
    const struct ckpt_put_item *put;
    const struct ckpt_get_item *get;
    int n;
    int next;                   /* the next item to take (under mu) */
    pthread_mutex_t mu;
    enum tr_status rc;          /* the first failure */
    struct ckpt_xfer_stats st;
};

static enum tr_status put_one_local(struct ckpt_client *c, const struct ckpt_put_item *it,
                                    struct ckpt_xfer_stats *st)
{
    int64_t have = 0;
    enum tr_status s = ckpt_fs_chunk_touch(&c->fs, it->hash, &have);
    if (s == TR_OK && have == it->bytes) {
        st->chunks_skipped++;
        return TR_OK;
    }
    if (s != TR_OK && s != TR_ERR_NOT_FOUND)
        return s;
    TR_CHECK(ckpt_fs_chunk_put(&c->fs, it->hash, it->data, (size_t)it->bytes));
    st->chunks_sent++;
    st->bytes_sent += it->bytes;
    return TR_OK;
}

static enum tr_status get_one_local(struct ckpt_client *c, const struct ckpt_get_item *it,
                                    struct ckpt_xfer_stats *st);

static void *local_worker(void *arg)
{
    struct local_job *j = arg;
    struct ckpt_xfer_stats st = {0};
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->rc == TR_OK && j->next < j->n ? j->next++ : -1;
        pthread_mutex_unlock(&j->mu);
        if (i < 0)
            break;
        enum tr_status s = j->put ? put_one_local(j->c, &j->put[i], &st) : get_one_local(j->c, &j->get[i], &st);
        if (s != TR_OK) {
            pthread_mutex_lock(&j->mu);
            if (j->rc == TR_OK)
                j->rc = s;
            pthread_mutex_unlock(&j->mu);
        }
    }
    pthread_mutex_lock(&j->mu);
    j->st.chunks_sent += st.chunks_sent;
    j->st.chunks_skipped += st.chunks_skipped;
    j->st.bytes_sent += st.bytes_sent;
    j->st.bytes_received += st.bytes_received;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Runs the job's items on up to c->parallel threads (this one included). */
static enum tr_status run_local(struct local_job *j, struct ckpt_xfer_stats *st)
{
    pthread_t th[64];
    int nt = TR_MIN(TR_MIN(j->c->parallel, j->n), (int)TR_ARRAY_SIZE(th) + 1), started = 0;
    pthread_mutex_init(&j->mu, NULL);
    for (int t = 1; t < nt; t++) {
        if (pthread_create(&th[started], NULL, local_worker, j) != 0)
            break; /* fewer threads: the items still all get done */
        started++;
    }
    local_worker(j);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j->mu);
    if (st) {
        st->chunks_sent += j->st.chunks_sent;
        st->chunks_skipped += j->st.chunks_skipped;
        st->bytes_sent += j->st.bytes_sent;
        st->bytes_received += j->st.bytes_received;
    }
    return j->rc;
}

static enum tr_status put_chunks_local(struct ckpt_client *c, const struct ckpt_put_item *items, int n,
                                       struct ckpt_xfer_stats *st)
{
    struct local_job j = {.c = c, .put = items, .n = n};
    return run_local(&j, st);
}

enum tr_status ckpt_put_chunks(struct ckpt_client *c, const struct ckpt_put_item *items, int n,
                               struct ckpt_xfer_stats *st)
{
    enum tr_status rc = TR_OK;
    if (n <= 0)
        return TR_OK;
    if (!c->remote)
        return put_chunks_local(c, items, n, st);
    struct req *reqs = tr_calloc((size_t)n, sizeof *reqs);
    int *idx = tr_malloc((size_t)n * sizeof *idx);
    int nmiss = 0;
    if (!reqs || !idx) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* which does the store have? */
    for (int i = 0; i < n; i++) {
        reqs[i].method = M_HEAD;
        reqs[i].quiet_404 = 1;
        if (!ckpt_hash_ok(items[i].hash)) {
            LOG_ERROR("chunk name '%s' is not a hash", items[i].hash);
            rc = TR_ERR_ARG;
            goto exit;
        }
        if (!(reqs[i].url = url_of(c, "/chunks/%s", items[i].hash))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
    }
    TR_CHECK_GOTO(http_run(c, reqs, n, st), rc, exit);
    for (int i = 0; i < n; i++) {
        if (reqs[i].status == 404) {
            idx[nmiss++] = i;
        } else if (reqs[i].status >= 200 && reqs[i].status < 300) {
            if (st)
                st->chunks_skipped++;
        } else {
            rc = status_of(reqs[i].status);
            goto exit;
        }
    }
    /* send the missing ones, reusing the first nmiss requests */
    for (int k = 0; k < nmiss; k++) {
        const struct ckpt_put_item *it = &items[idx[k]];
        struct req *r = &reqs[k];
        char *url = reqs[idx[k]].url;
        reqs[idx[k]].url = r->url;
        r->url = url;
        r->method = M_PUT;
        r->quiet_404 = 0;
        r->body = it->data;
        r->body_len = it->bytes;
    }
    TR_CHECK_GOTO(http_run(c, reqs, nmiss, st), rc, exit);
    for (int k = 0; k < nmiss; k++) {
        if (reqs[k].status < 200 || reqs[k].status >= 300) {
            rc = status_of(reqs[k].status);
            goto exit;
        }
        if (st) {
            st->chunks_sent++;
            st->bytes_sent += reqs[k].body_len;
        }
    }
exit:
    free_reqs(reqs, n);
    tr_free(idx);
    return rc;
}

static int whole_chunk(const struct ckpt_get_item *it)
{
    return it->chunk_bytes > 0 && it->off == 0 && it->bytes == it->chunk_bytes;
}

/* The hash check of a whole chunk fetched into it->dst. */
static enum tr_status check_hash(struct ckpt_client *c, const struct ckpt_get_item *it)
{
    char got[CKPT_HASH_LEN + 1];
    ckpt_hash(it->dst, (size_t)it->bytes, got);
    if (!strcmp(got, it->hash))
        return TR_OK;
    char *where = ckpt_client_chunk_location(c, it->hash);
    LOG_ERROR("chunk %s (%s): hash %s, expected %s", where ? where : it->hash, it->what ? it->what : "?", got,
              it->hash);
    tr_free(where);
    return TR_ERR_FORMAT;
}

static void log_get_failure(struct ckpt_client *c, const struct ckpt_get_item *it, const char *why)
{
    char *where = ckpt_client_chunk_location(c, it->hash);
    LOG_ERROR("chunk %s (%s): %s", where ? where : it->hash, it->what ? it->what : "?", why);
    tr_free(where);
}

static enum tr_status get_one_local(struct ckpt_client *c, const struct ckpt_get_item *it,
                                    struct ckpt_xfer_stats *st)
{
    if (it->bytes == 0)
        return TR_OK;
    enum tr_status s = ckpt_fs_chunk_read(&c->fs, it->hash, it->off, it->bytes, it->dst);
    if (s == TR_ERR_NOT_FOUND)
        log_get_failure(c, it, "missing");
    else if (s == TR_ERR_RANGE)
        log_get_failure(c, it, "shorter than the range asked");
    if (s == TR_OK && whole_chunk(it))
        s = check_hash(c, it);
    if (s == TR_ERR_RANGE)
        s = TR_ERR_FORMAT;
    if (s == TR_OK)
        st->bytes_received += it->bytes;
    return s;
}

enum tr_status ckpt_get_chunks(struct ckpt_client *c, const struct ckpt_get_item *items, int n,
                               struct ckpt_xfer_stats *st)
{
    enum tr_status rc = TR_OK;
    if (n <= 0)
        return TR_OK;
    if (!c->remote) {
        struct local_job j = {.c = c, .get = items, .n = n};
        return run_local(&j, st);
    }
    struct req *reqs = tr_calloc((size_t)n, sizeof *reqs);
    if (!reqs)
        return TR_ERR_NOMEM;
    int m = 0;
    int *of = tr_malloc((size_t)n * sizeof *of);
    if (!of) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int i = 0; i < n; i++) {
        const struct ckpt_get_item *it = &items[i];
        if (it->bytes == 0)
            continue;
        struct req *r = &reqs[m];
        of[m++] = i;
        r->method = M_GET;
        r->quiet_404 = 1;
        r->dst = it->dst;
        r->dst_cap = it->bytes;
        if (!whole_chunk(it)) {
            r->range_off = it->off;
            r->range_len = it->bytes;
        }
        if (!(r->url = url_of(c, "/chunks/%s", it->hash))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
    }
    rc = http_run(c, reqs, m, st);
    for (int k = 0; k < m; k++) {
        const struct ckpt_get_item *it = &items[of[k]];
        struct req *r = &reqs[k];
        enum tr_status s = TR_OK;
        if (!r->done)
            continue;
        if (r->cc != CURLE_OK || r->status >= 500 || r->overflow)
            continue; /* logged by http_run */
        if (r->status == 404) {
            log_get_failure(c, it, "missing");
            s = TR_ERR_NOT_FOUND;
        } else if (r->status == 416 || (r->status >= 200 && r->status < 300 && r->got != it->bytes)) {
            char why[96];
            snprintf(why, sizeof why, "short: %" PRId64 " bytes from offset %" PRId64 ", %" PRId64 " asked",
                     r->status == 416 ? 0 : r->got, it->off, it->bytes);
            log_get_failure(c, it, why);
            s = TR_ERR_FORMAT;
        } else if (r->status >= 400) {
            s = status_of(r->status);
        } else if (whole_chunk(it)) {
            s = check_hash(c, it);
        }
        if (s != TR_OK && rc == TR_OK)
            rc = s;
    }
exit:
    for (int i = 0; i < n; i++)
        reqs[i].dst = NULL; /* the caller's buffers */
    free_reqs(reqs, n);
    tr_free(of);
    return rc;
}

/* ---- run objects --------------------------------------------------------------------- */

/* One request whose answer body (when 2xx) is returned as a NUL-terminated
 * tr_malloc'd text; *code gets the status. */
static enum tr_status http_one(struct ckpt_client *c, enum req_method method, char *url, const char *body,
                               size_t n, int quiet_404, long *code, char **text, size_t *len)
{
    struct req r;
    memset(&r, 0, sizeof r);
    r.method = method;
    r.url = url;
    r.body = body;
    r.body_len = (int64_t)n;
    r.grow = 1;
    r.quiet_404 = quiet_404;
    if (!url)
        return TR_ERR_NOMEM;
    enum tr_status rc = http_run(c, &r, 1, NULL);
    *code = r.status;
    if (rc == TR_OK && text && r.status >= 200 && r.status < 300) {
        if (!r.dst && !(r.dst = tr_malloc(1)))
            rc = TR_ERR_NOMEM;
        if (rc == TR_OK) {
            r.dst[r.got] = '\0';
            *text = r.dst;
            if (len)
                *len = (size_t)r.got;
            r.dst = NULL;
        }
    }
    req_release(&r);
    return rc;
}

static enum tr_status put_text(struct ckpt_client *c, char *url, const char *text, size_t n)
{
    long code = 0;
    TR_CHECK(http_one(c, M_PUT, url, text, n, 0, &code, NULL, NULL));
    return code >= 200 && code < 300 ? TR_OK : status_of(code);
}

static enum tr_status get_text(struct ckpt_client *c, char *url, int quiet_404, char **text, size_t *n)
{
    long code = 0;
    *text = NULL;
    TR_CHECK(http_one(c, M_GET, url, NULL, 0, quiet_404, &code, text, n));
    return code >= 200 && code < 300 ? TR_OK : status_of(code);
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
    return put_text(c, url_of(c, "/runs/%s/manifests/%" PRId64 ".json", run, step), text, n);
}

enum tr_status ckpt_get_manifest(struct ckpt_client *c, const char *run, int64_t step, char **text, size_t *n)
{
    if (!c->remote)
        return ckpt_fs_manifest_get(&c->fs, run, step, text, n);
    TR_CHECK(check_run(run));
    return get_text(c, url_of(c, "/runs/%s/manifests/%" PRId64 ".json", run, step), 0, text, n);
}

enum tr_status ckpt_put_part(struct ckpt_client *c, const char *run, int64_t step, int rank, const char *text,
                             size_t n)
{
    if (!c->remote)
        return ckpt_fs_part_put(&c->fs, run, step, rank, text, n);
    TR_CHECK(check_run(run));
    return put_text(c, url_of(c, "/runs/%s/parts/%" PRId64 "/%d.json", run, step, rank), text, n);
}

enum tr_status ckpt_get_part(struct ckpt_client *c, const char *run, int64_t step, int rank, char **text, size_t *n)
{
    if (!c->remote)
        return ckpt_fs_part_get(&c->fs, run, step, rank, text, n);
    TR_CHECK(check_run(run));
    return get_text(c, url_of(c, "/runs/%s/parts/%" PRId64 "/%d.json", run, step, rank), 1, text, n);
}

enum tr_status ckpt_commit_keep(struct ckpt_client *c, const char *run, int64_t step, int keep)
{
    if (!c->remote)
        return ckpt_fs_commit_keep(&c->fs, run, step, keep);
    TR_CHECK(check_run(run));
    char body[32];
    int n = snprintf(body, sizeof body, "%" PRId64, step);
    char *url = keep > 0 ? url_of(c, "/runs/%s/LATEST?keep=%d", run, keep) : url_of(c, "/runs/%s/LATEST", run);
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
        struct req r;
        memset(&r, 0, sizeof r);
        r.method = M_POST;
        r.url = url_of(c, "/runs/%s/claim", run);
        r.body = owner;
        r.body_len = (int64_t)strlen(owner);
        r.grow = 1;
        r.quiet_4xx = 1;
        if (!r.url)
            return TR_ERR_NOMEM;
        rc = http_run(c, &r, 1, NULL);
        if (rc == TR_OK && r.status == 409) {
            snprintf(holder, sizeof holder, "%.299s", reason_of(&r));
            rc = TR_ERR_RANGE;
        } else if (rc == TR_OK && (r.status < 200 || r.status >= 300)) {
            LOG_ERROR("POST %s: %ld %s", r.url, r.status, reason_of(&r));
            rc = status_of(r.status);
        }
        req_release(&r);
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
    struct req r;
    memset(&r, 0, sizeof r);
    r.method = M_GET;
    r.url = url_of(c, "/healthz");
    r.grow = 1;
    r.quiet_4xx = 1;
    if (!r.url)
        return TR_ERR_NOMEM;
    enum tr_status rc = http_run(c, &r, 1, NULL);
    if (rc == TR_OK && (r.status == 401 || r.status == 403)) {
        LOG_ERROR("checkpoint store %s refused the token: %ld %s", c->where, r.status, reason_of(&r));
        LOG_HINT("--checkpoint_token_file must hold the token the store was started with (terarec-ckpt --token_file)");
        rc = TR_ERR_ARG;
    } else if (rc == TR_OK && (r.status < 200 || r.status >= 300)) {
        LOG_ERROR("checkpoint store %s: GET /healthz: %ld %s", c->where, r.status, reason_of(&r));
        rc = status_of(r.status);
    } else if (rc != TR_OK) {
        LOG_HINT("is the checkpoint store %s running and reachable from this node?", c->where);
    }
    req_release(&r);
    return rc;
}

enum tr_status ckpt_get_latest(struct ckpt_client *c, const char *run, int64_t *step)
{
    if (!c->remote)
        return ckpt_fs_latest(&c->fs, run, step);
    TR_CHECK(check_run(run));
    char *text = NULL;
    size_t n = 0;
    TR_CHECK(get_text(c, url_of(c, "/runs/%s/LATEST", run), 1, &text, &n));
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
    TR_CHECK(get_json_array(c, url_of(c, "/runs"), "runs", &root, &arr));
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
    enum tr_status rc = get_json_array(c, url_of(c, "/runs/%s/manifests", run), "steps", &root, &arr);
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
    char *url = url_of(c, "/gc?keep=%d&grace=%lld", keep, (long long)ceil(o->grace_s));
    TR_CHECK(http_one(c, M_POST, url, NULL, 0, 0, &code, &text, &n));
    if (code < 200 || code >= 300)
        return status_of(code);
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
