/* runs_cmd.c: `terarec runs <command>`: the options of every subcommand (one
 * table, masked per subcommand), the dispatch, `serve` (serve.c), and the output
 * helpers the subcommands share (tables for people, --json on stdout or to a file,
 * the runs named on the command line). The subcommands are runs_show.c,
 * runs_export.c and runs_rm.c; their queries' shared SQL and JSON are query.c's.
 * Only `rm`, `tag`, `note` and `rename` open the history for writing; the
 * others open it read-only (db_open_readonly); nothing here creates a history
 * that is not there. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../common/param.h"
#include "db_internal.h"
#include "query.h"
#include "runs_cmd.h"

static const char *const format_choices[] = {"csv", "json", NULL};

enum { S_LIST = 1, S_SHOW = 2, S_METRICS = 4, S_COMPARE = 8, S_EXPORT = 16, S_RM = 32, S_PLOT = 64, S_SERVE = 128,
       S_TAG = 256, S_NOTE = 512, S_RENAME = 1024, S_ALL = 2047,
       S_WRITES = S_RM | S_TAG | S_NOTE | S_RENAME };

static const unsigned opt_subs[] = {S_ALL,  S_LIST | S_SHOW | S_METRICS | S_COMPARE, S_LIST, S_LIST, S_METRICS,
                                    S_EXPORT, S_EXPORT | S_PLOT, S_PLOT, S_PLOT, S_PLOT, S_PLOT,
                                    S_SERVE,  S_SERVE, S_RM, S_SERVE, S_LIST, S_LIST, S_LIST, S_TAG, S_NOTE,
                                    S_PLOT,   S_PLOT,  S_PLOT};

static void all_opts(struct runs_cfg *c, struct tr_opt *o)
{
    const struct tr_opt opts[] = {
        {"db", TR_OPT_PATH, &c->db, NULL, "the run history (default: $TR_DB, else ~/.local/share/terarec/runs.db)",
         1, 0, NULL, NULL, 0, NULL, 0},
        {"json", TR_OPT_BOOL, &c->json, "false", "print JSON instead of a table", 1, 0, NULL, NULL, 0, NULL, 0},
        {"status", TR_OPT_STRING, &c->status, NULL,
         "only runs with this status (running, completed, failed, hung, preempted, cancelled, lost)",
         1, 0, NULL, NULL, 0, NULL, 0},
        {"limit", TR_OPT_INT, &c->limit, "20", "at most this many runs, newest first (0: all)", 0, 1e9, NULL, NULL,
         0, NULL, 0},
        {"name", TR_OPT_STRING, &c->name, NULL, "only the metric of this name (loss, learning_rate, ...)", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"format", TR_OPT_ENUM, &c->format, "csv", "csv (step,name,value rows) or json (the run and its tables)", 1,
         0, format_choices, NULL, 0, NULL, 0},
        {"output", TR_OPT_PATH, &c->output, NULL, "the file to write (-o; export: default stdout)", 1, 0, NULL, NULL,
         0, NULL, 0},
        {"metric", TR_OPT_STRING, &c->metric, "loss", "the metric to draw: loss, auc, logloss or any metric name", 1,
         0, NULL, NULL, 0, NULL, 0},
        {"title", TR_OPT_STRING, &c->title, NULL, "the chart's title (default: the metric)", 1, 0, NULL, NULL, 0, NULL,
         0},
        {"width", TR_OPT_INT, &c->width, "900", "chart width in pixels", 200, 10000, NULL, NULL, 0, NULL, 0},
        {"height", TR_OPT_INT, &c->height, "540", "chart height in pixels", 150, 10000, NULL, NULL, 0, NULL, 0},
        {"listen", TR_OPT_STRING, &c->listen, "127.0.0.1:8321",
         "ADDR:PORT to serve on (port 0: a free one); an address other than loopback needs --token_file", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"token_file", TR_OPT_PATH, &c->token_file, NULL,
         "a file holding a secret every request must carry (Authorization: Bearer, or ?token= once per browser)",
         1, 0, NULL, NULL, 0, NULL, 0},
        {"checkpoints", TR_OPT_BOOL, &c->checkpoints, "false",
         "also remove the runs' checkpoints (ROOT/runs/<ckpt_run>/ of a store on this file system; their chunks "
         "go at the next 'terarec ckpt gc')", 1, 0, NULL, NULL, 0, NULL, 0},
        {"request_timeout", TR_OPT_INT, &c->request_timeout, "30",
         "seconds a request may take; a slower one is answered 503", 1, 3600, NULL, NULL, 0, NULL, 0},
        {"filter", TR_OPT_STRING, &c->filter_unused, NULL,
         "only the runs where KEY OP VALUE holds (repeat: all must): a parameter (learning_rate>0.01, "
         "optimizer=adagrad), a final metric (auc>=0.79), tag=baseline, name~tb- (contains), status=completed; "
         "OP is = != < <= > >= ~", 1, 0, NULL, NULL, 0, NULL, 0},
        {"columns", TR_OPT_STRING, &c->columns, NULL,
         "the columns, comma-separated: run fields (id, name, status, tags, note, start, duration, steps, "
         "best_auc, samples_per_s, ...), parameters and final metrics, e.g. name,learning_rate,auc",
         1, 0, NULL, NULL, 0, NULL, 0},
        {"sort", TR_OPT_STRING, &c->sort, NULL, "sort by KEY (a column, parameter or metric; -KEY: descending)", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"rm", TR_OPT_STRING, &c->rm_unused, NULL, "remove this tag (repeatable)", 1, 0, NULL, NULL, 0, NULL, 0},
        {"file", TR_OPT_PATH, &c->file, NULL, "read the note from FILE (-F; - : standard input)", 1, 0, NULL, NULL,
         0, NULL, 0},
        {"smooth", TR_OPT_DOUBLE, &c->smooth, "0",
         "smoothing: the weight of an exponential moving average (0: none; 0.9: strong), drawn over the raw values",
         0, 0.999, NULL, NULL, 0, NULL, 0},
        {"log", TR_OPT_BOOL, &c->logscale, "false", "a log scale on the y axis (values <= 0 are left out)", 1, 0,
         NULL, NULL, 0, NULL, 0},
        {"markers", TR_OPT_BOOL, &c->markers, "true",
         "mark evaluations, restarts, preemptions and resumes (one run plotted)", 1, 0, NULL, NULL, 0, NULL, 0},
    };
    _Static_assert(TR_ARRAY_SIZE(opts) == TR_ARRAY_SIZE(opt_subs), "one mask per option");
    memcpy(o, opts, sizeof opts);
}

/* ---- output helpers ---------------------------------------------------------------------- */

