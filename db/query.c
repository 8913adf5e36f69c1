/* query.c: the reads of the run history shared by `terarec runs ...` (runs_*.c),
 * `terarec runs serve` (serve.c) and the launcher: the SQL functions their
 * queries call, registered by every open; the lookups of one run (db.h:
 * db_run_resolve, db_run_get, db_run_by_slurm_job); and the --json builders
 * (db_json_*), which are also the server's /api/. It prints nothing and writes
 * nothing: the tables for people are runs_*.c's. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "query.h"

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
 * now), tr_ended(exit_code, signal) "exit 0" / "SIGKILL" / "running". */
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
    (void)n;
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
    } else {
        snprintf(buf, sizeof buf, "running");
    }
    sqlite3_result_text(c, buf, -1, SQLITE_TRANSIENT);
}

enum tr_status db_sql_functions(struct db *db)
{
    sqlite3 *h = db_sqlite(db);
    if (sqlite3_create_function(h, "tr_time", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_time, NULL, NULL) ||
        sqlite3_create_function(h, "tr_dur", 2, SQLITE_UTF8, NULL, sql_dur, NULL, NULL) ||
        sqlite3_create_function(h, "tr_ended", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_ended, NULL, NULL))
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
    return !strcmp(name, "config") || !strcmp(name, "final_metrics") || !strcmp(name, "data");
}

static json_t *cell_json(sqlite3_stmt *st, int c)
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
            json_object_set_new(o, sqlite3_column_name(st, c), cell_json(st, c));
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

enum tr_status db_json_runs(struct db *db, const char *status, const char *name, int64_t limit, json_t **out)
{
    static const char sql[] =
        "SELECT r.id, r.name, r.status, r.start_time, r.end_time,"
        " coalesce(r.end_time, CAST(strftime('%s', 'now') AS REAL)) - r.start_time AS duration_s,"
        " (SELECT max(step) FROM metrics WHERE run = r.id) AS steps, " DB_SQL_LAST_LOSS " AS last_loss,"
        " (SELECT max(auc) FROM evals WHERE run = r.id) AS best_auc,"
        " (SELECT value FROM metrics m WHERE m.run = r.id AND m.name = 'samples_per_s'"
        "  ORDER BY step DESC, m.rowid DESC LIMIT 1) AS samples_per_s, r.nodes, r.workers, r.hosts,"
        " r.slurm_job_id, r.restarts, r.resumed_from" DB_SQL_LIST_WHERE;
    return db_query_json(db, out, sql, "tit", status, limit, name);
}

const char db_sql_last_metrics[] = DB_SQL_LAST_METRICS;
#define Q_METRICS "SELECT step, name, value, time FROM metrics WHERE run = ? ORDER BY step, name, rowid"
#define Q_EVALS "SELECT step, auc, logloss, samples, time FROM evals WHERE run = ? ORDER BY step, rowid"
#define Q_CKPTS "SELECT step, manifest_url, bytes, stall_s, time FROM checkpoints WHERE run = ? ORDER BY step, rowid"
#define Q_PROCS                                                                                        \
    "SELECT attempt, rank, host, pid, exit_code, signal, tr_ended(exit_code, signal) AS ended, start_time," \
    " end_time FROM processes WHERE run = ? ORDER BY attempt, rank"
#define Q_EVENTS "SELECT time, kind, data FROM events WHERE run = ? ORDER BY time, rowid"
#define Q_SYS                                                                                          \
    "SELECT rank, time, step, cpu_pct, rss_bytes, gpu_util, gpu_mem_bytes FROM sysmetrics WHERE run = ?" \
    " ORDER BY rank, time, rowid"

enum tr_status db_json_run(struct db *db, const char *id, int all_metrics, json_t **out)
{
    static const char *const keys[] = {"metrics", "evals",  "checkpoints", "processes", "events",
                                       "sysmetrics_summary", "sysmetrics"};
    const char *queries[] = {all_metrics ? Q_METRICS : DB_SQL_LAST_METRICS, Q_EVALS, Q_CKPTS, Q_PROCS, Q_EVENTS,
                             DB_SQL_SYS_SUMMARY, Q_SYS};
    const size_t nq = TR_ARRAY_SIZE(keys) - (all_metrics ? 0 : 1);
    enum tr_status rc = TR_OK;
    json_t *o = json_object(), *runs = NULL, *t = NULL;
    *out = NULL;
    if (!o)
        return TR_ERR_NOMEM;
    TR_CHECK_GOTO(db_query_json(db, &runs, DB_SQL_RUN, "t", id), rc, fail);
    json_object_set(o, "run", json_array_get(runs, 0));
    for (size_t i = 0; i < nq; i++) {
        if (i >= 5 && db->version < 3) { /* an older file read as it is: no system metrics */
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
