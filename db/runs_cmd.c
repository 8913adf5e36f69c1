/* runs_cmd.c: `terarec runs list | show | metrics | compare | export | rm | plot`
 * over the run history (db.h): tables for people, --json for programs, CSV and
 * JSON exports written atomically, charts through plot.c, and `serve` (serve.c).
 * Only `rm` opens it for writing (one transaction; --checkpoints also removes the
 * runs' checkpoint directories); the others open it read-only (db_open_readonly);
 * nothing here creates a history that is not there. The --json builders (db_json_*)
 * and the SQL they share with the web server are query.c's. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../common/param.h"
#include "db_internal.h"
#include "query.h"

enum { FMT_CSV = 0, FMT_JSON = 1 };
static const char *const format_choices[] = {"csv", "json", NULL};

struct runs_cfg {
    char *db, *status, *name, *output, *metric, *title, *listen, *token_file;
    int json, limit, format, width, height, checkpoints, request_timeout;
};

struct ctx {
    struct runs_cfg *cfg;
    struct db *db;
    char **args; /* the positional arguments (runs) */
    int nargs;
};

/* Which subcommands take an option (bits of subs[] below). */
enum { S_LIST = 1, S_SHOW = 2, S_METRICS = 4, S_COMPARE = 8, S_EXPORT = 16, S_RM = 32, S_PLOT = 64, S_SERVE = 128,
       S_ALL = 255 };

static const unsigned opt_subs[] = {S_ALL,  S_LIST | S_SHOW | S_METRICS | S_COMPARE, S_LIST, S_LIST, S_METRICS,
                                    S_EXPORT, S_EXPORT | S_PLOT, S_PLOT, S_PLOT, S_PLOT, S_PLOT,
                                    S_SERVE,  S_SERVE, S_RM, S_SERVE};

static void all_opts(struct runs_cfg *c, struct tr_opt *o)
{
    const struct tr_opt opts[] = {
        {"db", TR_OPT_PATH, &c->db, NULL, "the run history (default: $TR_DB, else ~/.local/share/terarec/runs.db)",
         1, 0, NULL, NULL, 0, NULL},
        {"json", TR_OPT_BOOL, &c->json, "false", "print JSON instead of a table", 1, 0, NULL, NULL, 0, NULL},
        {"status", TR_OPT_STRING, &c->status, NULL,
         "only runs with this status (running, completed, failed, hung, preempted, cancelled, lost)",
         1, 0, NULL, NULL, 0, NULL},
        {"limit", TR_OPT_INT, &c->limit, "20", "at most this many runs, newest first (0: all)", 0, 1e9, NULL, NULL,
         0, NULL},
        {"name", TR_OPT_STRING, &c->name, NULL, "only the metric of this name (loss, learning_rate, ...)", 1, 0,
         NULL, NULL, 0, NULL},
        {"format", TR_OPT_ENUM, &c->format, "csv", "csv (step,name,value rows) or json (the run and its tables)", 1,
         0, format_choices, NULL, 0, NULL},
        {"output", TR_OPT_PATH, &c->output, NULL, "the file to write (-o; export: default stdout)", 1, 0, NULL, NULL,
         0, NULL},
        {"metric", TR_OPT_STRING, &c->metric, "loss", "the metric to draw: loss, auc, logloss or any metric name", 1,
         0, NULL, NULL, 0, NULL},
        {"title", TR_OPT_STRING, &c->title, NULL, "the chart's title (default: the metric)", 1, 0, NULL, NULL, 0, NULL},
        {"width", TR_OPT_INT, &c->width, "900", "chart width in pixels", 200, 10000, NULL, NULL, 0, NULL},
        {"height", TR_OPT_INT, &c->height, "540", "chart height in pixels", 150, 10000, NULL, NULL, 0, NULL},
        {"listen", TR_OPT_STRING, &c->listen, "127.0.0.1:8321",
         "ADDR:PORT to serve on (port 0: a free one); an address other than loopback needs --token_file", 1, 0,
         NULL, NULL, 0, NULL},
        {"token_file", TR_OPT_PATH, &c->token_file, NULL,
         "a file holding a secret every request must carry (Authorization: Bearer, or ?token= once per browser)",
         1, 0, NULL, NULL, 0, NULL},
        {"checkpoints", TR_OPT_BOOL, &c->checkpoints, "false",
         "also remove the runs' checkpoints (ROOT/runs/<ckpt_run>/ of a store on this file system; their chunks "
         "go at the next 'terarec ckpt gc')", 1, 0, NULL, NULL, 0, NULL},
        {"request_timeout", TR_OPT_INT, &c->request_timeout, "30",
         "seconds a request may take; a slower one is answered 503", 1, 3600, NULL, NULL, 0, NULL},
    };
    _Static_assert(TR_ARRAY_SIZE(opts) == TR_ARRAY_SIZE(opt_subs), "one mask per option");
    memcpy(o, opts, sizeof opts);
}

/* ---- output helpers ---------------------------------------------------------------------- */

/* A text table: cells row-major, each tr_strdup'd. */
struct table {
    char **cells;
    int ncol, nrow, cap;
};

