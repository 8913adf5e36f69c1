/* store.c: the checkpoint store's layout on a file system root (store.h):
 * content-addressed chunks checked against their xxh3-128 name, manifests, parts
 * and LATEST, each written to a unique temporary file, fsynced, renamed and its
 * directory fsynced; listing and garbage collection. Locking: whatever makes a
 * chunk live (a manifest or part put, a commit, a chunk found already stored)
 * holds <root>/.lock shared; gc's deletions hold it exclusive (flock: the server's
 * threads and a `terarec ckpt gc` on the directory alike). */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "manifest.h"
#include "store_internal.h"

static atomic_int fault_commit_ms, fault_put_ms;

void ckpt_fs_set_fault(int commit_delay_ms, int put_delay_ms)
{
    atomic_store(&fault_commit_ms, commit_delay_ms > 0 ? commit_delay_ms : 0);
    atomic_store(&fault_put_ms, put_delay_ms > 0 ? put_delay_ms : 0);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static _Thread_local int last_errno;

int ckpt_fs_errno(void)
{
    return last_errno;
}

/* Notes the cause of a failed write (called right after it, before errno moves):
 * ENOSPC/EDQUOT, or ENOSPC when the store's file system has no block left. */
static enum tr_status note_io(const char *path, enum tr_status rc)
{
    if (rc != TR_ERR_IO) {
        last_errno = 0; /* a later failure is not taken for this one */
        return rc;
    }
    int e = errno;
    struct statvfs sv;
    if (e != ENOSPC && e != EDQUOT && path && statvfs(path, &sv) == 0 && sv.f_bavail == 0)
        e = ENOSPC;
    last_errno = e;
    return rc;
}

/* Takes the store's lock (flock LOCK_SH or LOCK_EX on <root>/.lock, or on
 * <root>/runs/<run>/.lock when run is given). The descriptor to pass to
 * store_unlock; -1 when it cannot (logged). */
static int store_lock(const struct ckpt_fs *fs, const char *run, int how)
{
    char buf[4096];
    int k = run ? snprintf(buf, sizeof buf, "%s/runs/%s/.lock", fs->root, run)
                : snprintf(buf, sizeof buf, "%s/.lock", fs->root);
    if (k < 0 || (size_t)k >= sizeof buf)
        return -1;
    int fd = open(buf, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        LOG_ERROR("cannot open the store's lock '%s': %s", buf, strerror(errno));
        return -1;
    }
    while (flock(fd, how) != 0) {
        if (errno == EINTR)
            continue;
        LOG_ERROR("cannot lock '%s': %s", buf, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static void store_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* drops the flock */
}

int ckpt_hash_ok(const char *s)
{
    for (int i = 0; i < CKPT_HASH_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return s[CKPT_HASH_LEN] == '\0';
}

int ckpt_run_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (n >= CKPT_RUN_MAX)
            return 0;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return n > 0 && s[0] != '.';
}

static void hex128(XXH128_hash_t h, char out[CKPT_HASH_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[c.digest[i] >> 4];
        out[2 * i + 1] = digits[c.digest[i] & 15];
    }
    out[CKPT_HASH_LEN] = '\0';
}

void ckpt_hash(const void *p, size_t n, char out[CKPT_HASH_LEN + 1])
{
    hex128(XXH3_128bits(p, n), out);
}

void ckpt_chunk_tag(const char *name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const void *p, size_t n,
                    char out[CKPT_HASH_LEN + 1])
{
    static const char magic[] = "terarec-chunk-tag";
    _Alignas(64) XXH3_state_t state;
    XXH3_state_t *st = &state;
    XXH3_INITSTATE(st);
    (void)XXH3_128bits_reset(st);
    (void)XXH3_128bits_update(st, magic, sizeof magic);
    (void)XXH3_128bits_update(st, name, strlen(name) + 1);
    const int64_t pos[4] = {r0, r1, c0, c1};
    unsigned char le[32];
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 8; b++)
            le[8 * i + b] = (unsigned char)((uint64_t)pos[i] >> (8 * b));
    (void)XXH3_128bits_update(st, le, sizeof le);
    if (n > 0)
        (void)XXH3_128bits_update(st, p, n);
    hex128(XXH3_128bits_digest(st), out);
}

struct ckpt_hasher {
    XXH3_state_t st; /* needs 64-byte alignment: tr_malloc gives it */
};

struct ckpt_hasher *ckpt_hasher_new(void)
{
    struct ckpt_hasher *h = tr_malloc(sizeof *h);
    if (!h)
        return NULL;
    memset(h, 0, sizeof *h);
    XXH3_INITSTATE(&h->st);
    (void)XXH3_128bits_reset(&h->st);
    return h;
}

void ckpt_hasher_update(struct ckpt_hasher *h, const void *p, size_t n)
{
    if (n > 0)
        (void)XXH3_128bits_update(&h->st, p, n);
}

void ckpt_hasher_final(const struct ckpt_hasher *h, char out[CKPT_HASH_LEN + 1])
{
    hex128(XXH3_128bits_digest(&h->st), out);
}

void ckpt_hasher_free(struct ckpt_hasher *h)
{
    tr_free(h);
}

/* ---- paths and small file helpers ------------------------------------------------ */

/* A tr_malloc'd path from a format; NULL when out of memory or too long (logged). */
static char *path_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *path_fmt(const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof buf) {
        LOG_ERROR("path too long: '%.64s...'", buf);
        return NULL;
    }
    return tr_strdup(buf);
}

/* mkdir of one level; a new directory is made durable in its parent. */
static enum tr_status mkdir_one(const char *dir)
{
    if (mkdir(dir, 0777) == 0)
        return tr_file_fsync_dir(dir);
    if (errno == EEXIST)
        return TR_OK;
    LOG_ERROR("cannot create directory '%s': %s", dir, strerror(errno));
    return TR_ERR_IO;
}

/* Writes buf to path atomically (common/file.h); sleeps delay_ms after the
 * temporary file is written, before it is synced and renamed. */
static enum tr_status write_atomic(const char *path, const void *buf, size_t n, int delay_ms)
{
    struct tr_file_atomic f;
    TR_CHECK(note_io(path, tr_file_atomic_open(&f, path)));
    enum tr_status rc = note_io(path, tr_file_atomic_write(&f, buf, n));
    if (rc != TR_OK) {
        tr_file_atomic_abort(&f);
        return rc;
    }
    if (delay_ms > 0) {
        LOG_WARN("fault injection: '%s' written, waiting %d ms before its commit", f.tmp, delay_ms);
        sleep_ms(delay_ms);
    }
    return note_io(path, tr_file_atomic_commit(&f));
}

/* ---- the store --------------------------------------------------------------------- */

enum tr_status ckpt_fs_open(struct ckpt_fs *fs, const char *root)
{
    enum tr_status rc = TR_OK;
    char *d = NULL;
    fs->root = tr_strdup(root);
    if (!fs->root)
        return TR_ERR_NOMEM;
    TR_CHECK_GOTO(tr_file_mkdir_p(root), rc, fail);
    static const char *const sub[] = {"chunks", "runs"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(sub); i++) {
        TR_CHECK_GOTO(tr_file_join_to(root, sub[i], &d), rc, fail);
        TR_CHECK_GOTO(mkdir_one(d), rc, fail);
        tr_free(d);
        d = NULL;
    }
    return TR_OK;
fail:
    tr_free(d);
    ckpt_fs_close(fs);
    return rc;
}

void ckpt_fs_close(struct ckpt_fs *fs)
{
    if (!fs)
        return;
    tr_free(fs->root);
    fs->root = NULL;
}

char *ckpt_fs_chunk_path(const struct ckpt_fs *fs, const char *hash)
{
    return path_fmt("%s/chunks/%.2s/%s", fs->root, hash, hash);
}

enum tr_status ckpt_fs_chunk_stat(const struct ckpt_fs *fs, const char *hash, int64_t *bytes)
{
    *bytes = 0;
    if (!ckpt_hash_ok(hash))
        return TR_ERR_ARG;
    char *p = ckpt_fs_chunk_path(fs, hash);
    if (!p)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    struct stat st;
    if (stat(p, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            rc = TR_ERR_NOT_FOUND;
        } else {
            LOG_ERROR("cannot stat chunk '%s': %s", p, strerror(errno));
            rc = TR_ERR_IO;
        }
    } else if (!S_ISREG(st.st_mode)) {
        LOG_ERROR("chunk '%s' is not a regular file", p);
        rc = TR_ERR_IO;
    } else {
        *bytes = (int64_t)st.st_size;
    }
    tr_free(p);
    return rc;
}

enum tr_status ckpt_fs_chunk_begin(const struct ckpt_fs *fs, const char *hash, int64_t limit,
                                   struct ckpt_fs_writer *w)
{
    enum tr_status rc = TR_OK;
    memset(w, 0, sizeof *w);
    w->f.fd = -1;
    if (!ckpt_hash_ok(hash))
        return TR_ERR_ARG;
    memcpy(w->want, hash, CKPT_HASH_LEN + 1);
    w->limit = limit > 0 ? limit : 0;
    char *dir = path_fmt("%s/chunks/%.2s", fs->root, hash), *path = ckpt_fs_chunk_path(fs, hash);
    w->h = ckpt_hasher_new();
    if (!dir || !path || !w->h) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    TR_CHECK_GOTO(mkdir_one(dir), rc, fail);
    TR_CHECK_GOTO(note_io(path, tr_file_atomic_open(&w->f, path)), rc, fail);
exit:
    tr_free(dir);
    tr_free(path);
    return rc;
fail:
    ckpt_fs_chunk_abort(w);
    goto exit;
}

enum tr_status ckpt_fs_chunk_write(struct ckpt_fs_writer *w, const void *p, size_t n)
{
    if (w->f.fd < 0)
        return TR_ERR_IO;
    if (w->limit > 0 && (uint64_t)n > (uint64_t)(w->limit - w->bytes)) {
        LOG_ERROR("chunk '%s': more than %" PRId64 " bytes", w->want, w->limit);
        return TR_ERR_RANGE;
    }
    TR_CHECK(note_io(w->f.tmp, tr_file_atomic_write(&w->f, p, n)));
    ckpt_hasher_update(w->h, p, n);
    w->bytes += (int64_t)n;
    return TR_OK;
}

enum tr_status ckpt_fs_chunk_commit(struct ckpt_fs_writer *w)
{
    if (w->f.fd < 0) {
        ckpt_fs_chunk_abort(w);
        return TR_ERR_IO;
    }
    int delay = atomic_load(&fault_put_ms);
    if (delay > 0) {
        LOG_WARN("fault injection: chunk '%s' received, waiting %d ms before its commit", w->want, delay);
        sleep_ms(delay);
    }
    char got[CKPT_HASH_LEN + 1];
    ckpt_hasher_final(w->h, got);
    if (strcmp(got, w->want) != 0) {
        LOG_ERROR("chunk '%s': its %" PRId64 " bytes hash to '%s': not stored", w->want, w->bytes, got);
        ckpt_fs_chunk_abort(w);
        return TR_ERR_FORMAT;
    }
    char *path = w->f.path ? tr_strdup(w->f.path) : NULL;
    enum tr_status rc = note_io(path, tr_file_atomic_commit(&w->f));
    /* a fresh mtime: gc spares chunks younger than its walk (store.h) */
    if (rc == TR_OK && path)
        (void)utimensat(AT_FDCWD, path, NULL, 0);
    tr_free(path);
    ckpt_fs_chunk_abort(w); /* the hasher */
    return rc;
}

void ckpt_fs_chunk_abort(struct ckpt_fs_writer *w)
{
    tr_file_atomic_abort(&w->f);
    ckpt_hasher_free(w->h);
    w->h = NULL;
}

enum tr_status ckpt_fs_chunk_put(const struct ckpt_fs *fs, const char *hash, const void *p, size_t n)
{
    struct ckpt_fs_writer w;
    TR_CHECK(ckpt_fs_chunk_begin(fs, hash, 0, &w));
    enum tr_status rc = ckpt_fs_chunk_write(&w, p, n);
    if (rc != TR_OK) {
        ckpt_fs_chunk_abort(&w);
        return rc;
    }
    return ckpt_fs_chunk_commit(&w);
}

enum tr_status ckpt_fs_chunk_read(const struct ckpt_fs *fs, const char *hash, int64_t off, int64_t n, void *dst)
{
    if (!ckpt_hash_ok(hash) || off < 0 || n < 0)
        return TR_ERR_ARG;
    char *p = ckpt_fs_chunk_path(fs, hash);
    if (!p)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) {
            rc = TR_ERR_NOT_FOUND;
        } else {
            LOG_ERROR("cannot open chunk '%s': %s", p, strerror(errno));
            rc = TR_ERR_IO;
        }
    } else if (fstat(fd, &st) != 0) {
        LOG_ERROR("cannot stat chunk '%s': %s", p, strerror(errno));
        rc = TR_ERR_IO;
    } else if (off > (int64_t)st.st_size || n > (int64_t)st.st_size - off) {
        LOG_ERROR("chunk '%s': bytes [%" PRId64 ", %" PRId64 ") are past its end (%lld bytes)", hash, off, off + n,
                  (long long)st.st_size);
        rc = TR_ERR_RANGE;
    } else {
        rc = tr_file_pread_all(fd, dst, (size_t)n, off, p);
    }
    if (fd >= 0)
        close(fd);
    tr_free(p);
    return rc;
}

