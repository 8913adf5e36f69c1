/* prepare_multihot.c: `terarec data prepare --multi_hot_sizes`: one-hot Criteo
 * made multi-hot the way MLPerf's DLRM-DCNv2 reference materializes it
 * (facebookresearch/dlrm torchrec_dlrm/multi_hot.py, Multihot's
 * __make_multi_hot_indices_tables, run by materialize_synthetic_multihot_dataset.py;
 * mlcommons/training recommendation_v2/torchrec_dlrm/README.MD step 3): for each
 * table of R rows and size h, in table order, a lookup of R rows whose row r is
 * [r, then h - 1 ids drawn uniform on [0, R)], drawn row after row from one
 * numpy legacy RandomState seeded once (np.random.seed(0), then
 * np.random.randint(0, R, size=(R, h - 1)) per table); each one-hot id r becomes
 * the h ids of row r, in the train and the test split alike. The draws are
 * numpy's bit for bit (MT19937 and RandomState's masked bounded integers), so the
 * bags are the reference's. It keeps one table's lookup in memory at a time; it
 * does not do the reference's "pareto" distribution. */
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

/* ---- numpy's legacy RandomState: MT19937 and randint ------------------------------------ */

#define MT_N 624
#define MT_M 397

struct mt {
    uint32_t key[MT_N];
    int pos;
};

/* numpy's mt19937_seed (RandomState.seed(int)): Knuth's initialisation. */
static void mt_seed(struct mt *m, uint32_t seed)
{
    for (int i = 0; i < MT_N; i++) {
        m->key[i] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)i + 1u;
    }
    m->pos = MT_N;
}

static void mt_refill(struct mt *m)
{
    static const uint32_t mag[2] = {0u, 0x9908b0dfu};
    int i = 0;
    for (; i < MT_N - MT_M; i++) {
        const uint32_t y = (m->key[i] & 0x80000000u) | (m->key[i + 1] & 0x7fffffffu);
        m->key[i] = m->key[i + MT_M] ^ (y >> 1) ^ mag[y & 1u];
    }
    for (; i < MT_N - 1; i++) {
        const uint32_t y = (m->key[i] & 0x80000000u) | (m->key[i + 1] & 0x7fffffffu);
        m->key[i] = m->key[i + (MT_M - MT_N)] ^ (y >> 1) ^ mag[y & 1u];
    }
    const uint32_t y = (m->key[MT_N - 1] & 0x80000000u) | (m->key[0] & 0x7fffffffu);
    m->key[MT_N - 1] = m->key[MT_M - 1] ^ (y >> 1) ^ mag[y & 1u];
    m->pos = 0;
}

