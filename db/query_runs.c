/* query_runs.c: the one list of runs that `terarec runs list` and the page's list
 * (/api/runs) share: the filters (KEY OP VALUE on a run's field, a parameter of
 * its config or a final metric, its tags), the columns and the sort, made into
 * SQL whose every key and value is a bound parameter; and `runs compare`'s
 * config diff and final-metrics table (/api/compare). It only reads and prints
 * nothing (query.h). */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "query.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"

/* ---- the list of runs: filters, columns, sort (`runs list`, the page's list) ------------------ */

static const char *const op_text[] = {"=", "!=", "<", "<=", ">", ">=", "~"};

enum tr_status db_filter_parse(const char *expr, struct db_filter *f, char *err, size_t n)
{
    static const struct {
        const char *s;
        enum db_filter_op op;
    } ops[] = {{"!=", DB_F_NE}, {"<=", DB_F_LE}, {">=", DB_F_GE}, {"==", DB_F_EQ},
               {"=", DB_F_EQ},  {"<", DB_F_LT},  {">", DB_F_GT},  {"~", DB_F_SUB}};
    memset(f, 0, sizeof *f);
    const char *p = expr ? expr : "";
    while (isspace((unsigned char)*p))
        p++;
    if (!*p) {
        snprintf(err, n, "an empty filter");
        return TR_ERR_ARG;
    }
    size_t k = 0;
    while (isalnum((unsigned char)p[k]) || p[k] == '_' || p[k] == '.')
        k++;
    if (k == 0 || isdigit((unsigned char)*p) || *p == '.') {
        snprintf(err, n, "a filter starts with a key (a parameter, a final metric, name, status or tag), not '%.40s'",
                 p);
        return TR_ERR_ARG;
    }
    if (k >= sizeof f->key) {
        snprintf(err, n, "the key '%.40s...' is longer than %zu characters", p, sizeof f->key - 1);
        return TR_ERR_ARG;
    }
    memcpy(f->key, p, k);
    p += k;
    while (isspace((unsigned char)*p))
        p++;
    size_t o = 0;
    while (o < TR_ARRAY_SIZE(ops) && strncmp(p, ops[o].s, strlen(ops[o].s)) != 0)
        o++;
    if (o == TR_ARRAY_SIZE(ops)) {
        if (*p)
            snprintf(err, n, "'%.20s' after '%s' is not an operator (=, !=, <, <=, >, >=, ~)", p, f->key);
        else
            snprintf(err, n, "no operator after '%s' (=, !=, <, <=, >, >=, ~)", f->key);
        return TR_ERR_ARG;
    }
    f->op = ops[o].op;
    p += strlen(ops[o].s);
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\'' || *p == '"') {
        const char q = *p++, *end = strchr(p, q);
        if (!end) {
            snprintf(err, n, "no closing %c after '%.40s'", q, p);
            return TR_ERR_ARG;
        }
        k = (size_t)(end - p);
        for (const char *t = end + 1; *t; t++)
            if (!isspace((unsigned char)*t)) {
                snprintf(err, n, "'%.40s' after the closing %c", t, q);
                return TR_ERR_ARG;
            }
        f->quoted = 1;
    } else {
        k = strlen(p);
        while (k && isspace((unsigned char)p[k - 1]))
            k--;
        if (k == 0) {
            snprintf(err, n, "no value after '%s%s'", f->key, op_text[f->op]);
            return TR_ERR_ARG;
        }
    }
    if (k >= sizeof f->value) {
        snprintf(err, n, "the value of '%s' is longer than %zu characters", f->key, sizeof f->value - 1);
        return TR_ERR_ARG;
    }
    memcpy(f->value, p, k);
    f->numeric = !f->quoted && db_num_text(f->value, &f->num);
    if (f->op >= DB_F_LT && f->op <= DB_F_GE && !f->numeric) {
        snprintf(err, n, "'%s' compares numbers, and '%s' is not one", op_text[f->op], f->value);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

/* The fields of a run that every run has (also the default columns). sql: its
 * value (for --json, filters and the sort); table: as a table shows it (NULL:
 * sql); header: a table's header (NULL: name); json: the text is JSON. */
struct field {
    const char *name, *sql, *table, *header;
    int json;
};
#define TAGS_ARRAY "json_each(CASE WHEN json_valid(r.tags) THEN r.tags ELSE '[]' END)"
static const struct field fields[] = {
    {"id", "r.id", NULL, NULL, 0},
    {"name", "r.name", NULL, NULL, 0},
    {"status", "r.status", NULL, NULL, 0},
    {"start_time", "r.start_time", "tr_time(r.start_time)", "start", 0},
    {"end_time", "r.end_time", "tr_time(r.end_time)", "end", 0},
    {"duration_s", "coalesce(r.end_time, CAST(strftime('%s', 'now') AS REAL)) - r.start_time",
     "tr_dur(r.start_time, r.end_time)", "duration", 0},
    {"steps", "(SELECT max(step) FROM metrics WHERE run = r.id)", NULL, NULL, 0},
    {"last_loss", DB_SQL_LAST_LOSS, NULL, NULL, 0},
    {"best_auc", "(SELECT max(auc) FROM evals WHERE run = r.id)", NULL, NULL, 0},
    {"samples_per_s",
     "(SELECT value FROM metrics m WHERE m.run = r.id AND m.name = 'samples_per_s' ORDER BY step DESC, m.rowid DESC"
     " LIMIT 1)", NULL, NULL, 0},
    {"nodes", "r.nodes", NULL, NULL, 0},
    {"workers", "r.workers", NULL, NULL, 0},
    {"size", "tr_size(r.nodes, r.workers)", NULL, "nodes, workers", 0},
    {"hosts", "r.hosts", NULL, NULL, 0},
    {"where", "coalesce('slurm ' || r.slurm_job_id, r.hosts)", NULL, "hosts/job", 0},
    {"slurm_job_id", "r.slurm_job_id", NULL, NULL, 0},
    {"restarts", "r.restarts", NULL, NULL, 0},
    {"resumed_from", "r.resumed_from", NULL, NULL, 0},
    {"git_hash", "r.git_hash", NULL, NULL, 0},
    {"reason", "r.reason", NULL, NULL, 0},
    {"tags", "r.tags", "(SELECT group_concat(value, ',') FROM " TAGS_ARRAY ")", NULL, 1},
    {"note", "r.note",
     "CASE WHEN length(r.note) > 40 THEN substr(replace(r.note, char(10), ' '), 1, 39) || '...'"
     " ELSE replace(r.note, char(10), ' ') END", NULL, 0},
};
static const char default_table[] =
    "id,name,status,start_time,duration_s,steps,last_loss,best_auc,size,where,tags,note";
static const char default_json[] = "id,name,status,start_time,end_time,duration_s,steps,last_loss,best_auc,"
                                   "samples_per_s,nodes,workers,hosts,slurm_job_id,restarts,resumed_from,tags,note";

/* SQL text and its parameters, numbered as they come (?1, ?2, ...). */
struct sqlb {
    char *s;
    size_t n, cap;
    int oom, np;
    struct {
        char type; /* t text, d double, i integer */
        char *t;
        double d;
        int64_t i;
    } p[DB_LIST_BINDS];
};

static void sb_add(struct sqlb *b, const char *text)
{
    size_t l = strlen(text);
    if (b->oom)
        return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = TR_MAX(b->cap * 2, b->n + l + 256);
        char *s = tr_realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, text, l + 1);
    b->n += l;
}