static enum tr_status table_add(struct table *t, const char *s)
{
    if ((t->nrow + 1) * t->ncol > t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        while (cap < (t->nrow + 1) * t->ncol)
            cap *= 2;
        char **c = tr_realloc(t->cells, (size_t)cap * sizeof *c);
        if (!c)
            return TR_ERR_NOMEM;
        memset(c + t->cap, 0, (size_t)(cap - t->cap) * sizeof *c);
        t->cells = c;
        t->cap = cap;
    }
    int i = 0;
    while (t->cells[t->nrow * t->ncol + i])
        i++;
    TR_ASSERT(i < t->ncol);
    if (!(t->cells[t->nrow * t->ncol + i] = tr_strdup(s ? s : "-")))
        return TR_ERR_NOMEM;
    if (i == t->ncol - 1)
        t->nrow++;
    return TR_OK;
}

static void table_release(struct table *t)
{
    for (int i = 0; i < t->cap; i++)
        tr_free(t->cells[i]);
    tr_free(t->cells);
    memset(t, 0, sizeof *t);
}

static void table_print(const struct table *t, const char *indent)
{
    int w[64] = {0};
    TR_ASSERT(t->ncol <= 64);
    for (int r = 0; r < t->nrow; r++)
        for (int c = 0; c < t->ncol; c++)
            w[c] = TR_MAX(w[c], (int)strlen(t->cells[r * t->ncol + c]));
    for (int r = 0; r < t->nrow; r++) {
        fputs(indent, stdout);
        for (int c = 0; c < t->ncol; c++) {
            if (c == t->ncol - 1)
                printf("%s\n", t->cells[r * t->ncol + c]);
            else
                printf("%-*s  ", w[c], t->cells[r * t->ncol + c]);
        }
    }
}

static void cell_text(sqlite3_stmt *st, int c, char *buf, size_t n)
{
    switch (sqlite3_column_type(st, c)) {
    case SQLITE_NULL:
        snprintf(buf, n, "-");
        break;
    case SQLITE_INTEGER:
        snprintf(buf, n, "%lld", (long long)sqlite3_column_int64(st, c));
        break;
    case SQLITE_FLOAT:
        snprintf(buf, n, "%.6g", sqlite3_column_double(st, c));
        break;
    default:
        snprintf(buf, n, "%s", (const char *)sqlite3_column_text(st, c));
    }
}

/* Steps a prepared statement to its end and prints its rows as a table with a
 * header, under `indent`; "(none)" when it has no rows. Finalizes st. */
static enum tr_status print_stmt(struct ctx *x, sqlite3_stmt *st, const char *indent)
{
    enum tr_status rc = TR_OK;
    struct table t = {.ncol = sqlite3_column_count(st)};
    for (int c = 0; c < t.ncol && rc == TR_OK; c++)
        rc = table_add(&t, sqlite3_column_name(st, c));
    int s;
    while (rc == TR_OK && (s = sqlite3_step(st)) == SQLITE_ROW)
        for (int c = 0; c < t.ncol && rc == TR_OK; c++) {
            const char *v = (const char *)sqlite3_column_text(st, c);
            char buf[64];
            if (sqlite3_column_type(st, c) != SQLITE_TEXT) {
                cell_text(st, c, buf, sizeof buf);
                v = buf;
            }
            rc = table_add(&t, v);
        }
    if (rc == TR_OK && s != SQLITE_DONE)
        rc = db_sql_error(x->db, "cannot read");
    if (rc == TR_OK) {
        if (t.nrow <= 1)
            printf("%s(none)\n", indent);
        else
            table_print(&t, indent);
    }
    table_release(&t);
    sqlite3_finalize(st);
    return rc;
}

static enum tr_status query_print(struct ctx *x, const char *indent, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, types);
    enum tr_status rc = db_preparev(x->db, &st, sql, types, ap);
    va_end(ap);
    TR_CHECK(rc);
    return print_stmt(x, st, indent);
}

/* Prints j (indented) on stdout, or writes it to path atomically. */
static enum tr_status emit_json(json_t *j, const char *path)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!s)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    if (path) {
        size_t n = strlen(s);
        s[n] = '\n';
        rc = tr_file_write_atomic(path, s, n + 1);
        s[n] = '\0';
    } else {
        printf("%s\n", s);
    }
    free(s);
    return rc;
}

/* The runs named on the command line, resolved, in ids (tr_malloc'd array of
 * tr_malloc'd ids). */
static enum tr_status resolve_all(struct ctx *x, int min, char ***ids)
{
    *ids = NULL;
    if (x->nargs < min) {
        LOG_ERROR("give %s", min > 1 ? "at least two runs" : "a run (an id, a unique prefix of one, or a name)");
        LOG_HINT("run 'terarec runs list --db %s' to see the runs", db_path(x->db));
        return TR_ERR_ARG;
    }
    char **a = tr_calloc((size_t)x->nargs, sizeof *a);
    if (!a)
        return TR_ERR_NOMEM;
    *ids = a;
    for (int i = 0; i < x->nargs; i++)
        TR_CHECK(db_run_resolve(x->db, x->args[i], &a[i]));
    return TR_OK;
}

static void free_ids(struct ctx *x, char **ids)
{
    for (int i = 0; ids && i < x->nargs; i++)
        tr_free(ids[i]);
    tr_free(ids);
}

