/* runs_show.c: the subcommands of `terarec runs` that print the history: list,
 * show (a run with its last metrics, evals, checkpoints, processes, events and
 * each rank's system metrics in short),
 * metrics (step,name,value rows) and compare (runs side by side, and the config
 * values that differ), each as a table or, with --json, as query.c's JSON. They
 * only read. */
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

enum tr_status runs_cmd_list(struct runs_ctx *x)
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
        enum tr_status rc = runs_emit_json(a, NULL);
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
    return runs_query_print(x, "", sql, "tit", c->status, limit, (const char *)NULL);
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
        if (sqlite3_column_type(st, c) == SQLITE_TEXT)
            v = (const char *)sqlite3_column_text(st, c);
        else if ((strstr(name, "_time") || !strcmp(name, "heartbeat")) && sqlite3_column_type(st, c) != SQLITE_NULL)
            db_fmt_time(sqlite3_column_double(st, c), buf, sizeof buf);
        else
            runs_cell_text(st, c, buf, sizeof buf);
        printf("  %-14s %s\n", name, v);
    }
    sqlite3_finalize(st);
    static const char *const titles[] = {"last metrics", "evals", "checkpoints", "processes", "events",
                                         "system metrics (per rank; CPU: 100% per core busy)"};
    static const char *const queries[] = {
        "SELECT name, step, value, tr_time(time) AS time FROM (" DB_SQL_LAST_METRICS ")",
        "SELECT step, auc, logloss, samples, tr_time(time) AS time FROM evals WHERE run = ? ORDER BY step, rowid",
        "SELECT step, manifest_url, bytes, stall_s, tr_time(time) AS time FROM checkpoints WHERE run = ?"
        " ORDER BY step, rowid",
        "SELECT attempt, rank, host, pid, tr_ended(exit_code, signal) AS ended, tr_time(start_time) AS start,"
        " tr_time(end_time) AS 'end' FROM processes WHERE run = ? ORDER BY attempt, rank",
        "SELECT tr_time(time) AS time, kind, data FROM events WHERE run = ? ORDER BY events.time, rowid",
        "SELECT rank, samples, CASE WHEN mean_cpu_pct IS NULL THEN '-' ELSE printf('%.1f%%', mean_cpu_pct) END"
        " AS 'mean CPU',"
        " printf('%.1f MiB', peak_rss_bytes / 1048576.0) AS 'peak RSS',"
        " CASE WHEN peak_gpu_mem_bytes IS NULL THEN '-' ELSE printf('%.1f MiB', peak_gpu_mem_bytes / 1048576.0) END"
        " AS 'peak GPU memory' FROM (" DB_SQL_SYS_SUMMARY ")",
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(titles); i++) {
        if (i == 5 && x->db->version < 3) /* an older file read as it is: none recorded */
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

enum tr_status runs_cmd_compare(struct runs_ctx *x)
{
    char **ids = NULL;
    enum tr_status rc = TR_OK;
    json_t *rows = json_array(), *diff = NULL;
    json_t **configs = tr_calloc((size_t)TR_MAX(x->nargs, 1), sizeof *configs);
    struct runs_table t = {.ncol = x->nargs + 1};
    if (!rows || !configs) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(runs_resolve(x, 2, &ids), rc, exit);
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
        rc = j ? runs_emit_json(j, NULL) : TR_ERR_NOMEM;
        json_decref(j);
        goto exit;
    }
    static const char *const fields[] = {"id",       "name",    "status",       "steps", "final_loss",
                                         "best_auc", "last_auc", "logloss", "samples_per_s"};
    for (size_t f = 0; f < TR_ARRAY_SIZE(fields); f++) {
        TR_CHECK_GOTO(runs_table_add(&t, fields[f]), rc, exit);
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
            TR_CHECK_GOTO(runs_table_add(&t, s), rc, exit);
        }
    }
    const char *k;
    json_t *vals;
    json_object_foreach(diff, k, vals)
    {
        char name[256];
        snprintf(name, sizeof name, "config.%s", k);
        TR_CHECK_GOTO(runs_table_add(&t, name), rc, exit);
        for (int i = 0; i < x->nargs; i++) {
            json_t *v = json_array_get(vals, (size_t)i);
            char *s = json_is_null(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            rc = runs_table_add(&t, json_is_string(v) ? json_string_value(v) : s);
            free(s);
            TR_CHECK_GOTO(rc, rc, exit);
        }
    }
    runs_table_print(&t, "");
    if (json_object_size(diff) == 0)
        printf("(the configs are the same)\n");
exit:
    runs_table_release(&t);
    for (int i = 0; configs && i < x->nargs; i++)
        json_decref(configs[i]);
    tr_free(configs);
    json_decref(rows);
    json_decref(diff);
    runs_free_ids(x, ids);
    return rc;
}
