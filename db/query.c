/* query.c: the reads of the run history shared by `terarec runs ...` (runs_*.c),
 * `terarec runs serve` (serve.c) and the launcher: the SQL functions their
 * queries call, registered by every open; the lookups of one run (db.h:
 * db_run_resolve, db_run_get, db_run_by_slurm_job); the --json builders
 * (db_json_*), which are also the server's /api/, and numbers printed without
 * float noise. The list of runs with its filters, columns and sort, and compare,
 * are query_runs.c's. It prints nothing and writes nothing: the tables for
 * people are runs_*.c's. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "query.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"

/* ---- SQL functions ------------------------------------------------------------------------ */

void db_fmt_time(double t, char *buf, size_t n)
{
    time_t s = (time_t)t;
    struct tm tm;
    if (!isfinite(t) || t <= 0 || !localtime_r(&s, &tm) || !strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, n, "-");
}

static void fmt_duration(double secs, char *buf, size_t n)
{
    if (!isfinite(secs) || secs < 0) {
        snprintf(buf, n, "-");
        return;
    }
    int64_t s = (int64_t)llround(secs);
    if (s >= 3600)
        snprintf(buf, n, "%" PRId64 "h%02dm", s / 3600, (int)(s / 60 % 60));
    else if (s >= 60)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)(s % 60));
    else
        snprintf(buf, n, "%ds", (int)s);
}

