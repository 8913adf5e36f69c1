/* db.c: a connection to the run history (db.h) on SQLite: the default path,
 * directory and file creation, the refusal of foreign and unwritable files, the
 * journal choice by file system type, the writer's and the reader's opens (each
 * connection with the SQL functions of query.h), prepared statements and
 * transactions. The schema and its migrations are schema.c's, the lost-run check
 * of an open lost.c's, the writes write.c's, the reads query.c's. */
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
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"
#include "db_internal.h"
#include "query.h"

#define DB_BUSY_MS 30000

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
        case 'u': { /* an int64_t that may be unknown */
            const int64_t v = va_arg(ap, int64_t);
            rc = v >= 0 ? sqlite3_bind_int64(*st, i, (sqlite3_int64)v) : sqlite3_bind_null(*st, i);
            break;
        }
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

enum tr_status db_exec(struct db *db, const char *sql, const char *what)
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
    return db_exec(db, "BEGIN IMMEDIATE", "cannot start a write (another process may hold it past the busy timeout)");
}

enum tr_status db_commit(struct db *db)
{
    return db_exec(db, "COMMIT", "cannot commit");
}

void db_rollback(struct db *db)
{
    if (!sqlite3_get_autocommit(db->h))
        sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
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
        TR_CHECK(db_exec(db, "PRAGMA synchronous=NORMAL", "cannot set synchronous"));
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

/* What every connection gets once open: extended result codes, the busy
 * timeout, and the SQL functions of the queries (query.h), so that no caller
 * registers them. TR_ERR_DB (logged). */
static enum tr_status start_conn(struct db *db)
{
    sqlite3_extended_result_codes(db->h, 1);
    sqlite3_busy_timeout(db->h, DB_BUSY_MS);
    return db_sql_functions(db);
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
    TR_CHECK_GOTO(start_conn(db), rc, fail);
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
    TR_CHECK_GOTO(db_schema_version(db, &db->version), rc, fail);
    if (db->version > DB_SCHEMA_VERSION) {
        rc = db_schema_newer(db, db->version);
        goto fail;
    }
    *out = db;
    return TR_OK;
fail:
    db_close(db);
    return rc;
}

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
    TR_CHECK_GOTO(db_exec(db, "PRAGMA foreign_keys=ON", "cannot enable foreign keys"), rc, fail);
    if (sqlite3_db_readonly(db->h, "main")) {
        LOG_ERROR("cannot write the run history '%s': SQLite opened it read-only", path);
        LOG_HINT("reading works where writing does not (terarec runs list/show/serve); to write, give a writable "
                 "--db PATH (or TR_DB)");
        rc = TR_ERR_ARG;
        goto fail;
    }
    TR_CHECK_GOTO(set_journal(db, wal_wanted(path)), rc, fail);
    TR_CHECK_GOTO(db_schema_migrate(db), rc, fail);
    TR_CHECK_GOTO(db_schema_version(db, &db->version), rc, fail);
    TR_CHECK_GOTO(db_check_lost(db), rc, fail);
    *out = db;
    return TR_OK;
fail:
    db_close(db);
    return rc;
}

/* 1 when this process could write path and its directory (a reader migrates an
 * old file and records lost runs then, through a writer's connection). */
int db_may_write(const char *path)
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
    if (rc == TR_OK && v < DB_SCHEMA_VERSION && may_migrate && db_may_write(path)) {
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
    TR_CHECK_GOTO(db_check_lost(db), rc, fail);
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
    enum tr_status rc = start_conn(r);
    if (rc != TR_OK) {
        db_close(r);
        return rc;
    }
    *out = r;
    return TR_OK;
}

void db_set_busy(struct db *db, int (*fn)(void *arg, int n), void *arg)
{
    db->busy = fn;
    db->busy_arg = arg;
    sqlite3_busy_handler(db->h, fn, arg);
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