/* A new parameter's number, or 0 (too many, or out of memory: b->oom). */
static int sb_param(struct sqlb *b, char type, const char *t, double d, int64_t i)
{
    if (b->np >= DB_LIST_BINDS) {
        b->oom = 1;
        return 0;
    }
    int k = b->np++;
    b->p[k].type = type;
    b->p[k].d = d;
    b->p[k].i = i;
    b->p[k].t = NULL;
    if (t && !(b->p[k].t = tr_strdup(t)))
        b->oom = 1;
    return k + 1;
}

/* Appends "?N" of a new parameter. */
static void sb_bind(struct sqlb *b, char type, const char *t, double d, int64_t i)
{
    char q[16];
    snprintf(q, sizeof q, "?%d", sb_param(b, type, t, d, i));
    sb_add(b, q);
}

static void sb_release(struct sqlb *b)
{
    tr_free(b->s);
    for (int i = 0; i < b->np; i++)
        tr_free(b->p[i].t);
    memset(b, 0, sizeof *b);
}

/* What a key of a filter, a column or the sort names. */
struct key {
    enum { KEY_FIELD, KEY_PARAM, KEY_METRIC, KEY_TAG } kind;
    const struct field *f;
    char path[DB_KEY_MAX * 2 + 8]; /* $."a"."b" of a parameter or metric */
    char name[DB_KEY_MAX];
};

