/* prepare_shuffle.c: the seeded shuffle of the training rows of `terarec data
 * prepare`. Row g (input order) gets key = mix(g + mix(seed + golden)), mix being
 * the splitmix64 finaliser (km_mix64 of kernels/kmath.h, a bijection, so keys never
 * tie), and the output lists the rows by ascending key. Rows that fit in
 * --memory_limit are sorted in one go; otherwise they are scattered into 2^k
 * bucket files by the top k key bits and each bucket is sorted alone, which yields
 * the same bytes. It does not shuffle the test split (the seed keeps it in input
 * order). */
#define TR_SUBSYS TR_SUB_DATA
#define _GNU_SOURCE
#include "prepare_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../kernels/kmath.h"
#include "../kernels/sort.h"

#define BLOCK_ROWS 65536 /* rows read or written per column per system call */

uint64_t prepare_shuffle_seed(uint64_t seed)
{
    return km_mix64(seed + 0x9e3779b97f4a7c15ull);
}

uint64_t prepare_shuffle_key(uint64_t s, uint64_t g)
{
    return km_mix64(g + s);
}

struct bucket {
    char *buf;       /* (cap) pending records */
    size_t fill;
    int64_t count;   /* records written to this bucket */
};

static char *bucket_path(const char *dir, int b)
{
    char name[32];
    snprintf(name, sizeof name, "shuffle-%05d.bkt", b);
    return tr_file_join(dir, name);
}

static enum tr_status bucket_flush(const char *dir, int b, struct bucket *bk)
{
    if (!bk->fill)
        return TR_OK;
    enum tr_status rc = TR_OK;
    char *path = bucket_path(dir, b);
    if (!path)
        return TR_ERR_NOMEM;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        LOG_ERROR("cannot create '%s': %s", path, strerror(errno));
        rc = TR_ERR_IO;
    } else {
        rc = tr_file_write_all(fd, bk->buf, bk->fill, path);
        if (close(fd) != 0 && rc == TR_OK) {
            LOG_ERROR("cannot write '%s': %s", path, strerror(errno));
            rc = TR_ERR_IO;
        }
    }
    bk->fill = 0;
    tr_free(path);
    return rc;
}

static void progress(const struct prepare_shuffle_cfg *cfg, double *last, int64_t done)
{
    if (!cfg->progress)
        return;
    double now = tr_clock_now();
    if (now - *last < 0.2)
        return;
    *last = now;
    char suffix[64];
    int64_t n = cfg->nrows;
    snprintf(suffix, sizeof suffix, "%s %lld / %lld rows ", done <= n ? "read" : "write",
             (long long)(done <= n ? done : done - n), (long long)n);
    prepare_progress_draw("shuffle", cfg->nrows ? (double)done / (2.0 * (double)cfg->nrows) : 1.0, suffix);
}

enum tr_status prepare_shuffle(const struct prepare_shuffle_cfg *cfg, int *nbuckets, int64_t *bytes)
{
    enum tr_status rc = TR_OK;
    int src[PREPARE_NCOL], dst[PREPARE_NCOL];
    char *src_path[PREPARE_NCOL], *dst_path[PREPARE_NCOL];
    for (int c = 0; c < PREPARE_NCOL; c++) {
        src[c] = dst[c] = -1;
        src_path[c] = dst_path[c] = NULL;
    }
    size_t row_bytes = 0, colo[PREPARE_NCOL];
    for (int c = 0; c < PREPARE_NCOL; c++) {
        colo[c] = row_bytes;
        row_bytes += cfg->width[c];
    }
    const size_t rec = 8 + row_bytes;
    const int64_t n = cfg->nrows;
    char *blk = NULL, *mem = NULL, *bkbuf = NULL;
    struct bucket *bk = NULL;
    struct prepare_kv *pairs = NULL, *tmp = NULL;
    int64_t done = 0;
    double last = 0;
    *bytes = 0;

    /* 2^k buckets so that one bucket's records, keys and sort scratch fit in half the limit */
    int bits = 0;
    while (bits < 16 &&
           (double)(n >> bits) * (double)(rec + 2 * sizeof(struct prepare_kv)) > (double)cfg->memory_limit / 2)
        bits++;
    const int B = 1 << bits;
    *nbuckets = B;