static const char *sig_name(int sig)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
                 {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
                 {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
                 {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
                 {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}};
    for (size_t i = 0; i < TR_ARRAY_SIZE(names); i++)
        if (names[i].sig == sig)
            return names[i].name;
    return NULL;
}

/* SQL: tr_time(t) local time text, tr_dur(start, end) "1h02m" (end NULL: until
 * now), tr_ended(exit_code, signal[, end_time]) "exit 0" / "SIGKILL" / "running"
 * ("ended (exit unknown)" with neither but an end). */
static void sql_time(sqlite3_context *c, int n, sqlite3_value **v)
{
    (void)n;
    char buf[32];
    if (sqlite3_value_type(v[0]) == SQLITE_NULL) {
        sqlite3_result_null(c);
        return;
    }
    db_fmt_time(sqlite3_value_double(v[0]), buf, sizeof buf);
    sqlite3_result_text(c, buf, -1, SQLITE_TRANSIENT);
}

static void sql_dur(sqlite3_context *c, int n, sqlite3_value **v)
{
    (void)n;
    char buf[32];
    if (sqlite3_value_type(v[0]) == SQLITE_NULL) {
        sqlite3_result_null(c);
        return;
    }
    double end = sqlite3_value_type(v[1]) == SQLITE_NULL ? (double)time(NULL) : sqlite3_value_double(v[1]);
    fmt_duration(end - sqlite3_value_double(v[0]), buf, sizeof buf);
    sqlite3_result_text(c, buf, -1, SQLITE_TRANSIENT);
}

static void sql_ended(sqlite3_context *c, int n, sqlite3_value **v)
{
    char buf[32];
    if (sqlite3_value_type(v[1]) != SQLITE_NULL) {
        int sig = sqlite3_value_int(v[1]);
        const char *name = sig_name(sig);
        if (name)
            snprintf(buf, sizeof buf, "%s", name);
        else
            snprintf(buf, sizeof buf, "signal %d", sig);
    } else if (sqlite3_value_type(v[0]) != SQLITE_NULL) {
        snprintf(buf, sizeof buf, "exit %d", sqlite3_value_int(v[0]));
    } else if (n > 2 && sqlite3_value_type(v[2]) != SQLITE_NULL) {
        snprintf(buf, sizeof buf, "ended (exit unknown)");
    } else {
        snprintf(buf, sizeof buf, "running");
    }
    sqlite3_result_text(c, buf, -1, SQLITE_TRANSIENT);
}

/* tr_num(x): x as a number (a number, or text that is one), else NULL. */
static void sql_num(sqlite3_context *c, int n, sqlite3_value **v)
{
    (void)n;
    double d;
    int t = sqlite3_value_type(v[0]);
    if (t == SQLITE_INTEGER || t == SQLITE_FLOAT)
        sqlite3_result_value(c, v[0]);
    else if (t == SQLITE_TEXT && db_num_text((const char *)sqlite3_value_text(v[0]), &d))
        sqlite3_result_double(c, d);
    else
        sqlite3_result_null(c);
}

/* tr_val(x): a config value for JSON: text that is a number becomes the number
 * (an integer when written as one), anything else stays. */
static void sql_val(sqlite3_context *c, int n, sqlite3_value **v)
{
    (void)n;
    double d;
    const char *s = (const char *)sqlite3_value_text(v[0]);
    if (sqlite3_value_type(v[0]) != SQLITE_TEXT || !db_num_text(s, &d))
        sqlite3_result_value(c, v[0]);
    else if (strpbrk(s, ".eE") || fabs(d) > 9e15)
        sqlite3_result_double(c, d);
    else
        sqlite3_result_int64(c, (sqlite3_int64)d);
}

/* tr_fmt(x): a value as a table shows it: numbers (or text that is one) without
 * float noise, the shortest text that reads back the same. */
static void sql_fmt(sqlite3_context *c, int n, sqlite3_value **v)
{
    (void)n;
    double d;
    char buf[40];
    int t = sqlite3_value_type(v[0]);
    if (t == SQLITE_FLOAT || (t == SQLITE_TEXT && db_num_text((const char *)sqlite3_value_text(v[0]), &d) &&
                              strpbrk((const char *)sqlite3_value_text(v[0]), ".eE"))) {
        db_fmt_real(t == SQLITE_FLOAT ? sqlite3_value_double(v[0]) : d, buf, sizeof buf);
        sqlite3_result_text(c, buf, -1, SQLITE_TRANSIENT);
    } else {
        sqlite3_result_value(c, v[0]);
    }
}

/* tr_size(nodes, workers): "2 nodes, 4 workers" (NULL when both are). */
static void sql_size(sqlite3_context *c, int n, sqlite3_value **v)
{
    (void)n;
    char buf[96];
    if (sqlite3_value_type(v[0]) == SQLITE_NULL && sqlite3_value_type(v[1]) == SQLITE_NULL) {
        sqlite3_result_null(c);
        return;
    }
    db_fmt_size(sqlite3_value_type(v[0]) == SQLITE_NULL ? -1 : sqlite3_value_int64(v[0]),
                sqlite3_value_type(v[1]) == SQLITE_NULL ? -1 : sqlite3_value_int64(v[1]), buf, sizeof buf);
    sqlite3_result_text(c, buf, -1, SQLITE_TRANSIENT);
}

void db_fmt_size(int64_t nodes, int64_t workers, char *buf, size_t n)
{
    char a[40] = "? nodes", b[40] = "? workers";
    if (nodes >= 0)
        snprintf(a, sizeof a, "%lld node%s", (long long)nodes, nodes == 1 ? "" : "s");
    if (workers >= 0)
        snprintf(b, sizeof b, "%lld worker%s", (long long)workers, workers == 1 ? "" : "s");
    snprintf(buf, n, "%s, %s", a, b);
}

enum tr_status db_sql_functions(struct db *db)
{
    sqlite3 *h = db_sqlite(db);
    const int det = SQLITE_UTF8 | SQLITE_DETERMINISTIC;
    if (sqlite3_create_function(h, "tr_time", 1, det, NULL, sql_time, NULL, NULL) ||
        sqlite3_create_function(h, "tr_dur", 2, SQLITE_UTF8, NULL, sql_dur, NULL, NULL) ||
        sqlite3_create_function(h, "tr_ended", 2, det, NULL, sql_ended, NULL, NULL) ||
        sqlite3_create_function(h, "tr_ended", 3, det, NULL, sql_ended, NULL, NULL) ||
        sqlite3_create_function(h, "tr_num", 1, det, NULL, sql_num, NULL, NULL) ||
        sqlite3_create_function(h, "tr_val", 1, det, NULL, sql_val, NULL, NULL) ||
        sqlite3_create_function(h, "tr_fmt", 1, det, NULL, sql_fmt, NULL, NULL) ||
        sqlite3_create_function(h, "tr_size", 2, det, NULL, sql_size, NULL, NULL))
        return db_sql_error(db, "cannot register functions");
    return TR_OK;
}

/* ---- one run ------------------------------------------------------------------------------ */

/* The first column of the first row of a query, tr_strdup'd, in *out (NULL when
 * no row or SQL NULL); *found says whether there was a row. */
static enum tr_status query_text(struct db *db, char **out, int *found, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, types);
    enum tr_status rc = db_preparev(db, &st, sql, types, ap);
    va_end(ap);
    *out = NULL;
    *found = 0;
    if (rc != TR_OK)
        return rc;
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        *found = 1;
        const char *t = (const char *)sqlite3_column_text(st, 0);
        if (t && !(*out = tr_strdup(t)))
            rc = TR_ERR_NOMEM;
    } else if (s != SQLITE_DONE) {
        rc = db_sql_error(db, "cannot read");
    }
    sqlite3_finalize(st);
    return rc;
}

