/* test_serve.c: the pieces of `terarec runs serve` that need no socket: the HTML
 * escaper (every special character, cut at a whole entity), a read-only open that
 * refuses every write and takes no lock a writer waits on, and the shared --json
 * builders on it (filters bound as parameters: an injection finds nothing). The
 * HTTP side is tests/integration/t16001-runs-serve.sh. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../db/db_internal.h"

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
    TH_EQ_ST(db_json_runs(r, NULL, NULL, -1, &j), TR_OK);
    TH_EQ((int)json_array_size(j), 1);
    TH_EQ_STR(json_string_value(json_object_get(json_array_get(j, 0), "name")), "<b>");
    json_decref(j);
    TH_EQ_ST(db_json_runs(r, "' OR 1=1 --", NULL, -1, &j), TR_OK);
    TH_EQ((int)json_array_size(j), 0);
    json_decref(j);
    TH_EQ_ST(db_json_runs(r, NULL, "%' OR '1'='1", -1, &j), TR_OK);
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

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    TH_CHECK(dir[0] && system(cmd) == 0);
}

static const struct th_case cases[] = {
    {"html_escape", html_escape},
    {"readonly_open", readonly_open},
    {"cleanup", cleanup},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
