/* route.c: ckpt_route(), terarec-ckpt's request router (server.h): a method and
 * a raw URL to a route, or to the status and reason of a refusal. Pure: no I/O,
 * no allocation, no libmicrohttpd (the fuzz target links it alone). It does not
 * decode percent-encoding: a '%' is refused, so a name has one spelling only. */
#include "server.h"

#include <stdio.h>
#include <string.h>

#define MAX_URL 4096
#define MAX_SEGS 6
#define MAX_KEEP 1000000

struct seg {
    const char *p;
    size_t n;
};

static int seg_is(const struct seg *s, const char *lit)
{
    return s->n == strlen(lit) && memcmp(s->p, lit, s->n) == 0;
}

static void refuse(struct ckpt_route *out, int status, const char *reason)
{
    out->op = CKPT_R_NONE;
    out->status = status;
    out->reason = reason;
}

/* A decimal number of 1..18 digits without a leading zero (but "0") in s[0, n). */
static int parse_dec(const char *s, size_t n, int64_t *v)
{
    if (n < 1 || n > 18 || (n > 1 && s[0] == '0'))
        return 0;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return 1;
}

/* "<decimal>.json" */
static int parse_json_name(const struct seg *s, int64_t *v)
{
    return s->n > 5 && memcmp(s->p + s->n - 5, ".json", 5) == 0 && parse_dec(s->p, s->n - 5, v);
}

/* The methods each route takes: bit 0 GET, 1 HEAD, 2 PUT, 3 POST. */
enum { M_GET = 1, M_HEAD = 2, M_PUT = 4, M_POST = 8 };

static int method_bit(const char *m)
{
    if (strcmp(m, "GET") == 0)
        return M_GET;
    if (strcmp(m, "HEAD") == 0)
        return M_HEAD;
    if (strcmp(m, "PUT") == 0)
        return M_PUT;
    if (strcmp(m, "POST") == 0)
        return M_POST;
    return 0;
}

/* NAME=N in the query q[0, n) (other parameters ignored): 1 and *v when found
 * and a decimal in [lo, hi], 0 when absent, -1 when bad. */
static int query_int(const char *q, size_t n, const char *name, int64_t lo, int64_t hi, int64_t *v)
{
    const char *end = q + n;
    const size_t k = strlen(name);
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *e = amp ? amp : end;
        if ((size_t)(e - q) > k && memcmp(q, name, k) == 0 && q[k] == '=')
            return parse_dec(q + k + 1, (size_t)(e - q - k - 1), v) && *v >= lo && *v <= hi ? 1 : -1;
        q = amp ? amp + 1 : end;
    }
    return 0;
}