enum tr_status db_run_by_slurm_job(struct db *db, const char *job_id, char **id)
{
    int found = 0;
    TR_CHECK(query_text(db, id, &found,
                        "SELECT id FROM runs WHERE slurm_job_id = ? ORDER BY start_time DESC, rowid DESC LIMIT 1",
                        "t", job_id));
    return found ? TR_OK : TR_ERR_NOT_FOUND;
}

/* Up to two ids of a query's rows, in a[0], a[1] (tr_strdup'd); the count in *n. */
static enum tr_status two_ids(struct db *db, const char *sql, const char *what, char *a[2], int *n)
{
    sqlite3_stmt *st = NULL;
    TR_CHECK(db_prepare(db, &st, sql, "t", what));
    enum tr_status rc = TR_OK;
    int s;
    *n = 0;
    while (*n < 2 && (s = sqlite3_step(st)) == SQLITE_ROW) {
        if (!(a[*n] = tr_strdup((const char *)sqlite3_column_text(st, 0)))) {
            rc = TR_ERR_NOMEM;
            break;
        }
        (*n)++;
    }
    if (rc == TR_OK && *n < 2 && s != SQLITE_DONE)
        rc = db_sql_error(db, "cannot read the runs");
    sqlite3_finalize(st);
    return rc;
}

enum tr_status db_run_resolve(struct db *db, const char *what, char **id)
{
    static const char *const queries[] = {
        "SELECT id FROM runs WHERE id = ?1",
        "SELECT id FROM runs WHERE name = ?1 ORDER BY start_time DESC, rowid DESC LIMIT 2",
        "SELECT id FROM runs WHERE substr(id, 1, length(?1)) = ?1 ORDER BY start_time DESC, rowid DESC LIMIT 2",
    };
    static const char *const kinds[] = {"id", "name", "id prefix"};
    *id = NULL;
    if (!what || !*what) {
        LOG_ERROR("an empty run name");
        LOG_HINT("run 'terarec runs list --db %s' to see the runs", db->path);
        return TR_ERR_ARG;
    }
    for (size_t q = 0; q < TR_ARRAY_SIZE(queries); q++) {
        char *a[2] = {NULL, NULL};
        int n = 0;
        enum tr_status rc = two_ids(db, queries[q], what, a, &n);
        if (rc == TR_OK && n == 2) {
            LOG_ERROR("run '%s' is ambiguous: the %s of runs '%s' and '%s'", what, kinds[q], a[0], a[1]);
            LOG_HINT("give more of the id; 'terarec runs list --db %s' shows them", db->path);
            rc = TR_ERR_ARG;
        }
        if (rc == TR_OK && n == 1) {
            *id = a[0];
            return TR_OK;
        }
        tr_free(a[0]);
        tr_free(a[1]);
        if (rc != TR_OK)
            return rc;
    }
    LOG_ERROR("no run '%s' in '%s'", what, db->path);
    LOG_HINT("run 'terarec runs list --db %s' to see the runs", db->path);
    return TR_ERR_NOT_FOUND;
}

