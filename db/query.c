/* query.c: the reads of the run history: the lookups of one run (db.h:
 * db_run_resolve, db_run_get, db_run_by_slurm_job) that `terarec runs ...` and
 * the launcher make. It prints nothing and writes nothing. */
#define TR_SUBSYS TR_SUB_DB
#include "db.h"

#include <stdarg.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"

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
