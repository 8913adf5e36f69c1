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
#include <sqlite3.h>

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

/* SQL: when process p ended: its end, else its run's end once the run is over
 * (a process whose end was never recorded ended with its run). */
#define DB_SQL_PROC_END                                                                                     \
    "coalesce(p.end_time, (SELECT CASE WHEN r.status <> 'running' THEN r.end_time END FROM runs r"          \
    " WHERE r.id = p.run))"

/* A run's (?1) attempts, one row each: its number, workers and nodes (its
 * processes), hosts, the step it started from (its started/restarted event's
 * from_step; NULL: step 0 or not said), its start and end, and the first event
 * that ended it ("resized (lost)", "failed_attempt", "completed", ...). An elastic
 * run's attempts show its worlds. */
#define DB_SQL_ATTEMPTS                                                                                      \
    "SELECT a.attempt AS attempt, a.workers AS workers, a.nodes AS nodes, a.hosts AS hosts,"                  \
    " (SELECT json_extract(e.data, '$.from_step') FROM events e WHERE e.run = ?1"                             \
    " AND e.kind IN ('started', 'restarted') AND json_valid(e.data) AND json_extract(e.data, '$.attempt') = a.attempt" \
    " ORDER BY e.time LIMIT 1) AS from_step, a.start_time AS start_time, a.end_time AS end_time,"              \
    " (SELECT e.kind || CASE WHEN json_valid(e.data) AND json_extract(e.data, '$.why') IS NOT NULL"            \
    " THEN ' (' || json_extract(e.data, '$.why') || ')' ELSE '' END FROM events e WHERE e.run = ?1"          \
    " AND e.kind IN ('resized', 'failed_attempt', 'elastic_stop', 'completed', 'failed', 'hung', 'preempted',"\
    " 'cancelled', 'lost') AND e.time >= a.start_time ORDER BY e.time, e.rowid LIMIT 1) AS ended"            \
    " FROM (SELECT p.attempt AS attempt, count(*) AS workers, count(DISTINCT p.host) AS nodes,"              \
    " group_concat(DISTINCT p.host) AS hosts, min(p.start_time) AS start_time,"                               \
    " max(" DB_SQL_PROC_END ") AS end_time FROM processes p WHERE p.run = ?1 GROUP BY p.attempt) a"           \
    " ORDER BY a.attempt"

/* ---- numbers without float noise ---- */

/* v in the shortest of %.15g, %.16g, %.17g that reads back as v ("1e-07", not
 * "9.9999999999999995e-08"). */
void db_fmt_real(double v, char *buf, size_t n);
/* 1 when s is a finite decimal number and nothing else (digits, sign, point,
 * exponent: not "0x10", "inf" or " 1"), its value in *v (may be NULL). */
int db_num_text(const char *s, double *v);
/* "2 nodes, 4 workers" (a negative count: "?"). */
void db_fmt_size(int64_t nodes, int64_t workers, char *buf, size_t n);
/* A config object's values that are numbers written as text with float noise
 * become their shortest text (in place). */
void db_config_clean(json_t *cfg);
/* json_dumps(j, flags) with every real in its shortest round-trip form
 * (db_fmt_real; "2.0" stays a real). The caller free()s it; NULL: out of memory. */
char *db_json_dumps(const json_t *j, size_t flags);

/* ---- the list of runs: filters, columns, sort ---- */

#define DB_KEY_MAX 128
#define DB_VALUE_MAX 512
#define DB_COLUMNS_MAX 48
#define DB_LIST_BINDS 512

enum db_filter_op { DB_F_EQ, DB_F_NE, DB_F_LT, DB_F_LE, DB_F_GT, DB_F_GE, DB_F_SUB };

/* One filter: KEY OP VALUE, e.g. learning_rate>0.01, optimizer=adagrad,
 * tag=baseline, name~tb-, note~'two words'. */
