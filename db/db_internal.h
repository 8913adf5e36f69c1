/* db_internal.h: what the files of db/ share and nothing outside db/ includes:
 * the SQLite handle behind a struct db, statements prepared and bound from a
 * type string, the transaction helpers, the schema (schema.c), the launcher's
 * identity and the lost-run check (lost.c), the web server (serve.c) and the chart
 * writer of `runs plot` (plot.c). The queries `runs` and `runs serve` share are
 * query.h's. */
#ifndef TR_DB_INTERNAL_H
#define TR_DB_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "db.h"

/* An open run history (db.c opens and closes it). */
struct db {
    sqlite3 *h;
    char *path;
    char *uri;           /* what sqlite3_open_v2 was given (a file: URI for readers) */
    int flags;           /* and its flags */
    int version;         /* the file's schema version */
    const char *journal; /* "wal" or "delete" */
    int (*busy)(void *, int); /* db_set_busy's handler, or NULL: the busy timeout */
    void *busy_arg;
};

/* The connection; valid until db_close. */
sqlite3 *db_sqlite(struct db *db);

/* Logs "run history 'PATH': <what>: <sqlite message>" and returns TR_ERR_DB. */
enum tr_status db_sql_error(struct db *db, const char *what);

/* Prepares sql and binds its parameters 1..n from `types`, one letter each:
 * t text (const char *, NULL binds NULL), i int64_t, u int64_t (negative: not
 * known, binds NULL), n int, d double (NaN or inf binds NULL). On error (logged)
 * *st is NULL: TR_ERR_DB. */
enum tr_status db_prepare(struct db *db, sqlite3_stmt **st, const char *sql, const char *types, ...) TR_WUR;
enum tr_status db_preparev(struct db *db, sqlite3_stmt **st, const char *sql, const char *types, va_list ap) TR_WUR;

/* Waits for a locked file through fn (SQLite's busy handler: nonzero waits on,
 * 0 gives up with SQLITE_BUSY) instead of the busy timeout, on db's connection
 * and on the one db_check_lost may open to record lost runs. */
void db_set_busy(struct db *db, int (*fn)(void *arg, int n), void *arg);

/* The lost-run check of an open (db_open, db_open_readonly), for a connection
 * from db_reopen. TR_ERR_DB, TR_ERR_NOMEM (logged). */
enum tr_status db_check_lost(struct db *db) TR_WUR;

/* BEGIN IMMEDIATE (waits up to the busy timeout), COMMIT, ROLLBACK. TR_ERR_DB. */
enum tr_status db_begin(struct db *db) TR_WUR;
enum tr_status db_commit(struct db *db) TR_WUR;
void db_rollback(struct db *db);

/* Runs sql (statements without results); on failure logs "run history 'PATH':
 * <what>: <sqlite message>" and returns TR_ERR_DB. */
enum tr_status db_exec(struct db *db, const char *sql, const char *what) TR_WUR;

/* 1 when this process could write path and its directory (a reader migrates an
 * old file and records lost runs then, through a writer's connection). */
int db_may_write(const char *path);

/* ---- the schema (schema.c) ------------------------------------------------------------------- */

/* The columns of table runs, in order (db.h); a file of schema version 2 has
 * the first DB_RUN_NCOLUMNS_V2 of them (a reader that cannot migrate it sees
 * tags and note as NULL: db_check_lost's view). */
#define DB_RUN_NCOLUMNS 25
#define DB_RUN_NCOLUMNS_V2 23
extern const char *const db_run_columns[DB_RUN_NCOLUMNS];

/* The file's schema version (PRAGMA user_version) in *v. TR_ERR_ARG for a file
 * that is not an SQLite database, TR_ERR_DB otherwise (both logged). */
enum tr_status db_schema_version(struct db *db, int *v) TR_WUR;

/* Logs that the file has the newer schema version v (with a hint); TR_ERR_ARG. */
enum tr_status db_schema_newer(const struct db *db, int v) TR_WUR;