    for (int c = 0; c < PREPARE_NCOL; c++) {
        src_path[c] = tr_file_join(cfg->src_dir, cfg->names[c]);
        dst_path[c] = tr_file_join(cfg->dst_dir, cfg->names[c]);
        if (!src_path[c] || !dst_path[c]) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        src[c] = open(src_path[c], O_RDONLY | O_CLOEXEC);
        if (src[c] < 0) {
            LOG_ERROR("cannot open '%s': %s", src_path[c], strerror(errno));
            rc = TR_ERR_IO;
            goto exit;
        }
        off_t size = lseek(src[c], 0, SEEK_END);
        if (size != (off_t)(n * (int64_t)cfg->width[c])) {
            LOG_ERROR("'%s' holds %lld bytes, expected %lld", src_path[c], (long long)size,
                      (long long)(n * (int64_t)cfg->width[c]));
            rc = TR_ERR_FORMAT;
            goto exit;
        }
    }

    /* ---- scatter: records (key, row) into the buckets, or into memory when B == 1 */
    blk = tr_malloc((size_t)BLOCK_ROWS * row_bytes);
    bk = tr_calloc((size_t)B, sizeof *bk);
    if (!blk || !bk) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    size_t bcap = 0;
    if (B == 1) {
        mem = tr_malloc((size_t)n * rec + 1);
        if (!mem) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
    } else {
        size_t per = (size_t)(cfg->memory_limit / 4 / B);
        per = TR_MAX(per, (size_t)64 << 10);
        per = TR_MIN(per, (size_t)4 << 20);
        bcap = TR_MAX(per / rec, 1) * rec;
        bkbuf = tr_malloc((size_t)B * bcap);
        if (!bkbuf) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        for (int b = 0; b < B; b++)
            bk[b].buf = bkbuf + (size_t)b * bcap;
    }
    const uint64_t s = prepare_shuffle_seed(cfg->seed);
    for (int64_t base = 0; base < n; base += BLOCK_ROWS) {
        int64_t m = TR_MIN((int64_t)BLOCK_ROWS, n - base);
        char *colp[PREPARE_NCOL];
        for (int c = 0; c < PREPARE_NCOL; c++) {
            colp[c] = blk + (size_t)BLOCK_ROWS * colo[c];
            TR_CHECK_GOTO(tr_file_pread_all(src[c], colp[c], (size_t)m * cfg->width[c],
                                            base * (int64_t)cfg->width[c], src_path[c]),
                          rc, exit);
        }
        for (int64_t i = 0; i < m; i++) {
            uint64_t key = prepare_shuffle_key(s, (uint64_t)(base + i));
            char *d;
            if (B == 1) {
                d = mem + (size_t)(base + i) * rec;
            } else {
                struct bucket *b = &bk[key >> (64 - bits)];
                if (b->fill + rec > bcap)
                    TR_CHECK_GOTO(bucket_flush(cfg->scratch_dir, (int)(b - bk), b), rc, exit);
                d = b->buf + b->fill;
                b->fill += rec;
                b->count++;
            }
            memcpy(d, &key, 8);
            for (int c = 0; c < PREPARE_NCOL; c++)
                memcpy(d + 8 + colo[c], colp[c] + (size_t)i * cfg->width[c], cfg->width[c]);
        }
        done += m;
        progress(cfg, &last, done);
        if (prepare_interrupted) {
            rc = TR_ERR_INTERRUPTED;
            goto exit;
        }
    }
    if (B == 1)
        bk[0].count = n;
    for (int b = 0; b < B && B > 1; b++)
        TR_CHECK_GOTO(bucket_flush(cfg->scratch_dir, b, &bk[b]), rc, exit);
    tr_free(bkbuf);
    bkbuf = NULL;
    for (int c = 0; c < PREPARE_NCOL; c++) { /* the staged copy is no longer needed: free the disk */
        close(src[c]);
        src[c] = -1;
        unlink(src_path[c]);
    }

