/* store.c: the checkpoint store's layout on a file system root (store.h), its
 * core: hash and run names, xxh3-128 hashing, the store's lock, the file helpers
 * its sibling files share (store_internal.h), opening the store, and the
 * content-addressed chunks checked against their xxh3-128 name, each written to a
 * unique temporary file, fsynced, renamed and its directory fsynced. Manifests,
 * parts, LATEST, claims and listing are in store_run.c, garbage collection in
 * store_gc.c. Locking: whatever makes a chunk live (a manifest or part put, a
 * commit, a chunk found already stored) holds <root>/.lock shared; gc's deletions
 * hold it exclusive (flock: the server's threads and a `terarec ckpt gc` on the
 * directory alike). */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

int ckpt_fs_fault_commit_ms(void)
{
    return atomic_load(&fault_commit_ms);
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
enum tr_status ckpt_fs_note_io(const char *path, enum tr_status rc)
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
 * ckpt_fs_unlock; -1 when it cannot (logged). */
int ckpt_fs_lock(const struct ckpt_fs *fs, const char *run, int how)
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

void ckpt_fs_unlock(int fd)
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
char *ckpt_fs_path_fmt(const char *fmt, ...)
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
enum tr_status ckpt_fs_mkdir_one(const char *dir)
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
enum tr_status ckpt_fs_write_atomic(const char *path, const void *buf, size_t n, int delay_ms)
{
    struct tr_file_atomic f;
    TR_CHECK(ckpt_fs_note_io(path, tr_file_atomic_open(&f, path)));
    enum tr_status rc = ckpt_fs_note_io(path, tr_file_atomic_write(&f, buf, n));
    if (rc != TR_OK) {
        tr_file_atomic_abort(&f);
        return rc;
    }
    if (delay_ms > 0) {
        LOG_WARN("fault injection: '%s' written, waiting %d ms before its commit", f.tmp, delay_ms);
        sleep_ms(delay_ms);
    }
    return ckpt_fs_note_io(path, tr_file_atomic_commit(&f));
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
        TR_CHECK_GOTO(ckpt_fs_mkdir_one(d), rc, fail);
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
    return ckpt_fs_path_fmt("%s/chunks/%.2s/%s", fs->root, hash, hash);
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
    char *dir = ckpt_fs_path_fmt("%s/chunks/%.2s", fs->root, hash), *path = ckpt_fs_chunk_path(fs, hash);
    w->h = ckpt_hasher_new();
    if (!dir || !path || !w->h) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    TR_CHECK_GOTO(ckpt_fs_mkdir_one(dir), rc, fail);
    TR_CHECK_GOTO(ckpt_fs_note_io(path, tr_file_atomic_open(&w->f, path)), rc, fail);
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
    TR_CHECK(ckpt_fs_note_io(w->f.tmp, tr_file_atomic_write(&w->f, p, n)));
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
    enum tr_status rc = ckpt_fs_note_io(path, tr_file_atomic_commit(&w->f));
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

enum tr_status ckpt_fs_chunk_touch(const struct ckpt_fs *fs, const char *hash, int64_t *bytes)
{
    *bytes = 0;
    if (!ckpt_hash_ok(hash))
        return TR_ERR_ARG;
    int lk = ckpt_fs_lock(fs, NULL, LOCK_SH);
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
    ckpt_fs_unlock(lk);
    return rc;
}
