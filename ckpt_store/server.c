/* server.c: terarec-ckpt (server.h): the store over HTTP/1.1 with libmicrohttpd
 * (an internal polling thread pool). It checks the bearer token and the body's
 * size on a request's first call, before reading any body; it streams chunk
 * uploads through the store's hashing writer and serves chunks with sendfile. It
 * keeps no state between requests but counters; no TLS (bind to loopback or put
 * a proxy in front). */
#define TR_SUBSYS TR_SUB_NET
#define _GNU_SOURCE
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <time.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/net.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../common/param.h"
#include "../common/version.h"
#include "store_internal.h"

#define TOKEN_MAX TR_TOKEN_MAX
#define SMALL_BODY 64 /* most bytes of a LATEST body */

/* ---- counters ------------------------------------------------------------------------ */

static const char *const route_names[] = {"none", "healthz", "metrics", "chunk", "runs",
                                          "steps", "manifest", "part", "latest", "gc", "claim"};
static const char *const method_names[] = {"GET", "HEAD", "PUT", "POST", "other"};
static const int codes[] = {200, 201, 206, 400, 401, 404, 405, 409, 413, 414, 416, 422, 500, 503, 507};
#define NROUTES 11
#define NMETHODS 5
#define NCODES ((int)TR_ARRAY_SIZE(codes) + 1) /* the last: any other code */

enum refusal { REF_AUTH, REF_PATH, REF_NO_ROUTE, REF_METHOD, REF_TOO_LARGE, REF_HASH, REF_BODY, REF_CONFLICT,
               REF_RANGE, REF_CHANGED, NREFUSALS };
static const char *const refusal_names[] = {"auth", "bad_path", "no_route", "method", "too_large",
                                            "bad_hash", "bad_body", "conflict", "range", "changed"};

struct metrics {
    atomic_uint_fast64_t requests[NROUTES][NMETHODS][NCODES];
    atomic_uint_fast64_t refused[NREFUSALS];
    atomic_uint_fast64_t errors, bytes_in, bytes_out, chunks_stored;
};

struct ckpt_server {
    struct MHD_Daemon *d;
    struct ckpt_fs fs;
    char *token;
    size_t token_len;
    int64_t max_body;
    struct metrics m;
};

/* One request, made by the URI callback (which sees the raw URL) and freed when
 * it completes. */
struct req {
    char *uri;
    int started;
    struct ckpt_route r;
    int method;                /* index into method_names */
    /* a chunk upload: into the store's writer, or (the chunk is there) only hashed */
    struct ckpt_fs_writer w;
    struct ckpt_hasher *h;
    int exists;
    /* another body, in memory */
    char *body;
    size_t n, cap;
    int64_t limit, received;
    int over;                  /* the body crossed the limit: 413 at its end */
    enum tr_status failed;     /* storing the body failed (the rest is drained) */
    int failed_errno;          /* its cause (ENOSPC: 507) */
};

static int method_index(const char *m)
{
    for (int i = 0; i < NMETHODS - 1; i++)
        if (strcmp(m, method_names[i]) == 0)
            return i;
    return NMETHODS - 1;
}

static int code_index(int code)
{
    for (int i = 0; i < (int)TR_ARRAY_SIZE(codes); i++)
        if (codes[i] == code)
            return i;
    return NCODES - 1;
}

/* ---- answers -------------------------------------------------------------------------- */

static void peer_text(struct MHD_Connection *c, char *out, size_t n)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, n, "?");
    if (!ci || !ci->client_addr)
        return;
    char a[INET6_ADDRSTRLEN] = "?";
    if (ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)(const void *)ci->client_addr;
        inet_ntop(AF_INET, &s->sin_addr, a, sizeof a);
        snprintf(out, n, "%s:%u", a, (unsigned)ntohs(s->sin_port));
    } else if (ci->client_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)(const void *)ci->client_addr;
        inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof a);
        snprintf(out, n, "[%s]:%u", a, (unsigned)ntohs(s->sin6_port));
    }
}