    /* ---- sort each bucket by key and append its rows to the output columns */
    int64_t maxb = 0;
    for (int b = 0; b < B; b++)
        maxb = TR_MAX(maxb, bk[b].count);
    pairs = tr_malloc((size_t)maxb * sizeof *pairs + 1);
    tmp = tr_malloc((size_t)maxb * sizeof *tmp + 1);
    if (!pairs || !tmp) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    for (int c = 0; c < PREPARE_NCOL; c++) {
        dst[c] = open(dst_path[c], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (dst[c] < 0) {
            LOG_ERROR("cannot create '%s': %s", dst_path[c], strerror(errno));
            rc = TR_ERR_IO;
            goto exit;
        }
    }
    int64_t o = 0; /* rows pending in blk (reused as the column output block) */
    for (int b = 0; b < B; b++) {
        int64_t nb = bk[b].count;
        if (B > 1) {
            if (nb == 0)
                continue;
            char *np = tr_realloc(mem, (size_t)nb * rec);
            if (!np) {
                rc = TR_ERR_NOMEM;
                goto exit;
            }
            mem = np;
            char *path = bucket_path(cfg->scratch_dir, b);
            if (!path) {
                rc = TR_ERR_NOMEM;
                goto exit;
            }
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                LOG_ERROR("cannot open '%s': %s", path, strerror(errno));
                rc = TR_ERR_IO;
            } else {
                rc = tr_file_pread_all(fd, mem, (size_t)nb * rec, 0, path);
                close(fd);
                unlink(path);
            }
            tr_free(path);
            if (rc != TR_OK)
                goto exit;
        }
        for (int64_t i = 0; i < nb; i++) {
            memcpy(&pairs[i].key, mem + (size_t)i * rec, 8);
            pairs[i].val = (uint64_t)i;
        }
        const struct prepare_kv *sorted = kern_sort_radix(pairs, tmp, nb, sizeof *pairs, 0, 64);
        for (int64_t i = 0; i < nb; i++) {
            const char *r = mem + (size_t)sorted[i].val * rec + 8;
            for (int c = 0; c < PREPARE_NCOL; c++)
                memcpy(blk + (size_t)BLOCK_ROWS * colo[c] + (size_t)o * cfg->width[c], r + colo[c], cfg->width[c]);
            if (++o == BLOCK_ROWS) {
                for (int c = 0; c < PREPARE_NCOL; c++)
                    TR_CHECK_GOTO(tr_file_write_all(dst[c], blk + (size_t)BLOCK_ROWS * colo[c],
                                                    (size_t)o * cfg->width[c], dst_path[c]),
                                  rc, exit);
                *bytes += o * (int64_t)row_bytes;
                o = 0;
            }
        }
        done += nb;
        progress(cfg, &last, done);
        if (prepare_interrupted) {
            rc = TR_ERR_INTERRUPTED;
            goto exit;
        }
    }
    for (int c = 0; c < PREPARE_NCOL; c++)
        TR_CHECK_GOTO(tr_file_write_all(dst[c], blk + (size_t)BLOCK_ROWS * colo[c], (size_t)o * cfg->width[c],
                                        dst_path[c]),
                      rc, exit);
    *bytes += o * (int64_t)row_bytes;
    for (int c = 0; c < PREPARE_NCOL; c++) {
        int r = close(dst[c]);
        dst[c] = -1;
        if (r != 0) {
            LOG_ERROR("cannot write '%s': %s", dst_path[c], strerror(errno));
            rc = TR_ERR_IO;
            goto exit;
        }
    }
exit:
    if (cfg->progress)
        prepare_progress_clear();
    for (int c = 0; c < PREPARE_NCOL; c++) {
        if (src[c] >= 0)
            close(src[c]);
        if (dst[c] >= 0)
            close(dst[c]);
        tr_free(src_path[c]);
        tr_free(dst_path[c]);
    }
    tr_free(blk);
    tr_free(mem);
    tr_free(bkbuf);
    tr_free(bk);
    tr_free(pairs);
    tr_free(tmp);
    return rc;
}
