/* test_serve.c: the pieces of `terarec runs serve` that need no socket: the HTML
 * escaper (every special character, cut at a whole entity), a read-only open that
 * refuses every write and takes no lock a writer waits on, and the shared --json
 * builders on it (filters bound as parameters: an injection finds nothing), and
 * the plan of the last-metrics query (index probes, no scan of a run). The
 * HTTP side is tests/integration/t6004-runs-serve.sh. */
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

static void html_escape(void)
{
    char out[128];
    db_html_escape("<script>alert(\"x\" & 'y')</script>", out, sizeof out);
    TH_EQ_STR(out, "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;");
    db_html_escape("plain-id_1", out, sizeof out);
    TH_EQ_STR(out, "plain-id_1");
    db_html_escape(NULL, out, sizeof out);
    TH_EQ_STR(out, "");
    char small[8];
    db_html_escape("ab<cd", small, sizeof small); /* "ab&lt;" is 6 + NUL; then "c" fits */
    TH_EQ_STR(small, "ab&lt;c");
    db_html_escape("abcd<", small, sizeof small); /* "&lt;" does not fit after abcd: cut before it */
    TH_EQ_STR(small, "abcd");
}

static void readonly_open(void)
{
    snprintf(dir, sizeof dir, "/tmp/tr-serve-XXXXXX");
    TH_REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/runs.db", dir);
    struct db *w = NULL, *r = NULL;
    TH_EQ_ST_REQ(db_open(path, 1, &w), TR_OK);
    struct db_run run = {.id = "r1", .name = "<b>", .status = DB_RUNNING, .nodes = 1, .workers = 2,
                         .start_time = 1000.0};
    TH_EQ_ST(db_run_create(w, &run), TR_OK);
    TH_EQ_ST(db_metric_add(w, "r1", 10, "loss", 0.5, 1001.0), TR_OK);
    TH_EQ_ST(db_metric_add(w, "r1", 20, "loss", 0.4, 1002.0), TR_OK);

    TH_EQ_ST_REQ(db_open_readonly(path, &r), TR_OK);
    TH_EQ_ST(db_sql_functions(r), TR_OK);
    TH_CHECK(sqlite3_db_readonly(db_sqlite(r), "main") == 1);
    int rc = sqlite3_exec(db_sqlite(r), "DELETE FROM runs", NULL, NULL, NULL);
    TH_CHECKF((rc & 0xff) == SQLITE_READONLY, "a write through the read-only handle: %d", rc);

    /* a read transaction open on the reader does not block the writer */
    sqlite3_stmt *st = NULL;
    TH_EQ_ST_REQ(db_prepare(r, &st, "SELECT step FROM metrics ORDER BY step", ""), TR_OK);
    TH_CHECK(sqlite3_step(st) == SQLITE_ROW);
    TH_EQ_ST(db_metric_add(w, "r1", 30, "loss", 0.3, 1003.0), TR_OK);
    sqlite3_finalize(st);

    json_t *j = NULL;
    struct db_msg m;
    struct db_list_opts all = {.limit = -1}, bad_status = {.status = "' OR 1=1 --", .limit = -1},
                        bad_name = {.name = "%' OR '1'='1", .limit = -1};
    TH_EQ_ST(db_json_runs(r, &all, &m, &j), TR_OK);
    TH_EQ((int)json_array_size(j), 1);
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(j, 0), "name")), "<b>");
    json_decref(j);
    TH_EQ_ST(db_json_runs(r, &bad_status, &m, &j), TR_OK);
    TH_EQ((int)json_array_size(j), 0);
    json_decref(j);
    TH_EQ_ST(db_json_runs(r, &bad_name, &m, &j), TR_OK);
    TH_EQ((int)json_array_size(j), 0);
    json_decref(j);
    TH_EQ_ST(db_json_metrics(r, "r1", "loss", 10, &j), TR_OK); /* after step 10: 20 and 30 */
    TH_EQ((int)json_array_size(j), 2);
    TH_EQ((int)json_integer_value(json_object_get(json_array_get(j, 0), "step")), 20);
    json_decref(j);
    TH_EQ_ST(db_json_metrics(r, "r1' OR '1'='1", NULL, -1, &j), TR_OK);
    TH_EQ((int)json_array_size(j), 0);
    json_decref(j);
    db_close(r);
    db_close(w);

    char missing[160];
    snprintf(missing, sizeof missing, "%s/none.db", dir);
    TH_EQ_ST(db_open_readonly(missing, &r), TR_ERR_NOT_FOUND);
    TH_CHECK(r == NULL);
    TH_CHECK(access(missing, F_OK) != 0); /* not created */
}

