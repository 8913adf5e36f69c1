/* serve.c: `terarec runs serve`: a read-only web view of the run history over
 * HTTP/1.1 with libmicrohttpd (a thread per connection, each request with its
 * own read-only connection to the file and a time limit, so that one slow
 * request holds up no other, nor SIGTERM): three pages (runs,
 * a run, a comparison) whose charts dygraphs draws in the browser, and the JSON
 * they read (/api/...), built by the same functions as `terarec runs ... --json`.
 * It reads through SQLITE_OPEN_READONLY connections; like any open, it records
 * runs it finds lost where the file may be written (db.h). No TLS; it binds to
 * loopback unless told otherwise, and then only with a bearer token. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/net.h"
#include "../common/file.h"
#include "../common/log.h"
#include "db_internal.h"
#include "query.h"

#define DYGRAPHS_DIR "/usr/share/javascript/dygraphs"
#define COOKIE "tr_token"

struct server {
    struct db *db;       /* the history as opened; each request opens its own connection like it */
    int timeout_s;       /* a request's time limit */
    atomic_int stopping; /* SIGINT/SIGTERM came: requests in SQLite end now */
    const char *fault_slow; /* TR_DB_FAULT_SLOW_URL (tests): such URLs run an endless query */
    char *token;         /* NULL: none asked */
    size_t token_len;
    const char *dygraphs; /* the folder of dygraph.min.js */
};

/* One request's answer context. */
struct req {
    struct server *s;
    struct MHD_Connection *c;
    struct db *db; /* this request's connection (opened by req_db), or NULL */
    double deadline; /* tr_clock_now() past which its queries are interrupted */
    int head;
    int set_cookie; /* the token came in ?token=: set it as a cookie */
};

/* ---- answers ------------------------------------------------------------------------- */

static void free_cb(void *p)
{
    tr_free(p);
}

static void common_headers(struct req *q, struct MHD_Response *r, const char *type)
{
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "img-src 'self' data:; frame-ancestors 'none'");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (q->set_cookie && q->s->token) {
        char c[TR_TOKEN_MAX + 96];
        snprintf(c, sizeof c, COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict", q->s->token);
        MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, c);
    }
}

/* Takes body (tr_malloc'd). */
static enum MHD_Result reply_owned(struct req *q, unsigned code, char *body, size_t n, const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(n, body, free_cb);
    if (!r) {
        tr_free(body);
        return MHD_NO;
    }
    common_headers(q, r, type);
    if (code == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result res = MHD_queue_response(q->c, code, r);
    MHD_destroy_response(r);
    return res;
}

static enum MHD_Result reply_static(struct req *q, unsigned code, const char *body, const char *type)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    common_headers(q, r, type);
    enum MHD_Result res = MHD_queue_response(q->c, code, r);
    MHD_destroy_response(r);
    return res;
}

static enum MHD_Result reply_text(struct req *q, unsigned code, const char *text)
{
    size_t n = strlen(text);
    char *b = tr_malloc(n + 2);
    if (!b)
        return MHD_NO;
    memcpy(b, text, n);
    b[n] = '\n';
    b[n + 1] = '\0';
    return reply_owned(q, code, b, n + 1, "text/plain; charset=utf-8");
}

static enum MHD_Result reply_json(struct req *q, json_t *j)
{
    char *s = db_json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!s)
        return reply_text(q, 503, "out of memory");
    size_t n = strlen(s);
    char *b = tr_malloc(n + 1);
    if (b)
        memcpy(b, s, n + 1);
    free(s);
    if (!b)
        return reply_text(q, 503, "out of memory");
    return reply_owned(q, 200, b, n, "application/json");
}

static enum MHD_Result reply_status(struct req *q, enum tr_status rc)
{
    if (rc == TR_ERR_NOMEM)
        return reply_text(q, 503, "out of memory");
    if (atomic_load(&q->s->stopping))
        return reply_text(q, 503, "the server is stopping");
    if (q->db && tr_clock_now() > q->deadline) {
        char t[160];
        snprintf(t, sizeof t, "the request took longer than %d s (--request_timeout) and was stopped", q->s->timeout_s);
        return reply_text(q, 503, t);
    }
    return reply_text(q, 500, "cannot read the run history (the server's log says why)");
}

/* SQLite's progress callback: a nonzero answer interrupts the query. */
static int req_progress(void *p)
{
    const struct req *q = p;
    return atomic_load(&q->s->stopping) || tr_clock_now() > q->deadline;
}

