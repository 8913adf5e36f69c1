/* db_internal.h: what the files of db/ share and nothing outside db/ includes:
 * the SQLite handle behind a struct db, statements prepared and bound from a
 * type string, the transaction helpers, and the chart writer of `runs plot`. */
#ifndef TR_DB_INTERNAL_H
#define TR_DB_INTERNAL_H

#include <stdarg.h>

#include <sqlite3.h>

#include "db.h"

/* The connection; valid until db_close. */
sqlite3 *db_sqlite(struct db *db);

/* Logs "run history 'PATH': <what>: <sqlite message>" and returns TR_ERR_DB. */
enum tr_status db_sql_error(struct db *db, const char *what);

/* Prepares sql and binds its parameters 1..n from `types`, one letter each:
 * t text (const char *, NULL binds NULL), i int64_t, n int, d double (NaN or inf
 * binds NULL). On error (logged) *st is NULL: TR_ERR_DB. */
enum tr_status db_prepare(struct db *db, sqlite3_stmt **st, const char *sql, const char *types, ...) TR_WUR;
enum tr_status db_preparev(struct db *db, sqlite3_stmt **st, const char *sql, const char *types, va_list ap) TR_WUR;

/* BEGIN IMMEDIATE (waits up to the busy timeout), COMMIT, ROLLBACK. TR_ERR_DB. */
enum tr_status db_begin(struct db *db) TR_WUR;
enum tr_status db_commit(struct db *db) TR_WUR;
void db_rollback(struct db *db);

/* One series of a chart: n points (x ascending), label shown in the legend. */
struct db_plot_series {
    const char *label;
    const double *x; /* (n) */
    const double *y; /* (n) */
    int n;
};

struct db_plot_opts {
    const char *path;  /* .png or .svg (the extension picks the format) */
    const char *title; /* NULL: none */
    const char *xlabel, *ylabel;
    int width, height; /* pixels (points for SVG) */
};

/* 1 when path ends in .png or .svg (case-insensitive), 0 otherwise. */
int db_plot_format_ok(const char *path);

/* Draws a line chart of the series (axes with ticks, grid, one colour per series,
 * legend) into o->path, written atomically. TR_ERR_ARG for another extension,
 * TR_ERR_IO when the file cannot be written, TR_ERR_NOMEM (all logged). */
enum tr_status db_plot_write(const struct db_plot_series *s, int n, const struct db_plot_opts *o) TR_WUR;

#endif
