/* write.c: the writes of the launcher (`terarec train`) to the run history: a
 * run's row (created, finished, reopened after a requeue, its heartbeat) and its
 * children (metrics, evals, checkpoints, processes, events, sysmetrics), and what
 * people add afterwards (tags, a note, a new name: `terarec runs tag|note|rename`),
 * each write one BEGIN IMMEDIATE transaction. `runs rm` deletes in runs_rm.c; reads are
 * query.c's. */
#define TR_SUBSYS TR_SUB_DB
#include "db.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"

/* ---- runs ----------------------------------------------------------------------------- */

/* One statement in its own transaction; *changes (may be NULL) gets the rows it
 * changed. A foreign key failure means the run does not exist: TR_ERR_NOT_FOUND. */
static enum tr_status write1(struct db *db, const char *run, int *changes, const char *sql, const char *types, ...)
{
    enum tr_status rc = TR_OK;
    sqlite3_stmt *st = NULL;
    TR_CHECK(db_begin(db));
    va_list ap;
    va_start(ap, types);
    rc = db_preparev(db, &st, sql, types, ap);
    va_end(ap);
    if (rc != TR_OK)
        goto fail;
    int s = sqlite3_step(st);
    const int ext = sqlite3_extended_errcode(db->h);
    if ((s & 0xff) == SQLITE_CONSTRAINT && ext == SQLITE_CONSTRAINT_FOREIGNKEY) {
        LOG_ERROR("run history '%s': no run '%s'", db->path, run);
        rc = TR_ERR_NOT_FOUND;
        goto fail;
    }
    if ((s & 0xff) == SQLITE_CONSTRAINT && (ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE)) {
        LOG_ERROR("run history '%s': a run '%s' exists already", db->path, run);
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (s != SQLITE_DONE) {
        rc = db_sql_error(db, "cannot write");
        goto fail;
    }
    if (changes)
        *changes = sqlite3_changes(db->h);
    sqlite3_finalize(st);
    st = NULL;
    TR_CHECK_GOTO(db_commit(db), rc, fail);
    return TR_OK;
fail:
    sqlite3_finalize(st);
    db_rollback(db);
    return rc;
}

enum tr_status db_run_create(struct db *db, const struct db_run *r)
{
    if (!r->id || !*r->id) {
        LOG_ERROR("run history '%s': a run needs an id", db->path);
        return TR_ERR_ARG;
    }
    char host[256], space[160];
    const char *lhost = r->launcher_host, *lns = r->launcher_ns;
    int64_t lpid = r->launcher_pid, lstart = r->launcher_start;
    if (lpid == 0) { /* the calling process runs it */
        db_host_name(host, sizeof host);
        db_pid_space(space, sizeof space);
        lhost = host;
        lns = *space ? space : NULL;
        lpid = getpid();
        lstart = db_proc_start(lpid);
    }
    if (lstart <= 0)
        lstart = -1;
    return write1(db, r->id, NULL,
                  "INSERT INTO runs (id, name, status, cmdline, config, git_hash, hosts, nodes, workers,"
                  " slurm_job_id, ckpt_url, ckpt_run, resumed_from, start_time, launcher_host, launcher_pid,"
                  " launcher_start, launcher_ns, heartbeat) VALUES"
                  " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, nullif(?, -1), nullif(?, -1), ?, ?)",
                  "tttttttnnttttdtiitd", r->id, r->name, r->status ? r->status : DB_RUNNING, r->cmdline, r->config,
                  r->git_hash, r->hosts, r->nodes, r->workers, r->slurm_job_id, r->ckpt_url, r->ckpt_run,
                  r->resumed_from, r->start_time, lhost, lpid, lstart, lns, r->start_time);
}

static enum tr_status need_changed(struct db *db, const char *id, int changes)
{
    if (changes > 0)
        return TR_OK;
    LOG_ERROR("run history '%s': no run '%s'", db->path, id);
    return TR_ERR_NOT_FOUND;
}

/* Statement sql, bound as db_prepare's types, stepped inside the caller's
 * transaction; *changes (may be NULL) gets the rows it changed. TR_ERR_DB. */
static enum tr_status step1(struct db *db, int *changes, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, types);
    enum tr_status rc = db_preparev(db, &st, sql, types, ap);
    va_end(ap);
    TR_CHECK(rc);
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_sql_error(db, "cannot write");
    else if (changes)
        *changes = sqlite3_changes(db->h);
    sqlite3_finalize(st);
    return rc;
}

