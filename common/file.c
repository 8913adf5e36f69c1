/* file.c: complete reads and writes, mkdir -p, rm -rf and atomic file
 * replacement. No buffering of its own: callers write large blocks. It does not
 * lock files; two writers of one path each replace it whole, the last one wins. */
#define TR_SUBSYS TR_SUB_INIT
#define _GNU_SOURCE
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "log.h"

/* The one transfer loop: all n bytes, retrying short transfers and EINTR; at the
 * file offset (off < 0) or at off. */
static enum tr_status transfer(int fd, char *p, size_t n, int64_t off, int wr, const char *what)
{
    while (n > 0) {
        ssize_t k = wr ? (off < 0 ? write(fd, p, n) : pwrite(fd, p, n, (off_t)off))
                       : (off < 0 ? read(fd, p, n) : pread(fd, p, n, (off_t)off));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            LOG_ERROR("cannot %s '%s': %s", wr ? "write" : "read", what,
                      k < 0 ? strerror(errno) : wr ? "no progress" : "unexpected end of file");
            return TR_ERR_IO;
        }
        p += k;
        n -= (size_t)k;
        if (off >= 0)
            off += k;
    }
    return TR_OK;
}

enum tr_status tr_file_write_all(int fd, const void *buf, size_t n, const char *what)
{
    return transfer(fd, (char *)buf, n, -1, 1, what);
}

enum tr_status tr_file_pread_all(int fd, void *buf, size_t n, int64_t off, const char *what)
{
    return off < 0 ? TR_ERR_ARG : transfer(fd, buf, n, off, 0, what);
}

enum tr_status tr_file_pwrite_all(int fd, const void *buf, size_t n, int64_t off, const char *what)
{
    return off < 0 ? TR_ERR_ARG : transfer(fd, (char *)buf, n, off, 1, what);
}

enum tr_status tr_file_join_to(const char *a, const char *b, char **out)
{
    *out = NULL;
    size_t la = strlen(a), lb = strlen(b);
    if (la + 1 + lb > PATH_MAX - 1) {
        LOG_ERROR("path too long: '%.64s%s' (%zu bytes) joined with '%.64s%s' (%zu bytes) makes %zu bytes; at most "
                  "%d",
                  a, la > 64 ? "..." : "", la, b, lb > 64 ? "..." : "", lb, la + 1 + lb, PATH_MAX - 1);
        return TR_ERR_ARG;
    }
    char *p = tr_malloc(la + lb + 2);
    if (!p)
        return TR_ERR_NOMEM;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    *out = p;
    return TR_OK;
}

char *tr_file_join(const char *a, const char *b)
{
    char *p;
    return tr_file_join_to(a, b, &p) == TR_OK ? p : NULL;
}

enum tr_status tr_file_probe_write(const char *path, const char *what)
{
    enum tr_status rc = TR_OK;
    size_t n = strlen(path);
    if (n > PATH_MAX - 1) {
        LOG_ERROR("%s: too long (%zu bytes; at most %d)", what, n, PATH_MAX - 1);
        return TR_ERR_ARG;
    }
    char *dir = tr_strdup(path);
    if (!dir)
        return TR_ERR_NOMEM;
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            rc = tr_file_mkdir_p(dir);
            if (rc != TR_OK) {
                LOG_HINT("%s names a file in a directory that cannot be created", what);
                goto exit;
            }
        }
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    int created = 0;
    if (fd < 0 && errno == ENOENT) {
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
        created = fd >= 0;
    }
    if (fd < 0) {
        int e = errno;
        LOG_ERROR("%s: cannot write '%s': %s", what, path, strerror(e));
        if (e == EACCES || e == EROFS || e == EISDIR)
            LOG_HINT("%s must name a writable file in a writable directory", what);
        rc = TR_ERR_IO;
        goto exit;
    }
    close(fd);
    if (created && unlink(path) != 0) {
        LOG_ERROR("%s: cannot remove the probe file '%s': %s", what, path, strerror(errno));
        rc = TR_ERR_IO;
    }
exit:
    tr_free(dir);
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int r = flag == FTW_DP ? rmdir(path) : unlink(path);
    if (r != 0 && errno != ENOENT)
        LOG_WARN("cannot remove '%s': %s", path, strerror(errno));
    return 0;
}

enum tr_status tr_file_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return TR_OK;
    errno = 0;
    int r = nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    int e = errno;
    if (r != 0 || lstat(path, &st) == 0) {
        LOG_ERROR("cannot remove '%s': %s", path, r != 0 && e ? strerror(e) : "entries remain (see above)");
        return TR_ERR_IO;
    }
    return TR_OK;
}

enum tr_status tr_file_mkdir_p(const char *dir)
{
    enum tr_status rc = TR_OK;
    char *p = tr_strdup(dir);
    if (!p)
        return TR_ERR_NOMEM;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    for (char *s = p + 1;; s++) {
        int last = *s == '\0';
        if (*s == '/' || last) {
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                LOG_ERROR("cannot create directory '%s': %s", p, strerror(errno));
                rc = TR_ERR_IO;
                break;
            }
            if (last)
                break;
            *s = '/';
        }
    }
    tr_free(p);
    return rc;
}

