/* test_query_runs.c: the list of runs (db/query_runs.c) and what people add to a
 * run (db/write.c): the filter parser (every bad expression, quoting, numbers
 * and text), numbers printed without float noise (db_fmt_real, db_json_dumps),
 * filters on a run's field, a parameter stored as text, a final metric and tags,
 * unknown keys with close ones in the hint, chosen columns and the sort, compare's
 * config diff; tags, notes and rename (refusing a name another run has); and the
 * processes of a run that ended without their end recorded. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../db/db_internal.h"
#include "../../../db/query.h"

static char dir[64];
static char path[128];

/* ---- the parser ---------------------------------------------------------------------------- */

static void parse_ok(void)
{
    struct db_filter f;
    char err[256];
    TH_EQ_ST(db_filter_parse("learning_rate>0.01", &f, err, sizeof err), TR_OK);
    TH_EQ_STR(f.key, "learning_rate");
    TH_EQ(f.op, DB_F_GT);
    TH_CHECK(f.numeric && f.num == 0.01);
    TH_EQ_ST(db_filter_parse("  auc >= 0.79 ", &f, err, sizeof err), TR_OK);
    TH_EQ_STR(f.key, "auc");
    TH_EQ(f.op, DB_F_GE);
    TH_EQ_STR(f.value, "0.79");
    TH_EQ_ST(db_filter_parse("optimizer=adagrad", &f, err, sizeof err), TR_OK);
    TH_CHECK(f.op == DB_F_EQ && !f.numeric && !f.quoted);
    TH_EQ_STR(f.value, "adagrad");
    TH_EQ_ST(db_filter_parse("status==completed", &f, err, sizeof err), TR_OK);
    TH_EQ(f.op, DB_F_EQ);
    TH_EQ_ST(db_filter_parse("tag!=old", &f, err, sizeof err), TR_OK);
    TH_EQ(f.op, DB_F_NE);
    TH_EQ_ST(db_filter_parse("name~tb-", &f, err, sizeof err), TR_OK);
    TH_CHECK(f.op == DB_F_SUB && !strcmp(f.value, "tb-"));
    TH_EQ_ST(db_filter_parse("lr<=1e-07", &f, err, sizeof err), TR_OK);
    TH_CHECK(f.op == DB_F_LE && f.numeric && f.num == 1e-07);
    TH_EQ_ST(db_filter_parse("phase_ms_per_step.data<3", &f, err, sizeof err), TR_OK);
    TH_EQ_STR(f.key, "phase_ms_per_step.data");
    /* quoting: spaces and operators inside, and a quoted number stays text */
    TH_EQ_ST(db_filter_parse("note~'a b = c'", &f, err, sizeof err), TR_OK);
    TH_CHECK(f.quoted && !strcmp(f.value, "a b = c"));
    TH_EQ_ST(db_filter_parse("batch_size=\"2048\"", &f, err, sizeof err), TR_OK);
    TH_CHECK(f.quoted && !f.numeric && !strcmp(f.value, "2048"));
    TH_EQ_ST(db_filter_parse("note=''", &f, err, sizeof err), TR_OK);
    TH_EQ_STR(f.value, "");
    /* what is not a number: hex, inf, a word that starts with digits */
    TH_EQ_ST(db_filter_parse("x=0x10", &f, err, sizeof err), TR_OK);
    TH_CHECK(!f.numeric);
    TH_EQ_ST(db_filter_parse("x=inf", &f, err, sizeof err), TR_OK);
    TH_CHECK(!f.numeric);
    TH_EQ_ST(db_filter_parse("x=12ab", &f, err, sizeof err), TR_OK);
    TH_CHECK(!f.numeric);
}

