/* db.c: the run history store (db.h) on SQLite: opening (default path, directory
 * and file creation, refusal of foreign and newer files), the journal choice by
 * file system type, forward migrations in PRAGMA user_version, and the writes the
 * launcher makes, each one BEGIN IMMEDIATE transaction. It does not format
 * anything for people: runs_cmd.c does. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"

#define DB_BUSY_MS 30000

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

/* Version v + 1 is reached by running migrations[v]. Append only. */
static const char *const migrations[] = {
    /* 1: the tables of db.h */
    "CREATE TABLE runs ("
    " id TEXT PRIMARY KEY NOT NULL, name TEXT, status TEXT NOT NULL, cmdline TEXT, config TEXT,"
    " git_hash TEXT, hosts TEXT, nodes INTEGER, workers INTEGER, slurm_job_id TEXT, ckpt_url TEXT,"
    " ckpt_run TEXT, start_time REAL, end_time REAL, final_metrics TEXT, reason TEXT,"
    " restarts INTEGER NOT NULL DEFAULT 0, resumed_from TEXT);"
    "CREATE INDEX runs_slurm_job_id ON runs(slurm_job_id);"
    "CREATE INDEX runs_name ON runs(name);"
    "CREATE TABLE metrics (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL, name TEXT NOT NULL, value REAL, time REAL);"
    "CREATE INDEX metrics_run_step ON metrics(run, step);"
    "CREATE TABLE evals (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL, auc REAL, logloss REAL, samples INTEGER, time REAL);"
    "CREATE INDEX evals_run_step ON evals(run, step);"
    "CREATE TABLE checkpoints (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL, manifest_url TEXT, bytes INTEGER, stall_s REAL, time REAL);"
    "CREATE INDEX checkpoints_run_step ON checkpoints(run, step);"
    "CREATE TABLE processes (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " attempt INTEGER NOT NULL, rank INTEGER NOT NULL, host TEXT, pid INTEGER, exit_code INTEGER,"
    " signal INTEGER, start_time REAL, end_time REAL);"
    "CREATE INDEX processes_run ON processes(run, attempt, rank);"
    "CREATE TABLE events (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " time REAL, kind TEXT NOT NULL, data TEXT);"
    "CREATE INDEX events_run_time ON events(run, time);",
    /* 2: who runs a run (the launcher's host, pid and the pid's start time, and its
     * heartbeat) so that a run whose launcher vanished can be called lost; indexes
     * for the last value of each metric (runs show), the list's order and status */
    "ALTER TABLE runs ADD COLUMN launcher_host TEXT;"
    "ALTER TABLE runs ADD COLUMN launcher_pid INTEGER;"
    "ALTER TABLE runs ADD COLUMN launcher_start INTEGER;"
    "ALTER TABLE runs ADD COLUMN launcher_ns TEXT;"
    "ALTER TABLE runs ADD COLUMN heartbeat REAL;"
    "CREATE INDEX metrics_run_name_step ON metrics(run, name, step);"
    "CREATE INDEX runs_start_time ON runs(start_time);"
    "CREATE INDEX runs_status ON runs(status);",
};
_Static_assert(sizeof migrations / sizeof migrations[0] == DB_SCHEMA_VERSION, "one migration per version");

static const char *const run_columns[] = {
    "id",       "name",         "status",   "cmdline",  "config",     "git_hash",      "hosts",
    "nodes",    "workers",      "slurm_job_id", "ckpt_url", "ckpt_run", "start_time", "end_time",
    "final_metrics", "reason", "restarts", "resumed_from", "launcher_host", "launcher_pid", "launcher_start",
    "launcher_ns", "heartbeat",
};

/* ---- paths -------------------------------------------------------------------------- */