static uint32_t mt_next32(struct mt *m)
{
    if (m->pos == MT_N)
        mt_refill(m);
    uint32_t y = m->key[m->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* n draws of RandomState.randint(0, high) (int64, high <= 2^32 here): numpy's
 * random_bounded_uint64_fill with its masked rejection, rng = high - 1 (no draw
 * at all when high is 1). */
static void randint_fill(struct mt *m, uint32_t high, int32_t *out, int64_t n)
{
    const uint32_t rng = high - 1u;
    if (rng == 0) {
        memset(out, 0, (size_t)n * sizeof *out);
        return;
    }
    uint32_t mask = rng;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        while ((v = mt_next32(m) & mask) > rng)
            ;
        out[i] = (int32_t)v;
    }
}

/* ---- the materialization ------------------------------------------------------------------- */

enum tr_status prepare_multihot_check(const int64_t *card, const int64_t *sizes, int64_t memory_limit)
{
    for (int t = 0; t < PREPARE_CAT; t++) {
        const int64_t h = sizes[t], need = card[t] * (h - 1) * (int64_t)sizeof(int32_t);
        if (h < 2 || need <= memory_limit)
            continue;
        LOG_ERROR("--multi_hot_sizes: the lookup of cat_%d (%lld rows x %lld ids) takes %.2f GiB, over "
                  "--memory_limit (%.2f GiB)",
                  t, (long long)card[t], (long long)(h - 1), (double)need / 1073741824.0,
                  (double)memory_limit / 1073741824.0);
        LOG_HINT("raise --memory_limit: one table's lookup is kept at a time (the reference keeps all of them)");
        return TR_ERR_ARG;
    }
    return TR_OK;
}

static int64_t read_id(const uint8_t *p, size_t w)
{
    if (w == 1)
        return (int8_t)p[0];
    if (w == 2) {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void write_id(uint8_t *p, size_t w, int32_t id)
{
    if (w == 1) {
        p[0] = (uint8_t)id;
    } else if (w == 2) {
        const int16_t v = (int16_t)id;
        memcpy(p, &v, 2);
    } else {
        memcpy(p, &id, 4);
    }
}

#define MH_BLOCK ((size_t)1 << 20) /* one-hot ids per read */

/* Rewrites dir/<name> (one-hot ids of width w) as h ids a row from the lookup
 * (rows, h - 1), through a temporary file renamed over it. *bytes += what is
 * written. A stored id outside [0, rows): TR_ERR_FORMAT (the file and row named). */
static enum tr_status rewrite(const char *path, size_t w, int64_t rows, int64_t h, const int32_t *lookup,
                              int64_t *bytes)
{
    enum tr_status rc = TR_OK;
    char *tmp = NULL;
    uint8_t *in = NULL, *out = NULL;
    int fi = -1, fo = -1;
    const size_t len = strlen(path);
    if (!(tmp = tr_malloc(len + 8)) || !(in = tr_malloc(MH_BLOCK * w)) || !(out = tr_malloc(MH_BLOCK * w * (size_t)h))) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    snprintf(tmp, len + 8, "%s.mh", path);
    fi = open(path, O_RDONLY | O_CLOEXEC);
    fo = fi < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fi < 0 || fo < 0) {
        LOG_ERROR("cannot open '%s': %s", fi < 0 ? path : tmp, strerror(errno));
        rc = TR_ERR_IO;
        goto exit;
    }
    struct stat st;
    if (fstat(fi, &st) != 0) {
        LOG_ERROR("cannot stat '%s': %s", path, strerror(errno));
        rc = TR_ERR_IO;
        goto exit;
    }
    if ((size_t)st.st_size % w) {
        LOG_ERROR("'%s' ends inside an id (%zu bytes left over)", path, (size_t)st.st_size % w);
        rc = TR_ERR_FORMAT;
        goto exit;
    }
    const int64_t total = (int64_t)((size_t)st.st_size / w);
    for (int64_t row0 = 0; row0 < total;) {
        const int64_t n = TR_MIN((int64_t)MH_BLOCK, total - row0);
        TR_CHECK_GOTO(tr_file_pread_all(fi, in, (size_t)n * w, row0 * (int64_t)w, path), rc, exit);
        int64_t bad = -1;
#pragma omp parallel for schedule(static) reduction(max : bad)
        for (int64_t i = 0; i < n; i++) {
            const int64_t id = read_id(in + (size_t)i * w, w);
            uint8_t *o = out + (size_t)(i * h) * w;
            if (id < 0 || id >= rows) {
                bad = TR_MAX(bad, i);
                continue;
            }
            write_id(o, w, (int32_t)id); /* the reference's first column: the id itself */
            for (int64_t k = 1; k < h; k++)
                write_id(o + (size_t)k * w, w, lookup[id * (h - 1) + k - 1]);
        }
        if (bad >= 0) {
            LOG_ERROR("'%s': row %lld holds id %lld, outside the table's %lld rows", path, (long long)(row0 + bad),
                      (long long)read_id(in + (size_t)bad * w, w), (long long)rows);
            rc = TR_ERR_FORMAT;
            goto exit;
        }
        TR_CHECK_GOTO(tr_file_write_all(fo, out, (size_t)(n * h) * w, tmp), rc, exit);
        *bytes += n * h * (int64_t)w;
        row0 += n;
        if (prepare_interrupted) {
            rc = TR_ERR_INTERRUPTED;
            goto exit;
        }
    }
    if (close(fo) != 0) {
        fo = -1;
        LOG_ERROR("cannot write '%s': %s", tmp, strerror(errno));
        rc = TR_ERR_IO;
        goto exit;
    }
    fo = -1;
    if (rename(tmp, path) != 0) {
        LOG_ERROR("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        rc = TR_ERR_IO;
    }
exit:
    if (fi >= 0)
        close(fi);
    if (fo >= 0)
        close(fo);
    if (rc != TR_OK && tmp)
        unlink(tmp);
    tr_free(tmp);
    tr_free(in);
    tr_free(out);
    return rc;
}

enum tr_status prepare_multihot(const struct prepare_mh_cfg *c, int64_t *bytes)
{
    enum tr_status rc = TR_OK;
    struct mt *m = tr_malloc(sizeof *m);
    if (!m)
        return TR_ERR_NOMEM;
    mt_seed(m, c->seed);
    *bytes = 0;
    for (int t = 0; t < PREPARE_CAT && rc == TR_OK; t++) {
        const int64_t h = c->sizes[t], rows = c->card[t];
        if (h < 2)
            continue; /* (rows, 0): the reference draws nothing for it */
        int32_t *lookup = tr_malloc((size_t)(rows * (h - 1)) * sizeof *lookup);
        if (!lookup) {
            rc = TR_ERR_NOMEM;
            break;
        }
        if (c->progress)
            prepare_progress_draw("multi-hot", (double)t / PREPARE_CAT, "");
        randint_fill(m, (uint32_t)rows, lookup, rows * (h - 1));
        for (int s = 0; s < 2 && rc == TR_OK; s++) {
            char *path = NULL;
            char rel[64];
            snprintf(rel, sizeof rel, "%s/cat_%d.bin", s ? "test" : "train", t);
            rc = tr_file_join_to(c->dir, rel, &path);
            if (rc == TR_OK)
                rc = rewrite(path, c->width[t], rows, h, lookup, bytes);
            tr_free(path);
        }
        tr_free(lookup);
    }
    if (c->progress)
        prepare_progress_clear();
    tr_free(m);
    return rc;
}