struct db_filter {
    char key[DB_KEY_MAX];     /* letters, digits, _ and . (config.KEY / metric.KEY say which) */
    enum db_filter_op op;     /* = (or ==), !=, <, <=, >, >=, ~ (contains, any case) */
    char value[DB_VALUE_MAX]; /* unquoted, or between ' or " (then never a number) */
    int quoted, numeric;      /* numeric: value is a number (num) */
    double num;
};

/* Parses expr into *f; nothing else (the key is looked up by db_runs_prepare).
 * TR_ERR_ARG with the reason in err (n bytes; not logged): empty, no key, no or
 * an unknown operator, no value, an unclosed quote, text after a closing quote,
 * a key or value too long, <, <=, >, >= with a value that is not a number. */
enum tr_status db_filter_parse(const char *expr, struct db_filter *f, char *err, size_t n) TR_WUR;

/* The error and hint of bad input to a list (a filter, a column, the sort),
 * for the caller to log or answer. */
struct db_msg {
    char error[1024], hint[1024];
};

/* What list of runs: the runs newest first, or by sort. */
struct db_list_opts {
    const char *status;          /* NULL: any */
    const char *name;            /* a part of the name or id; NULL: any */
    const char *const *filters;  /* nfilters db_filter expressions, all must hold */
    int nfilters;
    const char *columns;         /* "name,learning_rate,auc" (NULL: the default ones) */
    const char *sort;            /* "[-]KEY" (- : descending); NULL: newest first */
    int64_t limit;               /* <= 0: all */
};

/* A prepared list: its statement and each column's name. */
struct db_runs_query {
    sqlite3_stmt *st;
    int ncol;
    char *names[DB_COLUMNS_MAX];
    unsigned char json[DB_COLUMNS_MAX]; /* the column's text is JSON (tags) */
};

/* The list o asks for, prepared and bound (never SQL pasted from the input: keys
 * and values are bound parameters). A key is a run's field (id, name, status,
 * tags, note, start_time, duration_s, steps, last_loss, best_auc, samples_per_s,
 * nodes, workers, hosts, slurm_job_id, restarts, ...), else a parameter (a key
 * of some run's config), else a final metric (a key, or a.b path, of some run's
 * final_metrics); config.KEY and metric.KEY pick one. tag (filters only) matches
 * one of the run's tags. table 1: the cells as a table shows them (times,
 * durations, parameters without float noise; default columns id, name, status,
 * start, duration, steps, last_loss, best_auc, size, where, tags, note (cut at 40
 * characters)); 0: values for
 * JSON (parameters that are numbers as numbers; the default columns those of
 * `runs list --json`; with o->columns, id first). TR_ERR_ARG (m says why, with
 * close keys for an unknown one; not logged), TR_ERR_DB (logged), TR_ERR_NOMEM.
 * q is the caller's: db_runs_query_release (also after an error). */
enum tr_status db_runs_prepare(struct db *db, const struct db_list_opts *o, int table, struct db_runs_query *q,
                               struct db_msg *m) TR_WUR;
void db_runs_query_release(struct db_runs_query *q);

/* `runs list --json` (/api/runs): the array of the runs db_runs_prepare(o, 0)
 * finds, one object per run keyed by column. *out is the caller's (json_decref);
 * NULL on error. Errors as db_runs_prepare. */
enum tr_status db_json_runs(struct db *db, const struct db_list_opts *o, struct db_msg *m, json_t **out) TR_WUR;

/* `runs compare --json` (/api/compare): {runs: [summary per run], final_metrics:
 * {key: [value per run]} (numbers of final_metrics), config_diff: {key: [value
 * per run]} (only the keys that differ; null where a run lacks it), config_equal:
 * the count of keys the same in all}. ids: n existing runs. As db_json_runs. */
enum tr_status db_json_compare(struct db *db, char *const *ids, int n, json_t **out) TR_WUR;

/* Column c of st's current row as JSON (JSON text of config, final_metrics,
 * data, tags as its value). A new reference; NULL: out of memory. */
json_t *db_cell_json(sqlite3_stmt *st, int c);

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