enum tr_status db_run_finish(struct db *db, const char *id, const char *status, double end_time,
                             const char *final_metrics, const char *reason)
{
    enum tr_status rc = TR_OK;
    int changes = 0;
    TR_CHECK(db_begin(db));
    TR_CHECK_GOTO(step1(db, &changes,
                        "UPDATE runs SET status = ?1,"
                        " end_time = CASE WHEN ?2 > 0 THEN ?2 ELSE end_time END,"
                        " final_metrics = coalesce(?3, final_metrics), reason = coalesce(?4, reason) WHERE id = ?5",
                        "tdttt", status, end_time > 0 ? end_time : 0.0, final_metrics, reason, id),
                  rc, fail);
    TR_CHECK_GOTO(need_changed(db, id, changes), rc, fail);
    /* a run that ended took its processes with it: those whose end was never
     * recorded (a node lost, a job cancelled under SLURM) end with it, exit unknown */
    if (strcmp(status, DB_RUNNING) != 0)
        TR_CHECK_GOTO(step1(db, NULL,
                            "UPDATE processes SET end_time = (SELECT end_time FROM runs WHERE id = ?1)"
                            " WHERE run = ?1 AND end_time IS NULL",
                            "t", id),
                      rc, fail);
    TR_CHECK_GOTO(db_commit(db), rc, fail);
    return TR_OK;
fail:
    db_rollback(db);
    return rc;
}

enum tr_status db_run_reopen(struct db *db, const char *id, const char *hosts)
{
    int changes = 0;
    char host[256], space[160];
    db_host_name(host, sizeof host);
    db_pid_space(space, sizeof space);
    TR_CHECK(write1(db, id, &changes,
                    "UPDATE runs SET status = 'running', end_time = NULL, restarts = restarts + 1,"
                    " hosts = coalesce(?1, hosts), launcher_host = ?3, launcher_pid = ?4,"
                    " launcher_start = nullif(?5, -1), heartbeat = ?6, launcher_ns = nullif(?7, '') WHERE id = ?2",
                    "tttiidt", hosts, id, host, (int64_t)getpid(), db_proc_start(getpid()), (double)time(NULL), space));
    return need_changed(db, id, changes);
}

enum tr_status db_run_set_ckpt_run(struct db *db, const char *id, const char *ckpt_run)
{
    int changes = 0;
    TR_CHECK(write1(db, id, &changes, "UPDATE runs SET ckpt_run = ?1 WHERE id = ?2", "tt", ckpt_run, id));
    return need_changed(db, id, changes);
}

enum tr_status db_run_heartbeat(struct db *db, const char *id, double now)
{
    int changes = 0;
    /* a run judged lost while its launcher was only slow to beat is running again */
    TR_CHECK(write1(db, id, &changes,
                    "UPDATE runs SET heartbeat = ?1, status = CASE status WHEN 'lost' THEN 'running' ELSE status END,"
                    " end_time = CASE status WHEN 'lost' THEN NULL ELSE end_time END,"
                    " reason = CASE status WHEN 'lost' THEN NULL ELSE reason END WHERE id = ?2",
                    "dt", now, id));
    return need_changed(db, id, changes);
}

/* ---- what people add: tags, a note, a name ------------------------------------------------ */