enum tr_status runs_table_add(struct runs_table *t, const char *s)
{
    if ((t->nrow + 1) * t->ncol > t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        while (cap < (t->nrow + 1) * t->ncol)
            cap *= 2;
        char **c = tr_realloc(t->cells, (size_t)cap * sizeof *c);
        if (!c)
            return TR_ERR_NOMEM;
        memset(c + t->cap, 0, (size_t)(cap - t->cap) * sizeof *c);
        t->cells = c;
        t->cap = cap;
    }
    int i = 0;
    while (t->cells[t->nrow * t->ncol + i])
        i++;
    TR_ASSERT(i < t->ncol);
    if (!(t->cells[t->nrow * t->ncol + i] = tr_strdup(s ? s : "-")))
        return TR_ERR_NOMEM;
    if (i == t->ncol - 1)
        t->nrow++;
    return TR_OK;
}

void runs_table_release(struct runs_table *t)
{
    for (int i = 0; i < t->cap; i++)
        tr_free(t->cells[i]);
    tr_free(t->cells);
    memset(t, 0, sizeof *t);
}

void runs_table_print(const struct runs_table *t, const char *indent)
{
    int w[64] = {0};
    TR_ASSERT(t->ncol <= 64);
    for (int r = 0; r < t->nrow; r++)
        for (int c = 0; c < t->ncol; c++)
            w[c] = TR_MAX(w[c], (int)strlen(t->cells[r * t->ncol + c]));
    for (int r = 0; r < t->nrow; r++) {
        fputs(indent, stdout);
        for (int c = 0; c < t->ncol; c++) {
            if (c == t->ncol - 1)
                printf("%s\n", t->cells[r * t->ncol + c]);
            else
                printf("%-*s  ", w[c], t->cells[r * t->ncol + c]);
        }
    }
}

