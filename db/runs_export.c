/* runs_export.c: the subcommands of `terarec runs` that write a run's data to a
 * file: export (CSV step,name,value rows, or JSON: the run and all its tables)
 * and plot (a metric of runs over steps, drawn by plot.c: a resumed run's chain
 * as one curve, one run's evaluations and events as markers). Files are written
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
    "SELECT step, value FROM metrics WHERE run = ?1 AND name = ?2 AND value IS NOT NULL AND step <= ?3"  \
    " UNION ALL SELECT step, CASE ?2 WHEN 'auc' THEN auc ELSE logloss END FROM evals"                   \
    " WHERE run = ?1 AND ?2 IN ('auc', 'logloss') AND (CASE ?2 WHEN 'auc' THEN auc ELSE logloss END) IS NOT NULL" \
    " AND step <= ?3 ORDER BY 1"

/* The run a run was resumed from (when it is still in the history) and the step
 * of the checkpoint it resumed from (its start event's from_step; NULL: unknown). */
#define Q_PARENT                                                                                        \
    "SELECT r.resumed_from, (SELECT json_extract(data, '$.from_step') FROM events e WHERE e.run = r.id"  \
    " AND e.kind = 'started' AND json_valid(e.data) AND json_type(e.data, '$.from_step') = 'integer'"     \
    " ORDER BY e.time, e.rowid LIMIT 1) FROM runs r WHERE r.id = ?1 AND r.resumed_from IN (SELECT id FROM runs)"

/* The markers of one run: its evaluations, and the events that changed its course
 * at the step of their checkpoint (from_step) or the last step reported before
 * them. */
#define Q_MARKS                                                                                          \
    "SELECT 0, step, 'eval' FROM evals WHERE run = ?1 UNION ALL SELECT 1, coalesce(CASE WHEN"            \
    " json_valid(e.data) AND e.kind IN ('started', 'restarted') THEN json_extract(e.data, '$.from_step') END," \
    " (SELECT max(step) FROM metrics m WHERE m.run = e.run AND m.time <= e.time)),"                       \
    " CASE e.kind WHEN 'started' THEN 'resumed' ELSE replace(e.kind, '_', ' ') END FROM events e"          \
    " WHERE e.run = ?1 AND (e.kind IN ('restarted', 'preempt_signal', 'cancel_signal', 'requeued', 'requeue',"  \
    " 'failed_attempt', 'hung', 'lost', 'error', 'fresh_start', 'loader_failed', 'preempted') OR (e.kind = 'started'" \
    " AND json_valid(e.data) AND json_type(e.data, '$.from_step') = 'integer')) ORDER BY 2"

#define MAX_CHAIN 16

struct series {
    double *x, *y;
    int n, cap;
    char label[256];
};

static enum tr_status grow(struct series *s)
{
    if (s->n < s->cap)
        return TR_OK;
    int cap = s->cap ? s->cap * 2 : 256;
    double *a = tr_realloc(s->x, (size_t)cap * sizeof *a);
    if (a)
        s->x = a;
    double *b = tr_realloc(s->y, (size_t)cap * sizeof *b);
    if (b)
        s->y = b;
    if (!a || !b)
        return TR_ERR_NOMEM;
    s->cap = cap;
    return TR_OK;
}

/* Appends run id's points of the metric at steps <= upto. */
static enum tr_status load_series(struct runs_ctx *x, const char *id, int64_t upto, struct series *s)
{
    sqlite3_stmt *st = NULL;
    TR_CHECK(db_prepare(x->db, &st, Q_SERIES, "tti", id, x->cfg->metric, upto));
    enum tr_status rc = TR_OK;
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if ((rc = grow(s)) != TR_OK)
            break;
        s->x[s->n] = (double)sqlite3_column_int64(st, 0);
        s->y[s->n] = sqlite3_column_double(st, 1);
        s->n++;
    }
    if (rc == TR_OK && r != SQLITE_DONE)
        rc = db_sql_error(x->db, "cannot read the metrics");
    sqlite3_finalize(st);
    return rc;
}

/* A resumed run's curve as one: the points of the runs it was resumed from (up to
 * the step each successor resumed at, else before its first point), then its own.
 * *chained gets how many runs came before it. */
static enum tr_status load_chain(struct runs_ctx *x, const char *id, struct series *s, int *chained)
{
    char *ids[MAX_CHAIN + 1] = {NULL};
    int64_t upto[MAX_CHAIN + 1];
    int n = 0;
    enum tr_status rc = TR_OK;
    *chained = 0;
    ids[n] = tr_strdup(id);
    if (!ids[n])
        return TR_ERR_NOMEM;
    upto[n++] = INT64_MAX;
    while (n <= MAX_CHAIN) { /* up the chain, nearest first */
        sqlite3_stmt *st = NULL;
        TR_CHECK_GOTO(db_prepare(x->db, &st, Q_PARENT, "t", ids[n - 1]), rc, exit);
        int r = sqlite3_step(st);
        char *parent = r == SQLITE_ROW ? tr_strdup((const char *)sqlite3_column_text(st, 0)) : NULL;
        const int64_t from = r == SQLITE_ROW && sqlite3_column_type(st, 1) != SQLITE_NULL ? sqlite3_column_int64(st, 1) : -1;
        sqlite3_finalize(st);
        if (r != SQLITE_ROW && r != SQLITE_DONE) {
            rc = db_sql_error(x->db, "cannot read the runs");
            goto exit;
        }
        if (!parent)
            break;
        int loop = 0;
        for (int i = 0; i < n; i++)
            loop |= !strcmp(ids[i], parent);
        if (loop) {
            tr_free(parent);
            break;
        }
        ids[n] = parent;
        upto[n++] = from; /* the parent's points up to here; -1: up to the successor's first */
    }
    for (int i = n - 1; i >= 0; i--) { /* oldest first; an ancestor up to the step its successor resumed at */
        struct series part = {0};
        rc = load_series(x, ids[i], i == 0 || upto[i] < 0 ? INT64_MAX : upto[i], &part);
        /* a successor's first point ends what came before it (where the step it
         * resumed at is unknown, or it logged again from an earlier step) */
        while (rc == TR_OK && part.n && s->n && s->x[s->n - 1] >= part.x[0])
            s->n--;
        for (int k = 0; k < part.n && rc == TR_OK; k++)
            if ((rc = grow(s)) == TR_OK) {
                s->x[s->n] = part.x[k];
                s->y[s->n] = part.y[k];
                s->n++;
            }
        tr_free(part.x);
        tr_free(part.y);
        TR_CHECK_GOTO(rc, rc, exit);
    }
    *chained = n - 1;
exit:
    for (int i = 0; i < n; i++)
        tr_free(ids[i]);
    return rc;
}