char *db_default_path(char *buf, size_t n)
{
    const char *env = getenv("TR_DB"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    int k;
    if (env && *env)
        k = snprintf(buf, n, "%s", env);
    else if (xdg && *xdg)
        k = snprintf(buf, n, "%s/terarec/runs.db", xdg);
    else if (home && *home)
        k = snprintf(buf, n, "%s/.local/share/terarec/runs.db", home);
    else {
        LOG_ERROR("no place for the run history: neither TR_DB, XDG_DATA_HOME nor HOME is set");
        LOG_HINT("give --db PATH");
        return NULL;
    }
    if (k < 0 || (size_t)k >= n) {
        LOG_ERROR("the run history's path is too long (%d bytes)", k);
        LOG_HINT("give a shorter --db PATH");
        return NULL;
    }
    return buf;
}

/* Creates the missing directories of dir with mode 0700 (the terarec data dir
 * holds nobody else's business). TR_ERR_ARG naming the directory. */
static enum tr_status mkdirs(const char *dir)
{
    char p[4096];
    int k = snprintf(p, sizeof p, "%s", dir);
    if (k < 0 || (size_t)k >= sizeof p)
        return TR_ERR_ARG;
    for (char *s = p + 1;; s++) {
        int last = *s == '\0';
        if (*s == '/' || last) {
            *s = '\0';
            if (mkdir(p, 0700) != 0 && errno != EEXIST) {
                LOG_ERROR("cannot create the directory '%s' for the run history: %s", p, strerror(errno));
                LOG_HINT("give a writable --db PATH (or TR_DB)");
                return TR_ERR_ARG;
            }
            if (last)
                break;
            *s = '/';
        }
    }
    return TR_OK;
}

/* The directory of path into buf ("." when it has none). */
static void dir_of(const char *path, char *buf, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(buf, n, ".");
    else if (slash == path)
        snprintf(buf, n, "/");
    else
        snprintf(buf, n, "%.*s", (int)(slash - path), path);
}

/* ---- journal -------------------------------------------------------------------------- */

int db_fs_allows_wal(long f_type)
{
    static const unsigned long network[] = {
        0x6969,     /* NFS */
        0x517B,     /* SMB */
        0xFF534D42, /* CIFS */
        0xFE534D42, /* SMB2 */
        0x0BD00BD0, /* Lustre */
        0x47504653, /* GPFS */
        0x19830326, /* BeeGFS */
        0x00C36400, /* CephFS */
        0x65735546, /* FUSE */
        0x01021997, /* 9p */
        0x5346414F, /* AFS */
        0x7461636f, /* OCFS2 */
        0x01161970, /* GFS2 */
        0xAAD7AAEA, /* panfs */
    };
    const unsigned long t = (unsigned long)f_type & 0xffffffffUL; /* f_type may come sign-extended */
    for (size_t i = 0; i < TR_ARRAY_SIZE(network); i++)
        if (t == network[i])
            return 0;
    return 1;
}

static int wal_wanted(const char *path)
{
    const char *force = getenv("TR_DB_FORCE_NETFS");
    if (force && !strcmp(force, "1"))
        return 0;
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    struct statfs sf;
    if (statfs(dir, &sf) != 0) {
        LOG_WARN("cannot tell the file system of '%s' (%s): the journal will be 'delete'", dir, strerror(errno));
        return 0;
    }
    return db_fs_allows_wal((long)sf.f_type);
}

/* ---- statements ------------------------------------------------------------------------ */

sqlite3 *db_sqlite(struct db *db)
{
    return db->h;
}

const char *db_path(const struct db *db)
{
    return db->path;
}

const char *db_journal(const struct db *db)
{
    return db->journal;
}

enum tr_status db_sql_error(struct db *db, const char *what)
{
    LOG_ERROR("run history '%s': %s: %s", db->path, what, sqlite3_errmsg(db->h));
    return TR_ERR_DB;
}

enum tr_status db_preparev(struct db *db, sqlite3_stmt **st, const char *sql, const char *types, va_list ap)
{
    *st = NULL;
    if (sqlite3_prepare_v2(db->h, sql, -1, st, NULL) != SQLITE_OK)
        return db_sql_error(db, "cannot prepare a statement");
    int rc = SQLITE_OK;
    for (int i = 1; types && types[i - 1] && rc == SQLITE_OK; i++) {
        switch (types[i - 1]) {
        case 't': {
            const char *s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(*st, i, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(*st, i);
            break;
        }
        case 'i':
            rc = sqlite3_bind_int64(*st, i, (sqlite3_int64)va_arg(ap, int64_t));
            break;
        case 'n':
            rc = sqlite3_bind_int(*st, i, va_arg(ap, int));
            break;
        case 'd': {
            double d = va_arg(ap, double);
            rc = isfinite(d) ? sqlite3_bind_double(*st, i, d) : sqlite3_bind_null(*st, i);
            break;
        }
        default:
            TR_BUG("bad bind type '%c' in \"%s\"", types[i - 1], types);
        }
    }
    if (rc != SQLITE_OK) {
        enum tr_status s = db_sql_error(db, "cannot bind a value");
        sqlite3_finalize(*st);
        *st = NULL;
        return s;
    }
    return TR_OK;
}

enum tr_status db_prepare(struct db *db, sqlite3_stmt **st, const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    enum tr_status rc = db_preparev(db, st, sql, types, ap);
    va_end(ap);
    return rc;
}

static enum tr_status exec(struct db *db, const char *sql, const char *what)
{
    char *msg = NULL;
    if (sqlite3_exec(db->h, sql, NULL, NULL, &msg) != SQLITE_OK) {
        LOG_ERROR("run history '%s': %s: %s", db->path, what, msg ? msg : sqlite3_errmsg(db->h));
        sqlite3_free(msg);
        return TR_ERR_DB;
    }
    return TR_OK;
}

enum tr_status db_begin(struct db *db)
{
    return exec(db, "BEGIN IMMEDIATE", "cannot start a write (another process may hold it past the busy timeout)");
}

enum tr_status db_commit(struct db *db)
{
    return exec(db, "COMMIT", "cannot commit");
}

void db_rollback(struct db *db)
{
    if (!sqlite3_get_autocommit(db->h))
        sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
}

/* One statement in its own transaction; *changes (may be NULL) gets the rows it
 * changed. A foreign key failure means the run does not exist: TR_ERR_NOT_FOUND. */
static enum tr_status write1(struct db *db, const char *run, int *changes, const char *sql, const char *types, ...)
{
    enum tr_status rc = TR_OK;
    sqlite3_stmt *st = NULL;
    TR_CHECK(db_begin(db));
    va_list ap;
    va_start(ap, types);
    rc = db_preparev(db, &st, sql, types, ap);
    va_end(ap);
    if (rc != TR_OK)
        goto fail;
    int s = sqlite3_step(st);
    const int ext = sqlite3_extended_errcode(db->h);
    if ((s & 0xff) == SQLITE_CONSTRAINT && ext == SQLITE_CONSTRAINT_FOREIGNKEY) {
        LOG_ERROR("run history '%s': no run '%s'", db->path, run);
        rc = TR_ERR_NOT_FOUND;
        goto fail;
    }
    if ((s & 0xff) == SQLITE_CONSTRAINT && (ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE)) {
        LOG_ERROR("run history '%s': a run '%s' exists already", db->path, run);
        rc = TR_ERR_ARG;
        goto fail;
    }
    if (s != SQLITE_DONE) {
        rc = db_sql_error(db, "cannot write");
        goto fail;
    }
    if (changes)
        *changes = sqlite3_changes(db->h);
    sqlite3_finalize(st);
    st = NULL;
    TR_CHECK_GOTO(db_commit(db), rc, fail);
    return TR_OK;
fail:
    sqlite3_finalize(st);
    db_rollback(db);
    return rc;
}

/* ---- open ------------------------------------------------------------------------------- */

static enum tr_status user_version(struct db *db, int *v)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db->h, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        int code = sqlite3_errcode(db->h);
        sqlite3_finalize(st);
        if (code == SQLITE_NOTADB) {
            LOG_ERROR("'%s' is not an SQLite database, so not a terarec run history", db->path);
            LOG_HINT("give the run history's path with --db (or TR_DB)");
            return TR_ERR_ARG;
        }
        return db_sql_error(db, "cannot read the schema version");
    }
    *v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return TR_OK;
}