/* Queues resp with status code and counts it; takes resp. */
static enum MHD_Result reply(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, int code,
                             struct MHD_Response *resp, uint64_t body_bytes)
{
    if (!resp)
        return MHD_NO;
    int route = q ? (int)q->r.op : 0;
    if (route < 0 || route >= NROUTES)
        route = 0;
    atomic_fetch_add(&s->m.requests[route][q ? q->method : NMETHODS - 1][code_index(code)], 1);
    if (code >= 500)
        atomic_fetch_add(&s->m.errors, 1);
    if (!q || q->method != 1) /* HEAD sends no body */
        atomic_fetch_add(&s->m.bytes_out, body_bytes);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result reply_text(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, int code,
                                  const char *text)
{
    char line[512];
    int k = snprintf(line, sizeof line, "%s\n", text);
    if (k < 0 || (size_t)k >= sizeof line)
        k = (int)sizeof line - 1;
    struct MHD_Response *resp = MHD_create_response_from_buffer((size_t)k, line, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (code == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    return reply(s, c, q, code, resp, (uint64_t)k);
}

/* A refusal: counted by kind, logged in one line, answered with its reason. */
static enum MHD_Result refuse(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, const char *method,
                              int code, enum refusal kind, const char *reason)
{
    char peer[96], path[200];
    peer_text(c, peer, sizeof peer);
    const char *u = q && q->uri ? q->uri : "?";
    size_t i = 0;
    for (; u[i] && i < sizeof path - 1; i++)
        path[i] = (unsigned char)u[i] < 0x20 || (unsigned char)u[i] >= 0x7f ? '?' : u[i];
    path[i] = '\0';
    atomic_fetch_add(&s->m.refused[kind], 1);
    LOG_WARN("refused %s %s%s from %s: %d %s", method, path, u[i] ? "..." : "", peer, code, reason);
    return reply_text(s, c, q, code, reason);
}

static void free_cb(void *p)
{
    tr_free(p);
}

/* Takes text (tr_malloc'd). */
static enum MHD_Result reply_owned(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, int code,
                                   char *text, size_t n, const char *type)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(n, text, free_cb);
    if (!resp) {
        tr_free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    return reply(s, c, q, code, resp, n);
}

static int nospace(int e)
{
    return e == ENOSPC || e == EDQUOT;
}

/* A store status as an HTTP answer for requests that passed routing. */
static enum MHD_Result reply_status(struct ckpt_server *s, struct MHD_Connection *c, struct req *q,
                                    const char *method, enum tr_status rc, const char *what)
{
    char line[256];
    switch (rc) {
    case TR_ERR_NOT_FOUND:
        snprintf(line, sizeof line, "%s: not found", what);
        return reply_text(s, c, q, 404, line);
    case TR_ERR_ARG:
    case TR_ERR_FORMAT:
    case TR_ERR_RANGE:
        snprintf(line, sizeof line, "%s: refused (%s; the server's log says why)", what, tr_strerror(rc));
        return refuse(s, c, q, method, 400, REF_BODY, line);
    case TR_ERR_NOMEM:
        return reply_text(s, c, q, 503, "out of memory");
    case TR_ERR_IO:
        if (nospace(q && q->failed_errno ? q->failed_errno : ckpt_fs_errno())) {
            int e = q && q->failed_errno ? q->failed_errno : ckpt_fs_errno();
            snprintf(line, sizeof line, "%s: the store's disk is full (%s: %s)", what, e == ENOSPC ? "ENOSPC" : "EDQUOT",
                     strerror(e));
            LOG_ERROR("%s %s: 507 %s", method, q && q->uri ? q->uri : "?", line);
            return reply_text(s, c, q, 507, line);
        }
        /* fall through */
    default:
        snprintf(line, sizeof line, "%s: %s (the server's log says more)", what, tr_strerror(rc));
        return reply_text(s, c, q, 500, line);
    }
}

/* ---- the routes ------------------------------------------------------------------------ */

static enum MHD_Result get_chunk(struct ckpt_server *s, struct MHD_Connection *c, struct req *q,
                                 const char *method)
{
    char *path = ckpt_fs_chunk_path(&s->fs, q->r.hash);
    if (!path)
        return reply_text(s, c, q, 503, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int e = errno;
    tr_free(path);
    struct stat st;
    if (fd < 0)
        return reply_text(s, c, q, e == ENOENT ? 404 : 500, e == ENOENT ? "no such chunk" : "cannot open the chunk");
    if (fstat(fd, &st) != 0) {
        close(fd);
        return reply_text(s, c, q, 500, "cannot stat the chunk");
    }
    uint64_t size = (uint64_t)st.st_size, off = 0, len = size;
    int code = 200;
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
    char cr[96] = "";
    if (range && q->method == 0) {
        unsigned long long a = 0, b = 0;
        int ok = 0, used = 0;
        if (sscanf(range, "bytes=%llu-%llu%n", &a, &b, &used) == 2 && range[used] == '\0')
            ok = a <= b && a < size;
        else if (sscanf(range, "bytes=%llu-%n", &a, &used) == 1 && range[used] == '\0')
            ok = a < size, b = size - 1;
        else if (sscanf(range, "bytes=-%llu%n", &b, &used) == 1 && range[used] == '\0' && b > 0 && size > 0)
            ok = 1, a = b >= size ? 0 : size - b, b = size - 1;
        if (!ok) {
            close(fd);
            struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
            if (!resp)
                return MHD_NO;
            snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)size);
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
            char peer[96];
            peer_text(c, peer, sizeof peer);
            atomic_fetch_add(&s->m.refused[REF_RANGE], 1);
            LOG_WARN("refused %s %.200s from %s: 416 bad or unsatisfiable range '%.64s'", method, q->uri, peer,
                     range);
            return reply(s, c, q, 416, resp, 0);
        }
        if (b >= size)
            b = size - 1;
        off = a;
        len = b - a + 1;
        code = 206;
        snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", a, b, (unsigned long long)size);
    }
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (code == 206)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    return reply(s, c, q, code, resp, len);
}

/* JSON of a list of names or of steps. */
static enum MHD_Result reply_list(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, const char *key,
                                  char **names, const int64_t *steps, int n)
{
    size_t cap = 32 + strlen(key) + (size_t)n * (CKPT_RUN_MAX + 24);
    char *buf = tr_malloc(cap);
    if (!buf)
        return reply_text(s, c, q, 503, "out of memory");
    size_t k = (size_t)snprintf(buf, cap, "{\"%s\": [", key);
    for (int i = 0; i < n; i++) {
        if (names)
            k += (size_t)snprintf(buf + k, cap - k, "%s\"%s\"", i ? ", " : "", names[i]);
        else
            k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", steps[i]);
    }
    k += (size_t)snprintf(buf + k, cap - k, "]}\n");
    return reply_owned(s, c, q, 200, buf, k, "application/json");
}

static enum MHD_Result get_metrics(struct ckpt_server *s, struct MHD_Connection *c, struct req *q)
{
    size_t cap = 8192 + (size_t)NROUTES * NMETHODS * NCODES * 100;
    char *b = tr_malloc(cap);
    if (!b)
        return reply_text(s, c, q, 503, "out of memory");
    size_t k = 0;
#define OUT(...) k += (size_t)snprintf(b + k, k < cap ? cap - k : 0, __VA_ARGS__)
    OUT("# HELP terarec_ckpt_requests_total Requests answered, by route, method and status code.\n"
        "# TYPE terarec_ckpt_requests_total counter\n");
    for (int r = 0; r < NROUTES; r++)
        for (int m = 0; m < NMETHODS; m++)
            for (int x = 0; x < NCODES; x++) {
                uint64_t v = atomic_load(&s->m.requests[r][m][x]);
                if (!v)
                    continue;
                char code[16];
                if (x < NCODES - 1)
                    snprintf(code, sizeof code, "%d", codes[x]);
                else
                    snprintf(code, sizeof code, "other");
                OUT("terarec_ckpt_requests_total{route=\"%s\",method=\"%s\",code=\"%s\"} %llu\n", route_names[r],
                    method_names[m], code, (unsigned long long)v);
            }
    OUT("# HELP terarec_ckpt_errors_total Requests that failed on the server's side (5xx).\n"
        "# TYPE terarec_ckpt_errors_total counter\nterarec_ckpt_errors_total %llu\n",
        (unsigned long long)atomic_load(&s->m.errors));
    OUT("# HELP terarec_ckpt_refused_total Requests refused, by reason.\n"
        "# TYPE terarec_ckpt_refused_total counter\n");
    for (int i = 0; i < NREFUSALS; i++)
        OUT("terarec_ckpt_refused_total{reason=\"%s\"} %llu\n", refusal_names[i],
            (unsigned long long)atomic_load(&s->m.refused[i]));
    OUT("# HELP terarec_ckpt_bytes_in_total Bytes of request bodies received.\n"
        "# TYPE terarec_ckpt_bytes_in_total counter\nterarec_ckpt_bytes_in_total %llu\n",
        (unsigned long long)atomic_load(&s->m.bytes_in));
    OUT("# HELP terarec_ckpt_bytes_out_total Bytes of response bodies sent.\n"
        "# TYPE terarec_ckpt_bytes_out_total counter\nterarec_ckpt_bytes_out_total %llu\n",
        (unsigned long long)atomic_load(&s->m.bytes_out));
    OUT("# HELP terarec_ckpt_chunks_stored_total Chunks stored (new ones, 201).\n"
        "# TYPE terarec_ckpt_chunks_stored_total counter\nterarec_ckpt_chunks_stored_total %llu\n",
        (unsigned long long)atomic_load(&s->m.chunks_stored));
#undef OUT
    TR_ASSERT(k < cap);
    return reply_owned(s, c, q, 200, b, k, "text/plain; version=0.0.4");
}

static enum MHD_Result post_gc(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, const char *method)
{
    struct ckpt_gc_stats st;
    struct ckpt_gc_opts o = {q->r.keep, q->r.grace_s >= 0 ? (double)q->r.grace_s : CKPT_GC_GRACE_S};
    enum tr_status rc = ckpt_fs_gc(&s->fs, &o, &st);
    if (rc != TR_OK)
        return reply_status(s, c, q, method, rc, "gc");
    char *b = tr_malloc(512);
    if (!b)
        return reply_text(s, c, q, 503, "out of memory");
    int k = snprintf(b, 512,
                     "{\"manifests_kept\": %" PRId64 ", \"manifests_removed\": %" PRId64 ", \"chunks_kept\": %" PRId64
                     ", \"chunks_removed\": %" PRId64 ", \"bytes_removed\": %" PRId64 ", \"parts_removed\": %" PRId64
                     ", \"temps_removed\": %" PRId64 "}\n",
                     st.manifests_kept, st.manifests_removed, st.chunks_kept, st.chunks_removed, st.bytes_removed,
                     st.parts_removed, st.temps_removed);
    return reply_owned(s, c, q, 200, b, (size_t)k, "application/json");
}

/* The answer to a routed request whose body (if any) has arrived. */
static enum MHD_Result answer(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, const char *method)
{
    const struct ckpt_route *r = &q->r;
    char *text = NULL;
    size_t n = 0;
    enum tr_status rc;
    char what[256];
    if (q->over) {
        ckpt_fs_chunk_abort(&q->w);
        return refuse(s, c, q, method, 413, REF_TOO_LARGE, "body larger than --max_body");
    }
    switch (r->op) {
    case CKPT_R_HEALTHZ:
        return reply_text(s, c, q, 200, "ok");
    case CKPT_R_METRICS:
        return get_metrics(s, c, q);
    case CKPT_R_CHUNK:
        if (q->method == 1) { /* HEAD: the client will not send it; keep it from a gc walking now */
            int64_t have;
            rc = ckpt_fs_chunk_touch(&s->fs, r->hash, &have);
            if (rc == TR_ERR_NOT_FOUND)
                return reply_text(s, c, q, 404, "no such chunk");
            if (rc != TR_OK)
                return reply_status(s, c, q, method, rc, "chunk");
        }
        if (q->method != 2)
            return get_chunk(s, c, q, method);
        if (q->failed) {
            ckpt_fs_chunk_abort(&q->w);
            return reply_status(s, c, q, method, q->failed, "chunk");
        }
        if (q->exists) {
            char got[CKPT_HASH_LEN + 1];
            ckpt_hasher_final(q->h, got);
            if (strcmp(got, r->hash) != 0)
                return refuse(s, c, q, method, 400, REF_HASH, "the body's bytes hash to another name");
            return reply_text(s, c, q, 200, "already stored");
        }
        rc = ckpt_fs_chunk_commit(&q->w);
        if (rc == TR_ERR_IO)
            q->failed_errno = ckpt_fs_errno();
        if (rc == TR_ERR_FORMAT)
            return refuse(s, c, q, method, 400, REF_HASH, "the body's bytes hash to another name");
        if (rc != TR_OK)
            return reply_status(s, c, q, method, rc, "chunk");
        atomic_fetch_add(&s->m.chunks_stored, 1);
        return reply_text(s, c, q, 201, "stored");
    case CKPT_R_RUNS: {
        char **names;
        int k;
        rc = ckpt_fs_list_runs(&s->fs, &names, &k);
        if (rc != TR_OK)
            return reply_status(s, c, q, method, rc, "runs");
        enum MHD_Result res = reply_list(s, c, q, "runs", names, NULL, k);
        ckpt_free_names(names, k);
        return res;
    }
    case CKPT_R_STEPS: {
        int64_t *steps;
        int k;
        rc = ckpt_fs_list_steps(&s->fs, r->run, &steps, &k);
        if (rc != TR_OK)
            return reply_status(s, c, q, method, rc, "steps");
        enum MHD_Result res = reply_list(s, c, q, "steps", NULL, steps, k);
        tr_free(steps);
        return res;
    }
    case CKPT_R_MANIFEST:
    case CKPT_R_PART:
        snprintf(what, sizeof what, "%s of run '%s' step %" PRId64, r->op == CKPT_R_PART ? "part" : "manifest",
                 r->run, r->step);
        if (q->method == 0) {
            rc = r->op == CKPT_R_PART ? ckpt_fs_part_get(&s->fs, r->run, r->step, r->rank, &text, &n)
                                      : ckpt_fs_manifest_get(&s->fs, r->run, r->step, &text, &n);
            if (rc == TR_ERR_FORMAT && r->op == CKPT_R_MANIFEST)
                return refuse(s, c, q, method, 422, REF_CHANGED,
                              "the manifest was changed after it was stored (its xxh3-128 differs from the one "
                              "recorded)");
            if (rc != TR_OK)
                return reply_status(s, c, q, method, rc, what);
            return reply_owned(s, c, q, 200, text, n, "application/json");
        }
        rc = r->op == CKPT_R_PART ? ckpt_fs_part_put(&s->fs, r->run, r->step, r->rank, q->body ? q->body : "", q->n)
                                  : ckpt_fs_manifest_put(&s->fs, r->run, r->step, q->body ? q->body : "", q->n);
        if (rc == TR_OK)
            return reply_text(s, c, q, 201, "stored");
        if (rc == TR_ERR_NOT_FOUND)
            return refuse(s, c, q, method, 409, REF_CONFLICT, "a chunk it names is not stored");
        if (rc == TR_ERR_RANGE)
            return refuse(s, c, q, method, 409, REF_CONFLICT,
                          "a different manifest of that step is committed (at or below LATEST): never replaced");
        return reply_status(s, c, q, method, rc, what);
    case CKPT_R_LATEST: {
        int64_t step = -1;
        if (q->method == 0) {
            rc = ckpt_fs_latest(&s->fs, r->run, &step);
            if (rc != TR_OK)
                return reply_status(s, c, q, method, rc, "LATEST");
            char line[32];
            snprintf(line, sizeof line, "%" PRId64, step);
            return reply_text(s, c, q, 200, line);
        }
        size_t k = q->n;
        while (k > 0 && (q->body[k - 1] == '\n' || q->body[k - 1] == '\r' || q->body[k - 1] == ' '))
            k--;
        int ok = k > 0 && k <= 18;
        for (size_t i = 0; ok && i < k; i++) {
            ok = q->body[i] >= '0' && q->body[i] <= '9';
            step = (i ? step : 0) * 10 + (q->body[i] - '0');
        }
        if (!ok)
            return refuse(s, c, q, method, 400, REF_BODY, "the body must be a step (a decimal number)");
        rc = ckpt_fs_commit_keep(&s->fs, r->run, step, r->keep);
        if (rc == TR_ERR_NOT_FOUND)
            return refuse(s, c, q, method, 409, REF_CONFLICT, "no manifest of that step");
        if (rc == TR_ERR_RANGE) {
            int64_t cur = -1;
            char line[200];
            if (ckpt_fs_latest(&s->fs, r->run, &cur) != TR_OK)
                cur = -1;
            snprintf(line, sizeof line, "step %" PRId64 " is below LATEST (step %" PRId64 "): LATEST never moves back",
                     step, cur);
            return refuse(s, c, q, method, 409, REF_CONFLICT, line);
        }
        if (rc != TR_OK)
            return reply_status(s, c, q, method, rc, "commit");
        return reply_text(s, c, q, 200, "committed");
    }
    case CKPT_R_GC:
        return post_gc(s, c, q, method);
    case CKPT_R_CLAIM: {
        char holder[300], line[512];
        size_t k = q->n;
        while (k > 0 && (q->body[k - 1] == '\n' || q->body[k - 1] == '\r'))
            k--;
        if (k == 0 || memchr(q->body, '\n', k))
            return refuse(s, c, q, method, 400, REF_BODY, "the body must be the claiming job's id (one line)");
        q->body[k] = '\0';
        rc = ckpt_fs_claim(&s->fs, r->run, q->body, holder, sizeof holder);
        if (rc == TR_ERR_RANGE) {
            snprintf(line, sizeof line, "run name '%s' is in use in this store (claimed by %.200s)", r->run, holder);
            return refuse(s, c, q, method, 409, REF_CONFLICT, line);
        }
        if (rc != TR_OK)
            return reply_status(s, c, q, method, rc, "claim");
        return reply_text(s, c, q, 200, "claimed");
    }
    default:
        return reply_text(s, c, q, 500, "internal error: no route");
    }
}

/* Constant-time comparison of the Authorization header with "Bearer <token>". */
static int auth_ok(const struct ckpt_server *s, const char *h)
{
    if (!h || strncmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    size_t n = strnlen(h, TOKEN_MAX + 1);
    unsigned char diff = n != s->token_len;
    for (size_t i = 0; i < s->token_len; i++)
        diff |= (unsigned char)(s->token[i] ^ (i < n ? h[i] : 0));
    return diff == 0;
}

/* The first call of a request: token, route and size, before any body is read. */
static enum MHD_Result start(struct ckpt_server *s, struct MHD_Connection *c, struct req *q, const char *method)
{
    q->started = 1;
    q->method = method_index(method);
    if (!auth_ok(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION)))
        return refuse(s, c, q, method, 401, REF_AUTH, "missing or wrong bearer token");
    ckpt_route(method, q->uri, &q->r);
    if (q->r.status) {
        enum refusal k = q->r.status == 404 ? REF_NO_ROUTE : q->r.status == 405 ? REF_METHOD : REF_PATH;
        q->r.op = CKPT_R_NONE;
        return refuse(s, c, q, method, q->r.status, k, q->r.reason);
    }
    int put = q->method == 2 || q->method == 3;
    q->limit = q->r.op == CKPT_R_LATEST ? SMALL_BODY : q->r.op == CKPT_R_CLAIM ? 512 : s->max_body;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || *end || v > (unsigned long long)q->limit)
            return refuse(s, c, q, method, 413, REF_TOO_LARGE, "body larger than --max_body");
    }
    if (put && q->r.op == CKPT_R_CHUNK) {
        int64_t have;
        enum tr_status rc = ckpt_fs_chunk_touch(&s->fs, q->r.hash, &have);
        if (rc == TR_OK) {
            q->exists = 1;
            q->h = ckpt_hasher_new();
            if (!q->h)
                return reply_text(s, c, q, 503, "out of memory");
        } else if (rc == TR_ERR_NOT_FOUND) {
            rc = ckpt_fs_chunk_begin(&s->fs, q->r.hash, q->limit, &q->w);
            if (rc != TR_OK)
                return reply_status(s, c, q, method, rc, "chunk");
        } else {
            return reply_status(s, c, q, method, rc, "chunk");
        }
    }
    return MHD_YES;
}