/* The last-metrics query of `runs show` (and /api/runs/ID) probes the index
 * metrics(run, name, step): one probe per metric name, never a pass over the
 * run's rows (the old query made one per row: minutes at 100k rows), and it
 * finds the last step of a metric that stopped early. */
static void last_metrics_plan(void)
{
    struct db *w = NULL, *r = NULL;
    TH_EQ_ST_REQ(db_open(path, 0, &w), TR_OK);
    /* 3000 rows in one transaction: a metric every step, one in the first tenth */
    TH_CHECK(sqlite3_exec(db_sqlite(w), "BEGIN", NULL, NULL, NULL) == SQLITE_OK);
    for (int s = 100; s < 2827; s++) {
        sqlite3_stmt *ins = NULL;
        TH_EQ_ST(db_prepare(w, &ins, "INSERT INTO metrics VALUES ('r1', ?, 'loss', ?, ?)", "idd", (int64_t)s, 1.0 / s,
                            1000.0 + s), TR_OK);
        TH_CHECK(sqlite3_step(ins) == SQLITE_DONE);
        sqlite3_finalize(ins);
        if (s < 373) {
            TH_EQ_ST(db_prepare(w, &ins, "INSERT INTO metrics VALUES ('r1', ?, 'warmup_lr', 0.1, 1)", "i", (int64_t)s),
                     TR_OK);
            TH_CHECK(sqlite3_step(ins) == SQLITE_DONE);
            sqlite3_finalize(ins);
        }
    }
    TH_CHECK(sqlite3_exec(db_sqlite(w), "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
    db_close(w);
    TH_EQ_ST_REQ(db_open_readonly(path, &r), TR_OK);
    TH_EQ_ST(db_sql_functions(r), TR_OK);
    char sql[2048];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", db_sql_last_metrics);
    sqlite3_stmt *st = NULL;
    TH_EQ_ST_REQ(db_prepare(r, &st, sql, "t", "r1"), TR_OK);
    int probes = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(st, 3);
        if (strncmp(d, "SCAN metrics", 12) == 0 || strncmp(d, "SCAN m", 6) == 0 ||
            (strncmp(d, "SEARCH", 6) == 0 && !strstr(d, "metrics_run_name_step") && !strstr(d, "PRIMARY KEY")))
            TH_CHECKF(0, "a plan step that is no probe of metrics(run, name, step): %s", d);
        probes += strstr(d, "metrics_run_name_step") != NULL;
    }
    sqlite3_finalize(st);
    TH_CHECK(probes >= 2);
    /* what it does, counted by SQLite: some steps per metric name, not per row */
    TH_EQ_ST_REQ(db_prepare(r, &st, db_sql_last_metrics, "t", "r1"), TR_OK);
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        rows++;
    const int vm = sqlite3_stmt_status(st, SQLITE_STMTSTATUS_VM_STEP, 0);
    sqlite3_finalize(st);
    TH_EQ(rows, 2);
    TH_CHECKF(vm < 1000, "%d virtual machine steps for 2 metrics of 3000 rows", vm);
    json_t *j = NULL;
    TH_EQ_ST(db_json_run(r, "r1", 0, &j), TR_OK);
    json_t *m = json_object_get(j, "last_metrics");
    TH_EQ((int)json_array_size(m), 2);
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(m, 0), "name")), "loss");
    TH_EQ((int)json_integer_value(json_object_get(json_array_get(m, 0), "step")), 2826);
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(m, 1), "name")), "warmup_lr");
    TH_EQ((int)json_integer_value(json_object_get(json_array_get(m, 1), "step")), 372);
    json_decref(j);
    db_close(r);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    TH_CHECK(dir[0] && system(cmd) == 0);
}

static const struct th_case cases[] = {
    {"html_escape", html_escape},
    {"readonly_open", readonly_open},
    {"last_metrics_plan", last_metrics_plan},
    {"cleanup", cleanup},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