static enum tr_status newer_schema(const struct db *db, int v)
{
    LOG_ERROR("run history '%s' has schema version %d; this terarec knows versions up to %d", db->path, v,
              DB_SCHEMA_VERSION);
    LOG_HINT("a newer terarec wrote it: use that one, or another --db PATH");
    return TR_ERR_ARG;
}

/* A file at schema version 0 must be empty: an SQLite database of something else
 * (tables but no version) is not made into a run history. TR_ERR_ARG. */
static enum tr_status check_foreign(struct db *db)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db->h, "SELECT count(*) FROM sqlite_master", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return db_sql_error(db, "cannot read the schema");
    }
    const int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (n == 0)
        return TR_OK;
    LOG_ERROR("'%s' is an SQLite database of something else (%d schema objects, no schema version), not a terarec "
              "run history", db->path, n);
    LOG_HINT("give the run history's path with --db (or TR_DB)");
    return TR_ERR_ARG;
}

static enum tr_status migrate(struct db *db)
{
    int v = 0;
    TR_CHECK(user_version(db, &v));
    if (v > DB_SCHEMA_VERSION)
        return newer_schema(db, v);
    if (v == DB_SCHEMA_VERSION)
        return TR_OK;
    enum tr_status rc = TR_OK;
    TR_CHECK(db_begin(db));
    /* another process may have migrated between the read and the lock */
    TR_CHECK_GOTO(user_version(db, &v), rc, fail);
    if (v == 0)
        TR_CHECK_GOTO(check_foreign(db), rc, fail);
    for (; v < DB_SCHEMA_VERSION; v++) {
        char what[64];
        snprintf(what, sizeof what, "cannot migrate to schema version %d", v + 1);
        TR_CHECK_GOTO(exec(db, migrations[v], what), rc, fail);
        LOG_INFO(DB, "run history '%s': schema version %d", db->path, v + 1);
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", DB_SCHEMA_VERSION);
    TR_CHECK_GOTO(exec(db, sql, "cannot set the schema version"), rc, fail);
    TR_CHECK_GOTO(db_commit(db), rc, fail);
    return TR_OK;
fail:
    db_rollback(db);
    return rc;
}

/* journal_mode and synchronous for the file system; the mode in effect in db->journal. */
static enum tr_status set_journal(struct db *db, int wal)
{
    const char *sql = wal ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE";
    char mode[16] = "";
    for (int tries = 0;; tries++) {
        sqlite3_stmt *st = NULL;
        int s = sqlite3_prepare_v2(db->h, sql, -1, &st, NULL);
        if (s == SQLITE_OK)
            s = sqlite3_step(st);
        if (s == SQLITE_ROW)
            snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        if (s == SQLITE_ROW)
            break;
        /* switching modes needs the file to itself; other openers finish quickly */
        if ((s == SQLITE_BUSY || s == SQLITE_LOCKED) && tries < 300) {
            usleep(100000);
            continue;
        }
        return db_sql_error(db, "cannot set the journal mode");
    }
    db->journal = !strcasecmp(mode, "wal") ? "wal" : "delete";
    if (wal != !strcmp(db->journal, "wal"))
        LOG_WARN("run history '%s': journal is '%s', not the '%s' asked", db->path, mode, wal ? "wal" : "delete");
    if (!strcmp(db->journal, "wal"))
        TR_CHECK(exec(db, "PRAGMA synchronous=NORMAL", "cannot set synchronous"));
    return TR_OK;
}

/* What is at path, before SQLite touches it: a missing file (create or refuse),
 * something a writer cannot write (the file, or its directory where SQLite keeps
 * its journal), or a file that does not start like an SQLite database. */
static enum tr_status check_file(const char *path, int write, int create)
{
    int fd = open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        if (!create) {
            LOG_ERROR("no run history at '%s'", path);
            LOG_HINT("'terarec train' creates it; or give another with --db PATH (or TR_DB)");
            return TR_ERR_NOT_FOUND;
        }
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        TR_CHECK(mkdirs(dir));
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        const int e = errno;
        if (write) {
            LOG_ERROR("cannot write the run history '%s': %s", path, strerror(e));
            LOG_HINT("reading works where writing does not (terarec runs list/show/serve); to write, give a "
                     "writable --db PATH (or TR_DB)");
        } else {
            LOG_ERROR("cannot open the run history '%s': %s", path, strerror(e));
            LOG_HINT("give a readable --db PATH (or TR_DB)");
        }
        return TR_ERR_ARG;
    }
    char head[16];
    ssize_t k = read(fd, head, sizeof head);
    struct stat sb;
    int isreg = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
    close(fd);
    if (!isreg || (k != 0 && (k != (ssize_t)sizeof head || memcmp(head, "SQLite format 3", 16) != 0))) {
        LOG_ERROR("'%s' is not an SQLite database, so not a terarec run history", path);
        LOG_HINT("give the run history's path with --db (or TR_DB)");
        return TR_ERR_ARG;
    }
    if (write) {
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        if (access(dir, W_OK) != 0) {
            const int e = errno;
            LOG_ERROR("cannot write the run history '%s': its directory '%s' is not writable (SQLite keeps its "
                      "journal there): %s", path, dir, strerror(e));
            LOG_HINT("reading works where writing does not (terarec runs list/show/serve); to write, give a "
                     "--db PATH in a writable directory (or TR_DB)");
            return TR_ERR_ARG;
        }
    }
    return TR_OK;
}