/* SQLite's busy handler: a locked file is waited for (10 ms at a time) until the
 * request's time limit or a stop. */
static int req_busy(void *p, int n)
{
    (void)n;
    if (req_progress(p))
        return 0;
    usleep(10000);
    return 1;
}

/* This request's connection (one per request: requests run at once, each in its
 * connection's thread), with the lost-run check of an open. TR_ERR_DB /
 * TR_ERR_NOMEM (logged). */
static enum tr_status req_db(struct req *q)
{
    if (q->db)
        return TR_OK;
    TR_CHECK(db_reopen(q->s->db, &q->db));
    sqlite3_progress_handler(db_sqlite(q->db), 1000, req_progress, q);
    db_set_busy(q->db, req_busy, q);
    return db_check_lost(q->db);
}

/* ---- HTML ------------------------------------------------------------------------------ */

void db_html_escape(const char *s, char *out, size_t n)
{
    size_t k = 0;
    if (!n)
        return;
    for (; s && *s; s++) {
        const char *e = NULL;
        char one[2] = {*s, 0};
        switch (*s) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&quot;"; break;
        case '\'': e = "&#39;"; break;
        default: e = one;
        }
        size_t l = strlen(e);
        if (k + l >= n)
            break;
        memcpy(out + k, e, l);
        k += l;
    }
    out[k] = '\0';
}

/* The HTML of a page: the shared head, then body (its data-page, and for a run its
 * escaped id and title). tr_malloc'd. */
static char *page_html(const char *page, const char *run_attr, const char *title, const char *body)
{
    char *out = NULL;
    if (asprintf(&out,
                 "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                 "<title>%s</title>\n<link rel=\"stylesheet\" href=\"/static/dygraph.min.css\">\n"
                 "<link rel=\"stylesheet\" href=\"/static/style.css\">\n"
                 "<script src=\"/static/dygraph.min.js\"></script>\n<script src=\"/static/app.js\" defer></script>\n"
                 "</head>\n<body data-page=\"%s\" data-run=\"%s\">\n"
                 "<header><a href=\"/\">terarec runs</a> <span id=\"live\"></span></header>\n<main>\n%s</main>\n"
                 "</body></html>\n",
                 title, page, run_attr, body) < 0)
        return NULL;
    char *b = tr_strdup(out); /* into the project's allocator, freed by reply_owned */
    free(out);
    return b;
}

static enum MHD_Result reply_page(struct req *q, const char *page, const char *run_attr, const char *title,
                                  const char *body)
{
    char *h = page_html(page, run_attr, title, body);
    if (!h)
        return reply_text(q, 503, "out of memory");
    return reply_owned(q, 200, h, strlen(h), "text/html; charset=utf-8");
}

/* ---- routes --------------------------------------------------------------------------------- */

/* 1 when the run exists, 0 when not, -1 on a database error (logged). */
static int run_exists(struct req *q, const char *id)
{
    sqlite3_stmt *st = NULL;
    if (req_db(q) != TR_OK || db_prepare(q->db, &st, "SELECT 1 FROM runs WHERE id = ?", "t", id) != TR_OK)
        return -1;
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    if (r == SQLITE_ROW)
        return 1;
    if (r == SQLITE_DONE)
        return 0;
    (void)db_sql_error(q->db, "cannot read the run");
    return -1;
}

/* A non-negative integer query argument (def when absent); -2 when malformed. */
static int64_t arg_int(struct MHD_Connection *c, const char *name, int64_t def)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < 0)
        return -2;
    return x;
}

static const char *arg_text(struct MHD_Connection *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

/* Every value of a repeated query argument (?run=A&run=B). */
#define ARGS_MAX 64
struct args {
    const char *name;
    const char *v[ARGS_MAX];
    int n, over;
};

static enum MHD_Result args_cb(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    struct args *a = cls;
    if (key && value && *value && !strcmp(key, a->name)) {
        if (a->n < ARGS_MAX)
            a->v[a->n++] = value;
        else
            a->over = 1;
    }
    return MHD_YES;
}

static void args_get(struct MHD_Connection *c, const char *name, struct args *a)
{
    memset(a, 0, sizeof *a);
    a->name = name;
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, args_cb, a);
}

/* 400 with the error and hint of bad input (a filter, a column, the sort). */
static enum MHD_Result reply_bad(struct req *q, const struct db_msg *m)
{
    char t[sizeof m->error + sizeof m->hint + 16];
    snprintf(t, sizeof t, "%s%s%s", m->error, m->hint[0] ? "\nhint: " : "", m->hint);
    return reply_text(q, 400, t);
}

