/* client_http.c: the HTTP side of the checkpoint store client (client.h) through
 * libcurl: one request on a pool of easy handles reused across requests (their
 * connections stay open), and the loop that runs many on the client's multi
 * handle, `parallel` transfers in flight, with retries and backoff on 5xx and
 * connection errors; answers mapped to statuses, and URLs. It does not cache
 * anything, and it never follows redirects. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "client_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/log.h"

#define TEXT_MAX ((int64_t)4 << 30) /* largest manifest or listing accepted */

static const char *const method_names[] = {"HEAD", "GET", "PUT", "POST"};

void ckpt_req_release(struct ckpt_req *r)
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
    struct ckpt_req *r = NULL;
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
    struct ckpt_req *r = arg;
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
    struct ckpt_req *r = arg;
    if (origin != SEEK_SET || off < 0 || off > r->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    r->body_off = (int64_t)off;
    return CURL_SEEKFUNC_OK;
}

static int retryable(const struct ckpt_req *r)
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

static enum tr_status req_start(struct ckpt_client *c, struct ckpt_req *r, int slot)
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
    case CKPT_REQ_HEAD:
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        break;
    case CKPT_REQ_GET:
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        if (r->range_len > 0) {
            char range[64];
            snprintf(range, sizeof range, "%" PRId64 "-%" PRId64, r->range_off, r->range_off + r->range_len - 1);
            curl_easy_setopt(e, CURLOPT_RANGE, range); /* copied by libcurl */
        }
        break;
    case CKPT_REQ_PUT:
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(e, CURLOPT_READDATA, (void *)r);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, seek_cb);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, (void *)r);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
        break;
    case CKPT_REQ_POST:
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
const char *ckpt_req_reason(struct ckpt_req *r)
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
enum tr_status ckpt_http_run(struct ckpt_client *c, struct ckpt_req *reqs, int n, struct ckpt_xfer_stats *st)
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
            struct ckpt_req *r = NULL;
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
            struct ckpt_req *r = NULL;
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
                          ckpt_req_reason(r), r->attempts, r->attempts == 1 ? "" : "s");
                if (rc == TR_OK)
                    rc = TR_ERR_REMOTE;
            } else if (r->status >= 400 && !(r->status == 404 && r->quiet_404) && !r->quiet_4xx) {
                LOG_ERROR("%s %s: %ld %s", method_names[r->method], r->url, r->status, ckpt_req_reason(r));
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

/* The status of an answer the caller did not expect (logged by ckpt_http_run). */
enum tr_status ckpt_http_status(long code)
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

char *ckpt_client_url(const struct ckpt_client *c, const char *fmt, ...)
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

void ckpt_reqs_free(struct ckpt_req *reqs, int n)
{
    for (int i = 0; reqs && i < n; i++)
        ckpt_req_release(&reqs[i]);
    tr_free(reqs);
}

/* One request whose answer body (when 2xx) is returned as a NUL-terminated
 * tr_malloc'd text; *code gets the status. */
enum tr_status ckpt_http_one(struct ckpt_client *c, enum ckpt_req_method method, char *url, const char *body,
                             size_t n, int quiet_404, long *code, char **text, size_t *len)
{
    struct ckpt_req r;
    memset(&r, 0, sizeof r);
    r.method = method;
    r.url = url;
    r.body = body;
    r.body_len = (int64_t)n;
    r.grow = 1;
    r.quiet_404 = quiet_404;
    if (!url)
        return TR_ERR_NOMEM;
    enum tr_status rc = ckpt_http_run(c, &r, 1, NULL);
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
    ckpt_req_release(&r);
    return rc;
}