static void parse_bad(void)
{
    static const struct {
        const char *expr, *says;
    } bad[] = {
        {"", "an empty filter"},
        {"   ", "an empty filter"},
        {"=5", "starts with a key"},
        {"1lr>3", "starts with a key"},
        {"learning rate>1", "'rate>1' after 'learning' is not an operator"},
        {"auc", "no operator after 'auc'"},
        {"auc=>1", "'=>1'"}, /* '=' then '>1': a value of text for =, so this one parses */
        {"auc>", "no value after 'auc>'"},
        {"auc>=  ", "no value after 'auc>='"},
        {"optimizer<adagrad", "'<' compares numbers, and 'adagrad' is not one"},
        {"auc>'0.5'", "'>' compares numbers"},
        {"note='open", "no closing '"},
        {"note=\"a\" b", "'b' after the closing \""},
        {"x!1", "'!1' after 'x' is not an operator"},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        struct db_filter f;
        char err[256] = "";
        enum tr_status rc = db_filter_parse(bad[i].expr, &f, err, sizeof err);
        if (i == 6) { /* auc=>1: key auc, =, value ">1" (text) */
            TH_CHECK(rc == TR_OK && f.op == DB_F_EQ && !strcmp(f.value, ">1"));
            continue;
        }
        TH_CHECKF(rc == TR_ERR_ARG && strstr(err, bad[i].says), "'%s': rc %d, '%s'", bad[i].expr, rc, err);
    }
    char long_key[300];
    memset(long_key, 'k', sizeof long_key - 3);
    memcpy(long_key + sizeof long_key - 3, "=1", 3);
    struct db_filter f;
    char err[256];
    TH_EQ_ST(db_filter_parse(long_key, &f, err, sizeof err), TR_ERR_ARG);
    TH_CHECK(strstr(err, "longer than") != NULL);
}

/* ---- numbers -------------------------------------------------------------------------------- */

static void numbers(void)
{
    char b[40];
    db_fmt_real(1e-07, b, sizeof b);
    TH_EQ_STR(b, "1e-07");
    db_fmt_real(0.1, b, sizeof b);
    TH_EQ_STR(b, "0.1");
    db_fmt_real(0.1 + 0.2, b, sizeof b); /* needs 17 digits */
    TH_EQ_STR(b, "0.30000000000000004");
    TH_CHECK(strtod(b, NULL) == 0.1 + 0.2);
    double v = 0;
    TH_CHECK(db_num_text("9.9999999999999995e-08", &v) && v == 1e-07);
    TH_CHECK(!db_num_text("1 ", NULL) && !db_num_text("", NULL) && !db_num_text("nan", NULL));
    json_t *j = json_pack("{s:f,s:f,s:i,s:s,s:[f]}", "lr", 1e-07, "two", 2.0, "n", 3, "s", "\x01" "0", "a", 0.5);
    char *s = db_json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    TH_EQ_STR(s, "{\"lr\":1e-07,\"two\":2.0,\"n\":3,\"s\":\"\\u00010\",\"a\":[0.5]}");
    free(s);
    json_object_del(j, "s");
    s = db_json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    TH_EQ_STR(s, "{\"lr\":1e-07,\"two\":2.0,\"n\":3,\"a\":[0.5]}");
    free(s);
    json_decref(j);
    j = json_pack("{s:s,s:s,s:s}", "a", "9.9999999999999995e-08", "b", "2048", "c", "adagrad");
    db_config_clean(j);
    TH_EQ_STR(json_string_value(json_object_get(j, "a")), "1e-07");
    TH_EQ_STR(json_string_value(json_object_get(j, "b")), "2048");
    TH_EQ_STR(json_string_value(json_object_get(j, "c")), "adagrad");
    json_decref(j);
    db_fmt_size(2, 4, b, sizeof b);
    TH_EQ_STR(b, "2 nodes, 4 workers");
    db_fmt_size(1, 1, b, sizeof b);
    TH_EQ_STR(b, "1 node, 1 worker");
}

/* ---- a history ------------------------------------------------------------------------------ */

static struct db *history(void)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/tr-qr-XXXXXX");
        TR_ASSERT(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/runs.db", dir);
    }
    unlink(path);
    struct db *w = NULL;
    if (db_open(path, 1, &w) != TR_OK)
        return NULL;
    static const struct {
        const char *id, *name, *status, *config, *fm;
    } runs[] = {
        {"r1", "tb-high", DB_COMPLETED, "{\"learning_rate\":\"0.050000000000000003\",\"optimizer\":\"adagrad\"}",
         "{\"auc\":0.80,\"steps\":10}"},
        {"r2", "tb-low", DB_COMPLETED, "{\"learning_rate\":\"9.9999999999999995e-08\",\"optimizer\":\"sgd\"}",
         "{\"auc\":0.76,\"steps\":10}"},
        {"r3", "other", DB_RUNNING, "{\"learning_rate\":\"0.01\",\"optimizer\":\"adagrad\"}", NULL},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(runs); i++) {
        struct db_run r = {.id = runs[i].id, .name = runs[i].name, .status = DB_RUNNING, .config = runs[i].config,
                           .nodes = 2, .workers = 4, .start_time = 1000.0 + (double)i};
        TR_ASSERT(db_run_create(w, &r) == TR_OK);
        TR_ASSERT(db_process_add(w, runs[i].id, 0, 0, "h", 10, 1000.0) == TR_OK);
        if (runs[i].fm)
            TR_ASSERT(db_run_finish(w, runs[i].id, runs[i].status, 2000.0, runs[i].fm, NULL) == TR_OK);
    }
    return w;
}

