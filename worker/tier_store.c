/* tier_store.c: a tier's backing stores (tier_internal.h) and its sizing
 * (tier.h's tier_plan_slots and tier_plan_bytes). A store holds every row of a
 * slice as a record (the row, then its optimizer state) in host memory or in a
 * file of its own, allocated to its full size when opened and unlinked at once
 * (nothing outlives the process, however it ends). Files are read in extents of
 * up to 1 MiB aligned to 4 KiB that cover neighbouring rows, and written in runs
 * of consecutive rows, through the page cache. A row never written is not read:
 * its initial values are computed (kmath.h's initialiser, the backend's fill).
 * It keeps no cache of its own and does not order I/O between threads: callers
 * never touch one row from two threads at once. */
#define TR_SUBSYS TR_SUB_TRAIN
#define _GNU_SOURCE
#include "tier_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/sysmem.h"
#include "../kernels/kmath.h"

/* ---- sizing ------------------------------------------------------------------------- */

/* Slots of a table of `rows` rows at fraction f, at least `least`; rows: whole. */
static int64_t slots_at(double f, int64_t rows, int64_t least)
{
    double want = ceil(f * (double)rows);
    int64_t s = want >= (double)rows ? rows : (int64_t)want;
    if (s < least)
        s = least;
    return s < rows ? s : rows;
}

static int64_t bytes_at(double f, int ntables, const int64_t *rows, const int64_t *bpr, int64_t least)
{
    int64_t b = 0;
    for (int t = 0; t < ntables; t++)
        b += bpr[t] ? slots_at(f, rows[t], least) * bpr[t] : 0;
    return b;
}

enum tr_status tier_plan_slots(const struct job_tier *jt, int ntables, const int64_t *rows,
                               const int64_t *bytes_per_row, int64_t max_ids, int64_t *slots)
{
    const int64_t least = 2 * (max_ids > 0 ? max_ids : 1);
    double f = jt->cache_fraction;
    if (jt->store == JOB_STORE_MEMORY) {
        f = 1.0;
    } else if (jt->cache_bytes > 0) {
        const int64_t lo = bytes_at(0.0, ntables, rows, bytes_per_row, least);
        if (lo > jt->cache_bytes) {
            char a[32], b[32];
            LOG_ERROR("--embedding_cache %s: this worker's tables need at least %s of cache (room for two batches "
                      "of ids a table)",
                      tr_sysmem_human(jt->cache_bytes, a, sizeof a), tr_sysmem_human(lo, b, sizeof b));
            LOG_HINT("give a larger --embedding_cache, or a smaller --batch_size");
            return TR_ERR_NOMEM;
        }
        /* the largest fraction that fits: bytes_at grows with f */
        double a = 0.0, b = 1.0;
        if (bytes_at(1.0, ntables, rows, bytes_per_row, least) <= jt->cache_bytes) {
            a = 1.0;
        } else {
            for (int it = 0; it < 60; it++) {
                const double m = 0.5 * (a + b);
                if (bytes_at(m, ntables, rows, bytes_per_row, least) <= jt->cache_bytes)
                    a = m;
                else
                    b = m;
            }
        }
        f = a;
    }
    for (int t = 0; t < ntables; t++)
        slots[t] = slots_at(f, rows[t], least);
    return TR_OK;
}

void tier_plan_bytes(const struct tier_cfg *c, const struct tier_table *t, int n, int backend_host_memory,
                     struct tier_bytes *out)
{
    memset(out, 0, sizeof *out);
    const int64_t m = c->max_ids > 0 ? c->max_ids : 1;
    int64_t max_rec = 1;
    for (int i = 0; i < n; i++) {
        const int64_t C = t[i].slots, rec = t[i].width + t[i].state_width;
        int64_t hcap = 1;
        while (hcap < 2 * C)
            hcap *= 2;
        max_rec = TR_MAX(max_rec, rec);
        out->cache += C * rec * (int64_t)sizeof(float);
        /* slot map, the hash, the remaps, the job's lists and the staging */
        out->host += C * 17 + hcap * 4 + 2 * m * 4 + m * 8 * 10 + 2 * m * rec * (int64_t)sizeof(float);
        const int64_t store = t[i].rows * rec * (int64_t)sizeof(float);
        out->host += (t[i].rows + 63) / 64 * 8; /* written rows */
        if (c->store == JOB_STORE_HOST)
            out->host += store;
        else
            out->disk += (store + (int64_t)TIER_IO_ALIGN - 1) / (int64_t)TIER_IO_ALIGN * (int64_t)TIER_IO_ALIGN;
    }
    out->host += (int64_t)(c->io_threads > 0 ? c->io_threads : 1) * (int64_t)(TIER_IO_BYTES + TIER_IO_ALIGN);
    if (!backend_host_memory)
        out->backend = m * max_rec * (int64_t)sizeof(float) + m * 8 + (int64_t)n * m * 4;
}