/* ---- manifests, parts, LATEST ----------------------------------------------------- */

static char *run_dir(const struct ckpt_fs *fs, const char *run)
{
    return path_fmt("%s/runs/%s", fs->root, run);
}

static char *manifest_path(const struct ckpt_fs *fs, const char *run, int64_t step)
{
    return path_fmt("%s/runs/%s/manifests/%" PRId64 ".json", fs->root, run, step);
}

static char *part_path(const struct ckpt_fs *fs, const char *run, int64_t step, int rank)
{
    return path_fmt("%s/runs/%s/parts/%" PRId64 "/%d.json", fs->root, run, step, rank);
}

/* Parses text as a manifest or part of (run, step, rank) and checks that every
 * chunk it names is stored with its size. */
static enum tr_status check_stored(const struct ckpt_fs *fs, const char *run, int64_t step, int rank,
                                   const char *text, size_t n, const char *what)
{
    struct ckpt_manifest m;
    TR_CHECK(ckpt_manifest_parse(text, n, what, &m));
    enum tr_status rc = TR_OK;
    if (m.part != (rank >= 0)) {
        LOG_ERROR("%s: kind: '%s' where a %s was expected", what, m.part ? "part" : "manifest",
                  rank >= 0 ? "part" : "manifest");
        rc = TR_ERR_FORMAT;
    } else if (strcmp(m.run, run) != 0 || m.step != step || (rank >= 0 && m.rank != rank)) {
        LOG_ERROR("%s: names run '%s' step %" PRId64 " rank %d where run '%s' step %" PRId64 " rank %d was expected",
                  what, m.run, m.step, m.rank, run, step, rank);
        rc = TR_ERR_FORMAT;
    }
    for (int i = 0; rc == TR_OK && i < m.ntensors; i++) {
        const struct ckpt_tensor *t = &m.tensors[i];
        for (int j = 0; rc == TR_OK && j < t->nchunks; j++) {
            const struct ckpt_chunk *c = &t->chunks[j];
            int64_t have = 0;
            enum tr_status s = ckpt_fs_chunk_stat(fs, c->hash, &have);
            if (s == TR_ERR_NOT_FOUND || (s == TR_OK && have != c->bytes)) {
                LOG_ERROR("%s: tensor '%s' rows [%" PRId64 ", %" PRId64 ") cols [%" PRId64 ", %" PRId64
                          "): chunk '%s' %s",
                          what, t->name, c->r0, c->r1, c->c0, c->c1, c->hash,
                          s == TR_ERR_NOT_FOUND ? "is not stored" : "is stored with another size");
                rc = TR_ERR_NOT_FOUND;
            } else if (s != TR_OK) {
                rc = s;
            }
        }
    }
    ckpt_manifest_release(&m);
    return rc;
}