void runs_cell_text(sqlite3_stmt *st, int c, char *buf, size_t n)
{
    switch (sqlite3_column_type(st, c)) {
    case SQLITE_NULL:
        snprintf(buf, n, "-");
        break;
    case SQLITE_INTEGER:
        snprintf(buf, n, "%lld", (long long)sqlite3_column_int64(st, c));
        break;
    case SQLITE_FLOAT:
        snprintf(buf, n, "%.6g", sqlite3_column_double(st, c));
        break;
    default:
        snprintf(buf, n, "%s", (const char *)sqlite3_column_text(st, c));
    }
}

/* Steps a prepared statement to its end and prints its rows as a table with a
 * header, under `indent`; "(none)" when it has no rows. Finalizes st. */
enum tr_status runs_print_stmt(struct runs_ctx *x, sqlite3_stmt *st, const char *indent)
{
    enum tr_status rc = TR_OK;
    struct runs_table t = {.ncol = sqlite3_column_count(st)};
    for (int c = 0; c < t.ncol && rc == TR_OK; c++)
        rc = runs_table_add(&t, sqlite3_column_name(st, c));
    int s;
    while (rc == TR_OK && (s = sqlite3_step(st)) == SQLITE_ROW)
        for (int c = 0; c < t.ncol && rc == TR_OK; c++) {
            const char *v = (const char *)sqlite3_column_text(st, c);
            char buf[64];
            if (sqlite3_column_type(st, c) != SQLITE_TEXT) {
                runs_cell_text(st, c, buf, sizeof buf);
                v = buf;
            }
            rc = runs_table_add(&t, v);
        }
    if (rc == TR_OK && s != SQLITE_DONE)
        rc = db_sql_error(x->db, "cannot read");
    if (rc == TR_OK) {
        if (t.nrow <= 1)
            printf("%s(none)\n", indent);
        else
            runs_table_print(&t, indent);
    }
    runs_table_release(&t);
    sqlite3_finalize(st);
    return rc;
}

enum tr_status runs_query_print(struct runs_ctx *x, const char *indent, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, types);
    enum tr_status rc = db_preparev(x->db, &st, sql, types, ap);
    va_end(ap);
    TR_CHECK(rc);
    return runs_print_stmt(x, st, indent);
}

/* Prints j (indented) on stdout, or writes it to path atomically. */
enum tr_status runs_emit_json(json_t *j, const char *path)
{
    char *s = db_json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!s)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    if (path) {
        size_t n = strlen(s);
        s[n] = '\n';
        rc = tr_file_write_atomic(path, s, n + 1);
        s[n] = '\0';
    } else {
        printf("%s\n", s);
    }
    free(s);
    return rc;
}

/* The runs named on the command line, resolved, in ids (tr_malloc'd array of
 * tr_malloc'd ids). */
enum tr_status runs_resolve(struct runs_ctx *x, int min, char ***ids)
{
    *ids = NULL;
    if (x->nargs < min) {
        LOG_ERROR("give %s", min > 1 ? "at least two runs" : "a run (an id, a unique prefix of one, or a name)");
        LOG_HINT("run 'terarec runs list --db %s' to see the runs", db_path(x->db));
        return TR_ERR_ARG;
    }
    char **a = tr_calloc((size_t)x->nargs, sizeof *a);
    if (!a)
        return TR_ERR_NOMEM;
    *ids = a;
    for (int i = 0; i < x->nargs; i++)
        TR_CHECK(db_run_resolve(x->db, x->args[i], &a[i]));
    return TR_OK;
}

void runs_free_ids(struct runs_ctx *x, char **ids)
{
    for (int i = 0; ids && i < x->nargs; i++)
        tr_free(ids[i]);
    tr_free(ids);
}

/* ---- serve ------------------------------------------------------------------------------------------ */

static enum tr_status cmd_serve(struct runs_ctx *x)
{
    if (x->nargs > 0) {
        LOG_ERROR("unexpected argument '%s'", x->args[0]);
        LOG_HINT("'terarec runs serve' takes options only (--db, --listen, --token_file)");
        return TR_ERR_ARG;
    }
    struct db_serve_cfg sc = {.listen = x->cfg->listen, .token_file = x->cfg->token_file,
                              .request_timeout_s = x->cfg->request_timeout};
    return db_serve(x->db, &sc);
}

