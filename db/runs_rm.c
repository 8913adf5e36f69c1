/* runs_rm.c: `terarec runs rm RUN... [--checkpoints]`: deletes runs and every row
 * recorded about them in one transaction (the only subcommand that writes), and
 * with --checkpoints their checkpoint directories (ROOT/runs/<ckpt_run>/ of a
 * store on this file system), after every refusal has been checked: a running
 * run, a store behind a URL, checkpoints a remaining run shares. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "db_internal.h"
#include "runs_cmd.h"

static enum tr_status count_rows(struct runs_ctx *x, const char *table, const char *id, int64_t *n)
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
static enum tr_status ckpt_dir_of(struct runs_ctx *x, char **ids, const char *id, char **dir)
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

enum tr_status runs_cmd_rm(struct runs_ctx *x)
{
    static const char *const tables[] = {"metrics", "evals", "checkpoints", "processes", "events"};
    char **ids = NULL, **dirs = NULL;
    enum tr_status rc = TR_OK;
    int64_t(*counts)[5] = NULL;
    TR_CHECK_GOTO(runs_resolve(x, 1, &ids), rc, exit);
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
    runs_free_ids(x, ids);
    return rc;
fail:
    db_rollback(x->db);
    goto exit;
}