/* ---- list ----------------------------------------------------------------------------------- */

static enum tr_status cmd_list(struct ctx *x)
{
    const struct runs_cfg *c = x->cfg;
    if (x->nargs > 0) {
        LOG_ERROR("unexpected argument '%s'", x->args[0]);
        LOG_HINT("'terarec runs list' takes options only (--status, --limit, --json)");
        return TR_ERR_ARG;
    }
    const int64_t limit = c->limit > 0 ? c->limit : -1;
    if (c->json) {
        json_t *a = NULL;
        TR_CHECK(db_json_runs(x->db, c->status, NULL, limit, &a));
        enum tr_status rc = emit_json(a, NULL);
        json_decref(a);
        return rc;
    }
    const char *where = DB_SQL_LIST_WHERE;
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT r.id AS id, r.name AS name, r.status AS status, tr_time(r.start_time) AS start,"
             " tr_dur(r.start_time, r.end_time) AS duration, (SELECT max(step) FROM metrics WHERE run = r.id) AS steps,"
             " %s AS last_loss, (SELECT max(auc) FROM evals WHERE run = r.id) AS best_auc, r.workers AS workers,"
             " coalesce('slurm ' || r.slurm_job_id, r.hosts) AS 'hosts/job'%s",
             DB_SQL_LAST_LOSS, where);
    return query_print(x, "", sql, "tit", c->status, limit, (const char *)NULL);
}

/* ---- show / export ---------------------------------------------------------------------------- */

static enum tr_status show_text(struct ctx *x, const char *id)
{
    sqlite3_stmt *st = NULL;
    TR_CHECK(db_prepare(x->db, &st, DB_SQL_RUN, "t", id));
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_sql_error(x->db, "cannot read the run");
    }
    printf("run %s\n", id);
    for (int c = 1; c < sqlite3_column_count(st); c++) {
        const char *name = sqlite3_column_name(st, c);
        char buf[64];
        const char *v = buf;
        if (sqlite3_column_type(st, c) == SQLITE_TEXT)
            v = (const char *)sqlite3_column_text(st, c);
        else if ((strstr(name, "_time") || !strcmp(name, "heartbeat")) && sqlite3_column_type(st, c) != SQLITE_NULL)
            db_fmt_time(sqlite3_column_double(st, c), buf, sizeof buf);
        else
            cell_text(st, c, buf, sizeof buf);
        printf("  %-14s %s\n", name, v);
    }
    sqlite3_finalize(st);
    static const char *const titles[] = {"last metrics", "evals", "checkpoints", "processes", "events"};
    static const char *const queries[] = {
        "SELECT name, step, value, tr_time(time) AS time FROM (" DB_SQL_LAST_METRICS ")",
        "SELECT step, auc, logloss, samples, tr_time(time) AS time FROM evals WHERE run = ? ORDER BY step, rowid",
        "SELECT step, manifest_url, bytes, stall_s, tr_time(time) AS time FROM checkpoints WHERE run = ?"
        " ORDER BY step, rowid",
        "SELECT attempt, rank, host, pid, tr_ended(exit_code, signal) AS ended, tr_time(start_time) AS start,"
        " tr_time(end_time) AS 'end' FROM processes WHERE run = ? ORDER BY attempt, rank",
        "SELECT tr_time(time) AS time, kind, data FROM events WHERE run = ? ORDER BY events.time, rowid",
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(titles); i++) {
        printf("%s:\n", titles[i]);
        TR_CHECK(query_print(x, "  ", queries[i], "t", id));
    }
    return TR_OK;
}

static enum tr_status cmd_show(struct ctx *x)
{
    char **ids = NULL;
    enum tr_status rc = resolve_all(x, 1, &ids);
    for (int i = 0; rc == TR_OK && i < x->nargs; i++) {
        if (x->cfg->json) {
            json_t *j = NULL;
            rc = db_json_run(x->db, ids[i], 0, &j);
            if (rc == TR_OK)
                rc = emit_json(j, NULL);
            json_decref(j);
        } else {
            if (i > 0)
                printf("\n");
            rc = show_text(x, ids[i]);
        }
    }
    free_ids(x, ids);
    return rc;
}

#define Q_EXPORT_CSV                                                                          \
    "SELECT step, name, value FROM metrics WHERE run = ?1"                                    \
    " UNION ALL SELECT step, 'auc', auc FROM evals WHERE run = ?1"                            \
    " UNION ALL SELECT step, 'logloss', logloss FROM evals WHERE run = ?1 ORDER BY 1, 2"

static enum tr_status export_csv(struct ctx *x, const char *id, const char *path)
{
    sqlite3_stmt *st = NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return TR_ERR_NOMEM;
    enum tr_status rc = db_prepare(x->db, &st, Q_EXPORT_CSV, "t", id);
    int s = SQLITE_DONE;
    if (rc == TR_OK) {
        fprintf(f, "step,name,value\n");
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            fprintf(f, "%lld,%s,", (long long)sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1));
            if (sqlite3_column_type(st, 2) != SQLITE_NULL)
                fprintf(f, "%.17g", sqlite3_column_double(st, 2));
            fputc('\n', f);
        }
        if (s != SQLITE_DONE)
            rc = db_sql_error(x->db, "cannot read the metrics");
    }
    sqlite3_finalize(st);
    if (fclose(f) != 0 && rc == TR_OK)
        rc = TR_ERR_NOMEM;
    if (rc == TR_OK) {
        if (path)
            rc = tr_file_write_atomic(path, buf, len);
        else
            fwrite(buf, 1, len, stdout);
    }
    free(buf);
    return rc;
}