enum tr_status tr_file_fsync_dir(const char *path)
{
    char *d = tr_strdup(path);
    if (!d)
        return TR_ERR_NOMEM;
    char *slash = strrchr(d, '/');
    const char *dir = ".";
    if (slash == d)
        dir = "/";
    else if (slash) {
        *slash = '\0';
        dir = d;
    }
    enum tr_status rc = TR_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        LOG_ERROR("cannot sync directory '%s': %s", dir, strerror(errno));
        rc = TR_ERR_IO;
    }
    if (fd >= 0)
        close(fd);
    tr_free(d);
    return rc;
}

/* Numbers the temporary files of this process, so threads writing one path at
 * once never share a temporary file. */
static _Atomic unsigned long long atomic_tmp_counter;

enum tr_status tr_file_atomic_open(struct tr_file_atomic *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    size_t n = strlen(path) + 48;
    f->path = tr_strdup(path);
    f->tmp = tr_malloc(n);
    if (!f->path || !f->tmp) {
        tr_file_atomic_abort(f);
        return TR_ERR_NOMEM;
    }
    snprintf(f->tmp, n, "%s.tmp-%ld-%llu", path, (long)getpid(), atomic_fetch_add(&atomic_tmp_counter, 1));
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (f->fd < 0) {
        int e = errno;
        LOG_ERROR("cannot create '%s': %s", f->tmp, strerror(e));
        if (e == ENOENT || e == EACCES || e == EROFS)
            LOG_HINT("the directory of '%s' must exist and be writable", path);
        tr_free(f->tmp);
        f->tmp = NULL; /* nothing to remove */
        tr_file_atomic_abort(f);
        return TR_ERR_IO;
    }
    return TR_OK;
}

enum tr_status tr_file_atomic_write(struct tr_file_atomic *f, const void *buf, size_t n)
{
    if (f->fd < 0)
        return TR_ERR_IO;
    return tr_file_write_all(f->fd, buf, n, f->tmp);
}

enum tr_status tr_file_atomic_commit(struct tr_file_atomic *f)
{
    enum tr_status rc = TR_OK;
    if (f->fd < 0) {
        tr_file_atomic_abort(f);
        return TR_ERR_IO;
    }
    if (fsync(f->fd) != 0) {
        LOG_ERROR("cannot sync '%s': %s", f->tmp, strerror(errno));
        rc = TR_ERR_IO;
    }
    if (close(f->fd) != 0 && rc == TR_OK) {
        LOG_ERROR("cannot close '%s': %s", f->tmp, strerror(errno));
        rc = TR_ERR_IO;
    }
    f->fd = -1;
    if (rc == TR_OK && rename(f->tmp, f->path) != 0) {
        LOG_ERROR("cannot rename '%s' to '%s': %s", f->tmp, f->path, strerror(errno));
        rc = TR_ERR_IO;
    }
    if (rc == TR_OK) {
        tr_free(f->tmp); /* renamed: nothing left to remove */
        f->tmp = NULL;
        rc = tr_file_fsync_dir(f->path);
    }
    tr_file_atomic_abort(f);
    return rc;
}

void tr_file_atomic_abort(struct tr_file_atomic *f)
{
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    tr_free(f->tmp);
    tr_free(f->path);
    f->fd = -1;
    f->tmp = NULL;
    f->path = NULL;
}

enum tr_status tr_file_write_atomic(const char *path, const void *buf, size_t n)
{
    struct tr_file_atomic f;
    TR_CHECK(tr_file_atomic_open(&f, path));
    enum tr_status rc = tr_file_atomic_write(&f, buf, n);
    if (rc != TR_OK) {
        tr_file_atomic_abort(&f);
        return rc;
    }
    return tr_file_atomic_commit(&f);
}

enum tr_status tr_file_read_token(const char *path, const char *what, char **out)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        LOG_ERROR("cannot read %s '%s': %s", what, path, strerror(errno));
        return TR_ERR_ARG;
    }
    char *buf = tr_malloc(TR_TOKEN_MAX + 2);
    if (!buf) {
        fclose(fp);
        return TR_ERR_NOMEM;
    }
    size_t n = fread(buf, 1, TR_TOKEN_MAX + 1, fp);
    const int bad = ferror(fp);
    fclose(fp);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    buf[n] = '\0';
    const char *why = bad ? "cannot be read" : n == 0 ? "is empty" : n > TR_TOKEN_MAX ? "is too long" : NULL;
    for (size_t i = 0; !why && i < n; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            why = "holds a control character";
    if (why) {
        LOG_ERROR("%s '%s' %s", what, path, why);
        tr_free(buf);
        return TR_ERR_ARG;
    }
    *out = buf;
    return TR_OK;
}

enum tr_status tr_file_read_all(const char *path, char **text, size_t *n)
{
    *text = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return TR_ERR_NOT_FOUND;
        LOG_ERROR("cannot open '%s': %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    enum tr_status rc = TR_OK;
    struct stat st;
    char *p = NULL;
    int bad = fstat(fd, &st) != 0;
    if (bad || !S_ISREG(st.st_mode)) {
        LOG_ERROR("cannot read '%s': %s", path, bad ? strerror(errno) : "not a regular file");
        rc = TR_ERR_IO;
        goto exit;
    }
    p = tr_malloc((size_t)st.st_size + 1);
    if (!p) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    rc = tr_file_pread_all(fd, p, (size_t)st.st_size, 0, path);
    if (rc != TR_OK) {
        tr_free(p);
        goto exit;
    }
    p[st.st_size] = '\0';
    *text = p;
    *n = (size_t)st.st_size;
exit:
    close(fd);
    return rc;
}