/* A piece of a body. */
static enum MHD_Result receive(struct ckpt_server *s, struct req *q, const char *data, size_t n)
{
    atomic_fetch_add(&s->m.bytes_in, n);
    q->received += (int64_t)n;
    if (q->over) {
        /* refused: the rest is dropped; a sender that goes on for long is cut off */
        return q->received > 2 * q->limit + (64 << 20) ? MHD_NO : MHD_YES;
    }
    if (q->received > q->limit) {
        q->over = 1;
        ckpt_fs_chunk_abort(&q->w);
        return MHD_YES;
    }
    if (q->r.op == CKPT_R_CHUNK) {
        if (q->exists) {
            ckpt_hasher_update(q->h, data, n);
            return MHD_YES;
        }
        if (q->failed)
            return MHD_YES; /* drained: the answer says why at the end */
        enum tr_status rc = ckpt_fs_chunk_write(&q->w, data, n);
        if (rc == TR_ERR_RANGE) {
            q->over = 1;
            ckpt_fs_chunk_abort(&q->w);
            return MHD_YES;
        }
        if (rc != TR_OK) {
            q->failed = rc;
            q->failed_errno = ckpt_fs_errno();
            ckpt_fs_chunk_abort(&q->w); /* frees the space of what was written */
        }
        return MHD_YES;
    }
    if (q->n + n + 1 > q->cap) {
        size_t nc = q->cap ? q->cap : 4096;
        while (nc < q->n + n + 1)
            nc *= 2;
        char *nb = tr_realloc(q->body, nc);
        if (!nb)
            return MHD_NO;
        q->body = nb;
        q->cap = nc;
    }
    memcpy(q->body + q->n, data, n);
    q->n += n;
    q->body[q->n] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)url;
    (void)version;
    struct ckpt_server *s = cls;
    struct req *q = *req_cls;
    if (!q)
        return MHD_NO; /* out of memory in on_uri */
    if (!q->started)
        return start(s, c, q, method);
    if (*upload_data_size > 0) {
        enum MHD_Result r = receive(s, q, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return r;
    }
    return answer(s, c, q, method);
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    struct req *q = tr_calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->w.f.fd = -1;
    q->uri = tr_strdup(uri ? uri : "");
    if (!q->uri) {
        tr_free(q);
        return NULL;
    }
    return q;
}

