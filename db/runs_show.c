/* runs_show.c: the subcommands of `terarec runs` that print the history: list,
 * show (a run with its last metrics, evals, checkpoints, processes, events and
 * each rank's system metrics in short), metrics (step,name,value rows) and
 * compare (runs side by side, their final metrics and the config values that
 * differ), each as a table or, with --json, as query.c's and query_runs.c's
 * JSON. They only read. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"
#include "query.h"
#include "runs_cmd.h"

/* ---- list ----------------------------------------------------------------------------------- */

/* Logs the bad input m describes (with its hint). TR_ERR_ARG. */
static enum tr_status bad_input(const struct db_msg *m)
{
    LOG_ERROR("%s", m->error);
    if (m->hint[0])
        LOG_HINT("%s", m->hint);
    return TR_ERR_ARG;
}

enum tr_status runs_cmd_list(struct runs_ctx *x)
{
    const struct runs_cfg *c = x->cfg;
    if (x->nargs > 0) {
        LOG_ERROR("unexpected argument '%s'", x->args[0]);
        LOG_HINT("'terarec runs list' takes options only (--filter, --columns, --sort, --status, --limit, --json)");
        return TR_ERR_ARG;
    }
    struct db_list_opts o = {.status = c->status, .filters = (const char *const *)c->filters,
                             .nfilters = c->nfilters, .columns = c->columns, .sort = c->sort,
                             .limit = c->limit > 0 ? c->limit : -1};
    struct db_msg m;
    enum tr_status rc;
    if (c->json) {
        json_t *a = NULL;
        rc = db_json_runs(x->db, &o, &m, &a);
        if (rc == TR_ERR_ARG)
            return bad_input(&m);
        TR_CHECK(rc);
        rc = runs_emit_json(a, NULL);
        json_decref(a);
        return rc;
    }
    struct db_runs_query q;
    rc = db_runs_prepare(x->db, &o, 1, &q, &m);
    if (rc == TR_ERR_ARG)
        return bad_input(&m);
    TR_CHECK(rc);
    struct runs_table t = {.ncol = q.ncol};
    for (int i = 0; i < q.ncol && rc == TR_OK; i++)
        rc = runs_table_add(&t, q.names[i]);
    int s = SQLITE_DONE;
    while (rc == TR_OK && (s = sqlite3_step(q.st)) == SQLITE_ROW)
        for (int i = 0; i < q.ncol && rc == TR_OK; i++) {
            char buf[64];
            const char *v = (const char *)sqlite3_column_text(q.st, i);
            if (sqlite3_column_type(q.st, i) != SQLITE_TEXT) {
                runs_cell_text(q.st, i, buf, sizeof buf);
                v = buf;
            }
            rc = runs_table_add(&t, v);
        }
    if (rc == TR_OK && s != SQLITE_DONE)
        rc = db_sql_error(x->db, "cannot read the runs");
    if (rc == TR_OK && t.nrow <= 1)
        printf("(no runs%s)\n", c->nfilters || c->status ? " match" : "");
    else if (rc == TR_OK)
        runs_table_print(&t, "");
    runs_table_release(&t);
    db_runs_query_release(&q);
    return rc;
}

/* ---- show -------------------------------------------------------------------------------- */

