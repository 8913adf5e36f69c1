/* lost.c: who runs a run (the launcher's host, pid, the pid's start time and
 * pid space, which the writes of write.c record) and, on every open, the running
 * runs whose launcher vanished: recorded lost where the file may be written,
 * else shown lost by the reader's connection only (a temporary view). It never
 * signals or waits for a launcher; it only looks at /proc and the heartbeats. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"

/* ---- the launcher ---------------------------------------------------------------------- */

/* The start time of process pid (field 22 of /proc/PID/stat, clock ticks since
 * boot), or -1 when there is no such process or it is a zombie. */
int64_t db_proc_start(int64_t pid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%lld/stat", (long long)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0)
        return -1;
    buf[k] = '\0';
    char *q = strrchr(buf, ')');
    if (!q || q[1] != ' ' || q[2] == 'Z' || q[2] == 'X')
        return -1;
    q += 2; /* field 3, the state */
    for (int f = 3; f < 22; f++) {
        if (!(q = strchr(q, ' ')))
            return -1;
        q++;
    }
    return strtoll(q, NULL, 10);
}

/* Where this process's pids mean what they say: the boot id and the pid
 * namespace ("BOOT_ID/pid:[INODE]"); "" when unknown. A reader in another (a
 * container with the host's name, the host after a reboot) judges a launcher by
 * its heartbeat instead of its pid. */
void db_pid_space(char *buf, size_t n)
{
    char boot[64] = "", ns[64] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t k = read(fd, boot, sizeof boot - 1);
        close(fd);
        boot[k > 0 ? k : 0] = '\0';
        boot[strcspn(boot, "\n")] = '\0';
    }
    ssize_t k = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    ns[k > 0 ? k : 0] = '\0';
    if (*boot && *ns)
        snprintf(buf, n, "%s/%s", boot, ns);
    else
        snprintf(buf, n, "%s", "");
}

void db_host_name(char *buf, size_t n)
{
    if (gethostname(buf, n - 1) != 0)
        snprintf(buf, n, "localhost");
    buf[n - 1] = '\0';
}

/* ---- lost runs ---------------------------------------------------------------------------- */

/* A run marked running whose launcher is gone. */
struct lost_run {
    char *id, *host, *reason;
    int64_t pid;
    double end; /* its last heartbeat, else now */
};

static double lost_after_s(void)
{
    const char *e = getenv("TR_DB_LOST_AFTER_S"); /* tests */
    double v = e && *e ? strtod(e, NULL) : 0;
    return v > 0 ? v : DB_LOST_AFTER_S;
}

static void lost_free(struct lost_run *l, int n)
{
    for (int i = 0; l && i < n; i++) {
        tr_free(l[i].id);
        tr_free(l[i].host);
        tr_free(l[i].reason);
    }
    tr_free(l);
}

/* The running runs whose launcher is gone: on this host, its pid does not run (or
 * runs another program since: the start time differs); on another, its heartbeat
 * is older than lost_after_s(). Runs without a launcher recorded (older rows) are
 * left alone. */