/* The ids of the list o asks for, space-separated, into buf; the status back. */
static enum tr_status ids(struct db *db, const struct db_list_opts *o, struct db_msg *m, char *buf, size_t n)
{
    json_t *a = NULL;
    buf[0] = '\0';
    enum tr_status rc = db_json_runs(db, o, m, &a);
    size_t i;
    json_t *r;
    json_array_foreach(a, i, r)
    {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, "%s%s", k ? " " : "", json_string_value(json_object_get(r, "id")));
    }
    json_decref(a);
    return rc;
}

static void list_filters(void)
{
    struct db *w = history();
    TH_REQUIRE(w != NULL);
    struct db_msg m;
    char b[256];
    const char *one[1];
    struct db_list_opts o = {.filters = one, .nfilters = 1, .limit = -1};
    static const struct {
        const char *f, *want;
    } cases[] = {
        {"learning_rate>0.001", "r3 r1"},   /* numbers stored as text compare as numbers */
        {"learning_rate=1e-7", "r2"},       /* = between numbers, whatever their text */
        {"learning_rate='0.01'", "r3"},     /* quoted: the text */
        {"optimizer=adagrad", "r3 r1"},
        {"optimizer!=adagrad", "r2"},
        {"auc>=0.79", "r1"},                /* a final metric */
        {"metric.steps=10", "r2 r1"},
        {"config.optimizer~SG", "r2"},      /* ~: contains, any case */
        {"status=running", "r3"},
        {"name~tb-", "r2 r1"},
        {"workers=4", "r3 r2 r1"},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(cases); i++) {
        one[0] = cases[i].f;
        TH_EQ_ST(ids(w, &o, &m, b, sizeof b), TR_OK);
        TH_CHECKF(!strcmp(b, cases[i].want), "%s: '%s', want '%s'", cases[i].f, b, cases[i].want);
    }
    /* tags, written and matched */
    const char *add[] = {"baseline", "sweep"}, *rm[] = {"sweep"};
    TH_EQ_ST(db_run_tag(w, "r1", add, 2, NULL, 0), TR_OK);
    TH_EQ_ST(db_run_tag(w, "r2", add + 1, 1, NULL, 0), TR_OK);
    TH_EQ_ST(db_run_tag(w, "r1", add, 1, rm, 1), TR_OK); /* baseline again: a set */
    char *t = NULL;
    TH_EQ_ST(db_run_get(w, "r1", "tags", &t), TR_OK);
    TH_EQ_STR(t, "[\"baseline\"]");
    tr_free(t);
    const char *bad_tag[] = {"a b"};
    TH_EQ_ST(db_run_tag(w, "r1", bad_tag, 1, NULL, 0), TR_ERR_ARG);
    TH_EQ_ST(db_run_tag(w, "nope", add, 1, NULL, 0), TR_ERR_NOT_FOUND);
    const char *two[] = {"tag=sweep", "optimizer=sgd"};
    o.filters = two;
    o.nfilters = 2;
    TH_EQ_ST(ids(w, &o, &m, b, sizeof b), TR_OK);
    TH_EQ_STR(b, "r2");
    two[0] = "tag!=sweep";
    two[1] = "tag~BASE";
    TH_EQ_ST(ids(w, &o, &m, b, sizeof b), TR_OK);
    TH_EQ_STR(b, "r1");
    /* refusals: what m says */
    static const struct {
        const char *f, *error, *hint;
    } bad[] = {
        {"lerning_rate>0.1", "no run has a field, parameter or final metric 'lerning_rate'",
         "learning_rate (parameter)"},
        {"config.auc>0.1", "no run has a parameter 'auc'", NULL},
        {"metric.optimizer=x", "no run has a final metric 'optimizer'", NULL},
        {"tag>1", "a tag is matched with =, != or ~", NULL},
        {"optimizer<x", "'<' compares numbers", "KEY OP VALUE"},
        {"stauts=failed", "'stauts'", "status (a run's field)"},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        one[0] = bad[i].f;
        o.filters = one;
        o.nfilters = 1;
        TH_EQ_ST(ids(w, &o, &m, b, sizeof b), TR_ERR_ARG);
        TH_CHECKF(strstr(m.error, bad[i].error) != NULL, "%s: '%s'", bad[i].f, m.error);
        TH_CHECKF(!bad[i].hint || strstr(m.hint, bad[i].hint) != NULL, "%s: hint '%s'", bad[i].f, m.hint);
    }
    /* an injection is a value, never SQL */
    one[0] = "name=x' OR '1'='1";
    TH_EQ_ST(ids(w, &o, &m, b, sizeof b), TR_OK);
    TH_EQ_STR(b, "");
    db_close(w);
}