void ckpt_route(const char *method, const char *url, struct ckpt_route *out)
{
    memset(out, 0, sizeof *out);
    out->step = -1;
    out->rank = -1;
    if (!method || !url)
        {
        refuse(out, 400, "no method or no URL");
        return;
    }
    size_t len = strnlen(url, MAX_URL + 1);
    if (len > MAX_URL)
        {
        refuse(out, 414, "URL too long");
        return;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c == '%')
            {
        refuse(out, 400, "percent-encoding in the URL");
        return;
    }
        if (c <= 0x20 || c >= 0x7f)
            {
        refuse(out, 400, "a space, control or non-ASCII character in the URL");
        return;
    }
    }
    if (url[0] != '/')
        {
        refuse(out, 400, "not an absolute path");
        return;
    }
    const char *q = memchr(url, '?', len);
    size_t plen = q ? (size_t)(q - url) : len;
    const char *query = q ? q + 1 : url + len;
    size_t qlen = q ? len - plen - 1 : 0;

    /* the path's segments */
    struct seg segs[MAX_SEGS];
    int nseg = 0;
    for (size_t i = 1; i <= plen;) {
        size_t j = i;
        while (j < plen && url[j] != '/')
            j++;
        struct seg s = {url + i, j - i};
        if (s.n == 0 && j < plen)
            {
        refuse(out, 400, "an empty segment ('//') in the path");
        return;
    }
        if (seg_is(&s, ".") || seg_is(&s, ".."))
            {
        refuse(out, 400, "'.' or '..' in the path");
        return;
    }
        if (nseg == MAX_SEGS)
            {
        refuse(out, 404, "no such path");
        return;
    }
        segs[nseg++] = s;
        i = j + 1;
    }
    if (nseg > 0 && segs[nseg - 1].n == 0)
        {
        refuse(out, 404, "no such path (a trailing '/')");
        return;
    }

    int allowed = 0;
    if (nseg == 1 && seg_is(&segs[0], "healthz")) {
        out->op = CKPT_R_HEALTHZ;
        allowed = M_GET | M_HEAD;
    } else if (nseg == 1 && seg_is(&segs[0], "metrics")) {
        out->op = CKPT_R_METRICS;
        allowed = M_GET;
    } else if (nseg == 1 && seg_is(&segs[0], "gc")) {
        out->op = CKPT_R_GC;
        allowed = M_POST;
    } else if (nseg == 2 && seg_is(&segs[0], "chunks")) {
        if (segs[1].n != CKPT_HASH_LEN)
            {
        refuse(out, 400, "not a chunk hash (32 lowercase hex digits)");
        return;
    }
        memcpy(out->hash, segs[1].p, CKPT_HASH_LEN);
        out->hash[CKPT_HASH_LEN] = '\0';
        if (!ckpt_hash_ok(out->hash))
            {
        refuse(out, 400, "not a chunk hash (32 lowercase hex digits)");
        return;
    }
        out->op = CKPT_R_CHUNK;
        allowed = M_GET | M_HEAD | M_PUT;
    } else if (nseg == 1 && seg_is(&segs[0], "runs")) {
        out->op = CKPT_R_RUNS;
        allowed = M_GET;
    } else if (nseg >= 3 && seg_is(&segs[0], "runs")) {
        if (segs[1].n > CKPT_RUN_MAX)
            {
        refuse(out, 400, "not a run name");
        return;
    }
        memcpy(out->run, segs[1].p, segs[1].n);
        out->run[segs[1].n] = '\0';
        if (!ckpt_run_ok(out->run))
            {
        refuse(out, 400, "not a run name ([A-Za-z0-9._-], not starting with '.')");
        return;
    }
        if (nseg == 3 && seg_is(&segs[2], "manifests")) {
            out->op = CKPT_R_STEPS;
            allowed = M_GET;
        } else if (nseg == 3 && seg_is(&segs[2], "LATEST")) {
            out->op = CKPT_R_LATEST;
            allowed = M_GET | M_PUT;
        } else if (nseg == 3 && seg_is(&segs[2], "claim")) {
            out->op = CKPT_R_CLAIM;
            allowed = M_POST;
        } else if (nseg == 4 && seg_is(&segs[2], "manifests")) {
            if (!parse_json_name(&segs[3], &out->step))
                {
        refuse(out, 400, "not a step ('<decimal>.json')");
        return;
    }
            out->op = CKPT_R_MANIFEST;
            allowed = M_GET | M_PUT;
        } else if (nseg == 5 && seg_is(&segs[2], "parts")) {
            int64_t rank;
            if (!parse_dec(segs[3].p, segs[3].n, &out->step))
                {
        refuse(out, 400, "not a step (a decimal number)");
        return;
    }
            if (!parse_json_name(&segs[4], &rank) || rank > (1 << 20))
                {
        refuse(out, 400, "not a rank ('<decimal>.json')");
        return;
    }
            out->rank = (int)rank;
            out->op = CKPT_R_PART;
            allowed = M_GET | M_PUT;
        } else {
            {
        refuse(out, 404, "no such path");
        return;
    }
        }
    } else {
        {
        refuse(out, 404, "no such path");
        return;
    }
    }
    if (!(method_bit(method) & allowed))
        {
        refuse(out, 405, "method not allowed on this path");
        return;
    }
    int64_t v = 0;
    out->grace_s = -1;
    if (out->op == CKPT_R_GC || (out->op == CKPT_R_LATEST && method_bit(method) == M_PUT)) {
        int k = query_int(query, qlen, "keep", 0, MAX_KEEP, &v);
        if (k < 0) {
            refuse(out, 400, "keep=N needs 0 <= N <= 1000000 (0: keep all)");
            return;
        }
        out->keep = k ? (int)v : 0;
    }
    if (out->op == CKPT_R_GC) {
        int k = query_int(query, qlen, "grace", 0, 100 * 365 * 86400LL, &v);
        if (k < 0) {
            refuse(out, 400, "grace=S needs a whole number of seconds");
            return;
        }
        out->grace_s = k ? (int64_t)v : -1;
    }
}