static void on_done(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct req *q = *req_cls;
    if (!q)
        return;
    ckpt_fs_chunk_abort(&q->w); /* an upload cut short leaves no temporary file */
    ckpt_hasher_free(q->h);
    tr_free(q->body);
    tr_free(q->uri);
    tr_free(q);
    *req_cls = NULL;
}

/* ---- start and stop ---------------------------------------------------------------------- */

static enum tr_status read_token(const char *path, char **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!path || !*path) {
        LOG_ERROR("--token_file is required");
        LOG_HINT("write a secret to a file readable only by you and pass it with --token_file");
        return TR_ERR_ARG;
    }
    TR_CHECK(tr_file_read_token(path, "the token file", out));
    *n = strlen(*out);
    return TR_OK;
}

static int env_ms(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    long x = strtol(v, NULL, 10);
    if (x > 0)
        LOG_WARN("fault injection: %s=%ld", name, x);
    return x > 0 && x < 3600 * 1000 ? (int)x : 0;
}

enum tr_status ckpt_server_start(const struct ckpt_server_cfg *cfg, struct ckpt_server **out, int *port)
{
    enum tr_status rc = TR_OK;
    *out = NULL;
    *port = 0;
    struct sockaddr_storage ss;
    int v6 = 0;
    const char *listen = cfg->listen ? cfg->listen : "127.0.0.1:0";
    if (tr_net_parse_listen(listen, &ss, &v6, NULL) != TR_OK) {
        LOG_ERROR("--listen: '%s' is not ADDR:PORT (an IPv4 address, or [IPv6], and a port 0-65535)", listen);
        LOG_HINT("use --listen 127.0.0.1:8080, or 127.0.0.1:0 for a free port");
        return TR_ERR_ARG;
    }
    struct ckpt_server *s = tr_calloc(1, sizeof *s);
    if (!s)
        return TR_ERR_NOMEM;
    s->max_body = cfg->max_body > 0 ? cfg->max_body : INT64_C(1) << 30;
    TR_CHECK_GOTO(read_token(cfg->token_file, &s->token, &s->token_len), rc, fail);
    if (!cfg->root || !*cfg->root) {
        LOG_ERROR("--root is required");
        rc = TR_ERR_ARG;
        goto fail;
    }
    TR_CHECK_GOTO(ckpt_fs_open(&s->fs, cfg->root), rc, fail);
    ckpt_fs_set_fault(env_ms("TR_CKPT_FAULT_COMMIT_DELAY_MS"), env_ms("TR_CKPT_FAULT_PUT_DELAY_MS"));
    unsigned threads = cfg->threads > 0 ? (unsigned)cfg->threads : 8;
    unsigned max_conns = cfg->max_connections > 0 ? (unsigned)cfg->max_connections : 1000;
    unsigned per_ip = cfg->max_connections_per_ip > 0 ? (unsigned)cfg->max_connections_per_ip : 128;
    unsigned idle = cfg->idle_timeout > 0 ? (unsigned)cfg->idle_timeout : 30;
    /* ITC: MHD_stop_daemon wakes the pool's threads at once (without it a thread
     * sleeps in epoll until its nearest connection times out). Connections are
     * bounded in all and per address, and one silent for `idle` seconds is closed
     * (a half-sent header, or a body that stopped: a chunk upload that is moving
     * is never cut) */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_done, s, MHD_OPTION_CONNECTION_TIMEOUT, idle,
                            MHD_OPTION_CONNECTION_LIMIT, max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
                            /* room for large reads of a body: chunks are megabytes */
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(1u << 20),
                            MHD_OPTION_END);
    if (!s->d) {
        LOG_ERROR("cannot listen on '%s': %s", listen, strerror(errno));
        LOG_HINT("is another server using that port? --listen ADDR:0 picks a free one");
        rc = TR_ERR_IO;
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? (int)di->port : 0;
    LOG_INFO(NET,
             "terarec-ckpt: serving '%s' on %s (port %d), %u threads, bodies up to %" PRId64
             " bytes, at most %u connections (%u per address), idle ones closed after %u s",
             cfg->root, listen, *port, threads, s->max_body, max_conns, per_ip, idle);
    *out = s;
    return TR_OK;
fail:
    ckpt_server_stop(&s);
    return rc;
}