/* ---- dispatch ------------------------------------------------------------------------------------------ */

struct runs_sub {
    const char *name;
    enum tr_status (*fn)(struct runs_ctx *x);
    unsigned bit;
    const char *args;
    const char *help;
};

static const struct runs_sub subs[] = {
    {"list", runs_cmd_list, S_LIST, " [--filter EXPR]... [--columns A,B] [--sort -KEY]",
     "the runs, newest first: status, duration, steps, last loss, best auc, tags; filtered, chosen columns"},
    {"show", runs_cmd_show, S_SHOW, " RUN", "every field of a run, its last metrics, evals, checkpoints, attempts (their worlds), processes, events"},
    {"metrics", runs_cmd_metrics, S_METRICS, " RUN", "a run's metrics as step,name,value rows"},
    {"compare", runs_cmd_compare, S_COMPARE, " RUN RUN...", "runs side by side: their final metrics, and the config values that differ"},
    {"export", runs_cmd_export, S_EXPORT, " RUN", "a run as CSV (step,name,value) or JSON (all its tables)"},
    {"rm", runs_cmd_rm, S_RM, " RUN... [--checkpoints]",
     "delete runs and everything recorded about them (--checkpoints: and their checkpoints)"},
    {"plot", runs_cmd_plot, S_PLOT, " RUN... -o FILE.png|.svg", "a metric of runs over steps, as a line chart"},
    {"serve", cmd_serve, S_SERVE, "", "a read-only web page of the runs, their curves, checkpoints and events"},
    {"tag", runs_cmd_tag, S_TAG, " RUN TAG... [--rm TAG]", "add tags to a run (--rm: remove them)"},
    {"note", runs_cmd_note, S_NOTE, " RUN TEXT | -F FILE", "set a run's note ('' clears it)"},
    {"rename", runs_cmd_rename, S_RENAME, " RUN NEWNAME", "give a run another name (one no other run has)"},
};

void runs_cmd_table(FILE *fp)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(subs); i++)
        fprintf(fp, "  %-10s %s\n", subs[i].name, subs[i].help);
}

static void usage(FILE *fp)
{
    fprintf(fp, "usage: terarec runs <command> [RUN...] [--db PATH] [options]\n\ncommands:\n");
    runs_cmd_table(fp);
    fprintf(fp, "\nRUN is a run id, a unique prefix of one, or a unique run name.\n"
                "'terarec runs <command> --help' lists the options.\n");
}

/* Takes every --NAME VALUE and --NAME=VALUE out of optv (what split_args made)
 * into *vals (tr_malloc'd; the values are argv's), so that the option may repeat. */
static enum tr_status take_repeated(char **optv, int *nopt, const char *name, char ***vals, int *n)
{
    char flag[64];
    size_t fl = (size_t)snprintf(flag, sizeof flag, "--%s", name);
    char **v = tr_calloc((size_t)*nopt + 1, sizeof *v);
    if (!v)
        return TR_ERR_NOMEM;
    int k = 1, m = 0;
    for (int i = 1; i < *nopt; i++) {
        if (!strcmp(optv[i], flag) && i + 1 < *nopt)
            v[m++] = optv[++i];
        else if (!strncmp(optv[i], flag, fl) && optv[i][fl] == '=')
            v[m++] = optv[i] + fl + 1;
        else
            optv[k++] = optv[i];
    }
    *nopt = k;
    *vals = v;
    *n = m;
    return TR_OK;
}

/* Splits argv[1..] into options (with their values; -o is --output) and
 * positional arguments, so that runs may come before or after the options.
 * optv[0] = argv[0]; both arrays are tr_malloc'd (argc + 1 entries). */