/* The markers of run id (evaluations and events, see Q_MARKS) into *marks
 * (tr_malloc'd; labels in *labels, 24 bytes each). */
static enum tr_status load_marks(struct runs_ctx *x, const char *id, struct db_plot_mark **marks, char **labels,
                                 int *n)
{
    sqlite3_stmt *st = NULL;
    *marks = NULL;
    *labels = NULL;
    *n = 0;
    TR_CHECK(db_prepare(x->db, &st, Q_MARKS, "t", id));
    enum tr_status rc = TR_OK;
    int cap = 0, r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 1) == SQLITE_NULL)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 32;
            struct db_plot_mark *m = tr_realloc(*marks, (size_t)cap * sizeof *m);
            if (m)
                *marks = m;
            char *l = tr_realloc(*labels, (size_t)cap * 24);
            if (l)
                *labels = l;
            if (!m || !l) {
                rc = TR_ERR_NOMEM;
                break;
            }
        }
        snprintf(*labels + (size_t)*n * 24, 24, "%s", (const char *)sqlite3_column_text(st, 2));
        (*marks)[*n] = (struct db_plot_mark){.x = (double)sqlite3_column_int64(st, 1), .event = sqlite3_column_int(st, 0)};
        (*n)++;
    }
    if (rc == TR_OK && r != SQLITE_DONE)
        rc = db_sql_error(x->db, "cannot read the evaluations and events");
    sqlite3_finalize(st);
    for (int i = 0; rc == TR_OK && i < *n; i++) /* the labels' block moved while it grew */
        (*marks)[i].label = *labels + (size_t)i * 24;
    return rc;
}

enum tr_status runs_cmd_plot(struct runs_ctx *x)
{
    const struct runs_cfg *c = x->cfg;
    char **ids = NULL, *labels = NULL;
    enum tr_status rc = TR_OK;
    struct series *s = NULL;
    struct db_plot_series *ps = NULL;
    struct db_plot_mark *marks = NULL;
    int nmarks = 0;
    TR_CHECK_GOTO(runs_resolve(x, 1, &ids), rc, exit);
    s = tr_calloc((size_t)x->nargs, sizeof *s);
    ps = tr_calloc((size_t)x->nargs, sizeof *ps);
    if (!s || !ps) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int i = 0; i < x->nargs; i++) {
        int chained = 0;
        TR_CHECK_GOTO(load_chain(x, ids[i], &s[i], &chained), rc, exit);
        if (s[i].n == 0) {
            LOG_ERROR("run %s has no '%s' values", ids[i], c->metric);
            LOG_HINT("'terarec runs metrics %s' lists its metrics (auc and logloss come from its evals)", ids[i]);
            rc = TR_ERR_NOT_FOUND;
            goto exit;
        }
        char *name = NULL;
        TR_CHECK_GOTO(db_run_get(x->db, ids[i], "name", &name), rc, exit);
        char more[48] = "";
        if (chained)
            snprintf(more, sizeof more, ", resumed from %d run%s", chained, chained == 1 ? "" : "s");
        if (name && strcmp(name, ids[i]) != 0)
            snprintf(s[i].label, sizeof s[i].label, "%s (%s%s)", ids[i], name, more);
        else
            snprintf(s[i].label, sizeof s[i].label, "%s%s%s%s", ids[i], *more ? " (" : "", *more ? more + 2 : "",
                     *more ? ")" : "");
        tr_free(name);
        ps[i] = (struct db_plot_series){.label = s[i].label, .x = s[i].x, .y = s[i].y, .n = s[i].n};
    }
    if (c->markers && x->nargs == 1)
        TR_CHECK_GOTO(load_marks(x, ids[0], &marks, &labels, &nmarks), rc, exit);
    struct db_plot_opts o = {.path = c->output, .title = c->title ? c->title : c->metric, .xlabel = "step",
                             .ylabel = c->metric, .width = c->width, .height = c->height, .smooth = c->smooth,
                             .logscale = c->logscale, .marks = marks, .nmarks = nmarks};
    TR_CHECK_GOTO(db_plot_write(ps, x->nargs, &o), rc, exit);
    fprintf(stderr, "plotted '%s' of %d run%s to %s\n", c->metric, x->nargs, x->nargs == 1 ? "" : "s", c->output);
exit:
    for (int i = 0; s && i < x->nargs; i++) {
        tr_free(s[i].x);
        tr_free(s[i].y);
    }
    tr_free(s);
    tr_free(ps);
    tr_free(marks);
    tr_free(labels);
    runs_free_ids(x, ids);
    return rc;
}