static enum MHD_Result api_runs(struct req *q)
{
    int64_t limit = arg_int(q->c, "limit", 20);
    if (limit == -2)
        return reply_text(q, 400, "limit: not a non-negative integer");
    struct args f;
    args_get(q->c, "filter", &f);
    if (f.over)
        return reply_text(q, 400, "filter: at most 64 of them");
    struct db_list_opts o = {.status = arg_text(q->c, "status"), .name = arg_text(q->c, "name"), .filters = f.v,
                             .nfilters = f.n, .columns = arg_text(q->c, "columns"), .sort = arg_text(q->c, "sort"),
                             .limit = limit > 0 ? limit : -1};
    struct db_msg m;
    json_t *j = NULL;
    enum tr_status rc = req_db(q);
    if (rc == TR_OK)
        rc = db_json_runs(q->db, &o, &m, &j);
    if (rc == TR_ERR_ARG)
        return reply_bad(q, &m);
    return rc == TR_OK ? reply_json(q, j) : reply_status(q, rc);
}

/* /api/compare?run=A&run=B: `runs compare A B --json` (runs as their ids). */
static enum MHD_Result api_compare(struct req *q)
{
    struct args a;
    args_get(q->c, "run", &a);
    if (a.n < 1 || a.over)
        return reply_text(q, 400, "run: give one run or more (at most 64): ?run=ID&run=ID");
    for (int i = 0; i < a.n; i++) {
        int e = run_exists(q, a.v[i]);
        if (e < 0)
            return reply_status(q, TR_ERR_DB);
        if (e == 0)
            return reply_text(q, 404, "no such run");
    }
    json_t *j = NULL;
    enum tr_status rc = db_json_compare(q->db, (char *const *)a.v, a.n, &j);
    return rc == TR_OK ? reply_json(q, j) : reply_status(q, rc);
}

static enum MHD_Result api_run(struct req *q, const char *id, const char *rest)
{
    int e = run_exists(q, id);
    if (e < 0)
        return reply_status(q, TR_ERR_DB);
    if (e == 0)
        return reply_text(q, 404, "no such run");
    json_t *j = NULL;
    enum tr_status rc;
    if (!rest) {
        rc = db_json_run(q->db, id, 0, &j);
    } else if (!strcmp(rest, "metrics")) {
        int64_t after = arg_int(q->c, "after", -1);
        if (after == -2)
            return reply_text(q, 400, "after: not a non-negative integer");
        rc = db_json_metrics(q->db, id, arg_text(q->c, "name"), after, &j);
    } else if (!strcmp(rest, "sysmetrics")) {
        int64_t after = arg_int(q->c, "after", -1);
        if (after == -2)
            return reply_text(q, 400, "after: not a non-negative integer");
        rc = db_json_sysmetrics(q->db, id, after, &j);
    } else if (!strcmp(rest, "export")) {
        rc = db_json_run(q->db, id, 1, &j);
    } else {
        return reply_text(q, 404, "no such page");
    }
    return rc == TR_OK ? reply_json(q, j) : reply_status(q, rc);
}

