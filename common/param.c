/* param.c: option table parsing (defaults < environment < command line) and --help.
 * It does not read config files yet; a file layer slots in between defaults and env. */
#define TR_SUBSYS TR_SUB_INIT
#define _POSIX_C_SOURCE 200809L
#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "check.h"
#include "log.h"

enum tr_status tr_opt_parse_i64_list(const char *text, struct tr_i64_list *out)
{
    out->v = NULL;
    out->n = 0;
    if (!text || !*text)
        return TR_OK;
    size_t cap = 16, n = 0;
    int64_t *v = tr_malloc(cap * sizeof *v);
    if (!v)
        return TR_ERR_NOMEM;
    const char *p = text;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        char *end;
        errno = 0;
        long long a = strtoll(p, &end, 10);
        if (end == p || errno) {
            tr_free(v);
            return end != p && errno == ERANGE ? TR_ERR_RANGE : TR_ERR_ARG;
        }
        long long times = 1;
        p = end;
        if (*p == 'x' || *p == 'X') {
            times = a;
            p++;
            a = strtoll(p, &end, 10);
            if (end == p || errno || times < 1 || times > 1000000) {
                tr_free(v);
                return end != p && (errno == ERANGE || times > 1000000) ? TR_ERR_RANGE : TR_ERR_ARG;
            }
            p = end;
        }
        for (long long i = 0; i < times; i++) {
            if (n == cap) {
                int64_t *nv = tr_realloc(v, 2 * cap * sizeof *v);
                if (!nv) {
                    tr_free(v);
                    return TR_ERR_NOMEM;
                }
                v = nv;
                cap *= 2;
            }
            v[n++] = a;
        }
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            break;
        if (*p != ',' || n > 1000000) {
            tr_free(v);
            return *p == ',' ? TR_ERR_RANGE : TR_ERR_ARG;
        }
        p++;
    }
    out->v = v;
    out->n = (int)n;
    return TR_OK;
}

int tr_opt_parse_bytes(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    const int huge = errno == ERANGE && fabs(v) > 1.0; /* an underflow is just 0 */
    if (!huge && errno)
        return -1;
    double mul = 1;
    if (*end) {
        switch (*end | 0x20) {
        case 'k': mul = 1024.0; break;
        case 'm': mul = 1048576.0; break;
        case 'g': mul = 1073741824.0; break;
        case 't': mul = 1099511627776.0; break;
        default: return -1;
        }
        end++;
        if (!strcasecmp(end, "ib") || !strcasecmp(end, "b"))
            end += strlen(end);
        if (*end)
            return -1;
    }
    if (huge || !isfinite(v))
        return -2;
    v *= mul;
    if (v >= 9.2e18)
        return -2;
    *out = (int64_t)v;
    return 0;
}

int tr_opt_parse_bool(const char *s, int *out)
{
    if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) {
        *out = 1;
        return 0;
    }
    if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) {
        *out = 0;
        return 0;
    }
    return -1;
}

static int out_of_bounds(const struct tr_opt *o, double v)
{
    return o->min <= o->max && (v < o->min || v > o->max);
}

static void bounds_error(const struct tr_opt *o, const char *src, const char *text)
{
    LOG_ERROR("%s%s: '%s' is outside [%g, %g]", src, o->name, text, o->min, o->max);
}

/* A number too large for its type: names the range the option accepts (its
 * bounds where it has them, else the type's). */
static void range_error(const struct tr_opt *o, const char *src, const char *text, double tmin, double tmax)
{
    double lo = tmin, hi = tmax;
    if (o->min <= o->max) {
        lo = TR_MAX(lo, o->min);
        hi = TR_MIN(hi, o->max);
    }
    LOG_ERROR("%s%s: '%s' is out of range (%.17g..%.17g)", src, o->name, text, lo, hi);
}

/* Sets one option from text. `src` is "--" for the command line, "TR_" style
 * otherwise (used only in messages). */