enum tr_status db_run_get(struct db *db, const char *id, const char *column, char **value)
{
    *value = NULL;
    size_t i = 0;
    while (i < DB_RUN_NCOLUMNS && strcmp(db_run_columns[i], column) != 0)
        i++;
    if (i == DB_RUN_NCOLUMNS) {
        LOG_ERROR("a run has no field '%s'", column);
        return TR_ERR_ARG;
    }
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT %s FROM runs WHERE id = ?", db_run_columns[i]);
    int found = 0;
    TR_CHECK(query_text(db, value, &found, sql, "t", id));
    return found ? TR_OK : TR_ERR_NOT_FOUND;
}

/* ---- --json ---------------------------------------------------------------------------------- */

/* Columns holding JSON text come out as JSON values. */
static int json_column(const char *name)
{
    return !strcmp(name, "config") || !strcmp(name, "final_metrics") || !strcmp(name, "data") || !strcmp(name, "tags");
}

json_t *db_cell_json(sqlite3_stmt *st, int c)
{
    switch (sqlite3_column_type(st, c)) {
    case SQLITE_NULL:
        return json_null();
    case SQLITE_INTEGER:
        return json_integer((json_int_t)sqlite3_column_int64(st, c));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(st, c));
    default: {
        const char *s = (const char *)sqlite3_column_text(st, c);
        if (json_column(sqlite3_column_name(st, c))) {
            json_t *j = json_loads(s, JSON_DECODE_ANY, NULL);
            if (j)
                return j;
        }
        return json_string(s);
    }
    }
}

/* Steps st to its end: an array of objects, one per row, in *out. Finalizes st. */
static enum tr_status stmt_json(struct db *db, sqlite3_stmt *st, json_t **out)
{
    enum tr_status rc = TR_OK;
    json_t *a = json_array();
    int s;
    while (a && (s = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *o = json_object();
        for (int c = 0; o && c < sqlite3_column_count(st); c++)
            json_object_set_new(o, sqlite3_column_name(st, c), db_cell_json(st, c));
        if (!o || json_array_append_new(a, o) != 0) {
            rc = TR_ERR_NOMEM;
            break;
        }
    }
    if (!a)
        rc = TR_ERR_NOMEM;
    else if (rc == TR_OK && s != SQLITE_DONE)
        rc = db_sql_error(db, "cannot read");
    sqlite3_finalize(st);
    if (rc != TR_OK) {
        json_decref(a);
        a = NULL;
    }
    *out = a;
    return rc;
}

enum tr_status db_query_json(struct db *db, json_t **out, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, types);
    enum tr_status rc = db_preparev(db, &st, sql, types, ap);
    va_end(ap);
    *out = NULL;
    TR_CHECK(rc);
    return stmt_json(db, st, out);
}

const char db_sql_last_metrics[] = DB_SQL_LAST_METRICS;
#define Q_METRICS "SELECT step, name, value, time FROM metrics WHERE run = ? ORDER BY step, name, rowid"
#define Q_EVALS "SELECT step, auc, logloss, samples, time FROM evals WHERE run = ? ORDER BY step, rowid"
#define Q_CKPTS "SELECT step, manifest_url, bytes, stall_s, time FROM checkpoints WHERE run = ? ORDER BY step, rowid"
#define Q_PROCS                                                                                        \
    "SELECT attempt, rank, host, pid, exit_code, signal, tr_ended(exit_code, signal, " DB_SQL_PROC_END ") AS ended," \
    " start_time, " DB_SQL_PROC_END " AS end_time FROM processes p WHERE run = ?1 ORDER BY attempt, rank"