void ckpt_server_stop(struct ckpt_server **sp)
{
    if (!sp || !*sp)
        return;
    struct ckpt_server *s = *sp;
    if (s->d)
        MHD_stop_daemon(s->d);
    ckpt_fs_close(&s->fs);
    tr_free(s->token);
    tr_free(s);
    *sp = NULL;
}

/* ---- the program ------------------------------------------------------------------------- */

int ckpt_server_main(int argc, char **argv)
{
    struct ckpt_server_cfg cfg = {0};
    char *root = NULL, *listen = NULL, *token_file = NULL;
    double term_grace = 0;
    int want = 0;
    struct tr_opt opts[] = {
        {"root", TR_OPT_PATH, &root, NULL, "the store's directory (created if missing); required", TR_OPT_NOBOUNDS,
         NULL, NULL, 0, NULL, 0},
        {"listen", TR_OPT_STRING, &listen, "127.0.0.1:0",
         "ADDR:PORT to bind (port 0: the system picks one; 0.0.0.0 only if you mean it)", TR_OPT_NOBOUNDS, NULL,
         NULL, 0, NULL, 0},
        {"token_file", TR_OPT_PATH, &token_file, NULL,
         "file holding the bearer token every request must carry; required", TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"threads", TR_OPT_INT, &cfg.threads, "8", "threads serving requests", 1, 1024, NULL, NULL, 0, NULL, 0},
        {"max_connections", TR_OPT_INT, &cfg.max_connections, "1000", "connections open at once, in all", 1, 60000,
         NULL, NULL, 0, NULL, 0},
        {"max_connections_per_ip", TR_OPT_INT, &cfg.max_connections_per_ip, "128",
         "connections open at once from one address (a node's workers share one: 8 GPUs x 8 transfers each "
         "fit, a flood from another address does not crowd them out)",
         1, 60000, NULL, NULL, 0, NULL, 0},
        {"idle_timeout", TR_OPT_INT, &cfg.idle_timeout, "30",
         "seconds a connection may send nothing (a half-sent header, a stalled body) before it is closed", 1, 86400,
         NULL, NULL, 0, NULL, 0},
        {"max_body", TR_OPT_BYTES, &cfg.max_body, "1G", "largest request body (a chunk or a manifest)", 1,
         (double)(INT64_C(1) << 40), NULL, NULL, 0, NULL, 0},
        {"term_grace", TR_OPT_DOUBLE, &term_grace, "0",
         "seconds to go on serving after a SIGTERM (the workers' last checkpoint when SLURM ends a job; SIGINT "
         "stops at once)",
         0, 1e6, NULL, NULL, 0, NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0},
    };
    enum tr_status rc = tr_opt_parse(opts, argc, argv, NULL, &want);
    if (rc == TR_OK && (want & TR_OPT_WANT_HELP)) {
        tr_opt_print_help(opts, "usage: terarec-ckpt --root DIR --token_file FILE [options]\n\nserves a "
                                "checkpoint store over HTTP",
                          stdout);
    } else if (rc == TR_OK && (want & TR_OPT_WANT_VERSION)) {
        tr_version_print(stdout, "terarec-ckpt", want & TR_OPT_WANT_PARSABLE, NULL);
    } else if (rc == TR_OK && (!root || !token_file)) {
        LOG_ERROR("--%s is required", !root ? "root" : "token_file");
        LOG_HINT("terarec-ckpt --root DIR --token_file FILE [--listen 127.0.0.1:PORT]");
        rc = TR_ERR_ARG;
    } else if (rc == TR_OK) {
        cfg.root = root;
        cfg.listen = listen;
        cfg.token_file = token_file;
        /* SIGINT/SIGTERM are taken by sigwait below: blocked before the server's
         * threads start, so that they inherit the mask */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);
        struct ckpt_server *s = NULL;
        int port = 0;
        rc = ckpt_server_start(&cfg, &s, &port);
        if (rc == TR_OK) {
            const char *colon = strrchr(cfg.listen, ':');
            printf("terarec-ckpt: listening on http://%.*s:%d\n", (int)(colon - cfg.listen), cfg.listen, port);
            fflush(stdout);
            int sig = 0;
            sigwait(&set, &sig);
            if (sig == SIGTERM && term_grace > 0) {
                /* SLURM signals every process of a job it ends; the workers still
                 * save their last checkpoint here: serve on for the grace time */
                LOG_WARN("terarec-ckpt: SIGTERM: serving %g s more (--term_grace; SIGINT stops at once)", term_grace);
                struct timespec ts = {(time_t)term_grace, (long)((term_grace - floor(term_grace)) * 1e9)};
                sigdelset(&set, SIGTERM);
                sigtimedwait(&set, NULL, &ts);
            }
            LOG_INFO(NET, "terarec-ckpt: signal %d: stopping", sig);
            ckpt_server_stop(&s);
        } else if (tr_status_exit_code(rc) == 1) {
            LOG_ERROR("terarec-ckpt failed: %s", tr_strerror(rc));
        }
    }
    tr_opt_release(opts);
    return tr_status_exit_code(rc);
}
