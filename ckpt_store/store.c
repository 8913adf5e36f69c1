/* store.c: the checkpoint store's layout on a file system root (store.h):
 * content-addressed chunks checked against their xxh3-128 name, manifests, parts
 * and LATEST, each written to a unique temporary file, fsynced, renamed and its
 * directory fsynced; listing and garbage collection. It does not lock: writers
 * of one name each replace it whole, and gc racing a save makes that save fail. */
#define TR_SUBSYS TR_SUB_CKPT
#define _GNU_SOURCE
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    TR_CHECK(tr_file_atomic_open(&f, path));
    enum tr_status rc = tr_file_atomic_write(&f, buf, n);
    if (rc != TR_OK) {
        tr_file_atomic_abort(&f);
        return rc;
    }
    if (delay_ms > 0) {
        LOG_WARN("fault injection: '%s' written, waiting %d ms before its commit", f.tmp, delay_ms);
        sleep_ms(delay_ms);
    }
    return tr_file_atomic_commit(&f);
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
    TR_CHECK_GOTO(tr_file_atomic_open(&w->f, path), rc, fail);
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
    TR_CHECK(tr_file_atomic_write(&w->f, p, n));
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
    enum tr_status rc = tr_file_atomic_commit(&w->f);
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

enum tr_status ckpt_fs_manifest_put(const struct ckpt_fs *fs, const char *run, int64_t step, const char *text,
                                    size_t n)
{
    if (!ckpt_run_ok(run) || step < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *dir = run_dir(fs, run), *mdir = path_fmt("%s/runs/%s/manifests", fs->root, run);
    char *path = manifest_path(fs, run, step);
    if (!dir || !mdir || !path) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(check_stored(fs, run, step, -1, text, n, path), rc, exit);
    TR_CHECK_GOTO(mkdir_one(dir), rc, exit);
    TR_CHECK_GOTO(mkdir_one(mdir), rc, exit);
    rc = write_atomic(path, text, n, 0);
exit:
    tr_free(dir);
    tr_free(mdir);
    tr_free(path);
    return rc;
}

enum tr_status ckpt_fs_manifest_get(const struct ckpt_fs *fs, const char *run, int64_t step, char **text, size_t *n)
{
    *text = NULL;
    *n = 0;
    if (!ckpt_run_ok(run) || step < 0)
        return TR_ERR_ARG;
    char *path = manifest_path(fs, run, step);
    if (!path)
        return TR_ERR_NOMEM;
    enum tr_status rc = tr_file_read_all(path, text, n);
    tr_free(path);
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
    if (!dirs[0] || !dirs[1] || !dirs[2] || !path) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(check_stored(fs, run, step, rank, text, n, path), rc, exit);
    for (int i = 0; i < 3; i++)
        TR_CHECK_GOTO(mkdir_one(dirs[i]), rc, exit);
    rc = write_atomic(path, text, n, 0);
exit:
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

enum tr_status ckpt_fs_commit(const struct ckpt_fs *fs, const char *run, int64_t step)
{
    if (!ckpt_run_ok(run) || step < 0)
        return TR_ERR_ARG;
    enum tr_status rc = TR_OK;
    char *mpath = manifest_path(fs, run, step), *latest = path_fmt("%s/runs/%s/LATEST", fs->root, run);
    if (!mpath || !latest) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    struct stat st;
    if (stat(mpath, &st) != 0 || !S_ISREG(st.st_mode)) {
        LOG_ERROR("cannot commit step %" PRId64 " of run '%s': no manifest '%s'", step, run, mpath);
        rc = TR_ERR_NOT_FOUND;
        goto exit;
    }
    char buf[32];
    int k = snprintf(buf, sizeof buf, "%" PRId64 "\n", step);
    rc = write_atomic(latest, buf, (size_t)k, atomic_load(&fault_commit_ms));
exit:
    tr_free(mpath);
    tr_free(latest);
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

/* Removes the temporary files in dir or, with all (the parts of a run), every file
 * below it and its emptied subdirectories; counted as temps or parts. */
static enum tr_status remove_files(const char *dir, int all, struct ckpt_gc_stats *st)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return errno == ENOENT || errno == ENOTDIR ? TR_OK : TR_ERR_IO;
    enum tr_status rc = TR_OK;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || (!all && !is_temp(e->d_name)))
            continue;
        char *p = path_fmt("%s/%s", dir, e->d_name);
        struct stat sb;
        enum tr_status r = TR_OK;
        if (!p)
            r = TR_ERR_NOMEM;
        else if (all && lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            r = remove_files(p, all, st);
            if (r == TR_OK && rmdir(p) != 0 && errno != ENOENT && errno != ENOTEMPTY) {
                LOG_ERROR("gc: cannot remove '%s': %s", p, strerror(errno));
                r = TR_ERR_IO;
            }
        } else {
            r = remove_file(p, is_temp(e->d_name) ? &st->temps_removed : &st->parts_removed, NULL);
        }
        tr_free(p);
        if (rc == TR_OK)
            rc = r;
    }
    closedir(dp);
    return rc;
}

/* One run: removes the manifests gc does not keep, parts and temporary files, and
 * adds the chunks of the kept manifests to keep_set. */