/* 1 when some run's `col` (config, final_metrics) has path; -1 on an error (logged). */
static int json_key_exists(struct db *db, const char *col, const char *path)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT 1 FROM runs WHERE CASE WHEN json_valid(%s) THEN json_type(%s, ?) END IS NOT NULL"
             " LIMIT 1", col, col);
    sqlite3_stmt *st = NULL;
    if (db_prepare(db, &st, sql, "t", path) != TR_OK)
        return -1;
    int s = sqlite3_step(st);
    sqlite3_finalize(st);
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
        (void)db_sql_error(db, "cannot read the runs");
        return -1;
    }
    return s == SQLITE_ROW;
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[DB_KEY_MAX + 1];
    if (la > DB_KEY_MAX || lb > DB_KEY_MAX)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t c = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            row[j] = TR_MIN(c, TR_MIN(row[j - 1] + 1, up + 1));
            diag = up;
        }
    }
    return row[lb];
}

/* The hint for an unknown key: the keys close to it, each with what it is. */
static void close_keys(struct db *db, const char *key, char *hint, size_t n)
{
    static const char sql[] =
        "SELECT DISTINCT key, 'parameter' FROM runs, json_each(CASE WHEN json_valid(runs.config) THEN runs.config"
        " ELSE '{}' END) UNION SELECT DISTINCT key, 'final metric' FROM runs, json_each(CASE WHEN"
        " json_valid(runs.final_metrics) THEN runs.final_metrics ELSE '{}' END)"
        " WHERE json_each.type IN ('integer', 'real') ORDER BY 1";
    size_t k = (size_t)snprintf(hint, n, "close keys:");
    const size_t start = k;
    size_t best = strlen(key) / 3 + 1;
    for (size_t i = 0; i < TR_ARRAY_SIZE(fields) && k < n; i++)
        if (edit_distance(key, fields[i].name) <= best || strstr(fields[i].name, key))
            k += (size_t)snprintf(hint + k, n - k, " %s (a run's field),", fields[i].name);
    sqlite3_stmt *st = NULL;
    if (db_prepare(db, &st, sql, "") == TR_OK) {
        while (sqlite3_step(st) == SQLITE_ROW && k < n) {
            const char *c = (const char *)sqlite3_column_text(st, 0);
            if (c && (edit_distance(key, c) <= best || (strlen(key) >= 3 && strstr(c, key))))
                k += (size_t)snprintf(hint + k, n - k, " %s (%s),", c, (const char *)sqlite3_column_text(st, 1));
        }
        sqlite3_finalize(st);
    }
    if (k == start)
        snprintf(hint, n, "parameters are the keys of a run's config, final metrics those of its final_metrics "
                          "('terarec runs show RUN' shows both); fields: id, name, status, tags, note, steps, "
                          "best_auc, samples_per_s, ...");
    else if (k < n)
        hint[k - 1] = '\0';
}

/* Builds the path $."a"."b" of a dotted key (one segment for a parameter). */
static void key_path(const char *key, int dotted, char *path, size_t n)
{
    size_t k = (size_t)snprintf(path, n, "$.\"");
    for (const char *p = key; *p && k + 4 < n; p++) {
        if (*p == '.' && dotted)
            k += (size_t)snprintf(path + k, n - k, "\".\"");
        else
            path[k++] = *p;
    }
    snprintf(path + k, n - k, "\"");
}

/* Resolves key (what: how the error names where it came from). TR_ERR_ARG
 * (m filled), TR_ERR_DB (logged). */