/* path as a file: URI with query (e.g. "mode=ro"), '?', '#' and '%' escaped. NULL
 * when out of memory. tr_malloc'd. */
static char *file_uri(const char *path, const char *query)
{
    size_t n = strlen(path), k = 0;
    char *u = tr_malloc(3 * n + strlen(query) + 16);
    if (!u)
        return NULL;
    k += (size_t)sprintf(u, "file:");
    for (const char *p = path; *p; p++) {
        if (*p == '?' || *p == '#' || *p == '%')
            k += (size_t)sprintf(u + k, "%%%02X", (unsigned char)*p);
        else
            u[k++] = *p;
    }
    sprintf(u + k, "?%s", query);
    return u;
}

/* The start both opens share: the connection (uri with `flags`), extended result
 * codes, the busy timeout, and db->version, refused when newer than this
 * terarec's. quiet: no error logged for a connection that cannot be opened or
 * read (the caller tries another way); *sqlite_rc gets SQLite's code. On error
 * nothing is left open. */
static enum tr_status open_conn(const char *path, const char *uri, int flags, int quiet, struct db **out,
                                int *sqlite_rc)
{
    enum tr_status rc = TR_OK;
    *out = NULL;
    *sqlite_rc = SQLITE_OK;
    struct db *db = tr_calloc(1, sizeof *db);
    if (!db)
        return TR_ERR_NOMEM;
    db->journal = "delete";
    db->flags = flags;
    db->path = tr_strdup(path);
    db->uri = tr_strdup(uri);
    if (!db->path || !db->uri) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    if ((*sqlite_rc = sqlite3_open_v2(uri, &db->h, flags, NULL)) != SQLITE_OK) {
        if (!quiet)
            LOG_ERROR("cannot open the run history '%s': %s", path, db->h ? sqlite3_errmsg(db->h) : "out of memory");
        rc = db->h ? TR_ERR_ARG : TR_ERR_NOMEM;
        goto fail;
    }
    sqlite3_extended_result_codes(db->h, 1);
    sqlite3_busy_timeout(db->h, DB_BUSY_MS);
    if (quiet) {
        sqlite3_stmt *st = NULL;
        int s = sqlite3_prepare_v2(db->h, "PRAGMA user_version", -1, &st, NULL);
        if (s == SQLITE_OK)
            s = sqlite3_step(st);
        sqlite3_finalize(st);
        if (s != SQLITE_ROW) {
            *sqlite_rc = sqlite3_extended_errcode(db->h);
            rc = TR_ERR_DB;
            goto fail;
        }
    }
    TR_CHECK_GOTO(user_version(db, &db->version), rc, fail);
    if (db->version > DB_SCHEMA_VERSION) {
        rc = newer_schema(db, db->version);
        goto fail;
    }
    *out = db;
    return TR_OK;
fail:
    db_close(db);
    return rc;
}