static enum tr_status split_args(const struct tr_opt *opts, int argc, char **argv, char ***optv, int *nopt,
                                 char ***pos, int *npos)
{
    char **o = tr_calloc((size_t)argc + 1, sizeof *o), **p = tr_calloc((size_t)argc + 1, sizeof *p);
    *optv = o;
    *pos = p;
    if (!o || !p)
        return TR_ERR_NOMEM;
    static char output[] = "--output", file[] = "--file";
    int no = 0, np = 0, only_pos = 0;
    o[no++] = argv[0];
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || !strcmp(a, "-")) {
            p[np++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (!strcmp(a, "-o"))
            a = output;
        if (!strcmp(a, "-F"))
            a = file;
        o[no++] = a;
        if (a[1] != '-' || strchr(a, '=') || i + 1 >= argc)
            continue;
        /* an option with a value takes the next argument */
        char name[128];
        size_t k = 0;
        for (const char *q = a + 2; *q && k + 1 < sizeof name; q++)
            name[k++] = *q == '-' ? '_' : *q;
        name[k] = '\0';
        for (const struct tr_opt *t = opts; t->type != TR_OPT_END; t++)
            if (!strcmp(t->name, name) && t->type != TR_OPT_BOOL) {
                o[no++] = argv[++i];
                break;
            }
    }
    *nopt = no;
    *npos = np;
    return TR_OK;
}

int runs_cmd_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return tr_status_exit_code(argc < 2 ? TR_ERR_ARG : TR_OK);
    }
    const struct runs_sub *sub = NULL;
    for (size_t i = 0; i < TR_ARRAY_SIZE(subs); i++)
        if (!strcmp(argv[1], subs[i].name))
            sub = &subs[i];
    if (!sub) {
        LOG_ERROR("'%s' is not a terarec runs command", argv[1]);
        LOG_HINT("run 'terarec runs --help' to list the commands");
        return tr_status_exit_code(TR_ERR_ARG);
    }
    struct runs_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    struct tr_opt all[TR_ARRAY_SIZE(opt_subs)], opts[TR_ARRAY_SIZE(opt_subs) + 1];
    all_opts(&cfg, all);
    int nopts = 0;
    for (size_t i = 0; i < TR_ARRAY_SIZE(opt_subs); i++)
        if (opt_subs[i] & sub->bit)
            opts[nopts++] = all[i];
    opts[nopts] = (struct tr_opt){0};
    struct runs_ctx x = {.cfg = &cfg};
    char **optv = NULL;
    int nopt = 0, want = 0;
    enum tr_status rc = split_args(opts, argc - 1, argv + 1, &optv, &nopt, &x.args, &x.nargs);
    if (rc == TR_OK && (sub->bit & S_LIST))
        rc = take_repeated(optv, &nopt, "filter", &cfg.filters, &cfg.nfilters);
    if (rc == TR_OK && (sub->bit & S_TAG))
        rc = take_repeated(optv, &nopt, "rm", &cfg.rm, &cfg.nrm);
    if (rc == TR_OK)
        rc = tr_opt_parse(opts, nopt, optv, NULL, &want);
    if (rc != TR_OK)
        goto exit;
    if (want & TR_OPT_WANT_HELP) {
        char u[320];
        snprintf(u, sizeof u, "usage: terarec runs %s%s [options]\n\n%s", sub->name, sub->args, sub->help);
        tr_opt_print_help(opts, u, stdout);
        goto exit;
    }
    if (sub->bit == S_PLOT) {
        if (!cfg.output) {
            LOG_ERROR("plot needs -o FILE.png or -o FILE.svg");
            LOG_HINT("the extension picks the format");
            rc = TR_ERR_ARG;
            goto exit;
        }
        if (!db_plot_format_ok(cfg.output)) {
            LOG_ERROR("cannot plot to '%s': the file must end in .png or .svg", cfg.output);
            LOG_HINT("the extension picks the format");
            rc = TR_ERR_ARG;
            goto exit;
        }
    }
    if (sub->bit & S_WRITES) /* one transaction each, waiting out other writers (db_open) */
        TR_CHECK_GOTO(db_open(cfg.db, 0, &x.db), rc, exit);
    else /* readers never block a job's writes, and read what they cannot write */
        TR_CHECK_GOTO(db_open_readonly(cfg.db, &x.db), rc, exit);
    rc = sub->fn(&x);
exit:
    db_close(x.db);
    tr_free(optv);
    tr_free(x.args);
    tr_free(cfg.filters);
    tr_free(cfg.rm);
    tr_opt_release(opts);
    fflush(stdout);
    return tr_status_exit_code(rc);
}