/* LATEST of run read without a lock (-1 when nothing is committed). */
static enum tr_status latest_or_none(const struct ckpt_fs *fs, const char *run, int64_t *latest)
{
    enum tr_status rc = ckpt_fs_latest(fs, run, latest);
    if (rc == TR_ERR_NOT_FOUND) {
        *latest = -1;
        return TR_OK;
    }
    return rc;
}

static char *sidecar_path(const struct ckpt_fs *fs, const char *run, int64_t step)
{
    return path_fmt("%s/runs/%s/manifests/%" PRId64 ".xxh3", fs->root, run, step);
}

/* Whether the file at path holds exactly text[0, n). */
static int same_text(const char *path, const char *text, size_t n)
{
    char *old = NULL;
    size_t on = 0;
    int same = tr_file_read_all(path, &old, &on) == TR_OK && on == n && memcmp(old, text, n) == 0;
    tr_free(old);
    return same;
}

enum tr_status ckpt_fs_manifest_put(const struct ckpt_fs *fs, const char *run, int64_t step, const char *text,
                                    size_t n)
{
    if (!ckpt_run_ok(run) || step < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *dir = run_dir(fs, run), *mdir = path_fmt("%s/runs/%s/manifests", fs->root, run);
    char *path = manifest_path(fs, run, step), *side = sidecar_path(fs, run, step);
    int lk = -1;
    if (!dir || !mdir || !path || !side) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    if ((lk = store_lock(fs, NULL, LOCK_SH)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(check_stored(fs, run, step, -1, text, n, path), rc, exit);
    int64_t latest = -1;
    TR_CHECK_GOTO(latest_or_none(fs, run, &latest), rc, exit);
    if (step <= latest && !same_text(path, text, n)) {
        LOG_ERROR("manifest of run '%s' step %" PRId64 " refused: LATEST is step %" PRId64
                  " and a committed checkpoint is never replaced",
                  run, step, latest);
        rc = TR_ERR_RANGE;
        goto exit;
    }
    TR_CHECK_GOTO(mkdir_one(dir), rc, exit);
    TR_CHECK_GOTO(mkdir_one(mdir), rc, exit);
    /* the manifest's own hash first: restore and verify detect a later edit */
    char h[CKPT_HASH_LEN + 2];
    ckpt_hash(text, n, h);
    h[CKPT_HASH_LEN] = '\n';
    TR_CHECK_GOTO(write_atomic(side, h, CKPT_HASH_LEN + 1, 0), rc, exit);
    rc = write_atomic(path, text, n, 0);
exit:
    store_unlock(lk);
    tr_free(dir);
    tr_free(mdir);
    tr_free(path);
    tr_free(side);
    return rc;
}

enum tr_status ckpt_fs_manifest_get(const struct ckpt_fs *fs, const char *run, int64_t step, char **text, size_t *n)
{
    *text = NULL;
    *n = 0;
    if (!ckpt_run_ok(run) || step < 0)
        return TR_ERR_ARG;
    char *path = manifest_path(fs, run, step), *side = sidecar_path(fs, run, step);
    enum tr_status rc = path && side ? tr_file_read_all(path, text, n) : TR_ERR_NOMEM;
    char *want = NULL;
    size_t wn = 0;
    if (rc == TR_OK) {
        enum tr_status r = tr_file_read_all(side, &want, &wn);
        char got[CKPT_HASH_LEN + 1];
        ckpt_hash(*text, *n, got);
        if (r == TR_ERR_NOT_FOUND) {
            LOG_DEBUG(CKPT, "manifest '%s' has no recorded hash (stored before format 2)", path);
        } else if (r != TR_OK) {
            rc = r;
        } else if (wn < CKPT_HASH_LEN || memcmp(want, got, CKPT_HASH_LEN) != 0) {
            LOG_ERROR("manifest '%s' was changed after it was stored: its xxh3-128 is %s, '%s' recorded %.*s", path,
                      got, side, (int)TR_MIN(wn, (size_t)CKPT_HASH_LEN), want);
            rc = TR_ERR_FORMAT;
        }
    }
    if (rc != TR_OK) {
        tr_free(*text);
        *text = NULL;
        *n = 0;
    }
    tr_free(want);
    tr_free(path);
    tr_free(side);
    return rc;
}

enum tr_status ckpt_fs_part_put(const struct ckpt_fs *fs, const char *run, int64_t step, int rank, const char *text,
                                size_t n)
{
    if (!ckpt_run_ok(run) || step < 0 || rank < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *dirs[3] = {run_dir(fs, run), path_fmt("%s/runs/%s/parts", fs->root, run),
                     path_fmt("%s/runs/%s/parts/%" PRId64, fs->root, run, step)};
    char *path = part_path(fs, run, step, rank);
    int lk = -1;
    if (!dirs[0] || !dirs[1] || !dirs[2] || !path) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    if ((lk = store_lock(fs, NULL, LOCK_SH)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(check_stored(fs, run, step, rank, text, n, path), rc, exit);
    for (int i = 0; i < 3; i++)
        TR_CHECK_GOTO(mkdir_one(dirs[i]), rc, exit);
    rc = write_atomic(path, text, n, 0);
exit:
    store_unlock(lk);
    for (int i = 0; i < 3; i++)
        tr_free(dirs[i]);
    tr_free(path);
    return rc;
}

enum tr_status ckpt_fs_part_get(const struct ckpt_fs *fs, const char *run, int64_t step, int rank, char **text,
                                size_t *n)
{
    *text = NULL;
    *n = 0;
    if (!ckpt_run_ok(run) || step < 0 || rank < 0)
        return TR_ERR_ARG;
    char *path = part_path(fs, run, step, rank);
    if (!path)
        return TR_ERR_NOMEM;
    enum tr_status rc = tr_file_read_all(path, text, n);
    tr_free(path);
    return rc;
}

static enum tr_status prune_run(const struct ckpt_fs *fs, const char *run, int64_t latest, int keep,
                                struct ckpt_gc_stats *st);

enum tr_status ckpt_fs_commit_keep(const struct ckpt_fs *fs, const char *run, int64_t step, int keep)
{
    if (!ckpt_run_ok(run) || step < 0 || keep < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *mpath = manifest_path(fs, run, step), *latest = path_fmt("%s/runs/%s/LATEST", fs->root, run);
    int lk = -1, rlk = -1;
    if (!mpath || !latest) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* shared: gc deletes nothing meanwhile; the run's own lock: two commits of one
     * run are ordered, so that LATEST only moves forward */
    struct stat st;
    if ((lk = store_lock(fs, NULL, LOCK_SH)) < 0 ||
        (stat(mpath, &st) == 0 && (rlk = store_lock(fs, run, LOCK_EX)) < 0)) {
        rc = TR_ERR_IO;
        goto exit;
    }
    if (stat(mpath, &st) != 0 || !S_ISREG(st.st_mode)) {
        LOG_ERROR("cannot commit step %" PRId64 " of run '%s': no manifest '%s'", step, run, mpath);
        rc = TR_ERR_NOT_FOUND;
        goto exit;
    }
    int64_t cur = -1;
    TR_CHECK_GOTO(latest_or_none(fs, run, &cur), rc, exit);
    if (step < cur) {
        LOG_ERROR("cannot commit step %" PRId64 " of run '%s': LATEST is step %" PRId64 " and never moves back", step,
                  run, cur);
        rc = TR_ERR_RANGE;
        goto exit;
    }
    char buf[32];
    int k = snprintf(buf, sizeof buf, "%" PRId64 "\n", step);
    TR_CHECK_GOTO(write_atomic(latest, buf, (size_t)k, atomic_load(&fault_commit_ms)), rc, exit);
    if (keep > 0) {
        struct ckpt_gc_stats gs = {0};
        rc = prune_run(fs, run, step, keep, &gs);
        if (gs.manifests_removed)
            LOG_INFO(CKPT, "run '%s': step %" PRId64 " committed; %" PRId64 " older manifests removed (keep %d)", run,
                     step, gs.manifests_removed, keep);
    }
exit:
    store_unlock(rlk);
    store_unlock(lk);
    tr_free(mpath);
    tr_free(latest);
    return rc;
}

enum tr_status ckpt_fs_commit(const struct ckpt_fs *fs, const char *run, int64_t step)
{
    return ckpt_fs_commit_keep(fs, run, step, 0);
}

enum tr_status ckpt_fs_claim(const struct ckpt_fs *fs, const char *run, const char *owner, char *holder,
                             size_t holder_n)
{
    if (holder_n)
        holder[0] = '\0';
    if (!ckpt_run_ok(run) || !owner || !*owner || strchr(owner, '\n') || strlen(owner) > 256)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *dir = run_dir(fs, run), *path = path_fmt("%s/runs/%s/CLAIM", fs->root, run);
    char *mdir = path_fmt("%s/runs/%s/manifests", fs->root, run), *latest = path_fmt("%s/runs/%s/LATEST", fs->root, run);
    char *text = NULL, *tmp = NULL;
    size_t n = 0;
    if (!dir || !path || !mdir || !latest) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(mkdir_one(dir), rc, exit);
    /* a run an older store version wrote has no CLAIM: its checkpoints own the name */
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT && (stat(latest, &sb) == 0 || stat(mdir, &sb) == 0)) {
        snprintf(holder, holder_n, "%s", "(a job before claims existed)");
        rc = TR_ERR_RANGE;
        goto exit;
    }
    /* written whole under a name of its own, then link()ed: of two jobs starting at
     * once exactly one gets CLAIM, and nobody ever reads it half-written (the ranks
     * of one job claim at once too) */
    if (!(tmp = path_fmt("%s/runs/%s/CLAIM.tmp-%ld-%lx", fs->root, run, (long)getpid(), (unsigned long)pthread_self()))) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        LOG_ERROR("cannot create '%s': %s", tmp, strerror(errno));
        rc = note_io(tmp, TR_ERR_IO);
        goto exit;
    }
    char line[300];
    int k = snprintf(line, sizeof line, "%s\n", owner);
    rc = note_io(tmp, tr_file_write_all(fd, line, (size_t)k, tmp));
    if (rc == TR_OK && fsync(fd) != 0) {
        LOG_ERROR("cannot sync '%s': %s", tmp, strerror(errno));
        rc = TR_ERR_IO;
    }
    close(fd);
    int linked = rc == TR_OK && link(tmp, path) == 0, err = errno;
    (void)unlink(tmp);
    if (rc != TR_OK)
        goto exit;
    if (linked) {
        rc = tr_file_fsync_dir(path);
        goto exit;
    }
    if (err != EEXIST) {
        LOG_ERROR("cannot create '%s': %s", path, strerror(err));
        rc = note_io(path, TR_ERR_IO);
        goto exit;
    }
    rc = tr_file_read_all(path, &text, &n);
    if (rc != TR_OK)
        goto exit;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    if (strcmp(text, owner) != 0) {
        snprintf(holder, holder_n, "%s", n ? text : "(another job)");
        rc = TR_ERR_RANGE;
    }
exit:
    tr_free(text);
    tr_free(tmp);
    tr_free(dir);
    tr_free(path);
    tr_free(mdir);
    tr_free(latest);
    return rc;
}

enum tr_status ckpt_fs_chunk_touch(const struct ckpt_fs *fs, const char *hash, int64_t *bytes)
{
    *bytes = 0;
    if (!ckpt_hash_ok(hash))
        return TR_ERR_ARG;
    int lk = store_lock(fs, NULL, LOCK_SH);
    if (lk < 0)
        return TR_ERR_IO;
    enum tr_status rc = ckpt_fs_chunk_stat(fs, hash, bytes);
    if (rc == TR_OK) {
        char *p = ckpt_fs_chunk_path(fs, hash);
        if (!p)
            rc = TR_ERR_NOMEM;
        else if (utimensat(AT_FDCWD, p, NULL, 0) != 0 && errno == ENOENT)
            rc = TR_ERR_NOT_FOUND;
        tr_free(p);
    }
    store_unlock(lk);
    return rc;
}

enum tr_status ckpt_fs_latest(const struct ckpt_fs *fs, const char *run, int64_t *step)
{
    *step = -1;
    if (!ckpt_run_ok(run))
        return TR_ERR_ARG;
    char *path = path_fmt("%s/runs/%s/LATEST", fs->root, run);
    if (!path)
        return TR_ERR_NOMEM;
    char *text = NULL;
    size_t n = 0;
    enum tr_status rc = tr_file_read_all(path, &text, &n);
    if (rc == TR_OK) {
        int64_t v = 0;
        size_t i = 0;
        for (; i < n && text[i] >= '0' && text[i] <= '9' && i < 18; i++)
            v = v * 10 + (text[i] - '0');
        if (i == 0 || i + 1 != n || text[i] != '\n') {
            LOG_ERROR("'%s' does not hold a step (a decimal number and a newline)", path);
            rc = TR_ERR_FORMAT;
        } else {
            *step = v;
        }
    }
    tr_free(text);
    tr_free(path);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void ckpt_free_names(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        tr_free(names[i]);
    tr_free(names);
}

enum tr_status ckpt_fs_list_runs(const struct ckpt_fs *fs, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    char *dir = path_fmt("%s/runs", fs->root);
    if (!dir)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    char **v = NULL;
    int k = 0, cap = 0;
    DIR *dp = opendir(dir);
    if (!dp) {
        if (errno != ENOENT) {
            LOG_ERROR("cannot list '%s': %s", dir, strerror(errno));
            rc = TR_ERR_IO;
        }
        goto exit;
    }
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!ckpt_run_ok(e->d_name) || strstr(e->d_name, ".tmp-"))
            continue;
        if (k == cap) {
            int nc = cap ? 2 * cap : 16;
            char **nv = tr_realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) {
                rc = TR_ERR_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        if (!(v[k] = tr_strdup(e->d_name))) {
            rc = TR_ERR_NOMEM;
            break;
        }
        k++;
    }
    closedir(dp);
    if (rc != TR_OK) {
        ckpt_free_names(v, k);
        goto exit;
    }
    if (k > 0)
        qsort(v, (size_t)k, sizeof *v, cmp_str);
    else {
        tr_free(v);
        v = NULL;
    }
    *names = v;
    *n = k;
exit:
    tr_free(dir);
    return rc;
}

/* "<decimal>.json" -> step; -1 for any other name. */
static int64_t step_of_name(const char *s)
{
    int64_t v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        if (i >= 18)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return i > 0 && strcmp(s + i, ".json") == 0 ? v : -1;
}

enum tr_status ckpt_fs_list_steps(const struct ckpt_fs *fs, const char *run, int64_t **steps, int *n)
{
    *steps = NULL;
    *n = 0;
    if (!ckpt_run_ok(run))
        return TR_ERR_ARG;
    char *dir = path_fmt("%s/runs/%s/manifests", fs->root, run);
    if (!dir)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    int64_t *v = NULL;
    int k = 0, cap = 0;
    DIR *dp = opendir(dir);
    if (!dp) {
        if (errno != ENOENT && errno != ENOTDIR) {
            LOG_ERROR("cannot list '%s': %s", dir, strerror(errno));
            rc = TR_ERR_IO;
        }
        goto exit;
    }
    struct dirent *e;
    while ((e = readdir(dp))) {
        int64_t s = step_of_name(e->d_name);
        if (s < 0)
            continue;
        if (k == cap) {
            int nc = cap ? 2 * cap : 16;
            int64_t *nv = tr_realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) {
                rc = TR_ERR_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        v[k++] = s;
    }
    closedir(dp);
    if (rc != TR_OK || k == 0) {
        tr_free(v);
        goto exit;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_i64);
    *steps = v;
    *n = k;
exit:
    tr_free(dir);
    return rc;
}

/* ---- garbage collection ------------------------------------------------------------ */

struct hash_set {
    char (*v)[CKPT_HASH_LEN + 1];
    size_t n, cap;
};

static enum tr_status hash_set_add(struct hash_set *s, const char *h)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 1024;
        void *nv = tr_realloc(s->v, nc * sizeof *s->v);
        if (!nv)
            return TR_ERR_NOMEM;
        s->v = nv;
        s->cap = nc;
    }
    memcpy(s->v[s->n++], h, CKPT_HASH_LEN + 1);
    return TR_OK;
}

static int cmp_hash(const void *a, const void *b)
{
    return memcmp(a, b, CKPT_HASH_LEN);
}

static int is_temp(const char *name)
{
    return strstr(name, ".tmp-") != NULL;
}

/* Removes one file, counting it. */
static enum tr_status remove_file(const char *path, int64_t *count, int64_t *bytes)
{
    struct stat st;
    int64_t sz = lstat(path, &st) == 0 ? (int64_t)st.st_size : 0;
    if (unlink(path) != 0) {
        if (errno == ENOENT)
            return TR_OK;
        LOG_ERROR("gc: cannot remove '%s': %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    if (count)
        (*count)++;
    if (bytes)
        *bytes += sz;
    return TR_OK;
}

/* gc's clock: files modified at or after `cutoff` (the walk's start less the
 * grace) are young and never removed. */
struct gc_ctx {
    const struct ckpt_fs *fs;
    const struct ckpt_gc_opts *o;
    double cutoff;
    struct ckpt_gc_stats *st;
};

static int young_stat(const struct gc_ctx *g, const struct stat *sb)
{
    return (double)sb->st_mtim.tv_sec + 1e-9 * (double)sb->st_mtim.tv_nsec >= g->cutoff;
}

/* Removes path unless it is young (or gone). */
static enum tr_status remove_old(const struct gc_ctx *g, const char *path, int64_t *count, int64_t *bytes)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return TR_OK;
    if (young_stat(g, &sb))
        return TR_OK;
    return remove_file(path, count, bytes);
}

/* Removes the temporary files of dir older than the cutoff. */
static enum tr_status remove_temps(const struct gc_ctx *g, const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return errno == ENOENT || errno == ENOTDIR ? TR_OK : TR_ERR_IO;
    enum tr_status rc = TR_OK;
    struct dirent *e;
    while (rc == TR_OK && (e = readdir(dp))) {
        if (!is_temp(e->d_name))
            continue;
        char *p = path_fmt("%s/%s", dir, e->d_name);
        rc = p ? remove_old(g, p, &g->st->temps_removed, NULL) : TR_ERR_NOMEM;
        tr_free(p);
    }
    closedir(dp);
    return rc;
}

/* Removes manifest `step` of run and its recorded hash. */
static enum tr_status remove_manifest(const struct ckpt_fs *fs, const char *run, int64_t step, int64_t *count)
{
    char *p = manifest_path(fs, run, step), *side = sidecar_path(fs, run, step);
    enum tr_status rc = p && side ? remove_file(p, count, NULL) : TR_ERR_NOMEM;
    if (rc == TR_OK && side)
        rc = remove_file(side, NULL, NULL);
    tr_free(p);
    tr_free(side);
    return rc;
}

/* Retention: of the manifests at or below LATEST (committed), keeps the `keep`
 * newest (LATEST always) and removes the others. keep 0 keeps all. Their chunks
 * stay until a gc finds them unreferenced. */
static enum tr_status prune_run(const struct ckpt_fs *fs, const char *run, int64_t latest, int keep,
                                struct ckpt_gc_stats *st)
{
    if (keep <= 0 || latest < 0)
        return TR_OK;
    int64_t *steps = NULL;
    int n = 0, kept = 0;
    TR_CHECK(ckpt_fs_list_steps(fs, run, &steps, &n));
    enum tr_status rc = TR_OK;
    for (int i = n - 1; i >= 0 && rc == TR_OK; i--) {
        if (steps[i] > latest)
            continue;
        if (steps[i] == latest || kept < keep) {
            kept++;
            continue;
        }
        rc = remove_manifest(fs, run, steps[i], &st->manifests_removed);
    }
    tr_free(steps);
    return rc;
}

/* One run, under the exclusive lock: retention, then what a dead save left
 * (uncommitted manifests above LATEST, parts, temporary files) once older than
 * the cutoff; parts at or below LATEST were merged and go at once. */
static enum tr_status gc_run(const struct gc_ctx *g, const char *run)
{
    const struct ckpt_fs *fs = g->fs;
    struct ckpt_gc_stats *st = g->st;
    enum tr_status rc = TR_OK;
    int64_t *steps = NULL, latest = -1;
    int n = 0;
    char *rdir = run_dir(fs, run), *mdir = path_fmt("%s/runs/%s/manifests", fs->root, run);
    char *pdir = path_fmt("%s/runs/%s/parts", fs->root, run);
    DIR *dp = NULL;
    if (!rdir || !mdir || !pdir) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    /* a broken LATEST: keep everything rather than guess (and remove no chunk) */
    TR_CHECK_GOTO(latest_or_none(fs, run, &latest), rc, exit);
    TR_CHECK_GOTO(remove_temps(g, rdir), rc, exit);
    TR_CHECK_GOTO(remove_temps(g, mdir), rc, exit);
    TR_CHECK_GOTO(prune_run(fs, run, latest, g->o->keep, st), rc, exit);
    TR_CHECK_GOTO(ckpt_fs_list_steps(fs, run, &steps, &n), rc, exit);
    for (int i = 0; i < n; i++) {
        if (steps[i] <= latest) {
            st->manifests_kept++;
            continue;
        }
        char *p = manifest_path(fs, run, steps[i]);
        struct stat sb;
        if (!p) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        int old = lstat(p, &sb) == 0 && !young_stat(g, &sb);
        tr_free(p);
        if (old)
            TR_CHECK_GOTO(remove_manifest(fs, run, steps[i], &st->manifests_removed), rc, exit);
        else
            st->manifests_kept++; /* a save in flight */
    }
    if ((dp = opendir(pdir))) {
        struct dirent *e;
        while (rc == TR_OK && (e = readdir(dp))) {
            int64_t s = 0;
            size_t i = 0;
            for (; e->d_name[i] >= '0' && e->d_name[i] <= '9' && i < 18; i++)
                s = s * 10 + (e->d_name[i] - '0');
            if (i == 0 || e->d_name[i])
                continue;
            char *sd = path_fmt("%s/%s", pdir, e->d_name);
            DIR *sp = sd ? opendir(sd) : NULL;
            if (!sd)
                rc = TR_ERR_NOMEM;
            struct dirent *f;
            while (sp && rc == TR_OK && (f = readdir(sp))) {
                if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, ".."))
                    continue;
                char *fp = path_fmt("%s/%s", sd, f->d_name);
                int64_t *count = is_temp(f->d_name) ? &st->temps_removed : &st->parts_removed;
                if (!fp)
                    rc = TR_ERR_NOMEM;
                else if (s <= latest)
                    rc = remove_file(fp, count, NULL);
                else
                    rc = remove_old(g, fp, count, NULL);
                tr_free(fp);
            }
            if (sp)
                closedir(sp);
            if (sd && rmdir(sd) != 0 && errno != ENOENT && errno != ENOTEMPTY)
                LOG_WARN("gc: cannot remove '%s': %s", sd, strerror(errno));
            tr_free(sd);
        }
        closedir(dp);
        if (rmdir(pdir) != 0 && errno != ENOENT && errno != ENOTEMPTY)
            LOG_WARN("gc: cannot remove '%s': %s", pdir, strerror(errno));
    }
exit:
    tr_free(steps);
    tr_free(rdir);
    tr_free(mdir);
    tr_free(pdir);
    return rc;
}

/* Adds the chunks named by the manifest or part at path to set. A missing file
 * (removed meanwhile) adds nothing; one that does not parse fails. */
static enum tr_status refs_of_file(const char *path, struct hash_set *set)
{
    char *text = NULL;
    size_t len = 0;
    struct ckpt_manifest m;
    memset(&m, 0, sizeof m);
    enum tr_status r = tr_file_read_all(path, &text, &len);
    if (r == TR_ERR_NOT_FOUND)
        return TR_OK;
    if (r == TR_OK)
        r = ckpt_manifest_parse(text, len, path, &m);
    tr_free(text);
    for (int t = 0; r == TR_OK && t < m.ntensors; t++)
        for (int c = 0; r == TR_OK && c < m.tensors[t].nchunks; c++)
            r = hash_set_add(set, m.tensors[t].chunks[c].hash);
    ckpt_manifest_release(&m);
    if (r != TR_OK)
        LOG_ERROR("gc: cannot read '%s': no chunk is removed", path);
    return r == TR_ERR_NOT_FOUND ? TR_ERR_IO : r;
}

/* set := every chunk any manifest or part of any run names (sorted). */
static enum tr_status gc_refs(const struct ckpt_fs *fs, struct hash_set *set)
{
    enum tr_status rc = TR_OK;
    char **runs = NULL;
    int nruns = 0;
    set->n = 0;
    TR_CHECK(ckpt_fs_list_runs(fs, &runs, &nruns));
    for (int i = 0; i < nruns && rc == TR_OK; i++) {
        int64_t *steps = NULL;
        int n = 0;
        rc = ckpt_fs_list_steps(fs, runs[i], &steps, &n);
        for (int k = 0; k < n && rc == TR_OK; k++) {
            char *p = manifest_path(fs, runs[i], steps[k]);
            rc = p ? refs_of_file(p, set) : TR_ERR_NOMEM;
            tr_free(p);
        }
        tr_free(steps);
        char *pdir = rc == TR_OK ? path_fmt("%s/runs/%s/parts", fs->root, runs[i]) : NULL;
        DIR *dp = pdir ? opendir(pdir) : NULL;
        struct dirent *e;
        while (dp && rc == TR_OK && (e = readdir(dp))) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            char *sd = path_fmt("%s/%s", pdir, e->d_name);
            DIR *sp = sd ? opendir(sd) : NULL;
            struct dirent *f;
            while (sp && rc == TR_OK && (f = readdir(sp))) {
                if (is_temp(f->d_name) || !strstr(f->d_name, ".json"))
                    continue;
                char *fp = path_fmt("%s/%s", sd, f->d_name);
                rc = fp ? refs_of_file(fp, set) : TR_ERR_NOMEM;
                tr_free(fp);
            }
            if (sp)
                closedir(sp);
            tr_free(sd);
        }
        if (dp)
            closedir(dp);
        tr_free(pdir);
    }
    ckpt_free_names(runs, nruns);
    if (rc == TR_OK && set->n > 1)
        qsort(set->v, set->n, sizeof *set->v, cmp_hash);
    return rc;
}

static int in_set(const struct hash_set *set, const char *h)
{
    return set->n && bsearch(h, set->v, set->n, sizeof *set->v, cmp_hash) != NULL;
}

/* Phase 1 (no lock): the chunk files (and chunk temporary files) that no
 * manifest or part names and that are older than the cutoff: gc's candidates,
 * as paths relative to chunks/ ("xx/<name>"). */
static enum tr_status gc_candidates(const struct gc_ctx *g, const struct hash_set *refs, char ***out, size_t *nout)
{
    char *cdir = path_fmt("%s/chunks", g->fs->root);
    if (!cdir)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
    char **v = NULL;
    size_t n = 0, cap = 0;
    DIR *dp = opendir(cdir);
    if (!dp) {
        LOG_ERROR("gc: cannot list '%s': %s", cdir, strerror(errno));
        tr_free(cdir);
        return TR_ERR_IO;
    }
    struct dirent *e;
    while (rc == TR_OK && (e = readdir(dp))) {
        const char *d = e->d_name;
        if (strlen(d) != 2 || !((d[0] >= '0' && d[0] <= '9') || (d[0] >= 'a' && d[0] <= 'f')) ||
            !((d[1] >= '0' && d[1] <= '9') || (d[1] >= 'a' && d[1] <= 'f')))
            continue;
        char *sub = path_fmt("%s/%s", cdir, d);
        DIR *sp = sub ? opendir(sub) : NULL;
        if (!sub)
            rc = TR_ERR_NOMEM;
        struct dirent *f;
        while (sp && rc == TR_OK && (f = readdir(sp))) {
            int temp = is_temp(f->d_name);
            if (!temp && !ckpt_hash_ok(f->d_name))
                continue;
            if (!temp)
                g->st->chunks_kept++; /* counted; less the removed ones at the end */
            if (!temp && in_set(refs, f->d_name))
                continue;
            char *p = path_fmt("%s/%s", sub, f->d_name);
            struct stat sb;
            if (!p) {
                rc = TR_ERR_NOMEM;
                break;
            }
            if (lstat(p, &sb) == 0 && !young_stat(g, &sb)) {
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 1024;
                    char **nv = tr_realloc(v, nc * sizeof *nv);
                    if (!nv) {
                        rc = TR_ERR_NOMEM;
                        tr_free(p);
                        break;
                    }
                    v = nv;
                    cap = nc;
                }
                v[n++] = p;
                p = NULL;
            }
            tr_free(p);
        }
        if (sp)
            closedir(sp);
        tr_free(sub);
    }
    closedir(dp);
    tr_free(cdir);
    *out = v;
    *nout = n;
    return rc;
}

enum tr_status ckpt_fs_gc(const struct ckpt_fs *fs, const struct ckpt_gc_opts *o, struct ckpt_gc_stats *st)
{
    memset(st, 0, sizeof *st);
    if (o->keep < 0 || !(o->grace_s >= 0)) {
        LOG_ERROR("gc: keep must be 0 (all) or more and grace 0 s or more, not %d and %g", o->keep, o->grace_s);
        return TR_ERR_ARG;
    }
    struct timespec t0;
    clock_gettime(CLOCK_REALTIME, &t0);
    struct gc_ctx g = {fs, o, (double)t0.tv_sec + 1e-9 * (double)t0.tv_nsec - o->grace_s, st};
    enum tr_status rc = TR_OK;
    struct hash_set refs = {0};
    char **cand = NULL;
    size_t ncand = 0;
    char **runs = NULL;
    int nruns = 0, lk = -1;
    /* phase 0, exclusive (short): per run, retention and what dead saves left */
    if ((lk = store_lock(fs, NULL, LOCK_EX)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(ckpt_fs_list_runs(fs, &runs, &nruns), rc, exit);
    for (int i = 0; i < nruns; i++)
        TR_CHECK_GOTO(gc_run(&g, runs[i]), rc, exit);
    store_unlock(lk);
    lk = -1;
    /* phase 1, without the lock: the long walk over every chunk */
    TR_CHECK_GOTO(gc_refs(fs, &refs), rc, exit);
    TR_CHECK_GOTO(gc_candidates(&g, &refs, &cand, &ncand), rc, exit);
    /* phase 2, exclusive: nothing becomes live meanwhile. Every manifest and part
     * is read again and each candidate checked again: named now, or touched since
     * the walk, it stays */
    if ((lk = store_lock(fs, NULL, LOCK_EX)) < 0) {
        rc = TR_ERR_IO;
        goto exit;
    }
    TR_CHECK_GOTO(gc_refs(fs, &refs), rc, exit);
    for (size_t i = 0; i < ncand && rc == TR_OK; i++) {
        const char *name = strrchr(cand[i], '/') + 1;
        if (is_temp(name))
            rc = remove_old(&g, cand[i], &st->temps_removed, NULL);
        else if (!in_set(&refs, name))
            rc = remove_old(&g, cand[i], &st->chunks_removed, &st->bytes_removed);
    }
    st->chunks_kept -= st->chunks_removed;
    LOG_INFO(CKPT,
             "gc of '%s' (keep %d, grace %g s): manifests kept %" PRId64 " removed %" PRId64 ", chunks kept %" PRId64
             " removed %" PRId64 " (%" PRId64 " bytes), parts removed %" PRId64 ", temporary files removed %" PRId64,
             fs->root, o->keep, o->grace_s, st->manifests_kept, st->manifests_removed, st->chunks_kept,
             st->chunks_removed, st->bytes_removed, st->parts_removed, st->temps_removed);
exit:
    store_unlock(lk);
    ckpt_free_names(runs, nruns);
    for (size_t i = 0; i < ncand; i++)
        tr_free(cand[i]);
    tr_free(cand);
    tr_free(refs.v);
    return rc;
}