static enum tr_status lost_check(struct db *db);

enum tr_status db_open(const char *path, int create, struct db **out)
{
    enum tr_status rc = TR_OK;
    char def[4096];
    *out = NULL;
    if (!path && !(path = db_default_path(def, sizeof def)))
        return TR_ERR_ARG;
    TR_CHECK(check_file(path, 1, create));
    struct db *db;
    int src = 0;
    TR_CHECK(open_conn(path, path, SQLITE_OPEN_READWRITE, 0, &db, &src));
    TR_CHECK_GOTO(exec(db, "PRAGMA foreign_keys=ON", "cannot enable foreign keys"), rc, fail);
    if (sqlite3_db_readonly(db->h, "main")) {
        LOG_ERROR("cannot write the run history '%s': SQLite opened it read-only", path);
        LOG_HINT("reading works where writing does not (terarec runs list/show/serve); to write, give a writable "
                 "--db PATH (or TR_DB)");
        rc = TR_ERR_ARG;
        goto fail;
    }
    TR_CHECK_GOTO(set_journal(db, wal_wanted(path)), rc, fail);
    TR_CHECK_GOTO(migrate(db), rc, fail);
    TR_CHECK_GOTO(user_version(db, &db->version), rc, fail);
    TR_CHECK_GOTO(lost_check(db), rc, fail);
    *out = db;
    return TR_OK;
fail:
    db_close(db);
    return rc;
}

/* 1 when this process could write path and its directory (a reader migrates an
 * old file and records lost runs then, through a writer's connection). */
static int writable(const char *path)
{
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    return access(path, W_OK) == 0 && access(dir, W_OK) == 0;
}

static enum tr_status open_readonly(const char *path, int may_migrate, struct db **out)
{
    enum tr_status rc = TR_OK;
    *out = NULL;
    TR_CHECK(check_file(path, 0, 0));
    struct db *db = NULL;
    int src = 0, v = 0;
    {
        char *uri = file_uri(path, "mode=ro");
        if (!uri)
            return TR_ERR_NOMEM;
        rc = open_conn(path, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, 1, &db, &src);
        tr_free(uri);
        v = db ? db->version : 0;
    }
    if (rc == TR_OK && v < DB_SCHEMA_VERSION && may_migrate && writable(path)) {
        /* an older file: a writer's open migrates it, once (when that fails, it
         * is read as it is) */
        struct db *w = NULL;
        if (db_open(path, 0, &w) == TR_OK) {
            db_close(w);
            db_close(db);
            return open_readonly(path, 0, out);
        }
    }
    if (rc == TR_ERR_DB && ((src & 0xff) == SQLITE_CANTOPEN || (src & 0xff) == SQLITE_READONLY)) {
        /* a WAL file whose directory this process cannot write (no shared-memory
         * file): read it as it stands, which is all there is on a read-only mount */
        LOG_WARN("run history '%s': its directory cannot be written (%s), so it is read as it stands now "
                 "(immutable): writes made after this open are not seen", path, sqlite3_errstr(src));
        char *uri = file_uri(path, "mode=ro&immutable=1");
        if (!uri)
            return TR_ERR_NOMEM;
        rc = open_conn(path, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, 0, &db, &src);
        tr_free(uri);
        TR_CHECK(rc);
        v = db->version;
    } else if (rc == TR_ERR_DB) {
        LOG_ERROR("cannot read the run history '%s': %s", path, sqlite3_errstr(src));
        LOG_HINT("give a readable --db PATH (or TR_DB)");
        return TR_ERR_ARG;
    }
    TR_CHECK(rc);
    if (v < DB_SCHEMA_VERSION)
        LOG_WARN("run history '%s' has schema version %d and cannot be written here, so it is read without the "
                 "migrations to %d (runs whose launcher vanished are not found, big runs read slowly)",
                 path, v, DB_SCHEMA_VERSION);
    TR_CHECK_GOTO(lost_check(db), rc, fail);
    *out = db;
    return TR_OK;
fail:
    db_close(db);
    return rc;
}

enum tr_status db_open_readonly(const char *path, struct db **out)
{
    char def[4096];
    *out = NULL;
    if (!path && !(path = db_default_path(def, sizeof def)))
        return TR_ERR_ARG;
    return open_readonly(path, 1, out);
}