static enum MHD_Result page_run(struct req *q, const char *id)
{
    int e = run_exists(q, id);
    if (e < 0)
        return reply_status(q, TR_ERR_DB);
    if (e == 0)
        return reply_text(q, 404, "no such run");
    char *name = NULL;
    if (db_run_get(q->db, id, "name", &name) != TR_OK)
        return reply_status(q, TR_ERR_DB);
    size_t n = 6 * (strlen(id) + (name ? strlen(name) : 0)) + 64;
    char *eid = tr_malloc(n), *ename = tr_malloc(n), *title = tr_malloc(2 * n), *body = tr_malloc(3 * n + 8192);
    enum MHD_Result res;
    if (!eid || !ename || !title || !body) {
        res = reply_text(q, 503, "out of memory");
        goto exit;
    }
    db_html_escape(id, eid, n);
    db_html_escape(name ? name : "", ename, n);
    snprintf(title, 2 * n, "run %s%s%s", eid, name ? " " : "", ename);
    snprintf(body, 3 * n + 8192,
             "<h1>run <span id=\"run-id\">%s</span> <span id=\"run-name\">%s</span> <span id=\"run-status\"></span>"
             " <span id=\"run-tags\"></span></h1>\n<p id=\"run-note\" class=\"note\"></p>\n"
             "<p id=\"msg\"></p>\n"
             "<section><h2>curves</h2><p class=\"controls\">x axis: <select id=\"xaxis\"><option value=\"step\">step</option>"
             "<option value=\"time\">wall time</option></select>"
             " <label>smoothing <input type=\"range\" id=\"smooth\" min=\"0\" max=\"0.99\" step=\"0.01\" value=\"0\">"
             " <output id=\"smooth-value\">0</output></label>"
             " <label><input type=\"checkbox\" id=\"logscale\"> log scale</label>"
             " <label><input type=\"checkbox\" id=\"markers\" checked> markers (evaluations, restarts, preemptions)</label>"
             "</p>\n<p id=\"chain\"></p>\n"
             "<div class=\"charts\">"
             "<div class=\"chart-box\"><h3>loss</h3><div class=\"chart\" id=\"chart-loss\"></div></div>"
             "<div class=\"chart-box\"><h3>AUC</h3><div class=\"chart\" id=\"chart-auc\"></div></div>"
             "<div class=\"chart-box\"><h3>logloss</h3><div class=\"chart\" id=\"chart-logloss\"></div></div>"
             "<div class=\"chart-box\"><h3>samples/s</h3><div class=\"chart\" id=\"chart-samples_per_s\"></div></div>"
             "<div class=\"chart-box\"><h3>learning rate</h3><div class=\"chart\" id=\"chart-learning_rate\"></div></div>"
             "<div class=\"chart-box\"><h3>step time (ms)</h3><div class=\"chart\" id=\"chart-step_time_ms\"></div></div>"
             "</div></section>\n"
             "<section><h2>system</h2><table id=\"sysmetrics\"></table><p id=\"sys-note\"></p><div class=\"charts\">"
             "<div class=\"chart-box\"><h3>CPU (%% of one core, per rank)</h3><div class=\"chart\" id=\"chart-sys-cpu\"></div></div>"
             "<div class=\"chart-box\"><h3>memory (RSS MiB, per rank)</h3><div class=\"chart\" id=\"chart-sys-rss\"></div></div>"
             "<div class=\"chart-box\" id=\"box-sys-gpu_mem\"><h3>GPU memory (MiB, per rank)</h3>"
             "<div class=\"chart\" id=\"chart-sys-gpu_mem\"></div></div>"
             "<div class=\"chart-box\" id=\"box-sys-gpu_util\"><h3>GPU utilisation (%%, per rank)</h3>"
             "<div class=\"chart\" id=\"chart-sys-gpu_util\"></div></div>"
             "</div></section>\n"
             "<section><h2>run</h2><table class=\"kv\" id=\"summary\"></table></section>\n"
             "<section><h2>events</h2><table id=\"events\"></table></section>\n"
             "<section><h2>checkpoints</h2><table id=\"checkpoints\"></table></section>\n"
             "<section><h2>attempts</h2><table id=\"attempts\"></table></section>\n"
             "<section><h2>processes</h2><table id=\"processes\"></table></section>\n"
             "<section><h2>config</h2><table class=\"kv\" id=\"config\"></table></section>\n",
             eid, ename);
    res = reply_page(q, "run", eid, title, body);
exit:
    tr_free(name);
    tr_free(eid);
    tr_free(ename);
    tr_free(title);
    tr_free(body);
    return res;
}

static const char list_body[] =
    "<h1>runs</h1>\n<form id=\"filter\">status <select id=\"status\"><option value=\"\">any</option>"
    "<option>running</option><option>completed</option><option>failed</option><option>hung</option>"
    "<option>preempted</option><option>cancelled</option><option>lost</option></select>\n"
    " name <input id=\"name\" type=\"search\" placeholder=\"part of a name or id\">\n"
    " filter <input id=\"filter-expr\" type=\"search\" size=\"36\""
    " placeholder=\"learning_rate&gt;0.01 tag=baseline auc&gt;=0.79\""
    " title=\"KEY OP VALUE, separated by spaces (quote a value with spaces): a parameter, a final metric, "
    "tag, name, status; OP: = != &lt; &lt;= &gt; &gt;= ~ (contains)\">\n"
    " columns <input id=\"columns\" type=\"search\" size=\"28\" placeholder=\"name,learning_rate,auc\""
    " title=\"comma-separated: run fields, parameters and final metrics (empty: the usual ones)\">\n"
    " <button type=\"submit\">apply</button>"
    " <button type=\"button\" id=\"compare\">compare checked</button></form>\n<p id=\"msg\"></p>\n"
    "<table id=\"runs\"><thead><tr></tr></thead><tbody></tbody></table>\n";

