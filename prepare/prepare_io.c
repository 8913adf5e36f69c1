#define TR_SUBSYS TR_SUB_DATA
/* prepare_io.c: file helpers of `terarec data prepare`: complete reads and
 * writes, mkdir -p, rm -rf (for the temporary output directory), and the sinks
 * that append rows to the PREPARE_NCOL column files of one split. No buffering of
 * its own: callers write large blocks. */
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/log.h"

enum tr_status prepare_write_all(int fd, const void *buf, size_t n, const char *what)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            LOG_ERROR("cannot write '%s': %s", what, w < 0 ? strerror(errno) : "no progress");
            return TR_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    return TR_OK;
}

enum tr_status prepare_pread_all(int fd, void *buf, size_t n, int64_t off, const char *what)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            LOG_ERROR("cannot read '%s': %s", what, r < 0 ? strerror(errno) : "unexpected end of file");
            return TR_ERR_IO;
        }
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return TR_OK;
}

char *prepare_path(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = tr_malloc(la + lb + 2);
    if (!p)
        return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
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

enum tr_status prepare_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return TR_OK;
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return TR_ERR_IO;
    return lstat(path, &st) == 0 ? TR_ERR_IO : TR_OK;
}

enum tr_status prepare_mkdir_p(const char *dir)
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

/* ---- sinks ----------------------------------------------------------------------------- */

enum tr_status prepare_sink_open(struct prepare_sink *s, const char *dir, const char *const *names)
{
    memset(s, 0, sizeof *s);
    for (int c = 0; c < PREPARE_NCOL; c++)
        s->fd[c] = -1;
    for (int c = 0; c < PREPARE_NCOL; c++) {
        s->path[c] = prepare_path(dir, names[c]);
        if (!s->path[c])
            return TR_ERR_NOMEM;
        s->fd[c] = open(s->path[c], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (s->fd[c] < 0) {
            LOG_ERROR("cannot create '%s': %s", s->path[c], strerror(errno));
            return TR_ERR_IO;
        }
    }
    return TR_OK;
}

enum tr_status prepare_sink_put(struct prepare_sink *s, const struct prepare_chunk *c, int64_t r0, int64_t n,
                                const size_t *width)
{
    if (n <= 0)
        return TR_OK;
    for (int k = 0; k < PREPARE_NCOL; k++) {
        size_t w = width[k];
        TR_CHECK(prepare_write_all(s->fd[k], c->col[k] + (size_t)r0 * w, (size_t)n * w, s->path[k]));
        s->bytes += (int64_t)((size_t)n * w);
    }
    s->rows += n;
    return TR_OK;
}

enum tr_status prepare_sink_move_tail(struct prepare_sink *from, struct prepare_sink *to, int64_t n,
                                      const size_t *width)
{
    enum tr_status rc = TR_OK;
    size_t bufsz = 1u << 20;
    char *buf = tr_malloc(bufsz);
    if (!buf)
        return TR_ERR_NOMEM;
    TR_ASSERT(n >= 0 && n <= from->rows);
    for (int k = 0; k < PREPARE_NCOL && n > 0; k++) {
        int64_t w = (int64_t)width[k];
        int64_t start = (from->rows - n) * w, left = n * w, off = start;
        while (left > 0) {
            size_t m = left < (int64_t)bufsz ? (size_t)left : bufsz;
            TR_CHECK_GOTO(prepare_pread_all(from->fd[k], buf, m, off, from->path[k]), rc, exit);
            TR_CHECK_GOTO(prepare_write_all(to->fd[k], buf, m, to->path[k]), rc, exit);
            off += (int64_t)m;
            left -= (int64_t)m;
        }
        if (ftruncate(from->fd[k], (off_t)start) != 0 || lseek(from->fd[k], (off_t)start, SEEK_SET) < 0) {
            LOG_ERROR("cannot truncate '%s': %s", from->path[k], strerror(errno));
            rc = TR_ERR_IO;
            goto exit;
        }
        from->bytes -= n * w;
        to->bytes += n * w;
    }
    from->rows -= n;
    to->rows += n;
exit:
    tr_free(buf);
    return rc;
}

enum tr_status prepare_sink_close(struct prepare_sink *s)
{
    enum tr_status rc = TR_OK;
    for (int c = 0; c < PREPARE_NCOL; c++) {
        if (s->path[c] && s->fd[c] >= 0 && close(s->fd[c]) != 0 && rc == TR_OK) {
            LOG_ERROR("cannot write '%s': %s", s->path[c], strerror(errno));
            rc = TR_ERR_IO;
        }
        s->fd[c] = -1;
        tr_free(s->path[c]);
        s->path[c] = NULL;
    }
    return rc;
}