enum tr_status db_reopen(struct db *db, struct db **out)
{
    *out = NULL;
    struct db *r = tr_calloc(1, sizeof *r);
    if (!r)
        return TR_ERR_NOMEM;
    /* nothing read yet: the first query waits for a lock as the caller's busy
     * handler says (db_set_busy), not the busy timeout */
    r->journal = db->journal;
    r->flags = db->flags;
    r->version = db->version;
    r->path = tr_strdup(db->path);
    r->uri = tr_strdup(db->uri);
    if (!r->path || !r->uri) {
        db_close(r);
        return TR_ERR_NOMEM;
    }
    if (sqlite3_open_v2(r->uri, &r->h, r->flags, NULL) != SQLITE_OK) {
        LOG_ERROR("cannot open the run history '%s': %s", r->path, r->h ? sqlite3_errmsg(r->h) : "out of memory");
        enum tr_status rc = r->h ? TR_ERR_DB : TR_ERR_NOMEM;
        db_close(r);
        return rc;
    }
    sqlite3_extended_result_codes(r->h, 1);
    sqlite3_busy_timeout(r->h, DB_BUSY_MS);
    *out = r;
    return TR_OK;
}

void db_set_busy(struct db *db, int (*fn)(void *arg, int n), void *arg)
{
    db->busy = fn;
    db->busy_arg = arg;
    sqlite3_busy_handler(db->h, fn, arg);
}

enum tr_status db_check_lost(struct db *db)
{
    return lost_check(db);
}

void db_close(struct db *db)
{
    if (!db)
        return;
    if (db->h)
        sqlite3_close_v2(db->h);
    tr_free(db->path);
    tr_free(db->uri);
    tr_free(db);
}

/* ---- runs ----------------------------------------------------------------------------- */

/* The start time of process pid (field 22 of /proc/PID/stat, clock ticks since
 * boot), or -1 when there is no such process or it is a zombie. */
static int64_t proc_start(int64_t pid)
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
static void pid_space(char *buf, size_t n)
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

static void host_name(char *buf, size_t n)
{
    if (gethostname(buf, n - 1) != 0)
        snprintf(buf, n, "localhost");
    buf[n - 1] = '\0';
}

enum tr_status db_run_create(struct db *db, const struct db_run *r)
{
    if (!r->id || !*r->id) {
        LOG_ERROR("run history '%s': a run needs an id", db->path);
        return TR_ERR_ARG;
    }
    char host[256], space[160];
    const char *lhost = r->launcher_host, *lns = r->launcher_ns;
    int64_t lpid = r->launcher_pid, lstart = r->launcher_start;
    if (lpid == 0) { /* the calling process runs it */
        host_name(host, sizeof host);
        pid_space(space, sizeof space);
        lhost = host;
        lns = *space ? space : NULL;
        lpid = getpid();
        lstart = proc_start(lpid);
    }
    if (lstart <= 0)
        lstart = -1;
    return write1(db, r->id, NULL,
                  "INSERT INTO runs (id, name, status, cmdline, config, git_hash, hosts, nodes, workers,"
                  " slurm_job_id, ckpt_url, ckpt_run, resumed_from, start_time, launcher_host, launcher_pid,"
                  " launcher_start, launcher_ns, heartbeat) VALUES"
                  " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, nullif(?, -1), nullif(?, -1), ?, ?)",
                  "tttttttnnttttdtiitd", r->id, r->name, r->status ? r->status : DB_RUNNING, r->cmdline, r->config,
                  r->git_hash, r->hosts, r->nodes, r->workers, r->slurm_job_id, r->ckpt_url, r->ckpt_run,
                  r->resumed_from, r->start_time, lhost, lpid, lstart, lns, r->start_time);
}

static enum tr_status need_changed(struct db *db, const char *id, int changes)
{
    if (changes > 0)
        return TR_OK;
    LOG_ERROR("run history '%s': no run '%s'", db->path, id);
    return TR_ERR_NOT_FOUND;
}

enum tr_status db_run_finish(struct db *db, const char *id, const char *status, double end_time,
                             const char *final_metrics, const char *reason)
{
    int changes = 0;
    TR_CHECK(write1(db, id, &changes,
                    "UPDATE runs SET status = ?1,"
                    " end_time = CASE WHEN ?2 > 0 THEN ?2 ELSE end_time END,"
                    " final_metrics = coalesce(?3, final_metrics), reason = coalesce(?4, reason) WHERE id = ?5",
                    "tdttt", status, end_time > 0 ? end_time : 0.0, final_metrics, reason, id));
    return need_changed(db, id, changes);
}

enum tr_status db_run_reopen(struct db *db, const char *id, const char *hosts)
{
    int changes = 0;
    char host[256], space[160];
    host_name(host, sizeof host);
    pid_space(space, sizeof space);
    TR_CHECK(write1(db, id, &changes,
                    "UPDATE runs SET status = 'running', end_time = NULL, restarts = restarts + 1,"
                    " hosts = coalesce(?1, hosts), launcher_host = ?3, launcher_pid = ?4,"
                    " launcher_start = nullif(?5, -1), heartbeat = ?6, launcher_ns = nullif(?7, '') WHERE id = ?2",
                    "tttiidt", hosts, id, host, (int64_t)getpid(), proc_start(getpid()), (double)time(NULL), space));
    return need_changed(db, id, changes);
}

enum tr_status db_run_set_ckpt_run(struct db *db, const char *id, const char *ckpt_run)
{
    int changes = 0;
    TR_CHECK(write1(db, id, &changes, "UPDATE runs SET ckpt_run = ?1 WHERE id = ?2", "tt", ckpt_run, id));
    return need_changed(db, id, changes);
}