static void list_columns_sort(void)
{
    struct db *w = history();
    TH_REQUIRE(w != NULL);
    struct db_msg m;
    struct db_list_opts o = {.columns = "name, learning_rate,auc", .sort = "-auc", .limit = -1};
    json_t *a = NULL;
    TH_EQ_ST_REQ(db_json_runs(w, &o, &m, &a), TR_OK);
    char *s = db_json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER);
    /* the id first; parameters as numbers, without noise; runs without auc last */
    TH_EQ_STR(s, "[{\"id\":\"r1\",\"name\":\"tb-high\",\"learning_rate\":0.05,\"auc\":0.8},"
                 "{\"id\":\"r2\",\"name\":\"tb-low\",\"learning_rate\":1e-07,\"auc\":0.76},"
                 "{\"id\":\"r3\",\"name\":\"other\",\"learning_rate\":0.01,\"auc\":null}]");
    free(s);
    json_decref(a);
    o.sort = "learning_rate";
    char b[128];
    TH_EQ_ST(ids(w, &o, &m, b, sizeof b), TR_OK);
    TH_EQ_STR(b, "r2 r3 r1");
    o.sort = "-start";
    TH_EQ_ST(ids(w, &o, &m, b, sizeof b), TR_OK);
    TH_EQ_STR(b, "r3 r2 r1");
    /* a table: parameters as text without noise, nodes and workers in words */
    struct db_list_opts t = {.columns = "learning_rate,size", .sort = "learning_rate", .limit = -1};
    struct db_runs_query q;
    TH_EQ_ST_REQ(db_runs_prepare(w, &t, 1, &q, &m), TR_OK);
    TH_EQ_STR(q.names[0], "learning_rate");
    TH_EQ_STR(q.names[1], "nodes, workers");
    TH_REQUIRE(sqlite3_step(q.st) == SQLITE_ROW);
    TH_EQ_STR((const char *)sqlite3_column_text(q.st, 0), "1e-07");
    TH_EQ_STR((const char *)sqlite3_column_text(q.st, 1), "2 nodes, 4 workers");
    db_runs_query_release(&q);
    struct db_list_opts bad = {.columns = "name,nope", .limit = -1};
    TH_EQ_ST(db_json_runs(w, &bad, &m, &a), TR_ERR_ARG);
    TH_CHECK(strstr(m.error, "--columns") && strstr(m.error, "'nope'"));
    bad.columns = "name;drop";
    TH_EQ_ST(db_json_runs(w, &bad, &m, &a), TR_ERR_ARG);
    TH_CHECK(strstr(m.error, "is not a key") != NULL);
    bad.columns = NULL;
    bad.sort = "-";
    TH_EQ_ST(db_json_runs(w, &bad, &m, &a), TR_ERR_ARG);
    db_close(w);
}

static void compare_diff(void)
{
    struct db *w = history();
    TH_REQUIRE(w != NULL);
    char *const two[] = {"r1", "r2"};
    json_t *j = NULL;
    TH_EQ_ST_REQ(db_json_compare(w, two, 2, &j), TR_OK);
    char *s = db_json_dumps(json_object_get(j, "config_diff"), JSON_COMPACT | JSON_PRESERVE_ORDER);
    TH_EQ_STR(s, "{\"learning_rate\":[\"0.05\",\"1e-07\"],\"optimizer\":[\"adagrad\",\"sgd\"]}");
    free(s);
    TH_EQ((int)json_integer_value(json_object_get(j, "config_equal")), 0);
    s = db_json_dumps(json_object_get(j, "final_metrics"), JSON_COMPACT | JSON_PRESERVE_ORDER);
    TH_EQ_STR(s, "{\"auc\":[0.8,0.76],\"steps\":[10,10]}");
    free(s);
    json_decref(j);
    char *const same[] = {"r1", "r3"};
    TH_EQ_ST_REQ(db_json_compare(w, same, 2, &j), TR_OK);
    TH_EQ((int)json_object_size(json_object_get(j, "config_diff")), 1);
    TH_EQ((int)json_integer_value(json_object_get(j, "config_equal")), 1);
    json_decref(j);
    db_close(w);
}