static enum tr_status opt_set(struct tr_opt *o, const char *text, const char *src)
{
    char *end;
    switch (o->type) {
    case TR_OPT_BOOL: {
        int b;
        if (tr_opt_parse_bool(text, &b) != 0) {
            LOG_ERROR("%s%s: '%s' is not a boolean", src, o->name, text);
            LOG_HINT("use --%s or --no_%s", o->name, o->name);
            return TR_ERR_ARG;
        }
        *(int *)o->dst = b;
        return TR_OK;
    }
    case TR_OPT_INT:
    case TR_OPT_INT64: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        const double tmin = o->type == TR_OPT_INT ? (double)INT32_MIN : (double)INT64_MIN;
        const double tmax = o->type == TR_OPT_INT ? (double)INT32_MAX : 9223372036854775807.0;
        if (end != text && !*end && errno == ERANGE) {
            range_error(o, src, text, tmin, tmax);
            return TR_ERR_ARG;
        }
        if (end == text || *end || errno) {
            LOG_ERROR("%s%s: '%s' is not an integer", src, o->name, text);
            return TR_ERR_ARG;
        }
        if (o->type == TR_OPT_INT && (v > INT32_MAX || v < INT32_MIN)) {
            range_error(o, src, text, tmin, tmax);
            return TR_ERR_ARG;
        }
        if (out_of_bounds(o, (double)v)) {
            bounds_error(o, src, text);
            return TR_ERR_ARG;
        }
        if (o->type == TR_OPT_INT)
            *(int *)o->dst = (int)v;
        else
            *(int64_t *)o->dst = v;
        return TR_OK;
    }
    case TR_OPT_BYTES: {
        int64_t v;
        int bad = tr_opt_parse_bytes(text, &v);
        if (bad == -2) {
            LOG_ERROR("%s%s: '%s' is too large (at most %lldT)", src, o->name, text,
                      (long long)((o->min <= o->max ? TR_MIN(o->max, 9.2e18) : 9.2e18) / 1099511627776.0));
            return TR_ERR_ARG;
        }
        if (bad != 0) {
            LOG_ERROR("%s%s: '%s' is not a size", src, o->name, text);
            LOG_HINT("sizes look like 73G, 512M, 64K or 1048576 (bytes; K, M, G, T are powers of 1024)");
            return TR_ERR_ARG;
        }
        if (out_of_bounds(o, (double)v)) {
            bounds_error(o, src, text);
            return TR_ERR_ARG;
        }
        *(int64_t *)o->dst = v;
        return TR_OK;
    }
    case TR_OPT_DOUBLE: {
        errno = 0;
        double v = strtod(text, &end);
        if (end != text && !*end && errno == ERANGE && fabs(v) > 1.0) {
            if (o->min <= o->max)
                range_error(o, src, text, o->min, o->max);
            else
                LOG_ERROR("%s%s: '%s' is out of range (too large for a double)", src, o->name, text);
            return TR_ERR_ARG;
        }
        if (end != text && !*end && errno == ERANGE) /* underflow: the nearest double is fine */
            errno = 0;
        if (end == text || *end || errno || !isfinite(v)) {
            LOG_ERROR("%s%s: '%s' is not a finite number", src, o->name, text);
            return TR_ERR_ARG;
        }
        if (out_of_bounds(o, v)) {
            bounds_error(o, src, text);
            return TR_ERR_ARG;
        }
        *(double *)o->dst = v;
        return TR_OK;
    }
    case TR_OPT_PATH:
        if (strlen(text) > TR_OPT_PATH_MAX) {
            LOG_ERROR("%s%s: too long (%zu bytes; at most %d)", src, o->name, strlen(text), TR_OPT_PATH_MAX);
            LOG_HINT("use a shorter path, e.g. relative to the working directory or through a symbolic link");
            return TR_ERR_ARG;
        }
        /* fall through */
    case TR_OPT_STRING: {
        char *d = tr_strdup(text);
        if (!d)
            return TR_ERR_NOMEM;
        tr_free(*(char **)o->dst);
        *(char **)o->dst = d;
        return TR_OK;
    }
    case TR_OPT_ENUM:
        for (int i = 0; o->choices[i]; i++) {
            if (!strcmp(o->choices[i], text)) {
                *(int *)o->dst = i;
                return TR_OK;
            }
        }
        {
            char list[256] = "";
            for (int i = 0; o->choices[i]; i++) {
                if (i)
                    strncat(list, "|", sizeof list - strlen(list) - 1);
                strncat(list, o->choices[i], sizeof list - strlen(list) - 1);
            }
            LOG_ERROR("%s%s: '%s' is not one of %s", src, o->name, text, list);
        }
        return TR_ERR_ARG;
    case TR_OPT_INT_LIST: {
        struct tr_i64_list l;
        enum tr_status rc = tr_opt_parse_i64_list(text, &l);
        if (rc == TR_ERR_RANGE) {
            LOG_ERROR("%s%s: '%.64s%s' is out of range (numbers fit in 64 bits, at most a million entries)", src,
                      o->name, text, strlen(text) > 64 ? "..." : "");
            return TR_ERR_ARG;
        }
        if (rc == TR_ERR_ARG) {
            LOG_ERROR("%s%s: '%s' is not a comma-separated list of integers", src, o->name, text);
            LOG_HINT("example: --%s 512,256,128 (or 26x1000 for 26 copies of 1000)", o->name);
        }
        if (rc != TR_OK)
            return rc;
        for (int i = 0; i < l.n; i++) {
            if (out_of_bounds(o, (double)l.v[i])) {
                char b[32];
                snprintf(b, sizeof b, "%lld", (long long)l.v[i]);
                bounds_error(o, src, b);
                tr_free(l.v);
                return TR_ERR_ARG;
            }
        }
        struct tr_i64_list *dst = o->dst;
        tr_free(dst->v);
        *dst = l;
        return TR_OK;
    }
    case TR_OPT_END:
        break;
    }
    TR_BUG("bad option type %d", (int)o->type);
}