enum tr_status db_run_heartbeat(struct db *db, const char *id, double now)
{
    int changes = 0;
    /* a run judged lost while its launcher was only slow to beat is running again */
    TR_CHECK(write1(db, id, &changes,
                    "UPDATE runs SET heartbeat = ?1, status = CASE status WHEN 'lost' THEN 'running' ELSE status END,"
                    " end_time = CASE status WHEN 'lost' THEN NULL ELSE end_time END,"
                    " reason = CASE status WHEN 'lost' THEN NULL ELSE reason END WHERE id = ?2",
                    "dt", now, id));
    return need_changed(db, id, changes);
}

/* The first column of the first row of a query, tr_strdup'd, in *out (NULL when
 * no row or SQL NULL); *found says whether there was a row. */
static enum tr_status query_text(struct db *db, char **out, int *found, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, types);
    enum tr_status rc = db_preparev(db, &st, sql, types, ap);
    va_end(ap);
    *out = NULL;
    *found = 0;
    if (rc != TR_OK)
        return rc;
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        *found = 1;
        const char *t = (const char *)sqlite3_column_text(st, 0);
        if (t && !(*out = tr_strdup(t)))
            rc = TR_ERR_NOMEM;
    } else if (s != SQLITE_DONE) {
        rc = db_sql_error(db, "cannot read");
    }
    sqlite3_finalize(st);
    return rc;
}

enum tr_status db_run_by_slurm_job(struct db *db, const char *job_id, char **id)
{
    int found = 0;
    TR_CHECK(query_text(db, id, &found,
                        "SELECT id FROM runs WHERE slurm_job_id = ? ORDER BY start_time DESC, rowid DESC LIMIT 1",
                        "t", job_id));
    return found ? TR_OK : TR_ERR_NOT_FOUND;
}

/* Up to two ids of a query's rows, in a[0], a[1] (tr_strdup'd); the count in *n. */
static enum tr_status two_ids(struct db *db, const char *sql, const char *what, char *a[2], int *n)
{
    sqlite3_stmt *st = NULL;
    TR_CHECK(db_prepare(db, &st, sql, "t", what));
    enum tr_status rc = TR_OK;
    int s;
    *n = 0;
    while (*n < 2 && (s = sqlite3_step(st)) == SQLITE_ROW) {
        if (!(a[*n] = tr_strdup((const char *)sqlite3_column_text(st, 0)))) {
            rc = TR_ERR_NOMEM;
            break;
        }
        (*n)++;
    }
    if (rc == TR_OK && *n < 2 && s != SQLITE_DONE)
        rc = db_sql_error(db, "cannot read the runs");
    sqlite3_finalize(st);
    return rc;
}

enum tr_status db_run_resolve(struct db *db, const char *what, char **id)
{
    static const char *const queries[] = {
        "SELECT id FROM runs WHERE id = ?1",
        "SELECT id FROM runs WHERE name = ?1 ORDER BY start_time DESC, rowid DESC LIMIT 2",
        "SELECT id FROM runs WHERE substr(id, 1, length(?1)) = ?1 ORDER BY start_time DESC, rowid DESC LIMIT 2",
    };
    static const char *const kinds[] = {"id", "name", "id prefix"};
    *id = NULL;
    if (!what || !*what) {
        LOG_ERROR("an empty run name");
        LOG_HINT("run 'terarec runs list --db %s' to see the runs", db->path);
        return TR_ERR_ARG;
    }
    for (size_t q = 0; q < TR_ARRAY_SIZE(queries); q++) {
        char *a[2] = {NULL, NULL};
        int n = 0;
        enum tr_status rc = two_ids(db, queries[q], what, a, &n);
        if (rc == TR_OK && n == 2) {
            LOG_ERROR("run '%s' is ambiguous: the %s of runs '%s' and '%s'", what, kinds[q], a[0], a[1]);
            LOG_HINT("give more of the id; 'terarec runs list --db %s' shows them", db->path);
            rc = TR_ERR_ARG;
        }
        if (rc == TR_OK && n == 1) {
            *id = a[0];
            return TR_OK;
        }
        tr_free(a[0]);
        tr_free(a[1]);
        if (rc != TR_OK)
            return rc;
    }
    LOG_ERROR("no run '%s' in '%s'", what, db->path);
    LOG_HINT("run 'terarec runs list --db %s' to see the runs", db->path);
    return TR_ERR_NOT_FOUND;
}

enum tr_status db_run_get(struct db *db, const char *id, const char *column, char **value)
{
    *value = NULL;
    size_t i = 0;
    while (i < TR_ARRAY_SIZE(run_columns) && strcmp(run_columns[i], column) != 0)
        i++;
    if (i == TR_ARRAY_SIZE(run_columns)) {
        LOG_ERROR("a run has no field '%s'", column);
        return TR_ERR_ARG;
    }
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT %s FROM runs WHERE id = ?", run_columns[i]);
    int found = 0;
    TR_CHECK(query_text(db, value, &found, sql, "t", id));
    return found ? TR_OK : TR_ERR_NOT_FOUND;
}