static enum tr_status cmd_export(struct ctx *x)
{
    if (x->nargs != 1) {
        LOG_ERROR("export takes one run, not %d", x->nargs);
        LOG_HINT("terarec runs export RUN --format csv|json [-o FILE]");
        return TR_ERR_ARG;
    }
    char **ids = NULL;
    enum tr_status rc = resolve_all(x, 1, &ids);
    if (rc == TR_OK && x->cfg->format == FMT_CSV) {
        rc = export_csv(x, ids[0], x->cfg->output);
    } else if (rc == TR_OK) {
        json_t *j = NULL;
        rc = db_json_run(x->db, ids[0], 1, &j);
        if (rc == TR_OK)
            rc = emit_json(j, x->cfg->output);
        json_decref(j);
    }
    if (rc == TR_OK && x->cfg->output)
        fprintf(stderr, "exported run %s to %s\n", ids[0], x->cfg->output);
    free_ids(x, ids);
    return rc;
}

/* ---- metrics ------------------------------------------------------------------------------------ */

static enum tr_status cmd_metrics(struct ctx *x)
{
    char **ids = NULL;
    enum tr_status rc = resolve_all(x, 1, &ids);
    const char *sql = "SELECT step, name, value FROM metrics WHERE run = ?1 AND (?2 IS NULL OR name = ?2)"
                      " ORDER BY step, name, rowid";
    for (int i = 0; rc == TR_OK && i < x->nargs; i++) {
        sqlite3_stmt *st = NULL;
        if (x->cfg->json) {
            json_t *a = NULL;
            rc = db_json_metrics(x->db, ids[i], x->cfg->name, -1, &a);
            if (rc == TR_OK)
                rc = emit_json(a, NULL);
            json_decref(a);
            continue;
        }
        rc = db_prepare(x->db, &st, sql, "tt", ids[i], x->cfg->name);
        if (rc != TR_OK)
            break;
        printf("step,name,value\n");
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            char v[64];
            cell_text(st, 2, v, sizeof v);
            printf("%lld,%s,%s\n", (long long)sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1),
                   sqlite3_column_type(st, 2) == SQLITE_NULL ? "" : v);
        }
        if (s != SQLITE_DONE)
            rc = db_sql_error(x->db, "cannot read the metrics");
        sqlite3_finalize(st);
    }
    free_ids(x, ids);
    return rc;
}

/* ---- compare -------------------------------------------------------------------------------------- */

#define Q_SUMMARY                                                                                             \
    "SELECT r.id AS id, r.name AS name, r.status AS status,"                                                  \
    " (SELECT max(step) FROM metrics WHERE run = r.id) AS steps, " DB_SQL_LAST_LOSS " AS final_loss,"                \
    " (SELECT max(auc) FROM evals WHERE run = r.id) AS best_auc,"                                             \
    " (SELECT auc FROM evals WHERE run = r.id ORDER BY step DESC, rowid DESC LIMIT 1) AS last_auc,"          \
    " (SELECT logloss FROM evals WHERE run = r.id ORDER BY step DESC, rowid DESC LIMIT 1) AS logloss,"       \
    " (SELECT value FROM metrics m WHERE m.run = r.id AND m.name = 'samples_per_s'"                         \
    "  ORDER BY step DESC, m.rowid DESC LIMIT 1) AS samples_per_s, r.config AS config FROM runs r WHERE r.id = ?"

/* The config keys whose values are not the same in every run: an object of key
 * -> array (one value per run, null where a run lacks it). */
static json_t *config_diff(json_t *const *configs, int n)
{
    json_t *d = json_object();
    for (int i = 0; d && i < n; i++) {
        const char *k;
        json_t *v;
        json_object_foreach(configs[i], k, v)
        {
            (void)v;
            if (json_object_get(d, k))
                continue;
            int same = 1;
            json_t *first = json_object_get(configs[0], k);
            for (int j = 1; j < n; j++)
                if (!first || !json_object_get(configs[j], k) || !json_equal(first, json_object_get(configs[j], k)))
                    same = 0;
            if (same)
                continue;
            json_t *a = json_array();
            for (int j = 0; a && j < n; j++) {
                json_t *e = json_object_get(configs[j], k);
                json_array_append(a, e ? e : json_null());
            }
            json_object_set_new(d, k, a);
        }
    }
    return d;
}