#define Q_EVENTS "SELECT time, kind, data FROM events WHERE run = ? ORDER BY time, rowid"
#define Q_SYS                                                                                          \
    "SELECT rank, time, step, cpu_pct, rss_bytes, gpu_util, gpu_mem_bytes FROM sysmetrics WHERE run = ?" \
    " ORDER BY rank, time, rowid"

enum tr_status db_json_run(struct db *db, const char *id, int all_metrics, json_t **out)
{
    static const char *const keys[] = {"metrics", "evals",  "checkpoints", "processes", "events", "attempts",
                                       "sysmetrics_summary", "sysmetrics"};
    const char *queries[] = {all_metrics ? Q_METRICS : DB_SQL_LAST_METRICS, Q_EVALS, Q_CKPTS, Q_PROCS, Q_EVENTS,
                             DB_SQL_ATTEMPTS, DB_SQL_SYS_SUMMARY, Q_SYS};
    const size_t nq = TR_ARRAY_SIZE(keys) - (all_metrics ? 0 : 1);
    enum tr_status rc = TR_OK;
    json_t *o = json_object(), *runs = NULL, *t = NULL;
    *out = NULL;
    if (!o)
        return TR_ERR_NOMEM;
    TR_CHECK_GOTO(db_query_json(db, &runs, DB_SQL_RUN, "t", id), rc, fail);
    json_t *run = json_array_get(runs, 0);
    if (json_is_object(json_object_get(run, "config")))
        db_config_clean(json_object_get(run, "config"));
    json_object_set(o, "run", run);
    for (size_t i = 0; i < nq; i++) {
        if (i >= 6 && db->version < 3) { /* an older file read as it is: no system metrics */
            json_object_set_new(o, keys[i], json_array());
            continue;
        }
        TR_CHECK_GOTO(db_query_json(db, &t, queries[i], "t", id), rc, fail);
        json_object_set_new(o, i == 0 && !all_metrics ? "last_metrics" : keys[i], t);
        t = NULL;
    }
    json_decref(runs);
    *out = o;
    return TR_OK;
fail:
    json_decref(runs);
    json_decref(o);
    return rc;
}

enum tr_status db_json_sysmetrics(struct db *db, const char *id, int64_t after, json_t **out)
{
    if (db->version < 3) { /* an older file read as it is */
        *out = json_array();
        return *out ? TR_OK : TR_ERR_NOMEM;
    }
    return db_query_json(db, out,
                         "SELECT rowid AS seq, rank, time, step, cpu_pct, rss_bytes, gpu_util, gpu_mem_bytes"
                         " FROM sysmetrics WHERE run = ?1 AND rowid > ?2 ORDER BY rowid",
                         "ti", id, after < 0 ? (int64_t)-1 : after);
}

enum tr_status db_json_metrics(struct db *db, const char *id, const char *name, int64_t after, json_t **out)
{
    return db_query_json(db, out,
                      "SELECT step, name, value, time FROM metrics WHERE run = ?1 AND (?2 IS NULL OR name = ?2)"
                      " AND step > ?3 ORDER BY step, name, rowid",
                      "tti", id, name, after < 0 ? INT64_MIN : after);
}

/* ---- numbers without float noise ------------------------------------------------------------ */

void db_fmt_real(double v, char *buf, size_t n)
{
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if (strtod(buf, NULL) == v || !isfinite(v))
            break;
    }
}

int db_num_text(const char *s, double *v)
{
    if (!s || !*s || strspn(s, "0123456789+-.eE") != strlen(s))
        return 0;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*end || end == s || !isfinite(d))
        return 0;
    if (v)
        *v = d;
    return 1;
}

/* A config value as people read it: a number written as text with float noise
 * ("9.9999999999999995e-08") in its shortest form ("1e-07"); NULL: keep it. */