static enum tr_status resolve_key(struct db *db, const char *key, int allow_tag, const char *what, struct key *k,
                                  struct db_msg *m)
{
    memset(k, 0, sizeof *k);
    size_t kl = strlen(key);
    int ok = kl > 0 && kl < DB_KEY_MAX && !isdigit((unsigned char)key[0]);
    for (const char *p = key; *p; p++)
        ok &= isalnum((unsigned char)*p) || *p == '_' || *p == '.';
    if (!ok) {
        snprintf(m->error, sizeof m->error, "%s: '%s' is not a key (letters, digits, _ and .)", what, key);
        snprintf(m->hint, sizeof m->hint, "a key is a run's field (name, status, ...), a parameter or a final metric");
        return TR_ERR_ARG;
    }
    snprintf(k->name, sizeof k->name, "%s", key);
    int only = 0; /* 1: a parameter, 2: a metric */
    if (!strncmp(key, "config.", 7) || !strncmp(key, "param.", 6)) {
        only = 1;
        key = strchr(key, '.') + 1;
    } else if (!strncmp(key, "metric.", 7)) {
        only = 2;
        key += 7;
    }
    if (!only) {
        if (allow_tag && !strcmp(key, "tag")) {
            k->kind = KEY_TAG;
            return TR_OK;
        }
        for (size_t i = 0; i < TR_ARRAY_SIZE(fields); i++)
            if (!strcmp(key, fields[i].name) || (fields[i].header && !strcmp(key, fields[i].header))) {
                k->kind = KEY_FIELD;
                k->f = &fields[i];
                return TR_OK;
            }
    }
    if (only != 2) {
        key_path(key, 0, k->path, sizeof k->path);
        int e = json_key_exists(db, "config", k->path);
        if (e < 0)
            return TR_ERR_DB;
        if (e) {
            k->kind = KEY_PARAM;
            return TR_OK;
        }
    }
    if (only != 1) {
        key_path(key, 1, k->path, sizeof k->path);
        int e = json_key_exists(db, "final_metrics", k->path);
        if (e < 0)
            return TR_ERR_DB;
        if (e) {
            k->kind = KEY_METRIC;
            return TR_OK;
        }
    }
    snprintf(m->error, sizeof m->error, "%s: no run has a %s '%s'", what,
             only == 1 ? "parameter" : only == 2 ? "final metric" : "field, parameter or final metric", key);
    close_keys(db, key, m->hint, sizeof m->hint);
    return TR_ERR_ARG;
}

/* Appends the value of k: table 1 as a table shows it, 0 as a value (JSON, sort,
 * filters). */
static void key_value(struct sqlb *b, const struct key *k, int table)
{
    if (k->kind == KEY_FIELD) {
        sb_add(b, "(");
        sb_add(b, table && k->f->table ? k->f->table : k->f->sql);
        sb_add(b, ")");
        return;
    }
    const char *col = k->kind == KEY_PARAM ? "r.config" : "r.final_metrics";
    sb_add(b, k->kind == KEY_PARAM ? (table ? "tr_fmt(" : "tr_val(") : "(");
    sb_add(b, "CASE WHEN json_valid(");
    sb_add(b, col);
    sb_add(b, ") THEN json_extract(");
    sb_add(b, col);
    sb_add(b, ", ");
    sb_bind(b, 't', k->path, 0, 0);
    sb_add(b, ") END)");
}

/* Appends one filter's condition. */
static void filter_sql(struct sqlb *b, const struct key *k, const struct db_filter *f)
{
    if (k->kind == KEY_TAG) {
        sb_add(b, f->op == DB_F_NE ? "NOT EXISTS" : "EXISTS");
        sb_add(b, " (SELECT 1 FROM " TAGS_ARRAY " WHERE ");
        sb_add(b, f->op == DB_F_SUB ? "instr(lower(value), lower(" : "value = ");
        sb_bind(b, 't', f->value, 0, 0);
        sb_add(b, f->op == DB_F_SUB ? ")) > 0)" : ")");
        return;
    }
    if (f->op == DB_F_SUB) {
        sb_add(b, "instr(lower(CAST(");
        key_value(b, k, 0);
        sb_add(b, " AS TEXT)), lower(");
        sb_bind(b, 't', f->value, 0, 0);
        sb_add(b, ")) > 0");
        return;
    }
    if (f->op >= DB_F_LT && f->op <= DB_F_GE) {
        sb_add(b, "tr_num(");
        key_value(b, k, 0);
        sb_add(b, ") ");
        sb_add(b, op_text[f->op]);
        sb_add(b, " ");
        sb_bind(b, 'd', NULL, f->num, 0);
        return;
    }
    if (f->op == DB_F_NE) {
        sb_add(b, "(");
        key_value(b, k, 0);
        sb_add(b, " IS NULL OR NOT ");
    }
    if (f->numeric) { /* a number equals a number, whether stored as one or as text */
        sb_add(b, "(CASE WHEN tr_num(");
        key_value(b, k, 0);
        sb_add(b, ") IS NOT NULL THEN tr_num(");
        key_value(b, k, 0);
        sb_add(b, ") = ");
        sb_bind(b, 'd', NULL, f->num, 0);
        sb_add(b, " ELSE CAST(");
        key_value(b, k, 0);
        sb_add(b, " AS TEXT) = ");
        sb_bind(b, 't', f->value, 0, 0);
        sb_add(b, " END)");
    } else {
        sb_add(b, "coalesce(CAST(");
        key_value(b, k, 0);
        sb_add(b, " AS TEXT) = ");
        sb_bind(b, 't', f->value, 0, 0);
        sb_add(b, ", 0)");
    }
    if (f->op == DB_F_NE)
        sb_add(b, ")");
}