struct tr_opt *tr_opt_find(struct tr_opt *opts, const char *name)
{
    for (struct tr_opt *o = opts; o->type != TR_OPT_END; o++)
        if (!strcmp(o->name, name) || (o->alias && !strcmp(o->alias, name)))
            return o;
    return NULL;
}

int tr_opt_given(const struct tr_opt *opts, const char *name)
{
    for (const struct tr_opt *o = opts; o && o->type != TR_OPT_END; o++)
        if (!strcmp(o->name, name))
            return o->set_by;
    return 0;
}

void tr_opt_source(const struct tr_opt *o, char *buf, size_t n)
{
    if (o->set_by != 1) {
        snprintf(buf, n, "--%s", o->name);
        return;
    }
    size_t k = (size_t)snprintf(buf, n, "TR_");
    for (const char *p = o->name; *p && k + 1 < n; p++)
        buf[k++] = (char)toupper((unsigned char)*p);
    if (k < n)
        buf[k] = '\0';
}

enum tr_status tr_opt_exclusive(const struct tr_opt *opts, const char *a, const char *b, const char *hint)
{
    const struct tr_opt *oa = NULL, *ob = NULL;
    for (const struct tr_opt *o = opts; o && o->type != TR_OPT_END; o++) {
        if (!strcmp(o->name, a))
            oa = o;
        if (!strcmp(o->name, b))
            ob = o;
    }
    TR_ASSERT(oa && ob); /* a table without them: a programming error */
    if (!oa->set_by || !ob->set_by)
        return TR_OK;
    char na[160], nb[160];
    tr_opt_source(oa, na, sizeof na);
    tr_opt_source(ob, nb, sizeof nb);
    LOG_ERROR("%s and %s cannot be used together", na, nb);
    if (hint)
        LOG_HINT("%s", hint);
    return TR_ERR_ARG;
}

/* Canonicalises "--batch-size" to "batch_size" into buf; returns buf. */
static char *canon(const char *arg, size_t len, char *buf, size_t n)
{
    if (len >= n)
        len = n - 1;
    for (size_t i = 0; i < len; i++)
        buf[i] = arg[i] == '-' ? '_' : arg[i];
    buf[len] = '\0';
    return buf;
}

