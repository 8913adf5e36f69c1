/* prepare_lists.c: the list columns of `terarec data prepare --list_columns`
 * (multi-hot TSV: a field of several hex values) into the variable-hotness
 * layout of docs/formats.md. Through the write pass and the shuffle a list row is
 * of a fixed width (its length as u32, then --max_hotness ids, the unused ones 0);
 * here each list column of each split becomes its ids one after the other
 * (cat_<i>.bin) and the per-sample lengths (cat_<i>_lengths.bin, uint8, uint16 or
 * int32 by the longest list found, which is also the spec's max_hotness). It
 * does not parse (prepare_parse.c) nor map values to ids (prepare_pass.c). */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../loader_svc/feature_spec.h"

#define LIST_BLOCK 65536 /* rows a read */

struct lfile {
    int fd;
    int64_t rows;
};

/* Opens dir/<split>/cat_<i>.bin of rows of width w. */
static enum tr_status open_rows(const char *path, size_t w, struct lfile *f)
{
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        LOG_ERROR("cannot open '%s': %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    if ((size_t)st.st_size % w) {
        LOG_ERROR("'%s' holds %lld bytes, not rows of %zu", path, (long long)st.st_size, w);
        return TR_ERR_FORMAT;
    }
    f->rows = (int64_t)((size_t)st.st_size / w);
    return TR_OK;
}

/* The lists of column i in split s: pass 0 finds the longest (*most), pass 1
 * writes the ids and the lengths (len_size bytes each). */
static enum tr_status one(const char *dir, const char *split, int i, size_t idw, int max_hotness, int pass,
                          int len_size, int32_t *most, int64_t *bytes, uint8_t *buf, uint8_t *ids)
{
    enum tr_status rc = TR_OK;
    const size_t w = 4 + (size_t)max_hotness * idw;
    char rel[96], *src = NULL, *dst = NULL, *lens = NULL;
    struct lfile f = {-1, 0};
    int fo = -1, fl = -1;
    snprintf(rel, sizeof rel, "%s/cat_%d.bin", split, i);
    TR_CHECK_GOTO(tr_file_join_to(dir, rel, &src), rc, exit);
    TR_CHECK_GOTO(open_rows(src, w, &f), rc, exit);
    if (pass == 1) {
        snprintf(rel, sizeof rel, "%s/cat_%d.bin.ids", split, i);
        TR_CHECK_GOTO(tr_file_join_to(dir, rel, &dst), rc, exit);
        snprintf(rel, sizeof rel, "%s/cat_%d_lengths.bin", split, i);
        TR_CHECK_GOTO(tr_file_join_to(dir, rel, &lens), rc, exit);
        fo = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        fl = fo < 0 ? -1 : open(lens, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fo < 0 || fl < 0) {
            LOG_ERROR("cannot create '%s': %s", fo < 0 ? dst : lens, strerror(errno));
            rc = TR_ERR_IO;
            goto exit;
        }
    }
    for (int64_t r0 = 0; r0 < f.rows && rc == TR_OK; r0 += LIST_BLOCK) {
        const int64_t n = TR_MIN((int64_t)LIST_BLOCK, f.rows - r0);
        TR_CHECK_GOTO(tr_file_pread_all(f.fd, buf, (size_t)n * w, r0 * (int64_t)w, src), rc, exit);
        size_t nid = 0;
        for (int64_t k = 0; k < n; k++) {
            const uint8_t *row = buf + (size_t)k * w;
            uint32_t len;
            memcpy(&len, row, 4);
            if (len > (uint32_t)max_hotness) {
                LOG_ERROR("'%s': row %lld has a list of %u ids, over %d", src, (long long)(r0 + k), len, max_hotness);
                rc = TR_ERR_INTERNAL;
                goto exit;
            }
            *most = TR_MAX(*most, (int32_t)len);
            if (pass == 0)
                continue;
            memcpy(ids + nid * idw, row + 4, (size_t)len * idw);
            nid += len;
            /* the lengths after the ids in buf's place: this row is read already */
            uint8_t *l = buf + (size_t)k * (size_t)len_size;
            if (len_size == 1)
                *l = (uint8_t)len;
            else if (len_size == 2) {
                const uint16_t v = (uint16_t)len;
                memcpy(l, &v, 2);
            } else {
                memcpy(l, &len, 4);
            }
        }
        if (pass == 1) {
            TR_CHECK_GOTO(tr_file_write_all(fo, ids, nid * idw, dst), rc, exit);
            TR_CHECK_GOTO(tr_file_write_all(fl, buf, (size_t)n * (size_t)len_size, lens), rc, exit);
            *bytes += (int64_t)(nid * idw) + n * len_size;
        }
        if (prepare_interrupted)
            rc = TR_ERR_INTERRUPTED;
    }
    if (pass == 1 && rc == TR_OK) {
        const int e1 = close(fo), e2 = close(fl);
        fo = fl = -1;
        if (e1 || e2) {
            LOG_ERROR("cannot write '%s': %s", e1 ? dst : lens, strerror(errno));
            rc = TR_ERR_IO;
        } else if (rename(dst, src) != 0) {
            LOG_ERROR("cannot rename '%s' to '%s': %s", dst, src, strerror(errno));
            rc = TR_ERR_IO;
        }
    }
exit:
    if (f.fd >= 0)
        close(f.fd);
    if (fo >= 0)
        close(fo);
    if (fl >= 0)
        close(fl);
    if (rc != TR_OK && dst)
        unlink(dst);
    tr_free(src);
    tr_free(dst);
    tr_free(lens);
    return rc;
}

enum tr_status prepare_lists_compact(const char *dir, uint32_t lists, const size_t *idw, int max_hotness,
                                     int32_t *most, int64_t *bytes)
{
    enum tr_status rc = TR_OK;
    *bytes = 0;
    uint8_t *buf = tr_malloc((size_t)LIST_BLOCK * (4 + (size_t)max_hotness * 4));
    uint8_t *ids = tr_malloc((size_t)LIST_BLOCK * (size_t)max_hotness * 4);
    if (!buf || !ids)
        rc = TR_ERR_NOMEM;
    for (int i = 0; i < PREPARE_CAT && rc == TR_OK; i++) {
        most[i] = 0;
        if (!((lists >> i) & 1u))
            continue;
        for (int pass = 0; pass < 2 && rc == TR_OK; pass++) {
            const char *ld = feature_spec_lengths_dtype(TR_MAX(most[i], 1)); /* after pass 0: the longest */
            const int len_size = !strcmp(ld, "uint8") ? 1 : !strcmp(ld, "uint16") ? 2 : 4;
            for (int s = 0; s < 2 && rc == TR_OK; s++)
                rc = one(dir, s ? "test" : "train", i, idw[i], max_hotness, pass, len_size, &most[i], bytes, buf,
                         ids);
        }
        most[i] = TR_MAX(most[i], 1); /* a column of empty lists still has hotness 1 at most */
    }
    tr_free(buf);
    tr_free(ids);
    return rc;
}
