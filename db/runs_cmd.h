/* runs_cmd.h: what the files of `terarec runs ...` share (runs_cmd.c: options,
 * dispatch and the output helpers; runs_show.c: list, show, metrics, compare;
 * runs_export.c: export, plot; runs_rm.c: rm; runs_edit.c: tag, note, rename). Nothing outside db/ includes it;
 * the command itself is db.h's runs_cmd_main. */
#ifndef TR_DB_RUNS_CMD_H
#define TR_DB_RUNS_CMD_H

#include <stddef.h>

#include <jansson.h>
#include <sqlite3.h>

#include "db.h"

/* --format of export */
enum { FMT_CSV = 0, FMT_JSON = 1 };

/* The options of every subcommand (runs_cmd.c parses them). */
struct runs_cfg {
    char *db, *status, *name, *output, *metric, *title, *listen, *token_file, *columns, *sort, *file;
    char *filter_unused, *rm_unused; /* --filter and --rm are taken out before parsing: */
    char **filters, **rm;            /* every --filter (list) and --rm (tag), in argv */
    int nfilters, nrm;
    int json, limit, format, width, height, checkpoints, request_timeout;
    double smooth;          /* plot: EMA weight */
    int logscale, markers;  /* plot: a log y axis; evaluations and events marked */
};

/* One subcommand's context: its options, the open history (with the SQL
 * functions of query.h) and its positional arguments. */
struct runs_ctx {
    struct runs_cfg *cfg;
    struct db *db;
    char **args; /* the positional arguments (runs) */
    int nargs;
};

/* A text table: cells row-major, each tr_strdup'd. */
struct runs_table {
    char **cells;
    int ncol, nrow, cap;
};

/* Appends a cell (s NULL: "-"), the header row first; ncol cells make a row.
 * TR_ERR_NOMEM. */
enum tr_status runs_table_add(struct runs_table *t, const char *s) TR_WUR;
/* Frees the cells; t is empty again. */
void runs_table_release(struct runs_table *t);
/* Prints t on stdout, columns padded to their widest cell, each line after indent. */
void runs_table_print(const struct runs_table *t, const char *indent);

/* Column c of st's current row as text for a table ("-" for NULL, %.6g for reals). */
void runs_cell_text(sqlite3_stmt *st, int c, char *buf, size_t n);

/* Steps a prepared statement to its end and prints its rows as a table with a
 * header, under `indent`; "(none)" when it has no rows. Finalizes st. TR_ERR_DB
 * (logged), TR_ERR_NOMEM. */
enum tr_status runs_print_stmt(struct runs_ctx *x, sqlite3_stmt *st, const char *indent) TR_WUR;
/* runs_print_stmt of sql with its parameters bound as db_prepare's `types`. */
enum tr_status runs_query_print(struct runs_ctx *x, const char *indent, const char *sql, const char *types,
                                ...) TR_WUR;

/* Prints j (indented) on stdout, or writes it to path atomically. TR_ERR_NOMEM,
 * TR_ERR_IO (logged). */
enum tr_status runs_emit_json(json_t *j, const char *path) TR_WUR;

/* The runs named on the command line (at least min of them), resolved, in ids
 * (tr_malloc'd array of tr_malloc'd ids, x->nargs long; free with runs_free_ids,
 * also on error). TR_ERR_ARG, TR_ERR_NOT_FOUND (logged with a hint). */
enum tr_status runs_resolve(struct runs_ctx *x, int min, char ***ids) TR_WUR;
void runs_free_ids(struct runs_ctx *x, char **ids);

/* The subcommands; each returns the status runs_cmd_main makes the exit code of. */
enum tr_status runs_cmd_list(struct runs_ctx *x) TR_WUR;    /* runs_show.c */
enum tr_status runs_cmd_show(struct runs_ctx *x) TR_WUR;    /* runs_show.c */
enum tr_status runs_cmd_metrics(struct runs_ctx *x) TR_WUR; /* runs_show.c */
enum tr_status runs_cmd_compare(struct runs_ctx *x) TR_WUR; /* runs_show.c */
enum tr_status runs_cmd_export(struct runs_ctx *x) TR_WUR;  /* runs_export.c */
enum tr_status runs_cmd_plot(struct runs_ctx *x) TR_WUR;    /* runs_export.c */
enum tr_status runs_cmd_rm(struct runs_ctx *x) TR_WUR;      /* runs_rm.c */
enum tr_status runs_cmd_tag(struct runs_ctx *x) TR_WUR;     /* runs_edit.c */
enum tr_status runs_cmd_note(struct runs_ctx *x) TR_WUR;    /* runs_edit.c */
enum tr_status runs_cmd_rename(struct runs_ctx *x) TR_WUR;  /* runs_edit.c */

#endif
