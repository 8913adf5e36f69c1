/* client_internal.h: what the checkpoint store client's files share (client.c,
 * client_http.c, client_chunks.c): the client's state, one HTTP request, and the
 * calls that run requests on the client's curl multi handle (client_http.c).
 * Nothing outside ckpt_store/ includes it. A client is used by one thread at a
 * time, and so are these calls. */
#ifndef TR_CKPT_CLIENT_INTERNAL_H
#define TR_CKPT_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "../common/status.h"
#include "client.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_ERRBODY_MAX 512 /* bytes of an error answer kept for its message */

/* An open client (ckpt_client_open). */
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

/* ---- one HTTP request (client_http.c) ---- */

enum ckpt_req_method { CKPT_REQ_HEAD, CKPT_REQ_GET, CKPT_REQ_PUT, CKPT_REQ_POST };

/* One request: the caller fills method, url and the body or destination fields;
 * ckpt_http_run fills the outcome. */
struct ckpt_req {
    enum ckpt_req_method method;
    char *url;             /* owned */
    const char *body;      /* PUT: sent from memory */
    int64_t body_len, body_off;
    char *dst;             /* GET: into a fixed buffer of dst_cap bytes ... */
    int64_t dst_cap;
    int grow;              /* ... or a growing tr_malloc'd one (text answers) */
    int64_t got;
    int overflow;
    int64_t range_off, range_len; /* range_len > 0: a Range request */
    char err[CKPT_ERRBODY_MAX];  /* the body of an error answer, first bytes */
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

/* Frees what r owns (its URL, and its answer when it grew one); r itself is the
 * caller's. */
void ckpt_req_release(struct ckpt_req *r);
/* ckpt_req_release of each of reqs[0, n), then tr_free(reqs); NULL does nothing. */
void ckpt_reqs_free(struct ckpt_req *reqs, int n);

/* Runs n requests, `parallel` at a time, retrying as client.h says. Each request
 * ends with an answer (r->status; any 2xx, 4xx) or a failure (r->cc, or 5xx
 * after the retries). Returns TR_OK when every request got an answer below 500
 * without a transfer error; otherwise the first failure (logged: TR_ERR_TIMEOUT,
 * TR_ERR_REMOTE, TR_ERR_FORMAT or TR_ERR_NOMEM for an oversized answer), after the
 * requests in flight finish; requests not started then stay undone. A 4xx is
 * logged here (but a 404 with quiet_404, and none with quiet_4xx) and left to the
 * caller to map (ckpt_http_status). st (may be NULL) is added to. */
enum tr_status ckpt_http_run(struct ckpt_client *c, struct ckpt_req *reqs, int n, struct ckpt_xfer_stats *st) TR_WUR;
/* One request of url (owned: freed here, NULL gives TR_ERR_NOMEM) whose answer
 * body, when 2xx and text is not NULL, is returned as a NUL-terminated tr_malloc'd
 * *text (*len bytes without the NUL, len may be NULL); *code gets the status.
 * Errors as ckpt_http_run. */
enum tr_status ckpt_http_one(struct ckpt_client *c, enum ckpt_req_method method, char *url, const char *body,
                             size_t n, int quiet_404, long *code, char **text, size_t *len) TR_WUR;
/* The status of an answer the caller did not expect (logged by ckpt_http_run):
 * 404, 409 TR_ERR_NOT_FOUND; 400, 422 TR_ERR_FORMAT; 507 TR_ERR_IO; 413, 416
 * TR_ERR_RANGE; other 4xx TR_ERR_ARG; anything else TR_ERR_REMOTE. */
enum tr_status ckpt_http_status(long code);
/* The server's reason: the first line of r's error answer (cut there, in r->err),
 * or "(no reason given)". Valid until r is released or started again. */
const char *ckpt_req_reason(struct ckpt_req *r);
/* The URL of c's store followed by the formatted path (tr_malloc'd; NULL when out
 * of memory). */
char *ckpt_client_url(const struct ckpt_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