static enum tr_status find_lost(struct db *db, struct lost_run **out, int *n)
{
    static const char sql[] =
        "SELECT id, launcher_host, launcher_pid, launcher_start, heartbeat, launcher_ns,"
        " (SELECT max(step) FROM metrics WHERE run = r.id),"
        " (SELECT step FROM checkpoints WHERE run = r.id ORDER BY step DESC, rowid DESC LIMIT 1),"
        " (SELECT manifest_url FROM checkpoints WHERE run = r.id ORDER BY step DESC, rowid DESC LIMIT 1)"
        " FROM main.runs r WHERE status = 'running' AND launcher_pid IS NOT NULL";
    enum tr_status rc = TR_OK;
    sqlite3_stmt *st = NULL;
    struct lost_run *l = NULL;
    int k = 0, s;
    *out = NULL;
    *n = 0;
    TR_CHECK(db_prepare(db, &st, sql, NULL));
    char me[256], space[160];
    db_host_name(me, sizeof me);
    db_pid_space(space, sizeof space);
    const double now = (double)time(NULL), after = lost_after_s();
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0), *host = (const char *)sqlite3_column_text(st, 1);
        const int64_t pid = sqlite3_column_int64(st, 2);
        const int have_hb = sqlite3_column_type(st, 4) != SQLITE_NULL;
        const double hb = sqlite3_column_double(st, 4);
        char why[512], step[32] = "none", ck[1024] = "none";
        const char *ns = (const char *)sqlite3_column_text(st, 5);
        if (host && !strcmp(host, me) && (!ns || !strcmp(ns, space))) {
            const int64_t t = db_proc_start(pid);
            if (t >= 0 && (sqlite3_column_type(st, 3) == SQLITE_NULL || t == sqlite3_column_int64(st, 3)))
                continue;
            snprintf(why, sizeof why, "the launcher (pid %lld on %s) ended without recording an end", (long long)pid,
                     host);
        } else {
            if (have_hb && now - hb <= after)
                continue;
            if (!have_hb)
                continue; /* never beat: nothing to judge by */
            snprintf(why, sizeof why,
                     "no heartbeat from the launcher (pid %lld on %s) for %.0f s (more than %.0f s): it ended "
                     "without recording an end", (long long)pid, host ? host : "?", now - hb, after);
        }
        if (sqlite3_column_type(st, 6) != SQLITE_NULL)
            snprintf(step, sizeof step, "%lld", (long long)sqlite3_column_int64(st, 6));
        if (sqlite3_column_type(st, 7) != SQLITE_NULL)
            snprintf(ck, sizeof ck, "step %lld (%.900s)", (long long)sqlite3_column_int64(st, 7),
                     sqlite3_column_text(st, 8) ? (const char *)sqlite3_column_text(st, 8) : "-");
        struct lost_run *g = tr_realloc(l, (size_t)(k + 1) * sizeof *l);
        if (!g) {
            rc = TR_ERR_NOMEM;
            break;
        }
        l = g;
        memset(&l[k], 0, sizeof l[k]);
        k++;
        l[k - 1].pid = pid;
        l[k - 1].end = have_hb ? hb : now;
        l[k - 1].id = tr_strdup(id);
        l[k - 1].host = host ? tr_strdup(host) : NULL;
        if (asprintf(&l[k - 1].reason, "%s; last step %s, last checkpoint %s", why, step, ck) < 0)
            l[k - 1].reason = NULL;
        else {
            char *r = tr_strdup(l[k - 1].reason);
            free(l[k - 1].reason);
            l[k - 1].reason = r;
        }
        if (!l[k - 1].id || !l[k - 1].reason || (host && !l[k - 1].host)) {
            rc = TR_ERR_NOMEM;
            break;
        }
    }
    if (rc == TR_OK && s != SQLITE_DONE)
        rc = db_sql_error(db, "cannot read the running runs");
    sqlite3_finalize(st);
    if (rc != TR_OK) {
        lost_free(l, k);
        return rc;
    }
    *out = l;
    *n = k;
    return TR_OK;
}

/* Records the verdicts on the writable connection h (no logging; SQLite's code
 * back). The row is changed only while it still names the same launcher (a
 * requeued job may have taken it since). */
static int record_lost(sqlite3 *h, const struct lost_run *l, int n)
{
    int s = sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    for (int i = 0; s == SQLITE_OK && i < n; i++) {
        sqlite3_stmt *st = NULL;
        s = sqlite3_prepare_v2(h,
                               "UPDATE runs SET status = 'lost', end_time = ?1, reason = ?2 WHERE id = ?3 AND"
                               " status = 'running' AND launcher_pid = ?4 AND launcher_host IS ?5",
                               -1, &st, NULL);
        if (s == SQLITE_OK) {
            sqlite3_bind_double(st, 1, l[i].end);
            sqlite3_bind_text(st, 2, l[i].reason, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 3, l[i].id, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 4, l[i].pid);
            sqlite3_bind_text(st, 5, l[i].host, -1, SQLITE_STATIC);
            s = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(h);
        }
        sqlite3_finalize(st);
        if (s != SQLITE_OK || sqlite3_changes(h) == 0)
            continue;
        /* its processes ended with it, however (exit unknown) */
        s = sqlite3_prepare_v2(h, "UPDATE processes SET end_time = ?1 WHERE run = ?2 AND end_time IS NULL", -1, &st,
                               NULL);
        if (s == SQLITE_OK) {
            sqlite3_bind_double(st, 1, l[i].end);
            sqlite3_bind_text(st, 2, l[i].id, -1, SQLITE_STATIC);
            s = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(h);
        }
        sqlite3_finalize(st);
        if (s != SQLITE_OK)
            continue;
        json_t *d = json_pack("{s:s}", "reason", l[i].reason);
        char *data = d ? json_dumps(d, JSON_COMPACT) : NULL;
        json_decref(d);
        s = sqlite3_prepare_v2(h, "INSERT INTO events (run, time, kind, data) VALUES (?1, ?2, 'lost', ?3)", -1, &st,
                               NULL);
        if (s == SQLITE_OK) {
            sqlite3_bind_text(st, 1, l[i].id, -1, SQLITE_STATIC);
            sqlite3_bind_double(st, 2, (double)time(NULL));
            sqlite3_bind_text(st, 3, data, -1, SQLITE_STATIC);
            s = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(h);
        }
        sqlite3_finalize(st);
        free(data);
    }
    if (s == SQLITE_OK)
        s = sqlite3_exec(h, "COMMIT", NULL, NULL, NULL);
    if (s != SQLITE_OK && !sqlite3_get_autocommit(h))
        sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
    return s;
}