enum tr_status tr_opt_parse(struct tr_opt *opts, int argc, char **argv, int *rest, int *want)
{
    *want = 0;
    for (struct tr_opt *o = opts; o->type != TR_OPT_END; o++) {
        o->set_by = 0;
        if (o->type == TR_OPT_STRING || o->type == TR_OPT_PATH)
            *(char **)o->dst = NULL;
        if (o->type == TR_OPT_INT_LIST)
            *(struct tr_i64_list *)o->dst = (struct tr_i64_list){0};
        if (o->def)
            TR_CHECK(opt_set(o, o->def, "default of --"));
        else if (o->type == TR_OPT_BOOL || o->type == TR_OPT_INT || o->type == TR_OPT_ENUM)
            *(int *)o->dst = 0;
        else if (o->type == TR_OPT_INT64 || o->type == TR_OPT_BYTES)
            *(int64_t *)o->dst = 0;
        else if (o->type == TR_OPT_DOUBLE)
            *(double *)o->dst = 0.0;
    }
    for (struct tr_opt *o = opts; o->type != TR_OPT_END; o++) {
        char env[128] = "TR_";
        size_t k = 3;
        for (const char *p = o->name; *p && k < sizeof env - 1; p++)
            env[k++] = (char)toupper((unsigned char)*p);
        env[k] = '\0';
        /* the test harness and the scripts export these for the source tree and the
         * build: they never set an option (terarec-ckpt's --root) */
        if (!strcmp(env, "TR_ROOT") || !strcmp(env, "TR_BUILD") || !strcmp(env, "TR_BIN"))
            continue;
        const char *v = getenv(env);
        if (v) {
            char src[140];
            snprintf(src, sizeof src, "environment %s for --", env);
            TR_CHECK(opt_set(o, v, src));
            o->set_by = 1;
            LOG_INFO(INIT, "%s set by environment to '%s'", env, v);
        }
    }
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            *want |= TR_OPT_WANT_HELP;
            continue;
        }
        if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
            *want |= TR_OPT_WANT_VERSION;
            continue;
        }
        if (!strcmp(a, "--parsable")) {
            *want |= TR_OPT_WANT_PARSABLE;
            continue;
        }
        if (a[0] != '-' || a[1] != '-' || a[2] == '\0') {
            if (rest)
                break;
            LOG_ERROR("unexpected argument '%s'", a);
            LOG_HINT("options start with --; see --help");
            return TR_ERR_ARG;
        }
        const char *body = a + 2;
        const char *eq = strchr(body, '=');
        char name[128];
        canon(body, eq ? (size_t)(eq - body) : strlen(body), name, sizeof name);
        struct tr_opt *o = tr_opt_find(opts, name);
        const char *val = eq ? eq + 1 : NULL;
        if (!o) {
            /* --no_x / --nox for booleans */
            const char *neg = NULL;
            if (!strncmp(name, "no_", 3))
                neg = name + 3;
            else if (!strncmp(name, "no", 2))
                neg = name + 2;
            struct tr_opt *b = neg ? tr_opt_find(opts, neg) : NULL;
            if (b && b->type == TR_OPT_BOOL && !val) {
                *(int *)b->dst = 0;
                b->set_by = 2;
                continue;
            }
            if (b && b->type == TR_OPT_STRING && b->bare && !val) { /* an optional value: unset */
                tr_free(*(char **)b->dst);
                *(char **)b->dst = NULL;
                b->set_by = 2;
                continue;
            }
            LOG_ERROR("unknown option '--%s'", name);
            LOG_HINT("run with --help to list the options");
            return TR_ERR_ARG;
        }
        if (!val) {
            if (o->type == TR_OPT_BOOL) {
                val = "true";
            } else if ((o->type == TR_OPT_ENUM || o->type == TR_OPT_STRING) && o->bare &&
                       !(i + 1 < argc && argv[i + 1][0] != '-')) {
                val = o->bare;
            } else if (i + 1 < argc) {
                val = argv[++i];
            } else {
                LOG_ERROR("--%s: missing value", o->name);
                return TR_ERR_ARG;
            }
        }
        TR_CHECK(opt_set(o, val, "--"));
        o->set_by = 2;
    }
    if (rest)
        *rest = i;
    else if (i < argc) {
        LOG_ERROR("unexpected argument '%s'", argv[i]);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

void tr_opt_release(struct tr_opt *opts)
{
    for (struct tr_opt *o = opts; o->type != TR_OPT_END; o++) {
        if (o->type == TR_OPT_STRING || o->type == TR_OPT_PATH) {
            tr_free(*(char **)o->dst);
            *(char **)o->dst = NULL;
        } else if (o->type == TR_OPT_INT_LIST) {
            struct tr_i64_list *l = o->dst;
            tr_free(l->v);
            l->v = NULL;
            l->n = 0;
        }
    }
}

void tr_opt_format(const struct tr_opt *o, char *buf, size_t n)
{
    if (n == 0)
        return;
    buf[0] = '\0';
    switch (o->type) {
    case TR_OPT_BOOL: snprintf(buf, n, "%s", *(int *)o->dst ? "true" : "false"); break;
    case TR_OPT_INT: snprintf(buf, n, "%d", *(int *)o->dst); break;
    case TR_OPT_INT64:
    case TR_OPT_BYTES: snprintf(buf, n, "%lld", (long long)*(int64_t *)o->dst); break;
    case TR_OPT_DOUBLE: {
        /* the shortest text that reads back the same double: 1e-07, not
         * 9.9999999999999995e-08 (what the history stores and the workers parse) */
        const double v = *(double *)o->dst;
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, n, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
        break;
    }
    case TR_OPT_STRING:
    case TR_OPT_PATH: {
        const char *s = *(char **)o->dst;
        snprintf(buf, n, "%s", s ? s : "");
        break;
    }
    case TR_OPT_ENUM: snprintf(buf, n, "%s", o->choices[*(int *)o->dst]); break;
    case TR_OPT_INT_LIST: {
        const struct tr_i64_list *l = o->dst;
        size_t k = 0;
        for (int i = 0; i < l->n && k + 24 < n; i++)
            k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)l->v[i]);
        break;
    }
    case TR_OPT_END: break;
    }
}

