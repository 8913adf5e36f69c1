/* prepare_io.c: the sinks of `terarec data prepare` that append rows to the
 * PREPARE_NCOL column files of one split. No buffering of its own: callers write
 * large blocks. The generic file helpers (complete reads and writes, mkdir -p,
 * rm -rf) are common/file.h's. */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"

/* ---- sinks ----------------------------------------------------------------------------- */

enum tr_status prepare_sink_open(struct prepare_sink *s, const char *dir, const char *const *names)
{
    memset(s, 0, sizeof *s);
    for (int c = 0; c < PREPARE_NCOL; c++)
        s->fd[c] = -1;
    for (int c = 0; c < PREPARE_NCOL; c++) {
        TR_CHECK(tr_file_join_to(dir, names[c], &s->path[c]));
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
        TR_CHECK(tr_file_write_all(s->fd[k], c->col[k] + (size_t)r0 * w, (size_t)n * w, s->path[k]));
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
            TR_CHECK_GOTO(tr_file_pread_all(from->fd[k], buf, m, off, from->path[k]), rc, exit);
            TR_CHECK_GOTO(tr_file_write_all(to->fd[k], buf, m, to->path[k]), rc, exit);
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