static enum tr_status gc_run(const struct ckpt_fs *fs, const char *run, int keep, struct hash_set *keep_set,
                             struct ckpt_gc_stats *st)
{
    enum tr_status rc = TR_OK;
    int64_t *steps = NULL, latest = -1;
    int n = 0;
    char *rdir = run_dir(fs, run), *mdir = path_fmt("%s/runs/%s/manifests", fs->root, run);
    char *pdir = path_fmt("%s/runs/%s/parts", fs->root, run);
    if (!rdir || !mdir || !pdir) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    TR_CHECK_GOTO(remove_files(rdir, 0, st), rc, exit);
    TR_CHECK_GOTO(remove_files(mdir, 0, st), rc, exit);
    TR_CHECK_GOTO(remove_files(pdir, 1, st), rc, exit);
    if (rmdir(pdir) != 0 && errno != ENOENT && errno != ENOTEMPTY)
        LOG_WARN("gc: cannot remove '%s': %s", pdir, strerror(errno));
    enum tr_status r = ckpt_fs_latest(fs, run, &latest);
    if (r != TR_OK && r != TR_ERR_NOT_FOUND) {
        rc = r; /* a broken LATEST: keep everything of this run rather than guess */
        goto exit;
    }
    TR_CHECK_GOTO(ckpt_fs_list_steps(fs, run, &steps, &n), rc, exit);
    /* steps ascending: keep LATEST and the keep - 1 newest before it */
    int kept = 0;
    for (int i = n - 1; i >= 0; i--) {
        char *p = manifest_path(fs, run, steps[i]);
        if (!p) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        if (latest >= 0 && steps[i] <= latest && kept < keep) {
            kept++;
            st->manifests_kept++;
            char *text = NULL;
            size_t len = 0;
            struct ckpt_manifest m;
            memset(&m, 0, sizeof m);
            r = tr_file_read_all(p, &text, &len);
            if (r == TR_OK)
                r = ckpt_manifest_parse(text, len, p, &m);
            tr_free(text);
            for (int t = 0; r == TR_OK && t < m.ntensors; t++)
                for (int c = 0; r == TR_OK && c < m.tensors[t].nchunks; c++)
                    r = hash_set_add(keep_set, m.tensors[t].chunks[c].hash);
            ckpt_manifest_release(&m);
            if (r != TR_OK) {
                LOG_ERROR("gc: cannot read kept manifest '%s': no chunk is removed", p);
                tr_free(p);
                rc = r == TR_ERR_NOT_FOUND ? TR_ERR_IO : r;
                goto exit;
            }
        } else {
            r = remove_file(p, &st->manifests_removed, NULL);
            if (r != TR_OK) {
                tr_free(p);
                rc = r;
                goto exit;
            }
        }
        tr_free(p);
    }
exit:
    tr_free(steps);
    tr_free(rdir);
    tr_free(mdir);
    tr_free(pdir);
    return rc;
}

/* Removes the chunks not in keep_set (sorted) and the temporary files of chunks/. */
static enum tr_status gc_chunks(const struct ckpt_fs *fs, const struct hash_set *keep_set, struct ckpt_gc_stats *st)
{
    char *cdir = path_fmt("%s/chunks", fs->root);
    if (!cdir)
        return TR_ERR_NOMEM;
    enum tr_status rc = TR_OK;
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
        if (!sub) {
            rc = TR_ERR_NOMEM;
            break;
        }
        DIR *sp = opendir(sub);
        if (sp) {
            struct dirent *f;
            while (rc == TR_OK && (f = readdir(sp))) {
                int64_t *count = NULL, *bytes = NULL;
                if (is_temp(f->d_name)) {
                    count = &st->temps_removed;
                } else if (ckpt_hash_ok(f->d_name)) {
                    if (keep_set->n && bsearch(f->d_name, keep_set->v, keep_set->n, sizeof *keep_set->v, cmp_hash)) {
                        st->chunks_kept++;
                        continue;
                    }
                    count = &st->chunks_removed;
                    bytes = &st->bytes_removed;
                } else {
                    continue;
                }
                char *p = path_fmt("%s/%s", sub, f->d_name);
                rc = p ? remove_file(p, count, bytes) : TR_ERR_NOMEM;
                tr_free(p);
            }
            closedir(sp);
        }
        tr_free(sub);
    }
    closedir(dp);
    tr_free(cdir);
    return rc;
}

enum tr_status ckpt_fs_gc(const struct ckpt_fs *fs, int keep, struct ckpt_gc_stats *st)
{
    memset(st, 0, sizeof *st);
    if (keep < 1) {
        LOG_ERROR("gc: keep must be at least 1, not %d", keep);
        return TR_ERR_ARG;
    }
    enum tr_status rc = TR_OK;
    char **runs = NULL;
    int nruns = 0;
    struct hash_set set = {0};
    TR_CHECK_GOTO(ckpt_fs_list_runs(fs, &runs, &nruns), rc, exit);
    for (int i = 0; i < nruns; i++)
        TR_CHECK_GOTO(gc_run(fs, runs[i], keep, &set, st), rc, exit);
    if (set.n > 1)
        qsort(set.v, set.n, sizeof *set.v, cmp_hash);
    rc = gc_chunks(fs, &set, st);
    LOG_INFO(CKPT,
             "gc of '%s' (keep %d): manifests kept %" PRId64 " removed %" PRId64 ", chunks kept %" PRId64
             " removed %" PRId64 " (%" PRId64 " bytes), parts removed %" PRId64 ", temporary files removed %" PRId64,
             fs->root, keep, st->manifests_kept, st->manifests_removed, st->chunks_kept, st->chunks_removed,
             st->bytes_removed, st->parts_removed, st->temps_removed);
exit:
    ckpt_free_names(runs, nruns);
    tr_free(set.v);
    return rc;
}