int db_tag_ok(const char *tag)
{
    size_t n = tag ? strlen(tag) : 0;
    if (n == 0 || n > DB_TAG_MAX)
        return 0;
    for (const char *p = tag; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_.:/+@-", *p))
            return 0;
    return 1;
}

/* A JSON array text of the n strings (free()), or NULL (out of memory). */
static char *json_strings(const char *const *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(v[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return s;
}

enum tr_status db_run_tag(struct db *db, const char *id, const char *const *add, int nadd, const char *const *rm,
                          int nrm)
{
    for (int i = 0; i < nadd + nrm; i++) {
        const char *t = i < nadd ? add[i] : rm[i - nadd];
        if (!db_tag_ok(t)) {
            LOG_ERROR("tag '%s': a tag is 1 to %d letters, digits or _ . : / + @ -", t, DB_TAG_MAX);
            LOG_HINT("e.g. 'terarec runs tag RUN baseline lr-sweep'");
            return TR_ERR_ARG;
        }
    }
    char *a = json_strings(add, nadd), *r = json_strings(rm, nrm);
    enum tr_status rc = TR_ERR_NOMEM;
    int changes = 0;
    if (a && r)
        rc = write1(db, id, &changes,
                    "UPDATE runs SET tags = (SELECT json_group_array(v) FROM (SELECT value AS v FROM"
                    " json_each(CASE WHEN json_valid(runs.tags) THEN runs.tags ELSE '[]' END)"
                    " UNION SELECT value FROM json_each(?2) EXCEPT SELECT value FROM json_each(?3) ORDER BY 1))"
                    " WHERE id = ?1",
                    "ttt", id, a, r);
    free(a);
    free(r);
    TR_CHECK(rc);
    return need_changed(db, id, changes);
}

enum tr_status db_run_set_note(struct db *db, const char *id, const char *note)
{
    int changes = 0;
    TR_CHECK(write1(db, id, &changes, "UPDATE runs SET note = nullif(?2, '') WHERE id = ?1", "tt", id, note));
    return need_changed(db, id, changes);
}

enum tr_status db_run_rename(struct db *db, const char *id, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    int bad = n == 0 || n > 200;
    for (size_t i = 0; i < n; i++)
        bad |= (unsigned char)name[i] < 0x20 || name[i] == 0x7f;
    if (bad) {
        LOG_ERROR("run name '%s': a name is 1 to 200 characters, without control characters", name ? name : "");
        return TR_ERR_ARG;
    }
    enum tr_status rc = TR_OK;
    sqlite3_stmt *st = NULL;
    int changes = 0;
    TR_CHECK(db_begin(db));
    /* the name must lead to this run only: no other run may have it as its name or id */
    TR_CHECK_GOTO(db_prepare(db, &st,
                             "SELECT id, name = ?2 FROM runs WHERE (name = ?2 OR id = ?2) AND id <> ?1 LIMIT 1", "tt",
                             id, name),
                  rc, fail);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        LOG_ERROR("cannot rename run '%s' to '%s': run '%s' %s", id, name, (const char *)sqlite3_column_text(st, 0),
                  sqlite3_column_int(st, 1) ? "has that name" : "has that id");
        LOG_HINT("a name leads to one run: choose another, or rename run '%s' first",
                 (const char *)sqlite3_column_text(st, 0));
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (s != SQLITE_DONE) {
        rc = db_sql_error(db, "cannot read the runs");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    TR_CHECK_GOTO(step1(db, &changes, "UPDATE runs SET name = ?2 WHERE id = ?1", "tt", id, name), rc, fail);
    TR_CHECK_GOTO(need_changed(db, id, changes), rc, fail);
    TR_CHECK_GOTO(db_commit(db), rc, fail);
    return TR_OK;
fail:
    sqlite3_finalize(st);
    db_rollback(db);
    return rc;
}

/* ---- children ----------------------------------------------------------------------------- */

enum tr_status db_metric_add(struct db *db, const char *run, int64_t step, const char *name, double value,
                             double time)
{
    return write1(db, run, NULL, "INSERT INTO metrics (run, step, name, value, time) VALUES (?, ?, ?, ?, ?)",
                  "titdd", run, step, name, value, time);
}

enum tr_status db_eval_add(struct db *db, const char *run, int64_t step, double auc, double logloss, int64_t samples,
                           double time)
{
    return write1(db, run, NULL,
                  "INSERT INTO evals (run, step, auc, logloss, samples, time) VALUES (?, ?, ?, ?, ?, ?)", "tiddid",
                  run, step, auc, logloss, samples, time);
}

enum tr_status db_ckpt_add(struct db *db, const char *run, int64_t step, const char *manifest_url, int64_t bytes,
                           double stall_s, double time)
{
    return write1(db, run, NULL,
                  "INSERT INTO checkpoints (run, step, manifest_url, bytes, stall_s, time) VALUES (?, ?, ?, ?, ?, ?)",
                  "titudd", run, step, manifest_url, bytes, stall_s, time);
}

enum tr_status db_process_add(struct db *db, const char *run, int attempt, int rank, const char *host, int64_t pid,
                              double time)
{
    return write1(db, run, NULL,
                  "INSERT INTO processes (run, attempt, rank, host, pid, start_time) VALUES (?, ?, ?, ?, ?, ?)",
                  "tnntid", run, attempt, rank, host, pid, time);
}

enum tr_status db_process_exit(struct db *db, const char *run, int attempt, int rank, int exit_code, int signal,
                               double time)
{
    int changes = 0;
    TR_CHECK(write1(db, run, &changes,
                    "UPDATE processes SET exit_code = CASE WHEN ?1 >= 0 THEN ?1 END,"
                    " signal = CASE WHEN ?2 > 0 THEN ?2 END, end_time = ?3"
                    " WHERE run = ?4 AND attempt = ?5 AND rank = ?6",
                    "nndtnn", exit_code, signal, time, run, attempt, rank));
    if (changes == 0) {
        LOG_ERROR("run history '%s': run '%s' has no process of attempt %d rank %d", db->path, run, attempt, rank);
        return TR_ERR_NOT_FOUND;
    }
    return TR_OK;
}

enum tr_status db_event_add(struct db *db, const char *run, double time, const char *kind, const char *data)
{
    return write1(db, run, NULL, "INSERT INTO events (run, time, kind, data) VALUES (?, ?, ?, ?)", "tdtt", run,
                  time, kind, data);
}

enum tr_status db_sysmetric_add(struct db *db, const char *run, int rank, double time, int64_t step, double cpu_pct,
                                int64_t rss_bytes, double gpu_util, int64_t gpu_mem_bytes)
{
    return write1(db, run, NULL,
                  "INSERT INTO sysmetrics (run, rank, time, step, cpu_pct, rss_bytes, gpu_util, gpu_mem_bytes)"
                  " VALUES (?, ?, ?, ?, ?, nullif(?, -1), ?, nullif(?, -1))",
                  "tndididi", run, rank, time, step, cpu_pct, rss_bytes < 0 ? (int64_t)-1 : rss_bytes, gpu_util,
                  gpu_mem_bytes < 0 ? (int64_t)-1 : gpu_mem_bytes);
}