/* ---- children ----------------------------------------------------------------------------- */

enum tr_status db_metric_add(struct db *db, const char *run, int64_t step, const char *name, double value,
                             double time)
{
    return write1(db, run, NULL, "INSERT INTO metrics (run, step, name, value, time) VALUES (?, ?, ?, ?, ?)",
                  "titdd", run, step, name, value, time);
}

enum tr_status db_eval_add(struct db *db, const char *run, int64_t step, double auc, double logloss, int64_t samples,
                           double time)
{
    return write1(db, run, NULL,
                  "INSERT INTO evals (run, step, auc, logloss, samples, time) VALUES (?, ?, ?, ?, ?, ?)", "tiddid",
                  run, step, auc, logloss, samples, time);
}

enum tr_status db_ckpt_add(struct db *db, const char *run, int64_t step, const char *manifest_url, int64_t bytes,
                           double stall_s, double time)
{
    return write1(db, run, NULL,
                  "INSERT INTO checkpoints (run, step, manifest_url, bytes, stall_s, time) VALUES (?, ?, ?, ?, ?, ?)",
                  "titidd", run, step, manifest_url, bytes, stall_s, time);
}

enum tr_status db_process_add(struct db *db, const char *run, int attempt, int rank, const char *host, int64_t pid,
                              double time)
{
    return write1(db, run, NULL,
                  "INSERT INTO processes (run, attempt, rank, host, pid, start_time) VALUES (?, ?, ?, ?, ?, ?)",
                  "tnntid", run, attempt, rank, host, pid, time);
}

enum tr_status db_process_exit(struct db *db, const char *run, int attempt, int rank, int exit_code, int signal,
                               double time)
{
    int changes = 0;
    TR_CHECK(write1(db, run, &changes,
                    "UPDATE processes SET exit_code = CASE WHEN ?1 >= 0 THEN ?1 END,"
                    " signal = CASE WHEN ?2 > 0 THEN ?2 END, end_time = ?3"
                    " WHERE run = ?4 AND attempt = ?5 AND rank = ?6",
                    "nndtnn", exit_code, signal, time, run, attempt, rank));
    if (changes == 0) {
        LOG_ERROR("run history '%s': run '%s' has no process of attempt %d rank %d", db->path, run, attempt, rank);
        return TR_ERR_NOT_FOUND;
    }
    return TR_OK;
}

enum tr_status db_event_add(struct db *db, const char *run, double time, const char *kind, const char *data)
{
    return write1(db, run, NULL, "INSERT INTO events (run, time, kind, data) VALUES (?, ?, ?, ?)", "tdtt", run,
                  time, kind, data);
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
    host_name(me, sizeof me);
    pid_space(space, sizeof space);
    const double now = (double)time(NULL), after = lost_after_s();
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0), *host = (const char *)sqlite3_column_text(st, 1);
        const int64_t pid = sqlite3_column_int64(st, 2);
        const int have_hb = sqlite3_column_type(st, 4) != SQLITE_NULL;
        const double hb = sqlite3_column_double(st, 4);
        char why[512], step[32] = "none", ck[1024] = "none";
        const char *ns = (const char *)sqlite3_column_text(st, 5);
        if (host && !strcmp(host, me) && (!ns || !strcmp(ns, space))) {
            const int64_t t = proc_start(pid);
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
    for (size_t i = 0; i < TR_ARRAY_SIZE(run_columns); i++) {
        const char *c = run_columns[i];
        size_t k = strlen(sql);
        if (!strcmp(c, "status"))
            snprintf(sql + k, sizeof sql - k, "CASE WHEN l.id IS NULL THEN r.status ELSE 'lost' END AS status, ");
        else if (!strcmp(c, "reason") || !strcmp(c, "end_time"))
            snprintf(sql + k, sizeof sql - k, "CASE WHEN l.id IS NULL THEN r.%s ELSE l.%s END AS %s, ", c, c, c);
        else
            snprintf(sql + k, sizeof sql - k, "r.%s AS %s, ", c, c);
    }
    size_t k = strlen(sql) - 2;
    snprintf(sql + k, sizeof sql - k, " FROM main.runs r LEFT JOIN temp.lost_runs l ON l.id = r.id");
    TR_CHECK(exec(db, "CREATE TEMP TABLE IF NOT EXISTS lost_runs (id TEXT PRIMARY KEY, reason TEXT, end_time REAL)",
                  "cannot make a temporary table"));
    TR_CHECK(exec(db, sql, "cannot make a temporary view"));
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
static enum tr_status lost_check(struct db *db)
{
    if (db->version < 2)
        return TR_OK;
    struct lost_run *l = NULL;
    int n = 0;
    TR_CHECK(find_lost(db, &l, &n));
    enum tr_status rc = TR_OK;
    if (n == 0)
        goto exit;
    int s = SQLITE_READONLY;
    if (!sqlite3_db_readonly(db->h, "main")) {
        s = record_lost(db->h, l, n);
    } else if (writable(db->path)) {
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
    return rc;
}
