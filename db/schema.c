/* schema.c: the run history's schema (the tables of db.h): its forward
 * migrations, one per version in PRAGMA user_version, the refusal of a newer or
 * a foreign file, and the columns of table runs. Opening a file is db.c's; this
 * only reads and brings up to date the schema of an open one. */
#define TR_SUBSYS TR_SUB_DB
#include "db.h"

#include <stdio.h>

#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"

/* Version v + 1 is reached by running migrations[v]. Append only. */
static const char *const migrations[] = {
    /* 1: the tables of db.h */
    "CREATE TABLE runs ("
    " id TEXT PRIMARY KEY NOT NULL, name TEXT, status TEXT NOT NULL, cmdline TEXT, config TEXT,"
    " git_hash TEXT, hosts TEXT, nodes INTEGER, workers INTEGER, slurm_job_id TEXT, ckpt_url TEXT,"
    " ckpt_run TEXT, start_time REAL, end_time REAL, final_metrics TEXT, reason TEXT,"
    " restarts INTEGER NOT NULL DEFAULT 0, resumed_from TEXT);"
    "CREATE INDEX runs_slurm_job_id ON runs(slurm_job_id);"
    "CREATE INDEX runs_name ON runs(name);"
    "CREATE TABLE metrics (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL, name TEXT NOT NULL, value REAL, time REAL);"
    "CREATE INDEX metrics_run_step ON metrics(run, step);"
    "CREATE TABLE evals (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL, auc REAL, logloss REAL, samples INTEGER, time REAL);"
    "CREATE INDEX evals_run_step ON evals(run, step);"
    "CREATE TABLE checkpoints (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL, manifest_url TEXT, bytes INTEGER, stall_s REAL, time REAL);"
    "CREATE INDEX checkpoints_run_step ON checkpoints(run, step);"
    "CREATE TABLE processes (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " attempt INTEGER NOT NULL, rank INTEGER NOT NULL, host TEXT, pid INTEGER, exit_code INTEGER,"
    " signal INTEGER, start_time REAL, end_time REAL);"
    "CREATE INDEX processes_run ON processes(run, attempt, rank);"
    "CREATE TABLE events (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " time REAL, kind TEXT NOT NULL, data TEXT);"
    "CREATE INDEX events_run_time ON events(run, time);",
    /* 2: who runs a run (the launcher's host, pid and the pid's start time, and its
     * heartbeat) so that a run whose launcher vanished can be called lost; indexes
     * for the last value of each metric (runs show), the list's order and status */
    "ALTER TABLE runs ADD COLUMN launcher_host TEXT;"
    "ALTER TABLE runs ADD COLUMN launcher_pid INTEGER;"
    "ALTER TABLE runs ADD COLUMN launcher_start INTEGER;"
    "ALTER TABLE runs ADD COLUMN launcher_ns TEXT;"
    "ALTER TABLE runs ADD COLUMN heartbeat REAL;"
    "CREATE INDEX metrics_run_name_step ON metrics(run, name, step);"
    "CREATE INDEX runs_start_time ON runs(start_time);"
    "CREATE INDEX runs_status ON runs(status);",
    /* 3: what people add to a run afterwards: its tags (a JSON array of strings,
     * `terarec runs tag`) and a note (`terarec runs note`); each rank's use of the
     * machine over time (the workers' "sys" reports): cpu_pct is 100 per core busy,
     * rss_bytes its resident memory, gpu_mem_bytes the device memory its backend
     * holds, gpu_util NULL where nothing gives it */
    "ALTER TABLE runs ADD COLUMN tags TEXT;"
    "ALTER TABLE runs ADD COLUMN note TEXT;"
    "CREATE TABLE sysmetrics (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " rank INTEGER NOT NULL, time REAL, step INTEGER, cpu_pct REAL, rss_bytes INTEGER, gpu_util REAL,"
    " gpu_mem_bytes INTEGER);"
    "CREATE INDEX sysmetrics_run_rank_time ON sysmetrics(run, rank, time);",
};
_Static_assert(sizeof migrations / sizeof migrations[0] == DB_SCHEMA_VERSION, "one migration per version");

const char *const db_run_columns[] = {
    "id",       "name",         "status",   "cmdline",  "config",     "git_hash",      "hosts",
    "nodes",    "workers",      "slurm_job_id", "ckpt_url", "ckpt_run", "start_time", "end_time",
    "final_metrics", "reason", "restarts", "resumed_from", "launcher_host", "launcher_pid", "launcher_start",
    "launcher_ns", "heartbeat", "tags", "note",
};

/* ---- version ---------------------------------------------------------------------------- */

enum tr_status db_schema_version(struct db *db, int *v)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db->h, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        int code = sqlite3_errcode(db->h);
        sqlite3_finalize(st);
        if (code == SQLITE_NOTADB) {
            LOG_ERROR("'%s' is not an SQLite database, so not a terarec run history", db->path);
            LOG_HINT("give the run history's path with --db (or TR_DB)");
            return TR_ERR_ARG;
        }
        return db_sql_error(db, "cannot read the schema version");
    }
    *v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return TR_OK;
}

enum tr_status db_schema_newer(const struct db *db, int v)
{
    LOG_ERROR("run history '%s' has schema version %d; this terarec knows versions up to %d", db->path, v,
              DB_SCHEMA_VERSION);
    LOG_HINT("a newer terarec wrote it: use that one, or another --db PATH");
    return TR_ERR_ARG;
}

/* A file at schema version 0 must be empty: an SQLite database of something else
 * (tables but no version) is not made into a run history. TR_ERR_ARG. */
static enum tr_status check_foreign(struct db *db)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db->h, "SELECT count(*) FROM sqlite_master", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_sql_error(db, "cannot read the schema");
    }
    const int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (n == 0)
        return TR_OK;
    LOG_ERROR("'%s' is an SQLite database of something else (%d schema objects, no schema version), not a terarec "
              "run history", db->path, n);
    LOG_HINT("give the run history's path with --db (or TR_DB)");
    return TR_ERR_ARG;
}

enum tr_status db_schema_migrate(struct db *db)
{
    int v = 0;
    TR_CHECK(db_schema_version(db, &v));
    if (v > DB_SCHEMA_VERSION)
        return db_schema_newer(db, v);
    if (v == DB_SCHEMA_VERSION)
        return TR_OK;
    enum tr_status rc = TR_OK;
    TR_CHECK(db_begin(db));
    /* another process may have migrated between the read and the lock */
    TR_CHECK_GOTO(db_schema_version(db, &v), rc, fail);
    if (v == 0)
        TR_CHECK_GOTO(check_foreign(db), rc, fail);
    for (; v < DB_SCHEMA_VERSION; v++) {
        char what[64];
        snprintf(what, sizeof what, "cannot migrate to schema version %d", v + 1);
        TR_CHECK_GOTO(db_exec(db, migrations[v], what), rc, fail);
        LOG_INFO(DB, "run history '%s': schema version %d", db->path, v + 1);
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", DB_SCHEMA_VERSION);
    TR_CHECK_GOTO(db_exec(db, sql, "cannot set the schema version"), rc, fail);
    TR_CHECK_GOTO(db_commit(db), rc, fail);
    return TR_OK;
fail:
    db_rollback(db);
    return rc;
}