static enum tr_status cmd_compare(struct ctx *x)
{
    char **ids = NULL;
    enum tr_status rc = TR_OK;
    json_t *rows = json_array(), *diff = NULL;
    json_t **configs = tr_calloc((size_t)TR_MAX(x->nargs, 1), sizeof *configs);
    struct table t = {.ncol = x->nargs + 1};
    if (!rows || !configs) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(resolve_all(x, 2, &ids), rc, exit);
    if (x->nargs > 63) {
        LOG_ERROR("compare takes at most 63 runs");
        rc = TR_ERR_ARG;
        goto exit;
    }
    for (int i = 0; i < x->nargs; i++) {
        json_t *a = NULL;
        TR_CHECK_GOTO(db_query_json(x->db, &a, Q_SUMMARY, "t", ids[i]), rc, exit);
        json_t *o = json_array_get(a, 0);
        json_t *cfg = json_object_get(o, "config");
        configs[i] = json_is_object(cfg) ? json_incref(cfg) : json_object();
        json_object_del(o, "config");
        json_array_append(rows, o);
        json_decref(a);
    }
    diff = config_diff(configs, x->nargs);
    if (!diff) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    if (x->cfg->json) {
        json_t *j = json_pack("{s:O,s:O}", "runs", rows, "config_diff", diff);
        rc = j ? emit_json(j, NULL) : TR_ERR_NOMEM;
        json_decref(j);
        goto exit;
    }
    static const char *const fields[] = {"id",       "name",    "status",       "steps", "final_loss",
                                         "best_auc", "last_auc", "logloss", "samples_per_s"};
    for (size_t f = 0; f < TR_ARRAY_SIZE(fields); f++) {
        TR_CHECK_GOTO(table_add(&t, fields[f]), rc, exit);
        for (int i = 0; i < x->nargs; i++) {
            json_t *v = json_object_get(json_array_get(rows, (size_t)i), fields[f]);
            char buf[64];
            const char *s = buf;
            if (json_is_string(v))
                s = json_string_value(v);
            else if (json_is_integer(v))
                snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
            else if (json_is_real(v))
                snprintf(buf, sizeof buf, "%.6g", json_real_value(v));
            else
                s = "-";
            TR_CHECK_GOTO(table_add(&t, s), rc, exit);
        }
    }
    const char *k;
    json_t *vals;
    json_object_foreach(diff, k, vals)
    {
        char name[256];
        snprintf(name, sizeof name, "config.%s", k);
        TR_CHECK_GOTO(table_add(&t, name), rc, exit);
        for (int i = 0; i < x->nargs; i++) {
            json_t *v = json_array_get(vals, (size_t)i);
            char *s = json_is_null(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            rc = table_add(&t, json_is_string(v) ? json_string_value(v) : s);
            free(s);
            TR_CHECK_GOTO(rc, rc, exit);
        }
    }
    table_print(&t, "");
    if (json_object_size(diff) == 0)
        printf("(the configs are the same)\n");
exit:
    table_release(&t);
    for (int i = 0; configs && i < x->nargs; i++)
        json_decref(configs[i]);
    tr_free(configs);
    json_decref(rows);
    json_decref(diff);
    free_ids(x, ids);
    return rc;
}

/* ---- rm -------------------------------------------------------------------------------------------- */

static enum tr_status count_rows(struct ctx *x, const char *table, const char *id, int64_t *n)
{
    char sql[96];
    sqlite3_stmt *st = NULL;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE run = ?", table);
    TR_CHECK(db_prepare(x->db, &st, sql, "t", id));
    enum tr_status rc = TR_OK;
    if (sqlite3_step(st) == SQLITE_ROW)
        *n = sqlite3_column_int64(st, 0);
    else
        rc = db_sql_error(x->db, "cannot count rows");
    sqlite3_finalize(st);
    return rc;
}

/* The checkpoint directory of run id (ROOT/runs/<ckpt_run>) in *dir (tr_malloc'd;
 * NULL with a message when the run has none), after the refusals of
 * `rm --checkpoints`: a running run, a store behind a URL, a checkpoint run that
 * a run not being removed shares (runs resumed from it). TR_ERR_ARG (logged). */
static enum tr_status ckpt_dir_of(struct ctx *x, char **ids, const char *id, char **dir)
{
    enum tr_status rc = TR_OK;
    char *url = NULL, *run = NULL, *status = NULL;
    sqlite3_stmt *st = NULL;
    *dir = NULL;
    TR_CHECK_GOTO(db_run_get(x->db, id, "ckpt_url", &url), rc, exit);
    TR_CHECK_GOTO(db_run_get(x->db, id, "ckpt_run", &run), rc, exit);
    TR_CHECK_GOTO(db_run_get(x->db, id, "status", &status), rc, exit);
    if (!url || !*url || !run || !*run) {
        printf("run %s has no checkpoint store recorded: no checkpoints to remove\n", id);
        goto exit;
    }
    if (status && !strcmp(status, DB_RUNNING)) {
        LOG_ERROR("run %s is running: its checkpoints are in use", id);
        LOG_HINT("wait for it to end (or cancel it), then 'terarec runs rm %s --checkpoints'", id);
        rc = TR_ERR_ARG;
        goto exit;
    }
    if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        LOG_ERROR("run %s keeps its checkpoints in the store at %s, whose files this command cannot remove", id, url);
        LOG_HINT("leave out --checkpoints to remove only the history's rows; the store's admin removes "
                 "runs/%s/ there, and 'terarec ckpt gc' its chunks", run);
        rc = TR_ERR_ARG;
        goto exit;
    }
    if (strchr(run, '/') || !strcmp(run, ".") || !strcmp(run, "..")) {
        LOG_ERROR("run %s names the checkpoint run '%s', which is not a plain name: not removed", id, run);
        rc = TR_ERR_ARG;
        goto exit;
    }
    TR_CHECK_GOTO(db_prepare(x->db, &st, "SELECT id FROM runs WHERE ckpt_run = ?1 AND ckpt_url = ?2 AND id <> ?3"
                             " ORDER BY start_time, rowid", "ttt", run, url, id),
                  rc, exit);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *other = (const char *)sqlite3_column_text(st, 0);
        int removed = 0;
        for (int i = 0; i < x->nargs; i++)
            removed |= !strcmp(ids[i], other);
        if (removed)
            continue;
        LOG_ERROR("run %s shares its checkpoints (checkpoint run '%s') with run %s, which stays", id, run, other);
        LOG_HINT("remove both ('terarec runs rm %s %s --checkpoints'), or leave out --checkpoints", id, other);
        rc = TR_ERR_ARG;
        goto exit;
    }
    if (s != SQLITE_DONE) {
        rc = db_sql_error(x->db, "cannot read the runs");
        goto exit;
    }
    const char *root = !strncmp(url, "serve:", 6) ? url + 6 : url;
    if (asprintf(dir, "%s/runs/%s", root, run) < 0) {
        *dir = NULL;
        rc = TR_ERR_NOMEM;
    } else {
        char *d = tr_strdup(*dir);
        free(*dir);
        if (!(*dir = d))
            rc = TR_ERR_NOMEM;
    }
