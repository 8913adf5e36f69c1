/* query.h: the reads of the run history that `terarec runs ...` (runs_*.c) and
 * `terarec runs serve` (serve.c) share: the SQL functions their queries call
 * (tr_time, tr_dur, tr_ended: registered by every open, db.c), the SQL text both
 * print or serve, and the JSON of `--json`, which is also the server's /api/.
 * Nothing outside db/ includes it (tests aside). The lookups of one run that the
 * launcher also makes (db_run_resolve, db_run_get, ...) are declared in db.h. */
#ifndef TR_DB_QUERY_H
#define TR_DB_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "db.h"

/* SQL: the last loss of run r (a correlated subquery over `runs r`). */
#define DB_SQL_LAST_LOSS                                                                                   \
    "(SELECT value FROM metrics m WHERE m.run = r.id AND m.name = 'loss' ORDER BY step DESC, m.rowid DESC " \
    "LIMIT 1)"

/* The runs of `list`: ?1 status (NULL: any), ?2 limit (-1: all), ?3 a part of the
 * name or id (NULL: any). */
#define DB_SQL_LIST_WHERE                                                                            \
    " FROM runs r WHERE (?1 IS NULL OR r.status = ?1) AND (?3 IS NULL OR instr(r.id, ?3) > 0"        \
    " OR instr(coalesce(r.name, ''), ?3) > 0) ORDER BY r.start_time DESC, r.rowid DESC LIMIT ?2"

/* A run's row: ?1 its id. */
#define DB_SQL_RUN "SELECT * FROM runs WHERE id = ?"
/* The last value of each metric: the names by a skip scan of metrics_run_name_step
 * (one probe per name, not a pass over the run's rows per row), then one probe
 * each for its last step. */
#define DB_SQL_LAST_METRICS                                                                                   \
    "WITH RECURSIVE names(n) AS (SELECT (SELECT min(name) FROM metrics WHERE run = ?1) UNION ALL"            \
    " SELECT (SELECT min(name) FROM metrics WHERE run = ?1 AND name > n) FROM names WHERE n IS NOT NULL)"      \
    " SELECT m.name AS name, m.step AS step, m.value AS value, m.time AS time FROM names, metrics m"            \
    " WHERE n IS NOT NULL AND m.rowid = (SELECT rowid FROM metrics WHERE run = ?1 AND name = n"               \
    " ORDER BY step DESC, rowid DESC LIMIT 1) ORDER BY m.name"

/* Each rank's system metrics in short (?1 the run): samples, mean CPU percent
 * (100 per core), peak resident memory, peak GPU memory (NULL without a GPU). */
#define DB_SQL_SYS_SUMMARY                                                                                 \
    "SELECT rank, count(*) AS samples, avg(cpu_pct) AS mean_cpu_pct, max(rss_bytes) AS peak_rss_bytes,"    \
    " max(gpu_mem_bytes) AS peak_gpu_mem_bytes FROM sysmetrics WHERE run = ?1 GROUP BY rank ORDER BY rank"

/* The query of a run's (?1) last value of each metric (name, step, value, time),
 * exposed so that tests can look at its plan: DB_SQL_LAST_METRICS. */
extern const char db_sql_last_metrics[];

/* Registers the SQL functions the queries of the history use on db's connection:
 * tr_time(t) local time text, tr_dur(start, end) "1h02m" (end NULL: until now),
 * tr_ended(exit_code, signal) "exit 0" / "SIGKILL" / "running". Every open
 * (db_open, db_open_readonly, db_reopen) calls it, so every connection has them.
 * TR_ERR_DB (logged). */
enum tr_status db_sql_functions(struct db *db) TR_WUR;

/* t (seconds since the epoch) as local time "YYYY-MM-DD HH:MM:SS" into buf; "-"
 * for 0, a negative or a non-finite t. */
void db_fmt_time(double t, char *buf, size_t n);

/* The rows of sql (parameters bound as db_prepare's `types`) as an array of
 * objects in *out (the caller's: json_decref; NULL on error); columns holding
 * JSON text (config, final_metrics, data) come out as JSON values. TR_ERR_DB
 * (logged), TR_ERR_NOMEM. */
enum tr_status db_query_json(struct db *db, json_t **out, const char *sql, const char *types, ...) TR_WUR;

/* `runs list --json`: an array of runs, newest first; status (NULL: any), name (a
 * part of the name or id; NULL: any), limit (-1: all). *out is the caller's
 * (json_decref); NULL on error. TR_ERR_DB (logged), TR_ERR_NOMEM. */
enum tr_status db_json_runs(struct db *db, const char *status, const char *name, int64_t limit,
                            json_t **out) TR_WUR;

/* `runs show --json` (all_metrics 0) / `runs export --format json` (1): the run
 * and its tables as one object (the caller checks that the run exists); its
 * system metrics as "sysmetrics_summary" (DB_SQL_SYS_SUMMARY), and with
 * all_metrics every sample as "sysmetrics".
 * Ownership and errors as db_json_runs. */
enum tr_status db_json_run(struct db *db, const char *id, int all_metrics, json_t **out) TR_WUR;

/* A run's system metrics: an array of {seq, rank, time, step, cpu_pct, rss_bytes,
 * gpu_util, gpu_mem_bytes} in the order they were recorded (seq grows; the
 * page's charts); after >= 0: only those recorded after seq `after` (-1: all).
 * As db_json_runs. */
enum tr_status db_json_sysmetrics(struct db *db, const char *id, int64_t after, json_t **out) TR_WUR;

/* `runs metrics RUN --json`: an array of {step, name, value, time}; name NULL:
 * every metric; after >= 0: only steps after it (-1: all). As db_json_runs. */
enum tr_status db_json_metrics(struct db *db, const char *id, const char *name, int64_t after,
                               json_t **out) TR_WUR;

#endif