static const char compare_body[] =
    "<h1>compare</h1>\n<p id=\"msg\"></p>\n<p>metric: <select id=\"metric\"><option>loss</option><option>auc</option>"
    "<option>logloss</option><option>samples_per_s</option><option>learning_rate</option></select></p>\n"
    "<div class=\"chart wide\" id=\"chart-compare\"></div>\n<table id=\"compare-runs\"></table>\n"
    "<section><h2>final metrics</h2><table id=\"compare-metrics\"></table></section>\n"
    "<section><h2 id=\"config-diff-title\">config</h2><table id=\"config-diff\"></table></section>\n";

/* A file of the installed dygraphs. */
static enum MHD_Result static_dygraphs(struct req *q, const char *file, const char *type)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", q->s->dygraphs, file);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        FILE *m = open_memstream(&buf, &n);
        char tmp[65536];
        size_t k;
        while (m && (k = fread(tmp, 1, sizeof tmp, f)) > 0)
            fwrite(tmp, 1, k, m);
        if (m)
            fclose(m);
        fclose(f);
    }
    if (!buf) {
        char t[4200];
        snprintf(t, sizeof t, "%s: not installed (apt-get install libjs-dygraphs)", path);
        return reply_text(q, 404, t);
    }
    char *b = tr_malloc(n + 1);
    if (b)
        memcpy(b, buf, n);
    free(buf);
    if (!b)
        return reply_text(q, 503, "out of memory");
    return reply_owned(q, 200, b, n, type);
}

/* Constant-time comparison of a presented token with ours. */
static int token_ok(const struct server *s, const char *t)
{
    if (!t)
        return 0;
    size_t n = strnlen(t, TR_TOKEN_MAX + 1);
    unsigned char diff = n != s->token_len;
    for (size_t i = 0; i < s->token_len; i++)
        diff |= (unsigned char)(s->token[i] ^ (i < n ? t[i] : 0));
    return diff == 0;
}

/* The token from "Authorization: Bearer T", the tr_token cookie, or ?token=T. */
static int authorized(struct req *q)
{
    if (!q->s->token)
        return 1;
    const char *h = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && !strncmp(h, "Bearer ", 7) && token_ok(q->s, h + 7))
        return 1;
    if (token_ok(q->s, MHD_lookup_connection_value(q->c, MHD_COOKIE_KIND, COOKIE)))
        return 1;
    if (token_ok(q->s, MHD_lookup_connection_value(q->c, MHD_GET_ARGUMENT_KIND, "token"))) {
        q->set_cookie = 1;
        return 1;
    }
    return 0;
}