/* ---- opening ------------------------------------------------------------------------ */

enum tr_status tier_check_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        LOG_ERROR("--table_store file:%s: %s", dir, stat(dir, &sb) != 0 ? strerror(errno) : strerror(ENOTDIR));
        LOG_HINT("give a directory on a local disk that this user can write (it must exist)");
        return TR_ERR_IO;
    }
    char path[TR_OPT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/.terarec-tier-probe-%ld", dir, (long)getpid());
    const int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        LOG_ERROR("--table_store file:%s: cannot create files there: %s", dir, strerror(errno));
        LOG_HINT("the directory must be writable by this user (and on a local disk: its files are read at random)");
        return TR_ERR_IO;
    }
    close(fd);
    unlink(path);
    return TR_OK;
}

static enum tr_status open_file(struct tier_store *s, const struct tier_cfg *c, const struct tier_table *d)
{
    TR_CHECK(tier_check_dir(c->dir));
    char path[TR_OPT_PATH_MAX + 128];
    char tagbuf[32];
    const char *tag = c->tag;
    if (!tag || !*tag) {
        snprintf(tagbuf, sizeof tagbuf, "pid%ld", (long)getpid());
        tag = tagbuf;
    }
    snprintf(path, sizeof path, "%s/terarec-tier-%s-t%d.bin", c->dir, tag, d->table);
    s->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (s->fd < 0) {
        LOG_ERROR("--table_store file:%s: cannot create '%s': %s", c->dir, path, strerror(errno));
        LOG_HINT("the directory must be writable by this user (and on a local disk: its files are read at random)");
        return TR_ERR_IO;
    }
    unlink(path); /* the open descriptor keeps it; nothing is left behind */
    const int64_t bytes = d->rows * s->rec * (int64_t)sizeof(float);
    s->file_bytes = (bytes + (int64_t)TIER_IO_ALIGN - 1) / (int64_t)TIER_IO_ALIGN * (int64_t)TIER_IO_ALIGN;
    int err = fallocate(s->fd, 0, 0, (off_t)s->file_bytes) == 0 ? 0 : errno;
    if (err == EOPNOTSUPP || err == ENOSYS) { /* a file system without it: check the room, then size it */
        struct statvfs vs;
        if (fstatvfs(s->fd, &vs) == 0 && (int64_t)vs.f_bavail * (int64_t)vs.f_frsize < s->file_bytes)
            err = ENOSPC;
        else
            err = ftruncate(s->fd, (off_t)s->file_bytes) == 0 ? 0 : errno;
    }
    if (err) {
        struct statvfs vs;
        char need[32], have[32] = "?";
        if (fstatvfs(s->fd, &vs) == 0)
            tr_sysmem_human((int64_t)vs.f_bavail * (int64_t)vs.f_frsize, have, sizeof have);
        LOG_ERROR("--table_store file:%s: cannot allocate %s for table %d (%lld rows of %lld floats): %s (%s free "
                  "there)",
                  c->dir, tr_sysmem_human(s->file_bytes, need, sizeof need), d->table, (long long)d->rows, (long long)s->rec,
                  strerror(err), have);
        LOG_HINT("free space there or give file: a larger local disk; 'terarec plan --disk_per_node' counts the "
                 "files a job needs");
        return TR_ERR_IO;
    }
    return TR_OK;
}