void db_runs_query_release(struct db_runs_query *q)
{
    sqlite3_finalize(q->st);
    for (int i = 0; i < q->ncol; i++)
        tr_free(q->names[i]);
    memset(q, 0, sizeof *q);
}

enum tr_status db_runs_prepare(struct db *db, const struct db_list_opts *o, int table, struct db_runs_query *q,
                               struct db_msg *m)
{
    enum tr_status rc = TR_OK;
    struct sqlb *b = tr_calloc(1, sizeof *b);
    char *cols = tr_strdup(o->columns && *o->columns ? o->columns : table ? default_table : default_json);
    struct key k;
    memset(q, 0, sizeof *q);
    m->error[0] = m->hint[0] = '\0';
    if (!b || !cols) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    sb_add(b, "SELECT ");
    /* --json with chosen columns: the id first, always */
    int want_id = !table && o->columns && *o->columns;
    char *save = NULL;
    for (char *c = strtok_r(cols, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*c))
            c++;
        for (size_t l = strlen(c); l && isspace((unsigned char)c[l - 1]); l--)
            c[l - 1] = '\0';
        if (!*c)
            continue;
        if (q->ncol >= DB_COLUMNS_MAX - 1) {
            snprintf(m->error, sizeof m->error, "--columns: more than %d columns", DB_COLUMNS_MAX - 1);
            rc = TR_ERR_ARG;
            goto exit;
        }
        TR_CHECK_GOTO(resolve_key(db, c, 0, "--columns", &k, m), rc, exit);
        if (want_id && k.kind == KEY_FIELD && !strcmp(k.f->name, "id"))
            want_id = 0;
        if (q->ncol == 0 && want_id) {
            sb_add(b, "r.id");
            if (!(q->names[q->ncol++] = tr_strdup("id"))) {
                rc = TR_ERR_NOMEM;
                goto exit;
            }
        }
        if (q->ncol)
            sb_add(b, ", ");
        key_value(b, &k, table);
        const char *name = table && k.kind == KEY_FIELD && k.f->header ? k.f->header : k.name;
        q->json[q->ncol] = !table && k.kind == KEY_FIELD && k.f->json;
        if (!(q->names[q->ncol++] = tr_strdup(name))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
    }
    if (q->ncol == 0) {
        snprintf(m->error, sizeof m->error, "--columns: no column named");
        snprintf(m->hint, sizeof m->hint, "e.g. --columns name,learning_rate,auc");
        rc = TR_ERR_ARG;
        goto exit;
    }
    sb_add(b, " FROM runs r WHERE 1");
    if (o->status) {
        sb_add(b, " AND r.status = ");
        sb_bind(b, 't', o->status, 0, 0);
    }
    if (o->name) {
        sb_add(b, " AND (instr(r.id, ");
        int p = sb_param(b, 't', o->name, 0, 0);
        char t[96];
        snprintf(t, sizeof t, "?%d) > 0 OR instr(coalesce(r.name, ''), ?%d) > 0)", p, p);
        sb_add(b, t);
    }
    for (int i = 0; i < o->nfilters; i++) {
        struct db_filter f;
        char what[DB_VALUE_MAX + DB_KEY_MAX + 32];
        snprintf(what, sizeof what, "filter '%s'", o->filters[i]);
        char why[256];
        if (db_filter_parse(o->filters[i], &f, why, sizeof why) != TR_OK) {
            snprintf(m->error, sizeof m->error, "%.700s: %s", what, why);
            snprintf(m->hint, sizeof m->hint, "a filter is KEY OP VALUE: learning_rate>0.01, optimizer=adagrad, "
                                              "tag=baseline, name~tb- (OP: = != < <= > >= ~; quote a value with spaces)");
            rc = TR_ERR_ARG;
            goto exit;
        }
        TR_CHECK_GOTO(resolve_key(db, f.key, 1, what, &k, m), rc, exit);
        if (k.kind == KEY_TAG && f.op != DB_F_EQ && f.op != DB_F_NE && f.op != DB_F_SUB) {
            snprintf(m->error, sizeof m->error, "%s: a tag is matched with =, != or ~", what);
            rc = TR_ERR_ARG;
            goto exit;
        }
        sb_add(b, " AND ");
        filter_sql(b, &k, &f);
    }
    sb_add(b, " ORDER BY ");
    if (o->sort && *o->sort) {
        const char *s = o->sort;
        int desc = *s == '-';
        if (*s == '-' || *s == '+')
            s++;
        TR_CHECK_GOTO(resolve_key(db, s, 0, "--sort", &k, m), rc, exit);
        /* runs without the key last, either way; numbers as numbers */
        for (int pass = 0; pass < 2; pass++) {
            sb_add(b, "coalesce(tr_num(");
            key_value(b, &k, 0);
            sb_add(b, "), ");
            key_value(b, &k, 0);
            sb_add(b, pass == 0 ? ") IS NULL, " : desc ? ") DESC, " : ") ASC, ");
        }
    }
    sb_add(b, "r.start_time DESC, r.rowid DESC LIMIT ");
    sb_bind(b, 'i', NULL, 0, o->limit > 0 ? o->limit : -1);
    if (b->oom) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(db_prepare(db, &q->st, b->s, ""), rc, exit);
    for (int i = 0; i < b->np; i++) {
        int s = b->p[i].type == 't'   ? sqlite3_bind_text(q->st, i + 1, b->p[i].t, -1, SQLITE_TRANSIENT)
                : b->p[i].type == 'd' ? sqlite3_bind_double(q->st, i + 1, b->p[i].d)
                                      : sqlite3_bind_int64(q->st, i + 1, b->p[i].i);
        if (s != SQLITE_OK) {
            rc = db_sql_error(db, "cannot bind a filter");
            goto exit;
        }
    }
exit:
    if (rc != TR_OK)
        db_runs_query_release(q);
    sb_release(b);
    tr_free(b);
    tr_free(cols);
    return rc;
}