static enum tr_status show_text(struct runs_ctx *x, const char *id)
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
        json_t *j = NULL;
        char *clean = NULL;
        if (sqlite3_column_type(st, c) == SQLITE_TEXT)
            v = (const char *)sqlite3_column_text(st, c);
        if (v != buf && (!strcmp(name, "config") || !strcmp(name, "tags")) && (j = json_loads(v, 0, NULL))) {
            if (json_is_object(j)) { /* without float noise */
                db_config_clean(j);
                clean = db_json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
            } else if (json_is_array(j)) { /* tags: a, b */
                size_t n = 0, i;
                json_t *e;
                json_array_foreach(j, i, e) n += json_string_length(e) + 2;
                if ((clean = malloc(n + 1))) {
                    clean[0] = '\0';
                    json_array_foreach(j, i, e) sprintf(clean + strlen(clean), "%s%s", i ? ", " : "", json_string_value(e));
                }
            }
            if (clean)
                v = clean;
        }
        else if ((strstr(name, "_time") || !strcmp(name, "heartbeat")) && sqlite3_column_type(st, c) != SQLITE_NULL)
            db_fmt_time(sqlite3_column_double(st, c), buf, sizeof buf);
        else
            runs_cell_text(st, c, buf, sizeof buf);
        printf("  %-14s %s\n", name, v);
        free(clean);
        json_decref(j);
    }
    sqlite3_finalize(st);
    static const char *const titles[] = {"last metrics", "evals", "checkpoints", "attempts", "processes", "events",
                                         "system metrics (per rank; CPU: 100% per core busy)"};
    static const char *const queries[] = {
        "SELECT name, step, value, tr_time(time) AS time FROM (" DB_SQL_LAST_METRICS ")",
        "SELECT step, auc, logloss, samples, tr_time(time) AS time FROM evals WHERE run = ? ORDER BY step, rowid",
        "SELECT step, manifest_url, bytes, stall_s, tr_time(time) AS time FROM checkpoints WHERE run = ?"
        " ORDER BY step, rowid",
        "SELECT attempt, workers, nodes, hosts, coalesce(from_step, 0) AS 'from step', tr_time(start_time) AS start,"
        " tr_time(end_time) AS 'end', coalesce(ended, '-') AS 'ended by' FROM (" DB_SQL_ATTEMPTS ")",
        "SELECT attempt, rank, host, pid, tr_ended(exit_code, signal, " DB_SQL_PROC_END ") AS ended,"
        " tr_time(start_time) AS start, tr_time(" DB_SQL_PROC_END ") AS 'end' FROM processes p WHERE run = ?1"
        " ORDER BY attempt, rank",
        "SELECT tr_time(time) AS time, kind, data FROM events WHERE run = ? ORDER BY events.time, rowid",
        "SELECT rank, samples, CASE WHEN mean_cpu_pct IS NULL THEN '-' ELSE printf('%.1f%%', mean_cpu_pct) END"
        " AS 'mean CPU',"
        " printf('%.1f MiB', peak_rss_bytes / 1048576.0) AS 'peak RSS',"
        " CASE WHEN peak_gpu_mem_bytes IS NULL THEN '-' ELSE printf('%.1f MiB', peak_gpu_mem_bytes / 1048576.0) END"
        " AS 'peak GPU memory' FROM (" DB_SQL_SYS_SUMMARY ")",
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(titles); i++) {
        if (i == 6 && x->db->version < 3) /* an older file read as it is: none recorded */
            continue;
        printf("%s:\n", titles[i]);
        TR_CHECK(runs_query_print(x, "  ", queries[i], "t", id));
    }
    return TR_OK;
}

enum tr_status runs_cmd_show(struct runs_ctx *x)
{
    char **ids = NULL;
    enum tr_status rc = runs_resolve(x, 1, &ids);
    for (int i = 0; rc == TR_OK && i < x->nargs; i++) {
        if (x->cfg->json) {
            json_t *j = NULL;
            rc = db_json_run(x->db, ids[i], 0, &j);
            if (rc == TR_OK)
                rc = runs_emit_json(j, NULL);
            json_decref(j);
        } else {
            if (i > 0)
                printf("\n");
            rc = show_text(x, ids[i]);
        }
    }
    runs_free_ids(x, ids);
    return rc;
}

/* ---- metrics ----------------------------------------------------------------------------- */

enum tr_status runs_cmd_metrics(struct runs_ctx *x)
{
    char **ids = NULL;
    enum tr_status rc = runs_resolve(x, 1, &ids);
    const char *sql = "SELECT step, name, value FROM metrics WHERE run = ?1 AND (?2 IS NULL OR name = ?2)"
                      " ORDER BY step, name, rowid";
    for (int i = 0; rc == TR_OK && i < x->nargs; i++) {
        sqlite3_stmt *st = NULL;
        if (x->cfg->json) {
            json_t *a = NULL;
            rc = db_json_metrics(x->db, ids[i], x->cfg->name, -1, &a);
            if (rc == TR_OK)
                rc = runs_emit_json(a, NULL);
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
            runs_cell_text(st, 2, v, sizeof v);
            printf("%lld,%s,%s\n", (long long)sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1),
                   sqlite3_column_type(st, 2) == SQLITE_NULL ? "" : v);
        }
        if (s != SQLITE_DONE)
            rc = db_sql_error(x->db, "cannot read the metrics");
        sqlite3_finalize(st);
    }
    runs_free_ids(x, ids);
    return rc;
}