enum tr_status tier_store_open(struct tier_store *s, const struct tier_cfg *c, const struct tier_table *d)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->kind = c->store;
    s->d = *d;
    s->rec = d->width + d->state_width;
    s->seed = c->seed;
    s->made = tr_calloc((size_t)((d->rows + 63) / 64), sizeof *s->made);
    if (!s->made)
        return TR_ERR_NOMEM;
    if (c->store == JOB_STORE_FILE)
        return open_file(s, c, d);
    s->mem_bytes = (size_t)d->rows * (size_t)s->rec * sizeof(float);
    void *p = NULL;
    enum tr_status rc = tr_big_alloc(s->mem_bytes, &p); /* pages stay unbacked until a row is written */
    if (rc != TR_OK) {
        char b[32];
        LOG_ERROR("--table_store host: out of host memory for table %d's store (%s)", d->table,
                  tr_sysmem_human((int64_t)s->mem_bytes, b, sizeof b));
        LOG_HINT("use --table_store file:DIR on a local disk, or more workers");
        return rc;
    }
    s->mem = p;
    return TR_OK;
}

void tier_store_close(struct tier_store *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    tr_big_free(s->mem, s->mem_bytes);
    s->mem = NULL;
    tr_free(s->made);
    s->made = NULL;
}

void tier_store_reset(struct tier_store *s)
{
    memset(s->made, 0, (size_t)((s->d.rows + 63) / 64) * sizeof *s->made);
}

/* ---- rows ----------------------------------------------------------------------------- */

static int is_made(const struct tier_store *s, int64_t r)
{
    return (int)((__atomic_load_n(&s->made[r >> 6], __ATOMIC_RELAXED) >> (r & 63)) & 1u);
}

static void set_made(struct tier_store *s, int64_t r)
{
    __atomic_fetch_or(&s->made[r >> 6], (uint64_t)1 << (r & 63), __ATOMIC_RELAXED);
}

/* Row r's initial record: what dlrm_init_params fills an in-memory table with. */
static void init_record(const struct tier_store *s, int64_t r, float *rec)
{
    const struct tier_table *d = &s->d;
    const uint64_t e0 = (uint64_t)(r * d->dim + d->col0);
    for (int64_t c = 0; c < d->width; c++)
        rec[c] = km_init_embedding(s->seed, (uint64_t)d->table, e0 + (uint64_t)c, d->bound);
    for (int64_t c = 0; c < d->state_width; c++)
        rec[d->width + c] = d->state_init;
}

static enum tr_status full_pread(const struct tier_store *s, char *buf, size_t n, int64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(s->fd, buf + got, n - got, (off_t)(off + (int64_t)got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            LOG_ERROR("table store: reading table %d's file at %lld: %s", s->d.table, (long long)(off + (int64_t)got),
                      k < 0 ? strerror(errno) : "unexpected end of file");
            return TR_ERR_IO;
        }
        got += (size_t)k;
    }
    return TR_OK;
}

static enum tr_status full_pwrite(const struct tier_store *s, const char *buf, size_t n, int64_t off)
{
    size_t put = 0;
    while (put < n) {
        ssize_t k = pwrite(s->fd, buf + put, n - put, (off_t)(off + (int64_t)put));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            LOG_ERROR("table store: writing table %d's file at %lld: %s", s->d.table, (long long)(off + (int64_t)put),
                      k < 0 ? strerror(errno) : "no progress");
            LOG_HINT("the file's blocks were allocated when training started; check the disk");
            return TR_ERR_IO;
        }
        put += (size_t)k;
    }
    return TR_OK;
}

enum tr_status tier_store_read(const struct tier_store *s, const int64_t *pairs, int64_t n, float *dst,
                               struct tier_io *io)
{
    const int64_t rb = s->rec * (int64_t)sizeof(float);
    const size_t recb = (size_t)rb;
    int64_t j = 0;
    while (j < n) {
        const int64_t r = pairs[2 * j];
        if (!is_made(s, r)) {
            init_record(s, r, dst + j * s->rec);
            io->rows_init++;
            j++;
            continue;
        }
        if (s->kind == JOB_STORE_HOST) {
            memcpy(dst + j * s->rec, s->mem + r * s->rec, recb);
            io->bytes_read += rb;
            io->rows_read++;
            j++;
            continue;
        }
        /* an extent from row r's aligned start over the written rows that follow
         * within TIER_IO_GAP of each other and TIER_IO_BYTES in all */
        const int64_t lo = r * rb / (int64_t)TIER_IO_ALIGN * (int64_t)TIER_IO_ALIGN;
        int64_t hi = r * rb + rb, k = j + 1;
        while (k < n) {
            const int64_t rk = pairs[2 * k];
            if (!is_made(s, rk)) {
                k++; /* computed below; it does not end the extent */
                continue;
            }
            if (rk * rb - hi > TIER_IO_GAP || rk * rb + rb - lo > (int64_t)TIER_IO_BYTES)
                break;
            hi = rk * rb + rb;
            k++;
        }
        int64_t end = (hi + (int64_t)TIER_IO_ALIGN - 1) / (int64_t)TIER_IO_ALIGN * (int64_t)TIER_IO_ALIGN;
        if (end > s->file_bytes)
            end = s->file_bytes;
        TR_CHECK(full_pread(s, io->buf, (size_t)(end - lo), lo));
        io->bytes_read += end - lo;
        for (int64_t q = j; q < k; q++) {
            const int64_t rq = pairs[2 * q];
            if (!is_made(s, rq)) {
                init_record(s, rq, dst + q * s->rec);
                io->rows_init++;
            } else {
                memcpy(dst + q * s->rec, io->buf + (rq * rb - lo), recb);
                io->rows_read++;
            }
        }
        j = k;
    }
    return TR_OK;
}