void tr_opt_print_help(const struct tr_opt *opts, const char *usage, FILE *fp)
{
    fprintf(fp, "%s\n\noptions (underscores or dashes; booleans also take --no_NAME):\n", usage);
    for (const struct tr_opt *o = opts; o->type != TR_OPT_END; o++) {
        const char *arg = "";
        switch (o->type) {
        case TR_OPT_BOOL: arg = ""; break;
        case TR_OPT_INT:
        case TR_OPT_INT64: arg = " N"; break;
        case TR_OPT_BYTES: arg = " SIZE"; break;
        case TR_OPT_DOUBLE: arg = " X"; break;
        case TR_OPT_STRING: arg = o->bare ? " [TEXT]" : " TEXT"; break;
        case TR_OPT_PATH: arg = " PATH"; break;
        case TR_OPT_ENUM: arg = o->bare ? " [CHOICE]" : " CHOICE"; break;
        case TR_OPT_INT_LIST: arg = " N,N,..."; break;
        case TR_OPT_END: break;
        }
        char head[96];
        snprintf(head, sizeof head, "--%s%s", o->name, arg);
        fprintf(fp, "  %-40s %s", head, o->help ? o->help : "");
        if (o->type == TR_OPT_ENUM) {
            fprintf(fp, " (");
            for (int i = 0; o->choices[i]; i++)
                fprintf(fp, "%s%s", i ? "|" : "", o->choices[i]);
            fprintf(fp, ")");
        }
        if (o->def && *o->def)
            fprintf(fp, " [default: %s]", o->def);
        if (o->alias)
            fprintf(fp, " (alias --%s)", o->alias);
        fputc('\n', fp);
    }
    fprintf(fp, "  %-40s %s\n", "--help", "print this help and exit");
    fprintf(fp, "  %-40s %s\n", "--version [--parsable]", "print version and features and exit");
    fprintf(fp, "\nevery option can also be set by the environment as TR_<NAME> (upper case);\n"
                "the command line wins over the environment.\n");
}