exit:
    sqlite3_finalize(st);
    tr_free(url);
    tr_free(run);
    tr_free(status);
    return rc;
}

static enum tr_status cmd_rm(struct ctx *x)
{
    static const char *const tables[] = {"metrics", "evals", "checkpoints", "processes", "events"};
    char **ids = NULL, **dirs = NULL;
    enum tr_status rc = TR_OK;
    int64_t(*counts)[5] = NULL;
    TR_CHECK_GOTO(resolve_all(x, 1, &ids), rc, exit);
    counts = tr_calloc((size_t)x->nargs, sizeof *counts);
    dirs = tr_calloc((size_t)x->nargs, sizeof *dirs);
    if (!counts || !dirs) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* every refusal before anything is removed */
    for (int i = 0; x->cfg->checkpoints && i < x->nargs; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= !strcmp(ids[i], ids[j]);
        if (!dup)
            TR_CHECK_GOTO(ckpt_dir_of(x, ids, ids[i], &dirs[i]), rc, exit);
    }
    TR_CHECK_GOTO(db_begin(x->db), rc, exit);
    for (int i = 0; i < x->nargs; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= !strcmp(ids[i], ids[j]);
        if (dup) {
            counts[i][0] = -1;
            continue;
        }
        for (size_t k = 0; k < TR_ARRAY_SIZE(tables); k++)
            TR_CHECK_GOTO(count_rows(x, tables[k], ids[i], &counts[i][k]), rc, fail);
        sqlite3_stmt *st = NULL;
        TR_CHECK_GOTO(db_prepare(x->db, &st, "DELETE FROM runs WHERE id = ?", "t", ids[i]), rc, fail);
        int s = sqlite3_step(st);
        sqlite3_finalize(st);
        if (s != SQLITE_DONE) {
            rc = db_sql_error(x->db, "cannot delete");
            goto fail;
        }
    }
    TR_CHECK_GOTO(db_commit(x->db), rc, fail);
    for (int i = 0; i < x->nargs; i++)
        if (counts[i][0] >= 0)
            printf("removed run %s (%" PRId64 " metrics, %" PRId64 " evals, %" PRId64 " checkpoints, %" PRId64
                   " processes, %" PRId64 " events)\n",
                   ids[i], counts[i][0], counts[i][1], counts[i][2], counts[i][3], counts[i][4]);
    /* the rows are gone; a checkpoint directory that stays is said, the rest removed */
    for (int i = 0; i < x->nargs; i++) {
        if (!dirs[i])
            continue;
        struct stat sb;
        if (stat(dirs[i], &sb) != 0) {
            printf("run %s: no checkpoint directory %s (nothing to remove)\n", ids[i], dirs[i]);
            continue;
        }
        enum tr_status r = tr_file_rm_rf(dirs[i]);
        if (r != TR_OK) {
            LOG_HINT("remove what is left of %s by hand", dirs[i]);
            if (rc == TR_OK)
                rc = r;
            continue;
        }
        char root[4096];
        snprintf(root, sizeof root, "%.*s", (int)(strlen(dirs[i]) - strlen("/runs/") - strlen(strrchr(dirs[i], '/') + 1)),
                 dirs[i]);
        printf("removed the checkpoints of run %s: %s (their chunks are removed by the next "
               "'terarec ckpt gc --checkpoint_dir %s')\n", ids[i], dirs[i], root);
    }
exit:
    tr_free(counts);
    for (int i = 0; dirs && i < x->nargs; i++)
        tr_free(dirs[i]);
    tr_free(dirs);
    free_ids(x, ids);
    return rc;
fail:
    db_rollback(x->db);
    goto exit;
}

/* ---- plot -------------------------------------------------------------------------------------------- */

