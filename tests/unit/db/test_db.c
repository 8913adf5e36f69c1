/* test_db.c: the run history (db/db.h): creation and modes, the schema version
 * and refusals (newer schema, not SQLite, unwritable), migration of an empty
 * file, every write read back through `terarec runs` (stdout captured), run
 * resolution, cascading rm, the journal choice per file system, NaN as NULL,
 * ten processes writing one file at once, the migration of a version 1 file, and
 * runs whose launcher vanished becoming lost. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../db/db.h"

static char dir[64];
static char out[1 << 16];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/tr-db-XXXXXX");
    TR_ASSERT(mkdtemp(dir) != NULL);
}

static void path_in(char *buf, size_t n, const char *name)
{
    if (!dir[0])
        make_dir();
    snprintf(buf, n, "%s/%s", dir, name);
}

/* Runs `terarec runs ARGS` with stdout captured into out; returns the exit status. */
static int runs(const char *first, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"runs";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    char cap[128];
    path_in(cap, sizeof cap, "stdout.txt");
    fflush(stdout);
    int saved = dup(1), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    TR_ASSERT(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    int rc = runs_cmd_main(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fopen(cap, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return rc;
}

static int sql_int(const char *path, const char *sql)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    int v = -1;
    if (sqlite3_open(path, &h) == SQLITE_OK && sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *h = NULL;
    TR_ASSERT(sqlite3_open(path, &h) == SQLITE_OK);
    TR_ASSERT(sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(h);
}

static struct db_run run_of(const char *id, const char *name, double start)
{
    return (struct db_run){.id = id, .name = name, .status = DB_RUNNING, .cmdline = "terarec train --x 1",
                           .config = "{\"lr\": 0.5, \"batch\": 2048}", .git_hash = "abc", .hosts = "n1,n2",
                           .nodes = 2, .workers = 8, .start_time = start};
}

static void create_open(void)
{
    char p[128], d[128];
    path_in(d, sizeof d, "data/terarec");
    path_in(p, sizeof p, "data/terarec/runs.db");
    struct db *db = NULL;
    TH_EQ_ST(db_open(p, 0, &db), TR_ERR_NOT_FOUND);
    TH_CHECK(db == NULL);
    TH_EQ_ST_REQ(db_open(p, 1, &db), TR_OK);
    TH_EQ_STR(db_path(db), p);
    TH_CHECK(!strcmp(db_journal(db), "wal") || !strcmp(db_journal(db), "delete"));
    db_close(db);
    struct stat sb;
    TH_CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    TH_CHECK(stat(d, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    TH_EQ(sql_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"), 7);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sqlite_master WHERE name = 'metrics_run_step'"), 1);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sqlite_master WHERE name = 'runs_slurm_job_id'"), 1);
    /* reopened without create, and with create again: nothing changes */
    TH_EQ_ST_REQ(db_open(p, 0, &db), TR_OK);
    db_close(db);
    TH_EQ_ST_REQ(db_open(p, 1, &db), TR_OK);
    db_close(db);
    TH_EQ(sql_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    db_close(NULL);
}

static void refusals(void)
{
    char p[128];
    struct db *db = NULL;
    path_in(p, sizeof p, "newer.db");
    TH_EQ_ST_REQ(db_open(p, 1, &db), TR_OK);
    db_close(db);
    sql_exec(p, "PRAGMA user_version = 7");
    TH_EQ_ST(db_open(p, 0, &db), TR_ERR_ARG);
    TH_EQ_ST(db_open(p, 1, &db), TR_ERR_ARG);
    TH_CHECK(db == NULL);
    TH_EQ(runs("list", "--db", p, NULL), 2);

    path_in(p, sizeof p, "garbage.db");
    FILE *f = fopen(p, "w");
    TH_REQUIRE(f != NULL);
    fputs("this is not a database, just some text that is long enough\n", f);
    fclose(f);
    TH_EQ_ST(db_open(p, 0, &db), TR_ERR_ARG);
    TH_EQ_ST(db_open(p, 1, &db), TR_ERR_ARG);

    /* an SQLite file of something else is left alone */
    path_in(p, sizeof p, "other.db");
    sql_exec(p, "CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine')");
    TH_EQ_ST(db_open(p, 1, &db), TR_ERR_ARG);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sqlite_master"), 1);

    /* a directory that cannot be made (unwritable even for root) */
    TH_EQ_ST(db_open("/proc/tr-no-such/runs.db", 1, &db), TR_ERR_ARG);
    TH_EQ(runs("list", "--db", "/nonexistent/runs.db", NULL), 2);
}

static void empty_file_migrates(void)
{
    char p[128];
    path_in(p, sizeof p, "empty.db");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    TH_REQUIRE(fd >= 0);
    close(fd);
    struct db *db = NULL;
    TH_EQ_ST_REQ(db_open(p, 1, &db), TR_OK);
    db_close(db);
    TH_EQ(sql_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    TH_EQ(sql_int(p, "SELECT count(*) FROM runs"), 0);
}

/* The history the command cases read: run r1 with every table filled, r2 a
 * finished rival with another config. */
static struct db *populated(char *p, size_t n, const char *name)
{
    path_in(p, n, name);
    unlink(p);
    struct db *db = NULL;
    TR_ASSERT(db_open(p, 1, &db) == TR_OK);
    struct db_run a = run_of("r1-aaaa", "first", 1000), b = run_of("r2-bbbb", "second", 2000);
    b.config = "{\"lr\": 0.25, \"batch\": 2048, \"extra\": true}";
    b.slurm_job_id = "4242";
    TR_ASSERT(db_run_create(db, &a) == TR_OK);
    TR_ASSERT(db_run_create(db, &b) == TR_OK);
    for (int s = 1; s <= 5; s++) {
        TR_ASSERT(db_metric_add(db, "r1-aaaa", s * 10, "loss", 1.0 / s, 1000 + s) == TR_OK);
        TR_ASSERT(db_metric_add(db, "r1-aaaa", s * 10, "samples_per_s", 1000.0 * s, 1000 + s) == TR_OK);
        TR_ASSERT(db_metric_add(db, "r2-bbbb", s * 10, "loss", 2.0 / s, 2000 + s) == TR_OK);
    }
    TR_ASSERT(db_eval_add(db, "r1-aaaa", 25, 0.75, 0.45, 1000, 1030) == TR_OK);
    TR_ASSERT(db_eval_add(db, "r1-aaaa", 50, 0.8, 0.44, 1000, 1060) == TR_OK);
    TR_ASSERT(db_eval_add(db, "r2-bbbb", 50, 0.7, 0.5, 1000, 2060) == TR_OK);
    TR_ASSERT(db_ckpt_add(db, "r1-aaaa", 50, "file:///ck/r1/50.json", 123456, 0.5, 1061) == TR_OK);
    TR_ASSERT(db_process_add(db, "r1-aaaa", 0, 0, "n1", 111, 1000) == TR_OK);
    TR_ASSERT(db_process_add(db, "r1-aaaa", 0, 1, "n2", 222, 1000) == TR_OK);
    TR_ASSERT(db_process_exit(db, "r1-aaaa", 0, 0, 0, -1, 1100) == TR_OK);
    TR_ASSERT(db_process_exit(db, "r1-aaaa", 0, 1, -1, 9, 1100) == TR_OK);
    TR_ASSERT(db_event_add(db, "r1-aaaa", 1000, "started", "{\"hosts\": 2}") == TR_OK);
    TR_ASSERT(db_event_add(db, "r1-aaaa", 1050, "preempted", NULL) == TR_OK);
    TR_ASSERT(db_run_finish(db, "r1-aaaa", DB_COMPLETED, 1100, "{\"auc\": 0.8}", "max_steps reached") == TR_OK);
    return db;
}

static void writes_and_commands(void)
{
    char p[128];
    struct db *db = populated(p, sizeof p, "cmds.db");
    char *v = NULL;
    TH_EQ_ST(db_run_get(db, "r1-aaaa", "status", &v), TR_OK);
    TH_EQ_STR(v, "completed");
    tr_free(v);
    TH_EQ_ST(db_run_get(db, "r1-aaaa", "reason", &v), TR_OK);
    TH_EQ_STR(v, "max_steps reached");
    tr_free(v);
    TH_EQ_ST(db_run_get(db, "r2-bbbb", "end_time", &v), TR_OK);
    TH_CHECK(v == NULL);
    TH_EQ_ST(db_run_get(db, "r1-aaaa", "nope", &v), TR_ERR_ARG);
    TH_EQ_ST(db_run_get(db, "zzz", "status", &v), TR_ERR_NOT_FOUND);
    /* a checkpoint whose bytes and stall are not known (one the launcher read from the
     * store): NULL, not -1 */
    TH_EQ_ST(db_ckpt_add(db, "r1-aaaa", 60, "file:///ck/r1/60.json", -1, NAN, 1070), TR_OK);
    TH_EQ(sql_int(p, "SELECT count(*) FROM checkpoints WHERE step = 60 AND bytes IS NULL AND stall_s IS NULL"), 1);
    TH_EQ(sql_int(p, "SELECT count(*) FROM checkpoints WHERE step = 50 AND bytes = 123456"), 1);
    /* reopen: running again, restarts counted, hosts replaced */
    TH_EQ_ST(db_run_reopen(db, "r2-bbbb", "n7"), TR_OK);
    TH_EQ_ST(db_run_get(db, "r2-bbbb", "restarts", &v), TR_OK);
    TH_EQ_STR(v, "1");
    tr_free(v);
    TH_EQ_ST(db_run_get(db, "r2-bbbb", "hosts", &v), TR_OK);
    TH_EQ_STR(v, "n7");
    tr_free(v);
    /* refusals of the writes */
    struct db_run dup = run_of("r1-aaaa", NULL, 1);
    TH_EQ_ST(db_run_create(db, &dup), TR_ERR_ARG);
    TH_EQ_ST(db_metric_add(db, "ghost", 1, "loss", 1, 1), TR_ERR_NOT_FOUND);
    TH_EQ_ST(db_run_finish(db, "ghost", DB_FAILED, 1, NULL, NULL), TR_ERR_NOT_FOUND);
    TH_EQ_ST(db_process_exit(db, "r1-aaaa", 3, 0, 0, -1, 1), TR_ERR_NOT_FOUND);
    db_close(db);

    TH_EQ(runs("list", "--db", p, NULL), 0);
    TH_CHECK(strstr(out, "r1-aaaa") && strstr(out, "r2-bbbb") && strstr(out, "completed"));
    TH_CHECK(strstr(out, "slurm 4242") && strstr(out, "0.2") && strstr(out, "0.8"));
    TH_CHECKF(strstr(out, "r2-bbbb") < strstr(out, "r1-aaaa"), "newest first:\n%s", out);
    TH_EQ(runs("list", "--db", p, "--status", "completed", "--limit", "5", NULL), 0);
    TH_CHECK(strstr(out, "r1-aaaa") && !strstr(out, "r2-bbbb"));
    TH_EQ(runs("list", "--db", p, "--json", NULL), 0);
    json_t *j = json_loads(out, 0, NULL);
    TH_CHECK(json_is_array(j) && json_array_size(j) == 2);
    json_decref(j);

    TH_EQ(runs("show", "r1", "--db", p, NULL), 0);
    TH_CHECKF(strstr(out, "run r1-aaaa") && strstr(out, "max_steps reached") && strstr(out, "SIGKILL") &&
                  strstr(out, "exit 0") && strstr(out, "preempted") && strstr(out, "file:///ck/r1/50.json") &&
                  strstr(out, "samples_per_s"),
              "show:\n%s", out);
    TH_EQ(runs("show", "first", "--db", p, "--json", NULL), 0);
    j = json_loads(out, 0, NULL);
    TH_CHECK(json_is_object(j));
    TH_EQ(json_real_value(json_object_get(json_object_get(json_object_get(j, "run"), "config"), "lr")) * 100, 50);
    TH_EQ(json_array_size(json_object_get(j, "processes")), 2);
    TH_EQ(json_array_size(json_object_get(j, "last_metrics")), 2);
    json_decref(j);

    TH_EQ(runs("metrics", "r1-aaaa", "--name", "loss", "--db", p, NULL), 0);
    TH_CHECKF(!strncmp(out, "step,name,value\n10,loss,1\n20,loss,0.5\n", 38), "metrics:\n%s", out);
    TH_CHECK(!strstr(out, "samples_per_s"));

    TH_EQ(runs("compare", "r1", "r2", "--db", p, NULL), 0);
    TH_CHECKF(strstr(out, "\n  lr ") && strstr(out, "\n  extra ") && !strstr(out, "batch") &&
                  strstr(out, "config: 2 differ, ") &&
                  strstr(out, "best_auc") && strstr(out, "5000"),
              "compare:\n%s", out);
    TH_EQ(runs("compare", "r1", "r2", "--db", p, "--json", NULL), 0);
    j = json_loads(out, 0, NULL);
    TH_EQ(json_array_size(json_object_get(j, "runs")), 2);
    TH_CHECK(json_object_get(json_object_get(j, "config_diff"), "lr") != NULL);
    json_decref(j);
    TH_EQ(runs("compare", "r1", "--db", p, NULL), 2);

    TH_EQ(runs("export", "r1", "--format", "csv", "--db", p, NULL), 0);
    TH_CHECKF(strstr(out, "step,name,value\n") == out && strstr(out, "25,auc,0.75") && strstr(out, "50,logloss,0.44"),
              "csv:\n%s", out);
    char ej[128];
    path_in(ej, sizeof ej, "export.json");
    TH_EQ(runs("export", "r1", "--format", "json", "-o", ej, "--db", p, NULL), 0);
    j = json_load_file(ej, 0, NULL);
    TH_EQ(json_array_size(json_object_get(j, "metrics")), 10);
    TH_EQ(json_array_size(json_object_get(j, "evals")), 2);
    TH_EQ(json_array_size(json_object_get(j, "events")), 2);
    json_decref(j);

    TH_EQ(runs("show", "nope", "--db", p, NULL), 2);
    TH_EQ(runs("frobnicate", NULL), 2);
    TH_EQ(runs("list", "--bogus", "--db", p, NULL), 2);
    char png[128];
    path_in(png, sizeof png, "chart.png");
    TH_EQ(runs("plot", "r1", "r2", "--metric", "loss", "-o", png, "--db", p, NULL), 0);
    struct stat sb;
    TH_CHECK(stat(png, &sb) == 0 && sb.st_size > 100);
    TH_EQ(runs("plot", "r2", "--metric", "grad_norm", "-o", png, "--db", p, NULL), 2);
    TH_EQ(runs("plot", "r1", "--smooth", "0.9", "--log", "--no_markers", "-o", png, "--db", p, NULL), 0);
    TH_EQ(runs("plot", "r1", "--smooth", "1", "-o", png, "--db", p, NULL), 2); /* a weight of 1 never moves */
}

/* `runs plot` of a resumed run draws its chain as one curve: a metric only the
 * run it was resumed from has (auc, to the step it resumed at) is there; a chain
 * whose parent is gone, or loops, is the run alone. */
static void plot_chain(void)
{
    char p[128], png[128];
    struct db *db = populated(p, sizeof p, "chain.db");
    path_in(png, sizeof png, "chain.png");
    struct db_run c = run_of("r3-cccc", "child", 3000);
    c.resumed_from = "r1-aaaa";
    TH_EQ_ST(db_run_create(db, &c), TR_OK);
    TH_EQ_ST(db_event_add(db, "r3-cccc", 3000, "started", "{\"attempt\": 0, \"from_step\": 30}"), TR_OK);
    TH_EQ_ST(db_metric_add(db, "r3-cccc", 35, "loss", 0.1, 3035), TR_OK);
    TH_EQ_ST(db_event_add(db, "r3-cccc", 3040, "preempt_signal", "not json"), TR_OK); /* marked, data or not */
    db_close(db);
    /* r1's evals are at steps 25 and 50: the one at 25 comes before the fork at 30 */
    TH_EQ(runs("plot", "child", "--metric", "auc", "-o", png, "--db", p, NULL), 0);
    TH_EQ(runs("plot", "child", "--metric", "loss", "--log", "-o", png, "--db", p, NULL), 0);
    sql_exec(p, "DELETE FROM events WHERE run = 'r3-cccc' AND kind = 'started'"); /* the fork step unknown */
    TH_EQ(runs("plot", "child", "--metric", "auc", "-o", png, "--db", p, NULL), 0);
    sql_exec(p, "UPDATE runs SET resumed_from = 'r3-cccc' WHERE id = 'r1-aaaa'"); /* a loop ends */
    TH_EQ(runs("plot", "child", "--metric", "loss", "-o", png, "--db", p, NULL), 0);
    sql_exec(p, "PRAGMA foreign_keys = ON; DELETE FROM runs WHERE id = 'r1-aaaa'");
    TH_EQ(runs("plot", "child", "--metric", "auc", "-o", png, "--db", p, NULL), 2); /* the run alone has none */
}

static void resolve(void)
{
    char p[128];
    path_in(p, sizeof p, "resolve.db");
    struct db *db = NULL;
    TH_EQ_ST_REQ(db_open(p, 1, &db), TR_OK);
    struct db_run a = run_of("abc123", NULL, 10), b = run_of("abc456", NULL, 20), c = run_of("xyz", "exp1", 30);
    a.slurm_job_id = b.slurm_job_id = "77";
    TH_EQ_ST(db_run_create(db, &a), TR_OK);
    TH_EQ_ST(db_run_create(db, &b), TR_OK);
    TH_EQ_ST(db_run_create(db, &c), TR_OK);
    char *id = NULL;
    TH_EQ_ST(db_run_resolve(db, "abc123", &id), TR_OK);
    TH_EQ_STR(id, "abc123");
    tr_free(id);
    TH_EQ_ST(db_run_resolve(db, "abc4", &id), TR_OK);
    TH_EQ_STR(id, "abc456");
    tr_free(id);
    TH_EQ_ST(db_run_resolve(db, "exp1", &id), TR_OK);
    TH_EQ_STR(id, "xyz");
    tr_free(id);
    TH_EQ_ST(db_run_resolve(db, "abc", &id), TR_ERR_ARG);
    TH_CHECK(id == NULL);
    TH_EQ_ST(db_run_resolve(db, "nope", &id), TR_ERR_NOT_FOUND);
    TH_EQ_ST(db_run_by_slurm_job(db, "77", &id), TR_OK);
    TH_EQ_STR(id, "abc456");
    tr_free(id);
    TH_EQ_ST(db_run_by_slurm_job(db, "78", &id), TR_ERR_NOT_FOUND);
    db_close(db);
}

static void rm_cascades(void)
{
    char p[128];
    struct db *db = populated(p, sizeof p, "rm.db");
    db_close(db);
    TH_EQ(runs("rm", "r1", "--db", p, "nope", NULL), 2); /* one unknown: nothing removed */
    TH_EQ(sql_int(p, "SELECT count(*) FROM runs"), 2);
    TH_EQ(runs("rm", "r1", "--db", p, NULL), 0);
    TH_CHECKF(strstr(out, "removed run r1-aaaa (10 metrics, 2 evals, 1 checkpoints, 2 processes, 2 events)"), "%s",
              out);
    static const char *const tables[] = {"metrics", "evals", "checkpoints", "processes", "events"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(tables); i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE run = 'r1-aaaa'", tables[i]);
        TH_EQ(sql_int(p, sql), 0);
    }
    TH_EQ(sql_int(p, "SELECT count(*) FROM runs"), 1);
    TH_EQ(sql_int(p, "SELECT count(*) FROM metrics"), 5);
}

static void fs_types(void)
{
    static const long net[] = {0x6969,     0x517B,     (long)0xFF534D42, (long)0xFE534D42, 0x0BD00BD0,
                               0x47504653, 0x19830326, 0x00C36400,       0x65735546,       0x01021997,
                               0x5346414F, 0x7461636f, 0x01161970,       (long)0xAAD7AAEA};
    for (size_t i = 0; i < TR_ARRAY_SIZE(net); i++)
        TH_CHECKF(db_fs_allows_wal(net[i]) == 0, "0x%lx", net[i]);
    /* a sign-extended 32-bit magic is the same file system */
    TH_EQ(db_fs_allows_wal((long)(int32_t)0xFF534D42), 0);
    TH_EQ(db_fs_allows_wal(0xEF53), 1);
    TH_EQ(db_fs_allows_wal(0x01021994), 1);
}

static void force_netfs(void)
{
    char p[128];
    path_in(p, sizeof p, "netfs.db");
    setenv("TR_DB_FORCE_NETFS", "1", 1);
    struct db *db = NULL;
    enum tr_status rc = db_open(p, 1, &db);
    unsetenv("TR_DB_FORCE_NETFS");
    TH_EQ_ST_REQ(rc, TR_OK);
    TH_EQ_STR(db_journal(db), "delete");
    struct db_run r = run_of("n1", NULL, 1);
    TH_EQ_ST(db_run_create(db, &r), TR_OK);
    TH_EQ_ST(db_metric_add(db, "n1", 1, "loss", 0.5, 1), TR_OK);
    db_close(db);
    TH_EQ(sql_int(p, "SELECT count(*) FROM metrics"), 1);
    char j[160];
    snprintf(j, sizeof j, "%s-wal", p);
    TH_CHECK(access(j, F_OK) != 0);
}

static void nan_is_null(void)
{
    char p[128];
    path_in(p, sizeof p, "nan.db");
    struct db *db = NULL;
    TH_EQ_ST_REQ(db_open(p, 1, &db), TR_OK);
    struct db_run r = run_of("n1", NULL, 1);
    TH_EQ_ST(db_run_create(db, &r), TR_OK);
    TH_EQ_ST(db_metric_add(db, "n1", 1, "loss", NAN, 1), TR_OK);
    TH_EQ_ST(db_metric_add(db, "n1", 2, "loss", INFINITY, 1), TR_OK);
    TH_EQ_ST(db_eval_add(db, "n1", 2, NAN, 0.5, 10, 1), TR_OK);
    db_close(db);
    TH_EQ(sql_int(p, "SELECT count(*) FROM metrics WHERE value IS NULL"), 2);
    TH_EQ(sql_int(p, "SELECT count(*) FROM evals WHERE auc IS NULL AND logloss = 0.5"), 1);
}

/* db_sysmetric_add: unknown values (NaN CPU, no GPU) stored as NULL; `runs show`
 * sums them up per rank (peak RSS, mean CPU) and --json carries the summary;
 * removing the run removes its rows. */
static void sysmetrics_rows(void)
{
    char p[128];
    struct db *db = populated(p, sizeof p, "sys.db");
    TH_EQ_ST(db_sysmetric_add(db, "r1-aaaa", 0, 1001, 10, NAN, 100 << 20, NAN, -1), TR_OK);
    TH_EQ_ST(db_sysmetric_add(db, "r1-aaaa", 0, 1006, 20, 50.0, 200 << 20, NAN, -1), TR_OK);
    TH_EQ_ST(db_sysmetric_add(db, "r1-aaaa", 0, 1011, 30, 150.0, 150 << 20, NAN, -1), TR_OK);
    TH_EQ_ST(db_sysmetric_add(db, "r1-aaaa", 1, 1011, 30, 90.0, 64 << 20, 42.0, (int64_t)3 << 30), TR_OK);
    TH_EQ_ST(db_sysmetric_add(db, "ghost", 0, 1, 1, 1, 1, NAN, -1), TR_ERR_NOT_FOUND);
    db_close(db);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sysmetrics WHERE cpu_pct IS NULL"), 1);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sysmetrics WHERE gpu_mem_bytes IS NULL AND gpu_util IS NULL"), 3);
    TH_EQ(sql_int(p, "SELECT gpu_mem_bytes >> 30 FROM sysmetrics WHERE rank = 1"), 3);
    TH_EQ(runs("show", "r1", "--db", p, NULL), 0);
    TH_CHECKF(strstr(out, "system metrics (per rank"), "%s", out);
    /* rank 0: the mean of the CPU known (50, 150), the peak RSS 200 MiB, no GPU */
    TH_CHECKF(strstr(out, "  0     3        100.0%    200.0 MiB  -"), "%s", out);
    TH_CHECKF(strstr(out, "  1     1        90.0%     64.0 MiB   3072.0 MiB"), "%s", out);
    TH_EQ(runs("show", "r1", "--db", p, "--json", NULL), 0);
    TH_CHECKF(strstr(out, "\"sysmetrics_summary\"") && strstr(out, "\"peak_rss_bytes\": 209715200"), "%s", out);
    TH_EQ(runs("rm", "r1", "--db", p, NULL), 0);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sysmetrics"), 0);
}

static void concurrent_writers_in(const char *name)
{
    char p[128];
    path_in(p, sizeof p, name);
    pid_t kids[10];
    for (int k = 0; k < 10; k++) {
        kids[k] = fork();
        TH_REQUIRE(kids[k] >= 0);
        if (kids[k] == 0) {
            struct db *db = NULL;
            char id[16];
            snprintf(id, sizeof id, "w%d", k);
            if (db_open(p, 1, &db) != TR_OK)
                _exit(3);
            struct db_run r = run_of(id, NULL, k);
            if (db_run_create(db, &r) != TR_OK)
                _exit(4);
            for (int s = 0; s < 200; s++)
                if (db_metric_add(db, id, s, "loss", 1.0 / (s + 1), s) != TR_OK)
                    _exit(5);
            db_close(db);
            _exit(0);
        }
    }
    for (int k = 0; k < 10; k++) {
        int st = 0;
        TH_CHECK(waitpid(kids[k], &st, 0) == kids[k]);
        TH_CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d: status 0x%x", k, st);
    }
    TH_EQ(sql_int(p, "SELECT count(*) FROM runs"), 10);
    TH_EQ(sql_int(p, "SELECT count(*) FROM metrics"), 2000);
}

static void concurrent_writers(void)
{
    concurrent_writers_in("many.db");
}

/* the same with the rollback journal of network file systems */
static void concurrent_writers_netfs(void)
{
    setenv("TR_DB_FORCE_NETFS", "1", 1);
    concurrent_writers_in("many-netfs.db");
    unsetenv("TR_DB_FORCE_NETFS");
}

/* A file of schema version 1 (the tables as they were) is migrated forward by a
 * reader's open when it may be written: the launcher's columns and the indexes
 * that keep `runs show` from scanning a run's metrics once per metric row. */
static void v1_migrates(void)
{
    char p[128];
    path_in(p, sizeof p, "v1.db");
    unlink(p);
    sql_exec(p, "CREATE TABLE runs (id TEXT PRIMARY KEY NOT NULL, name TEXT, status TEXT NOT NULL, cmdline TEXT,"
                " config TEXT, git_hash TEXT, hosts TEXT, nodes INTEGER, workers INTEGER, slurm_job_id TEXT,"
                " ckpt_url TEXT, ckpt_run TEXT, start_time REAL, end_time REAL, final_metrics TEXT, reason TEXT,"
                " restarts INTEGER NOT NULL DEFAULT 0, resumed_from TEXT);"
                "CREATE TABLE metrics (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
                " step INTEGER NOT NULL, name TEXT NOT NULL, value REAL, time REAL);"
                "CREATE INDEX metrics_run_step ON metrics(run, step);"
                "CREATE TABLE evals (run TEXT NOT NULL, step INTEGER NOT NULL, auc REAL, logloss REAL,"
                " samples INTEGER, time REAL);"
                "CREATE TABLE checkpoints (run TEXT NOT NULL, step INTEGER NOT NULL, manifest_url TEXT,"
                " bytes INTEGER, stall_s REAL, time REAL);"
                "CREATE TABLE processes (run TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL,"
                " host TEXT, pid INTEGER, exit_code INTEGER, signal INTEGER, start_time REAL, end_time REAL);"
                "CREATE TABLE events (run TEXT NOT NULL, time REAL, kind TEXT NOT NULL, data TEXT);"
                "INSERT INTO runs (id, status, start_time) VALUES ('old', 'running', 1);"
                "INSERT INTO metrics VALUES ('old', 1, 'loss', 0.5, 1);"
                "PRAGMA user_version = 1;");
    struct db *db = NULL;
    TH_EQ_ST_REQ(db_open_readonly(p, &db), TR_OK);
    db_close(db);
    TH_EQ(sql_int(p, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    TH_EQ(sql_int(p, "SELECT count(*) FROM sqlite_master WHERE name IN ('metrics_run_name_step', 'runs_status',"
                     " 'runs_start_time')"), 3);
    TH_EQ(sql_int(p, "SELECT count(*) FROM pragma_table_info('runs') WHERE name IN ('launcher_host',"
                     " 'launcher_pid', 'launcher_start', 'heartbeat')"), 4);
    /* an old row names no launcher: nothing to judge it by, it stays running */
    TH_EQ(sql_int(p, "SELECT status = 'running' FROM runs WHERE id = 'old'"), 1);
    TH_EQ(sql_int(p, "SELECT count(*) FROM metrics"), 1);
    /* and is read through the new queries */
    TH_EQ_ST_REQ(db_open_readonly(p, &db), TR_OK);
    TH_EQ(runs("show", "old", "--db", p, NULL), 0);
    TH_CHECK(strstr(out, "loss") != NULL);
    db_close(db);
}

static char *get(struct db *db, const char *id, const char *col)
{
    static char buf[1024];
    char *v = NULL;
    buf[0] = '\0';
    if (db_run_get(db, id, col, &v) == TR_OK && v)
        snprintf(buf, sizeof buf, "%s", v);
    tr_free(v);
    return buf;
}

/* Runs whose launcher vanished become lost on the next open: on this host by the
 * pid (gone, or reused by another process: its start time differs), on another by
 * a stale heartbeat (also on this host's name in another pid namespace); live
 * launchers, fresh heartbeats, rows without a launcher and
 * runs that are not running are left alone; the reason names the launcher, the
 * last step and the last checkpoint; reopen and heartbeat make a run running again. */
static void lost_runs(void)
{
    char p[128], host[256] = "";
    gethostname(host, sizeof host - 1);
    path_in(p, sizeof p, "lost.db");
    unlink(p);
    struct db *db = NULL;
    TH_EQ_ST_REQ(db_open(p, 1, &db), TR_OK);
    const double now = (double)time(NULL);
    pid_t child = fork();
    TH_REQUIRE(child >= 0);
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0); /* its pid names no process now */
    struct db_run alive = run_of("alive", NULL, now), dead = run_of("dead", NULL, now),
                  reused = run_of("reused", NULL, now), stale = run_of("stale", NULL, now - 1000),
                  fresh = run_of("fresh", NULL, now - 1000), pre = run_of("pre", NULL, now),
                  otherns = run_of("otherns", NULL, now);
    dead.launcher_host = host;
    dead.launcher_pid = child;
    dead.launcher_start = 12345;
    reused.launcher_host = host;
    reused.launcher_pid = getpid();
    reused.launcher_start = 1; /* our pid, but not our start time */
    stale.launcher_host = fresh.launcher_host = "elsewhere";
    stale.launcher_pid = fresh.launcher_pid = 77;
    pre.launcher_host = host;
    pre.launcher_pid = child;
    otherns.launcher_host = host; /* this host's name, another pid namespace: its pid means nothing here */
    otherns.launcher_pid = child;
    otherns.launcher_ns = "another-boot/pid:[1]";
    const struct db_run *all[] = {&alive, &dead, &reused, &stale, &fresh, &pre, &otherns};
    for (size_t i = 0; i < TR_ARRAY_SIZE(all); i++)
        TH_EQ_ST_REQ(db_run_create(db, all[i]), TR_OK);
    TH_EQ_ST(db_run_heartbeat(db, "fresh", now), TR_OK);
    TH_EQ_ST(db_run_heartbeat(db, "nope", now), TR_ERR_NOT_FOUND);
    TH_EQ_ST(db_run_finish(db, "pre", DB_PREEMPTED, now, NULL, "SIGUSR1"), TR_OK);
    TH_EQ_ST(db_metric_add(db, "dead", 30, "loss", 0.5, now), TR_OK);
    TH_EQ_ST(db_ckpt_add(db, "dead", 20, "serve:/ck/runs/dead/manifests/20.json", 10, 0.1, now), TR_OK);
    TH_EQ_STR(get(db, "alive", "launcher_host"), host);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    TH_EQ_STR(get(db, "alive", "launcher_pid"), pid);
    TH_CHECK(atoll(get(db, "alive", "launcher_start")) > 0);
    db_close(db);

    TH_EQ_ST_REQ(db_open_readonly(p, &db), TR_OK); /* a reader records it too, when it may write */
    TH_EQ_STR(get(db, "alive", "status"), DB_RUNNING);
    TH_EQ_STR(get(db, "fresh", "status"), DB_RUNNING);
    TH_EQ_STR(get(db, "pre", "status"), DB_PREEMPTED);
    TH_EQ_STR(get(db, "otherns", "status"), DB_RUNNING); /* judged by its fresh heartbeat */
    TH_CHECK(strchr(get(db, "alive", "launcher_ns"), '/') != NULL);
    TH_EQ_STR(get(db, "dead", "status"), DB_LOST);
    TH_EQ_STR(get(db, "reused", "status"), DB_LOST);
    TH_EQ_STR(get(db, "stale", "status"), DB_LOST);
    char want[512];
    snprintf(want, sizeof want,
             "the launcher (pid %d on %s) ended without recording an end; last step 30, last checkpoint step 20 "
             "(serve:/ck/runs/dead/manifests/20.json)", (int)child, host);
    TH_EQ_STR(get(db, "dead", "reason"), want);
    TH_CHECK(strstr(get(db, "stale", "reason"), "no heartbeat from the launcher (pid 77 on elsewhere)") != NULL);
    TH_CHECK(strstr(get(db, "stale", "reason"), "last step none, last checkpoint none") != NULL);
    TH_CHECK(*get(db, "dead", "end_time"));
    db_close(db);
    TH_EQ(sql_int(p, "SELECT count(*) FROM events WHERE kind = 'lost'"), 3);
    TH_EQ(runs("list", "--status", "lost", "--db", p, NULL), 0);
    TH_CHECK(strstr(out, "dead") && strstr(out, "reused") && strstr(out, "stale") && !strstr(out, "alive"));

    /* a requeued job takes the row: running, with this process as its launcher */
    TH_EQ_ST_REQ(db_open(p, 0, &db), TR_OK);
    TH_EQ_ST(db_run_reopen(db, "dead", NULL), TR_OK);
    TH_EQ_ST(db_run_heartbeat(db, "stale", now), TR_OK); /* only slow: running again */
    db_close(db);
    TH_EQ_ST_REQ(db_open(p, 0, &db), TR_OK);
    TH_EQ_STR(get(db, "dead", "status"), DB_RUNNING);
    TH_EQ_STR(get(db, "dead", "launcher_pid"), pid);
    TH_EQ_STR(get(db, "stale", "status"), DB_RUNNING);
    TH_EQ_STR(get(db, "stale", "reason"), "");
    db_close(db);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    TH_CHECK(dir[0] && system(cmd) == 0);
}

static const struct th_case cases[] = {
    {"create_open", create_open},
    {"refusals", refusals},
    {"empty_file_migrates", empty_file_migrates},
    {"writes_and_commands", writes_and_commands},
    {"resolve", resolve},
    {"rm_cascades", rm_cascades},
    {"fs_types", fs_types},
    {"force_netfs", force_netfs},
    {"nan_is_null", nan_is_null},
    {"sysmetrics_rows", sysmetrics_rows},
    {"plot_chain", plot_chain},
    {"concurrent_writers", concurrent_writers},
    {"concurrent_writers_netfs", concurrent_writers_netfs},
    {"v1_migrates", v1_migrates},
    {"lost_runs", lost_runs},
    {"cleanup", cleanup},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