enum tr_status tier_store_write(struct tier_store *s, const int64_t *pairs, int64_t n, const float *src,
                                struct tier_io *io)
{
    const int64_t rb = s->rec * (int64_t)sizeof(float);
    const size_t recb = (size_t)rb;
    const int64_t per = TR_MAX((int64_t)1, (int64_t)TIER_IO_BYTES / rb);
    int64_t j = 0;
    while (j < n) {
        const int64_t r = pairs[2 * j];
        if (s->kind == JOB_STORE_HOST) {
            memcpy(s->mem + r * s->rec, src + pairs[2 * j + 1] * s->rec, recb);
            set_made(s, r);
            io->bytes_written += rb;
            io->rows_written++;
            j++;
            continue;
        }
        /* a run of consecutive rows, gathered into one write */
        int64_t k = j;
        while (k < n && k - j < per && pairs[2 * k] == r + (k - j)) {
            memcpy(io->buf + (k - j) * rb, src + pairs[2 * k + 1] * s->rec, recb);
            k++;
        }
        TR_CHECK(full_pwrite(s, io->buf, (size_t)((k - j) * rb), r * rb));
        for (int64_t q = j; q < k; q++)
            set_made(s, pairs[2 * q]);
        io->bytes_written += (k - j) * rb;
        io->rows_written += k - j;
        j = k;
    }
    return TR_OK;
}

enum tr_status tier_store_read_range(const struct tier_store *s, int64_t r0, int64_t r1, float *buf,
                                     struct tier_io *io)
{
    const int64_t rb = s->rec * (int64_t)sizeof(float);
    if (s->kind == JOB_STORE_FILE) {
        for (int64_t a = r0; a < r1;) { /* only the spans of written rows are read */
            if (!is_made(s, a)) {
                init_record(s, a, buf + (a - r0) * s->rec);
                io->rows_init++;
                a++;
                continue;
            }
            int64_t b = a + 1;
            while (b < r1 && is_made(s, b) && (b + 1 - a) * rb <= (int64_t)TIER_IO_BYTES)
                b++;
            TR_CHECK(full_pread(s, (char *)(buf + (a - r0) * s->rec), (size_t)((b - a) * rb), a * rb));
            io->bytes_read += (b - a) * rb;
            io->rows_read += b - a;
            a = b;
        }
        return TR_OK;
    }
    for (int64_t r = r0; r < r1; r++) {
        if (is_made(s, r)) {
            memcpy(buf + (r - r0) * s->rec, s->mem + r * s->rec, (size_t)rb);
            io->rows_read++;
        } else {
            init_record(s, r, buf + (r - r0) * s->rec);
            io->rows_init++;
        }
    }
    return TR_OK;
}

enum tr_status tier_store_write_range(struct tier_store *s, int64_t r0, int64_t r1, const float *buf,
                                      struct tier_io *io)
{
    const int64_t rb = s->rec * (int64_t)sizeof(float);
    if (s->kind == JOB_STORE_FILE)
        TR_CHECK(full_pwrite(s, (const char *)buf, (size_t)((r1 - r0) * rb), r0 * rb));
    else
        memcpy(s->mem + r0 * s->rec, buf, (size_t)((r1 - r0) * rb));
    for (int64_t r = r0; r < r1; r++)
        set_made(s, r);
    io->bytes_written += (r1 - r0) * rb;
    io->rows_written += r1 - r0;
    return TR_OK;
}