static enum MHD_Result route(struct req *q, const char *url)
{
    if (!strcmp(url, "/") || !strcmp(url, "/runs"))
        return reply_page(q, "list", "", "terarec runs", list_body);
    if (!strcmp(url, "/compare"))
        return reply_page(q, "compare", "", "terarec runs: compare", compare_body);
    if (!strcmp(url, "/healthz"))
        return reply_text(q, 200, "ok");
    if (!strcmp(url, "/static/app.js"))
        return reply_static(q, 200, db_web_app_js, "text/javascript; charset=utf-8");
    if (!strcmp(url, "/static/style.css"))
        return reply_static(q, 200, db_web_style_css, "text/css; charset=utf-8");
    if (!strcmp(url, "/static/dygraph.min.js"))
        return static_dygraphs(q, "dygraph.min.js", "text/javascript; charset=utf-8");
    if (!strcmp(url, "/static/dygraph.min.css"))
        return static_dygraphs(q, "dygraph.min.css", "text/css; charset=utf-8");
    if (!strcmp(url, "/api/runs"))
        return api_runs(q);
    if (!strcmp(url, "/api/compare"))
        return api_compare(q);
    if (!strncmp(url, "/run/", 5) && url[5] && !strchr(url + 5, '/'))
        return page_run(q, url + 5);
    if (!strncmp(url, "/api/runs/", 10) && url[10]) {
        char id[512];
        const char *slash = strchr(url + 10, '/');
        size_t n = slash ? (size_t)(slash - (url + 10)) : strlen(url + 10);
        if (n == 0 || n >= sizeof id)
            return reply_text(q, 404, "no such run");
        memcpy(id, url + 10, n);
        id[n] = '\0';
        return api_run(q, id, slash ? slash + 1 : NULL);
    }
    return reply_text(q, 404, "no such page");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **req_cls)
{
    (void)version;
    (void)upload;
    struct server *s = cls;
    if (*req_cls == NULL) { /* the headers; wait for the (ignored) body */
        *req_cls = s;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0; /* a body is dropped: only GET and HEAD are answered */
        return MHD_YES;
    }
    struct req q = {.s = s, .c = c, .head = !strcmp(method, "HEAD")};
    if (strcmp(method, "GET") != 0 && !q.head) {
        struct MHD_Response *r = MHD_create_response_from_buffer(strlen("read-only: GET and HEAD only\n"),
                                                                 (void *)"read-only: GET and HEAD only\n",
                                                                 MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        common_headers(&q, r, "text/plain; charset=utf-8");
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        enum MHD_Result res = MHD_queue_response(c, 405, r);
        MHD_destroy_response(r);
        return res;
    }
    if (!authorized(&q)) {
        LOG_WARN("refused %s %.200s: 401 missing or wrong token", method, url);
        return reply_text(&q, 401, "missing or wrong token (Authorization: Bearer, or ?token=)");
    }
    q.deadline = tr_clock_now() + s->timeout_s;
    enum MHD_Result res;
    if (s->fault_slow && strstr(url, s->fault_slow)) {
        /* fault injection: a query that ends only by the time limit or a stop */
        enum tr_status rc = req_db(&q);
        if (rc == TR_OK)
            (void)sqlite3_exec(db_sqlite(q.db),
                               "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
                               NULL, NULL, NULL);
        res = reply_status(&q, TR_ERR_DB);
    } else {
        res = route(&q, url);
    }
    db_close(q.db);
    return res;
}

/* ---- start ------------------------------------------------------------------------------------ */

enum tr_status db_serve(struct db *db, const struct db_serve_cfg *cfg)
{
    enum tr_status rc = TR_OK;
    struct sockaddr_storage ss;
    int v6 = 0, loopback = 0;
    const char *listen = cfg->listen ? cfg->listen : "127.0.0.1:8321";
    if (tr_net_parse_listen(listen, &ss, &v6, &loopback) != TR_OK) {
        LOG_ERROR("--listen: '%s' is not ADDR:PORT (an IPv4 address, or [IPv6], and a port 0-65535)", listen);
        LOG_HINT("use --listen 127.0.0.1:8321, or 127.0.0.1:0 for a free port");
        return TR_ERR_ARG;
    }
    struct server s = {.db = db, .timeout_s = cfg->request_timeout_s > 0 ? cfg->request_timeout_s : 30};
    if (cfg->token_file) {
        TR_CHECK(tr_file_read_token(cfg->token_file, "--token_file", &s.token));
        s.token_len = strlen(s.token);
    } else if (!loopback) {
        LOG_ERROR("--listen: '%s' is not a loopback address, and no --token_file was given", listen);
        LOG_HINT("anyone who can reach it would read the run history: give --token_file FILE, or listen on "
                 "127.0.0.1");
        return TR_ERR_ARG;
    }
    const char *dir = getenv("TR_DYGRAPHS_DIR");
    s.dygraphs = dir && *dir ? dir : DYGRAPHS_DIR;
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/dygraph.min.js", s.dygraphs);
    if (access(probe, R_OK) != 0)
        LOG_WARN("'%s' is not there: the pages will show no charts (hint: apt-get install libjs-dygraphs)",
                 probe);
    const char *slow = getenv("TR_DB_FAULT_SLOW_URL");
    if (slow && *slow) {
        s.fault_slow = slow;
        LOG_WARN("TR_DB_FAULT_SLOW_URL is set: requests whose URL contains '%s' run an endless query until their "
                 "time limit (fault injection, for tests)", slow);
    }
    /* SIGINT and SIGTERM end the server: blocked here (the daemon's thread inherits
     * the mask) and waited for below */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    /* a thread per connection: a slow request holds up only its own */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     (v6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, &s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    if (!d) {
        LOG_ERROR("cannot listen on '%s': %s", listen, strerror(errno));
        LOG_HINT("is another server using that port? --listen 127.0.0.1:0 picks a free one");
        rc = TR_ERR_IO;
        goto exit;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(listen, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    printf("terarec runs serve: http://%s:%d/ (run history %s, read-only%s)\n", host, di ? (int)di->port : 0,
           db_path(db), s.token ? ", token required" : "");
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    atomic_store(&s.stopping, 1); /* requests in SQLite end at its next progress call */
    MHD_stop_daemon(d);
    fprintf(stderr, "terarec runs serve: stopped (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
exit:
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    tr_free(s.token);
    return rc;
}