/* A reader that cannot record the verdicts shows them: a temporary view `runs`
 * (the temp schema comes first in name lookup) over main.runs with the lost
 * runs' status and reason. */
static enum tr_status overlay_lost(struct db *db, const struct lost_run *l, int n)
{
    char sql[2048] = "CREATE TEMP VIEW IF NOT EXISTS runs AS SELECT ";
    for (size_t i = 0; i < DB_RUN_NCOLUMNS; i++) {
        const char *c = db_run_columns[i];
        size_t k = strlen(sql);
        if (db->version < 3 && i >= DB_RUN_NCOLUMNS_V2) /* not in the file yet: tags, note */
            snprintf(sql + k, sizeof sql - k, "NULL AS %s, ", c);
        else if (!strcmp(c, "status"))
            snprintf(sql + k, sizeof sql - k, "CASE WHEN l.id IS NULL THEN r.status ELSE 'lost' END AS status, ");
        else if (!strcmp(c, "reason") || !strcmp(c, "end_time"))
            snprintf(sql + k, sizeof sql - k, "CASE WHEN l.id IS NULL THEN r.%s ELSE l.%s END AS %s, ", c, c, c);
        else
            snprintf(sql + k, sizeof sql - k, "r.%s AS %s, ", c, c);
    }
    size_t k = strlen(sql) - 2;
    snprintf(sql + k, sizeof sql - k, " FROM main.runs r LEFT JOIN temp.lost_runs l ON l.id = r.id");
    TR_CHECK(db_exec(db, "CREATE TEMP TABLE IF NOT EXISTS lost_runs (id TEXT PRIMARY KEY, reason TEXT, end_time REAL)",
                  "cannot make a temporary table"));
    TR_CHECK(db_exec(db, sql, "cannot make a temporary view"));
    for (int i = 0; i < n; i++) {
        sqlite3_stmt *st = NULL;
        TR_CHECK(db_prepare(db, &st, "INSERT OR REPLACE INTO temp.lost_runs VALUES (?, ?, ?)", "ttd", l[i].id,
                            l[i].reason, l[i].end));
        int s = sqlite3_step(st);
        sqlite3_finalize(st);
        if (s != SQLITE_DONE)
            return db_sql_error(db, "cannot note a lost run");
    }
    return TR_OK;
}

/* On every open: the running runs whose launcher vanished become lost, recorded
 * in the file (a writer's connection: db's own, or for a reader a short one of
 * its own when it may write) or else shown so by this connection. */
enum tr_status db_check_lost(struct db *db)
{
    struct lost_run *l = NULL;
    int n = 0;
    enum tr_status rc = TR_OK;
    if (db->version < 2)
        goto exit;
    TR_CHECK(find_lost(db, &l, &n));
    if (n == 0)
        goto exit;
    int s = SQLITE_READONLY;
    if (!sqlite3_db_readonly(db->h, "main")) {
        s = record_lost(db->h, l, n);
    } else if (db_may_write(db->path)) {
        sqlite3 *w = NULL;
        s = sqlite3_open_v2(db->path, &w, SQLITE_OPEN_READWRITE, NULL);
        if (s == SQLITE_OK) {
            if (db->busy)
                sqlite3_busy_handler(w, db->busy, db->busy_arg);
            else
                sqlite3_busy_timeout(w, 5000);
            s = record_lost(w, l, n);
        }
        sqlite3_close_v2(w);
    }
    for (int i = 0; i < n; i++)
        LOG_INFO(DB, "run history '%s': run %s is lost: %s", db->path, l[i].id, l[i].reason);
    if (s != SQLITE_OK) {
        if (s != SQLITE_READONLY && (s & 0xff) != SQLITE_READONLY)
            LOG_WARN("run history '%s': cannot record that %d run%s lost (%s): shown so, not recorded", db->path,
                     n, n == 1 ? " is" : "s are", sqlite3_errstr(s));
        rc = overlay_lost(db, l, n);
    }
exit:
    lost_free(l, n);
    /* a file read without its migration to version 3: the queries' tags and note
     * are NULL (a lost-run view above has them already) */
    if (rc == TR_OK && db->version < 3)
        rc = db_exec(db, "CREATE TEMP VIEW IF NOT EXISTS runs AS SELECT *, NULL AS tags, NULL AS note FROM main.runs",
                     "cannot make a temporary view");
    return rc;
}