#define Q_SERIES                                                                                        \
    "SELECT step, value FROM metrics WHERE run = ?1 AND name = ?2 AND value IS NOT NULL"                \
    " UNION ALL SELECT step, CASE ?2 WHEN 'auc' THEN auc ELSE logloss END FROM evals"                   \
    " WHERE run = ?1 AND ?2 IN ('auc', 'logloss') AND (CASE ?2 WHEN 'auc' THEN auc ELSE logloss END) IS NOT NULL" \
    " ORDER BY 1"

struct series {
    double *x, *y;
    int n;
    char label[256];
};

static enum tr_status load_series(struct ctx *x, const char *id, struct series *s)
{
    sqlite3_stmt *st = NULL;
    TR_CHECK(db_prepare(x->db, &st, Q_SERIES, "tt", id, x->cfg->metric));
    enum tr_status rc = TR_OK;
    int cap = 0, r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (s->n == cap) {
            cap = cap ? cap * 2 : 256;
            double *a = tr_realloc(s->x, (size_t)cap * sizeof *a);
            if (a)
                s->x = a;
            double *b = tr_realloc(s->y, (size_t)cap * sizeof *b);
            if (b)
                s->y = b;
            if (!a || !b) {
                rc = TR_ERR_NOMEM;
                break;
            }
        }
        s->x[s->n] = (double)sqlite3_column_int64(st, 0);
        s->y[s->n] = sqlite3_column_double(st, 1);
        s->n++;
    }
    if (rc == TR_OK && r != SQLITE_DONE)
        rc = db_sql_error(x->db, "cannot read the metrics");
    sqlite3_finalize(st);
    return rc;
}

static enum tr_status cmd_plot(struct ctx *x)
{
    const struct runs_cfg *c = x->cfg;
    char **ids = NULL;
    enum tr_status rc = TR_OK;
    struct series *s = NULL;
    struct db_plot_series *ps = NULL;
    TR_CHECK_GOTO(resolve_all(x, 1, &ids), rc, exit);
    s = tr_calloc((size_t)x->nargs, sizeof *s);
    ps = tr_calloc((size_t)x->nargs, sizeof *ps);
    if (!s || !ps) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int i = 0; i < x->nargs; i++) {
        TR_CHECK_GOTO(load_series(x, ids[i], &s[i]), rc, exit);
        if (s[i].n == 0) {
            LOG_ERROR("run %s has no '%s' values", ids[i], c->metric);
            LOG_HINT("'terarec runs metrics %s' lists its metrics (auc and logloss come from its evals)", ids[i]);
            rc = TR_ERR_NOT_FOUND;
            goto exit;
        }
        char *name = NULL;
        TR_CHECK_GOTO(db_run_get(x->db, ids[i], "name", &name), rc, exit);
        if (name && strcmp(name, ids[i]) != 0)
            snprintf(s[i].label, sizeof s[i].label, "%s (%s)", ids[i], name);
        else
            snprintf(s[i].label, sizeof s[i].label, "%s", ids[i]);
        tr_free(name);
        ps[i] = (struct db_plot_series){.label = s[i].label, .x = s[i].x, .y = s[i].y, .n = s[i].n};
    }
    struct db_plot_opts o = {.path = c->output, .title = c->title ? c->title : c->metric, .xlabel = "step",
                             .ylabel = c->metric, .width = c->width, .height = c->height};
    TR_CHECK_GOTO(db_plot_write(ps, x->nargs, &o), rc, exit);
    fprintf(stderr, "plotted '%s' of %d run%s to %s\n", c->metric, x->nargs, x->nargs == 1 ? "" : "s", c->output);
exit:
    for (int i = 0; s && i < x->nargs; i++) {
        tr_free(s[i].x);
        tr_free(s[i].y);
    }
    tr_free(s);
    tr_free(ps);
    free_ids(x, ids);
    return rc;
}

/* ---- serve ------------------------------------------------------------------------------------------ */

static enum tr_status cmd_serve(struct ctx *x)
{
    if (x->nargs > 0) {
        LOG_ERROR("unexpected argument '%s'", x->args[0]);
        LOG_HINT("'terarec runs serve' takes options only (--db, --listen, --token_file)");
        return TR_ERR_ARG;
    }
    struct db_serve_cfg sc = {.listen = x->cfg->listen, .token_file = x->cfg->token_file,
                              .request_timeout_s = x->cfg->request_timeout};
    return db_serve(x->db, &sc);
}

/* ---- dispatch ------------------------------------------------------------------------------------------ */

struct runs_sub {
    const char *name;
    enum tr_status (*fn)(struct ctx *x);
    unsigned bit;
    const char *args;
    const char *help;
};

static const struct runs_sub subs[] = {
    {"list", cmd_list, S_LIST, "", "the runs, newest first: status, duration, steps, last loss, best auc"},
    {"show", cmd_show, S_SHOW, " RUN", "every field of a run, its last metrics, evals, checkpoints, processes, events"},
    {"metrics", cmd_metrics, S_METRICS, " RUN", "a run's metrics as step,name,value rows"},
    {"compare", cmd_compare, S_COMPARE, " RUN RUN...", "runs side by side, and the config values that differ"},
    {"export", cmd_export, S_EXPORT, " RUN", "a run as CSV (step,name,value) or JSON (all its tables)"},
    {"rm", cmd_rm, S_RM, " RUN... [--checkpoints]",
     "delete runs and everything recorded about them (--checkpoints: and their checkpoints)"},
    {"plot", cmd_plot, S_PLOT, " RUN... -o FILE.png|.svg", "a metric of runs over steps, as a line chart"},
    {"serve", cmd_serve, S_SERVE, "", "a read-only web page of the runs, their curves, checkpoints and events"},
};