enum tr_status db_json_runs(struct db *db, const struct db_list_opts *o, struct db_msg *m, json_t **out)
{
    struct db_runs_query q;
    *out = NULL;
    TR_CHECK(db_runs_prepare(db, o, 0, &q, m));
    enum tr_status rc = TR_OK;
    json_t *a = json_array();
    int s = SQLITE_DONE;
    while (a && (s = sqlite3_step(q.st)) == SQLITE_ROW) {
        json_t *r = json_object();
        for (int c = 0; r && c < q.ncol; c++) {
            json_t *v = NULL;
            if (q.json[c] && sqlite3_column_type(q.st, c) == SQLITE_TEXT)
                v = json_loads((const char *)sqlite3_column_text(q.st, c), JSON_DECODE_ANY, NULL);
            json_object_set_new(r, q.names[c], v ? v : db_cell_json(q.st, c));
        }
        if (!r || json_array_append_new(a, r) != 0) {
            rc = TR_ERR_NOMEM;
            break;
        }
    }
    if (!a)
        rc = TR_ERR_NOMEM;
    else if (rc == TR_OK && s != SQLITE_DONE)
        rc = db_sql_error(db, "cannot read the runs");
    db_runs_query_release(&q);
    if (rc != TR_OK)
        json_decref(a);
    else
        *out = a;
    return rc;
}