static json_t *clean_value(const json_t *v)
{
    double d;
    const char *s = json_string_value(v);
    if (!s || !strpbrk(s, ".eE") || !db_num_text(s, &d))
        return NULL;
    char buf[40];
    db_fmt_real(d, buf, sizeof buf);
    return strcmp(buf, s) ? json_string(buf) : NULL;
}

void db_config_clean(json_t *cfg)
{
    void *it = json_object_iter(cfg);
    while (it) {
        json_t *c = clean_value(json_object_iter_value(it));
        if (c)
            json_object_iter_set_new(cfg, it, c);
        it = json_object_iter_next(cfg, it);
    }
}

/* The reals of j (a deep copy's) become the strings "<mark>N", their text in
 * num[N] (shortest round trip); *bad = 1 when a string of j holds mark already. */
static void mark_reals(json_t *j, char mark, char (*num)[40], size_t *n, size_t cap, int *bad)
{
    if (json_is_string(j)) {
        if (memchr(json_string_value(j), mark, json_string_length(j)))
            *bad = 1;
        return;
    }
    int obj = json_is_object(j);
    void *it = obj ? json_object_iter(j) : NULL;
    for (size_t i = 0; obj ? it != NULL : i < json_array_size(j); i++) {
        json_t *v = obj ? json_object_iter_value(it) : json_array_get(j, i);
        if (json_is_real(v) && *n < cap) {
            char tag[24];
            db_fmt_real(json_real_value(v), num[*n], sizeof num[0]);
            snprintf(tag, sizeof tag, "%c%zu", mark, (*n)++);
            if (obj)
                json_object_iter_set_new(j, it, json_string(tag));
            else
                json_array_set_new(j, i, json_string(tag));
        } else {
            mark_reals(v, mark, num, n, cap, bad);
        }
        if (obj)
            it = json_object_iter_next(j, it);
    }
}

char *db_json_dumps(const json_t *j, size_t flags)
{
    if (!json_is_object(j) && !json_is_array(j))
        return json_dumps(j, flags | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    /* how many reals at most: every value */
    char *probe = json_dumps(j, JSON_COMPACT);
    if (!probe)
        return NULL;
    size_t cap = 1;
    for (const char *p = probe; *p; p++)
        cap += *p == ',' || *p == '[' || *p == ':';
    free(probe);
    char(*num)[40] = tr_malloc(cap * sizeof *num);
    json_t *c = NULL;
    char *d = NULL, *s = NULL, mark = 1;
    size_t n = 0;
    if (!num)
        return NULL;
    /* a control character no string holds marks the reals */
    for (; mark < 32; mark++) {
        int bad = 0;
        n = 0;
        if (!(c = json_deep_copy(j)))
            goto exit;
        mark_reals(c, mark, num, &n, cap, &bad);
        if (!bad)
            break;
        json_decref(c);
        c = NULL;
    }
    if (!c) { /* every one is in some string: jansson's way */
        s = json_dumps(j, flags | JSON_REAL_PRECISION(17));
        goto exit;
    }
    if (!(d = json_dumps(c, flags)) || !(s = malloc(strlen(d) + 1 + n * 48)))
        goto exit;
    /* each "\u00MMN" (with its quotes) becomes its number */
    char esc[8];
    snprintf(esc, sizeof esc, "\"\\u%04x", (unsigned)mark);
    char ESC[8];
    snprintf(ESC, sizeof ESC, "\"\\u%04X", (unsigned)mark);
    size_t k = 0;
    for (const char *p = d; *p;) {
        if ((!strncmp(p, esc, 7) || !strncmp(p, ESC, 7)) && isdigit((unsigned char)p[7])) {
            char *end;
            unsigned long i = strtoul(p + 7, &end, 10);
            if (*end == '"' && i < n) {
                const char *t = num[i];
                k += (size_t)sprintf(s + k, "%s%s", t, strpbrk(t, ".eEn") ? "" : ".0");
                p = end + 1;
                continue;
            }
        }
        s[k++] = *p++;
    }
    s[k] = '\0';
exit:
    free(d);
    tr_free(num);
    json_decref(c);
    return s;
}