static void usage(FILE *fp)
{
    fprintf(fp, "usage: terarec runs <command> [RUN...] [--db PATH] [options]\n\ncommands:\n");
    for (size_t i = 0; i < TR_ARRAY_SIZE(subs); i++)
        fprintf(fp, "  %-10s %s\n", subs[i].name, subs[i].help);
    fprintf(fp, "\nRUN is a run id, a unique prefix of one, or a unique run name.\n"
                "'terarec runs <command> --help' lists the options.\n");
}

/* Splits argv[1..] into options (with their values; -o is --output) and
 * positional arguments, so that runs may come before or after the options.
 * optv[0] = argv[0]; both arrays are tr_malloc'd (argc + 1 entries). */
static enum tr_status split_args(const struct tr_opt *opts, int argc, char **argv, char ***optv, int *nopt,
                                 char ***pos, int *npos)
{
    char **o = tr_calloc((size_t)argc + 1, sizeof *o), **p = tr_calloc((size_t)argc + 1, sizeof *p);
    *optv = o;
    *pos = p;
    if (!o || !p)
        return TR_ERR_NOMEM;
    static char output[] = "--output";
    int no = 0, np = 0, only_pos = 0;
    o[no++] = argv[0];
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || !strcmp(a, "-")) {
            p[np++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (!strcmp(a, "-o"))
            a = output;
        o[no++] = a;
        if (a[1] != '-' || strchr(a, '=') || i + 1 >= argc)
            continue;
        /* an option with a value takes the next argument */
        char name[128];
        size_t k = 0;
        for (const char *q = a + 2; *q && k + 1 < sizeof name; q++)
            name[k++] = *q == '-' ? '_' : *q;
        name[k] = '\0';
        for (const struct tr_opt *t = opts; t->type != TR_OPT_END; t++)
            if (!strcmp(t->name, name) && t->type != TR_OPT_BOOL) {
                o[no++] = argv[++i];
                break;
            }
    }
    *nopt = no;
    *npos = np;
    return TR_OK;
}

int runs_cmd_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return tr_status_exit_code(argc < 2 ? TR_ERR_ARG : TR_OK);
    }
    const struct runs_sub *sub = NULL;
    for (size_t i = 0; i < TR_ARRAY_SIZE(subs); i++)
        if (!strcmp(argv[1], subs[i].name))
            sub = &subs[i];
    if (!sub) {
        LOG_ERROR("'%s' is not a terarec runs command", argv[1]);
        LOG_HINT("run 'terarec runs --help' to list the commands");
        return tr_status_exit_code(TR_ERR_ARG);
    }
    struct runs_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    struct tr_opt all[TR_ARRAY_SIZE(opt_subs)], opts[TR_ARRAY_SIZE(opt_subs) + 1];
    all_opts(&cfg, all);
    int nopts = 0;
    for (size_t i = 0; i < TR_ARRAY_SIZE(opt_subs); i++)
        if (opt_subs[i] & sub->bit)
            opts[nopts++] = all[i];
    opts[nopts] = (struct tr_opt){0};
    struct ctx x = {.cfg = &cfg};
    char **optv = NULL;
    int nopt = 0, want = 0;
    enum tr_status rc = split_args(opts, argc - 1, argv + 1, &optv, &nopt, &x.args, &x.nargs);
    if (rc == TR_OK)
        rc = tr_opt_parse(opts, nopt, optv, NULL, &want);
    if (rc != TR_OK)
        goto exit;
    if (want & TR_OPT_WANT_HELP) {
        char u[320];
        snprintf(u, sizeof u, "usage: terarec runs %s%s [options]\n\n%s", sub->name, sub->args, sub->help);
        tr_opt_print_help(opts, u, stdout);
        goto exit;
    }
    if (sub->bit == S_PLOT) {
        if (!cfg.output) {
            LOG_ERROR("plot needs -o FILE.png or -o FILE.svg");
            LOG_HINT("the extension picks the format");
            rc = TR_ERR_ARG;
            goto exit;
        }
        if (!db_plot_format_ok(cfg.output)) {
            LOG_ERROR("cannot plot to '%s': the file must end in .png or .svg", cfg.output);
            LOG_HINT("the extension picks the format");
            rc = TR_ERR_ARG;
            goto exit;
        }
    }
    if (sub->bit == S_RM)
        TR_CHECK_GOTO(db_open(cfg.db, 0, &x.db), rc, exit);
    else /* readers never block a job's writes, and read what they cannot write */
        TR_CHECK_GOTO(db_open_readonly(cfg.db, &x.db), rc, exit);
    rc = sub->fn(&x);
exit:
    db_close(x.db);
    tr_free(optv);
    tr_free(x.args);
    tr_opt_release(opts);
    fflush(stdout);
    return tr_status_exit_code(rc);
}