/* Brings the schema up to DB_SCHEMA_VERSION, one migration at a time in one
 * BEGIN IMMEDIATE transaction; a file at version 0 must be empty. TR_ERR_ARG
 * (newer or foreign file), TR_ERR_DB (all logged). */
enum tr_status db_schema_migrate(struct db *db) TR_WUR;

/* ---- the launcher of a run, and lost runs (lost.c) --------------------------------------------- */

/* The start time of process pid (field 22 of /proc/PID/stat, clock ticks since
 * boot), or -1 when there is no such process or it is a zombie. */
int64_t db_proc_start(int64_t pid);

/* Where this process's pids mean what they say: the boot id and the pid
 * namespace ("BOOT_ID/pid:[INODE]") into buf; "" when unknown. */
void db_pid_space(char *buf, size_t n);

/* This host's name into buf ("localhost" when unknown). */
void db_host_name(char *buf, size_t n);

/* ---- `terarec runs serve` (serve.c) ---------------------------------------------------------- */

struct db_serve_cfg {
    const char *listen;     /* ADDR:PORT; NULL: 127.0.0.1:8321 */
    const char *token_file; /* NULL: no token (then only a loopback address is accepted) */
    int request_timeout_s;  /* a request's time limit (<= 0: 30 s); a slower one is answered 503 */
};

/* Serves the pages and /api/ of the run history db (opened with db_open_readonly;
 * each request reads through its own db_reopen) until SIGINT or SIGTERM, which
 * also interrupts the requests in flight; prints "terarec runs serve: http://HOST:PORT/ ..." on
 * stdout once listening. TR_ERR_ARG (logged with a hint): a bad --listen, a
 * non-loopback address without a token, an unreadable token file; TR_ERR_IO: it
 * cannot listen. Takes the process's SIGINT/SIGTERM while it runs. */
enum tr_status db_serve(struct db *db, const struct db_serve_cfg *cfg) TR_WUR;

/* s with & < > " ' as HTML entities into out (n bytes, always NUL-terminated;
 * cut at a whole entity when it does not fit). */
void db_html_escape(const char *s, char *out, size_t n);

/* The pages' script and style sheet (db/web/, made into C by the Makefile). */
extern const char db_web_app_js[];
extern const char db_web_style_css[];

/* One series of a chart: n points (x ascending), label shown in the legend. */
struct db_plot_series {
    const char *label;
    const double *x; /* (n) */
    const double *y; /* (n) */
    int n;
};

/* A vertical marker at step x: an evaluation, or an event (a restart, a
 * preemption, a resume), with a short label drawn beside it. */
struct db_plot_mark {
    double x;
    const char *label;
    int event; /* 0: an evaluation, 1: an event */
};

struct db_plot_opts {
    const char *path;  /* .png or .svg (the extension picks the format) */
    const char *title; /* NULL: none */
    const char *xlabel, *ylabel;
    int width, height; /* pixels (points for SVG) */
    double smooth;     /* EMA weight in [0, 1): 0 none; else the raw series faint, the smoothed one over it */
    int logscale;      /* a log10 y axis (values <= 0 are left out) */
    const struct db_plot_mark *marks; /* (nmarks) */
    int nmarks;
};

/* out[i]: the exponential moving average of y[0 .. i] with weight w in [0, 1),
 * debiased as TensorBoard's (out[0] == y[0]); non-finite values stay as they are
 * and do not move it; w 0 copies y. out may be y. Pure. */
void db_plot_ema(const double *y, double *out, int n, double w);

/* 1 when path ends in .png or .svg (case-insensitive), 0 otherwise. */
int db_plot_format_ok(const char *path);

/* Draws a line chart of the series (axes with ticks, grid, one colour per series,
 * the legend beside the plot, a lone point with its value, o's markers, smoothing
 * and log scale) into o->path, written atomically. TR_ERR_ARG for another extension,
 * TR_ERR_IO when the file cannot be written, TR_ERR_NOMEM (all logged). */
enum tr_status db_plot_write(const struct db_plot_series *s, int n, const struct db_plot_opts *o) TR_WUR;

#endif