/* ---- compare ------------------------------------------------------------------------------ */

#define Q_SUMMARY                                                                                             \
    "SELECT r.id AS id, r.name AS name, r.status AS status, r.tags AS tags,"                                  \
    " (SELECT max(step) FROM metrics WHERE run = r.id) AS steps, " DB_SQL_LAST_LOSS " AS final_loss,"         \
    " (SELECT max(auc) FROM evals WHERE run = r.id) AS best_auc,"                                             \
    " (SELECT auc FROM evals WHERE run = r.id ORDER BY step DESC, rowid DESC LIMIT 1) AS last_auc,"          \
    " (SELECT logloss FROM evals WHERE run = r.id ORDER BY step DESC, rowid DESC LIMIT 1) AS logloss,"       \
    " (SELECT value FROM metrics m WHERE m.run = r.id AND m.name = 'samples_per_s'"                         \
    "  ORDER BY step DESC, m.rowid DESC LIMIT 1) AS samples_per_s, r.final_metrics AS final_metrics,"        \
    " r.config AS config FROM runs r WHERE r.id = ?"

/* key -> array of one value per run (null where a run lacks it), for the keys of
 * objs[0..n) that pass keep (NULL: all); *same counts the keys whose values are
 * the same in every run (those left out when differ is set). */
static json_t *by_key(json_t *const *objs, int n, int differ, int numbers_only, size_t *same)
{
    json_t *d = json_object();
    *same = 0;
    for (int i = 0; d && i < n; i++) {
        const char *k;
        json_t *v;
        json_object_foreach(objs[i], k, v)
        {
            if (json_object_get(d, k) || (numbers_only && !json_is_number(v)))
                continue;
            int equal = 1;
            json_t *first = json_object_get(objs[0], k);
            for (int j = 1; j < n; j++)
                if (!first || !json_object_get(objs[j], k) || !json_equal(first, json_object_get(objs[j], k)))
                    equal = 0;
            if (equal && differ) {
                if (i == 0)
                    (*same)++;
                continue;
            }
            json_t *a = json_array();
            for (int j = 0; a && j < n; j++) {
                json_t *e = json_object_get(objs[j], k);
                json_array_append(a, e && (!numbers_only || json_is_number(e)) ? e : json_null());
            }
            json_object_set_new(d, k, a);
        }
    }
    return d;
}

enum tr_status db_json_compare(struct db *db, char *const *ids, int n, json_t **out)
{
    enum tr_status rc = TR_OK;
    json_t *rows = json_array(), *o = NULL;
    json_t **cfgs = tr_calloc((size_t)TR_MAX(n, 1) * 2, sizeof *cfgs), **fms = cfgs ? cfgs + TR_MAX(n, 1) : NULL;
    *out = NULL;
    if (!rows || !cfgs) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int i = 0; i < n; i++) {
        json_t *a = NULL;
        TR_CHECK_GOTO(db_query_json(db, &a, Q_SUMMARY, "t", ids[i]), rc, exit);
        json_t *r = json_array_get(a, 0), *cfg = json_object_get(r, "config"), *fm = json_object_get(r, "final_metrics");
        cfgs[i] = json_is_object(cfg) ? json_deep_copy(cfg) : json_object();
        fms[i] = json_is_object(fm) ? json_incref(fm) : json_object();
        db_config_clean(cfgs[i]);
        if (!json_is_array(json_object_get(r, "tags")))
            json_object_set_new(r, "tags", json_array());
        json_object_del(r, "config");
        json_object_del(r, "final_metrics");
        json_array_append(rows, r ? r : json_null());
        json_decref(a);
    }
    size_t same = 0, unused = 0;
    json_t *diff = by_key(cfgs, n, 1, 0, &same), *metrics = by_key(fms, n, 0, 1, &unused);
    o = json_pack("{s:O,s:o,s:o,s:I}", "runs", rows, "final_metrics", metrics, "config_diff", diff, "config_equal",
                  (json_int_t)same);
    if (!o)
        rc = TR_ERR_NOMEM;
exit:
    for (int i = 0; cfgs && i < n; i++) {
        json_decref(cfgs[i]);
        json_decref(fms[i]);
    }
    tr_free(cfgs);
    json_decref(rows);
    *out = o;
    return rc;
}
