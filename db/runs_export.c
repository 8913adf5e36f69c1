/* runs_export.c: the subcommands of `terarec runs` that write a run's data to a
 * file: export (CSV step,name,value rows, or JSON: the run and all its tables)
 * and plot (a metric of runs over steps, drawn by plot.c). Files are written
 * atomically; export without -o prints on stdout. They only read the history. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "db_internal.h"
#include "query.h"
#include "runs_cmd.h"

/* ---- export ---------------------------------------------------------------------------------- */

#define Q_EXPORT_CSV                                                                          \
    "SELECT step, name, value FROM metrics WHERE run = ?1"                                    \
    " UNION ALL SELECT step, 'auc', auc FROM evals WHERE run = ?1"                            \
    " UNION ALL SELECT step, 'logloss', logloss FROM evals WHERE run = ?1 ORDER BY 1, 2"

static enum tr_status export_csv(struct runs_ctx *x, const char *id, const char *path)
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

enum tr_status runs_cmd_export(struct runs_ctx *x)
{
    if (x->nargs != 1) {
        LOG_ERROR("export takes one run, not %d", x->nargs);
        LOG_HINT("terarec runs export RUN --format csv|json [-o FILE]");
        return TR_ERR_ARG;
    }
    char **ids = NULL;
    enum tr_status rc = runs_resolve(x, 1, &ids);
    if (rc == TR_OK && x->cfg->format == FMT_CSV) {
        rc = export_csv(x, ids[0], x->cfg->output);
    } else if (rc == TR_OK) {
        json_t *j = NULL;
        rc = db_json_run(x->db, ids[0], 1, &j);
        if (rc == TR_OK)
            rc = runs_emit_json(j, x->cfg->output);
        json_decref(j);
    }
    if (rc == TR_OK && x->cfg->output)
        fprintf(stderr, "exported run %s to %s\n", ids[0], x->cfg->output);
    runs_free_ids(x, ids);
    return rc;
}

/* ---- plot -------------------------------------------------------------------------------- */

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

static enum tr_status load_series(struct runs_ctx *x, const char *id, struct series *s)
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

enum tr_status runs_cmd_plot(struct runs_ctx *x)
{
    const struct runs_cfg *c = x->cfg;
    char **ids = NULL;
    enum tr_status rc = TR_OK;
    struct series *s = NULL;
    struct db_plot_series *ps = NULL;
    TR_CHECK_GOTO(runs_resolve(x, 1, &ids), rc, exit);
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
    runs_free_ids(x, ids);
    return rc;
}