/* ---- what people add; a run's end ----------------------------------------------------------------- */

static void note_rename(void)
{
    struct db *w = history();
    TH_REQUIRE(w != NULL);
    char *v = NULL;
    TH_EQ_ST(db_run_set_note(w, "r1", "why: a test"), TR_OK);
    TH_EQ_ST(db_run_get(w, "r1", "note", &v), TR_OK);
    TH_EQ_STR(v, "why: a test");
    tr_free(v);
    TH_EQ_ST(db_run_set_note(w, "r1", ""), TR_OK);
    TH_EQ_ST(db_run_get(w, "r1", "note", &v), TR_OK);
    TH_CHECK(v == NULL);
    TH_EQ_ST(db_run_set_note(w, "nope", "x"), TR_ERR_NOT_FOUND);
    TH_EQ_ST(db_run_rename(w, "r1", "tb-low"), TR_ERR_ARG); /* r2's name */
    TH_EQ_ST(db_run_rename(w, "r1", "r2"), TR_ERR_ARG);     /* r2's id */
    TH_EQ_ST(db_run_rename(w, "r1", ""), TR_ERR_ARG);
    TH_EQ_ST(db_run_rename(w, "r1", "a\nb"), TR_ERR_ARG);
    TH_EQ_ST(db_run_rename(w, "r1", "tb-high"), TR_OK); /* its own name */
    TH_EQ_ST(db_run_rename(w, "r1", "tb-top"), TR_OK);
    TH_EQ_ST(db_run_get(w, "r1", "name", &v), TR_OK);
    TH_EQ_STR(v, "tb-top");
    tr_free(v);
    TH_EQ_ST(db_run_rename(w, "nope", "x"), TR_ERR_NOT_FOUND);
    db_close(w);
}

static void ended_processes(void)
{
    struct db *w = history();
    TH_REQUIRE(w != NULL);
    /* r3 fails with its process's end never recorded: it ends with the run */
    TH_EQ_ST(db_process_add(w, "r3", 0, 1, "h", 11, 1000.0), TR_OK);
    TH_EQ_ST(db_process_exit(w, "r3", 0, 1, 0, -1, 1500.0), TR_OK);
    TH_EQ_ST(db_run_finish(w, "r3", DB_FAILED, 3000.0, NULL, "rank 0 lost"), TR_OK);
    json_t *j = NULL;
    TH_EQ_ST_REQ(db_json_run(w, "r3", 0, &j), TR_OK);
    json_t *p = json_object_get(j, "processes");
    TH_EQ((int)json_array_size(p), 2);
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(p, 0), "ended")), "ended (exit unknown)");
    TH_CHECK(json_real_value(json_object_get(json_array_get(p, 0), "end_time")) == 3000.0);
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(p, 1), "ended")), "exit 0");
    TH_CHECK(json_real_value(json_object_get(json_array_get(p, 1), "end_time")) == 1500.0);
    json_decref(j);
    /* an old row (no end written) of an ended run reads as ended too */
    TH_EQ_ST(db_exec(w, "UPDATE processes SET end_time = NULL WHERE run = 'r3'", "test"), TR_OK);
    TH_EQ_ST_REQ(db_json_run(w, "r3", 0, &j), TR_OK);
    p = json_object_get(j, "processes");
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(p, 0), "ended")), "ended (exit unknown)");
    json_decref(j);
    /* a running run's processes are running */
    TH_EQ_ST(db_run_reopen(w, "r3", NULL), TR_OK);
    TH_EQ_ST_REQ(db_json_run(w, "r3", 0, &j), TR_OK);
    p = json_object_get(j, "processes");
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(p, 0), "ended")), "running");
    json_decref(j);
    db_close(w);
}

static void cleanup(void)
{
    unlink(path);
    char p[160];
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
    TH_CHECK(rmdir(dir) == 0);
}

static const struct th_case cases[] = {
    {"parse_ok", parse_ok},
    {"parse_bad", parse_bad},
    {"numbers", numbers},
    {"list_filters", list_filters},
    {"list_columns_sort", list_columns_sort},
    {"compare_diff", compare_diff},
    {"note_rename", note_rename},
    {"ended_processes", ended_processes},
    {"cleanup", cleanup},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