/* ---- compare ----------------------------------------------------------------------------- */

/* A JSON value as a table cell into buf (strings as they are, numbers without
 * float noise, null "-"). Returns the text. */
static const char *cell_of(json_t *v, char *buf, size_t n, int metric)
{
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_integer(v))
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v) && metric)
        snprintf(buf, n, "%.6g", json_real_value(v));
    else if (json_is_real(v))
        db_fmt_real(json_real_value(v), buf, n);
    else if (json_is_true(v) || json_is_false(v))
        snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
    else if (json_is_array(v)) { /* tags */
        size_t k = 0, i;
        json_t *e;
        buf[0] = '\0';
        json_array_foreach(v, i, e) if (k < n) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "",
                                                                      json_string_value(e) ? json_string_value(e) : "");
        if (!k)
            return "-";
    } else
        return "-";
    return buf;
}

/* Rows key -> one value per run (obj: key -> array) into t under a header row. */
static enum tr_status table_rows(struct runs_table *t, json_t *obj, int nruns, int metric)
{
    const char *k;
    json_t *vals;
    json_object_foreach(obj, k, vals)
    {
        TR_CHECK(runs_table_add(t, k));
        for (int i = 0; i < nruns; i++) {
            char buf[256];
            TR_CHECK(runs_table_add(t, cell_of(json_array_get(vals, (size_t)i), buf, sizeof buf, metric)));
        }
    }
    return TR_OK;
}

enum tr_status runs_cmd_compare(struct runs_ctx *x)
{
    char **ids = NULL;
    enum tr_status rc = TR_OK;
    json_t *j = NULL;
    struct runs_table t = {.ncol = x->nargs + 1};
    TR_CHECK_GOTO(runs_resolve(x, 2, &ids), rc, exit);
    if (x->nargs > 63) {
        LOG_ERROR("compare takes at most 63 runs");
        rc = TR_ERR_ARG;
        goto exit;
    }
    TR_CHECK_GOTO(db_json_compare(x->db, ids, x->nargs, &j), rc, exit);
    if (x->cfg->json) {
        rc = runs_emit_json(j, NULL);
        goto exit;
    }
    json_t *rows = json_object_get(j, "runs"), *fm = json_object_get(j, "final_metrics"),
           *diff = json_object_get(j, "config_diff");
    static const char *const fields[] = {"id",       "name",     "status",  "tags",         "steps", "final_loss",
                                         "best_auc", "last_auc", "logloss", "samples_per_s"};
    for (size_t f = 0; f < TR_ARRAY_SIZE(fields); f++) {
        TR_CHECK_GOTO(runs_table_add(&t, fields[f]), rc, exit);
        for (int i = 0; i < x->nargs; i++) {
            char buf[256];
            json_t *v = json_object_get(json_array_get(rows, (size_t)i), fields[f]);
            TR_CHECK_GOTO(runs_table_add(&t, cell_of(v, buf, sizeof buf, 1)), rc, exit);
        }
    }
    runs_table_print(&t, "");
    runs_table_release(&t);
    t.ncol = x->nargs + 1;
    printf("\nfinal metrics:\n");
    TR_CHECK_GOTO(table_rows(&t, fm, x->nargs, 1), rc, exit);
    if (t.nrow)
        runs_table_print(&t, "  ");
    else
        printf("  (none recorded)\n");
    runs_table_release(&t);
    t.ncol = x->nargs + 1;
    const json_int_t same = json_integer_value(json_object_get(j, "config_equal"));
    printf("\nconfig: %zu differ, %" JSON_INTEGER_FORMAT " the same%s\n", json_object_size(diff), same,
           json_object_size(diff) ? ":" : "");
    TR_CHECK_GOTO(table_rows(&t, diff, x->nargs, 0), rc, exit);
    if (t.nrow)
        runs_table_print(&t, "  ");
exit:
    runs_table_release(&t);
    json_decref(j);
    runs_free_ids(x, ids);
    return rc;
}
